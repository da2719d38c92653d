//! Unit tests of `acl.rs`: the format, `posix_acl_valid`'s errors and the
//! check, with the values tmpfs gave for the same calls.

use super::*;
use crate::cred::{Caps, Cred};

const M: u32 = ACL_UNDEFINED_ID;

fn raw(ents: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(t, p, i) in ents {
        v.extend_from_slice(&t.to_le_bytes());
        v.extend_from_slice(&p.to_le_bytes());
        v.extend_from_slice(&i.to_le_bytes());
    }
    v
}

#[test]
fn parse_errors_are_linux_errnos() {
    let e = |v: &[u8]| PosixAcl::from_xattr(v).unwrap_err();
    assert_eq!(e(b""), Errno::EINVAL);
    assert_eq!(e(b"\x02\x00"), Errno::EINVAL);
    assert_eq!(e(b"\x03\x00\x00\x00"), Errno::EOPNOTSUPP);
    assert_eq!(e(b"\x02\x00\x00\x00\x01\x00"), Errno::EINVAL);
    assert_eq!(PosixAcl::from_xattr(b"\x02\x00\x00\x00"), Ok(None));
    // Not sorted by tag, a named entry and no mask, perm 8+, unknown tag,
    // a named user -1, missing other, two owners, trailing entry.
    for bad in [
        raw(&[(1, 6, M), (4, 4, M), (2, 4, 5), (0x10, 4, M), (0x20, 0, M)]),
        raw(&[(1, 6, M), (2, 4, 5), (4, 4, M), (0x20, 0, M)]),
        raw(&[(1, 14, M), (4, 4, M), (0x20, 0, M)]),
        raw(&[(1, 6, M), (3, 4, M), (4, 4, M), (0x20, 0, M)]),
        raw(&[(1, 6, M), (2, 4, M), (4, 4, M), (0x10, 4, M), (0x20, 0, M)]),
        raw(&[(1, 6, M), (4, 4, M)]),
        raw(&[(1, 6, M), (1, 6, M), (4, 4, M), (0x20, 0, M)]),
        raw(&[(1, 6, M), (4, 4, M), (0x20, 0, M), (0x20, 0, M)]),
    ] {
        assert_eq!(e(&bad), Errno::EINVAL, "{bad:?}");
    }
    // Duplicate named users are accepted (Linux no longer checks order).
    let dup = raw(&[
        (1, 6, M),
        (2, 4, 5),
        (2, 4, 5),
        (4, 4, M),
        (0x10, 4, M),
        (0x20, 0, M),
    ]);
    assert!(PosixAcl::from_xattr(&dup).unwrap().is_some());
    // Ids of unnamed entries are not kept.
    let a = PosixAcl::from_xattr(&raw(&[(1, 6, 5), (4, 4, M), (0x10, 4, M), (0x20, 0, M)]));
    let want = raw(&[(1, 6, M), (4, 4, M), (0x10, 4, M), (0x20, 0, M)]);
    assert_eq!(a.unwrap().unwrap().to_xattr(), want);
}

#[test]
fn text_round_trips() {
    let a = PosixAcl::from_text("o::---,u::rw-,g::r--,u:65534:r--,m::r--").unwrap();
    let v = raw(&[
        (1, 6, M),
        (2, 4, 65534),
        (4, 4, M),
        (0x10, 4, M),
        (0x20, 0, M),
    ]);
    assert_eq!(a.to_xattr(), v);
    assert_eq!(PosixAcl::from_xattr(&v), Ok(Some(a)));
    assert_eq!(PosixAcl::from_text("u::rw"), Err(Errno::EINVAL));
    assert_eq!(PosixAcl::from_text("u::rw-,g::r--"), Err(Errno::EINVAL));
}

