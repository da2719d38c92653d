//! The default bodies of [`FileSystem`]'s file operations beyond read and
//! write (`lseek`'s `SEEK_DATA`/`SEEK_HOLE`, `copy_file_range`), for a
//! backend that has nothing better.

use super::{FileSystem, Ino};
use crate::errno::{Errno, Result};

/// `SEEK_DATA`/`SEEK_HOLE` in a file of `size` bytes that is all data
/// (Linux's `generic_file_llseek_size`): data at `offset`, the hole at the
/// end; ENXIO at or past the end.
pub(crate) fn seek_all_data(size: u64, offset: u64, whence: i32) -> Result<u64> {
    if offset >= size {
        return Err(Errno(libc::ENXIO));
    }
    match whence {
        libc::SEEK_DATA => Ok(offset),
        libc::SEEK_HOLE => Ok(size),
        _ => Err(Errno::EINVAL),
    }
}

/// Copy up to `len` bytes from `src` (inode, handle, offset) to `dst`
/// through the backend's `read` and `write`, in pieces of 128 KiB; stops
/// at the source's end or a short write. An error after some bytes were
/// copied ends the copy with what was done, as a short write would.
pub(crate) fn copy_by_read_write<F: FileSystem + ?Sized>(
    fs: &F,
    src: (Ino, u64, u64),
    dst: (Ino, u64, u64),
    len: u64,
) -> Result<usize> {
    const PIECE: usize = 128 << 10;
    let mut buf = vec![0u8; PIECE.min(usize::try_from(len).unwrap_or(PIECE))];
    let mut done = 0u64;
    while done < len {
        let want = buf.len().min(usize::try_from(len - done).unwrap_or(PIECE));
        let r = match fs.read(src.0, src.1, src.2 + done, &mut buf[..want]) {
            Ok(0) => break,
            Ok(r) => r,
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        };
        let w = match fs.write(dst.0, dst.1, dst.2 + done, &buf[..r]) {
            Ok(w) => w,
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        };
        done += w as u64;
        if w < r {
            break;
        }
    }
    Ok(usize::try_from(done).unwrap_or(usize::MAX))
}
