//! fallocate, SEEK_DATA/SEEK_HOLE, O_TMPFILE, copy_file_range, renameat2's
//! flags and set-id dropping through `dcache mount`, on `mem`, on
//! `passthrough:` (a fresh /dev/shm directory) and on an `etcd:` volume
//! whose data is in a local object store (when the etcd binary is
//! installed), compared with a plain tmpfs directory:
//! the tools a user runs (`fallocate`, `truncate`, `cp --sparse=always`)
//! and the system calls behind them, as root and as uid 65534.
//!
//! Without a usable /dev/fuse, or where /dev/shm is not tmpfs, or without
//! util-linux's `fallocate`, each test prints a SKIPPED line and passes.

mod fuse_common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use fuse_common::Daemon;

const MIB: u64 = 1 << 20;

/// FUSE usable, /dev/shm a tmpfs and `tools` installed; else one SKIPPED line.
fn usable(test: &str, tools: &[&str]) -> bool {
    if let Err(why) = dcache_fuse::testing::available() {
        dcache_fuse::testing::skipped(format_args!("{test}: FUSE unusable here ({why})"));
        return false;
    }
    let shm = fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split(' ').take(3).eq(["tmpfs", "/dev/shm", "tmpfs"]))
    });
    if !shm {
        dcache_fuse::testing::skipped(format_args!("{test}: /dev/shm is not tmpfs"));
        return false;
    }
    for t in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            dcache_fuse::testing::skipped(format_args!("{test}: {t} not installed"));
            return false;
        }
    }
    true
}

/// A fresh directory on /dev/shm (mode 0755, so other users may enter).
fn shm_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir_in("/dev/shm").unwrap();
    fs::set_permissions(d.path(), PermissionsExt::from_mode(0o755)).unwrap();
    d
}

/// What a mount needs kept alive (the passthrough's source, or the etcd
/// server and object store of an etcd volume), and how its backend
/// differs from tmpfs on purpose.
struct Keep {
    _alive: Option<Box<dyn std::any::Any>>,
    /// The passthrough backend (its files may use passthrough I/O).
    passthrough: bool,
    /// FALLOC_FL_ZERO_RANGE zeroes (as on ext4) where tmpfs refuses it.
    zeroes_ranges: bool,
}

/// The backends mounted with `opts`, each with the tmpfs directory to
/// compare it with (and what it needs kept alive). The etcd one only
/// where etcd is installed (under CI it must be).
fn mounts(opts: &[&str]) -> Vec<(Daemon, tempfile::TempDir, Keep)> {
    let src = shm_dir();
    let pt = format!("passthrough:{}", src.path().display());
    let mem = Keep {
        _alive: None,
        passthrough: false,
        zeroes_ranges: true,
    };
    let pt_keep = Keep {
        _alive: Some(Box::new(src)),
        passthrough: true,
        zeroes_ranges: false,
    };
    let mut backends: Vec<(String, Keep)> = vec![("mem".to_string(), mem), (pt, pt_keep)];
    if fuse_common::etcd_or_skip("fuse_fileops on an etcd volume") {
        let server = dcache_bench::etcd::EtcdServer::start_or_use(None).expect("start etcd");
        let data = tempfile::tempdir().unwrap();
        let store = dcache_etcd::FormatOptions {
            data: Some(format!("file://{}", data.path().display())),
            ..Default::default()
        };
        let spec = server.fresh_volume_with(&store).expect("format");
        let etcd = Keep {
            _alive: Some(Box::new((server, data))),
            passthrough: false,
            zeroes_ranges: true,
        };
        backends.push((format!("etcd:{spec}"), etcd));
    }
    let mut v = Vec::new();
    for (backend, keep) in backends {
        let d = Daemon::start(&backend, opts);
        for p in [d.mnt.parent().unwrap(), &d.mnt] {
            fs::set_permissions(p, PermissionsExt::from_mode(0o755)).unwrap();
        }
        v.push((d, shm_dir(), keep));
    }
    v
}

