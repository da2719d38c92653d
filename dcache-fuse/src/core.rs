//! The FUSE requests as calls on the `Vfs`, with no kernel in sight: each
//! method takes what a request carries (a [`NodeId`], a name, a [`Fh`])
//! and returns plain data. [`super::fs`] is the thin request adapter that
//! turns requests into these calls and results into replies; tests drive
//! [`FuseCore`] directly, standing in for the kernel.
//!
//! Every attribute returned carries the node id as its inode number
//! (`Attr::ino`), which is what `stat` shows through the mount. An
//! [`Entry`] has already counted one kernel lookup of its node: the caller
//! must deliver it in a reply (or forget it).

mod fileops;

use std::mem::ManuallyDrop;

use crate::sync::Arc;
use dcache::cred::Cred;
use dcache::errno::{Errno, Result};
use dcache::fs::{Attr, FileType, RenameFlags, SetAttr, StatFs};
use dcache::permission::{generic_permission, search_for_all};
use dcache::vfs::At;
use dcache::{DentryRef, OpenFile, Vfs};

use super::attr::mknod_kind;
use super::handles::{Fh, Handles};
use super::nodes::{Borrowed, IdMap, NodeId, Nodes};
use super::stats::Stats;

mod xattr;
pub use self::xattr::{is_acl, xattr_caps, xattr_cred, XattrReply};

/// A node for an entry reply: its id and attributes (`attr.ino == id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The node id the reply names.
    pub id: u64,
    /// The node's attributes, with `ino` shown as the node id.
    pub attr: Attr,
    /// The directory the name is in may be searched by everyone (its mode
    /// has 0111): with dcache checking permissions, only such names may be
    /// cached by the kernel (see `DcacheFs::entry_ttl`).
    pub open_parent: bool,
}

/// Whether everyone may search the directory `d` (mode has 0111).
fn open_dir(d: &DentryRef<'_>) -> bool {
    d.inode()
        .is_some_and(|i| i.is_dir() && search_for_all(i.mode()))
}

/// Adds one readdir entry `(ino, offset, kind, name)` to a reply; true
/// when the reply is full (the entry was not added).
pub type AddDirEntry<'a> = dyn FnMut(u64, u64, FileType, &[u8]) -> bool + 'a;

/// Adds one readdirplus entry `(node id, offset, name, attr)`; true when
/// the reply is full (the entry was not added).
pub type AddDirEntryPlus<'a> = dyn FnMut(u64, u64, &[u8], &Attr) -> bool + 'a;

/// Most directory entries readdirplus collects per request; a reply holds
/// fewer (a page), the rest are simply not handed out.
const READDIRPLUS_BATCH: usize = 64;

/// A `Vfs` served as FUSE nodes and file handles.
pub struct FuseCore {
    nodes: Nodes,
    handles: Handles,
    ids: IdMap,
    stats: Arc<Stats>,
    /// FUSE_NO_OPEN_SUPPORT is in force (see `implicit_file`).
    no_open: bool,
    /// Declared last: dropped after `Drop::drop` gave back our references.
    vfs: Vfs,
}

impl FuseCore {
    /// Serve `vfs`; at first only the root is a node.
    pub fn new(vfs: Vfs) -> FuseCore {
        let stats = Arc::new(Stats::default());
        let nodes = Nodes::new(&vfs, stats.clone());
        FuseCore {
            ids: nodes.ids(),
            nodes,
            handles: Handles::new(stats.clone()),
            stats,
            no_open: false,
            vfs,
        }
    }

    /// The dentry cache underneath.
    pub fn vfs(&self) -> &Vfs {
        &self.vfs
    }

    /// Node ids <-> backend inode numbers.
    pub fn ids(&self) -> IdMap {
        self.ids
    }

    /// The live counts, shared (they stay readable after the core is moved
    /// into a session).
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// End of session: give back every reference the kernel held (it sends
    /// no forgets at unmount) and the root's. Idempotent.
    pub fn release(&mut self) {
        self.release_nodes();
    }

    fn release_nodes(&mut self) {
        for fh in self.nodes.release(&self.vfs) {
            // SAFETY: an implicit file's handle, taken from its node once.
            let _ = self.release_file(unsafe { Fh::from_kernel(fh) });
        }
    }

