//! kernfs: a tree of directories, generated attribute files and symlinks,
//! shaped after Linux's kernfs (the engine under sysfs and cgroupfs).
//!
//! The kernel side builds the tree (`create_dir`, `create_file`,
//! `create_link`, `remove`, `rename`); userspace sees it read-only through
//! [`FileSystem`]. The whole tree sits behind one lock of a kind chosen at
//! construction, and three [`Variant`]s reproduce kernfs' history for the
//! benchmarks:
//!
//! | variant  | lock   | revalidate                                  | permission, getattr | read      |
//! |----------|--------|---------------------------------------------|---------------------|-----------|
//! | `mutex`  | mutex  | under the lock; negative entries never kept | under the lock      | lockless  |
//! | `rwlock` | rwlock | under the lock; negatives kept by revision  | under the lock      | lockless  |
//! | `rcu`    | rwlock | lockless, from atomics                      | lockless when clean | lockless  |
//!
//! The locked variants do under their lock what kernfs did under
//! `kernfs_mutex` (5.13) or `kernfs_rwsem` (5.15): for every directory a
//! walk passes, the permission check's attribute refresh
//! (`kernfs_iop_permission` -> `kernfs_refresh_inode`) and then the entry's
//! revalidation (`kernfs_dop_revalidate`: active, parent, name); for the
//! opened file, the refresh again (`may_open`). Reading an attribute takes
//! an active reference and calls `show` outside the tree lock in every
//! variant, as kernfs does (under the open file's own mutex there).
//!
//! Every directory has a revision, bumped after each change to its entries
//! and readable without the lock. [`FileSystem::dir_cookie`] hands it out
//! before a lookup; a cached entry made then stays valid while the revision
//! is unchanged, so repeated lookups of a missing name cost no lock and no
//! allocation in the `rcu` variant.

mod attr_cell;
mod lock;
mod slot;
mod tree;

use std::fmt;
use std::str::FromStr;

use crate::errno::{Errno, Result};
use crate::fs::{
    Attr, Ctx, DirEntry, FileSystem, FileType, Ino, SetAttr, SetTime, Timespec, Validity,
};
use crate::sync::Ordering;

pub use lock::LockKind;
pub use slot::{ShowFn, StoreFn};

use lock::TreeLock;
use slot::{AttrOps, Slot, SlotTable, HAS_STORE, KIND_DIR, KIND_FILE, KIND_LINK};
use tree::{check_name, Body, DirBody, NodeData, Tree, ATTR_FILE_SIZE};

/// The root directory's inode number; later nodes count up from it.
pub const ROOT_INO: Ino = 1;

/// How `revalidate` decides about cached entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Revalidate {
    /// kernfs before Linux 5.15: never in rcu-walk (`NeedBlocking`); in
    /// blocking mode positive entries are checked under the tree lock and
    /// negative ones are always stale, so every miss goes back to `lookup`.
    LockedPositiveOnly,
    /// kernfs since 5.15: never in rcu-walk; in blocking mode, under the
    /// (shared) tree lock, a negative entry stays valid while its
    /// directory's revision equals the entry's cookie.
    Locked,
    /// dcache: answered in rcu-walk from atomics, with no lock and no
    /// allocation. Also makes `getattr` use the cached attribute copy and
    /// `open`/`read` take active references without the lock.
    Lockless,
}

/// The three configurations the benchmarks compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// kernfs in Linux 5.13: one mutex, negative entries never kept.
    Mutex,
    /// kernfs in Linux 5.15: an rwlock, negative entries kept by revision.
    RwLock,
    /// dcache's: the rwlock, with lockless revalidation and getattr.
    Rcu,
}

impl Variant {
    /// Every variant, in the order above.
    pub const ALL: [Variant; 3] = [Variant::Mutex, Variant::RwLock, Variant::Rcu];

    /// `"mutex"`, `"rwlock"` or `"rcu"`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Mutex => "mutex",
            Variant::RwLock => "rwlock",
            Variant::Rcu => "rcu",
        }
    }

    /// The tree lock this variant uses.
    pub fn lock_kind(self) -> LockKind {
        match self {
            Variant::Mutex => LockKind::Mutex,
            Variant::RwLock | Variant::Rcu => LockKind::RwLock,
        }
    }

    /// The revalidation rule this variant uses.
    pub fn revalidate(self) -> Revalidate {
        match self {
            Variant::Mutex => Revalidate::LockedPositiveOnly,
            Variant::RwLock => Revalidate::Locked,
            Variant::Rcu => Revalidate::Lockless,
        }
    }
}