/// `cmd args` in `dir`: whether it succeeded.
fn run(dir: &Path, cmd: &str, args: &[&str]) -> bool {
    Command::new("timeout")
        .args(["-k", "5", "120", cmd])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
        .status
        .success()
}

/// Size and allocated 512-byte blocks.
fn sb(p: &Path) -> (u64, u64) {
    let m = fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.size(), m.blocks())
}

fn errno_of(r: libc::c_long) -> Result<i64, i32> {
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    } else {
        Ok(r)
    }
}

/// Every SEEK_DATA and SEEK_HOLE answer at `offs`.
fn seeks(p: &Path, offs: &[u64]) -> Vec<Result<i64, i32>> {
    let f = File::open(p).unwrap();
    let mut v = Vec::new();
    for &o in offs {
        for w in [libc::SEEK_DATA, libc::SEEK_HOLE] {
            // SAFETY: lseek on our own open descriptor.
            v.push(errno_of(
                unsafe { libc::lseek(f.as_raw_fd(), o as i64, w) } as _
            ));
        }
    }
    v
}

#[test]
fn fallocate_tool_matches_tmpfs() {
    let t = "fallocate_tool_matches_tmpfs";
    if !usable(t, &["fallocate"]) {
        return;
    }
    for (d, tmp, keep) in mounts(&[]) {
        let sides: [&Path; 2] = [&d.mnt, tmp.path()];
        let mut seen = Vec::new();
        for dir in sides {
            let mut r = Vec::new();
            for args in [
                &["-l", "64M", "f"][..],
                &["-n", "-o", "64M", "-l", "1M", "f"],
                &["-p", "-o", "4096", "-l", "8192", "f"],
                &["-p", "-o", "1M", "-l", "3M", "f"],
                &["-l", "8192", "-o", "100", "g"],
                &["-l", "4096", "h"],
                &["-n", "-l", "1M", "h"],
                &["-p", "-n", "-l", "1M", "h"],
            ] {
                r.push((args.to_vec(), run(dir, "fallocate", args)));
            }
            let stats: Vec<_> = ["f", "g", "h"].iter().map(|n| sb(&dir.join(n))).collect();
            let offs = [0, 4096, MIB, 4 * MIB, 64 * MIB - 1, 64 * MIB];
            seen.push((r, stats, seeks(&dir.join("f"), &offs)));
        }
        assert_eq!(seen[0], seen[1], "{}", d.mnt.display());
        // ZERO_RANGE: tmpfs (and so the passthrough of it) refuses it;
        // memfs and etcd volumes zero the range as ext4 does.
        for dir in sides {
            fs::write(dir.join("z"), vec![7u8; 3 * 4096]).unwrap();
        }
        let z = ["-z", "-o", "100", "-l", "8192", "z"];
        let (on_mount, on_tmpfs) = (
            run(&d.mnt, "fallocate", &z),
            run(tmp.path(), "fallocate", &z),
        );
        if keep.zeroes_ranges {
            assert!(
                on_mount,
                "{}: FALLOC_FL_ZERO_RANGE refused",
                d.mnt.display()
            );
            let b = fs::read(d.path("z")).unwrap();
            assert_eq!(b.len(), 3 * 4096);
            assert!(b[100..8292].iter().all(|&x| x == 0) && b[99] == 7 && b[8292] == 7);
        } else {
            assert_eq!(on_mount, on_tmpfs);
        }
    }
}

