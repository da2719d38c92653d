//! Extended attributes through `dcache mount`, compared with tmpfs: the
//! same `setfattr`/`getfattr` session and the same raw `*xattr(2)` calls
//! run on a tmpfs directory and on the mount (memfs, passthrough and etcd,
//! with the kernel checking permissions and with `no_default_permissions`), and
//! every output, exit status and errno must match; a caller without
//! privileges (`setpriv` to uid 65534) sees the same refusals and the same
//! listings (no `trusted.*`) on both; `rsync -aHX` and `cp -a
//! --preserve=all` copy a tree into the mount and back with every
//! attribute intact (`getfattr -dR -m -` equal to the source's).
//!
//! Without `setfattr`/`getfattr` (Debian's `attr`) each test prints one
//! line containing SKIPPED and passes; without usable FUSE, a SKIP line;
//! an etcd test without the `etcd` binary, one SKIPPED line (a failure
//! under CI). Each etcd test starts one local etcd on 127.0.0.1 and gives
//! every mount a fresh prefix of it.

mod fuse_common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Stdio};

use fuse_common::*;

/// The largest value Linux stores (`XATTR_SIZE_MAX`).
const BIG: usize = 65536;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether the tools are here; one SKIPPED line if not.
fn tools_or_skip(test: &str, extra: &[&str]) -> bool {
    for t in ["setfattr", "getfattr"].iter().chain(extra) {
        if !have(t) {
            dcache_fuse::testing::skipped(format_args!("{test}: {t} not installed"));
            return false;
        }
    }
    true
}

fn is_root() -> bool {
    // SAFETY: a plain id query.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh directory on tmpfs (/dev/shm) where there is one.
fn shm_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::Builder::new().prefix(prefix).tempdir())
        .expect("tempdir")
}

/// Run `script` with `sh -c` in `dir` (optionally as uid/gid 65534 with
/// no groups and no capabilities); the transcript line is the script, its
/// exit status, stdout and stderr.
fn step(dir: &Path, script: &str, nobody: bool) -> String {
    let mut c = if nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        c.args(["timeout", "-k", "5", "60", "sh", "-c", script]);
        c
    } else {
        let mut c = Command::new("timeout");
        c.args(["-k", "5", "60", "sh", "-c", script]);
        c
    };
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

/// The tools' session, run in `dir` (empty): several names, an empty, a
/// small and a 64 KiB value, listings, removal, the errors.
fn tool_session(dir: &Path) -> Vec<String> {
    let big = "b".repeat(BIG);
    let too_big = "b".repeat(BIG + 1);
    let scripts = [
        "touch f && mkdir d && ln -s f l && mkfifo p".to_string(),
        "setfattr -n user.empty f".into(),
        "setfattr -n user.small -v hello f".into(),
        format!("setfattr -n user.big -v {big} f"),
        format!("setfattr -n user.huge -v {too_big} f"),
        "setfattr -n trusted.t -v tv f && setfattr -n security.s -v sv f".into(),
        "getfattr -n user.small f".into(),
        "getfattr -n user.empty f".into(),
        "getfattr --only-values -n user.big f | md5sum".into(),
        "getfattr -d -m - f | sort".into(),
        "getfattr -d f | sort".into(),
        "getfattr -n user.nope f".into(),
        "setfattr -x user.nope f".into(),
        "setfattr -x user.small f && getfattr -d f | sort".into(),
        "setfattr -n user.d -v dv d && getfattr -d d".into(),
        "setfattr -n user.via -v link l && getfattr -n user.via f".into(),
        "setfattr -h -n user.x -v 1 l".into(),
        "setfattr -h -n trusted.onlink -v 1 l && getfattr -h -d -m - l".into(),
        "setfattr -n user.x -v 1 p; getfattr -n user.x p".into(),
        "setfattr -n trusted.fifo -v 1 p && getfattr -d -m - p".into(),
        "setfattr -n bogus.x -v 1 f; setfattr -n user. -v 1 f; setfattr -n system.foo -v 1 f"
            .into(),
        "getfattr -n bogus.x f".into(),
        "setfattr -n user.nodir -v 1 missing".into(),
    ];
    scripts.iter().map(|s| step(dir, s, false)).collect()
}

