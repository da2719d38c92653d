//! Extended attributes on etcd: set, get, list and remove through a
//! `Vfs` with Linux's errnos and flags, 64 KiB values and the per-inode
//! limit (ENOSPC), the attributes surviving every other inode change,
//! the record format (version 1 while an inode has none), POSIX ACL
//! values stored as given, two clients seeing each other's changes and
//! racing on one name, and a watch catching up on many large records.
//!
//! Each test starts its own etcd on 127.0.0.1; without the `etcd`
//! binary it prints one SKIPPED line and passes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{client, etcd_available, eventually, Cluster};
use dcache::xattr::{XATTR_CREATE, XATTR_REPLACE};
use dcache::{At, Cred, Errno, FileSystem, RenameFlags, SetAttr, Vfs};
use dcache_etcd::xattr::{ENTRY_HEADER, XATTR_TOTAL_MAX};
use dcache_etcd::Options;

const WAIT: Duration = Duration::from_secs(5);
const BIG: usize = 65536;

fn set(v: &Vfs, path: &str, name: &str, value: &[u8], flags: i32) -> Result<(), Errno> {
    v.as_root()
        .setxattr(At::Root, path, name.as_bytes(), value, flags)
}

fn get(v: &Vfs, path: &str, name: &str) -> Result<Vec<u8>, Errno> {
    v.as_root().getxattr(At::Root, path, name.as_bytes())
}

