//! Extended attributes: the names, flags and limits of Linux's
//! `setxattr(2)` family, and who may read or change which attribute
//! (`fs/xattr.c`'s `xattr_permission`, the capability module's
//! `cap_inode_setxattr`, and `set_posix_acl`'s ownership rule).
//!
//! The Vfs checks everything here before a backend sees a request, in
//! Linux's order: the flags (EINVAL), the name's length (ERANGE: empty or
//! over 255 bytes), the value's size (E2BIG past 64 KiB), the walk, the
//! permission rules, and last the namespace (EOPNOTSUPP for a prefix no
//! handler knows, EINVAL for a known prefix with nothing after it).
//!
//! Namespaces served: `user.`, `trusted.`, `security.` and the two POSIX
//! ACL names `system.posix_acl_access` and `system.posix_acl_default`,
//! whose values the Vfs validates and enforces ([`crate::acl`]).
//!
//! ```
//! use dcache::xattr::{self, Namespace};
//! assert_eq!(xattr::resolve(b"user.mime_type"), Ok(Namespace::User));
//! assert_eq!(xattr::resolve(b"os2.x").unwrap_err(), dcache::Errno::EOPNOTSUPP);
//! // A size-0 buffer asks for the length; a short one is ERANGE.
//! assert_eq!(xattr::fit(b"abc", 0), Ok(None));
//! assert_eq!(xattr::fit(b"abc", 2).unwrap_err(), dcache::Errno::ERANGE);
//! assert_eq!(xattr::fit(b"abc", 8), Ok(Some(&b"abc"[..])));
//! ```

use crate::cred::{Caps, Cred};
use crate::errno::{Errno, Result};
use crate::permission::{generic_permission, owner_or_capable, Perm, MAY_WRITE};

/// `XATTR_CREATE`: fail with EEXIST if the attribute exists.
pub const XATTR_CREATE: i32 = 1;
/// `XATTR_REPLACE`: fail with ENODATA if the attribute does not exist.
pub const XATTR_REPLACE: i32 = 2;
/// Largest value (`XATTR_SIZE_MAX`); a larger one is E2BIG.
pub const XATTR_SIZE_MAX: usize = 65536;
/// Longest name, prefix included (`XATTR_NAME_MAX`); a longer one is ERANGE.
pub const XATTR_NAME_MAX: usize = 255;
/// Longest name list `listxattr` returns (`XATTR_LIST_MAX`); E2BIG past it.
pub const XATTR_LIST_MAX: usize = 65536;

/// The name of the POSIX access ACL.
pub const POSIX_ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// The name of the POSIX default ACL (directories only).
pub const POSIX_ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// The namespaces an attribute name can be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Namespace {
    /// `user.*`: regular files and directories, guarded by the file's mode.
    User,
    /// `trusted.*`: CAP_SYS_ADMIN only.
    Trusted,
    /// `security.*`: readable by all, written with CAP_SYS_ADMIN.
    Security,
    /// `system.posix_acl_access` / `system.posix_acl_default`: readable
    /// by all, written by the owner or CAP_FOWNER.
    PosixAcl,
}

/// The syntax checks of every call that takes a name: ERANGE when empty or
/// longer than [`XATTR_NAME_MAX`] (as the kernel's copy of the name from
/// user space answers), EINVAL when it holds a NUL.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    if name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// `setxattr`'s flags: only [`XATTR_CREATE`] and [`XATTR_REPLACE`]
/// (EINVAL otherwise; both together is accepted and can never succeed,
/// as on Linux).
pub fn check_flags(flags: i32) -> Result<()> {
    if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// A value's size: E2BIG past [`XATTR_SIZE_MAX`].
pub fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > XATTR_SIZE_MAX {
        return Err(Errno::E2BIG);
    }
    Ok(())
}

