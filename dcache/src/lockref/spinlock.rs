//! The spinlock in the low half of the lockref word.
//!
//! Test-and-test-and-set: spin on plain loads (a shared cache line costs
//! nothing to re-read) and only CAS when the lock reads free. After a bound of
//! spin hints the waiter yields the CPU, so that with more runnable threads
//! than CPUs a preempted holder gets to run and release instead of every
//! waiter burning its time slice.
//!
//! The lock value records why it is held ([`LOCKED`](super::LOCKED) or
//! [`SHORT`](super::SHORT)); any non-zero value excludes everyone else.
//! While the lock is held nobody but the holder can change the word: every
//! lock-free update and every acquisition CASes from a word whose lock half is
//! free. So the holder may update the word with plain stores.

use super::word::{count_half, lock_half, make, UNLOCKED};
use crate::sync::{spin_hint, yield_now, AtomicU64, Ordering};

/// Spin hints before a waiter yields. Shrunk under loom, where a hint is
/// already a yield to the model checker.
#[cfg(not(loom))]
const SPINS_BEFORE_YIELD: u32 = 128;
#[cfg(loom)]
const SPINS_BEFORE_YIELD: u32 = 2;

/// Take the lock, storing `how` in the lock half.
#[inline]
pub(super) fn lock(word: &AtomicU64, how: u32) {
    debug_assert_ne!(how, UNLOCKED);
    let mut spins = 0u32;
    loop {
        // Relaxed: this read only decides whether to try; the CAS below is
        // what synchronises.
        let old = word.load(Ordering::Relaxed);
        if lock_half(old) == UNLOCKED {
            // Acquire: everything the previous holder wrote before its
            // Release unlock is visible to us. Relaxed on failure: we only
            // go round again.
            if word
                .compare_exchange_weak(
                    old,
                    make(how, count_half(old)),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return;
            }
            // The word moved (a lock-free count update, or another locker):
            // look again at once.
            continue;
        }
        spins += 1;
        if spins < SPINS_BEFORE_YIELD {
            spin_hint();
        } else {
            spins = 0;
            yield_now();
        }
    }
}

/// Change the count while holding the lock, keeping the lock half.
#[inline]
pub(super) fn set_count_locked(word: &AtomicU64, count: i32) {
    // Relaxed load: the holder's own acquisition (or its later stores) is the
    // latest value in the word's modification order, since no one else can
    // write while it is held. Relaxed store: it is published by the Release
    // of the unlock that follows.
    let w = word.load(Ordering::Relaxed);
    debug_assert_ne!(lock_half(w), UNLOCKED);
    word.store(make(lock_half(w), count), Ordering::Relaxed);
}

/// Change the lock half (e.g. `SHORT` -> `LOCKED`) while holding the lock.
#[inline]
pub(super) fn relabel_locked(word: &AtomicU64, how: u32) {
    debug_assert_ne!(how, UNLOCKED);
    // Relaxed both: only the holder writes the word; no data is published.
    let w = word.load(Ordering::Relaxed);
    debug_assert_ne!(lock_half(w), UNLOCKED);
    word.store(make(how, count_half(w)), Ordering::Relaxed);
}

/// Store `count` and release the lock in one store.
#[inline]
pub(super) fn unlock_with_count(word: &AtomicU64, count: i32) {
    debug_assert_ne!(lock_half(word.load(Ordering::Relaxed)), UNLOCKED);
    // Release: our writes under the lock happen-before the next holder's
    // Acquire.
    word.store(make(UNLOCKED, count), Ordering::Release);
}

/// Release the lock, keeping the count.
#[inline]
pub(super) fn unlock(word: &AtomicU64) {
    // Relaxed load: as in `set_count_locked`, the holder reads its own latest
    // value.
    let w = word.load(Ordering::Relaxed);
    unlock_with_count(word, count_half(w));
}
