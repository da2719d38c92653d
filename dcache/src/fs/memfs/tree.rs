//! Everything memfs knows, kept behind the one lock: the inode table and
//! the space count (the open handles have their own locks, `handles.rs`).
//! Each method checks every condition before it changes anything, so an
//! error leaves the tree as it was.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::dir::Dir;
use super::file::{FileData, MAX_FILE_SIZE, PAGE};
use super::handles::{handle_for, Handle, Handles};
use super::inode::{Body, Inode, Xattrs};
use super::Limits;
use crate::errno::{Errno, Result};
use crate::fs::{Attr, Ctx, DirEntry, FileType, Ino, SetAttr, SetTime, StatFs, Timespec};
use crate::fs::{NAME_MAX, PATH_MAX};
use crate::permission;

/// The root directory's inode number; later inodes count up from here and
/// a number is never handed out twice.
pub const ROOT: Ino = 1;

#[derive(Debug)]
pub struct Tree {
    pub(super) inodes: HashMap<Ino, Inode>,
    pub(super) next_ino: Ino,
    /// The open handles (shared with `MemFs`, which opens and releases
    /// through it without this lock).
    pub(super) handles: Arc<Handles>,
    /// Inodes with no name left but open handles (their count is
    /// `Handles`' orphan count).
    pub(super) orphans: HashSet<Ino>,
    pub(super) used_pages: u64,
    pub(super) max_pages: u64,
    pub(super) max_inodes: u64,
    /// O_TMPFILE inodes (no name yet) that `link` may still name.
    pub(super) linkable: HashSet<Ino>,
}

/// A name the Vfs would never pass, refused the way the kernel's own checks
/// would refuse it had it reached a local filesystem.
pub(super) fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(Errno::ENOENT);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

pub(super) fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// A name about to be created: `.` and `..` always exist (mkdir(".") is
/// EEXIST on Linux).
fn check_new_name(name: &[u8]) -> Result<()> {
    if is_dot(name) {
        return Err(Errno::EEXIST);
    }
    check_name(name)
}

fn resolve_time(t: SetTime, now: Timespec) -> Timespec {
    match t {
        SetTime::Now => now,
        SetTime::At(ts) => ts,
    }
}

impl Tree {
    pub fn new(perm: u16, uid: u32, gid: u32, limits: Limits) -> Tree {
        let now = Timespec::now();
        let root = Inode {
            kind: FileType::Directory,
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: 2,
            rdev: 0,
            atime: now,
            mtime: now,
            ctime: now,
            xattrs: Xattrs::default(),
            body: Body::Dir(Dir::new(ROOT)),
        };
        Tree {
            inodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            handles: Arc::new(Handles::new()),
            orphans: HashSet::new(),
            used_pages: 0,
            max_pages: limits.max_bytes / PAGE as u64,
            max_inodes: limits.max_inodes,
            linkable: HashSet::new(),
        }
    }

    pub(super) fn inode(&self, ino: Ino) -> Result<&Inode> {
        self.inodes.get(&ino).ok_or(Errno::ENOENT)
    }

