//! Changes made underneath a Vfs and reported through its invalidator.
//!
//! memfs never revalidates, so a change made on the backend directly (as
//! another writer would) stays invisible through the Vfs until it is
//! reported: each test first shows the stale answer, then the report, then
//! the fresh one, and that every count balances afterwards.

use std::sync::{Arc, Mutex, OnceLock};

use dcache::fs::memfs::MemFs;
use dcache::fs::{Attr, Ctx, FileSystem, Ino, RenameFlags, SetAttr};
use dcache::{At, Errno, Invalidation, Invalidator, Vfs};

fn setup() -> (Arc<MemFs>, Vfs, Ino) {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("d/sub", 0o755).unwrap();
    fs.write_file("d/f", b"hello").unwrap();
    let vfs = Vfs::new(fs.clone()).unwrap();
    let d = fs.resolve("d").unwrap();
    (fs, vfs, d)
}

/// Every dentry and inode is freed once the Vfs goes.
fn balanced(vfs: Vfs) {
    let c = vfs.counters();
    drop(vfs);
    assert_eq!((c.dentries(), c.inodes(), c.allocated()), (0, 0, 0));
}

#[test]
fn a_removed_name_is_stale_until_reported() {
    let (fs, vfs, d) = setup();
    assert!(vfs.as_root().stat(At::Root, "d/f").is_ok());
    fs.unlink(d, b"f").unwrap();
    // Cached: the Vfs cannot know yet.
    assert!(vfs.as_root().stat(At::Root, "d/f").is_ok());
    vfs.invalidate_entry(d, b"f");
    assert_eq!(
        vfs.as_root().stat(At::Root, "d/f").unwrap_err(),
        Errno::ENOENT
    );
    balanced(vfs);
}

#[test]
fn a_negative_entry_goes_when_the_name_appears() {
    let (fs, vfs, d) = setup();
    assert_eq!(
        vfs.as_root().stat(At::Root, "d/new").unwrap_err(),
        Errno::ENOENT
    );
    let a = fs.create(d, b"new", 0o600, Ctx::ROOT).unwrap();
    assert_eq!(
        vfs.as_root().stat(At::Root, "d/new").unwrap_err(),
        Errno::ENOENT
    );
    vfs.invalidator().entry(d, b"new");
    assert_eq!(vfs.as_root().stat(At::Root, "d/new").unwrap().ino, a.ino);
    balanced(vfs);
}

