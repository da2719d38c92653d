//! `lseek(2)` on an open file: the position moves under `f_pos_lock`, as
//! Linux's `generic_file_llseek_size` moves it; `SEEK_DATA` and
//! `SEEK_HOLE` ask the backend where data and holes are.

use super::{FileRef, FileRepr, Layout, FMODE_ATOMIC_POS, FMODE_LSEEK, FMODE_PATH};
use crate::errno::{Errno, Result};
use crate::sync::{LockExt, Ordering};

/// The largest position (Linux's MAX_LFS_FILESIZE).
const MAX_POS: u64 = i64::MAX as u64;

impl<T: Send + Sync, L: Layout> FileRef<T, L> {
    /// `lseek(2)`: move the position to `offset` from the start
    /// (`SEEK_SET`), the position (`SEEK_CUR`) or the end (`SEEK_END`), or
    /// to the next data or hole at or after `offset` (`SEEK_DATA`,
    /// `SEEK_HOLE`: the backend's [`lseek`](crate::FileSystem::lseek));
    /// returns the new position. EBADF for an O_PATH file, ESPIPE if the
    /// file cannot seek, EINVAL for another `whence` or a negative result,
    /// ENXIO for SEEK_DATA/SEEK_HOLE at or past the end (or from a
    /// negative offset).
    pub fn lseek(&self, offset: i64, whence: i32) -> Result<u64> {
        let f = self.f();
        if f.f_mode() & FMODE_PATH != 0 {
            return Err(Errno::EBADF);
        }
        if f.f_mode() & FMODE_LSEEK == 0 {
            return Err(Errno(libc::ESPIPE));
        }
        let _guard = (f.f_mode() & FMODE_ATOMIC_POS != 0).then(|| f.f_pos_lock().lock_unpoisoned());
        // Relaxed: ordered by the position lock, as in `with_pos`.
        let pos = f.f_pos().load(Ordering::Relaxed);
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => pos as i64,
            libc::SEEK_END => {
                let size = f.f_op().getattr(f.f_inode())?.size;
                i64::try_from(size).map_err(|_| Errno::EOVERFLOW)?
            }
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let from = u64::try_from(offset).map_err(|_| Errno(libc::ENXIO))?;
                let to = f.f_op().lseek(f.f_inode(), f.fh(), from, whence)?;
                f.f_pos().store(to, Ordering::Relaxed);
                return Ok(to);
            }
            _ => return Err(Errno::EINVAL),
        };
        let to = base.checked_add(offset).ok_or(Errno::EINVAL)?;
        let to = u64::try_from(to).map_err(|_| Errno::EINVAL)?;
        if to > MAX_POS {
            return Err(Errno::EINVAL);
        }
        f.f_pos().store(to, Ordering::Relaxed);
        Ok(to)
    }
}