fn list(v: &Vfs, path: &str) -> Vec<String> {
    let l = v.as_root().listxattr(At::Root, path).unwrap();
    dcache::xattr::names(&l)
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

fn write(v: &Vfs, path: &str, off: u64, data: &[u8]) {
    let f = v.as_root().open(At::Root, path, libc::O_WRONLY, 0).unwrap();
    assert_eq!(f.write(off, data).unwrap(), data.len());
}

/// The first byte (format version) of `ino`'s record, read from etcd.
fn rec_version(etcd: &Cluster, prefix: &str, ino: u64) -> u8 {
    let key = dcache_etcd::codec::Keys::new(prefix).inode(ino);
    let ep = etcd.endpoint(0);
    common::rt().block_on(async move {
        let mut c = etcd_client::Client::connect([ep], None).await.unwrap();
        let r = c.get(key, None).await.unwrap();
        r.kvs()[0].value()[0]
    })
}

/// An ACL in the xattr format (version 2, entries of tag, permissions,
/// id), entries given in canonical order.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

const NO_ID: u32 = u32::MAX;

#[test]
fn set_get_list_remove_with_linux_errnos() {
    if !etcd_available("set_get_list_remove_with_linux_errnos") {
        return;
    }
    let etcd = Cluster::start(1);
    let (fs, v) = client(&etcd.volume("/x1"), Options::default());
    let r = v.as_root();
    r.create(At::Root, "/f", 0o644).unwrap();
    let ino = r.stat(At::Root, "/f").unwrap().ino;
    assert_eq!(list(&v, "/f"), Vec::<String>::new());
    assert_eq!(get(&v, "/f", "user.a"), Err(Errno::ENODATA));
    assert_eq!(rec_version(&etcd, "/x1", ino), 1);

    let before = r.stat(At::Root, "/f").unwrap().ctime;
    std::thread::sleep(Duration::from_millis(5));
    set(&v, "/f", "user.a", b"1", 0).unwrap();
    let after = r.stat(At::Root, "/f").unwrap().ctime;
    assert!(
        after > before,
        "setxattr moves ctime: {before:?} -> {after:?}"
    );
    assert_eq!(rec_version(&etcd, "/x1", ino), 2);
    assert_eq!(get(&v, "/f", "user.a").unwrap(), b"1");

    // Flags.
    assert_eq!(
        set(&v, "/f", "user.a", b"x", XATTR_CREATE),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        set(&v, "/f", "user.b", b"x", XATTR_REPLACE),
        Err(Errno::ENODATA)
    );
    assert_eq!(set(&v, "/f", "user.b", b"x", XATTR_CREATE), Ok(()));
    assert_eq!(set(&v, "/f", "user.b", b"yy", XATTR_REPLACE), Ok(()));
    assert_eq!(
        set(&v, "/f", "user.b", b"z", XATTR_CREATE | XATTR_REPLACE),
        Err(Errno::EEXIST)
    );
    assert_eq!(set(&v, "/f", "user.b", b"z", 4), Err(Errno::EINVAL));
    assert_eq!(get(&v, "/f", "user.b").unwrap(), b"yy");
    set(&v, "/f", "user.empty", b"", 0).unwrap();
    assert_eq!(get(&v, "/f", "user.empty").unwrap(), b"");
    set(&v, "/f", "trusted.t", b"tv", 0).unwrap();
    set(&v, "/f", "security.s", b"sv", 0).unwrap();
    assert_eq!(
        list(&v, "/f"),
        ["security.s", "trusted.t", "user.a", "user.b", "user.empty"]
    );
    // An unprivileged caller does not see trusted.* (the Vfs filters).
    let bob = Cred::user(1001, 1001, &[]);
    let l = v.as_cred(&bob).listxattr(At::Root, "/f").unwrap();
    assert_eq!(l, b"security.s\0user.a\0user.b\0user.empty\0");

    // Removal.
    let before = r.stat(At::Root, "/f").unwrap().ctime;
    std::thread::sleep(Duration::from_millis(5));
    r.removexattr(At::Root, "/f", b"user.a").unwrap();
    assert!(r.stat(At::Root, "/f").unwrap().ctime > before);
    assert_eq!(
        r.removexattr(At::Root, "/f", b"user.a"),
        Err(Errno::ENODATA)
    );
    assert_eq!(get(&v, "/f", "user.a"), Err(Errno::ENODATA));

    // 64 KiB values, and the per-inode limit.
    let big = vec![0x5a; BIG];
    set(&v, "/f", "user.big", &big, 0).unwrap();
    assert_eq!(get(&v, "/f", "user.big").unwrap(), big);
    assert_eq!(
        set(&v, "/f", "user.big", &[0; BIG + 1], 0),
        Err(Errno::E2BIG)
    );
    assert_eq!(set(&v, "/f", "user.big2", &big, 0), Err(Errno::ENOSPC));
    set(&v, "/f", "user.big", &vec![0xa5; BIG], XATTR_REPLACE).unwrap();
    assert_eq!(get(&v, "/f", "user.big").unwrap(), vec![0xa5; BIG]);
    set(&v, "/f", "user.half", &vec![1; BIG / 2], 0).unwrap();

    // The backend's own checks, for callers of the FileSystem itself.
    let mut out = Vec::new();
    assert_eq!(fs.setxattr(ino, b"", b"", 0), Err(Errno::ERANGE));
    assert_eq!(fs.setxattr(ino, &[b'u'; 300], b"", 0), Err(Errno::ERANGE));
    assert_eq!(fs.setxattr(ino, b"user.x", &big, 8), Err(Errno::EINVAL));
    assert_eq!(
        fs.getxattr(ino, b"user.none", &mut out),
        Err(Errno::ENODATA)
    );
    assert_eq!(fs.setxattr(999_999, b"user.x", b"", 0), Err(Errno::ENOENT));
    assert_eq!(
        fs.getxattr(999_999, b"user.x", &mut out),
        Err(Errno::ENOENT)
    );

    // Directories and symlinks.
    r.mkdir(At::Root, "/d", 0o755).unwrap();
    set(&v, "/d", "user.dir", b"dv", 0).unwrap();
    r.create(At::Root, "/d/inside", 0o644).unwrap();
    assert_eq!(get(&v, "/d", "user.dir").unwrap(), b"dv");
    r.symlink("f", At::Root, "/l").unwrap();
    let user_on_link = r.lsetxattr(At::Root, "/l", b"user.x", b"1", 0);
    assert_eq!(user_on_link, Err(Errno::EPERM));
    r.lsetxattr(At::Root, "/l", b"trusted.onlink", b"1", 0)
        .unwrap();
    assert_eq!(r.readlink(At::Root, "/l").unwrap(), b"f");
    assert_eq!(
        r.lgetxattr(At::Root, "/l", b"trusted.onlink").unwrap(),
        b"1"
    );
    assert_eq!(get(&v, "/l", "user.b").unwrap(), b"yy", "followed");
}

#[test]
fn attributes_survive_other_changes_and_reconnects() {
    if !etcd_available("attributes_survive_other_changes_and_reconnects") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/x2");
    let (_fs, v) = client(&spec, Options::default());
    let r = v.as_root();
    r.create(At::Root, "/f", 0o644).unwrap();
    set(&v, "/f", "user.keep", b"kept", 0).unwrap();
    write(&v, "/f", 0, &vec![3u8; 200_000]);
    let chmod = SetAttr {
        perm: Some(0o600),
        ..SetAttr::default()
    };
    r.setattr(At::Root, "/f", &chmod).unwrap();
    let trunc = SetAttr {
        size: Some(10),
        ..SetAttr::default()
    };
    r.setattr(At::Root, "/f", &trunc).unwrap();
    r.link(At::Root, "/f", At::Root, "/hard").unwrap();
    r.rename(At::Root, "/f", At::Root, "/g", RenameFlags::NONE)
        .unwrap();
    assert_eq!(get(&v, "/hard", "user.keep").unwrap(), b"kept");
    set(&v, "/hard", "user.via_link", b"2", 0).unwrap();
    let s = r.stat(At::Root, "/g").unwrap();
    assert_eq!((s.perm, s.size, s.nlink), (0o600, 10, 2));
    // The largest write (1 MiB over 17 full chunks) to a file whose
    // attributes take the whole per-inode limit: the record and the
    // chunks together still fit in one etcd request.
    set(&v, "/g", "user.big", &vec![9; BIG], 0).unwrap();
    let used: usize = [("user.keep", 4), ("user.via_link", 1), ("user.big", BIG)]
        .iter()
        .map(|(n, len)| ENTRY_HEADER + n.len() + len)
        .sum();
    let room = XATTR_TOTAL_MAX - used - ENTRY_HEADER - "user.fill".len();
    assert_eq!(
        set(&v, "/g", "user.fill", &vec![8; room + 1], 0),
        Err(Errno::ENOSPC)
    );
    set(&v, "/g", "user.fill", &vec![8; room], 0).unwrap();
    write(&v, "/g", 0, &vec![4u8; 1 << 20]);
    write(&v, "/g", 1 << 20, &vec![5u8; 1 << 20]);
    write(&v, "/g", 100, &vec![6u8; 1 << 20]);
    assert_eq!(r.stat(At::Root, "/g").unwrap().size, 2 << 20);
    assert_eq!(get(&v, "/g", "user.fill").unwrap(), vec![8; room]);

    // A new client reads them from etcd.
    let (_fs2, w) = client(&spec, Options::default());
    assert_eq!(get(&w, "/g", "user.keep").unwrap(), b"kept");
    assert_eq!(get(&w, "/g", "user.via_link").unwrap(), b"2");
    assert_eq!(get(&w, "/g", "user.big").unwrap(), vec![9; BIG]);
    assert_eq!(
        list(&w, "/hard"),
        ["user.big", "user.fill", "user.keep", "user.via_link"]
    );

    // Gone with the inode: a new file of the same name has none.
    r.unlink(At::Root, "/g").unwrap();
    r.unlink(At::Root, "/hard").unwrap();
    r.create(At::Root, "/g", 0o644).unwrap();
    assert_eq!(list(&v, "/g"), Vec::<String>::new());
}

#[test]
fn posix_acls_are_stored_as_given() {
    if !etcd_available("posix_acls_are_stored_as_given") {
        return;
    }
    let etcd = Cluster::start(1);
    let (_fs, v) = client(&etcd.volume("/x3"), Options::default());
    let r = v.as_root();
    r.create(At::Root, "/f", 0o644).unwrap();
    r.mkdir(At::Root, "/d", 0o755).unwrap();
    let access = "system.posix_acl_access";
    let default = "system.posix_acl_default";
    // user::rw-, user:1001:r--, group::r--, mask::r--, other::r--
    let full = acl(&[
        (0x01, 6, NO_ID),
        (0x02, 4, 1001),
        (0x04, 4, NO_ID),
        (0x10, 4, NO_ID),
        (0x20, 4, NO_ID),
    ]);
    set(&v, "/f", access, &full, 0).unwrap();
    assert_eq!(get(&v, "/f", access).unwrap(), full);
    set(&v, "/d", default, &full, 0).unwrap();
    assert_eq!(get(&v, "/d", default).unwrap(), full);
    // A minimal ACL is a mode (a setattr on the backend), and no ACL.
    r.create(At::Root, "/m", 0o644).unwrap();
    let minimal = acl(&[(0x01, 7, NO_ID), (0x04, 5, NO_ID), (0x20, 0, NO_ID)]);
    set(&v, "/m", access, &minimal, 0).unwrap();
    assert_eq!(r.stat(At::Root, "/m").unwrap().perm, 0o750);
    assert_eq!(get(&v, "/m", access), Err(Errno::ENODATA));
    // Removing the ACLs.
    r.removexattr(At::Root, "/f", access.as_bytes()).unwrap();
    r.removexattr(At::Root, "/d", default.as_bytes()).unwrap();
    assert_eq!(get(&v, "/d", default), Err(Errno::ENODATA));
}

#[test]
fn two_clients_see_each_others_attributes() {
    if !etcd_available("two_clients_see_each_others_attributes") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/x4");
    let (_fa, a) = client(&spec, Options::default());
    let (fb, b) = client(&spec, Options::default());
    assert!(fb.is_current(), "watch not current after connect");
    a.as_root().create(At::Root, "/f", 0o644).unwrap();
    // B reads (and mirrors) the record before each change.
    eventually(WAIT, || list(&b, "/f").is_empty()).expect("create seen");
    set(&a, "/f", "user.a", b"from A", 0).unwrap();
    eventually(WAIT, || {
        get(&b, "/f", "user.a").is_ok_and(|x| x == b"from A")
    })
    .expect("A's set seen by B");
    set(&a, "/f", "user.a", b"again", XATTR_REPLACE).unwrap();
    eventually(WAIT, || {
        get(&b, "/f", "user.a").is_ok_and(|x| x == b"again")
    })
    .expect("A's replace seen by B");
    set(&b, "/f", "user.b", &vec![1; BIG], 0).unwrap();
    eventually(WAIT, || list(&a, "/f") == ["user.a", "user.b"]).expect("B's set seen by A");
    assert_eq!(get(&a, "/f", "user.b").unwrap(), vec![1; BIG]);
    b.as_root().removexattr(At::Root, "/f", b"user.a").unwrap();
    eventually(WAIT, || get(&a, "/f", "user.a") == Err(Errno::ENODATA))
        .expect("B's remove seen by A");
    // B's flags are checked against A's change, not B's mirror.
    set(&a, "/f", "user.c", b"c", 0).unwrap();
    assert_eq!(
        set(&b, "/f", "user.c", b"x", XATTR_CREATE),
        Err(Errno::EEXIST)
    );
    a.as_root().removexattr(At::Root, "/f", b"user.c").unwrap();
    assert_eq!(
        b.as_root().removexattr(At::Root, "/f", b"user.c"),
        Err(Errno::ENODATA)
    );
}

#[test]
fn racing_clients_lose_no_update() {
    if !etcd_available("racing_clients_lose_no_update") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/x5");
    let (_fa, a) = client(&spec, Options::default());
    let (_fb, b) = client(&spec, Options::default());
    a.as_root().create(At::Root, "/f", 0o644).unwrap();
    eventually(WAIT, || b.as_root().stat(At::Root, "/f").is_ok()).expect("create seen");
    let (a, b) = (Arc::new(a), Arc::new(b));
    // One XATTR_CREATE per name from each client: exactly one wins.
    const ROUNDS: usize = 20;
    let run = |v: Arc<Vfs>, tag: &'static str| {
        std::thread::spawn(move || {
            let mut won = Vec::new();
            for i in 0..ROUNDS {
                let name = format!("user.race{i}");
                match set(&v, "/f", &name, tag.as_bytes(), XATTR_CREATE) {
                    Ok(()) => won.push(i),
                    Err(e) => assert_eq!(e, Errno::EEXIST, "{name}"),
                }
                // And a name of its own, which must never be lost.
                set(&v, "/f", &format!("user.{tag}{i}"), b"1", 0).unwrap();
            }
            won
        })
    };
    let (ta, tb) = (run(a.clone(), "a"), run(b.clone(), "b"));
    let (wa, wb) = (ta.join().unwrap(), tb.join().unwrap());
    assert_eq!(wa.len() + wb.len(), ROUNDS, "a won {wa:?}, b won {wb:?}");
    // A lists from its mirror of the record, which shows B's last changes
    // within the staleness bound (not at once): wait for them, then check
    // that none was lost, from both sides.
    let _ = eventually(WAIT, || list(&a, "/f").len() == 3 * ROUNDS);
    let names = list(&a, "/f");
    assert_eq!(names.len(), 3 * ROUNDS, "{names:?}");
    assert_eq!(list(&b, "/f"), names, "B's list is A's");
    for i in 0..ROUNDS {
        let who = get(&a, "/f", &format!("user.race{i}")).unwrap();
        let want: &[u8] = if wa.contains(&i) { b"a" } else { b"b" };
        assert_eq!(who, want, "race {i}");
    }
}

