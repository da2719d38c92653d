//! Sequential throughput of an object-store volume against the store
//! itself: 1 GiB written through the library (1 MiB writes, as a FUSE
//! mount sends them, then fsync) and read back on another client (1 MiB
//! reads, cold cache), beside the same 1 GiB put and got as 4 MiB objects
//! (the library's object size) by a bare `object_store` client of the
//! same store, one request at a time and 8 at a time (the library's
//! parallelism). Ignored by default (a few GiB of traffic); run it in
//! release mode:
//!
//! ```sh
//! DCACHE_WEED=$(scripts/seaweedfs.sh) cargo test --release -p dcache-etcd \
//!     --test s3_throughput -- --ignored --nocapture
//! ```
//!
//! `DCACHE_THROUGHPUT_STORE=local` measures the local directory store
//! instead.

mod common;

use std::time::{Duration, Instant};

use common::{client, etcd_available, object_volume, Cluster, Store, TestStore};
use dcache::{At, FileSystem};
use dcache_etcd::Options;
use futures_util::stream::{self, StreamExt, TryStreamExt};

const MIB: usize = 1 << 20;
const TOTAL: usize = 1 << 30;
const OBJECT: usize = dcache_etcd::slices::BLOCK;

fn mbs(d: Duration) -> f64 {
    TOTAL as f64 / d.as_secs_f64() / 1e6
}

#[test]
#[ignore = "a throughput measurement: run with --release -- --ignored --nocapture"]
fn sequential_1gib_through_the_library_and_the_bare_store() {
    const T: &str = "sequential_1gib_through_the_library_and_the_bare_store";
    let kind = match std::env::var("DCACHE_THROUGHPUT_STORE").as_deref() {
        Ok("local") => Store::Local,
        _ => Store::S3,
    };
    if !etcd_available(T) {
        return;
    }
    let Some(store) = TestStore::new(kind, T) else {
        return;
    };
    let etcd = Cluster::start(1);
    let spec = object_volume(&etcd, "/throughput", &store);
    // 1 MiB of varied bytes, each MiB of the file a rotation of it.
    let base: Vec<u8> = (0..MIB as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 37) as u8)
        .collect();
    let piece = |k: usize| {
        let mut v = base.clone();
        v.rotate_left(k % MIB);
        v
    };

    // The library.
    let (fa, a) = client(&spec, Options::default());
    let t = Instant::now();
    let f = a
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    for k in 0..TOTAL / MIB {
        assert_eq!(f.write((k * MIB) as u64, &piece(k)).unwrap(), MIB);
    }
    fa.fsync(f.ino(), f.fh(), false).unwrap();
    f.close().unwrap();
    let lib_write = t.elapsed();
    let (_fb, b) = client(&spec, Options::default());
    let g = b.as_root().open(At::Root, "/f", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; MIB];
    let t = Instant::now();
    let mut differ = 0;
    for k in 0..TOTAL / MIB {
        let mut at = 0;
        while at < MIB {
            let n = g.read((k * MIB + at) as u64, &mut buf[at..]).unwrap();
            assert!(n > 0, "short file at {}", k * MIB + at);
            at += n;
        }
        // Compared after the clock for the read is stopped would need a
        // copy of the file; a rotation's compare is cheap enough.
        if buf != piece(k) {
            differ += 1;
        }
    }
    let lib_read = t.elapsed();
    g.close().unwrap();
    assert_eq!(differ, 0, "MiB read back differ");

    // The bare store: the same bytes as 4 MiB objects.
    let s = store.client();
    let objects: Vec<(object_store::path::Path, bytes::Bytes)> = (0..TOTAL / OBJECT)
        .map(|i| {
            let mut v = Vec::with_capacity(OBJECT);
            for k in 0..OBJECT / MIB {
                v.extend_from_slice(&piece(i * (OBJECT / MIB) + k));
            }
            (
                object_store::path::Path::from(format!("bare/{i:06}")),
                bytes::Bytes::from(v),
            )
        })
        .collect();
    let bare = |parallel: usize| {
        store.block_on(async {
            let t = Instant::now();
            stream::iter(objects.iter().map(|(p, b)| {
                let s = s.clone();
                async move { s.put(p, b.clone().into()).await.map(|_| ()) }
            }))
            .buffered(parallel)
            .try_collect::<Vec<()>>()
            .await
            .expect("put");
            let put = t.elapsed();
            let t = Instant::now();
            let got = stream::iter(objects.iter().map(|(p, _)| {
                let s = s.clone();
                async move { s.get(p).await?.bytes().await.map(|b| b.len()) }
            }))
            .buffered(parallel)
            .try_collect::<Vec<usize>>()
            .await
            .expect("get");
            assert_eq!(got.iter().sum::<usize>(), TOTAL);
            (put, t.elapsed())
        })
    };
    let (put1, get1) = bare(1);
    let (put8, get8) = bare(8);

    println!("1 GiB sequential, {kind:?} store, MB/s (10^6 bytes/s):");
    println!(
        "  library: write {:.0} (1 MiB writes + fsync), read {:.0} (1 MiB reads, other client)",
        mbs(lib_write),
        mbs(lib_read)
    );
    println!(
        "  bare object_store, 4 MiB objects, 1 at a time: put {:.0}, get {:.0}",
        mbs(put1),
        mbs(get1)
    );
    println!(
        "  bare object_store, 4 MiB objects, 8 at a time: put {:.0}, get {:.0}",
        mbs(put8),
        mbs(get8)
    );
    let (w, r) = (
        put1.as_secs_f64() / lib_write.as_secs_f64(),
        get1.as_secs_f64() / lib_read.as_secs_f64(),
    );
    println!("  library / bare (1 at a time): write {w:.2}x, read {r:.2}x");
    // What the project asks of the library: at least half the store's own
    // sequential rate.
    assert!(
        w >= 0.5 && r >= 0.5,
        "write {w:.2}x, read {r:.2}x of the bare store"
    );
}
