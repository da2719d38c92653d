//! Unit tests, run for every policy (the `for_each_policy!` macro at the end
//! instantiates each generic test once per policy). They pin down the Linux
//! 6.17 semantics of every operation; the policies may differ only in which
//! path they take, which shows up solely in `put_return`'s -1 answers.
//!
//! Multithreaded tests use bounded iterations, shrunk under miri.

use super::*;
use crate::sync::{thread, Arc, AtomicUsize};

const THREADS: usize = if cfg!(miri) { 2 } else { 4 };
const ITERS: usize = if cfg!(miri) { 20 } else { 20_000 };

/// What `put_return` must answer on an unlocked, uncontended lockref: the
/// new count, except where the policy's decrement floor sends it to the
/// (lock-less) locked path, whose answer is -1.
fn uncontended_put_return<P: Policy>(count: i32) -> i32 {
    if count <= 0 || P::DEC_FLOOR.is_some_and(|f| count <= f) {
        -1
    } else {
        count - 1
    }
}

/// The `dput` pattern: a -1 from `put_return` means "lock and decide".
fn put<P: Policy>(lr: &LockRef<P>) {
    if lr.put_return() < 0 {
        let mut g = lr.lock();
        let c = g.count();
        g.set_count(c - 1);
    }
}

fn new_is_one_unlocked<P: Policy>() {
    let lr = LockRef::<P>::new();
    assert_eq!(lr.count(), 1);
    assert!(!lr.is_locked());
    assert_eq!(lr.lock_state(), UNLOCKED);
    assert!(!lr.is_dead());
    assert_eq!(LockRef::<P>::default().count(), 1);
    assert_eq!(LockRef::<P>::with_count(-7).count(), -7);
    let dbg = format!("{:?}", LockRef::<P>::with_count(3));
    assert!(dbg.contains(P::NAME) && dbg.contains('3'), "{dbg}");
}

fn get_is_unconditional<P: Policy>() {
    for (from, to) in [
        (1, 2),
        (0, 1),
        (-1, 0),
        (DEAD, DEAD + 1),
        (i32::MAX, i32::MIN),
    ] {
        let lr = LockRef::<P>::with_count(from);
        lr.get();
        assert_eq!(lr.count(), to, "get from {from}");
        assert!(!lr.is_locked());
    }
}

fn get_not_zero_semantics<P: Policy>() {
    for (from, ok) in [
        (1, true),
        (2, true),
        (100, true),
        (0, false),
        (-1, false),
        (DEAD, false),
    ] {
        let lr = LockRef::<P>::with_count(from);
        assert_eq!(lr.get_not_zero(), ok, "get_not_zero from {from}");
        assert_eq!(lr.count(), if ok { from + 1 } else { from });
        assert!(!lr.is_locked());
    }
}

fn get_not_dead_semantics<P: Policy>() {
    for (from, ok) in [(0, true), (1, true), (5, true), (-1, false), (DEAD, false)] {
        let lr = LockRef::<P>::with_count(from);
        assert_eq!(lr.get_not_dead(), ok, "get_not_dead from {from}");
        assert_eq!(lr.count(), if ok { from + 1 } else { from });
        assert!(!lr.is_locked());
    }
}

fn put_return_semantics<P: Policy>() {
    for from in [5, 3, 2, 1, 0, -1, DEAD, i32::MIN] {
        let lr = LockRef::<P>::with_count(from);
        let want = uncontended_put_return::<P>(from);
        assert_eq!(lr.put_return(), want, "put_return from {from}");
        assert_eq!(lr.count(), if want < 0 { from } else { from - 1 });
        assert!(!lr.is_locked(), "put_return never takes the lock");
    }
    // Well above every floor, all policies take the lock-free path.
    let lr = LockRef::<P>::with_count(10);
    assert_eq!(lr.put_return(), 9);
}

fn put_return_is_minus_one_while_locked<P: Policy>() {
    let lr = LockRef::<P>::with_count(10);
    let g = lr.lock();
    assert_eq!(lr.put_return(), -1);
    assert_eq!(g.count(), 10);
    drop(g);
    assert_eq!(lr.put_return(), 9);
}

fn put_return_is_minus_one_while_short_held<P: Policy>() {
    // A slow-path (SHORT) holder that never releases: `Dcache` waits for it,
    // but only within its budget, then answers -1 like the others.
    let lr = LockRef::<P>::with_count(10);
    spinlock::lock(&lr.word, SHORT);
    assert_eq!(lr.lock_state(), SHORT);
    assert_eq!(lr.put_return(), -1);
    assert_eq!(lr.count(), 10);
    spinlock::unlock(&lr.word);
    assert_eq!(lr.put_return(), 9);
}

