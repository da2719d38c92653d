//! Linux's permission rules as pure functions of a credential and an
//! inode's mode, owner and group (`fs/namei.c`'s `generic_permission`,
//! `check_sticky`; `fs/attr.c`'s `setattr_prepare`). The walk and the
//! operations call them; no backend does its own checks.

use crate::cred::{Caps, Cred};
use crate::errno::{Errno, Result};

/// Execute (search, for a directory).
pub const MAY_EXEC: u32 = 1;
/// Write (create or remove names, for a directory).
pub const MAY_WRITE: u32 = 2;
/// Read (list, for a directory).
pub const MAY_READ: u32 = 4;

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;
const S_IXGRP: u32 = 0o010;
const S_IXUGO: u32 = 0o111;

/// What a check reads of an inode: the full `st_mode`, owner and group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Perm {
    /// The full `st_mode` (type and permission bits).
    pub mode: u32,
    /// The owner.
    pub uid: u32,
    /// The group.
    pub gid: u32,
}

impl Perm {
    /// True if the mode's type is a directory.
    #[inline(always)]
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
}

/// In a cached inode's mode word, above the `st_mode` bits: whether the
/// inode may have a POSIX access ACL not yet read (Linux's
/// `ACL_NOT_CACHED`). Neither bit set: it has none (`cache_no_acl`).
pub(crate) const I_ACL_UNKNOWN: u32 = 1 << 16;
/// In a cached inode's mode word: it has an access ACL, cached by the Vfs.
pub(crate) const I_ACL: u32 = 1 << 17;
/// Both ACL state bits.
pub(crate) const I_ACL_BITS: u32 = I_ACL_UNKNOWN | I_ACL;

/// A directory everyone may search: one test, no credential needed (Linux
/// 6.19's fast path). `mode` may be a cached inode's mode word, whose ACL
/// state bits (an ACL, or one not read yet) make it false at no extra
/// cost: the same AND and compare, with a wider mask.
#[inline(always)]
pub fn search_for_all(mode: u32) -> bool {
    mode & (S_IXUGO | I_ACL_BITS) == S_IXUGO
}

