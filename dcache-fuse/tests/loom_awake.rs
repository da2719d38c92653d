//! Model-checks the io_uring queues' keepers (`dcache_fuse::awake`): a
//! request (close enough to the one before to heat the gate) touching the keeper while it cools and goes to sleep. In every
//! interleaving, a touch made after the keeper went cold gets it spinning
//! again: the touch that heats the gate notifies under the keeper's lock,
//! so the keeper is never left asleep beside a hot gate (which would cost
//! every later request its CPU's wake-up, since touches of a hot gate wake
//! nobody). Moving the notify out of the lock, or reading the gate outside
//! it, makes the model hang here, which loom reports as a failure.
//!
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --test loom_awake
#![cfg(loom)]

use dcache_fuse::awake::Awake;
use dcache_fuse::pollgate::PollState;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

/// Start a keeper whose window is one yield; it counts its spins.
fn keeper() -> (Arc<Awake>, Arc<AtomicUsize>, thread::JoinHandle<()>) {
    let a = Arc::new(Awake::new(Duration::ZERO));
    let spins = Arc::new(AtomicUsize::new(0));
    let (k, s) = (a.clone(), spins.clone());
    let t = thread::spawn(move || {
        k.run(|_| {
            // SeqCst: the model's observation, not part of the protocol.
            s.fetch_add(1, Ordering::SeqCst);
            thread::yield_now();
        })
    });
    (a, spins, t)
}

/// Wait until the keeper has spun more than `n` windows.
fn spun_past(spins: &AtomicUsize, n: usize) {
    while spins.load(Ordering::SeqCst) <= n {
        thread::yield_now();
    }
}

#[test]
fn a_touch_while_the_keeper_cools_is_never_lost() {
    loom::model(|| {
        let (a, spins, t) = keeper();
        assert!(a.touch(0), "the first request heats the gate");
        spun_past(&spins, 0);
        // No more requests: the keeper ticks the gate cold, then goes to
        // sleep. Somewhere in between (or after), a request comes.
        while a.state() != PollState::Cold {
            thread::yield_now();
        }
        let before = spins.load(Ordering::SeqCst);
        let a2 = a.clone();
        let req = thread::spawn(move || a2.touch(0));
        assert!(req.join().unwrap(), "a request to a cold gate heats it");
        // The keeper must spin again (a lost wake-up hangs here).
        spun_past(&spins, before);
        a.stop();
        t.join().unwrap();
    });
}

#[test]
fn stop_ends_a_sleeping_or_spinning_keeper() {
    loom::model(|| {
        let (a, _spins, t) = keeper();
        let a2 = a.clone();
        let req = thread::spawn(move || a2.touch(0));
        a.stop();
        req.join().unwrap();
        t.join().unwrap();
    });
}
