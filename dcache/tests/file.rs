//! Open files and the descriptor table: layouts, reference balance, errors,
//! positions, and dup/close racing from several threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dcache::file::{
    FdTable, FileRef, Layout, OpenParts, Split, FMODE_ATOMIC_POS, FMODE_BORROWED_FS, FMODE_PATH,
    FMODE_READ, FMODE_WRITE,
};
use dcache::fs::{Attr, FileSystem, Ino};
use dcache::Errno;

#[cfg(miri)]
const ITERS: usize = 20;
#[cfg(not(miri))]
const ITERS: usize = 2000;

/// A backend with one file of fixed contents that counts its calls.
#[derive(Default)]
struct CountFs {
    releases: AtomicUsize,
    flushes: AtomicUsize,
    written: AtomicUsize,
    /// Has no `->flush` (as tmpfs): `close` must not call `flush`.
    no_flush: bool,
}

const DATA: &[u8] = b"0123456789";

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
    fn read(&self, _ino: Ino, _fh: u64, offset: u64, buf: &mut [u8]) -> dcache::Result<usize> {
        let start = (offset as usize).min(DATA.len());
        let n = (DATA.len() - start).min(buf.len());
        buf[..n].copy_from_slice(&DATA[start..start + n]);
        Ok(n)
    }
    fn write(&self, _ino: Ino, _fh: u64, _offset: u64, data: &[u8]) -> dcache::Result<usize> {
        self.written.fetch_add(data.len(), Ordering::SeqCst);
        Ok(data.len())
    }
    fn flush(&self, _ino: Ino, _fh: u64) -> dcache::Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn flush_on_close(&self) -> bool {
        !self.no_flush
    }
    fn release(&self, _ino: Ino, _fh: u64) -> dcache::Result<()> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A path payload that counts its drops.
struct Payload(Arc<AtomicUsize>);
impl Drop for Payload {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Setup {
    fs: Arc<CountFs>,
    drops: Arc<AtomicUsize>,
}

impl Setup {
    fn new() -> Self {
        Setup {
            fs: Arc::new(CountFs::default()),
            drops: Arc::new(AtomicUsize::new(0)),
        }
    }
    fn open<L: Layout>(&self, flags: i32) -> FileRef<Payload, L> {
        FileRef::open(OpenParts {
            path: Payload(self.drops.clone()),
            fs: self.fs.clone(),
            ino: 7,
            fh: 3,
            flags,
        })
    }
    fn releases(&self) -> usize {
        self.fs.releases.load(Ordering::SeqCst)
    }
    fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }
}

/// Runs a test body for both layouts.
macro_rules! both_layouts {
    ($name:ident, $body:ident) => {
        mod $name {
            #[test]
            fn split() {
                super::$body::<dcache::file::Split>();
            }
            // The comparison layout needs the `experiments` feature.
            #[cfg(feature = "experiments")]
            #[test]
            fn packed() {
                super::$body::<dcache::file::Packed>();
            }
        }
    };
}

#[cfg(feature = "experiments")]
#[test]
fn layouts_differ_in_what_shares_the_hot_line() {
    type Dentry = usize; // stands in for the Vfs' dentry reference
    let split = FileRef::<Dentry, Split>::layout();
    let packed = FileRef::<Dentry, dcache::file::Packed>::layout();
    assert_eq!((split.layout, packed.layout), ("split", "packed"));
    for l in [&split, &packed] {
        assert_eq!(l.align, 64);
        assert_eq!(l.size % 64, 0);
        assert_eq!(l.fields.len(), 9, "{l:?}");
        for w in l.fields.windows(2) {
            assert!(w[0].1 + w[0].2 <= w[1].1, "fields overlap: {l:?}");
        }
        for h in dcache::file::HOT_FIELDS {
            assert!(l.lines(h).is_some(), "{h} missing");
        }
    }
    assert!(!split.hot_shares_line_with_cold(), "{split:#?}");
    assert!(packed.hot_shares_line_with_cold(), "{packed:#?}");
    for h in dcache::file::HOT_FIELDS {
        assert_eq!(split.lines(h), Some((0, 0)), "split: {h}");
        assert_eq!(packed.lines(h), Some((0, 0)), "packed: {h}");
    }
    // The mode (read by close's FMODE_PATH test and every read and write)
    // is read-mostly: on the written line only in packed.
    for c in ["f_mode", "f_op", "f_inode", "f_path"] {
        assert_eq!(split.lines(c).unwrap().0, 1, "split: {c}");
        assert_eq!(packed.lines(c), Some((0, 0)), "packed: {c}");
    }
    assert_eq!(split.lines("fh"), Some((1, 1)));
    // A big payload moves nothing into the split hot line.
    assert!(!FileRef::<[u8; 300], Split>::layout().hot_shares_line_with_cold());
}

