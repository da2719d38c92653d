//! `dcache mount`: serve any [`FileSystem`](crate::fs::FileSystem) backend to
//! the kernel through FUSE, with the dentry cache ([`Vfs`](crate::Vfs)) in
//! between.
//!
//! - [`nodes`]: FUSE node ids *are* dentries. A node id is the address of a
//!   dentry; every successful entry reply (lookup, create, mknod, mkdir,
//!   symlink, link, readdirplus) adds one to the kernel's lookup count kept
//!   in the dentry, and `forget(id, n)` subtracts `n`; while the count is
//!   above zero the dentry holds one counted reference for the kernel. No
//!   node table, no lock: a lookup that races a forget takes its own
//!   reference through the dentry's lockref, so a node is freed exactly
//!   once, when the last kernel and cache reference is gone, and never while
//!   a lookup can still return it.
//! - [`handles`]: an open file's FUSE handle is the address of a boxed
//!   [`OpenFile`](crate::OpenFile).
//! - [`ops`]: each request as a call on the `Vfs` relative to the parent
//!   dentry, returning plain data; [`fs`] turns the results into replies.
//! - [`attr`], [`access`]: attribute conversion and the `access(2)` check.
//! - [`stats`]: what the kernel holds (nodes, lookups, open files), for the
//!   unmount report `dcache: unmounted, N nodes still referenced`.
//! - [`options`], [`backend`], [`cli`], [`session`]: the command line, the
//!   mount options, the backends, and mounting, signals, pruning the
//!   kernel's cache and unmounting.
//! - [`poll`]: one worker busy-polls /dev/fuse while requests keep coming
//!   and CPUs are free ([`crate::pollgate`] decides when).
//! - [`testing`]: mount a memfs tree through the daemon for tests and
//!   benchmarks.
//!
//! Inode numbers: fuser makes a reply's node id and its `st_ino` one field,
//! so `stat` through the mount shows the node id (the root shows 1). Two
//! hard links are two dentries, so they show two inode numbers (with the
//! right link count); tools that detect hard links by inode number treat
//! them as separate files, and the kernel keeps a page cache per name.
//! Plain readdir reports the backend's inode numbers as `d_ino` (no lookup
//! is made for them); readdirplus reports node ids.
//!
//! Trust: node ids and file handles are addresses, and the kernel is
//! trusted to send back only the ones it was given (as libfuse's low-level
//! examples do). A forget of more references than a node was handed is
//! refused and counted, never applied.

pub mod access;
pub mod attr;
pub mod backend;
pub mod cli;
pub mod fs;
pub mod handles;
pub mod nodes;
pub mod ops;
pub mod options;
pub mod poll;
pub mod session;
pub mod stats;
pub mod testing;

pub use backend::Backend;
pub use cli::MountArgs;
pub use fs::DcacheFs;
pub use options::MountOptions;
pub use session::{mount, Mounted};
pub use stats::{Report, Stats};
