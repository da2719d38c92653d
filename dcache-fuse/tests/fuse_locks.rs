//! Locks kept by the daemon (`-o locks` on a memfs mount: the backend's
//! lock table, FUSE_POSIX_LOCKS and FUSE_FLOCK_LOCKS), over /dev/fuse and
//! over io_uring: `flock` on two open files excludes, and closing the
//! holder (RELEASE with FUSE_RELEASE_FLOCK_UNLOCK) frees it; OFD record
//! locks conflict by range and F_OFD_GETLK reports the holder's range; a
//! blocked `flock` and a blocked F_OFD_SETLKW (SETLKW, answered late from
//! the daemon's retry thread) are woken when the holder lets go; a
//! blocked F_OFD_SETLKW interrupted by a signal returns EINTR at once
//! (FUSE_INTERRUPT answers the waiting request); more blocked waiters
//! from one CPU than its io_uring queue has entries leave that CPU's
//! other requests served (spare entries replace parked ones). Without
//! FUSE (or io_uring), one SKIPPED line.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dcache_fuse::session::Transport;
use dcache_fuse::testing::{available, uring_or_skip, TempMount};
use dcache_fuse::MountOptions;

fn mount(opts: &[&str]) -> TempMount {
    let o = MountOptions::parse(opts).unwrap();
    TempMount::memfs(&o, |fs| {
        fs.write_file("f", b"0123456789").unwrap();
    })
    .expect("mount")
}

fn open(p: &Path) -> File {
    OpenOptions::new().read(true).write(true).open(p).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn flock(f: &File, how: i32) -> Result<(), i32> {
    // SAFETY: flock(2) on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), how) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

fn ofd(f: &File, cmd: i32, kind: i32, start: i64, len: i64) -> Result<libc::flock, i32> {
    // SAFETY: plain data; zero is valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: fcntl with a live struct flock.
    if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl) } == 0 {
        Ok(fl)
    } else {
        Err(errno())
    }
}

extern "C" fn on_signal(_: i32) {}

