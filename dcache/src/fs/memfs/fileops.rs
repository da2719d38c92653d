//! memfs's file operations beyond read and write: `fallocate` (reserve,
//! punch a hole, zero a range), `SEEK_DATA`/`SEEK_HOLE`, a
//! `copy_file_range` that keeps the source's holes, and `O_TMPFILE`.
//!
//! As tmpfs: reserved pages count in `st_blocks` and against the space
//! limit but read as zeros and are holes to `SEEK_DATA` until written; a
//! punched page is freed; every successful `fallocate` stamps mtime and
//! ctime. Unlike tmpfs, `FALLOC_FL_ZERO_RANGE` is supported (tmpfs answers
//! EOPNOTSUPP): the range reads as zeros and its pages stay reserved, as
//! on ext4 or xfs.

use super::file::{FileData, MAX_FILE_SIZE, PAGE};
use super::inode::{Body, Inode};
use super::tree::Tree;
use crate::errno::{Errno, Result};
use crate::fs::{Attr, Ctx, FileType, Ino, Timespec};
use crate::permission;

const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;
const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;

/// The longest piece a copy moves per step (one page of data at most; a
/// hole is skipped whole).
const PAGE_U64: u64 = PAGE as u64;

/// The file data of a regular file, or the errno an operation on another
/// type of file gets (`on_dir` for a directory, EINVAL otherwise).
fn file_of(inode: &Inode, on_dir: Errno) -> Result<&FileData> {
    match &inode.body {
        Body::File(f) => Ok(f),
        Body::Dir(_) => Err(on_dir),
        _ => Err(Errno::EINVAL),
    }
}

fn file_mut(inode: &mut Inode) -> Result<&mut FileData> {
    match &mut inode.body {
        Body::File(f) => Ok(f),
        _ => Err(Errno::EIO),
    }
}

impl Tree {
    /// `fallocate(2)` through handle `fh` (see the module docs).
    pub fn fallocate(&mut self, ino: Ino, fh: u64, mode: i32, offset: u64, len: u64) -> Result<()> {
        if !self.handle(ino, fh)?.write {
            return Err(Errno::EBADF);
        }
        if mode & !(KEEP_SIZE | PUNCH_HOLE | ZERO_RANGE) != 0
            || (mode & PUNCH_HOLE != 0 && (mode & ZERO_RANGE != 0 || mode & KEEP_SIZE == 0))
        {
            return Err(Errno::ENOTSUP);
        }
        if len == 0 || offset > MAX_FILE_SIZE || len > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        if offset + len > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let inode = self.inode(ino)?;
        match inode.kind {
            FileType::Regular => {}
            FileType::Directory => return Err(Errno::EISDIR),
            FileType::Fifo => return Err(Errno(libc::ESPIPE)),
            _ => return Err(Errno(libc::ENODEV)),
        }
        let f = file_of(inode, Errno::EISDIR)?;
        let keep = mode & KEEP_SIZE != 0;
        if mode & PUNCH_HOLE == 0 && self.used_pages + f.absent(offset, len) > self.max_pages {
            return Err(Errno::ENOSPC);
        }
        let f = file_mut(self.inodes.get_mut(&ino).ok_or(Errno::EIO)?)?;
        if mode & PUNCH_HOLE != 0 {
            self.used_pages -= f.punch(offset, len);
        } else if mode & ZERO_RANGE != 0 {
            self.used_pages += f.zero_range(offset, len, keep);
        } else {
            self.used_pages += f.allocate(offset, len, keep);
        }
        self.inode_mut(ino)?.touch_modified(Timespec::now());
        Ok(())
    }

