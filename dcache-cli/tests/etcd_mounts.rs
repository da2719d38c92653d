//! Two FUSE mounts of one etcd namespace: mount A is a `dcache mount
//! --backend etcd:...` daemon, mount B is served by this process through
//! the library (`dcache_fuse::mount` of an `EtcdFs`). A create, write,
//! rename, chmod, setxattr, removexattr, link and unlink made through A
//! must be seen through B
//! within a bounded wait; then 1000 changes measure the propagation time
//! (A's call returned → B's `stat` shows it), printed as p50/p99.
//!
//! Mount B keeps what its kernel caches for 30 s (`-o timeout=30`: entry
//! and attribute timeouts, negative entries included), and every change must
//! show through it within 5 s: only the invalidations B's daemon sends its
//! kernel (`FUSE_NOTIFY_INVAL_ENTRY` / `_INODE`, from the changes its etcd
//! watch reports to its Vfs) can make that happen. Mount A runs with the
//! defaults.
//!
//! Needs /dev/fuse, the right to mount, and the `etcd` binary; without
//! them the test prints a SKIP line and passes (with `CI` set, a missing
//! etcd fails it). etcd is started on 127.0.0.1 (free ports, a temporary
//! data directory) and killed at the end.

mod fuse_common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dcache_bench::etcd::EtcdServer;
use fuse_common::{
    dcache_env, etcd_or_skip, fuse_or_skip, in_process_watchdog, is_mounted, wait_for, Daemon,
};

/// Wait (at most 5 s, well under mount B's 30 s timeouts) until `cond`
/// holds; returns how long it took.
fn seen(what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: not seen through mount B within 5 s (its kernel was not told)"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    start.elapsed()
}

fn mode(p: &Path) -> Option<u32> {
    std::fs::symlink_metadata(p).ok().map(|m| m.mode() & 0o7777)
}

fn nlink(p: &Path) -> Option<u64> {
    std::fs::symlink_metadata(p).ok().map(|m| m.nlink())
}

