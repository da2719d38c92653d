//! What a file lock and a reported failure promise between two clients of
//! one volume (the backend's calls, no FUSE), each step deterministic:
//!
//! - every way a lock ends (`F_UNLCK`, a release by owner or by open
//!   file) first commits what the holder buffered for the file, so the
//!   next holder reads it;
//! - an O_APPEND write goes at the end of the file as committed, whatever
//!   offset the caller had (a kernel's cached size), on inline volumes
//!   and on object stores;
//! - a write whose failure was reported (close, fsync) is dropped and
//!   never lands later over another client's newer data; one kept after a
//!   failure nobody was told of lands only if the file did not change
//!   meanwhile, else it is dropped and the next close reports EIO;
//! - a holder whose lease (and so its lock) is gone commits nothing
//!   written under it (fencing);
//! - each drop is counted under `Cause::Dropped` (and logged).

mod common;

use std::path::{Path, PathBuf};

use common::{client, etcd_available, object_volume, Cluster, Store, TestStore};
use dcache::fs::lock::{FileLock, Flavor, LockOwner, LockRelease, LockType, OFFSET_MAX};
use dcache::{At, Errno, FileSystem, Ino};
use dcache_etcd::{log, Cause, EtcdFs, Options};

fn owner(id: u64, flavor: Flavor) -> LockOwner {
    LockOwner {
        id,
        file: id,
        flavor,
    }
}

fn whole(kind: Option<LockType>, pid: u32) -> FileLock {
    FileLock::new(kind, 0, OFFSET_MAX, pid)
}

const W: Option<LockType> = Some(LockType::Write);

fn contents(fs: &EtcdFs, ino: Ino) -> Vec<u8> {
    let fh = fs.open(ino, libc::O_RDONLY).expect("open to read");
    let mut buf = vec![0u8; 4096];
    let n = fs.read(ino, fh, 0, &mut buf).expect("read");
    fs.release(ino, fh).expect("release");
    buf.truncate(n);
    buf
}

/// The file's bytes read through a descriptor already open.
fn read_through(fs: &EtcdFs, ino: Ino, fh: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let n = fs.read(ino, fh, 0, &mut buf).expect("read");
    buf.truncate(n);
    buf
}

fn create(vfs: &dcache::Vfs, path: &str) -> Ino {
    vfs.as_root()
        .create(At::Root, path, 0o644)
        .expect("create")
        .ino()
        .expect("an inode")
}

/// A local store made unwritable and put back: its directory is moved
/// aside and a file put in its place (root ignores permission bits).
struct Broken<'a> {
    dir: &'a Path,
    aside: PathBuf,
}

impl<'a> Broken<'a> {
    fn new(dir: &'a Path) -> Broken<'a> {
        let aside = dir.with_extension("aside");
        std::fs::rename(dir, &aside).expect("move the store aside");
        std::fs::write(dir, b"not a directory").expect("block the store");
        Broken { dir, aside }
    }
}

impl Drop for Broken<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir);
        let _ = std::fs::rename(&self.aside, self.dir);
    }
}

#[test]
fn every_way_a_lock_ends_hands_over_the_buffered_data() {
    if !etcd_available("every_way_a_lock_ends_hands_over_the_buffered_data") {
        return;
    }
    let etcd = Cluster::start(1);
    let store = TestStore::new(Store::Local, "handover").expect("a local store");
    let spec = object_volume(&etcd, "/handover", &store);
    let (fa, a) = client(&spec, Options::default());
    let (fb, _b) = client(&spec, Options::default());
    // (how A lets go, its lock's flavor)
    let ends: [(&str, Flavor); 3] = [
        ("F_UNLCK", Flavor::Posix),
        ("release by owner (FLUSH)", Flavor::Posix),
        ("release by open file (RELEASE)", Flavor::Flock),
    ];
    for (i, (how, flavor)) in ends.into_iter().enumerate() {
        let ino = create(&a, &format!("/f{i}"));
        let fh = fa.open(ino, libc::O_RDWR).unwrap();
        let oa = owner(10 + i as u64, flavor);
        fa.setlk(ino, &oa, &whole(W, 1)).unwrap();
        let line = format!("written under A's lock, then {how}\n");
        fa.write(ino, fh, 0, line.as_bytes()).unwrap();
        match i {
            0 => fa.setlk(ino, &oa, &whole(None, 1)).unwrap(),
            1 => fa
                .release_locks(ino, LockRelease::Owner(oa.id, flavor))
                .unwrap(),
            _ => fa.release_locks(ino, LockRelease::File(oa.file)).unwrap(),
        }
        // B takes the lock as the next holder, and must find A's line
        // (A's file is still open: nothing but the lock's end committed).
        let ob = owner(100 + i as u64, flavor);
        fb.setlk(ino, &ob, &whole(W, 2)).unwrap();
        assert_eq!(contents(&fb, ino), line.as_bytes(), "after {how}");
        fb.setlk(ino, &ob, &whole(None, 2)).unwrap();
        fa.release(ino, fh).unwrap();
    }
}

