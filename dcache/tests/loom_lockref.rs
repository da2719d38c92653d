//! loom models of `LockRef`, one set per retry policy.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --test loom_lockref`.
//! Under `--cfg loom` the lockref's bounds shrink (3 CAS rounds instead of
//! 100, spin budgets of 2; see the `lockref` module docs) so that "rounds ran
//! out" and "spin budget spent" are reached inside these small models and the
//! slow paths (`SHORT` holders, `LOCKED` relabelling) are explored too.
//! Each model has two or three threads and a handful of operations, and is
//! explored with at most 4 preemptions (loom's guidance is that bugs show
//! within 2-3); `LOOM_MAX_PREEMPTIONS=N` overrides the bound. Unbounded, the
//! whole file passed too but took ~2 minutes on two cores.
#![cfg(loom)]

use dcache::lockref::{LockRef, Policy, DEAD, LOCKED, UNLOCKED};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

/// `loom::model` with a default preemption bound of 4. Unbounded, the
/// `Waiman` models (whose floors send low counts through the spinlock, where
/// every spin is a scheduling point) take minutes.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(4);
    }
    b.check(f);
}

/// The `dput` pattern: -1 from `put_return` means "lock and decide".
fn put<P: Policy>(lr: &LockRef<P>) {
    if lr.put_return() < 0 {
        let mut g = lr.lock();
        let c = g.count();
        g.set_count(c - 1);
    }
}