#[test]
fn sparse_files_seek_and_copy_as_on_tmpfs() {
    let t = "sparse_files_seek_and_copy_as_on_tmpfs";
    if !usable(t, &["truncate", "cp"]) {
        return;
    }
    let mid = 300 * MIB;
    let offs = [
        0,
        4096,
        mid - 1,
        mid,
        mid + 5,
        mid + 4096,
        mid + 40_000,
        900 * MIB,
        (1 << 30) - 1,
        1 << 30,
        (1 << 30) + 7,
    ];
    for (d, tmp, _keep) in mounts(&[]) {
        let mut seen = Vec::new();
        for dir in [&d.mnt, tmp.path()] {
            assert!(run(dir, "truncate", &["-s", "1G", "s"]));
            let f = OpenOptions::new().write(true).open(dir.join("s")).unwrap();
            f.write_all_at(&[9u8; 20_000], mid + 5).unwrap();
            f.write_all_at(b"tail", (1 << 30) - 4).unwrap();
            drop(f);
            let before = seeks(&dir.join("s"), &offs);
            assert!(run(dir, "cp", &["--sparse=always", "s", "s2"]));
            let after = seeks(&dir.join("s2"), &offs);
            // copy_file_range(2) itself, through the kernel's COPY_FILE_RANGE.
            let src = File::open(dir.join("s")).unwrap();
            let dst = File::create(dir.join("s3")).unwrap();
            let (mut oi, mut oo) = (mid as i64, 0i64);
            // SAFETY: our own descriptors and offsets.
            let n = unsafe {
                libc::copy_file_range(
                    src.as_raw_fd(),
                    &mut oi,
                    dst.as_raw_fd(),
                    &mut oo,
                    30_000,
                    0,
                )
            };
            drop(dst);
            let copied = fs::read(dir.join("s3")).unwrap();
            seen.push((before, after, n, copied, sb(&dir.join("s")).0));
            let (size, blocks) = sb(&dir.join("s2"));
            assert_eq!(size, 1 << 30);
            assert!(
                blocks < 1024,
                "{}: cp filled holes ({blocks})",
                dir.display()
            );
        }
        assert_eq!(seen[0], seen[1], "{}", d.mnt.display());
    }
}

fn renameat2(dir: &Path, a: &str, b: &str, flags: u32) -> Result<i64, i32> {
    let (a, b) = (cpath(&dir.join(a)), cpath(&dir.join(b)));
    // SAFETY: NUL-terminated paths; renameat2 takes plain integers besides.
    errno_of(unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    })
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

#[test]
fn rename_noreplace_and_exchange_as_on_tmpfs() {
    if !usable("rename_noreplace_and_exchange_as_on_tmpfs", &[]) {
        return;
    }
    for (d, tmp, _keep) in mounts(&[]) {
        let mut seen = Vec::new();
        for dir in [&d.mnt, tmp.path()] {
            fs::write(dir.join("a"), "A").unwrap();
            fs::write(dir.join("b"), "B").unwrap();
            fs::create_dir(dir.join("d")).unwrap();
            let r = [
                renameat2(dir, "a", "b", libc::RENAME_NOREPLACE),
                renameat2(dir, "a", "b", libc::RENAME_EXCHANGE),
                renameat2(dir, "a", "d", libc::RENAME_EXCHANGE),
                renameat2(dir, "a", "missing", libc::RENAME_EXCHANGE),
                renameat2(dir, "a", "c", libc::RENAME_NOREPLACE),
                renameat2(
                    dir,
                    "a",
                    "b",
                    libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE,
                ),
            ];
            let names: Vec<_> = ["a", "b", "c", "d"]
                .iter()
                .map(|n| fs::read_to_string(dir.join(n)).map_err(|e| e.raw_os_error()))
                .collect();
            seen.push((r, names, dir.join("d").is_dir()));
        }
        assert_eq!(seen[0], seen[1], "{}", d.mnt.display());
    }
}

/// Run `f` in a thread acting as uid and gid 65534 (no capabilities: a
/// non-zero fsuid drops the filesystem ones), as perm_diff.rs does.
fn as_nobody<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: raw syscalls change only this thread's credential.
            unsafe {
                let none: [libc::gid_t; 0] = [];
                libc::syscall(libc::SYS_setgroups, 0, none.as_ptr());
                libc::syscall(libc::SYS_setfsgid, 65534);
                libc::syscall(libc::SYS_setfsuid, 65534);
            }
            f()
        })
        .join()
        .unwrap()
    })
}

