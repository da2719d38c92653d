//! passthrough's file operations beyond read and write, each the host's
//! own call on the handle's descriptor: `fallocate(2)`, `lseek(2)` with
//! `SEEK_DATA`/`SEEK_HOLE`, `copy_file_range(2)` (falling back to reads
//! and writes where the host cannot copy between the two files), and
//! `O_TMPFILE` opened in the held directory.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{sys, Passthrough};
use crate::errno::{Errno, Result};
use crate::fs::{fileops, Attr, Ctx, Ino};

/// An offset or length as the host's `off_t` (EINVAL past its range,
/// which the Vfs has refused already).
fn off(v: u64) -> Result<libc::off_t> {
    libc::off_t::try_from(v).map_err(|_| Errno::EINVAL)
}

fn host_fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> Result<()> {
    // SAFETY: `fd` is a live descriptor; fallocate takes plain integers.
    let r = unsafe { libc::fallocate(fd.as_raw_fd(), mode, off(offset)?, off(len)?) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn host_lseek(fd: BorrowedFd<'_>, offset: u64, whence: i32) -> Result<u64> {
    // SAFETY: `fd` is a live descriptor; lseek takes plain integers. The
    // handle's own position moves, which nothing else reads (its I/O is
    // positioned).
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off(offset)?, whence) };
    u64::try_from(r).map_err(|_| Errno::last())
}

/// The host's copy_file_range, repeated until `len` bytes are copied or
/// the source ends.
fn host_copy(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    len: u64,
) -> Result<usize> {
    let (mut pos_in, mut pos_out) = (off(off_in)?, off(off_out)?);
    let mut done = 0u64;
    while done < len {
        let want = usize::try_from(len - done)
            .unwrap_or(usize::MAX)
            .min(1 << 30);
        // SAFETY: both descriptors are live and both offsets are ours to
        // update; no flags.
        let n = unsafe {
            libc::copy_file_range(
                fd_in.as_raw_fd(),
                &mut pos_in,
                fd_out.as_raw_fd(),
                &mut pos_out,
                want,
                0,
            )
        };
        match n {
            0 => break,
            n if n > 0 => done += n as u64,
            _ if done == 0 => return Err(Errno::last()),
            _ => break,
        }
    }
    Ok(usize::try_from(done).unwrap_or(usize::MAX))
}

/// `openat(dir, ".", O_TMPFILE | flags, perm)`.
fn open_tmpfile(dir: BorrowedFd<'_>, flags: i32, perm: u16) -> Result<OwnedFd> {
    let flags = (flags & !(libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW))
        | libc::O_TMPFILE
        | libc::O_CLOEXEC;
    // SAFETY: the literal is NUL-terminated and `dir` is live; with
    // O_TMPFILE the mode argument is read.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            flags,
            libc::c_uint::from(perm & 0o7777),
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Passthrough {
    pub(super) fn do_fallocate(
        &self,
        ino: Ino,
        fh: u64,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let h = self.handles.get(ino, fh)?;
        host_fallocate(h.fd(), mode, offset, len)
    }

    pub(super) fn do_lseek(&self, ino: Ino, fh: u64, offset: u64, whence: i32) -> Result<u64> {
        let h = self.handles.get(ino, fh)?;
        host_lseek(h.fd(), offset, whence)
    }

    /// The host's copy; where it cannot copy between these two files
    /// (EXDEV, EOPNOTSUPP, ENOSYS), the backend's reads and writes.
    pub(super) fn do_copy_file_range(
        &self,
        src: (Ino, u64, u64),
        dst: (Ino, u64, u64),
        len: u64,
    ) -> Result<usize> {
        let h_in = self.handles.get(src.0, src.1)?;
        let h_out = self.handles.get(dst.0, dst.1)?;
        match host_copy(h_in.fd(), src.2, h_out.fd(), dst.2, len) {
            Err(Errno::EXDEV) | Err(Errno::ENOTSUP) | Err(Errno::ENOSYS) => {
                fileops::copy_by_read_write(self, src, dst, len)
            }
            r => r,
        }
    }

    /// O_TMPFILE in the held directory `dir`, given to `ctx` as `mknod`
    /// gives new files; the new inode is held (one lookup counted, as
    /// after `create`) and the returned handle is open with `flags`.
    pub(super) fn do_tmpfile(
        &self,
        dir: Ino,
        perm: u16,
        flags: i32,
        ctx: Ctx,
    ) -> Result<(Attr, u64)> {
        let dir = self.inodes.get(dir)?;
        let fd = self
            .inodes
            .retry_fds(|| open_tmpfile(self.inodes.fd(&dir)?.as_fd(), flags, perm))?;
        let mut st = sys::stat_fd(fd.as_fd())?;
        if self.daemon_is_root && (st.st_uid != ctx.uid || st.st_gid != ctx.gid) {
            let parent_sgid = st.st_gid != ctx.gid
                && sys::stat_fd(self.inodes.fd(&dir)?.as_fd())?.st_mode & libc::S_ISGID != 0;
            let gid = if parent_sgid { u32::MAX } else { ctx.gid };
            sys::chown_fd(fd.as_fd(), ctx.uid, gid)?;
            st = sys::stat_fd(fd.as_fd())?;
        }
        // Bits the daemon's umask took from the requested ones.
        let (want, have) = (u32::from(perm) & 0o777, st.st_mode & 0o7777);
        if want & !have != 0 {
            sys::chmod_fd(fd.as_fd(), have | want)?;
            st = sys::stat_fd(fd.as_fd())?;
        }
        let held = sys::reopen(fd.as_fd(), libc::O_PATH)?;
        let (ino, inode) = self.inodes.register_pinned(held, &st)?;
        let attr = self.attr(ino, &inode, &st)?;
        Ok((attr, self.handles.insert(ino, fd)))
    }
}
