//! The Vfs over memfs: every path rule with its errno, the cache behaviour
//! (hits do not reach the backend, misses are cached negatively), namespace
//! operations, and reference/allocation balance.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::fs::{Attr, FileSystem, FileType, Ino, RenameFlags};
use dcache::{At, Config, Errno, Vfs};

fn tree() -> (Arc<MemFs>, Vfs) {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("a/b/c", 0o755).unwrap();
    fs.write_file("a/b/c/file", b"hello").unwrap();
    fs.make_symlink("a/rel", "b/c/file").unwrap();
    fs.make_symlink("a/abs", "/a/b").unwrap();
    fs.make_symlink("a/loop1", "loop2").unwrap();
    fs.make_symlink("a/loop2", "loop1").unwrap();
    fs.make_symlink("a/dangling", "nowhere").unwrap();
    let vfs = Vfs::new(fs.clone()).unwrap();
    (fs, vfs)
}

fn err<T: std::fmt::Debug>(r: dcache::Result<T>) -> Errno {
    r.expect_err("expected an error")
}

#[test]
fn stat_walks_and_caches() {
    let (fs, vfs) = tree();
    let a = vfs.as_root().stat(At::Root, "a/b/c/file").unwrap();
    assert_eq!(a.kind, FileType::Regular);
    assert_eq!(a.size, 5);
    assert_eq!(a.ino, fs.resolve("a/b/c/file").unwrap());
    let c = vfs.counters();
    let lookups = c.backend_lookups();
    let walks = c.ref_walks();
    for _ in 0..10 {
        assert_eq!(vfs.as_root().stat(At::Root, "/a/b/c/file").unwrap(), a);
    }
    assert_eq!(
        c.backend_lookups(),
        lookups,
        "hits must not reach the backend"
    );
    assert_eq!(c.ref_walks(), walks, "cached paths resolve in rcu-walk");
    // The benchmark's lockref stat (`experiments` feature) agrees.
    #[cfg(feature = "experiments")]
    assert_eq!(
        vfs.as_root()
            .stat_with(At::Root, b"a/b/c/file", true, dcache::StatMode::LockRef)
            .unwrap(),
        a
    );
}

/// A walk that rcu mode cannot finish goes on with references from the
/// directory where rcu mode stopped: the cached components before it are
/// not walked again and never reach the backend.
#[test]
fn a_fallback_continues_where_rcu_mode_stopped() {
    let (_fs, vfs) = tree();
    let c = vfs.counters();
    let root = vfs.as_root();
    root.stat(At::Root, "a/b").unwrap();
    let (lookups, walks) = (c.backend_lookups(), c.ref_walks());
    assert_eq!(c.restarts(), 0);
    // a and a/b are cached; c and file are not.
    let st = root.stat(At::Root, "a/b/c/file").unwrap();
    assert_eq!(st.size, 5);
    assert_eq!(c.ref_walks() - walks, 1, "one walk went on in ref mode");
    assert_eq!(c.unlazied(), 2, "both from where rcu mode stood");
    assert_eq!(c.restarts(), 0);
    assert_eq!(
        c.backend_lookups() - lookups,
        2,
        "only c and file were asked"
    );
    // A symlink whose target is not cached yet stops rcu mode inside the
    // link: the walk goes on from there, with the rest of the path after it.
    let before = c.unlazied();
    assert_eq!(root.stat(At::Root, "a/rel").unwrap().ino, st.ino);
    assert_eq!(c.unlazied() - before, 1);
    assert_eq!(c.restarts(), 0);
    // Now everything is cached: rcu mode answers alone.
    let walks = c.ref_walks();
    assert_eq!(root.stat(At::Root, "a/rel").unwrap().ino, st.ino);
    assert_eq!(root.stat(At::Root, "a/abs/c/file").unwrap().ino, st.ino);
    assert_eq!(
        c.ref_walks(),
        walks + 1,
        "a/abs's target was not cached yet"
    );
    assert_eq!(root.stat(At::Root, "a/abs/c/file").unwrap().ino, st.ino);
    assert_eq!(c.ref_walks(), walks + 1);
    // A miss inside a cached symlink target: rcu mode follows the inode's
    // copy of the target and stops in it; the walk goes on from there with
    // a copy of the rest of the target (the inode's is only the section's).
    make_link_into_uncached(&vfs);
    let before = (c.unlazied(), c.restarts());
    assert_eq!(
        root.lstat(At::Root, "a/lnk").unwrap().kind,
        FileType::Symlink
    );
    assert_eq!(root.stat(At::Root, "a/lnk"), Err(Errno::ENOENT));
    // The target is cached now; "new" is a cached miss: rcu mode answers.
    let walks = c.ref_walks();
    assert_eq!(root.stat(At::Root, "a/lnk"), Err(Errno::ENOENT));
    assert_eq!(c.ref_walks(), walks);
    // Make "new" a name rcu mode has not seen: drop the cached miss.
    vfs.invalidate_entry(root.stat(At::Root, "a/b/c").unwrap().ino, b"new");
    assert_eq!(root.stat(At::Root, "a/lnk"), Err(Errno::ENOENT));
    assert_eq!(c.ref_walks(), walks + 1);
    assert!(c.unlazied() > before.0);
    assert_eq!(c.restarts(), before.1);
}