fn put_or_lock_semantics<P: Policy>() {
    for from in [5, 3, 2] {
        let lr = LockRef::<P>::with_count(from);
        assert!(lr.put_or_lock(), "put_or_lock from {from}");
        assert_eq!(lr.count(), from - 1);
        assert!(!lr.is_locked());
    }
    for from in [1, 0, -1, DEAD] {
        let lr = LockRef::<P>::with_count(from);
        assert!(!lr.put_or_lock(), "put_or_lock from {from}");
        assert_eq!(
            lr.lock_state(),
            LOCKED,
            "returned holding the lock as LOCKED"
        );
        assert_eq!(lr.count(), from, "count untouched when locked");
        // SAFETY: put_or_lock returned false, so this thread holds the lock.
        unsafe { lr.unlock() };
        assert!(!lr.is_locked());
        assert_eq!(lr.count(), from);
    }
    // The guard route for releasing it.
    let lr = LockRef::<P>::with_count(1);
    assert!(!lr.put_or_lock());
    {
        // SAFETY: put_or_lock returned false, so this thread holds the lock;
        // the guard is the only releaser.
        let mut g = unsafe { lr.assume_locked() };
        assert_eq!(g.count(), 1);
        g.set_count(0);
    }
    assert!(!lr.is_locked());
    assert_eq!(lr.count(), 0);
}

fn guard_semantics<P: Policy>() {
    let lr = LockRef::<P>::with_count(4);
    {
        let mut g = lr.lock();
        assert_eq!(lr.lock_state(), LOCKED);
        assert_eq!(g.count(), 4);
        assert!(!g.is_dead());
        g.set_count(7);
        assert_eq!(g.count(), 7);
        assert_eq!(lr.lock_state(), LOCKED, "set_count keeps the lock");
    }
    assert!(!lr.is_locked());
    assert_eq!(lr.count(), 7);
}

fn mark_dead_semantics<P: Policy>() {
    let lr = LockRef::<P>::with_count(3);
    {
        let mut g = lr.lock();
        g.mark_dead();
        assert!(g.is_dead());
        assert_eq!(g.count(), DEAD);
    }
    assert!(lr.is_dead());
    assert!(!lr.get_not_dead());
    assert!(!lr.get_not_zero());
    assert_eq!(lr.put_return(), -1);
    assert!(!lr.put_or_lock());
    // SAFETY: put_or_lock returned false: we hold the lock.
    unsafe { lr.unlock() };
    assert_eq!(lr.count(), DEAD);
    // `get` is unconditional, even on a dead lockref (as in Linux).
    lr.get();
    assert_eq!(lr.count(), DEAD + 1);
}

fn balance_under_threads<P: Policy>() {
    // Base reference 1; every thread holds its own reference on top, so the
    // count is >= 2 whenever a thread puts and put_or_lock must never keep
    // the lock.
    let lr = Arc::new(LockRef::<P>::new());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let lr = lr.clone();
            thread::spawn(move || {
                for i in 0..ITERS {
                    match (i + t) % 3 {
                        0 => lr.get(),
                        1 => assert!(lr.get_not_zero()),
                        _ => assert!(lr.get_not_dead()),
                    }
                    if i % 2 == 0 {
                        put(&lr);
                    } else if !lr.put_or_lock() {
                        // SAFETY: false means we hold the lock; the guard
                        // releases it before the assertion fires.
                        let g = unsafe { lr.assume_locked() };
                        let c = g.count();
                        drop(g);
                        panic!("put_or_lock kept the lock at count {c} with refs held");
                    }
                }
            })
        })
        .collect();
    // An intruder taking the lock now and then, as `ls` does in the seed.
    for _ in 0..ITERS / 50 {
        let g = lr.lock();
        let c = g.count();
        assert!(c >= 1, "count {c} below the base reference");
        drop(g);
        thread::yield_now();
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(lr.count(), 1);
    assert!(!lr.is_locked());
}