fn mode_bits<L: Layout>() {
    let s = Setup::new();
    let r = s.open::<L>(libc::O_RDONLY);
    assert_eq!(r.mode() & (FMODE_READ | FMODE_WRITE), FMODE_READ);
    assert_ne!(r.mode() & FMODE_ATOMIC_POS, 0);
    assert_eq!(
        s.open::<L>(libc::O_RDWR).mode() & (FMODE_READ | FMODE_WRITE),
        FMODE_READ | FMODE_WRITE
    );
    assert_eq!(s.open::<L>(libc::O_PATH).mode(), FMODE_PATH);
    assert_eq!((r.ino(), r.fh(), r.flags()), (7, 3, libc::O_RDONLY));
}
both_layouts!(mode_bits_t, mode_bits);

fn dup_close_balance<L: Layout>() {
    let s = Setup::new();
    let t = FdTable::<Payload, L>::new();
    let fd = t.install(s.open::<L>(libc::O_RDONLY)).unwrap();
    assert_eq!(fd, 0);
    let base = t.fget(fd).unwrap();
    assert_eq!(base.count(), 2, "table + ours");
    let fds: Vec<_> = (0..10).map(|_| t.dup(fd).unwrap()).collect();
    assert_eq!(fds, (1..=10).collect::<Vec<_>>());
    assert_eq!(base.count(), 12);
    assert!(t.fget(5).unwrap().same_file(&base));
    assert_eq!(base.count(), 12, "fget + fput balanced");
    for fd in fds {
        t.close(fd).unwrap();
    }
    assert_eq!(base.count(), 2);
    assert_eq!(t.open_fds(), 1);
    assert_eq!(
        s.fs.flushes.load(Ordering::SeqCst),
        10,
        "one flush per close"
    );
    t.fput(base);
    assert_eq!(
        (s.releases(), s.drops()),
        (0, 0),
        "the table still holds it"
    );
    t.close(fd).unwrap();
    assert_eq!((s.releases(), s.drops()), (1, 1));
    assert_eq!(t.open_fds(), 0);
}
both_layouts!(dup_close_balance_t, dup_close_balance);

fn ebadf<L: Layout>() {
    let s = Setup::new();
    let t = FdTable::<Payload, L>::with_max_fds(8).unwrap();
    let fd = t.install(s.open::<L>(libc::O_RDONLY)).unwrap();
    let fd2 = t.dup(fd).unwrap();
    t.close(fd2).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(t.close(fd2).unwrap_err(), Errno::EBADF);
    assert_eq!(t.fget(fd2).unwrap_err(), Errno::EBADF);
    assert_eq!(t.dup(fd2).unwrap_err(), Errno::EBADF);
    assert_eq!(t.read(fd2, &mut buf).unwrap_err(), Errno::EBADF);
    assert_eq!(t.pread(fd2, &mut buf, 0).unwrap_err(), Errno::EBADF);
    for bad in [-1, 8, 1000, i32::MIN, i32::MAX] {
        assert_eq!(t.fget(bad).unwrap_err(), Errno::EBADF);
        assert_eq!(t.close(bad).unwrap_err(), Errno::EBADF);
    }
    assert_eq!(t.fget(fd).unwrap().count(), 2);
    assert!(FdTable::<Payload, L>::with_max_fds(0).is_err());
    assert!(FdTable::<Payload, L>::with_max_fds(dcache::file::NR_OPEN + 1).is_err());
    // Access mode checks.
    let w = t.install(s.open::<L>(libc::O_WRONLY)).unwrap();
    assert_eq!(t.read(w, &mut buf).unwrap_err(), Errno::EBADF);
    assert_eq!(t.write(w, b"ab").unwrap(), 2);
    assert_eq!(t.pwrite(w, b"abc", 100).unwrap(), 3);
    assert_eq!(s.fs.written.load(Ordering::SeqCst), 5);
    assert_eq!(t.write(fd, b"x").unwrap_err(), Errno::EBADF);
    let p = t.install(s.open::<L>(libc::O_PATH)).unwrap();
    assert_eq!(t.read(p, &mut buf).unwrap_err(), Errno::EBADF);
    let flushes = s.fs.flushes.load(Ordering::SeqCst);
    t.close(p).unwrap();
    assert_eq!(
        s.fs.flushes.load(Ordering::SeqCst),
        flushes,
        "O_PATH close does not flush"
    );
}
both_layouts!(ebadf_t, ebadf);

