//! The kernfs backend: tree building, errors, the revision logic behind
//! cached entries, the lockless attribute copy, and reads racing removal.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use dcache::fs::kernfs::{KernFs, LockKind, Revalidate, ShowFn, StoreFn, Variant, ROOT_INO};
use dcache::fs::{Ctx, FileSystem, FileType, RenameFlags, SetAttr, Validity};
use dcache::Errno;

fn text(s: &'static str) -> ShowFn {
    Box::new(move || s.as_bytes().to_vec())
}

/// Counts how many times the closure holding it was dropped.
struct DropCount(Arc<AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counted_show(drops: &Arc<AtomicUsize>, s: &'static str) -> ShowFn {
    let token = DropCount(drops.clone());
    Box::new(move || {
        let _keep = &token;
        s.as_bytes().to_vec()
    })
}

fn all() -> Vec<KernFs> {
    Variant::ALL.into_iter().map(KernFs::with_variant).collect()
}

fn read_all(fs: &KernFs, ino: u64) -> Result<Vec<u8>, Errno> {
    let fh = fs.open(ino, libc::O_RDONLY)?;
    let mut buf = [0u8; 256];
    let n = fs.read(ino, fh, 0, &mut buf)?;
    fs.release(ino, fh)?;
    Ok(buf[..n].to_vec())
}

#[test]
fn variants_by_name() {
    for (name, lock, reval) in [
        ("mutex", LockKind::Mutex, Revalidate::LockedPositiveOnly),
        ("rwlock", LockKind::RwLock, Revalidate::Locked),
        ("rcu", LockKind::RwLock, Revalidate::Lockless),
    ] {
        let fs = KernFs::for_variant(name).unwrap();
        assert_eq!(fs.lock_kind(), lock);
        assert_eq!(fs.revalidate_mode(), reval);
        assert_eq!(name.parse::<Variant>().unwrap().name(), name);
    }
    assert_eq!(KernFs::for_variant("spinlock").unwrap_err(), Errno::EINVAL);
}

#[test]
fn tree_shape_and_attributes() {
    for fs in all() {
        assert_eq!(fs.root(), ROOT_INO);
        let devices = fs.create_dir(ROOT_INO, "devices", 0o755).unwrap();
        let cpu = fs.create_dir(devices, "cpu", 0o755).unwrap();
        let online = fs
            .create_file(cpu, "online", 0o444, text("0-3\n"), None)
            .unwrap();
        let bus = fs.create_dir(ROOT_INO, "bus", 0o755).unwrap();
        let link = fs.create_link(bus, "cpu", cpu).unwrap();
        assert!(ROOT_INO < devices && devices < cpu && cpu < online && online < bus && bus < link);

        let a = fs.lookup(devices, b"cpu").unwrap().unwrap();
        assert_eq!(
            (a.ino, a.kind, a.nlink, a.perm),
            (cpu, FileType::Directory, 2, 0o755)
        );
        let a = fs.getattr(online).unwrap();
        assert_eq!(
            (a.kind, a.size, a.nlink, a.perm),
            (FileType::Regular, 4096, 1, 0o444)
        );
        assert_eq!(
            fs.getattr(ROOT_INO).unwrap().nlink,
            4,
            "root has two subdirectories"
        );
        assert_eq!(fs.getattr(link).unwrap().kind, FileType::Symlink);
        assert_eq!(fs.readlink(link).unwrap(), b"../devices/cpu");
        assert_eq!(fs.readlink(online).unwrap_err(), Errno::EINVAL);
        assert_eq!(fs.resolve("/devices//cpu/online").unwrap(), online);
        assert_eq!(fs.resolve("devices/nope").unwrap_err(), Errno::ENOENT);
        assert_eq!(read_all(&fs, online).unwrap(), b"0-3\n");
        assert_eq!(fs.node_count(), 6);
    }
}

#[test]
fn readdir_cookies_survive_changes() {
    let fs = KernFs::with_variant(Variant::Rcu);
    let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
    let a = fs.create_file(d, "a", 0o444, text("a"), None).unwrap();
    let b = fs.create_file(d, "b", 0o444, text("b"), None).unwrap();
    let mut seen = Vec::new();
    fs.readdir(d, 0, &mut |e| {
        seen.push((e.name.clone(), e.ino, e.offset));
        true
    })
    .unwrap();
    let names: Vec<_> = seen.iter().map(|s| s.0.clone()).collect();
    assert_eq!(names, [&b"."[..], b"..", b"a", b"b"]);
    assert_eq!(
        (seen[0].1, seen[1].1, seen[2].1, seen[3].1),
        (d, ROOT_INO, a, b)
    );
    // Stop after "a", remove it, add "c": continuing after a's cookie gives
    // b then c, nothing twice.
    let after_a = seen[2].2;
    fs.remove(a).unwrap();
    fs.create_file(d, "c", 0o444, text("c"), None).unwrap();
    let mut rest = Vec::new();
    fs.readdir(d, after_a, &mut |e| {
        rest.push(e.name);
        true
    })
    .unwrap();
    assert_eq!(rest, [b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(fs.readdir(a, 0, &mut |_| true).unwrap_err(), Errno::ENOENT);
    assert_eq!(fs.readdir(b, 0, &mut |_| true).unwrap_err(), Errno::ENOTDIR);
}

#[test]
fn errors_as_sysfs_gives_them() {
    for fs in all() {
        let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
        let f = fs.create_file(d, "f", 0o644, text("x"), None).unwrap();
        assert_eq!(fs.lookup(f, b"x").unwrap_err(), Errno::ENOTDIR);
        assert_eq!(fs.lookup(999, b"x").unwrap_err(), Errno::ENOENT);
        assert_eq!(fs.lookup(d, b"nope").unwrap(), None);
        assert_eq!(fs.getattr(999).unwrap_err(), Errno::ENOENT);
        assert_eq!(fs.getattr(0).unwrap_err(), Errno::ENOENT);
        assert_eq!(fs.getattr(u64::MAX).unwrap_err(), Errno::ENOENT);
        // Kernel-side misuse.
        assert_eq!(fs.create_dir(d, "f", 0o755).unwrap_err(), Errno::EEXIST);
        assert_eq!(fs.create_dir(f, "x", 0o755).unwrap_err(), Errno::ENOTDIR);
        assert_eq!(fs.create_dir(999, "x", 0o755).unwrap_err(), Errno::ENOENT);
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
            assert_eq!(fs.create_dir(d, bad, 0o755).unwrap_err(), Errno::EINVAL);
        }
        assert_eq!(
            fs.create_dir(d, [b'x'; 256], 0o755).unwrap_err(),
            Errno::ENAMETOOLONG
        );
        assert_eq!(fs.create_link(d, "l", 999).unwrap_err(), Errno::ENOENT);
        assert_eq!(fs.remove(ROOT_INO).unwrap_err(), Errno::EBUSY);
        assert_eq!(fs.remove(999).unwrap_err(), Errno::ENOENT);
        assert_eq!(fs.rename(d, d, "x").unwrap_err(), Errno::EINVAL);
        assert_eq!(fs.rename(ROOT_INO, d, "x").unwrap_err(), Errno::EINVAL);
        assert_eq!(fs.rename(f, f, "x").unwrap_err(), Errno::ENOTDIR);
        assert_eq!(fs.set_size(d, 1).unwrap_err(), Errno::EINVAL);
        // Userspace cannot change the namespace.
        let c = Ctx::ROOT;
        assert_eq!(fs.create(d, b"n", 0o644, c).unwrap_err(), Errno::EROFS);
        assert_eq!(fs.mkdir(d, b"n", 0o755, c).unwrap_err(), Errno::EROFS);
        assert_eq!(fs.unlink(d, b"f").unwrap_err(), Errno::EROFS);
        assert_eq!(fs.rmdir(ROOT_INO, b"d").unwrap_err(), Errno::EROFS);
        assert_eq!(fs.symlink(d, b"s", b"f", c).unwrap_err(), Errno::EROFS);
        assert_eq!(
            FileSystem::rename(&fs, d, b"f", d, b"g", RenameFlags::NONE).unwrap_err(),
            Errno::EROFS
        );
        assert_eq!(
            fs.mknod(d, b"p", FileType::Fifo, 0o644, 0, c).unwrap_err(),
            Errno::EPERM
        );
        assert_eq!(
            fs.lookup(d, b"f").unwrap().unwrap().ino,
            f,
            "nothing changed"
        );
    }
}

#[test]
fn open_read_write() {
    for fs in all() {
        let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
        let stored = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = stored.clone();
        let store: StoreFn = Box::new(move |data: &[u8]| {
            s2.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        });
        let rw = fs
            .create_file(d, "rw", 0o644, text("hello world"), Some(store))
            .unwrap();
        let ro = fs.create_file(d, "ro", 0o444, text("ro"), None).unwrap();
        let l = fs.create_link(d, "l", ro).unwrap();

        let fh = fs.open(rw, libc::O_RDWR).unwrap();
        let mut buf = [0u8; 5];
        assert_eq!(fs.read(rw, fh, 0, &mut buf).unwrap(), 5);
        assert_eq!(&buf, b"hello");
        assert_eq!(fs.read(rw, fh, 6, &mut buf).unwrap(), 5);
        assert_eq!(&buf, b"world");
        assert_eq!(fs.read(rw, fh, 11, &mut buf).unwrap(), 0);
        assert_eq!(fs.read(rw, fh, u64::MAX, &mut buf).unwrap(), 0);
        assert_eq!(fs.write(rw, fh, 0, b"1\n").unwrap(), 2);
        assert_eq!(&*stored.lock().unwrap(), b"1\n");

        let wo = fs.open(rw, libc::O_WRONLY).unwrap();
        assert_eq!(fs.read(rw, wo, 0, &mut buf).unwrap_err(), Errno::EBADF);
        let rdonly = fs.open(ro, libc::O_RDONLY).unwrap();
        assert_eq!(fs.write(ro, rdonly, 0, b"x").unwrap_err(), Errno::EBADF);
        assert_eq!(fs.open(ro, libc::O_WRONLY).unwrap_err(), Errno::EACCES);
        assert_eq!(fs.open(d, libc::O_RDWR).unwrap_err(), Errno::EISDIR);
        assert_eq!(fs.open(l, libc::O_RDONLY).unwrap_err(), Errno::ELOOP);
        assert_eq!(fs.open(ro, libc::O_ACCMODE).unwrap_err(), Errno::EINVAL);
        let dh = fs.open(d, libc::O_RDONLY).unwrap();
        assert_eq!(fs.read(d, dh, 0, &mut buf).unwrap_err(), Errno::EISDIR);

        fs.remove(rw).unwrap();
        assert_eq!(fs.read(rw, fh, 0, &mut buf).unwrap_err(), Errno::ENOENT);
        assert_eq!(fs.write(rw, fh, 0, b"x").unwrap_err(), Errno::ENOENT);
        assert_eq!(fs.open(rw, libc::O_RDONLY).unwrap_err(), Errno::ENOENT);
    }
}

#[test]
fn remove_is_recursive_and_frees_callbacks() {
    for fs in all() {
        let drops = Arc::new(AtomicUsize::new(0));
        let a = fs.create_dir(ROOT_INO, "a", 0o755).unwrap();
        let b = fs.create_dir(a, "b", 0o755).unwrap();
        let f1 = fs
            .create_file(a, "f1", 0o444, counted_show(&drops, "1"), None)
            .unwrap();
        let f2 = fs
            .create_file(b, "f2", 0o444, counted_show(&drops, "2"), None)
            .unwrap();
        let keep = fs
            .create_file(ROOT_INO, "keep", 0o444, counted_show(&drops, "k"), None)
            .unwrap();
        let cookie = fs.dir_cookie(b);
        fs.remove(a).unwrap();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            2,
            "both callbacks dropped by remove"
        );
        for ino in [a, b, f1, f2] {
            assert_eq!(fs.getattr(ino).unwrap_err(), Errno::ENOENT);
        }
        assert_eq!(fs.lookup(ROOT_INO, b"a").unwrap(), None);
        assert_eq!(fs.lookup(b, b"f2").unwrap_err(), Errno::ENOENT);
        assert_eq!(
            fs.revalidate(b, b"x", None, cookie, false),
            Validity::Invalid
        );
        assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 2);
        assert_eq!(read_all(&fs, keep).unwrap(), b"k");
        drop(fs);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            3,
            "dropping the fs drops the rest"
        );
    }
}

