//! POSIX ACLs through the library: the walk's search check through an
//! ACL (rcu-walk and reference mode, the cache dropped when the ACL or the
//! mode changes), `Cred::with_umask` against default ACLs, and the mode /
//! ACL sync, on memfs and (as root) passthrough.

use std::sync::Arc;

use dcache::acl::PosixAcl;
use dcache::fs::memfs::MemFs;
use dcache::fs::passthrough::Passthrough;
use dcache::fs::{FileSystem, SetAttr};
use dcache::xattr::{POSIX_ACL_ACCESS, POSIX_ACL_DEFAULT};
use dcache::{At, Cred, Errno, Vfs};

fn acl(text: &str) -> Vec<u8> {
    PosixAcl::from_text(text).unwrap().to_xattr()
}

fn is_root() -> bool {
    // SAFETY: a plain id query.
    unsafe { libc::geteuid() == 0 }
}

/// memfs, and a passthrough over a fresh tmpfs directory when root (the
/// host must accept ACLs and chowns).
fn backends() -> Vec<(&'static str, Vfs, Option<tempfile::TempDir>)> {
    let mut v = vec![("memfs", Vfs::new(Arc::new(MemFs::new())).unwrap(), None)];
    if is_root() {
        let dir = tempfile::Builder::new()
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let fs: Arc<dyn FileSystem> = Arc::new(Passthrough::new(dir.path()).unwrap());
        v.push(("passthrough", Vfs::new(fs).unwrap(), Some(dir)));
    }
    v
}

#[test]
fn search_through_an_acl_and_its_cache() {
    for (what, vfs, _dir) in backends() {
        let r = vfs.as_root();
        r.mkdir(At::Root, "d", 0o750).unwrap();
        r.create(At::Root, "d/x", 0o644).unwrap();
        let (alice, bob) = (Cred::user(1001, 1001, &[]), Cred::user(1002, 1002, &[]));
        let (a, b) = (vfs.as_cred(&alice), vfs.as_cred(&bob));
        assert_eq!(
            a.stat(At::Root, "d/x").unwrap_err(),
            Errno::EACCES,
            "{what}"
        );
        let grant = acl("u::rwx,u:1001:--x,g::r-x,m::r-x,o::---");
        r.setxattr(At::Root, "d", POSIX_ACL_ACCESS, &grant, 0)
            .unwrap();
        // Many times: the first walks read the ACL, the rest use the cache.
        for _ in 0..3 {
            assert!(a.stat(At::Root, "d/x").is_ok(), "{what}");
            assert_eq!(b.stat(At::Root, "d/x").unwrap_err(), Errno::EACCES);
        }
        assert_eq!(r.stat(At::Root, "d").unwrap().perm, 0o750, "{what}");
        // chmod moves the mask: g-x takes alice's search away.
        let set = SetAttr {
            perm: Some(0o740),
            ..SetAttr::default()
        };
        r.setattr(At::Root, "d", &set).unwrap();
        assert_eq!(
            a.stat(At::Root, "d/x").unwrap_err(),
            Errno::EACCES,
            "{what}"
        );
        let now = r.getxattr(At::Root, "d", POSIX_ACL_ACCESS).unwrap();
        assert_eq!(now, acl("u::rwx,u:1001:--x,g::r-x,m::r--,o::---"), "{what}");
        // Replacing the ACL takes effect at once.
        let set = SetAttr {
            perm: Some(0o750),
            ..SetAttr::default()
        };
        r.setattr(At::Root, "d", &set).unwrap();
        assert!(a.stat(At::Root, "d/x").is_ok(), "{what}");
        let deny = acl("u::rwx,u:1002:--x,g::r-x,m::r-x,o::---");
        r.setxattr(At::Root, "d", POSIX_ACL_ACCESS, &deny, 0)
            .unwrap();
        assert_eq!(
            a.stat(At::Root, "d/x").unwrap_err(),
            Errno::EACCES,
            "{what}"
        );
        assert!(b.stat(At::Root, "d/x").is_ok(), "{what}");
        // Removing it: the mode alone again.
        r.removexattr(At::Root, "d", POSIX_ACL_ACCESS).unwrap();
        assert_eq!(
            b.stat(At::Root, "d/x").unwrap_err(),
            Errno::EACCES,
            "{what}"
        );
    }
}

#[test]
fn default_acls_replace_the_umask() {
    for (what, vfs, _dir) in backends() {
        let r = vfs.as_root();
        r.mkdir(At::Root, "plain", 0o777).unwrap();
        r.mkdir(At::Root, "inherit", 0o777).unwrap();
        let d = acl("u::rwx,u:1001:rwx,g::r-x,m::rwx,o::---");
        r.setxattr(At::Root, "inherit", POSIX_ACL_DEFAULT, &d, 0)
            .unwrap();
        let c = Cred::root().with_umask(0o027);
        let v = vfs.as_cred(&c);
        v.create(At::Root, "plain/f", 0o666).unwrap();
        v.mkdir(At::Root, "plain/s", 0o777).unwrap();
        assert_eq!(r.stat(At::Root, "plain/f").unwrap().perm, 0o640, "{what}");
        assert_eq!(r.stat(At::Root, "plain/s").unwrap().perm, 0o750, "{what}");
        v.create(At::Root, "inherit/f", 0o666).unwrap();
        v.mkdir(At::Root, "inherit/s", 0o777).unwrap();
        assert_eq!(r.stat(At::Root, "inherit/f").unwrap().perm, 0o660, "{what}");
        assert_eq!(r.stat(At::Root, "inherit/s").unwrap().perm, 0o770, "{what}");
        let fa = r.getxattr(At::Root, "inherit/f", POSIX_ACL_ACCESS).unwrap();
        assert_eq!(fa, acl("u::rw-,u:1001:rwx,g::r-x,m::rw-,o::---"), "{what}");
        let sd = r
            .getxattr(At::Root, "inherit/s", POSIX_ACL_DEFAULT)
            .unwrap();
        assert_eq!(sd, d, "{what}");
        // uid 1001 may write the file through its inherited entry.
        let alice = Cred::user(1001, 1001, &[]);
        let f = vfs
            .as_cred(&alice)
            .open(At::Root, "inherit/f", libc::O_WRONLY, 0);
        assert!(f.is_ok(), "{what}");
    }
}

/// A host-side ACL change under a passthrough is seen once the file's
/// attributes are revalidated (a stat: its ctime moved), as a host-side
/// chmod is.
#[test]
fn host_acl_changes_reach_the_cache() {
    if !is_root() {
        println!("SKIPPED host_acl_changes_reach_the_cache: needs root");
        return;
    }
    let (_, vfs, dir) = backends().pop().unwrap();
    let host = dir.unwrap();
    let r = vfs.as_root();
    r.create(At::Root, "f", 0o600).unwrap();
    let alice = Cred::user(1001, 1001, &[]);
    let a = vfs.as_cred(&alice);
    assert_eq!(a.open(At::Root, "f", 0, 0).unwrap_err(), Errno::EACCES);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let grant = acl("u::rw-,u:1001:r--,g::---,m::r--,o::---");
    let p = std::ffi::CString::new(host.path().join("f").to_str().unwrap()).unwrap();
    let name = std::ffi::CString::new(POSIX_ACL_ACCESS).unwrap();
    // SAFETY: NUL-terminated strings and a value of its length.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            grant.as_ptr().cast(),
            grant.len(),
            0,
        )
    };
    assert_eq!(rc, 0);
    assert_eq!(r.stat(At::Root, "f").unwrap().perm, 0o640);
    assert!(a.open(At::Root, "f", 0, 0).is_ok());
}
