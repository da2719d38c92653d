//! Extended attributes as the etcd backend keeps them: a sorted map of
//! name to value stored inside the inode record ([`crate::codec::Rec`]),
//! the limits that keep every record, and every transaction that writes
//! one, inside etcd's request size, and the changes `setxattr` and
//! `removexattr` make to a map (applied to a record read at one revision
//! and committed only if the record is still at that revision).
//!
//! Limits, per inode:
//!
//! - a value: [`XATTR_SIZE_MAX`] (64 KiB, Linux's; E2BIG past it);
//! - names and values together, with [`ENTRY_HEADER`] bytes per
//!   attribute (what they take in the record): [`XATTR_TOTAL_MAX`]
//!   (128 KiB), so one 64 KiB value always fits but a second does not;
//!   ENOSPC past it, as ext4 answers when an inode's attribute block is
//!   full;
//! - the name list: [`XATTR_LIST_MAX`] (64 KiB, what `listxattr` can
//!   return); ENOSPC past it, so every inode's list can be read.
//!
//! With these bounds an encoded record is at most [`REC_XATTR_MAX`]
//! bytes beyond its fixed part, and the largest transaction (a 1 MiB
//! write: 17 chunks of 64 KiB and the record) stays under etcd's default
//! `--max-request-bytes` of 1.5 MiB.
//!
//! ```
//! use dcache_etcd::xattr::{self, Xattrs};
//! let mut x = Xattrs::new();
//! xattr::set(&mut x, b"user.a", b"1", 0).unwrap();
//! assert_eq!(xattr::set(&mut x, b"user.a", b"2", dcache::xattr::XATTR_CREATE),
//!            Err(dcache::Errno::EEXIST));
//! let mut list = Vec::new();
//! xattr::list(&x, &mut list);
//! assert_eq!(list, b"user.a\0");
//! ```

use std::collections::BTreeMap;

use dcache::xattr::{check_flags, check_name, check_value, XATTR_CREATE, XATTR_REPLACE};
pub use dcache::xattr::{XATTR_LIST_MAX, XATTR_SIZE_MAX};
use dcache::{Errno, Result};

/// An inode's attributes: name to value, in name order (the order
/// `listxattr` returns them in).
pub type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// The most bytes of names and values one inode holds, counting
/// [`ENTRY_HEADER`] bytes per attribute; ENOSPC past it.
pub const XATTR_TOTAL_MAX: usize = 128 * 1024;

/// Bytes an entry's header takes in an encoded record (name length:
/// 1, value length: 4).
pub const ENTRY_HEADER: usize = 5;

/// The most bytes the attributes add to an encoded record: the entries
/// (at most [`XATTR_TOTAL_MAX`]), their count and the symlink target's
/// length.
pub const REC_XATTR_MAX: usize = XATTR_TOTAL_MAX + 8;

/// The bytes one attribute takes of [`XATTR_TOTAL_MAX`].
fn cost(name: &[u8], value: &[u8]) -> usize {
    ENTRY_HEADER + name.len() + value.len()
}

/// What `x` uses of the limits: (its entries' bytes, counted as for
/// [`XATTR_TOTAL_MAX`]; the name list's length, NULs included).
pub fn usage(x: &Xattrs) -> (usize, usize) {
    x.iter().fold((0, 0), |(total, list), (n, v)| {
        (total + cost(n, v), list + n.len() + 1)
    })
}

/// `setxattr` on the map `x`: `flags` [`XATTR_CREATE`] (EEXIST if `name`
/// exists), [`XATTR_REPLACE`] (ENODATA if it does not), or 0; ENOSPC when
/// the result would pass [`XATTR_TOTAL_MAX`] or [`XATTR_LIST_MAX`] (the
/// old value of `name` does not count). The syntax checks the Vfs makes
/// are repeated here (ERANGE, EINVAL, E2BIG) for callers of the
/// [`dcache::FileSystem`] itself.
pub fn set(x: &mut Xattrs, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    check_flags(flags)?;
    check_name(name)?;
    check_value(value)?;
    let old = x.get(name);
    if old.is_some() && flags & XATTR_CREATE != 0 {
        return Err(Errno::EEXIST);
    }
    if old.is_none() && flags & XATTR_REPLACE != 0 {
        return Err(Errno::ENODATA);
    }
    let (mut total, mut list) = usage(x);
    if let Some(v) = old {
        total -= cost(name, v);
        list -= name.len() + 1;
    }
    if total + cost(name, value) > XATTR_TOTAL_MAX || list + name.len() + 1 > XATTR_LIST_MAX {
        return Err(Errno::ENOSPC);
    }
    x.insert(name.to_vec(), value.to_vec());
    Ok(())
}