#[test]
fn an_append_goes_at_the_committed_end_of_file() {
    if !etcd_available("an_append_goes_at_the_committed_end_of_file") {
        return;
    }
    let etcd = Cluster::start(1);
    let store = TestStore::new(Store::Local, "append").expect("a local store");
    for (what, spec) in [
        ("inline", etcd.volume("/append-inline")),
        (
            "object store",
            object_volume(&etcd, "/append-objects", &store),
        ),
    ] {
        let (fa, a) = client(&spec, Options::default());
        let (fb, _b) = client(&spec, Options::default());
        let ino = create(&a, "/log");
        let flags = libc::O_WRONLY | libc::O_APPEND;
        let (ha, hb) = (fa.open(ino, flags).unwrap(), fb.open(ino, flags).unwrap());
        // Each caller passes the size it last saw (0): a kernel without a
        // writeback cache places an append at its cached size.
        for round in 0..3 {
            let a = format!("a{round}\n");
            fa.write_append(ino, ha, 0, a.as_bytes()).unwrap();
            fa.flush(ino, ha).unwrap();
            let b = format!("b{round}\n");
            fb.write_append(ino, hb, 0, b.as_bytes()).unwrap();
            fb.flush(ino, hb).unwrap();
        }
        // Two appends of one client before a flush follow each other.
        fa.write_append(ino, ha, 0, b"a3\n").unwrap();
        fa.write_append(ino, ha, 0, b"a4\n").unwrap();
        fa.flush(ino, ha).unwrap();
        assert_eq!(
            String::from_utf8(contents(&fb, ino)).unwrap(),
            "a0\nb0\na1\nb1\na2\nb2\na3\na4\n",
            "{what}"
        );
        // A plain write goes where it is told.
        let plain = fa.open(ino, libc::O_WRONLY).unwrap();
        fa.write(ino, plain, 0, b"A").unwrap();
        fa.flush(ino, plain).unwrap();
        assert_eq!(contents(&fb, ino)[..3], *b"A0\n", "{what}");
        for (fs, h) in [(&fa, ha), (&fb, hb), (&fa, plain)] {
            fs.release(ino, h).unwrap();
        }
    }
}

