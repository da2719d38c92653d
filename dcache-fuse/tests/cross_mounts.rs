//! Two mounts' request cores in one process, each handed the other's node
//! ids and file handles (as a confused server with two mounts could): every
//! crossing is answered with an errno or acts on the receiving mount's own
//! inode of that number, never on the other mount's objects, and both
//! cores release everything at the end. Each case runs in a child process
//! so a crash is reported as that case's failure.

use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::{Cred, Errno, Vfs};
use dcache_fuse::{Fh, FuseCore, NodeId};

static ROOT_CRED: Cred = Cred::ROOT;

fn core_with(populate: impl FnOnce(&MemFs)) -> FuseCore {
    let m = MemFs::new();
    populate(&m);
    FuseCore::new(Vfs::new(Arc::new(m)).unwrap())
}

fn n(id: u64) -> NodeId {
    // SAFETY: ids handed out by one of the two cores and not forgotten;
    // the crossing itself is what the test is about.
    unsafe { NodeId::from_kernel(id) }
}

fn h(fh: Fh) -> Fh {
    // SAFETY: a handle from an open of one of the two cores, released
    // once, last; handing it to the other core is the crossing under test.
    unsafe { Fh::from_kernel(fh.raw()) }
}

const CHILD_ENV: &str = "DCACHE_CROSS_MOUNTS_CASE";

fn isolated(name: &str, body: impl FnOnce()) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        body();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "crossing {name} failed in its child process ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A has `d/f` ("from A"); B has `e/g` ("from B") and nothing else.
fn pair() -> (FuseCore, FuseCore) {
    let a = core_with(|m| {
        m.mkdir_p("d", 0o755).unwrap();
        m.write_file("d/f", b"from A").unwrap();
    });
    let b = core_with(|m| {
        m.mkdir_p("e", 0o755).unwrap();
        m.write_file("e/g", b"from B").unwrap();
    });
    (a, b)
}

fn lookup(c: &FuseCore, parent: u64, name: &str) -> u64 {
    c.lookup(&ROOT_CRED, n(parent), name.as_bytes())
        .unwrap()
        .unwrap()
        .id
}

#[test]
fn file_handles_of_another_mount_are_ebadf() {
    isolated("file_handles_of_another_mount_are_ebadf", || {
        let (mut a, mut b) = pair();
        let d = lookup(&a, 1, "d");
        let f = lookup(&a, d, "f");
        let fh = a.open(&ROOT_CRED, n(f), libc::O_RDWR).unwrap();
        assert_eq!(b.read(h(fh), 0, 16), Err(Errno::EBADF));
        assert_eq!(b.write(h(fh), 0, b"from B"), Err(Errno::EBADF));
        assert_eq!(b.flush(h(fh)), Err(Errno::EBADF));
        assert_eq!(b.fsync(h(fh), false), Err(Errno::EBADF));
        assert_eq!(b.release_file(h(fh)), Err(Errno::EBADF));
        // A's handle still works, once, on A.
        assert_eq!(a.read(h(fh), 0, 16).unwrap(), b"from A");
        a.release_file(h(fh)).unwrap();
        a.forget(n(f), 1);
        a.forget(n(d), 1);
        let (ca, cb) = (a.vfs().counters(), b.vfs().counters());
        a.release();
        b.release();
        assert_eq!(a.stats().report().referenced, 0);
        drop((a, b));
        assert_eq!((ca.dentries(), cb.dentries()), (0, 0));
        assert_eq!((ca.inodes(), cb.inodes()), (0, 0));
    });
}

#[test]
fn node_ids_of_another_mount_name_nothing_there() {
    isolated("node_ids_of_another_mount_name_nothing_there", || {
        let (mut a, mut b) = pair();
        let d = lookup(&a, 1, "d");
        let f = lookup(&a, d, "f");
        // B never handed these ids out: ESTALE, not A's inodes.
        for id in [d, f] {
            assert_eq!(b.getattr(n(id)).unwrap_err(), Errno::ESTALE);
            assert_eq!(
                b.lookup(&ROOT_CRED, n(id), b"f").unwrap_err(),
                Errno::ESTALE
            );
            assert_eq!(
                b.open(&ROOT_CRED, n(id), libc::O_RDONLY).unwrap_err(),
                Errno::ESTALE
            );
        }
        // A forget of A's id at B is refused and counted, A keeps its node.
        b.forget(n(f), 1);
        assert_eq!(a.getattr(n(f)).unwrap().size, 6);
        a.forget(n(f), 1);
        a.forget(n(d), 1);
        let (ca, cb) = (a.vfs().counters(), b.vfs().counters());
        a.release();
        b.release();
        drop((a, b));
        assert_eq!((ca.dentries(), cb.dentries()), (0, 0));
    });
}
