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

/// etcd, a local store and a volume `/ou` on them, and client options
/// with a 1 s grace period (`None`: a component is missing, said once).
fn volume(t: &str) -> Option<(Cluster, TestStore, String, Options)> {
    if !etcd_available(t) {
        return None;
    }
    let store = TestStore::new(Store::Local, t)?;
    let etcd = Cluster::start(1);
    let spec = object_volume(&etcd, "/ou", &store);
    let opts = Options {
        gc_grace: Duration::from_secs(1),
        ..Options::default()
    };
    Some((etcd, store, spec, opts))
}

#[test]
fn an_unlinked_open_file_keeps_its_data_until_the_last_close() {
    let t = "an_unlinked_open_file_keeps_its_data_until_the_last_close";
    let Some((etcd, store, spec, opts)) = volume(t) else {
        return;
    };
    let (ep, grace) = (etcd.endpoint(0), opts.gc_grace);
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

/// O_TMPFILE on an object-store volume: a file with no name, kept while
/// open past the grace period; one closed without a name goes (record,
/// lists, objects), one given a name by `link` stays after its close, and
/// O_EXCL or a second link attempt after an unlink get ENOENT, as Linux
/// answers.
#[test]
fn tmpfiles_are_kept_while_open_and_named_or_collected() {
    let t = "tmpfiles_are_kept_while_open_and_named_or_collected";
    let Some((etcd, store, spec, opts)) = volume(t) else {
        return;
    };
    let (ep, grace) = (etcd.endpoint(0), opts.gc_grace);
    let (fa, a) = client(&spec, opts);
    let objects = || store.objects().len();
    let inodes_before = keys(&ep, "w/i/").len();
    let r = a.as_root();

    // Closed without a name: gone.
    let f = r.tmpfile(At::Root, "/", libc::O_RDWR, 0o600).unwrap();
    f.write(0, &block(1)).unwrap();
    fa.fsync(f.ino(), f.fh(), false).unwrap();
    assert_eq!(fa.getattr(f.ino()).unwrap().nlink, 0);
    std::thread::sleep(grace * 2);
    let mut buf = vec![0u8; MIB as usize];
    assert_eq!(f.read(0, &mut buf), Ok(MIB as usize));
    assert!(buf == block(1), "kept while open");
    assert_eq!(keys(&ep, "a/l/").len(), 1, "linkable");
    f.close().unwrap();
    assert!(
        eventually(grace * 6, || objects() == 0
            && keys(&ep, "w/i/").len() == inodes_before
            && keys(&ep, "a/i/").is_empty()
            && keys(&ep, "a/l/").is_empty())
        .is_some(),
        "left: {:?} {:?} {:?}",
        keys(&ep, "w/i/"),
        keys(&ep, "a/i/"),
        keys(&ep, "a/l/")
    );

    // Given a name: kept past its close and the grace period.
    let g = r.tmpfile(At::Root, "/", libc::O_RDWR, 0o640).unwrap();
    g.write(0, &block(2)).unwrap();
    r.link_dentry(g.dentry(), At::Root, "/named").unwrap();
    assert_eq!(fa.getattr(g.ino()).unwrap().nlink, 1);
    assert!(keys(&ep, "a/l/").is_empty() && keys(&ep, "a/i/").is_empty());
    g.close().unwrap();
    std::thread::sleep(grace * 3);
    let h = r.open(At::Root, "/named", libc::O_RDONLY, 0).unwrap();
    assert_eq!(h.read(0, &mut buf), Ok(MIB as usize));
    assert!(buf == block(2), "the named tmpfile's data");
    assert_eq!(r.stat(At::Root, "/named").unwrap().perm, 0o640);
    h.close().unwrap();
    assert_eq!(objects(), 1);

    // O_EXCL: never linkable; an unlinked named file neither.
    let x = r
        .tmpfile(At::Root, "/", libc::O_RDWR | libc::O_EXCL, 0o600)
        .unwrap();
    assert_eq!(
        r.link_dentry(x.dentry(), At::Root, "/x").err(),
        Some(Errno::ENOENT)
    );
    x.close().unwrap();
    let y = r.open(At::Root, "/named", libc::O_RDWR, 0).unwrap();
    r.unlink(At::Root, "/named").unwrap();
    assert_eq!(
        r.link_dentry(y.dentry(), At::Root, "/again").err(),
        Some(Errno::ENOENT)
    );
    y.close().unwrap();
    eventually(grace * 6, || objects() == 0).expect("the unlinked file's objects go");
}
