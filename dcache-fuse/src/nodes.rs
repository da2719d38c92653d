//! FUSE nodes are inodes.
//!
//! In the FUSE protocol, as in the kernel's `fuse_inode`, a node id names an
//! **inode**: the kernel keeps one inode per node id (attributes, page
//! cache, lookup count), and two names answered with one node id are two
//! dentries of that inode, as hard links are everywhere else. So here:
//!
//! - **The node id is the backend's inode number** ([`IdMap`]), which is
//!   also the `st_ino` the kernel shows (`attr.ino` in every reply).
//!   The root is `FUSE_ROOT_ID` (1) on the wire; the backend's root number
//!   and 1 trade places, so the map stays one-to-one (memfs and kernfs
//!   number their root 1, where it is the identity). A number is stable
//!   while the file exists, and survives eviction from the cache and, for
//!   passthrough over one host filesystem, a daemon restart.
//! - **The kernel's lookup count lives on the inode**, in the word dcache
//!   lends its frontend ([`Inode::frontend_word`]; protocol in
//!   [`crate::lookupcount`]). While it is above zero the node is
//!   *published* in a lock-free map (papaya) from node id to `Node`, which
//!   holds one counted reference on a dentry of the inode: the one the
//!   first counted lookup came through. That reference keeps the dentry
//!   and so the inode alive until the `forget` that empties the count.
//! - A lookup of a node the kernel already holds (every revalidation under
//!   `entry_timeout=0`) is answered from the rcu-walk
//!   (`Nodes::hand_out_held`): one compare-and-swap on the inode's count,
//!   no reference, no lock, no allocation, no map access.
//! - Any other lookup (`Nodes::hand_out`) holds a reference of its own;
//!   under the node's transition lock (one of a few striped mutexes, taken
//!   only when a count may leave or reach zero) it publishes the node at 0
//!   and gives its reference to it, otherwise drops its reference.
//!
//! Requests name nodes by [`NodeId`], which only the code that receives a
//! request from the kernel can make (`unsafe fn from_kernel`): the kernel
//! never forgets a node while a request on it waits for our reply, so the
//! dentry found in the map stays valid for the request. An id that is not
//! in the map gives ESTALE; a forget of more than was counted is refused
//! and counted.
//!
//! A node holds the dentry it was first handed out through even if that
//! name is later unlinked or renamed: the inode is the same, and every
//! request on a node acts on the inode (for a directory, its one dentry).

use std::hash::{BuildHasher, Hasher};
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::ptr::NonNull;

use dcache::dentry::Dentry;
use dcache::errno::{Errno, Result};
use dcache::fs::Ino;
use dcache::inode::Inode;
use dcache::{DentryRef, Vfs};

use super::stats::Stats;
use crate::lookupcount::LookupCount;
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};

/// The kernel's lookup count of the node `i` is: kept in the inode's
/// frontend word (one load of a field of the inode; no lookup).
#[inline(always)]
fn lookups(i: &Inode) -> &LookupCount {
    LookupCount::of(i.frontend_word())
}

/// The node id of the root directory (FUSE_ROOT_ID).
pub const ROOT_ID: u64 = 1;

/// A node id named by a request from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeId(u64);

impl NodeId {
    /// The root directory.
    pub const ROOT: NodeId = NodeId(ROOT_ID);

    /// The node id a request names.
    ///
    /// # Safety
    /// `id` is the node id of a request the kernel sent to this mount (or a
    /// caller standing in for it, as tests do), and the node stays held
    /// (not forgotten to zero) until that request is answered. The kernel
    /// guarantees this: it forgets a node only once nothing uses it.
    pub unsafe fn from_kernel(id: u64) -> NodeId {
        NodeId(id)
    }

    /// The number on the wire.
    pub fn raw(self) -> u64 {
        self.0
    }
}

/// Backend inode numbers <-> node ids (and `st_ino`): the identity, except
/// that the backend's root and number 1 trade places. An involution, so
/// the same function maps both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdMap {
    root_ino: Ino,
}

impl IdMap {
    /// The map for a backend whose root is `root_ino`.
    pub fn new(root_ino: Ino) -> IdMap {
        IdMap { root_ino }
    }

    /// The node id (and `st_ino`) of backend inode `ino`.
    #[inline(always)]
    pub fn id(&self, ino: Ino) -> u64 {
        if ino == self.root_ino {
            ROOT_ID
        } else if ino == ROOT_ID {
            self.root_ino
        } else {
            ino
        }
    }

    /// The backend inode number of node id `id`.
    #[inline(always)]
    pub fn ino(&self, id: u64) -> Ino {
        self.id(id)
    }
}