/// The namespace of `name` (Linux's handler lookup): EOPNOTSUPP for an
/// unknown prefix (and for `system.` names other than the two ACLs),
/// EINVAL for a known prefix with nothing after it.
pub fn resolve(name: &[u8]) -> Result<Namespace> {
    if name == POSIX_ACL_ACCESS || name == POSIX_ACL_DEFAULT {
        return Ok(Namespace::PosixAcl);
    }
    let (ns, rest) = if let Some(rest) = name.strip_prefix(b"user.") {
        (Namespace::User, rest)
    } else if let Some(rest) = name.strip_prefix(b"trusted.") {
        (Namespace::Trusted, rest)
    } else if let Some(rest) = name.strip_prefix(b"security.") {
        (Namespace::Security, rest)
    } else {
        return Err(Errno::EOPNOTSUPP);
    };
    if rest.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(ns)
}

/// May `cred` read (`write == false`: getxattr) or change (setxattr,
/// removexattr) the attribute `name` of an inode with mode, owner and
/// group `p`? Linux's rules, by prefix (the name need not be valid: an
/// unknown prefix is checked like `user.` data, as the kernel does, and
/// [`resolve`] refuses it afterwards):
///
/// - `security.*`: anyone reads; writing needs CAP_SYS_ADMIN (EPERM).
/// - `system.*`: the POSIX ACLs are read by anyone and written by the
///   owner or CAP_FOWNER (EPERM); other `system.` names are left to
///   [`resolve`].
/// - `trusted.*`: CAP_SYS_ADMIN, else ENODATA to read, EPERM to write.
/// - `user.*`: only on regular files and directories (ENODATA to read,
///   EPERM to write anything else); writing on a sticky directory needs
///   its ownership or CAP_FOWNER (EPERM); then read or write permission on
///   the inode (EACCES).
/// - anything else: read or write permission on the inode.
pub fn permission(cred: &Cred, p: Perm, name: &[u8], write: bool) -> Result<()> {
    permission_by(cred, p, name, write, |mask| {
        generic_permission(cred, p, mask)
    })
}

/// [`permission`] with the final read or write check on the inode made by
/// `check` (the Vfs's, which reads the inode's ACL).
pub(crate) fn permission_by(
    cred: &Cred,
    p: Perm,
    name: &[u8],
    write: bool,
    check: impl FnOnce(u32) -> Result<()>,
) -> Result<()> {
    let mask = if write {
        MAY_WRITE
    } else {
        crate::permission::MAY_READ
    };
    if name.starts_with(b"security.") {
        return if write && !cred.has(Caps::SYS_ADMIN) {
            Err(Errno::EPERM)
        } else {
            Ok(())
        };
    }
    if name.starts_with(b"system.") {
        let acl = name == POSIX_ACL_ACCESS || name == POSIX_ACL_DEFAULT;
        return if acl && write && !owner_or_capable(cred, p.uid) {
            Err(Errno::EPERM)
        } else {
            Ok(())
        };
    }
    if name.starts_with(b"trusted.") {
        return match (cred.has(Caps::SYS_ADMIN), write) {
            (true, _) => Ok(()),
            (false, true) => Err(Errno::EPERM),
            (false, false) => Err(Errno::ENODATA),
        };
    }
    if name.starts_with(b"user.") {
        let fmt = p.mode & libc::S_IFMT;
        if fmt != libc::S_IFREG && fmt != libc::S_IFDIR {
            return Err(if write { Errno::EPERM } else { Errno::ENODATA });
        }
        if write && p.is_dir() && p.mode & 0o1000 != 0 && !owner_or_capable(cred, p.uid) {
            return Err(Errno::EPERM);
        }
    }
    check(mask)
}

/// Whether `cred` sees `name` in a listing: `trusted.*` names only with
/// CAP_SYS_ADMIN, as tmpfs lists them.
pub fn visible(cred: &Cred, name: &[u8]) -> bool {
    !name.starts_with(b"trusted.") || cred.has(Caps::SYS_ADMIN)
}

/// Keep the names of a `listxattr` list (each NUL-terminated) that `cred`
/// may see (see [`visible`]); a final name without its NUL is dropped.
pub fn filter_list(cred: &Cred, list: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(list.len());
    for name in names(list) {
        if visible(cred, name) {
            out.extend_from_slice(name);
            out.push(0);
        }
    }
    out
}

