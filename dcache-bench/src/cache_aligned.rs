//! `CacheAligned<T>`: a value alone on its own 64-byte cache line, for the
//! harness's write-hot words (per-thread counters, the start and stop
//! flags, a shared `LockRef`) so that their writes never invalidate a line
//! other CPUs only read.

use std::ops::{Deref, DerefMut};

/// `T` aligned (and padded) to a 64-byte cache line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct CacheAligned<T>(pub T);

const _: () = assert!(std::mem::size_of::<CacheAligned<u64>>() == 64);

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
