//! The mount against the real thing: one seeded random sequence of
//! namespace, attribute and data operations runs on a plain tmpfs directory
//! (under /dev/shm) and on a `dcache mount` of each backend (`mem`,
//! `passthrough:` of another fresh /dev/shm directory, and `etcd:`). Every result (Ok or
//! which errno) must match, and after every step so must both trees, by an
//! lstat of every name (before any readdir, which would refresh cached
//! attributes): its type, mode, nlink, uid, gid and size, and which names
//! share an inode (the partition by st_ino, not the numbers). Every 4 steps
//! and at the end, a readdir walk too: the same names, and on each side
//! `d_ino == st_ino` for every entry. A write is read back through another
//! hard link of the same inode, by a fresh open; at the end every file.
//!
//! `DCACHE_DIFF_SEED` (default fixed) and `DCACHE_DIFF_OPS` (default 3000)
//! replay or lengthen a run; a mismatch panics with the seed, the step, the
//! operation and both results. `tmpfs_vs_tmpfs_self_check` runs the same
//! harness on two tmpfs directories, so a failure of the mount runs is a
//! difference of the mount, not of the harness.
//!
//! Not compared, because they legitimately differ: st_dev, the inode
//! numbers themselves, times, st_blocks and st_blksize. Directory sizes are
//! compared: memfs and etcd report tmpfs's 20 bytes per entry, and
//! passthrough passes tmpfs's own.
//!
//! `mount_etcd_vs_tmpfs` mounts `etcd:` on a local etcd the test starts
//! (and kills), one client; it runs 1000 steps unless `DCACHE_DIFF_OPS`
//! says otherwise (3000 pass too, in about 2 minutes of a debug build).

mod fuse_common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, DirEntryExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;

use fuse_common::{fuse_or_skip, Daemon};

const DEFAULT_SEED: u64 = 0x5eed_d1ff;
const DEFAULT_OPS: usize = 3000;
/// Directory names (also the components of parent paths) and file names:
/// a small name space, so names collide and hard links pile up.
const DIRS: [&str; 3] = ["a", "b", "c"];
const FILES: [&str; 8] = ["f", "g", "h", "i", "j", "k", "l", "m"];
const MODES: [u32; 10] = [
    0o644, 0o600, 0o755, 0o201, 0o000, 0o4755, 0o2755, 0o6711, 0o1777, 0o7777,
];
const UIDS: [u32; 4] = [0, 1000, 1001, 65534];
const GIDS: [u32; 4] = [0, 100, 1000, 65534];

/// splitmix64: deterministic, so a seed replays the whole run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    /// A path in the root (20%), in an existing directory of `dirs` at
    /// most 2 deep (60%), or 1 to 2 random directories deep; the last name
    /// usually a directory name when `dir`, a file name otherwise.
    fn path(&mut self, dirs: &[String], dir: bool) -> String {
        let shallow: Vec<&String> = dirs.iter().filter(|d| d.matches('/').count() < 2).collect();
        let mut parts: Vec<&str> = match self.below(10) {
            0 | 1 => vec![],
            _ if shallow.is_empty() || self.chance(25) => (0..1 + self.below(2))
                .map(|_| DIRS[self.below(DIRS.len())])
                .collect(),
            _ => vec![self.pick(&shallow).as_str()],
        };
        let leaf_dir = if self.chance(15) { !dir } else { dir };
        parts.push(if leaf_dir {
            DIRS[self.below(DIRS.len())]
        } else {
            FILES[self.below(FILES.len())]
        });
        parts.join("/")
    }
    /// Usually an existing name from `have`, else a random path.
    fn existing(&mut self, have: &[String], dirs: &[String], dir: bool) -> String {
        if !have.is_empty() && self.chance(80) {
            self.pick(have).clone()
        } else {
            self.path(dirs, dir)
        }
    }
}

