//! Model-checks the busy-poll gate (`dcache_fuse::pollgate`): requests touching
//! it while the governor ticks it. In every
//! interleaving, once everyone is done, the source's real mode (here an
//! atomic the `set` callbacks write) agrees with the gate's state: the
//! source is non-blocking exactly when the gate is HOT. So a race can cost
//! a wake-up, but never leaves a source spinning while the gate believes it
//! cold (nobody would stop it) or blocking while it believes it hot (nobody
//! would restart it).
//!
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --test loom_pollgate
#![cfg(loom)]

use dcache_fuse::pollgate::{PollGate, PollState};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

struct Source {
    gate: PollGate,
    /// The source's real mode: true = non-blocking (polled).
    nonblocking: AtomicBool,
}

impl Source {
    fn new() -> Arc<Source> {
        Arc::new(Source {
            gate: PollGate::new(),
            nonblocking: AtomicBool::new(false),
        })
    }

    fn set(&self) -> impl FnOnce(bool) + '_ {
        // SeqCst: the model's stand-in for fcntl; the gate's mutex orders it.
        |on| {
            let was = self.nonblocking.swap(on, Ordering::SeqCst);
            assert_ne!(was, on, "a mode change that changes nothing");
        }
    }

    fn check(&self) {
        let hot = self.gate.state() == PollState::Hot;
        assert_eq!(hot, self.nonblocking.load(Ordering::SeqCst));
    }
}

#[test]
fn touch_vs_tick() {
    loom::model(|| {
        let s = Source::new();
        s.gate.touch(s.set());
        let s2 = s.clone();
        let req = thread::spawn(move || {
            s2.gate.touch(s2.set());
        });
        s.gate.tick(s.set());
        s.gate.tick(s.set());
        req.join().unwrap();
        s.check();
    });
}

#[test]
fn two_requests_heat_once() {
    loom::model(|| {
        let s = Source::new();
        let s2 = s.clone();
        let req = thread::spawn(move || s2.gate.touch(s2.set()));
        let here = s.gate.touch(s.set());
        let there = req.join().unwrap();
        assert!(here ^ there, "exactly one request heats");
        assert_eq!(s.gate.state(), PollState::Hot);
        s.check();
    });
}