/// Blocking-mode answer for a negative entry, for the variants that keep
/// negative entries.
fn neg(fs: &KernFs, dir: u64, name: &[u8], cookie: u64) -> Validity {
    let v = fs.revalidate(dir, name, None, cookie, false);
    if fs.revalidate_mode() == Revalidate::Lockless {
        assert_eq!(
            v,
            fs.revalidate(dir, name, None, cookie, true),
            "rcu and blocking agree"
        );
    }
    v
}

#[test]
fn negative_entry_goes_stale_exactly_when_its_directory_changes() {
    for v in [Variant::RwLock, Variant::Rcu] {
        let fs = KernFs::with_variant(v);
        let a = fs.create_dir(ROOT_INO, "a", 0o755).unwrap();
        let sub = fs.create_dir(a, "sub", 0o755).unwrap();
        let other = fs.create_dir(ROOT_INO, "other", 0o755).unwrap();
        let f = fs.create_file(a, "f", 0o644, text("f"), None).unwrap();

        let cookie = fs.dir_cookie(a);
        assert_eq!(fs.lookup(a, b"x").unwrap(), None);
        assert_eq!(neg(&fs, a, b"x", cookie), Validity::Valid, "{v}");
        // Changes elsewhere leave it alone: another directory, a
        // subdirectory's entries, attributes of the directory or its files.
        fs.create_file(other, "x", 0o644, text("x"), None).unwrap();
        fs.create_file(sub, "x", 0o644, text("x"), None).unwrap();
        fs.set_perm(a, 0o700).unwrap();
        fs.set_owner(f, 5, 5).unwrap();
        fs.setattr(
            a,
            &SetAttr {
                perm: Some(0o755),
                ..SetAttr::default()
            },
            Ctx::ROOT,
        )
        .unwrap();
        let _ = read_all(&fs, f).unwrap();
        assert_eq!(neg(&fs, a, b"x", cookie), Validity::Valid, "{v}");
        // Any change to the directory's own entries makes it stale, even one
        // under a different name.
        fs.create_file(a, "y", 0o644, text("y"), None).unwrap();
        assert_eq!(neg(&fs, a, b"x", cookie), Validity::Invalid, "{v}");

        // Each kind of change to `a`'s entries, starting from a fresh cookie.
        type Change = Box<dyn Fn(&KernFs, u64)>;
        let changes: Vec<(&str, Change)> = vec![
            (
                "remove",
                Box::new(|fs: &KernFs, a| {
                    fs.remove(fs.lookup(a, b"y").unwrap().unwrap().ino).unwrap()
                }),
            ),
            (
                "rename in",
                Box::new(|fs: &KernFs, a| {
                    let o = fs.resolve("other/x").unwrap();
                    fs.rename(o, a, "moved").unwrap();
                }),
            ),
            (
                "rename out",
                Box::new(|fs: &KernFs, _a| {
                    let m = fs.resolve("a/moved").unwrap();
                    fs.rename(m, fs.resolve("other").unwrap(), "back").unwrap();
                }),
            ),
            (
                "rename within",
                Box::new(|fs: &KernFs, a| {
                    fs.rename(fs.resolve("a/f").unwrap(), a, "g").unwrap();
                }),
            ),
            (
                "mkdir",
                Box::new(|fs: &KernFs, a| {
                    fs.create_dir(a, "d2", 0o755).unwrap();
                }),
            ),
            (
                "symlink",
                Box::new(|fs: &KernFs, a| {
                    fs.create_link(a, "l", ROOT_INO).unwrap();
                }),
            ),
        ];
        for (what, change) in changes {
            let cookie = fs.dir_cookie(a);
            assert_eq!(fs.lookup(a, b"x").unwrap(), None);
            assert_eq!(
                neg(&fs, a, b"x", cookie),
                Validity::Valid,
                "{v} before {what}"
            );
            change(&fs, a);
            assert_eq!(
                neg(&fs, a, b"x", cookie),
                Validity::Invalid,
                "{v} after {what}"
            );
            assert_eq!(
                neg(&fs, a, b"x", fs.dir_cookie(a)),
                Validity::Valid,
                "{v} re-looked-up"
            );
        }
    }
}

