//! Busy-polling /dev/fuse while requests keep coming (`-o poll_us=N`).
//!
//! fuser gives each worker its own /dev/fuse descriptor (`clone_fd`, our
//! default) and retries a read that fails with EAGAIN at once. So making the
//! session's own descriptor non-blocking turns exactly one worker, the one
//! that reads it, into a poller that spins on the request queue, while the
//! others keep sleeping on their cloned descriptors. A [`PollGate`] decides
//! when: every request calls [`Poller::touch`], which makes the descriptor
//! non-blocking if it was not; a governor thread wakes once per window
//! while polling and makes it blocking again after a window without
//! requests. So the poller spins for one to two windows after the last
//! request, and an idle daemon sleeps.
//!
//! Why: a request that finds its reader asleep waits for a wake-up, and on
//! the virtual machines we measured that wake-up is most of a round trip
//! (README, "Against libfuse"). The price is one busy CPU while requests
//! arrive at least once per window.
//!
//! Spinning must not take a CPU that something else is waiting for. So
//! while it polls, the governor also reads the kernel's CPU pressure
//! (`/proc/pressure/cpu`, "some": time in which a runnable task waited for a
//! CPU). If tasks waited for more than a quarter of a window, polling is
//! held off (the gate's HELD state) for a back-off that doubles, from
//! [`BACKOFF_MIN`] to [`BACKOFF_MAX`], each time polling is found to hurt,
//! and starts over once a burst ends by itself. On a 2-CPU machine with two
//! busy clients that is what keeps the poller from halving their CPU time.
//! Without pressure information (a kernel built without PSI, or booted with
//! `psi=0`) the poller only runs on machines with [`MIN_CPUS_BLIND`] CPUs
//! or more.
//!
//! Without `clone_fd` every worker reads the one descriptor, and all of
//! them would spin, so polling is off then (and with `poll_us=0`).

use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::pollgate::{PollGate, PollState};

/// The first back-off after polling was found to take a wanted CPU.
pub const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Without pressure information, poll only on machines this large.
pub const MIN_CPUS_BLIND: usize = 4;

/// The kernel's cumulative CPU stall time ("some" total, µs).
#[derive(Debug)]
struct Pressure(File);

impl Pressure {
    fn open() -> Option<Pressure> {
        let mut p = Pressure(File::open("/proc/pressure/cpu").ok()?);
        p.stalled_us().map(|_| p)
    }

    /// `some ... total=N` from the first line.
    fn stalled_us(&mut self) -> Option<u64> {
        let mut buf = [0u8; 256];
        self.0.rewind().ok()?;
        let n = self.0.read(&mut buf).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let some = text.lines().find(|l| l.starts_with("some "))?;
        some.split_whitespace()
            .find_map(|f| f.strip_prefix("total="))?
            .parse()
            .ok()
    }
}

/// The polling state of one session (see the module docs).
#[derive(Debug)]
pub struct Poller {
    gate: PollGate,
    /// A duplicate of the session's descriptor: the same open file, so its
    /// O_NONBLOCK flag is the poller's; ours to keep, so the governor never
    /// changes the flags of a number the session has closed and reused.
    fd: OwnedFd,
    window: Duration,
    /// True once the session ended; the governor sleeps on it.
    stop: Mutex<bool>,
    wake: Condvar,
    /// Windows in which polling was held off for CPU pressure.
    holds: std::sync::atomic::AtomicU64,
}

fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor we own (a dup); no
    // memory is passed.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            let want = if on {
                flags | libc::O_NONBLOCK
            } else {
                flags & !libc::O_NONBLOCK
            };
            // A failure leaves the descriptor as it was: still correct,
            // only not (or still) polled.
            libc::fcntl(fd, libc::F_SETFL, want);
        }
    }
}

impl Poller {
    /// Start polling `session_fd` (the descriptor of fuser's session; it
    /// must not be shared by several workers) with `window`, and start the
    /// governor thread. The gate starts cold. `None`: this machine should
    /// not poll (no pressure information and fewer than [`MIN_CPUS_BLIND`]
    /// CPUs).
    pub fn start(session_fd: BorrowedFd<'_>, window: Duration) -> io::Result<Option<Arc<Poller>>> {
        let pressure = Pressure::open();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if pressure.is_none() && cpus < MIN_CPUS_BLIND {
            return Ok(None);
        }
        let fd = session_fd.try_clone_to_owned()?;
        set_nonblocking(fd.as_fd(), false);
        let p = Arc::new(Poller {
            gate: PollGate::new(),
            fd,
            window,
            stop: Mutex::new(false),
            wake: Condvar::new(),
            holds: Default::default(),
        });
        let g = p.clone();
        std::thread::Builder::new()
            .name("dcache-poll".into())
            .spawn(move || g.govern(pressure))?;
        Ok(Some(p))
    }

    /// A request arrived (called at the top of every request).
    #[inline]
    pub fn touch(&self) {
        if self.gate.touch(|on| set_nonblocking(self.fd.as_fd(), on)) {
            // Under the lock, so that a governor about to wait sees the
            // gate hot or gets this notification.
            let _s = self.stop.lock().unwrap_or_else(|e| e.into_inner());
            self.wake.notify_one();
        }
    }

    /// Where the gate stands now.
    pub fn state(&self) -> PollState {
        self.gate.state()
    }

    /// How many times polling was held off because of CPU pressure.
    pub fn holds(&self) -> u64 {
        self.holds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// End the governor (at session end). The descriptor is left blocking.
    pub fn stop(&self) {
        let mut s = self.lock_stop();
        *s = true;
        self.wake.notify_one();
    }

    fn lock_stop(&self) -> MutexGuard<'_, bool> {
        self.stop.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sleep `d` unless stopped first; returns the guard and whether stopped.
    fn sleep<'a>(&self, g: MutexGuard<'a, bool>, d: Duration) -> (MutexGuard<'a, bool>, bool) {
        let deadline = Instant::now() + d;
        let mut g = g;
        while !*g {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            g = self
                .wake
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let stopped = *g;
        (g, stopped)
    }

    fn govern(&self, mut pressure: Option<Pressure>) {
        let set = |on: bool| set_nonblocking(self.fd.as_fd(), on);
        let mut backoff = BACKOFF_MIN;
        let mut g = self.lock_stop();
        while !*g {
            match self.gate.state() {
                PollState::Cold => {
                    g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                PollState::Held => {
                    let stopped;
                    (g, stopped) = self.sleep(g, backoff);
                    if !stopped {
                        self.gate.release();
                    }
                }
                PollState::Hot => {
                    let t0 = Instant::now();
                    let s0 = pressure.as_mut().and_then(Pressure::stalled_us);
                    let stopped;
                    (g, stopped) = self.sleep(g, self.window);
                    if stopped {
                        break;
                    }
                    let s1 = pressure.as_mut().and_then(Pressure::stalled_us);
                    let spent = t0.elapsed().as_micros() as u64;
                    if let (Some(a), Some(b)) = (s0, s1) {
                        if b.saturating_sub(a) * 4 > spent {
                            self.gate.hold(set);
                            self.holds
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            backoff = (backoff * 2).min(BACKOFF_MAX);
                            continue;
                        }
                    }
                    if self.gate.tick(set) == PollState::Cold {
                        // The burst ended by itself: the next one starts
                        // with a short back-off again.
                        backoff = BACKOFF_MIN;
                    }
                }
            }
        }
        drop(g);
        set(false);
    }
}
