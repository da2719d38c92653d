//! SeaweedFS as the S3-compatible server the object-store tests run
//! against: `weed server -filer -s3` started on 127.0.0.1 with free ports,
//! a temporary data directory and one S3 identity (so every request is
//! signed and checked), a bucket made with `weed shell`, the process
//! stopped when the [`S3Server`] drops.
//!
//! The binary: `$DCACHE_WEED`, else what `scripts/seaweedfs.sh` builds for
//! [`VERSION`] (`$DCACHE_SEAWEEDFS_CACHE/VERSION/weed`, the cache being
//! `~/.cache/dcache/seaweedfs` by default). Without one a test prints one
//! `SKIPPED` line and passes, except under CI (`CI` set), which builds it
//! and where its absence is a failure.
//!
//! dcache-etcd's tests use this file too (`#[path]`), so it needs only
//! std, libc and tempfile.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The SeaweedFS version `scripts/seaweedfs.sh` builds (keep the two in
/// step).
pub const VERSION: &str = "v0.0.0-20261109003541-7506e5f91cd6";

/// The one identity the server knows; [`S3Server::start`] puts it in this
/// process's environment, where dcache-etcd's S3 client finds it.
pub const ACCESS_KEY: &str = "dcachetestkey";
pub const SECRET_KEY: &str = "dcache-test-secret-0123456789abcdef";

/// The bucket every test volume goes into (each under a prefix of its
/// own).
pub const BUCKET: &str = "dcache-test";

/// Where `scripts/seaweedfs.sh` keeps the binary for [`VERSION`].
pub fn cached_binary() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let cache = env("DCACHE_SEAWEEDFS_CACHE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".cache/dcache/seaweedfs")))?;
    Some(cache.join(VERSION).join("weed"))
}

/// The weed binary to run, or why there is none.
pub fn weed_binary() -> Result<PathBuf, String> {
    let (bin, from_env) = match std::env::var_os("DCACHE_WEED").filter(|v| !v.is_empty()) {
        Some(p) => (PathBuf::from(p), true),
        None => match cached_binary() {
            Some(p) => (p, false),
            None => return Err("no DCACHE_WEED and no HOME to find the cache in".into()),
        },
    };
    let runs = Command::new(&bin)
        .arg("version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    match (runs, from_env) {
        (true, _) => Ok(bin),
        (false, true) => Err(format!("DCACHE_WEED={} does not run", bin.display())),
        (false, false) => Err(format!(
            "no SeaweedFS binary at {} (scripts/seaweedfs.sh builds it; or set DCACHE_WEED)",
            bin.display()
        )),
    }
}

/// The weed binary, or `None` after one `SKIPPED` line; under CI (`CI`
/// set) a missing binary fails the test instead.
pub fn weed_or_skip(test: &str) -> Option<PathBuf> {
    match weed_binary() {
        Ok(b) => Some(b),
        Err(why) => {
            if std::env::var_os("CI").is_some() {
                panic!("{test}: {why}");
            }
            // Straight to stderr, not println!: libtest captures the
            // macros' output, so the line would not show in a plain `cargo
            // test` (as dcache_fuse::testing::skipped).
            let line = format!("SKIPPED {test}: {why}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            None
        }
    }
}

/// A running `weed server` with its S3 gateway.
pub struct S3Server {
    /// `None` while killed.
    child: Option<Child>,
    bin: PathBuf,
    /// master, volume, filer, s3: HTTP port, gRPC port.
    ports: Vec<u16>,
    dir: tempfile::TempDir,
}

/// `weed server` with the master, a volume server, the filer and the S3
/// gateway, on the ports `p` (as `S3Server` keeps them), data and logs
/// under `dir`.
fn spawn(bin: &Path, dir: &Path, p: &[u16]) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("weed.log"))
        .map_err(|e| format!("weed log: {e}"))?;
    let arg = |k: &str, v: &dyn std::fmt::Display| format!("-{k}={v}");
    Command::new(bin)
        .current_dir(dir)
        // weed makes an admin identity of these when it finds them: the
        // identities are the config file's only.
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        // Global flags: logs to stderr (the log file), not /tmp.
        .args(["-logtostderr=true", "server"])
        .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
        .arg(arg("dir", &dir.join("data").display()))
        .arg(arg("master.port", &p[0]))
        .arg(arg("master.port.grpc", &p[1]))
        .arg("-master.telemetry=false")
        // Small volumes: a test writes at most a few GiB.
        .arg("-master.volumeSizeLimitMB=256")
        .arg("-volume.max=0")
        .arg(arg("volume.port", &p[2]))
        .arg(arg("volume.port.grpc", &p[3]))
        .arg("-filer")
        .arg(arg("filer.port", &p[4]))
        .arg(arg("filer.port.grpc", &p[5]))
        .arg(arg("filer.localSocket", &dir.join("f.sock").display()))
        .arg("-s3")
        .arg(arg("s3.port", &p[6]))
        .arg(arg("s3.port.grpc", &p[7]))
        .args(["-s3.port.iceberg=0", "-s3.port.lance=0"])
        .arg(arg("s3.localSocket", &dir.join("s.sock").display()))
        .arg(arg("s3.config", &dir.join("s3.json").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::from(
            log.try_clone().map_err(|e| format!("weed log: {e}"))?,
        ))
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))
}

fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    // All bound at once, so no two are the same.
    let ls = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    ls.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bind: {e}"))
}

/// The S3 identity file `weed` reads (`-s3.config`).
fn identity_json() -> String {
    format!(
        "{{\"identities\": [{{\"name\": \"dcache\", \
         \"credentials\": [{{\"accessKey\": \"{ACCESS_KEY}\", \"secretKey\": \"{SECRET_KEY}\"}}], \
         \"actions\": [\"Admin\", \"Read\", \"List\", \"Write\", \"Tagging\"]}}]}}\n"
    )
}

impl S3Server {
    /// Start `bin` and wait (at most a minute) until its S3 port answers
    /// and [`BUCKET`] exists. Puts [`ACCESS_KEY`] / [`SECRET_KEY`] in this
    /// process's environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`):
    /// every server a test starts has the same identity, so tests running
    /// side by side set the same values.
    ///
    /// The ports are found free, then freed for `weed` to take: another
    /// process (a test beside this one) may take one first. A start that
    /// fails on a port already in use is tried again on new ports (at
    /// most three times).
    pub fn start(bin: &Path) -> Result<S3Server, String> {
        let mut tries = 0;
        loop {
            tries += 1;
            match S3Server::start_once(bin) {
                Err(e) if tries < 3 && e.contains("address already in use") => continue,
                r => return r,
            }
        }
    }

