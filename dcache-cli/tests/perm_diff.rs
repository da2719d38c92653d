//! Permission checks, differentially: the same operations, on behalf of
//! other users, on tmpfs (the kernel enforcing) and on dcache (memfs through
//! `Vfs::as_cred`, and memfs mounted with `-o no_default_permissions` so the
//! daemon enforces), comparing every errno and, after each operation that
//! may change something, the target's mode, owner, group and size (stat as
//! root).
//!
//! Every case gets a fresh tree `cN/` holding only the entries its paths go
//! through (built as root identically on every side), so mutating cases
//! never disturb each other. On the kernel side (tmpfs and the mount) each
//! operation runs in a short-lived thread that switched identity with raw
//! per-thread syscalls (setgroups, setfsgid, setfsuid: a non-zero fsuid
//! drops the thread's filesystem capabilities). The real ids are left
//! alone, so `access` is only compared with `AT_EACCESS` (the effective
//! check) on both sides. Link cases assume fs.protected_hardlinks = 1 (as
//! dcache implements) and are left out otherwise.

mod fuse_common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use dcache::errno::Errno;
use dcache::fs::memfs::MemFs;
use dcache::fs::{RenameFlags, SetAttr, SetTime, Timespec};
use dcache::{AsCred, At, Cred, Vfs};
use fuse_common::{fuse_or_skip, switched_off, Daemon, EXTRA_OPTIONS};