/// A mode, shown in octal.
#[derive(Clone, Copy)]
struct Mode(u32);
impl std::fmt::Debug for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0o{:o}", self.0)
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// open(path, O_WRONLY|O_CREAT, plus O_EXCL when the flag is set, mode).
    Create(String, bool, Mode),
    Mkdir(String, Mode),
    /// link(from, to).
    Link(String, String),
    Unlink(String),
    Rmdir(String),
    /// rename(from, to).
    Rename(String, String),
    Chmod(String, Mode),
    /// chown(path, uid, gid); None is -1, left alone.
    Chown(String, Option<u32>, Option<u32>),
    Truncate(String, u64),
    /// Append `len` bytes counting up from `fill` through `path`, then read
    /// the whole file back, by a fresh open, through `via` (another name of
    /// the same inode where there is one).
    Write {
        path: String,
        len: usize,
        fill: u8,
        via: String,
    },
}

/// An operation's result: Ok (with the read-back contents of a write, or
/// the errno of that read) or the errno.
type Outcome = Result<Option<Result<Vec<u8>, i32>>, i32>;

fn io<T>(r: std::io::Result<T>) -> Result<T, i32> {
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

fn show(o: &Outcome) -> String {
    match o {
        Ok(None) => "Ok".into(),
        Ok(Some(Ok(b))) => {
            let fnv = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
                (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
            });
            format!("Ok, read back {} bytes (fnv {fnv:016x})", b.len())
        }
        Ok(Some(Err(e))) => format!("Ok, read back failed: {}", errname(*e)),
        Err(e) => format!("Err({})", errname(*e)),
    }
}

fn errname(e: i32) -> String {
    format!("{e} {}", std::io::Error::from_raw_os_error(e))
}

/// Pick the next operation, biased by the (tmpfs side's) current tree so
/// that existing names, hard links and renames between them are common.
fn gen(r: &mut Rng, s: &Snap) -> Op {
    let files = &s.files;
    let dirs = &s.dirs;
    // Keep the tree small (and each snapshot quick): past 40 names, half
    // the steps remove one.
    let roll = if s.nodes.len() > 40 && r.chance(50) {
        32 + r.below(16)
    } else {
        r.below(100)
    };
    match roll {
        0..=11 => Op::Create(r.path(dirs, false), r.chance(50), Mode(*r.pick(&MODES))),
        12..=19 => Op::Mkdir(
            r.path(dirs, true),
            Mode(*r.pick(&[0o755, 0o700, 0o2775, 0o1777])),
        ),
        20..=31 => Op::Link(r.existing(files, dirs, false), r.path(dirs, false)),
        32..=41 => Op::Unlink(r.existing(files, dirs, false)),
        42..=47 => Op::Rmdir(r.existing(dirs, dirs, true)),
        48..=63 => {
            let (from, to) = match r.below(6) {
                // Over another name of the same inode (a no-op that must
                // keep both names), or onto itself.
                0 | 1 => {
                    let multi: Vec<&Vec<String>> =
                        s.classes.iter().filter(|c| c.len() > 1).collect();
                    if !multi.is_empty() && r.chance(80) {
                        let c = *r.pick(&multi);
                        (r.pick(c).clone(), r.pick(c).clone())
                    } else {
                        let p = r.existing(files, dirs, false);
                        (p.clone(), p)
                    }
                }
                // Directory over (maybe empty) directory.
                2 => (r.existing(dirs, dirs, true), r.existing(dirs, dirs, true)),
                // File over file.
                3 => (
                    r.existing(files, dirs, false),
                    r.existing(files, dirs, false),
                ),
                _ => {
                    let from = r.existing(files, dirs, false);
                    let dir = r.chance(30);
                    (from, r.path(dirs, dir))
                }
            };
            Op::Rename(from, to)
        }
        64..=77 => {
            let pool = if r.chance(75) { files } else { dirs };
            let path = r.existing(pool, dirs, false);
            let (uid, gid) = (*r.pick(&UIDS), *r.pick(&GIDS));
            match r.below(7) {
                0..=3 => Op::Chmod(path, Mode(*r.pick(&MODES))),
                4 => Op::Chown(path, Some(uid), None),
                5 => Op::Chown(path, None, Some(gid)),
                _ => Op::Chown(path, Some(uid), Some(gid)),
            }
        }
        78..=83 => Op::Truncate(
            r.existing(files, dirs, false),
            *r.pick(&[0, 1, 7, 100, 5000]),
        ),
        _ => {
            let path = r.existing(files, dirs, false);
            let via = s
                .classes
                .iter()
                .find(|c| c.contains(&path))
                .and_then(|c| c.iter().find(|p| **p != path))
                .unwrap_or(&path)
                .clone();
            Op::Write {
                path,
                len: 1 + r.below(300),
                fill: r.next() as u8,
                via,
            }
        }
    }
}