impl FromStr for Variant {
    type Err = Errno;
    fn from_str(s: &str) -> Result<Variant> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or(Errno::EINVAL)
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kernfs backend (see the module docs).
pub struct KernFs {
    lock_kind: LockKind,
    reval: Revalidate,
    tree: TreeLock<Tree>,
    slots: SlotTable,
}

impl fmt::Debug for KernFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernFs")
            .field("lock", &self.lock_kind)
            .field("revalidate", &self.reval)
            .finish_non_exhaustive()
    }
}

/// An active reference: the node's callbacks stay alive while it is held.
struct Active<'a>(&'a Slot);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.put_active();
    }
}

/// Bump a directory's revision after a change to its entries; returns the
/// new revision.
fn bump_rev(s: &Slot) -> u64 {
    // Release: a reader that sees the new revision (dir_cookie, revalidate)
    // also sees the change made before it, so a cookie can never be newer
    // than the tree state a lookup after it observes.
    s.rev.fetch_add(1, Ordering::Release) + 1
}

fn bump_attr(s: &Slot) {
    // Release: a lockless getattr that sees the new version goes to the
    // lock for the new attributes rather than trusting the old copy.
    s.attr_ver.fetch_add(1, Ordering::Release);
}

impl KernFs {
    /// An empty tree (just the root, mode 0755) under a lock of `lock`'s
    /// kind, revalidating cached entries as `reval` says.
    pub fn new(lock: LockKind, reval: Revalidate) -> KernFs {
        let mut root = NodeData::new(
            0,
            b"",
            Body::Dir(DirBody {
                by_name: Default::default(),
                by_pos: Default::default(),
                next_pos: 0,
                subdirs: 0,
            }),
            0o755,
        );
        root.pos = 0;
        let mut nodes = std::collections::HashMap::new();
        nodes.insert(ROOT_INO, root);
        let slots = SlotTable::new();
        // Inode 1 lies in the first segment, which always fits.
        if let Ok(s) = slots.get_or_grow(ROOT_INO) {
            s.activate(KIND_DIR, 0, 0, None);
        }
        KernFs {
            lock_kind: lock,
            reval,
            tree: TreeLock::new(
                lock,
                Tree {
                    nodes,
                    next_ino: ROOT_INO + 1,
                },
            ),
            slots,
        }
    }

    /// An empty tree configured as variant `v`.
    pub fn with_variant(v: Variant) -> KernFs {
        KernFs::new(v.lock_kind(), v.revalidate())
    }

    /// `"mutex"`, `"rwlock"` or `"rcu"`; EINVAL for anything else.
    pub fn for_variant(name: &str) -> Result<KernFs> {
        Ok(KernFs::with_variant(name.parse()?))
    }

    /// The kind of the tree lock.
    pub fn lock_kind(&self) -> LockKind {
        self.lock_kind
    }

    /// How cached entries are revalidated.
    pub fn revalidate_mode(&self) -> Revalidate {
        self.reval
    }

    fn lockless(&self) -> bool {
        self.reval == Revalidate::Lockless
    }

    fn slot(&self, ino: Ino) -> Result<&Slot> {
        self.slots.get(ino).ok_or(Errno::ENOENT)
    }

