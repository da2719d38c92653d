//! `LockRef`: a spinlock and a reference count in one 64-bit word.
//!
//! # Layout and semantics
//!
//! As Linux x86-64 lays out `struct lockref`: the lock in the low 32 bits, a
//! signed 32-bit count in the high 32 bits ([`word`] has the helpers). While
//! the lock half reads free, an operation changes the count with one
//! compare-and-swap of the whole word, so the common get/put never takes the
//! lock and is still atomic with respect to it: a CAS that succeeds proves the
//! lock was free at that instant. An operation whose lock-free path gives up
//! falls back to the lock.
//!
//! Every operation has the semantics of Linux 6.17's `lib/lockref.c`:
//!
//! | op | lock-free path | locked path |
//! |---|---|---|
//! | [`get`](LockRef::get) | count + 1 | count + 1 |
//! | [`get_not_zero`](LockRef::get_not_zero) | false if count <= 0, else + 1 | same test under the lock |
//! | [`get_not_dead`](LockRef::get_not_dead) | false if count < 0, else + 1 | same test under the lock |
//! | [`put_return`](LockRef::put_return) | -1 if count <= 0, else - 1, new count | none: -1 |
//! | [`put_or_lock`](LockRef::put_or_lock) | count <= 1: go locked; else - 1, true | count <= 1: false, lock kept; else - 1, true |
//! | [`LockRefGuard::mark_dead`] | - | count = [`DEAD`] (-128) |
//!
//! Counts wrap on overflow, as the kernel's (built with `-fwrapv`) do.
//!
//! # One retry loop, four policies
//!
//! All operations share one loop (`LockRef::cmpxchg_loop`, the analogue of
//! Linux's `CMPXCHG_LOOP`) steered by a [`Policy`] type parameter:
//!
//! Of the four below, the first three are the benchmark's comparisons,
//! public only with the `experiments` feature; `Dcache` is the default.
//!
//! - `Linux` (6.17): relaxed CAS, at most 100 rounds, and the loop is
//!   abandoned the moment the lock half reads held.
//! - `SpinWait` (the 2024 linux-next variant, dropped): same 100 rounds, but
//!   a held lock makes it spin-hint and re-read; those rounds count too.
//! - `Waiman` (the 2013 seed): the CAS is tried only while the count is > 1
//!   (increments) or > 2 (decrements), two tries, and a held lock ends it.
//!   Results never differ from `Linux`'s; only the path taken does. For
//!   `put_return`, whose "locked path" is "return -1", that means a count of
//!   1 or 2 returns -1 and the caller locks, as the seed's `dput` did.
//! - [`Dcache`] (ours, the default), below.
//!
//! # The `Dcache` policy: holders say how long they will hold
//!
//! The lock half records *why* it is held. [`LOCKED`] means a caller of
//! [`lock`](LockRef::lock) (or the lock [`put_or_lock`](LockRef::put_or_lock)
//! hands back): its hold time is unknown. [`SHORT`] means one of the lockref's
//! own slow paths (every policy's `lock; count ± 1; unlock` fallback), which
//! releases after a single count update.
//!
//! Linux's policy degrades after one transient locker, and stays degraded:
//! a thread that sees the lock held takes the slow path and so holds the lock
//! itself, which makes the next thread see it held and take the slow path,
//! and so on. The lock is no longer held because anyone needs it; the
//! cascade feeds itself, and the seed measured 8.4 M -> 1.27 M stats/s for as
//! long as the load lasted. The cascade's links are all slow-path holders,
//! i.e. `SHORT` holders. So under `Dcache`, a thread that sees `SHORT` does
//! not join: it waits read-only (spin hint, re-load, backoff doubling up to
//! [`SHORT_BACKOFF_MAX`] hints) until the word is free and then CASes as
//! usual. These waits do not count against the 100 CAS rounds but share one
//! budget of [`SHORT_SPIN_BUDGET`] hints per operation; once it is spent (a
//! holder was preempted) the operation takes the locked path, whose spinlock
//! yields the CPU after its own bound, so oversubscription cannot livelock.
//! The cascade therefore ends after one generation: the threads that saw the
//! transient `LOCKED` holder take the slow path once, everyone arriving
//! behind them waits for that short burst to drain and goes back to CAS.
//!
//! A `LOCKED` holder makes `Dcache` give up at once, exactly like `Linux`.
//! That is the case where the lock is really wanted (a `dput` dropping the
//! last reference, a rename, the herd of `put_or_lock` callers). `SpinWait`
//! spun on those too, and that is what made Linux drop it: every spinner
//! re-reads and then CASes the one hot line while the holder works, a
//! thundering herd that a queued spinlock avoids (-33.7% unixbench, -56%
//! stress-ng getdent on the test robot).
//!
//! The trade-off: a `Dcache` operation may spend up to the spin budget
//! waiting for slow-path holders where `Linux` would have queued on the
//! spinlock at once. The worst case is a `SHORT` holder preempted mid-hold:
//! its waiters burn the whole budget before they queue (and the queue's
//! spinlock then yields). Under sustained contention where most holders are
//! `SHORT` (many threads whose CAS rounds ran out), the waiters poll the line
//! read-only instead of polling it inside the spinlock, the same line
//! traffic as the spinlock's own test-and-test-and-set waiters. `put_or_lock`
//! takes the lock as `SHORT` and relabels it `LOCKED` only when it keeps it,
//! so a drop that turns out not to be the last is still a short hold.
//!
//! # Memory orderings
//!
//! The lock-free CAS is `Relaxed`, as Linux's `cmpxchg64_relaxed`: the count
//! protects no other data, a get does not need to see anything "published" by
//! the previous put, and callers that do hand over data (a dentry's fields)
//! order them with their own sequence counts or locks. Acquiring the
//! spinlock is `Acquire` and releasing it `Release`, so what a holder writes
//! under the lock is visible to the next holder.
//!
//! # Model checking
//!
//! Under `--cfg loom` the bounds shrink ([`CMPXCHG_LOOP_MAX`] 100 -> 3,
//! [`SHORT_SPIN_BUDGET`] -> 2, backoff steps -> 1, spinlock yield bound -> 2)
//! so that "rounds ran out" and "budget spent" are reachable in models of two
//! or three threads; the code paths are the same. See `tests/loom_lockref.rs`.

