//! Running `dcache mount` as a child process for the FUSE integration
//! tests: start it in the foreground on a temporary directory, wait until
//! the kernel lists the mount, and always unmount and reap it (drop guard),
//! with a watchdog that kills it if a test hangs on the mount.

#![allow(dead_code)]

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dcache_bench::etcd::{etcd_binary, EtcdServer};

/// Can FUSE mounts be made here? Prints the reason and returns false if
/// not, so a test can pass as skipped.
pub fn fuse_or_skip(test: &str) -> bool {
    match dcache_fuse::testing::available() {
        Ok(()) => true,
        Err(why) => {
            dcache_fuse::testing::skipped(format_args!("{test}: FUSE unusable here ({why})"));
            false
        }
    }
}

/// Whether the etcd binary is there; under CI its absence is a failure.
pub fn etcd_or_skip(test: &str) -> bool {
    if etcd_binary() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: the etcd binary is missing (apt-get install etcd-server)");
    }
    dcache_fuse::testing::skipped(format_args!(
        "{test}: no etcd binary (apt-get install etcd-server)"
    ));
    false
}

/// Run the `dcache` binary with `args`, `env` added to its environment;
/// its exit code and what it printed (stdout and stderr, in order).
pub fn dcache_env(env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let printed = dir.path().join("printed");
    let script = r#"out=$("$@" 2>&1); rc=$?; printf '%s\n' "$out"; exit $rc"#;
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_dcache"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(File::create(&printed).unwrap())
        .status()
        .unwrap();
    (
        st.code().unwrap_or(-1),
        std::fs::read_to_string(&printed).unwrap(),
    )
}

/// Whether `dir` is a mount point in this process's mount namespace.
pub fn is_mounted(dir: &Path) -> bool {
    mounts_at(dir) > 0
}

/// How many mounts are stacked on `dir`.
pub fn mounts_at(dir: &Path) -> usize {
    let want = dir.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| {
            s.lines()
                .filter(|l| l.split(' ').nth(4) == Some(want.as_str()))
                .count()
        })
        .unwrap_or(0)
}

/// The device (`major:minor`) of the top mount on `dir`, if any (the last
/// one listed there).
pub fn top_dev(dir: &Path) -> Option<String> {
    let want = dir.to_string_lossy().replace(' ', "\\040");
    let s = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    s.lines()
        .rfind(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .and_then(|l| l.split(' ').nth(2).map(str::to_string))
}

/// The variable naming `-o` options every mount of these tests gets after
/// its own (so they win): `scripts/compat-tests.sh` runs the suites with
/// every negotiated feature off this way.
pub const EXTRA_OPTIONS: &str = "DCACHE_TEST_MOUNT_OPTIONS";

/// The options [`EXTRA_OPTIONS`] names, if any.
pub fn extra_options() -> Option<String> {
    std::env::var(EXTRA_OPTIONS).ok().filter(|s| !s.is_empty())
}

/// Whether [`EXTRA_OPTIONS`] switches `feature` off (`no_<feature>`):
/// tests of that feature itself print a SKIPPED line then.
pub fn switched_off(feature: &str) -> bool {
    let off = format!("no_{feature}");
    extra_options().is_some_and(|o| o.split(',').any(|x| x == off))
}

/// [`switched_off`], printing the SKIPPED line for `test` when it is.
pub fn skip_if_off(test: &str, feature: &str) -> bool {
    let off = switched_off(feature);
    if off {
        dcache_fuse::testing::skipped(format_args!(
            "{test}: {EXTRA_OPTIONS} switches {feature} off"
        ));
    }
    off
}

/// Whether this test runs as root (scripts/nonroot-tests.sh runs the
/// suites as uid 65534, mounting through fusermount3).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the root-only part `what` of `test` runs: true as root; else
/// false after one line containing SKIPPED.
pub fn root_part(test: &str, what: &str) -> bool {
    let root = is_root();
    if !root {
        dcache_fuse::testing::skipped(format_args!("{test}: {what} (needs root)"));
    }
    root
}

/// Poll `cond` every 10 ms for at most `limit`.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// For mounts served by this very process: if `done` is not set within
/// `limit`, detach the mount and abort the test process (closing its
/// /dev/fuse descriptor fails every pending call), so a hang becomes a
/// failure.
pub fn in_process_watchdog(mnt: PathBuf, limit: Duration) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < limit {
            if d.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("watchdog: {} hung; aborting", mnt.display());
        let _ = Command::new("fusermount3").arg("-uz").arg(&mnt).status();
        std::process::abort();
    });
    done
}