/// `a/lnk` -> `b/c/new` (a missing name under cached directories).
fn make_link_into_uncached(vfs: &Vfs) {
    vfs.as_root().symlink("b/c/new", At::Root, "a/lnk").unwrap();
}

#[test]
fn negative_dentries_answer_repeated_misses() {
    let (_fs, vfs) = tree();
    let c = vfs.counters();
    assert_eq!(
        err(vfs.as_root().stat(At::Root, "a/b/c/missing")),
        Errno::ENOENT
    );
    let lookups = c.backend_lookups();
    let walks = c.ref_walks();
    assert_eq!(c.negative(), 1);
    for _ in 0..10 {
        assert_eq!(
            err(vfs.as_root().stat(At::Root, "a/b/c/missing")),
            Errno::ENOENT
        );
    }
    assert_eq!(c.backend_lookups(), lookups);
    assert_eq!(
        c.ref_walks(),
        walks,
        "a cached miss is answered by rcu-walk"
    );
    // Creating the name turns the negative dentry positive; no stale miss.
    vfs.as_root()
        .create(At::Root, "a/b/c/missing", 0o644)
        .unwrap();
    assert_eq!(c.negative(), 0);
    assert_eq!(
        vfs.as_root().stat(At::Root, "a/b/c/missing").unwrap().kind,
        FileType::Regular
    );
    // Missing in the middle of a path.
    assert_eq!(err(vfs.as_root().stat(At::Root, "a/nope/c")), Errno::ENOENT);
}

#[test]
fn dot_and_dotdot() {
    let (_fs, vfs) = tree();
    let file = vfs.as_root().stat(At::Root, "a/b/c/file").unwrap();
    assert_eq!(
        vfs.as_root().stat(At::Root, "a/./b/../b/c/./file").unwrap(),
        file
    );
    assert_eq!(
        vfs.as_root().stat(At::Root, "../../../a/b/c/file").unwrap(),
        file
    );
    assert_eq!(
        vfs.as_root().stat(At::Root, "/..").unwrap().ino,
        vfs.as_root().stat(At::Root, "/").unwrap().ino
    );
    let root = vfs.as_root().stat(At::Root, ".").unwrap();
    assert_eq!(root.kind, FileType::Directory);
    // `..` through a file is ENOTDIR.
    assert_eq!(
        err(vfs.as_root().stat(At::Root, "a/b/c/file/..")),
        Errno::ENOTDIR
    );
}

