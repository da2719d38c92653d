//! File operations on an [`OpenFile`] beyond read and write, with the
//! checks Linux's VFS makes before it asks a filesystem: `fallocate(2)`
//! (`vfs_fallocate`), `lseek(2)` (`SEEK_DATA`/`SEEK_HOLE` answered by the
//! backend) and `copy_file_range(2)` (`generic_copy_file_checks`). Each
//! change refreshes the cached attributes and, for a file opened by a
//! caller without CAP_FSETID, drops the set-id bits as a write does
//! (`file_modified`).

use super::dcache::sb_of;
use super::open::{kill_priv, refresh};
use super::OpenFile;
use crate::errno::{Errno, Result};
use crate::file::{FMODE_KILL_PRIV, FMODE_KILL_SGID, FMODE_PATH, FMODE_READ, FMODE_WRITE};
use crate::fs::FileType;

/// Linux's MAX_LFS_FILESIZE (and every dcache backend's largest size).
const MAX_SIZE: u64 = i64::MAX as u64;

const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;
const COLLAPSE_RANGE: i32 = libc::FALLOC_FL_COLLAPSE_RANGE;
const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;
const INSERT_RANGE: i32 = libc::FALLOC_FL_INSERT_RANGE;
const UNSHARE_RANGE: i32 = libc::FALLOC_FL_UNSHARE_RANGE;
/// `FALLOC_FL_WRITE_ZEROES` (Linux 6.17).
const WRITE_ZEROES: i32 = 0x80;
const MODE_MASK: i32 =
    PUNCH_HOLE | COLLAPSE_RANGE | ZERO_RANGE | INSERT_RANGE | UNSHARE_RANGE | WRITE_ZEROES;

/// `vfs_fallocate`'s mode rules: unknown bits, combinations of modes, a
/// hole punched without `FALLOC_FL_KEEP_SIZE`, and `KEEP_SIZE` with the
/// modes that change the size are EOPNOTSUPP.
fn check_falloc_mode(mode: i32) -> Result<()> {
    if mode & !(MODE_MASK | KEEP_SIZE) != 0 {
        return Err(Errno::ENOTSUP);
    }
    let keep = mode & KEEP_SIZE != 0;
    match mode & MODE_MASK {
        0 | ZERO_RANGE | UNSHARE_RANGE => Ok(()),
        PUNCH_HOLE if keep => Ok(()),
        COLLAPSE_RANGE | INSERT_RANGE | WRITE_ZEROES if !keep => Ok(()),
        _ => Err(Errno::ENOTSUP),
    }
}

