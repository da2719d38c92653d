//! `dcache mount` at the edges: bad mount points, mounts stacked on one
//! path, and a mount whose daemon was killed. Every daemon is bounded by a
//! watchdog and every mount is removed by a drop guard; without a usable
//! /dev/fuse the tests that mount print a SKIP line and pass.
#![cfg(not(loom))]

mod fuse_common;

use std::ffi::CString;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use fuse_common::*;

/// `dcache mount -f ARGS..` expected to fail at once: its status and
/// stderr. If it is still running after 20 s it is killed and whatever it
/// mounted on `mnt` is detached, so a regression fails instead of hanging.
fn mount_fails(args: &[&str], mnt: &Path) -> (Option<ExitStatus>, String) {
    struct Cleanup<'a>(&'a Path);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(self.0)
                .stderr(Stdio::null())
                .status();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dcache"))
        .args(["mount", "-f"])
        .args(args)
        .arg(mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .expect("spawn dcache mount");
    let mut status = None;
    wait_for(Duration::from_secs(20), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _guard = Cleanup(mnt);
        let _ = child.kill();
        let _ = child.wait();
    }
    (status, fs::read_to_string(&log).unwrap_or_default())
}

/// Item: mounting on a regular file or on nothing is refused before
/// mounting, with the errno by name (no FUSE needed: nothing is mounted).
#[test]
fn a_file_or_missing_mount_point_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    fs::write(&file, b"x").unwrap();
    let missing = dir.path().join("missing");
    for (mnt, want) in [
        (&file, "ENOTDIR: Not a directory"),
        (&missing, "ENOENT: No such file or directory"),
    ] {
        let (status, err) = mount_fails(&[], mnt);
        let status = status.unwrap_or_else(|| panic!("{}: still running", mnt.display()));
        assert!(!status.success(), "{}: {status}; {err}", mnt.display());
        assert_eq!(
            err.trim_end(),
            format!("dcache: cannot mount on {}: {want}", mnt.display()),
        );
        assert!(!is_mounted(mnt));
    }
    assert_eq!(fs::read(&file).unwrap(), b"x");
    assert!(!missing.exists());
}

/// The options of the lower of two stacked mounts: none as root. A user
/// mounts through fusermount3, which runs as root and which a FUSE mount
/// without allow_other keeps out: `-o allow_other` where /etc/fuse.conf
/// lets users ask for it (`user_allow_other`). Without that line, `None`
/// after checking that the refusal names its cause, and a SKIPPED line.
fn lower_options(test: &str) -> Option<&'static [&'static str]> {
    if is_root() {
        return Some(&[]);
    }
    let allowed = fs::read_to_string("/etc/fuse.conf")
        .is_ok_and(|c| c.lines().any(|l| l.trim() == "user_allow_other"));
    if allowed {
        return Some(&["-o", "allow_other"]);
    }
    let lower = Daemon::start("mem", &[]);
    let (status, err) = mount_fails(&[], &lower.mnt);
    let status = status.expect("dcache mount still running");
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("a FUSE mount that lets in only its owner") && err.contains("allow_other"),
        "{err}"
    );
    assert_eq!(mounts_at(&lower.mnt), 1, "{err}");
    assert!(lower.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(lower.fusermount_u());
    dcache_fuse::testing::skipped(format_args!(
        "{test}: stacking a user's mount on a user's mount needs \
         user_allow_other in /etc/fuse.conf (the refusal and its message checked)"
    ));
    None
}