    /// Number of live nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.tree.read().nodes.len()
    }

    // ---- kernel-side API ----

    /// A directory `parent/name`.
    pub fn create_dir(&self, parent: Ino, name: impl AsRef<[u8]>, perm: u16) -> Result<Ino> {
        let body = Body::Dir(DirBody {
            by_name: Default::default(),
            by_pos: Default::default(),
            next_pos: 0,
            subdirs: 0,
        });
        self.add_node(parent, name.as_ref(), body, perm, KIND_DIR, None)
    }

    /// An attribute file whose contents `show` generates on every read;
    /// writes go to `store` (without one, opening for writing is EACCES).
    pub fn create_file(
        &self,
        parent: Ino,
        name: impl AsRef<[u8]>,
        perm: u16,
        show: ShowFn,
        store: Option<StoreFn>,
    ) -> Result<Ino> {
        let flags = KIND_FILE | if store.is_some() { HAS_STORE } else { 0 };
        let body = Body::File {
            size: ATTR_FILE_SIZE,
        };
        let ops = AttrOps { show, store };
        self.add_node(parent, name.as_ref(), body, perm, flags, Some(ops))
    }

    /// A symlink `parent/name` to node `target`; readlink gives the relative
    /// path, as sysfs links do.
    pub fn create_link(&self, parent: Ino, name: impl AsRef<[u8]>, target: Ino) -> Result<Ino> {
        self.add_node(
            parent,
            name.as_ref(),
            Body::Link { target },
            0o777,
            KIND_LINK,
            None,
        )
    }

    fn add_node(
        &self,
        parent: Ino,
        name: &[u8],
        body: Body,
        perm: u16,
        flags: u8,
        ops: Option<AttrOps>,
    ) -> Result<Ino> {
        check_name(name)?;
        let mut t = self.tree.write();
        if t.child(parent, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        if let Body::Link { target } = body {
            t.node(target)?;
        }
        let ino = t.next_ino;
        let slot = self.slots.get_or_grow(ino)?;
        let pslot = self.slot(parent)?;
        t.next_ino += 1;
        t.nodes.insert(ino, NodeData::new(parent, name, body, perm));
        t.link_child(ino)?;
        let rev = bump_rev(pslot);
        bump_attr(pslot);
        slot.activate(flags, parent, rev, ops);
        Ok(ino)
    }

    /// Remove `ino` and everything below it (Linux kernfs_remove). Returns
    /// once no reader is inside a removed file's callbacks; the callbacks
    /// are dropped by then. Must not be called from a callback of a node
    /// being removed. EBUSY for the root.
    pub fn remove(&self, ino: Ino) -> Result<()> {
        if ino == ROOT_INO {
            return Err(Errno::EBUSY);
        }
        let victims = {
            let mut t = self.tree.write();
            let parent = t.node(ino)?.parent;
            let victims = t.subtree_postorder(ino);
            t.unlink_child(ino)?;
            let pslot = self.slot(parent)?;
            bump_rev(pslot);
            bump_attr(pslot);
            for v in &victims {
                t.nodes.remove(v);
                if let Some(s) = self.slots.get(*v) {
                    s.deactivate();
                    // A removed directory's revision moves too, so negative
                    // entries recorded in it die with it.
                    bump_rev(s);
                    bump_attr(s);
                }
            }
            victims
        };
        // Drained outside the lock: a reader of the locked variants may need
        // it to finish.
        for v in victims {
            if let Some(s) = self.slots.get(v) {
                s.drain();
            }
        }
        Ok(())
    }

    /// Move `ino` to `new_parent/new_name` (Linux kernfs_rename). EEXIST if
    /// the new name is taken, EINVAL for the root or a move below itself.
    pub fn rename(&self, ino: Ino, new_parent: Ino, new_name: impl AsRef<[u8]>) -> Result<()> {
        let new_name = new_name.as_ref();
        check_name(new_name)?;
        if ino == ROOT_INO {
            return Err(Errno::EINVAL);
        }
        let mut t = self.tree.write();
        let old_parent = t.node(ino)?.parent;
        t.dir(new_parent)?;
        if t.is_ancestor(ino, new_parent) {
            return Err(Errno::EINVAL);
        }
        if old_parent == new_parent && t.node(ino)?.name == new_name {
            return Ok(());
        }
        if t.child(new_parent, new_name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let slot = self.slot(ino)?;
        let old_slot = self.slot(old_parent)?;
        let new_slot = self.slot(new_parent)?;
        t.unlink_child(ino)?;
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.parent = new_parent;
            n.name = new_name.to_vec();
            n.ctime = Timespec::now();
        }
        t.link_child(ino)?;
        let mut rev = bump_rev(old_slot);
        bump_attr(old_slot);
        if new_parent != old_parent {
            rev = bump_rev(new_slot);
            bump_attr(new_slot);
        }
        // Release, name_rev before parent: a lockless revalidate that reads
        // the new parent (Acquire) then reads this name_rev or a later one,
        // never the one that belonged to the old parent's counter.
        slot.name_rev.store(rev, Ordering::Release);
        slot.parent.store(new_parent, Ordering::Release);
        bump_attr(slot);
        Ok(())
    }

    fn change_attr(&self, ino: Ino, f: impl FnOnce(&mut NodeData)) -> Result<()> {
        let mut t = self.tree.write();
        let n = t.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        f(n);
        n.ctime = Timespec::now();
        bump_attr(self.slot(ino)?);
        Ok(())
    }

    /// Change a node's permission bits (as `kernfs_setattr` would).
    pub fn set_perm(&self, ino: Ino, perm: u16) -> Result<()> {
        self.change_attr(ino, |n| n.perm = perm & 0o7777)
    }

    /// Change a node's owner and group.
    pub fn set_owner(&self, ino: Ino, uid: u32, gid: u32) -> Result<()> {
        self.change_attr(ino, |n| {
            n.uid = uid;
            n.gid = gid;
        })
    }

    /// The size `stat` reports for an attribute file (4096 by default).
    pub fn set_size(&self, ino: Ino, size: u64) -> Result<()> {
        let mut bad = false;
        self.change_attr(ino, |n| match &mut n.body {
            Body::File { size: s } => *s = size,
            _ => bad = true,
        })?;
        if bad {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// The node at `path` (components split on `/`, empty ones skipped)
    /// from the root, under the lock (Linux kernfs_walk_and_get).
    pub fn resolve(&self, path: impl AsRef<[u8]>) -> Result<Ino> {
        let t = self.tree.read();
        let mut cur = ROOT_INO;
        for comp in path
            .as_ref()
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
        {
            cur = t.child(cur, comp)?.ok_or(Errno::ENOENT)?;
        }
        Ok(cur)
    }

    /// The cached attribute copy of `ino` if it is current, read without
    /// the lock; `None` when the node changed since the copy was made (or
    /// none was made yet, or it is gone). `getattr` of the `rcu` variant is
    /// this, falling back to the lock.
    pub fn getattr_cached(&self, ino: Ino) -> Option<Attr> {
        let s = self.slots.get(ino)?;
        if !s.is_active() {
            return None;
        }
        // Acquire: pairs with `bump_attr`; a change made before this call
        // shows as a version the copy does not carry.
        let v = s.attr_ver.load(Ordering::Acquire);
        match s.snap.load(ino) {
            Some((sv, attr)) if sv == v => Some(attr),
            _ => None,
        }
    }

    /// `ino`'s attributes from the tree, refreshing the lockless copy.
    fn getattr_locked(&self, ino: Ino) -> Result<Attr> {
        let t = self.tree.read();
        let attr = t.node(ino)?.attr(ino);
        if self.lockless() {
            self.refresh_copy(ino, &attr);
        }
        Ok(attr)
    }

    /// Called with the tree lock held (attributes cannot change meanwhile).
    fn refresh_copy(&self, ino: Ino, attr: &Attr) {
        if let Some(s) = self.slots.get(ino) {
            // Relaxed: versions only move under the write lock, which the
            // caller's shared hold excludes and has synchronised with.
            let v = s.attr_ver.load(Ordering::Relaxed);
            // Skip the store when current: lookups of a clean node would
            // otherwise write the copy's line on every call.
            if s.snap.version_hint() != v {
                s.snap.try_store(v, attr);
            }
        }
    }

    /// An active reference on a live node. Lockless in every variant, as
    /// kernfs_get_active always was (an atomic on the node's active count;
    /// `kernfs_seq_start` and `kernfs_fop_read_iter` never take the tree
    /// lock).
    fn get_active(&self, ino: Ino) -> Result<Active<'_>> {
        let slot = self.slot(ino)?;
        if !slot.get_active() {
            return Err(Errno::ENOENT);
        }
        Ok(Active(slot))
    }

    /// kernfs_iop_permission of the locked variants (Linux 5.13's mutex,
    /// 5.15's rwsem): under the tree lock, copy the node's attributes into
    /// its inode copy (kernfs_refresh_inode, done on every call whether or
    /// not anything changed), and hand them to the access check. The path
    /// walk makes this call for every directory it passes (may_lookup) and
    /// `open` for the file (may_open), each a lock round of its own, as in
    /// Linux. The access check itself (generic_permission) ran after the
    /// unlock there; every Vfs walk runs as root, whom it lets through.
    fn permission_locked(&self, ino: Ino) -> Result<Attr> {
        let t = self.tree.read();
        let attr = t.node(ino)?.attr(ino);
        if let Some(s) = self.slots.get(ino) {
            // Relaxed: versions only move under the write lock, which our
            // hold excludes and has synchronised with.
            let v = s.attr_ver.load(Ordering::Relaxed);
            // Unconditional, as kernfs_refresh_inode: under the rwlock two
            // refreshers may meet, and the second skips (Linux 5.15 made it
            // wait on the inode's i_lock instead, then write the same values).
            s.snap.try_store(v, &attr);
        }
        drop(t);
        Ok(attr)
    }

    fn revalidate_lockless(&self, dir: Ino, ino: Option<Ino>, cookie: u64) -> Validity {
        let valid = match ino {
            None => match self.slots.get(dir) {
                // Acquire: pairs with `bump_rev`, so a change completed
                // before this call is seen as a new revision.
                Some(d) => d.is_active() && d.rev.load(Ordering::Acquire) == cookie,
                None => false,
            },
            Some(i) => match self.slots.get(i) {
                // Acquire loads: `is_active` pairs with removal and
                // creation; parent before name_rev pairs with `rename`'s
                // store order.
                Some(s) => {
                    s.is_active()
                        && s.parent.load(Ordering::Acquire) == dir
                        && s.name_rev.load(Ordering::Acquire) <= cookie
                }
                None => false,
            },
        };
        if valid {
            Validity::Valid
        } else {
            Validity::Invalid
        }
    }

    fn revalidate_locked(&self, dir: Ino, name: &[u8], ino: Option<Ino>, cookie: u64) -> Validity {
        let t = self.tree.read();
        let valid = match ino {
            None => {
                t.dir(dir).is_ok()
                    && self
                        .slots
                        .get(dir)
                        // Relaxed: revisions only move under the write lock,
                        // which our shared hold excludes.
                        .is_some_and(|d| d.rev.load(Ordering::Relaxed) == cookie)
            }
            Some(i) => t
                .nodes
                .get(&i)
                .is_some_and(|n| n.parent == dir && n.name == name),
        };
        if valid {
            Validity::Valid
        } else {
            Validity::Invalid
        }
    }
}

fn owner_or_root(ctx: Ctx, n: &NodeData) -> Result<()> {
    if ctx.uid == 0 || ctx.uid == n.uid {
        Ok(())
    } else {
        Err(Errno::EPERM)
    }
}

impl FileSystem for KernFs {
    fn root(&self) -> Ino {
        ROOT_INO
    }

    fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        let t = self.tree.read();
        let Some(c) = t.child(dir, name)? else {
            return Ok(None);
        };
        let attr = t.node(c)?.attr(c);
        if self.lockless() {
            self.refresh_copy(c, &attr);
        }
        Ok(Some(attr))
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        if self.lockless() {
            if let Some(a) = self.getattr_cached(ino) {
                return Ok(a);
            }
        }
        self.getattr_locked(ino)
    }

    /// Root, or the owner for mode and times, may change attributes (as
    /// kernfs' setattr via the inode checks); size changes are accepted and
    /// ignored, as sysfs does for `O_TRUNC`.
    fn setattr(&self, ino: Ino, set: &SetAttr, ctx: Ctx) -> Result<Attr> {
        let mut t = self.tree.write();
        let n = t.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let chown = set.uid.is_some_and(|u| u != n.uid) || set.gid.is_some_and(|g| g != n.gid);
        if chown && ctx.uid != 0 {
            return Err(Errno::EPERM);
        }
        if set.perm.is_some() || set.atime.is_some() || set.mtime.is_some() {
            owner_or_root(ctx, n)?;
        }
        let now = Timespec::now();
        let at = |t: SetTime| match t {
            SetTime::Now => now,
            SetTime::At(ts) => ts,
        };
        if let Some(p) = set.perm {
            n.perm = p & 0o7777;
        }
        if let Some(u) = set.uid {
            n.uid = u;
        }
        if let Some(g) = set.gid {
            n.gid = g;
        }
        if let Some(a) = set.atime {
            n.atime = at(a);
        }
        if let Some(m) = set.mtime {
            n.mtime = at(m);
        }
        n.ctime = now;
        let attr = n.attr(ino);
        bump_attr(self.slot(ino)?);
        Ok(attr)
    }

    fn readdir(&self, dir: Ino, offset: u64, emit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        // Collected under the lock, emitted after it: `emit` may call back
        // into the filesystem.
        let entries = {
            let t = self.tree.read();
            let d = t.dir(dir)?;
            let parent = match t.node(dir)?.parent {
                0 => dir,
                p => p,
            };
            let mut v = Vec::new();
            if offset < 1 {
                v.push(DirEntry {
                    ino: dir,
                    offset: 1,
                    kind: FileType::Directory,
                    name: b".".to_vec(),
                });
            }
            if offset < 2 {
                v.push(DirEntry {
                    ino: parent,
                    offset: 2,
                    kind: FileType::Directory,
                    name: b"..".to_vec(),
                });
            }
            // Child at position p has cookie p + 3.
            for (&p, &c) in d.by_pos.range(offset.saturating_sub(2)..) {
                let n = t.node(c)?;
                v.push(DirEntry {
                    ino: c,
                    offset: p + 3,
                    kind: n.kind(),
                    name: n.name.clone(),
                });
            }
            v
        };
        for e in entries {
            if !emit(e) {
                break;
            }
        }
        Ok(())
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let t = self.tree.read();
        let n = t.node(ino)?;
        match n.body {
            Body::Link { target } => t.relative_path(n.parent, target),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The handle is the access mode; kernfs keeps no per-open state here
    /// (contents are generated afresh on each read).
    fn open(&self, ino: Ino, flags: i32) -> Result<u64> {
        let acc = flags & libc::O_ACCMODE;
        if acc == libc::O_ACCMODE {
            return Err(Errno::EINVAL);
        }
        let slot = self.slot(ino)?;
        let kind = if self.lockless() {
            if !slot.is_active() {
                return Err(Errno::ENOENT);
            }
            slot.kind()
        } else {
            // may_open -> kernfs_iop_permission on the file itself.
            Some(self.permission_locked(ino)?.kind)
        };
        let writing = acc != libc::O_RDONLY;
        match kind {
            Some(FileType::Directory) if writing => Err(Errno::EISDIR),
            Some(FileType::Symlink) => Err(Errno::ELOOP),
            Some(FileType::Regular) if writing && !slot.has_store() => Err(Errno::EACCES),
            Some(_) => Ok(acc as u64),
            None => Err(Errno::ENOENT),
        }
    }

    fn read(&self, ino: Ino, fh: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if fh as i32 & libc::O_ACCMODE == libc::O_WRONLY {
            return Err(Errno::EBADF);
        }
        let active = self.get_active(ino)?;
        match active.0.kind() {
            Some(FileType::Regular) => {}
            Some(FileType::Directory) => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        let data = active.0.with_ops(|o| (o.show)())?;
        drop(active);
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let n = (data.len() - start).min(buf.len());
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write(&self, ino: Ino, fh: u64, _offset: u64, data: &[u8]) -> Result<usize> {
        if fh as i32 & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno::EBADF);
        }
        let active = self.get_active(ino)?;
        match active.0.kind() {
            Some(FileType::Regular) => {}
            Some(FileType::Directory) => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        active.0.with_ops(|o| match &o.store {
            Some(store) => store(data),
            None => Err(Errno::EINVAL),
        })?
    }

    fn needs_revalidate(&self) -> bool {
        true
    }

    fn dir_cookie(&self, dir: Ino) -> u64 {
        // Acquire: pairs with `bump_rev`; the lookup that follows sees at
        // least the tree state this revision was published with.
        self.slots
            .get(dir)
            .map_or(0, |s| s.rev.load(Ordering::Acquire))
    }

    fn revalidate(
        &self,
        dir: Ino,
        name: &[u8],
        ino: Option<Ino>,
        cookie: u64,
        rcu: bool,
    ) -> Validity {
        match self.reval {
            Revalidate::Lockless => return self.revalidate_lockless(dir, ino, cookie),
            _ if rcu => return Validity::NeedBlocking,
            _ => {}
        }
        // The walk checked the directory before looking in it (may_lookup ->
        // kernfs_iop_permission: one lock round), then asks about the entry
        // (kernfs_dop_revalidate: another, except for negative entries in
        // the old kernfs, which are never trusted).
        if self.permission_locked(dir).is_err() {
            return Validity::Invalid;
        }
        match self.reval {
            Revalidate::LockedPositiveOnly if ino.is_none() => Validity::Invalid,
            _ => self.revalidate_locked(dir, name, ino, cookie),
        }
    }

    // Extended attributes: none are stored, so a read finds none and a
    // listing is empty; setxattr and removexattr keep the default
    // EOPNOTSUPP (the tree is read-only to userspace).

    fn getxattr(&self, ino: Ino, _name: &[u8], _value: &mut Vec<u8>) -> Result<()> {
        self.getattr(ino)?;
        Err(Errno::ENODATA)
    }

    fn listxattr(&self, ino: Ino, list: &mut Vec<u8>) -> Result<()> {
        self.getattr(ino)?;
        list.clear();
        Ok(())
    }
}