/// A caller: uid, gid, supplementary groups (uid 0: every capability).
type User = (u32, u32, &'static [u32]);
#[rustfmt::skip]
const USERS: [User; 4] = [(0, 0, &[]), (1000, 100, &[200]), (1001, 200, &[]), (1002, 300, &[])];

fn cred(u: User) -> Cred {
    if u.0 == 0 {
        Cred::root()
    } else {
        Cred::user(u.0, u.1, u.2)
    }
}

/// Directories at the top of the tree: mode, owner, group.
#[rustfmt::skip]
const DIRS: [(u16, u32, u32); 9] = [
    (0o000, 1000, 100), (0o100, 1000, 100), (0o111, 0, 0), (0o700, 1000, 100),
    (0o711, 1001, 200), (0o755, 1000, 100), (0o1777, 0, 0), (0o2775, 1001, 200),
    (0o2777, 0, 200),
];
const FILE_MODES: [u16; 7] = [0o000, 0o200, 0o400, 0o600, 0o644, 0o4755, 0o2755];
const FILE_OWNERS: [(u32, u32); 3] = [(1000, 100), (1001, 200), (1000, 300)];

/// One entry of the tree.
struct Entry {
    path: String,
    dir: bool,
    perm: u16,
    uid: u32,
    gid: u32,
    /// Its access ACL and default ACL (`setfacl` short text; empty: none),
    /// set after the mode (which the access ACL then rewrites).
    acl: &'static str,
    dacl: &'static str,
}

/// Files and directories with ACLs: (name, is a directory, owner, group,
/// access ACL, default ACL). Named users and groups, the mask hiding
/// what they were given, search through a named entry, default ACLs.
#[rustfmt::skip]
const ACLS: [(&str, bool, u32, u32, &str, &str); 5] = [
    ("a_named", false, 1000, 100, "u::rw-,u:1001:r--,u:1002:rw-,g::---,g:300:r--,m::rw-,o::---", ""),
    ("a_masked", false, 1000, 100, "u::rw-,u:1001:rw-,g::r--,g:200:rw-,m::r--,o::---", ""),
    ("a_other", false, 1001, 300, "u::---,u:1000:---,g::r--,m::rw-,o::rw-", ""),
    ("e_search", true, 1000, 100, "u::rwx,u:1001:--x,u:1002:rwx,g::---,m::rwx,o::---", ""),
    ("e_default", true, 0, 0, "u::rwx,u:1001:rwx,u:1002:r-x,g::r-x,m::rwx,o::r-x",
     "u::rwx,u:1001:rwx,u:1002:r--,g::r-x,g:200:rwx,m::rwx,o::---"),
];

/// The full tree: each directory `dMODE` holds a file `x` and an empty
/// directory `sub` of its owner; the sticky one also files and a directory
/// of other users; top-level files `fMODE_UID_GID` (3 bytes each).
fn tree() -> Vec<Entry> {
    #[rustfmt::skip]
    let e = |path: String, dir, perm, uid, gid| Entry { path, dir, perm, uid, gid, acl: "", dacl: "" };
    let mut t = Vec::new();
    for (name, dir, uid, gid, acl, dacl) in ACLS {
        let perm = if dir { 0o755 } else { 0o644 };
        if dir {
            t.push(e(format!("{name}/x"), false, 0o644, uid, gid));
            t.push(e(format!("{name}/sub"), true, 0o755, uid, gid));
        }
        t.push(Entry {
            acl,
            dacl,
            ..e(name.into(), dir, perm, uid, gid)
        });
    }
    for (m, u, g) in DIRS {
        let d = format!("d{m:04o}");
        t.push(e(format!("{d}/x"), false, 0o644, u, g));
        t.push(e(format!("{d}/sub"), true, 0o755, u, g));
        t.push(e(d, true, m, u, g));
    }
    t.push(e("d1777/o1000".into(), false, 0o644, 1000, 100));
    t.push(e("d1777/o1001".into(), false, 0o644, 1001, 200));
    t.push(e("d1777/s1000".into(), true, 0o755, 1000, 100));
    for m in FILE_MODES {
        for (u, g) in FILE_OWNERS {
            t.push(e(format!("f{m:04o}_{u}_{g}"), false, m, u, g));
        }
    }
    t.push(e("f0644_0_0".into(), false, 0o644, 0, 0));
    // Parents first.
    t.sort_by_key(|e| e.path.matches('/').count());
    t
}

fn files() -> Vec<String> {
    tree()
        .into_iter()
        .filter(|e| e.path.starts_with('f') || e.path.starts_with("a_"))
        .map(|e| e.path)
        .collect()
}

fn dirs() -> Vec<String> {
    let acl_dirs = ACLS.iter().filter(|a| a.1).map(|a| a.0.to_string());
    DIRS.iter()
        .map(|d| format!("d{:04o}", d.0))
        .chain(acl_dirs)
        .collect()
}

/// An ACL's xattr value.
fn acl_value(text: &str) -> Vec<u8> {
    dcache::acl::PosixAcl::from_text(text).unwrap().to_xattr()
}

#[rustfmt::skip]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum K {
    Stat, Open, Create, Mkdir, Unlink, Rmdir, Rename, Link, Chmod, Chown, Truncate, UtimeNow,
    UtimeAt, Readdir, Access,
}

/// One operation: `n` is the mode, open flags or access mask.
#[derive(Clone, Debug)]
struct Op {
    k: K,
    a: String,
    b: String,
    n: u32,
    ids: (Option<u32>, Option<u32>),
}

fn op(k: K, a: &str, b: &str, n: u32) -> Op {
    let (a, b, ids) = (a.into(), b.into(), (None, None));
    Op { k, a, b, n, ids }
}

impl Op {
    fn label(&self) -> String {
        let mut s = format!("{:?}", self.k);
        match self.k {
            K::Open | K::Access => s += &format!("({:#o})", self.n),
            K::Create | K::Mkdir | K::Chmod => s += &format!("({:04o})", self.n),
            K::Chown => s += &format!("{:?}", self.ids),
            _ => {}
        }
        s
    }

    fn path(&self) -> String {
        match self.k {
            K::Rename | K::Link => format!("{} -> {}", self.a, self.b),
            _ => self.a.clone(),
        }
    }

    /// The same operation inside the case directory `pre`.
    fn under(&self, pre: &str) -> Op {
        let mut o = self.clone();
        o.a = format!("{pre}/{}", self.a);
        if !self.b.is_empty() {
            o.b = format!("{pre}/{}", self.b);
        }
        o
    }

