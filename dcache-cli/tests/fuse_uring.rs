//! `dcache mount -o uring` end to end: the real binary serving memfs and
//! passthrough over FUSE over io_uring (the parameter switched on by the
//! test, as root, and put back after), through a representative set of
//! operations and tools, with a clean unmount report; the log names the
//! transport. Where FUSE over io_uring is unavailable (not root, a kernel
//! before 6.14) each test prints one SKIPPED line and passes.
//!
//! Every other mount test runs on io_uring too when the parameter is Y
//! (it is the default wherever the kernel offers it):
//! `scripts/uring-tests.sh` runs the FUSE suites that way.

mod fuse_common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use dcache_fuse::testing::uring_or_skip;
use fuse_common::*;

/// The daemon's log line naming its transport (printed just after the
/// mount appears).
fn transport_line(d: &Daemon) -> String {
    wait_for(Duration::from_secs(10), || {
        d.stderr().contains("dcache: FUSE over ")
    });
    d.stderr()
        .lines()
        .find(|l| l.starts_with("dcache: FUSE over "))
        .unwrap_or_else(|| panic!("no transport line:\n{}", d.stderr()))
        .to_string()
}

fn operations(d: &Daemon) {
    // create, write, read, stat.
    fs::write(d.path("f"), b"over the ring").unwrap();
    assert_eq!(fs::read(d.path("f")).unwrap(), b"over the ring");
    assert_eq!(fs::metadata(d.path("f")).unwrap().size(), 13);
    // mkdir, readdir, rename, unlink.
    fs::create_dir_all(d.path("a/b/c")).unwrap();
    fs::rename(d.path("f"), d.path("a/b/c/file")).unwrap();
    let names: Vec<_> = fs::read_dir(d.path("a/b/c"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["file"]);
    // Tools: ls -l (readdirplus), cp, cmp of 10 MiB, xattrs, find, rm -r.
    let big = bytes(23, 10 << 20);
    let host = tempfile::tempdir().unwrap();
    fs::write(host.path().join("big"), &big).unwrap();
    sh(
        "cp",
        &[
            host.path().join("big").to_str().unwrap(),
            d.path("a/big").to_str().unwrap(),
        ],
    );
    sh(
        "cmp",
        &[
            host.path().join("big").to_str().unwrap(),
            d.path("a/big").to_str().unwrap(),
        ],
    );
    assert!(fs::read(d.path("a/big")).unwrap() == big);
    sh(
        "setfattr",
        &["-n", "user.k", "-v", "v", d.path("a/big").to_str().unwrap()],
    );
    let got = sh(
        "getfattr",
        &[
            "--only-values",
            "-n",
            "user.k",
            d.path("a/big").to_str().unwrap(),
        ],
    );
    assert_eq!(got, "v");
    let ls = sh("ls", &["-lR", d.path("a").to_str().unwrap()]);
    assert!(ls.contains("file") && ls.contains("big"), "{ls}");
    let found = sh("find", &[d.path("a").to_str().unwrap(), "-type", "f"]);
    assert_eq!(found.lines().count(), 2, "{found}");
    sh("rm", &["-r", d.path("a").to_str().unwrap()]);
    assert!(fs::read_dir(d.path("")).unwrap().next().is_none());
}

#[test]
fn memfs_over_io_uring() {
    if !fuse_or_skip("memfs_over_io_uring") || skip_if_off("memfs_over_io_uring", "uring") {
        return;
    }
    let Some(_on) = uring_or_skip("memfs_over_io_uring") else {
        return;
    };
    let d = Daemon::start("mem", &["-o", "uring"]);
    let t = transport_line(&d);
    assert!(t.starts_with("dcache: FUSE over io_uring, "), "{t}");
    operations(&d);
    assert!(d.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(d.kill_with(libc::SIGTERM));
}

#[test]
fn passthrough_over_io_uring() {
    if !fuse_or_skip("passthrough_over_io_uring")
        || skip_if_off("passthrough_over_io_uring", "uring")
    {
        return;
    }
    let Some(_on) = uring_or_skip("passthrough_over_io_uring") else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let spec = format!("passthrough:{}", src.path().display());
    let d = Daemon::start(&spec, &["-o", "uring"]);
    let t = transport_line(&d);
    assert!(t.starts_with("dcache: FUSE over io_uring, "), "{t}");
    operations(&d);
    assert_clean_exit(d.kill_with(libc::SIGINT));
}

#[test]
fn no_uring_says_so() {
    if !fuse_or_skip("no_uring_says_so") {
        return;
    }
    let Some(_on) = uring_or_skip("no_uring_says_so") else {
        return;
    };
    let d = Daemon::start("mem", &["-o", "no_uring"]);
    let t = transport_line(&d);
    assert!(t.ends_with("(not io_uring: -o no_uring)"), "{t}");
    fs::write(d.path("x"), b"y").unwrap();
    assert_clean_exit(d.kill_with(libc::SIGTERM));
}
