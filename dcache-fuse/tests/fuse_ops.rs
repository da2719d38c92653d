//! The FUSE frontend's request core without the kernel: nodes as inodes
//! (one node id per inode, the backend's number; hand-out, forget, the
//! lookup-vs-forget race, refused over-forgets), readdirplus counting only
//! what fits, handles, and the errnos the handlers pass through. The tests
//! stand in for the kernel, so they make `NodeId`s and `Fh`s by the
//! kernel's rules: only ids handed out and not yet forgotten.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use dcache::fs::memfs::MemFs;
use dcache::fs::FileType;
use dcache::{Cred, Errno, Vfs};
use dcache_fuse::{Fh, FuseCore, NodeId};

/// The credential of requests the kernel already checked (default_permissions).
static ROOT_CRED: Cred = Cred::ROOT;

const ROOT: u64 = 1;

fn fs_with(populate: impl FnOnce(&MemFs)) -> FuseCore {
    let m = MemFs::new();
    populate(&m);
    FuseCore::new(Vfs::new(Arc::new(m)).unwrap())
}

/// A node id as the kernel would send it back.
fn n(id: u64) -> NodeId {
    // SAFETY: the tests name only the root and ids handed out to them and
    // not yet forgotten, as the kernel does.
    unsafe { NodeId::from_kernel(id) }
}

/// A file handle as the kernel would send it back.
fn h(fh: Fh) -> Fh {
    // SAFETY: a handle from open/create, released at most once, last.
    unsafe { Fh::from_kernel(fh.raw()) }
}

fn lookup(fs: &FuseCore, parent: u64, name: &str) -> u64 {
    fs.lookup(&ROOT_CRED, n(parent), name.as_bytes())
        .unwrap()
        .unwrap_or_else(|| panic!("{name} missing"))
        .id
}

#[test]
fn lookups_are_counted_and_pin_the_node_once() {
    let fs = fs_with(|m| {
        m.mkdir_p("d", 0o755).unwrap();
        m.write_file("d/f", b"x").unwrap();
    });
    let c = fs.vfs().counters();
    let d1 = lookup(&fs, ROOT, "d");
    let d2 = lookup(&fs, ROOT, "d");
    assert_eq!(d1, d2, "one inode, one node id");
    assert_ne!(d1, ROOT);
    let f = lookup(&fs, d1, "f");
    let r = fs.stats().report();
    assert_eq!((r.referenced, r.lookups), (2, 3));
    // However often the kernel looks a node up, it pins the dentry with
    // one reference (here: the kernel's and the one this lookup holds).
    for _ in 0..5 {
        lookup(&fs, d1, "f");
    }
    let probe = fs
        .vfs()
        .as_root()
        .lookup(dcache::At::Root, "d/f", false)
        .unwrap();
    assert_eq!(probe.count(), 2);
    drop(probe);
    // A missing name is a negative answer, with nothing handed out.
    assert_eq!(fs.lookup(&ROOT_CRED, n(d1), b"nope").unwrap(), None);
    assert_eq!(fs.stats().report().lookups, 8);
    // getattr through the node id.
    let a = fs.getattr(n(f)).unwrap();
    assert_eq!((a.kind, a.size), (FileType::Regular, 1));
    assert_eq!(fs.getattr(n(ROOT)).unwrap().kind, FileType::Directory);

    fs.forget(n(f), 3);
    assert_eq!(fs.stats().report().referenced, 2, "f still held");
    fs.forget(n(f), 3);
    fs.forget(n(d1), 2);
    let r = fs.stats().report();
    assert_eq!((r.referenced, r.lookups, r.bad_forgets), (0, 0, 0));
    // Nothing pins them now: the shrinker can free every cached dentry
    // but the root.
    fs.vfs().shrink(usize::MAX);
    assert_eq!(c.dentries(), 1);
}

