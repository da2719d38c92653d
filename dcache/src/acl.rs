//! POSIX access control lists as Linux keeps them (`fs/posix_acl.c`): the
//! xattr format of `system.posix_acl_access` / `system.posix_acl_default`
//! (`posix_acl_xattr_header` version 2, then 8-byte entries `{tag: u16,
//! perm: u16, id: u32}`, little-endian), the validity rules
//! (`posix_acl_valid`), the check (`posix_acl_permission`) and the rules
//! that keep an access ACL and the permission bits in step
//! (`posix_acl_update_mode`, `posix_acl_chmod`, `posix_acl_create`).
//!
//! Pure functions of the ACL, the mode and the caller; the Vfs calls them
//! (`crate::vfs`), and a backend or frontend may too.
//!
//! ```
//! use dcache::acl::{PosixAcl, ACL_USER};
//! let acl = PosixAcl::from_text("u::rw-,u:65534:r--,g::---,m::r--,o::---").unwrap();
//! assert!(acl.entries().iter().any(|e| e.tag == ACL_USER && e.id == 65534));
//! assert_eq!(PosixAcl::from_xattr(&acl.to_xattr()), Ok(Some(acl.clone())));
//! // The mode shows the mask as group bits; named entries need the ACL.
//! assert_eq!(acl.equiv_mode(0o100_644), (0o100_640, true));
//! ```

use crate::cred::Cred;
use crate::errno::{Errno, Result};
use crate::permission::{
    capable_override, generic_permission, Perm, MAY_EXEC, MAY_READ, MAY_WRITE,
};

/// The file owner's entry (the mode's owner bits).
pub const ACL_USER_OBJ: u16 = 0x01;
/// A named user's entry (limited by the mask).
pub const ACL_USER: u16 = 0x02;
/// The owning group's entry (limited by the mask).
pub const ACL_GROUP_OBJ: u16 = 0x04;
/// A named group's entry (limited by the mask).
pub const ACL_GROUP: u16 = 0x08;
/// The mask: the most any named entry or the group class grants (the
/// mode's group bits when present).
pub const ACL_MASK: u16 = 0x10;
/// Everyone else (the mode's other bits).
pub const ACL_OTHER: u16 = 0x20;
/// The version of the xattr format.
pub const POSIX_ACL_XATTR_VERSION: u32 = 2;
/// The id stored for entries that name nobody (`ACL_UNDEFINED_ID`).
pub const ACL_UNDEFINED_ID: u32 = u32::MAX;

const S_IRWXU: u32 = 0o700;
const S_IRWXG: u32 = 0o070;
const S_IRWXO: u32 = 0o007;
const S_ISGID: u32 = 0o2000;

/// One entry: a tag (`ACL_*`), the permission bits (4 read, 2 write,
/// 1 execute) and, for `ACL_USER` and `ACL_GROUP`, the uid or gid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AclEntry {
    /// `ACL_USER_OBJ`, `ACL_USER`, ...
    pub tag: u16,
    /// rwx as 4/2/1.
    pub perm: u16,
    /// The uid or gid of a named entry; [`ACL_UNDEFINED_ID`] otherwise.
    pub id: u32,
}

/// A valid ACL (at least the owner, group and other entries, in Linux's
/// order: owner, named users, group, named groups, mask, other).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PosixAcl {
    entries: Vec<AclEntry>,
}