/// One set-id case: create `name` with `mode` as root, act on it, return
/// the mode left (or the errno). As another user (not root) the file is
/// that user's, and it writes and chowns it itself: without CAP_FSETID
/// its own writes drop the bits too.
fn set_id_case(dir: &Path, name: &str, mode: u32, act: u8) -> Result<u32, i32> {
    let p: PathBuf = dir.join(name);
    fs::write(&p, "data").unwrap();
    fs::set_permissions(&p, PermissionsExt::from_mode(mode)).unwrap();
    let e = |r: std::io::Result<()>| r.map_err(|e| e.raw_os_error().unwrap_or(-1));
    // SAFETY: geteuid and getegid cannot fail.
    let me = unsafe { (libc::geteuid(), libc::getegid()) };
    match act {
        // chown by root clears set-id bits (S_ISGID only if g+x); so does
        // a user's chown of its own file to itself.
        2 => e(std::os::unix::fs::chown(&p, Some(me.0), Some(me.1)))?,
        _ if me.0 != 0 => {
            let f = OpenOptions::new().write(true).open(&p);
            let f = f.map_err(|e| e.raw_os_error().unwrap_or(-1))?;
            match act {
                0 => e(f.write_all_at(b"x", 1))?,
                _ => e(f.set_len(2))?,
            }
        }
        _ => as_nobody(|| {
            let f = OpenOptions::new().write(true).open(&p);
            let f = f.map_err(|e| e.raw_os_error().unwrap_or(-1))?;
            match act {
                0 => e(f.write_all_at(b"x", 1)),
                _ => e(f.set_len(2)),
            }
        })?,
    }
    Ok(fs::metadata(&p).unwrap().mode() & 0o7777)
}

#[test]
fn writes_by_another_user_drop_set_id_bits_as_on_tmpfs() {
    const T: &str = "writes_by_another_user_drop_set_id_bits_as_on_tmpfs";
    if !usable(T, &[]) {
        return;
    }
    // As another user: no allow_other (/etc/fuse.conf's to grant) and no
    // other uid to write as; the owner's own writes are compared instead.
    let opts_all: [&[&str]; 2] = if fuse_common::root_part(T, "writes by another user") {
        [
            &["-o", "no_default_permissions,allow_other"],
            &["-o", "allow_other"],
        ]
    } else {
        [&["-o", "no_default_permissions"], &[]]
    };
    for opts in opts_all {
        for (d, tmp, keep) in mounts(opts) {
            // SAFETY: geteuid cannot fail.
            let passthrough_io = keep.passthrough
                && unsafe { libc::geteuid() } == 0
                && !fuse_common::switched_off("passthrough_io");
            // Without FUSE_HANDLE_KILLPRIV_V2 the kernel's older rule
            // applies: S_ISGID drops only when group-executable.
            let no_killpriv = fuse_common::switched_off("killpriv");
            let mut seen = Vec::new();
            for dir in [&d.mnt, tmp.path()] {
                let mut r = Vec::new();
                for mode in [0o4777, 0o2777, 0o6777, 0o2767, 0o4766] {
                    for act in 0..3u8 {
                        // 0o2767 written or truncated by a non-member: tmpfs
                        // drops S_ISGID (Linux 6.x's setattr_should_drop_sgid),
                        // and so does the daemon, told by the kernel who
                        // wrote (FUSE_HANDLE_KILLPRIV_V2). Known difference:
                        // with passthrough I/O (passthrough as root) the
                        // kernel writes the host file itself and drops
                        // S_ISGID only when group-executable; so does a
                        // kernel without HANDLE_KILLPRIV_V2.
                        if mode == 0o2767 && act < 2 && (passthrough_io || no_killpriv) {
                            continue;
                        }
                        r.push(set_id_case(dir, &format!("f{mode:o}-{act}"), mode, act));
                    }
                }
                seen.push(r);
            }
            assert_eq!(seen[0], seen[1], "{} {opts:?}", d.mnt.display());
            assert_eq!(seen[1][0], Ok(0o777));
        }
    }
}

/// `open(dir, O_TMPFILE | flags, 0600)`: the descriptor, or the errno.
fn open_tmpfile(dir: &Path, flags: i32) -> Result<File, i32> {
    // SAFETY: a NUL-terminated path and plain flags; the descriptor is
    // owned by the File from here on.
    let fd = unsafe { libc::open(cpath(dir).as_ptr(), libc::O_TMPFILE | flags, 0o600) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1));
    }
    // SAFETY: fd was just opened and is ours alone.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// `linkat(fd, "", dir, name, AT_EMPTY_PATH)` as root (which has the
