//! Keeping an io_uring queue's CPU awake while its requests keep coming.
//!
//! A FUSE request over io_uring goes to the queue of the CPU its caller
//! runs on, and that queue's thread is pinned there, so the server's
//! wake-up is local. The caller's is not: when the reply wakes it, the
//! scheduler puts it on an idle CPU rather than wait for the server to
//! sleep, so a lone client moves between two CPUs at every request, and
//! each time it lands on a CPU that has halted. In a virtual machine a
//! halted vCPU must be scheduled again by the host before the caller
//! runs, and that is most of the round trip: one client's uncached stat of
//! `a/b/c/file` ran 4.5-4.8k/s with the client free to move and 12.5-12.9k/s
//! pinned to one CPU (docs/BENCHMARKS.md, "Keeping the queues' CPUs
//! awake").
//!
//! So each queue can have a keeper: a thread pinned to the queue's CPU at
//! `SCHED_IDLE`, the policy below every other, which spins (with the
//! CPU's pause hint) while its queue served a request in the last window
//! and sleeps otherwise. A spinning keeper keeps its CPU out of its idle
//! state, so the woken caller starts at once; any other thread that wants
//! the CPU preempts it at once (a `SCHED_IDLE` thread never delays one of
//! another policy), so it costs the CPUs' idle time while requests flow,
//! not anybody's work. With 2 clients on 2 CPUs it cost 4% here.
//!
//! Keepers are off unless the mount asks for them (`-o poll_us=N`). On a
//! lent 16-vCPU Xeon VM they made one client's uncached stat of
//! `a/b/c/file` 151-439/s instead of 10.6-14.0k (with the client pinned
//! to one CPU, where only its own queue's keeper spins, they cost
//! nothing: 14.8-24.0k), with and without the pause hint. The likeliest
//! cause, not confirmed: what a keeper spends is the host's CPU time, and
//! a host that shares physical cores among its vCPUs gives it to spinning
//! vCPUs instead of the ones with work. They help on the 2-vCPU AMD VM of
//! the figures above.
//!
//! The hot/cold decision is a [`PollGate`], as for the /dev/fuse poller:
//! every served request touches it; the keeper ticks it once per window
//! it spun. A cold gate is heated only by a request that follows the
//! queue's previous one within [`HEAT_GAP`]: a client waiting on a chain
//! of requests (a path walk, a create) sends them microseconds apart,
//! while a 1 MiB `write(2)` through passthrough I/O, which costs the
//! daemon one GETXATTR (the kernel's `file_remove_privs` asks FUSE for
//! `security.capability` at every write), sends one every few hundred
//! microseconds and is not worth a spinning CPU (a keeper spinning
//! through such writes cost 10-25% of their rate here). The keeper
//! sleeps on a condition variable while the gate is cold, and the touch
//! that heats the gate notifies it under the same mutex, so a heated gate
//! never finds its keeper asleep (`tests/loom_awake.rs`).

use std::time::Duration;

use crate::pollgate::{PollGate, PollState};
use crate::sync::{AtomicBool, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};

/// A cold keeper is woken by a request that comes at most this long after
/// the queue's previous one (see the module docs).
pub const HEAT_GAP: Duration = Duration::from_micros(200);

/// One queue's keeper: see the module docs.
#[derive(Debug)]
pub struct Awake {
    gate: PollGate,
    window: Duration,
    /// Held to decide whether to sleep, and to wake the keeper.
    sleep: Mutex<()>,
    wake: Condvar,
    /// True once the keeper must end; set under `sleep`, read without it
    /// while spinning.
    stopped: AtomicBool,
    /// When the queue's last request came (the caller's clock, in ns).
    last: AtomicU64,
}

impl Awake {
    /// A cold keeper whose spin lasts `window` after a request.
    pub fn new(window: Duration) -> Awake {
        Awake {
            gate: PollGate::new(),
            window,
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            stopped: AtomicBool::new(false),
            last: AtomicU64::new(0),
        }
    }

    /// The spin window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// A request was served at `now_ns` (nanoseconds on a clock of the
    /// caller's): keep the gate hot, or heat it if the previous request
    /// came within [`HEAT_GAP`], waking the keeper (then true).
    #[inline]
    pub fn touch(&self, now_ns: u64) -> bool {
        // Relaxed: one queue thread touches its keeper, and the time is a
        // hint for that thread alone.
        let prev = self.last.load(Ordering::Relaxed);
        self.last.store(now_ns, Ordering::Relaxed);
        let lone = now_ns.saturating_sub(prev) > HEAT_GAP.as_nanos() as u64;
        if lone && self.gate.state() == PollState::Cold {
            return false;
        }
        if !self.gate.touch(|_| {}) {
            return false;
        }
        // Under the lock: a keeper between seeing the gate cold and
        // waiting holds it, so it waits before this notifies.
        let _s = self.lock();
        self.wake.notify_one();
        true
    }

