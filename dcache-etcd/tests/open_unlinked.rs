//! POSIX open-file semantics on an object-store volume: a file unlinked
//! while open stays readable and writable through every descriptor still
//! open, on the client that unlinked it and on another, long past the
//! grace period; once the last one closes, every key and object of the
//! file goes. Each test runs on a local directory store.

mod common;

use std::time::{Duration, Instant};

use common::{
    client, etcd_available, eventually, keys_under, object_volume, Cluster, Store, TestStore,
};
use dcache::{At, Errno, FileSystem};
use dcache_etcd::Options;

const MIB: u64 = 1 << 20;

fn block(k: u64) -> Vec<u8> {
    (0..MIB)
        .map(|i| ((k * 37 + i / 256) ^ (i & 0x7f)) as u8)
        .collect()
}

/// Every key of the volume under `P/<part>` (`w/i/`, `b/`, `a/i/`, ...).
fn keys(ep: &str, part: &str) -> Vec<String> {
    keys_under(ep, &format!("/ou/{part}"))
}

#[test]
fn an_unlinked_open_file_keeps_its_data_until_the_last_close() {
    let t = "an_unlinked_open_file_keeps_its_data_until_the_last_close";
    if !etcd_available(t) {
        return;
    }
    let Some(store) = TestStore::new(Store::Local, t) else {
        return;
    };
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    let spec = object_volume(&etcd, "/ou", &store);
    let grace = Duration::from_secs(1);
    let opts = Options {
        gc_grace: grace,
        ..Options::default()
    };
    let (fa, a) = client(&spec, opts.clone());
    let (_fb, b) = client(&spec, opts);
    let objects = || store.objects().len();
    let inodes_before = keys(&ep, "w/i/").len();

    // The same client: written, unlinked, then read and written again
    // long after the grace period.
    let f = a
        .as_root()
        .open(At::Root, "/same", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    for k in 0..5 {
        f.write(k * MIB, &block(k)).unwrap();
    }
    fa.fsync(f.ino(), f.fh(), false).unwrap();
    a.as_root().unlink(At::Root, "/same").unwrap();
    assert_eq!(a.as_root().stat(At::Root, "/same"), Err(Errno::ENOENT));
    std::thread::sleep(grace * 3);
    let mut buf = vec![0u8; MIB as usize];
    for k in 0..5 {
        assert_eq!(f.read(k * MIB, &mut buf), Ok(MIB as usize));
        assert!(buf == block(k), "MiB {k} after the unlink");
    }
    f.write(5 * MIB, &block(5)).unwrap();
    fa.fsync(f.ino(), f.fh(), false).unwrap();
    assert_eq!(f.read(5 * MIB, &mut buf), Ok(MIB as usize));
    assert!(buf == block(5), "written after the unlink");
    let st = fa.getattr(f.ino()).unwrap();
    assert_eq!((st.nlink, st.size), (0, 6 * MIB));
    assert!(objects() > 0);
    let t0 = Instant::now();
    f.close().unwrap();
    eventually(grace * 6, || objects() == 0).expect("the objects go after the last close");
    println!(
        "same client: objects gone {:.2?} after the close",
        t0.elapsed()
    );
    assert!(
        eventually(grace * 4, || keys(&ep, "w/i/").len() == inodes_before
            && keys(&ep, "b/").is_empty()
            && keys(&ep, "a/i/").is_empty()
            && keys(&ep, "a/o/").is_empty())
        .is_some(),
        "inode {:?}, lists {:?}, dead {:?}, open {:?}",
        keys(&ep, "w/i/"),
        keys(&ep, "b/"),
        keys(&ep, "a/i/"),
        keys(&ep, "a/o/")
    );

    // Another client unlinks what this one has open.
    let g = a
        .as_root()
        .open(At::Root, "/cross", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    for k in 0..3 {
        g.write(k * MIB, &block(10 + k)).unwrap();
    }
    fa.fsync(g.ino(), g.fh(), false).unwrap();
    // Its open record is in etcd well within the grace period.
    assert!(eventually(grace / 2, || keys(&ep, "a/o/").len() == 1).is_some());
    b.as_root().unlink(At::Root, "/cross").unwrap();
    std::thread::sleep(grace * 3);
    assert_eq!(b.as_root().stat(At::Root, "/cross"), Err(Errno::ENOENT));
    for k in 0..3 {
        assert_eq!(g.read(k * MIB, &mut buf), Ok(MIB as usize));
        assert!(
            buf == block(10 + k),
            "MiB {k} after the other client's unlink"
        );
    }
    assert_eq!(objects(), 1, "kept while open");
    let t0 = Instant::now();
    g.close().unwrap();
    eventually(grace * 6, || objects() == 0).expect("the objects go after the last close");
    println!(
        "other client: objects gone {:.2?} after the close",
        t0.elapsed()
    );
    assert!(
        eventually(grace * 4, || keys(&ep, "w/i/").len() == inodes_before
            && keys(&ep, "a/o/").is_empty())
        .is_some()
    );
}