#[test]
fn revalidate_answers_per_variant() {
    for v in Variant::ALL {
        let fs = KernFs::with_variant(v);
        let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
        let f = fs.create_file(d, "f", 0o444, text("f"), None).unwrap();
        let cookie = fs.dir_cookie(d);
        let pos_rcu = fs.revalidate(d, b"f", Some(f), cookie, true);
        let pos_blk = fs.revalidate(d, b"f", Some(f), cookie, false);
        let neg_rcu = fs.revalidate(d, b"x", None, cookie, true);
        let neg_blk = fs.revalidate(d, b"x", None, cookie, false);
        let expect = match v {
            // Old kernfs: never in rcu-walk; negatives never trusted.
            Variant::Mutex => [
                Validity::NeedBlocking,
                Validity::Valid,
                Validity::NeedBlocking,
                Validity::Invalid,
            ],
            // The 5.15 fix: still never in rcu-walk; negatives by revision.
            Variant::RwLock => [
                Validity::NeedBlocking,
                Validity::Valid,
                Validity::NeedBlocking,
                Validity::Valid,
            ],
            // dcache: decided in rcu-walk.
            Variant::Rcu => [Validity::Valid; 4],
        };
        assert_eq!([pos_rcu, pos_blk, neg_rcu, neg_blk], expect, "{v}");
        assert!(fs.needs_revalidate());
        // A wrong name or parent for a positive entry is stale.
        assert_eq!(
            fs.revalidate(ROOT_INO, b"f", Some(f), fs.dir_cookie(ROOT_INO), false),
            Validity::Invalid,
            "{v}"
        );
    }
}

