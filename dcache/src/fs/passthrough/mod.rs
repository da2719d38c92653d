//! passthrough: serve a host directory, as virtiofsd and libfuse's
//! passthrough_ll do, through held directory file descriptors.
//!
//! # Confinement
//! Every inode the backend has handed out holds an `O_PATH | O_NOFOLLOW`
//! descriptor of the host object. A lookup is `fstatat(parent_fd, name,
//! AT_SYMLINK_NOFOLLOW)` and, for a host inode not held yet, `openat(parent_fd,
//! name, O_PATH | O_NOFOLLOW)` plus an fstat of the new fd. Every other call
//! names its object by a held fd (`AT_EMPTY_PATH`, or the fd's
//! `/proc/self/fd/N` link for the calls that refuse O_PATH fds) or by a held
//! directory fd and one component. No path is ever joined from names; names
//! are single checked components (`..`, `.`, `/`, NUL and empty names are
//! EINVAL, over 255 bytes ENAMETOOLONG); a final symlink is never followed: a
//! symlink pointing out of the tree is reported as a link and never traversed
//! here (the Vfs resolves links itself by reading them). Only the root path
//! given to [`Passthrough::new`] is resolved as a path, once.
//!
//! # Inode numbers and `forget`
//! Host `(st_dev, st_ino)` maps to our number (the root is 1, the rest count
//! up), so hard links share one number. An entry lives until `forget`. The
//! contract relied on: the Vfs calls `forget(ino)` once, when its last cached
//! dentry for `ino` is freed, and `forget` drops *all* references (the
//! per-inode lookup count is kept only as a statistic). Forgetting an unknown
//! number or the root does nothing; a later call on a forgotten number gets
//! ESTALE. The Vfs must not let a lookup that returned `ino` before a
//! `forget(ino)` attach its result after it (FUSE avoids this with counted
//! forgets); if it does, the stale number answers ESTALE and revalidation
//! reports its entries Invalid, so the name is looked up afresh.
//!
//! # Revalidation
//! `dir_cookie` is the coarse monotonic clock (cookie 0: no time recorded,
//! always rechecked). An entry younger than its TTL is Valid with no syscall,
//! lock or shared write (fine in rcu-walk). An older one needs one
//! `fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW)`: rcu-walk gets NeedBlocking;
//! otherwise a negative entry stays Valid only while the name is still
//! missing, a positive one only while the name still leads to the same host
//! inode with the ctime and mtime last reported for it. The cookie is not
//! refreshed by a successful check, so until the Vfs looks the name up again
//! (or stores a fresh `dir_cookie` on Valid) each use past the TTL costs that
//! one syscall. `getattr` always stats the held fd.
//!
//! # readdir
//! Host cookies (`d_off`), offset past the trait's `.` = 1 and `..` = 2; see
//! the `readdir` module for the scheme and for the inode numbers reported.
//!
//! # Extended attributes
//! Read and changed on the held object through its `/proc/self/fd/N` link
//! with the following `*xattr` calls, symlinks and special files included
//! (see the `xattr` module for why).
//!
//! # Ownership and modes
//! New objects are created with the daemon's credentials; when it runs as root
//! they are then given to the caller's uid (and gid, unless the parent is
//! set-group-ID, whose gid new entries inherit). A non-root daemon keeps what
//! it creates, as libfuse's passthrough does. Permission bits that the
//! daemon's umask removed from the requested ones are restored, since the
//! caller already applied its own umask. Access checks are the host's, made
//! with the daemon's credentials.
//!
//! The open that follows a create (FUSE's CREATE; `open(O_CREAT)` through
//! the Vfs) is the creator's: Linux gives it the access it asked for
//! whatever the new mode (git writes its objects through a 0444 file made
//! so). A root daemon reopens the file anyway (CAP_DAC_OVERRIDE); a
//! non-root one creates a file its own mode leaves it no read or write on
//! with `open(O_CREAT | O_EXCL | O_RDWR)` and keeps that descriptor for the
//! next open of the file, which the host would refuse (a few at most: a
//! create the Vfs makes without an open leaves its descriptor until later
//! ones push it out).

mod anchor;
mod fileops;
mod handles;
mod inodes;
mod readdir;
mod sys;
mod xattr;

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use self::handles::HandleTable;
use self::inodes::{Inode, InodeTable};
use self::sys::CName;
use crate::errno::{Errno, Result};
use crate::fs::{
    Attr, Ctx, DirEntry, FileSystem, FileType, Ino, RenameFlags, SetAttr, StatFs, Validity,
};
use crate::sync::Arc;

