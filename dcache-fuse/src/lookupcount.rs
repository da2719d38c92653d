//! The kernel's lookup count of one FUSE node, and when the node exists.
//!
//! A FUSE node exists from the first entry reply that names it until the
//! `forget` that gives back the last lookup the kernel counted. While it
//! exists the frontend keeps it *published* (findable by node id) and
//! *pinned* (its inode cannot be freed). [`LookupCount`] is the count, and
//! its protocol decides who publishes and who unpublishes:
//!
//! - [`LookupCount::get_held`]: a lookup of a node that already exists adds
//!   one with a compare-and-swap that refuses 0. No lock: this is the
//!   common case (every revalidating LOOKUP the kernel sends).
//! - [`LookupCount::get_locked`]: any other lookup, under the node's
//!   transition lock. At 0 it runs `publish` *before* making the count 1,
//!   so whoever sees a count above 0 (and replies with the node id) can
//!   count on the node being findable.
//! - [`LookupCount::put`]: a forget of `n`. Above `n` it subtracts without a
//!   lock; at exactly `n` it takes the transition lock, brings the count to
//!   0 and runs `unpublish` under it. A `get_held` racing that either comes
//!   first (the forget then finds more than `n` and only subtracts) or finds
//!   0 and declines; a `get_locked` waits for the lock and publishes anew.
//!
//! So the count is above zero exactly while the node is published (once the
//! lock holder is done), a successful `get_held` never revives a node that
//! is being torn down, and a forget of more than was counted is refused.
//! `tests/loom_lookupcount.rs` checks these in every interleaving.
//!
//! The count lives on the node's inode, in the word dcache lends its
//! frontend ([`Inode::frontend_word`]): [`LookupCount::of`] views that word
//! as a count, so a node costs no memory beside the inode.
//!
//! [`Inode::frontend_word`]: dcache::inode::Inode::frontend_word

use crate::sync::{AtomicU64, MutexGuard, Ordering};

/// A forget named more lookups than the node has: refused, nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverForget;

/// One node's lookup count (see the module docs).
#[derive(Debug, Default)]
#[repr(transparent)]
pub struct LookupCount(AtomicU64);

impl LookupCount {
    /// The count kept in `word`: for a node, its inode's
    /// [`frontend_word`](dcache::inode::Inode::frontend_word), which dcache
    /// zeroes at allocation (a count of 0: the node does not exist) and
    /// otherwise leaves to this protocol.
    #[inline(always)]
    pub fn of(word: &AtomicU64) -> &LookupCount {
        let p: *const AtomicU64 = word;
        // SAFETY: `LookupCount` is a `repr(transparent)` wrapper of
        // `AtomicU64`, so the two have one layout and validity, and the
        // result borrows `word` for as long as the argument does.
        unsafe { &*p.cast::<LookupCount>() }
    }

    /// A count of 0: the node does not exist.
    pub fn new() -> LookupCount {
        LookupCount(AtomicU64::new(0))
    }

    /// The count now (racy; for reports and tests).
    pub fn load(&self) -> u64 {
        // Relaxed: a snapshot that orders nothing.
        self.0.load(Ordering::Relaxed)
    }

    /// Forget every count at once (the frontend is gone and unpublishes
    /// everything itself).
    pub fn clear(&self) {
        // Relaxed: no one races this (the session's requests are over).
        self.0.store(0, Ordering::Relaxed);
    }

    /// Count one more lookup of a node that exists; `false` (nothing done)
    /// if it does not (count 0) or the count would overflow.
    #[inline]
    pub fn get_held(&self) -> bool {
        // Acquire on success: pairs with the Release store in `get_locked`,
        // so the publication made before the count left 0 is visible to
        // this thread (which replies with the node id and may then serve a
        // request that looks the node up). Relaxed on failure: nothing is
        // read after a refusal.
        self.0
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |c| {
                if c == 0 {
                    None
                } else {
                    c.checked_add(1)
                }
            })
            .is_ok()
    }

    /// Count one more lookup under the node's transition lock (the guard
    /// proves it is held). At 0, `publish` runs first and the count becomes
    /// 1 after it; returns whether this call published.
    pub fn get_locked(&self, _transition: &MutexGuard<'_, ()>, publish: impl FnOnce()) -> bool {
        // Relaxed load: under the transition lock the count cannot leave or
        // reach 0 behind our back (only lock holders do that); `get_held`
        // may raise a non-zero count meanwhile, which the fetch_add keeps.
        if self.0.load(Ordering::Relaxed) == 0 {
            publish();
            // Release: the publication happens-before any `get_held` that
            // sees 1 (its Acquire).
            self.0.store(1, Ordering::Release);
            true
        } else {
            // Relaxed: the node is published already; the count only
            // decides who unpublishes, and its RMWs are totally ordered.
            self.0.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Give back `n` lookups. When that empties the count, `unpublish` runs
    /// under the transition lock (taken through `lock`) and `Ok(true)` is
    /// returned. A forget of more than is counted changes nothing.
    pub fn put<'a>(
        &self,
        n: u64,
        lock: impl FnOnce() -> MutexGuard<'a, ()>,
        unpublish: impl FnOnce(),
    ) -> Result<bool, OverForget> {
        if n == 0 {
            return Ok(false);
        }
        // Lock-free while the count stays above zero. Relaxed: the RMWs on
        // the count are totally ordered; a subtraction that leaves it above
        // zero publishes and frees nothing.
        let left = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                if c > n {
                    Some(c - n)
                } else {
                    None
                }
            });
        match left {
            Ok(_) => return Ok(false),
            Err(c) if c < n => return Err(OverForget),
            Err(_) => {}
        }
        let _g = lock();
        // Under the lock nobody else can take the count to or from zero;
        // `get_held` may still raise it, so decide with a CAS.
        let mut c = self.0.load(Ordering::Relaxed);
        loop {
            if c < n {
                return Err(OverForget);
            }
            // Relaxed: the lock orders the unpublish against the next
            // publisher; a racing `get_held` that lost sees 0 and declines.
            match self
                .0
                .compare_exchange(c, c - n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) if c == n => {
                    unpublish();
                    return Ok(true);
                }
                Ok(_) => return Ok(false),
                Err(now) => c = now,
            }
        }
    }
}
