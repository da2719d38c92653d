//! The `etcd` target: dcache's `Vfs` over dcache-etcd's `EtcdFs`.
//!
//! A case talks to the etcd given by `--etcd URL`, or else starts its own
//! single member (the `etcd` binary on the PATH) on 127.0.0.1 with free
//! ports and a temporary data directory, and kills it when the case ends.
//! Without the binary the case cannot be prepared and the harness says so
//! in one line. Every case works under a prefix of its own
//! (`/dcache-bench-<pid>-<n>`), so runs against a shared etcd do not meet;
//! it formats the prefix as a volume first, and deletes every key under
//! it when the case ends, so a run leaves nothing in the user's cluster.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dcache::vfs::Vfs;
use dcache_etcd::EtcdFs;

/// An etcd to run against: one this process started (killed on drop), or
/// the one `--etcd` named.
pub struct EtcdServer {
    child: Option<Child>,
    url: String,
    _dir: Option<tempfile::TempDir>,
    /// The volumes `fresh_volume` formatted: deleted on drop.
    volumes: Mutex<Vec<String>>,
}

/// Whether `etcd --version` runs.
pub fn etcd_binary() -> bool {
    Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("bind: {e}"))
}

impl EtcdServer {
    /// The etcd at `url`, or (`None`) a fresh local single member.
    pub fn start_or_use(url: Option<&str>) -> Result<EtcdServer, String> {
        if let Some(u) = url {
            return Ok(EtcdServer {
                child: None,
                url: u.trim_end_matches('/').to_string(),
                _dir: None,
                volumes: Mutex::default(),
            });
        }
        if !etcd_binary() {
            return Err("no etcd binary on the PATH (apt-get install etcd-server), \
                        and no --etcd URL given: etcd target skipped"
                .into());
        }
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let (cp, pp) = (free_port()?, free_port()?);
        let client = format!("http://127.0.0.1:{cp}");
        let peer = format!("http://127.0.0.1:{pp}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))
            .map_err(|e| format!("etcd log: {e}"))?;
        let child = Command::new("etcd")
            .args(["--name", "bench"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("bench={peer}")])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("cannot start etcd: {e}"))?;
        let server = EtcdServer {
            child: Some(child),
            url: client,
            _dir: Some(dir),
            volumes: Mutex::default(),
        };
        // Listening is enough: a client waits for the leader itself.
        let until = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", cp)).is_err() {
            if Instant::now() > until {
                return Err("the local etcd did not start listening in 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// `http://HOST:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The process id of the member this started (`None` for a given URL).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// A spec for a prefix of this case's own, formatted as a volume;
    /// every key under it is deleted when this server is dropped (after
    /// the case's clients, which are declared before it).
    pub fn fresh_volume(&self) -> Result<String, String> {
        self.fresh_volume_with(&dcache_etcd::FormatOptions::default())
    }

    /// `fresh_volume`, formatted with `opts` (an object store, say).
    pub fn fresh_volume_with(&self, opts: &dcache_etcd::FormatOptions) -> Result<String, String> {
        let spec = self.fresh_spec();
        dcache_etcd::format(&spec, opts).map_err(|e| format!("etcd: {e}"))?;
        self.volumes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(spec.clone());
        Ok(spec)
    }

    /// A spec for a prefix of this case's own, not formatted.
    pub fn fresh_spec(&self) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        format!(
            "{}/dcache-bench-{}-{nanos}-{}",
            self.url,
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let volumes = std::mem::take(self.volumes.get_mut().unwrap_or_else(|e| e.into_inner()));
        // An etcd this process started goes with its data directory.
        if self.child.is_none() {
            for spec in volumes {
                if let Err(e) = dcache_etcd::destroy(&spec) {
                    eprintln!("dcache bench: could not delete the scratch volume {spec}: {e}");
                }
            }
        }
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What every etcd case starts with: the etcd of `--etcd` (or a local
/// member), and a fresh scratch volume on it (deleted when the server is
/// dropped). `--cred` is refused: the etcd target acts as root.
pub fn scratch_volume(options: &crate::workload::Options) -> Result<(EtcdServer, String), String> {
    scratch_volume_with(options, &dcache_etcd::FormatOptions::default())
}

/// `scratch_volume`, formatted with `format` (an object store, say).
pub fn scratch_volume_with(
    options: &crate::workload::Options,
    format: &dcache_etcd::FormatOptions,
) -> Result<(EtcdServer, String), String> {
    if options.cred.is_some() {
        return Err("--cred runs on the lib and kernel targets".into());
    }
    let server = EtcdServer::start_or_use(options.etcd.as_deref())?;
    let spec = server.fresh_volume_with(format)?;
    Ok((server, spec))
}

/// One client: its `EtcdFs` and the `Vfs` over it.
pub struct Client {
    pub fs: Arc<EtcdFs>,
    pub vfs: Vfs,
}

/// Connect a client to `spec`.
pub fn client(spec: &str) -> Result<Client, String> {
    let fs = Arc::new(EtcdFs::connect(spec).map_err(|e| format!("etcd {spec}: {e}"))?);
    let vfs = Vfs::new(fs.clone()).map_err(|e| format!("vfs: {e}"))?;
    Ok(Client { fs, vfs })
}

/// p50 and p99 of `n` serializable gets (the round trip a cached stat
/// saves).
pub fn round_trips(fs: &EtcdFs, n: usize) -> Result<(Duration, Duration), String> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(
            fs.serializable_round_trip()
                .map_err(|e| format!("serializable get: {e}"))?,
        );
    }
    v.sort();
    Ok((v[n / 2], v[(n * 99 / 100).min(n - 1)]))
}