/// Item: two daemons stacked on one directory. `fusermount3 -u` of the
/// top ends the top daemon only: the lower one keeps serving its files,
/// and unmounts cleanly afterwards.
#[test]
fn unmounting_the_top_of_stacked_mounts_leaves_the_lower_daemon() {
    const T: &str = "unmounting_the_top_of_stacked_mounts_leaves_the_lower_daemon";
    if !fuse_or_skip(T) {
        return;
    }
    let Some(opts) = lower_options(T) else {
        return;
    };
    let lower = Daemon::start("mem", opts);
    fs::write(lower.path("f"), b"lower").unwrap();
    let upper = Daemon::start_on("mem", &[], lower.mnt.clone(), tempfile::tempdir().unwrap());
    assert_eq!(mounts_at(&lower.mnt), 2);
    // The top one answers: a fresh memfs.
    assert!(!lower.path("f").exists());
    fs::write(upper.path("g"), b"upper").unwrap();

    assert!(upper.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(upper.fusermount_u());
    // Give a wrong unmount time to happen.
    std::thread::sleep(Duration::from_millis(300));
    assert!(lower.running(), "lower daemon ended: {}", lower.stderr());
    assert_eq!(mounts_at(&lower.mnt), 1);
    assert_eq!(fs::read(lower.path("f")).unwrap(), b"lower");
    assert!(!lower.path("g").exists());
    assert!(lower.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(lower.fusermount_u());
}

/// A signal to a daemon whose mount is covered by another one does not
/// unmount the top one (the only one its path reaches): it says so and
/// keeps serving; once the top is gone, the next signal unmounts its own.
#[test]
fn a_signal_to_a_covered_daemon_leaves_the_top_mount() {
    const T: &str = "a_signal_to_a_covered_daemon_leaves_the_top_mount";
    if !fuse_or_skip(T) {
        return;
    }
    let Some(opts) = lower_options(T) else {
        return;
    };
    let lower = Daemon::start("mem", opts);
    let upper = Daemon::start_on("mem", &[], lower.mnt.clone(), tempfile::tempdir().unwrap());
    lower.signal(libc::SIGTERM);
    assert!(
        wait_for(Duration::from_secs(10), || lower
            .stderr()
            .contains("cannot unmount")),
        "{}",
        lower.stderr()
    );
    assert!(
        lower.stderr().contains("unmount it first"),
        "{}",
        lower.stderr()
    );
    assert!(lower.running() && upper.running());
    assert_eq!(mounts_at(&lower.mnt), 2);
    assert!(upper.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(upper.fusermount_u());
    let mnt = lower.mnt.clone();
    assert_clean_exit(lower.kill_with(libc::SIGTERM));
    assert!(!is_mounted(&mnt));
}

/// Item: after `kill -9` of a daemon its mount is dead (ENOTCONN); a new
/// `dcache mount` on that path detaches it and mounts in its place.
#[test]
fn a_killed_daemons_mount_is_replaced() {
    if !fuse_or_skip("a_killed_daemons_mount_is_replaced") {
        return;
    }
    let dead = Daemon::start("mem", &[]);
    fs::write(dead.path("f"), b"x").unwrap();
    dead.signal(libc::SIGKILL);
    assert!(wait_for(Duration::from_secs(10), || !dead.running()));
    // Dead: ENOTCONN. Over io_uring the kernel lets go of the connection
    // only once the dead process's rings are torn down (a moment after it
    // exits); a request made meanwhile waits for the ring and ends with
    // ECONNABORTED.
    let mut last = 0;
    assert!(
        wait_for(Duration::from_secs(10), || {
            last = errno(&fs::metadata(&dead.mnt).unwrap_err());
            assert!(
                last == libc::ENOTCONN || last == libc::ECONNABORTED,
                "errno {last}"
            );
            last == libc::ENOTCONN
        }),
        "errno {last}"
    );

    // Declared after `dead`, so dropped (and unmounted) before it.
    let next = Daemon::start_on("mem", &[], dead.mnt.clone(), tempfile::tempdir().unwrap());
    assert_eq!(mounts_at(&next.mnt), 1, "the dead mount is gone");
    assert!(next.stderr().contains("detached a dead dcache mount"));
    assert!(!next.path("f").exists());
    fs::write(next.path("g"), b"y").unwrap();
    assert_eq!(fs::read(next.path("g")).unwrap(), b"y");
    assert!(next.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(next.fusermount_u());
    assert!(!is_mounted(&dead.mnt));
    drop(dead);
}

/// A FUSE mount made here by hand (type `fuse`, not ours) whose /dev/fuse
/// is closed at once: dead, and removed by the guard.
struct ForeignDeadMount {
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl ForeignDeadMount {
    /// None where mount(2) is not allowed (not root).
    fn make() -> Option<ForeignDeadMount> {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        let dev = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .ok()?;
        let data = CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            dev.as_raw_fd()
        ))
        .unwrap();
        let target = CString::new(mnt.as_os_str().as_bytes()).unwrap();
        // SAFETY: NUL-terminated strings that outlive the call.
        let r = unsafe {
            libc::mount(
                c"foreign".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        if r != 0 {
            return None;
        }
        let m = ForeignDeadMount { mnt, _dir: dir };
        // Closing the only descriptor aborts the connection.
        drop(dev);
        Some(m)
    }
}

impl Drop for ForeignDeadMount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(&self.mnt)
            .stderr(Stdio::null())
            .status();
    }
}

/// Item: a dead mount that is not dcache's is left alone, and the error
/// names the command that removes it.
#[test]
fn a_foreign_dead_mount_is_refused_with_the_fusermount_hint() {
    if !fuse_or_skip("a_foreign_dead_mount_is_refused_with_the_fusermount_hint") {
        return;
    }
    let Some(foreign) = ForeignDeadMount::make() else {
        dcache_fuse::testing::skipped(format_args!(
            "a_foreign_dead_mount_is_refused_with_the_fusermount_hint: mount(2) refused"
        ));
        return;
    };
    let e = fs::metadata(&foreign.mnt).unwrap_err();
    assert_eq!(errno(&e), libc::ENOTCONN, "{e}");
    let (status, err) = mount_fails(&[], &foreign.mnt);
    let status = status.expect("dcache mount still running");
    assert!(!status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("ENOTCONN"), "{err}");
    assert!(
        err.contains(&format!("fusermount3 -u {}", foreign.mnt.display())),
        "{err}"
    );
    assert_eq!(mounts_at(&foreign.mnt), 1, "the foreign mount was touched");
}