impl PosixAcl {
    /// An ACL from entries, checked as `posix_acl_valid` checks them
    /// (EINVAL if not valid). Ids of unnamed entries are ignored.
    pub fn new(entries: Vec<AclEntry>) -> Result<PosixAcl> {
        let entries = entries
            .into_iter()
            .map(|e| match e.tag {
                ACL_USER | ACL_GROUP => e,
                _ => AclEntry {
                    id: ACL_UNDEFINED_ID,
                    ..e
                },
            })
            .collect();
        let acl = PosixAcl { entries };
        acl.validate()?;
        Ok(acl)
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[AclEntry] {
        &self.entries
    }

    /// Parse the xattr value (`posix_acl_from_xattr`, then
    /// `posix_acl_valid`): EINVAL if shorter than the header, not a whole
    /// number of entries, with an unknown tag, a named entry whose id is
    /// -1, or not a valid ACL; EOPNOTSUPP for another version. `None` for
    /// a header with no entries (no ACL).
    pub fn from_xattr(value: &[u8]) -> Result<Option<PosixAcl>> {
        let (head, rest) = value.split_first_chunk::<4>().ok_or(Errno::EINVAL)?;
        if u32::from_le_bytes(*head) != POSIX_ACL_XATTR_VERSION {
            return Err(Errno::EOPNOTSUPP);
        }
        if rest.len() % 8 != 0 {
            return Err(Errno::EINVAL);
        }
        if rest.is_empty() {
            return Ok(None);
        }
        let mut entries = Vec::with_capacity(rest.len() / 8);
        for e in rest.chunks_exact(8) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let id = match tag {
                ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => ACL_UNDEFINED_ID,
                // An id that maps to nobody (-1) is refused, as
                // `make_kuid` failing is.
                ACL_USER | ACL_GROUP if id != ACL_UNDEFINED_ID => id,
                _ => return Err(Errno::EINVAL),
            };
            entries.push(AclEntry { tag, perm, id });
        }
        PosixAcl::new(entries).map(Some)
    }

    /// The xattr value (`posix_acl_to_xattr`).
    pub fn to_xattr(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + 8 * self.entries.len());
        v.extend_from_slice(&POSIX_ACL_XATTR_VERSION.to_le_bytes());
        for e in &self.entries {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    /// An ACL from `setfacl`'s short text form, `u::rwx,u:ID:r--,g::r-x,
    /// g:ID:r--,m::r-x,o::---` (numeric ids only), sorted into Linux's
    /// order; EINVAL for anything else. For tests and tools.
    pub fn from_text(text: &str) -> Result<PosixAcl> {
        let mut entries = Vec::new();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let mut f = part.split(':');
            let (t, q, p) = (f.next(), f.next(), f.next());
            let (Some(t), Some(q), Some(p), None) = (t, q, p, f.next()) else {
                return Err(Errno::EINVAL);
            };
            let named = !q.is_empty();
            let tag = match (t, named) {
                ("u", false) => ACL_USER_OBJ,
                ("u", true) => ACL_USER,
                ("g", false) => ACL_GROUP_OBJ,
                ("g", true) => ACL_GROUP,
                ("m", false) => ACL_MASK,
                ("o", false) => ACL_OTHER,
                _ => return Err(Errno::EINVAL),
            };
            let id = if named {
                q.parse().map_err(|_| Errno::EINVAL)?
            } else {
                ACL_UNDEFINED_ID
            };
            let b = p.as_bytes();
            if b.len() != 3 {
                return Err(Errno::EINVAL);
            }
            let bit = |i: usize, c: u8, v: u16| match b[i] {
                x if x == c => Ok(v),
                b'-' => Ok(0),
                _ => Err(Errno::EINVAL),
            };
            let perm = bit(0, b'r', 4)? | bit(1, b'w', 2)? | bit(2, b'x', 1)?;
            entries.push(AclEntry { tag, perm, id });
        }
        entries.sort_by_key(|e| (e.tag, e.id));
        PosixAcl::new(entries)
    }

