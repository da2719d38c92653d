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

/// Taking a lock whether or not it is poisoned: `m.lock_unpoisoned()`,
/// `l.read_unpoisoned()`, `l.write_unpoisoned()`, `m.get_mut_unpoisoned()`,
/// for std's locks and (under loom) loom's.
///
/// Why ignoring poison is correct. A lock is poisoned when a thread panics
/// while holding it, meaning "the data may be half-changed". No dcache lock
/// is left half-changed by a panic:
/// - the locks under which foreign code runs guard `()`: a directory's
///   `i_rwsem` and the Super's `rename_lock` (backend calls run under
///   them) and a file's `f_pos_lock` (the backend's read or write runs
///   under it). They order work; the state they order lives elsewhere
///   (atomics, the dentry tree under its own locks), so their poison says
///   nothing about any data. What a panicking backend leaves behind is its
///   own state, which no poison flag of ours describes either.
/// - the others guard maps, lists and counters: the Super's inode map and
///   LRU lists, the fd table's allocator, the slab's free list, the
///   invalidation hub's listener list, the passthrough backend's maps and
///   handles, kernfs' tree and memfs' tree. Under them run only collection
///   calls and field writes, never a user closure or a backend call
///   (listeners run on a copy of the list after the lock is dropped;
///   `forget` goes to the backend after the inode map is unlocked); memfs
///   checks every change before it makes it. A panic there is a bug in
///   dcache itself, which poison could not repair anyway.
/// - the hub's Super lock is written only to set or clear one pointer, and
///   held shared while an invalidation is applied (a shared guard never
///   poisons).
///
/// So a panic elsewhere (a backend, a listener, a caller's assertion) must
/// not turn every later call on the same cache into a second panic.
pub trait LockExt {
    /// What the lock guards.
    type Target;
    /// The guard `lock` returns.
    type Guard<'a>
    where
        Self: 'a;
    /// `lock()`, poisoned or not.
    fn lock_unpoisoned(&self) -> Self::Guard<'_>;
    /// `get_mut()`, poisoned or not.
    fn get_mut_unpoisoned(&mut self) -> &mut Self::Target;
}

/// [`LockExt`] for reader-writer locks.
pub trait RwLockExt {
    /// The shared guard.
    type ReadGuard<'a>
    where
        Self: 'a;
    /// The exclusive guard.
    type WriteGuard<'a>
    where
        Self: 'a;
    /// `read()`, poisoned or not.
    fn read_unpoisoned(&self) -> Self::ReadGuard<'_>;
    /// `write()`, poisoned or not.
    fn write_unpoisoned(&self) -> Self::WriteGuard<'_>;
}

macro_rules! unpoisoned {
    ($($m:ident)::+) => {
        impl<T> LockExt for $($m::)+Mutex<T> {
            type Target = T;
            type Guard<'a>
                = $($m::)+MutexGuard<'a, T>
            where
                Self: 'a;
            #[inline]
            fn lock_unpoisoned(&self) -> Self::Guard<'_> {
                self.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
            }
            #[inline]
            fn get_mut_unpoisoned(&mut self) -> &mut T {
                self.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner)
            }
        }

        impl<T> RwLockExt for $($m::)+RwLock<T> {
            type ReadGuard<'a>
                = $($m::)+RwLockReadGuard<'a, T>
            where
                Self: 'a;
            type WriteGuard<'a>
                = $($m::)+RwLockWriteGuard<'a, T>
            where
                Self: 'a;
            #[inline]
            fn read_unpoisoned(&self) -> Self::ReadGuard<'_> {
                self.read().unwrap_or_else(std::sync::PoisonError::into_inner)
            }
            #[inline]
            fn write_unpoisoned(&self) -> Self::WriteGuard<'_> {
                self.write().unwrap_or_else(std::sync::PoisonError::into_inner)
            }
        }
    };
}

// std's locks in both builds (the backends use them directly), loom's too
// under loom (the facade's `Mutex` and `RwLock` are loom's there).
unpoisoned!(std::sync);
#[cfg(loom)]
unpoisoned!(loom::sync);

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