#[test]
fn positive_entries_stale_after_remove_and_rename_only() {
    for v in Variant::ALL {
        let fs = KernFs::with_variant(v);
        let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
        let e = fs.create_dir(ROOT_INO, "e", 0o755).unwrap();
        let f = fs.create_file(d, "f", 0o444, text("f"), None).unwrap();
        let g = fs.create_file(d, "g", 0o444, text("g"), None).unwrap();
        let modes: &[bool] = if v == Variant::Rcu {
            &[true, false]
        } else {
            &[false]
        };
        for &rcu in modes {
            let check = |name: &[u8], ino, cookie| fs.revalidate(d, name, Some(ino), cookie, rcu);
            let cf = fs.dir_cookie(d);
            let cg = cf;
            // A sibling appearing does not disturb positive entries.
            let s = fs
                .create_file(d, format!("s{rcu}"), 0o444, text("s"), None)
                .unwrap();
            fs.set_perm(f, 0o400).unwrap();
            assert_eq!(check(b"f", f, cf), Validity::Valid, "{v} rcu={rcu}");
            fs.remove(s).unwrap();
            assert_eq!(check(b"f", f, cf), Validity::Valid, "{v} rcu={rcu}");
            // Renamed: the old name is stale, the new one is fine once
            // looked up again.
            fs.rename(f, d, "f2").unwrap();
            assert_eq!(check(b"f", f, cf), Validity::Invalid, "{v} rcu={rcu}");
            let c2 = fs.dir_cookie(d);
            assert_eq!(fs.lookup(d, b"f2").unwrap().unwrap().ino, f);
            assert_eq!(check(b"f2", f, c2), Validity::Valid, "{v} rcu={rcu}");
            // Moved away and back under the same name: still stale for the
            // old entry.
            fs.rename(f, e, "f").unwrap();
            assert_eq!(check(b"f2", f, c2), Validity::Invalid, "{v} rcu={rcu}");
            fs.rename(f, d, "f").unwrap();
            if v == Variant::Rcu {
                assert_eq!(check(b"f2", f, c2), Validity::Invalid, "{v} rcu={rcu}");
            }
            // Removed: stale.
            assert_eq!(check(b"g", g, cg), Validity::Valid, "{v} rcu={rcu}");
            if !rcu {
                fs.remove(g).unwrap();
                assert_eq!(check(b"g", g, cg), Validity::Invalid, "{v} rcu={rcu}");
            }
        }
    }
}

