//! FUSE over io_uring (`-o uring`, `dcache_fuse::wire::uring`) on a real
//! mount: the parameter switched on for the test (as root), a memfs tree
//! served over the rings through a representative set of operations, and
//! nothing left referenced after the unmount; `-o no_uring` keeps
//! /dev/fuse (a kernel that does not offer io_uring is the default
//! everywhere else: every other mount test covers it). Where FUSE over io_uring is
//! unavailable (not root, a kernel before 6.14) each test prints one
//! SKIPPED line and passes.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use dcache_fuse::session::Transport;
use dcache_fuse::testing::{uring_or_skip, TempMount};
use dcache_fuse::MountOptions;

fn mount(options: &MountOptions) -> TempMount {
    TempMount::memfs(options, |fs| {
        fs.mkdir_p("a/b/c", 0o755).unwrap();
        fs.write_file("a/b/c/file", b"hello").unwrap();
    })
    .expect("mount")
}

fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Create, write, read, stat, readdir, rename, unlink, xattrs and a
/// 10 MiB file, through the mount at `m`.
pub fn representative_operations(m: &Path) {
    // stat and read of what was there before the mount.
    let f = m.join("a/b/c/file");
    assert_eq!(fs::metadata(&f).unwrap().len(), 5);
    assert_eq!(fs::read(&f).unwrap(), b"hello");
    // create, write, read back.
    let new = m.join("a/new");
    let mut w = fs::File::create(&new).unwrap();
    w.write_all(b"written over the ring").unwrap();
    drop(w);
    let mut s = String::new();
    fs::File::open(&new)
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "written over the ring");
    assert_eq!(fs::metadata(&new).unwrap().size(), 21);
    // readdir.
    let mut names: Vec<String> = fs::read_dir(m.join("a"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["b", "new"]);
    // mkdir, rename across directories, unlink, rmdir.
    fs::create_dir(m.join("d")).unwrap();
    fs::rename(&new, m.join("d/moved")).unwrap();
    assert!(!new.exists());
    assert_eq!(
        fs::read(m.join("d/moved")).unwrap(),
        b"written over the ring"
    );
    fs::remove_file(m.join("d/moved")).unwrap();
    fs::remove_dir(m.join("d")).unwrap();
    // xattrs: set, get, list, remove.
    let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated path and name; a value of 3 live bytes.
    let r = unsafe { libc::setxattr(c.as_ptr(), c"user.k".as_ptr(), b"val".as_ptr().cast(), 3, 0) };
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
    let mut buf = [0u8; 64];
    // SAFETY: as above, into a live 64-byte buffer.
    let n = unsafe { libc::getxattr(c.as_ptr(), c"user.k".as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(&buf[..usize::try_from(n).unwrap()], b"val");
    // SAFETY: as above.
    let n = unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(&buf[..usize::try_from(n).unwrap()], b"user.k\0");
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::removexattr(c.as_ptr(), c"user.k".as_ptr()) },
        0
    );
    // 10 MiB: writes and reads of up to 1 MiB a request, compared.
    let data = pattern(10 << 20);
    fs::write(m.join("big"), &data).unwrap();
    assert!(fs::read(m.join("big")).unwrap() == data, "10 MiB differ");
    fs::remove_file(m.join("big")).unwrap();
    // A missing name.
    assert_eq!(
        fs::metadata(m.join("nope")).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
}

#[test]
fn operations_over_io_uring_and_nothing_left_referenced() {
    let Some(_on) = uring_or_skip("operations_over_io_uring") else {
        return;
    };
    let o = MountOptions {
        uring: Some(true),
        ..MountOptions::default()
    };
    let m = mount(&o);
    let t = m.transport().unwrap().clone();
    assert!(t.is_uring(), "{t}");
    representative_operations(m.path());
    // Clients on every CPU at once: each CPU's queue answers its own.
    let p = m.path().to_path_buf();
    let clients: Vec<_> = (0..4)
        .map(|k| {
            let p = p.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    let f = p.join(format!("c{k}-{i}"));
                    fs::write(&f, format!("{k}/{i}")).unwrap();
                    assert_eq!(fs::read_to_string(&f).unwrap(), format!("{k}/{i}"));
                    fs::remove_file(&f).unwrap();
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let r = m.unmount().unwrap();
    assert_eq!(r.referenced, 0, "0 nodes still referenced: {r}");
}

/// This process's threads named `dcache-awake-*`: (tid, scheduling
/// policy, CPU ticks so far), from /proc/self/task.
fn keepers() -> Vec<(String, u32, u64)> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("dcache-awake-") {
            continue;
        }
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // Fields after the command's closing parenthesis, from field 3.
        let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks = rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap();
        let policy = rest[38].parse::<u32>().unwrap();
        out.push((e.file_name().to_string_lossy().into_owned(), policy, ticks));
    }
    out
}

#[test]
fn keepers_are_idle_policy_threads_that_sleep_when_requests_stop() {
    let Some(_on) = uring_or_skip("keepers_are_idle_policy_threads") else {
        return;
    };
    assert!(keepers().is_empty(), "no keepers before the mount");
    // Without poll_us: none.
    let m = mount(&MountOptions {
        uring: Some(true),
        ..MountOptions::default()
    });
    assert!(m.transport().unwrap().is_uring());
    representative_operations(m.path());
    assert!(keepers().is_empty(), "keepers only when poll_us asks");
    assert_eq!(m.unmount().unwrap().referenced, 0);

    let m = mount(&MountOptions {
        uring: Some(true),
        poll: Some(std::time::Duration::from_micros(500)),
        ..MountOptions::default()
    });
    assert!(m.transport().unwrap().is_uring());
    representative_operations(m.path());
    for i in 0..2000 {
        fs::metadata(m.path().join("a/b/c/file")).unwrap();
        if i % 500 == 0 {
            fs::metadata(m.path().join(format!("missing{i}"))).unwrap_err();
        }
    }
    let k = keepers();
    // One per queue, a queue per possible CPU (a keeper whose CPU cannot
    // be pinned ends at once).
    let queues = dcache_fuse::wire::uring::possible_cpus().unwrap();
    assert!(!k.is_empty() && k.len() <= queues, "{k:?}");
    for (tid, policy, _) in &k {
        assert_eq!(*policy, libc::SCHED_IDLE as u32, "keeper {tid}");
    }
    // Requests stopped: after a few windows every keeper sleeps.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let before = keepers();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after = keepers();
    assert_eq!(before, after, "keepers spun with no request");
    assert_eq!(m.unmount().unwrap().referenced, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !keepers().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(keepers().is_empty(), "keepers end with their queues");
}

#[test]
fn no_uring_keeps_dev_fuse() {
    let Some(_on) = uring_or_skip("no_uring_keeps_dev_fuse") else {
        return;
    };
    let o = MountOptions {
        uring: Some(false),
        ..MountOptions::default()
    };
    let m = mount(&o);
    match m.transport().unwrap() {
        Transport::DevFuse { why, .. } => assert_eq!(why, "-o no_uring"),
        t => panic!("{t}"),
    }
    representative_operations(m.path());
    assert_eq!(m.unmount().unwrap().referenced, 0);
}

/// A ring the kernel refuses (payload buffers smaller than max_write: every
/// REGISTER fails) hands the connection back to /dev/fuse: no request waits
/// for a ring that will never be ready.
#[test]
fn a_refused_ring_hands_the_connection_back_to_dev_fuse() {
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use dcache::fs::memfs::MemFs;
    use dcache::Vfs;
    use dcache_fuse::fs::FsConfig;
    use dcache_fuse::options::Timeouts;
    use dcache_fuse::wire::abi::init;
    use dcache_fuse::wire::serve::{self, Access};
    use dcache_fuse::wire::uring::{self, Started};
    use dcache_fuse::DcacheFs;

    let Some(_on) = uring_or_skip("a_refused_ring") else {
        return;
    };
    let dir = dcache_fuse::testing::temp_dir("refused-ring").unwrap();
    let spec = MountOptions::default().mount_spec("dcache");
    let m = dcache_fuse::wire::mount::mount(&dir, &spec).expect("mount");
    let dev = Arc::new(m.dev);
    let cfg = FsConfig {
        timeouts: Timeouts::default(),
        readdirplus: true,
        direct_io: false,
        passthrough_io: false,
        check_permissions: false,
        log: false,
        max_nodes: 0,
        zero_trip_open: true,
        writeback_cache: false,
        posix_acl: true,
        xattr: true,
        killpriv: true,
        locks: None,
    };
    let mut fs = DcacheFs::new(Vfs::new(Arc::new(MemFs::new())).unwrap(), cfg);
    let agreed = serve::handshake(&dev, &mut fs, true).unwrap();
    assert_ne!(agreed.flags & init::OVER_IO_URING, 0, "io_uring agreed");
    let fs = Arc::new(fs);
    match uring::start(&dev, fs.clone(), Access::Kernel, 2, 4096, None).unwrap() {
        Started::FellBack(e) => eprintln!("fell back as expected: {e}"),
        Started::Rings(r) => panic!("{} queues accepted 4 KiB payloads", r.queues()),
    }
    let workers = serve::start(&dev, fs.clone(), 2, false, Access::Kernel).unwrap();
    // Requests flow through /dev/fuse; should they wait for the ring, the
    // mount is detached and the test fails instead of hanging.
    let (tx, rx) = mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || {
        fs::write(d.join("f"), b"served").unwrap();
        tx.send(fs::read(d.join("f")).unwrap()).unwrap();
    });
    let got = rx.recv_timeout(Duration::from_secs(20));
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; unmounting the mount made above.
    let r = unsafe { libc::umount2(c.as_ptr(), if got.is_ok() { 0 } else { libc::MNT_DETACH }) };
    assert_eq!(
        got.expect("a request waited for the refused ring"),
        b"served"
    );
    assert_eq!(r, 0, "umount: {}", std::io::Error::last_os_error());
    workers.join().unwrap();
    fs.finish();
    let _ = fs::remove_dir(&dir);
}
