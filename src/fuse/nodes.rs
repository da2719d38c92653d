//! FUSE node ids as dentry references.
//!
//! The kernel names a node by a 64-bit id it got from us in an entry reply,
//! and counts how many such replies it received (its `nlookup`); when it
//! drops the node it sends `forget(id, nlookup)`. Here the id is the
//! dentry's address, and the kernel's lookup count lives in the dentry's
//! `d_fsdata` word (unused otherwise: backends never see dentries). While
//! that count is above zero the dentry carries one counted reference on the
//! kernel's behalf:
//!
//! - every entry reply starts from a reference the lookup took itself
//!   (`get_not_dead` on a cached dentry, or a fresh one); it adds one to the
//!   lookup count, and keeps its reference for the kernel if the count was
//!   0, else drops it;
//! - except for a node the kernel already holds, found by an rcu-walk
//!   ([`Nodes::hand_out_held`]): there the lookup takes no reference and
//!   only moves the count from `c > 0` to `c + 1` (a compare-and-swap that
//!   refuses 0), inside the read section that keeps the dentry's memory
//!   valid; at 0 it falls back to the reference-taking path above;
//! - `forget(id, n)` subtracts `n` and drops the kernel's reference if that
//!   brought the count to 0.
//!
//! The two read-modify-writes on one word are totally ordered, so a lookup
//! racing the forget that empties a node either comes first (the forget
//! sees a count above `n` and keeps the reference) or second (it finds 0
//! and keeps its own); in both cases the node stays alive for the new
//! reply. A reference-free lookup racing it either comes first (the forget
//! sees its +1) or finds 0 and falls back. The count is above zero only
//! while a reference backs it (taken before the 0 -> 1 step, dropped after
//! the step to 0), so a successful `c -> c + 1` never revives a dead node. A forgotten node is freed by the `dput` that drops its last
//! reference, once, and never while a lookup can still return it (the
//! lockref and `d_seq` make a lookup that meets a dying dentry fall back).
//! One reference per node, not one per lookup, because the kernel's count
//! is 64 bits and a lockref's 32: a node revalidated for hours under
//! `timeout=0` passes 2^31 lookups without ever being forgotten.
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
//! `d_fsdata` shares a cache line with the tail of the inline name, so FUSE
//! lookups and forgets write there once each; library lookups never do.

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

    /// Count one more kernel lookup of `d`: the id for an entry reply. A
    /// negative dentry is refused (ENOENT): the kernel only counts positive
    /// entries.
    pub fn hand_out(&self, d: DentryRef<'_>) -> Result<u64> {
        if d.is_negative() {
            return Err(Errno::ENOENT);
        }
        let id = self.id_of(&d);
        if id == ROOT_ID {
            // The root is held for the whole mount and never forgotten.
            return Ok(ROOT_ID);
        }
        // Relaxed: the lookup count only decides which thread owns the
        // kernel's reference (module docs); the RMWs on it are totally
        // ordered, and the reference's own get/put carry the ordering that
        // protects the dentry. The stats are statistics (stats.rs).
        if d.dentry().d_fsdata.fetch_add(1, Ordering::Relaxed) == 0 {
            self.stats.kernel_nodes.fetch_add(1, Ordering::Relaxed);
            // Our reference becomes the kernel's.
            let _ = d.into_raw();
        }
        // Otherwise the kernel's reference already pins the node and `d`
        // is dropped here.
        self.stats.kernel_refs.add(1);
        Ok(id)
    }

    /// Count one more kernel lookup of `d` without a reference of our own:
    /// only while the kernel already holds the node (its lookup count is
    /// above zero, so the kernel's reference keeps the dentry alive). The id
    /// for an entry reply, or `None` when the count is zero (the caller then
    /// takes a reference and uses [`Nodes::hand_out`]). `d` must be positive
    /// and reached inside a read section (or under a reference).
    pub fn hand_out_held(&self, d: &Dentry) -> Option<u64> {
        let p = d as *const Dentry;
        if p == self.root {
            return Some(ROOT_ID);
        }
        // Relaxed: as in hand_out, the RMWs on the count are totally
        // ordered. A forget that empties the count either comes first (we
        // then see 0 and decline) or second (it sees our +1 and keeps the
        // kernel's reference). Nothing of the dentry is read after this
        // step (the id is its address), so it needs no ordering beyond
        // the caller's read section. The count never reaches u64::MAX in
        // practice; checked_add declines rather than wraps.
        d.d_fsdata
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                if c == 0 {
                    None
                } else {
                    c.checked_add(1)
                }
            })
            .ok()?;
        self.stats.kernel_refs.add(1);
        Some(p as u64)
    }

    /// The kernel forgot `n` lookups of node `id`; at zero, drop its
    /// reference. A forget of more than the count is refused and counted.
    ///
    /// # Safety
    /// As for [`Nodes::borrow`]: `id` came from `hand_out` and the kernel
    /// has not forgotten all of it yet.
    pub unsafe fn forget(&self, vfs: &Vfs, id: u64, n: u64) {
        if id == ROOT_ID || id == 0 || n == 0 {
            return;
        }
        // SAFETY: the kernel's count is not zero yet (caller's contract),
        // so its reference keeps the dentry alive.
        let d = unsafe { &*(id as *const Dentry) };
        // Relaxed: see hand_out. Subtract only what is there.
        let taken = d
            .d_fsdata
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(n));
        match taken {
            Ok(prev) => {
                self.stats.kernel_refs.sub(n);
                if prev == n {
                    self.stats.kernel_nodes.fetch_sub(1, Ordering::Relaxed);
                    // SAFETY: the count went from n to 0, so this thread
                    // owns the kernel's reference (taken by into_raw in
                    // hand_out at the 0 -> 1 step) and re-owns it once;
                    // dropping it is the dput.
                    drop(unsafe { vfs.dentry_from_raw(id as *const Dentry) });
                }
            }
            Err(_) => {
                self.stats.bad_forgets.fetch_add(1, Ordering::Relaxed);
            }
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
