//! POSIX ACLs through `dcache mount`, compared with tmpfs: one session of
//! `setfacl`/`getfacl`, `chmod`, creates under default ACLs (with
//! different umasks) and reads and writes by uid 65534 that only an ACL
//! entry allows (a named user on a 0600 file, a named user's search on a
//! 0700 directory, a named group, the mask after `chmod`) runs on a tmpfs
//! directory and on memfs, passthrough and etcd mounts, with the kernel
//! checking permissions (FUSE_POSIX_ACL) and with `no_default_permissions`
//! (dcache checks), both `-o allow_other`; every output, exit status and mode must
//! match. `rsync -aHAX` and `cp -a --preserve=all` copy a tree with access
//! and default ACLs into a mount and back, `getfacl -R` equal to the
//! source's.
//!
//! Without `setfacl`/`getfacl` (Debian's `acl`), or `etcd` for the etcd
//! tests, each test prints one line containing SKIPPED and passes (the
//! etcd ones fail under CI); without usable FUSE, a SKIP line.

mod fuse_common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use fuse_common::*;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether the tools (and, for a test that acts as uid 65534 besides
/// the mount's owner, root) are here; one line containing SKIPPED if not.
fn ready(test: &str, extra: &[&str], as_other: bool) -> bool {
    for t in ["setfacl", "getfacl", "setpriv"].iter().chain(extra) {
        if !have(t) {
            dcache_fuse::testing::skipped(format_args!("{test}: {t} not installed"));
            return false;
        }
    }
    if as_other && !is_root() {
        dcache_fuse::testing::skipped(format_args!("{test}: needs root to act as another user"));
        return false;
    }
    fuse_or_skip(test)
}

/// A fresh directory on tmpfs (/dev/shm) where there is one.
fn shm_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::Builder::new().prefix(prefix).tempdir())
        .expect("tempdir")
}