    /// Where the gate stands.
    pub fn state(&self) -> PollState {
        self.gate.state()
    }

    /// Whether the keeper was told to end.
    pub fn stopping(&self) -> bool {
        // Relaxed: written under `sleep`, which the keeper holds when its
        // answer decides a sleep; elsewhere it only ends a spin early.
        self.stopped.load(Ordering::Relaxed)
    }

    /// Make the keeper end (at its next look, at most one window away).
    pub fn stop(&self) {
        let _s = self.lock();
        // Relaxed: the mutex orders it for the keeper's decision.
        self.stopped.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.sleep.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The keeper's loop: sleep while cold, `spin` one window while hot,
    /// then tick; until stopped.
    pub fn run(&self, mut spin: impl FnMut(&Awake)) {
        let mut g = self.lock();
        while !self.stopping() {
            if self.gate.state() == PollState::Cold {
                g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            drop(g);
            spin(self);
            g = self.lock();
            if !self.stopping() {
                self.gate.tick(|_| {});
            }
        }
    }
}

#[cfg(not(loom))]
pub(crate) use real::pin_to_cpu;
#[cfg(not(loom))]
pub use real::start;

#[cfg(not(loom))]
mod real {
    use std::io;
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    use super::Awake;

    /// Start a keeper for the queue of `cpu`. Its thread ends at once,
    /// leaving touches without effect, where it cannot be pinned to that
    /// CPU or made `SCHED_IDLE` (a spinner of an ordinary policy would take
    /// the CPU from the callers).
    pub fn start(cpu: usize, window: Duration) -> io::Result<(Arc<Awake>, JoinHandle<()>)> {
        let a = Arc::new(Awake::new(window));
        let k = a.clone();
        let t = std::thread::Builder::new()
            .name(format!("dcache-awake-{cpu}"))
            .spawn(move || {
                if pin_idle(cpu) {
                    k.run(spin);
                }
            })?;
        Ok((a, t))
    }

    /// Spin one window, or until told to stop.
    fn spin(a: &Awake) {
        let end = Instant::now() + a.window();
        while !a.stopping() && Instant::now() < end {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
    }

    /// Pin this thread to `cpu` and give it the idle policy; false if
    /// either fails.
    pub(super) fn pin_idle(cpu: usize) -> bool {
        if !pin_to_cpu(cpu) {
            return false;
        }
        let p = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler reads only `p`, which lives across it.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) == 0 }
    }

    /// Run this thread on `cpu` only (an io_uring queue's thread, and its
    /// keeper); false if the kernel refused.
    pub(crate) fn pin_to_cpu(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET ignores an
        // index past its size; sched_setaffinity reads only the set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn a_touch_wakes_the_keeper_which_cools_after_a_quiet_window() {
        let a = Arc::new(Awake::new(Duration::from_millis(1)));
        let spins = Arc::new(AtomicUsize::new(0));
        let (k, s) = (a.clone(), spins.clone());
        let t = std::thread::spawn(move || {
            k.run(|a| {
                s.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(a.window());
            })
        });
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(spins.load(Ordering::SeqCst), 0, "cold: asleep");
        assert!(!a.touch(1_000_000_000), "a lone request leaves it cold");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(spins.load(Ordering::SeqCst), 0, "still asleep");
        assert!(a.touch(1_000_100_000), "one 100 us after it heats it");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while a.state() == PollState::Hot && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(a.state(), PollState::Cold, "a quiet window cools it");
        let n = spins.load(Ordering::SeqCst);
        assert!((1..=3).contains(&n), "spun {n} windows for one request");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(spins.load(Ordering::SeqCst), n, "and it sleeps again");
        a.stop();
        t.join().unwrap();
    }

    #[test]
    fn a_keeper_runs_pinned_at_the_idle_policy() {
        let (a, t) = start(0, Duration::from_micros(200)).unwrap();
        a.touch(0);
        std::thread::sleep(Duration::from_millis(5));
        a.stop();
        t.join().unwrap();
        // The policy itself, on a thread of our own.
        let h = std::thread::spawn(|| {
            assert!(real::pin_idle(0));
            // SAFETY: sched_getscheduler reads nothing we pass.
            unsafe { libc::sched_getscheduler(0) }
        });
        assert_eq!(h.join().unwrap(), libc::SCHED_IDLE);
    }
}
