//! File data in an object store, metadata in etcd: two clients on one
//! volume, a sparse 3 GiB file, etcd's growth for 64 MiB of data,
//! throughput, and truncate / overwrite / holes compared with a file on
//! tmpfs. Each test runs on a local directory store and (`_on_s3`) on
//! the S3 gateway of a SeaweedFS server it starts (skipped, with a line,
//! where `scripts/seaweedfs.sh` has not built one).

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::{client, db_size, etcd_available, object_volume, Cluster, Store, TestStore};
use dcache::{At, Errno, FileSystem, SetAttr};
use dcache_etcd::Options;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn opts() -> Options {
    Options {
        staleness: Duration::from_millis(500),
        ..Options::default()
    }
}

/// Deterministic bytes for `[off, off + len)` of a region with `seed`.
fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (off + i).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed;
            (x >> 29) as u8
        })
        .collect()
}

#[test]
fn a_sparse_3gib_file_written_on_one_client_is_read_exactly_on_another() {
    sparse_3gib(
        Store::Local,
        "a_sparse_3gib_file_written_on_one_client_is_read_exactly_on_another",
    );
}

#[test]
fn a_sparse_3gib_file_written_on_one_client_is_read_exactly_on_another_on_s3() {
    sparse_3gib(
        Store::S3,
        "a_sparse_3gib_file_written_on_one_client_is_read_exactly_on_another_on_s3",
    );
}

