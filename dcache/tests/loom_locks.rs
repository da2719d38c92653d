//! Model-checks the lock wait protocol of `LocalLocks` (memfs,
//! passthrough) as a frontend drives it for F_SETLKW: try; on EAGAIN
//! register a waker (`wake_on_unlock`) and try again; sleep only if that
//! second try fails too. Racing the holder's unlock, no wake-up is lost:
//! in every interleaving the waiter either got the lock on a try or its
//! waker has run by the time both threads are done. Also with two
//! waiters and a holder that downgrades instead of unlocking.
//!
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release -p dcache --test loom_locks
#![cfg(loom)]

use dcache::errno::Errno;
use dcache::fs::lock::{FileLock, Flavor, LocalLocks, LockOwner, LockType, OFFSET_MAX};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

fn owner(id: u64) -> LockOwner {
    LockOwner {
        id,
        file: id,
        flavor: Flavor::Posix,
    }
}

fn whole(kind: Option<LockType>) -> FileLock {
    FileLock::new(kind, 0, OFFSET_MAX, 1)
}

/// A waiter's side of F_SETLKW up to the point it would sleep: true if
/// it got the lock; otherwise its waker was registered before the try
/// that failed.
fn try_then_register(t: &LocalLocks, who: u64, kind: LockType, woken: &Arc<AtomicBool>) -> bool {
    match t.setlk(1, &owner(who), &whole(Some(kind))) {
        Ok(()) => return true,
        Err(e) => assert_eq!(e, Errno::EAGAIN),
    }
    let w = woken.clone();
    // SeqCst: read after the threads are joined, which orders it anyway.
    t.wake_on_unlock(1, Box::new(move || w.store(true, Ordering::SeqCst)));
    t.setlk(1, &owner(who), &whole(Some(kind))).is_ok()
}

#[test]
fn an_unlock_racing_a_waiter_always_wakes_it() {
    loom::model(|| {
        let t = Arc::new(LocalLocks::new());
        t.setlk(1, &owner(1), &whole(Some(LockType::Write)))
            .unwrap();
        let woken = Arc::new(AtomicBool::new(false));
        let (t2, w2) = (t.clone(), woken.clone());
        let waiter = thread::spawn(move || try_then_register(&t2, 2, LockType::Write, &w2));
        t.setlk(1, &owner(1), &whole(None)).unwrap();
        let got = waiter.join().unwrap();
        assert!(
            got || woken.load(Ordering::SeqCst),
            "the waiter sleeps with nobody to wake it"
        );
    });
}

#[test]
fn a_downgrade_wakes_readers_waiting() {
    loom::model(|| {
        let t = Arc::new(LocalLocks::new());
        t.setlk(1, &owner(1), &whole(Some(LockType::Write)))
            .unwrap();
        let (wa, wb) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (ta, wa2) = (t.clone(), wa.clone());
        let a = thread::spawn(move || try_then_register(&ta, 2, LockType::Read, &wa2));
        let (tb, wb2) = (t.clone(), wb.clone());
        let b = thread::spawn(move || try_then_register(&tb, 3, LockType::Read, &wb2));
        t.setlk(1, &owner(1), &whole(Some(LockType::Read))).unwrap();
        let (ga, gb) = (a.join().unwrap(), b.join().unwrap());
        assert!(ga || wa.load(Ordering::SeqCst));
        assert!(gb || wb.load(Ordering::SeqCst));
    });
}