use std::marker::PhantomData;

use crate::sync::{spin_hint, AtomicU64, Ordering};

mod policy;
mod spinlock;
pub mod word;

pub use policy::{
    Dcache, Dir, OnHeld, Policy, CMPXCHG_LOOP_MAX, SHORT_BACKOFF_MAX, SHORT_SPIN_BUDGET,
};
// The benchmark's comparison policies.
#[cfg(any(test, feature = "experiments"))]
pub use policy::{Linux, SpinWait, Waiman, WAIMAN_TRIES};
pub use word::{DEAD, LOCKED, SHORT, UNLOCKED};

use policy::ShortWait;
use word::{count_half, lock_half, make};

/// A spinlock and an `i32` reference count in one 8-byte word, retried by
/// policy `P`.
#[repr(C, align(8))]
pub struct LockRef<P: Policy = Dcache> {
    word: AtomicU64,
    _policy: PhantomData<fn() -> P>,
}

const _: () = assert!(std::mem::size_of::<LockRef>() == 8);
const _: () = assert!(std::mem::align_of::<LockRef>() == 8);
#[cfg(any(test, feature = "experiments"))]
const _: () = assert!(std::mem::size_of::<LockRef<Linux>>() == 8);

impl<P: Policy> Default for LockRef<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Policy> std::fmt::Debug for LockRef<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Relaxed: a diagnostic snapshot.
        let w = self.word.load(Ordering::Relaxed);
        f.debug_struct("LockRef")
            .field("policy", &P::NAME)
            .field("lock", &lock_half(w))
            .field("count", &count_half(w))
            .finish()
    }
}

impl<P: Policy> LockRef<P> {
    /// Count 1, unlocked.
    pub fn new() -> Self {
        Self::with_count(1)
    }

    /// `count`, unlocked.
    pub fn with_count(count: i32) -> Self {
        LockRef {
            word: AtomicU64::new(make(UNLOCKED, count)),
            _policy: PhantomData,
        }
    }