/// A `dcache mount -f` child serving `mnt`.
pub struct Daemon {
    child: Arc<Mutex<Child>>,
    done: Arc<AtomicBool>,
    pub mnt: PathBuf,
    /// Its mount's device: the drop guard unmounts only that mount.
    pub dev: Option<String>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// How long one test may keep a mount before the watchdog kills the
/// daemon (the kernel then fails every pending call with ENOTCONN, so a
/// hung test fails instead of hanging).
const WATCHDOG: Duration = Duration::from_secs(240);

impl Daemon {
    /// `dcache mount --backend BACKEND -f ARGS.. MNT` on a fresh mount
    /// point; panics if it is not mounted within 20 s.
    pub fn start(backend: &str, args: &[&str]) -> Daemon {
        Daemon::start_env(backend, args, &[])
    }

    /// Like [`start`](Self::start), on the given mount point (which may
    /// already carry mounts): up once one more mount is stacked there.
    /// `dir` holds the log and is removed with the Daemon.
    pub fn start_on(backend: &str, args: &[&str], mnt: PathBuf, dir: tempfile::TempDir) -> Daemon {
        Daemon::start_limited(backend, args, mnt, dir, None)
    }

    /// Like [`start_on`](Self::start_on), with the daemon's RLIMIT_NOFILE
    /// (soft and hard) set to `nofile` when given.
    pub fn start_limited(
        backend: &str,
        args: &[&str],
        mnt: PathBuf,
        dir: tempfile::TempDir,
        nofile: Option<u64>,
    ) -> Daemon {
        Daemon::spawn(backend, args, mnt, dir, nofile, &[])
    }

    /// Like [`start`](Self::start), with `env` added to the daemon's
    /// environment.
    pub fn start_env(backend: &str, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        Daemon::spawn(backend, args, mnt, dir, None, env)
    }

