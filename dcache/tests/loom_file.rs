//! Model-checks the descriptor table's pin protocol: `fget` racing `close`
//! (and `dup` racing `close`, and two closers) on one slot. In every
//! interleaving the file is released exactly once, and `fget` returns
//! either a live reference or EBADF. And a file reference's `put` (what
//! `OpenFile::close` does) racing another holder's drop.
//!
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --test loom_file
#![cfg(loom)]

use dcache::file::{FdTable, FileRef, OpenParts, Split};
use dcache::fs::{Attr, FileSystem, Ino};
use dcache::Errno;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

struct CountFs {
    releases: AtomicUsize,
}

impl FileSystem for CountFs {
    fn root(&self) -> Ino {
        1
    }
    fn lookup(&self, _dir: Ino, _name: &[u8]) -> dcache::Result<Option<Attr>> {
        Ok(None)
    }
    fn getattr(&self, _ino: Ino) -> dcache::Result<Attr> {
        Err(Errno::ENOENT)
    }
    fn release(&self, _ino: Ino, _fh: u64) -> dcache::Result<()> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn setup() -> (std::sync::Arc<CountFs>, Arc<FdTable<(), Split>>, i32) {
    let fs = std::sync::Arc::new(CountFs {
        releases: AtomicUsize::new(0),
    });
    let table = Arc::new(FdTable::<(), Split>::with_max_fds(2).unwrap());
    let file = FileRef::open(OpenParts {
        path: (),
        fs: fs.clone(),
        ino: 9,
        fh: 0,
        flags: libc::O_RDONLY,
    });
    let fd = table.install(file).unwrap();
    (fs, table, fd)
}

#[test]
fn fget_vs_close() {
    loom::model(|| {
        let (fs, table, fd) = setup();
        let t2 = table.clone();
        let getter = thread::spawn(move || match t2.fget(fd) {
            Ok(f) => {
                assert!(f.count() >= 1);
                assert_eq!(f.ino(), 9);
                true
            }
            Err(e) => {
                assert_eq!(e, Errno::EBADF);
                false
            }
        });
        table.close(fd).unwrap();
        let _ = getter.join().unwrap();
        assert_eq!(fs.releases.load(Ordering::SeqCst), 1);
        assert_eq!(table.fget(fd).unwrap_err(), Errno::EBADF);
        assert_eq!(table.open_fds(), 0);
    });
}

#[test]
fn dup_vs_close() {
    loom::model(|| {
        let (fs, table, fd) = setup();
        let t2 = table.clone();
        let duper = thread::spawn(move || t2.dup(fd));
        table.close(fd).unwrap();
        match duper.join().unwrap() {
            Ok(d) => {
                assert_eq!(fs.releases.load(Ordering::SeqCst), 0, "the dup holds it");
                table.close(d).unwrap();
            }
            Err(e) => assert_eq!(e, Errno::EBADF),
        }
        assert_eq!(fs.releases.load(Ordering::SeqCst), 1);
        assert_eq!(table.open_fds(), 0);
    });
}

#[test]
fn two_closers() {
    loom::model(|| {
        let (fs, table, fd) = setup();
        let t2 = table.clone();
        let other = thread::spawn(move || t2.close(fd).is_ok());
        let mine = table.close(fd).is_ok();
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "exactly one close succeeds");
        assert_eq!(fs.releases.load(Ordering::SeqCst), 1);
    });
}

/// The comparison layout (dcache's `experiments` feature).
#[cfg(feature = "experiments")]
#[test]
fn packed_layout_same_protocol() {
    loom::model(|| {
        let fs = std::sync::Arc::new(CountFs {
            releases: AtomicUsize::new(0),
        });
        let table = Arc::new(FdTable::<(), dcache::file::Packed>::with_max_fds(1).unwrap());
        let fd = table
            .install(FileRef::open(OpenParts {
                path: (),
                fs: fs.clone(),
                ino: 9,
                fh: 0,
                flags: libc::O_RDONLY,
            }))
            .unwrap();
        let t2 = table.clone();
        let getter = thread::spawn(move || t2.fget(fd).map(|f| f.count()));
        table.close(fd).unwrap();
        if let Ok(c) = getter.join().unwrap() {
            assert!(c >= 1);
        }
        assert_eq!(fs.releases.load(Ordering::SeqCst), 1);
    });
}

/// A path payload that counts its drops.
struct Path(std::sync::Arc<AtomicUsize>);
impl Drop for Path {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A file whose backend counts releases and whose path counts drops.
fn counted_file() -> (
    std::sync::Arc<CountFs>,
    std::sync::Arc<AtomicUsize>,
    FileRef<Path, Split>,
) {
    let fs = std::sync::Arc::new(CountFs {
        releases: AtomicUsize::new(0),
    });
    let drops = std::sync::Arc::new(AtomicUsize::new(0));
    let file = FileRef::open(OpenParts {
        path: Path(drops.clone()),
        fs: fs.clone(),
        ino: 9,
        fh: 0,
        flags: libc::O_RDONLY,
    });
    (fs, drops, file)
}

/// An `OpenFile`'s close (`FileRef::put`) racing another holder's drop (a
/// FUSE release against a dup's close): whichever is last releases, once,
/// and the path goes with the file.
#[test]
fn put_vs_drop() {
    loom::model(|| {
        let (fs, drops, file) = counted_file();
        let other = file.clone();
        let closer = thread::spawn(move || other.put());
        drop(file);
        closer.join().unwrap().unwrap();
        assert_eq!(fs.releases.load(Ordering::SeqCst), 1);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}

/// `put_idle` (what the Vfs's close does) racing another holder's
/// `put_idle`: exactly one of them gets the idle file, the backend is
/// released once, and the path is still held until the idle file goes.
#[test]
fn put_idle_vs_put_idle() {
    loom::model(|| {
        let (fs, drops, file) = counted_file();
        let other = file.clone();
        let closer = thread::spawn(move || {
            let (r, idle) = other.put_idle();
            r.unwrap();
            idle
        });
        let (r, mine) = file.put_idle();
        r.unwrap();
        let theirs = closer.join().unwrap();
        assert_eq!(fs.releases.load(Ordering::SeqCst), 1);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the idle file holds the path"
        );
        let idle = match (mine, theirs) {
            (Some(i), None) | (None, Some(i)) => i,
            _ => panic!("exactly one holder was last"),
        };
        drop(idle);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    });
}
