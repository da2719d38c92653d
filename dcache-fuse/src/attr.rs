//! Between dcache's attribute types and fuser's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, INodeNo, TimeOrNow};

use dcache::errno::{Errno, Result};
use dcache::fs::{Attr, FileType, SetAttr, SetTime, Timespec};

/// fuser's file type for ours.
pub fn kind(k: FileType) -> fuser::FileType {
    match k {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
    }
}

/// A `Timespec` (seconds may be negative) as a `SystemTime`.
#[inline]
pub fn system_time(t: Timespec) -> SystemTime {
    let nsec = t.nsec.min(999_999_999);
    if t.sec >= 0 {
        // One addition (every reply converts three times): nsec < 1e9, so
        // Duration::new does not carry.
        UNIX_EPOCH + Duration::new(t.sec as u64, nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs())
            + Duration::from_nanos(u64::from(nsec))
    }
}

/// A `SystemTime` as a `Timespec` (before 1970: negative seconds, the
/// nanoseconds still counting forward, as `struct timespec` does).
pub fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            let sec = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                Timespec { sec: -sec, nsec: 0 }
            } else {
                Timespec {
                    sec: -sec - 1,
                    nsec: 1_000_000_000 - d.subsec_nanos(),
                }
            }
        }
    }
}

/// `a` as the kernel should see it. `a.ino` is the node id, which is also
/// the `st_ino` the kernel reports (fuser sends one value for both).
#[inline]
pub fn file_attr(a: &Attr) -> FileAttr {
    let ctime = system_time(a.ctime);
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime,
        crtime: ctime,
        kind: kind(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

/// The entry of a negative lookup reply: node id 0 tells the kernel to
/// cache the name as missing for the entry timeout.
pub fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(timespec(t)),
    }
}

/// What a FUSE setattr asks for. `mode` arrives with the type bits; only
/// the permission bits are changeable.
pub fn set_attr(
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
) -> SetAttr {
    SetAttr {
        perm: mode.map(|m| (m & 0o7777) as u16),
        uid,
        gid,
        size,
        atime: atime.map(set_time),
        mtime: mtime.map(set_time),
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
    fn times_round_trip_before_and_after_the_epoch() {
        for t in [
            Timespec { sec: 0, nsec: 0 },
            Timespec {
                sec: 1_700_000_000,
                nsec: 123_456_789,
            },
            Timespec {
                sec: -1,
                nsec: 500_000_000,
            },
            Timespec {
                sec: -86400,
                nsec: 0,
            },
        ] {
            assert_eq!(timespec(system_time(t)), t);
        }
    }

    #[test]
    fn attr_keeps_every_field() {
        let a = Attr {
            ino: 7,
            size: 12345,
            blocks: 24,
            atime: Timespec { sec: 1, nsec: 2 },
            mtime: Timespec { sec: 3, nsec: 4 },
            ctime: Timespec { sec: 5, nsec: 6 },
            kind: FileType::CharDevice,
            perm: 0o4751,
            nlink: 3,
            uid: 1000,
            gid: 100,
            rdev: 0x0501,
            blksize: 4096,
        };
        let f = file_attr(&a);
        assert_eq!(f.ino, INodeNo(7));
        assert_eq!((f.size, f.blocks, f.perm, f.nlink), (12345, 24, 0o4751, 3));
        assert_eq!((f.uid, f.gid, f.rdev, f.blksize), (1000, 100, 0x0501, 4096));
        assert_eq!(f.kind, fuser::FileType::CharDevice);
        assert_eq!(timespec(f.atime), a.atime);
        assert_eq!(timespec(f.mtime), a.mtime);
        assert_eq!(timespec(f.ctime), a.ctime);
    }

    #[test]
    fn setattr_masks_type_bits() {
        let s = set_attr(
            Some(libc::S_IFREG | 0o644),
            None,
            Some(5),
            Some(0),
            Some(TimeOrNow::Now),
            None,
        );
        assert_eq!(s.perm, Some(0o644));
        assert_eq!((s.uid, s.gid, s.size), (None, Some(5), Some(0)));
        assert_eq!(s.atime, Some(SetTime::Now));
        assert_eq!(s.mtime, None);
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
