//! fallocate, SEEK_DATA/SEEK_HOLE, copy_file_range and O_TMPFILE through
//! the library, on memfs and on passthrough (over a tmpfs directory),
//! compared step by step with the host's own calls on a tmpfs file: every
//! errno, every offset `lseek` finds, every size and block count.
//! Skipped, with a SKIPPED line, where /dev/shm is not tmpfs.

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::fs::passthrough::Passthrough;
use dcache::fs::{Ctx, FileSystem, SetAttr};
use dcache::{oflags, At, Cred, Errno, OpenFile, Vfs};

const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
const MIB: u64 = 1 << 20;

fn tmpfs_dir(test: &str) -> Option<tempfile::TempDir> {
    let shm = std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split(' ').take(3).eq(["tmpfs", "/dev/shm", "tmpfs"]))
        })
        .unwrap_or(false);
    if !shm {
        eprintln!("SKIPPED {test}: /dev/shm is not tmpfs");
        return None;
    }
    Some(tempfile::tempdir_in("/dev/shm").unwrap())
}

/// One step of a scenario on one file.
#[derive(Clone, Copy, Debug)]
enum Step {
    Trunc(u64),
    Write(u64, usize),
    Falloc(i32, u64, u64),
    Seek(u64, i32),
    Stat,
    /// A checksum of `len` bytes read at the offset.
    Read(u64, usize),
}

type Res = Result<(u64, u64), i32>;

/// The file a scenario runs on: the host's (tmpfs) or the library's.
trait Side {
    fn step(&self, s: Step) -> Res;
}

struct Host(OwnedFd);

fn host(r: libc::c_long) -> Result<u64, i32> {
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    } else {
        Ok(r as u64)
    }
}

fn checksum(buf: &[u8]) -> u64 {
    buf.iter().enumerate().fold(0u64, |h, (i, &b)| {
        h.wrapping_mul(31).wrapping_add(b as u64 ^ i as u64)
    })
}

fn data(off: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (off as usize + i) as u8 | 1).collect()
}

impl Side for Host {
    fn step(&self, s: Step) -> Res {
        let fd = self.0.as_raw_fd();
        let r = match s {
            // SAFETY: `fd` is live.
            Step::Trunc(n) => host(unsafe { libc::ftruncate(fd, n as i64) } as _),
            Step::Write(off, len) => {
                let d = data(off, len);
                // SAFETY: `fd` is live; `d` holds `len` bytes.
                host(unsafe { libc::pwrite(fd, d.as_ptr().cast(), len, off as i64) } as _)
            }
            Step::Falloc(m, off, len) => {
                // SAFETY: `fd` is live; plain integers.
                host(unsafe { libc::fallocate(fd, m, off as i64, len as i64) } as _)
            }
            // SAFETY: `fd` is live; plain integers.
            Step::Seek(off, w) => host(unsafe { libc::lseek(fd, off as i64, w) } as _),
            Step::Stat => {
                // SAFETY: a zeroed stat is a valid out-buffer.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: `fd` is live; `st` is writable.
                host(unsafe { libc::fstat(fd, &mut st) } as _)?;
                return Ok((st.st_size as u64, st.st_blocks as u64));
            }
            Step::Read(off, len) => {
                let mut buf = vec![0u8; len];
                // SAFETY: `fd` is live; `buf` has `len` writable bytes.
                let r = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), len, off as i64) };
                let n = host(r as _)?;
                return Ok((n, checksum(&buf[..n as usize])));
            }
        };
        r.map(|v| (v, 0))
    }
}

struct Lib<'v>(&'v Vfs, OpenFile<'v>);

impl Side for Lib<'_> {
    fn step(&self, s: Step) -> Res {
        let f = &self.1;
        let r = match s {
            Step::Trunc(n) => {
                let set = SetAttr {
                    size: Some(n),
                    ..SetAttr::default()
                };
                let root = self.0.as_root();
                root.setattr_dentry(f.dentry(), &set, true).map(|_| 0)
            }
            Step::Write(off, len) => f.write(off, &data(off, len)).map(|n| n as u64),
            Step::Falloc(m, off, len) => f.fallocate(m, off, len).map(|_| 0),
            Step::Seek(off, w) => f.seek_data_hole(off, w),
            Step::Stat => {
                let a = self.0.getattr_dentry(f.dentry()).map_err(|e| e.0)?;
                return Ok((a.size, a.blocks));
            }
            Step::Read(off, len) => {
                let mut buf = vec![0u8; len];
                let n = f.read(off, &mut buf).map_err(|e| e.0)?;
                return Ok((n as u64, checksum(&buf[..n])));
            }
        };
        r.map(|v| (v, 0)).map_err(|e| e.0)
    }
}