    /// What to stat as root afterwards, if anything may have changed.
    fn after(&self) -> Option<&str> {
        match self.k {
            K::Open if self.n as i32 & libc::O_TRUNC != 0 => Some(&self.a),
            K::Rename | K::Link => Some(&self.b),
            K::Create | K::Mkdir | K::Unlink | K::Rmdir | K::Chmod | K::Chown | K::Truncate => {
                Some(&self.a)
            }
            _ => None,
        }
    }
}

/// Every operation of the matrix (for each caller).
fn ops(links: bool) -> Vec<Op> {
    use libc::{O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
    let mut v = Vec::new();
    let (files, dirs) = (files(), dirs());
    for d in &dirs {
        let (x, sub) = (format!("{d}/x"), format!("{d}/sub"));
        v.push(op(K::Stat, d, "", 0));
        v.push(op(K::Stat, &x, "", 0));
        v.push(op(K::Open, &x, "", O_RDONLY as u32));
        v.push(op(K::Readdir, d, "", 0));
        for (f, m) in [(0o644, 0o755), (0o2755, 0o2755)] {
            v.push(op(K::Create, &format!("{d}/new"), "", f));
            v.push(op(K::Mkdir, &format!("{d}/newd"), "", m));
        }
        v.push(op(K::Unlink, &x, "", 0));
        v.push(op(K::Rmdir, &sub, "", 0));
        v.push(op(K::Rename, &x, &format!("{d}/y"), 0));
        v.push(op(K::Chmod, d, "", 0o2755));
        v.push(op(K::Chmod, d, "", 0o1700));
    }
    // Across directories, into and out of the sticky one, replacing, and
    // directories (moving one to another parent needs write on it).
    for (a, b) in [
        ("d1777/o1000", "d0755/m"),
        ("d0755/x", "d1777/m"),
        ("d1777/o1001", "d1777/x"),
        ("d1777/o1000", "d1777/o1001"),
        ("d2777/x", "d0755/x"),
        ("d0755/sub", "d1777/m"),
        ("d1777/s1000", "d2777/m"),
        ("d2775/sub", "d2775/z"),
    ] {
        v.push(op(K::Rename, a, b, 0));
    }
    v.push(op(K::Unlink, "d1777/o1000", "", 0));
    v.push(op(K::Unlink, "d1777/o1001", "", 0));
    v.push(op(K::Rmdir, "d1777/s1000", "", 0));
    for p in files.iter().chain(&dirs) {
        for m in [libc::R_OK, libc::W_OK, libc::X_OK] {
            v.push(op(K::Access, p, "", m as u32));
        }
    }
    let opens = [
        O_RDONLY,
        O_WRONLY,
        O_RDWR,
        O_WRONLY | O_TRUNC,
        O_RDONLY | O_TRUNC,
    ];
    let (g, u) = (|g| (None, Some(g)), |u| (Some(u), None));
    for f in &files {
        for fl in opens {
            v.push(op(K::Open, f, "", fl as u32));
        }
        for m in [0o640, 0o2755, 0o4711] {
            v.push(op(K::Chmod, f, "", m));
        }
        for ids in [g(100), g(200), g(300), u(1000), u(1002)] {
            v.push(Op {
                ids,
                ..op(K::Chown, f, "", 0)
            });
        }
        for k in [K::Truncate, K::UtimeNow, K::UtimeAt] {
            v.push(op(k, f, "", 0));
        }
        if links {
            v.push(op(K::Link, f, "d1777/l", 0));
        }
    }
    if links {
        v.push(op(K::Link, "d0755/x", "d0700/l", 0));
    }
    v
}

/// The entries a case needs: every one its paths go through or name.
fn needed<'t>(t: &'t [Entry], o: &Op) -> impl Iterator<Item = &'t Entry> {
    let (a, b) = (o.a.clone(), o.b.clone());
    t.iter().filter(move |e| {
        [&a, &b].iter().any(|p| {
            *p == &e.path || (p.starts_with(&e.path) && p.as_bytes()[e.path.len()] == b'/')
        })
    })
}