/// The raw calls, for what the tools cannot ask (flags, buffer sizes):
/// each result as a number or an errno name.
fn syscall_session(dir: &Path) -> Vec<String> {
    let p = |name: &str| CString::new(dir.join(name).as_os_str().as_bytes()).unwrap();
    let c = |s: &str| CString::new(s).unwrap();
    let show = |what: &str, r: isize| {
        if r < 0 {
            let e = std::io::Error::last_os_error();
            format!("{what}: {}", dcache::Errno::from_io(&e).name())
        } else {
            format!("{what}: {r}")
        }
    };
    let f = p("sys");
    std::fs::write(dir.join("sys"), b"").unwrap();
    let mut out = Vec::new();
    let mut set = |what: &str, name: &str, value: &[u8], flags: i32| {
        // SAFETY: NUL-terminated path and name; `value` is a live slice.
        let r = unsafe {
            libc::setxattr(
                f.as_ptr(),
                c(name).as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        };
        out.push(show(what, r as isize));
    };
    set("set", "user.a", b"12345", 0);
    set("create existing", "user.a", b"x", libc::XATTR_CREATE);
    set("replace missing", "user.b", b"x", libc::XATTR_REPLACE);
    set("create new", "user.b", b"x", libc::XATTR_CREATE);
    set("replace existing", "user.b", b"yy", libc::XATTR_REPLACE);
    set(
        "both flags",
        "user.b",
        b"z",
        libc::XATTR_CREATE | libc::XATTR_REPLACE,
    );
    set("bad flags", "user.b", b"z", 4);
    set("64 KiB", "user.big", &vec![7u8; BIG], 0);
    set("64 KiB + 1", "user.big", &vec![7u8; BIG + 1], 0);
    set("empty name", "", b"", 0);
    set("prefix only", "user.", b"", 0);
    set("255 bytes", &format!("user.{}", "n".repeat(250)), b"", 0);
    set("256 bytes", &format!("user.{}", "n".repeat(251)), b"", 0);
    set("unknown namespace", "os2.x", b"", 0);
    let get = |what: &str, name: &str, size: usize| {
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds `size` writable bytes (null when 0).
        let r = unsafe {
            let ptr = if size == 0 {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr()
            };
            libc::getxattr(f.as_ptr(), c(name).as_ptr(), ptr.cast(), size)
        };
        show(what, r as isize)
    };
    out.push(get("probe", "user.a", 0));
    out.push(get("short", "user.a", 4));
    out.push(get("exact", "user.a", 5));
    out.push(get("probe big", "user.big", 0));
    out.push(get("missing", "user.nope", 16));
    out.push(get("empty name", "", 16));
    let list = |size: usize| {
        let mut buf = vec![0u8; size];
        // SAFETY: as above.
        let r = unsafe {
            let ptr = if size == 0 {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr()
            };
            libc::listxattr(f.as_ptr(), ptr.cast(), size)
        };
        show(&format!("list {size}"), r as isize)
    };
    out.push(list(0));
    out.push(list(3));
    out.push(list(4096));
    // SAFETY: NUL-terminated path and names.
    let (r1, r2) = unsafe {
        (
            libc::removexattr(f.as_ptr(), c("user.a").as_ptr()),
            libc::removexattr(f.as_ptr(), c("user.a").as_ptr()),
        )
    };
    out.push(show("remove", r1 as isize));
    out.push(show("remove again", r2 as isize));
    out
}

/// The tool and syscall sessions on tmpfs, then on `backend` with each
/// permission mode: the same transcripts.
fn sessions_match_tmpfs(backend: &'static str, test: &str) {
    if !tools_or_skip(test, &[]) || !fuse_or_skip(test) {
        return;
    }
    let Some(backend) = Backend::new(backend, test) else {
        return;
    };
    let tmp = shm_dir("dcache-xattr-tmpfs-");
    let want_tools = tool_session(tmp.path());
    let want_sys = syscall_session(tmp.path());
    for opts in [&[][..], &["-o", "no_default_permissions"]] {
        let host = shm_dir("dcache-xattr-host-");
        let d = Daemon::start(&backend.spec(host.path()), opts);
        let what = format!("{} {opts:?}", backend.name);
        same(&what, &tool_session(&d.mnt), &want_tools);
        same(&what, &syscall_session(&d.mnt), &want_sys);
        assert_clean_exit(d.kill_with(libc::SIGTERM));
    }
}

#[test]
fn sessions_match_tmpfs_mem() {
    sessions_match_tmpfs("mem", "sessions_match_tmpfs_mem");
}

#[test]
fn sessions_match_tmpfs_passthrough() {
    sessions_match_tmpfs("passthrough", "sessions_match_tmpfs_passthrough");
}

#[test]
fn sessions_match_tmpfs_etcd() {
    sessions_match_tmpfs("etcd", "sessions_match_tmpfs_etcd");
}

/// What a caller without privileges sees and may do, in a tree root made
/// (run as root in `dir`).
fn nobody_session(dir: &Path) -> Vec<String> {
    let setup = "chmod 755 . && touch f && chmod 644 f && setfattr -n user.a -v 1 f && \
                 setfattr -n trusted.t -v 2 f && setfattr -n security.s -v 3 f && \
                 mkdir -m 1777 sticky && mkdir -m 700 private && touch private/g";
    let mut out = vec![step(dir, setup, false)];
    for s in [
        "getfattr -d -m - f | sort",
        "getfattr -n user.a f",
        "getfattr -n trusted.t f",
        "getfattr -n security.s f",
        "setfattr -n user.b -v 1 f",
        "setfattr -x user.a f",
        "setfattr -n trusted.t -v x f",
        "setfattr -n security.s -v x f",
        "setfattr -n user.s -v 1 sticky",
        "touch sticky/mine && setfattr -n user.m -v 1 sticky/mine && getfattr -d sticky/mine",
        "getfattr -d private/g",
    ] {
        out.push(step(dir, s, true));
    }
    out
}

fn nobody_matches_tmpfs(backend: &'static str, test: &str) {
    if !tools_or_skip(test, &["setpriv"]) || !fuse_or_skip(test) {
        return;
    }
    if !is_root() {
        dcache_fuse::testing::skipped(format_args!("{test}: needs root to act as another user"));
        return;
    }
    let Some(backend) = Backend::new(backend, test) else {
        return;
    };
    let tmp = shm_dir("dcache-xattr-tmpfs-");
    let want = nobody_session(tmp.path());
    for opts in ["allow_other", "allow_other,no_default_permissions"] {
        let host = shm_dir("dcache-xattr-host-");
        let d = Daemon::start(&backend.spec(host.path()), &["-o", opts]);
        let what = format!("{} {opts}", backend.name);
        same(&what, &nobody_session(&d.mnt), &want);
        assert_clean_exit(d.kill_with(libc::SIGTERM));
    }
}

#[test]
fn nobody_matches_tmpfs_mem() {
    nobody_matches_tmpfs("mem", "nobody_matches_tmpfs_mem");
}

#[test]
fn nobody_matches_tmpfs_passthrough() {
    nobody_matches_tmpfs("passthrough", "nobody_matches_tmpfs_passthrough");
}

#[test]
fn nobody_matches_tmpfs_etcd() {
    nobody_matches_tmpfs("etcd", "nobody_matches_tmpfs_etcd");
}

/// `getfattr -dR -m - -e hex .` in `root`: file -> its attribute lines.
fn dump(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let text = sh_in(root, "getfattr -dR -m - -e hex . 2>&1");
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut cur = String::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(f) = line.strip_prefix("# file: ") {
            cur = f.to_string();
            map.entry(cur.clone()).or_default();
        } else {
            map.entry(cur.clone()).or_default().insert(line.to_string());
        }
    }
    map
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

/// A source tree with attributes of every kind root can set on files and
/// directories; as another user, the `user.` ones only (`trusted.` and
/// `security.` need CAP_SYS_ADMIN: one SKIPPED line for `test`).
fn make_source(src: &Path, test: &str) {
    std::fs::create_dir(src).unwrap();
    let big = "q".repeat(BIG);
    let mut script = format!(
        "mkdir -p sub/deeper && echo a > a && echo c > sub/c && ln a hard && \
         setfattr -n user.empty a && setfattr -n user.one -v 1 a && \
         setfattr -n user.big -v {big} a && setfattr -n user.dir -v d sub && \
         setfattr -n user.c -v c sub/c"
    );
    if fuse_common::root_part(test, "trusted. and security. attributes in the copies") {
        script.push_str(
            " && setfattr -n trusted.t -v secret a && setfattr -n trusted.dir -v td sub/deeper \
             && setfattr -n security.s -v s sub/c",
        );
    }
    sh_in(src, &script);
}

fn copies_keep_attributes(backend: &'static str, test: &str) {
    if !tools_or_skip(test, &["rsync"]) || !fuse_or_skip(test) {
        return;
    }
    let Some(backend) = Backend::new(backend, test) else {
        return;
    };
    let scratch = shm_dir("dcache-xattr-scratch-");
    let src = scratch.path().join("src");
    make_source(&src, test);
    let want = dump(&src);
    assert!(
        want.values().any(|v| v.len() >= 3),
        "the source has attributes: {want:?}"
    );
    let host = shm_dir("dcache-xattr-host-");
    let d = Daemon::start(&backend.spec(host.path()), &[]);
    let copies = [
        ("rsync -aHX", "rsync -aHX {from}/ {to}/"),
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
        let b = backend.name;
        assert_eq!(dump(&there), want, "{b}: {tool} into the mount");
        assert_eq!(dump(&back), want, "{b}: {tool} out of the mount");
    }
    assert_clean_exit(d.kill_with(libc::SIGTERM));
}

#[test]
fn copies_keep_attributes_mem() {
    copies_keep_attributes("mem", "copies_keep_attributes_mem");
}

#[test]
fn copies_keep_attributes_passthrough() {
    copies_keep_attributes("passthrough", "copies_keep_attributes_passthrough");
}

#[test]
fn copies_keep_attributes_etcd() {
    copies_keep_attributes("etcd", "copies_keep_attributes_etcd");
}
