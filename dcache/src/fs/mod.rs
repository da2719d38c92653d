//! The backend contract: what a filesystem gives the dentry cache.
//!
//! A backend speaks in inode numbers, like FUSE's low-level protocol: the
//! dcache owns names, paths, the walk and reference counting; a backend owns
//! the truth about inodes and directory contents. Names passed in are single
//! components, already checked by the Vfs (non-empty, no `/`, no NUL, at most
//! `NAME_MAX` bytes, never `.` or `..`), so a backend needs no path parsing.
//!
//! Every method returns the POSIX errno a local filesystem would give.

pub(crate) mod fileops;
pub mod invalidate;
pub mod kernfs;
pub mod lock;
pub mod memfs;
pub mod passthrough;

pub use invalidate::{Invalidation, Invalidator};
pub use lock::{FileLock, LockOwner, LockRelease, UnlockWake};

use crate::errno::{Errno, Result};

/// An inode number as the backend knows it (FUSE node ids map onto these).
pub type Ino = u64;

/// Longest single name component, as Linux's NAME_MAX.
pub const NAME_MAX: usize = 255;
/// Longest path, as Linux's PATH_MAX (including the terminating NUL there,
/// so a path of 4096 bytes or more is ENAMETOOLONG).
pub const PATH_MAX: usize = 4096;

/// The type of an inode (the `S_IFMT` part of its mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    /// A regular file (`S_IFREG`).
    Regular,
    /// A directory (`S_IFDIR`).
    Directory,
    /// A symbolic link (`S_IFLNK`).
    Symlink,
    /// A character device (`S_IFCHR`).
    CharDevice,
    /// A block device (`S_IFBLK`).
    BlockDevice,
    /// A named pipe (`S_IFIFO`).
    Fifo,
    /// A Unix domain socket (`S_IFSOCK`).
    Socket,
}

impl FileType {
    /// The `S_IFMT` bits for this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Fifo => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// The type encoded in a full `st_mode`, if it is a known one.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::Regular,
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    /// The `d_type` value readdir reports (DT_REG, DT_DIR, ...).
    pub fn dtype(self) -> u8 {
        match self {
            FileType::Regular => libc::DT_REG,
            FileType::Directory => libc::DT_DIR,
            FileType::Symlink => libc::DT_LNK,
            FileType::CharDevice => libc::DT_CHR,
            FileType::BlockDevice => libc::DT_BLK,
            FileType::Fifo => libc::DT_FIFO,
            FileType::Socket => libc::DT_SOCK,
        }
    }
}

/// A point in time as `stat` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    /// Seconds since the Unix epoch.
    pub sec: i64,
    /// Nanoseconds within the second (`0..1_000_000_000`).
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time (the epoch if the clock is before it).
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

/// What `stat` returns. Plain data: the dcache keeps a copy per inode and
/// hands it out without calling the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number (`st_ino`).
    pub ino: Ino,
    /// Size in bytes (`st_size`).
    pub size: u64,
    /// Space used, in 512-byte blocks (`st_blocks`).
    pub blocks: u64,
    /// Last access (`st_atim`).
    pub atime: Timespec,
    /// Last data modification (`st_mtim`).
    pub mtime: Timespec,
    /// Last status change (`st_ctim`).
    pub ctime: Timespec,
    /// File type.
    pub kind: FileType,
    /// Permission bits only (`mode & 0o7777`); the type is in `kind`.
    pub perm: u16,
    /// Number of hard links (`st_nlink`).
    pub nlink: u32,
    /// Owner (`st_uid`).
    pub uid: u32,
    /// Group (`st_gid`).
    pub gid: u32,
    /// Device number of a character or block device (`st_rdev`).
    pub rdev: u32,
    /// Preferred I/O size (`st_blksize`).
    pub blksize: u32,
}

impl Attr {
    /// Attributes of a new inode `ino` of type `kind` with permission bits
    /// `perm`: owned by root, empty, one link (two for a directory), all
    /// times zero, 4096-byte blocks. Chain the `with_*` setters for the
    /// rest:
    ///
    /// ```
    /// use dcache::{Attr, FileType, Timespec};
    /// let a = Attr::new(7, FileType::Regular, 0o644)
    ///     .with_size(5)
    ///     .with_owner(1000, 1000)
    ///     .with_times(Timespec { sec: 1_700_000_000, nsec: 0 });
    /// assert_eq!(a.mode(), 0o100644);
    /// assert_eq!((a.nlink, a.blocks), (1, 1));
    /// ```
    pub fn new(ino: Ino, kind: FileType, perm: u16) -> Attr {
        Attr {
            ino,
            size: 0,
            blocks: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            kind,
            perm: perm & 0o7777,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        }
    }