    fn start_once(bin: &Path) -> Result<S3Server, String> {
        std::env::set_var("AWS_ACCESS_KEY_ID", ACCESS_KEY);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET_KEY);
        std::env::remove_var("AWS_SESSION_TOKEN");
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let data = dir.path().join("data");
        std::fs::create_dir(&data).map_err(|e| format!("mkdir: {e}"))?;
        let config = dir.path().join("s3.json");
        std::fs::write(&config, identity_json()).map_err(|e| format!("s3.json: {e}"))?;
        // master, volume, filer, s3: an HTTP and a gRPC port each.
        let ports = free_ports(8)?;
        let p = ports.clone();
        let child = spawn(bin, dir.path(), &ports)?;
        let mut s = S3Server {
            child: Some(child),
            bin: bin.to_path_buf(),
            ports,
            dir,
        };
        let until = Instant::now() + Duration::from_secs(60);
        s.wait_listening(until)?;
        // The bucket, made as an operator makes it, then listed (the shell
        // exits 0 whatever its commands did); retried while the filer is
        // still registering with the master. (An admin identity's first
        // upload would also create it: `-s3.autoCreateBucket`, on by
        // default, so a gateway that has not yet heard of the new bucket
        // does not refuse the first request.)
        let mut create = true;
        loop {
            let cmd = if create {
                format!("s3.bucket.create -name {BUCKET}\n")
            } else {
                "s3.bucket.list\n".to_string()
            };
            let out = s.shell(bin, &p, &cmd)?;
            if !create && out.contains(&format!("{BUCKET}\tsize:")) {
                break;
            }
            create = !create;
            s.check(until, &format!("weed shell: {}", out.trim()))?;
            if create {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Ok(s)
    }

    /// What `weed shell` prints for the commands `cmd`.
    fn shell(&self, bin: &Path, p: &[u16], cmd: &str) -> Result<String, String> {
        let out = Command::new(bin)
            .current_dir(self.dir.path())
            .args(["-logtostderr=true", "shell"])
            // HOST:PORT.GRPCPORT: the gRPC ports are not the default
            // PORT+10000.
            .arg(format!("-master=127.0.0.1:{}.{}", p[0], p[1]))
            .arg(format!("-filer=127.0.0.1:{}.{}", p[4], p[5]))
            .arg("-connectTimeout=10s")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                let mut i = c.stdin.take().expect("piped stdin");
                i.write_all(format!("{cmd}exit\n").as_bytes())?;
                drop(i);
                c.wait_with_output()
            })
            .map_err(|e| format!("weed shell: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr))
    }

    /// An error (with the end of the server's log) when it has exited or
    /// `until` has passed.
    fn check(&mut self, until: Instant, what: &str) -> Result<(), String> {
        let exited = match &mut self.child {
            Some(c) => c.try_wait().ok().flatten(),
            None => return Err(format!("weed server: killed ({what})")),
        };
        if exited.is_none() && Instant::now() < until {
            return Ok(());
        }
        let log = std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(format!(
            "weed server: {} ({what}); its log ends:\n{}",
            match exited {
                Some(st) => format!("exited with {st}"),
                None => "not ready within 60 s".into(),
            },
            tail.join("\n")
        ))
    }

    fn wait_listening(&mut self, until: Instant) -> Result<(), String> {
        while TcpStream::connect(("127.0.0.1", self.ports[6])).is_err() {
            self.check(until, "its S3 port did not open")?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// SIGKILL the server (a crash: nothing answers on its ports).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start a killed server again on its ports and data, and wait until
    /// its bucket answers.
    pub fn restart(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "restart of a running server");
        self.child = Some(spawn(&self.bin, self.dir.path(), &self.ports)?);
        let until = Instant::now() + Duration::from_secs(60);
        self.wait_listening(until)?;
        let p = self.ports.clone();
        loop {
            let out = self.shell(&self.bin.clone(), &p, "s3.bucket.list\n")?;
            if out.contains(&format!("{BUCKET}\tsize:")) {
                return Ok(());
            }
            self.check(until, &format!("weed shell: {}", out.trim()))?;
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What the server has logged (all its runs).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports[6])
    }

    /// The store URL (`dcache format --data`) for `prefix` in [`BUCKET`].
    pub fn url(&self, prefix: &str) -> String {
        format!(
            "s3://{BUCKET}/{}?endpoint={}&region=us-east-1",
            prefix.trim_matches('/'),
            self.endpoint()
        )
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            // SIGTERM first (weed then closes its volumes), SIGKILL if it
            // has not gone within 5 s.
            let pid = child.id() as libc::pid_t;
            // SAFETY: kill(2) on our own child, which is not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let until = Instant::now() + Duration::from_secs(5);
            while !matches!(child.try_wait(), Ok(Some(_))) {
                if Instant::now() > until {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // `weed server` puts a socket per service at a fixed place in /tmp
        // (named by its gRPC port) and leaves it there.
        let grpc = [self.ports[1], self.ports[3], self.ports[5], self.ports[7]];
        for (name, port) in ["master", "volume", "filer", "s3"].iter().zip(grpc) {
            let _ = std::fs::remove_file(format!("/tmp/seaweedfs-{name}-grpc-{port}.sock"));
        }
    }
}