pub use self::inodes::ROOT_INO;

/// [`PassthroughOptions::max_fds`] by default.
pub const DEFAULT_MAX_FDS: usize = 256;

/// Tuning for [`Passthrough`]. More options may come: build one from
/// `PassthroughOptions::default()` and set the fields you need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassthroughOptions {
    /// How long a cached name (positive or negative) is trusted without
    /// asking the host.
    pub entry_ttl: Duration,
    /// How long a positive entry's attributes (ctime/mtime) are trusted; a
    /// positive entry is rechecked after the shorter of the two TTLs.
    pub attr_ttl: Duration,
    /// Raise the soft open-files limit to the hard one at construction
    /// (inodes that cannot be anchored by a file handle hold a descriptor).
    pub raise_fd_limit: bool,
    /// Anchor inodes by file handles where the host allows it (the daemon
    /// has `CAP_DAC_READ_SEARCH` and the filesystem exports handles), so
    /// that cached inodes hold no descriptor.
    pub file_handles: bool,
    /// The most descriptors kept open for handle-anchored inodes (a CLOCK
    /// cache; open files come on top).
    pub max_fds: usize,
}

impl Default for PassthroughOptions {
    fn default() -> Self {
        PassthroughOptions {
            entry_ttl: Duration::from_secs(1),
            attr_ttl: Duration::from_secs(1),
            raise_fd_limit: true,
            file_handles: true,
            max_fds: DEFAULT_MAX_FDS,
        }
    }
}

/// The descriptors a [`Passthrough`] holds ([`Passthrough::fd_stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FdStats {
    /// Inodes holding their descriptor for life (the root, and every inode
    /// when file handles are not used).
    pub held: usize,
    /// Descriptors opened from file handles, open now.
    pub cached: usize,
    /// The most of those kept open ([`PassthroughOptions::max_fds`]).
    pub cache_capacity: usize,
    /// Open files (one descriptor each).
    pub open_files: usize,
    /// Whether inodes are anchored by file handles.
    pub file_handles: bool,
}

/// A backend serving a host directory. See the module docs.
pub struct Passthrough {
    inodes: InodeTable,
    handles: HandleTable,
    /// Age (ns) past which a positive / negative entry is rechecked.
    positive_ttl_ns: u64,
    negative_ttl_ns: u64,
    /// Whether new objects can be given to the caller (see module docs).
    daemon_is_root: bool,
    /// Files just created by a non-root daemon with modes that deny it
    /// access, with the descriptor their create opened (module docs).
    created: Mutex<Vec<Created>>,
    opts: PassthroughOptions,
    /// File locks among this process's clients (the host's own processes
    /// locking the source directly are not seen).
    locks: crate::fs::lock::LocalLocks,
}

/// A file created with [`sys::create_open`], its inode and descriptor.
struct Created {
    ino: Ino,
    key: sys::HostKey,
    fd: OwnedFd,
}