fn apply(root: &Path, op: &Op) -> Outcome {
    let p = |rel: &str| root.join(rel);
    let done = |r: std::io::Result<()>| io(r).map(|_| None);
    match op {
        Op::Create(path, excl, mode) => {
            let mut o = OpenOptions::new();
            o.write(true).mode(mode.0);
            if *excl {
                o.create_new(true);
            } else {
                o.create(true);
            }
            done(o.open(p(path)).map(drop))
        }
        Op::Mkdir(path, mode) => done(fs::DirBuilder::new().mode(mode.0).create(p(path))),
        Op::Link(from, to) => done(fs::hard_link(p(from), p(to))),
        Op::Unlink(path) => done(fs::remove_file(p(path))),
        Op::Rmdir(path) => done(fs::remove_dir(p(path))),
        Op::Rename(from, to) => done(fs::rename(p(from), p(to))),
        Op::Chmod(path, mode) => done(fs::set_permissions(
            p(path),
            fs::Permissions::from_mode(mode.0),
        )),
        Op::Chown(path, uid, gid) => done(std::os::unix::fs::chown(p(path), *uid, *gid)),
        Op::Truncate(path, len) => {
            let c = CString::new(p(path).as_os_str().as_bytes()).unwrap();
            // SAFETY: `c` is a NUL-terminated path that outlives the call;
            // truncate(2) only reads it.
            let rc = unsafe { libc::truncate(c.as_ptr(), *len as libc::off_t) };
            done(if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            })
        }
        Op::Write {
            path,
            len,
            fill,
            via,
        } => {
            let data: Vec<u8> = (0..*len).map(|i| fill.wrapping_add(i as u8)).collect();
            let mut f = io(OpenOptions::new().append(true).open(p(path)))?;
            io(f.write_all(&data))?;
            drop(f);
            Ok(Some(io(fs::read(p(via)))))
        }
    }
}

/// One side's tree: every name's attributes, the partition of names by
/// st_ino, and where readdir's d_ino disagreed with st_ino.
#[derive(Default)]
struct Snap {
    nodes: BTreeMap<String, String>,
    classes: BTreeSet<Vec<String>>,
    ino: BTreeMap<String, u64>,
    bad_dino: Vec<String>,
    errors: Vec<String>,
    files: Vec<String>,
    dirs: Vec<String>,
}

/// What is compared of one name: type, mode, nlink, uid, gid, size.
fn describe(md: &fs::Metadata) -> String {
    let t = md.file_type();
    let kind = if t.is_dir() {
        'd'
    } else if t.is_file() {
        'f'
    } else {
        '?'
    };
    let (mode, nlink, size) = (md.mode(), md.nlink(), md.size());
    let (uid, gid) = (md.uid(), md.gid());
    format!("{kind} mode {mode:o} nlink {nlink} uid {uid} gid {gid} size {size}")
}

