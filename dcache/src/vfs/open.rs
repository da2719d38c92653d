//! Open files: [`OpenFile`], the one open-file type (a counted reference
//! to a split-layout [`SplitFile`] whose path is a dentry reference), and
//! `openat(2)` on the `Vfs`, with Linux's `may_open` checks for a
//! credential, `O_CREAT`/`O_EXCL`/`O_TRUNC`, and the set-id bits a write or
//! truncate by an unprivileged caller drops.

use std::mem::ManuallyDrop;

use super::dcache::{d_instantiate, sb_of};
use super::namei::WalkFlags;
use super::ops::is_dot_or_dotdot;
use super::path::check_path;
use super::{At, DentryRef, Super, Vfs};
use crate::cred::{Caps, Cred};
use crate::errno::{Errno, Result};
use crate::file::{FileRef, IdleFile, Split, SplitFile, FMODE_KILL_PRIV, FMODE_KILL_SGID};
use crate::fs::{Ctx, FileSystem, FileType, Ino, SetAttr};
use crate::inode::Inode;
use crate::permission::{self, open_mask};
use crate::sync::RwLockExt;

/// An open file: a counted reference to a split-layout file (the count,
/// position lock and position alone on one cache line, the read-mostly
/// fields on the next) whose path is the dentry it was opened by, and
/// whose `f_op` is the `Vfs`'s backend. `clone` is Linux's `get_file`
/// (what `dup(2)` does to a descriptor's file); the backend's `release`
/// runs exactly once, when the last reference is closed or dropped. The
/// file's memory and its dentry reference are then kept for the closing
/// thread's next open of the same dentry (the Vfs's per-thread cache of
/// idle files), or freed when it is given up as a bare file reference
/// ([`OpenFile::into_file`]).
#[derive(Clone)]
pub struct OpenFile<'v>(ManuallyDrop<FileRef<DentryRef<'v>, Split>>);

impl Drop for OpenFile<'_> {
    fn drop(&mut self) {
        // SAFETY: dropped once; the reference is not used again.
        let f = unsafe { ManuallyDrop::take(&mut self.0) };
        let _ = put_open(f);
    }
}

/// Drop a reference to a Vfs file; the last one releases the backend and
/// leaves the file idle in the closing thread's cache.
fn put_open(f: FileRef<DentryRef<'_>, Split>) -> Result<()> {
    let (r, idle) = f.put_idle();
    if let Some(idle) = idle {
        let sb: *const Super = sb_of(idle.path().dentry());
        // SAFETY: the Super outlives the Vfs's dentries, and the Vfs lives
        // at least as long as `idle`'s `DentryRef<'_>` borrows it, which is
        // past this call.
        unsafe { (*sb).filps.put(idle) };
    }
    r
}

