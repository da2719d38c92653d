//! Namespace operations (create, mkdir, unlink, rmdir, rename, symlink,
//! link, readlink, readdir, setattr) and open files.
//!
//! Each change locks the parent directory's `i_rwsem` for writing, looks
//! the name up under it (so no slow lookup can cache a stale answer
//! meanwhile), asks the backend, and then updates the cache: a negative
//! dentry becomes positive in place (`d_instantiate`), an unlinked one
//! becomes negative or is unhashed (`d_delete`), a renamed one moves
//! (`d_move`) under the global rename sequence count.

use super::dcache::{d_delete, d_drop, d_instantiate, dput};
use super::walk::check_path;
use super::{At, DentryRef, Super, Vfs};
use crate::dentry::{name_hash, Dentry, ExtName, D_HASHED};
use crate::errno::{Errno, Result};
use crate::fs::{Attr, Ctx, DirEntry, FileType, RenameFlags, SetAttr, StatFs, NAME_MAX};
use crate::inode::Inode;
use crate::sync::Ordering;

/// An open file: a counted reference to its dentry plus the backend handle.
/// Closing (or dropping) it releases the backend handle once.
pub struct OpenFile<'v> {
    vfs: &'v Vfs,
    dentry: Option<DentryRef<'v>>,
    ino: u64,
    fh: u64,
    flags: i32,
}

impl<'v> OpenFile<'v> {
    pub fn dentry(&self) -> &DentryRef<'v> {
        self.dentry.as_ref().expect("open file without dentry")
    }
    pub fn ino(&self) -> u64 {
        self.ino
    }
    pub fn fh(&self) -> u64 {
        self.fh
    }
    pub fn flags(&self) -> i32 {
        self.flags
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if self.flags & libc::O_ACCMODE == libc::O_WRONLY {
            return Err(Errno::EBADF);
        }
        self.vfs.sb().fs.read(self.ino, self.fh, offset, buf)
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> Result<usize> {
        if self.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno::EBADF);
        }
        let n = self.vfs.sb().fs.write(self.ino, self.fh, offset, data)?;
        if let Some(i) = self.dentry().inode() {
            self.vfs.refresh(i);
        }
        Ok(n)
    }

    /// Release the backend handle and the dentry reference.
    pub fn close(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        match self.dentry.take() {
            Some(d) => {
                let r = self.vfs.sb().fs.release(self.ino, self.fh);
                drop(d);
                r
            }
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for OpenFile<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("ino", &self.ino)
            .field("fh", &self.fh)
            .field("flags", &self.flags)
            .finish()
    }
}

impl Drop for OpenFile<'_> {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// Split `path` into (parent path, last component, trailing slash).
fn split_last(path: &[u8]) -> (&[u8], &[u8], bool) {
    let mut end = path.len();
    while end > 0 && path[end - 1] == b'/' {
        end -= 1;
    }
    let trailing = end < path.len();
    let trimmed = &path[..end];
    match trimmed.iter().rposition(|&b| b == b'/') {
        Some(i) => (&trimmed[..=i], &trimmed[i + 1..], trailing),
        None => (&[][..], trimmed, trailing),
    }
}

fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Vfs {
    /// Resolve all but the last component: (parent directory, last name,
    /// trailing slash). The name is empty when the path names the root.
    fn walk_parent<'v, 'p>(
        &'v self,
        at: At<'_>,
        path: &'p [u8],
    ) -> Result<(DentryRef<'v>, &'p [u8], bool)> {
        check_path(path)?;
        let (parent_path, name, trailing) = split_last(path);
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let parent = if parent_path.is_empty() {
            match at {
                At::Root => self.root(),
                At::Dir(d) => {
                    d.d_lockref.get();
                    DentryRef::from_counted(d as *const Dentry as *mut Dentry)
                }
            }
        } else {
            self.walk_ref(at, parent_path, true, false)?
        };
        match parent.kind() {
            Some(FileType::Directory) => Ok((parent, name, trailing)),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// Re-read an inode's attributes from the backend after a change.
    pub(crate) fn refresh(&self, inode: &Inode) {
        if let Ok(a) = self.sb().fs.getattr(inode.ino) {
            if a.kind == inode.kind {
                inode.set_attr(&a);
            }
        }
    }

    /// The common shape of create/mkdir/mknod/symlink: lock the parent,
    /// look the name up, refuse if it exists, let `make` create it in the
    /// backend, and instantiate the dentry.
    fn create_common<'v>(
        &'v self,
        at: At<'_>,
        path: &[u8],
        dir_ok: bool,
        make: impl FnOnce(u64, &[u8]) -> Result<Attr>,
    ) -> Result<DentryRef<'v>> {
        let (parent, name, trailing) = self.walk_parent(at, path)?;
        if name.is_empty() || is_dot_or_dotdot(name) {
            return Err(Errno::EEXIST);
        }
        let dir = parent.inode().ok_or(Errno::ENOENT)?;
        let _w = dir.i_rwsem.write().unwrap_or_else(|e| e.into_inner());
        let d = self.lookup_one(&parent, name, true)?;
        if !d.is_negative() {
            return Err(Errno::EEXIST);
        }
        if trailing && !dir_ok {
            return Err(Errno::ENOENT);
        }
        let attr = make(dir.ino, name)?;
        d_instantiate(self.sb(), d.dentry(), &attr);
        self.refresh(dir);
        Ok(d)
    }

    /// Create a regular file; EEXIST if the name exists.
    pub fn create(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        perm: u16,
        ctx: Ctx,
    ) -> Result<DentryRef<'_>> {
        let fs = &self.sb().fs;
        self.create_common(at, path.as_ref(), false, |dir, name| {
            fs.create(dir, name, perm, ctx)
        })
        .map_err(|e| {
            if e == Errno::ENOENT && path.as_ref().ends_with(b"/") {
                Errno::EISDIR
            } else {
                e
            }
        })
    }

    pub fn mkdir(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        perm: u16,
        ctx: Ctx,
    ) -> Result<DentryRef<'_>> {
        let fs = &self.sb().fs;
        self.create_common(at, path.as_ref(), true, |dir, name| {
            fs.mkdir(dir, name, perm, ctx)
        })
    }

    pub fn mknod(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        kind: FileType,
        perm: u16,
        rdev: u32,
        ctx: Ctx,
    ) -> Result<DentryRef<'_>> {
        let fs = &self.sb().fs;
        self.create_common(at, path.as_ref(), false, |dir, name| {
            if kind == FileType::Regular {
                fs.create(dir, name, perm, ctx)
            } else if kind == FileType::Directory || kind == FileType::Symlink {
                Err(Errno::EINVAL)
            } else {
                fs.mknod(dir, name, kind, perm, rdev, ctx)
            }
        })
    }

    /// Make `path` a symlink to `target`.
    pub fn symlink(
        &self,
        target: impl AsRef<[u8]>,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        ctx: Ctx,
    ) -> Result<DentryRef<'_>> {
        let target = target.as_ref();
        check_path(target)?;
        let fs = &self.sb().fs;
        let d = self.create_common(at, path.as_ref(), false, |dir, name| {
            fs.symlink(dir, name, target, ctx)
        })?;
        if let Some(i) = d.inode() {
            i.cache_link(target);
        }
        Ok(d)
    }

    /// Read a symlink (the last component is not followed).
    pub fn readlink(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let d = self.lookup(at, path, false)?;
        self.readlink_dentry(&d)
    }

    pub fn readlink_dentry(&self, d: &DentryRef<'_>) -> Result<Vec<u8>> {
        let i = d.inode().ok_or(Errno::ENOENT)?;
        if i.kind != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        self.read_link(i)
    }

    /// Make `new_path` another name for `old_path` (not following a final
    /// symlink in `old_path`, as linkat without AT_SYMLINK_FOLLOW).
    pub fn link(
        &self,
        old_at: At<'_>,
        old_path: impl AsRef<[u8]>,
        new_at: At<'_>,
        new_path: impl AsRef<[u8]>,
    ) -> Result<DentryRef<'_>> {
        let old = self.lookup(old_at, old_path, false)?;
        self.link_dentry(&old, new_at, new_path)
    }

    /// Make `new_path` another name for the inode of `old`, a dentry the
    /// caller holds (FUSE LINK names the inode, not a path; `old` may have
    /// been renamed or unlinked since, as with `linkat(fd, "",
    /// AT_EMPTY_PATH)`: the backend refuses an inode with no links left).
    pub fn link_dentry<'v>(
        &'v self,
        old: &DentryRef<'_>,
        new_at: At<'_>,
        new_path: impl AsRef<[u8]>,
    ) -> Result<DentryRef<'v>> {
        let inode = old.inode().ok_or(Errno::ENOENT)?;
        if inode.kind == FileType::Directory {
            return Err(Errno::EPERM);
        }
        let fs = &self.sb().fs;
        let ino = inode.ino;
        self.create_common(new_at, new_path.as_ref(), false, |dir, name| {
            fs.link(ino, dir, name)
        })
    }

    pub fn unlink(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<()> {
        self.remove_common(at, path.as_ref(), false)
    }

    pub fn rmdir(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<()> {
        self.remove_common(at, path.as_ref(), true)
    }

    fn remove_common(&self, at: At<'_>, path: &[u8], dir_op: bool) -> Result<()> {
        let (parent, name, trailing) = self.walk_parent(at, path)?;
        if name.is_empty() {
            return Err(if dir_op { Errno::EBUSY } else { Errno::EISDIR });
        }
        if name == b"." {
            return Err(if dir_op { Errno::EINVAL } else { Errno::EISDIR });
        }
        if name == b".." {
            return Err(if dir_op {
                Errno::ENOTEMPTY
            } else {
                Errno::EISDIR
            });
        }
        let sb = self.sb();
        let dir = parent.inode().ok_or(Errno::ENOENT)?;
        let _w = dir.i_rwsem.write().unwrap_or_else(|e| e.into_inner());
        let d = self.lookup_one(&parent, name, true)?;
        let inode = d.inode().ok_or(Errno::ENOENT)?;
        let is_dir = inode.kind == FileType::Directory;
        if dir_op {
            if !is_dir {
                return Err(Errno::ENOTDIR);
            }
            sb.fs.rmdir(dir.ino, name)?;
        } else {
            if is_dir {
                return Err(Errno::EISDIR);
            }
            if trailing {
                return Err(Errno::ENOTDIR);
            }
            sb.fs.unlink(dir.ino, name)?;
            // Other names of the inode see the new link count.
            self.refresh(inode);
        }
        d_delete(sb, d.dentry());
        self.refresh(dir);
        Ok(())
    }

    /// `renameat2`: move `old` to `new` (see [`RenameFlags`]).
    pub fn rename(
        &self,
        old_at: At<'_>,
        old_path: impl AsRef<[u8]>,
        new_at: At<'_>,
        new_path: impl AsRef<[u8]>,
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.noreplace && flags.exchange {
            return Err(Errno::EINVAL);
        }
        let (op, oname, otrail) = self.walk_parent(old_at, old_path.as_ref())?;
        let (np, nname, ntrail) = self.walk_parent(new_at, new_path.as_ref())?;
        if oname.is_empty()
            || nname.is_empty()
            || is_dot_or_dotdot(oname)
            || is_dot_or_dotdot(nname)
        {
            return Err(Errno::EBUSY);
        }
        let sb = self.sb();
        let odir = op.inode().ok_or(Errno::ENOENT)?;
        let ndir = np.inode().ok_or(Errno::ENOENT)?;
        let _rl = sb.rename_lock.lock().unwrap_or_else(|e| e.into_inner());
        let same_dir = std::ptr::eq(odir, ndir);
        let (first, second) = if (odir as *const Inode) < (ndir as *const Inode) {
            (odir, ndir)
        } else {
            (ndir, odir)
        };
        let _w1 = first.i_rwsem.write().unwrap_or_else(|e| e.into_inner());
        let _w2 = if same_dir {
            None
        } else {
            Some(second.i_rwsem.write().unwrap_or_else(|e| e.into_inner()))
        };
        let od = self.lookup_one(&op, oname, true)?;
        let oinode = od.inode().ok_or(Errno::ENOENT)?;
        let nd = self.lookup_one(&np, nname, true)?;
        if (otrail || ntrail) && oinode.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        if flags.exchange && nd.is_negative() {
            return Err(Errno::ENOENT);
        }
        if flags.noreplace && !nd.is_negative() {
            return Err(Errno::EEXIST);
        }
        if let Some(ni) = nd.inode() {
            if std::ptr::eq(ni, oinode) {
                // Two names of one file: POSIX says do nothing.
                return Ok(());
            }
        }
        sb.fs.rename(odir.ino, oname, ndir.ino, nname, flags)?;
        sb.rename_seq.write_begin();
        if flags.exchange {
            self.d_exchange(&od, &nd);
        } else {
            let replaced = nd.inode().map(|i| i as *const Inode);
            d_drop(sb, nd.dentry());
            self.d_move(&od, &np, nname);
            if let Some(i) = replaced {
                // SAFETY: nd still holds the inode (unhashed, not killed).
                self.refresh(unsafe { &*i });
            }
        }
        sb.rename_seq.write_end();
        self.refresh(oinode);
        if let Some(i) = nd.inode() {
            self.refresh(i);
        }
        self.refresh(odir);
        if !same_dir {
            self.refresh(ndir);
        }
        Ok(())
    }

    /// Move `d` to `new_parent/new_name` in the cache.
    fn d_move(&self, d: &DentryRef<'_>, new_parent: &DentryRef<'_>, new_name: &[u8]) {
        let sb = self.sb();
        let dd = d.dentry();
        new_parent.dentry().d_lockref.get();
        new_parent
            .dentry()
            .d_children
            .fetch_add(1, Ordering::Relaxed);
        let g = dd.d_lockref.lock();
        let hashed = dd.flags() & D_HASHED != 0;
        if hashed {
            sb.table.remove(d.as_ptr());
        }
        dd.d_seq.write_begin();
        let old_parent = dd.d_parent.swap(new_parent.as_ptr(), Ordering::SeqCst);
        let old_ext = dd.store_name(new_name);
        dd.d_hash_len.store(
            crate::dentry::hash_len(name_hash(new_name), new_name.len()),
            Ordering::Relaxed,
        );
        dd.d_seq.write_end();
        if hashed {
            sb.table.insert(d.as_ptr());
        }
        drop(g);
        if let Some(p) = old_ext {
            retire_ext(sb, p);
        }
        // SAFETY: the moved dentry held a reference on its old parent.
        unsafe { &*old_parent }
            .d_children
            .fetch_sub(1, Ordering::Relaxed);
        // SAFETY: that reference is now given back.
        unsafe { dput(old_parent) };
    }

    /// Swap two dentries' places (RENAME_EXCHANGE).
    fn d_exchange(&self, a: &DentryRef<'_>, b: &DentryRef<'_>) {
        let sb = self.sb();
        let (ad, bd) = (a.dentry(), b.dentry());
        let (an, bn) = (ad.name(), bd.name());
        let (first, second) = if a.as_ptr() < b.as_ptr() {
            (ad, bd)
        } else {
            (bd, ad)
        };
        let g1 = first.d_lockref.lock();
        let g2 = second.d_lockref.lock();
        for x in [a, b] {
            if x.dentry().flags() & D_HASHED != 0 {
                sb.table.remove(x.as_ptr());
            }
        }
        ad.d_seq.write_begin();
        bd.d_seq.write_begin();
        let ap = ad.d_parent.load(Ordering::Relaxed);
        let bp = bd.d_parent.load(Ordering::Relaxed);
        ad.d_parent.store(bp, Ordering::SeqCst);
        bd.d_parent.store(ap, Ordering::SeqCst);
        let ea = ad.store_name(&bn);
        let eb = bd.store_name(&an);
        ad.d_hash_len.store(
            crate::dentry::hash_len(name_hash(&bn), bn.len()),
            Ordering::Relaxed,
        );
        bd.d_hash_len.store(
            crate::dentry::hash_len(name_hash(&an), an.len()),
            Ordering::Relaxed,
        );
        bd.d_seq.write_end();
        ad.d_seq.write_end();
        // Re-insert through the references' own pointers: the table must
        // hold pointers with the allocation's provenance, not ones made
        // from a shared borrow.
        for x in [a, b] {
            if x.dentry().flags() & D_HASHED != 0 {
                sb.table.insert(x.as_ptr());
            }
        }
        drop(g2);
        drop(g1);
        for p in [ea, eb].into_iter().flatten() {
            retire_ext(sb, p);
        }
    }

    /// Read a directory (`offset` 0 = from the start; see `FileSystem::readdir`).
    pub fn readdir(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        offset: u64,
        emit: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        let d = self.lookup(at, path, true)?;
        self.readdir_dentry(&d, offset, emit)
    }

    pub fn readdir_dentry(
        &self,
        d: &DentryRef<'_>,
        offset: u64,
        emit: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        let i = d.inode().ok_or(Errno::ENOENT)?;
        if i.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        self.sb().fs.readdir(i.ino, offset, emit)
    }

    /// Change attributes (chmod, chown, truncate, utimens).
    pub fn setattr(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        set: &SetAttr,
        ctx: Ctx,
    ) -> Result<Attr> {
        let d = self.lookup(at, path, true)?;
        self.setattr_dentry(&d, set, ctx)
    }

    pub fn setattr_dentry(&self, d: &DentryRef<'_>, set: &SetAttr, ctx: Ctx) -> Result<Attr> {
        let i = d.inode().ok_or(Errno::ENOENT)?;
        let a = self.sb().fs.setattr(i.ino, set, ctx)?;
        if a.kind == i.kind {
            i.set_attr(&a);
        }
        Ok(a)
    }

    /// Attributes of a dentry the caller holds (cached; refreshed from the
    /// backend when it needs revalidation).
    pub fn getattr_dentry(&self, d: &DentryRef<'_>) -> Result<Attr> {
        let i = d.inode().ok_or(Errno::ENOENT)?;
        if self.sb().revalidate {
            let a = self.sb().fs.getattr(i.ino)?;
            if a.kind == i.kind {
                i.set_attr(&a);
            }
            return Ok(a);
        }
        Ok(i.attr())
    }

    pub fn statfs(&self) -> Result<StatFs> {
        self.sb().fs.statfs()
    }

    /// `openat(2)` with `O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_DIRECTORY`,
    /// `O_NOFOLLOW` handled here; other flags are passed to the backend.
    pub fn open(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        flags: i32,
        perm: u16,
        ctx: Ctx,
    ) -> Result<OpenFile<'_>> {
        let path = path.as_ref();
        let nofollow = flags & libc::O_NOFOLLOW != 0;
        let d = if flags & libc::O_CREAT != 0 {
            self.open_create(at, path, flags, perm, ctx)?
        } else {
            check_path(path)?;
            self.lookup(at, path, !nofollow)?
        };
        self.open_dentry(&d, flags & !(libc::O_CREAT | libc::O_EXCL))
    }

    fn open_create<'v>(
        &'v self,
        at: At<'_>,
        path: &[u8],
        flags: i32,
        perm: u16,
        ctx: Ctx,
    ) -> Result<DentryRef<'v>> {
        let (parent, name, trailing) = self.walk_parent(at, path)?;
        if trailing || name.is_empty() || is_dot_or_dotdot(name) {
            return Err(Errno::EISDIR);
        }
        let dir = parent.inode().ok_or(Errno::ENOENT)?;
        let w = dir.i_rwsem.write().unwrap_or_else(|e| e.into_inner());
        let d = self.lookup_one(&parent, name, true)?;
        if d.is_negative() {
            let attr = self.sb().fs.create(dir.ino, name, perm, ctx)?;
            d_instantiate(self.sb(), d.dentry(), &attr);
            self.refresh(dir);
            return Ok(d);
        }
        if flags & libc::O_EXCL != 0 {
            return Err(Errno::EEXIST);
        }
        if d.kind() == Some(FileType::Symlink) {
            if flags & libc::O_NOFOLLOW != 0 {
                return Err(Errno::ELOOP);
            }
            drop(w);
            drop(d);
            return self.lookup(At::Dir(parent.dentry()), name, true);
        }
        Ok(d)
    }

    /// Open a dentry the caller holds (FUSE open by node id).
    pub fn open_dentry<'v>(&'v self, d: &DentryRef<'v>, flags: i32) -> Result<OpenFile<'v>> {
        let i = d.inode().ok_or(Errno::ENOENT)?;
        let acc = flags & libc::O_ACCMODE;
        match i.kind {
            FileType::Symlink if flags & libc::O_PATH == 0 => return Err(Errno::ELOOP),
            FileType::Directory if acc != libc::O_RDONLY => return Err(Errno::EISDIR),
            k if k != FileType::Directory && flags & libc::O_DIRECTORY != 0 => {
                return Err(Errno::ENOTDIR)
            }
            _ => {}
        }
        if flags & libc::O_TRUNC != 0 && i.kind == FileType::Regular && acc != libc::O_RDONLY {
            let set = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            self.setattr_dentry(d, &set, Ctx::ROOT)?;
        }
        let fh = self.sb().fs.open(i.ino, flags)?;
        Ok(OpenFile {
            vfs: self,
            dentry: Some(d.clone()),
            ino: i.ino,
            fh,
            flags,
        })
    }
}

fn retire_ext(sb: &Super, p: *mut ExtName) {
    unsafe fn free_ext(p: *mut u8) {
        // SAFETY: retired once after a grace period; allocated as a Box.
        drop(unsafe { Box::from_raw(p as *mut ExtName) });
    }
    // SAFETY: the name was swapped out under d_seq; readers that start now
    // see the new one; free_ext frees a Box<ExtName>.
    unsafe { sb.rcu.retire(p as *mut u8, free_ext) };
}
