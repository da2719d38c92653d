//! dcache: the Linux VFS name-lookup fast path as a userspace library.
//!
//! - [`lockref`]: spinlock + reference count in one 64-bit word.
//! - [`fs`]: the backend contract and the backends.
//!
//! All lock-free code reaches atomics through [`sync`], so it also builds
//! under loom (`RUSTFLAGS="--cfg loom"`).

pub mod cache_aligned;
pub mod errno;
pub mod file;
pub mod fs;
pub mod lockref;
pub mod sync;

pub use errno::{Errno, Result};