/// What every transport must show; returns the wake latencies measured.
fn lock_semantics(m: &Path) -> Vec<Duration> {
    let p = m.join("f");
    let (a, b) = (open(&p), open(&p));
    // flock: exclusive on one open file excludes the other; shared ones
    // share; closing the holder frees it.
    flock(&a, libc::LOCK_EX | libc::LOCK_NB).unwrap();
    assert_eq!(
        flock(&b, libc::LOCK_EX | libc::LOCK_NB),
        Err(libc::EWOULDBLOCK)
    );
    assert_eq!(
        flock(&b, libc::LOCK_SH | libc::LOCK_NB),
        Err(libc::EWOULDBLOCK)
    );
    // The kernel sends RELEASE after close(2) returns (in the
    // background): the lock goes a moment later.
    drop(a);
    let t = Instant::now();
    while flock(&b, libc::LOCK_SH | libc::LOCK_NB).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "released by the close"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let a = open(&p);
    flock(&a, libc::LOCK_SH | libc::LOCK_NB).unwrap();
    assert_eq!(
        flock(&a, libc::LOCK_EX | libc::LOCK_NB),
        Err(libc::EWOULDBLOCK),
        "an upgrade while another shares it"
    );
    flock(&b, libc::LOCK_UN).unwrap();
    flock(&a, libc::LOCK_UN).unwrap();

    // OFD record locks: ranges conflict, GETLK reports the holder's.
    ofd(&a, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 10).unwrap();
    ofd(&b, libc::F_OFD_SETLK, libc::F_WRLCK, 10, 10).unwrap();
    assert_eq!(
        ofd(&b, libc::F_OFD_SETLK, libc::F_RDLCK, 5, 1).map(|_| ()),
        Err(libc::EAGAIN)
    );
    let g = ofd(&b, libc::F_OFD_GETLK, libc::F_WRLCK, 0, 0).unwrap();
    assert_eq!(
        (i32::from(g.l_type), g.l_start, g.l_len),
        (libc::F_WRLCK, 0, 10)
    );
    // Unlocking the middle splits a's lock: 4 is free, 3 is not.
    ofd(&a, libc::F_OFD_SETLK, libc::F_UNLCK, 4, 2).unwrap();
    ofd(&b, libc::F_OFD_SETLK, libc::F_WRLCK, 4, 2).unwrap();
    assert_eq!(
        ofd(&b, libc::F_OFD_SETLK, libc::F_WRLCK, 3, 1).map(|_| ()),
        Err(libc::EAGAIN)
    );
    // b's own locks never conflict with b.
    let g = ofd(&b, libc::F_OFD_GETLK, libc::F_WRLCK, 10, 10).unwrap();
    assert_eq!(i32::from(g.l_type), libc::F_UNLCK);
    drop(b);

    let mut lat = Vec::new();
    // A blocked flock is woken when the holder unlocks.
    let c = open(&p);
    flock(&a, libc::LOCK_EX).unwrap();
    let (tx, rx) = mpsc::channel();
    let pc = p.clone();
    let t = std::thread::spawn(move || {
        let c = open(&pc);
        let r = flock(&c, libc::LOCK_EX);
        tx.send((r, Instant::now())).unwrap();
        c
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the waiter waits"
    );
    let t0 = Instant::now();
    flock(&a, libc::LOCK_UN).unwrap();
    let (r, t1) = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    r.unwrap();
    lat.push(t1 - t0);
    drop(t.join().unwrap());

    // A blocked F_OFD_SETLKW is woken when the range is unlocked.
    ofd(&a, libc::F_OFD_SETLK, libc::F_WRLCK, 100, 1).unwrap();
    let (tx, rx) = mpsc::channel();
    let pc = p.clone();
    let t = std::thread::spawn(move || {
        let c = open(&pc);
        let r = ofd(&c, libc::F_OFD_SETLKW, libc::F_WRLCK, 90, 20).map(|_| ());
        tx.send((r, Instant::now())).unwrap();
        c
    });
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    let t0 = Instant::now();
    ofd(&a, libc::F_OFD_SETLK, libc::F_UNLCK, 0, 0).unwrap();
    let (r, t1) = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    r.unwrap();
    lat.push(t1 - t0);
    drop(t.join().unwrap());

    // A signal (a handler without SA_RESTART) interrupts a blocked
    // F_OFD_SETLKW: EINTR, promptly.
    // SAFETY: installing a handler that does nothing; sigaction is
    // plain data.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(i32) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
    }
    ofd(&c, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 1).unwrap();
    let (tx, rx) = mpsc::channel();
    let pc = p.clone();
    let t = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        tx.send(unsafe { libc::pthread_self() }).unwrap();
        let d = open(&pc);
        let r = ofd(&d, libc::F_OFD_SETLKW, libc::F_WRLCK, 0, 1).map(|_| ());
        (r, Instant::now())
    });
    let tid = rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    // SAFETY: the thread is alive until joined below.
    assert_eq!(unsafe { libc::pthread_kill(tid, libc::SIGUSR2) }, 0);
    let (r, t1) = t.join().unwrap();
    assert_eq!(r, Err(libc::EINTR), "interrupted");
    assert!(t1 - t0 < Duration::from_secs(2), "promptly: {:?}", t1 - t0);
    println!(
        "interrupted SETLKW returned EINTR {:?} after the signal",
        t1 - t0
    );
    // The lock is still c's, and free once c goes.
    let e = open(&p);
    assert_eq!(
        ofd(&e, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 1).map(|_| ()),
        Err(libc::EAGAIN)
    );
    drop(c);
    let t = Instant::now();
    while ofd(&e, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 1).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "released by the close"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    lat
}

