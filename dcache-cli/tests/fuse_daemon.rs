//! `dcache mount` without `-f`, as a script runs it: `out=$(dcache mount
//! ... 2>&1)` returns as soon as the mount is up (the daemon keeps none of
//! the caller's descriptors), an error before then is in `$out` with exit
//! status 1, and `--log FILE` gets the unmount report. The daemon is not
//! our child: every mount is removed by a drop guard (which ends it), and
//! a shell that does not return is killed after 20 s. Without a usable
//! /dev/fuse or fusermount3 the test prints a SKIP line and passes.
#![cfg(not(loom))]

mod fuse_common;

use std::fs::{self, File};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fuse_common::*;

/// Unmounts (lazily) whatever is still mounted on the path when dropped,
/// which ends a background daemon left by a failed assertion.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.0)
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `sh -c 'out=$(dcache mount ARGS.. 2>&1); echo "rc=$?"; echo "$out"'`:
/// what it printed and how long it took. Panics if it has not returned
/// within 20 s (killed first).
fn captured_mount(dir: &Path, args: &[&str]) -> (String, Duration) {
    let script = r#"out=$("$@" 2>&1); echo "rc=$?"; echo "$out""#;
    let printed = dir.join("printed");
    let start = Instant::now();
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_dcache"))
        .arg("mount")
        .args(args)
        .stdin(Stdio::null())
        // A file, not a pipe: reading it cannot block on a descriptor
        // some process still holds.
        .stdout(File::create(&printed).unwrap())
        .spawn()
        .expect("spawn sh");
    let done = wait_for(Duration::from_secs(20), || sh.try_wait().unwrap().is_some());
    let took = start.elapsed();
    if !done {
        let _ = sh.kill();
        let _ = sh.wait();
    }
    let out = fs::read_to_string(&printed).unwrap();
    assert!(
        done,
        "`out=$(dcache mount {args:?} 2>&1)` had not returned after {took:?}: \
         the daemon holds the caller's stdout or stderr; printed: {out:?}"
    );
    (out, took)
}

#[test]
fn command_substitution_returns_once_mounted_and_the_log_gets_the_report() {
    const T: &str = "command_substitution_returns_once_mounted_and_the_log_gets_the_report";
    if !fuse_or_skip(T) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _guard = Unmount(mnt.clone());
    let log = dir.path().join("daemon.log");
    fs::write(&log, "before\n").unwrap();
    let (s_mnt, s_log) = (mnt.to_str().unwrap(), log.to_str().unwrap());

    // With --log: returns at once, exit 0, nothing printed; the mount
    // serves; the unmount report is appended to the log.
    let (out, took) = captured_mount(dir.path(), &["--backend", "mem", "--log", s_log, s_mnt]);
    assert_eq!(out, "rc=0\n\n", "took {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(is_mounted(&mnt), "returned, but not mounted");
    // The mount's owner may chmod its root at once, before anything has
    // looked at it: the daemon has the kernel fetch the root's attributes
    // before the command returns (until then the kernel takes the root for
    // root's and refuses a user EPERM; as root this cannot fail).
    fs::set_permissions(&mnt, fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(fs::metadata(&mnt).unwrap().mode() & 0o7777, 0o700);
    fs::write(mnt.join("f"), b"served").unwrap();
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"served");
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "fusermount3 -u: {st}");
    // (How many nodes the kernel still held depends on what it cached, and
    // on a loaded machine the RELEASE of the file just read may come after
    // the unmount: the report then adds ", 1 files still open".)
    let report = "dcache: unmounted, ";
    assert!(
        wait_for(Duration::from_secs(10), || {
            fs::read_to_string(&log)
                .unwrap()
                .lines()
                .any(|l| l.starts_with(report) && l.contains(" still referenced"))
        }),
        "no unmount report in the log: {:?}",
        fs::read_to_string(&log).unwrap()
    );
    let logged = fs::read_to_string(&log).unwrap();
    assert!(logged.starts_with("before\n"), "not appended: {logged:?}");
    assert!(!is_mounted(&mnt));

    // Without --log: the same, the report discarded.
    let (out, took) = captured_mount(dir.path(), &["--backend", "mem", s_mnt]);
    assert_eq!(out, "rc=0\n\n", "took {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(is_mounted(&mnt));
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "fusermount3 -u: {st}");
    assert!(wait_for(Duration::from_secs(10), || !is_mounted(&mnt)));

    // An error before the mount is up still reaches the caller, with
    // exit status 1; nothing is mounted and the log is not touched.
    let missing = dir.path().join("missing");
    let (out, _) = captured_mount(
        dir.path(),
        &[
            "--backend",
            "mem",
            "--log",
            s_log,
            missing.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out,
        format!(
            "rc=1\ndcache: cannot mount on {}: ENOENT: No such file or directory\n",
            missing.display()
        )
    );
    assert_eq!(fs::read_to_string(&log).unwrap(), logged);
    // An error in the background process (after the fork) too.
    let (out, took) = captured_mount(
        dir.path(),
        &["--backend", "etcd:http://127.0.0.1:1/x", s_mnt],
    );
    assert_eq!(
        out,
        "rc=1\ndcache: cannot connect to etcd: http://127.0.0.1:1: connection refused\n"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(!is_mounted(&mnt));
}