#[test]
fn a_rename_underneath_moves_both_names() {
    let (fs, vfs, d) = setup();
    let root = fs.root();
    let sub = vfs.as_root().stat(At::Root, "d/sub").unwrap();
    assert_eq!(
        vfs.as_root().stat(At::Root, "moved").unwrap_err(),
        Errno::ENOENT
    );
    // A held reference to the directory, as a FUSE node or a cwd would be.
    let held = vfs.as_root().lookup(At::Root, "d/sub", true).unwrap();
    fs.rename(d, b"sub", root, b"moved", RenameFlags::NONE)
        .unwrap();
    vfs.invalidate_entry(d, b"sub");
    vfs.invalidate_entry(root, b"moved");
    assert_eq!(
        vfs.as_root().stat(At::Root, "d/sub").unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(vfs.as_root().stat(At::Root, "moved").unwrap().ino, sub.ino);
    // The old dentry and the new one are two aliases of one directory: a
    // report on it reaches names cached under either.
    assert_eq!(
        vfs.as_root().stat(At::from(&held), "x").unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(
        vfs.as_root().stat(At::Root, "moved/x").unwrap_err(),
        Errno::ENOENT
    );
    fs.create(sub.ino, b"x", 0o644, Ctx::ROOT).unwrap();
    // Both misses are cached.
    assert_eq!(
        vfs.as_root().stat(At::from(&held), "x").unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(
        vfs.as_root().stat(At::Root, "moved/x").unwrap_err(),
        Errno::ENOENT
    );
    vfs.invalidate_entry(sub.ino, b"x");
    assert!(vfs.as_root().stat(At::from(&held), "x").is_ok());
    assert!(vfs.as_root().stat(At::Root, "moved/x").is_ok());
    drop(held);
    balanced(vfs);
}

#[test]
fn attributes_changed_underneath_are_replaced() {
    let (fs, vfs, _) = setup();
    let f = vfs.as_root().stat(At::Root, "d/f").unwrap();
    let set = SetAttr {
        perm: Some(0o600),
        ..SetAttr::default()
    };
    fs.setattr(f.ino, &set, Ctx::ROOT).unwrap();
    assert_eq!(vfs.as_root().stat(At::Root, "d/f").unwrap().perm, 0o644);
    // Without the attributes: the Vfs asks the backend.
    vfs.invalidate_inode(f.ino, None);
    assert_eq!(vfs.as_root().stat(At::Root, "d/f").unwrap().perm, 0o600);
    // With them: taken as given.
    let given = Attr {
        size: 99,
        ..vfs.as_root().stat(At::Root, "d/f").unwrap()
    };
    vfs.invalidate_inode(f.ino, Some(&given));
    assert_eq!(vfs.as_root().stat(At::Root, "d/f").unwrap().size, 99);
    balanced(vfs);
}

#[test]
fn listeners_hear_every_report_in_order() {
    let (_fs, vfs, d) = setup();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    vfs.subscribe(move |w| {
        h.lock().unwrap().push(match w {
            Invalidation::Entry { dir, name } => {
                format!("e {dir} {}", String::from_utf8_lossy(name))
            }
            Invalidation::Inode { ino } => format!("i {ino}"),
        })
    });
    // Names the dcache could not have cached, and inodes it does not
    // hold, still reach the listeners (their caches may differ).
    vfs.invalidate_entry(d, b"never-looked-up");
    vfs.invalidate_inode(12345, None);
    vfs.invalidate_entry(d, b"a/b");
    vfs.invalidate_entry(d, b"");
    assert_eq!(
        *heard.lock().unwrap(),
        vec![
            format!("e {d} never-looked-up"),
            "i 12345".to_string(),
            format!("e {d} a/b"),
            format!("e {d} "),
        ]
    );
    balanced(vfs);
}

/// A backend that keeps the invalidator it is attached with.
struct Watching {
    inner: MemFs,
    inval: OnceLock<Invalidator>,
}

impl FileSystem for Watching {
    fn root(&self) -> Ino {
        self.inner.root()
    }
    fn lookup(&self, dir: Ino, name: &[u8]) -> dcache::Result<Option<Attr>> {
        self.inner.lookup(dir, name)
    }
    fn getattr(&self, ino: Ino) -> dcache::Result<Attr> {
        self.inner.getattr(ino)
    }
    fn attach(&self, inval: Invalidator) {
        assert!(self.inval.set(inval).is_ok(), "attached twice");
    }
}

#[test]
fn the_backend_is_attached_and_reports_after_the_vfs_is_gone_do_nothing() {
    let fs = Arc::new(Watching {
        inner: MemFs::new(),
        inval: OnceLock::new(),
    });
    fs.inner.write_file("f", b"x").unwrap();
    let root = fs.root();
    let vfs = Vfs::new(fs.clone()).unwrap();
    assert!(vfs.as_root().stat(At::Root, "f").is_ok());
    fs.inner.unlink(root, b"f").unwrap();
    let inval = fs.inval.get().expect("attach was called").clone();
    inval.entry(root, b"f");
    assert_eq!(
        vfs.as_root().stat(At::Root, "f").unwrap_err(),
        Errno::ENOENT
    );
    balanced(vfs);
    inval.entry(root, b"f");
    inval.inode(root, None);
}

#[test]
fn reports_race_lookups_without_leaking() {
    let (fs, vfs, d) = setup();
    let vfs = Arc::new(vfs);
    std::thread::scope(|s| {
        for t in 0..2 {
            let vfs = vfs.clone();
            s.spawn(move || {
                for i in 0..2000 {
                    let _ = vfs.as_root().stat(At::Root, "d/f");
                    let _ = vfs
                        .as_root()
                        .stat(At::Root, if (i + t) % 2 == 0 { "d/sub" } else { "d/nope" });
                }
            });
        }
        let vfs = vfs.clone();
        s.spawn(move || {
            for _ in 0..2000 {
                vfs.invalidate_entry(d, b"f");
                vfs.invalidate_entry(d, b"sub");
                vfs.invalidate_entry(d, b"nope");
            }
        });
    });
    // The truth never changed, so every name still answers as it did.
    assert!(vfs.as_root().stat(At::Root, "d/f").is_ok());
    assert_eq!(
        vfs.as_root().stat(At::Root, "d/nope").unwrap_err(),
        Errno::ENOENT
    );
    drop(fs);
    balanced(Arc::into_inner(vfs).unwrap());
}
