//! `CacheAligned<T>`: a value alone on its own 64-byte cache line;
//! `PairAligned<T>`: alone on its 128-byte line pair.
//!
//! Used for write-hot words (a shared `LockRef`, per-thread bench counters) so
//! that their writes never invalidate a line that other CPUs only read.

use std::ops::{Deref, DerefMut};

/// `new` and transparent access for an aligned wrapper `$name<T>(pub T)`.
macro_rules! wrapper {
    ($name:ident) => {
        impl<T> $name<T> {
            /// Wrap `v`.
            pub const fn new(v: T) -> Self {
                Self(v)
            }
        }

        impl<T> Deref for $name<T> {
            type Target = T;
            #[inline(always)]
            fn deref(&self) -> &T {
                &self.0
            }
        }

        impl<T> DerefMut for $name<T> {
            #[inline(always)]
            fn deref_mut(&mut self) -> &mut T {
                &mut self.0
            }
        }
    };
}

/// The cache-line size every layout rule in dcache is written against (x86-64,
/// and most arm64 parts; Apple M-series use 128 but are not a target here).
pub const CACHE_LINE: usize = 64;

/// `T` aligned (and padded) to a cache line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct CacheAligned<T>(pub T);

const _: () = assert!(std::mem::align_of::<CacheAligned<u8>>() == CACHE_LINE);
const _: () = assert!(std::mem::size_of::<CacheAligned<u64>>() == CACHE_LINE);

wrapper!(CacheAligned);

/// The unit an x86-64 core's spatial prefetcher fetches: a line and its
/// buddy (the other half of the aligned 128 bytes).
pub const LINE_PAIR: usize = 2 * CACHE_LINE;

/// `T` aligned (and padded) to a [`LINE_PAIR`]: for what one thread writes
/// and another thread's data must never sit beside. A 64-byte-aligned
/// value can share its 128 bytes with a neighbour's line; the prefetcher
/// then pulls that line to the writer's core each time it misses its own
/// (crossbeam's `CachePadded` pads to 128 bytes on x86-64 for this reason).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(128))]
pub struct PairAligned<T>(pub T);

const _: () = assert!(std::mem::align_of::<PairAligned<u8>>() == LINE_PAIR);
const _: () = assert!(std::mem::size_of::<PairAligned<[u8; 129]>>() == 2 * LINE_PAIR);

wrapper!(PairAligned);