    /// `posix_acl_valid`: known tags in order, rwx bits only, exactly one
    /// owner, group and other entry, a mask if (and only if required)
    /// there are named entries. Linux does not require named entries to
    /// be sorted or unique.
    pub fn validate(&self) -> Result<()> {
        #[derive(PartialEq)]
        enum S {
            UserObj,
            User,
            Group,
            Other,
            Done,
        }
        let mut state = S::UserObj;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.perm & !7 != 0 {
                return Err(Errno::EINVAL);
            }
            state = match (e.tag, state) {
                (ACL_USER_OBJ, S::UserObj) => S::User,
                (ACL_USER, S::User) => {
                    needs_mask = true;
                    S::User
                }
                (ACL_GROUP_OBJ, S::User) => S::Group,
                (ACL_GROUP, S::Group) => {
                    needs_mask = true;
                    S::Group
                }
                (ACL_MASK, S::Group) => S::Other,
                (ACL_OTHER, S::Other) => S::Done,
                (ACL_OTHER, S::Group) if !needs_mask => S::Done,
                _ => return Err(Errno::EINVAL),
            };
        }
        if state == S::Done {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        }
    }

    fn find(&self, tag: u16) -> Option<usize> {
        self.entries.iter().position(|e| e.tag == tag)
    }

    /// `posix_acl_permission`: may `cred` access a file owned by
    /// `uid`:`gid` for `mask` (`MAY_*`) under this ACL? EACCES if not.
    /// Capabilities are not considered (the caller tries them after).
    pub fn permission(&self, cred: &Cred, uid: u32, gid: u32, mask: u32) -> Result<()> {
        let want = (mask & (MAY_READ | MAY_WRITE | MAY_EXEC)) as u16;
        let masked = |i: usize, perm: u16| {
            let m = self.entries[i + 1..]
                .iter()
                .find(|e| e.tag == ACL_MASK)
                .map_or(7, |m| m.perm);
            perm & m & want == want
        };
        let mut found = false;
        for (i, e) in self.entries.iter().enumerate() {
            let ok = match e.tag {
                ACL_USER_OBJ if cred.fsuid == uid => e.perm & want == want,
                ACL_USER if cred.fsuid == e.id => masked(i, e.perm),
                ACL_GROUP_OBJ | ACL_GROUP => {
                    let g = if e.tag == ACL_GROUP_OBJ { gid } else { e.id };
                    if cred.in_group(g) {
                        found = true;
                        if e.perm & want == want {
                            return if masked(i, e.perm) {
                                Ok(())
                            } else {
                                Err(Errno::EACCES)
                            };
                        }
                    }
                    continue;
                }
                ACL_OTHER if found => false,
                ACL_OTHER => e.perm & want == want,
                _ => continue,
            };
            return if ok { Ok(()) } else { Err(Errno::EACCES) };
        }
        // A valid ACL always ends in ACL_OTHER; Linux says EIO otherwise.
        Err(Errno::EIO)
    }

    /// `posix_acl_equiv_mode`: the mode the ACL implies (owner bits from
    /// the owner entry, group bits from the mask or else the group entry,
    /// other bits from the other entry; the rest of `mode` kept) and
    /// whether the ACL says more than a mode can (named entries or a mask).
    pub fn equiv_mode(&self, mode: u32) -> (u32, bool) {
        let mut m = mode;
        let mut not_equiv = false;
        for e in &self.entries {
            let p = u32::from(e.perm) & 7;
            match e.tag {
                ACL_USER_OBJ => m = (m & !S_IRWXU) | p << 6,
                ACL_GROUP_OBJ => m = (m & !S_IRWXG) | p << 3,
                ACL_OTHER => m = (m & !S_IRWXO) | p,
                ACL_MASK => {
                    m = (m & !S_IRWXG) | p << 3;
                    not_equiv = true;
                }
                _ => not_equiv = true,
            }
        }
        (m, not_equiv)
    }

    /// `posix_acl_chmod`: the access ACL after a chmod to `mode`: the
    /// owner and other entries take the mode's bits, the mask (or the
    /// group entry when there is none) the group bits.
    pub fn chmod(&self, mode: u32) -> PosixAcl {
        let mut acl = self.clone();
        let group = acl.find(ACL_MASK).or_else(|| acl.find(ACL_GROUP_OBJ));
        for (i, e) in acl.entries.iter_mut().enumerate() {
            if e.tag == ACL_USER_OBJ {
                e.perm = ((mode & S_IRWXU) >> 6) as u16;
            } else if e.tag == ACL_OTHER {
                e.perm = (mode & S_IRWXO) as u16;
            } else if Some(i) == group {
                e.perm = ((mode & S_IRWXG) >> 3) as u16;
            }
        }
        acl
    }

    /// `posix_acl_create_masq`: a directory's default ACL made into a new
    /// child's access ACL for the requested `mode` (type and permission
    /// bits): the owner, other and mask (or group) entries are limited by
    /// the mode, and the mode by them. Returns the new mode and the ACL,
    /// `None` when it says no more than the mode.
    pub fn create_masq(&self, mode: u32) -> (u32, Option<PosixAcl>) {
        let mut acl = self.clone();
        let mut m = mode;
        let mut not_equiv = false;
        for e in acl.entries.iter_mut() {
            match e.tag {
                ACL_USER_OBJ => {
                    e.perm &= ((m >> 6) & 7) as u16;
                    m &= (u32::from(e.perm) << 6) | !S_IRWXU;
                }
                ACL_OTHER => {
                    e.perm &= (m & 7) as u16;
                    m &= u32::from(e.perm) | !S_IRWXO;
                }
                ACL_USER | ACL_GROUP | ACL_MASK => not_equiv = true,
                _ => {}
            }
        }
        if let Some(g) = acl.find(ACL_MASK).or_else(|| acl.find(ACL_GROUP_OBJ)) {
            let e = &mut acl.entries[g];
            e.perm &= ((m >> 3) & 7) as u16;
            m &= (u32::from(e.perm) << 3) | !S_IRWXG;
        }
        let mode = (mode & !0o777) | (m & 0o777);
        (mode, not_equiv.then_some(acl))
    }
}