/// The names of a `listxattr` list (each NUL-terminated; empty entries and
/// an unterminated tail are skipped).
pub fn names(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    let end = list.iter().rposition(|&b| b == 0).map_or(0, |i| i + 1);
    list[..end].split(|&b| b == 0).filter(|n| !n.is_empty())
}

/// What a caller who offered a buffer of `size` bytes gets for `value` (a
/// value or a name list): `Ok(None)` for `size` 0, a probe (answer with
/// `value.len()`); ERANGE when it does not fit; the bytes otherwise.
pub fn fit(value: &[u8], size: usize) -> Result<Option<&[u8]>> {
    if size == 0 {
        Ok(None)
    } else if value.len() > size {
        Err(Errno::ERANGE)
    } else {
        Ok(Some(value))
    }
}

/// [`fit`] in `getxattr(2)`'s shape: copy `value` into `buf` and return
/// its length; an empty `buf` only returns the length; ERANGE when `buf`
/// is too short.
pub fn copy_out(value: &[u8], buf: &mut [u8]) -> Result<usize> {
    if let Some(v) = fit(value, buf.len())? {
        buf[..v.len()].copy_from_slice(v);
    }
    Ok(value.len())
}

/// If the POSIX ACL xattr `value` (version 2: a 4-byte header, then
/// 8-byte entries of tag, permissions and id, little-endian) says no more
/// than permission bits can (only the owner, group and other entries),
/// those bits (`0o777` part of a mode); `None` for an ACL with named users
/// or groups or a mask, or a value that is not a well-formed ACL. Linux
/// stores no such minimal access ACL: it sets the mode instead
/// (`posix_acl_equiv_mode`), which is what the Vfs does with one.
pub fn acl_equiv_mode(value: &[u8]) -> Option<u16> {
    const VERSION: u32 = 2;
    let (head, entries) = value.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*head) != VERSION || entries.is_empty() || entries.len() % 8 != 0 {
        return None;
    }
    let mut perm = 0u16;
    for e in entries.chunks_exact(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let bits = u16::from_le_bytes([e[2], e[3]]) & 0o7;
        match tag {
            0x01 => perm |= bits << 6,
            0x04 => perm |= bits << 3,
            0x20 => perm |= bits,
            _ => return None,
        }
    }
    Some(perm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mode: u32, uid: u32) -> Perm {
        Perm {
            mode: libc::S_IFREG | mode,
            uid,
            gid: uid,
        }
    }

    #[test]
    fn names_and_namespaces() {
        assert_eq!(check_name(b""), Err(Errno::ERANGE));
        assert_eq!(check_name(&[b'a'; 256]), Err(Errno::ERANGE));
        assert_eq!(check_name(&[b'a'; 255]), Ok(()));
        assert_eq!(check_name(b"user.a\0b"), Err(Errno::EINVAL));
        assert_eq!(resolve(b"user."), Err(Errno::EINVAL));
        assert_eq!(resolve(b"system.foo"), Err(Errno::EOPNOTSUPP));
        assert_eq!(resolve(b"user"), Err(Errno::EOPNOTSUPP));
        assert_eq!(
            resolve(b"system.posix_acl_default"),
            Ok(Namespace::PosixAcl)
        );
        assert_eq!(resolve(b"security.selinux"), Ok(Namespace::Security));
        assert_eq!(resolve(b"trusted.overlay.opaque"), Ok(Namespace::Trusted));
        assert_eq!(check_flags(XATTR_CREATE | XATTR_REPLACE), Ok(()));
        assert_eq!(check_flags(4), Err(Errno::EINVAL));
        assert_eq!(check_value(&vec![0; XATTR_SIZE_MAX]), Ok(()));
        assert_eq!(check_value(&vec![0; XATTR_SIZE_MAX + 1]), Err(Errno::E2BIG));
    }

    #[test]
    fn permission_rules() {
        let bob = Cred::user(1001, 1001, &[]);
        let root = Cred::root();
        let f = file(0o644, 0);
        assert_eq!(permission(&bob, f, b"user.a", false), Ok(()));
        assert_eq!(permission(&bob, f, b"user.a", true), Err(Errno::EACCES));
        assert_eq!(
            permission(&bob, f, b"trusted.a", false),
            Err(Errno::ENODATA)
        );
        assert_eq!(permission(&bob, f, b"trusted.a", true), Err(Errno::EPERM));
        assert_eq!(permission(&bob, f, b"security.a", false), Ok(()));
        assert_eq!(permission(&bob, f, b"security.a", true), Err(Errno::EPERM));
        assert_eq!(
            permission(&bob, f, POSIX_ACL_ACCESS, true),
            Err(Errno::EPERM)
        );
        assert_eq!(
            permission(&bob, file(0o600, 1001), POSIX_ACL_ACCESS, true),
            Ok(())
        );
        assert_eq!(permission(&bob, f, b"bogus.a", true), Err(Errno::EACCES));
        for name in [
            &b"trusted.a"[..],
            b"security.a",
            b"user.a",
            POSIX_ACL_ACCESS,
        ] {
            assert_eq!(permission(&root, f, name, true), Ok(()));
        }
        let link = Perm {
            mode: libc::S_IFLNK | 0o777,
            uid: 0,
            gid: 0,
        };
        assert_eq!(permission(&root, link, b"user.a", true), Err(Errno::EPERM));
        assert_eq!(
            permission(&root, link, b"user.a", false),
            Err(Errno::ENODATA)
        );
        assert_eq!(permission(&root, link, b"trusted.a", true), Ok(()));
        let sticky = Perm {
            mode: libc::S_IFDIR | 0o1777,
            uid: 0,
            gid: 0,
        };
        assert_eq!(permission(&bob, sticky, b"user.a", true), Err(Errno::EPERM));
        assert_eq!(permission(&bob, sticky, b"user.a", false), Ok(()));
        assert_eq!(permission(&root, sticky, b"user.a", true), Ok(()));
    }

    #[test]
    fn lists_and_sizes() {
        let bob = Cred::user(1001, 1001, &[]);
        let list = b"user.a\0trusted.b\0security.c\0";
        assert_eq!(filter_list(&bob, list), b"user.a\0security.c\0");
        assert_eq!(filter_list(&Cred::root(), list), list);
        assert_eq!(names(b"a\0\0b\0c").collect::<Vec<_>>(), [&b"a"[..], b"b"]);
        let mut buf = [0u8; 4];
        assert_eq!(copy_out(b"xyz", &mut buf), Ok(3));
        assert_eq!(&buf[..3], b"xyz");
        assert_eq!(copy_out(b"xyz", &mut []), Ok(3));
        assert_eq!(copy_out(b"xyzzy", &mut buf), Err(Errno::ERANGE));
    }

    #[test]
    fn minimal_acls_are_modes() {
        let acl = |entries: &[(u16, u16)]| {
            let mut v = 2u32.to_le_bytes().to_vec();
            for &(tag, perm) in entries {
                v.extend_from_slice(&tag.to_le_bytes());
                v.extend_from_slice(&perm.to_le_bytes());
                v.extend_from_slice(&u32::MAX.to_le_bytes());
            }
            v
        };
        assert_eq!(
            acl_equiv_mode(&acl(&[(1, 7), (4, 5), (0x20, 4)])),
            Some(0o754)
        );
        assert_eq!(
            acl_equiv_mode(&acl(&[(1, 7), (2, 5), (4, 5), (0x20, 4)])),
            None
        );
        assert_eq!(
            acl_equiv_mode(&acl(&[(1, 7), (4, 5), (0x10, 5), (0x20, 4)])),
            None
        );
        assert_eq!(acl_equiv_mode(b"xxxx"), None);
        assert_eq!(acl_equiv_mode(&acl(&[])), None);
    }
}
