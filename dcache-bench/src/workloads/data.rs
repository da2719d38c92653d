//! `data`: file data on an object-store volume of the etcd target, beside
//! the same store driven by a bare `object_store` client in the same run.
//!
//! Preparing a case writes `--mib` MiB (1 GiB by default) to one file
//! through one client (1 MiB writes, as a FUSE mount sends them, then
//! fsync) and reads it back, checked, through another client whose cache
//! is cold (1 MiB reads); then the bare client puts the same bytes as
//! objects of the volume's block size (4 MiB), one request at a time, and
//! gets them back. The timed phase is random 4 KiB reads of the file, each
//! thread with a descriptor of its own on the reading client; the summary
//! adds the bare client's 4 KiB ranged GETs, one at a time.
//!
//! Variant `s3`: a SeaweedFS server this case starts on 127.0.0.1 (see
//! [`crate::seaweedfs`]; without its binary the case is skipped with the
//! reason); `local`: a directory store in a temporary directory.

use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::{path::Path as ObjPath, ObjectStore};

use super::stat_random::SplitMix;
use crate::etcd::{client, scratch_volume_with, Client, EtcdServer};
use crate::report::RunResult;
use crate::seaweedfs::{self, S3Server};
use crate::worker::Worker;
use crate::workload::{Case, CaseSpec, Workload};
use dcache::vfs::At;
use dcache::FileSystem;

const MIB: usize = 1 << 20;
/// The bare client's object size: the volume's own.
const OBJECT: usize = dcache_etcd::slices::BLOCK;
const PAGE: usize = 4096;
/// Ranged GETs the summary times on the bare client.
const BARE_RANDOM: usize = 400;

pub struct DataWorkload;

pub static DATA: DataWorkload = DataWorkload;

impl Workload for DataWorkload {
    fn name(&self) -> &'static str {
        "data"
    }
    fn about(&self) -> &'static str {
        "etcd + object store: sequential write and read of --mib MiB, random 4 KiB reads, \
         beside a bare object_store client of the same store"
    }
    fn variants(&self) -> &'static [&'static str] {
        &["s3", "local"]
    }
    fn targets(&self) -> &'static [&'static str] {
        &["etcd"]
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> Result<Box<dyn Case>, String> {
        let store = DataStore::start(spec.variant)?;
        let (server, volume) = scratch_volume_with(
            spec.options,
            &dcache_etcd::FormatOptions {
                data: Some(store.url.clone()),
                ..Default::default()
            },
        )?;
        let size = spec.options.mib as usize * MIB;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("tokio: {e}"))?;
        let bare = dcache_etcd::store::StoreUrl::parse(&store.url)
            .and_then(|u| u.open(false))
            .map_err(|e| format!("store {}: {e}", store.url))?;

        let writer = client(&volume)?;
        let t = Instant::now();
        let f = writer
            .vfs
            .as_root()
            .open(At::Root, "/data", libc::O_CREAT | libc::O_WRONLY, 0o644)
            .map_err(|e| format!("create: {e}"))?;
        for k in 0..size / MIB {
            let n = f
                .write((k * MIB) as u64, &piece(k))
                .map_err(|e| format!("write at {} MiB: {e}", k))?;
            if n != MIB {
                return Err(format!("short write at {k} MiB: {n}"));
            }
        }
        writer
            .fs
            .fsync(f.ino(), f.fh(), false)
            .map_err(|e| format!("fsync: {e}"))?;
        f.close().map_err(|e| format!("close: {e}"))?;
        let lib_write = t.elapsed();
        drop(writer);

        let reader = client(&volume)?;
        let g = reader
            .vfs
            .as_root()
            .open(At::Root, "/data", libc::O_RDONLY, 0)
            .map_err(|e| format!("open: {e}"))?;
        let mut buf = vec![0u8; MIB];
        let t = Instant::now();
        let mut differ = 0;
        for k in 0..size / MIB {
            let mut at = 0;
            while at < MIB {
                let n = g
                    .read((k * MIB + at) as u64, &mut buf[at..])
                    .map_err(|e| format!("read at {} MiB: {e}", k))?;
                if n == 0 {
                    return Err(format!("the file ends at {} bytes", k * MIB + at));
                }
                at += n;
            }
            if buf != piece(k) {
                differ += 1;
            }
        }
        let lib_read = t.elapsed();
        drop(g);
        if differ > 0 {
            return Err(format!(
                "{differ} MiB read back differ from what was written"
            ));
        }

        let objects = size.div_ceil(OBJECT);
        let bare_seq = rt.block_on(bare_sequential(&*bare, size, objects))?;
        let bare_random = rt.block_on(bare_random(&*bare, size, objects))?;
        Ok(Box::new(DataCase {
            reader,
            size,
            lib_write,
            lib_read,
            bare_put: bare_seq.0,
            bare_get: bare_seq.1,
            bare_random,
            _server: server,
            _store: store,
        }))
    }
}

/// MiB number `k` of the file: a rotation of one MiB of varied bytes (so
/// no two neighbouring MiB are equal, and checking one is cheap).
fn piece(k: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..MIB as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 37) as u8)
        .collect();
    v.rotate_left(k % MIB);
    v
}

fn bare_path(i: usize) -> ObjPath {
    ObjPath::from(format!("bench-bare/{i:08}"))
}

