//! `CacheAligned<T>`: a value alone on its own 64-byte cache line.
//!
//! Used for write-hot words (a shared `LockRef`, per-thread bench counters) so
//! that their writes never invalidate a line that other CPUs only read.

use std::ops::{Deref, DerefMut};

/// The cache-line size every layout rule in dcache is written against (x86-64,
/// and most arm64 parts; Apple M-series use 128 but are not a target here).
pub const CACHE_LINE: usize = 64;

/// `T` aligned (and padded) to a cache line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct CacheAligned<T>(pub T);

const _: () = assert!(std::mem::align_of::<CacheAligned<u8>>() == CACHE_LINE);
const _: () = assert!(std::mem::size_of::<CacheAligned<u64>>() == CACHE_LINE);

impl<T> CacheAligned<T> {
    /// Wrap `v`.
    pub const fn new(v: T) -> Self {
        Self(v)
    }
}

impl<T> Deref for CacheAligned<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for CacheAligned<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}
