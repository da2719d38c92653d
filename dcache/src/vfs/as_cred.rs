//! [`AsCred`]: the `Vfs` as one caller sees it. Every call is made on
//! behalf of the handle's [`Cred`] and checked with Linux's rules: search
//! permission on every directory walked (in rcu-walk, from the inode's
//! cached mode, owner and group), write and search to create or remove a
//! name, the sticky bit, read/write permission to open, and `setattr`'s
//! ownership rules. New files belong to the credential's fsuid and fsgid
//! (the backend applies setgid directories).
//!
//! This handle is the namespace API: every path and dentry operation is a
//! method here, once. A server that acts for many callers makes one handle
//! per request (it is two references); a tool that acts for itself uses
//! `vfs.as_cred(&Cred::current())`; [`Vfs::as_root`] acts as
//! [`Cred::ROOT`] (every capability; new files owned by 0:0; to create
//! files owned by someone else with root's rights, use
//! `Cred::user(uid, gid, &[]).with_caps(Caps::ALL)`).

use super::{root_cred, At, DentryRef, OpenFile, StatMode, Vfs};
use crate::cred::{Caps, Cred};
use crate::errno::{Errno, Result};
use crate::fs::{Attr, Ctx, DirEntry, FileType, RenameFlags, SetAttr};

/// `access(2)`'s `AT_EACCESS`: check with the effective (filesystem) ids.
pub const AT_EACCESS: i32 = libc::AT_EACCESS;

/// The `Vfs` on behalf of one credential (see the module docs).
#[derive(Clone, Copy)]
pub struct AsCred<'v, 'c> {
    vfs: &'v Vfs,
    cred: &'c Cred,
}

impl Vfs {
    /// This `Vfs` on behalf of `cred`: every call through the handle is
    /// permission-checked for it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{At, Cred, Errno, Vfs};
    ///
    /// let vfs = Vfs::new(Arc::new(MemFs::with_root(0o755, 0, 0)))?;
    /// vfs.as_root().mkdir(At::Root, "home", 0o755)?;
    ///
    /// // A user cannot create in root's directory...
    /// let bob = Cred::user(1001, 1001, &[]);
    /// let as_bob = vfs.as_cred(&bob);
    /// assert_eq!(as_bob.mkdir(At::Root, "home/bob", 0o755).unwrap_err(), Errno::EACCES);
    /// // ...until root makes one of his own.
    /// let root_for_bob = Cred::user(1001, 1001, &[]).with_caps(dcache::Caps::ALL);
    /// let home = vfs.as_cred(&root_for_bob).mkdir(At::Root, "home/bob", 0o755)?;
    /// let f = as_bob.create(At::from(&home), "notes", 0o600)?;
    /// assert_eq!(f.attr().unwrap().uid, 1001);
    /// # Ok::<(), Errno>(())
    /// ```
    #[inline(always)]
    pub fn as_cred<'c>(&self, cred: &'c Cred) -> AsCred<'_, 'c> {
        AsCred { vfs: self, cred }
    }

    /// This `Vfs` on behalf of the superuser ([`Cred::ROOT`]: every
    /// capability, so only the checks no capability overrides apply; new
    /// files are owned by 0:0).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{At, Vfs};
    ///
    /// let vfs = Vfs::new(Arc::new(MemFs::new()))?;
    /// let root = vfs.as_root();
    /// root.mkdir(At::Root, "etc", 0o755)?;
    /// root.create(At::Root, "etc/hostname", 0o644)?;
    /// assert_eq!(root.stat(At::Root, "etc/hostname")?.uid, 0);
    /// # Ok::<(), dcache::Errno>(())
    /// ```
    #[inline(always)]
    pub fn as_root(&self) -> AsCred<'_, 'static> {
        AsCred {
            vfs: self,
            cred: root_cred(),
        }
    }
}