fn sparse_3gib(kind: Store, t: &str) {
    if !etcd_available(t) {
        return;
    }
    let Some(store) = TestStore::new(kind, t) else {
        return;
    };
    let etcd = Cluster::start(1);
    let spec = object_volume(&etcd, "/sparse", &store);
    let (fa, a) = client(&spec, opts());
    let (_fb, b) = client(&spec, opts());
    // Regions: the start, one across 2^31, one across a 64 MiB chunk
    // boundary past 2^31, small pieces, and the last bytes of 3 GiB.
    let regions: Vec<(u64, usize)> = vec![
        (0, MIB as usize),
        ((1 << 31) - 3000, 5 * MIB as usize + 7),
        ((1 << 31) + 64 * MIB - 1000, 3000),
        (2 * GIB + 512 * MIB + 17, 1),
        (3 * GIB - 100 * 1024, 100 * 1024),
    ];
    let f = a
        .as_root()
        .open(At::Root, "/big", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    for (i, (off, len)) in regions.iter().enumerate() {
        let data = pattern(i as u64, *off, *len);
        // Pieces of at most 1 MiB, as a FUSE mount sends them.
        for (k, piece) in data.chunks(MIB as usize).enumerate() {
            let at = off + k as u64 * MIB;
            assert_eq!(f.write(at, piece).unwrap(), piece.len());
        }
    }
    // Buffered, not yet committed: the writer sees its size, the other
    // client the last committed one.
    assert_eq!(a.as_root().stat(At::Root, "/big").unwrap().size, 3 * GIB);
    fa.fsync(f.ino(), f.fh(), false).unwrap();
    f.close().unwrap();

    let g = b
        .as_root()
        .open(At::Root, "/big", libc::O_RDONLY, 0)
        .unwrap();
    assert_eq!(b.as_root().stat(At::Root, "/big").unwrap().size, 3 * GIB);
    // Every byte of the 3 GiB, 16 MiB a read.
    let mut buf = vec![0u8; 16 * MIB as usize];
    let t = Instant::now();
    let mut off = 0u64;
    let mut mismatched = 0u64;
    while off < 3 * GIB {
        let n = g.read(off, &mut buf).unwrap();
        assert!(n > 0, "short file at {off}");
        let mut want = vec![0u8; n];
        for (i, (ro, rl)) in regions.iter().enumerate() {
            let (lo, hi) = ((*ro).max(off), (ro + *rl as u64).min(off + n as u64));
            if lo < hi {
                let p = pattern(i as u64, lo, (hi - lo) as usize);
                want[(lo - off) as usize..(hi - off) as usize].copy_from_slice(&p);
            }
        }
        if buf[..n] != want[..] {
            mismatched += 1;
        }
        off += n as u64;
    }
    assert_eq!(mismatched, 0, "reads that differed");
    println!(
        "3 GiB sparse file read back on the other client in {:.2?}; {} objects in the store",
        t.elapsed(),
        store.objects().len()
    );
    // The holes stay holes: SEEK_DATA / SEEK_HOLE from the slice lists,
    // in whole 4 KiB pages as tmpfs answers (a page with any byte written
    // is data).
    let data = |o| g.seek_data_hole(o, libc::SEEK_DATA);
    let hole = |o| g.seek_data_hole(o, libc::SEEK_HOLE);
    assert_eq!(data(0), Ok(0));
    assert_eq!(hole(0), Ok(MIB));
    assert_eq!(data(MIB), Ok((1 << 31) - 4096));
    assert_eq!(data((1 << 31) - 3000), Ok((1 << 31) - 3000));
    assert_eq!(hole((1 << 31) - 3000), Ok((1 << 31) + 5 * MIB));
    assert_eq!(data(2 * GIB + 100 * MIB), Ok(2 * GIB + 512 * MIB));
    assert_eq!(
        hole(2 * GIB + 512 * MIB + 17),
        Ok(2 * GIB + 512 * MIB + 4096)
    );
    assert_eq!(data(3 * GIB - 1), Ok(3 * GIB - 1));
    assert_eq!(hole(3 * GIB - 200 * 1024), Ok(3 * GIB - 200 * 1024));
    assert_eq!(hole(3 * GIB - 1), Ok(3 * GIB));
    assert_eq!(data(3 * GIB), Err(Errno(libc::ENXIO)));
    // 6.1 MiB of data in the store for a 3 GiB file.
    let stored = store.bytes();
    assert!(stored < 8 * MIB, "{stored} bytes stored");
    g.close().unwrap();
}

/// 64 MiB written through the library: etcd grows by the slice lists
/// and records only (the same 64 MiB inline grows it by more than the
/// data); sequential write and read rates against the store.
#[test]
fn writing_64_mib_grows_etcd_by_under_1_mib() {
    growth_64mib(Store::Local, "writing_64_mib_grows_etcd_by_under_1_mib");
}

#[test]
fn writing_64_mib_grows_etcd_by_under_1_mib_on_s3() {
    growth_64mib(Store::S3, "writing_64_mib_grows_etcd_by_under_1_mib_on_s3");
}

fn growth_64mib(kind: Store, t: &str) {
    if !etcd_available(t) {
        return;
    }
    let Some(store) = TestStore::new(kind, t) else {
        return;
    };
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    let spec = object_volume(&etcd, "/growth", &store);
    let (fa, a) = client(&spec, opts());
    let (_fb, b) = client(&spec, opts());
    let data = pattern(9, 0, 64 * MIB as usize);
    let before = db_size(&ep);
    let t = Instant::now();
    let f = a
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    for (k, piece) in data.chunks(MIB as usize).enumerate() {
        f.write(k as u64 * MIB, piece).unwrap();
    }
    fa.fsync(f.ino(), f.fh(), false).unwrap();
    f.close().unwrap();
    let wrote = t.elapsed();
    // Past etcd's backend batch interval (100 ms): dbSize counts what
    // its backend has committed.
    std::thread::sleep(Duration::from_millis(300));
    let after = db_size(&ep);
    let t = Instant::now();
    let g = b.as_root().open(At::Root, "/f", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; data.len()];
    let mut off = 0;
    while off < back.len() {
        let end = (off + MIB as usize).min(back.len());
        let n = g.read(off as u64, &mut back[off..end]).unwrap();
        assert!(n > 0);
        off += n;
    }
    let read = t.elapsed();
    assert!(back == data, "64 MiB read back differ");
    let mbs = |d: Duration| 64.0 / d.as_secs_f64();
    println!(
        "64 MiB in objects ({kind:?} store): etcd dbSize {before} -> {after} bytes (+{}), {} objects; \
         sequential write {:.0} MB/s (1 MiB writes + fsync), read on the other client \
         {:.0} MB/s (1 MiB reads, cold cache)",
        after.saturating_sub(before),
        store.objects().len(),
        mbs(wrote) * 1.048576,
        mbs(read) * 1.048576
    );
    assert!(
        after.saturating_sub(before) < MIB,
        "etcd grew by {} bytes for 64 MiB of file data",
        after - before
    );
    if kind != Store::Local {
        return; // the inline comparison does not depend on the store
    }
    // The same 64 MiB inline in etcd (the layout before object stores).
    let inline = etcd.volume("/inline");
    let (_fi, i) = client(&inline, opts());
    let before = db_size(&ep);
    let f = i
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    for (k, piece) in data.chunks(MIB as usize).enumerate() {
        f.write(k as u64 * MIB, piece).unwrap();
    }
    f.close().unwrap();
    // etcd's backend commits its writes in batches (every 100 ms by
    // default), and dbSize counts committed pages: wait for the last one.
    let mut grew = 0;
    common::eventually(Duration::from_secs(5), || {
        grew = db_size(&ep) - before;
        grew > 64 * MIB
    });
    println!("the same 64 MiB inline: etcd dbSize +{grew} bytes");
    assert!(grew > 64 * MIB, "inline data should land in etcd");
}

/// The tmpfs side of the comparison: a real file.
struct Real(std::fs::File);

impl Real {
    fn write(&mut self, off: u64, data: &[u8]) {
        self.0.seek(SeekFrom::Start(off)).unwrap();
        self.0.write_all(data).unwrap();
    }
    fn punch(&self, off: u64, len: u64) {
        // SAFETY: a valid descriptor; fallocate reads no memory of ours.
        let r = unsafe {
            libc::fallocate(
                self.0.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            )
        };
        assert_eq!(r, 0, "fallocate on tmpfs");
    }
    fn all(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        self.0.seek(SeekFrom::Start(0)).unwrap();
        self.0.read_to_end(&mut v).unwrap();
        v
    }
}

fn read_all(f: &dcache::OpenFile<'_>, size: u64) -> Vec<u8> {
    let mut v = vec![0u8; size as usize];
    let mut off = 0;
    while off < v.len() {
        let n = f.read(off as u64, &mut v[off..]).unwrap();
        assert!(n > 0, "short read at {off} of {size}");
        off += n;
    }
    v
}

#[test]
fn truncate_overwrite_and_holes_match_tmpfs() {
    const T: &str = "truncate_overwrite_and_holes_match_tmpfs";
    if !etcd_available(T) {
        return;
    }
    let etcd = Cluster::start(1);
    let store = TestStore::new(Store::Local, T).expect("a local store");
    let spec = object_volume(&etcd, "/cmp", &store);
    let (fa, a) = client(&spec, opts());
    let (_fb, b) = client(&spec, opts());
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let mut real = Real(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .unwrap(),
    );
    let f = a
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let chunk = dcache_etcd::slices::SLICE_CHUNK;
    let mut seed = 0x5eed_u64;
    let mut rnd = move |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    let mut size = 0u64;
    let mut checks = 0;
    for step in 0..300u64 {
        // Offsets near the chunk boundaries at 64 and 128 MiB, or anywhere
        // in the first 140 MiB.
        let near = |r: u64, x: u64| (chunk * (1 + r % 2)).saturating_sub(x % (2 * MIB)) + x % MIB;
        let off = if rnd(3) == 0 {
            near(rnd(2), rnd(4 * MIB))
        } else {
            rnd(140 * MIB)
        };
        match rnd(10) {
            0..=5 => {
                let big = rnd(4) == 0;
                let len = 1 + rnd(if big { 3 * MIB } else { 64 * 1024 }) as usize;
                let data = pattern(step, off, len);
                let mut at = 0;
                while at < len {
                    let n = f.write(off + at as u64, &data[at..]).unwrap();
                    at += n;
                }
                real.write(off, &data);
                size = size.max(off + len as u64);
            }
            6 | 7 => {
                let to = if rnd(2) == 0 { off / 4 } else { off };
                let set = SetAttr {
                    size: Some(to),
                    ..SetAttr::default()
                };
                a.as_root().setattr(At::Root, "/f", &set).unwrap();
                real.0.set_len(to).unwrap();
                size = to;
            }
            8 => {
                let len = 1 + rnd(3 * MIB);
                f.fallocate(
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off,
                    len,
                )
                .unwrap();
                real.punch(off, len);
            }
            _ => {
                fa.fsync(f.ino(), f.fh(), false).unwrap();
            }
        }
        assert_eq!(
            a.as_root().stat(At::Root, "/f").unwrap().size,
            size,
            "step {step}"
        );
        if step % 50 == 49 {
            let want = real.all();
            assert_eq!(want.len() as u64, size);
            let got = read_all(&f, size);
            assert!(got == want, "step {step}: contents differ from tmpfs");
            checks += 1;
        }
    }
    f.close().unwrap();
    // The other client reads what tmpfs holds.
    let want = real.all();
    let g = b.as_root().open(At::Root, "/f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(b.as_root().stat(At::Root, "/f").unwrap().size, size);
    assert!(read_all(&g, size) == want, "the other client differs");
    println!("300 steps, {checks} full comparisons with tmpfs, final size {size}");
}

/// A chunk written in more separate pieces than a list may hold (20,000
/// one-byte writes three bytes apart) is compacted when it is committed:
/// its list becomes a few slices over new objects, and it reads the same.
#[test]
fn a_chunk_in_too_many_pieces_is_compacted() {
    const T: &str = "a_chunk_in_too_many_pieces_is_compacted";
    if !etcd_available(T) {
        return;
    }
    let etcd = Cluster::start(1);
    let store = TestStore::new(Store::Local, T).expect("a local store");
    let spec = object_volume(&etcd, "/frag", &store);
    let (fa, a) = client(&spec, opts());
    let f = a
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    let n = 20_000u64;
    let mut want = vec![0u8; (3 * (n - 1) + 1) as usize];
    for i in 0..n {
        let b = (i % 255) as u8 + 1;
        f.write(3 * i, &[b]).unwrap();
        want[(3 * i) as usize] = b;
    }
    fa.fsync(f.ino(), f.fh(), false).unwrap();
    let lists = common::keys_under(&etcd.endpoint(0), "/frag/b/");
    assert_eq!(lists.len(), 1);
    let value = common::rt().block_on(async {
        let mut c = etcd_client::Client::connect([etcd.endpoint(0)], None)
            .await
            .unwrap();
        c.get(lists[0].as_str(), None).await.unwrap().kvs()[0]
            .value()
            .to_vec()
    });
    let list = dcache_etcd::slices::decode(&value).unwrap();
    assert_eq!(list.len(), 1, "one slice over the compacted span");
    assert_eq!(read_all(&f, want.len() as u64), want);
    // The fragmented object is garbage now; the compacted one is named.
    assert_eq!(store.objects().len(), 2);
    f.close().unwrap();
}

/// The S3 server killed and started again: while it is down, writes below
/// the buffer bound succeed, `fsync` and a cold read fail with EIO within
/// seconds (not hang). The bytes that `fsync` reported failed are dropped
/// (logged under `Cause::Dropped`), as Linux drops pages whose writeback
/// failed: they never land later over someone else's newer data. The
/// writer then shows the committed size, writes them again once the
/// server is back, and the other client reads every byte.
#[test]
fn a_store_that_goes_down_fails_fsync_with_eio_and_drops_what_it_reported_on_s3() {
    const T: &str = "a_store_that_goes_down_fails_fsync_with_eio_and_drops_what_it_reported_on_s3";
    if !etcd_available(T) {
        return;
    }
    let Some(mut store) = TestStore::new(Store::S3, T) else {
        return;
    };
    let etcd = Cluster::start(1);
    let spec = object_volume(&etcd, "/down", &store);
    let (fa, a) = client(&spec, opts());
    let (_fb, b) = client(&spec, opts());
    let data = pattern(5, 0, 12 * MIB as usize);
    let f = a
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    for (k, piece) in data[..8 * MIB as usize].chunks(MIB as usize).enumerate() {
        f.write(k as u64 * MIB, piece).unwrap();
    }
    fa.fsync(f.ino(), f.fh(), false).unwrap();

    store.server().kill();
    for (k, piece) in data[8 * MIB as usize..].chunks(MIB as usize).enumerate() {
        f.write((8 + k as u64) * MIB, piece).unwrap();
    }
    let t = Instant::now();
    let dropped = dcache_etcd::log::count(dcache_etcd::Cause::Dropped);
    assert_eq!(fa.fsync(f.ino(), f.fh(), false), Err(Errno::EIO));
    let failed = t.elapsed();
    assert_eq!(
        dcache_etcd::log::count(dcache_etcd::Cause::Dropped),
        dropped + 1,
        "the reported bytes are dropped, and the drop logged"
    );
    assert!(failed < Duration::from_secs(30), "fsync took {failed:?}");
    let g = b.as_root().open(At::Root, "/f", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; MIB as usize];
    let t = Instant::now();
    assert_eq!(g.read(0, &mut buf), Err(Errno::EIO));
    let read_failed = t.elapsed();
    assert!(
        read_failed < Duration::from_secs(30),
        "read took {read_failed:?}"
    );
    // The writer shows what is committed: nothing buffered is left.
    assert_eq!(a.as_root().stat(At::Root, "/f").unwrap().size, 8 * MIB);

    let t = Instant::now();
    store.server().restart().expect("restart SeaweedFS");
    let back = t.elapsed();
    // What a program does after a failed fsync: write it again.
    for (k, piece) in data[8 * MIB as usize..].chunks(MIB as usize).enumerate() {
        f.write((8 + k as u64) * MIB, piece).unwrap();
    }
    // SeaweedFS answers on its S3 port well before it can store again
    // (its master resumes its raft state first): this fsync's upload
    // waits, and its commit still gets its full timeout after it.
    let t = Instant::now();
    fa.fsync(f.ino(), f.fh(), false).unwrap();
    let synced = t.elapsed();
    f.close().unwrap();
    assert!(read_all(&g, 12 * MIB) == data, "the other client differs");
    g.close().unwrap();
    println!(
        "store down: fsync EIO in {failed:.1?}, cold read EIO in {read_failed:.1?}; \
         server restarted in {back:.1?}, the 4 MiB written again committed by the next \
         fsync in {synced:.1?}"
    );
}

/// Reads of an open file ask etcd once per chunk and version while the
/// watch is current (holding a file open must not keep it from being
/// current: the open record is written outside the watched range); a
/// new open asks again, so it sees what another client closed before it
/// (close-to-open), and a descriptor already open sees that within the
/// staleness bound.
#[test]
fn reads_of_an_open_file_keep_its_lists_until_it_changes() {
    use std::sync::atomic::Ordering::Relaxed;
    const T: &str = "reads_of_an_open_file_keep_its_lists_until_it_changes";
    if !etcd_available(T) {
        return;
    }
    let Some(store) = TestStore::new(Store::Local, T) else {
        return;
    };
    let etcd = Cluster::start(1);
    let spec = object_volume(&etcd, "/lists", &store);
    let (_fa, a) = client(&spec, opts());
    let (fb, b) = client(&spec, opts());
    let f = a
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    f.write(0, &pattern(1, 0, MIB as usize)).unwrap();
    f.close().unwrap();

    let g = b.as_root().open(At::Root, "/f", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    g.read(0, &mut buf).unwrap();
    // The open record B wrote (after its open, in the background) must
    // not leave its watch behind for good: past twice the bound, only a
    // fence taken after the record was written can make it current.
    std::thread::sleep(opts().staleness * 2);
    assert!(
        common::eventually(Duration::from_secs(5), || fb.is_current()).is_some(),
        "B's watch is not current while it holds a file open"
    );
    let before = fb.stats().list_reads.load(Relaxed);
    for k in 0..100u64 {
        let off = (k * 7919 * 4096) % (MIB - 4096);
        assert_eq!(g.read(off, &mut buf).unwrap(), 4096);
        assert_eq!(buf, pattern(1, off, 4096), "at {off}");
    }
    assert_eq!(
        fb.stats().list_reads.load(Relaxed),
        before,
        "reads of an unchanged open file asked etcd for its lists"
    );

    // A rewrites the file; a new open on B sees it at once.
    let f = a.as_root().open(At::Root, "/f", libc::O_WRONLY, 0).unwrap();
    f.write(0, &pattern(2, 0, MIB as usize)).unwrap();
    f.close().unwrap();
    let h = b.as_root().open(At::Root, "/f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(h.read(4096, &mut buf).unwrap(), 4096);
    assert_eq!(buf, pattern(2, 4096, 4096), "a new open read old data");
    // The descriptor opened before: within the staleness bound.
    common::eventually(Duration::from_secs(5), || {
        g.read(8192, &mut buf).unwrap() == 4096 && buf == pattern(2, 8192, 4096)
    })
    .expect("the open descriptor never saw the rewrite");
}

/// With `read_cache_dir`, objects read are kept on disk: a new client on
/// the same directory reads the file (whole and in 4 KiB pieces) with the
/// store gone, where a client without it gets EIO.
#[test]
fn a_cache_directory_serves_a_restarted_client_without_the_store() {
    const T: &str = "a_cache_directory_serves_a_restarted_client_without_the_store";
    if !etcd_available(T) {
        return;
    }
    let Some(store) = TestStore::new(Store::Local, T) else {
        return;
    };
    let etcd = Cluster::start(1);
    let spec = object_volume(&etcd, "/diskcache", &store);
    let cache = tempfile::tempdir().unwrap();
    let cached = || Options {
        read_cache_dir: Some(cache.path().to_path_buf()),
        ..opts()
    };
    let size = 12 * MIB as usize;
    let (_fa, a) = client(&spec, opts());
    let f = a
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    assert_eq!(f.write(0, &pattern(3, 0, size)).unwrap(), size);
    f.close().unwrap();
    let read = |v: &dcache::Vfs| -> Result<Vec<u8>, Errno> {
        let g = v.as_root().open(At::Root, "/f", libc::O_RDONLY, 0)?;
        let mut out = vec![0u8; size];
        let mut at = 0;
        while at < size {
            let n = g.read(at as u64, &mut out[at..at + MIB as usize])?;
            assert!(n > 0);
            at += n;
        }
        Ok(out)
    };
    {
        let (_fb, b) = client(&spec, cached());
        assert_eq!(read(&b).unwrap(), pattern(3, 0, size));
    }
    // Written behind the reads: wait for the three 4 MiB objects.
    let held = || -> u64 {
        std::fs::read_dir(cache.path())
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    common::eventually(Duration::from_secs(10), || held() == size as u64)
        .expect("the objects never reached the cache directory");

    // The store's objects go away (the directory stays: a client refuses
    // to connect to a volume whose data directory is missing).
    let moved = format!("{}.away", store.url);
    std::fs::create_dir(&moved).unwrap();
    let entries: Vec<_> = std::fs::read_dir(&store.url)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!entries.is_empty());
    for e in &entries {
        std::fs::rename(
            std::path::Path::new(&store.url).join(e),
            std::path::Path::new(&moved).join(e),
        )
        .unwrap();
    }
    let (_fc, c) = client(&spec, cached());
    assert_eq!(
        read(&c).unwrap(),
        pattern(3, 0, size),
        "from the cache directory"
    );
    let g = c.as_root().open(At::Root, "/f", libc::O_RDONLY, 0).unwrap();
    let mut page = vec![0u8; 4096];
    for off in [9 * MIB + 4096, 123 * 4096, 5 * MIB] {
        assert_eq!(g.read(off, &mut page).unwrap(), 4096);
        assert_eq!(page, pattern(3, off, 4096), "a 4 KiB read at {off}");
    }
    let (_fd, d) = client(&spec, opts());
    assert_eq!(
        read(&d).unwrap_err(),
        Errno::EIO,
        "no cache: the store is gone"
    );
    for e in &entries {
        std::fs::rename(
            std::path::Path::new(&moved).join(e),
            std::path::Path::new(&store.url).join(e),
        )
        .unwrap();
    }
    std::fs::remove_dir(&moved).unwrap();
}