    fn spawn(
        backend: &str,
        args: &[&str],
        mnt: PathBuf,
        dir: tempfile::TempDir,
        nofile: Option<u64>,
        env: &[(&str, &str)],
    ) -> Daemon {
        let before = mounts_at(&mnt);
        // A dead mount there (its daemon killed) is replaced, not stacked on.
        let dead = std::fs::metadata(&mnt).is_err_and(|e| e.raw_os_error() == Some(libc::ENOTCONN));
        let came_up = move |mnt: &Path| {
            if dead {
                std::fs::metadata(mnt).is_ok() && is_mounted(mnt)
            } else {
                mounts_at(mnt) > before
            }
        };
        let log = dir.path().join("daemon.log");
        let err = File::create(&log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dcache"));
        cmd.args(["mount", "--backend", backend, "-f"]);
        cmd.args(args);
        if let Some(extra) = extra_options() {
            cmd.args(["-o", &extra]);
        }
        cmd.envs(env.iter().copied());
        cmd.arg(&mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs in the forked child before exec and
            // only calls setrlimit, which is async-signal-safe.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = Arc::new(Mutex::new(cmd.spawn().expect("spawn dcache mount")));
        let done = Arc::new(AtomicBool::new(false));
        {
            let (child, done, mnt) = (child.clone(), done.clone(), mnt.clone());
            std::thread::spawn(move || {
                let start = Instant::now();
                while start.elapsed() < WATCHDOG {
                    if done.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                eprintln!("watchdog: killing the daemon of {}", mnt.display());
                let _ = child.lock().unwrap().kill();
                let _ = Command::new("fusermount3").arg("-uz").arg(&mnt).status();
            });
        }
        let mut d = Daemon {
            child,
            done,
            mnt,
            dev: None,
            log,
            _dir: dir,
        };
        let up = wait_for(Duration::from_secs(20), || {
            came_up(&d.mnt) || d.child.lock().unwrap().try_wait().unwrap().is_some()
        });
        assert!(
            up && d.running(),
            "dcache mount did not come up; its stderr:\n{}",
            d.stderr()
        );
        d.dev = top_dev(&d.mnt);
        // With -f nothing says when the daemon has answered INIT and
        // fetched the root's attributes; until the kernel has them it
        // takes the root for root's (a user's chmod of it is EPERM). A
        // stat here waits for both.
        let _ = std::fs::metadata(&d.mnt);
        d
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn pid(&self) -> i32 {
        self.child.lock().unwrap().id() as i32
    }

    pub fn stderr(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Whether the daemon has not exited yet.
    pub fn running(&self) -> bool {
        self.child.lock().unwrap().try_wait().unwrap().is_none()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid (not yet reaped: the
        // Child is only waited for in `finish`).
        let r = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(r, 0, "kill");
    }

    /// SIGUSR1: the daemon makes the kernel drop what it caches and prints
    /// what is still referenced. Returns that line.
    pub fn prune(&self) -> String {
        let before = self.stderr().matches("dcache: pruned").count();
        self.signal(libc::SIGUSR1);
        assert!(
            wait_for(Duration::from_secs(10), || self
                .stderr()
                .matches("dcache: pruned")
                .count()
                > before),
            "no prune report; stderr:\n{}",
            self.stderr()
        );
        let log = self.stderr();
        log.lines()
            .filter(|l| l.starts_with("dcache: pruned"))
            .nth(before)
            .unwrap()
            .to_string()
    }

    /// Wait (at most 20 s) for the daemon to exit; its status and stderr.
    fn finish(&self) -> (Option<ExitStatus>, String) {
        let mut status = None;
        // Generous: the exit prunes the kernel's cache (up to 2 s), unmounts
        // and frees the cache, and a loaded 2-CPU box has been seen to take
        // over 20 s for that (with other builds and FUSE tests running).
        wait_for(Duration::from_secs(60), || {
            status = self.child.lock().unwrap().try_wait().unwrap();
            status.is_some()
        });
        (status, self.stderr())
    }

    /// `fusermount3 -u MNT`, then wait for the daemon.
    pub fn fusermount_u(self) -> (Option<ExitStatus>, String) {
        let st = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status()
            .expect("fusermount3");
        assert!(st.success(), "fusermount3 -u failed: {st}");
        self.finish()
    }

    /// Send `sig` (SIGTERM, SIGINT), then wait for the daemon.
    pub fn kill_with(self, sig: i32) -> (Option<ExitStatus>, String) {
        self.signal(sig);
        self.finish()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Only our own mount, and only while it is the top one: another
        // daemon's (stacked under ours, or mounted since) is left alone.
        if self.dev.is_some() && top_dev(&self.mnt) == self.dev {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
        }
        let mut c = self.child.lock().unwrap();
        if !wait_for(Duration::from_secs(10), || c.try_wait().unwrap().is_some()) {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.done.store(true, Ordering::SeqCst);
    }
}

/// Assert the daemon exited 0 and reported 0 referenced nodes.
pub fn assert_clean_exit(r: (Option<ExitStatus>, String)) {
    let (status, log) = r;
    let status = status.unwrap_or_else(|| panic!("daemon did not exit; stderr:\n{log}"));
    assert!(status.success(), "daemon exit {status}; stderr:\n{log}");
    assert!(
        log.lines()
            .any(|l| l == "dcache: unmounted, 0 nodes still referenced"),
        "expected a clean unmount report; stderr:\n{log}"
    );
}

/// Run a command, assert success, return stdout.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Deterministic pseudo-random bytes (xorshift), for file contents.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The errno of an io::Error.
pub fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

/// Compare two transcripts step by step.
pub fn same(what: &str, got: &[String], want: &[String]) {
    assert_eq!(got.len(), want.len(), "{what}: step counts");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g, w, "{what}: the mount (left) differs from tmpfs (right)");
    }
}

/// What a test mounts: memfs, a passthrough of a host directory, or a
/// fresh prefix of a local etcd (started once per test).
pub struct Backend {
    pub name: &'static str,
    etcd: Option<EtcdServer>,
}

impl Backend {
    /// `None` (after one SKIPPED line) for etcd without its binary.
    pub fn new(name: &'static str, test: &str) -> Option<Backend> {
        if name != "etcd" {
            return Some(Backend { name, etcd: None });
        }
        if !etcd_binary() {
            if std::env::var_os("CI").is_some() {
                panic!("{test}: the etcd binary is missing (apt-get install etcd-server)");
            }
            dcache_fuse::testing::skipped(format_args!(
                "{test}: no etcd binary (apt-get install etcd-server)"
            ));
            return None;
        }
        let etcd = EtcdServer::start_or_use(None).expect("start etcd");
        Some(Backend {
            name,
            etcd: Some(etcd),
        })
    }

    /// The `--backend` of a new mount (`host`: passthrough's directory;
    /// etcd: a fresh prefix, formatted as a volume).
    pub fn spec(&self, host: &Path) -> String {
        match (self.name, &self.etcd) {
            ("mem", _) => "mem".into(),
            (_, Some(etcd)) => format!("etcd:{}", etcd.fresh_volume().expect("format")),
            _ => format!("passthrough:{}", host.display()),
        }
    }
}