/// CAP_DAC_READ_SEARCH it needs); as another user, what open(2) says
/// such a user does: `linkat` of `/proc/self/fd/N` with
/// `AT_SYMLINK_FOLLOW`.
fn link_fd(f: &File, dir: &Path, name: &str) -> Result<(), i32> {
    let to = cpath(&dir.join(name));
    let proc_fd = cpath(Path::new(&format!("/proc/self/fd/{}", f.as_raw_fd())));
    // SAFETY: NUL-terminated strings that outlive the call.
    let r = unsafe {
        if fuse_common::is_root() {
            libc::linkat(
                f.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        } else {
            libc::linkat(
                libc::AT_FDCWD,
                proc_fd.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        }
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    }
}

/// O_TMPFILE through the mount as on tmpfs: an unnamed file that reads
/// back what was written, has no links and no name in its directory until
/// `linkat` gives it one; O_EXCL makes it unlinkable; O_RDONLY is EINVAL;
/// a non-directory is ENOTDIR; and nothing stays referenced afterwards.
#[test]
fn o_tmpfile_and_linkat_as_on_tmpfs() {
    if !usable("o_tmpfile_and_linkat_as_on_tmpfs", &[]) {
        return;
    }
    for opts in [&[][..], &["-o", "no_default_permissions"]] {
        for (d, tmp, _keep) in mounts(opts) {
            let mut seen = Vec::new();
            for dir in [&d.mnt, tmp.path()] {
                fs::create_dir(dir.join("sub")).unwrap();
                let sub = dir.join("sub");
                let f = open_tmpfile(&sub, libc::O_RDWR).unwrap();
                f.write_all_at(b"unnamed data", 0).unwrap();
                let m = f.metadata().unwrap();
                let before = fs::read_dir(&sub).unwrap().count();
                let mut back = vec![0u8; 12];
                f.read_exact_at(&mut back, 0).unwrap();
                let linked = link_fd(&f, &sub, "named");
                let named = fs::read(sub.join("named")).map_err(|e| e.raw_os_error());
                let after = fs::metadata(sub.join("named"))
                    .map(|m| (m.nlink(), m.mode()))
                    .map_err(|e| e.raw_os_error());
                // A second name for the same file, then the first one gone:
                // the data stays.
                let again = link_fd(&f, &sub, "again");
                drop(f);
                fs::remove_file(sub.join("named")).unwrap();
                let kept = fs::read(sub.join("again")).map_err(|e| e.raw_os_error());
                let excl = open_tmpfile(&sub, libc::O_RDWR | libc::O_EXCL).unwrap();
                excl.write_all_at(b"x", 0).unwrap();
                let excl_link = link_fd(&excl, &sub, "never");
                drop(excl);
                seen.push((
                    (m.nlink(), m.mode(), m.len(), before, back),
                    (linked, named, after, again, kept, excl_link),
                    open_tmpfile(&sub, libc::O_RDONLY).err(),
                    open_tmpfile(&sub.join("again"), libc::O_RDWR).err(),
                    fs::read_dir(&sub).unwrap().count(),
                ));
            }
            assert_eq!(seen[0], seen[1], "{} {opts:?}", d.mnt.display());
            assert_eq!(seen[1].1 .0, Ok(()), "linkat named the tmpfile");
            assert_eq!(seen[1].1 .5, Err(libc::ENOENT), "O_EXCL: never linkable");
            // Every node the kernel held, the unnamed ones included, is
            // given back once it forgets them. (The kernel sends RELEASE
            // after close returns: on an etcd volume it commits what was
            // buffered first, so the last one may still be on its way.)
            let t0 = std::time::Instant::now();
            let mut pruned = d.prune();
            while !pruned.ends_with(" 0 nodes still referenced")
                && t0.elapsed() < std::time::Duration::from_secs(10)
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
                pruned = d.prune();
            }
            assert!(pruned.ends_with(" 0 nodes still referenced"), "{pruned}");
        }
    }
}