    /// A dentry of node `id`, for the length of one request.
    fn node(&self, id: NodeId) -> Result<Borrowed<'_>> {
        self.nodes.borrow(&self.vfs, id)
    }

    /// `a` as the kernel sees it: the node id as inode number.
    #[inline]
    fn shown(&self, mut a: Attr) -> Attr {
        a.ino = self.ids.id(a.ino);
        a
    }

    /// Count a kernel lookup of `d` for an entry reply.
    fn entry(&self, d: DentryRef<'_>, open_parent: bool) -> Result<Entry> {
        let attr = self.shown(self.vfs.getattr_dentry(&d)?);
        let id = self.nodes.hand_out(d)?;
        Ok(Entry {
            id,
            attr,
            open_parent,
        })
    }

    /// `Ok(None)`: the name does not exist (a negative entry).
    ///
    /// A name whose inode the kernel already holds (the common case: the
    /// revalidation LOOKUPs that timeouts of 0 cause on every path walk) is
    /// answered from the rcu-walk without taking a reference or a lock
    /// (`Nodes::hand_out_held`). Anything else takes the counted path.
    pub fn lookup(&self, cred: &Cred, parent: NodeId, name: &[u8]) -> Result<Option<Entry>> {
        let p = self.node(parent)?;
        let open_parent = open_dir(&p);
        let r = self
            .vfs
            .lookup_rcu_with(cred, At::Dir(p.dentry()), name, |_, i, a| {
                self.nodes.hand_out_held(i).map(|id| Entry {
                    id,
                    attr: Attr { ino: id, ..*a },
                    open_parent,
                })
            })
            .and_then(|r| match r {
                Ok(e) => Ok(e),
                Err(d) => self.entry(d, open_parent),
            });
        match r {
            Ok(e) => Ok(Some(e)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether everyone may search directory `id` (its mode has 0111);
    /// false for an unknown node or a non-directory.
    pub fn searchable_by_all(&self, id: NodeId) -> bool {
        self.node(id).is_ok_and(|n| open_dir(&n))
    }

    /// Node `id`'s parent node id and its name there, as the cache holds
    /// them now (for invalidating the kernel's entry of it).
    pub fn parent_and_name(&self, id: NodeId) -> Option<(u64, Vec<u8>)> {
        let n = self.node(id).ok()?;
        if n.ino().map(|i| self.ids.id(i)) == Some(super::nodes::ROOT_ID) {
            return None;
        }
        let p = n.parent();
        let pid = self.ids.id(p.ino()?);
        Some((pid, n.name()))
    }

    /// Up to `max` entries (parent node id, name) whose nodes the kernel
    /// could drop to bring its count down ([`crate::nodes`]'s victims).
    pub fn kernel_victims(&self, max: usize) -> Vec<(u64, Vec<u8>)> {
        self.nodes.victims(&self.vfs, max)
    }

    /// FORGET: the kernel gives back `n` lookups of node `id`; the node is
    /// dropped when its count reaches 0.
    pub fn forget(&self, id: NodeId, n: u64) {
        self.nodes.forget(&self.vfs, id, n, |fh| {
            // SAFETY: the node's implicit file, taken from it once as it
            // was unpublished; no request uses it any more (the kernel sent
            // the last forget, so it has nothing in flight on the node).
            let _ = self.release_file(unsafe { Fh::from_kernel(fh) });
        });
    }

    /// The file the daemon keeps open on node `id` for I/O the kernel
    /// sends without a handle (it opens files without asking under
    /// FUSE_NO_OPEN_SUPPORT): opened (read-write, or read-only where the
    /// backend refuses writing) on first use and closed when the kernel
    /// forgets the node, so the file's lifetime follows the kernel's.
    pub fn implicit_file(&self, id: NodeId) -> Result<Fh> {
        let fh = self.nodes.implicit(id);
        if fh != 0 {
            // SAFETY: the node's implicit file stays open until the node is
            // unpublished, which the kernel's hold on it for this request
            // prevents (NodeId's contract).
            return Ok(unsafe { Fh::from_kernel(fh) });
        }
        self.ensure_implicit(id.raw(), &*self.node(id)?)
    }

    /// Node `id`'s implicit file, opened on `d` (a dentry of its inode) if
    /// it has none yet. ESTALE if the node is not published (the kernel
    /// does not hold it: nothing to keep).
    fn ensure_implicit(&self, id: u64, d: &DentryRef<'_>) -> Result<Fh> {
        loop {
            match self.nodes.implicit_of(id) {
                None => return Err(Errno::ESTALE),
                // SAFETY: as in `implicit_file`: open while published, and
                // the caller's request (or the name it is removing) keeps
                // the node published.
                Some(fh) if fh != 0 => return Ok(unsafe { Fh::from_kernel(fh) }),
                Some(_) => {}
            }
            let fh = self.open_implicit(d)?;
            if self.nodes.set_implicit(id, fh.raw()) {
                return Ok(fh);
            }
            // Another request set one first (or the node went): ours goes.
            self.release_file(fh)?;
        }
    }

    fn open_implicit(&self, d: &DentryRef<'_>) -> Result<Fh> {
        let root = self.vfs.as_root();
        let f = match root.open_dentry(d, libc::O_RDWR) {
            Err(Errno::EROFS | Errno::EACCES | Errno::EPERM) => {
                root.open_dentry(d, libc::O_RDONLY)?
            }
            r => r?,
        };
        Ok(self.handles.insert(f))
    }

    /// Before a name goes (unlink, or a rename over it): if the kernel
    /// holds its inode as a node and may do I/O on it without a handle,
    /// give the node its implicit file now, so an open file whose last
    /// name is removed keeps its data, as on tmpfs.
    fn keep_open_on_removal(&self, dir: &DentryRef<'_>, name: &[u8]) {
        if !self.no_open {
            return;
        }
        let Ok(d) = self
            .vfs
            .as_root()
            .lookup(At::Dir(dir.dentry()), name, false)
        else {
            return;
        };
        let Some(i) = d.inode() else { return };
        if i.kind() != FileType::Regular {
            return;
        }
        // ESTALE: not held by the kernel, nothing to keep.
        let _ = self.ensure_implicit(self.ids.id(i.ino()), &d);
    }

    /// A CREATE or TMPFILE opened `fh` on node `id`, but the kernel,
    /// which opens without asking, sends no RELEASE for it: give the node
    /// its implicit file (read-write, whatever `fh`'s mode, and opened
    /// while `fh` still keeps an unnamed file alive), then close `fh`.
    pub fn adopt_implicit(&self, id: u64, fh: Fh) {
        if let Ok(f) = self.file(fh) {
            let d = f.dentry().clone();
            let _ = self.ensure_implicit(id, &d);
        }
        let _ = self.release_file(fh);
    }

    /// The kernel opens files without asking (FUSE_NO_OPEN_SUPPORT
    /// negotiated): I/O without a handle goes to the node's implicit file.
    pub fn set_no_open(&mut self) {
        self.no_open = true;
    }

    /// Whether [`set_no_open`](Self::set_no_open) was called.
    pub fn no_open(&self) -> bool {
        self.no_open
    }

    /// GETATTR: the node's attributes (cached unless the backend
    /// revalidates).
    pub fn getattr(&self, id: NodeId) -> Result<Attr> {
        Ok(self.shown(self.vfs.getattr_dentry(&*self.node(id)?)?))
    }

    /// SETATTR, with Linux's rules for `cred`. `via_fh`: the request names
    /// an open file (ftruncate, futimens), so a size change needs no write
    /// permission. The kernel's own SETATTR dropping set-id bits after
    /// another user's write is allowed (see `setattr_kill_priv`).
    pub fn setattr(&self, cred: &Cred, id: NodeId, set: &SetAttr, via_fh: bool) -> Result<Attr> {
        let n = self.node(id)?;
        if let Some(r) = self.setattr_kill_priv(cred, &n, set, via_fh) {
            return Ok(self.shown(r?));
        }
        Ok(self.shown(self.vfs.as_cred(cred).setattr_dentry(&n, set, via_fh)?))
    }

    /// READLINK: the symlink's target.
    pub fn readlink(&self, id: NodeId) -> Result<Vec<u8>> {
        self.vfs.readlink_dentry(&*self.node(id)?)
    }

    /// MKNOD: `mode` carries the file type and permission bits.
    pub fn mknod(
        &self,
        cred: &Cred,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        rdev: u32,
    ) -> Result<Entry> {
        let kind = mknod_kind(mode)?;
        let p = self.node(parent)?;
        let perm = (mode & 0o7777) as u16;
        let d = self
            .vfs
            .as_cred(cred)
            .mknod(At::Dir(p.dentry()), name, kind, perm, rdev)?;
        self.entry(d, open_dir(&p))
    }

    /// MKDIR: a directory `name` in `parent`, owned by `cred`.
    pub fn mkdir(&self, cred: &Cred, parent: NodeId, name: &[u8], mode: u32) -> Result<Entry> {
        let p = self.node(parent)?;
        let d = self
            .vfs
            .as_cred(cred)
            .mkdir(At::Dir(p.dentry()), name, (mode & 0o7777) as u16)?;
        self.entry(d, open_dir(&p))
    }

    /// SYMLINK: `name` in `parent` becomes a symlink to `target`.
    pub fn symlink(
        &self,
        cred: &Cred,
        parent: NodeId,
        name: &[u8],
        target: &[u8],
    ) -> Result<Entry> {
        let p = self.node(parent)?;
        let d = self
            .vfs
            .as_cred(cred)
            .symlink(target, At::Dir(p.dentry()), name)?;
        self.entry(d, open_dir(&p))
    }

    /// `link(id, newparent, newname)`: another name for the node's inode,
    /// whatever names it has now.
    pub fn link(
        &self,
        cred: &Cred,
        id: NodeId,
        newparent: NodeId,
        newname: &[u8],
    ) -> Result<Entry> {
        let n = self.node(id)?;
        let np = self.node(newparent)?;
        let d = self
            .vfs
            .as_cred(cred)
            .link_dentry(&n, At::Dir(np.dentry()), newname)?;
        self.entry(d, open_dir(&np))
    }

    /// UNLINK: remove the non-directory `name` from `parent`.
    pub fn unlink(&self, cred: &Cred, parent: NodeId, name: &[u8]) -> Result<()> {
        let p = self.node(parent)?;
        self.keep_open_on_removal(&p, name);
        self.vfs.as_cred(cred).unlink(At::Dir(p.dentry()), name)
    }

    /// RMDIR: remove the empty directory `name` from `parent`.
    pub fn rmdir(&self, cred: &Cred, parent: NodeId, name: &[u8]) -> Result<()> {
        let p = self.node(parent)?;
        self.vfs.as_cred(cred).rmdir(At::Dir(p.dentry()), name)
    }

    /// RENAME/RENAME2: `flags` are renameat2's (EINVAL for unknown bits).
    pub fn rename(
        &self,
        cred: &Cred,
        parent: NodeId,
        name: &[u8],
        newparent: NodeId,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        let flags = RenameFlags::from_bits(flags)?;
        let p = self.node(parent)?;
        let np = self.node(newparent)?;
        self.keep_open_on_removal(&np, newname);
        self.vfs.as_cred(cred).rename(
            At::Dir(p.dentry()),
            name,
            At::Dir(np.dentry()),
            newname,
            flags,
        )
    }

    /// Open node `id`; returns the file handle.
    pub fn open(&self, cred: &Cred, id: NodeId, flags: i32) -> Result<Fh> {
        let n = self.node(id)?;
        let f = self.vfs.as_cred(cred).open_dentry(&n, flags)?;
        Ok(self.handles.insert(f))
    }

    /// OPENDIR: read permission on the directory (no handle is kept).
    pub fn opendir(&self, cred: &Cred, id: NodeId, flags: i32) -> Result<()> {
        let n = self.node(id)?;
        let i = n.inode().ok_or(Errno::ENOENT)?;
        if i.kind() != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        let f = self
            .vfs
            .as_cred(cred)
            .open_dentry(&n, flags & libc::O_ACCMODE | libc::O_DIRECTORY)?;
        drop(f);
        Ok(())
    }

    /// Create-and-open (`open` with O_CREAT): the entry and the handle. An
    /// existing name is opened unless O_EXCL, as openat(2) does.
    pub fn create(
        &self,
        cred: &Cred,
        parent: NodeId,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> Result<(Entry, Fh)> {
        let p = self.node(parent)?;
        let perm = (mode & 0o7777) as u16;
        let f =
            self.vfs
                .as_cred(cred)
                .open(At::Dir(p.dentry()), name, flags | libc::O_CREAT, perm)?;
        let entry = self.entry(f.dentry().clone(), open_dir(&p))?;
        Ok((entry, self.handles.insert(f)))
    }

    /// TMPFILE (`open` with O_TMPFILE in directory `parent`): an entry for
    /// the unnamed file (its dentry `#<ino>`, which no lookup finds) and the
    /// handle. A LINK naming the entry's node gives it a name later.
    pub fn tmpfile(
        &self,
        cred: &Cred,
        parent: NodeId,
        mode: u32,
        flags: i32,
    ) -> Result<(Entry, Fh)> {
        let p = self.node(parent)?;
        let perm = (mode & 0o7777) as u16;
        let f = self
            .vfs
            .as_cred(cred)
            .tmpfile(At::Dir(p.dentry()), ".", flags, perm)?;
        let entry = self.entry(f.dentry().clone(), open_dir(&p))?;
        Ok((entry, self.handles.insert(f)))
    }

    /// The open file behind `fh`; EBADF for a file of another mount's
    /// `Vfs` (one pointer compare: a handle never acts on the wrong cache).
    fn file(&self, fh: Fh) -> Result<ManuallyDrop<OpenFile<'_>>> {
        // SAFETY: the returned borrow cannot outlive `self`, which owns the
        // Vfs every handle was opened on; `Fh`'s contract keeps the handle
        // alive for the request.
        let f = unsafe { self.handles.get(fh) };
        if !f.dentry().belongs_to(&self.vfs) {
            return Err(Errno::EBADF);
        }
        Ok(f)
    }

    /// READ: up to `size` bytes at `offset` (fewer at end of file).
    pub fn read(&self, fh: Fh, offset: u64, size: u32) -> Result<Vec<u8>> {
        let f = self.file(fh)?;
        let mut buf = vec![0u8; size as usize];
        let n = f.read(offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// READ into `buf`: up to `buf.len()` bytes at `offset`; returns how
    /// many (fewer at end of file). No allocation: the request layer lends
    /// its reply buffer.
    pub fn read_into(&self, fh: Fh, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.file(fh)?.read(offset, buf)
    }

    /// WRITE: `data` at `offset`; returns the bytes written.
    pub fn write(&self, fh: Fh, offset: u64, data: &[u8]) -> Result<usize> {
        self.file(fh)?.write(offset, data)
    }

    /// WRITE of a descriptor opened `O_APPEND` (the request's flags say
    /// so, whatever the handle was opened with: the kernel may have
    /// opened it without asking): at the end of the file as the backend
    /// knows it, `offset` being the kernel's idea of it.
    pub fn append(&self, fh: Fh, offset: u64, data: &[u8]) -> Result<usize> {
        self.file(fh)?.append(offset, data)
    }

    /// FLUSH: a descriptor of the open file is being closed.
    pub fn flush(&self, fh: Fh) -> Result<()> {
        let f = self.file(fh)?;
        self.vfs.backend().flush(f.ino(), f.fh())
    }

    /// Whether closes of `fh` must reach [`flush`](Self::flush)
    /// (`FileSystem::flush_needed`; `true` for a handle not of this mount).
    pub fn flush_needed(&self, fh: Fh) -> bool {
        self.file(fh)
            .map_or(true, |f| self.vfs.backend().flush_needed(f.ino(), f.fh()))
    }

    /// FSYNC (`fdatasync` when `datasync`).
    pub fn fsync(&self, fh: Fh, datasync: bool) -> Result<()> {
        let f = self.file(fh)?;
        self.vfs.backend().fsync(f.ino(), f.fh(), datasync)
    }

    /// RELEASE: close the open file behind `fh` (the handle is invalid
    /// afterwards).
    pub fn release_file(&self, fh: Fh) -> Result<()> {
        // SAFETY: as in `file`; `Fh`'s contract makes this the handle's one
        // RELEASE, after its last other request.
        self.file(fh)?;
        // SAFETY: as above; checked to be this mount's file just now.
        unsafe { self.handles.remove(fh) }.close()
    }

    /// Plain readdir: `add(ino, offset, kind, name)` returns true when the
    /// reply is full. `ino` is the entry's node id, as `stat` shows it.
    pub fn readdir(&self, id: NodeId, offset: u64, add: &mut AddDirEntry<'_>) -> Result<()> {
        let d = self.node(id)?;
        let ids = self.ids;
        self.vfs.readdir_dentry(&d, offset, &mut |e| {
            !add(ids.id(e.ino), e.offset, e.kind, &e.name)
        })
    }

    /// readdirplus: like readdir, with each entry looked up and counted as
    /// a kernel lookup, as by `lookup` (only entries that fit in the reply;
    /// `.` and `..` are not counted by the kernel and get none).
    /// `add(id, offset, name, attr)` returns true when full; `max` is the
    /// most entries the reply can hold (no more are looked up).
    pub fn readdirplus(
        &self,
        id: NodeId,
        offset: u64,
        max: usize,
        add: &mut AddDirEntryPlus<'_>,
    ) -> Result<()> {
        let dir = self.node(id)?;
        // Collect first: the backend may hold a lock while it emits, and
        // looking the entries up calls back into it. No more than the
        // reply can hold: every entry collected is looked up.
        let most = max.clamp(1, READDIRPLUS_BATCH);
        let mut batch = Vec::new();
        self.vfs.readdir_dentry(&dir, offset, &mut |e| {
            batch.push(e);
            batch.len() < most
        })?;
        // Every other name's lookup at once: their walks interleave, so
        // the cache misses of a large directory's dentries and inodes
        // overlap (`AsCred::lookup_many`).
        let names: Vec<&[u8]> = batch
            .iter()
            .map(|e| e.name.as_slice())
            .filter(|n| !matches!(*n, b"." | b".."))
            .collect();
        let mut found: Vec<Result<DentryRef<'_>>> =
            names.iter().map(|_| Err(Errno::EINVAL)).collect();
        self.vfs
            .as_root()
            .lookup_many(At::Dir(dir.dentry()), &names, false, &mut found)?;
        let mut found = found.into_iter();
        for e in &batch {
            let full = match e.name.as_slice() {
                b"." => {
                    let a = self.shown(self.vfs.getattr_dentry(&dir)?);
                    add(a.ino, e.offset, &e.name, &a)
                }
                b".." => {
                    let p = dir.parent();
                    let a = self.shown(self.vfs.getattr_dentry(&p)?);
                    add(a.ino, e.offset, &e.name, &a)
                }
                name => {
                    let looked = match found.next().unwrap_or(Err(Errno::EIO)) {
                        // Removed since the listing: leave it out.
                        Err(Errno::ENOENT) => continue,
                        Ok(d) if d.is_negative() => continue,
                        Ok(d) => self.vfs.getattr_dentry(&d).map(|a| (d, a)),
                        Err(e) => Err(e),
                    };
                    match looked {
                        Ok((d, a)) => {
                            let a = self.shown(a);
                            if add(a.ino, e.offset, name, &a) {
                                true
                            } else {
                                self.nodes.hand_out(d)?;
                                false
                            }
                        }
                        // The name's own error (a damaged record, a
                        // backend failure for that inode) is that name's:
                        // it is listed without attributes (node 0: the
                        // kernel does not look it up from here), and the
                        // rest of the directory lists.
                        Err(_) => add(0, e.offset, name, &Attr::new(e.ino, e.kind, 0)),
                    }
                }
            };
            if full {
                break;
            }
        }
        Ok(())
    }

    /// STATFS, answered by the backend.
    pub fn statfs(&self) -> Result<StatFs> {
        self.vfs.statfs()
    }

    /// ACCESS (sent only without `default_permissions`, for `access(2)`,
    /// whose request carries the caller's real ids): `F_OK` asks whether
    /// the node exists; R_OK, W_OK, X_OK are MAY_READ, MAY_WRITE, MAY_EXEC.
    pub fn access(&self, cred: &Cred, id: NodeId, mask: i32) -> Result<()> {
        let n = self.node(id)?;
        let i = n.inode().ok_or(Errno::ENOENT)?;
        let mask = (mask & (libc::R_OK | libc::W_OK | libc::X_OK)) as u32;
        if mask == 0 {
            return Ok(());
        }
        generic_permission(cred, i.perm(), mask)
    }
}

impl Drop for FuseCore {
    fn drop(&mut self) {
        self.release_nodes();
    }
}