fn host_open(dir: &Path, name: &str, flags: i32) -> OwnedFd {
    let f = OpenOptions::new()
        .read(flags & libc::O_ACCMODE != libc::O_WRONLY)
        .write(flags & libc::O_ACCMODE != libc::O_RDONLY)
        .create(flags & libc::O_CREAT != 0)
        .custom_flags(flags & !(libc::O_ACCMODE | libc::O_CREAT))
        .mode(0o644)
        .open(dir.join(name))
        .unwrap();
    f.into()
}

/// The fixed scenario: a 1 GiB sparse file with data in the middle,
/// reserved ranges, a punched hole; then lseek everywhere that matters.
fn scenario() -> Vec<Step> {
    use Step::*;
    let mid = 300 * MIB;
    let mut v = vec![
        Trunc(1 << 30),
        Write(mid + 5, 10_000),
        Write(0, 1),
        Falloc(KEEP, 500 * MIB, 64 << 10),
        Falloc(0, 900 * MIB + 100, 8192),
        Falloc(PUNCH | KEEP, mid + 4096, 4096),
        Falloc(KEEP, (1 << 30) + 4096, 4096),
        Falloc(0, (1 << 30) - 10, 20),
        Stat,
        Read(mid, 20_000),
        Read(0, 4096),
        Read(900 * MIB, 10_000),
    ];
    let offs = [
        0,
        1,
        4095,
        4096,
        mid,
        mid + 5,
        mid + 4096,
        mid + 8192,
        mid + 12_000,
        mid + 20_000,
        500 * MIB,
        900 * MIB + 100,
        (1 << 30) - 1,
        (1 << 30) + 9,
        (1 << 30) + 10,
        1 << 40,
    ];
    for o in offs {
        v.push(Seek(o, libc::SEEK_DATA));
        v.push(Seek(o, libc::SEEK_HOLE));
    }
    // What Linux refuses, before and after the mode checks.
    v.extend([
        Falloc(PUNCH, 0, 10),
        Falloc(0, 0, 0),
        Falloc(0x100, 0, 10),
        Falloc(PUNCH | ZERO | KEEP, 0, 10),
        Falloc(libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096),
        Falloc(libc::FALLOC_FL_INSERT_RANGE, 0, 4096),
        Falloc(0, i64::MAX as u64 - 10, 100),
        Falloc(KEEP, i64::MAX as u64, 1),
        Seek(0, 42),
        Stat,
    ]);
    v
}

/// Random steps on a small file (64 pages), from a fixed seed.
fn random_steps(seed: u64, n: usize) -> Vec<Step> {
    let mut x = seed | 1;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let page = 4096;
    (0..n)
        .map(|_| {
            let off = next(64) * page + if next(3) == 0 { next(page) } else { 0 };
            let len = next(8) * page + next(2) * next(page) + 1;
            match next(9) {
                0 => Step::Trunc(next(64) * page + next(2) * next(page)),
                1 => Step::Write(off, len as usize),
                2 => Step::Falloc(0, off, len),
                3 => Step::Falloc(KEEP, off, len),
                4 => Step::Falloc(PUNCH | KEEP, off, len),
                5 => Step::Stat,
                6 => Step::Read(off, len as usize),
                7 => Step::Seek(off, libc::SEEK_DATA),
                _ => Step::Seek(off, libc::SEEK_HOLE),
            }
        })
        .collect()
}

/// Run `steps` on tmpfs and on `vfs`'s file `name`, comparing each step.
fn compare(host_dir: &Path, vfs: &Vfs, name: &str, steps: &[Step], what: &str) {
    let h = Host(host_open(host_dir, name, libc::O_RDWR | libc::O_CREAT));
    let flags = oflags::O_CREAT | oflags::O_RDWR;
    let f = vfs.as_root().open(At::Root, name, flags, 0o644).unwrap();
    let lib = Lib(vfs, f);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(lib.step(*s), h.step(*s), "{what}: step {i} {s:?}");
    }
}

