//! Test etcd clusters: members on 127.0.0.1 only, free ports, their own
//! temporary data directories, killed when the `Cluster` drops.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dcache::Vfs;
use dcache_etcd::{EtcdFs, Options};
use futures_util::StreamExt;
use object_store::ObjectStore;

pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub data: PathBuf,
    pub child: Option<Child>,
}

pub struct Cluster {
    pub members: Vec<Member>,
    initial: String,
    dir: tempfile::TempDir,
}

/// Whether the `etcd` binary can be run. When it cannot, a test prints a
/// SKIPPED line and returns; under CI (`CI` set) it fails instead, since
/// CI installs etcd.
pub fn etcd_available(test: &str) -> bool {
    let ok = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("{test}: the etcd binary is missing (apt-get install etcd-server etcd-client)");
        }
        // Straight to stderr, not println!: libtest captures the macros'
        // output, so the line would not show in a plain `cargo test` (as
        // dcache_fuse::testing::skipped, which this crate cannot reach).
        let line =
            format!("SKIPPED {test}: no etcd binary (apt-get install etcd-server etcd-client)\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }
    ok
}

fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    ls.iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

impl Cluster {
    /// Start `n` members and wait until the cluster answers.
    pub fn start(n: usize) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports = free_ports(2 * n);
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                data: dir.path().join(format!("m{i}")),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Cluster {
            members,
            initial,
            dir,
        };
        for i in 0..n {
            c.spawn(i);
        }
        c.wait_ready(Duration::from_secs(30));
        c
    }

    fn spawn(&mut self, i: usize) {
        let log = std::fs::File::create(self.dir.path().join(format!("m{i}.log"))).expect("log");
        let m = &mut self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "dcache-etcd-test"])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn etcd");
        m.child = Some(child);
    }

    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// `ep1,ep2,.../prefix` for all members.
    pub fn spec(&self, prefix: &str) -> String {
        let eps: Vec<String> = (0..self.members.len()).map(|i| self.endpoint(i)).collect();
        format!("{}{}", eps.join(","), prefix)
    }

    /// `spec(prefix)`, formatted as a new volume (what a client needs
    /// before it may connect).
    pub fn volume(&self, prefix: &str) -> String {
        let spec = self.spec(prefix);
        format_volume(&spec);
        spec
    }

    /// Block until a write through some member succeeds.
    pub fn wait_ready(&self, limit: Duration) {
        let until = Instant::now() + limit;
        let rt = rt();
        let eps: Vec<String> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .map(|i| self.endpoint(i))
            .collect();
        loop {
            let ok = rt.block_on(async {
                let c = tokio::time::timeout(
                    Duration::from_secs(2),
                    etcd_client::Client::connect(eps.clone(), None),
                )
                .await;
                let Ok(Ok(mut c)) = c else { return false };
                matches!(
                    tokio::time::timeout(Duration::from_secs(2), c.put("/ready", "1", None)).await,
                    Ok(Ok(_))
                )
            });
            if ok {
                return;
            }
            assert!(Instant::now() < until, "etcd cluster did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The index of the current leader, asked of the live members.
    pub fn leader(&self) -> Option<usize> {
        let rt = rt();
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                continue;
            }
            let ep = self.endpoint(i);
            let r = rt.block_on(async {
                let mut c = tokio::time::timeout(
                    Duration::from_secs(2),
                    etcd_client::Client::connect([ep], None),
                )
                .await
                .ok()?
                .ok()?;
                let s = tokio::time::timeout(Duration::from_secs(2), c.status())
                    .await
                    .ok()?
                    .ok()?;
                Some((s.header()?.member_id(), s.leader()))
            });
            if let Some((me, leader)) = r {
                if leader == 0 {
                    continue;
                }
                if me == leader {
                    return Some(i);
                }
            }
        }
        None
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Send a signal (`STOP`, `CONT`) to a member.
    pub fn signal(&self, i: usize, sig: &str) {
        let pid = self.members[i].child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{sig} {pid}");
    }

    /// Start a killed member again on its data directory.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none());
        self.spawn(i);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].child.is_some() {
                let _ = Command::new("kill")
                    .arg("-CONT")
                    .arg(
                        self.members[i]
                            .child
                            .as_ref()
                            .map(|c| c.id())
                            .unwrap_or(0)
                            .to_string(),
                    )
                    .status();
            }
            self.kill(i);
        }
    }
}