#[test]
fn attribute_copy_refreshes_only_after_a_change() {
    let fs = KernFs::with_variant(Variant::Rcu);
    let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
    let f = fs.create_file(d, "f", 0o444, text("f"), None).unwrap();
    assert_eq!(
        fs.getattr_cached(f),
        None,
        "no copy before the first getattr"
    );
    let a1 = fs.getattr(f).unwrap();
    assert_eq!(fs.getattr_cached(f), Some(a1));
    assert_eq!(fs.getattr(f).unwrap(), a1);

    fs.set_perm(f, 0o400).unwrap();
    assert_eq!(fs.getattr_cached(f), None, "stale after the change");
    let a2 = fs.getattr(f).unwrap();
    assert_eq!(a2.perm, 0o400);
    assert_eq!(fs.getattr_cached(f), Some(a2));

    fs.set_owner(f, 7, 8).unwrap();
    fs.set_size(f, 10).unwrap();
    let a3 = fs.getattr(f).unwrap();
    assert_eq!((a3.uid, a3.gid, a3.size), (7, 8, 10));
    assert_eq!(fs.getattr_cached(f), Some(a3));

    // A directory's copy follows its entries (nlink, times).
    let before = fs.getattr(d).unwrap();
    assert!(fs.getattr_cached(d).is_some());
    fs.create_dir(d, "sub", 0o755).unwrap();
    assert_eq!(fs.getattr_cached(d), None);
    assert_eq!(fs.getattr(d).unwrap().nlink, before.nlink + 1);

    // lookup refreshes the copy too.
    fs.set_perm(f, 0o444).unwrap();
    let looked = fs.lookup(d, b"f").unwrap().unwrap();
    assert_eq!(fs.getattr_cached(f), Some(looked));

    // setattr from userspace: owner rules, then the copy goes stale.
    let user = Ctx {
        uid: 1000,
        gid: 1000,
    };
    let chmod = SetAttr {
        perm: Some(0o644),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(f, &chmod, user).unwrap_err(), Errno::EPERM);
    let chown = SetAttr {
        uid: Some(1000),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(f, &chown, user).unwrap_err(), Errno::EPERM);
    fs.setattr(f, &chown, Ctx::ROOT).unwrap();
    assert_eq!(fs.getattr_cached(f), None);
    let trunc = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(
        fs.setattr(f, &trunc, user).unwrap().size,
        10,
        "size ignored"
    );
    assert_eq!(
        fs.setattr(f, &chmod, user).unwrap().perm,
        0o644,
        "owner may chmod"
    );
    assert_eq!(fs.getattr(f).unwrap().perm, 0o644);

    fs.remove(f).unwrap();
    assert_eq!(fs.getattr_cached(f), None);
    assert_eq!(fs.getattr(f).unwrap_err(), Errno::ENOENT);
}