fn close_without_backend_flush<L: Layout>() {
    let s = Setup {
        fs: Arc::new(CountFs {
            no_flush: true,
            ..CountFs::default()
        }),
        drops: Arc::new(AtomicUsize::new(0)),
    };
    let t = FdTable::<Payload, L>::new();
    let fd = t.install(s.open::<L>(libc::O_RDWR)).unwrap();
    let d = t.dup(fd).unwrap();
    t.close(d).unwrap();
    assert_eq!(
        s.fs.flushes.load(Ordering::SeqCst),
        0,
        "no ->flush, no call"
    );
    t.close(fd).unwrap();
    assert_eq!(s.fs.flushes.load(Ordering::SeqCst), 0);
    assert_eq!((s.releases(), s.drops()), (1, 1), "release still comes");
    // The backend's flush itself still answers when asked (FUSE_FLUSH).
    s.fs.flush(7, 3).unwrap();
    assert_eq!(s.fs.flushes.load(Ordering::SeqCst), 1);
}
both_layouts!(close_without_backend_flush_t, close_without_backend_flush);

fn emfile_and_lowest_fd<L: Layout>() {
    let s = Setup::new();
    let t = FdTable::<Payload, L>::with_max_fds(70).unwrap();
    let fd = t.install(s.open::<L>(libc::O_RDONLY)).unwrap();
    for want in 1..70 {
        assert_eq!(t.dup(fd).unwrap(), want);
    }
    let probe = t.fget(fd).unwrap();
    assert_eq!(probe.count(), 71);
    assert_eq!(t.dup(fd).unwrap_err(), Errno::EMFILE);
    assert_eq!(
        t.install(s.open::<L>(libc::O_RDONLY)).unwrap_err(),
        Errno::EMFILE
    );
    assert_eq!(probe.count(), 71, "failed dup left the count alone");
    assert_eq!(
        (s.releases(), s.drops()),
        (1, 1),
        "the refused new file was released"
    );
    t.close(65).unwrap();
    t.close(3).unwrap();
    assert_eq!(t.dup(fd).unwrap(), 3, "lowest free first");
    assert_eq!(t.dup(fd).unwrap(), 65);
    assert_eq!(t.dup(fd).unwrap_err(), Errno::EMFILE);
    assert_eq!(t.open_fds(), 70);
}
both_layouts!(emfile_t, emfile_and_lowest_fd);

fn dropping_the_table_closes_everything<L: Layout>() {
    let s = Setup::new();
    let t = FdTable::<Payload, L>::new();
    let a = t.install(s.open::<L>(libc::O_RDONLY)).unwrap();
    for _ in 0..5 {
        t.dup(a).unwrap();
    }
    t.install(s.open::<L>(libc::O_RDWR)).unwrap();
    t.install(s.open::<L>(libc::O_PATH)).unwrap();
    let kept = t.fget(a).unwrap();
    drop(t);
    assert_eq!(
        (s.releases(), s.drops()),
        (2, 2),
        "the two unreferenced files"
    );
    assert_eq!(kept.count(), 1);
    assert_eq!(
        s.fs.flushes.load(Ordering::SeqCst),
        7,
        "every non-O_PATH fd flushed"
    );
    drop(kept);
    assert_eq!(
        (s.releases(), s.drops()),
        (3, 3),
        "released exactly once each"
    );
}
both_layouts!(drop_t, dropping_the_table_closes_everything);

fn read_and_pread_positions<L: Layout>() {
    let s = Setup::new();
    let t = FdTable::<Payload, L>::new();
    let fd = t.install(s.open::<L>(libc::O_RDONLY)).unwrap();
    let mut b4 = [0u8; 4];
    let mut b2 = [0u8; 2];
    assert_eq!(t.read(fd, &mut b4).unwrap(), 4);
    assert_eq!(&b4, b"0123");
    assert_eq!(t.pread(fd, &mut b2, 7).unwrap(), 2);
    assert_eq!(&b2, b"78");
    assert_eq!(t.fget(fd).unwrap().pos(), 4, "pread leaves the position");
    assert_eq!(t.read(fd, &mut b4).unwrap(), 4);
    assert_eq!(&b4, b"4567");
    // A dup shares the open file, position included.
    let d = t.dup(fd).unwrap();
    assert_eq!(t.read(d, &mut b4).unwrap(), 2);
    assert_eq!(&b4[..2], b"89");
    assert_eq!(t.read(fd, &mut b4).unwrap(), 0);
    assert_eq!(t.fget(fd).unwrap().pos(), 10);
    // A second open of the same inode has its own position.
    let other = t.install(s.open::<L>(libc::O_RDONLY)).unwrap();
    assert_eq!(t.read(other, &mut b2).unwrap(), 2);
    assert_eq!(&b2, b"01");
}
both_layouts!(positions_t, read_and_pread_positions);

