//! Extended attributes through the `Vfs`, on memfs and on passthrough (a
//! host directory): every errno of the syscalls' contract, the permission
//! rules for callers without privileges, and the ctime a change stamps.

use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::fs::passthrough::Passthrough;
use dcache::fs::{FileSystem, FileType, SetAttr};
use dcache::xattr::{XATTR_CREATE, XATTR_REPLACE, XATTR_SIZE_MAX};
use dcache::{At, Caps, Cred, Errno, Vfs};
use tempfile::TempDir;

/// Each test runs on both backends; the passthrough's directory lives as
/// long as the `Vfs`.
fn backends() -> Vec<(&'static str, Vfs, Option<TempDir>)> {
    let mem = Vfs::new(Arc::new(MemFs::with_root(0o755, 0, 0))).unwrap();
    // tmpfs where there is one: ext4 keeps all of a file's attributes in
    // one block (a 64 KiB value is ENOSPC there).
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        TempDir::new_in("/dev/shm").unwrap()
    } else {
        TempDir::new().unwrap()
    };
    let pt = Vfs::new(Arc::new(Passthrough::new(dir.path()).unwrap())).unwrap();
    vec![("memfs", mem, None), ("passthrough", pt, Some(dir))]
}

/// The names of a listing, sorted.
fn names(list: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = dcache::xattr::names(list)
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    v.sort();
    v
}

fn is_root() -> bool {
    // SAFETY: a plain id query.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn round_trips_and_errnos() {
    for (what, vfs, _dir) in backends() {
        let r = vfs.as_root();
        r.create(At::Root, "f", 0o644).unwrap();
        let big = vec![0xa5u8; XATTR_SIZE_MAX];
        for (name, value) in [
            (&b"user.empty"[..], &b""[..]),
            (b"user.small", b"hello"),
            (b"user.big", &big[..]),
        ] {
            r.setxattr(At::Root, "f", name, value, 0).unwrap();
            assert_eq!(r.getxattr(At::Root, "f", name).unwrap(), value, "{what}");
        }
        assert_eq!(
            names(&r.listxattr(At::Root, "f").unwrap()),
            ["user.big", "user.empty", "user.small"],
            "{what}"
        );
        let e = |res: dcache::Result<()>| res.unwrap_err();
        assert_eq!(
            e(r.setxattr(At::Root, "f", b"user.small", b"x", XATTR_CREATE)),
            Errno::EEXIST,
            "{what}"
        );
        assert_eq!(
            e(r.setxattr(At::Root, "f", b"user.new", b"x", XATTR_REPLACE)),
            Errno::ENODATA,
            "{what}"
        );
        r.setxattr(At::Root, "f", b"user.small", b"bye", XATTR_REPLACE)
            .unwrap();
        r.setxattr(At::Root, "f", b"user.new", b"x", XATTR_CREATE)
            .unwrap();
        assert_eq!(r.getxattr(At::Root, "f", b"user.small").unwrap(), b"bye");
        assert_eq!(
            r.getxattr(At::Root, "f", b"user.nope").unwrap_err(),
            Errno::ENODATA,
            "{what}"
        );
        let too_big = vec![0u8; XATTR_SIZE_MAX + 1];
        assert_eq!(
            e(r.setxattr(At::Root, "f", b"user.huge", &too_big, 0)),
            Errno::E2BIG,
            "{what}"
        );
        assert_eq!(
            e(r.setxattr(At::Root, "f", b"user.x", b"", 4)),
            Errno::EINVAL,
            "{what}"
        );
        assert_eq!(
            e(r.setxattr(At::Root, "f", b"", b"", 0)),
            Errno::ERANGE,
            "{what}"
        );
        let long = [b"user.".to_vec(), vec![b'a'; 251]].concat();
        assert_eq!(
            e(r.setxattr(At::Root, "f", &long, b"", 0)),
            Errno::ERANGE,
            "{what}"
        );
        r.setxattr(At::Root, "f", &long[..255], b"", 0).unwrap();
        assert_eq!(
            e(r.setxattr(At::Root, "f", b"user.", b"", 0)),
            Errno::EINVAL,
            "{what}"
        );
        assert_eq!(
            e(r.setxattr(At::Root, "f", b"os2.x", b"", 0)),
            Errno::EOPNOTSUPP,
            "{what}"
        );
        assert_eq!(
            e(r.setxattr(At::Root, "f", b"system.foo", b"", 0)),
            Errno::EOPNOTSUPP,
            "{what}"
        );
        assert_eq!(
            r.getxattr(At::Root, "f", b"os2.x").unwrap_err(),
            Errno::EOPNOTSUPP
        );
        // Argument errors come before the walk, as in the syscalls.
        assert_eq!(
            e(r.setxattr(At::Root, "missing", b"", b"", 0)),
            Errno::ERANGE,
            "{what}"
        );
        assert_eq!(
            e(r.setxattr(At::Root, "missing", b"user.a", b"", 0)),
            Errno::ENOENT,
            "{what}"
        );
        r.removexattr(At::Root, "f", b"user.new").unwrap();
        assert_eq!(
            e(r.removexattr(At::Root, "f", b"user.new")),
            Errno::ENODATA,
            "{what}"
        );
        assert_eq!(
            r.getxattr(At::Root, "f", b"user.new").unwrap_err(),
            Errno::ENODATA
        );
        // Root's other namespaces.
        r.setxattr(At::Root, "f", b"trusted.t", b"tv", 0).unwrap();
        r.setxattr(At::Root, "f", b"security.s", b"sv", 0).unwrap();
        assert_eq!(r.getxattr(At::Root, "f", b"trusted.t").unwrap(), b"tv");
        let listed = names(&r.listxattr(At::Root, "f").unwrap());
        assert!(
            listed.contains(&"trusted.t".to_string()),
            "{what}: {listed:?}"
        );
        assert!(
            listed.contains(&"security.s".to_string()),
            "{what}: {listed:?}"
        );
    }
}

