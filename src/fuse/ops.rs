//! Each FUSE request as calls on the `Vfs`, relative to the dentry of the
//! node it names, with the single name the kernel sends. Results are plain
//! data; [`super::fs`] turns them into replies. A borrowed node is never
//! used after its handler returns (see [`super::nodes`]).
//!
//! An entry result `(id, Attr)` has already counted one kernel lookup of
//! the node: the caller must deliver it in a reply.

use crate::errno::{Errno, Result};
use crate::fs::{Attr, Ctx, FileType, RenameFlags, SetAttr, StatFs};
use crate::vfs::At;
use crate::DentryRef;

use super::access::{self, Caller};
use super::attr::mknod_kind;
use super::fs::DcacheFs;
use super::nodes::Node;

/// A node id and its attributes, for an entry reply.
pub type Entry = (u64, Attr);

/// Adds one readdir entry `(ino, offset, kind, name)` to a reply; true
/// when the reply is full (the entry was not added).
pub type AddDirEntry<'a> = dyn FnMut(u64, u64, FileType, &[u8]) -> bool + 'a;

/// Adds one readdirplus entry `(node id, offset, name, attr)`; true when
/// the reply is full (the entry was not added).
pub type AddDirEntryPlus<'a> = dyn FnMut(u64, u64, &[u8], &Attr) -> bool + 'a;

/// Most directory entries readdirplus collects per request; a reply holds
/// fewer (a page), the rest are simply not handed out.
const READDIRPLUS_BATCH: usize = 64;