/// A dentry borrowed for one request: derefs to a `DentryRef` but never
/// drops a count.
pub(crate) struct Borrowed<'v>(ManuallyDrop<DentryRef<'v>>);

impl<'v> Deref for Borrowed<'v> {
    type Target = DentryRef<'v>;
    fn deref(&self) -> &DentryRef<'v> {
        &self.0
    }
}

/// A published node: the inode and the counted dentry reference that pins
/// it for the kernel.
struct Node {
    dentry: NonNull<Dentry>,
    /// Whether the kernel was already asked to drop this node's entry
    /// (`victims`): it is asked once per publication.
    asked: AtomicBool,
    /// The handle of a file the daemon opened on this node itself (0:
    /// none), for I/O the kernel sends without a handle when it opens
    /// files without asking (FUSE_NO_OPEN_SUPPORT). Set only under the
    /// node's stripe lock while published, taken when unpublished: it
    /// lives exactly as long as the kernel holds the node.
    implicit: AtomicU64,
}

// SAFETY: `dentry` is a counted reference owned by the node; dentries are
// Sync and their counts are dropped with an atomic protocol on any thread.
unsafe impl Send for Node {}
// SAFETY: as above; the pointer is only read after publication.
unsafe impl Sync for Node {}

/// Transition locks: a node's count leaves or reaches zero only under
/// `stripes[id % STRIPES]`.
const STRIPES: usize = 64;

/// A hasher for node ids (integers): one multiply, high bits folded down.
#[derive(Clone, Copy, Default)]
struct IdHash;

struct IdHasher(u64);

impl BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

/// The node side of a mount: the root's reference, the published nodes,
/// and what the kernel holds.
pub(crate) struct Nodes {
    root: *const Dentry,
    ids: IdMap,
    map: papaya::HashMap<u64, Node, IdHash>,
    stripes: Box<[Mutex<()>]>,
    stats: Arc<Stats>,
}

// SAFETY: `root` is a counted reference owned by this struct; the map's
// values are Send + Sync (above); the rest is Sync.
unsafe impl Send for Nodes {}
// SAFETY: as above; `root` is only read after construction.
unsafe impl Sync for Nodes {}

impl Nodes {
    /// Take the reference on `vfs`'s root that backs node id 1. Give it back
    /// with [`Nodes::release`] before `vfs` is dropped.
    pub fn new(vfs: &Vfs, stats: Arc<Stats>) -> Nodes {
        let root = vfs.root();
        let root_ino = root.ino().unwrap_or(ROOT_ID);
        Nodes {
            root: root.into_raw(),
            ids: IdMap::new(root_ino),
            map: papaya::HashMap::builder().hasher(IdHash).build(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            stats,
        }
    }

    /// Node ids <-> backend inode numbers for this mount.
    pub fn ids(&self) -> IdMap {
        self.ids
    }

    fn stripe(&self, id: u64) -> MutexGuard<'_, ()> {
        // A panic never happens under a stripe lock (only count and map
        // updates run there), so a poisoned one still guards nothing
        // broken.
        self.stripes[(id as usize) % STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Borrow a dentry of node `id` for the length of its request.
    pub fn borrow<'v>(&self, vfs: &'v Vfs, id: NodeId) -> Result<Borrowed<'v>> {
        let p = if id.0 == ROOT_ID {
            self.root
        } else {
            let g = self.map.guard();
            let node = self.map.get(&id.0, &g).ok_or(Errno::ESTALE)?;
            node.dentry.as_ptr() as *const Dentry
        };
        // SAFETY: p carries a count owned by this struct (the root) or by
        // the published node, which the kernel keeps held until the request
        // is answered (NodeId's contract) and so is not unpublished (and
        // its reference not dropped) before this borrow ends. ManuallyDrop
        // never drops the count.
        Ok(Borrowed(ManuallyDrop::new(unsafe {
            vfs.dentry_from_raw(p)
        })))
    }