#[test]
fn symlinks() {
    let (_fs, vfs) = tree();
    let file = vfs.as_root().stat(At::Root, "a/b/c/file").unwrap();
    assert_eq!(vfs.as_root().stat(At::Root, "a/rel").unwrap(), file);
    // Twice: the second time the target is cached and rcu-walk follows it.
    assert_eq!(vfs.as_root().stat(At::Root, "a/rel").unwrap(), file);
    assert_eq!(
        vfs.as_root().lstat(At::Root, "a/rel").unwrap().kind,
        FileType::Symlink
    );
    assert_eq!(vfs.as_root().stat(At::Root, "a/abs/c/file").unwrap(), file);
    assert_eq!(vfs.as_root().stat(At::Root, "a/abs/c/file").unwrap(), file);
    assert_eq!(err(vfs.as_root().stat(At::Root, "a/loop1")), Errno::ELOOP);
    assert_eq!(err(vfs.as_root().stat(At::Root, "a/loop1")), Errno::ELOOP);
    assert_eq!(
        vfs.as_root().lstat(At::Root, "a/loop1").unwrap().kind,
        FileType::Symlink
    );
    assert_eq!(
        err(vfs.as_root().stat(At::Root, "a/dangling")),
        Errno::ENOENT
    );
    assert_eq!(
        vfs.as_root().readlink(At::Root, "a/rel").unwrap(),
        b"b/c/file"
    );
    assert_eq!(err(vfs.as_root().readlink(At::Root, "a/b")), Errno::EINVAL);
    // A trailing slash follows a final symlink to a directory.
    assert_eq!(
        vfs.as_root().lstat(At::Root, "a/abs/").unwrap().kind,
        FileType::Directory
    );
    // A chain of 40 links resolves; 41 is ELOOP.
    let fs = Arc::new(MemFs::new());
    fs.write_file("target", b"x").unwrap();
    fs.make_symlink("l0", "target").unwrap();
    for i in 1..=40 {
        fs.make_symlink(&format!("l{i}"), &format!("l{}", i - 1))
            .unwrap();
    }
    let v = Vfs::new(fs).unwrap();
    assert!(v.as_root().stat(At::Root, "l39").is_ok());
    assert_eq!(err(v.as_root().stat(At::Root, "l40")), Errno::ELOOP);
}

#[test]
fn bad_paths_give_posix_errnos() {
    let (_fs, vfs) = tree();
    assert_eq!(err(vfs.as_root().stat(At::Root, "")), Errno::ENOENT);
    assert_eq!(
        err(vfs.as_root().stat(At::Root, b"a/b\0/c".as_slice())),
        Errno::EINVAL
    );
    let long = "x".repeat(256);
    assert_eq!(
        err(vfs.as_root().stat(At::Root, format!("a/{long}"))),
        Errno::ENAMETOOLONG
    );
    let ok255 = "y".repeat(255);
    assert_eq!(
        err(vfs.as_root().stat(At::Root, format!("a/{ok255}"))),
        Errno::ENOENT
    );
    let deep = "a/".repeat(2048);
    assert_eq!(err(vfs.as_root().stat(At::Root, deep)), Errno::ENAMETOOLONG);
    assert_eq!(
        err(vfs.as_root().stat(At::Root, "a/b/c/file/")),
        Errno::ENOTDIR
    );
    assert_eq!(
        err(vfs.as_root().stat(At::Root, "a/b/c/file/x")),
        Errno::ENOTDIR
    );
    assert_eq!(
        vfs.as_root().stat(At::Root, "a/b/").unwrap().kind,
        FileType::Directory
    );
    assert_eq!(
        vfs.as_root().stat(At::Root, "a//b///c").unwrap().kind,
        FileType::Directory
    );
    assert_eq!(
        err(vfs.as_root().create(At::Root, format!("a/{long}"), 0o644)),
        Errno::ENAMETOOLONG
    );
}

#[test]
fn at_relative_calls() {
    let (_fs, vfs) = tree();
    let b = vfs.as_root().lookup(At::Root, "a/b", true).unwrap();
    let file = vfs.as_root().stat(At::Root, "a/b/c/file").unwrap();
    assert_eq!(vfs.as_root().stat(At::from(&b), "c/file").unwrap(), file);
    assert_eq!(
        vfs.as_root().stat(At::from(&b), "../b/c/file").unwrap(),
        file
    );
    assert_eq!(
        vfs.as_root().stat(At::from(&b), "/a/b/c/file").unwrap(),
        file
    );
    vfs.as_root().mkdir(At::from(&b), "new", 0o700).unwrap();
    assert_eq!(vfs.as_root().stat(At::Root, "a/b/new").unwrap().perm, 0o700);
}