impl OpenFile<'_> {
    /// The open inode's type (a regular file when the dentry has gone
    /// negative, which an open file's dentry cannot).
    fn kind(&self) -> FileType {
        self.dentry()
            .inode()
            .map_or(FileType::Regular, |i| i.kind())
    }

    /// After a change of the file's data: the cached attributes again,
    /// and the set-id bits gone for an unprivileged opener.
    fn modified(&self) {
        let fs = &**self.file().fs();
        if let Some(i) = self.dentry().inode() {
            refresh(fs, i);
            let mode = self.file().mode();
            if mode & FMODE_KILL_PRIV != 0 {
                kill_priv(fs, i, mode & FMODE_KILL_SGID != 0);
            }
        }
    }

    /// `fallocate(2)`: `mode` is the `FALLOC_FL_*` bits (0 reserves and
    /// extends, `KEEP_SIZE` reserves only, `PUNCH_HOLE | KEEP_SIZE` frees,
    /// `ZERO_RANGE` zeroes). Checked as `vfs_fallocate` does: EINVAL for
    /// `len == 0` or an offset or length past `i64::MAX`, EOPNOTSUPP for a
    /// mode combination Linux refuses, EBADF unless open for writing,
    /// ESPIPE for a fifo, EISDIR for a directory, ENODEV for anything but a
    /// regular file or block device, EFBIG past the largest file size;
    /// then the backend (EOPNOTSUPP for a mode it lacks).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{oflags, At, Vfs};
    ///
    /// let vfs = Vfs::new(Arc::new(MemFs::new()))?;
    /// let f = vfs.as_root().open(At::Root, "f", oflags::O_CREAT | oflags::O_RDWR, 0o644)?;
    /// f.fallocate(0, 0, 1 << 20)?;
    /// let a = f.dentry().attr().unwrap();
    /// assert_eq!((a.size, a.blocks), (1 << 20, 2048));
    /// // Reserved but never written: a hole to SEEK_DATA.
    /// assert_eq!(f.seek_data_hole(0, libc::SEEK_DATA), Err(dcache::Errno(libc::ENXIO)));
    /// # Ok::<(), dcache::Errno>(())
    /// ```
    pub fn fallocate(&self, mode: i32, offset: u64, len: u64) -> Result<()> {
        if offset > MAX_SIZE || len == 0 || len > MAX_SIZE {
            return Err(Errno::EINVAL);
        }
        check_falloc_mode(mode)?;
        if self.file().mode() & FMODE_WRITE == 0 {
            return Err(Errno::EBADF);
        }
        match self.kind() {
            FileType::Fifo => return Err(Errno(libc::ESPIPE)),
            FileType::Directory => return Err(Errno::EISDIR),
            FileType::Regular | FileType::BlockDevice => {}
            _ => return Err(Errno(libc::ENODEV)),
        }
        if offset + len > MAX_SIZE {
            return Err(Errno::EFBIG);
        }
        self.file()
            .fs()
            .fallocate(self.ino(), self.fh(), mode, offset, len)?;
        self.modified();
        Ok(())
    }

    /// `lseek(2)`'s `SEEK_DATA` or `SEEK_HOLE` (`whence`) from `offset`,
    /// without moving the file position ([`FileRef::lseek`] moves it):
    /// where the next data or hole starts, ENXIO at or past the end of
    /// the file or (SEEK_DATA) with only holes after `offset`; EBADF for an
    /// O_PATH file, EINVAL for another `whence`.
    ///
    /// [`FileRef::lseek`]: crate::file::FileRef::lseek
    pub fn seek_data_hole(&self, offset: u64, whence: i32) -> Result<u64> {
        if self.file().mode() & FMODE_PATH != 0 {
            return Err(Errno::EBADF);
        }
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return Err(Errno::EINVAL);
        }
        if offset > MAX_SIZE {
            return Err(Errno(libc::ENXIO));
        }
        self.file()
            .fs()
            .lseek(self.ino(), self.fh(), offset, whence)
    }

    /// `copy_file_range(2)`: copy up to `len` bytes of this file from
    /// `off_in` into `out` at `off_out`; returns the bytes copied (0 at or
    /// past this file's end). Checked as Linux does: EINVAL for `flags`
    /// other than 0, EISDIR for a directory and EINVAL for another
    /// non-regular file on either side, EBADF unless this file is open for
    /// reading and `out` for writing without O_APPEND, EXDEV for a file of
    /// another `Vfs`, EOVERFLOW when an offset plus `len` wraps, EFBIG at
    /// the largest file size, EINVAL for overlapping ranges of one file.
    /// The backend copies (memfs keeps holes; passthrough asks the host).
    pub fn copy_file_range(
        &self,
        off_in: u64,
        out: &OpenFile<'_>,
        off_out: u64,
        len: u64,
        flags: u32,
    ) -> Result<usize> {
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        for k in [self.kind(), out.kind()] {
            match k {
                FileType::Regular => {}
                FileType::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
        }
        if self.file().mode() & FMODE_READ == 0
            || out.file().mode() & FMODE_WRITE == 0
            || out.flags() & libc::O_APPEND != 0
        {
            return Err(Errno::EBADF);
        }
        if !std::ptr::eq(sb_of(self.dentry().dentry()), sb_of(out.dentry().dentry())) {
            return Err(Errno::EXDEV);
        }
        if off_in.checked_add(len).is_none() || off_out.checked_add(len).is_none() {
            return Err(Errno::EOVERFLOW);
        }
        if off_in > MAX_SIZE || off_out > MAX_SIZE {
            return Err(Errno::EINVAL);
        }
        let fs = self.file().fs();
        let size_in = fs.getattr(self.ino())?.size;
        let mut count = len.min(size_in.saturating_sub(off_in));
        if count > 0 && off_out >= MAX_SIZE {
            return Err(Errno::EFBIG);
        }
        count = count.min(MAX_SIZE - off_out);
        if self.ino() == out.ino() && off_out < off_in + count && off_in < off_out + count {
            return Err(Errno::EINVAL);
        }
        if count == 0 {
            return Ok(0);
        }
        let n = fs.copy_file_range(
            self.ino(),
            self.fh(),
            off_in,
            out.ino(),
            out.fh(),
            off_out,
            count,
        )?;
        out.modified();
        Ok(n)
    }
}