    /// For changes after every check passed; the inode is known to exist,
    /// so the error is unreachable, but it is EIO rather than a panic.
    pub(super) fn inode_mut(&mut self, ino: Ino) -> Result<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or(Errno::EIO)
    }

    pub(super) fn dir_mut(&mut self, ino: Ino) -> Result<&mut Dir> {
        self.inode_mut(ino)?.dir_mut().ok_or(Errno::EIO)
    }

    /// A directory that names can be looked up in or added to: ENOTDIR if
    /// `ino` is something else, ENOENT if it was removed (Linux's
    /// IS_DEADDIR check).
    pub(super) fn live_dir(&self, ino: Ino) -> Result<&Dir> {
        let inode = self.inode(ino)?;
        let dir = inode.dir().ok_or(Errno::ENOTDIR)?;
        if inode.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        Ok(dir)
    }

    /// Free an inode nothing refers to any more: no name and no open
    /// handle. One with no name but handles becomes an orphan, which the
    /// release of its last handle comes back here to free.
    pub(super) fn maybe_free(&mut self, ino: Ino) {
        let Some(inode) = self.inodes.get(&ino) else {
            return;
        };
        if inode.nlink != 0 {
            return;
        }
        // Marked before the handles are asked (see `Handles::release`).
        if self.orphans.insert(ino) {
            self.handles.orphan_added();
        }
        if self.handles.busy_or_forget(ino) {
            return;
        }
        self.used_pages -= inode.pages();
        self.inodes.remove(&ino);
        self.linkable.remove(&ino);
        self.orphans.remove(&ino);
        self.handles.orphan_freed();
    }

    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.inode(ino)?.attr(ino))
    }

    pub fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        let inode = self.inode(dir)?;
        let d = inode.dir().ok_or(Errno::ENOTDIR)?;
        if inode.nlink == 0 {
            // A removed directory is empty, even of `..`.
            return Ok(None);
        }
        let child = match name {
            b"." => dir,
            b".." => d.parent,
            _ => {
                check_name(name)?;
                match d.get(name) {
                    Some(child) => child,
                    None => return Ok(None),
                }
            }
        };
        self.getattr(child).map(Some)
    }

    /// Add a new inode holding `body` as `dir/name`.
    #[allow(clippy::too_many_arguments)]
    pub fn make(
        &mut self,
        dir: Ino,
        name: &[u8],
        kind: FileType,
        perm: u16,
        rdev: u32,
        ctx: Ctx,
        body: Body,
    ) -> Result<Attr> {
        let parent_dir = self.live_dir(dir)?;
        check_new_name(name)?;
        if parent_dir.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let parent = self.inode(dir)?;
        let is_dir = kind == FileType::Directory;
        if is_dir && parent.nlink == u32::MAX {
            return Err(Errno::EMLINK);
        }
        if self.inodes.len() as u64 >= self.max_inodes {
            return Err(Errno::ENOSPC);
        }
        let (perm, gid) = permission::inode_init_owner(parent.perm_of(), ctx.gid, perm, is_dir);
        let now = Timespec::now();
        let ino = self.next_ino;
        self.next_ino += 1;
        let inode = Inode {
            kind,
            perm,
            uid: ctx.uid,
            gid,
            nlink: if is_dir { 2 } else { 1 },
            rdev,
            atime: now,
            mtime: now,
            ctime: now,
            xattrs: Xattrs::default(),
            body,
        };
        let attr = inode.attr(ino);
        self.inodes.insert(ino, inode);
        self.dir_mut(dir)?.insert(name, ino);
        let parent = self.inode_mut(dir)?;
        parent.touch_modified(now);
        if is_dir {
            parent.nlink += 1;
        }
        Ok(attr)
    }

    pub fn create(&mut self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        let body = Body::File(FileData::default());
        self.make(dir, name, FileType::Regular, perm, 0, ctx, body)
    }

    pub fn mkdir(&mut self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        let body = Body::Dir(Dir::new(dir));
        self.make(dir, name, FileType::Directory, perm, 0, ctx, body)
    }

    pub fn mknod(
        &mut self,
        dir: Ino,
        name: &[u8],
        kind: FileType,
        perm: u16,
        rdev: u32,
        ctx: Ctx,
    ) -> Result<Attr> {
        // mknod(2) makes no directories (EPERM) and no symlinks (EINVAL).
        let body = match kind {
            FileType::Regular => Body::File(FileData::default()),
            FileType::Directory => return Err(Errno::EPERM),
            FileType::Symlink => return Err(Errno::EINVAL),
            FileType::CharDevice | FileType::BlockDevice => Body::Special,
            FileType::Fifo | FileType::Socket => Body::Special,
        };
        let rdev = match kind {
            FileType::CharDevice | FileType::BlockDevice => rdev,
            _ => 0,
        };
        self.make(dir, name, kind, perm, rdev, ctx, body)
    }

    pub fn symlink(&mut self, dir: Ino, name: &[u8], target: &[u8], ctx: Ctx) -> Result<Attr> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if target.contains(&0) {
            return Err(Errno::EINVAL);
        }
        let body = Body::Symlink(target.into());
        self.make(dir, name, FileType::Symlink, 0o777, 0, ctx, body)
    }

    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        match &self.inode(ino)?.body {
            Body::Symlink(target) => Ok(target.to_vec()),
            _ => Err(Errno::EINVAL),
        }
    }

    pub fn unlink(&mut self, dir: Ino, name: &[u8]) -> Result<()> {
        let d = self.live_dir(dir)?;
        if is_dot(name) {
            return Err(Errno::EISDIR);
        }
        check_name(name)?;
        let target = d.get(name).ok_or(Errno::ENOENT)?;
        if self.inode(target)?.is_dir() {
            return Err(Errno::EISDIR);
        }
        let now = Timespec::now();
        self.dir_mut(dir)?.remove(name);
        self.inode_mut(dir)?.touch_modified(now);
        let t = self.inode_mut(target)?;
        t.nlink -= 1;
        t.ctime = now;
        self.maybe_free(target);
        Ok(())
    }

    pub fn rmdir(&mut self, dir: Ino, name: &[u8]) -> Result<()> {
        let d = self.live_dir(dir)?;
        match name {
            b"." => return Err(Errno::EINVAL),
            b".." => return Err(Errno::ENOTEMPTY),
            _ => check_name(name)?,
        }
        let target = d.get(name).ok_or(Errno::ENOENT)?;
        let t = self.inode(target)?;
        let td = t.dir().ok_or(Errno::ENOTDIR)?;
        if !td.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        let now = Timespec::now();
        self.dir_mut(dir)?.remove(name);
        let parent = self.inode_mut(dir)?;
        parent.touch_modified(now);
        parent.nlink -= 1;
        let t = self.inode_mut(target)?;
        t.nlink = 0;
        t.ctime = now;
        self.maybe_free(target);
        Ok(())
    }

    pub fn link(&mut self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        let t = self.inode(ino)?;
        let d = self.live_dir(newdir)?;
        check_new_name(newname)?;
        if d.get(newname).is_some() {
            return Err(Errno::EEXIST);
        }
        if t.is_dir() {
            return Err(Errno::EPERM);
        }
        if t.nlink == 0 && !self.linkable.contains(&ino) {
            // Linux refuses to give a name back to an unlinked inode
            // (except an O_TMPFILE one opened without O_EXCL).
            return Err(Errno::ENOENT);
        }
        if t.nlink == u32::MAX {
            return Err(Errno::EMLINK);
        }
        let now = Timespec::now();
        self.linkable.remove(&ino);
        // A named inode is no orphan: releases stop asking the tree for it.
        if self.orphans.remove(&ino) {
            self.handles.orphan_freed();
        }
        self.dir_mut(newdir)?.insert(newname, ino);
        self.inode_mut(newdir)?.touch_modified(now);
        let t = self.inode_mut(ino)?;
        t.nlink += 1;
        t.ctime = now;
        Ok(t.attr(ino))
    }

    pub fn setattr(&mut self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let inode = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        for t in [set.atime, set.mtime].into_iter().flatten() {
            if matches!(t, SetTime::At(ts) if ts.nsec >= 1_000_000_000) {
                return Err(Errno::EINVAL);
            }
        }
        if let Some(size) = set.size {
            match inode.kind {
                FileType::Regular => {}
                FileType::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
        }
        let now = Timespec::now();
        if let (Some(size), Body::File(f)) = (set.size, &mut inode.body) {
            // Like tmpfs: a truncate to the current size changes nothing.
            if f.size() != size {
                self.used_pages -= f.truncate(size);
                inode.touch_modified(now);
            }
        }
        if let Some(perm) = set.perm {
            inode.perm = perm & 0o7777;
        }
        if set.uid.is_some() || set.gid.is_some() {
            inode.uid = set.uid.unwrap_or(inode.uid);
            inode.gid = set.gid.unwrap_or(inode.gid);
            // chown of a non-directory drops set-user-ID, and set-group-ID
            // when it means "group may execute" (not mandatory locking).
            if set.perm.is_none() {
                if let Some(m) = permission::mode_after_chown(inode.perm_of()) {
                    inode.perm = m;
                }
            }
        }
        if let Some(t) = set.atime {
            inode.atime = resolve_time(t, now);
        }
        if let Some(t) = set.mtime {
            inode.mtime = resolve_time(t, now);
        }
        let only_size = set.size.is_some()
            && set.perm.is_none()
            && set.uid.is_none()
            && set.gid.is_none()
            && set.atime.is_none()
            && set.mtime.is_none();
        if !only_size {
            // Any attribute change is a status change, even chown(-1, -1).
            inode.ctime = now;
        }
        Ok(inode.attr(ino))
    }

    /// `open` with the tree's write lock: the path that truncates (the
    /// others need only the read lock, `MemFs::open`).
    pub fn open(&mut self, ino: Ino, flags: i32) -> Result<u64> {
        let inode = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let kind = inode.kind;
        handle_for(ino, kind, flags)?;
        let trunc = flags & libc::O_PATH == 0 && flags & libc::O_TRUNC != 0;
        if let (true, Body::File(f)) = (trunc, &mut inode.body) {
            if f.size() != 0 {
                self.used_pages -= f.truncate(0);
                inode.touch_modified(Timespec::now());
            }
        }
        let shard = self.handles.this_shard();
        self.handles.open(shard, ino, kind, flags)
    }

    /// The handle `fh`, which must have been opened on `ino`.
    pub(super) fn handle(&self, ino: Ino, fh: u64) -> Result<Handle> {
        self.handles.get(ino, fh)
    }

    pub fn read(&self, ino: Ino, fh: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if !self.handle(ino, fh)?.read {
            return Err(Errno::EBADF);
        }
        match &self.inode(ino)?.body {
            Body::File(f) => Ok(f.read(offset, buf)),
            Body::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    pub fn write(&mut self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        let h = self.handle(ino, fh)?;
        if !h.write {
            return Err(Errno::EBADF);
        }
        let append = h.append;
        let inode = self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let f = match &mut inode.body {
            Body::File(f) => f,
            Body::Dir(_) => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        };
        // O_APPEND writes land at the end whatever offset was asked for.
        let offset = if append { f.size() } else { offset };
        if data.is_empty() {
            return Ok(0);
        }
        if offset >= MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        // Past the size limit the write is cut short, as generic_write_checks does.
        let room = MAX_FILE_SIZE - offset;
        let data = &data[..data.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        if self.used_pages + f.pages_needed(offset, data.len()) > self.max_pages {
            return Err(Errno::ENOSPC);
        }
        self.used_pages += f.write(offset, data);
        inode.touch_modified(Timespec::now());
        Ok(data.len())
    }

    pub fn release(&mut self, ino: Ino, fh: u64) -> Result<()> {
        self.handles.release(ino, fh)?;
        self.maybe_free(ino);
        Ok(())
    }

    /// Up to `max` entries after cookie `offset`, and whether the directory
    /// ended within them.
    pub fn readdir(&self, dir: Ino, offset: u64, max: usize) -> Result<(Vec<DirEntry>, bool)> {
        let inode = self.inode(dir)?;
        let d = inode.dir().ok_or(Errno::ENOTDIR)?;
        if inode.nlink == 0 {
            // getdents on a removed directory is ENOENT on Linux.
            return Err(Errno::ENOENT);
        }
        let mut out = Vec::new();
        let dots: [(&[u8], Ino, u64); 2] = [(b".", dir, 1), (b"..", d.parent, 2)];
        for (name, ino, cookie) in dots {
            if offset < cookie && out.len() < max {
                out.push(DirEntry {
                    ino,
                    offset: cookie,
                    kind: FileType::Directory,
                    name: name.to_vec(),
                });
            }
        }
        let resume = out.last().map_or(offset, |e| e.offset).max(2);
        for (cookie, name, ino) in d.after(resume) {
            if out.len() >= max {
                return Ok((out, false));
            }
            let kind = self.inode(ino)?.kind;
            out.push(DirEntry {
                ino,
                offset: cookie,
                kind,
                name: name.to_vec(),
            });
        }
        Ok((out, true))
    }

    pub fn statfs(&self) -> StatFs {
        let files = self.inodes.len() as u64;
        StatFs {
            blocks: self.max_pages,
            bfree: self.max_pages.saturating_sub(self.used_pages),
            bavail: self.max_pages.saturating_sub(self.used_pages),
            files: self.max_inodes,
            ffree: self.max_inodes.saturating_sub(files),
            bsize: PAGE as u32,
            namelen: NAME_MAX as u32,
            frsize: PAGE as u32,
        }
    }
}