#[test]
fn namespace_operations() {
    let (_fs, vfs) = tree();
    let d = vfs.as_root().mkdir(At::Root, "d", 0o755).unwrap();
    assert_eq!(d.kind(), Some(FileType::Directory));
    drop(d);
    assert_eq!(
        err(vfs.as_root().mkdir(At::Root, "d", 0o755)),
        Errno::EEXIST
    );
    assert_eq!(
        err(vfs.as_root().mkdir(At::Root, "nodir/x", 0o755)),
        Errno::ENOENT
    );
    assert_eq!(
        err(vfs.as_root().mkdir(At::Root, "a/b/c/file/x", 0o755)),
        Errno::ENOTDIR
    );
    vfs.as_root().create(At::Root, "d/f", 0o600).unwrap();
    assert_eq!(
        err(vfs.as_root().create(At::Root, "d/f", 0o600)),
        Errno::EEXIST
    );
    let root_nlink = vfs.as_root().stat(At::Root, "/").unwrap().nlink;
    // Hard link: both names see nlink 2.
    vfs.as_root()
        .link(At::Root, "d/f", At::Root, "d/g")
        .unwrap();
    assert_eq!(vfs.as_root().stat(At::Root, "d/f").unwrap().nlink, 2);
    assert_eq!(vfs.as_root().stat(At::Root, "d/g").unwrap().nlink, 2);
    assert_eq!(
        err(vfs.as_root().link(At::Root, "d", At::Root, "d2")),
        Errno::EPERM
    );
    vfs.as_root().unlink(At::Root, "d/g").unwrap();
    assert_eq!(vfs.as_root().stat(At::Root, "d/f").unwrap().nlink, 1);
    assert_eq!(err(vfs.as_root().stat(At::Root, "d/g")), Errno::ENOENT);
    assert_eq!(err(vfs.as_root().unlink(At::Root, "d")), Errno::EISDIR);
    assert_eq!(err(vfs.as_root().unlink(At::Root, "d/f/")), Errno::ENOTDIR);
    assert_eq!(err(vfs.as_root().rmdir(At::Root, "d/f")), Errno::ENOTDIR);
    assert_eq!(err(vfs.as_root().rmdir(At::Root, "d")), Errno::ENOTEMPTY);
    assert_eq!(err(vfs.as_root().rmdir(At::Root, "d/.")), Errno::EINVAL);
    // Rename a file across directories, then a directory.
    vfs.as_root()
        .rename(At::Root, "d/f", At::Root, "a/f2", RenameFlags::NONE)
        .unwrap();
    assert_eq!(err(vfs.as_root().stat(At::Root, "d/f")), Errno::ENOENT);
    assert_eq!(
        vfs.as_root().stat(At::Root, "a/f2").unwrap().kind,
        FileType::Regular
    );
    vfs.as_root()
        .rename(At::Root, "a/b", At::Root, "d/bb", RenameFlags::NONE)
        .unwrap();
    assert_eq!(vfs.as_root().stat(At::Root, "d/bb/c/file").unwrap().size, 5);
    assert_eq!(
        err(vfs.as_root().stat(At::Root, "a/b/c/file")),
        Errno::ENOENT
    );
    assert_eq!(
        err(vfs
            .as_root()
            .rename(At::Root, "d", At::Root, "d/bb/inside", RenameFlags::NONE)),
        Errno::EINVAL
    );
    // NOREPLACE and EXCHANGE.
    vfs.as_root().create(At::Root, "x", 0o644).unwrap();
    vfs.as_root().mkdir(At::Root, "y", 0o755).unwrap();
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert_eq!(
        err(vfs
            .as_root()
            .rename(At::Root, "x", At::Root, "y", noreplace)),
        Errno::EEXIST
    );
    let exchange = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    vfs.as_root()
        .rename(At::Root, "x", At::Root, "y", exchange)
        .unwrap();
    assert_eq!(
        vfs.as_root().stat(At::Root, "x").unwrap().kind,
        FileType::Directory
    );
    assert_eq!(
        vfs.as_root().stat(At::Root, "y").unwrap().kind,
        FileType::Regular
    );
    assert_eq!(
        err(vfs
            .as_root()
            .rename(At::Root, "x", At::Root, "nothere", exchange)),
        Errno::ENOENT
    );
    // Replace an existing file.
    vfs.as_root().create(At::Root, "z", 0o644).unwrap();
    vfs.as_root()
        .rename(At::Root, "y", At::Root, "z", RenameFlags::NONE)
        .unwrap();
    assert_eq!(err(vfs.as_root().stat(At::Root, "y")), Errno::ENOENT);
    assert_eq!(
        vfs.as_root().stat(At::Root, "z").unwrap().kind,
        FileType::Regular
    );
    // Directories: rmdir of an empty one, root nlink follows.
    vfs.as_root().rmdir(At::Root, "x").unwrap();
    assert_eq!(err(vfs.as_root().stat(At::Root, "x")), Errno::ENOENT);
    assert_eq!(vfs.as_root().stat(At::Root, "/").unwrap().nlink, root_nlink);
}

