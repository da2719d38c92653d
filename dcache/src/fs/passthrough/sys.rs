//! Safe wrappers over the `*at()` system calls the passthrough backend makes.
//!
//! Every call here names its object either by a held fd alone (`AT_EMPTY_PATH`
//! or the fd's `/proc/self/fd/N` magic link) or by a held directory fd plus one
//! checked component ([`CName`]); no path is ever assembled from user names.
//! Each wrapper returns the host's errno unchanged.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::errno::{Errno, Result};
use crate::fs::{Attr, FileType, Ino, Timespec, NAME_MAX, PATH_MAX};

const EMPTY: &CStr = c"";

/// One name component, checked and NUL-terminated on the stack, so that a
/// lookup allocates nothing. The checks repeat the Vfs's so that no name can
/// leave the directory it is resolved in even if a caller skips them: an
/// empty name would make `AT_EMPTY_PATH` calls act on the directory itself,
/// and `..` or a `/` would climb or descend.
pub(crate) struct CName {
    buf: [u8; NAME_MAX + 1],
}

impl CName {
    pub(crate) fn new(name: &[u8]) -> Result<CName> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
            return Err(Errno::EINVAL);
        }
        if name.contains(&0) {
            return Err(Errno::EINVAL);
        }
        let mut buf = [0u8; NAME_MAX + 1];
        buf[..name.len()].copy_from_slice(name);
        Ok(CName { buf })
    }

    fn as_ptr(&self) -> *const libc::c_char {
        self.buf.as_ptr().cast()
    }
}

/// `/proc/self/fd/N` for one of our fds, NUL-terminated on the stack.
/// Resolved at each use rather than through a held `/proc/self/fd` directory
/// fd, so a forked child never reaches its parent's descriptors.
pub(super) struct ProcFdPath {
    buf: [u8; 32],
}

impl ProcFdPath {
    pub(super) fn new(fd: BorrowedFd<'_>) -> ProcFdPath {
        use std::io::Write;
        let mut buf = [0u8; 32];
        let mut w = &mut buf[..];
        // "/proc/self/fd/" is 14 bytes and an i32 at most 11: it always fits,
        // leaving the terminating NUL in place.
        let _ = write!(w, "/proc/self/fd/{}", fd.as_raw_fd());
        ProcFdPath { buf }
    }

    pub(super) fn as_ptr(&self) -> *const libc::c_char {
        self.buf.as_ptr().cast()
    }
}

/// A symlink target or other path argument: no NUL inside, shorter than
/// PATH_MAX (as the kernel's getname requires).
pub(crate) fn c_path(bytes: &[u8]) -> Result<std::ffi::CString> {
    if bytes.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    std::ffi::CString::new(bytes).map_err(|_| Errno::EINVAL)
}

/// Map a `-1` return to the thread's errno.
fn check(ret: libc::c_int) -> Result<()> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

fn check_fd(ret: libc::c_int) -> Result<OwnedFd> {
    if ret < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else
    // owns it, so wrapping it transfers sole ownership.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

/// Open a path given by the caller of `Passthrough::new` (the served root).
pub(crate) fn open_root(path: &CStr) -> Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated; open has no other preconditions.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    check_fd(fd)
}

/// Whether `/proc/self/fd` can be reached (reopening O_PATH fds needs it).
pub(crate) fn proc_fd_available() -> Result<()> {
    // SAFETY: the literal is NUL-terminated; access has no other preconditions.
    check(unsafe { libc::access(c"/proc/self/fd".as_ptr(), libc::F_OK) })
}

/// The held reference to `dir/name` itself, never following a final symlink.
pub(crate) fn open_path(dir: BorrowedFd<'_>, name: &CName) -> Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated and `dir` is a live descriptor.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    check_fd(fd)
}