    /// With `size` bytes (and the 512-byte blocks that hold them).
    pub fn with_size(mut self, size: u64) -> Attr {
        self.size = size;
        self.blocks = size.div_ceil(512);
        self
    }

    /// Owned by `uid` and `gid`.
    pub fn with_owner(mut self, uid: u32, gid: u32) -> Attr {
        self.uid = uid;
        self.gid = gid;
        self
    }

    /// With access, modification and change times all `t`.
    pub fn with_times(mut self, t: Timespec) -> Attr {
        self.atime = t;
        self.mtime = t;
        self.ctime = t;
        self
    }

    /// With `nlink` links.
    pub fn with_nlink(mut self, nlink: u32) -> Attr {
        self.nlink = nlink;
        self
    }

    /// The full `st_mode` (type bits and permission bits).
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm as u32
    }
}

/// Who is asking, for ownership of new inodes (and, in backends that check,
/// permission).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx {
    /// The caller's filesystem uid.
    pub uid: u32,
    /// The caller's filesystem gid.
    pub gid: u32,
}

impl Ctx {
    /// uid 0, gid 0.
    pub const ROOT: Ctx = Ctx { uid: 0, gid: 0 };

    /// The calling process's effective uid and gid.
    pub fn current() -> Ctx {
        // miri cannot call these foreign functions; its tests run as root.
        #[cfg(miri)]
        return Ctx::ROOT;
        #[cfg(not(miri))]
        // SAFETY: geteuid/getegid have no preconditions and cannot fail.
        unsafe {
            Ctx {
                uid: libc::geteuid(),
                gid: libc::getegid(),
            }
        }
    }
}

/// A time to set in `setattr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    /// The current time (`UTIME_NOW`).
    Now,
    /// This time.
    At(Timespec),
}

/// The attributes `setattr` changes; `None` leaves one alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (chmod).
    pub perm: Option<u16>,
    /// New owner (chown).
    pub uid: Option<u32>,
    /// New group (chown).
    pub gid: Option<u32>,
    /// New size (truncate).
    pub size: Option<u64>,
    /// New access time (utimensat).
    pub atime: Option<SetTime>,
    /// New modification time (utimensat).
    pub mtime: Option<SetTime>,
}

/// One directory entry as readdir produces it. `offset` is the cookie to pass
/// back to continue *after* this entry; it stays valid across concurrent
/// creates and unlinks in the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's inode number (`d_ino`).
    pub ino: Ino,
    /// The cookie that continues after this entry (`d_off`).
    pub offset: u64,
    /// The entry's file type (`d_type`).
    pub kind: FileType,
    /// The name (one component, no NUL).
    pub name: Vec<u8>,
}

impl DirEntry {
    /// Entry `name` for inode `ino` of type `kind`; `offset` is the cookie
    /// that continues after it.
    pub fn new(ino: Ino, offset: u64, kind: FileType, name: impl Into<Vec<u8>>) -> DirEntry {
        DirEntry {
            ino,
            offset,
            kind,
            name: name.into(),
        }
    }
}

/// `statfs` results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFs {
    /// Total data blocks, in `frsize` units (`f_blocks`).
    pub blocks: u64,
    /// Free blocks (`f_bfree`).
    pub bfree: u64,
    /// Free blocks available to unprivileged users (`f_bavail`).
    pub bavail: u64,
    /// Total inodes (`f_files`).
    pub files: u64,
    /// Free inodes (`f_ffree`).
    pub ffree: u64,
    /// Preferred block size (`f_bsize`).
    pub bsize: u32,
    /// Longest name component (`f_namelen`).
    pub namelen: u32,
    /// Fragment size, the unit of the block counts (`f_frsize`).
    pub frsize: u32,
}

/// Flags for `rename` (Linux renameat2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// RENAME_NOREPLACE: fail with EEXIST if the target exists.
    pub noreplace: bool,
    /// RENAME_EXCHANGE: atomically swap the two names (both must exist).
    pub exchange: bool,
}

