//! The one door through which dcache's concurrency primitives come.
//!
//! Normally this re-exports `std`'s atomics, threads and spin hint. Built with
//! `RUSTFLAGS="--cfg loom"` it re-exports loom's instead, so the same lockref,
//! sequence-count and table code is model-checked unchanged. Code outside this
//! module never names `std::sync::atomic` or `loom` directly for anything that
//! takes part in a lock-free protocol.
//!
//! Crate-private: dcache-fuse has a facade of its own with the same switch.

// The std and loom sets mirror each other; not every build uses each name.
#![allow(unused_imports)]

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub use loom::sync::{Arc, Mutex, MutexGuard};
#[cfg(loom)]
pub use loom::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(loom)]
pub use loom::thread;

#[cfg(not(loom))]
pub use std::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex, MutexGuard};
#[cfg(not(loom))]
pub use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(loom))]
pub use std::thread;

/// A CPU spin hint (`pause` on x86). Under loom it yields to the model
/// checker instead, so spin loops terminate in the model.
#[inline(always)]
pub fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Give the CPU away: used after a spin bound so that more runnable threads
/// than CPUs cannot livelock on a holder that was preempted.
#[inline]
pub fn yield_now() {
    thread::yield_now();
}