/// A cached name whose node the kernel forgot is looked up again with a
/// fresh reference for the kernel (the reference-free answer is only for
/// nodes the kernel still holds); one it holds is answered without
/// touching the dentry's reference count.
#[test]
fn a_forgotten_node_is_pinned_again_by_its_next_lookup() {
    let fs = fs_with(|m| {
        m.write_file("f", b"x").unwrap();
    });
    let f = lookup(&fs, ROOT, "f");
    fs.forget(n(f), 1);
    assert_eq!(fs.stats().report().referenced, 0);
    // Still cached (nothing shrank it), but no longer the kernel's.
    let probe = fs
        .vfs()
        .as_root()
        .lookup(dcache::At::Root, "f", false)
        .unwrap();
    assert_eq!(probe.count(), 1, "only the probe holds it");
    assert_eq!(lookup(&fs, ROOT, "f"), f, "same inode, same node id");
    assert_eq!(probe.count(), 2, "the kernel's reference is back");
    for _ in 0..3 {
        lookup(&fs, ROOT, "f");
    }
    assert_eq!(probe.count(), 2, "held lookups take no reference");
    let r = fs.stats().report();
    assert_eq!((r.referenced, r.lookups), (1, 4));
    fs.forget(n(f), 4);
    assert_eq!(probe.count(), 1);
    drop(probe);
    fs.vfs().shrink(usize::MAX);
    assert_eq!(fs.vfs().counters().dentries(), 1);
}

#[test]
fn a_forget_of_more_than_was_handed_out_is_refused() {
    let fs = fs_with(|m| {
        m.write_file("f", b"").unwrap();
    });
    let f = lookup(&fs, ROOT, "f");
    fs.forget(n(f), 2);
    let r = fs.stats().report();
    assert_eq!((r.bad_forgets, r.lookups), (1, 1));
    // The node is still usable, and forgets properly afterwards.
    assert_eq!(fs.getattr(n(f)).unwrap().size, 0);
    fs.forget(n(f), 1);
    assert_eq!(fs.stats().report().lookups, 0);
    // Forgetting the root is ignored: it is never counted.
    fs.forget(n(ROOT), 1);
    assert_eq!(fs.getattr(n(ROOT)).unwrap().kind, FileType::Directory);
}

#[test]
fn an_unlinked_node_stays_valid_until_forgotten() {
    let fs = fs_with(|m| {
        m.write_file("f", b"abc").unwrap();
    });
    let c = fs.vfs().counters();
    let f = lookup(&fs, ROOT, "f");
    let fh = fs.open(&ROOT_CRED, n(f), libc::O_RDONLY).unwrap();
    fs.unlink(&ROOT_CRED, n(ROOT), b"f").unwrap();
    assert_eq!(fs.lookup(&ROOT_CRED, n(ROOT), b"f").unwrap(), None);
    // The kernel's node and the open handle still reach the file.
    assert_eq!(fs.read(h(fh), 0, 10).unwrap(), b"abc");
    assert_eq!(fs.getattr(n(f)).unwrap().size, 3);
    fs.release_file(h(fh)).unwrap();
    assert_eq!(fs.stats().report().open_files, 0);
    fs.forget(n(f), 1);
    fs.vfs().shrink(usize::MAX);
    assert_eq!(c.dentries(), 1, "the unlinked dentry was freed");
}