impl DcacheFs {
    /// The dentry behind node id `id`, for the length of one request.
    pub(crate) fn node(&self, id: u64) -> Result<Node<'_>> {
        // SAFETY: the kernel only names nodes it got from entry replies and
        // has not forgotten, and holds each for as long as its request on
        // it is outstanding; handlers drop the borrow before replying.
        unsafe { self.nodes.borrow(&self.vfs, id) }
    }

    /// Count a kernel lookup of `d` for an entry reply.
    fn entry(&self, d: DentryRef<'_>) -> Result<Entry> {
        let a = self.vfs.getattr_dentry(&d)?;
        let id = self.nodes.hand_out(d)?;
        Ok((id, a))
    }

    /// `Ok(None)`: the name does not exist (a negative entry).
    ///
    /// A name the kernel already holds a node for (the common case: the
    /// revalidation LOOKUPs that timeouts of 0 cause on every path walk) is
    /// answered from the rcu-walk without taking a reference or a lock:
    /// the kernel's own reference pins the node ([`Nodes::hand_out_held`]).
    /// Anything else takes the reference-counted path.
    ///
    /// [`Nodes::hand_out_held`]: super::nodes::Nodes::hand_out_held
    pub fn do_lookup(&self, parent: u64, name: &[u8]) -> Result<Option<Entry>> {
        let p = self.node(parent)?;
        let fast = self.vfs.lookup_rcu_with(At::Dir(p.dentry()), name, |d, a| {
            self.nodes.hand_out_held(d).map(|id| (id, *a))
        });
        let r = match fast {
            Some(r) => r,
            None => self
                .vfs
                .lookup(At::Dir(p.dentry()), name, false)
                .and_then(|d| self.entry(d)),
        };
        match r {
            Ok(e) => Ok(Some(e)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn do_forget(&self, id: u64, n: u64) {
        // SAFETY: the kernel forgets only what it was handed (counts
        // included), once.
        unsafe { self.nodes.forget(&self.vfs, id, n) }
    }

    pub fn do_getattr(&self, id: u64) -> Result<Attr> {
        self.vfs.getattr_dentry(&*self.node(id)?)
    }

    pub fn do_setattr(&self, id: u64, set: &SetAttr, ctx: Ctx) -> Result<Attr> {
        self.vfs.setattr_dentry(&*self.node(id)?, set, ctx)
    }

    pub fn do_readlink(&self, id: u64) -> Result<Vec<u8>> {
        self.vfs.readlink_dentry(&*self.node(id)?)
    }

    pub fn do_mknod(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        ctx: Ctx,
    ) -> Result<Entry> {
        let kind = mknod_kind(mode)?;
        let p = self.node(parent)?;
        let perm = (mode & 0o7777) as u16;
        let d = self
            .vfs
            .mknod(At::Dir(p.dentry()), name, kind, perm, rdev, ctx)?;
        self.entry(d)
    }

    pub fn do_mkdir(&self, parent: u64, name: &[u8], mode: u32, ctx: Ctx) -> Result<Entry> {
        let p = self.node(parent)?;
        let d = self
            .vfs
            .mkdir(At::Dir(p.dentry()), name, (mode & 0o7777) as u16, ctx)?;
        self.entry(d)
    }

    pub fn do_symlink(&self, parent: u64, name: &[u8], target: &[u8], ctx: Ctx) -> Result<Entry> {
        let p = self.node(parent)?;
        let d = self.vfs.symlink(target, At::Dir(p.dentry()), name, ctx)?;
        self.entry(d)
    }

    /// `link(id, newparent, newname)`. The Vfs links by name, so the node
    /// is named through its current parent and name, and the result is
    /// checked to be the node's inode: a rename racing in between could
    /// otherwise link whatever took the name.
    pub fn do_link(&self, id: u64, newparent: u64, newname: &[u8]) -> Result<Entry> {
        let n = self.node(id)?;
        let inode = n.ino().ok_or(Errno::ENOENT)?;
        if n.kind() == Some(FileType::Directory) {
            return Err(Errno::EPERM);
        }
        let np = self.node(newparent)?;
        for _ in 0..8 {
            let parent = self.vfs.dget_parent(&n);
            let name = n.name();
            // Unhashed (unlinked) or renamed since: nothing to link by name.
            let cur = self.vfs.lookup(At::Dir(parent.dentry()), &name, false)?;
            if cur.ino() != Some(inode) {
                return Err(Errno::ENOENT);
            }
            drop(cur);
            let d = self.vfs.link(
                At::Dir(parent.dentry()),
                &name,
                At::Dir(np.dentry()),
                newname,
            )?;
            if d.ino() == Some(inode) {
                return self.entry(d);
            }
            // Lost a race with a rename: take back the wrong link, retry.
            drop(d);
            self.vfs.unlink(At::Dir(np.dentry()), newname)?;
        }
        Err(Errno::EAGAIN)
    }

    pub fn do_unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        let p = self.node(parent)?;
        self.vfs.unlink(At::Dir(p.dentry()), name)
    }

    pub fn do_rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        let p = self.node(parent)?;
        self.vfs.rmdir(At::Dir(p.dentry()), name)
    }

    pub fn do_rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        let flags = RenameFlags::from_bits(flags)?;
        let p = self.node(parent)?;
        let np = self.node(newparent)?;
        self.vfs.rename(
            At::Dir(p.dentry()),
            name,
            At::Dir(np.dentry()),
            newname,
            flags,
        )
    }

    /// Open node `id`; returns the file handle.
    pub fn do_open(&self, id: u64, flags: i32) -> Result<u64> {
        let n = self.node(id)?;
        let f = self.vfs.open_dentry(&n, flags)?;
        Ok(self.handles.insert(f))
    }

    /// Create-and-open (`open` with O_CREAT): the entry and the handle. An
    /// existing name is opened unless O_EXCL, as openat(2) does.
    pub fn do_create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
        ctx: Ctx,
    ) -> Result<(Entry, u64)> {
        let p = self.node(parent)?;
        let perm = (mode & 0o7777) as u16;
        let f = self
            .vfs
            .open(At::Dir(p.dentry()), name, flags | libc::O_CREAT, perm, ctx)?;
        let entry = self.entry(f.dentry().clone())?;
        Ok((entry, self.handles.insert(f)))
    }

    /// The open file behind `fh`.
    fn file(&self, fh: u64) -> &crate::OpenFile<'_> {
        // SAFETY: the kernel sends back only handles from open/create that
        // it has not released, and sends no release while a request on the
        // handle is in flight; the Vfs outlives every handle (handles.rs).
        unsafe { self.handles.get(fh) }
    }

    pub fn do_read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let f = self.file(fh);
        let mut buf = vec![0u8; size as usize];
        let n = f.read(offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    pub fn do_write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.file(fh).write(offset, data)
    }

    pub fn do_flush(&self, fh: u64) -> Result<()> {
        let f = self.file(fh);
        self.vfs.backend().flush(f.ino(), f.fh())
    }

    pub fn do_fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let f = self.file(fh);
        self.vfs.backend().fsync(f.ino(), f.fh(), datasync)
    }

    pub fn do_release(&self, fh: u64) -> Result<()> {
        // SAFETY: release names a handle once, after its last request.
        unsafe { self.handles.remove(fh) }.close()
    }

    /// Plain readdir: `add(ino, offset, kind, name)` returns true when the
    /// reply is full. `ino` is the backend's inode number (no lookup is
    /// made for it); `stat` shows node ids.
    pub fn do_readdir(&self, id: u64, offset: u64, add: &mut AddDirEntry<'_>) -> Result<()> {
        let d = self.node(id)?;
        self.vfs
            .readdir_dentry(&d, offset, &mut |e| !add(e.ino, e.offset, e.kind, &e.name))
    }

    /// readdirplus: like readdir, with each entry looked up and counted as
    /// a kernel lookup, as by `lookup` (only entries that fit in the reply;
    /// `.` and `..` are not counted by the kernel and get none).
    /// `add(id, offset, name, attr)` returns true when full.
    pub fn do_readdirplus(
        &self,
        id: u64,
        offset: u64,
        add: &mut AddDirEntryPlus<'_>,
    ) -> Result<()> {
        let dir = self.node(id)?;
        // Collect first: the backend may hold a lock while it emits, and
        // looking the entries up calls back into it.
        let mut batch = Vec::new();
        self.vfs.readdir_dentry(&dir, offset, &mut |e| {
            batch.push(e);
            batch.len() < READDIRPLUS_BATCH
        })?;
        let mut added = false;
        for e in batch {
            let full = match e.name.as_slice() {
                b"." => add(id, e.offset, &e.name, &self.vfs.getattr_dentry(&dir)?),
                b".." => {
                    let p = self.vfs.dget_parent(&dir);
                    add(
                        self.nodes.id_of(&p),
                        e.offset,
                        &e.name,
                        &self.vfs.getattr_dentry(&p)?,
                    )
                }
                name => {
                    let d = match self.vfs.lookup(At::Dir(dir.dentry()), name, false) {
                        Ok(d) => d,
                        // Removed since the listing: leave it out.
                        Err(Errno::ENOENT) => continue,
                        Err(err) if !added => return Err(err),
                        Err(_) => break,
                    };
                    if d.is_negative() {
                        continue;
                    }
                    let a = self.vfs.getattr_dentry(&d)?;
                    if add(self.nodes.id_of(&d), e.offset, name, &a) {
                        true
                    } else {
                        self.nodes.hand_out(d)?;
                        false
                    }
                }
            };
            if full {
                break;
            }
            added = true;
        }
        Ok(())
    }

    pub fn do_statfs(&self) -> Result<StatFs> {
        self.vfs.statfs()
    }

    pub fn do_access(&self, id: u64, uid: u32, gid: u32, pid: u32, mask: i32) -> Result<()> {
        let a = self.vfs.getattr_dentry(&*self.node(id)?)?;
        let groups = || access::proc_groups(pid);
        access::check(
            &a,
            &Caller {
                uid,
                gid,
                groups: &groups,
            },
            mask,
        )
    }
}