/// Several threads dup and close on one shared table and file, while
/// others fget whatever descriptors exist; every count comes back.
fn concurrent_dup_close_shared_table<L: Layout>() {
    let s = Setup::new();
    let t = Arc::new(FdTable::<Payload, L>::with_max_fds(64).unwrap());
    let fd = t.install(s.open::<L>(libc::O_RDONLY)).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 1];
                for n in 0..ITERS {
                    if i == 3 {
                        // A prober racing closes on every descriptor.
                        let probe = (n % 8) as i32;
                        match t.fget(probe) {
                            Ok(f) => assert_eq!(f.ino(), 7),
                            Err(e) => assert_eq!(e, Errno::EBADF),
                        }
                        continue;
                    }
                    let d = t.dup(fd).unwrap();
                    assert_eq!(t.pread(d, &mut buf, 3).unwrap(), 1);
                    assert_eq!(buf[0], b'3');
                    t.close(d).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(t.open_fds(), 1);
    assert_eq!(t.fget(fd).unwrap().count(), 2);
    assert_eq!(s.releases(), 0);
    drop(t);
    assert_eq!((s.releases(), s.drops()), (1, 1));
}
both_layouts!(concurrent_shared_t, concurrent_dup_close_shared_table);

/// The benchmark's shape: one table per thread, one file shared by all,
/// `close(dup(fd))` in a loop.
fn concurrent_dup_close_per_thread_tables<L: Layout>() {
    let s = Setup::new();
    let file = s.open::<L>(libc::O_RDONLY);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let mine = file.clone();
            std::thread::spawn(move || {
                let t = FdTable::<Payload, L>::new();
                let fd = t.install(mine).unwrap();
                for _ in 0..ITERS {
                    let d = t.dup(fd).unwrap();
                    assert_eq!(d, fd + 1);
                    t.close(d).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(file.count(), 1, "back to the baseline");
    assert_eq!(s.fs.flushes.load(Ordering::SeqCst), 4 * (ITERS + 1));
    assert_eq!(s.releases(), 0);
    drop(file);
    assert_eq!((s.releases(), s.drops()), (1, 1));
}
both_layouts!(per_thread_t, concurrent_dup_close_per_thread_tables);

/// `AsCred::open` returns the split file: clones are references to the one
/// open file, the backend's release comes once, at the last reference, and
/// the file can live in a descriptor table like any other.
#[test]
fn vfs_open_file_is_the_split_file() {
    use dcache::fs::memfs::MemFs;
    use dcache::{oflags, At, Config, OpenFile, Vfs};

    let fs = Arc::new(MemFs::new());
    // A small table: Miri runs this too.
    let config = Config {
        capacity: 16,
        ..Config::default()
    };
    let vfs = Vfs::with_config(fs.clone(), config).unwrap();
    let flags = oflags::O_CREAT | oflags::O_RDWR;
    let backend_counts = Arc::strong_count(&fs);
    let f: OpenFile<'_> = vfs.as_root().open(At::Root, "f", flags, 0o644).unwrap();
    // f_op borrows the Vfs's backend: an open writes no count shared by
    // every file.
    assert_eq!(Arc::strong_count(&fs), backend_counts);
    assert_ne!(f.file().mode() & FMODE_BORROWED_FS, 0);
    assert_eq!(f.file().mode() & (FMODE_READ | FMODE_WRITE), 3);
    let _split: &FileRef<dcache::DentryRef<'_>, Split> = f.file();
    assert_eq!(f.write(0, b"abc").unwrap(), 3);

    // dup: another reference to the same file; closing one releases nothing.
    let g = f.clone();
    assert!(g.same_file(&f));
    assert_eq!(f.file().count(), 2);
    std::thread::scope(|s| {
        s.spawn(move || g.close().unwrap());
    });
    assert_eq!(fs.open_handles(), 1);
    let mut buf = [0; 8];
    assert_eq!(f.read(0, &mut buf).unwrap(), 3);

    // In a descriptor table: the table's reference is the last one.
    let table = FdTable::<_, Split>::with_max_fds(4).unwrap();
    let fd = table.install(f.into_file()).unwrap();
    let got = table.fget(fd).unwrap();
    assert_eq!(got.pread(&mut buf, 1).unwrap(), 2);
    drop(got);
    assert_eq!(fs.open_handles(), 1);
    table.close(fd).unwrap();
    assert_eq!(fs.open_handles(), 0);

    // close reports the release of the last reference.
    let f = vfs
        .as_root()
        .open(At::Root, "f", oflags::O_RDONLY, 0)
        .unwrap();
    assert_eq!(f.write(0, b"x"), Err(Errno::EBADF));
    f.close().unwrap();
    assert_eq!(fs.open_handles(), 0);
}