#[test]
fn buffer_semantics() {
    let mut buf = [0u8; 3];
    assert_eq!(
        dcache::xattr::copy_out(b"abcd", &mut buf),
        Err(Errno::ERANGE)
    );
    assert_eq!(dcache::xattr::copy_out(b"abcd", &mut []), Ok(4));
    assert_eq!(dcache::xattr::copy_out(b"ab", &mut buf), Ok(2));
}

#[test]
fn directories_symlinks_and_special_files() {
    for (what, vfs, _dir) in backends() {
        let r = vfs.as_root();
        r.mkdir(At::Root, "d", 0o755).unwrap();
        r.create(At::Root, "target", 0o644).unwrap();
        r.symlink("target", At::Root, "link").unwrap();
        r.setxattr(At::Root, "d", b"user.dir", b"1", 0).unwrap();
        assert_eq!(r.getxattr(At::Root, "d", b"user.dir").unwrap(), b"1");
        // Through a symlink: the target; on the link itself: user.* is
        // refused, trusted.* is stored on the link alone.
        r.setxattr(At::Root, "link", b"user.via", b"t", 0).unwrap();
        assert_eq!(r.getxattr(At::Root, "target", b"user.via").unwrap(), b"t");
        assert_eq!(
            r.lsetxattr(At::Root, "link", b"user.x", b"", 0)
                .unwrap_err(),
            Errno::EPERM,
            "{what}"
        );
        assert_eq!(
            r.lgetxattr(At::Root, "link", b"user.via").unwrap_err(),
            Errno::ENODATA,
            "{what}"
        );
        r.lsetxattr(At::Root, "link", b"trusted.onlink", b"l", 0)
            .unwrap();
        assert_eq!(
            names(&r.llistxattr(At::Root, "link").unwrap()),
            ["trusted.onlink"],
            "{what}"
        );
        assert_eq!(
            r.getxattr(At::Root, "target", b"trusted.onlink")
                .unwrap_err(),
            Errno::ENODATA
        );
        assert_eq!(
            r.lgetxattr(At::Root, "link", b"trusted.onlink").unwrap(),
            b"l"
        );
        r.lremovexattr(At::Root, "link", b"trusted.onlink").unwrap();
        assert!(r.llistxattr(At::Root, "link").unwrap().is_empty());
        // A fifo: no user.*, but trusted.* (the held O_PATH fd is never
        // opened, so nothing blocks).
        r.mknod(At::Root, "p", FileType::Fifo, 0o644, 0).unwrap();
        assert_eq!(
            r.setxattr(At::Root, "p", b"user.x", b"", 0).unwrap_err(),
            Errno::EPERM
        );
        assert_eq!(
            r.getxattr(At::Root, "p", b"user.x").unwrap_err(),
            Errno::ENODATA
        );
        r.setxattr(At::Root, "p", b"trusted.x", b"f", 0).unwrap();
        assert_eq!(
            r.getxattr(At::Root, "p", b"trusted.x").unwrap(),
            b"f",
            "{what}"
        );
        // A held dentry (fgetxattr and FUSE's requests).
        let d = r.lookup(At::Root, "d", true).unwrap();
        r.setxattr_dentry(&d, b"user.held", b"h", 0).unwrap();
        assert_eq!(r.getxattr_dentry(&d, b"user.held").unwrap(), b"h");
        assert_eq!(
            names(&r.listxattr_dentry(&d).unwrap()),
            ["user.dir", "user.held"]
        );
        r.removexattr_dentry(&d, b"user.held").unwrap();
    }
}

