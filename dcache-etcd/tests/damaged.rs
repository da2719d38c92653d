//! A damaged record (written by another host's bug, a newer version, a
//! hand with etcdctl) is the problem of the object it describes, and is
//! logged with its key (`Cause::Corrupt`): a garbage entry makes that
//! name EIO while the rest of its directory lists, a garbage tally is
//! worked around and creates in its directory go on, a garbage inode
//! counter is replaced by a sound one past every inode, not every create
//! on the volume refused.

mod common;

use common::{client, etcd_available, keys_under, Cluster};
use dcache::{At, Errno, FileType};
use dcache_etcd::{log, Cause, Options};

const GARBAGE: &[u8] = b"\xff\xfenot a record";

fn put(ep: &str, key: &str, value: &[u8]) {
    common::rt().block_on(async {
        let mut c = etcd_client::Client::connect([ep], None)
            .await
            .expect("connect");
        c.put(key, value, None).await.expect("put");
    });
}

fn names(v: &dcache::Vfs, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    v.as_root()
        .readdir(At::Root, dir, 0, &mut |e| {
            let n = String::from_utf8_lossy(&e.name).into_owned();
            if n != "." && n != ".." {
                out.push(n);
            }
            true
        })
        .expect("the directory lists");
    out.sort();
    out
}

#[test]
fn a_damaged_record_is_its_own_objects_error() {
    if !etcd_available("a_damaged_record_is_its_own_objects_error") {
        return;
    }
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    let spec = etcd.volume("/damaged");
    let (_fa, a) = client(&spec, Options::default());
    let root = a.as_root();
    root.mkdir(At::Root, "/d", 0o755).unwrap();
    for n in ["a", "b", "c"] {
        root.create(At::Root, format!("/d/{n}"), 0o644).unwrap();
    }
    let corrupt = log::count(Cause::Corrupt);

    // A garbage entry: that name is EIO, the others list and resolve.
    let entry = keys_under(&ep, "/damaged/d/")
        .into_iter()
        .find(|k| k.ends_with("/b"))
        .expect("b's entry key");
    put(&ep, &entry, GARBAGE);
    let (_fb, b) = client(&spec, Options::default());
    assert_eq!(names(&b, "/d"), ["a", "c"]);
    assert_eq!(b.as_root().stat(At::Root, "/d/b"), Err(Errno::EIO));
    assert_eq!(
        b.as_root().stat(At::Root, "/d/c").unwrap().kind,
        FileType::Regular
    );
    assert!(log::count(Cause::Corrupt) > corrupt, "logged");

    // A garbage tally of the directory: creates there go on.
    for k in keys_under(&ep, "/damaged/w/t/") {
        put(&ep, &k, GARBAGE);
    }
    for n in ["e", "f"] {
        a.as_root()
            .create(At::Root, format!("/d/{n}"), 0o644)
            .expect("a create beside a damaged tally");
        b.as_root()
            .create(At::Root, format!("/d/{n}2"), 0o644)
            .expect("another client's create too");
    }
    b.as_root()
        .stat(At::Root, "/d")
        .expect("the directory stats");

    // A garbage inode counter: a client with no numbers reserved creates,
    // under a number past every inode's.
    put(&ep, "/damaged/n", b"\x01\x02\x03");
    let (_fc, c) = client(&spec, Options::default());
    let made = c
        .as_root()
        .create(At::Root, "/after-the-counter", 0o644)
        .expect("a create past a damaged counter")
        .ino()
        .expect("an inode");
    assert!(made > 1 << 32, "{made} is past every reserved number");
    let again = c
        .as_root()
        .create(At::Root, "/and-the-next", 0o644)
        .unwrap()
        .ino()
        .unwrap();
    assert_ne!(made, again);
    assert_eq!(names(&c, "/d"), ["a", "c", "e", "e2", "f", "f2"]);
}
