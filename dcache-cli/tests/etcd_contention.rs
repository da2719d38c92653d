//! The lock protocols people share files with, run from two mounts of one
//! volume at once (two `dcache mount` daemons: two etcd clients, as two
//! hosts run them), each operation's outcome recorded, and one checker:
//! every acknowledged append present exactly once and well formed,
//! every counter exactly its acknowledged increments.
//!
//! Protocols (each worker a thread with descriptors of its own, so its
//! `flock`s and OFD locks are its own, as a process's would be):
//! - `append`: `open(O_APPEND)`, `flock(LOCK_EX)`, write one line, `close`;
//! - `seek`: `open`, `flock`, write one line at `fstat`'s size, `close`;
//! - `counter-close`: read a number, write it plus one, `close` (which
//!   releases the `flock`);
//! - `counter-unlock`: the same with `flock(LOCK_UN)` before `close`;
//! - `counter-ofd`: the same under an OFD write lock (`F_OFD_SETLKW`),
//!   `F_UNLCK` before `close`.
//!
//! On an object-store volume (writes buffered until close, the case that
//! lost data) and on an inline one. In the middle of each run the etcd
//! member is paused (SIGSTOP) for 1.5 s: slow, not down, so no operation
//! may fail. `DCACHE_CONTENTION_SECS` sets each run's length (default 6 s:
//! the gate; the 2 minutes is `DCACHE_CONTENTION_SECS=120`).
//!
//! Needs /dev/fuse, the right to mount and `etcd` (else one SKIPPED line).

mod fuse_common;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dcache_bench::etcd::EtcdServer;
use fuse_common::{etcd_or_skip, fuse_or_skip, wait_for, Daemon};

const MOUNTS: usize = 2;
const WORKERS: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Append,
    Seek,
    CounterClose,
    CounterUnlock,
    CounterOfd,
}

impl Protocol {
    const ALL: [Protocol; 5] = [
        Protocol::Append,
        Protocol::Seek,
        Protocol::CounterClose,
        Protocol::CounterUnlock,
        Protocol::CounterOfd,
    ];

    fn counts(self) -> bool {
        !matches!(self, Protocol::Append | Protocol::Seek)
    }
}

fn os(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn flock(f: &File, op: libc::c_int) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor `f` owns.
    os(unsafe { libc::flock(f.as_raw_fd(), op) })
}

fn ofd(f: &File, kind: libc::c_int) -> std::io::Result<()> {
    // SAFETY: zeroed is a valid `struct flock`; fcntl reads it.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: F_OFD_SETLKW on a descriptor `f` owns, with a valid flock.
    os(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLKW, &l) })
}

/// `close(2)` with its answer (dropping a `File` ignores it).
fn close(f: File) -> std::io::Result<()> {
    // SAFETY: the descriptor is ours alone; it is closed once.
    os(unsafe { libc::close(f.into_raw_fd()) })
}

/// One operation of `p` on `path`; `line` is what an append writes.
fn once(p: Protocol, path: &Path, line: &str) -> std::io::Result<()> {
    match p {
        Protocol::Append => {
            let f = OpenOptions::new().append(true).open(path)?;
            flock(&f, libc::LOCK_EX)?;
            // One write(2): a line is never split.
            let n = (&f).write_vectored(&[std::io::IoSlice::new(line.as_bytes())])?;
            assert_eq!(n, line.len(), "a short write");
            close(f)
        }
        Protocol::Seek => {
            let f = OpenOptions::new().write(true).open(path)?;
            flock(&f, libc::LOCK_EX)?;
            let at = f.metadata()?.len();
            f.write_all_at(line.as_bytes(), at)?;
            close(f)
        }
        Protocol::CounterClose | Protocol::CounterUnlock | Protocol::CounterOfd => {
            let mut f = OpenOptions::new().read(true).write(true).open(path)?;
            if p == Protocol::CounterOfd {
                ofd(&f, libc::F_WRLCK)?;
            } else {
                flock(&f, libc::LOCK_EX)?;
            }
            let mut s = String::new();
            f.read_to_string(&mut s)?;
            let n: u64 = match s.trim() {
                "" => 0,
                t => t.parse().map_err(|_| {
                    std::io::Error::other(format!("a counter that does not parse: {s:?}"))
                })?,
            };
            f.write_all_at(format!("{:020}\n", n + 1).as_bytes(), 0)?;
            match p {
                Protocol::CounterUnlock => flock(&f, libc::LOCK_UN)?,
                Protocol::CounterOfd => ofd(&f, libc::F_UNLCK)?,
                _ => {}
            }
            close(f)
        }
    }
}

/// What one worker did: the lines (or increments) acknowledged, and the
/// failures with their errors.
#[derive(Default)]
struct History {
    acked: Vec<String>,
    failed: Vec<(String, String)>,
}

fn worker(p: Protocol, path: PathBuf, tag: String, stop: Arc<AtomicBool>) -> History {
    let mut h = History::default();
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let line = format!("{tag} {k:06}\n");
        match once(p, &path, &line) {
            Ok(()) => h.acked.push(line),
            Err(e) => h.failed.push((line, e.to_string())),
        }
        k += 1;
        // A mount that fails everything would only spin: enough to report.
        if h.failed.len() >= 20 {
            break;
        }
    }
    h
}

