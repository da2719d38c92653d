//! Handles of one `Vfs` handed to another: every public handle that carries
//! a pointer (an `At::Dir`, a `DentryRef`, a read section's walk, an
//! invalidator) crossed between two caches over memfs. Each crossing must
//! be answered with a clean errno (EXDEV), never act on the other tree, and
//! leave every count balanced once both caches are dropped.
//!
//! Each case runs in a child process (this test binary again, with the case
//! named in the environment), so a crash or an abort in one is reported as
//! that case's failure instead of killing the run. Under miri, where no
//! process can be spawned, each runs in-process (miri then checks it for
//! undefined behaviour).

use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::{oflags, At, Cred, Errno, RenameFlags, SetAttr, Vfs};

static ROOT: Cred = Cred::ROOT;

/// Two caches: A has `d/f` and the symlink `l`; B has `d/x/y/f`.
struct Pair {
    a: Vfs,
    b: Vfs,
}

fn pair() -> Pair {
    let fa = Arc::new(MemFs::with_root(0o755, 0, 0));
    fa.mkdir_p("d", 0o755).unwrap();
    fa.write_file("d/f", b"from A").unwrap();
    let fb = Arc::new(MemFs::with_root(0o755, 0, 0));
    fb.mkdir_p("d/x/y", 0o755).unwrap();
    fb.write_file("d/x/y/f", b"from B").unwrap();
    let a = Vfs::new(fa).unwrap();
    let b = Vfs::new(fb).unwrap();
    a.as_root().symlink("d/f", At::Root, "l").unwrap();
    Pair { a, b }
}

/// Run `body` on a fresh pair, then drop everything and check that both
/// caches freed every dentry and inode.
fn check(body: impl FnOnce(&Vfs, &Vfs)) {
    let p = pair();
    let (ca, cb) = (p.a.counters(), p.b.counters());
    body(&p.a, &p.b);
    // Both trees are untouched by the crossing.
    assert_eq!(p.b.as_root().stat(At::Root, "d/x/y/f").unwrap().size, 6);
    assert_eq!(p.a.as_root().stat(At::Root, "d/f").unwrap().size, 6);
    assert_eq!(p.b.as_root().stat(At::Root, "d/f"), Err(Errno::ENOENT));
    drop(p);
    for c in [ca, cb] {
        assert_eq!(c.dentries(), 0, "dentries left");
        assert_eq!(c.inodes(), 0, "inodes left");
        assert_eq!(c.allocated(), 0, "dentry memory left");
    }
}

const CHILD_ENV: &str = "DCACHE_CROSS_VFS_CASE";

/// Run case `name` in a child process (or in-process under miri, or when
/// this process is that child).
fn isolated(name: &str, body: impl FnOnce(&Vfs, &Vfs)) {
    if cfg!(miri) || std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        check(body);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, name)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "crossing {name} failed in its child process ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

macro_rules! crossing {
    ($name:ident, |$a:ident, $b:ident| $body:block) => {
        #[test]
        fn $name() {
            isolated(stringify!($name), |$a: &Vfs, $b: &Vfs| $body);
        }
    };
}

// --- an `At::Dir` of A given to B's path calls.

crossing!(at_dir_stat, |a, b| {
    let d = a.as_root().lookup(At::Root, "d", true).unwrap();
    assert_eq!(b.as_root().stat(At::from(&d), "x/y/f"), Err(Errno::EXDEV));
    assert_eq!(b.as_root().lstat(At::from(&d), "f"), Err(Errno::EXDEV));
    assert_eq!(b.as_root().stat(At::from(&d), "."), Err(Errno::EXDEV));
    assert_eq!(b.as_root().stat(At::from(&d), ".."), Err(Errno::EXDEV));
});

crossing!(at_dir_lookup, |a, b| {
    let d = a.as_root().lookup(At::Root, "d", true).unwrap();
    assert_eq!(
        b.as_root().lookup(At::from(&d), "x/y/f", true).unwrap_err(),
        Errno::EXDEV
    );
    // Twice: the first may have run rcu-walk, the second ref-walk after a
    // miss; neither may cache anything under A's dentry.
    assert_eq!(
        b.as_root().lookup(At::from(&d), "x", true).unwrap_err(),
        Errno::EXDEV
    );
    let c = b.as_cred(&ROOT);
    assert_eq!(
        c.access(At::from(&d), "x", libc::F_OK, 0),
        Err(Errno::EXDEV)
    );
});

crossing!(at_dir_create, |a, b| {
    let d = a.as_root().lookup(At::Root, "d", true).unwrap();
    let at = At::from(&d);
    assert_eq!(
        b.as_root().create(at, "n", 0o644).unwrap_err(),
        Errno::EXDEV
    );
    assert_eq!(b.as_root().mkdir(at, "n", 0o755).unwrap_err(), Errno::EXDEV);
    assert_eq!(b.as_root().symlink("t", at, "n").unwrap_err(), Errno::EXDEV);
    let flags = oflags::O_CREAT | oflags::O_RDWR;
    assert_eq!(
        b.as_root().open(at, "n", flags, 0o644).unwrap_err(),
        Errno::EXDEV
    );
    assert_eq!(
        b.as_root()
            .open(at, "x/y/f", oflags::O_RDONLY, 0)
            .unwrap_err(),
        Errno::EXDEV
    );
    let bob = Cred::user(1001, 1001, &[]);
    assert_eq!(
        b.as_cred(&bob).create(at, "n", 0o644).unwrap_err(),
        Errno::EXDEV
    );
});