/// Reopen a held O_PATH fd for I/O with `flags` (the magic link re-checks
/// access against the inode, as a fresh open would).
pub(crate) fn reopen(fd: BorrowedFd<'_>, flags: i32) -> Result<OwnedFd> {
    let path = ProcFdPath::new(fd);
    // SAFETY: `path` is NUL-terminated. O_CREAT is never in `flags` (the
    // caller strips it), so no mode argument is read.
    let ret = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    check_fd(ret)
}

/// A readable fd on a held directory, for getdents.
pub(crate) fn open_dir(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    // SAFETY: the literal is NUL-terminated and `fd` is live.
    let ret = unsafe {
        libc::openat(
            fd.as_raw_fd(),
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    check_fd(ret)
}

fn zeroed_stat() -> libc::stat {
    // SAFETY: `stat` is plain old data; all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// `stat` of the object a held fd refers to (a symlink itself, not its target).
pub(crate) fn stat_fd(fd: BorrowedFd<'_>) -> Result<libc::stat> {
    let mut st = zeroed_stat();
    // SAFETY: `st` is a valid out-buffer, EMPTY is NUL-terminated, `fd` is live.
    check(unsafe {
        libc::fstatat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            &mut st,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

/// `stat` of `dir/name` without following a final symlink.
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &CName) -> Result<libc::stat> {
    let mut st = zeroed_stat();
    // SAFETY: `st` is a valid out-buffer, `name` is NUL-terminated, `dir` is live.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

/// `stat` of a held directory's parent (only its identity is used).
pub(crate) fn stat_parent(dir: BorrowedFd<'_>) -> Result<libc::stat> {
    let mut st = zeroed_stat();
    // SAFETY: `st` is a valid out-buffer, the literal is NUL-terminated.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c"..".as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

pub(crate) fn mknod_at(dir: BorrowedFd<'_>, name: &CName, mode: u32, rdev: u64) -> Result<()> {
    // SAFETY: `name` is NUL-terminated and `dir` is live.
    check(unsafe {
        libc::mknodat(
            dir.as_raw_fd(),
            name.as_ptr(),
            mode as libc::mode_t,
            rdev as libc::dev_t,
        )
    })
}

/// Create the regular file `dir/name` (which must not exist) with `perm`
/// and open it for reading and writing, whatever `perm` allows: what
/// open(2) with `O_CREAT | O_EXCL` gives its caller.
pub(crate) fn create_open(dir: BorrowedFd<'_>, name: &CName, perm: u32) -> Result<OwnedFd> {
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is NUL-terminated and `dir` is live; with O_CREAT the
    // mode argument is read.
    check_fd(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, perm as libc::c_uint) })
}

/// Give `fd` the status flags of `flags` that `fcntl(F_SETFL)` can change
/// (O_APPEND, O_DIRECT, O_NOATIME, O_NONBLOCK); the others are left out.
pub(crate) fn set_status_flags(fd: BorrowedFd<'_>, flags: i32) -> Result<()> {
    let keep = flags & (libc::O_APPEND | libc::O_DIRECT | libc::O_NOATIME | libc::O_NONBLOCK);
    // SAFETY: `fd` is live; F_SETFL takes an int.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, keep) })
}

pub(crate) fn mkdir_at(dir: BorrowedFd<'_>, name: &CName, perm: u32) -> Result<()> {
    // SAFETY: `name` is NUL-terminated and `dir` is live.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), perm as libc::mode_t) })
}

pub(crate) fn symlink_at(target: &CStr, dir: BorrowedFd<'_>, name: &CName) -> Result<()> {
    // SAFETY: both strings are NUL-terminated and `dir` is live.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
}

pub(crate) fn unlink_at(dir: BorrowedFd<'_>, name: &CName, flags: i32) -> Result<()> {
    // SAFETY: `name` is NUL-terminated and `dir` is live.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

pub(crate) fn rename_at2(
    olddir: BorrowedFd<'_>,
    oldname: &CName,
    newdir: BorrowedFd<'_>,
    newname: &CName,
    flags: u32,
) -> Result<()> {
    // SAFETY: renameat2 takes two (dirfd, NUL-terminated name) pairs and a
    // flags word; all are valid here. The raw syscall avoids depending on the
    // C library having a wrapper.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            olddir.as_raw_fd(),
            oldname.as_ptr(),
            newdir.as_raw_fd(),
            newname.as_ptr(),
            flags,
        )
    };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// Hard-link the object a held O_PATH fd refers to as `newdir/newname`.
/// `AT_EMPTY_PATH` would need CAP_DAC_READ_SEARCH; following the fd's magic
/// link reaches the same inode without it.
pub(crate) fn link_fd(fd: BorrowedFd<'_>, newdir: BorrowedFd<'_>, newname: &CName) -> Result<()> {
    let path = ProcFdPath::new(fd);
    // SAFETY: both names are NUL-terminated and `newdir` is live.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            path.as_ptr(),
            newdir.as_raw_fd(),
            newname.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
}

/// The target of the symlink a held fd refers to.
pub(crate) fn readlink_fd(fd: BorrowedFd<'_>) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; PATH_MAX];
    // SAFETY: `buf` has `buf.len()` writable bytes; EMPTY is NUL-terminated.
    let n = unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(Errno::last());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// chown (`u32::MAX` leaves one alone) of the object itself, not a link target.
pub(crate) fn chown_fd(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<()> {
    // SAFETY: EMPTY is NUL-terminated and `fd` is live.
    check(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// chmod through the fd's magic link (fchmod refuses O_PATH fds). Callers
/// never pass a symlink's fd: the walk would continue into the link's target.
pub(crate) fn chmod_fd(fd: BorrowedFd<'_>, perm: u32) -> Result<()> {
    let path = ProcFdPath::new(fd);
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), perm as libc::mode_t, 0) })
}

/// Set atime/mtime of the object itself (`None`: leave alone).
pub(crate) fn utimens_fd(
    fd: BorrowedFd<'_>,
    atime: Option<crate::fs::SetTime>,
    mtime: Option<crate::fs::SetTime>,
) -> Result<()> {
    fn ts(t: Option<crate::fs::SetTime>) -> libc::timespec {
        use crate::fs::SetTime;
        match t {
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            Some(SetTime::Now) => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_NOW,
            },
            Some(SetTime::At(t)) => libc::timespec {
                tv_sec: t.sec as libc::time_t,
                tv_nsec: t.nsec as libc::c_long,
            },
        }
    }
    let times = [ts(atime), ts(mtime)];
    // SAFETY: `times` holds the two timespecs utimensat reads; EMPTY is
    // NUL-terminated and `fd` is live.
    check(unsafe {
        libc::utimensat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            times.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

pub(crate) fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> Result<()> {
    let size = i64::try_from(size).map_err(|_| Errno::EFBIG)?;
    // SAFETY: `fd` is live; ftruncate has no memory arguments.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), size) })
}

/// `off + done` as a file offset; EINVAL past what off_t holds (as the
/// host says for a negative offset).
fn offset(off: u64, done: usize) -> Result<libc::off_t> {
    off.checked_add(done as u64)
        .and_then(|o| libc::off_t::try_from(o).ok())
        .ok_or(Errno::EINVAL)
}

/// pread until `buf` is full or end of file (a short count only at EOF or
/// when an error follows a partial read).
pub(crate) fn pread_full(fd: BorrowedFd<'_>, off: u64, buf: &mut [u8]) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let pos = offset(off, done)?;
        let rest = &mut buf[done..];
        // SAFETY: `rest` has `rest.len()` writable bytes and `fd` is live.
        let n = unsafe { libc::pread(fd.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len(), pos) };
        if n < 0 {
            let e = Errno::last();
            if e == Errno(libc::EINTR) {
                continue;
            }
            return if done > 0 { Ok(done) } else { Err(e) };
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done)
}

/// pwrite all of `data` (a short count only when an error follows a
/// partial write).
pub(crate) fn pwrite_full(fd: BorrowedFd<'_>, off: u64, data: &[u8]) -> Result<usize> {
    let mut done = 0;
    while done < data.len() {
        let pos = offset(off, done)?;
        let rest = &data[done..];
        // SAFETY: `rest` has `rest.len()` readable bytes and `fd` is live.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len(), pos) };
        if n < 0 {
            let e = Errno::last();
            if e == Errno(libc::EINTR) {
                continue;
            }
            return if done > 0 { Ok(done) } else { Err(e) };
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done)
}

pub(crate) fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> Result<()> {
    // SAFETY: `fd` is live; neither call has memory arguments.
    check(unsafe {
        if datasync {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    })
}

/// Whether close(2) of `fd` reaches its filesystem (Linux's `filp_close`
/// calls `f_op->flush` where there is one: NFS, FUSE, CIFS, overlayfs,
/// f2fs, ...). `false` only for filesystems known to have none (tmpfs,
/// ramfs, ext2/3/4, xfs, btrfs, squashfs, erofs), whose close neither
/// writes nor reports anything; `true` for every other, and when
/// `fstatfs` fails.
pub(crate) fn close_flushes(fd: BorrowedFd<'_>) -> bool {
    const NO_FLUSH: [i64; 7] = [
        0x0102_1994, // tmpfs
        0x8584_58f6, // ramfs
        0xef53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683e, // btrfs
        0x7371_7368, // squashfs
        0xe0f5_e1e2, // erofs
    ];
    // SAFETY: `statfs` is plain old data; all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-buffer and `fd` is live.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return true;
    }
    // f_type is a signed word on some targets; the magics are 32-bit.
    let magic = i64::from(st.f_type as u32);
    !NO_FLUSH.contains(&magic)
}

/// What close(2) of one duplicate would report (NFS-style flush-on-close),
/// without closing the handle itself.
pub(crate) fn flush(fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: `fd` is live; F_DUPFD_CLOEXEC takes an integer argument.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(Errno::last());
    }
    // SAFETY: `dup` is ours alone and closed exactly once here.
    check(unsafe { libc::close(dup) })
}

pub(crate) fn statvfs_fd(fd: BorrowedFd<'_>) -> Result<libc::statvfs> {
    // SAFETY: `statvfs` is plain old data; all-zero bytes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-buffer and `fd` is live.
    check(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

pub(crate) fn lseek_set(fd: BorrowedFd<'_>, off: i64) -> Result<()> {
    // SAFETY: `fd` is live; lseek has no memory arguments.
    let ret = unsafe { libc::lseek(fd.as_raw_fd(), off, libc::SEEK_SET) };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// One getdents64 batch into `buf`; 0 at the end of the directory.
pub(crate) fn getdents(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: `buf` has `buf.len()` writable bytes and `fd` is live; the
    // kernel writes at most that many bytes of dirent64 records.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if n < 0 {
        Err(Errno::last())
    } else {
        Ok(n as usize)
    }
}

/// Raise the soft RLIMIT_NOFILE to the hard limit: every inode the backend
/// knows holds one descriptor.
pub(crate) fn raise_nofile_limit() {
    // SAFETY: `rlimit` is plain old data; all-zero bytes are a valid value.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `lim` is a valid out-buffer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < lim.rlim_max
    {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid in-buffer; failure leaves the limit as it was.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

/// Monotonic time in nanoseconds. The coarse clock is read from the vDSO
/// without a syscall, lock or allocation, so rcu-walk revalidation may call
/// it; its tick (a few ms) only lengthens a TTL by at most one tick.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-buffer; CLOCK_MONOTONIC_COARSE exists on
    // every Linux this crate supports, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Host `(st_dev, st_ino)`: an inode's identity on the host.
pub(crate) type HostKey = (u64, u64);

pub(crate) fn host_key(st: &libc::stat) -> HostKey {
    (st.st_dev, st.st_ino)
}

/// A timestamp as signed nanoseconds (fits any date within ±292 years).
pub(crate) fn time_ns(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// The `(ctime, mtime)` pair revalidation compares, in nanoseconds.
pub(crate) fn change_times(st: &libc::stat) -> (i64, i64) {
    (
        time_ns(st.st_ctime, st.st_ctime_nsec),
        time_ns(st.st_mtime, st.st_mtime_nsec),
    )
}

/// Linux's 32-bit device encoding (`new_encode_dev`), which FUSE's `rdev` uses.
pub(crate) fn encode_rdev(dev: u64) -> u32 {
    let major = libc::major(dev);
    let minor = libc::minor(dev);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// Inverse of [`encode_rdev`].
pub(crate) fn decode_rdev(rdev: u32) -> u64 {
    let major = (rdev & 0xfff00) >> 8;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
    libc::makedev(major, minor)
}

/// The file type of a host `st_mode`. Linux has no other types; an unknown
/// one is reported as unsupported rather than guessed.
pub(crate) fn kind_of(st: &libc::stat) -> Result<FileType> {
    FileType::from_mode(st.st_mode).ok_or(Errno::ENOTSUP)
}

/// A host `stat` as our `Attr`, with our inode number in place of the host's.
pub(crate) fn to_attr(ino: Ino, st: &libc::stat) -> Result<Attr> {
    let t = |sec: i64, nsec: i64| Timespec {
        sec,
        nsec: nsec as u32,
    };
    Ok(Attr {
        ino,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: t(st.st_atime, st.st_atime_nsec),
        mtime: t(st.st_mtime, st.st_mtime_nsec),
        ctime: t(st.st_ctime, st.st_ctime_nsec),
        kind: kind_of(st)?,
        perm: (st.st_mode & 0o7777) as u16,
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: encode_rdev(st.st_rdev),
        blksize: st.st_blksize as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cname_rejects_climbing_and_bad_names() {
        assert_eq!(CName::new(b"..").err(), Some(Errno::EINVAL));
        assert_eq!(CName::new(b".").err(), Some(Errno::EINVAL));
        assert_eq!(CName::new(b"").err(), Some(Errno::EINVAL));
        assert_eq!(CName::new(b"a/b").err(), Some(Errno::EINVAL));
        assert_eq!(CName::new(b"../x").err(), Some(Errno::EINVAL));
        assert_eq!(CName::new(b"a\0b").err(), Some(Errno::EINVAL));
        assert_eq!(
            CName::new(&[b'x'; NAME_MAX + 1]).err(),
            Some(Errno::ENAMETOOLONG)
        );
        assert!(CName::new(&[b'x'; NAME_MAX]).is_ok());
        assert!(CName::new(b"...").is_ok());
        assert!(CName::new(b"..a").is_ok());
    }

    #[test]
    fn rdev_encoding_round_trips() {
        for (ma, mi) in [(0, 0), (1, 3), (8, 17), (259, 65536), (4095, 0xfffff)] {
            let dev = libc::makedev(ma, mi);
            let enc = encode_rdev(dev);
            assert_eq!(decode_rdev(enc), dev, "{ma}:{mi}");
        }
        // /dev/null is 1:3 -> 0x103 in the kernel's 32-bit encoding.
        assert_eq!(encode_rdev(libc::makedev(1, 3)), 0x103);
    }

    #[test]
    fn proc_path_is_nul_terminated() {
        // SAFETY: the number is only formatted, never used as a descriptor.
        let fd = unsafe { BorrowedFd::borrow_raw(i32::MAX) };
        let p = ProcFdPath::new(fd);
        // SAFETY: ProcFdPath always leaves a NUL inside its buffer.
        let s = unsafe { CStr::from_ptr(p.as_ptr()) };
        assert_eq!(s.to_bytes(), b"/proc/self/fd/2147483647");
    }
}
