//! loom models of rcu-walk validation (run with `RUSTFLAGS="--cfg loom"
//! cargo test --release --lib loom_walk`): one lockless walker against one
//! rename or unlink. The walker may give up (fall back to ref-walk), but
//! when it answers, the answer must be one that was true at some instant
//! of its walk; an answer from before a change that had completed when
//! the walk started is a bug. And rcu-walk must answer in some
//! interleavings (a walker that always gave up would pass the rest).

use std::sync::Arc as StdArc;

use super::{At, Config, StatMode, Vfs};
use crate::errno::Errno;
use crate::fs::memfs::MemFs;
use crate::fs::RenameFlags;
use crate::sync::{thread, Arc, AtomicBool, Ordering};

fn setup() -> (Arc<Vfs>, u64) {
    let fs = StdArc::new(MemFs::new());
    fs.mkdir_p("p", 0o755).unwrap();
    fs.write_file("p/f", b"x").unwrap();
    let vfs = Vfs::with_config(
        fs,
        Config {
            capacity: 16,
            ..Config::default()
        },
    )
    .unwrap();
    // Warm the cache: p, p/f, and a negative p/g.
    let f = vfs.as_root().stat(At::Root, "p/f").unwrap().ino;
    assert_eq!(vfs.as_root().stat(At::Root, "p/g"), Err(Errno::ENOENT));
    (Arc::new(vfs), f)
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    // A rename takes the rename lock, the directories' i_rwsem and both
    // lockrefs, all modelled: one execution has more branch points than
    // loom's default 1,000.
    b.max_branches = b.max_branches.max(20_000);
    b
}

/// Walk `path` in rcu mode only.
fn rcu_ino(vfs: &Vfs, path: &str) -> Option<Result<u64, Errno>> {
    vfs.try_stat_rcu(
        At::Root,
        path.as_bytes(),
        true,
        StatMode::RefFree,
        super::root_cred(),
    )
    .map(|r| r.map(|a| a.ino))
}

/// One walker resolving `path` in rcu mode while another thread runs
/// `mutate`; `check` judges the walker's answer, given the inode of p/f and
/// whether `mutate` had finished before the walk started.
///
/// The walker may give up in any one interleaving, but a walk that gave up
/// in all of them would pass every check while proving nothing: some
/// interleavings must be answered by rcu-walk itself.
fn walk_vs(mutate: fn(&Vfs), path: &'static str, check: fn(Option<Result<u64, Errno>>, u64, bool)) {
    // std, not loom: a tally across the model's executions, outside them.
    let answered = StdArc::new(std::sync::atomic::AtomicUsize::new(0));
    let tally = answered.clone();
    builder().check(move || {
        let (vfs, f) = setup();
        let done = Arc::new(AtomicBool::new(false));
        let t = {
            let (vfs, done) = (vfs.clone(), done.clone());
            thread::spawn(move || {
                mutate(&vfs);
                done.store(true, Ordering::SeqCst);
            })
        };
        let after = done.load(Ordering::SeqCst);
        let r = rcu_ino(&vfs, path);
        if r.is_some() {
            tally.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        check(r, f, after);
        t.join().unwrap();
    });
    assert!(
        answered.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "rcu-walk gave up in every interleaving"
    );
}

fn rename_f_to_g(vfs: &Vfs) {
    vfs.as_root()
        .rename(At::Root, "p/f", At::Root, "p/g", RenameFlags::NONE)
        .unwrap();
}

/// p/f may resolve (to f) only if the change had not finished at the start.
fn old_name_gone(r: Option<Result<u64, Errno>>, f: u64, after: bool) {
    match r {
        Some(Ok(ino)) => {
            assert_eq!(ino, f);
            assert!(!after, "old name resolved after the change finished");
        }
        Some(Err(e)) => assert_eq!(e, Errno::ENOENT),
        None => {}
    }
}

#[test]
fn loom_walk_old_name_vs_rename() {
    walk_vs(rename_f_to_g, "p/f", old_name_gone);
}

#[test]
fn loom_walk_new_name_vs_rename() {
    walk_vs(rename_f_to_g, "p/g", |r, f, after| match r {
        Some(Ok(ino)) => assert_eq!(ino, f),
        Some(Err(e)) => {
            assert_eq!(e, Errno::ENOENT);
            assert!(!after, "new name missing after the rename finished");
        }
        None => {}
    });
}

#[test]
fn loom_walk_vs_unlink() {
    walk_vs(
        |vfs| vfs.as_root().unlink(At::Root, "p/f").unwrap(),
        "p/f",
        old_name_gone,
    );
}

#[test]
fn loom_walk_vs_create() {
    // p/g is a cached negative dentry that the create turns positive.
    walk_vs(
        |vfs| {
            vfs.as_root().create(At::Root, "p/g", 0o644).unwrap();
        },
        "p/g",
        |r, _f, after| {
            if let Some(Err(e)) = r {
                assert_eq!(e, Errno::ENOENT);
                assert!(!after, "stale negative entry seen after the create");
            }
        },
    );
}

#[test]
fn loom_walk_vs_directory_rename() {
    walk_vs(
        |vfs| {
            vfs.as_root()
                .rename(At::Root, "p", At::Root, "q", RenameFlags::NONE)
                .unwrap()
        },
        "p/f",
        old_name_gone,
    );
}