#[test]
fn the_check_follows_posix_acl_permission() {
    let a = PosixAcl::from_text("u::rw-,u:65534:rwx,g::r--,g:200:-w-,m::r--,o::---").unwrap();
    let (r, w) = (MAY_READ, MAY_WRITE);
    let chk = |c: &Cred, m| a.permission(c, 1000, 100, m);
    // The owner: its entry, not masked.
    assert_eq!(chk(&Cred::user(1000, 1, &[]), r | w), Ok(()));
    // Named user: masked to r.
    assert_eq!(chk(&Cred::user(65534, 1, &[]), r), Ok(()));
    assert_eq!(chk(&Cred::user(65534, 1, &[]), w), Err(Errno::EACCES));
    // Group class: the owning group grants r; group 200's w is masked.
    assert_eq!(chk(&Cred::user(5, 100, &[]), r), Ok(()));
    assert_eq!(chk(&Cred::user(5, 1, &[200]), w), Err(Errno::EACCES));
    // A member of a matching group that grants nothing gets no "other".
    assert_eq!(chk(&Cred::user(5, 200, &[]), r), Err(Errno::EACCES));
    // Other.
    assert_eq!(chk(&Cred::user(5, 1, &[]), r), Err(Errno::EACCES));
    let o = PosixAcl::from_text("u::---,g::---,o::r--").unwrap();
    assert_eq!(o.permission(&Cred::user(5, 1, &[]), 1, 7, r), Ok(()));
    // In the owning group, whose entry grants nothing: not "other".
    assert_eq!(
        o.permission(&Cred::user(5, 1, &[]), 7, 1, r),
        Err(Errno::EACCES)
    );
    // Capabilities are the caller's business.
    let root = Cred::user(5, 1, &[]).with_caps(Caps::ALL);
    assert_eq!(o.permission(&root, 7, 1, r), Err(Errno::EACCES));
}

#[test]
fn mode_sync_as_tmpfs() {
    // setxattr of u::rw-,g::r--,m::r--,o::--- on a 0644 file: 0640.
    let a = PosixAcl::from_text("u::rw-,g::r--,m::r--,o::---").unwrap();
    let u = Cred::user(1000, 100, &[]);
    assert_eq!(update_mode(&u, 0o100_644, 100, &a), (0o100_640, Some(&a)));
    // Outside the group without CAP_FSETID: S_ISGID dropped.
    assert_eq!(update_mode(&u, 0o102_644, 5, &a).0, 0o100_640);
    assert_eq!(update_mode(&Cred::root(), 0o102_644, 5, &a).0, 0o102_640);
    let min = PosixAcl::from_text("u::rwx,g::r-x,o::r--").unwrap();
    assert_eq!(update_mode(&u, 0o100_600, 100, &min), (0o100_754, None));
    // chmod 0751 rewrites owner, mask and other, not the group entry.
    let c = a.chmod(0o751);
    assert_eq!(
        c,
        PosixAcl::from_text("u::rwx,g::r--,m::r-x,o::--x").unwrap()
    );
    assert_eq!(
        min.chmod(0o640),
        PosixAcl::from_text("u::rw-,g::r--,o::---").unwrap()
    );
}

#[test]
fn inheritance_as_tmpfs() {
    // The default ACL tmpfs was given: u::rwx,u:65534:r-x,g::r-x,m::rwx,o::--x
    let d = PosixAcl::from_text("u::rwx,u:65534:r-x,g::r-x,m::rwx,o::--x").unwrap();
    let (mode, access, default) = create(&d, 0o100_666);
    assert_eq!(mode, 0o100_660);
    let want = PosixAcl::from_text("u::rw-,u:65534:r-x,g::r-x,m::rw-,o::---").unwrap();
    assert_eq!(access, Some(want));
    assert_eq!(default, None);
    let (mode, access, default) = create(&d, 0o040_777);
    assert_eq!(mode, 0o040_771);
    assert_eq!(access.unwrap().to_xattr(), d.to_xattr());
    assert_eq!(default, Some(d));
    // A minimal default ACL gives a mode and no access ACL.
    let m = PosixAcl::from_text("u::rwx,g::r-x,o::--x").unwrap();
    assert_eq!(create(&m, 0o100_666), (0o100_640, None, None));
}
