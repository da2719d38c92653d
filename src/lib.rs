//! dcache: the Linux VFS name-lookup fast path as a userspace library.
//!
//! - [`lockref`]: spinlock + reference count in one 64-bit word.
//! - [`fs`]: the backend contract and the backends.
//! - `fuse`: `dcache mount`, serving a backend through FUSE (not built
//!   under loom).
//! - [`layout`]: pahole-style field layouts of the hot structures.
//! - `bench`: the will-it-scale harness behind `dcache bench` (not built
//!   under loom, whose atomics only run inside a model).
//!
//! All lock-free code reaches atomics through [`sync`], so it also builds
//! under loom (`RUSTFLAGS="--cfg loom"`).

// Every unsafe operation inside an `unsafe fn` needs its own block, and
// every block its `// SAFETY:` line.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[cfg(not(loom))]
pub mod bench;
pub mod cache_aligned;
#[cfg(not(loom))]
pub mod cli;
pub mod cred;
pub mod dentry;
pub mod errno;
pub mod file;
pub mod fs;
#[cfg(not(loom))]
pub mod fuse;
pub mod inode;
pub mod layout;
pub mod lockref;
pub mod lookupcount;
pub mod permission;
pub mod pollgate;
pub mod rcu;
pub mod seqcount;
pub mod slab;
pub mod sync;
mod table;
pub mod vfs;

pub use cred::{Caps, Cred};
pub use errno::{Errno, Result};
pub use fs::{
    Attr, Ctx, DirEntry, FileSystem, FileType, Ino, RenameFlags, SetAttr, SetTime, Timespec,
};
pub use vfs::{AsCred, At, Config, DentryRef, OpenFile, ReadSection, StatMode, Vfs};