#[test]
fn locks_over_dev_fuse() {
    if let Err(why) = available() {
        dcache_fuse::testing::skipped(format_args!("fuse_locks: FUSE unusable here ({why})"));
        return;
    }
    let m = mount(&["locks", "no_uring"]);
    let lat = lock_semantics(m.path());
    println!(
        "/dev/fuse: wake latency flock {:?}, SETLKW {:?}",
        lat[0], lat[1]
    );
    m.unmount().unwrap();
}

#[test]
fn locks_over_io_uring() {
    let Some(_on) = uring_or_skip("fuse_locks over io_uring") else {
        return;
    };
    let m = mount(&["locks", "uring"]);
    assert!(
        matches!(m.transport(), Some(Transport::Uring { .. })),
        "served over io_uring: {:?}",
        m.transport()
    );
    let lat = lock_semantics(m.path());
    println!(
        "io_uring: wake latency flock {:?}, SETLKW {:?}",
        lat[0], lat[1]
    );
    m.unmount().unwrap();
}

#[test]
fn without_locks_the_kernel_keeps_them() {
    if available().is_err() {
        dcache_fuse::testing::skipped(format_args!("fuse_locks: FUSE unusable here"));
        return;
    }
    // The default for a local backend: the kernel's own locks, which
    // behave the same for one host.
    let m = mount(&[]);
    let p = m.path().join("f");
    let (a, b) = (open(&p), open(&p));
    flock(&a, libc::LOCK_EX | libc::LOCK_NB).unwrap();
    assert_eq!(
        flock(&b, libc::LOCK_EX | libc::LOCK_NB),
        Err(libc::EWOULDBLOCK)
    );
    drop((a, b));
    m.unmount().unwrap();
}

/// Run this thread on CPU 0 only (its requests go to ring queue 0).
fn pin0() {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays inside.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

#[test]
fn more_waiters_than_a_queue_has_entries_over_io_uring() {
    let Some(_on) = uring_or_skip("fuse_locks many waiters over io_uring") else {
        return;
    };
    let m = mount(&["locks", "uring"]);
    let Some(Transport::Uring { depth, .. }) = m.transport().cloned() else {
        panic!("served over io_uring: {:?}", m.transport());
    };
    let p = m.path().join("f");
    let a = open(&p);
    ofd(&a, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 1).unwrap();
    // More blocked F_OFD_SETLKW from CPU 0 than its queue has entries:
    // each parks an entry, and a spare takes its place.
    let n = depth + depth / 2;
    let (tx, rx) = mpsc::channel();
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let (pc, tx) = (p.clone(), tx.clone());
            std::thread::spawn(move || {
                pin0();
                let f = open(&pc);
                let r = ofd(&f, libc::F_OFD_SETLKW, libc::F_RDLCK, 0, 1).map(|_| ());
                tx.send(r).unwrap();
                f
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(rx.try_recv().is_err(), "all wait");
    // Other requests from CPU 0 are still served.
    let (stx, srx) = mpsc::channel();
    let pc = p.clone();
    std::thread::spawn(move || {
        pin0();
        let r = std::fs::read(&pc).map(|d| d.len());
        stx.send(r.ok()).unwrap();
    });
    let served = srx.recv_timeout(Duration::from_secs(5));
    // Unlocked before anything is asserted, so that a failure ends the
    // waiters (and frees the queue) rather than hanging the test.
    ofd(&a, libc::F_OFD_SETLK, libc::F_UNLCK, 0, 0).unwrap();
    for _ in 0..n {
        rx.recv_timeout(Duration::from_secs(5))
            .expect("granted")
            .unwrap();
    }
    for w in waiters {
        drop(w.join().unwrap());
    }
    assert_eq!(
        served.expect("a read from CPU 0 served while the waiters wait"),
        Some(10)
    );
    println!("{n} waiters from one CPU on queues of {depth} entries: all served");
    drop(a);
    m.unmount().unwrap();
}