/// The file's bytes as `objects` objects of [`OBJECT`] bytes, put one at a
/// time, then got one at a time: (put, get) time.
async fn bare_sequential(
    s: &dyn ObjectStore,
    size: usize,
    objects: usize,
) -> Result<(Duration, Duration), String> {
    let body = |i: usize| {
        let mut v = Vec::with_capacity(OBJECT);
        let first = i * OBJECT / MIB;
        let last = ((i + 1) * OBJECT).min(size) / MIB;
        for k in first..last {
            v.extend_from_slice(&piece(k));
        }
        Bytes::from(v)
    };
    // Built before the clock starts, as the library's writes are.
    let bodies: Vec<Bytes> = (0..objects).map(body).collect();
    let t = Instant::now();
    for (i, b) in bodies.into_iter().enumerate() {
        s.put(&bare_path(i), b.into())
            .await
            .map_err(|e| format!("bare put: {e}"))?;
    }
    let put = t.elapsed();
    let t = Instant::now();
    let mut got = 0;
    for i in 0..objects {
        got += s
            .get(&bare_path(i))
            .await
            .map_err(|e| format!("bare get: {e}"))?
            .bytes()
            .await
            .map_err(|e| format!("bare get: {e}"))?
            .len();
    }
    let get = t.elapsed();
    if got != size {
        return Err(format!("bare get: {got} bytes of {size}"));
    }
    Ok((put, get))
}

/// [`BARE_RANDOM`] ranged GETs of 4 KiB at random pages, one at a time:
/// GETs per second.
async fn bare_random(s: &dyn ObjectStore, size: usize, objects: usize) -> Result<f64, String> {
    // Its own sequence (no worker has this index).
    let mut rng = SplitMix::for_thread(usize::MAX);
    let t = Instant::now();
    for _ in 0..BARE_RANDOM {
        let page = rng.below(size / PAGE) * PAGE;
        let (obj, off) = (page / OBJECT, page % OBJECT);
        let b = s
            .get_range(
                &bare_path(obj.min(objects - 1)),
                off as u64..(off + PAGE) as u64,
            )
            .await
            .map_err(|e| format!("bare ranged get: {e}"))?;
        if b.len() != PAGE {
            return Err(format!("bare ranged get: {} bytes", b.len()));
        }
    }
    Ok(BARE_RANDOM as f64 / t.elapsed().as_secs_f64())
}

/// The store a case's volume keeps its data in.
struct DataStore {
    url: String,
    _s3: Option<S3Server>,
    _dir: Option<tempfile::TempDir>,
}

impl DataStore {
    fn start(variant: &str) -> Result<DataStore, String> {
        if variant == "local" {
            let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
            let url = dir
                .path()
                .to_str()
                .ok_or("the temporary directory's path is not UTF-8")?
                .to_string();
            return Ok(DataStore {
                url,
                _s3: None,
                _dir: Some(dir),
            });
        }
        let bin = seaweedfs::weed_binary().map_err(|e| format!("{e}: s3 variant skipped"))?;
        let s3 = S3Server::start(&bin)?;
        Ok(DataStore {
            url: s3.url("bench"),
            _s3: Some(s3),
            _dir: None,
        })
    }
}

/// Fields drop in order: the client, then etcd, then the store.
struct DataCase {
    reader: Client,
    size: usize,
    lib_write: Duration,
    lib_read: Duration,
    bare_put: Duration,
    bare_get: Duration,
    /// The bare client's ranged 4 KiB GETs per second.
    bare_random: f64,
    _server: EtcdServer,
    _store: DataStore,
}

impl Case for DataCase {
    fn worker(&self, w: Worker<'_>) {
        let f = match self
            .reader
            .vfs
            .as_root()
            .open(At::Root, "/data", libc::O_RDONLY, 0)
        {
            Ok(f) => f,
            Err(e) => return w.fail(format!("open: {e}")),
        };
        let mut rng = SplitMix::for_thread(w.index());
        let mut buf = vec![0u8; PAGE];
        let pages = self.size / PAGE;
        w.run(|| {
            let off = (rng.below(pages) * PAGE) as u64;
            f.read(off, &mut buf)
        })
    }

    fn summary(&self, r: &RunResult) -> Option<String> {
        let mbs = |d: Duration| self.size as f64 / d.as_secs_f64() / 1e6;
        let ratio = |lib: Duration, bare: Duration| bare.as_secs_f64() / lib.as_secs_f64();
        Some(format!(
            "data, {} MiB: write {:.0} MB/s (1 MiB writes + fsync), read {:.0} MB/s \
             (1 MiB reads, another client, cold); bare object_store, {} MiB objects one at \
             a time: put {:.0} MB/s, get {:.0} MB/s; library/bare: write {:.2}x, read {:.2}x; \
             random 4 KiB reads {:.0}/s ({} threads) vs bare ranged GETs {:.0}/s (one at a time)",
            self.size / MIB,
            mbs(self.lib_write),
            mbs(self.lib_read),
            OBJECT / MIB,
            mbs(self.bare_put),
            mbs(self.bare_get),
            ratio(self.lib_write, self.bare_put),
            ratio(self.lib_read, self.bare_get),
            r.ops_per_sec,
            r.threads,
            self.bare_random,
        ))
    }
}