#[test]
fn a_write_whose_failure_was_reported_never_lands_later() {
    if !etcd_available("a_write_whose_failure_was_reported_never_lands_later") {
        return;
    }
    let etcd = Cluster::start(1);
    let store = TestStore::new(Store::Local, "late").expect("a local store");
    let spec = object_volume(&etcd, "/late", &store);
    let (fa, a) = client(&spec, Options::default());
    let (fb, _b) = client(&spec, Options::default());
    let ino = create(&a, "/f");
    let ha = fa.open(ino, libc::O_RDWR).unwrap();
    let hb = fb.open(ino, libc::O_RDWR).unwrap();

    // Reported: A's close (FLUSH) fails while its store is down.
    let dropped = log::count(Cause::Dropped);
    fa.write(ino, ha, 0, b"A, reported failed").unwrap();
    {
        let _down = Broken::new(store.path());
        assert!(fa.flush(ino, ha).is_err(), "the store is down");
    }
    assert_eq!(
        log::count(Cause::Dropped),
        dropped + 1,
        "the drop is logged"
    );
    fb.write(ino, hb, 0, b"B, acknowledged").unwrap();
    fb.flush(ino, hb).unwrap();
    // Whatever A does next (a read, a close) lands nothing of its own.
    assert_eq!(contents(&fa, ino), b"B, acknowledged");
    fa.flush(ino, ha).unwrap();
    assert_eq!(contents(&fb, ino), b"B, acknowledged");

    // Not reported: a read's commit of A's bytes fails and keeps them;
    // B changes the file meanwhile; A's bytes are then dropped, not laid
    // over B's, and A's next close says EIO (once).
    fa.write(ino, ha, 0, b"A, kept after a failure").unwrap();
    {
        let _down = Broken::new(store.path());
        let mut buf = [0u8; 64];
        assert!(fa.read(ino, ha, 0, &mut buf).is_err(), "the store is down");
    }
    fb.write(ino, hb, 0, b"B, newer").unwrap();
    fb.flush(ino, hb).unwrap();
    // A's next read goes on with the file as committed; the drop is owed
    // to A's next close or fsync of the file.
    assert_eq!(&read_through(&fa, ino, ha)[..8], b"B, newer");
    assert_eq!(fa.flush(ino, ha), Err(Errno::EIO), "the drop is reported");
    assert_eq!(fa.flush(ino, ha), Ok(()), "once");
    assert_eq!(log::count(Cause::Dropped), dropped + 2);
    assert_eq!(&contents(&fb, ino)[..8], b"B, newer");

    // Kept after a failure with no change in between: it lands.
    fa.write(ino, ha, 0, b"A, retried").unwrap();
    {
        let _down = Broken::new(store.path());
        let mut buf = [0u8; 64];
        assert!(fa.read(ino, ha, 0, &mut buf).is_err());
    }
    fa.flush(ino, ha).unwrap();
    assert_eq!(&contents(&fb, ino)[..10], b"A, retried");
    fa.release(ino, ha).unwrap();
    fb.release(ino, hb).unwrap();
}

#[test]
fn a_holder_whose_lease_expired_commits_nothing_written_under_its_lock() {
    if !etcd_available("a_holder_whose_lease_expired_commits_nothing_written_under_its_lock") {
        return;
    }
    let etcd = Cluster::start(1);
    let store = TestStore::new(Store::Local, "fence").expect("a local store");
    let spec = object_volume(&etcd, "/fence", &store);
    let (fa, a) = client(&spec, Options::default());
    let (fb, _b) = client(&spec, Options::default());
    let ino = create(&a, "/counter");
    let ha = fa.open(ino, libc::O_RDWR).unwrap();
    let (oa, ob) = (owner(1, Flavor::Posix), owner(2, Flavor::Posix));
    fa.setlk(ino, &oa, &whole(W, 1)).unwrap();
    fa.write(ino, ha, 0, b"A holds it").unwrap();
    // A's session lease ends (as when A is cut off past its TTL): its
    // lock records go with it, and B becomes the holder.
    let lease = fa.lease_id();
    common::rt().block_on(async {
        let mut c = etcd_client::Client::connect([etcd.endpoint(0)], None)
            .await
            .expect("connect");
        c.lease_revoke(lease).await.expect("revoke A's lease");
    });
    let lost = log::count(Cause::Lease);
    fb.setlk(ino, &ob, &whole(W, 2)).unwrap();
    let hb = fb.open(ino, libc::O_RDWR).unwrap();
    fb.write(ino, hb, 0, b"B holds it").unwrap();
    fb.setlk(ino, &ob, &whole(None, 2)).unwrap();
    // A's commit is fenced: refused, logged, reported.
    assert_eq!(fa.flush(ino, ha), Err(Errno::EIO));
    assert!(log::count(Cause::Lease) > lost, "the lost lock is logged");
    assert_eq!(contents(&fb, ino), b"B holds it");
    fa.release(ino, ha).unwrap();
    fb.release(ino, hb).unwrap();
}
