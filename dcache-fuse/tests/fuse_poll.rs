//! The busy-poller (`-o poll_us`, `dcache_fuse::poll`) on a real mount:
//! requests make it poll, an idle mount stops polling and uses no CPU, and
//! `poll_us=0` turns it off (the default on machines under 4 CPUs is
//! checked in the options' unit tests). Without a usable /dev/fuse each test prints a
//! SKIP line and passes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dcache_fuse::options::Timeouts;
use dcache_fuse::pollgate::PollState;
use dcache_fuse::testing::{available, TempMount};
use dcache_fuse::MountOptions;

fn mount(poll_us: u64) -> Option<TempMount> {
    if let Err(why) = available() {
        dcache_fuse::testing::skipped(format_args!("fuse_poll: FUSE unusable here ({why})"));
        return None;
    }
    let o = MountOptions {
        timeouts: Timeouts::NONE,
        default_permissions: false,
        poll: Some(Duration::from_micros(poll_us)),
        // The poller busy-polls /dev/fuse; over io_uring there is none.
        uring: Some(false),
        ..MountOptions::default()
    };
    let m = TempMount::memfs(&o, |fs| {
        fs.mkdir_p("a/b/c", 0o755).unwrap();
        fs.write_file("a/b/c/file", b"x").unwrap();
    })
    .expect("mount");
    Some(m)
}

/// CPU time of this whole process.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(ru.ru_utime) + us(ru.ru_stime))
}

#[test]
fn requests_start_polling_and_an_idle_mount_stops() {
    let Some(m) = mount(1000) else { return };
    let p = m.poller().cloned().expect("poll_us=1000 polls");
    assert_eq!(p.state(), PollState::Cold, "nothing arrived yet");
    let path = m.path().join("a/b/c/file");
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (stop, path) = (stop.clone(), path.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(std::fs::metadata(&path).unwrap().len(), 1);
                n += 1;
            }
            n
        })
    };
    // While stats flow the gate is hot (it may cool between two requests
    // when this machine is busy; never for a whole second).
    let mut seen_hot = false;
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until && !seen_hot {
        seen_hot = p.state() == PollState::Hot;
        std::thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let stats = client.join().unwrap();
    assert!(stats > 0);
    assert!(seen_hot, "{stats} stats never made the gate hot");
    // Idle: cold within a few windows.
    let until = Instant::now() + Duration::from_secs(3);
    while p.state() != PollState::Cold {
        assert!(
            Instant::now() < until,
            "still {:?} 3 s after the last request",
            p.state()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // And cold means nobody spins: the whole process (daemon threads
    // included) stays nearly off the CPU for 300 ms.
    let t0 = cpu_time();
    std::thread::sleep(Duration::from_millis(300));
    let used = cpu_time() - t0;
    assert!(
        used < Duration::from_millis(60),
        "idle mount used {used:?} of CPU in 300 ms"
    );
    // The next request polls again. (Checked right after the request; on
    // a loaded machine the checking thread may sleep past two windows and
    // find the gate cooled again, so a few requests may be needed.)
    let until = Instant::now() + Duration::from_secs(2);
    let mut hot = false;
    while !hot && Instant::now() < until {
        std::fs::metadata(&path).unwrap();
        hot = p.state() == PollState::Hot;
    }
    assert!(hot, "requests after an idle spell never made the gate hot");
    let r = m.unmount().unwrap();
    assert_eq!(r.referenced, 0, "{r}");
}

#[test]
fn poll_us_zero_never_polls() {
    let Some(m) = mount(0) else { return };
    assert!(m.poller().is_none());
    std::fs::metadata(m.path().join("a/b/c/file")).unwrap();
    m.unmount().unwrap();
}