#[test]
fn remove_waits_for_a_reader_inside_show() {
    for v in Variant::ALL {
        let fs = Arc::new(KernFs::with_variant(v));
        let drops = Arc::new(AtomicUsize::new(0));
        let entered = Arc::new(Barrier::new(2));
        let release = Arc::new(Barrier::new(2));
        let token = DropCount(drops.clone());
        let (e2, r2) = (entered.clone(), release.clone());
        let f = fs
            .create_file(
                ROOT_INO,
                "slow",
                0o444,
                Box::new(move || {
                    let _keep = &token;
                    e2.wait();
                    r2.wait();
                    b"done".to_vec()
                }),
                None,
            )
            .unwrap();
        let reader = {
            let fs = fs.clone();
            std::thread::spawn(move || read_all(&fs, f))
        };
        entered.wait();
        let removed = Arc::new(AtomicBool::new(false));
        let remover = {
            let (fs, removed) = (fs.clone(), removed.clone());
            std::thread::spawn(move || {
                fs.remove(f).unwrap();
                removed.store(true, Ordering::SeqCst);
            })
        };
        // The name disappears before remove waits for readers.
        while fs.lookup(ROOT_INO, b"slow").unwrap().is_some() {
            std::thread::yield_now();
        }
        assert_eq!(fs.open(f, libc::O_RDONLY).unwrap_err(), Errno::ENOENT);
        assert!(
            !removed.load(Ordering::SeqCst),
            "{v}: remove returned while show ran"
        );
        assert_eq!(drops.load(Ordering::SeqCst), 0, "{v}");
        release.wait();
        assert_eq!(reader.join().unwrap().unwrap(), b"done");
        remover.join().unwrap();
        assert!(removed.load(Ordering::SeqCst));
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "{v}: callbacks freed after the reader left"
        );
    }
}