fn vfs_mem() -> Vfs {
    Vfs::new(Arc::new(MemFs::new())).unwrap()
}

#[test]
fn memfs_and_passthrough_match_tmpfs() {
    let Some(t) = tmpfs_dir("memfs_and_passthrough_match_tmpfs") else {
        return;
    };
    let (host_dir, served) = (t.path().join("host"), t.path().join("served"));
    std::fs::create_dir(&host_dir).unwrap();
    std::fs::create_dir(&served).unwrap();
    let pt = Vfs::new(Arc::new(Passthrough::new(&served).unwrap())).unwrap();
    let mem = vfs_mem();
    for (vfs, what) in [(&mem, "memfs"), (&pt, "passthrough")] {
        compare(&host_dir, vfs, &format!("big-{what}"), &scenario(), what);
        for seed in 1..=12 {
            let name = format!("small-{what}-{seed}");
            compare(&host_dir, vfs, &name, &random_steps(seed, 400), what);
        }
    }
}

#[test]
fn fallocate_refuses_what_linux_refuses() {
    let Some(t) = tmpfs_dir("fallocate_refuses_what_linux_refuses") else {
        return;
    };
    let pt = Vfs::new(Arc::new(Passthrough::new(t.path()).unwrap())).unwrap();
    let mem = vfs_mem();
    for vfs in [&mem, &pt] {
        let root = vfs.as_root();
        root.mkdir(At::Root, "d", 0o755).unwrap();
        root.create(At::Root, "f", 0o644).unwrap();
        let ro = root.open(At::Root, "f", oflags::O_RDONLY, 0).unwrap();
        assert_eq!(ro.fallocate(0, 0, 10), Err(Errno::EBADF));
        let dir = root.open(At::Root, "d", oflags::O_RDONLY, 0).unwrap();
        assert_eq!(dir.fallocate(0, 0, 10), Err(Errno::EBADF));
        let path = root.open(At::Root, "f", libc::O_PATH, 0).unwrap();
        assert_eq!(path.fallocate(0, 0, 10), Err(Errno::EBADF));
        assert_eq!(path.seek_data_hole(0, libc::SEEK_DATA), Err(Errno::EBADF));
        let rw = root.open(At::Root, "f", oflags::O_RDWR, 0).unwrap();
        assert_eq!(rw.fallocate(0, 1 << 63, 1), Err(Errno::EINVAL));
        assert_eq!(rw.fallocate(0, 0, 0), Err(Errno::EINVAL));
        // SEEK_DATA in an empty file: ENXIO.
        assert_eq!(
            rw.seek_data_hole(0, libc::SEEK_DATA),
            Err(Errno(libc::ENXIO))
        );
        // The position moves with lseek.
        rw.write(0, b"0123456789").unwrap();
        assert_eq!(rw.file().lseek(3, libc::SEEK_HOLE), Ok(10));
        assert_eq!(rw.file().pos(), 10);
        assert_eq!(rw.file().lseek(-4, libc::SEEK_END), Ok(6));
        assert_eq!(rw.file().lseek(-7, libc::SEEK_CUR), Err(Errno::EINVAL));
    }
}

#[test]
fn memfs_zero_range_zeroes_and_keeps_blocks() {
    // tmpfs answers EOPNOTSUPP here; memfs does what ext4 does.
    let vfs = vfs_mem();
    let flags = oflags::O_CREAT | oflags::O_RDWR;
    let f = vfs.as_root().open(At::Root, "z", flags, 0o644).unwrap();
    f.write(0, &[7u8; 3 * 4096]).unwrap();
    f.fallocate(ZERO, 100, 2 * 4096).unwrap();
    let mut buf = vec![1u8; 3 * 4096];
    assert_eq!(f.read(0, &mut buf), Ok(3 * 4096));
    assert_eq!(buf[..100], [7u8; 100]);
    assert!(buf[100..100 + 2 * 4096].iter().all(|&b| b == 0));
    assert_eq!(buf[100 + 2 * 4096], 7);
    let a = vfs.getattr_dentry(f.dentry()).unwrap();
    assert_eq!((a.size, a.blocks), (3 * 4096, 24));
    f.fallocate(ZERO | KEEP, 5 * 4096, 4096).unwrap();
    assert_eq!(vfs.getattr_dentry(f.dentry()).unwrap().size, 3 * 4096);
    f.fallocate(ZERO, 5 * 4096, 4096).unwrap();
    let a = vfs.getattr_dentry(f.dentry()).unwrap();
    assert_eq!((a.size, a.blocks), (6 * 4096, 32));
}

