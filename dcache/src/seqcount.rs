//! Sequence counters (Linux `seqcount_t`): a reader snapshots the counter,
//! reads the protected fields, and checks the counter did not move. A writer
//! (already serialised by some lock) makes the counter odd while it changes
//! the fields.
//!
//! The protected fields must themselves be atomics read with `Relaxed`: an
//! unsynchronised plain read racing a write is undefined behaviour in Rust's
//! model even when the sequence check would discard it.

use crate::sync::{fence, AtomicU32, Ordering};

/// A sequence counter (see the module docs).
pub struct SeqCount {
    seq: AtomicU32,
}

impl Default for SeqCount {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SeqCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SeqCount({})", self.seq.load(Ordering::Relaxed))
    }
}

impl SeqCount {
    /// A counter at 0 (no writer).
    pub fn new() -> Self {
        SeqCount {
            seq: AtomicU32::new(0),
        }
    }

    /// Start a read section without waiting: the raw value, which may be odd
    /// (a writer is active). rcu-walk treats an odd value as "give up and
    /// fall back" rather than spinning (Linux's `raw_seqcount_begin`).
    #[inline(always)]
    pub fn raw_begin(&self) -> u32 {
        // Acquire: the field reads that follow cannot be hoisted above this
        // load, so they see at least the writes published by the write_end
        // whose value we read.
        self.seq.load(Ordering::Acquire)
    }

    /// Start a read section, waiting out an active writer.
    #[inline]
    pub fn read_begin(&self) -> u32 {
        loop {
            let s = self.raw_begin();
            if s & 1 == 0 {
                return s;
            }
            crate::sync::spin_hint();
        }
    }

    /// True when the section that began with `start` must be retried: a
    /// writer was active at the start or has run since.
    #[inline(always)]
    pub fn read_retry(&self, start: u32) -> bool {
        // Acquire fence: the Relaxed field reads before it are ordered before
        // the re-read of the counter below (the classic seqlock reader fence).
        fence(Ordering::Acquire);
        start & 1 != 0 || self.seq.load(Ordering::Relaxed) != start
    }

    /// The current value, for a check that needs no ordering of its own
    /// (it is followed by a `read_retry`).
    #[cfg(all(test, loom))]
    #[inline(always)]
    pub fn peek(&self) -> u32 {
        self.seq.load(Ordering::Relaxed)
    }

    /// Begin a write section. Writers must already be serialised.
    #[inline]
    pub fn write_begin(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "nested seqcount write");
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        // Release fence: the odd counter becomes visible no later than any
        // field store that follows, so a reader that saw a new field value
        // also sees a changed counter at its retry check.
        fence(Ordering::Release);
    }

    /// Begin a write section, waiting out another writer: the counter is
    /// itself the writers' lock (even: free, odd: held), a seqlock whose
    /// spinlock is the count. Only for writers that never block inside the
    /// section (they store a few fields); end it with `write_end`.
    #[inline]
    pub fn write_lock(&self) {
        let mut spins = 0u32;
        loop {
            let s = self.seq.load(Ordering::Relaxed);
            // Acquire on success: the previous writer's field stores (made
            // before its Release `write_end`) happen-before ours, so writers
            // are ordered as a lock orders them. Relaxed on failure: we
            // only retry.
            if s & 1 == 0
                && self
                    .seq
                    .compare_exchange_weak(
                        s,
                        s.wrapping_add(1),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                break;
            }
            spins += 1;
            if spins >= 64 {
                // The holder may have been preempted: give it the CPU.
                spins = 0;
                crate::sync::yield_now();
            } else {
                crate::sync::spin_hint();
            }
        }
        // Release fence: as in `write_begin`, the odd counter is visible no
        // later than any field store that follows.
        fence(Ordering::Release);
    }

    /// End a write section.
    #[inline]
    pub fn write_end(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 1, "seqcount write_end without begin");
        // Release: the field stores above happen-before a reader's Acquire
        // load that sees the new even value.
        self.seq.store(s.wrapping_add(1), Ordering::Release);
    }

    /// Invalidate every read section in flight without a begin/end pair
    /// (Linux `write_seqcount_invalidate`, used when a dentry is unhashed).
    #[inline]
    pub fn invalidate(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0);
        // Release: as write_end.
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }
}