/// A version-2 POSIX ACL xattr value of (tag, permissions, id) entries.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn posix_acls_are_validated_and_enforced() {
    // user::rw-, user:1002:r--, group::r--, mask::r--, other::---
    const U: u32 = u32::MAX;
    let ext = acl(&[
        (1, 6, U),
        (2, 4, 1002),
        (4, 4, U),
        (0x10, 4, U),
        (0x20, 0, U),
    ]);
    let vfs = Vfs::new(Arc::new(MemFs::with_root(0o755, 0, 0))).unwrap();
    let r = vfs.as_root();
    r.create(At::Root, "f", 0o644).unwrap();
    r.mkdir(At::Root, "d", 0o755).unwrap();
    r.setxattr(At::Root, "f", b"system.posix_acl_access", &ext, 0)
        .unwrap();
    r.setxattr(At::Root, "d", b"system.posix_acl_default", &ext, 0)
        .unwrap();
    assert_eq!(
        r.getxattr(At::Root, "f", b"system.posix_acl_access")
            .unwrap(),
        ext
    );
    assert_eq!(
        r.getxattr(At::Root, "d", b"system.posix_acl_default")
            .unwrap(),
        ext
    );
    // The mode shows the mask; the named user reads, others do not.
    assert_eq!(r.stat(At::Root, "f").unwrap().perm, 0o640);
    let carol = Cred::user(1002, 1002, &[]);
    assert!(vfs.as_cred(&carol).open(At::Root, "f", 0, 0).is_ok());
    let bob = Cred::user(1001, 1001, &[]);
    let b = vfs.as_cred(&bob);
    assert_eq!(b.open(At::Root, "f", 0, 0).unwrap_err(), Errno::EACCES);
    // user.* attributes follow the ACL too.
    r.setxattr(At::Root, "f", b"user.color", b"blue", 0)
        .unwrap();
    let c = vfs.as_cred(&carol);
    assert_eq!(c.getxattr(At::Root, "f", b"user.color").unwrap(), b"blue");
    let e = b.getxattr(At::Root, "f", b"user.color");
    assert_eq!(e.unwrap_err(), Errno::EACCES);
    r.removexattr(At::Root, "f", b"user.color").unwrap();
    // Malformed values are EINVAL, another version EOPNOTSUPP, a default
    // ACL on a file EACCES.
    for bad in [&b"\x02\0\0\0\x01\0"[..], &acl(&[(1, 6, U), (4, 4, U)])] {
        let e = r.setxattr(At::Root, "f", b"system.posix_acl_access", bad, 0);
        assert_eq!(e.unwrap_err(), Errno::EINVAL);
    }
    let e = r.setxattr(At::Root, "f", b"system.posix_acl_access", b"\x03\0\0\0", 0);
    assert_eq!(e.unwrap_err(), Errno::EOPNOTSUPP);
    let e = r.setxattr(At::Root, "f", b"system.posix_acl_default", &ext, 0);
    assert_eq!(e.unwrap_err(), Errno::EACCES);
    // Anyone reads it; only the owner or CAP_FOWNER changes it.
    assert_eq!(
        b.getxattr(At::Root, "f", b"system.posix_acl_access")
            .unwrap(),
        ext
    );
    let err = b.setxattr(At::Root, "f", b"system.posix_acl_access", &ext, 0);
    assert_eq!(err.unwrap_err(), Errno::EPERM);
    let fowner = Cred::user(1001, 1001, &[]).with_caps(Caps::FOWNER);
    vfs.as_cred(&fowner)
        .removexattr(At::Root, "f", b"system.posix_acl_access")
        .unwrap();
    // A minimal ACL is a chmod, as on Linux: no attribute is stored.
    let minimal = acl(&[(1, 7, 0), (4, 5, 0), (0x20, 0, 0)]);
    r.setxattr(At::Root, "f", b"system.posix_acl_access", &ext, 0)
        .unwrap();
    r.setxattr(At::Root, "f", b"system.posix_acl_access", &minimal, 0)
        .unwrap();
    assert_eq!(r.stat(At::Root, "f").unwrap().perm, 0o750);
    assert!(r.listxattr(At::Root, "f").unwrap().is_empty());
    // An empty one removes the ACL, present or not.
    r.setxattr(At::Root, "f", b"system.posix_acl_access", &ext, 0)
        .unwrap();
    r.setxattr(At::Root, "f", b"system.posix_acl_access", b"", 0)
        .unwrap();
    r.setxattr(At::Root, "f", b"system.posix_acl_access", b"", 0)
        .unwrap();
    assert!(r.listxattr(At::Root, "f").unwrap().is_empty());
}