#[test]
fn memfs_fallocate_of_gigabytes_takes_no_memory_and_respects_limits() {
    use dcache::fs::memfs::Limits;
    let mut lim = Limits::UNLIMITED;
    lim.max_bytes = 64 * MIB;
    let vfs = Vfs::new(Arc::new(MemFs::new().with_limits(lim))).unwrap();
    let flags = oflags::O_CREAT | oflags::O_RDWR;
    let f = vfs.as_root().open(At::Root, "f", flags, 0o644).unwrap();
    assert_eq!(f.fallocate(0, 0, 65 * MIB), Err(Errno::ENOSPC));
    f.fallocate(0, 0, 64 * MIB).unwrap();
    assert_eq!(vfs.statfs().unwrap().bfree, 0);
    assert_eq!(f.write(64 * MIB, b"x"), Err(Errno::ENOSPC));
    // Writes into reserved pages need no more space.
    assert_eq!(f.write(MIB, b"x"), Ok(1));
    f.fallocate(PUNCH | KEEP, 0, 64 * MIB).unwrap();
    assert_eq!(vfs.statfs().unwrap().bfree, 16384);
    // A sparse 8 GiB file.
    let g = vfs.as_root().open(At::Root, "g", flags, 0o644).unwrap();
    g.write(8 << 30, b"end").unwrap();
    assert_eq!(vfs.getattr_dentry(g.dentry()).unwrap().blocks, 8);
}

#[test]
fn copy_file_range_copies_and_keeps_holes() {
    let Some(t) = tmpfs_dir("copy_file_range_copies_and_keeps_holes") else {
        return;
    };
    let pt = Vfs::new(Arc::new(Passthrough::new(t.path()).unwrap())).unwrap();
    let mem = vfs_mem();
    for (vfs, sparse) in [(&mem, true), (&pt, false)] {
        let root = vfs.as_root();
        let flags = oflags::O_CREAT | oflags::O_RDWR;
        let src = root.open(At::Root, "src", flags, 0o644).unwrap();
        src.write(10 * MIB, b"middle").unwrap();
        src.write(0, b"start").unwrap();
        let a = SetAttr {
            size: Some(20 * MIB),
            ..SetAttr::default()
        };
        root.setattr_dentry(src.dentry(), &a, true).unwrap();
        let dst = root.open(At::Root, "dst", flags, 0o644).unwrap();
        assert_eq!(
            src.copy_file_range(0, &dst, 0, 30 * MIB, 0),
            Ok(20 * MIB as usize)
        );
        let d = vfs.getattr_dentry(dst.dentry()).unwrap();
        assert_eq!(d.size, 20 * MIB);
        // memfs copies holes as holes; tmpfs (under passthrough) fills them.
        assert!(
            !sparse || d.blocks <= 64,
            "holes filled: {} blocks",
            d.blocks
        );
        let mut buf = [0u8; 6];
        dst.read(10 * MIB, &mut buf).unwrap();
        assert_eq!(&buf, b"middle");
        // Past the end: nothing; overlapping in one file: EINVAL.
        assert_eq!(src.copy_file_range(20 * MIB, &dst, 0, 10, 0), Ok(0));
        assert_eq!(src.copy_file_range(0, &src, 10, 100, 0), Err(Errno::EINVAL));
        assert_eq!(src.copy_file_range(0, &dst, 0, 10, 1), Err(Errno::EINVAL));
        let ro = root.open(At::Root, "dst", oflags::O_RDONLY, 0).unwrap();
        assert_eq!(src.copy_file_range(0, &ro, 0, 10, 0), Err(Errno::EBADF));
        let app = root
            .open(At::Root, "dst", oflags::O_WRONLY | libc::O_APPEND, 0)
            .unwrap();
        assert_eq!(src.copy_file_range(0, &app, 0, 10, 0), Err(Errno::EBADF));
        let dir = root.open(At::Root, ".", oflags::O_RDONLY, 0).unwrap();
        assert_eq!(dir.copy_file_range(0, &dst, 0, 10, 0), Err(Errno::EISDIR));
        assert_eq!(
            src.copy_file_range(u64::MAX - 5, &dst, 0, 10, 0),
            Err(Errno::EOVERFLOW)
        );
    }
    // Another Vfs's file: EXDEV.
    let (a, b) = (vfs_mem(), vfs_mem());
    let flags = oflags::O_CREAT | oflags::O_RDWR;
    let fa = a.as_root().open(At::Root, "x", flags, 0o644).unwrap();
    let fb = b.as_root().open(At::Root, "x", flags, 0o644).unwrap();
    fa.write(0, b"abc").unwrap();
    assert_eq!(fa.copy_file_range(0, &fb, 0, 3, 0), Err(Errno::EXDEV));
}

