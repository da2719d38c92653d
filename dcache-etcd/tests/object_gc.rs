//! Garbage of an object-store volume: a writer killed mid-write leaves its
//! last committed state and orphan objects that `gc` removes; objects
//! overwritten, truncated away or unlinked are deleted after the grace
//! period, not before. Each test runs on a local directory store and
//! (`_on_s3`) on the S3 gateway of a SeaweedFS server it starts.

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    client, etcd_available, eventually, keys_under, object_volume, Cluster, Store, TestStore,
};
use dcache::{At, FileSystem, SetAttr};
use dcache_etcd::{GcOptions, Options};

const MIB: u64 = 1 << 20;

/// The bytes of MiB `k` of the writer's file.
fn block(k: u64) -> Vec<u8> {
    (0..MIB)
        .map(|i| ((k * 131 + i / 512) ^ (i & 0xff)) as u8)
        .collect()
}

/// The child: writes 1 GiB in 1 MiB writes, fsync every 32 MiB (printing
/// how much is synced), until it is killed.
#[test]
fn child_writer_waiting_to_be_killed() {
    let Ok(spec) = std::env::var("DCACHE_ETCD_WRITER_SPEC") else {
        return; // not the child
    };
    let opts = Options {
        lease_ttl: Duration::from_secs(3),
        timeout: Duration::from_secs(2),
        ..Options::default()
    };
    let (fs, v) = client(&spec, opts);
    let f = v
        .as_root()
        .open(At::Root, "/big", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    for k in 0..1024 {
        f.write(k * MIB, &block(k)).unwrap();
        if (k + 1) % 32 == 0 {
            fs.fsync(f.ino(), f.fh(), false).unwrap();
            println!("synced {}", (k + 1) * MIB);
        }
    }
    println!("done");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_writer_leaves_its_last_commit_and_gc_removes_orphans() {
    killed_writer(
        Store::Local,
        "a_killed_writer_leaves_its_last_commit_and_gc_removes_orphans",
    );
}

#[test]
fn a_killed_writer_leaves_its_last_commit_and_gc_removes_orphans_on_s3() {
    killed_writer(
        Store::S3,
        "a_killed_writer_leaves_its_last_commit_and_gc_removes_orphans_on_s3",
    );
}

fn killed_writer(kind: Store, t: &str) {
    if !etcd_available(t) {
        return;
    }
    let Some(store) = TestStore::new(kind, t) else {
        return;
    };
    let etcd = Cluster::start(1);
    let spec = object_volume(&etcd, "/killed", &store);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_writer_waiting_to_be_killed",
            "--nocapture",
        ])
        .env("DCACHE_ETCD_WRITER_SPEC", &spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut synced = 0;
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("synced ") {
            synced = n.parse::<u64>().unwrap();
            if synced >= 256 * MIB {
                break;
            }
        }
        assert_ne!(line, "done", "the writer finished before it was killed");
    }
    // In the middle of its next 32 MiB: etcd frozen, and the writer
    // killed once an object it uploaded after the freeze is in the store
    // (its commit is sent to a frozen etcd). A freeze that lands while a
    // commit is in flight uploads nothing more: thawed within the
    // writer's 2 s timeout (so that no commit fails and is retried under
    // a new id), and frozen again. Fixed sleeps failed here under load:
    // the flush after the freeze had not uploaded 650 ms later, or had
    // uploaded just before it.
    std::thread::sleep(Duration::from_millis(150));
    let mut frozen_upload = None;
    for _ in 0..20 {
        etcd.signal(0, "STOP");
        let before = store.objects();
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            frozen_upload = store.objects().difference(&before).next().copied();
            if frozen_upload.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if frozen_upload.is_some() {
            break;
        }
        etcd.signal(0, "CONT");
        std::thread::sleep(Duration::from_millis(200));
    }
    let frozen_upload = frozen_upload.expect("the writer uploaded nothing while etcd was frozen");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    etcd.signal(0, "CONT");
    // An orphan planted now is old enough for gc by the time it runs
    // (the store's clock dates it: a server's time, not one set here).
    let (_fs, v) = client(&spec, Options::default());
    let uuid = _fs.volume().record.uuid.clone();
    let old = dcache_etcd::slices::object_path(&uuid, 0xfff_fabc);
    store.put(&old, b"orphan");
    let planted = Instant::now();

    let size = v.as_root().stat(At::Root, "/big").unwrap().size;
    assert!(
        size >= synced && size <= 1 << 30,
        "size {size}, synced {synced}"
    );
    // A commit holds whole writes (1 MiB each), usually whole 4 MiB
    // blocks; but a flush whose commit timed out (etcd frozen a little
    // longer than the writer's timeout, under load) keeps its bytes, and
    // the next flush commits them with the write that followed (seen in
    // CI: size = 1 MiB past a block).
    assert_eq!(size % MIB, 0, "a flush commits whole writes");
    read_back(&v, size);

    // Past the writer's timeout and lease: nothing it uploaded can be
    // committed any more, and the planted orphan is older than min_age
    // by more than the second gc adds to every date (S3 dates are whole
    // seconds).
    let min_age = Duration::from_secs(5);
    std::thread::sleep((min_age + Duration::from_millis(1500)).saturating_sub(planted.elapsed()));
    let young = dcache_etcd::slices::object_path(&uuid, 0xfff_fabd);
    store.put(&young, b"orphan");
    let gc = |dry_run| dcache_etcd::gc(&spec, &GcOptions { min_age, dry_run }).unwrap();
    let dry = gc(true);
    // The planted one, and whatever the writer uploaded and never
    // committed: the upload made during the freeze, unless its commit,
    // waiting in etcd's socket, was applied when etcd thawed (and under
    // load, uploads whose commit timed out and was retried under a new
    // id), so at least one.
    assert!(dry.orphans >= 1 && dry.young == 1, "{dry:?}");
    assert!(store.exists(&old));
    let frozen = dcache_etcd::slices::object_path(&uuid, frozen_upload);
    let done = gc(false);
    let frozen_orphan = !store.exists(&frozen);
    println!(
        "killed after {synced} bytes synced: size {size}; gc: {done:?} \
         (the upload made during the freeze: {})",
        if frozen_orphan {
            "an orphan, deleted"
        } else {
            "committed, kept"
        }
    );
    assert_eq!(done.orphans, dry.orphans);
    assert!(
        dry.orphans > u64::from(frozen_orphan),
        "the frozen upload was deleted without being counted: {dry:?}"
    );
    assert!(!store.exists(&old), "the old orphan was deleted");
    assert!(store.exists(&young), "a young object is kept");
    // Nothing the file names was deleted: read by a client of its own,
    // which has none of it cached.
    let (_fs2, v2) = client(&spec, Options::default());
    read_back(&v2, size);
    store.delete(&young);
    let after = gc(true);
    assert_eq!(
        (after.orphans, after.young, after.pending),
        (0, 0, 0),
        "{after:?}"
    );
    assert_eq!(after.objects, after.named);
    assert_eq!(store.objects().len() as u64, after.named);
}