#[test]
fn readdirplus_counts_only_the_entries_that_fit() {
    let fs = fs_with(|m| {
        for i in 0..10 {
            m.write_file(&format!("f{i}"), b"").unwrap();
        }
    });
    let mut got = Vec::new();
    fs.readdirplus(n(ROOT), 0, 64, &mut |id, off, name, a| {
        if got.len() == 5 {
            return true;
        }
        got.push((id, off, String::from_utf8(name.to_vec()).unwrap(), a.kind));
        false
    })
    .unwrap();
    assert_eq!(got[0].2, ".");
    assert_eq!(got[0].0, ROOT);
    assert_eq!(got[1].2, "..");
    // Three files made it into the "reply": three lookups counted.
    assert_eq!(fs.stats().report().lookups, 3);
    // Continue after the last one.
    let last = got.last().unwrap().1;
    let mut rest = Vec::new();
    fs.readdirplus(n(ROOT), last, 64, &mut |id, _, name, _| {
        rest.push((id, String::from_utf8(name.to_vec()).unwrap()));
        false
    })
    .unwrap();
    assert_eq!(rest.len(), 7);
    assert_eq!(fs.stats().report().lookups, 10);
    for (id, _, name, _) in got.iter().skip(2) {
        assert_eq!(lookup(&fs, ROOT, name), *id);
        fs.forget(n(*id), 2);
    }
    for (id, _) in rest {
        fs.forget(n(id), 1);
    }
    assert_eq!(fs.stats().report().lookups, 0);
}

#[test]
fn namespace_requests_pass_errnos_through() {
    let fs = fs_with(|m| {
        m.mkdir_p("d/e", 0o755).unwrap();
        m.write_file("d/f", b"x").unwrap();
    });
    let d = lookup(&fs, ROOT, "d");
    assert_eq!(
        fs.mkdir(&ROOT_CRED, n(d), b"e", 0o755).unwrap_err(),
        Errno::EEXIST
    );
    assert_eq!(
        fs.rmdir(&ROOT_CRED, n(ROOT), b"d").unwrap_err(),
        Errno::ENOTEMPTY
    );
    assert_eq!(
        fs.unlink(&ROOT_CRED, n(d), b"e").unwrap_err(),
        Errno::EISDIR
    );
    assert_eq!(
        fs.rmdir(&ROOT_CRED, n(d), b"f").unwrap_err(),
        Errno::ENOTDIR
    );
    assert_eq!(
        fs.rename(&ROOT_CRED, n(d), b"f", n(d), b"e", libc::RENAME_NOREPLACE)
            .unwrap_err(),
        Errno::EEXIST
    );
    assert_eq!(
        fs.rename(
            &ROOT_CRED,
            n(d),
            b"f",
            n(d),
            b"g",
            libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE
        )
        .unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        fs.mknod(&ROOT_CRED, n(d), b"x", libc::S_IFDIR | 0o755, 0)
            .unwrap_err(),
        Errno::EINVAL
    );
    let p = fs
        .mknod(&ROOT_CRED, n(d), b"p", libc::S_IFIFO | 0o600, 0)
        .unwrap();
    assert_eq!(fs.getattr(n(p.id)).unwrap().kind, FileType::Fifo);
    let s = fs.symlink(&ROOT_CRED, n(d), b"s", b"f").unwrap();
    assert_eq!(s.attr.kind, FileType::Symlink);
    assert_eq!(fs.readlink(n(s.id)).unwrap(), b"f");
    let f = lookup(&fs, d, "f");
    let l = fs.link(&ROOT_CRED, n(f), n(ROOT), b"h").unwrap();
    assert_eq!(l.attr.nlink, 2);
    assert_eq!(l.id, f, "another name of the inode is the same node");
    assert_eq!(l.attr.ino, f, "st_ino is the node id");
    let e = lookup(&fs, d, "e");
    assert_eq!(
        fs.link(&ROOT_CRED, n(e), n(ROOT), b"e2").unwrap_err(),
        Errno::EPERM
    );
    // After a rename the node is still the inode: link needs no name.
    fs.rename(&ROOT_CRED, n(d), b"f", n(ROOT), b"moved", 0)
        .unwrap();
    let l2 = fs.link(&ROOT_CRED, n(f), n(ROOT), b"h2").unwrap();
    assert_eq!((l2.id, l2.attr.nlink), (f, 3));
    // An unlinked node cannot be linked again.
    fs.unlink(&ROOT_CRED, n(ROOT), b"moved").unwrap();
    fs.unlink(&ROOT_CRED, n(ROOT), b"h").unwrap();
    fs.unlink(&ROOT_CRED, n(ROOT), b"h2").unwrap();
    assert_eq!(
        fs.link(&ROOT_CRED, n(f), n(ROOT), b"h3").unwrap_err(),
        Errno::ENOENT
    );
}

