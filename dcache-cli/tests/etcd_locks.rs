//! Locks across hosts: two `dcache mount` daemons (two etcd clients, as
//! two hosts would run) of one volume, and processes on each locking one
//! file as processes on one host would.
//!
//! - `flock -n` through either mount fails while a process holds the lock
//!   through the other, as on one host.
//! - fcntl record locks of two helper processes (this test binary run
//!   again as a lock helper) exclude each other by range, and F_GETLK
//!   through mount B reports the holder's range and pid.
//! - a `flock` blocked on mount B is woken when the holder on mount A lets
//!   go (the latency printed), lock/unlock round trips are timed.
//! - SIGINT to a blocked `flock(1)` ends it promptly; a helper with a
//!   handler (no SA_RESTART) gets EINTR from its blocked `flock`.
//! - SIGKILL of mount A's daemon while its helper holds a lock: mount B's
//!   blocked F_SETLKW gets it once A's session lease expires (within the
//!   TTL, 10 s, + 2 s).
//! - sqlite3 from both mounts on one database (journal_mode=DELETE):
//!   concurrent writers insert rows; every row is there and
//!   `PRAGMA integrity_check` says ok.
//!
//! Needs /dev/fuse, the right to mount and the `etcd` binary (else one
//! SKIPPED line); sqlite3 and flock(1) likewise for their parts.

mod fuse_common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use dcache_bench::etcd::EtcdServer;
use fuse_common::{etcd_or_skip, fuse_or_skip, skip_if_off, Daemon};

const HELPER: &str = "DCACHE_LOCK_HELPER";

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

extern "C" fn on_signal(_: i32) {}

/// The lock helper: this test binary run with `DCACHE_LOCK_HELPER=FILE`.
/// It opens FILE and answers one line per command on stdin with a line
/// starting `R `:
/// `lk W|R|U START LEN` (F_SETLK), `lkw ...` (F_SETLKW), `get W|R START
/// LEN` (F_GETLK: `R lock T START LEN PID` or `R none`), `flock ex|sh|un
/// [nb]`, `pid`, `tid` (the thread that runs the commands, which a
/// signal must reach). Errors are `R err ERRNO`. SIGUSR2 has a handler
/// without SA_RESTART, so a blocked call returns EINTR.
#[test]
fn lock_helper() {
    let Ok(path) = std::env::var(HELPER) else {
        return; // not the helper
    };
    // SAFETY: a handler that does nothing; sigaction is plain data.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(i32) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let fd = f.as_raw_fd();
    let out = std::io::stdout();
    let err = || {
        format!(
            "R err {}",
            std::io::Error::last_os_error().raw_os_error().unwrap()
        )
    };
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        let kind = |s: &str| match s {
            "W" => libc::F_WRLCK,
            "R" => libc::F_RDLCK,
            _ => libc::F_UNLCK,
        };
        let fl = |w: &[&str]| {
            // SAFETY: plain data; zero is valid.
            let mut fl: libc::flock = unsafe { std::mem::zeroed() };
            fl.l_type = kind(w[1]) as i16;
            fl.l_whence = libc::SEEK_SET as i16;
            fl.l_start = w[2].parse().unwrap();
            fl.l_len = w[3].parse().unwrap();
            fl
        };
        let answer = match w[0] {
            "lk" | "lkw" => {
                let cmd = if w[0] == "lk" {
                    libc::F_SETLK
                } else {
                    libc::F_SETLKW
                };
                let f = fl(&w);
                // SAFETY: fcntl with a live struct flock.
                if unsafe { libc::fcntl(fd, cmd, &f) } == 0 {
                    "R ok".to_string()
                } else {
                    err()
                }
            }
            "get" => {
                let mut f = fl(&w);
                // SAFETY: fcntl with a live struct flock.
                if unsafe { libc::fcntl(fd, libc::F_GETLK, &mut f) } != 0 {
                    err()
                } else if i32::from(f.l_type) == libc::F_UNLCK {
                    "R none".to_string()
                } else {
                    let t = if i32::from(f.l_type) == libc::F_WRLCK {
                        "W"
                    } else {
                        "R"
                    };
                    format!("R lock {t} {} {} {}", f.l_start, f.l_len, f.l_pid)
                }
            }
            "flock" => {
                let mut how = match w[1] {
                    "ex" => libc::LOCK_EX,
                    "sh" => libc::LOCK_SH,
                    _ => libc::LOCK_UN,
                };
                if w.get(2) == Some(&"nb") {
                    how |= libc::LOCK_NB;
                }
                // SAFETY: flock(2) on our descriptor.
                if unsafe { libc::flock(fd, how) } == 0 {
                    "R ok".to_string()
                } else {
                    err()
                }
            }
            "pid" => format!("R {}", std::process::id()),
            // SAFETY: gettid has no preconditions.
            "tid" => format!("R {}", unsafe { libc::gettid() }),
            other => format!("R err unknown {other}"),
        };
        let mut o = out.lock();
        writeln!(o, "{answer}").unwrap();
        o.flush().unwrap();
    }
}