impl<'v> AsCred<'v, '_> {
    /// The credential the calls are made for.
    pub fn cred(&self) -> &Cred {
        self.cred
    }

    /// The `Vfs` underneath.
    pub fn vfs(&self) -> &'v Vfs {
        self.vfs
    }

    /// Owner and group of what this caller creates.
    fn ctx(&self) -> Ctx {
        Ctx {
            uid: self.cred.fsuid,
            gid: self.cred.fsgid,
        }
    }

    /// `stat(2)`.
    #[inline]
    pub fn stat(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Attr> {
        self.vfs
            .stat_as(self.cred, at, path.as_ref(), true, StatMode::RefFree)
    }

    /// `lstat(2)`.
    #[inline]
    pub fn lstat(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Attr> {
        self.vfs
            .stat_as(self.cred, at, path.as_ref(), false, StatMode::RefFree)
    }

    /// `stat(2)` of every path in `paths`, the answers in `out` in the
    /// same order: what `stat` of each in turn would answer, from walks
    /// interleaved [`LANES`](crate::vfs::LANES) at a time so that their
    /// cache misses overlap (see the module `vfs::batch` in the sources).
    /// Over a cache larger than the CPU's, several times the paths per
    /// second of one `stat` after another. EINVAL (and `out` untouched)
    /// unless `out` has one slot per path.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{At, Errno, FileType, Vfs};
    ///
    /// let fs = Arc::new(MemFs::new());
    /// fs.mkdir_p("src", 0o755)?;
    /// fs.write_file("src/main.rs", b"fn main() {}")?;
    /// let vfs = Vfs::new(fs)?;
    /// let paths = ["src/main.rs", "src", "src/lib.rs"];
    /// let mut out = [Err(Errno::EINVAL); 3];
    /// vfs.as_root().stat_many(At::Root, &paths, &mut out)?;
    /// assert_eq!(out[0].as_ref().unwrap().size, 12);
    /// assert_eq!(out[1].as_ref().unwrap().kind, FileType::Directory);
    /// assert_eq!(out[2], Err(Errno::ENOENT));
    /// # Ok::<(), Errno>(())
    /// ```
    pub fn stat_many<P: AsRef<[u8]>>(
        &self,
        at: At<'_>,
        paths: &[P],
        out: &mut [Result<Attr>],
    ) -> Result<()> {
        self.vfs.stat_many_as(self.cred, at, paths, true, out)
    }

    /// `lstat(2)` of every path in `paths`, as [`AsCred::stat_many`].
    pub fn lstat_many<P: AsRef<[u8]>>(
        &self,
        at: At<'_>,
        paths: &[P],
        out: &mut [Result<Attr>],
    ) -> Result<()> {
        self.vfs.stat_many_as(self.cred, at, paths, false, out)
    }

    /// [`AsCred::lookup`] of every path in `paths`, walked interleaved as
    /// in [`AsCred::stat_many`]: `out[i]` is what `lookup(at, paths[i],
    /// follow)` would return, a counted reference (a negative dentry for
    /// a name known not to exist) or the errno. EINVAL, and nothing
    /// written, unless `paths` and `out` have the same length. For callers
    /// with many names at once, such as a FUSE server's READDIRPLUS.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::{fs::memfs::MemFs, At, Errno, Vfs};
    ///
    /// let fs = Arc::new(MemFs::new());
    /// fs.mkdir_p("src", 0o755)?;
    /// fs.write_file("src/main.rs", b"fn main() {}")?;
    /// let vfs = Vfs::new(fs)?;
    /// let src = vfs.as_root().lookup(At::Root, "src", true)?;
    /// let mut out: Vec<_> = (0..2).map(|_| Err(Errno::EINVAL)).collect();
    /// vfs.as_root()
    ///     .lookup_many(At::Dir(src.dentry()), &["main.rs", "lib.rs"], false, &mut out)?;
    /// assert!(!out[0].as_ref().unwrap().is_negative());
    /// assert!(out[1].as_ref().map_or(true, |d| d.is_negative()));
    /// # Ok::<(), Errno>(())
    /// ```
    pub fn lookup_many<P: AsRef<[u8]>>(
        &self,
        at: At<'_>,
        paths: &[P],
        follow: bool,
        out: &mut [Result<DentryRef<'v>>],
    ) -> Result<()> {
        self.vfs.lookup_many_as(self.cred, at, paths, follow, out)
    }

    /// `stat` with the choice of how the last component is handled (the
    /// benchmark's Linux-style lockref stat; `experiments` feature only).
    #[cfg(feature = "experiments")]
    #[inline]
    pub fn stat_with(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        follow: bool,
        mode: StatMode,
    ) -> Result<Attr> {
        self.vfs.stat_as(self.cred, at, path.as_ref(), follow, mode)
    }

    /// A counted reference to what `path` names.
    pub fn lookup(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        follow: bool,
    ) -> Result<DentryRef<'v>> {
        self.vfs.lookup_as(self.cred, at, path.as_ref(), follow)
    }

    /// `faccessat(2)`: `mask` is `F_OK` or any of `R_OK`, `W_OK`, `X_OK`;
    /// `flags` may hold `AT_EACCESS` (check with the effective ids instead
    /// of the real ones) and `AT_SYMLINK_NOFOLLOW`. Without `AT_EACCESS` the
    /// check runs as the real uid and gid, with the capabilities only if the
    /// real uid is 0, as Linux does.
    pub fn access(&self, at: At<'_>, path: impl AsRef<[u8]>, mask: i32, flags: i32) -> Result<()> {
        if mask & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0
            || flags & !(libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW) != 0
        {
            return Err(Errno::EINVAL);
        }
        let real;
        let cred = if flags & libc::AT_EACCESS != 0 {
            self.cred
        } else {
            let caps = if self.cred.uid == 0 {
                self.cred.caps
            } else {
                Caps::NONE
            };
            real = Cred::user(self.cred.uid, self.cred.gid, self.cred.groups())
                .with_caps(caps)
                .with_real_ids(self.cred.uid, self.cred.gid);
            &real
        };
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        let d = self.vfs.lookup_as(cred, at, path.as_ref(), follow)?;
        if mask == libc::F_OK {
            return Ok(());
        }
        let i = d.inode().ok_or(Errno::ENOENT)?;
        // R_OK, W_OK and X_OK are MAY_READ, MAY_WRITE and MAY_EXEC.
        self.vfs.inode_permission(cred, i, mask as u32)
    }

    /// `openat(2)` with `O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_DIRECTORY`,
    /// `O_NOFOLLOW` handled here; other flags are passed to the backend.
    /// `perm` is the mode of a file `O_CREAT` makes (owned by the caller).
    /// Search permission on the way, write and search on the directory to
    /// create a name, read/write permission on an existing file by access
    /// mode and O_TRUNC (a file this call created is opened without a
    /// check, as Linux does).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{oflags, At, Errno, Vfs};
    ///
    /// let vfs = Vfs::new(Arc::new(MemFs::new()))?;
    /// let root = vfs.as_root();
    /// let f = root.open(At::Root, "log", oflags::O_CREAT | oflags::O_RDWR, 0o644)?;
    /// assert_eq!(f.write(0, b"hello")?, 5);
    /// let mut buf = [0; 16];
    /// assert_eq!(f.read(0, &mut buf)?, 5);
    /// assert_eq!(&buf[..5], b"hello");
    /// f.close()?;
    ///
    /// let flags = oflags::O_CREAT | oflags::O_EXCL | oflags::O_WRONLY;
    /// assert_eq!(root.open(At::Root, "log", flags, 0o644).unwrap_err(), Errno::EEXIST);
    /// # Ok::<(), Errno>(())
    /// ```
    pub fn open(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        flags: i32,
        perm: u16,
    ) -> Result<OpenFile<'v>> {
        self.vfs
            .open_as(self.cred, at, path.as_ref(), flags, perm, self.ctx())
    }

    /// `open(2)` with `O_TMPFILE`: a regular file with no name, owned by
    /// the caller, in the directory `path` names (write and search
    /// permission on it), opened with `flags` (an access mode that writes;
    /// EINVAL otherwise). `link_dentry` on its dentry names it later,
    /// unless `flags` has `O_EXCL`; otherwise it goes with its last close.
    /// EOPNOTSUPP where the backend has no unnamed files.
    pub fn tmpfile(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        flags: i32,
        perm: u16,
    ) -> Result<OpenFile<'v>> {
        self.vfs
            .tmpfile_as(self.cred, at, path.as_ref(), flags, perm, self.ctx())
    }

    /// Create a regular file owned by the caller; EEXIST if the name
    /// exists. Needs write and search permission on the parent directory.
    pub fn create(&self, at: At<'_>, path: impl AsRef<[u8]>, perm: u16) -> Result<DentryRef<'v>> {
        self.vfs
            .create_as(self.cred, at, path.as_ref(), perm, self.ctx())
    }

    /// `mkdirat(2)`: a directory owned by the caller.
    pub fn mkdir(&self, at: At<'_>, path: impl AsRef<[u8]>, perm: u16) -> Result<DentryRef<'v>> {
        self.vfs
            .mkdir_as(self.cred, at, path.as_ref(), perm, self.ctx())
    }

    /// `mknodat(2)`: a special file (or a regular one) owned by the caller.
    pub fn mknod(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        kind: FileType,
        perm: u16,
        rdev: u32,
    ) -> Result<DentryRef<'v>> {
        self.vfs
            .mknod_as(self.cred, at, path.as_ref(), kind, perm, rdev, self.ctx())
    }

    /// `symlinkat(2)`: `path` becomes a symlink to `target`, owned by the
    /// caller.
    pub fn symlink(
        &self,
        target: impl AsRef<[u8]>,
        at: At<'_>,
        path: impl AsRef<[u8]>,
    ) -> Result<DentryRef<'v>> {
        self.vfs
            .symlink_as(self.cred, target.as_ref(), at, path.as_ref(), self.ctx())
    }

    /// `readlinkat(2)`: the target of the symlink `path` names.
    pub fn readlink(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.vfs.readlink_as(self.cred, at, path.as_ref())
    }

    /// `linkat(2)`: `new_path` becomes another name for `old_path` (a final
    /// symlink in `old_path` is not followed, as without
    /// `AT_SYMLINK_FOLLOW`).
    pub fn link(
        &self,
        old_at: At<'_>,
        old_path: impl AsRef<[u8]>,
        new_at: At<'_>,
        new_path: impl AsRef<[u8]>,
    ) -> Result<DentryRef<'v>> {
        self.vfs.link_as(
            self.cred,
            old_at,
            old_path.as_ref(),
            new_at,
            new_path.as_ref(),
        )
    }

    /// `unlinkat(2)`: remove a name that is not a directory (write and
    /// search on its directory, and the sticky-bit rule).
    pub fn unlink(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<()> {
        self.vfs.remove_common(self.cred, at, path.as_ref(), false)
    }

    /// `unlinkat(2)` with `AT_REMOVEDIR`: remove an empty directory.
    pub fn rmdir(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<()> {
        self.vfs.remove_common(self.cred, at, path.as_ref(), true)
    }

    /// `renameat2(2)`: move `old_path` to `new_path` (`RENAME_NOREPLACE`
    /// and `RENAME_EXCHANGE` in `flags`).
    pub fn rename(
        &self,
        old_at: At<'_>,
        old_path: impl AsRef<[u8]>,
        new_at: At<'_>,
        new_path: impl AsRef<[u8]>,
        flags: RenameFlags,
    ) -> Result<()> {
        self.vfs.rename_as(
            self.cred,
            old_at,
            old_path.as_ref(),
            new_at,
            new_path.as_ref(),
            flags,
        )
    }

    /// chmod, chown, truncate, utimens by path (see
    /// [`AsCred::setattr_dentry`] for the rules).
    pub fn setattr(&self, at: At<'_>, path: impl AsRef<[u8]>, set: &SetAttr) -> Result<Attr> {
        self.vfs.setattr_as(self.cred, at, path.as_ref(), set)
    }

    /// Read a directory (read permission on it is checked first).
    pub fn readdir(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        offset: u64,
        emit: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        self.vfs
            .readdir_as(self.cred, at, path.as_ref(), offset, emit)
    }

    /// Open a dentry the caller holds (Linux's `may_open`: the type checks,
    /// then read/write permission; `O_TRUNC` truncates). EXDEV for another
    /// `Vfs`'s dentry.
    pub fn open_dentry(&self, d: &DentryRef<'v>, flags: i32) -> Result<OpenFile<'v>> {
        self.vfs.open_dentry_as(self.cred, d, flags)
    }

    /// Make `new_path` another name for the inode of `old`, a dentry the
    /// caller holds (FUSE LINK names the inode, not a path; `old` may have
    /// been renamed or unlinked since, as with `linkat(fd, "",
    /// AT_EMPTY_PATH)`: the backend refuses an inode with no links left).
    /// With Linux's `fs.protected_hardlinks`: only the owner, CAP_FOWNER,
    /// or a caller who may read and write a regular file that is not
    /// set-user-ID (nor set-group-ID and group-executable) may link to it
    /// (EPERM).
    pub fn link_dentry(
        &self,
        old: &DentryRef<'_>,
        new_at: At<'_>,
        new_path: impl AsRef<[u8]>,
    ) -> Result<DentryRef<'v>> {
        self.vfs
            .link_dentry_as(self.cred, old, new_at, new_path.as_ref())
    }

    /// Change the attributes of a dentry the caller holds, with
    /// `setattr_prepare`'s rules: a size change needs write permission
    /// (EACCES) unless made through a descriptor open for writing
    /// (`via_writable_fd`); chown needs CAP_CHOWN, chgrp ownership and
    /// membership of the new group or CAP_CHOWN (EPERM); chmod ownership or
    /// CAP_FOWNER (EPERM), and S_ISGID is dropped for a caller outside the
    /// file's group without CAP_FSETID; explicit times need ownership
    /// (EPERM), times set to now ownership or write permission (EACCES).
    pub fn setattr_dentry(
        &self,
        d: &DentryRef<'_>,
        set: &SetAttr,
        via_writable_fd: bool,
    ) -> Result<Attr> {
        self.vfs
            .setattr_dentry_as(self.cred, d, set, via_writable_fd)
    }
}