fn count_frozen_while_lock_held<P: Policy>() {
    let lr = Arc::new(LockRef::<P>::with_count(5));
    let started = Arc::new(AtomicUsize::new(0));
    let guard = lr.lock();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (lr, started) = (lr.clone(), started.clone());
            thread::spawn(move || {
                // Relaxed: a progress hint; the assertions rely on the lock.
                started.fetch_add(1, Ordering::Relaxed);
                match t % 4 {
                    0 => lr.get(),
                    1 => assert!(lr.get_not_zero()),
                    2 => assert!(lr.get_not_dead()),
                    _ => assert!(lr.put_or_lock()),
                }
            })
        })
        .collect();
    // Relaxed: see above.
    while started.load(Ordering::Relaxed) < THREADS {
        thread::yield_now();
    }
    for _ in 0..if cfg!(miri) { 10 } else { 1000 } {
        assert_eq!(guard.count(), 5, "count changed under the lock");
        assert_eq!(lr.lock_state(), LOCKED);
        thread::yield_now();
    }
    // put_return gives up rather than changing a locked count.
    assert_eq!(lr.put_return(), -1);
    drop(guard);
    for h in handles {
        h.join().unwrap();
    }
    let puts = THREADS / 4;
    let gets = THREADS - puts;
    assert_eq!(lr.count(), 5 + gets as i32 - puts as i32);
}

fn put_or_lock_keeps_lock_only_at_last_ref<P: Policy>() {
    // The herd: an unused object (count 0) that every thread references and
    // drops again, so drops of the last reference go through the lock.
    let lr = Arc::new(LockRef::<P>::with_count(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let lr = lr.clone();
            thread::spawn(move || {
                let mut kept = 0usize;
                for _ in 0..ITERS / 4 {
                    lr.get();
                    if !lr.put_or_lock() {
                        // SAFETY: false means we hold the lock; the guard
                        // releases it.
                        let mut g = unsafe { lr.assume_locked() };
                        let c = g.count();
                        if c != 1 {
                            drop(g);
                            panic!("kept the lock at count {c} while holding a reference");
                        }
                        // Ours is the last reference: drop it under the lock.
                        g.set_count(0);
                        kept += 1;
                    }
                }
                kept
            })
        })
        .collect();
    let kept: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(lr.count(), 0);
    assert!(!lr.is_locked());
    // The drop that finally reached 0 started from 1, so it had the lock.
    assert!(kept >= 1);
}

macro_rules! for_each_policy {
    ($($test:ident),* $(,)?) => {
        mod linux { $( #[test] fn $test() { super::$test::<super::Linux>() } )* }
        mod spinwait { $( #[test] fn $test() { super::$test::<super::SpinWait>() } )* }
        mod waiman { $( #[test] fn $test() { super::$test::<super::Waiman>() } )* }
        mod dcache { $( #[test] fn $test() { super::$test::<super::Dcache>() } )* }
    };
}

for_each_policy!(
    new_is_one_unlocked,
    get_is_unconditional,
    get_not_zero_semantics,
    get_not_dead_semantics,
    put_return_semantics,
    put_return_is_minus_one_while_locked,
    put_return_is_minus_one_while_short_held,
    put_or_lock_semantics,
    guard_semantics,
    mark_dead_semantics,
    balance_under_threads,
    count_frozen_while_lock_held,
    put_or_lock_keeps_lock_only_at_last_ref,
);

/// The policy-specific `put_return` answers, spelled out rather than derived.
#[test]
fn put_return_low_counts_by_policy() {
    assert_eq!(LockRef::<Linux>::with_count(1).put_return(), 0);
    assert_eq!(LockRef::<SpinWait>::with_count(1).put_return(), 0);
    assert_eq!(LockRef::<Dcache>::with_count(1).put_return(), 0);
    assert_eq!(LockRef::<Dcache>::with_count(2).put_return(), 1);
    // Waiman's seed never decremented to or below 2 without the lock.
    assert_eq!(LockRef::<Waiman>::with_count(1).put_return(), -1);
    assert_eq!(LockRef::<Waiman>::with_count(2).put_return(), -1);
    assert_eq!(LockRef::<Waiman>::with_count(3).put_return(), 2);
}

#[test]
fn put_or_lock_relabels_short_to_locked() {
    // The slow path takes the lock SHORT and must hand it back as LOCKED.
    let lr = LockRef::<Dcache>::with_count(1);
    assert!(!lr.put_or_lock());
    assert_eq!(lr.lock_state(), LOCKED);
    // SAFETY: put_or_lock returned false: we hold the lock.
    unsafe { lr.unlock() };
    assert_eq!(lr.lock_state(), UNLOCKED);
}

#[test]
fn default_policy_is_dcache() {
    let lr: LockRef = LockRef::new();
    assert!(format!("{lr:?}").contains("dcache"));
}