#[test]
fn unprivileged_write_truncate_and_fallocate_drop_set_id_bits() {
    let vfs = vfs_mem();
    let root = vfs.as_root();
    let nobody = Cred::user(65534, 65534, &[]);
    for (mode, after) in [
        (0o4777, 0o777),
        (0o2777, 0o777),
        (0o6777, 0o777),
        // S_ISGID without group execute: dropped too, as the writer is
        // not in the file's group (Linux 6.x, tmpfs here).
        (0o2767, 0o767),
    ] {
        for op in 0..3 {
            let name = format!("f{mode:o}-{op}");
            root.create(At::Root, &name, 0o644).unwrap();
            let set = SetAttr {
                perm: Some(mode),
                ..SetAttr::default()
            };
            root.setattr(At::Root, &name, &set).unwrap();
            let as_nobody = vfs.as_cred(&nobody);
            let f = as_nobody
                .open(At::Root, &name, oflags::O_WRONLY, 0)
                .unwrap();
            match op {
                0 => assert_eq!(f.write(0, b"x"), Ok(1)),
                1 => {
                    let t = SetAttr {
                        size: Some(10),
                        ..SetAttr::default()
                    };
                    as_nobody.setattr(At::Root, &name, &t).unwrap();
                }
                _ => f.fallocate(0, 0, 10).unwrap(),
            }
            let perm = root.stat(At::Root, &name).unwrap().perm;
            assert_eq!(perm, after, "{name}: {perm:o}");
        }
    }
    // A writer in the file's group keeps S_ISGID without group execute.
    let member = Cred::user(65534, 0, &[]);
    root.create(At::Root, "member", 0o644).unwrap();
    let set = SetAttr {
        perm: Some(0o2767),
        ..SetAttr::default()
    };
    root.setattr(At::Root, "member", &set).unwrap();
    let f = vfs
        .as_cred(&member)
        .open(At::Root, "member", oflags::O_WRONLY, 0)
        .unwrap();
    assert_eq!(f.write(0, b"x"), Ok(1));
    assert_eq!(root.stat(At::Root, "member").unwrap().perm, 0o2767);
}

#[test]
fn tmpfile_has_no_name_until_linked() {
    let Some(t) = tmpfs_dir("tmpfile_has_no_name_until_linked") else {
        return;
    };
    let pt: Arc<dyn FileSystem> = Arc::new(Passthrough::new(t.path()).unwrap());
    let mem: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    for fs in [mem, pt] {
        let root = fs.root();
        let ctx = Ctx { uid: 0, gid: 0 };
        let (a, fh) = fs.tmpfile(root, 0o600, libc::O_RDWR, ctx).unwrap();
        assert_eq!((a.nlink, a.perm), (0, 0o600));
        assert_eq!(fs.write(a.ino, fh, 0, b"tmp"), Ok(3));
        let mut names = 0;
        fs.readdir(root, 0, &mut |_| {
            names += 1;
            true
        })
        .unwrap();
        assert_eq!(names, 2, "only . and ..");
        let linked = fs.link(a.ino, root, b"named").unwrap();
        assert_eq!(linked.nlink, 1);
        fs.release(a.ino, fh).unwrap();
        assert_eq!(fs.lookup(root, b"named").unwrap().map(|a| a.size), Some(3));
        // O_EXCL: never linkable.
        let (b, fh) = fs
            .tmpfile(root, 0o600, libc::O_RDWR | libc::O_EXCL, ctx)
            .unwrap();
        assert_eq!(fs.link(b.ino, root, b"no").map(|_| ()), Err(Errno::ENOENT));
        fs.release(b.ino, fh).unwrap();
    }
}