fn cpath(p: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `setxattr(2)` of `p`'s attribute `name`; panics on failure.
fn xset(p: &Path, name: &str, value: &[u8]) {
    let (path, name) = (cpath(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: NUL-terminated path and name; `value` is a live slice.
    let r = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
}

/// `getxattr(2)` of `p`'s attribute `name` (at most 4 KiB); `None` if it
/// fails.
fn xget(p: &Path, name: &str) -> Option<Vec<u8>> {
    let (path, name) = (cpath(p), std::ffi::CString::new(name).unwrap());
    let mut buf = vec![0u8; 4096];
    // SAFETY: NUL-terminated path and name; `buf` holds its length.
    let r = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    buf.truncate(usize::try_from(r).ok()?);
    Some(buf)
}

fn pct(v: &mut [Duration], p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

/// `dcache ARGS` with stdout and stderr captured as `out=$(...)` would:
/// (exit status, what it printed). Returns once the command has, so a
/// mount daemon that kept the caller's output open would hang it.
fn dcache(args: &[&str]) -> (i32, String) {
    dcache_env(&[], args)
}

#[test]
fn a_volume_is_formatted_then_mounted() {
    const T: &str = "a_volume_is_formatted_then_mounted";
    if !fuse_or_skip(T) || !etcd_or_skip(T) {
        return;
    }
    let server = EtcdServer::start_or_use(None).expect("start etcd");
    let spec = server.fresh_spec();
    let backend = format!("etcd:{spec}");
    let prefix = &spec[spec.rfind('/').unwrap()..];
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();

    // Not formatted: the mount is refused, saying what to run.
    let (rc, out) = dcache(&["mount", "--backend", &backend, m]);
    assert_eq!(rc, 1, "{out}");
    assert_eq!(
        out,
        format!(
            "dcache: no dcache volume at etcd prefix {prefix} (cluster {}): format it first \
             with `dcache format {backend}`.\n",
            server.url()
        )
    );
    assert!(!is_mounted(&mnt));

    let (rc, out) = dcache(&["format", &backend]);
    assert_eq!(rc, 0, "{out}");
    let words: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(words[..2], ["formatted", "volume"], "{out}");
    let (uuid, cluster) = (words[2], words[words.len() - 1]);
    assert_eq!(
        out,
        format!(
            "formatted volume {uuid} (prefix {prefix}) on etcd cluster {cluster}\n\
             file data: inline in etcd (files up to 1 GiB, all within etcd's quota; \
             `--data URL` keeps it in an object store)\n"
        )
    );
    // Twice: refused, naming the volume.
    let (rc, again) = dcache(&["format", &backend]);
    assert_eq!(rc, 1, "{again}");
    assert!(
        again.contains(&format!("already holds volume {uuid}")),
        "{again}"
    );
    let (rc, bad) = dcache(&["format", "http://127.0.0.1:1/x"]);
    assert_eq!(rc, 2, "{bad}");

    // Mounted: one line, naming the volume and the cluster.
    let (rc, out) = dcache(&["mount", "--backend", &backend, m]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(
        out,
        format!("mounted volume {uuid} (prefix {prefix}) from etcd cluster {cluster}\n")
    );
    assert!(is_mounted(&mnt));
    std::fs::write(mnt.join("f"), b"x").unwrap();
    let st = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(wait_for(Duration::from_secs(10), || !is_mounted(&mnt)));
}

#[test]
fn two_mounts_on_one_etcd() {
    const T: &str = "two_mounts_on_one_etcd";
    if !fuse_or_skip(T) || !etcd_or_skip(T) {
        return;
    }
    let server = EtcdServer::start_or_use(None).expect("start etcd");
    let spec = server.fresh_volume().expect("format");
    let a = Daemon::start(&format!("etcd:{spec}"), &[]);
    let dir = tempfile::tempdir().unwrap();
    let bm = dir.path().join("b");
    std::fs::create_dir(&bm).unwrap();
    let done = in_process_watchdog(bm.clone(), Duration::from_secs(240));
    let fs = Arc::new(dcache_etcd::EtcdFs::connect(&spec).expect("connect"));
    let opts = dcache_fuse::MountOptions::parse(&["timeout=30"]).unwrap();
    let b = dcache_fuse::mount(fs, &bm, &opts).expect("mount B");
    let (pa, pb) = (a.path(""), b.path().to_path_buf());

    // Each kind of change once.
    std::fs::write(pa.join("f1"), b"").unwrap();
    seen("create", || pb.join("f1").exists());
    std::fs::write(pa.join("f1"), b"hello etcd").unwrap();
    seen("write", || {
        std::fs::read(pb.join("f1")).is_ok_and(|d| d == b"hello etcd")
    });
    std::fs::rename(pa.join("f1"), pa.join("f2")).unwrap();
    seen("rename", || {
        !pb.join("f1").exists() && pb.join("f2").exists()
    });
    std::fs::set_permissions(pa.join("f2"), std::fs::Permissions::from_mode(0o600)).unwrap();
    seen("chmod", || mode(&pb.join("f2")) == Some(0o600));
    // The kernel caches no attribute values: B's daemon answers from its
    // mirror of the inode record, which A's change reaches by the watch.
    assert_eq!(xget(&pb.join("f2"), "user.tag"), None);
    xset(&pa.join("f2"), "user.tag", b"from A");
    seen("setxattr", || {
        xget(&pb.join("f2"), "user.tag").is_some_and(|v| v == b"from A")
    });
    xset(&pa.join("f2"), "user.tag", b"changed");
    seen("setxattr again", || {
        xget(&pb.join("f2"), "user.tag").is_some_and(|v| v == b"changed")
    });
    let (path, name) = (cpath(&pa.join("f2")), c"user.tag");
    // SAFETY: NUL-terminated path and name.
    let r = unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) };
    assert_eq!(r, 0, "removexattr: {}", std::io::Error::last_os_error());
    seen("removexattr", || xget(&pb.join("f2"), "user.tag").is_none());
    std::fs::hard_link(pa.join("f2"), pa.join("f3")).unwrap();
    seen("link", || {
        nlink(&pb.join("f3")) == Some(2) && nlink(&pb.join("f2")) == Some(2)
    });
    std::fs::remove_file(pa.join("f2")).unwrap();
    seen("unlink", || {
        !pb.join("f2").exists() && nlink(&pb.join("f3")) == Some(1)
    });
    assert_eq!(std::fs::read(pb.join("f3")).unwrap(), b"hello etcd");
    std::fs::create_dir(pa.join("d")).unwrap();
    seen("mkdir", || pb.join("d").is_dir());

    // Propagation: 500 creates and 500 chmods, each waited for on B.
    let (mut creates, mut chmods) = (Vec::new(), Vec::new());
    for i in 0..500 {
        let f = format!("d/p{i}");
        std::fs::write(pa.join(&f), b"x").unwrap();
        creates.push(seen("create", || pb.join(&f).exists()));
        std::fs::set_permissions(pa.join(&f), std::fs::Permissions::from_mode(0o640)).unwrap();
        chmods.push(seen("chmod", || mode(&pb.join(&f)) == Some(0o640)));
    }
    let mut all: Vec<Duration> = creates.iter().chain(&chmods).copied().collect();
    println!(
        "two mounts, {} changes through A seen through B: p50 {:?} p99 {:?} \
         (creates p50 {:?} p99 {:?}; chmods p50 {:?} p99 {:?})",
        all.len(),
        pct(&mut all, 50),
        pct(&mut all, 99),
        pct(&mut creates, 50),
        pct(&mut creates, 99),
        pct(&mut chmods, 50),
        pct(&mut chmods, 99)
    );
    // Same view from both sides at the end.
    let names = |p: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(p.join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&pa), names(&pb));

    // Both mounts create in one directory at once (each counts in its own
    // tally, dcache_etcd::tally): both then report tmpfs's size (20 bytes a
    // name and two for . and ..), link count and one mtime.
    std::fs::create_dir(pa.join("shared")).unwrap();
    seen("mkdir shared", || pb.join("shared").is_dir());
    std::thread::scope(|s| {
        for (m, p) in [(&"a", &pa), (&"b", &pb)] {
            s.spawn(move || {
                for i in 0..100 {
                    std::fs::write(p.join(format!("shared/{m}{i}")), b"").unwrap();
                }
                std::fs::create_dir(p.join(format!("shared/{m}-dir"))).unwrap();
            });
        }
    });
    let shape = |p: &Path| {
        let st = std::fs::metadata(p.join("shared")).unwrap();
        (st.len(), st.nlink(), st.mtime(), st.mtime_nsec())
    };
    let want = (20 * (2 + 202), 4);
    seen("the shared directory's size and links on A", || {
        let s = shape(&pa);
        (s.0, s.1) == want
    });
    seen("the same on B, with A's mtime", || {
        let (a, b) = (shape(&pa), shape(&pb));
        (b.0, b.1) == want && a == b
    });
    b.unmount().expect("unmount B");
    done.store(true, Ordering::SeqCst);
    drop(a);
    drop(server);
}

/// The object count `dcache gc` starts its report with.
fn gc_objects(out: &str) -> usize {
    out.split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no object count in {out:?}"))
}

fn files_under(p: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
        if e.file_type().unwrap().is_dir() {
            n += files_under(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

/// `dcache format --data DIR`, then `dcache mount`: a file written
/// through the mount lands in the store as objects under the volume's
/// UUID (etcd holds its slice lists), another client (this process,
/// through the library) reads it back byte for byte, and `dcache gc`
/// finds every object named.
#[test]
fn a_volume_with_an_object_store_is_mounted() {
    object_store_mount(false, "a_volume_with_an_object_store_is_mounted");
}

/// The same with the data in an S3 bucket (`--data s3://...`) of a
/// SeaweedFS server the test starts; the daemon gets the credentials from
/// its environment, as a user's would.
#[test]
fn a_volume_with_an_object_store_is_mounted_on_s3() {
    object_store_mount(true, "a_volume_with_an_object_store_is_mounted_on_s3");
}

fn object_store_mount(s3: bool, t: &str) {
    if !fuse_or_skip(t) || !etcd_or_skip(t) {
        return;
    }
    let s3 = if s3 {
        let Some(bin) = dcache_bench::seaweedfs::weed_or_skip(t) else {
            return;
        };
        Some(dcache_bench::seaweedfs::S3Server::start(&bin).expect("start SeaweedFS"))
    } else {
        None
    };
    let server = EtcdServer::start_or_use(None).expect("start etcd");
    let spec = server.fresh_spec();
    let backend = format!("etcd:{spec}");
    let data = tempfile::tempdir().unwrap();
    let url = match &s3 {
        Some(s) => s.url("mounted"),
        None => data.path().to_str().unwrap().to_string(),
    };
    if s3.is_some() {
        // The server checks signatures: a wrong secret is refused at
        // format, before anything is written to etcd.
        let (rc, out) = dcache_env(
            &[("AWS_SECRET_ACCESS_KEY", "not-the-secret")],
            &["format", "--data", &url, &backend],
        );
        assert_eq!(rc, 1, "{out}");
        assert!(
            out.contains("refused a test object") && out.contains("403"),
            "{out}"
        );
    }
    let (rc, out) = dcache(&["format", "--data", &url, &backend]);
    assert_eq!(rc, 0, "{out}");
    let uuid = out.split_whitespace().nth(2).unwrap().to_string();
    let canonical = match &s3 {
        Some(s) => format!(
            "s3://{}/mounted?region=us-east-1&endpoint={}",
            dcache_bench::seaweedfs::BUCKET,
            s.endpoint()
        ),
        None => format!("file://{url}"),
    };
    assert!(
        out.ends_with(&format!(
            "file data: objects in {canonical}, under {uuid}/\n"
        )),
        "{out}"
    );
    let a = Daemon::start(&backend, &[]);
    let bytes: Vec<u8> = (0..10u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(a.mnt.join("f"), &bytes).unwrap();
    assert!(std::fs::read(a.mnt.join("f")).unwrap() == bytes);
    // 10 MiB in 4 MiB flushes: at least three objects in the store (the
    // close committed the last). A flush can come earlier than at 4 MiB
    // (one CI run had four), so `dcache gc` below checks what must hold
    // however the bytes were cut: every object named, none an orphan,
    // their bytes the file's.
    let stored = s3.is_none().then(|| files_under(&data.path().join(&uuid)));
    let fs = Arc::new(dcache_etcd::EtcdFs::connect(&spec).expect("connect"));
    let vfs = dcache::Vfs::new(fs.clone()).unwrap();
    let f = vfs
        .as_root()
        .open(dcache::At::Root, "/f", libc::O_RDONLY, 0)
        .unwrap();
    let mut back = vec![0u8; bytes.len()];
    let mut off = 0;
    while off < back.len() {
        let n = f.read(off as u64, &mut back[off..]).unwrap();
        assert!(n > 0);
        off += n;
    }
    assert!(back == bytes, "the other client reads other bytes");
    f.close().unwrap();
    let (rc, out) = dcache(&["gc", "--min-age", "0", &backend]);
    assert_eq!(rc, 0, "{out}");
    let n = gc_objects(&out);
    assert!(
        n >= 3
            && out.starts_with(&format!(
                "{n} objects (10485760 bytes): {n} named by a file, 0 awaiting the collector"
            ))
            && out.contains("deleted 0 orphans"),
        "{out}"
    );
    if let Some(stored) = stored {
        assert_eq!(stored, n, "files in the local store against gc's count");
    }
    drop(a);
}

/// Slow is not down, dead is. A stopped (SIGSTOP) etcd still accepts
/// connections, as one in a long fsync does: an uncached lookup through
/// the mount waits for it, bounded by `etcd_timeout` (2 s here), then
/// EIO, and works again once etcd resumes. A killed etcd refuses them:
/// the lookup fails at once, once the probes found it so for
/// `etcd_unreachable` (1 s by default), not after the 30 s `etcd_timeout`
/// given to that mount.
#[test]
fn a_stopped_cluster_is_waited_for_and_a_dead_one_fails_calls_fast() {
    let t = "a_stopped_cluster_is_waited_for_and_a_dead_one_fails_calls_fast";
    if !fuse_or_skip(t) || !etcd_or_skip(t) {
        return;
    }
    let server = EtcdServer::start_or_use(None).expect("start etcd");
    let spec = server.fresh_volume().expect("format");
    let pid = server.pid().unwrap().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    };
    let long = Daemon::start(&format!("etcd:{spec}"), &["-o", "etcd_timeout=30"]);
    let short = Daemon::start(&format!("etcd:{spec}"), &["-o", "etcd_timeout=2"]);
    std::fs::write(long.mnt.join("here"), b"x").unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || short.mnt.join("here").exists()),
        "the other mount sees the file"
    );
    let eio = |m: &Path, name: &str| {
        let t = Instant::now();
        let e = std::fs::metadata(m.join(name)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{name}: {e}");
        t.elapsed()
    };
    signal("-STOP");
    // Past the staleness bound (1 s) every lookup must ask etcd.
    std::thread::sleep(Duration::from_millis(1500));
    let stopped_took = eio(&short.mnt, "nothing");
    signal("-CONT");
    assert!(
        wait_for(Duration::from_secs(10), || std::fs::metadata(
            short.mnt.join("here")
        )
        .is_ok()),
        "calls work again once etcd resumes"
    );
    signal("-KILL");
    std::thread::sleep(Duration::from_millis(1500));
    let dead_took = eio(&long.mnt, "nothing");
    println!(
        "stopped etcd: EIO after {stopped_took:.2?} (etcd_timeout 2 s); \
         dead etcd: after {dead_took:.2?} (etcd_unreachable 1 s, etcd_timeout 30 s)"
    );
    // A lookup may take two requests of up to the timeout each.
    assert!(
        stopped_took >= Duration::from_millis(1500) && stopped_took < Duration::from_secs(6),
        "{stopped_took:?}"
    );
    assert!(dead_took < Duration::from_secs(3), "{dead_took:?}");
    drop(short);
    drop(long);
    drop(server);
}

/// Open-unlinked through mounts of an object-store volume: a file unlinked
/// on the mount that has it open, and one unlinked on the other mount,
/// both stay readable through the open descriptor long past the grace
/// period; the daemon holding the second is then killed (SIGKILL), and its
/// open record goes with its session lease: the file's objects are gone
/// within the lease TTL plus 2 s.
#[test]
fn unlinked_open_files_keep_their_data_until_the_holder_goes() {
    let t = "unlinked_open_files_keep_their_data_until_the_holder_goes";
    if !fuse_or_skip(t) || !etcd_or_skip(t) {
        return;
    }
    let server = EtcdServer::start_or_use(None).expect("start etcd");
    let spec = server.fresh_spec();
    let backend = format!("etcd:{spec}");
    let data = tempfile::tempdir().unwrap();
    let (rc, out) = dcache(&["format", "--data", data.path().to_str().unwrap(), &backend]);
    assert_eq!(rc, 0, "{out}");
    let opts = ["-o", "etcd_gc_grace=1,etcd_lease_ttl=2"];
    let a = Daemon::start(&backend, &opts);
    let b = Daemon::start(&backend, &opts);
    let bytes: Vec<u8> = (0..6u32 << 20).map(|i| (i % 253) as u8).collect();
    let read_all = |f: &std::fs::File| {
        use std::os::unix::fs::FileExt;
        let mut back = vec![0u8; bytes.len()];
        f.read_exact_at(&mut back, 0).map(|_| back)
    };

    // Unlinked on the mount that has it open.
    std::fs::write(a.mnt.join("same"), &bytes).unwrap();
    let same = std::fs::File::open(a.mnt.join("same")).unwrap();
    std::fs::remove_file(a.mnt.join("same")).unwrap();
    // Unlinked on the other mount.
    std::fs::write(a.mnt.join("other"), &bytes).unwrap();
    let other = std::fs::File::open(a.mnt.join("other")).unwrap();
    assert!(wait_for(Duration::from_secs(5), || b
        .mnt
        .join("other")
        .exists()));
    std::fs::remove_file(b.mnt.join("other")).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(read_all(&same).unwrap() == bytes, "same mount, after 3 s");
    assert!(
        read_all(&other).unwrap() == bytes,
        "other mount's unlink, after 3 s"
    );
    assert!(files_under(data.path()) >= 2, "kept while open");
    drop(same);
    assert!(
        wait_for(Duration::from_secs(5), || files_under(data.path()) == 2),
        "the closed file's objects go: {} left",
        files_under(data.path())
    );

    // The holder dies: its record goes with its lease.
    let killed = Instant::now();
    let _ = a.kill_with(libc::SIGKILL);
    assert!(
        wait_for(Duration::from_secs(10), || files_under(data.path()) == 0),
        "objects left 10 s after the kill: {}",
        files_under(data.path())
    );
    let took = killed.elapsed();
    println!(
        "killed holder: its unlinked file's objects gone {took:.2?} after the kill (lease TTL 2 s)"
    );
    assert!(
        took < Duration::from_secs(4),
        "{took:?}: over the lease TTL plus 2 s"
    );
    drop(other);
    drop(b);
    drop(server);
}
