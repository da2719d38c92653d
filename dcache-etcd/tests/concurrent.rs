//! Two clients racing on one namespace: every answer is one a single,
//! linearizable namespace could give.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use common::{client, etcd_available, Cluster};
use dcache::{At, Ctx, Errno, RenameFlags, SetAttr};
use dcache_etcd::Options;

fn excl(v: &dcache::Vfs, path: &str) -> Result<(), Errno> {
    v.open(
        At::Root,
        path,
        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        0o644,
        Ctx::ROOT,
    )
    .map(drop)
}

#[test]
fn racing_clients_get_posix_outcomes() {
    if !etcd_available("racing_clients_get_posix_outcomes") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.spec("/race");
    let (_fa, a) = client(&spec, Options::default());
    let (_fb, b) = client(&spec, Options::default());
    let clients = [&a, &b];

    // 1. A file that always exists (replaced by rename) is never ENOENT
    //    to the other client, which stats it in a loop.
    a.create(At::Root, "/always", 0o644, Ctx::ROOT).unwrap();
    let stop = AtomicBool::new(false);
    let seen = AtomicUsize::new(0);
    let inos = std::sync::Mutex::new(std::collections::HashSet::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                match b.stat(At::Root, "/always") {
                    Ok(st) => {
                        inos.lock().unwrap().insert(st.ino);
                        seen.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("/always: {e:?}"),
                }
            }
        });
        for i in 0..150 {
            let tmp = format!("/tmp{i}");
            a.create(At::Root, &tmp, 0o644, Ctx::ROOT).unwrap();
            a.rename(At::Root, &tmp, At::Root, "/always", RenameFlags::NONE)
                .unwrap();
            if i % 10 == 0 {
                let set = SetAttr {
                    perm: Some(0o600 + (i % 2) as u16 * 0o40),
                    ..SetAttr::default()
                };
                a.setattr(At::Root, "/always", &set, Ctx::ROOT).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    println!(
        "always-present: {} stats, {} distinct inodes seen, never ENOENT",
        seen.load(Ordering::Relaxed),
        inos.lock().unwrap().len()
    );
    // Only the last one survives, with nlink 1; the replaced ones are gone.
    let last = a.stat(At::Root, "/always").unwrap();
    assert_eq!(last.nlink, 1);
    common::eventually(Duration::from_secs(5), || {
        b.stat(At::Root, "/always").unwrap().ino == last.ino
    })
    .expect("B converges");

    // 2. O_EXCL races: exactly one winner, the other EEXIST.
    let barrier = Barrier::new(2);
    let rounds = 100;
    let wins = [AtomicUsize::new(0), AtomicUsize::new(0)];
    std::thread::scope(|s| {
        for (c, v) in clients.iter().enumerate() {
            let (barrier, wins) = (&barrier, &wins);
            s.spawn(move || {
                for i in 0..rounds {
                    barrier.wait();
                    match excl(v, &format!("/excl{i}")) {
                        Ok(()) => {
                            wins[c].fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => assert_eq!(e, Errno::EEXIST, "round {i}"),
                    }
                    barrier.wait();
                }
            });
        }
    });
    let (wa, wb) = (
        wins[0].load(Ordering::Relaxed),
        wins[1].load(Ordering::Relaxed),
    );
    println!("O_EXCL: {rounds} races, A won {wa}, B won {wb}");
    assert_eq!(wa + wb, rounds, "every race has exactly one winner");

    // 3. Rename races: both move one name away with RENAME_NOREPLACE;
    //    exactly one succeeds, the other gets ENOENT; no name is lost or
    //    doubled.
    for i in 0..50 {
        a.create(At::Root, format!("/r{i}"), 0o644, Ctx::ROOT)
            .unwrap();
    }
    let ok = [AtomicUsize::new(0), AtomicUsize::new(0)];
    std::thread::scope(|s| {
        for (c, v) in clients.iter().enumerate() {
            let (barrier, ok) = (&barrier, &ok);
            s.spawn(move || {
                let flags = RenameFlags {
                    noreplace: true,
                    exchange: false,
                };
                for i in 0..50 {
                    barrier.wait();
                    let to = format!("/moved{c}_{i}");
                    match v.rename(At::Root, format!("/r{i}"), At::Root, &to, flags) {
                        Ok(()) => {
                            ok[c].fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => assert_eq!(e, Errno::ENOENT, "rename race {i}"),
                    }
                    barrier.wait();
                }
            });
        }
    });
    assert_eq!(
        ok[0].load(Ordering::Relaxed) + ok[1].load(Ordering::Relaxed),
        50
    );
    for i in 0..50 {
        let there = (0..2)
            .filter(|c| a.stat(At::Root, format!("/moved{c}_{i}")).is_ok())
            .count();
        assert_eq!(there, 1, "r{i} in exactly one place");
        assert_eq!(a.stat(At::Root, format!("/r{i}")), Err(Errno::ENOENT));
    }

    // 4. Link counts under concurrent link/unlink from both clients.
    a.create(At::Root, "/base", 0o644, Ctx::ROOT).unwrap();
    std::thread::scope(|s| {
        for (c, v) in clients.iter().enumerate() {
            s.spawn(move || {
                for k in 0..40 {
                    v.link(At::Root, "/base", At::Root, format!("/l{c}_{k}"))
                        .unwrap();
                }
                for k in (0..40).step_by(2) {
                    v.unlink(At::Root, format!("/l{c}_{k}")).unwrap();
                }
            });
        }
    });
    // A third client, with a cold cache, counts names and links.
    let (_fc, c) = client(&spec, Options::default());
    let base = c.stat(At::Root, "/base").unwrap();
    let mut names = 0;
    c.readdir(At::Root, "/", 0, &mut |e| {
        if e.ino == base.ino {
            names += 1;
        }
        true
    })
    .unwrap();
    assert_eq!(base.nlink, 41);
    assert_eq!(names, 41);
    let until = Instant::now() + Duration::from_secs(5);
    while a.stat(At::Root, "/base").unwrap().nlink != 41
        || b.stat(At::Root, "/base").unwrap().nlink != 41
    {
        assert!(Instant::now() < until, "clients converge on nlink");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn directory_renames_cannot_make_a_loop() {
    if !etcd_available("directory_renames_cannot_make_a_loop") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.spec("/loop");
    let (_fa, a) = client(&spec, Options::default());
    let (_fb, b) = client(&spec, Options::default());
    // A moves /x into /y while B moves /y into /x: at most one may win,
    // or the two would be each other's parent, cut off from the root.
    for i in 0..30 {
        a.mkdir(At::Root, "/x", 0o755, Ctx::ROOT).unwrap();
        a.mkdir(At::Root, "/y", 0o755, Ctx::ROOT).unwrap();
        let barrier = Barrier::new(2);
        let results = std::thread::scope(|s| {
            let ha = s.spawn(|| {
                barrier.wait();
                a.rename(At::Root, "/x", At::Root, "/y/x", RenameFlags::NONE)
            });
            let hb = s.spawn(|| {
                barrier.wait();
                b.rename(At::Root, "/y", At::Root, "/x/y", RenameFlags::NONE)
            });
            [ha.join().unwrap(), hb.join().unwrap()]
        });
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {i}: {results:?}");
        // Whatever won, both directories are reachable from the root.
        let (_fc, c) = client(&spec, Options::default());
        let ok = c.stat(At::Root, "/y/x").is_ok() || c.stat(At::Root, "/x/y").is_ok();
        assert!(ok, "round {i}: a directory was cut off");
        assert_eq!(c.stat(At::Root, "/").unwrap().nlink, 3);
        for p in ["/y/x", "/y", "/x/y", "/x"] {
            let _ = c.rmdir(At::Root, p);
        }
        assert_eq!(c.stat(At::Root, "/").unwrap().nlink, 2, "round {i}");
    }
}