/// Build a case's tree as root with the kernel's calls (tmpfs, the mount).
fn build_kernel(base: &Path, pre: &str, o: &Op, t: &[Entry]) {
    let top = base.join(pre);
    std::fs::create_dir(&top).unwrap();
    std::fs::set_permissions(&top, PermissionsExt::from_mode(0o755)).unwrap();
    for e in needed(t, o) {
        let p = top.join(&e.path);
        if e.dir {
            std::fs::create_dir(&p).unwrap();
        } else {
            std::fs::write(&p, b"abc").unwrap();
        }
        std::os::unix::fs::chown(&p, Some(e.uid), Some(e.gid)).unwrap();
        std::fs::set_permissions(&p, PermissionsExt::from_mode(e.perm as u32)).unwrap();
        for (name, text) in [(ACL_ACCESS, e.acl), (ACL_DEFAULT, e.dacl)] {
            if text.is_empty() {
                continue;
            }
            let (c, v) = (cstr(&top, &e.path), acl_value(text));
            // SAFETY: NUL-terminated path and name, a value of its length.
            let r = unsafe {
                libc::setxattr(
                    c.as_ptr(),
                    name.as_ptr().cast(),
                    v.as_ptr().cast(),
                    v.len(),
                    0,
                )
            };
            assert_eq!(r, 0, "setxattr {}", e.path);
        }
    }
}

/// The ACL names, NUL-terminated for libc.
const ACL_ACCESS: &[u8] = b"system.posix_acl_access\0";
const ACL_DEFAULT: &[u8] = b"system.posix_acl_default\0";

/// The same through the library, as root.
fn build_lib(v: &AsCred, pre: &str, o: &Op, t: &[Entry]) {
    v.mkdir(At::Root, pre, 0o755).unwrap();
    for e in needed(t, o) {
        let p = format!("{pre}/{}", e.path);
        if e.dir {
            v.mkdir(At::Root, &p, 0o700).unwrap();
        } else {
            let f = v.open(At::Root, &p, libc::O_CREAT | libc::O_WRONLY, 0o600);
            f.unwrap().write(0, b"abc").unwrap();
        }
        let mut set = SetAttr::default();
        (set.uid, set.gid) = (Some(e.uid), Some(e.gid));
        v.setattr(At::Root, &p, &set).unwrap();
        let set = SetAttr {
            perm: Some(e.perm),
            ..SetAttr::default()
        };
        v.setattr(At::Root, &p, &set).unwrap();
        for (name, text) in [(ACL_ACCESS, e.acl), (ACL_DEFAULT, e.dacl)] {
            if !text.is_empty() {
                let name = &name[..name.len() - 1];
                v.setxattr(At::Root, &p, name, &acl_value(text), 0).unwrap();
            }
        }
    }
}

/// Run `f` in a fresh thread acting as `u` (fsuid, fsgid, groups).
fn as_user<T: Send>(u: User, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: the raw syscalls change only this thread's credential
            // (glibc's wrappers would change every thread's); the group
            // list outlives the call.
            let now = unsafe {
                let r = libc::syscall(libc::SYS_setgroups, u.2.len(), u.2.as_ptr());
                assert_eq!(r, 0, "setgroups");
                libc::syscall(libc::SYS_setfsgid, u.1);
                libc::syscall(libc::SYS_setfsuid, u.0);
                // An invalid id changes nothing and returns the current one.
                (
                    libc::syscall(libc::SYS_setfsuid, u32::MAX),
                    libc::syscall(libc::SYS_setfsgid, u32::MAX),
                )
            };
            assert_eq!(now, (u.0 as libc::c_long, u.1 as libc::c_long));
            f()
        })
        .join()
        .unwrap()
    })
}