/// `generic_permission`: may `cred` access `p` for `mask` (MAY_*)? EACCES
/// if not.
pub fn generic_permission(cred: &Cred, p: Perm, mask: u32) -> Result<()> {
    let owner = cred.fsuid == p.uid;
    if owner && mask & !(p.mode >> 6) & 7 == 0 {
        return Ok(());
    }
    // The capability overrides do not depend on the class, so they are
    // tried before the group class, which may need the supplementary
    // groups (read from /proc for a FUSE request).
    if capable_override(cred, p, mask) {
        return Ok(());
    }
    if owner {
        return Err(Errno::EACCES);
    }
    let class = if cred.in_group(p.gid) {
        p.mode >> 3
    } else {
        p.mode
    };
    if mask & !class & 7 == 0 {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// Whether a capability grants `mask` on `p` whatever its mode grants.
#[inline]
pub(crate) fn capable_override(cred: &Cred, p: Perm, mask: u32) -> bool {
    if p.is_dir() {
        // Directories: reading and searching yield to DAC_READ_SEARCH,
        // everything to DAC_OVERRIDE.
        return (mask & MAY_WRITE == 0 && cred.has(Caps::DAC_READ_SEARCH))
            || cred.has(Caps::DAC_OVERRIDE);
    }
    let mask = mask & (MAY_READ | MAY_WRITE | MAY_EXEC);
    if mask == MAY_READ && cred.has(Caps::DAC_READ_SEARCH) {
        return true;
    }
    // Execute yields to DAC_OVERRIDE only where some x bit is set.
    (mask & MAY_EXEC == 0 || p.mode & S_IXUGO != 0) && cred.has(Caps::DAC_OVERRIDE)
}

/// Search permission on a directory (`may_lookup`).
#[inline(always)]
pub fn may_search(cred: &Cred, p: Perm) -> Result<()> {
    if search_for_all(p.mode) {
        return Ok(());
    }
    generic_permission(cred, p, MAY_EXEC)
}

/// Whether `cred` counts as the owner of a file owned by `uid`
/// (`inode_owner_or_capable`).
#[inline]
pub fn owner_or_capable(cred: &Cred, uid: u32) -> bool {
    cred.fsuid == uid || cred.has(Caps::FOWNER)
}

/// `check_sticky`: in a sticky directory only the file's owner, the
/// directory's owner or CAP_FOWNER may remove or rename a name. True when
/// the sticky bit forbids it.
pub fn sticky_forbids(cred: &Cred, dir: Perm, file_uid: u32) -> bool {
    dir.mode & S_ISVTX != 0
        && cred.fsuid != file_uid
        && cred.fsuid != dir.uid
        && !cred.has(Caps::FOWNER)
}

/// `may_delete` without the type checks: write and search on the
/// directory, then the sticky bit (EPERM).
pub fn may_delete(cred: &Cred, dir: Perm, victim_uid: u32) -> Result<()> {
    generic_permission(cred, dir, MAY_WRITE | MAY_EXEC)?;
    if sticky_forbids(cred, dir, victim_uid) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// `may_create`: write and search on the directory.
#[inline]
pub fn may_create(cred: &Cred, dir: Perm) -> Result<()> {
    generic_permission(cred, dir, MAY_WRITE | MAY_EXEC)
}

/// What `open` needs of a file for its access mode and `O_TRUNC`.
pub fn open_mask(flags: i32) -> u32 {
    let mut mask = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => MAY_READ,
        libc::O_WRONLY => MAY_WRITE,
        _ => MAY_READ | MAY_WRITE,
    };
    if flags & libc::O_TRUNC != 0 {
        mask |= MAY_WRITE;
    }
    mask
}

/// A chmod by `cred` of a file `p` to `perm` (the 12 permission bits):
/// EPERM unless the owner or CAP_FOWNER; returns the bits to set, with
/// S_ISGID cleared where Linux clears it (the caller is not in the file's
/// group and lacks CAP_FSETID).
pub fn chmod(cred: &Cred, p: Perm, perm: u16) -> Result<u16> {
    if !owner_or_capable(cred, p.uid) {
        return Err(Errno::EPERM);
    }
    let mut perm = perm;
    if u32::from(perm) & S_ISGID != 0 && !cred.has(Caps::FSETID) && !cred.in_group(p.gid) {
        perm &= !(S_ISGID as u16);
    }
    Ok(perm)
}

/// A chown/chgrp by `cred` of `p` (`None`: unchanged): EPERM unless
/// allowed (`chown_ok`, `chgrp_ok`).
pub fn chown(cred: &Cred, p: Perm, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
    if cred.has(Caps::CHOWN) {
        return Ok(());
    }
    if let Some(u) = uid {
        let same = u == p.uid && cred.fsuid == p.uid;
        if !same {
            return Err(Errno::EPERM);
        }
    }
    if let Some(g) = gid {
        let own = cred.fsuid == p.uid && (g == p.gid || cred.in_group(g));
        // Linux: the owner may "change" to the same uid and a group it is
        // in; anything else needs CAP_CHOWN.
        let uid_ok = uid.is_none_or(|u| u == p.uid);
        if !(own && uid_ok) {
            return Err(Errno::EPERM);
        }
    }
    Ok(())
}

/// The permission bits and group of a new inode in directory `dir`
/// (Linux's `inode_init_owner`): a set-group-ID directory hands its group
/// down, and its set-gid bit to subdirectories; otherwise the creator's
/// `gid`. For backends that make inodes themselves.
pub fn inode_init_owner(dir: Perm, gid: u32, perm: u16, is_dir: bool) -> (u16, u32) {
    let perm = perm & 0o7777;
    if dir.mode & S_ISGID == 0 {
        return (perm, gid);
    }
    let setgid = if is_dir { S_ISGID as u16 } else { 0 };
    (perm | setgid, dir.gid)
}

/// After a chown of a non-directory, the mode Linux leaves: S_ISUID
/// cleared, and S_ISGID cleared when group-executable (always, whoever
/// asks). `None` when nothing changes.
pub fn mode_after_chown(p: Perm) -> Option<u16> {
    if p.is_dir() {
        return None;
    }
    let mut m = p.mode & 0o7777;
    m &= !S_ISUID;
    if p.mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP {
        m &= !S_ISGID;
    }
    (m != p.mode & 0o7777).then_some(m as u16)
}

/// After a write or truncate by `cred` without CAP_FSETID, the mode Linux
/// leaves (`file_remove_privs`, `setattr_should_drop_suidgid`): S_ISUID
/// cleared, and S_ISGID cleared when group-executable or when the caller
/// is not in the file's group (Linux 6.x). `None` when nothing changes.
pub fn mode_after_write(cred: &Cred, p: Perm) -> Option<u16> {
    if p.is_dir() || cred.has(Caps::FSETID) {
        return None;
    }
    mode_after_write_by(p, !cred.in_group(p.gid))
}

/// [`mode_after_write`] for a writer known to lack CAP_FSETID, given
/// whether it is outside the file's group.
pub fn mode_after_write_by(p: Perm, outside_group: bool) -> Option<u16> {
    if p.is_dir() {
        return None;
    }
    let mut m = p.mode & 0o7777;
    m &= !S_ISUID;
    if m & S_ISGID != 0 && (m & S_IXGRP != 0 || outside_group) {
        m &= !S_ISGID;
    }
    (m != p.mode & 0o7777).then_some(m as u16)
}

/// The permission bits of a new non-directory (`mode_strip_sgid`): in a
/// setgid directory, whose group the file gets, S_ISGID with group execute
/// is dropped unless the caller is in that group or has CAP_FSETID.
pub fn mode_strip_sgid(cred: &Cred, dir: Perm, perm: u16) -> u16 {
    let p = perm as u32;
    if p & (S_ISGID | S_IXGRP) != S_ISGID | S_IXGRP
        || dir.mode & S_ISGID == 0
        || cred.in_group(dir.gid)
        || cred.has(Caps::FSETID)
    {
        return perm;
    }
    (p & !S_ISGID) as u16
}

/// `may_linkat` under `fs.protected_hardlinks` (Linux's default): the
/// owner or CAP_FOWNER may link anything; others only a regular file that
/// is not set-user-ID, nor set-group-ID and group-executable, and that
/// they may read and write.
pub fn may_hardlink(cred: &Cred, p: Perm, regular: bool) -> bool {
    may_hardlink_by(cred, p, regular, || {
        generic_permission(cred, p, MAY_READ | MAY_WRITE).is_ok()
    })
}

/// [`may_hardlink`] with the read and write check made by `may_rw` (the
/// Vfs's, which reads an ACL).
pub(crate) fn may_hardlink_by(
    cred: &Cred,
    p: Perm,
    regular: bool,
    may_rw: impl FnOnce() -> bool,
) -> bool {
    if owner_or_capable(cred, p.uid) {
        return true;
    }
    regular
        && p.mode & S_ISUID == 0
        && p.mode & (S_ISGID | S_IXGRP) != S_ISGID | S_IXGRP
        && may_rw()
}

/// Setting times: to now needs ownership or write permission (EACCES),
/// explicit times ownership (EPERM); CAP_FOWNER counts as ownership.
pub fn utimes(cred: &Cred, p: Perm, explicit: bool) -> Result<()> {
    if owner_or_capable(cred, p.uid) {
        return Ok(());
    }
    if explicit {
        return Err(Errno::EPERM);
    }
    generic_permission(cred, p, MAY_WRITE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mode: u32, uid: u32, gid: u32) -> Perm {
        Perm {
            mode: 0o100_000 | mode,
            uid,
            gid,
        }
    }

    fn dir(mode: u32, uid: u32, gid: u32) -> Perm {
        Perm {
            mode: S_IFDIR | mode,
            uid,
            gid,
        }
    }

    #[test]
    fn classes_owner_group_other() {
        let u = Cred::user(1000, 100, &[200]);
        // Owner class decides for the owner, even if it grants less.
        assert_eq!(
            generic_permission(&u, file(0o077, 1000, 1), MAY_READ),
            Err(Errno::EACCES)
        );
        assert!(generic_permission(&u, file(0o040, 1, 100), MAY_READ).is_ok());
        assert!(generic_permission(&u, file(0o040, 1, 200), MAY_READ).is_ok());
        assert!(generic_permission(&u, file(0o004, 1, 300), MAY_READ).is_ok());
        assert_eq!(
            generic_permission(&u, file(0o704, 1, 200), MAY_READ),
            Err(Errno::EACCES)
        );
    }

    #[test]
    fn capabilities_override_as_linux() {
        let r = Cred::root();
        assert!(generic_permission(&r, file(0, 5, 5), MAY_READ | MAY_WRITE).is_ok());
        // No x bit anywhere: even root may not execute.
        assert_eq!(
            generic_permission(&r, file(0o666, 5, 5), MAY_EXEC),
            Err(Errno::EACCES)
        );
        assert!(generic_permission(&r, file(0o100, 5, 5), MAY_EXEC).is_ok());
        assert!(generic_permission(&r, dir(0, 5, 5), MAY_EXEC | MAY_WRITE).is_ok());
        let rs = Cred::user(7, 7, &[]).with_caps(Caps::DAC_READ_SEARCH);
        assert!(generic_permission(&rs, dir(0, 5, 5), MAY_EXEC | MAY_READ).is_ok());
        assert_eq!(
            generic_permission(&rs, dir(0, 5, 5), MAY_WRITE),
            Err(Errno::EACCES)
        );
        assert!(generic_permission(&rs, file(0, 5, 5), MAY_READ).is_ok());
        assert_eq!(
            generic_permission(&rs, file(0, 5, 5), MAY_WRITE),
            Err(Errno::EACCES)
        );
    }

    /// access(2)'s cases (what FUSE ACCESS answers), as the frontend's own
    /// check answered them before it used these rules.
    #[test]
    fn access_cases() {
        let (r, w, x) = (MAY_READ, MAY_WRITE, MAY_EXEC);
        let f = file(0o640, 1000, 100);
        assert_eq!(
            generic_permission(&Cred::user(1000, 1, &[]), f, r | w),
            Ok(())
        );
        assert_eq!(
            generic_permission(&Cred::user(1000, 1, &[]), f, x),
            Err(Errno::EACCES)
        );
        assert_eq!(
            generic_permission(&Cred::user(2000, 100, &[]), f, r),
            Ok(())
        );
        assert_eq!(
            generic_permission(&Cred::user(2000, 100, &[]), f, w),
            Err(Errno::EACCES)
        );
        assert_eq!(
            generic_permission(&Cred::user(2000, 200, &[]), f, r),
            Err(Errno::EACCES)
        );
        let g = file(0o077, 1000, 100);
        assert_eq!(
            generic_permission(&Cred::user(1000, 100, &[]), g, r),
            Err(Errno::EACCES)
        );
        let s = file(0o060, 1000, 100);
        assert_eq!(
            generic_permission(&Cred::user(2000, 5, &[7, 100]), s, r | w),
            Ok(())
        );
        assert_eq!(
            generic_permission(&Cred::user(2000, 5, &[]), s, r),
            Err(Errno::EACCES)
        );
        let root = Cred::root();
        assert_eq!(generic_permission(&root, file(0, 1000, 100), r | w), Ok(()));
        assert_eq!(
            generic_permission(&root, file(0, 1000, 100), x),
            Err(Errno::EACCES)
        );
        assert_eq!(generic_permission(&root, file(0o001, 1000, 100), x), Ok(()));
        assert_eq!(
            generic_permission(&root, dir(0, 1000, 100), r | w | x),
            Ok(())
        );
    }

    #[test]
    fn sticky_and_ownership_rules() {
        let u = Cred::user(1000, 100, &[]);
        let t = dir(0o1777, 0, 0);
        assert_eq!(may_delete(&u, t, 5), Err(Errno::EPERM));
        assert!(may_delete(&u, t, 1000).is_ok());
        assert!(may_delete(&u, dir(0o1777, 1000, 0), 5).is_ok());
        assert_eq!(chmod(&u, file(0o644, 5, 5), 0o600), Err(Errno::EPERM));
        assert_eq!(chmod(&u, file(0o644, 1000, 5), 0o2755), Ok(0o755));
        assert_eq!(chmod(&u, file(0o644, 1000, 100), 0o2755), Ok(0o2755));
        assert_eq!(
            chown(&u, file(0, 1000, 100), Some(5), None),
            Err(Errno::EPERM)
        );
        assert!(chown(&u, file(0, 1000, 100), Some(1000), None).is_ok());
        assert_eq!(
            chown(&u, file(0, 1000, 100), None, Some(7)),
            Err(Errno::EPERM)
        );
        let g = Cred::user(1000, 100, &[7]);
        assert!(chown(&g, file(0, 1000, 100), None, Some(7)).is_ok());
        assert_eq!(mode_after_chown(file(0o6755, 1, 1)), Some(0o755));
        assert_eq!(mode_after_chown(file(0o6745, 1, 1)), Some(0o2745));
        assert_eq!(mode_after_chown(dir(0o2755, 1, 1)), None);
        assert_eq!(utimes(&u, file(0o666, 5, 5), false), Ok(()));
        assert_eq!(utimes(&u, file(0o666, 5, 5), true), Err(Errno::EPERM));
        assert_eq!(utimes(&u, file(0o644, 5, 5), false), Err(Errno::EACCES));
    }

    #[test]
    fn new_files_in_setgid_directories() {
        let u = Cred::user(1002, 300, &[]);
        let sg = dir(0o2777, 0, 200);
        assert_eq!(mode_strip_sgid(&u, sg, 0o2755), 0o755);
        // Without group execute, or in the group, or not setgid: kept.
        assert_eq!(mode_strip_sgid(&u, sg, 0o2745), 0o2745);
        assert_eq!(mode_strip_sgid(&u, dir(0o2777, 0, 300), 0o2755), 0o2755);
        assert_eq!(mode_strip_sgid(&u, dir(0o777, 0, 200), 0o2755), 0o2755);
        assert_eq!(mode_strip_sgid(&Cred::root(), sg, 0o2755), 0o2755);
    }
}