impl Snap {
    /// lstat `rel` under `root` and record it; its st_ino if it exists.
    fn record(&mut self, root: &Path, rel: &str) -> Option<u64> {
        let full = if rel == "." {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        match fs::symlink_metadata(full) {
            Ok(md) => {
                if rel != "." {
                    if md.is_dir() {
                        &mut self.dirs
                    } else {
                        &mut self.files
                    }
                    .push(rel.into());
                }
                self.nodes.insert(rel.into(), describe(&md));
                self.ino.insert(rel.into(), md.ino());
                Some(md.ino())
            }
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(-1);
                let what = format!("lstat failed: {}", errname(errno));
                self.nodes.insert(rel.into(), what);
                None
            }
        }
    }

    fn finish(mut self) -> Snap {
        let mut by_ino: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for (path, i) in &self.ino {
            by_ino.entry(*i).or_default().push(path.clone());
        }
        self.classes = by_ino.into_values().collect();
        self.files.sort();
        self.dirs.sort();
        self
    }
}

/// The tree as readdir shows it: walk every directory, lstat every entry
/// and check its d_ino.
fn walk(root: &Path) -> Snap {
    let mut s = Snap::default();
    s.record(root, ".");
    let mut todo = vec![String::new()];
    while let Some(dir) = todo.pop() {
        let entries =
            fs::read_dir(root.join(&dir)).and_then(|it| it.collect::<std::io::Result<Vec<_>>>());
        let mut entries = match entries {
            Ok(v) => v,
            Err(e) => {
                s.errors.push(format!("readdir {dir:?}: {e}"));
                continue;
            }
        };
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            if let Some(ino) = s.record(root, &rel) {
                if e.ino() != ino {
                    s.bad_dino
                        .push(format!("{rel}: d_ino {} != st_ino {ino}", e.ino()));
                }
                if s.dirs.last() == Some(&rel) {
                    todo.push(rel);
                }
            }
        }
    }
    s.finish()
}

/// lstat each of `paths` (the names the other side has) without reading
/// any directory first: on a FUSE mount a readdir(plus) refreshes the
/// attributes of the names it lists, which would hide stale ones.
fn stat_all<'a>(root: &Path, paths: impl Iterator<Item = &'a String>) -> Snap {
    let mut s = Snap::default();
    for rel in paths {
        s.record(root, rel);
    }
    s.finish()
}

/// Every difference between the two trees, and every d_ino problem of
/// either, one line each.
fn diff(a: &Snap, b: &Snap, an: &str, bn: &str) -> Vec<String> {
    let mut out = Vec::new();
    let keys: BTreeSet<&String> = a.nodes.keys().chain(b.nodes.keys()).collect();
    for k in keys {
        let (x, y) = (a.nodes.get(k), b.nodes.get(k));
        if x != y {
            let none = String::from("(no such name)");
            let (x, y) = (x.unwrap_or(&none), y.unwrap_or(&none));
            out.push(format!("{k}: {an} {x} / {bn} {y}"));
        }
    }
    for c in a.classes.difference(&b.classes) {
        out.push(format!("same-inode class only on {an}: {c:?}"));
    }
    for c in b.classes.difference(&a.classes) {
        out.push(format!("same-inode class only on {bn}: {c:?}"));
    }
    for (n, s, other) in [(an, a, b), (bn, b, a)] {
        out.extend(s.bad_dino.iter().map(|m| format!("{n}: {m}")));
        // A directory neither side may read (not root: a mode without
        // r or x for the owner) is the same error on both.
        out.extend(
            s.errors
                .iter()
                .filter(|m| !other.errors.contains(m))
                .map(|m| format!("{n}: {m}")),
        );
    }
    out
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    match std::env::var(key) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok().map(|n| n.to_string()),
                None => Some(v.to_string()),
            };
            parsed
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{key}={v}: not a number"))
        }
        Err(_) => default,
    }
}