/// How many [`Created`] descriptors are kept at most.
const CREATED_KEPT: usize = 16;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Passthrough {
    /// Serve `dir` with the default options (1 s TTLs).
    pub fn new(dir: &Path) -> Result<Passthrough> {
        Self::with_options(dir, PassthroughOptions::default())
    }

    /// Serve `dir` with `opts`.
    pub fn with_options(dir: &Path, opts: PassthroughOptions) -> Result<Passthrough> {
        let path = CString::new(dir.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
        sys::proc_fd_available()?;
        if opts.raise_fd_limit {
            sys::raise_nofile_limit();
        }
        let root = sys::open_root(&path)?;
        let st = sys::stat_fd(root.as_fd())?;
        Ok(Passthrough {
            inodes: InodeTable::new(root, &st, opts.file_handles, opts.max_fds)?,
            handles: HandleTable::new(),
            positive_ttl_ns: nanos(opts.entry_ttl.min(opts.attr_ttl)),
            negative_ttl_ns: nanos(opts.entry_ttl),
            daemon_is_root: Ctx::current().uid == 0,
            created: Mutex::new(Vec::new()),
            opts,
            locks: Default::default(),
        })
    }

    /// The options it was built with.
    pub fn options(&self) -> PassthroughOptions {
        self.opts
    }

    /// How many inodes are held, the root included.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// The descriptors this backend holds now.
    pub fn fd_stats(&self) -> FdStats {
        let cache = self.inodes.fd_cache();
        FdStats {
            held: self.inodes.held_fds(),
            cached: cache.open_count(),
            cache_capacity: cache.capacity(),
            open_files: self.handles.len(),
            file_handles: cache.uses_handles(),
        }
    }

    /// How many file handles are open.
    pub fn handle_count(&self) -> usize {
        self.handles.len()
    }

    /// How many replies handed `ino` out (None: not held).
    pub fn lookup_count(&self, ino: Ino) -> Option<u64> {
        self.inodes.lookup_count(ino)
    }

    /// Convert a stat of `inode` to the `Attr` handed out, remembering its
    /// times for revalidation.
    fn attr(&self, ino: Ino, inode: &Inode, st: &libc::stat) -> Result<Attr> {
        let attr = sys::to_attr(ino, st)?;
        inode.record_times(st);
        Ok(attr)
    }

    /// The descriptor `create` kept for `ino` (the same host inode), if
    /// any; taken, so that only the open right after the create gets it.
    fn take_created(&self, ino: Ino, inode: &Inode) -> Option<OwnedFd> {
        let mut kept = self.created.lock().unwrap_or_else(|e| e.into_inner());
        let i = kept.iter().position(|c| c.ino == ino)?;
        let c = kept.remove(i);
        (c.key == inode.key).then_some(c.fd)
    }

    fn stat_attr(&self, ino: Ino, inode: &Inode) -> Result<Attr> {
        let st = sys::stat_fd(self.inodes.fd(inode)?.as_fd())?;
        self.attr(ino, inode, &st)
    }

    /// Open `dir/name` as a held inode (one lookup counted).
    fn lookup_name(&self, dir: &Inode, name: &CName) -> Result<Attr> {
        let dfd = self.inodes.fd(dir)?;
        // Where inodes hold their descriptor, a name whose host inode is
        // already held needs no new fd: one fstatat instead of openat +
        // fstat + close (the held fd pins the host inode, so a matching
        // (dev, ino) is that very object). A handle-anchored entry is only
        // trusted after its handle is compared (`register`), which needs
        // the openat anyway, so there the probe would be a wasted call.
        if !self.inodes.fd_cache().uses_handles() {
            let st = sys::stat_at(dfd.as_fd(), name)?;
            if let Some((ino, inode)) = self.inodes.hit(sys::host_key(&st)) {
                return self.attr(ino, &inode, &st);
            }
        }
        let fd = self
            .inodes
            .retry_fds(|| sys::open_path(dfd.as_fd(), name))?;
        let st = sys::stat_fd(fd.as_fd())?;
        let (ino, inode) = self.inodes.register(fd, &st)?;
        self.attr(ino, &inode, &st)
    }

    /// After `dir/name` was created: hold it, give it to the caller, restore
    /// requested permission bits the daemon's umask removed. If that fails
    /// once the new object is held, the name is removed again so that a
    /// failed call leaves no trace (`rmflag`: how to remove it).
    fn finish_create(
        &self,
        dir: &Inode,
        name: &CName,
        perm: Option<u16>,
        ctx: Ctx,
        rmflag: i32,
    ) -> Result<Attr> {
        let fd = self
            .inodes
            .retry_fds(|| sys::open_path(self.inodes.fd(dir)?.as_fd(), name))?;
        let adjust = || -> Result<libc::stat> {
            let bfd = fd.as_fd();
            let mut st = sys::stat_fd(bfd)?;
            if self.daemon_is_root && (st.st_uid != ctx.uid || st.st_gid != ctx.gid) {
                let parent_sgid = st.st_gid != ctx.gid
                    && sys::stat_fd(self.inodes.fd(dir)?.as_fd())?.st_mode & libc::S_ISGID != 0;
                let gid = if parent_sgid { u32::MAX } else { ctx.gid };
                let special = st.st_mode & 0o7000;
                sys::chown_fd(bfd, ctx.uid, gid)?;
                st = sys::stat_fd(bfd)?;
                // chown of a regular file clears S_ISUID/S_ISGID; the bits
                // the create gave belong to the new file: put them back.
                if special & !st.st_mode != 0 {
                    sys::chmod_fd(bfd, (st.st_mode & 0o7777) | special)?;
                    st = sys::stat_fd(bfd)?;
                }
            }
            if let Some(perm) = perm {
                let want = u32::from(perm) & 0o777;
                let have = st.st_mode & 0o7777;
                if want & !have != 0 {
                    sys::chmod_fd(bfd, have | want)?;
                    st = sys::stat_fd(bfd)?;
                }
            }
            Ok(st)
        };
        let st = match adjust() {
            Ok(st) => st,
            Err(e) => {
                if let Ok(dfd) = self.inodes.fd(dir) {
                    let _ = sys::unlink_at(dfd.as_fd(), name, rmflag);
                }
                return Err(e);
            }
        };
        let (ino, inode) = self.inodes.register(fd, &st)?;
        self.attr(ino, &inode, &st)
    }

    fn dir_and_name(&self, dir: Ino, name: &[u8]) -> Result<(Arc<Inode>, CName)> {
        let name = CName::new(name)?;
        Ok((self.inodes.get(dir)?, name))
    }

    fn revalidate_slow(&self, dir: Ino, name: &[u8], ino: Option<Ino>) -> Validity {
        let Ok((dir, name)) = self.dir_and_name(dir, name) else {
            return Validity::Invalid;
        };
        let found = self
            .inodes
            .fd(&dir)
            .and_then(|fd| sys::stat_at(fd.as_fd(), &name));
        let valid = match (ino, found) {
            (None, Err(Errno::ENOENT)) => true,
            (None, _) => false,
            (Some(ino), Ok(st)) => match self.inodes.get(ino) {
                Ok(inode) => inode.key == sys::host_key(&st) && inode.times_match(&st),
                Err(_) => false,
            },
            (Some(_), Err(_)) => false,
        };
        if valid {
            Validity::Valid
        } else {
            Validity::Invalid
        }
    }
}

impl FileSystem for Passthrough {
    fn root(&self) -> Ino {
        ROOT_INO
    }

    fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        let (dir, name) = self.dir_and_name(dir, name)?;
        match self.lookup_name(&dir, &name) {
            Ok(attr) => Ok(Some(attr)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        let inode = self.inodes.get(ino)?;
        self.stat_attr(ino, &inode)
    }

    fn setattr(&self, ino: Ino, set: &SetAttr, _ctx: Ctx) -> Result<Attr> {
        let inode = self.inodes.get(ino)?;
        // Refuse what cannot apply to a symlink before changing anything.
        if inode.kind == FileType::Symlink {
            if set.perm.is_some() {
                // Linux keeps no mode on symlinks (fchmodat2's NOFOLLOW answer).
                return Err(Errno::ENOTSUP);
            }
            if set.size.is_some() {
                return Err(Errno::EINVAL);
            }
        }
        // Order as one notify_change would leave things: ownership first (it
        // may clear set-ID bits an explicit mode then restores), the mode,
        // the size (which moves mtime), explicit times last.
        if set.uid.is_some() || set.gid.is_some() {
            sys::chown_fd(
                self.inodes.fd(&inode)?.as_fd(),
                set.uid.unwrap_or(u32::MAX),
                set.gid.unwrap_or(u32::MAX),
            )?;
        }
        if let Some(perm) = set.perm {
            sys::chmod_fd(self.inodes.fd(&inode)?.as_fd(), u32::from(perm) & 0o7777)?;
        }
        if let Some(size) = set.size {
            let wfd = self
                .inodes
                .retry_fds(|| sys::reopen(self.inodes.fd(&inode)?.as_fd(), libc::O_WRONLY))?;
            sys::ftruncate(wfd.as_fd(), size)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            sys::utimens_fd(self.inodes.fd(&inode)?.as_fd(), set.atime, set.mtime)?;
        }
        self.stat_attr(ino, &inode)
    }

    fn readdir(&self, dir: Ino, offset: u64, emit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let inode = self.inodes.get(dir)?;
        readdir::read_dir(&self.inodes, dir, &inode, offset, emit)
    }

    fn create(&self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        if self.daemon_is_root || perm & 0o600 == 0o600 {
            return self.mknod(dir, name, FileType::Regular, perm, 0, ctx);
        }
        // A mode that leaves the daemon (its owner) no read or write: the
        // open that follows could not reopen it; keep the creating one.
        let (dir, name) = self.dir_and_name(dir, name)?;
        let fd = sys::create_open(
            self.inodes.fd(&dir)?.as_fd(),
            &name,
            u32::from(perm) & 0o7777,
        )?;
        let key = sys::stat_fd(fd.as_fd()).map(|st| sys::host_key(&st));
        let attr = self.finish_create(&dir, &name, Some(perm), ctx, 0)?;
        let Ok(key) = key else {
            return Ok(attr);
        };
        let mut kept = self.created.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= CREATED_KEPT {
            kept.remove(0);
        }
        kept.push(Created {
            ino: attr.ino,
            key,
            fd,
        });
        Ok(attr)
    }

    fn mknod(
        &self,
        dir: Ino,
        name: &[u8],
        kind: FileType,
        perm: u16,
        rdev: u32,
        ctx: Ctx,
    ) -> Result<Attr> {
        let (dir, name) = self.dir_and_name(dir, name)?;
        let mode = kind.mode_bits() | (u32::from(perm) & 0o7777);
        // Directories and symlinks are the host's to refuse (EPERM/EINVAL),
        // as mknod(2) would.
        sys::mknod_at(
            self.inodes.fd(&dir)?.as_fd(),
            &name,
            mode,
            sys::decode_rdev(rdev),
        )?;
        self.finish_create(&dir, &name, Some(perm), ctx, 0)
    }

    fn mkdir(&self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        let (dir, name) = self.dir_and_name(dir, name)?;
        sys::mkdir_at(
            self.inodes.fd(&dir)?.as_fd(),
            &name,
            u32::from(perm) & 0o7777,
        )?;
        self.finish_create(&dir, &name, Some(perm), ctx, libc::AT_REMOVEDIR)
    }

    fn unlink(&self, dir: Ino, name: &[u8]) -> Result<()> {
        let (dir, name) = self.dir_and_name(dir, name)?;
        sys::unlink_at(self.inodes.fd(&dir)?.as_fd(), &name, 0)
    }

    fn rmdir(&self, dir: Ino, name: &[u8]) -> Result<()> {
        let (dir, name) = self.dir_and_name(dir, name)?;
        sys::unlink_at(self.inodes.fd(&dir)?.as_fd(), &name, libc::AT_REMOVEDIR)
    }

    fn rename(
        &self,
        olddir: Ino,
        oldname: &[u8],
        newdir: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let (olddir, oldname) = self.dir_and_name(olddir, oldname)?;
        let (newdir, newname) = self.dir_and_name(newdir, newname)?;
        let mut bits = 0;
        if flags.noreplace {
            bits |= libc::RENAME_NOREPLACE;
        }
        if flags.exchange {
            bits |= libc::RENAME_EXCHANGE;
        }
        sys::rename_at2(
            self.inodes.fd(&olddir)?.as_fd(),
            &oldname,
            self.inodes.fd(&newdir)?.as_fd(),
            &newname,
            bits,
        )
    }

    fn symlink(&self, dir: Ino, name: &[u8], target: &[u8], ctx: Ctx) -> Result<Attr> {
        let (dir, name) = self.dir_and_name(dir, name)?;
        let target = sys::c_path(target)?;
        sys::symlink_at(&target, self.inodes.fd(&dir)?.as_fd(), &name)?;
        self.finish_create(&dir, &name, None, ctx, 0)
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let inode = self.inodes.get(ino)?;
        if inode.kind != FileType::Symlink {
            // readlink(2)'s answer for a non-link; readlinkat on an empty
            // path would say ENOENT instead.
            return Err(Errno::EINVAL);
        }
        sys::readlink_fd(self.inodes.fd(&inode)?.as_fd())
    }

    fn link(&self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        let (newdir, newname) = self.dir_and_name(newdir, newname)?;
        let inode = self.inodes.get(ino)?;
        sys::link_fd(
            self.inodes.fd(&inode)?.as_fd(),
            self.inodes.fd(&newdir)?.as_fd(),
            &newname,
        )?;
        self.inodes.add_lookup(&inode);
        self.stat_attr(ino, &inode)
    }

    fn open(&self, ino: Ino, flags: i32) -> Result<u64> {
        let inode = self.inodes.get(ino)?;
        if inode.kind == FileType::Symlink {
            // What open(2) with O_NOFOLLOW gives; the Vfs follows links itself.
            return Err(Errno::ELOOP);
        }
        // The object exists already; O_NOFOLLOW would stop the magic link.
        let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_NOFOLLOW);
        let created = self.take_created(ino, &inode);
        let fd = match self
            .inodes
            .retry_fds(|| sys::reopen(self.inodes.fd(&inode)?.as_fd(), flags))
        {
            // The creator's open of a file whose mode denies the daemon.
            Err(Errno::EACCES) if created.is_some() => {
                let fd = created.ok_or(Errno::EACCES)?;
                sys::set_status_flags(fd.as_fd(), flags)?;
                fd
            }
            r => r?,
        };
        Ok(self.handles.insert(ino, fd))
    }

    fn read(&self, ino: Ino, fh: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let h = self.handles.get(ino, fh)?;
        sys::pread_full(h.fd(), offset, buf)
    }

    fn write(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        let h = self.handles.get(ino, fh)?;
        sys::pwrite_full(h.fd(), offset, data)
    }

    fn flush(&self, ino: Ino, fh: u64) -> Result<()> {
        let h = self.handles.get(ino, fh)?;
        if !h.flushes() {
            return Ok(());
        }
        sys::flush(h.fd())
    }

    fn flush_needed(&self, ino: Ino, fh: u64) -> bool {
        self.handles.get(ino, fh).map_or(true, |h| h.flushes())
    }

    fn fsync(&self, ino: Ino, fh: u64, datasync: bool) -> Result<()> {
        let h = self.handles.get(ino, fh)?;
        sys::fsync(h.fd(), datasync)
    }

    fn release(&self, ino: Ino, fh: u64) -> Result<()> {
        self.handles.remove(ino, fh)
    }

    fn has_host_files(&self) -> bool {
        true
    }

    fn backing_file(&self, ino: Ino, fh: u64) -> Option<std::os::fd::OwnedFd> {
        self.handles
            .get(ino, fh)
            .ok()?
            .fd()
            .try_clone_to_owned()
            .ok()
    }

    fn statfs(&self) -> Result<StatFs> {
        let root = self.inodes.get(ROOT_INO)?;
        let st = sys::statvfs_fd(self.inodes.fd(&root)?.as_fd())?;
        Ok(StatFs {
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            bsize: st.f_bsize as u32,
            namelen: st.f_namemax as u32,
            frsize: st.f_frsize as u32,
        })
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        self.inodes.forget(ino, nlookup);
    }

    // Extended attributes, on the held descriptor (see `xattr.rs`).

    fn getxattr(&self, ino: Ino, name: &[u8], value: &mut Vec<u8>) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        xattr::get(self.inodes.fd(&inode)?.as_fd(), name, value)
    }

    fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        xattr::set(self.inodes.fd(&inode)?.as_fd(), name, value, flags)
    }

    fn listxattr(&self, ino: Ino, list: &mut Vec<u8>) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        xattr::list(self.inodes.fd(&inode)?.as_fd(), list)
    }

    fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        xattr::remove(self.inodes.fd(&inode)?.as_fd(), name)
    }

    fn needs_revalidate(&self) -> bool {
        true
    }

    /// The time of the lookup to come; never 0, which marks an entry with
    /// no recorded time (the monotonic clock starts near 0 at boot, so 0
    /// would otherwise look recent).
    fn dir_cookie(&self, _dir: Ino) -> u64 {
        sys::monotonic_ns().max(1)
    }

    fn revalidate(
        &self,
        dir: Ino,
        name: &[u8],
        ino: Option<Ino>,
        cookie: u64,
        rcu: bool,
    ) -> Validity {
        let ttl = if ino.is_some() {
            self.positive_ttl_ns
        } else {
            self.negative_ttl_ns
        };
        // Cookie 0 never came from `dir_cookie` (see there): never fresh.
        if cookie != 0 && sys::monotonic_ns().saturating_sub(cookie) < ttl {
            return Validity::Valid;
        }
        if rcu {
            return Validity::NeedBlocking;
        }
        self.revalidate_slow(dir, name, ino)
    }

    // File operations beyond read and write: see `fileops.rs`.

    fn fallocate(&self, ino: Ino, fh: u64, mode: i32, offset: u64, len: u64) -> Result<()> {
        self.do_fallocate(ino, fh, mode, offset, len)
    }

    fn lseek(&self, ino: Ino, fh: u64, offset: u64, whence: i32) -> Result<u64> {
        self.do_lseek(ino, fh, offset, whence)
    }

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
        self.do_copy_file_range((ino_in, fh_in, off_in), (ino_out, fh_out, off_out), len)
    }

    fn tmpfile(&self, dir: Ino, perm: u16, flags: i32, ctx: Ctx) -> Result<(Attr, u64)> {
        self.do_tmpfile(dir, perm, flags, ctx)
    }

    // File locks: one in-process table, shared by every client of this
    // backend (`lock::LocalLocks`).

    crate::fs::lock::local_lock_methods!(locks);
}
