//! A passthrough mount serving a tree of 100,000 files from a daemon whose
//! descriptor limit is 1024 and whose cache has its default size: every
//! file is created, then stat'ed and read twice (the kernel's caches
//! dropped before each pass). Never an EMFILE, and at every sample the
//! daemon holds at most 512 descriptors and 256 MiB of resident memory.
//!
//! Needs root (drop_caches, file handles) and FUSE; prints one SKIPPED line
//! otherwise. `DCACHE_SCALE_FILES=N` changes the file count.

mod fuse_common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuse_common::*;

const DIRS: usize = 100;
const FD_LIMIT: usize = 512;
const RSS_LIMIT_KIB: u64 = 256 * 1024;

fn file_count() -> usize {
    std::env::var("DCACHE_SCALE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// Descriptors and resident KiB of process `pid` now.
fn sample(pid: i32) -> Option<(usize, u64)> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((fds, rss))
}

/// Samples the daemon every 20 ms, keeping the maxima.
struct Sampler {
    stop: Arc<AtomicBool>,
    max_fds: Arc<AtomicU64>,
    max_rss: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: i32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let max_fds = Arc::new(AtomicU64::new(0));
        let max_rss = Arc::new(AtomicU64::new(0));
        let (s, f, r) = (stop.clone(), max_fds.clone(), max_rss.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Some((fds, rss)) = sample(pid) {
                    f.fetch_max(fds as u64, Ordering::SeqCst);
                    r.fetch_max(rss, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Sampler {
            stop,
            max_fds,
            max_rss,
            thread: Some(thread),
        }
    }

    fn maxima(&self) -> (u64, u64) {
        (
            self.max_fds.load(Ordering::SeqCst),
            self.max_rss.load(Ordering::SeqCst),
        )
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn content(i: usize) -> Vec<u8> {
    format!("file {i} of the scale test\n").into_bytes()
}

fn rel(i: usize) -> String {
    format!("d{:03}/f{i:06}", i % DIRS)
}

fn drop_caches() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop_caches");
}

/// Stat and read every file, checking size and content.
fn check_pass(mnt: &Path, n: usize) {
    for i in 0..n {
        let p = mnt.join(rel(i));
        let want = content(i);
        let md = std::fs::metadata(&p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()));
        assert_eq!(md.len(), want.len() as u64, "{}", p.display());
        let got = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        assert_eq!(got, want, "{}", p.display());
    }
}

#[test]
fn hundred_thousand_files_within_1024_descriptors() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        dcache_fuse::testing::skipped(format_args!(
            "fuse_scale: needs root (drop_caches, file handles)"
        ));
        return;
    }
    if !fuse_or_skip("fuse_scale") {
        dcache_fuse::testing::skipped(format_args!("fuse_scale: FUSE unusable here"));
        return;
    }
    let n = file_count();
    let src = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let spec = format!("passthrough:{}", src.path().display());
    let d = Daemon::start_limited(&spec, &[], mnt, dir, Some(1024));
    let sampler = Sampler::start(d.pid());
    let t0 = Instant::now();

    for k in 0..DIRS {
        std::fs::create_dir(d.path(&format!("d{k:03}"))).unwrap();
    }
    for i in 0..n {
        let p = d.path(&rel(i));
        std::fs::write(&p, content(i)).unwrap_or_else(|e| {
            panic!(
                "create {} (file {i}): {e}; daemon:\n{}",
                p.display(),
                d.stderr()
            )
        });
    }
    let created = t0.elapsed();
    drop_caches();
    check_pass(&d.mnt, n);
    let pass1 = t0.elapsed();
    drop_caches();
    check_pass(&d.mnt, n);
    let pass2 = t0.elapsed();
    // The host tree holds exactly what was written.
    assert_eq!(
        std::fs::read(src.path().join(rel(n - 1))).unwrap(),
        content(n - 1)
    );
    let usage = d.prune();
    let (fds, rss) = sampler.maxima();
    drop(sampler);
    println!(
        "fuse_scale: {n} files; created in {:.1} s, pass 1 at {:.1} s, pass 2 at {:.1} s; \
         daemon max {fds} descriptors, {} MiB resident; {usage}",
        created.as_secs_f64(),
        pass1.as_secs_f64(),
        pass2.as_secs_f64(),
        rss / 1024
    );
    let log = d.stderr();
    if let Some(l) = log.lines().find(|l| l.starts_with("dcache: usage")) {
        println!("{l}");
    }
    assert!(fds > 0, "no sample taken");
    assert!(fds <= FD_LIMIT as u64, "daemon held {fds} descriptors");
    assert!(rss <= RSS_LIMIT_KIB, "daemon resident {} MiB", rss / 1024);
    assert_clean_exit(d.kill_with(libc::SIGTERM));
}

/// `-o max_nodes=N`: however many names a walk makes the kernel hold, the
/// daemon asks it to drop entries until it holds about N again, so the
/// nodes (and the memory they pin) stay bounded. In-process mount of a
/// memfs tree of 5,000 files with a bound of 1,000.
#[test]
fn the_kernel_is_asked_to_drop_nodes_past_max_nodes() {
    if !fuse_or_skip("max_nodes") {
        dcache_fuse::testing::skipped(format_args!("max_nodes: FUSE unusable here"));
        return;
    }
    const FILES: usize = 5000;
    const MAX: usize = 1000;
    let fs = std::sync::Arc::new(dcache::fs::memfs::MemFs::new());
    for d in 0..10 {
        fs.mkdir_p(&format!("d{d}"), 0o755).unwrap();
        for f in 0..FILES / 10 {
            fs.write_file(&format!("d{d}/f{f}"), b"x").unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let done = in_process_watchdog(dir.path().to_path_buf(), Duration::from_secs(120));
    let opts = dcache_fuse::MountOptions::parse(&[format!("timeout=600,max_nodes={MAX}")]).unwrap();
    let m = dcache_fuse::mount(fs, dir.path(), &opts).expect("mount");
    let mut peak = 0;
    for d in 0..10 {
        for f in 0..FILES / 10 {
            let p = m.path().join(format!("d{d}/f{f}"));
            assert_eq!(std::fs::metadata(&p).unwrap().len(), 1);
            peak = peak.max(m.usage().kernel_nodes);
        }
    }
    // The forgets arrive asynchronously, and the bound is enforced when
    // nodes are handed out (at most one batch per 20 ms): go on looking up
    // names for a moment.
    let mut k = 0;
    let settled = wait_for(Duration::from_secs(5), || {
        k += 1;
        let _ = std::fs::metadata(m.path().join(format!("d{}/f{}", k % 10, k % 500)));
        m.usage().kernel_nodes <= MAX as u64
    });
    let now = m.usage();
    println!("max_nodes: peak {peak} nodes while walking {FILES} files; now {now}");
    assert!(settled, "the kernel still holds {} nodes", now.kernel_nodes);
    // Without the bound the kernel would hold every file it stat'ed.
    assert!(peak < (FILES / 2) as u64, "peak {peak}");
    m.unmount().expect("unmount");
    done.store(true, Ordering::SeqCst);
}
