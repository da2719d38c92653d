//! The `access(2)` check, for mounts without `default_permissions` (with it
//! the kernel checks modes itself and never asks).
//!
//! POSIX's rule on the cached attributes: the owner class if the caller
//! owns the file, else the group class if the file's group is one of the
//! caller's groups, else the other class. Root passes, except that it may
//! execute only a directory or a file with at least one execute bit.

use crate::errno::{Errno, Result};
use crate::fs::{Attr, FileType};

/// Who asks. `groups` lists supplementary groups (looked up only when the
/// owner and primary-group classes did not apply).
pub struct Caller<'a> {
    pub uid: u32,
    pub gid: u32,
    pub groups: &'a dyn Fn() -> Vec<u32>,
}

/// May `who` access a file with attributes `a` for `mask` (R_OK, W_OK,
/// X_OK bits; F_OK = 0 only asks whether it exists)?
pub fn check(a: &Attr, who: &Caller<'_>, mask: i32) -> Result<()> {
    let want = (mask & (libc::R_OK | libc::W_OK | libc::X_OK)) as u16;
    if want == 0 {
        return Ok(());
    }
    if who.uid == 0 {
        let exec_ok = a.kind == FileType::Directory || a.perm & 0o111 != 0;
        if want & libc::X_OK as u16 != 0 && !exec_ok {
            return Err(Errno::EACCES);
        }
        return Ok(());
    }
    let class = if who.uid == a.uid {
        a.perm >> 6
    } else if who.gid == a.gid || (who.groups)().contains(&a.gid) {
        a.perm >> 3
    } else {
        a.perm
    } & 0o7;
    if class & want == want {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// The supplementary groups of process `pid`, from `/proc/PID/status`
/// (empty if it is gone or unreadable).
pub fn proc_groups(pid: u32) -> Vec<u32> {
    crate::cred::task_groups(pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Timespec;

    fn attr(kind: FileType, perm: u16, uid: u32, gid: u32) -> Attr {
        Attr {
            ino: 2,
            size: 0,
            blocks: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            kind,
            perm,
            nlink: 1,
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
        }
    }

    fn no_groups() -> Vec<u32> {
        Vec::new()
    }

    fn caller(uid: u32, gid: u32) -> Caller<'static> {
        Caller {
            uid,
            gid,
            groups: &no_groups,
        }
    }

    const R: i32 = libc::R_OK;
    const W: i32 = libc::W_OK;
    const X: i32 = libc::X_OK;

    #[test]
    fn classes() {
        let f = attr(FileType::Regular, 0o640, 1000, 100);
        assert_eq!(check(&f, &caller(1000, 1), R | W), Ok(()));
        assert_eq!(check(&f, &caller(1000, 1), X), Err(Errno::EACCES));
        assert_eq!(check(&f, &caller(2000, 100), R), Ok(()));
        assert_eq!(check(&f, &caller(2000, 100), W), Err(Errno::EACCES));
        assert_eq!(check(&f, &caller(2000, 200), R), Err(Errno::EACCES));
        assert_eq!(check(&f, &caller(2000, 200), libc::F_OK), Ok(()));
        // The owner class applies even when it grants less than others.
        let g = attr(FileType::Regular, 0o077, 1000, 100);
        assert_eq!(check(&g, &caller(1000, 100), R), Err(Errno::EACCES));
    }

    #[test]
    fn supplementary_groups() {
        let f = attr(FileType::Regular, 0o060, 1000, 100);
        let groups = || vec![7, 100];
        let who = Caller {
            uid: 2000,
            gid: 5,
            groups: &groups,
        };
        assert_eq!(check(&f, &who, R | W), Ok(()));
        assert_eq!(check(&f, &caller(2000, 5), R), Err(Errno::EACCES));
    }

    #[test]
    fn root() {
        let f = attr(FileType::Regular, 0o000, 1000, 100);
        assert_eq!(check(&f, &caller(0, 0), R | W), Ok(()));
        assert_eq!(check(&f, &caller(0, 0), X), Err(Errno::EACCES));
        let fx = attr(FileType::Regular, 0o001, 1000, 100);
        assert_eq!(check(&fx, &caller(0, 0), X), Ok(()));
        let d = attr(FileType::Directory, 0o000, 1000, 100);
        assert_eq!(check(&d, &caller(0, 0), R | W | X), Ok(()));
    }

    #[test]
    fn groups_line() {
        let s = "Name:\tx\nUid:\t0\t0\t0\t0\nGroups:\t4 24 100 \nNgid:\t0\n";
        assert_eq!(crate::cred::parse_groups(s), vec![4, 24, 100]);
        assert_eq!(crate::cred::parse_groups("Groups:\n"), Vec::<u32>::new());
        assert!(proc_groups(u32::MAX).is_empty());
    }
}
