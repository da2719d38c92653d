//! dcache over etcd: one namespace, cached coherently by every client.
//!
//! [`EtcdFs`] is a [`dcache::FileSystem`] that keeps inodes, directory
//! entries and file data in etcd (v3 API) under a key prefix. Any number
//! of clients, each with its own [`dcache::Vfs`], share the namespace:
//!
//! - every change is one etcd transaction guarded by compares, retried on
//!   conflict, so racing clients get the outcomes one machine would give
//!   (one `O_EXCL` create wins, rename is atomic, link counts are exact);
//! - every cached dentry carries the revision its lookup was made at; it is
//!   used while no other client has changed its directory's entries since,
//!   as told by one watch on the prefix, with no round trip;
//! - a change to a directory's names compares its record but does not
//!   write it: each client counts the directory's size, links and times in
//!   tallies of its own ([`tally`]), so clients creating in one directory
//!   do not conflict;
//! - the watch is trusted only while it is known current to within
//!   [`Options::staleness`] (a linearizable read's revision that the
//!   watch has caught up with, see [`progress`]; nothing is written);
//!   past that, every use is revalidated against etcd;
//! - each client holds one etcd lease (its session, [`session`]): its
//!   session record and marker key vanish when it leaves or dies;
//! - a request that gets no answer from a quorum within
//!   [`Options::timeout`] returns EIO;
//! - extended attributes live in the inode record (see [`xattr`] for the
//!   limits), so they change in the same compare-and-swap transactions
//!   and reach other clients through the same watch as the attributes.
//!
//! ```no_run
//! use std::sync::Arc;
//! // Once per volume (`dcache format etcd:http://127.0.0.1:2379/myfs`):
//! dcache_etcd::format("http://127.0.0.1:2379/myfs", &Default::default()).unwrap();
//! let fs = dcache_etcd::EtcdFs::connect("http://127.0.0.1:2379/myfs").unwrap();
//! println!("joined {}", fs.volume());
//! let vfs = dcache::Vfs::new(Arc::new(fs)).unwrap();
//! vfs.as_root().mkdir(dcache::At::Root, "shared", 0o755).unwrap();
//! ```

#![deny(unsafe_code)]

mod cache;
pub mod codec;
mod error;
mod fs;
pub mod gc;
pub mod locks;
pub mod log;
mod own;
pub mod progress;
pub mod session;
pub mod slices;
pub mod spec;
pub mod store;
pub mod tally;
pub mod volume;
pub mod xattr;

pub use cache::CacheStats;
pub use error::{Cause, Error};
pub use fs::{EtcdFs, DEFAULT_QUOTA};
pub use gc::destroy;
pub use gc::{gc, GcOptions, GcReport};
pub use spec::{
    parse_spec, Options, Spec, DEFAULT_PREFIX, ENV_CACERT, ENV_CERT, ENV_KEY, ENV_PASSWORD,
    ENV_PASSWORD_FILE, ENV_USER,
};
pub use volume::{format, DataStore, FormatOptions, Volume, VolumeRecord};