impl<'v> OpenFile<'v> {
    /// The dentry the file was opened by.
    pub fn dentry(&self) -> &DentryRef<'v> {
        self.0.path()
    }
    /// The open inode's number.
    pub fn ino(&self) -> Ino {
        self.0.ino()
    }
    /// The backend's handle from [`FileSystem::open`](crate::FileSystem::open).
    pub fn fh(&self) -> u64 {
        self.0.fh()
    }
    /// The `open(2)` flags.
    pub fn flags(&self) -> i32 {
        self.0.flags()
    }
    /// The counted file reference itself (positioned I/O, mode bits,
    /// count); clones of it are references to this same open file.
    pub fn file(&self) -> &FileRef<DentryRef<'v>, Split> {
        &self.0
    }
    /// The counted file reference, given up as one (for an [`FdTable`]).
    ///
    /// [`FdTable`]: crate::file::FdTable
    pub fn into_file(self) -> FileRef<DentryRef<'v>, Split> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped: the reference moves out once.
        unsafe { ManuallyDrop::take(&mut this.0) }
    }
    /// Is this the same open file as `other`?
    pub fn same_file(&self, other: &Self) -> bool {
        self.0.same_file(&other.0)
    }

    /// `pread(2)`: read into `buf` at `offset`; EBADF if opened write-only.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if self.flags() & libc::O_ACCMODE == libc::O_WRONLY {
            return Err(Errno::EBADF);
        }
        self.0.fs().read(self.ino(), self.fh(), offset, buf)
    }

    /// `pwrite(2)`: write `data` at `offset`; EBADF if opened read-only. A
    /// caller without CAP_FSETID loses the file's set-id bits.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_as(offset, data, self.flags() & libc::O_APPEND != 0)
    }

    /// A write that goes at the end of the file (`FileSystem::write_append`),
    /// whatever this file's flags: a caller that knows the write is an
    /// `O_APPEND` one (a FUSE WRITE's flags) when the file was opened
    /// without it. `offset` is where the caller believes the end is.
    pub fn append(&self, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_as(offset, data, true)
    }

    fn write_as(&self, offset: u64, data: &[u8], append: bool) -> Result<usize> {
        if self.flags() & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno::EBADF);
        }
        let fs = &**self.0.fs();
        let n = match append {
            true => fs.write_append(self.ino(), self.fh(), offset, data)?,
            false => fs.write(self.ino(), self.fh(), offset, data)?,
        };
        if let Some(i) = self.dentry().inode() {
            refresh(fs, i);
            if self.0.mode() & FMODE_KILL_PRIV != 0 {
                kill_priv(fs, i, self.0.mode() & FMODE_KILL_SGID != 0);
            }
        }
        Ok(n)
    }

    /// Drop this reference; when it is the last, release the backend
    /// handle (its result is returned) and then the dentry reference.
    pub fn close(self) -> Result<()> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped: the reference moves out once.
        put_open(unsafe { ManuallyDrop::take(&mut this.0) })
    }

    /// The file's address, keeping this reference (a FUSE handle holds it
    /// as a number). Undo with [`OpenFile::from_raw`].
    pub fn into_raw(self) -> *mut SplitFile<DentryRef<'v>> {
        self.into_file().into_raw()
    }

    /// Take back a reference given away by [`OpenFile::into_raw`].
    ///
    /// # Safety
    /// `p` came from `into_raw` of an `OpenFile` opened on a `Vfs` that
    /// outlives `'v`, and that reference is not taken back again.
    pub unsafe fn from_raw(p: *mut SplitFile<DentryRef<'v>>) -> Self {
        // SAFETY: the caller's contract is `FileRef::from_raw`'s.
        OpenFile(ManuallyDrop::new(unsafe { FileRef::from_raw(p) }))
    }
}

impl std::fmt::Debug for OpenFile<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("ino", &self.ino())
            .field("fh", &self.fh())
            .field("flags", &self.flags())
            .field("count", &self.0.count())
            .finish()
    }
}

/// The inode's attributes again from the backend (after a write).
pub(super) fn refresh(fs: &dyn FileSystem, inode: &Inode) {
    if let Ok(a) = fs.getattr(inode.ino) {
        if a.kind == inode.kind() {
            inode.set_attr(&a);
        }
    }
}

/// A write by a caller without CAP_FSETID: drop S_ISUID, and S_ISGID where
/// group-executable or the writer is outside the file's group
/// (`file_remove_privs`).
pub(super) fn kill_priv(fs: &dyn FileSystem, inode: &Inode, outside_group: bool) {
    let Some(perm) = permission::mode_after_write_by(inode.perm(), outside_group) else {
        return;
    };
    let set = SetAttr {
        perm: Some(perm),
        ..SetAttr::default()
    };
    if let Ok(a) = fs.setattr(inode.ino, &set, Ctx::ROOT) {
        if a.kind == inode.kind() {
            inode.set_attr(&a);
        }
    }
}

/// Where an open file's dentry reference comes from: one the caller
/// holds (cloned for the file), or an idle file's (taken over, with its
/// memory).
enum Src<'a, 'v> {
    Ref(&'a DentryRef<'v>),
    Idle(IdleFile<DentryRef<'v>, Split>),
}

impl<'v> Src<'_, 'v> {
    fn dentry(&self) -> &DentryRef<'v> {
        match self {
            Src::Ref(d) => d,
            Src::Idle(f) => f.path(),
        }
    }
}

