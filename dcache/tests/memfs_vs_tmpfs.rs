//! memfs against the real thing: one random sequence of namespace and data
//! operations runs on a tmpfs directory (under /dev/shm) and on a memfs;
//! every result (success or errno) must match, and so must the trees
//! (names, types, link counts, sizes, block counts) at every checkpoint.
//! Skipped, with a note, where /dev/shm is not tmpfs.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use dcache::errno::Errno;
use dcache::fs::memfs::MemFs;
use dcache::fs::{Ctx, FileSystem, FileType, Ino, RenameFlags, SetAttr};

/// Every symlink made points here: nothing on either side follows one, so
/// a walk through a symlink fails with ENOENT on both.
const DANGLING: &str = "/nonexistent-dcache-target/x";
const NAMES: [&str; 3] = ["a", "b", "c"];

fn tmpfs_available() -> bool {
    fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split(' ').take(3).eq(["tmpfs", "/dev/shm", "tmpfs"]))
        })
        .unwrap_or(false)
}

/// Small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn path(&mut self) -> String {
        let depth = 1 + self.below(3);
        (0..depth)
            .map(|_| NAMES[self.below(3) as usize])
            .collect::<Vec<_>>()
            .join("/")
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Mkdir(String),
    Mkfifo(String),
    Symlink(String),
    Unlink(String),
    Rmdir(String),
    Link(String, String),
    Rename(String, String, u32),
    Truncate(String, u64),
    Append(String, usize),
    Readlink(String),
}

fn random_op(r: &mut Rng) -> Op {
    match r.below(16) {
        0 | 1 => Op::Create(r.path()),
        2 | 3 => Op::Mkdir(r.path()),
        4 => Op::Mkfifo(r.path()),
        5 => Op::Symlink(r.path()),
        6 | 7 => Op::Unlink(r.path()),
        8 => Op::Rmdir(r.path()),
        9 => Op::Link(r.path(), r.path()),
        10..=12 => {
            let flags = [0, 0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE][r.below(4) as usize];
            Op::Rename(r.path(), r.path(), flags)
        }
        13 => Op::Truncate(r.path(), [0, 10, 5000, 70000][r.below(4) as usize]),
        14 => Op::Append(r.path(), [1, 3000, 9000][r.below(3) as usize]),
        _ => Op::Readlink(r.path()),
    }
}

type Res = Result<(), Errno>;

fn io(r: std::io::Result<impl Sized>) -> Res {
    r.map(|_| ()).map_err(|e| Errno::from_io(&e))
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn libc_res(rc: i32) -> Res {
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

fn run_kernel(root: &Path, op: &Op) -> Res {
    let p = |s: &str| root.join(s);
    match op {
        Op::Create(a) => io(fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(p(a))),
        Op::Mkdir(a) => io(fs::create_dir(p(a))),
        Op::Mkfifo(a) => {
            let c = cstr(&p(a));
            // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
            libc_res(unsafe { libc::mknod(c.as_ptr(), libc::S_IFIFO | 0o600, 0) })
        }
        Op::Symlink(a) => io(std::os::unix::fs::symlink(DANGLING, p(a))),
        Op::Unlink(a) => io(fs::remove_file(p(a))),
        Op::Rmdir(a) => io(fs::remove_dir(p(a))),
        Op::Link(a, b) => io(fs::hard_link(p(a), p(b))),
        Op::Rename(a, b, flags) => {
            let (ca, cb) = (cstr(&p(a)), cstr(&p(b)));
            // SAFETY: both paths are valid NUL-terminated strings that
            // outlive the call; AT_FDCWD is ignored for absolute paths.
            libc_res(unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    ca.as_ptr(),
                    libc::AT_FDCWD,
                    cb.as_ptr(),
                    *flags,
                )
            })
        }
        Op::Truncate(a, n) => {
            let c = cstr(&p(a));
            // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
            libc_res(unsafe { libc::truncate(c.as_ptr(), *n as libc::off_t) })
        }
        Op::Append(a, n) => {
            let f = fs::OpenOptions::new().append(true).open(p(a));
            match f {
                Ok(mut f) => io(f.write_all(&vec![7u8; *n])),
                Err(e) => io(Err::<(), _>(e)),
            }
        }
        Op::Readlink(a) => io(fs::read_link(p(a))),
    }
}