fn cstr(base: &Path, p: &str) -> CString {
    CString::new(base.join(p).as_os_str().as_bytes()).unwrap()
}

/// One operation with the kernel's calls: 0 or the errno.
fn kernel_op(base: &Path, o: &Op) -> i32 {
    let a = cstr(base, &o.a);
    let b = cstr(base, &o.b);
    let (a, b) = (a.as_ptr(), b.as_ptr());
    let ts = |now| {
        let t = libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: if now { libc::UTIME_NOW } else { 0 },
        };
        [t, t]
    };
    let (id, mode) = (|x: Option<u32>| x.unwrap_or(u32::MAX), o.n as libc::mode_t);
    let creat = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
    // SAFETY: `a` and `b` are NUL-terminated strings alive for the calls;
    // `st` and the timespecs are valid for them; descriptors and
    // directory streams opened here are closed here.
    let r = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let close = |fd: i32| if fd >= 0 { libc::close(fd) } else { fd };
        match o.k {
            K::Stat => libc::stat(a, &mut st),
            K::Open => close(libc::open(a, o.n as i32 | libc::O_CLOEXEC)),
            K::Create => close(libc::open(a, creat, mode)),
            K::Mkdir => libc::mkdir(a, mode),
            K::Unlink => libc::unlink(a),
            K::Rmdir => libc::rmdir(a),
            K::Rename => libc::rename(a, b),
            K::Link => libc::link(a, b),
            K::Chmod => libc::chmod(a, mode),
            K::Chown => libc::chown(a, id(o.ids.0), id(o.ids.1)),
            K::Truncate => libc::truncate(a, 1),
            K::UtimeNow | K::UtimeAt => {
                libc::utimensat(libc::AT_FDCWD, a, ts(o.k == K::UtimeNow).as_ptr(), 0)
            }
            K::Readdir => {
                let d = libc::opendir(a);
                if d.is_null() {
                    -1
                } else {
                    libc::closedir(d)
                }
            }
            K::Access => libc::faccessat(libc::AT_FDCWD, a, o.n as i32, libc::AT_EACCESS),
        }
    };
    if r < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    } else {
        0
    }
}

/// The same operation through the library's permission-checked handle.
fn lib_op(v: &AsCred, o: &Op) -> i32 {
    let (a, b, n, r) = (o.a.as_str(), o.b.as_str(), o.n, At::Root);
    let mut s = SetAttr::default();
    let then = SetTime::At(Timespec {
        sec: 1_000_000,
        nsec: 0,
    });
    match o.k {
        K::Chmod => s.perm = Some(n as u16),
        K::Chown => (s.uid, s.gid) = o.ids,
        K::Truncate => s.size = Some(1),
        K::UtimeNow => (s.atime, s.mtime) = (Some(SetTime::Now), Some(SetTime::Now)),
        K::UtimeAt => (s.atime, s.mtime) = (Some(then), Some(then)),
        _ => {}
    }
    let creat = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
    let res = match o.k {
        K::Stat => v.stat(r, a).map(drop),
        K::Open => v.open(r, a, n as i32, 0).map(drop),
        K::Create => v.open(r, a, creat, n as u16).map(drop),
        K::Mkdir => v.mkdir(r, a, n as u16).map(drop),
        K::Unlink => v.unlink(r, a),
        K::Rmdir => v.rmdir(r, a),
        K::Rename => v.rename(r, a, r, b, RenameFlags::default()),
        K::Link => v.link(r, a, r, b).map(drop),
        K::Chmod | K::Chown | K::Truncate | K::UtimeNow | K::UtimeAt => {
            v.setattr(r, a, &s).map(drop)
        }
        K::Readdir => v.readdir(r, a, 0, &mut |_| true),
        K::Access => v.access(r, a, n as i32, libc::AT_EACCESS),
    };
    res.err().map_or(0, Errno::raw)
}

fn errname(e: i32) -> String {
    if e == 0 {
        "ok".into()
    } else {
        Errno(e).name()
    }
}