/// `generic_permission` with an inode's access ACL (`None`: it has
/// none): the owner is checked against the mode's owner bits (its ACL
/// entry), the ACL decides for everyone else when the mode has group bits
/// (`acl_permission_check`), and capabilities override as without an ACL.
pub fn check(cred: &Cred, p: Perm, acl: Option<&PosixAcl>, mask: u32) -> Result<()> {
    let Some(acl) = acl.filter(|_| cred.fsuid != p.uid && p.mode & S_IRWXG != 0) else {
        return generic_permission(cred, p, mask);
    };
    if acl.permission(cred, p.uid, p.gid, mask).is_ok() || capable_override(cred, p, mask) {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// `posix_acl_update_mode`: setting `acl` as the access ACL of a file
/// with mode `mode` and group `gid`, by `cred`. Returns the new mode and
/// the ACL to store (`None`: none, the mode says it all). S_ISGID is
/// cleared when the caller is not in the file's group and lacks
/// CAP_FSETID.
pub fn update_mode<'a>(
    cred: &Cred,
    mode: u32,
    gid: u32,
    acl: &'a PosixAcl,
) -> (u32, Option<&'a PosixAcl>) {
    let (mut m, not_equiv) = acl.equiv_mode(mode);
    if !cred.in_group(gid) && !cred.has(crate::cred::Caps::FSETID) {
        m &= !S_ISGID;
    }
    (m, not_equiv.then_some(acl))
}

/// What a new object in a directory with default ACL `default` gets
/// (`posix_acl_create`): its mode (the requested `mode`, type bits
/// included, not umasked), its access ACL, and (for a directory) its
/// default ACL.
pub fn create(default: &PosixAcl, mode: u32) -> (u32, Option<PosixAcl>, Option<PosixAcl>) {
    let (mode, access) = default.create_masq(mode);
    let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
    (mode, access, is_dir.then(|| default.clone()))
}

#[cfg(test)]
#[path = "acl_tests.rs"]
mod tests;