    /// Count one more kernel lookup of `d`'s inode: the node id for an entry
    /// reply. A negative dentry is refused (ENOENT): the kernel counts only
    /// positive entries.
    pub fn hand_out(&self, d: DentryRef<'_>) -> Result<u64> {
        let inode: *const Inode = d.inode().ok_or(Errno::ENOENT)?;
        // SAFETY: `d` is a counted reference to a dentry bound to this
        // inode; the inode lives as long as the dentry points to it, and a
        // pinned dentry (the node's) keeps it until unpublished.
        let i = unsafe { &*inode };
        let id = self.ids.id(i.ino());
        if id == ROOT_ID {
            // The root is held for the whole mount and never forgotten.
            return Ok(ROOT_ID);
        }
        if lookups(i).get_held() {
            self.stats.kernel_refs.add(1);
            return Ok(id);
        }
        let g = self.stripe(id);
        let mut conflict = false;
        let mut pin = Some(d);
        let guard = self.map.guard();
        if lookups(i).load() == 0 {
            // Under the stripe lock a count of 0 means this inode is not
            // published; a node under the same id is another inode that
            // the backend gave the same number while the kernel still
            // holds the old one.
            conflict = self.map.get(&id, &guard).is_some();
        }
        if conflict {
            return Err(Errno::ESTALE);
        }
        let published = lookups(i).get_locked(&g, || {
            // Our reference becomes the node's.
            if let Some(dentry) = pin
                .take()
                .and_then(|d| NonNull::new(d.into_raw() as *mut Dentry))
            {
                self.map.insert(
                    id,
                    Node {
                        dentry,
                        asked: AtomicBool::new(false),
                        implicit: AtomicU64::new(0),
                    },
                    &guard,
                );
            }
        });
        drop(guard);
        drop(g);
        if published {
            // Relaxed: statistics (stats.rs).
            self.stats.kernel_nodes.fetch_add(1, Ordering::Relaxed);
        }
        // Unpublished: the node's own reference pins it, `pin` drops ours.
        drop(pin);
        self.stats.kernel_refs.add(1);
        Ok(id)
    }

    /// Count one more kernel lookup of `d`'s inode without a reference of
    /// our own: only while the kernel already holds the node (its count is
    /// above zero, so the node's reference keeps the inode alive). The node
    /// id for an entry reply, or `None` (the caller then takes a reference
    /// and uses [`Nodes::hand_out`]). `i` is the inode of a positive
    /// dentry, loaded inside the read section the caller is in (see
    /// `Vfs::lookup_rcu_with`).
    #[inline]
    pub fn hand_out_held(&self, i: &Inode) -> Option<u64> {
        let id = self.ids.id(i.ino());
        if id == ROOT_ID {
            return Some(ROOT_ID);
        }
        if !lookups(i).get_held() {
            return None;
        }
        self.stats.kernel_refs.add(1);
        Some(id)
    }