impl RenameFlags {
    /// A plain `rename(2)`: replace the target if it exists.
    pub const NONE: RenameFlags = RenameFlags {
        noreplace: false,
        exchange: false,
    };

    /// From renameat2's `flags` word; EINVAL for unknown bits or both set.
    pub fn from_bits(flags: u32) -> Result<RenameFlags> {
        let noreplace = flags & libc::RENAME_NOREPLACE != 0;
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 || (noreplace && exchange)
        {
            return Err(Errno::EINVAL);
        }
        Ok(RenameFlags {
            noreplace,
            exchange,
        })
    }
}

/// What `revalidate` decided about a cached entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// The cached entry (positive or negative) is still the truth.
    Valid,
    /// It is stale: the dcache drops it and looks the name up again.
    Invalid,
    /// The backend cannot decide without blocking (Linux's -ECHILD in
    /// rcu-walk): the walk leaves rcu mode and asks again with `rcu = false`.
    NeedBlocking,
}

/// A filesystem the dentry cache can sit in front of.
///
/// Only `root`, `lookup` and `getattr` are required; the rest default to the
/// errno a read-only or feature-less filesystem gives.
pub trait FileSystem: Send + Sync + 'static {
    /// The root directory's inode number.
    fn root(&self) -> Ino;

    /// Look `name` up in directory `dir`. `Ok(None)` is a clean miss (the
    /// dcache caches it as a negative dentry); `Err(ENOTDIR)` when `dir` is not
    /// a directory.
    fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>>;

    /// The current attributes of `ino`.
    fn getattr(&self, ino: Ino) -> Result<Attr>;

    /// Change the attributes named in `set` (chmod, chown, truncate,
    /// utimens) and return the new ones; permission checks are the Vfs's.
    fn setattr(&self, _ino: Ino, _set: &SetAttr, _ctx: Ctx) -> Result<Attr> {
        Err(Errno::EROFS)
    }

    /// Call `emit` for entries of `dir` after cookie `offset` (0 = from the
    /// start; `.` and `..` are included with offsets 1 and 2) until it returns
    /// false or the directory ends.
    fn readdir(
        &self,
        _dir: Ino,
        _offset: u64,
        _emit: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        Err(Errno::ENOTDIR)
    }

    /// Create a regular file (`mknod` of S_IFREG, `creat`). EEXIST if present.
    fn create(&self, _dir: Ino, _name: &[u8], _perm: u16, _ctx: Ctx) -> Result<Attr> {
        Err(Errno::EROFS)
    }

    /// Create a special file (fifo, socket, device). Backends that only hold
    /// regular files answer EPERM/EROFS.
    fn mknod(
        &self,
        _dir: Ino,
        _name: &[u8],
        _kind: FileType,
        _perm: u16,
        _rdev: u32,
        _ctx: Ctx,
    ) -> Result<Attr> {
        Err(Errno::EPERM)
    }

    /// Create a directory. EEXIST if the name is present.
    fn mkdir(&self, _dir: Ino, _name: &[u8], _perm: u16, _ctx: Ctx) -> Result<Attr> {
        Err(Errno::EROFS)
    }

    /// Remove a non-directory name (EISDIR for a directory).
    fn unlink(&self, _dir: Ino, _name: &[u8]) -> Result<()> {
        Err(Errno::EROFS)
    }

    /// Remove an empty directory (ENOTEMPTY otherwise, ENOTDIR for a
    /// non-directory).
    fn rmdir(&self, _dir: Ino, _name: &[u8]) -> Result<()> {
        Err(Errno::EROFS)
    }

    /// Move `olddir/oldname` to `newdir/newname` with renameat2's `flags`
    /// semantics.
    fn rename(
        &self,
        _olddir: Ino,
        _oldname: &[u8],
        _newdir: Ino,
        _newname: &[u8],
        _flags: RenameFlags,
    ) -> Result<()> {
        Err(Errno::EROFS)
    }

    /// Create a symlink `dir/name` pointing to `target`.
    fn symlink(&self, _dir: Ino, _name: &[u8], _target: &[u8], _ctx: Ctx) -> Result<Attr> {
        Err(Errno::EROFS)
    }

    /// A symlink's target (EINVAL for anything else).
    fn readlink(&self, _ino: Ino) -> Result<Vec<u8>> {
        Err(Errno::EINVAL)
    }

    /// Make `newdir/newname` another name for `ino`; returns its new attrs.
    fn link(&self, _ino: Ino, _newdir: Ino, _newname: &[u8]) -> Result<Attr> {
        Err(Errno::EROFS)
    }

    /// Open `ino` with `open(2)` flags; returns a backend file handle.
    fn open(&self, _ino: Ino, _flags: i32) -> Result<u64> {
        Ok(0)
    }

    /// Read into `buf` at `offset` through handle `fh`; returns the bytes
    /// read (0 at end of file).
    fn read(&self, _ino: Ino, _fh: u64, _offset: u64, _buf: &mut [u8]) -> Result<usize> {
        Err(Errno::EINVAL)
    }

    /// Write `data` at `offset` through handle `fh`; returns the bytes
    /// written.
    fn write(&self, _ino: Ino, _fh: u64, _offset: u64, _data: &[u8]) -> Result<usize> {
        Err(Errno::EBADF)
    }

    /// An `O_APPEND` write: `data` at the end of the file as the backend
    /// knows it. `offset` is where the caller believes the end is (a
    /// kernel's cached size, which another host's appends may have made
    /// stale): a backend shared across hosts ignores it. The default
    /// writes at `offset`, which is the end for a backend only this
    /// process changes.
    fn write_append(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.write(ino, fh, offset, data)
    }

    /// A descriptor of handle `fh` is being closed (`f_op->flush`).
    fn flush(&self, _ino: Ino, _fh: u64) -> Result<()> {
        Ok(())
    }

    /// Whether `close` of a descriptor calls [`flush`](Self::flush). Linux's
    /// `filp_close` calls `f_op->flush` only where a filesystem has one
    /// (NFS, FUSE); tmpfs, ext4 and sysfs have none, so their `close` reads
    /// nothing of the filesystem. `true` (the default) keeps the call; an
    /// explicit `flush` (FUSE_FLUSH from the frontend) is made either way.
    fn flush_on_close(&self) -> bool {
        true
    }

    /// Whether closing a descriptor of the open file `fh` (of `ino`) must
    /// reach [`flush`](Self::flush): [`flush_on_close`](Self::flush_on_close)
    /// unless the backend knows that this file's flush does nothing (a host
    /// file on a filesystem whose close reads nothing of it). A FUSE
    /// frontend tells the kernel so at open (FOPEN_NOFLUSH), which then
    /// makes no FLUSH round trip at the file's closes.
    fn flush_needed(&self, _ino: Ino, _fh: u64) -> bool {
        self.flush_on_close()
    }

    /// Whether reading and writing need the file opened for them: `true`
    /// (the default) where a handle carries state (a host descriptor, a
    /// generated snapshot, a record of the open); `false` where any handle
    /// of the inode serves and an open only keeps an unlinked inode alive
    /// (memfs), so a frontend may let the kernel open files without asking
    /// and do their I/O through one handle of its own per inode.
    fn needs_open(&self) -> bool {
        true
    }

    /// `fsync(2)`, or `fdatasync(2)` when `datasync`.
    fn fsync(&self, _ino: Ino, _fh: u64, _datasync: bool) -> Result<()> {
        Ok(())
    }

    /// The last reference to the open file of handle `fh` is gone.
    fn release(&self, _ino: Ino, _fh: u64) -> Result<()> {
        Ok(())
    }

    /// One line of the backend's own state for a person (a mount prints
    /// it after its usage line at SIGUSR1): a shared volume's failures by
    /// cause, say. `None`: nothing to add.
    fn status(&self) -> Option<String> {
        None
    }

    /// `statfs(2)`; the default reports a 4096-byte block size, `NAME_MAX`
    /// and zero counts.
    fn statfs(&self) -> Result<StatFs> {
        Ok(StatFs {
            namelen: NAME_MAX as u32,
            bsize: 4096,
            frsize: 4096,
            ..StatFs::default()
        })
    }

    /// The dcache dropped its inode for `ino` (its last cached dentry was
    /// freed). `nlookup` is how many successful replies to lookup, create,
    /// mknod, mkdir, symlink and link handed `ino` to that inode object —
    /// FUSE's counted forget, so a lookup that races the forget keeps its
    /// own count. Backends that keep per-inode resources (open fds) release
    /// them when their count reaches zero.
    fn forget(&self, _ino: Ino, _nlookup: u64) {}

    /// Called once, when a `Vfs` is built over this backend, with the
    /// handle through which the backend reports changes made underneath
    /// it (see [`invalidate`]). A backend that sees such changes keeps it;
    /// the default drops it.
    fn attach(&self, _inval: Invalidator) {}

    /// Whether cached entries of this backend can go stale underneath the
    /// dcache, so `revalidate` must be asked on every use. Read once when the
    /// Vfs is built; `false` (the default) means no call ever happens.
    fn needs_revalidate(&self) -> bool {
        false
    }

    /// A token recorded before a lookup in `dir` (kernfs: the directory's
    /// revision; passthrough: a timestamp). The dentry remembers it and hands
    /// it back to `revalidate`.
    fn dir_cookie(&self, _dir: Ino) -> u64 {
        0
    }

    /// Is the cached entry `dir/name` -> `ino` (`None`: a negative entry),
    /// recorded with `cookie`, still true? With `rcu = true` the caller is in
    /// a lockless walk: the backend must not block or allocate, and answers
    /// `NeedBlocking` when it cannot decide that way.
    fn revalidate(
        &self,
        _dir: Ino,
        _name: &[u8],
        _ino: Option<Ino>,
        _cookie: u64,
        _rcu: bool,
    ) -> Validity {
        Validity::Valid
    }

    // Extended attributes. The Vfs has checked the name (1 to 255 bytes, a
    // namespace of `crate::xattr::resolve`), the flags, the value's size
    // (at most `XATTR_SIZE_MAX`) and the caller's permission; a backend
    // answers with the stored truth and Linux's errnos. Without support,
    // each answers EOPNOTSUPP.

    /// The value of attribute `name` of `ino`, written into `value`
    /// (cleared first); ENODATA if it has none. Size probes and a caller's
    /// short buffer (ERANGE) are the Vfs's and the frontend's
    /// ([`crate::xattr::fit`]).
    fn getxattr(&self, _ino: Ino, _name: &[u8], _value: &mut Vec<u8>) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }

    /// Set attribute `name` of `ino` to `value`. `flags`: `XATTR_CREATE`
    /// (EEXIST if it exists), `XATTR_REPLACE` (ENODATA if it does not), or
    /// 0. Changes the inode's ctime.
    fn setxattr(&self, _ino: Ino, _name: &[u8], _value: &[u8], _flags: i32) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }

    /// The names of `ino`'s attributes, each followed by a NUL, written
    /// into `list` (cleared first). All of them: the Vfs hides what the
    /// caller may not see.
    fn listxattr(&self, _ino: Ino, _list: &mut Vec<u8>) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }

    /// Remove attribute `name` of `ino` (ENODATA if it has none). Changes
    /// the inode's ctime.
    fn removexattr(&self, _ino: Ino, _name: &[u8]) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }

    // File operations on an open handle beyond read and write: fallocate,
    // SEEK_DATA/SEEK_HOLE, copy_file_range, and O_TMPFILE. The Vfs
    // ([`OpenFile`](crate::OpenFile)) makes the checks Linux's VFS makes
    // before it calls a filesystem (see each method).

    /// `fallocate(2)` on handle `fh`: `mode` is the `FALLOC_FL_*` bits.
    /// The Vfs has checked what `vfs_fallocate` checks (`len > 0`, the
    /// mode combinations, a handle open for writing, a regular file, the
    /// end within the largest file size); a backend answers EOPNOTSUPP
    /// for a mode it lacks, as the default does for every mode.
    fn fallocate(&self, _ino: Ino, _fh: u64, _mode: i32, _offset: u64, _len: u64) -> Result<()> {
        Err(Errno::ENOTSUP)
    }

    /// `lseek(2)` with `SEEK_DATA` or `SEEK_HOLE` (`whence`) from `offset`
    /// on handle `fh`: where the next data or hole starts (the end of the
    /// file counts as a hole); ENXIO at or past the end of the file, and
    /// for `SEEK_DATA` when only holes follow. The default treats the
    /// whole file as data, as Linux's `generic_file_llseek` does.
    fn lseek(&self, ino: Ino, _fh: u64, offset: u64, whence: i32) -> Result<u64> {
        fileops::seek_all_data(self.getattr(ino)?.size, offset, whence)
    }

    /// `copy_file_range(2)`: copy up to `len` bytes from handle `fh_in` at
    /// `off_in` to handle `fh_out` at `off_out`; returns the bytes copied
    /// (fewer at the source's end, 0 at or past it). The Vfs has checked
    /// the handles' modes, the file types, overlap within one file and
    /// the size limits. The default reads and writes through the two
    /// handles in pieces of 128 KiB.
    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        ino_in: Ino,
        fh_in: u64,
        off_in: u64,
        ino_out: Ino,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> Result<usize> {
        let (src, dst) = ((ino_in, fh_in, off_in), (ino_out, fh_out, off_out));
        fileops::copy_by_read_write(self, src, dst, len)
    }

    /// Whether [`backing_file`](Self::backing_file) gives host files (read
    /// once when a frontend starts); `false`, the default, where it never
    /// does.
    fn has_host_files(&self) -> bool {
        false
    }

    /// The host file behind open file `fh` of `ino`, for a frontend that
    /// lets the kernel do its I/O directly (FUSE passthrough: the kernel
    /// opens the same file again with each open's flags, as the daemon's
    /// credential). A new descriptor the caller owns; `None` (the
    /// default) where there is no host file.
    fn backing_file(&self, _ino: Ino, _fh: u64) -> Option<std::os::fd::OwnedFd> {
        None
    }

    /// `open(2)` with `O_TMPFILE` in directory `dir`: a regular file with
    /// no name (link count 0), owned by `ctx`, opened with `flags` (an
    /// access mode that includes writing). Returns its attributes and the
    /// handle. Unless `flags` holds `O_EXCL`, [`link`](Self::link) may
    /// give it a name later; it is freed with its last handle otherwise.
    /// The default: EOPNOTSUPP, what Linux answers for a filesystem
    /// without `->tmpfile`.
    fn tmpfile(&self, _dir: Ino, _perm: u16, _flags: i32, _ctx: Ctx) -> Result<(Attr, u64)> {
        Err(Errno::ENOTSUP)
    }

    // File locks ([`lock`]): POSIX record locks and `flock`, kept by the
    // backend for every client of it (a shared backend: for every host).
    // Without them (the default) a frontend leaves locking to the host's
    // kernel, which then locks for its own processes only.

    /// Who sees this backend's locks: [`LockScope::None`] (the default:
    /// it keeps none), [`LockScope::Local`] (this process's clients: a
    /// local backend, where the host kernel's own locking is as good) or
    /// [`LockScope::Shared`] (every client on every host, which only the
    /// backend can arbitrate). Read once when a frontend starts.
    fn lock_scope(&self) -> LockScope {
        LockScope::None
    }

    /// F_GETLK: the lock of another owner that `lock` would conflict with
    /// on `ino` (its type, range and pid), or `None` where it could be
    /// taken now. `owner`'s own locks never conflict.
    fn getlk(&self, _ino: Ino, _owner: &LockOwner, _lock: &FileLock) -> Result<Option<FileLock>> {
        Err(Errno::ENOSYS)
    }

    /// F_SETLK: take, change or drop (`lock.kind == None`) `owner`'s lock
    /// on `ino`, with [`lock`]'s semantics. Never blocks: EAGAIN when
    /// another owner's lock conflicts. A frontend makes F_SETLKW of it by
    /// asking [`wake_on_unlock`](Self::wake_on_unlock) first and trying
    /// again when woken.
    fn setlk(&self, _ino: Ino, _owner: &LockOwner, _lock: &FileLock) -> Result<()> {
        Err(Errno::ENOSYS)
    }

    /// Drop at once the locks on `ino` that `what` names (a descriptor or
    /// the open file closed: FUSE's FLUSH and RELEASE).
    fn release_locks(&self, _ino: Ino, _what: LockRelease) -> Result<()> {
        Ok(())
    }

    /// Call `wake` once, after a lock on `ino` is next released or
    /// narrowed by anyone (any client, any host; a holder that went away
    /// included); it may also come early or for nothing, and the waiter
    /// then tries again. `wake` runs on a backend thread and must not
    /// block. The default calls it at once.
    fn wake_on_unlock(&self, _ino: Ino, wake: UnlockWake) {
        wake()
    }
}

/// Who sees a backend's file locks ([`FileSystem::lock_scope`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockScope {
    /// It keeps none: the frontend's host locks locally.
    None,
    /// Every client of this process (memfs, passthrough).
    Local,
    /// Every client of the backend, on every host (etcd).
    Shared,
}