    /// `lseek(2)`'s `SEEK_DATA`/`SEEK_HOLE` through handle `fh`: data is
    /// what was written (see [`FileData::seek`]).
    pub fn lseek(&self, ino: Ino, fh: u64, offset: u64, whence: i32) -> Result<u64> {
        self.handle(ino, fh)?;
        let f = file_of(self.inode(ino)?, Errno::EINVAL)?;
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(Errno::EINVAL),
        };
        f.seek(offset, data).ok_or(Errno(libc::ENXIO))
    }

    /// `copy_file_range(2)` between two handles: data pages are copied,
    /// holes (unwritten or reserved pages) become holes in the target.
    /// Returns the bytes copied; ENOSPC only if none could be.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_range(
        &mut self,
        ino_in: Ino,
        fh_in: u64,
        off_in: u64,
        ino_out: Ino,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> Result<usize> {
        if !self.handle(ino_in, fh_in)?.read {
            return Err(Errno::EBADF);
        }
        let h = self.handle(ino_out, fh_out)?;
        if !h.write || h.append {
            return Err(Errno::EBADF);
        }
        let size_in = file_of(self.inode(ino_in)?, Errno::EISDIR)?.size();
        file_of(self.inode(ino_out)?, Errno::EISDIR)?;
        let len = len.min(size_in.saturating_sub(off_in));
        if len == 0 {
            return Ok(0);
        }
        if ino_in == ino_out && off_in < off_out + len && off_out < off_in + len {
            return Err(Errno::EINVAL);
        }
        if off_out
            .checked_add(len)
            .is_none_or(|end| end > MAX_FILE_SIZE)
        {
            return Err(Errno::EFBIG);
        }
        let mut buf = vec![0u8; PAGE];
        let mut done = 0u64;
        while done < len {
            let (pos, to) = (off_in + done, off_out + done);
            let src = file_of(self.inode(ino_in)?, Errno::EISDIR)?;
            let data_at = src.next_data(pos).unwrap_or(u64::MAX);
            if data_at > pos {
                // A hole up to the next data (or the end of the range).
                let n = (data_at - pos).min(len - done);
                let freed = file_mut(self.inode_mut(ino_out)?)?.write_hole(to, n);
                self.used_pages -= freed;
                done += n;
                continue;
            }
            let n = (PAGE_U64 - pos % PAGE_U64).min(len - done) as usize;
            src.read(pos, &mut buf[..n]);
            let dst = file_mut(self.inodes.get_mut(&ino_out).ok_or(Errno::EIO)?)?;
            if self.used_pages + dst.pages_needed(to, n) > self.max_pages {
                if done == 0 {
                    return Err(Errno::ENOSPC);
                }
                break;
            }
            self.used_pages += dst.write(to, &buf[..n]);
            done += n as u64;
        }
        self.inode_mut(ino_out)?.touch_modified(Timespec::now());
        Ok(usize::try_from(done).unwrap_or(usize::MAX))
    }

    /// `O_TMPFILE` in `dir`: a regular file with no name, opened with
    /// `flags`; `link` may name it later unless `flags` has O_EXCL.
    pub fn tmpfile(&mut self, dir: Ino, perm: u16, flags: i32, ctx: Ctx) -> Result<(Attr, u64)> {
        self.live_dir(dir)?;
        if self.inodes.len() as u64 >= self.max_inodes {
            return Err(Errno::ENOSPC);
        }
        let parent = self.inode(dir)?.perm_of();
        let (perm, gid) = permission::inode_init_owner(parent, ctx.gid, perm, false);
        let now = Timespec::now();
        let ino = self.next_ino;
        self.next_ino += 1;
        let inode = Inode {
            kind: FileType::Regular,
            perm,
            uid: ctx.uid,
            gid,
            nlink: 0,
            rdev: 0,
            atime: now,
            mtime: now,
            ctime: now,
            body: Body::File(FileData::default()),
            xattrs: Default::default(),
        };
        self.inodes.insert(ino, inode);
        let open_flags = flags & !(libc::O_TMPFILE | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        let fh = match self.open(ino, open_flags) {
            Ok(fh) => fh,
            Err(e) => {
                self.inodes.remove(&ino);
                return Err(e);
            }
        };
        if flags & libc::O_EXCL == 0 {
            self.linkable.insert(ino);
        }
        // Born an orphan: the release of its last handle frees it.
        self.orphans.insert(ino);
        self.handles.orphan_added();
        Ok((self.getattr(ino)?, fh))
    }
}