#[test]
fn create_open_write_read_release() {
    let fs = fs_with(|_| {});
    let (e, fh) = fs
        .create(&ROOT_CRED, n(ROOT), b"new", 0o644, libc::O_RDWR)
        .unwrap();
    let (id, a) = (e.id, e.attr);
    assert_eq!((a.kind, a.perm, a.size), (FileType::Regular, 0o644, 0));
    assert_eq!(fs.write(h(fh), 3, b"abc").unwrap(), 3);
    assert_eq!(fs.getattr(n(id)).unwrap().size, 6, "write refreshed attrs");
    assert_eq!(fs.read(h(fh), 0, 100).unwrap(), b"\0\0\0abc");
    fs.flush(h(fh)).unwrap();
    fs.fsync(h(fh), true).unwrap();
    fs.release_file(h(fh)).unwrap();
    // O_EXCL on an existing name; without it the file is opened.
    assert_eq!(
        fs.create(
            &ROOT_CRED,
            n(ROOT),
            b"new",
            0o644,
            libc::O_RDWR | libc::O_EXCL
        )
        .unwrap_err(),
        Errno::EEXIST
    );
    let (e2, fh) = fs
        .create(&ROOT_CRED, n(ROOT), b"new", 0o600, libc::O_RDONLY)
        .unwrap();
    assert_eq!(e2.id, id);
    assert_eq!(fs.write(h(fh), 0, b"x").unwrap_err(), Errno::EBADF);
    fs.release_file(h(fh)).unwrap();
    let r = fs.stats().report();
    assert_eq!((r.open_files, r.lookups), (0, 2));
    fs.forget(n(id), 2);
}

/// Two threads look a name up and hand the ids to a third that forgets
/// them, while a fourth unlinks and recreates the name: every lookup
/// either finds a live dentry (and its reference keeps it alive until its
/// forget) or misses; nothing is freed twice or too early, and in the end
/// every dentry but the root can be freed.
#[test]
fn lookups_race_forgets_and_unlinks() {
    let fs = Arc::new(fs_with(|m| {
        m.write_file("f", b"x").unwrap();
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<u64>();
    let mut lookers = Vec::new();
    for _ in 0..2 {
        let (fs, stop, tx) = (fs.clone(), stop.clone(), tx.clone());
        lookers.push(std::thread::spawn(move || {
            let mut found = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match fs.lookup(&ROOT_CRED, n(ROOT), b"f") {
                    Ok(Some(e)) => {
                        let id = e.id;
                        assert_eq!(e.attr.kind, FileType::Regular);
                        // The node stays usable until forgotten.
                        assert_eq!(fs.getattr(n(id)).unwrap().kind, FileType::Regular);
                        tx.send(id).unwrap();
                        found += 1;
                    }
                    Ok(None) => {}
                    Err(e) => panic!("lookup: {e:?}"),
                }
            }
            found
        }));
    }
    drop(tx);
    let forgetter = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let mut count = 0u64;
            for id in rx {
                fs.forget(n(id), 1);
                count += 1;
            }
            count
        })
    };
    let churn = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match fs.unlink(&ROOT_CRED, n(ROOT), b"f") {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(e) => panic!("unlink: {e:?}"),
                }
                match fs.mknod(&ROOT_CRED, n(ROOT), b"f", libc::S_IFREG | 0o644, 0) {
                    Ok(e) => fs.forget(n(e.id), 1),
                    Err(Errno::EEXIST) => {}
                    Err(e) => panic!("mknod: {e:?}"),
                }
                fs.vfs().shrink(16);
                rounds += 1;
            }
            rounds
        })
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let found: u64 = lookers.into_iter().map(|t| t.join().unwrap()).sum();
    let forgotten = forgetter.join().unwrap();
    let rounds = churn.join().unwrap();
    assert_eq!(found, forgotten);
    assert!(found > 0 && rounds > 0, "found {found}, rounds {rounds}");
    let r = fs.stats().report();
    assert_eq!((r.referenced, r.lookups, r.bad_forgets), (0, 0, 0));
    fs.vfs().shrink(usize::MAX);
    assert_eq!(fs.vfs().counters().dentries(), 1);
}

