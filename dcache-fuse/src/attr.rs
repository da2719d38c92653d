//! Between dcache's attribute types and the wire's.

use dcache::errno::{Errno, Result};
use dcache::fs::{Attr, FileType, SetAttr, SetTime, Timespec};

use crate::wire::abi::{self, fattr};

/// A directory record's type (`d_type`: the type bits shifted down).
pub fn dirent_type(k: FileType) -> u32 {
    k.mode_bits() >> 12
}

/// `a` as the kernel should see it. `a.ino` is the node id, which is also
/// the `st_ino` the kernel reports.
#[inline]
pub fn file_attr(a: &Attr) -> abi::Attr {
    abi::Attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        // Seconds before 1970 go as their two's complement, which the
        // kernel reads back as a signed time.
        atime: a.atime.sec as u64,
        mtime: a.mtime.sec as u64,
        ctime: a.ctime.sec as u64,
        atimensec: a.atime.nsec.min(999_999_999),
        mtimensec: a.mtime.nsec.min(999_999_999),
        ctimensec: a.ctime.nsec.min(999_999_999),
        mode: a.kind.mode_bits() | u32::from(a.perm & 0o7777),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

fn time(valid: u32, set: u32, now: u32, sec: u64, nsec: u32) -> Option<SetTime> {
    if valid & now != 0 {
        Some(SetTime::Now)
    } else if valid & set != 0 {
        Some(SetTime::At(Timespec {
            sec: sec as i64,
            nsec: nsec.min(999_999_999),
        }))
    } else {
        None
    }
}

/// What a SETATTR asks for. `mode` arrives with the type bits; only the
/// permission bits are changeable.
pub fn set_attr(s: &abi::SetattrIn) -> SetAttr {
    let v = s.valid;
    let has = |bit: u32| v & bit != 0;
    SetAttr {
        perm: has(fattr::MODE).then_some((s.mode & 0o7777) as u16),
        uid: has(fattr::UID).then_some(s.uid),
        gid: has(fattr::GID).then_some(s.gid),
        size: has(fattr::SIZE).then_some(s.size),
        atime: time(v, fattr::ATIME, fattr::ATIME_NOW, s.atime, s.atimensec),
        mtime: time(v, fattr::MTIME, fattr::MTIME_NOW, s.mtime, s.mtimensec),
    }
}

/// The file type `mknod` asks for in `mode`; directories and symlinks have
/// their own requests (EINVAL here, as mknod(2) gives for a bad type).
pub fn mknod_kind(mode: u32) -> Result<FileType> {
    match FileType::from_mode(mode) {
        // mknod(2) with a zero type means a regular file.
        None if mode & libc::S_IFMT == 0 => Ok(FileType::Regular),
        Some(FileType::Directory | FileType::Symlink) | None => Err(Errno::EINVAL),
        Some(k) => Ok(k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_keeps_every_field() {
        let a = Attr {
            ino: 7,
            size: 12345,
            blocks: 24,
            atime: Timespec { sec: 1, nsec: 2 },
            mtime: Timespec { sec: 3, nsec: 4 },
            ctime: Timespec { sec: -5, nsec: 6 },
            kind: FileType::CharDevice,
            perm: 0o4751,
            nlink: 3,
            uid: 1000,
            gid: 100,
            rdev: 0x0501,
            blksize: 4096,
        };
        let f = file_attr(&a);
        assert_eq!(f.ino, 7);
        assert_eq!(
            (f.size, f.blocks, f.mode, f.nlink),
            (12345, 24, libc::S_IFCHR | 0o4751, 3)
        );
        assert_eq!((f.uid, f.gid, f.rdev, f.blksize), (1000, 100, 0x0501, 4096));
        assert_eq!((f.atime, f.atimensec, f.mtime, f.mtimensec), (1, 2, 3, 4));
        assert_eq!((f.ctime as i64, f.ctimensec), (-5, 6));
        assert_eq!(dirent_type(FileType::Directory), libc::DT_DIR as u32);
    }

    #[test]
    fn setattr_masks_type_bits() {
        let s = set_attr(&abi::SetattrIn {
            valid: fattr::MODE
                | fattr::GID
                | fattr::SIZE
                | fattr::ATIME
                | fattr::ATIME_NOW
                | fattr::MTIME,
            mode: libc::S_IFREG | 0o644,
            gid: 5,
            mtime: (-2i64) as u64,
            mtimensec: 7,
            ..Default::default()
        });
        assert_eq!(s.perm, Some(0o644));
        assert_eq!((s.uid, s.gid, s.size), (None, Some(5), Some(0)));
        assert_eq!(s.atime, Some(SetTime::Now));
        assert_eq!(s.mtime, Some(SetTime::At(Timespec { sec: -2, nsec: 7 })));
    }

    #[test]
    fn mknod_types() {
        assert_eq!(mknod_kind(libc::S_IFREG | 0o644), Ok(FileType::Regular));
        assert_eq!(mknod_kind(0o644), Ok(FileType::Regular));
        assert_eq!(mknod_kind(libc::S_IFIFO | 0o600), Ok(FileType::Fifo));
        assert_eq!(mknod_kind(libc::S_IFSOCK | 0o600), Ok(FileType::Socket));
        assert_eq!(mknod_kind(libc::S_IFCHR), Ok(FileType::CharDevice));
        assert_eq!(mknod_kind(libc::S_IFDIR | 0o755), Err(Errno::EINVAL));
        assert_eq!(mknod_kind(libc::S_IFLNK), Err(Errno::EINVAL));
    }
}
