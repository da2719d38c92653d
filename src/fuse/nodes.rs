//! FUSE node ids as dentry references.
//!
//! The kernel names a node by a 64-bit id it got from us in an entry reply,
//! and counts how many such replies it received (its `nlookup`); when it
//! drops the node it sends `forget(id, nlookup)`. Here the id is the
//! dentry's address and each entry reply carries one counted reference
//! ([`DentryRef::into_raw`]): the kernel's lookup count *is* part of the
//! dentry's lockref count. So
//!
//! - a lookup that finds a node the kernel is forgetting takes its own
//!   reference with `get_not_dead` (or falls back and allocates a fresh
//!   dentry if the old one died), and the forget drops only the references
//!   it names: the node stays alive for the new reply;
//! - a forgotten node is freed by the `dput` that drops its last reference,
//!   once, and only after every lookup that could return it has its own
//!   reference or has moved on.
//!
//! While the kernel holds a node it may send requests naming it; those
//! borrow the dentry without touching its count ([`Nodes::borrow`]). The
//! kernel cannot forget a node while one of its own requests on it waits
//! for our reply, so a borrow is valid until the reply is sent; handlers
//! finish with the borrowed dentry before they reply.
//!
//! The root is FUSE_ROOT_ID (1), never counted by the kernel; we hold one
//! reference on it for the whole mount.
//!
//! For the unmount report each dentry also keeps the kernel's lookup count
//! in its `d_fsdata` word (unused otherwise: backends never see dentries),
//! so the nodes the kernel still holds are counted exactly, and a forget of
//! more than was handed out is refused instead of freeing a live dentry.
//! `d_fsdata` shares a cache line with the tail of the inline name, so this
//! costs FUSE lookups and forgets one write there; library lookups never
//! write it.

use std::mem::ManuallyDrop;
use std::ops::Deref;

use crate::dentry::Dentry;
use crate::errno::{Errno, Result};
use crate::sync::{Arc, Ordering};
use crate::{DentryRef, Vfs};

use super::stats::Stats;

/// The node id of the root directory (FUSE_ROOT_ID).
pub const ROOT_ID: u64 = 1;

/// A dentry borrowed for one request: derefs to a `DentryRef` but never
/// drops a count.
pub struct Node<'v>(ManuallyDrop<DentryRef<'v>>);

impl<'v> Deref for Node<'v> {
    type Target = DentryRef<'v>;
    fn deref(&self) -> &DentryRef<'v> {
        &self.0
    }
}

/// The node-id side of a mount: the root's reference and what the kernel
/// holds.
pub struct Nodes {
    root: *const Dentry,
    stats: Arc<Stats>,
}

// SAFETY: `root` is a counted reference owned by this struct; dentries are
// Sync and their counts are dropped with an atomic protocol from any thread.
unsafe impl Send for Nodes {}
// SAFETY: as above; `root` is only read after construction.
unsafe impl Sync for Nodes {}

impl Nodes {
    /// Take the reference on `vfs`'s root that backs node id 1. Give it back
    /// with [`Nodes::release`] before `vfs` is dropped.
    pub fn new(vfs: &Vfs, stats: Arc<Stats>) -> Nodes {
        Nodes {
            root: vfs.root().into_raw(),
            stats,
        }
    }

    /// The node id the kernel will know `d` by.
    pub fn id_of(&self, d: &DentryRef<'_>) -> u64 {
        let p = d.dentry() as *const Dentry;
        if p == self.root {
            ROOT_ID
        } else {
            p as u64
        }
    }

    /// Borrow the dentry behind node id `id` for the length of a request.
    ///
    /// # Safety
    /// `id` is 1 or an id from [`Nodes::hand_out`] on this `Nodes` whose
    /// references are not all forgotten, and the kernel keeps it so until
    /// the borrow ends (it does while its request on `id` waits for the
    /// reply). `vfs` is the `Vfs` this `Nodes` was made from.
    pub unsafe fn borrow<'v>(&self, vfs: &'v Vfs, id: u64) -> Result<Node<'v>> {
        if id == 0 {
            return Err(Errno::EIO);
        }
        let p = if id == ROOT_ID {
            self.root
        } else {
            id as *const Dentry
        };
        // SAFETY: p carries a count owned by us or the kernel for longer
        // than this borrow (caller's contract); ManuallyDrop never drops it.
        Ok(Node(ManuallyDrop::new(unsafe { vfs.dentry_from_raw(p) })))
    }

    /// Give the kernel one counted reference: the id for an entry reply.
    /// A negative dentry is refused (ENOENT): the kernel only counts
    /// positive entries.
    pub fn hand_out(&self, d: DentryRef<'_>) -> Result<u64> {
        if d.is_negative() {
            return Err(Errno::ENOENT);
        }
        let id = self.id_of(&d);
        if id == ROOT_ID {
            // The root is held for the whole mount and never forgotten.
            return Ok(ROOT_ID);
        }
        // Relaxed (all three): counts for the report (see stats.rs); they
        // guard no memory. The per-dentry count's RMWs are totally ordered
        // among themselves, so a hand-out racing the forget that empties it
        // moves the node count the right way either way round.
        if d.dentry().d_fsdata.fetch_add(1, Ordering::Relaxed) == 0 {
            self.stats.kernel_nodes.fetch_add(1, Ordering::Relaxed);
        }
        self.stats.kernel_refs.fetch_add(1, Ordering::Relaxed);
        let _ = d.into_raw();
        Ok(id)
    }

    /// The kernel forgot `n` lookups of node `id`: drop that many references.
    ///
    /// # Safety
    /// As for [`Nodes::borrow`], and the kernel received at least `n` entry
    /// replies for `id` that it has not forgotten yet.
    pub unsafe fn forget(&self, vfs: &Vfs, id: u64, n: u64) {
        if id == ROOT_ID || id == 0 || n == 0 {
            return;
        }
        // SAFETY: the kernel still holds n >= 1 references on the dentry
        // (caller's contract), so it is alive.
        let d = unsafe { &*(id as *const Dentry) };
        // Relaxed: see hand_out. Subtract only what is there.
        let taken = d
            .d_fsdata
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(n));
        match taken {
            Ok(prev) if prev == n => {
                self.stats.kernel_nodes.fetch_sub(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(_) => {
                self.stats.bad_forgets.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.stats.kernel_refs.fetch_sub(n, Ordering::Relaxed);
        for _ in 0..n {
            // SAFETY: each of the n references was handed out by into_raw
            // and is re-owned exactly once here; dropping it is the dput.
            drop(unsafe { vfs.dentry_from_raw(id as *const Dentry) });
        }
    }

    /// Give back the root reference. Idempotent.
    pub fn release(&mut self, vfs: &Vfs) {
        if !self.root.is_null() {
            // SAFETY: the reference taken in `new`, re-owned once (root is
            // nulled right after).
            drop(unsafe { vfs.dentry_from_raw(self.root) });
            self.root = std::ptr::null();
        }
    }
}