/// Readers look up, revalidate, stat and read while a writer creates and
/// removes entries. Checked: reads give the right bytes or ENOENT; an entry
/// looked up before the directory changed twice is stale; every callback is
/// freed once.
#[test]
fn readers_race_a_writer() {
    const STEPS: usize = if cfg!(miri) { 12 } else { 300 };
    for v in Variant::ALL {
        let fs = Arc::new(KernFs::with_variant(v));
        let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
        let stable = fs
            .create_file(d, "stable", 0o444, text("stable"), None)
            .unwrap();
        let drops = Arc::new(AtomicUsize::new(0));
        let steps = Arc::new(AtomicUsize::new(0));
        let created = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..3)
            .map(|r| {
                let (fs, steps) = (fs.clone(), steps.clone());
                std::thread::spawn(move || {
                    let mut checked = 0usize;
                    while steps.load(Ordering::SeqCst) < STEPS {
                        let cookie = fs.dir_cookie(d);
                        let got = fs.lookup(d, b"x").unwrap();
                        let seen = steps.load(Ordering::SeqCst);
                        if let Some(a) = &got {
                            match read_all(&fs, a.ino) {
                                Ok(data) => assert_eq!(data, b"x"),
                                Err(e) => assert_eq!(e, Errno::ENOENT),
                            }
                        }
                        assert_eq!(read_all(&fs, stable).unwrap(), b"stable");
                        assert_eq!(fs.getattr(stable).unwrap().ino, stable);
                        let rcu = r % 2 == 0;
                        let now = steps.load(Ordering::SeqCst);
                        let mut val = fs.revalidate(d, b"x", got.map(|a| a.ino), cookie, rcu);
                        if val == Validity::NeedBlocking {
                            val = fs.revalidate(d, b"x", got.map(|a| a.ino), cookie, false);
                        }
                        // Two writer steps completed after the lookup and
                        // before revalidate: the directory changed since the
                        // cookie.
                        if now >= seen + 2 {
                            assert_eq!(
                                val,
                                Validity::Invalid,
                                "{v} got={got:?} seen={seen} rcu={rcu}"
                            );
                            checked += 1;
                        }
                    }
                    checked
                })
            })
            .collect();
        for i in 0..STEPS {
            if i % 2 == 0 {
                fs.create_file(d, "x", 0o444, counted_show(&drops, "x"), None)
                    .unwrap();
                created.fetch_add(1, Ordering::SeqCst);
            } else {
                fs.remove(fs.resolve("d/x").unwrap()).unwrap();
            }
            // Churn elsewhere, which must not disturb `d`'s entries.
            let o = fs.create_dir(ROOT_INO, format!("o{i}"), 0o755).unwrap();
            fs.remove(o).unwrap();
            steps.fetch_add(1, Ordering::SeqCst);
            if i % 16 == 0 {
                std::thread::yield_now();
            }
        }
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            created.load(Ordering::SeqCst),
            "{v}"
        );
        assert_eq!(fs.lookup(d, b"x").unwrap(), None);
        assert_eq!(fs.node_count(), 3);
    }
}