/// A node is an inode: every name of a file answers with the backend's
/// inode number as node id and `st_ino`, the kernel's lookups of all its
/// names add up on one node, and readdir's `d_ino` is the same number.
#[test]
fn hard_links_are_one_node_numbered_by_the_backend() {
    let fs = fs_with(|m| {
        m.mkdir_p("d", 0o755).unwrap();
        m.write_file("a", b"abc").unwrap();
    });
    let a = lookup(&fs, ROOT, "a");
    let d = lookup(&fs, ROOT, "d");
    let l = fs.link(&ROOT_CRED, n(a), n(d), b"b").unwrap();
    assert_eq!(l.id, a);
    assert_eq!(lookup(&fs, d, "b"), a);
    let backend = fs.vfs().backend().lookup(1, b"a").unwrap().unwrap().ino;
    assert_eq!(a, backend, "node id = memfs inode number");
    let at = fs.getattr(n(a)).unwrap();
    assert_eq!((at.ino, at.nlink), (a, 2));
    // One node, three counted lookups (lookup a, link, lookup b), plus d.
    let r = fs.stats().report();
    assert_eq!((r.referenced, r.lookups), (2, 4));
    // readdir's d_ino equals the node id of every entry.
    let mut seen = Vec::new();
    fs.readdir(n(d), 0, &mut |ino, _, _, name| {
        seen.push((name.to_vec(), ino));
        false
    })
    .unwrap();
    assert!(seen.contains(&(b"b".to_vec(), a)), "{seen:?}");
    assert!(seen.contains(&(b".".to_vec(), d)), "{seen:?}");
    assert!(seen.contains(&(b"..".to_vec(), ROOT)), "{seen:?}");
    // A change through one name is the inode's: seen through the other.
    let set = dcache::fs::SetAttr {
        perm: Some(0o201),
        ..Default::default()
    };
    fs.setattr(&ROOT_CRED, n(a), &set, false).unwrap();
    let b = fs.lookup(&ROOT_CRED, n(d), b"b").unwrap().unwrap();
    assert_eq!((b.id, b.attr.perm, b.attr.nlink), (a, 0o201, 2));
    // The name the node came through goes; the node still is the file.
    fs.unlink(&ROOT_CRED, n(ROOT), b"a").unwrap();
    assert_eq!(fs.getattr(n(a)).unwrap().nlink, 1);
    let l2 = fs.link(&ROOT_CRED, n(a), n(ROOT), b"again").unwrap();
    assert_eq!((l2.id, l2.attr.nlink), (a, 2));
    fs.forget(n(a), 5);
    fs.forget(n(d), 1);
    let r = fs.stats().report();
    assert_eq!((r.referenced, r.lookups, r.bad_forgets), (0, 0, 0));
    // Looked up again after being forgotten: the same number.
    assert_eq!(lookup(&fs, ROOT, "again"), a);
    fs.forget(n(a), 1);
}

/// A node id the kernel never got is refused with ESTALE, not trusted.
#[test]
fn unknown_node_ids_are_refused() {
    let fs = fs_with(|m| {
        m.write_file("f", b"").unwrap();
    });
    for id in [0, 2, 12345, u64::MAX] {
        assert_eq!(fs.getattr(n(id)).unwrap_err(), Errno::ESTALE);
        assert_eq!(
            fs.lookup(&ROOT_CRED, n(id), b"f").unwrap_err(),
            Errno::ESTALE
        );
        fs.forget(n(id), 1);
    }
    assert_eq!(fs.stats().report().bad_forgets, 4);
}
