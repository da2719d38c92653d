//! Permission checks through `Vfs::as_cred` and `ReadSection` (the full
//! matrix against the kernel is tests/perm_diff.rs): search permission in
//! rcu-walk and ref-walk, EACCES mid-walk with every count balanced, and
//! a read section held across many calls while names come and go.

use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::fs::SetAttr;
use dcache::{At, Caps, Cred, Errno, Vfs};

fn tree() -> Vfs {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("open/deep", 0o755).unwrap();
    fs.write_file("open/deep/file", b"x").unwrap();
    fs.mkdir_p("closed/inner", 0o755).unwrap();
    fs.write_file("closed/inner/file", b"y").unwrap();
    let vfs = Vfs::new(fs).unwrap();
    let set = SetAttr {
        perm: Some(0o700),
        ..SetAttr::default()
    };
    vfs.as_root().setattr(At::Root, "closed", &set).unwrap();
    vfs
}

#[test]
fn search_permission_is_checked_on_every_directory() {
    let vfs = tree();
    let user = Cred::user(1000, 1000, &[]);
    let u = vfs.as_cred(&user);
    assert_eq!(u.stat(At::Root, "open/deep/file").unwrap().size, 1);
    // Twice: the second time from the cache, in rcu-walk.
    for _ in 0..2 {
        assert_eq!(u.stat(At::Root, "closed/inner/file"), Err(Errno::EACCES));
        assert_eq!(u.stat(At::Root, "closed/nothing"), Err(Errno::EACCES));
        assert_eq!(
            u.lookup(At::Root, "closed/inner", true).err(),
            Some(Errno::EACCES)
        );
    }
    // The directory itself may be stat'ed (its parent is searchable).
    assert_eq!(u.stat(At::Root, "closed").unwrap().perm, 0o700);
    // Root, and a caller with CAP_DAC_READ_SEARCH, pass.
    assert!(vfs.as_root().stat(At::Root, "closed/inner/file").is_ok());
    let rs = Cred::user(1000, 1000, &[]).with_caps(Caps::DAC_READ_SEARCH);
    assert!(vfs.as_cred(&rs).stat(At::Root, "closed/inner/file").is_ok());
    // Creating under it is refused too, and nothing leaks.
    assert_eq!(
        u.create(At::Root, "closed/new", 0o644).err(),
        Some(Errno::EACCES)
    );
    assert_eq!(
        u.mkdir(At::Root, "open/mine", 0o755).err(),
        Some(Errno::EACCES)
    );
    // Every reference the refused calls took was given back: everything
    // but the root can be shrunk, and the Vfs frees all it allocated.
    let c = vfs.counters();
    vfs.shrink(usize::MAX);
    assert_eq!(c.dentries(), 1, "only the root stays");
    assert_eq!(vfs.root().count(), 2, "the Vfs's own and this probe's");
    drop(vfs);
    assert_eq!((c.dentries(), c.allocated(), c.inodes()), (0, 0, 0));
}

#[test]
fn owners_create_and_remove_in_their_directories() {
    let vfs = tree();
    let set = SetAttr {
        uid: Some(1000),
        gid: Some(1000),
        ..SetAttr::default()
    };
    vfs.as_root().setattr(At::Root, "open", &set).unwrap();
    let user = Cred::user(1000, 1000, &[]);
    let u = vfs.as_cred(&user);
    let f = u.create(At::Root, "open/mine", 0o600).unwrap();
    let a = f.attr().unwrap();
    assert_eq!((a.uid, a.gid, a.perm), (1000, 1000, 0o600));
    drop(f);
    let other = Cred::user(1001, 1001, &[]);
    let o = vfs.as_cred(&other);
    assert_eq!(o.stat(At::Root, "open/mine").unwrap().uid, 1000);
    assert_eq!(
        o.open(At::Root, "open/mine", libc::O_RDONLY, 0).err(),
        Some(Errno::EACCES)
    );
    assert_eq!(o.unlink(At::Root, "open/mine"), Err(Errno::EACCES));
    let chmod = SetAttr {
        perm: Some(0o644),
        ..SetAttr::default()
    };
    assert_eq!(
        o.setattr(At::Root, "open/mine", &chmod).err(),
        Some(Errno::EPERM)
    );
    u.setattr(At::Root, "open/mine", &chmod).unwrap();
    assert!(o.open(At::Root, "open/mine", libc::O_RDONLY, 0).is_ok());
    assert_eq!(
        o.access(At::Root, "open/mine", libc::W_OK, 0),
        Err(Errno::EACCES)
    );
    assert_eq!(o.access(At::Root, "open/mine", libc::R_OK, 0), Ok(()));
    u.unlink(At::Root, "open/mine").unwrap();
}

#[test]
fn a_read_section_serves_many_calls_while_names_change() {
    let vfs = Arc::new(tree());
    let user = Cred::user(1000, 1000, &[]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (vfs, stop) = (vfs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = vfs.as_root().create(At::Root, "open/deep/tmp", 0o644);
                let _ = vfs.as_root().unlink(At::Root, "open/deep/tmp");
                vfs.shrink(8);
                n += 1;
            }
            n
        })
    };
    let mut s = vfs.read_section_every(16);
    let mut seen = 0;
    for i in 0..20_000 {
        assert_eq!(s.stat(&user, At::Root, "open/deep/file").unwrap().size, 1);
        assert_eq!(
            s.stat(&user, At::Root, "closed/inner/file"),
            Err(Errno::EACCES)
        );
        match s.stat(&user, At::Root, "open/deep/tmp") {
            Ok(_) => seen += 1,
            Err(Errno::ENOENT) => {}
            Err(e) => panic!("step {i}: {e:?}"),
        }
    }
    drop(s);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = churn.join().unwrap();
    assert!(rounds > 0, "the churn thread ran");
    let _ = seen;
    let c = vfs.counters();
    drop(vfs);
    assert_eq!(c.dentries(), 0);
    assert_eq!(c.allocated(), 0);
}

/// Rename loops are refused by the VFS, before any permission check, as in
/// Linux's do_renameat2: a caller without write permission anywhere still
/// gets EINVAL for moving a directory below itself, and ENOTEMPTY for
/// replacing an ancestor of the source.
#[test]
fn rename_loops_are_refused_before_permissions() {
    let vfs = tree();
    let user = Cred::user(1000, 1000, &[]);
    let u = vfs.as_cred(&user);
    let none = dcache::RenameFlags::NONE;
    assert_eq!(
        u.rename(At::Root, "open", At::Root, "open/deep/x", none),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        u.rename(At::Root, "open", At::Root, "open/x", none),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        u.rename(At::Root, "open/deep/file", At::Root, "open", none),
        Err(Errno::ENOTEMPTY)
    );
    // Without a loop, the same caller meets the permission check.
    assert_eq!(
        u.rename(At::Root, "open/deep/file", At::Root, "open/y", none),
        Err(Errno::EACCES)
    );
    // And root gets the same loop errors.
    assert_eq!(
        vfs.as_root()
            .rename(At::Root, "open", At::Root, "open/deep/x", none),
        Err(Errno::EINVAL)
    );
}