#[test]
fn long_names_survive_renames() {
    let (_fs, vfs) = tree();
    let l1 = "L".repeat(100);
    let l2 = "M".repeat(255);
    vfs.as_root().create(At::Root, &l1, 0o644).unwrap();
    assert!(vfs.as_root().stat(At::Root, &l1).is_ok());
    vfs.as_root()
        .rename(At::Root, &l1, At::Root, &l2, RenameFlags::NONE)
        .unwrap();
    assert!(vfs.as_root().stat(At::Root, &l2).is_ok());
    assert_eq!(err(vfs.as_root().stat(At::Root, &l1)), Errno::ENOENT);
    vfs.as_root()
        .rename(At::Root, &l2, At::Root, "short", RenameFlags::NONE)
        .unwrap();
    assert!(vfs.as_root().stat(At::Root, "short").is_ok());
    assert_eq!(err(vfs.as_root().stat(At::Root, &l2)), Errno::ENOENT);
    let d = vfs.as_root().lookup(At::Root, "short", false).unwrap();
    assert_eq!(d.name(), b"short");
}

#[test]
fn open_read_write_readdir() {
    let (_fs, vfs) = tree();
    let f = vfs
        .as_root()
        .open(At::Root, "a/new", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    assert_eq!(f.write(0, b"data!").unwrap(), 5);
    let mut buf = [0u8; 16];
    assert_eq!(f.read(0, &mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"data!");
    f.close().unwrap();
    assert_eq!(vfs.as_root().stat(At::Root, "a/new").unwrap().size, 5);
    assert_eq!(
        err(vfs.as_root().open(
            At::Root,
            "a/new",
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o644
        )),
        Errno::EEXIST
    );
    assert_eq!(
        err(vfs.as_root().open(At::Root, "a/b", libc::O_WRONLY, 0)),
        Errno::EISDIR
    );
    assert_eq!(
        err(vfs.as_root().open(At::Root, "a/new", libc::O_DIRECTORY, 0)),
        Errno::ENOTDIR
    );
    assert_eq!(
        err(vfs.as_root().open(At::Root, "a/rel", libc::O_NOFOLLOW, 0)),
        Errno::ELOOP
    );
    let f = vfs
        .as_root()
        .open(At::Root, "a/new", libc::O_WRONLY | libc::O_TRUNC, 0)
        .unwrap();
    drop(f);
    assert_eq!(vfs.as_root().stat(At::Root, "a/new").unwrap().size, 0);
    let mut names = Vec::new();
    vfs.as_root()
        .readdir(At::Root, "a", 0, &mut |e| {
            names.push(String::from_utf8(e.name).unwrap());
            true
        })
        .unwrap();
    for n in [".", "..", "b", "rel", "abs", "new"] {
        assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
    }
    assert_eq!(
        err(vfs.as_root().readdir(At::Root, "a/rel", 0, &mut |_| true)),
        Errno::ENOTDIR
    );
}

#[test]
fn references_balance_and_drop_frees_everything() {
    let (_fs, vfs) = tree();
    let c = vfs.counters();
    let d = vfs.as_root().lookup(At::Root, "a/b/c/file", true).unwrap();
    assert_eq!(d.count(), 1);
    let d2 = d.clone();
    assert_eq!(d.count(), 2);
    drop(d2);
    assert_eq!(d.count(), 1);
    drop(d);
    for p in ["a/b/c/file", "a/rel", "a/x/y", "a/loop1", "a/abs/c"] {
        let _ = vfs.as_root().stat(At::Root, p);
        let _ = vfs.as_root().lookup(At::Root, p, true);
    }
    vfs.as_root().create(At::Root, "a/t", 0o644).unwrap();
    vfs.as_root()
        .rename(At::Root, "a/t", At::Root, "a/u", RenameFlags::NONE)
        .unwrap();
    vfs.as_root().unlink(At::Root, "a/u").unwrap();
    // The leaf has no users: count 0; its directory is pinned by children.
    let leaf = vfs.as_root().lookup(At::Root, "a/b/c/file", true).unwrap();
    assert_eq!(leaf.count(), 1);
    drop(leaf);
    assert!(c.dentries() > 5);
    assert!(c.inodes() > 3);
    drop(vfs);
    assert_eq!(c.dentries(), 0, "every dentry freed");
    assert_eq!(c.allocated(), 0, "every dentry's memory freed");
    assert_eq!(c.inodes(), 0, "every inode freed");
}

#[test]
fn shrink_reclaims_negatives_first_and_bounds_them() {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("d", 0o755).unwrap();
    fs.write_file("d/keep", b"").unwrap();
    let cfg = Config {
        max_negative: 32,
        ..Config::default()
    };
    let vfs = Vfs::with_config(fs, cfg).unwrap();
    let c = vfs.counters();
    vfs.as_root().stat(At::Root, "d/keep").unwrap();
    for i in 0..500 {
        assert_eq!(
            err(vfs.as_root().stat(At::Root, format!("d/miss{i}"))),
            Errno::ENOENT
        );
    }
    assert!(
        c.negative() <= 32 + 64,
        "negatives bounded: {}",
        c.negative()
    );
    let before = c.dentries();
    let freed = vfs.shrink(10_000);
    assert!(freed > 0);
    assert!(c.dentries() < before);
    assert_eq!(c.negative(), 0);
    // Still correct after shrinking.
    assert_eq!(
        vfs.as_root().stat(At::Root, "d/keep").unwrap().kind,
        FileType::Regular
    );
    assert_eq!(err(vfs.as_root().stat(At::Root, "d/miss1")), Errno::ENOENT);
    drop(vfs);
    assert_eq!(c.dentries(), 0);
}

/// A backend that fails lookups of one name with EIO.
struct Faulty {
    inner: MemFs,
    fail: &'static [u8],
    hits: AtomicUsize,
}

impl FileSystem for Faulty {
    fn root(&self) -> Ino {
        self.inner.root()
    }
    fn lookup(&self, dir: Ino, name: &[u8]) -> dcache::Result<Option<Attr>> {
        if name == self.fail {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Err(Errno::EIO);
        }
        self.inner.lookup(dir, name)
    }
    fn getattr(&self, ino: Ino) -> dcache::Result<Attr> {
        self.inner.getattr(ino)
    }
}

#[test]
fn backend_errors_mid_walk_keep_counts_balanced() {
    let inner = MemFs::new();
    inner.mkdir_p("a/bad/c", 0o755).unwrap();
    let fs = Arc::new(Faulty {
        inner,
        fail: b"bad",
        hits: AtomicUsize::new(0),
    });
    let vfs = Vfs::new(fs.clone()).unwrap();
    let c = vfs.counters();
    for _ in 0..3 {
        assert_eq!(err(vfs.as_root().stat(At::Root, "a/bad/c")), Errno::EIO);
        assert_eq!(
            err(vfs.as_root().lookup(At::Root, "a/bad/c", true)),
            Errno::EIO
        );
    }
    // Errors are not cached: each walk asked the backend again.
    assert_eq!(fs.hits.load(Ordering::Relaxed), 6);
    let a = vfs.as_root().lookup(At::Root, "a", true).unwrap();
    assert_eq!(a.count(), 1, "no reference leaked on the error path");
    drop(a);
    drop(vfs);
    assert_eq!(c.dentries(), 0);
}

/// Every name length, inline and out of line, resolves in rcu-walk once
/// cached (a regression test: a word-packing bug once made 8-byte names
/// miss the lockless path and fall back on every lookup).
#[test]
fn every_name_length_hits_in_rcu_walk() {
    let fs = Arc::new(MemFs::new());
    let names: Vec<String> = (1..=70).map(|n| "n".repeat(n - 1) + "z").collect();
    fs.mkdir_p("d", 0o755).unwrap();
    for n in &names {
        fs.write_file(&format!("d/{n}"), b"").unwrap();
    }
    let vfs = Vfs::new(fs).unwrap();
    let c = vfs.counters();
    for n in &names {
        let p = format!("d/{n}");
        let m = format!("d/{n}.missing");
        vfs.as_root().stat(At::Root, &p).unwrap();
        assert_eq!(err(vfs.as_root().stat(At::Root, &m)), Errno::ENOENT);
        let walks = c.ref_walks();
        vfs.as_root().stat(At::Root, &p).unwrap();
        assert_eq!(err(vfs.as_root().stat(At::Root, &m)), Errno::ENOENT);
        assert_eq!(c.ref_walks(), walks, "name of {} bytes fell back", n.len());
    }
}

#[test]
fn a_directory_replaced_with_names_cached_under_it_is_freed_at_drop() {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("a", 0o755).unwrap();
    fs.mkdir_p("b", 0o755).unwrap();
    let vfs = Vfs::new(fs).unwrap();
    // A cached miss under b pins b's dentry...
    assert_eq!(
        vfs.as_root().stat(At::Root, "b/nope").unwrap_err(),
        Errno::ENOENT
    );
    let held = vfs.as_root().lookup(At::Root, "b", true).unwrap();
    // ...which a rename over it unhashes while it is held.
    vfs.as_root()
        .rename(At::Root, "a", At::Root, "b", RenameFlags::NONE)
        .unwrap();
    drop(held);
    let c = vfs.counters();
    drop(vfs);
    assert_eq!((c.dentries(), c.inodes(), c.allocated()), (0, 0, 0));
}

/// `open(O_CREAT)` without `O_EXCL` of a name another host made after
/// this Vfs cached it as missing (the backend's create says EEXIST) opens
/// the file the other host made, as openat(2) on one host does; with
/// `O_EXCL` it is EEXIST. (MemFs stands in for a shared backend: its
/// `write_file` is the other host, unseen by the Vfs's negative entry.)
#[test]
fn a_create_without_o_excl_opens_a_name_another_host_made() {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("d", 0o755).unwrap();
    let vfs = Vfs::new(fs.clone()).unwrap();
    let c = vfs.counters();
    for (name, excl) in [("d/n", false), ("d/x", true)] {
        assert_eq!(err(vfs.as_root().stat(At::Root, name)), Errno::ENOENT);
        fs.write_file(name, b"theirs").unwrap();
        let flags = libc::O_CREAT | libc::O_RDWR | if excl { libc::O_EXCL } else { 0 };
        let r = vfs.as_root().open(At::Root, name, flags, 0o644);
        if excl {
            assert_eq!(err(r), Errno::EEXIST);
            continue;
        }
        let f = r.expect("opens the file the other host made");
        let mut buf = [0u8; 16];
        let n = f.read(0, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"theirs");
        drop(f);
        assert_eq!(vfs.as_root().stat(At::Root, name).unwrap().size, 6);
    }
    drop(vfs);
    assert_eq!(c.dentries(), 0, "the stale negative entries were freed");
}
