//! The FUSE frontend's request handlers without the kernel: node ids as
//! counted dentry references (hand-out, forget, the lookup-vs-forget race,
//! refused over-forgets), readdirplus counting only what fits, handles,
//! and the errnos the handlers pass through.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use dcache::fs::memfs::MemFs;
use dcache::fs::{Ctx, FileType};
use dcache::fuse::fs::FsConfig;
use dcache::fuse::options::Timeouts;
use dcache::fuse::DcacheFs;
use dcache::{Errno, Vfs};

const ROOT: u64 = 1;

fn fs_with(populate: impl FnOnce(&MemFs)) -> DcacheFs {
    let m = MemFs::new();
    populate(&m);
    let vfs = Vfs::new(Arc::new(m)).unwrap();
    DcacheFs::new(
        vfs,
        FsConfig {
            timeouts: Timeouts::NONE,
            readdirplus: true,
            direct_io: false,
            log: false,
        },
    )
}

fn lookup(fs: &DcacheFs, parent: u64, name: &str) -> u64 {
    fs.do_lookup(parent, name.as_bytes())
        .unwrap()
        .unwrap_or_else(|| panic!("{name} missing"))
        .0
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
    assert_eq!(d1, d2, "one dentry, one node id");
    assert_ne!(d1, ROOT);
    let f = lookup(&fs, d1, "f");
    let r = fs.stats().report();
    assert_eq!((r.referenced, r.lookups), (2, 3));
    // However often the kernel looks a node up, it pins the dentry with
    // one reference (here: the kernel's and the one this lookup holds).
    for _ in 0..5 {
        lookup(&fs, d1, "f");
    }
    let probe = fs.vfs().lookup(dcache::At::Root, "d/f", false).unwrap();
    assert_eq!(probe.count(), 2);
    drop(probe);
    // A missing name is a negative answer, with nothing handed out.
    assert_eq!(fs.do_lookup(d1, b"nope").unwrap(), None);
    assert_eq!(fs.stats().report().lookups, 8);
    // getattr through the node id.
    let a = fs.do_getattr(f).unwrap();
    assert_eq!((a.kind, a.size), (FileType::Regular, 1));
    assert_eq!(fs.do_getattr(ROOT).unwrap().kind, FileType::Directory);

    fs.do_forget(f, 3);
    assert_eq!(fs.stats().report().referenced, 2, "f still held");
    fs.do_forget(f, 3);
    fs.do_forget(d1, 2);
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
    fs.do_forget(f, 1);
    assert_eq!(fs.stats().report().referenced, 0);
    // Still cached (nothing shrank it), but no longer the kernel's.
    let probe = fs.vfs().lookup(dcache::At::Root, "f", false).unwrap();
    assert_eq!(probe.count(), 1, "only the probe holds it");
    assert_eq!(lookup(&fs, ROOT, "f"), f, "same dentry, same node id");
    assert_eq!(probe.count(), 2, "the kernel's reference is back");
    for _ in 0..3 {
        lookup(&fs, ROOT, "f");
    }
    assert_eq!(probe.count(), 2, "held lookups take no reference");
    let r = fs.stats().report();
    assert_eq!((r.referenced, r.lookups), (1, 4));
    fs.do_forget(f, 4);
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
    fs.do_forget(f, 2);
    let r = fs.stats().report();
    assert_eq!((r.bad_forgets, r.lookups), (1, 1));
    // The node is still usable, and forgets properly afterwards.
    assert_eq!(fs.do_getattr(f).unwrap().size, 0);
    fs.do_forget(f, 1);
    assert_eq!(fs.stats().report().lookups, 0);
    // Forgetting the root is ignored: it is never counted.
    fs.do_forget(ROOT, 1);
    assert_eq!(fs.do_getattr(ROOT).unwrap().kind, FileType::Directory);
}