/// O_TMPFILE through the `Vfs` (Linux's `vfs_tmpfile` and `d_tmpfile`):
/// the unnamed file's dentry is `#<ino>`, found by no lookup and listed in
/// no directory; `link_dentry` names it; the permission rules are
/// `vfs_tmpfile`'s (write and search on the directory, an access mode that
/// writes); and every dentry and inode is freed with the Vfs.
#[test]
fn vfs_tmpfile_has_no_name_until_linked() {
    let Some(t) = tmpfs_dir("vfs_tmpfile_has_no_name_until_linked") else {
        return;
    };
    let mem = Arc::new(MemFs::new());
    mem.mkdir_p("d", 0o755).unwrap();
    std::fs::create_dir(t.path().join("d")).unwrap();
    let pt: Arc<dyn FileSystem> = Arc::new(Passthrough::new(t.path()).unwrap());
    for fs in [mem as Arc<dyn FileSystem>, pt] {
        let vfs = Vfs::new(fs).unwrap();
        let c = vfs.counters();
        {
            let root = vfs.as_root();
            let f = root.tmpfile(At::Root, "d", libc::O_RDWR, 0o640).unwrap();
            assert_eq!(f.write(0, b"tmp"), Ok(3));
            let d = f.dentry();
            let a = d.attr().unwrap();
            assert_eq!((a.nlink, a.perm, a.size), (0, 0o640, 3));
            assert_eq!(d.name(), format!("#{}", a.ino).into_bytes());
            assert_eq!(
                root.stat(At::Root, format!("d/#{}", a.ino)).map(|_| ()),
                Err(Errno::ENOENT),
                "no lookup finds an unnamed file"
            );
            let named = root.link_dentry(d, At::Root, "d/named").unwrap();
            assert_eq!(named.attr().unwrap().nlink, 1);
            drop(named);
            f.close().unwrap();
            assert_eq!(root.stat(At::Root, "d/named").unwrap().size, 3);
            // `open` with O_TMPFILE is the same call.
            let o = root
                .open(At::Root, "d", libc::O_TMPFILE | libc::O_RDWR, 0o600)
                .unwrap();
            assert_eq!(o.dentry().attr().unwrap().nlink, 0);
            drop(o);
            // O_EXCL: never linkable; O_RDONLY: EINVAL; a file: ENOTDIR.
            let x = root
                .tmpfile(At::Root, "d", libc::O_WRONLY | libc::O_EXCL, 0o600)
                .unwrap();
            assert_eq!(
                root.link_dentry(x.dentry(), At::Root, "d/no").map(|_| ()),
                Err(Errno::ENOENT)
            );
            drop(x);
            let err = |r: dcache::Result<OpenFile<'_>>| r.map(|_| ()).unwrap_err();
            assert_eq!(
                err(root.tmpfile(At::Root, "d", libc::O_RDONLY, 0o600)),
                Errno::EINVAL
            );
            assert_eq!(
                err(root.tmpfile(At::Root, "d/named", libc::O_RDWR, 0o600)),
                Errno::ENOTDIR
            );
            // Without write permission on the directory: EACCES.
            let mode = |perm| SetAttr {
                perm: Some(perm),
                ..SetAttr::default()
            };
            root.setattr(At::Root, "d", &mode(0o555)).unwrap();
            let nobody = Cred::user(65534, 65534, &[]);
            assert_eq!(
                err(vfs
                    .as_cred(&nobody)
                    .tmpfile(At::Root, "d", libc::O_RDWR, 0o600)),
                Errno::EACCES
            );
            root.setattr(At::Root, "d", &mode(0o755)).unwrap();
        }
        drop(vfs);
        assert_eq!((c.dentries(), c.inodes()), (0, 0), "everything freed");
    }
}