/// What the walk of a plain open found inside its read section.
enum Found<'v> {
    Idle(IdleFile<DentryRef<'v>, Split>),
    Ref(DentryRef<'v>),
}

impl Vfs {
    /// `openat(2)` on behalf of `cred`: search on the way, write and search
    /// on the directory to create a name, and read/write permission on an
    /// existing file by access mode and O_TRUNC (a file this call created
    /// is opened without a check, as Linux does). `O_TMPFILE` is
    /// [`tmpfile_as`](Self::tmpfile_as).
    pub(crate) fn open_as<'v>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        flags: i32,
        perm: u16,
        ctx: Ctx,
    ) -> Result<OpenFile<'v>> {
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return self.tmpfile_as(cred, at, path, flags, perm, ctx);
        }
        let nofollow = flags & libc::O_NOFOLLOW != 0;
        if flags & libc::O_CREAT == 0 {
            check_path(path)?;
            // Inside the walk's read section: this thread's idle file on the
            // dentry, whose reference pins it already (no write to the
            // dentry's lockref), else a new reference.
            let sb = self.sb();
            let found = self.walk(cred, at, path, WalkFlags::follow(!nofollow), |d| {
                match sb.filps.take(d) {
                    Some(idle) => Some(Found::Idle(idle)),
                    None => DentryRef::try_get(d).map(Found::Ref),
                }
            })?;
            return match found {
                Ok(Found::Idle(idle)) => self.open_src_as(cred, Src::Idle(idle), flags),
                Ok(Found::Ref(d)) | Err(d) => self.open_dentry_as(cred, &d, flags),
            };
        }
        let (d, created) = self.open_create(cred, at, path, flags, perm, ctx)?;
        let flags = flags & !(libc::O_CREAT | libc::O_EXCL);
        if created {
            self.open_dentry(&d, flags & !libc::O_TRUNC)
        } else {
            self.open_dentry_as(cred, &d, flags)
        }
    }

    /// `open(2)` with `O_TMPFILE` on behalf of `cred`: `path` names a
    /// directory (searched as usual), in which a regular file with no name
    /// is created (write and search permission on the directory, as Linux's
    /// `vfs_tmpfile`) and opened. Its dentry is `#<ino>`, unhashed (Linux's
    /// `d_tmpfile`); `linkat` (`link_dentry`) may give it a name unless
    /// `flags` has O_EXCL. The access mode must include writing (EINVAL).
    pub(crate) fn tmpfile_as<'v>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        flags: i32,
        perm: u16,
        ctx: Ctx,
    ) -> Result<OpenFile<'v>> {
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno::EINVAL);
        }
        check_path(path)?;
        let parent = self.lookup_as(cred, at, path, true)?;
        let dir = parent.inode().ok_or(Errno::ENOENT)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        self.may_create_in(cred, dir)?;
        let (perm, acls) = self.acl_create(cred, dir, libc::S_IFREG, perm)?;
        let perm = permission::mode_strip_sgid(cred, dir.perm(), perm);
        let sb = self.sb();
        let (attr, fh) = super::dcache::fd_retry(sb, || sb.fs.tmpfile(dir.ino, perm, flags, ctx))?;
        if let Err(e) = self.acl_store_new(attr.ino, &acls) {
            let _ = sb.fs.release(attr.ino, fh);
            return Err(e);
        }
        // SAFETY: `parent` is our reference on a directory of this Vfs.
        let d = unsafe { super::dcache::d_alloc_tmpfile(sb, parent.as_ptr(), &attr) };
        // SAFETY: d_alloc_tmpfile returns a dentry of this Vfs carrying one
        // reference for the caller (d_alloc_child never returns null: the
        // slab aborts on exhaustion).
        let d = unsafe { DentryRef::from_counted(std::ptr::NonNull::new_unchecked(d)) };
        let fs = &sb.fs;
        let flags = flags & !(libc::O_TMPFILE | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        // SAFETY: as in `open_checked`: the Super owns `fs` until the Vfs
        // drops, and the file's path is a `DentryRef<'v>`.
        let f = unsafe { FileRef::open_borrowing_fs(d, fs, attr.ino, fh, flags, 0) };
        Ok(OpenFile(ManuallyDrop::new(f)))
    }

    /// The dentry to open and whether this call created it.
    fn open_create<'v>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        flags: i32,
        perm: u16,
        ctx: Ctx,
    ) -> Result<(DentryRef<'v>, bool)> {
        let (parent, name, trailing) = self.walk_parent(cred, at, path)?;
        if trailing || name.is_empty() || is_dot_or_dotdot(name) {
            return Err(Errno::EISDIR);
        }
        let dir = parent.inode().ok_or(Errno::ENOENT)?;
        let w = dir.i_rwsem.write_unpoisoned();
        let mut races = 0;
        let d = loop {
            let d = self.lookup_one(&parent, name, true)?;
            if !d.is_negative() {
                break d;
            }
            self.may_create_in(cred, dir)?;
            let (perm, acls) = self.acl_create(cred, dir, libc::S_IFREG, perm)?;
            let perm = permission::mode_strip_sgid(cred, dir.perm(), perm);
            let sb = self.sb();
            let attr = match super::dcache::fd_retry(sb, || sb.fs.create(dir.ino, name, perm, ctx))
            {
                Ok(attr) => attr,
                // A backend shared with other hosts: one of them made the
                // name after our negative entry was cached. Without
                // O_EXCL that opens the file it made, as openat(2) on one
                // host does; the stale entry goes and the name is looked
                // up again (a few times at most: a host that keeps
                // removing and making it wins with EEXIST).
                Err(Errno::EEXIST) if flags & libc::O_EXCL == 0 && races < MAX_CREATE_RACES => {
                    super::dcache::d_drop(sb, d.dentry());
                    races += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // The dentry first: the file exists even if its inherited
            // ACLs fail to store (as in create_common).
            d_instantiate(self.sb(), d.dentry(), &attr);
            self.refresh(dir);
            self.acl_store_new(attr.ino, &acls)?;
            return Ok((d, true));
        };
        if flags & libc::O_EXCL != 0 {
            return Err(Errno::EEXIST);
        }
        if d.kind() == Some(FileType::Symlink) {
            if flags & libc::O_NOFOLLOW != 0 {
                return Err(Errno::ELOOP);
            }
            drop(w);
            drop(d);
            return Ok((
                self.lookup_as(cred, At::Dir(parent.dentry()), name, true)?,
                false,
            ));
        }
        Ok((d, false))
    }

    /// Open a dentry the caller holds on behalf of `cred` (Linux's
    /// `may_open`: the type checks, then read/write permission).
    pub(crate) fn open_dentry_as<'v>(
        &'v self,
        cred: &Cred,
        d: &DentryRef<'v>,
        flags: i32,
    ) -> Result<OpenFile<'v>> {
        self.check_owned(d.dentry())?;
        let src = match self.sb().filps.take(d.dentry()) {
            Some(idle) => Src::Idle(idle),
            None => Src::Ref(d),
        };
        self.open_src_as(cred, src, flags)
    }

    /// Open a dentry the caller holds (FUSE open by node id), with the
    /// type checks and no permission check.
    pub(crate) fn open_dentry<'v>(&'v self, d: &DentryRef<'v>, flags: i32) -> Result<OpenFile<'v>> {
        self.check_owned(d.dentry())?;
        let src = match self.sb().filps.take(d.dentry()) {
            Some(idle) => Src::Idle(idle),
            None => Src::Ref(d),
        };
        self.open_src(None, src, flags)
    }

    /// `may_open` for `cred`, then the open.
    fn open_src_as<'v>(
        &'v self,
        cred: &Cred,
        src: Src<'_, 'v>,
        flags: i32,
    ) -> Result<OpenFile<'v>> {
        self.open_src(Some(cred), src, flags)
    }

    /// The open of `src`'s dentry, permission-checked for `cred` if given:
    /// the checks, O_TRUNC and the backend's open, then the file, built
    /// in the idle file's memory when there is one. On failure an idle
    /// file goes back to the cache.
    fn open_src<'v>(
        &'v self,
        cred: Option<&Cred>,
        src: Src<'_, 'v>,
        flags: i32,
    ) -> Result<OpenFile<'v>> {
        let (ino, fh, extra) = match self.open_backend(cred, src.dentry(), flags) {
            Ok(r) => r,
            Err(e) => {
                if let Src::Idle(idle) = src {
                    self.sb().filps.put(idle);
                }
                return Err(e);
            }
        };
        let fs = &self.sb().fs;
        // SAFETY: the Super owns `fs` until the Vfs drops, and the file's
        // path is a `DentryRef<'v>`: no reference to the file outlives `'v`
        // (`OpenFile::from_raw`'s contract covers a file held as a number).
        let f = unsafe {
            match src {
                Src::Ref(d) => FileRef::open_borrowing_fs(d.clone(), fs, ino, fh, flags, extra),
                Src::Idle(idle) => idle.reopen_borrowing_fs(fs, ino, fh, flags, extra),
            }
        };
        Ok(OpenFile(ManuallyDrop::new(f)))
    }

    /// Everything of an open but the file: `may_open` (for `cred`, if
    /// given), O_TRUNC, the backend's open. The inode, the backend's
    /// handle and the extra `FMODE_*` bits.
    fn open_backend(
        &self,
        cred: Option<&Cred>,
        d: &DentryRef<'_>,
        flags: i32,
    ) -> Result<(Ino, u64, u32)> {
        let i = d.inode().ok_or(Errno::ENOENT)?;
        open_type(i.kind(), flags)?;
        let mut unprivileged = false;
        let mut outside_group = false;
        if let Some(cred) = cred {
            if flags & libc::O_PATH == 0 {
                self.inode_permission(cred, i, open_mask(flags))?;
            }
            unprivileged = !cred.has(Caps::FSETID);
            outside_group = unprivileged && !cred.in_group(i.perm().gid);
        }
        // Linux truncates with O_RDONLY too (open checked write permission).
        if flags & libc::O_TRUNC != 0 && i.kind() == FileType::Regular {
            let set = SetAttr {
                size: Some(0),
                ..SetAttr::default()
            };
            self.setattr_dentry(d, &set, Ctx::ROOT)?;
        }
        let sb = self.sb();
        let fh = super::dcache::fd_retry(sb, || sb.fs.open(i.ino, flags))?;
        // O_TRUNC truncates (handle_truncate), which drops set-id bits.
        if unprivileged && flags & libc::O_TRUNC != 0 && i.kind() == FileType::Regular {
            kill_priv(&*sb.fs, i, outside_group);
        }
        let extra = match (unprivileged, outside_group) {
            (false, _) => 0,
            (true, false) => FMODE_KILL_PRIV,
            (true, true) => FMODE_KILL_PRIV | FMODE_KILL_SGID,
        };
        Ok((i.ino, fh, extra))
    }
}

/// How many times an `O_CREAT` without `O_EXCL` looks a name up again
/// after the backend found it made by another host meanwhile.
const MAX_CREATE_RACES: u32 = 4;

/// `may_open`'s type checks: a symlink is ELOOP (unless O_PATH), a
/// directory EISDIR for writing or truncating, a non-directory ENOTDIR
/// under O_DIRECTORY.
fn open_type(kind: FileType, flags: i32) -> Result<()> {
    let acc = flags & libc::O_ACCMODE;
    match kind {
        FileType::Symlink if flags & libc::O_PATH == 0 => Err(Errno::ELOOP),
        FileType::Directory if acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0 => {
            Err(Errno::EISDIR)
        }
        k if k != FileType::Directory && flags & libc::O_DIRECTORY != 0 => Err(Errno::ENOTDIR),
        _ => Ok(()),
    }
}