/// `removexattr` on the map `x`: ENODATA if `name` is not there.
pub fn remove(x: &mut Xattrs, name: &[u8]) -> Result<()> {
    check_name(name)?;
    x.remove(name).map(drop).ok_or(Errno::ENODATA)
}

/// `listxattr`: every name of `x`, each followed by a NUL, into `out`
/// (cleared first).
pub fn list(x: &Xattrs, out: &mut Vec<u8>) {
    out.clear();
    for name in x.keys() {
        out.extend_from_slice(name);
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_errnos() {
        let mut x = Xattrs::new();
        assert_eq!(
            set(&mut x, b"user.a", b"1", XATTR_REPLACE),
            Err(Errno::ENODATA)
        );
        assert_eq!(set(&mut x, b"user.a", b"1", XATTR_CREATE), Ok(()));
        assert_eq!(
            set(&mut x, b"user.a", b"2", XATTR_CREATE),
            Err(Errno::EEXIST)
        );
        assert_eq!(set(&mut x, b"user.a", b"3", XATTR_REPLACE), Ok(()));
        assert_eq!(
            set(&mut x, b"user.a", b"4", XATTR_CREATE | XATTR_REPLACE),
            Err(Errno::EEXIST)
        );
        assert_eq!(set(&mut x, b"user.b", b"", 0), Ok(()));
        assert_eq!(set(&mut x, b"user.b", b"", 8), Err(Errno::EINVAL));
        assert_eq!(set(&mut x, b"", b"", 0), Err(Errno::ERANGE));
        assert_eq!(set(&mut x, &[b'u'; 256], b"", 0), Err(Errno::ERANGE));
        assert_eq!(set(&mut x, b"user.\0", b"", 0), Err(Errno::EINVAL));
        assert_eq!(
            set(&mut x, b"user.c", &vec![0; XATTR_SIZE_MAX + 1], 0),
            Err(Errno::E2BIG)
        );
        assert_eq!(x.get(&b"user.a"[..]).map(Vec::as_slice), Some(&b"3"[..]));
        let mut l = vec![9];
        list(&x, &mut l);
        assert_eq!(l, b"user.a\0user.b\0");
        assert_eq!(remove(&mut x, b"user.a"), Ok(()));
        assert_eq!(remove(&mut x, b"user.a"), Err(Errno::ENODATA));
        assert_eq!(usage(&x), (ENTRY_HEADER + 6, 7));
    }

    #[test]
    fn totals_are_bounded() {
        let mut x = Xattrs::new();
        let big = vec![7u8; XATTR_SIZE_MAX];
        assert_eq!(set(&mut x, b"user.big", &big, 0), Ok(()));
        // Replacing counts the new value only.
        assert_eq!(set(&mut x, b"user.big", &big, XATTR_REPLACE), Ok(()));
        let room = XATTR_TOTAL_MAX - usage(&x).0 - ENTRY_HEADER - b"user.b2".len();
        assert_eq!(
            set(&mut x, b"user.b2", &vec![1; room + 1], 0),
            Err(Errno::ENOSPC)
        );
        assert_eq!(set(&mut x, b"user.b2", &vec![1; room], 0), Ok(()));
        assert_eq!(usage(&x).0, XATTR_TOTAL_MAX);
        assert_eq!(set(&mut x, b"user.c", b"", 0), Err(Errno::ENOSPC));
        // The name list is bounded on its own: long names, empty values.
        let mut y = Xattrs::new();
        let mut n = 0;
        loop {
            let name = format!("user.{n:0>250}");
            match set(&mut y, name.as_bytes(), b"", 0) {
                Ok(()) => n += 1,
                Err(e) => {
                    assert_eq!(e, Errno::ENOSPC);
                    break;
                }
            }
        }
        assert_eq!(n, XATTR_LIST_MAX / 256);
        assert!(usage(&y).1 <= XATTR_LIST_MAX);
    }
}