/// What root sees at a target: mode, owner, group, size, is a directory,
/// and its access and default ACLs (hex; empty for none).
type After = Option<Result<(u16, u32, u32, u64, bool, String), i32>>;

/// The ACLs of `p` with the kernel's calls, as `outcome` shows them.
fn kernel_acls(p: &Path) -> String {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut out = String::new();
    for name in [ACL_ACCESS, ACL_DEFAULT] {
        let mut buf = vec![0u8; 4096];
        // SAFETY: NUL-terminated path and name; a buffer of its length.
        let n = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                name.as_ptr().cast(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        buf.truncate(n.max(0) as usize);
        out += &hex(&buf);
        out += "/";
    }
    out
}

/// The same through the library.
fn lib_acls(v: &AsCred, p: &str) -> String {
    let mut out = String::new();
    for name in [ACL_ACCESS, ACL_DEFAULT] {
        let name = &name[..name.len() - 1];
        out += &hex(&v.lgetxattr(At::Root, p, name).unwrap_or_default());
        out += "/";
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An outcome: the errno, then what root sees at the target afterwards.
fn outcome(e: i32, after: After) -> String {
    let mut s = errname(e);
    match after {
        Some(Ok((perm, uid, gid, size, dir, acls))) => {
            let size = if dir { 0 } else { size }; // tmpfs and memfs differ
            s += &format!(" [{perm:04o} {uid}:{gid} s{size}]");
            if acls != "//" {
                s += &format!(" acl {acls}");
            }
        }
        Some(Err(e)) => s += &format!(" [{}]", errname(e)),
        None => {}
    }
    s
}

fn links_ok() -> bool {
    let v = std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").unwrap_or_default();
    let ok = v.trim() == "1";
    if !ok {
        eprintln!("perm_diff: fs.protected_hardlinks is {v:?}, not 1: link cases left out");
    }
    ok
}

/// Each case: (caller, operation).
fn cases() -> Vec<(User, Op)> {
    let ops = ops(links_ok());
    USERS
        .iter()
        .flat_map(|u| ops.iter().map(move |o| (*u, o.clone())))
        .collect()
}

/// Run every case with the kernel's calls under `base` (tmpfs or a mount).
fn run_kernel(base: &Path, cases: &[(User, Op)]) -> Vec<String> {
    let t = tree();
    let mut out = Vec::with_capacity(cases.len());
    for (n, (u, o)) in cases.iter().enumerate() {
        let pre = format!("c{n}");
        build_kernel(base, &pre, o, &t);
        let o = o.under(&pre);
        let e = as_user(*u, || kernel_op(base, &o));
        let after = o
            .after()
            .map(|p| match std::fs::symlink_metadata(base.join(p)) {
                Ok(m) => Ok((
                    (m.mode() & 0o7777) as u16,
                    m.uid(),
                    m.gid(),
                    m.size(),
                    m.is_dir(),
                    kernel_acls(&base.join(p)),
                )),
                Err(e) => Err(e.raw_os_error().unwrap()),
            });
        out.push(outcome(e, after));
    }
    out
}

/// Run every case through `Vfs::as_cred` over a memfs; `as_root` makes
/// every caller root (the harness's own check: it must then fail).
fn run_lib(cases: &[(User, Op)], as_root: bool) -> Vec<String> {
    let t = tree();
    let vfs = Vfs::new(Arc::new(MemFs::new())).unwrap();
    let root = Cred::root();
    let r = vfs.as_cred(&root);
    let mut out = Vec::with_capacity(cases.len());
    for (n, (u, o)) in cases.iter().enumerate() {
        let pre = format!("c{n}");
        build_lib(&r, &pre, o, &t);
        let o = o.under(&pre);
        let c = if as_root { Cred::root() } else { cred(*u) };
        let e = lib_op(&vfs.as_cred(&c), &o);
        let after = o.after().map(|p| {
            r.lstat(At::Root, p)
                .map(|a| {
                    let dir = a.kind == dcache::fs::FileType::Directory;
                    (a.perm, a.uid, a.gid, a.size, dir, lib_acls(&r, p))
                })
                .map_err(Errno::raw)
        });
        out.push(outcome(e, after));
    }
    out
}

/// The mismatches between two runs, as table lines.
fn diff(cases: &[(User, Op)], want: &[String], got: &[String]) -> Vec<String> {
    cases
        .iter()
        .zip(want.iter().zip(got))
        .filter(|(_, (w, g))| w != g)
        .map(|((u, o), (w, g))| {
            format!(
                "{:<5} {:<22} {:<26} {:<26} {}",
                u.0,
                o.label(),
                o.path(),
                w,
                g
            )
        })
        .collect()
}

/// Panic with the table if anything differs.
fn report(what: &str, cases: &[(User, Op)], want: &[String], got: &[String]) {
    let bad = diff(cases, want, got);
    eprintln!(
        "perm_diff {what}: {} cases ({} callers x {} operations), {} mismatches",
        cases.len(),
        USERS.len(),
        cases.len() / USERS.len(),
        bad.len()
    );
    if !bad.is_empty() {
        let mut t = format!(
            "{:<5} {:<22} {:<26} {:<26} {what}\n",
            "uid", "op", "path", "tmpfs"
        );
        for l in bad.iter().take(40) {
            t += l;
            t += "\n";
        }
        if bad.len() > 40 {
            t += &format!("... and {} more\n", bad.len() - 40);
        }
        panic!("{} of {} cases differ:\n{t}", bad.len(), cases.len());
    }
}

/// A fresh 0755 directory on tmpfs (None, a skip, if /dev/shm is not).
fn shm() -> Option<tempfile::TempDir> {
    let m = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    if !m.lines().any(|l| l.starts_with("tmpfs /dev/shm tmpfs")) {
        dcache_fuse::testing::skipped(format_args!("perm_diff: /dev/shm is not tmpfs"));
        return None;
    }
    let d = tempfile::Builder::new()
        .prefix("perm_diff.")
        .tempdir_in("/dev/shm");
    let d = d.unwrap();
    std::fs::set_permissions(d.path(), PermissionsExt::from_mode(0o755)).unwrap();
    Some(d)
}

/// Root, with the filesystem capabilities (the kernel side needs them to
/// build trees and switch identities). Also clears the umask (process
/// wide; the library applies none).
fn privileged(test: &str) -> bool {
    // SAFETY: plain id query; umask cannot fail.
    let euid = unsafe {
        libc::umask(0);
        libc::geteuid()
    };
    if euid != 0 {
        dcache_fuse::testing::skipped(format_args!("{test}: not root"));
    }
    euid == 0
}

#[test]
fn library_matches_tmpfs() {
    if !privileged("library_matches_tmpfs") {
        return;
    }
    let Some(shm) = shm() else { return };
    let mut cases = cases();
    // Without FUSE_POSIX_ACL the mount offers no ACLs (EOPNOTSUPP): the
    // cases whose tree carries one are left out, and said so.
    if switched_off("posix_acl") {
        let t = tree();
        let all = cases.len();
        cases.retain(|(_, o)| needed(&t, o).all(|e| e.acl.is_empty() && e.dacl.is_empty()));
        dcache_fuse::testing::skipped(format_args!(
            "perm_diff mount: {} of {all} cases carry ACLs ({EXTRA_OPTIONS} switches posix_acl off)",
            all - cases.len()
        ));
    }
    let start = Instant::now();
    let want = run_kernel(shm.path(), &cases);
    let k = start.elapsed();
    let got = run_lib(&cases, false);
    eprintln!(
        "perm_diff library: tmpfs {k:?}, dcache {:?}",
        start.elapsed() - k
    );
    if std::env::var_os("PERM_DIFF_AS_ROOT").is_some() {
        // Evidence that the harness sees permission checks: every caller
        // as root must differ.
        let root = run_lib(&cases, true);
        eprintln!(
            "perm_diff library with every caller as root: {} mismatches of {}",
            diff(&cases, &want, &root).len(),
            cases.len()
        );
        report("dcache-as-root", &cases, &want, &root);
    }
    report("dcache", &cases, &want, &got);
}

/// With no_default_permissions the kernel checks no search permission
/// itself and walks through dentries it has cached (here from root
/// building the tree) without asking the daemon; the daemon therefore gives
/// names in directories not everyone may search an entry timeout of 0, so
/// every caller's walk reaches its LOOKUP check. (Failed when first
/// written: `stat`/`open` of `d0000/x` succeeded for users who may not
/// search.)
#[test]
fn mount_matches_tmpfs() {
    if !privileged("mount_matches_tmpfs") || !fuse_or_skip("mount_matches_tmpfs") {
        return;
    }
    let Some(shm) = shm() else { return };
    let opts = std::env::var("PERM_DIFF_MOUNT_OPTS")
        .unwrap_or_else(|_| "no_default_permissions,allow_other".into());
    let d = Daemon::start("mem", &["-o", &opts]);
    // The mount point's parent is a private temporary directory.
    let parent = d.mnt.parent().unwrap();
    std::fs::set_permissions(parent, PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&d.mnt, PermissionsExt::from_mode(0o755)).unwrap();
    let mut cases = cases();
    // Without FUSE_POSIX_ACL the mount offers no ACLs (EOPNOTSUPP): the
    // cases whose tree carries one are left out, and said so.
    if switched_off("posix_acl") {
        let t = tree();
        let all = cases.len();
        cases.retain(|(_, o)| needed(&t, o).all(|e| e.acl.is_empty() && e.dacl.is_empty()));
        dcache_fuse::testing::skipped(format_args!(
            "perm_diff mount: {} of {all} cases carry ACLs ({EXTRA_OPTIONS} switches posix_acl off)",
            all - cases.len()
        ));
    }
    let start = Instant::now();
    let want = run_kernel(shm.path(), &cases);
    let k = start.elapsed();
    let got = run_kernel(&d.mnt, &cases);
    eprintln!(
        "perm_diff mount: tmpfs {k:?}, dcache mount {:?}",
        start.elapsed() - k
    );
    report("mount", &cases, &want, &got);
}

/// A directory that stops being searchable by everyone is closed at once,
/// although names under it were cached with a timeout while it was open:
/// the daemon has the kernel drop the directory's entry (and its subtree)
/// when a chmod takes search permission away from anyone.
#[test]
fn a_directory_closed_by_chmod_is_closed_at_once() {
    let t = "a_directory_closed_by_chmod_is_closed_at_once";
    if !privileged(t) || !fuse_or_skip(t) {
        return;
    }
    let d = Daemon::start("mem", &["-o", "no_default_permissions,allow_other"]);
    let parent = d.mnt.parent().unwrap();
    std::fs::set_permissions(parent, PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&d.mnt, PermissionsExt::from_mode(0o755)).unwrap();
    let dir = d.mnt.join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("x"), b"x").unwrap();
    let user: User = (1002, 300, &[]);
    let x = cstr(&dir, "x");
    let stat_x = || {
        let x = x.clone();
        as_user(user, move || {
            let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
            // SAFETY: a NUL-terminated path and an out-pointer of the type.
            let r = unsafe { libc::stat(x.as_ptr(), st.as_mut_ptr()) };
            if r == 0 {
                0
            } else {
                Errno::last().raw()
            }
        })
    };
    assert_eq!(stat_x(), 0, "open directory");
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o700)).unwrap();
    // Give the invalidator thread a moment (it runs beside the handler).
    let mut r = stat_x();
    for _ in 0..50 {
        if r != 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        r = stat_x();
    }
    assert_eq!(r, libc::EACCES, "closed directory");
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(stat_x(), 0, "open again");
}