/// A running lock helper on `file`.
struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Helper {
    fn start(file: &Path) -> Helper {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "lock_helper",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(HELPER, file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut h = Helper {
            child,
            stdin,
            stdout,
        };
        assert_eq!(h.ask("pid"), format!("R {}", h.pid()));
        h
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next answer (skipping the test harness's own lines).
    fn answer(&mut self) -> String {
        loop {
            let mut l = String::new();
            assert!(self.stdout.read_line(&mut l).unwrap() > 0, "helper gone");
            if let Some(i) = l.find("R ") {
                return l[i..].trim_end().to_string();
            }
        }
    }

    fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.answer()
    }

    /// Send `sig` to the helper's thread that runs the commands (`tid`).
    fn signal_thread(&self, tid: i32, sig: i32) {
        // SAFETY: tgkill(2) of a thread of our own, unreaped child.
        let r = unsafe { libc::syscall(libc::SYS_tgkill, self.pid() as i32, tid, sig) };
        assert_eq!(r, 0);
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer that must come within `limit`, read on another thread.
fn answer_within(h: Helper, limit: Duration) -> (Helper, Option<(String, Instant)>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut h = h;
        let a = h.answer();
        let _ = tx.send((a, Instant::now()));
        h
    });
    let got = rx.recv_timeout(limit).ok();
    if got.is_none() {
        return (Helper::dead(t), None);
    }
    (t.join().unwrap(), got)
}

impl Helper {
    /// Stands in for a helper whose reader thread never came back (the
    /// test fails right after).
    fn dead(_t: std::thread::JoinHandle<Helper>) -> Helper {
        panic!("no answer within the limit");
    }
}

struct Setup {
    _server: EtcdServer,
    a: Daemon,
    b: Daemon,
}

impl Setup {
    fn new(opts: &[&str]) -> Setup {
        let server = EtcdServer::start_or_use(None).expect("start etcd");
        let spec = server.fresh_volume().expect("format");
        let a = Daemon::start(&format!("etcd:{spec}"), opts);
        let b = Daemon::start(&format!("etcd:{spec}"), opts);
        assert!(!a.stderr().contains("locks local"), "{}", a.stderr());
        Setup {
            _server: server,
            a,
            b,
        }
    }

    fn both(&self, rel: &str) -> (PathBuf, PathBuf) {
        (self.a.path(rel), self.b.path(rel))
    }
}

/// `flock -n FILE true` (flock(1)): its exit status (1: held elsewhere).
fn flock_n(file: &Path) -> i32 {
    Command::new("flock")
        .args(["-n", "-E", "1"])
        .arg(file)
        .arg("true")
        .status()
        .unwrap()
        .code()
        .unwrap_or(-1)
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

#[test]
fn flock_and_fcntl_exclude_across_mounts() {
    const T: &str = "flock_and_fcntl_exclude_across_mounts";
    if !fuse_or_skip(T) || !etcd_or_skip(T) || skip_if_off(T, "locks") {
        return;
    }
    exclusion(&Setup::new(&[]));
}

/// The same over FUSE over io_uring (both daemons), where the kernel
/// offers it: SETLKW parks a ring entry, its reply comes late through
/// the queue's mailbox, INTERRUPTs still come through /dev/fuse.
#[test]
fn flock_and_fcntl_exclude_across_mounts_over_io_uring() {
    const T: &str = "flock_and_fcntl_exclude_across_mounts_over_io_uring";
    if !fuse_or_skip(T) || !etcd_or_skip(T) || skip_if_off(T, "locks") {
        return;
    }
    let Some(_on) = dcache_fuse::testing::uring_or_skip(T) else {
        return;
    };
    let s = Setup::new(&["-o", "uring"]);
    for d in [&s.a, &s.b] {
        assert_over_io_uring(d);
    }
    exclusion(&s);
}

/// The daemon says it serves over io_uring (its log line may follow the
/// mount's appearance by a moment).
fn assert_over_io_uring(d: &Daemon) {
    let said = wait_until(Duration::from_secs(5), || {
        d.stderr().contains("over io_uring")
    });
    assert!(said.is_some(), "not over io_uring: {}", d.stderr());
}

fn exclusion(s: &Setup) {
    let (fa, fb) = s.both("lk");
    std::fs::write(&fa, b"").unwrap();
    assert!(wait_until(Duration::from_secs(5), || fb.exists()).is_some());

    // flock: a holder on A; `flock -n` fails through B as through A.
    let mut ha = Helper::start(&fa);
    assert_eq!(ha.ask("flock ex nb"), "R ok");
    if have("flock") {
        assert_eq!(flock_n(&fb), 1, "flock -n through B while A holds it");
        assert_eq!(flock_n(&fa), 1, "flock -n through A (one host)");
    } else {
        dcache_fuse::testing::skipped(format_args!("flock(1) part: no flock binary"));
    }
    let mut hb = Helper::start(&fb);
    assert_eq!(
        hb.ask("flock sh nb"),
        format!("R err {}", libc::EWOULDBLOCK)
    );
    // Blocked on B, woken when A unlocks.
    hb.send("flock ex");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    assert_eq!(ha.ask("flock un"), "R ok");
    let (mut hb, got) = answer_within(hb, Duration::from_secs(5));
    let (a, t1) = got.unwrap();
    assert_eq!(a, "R ok");
    println!(
        "flock blocked on B woken {:?} after A's unlock was sent",
        t1 - t0
    );
    assert_eq!(
        ha.ask("flock sh nb"),
        format!("R err {}", libc::EWOULDBLOCK)
    );
    assert_eq!(hb.ask("flock un"), "R ok");
    if have("flock") {
        assert_eq!(flock_n(&fa), 0, "free again");
    }

    // fcntl ranges: A holds 0..100 for writing, B is refused inside it,
    // may lock beside it, and F_GETLK through B names A's helper.
    assert_eq!(ha.ask("lk W 0 100"), "R ok");
    assert_eq!(hb.ask("lk W 50 10"), format!("R err {}", libc::EAGAIN));
    assert_eq!(hb.ask("lk R 99 1"), format!("R err {}", libc::EAGAIN));
    assert_eq!(hb.ask("lk W 100 10"), "R ok");
    assert_eq!(
        hb.ask("get W 0 0"),
        format!("R lock W 0 100 {}", ha.pid()),
        "F_GETLK through B reports A's holder"
    );
    assert_eq!(
        ha.ask("get R 100 5"),
        format!("R lock W 100 10 {}", hb.pid())
    );
    // A splits its lock; B takes the hole.
    assert_eq!(ha.ask("lk U 40 20"), "R ok");
    assert_eq!(hb.ask("lk W 40 20"), "R ok");
    assert_eq!(hb.ask("lk W 39 1"), format!("R err {}", libc::EAGAIN));
    // Readers share across mounts.
    assert_eq!(ha.ask("lk R 500 10"), "R ok");
    assert_eq!(hb.ask("lk R 505 10"), "R ok");
    assert_eq!(ha.ask("lk W 505 1"), format!("R err {}", libc::EAGAIN));

    // A blocked F_SETLKW on B, woken by A's unlock.
    hb.send("lkw W 0 40");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    assert_eq!(ha.ask("lk U 0 0"), "R ok");
    let (hb, got) = answer_within(hb, Duration::from_secs(5));
    let (a, t1) = got.unwrap();
    assert_eq!(a, "R ok");
    println!(
        "F_SETLKW blocked on B woken {:?} after A's unlock was sent",
        t1 - t0
    );

    // Round trips through the mount: lock + unlock of a free range.
    let mut rt = Vec::new();
    for i in 0..100 {
        let t = Instant::now();
        assert_eq!(ha.ask(&format!("lk W {} 1", 10_000 + i)), "R ok");
        assert_eq!(ha.ask(&format!("lk U {} 1", 10_000 + i)), "R ok");
        rt.push(t.elapsed());
    }
    rt.sort();
    println!(
        "lock + unlock through mount A (helper pipe included): p50 {:?}, p99 {:?}",
        rt[50], rt[98]
    );
    // A process that exits loses its POSIX locks (FLUSH at its close).
    drop(hb);
    assert_eq!(ha.ask("lk W 0 0"), "R ok");
}

#[test]
fn interrupted_and_killed_holders() {
    const T: &str = "interrupted_and_killed_holders";
    if !fuse_or_skip(T) || !etcd_or_skip(T) || skip_if_off(T, "locks") {
        return;
    }
    interrupts_and_kills(Setup::new(&[]));
}

/// The same over FUSE over io_uring, where the kernel offers it.
#[test]
fn interrupted_and_killed_holders_over_io_uring() {
    const T: &str = "interrupted_and_killed_holders_over_io_uring";
    if !fuse_or_skip(T) || !etcd_or_skip(T) || skip_if_off(T, "locks") {
        return;
    }
    let Some(_on) = dcache_fuse::testing::uring_or_skip(T) else {
        return;
    };
    let s = Setup::new(&["-o", "uring"]);
    assert_over_io_uring(&s.b);
    interrupts_and_kills(s);
}

fn interrupts_and_kills(s: Setup) {
    let (fa, fb) = s.both("lk");
    std::fs::write(&fa, b"").unwrap();
    assert!(wait_until(Duration::from_secs(5), || fb.exists()).is_some());
    let mut ha = Helper::start(&fa);
    assert_eq!(ha.ask("flock ex nb"), "R ok");
    assert_eq!(ha.ask("lk W 0 0"), "R ok");

    // Ctrl-C on a blocked flock(1): it ends promptly.
    if have("flock") {
        let mut c = Command::new("flock").arg(&fb).arg("true").spawn().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert!(c.try_wait().unwrap().is_none(), "flock waits");
        let t0 = Instant::now();
        // SAFETY: kill(2) of our own, unreaped child.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        let done = wait_until(Duration::from_secs(3), || c.try_wait().unwrap().is_some());
        let _ = c.kill();
        let st = c.wait().unwrap();
        let took = done.expect("SIGINT ends a blocked flock");
        println!(
            "a blocked flock(1) ended {:?} after SIGINT ({st})",
            t0.elapsed().min(took)
        );
    } else {
        dcache_fuse::testing::skipped(format_args!("the flock(1) SIGINT part: no flock binary"));
    }
    // A handler without SA_RESTART: the blocked call returns EINTR.
    let mut hb = Helper::start(&fb);
    let tid: i32 = hb.ask("tid")[2..].parse().unwrap();
    hb.send("flock ex");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    hb.signal_thread(tid, libc::SIGUSR2);
    let (mut hb, got) = answer_within(hb, Duration::from_secs(3));
    let (a, t1) = got.unwrap();
    assert_eq!(a, format!("R err {}", libc::EINTR));
    println!(
        "a blocked flock interrupted: EINTR {:?} after the signal",
        t1 - t0
    );

    // SIGKILL of A's daemon: its session lease expires and B's blocked
    // F_SETLKW gets the lock within the TTL (10 s) + 2 s.
    hb.send("lkw W 0 1");
    std::thread::sleep(Duration::from_millis(300));
    s.a.signal(libc::SIGKILL);
    let killed = Instant::now();
    let (_hb, got) = answer_within(hb, Duration::from_secs(12));
    let (a, t1) = got.expect("granted after A's lease expired");
    assert_eq!(a, "R ok");
    let took = t1 - killed;
    println!(
        "a SIGKILLed daemon's lock passed to mount B {took:?} after the kill (lease TTL 10 s)"
    );
    assert!(took <= Duration::from_secs(12), "{took:?}");
    drop(ha);
}

#[test]
fn sqlite_from_two_mounts() {
    const T: &str = "sqlite_from_two_mounts";
    if !fuse_or_skip(T) || !etcd_or_skip(T) || skip_if_off(T, "locks") {
        return;
    }
    if !have("sqlite3") {
        dcache_fuse::testing::skipped(format_args!("{T}: no sqlite3"));
        return;
    }
    let s = Setup::new(&[]);
    let (da, db) = s.both("db.sqlite");
    let sql = |db: &Path, script: &str| {
        let mut c = Command::new("sqlite3")
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        c.wait_with_output().unwrap()
    };
    let o = sql(
        &da,
        "PRAGMA journal_mode=DELETE;\nCREATE TABLE t(w TEXT, i INTEGER, PRIMARY KEY (w, i));\n",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(wait_until(Duration::from_secs(5), || db.exists()).is_some());
    const ROWS: usize = 150;
    let writer = |db: PathBuf, w: &'static str| {
        std::thread::spawn(move || {
            let mut script =
                String::from(".log stderr\n.timeout 60000\nPRAGMA journal_mode=DELETE;\n");
            for i in 0..ROWS {
                script.push_str(&format!("INSERT INTO t VALUES ('{w}', {i});\n"));
            }
            let mut c = Command::new("sqlite3")
                .arg(&db)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin
                .take()
                .unwrap()
                .write_all(script.as_bytes())
                .unwrap();
            let o = c.wait_with_output().unwrap();
            (
                o.status.success(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
    };
    let t0 = Instant::now();
    let (wa, wb) = (writer(da.clone(), "a"), writer(db.clone(), "b"));
    let (ra, rb) = (wa.join().unwrap(), wb.join().unwrap());
    let took = t0.elapsed();
    assert!(ra.0, "writer on A: {}", ra.1);
    assert!(rb.0, "writer on B: {}", rb.1);
    for (m, p) in [("A", &da), ("B", &db)] {
        let o = sql(
            p,
            "SELECT w, count(*), count(DISTINCT i), min(i), max(i) FROM t GROUP BY w;\nPRAGMA integrity_check;\n",
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            out,
            format!(
                "a|{ROWS}|{ROWS}|0|{}\nb|{ROWS}|{ROWS}|0|{}\nok\n",
                ROWS - 1,
                ROWS - 1
            ),
            "read through {m}"
        );
    }
    println!(
        "sqlite3: {} rows inserted by two writers on two mounts in {took:?}, every row there, integrity_check ok",
        2 * ROWS
    );
}