/// Format the prefix of `spec` as a new volume (`dcache format`).
pub fn format_volume(spec: &str) -> dcache_etcd::Volume {
    dcache_etcd::format(spec, &dcache_etcd::FormatOptions::default()).expect("format")
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A client `Vfs` on `spec`. A connect that fails with EIO (the cluster
/// slow to answer within `opts.timeout`, as a just started one can be on
/// a loaded 2-core CI box) is tried again for up to 20 s: a test that
/// calls this is about what the client does once connected (tests of
/// failing connects call `EtcdFs::connect_with` themselves).
pub fn client(spec: &str, opts: Options) -> (Arc<EtcdFs>, Vfs) {
    let until = Instant::now() + Duration::from_secs(20);
    let fs = loop {
        match EtcdFs::connect_with(spec, opts.clone()) {
            Ok(fs) => break fs,
            Err(e) if e.errno == dcache::Errno::EIO && Instant::now() < until => {
                eprintln!("connect: {e:?}; trying again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("connect: {e:?}"),
        }
    };
    let fs = Arc::new(fs);
    let vfs = Vfs::new(fs.clone()).expect("vfs");
    (fs, vfs)
}

/// Wait until `f` holds (polling), up to `limit`; returns the time taken.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if f() {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The p-th percentile (0..=100) of sorted durations.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// SeaweedFS's S3 gateway, started the way dcache-bench's tests start it.
#[path = "../../../dcache-bench/src/seaweedfs.rs"]
pub mod seaweedfs;

/// Where a test volume keeps its file data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// A local directory (`--data DIR`).
    Local,
    /// A bucket of a SeaweedFS server this test starts (`--data
    /// s3://...`).
    S3,
}

/// An object store for one test, seen both as the volume sees it (its
/// URL) and as the test inspects it (an `object_store` client of its own
/// on the same URL). Dropping it stops the server or deletes the
/// directory.
pub struct TestStore {
    pub url: String,
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
    dir: Option<tempfile::TempDir>,
    s3: Option<seaweedfs::S3Server>,
}

impl TestStore {
    /// A fresh store of `kind`; `None` (after one SKIPPED line) when the
    /// SeaweedFS binary is missing outside CI.
    pub fn new(kind: Store, test: &str) -> Option<TestStore> {
        let (url, dir, s3) = match kind {
            Store::Local => {
                let dir = tempfile::tempdir().expect("tempdir");
                let url = dir.path().to_str().expect("utf-8 path").to_string();
                (url, Some(dir), None)
            }
            Store::S3 => {
                let bin = seaweedfs::weed_or_skip(test)?;
                let t = Instant::now();
                let s3 = seaweedfs::S3Server::start(&bin).unwrap_or_else(|e| panic!("{test}: {e}"));
                println!(
                    "{test}: SeaweedFS S3 gateway at {} up in {:.1?}",
                    s3.endpoint(),
                    t.elapsed()
                );
                (s3.url("volumes"), None, Some(s3))
            }
        };
        let store = dcache_etcd::store::StoreUrl::parse(&url)
            .and_then(|u| u.open(false))
            .expect("open the test store");
        Some(TestStore {
            url,
            store,
            rt: rt(),
            dir,
            s3,
        })
    }

    /// The test's own client of the store.
    pub fn client(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// Run `f` on the store's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The SeaweedFS server (a `Store::S3` store only).
    pub fn server(&mut self) -> &mut seaweedfs::S3Server {
        self.s3.as_mut().expect("an S3 store")
    }

    /// The local directory (a `Store::Local` store only).
    pub fn path(&self) -> &std::path::Path {
        self.dir.as_ref().expect("a local store").path()
    }

    /// Every object in the store: (path, size).
    pub fn list(&self) -> Vec<(String, u64)> {
        self.rt.block_on(async {
            self.store
                .list(None)
                .map(|m| {
                    let m = m.expect("list the store");
                    (m.location.to_string(), m.size)
                })
                .collect::<Vec<_>>()
                .await
        })
    }

    /// The slice ids of the objects the store holds
    /// (`<uuid>/s/<xxx>/<id>`).
    pub fn objects(&self) -> std::collections::BTreeSet<u64> {
        self.list()
            .into_iter()
            .filter_map(|(p, _)| {
                let uuid = p.split('/').next()?;
                dcache_etcd::slices::parse_object_path(uuid, &p)
            })
            .collect()
    }

    /// The bytes of every object in the store.
    pub fn bytes(&self) -> u64 {
        self.list().iter().map(|(_, n)| n).sum()
    }

    pub fn put(&self, path: &str, data: &'static [u8]) {
        let p = object_store::path::Path::from(path);
        self.rt
            .block_on(self.store.put(&p, bytes::Bytes::from_static(data).into()))
            .expect("put");
    }

    pub fn exists(&self, path: &str) -> bool {
        let p = object_store::path::Path::from(path);
        match self.rt.block_on(self.store.head(&p)) {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => panic!("head {path}: {e}"),
        }
    }

    pub fn delete(&self, path: &str) {
        let p = object_store::path::Path::from(path);
        self.rt.block_on(self.store.delete(&p)).expect("delete");
    }
}

/// `spec(prefix)` formatted as a volume whose file data goes to `store`
/// (`dcache format --data URL`).
pub fn object_volume(c: &Cluster, prefix: &str, store: &TestStore) -> String {
    let spec = c.spec(prefix);
    let opts = dcache_etcd::FormatOptions {
        data: Some(store.url.clone()),
        ..Default::default()
    };
    dcache_etcd::format(&spec, &opts).expect("format --data");
    spec
}

/// etcd's database size (`dbSize` of the maintenance status) at `ep`.
pub fn db_size(ep: &str) -> u64 {
    let rt = rt();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([ep], None)
            .await
            .expect("connect");
        c.status().await.expect("status").db_size() as u64
    })
}

/// The keys under `prefix` (raw etcd keys) at `ep`.
pub fn keys_under(ep: &str, prefix: &str) -> Vec<String> {
    let rt = rt();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([ep], None)
            .await
            .expect("connect");
        let r = c
            .get(
                prefix,
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_keys_only(),
                ),
            )
            .await
            .expect("get");
        r.kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect()
    })
}