    /// The lock-free path shared by every operation.
    ///
    /// While the lock half reads free (and the count is above the policy's
    /// floor), compute the new count with `f` and CAS it in. `f` returning
    /// `Err(r)` ends the loop with `r` and no change. `None` means the
    /// lock-free path gave up: lock seen held (after whatever waiting the
    /// policy allows), count at or below the floor, or rounds ran out.
    #[inline(always)]
    fn cmpxchg_loop<R>(
        &self,
        dir: Dir,
        mut f: impl FnMut(i32) -> Result<(i32, R), R>,
    ) -> Option<R> {
        let floor = match dir {
            Dir::Inc => P::INC_FLOOR,
            Dir::Dec => P::DEC_FLOOR,
        };
        let mut rounds = 0u32;
        let mut wait = ShortWait::new();
        // Relaxed: see "Memory orderings" in the module docs; the CAS below
        // re-validates whatever this read saw.
        let mut old = self.word.load(Ordering::Relaxed);
        loop {
            let lock = lock_half(old);
            if lock != UNLOCKED {
                match P::ON_HELD {
                    OnHeld::GiveUp => return None,
                    OnHeld::SpinCounted => {
                        rounds += 1;
                        if rounds >= P::MAX_ATTEMPTS {
                            return None;
                        }
                        spin_hint();
                    }
                    OnHeld::WaitShort => {
                        if lock != SHORT || !wait.pause() {
                            return None;
                        }
                    }
                }
                // Relaxed: only deciding whether to try again.
                old = self.word.load(Ordering::Relaxed);
                continue;
            }
            let count = count_half(old);
            if floor.is_some_and(|fl| count <= fl) {
                return None;
            }
            let (new_count, r) = match f(count) {
                Ok(v) => v,
                Err(r) => return Some(r),
            };
            // Relaxed on success: the count orders nothing but itself
            // (Linux: try_cmpxchg64_relaxed). Relaxed on failure: we get the
            // fresh word to retry from.
            match self.word.compare_exchange(
                old,
                make(UNLOCKED, new_count),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(r),
                Err(cur) => old = cur,
            }
            rounds += 1;
            if rounds >= P::MAX_ATTEMPTS {
                return None;
            }
        }
    }

    /// The count read while holding the lock.
    #[inline(always)]
    fn count_locked(&self) -> i32 {
        // Relaxed: the holder reads its own latest value (no one else writes
        // while it holds the lock).
        count_half(self.word.load(Ordering::Relaxed))
    }