#[test]
fn callers_without_privileges() {
    if !is_root() {
        // The passthrough's host would refuse the setup's chown; memfs
        // alone would still run, but keep both backends together.
        println!("SKIPPED: needs root to give files to other users");
        return;
    }
    for (what, vfs, _dir) in backends() {
        let r = vfs.as_root();
        r.create(At::Root, "f", 0o644).unwrap();
        r.mkdir(At::Root, "sticky", 0o1777).unwrap();
        r.mkdir(At::Root, "private", 0o700).unwrap();
        r.create(At::Root, "private/g", 0o666).unwrap();
        r.setxattr(At::Root, "f", b"user.a", b"1", 0).unwrap();
        r.setxattr(At::Root, "f", b"trusted.t", b"2", 0).unwrap();
        r.setxattr(At::Root, "f", b"security.s", b"3", 0).unwrap();
        let bob = Cred::user(1001, 1001, &[]);
        let b = vfs.as_cred(&bob);
        // Read permission: reads; no write permission: EACCES on changes.
        assert_eq!(
            b.getxattr(At::Root, "f", b"user.a").unwrap(),
            b"1",
            "{what}"
        );
        assert_eq!(
            b.setxattr(At::Root, "f", b"user.a", b"x", 0).unwrap_err(),
            Errno::EACCES,
            "{what}"
        );
        assert_eq!(
            b.removexattr(At::Root, "f", b"user.a").unwrap_err(),
            Errno::EACCES,
            "{what}"
        );
        // trusted.*: hidden and refused without CAP_SYS_ADMIN.
        assert_eq!(
            b.getxattr(At::Root, "f", b"trusted.t").unwrap_err(),
            Errno::ENODATA,
            "{what}"
        );
        assert_eq!(
            b.setxattr(At::Root, "f", b"trusted.t", b"x", 0)
                .unwrap_err(),
            Errno::EPERM,
            "{what}"
        );
        assert_eq!(
            b.removexattr(At::Root, "f", b"trusted.t").unwrap_err(),
            Errno::EPERM,
            "{what}"
        );
        assert_eq!(
            names(&b.listxattr(At::Root, "f").unwrap()),
            ["security.s", "user.a"],
            "{what}"
        );
        // security.*: read by anyone, written only with CAP_SYS_ADMIN.
        assert_eq!(b.getxattr(At::Root, "f", b"security.s").unwrap(), b"3");
        assert_eq!(
            b.setxattr(At::Root, "f", b"security.s", b"x", 0)
                .unwrap_err(),
            Errno::EPERM
        );
        // An unknown namespace is checked like file data first.
        assert_eq!(
            b.setxattr(At::Root, "f", b"os2.x", b"", 0).unwrap_err(),
            Errno::EACCES
        );
        // A sticky directory: only its owner (or CAP_FOWNER) sets user.*.
        assert_eq!(
            b.setxattr(At::Root, "sticky", b"user.a", b"", 0)
                .unwrap_err(),
            Errno::EPERM,
            "{what}"
        );
        let fowner = Cred::user(1001, 1001, &[]).with_caps(Caps::FOWNER.union(Caps::DAC_OVERRIDE));
        vfs.as_cred(&fowner)
            .setxattr(At::Root, "sticky", b"user.a", b"", 0)
            .unwrap();
        // Search permission on the way: EACCES before anything else.
        assert_eq!(
            b.getxattr(At::Root, "private/g", b"user.a").unwrap_err(),
            Errno::EACCES
        );
        assert_eq!(
            b.listxattr(At::Root, "private/g").unwrap_err(),
            Errno::EACCES
        );
        // The owner may do it all in user.*, and a chmod changes the answer.
        let set = SetAttr {
            uid: Some(1001),
            ..SetAttr::default()
        };
        r.setattr(At::Root, "f", &set).unwrap();
        b.setxattr(At::Root, "f", b"user.mine", b"m", 0).unwrap();
        b.setattr(
            At::Root,
            "f",
            &SetAttr {
                perm: Some(0o000),
                ..SetAttr::default()
            },
        )
        .unwrap();
        assert_eq!(
            b.getxattr(At::Root, "f", b"user.mine").unwrap_err(),
            Errno::EACCES,
            "{what}"
        );
        // Root still reads it (CAP_DAC_OVERRIDE).
        assert_eq!(r.getxattr(At::Root, "f", b"user.mine").unwrap(), b"m");
    }
}