/// Run `script` with `sh -c` in `dir`, as root or as uid/gid 65534 with
/// no groups; the transcript: the script, exit status, stdout, stderr.
fn step(dir: &Path, script: &str, nobody: bool) -> String {
    let mut c = Command::new("setpriv");
    if nobody {
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    }
    c.args(["timeout", "-k", "5", "60", "sh", "-c", script]);
    let out = c
        .current_dir(dir)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    format!(
        "$ {script}\n[{}]\n{}{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The session: (script, as uid 65534?).
const SESSION: &[(&str, bool)] = &[
    ("chmod 755 . && echo hi > f && chmod 600 f && setfacl -m u:65534:r f && getfacl -n f && stat -c %a f", false),
    ("cat f", true),
    ("echo x >> f", true),
    ("setfacl -m g:65534:rw f && chmod 640 f && getfacl -n f && stat -c %a f", false),
    ("cat f; echo x >> f", true),
    ("chmod 660 f && getfacl -n f && stat -c %a f", false),
    ("echo y >> f && cat f", true),
    ("mkdir -m 700 d && echo in > d/in && chmod 644 d/in && setfacl -m u:65534:x d", false),
    ("cat d/in; ls d", true),
    ("setfacl -m m::- d && getfacl -n d && stat -c %a d", false),
    ("cat d/in", true),
    ("mkdir dd && setfacl -d -m u:65534:rwx,g::rx,o::- dd && getfacl -n dd", false),
    ("umask 022 && touch dd/new && mkdir dd/sub && mkfifo dd/fifo && ln -s new dd/sym", false),
    ("getfacl -n dd/new dd/sub dd/fifo && stat -c '%n %a' dd/new dd/sub dd/fifo", false),
    ("umask 077 && touch dd/new2 && mkdir dd/sub/deeper && stat -c '%n %a' dd/new2 dd/sub/deeper && getfacl -n dd/new2 dd/sub/deeper", false),
    ("umask 027 && touch nodef && mkdir nodefd && stat -c '%n %a' nodef nodefd", false),
    ("echo w > dd/new && cat dd/new && touch dd/sub/mine && ls -n dd/sub | wc -l", true),
    ("setfacl -b f && getfacl -n f && stat -c %a f", false),
    ("cat f", true),
    ("setfacl -m u:65534:rw f; setfacl -d -m u:1:r f; setfacl -M /dev/null f; getfacl -n f", false),
    ("setfacl -m u:1:r f", true),
];

fn session(dir: &Path) -> Vec<String> {
    SESSION.iter().map(|&(s, n)| step(dir, s, n)).collect()
}

fn session_matches_tmpfs(backend: &'static str, test: &str) {
    if !ready(test, &[], true) || skip_if_off(test, "posix_acl") {
        return;
    }
    let Some(b) = Backend::new(backend, test) else {
        return;
    };
    let tmp = shm_dir("dcache-acl-tmpfs-");
    let want = session(tmp.path());
    for opts in ["allow_other", "allow_other,no_default_permissions"] {
        let host = shm_dir("dcache-acl-host-");
        let d = Daemon::start(&b.spec(host.path()), &["-o", opts]);
        same(&format!("{backend} {opts}"), &session(&d.mnt), &want);
        assert_clean_exit(d.kill_with(libc::SIGTERM));
    }
}

#[test]
fn session_matches_tmpfs_mem() {
    session_matches_tmpfs("mem", "session_matches_tmpfs_mem");
}

#[test]
fn session_matches_tmpfs_passthrough() {
    session_matches_tmpfs("passthrough", "session_matches_tmpfs_passthrough");
}

fn sh_in(dir: &Path, script: &str) -> String {
    let out = Command::new("timeout")
        .args(["-k", "5", "120", "sh", "-c", script])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{script} in {}: {}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `getfacl -R -n .` in `dir`, one entry per file, in name order (the
/// walk's order is readdir's).
fn acls(dir: &Path) -> BTreeSet<String> {
    sh_in(dir, "getfacl -R -n -p .")
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|b| b.trim().to_string())
        .collect()
}

fn copies_keep_acls(backend: &'static str, test: &str) {
    // The owner copies its own files: any user may (their ACLs may name
    // other users).
    if !ready(test, &["rsync"], false) || skip_if_off(test, "posix_acl") {
        return;
    }
    let Some(b) = Backend::new(backend, test) else {
        return;
    };
    let scratch = shm_dir("dcache-acl-scratch-");
    let src = scratch.path().join("src");
    std::fs::create_dir(&src).unwrap();
    sh_in(
        &src,
        "mkdir -p sub/deeper && echo a > a && ln a hard && echo b > b && \
         setfacl -m u:65534:r,g:65534:rw a && setfacl -m u:1:rwx sub && \
         setfacl -d -m u:65534:rx,g:2:r sub && echo c > sub/c && \
         setfacl -m m::r sub/c && chmod 751 b",
    );
    let want = acls(&src);
    assert!(want.iter().any(|b| b.contains("default:user:65534")));
    let host = shm_dir("dcache-acl-host-");
    let d = Daemon::start(&b.spec(host.path()), &[]);
    let copies = [
        ("rsync -aHAX", "rsync -aHAX {from}/ {to}/"),
        ("cp --preserve=all", "cp -a --preserve=all {from}/. {to}"),
    ];
    for (i, (tool, cmd)) in copies.iter().enumerate() {
        let there = d.mnt.join(format!("copy{i}"));
        let back = scratch.path().join(format!("back{i}"));
        std::fs::create_dir(&there).unwrap();
        std::fs::create_dir(&back).unwrap();
        for (from, to) in [(&src, &there), (&there, &back)] {
            let c = cmd
                .replace("{from}", &from.display().to_string())
                .replace("{to}", &to.display().to_string());
            sh_in(scratch.path(), &c);
        }
        assert_eq!(acls(&there), want, "{backend}: {tool} into the mount");
        assert_eq!(acls(&back), want, "{backend}: {tool} out of the mount");
    }
    assert_clean_exit(d.kill_with(libc::SIGTERM));
}

#[test]
fn session_matches_tmpfs_etcd() {
    session_matches_tmpfs("etcd", "session_matches_tmpfs_etcd");
}

#[test]
fn copies_keep_acls_mem() {
    copies_keep_acls("mem", "copies_keep_acls_mem");
}

#[test]
fn copies_keep_acls_passthrough() {
    copies_keep_acls("passthrough", "copies_keep_acls_passthrough");
}

#[test]
fn copies_keep_acls_etcd() {
    copies_keep_acls("etcd", "copies_keep_acls_etcd");
}

/// A mount whose kernel did not take FUSE_POSIX_ACL (here `-o
/// no_posix_acl`, as on kernels before 4.9) offers no ACLs, in both
/// permission modes: `setfacl` fails with EOPNOTSUPP, an ACL the host
/// file carries (passthrough) is neither listed nor read, and `getfacl`
/// shows the mode's three entries; other attributes still work.
#[test]
fn no_posix_acl_offers_no_acls() {
    let test = "no_posix_acl_offers_no_acls";
    if !ready(test, &["setfattr", "getfattr"], false) {
        return;
    }
    // Every step is the owner's: a user's mount goes without allow_other
    // (/etc/fuse.conf's to grant).
    let other = if is_root() { "allow_other," } else { "" };
    for opts in [
        format!("{other}no_posix_acl"),
        format!("{other}no_posix_acl,no_default_permissions"),
    ] {
        let host = shm_dir("dcache-acl-host-");
        sh_in(
            host.path(),
            "echo hi > carried && setfacl -m u:65534:r carried",
        );
        let d = Daemon::start(
            &format!("passthrough:{}", host.path().display()),
            &["-o", &opts],
        );
        assert!(
            d.stderr().contains("POSIX ACLs off (-o no_posix_acl)"),
            "{opts}: the log says why: {}",
            d.stderr()
        );
        let set = step(&d.mnt, "echo x > f && setfacl -m u:65534:r f", false);
        assert!(
            set.contains("[1]") && set.contains("Operation not supported"),
            "{opts}: {set}"
        );
        let listed = sh_in(&d.mnt, "getfattr -m - -d carried f; echo end");
        assert!(!listed.contains("posix_acl"), "{opts}: {listed}");
        let shown = sh_in(&d.mnt, "getfacl -n -p carried");
        assert!(!shown.contains("user:65534"), "{opts}: {shown}");
        let user = sh_in(
            &d.mnt,
            "setfattr -n user.k -v v f && getfattr -n user.k --only-values f",
        );
        assert_eq!(user, "v", "{opts}");
        assert_clean_exit(d.kill_with(libc::SIGTERM));
    }
}