    /// Take the spinlock: test-and-test-and-set with a spin hint, yielding
    /// the CPU after a bound so oversubscribed threads cannot livelock. The
    /// lock reads [`LOCKED`] while the guard lives.
    pub fn lock(&self) -> LockRefGuard<'_, P> {
        spinlock::lock(&self.word, LOCKED);
        LockRefGuard { lr: self }
    }

    /// Release the lock. Only the current holder may call this.
    ///
    /// # Safety
    /// The caller must hold the lock (after `put_or_lock` returned false) and
    /// must not release it again (no guard for it may exist).
    pub unsafe fn unlock(&self) {
        spinlock::unlock(&self.word);
    }

    /// A guard for a lock that the caller already holds (after
    /// `put_or_lock` returned false).
    ///
    /// # Safety
    /// The caller must hold the lock, and the guard takes over releasing it.
    pub unsafe fn assume_locked(&self) -> LockRefGuard<'_, P> {
        LockRefGuard { lr: self }
    }

    /// The count as last seen (racy unless the lock is held).
    pub fn count(&self) -> i32 {
        // Relaxed: a snapshot; callers needing a stable value hold the lock.
        count_half(self.word.load(Ordering::Relaxed))
    }

    /// Whether the lock half reads held (racy).
    pub fn is_locked(&self) -> bool {
        self.lock_state() != UNLOCKED
    }

    /// The raw lock half: [`UNLOCKED`], [`LOCKED`] or [`SHORT`] (racy).
    pub fn lock_state(&self) -> u32 {
        // Relaxed: a snapshot for diagnostics and tests.
        lock_half(self.word.load(Ordering::Relaxed))
    }

    /// Whether the count reads negative (dead; racy unless locked).
    pub fn is_dead(&self) -> bool {
        self.count() < 0
    }

    /// Increment the count unconditionally.
    pub fn get(&self) {
        if self
            .cmpxchg_loop(Dir::Inc, |c| Ok((c.wrapping_add(1), ())))
            .is_some()
        {
            return;
        }
        spinlock::lock(&self.word, SHORT);
        let c = self.count_locked();
        spinlock::unlock_with_count(&self.word, c.wrapping_add(1));
    }

    /// Increment unless the count is <= 0; whether it did.
    pub fn get_not_zero(&self) -> bool {
        let fast = self.cmpxchg_loop(Dir::Inc, |c| {
            if c <= 0 {
                Err(false)
            } else {
                Ok((c.wrapping_add(1), true))
            }
        });
        if let Some(r) = fast {
            return r;
        }
        self.locked_inc_if(|c| c > 0)
    }

    /// Increment unless dead (count < 0); whether it did.
    pub fn get_not_dead(&self) -> bool {
        let fast = self.cmpxchg_loop(Dir::Inc, |c| {
            if c < 0 {
                Err(false)
            } else {
                Ok((c.wrapping_add(1), true))
            }
        });
        if let Some(r) = fast {
            return r;
        }
        self.locked_inc_if(|c| c >= 0)
    }

    /// The slow path of the conditional gets: a `SHORT` hold.
    fn locked_inc_if(&self, ok: impl FnOnce(i32) -> bool) -> bool {
        spinlock::lock(&self.word, SHORT);
        let c = self.count_locked();
        if ok(c) {
            spinlock::unlock_with_count(&self.word, c.wrapping_add(1));
            true
        } else {
            spinlock::unlock(&self.word);
            false
        }
    }

    /// Decrement without ever taking the lock; the new count (may be 0), or
    /// -1 when the count was already <= 0, the lock was held, or the retries
    /// ran out (the caller then locks and decides).
    pub fn put_return(&self) -> i32 {
        self.cmpxchg_loop(
            Dir::Dec,
            |c| if c <= 0 { Err(-1) } else { Ok((c - 1, c - 1)) },
        )
        .unwrap_or(-1)
    }

    /// Decrement if the count is > 1 and return true; otherwise return false
    /// *with the lock held* (the caller releases it: `unlock` or a guard from
    /// `assume_locked`). The lock then reads [`LOCKED`].
    pub fn put_or_lock(&self) -> bool {
        // `Err(false)` is Linux's `break`: count <= 1 needs the lock.
        let fast = self.cmpxchg_loop(Dir::Dec, |c| {
            if c <= 1 {
                Err(false)
            } else {
                Ok((c - 1, true))
            }
        });
        if fast == Some(true) {
            return true;
        }
        // Taken SHORT: if the count turns out > 1 this is a one-update hold.
        spinlock::lock(&self.word, SHORT);
        let c = self.count_locked();
        if c <= 1 {
            // Handed to the caller for an unknown time: say so, so `Dcache`
            // waiters stop waiting and queue.
            spinlock::relabel_locked(&self.word, LOCKED);
            return false;
        }
        spinlock::unlock_with_count(&self.word, c - 1);
        true
    }
}

/// The lock held; released on drop.
pub struct LockRefGuard<'a, P: Policy = Dcache> {
    lr: &'a LockRef<P>,
}

impl<P: Policy> LockRefGuard<'_, P> {
    /// The count (stable: we hold the lock).
    pub fn count(&self) -> i32 {
        self.lr.count_locked()
    }

    /// Overwrite the count.
    pub fn set_count(&mut self, count: i32) {
        spinlock::set_count_locked(&self.lr.word, count);
    }

    /// Mark the lockref dead (count = -128): `get_not_dead` fails from now on.
    pub fn mark_dead(&mut self) {
        self.set_count(DEAD);
    }

    /// Whether the count is negative.
    pub fn is_dead(&self) -> bool {
        self.count() < 0
    }
}

impl<P: Policy> Drop for LockRefGuard<'_, P> {
    fn drop(&mut self) {
        spinlock::unlock(&self.lr.word);
    }
}

#[cfg(test)]
mod tests;
