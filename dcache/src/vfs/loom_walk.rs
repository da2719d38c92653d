//! loom models of the path walk (run with `RUSTFLAGS="--cfg loom" cargo
//! test --release --lib loom_walk`): one walker against one rename, unlink
//! or create. Against renames and unlinks the walker runs rcu mode alone
//! (it may stop); against creates, the whole walk (rcu mode, then ref mode
//! where it stopped). Its
//! answer must be one that was true at some instant of its walk; an answer
//! from before a change that had completed when the walk started is a bug.
//! rcu mode must answer alone in some interleavings (a walk that always
//! fell back would pass the rest), and a fallback must go on where rcu mode
//! stopped, not from the start, when nothing changed under it. The
//! `loom_batch_` models run the batched walk (`AsCred::stat_many`) the same
//! way.

use std::sync::Arc as StdArc;

use super::namei::Walked;
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

/// How a walk was answered: by rcu mode alone, by ref mode going on where
/// rcu mode stopped, or by ref mode from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum By {
    Rcu,
    Unlazied,
    Restarted,
}

/// `stat` of `path` in rcu mode only (`None`: it stopped; the ref-mode
/// state it handed over is dropped, its reference with it). The models of
/// renames and unlinks check rcu mode's answers this way: a full walk would
/// take the modelled locks of ref mode too, and multiply their executions
/// past what CI can run.
fn rcu_ino(vfs: &Vfs, path: &str) -> (Result<u64, Errno>, By) {
    let g = vfs.sb().rcu.read_lock();
    let mut a = std::mem::MaybeUninit::uninit();
    let cred = super::root_cred();
    match vfs.stat_rcu_in(
        &g,
        cred,
        At::Root,
        path.as_bytes(),
        true,
        StatMode::RefFree,
        &mut a,
    ) {
        // SAFETY: an rcu-mode answer wrote the attributes.
        Walked::Rcu(()) => (Ok(unsafe { a.assume_init() }.ino), By::Rcu),
        Walked::Err(e) => (Err(e), By::Rcu),
        Walked::Unlazied(w) => {
            drop(g);
            drop(w);
            (Err(Errno::EAGAIN), By::Unlazied)
        }
    }
}

/// The walk counters before a call: how it was answered ([`Since::by`]).
struct Since {
    c: StdArc<super::Counters>,
    unlazied: usize,
    restarts: usize,
}

impl Since {
    fn now(vfs: &Vfs) -> Since {
        let c = vfs.counters();
        let (unlazied, restarts) = (c.unlazied(), c.restarts());
        Since {
            c,
            unlazied,
            restarts,
        }
    }

    /// Started over, went on in ref mode, or answered in rcu mode since.
    fn by(&self) -> By {
        if self.c.restarts() > self.restarts {
            By::Restarted
        } else if self.c.unlazied() > self.unlazied {
            By::Unlazied
        } else {
            By::Rcu
        }
    }
}

/// `stat` of `path`, and how it was answered. (The other thread's
/// namespace operation walks to its parent in ref mode, so `ref_walks` is
/// not this walk's alone; it neither unlazies nor restarts.)
fn stat_ino(vfs: &Vfs, path: &str) -> (Result<u64, Errno>, By) {
    let since = Since::now(vfs);
    let r = vfs.as_root().stat(At::Root, path).map(|a| a.ino);
    let by = since.by();
    (r, by)
}

/// One walker resolving `path` with `walk` while another thread runs
/// `mutate`; `check` judges the walker's answer (if it gave one), given the inode of p/f and whether `mutate`
/// had finished before the walk started. Returns how many executions were
/// answered each way.
fn walk_vs(
    walk: fn(&Vfs, &str) -> (Result<u64, Errno>, By),
    mutate: fn(&Vfs),
    path: &'static str,
    check: fn(Result<u64, Errno>, u64, bool),
) -> [usize; 3] {
    // std, not loom: a tally across the model's executions, outside them.
    let tally = StdArc::new(std::sync::Mutex::new([0usize; 3]));
    let t2 = tally.clone();
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
        let (r, by) = walk(&vfs, path);
        t2.lock().unwrap()[by as usize] += 1;
        if r != Err(Errno::EAGAIN) {
            check(r, f, after);
        }
        t.join().unwrap();
    });
    let t = *tally.lock().unwrap();
    t
}

/// rcu mode must answer alone in some executions: a walk that always fell
/// back would pass every check while proving nothing about rcu mode.
fn rcu_answered(t: [usize; 3]) {
    assert!(
        t[By::Rcu as usize] > 0,
        "rcu mode answered in no interleaving: {t:?}"
    );
}