crossing!(at_dir_remove_rename_link, |a, b| {
    let d = a.as_root().lookup(At::Root, "d", true).unwrap();
    let at = At::from(&d);
    assert_eq!(b.as_root().unlink(at, "f"), Err(Errno::EXDEV));
    assert_eq!(b.as_root().rmdir(at, "x"), Err(Errno::EXDEV));
    assert_eq!(
        b.as_root()
            .rename(at, "x", At::Root, "z", RenameFlags::NONE),
        Err(Errno::EXDEV)
    );
    assert_eq!(
        b.as_root()
            .rename(At::Root, "d", at, "z", RenameFlags::NONE),
        Err(Errno::EXDEV)
    );
    assert_eq!(
        b.as_root().link(at, "f", At::Root, "z").unwrap_err(),
        Errno::EXDEV
    );
    assert_eq!(
        b.as_root().link(At::Root, "d/x/y/f", at, "z").unwrap_err(),
        Errno::EXDEV
    );
    assert_eq!(b.as_root().readlink(at, "f").unwrap_err(), Errno::EXDEV);
    let set = SetAttr {
        perm: Some(0o700),
        ..SetAttr::default()
    };
    assert_eq!(b.as_root().setattr(at, "f", &set), Err(Errno::EXDEV));
    let mut n = 0;
    assert_eq!(
        b.as_root().readdir(at, ".", 0, &mut |_| {
            n += 1;
            false
        }),
        Err(Errno::EXDEV)
    );
    assert_eq!(n, 0);
});

// --- a `DentryRef` of A given to B's dentry calls.

crossing!(dentry_ref_calls, |a, b| {
    let f = a.as_root().lookup(At::Root, "d/f", true).unwrap();
    let d = a.as_root().lookup(At::Root, "d", true).unwrap();
    let l = a.as_root().lookup(At::Root, "l", false).unwrap();
    assert_eq!(
        b.as_root().open_dentry(&f, oflags::O_RDONLY).unwrap_err(),
        Errno::EXDEV
    );
    assert_eq!(
        b.as_cred(&ROOT)
            .open_dentry(&f, oflags::O_RDONLY)
            .unwrap_err(),
        Errno::EXDEV
    );
    assert_eq!(b.getattr_dentry(&f).unwrap_err(), Errno::EXDEV);
    let set = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(
        b.as_root().setattr_dentry(&f, &set, false),
        Err(Errno::EXDEV)
    );
    assert_eq!(
        b.as_cred(&ROOT).setattr_dentry(&f, &set, false),
        Err(Errno::EXDEV)
    );
    assert_eq!(
        b.as_root().link_dentry(&f, At::Root, "z").unwrap_err(),
        Errno::EXDEV
    );
    assert_eq!(
        b.as_cred(&ROOT)
            .link_dentry(&f, At::Root, b"z")
            .unwrap_err(),
        Errno::EXDEV
    );
    assert_eq!(b.readlink_dentry(&l).unwrap_err(), Errno::EXDEV);
    assert_eq!(
        b.readdir_dentry(&d, 0, &mut |_| false).unwrap_err(),
        Errno::EXDEV
    );
    // A's file is whole: nothing above truncated it through B.
    assert_eq!(a.as_root().stat(At::Root, "d/f").unwrap().size, 6);
    assert_eq!(b.as_root().stat(At::Root, "z"), Err(Errno::ENOENT));
});

// --- a read section of B walking from A's directory.

crossing!(read_section_walk, |a, b| {
    let d = a.as_root().lookup(At::Root, "d", true).unwrap();
    let mut s = b.read_section();
    assert_eq!(s.stat(&ROOT, At::from(&d), "x/y/f"), Err(Errno::EXDEV));
    assert_eq!(
        s.stat_with(&ROOT, At::from(&d), "f", false),
        Err(Errno::EXDEV)
    );
});

// --- an invalidator outliving its cache, and one cache's reports.

crossing!(invalidator_after_drop, |a, b| {
    let inv = b.invalidator();
    let ino = a.as_root().stat(At::Root, "d").unwrap().ino;
    // A's numbers reported to B name B's own inodes or nothing: B drops
    // what it cached under that number, A is untouched.
    inv.inode(ino, None);
    inv.entry(ino, b"f");
    assert_eq!(a.as_root().stat(At::Root, "d/f").unwrap().size, 6);
    // A report after its cache is gone finds nothing (no use after free).
    let pa = pair();
    let late = pa.a.invalidator();
    drop(pa);
    late.inode(1, None);
    late.entry(1, b"d");
});