fn shm_dir() -> Option<tempfile::TempDir> {
    let tmpfs = fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split(' ').take(3).eq(["tmpfs", "/dev/shm", "tmpfs"]))
        })
        .unwrap_or(false);
    if !tmpfs {
        return None;
    }
    Some(tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm"))
}

/// Run the sequence on `a` (tmpfs) and `b`; panic at the first mismatch.
fn run(label: &str, a: &Path, b: &Path) {
    // etcd: every change is a transaction (~1-2 ms and an fsync), so the
    // default run is shorter there.
    let default_ops = if label == "etcd" { 1000 } else { DEFAULT_OPS };
    let seed = env_or("DCACHE_DIFF_SEED", DEFAULT_SEED);
    let ops = env_or("DCACHE_DIFF_OPS", default_ops);
    let (an, bn) = ("tmpfs", label);
    let replay = format!("DCACHE_DIFF_SEED={seed:#x} DCACHE_DIFF_OPS={ops}");
    // Same root on both sides: the roots come from different places (a
    // tempdir is 0700) and are not what is under test. Root's, or as
    // another user (scripts/nonroot-tests.sh) that user's: its chowns to
    // the other owners are then compared as refusals (EPERM on both).
    // SAFETY: geteuid and getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid != 0 {
        dcache_fuse::testing::skipped(format_args!(
            "{label}: chown to other owners succeeding (needs root; \
             as uid {uid} they are compared as refusals)"
        ));
    }
    for root in [a, b] {
        fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(root, Some(uid), Some(gid)).unwrap();
    }
    let start = Instant::now();
    let mut r = Rng(seed);
    // Per operation kind: how many succeeded, how many failed.
    let mut tally: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let fail = |step: &str, what: &str, d: &[String]| -> ! {
        let more = d.len().saturating_sub(25);
        panic!(
            "[{label}] {replay}: {step}: {what}:\n  {}{}",
            d[..d.len().min(25)].join("\n  "),
            if more > 0 {
                format!("\n  ... and {more} more")
            } else {
                String::new()
            }
        );
    };
    let mut sa = walk(a);
    let d = diff(&sa, &walk(b), an, bn);
    if !d.is_empty() {
        fail("before step 0", "the trees differ", &d);
    }
    for step in 0..ops {
        let op = gen(&mut r, &sa);
        let (ra, rb) = (apply(a, &op), apply(b, &op));
        if ra != rb {
            panic!(
                "[{label}] {replay}: step {step}: {op:?}\n  {an}: {}\n  {bn}: {}",
                show(&ra),
                show(&rb)
            );
        }
        let kind = format!("{op:?}")
            .split(['(', ' '])
            .next()
            .unwrap()
            .to_string();
        let t = tally.entry(kind).or_default();
        if ra.is_ok() {
            t.0 += 1;
        } else {
            t.1 += 1;
        }
        let here = format!("step {step}: after {op:?} (both {})", show(&ra));
        sa = walk(a);
        // Every name first, by lstat alone; every few steps and at the end
        // also the readdir walk (names, d_ino), which on a FUSE mount
        // refreshes the attributes of what it lists.
        // (stat_all reads no directory: tmpfs's readdir errors, if any,
        // are the readdir walk's to compare.)
        let sb = Snap {
            errors: sa.errors.clone(),
            ..stat_all(b, sa.nodes.keys())
        };
        let d = diff(&sa, &sb, an, bn);
        if !d.is_empty() {
            fail(&here, "stat of every name differs", &d);
        }
        if step % 4 == 3 || step + 1 == ops {
            let d = diff(&sa, &walk(b), an, bn);
            if !d.is_empty() {
                fail(&here, "the readdir walks differ", &d);
            }
        }
    }
    // At the end, the contents of every file, by a fresh open.
    let read = |root: &Path| -> BTreeMap<&String, Result<Vec<u8>, i32>> {
        sa.files
            .iter()
            .map(|f| (f, io(fs::read(root.join(f)))))
            .collect()
    };
    let (ca, cb) = (read(a), read(b));
    let d: Vec<String> = ca
        .iter()
        .filter(|(f, c)| cb.get(*f) != Some(*c))
        .map(|(f, c)| {
            let (x, y) = (Ok(Some(c.clone())), Ok(Some(cb[f].clone())));
            format!("{f}: {an} {} / {bn} {}", show(&x), show(&y))
        })
        .collect();
    if !d.is_empty() {
        fail("at the end", "file contents differ", &d);
    }
    eprintln!(
        "[{label}] {replay}: {ops} operations agree ({} names at the end, {:.1} s); \
         ok/failed: {tally:?}",
        sa.nodes.len(),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn tmpfs_vs_tmpfs_self_check() {
    let (Some(a), Some(b)) = (shm_dir(), shm_dir()) else {
        dcache_fuse::testing::skipped(format_args!(
            "tmpfs_vs_tmpfs_self_check: /dev/shm is not tmpfs"
        ));
        return;
    };
    run("tmpfs2", a.path(), b.path());
}

fn against_mount(test: &str, label: &str, backend: impl Fn(&Path) -> String) {
    if !fuse_or_skip(test) {
        return;
    }
    let (Some(a), Some(host)) = (shm_dir(), shm_dir()) else {
        dcache_fuse::testing::skipped(format_args!("{test}: /dev/shm is not tmpfs"));
        return;
    };
    // The default mount options (1 s attribute and entry timeouts), as
    // users run it.
    let d = Daemon::start(&backend(host.path()), &[]);
    run(label, a.path(), &d.mnt);
}

#[test]
fn mount_mem_vs_tmpfs() {
    against_mount("mount_mem_vs_tmpfs", "mem", |_| "mem".into());
}

#[test]
fn mount_passthrough_vs_tmpfs() {
    against_mount("mount_passthrough_vs_tmpfs", "passthrough", |h| {
        format!("passthrough:{}", h.display())
    });
}

/// The etcd backend (one client): a local etcd on 127.0.0.1 (free ports,
/// temporary data directory), killed when the test ends.
#[test]
fn mount_etcd_vs_tmpfs() {
    const T: &str = "mount_etcd_vs_tmpfs";
    if !dcache_bench::etcd::etcd_binary() {
        if std::env::var_os("CI").is_some() {
            panic!("{T}: the etcd binary is missing (apt-get install etcd-server)");
        }
        dcache_fuse::testing::skipped(format_args!(
            "{T}: no etcd binary (apt-get install etcd-server)"
        ));
        return;
    }
    let server = dcache_bench::etcd::EtcdServer::start_or_use(None).expect("start etcd");
    let spec = server.fresh_volume().expect("format");
    against_mount(T, "etcd", |_| format!("etcd:{spec}"));
    drop(server);
}

/// The etcd backend with file data in an object store (a local directory
/// store): the same sequence, through buffered writes committed at close.
#[test]
fn mount_etcd_objects_vs_tmpfs() {
    const T: &str = "mount_etcd_objects_vs_tmpfs";
    if !dcache_bench::etcd::etcd_binary() {
        if std::env::var_os("CI").is_some() {
            panic!("{T}: the etcd binary is missing (apt-get install etcd-server)");
        }
        dcache_fuse::testing::skipped(format_args!(
            "{T}: no etcd binary (apt-get install etcd-server)"
        ));
        return;
    }
    let server = dcache_bench::etcd::EtcdServer::start_or_use(None).expect("start etcd");
    let spec = server.fresh_spec();
    let data = tempfile::tempdir().expect("tempdir");
    let opts = dcache_etcd::FormatOptions {
        data: Some(data.path().to_str().expect("utf-8").to_string()),
        ..Default::default()
    };
    dcache_etcd::format(&spec, &opts).expect("format --data");
    against_mount(T, "etcd", |_| format!("etcd:{spec}"));
    drop(server);
}