/// The directory holding `path`'s last component and that component, walked
/// the way the kernel would (a symlink in the middle is dangling: ENOENT).
fn parent<'p>(m: &MemFs, path: &'p str) -> Result<(Ino, &'p [u8]), Errno> {
    let mut comps: Vec<&str> = path.split('/').collect();
    let last = comps.pop().unwrap();
    let mut dir = m.root();
    for c in comps {
        let a = m.lookup(dir, c.as_bytes())?.ok_or(Errno::ENOENT)?;
        if a.kind == FileType::Symlink {
            return Err(Errno::ENOENT);
        }
        // The kernel's walk wants every component before the last to be a
        // directory, before it looks at the other path of a rename or link.
        if a.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        dir = a.ino;
    }
    Ok((dir, last.as_bytes()))
}

/// `path` itself, without following a final symlink.
fn resolve_nofollow(m: &MemFs, path: &str) -> Result<Ino, Errno> {
    let (dir, name) = parent(m, path)?;
    Ok(m.lookup(dir, name)?.ok_or(Errno::ENOENT)?.ino)
}

/// `path` itself, following a final (always dangling) symlink.
fn resolve_follow(m: &MemFs, path: &str) -> Result<Ino, Errno> {
    let ino = resolve_nofollow(m, path)?;
    if m.getattr(ino)?.kind == FileType::Symlink {
        return Err(Errno::ENOENT);
    }
    Ok(ino)
}

fn run_memfs(m: &MemFs, op: &Op) -> Res {
    let ctx = Ctx::ROOT;
    match op {
        Op::Create(a) => {
            let (d, n) = parent(m, a)?;
            m.create(d, n, 0o644, ctx).map(drop)
        }
        Op::Mkdir(a) => {
            let (d, n) = parent(m, a)?;
            m.mkdir(d, n, 0o755, ctx).map(drop)
        }
        Op::Mkfifo(a) => {
            let (d, n) = parent(m, a)?;
            m.mknod(d, n, FileType::Fifo, 0o600, 0, ctx).map(drop)
        }
        Op::Symlink(a) => {
            let (d, n) = parent(m, a)?;
            m.symlink(d, n, DANGLING.as_bytes(), ctx).map(drop)
        }
        Op::Unlink(a) => {
            let (d, n) = parent(m, a)?;
            m.unlink(d, n)
        }
        Op::Rmdir(a) => {
            let (d, n) = parent(m, a)?;
            m.rmdir(d, n)
        }
        Op::Link(a, b) => {
            let ino = resolve_nofollow(m, a)?;
            let (d, n) = parent(m, b)?;
            m.link(ino, d, n).map(drop)
        }
        Op::Rename(a, b, flags) => {
            let (od, on) = parent(m, a)?;
            let (nd, nn) = parent(m, b)?;
            m.rename(od, on, nd, nn, RenameFlags::from_bits(*flags)?)
        }
        Op::Truncate(a, n) => {
            let ino = resolve_follow(m, a)?;
            let set = SetAttr {
                size: Some(*n),
                ..SetAttr::default()
            };
            m.setattr(ino, &set, ctx).map(drop)
        }
        Op::Append(a, n) => {
            let ino = resolve_follow(m, a)?;
            let fh = m.open(ino, libc::O_WRONLY | libc::O_APPEND)?;
            let r = m.write(ino, fh, 0, &vec![7u8; *n]);
            m.release(ino, fh)?;
            r.map(drop)
        }
        Op::Readlink(a) => {
            let ino = resolve_nofollow(m, a)?;
            m.readlink(ino).map(drop)
        }
    }
}

/// (type, nlink, size, blocks) for every path below the root, the root too.
type Snapshot = BTreeMap<String, (char, u64, u64, u64)>;