/// Concurrent gets and puts never lose an update: two threads each take a
/// reference (unconditional and conditional) and drop it again (through
/// `put_return`'s lock fallback and through `put_or_lock`).
fn gets_and_puts_never_lose_updates<P: Policy>() {
    model(|| {
        let lr = Arc::new(LockRef::<P>::with_count(1));
        let a = {
            let lr = lr.clone();
            thread::spawn(move || {
                lr.get();
                put(&lr);
            })
        };
        let b = {
            let lr = lr.clone();
            thread::spawn(move || {
                assert!(lr.get_not_zero());
                // Our reference plus the base one: never the last.
                assert!(lr.put_or_lock());
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(lr.count(), 1);
        assert_eq!(lr.lock_state(), UNLOCKED);
    });
}

/// Two bare increments racing the CAS loop and each other's slow path.
fn two_gets_both_land<P: Policy>() {
    model(|| {
        let lr = Arc::new(LockRef::<P>::with_count(2));
        let a = {
            let lr = lr.clone();
            thread::spawn(move || lr.get())
        };
        assert!(lr.get_not_dead());
        a.join().unwrap();
        assert_eq!(lr.count(), 4);
    });
}

/// While one thread holds the lock the count does not move, whatever the
/// other thread's policy does; its update lands after the release.
fn count_frozen_while_locked<P: Policy>() {
    model(|| {
        let lr = Arc::new(LockRef::<P>::with_count(1));
        let holder = {
            let lr = lr.clone();
            thread::spawn(move || {
                let mut g = lr.lock();
                let before = g.count();
                thread::yield_now();
                assert_eq!(g.count(), before, "count changed under the lock");
                g.set_count(before + 10);
            })
        };
        let r = lr.put_return();
        lr.get();
        holder.join().unwrap();
        // 1, +10 under the lock, +1, and -1 unless put_return gave up.
        let want = if r < 0 { 12 } else { 11 };
        assert_eq!(lr.count(), want);
        assert!(r == -1 || r == 0 || r == 10, "put_return returned {r}");
    });
}

/// `put_or_lock` comes back holding the lock exactly when the count was <= 1.
fn put_or_lock_locks_exactly_at_last_ref<P: Policy>() {
    model(|| {
        let lr = Arc::new(LockRef::<P>::with_count(1));
        let dropper = {
            let lr = lr.clone();
            thread::spawn(move || {
                if lr.put_or_lock() {
                    return true;
                }
                assert_eq!(lr.lock_state(), LOCKED);
                assert_eq!(lr.count(), 1, "kept the lock above the last reference");
                // SAFETY: put_or_lock returned false, so we hold the lock.
                unsafe { lr.unlock() };
                false
            })
        };
        lr.get();
        let decremented = dropper.join().unwrap();
        // Decremented: the get came first (1 -> 2 -> 1). Otherwise the drop
        // kept the lock at 1 and the get landed after it: 2.
        assert_eq!(lr.count(), if decremented { 1 } else { 2 });
    });
}

/// The herd: both threads reference an unused object and drop it again; a
/// drop of the last reference must come back locked, and one always does.
fn herd_last_drop_takes_lock<P: Policy>() {
    model(|| {
        let lr = Arc::new(LockRef::<P>::with_count(0));
        let worker = |lr: Arc<LockRef<P>>| {
            move || {
                lr.get();
                if lr.put_or_lock() {
                    return 0;
                }
                // SAFETY: put_or_lock returned false, so we hold the lock;
                // the guard releases it.
                let mut g = unsafe { lr.assume_locked() };
                assert_eq!(g.count(), 1, "locked drop of a non-last reference");
                g.set_count(0);
                1
            }
        };
        let a = thread::spawn(worker(lr.clone()));
        let b = thread::spawn(worker(lr.clone()));
        let locked = a.join().unwrap() + b.join().unwrap();
        assert!(locked >= 1);
        assert_eq!(lr.count(), 0);
        assert_eq!(lr.lock_state(), UNLOCKED);
    });
}

/// Once `mark_dead` is visible, `get_not_dead` fails, and it never revives
/// a dead count.
fn get_not_dead_fails_after_mark_dead<P: Policy>() {
    model(|| {
        let lr = Arc::new(LockRef::<P>::with_count(1));
        let dead = Arc::new(AtomicBool::new(false));
        let killer = {
            let (lr, dead) = (lr.clone(), dead.clone());
            thread::spawn(move || {
                lr.lock().mark_dead();
                // Release: the dead count happens-before whoever sees the flag.
                dead.store(true, Ordering::Release);
            })
        };
        // Acquire: pairs with the Release above.
        let seen_dead = dead.load(Ordering::Acquire);
        let got = lr.get_not_dead();
        if seen_dead {
            assert!(!got, "get_not_dead succeeded after mark_dead");
        }
        killer.join().unwrap();
        assert_eq!(lr.count(), DEAD);
        assert!(!lr.get_not_dead());
    });
}

/// `put_return` answers a new count >= 0 or -1, never less, and never takes
/// the count below zero, even racing another put and a lock holder.
fn put_return_never_below_minus_one<P: Policy>() {
    model(|| {
        let lr = Arc::new(LockRef::<P>::with_count(1));
        let other = {
            let lr = lr.clone();
            thread::spawn(move || lr.put_return())
        };
        let holder = {
            let lr = lr.clone();
            thread::spawn(move || drop(lr.lock()))
        };
        let mine = lr.put_return();
        let theirs = other.join().unwrap();
        holder.join().unwrap();
        for r in [mine, theirs] {
            assert!(r == -1 || r == 0, "put_return returned {r} from count 1");
        }
        let done = [mine, theirs].iter().filter(|&&r| r == 0).count() as i32;
        assert!(done <= 1, "two puts took the single reference");
        assert_eq!(lr.count(), 1 - done);
    });
}

/// A `lock()` holder, a `get` that falls back to the slow path behind it
/// (holding the lock `SHORT`), and a `put_return` that meets either: no
/// update is lost, and the lock ends free.
fn slow_path_holders_and_waiters<P: Policy>() {
    model(|| {
        let lr = Arc::new(LockRef::<P>::with_count(5));
        let intruder = {
            let lr = lr.clone();
            thread::spawn(move || drop(lr.lock()))
        };
        let getter = {
            let lr = lr.clone();
            thread::spawn(move || lr.get())
        };
        let r = lr.put_return();
        intruder.join().unwrap();
        getter.join().unwrap();
        assert!(r == -1 || r == 4 || r == 5, "put_return returned {r}");
        assert_eq!(lr.count(), if r < 0 { 6 } else { 5 });
        assert_eq!(lr.lock_state(), UNLOCKED);
    });
}

/// The lock orders what its holders write: two holders (one via `lock()`,
/// one via `put_or_lock`'s kept lock) update plain memory under it, and loom
/// flags any access the Acquire/Release pair fails to order.
fn lock_orders_data_under_it<P: Policy>() {
    struct Shared<P: Policy> {
        lr: LockRef<P>,
        data: UnsafeCell<u32>,
    }
    // SAFETY: `data` is only touched with the lock held.
    unsafe impl<P: Policy> Sync for Shared<P> {}
    model(|| {
        let s = Arc::new(Shared {
            lr: LockRef::<P>::with_count(1),
            data: UnsafeCell::new(0),
        });
        let t = {
            let s = s.clone();
            thread::spawn(move || {
                let _g = s.lr.lock();
                // SAFETY: we hold the lock, the only licence to touch `data`.
                s.data.with_mut(|p| unsafe { *p += 1 });
            })
        };
        if !s.lr.put_or_lock() {
            // SAFETY: put_or_lock returned false: we hold the lock, and the
            // guard releases it.
            let _g = unsafe { s.lr.assume_locked() };
            // SAFETY: as above, the lock is held.
            s.data.with_mut(|p| unsafe { *p += 1 });
        }
        t.join().unwrap();
        // SAFETY: the other thread is joined; nothing else touches `data`.
        assert_eq!(s.data.with(|p| unsafe { *p }), 2);
    });
}

macro_rules! for_each_policy {
    ($($test:ident),* $(,)?) => {
        // The comparison policies need dcache's `experiments` feature.
        #[cfg(feature = "experiments")]
        mod linux { $( #[test] fn $test() { super::$test::<dcache::lockref::Linux>() } )* }
        #[cfg(feature = "experiments")]
        mod spinwait { $( #[test] fn $test() { super::$test::<dcache::lockref::SpinWait>() } )* }
        #[cfg(feature = "experiments")]
        mod waiman { $( #[test] fn $test() { super::$test::<dcache::lockref::Waiman>() } )* }
        mod dcache_policy { $( #[test] fn $test() { super::$test::<dcache::lockref::Dcache>() } )* }
    };
}

for_each_policy!(
    gets_and_puts_never_lose_updates,
    two_gets_both_land,
    count_frozen_while_locked,
    put_or_lock_locks_exactly_at_last_ref,
    herd_last_drop_takes_lock,
    get_not_dead_fails_after_mark_dead,
    put_return_never_below_minus_one,
    slow_path_holders_and_waiters,
    lock_orders_data_under_it,
);