/// Every MiB of the writer's file, `size` bytes, read through `v`.
fn read_back(v: &dcache::Vfs, size: u64) {
    let f = v
        .as_root()
        .open(At::Root, "/big", libc::O_RDONLY, 0)
        .unwrap();
    let mut buf = vec![0u8; MIB as usize];
    for k in 0..size / MIB {
        assert_eq!(f.read(k * MIB, &mut buf).unwrap(), MIB as usize);
        assert!(buf == block(k), "MiB {k} differs");
    }
    assert_eq!(f.read(size, &mut buf).unwrap(), 0);
    f.close().unwrap();
}

#[test]
fn overwritten_truncated_and_unlinked_data_is_freed_after_the_grace_period() {
    freed_after_grace(
        Store::Local,
        "overwritten_truncated_and_unlinked_data_is_freed_after_the_grace_period",
    );
}

#[test]
fn overwritten_truncated_and_unlinked_data_is_freed_after_the_grace_period_on_s3() {
    freed_after_grace(
        Store::S3,
        "overwritten_truncated_and_unlinked_data_is_freed_after_the_grace_period_on_s3",
    );
}

fn freed_after_grace(kind: Store, t: &str) {
    if !etcd_available(t) {
        return;
    }
    let Some(store) = TestStore::new(kind, t) else {
        return;
    };
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    let spec = object_volume(&etcd, "/grace", &store);
    let grace = Duration::from_secs(2);
    let opts = Options {
        gc_grace: grace,
        ..Options::default()
    };
    let (fs, v) = client(&spec, opts);
    let objects = || store.objects().len();
    let settles = |n: usize| eventually(grace * 4, || objects() == n);
    let f = v
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    for k in 0..12 {
        f.write(k * MIB, &block(k)).unwrap();
    }
    fs.fsync(f.ino(), f.fh(), false).unwrap();
    assert_eq!(objects(), 3);

    // Overwriting the first 4 MiB drops its object, kept for the grace
    // period (a reader may have read the list before).
    for k in 0..4 {
        f.write(k * MIB, &block(100 + k)).unwrap();
    }
    let t = Instant::now();
    fs.fsync(f.ino(), f.fh(), false).unwrap();
    assert_eq!(objects(), 4);
    assert_eq!(keys_under(&ep, "/grace/a/g/").len(), 1);
    let freed = settles(3).expect("the overwritten object deleted");
    assert!(t.elapsed() >= grace, "deleted after {:?}", t.elapsed());
    println!(
        "overwritten object deleted {:?} after the overwrite",
        t.elapsed()
    );
    assert!(freed <= grace * 3);
    // Its garbage record goes after the object.
    assert!(eventually(grace, || keys_under(&ep, "/grace/a/g/").is_empty()).is_some());
    let mut buf = vec![0u8; MIB as usize];
    f.read(0, &mut buf).unwrap();
    assert!(buf == block(100));

    // Truncating to 2 MiB drops the two later objects.
    let set = SetAttr {
        size: Some(2 * MIB),
        ..SetAttr::default()
    };
    v.as_root().setattr(At::Root, "/f", &set).unwrap();
    assert_eq!(objects(), 3, "kept for the grace period");
    settles(1).expect("the truncated objects deleted");
    assert_eq!(keys_under(&ep, "/grace/b/").len(), 1);

    // Unlinking: the lists and the last object go after the grace period.
    f.close().unwrap();
    v.as_root().unlink(At::Root, "/f").unwrap();
    assert_eq!(objects(), 1);
    assert_eq!(keys_under(&ep, "/grace/a/i/").len(), 1);
    settles(0).expect("the unlinked file's objects deleted");
    assert!(eventually(grace * 2, || keys_under(&ep, "/grace/b/").is_empty()).is_some());
    assert!(eventually(grace * 2, || keys_under(&ep, "/grace/a/i/").is_empty()).is_some());
    assert!(keys_under(&ep, "/grace/a/g/").is_empty());

    // A file unlinked while this client still buffers for it: close
    // succeeds (as for an unlinked file on Linux) and commits the bytes to
    // the unlinked inode (its descriptors may still read them: see
    // tests/open_unlinked.rs), whose objects go with it after the close.
    let g = v
        .as_root()
        .open(At::Root, "/g", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    g.write(0, &block(7)).unwrap();
    v.as_root().unlink(At::Root, "/g").unwrap();
    assert_eq!(g.close(), Ok(()));
    assert_eq!(keys_under(&ep, "/grace/a/i/").len(), 1);
    settles(0).expect("the unlinked file's object deleted");
    assert!(eventually(grace * 2, || keys_under(&ep, "/grace/a/i/").is_empty()).is_some());
}

/// More objects than one listing page holds (S3 servers return 1,000 a
/// page): `gc` counts and deletes every orphan, and `destroy` removes
/// every object of the volume, leaving the store's other objects.
#[test]
fn gc_and_destroy_go_through_every_page_of_the_listing() {
    many_objects(
        Store::Local,
        "gc_and_destroy_go_through_every_page_of_the_listing",
    );
}

#[test]
fn gc_and_destroy_go_through_every_page_of_the_listing_on_s3() {
    many_objects(
        Store::S3,
        "gc_and_destroy_go_through_every_page_of_the_listing_on_s3",
    );
}

fn many_objects(kind: Store, t: &str) {
    use futures_util::stream::{self, StreamExt, TryStreamExt};
    if !etcd_available(t) {
        return;
    }
    let Some(store) = TestStore::new(kind, t) else {
        return;
    };
    let etcd = Cluster::start(1);
    let spec = object_volume(&etcd, "/pages", &store);
    let (fs, v) = client(&spec, Options::default());
    let uuid = fs.volume().record.uuid.clone();
    let f = v
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    f.write(0, b"named").unwrap();
    f.close().unwrap();
    drop(v);
    drop(fs);
    // 2,500 orphans, and one object outside the volume.
    let n = 2_500u64;
    let s = store.client();
    store.block_on(async {
        stream::iter((1..=n).map(|i| {
            let s = s.clone();
            let p = dcache_etcd::slices::object_path(&uuid, 0xa000_0000 + i);
            async move {
                s.put(&p.into(), bytes::Bytes::from_static(b"o").into())
                    .await
            }
        }))
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("plant");
    });
    store.put("elsewhere/x", b"not the volume's");
    let opts = |dry_run| GcOptions {
        min_age: Duration::ZERO,
        dry_run,
    };
    let dry = dcache_etcd::gc(&spec, &opts(true)).unwrap();
    assert_eq!(
        (dry.objects, dry.named, dry.orphans),
        (n + 1, 1, n),
        "{dry:?}"
    );
    let done = dcache_etcd::gc(&spec, &opts(false)).unwrap();
    assert_eq!(done.orphans, n, "{done:?}");
    assert_eq!(store.objects().len(), 1);
    // Orphans again, then the volume destroyed with them.
    store.block_on(async {
        stream::iter((1..=n).map(|i| {
            let s = s.clone();
            let p = dcache_etcd::slices::object_path(&uuid, 0xb000_0000 + i);
            async move {
                s.put(&p.into(), bytes::Bytes::from_static(b"o").into())
                    .await
            }
        }))
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("plant");
    });
    dcache_etcd::destroy(&spec).unwrap();
    let left: Vec<String> = store.list().into_iter().map(|(p, _)| p).collect();
    assert_eq!(left, ["elsewhere/x"]);
}