fn rename_f_to_g(vfs: &Vfs) {
    vfs.as_root()
        .rename(At::Root, "p/f", At::Root, "p/g", RenameFlags::NONE)
        .unwrap();
}

/// p/f may resolve (to f) only if the change had not finished at the start.
fn old_name_gone(r: Result<u64, Errno>, f: u64, after: bool) {
    match r {
        Ok(ino) => {
            assert_eq!(ino, f);
            assert!(!after, "old name resolved after the change finished");
        }
        Err(e) => assert_eq!(e, Errno::ENOENT),
    }
}

#[test]
fn loom_walk_old_name_vs_rename() {
    rcu_answered(walk_vs(rcu_ino, rename_f_to_g, "p/f", old_name_gone));
}

#[test]
fn loom_walk_new_name_vs_rename() {
    rcu_answered(walk_vs(
        rcu_ino,
        rename_f_to_g,
        "p/g",
        |r, f, after| match r {
            Ok(ino) => assert_eq!(ino, f),
            Err(e) => {
                assert_eq!(e, Errno::ENOENT);
                assert!(!after, "new name missing after the rename finished");
            }
        },
    ));
}

#[test]
fn loom_walk_vs_unlink() {
    rcu_answered(walk_vs(
        rcu_ino,
        |vfs| vfs.as_root().unlink(At::Root, "p/f").unwrap(),
        "p/f",
        old_name_gone,
    ));
}

#[test]
fn loom_walk_vs_create() {
    // p/g is a cached negative dentry that the create turns positive.
    rcu_answered(walk_vs(
        rcu_ino,
        |vfs| {
            vfs.as_root().create(At::Root, "p/g", 0o644).unwrap();
        },
        "p/g",
        |r, _f, after| {
            if let Err(e) = r {
                assert_eq!(e, Errno::ENOENT);
                assert!(!after, "stale negative entry seen after the create");
            }
        },
    ));
}

#[test]
fn loom_walk_vs_directory_rename() {
    rcu_answered(walk_vs(
        rcu_ino,
        |vfs| {
            vfs.as_root()
                .rename(At::Root, "p", At::Root, "q", RenameFlags::NONE)
                .unwrap()
        },
        "p/f",
        old_name_gone,
    ));
}

/// p/h is not cached at all while another thread creates it: rcu mode
/// answers once the create is in the table; otherwise it stops at the miss
/// and the walk goes on in ref mode from p. (A walk that read p/h while the
/// create made it positive starts over: the name changed under it.)
#[test]
fn loom_walk_vs_create_of_an_uncached_name() {
    let t = walk_vs(
        stat_ino,
        |vfs| {
            vfs.as_root().create(At::Root, "p/h", 0o644).unwrap();
        },
        "p/h",
        |r, _f, after| {
            if let Err(e) = r {
                assert_eq!(e, Errno::ENOENT);
                assert!(!after, "p/h missing after its create finished");
            }
        },
    );
    rcu_answered(t);
    assert!(
        t[By::Unlazied as usize] > 0,
        "no walk went on from p: {t:?}"
    );
}

/// p/x is never cached, while another thread creates p/h in the same
/// directory (its lock, its table bucket, its attributes): rcu mode always
/// stops at the miss, and every walk goes on from p, where it stood; none
/// starts over, since nothing the walk stood on changed.
#[test]
fn loom_walk_fallback_continues_where_rcu_stopped() {
    let t = walk_vs(
        stat_ino,
        |vfs| {
            vfs.as_root().create(At::Root, "p/h", 0o644).unwrap();
        },
        "p/x",
        |r, _f, _after| assert_eq!(r, Err(Errno::ENOENT)),
    );
    assert_eq!(t[By::Rcu as usize], 0, "p/x was never cached: {t:?}");
    assert_eq!(t[By::Restarted as usize], 0, "a walk started over: {t:?}");
    assert!(t[By::Unlazied as usize] > 0, "{t:?}");
}

/// `stat_many` of `path` and of p/f (two lanes, interleaved: the second
/// lane's prefetch phases run between the first's), and how the batch was
/// answered; the first lane's answer is checked. The walk's checks are the
/// single walk's (`namei::step`, `RcuWalk::complete`, the unlazy), so
/// these models are about the batch's own part: several walks in one read
/// section, hints loaded from chains a writer is changing, lanes that stop
/// going on in ref mode after the section.
fn batch_ino(vfs: &Vfs, path: &str) -> (Result<u64, Errno>, By) {
    let since = Since::now(vfs);
    let mut out = [Err(Errno::EINVAL), Err(Errno::EINVAL)];
    vfs.as_root()
        .stat_many(At::Root, &[path, "p/f"], &mut out)
        .unwrap();
    let by = since.by();
    (out[0].map(|a| a.ino), by)
}