    /// The kernel forgot `n` lookups of node `id`; at zero the node is
    /// unpublished and its reference dropped. A forget of an unknown node
    /// or of more than was counted is refused and counted.
    /// If the node is unpublished with an implicit file, `close` gets its
    /// handle before the node stops being counted (so a count of 0 held
    /// nodes means their files are closed too).
    pub fn forget(&self, vfs: &Vfs, id: NodeId, n: u64, close: impl FnOnce(u64)) {
        if id.0 == ROOT_ID || n == 0 {
            return;
        }
        let guard = self.map.guard();
        let Some(node) = self.map.get(&id.0, &guard) else {
            // Relaxed: statistics.
            self.stats.bad_forgets.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let dentry = node.dentry;
        // SAFETY: the node's reference keeps its dentry alive until it is
        // unpublished, which only this forget can do now.
        let d = unsafe { dentry.as_ref() };
        // Not in a read section: the node's counted reference keeps the
        // dentry, so the held (Acquire) load is the right one.
        let p = d.inode_ptr_held();
        // SAFETY: a node's dentry keeps its inode (a pinned dentry is
        // unhashed on unlink, never made negative).
        let Some(i) = (unsafe { p.as_ref() }) else {
            self.stats.bad_forgets.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut unpinned = None;
        let mut implicit = 0;
        let r = lookups(i).put(
            n,
            || self.stripe(id.0),
            || {
                self.map.remove(&id.0, &guard);
                // Under the stripe lock, as `set_implicit`: no handle can
                // be set on the node after this. Acquire: the file the
                // handle names was published with Release.
                implicit = node.implicit.swap(0, Ordering::Acquire);
                unpinned = Some(dentry);
            },
        );
        drop(guard);
        match r {
            Ok(_) => self.stats.kernel_refs.sub(n),
            Err(_) => {
                self.stats.bad_forgets.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(dentry) = unpinned {
            if implicit != 0 {
                close(implicit);
            }
            // Relaxed: statistics.
            self.stats.kernel_nodes.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: the node's counted reference, given back once (the
            // node is unpublished, so no one else can reach it).
            drop(unsafe { vfs.dentry_from_raw(dentry.as_ptr()) });
        }
    }

    /// The handle of node `id`'s implicit file (0: none, or not published).
    pub fn implicit(&self, id: NodeId) -> u64 {
        self.implicit_of(id.0).unwrap_or(0)
    }

    /// Node `id`'s implicit file: `None` if the node is not published,
    /// `Some(0)` if it has none.
    pub fn implicit_of(&self, id: u64) -> Option<u64> {
        let g = self.map.guard();
        // Acquire: pairs with the Release in `set_implicit`, so the file
        // behind the handle is seen whole.
        self.map
            .get(&id, &g)
            .map(|n| n.implicit.load(Ordering::Acquire))
    }

    /// Give node `id` the implicit file `fh`, if it is published and has
    /// none yet; false otherwise (the caller closes its file).
    pub fn set_implicit(&self, id: u64, fh: u64) -> bool {
        // Under the stripe lock, where a node is not unpublished (`forget`
        // takes the handle there), so a handle set here is always taken.
        let _s = self.stripe(id);
        let g = self.map.guard();
        let Some(node) = self.map.get(&id, &g) else {
            return false;
        };
        // Release: publishes the file the handle names; Relaxed on
        // failure (nothing read).
        node.implicit
            .compare_exchange(0, fh, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Up to `max` published nodes for the kernel to drop, each as its
    /// entry (parent's node id, name): non-directories first (dropping a
    /// directory's entry drops its whole cached subtree), in the map's
    /// order, which follows the hash, not use. A node is named once per
    /// publication (one the kernel keeps because it uses it is not asked
    /// about again), and at most `4 * max` nodes are looked at. Each node
    /// is read under its stripe lock, where its count cannot reach zero,
    /// so its reference (and so its dentry) stays while it is read.
    pub fn victims(&self, vfs: &Vfs, max: usize) -> Vec<(u64, Vec<u8>)> {
        let mut leaves = Vec::new();
        let mut dirs = Vec::new();
        let guard = self.map.guard();
        for (&id, node) in self.map.iter(&guard).take(max.saturating_mul(4)) {
            if leaves.len() >= max {
                break;
            }
            // Relaxed: a hint that only avoids repeating a request; the
            // kernel ignores an entry it no longer has.
            if node.asked.load(Ordering::Relaxed) {
                continue;
            }
            let _g = self.stripe(id);
            match self.map.get(&id, &guard) {
                Some(n) if n.dentry == node.dentry => {}
                _ => continue,
            }
            // SAFETY: the node is published and, under its stripe lock,
            // cannot be unpublished, so its counted reference keeps the
            // dentry; ManuallyDrop never drops that count.
            let d = ManuallyDrop::new(unsafe { vfs.dentry_from_raw(node.dentry.as_ptr()) });
            let Some(i) = d.inode() else { continue };
            let is_dir = i.is_dir();
            let parent = d.parent();
            let Some(pino) = parent.ino() else { continue };
            let entry = (self.ids.id(pino), d.name());
            if is_dir {
                if dirs.len() < max {
                    dirs.push((entry, node));
                }
            } else {
                node.asked.store(true, Ordering::Relaxed);
                leaves.push(entry);
            }
        }
        let room = max.saturating_sub(leaves.len());
        for (entry, node) in dirs.into_iter().take(room) {
            // Relaxed: as above.
            node.asked.store(true, Ordering::Relaxed);
            leaves.push(entry);
        }
        leaves
    }

    /// Give back the root reference and every node's (the session is over:
    /// the kernel sends no forgets at unmount). Idempotent.
    /// Returns the handles of the nodes' implicit files, for the caller
    /// to close.
    pub fn release(&mut self, vfs: &Vfs) -> Vec<u64> {
        let (pinned, implicit): (Vec<NonNull<Dentry>>, Vec<u64>) = {
            let m = self.map.pin();
            let v = m.values().map(|n| n.dentry).collect();
            // Acquire: as in `forget`.
            let f = m
                .values()
                .map(|n| n.implicit.swap(0, Ordering::Acquire))
                .filter(|&fh| fh != 0)
                .collect();
            m.clear();
            (v, f)
        };
        for dentry in pinned {
            // SAFETY: each node's reference, re-owned once (the map is
            // empty now); the dentry keeps its inode until this dput.
            let d = unsafe { vfs.dentry_from_raw(dentry.as_ptr()) };
            if let Some(i) = d.inode() {
                lookups(i).clear();
            }
            drop(d);
        }
        if !self.root.is_null() {
            // SAFETY: the reference taken in `new`, re-owned once (root is
            // nulled right after).
            drop(unsafe { vfs.dentry_from_raw(self.root) });
            self.root = std::ptr::null();
        }
        implicit
    }
}
