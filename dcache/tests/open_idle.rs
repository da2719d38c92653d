//! Opens that write nothing shared: the Vfs's per-thread cache of idle
//! files (a reopen takes no dentry reference and no allocation) and
//! memfs's per-thread handle shards (an unlinked file is freed by the
//! release of its last handle, from whichever thread).

use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::{At, Errno, OpenFile, Vfs};

fn tree() -> (Arc<MemFs>, Vfs) {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("a", 0o755).unwrap();
    fs.write_file("a/f", b"hello").unwrap();
    let vfs = Vfs::new(fs.clone()).unwrap();
    (fs, vfs)
}

#[test]
fn a_reopen_takes_the_idle_file_and_its_dentry_reference() {
    let (fs, vfs) = tree();
    let c = vfs.counters();
    let v = vfs.as_root();
    let f = v.open(At::Root, "a/f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(f.dentry().count(), 1);
    let p = f.into_raw();
    // SAFETY: from `into_raw` just above, taken back once.
    let f = unsafe { OpenFile::from_raw(p) };
    f.close().unwrap();
    assert_eq!(fs.open_handles(), 0, "the backend was released at close");
    // The idle file still holds the dentry.
    let d = v.lookup(At::Root, "a/f", true).unwrap();
    assert_eq!(d.count(), 2);
    drop(d);
    let g = v.open(At::Root, "a/f", libc::O_RDWR, 0).unwrap();
    assert_eq!(g.dentry().count(), 1, "no new reference: the idle one");
    assert_eq!(g.flags(), libc::O_RDWR);
    assert_eq!(g.file().pos(), 0);
    let mut buf = [0u8; 5];
    assert_eq!(g.read(0, &mut buf), Ok(5));
    assert_eq!(&buf, b"hello");
    let q = g.into_raw();
    assert_eq!(q, p, "the same memory");
    // SAFETY: as above.
    unsafe { OpenFile::from_raw(q) }.close().unwrap();
    // A failed open leaves the idle file cached.
    assert_eq!(
        v.open(At::Root, "a/f", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .err(),
        Some(Errno::ENOTDIR)
    );
    let h = v.open(At::Root, "a/f", libc::O_RDONLY, 0).unwrap();
    assert_eq!(h.into_raw(), p);
    // SAFETY: as above.
    drop(unsafe { OpenFile::from_raw(p) });
    // Unlinking drops the idle file first: the name becomes a cached miss.
    let neg = c.negative();
    v.unlink(At::Root, "a/f").unwrap();
    assert_eq!(c.negative(), neg + 1);
    assert_eq!(v.stat(At::Root, "a/f").err(), Some(Errno::ENOENT));
    fs.check().unwrap();
    drop(vfs);
    assert_eq!(c.dentries(), 0, "every dentry freed");
    assert_eq!(c.inodes(), 0, "every inode freed");
}

#[test]
fn idle_files_go_with_the_vfs_and_the_shrinker() {
    let (_fs, vfs) = tree();
    let c = vfs.counters();
    let v = vfs.as_root();
    // Closed on other threads: each keeps its own idle file.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let f = v.open(At::Root, "a/f", libc::O_RDONLY, 0).unwrap();
                f.close().unwrap();
            });
        }
    });
    let d = v.lookup(At::Root, "a/f", true).unwrap();
    assert!(d.count() >= 2, "idle files hold the dentry");
    drop(d);
    vfs.shrink(usize::MAX);
    let d = v.lookup(At::Root, "a/f", true).unwrap();
    assert_eq!(d.count(), 1, "the shrinker dropped them");
    drop(d);
    let f = v.open(At::Root, "a/f", libc::O_RDONLY, 0).unwrap();
    drop(f);
    drop(vfs);
    assert_eq!(c.dentries(), 0);
    assert_eq!(c.allocated(), 0);
}

#[test]
fn an_unlinked_file_goes_with_its_last_handle_on_another_thread() {
    let (fs, vfs) = tree();
    let v = vfs.as_root();
    let inodes = fs.inode_count();
    let f = v.open(At::Root, "a/f", libc::O_RDONLY, 0).unwrap();
    let g = std::thread::scope(|s| {
        s.spawn(|| v.open(At::Root, "a/f", libc::O_RDWR, 0).unwrap())
            .join()
            .unwrap()
    });
    v.unlink(At::Root, "a/f").unwrap();
    assert_eq!(fs.inode_count(), inodes, "open: still there");
    fs.check().unwrap();
    g.close().unwrap();
    assert_eq!(fs.inode_count(), inodes);
    let mut buf = [0u8; 5];
    assert_eq!(f.read(0, &mut buf), Ok(5));
    std::thread::scope(|s| {
        s.spawn(|| f.close().unwrap());
    });
    assert_eq!(fs.inode_count(), inodes - 1, "the last release freed it");
    assert_eq!(fs.open_handles(), 0);
    fs.check().unwrap();
}

/// A thread keeps at most eight idle files, the oldest going first: after
/// ten files opened and closed in turn, the first two names hold no idle
/// reference and the last eight do; reopening the newest takes its idle
/// file, and every count is balanced at the end.
#[test]
fn a_thread_keeps_its_eight_newest_idle_files() {
    let fs = Arc::new(MemFs::new());
    for i in 0..10 {
        fs.write_file(&format!("f{i}"), b"").unwrap();
    }
    let vfs = Vfs::new(fs.clone()).unwrap();
    let c = vfs.counters();
    let v = vfs.as_root();
    for i in 0..10 {
        v.open(At::Root, format!("f{i}"), libc::O_RDONLY, 0)
            .unwrap()
            .close()
            .unwrap();
    }
    let counts: Vec<i32> = (0..10)
        .map(|i| v.lookup(At::Root, format!("f{i}"), true).unwrap().count())
        .collect();
    assert_eq!(
        counts,
        [1, 1, 2, 2, 2, 2, 2, 2, 2, 2],
        "lookup's own + idle"
    );
    let f = v.open(At::Root, "f9", libc::O_RDONLY, 0).unwrap();
    assert_eq!(f.dentry().count(), 1, "the idle file's reference");
    f.close().unwrap();
    assert_eq!(fs.open_handles(), 0);
    fs.check().unwrap();
    drop(vfs);
    assert_eq!(c.dentries(), 0);
    assert_eq!(c.allocated(), 0);
}
