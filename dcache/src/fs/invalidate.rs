//! Changes made underneath the dcache, reported by whoever sees them.
//!
//! A backend's truth can change without going through the `Vfs` in front
//! of it: another machine writes a shared namespace (dcache-etcd's watch
//! sees it), other processes write the host directory a passthrough
//! serves (inotify or fanotify would see it), a server pushes change
//! notices (NFSv4 delegations recalled, 9P2000.L has none). Whoever sees
//! such a change reports it through an [`Invalidator`], the `Vfs`'s
//! handle, in the backend's own terms (inode numbers and names):
//!
//! - [`Invalidator::entry`]: the name `name` in directory `dir` now means
//!   something else (created, removed, renamed to or from, relinked). The
//!   dcache unhashes its entry for that name under every cached dentry of
//!   `dir`, positive or negative, so the next lookup asks the backend.
//!   Held references stay valid, as for a local unlink.
//! - [`Invalidator::inode`]: the attributes or data of `ino` changed. The
//!   dcache's cached copy of the attributes is replaced, by the new
//!   attributes when the caller has them, otherwise by asking the backend
//!   (`getattr`, from the calling thread).
//!
//! Each report then goes to every listener a frontend registered with
//! [`Vfs::subscribe`](crate::Vfs::subscribe), in the order reported; the
//! FUSE frontend forwards them to the kernel's own cache
//! (`FUSE_NOTIFY_INVAL_ENTRY` / `FUSE_NOTIFY_INVAL_INODE`).
//!
//! The `Vfs` hands a backend its invalidator once, through
//! [`FileSystem::attach`](super::FileSystem::attach), when it is built;
//! anyone else gets one from [`Vfs::invalidator`](crate::Vfs::invalidator).
//! A report made after the `Vfs` is gone does nothing.
//!
//! **Ordering.** Report a change only once the backend answers with it:
//! a lookup the report makes the dcache ask for must find the new state,
//! or the old one would be cached again. An entry report waits for lookups
//! in that directory already talking to the backend (it takes the
//! directory's lock for writing), so one of those that read the old state
//! cannot cache it after the report returns.
//!
//! **Where not to call from.** Any thread, except from inside a backend
//! call the same `Vfs` made (that call may hold the directory lock an
//! entry report takes) or from a listener.

use std::sync::Arc;

use super::{Attr, Ino};

/// One change, as listeners see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalidation<'a> {
    /// The name `name` in directory `dir` changed what it refers to.
    Entry {
        /// The directory's inode number.
        dir: Ino,
        /// The name (one component).
        name: &'a [u8],
    },
    /// The attributes or data of `ino` changed.
    Inode {
        /// The inode number.
        ino: Ino,
    },
}

/// What an [`Invalidator`] reports to (the `Vfs`, which implements it).
pub(crate) trait Target: Send + Sync {
    fn entry(&self, dir: Ino, name: &[u8]);
    fn inode(&self, ino: Ino, attr: Option<&Attr>);
}

/// A handle for reporting changes made underneath a `Vfs` (see the module
/// docs). Cheap to clone; it does not keep the `Vfs` alive.
#[derive(Clone)]
pub struct Invalidator(Arc<dyn Target>);

impl Invalidator {
    pub(crate) fn new(t: Arc<dyn Target>) -> Invalidator {
        Invalidator(t)
    }

    /// The name `name` in directory `dir` now means something else.
    pub fn entry(&self, dir: Ino, name: &[u8]) {
        self.0.entry(dir, name)
    }

    /// The attributes or data of `ino` changed; `attr`: the new attributes,
    /// if the caller has them (otherwise the backend is asked).
    pub fn inode(&self, ino: Ino, attr: Option<&Attr>) {
        self.0.inode(ino, attr)
    }
}

impl std::fmt::Debug for Invalidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Invalidator")
    }
}
