//! Two `Vfs` clients on one etcd: what one does, the other sees.

mod common;

use std::time::{Duration, Instant};

use common::{client, etcd_available, eventually, pct, Cluster};
use dcache::{At, Errno, FileType, RenameFlags, SetAttr};
use dcache_etcd::Options;

const WAIT: Duration = Duration::from_secs(5);

fn chmod(v: &dcache::Vfs, path: &str, perm: u16) {
    let set = SetAttr {
        perm: Some(perm),
        ..SetAttr::default()
    };
    v.as_root().setattr(At::Root, path, &set).unwrap();
}

fn read_all(v: &dcache::Vfs, path: &str) -> Vec<u8> {
    let f = v.as_root().open(At::Root, path, libc::O_RDONLY, 0).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let n = f.read(out.len() as u64, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn names(v: &dcache::Vfs, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    v.as_root()
        .readdir(At::Root, path, 0, &mut |e| {
            out.push(String::from_utf8_lossy(&e.name).into_owned());
            true
        })
        .unwrap();
    out.sort();
    out
}

#[test]
fn changes_on_one_client_are_seen_by_the_other() {
    if !etcd_available("changes_on_one_client_are_seen_by_the_other") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/t1");
    let (_fa, a) = client(&spec, Options::default());
    let (fb, b) = client(&spec, Options::default());
    assert!(fb.is_current(), "watch not current after connect");

    // create + write: B had the name cached as missing.
    assert_eq!(b.as_root().stat(At::Root, "/f").unwrap_err(), Errno::ENOENT);
    let f = a
        .as_root()
        .open(At::Root, "/f", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    assert_eq!(f.write(0, b"hello etcd").unwrap(), 10);
    drop(f);
    eventually(WAIT, || {
        b.as_root().stat(At::Root, "/f").is_ok_and(|s| s.size == 10)
    })
    .expect("create seen");
    assert_eq!(read_all(&b, "/f"), b"hello etcd");

    // A write B had the size of cached.
    let f = a.as_root().open(At::Root, "/f", libc::O_WRONLY, 0).unwrap();
    f.write(10, b"!!").unwrap();
    drop(f);
    eventually(WAIT, || {
        b.as_root().stat(At::Root, "/f").is_ok_and(|s| s.size == 12)
    })
    .expect("write seen");
    assert_eq!(read_all(&b, "/f"), b"hello etcd!!");

    // rename
    let ino = b.as_root().stat(At::Root, "/f").unwrap().ino;
    a.as_root()
        .rename(At::Root, "/f", At::Root, "/g", RenameFlags::NONE)
        .unwrap();
    eventually(WAIT, || {
        b.as_root().stat(At::Root, "/f") == Err(Errno::ENOENT)
            && b.as_root().stat(At::Root, "/g").is_ok_and(|s| s.ino == ino)
    })
    .expect("rename seen");

    // chmod
    chmod(&a, "/g", 0o600);
    eventually(WAIT, || {
        b.as_root().stat(At::Root, "/g").unwrap().perm == 0o600
    })
    .expect("chmod seen");

    // link
    assert_eq!(b.as_root().stat(At::Root, "/h").unwrap_err(), Errno::ENOENT);
    a.as_root().link(At::Root, "/g", At::Root, "/h").unwrap();
    eventually(WAIT, || {
        b.as_root()
            .stat(At::Root, "/h")
            .is_ok_and(|s| s.ino == ino && s.nlink == 2)
            && b.as_root().stat(At::Root, "/g").unwrap().nlink == 2
    })
    .expect("link seen");

    // unlink
    a.as_root().unlink(At::Root, "/g").unwrap();
    eventually(WAIT, || {
        b.as_root().stat(At::Root, "/g") == Err(Errno::ENOENT)
            && b.as_root().stat(At::Root, "/h").unwrap().nlink == 1
    })
    .expect("unlink seen");

    // mkdir, symlink, rmdir; readdir
    assert_eq!(b.as_root().stat(At::Root, "/d").unwrap_err(), Errno::ENOENT);
    a.as_root().mkdir(At::Root, "/d", 0o755).unwrap();
    a.as_root().symlink("/h", At::Root, "/d/s").unwrap();
    eventually(WAIT, || {
        b.as_root()
            .stat(At::Root, "/d/s")
            .is_ok_and(|s| s.ino == ino)
            && b.as_root().lstat(At::Root, "/d/s").unwrap().kind == FileType::Symlink
    })
    .expect("mkdir + symlink seen");
    assert_eq!(b.as_root().stat(At::Root, "/").unwrap().nlink, 3);
    assert_eq!(names(&b, "/"), vec![".", "..", "d", "h"]);
    assert_eq!(names(&b, "/d"), vec![".", "..", "s"]);
    a.as_root().unlink(At::Root, "/d/s").unwrap();
    a.as_root().rmdir(At::Root, "/d").unwrap();
    eventually(WAIT, || {
        b.as_root().stat(At::Root, "/d") == Err(Errno::ENOENT)
            && b.as_root().stat(At::Root, "/").unwrap().nlink == 2
    })
    .expect("rmdir seen");

    // Both directions: B's change is seen by A.
    assert_eq!(a.as_root().stat(At::Root, "/h").unwrap().perm, 0o600);
    chmod(&b, "/h", 0o640);
    eventually(WAIT, || {
        a.as_root().stat(At::Root, "/h").unwrap().perm == 0o640
    })
    .expect("B -> A");
}

#[test]
fn propagation_time_over_1000_changes() {
    if !etcd_available("propagation_time_over_1000_changes") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/t2");
    let (_fa, a) = client(&spec, Options::default());
    let (fb, b) = client(&spec, Options::default());
    a.as_root().create(At::Root, "/p", 0o644).unwrap();
    a.as_root().mkdir(At::Root, "/n", 0o755).unwrap();
    eventually(WAIT, || b.as_root().stat(At::Root, "/p").is_ok()).unwrap();

    let mut attr_lat = Vec::new();
    let mut name_lat = Vec::new();
    let mut op_lat = Vec::new();
    for i in 0..1000u32 {
        if i % 2 == 0 {
            // An attribute change B has cached.
            let perm = if i % 4 == 0 { 0o600 } else { 0o644 };
            assert_ne!(b.as_root().stat(At::Root, "/p").unwrap().perm, perm);
            let t = Instant::now();
            chmod(&a, "/p", perm);
            let done = Instant::now();
            op_lat.push(done - t);
            eventually(WAIT, || {
                b.as_root().stat(At::Root, "/p").unwrap().perm == perm
            })
            .expect("chmod propagated");
            attr_lat.push(done.elapsed());
        } else {
            // A name B has cached as missing.
            let path = format!("/n/x{i}");
            assert_eq!(b.as_root().stat(At::Root, &path), Err(Errno::ENOENT));
            let t = Instant::now();
            a.as_root().create(At::Root, &path, 0o644).unwrap();
            let done = Instant::now();
            op_lat.push(done - t);
            eventually(WAIT, || b.as_root().stat(At::Root, &path).is_ok())
                .expect("create propagated");
            name_lat.push(done.elapsed());
        }
    }
    let mut all: Vec<Duration> = attr_lat.iter().chain(&name_lat).copied().collect();
    for v in [&mut all, &mut attr_lat, &mut name_lat, &mut op_lat] {
        v.sort();
    }
    let show = |what: &str, v: &[Duration]| {
        println!(
            "{what:<28} n={:<5} p50={:>9.3?} p99={:>9.3?} max={:>9.3?}",
            v.len(),
            pct(v, 50.0),
            pct(v, 99.0),
            v[v.len() - 1]
        );
    };
    show("propagation (all)", &all);
    show("propagation (chmod)", &attr_lat);
    show("propagation (create)", &name_lat);
    show("writer's op (chmod/create)", &op_lat);

    // The cached stat against a round trip.
    let n = 20_000;
    let t = Instant::now();
    for _ in 0..n {
        b.as_root().stat(At::Root, "/p").unwrap();
    }
    let cached = t.elapsed() / n;
    let mut rt: Vec<Duration> = (0..200)
        .map(|_| fb.serializable_round_trip().unwrap())
        .collect();
    rt.sort();
    let mut lin: Vec<Duration> = (0..200)
        .map(|_| fb.linearizable_round_trip().unwrap())
        .collect();
    lin.sort();
    println!(
        "cached stat {:.3?}/call; serializable get p50 {:.3?}; linearizable get p50 {:.3?}",
        cached,
        pct(&rt, 50.0),
        pct(&lin, 50.0)
    );
    // Generous: a loaded 2-core CI machine.
    assert!(pct(&all, 99.0) < Duration::from_secs(2));
}

/// What B's Vfs is told about A's changes (and not about its own): the
/// reports a FUSE mount of B passes on to its kernel.
#[test]
fn changes_by_others_are_reported_to_the_vfs() {
    use std::sync::{Arc, Mutex};
    if !etcd_available("changes_by_others_are_reported_to_the_vfs") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/t3");
    let (_fa, a) = client(&spec, Options::default());
    let (fb, b) = client(&spec, Options::default());
    let heard: Arc<Mutex<Vec<String>>> = Arc::default();
    let h = heard.clone();
    b.subscribe(move |w| {
        h.lock().unwrap().push(match w {
            dcache::Invalidation::Entry { dir, name } => {
                format!("entry {dir} {}", String::from_utf8_lossy(name))
            }
            dcache::Invalidation::Inode { ino } => format!("inode {ino}"),
        })
    });
    let root = b.root().ino().unwrap();
    let has = |s: &str| heard.lock().unwrap().iter().any(|x| x == s);

    // B caches the name as missing; A creates it.
    assert_eq!(b.as_root().stat(At::Root, "/x").unwrap_err(), Errno::ENOENT);
    a.as_root().mkdir(At::Root, "/x", 0o755).unwrap();
    eventually(WAIT, || has(&format!("entry {root} x"))).expect("create reported");
    // Reported after B's cache applied it: the next stat finds it.
    let x = b.as_root().stat(At::Root, "/x").unwrap();
    assert!(
        has(&format!("inode {root}")),
        "the parent's record changed too"
    );

    // chmod: the inode. (The create reported "inode x" already: start
    // from an empty list, so only the chmod's report can satisfy the wait.)
    heard.lock().unwrap().clear();
    chmod(&a, "/x", 0o700);
    eventually(WAIT, || has(&format!("inode {}", x.ino))).expect("chmod reported");
    assert_eq!(b.as_root().stat(At::Root, "/x").unwrap().perm, 0o700);

    // rename: both names.
    heard.lock().unwrap().clear();
    a.as_root()
        .rename(At::Root, "/x", At::Root, "/y", RenameFlags::NONE)
        .unwrap();
    eventually(WAIT, || {
        has(&format!("entry {root} x")) && has(&format!("entry {root} y"))
    })
    .expect("rename reported");
    assert_eq!(b.as_root().stat(At::Root, "/x").unwrap_err(), Errno::ENOENT);
    assert_eq!(b.as_root().stat(At::Root, "/y").unwrap().ino, x.ino);

    // B's own change is not reported back to B.
    heard.lock().unwrap().clear();
    b.as_root().mkdir(At::Root, "/mine", 0o755).unwrap();
    // A change by A after it: once that is heard, B's would have been too.
    a.as_root().mkdir(At::Root, "/theirs", 0o755).unwrap();
    eventually(WAIT, || has(&format!("entry {root} theirs"))).expect("A's mkdir reported");
    assert!(
        !has(&format!("entry {root} mine")),
        "own change reported: {heard:?}"
    );
    assert!(
        fb.stats()
            .invalidations
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
}

/// A client's own creates keep every name it has cached in the directory
/// (its dcache applied them), and the new files' attributes are answered
/// from its mirror; another client's change to the directory does not
/// keep them.
#[test]
fn own_changes_keep_cached_names_and_others_do_not() {
    use std::sync::atomic::Ordering::Relaxed;
    if !etcd_available("own_changes_keep_cached_names_and_others_do_not") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/t4");
    // A long bound: a slow moment of this VM must not send A's checks to
    // etcd (its watch delivers within milliseconds all the same).
    let opts = Options {
        staleness: Duration::from_secs(30),
        ..Options::default()
    };
    let (fa, a) = client(&spec, opts.clone());
    let (_fb, b) = client(&spec, opts);
    let stat_all = |v: &dcache::Vfs, prefix: &str, n: usize| {
        for i in 0..n {
            v.as_root()
                .stat(At::Root, format!("/d/{prefix}{i}"))
                .unwrap();
        }
    };
    a.as_root().mkdir(At::Root, "/d", 0o755).unwrap();
    for i in 0..20 {
        a.as_root()
            .create(At::Root, format!("/d/f{i}"), 0o644)
            .unwrap();
    }
    stat_all(&a, "f", 20);
    eventually(WAIT, || fa.is_current()).expect("A's watch current");
    let misses = fa.stats().attr_misses.load(Relaxed);
    for i in 0..20 {
        a.as_root()
            .create(At::Root, format!("/d/g{i}"), 0o644)
            .unwrap();
    }
    // (Counted after the creates: each looked its name up first.) Once
    // A's watch has delivered its own creates too.
    let lookups = a.counters().backend_lookups();
    std::thread::sleep(Duration::from_millis(200));
    stat_all(&a, "f", 20);
    stat_all(&a, "g", 20);
    assert_eq!(
        a.counters().backend_lookups(),
        lookups,
        "A's own creates sent its cached names back to etcd"
    );
    assert_eq!(
        fa.stats().attr_misses.load(Relaxed),
        misses,
        "the new files' attributes were not answered from the mirror"
    );

    // Creates from several threads at once, each in a directory of its
    // own (so they do not conflict): each commit's records are kept as
    // current although the others' move A's watch past them first.
    for t in 0..8 {
        a.as_root()
            .mkdir(At::Root, format!("/h{t}"), 0o755)
            .unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..8 {
            let a = &a;
            s.spawn(move || {
                for i in 0..25 {
                    a.as_root()
                        .create(At::Root, format!("/h{t}/f{i}"), 0o644)
                        .unwrap();
                }
            });
        }
    });
    let misses = fa.stats().attr_misses.load(Relaxed);
    for t in 0..8 {
        for i in 0..25 {
            a.as_root().stat(At::Root, format!("/h{t}/f{i}")).unwrap();
        }
    }
    assert_eq!(
        fa.stats().attr_misses.load(Relaxed),
        misses,
        "files created by concurrent threads were not answered from the mirror"
    );

    // B removes one name: A's other names in /d are looked up again
    // (the watch says /d changed, not which names B's dcache had).
    b.as_root().unlink(At::Root, "/d/f0").unwrap();
    eventually(WAIT, || {
        a.as_root().stat(At::Root, "/d/f0").err() == Some(Errno::ENOENT)
    })
    .expect("B's unlink seen by A");
    let lookups = a.counters().backend_lookups();
    stat_all(&a, "g", 20);
    assert!(
        a.counters().backend_lookups() > lookups,
        "B's change kept A's names in /d without a lookup"
    );
}