/// The locked variants do under their lock what kernfs did: every directory
/// a walk passes and the opened file get their inode copy refreshed
/// (kernfs_iop_permission -> kernfs_refresh_inode), whether or not anything
/// changed. The copy shows it: stale after a change, fresh again after one
/// blocking revalidate (directory) or open (file), with no getattr.
#[test]
fn locked_walk_steps_refresh_the_inode_copy() {
    for v in [Variant::Mutex, Variant::RwLock] {
        let fs = KernFs::with_variant(v);
        let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
        let f = fs.create_file(d, "f", 0o444, text("f"), None).unwrap();
        fs.set_perm(d, 0o700).unwrap();
        fs.set_perm(f, 0o400).unwrap();
        assert_eq!(fs.getattr_cached(d), None, "{v}: no copy yet");
        assert_eq!(fs.getattr_cached(f), None, "{v}: no copy yet");
        // Revalidating `f` in `d` checks `d` first (may_lookup).
        let cookie = fs.dir_cookie(d);
        assert_eq!(
            fs.revalidate(d, b"f", Some(f), cookie, false),
            Validity::Valid,
            "{v}"
        );
        assert_eq!(fs.getattr_cached(d).map(|a| a.perm), Some(0o700), "{v}");
        assert_eq!(
            fs.getattr_cached(f),
            None,
            "{v}: the entry is not refreshed"
        );
        // In rcu-walk nothing is touched: the walk must come back blocking.
        fs.set_perm(d, 0o750).unwrap();
        assert_eq!(
            fs.revalidate(d, b"f", Some(f), cookie, true),
            Validity::NeedBlocking
        );
        assert_eq!(fs.getattr_cached(d), None, "{v}");
        // Opening `f` checks `f` (may_open).
        let fh = fs.open(f, libc::O_RDONLY).unwrap();
        assert_eq!(fs.getattr_cached(f).map(|a| a.perm), Some(0o400), "{v}");
        fs.release(f, fh).unwrap();
    }
    // The rcu variant keeps its copy lazily: revalidation does not refresh.
    let fs = KernFs::with_variant(Variant::Rcu);
    let d = fs.create_dir(ROOT_INO, "d", 0o755).unwrap();
    let f = fs.create_file(d, "f", 0o444, text("f"), None).unwrap();
    let cookie = fs.dir_cookie(d);
    assert_eq!(
        fs.revalidate(d, b"f", Some(f), cookie, true),
        Validity::Valid
    );
    assert_eq!(fs.getattr_cached(d), None);
}