#[test]
fn an_unlinked_node_stays_valid_until_forgotten() {
    let fs = fs_with(|m| {
        m.write_file("f", b"abc").unwrap();
    });
    let c = fs.vfs().counters();
    let f = lookup(&fs, ROOT, "f");
    let fh = fs.do_open(f, libc::O_RDONLY).unwrap();
    fs.do_unlink(ROOT, b"f").unwrap();
    assert_eq!(fs.do_lookup(ROOT, b"f").unwrap(), None);
    // The kernel's node and the open handle still reach the file.
    assert_eq!(fs.do_read(fh, 0, 10).unwrap(), b"abc");
    assert_eq!(fs.do_getattr(f).unwrap().size, 3);
    fs.do_release(fh).unwrap();
    assert_eq!(fs.stats().report().open_files, 0);
    fs.do_forget(f, 1);
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
    fs.do_readdirplus(ROOT, 0, &mut |id, off, name, a| {
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
    fs.do_readdirplus(ROOT, last, &mut |id, _, name, _| {
        rest.push((id, String::from_utf8(name.to_vec()).unwrap()));
        false
    })
    .unwrap();
    assert_eq!(rest.len(), 7);
    assert_eq!(fs.stats().report().lookups, 10);
    for (id, _, name, _) in got.iter().skip(2) {
        assert_eq!(lookup(&fs, ROOT, name), *id);
        fs.do_forget(*id, 2);
    }
    for (id, _) in rest {
        fs.do_forget(id, 1);
    }
    assert_eq!(fs.stats().report().lookups, 0);
}

#[test]
fn namespace_requests_pass_errnos_through() {
    let fs = fs_with(|m| {
        m.mkdir_p("d/e", 0o755).unwrap();
        m.write_file("d/f", b"x").unwrap();
    });
    let ctx = Ctx { uid: 0, gid: 0 };
    let d = lookup(&fs, ROOT, "d");
    assert_eq!(fs.do_mkdir(d, b"e", 0o755, ctx).unwrap_err(), Errno::EEXIST);
    assert_eq!(fs.do_rmdir(ROOT, b"d").unwrap_err(), Errno::ENOTEMPTY);
    assert_eq!(fs.do_unlink(d, b"e").unwrap_err(), Errno::EISDIR);
    assert_eq!(fs.do_rmdir(d, b"f").unwrap_err(), Errno::ENOTDIR);
    assert_eq!(
        fs.do_rename(d, b"f", d, b"e", libc::RENAME_NOREPLACE)
            .unwrap_err(),
        Errno::EEXIST
    );
    assert_eq!(
        fs.do_rename(
            d,
            b"f",
            d,
            b"g",
            libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE
        )
        .unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        fs.do_mknod(d, b"x", libc::S_IFDIR | 0o755, 0, ctx)
            .unwrap_err(),
        Errno::EINVAL
    );
    let (p, _) = fs.do_mknod(d, b"p", libc::S_IFIFO | 0o600, 0, ctx).unwrap();
    assert_eq!(fs.do_getattr(p).unwrap().kind, FileType::Fifo);
    let (s, a) = fs.do_symlink(d, b"s", b"f", ctx).unwrap();
    assert_eq!(a.kind, FileType::Symlink);
    assert_eq!(fs.do_readlink(s).unwrap(), b"f");
    let f = lookup(&fs, d, "f");
    let (h, a) = fs.do_link(f, ROOT, b"h").unwrap();
    assert_eq!(a.nlink, 2);
    assert_ne!(h, f, "another name is another dentry, so another node");
    let e = lookup(&fs, d, "e");
    assert_eq!(fs.do_link(e, ROOT, b"e2").unwrap_err(), Errno::EPERM);
    // After a rename the node follows the file: link works by its new name.
    fs.do_rename(d, b"f", ROOT, b"moved", 0).unwrap();
    let (_, a) = fs.do_link(f, ROOT, b"h2").unwrap();
    assert_eq!(a.nlink, 3);
    // An unlinked node cannot be linked again.
    fs.do_unlink(ROOT, b"moved").unwrap();
    fs.do_unlink(ROOT, b"h").unwrap();
    fs.do_unlink(ROOT, b"h2").unwrap();
    assert_eq!(fs.do_link(f, ROOT, b"h3").unwrap_err(), Errno::ENOENT);
}

#[test]
fn create_open_write_read_release() {
    let fs = fs_with(|_| {});
    let ctx = Ctx { uid: 0, gid: 0 };
    let ((id, a), fh) = fs
        .do_create(ROOT, b"new", 0o644, libc::O_RDWR, ctx)
        .unwrap();
    assert_eq!((a.kind, a.perm, a.size), (FileType::Regular, 0o644, 0));
    assert_eq!(fs.do_write(fh, 3, b"abc").unwrap(), 3);
    assert_eq!(fs.do_getattr(id).unwrap().size, 6, "write refreshed attrs");
    assert_eq!(fs.do_read(fh, 0, 100).unwrap(), b"\0\0\0abc");
    fs.do_flush(fh).unwrap();
    fs.do_fsync(fh, true).unwrap();
    fs.do_release(fh).unwrap();
    // O_EXCL on an existing name; without it the file is opened.
    assert_eq!(
        fs.do_create(ROOT, b"new", 0o644, libc::O_RDWR | libc::O_EXCL, ctx)
            .unwrap_err(),
        Errno::EEXIST
    );
    let ((id2, _), fh) = fs
        .do_create(ROOT, b"new", 0o600, libc::O_RDONLY, ctx)
        .unwrap();
    assert_eq!(id2, id);
    assert_eq!(fs.do_write(fh, 0, b"x").unwrap_err(), Errno::EBADF);
    fs.do_release(fh).unwrap();
    let r = fs.stats().report();
    assert_eq!((r.open_files, r.lookups), (0, 2));
    fs.do_forget(id, 2);
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
                match fs.do_lookup(ROOT, b"f") {
                    Ok(Some((id, a))) => {
                        assert_eq!(a.kind, FileType::Regular);
                        // The node stays usable until forgotten.
                        assert_eq!(fs.do_getattr(id).unwrap().kind, FileType::Regular);
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
            let mut n = 0u64;
            for id in rx {
                fs.do_forget(id, 1);
                n += 1;
            }
            n
        })
    };
    let churn = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let ctx = Ctx { uid: 0, gid: 0 };
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match fs.do_unlink(ROOT, b"f") {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(e) => panic!("unlink: {e:?}"),
                }
                match fs.do_mknod(ROOT, b"f", libc::S_IFREG | 0o644, 0, ctx) {
                    Ok((id, _)) => fs.do_forget(id, 1),
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
