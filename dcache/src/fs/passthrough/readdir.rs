//! readdir over a held directory: getdents64 on a fresh readable fd, resumed
//! at a host cookie.
//!
//! Offsets. The trait gives `.` and `..` the cookies 1 and 2; every host
//! entry is given its host `d_off` plus 3, so our cookies never collide with
//! those two and map back to the host's exactly. A host cookie is the value
//! `lseek` accepts to continue after that entry, and ext4 (name hashes) and
//! tmpfs (a per-directory offset map) keep it valid while entries are created
//! and removed, so a listing resumed after concurrent changes neither repeats
//! nor skips the entries that stayed. The host's own `.` and `..` are skipped
//! (the root's `..` would be outside the served tree).
//!
//! Inode numbers. An entry's host inode may not be held yet (readdir opens
//! nothing per entry); such an entry reports the host number with the top
//! bit set, a display value distinct from every number we hand out (which
//! count up from 1). It is not a handle: passing it back gives ESTALE.

use std::os::fd::AsFd;

use super::inodes::{Inode, InodeTable, ROOT_INO};
use super::sys::{self, CName};
use crate::errno::{Errno, Result};
use crate::fs::{DirEntry, FileType, Ino};

const DOT_OFFSET: u64 = 1;
const DOTDOT_OFFSET: u64 = 2;
const HOST_BIAS: u64 = 3;
const BUF_SIZE: usize = 32 * 1024;

/// The inode number to report for a host inode seen in a listing: the
/// number a lookup of it gives (`d_ino == st_ino`). A mount point below
/// the source lists the covered directory's number, as on the host.
fn display_ino(table: &InodeTable, dev: u64, host_ino: u64) -> Ino {
    table.number((dev, host_ino))
}

fn kind_of_dtype(d_type: u8) -> Option<FileType> {
    Some(match d_type {
        libc::DT_REG => FileType::Regular,
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        libc::DT_FIFO => FileType::Fifo,
        libc::DT_SOCK => FileType::Socket,
        _ => return None,
    })
}

/// One `linux_dirent64` record decoded from a getdents buffer.
struct Raw<'a> {
    ino: u64,
    off: i64,
    d_type: u8,
    name: &'a [u8],
}

/// Decode the record at the start of `buf`; returns it and its length.
/// `None` for a truncated or malformed record (the kernel never writes one).
fn decode(buf: &[u8]) -> Option<(Raw<'_>, usize)> {
    // Layout: u64 d_ino, i64 d_off, u16 d_reclen, u8 d_type, name, NUL.
    const NAME_AT: usize = 19;
    let ino = u64::from_ne_bytes(buf.get(0..8)?.try_into().ok()?);
    let off = i64::from_ne_bytes(buf.get(8..16)?.try_into().ok()?);
    let reclen = u16::from_ne_bytes(buf.get(16..18)?.try_into().ok()?) as usize;
    let d_type = *buf.get(18)?;
    let rec = buf.get(..reclen)?;
    let name_area = rec.get(NAME_AT..)?;
    let len = name_area.iter().position(|&b| b == 0)?;
    Some((
        Raw {
            ino,
            off,
            d_type,
            name: &name_area[..len],
        },
        reclen,
    ))
}

/// List `dir` (our number `dir_ino`) after cookie `offset`; see the module
/// docs for the cookie scheme.
pub(crate) fn read_dir(
    table: &InodeTable,
    dir_ino: Ino,
    dir: &Inode,
    offset: u64,
    emit: &mut dyn FnMut(DirEntry) -> bool,
) -> Result<()> {
    let dfd = table.retry_fds(|| sys::open_dir(table.fd(dir)?.as_fd()))?;
    if offset > DOTDOT_OFFSET {
        // Undo the bias; `as` restores a negative host cookie bit for bit.
        sys::lseek_set(dfd.as_fd(), (offset - HOST_BIAS) as i64)?;
    }
    let mut buf = vec![0u8; BUF_SIZE];
    // The first batch is read before anything is emitted so that a host
    // error (a removed directory, an unknown cookie) is reported alone.
    let mut len = sys::getdents(dfd.as_fd(), &mut buf)?;

    if offset < DOT_OFFSET {
        let dot = DirEntry {
            ino: dir_ino,
            offset: DOT_OFFSET,
            kind: FileType::Directory,
            name: b".".to_vec(),
        };
        if !emit(dot) {
            return Ok(());
        }
    }
    if offset < DOTDOT_OFFSET {
        let parent = if dir_ino == ROOT_INO {
            ROOT_INO
        } else {
            let st = sys::stat_parent(table.fd(dir)?.as_fd())?;
            display_ino(table, st.st_dev, st.st_ino)
        };
        let dotdot = DirEntry {
            ino: parent,
            offset: DOTDOT_OFFSET,
            kind: FileType::Directory,
            name: b"..".to_vec(),
        };
        if !emit(dotdot) {
            return Ok(());
        }
    }

    let dev = dir.key.0;
    while len > 0 {
        let mut at = 0;
        while at < len {
            let Some((raw, reclen)) = decode(&buf[at..len]) else {
                return Err(Errno::EIO);
            };
            at += reclen;
            if raw.name == b"." || raw.name == b".." {
                continue;
            }
            let kind = match kind_of_dtype(raw.d_type) {
                Some(k) => k,
                // DT_UNKNOWN: the filesystem does not store types; ask.
                None => {
                    let name = CName::new(raw.name)?;
                    match sys::stat_at(dfd.as_fd(), &name) {
                        Ok(st) => sys::kind_of(&st)?,
                        // Removed since getdents saw it: not listed.
                        Err(Errno::ENOENT) => continue,
                        Err(e) => return Err(e),
                    }
                }
            };
            let offset = (raw.off as u64)
                .checked_add(HOST_BIAS)
                .ok_or(Errno::EOVERFLOW)?;
            let entry = DirEntry {
                ino: display_ino(table, dev, raw.ino),
                offset,
                kind,
                name: raw.name.to_vec(),
            };
            if !emit(entry) {
                return Ok(());
            }
        }
        len = sys::getdents(dfd.as_fd(), &mut buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ino: u64, off: i64, d_type: u8, name: &[u8]) -> Vec<u8> {
        let reclen = (19 + name.len() + 1).div_ceil(8) * 8;
        let mut r = vec![0u8; reclen];
        r[0..8].copy_from_slice(&ino.to_ne_bytes());
        r[8..16].copy_from_slice(&off.to_ne_bytes());
        r[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
        r[18] = d_type;
        r[19..19 + name.len()].copy_from_slice(name);
        r
    }

    #[test]
    fn decodes_records_and_rejects_truncated_ones() {
        let mut buf = record(42, 7, libc::DT_REG, b"hello");
        buf.extend(record(43, -1, libc::DT_DIR, b"d"));
        let (a, la) = decode(&buf).unwrap();
        assert_eq!(
            (a.ino, a.off, a.d_type, a.name),
            (42, 7, libc::DT_REG, &b"hello"[..])
        );
        let (b, _) = decode(&buf[la..]).unwrap();
        assert_eq!((b.ino, b.off, b.name), (43, -1, &b"d"[..]));
        assert!(decode(&buf[..10]).is_none());
        assert!(decode(&buf[..la - 1]).is_none());
    }
}
