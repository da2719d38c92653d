//! dcache-fuse: serve any [`FileSystem`](dcache::fs::FileSystem) backend to
//! the kernel through FUSE, with the dentry cache ([`Vfs`](dcache::Vfs)) in
//! between.
//!
//! - [`core`]: [`FuseCore`], every FUSE request as a call on the `Vfs`
//!   taking what the request carries and returning plain data; testable
//!   without a kernel. [`fs`] is the thin adapter over it that the request
//!   layer ([`wire`]: parsing, replies, /dev/fuse, mounting) drives, and the
//!   only place where the kernel's numbers become [`NodeId`]s and [`Fh`]s
//!   (`unsafe fn from_kernel`: the kernel keeps what a request names alive
//!   until the reply).
//! - [`nodes`]: a FUSE node is an **inode**. The node id is the backend's
//!   inode number (the root and 1 trade places, so the root is
//!   FUSE_ROOT_ID on the wire), which is also `st_ino` and readdir's
//!   `d_ino`: every name of a file answers with one node id, so the kernel
//!   keeps one inode, one attribute cache and one page cache for all of
//!   them, and the number is stable while the file exists. The kernel's
//!   lookup count lives on the inode, in the word dcache lends its
//!   frontend ([`lookupcount`]); a node it holds is published in a
//!   lock-free map (papaya) from id to a pinned dentry. A LOOKUP of a node
//!   already held is answered from the rcu-walk with one compare-and-swap:
//!   no reference, lock, allocation or map access.
//! - [`handles`]: an open file's FUSE handle is the address of the
//!   [`OpenFile`](dcache::OpenFile) itself (its split-layout file).
//! - [`attr`]: attribute conversion.
//! - [`stats`]: what the kernel holds (nodes, lookups, open files), for the
//!   unmount report `dcache: unmounted, N nodes still referenced`.
//! - [`options`], [`backend`], [`session`]: the mount options, the
//!   backends, and mounting ([`mount`], or [`session::serve`] for the
//!   `dcache mount` command line). `session`'s private parts, one idea
//!   each: `mountpoint` (the check before mounting, and unmounting only
//!   the mount this process made), `mountinfo` (its parser of
//!   /proc/self/mountinfo), `prune` (pruning the kernel's cache), `signals`
//!   (the signal thread) and `daemon` (going to the background).
//! - [`poll`]: one worker busy-polls /dev/fuse while requests keep coming
//!   and CPUs are free ([`crate::pollgate`] decides when).
//! - [`awake`]: over io_uring with `-o poll_us=N`, a `SCHED_IDLE` keeper
//!   per queue keeps the queue's CPU from halting while its requests keep
//!   coming.
//! - `testing` (hidden): mount a memfs tree through the daemon for this
//!   workspace's tests and benchmarks.
//!
//! Inode numbers, as `stat` and `readdir` show them through the mount:
//! memfs and kernfs number inodes from 1 and never reuse a number;
//! passthrough shows the host's `st_ino` for everything on the source's
//! own filesystem (stable across remounts and daemon restarts), and a
//! number of its own, fixed for the mount's life, for files on other
//! filesystems mounted below the source (see the passthrough backend). The
//! root shows 1 (and a file whose backend number is 1, should one exist,
//! shows the backend's root number).

// Every unsafe operation inside an `unsafe fn` needs its own block, and
// every block its `// SAFETY:` line.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

// Under `--cfg loom` only the poll gate, the keeper's protocol and the
// lookup count are built:
// their model tests are the reason for that build, and the rest runs real
// threads.
#[cfg(not(loom))]
pub mod attr;
pub mod awake;
#[cfg(not(loom))]
pub mod backend;
#[cfg(not(loom))]
pub mod core;
#[cfg(not(loom))]
pub mod fs;
#[cfg(not(loom))]
pub mod handles;
pub mod inval;
pub mod lockbook;
#[cfg(not(loom))]
mod locks;
pub mod lookupcount;
#[cfg(not(loom))]
pub mod nodes;
#[cfg(not(loom))]
pub mod options;
#[cfg(not(loom))]
pub mod poll;
pub mod pollgate;
#[cfg(not(loom))]
pub mod session;
#[cfg(not(loom))]
pub mod stats;
mod sync;
#[cfg(not(loom))]
pub mod usage;
#[cfg(not(loom))]
pub mod wire;
// For the tests and benchmarks of this workspace (mount a memfs tree
// through the daemon); not part of the supported API.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod testing;

#[cfg(not(loom))]
pub use backend::Backend;
#[cfg(not(loom))]
pub use core::{Entry, FuseCore};
#[cfg(not(loom))]
pub use fs::DcacheFs;
#[cfg(not(loom))]
pub use handles::Fh;
pub use inval::{InvalBarrier, InvalSlot, KernelInval};
#[cfg(not(loom))]
pub use nodes::{IdMap, NodeId};
#[cfg(not(loom))]
pub use options::MountOptions;
#[cfg(not(loom))]
pub use session::{mount, Mounted};
#[cfg(not(loom))]
pub use stats::{Report, Stats};
#[cfg(not(loom))]
pub use usage::Usage;