#[test]
fn changes_stamp_ctime() {
    for (what, vfs, _dir) in backends() {
        let r = vfs.as_root();
        r.create(At::Root, "f", 0o644).unwrap();
        let set_old = SetAttr {
            atime: Some(dcache::fs::SetTime::At(dcache::Timespec {
                sec: 1,
                nsec: 0,
            })),
            ..SetAttr::default()
        };
        r.setattr(At::Root, "f", &set_old).unwrap();
        let before = r.stat(At::Root, "f").unwrap().ctime;
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.setxattr(At::Root, "f", b"user.a", b"1", 0).unwrap();
        let after_set = r.stat(At::Root, "f").unwrap().ctime;
        assert!(after_set > before, "{what}: {before:?} -> {after_set:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.removexattr(At::Root, "f", b"user.a").unwrap();
        assert!(r.stat(At::Root, "f").unwrap().ctime > after_set, "{what}");
    }
}

#[test]
fn kernfs_has_none() {
    let fs = Arc::new(dcache::fs::kernfs::KernFs::with_variant(
        dcache::fs::kernfs::Variant::Rcu,
    ));
    let vfs = Vfs::new(fs.clone()).unwrap();
    let r = vfs.as_root();
    assert!(r.listxattr(At::Root, ".").unwrap().is_empty());
    assert_eq!(
        r.getxattr(At::Root, ".", b"user.a").unwrap_err(),
        Errno::ENODATA
    );
    assert_eq!(
        r.setxattr(At::Root, ".", b"user.a", b"", 0).unwrap_err(),
        Errno::EOPNOTSUPP
    );
    assert_eq!(
        fs.removexattr(fs.root(), b"user.a").unwrap_err(),
        Errno::EOPNOTSUPP
    );
}