fn kind_char(k: FileType) -> char {
    match k {
        FileType::Regular => 'f',
        FileType::Directory => 'd',
        FileType::Symlink => 'l',
        FileType::Fifo => 'p',
        _ => '?',
    }
}

fn snap_kernel(root: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    let mut todo = vec![(PathBuf::from(root), String::new())];
    while let Some((dir, rel)) = todo.pop() {
        let md = fs::symlink_metadata(&dir).unwrap();
        out.insert(rel.clone(), ('d', md.nlink(), md.size(), md.blocks()));
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let md = e.path().symlink_metadata().unwrap();
            let kind = FileType::from_mode(md.mode()).unwrap();
            if kind == FileType::Directory {
                todo.push((e.path(), path));
            } else {
                out.insert(path, (kind_char(kind), md.nlink(), md.size(), md.blocks()));
            }
        }
    }
    out
}

fn snap_memfs(m: &MemFs) -> Snapshot {
    let mut out = Snapshot::new();
    let mut todo = vec![(m.root(), String::new())];
    while let Some((dir, rel)) = todo.pop() {
        let a = m.getattr(dir).unwrap();
        out.insert(rel.clone(), ('d', a.nlink.into(), a.size, a.blocks));
        let mut entries = Vec::new();
        m.readdir(dir, 2, &mut |e| {
            entries.push(e);
            true
        })
        .unwrap();
        for e in entries {
            let name = String::from_utf8(e.name).unwrap();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let a = m.getattr(e.ino).unwrap();
            if a.kind == FileType::Directory {
                todo.push((e.ino, path));
            } else {
                out.insert(path, (kind_char(a.kind), a.nlink.into(), a.size, a.blocks));
            }
        }
    }
    out
}

#[test]
fn same_errnos_and_trees_as_tmpfs() {
    if !tmpfs_available() {
        eprintln!("skipped: /dev/shm is not tmpfs here");
        return;
    }
    let mut compared = 0;
    let mut outcomes: BTreeMap<(String, String), u32> = BTreeMap::new();
    for seed in 1..=10u64 {
        let dir = tempfile::Builder::new()
            .prefix("dcache-memfs-diff")
            .tempdir_in("/dev/shm")
            .unwrap();
        let m = MemFs::with_root(0o755, 0, 0);
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut history: Vec<(Op, Res)> = Vec::new();
        for i in 0..5000 {
            let op = random_op(&mut rng);
            // Opening a fifo for writing blocks until a reader comes; fifo
            // I/O is the kernel's business anyway, not memfs's.
            let fifo_write = matches!(&op, Op::Append(a, _)
                if fs::metadata(dir.path().join(a)).is_ok_and(|md| md.file_type().is_fifo()));
            if !fifo_write {
                let want = run_kernel(dir.path(), &op);
                let got = run_memfs(&m, &op);
                let tail: Vec<_> = history.iter().rev().take(8).rev().collect();
                assert_eq!(
                    got,
                    want,
                    "seed {seed} op {i}: {op:?}\nlast ops: {tail:?}\nkernel tree: {:?}",
                    snap_kernel(dir.path())
                );
                history.push((op, got));
            }
            if i % 100 == 99 {
                assert_eq!(
                    snap_memfs(&m),
                    snap_kernel(dir.path()),
                    "seed {seed} after op {i}"
                );
                m.check().unwrap();
                compared += 1;
            }
        }
        for (op, r) in &history {
            let name = format!("{op:?}");
            let kind = name.split('(').next().unwrap_or("").to_string();
            *outcomes.entry((kind, format!("{r:?}"))).or_default() += 1;
        }
        let ok = history.iter().filter(|(_, r)| r.is_ok()).count();
        assert!(
            ok > 150,
            "seed {seed}: only {ok} ops succeeded; the mix is too weak"
        );
    }
    assert_eq!(compared, 10 * 50);
    // What was covered (shown with --nocapture).
    for ((op, r), n) in &outcomes {
        eprintln!("{op:>9} {r:<18} {n}");
    }
}
