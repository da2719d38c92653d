//! The one door through which dcache-fuse's concurrency primitives come:
//! `std`'s atomics and locks normally, loom's under `RUSTFLAGS="--cfg
//! loom"`, so that the poll gate and the lookup-count protocol are
//! model-checked unchanged (`tests/loom_*.rs`). The same switch as dcache's
//! own (crate-private) facade, so in either build the `AtomicU64` here is
//! the type of the inode word dcache lends the frontend
//! ([`Inode::frontend_word`](dcache::inode::Inode::frontend_word)).

// Under loom only the poll gate and the lookup count are built, which use
// part of this.
#![cfg_attr(loom, allow(unused_imports, dead_code))]

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// `T` alone on its own 64-byte cache line (padded and aligned), for the
/// counters every FUSE worker writes.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct CacheAligned<T>(pub(crate) T);

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<CacheAligned<AtomicU64>>() == 64);

impl<T> std::ops::Deref for CacheAligned<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}
