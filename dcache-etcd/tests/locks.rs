//! File locks between two clients of one volume (the backend's calls,
//! no FUSE): records conflict across clients as between two owners of one
//! host (ranges, read/write, `flock`), F_GETLK reports the other
//! client's lock and pid, releases by owner and by open file, the waker
//! of a blocked client is called by its watch when the other client
//! unlocks (its latency measured), and lock/unlock round trips are timed.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{client, etcd_available, pct, Cluster};
use dcache::fs::lock::{FileLock, Flavor, LockOwner, LockRelease, LockType, OFFSET_MAX};
use dcache::{At, Errno, FileSystem};
use dcache_etcd::Options;

fn posix(id: u64) -> LockOwner {
    LockOwner {
        id,
        file: id,
        flavor: Flavor::Posix,
    }
}

const W: Option<LockType> = Some(LockType::Write);
const R: Option<LockType> = Some(LockType::Read);

#[test]
fn locks_between_two_clients() {
    if !etcd_available("locks_between_two_clients") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/locks");
    let (fa, a) = client(&spec, Options::default());
    let (fb, _b) = client(&spec, Options::default());
    let ino = a
        .as_root()
        .create(At::Root, "/f", 0o644)
        .unwrap()
        .ino()
        .unwrap();

    // The same owner id on two clients is two owners.
    fa.setlk(ino, &posix(1), &FileLock::new(W, 0, 99, 100))
        .unwrap();
    assert_eq!(
        fb.setlk(ino, &posix(1), &FileLock::new(R, 50, 50, 200)),
        Err(Errno::EAGAIN)
    );
    let c = fb
        .getlk(ino, &posix(1), &FileLock::new(R, 50, 60, 200))
        .unwrap()
        .expect("a conflict");
    assert_eq!((c.kind, c.start, c.end, c.pid), (W, 0, 99, 100));
    // Split by an unlock in the middle: B takes the hole.
    fa.setlk(ino, &posix(1), &FileLock::new(None, 40, 59, 100))
        .unwrap();
    fb.setlk(ino, &posix(1), &FileLock::new(W, 40, 59, 200))
        .unwrap();
    assert_eq!(
        fb.setlk(ino, &posix(1), &FileLock::new(W, 39, 40, 200)),
        Err(Errno::EAGAIN)
    );
    // flock is separate from POSIX locks; exclusive across clients.
    let fl = |id| LockOwner {
        id,
        file: id,
        flavor: Flavor::Flock,
    };
    fa.setlk(ino, &fl(7), &FileLock::new(W, 0, OFFSET_MAX, 100))
        .unwrap();
    assert_eq!(
        fb.setlk(ino, &fl(8), &FileLock::new(R, 0, OFFSET_MAX, 200)),
        Err(Errno::EAGAIN)
    );
    // Released with the open file (RELEASE), then B gets it.
    fa.release_locks(ino, LockRelease::File(7)).unwrap();
    fb.setlk(ino, &fl(8), &FileLock::new(R, 0, OFFSET_MAX, 200))
        .unwrap();

    // B waits for A's POSIX lock on 0..=39; A's FLUSH (owner release)
    // wakes B's waker through B's watch.
    let (tx, rx) = mpsc::channel();
    fb.wake_on_unlock(
        ino,
        Box::new(move || {
            let _ = tx.send(Instant::now());
        }),
    );
    assert_eq!(
        fb.setlk(ino, &posix(2), &FileLock::new(W, 0, 10, 200)),
        Err(Errno::EAGAIN)
    );
    let t0 = Instant::now();
    fa.release_locks(ino, LockRelease::Owner(1, Flavor::Posix))
        .unwrap();
    let released = t0.elapsed();
    let woken = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    fb.setlk(ino, &posix(2), &FileLock::new(W, 0, 10, 200))
        .unwrap();
    println!(
        "B woken {:?} after A's release was sent (the release itself {:?})",
        woken - t0,
        released
    );

    // Round trips: lock + unlock of a free range from one client.
    let mut lock_t = Vec::new();
    let mut unlock_t = Vec::new();
    for i in 0..200u64 {
        let t = Instant::now();
        fa.setlk(ino, &posix(3), &FileLock::new(W, 1000 + i, 1000 + i, 100))
            .unwrap();
        lock_t.push(t.elapsed());
        let t = Instant::now();
        fa.setlk(
            ino,
            &posix(3),
            &FileLock::new(None, 1000 + i, 1000 + i, 100),
        )
        .unwrap();
        unlock_t.push(t.elapsed());
    }
    lock_t.sort();
    unlock_t.sort();
    println!(
        "200 lock / unlock round trips: lock p50 {:?} p99 {:?}; unlock p50 {:?} p99 {:?}",
        pct(&lock_t, 0.5),
        pct(&lock_t, 0.99),
        pct(&unlock_t, 0.5),
        pct(&unlock_t, 0.99)
    );
    // A client that goes (its lease revoked) takes its locks along.
    fa.setlk(ino, &posix(5), &FileLock::new(W, 5000, 5000, 100))
        .unwrap();
    let five = FileLock::new(W, 5000, 5000, 200);
    assert_eq!(fb.setlk(ino, &posix(4), &five), Err(Errno::EAGAIN));
    drop(a);
    drop(fa);
    fb.setlk(ino, &posix(4), &five).unwrap();
    assert_eq!(
        fb.getlk(ino, &posix(9), &FileLock::new(R, 0, OFFSET_MAX, 1))
            .unwrap()
            .map(|l| l.pid),
        Some(200),
        "only B's locks are left"
    );
}
