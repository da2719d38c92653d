//! Busy-polling /dev/fuse while requests keep coming (`-o poll_us=N`).
//!
//! The request layer gives each worker its own /dev/fuse descriptor (`clone_fd`, our
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
//! (docs/BENCHMARKS.md, "FUSE: against libfuse"). The price is one busy CPU while requests
//! arrive at least once per window.
//!
//! A poller takes a CPU while it spins. On a machine with fewer than
//! [`super::options::MIN_CPUS_TO_POLL`] CPUs that CPU is one a client
//! needs, so there polling is off unless `poll_us` asks for it (measured
//! in docs/BENCHMARKS.md: on 2 CPUs polling speeds one client up and slows two
//! down).
//!
//! Without `clone_fd` every worker reads the one descriptor, and all of
//! them would spin, so polling is off then (and with `poll_us=0`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::pollgate::{PollGate, PollState};

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
    /// Start polling `session_fd` (the connection's first descriptor; it
    /// must not be shared by several workers) with `window`, and start the
    /// governor thread. The gate starts cold.
    pub fn start(session_fd: BorrowedFd<'_>, window: Duration) -> io::Result<Arc<Poller>> {
        let fd = session_fd.try_clone_to_owned()?;
        set_nonblocking(fd.as_fd(), false);
        let p = Arc::new(Poller {
            gate: PollGate::new(),
            fd,
            window,
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let g = p.clone();
        std::thread::Builder::new()
            .name("dcache-poll".into())
            .spawn(move || g.govern())?;
        Ok(p)
    }

    /// A request arrived (called at the top of every request).
    #[inline]
    pub fn touch(&self) {
        if self.gate.touch(|on| set_nonblocking(self.fd.as_fd(), on)) {
            // Under the lock, so that a governor about to wait sees the
            // gate hot or gets this notification.
            let _s = self.lock_stop();
            self.wake.notify_one();
        }
    }

    /// Where the gate stands now.
    pub fn state(&self) -> PollState {
        self.gate.state()
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

    fn govern(&self) {
        let set = |on: bool| set_nonblocking(self.fd.as_fd(), on);
        let mut g = self.lock_stop();
        while !*g {
            if self.gate.state() == PollState::Cold {
                g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // Sleep one window unless stopped first.
            g = self
                .wake
                .wait_timeout_while(g, self.window, |stopped| !*stopped)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if !*g {
                self.gate.tick(set);
            }
        }
        drop(g);
        set(false);
    }
}