/// A client whose member was down catches up on many large records at
/// once (one watch response for up to 1000 revisions, here ~6 MiB, past
/// the gRPC client's default 4 MiB limit): its watch must take it and be
/// current again, not fail on it at every restart.
#[test]
fn a_watch_catches_up_on_large_records() {
    if !etcd_available("a_watch_catches_up_on_large_records") {
        return;
    }
    let mut etcd = Cluster::start(3);
    let spec_a = format!("{},{}/x6", etcd.endpoint(0), etcd.endpoint(2));
    common::format_volume(&spec_a);
    let spec_b = format!("{}/x6", etcd.endpoint(1));
    let (_fa, a) = client(&spec_a, Options::default());
    let (fb, b) = client(&spec_b, Options::default());
    a.as_root().create(At::Root, "/f", 0o644).unwrap();
    set(&a, "/f", "user.still", &vec![1; 60_000], 0).unwrap();
    eventually(WAIT, || get(&b, "/f", "user.still").is_ok()).expect("seen");
    etcd.kill(1);
    const N: u8 = 48;
    for i in 0..N {
        set(&a, "/f", "user.moving", &vec![i; 60_000], 0).unwrap();
    }
    etcd.restart(1);
    let caught_up = eventually(Duration::from_secs(20), || {
        fb.is_current() && get(&b, "/f", "user.moving").is_ok_and(|v| v[0] == N - 1)
    });
    let restarts = fb
        .stats()
        .watch_restarts
        .load(std::sync::atomic::Ordering::Relaxed);
    println!("caught up in {caught_up:?}; watch restarts {restarts}");
    caught_up.expect("B's watch current again, with the last value");
}