/// The checker: what survived against what was acknowledged.
fn check(p: Protocol, what: &str, contents: &str, histories: &[History]) -> Result<String, String> {
    let acked: Vec<&String> = histories.iter().flat_map(|h| &h.acked).collect();
    let failed: Vec<&(String, String)> = histories.iter().flat_map(|h| &h.failed).collect();
    if !failed.is_empty() {
        return Err(format!(
            "{what}: {} operations failed with no fault but a 1.5 s pause (slow is not down), e.g. {:?}",
            failed.len(),
            failed[0]
        ));
    }
    if p.counts() {
        let got: u64 = contents
            .trim()
            .parse()
            .map_err(|_| format!("{what}: the counter does not parse: {contents:?}"))?;
        if got != acked.len() as u64 {
            return Err(format!(
                "{what}: counter {got}, {} increments acknowledged",
                acked.len()
            ));
        }
        return Ok(format!(
            "{what}: counter {got} = {} acknowledged",
            acked.len()
        ));
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut malformed = 0;
    for l in contents.split_inclusive('\n') {
        if !l.ends_with('\n') || l.split(' ').count() != 2 {
            malformed += 1;
        }
        *seen.entry(l).or_default() += 1;
    }
    let missing = acked
        .iter()
        .filter(|l| !seen.contains_key(l.as_str()))
        .count();
    let doubled = seen.values().filter(|&&n| n > 1).count();
    if missing + doubled + malformed > 0 {
        return Err(format!(
            "{what}: {} acknowledged, {missing} missing, {doubled} twice, {malformed} malformed",
            acked.len()
        ));
    }
    Ok(format!(
        "{what}: {} lines acknowledged, all there once",
        acked.len()
    ))
}

fn run(server: &EtcdServer, volume: &str, secs: u64) -> Vec<Result<String, String>> {
    let data = tempfile::tempdir().expect("tempdir");
    let opts = dcache_etcd::FormatOptions {
        data: (volume == "objects").then(|| format!("file://{}", data.path().display())),
        ..Default::default()
    };
    let spec = server.fresh_volume_with(&opts).expect("format");
    let mounts: Vec<Daemon> = (0..MOUNTS)
        .map(|_| Daemon::start(&format!("etcd:{spec}"), &[]))
        .collect();
    let pid = server.pid().expect("our own etcd") as libc::pid_t;
    let mut out = Vec::new();
    for p in Protocol::ALL {
        let name = format!("{p:?}");
        std::fs::write(mounts[0].mnt.join(&name), b"").expect("create");
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (m, d) in mounts.iter().enumerate() {
            for w in 0..WORKERS {
                let (path, stop) = (d.mnt.join(&name), stop.clone());
                let tag = format!("m{m}w{w}");
                threads.push(std::thread::spawn(move || worker(p, path, tag, stop)));
            }
        }
        let t = Instant::now();
        // Slow, not down: the member pauses for 1.5 s mid-run.
        std::thread::sleep(Duration::from_secs(secs) / 2);
        // kill(2) itself: a forked kill(1) may wait on this process's own
        // threads, blocked in the mount while etcd is stopped.
        let kill = |sig: libc::c_int| {
            // SAFETY: kill(2) with a pid and a signal number.
            let r = unsafe { libc::kill(pid, sig) };
            assert_eq!(r, 0, "kill {sig} {pid}");
        };
        let stamp = || {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            format!("{}.{:03}", t.as_secs() % 86_400, t.subsec_millis())
        };
        println!(
            "{volume} {name}: started {:.1?} ago, etcd paused at {} (UTC seconds of the day)",
            t.elapsed(),
            stamp()
        );
        kill(libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(1500));
        kill(libc::SIGCONT);
        println!("{volume} {name}: etcd resumed at {}", stamp());
        std::thread::sleep(
            (Duration::from_secs(secs) / 2).saturating_sub(Duration::from_millis(1500)),
        );
        stop.store(true, Ordering::Relaxed);
        let histories: Vec<History> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let took = t.elapsed();
        // Read back through a mount whose cache saw none of it last:
        // the other mount, after a fresh open (close-to-open).
        let contents = std::fs::read_to_string(mounts[1].mnt.join(&name)).expect("read back");
        let r = check(
            p,
            &format!("{volume} {name} ({took:.1?})"),
            &contents,
            &histories,
        );
        println!("{}", r.as_ref().unwrap_or_else(|e| e));
        if r.is_err() {
            for (m, d) in mounts.iter().enumerate() {
                println!("--- mount {m}'s log:\n{}", d.stderr());
            }
        }
        out.push(r);
    }
    // SIGUSR1: the usage line, and the volume's failures by cause.
    for d in &mounts {
        d.signal(libc::SIGUSR1);
        let shown = wait_for(Duration::from_secs(10), || {
            d.stderr().contains("failures by cause: unavailable ")
        });
        out.push(if shown {
            Ok(format!("{volume}: SIGUSR1 reports failures by cause"))
        } else {
            Err(format!(
                "{volume}: no failure counts after SIGUSR1:\n{}",
                d.stderr()
            ))
        });
        let log = d.stderr();
        if log.contains("cause=") {
            println!("{volume}: the daemon logged:\n{log}");
        }
    }
    out
}

#[test]
fn two_mounts_keep_every_acknowledged_append_and_increment() {
    let t = "two_mounts_keep_every_acknowledged_append_and_increment";
    if !fuse_or_skip(t) || !etcd_or_skip(t) {
        return;
    }
    let secs = std::env::var("DCACHE_CONTENTION_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6u64)
        .max(3);
    // An etcd of this test's own: it is paused.
    let server = EtcdServer::start_or_use(None).expect("start etcd");
    let mut failures = Vec::new();
    for volume in ["objects", "inline"] {
        for r in run(&server, volume, secs) {
            if let Err(e) = r {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