/// `lookup_many` of `path` and of p/f, as [`batch_ino`]: the first lane's
/// counted reference (a negative one answers ENOENT), given back at once.
fn lookup_many_ino(vfs: &Vfs, path: &str) -> (Result<u64, Errno>, By) {
    let since = Since::now(vfs);
    let mut out = [Err(Errno::EINVAL), Err(Errno::EINVAL)];
    vfs.as_root()
        .lookup_many(At::Root, &[path, "p/f"], false, &mut out)
        .unwrap();
    let by = since.by();
    let [first, _] = out;
    let r = first.and_then(|d| d.inode().map(|i| i.ino()).ok_or(Errno::ENOENT));
    (r, by)
}

/// A lookup's reference is taken inside the batch's read section, on a
/// dentry that a rename is moving: the old name resolves only before the
/// rename finished, and the reference is to the renamed file.
#[test]
fn loom_lookup_many_vs_rename() {
    rcu_answered(walk_vs(
        lookup_many_ino,
        rename_f_to_g,
        "p/f",
        old_name_gone,
    ));
}

#[test]
fn loom_batch_vs_unlink() {
    rcu_answered(walk_vs(
        batch_ino,
        |vfs| vfs.as_root().unlink(At::Root, "p/f").unwrap(),
        "p/f",
        old_name_gone,
    ));
}

#[test]
fn loom_batch_vs_create_of_an_uncached_name() {
    let t = walk_vs(
        batch_ino,
        |vfs| {
            vfs.as_root().create(At::Root, "p/h", 0o644).unwrap();
        },
        "p/h",
        |r, _f, after| {
            if let Err(e) = r {
                assert_eq!(e, Errno::ENOENT);
                assert!(!after, "p/h missing after its create finished");
            }
        },
    );
    assert!(
        t[By::Unlazied as usize] > 0,
        "no walk went on from p: {t:?}"
    );
}

/// A name of p's that falls in p/f's bucket (under loom a bucket is
/// chosen by the name alone): creating it appends it to a chain that
/// holds a file, behind that file (`Table::insert_unique` puts only
/// directories first).
fn a_name_behind_f() -> &'static str {
    static NAME: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    if let Some(name) = NAME.get() {
        return name;
    }
    // The table's atomics are loom's: found inside a (one-thread) model,
    // on the first call, which is outside the models that use it.
    loom::model(|| {
        NAME.get_or_init(name_behind_f);
    });
    NAME.get().expect("set by the model")
}

fn name_behind_f() -> &'static str {
    let table = crate::table::Table::with_capacity(16);
    let bucket = |n: &str| {
        table.bucket_for(std::ptr::null(), crate::dentry::name_hash(n.as_bytes())) as *const _
    };
    let f = bucket("f");
    let name = (0..10_000)
        .map(|i| format!("t{i}"))
        .find(|n| std::ptr::eq(bucket(n), f))
        .expect("no name shares p/f's bucket");
    Box::leak(format!("p/{name}").into_boxed_str())
}

/// A walk to a name being appended to a chain's tail, behind a cached
/// file: rcu mode answers once the create is in the table, and otherwise
/// stops at the miss and goes on from p; the name is never missing after
/// its create finished. And it was appended: the chain's head is still f.
#[test]
fn loom_walk_vs_create_at_a_chains_tail() {
    let path = a_name_behind_f();
    let t = walk_vs(
        stat_ino,
        |vfs| {
            vfs.as_root()
                .create(At::Root, a_name_behind_f(), 0o644)
                .unwrap();
        },
        path,
        |r, _f, after| {
            if let Err(e) = r {
                assert_eq!(e, Errno::ENOENT);
                assert!(!after, "the new name missing after its create finished");
            }
        },
    );
    rcu_answered(t);
    assert!(
        t[By::Unlazied as usize] > 0,
        "no walk went on from p: {t:?}"
    );
    // And the create appended: p/f is still first on the chain, the new
    // name behind it (one thread, so one execution).
    loom::model(move || {
        let (vfs, _) = setup();
        vfs.as_root().create(At::Root, path, 0o644).unwrap();
        let g = vfs.sb().rcu.read_lock();
        let p = vfs.as_root().lookup(At::Root, "p", true).unwrap();
        let b = vfs
            .sb()
            .table
            .bucket_for(p.dentry(), crate::dentry::name_hash(&path.as_bytes()[2..]));
        let head = vfs.sb().table.head_rcu(&g, b).expect("an empty chain");
        assert_eq!(head.name_rcu(&g), b"f");
        let next = head.hash_next_rcu(&g).expect("nothing behind p/f");
        assert_eq!(next.name_rcu(&g), &path.as_bytes()[2..]);
    });
}
