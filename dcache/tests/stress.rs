//! Concurrency stress: threads run random lookup, stat, create, unlink,
//! rename and readdir against one Vfs for a bounded time.
//!
//! Checked: a lookup never returns an inode for a name that did not hold it
//! at some instant during the call, and never says ENOENT for a name that
//! held one inode for the whole call; afterwards every reference count is
//! back to its baseline, shrinking frees every unused dentry, and dropping
//! the Vfs frees everything.
//!
//! Each mutator thread owns its names (so it can log their history without
//! races); every thread looks up every name. The history and the check
//! are the shared oracle's (`tests/oracle`): an operation's window is
//! [tick before, tick after].
//!
//! `DCACHE_STRESS_SECS` sets the duration (default 20).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dcache::fs::memfs::MemFs;
use dcache::{At, Errno, Vfs};

mod oracle;
use oracle::{Mutator, Oracle, Rng};

const DIRS: usize = 3;
const NAMES_PER_THREAD: usize = 6;
const MUTATORS: usize = 2;
const READERS: usize = 2;

fn name_of(thread: usize, dir: usize, i: usize) -> String {
    format!("d{dir}/t{thread}_{i}")
}

fn check_lookup(oracle: &Oracle, name: &str, t0: u64, t1: u64, r: dcache::Result<u64>) {
    oracle.settle(t1);
    match r {
        Ok(ino) => assert_eq!(
            oracle.lag(name, Some(ino), t0, t1),
            Some(0),
            "{name} resolved to ino {ino}, which never held it during [{t0}, {t1}]"
        ),
        Err(Errno::ENOENT) => assert_eq!(
            oracle.lag(name, None, t0, t1),
            Some(0),
            "{name} said ENOENT while it was held throughout [{t0}, {t1}]"
        ),
        Err(e) => panic!("{name}: unexpected error {e}"),
    }
}

#[test]
fn concurrent_namespace_stress() {
    let secs: u64 = std::env::var("DCACHE_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let fs = Arc::new(MemFs::new());
    for d in 0..DIRS {
        fs.mkdir_p(&format!("d{d}"), 0o755).unwrap();
    }
    let vfs = Vfs::new(fs.clone()).unwrap();
    let counters = vfs.counters();
    let oracle = Oracle::new(MUTATORS);
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let ops = AtomicU64::new(0);

    std::thread::scope(|s| {
        for t in 0..MUTATORS {
            let (vfs, oracle, stop, ops) = (&vfs, &oracle, &stop, &ops);
            s.spawn(move || {
                let mut rng = Rng(0x9E37_79B9 + t as u64 * 7919);
                let mut m = Mutator::new(oracle);
                let mut held_refs = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let name = name_of(t, rng.below(DIRS), rng.below(NAMES_PER_THREAD));
                    oracle.enter(t);
                    match rng.below(10) {
                        0..=2 => m.create(vfs, &name),
                        3..=4 => m.unlink(vfs, &name),
                        5..=6 => {
                            let to = name_of(t, rng.below(DIRS), rng.below(NAMES_PER_THREAD));
                            m.rename(vfs, &name, &to);
                        }
                        7 => {
                            // Hold a reference across later operations.
                            if let Ok(d) = vfs.as_root().lookup(At::Root, &name, false) {
                                held_refs.push(d);
                            }
                            if held_refs.len() > 4 {
                                held_refs.remove(0);
                            }
                        }
                        _ => {
                            let dir = format!("d{}", rng.below(DIRS));
                            let mut n = 0;
                            vfs.as_root()
                                .readdir(At::Root, &dir, 0, &mut |_| {
                                    n += 1;
                                    true
                                })
                                .unwrap();
                            assert!(n >= 2);
                        }
                    }
                    oracle.leave(t);
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                drop(held_refs);
            });
        }
        for r in 0..READERS {
            let (vfs, oracle, stop, ops) = (&vfs, &oracle, &stop, &ops);
            s.spawn(move || {
                let mut rng = Rng(0xDEAD_BEEF + r as u64);
                while !stop.load(Ordering::Relaxed) {
                    let name = name_of(
                        rng.below(MUTATORS),
                        rng.below(DIRS),
                        rng.below(NAMES_PER_THREAD),
                    );
                    let t0 = oracle.tick();
                    let res = match rng.below(3) {
                        0 => vfs.as_root().stat(At::Root, &name).map(|a| a.ino),
                        // The benchmark's lockref stat (`experiments`).
                        #[cfg(feature = "experiments")]
                        1 => vfs
                            .as_root()
                            .stat_with(At::Root, name.as_bytes(), true, dcache::StatMode::LockRef)
                            .map(|a| a.ino),
                        _ => vfs
                            .as_root()
                            .lookup(At::Root, &name, true)
                            .map(|d| d.ino().unwrap()),
                    };
                    let t1 = oracle.tick();
                    check_lookup(oracle, &name, t0, t1, res);
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(ops.load(Ordering::Relaxed) > 1000, "the stress ran");
    fs.check().unwrap();

    // Baseline: nobody holds references; every cached dentry is unused or
    // pinned only by cached children.
    for d in 0..DIRS {
        // Our reference plus one per cached child: never less than 1.
        let dir = vfs
            .as_root()
            .lookup(At::Root, format!("d{d}"), true)
            .unwrap();
        assert!(dir.count() >= 1);
    }
    vfs.shrink(usize::MAX);
    assert_eq!(
        counters.dentries(),
        1,
        "only the root is left after shrinking"
    );
    assert_eq!(counters.negative(), 0);
    assert_eq!(counters.unused(), 0);
    assert_eq!(vfs.root().count(), 2);
    drop(vfs);
    assert_eq!(counters.dentries(), 0);
    assert_eq!(counters.allocated(), 0);
    assert_eq!(counters.inodes(), 0);
}

/// A file that exists the whole time is never reported missing while a
/// sibling comes and goes and the shrinker kills unused dentries (the
/// file's among them) under the walkers. Regression: a walker that reached
/// a dentry through a chain link read before the dentry's removal sampled
/// its d_seq after the unhash, then saw the inode cleared by the kill with
/// no further d_seq change, and answered ENOENT.
#[test]
fn a_file_that_stays_is_never_missing_while_the_cache_shrinks() {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("open/deep", 0o755).unwrap();
    fs.write_file("open/deep/file", b"x").unwrap();
    let vfs = Arc::new(Vfs::new(fs).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (vfs, stop) = (vfs.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = vfs.as_root().create(At::Root, "open/deep/tmp", 0o644);
                let _ = vfs.as_root().unlink(At::Root, "open/deep/tmp");
                vfs.shrink(8);
            }
        })
    };
    let start = Instant::now();
    let (mut ok, mut bad) = (0u64, Vec::new());
    while start.elapsed() < Duration::from_secs(2) {
        for _ in 0..1000 {
            match vfs.as_root().stat(At::Root, "open/deep/file") {
                Ok(_) => ok += 1,
                Err(e) => bad.push(e),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    assert!(
        bad.is_empty(),
        "{} of {} stats failed: {:?}",
        bad.len(),
        ok,
        &bad[..bad.len().min(5)]
    );
}
