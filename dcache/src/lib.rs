//! dcache: the Linux VFS dentry cache and its rcu-walk name lookup, as a
//! userspace library.
//!
//! A [`Vfs`] caches names ([`DentryRef`]) and inodes in front of a
//! [`FileSystem`] backend and resolves paths the way Linux's `fs/namei.c`
//! does: lock-free (rcu-walk) first, with counted references (ref-walk) when
//! that gives up. Calls are *at-style, relative to [`At::Root`] or a
//! directory the caller holds; [`Vfs::as_cred`] makes them on behalf of a
//! [`Cred`], with Linux's permission checks.
//!
//! ```
//! use std::sync::Arc;
//! use dcache::fs::memfs::MemFs;
//! use dcache::{At, Vfs};
//!
//! let fs = Arc::new(MemFs::new());
//! fs.mkdir_p("etc", 0o755)?;
//! fs.write_file("etc/hostname", b"box\n")?;
//! let vfs = Vfs::new(fs)?;
//! assert_eq!(vfs.as_root().stat(At::Root, "etc/hostname")?.size, 4);
//! # Ok::<(), dcache::Errno>(())
//! ```
//!
//! - [`vfs`]: the `Vfs`, path walks and the namespace operations.
//! - [`fs`]: the backend contract and the backends (memfs, kernfs,
//!   passthrough).
//! - [`cred`] and [`permission`]: credentials and Linux's permission rules.
//! - [`errno`]: the error type.
//! - [`lockref`]: spinlock + reference count in one 64-bit word.
//! - [`file`](mod@file): a `struct file` and a file-descriptor table over a `Vfs`.
//! - [`layout`]: pahole-style field layouts of the hot structures (the
//!   registry); [`pahole`]: the layout types and the printer they use.
//!
//! All lock-free code reaches atomics through one module, so it also builds
//! under loom (`RUSTFLAGS="--cfg loom"`).

// Every unsafe operation inside an `unsafe fn` needs its own block, and
// every block its `// SAFETY:` line.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod acl;
pub(crate) mod cache_aligned;
pub mod cred;
pub mod dentry;
pub mod errno;
pub mod file;
pub mod fs;
pub mod inode;
pub mod layout;
pub mod lockref;
pub mod pahole;
pub mod permission;
pub(crate) mod prefetch;
mod rcu;
pub(crate) mod seqcount;
pub(crate) mod shard;
pub(crate) mod slab;
pub(crate) mod sync;
mod table;
pub mod vfs;
pub mod xattr;

// loom models of the crate-private primitives (run with
// `RUSTFLAGS="--cfg loom" cargo test --release -p dcache --lib loom_`).
#[cfg(all(test, loom))]
mod loom_seqcount;
#[cfg(all(test, loom))]
mod loom_slab;

/// The `open` flags [`AsCred::open`] understands (Linux's values, so no
/// `libc` dependency is needed to call it).
pub mod oflags {
    pub use libc::{
        O_ACCMODE, O_APPEND, O_CREAT, O_DIRECTORY, O_EXCL, O_NOFOLLOW, O_PATH, O_RDONLY, O_RDWR,
        O_TRUNC, O_WRONLY,
    };
}

pub use cred::{Caps, Cred};
pub use errno::{Errno, Result};
pub use fs::{
    Attr, Ctx, DirEntry, FileSystem, FileType, Ino, Invalidation, Invalidator, RenameFlags,
    SetAttr, SetTime, Timespec,
};
pub use vfs::{AsCred, At, Config, DentryRef, OpenFile, ReadSection, Vfs};
// The benchmark's knob (the Linux-style lockref stat); not part of the
// supported API.
#[cfg(feature = "experiments")]
pub use vfs::StatMode;
