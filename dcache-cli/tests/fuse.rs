//! `dcache mount` end to end: the real binary serves memfs, passthrough and
//! kernfs through the kernel's FUSE driver, driven with std::fs, libc and
//! coreutils; every mount is unmounted (and its daemon reaped) even when a
//! test fails. Without a usable /dev/fuse each test prints a SKIP line and
//! passes.

mod fuse_common;

use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuse_common::*;

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn renameat2(a: &Path, b: &Path, flags: u32) -> Result<(), i32> {
    let (a, b) = (cpath(a), cpath(b));
    // SAFETY: two NUL-terminated paths; renameat2 via the raw syscall
    // (glibc's wrapper is not in every libc crate target).
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    }
}

fn access(p: &Path, mode: i32) -> Result<(), i32> {
    let c = cpath(p);
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), mode) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    }
}

fn err_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => errno(&e),
    }
}

#[test]
fn memfs_through_std_fs() {
    if !fuse_or_skip("memfs_through_std_fs") {
        return;
    }
    let d = Daemon::start("mem", &[]);
    let m = |p: &str| d.path(p);

    // Directories and files.
    fs::create_dir(m("dir")).unwrap();
    assert_eq!(err_of(fs::create_dir(m("dir"))), libc::EEXIST);
    fs::write(m("dir/a"), b"hello world").unwrap();
    assert_eq!(fs::read(m("dir/a")).unwrap(), b"hello world");
    let md = fs::metadata(m("dir/a")).unwrap();
    assert!(md.is_file());
    assert_eq!((md.len(), md.nlink()), (11, 1));
    assert_eq!(fs::metadata(m("dir")).unwrap().nlink(), 2);
    assert_eq!(err_of(fs::metadata(m("nope"))), libc::ENOENT);
    assert_eq!(err_of(fs::metadata(m("dir/a/x"))), libc::ENOTDIR);

    // Offsets, append, truncate.
    {
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(m("dir/a"))
            .unwrap();
        f.seek(SeekFrom::Start(6)).unwrap();
        f.write_all(b"WORLD").unwrap();
        f.seek(SeekFrom::Start(4)).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "o WORLD");
        f.set_len(5).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(fs::read(m("dir/a")).unwrap(), b"hello");
    {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(m("dir/a"))
            .unwrap();
        f.write_all(b"!").unwrap();
    }
    assert_eq!(fs::read(m("dir/a")).unwrap(), b"hello!");
    let big = bytes(7, 3 << 20);
    fs::write(m("big"), &big).unwrap();
    assert_eq!(fs::read(m("big")).unwrap(), big);
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m("big"))
        .unwrap();
    assert_eq!(fs::metadata(m("big")).unwrap().len(), 0);

    // chmod, chown, utimens.
    fs::set_permissions(m("dir/a"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(fs::metadata(m("dir/a")).unwrap().mode() & 0o7777, 0o640);
    if root_part("memfs_through_std_fs", "chown to another user and group") {
        std::os::unix::fs::chown(m("dir/a"), Some(1234), Some(5678)).unwrap();
        let md = fs::metadata(m("dir/a")).unwrap();
        assert_eq!((md.uid(), md.gid()), (1234, 5678));
    } else {
        // A user may not give a file away, nor to a group it is not in;
        // chown to itself is allowed and changes nothing.
        let md = fs::metadata(m("dir/a")).unwrap();
        let me = (md.uid(), md.gid());
        assert_eq!(
            err_of(std::os::unix::fs::chown(m("dir/a"), Some(1234), None)),
            libc::EPERM
        );
        assert_eq!(
            err_of(std::os::unix::fs::chown(m("dir/a"), None, Some(5678))),
            libc::EPERM
        );
        std::os::unix::fs::chown(m("dir/a"), Some(me.0), Some(me.1)).unwrap();
        let md = fs::metadata(m("dir/a")).unwrap();
        assert_eq!((md.uid(), md.gid()), me);
    }
    let t = std::time::UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789);
    fs::File::options()
        .write(true)
        .open(m("dir/a"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    let md = fs::metadata(m("dir/a")).unwrap();
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_000_000_000, 123_456_789));

    // Symlinks and hard links.
    std::os::unix::fs::symlink("dir/a", m("link")).unwrap();
    assert_eq!(fs::read_link(m("link")).unwrap(), Path::new("dir/a"));
    assert_eq!(fs::read(m("link")).unwrap(), b"hello!");
    assert!(fs::symlink_metadata(m("link"))
        .unwrap()
        .file_type()
        .is_symlink());
    fs::hard_link(m("dir/a"), m("hard")).unwrap();
    assert_eq!(fs::metadata(m("hard")).unwrap().nlink(), 2);
    assert_eq!(fs::read(m("hard")).unwrap(), b"hello!");
    assert_eq!(err_of(fs::hard_link(m("dir"), m("dirlink"))), libc::EPERM);
    assert_eq!(err_of(fs::hard_link(m("dir/a"), m("hard"))), libc::EEXIST);

    // Special files.
    let fifo = cpath(&m("fifo"));
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert!(fs::metadata(m("fifo")).unwrap().file_type().is_fifo());
    let sock = std::os::unix::net::UnixListener::bind(m("sock")).unwrap();
    assert!(fs::metadata(m("sock")).unwrap().file_type().is_socket());
    drop(sock);

    // Removal errors.
    assert_eq!(err_of(fs::remove_dir(m("dir"))), libc::ENOTEMPTY);
    assert_eq!(err_of(fs::remove_dir(m("dir/a"))), libc::ENOTDIR);
    assert_eq!(err_of(fs::remove_file(m("dir"))), libc::EISDIR);
    assert_eq!(err_of(fs::remove_file(m("missing"))), libc::ENOENT);

    // Rename, RENAME_NOREPLACE, RENAME_EXCHANGE.
    fs::write(m("x"), b"X").unwrap();
    fs::write(m("y"), b"Y").unwrap();
    assert_eq!(
        renameat2(&m("x"), &m("y"), libc::RENAME_NOREPLACE),
        Err(libc::EEXIST)
    );
    renameat2(&m("x"), &m("y"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(fs::read(m("x")).unwrap(), b"Y");
    assert_eq!(fs::read(m("y")).unwrap(), b"X");
    assert_eq!(
        renameat2(&m("x"), &m("none"), libc::RENAME_EXCHANGE),
        Err(libc::ENOENT)
    );
    fs::rename(m("x"), m("dir/x2")).unwrap();
    assert_eq!(err_of(fs::metadata(m("x"))), libc::ENOENT);
    assert_eq!(fs::read(m("dir/x2")).unwrap(), b"Y");
    fs::create_dir(m("full")).unwrap();
    fs::write(m("full/f"), b"").unwrap();
    fs::create_dir(m("empty")).unwrap();
    assert_eq!(err_of(fs::rename(m("empty"), m("full"))), libc::ENOTEMPTY);
    assert_eq!(err_of(fs::rename(m("empty"), m("y"))), libc::ENOTDIR);
    assert_eq!(err_of(fs::rename(m("y"), m("empty"))), libc::EISDIR);
    assert_eq!(err_of(fs::rename(m("dir"), m("dir/sub"))), libc::EINVAL);

    // An unlinked file stays readable through its open handle.
    let mut f = fs::File::open(m("dir/x2")).unwrap();
    fs::remove_file(m("dir/x2")).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "Y");
    drop(f);

    // A directory with more entries than one readdir reply holds.
    fs::create_dir(m("many")).unwrap();
    for i in 0..300 {
        fs::write(
            m(&format!("many/file-with-a-longish-name-{i:04}")),
            [i as u8],
        )
        .unwrap();
    }
    let mut names: Vec<_> = fs::read_dir(m("many"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 300);
    assert_eq!(names[17], "file-with-a-longish-name-0017");
    for e in fs::read_dir(m("many")).unwrap() {
        let e = e.unwrap();
        assert!(e.file_type().unwrap().is_file());
        assert_eq!(e.metadata().unwrap().len(), 1);
    }

    // statfs.
    let c = cpath(&d.mnt);
    // SAFETY: statvfs is plain old data, for which all-zero is valid.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated and sv is a valid out-pointer.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut sv) }, 0);
    assert_eq!(sv.f_namemax, 255);

    // Names at the limit.
    let long = "n".repeat(255);
    fs::write(m(&long), b"").unwrap();
    assert_eq!(
        err_of(fs::write(m(&"n".repeat(256)), b"")),
        libc::ENAMETOOLONG
    );

    fs::remove_dir_all(m("many")).unwrap();
    assert!(d.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(d.fusermount_u());
}

#[test]
fn memfs_through_coreutils() {
    if !fuse_or_skip("memfs_through_coreutils") {
        return;
    }
    let host = tempfile::tempdir().unwrap();
    let src = host.path().join("src");
    // A tree with assorted sizes, modes, a symlink and an empty directory.
    fs::create_dir_all(src.join("a/b/c")).unwrap();
    fs::create_dir(src.join("empty")).unwrap();
    let sizes = [0usize, 1, 100, 4095, 4096, 4097, 65536, (1 << 20) + 3];
    for (i, n) in sizes.iter().enumerate() {
        let p = src
            .join(["", "a/", "a/b/", "a/b/c/"][i % 4])
            .join(format!("f{i}"));
        fs::write(&p, bytes(i as u64 + 1, *n)).unwrap();
        let mode = [0o644, 0o600, 0o755, 0o444][i % 4];
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    std::os::unix::fs::symlink("b/c/f3", src.join("a/ln")).unwrap();
    let src_s = src.to_str().unwrap();

    let d = Daemon::start("mem", &[]);
    let mnt = d.mnt.to_str().unwrap().to_string();
    let m = |p: &str| format!("{mnt}/{p}");

    // cp -a in, compare with diff -r and find.
    sh("cp", &["-a", src_s, &m("copy")]);
    sh("diff", &["-r", "--no-dereference", src_s, &m("copy")]);
    let list = |dir: &str| {
        let out = std::process::Command::new("find")
            .args([".", "-printf", "%y %m %s %p %l\\n"])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success());
        let mut v: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            // Directory sizes differ between filesystems.
            .map(|l| {
                if l.starts_with("d ") {
                    let f: Vec<&str> = l.split(' ').collect();
                    format!("d {} {}", f[1], f[3])
                } else {
                    l.to_string()
                }
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(list(src_s), list(&m("copy")));

    // ls -l and stat agree with the source.
    let ls = sh("ls", &["-l", &m("copy/a")]);
    assert!(ls.contains("ln -> b/c/f3"), "{ls}");
    assert!(ls
        .lines()
        .any(|l| l.starts_with("-rw-------") && l.ends_with(" f1")));
    let st = sh("stat", &["-c", "%s %a %F", &m("copy/a/b/c/f7")]);
    assert_eq!(st.trim(), format!("{} 444 regular file", (1 << 20) + 3));
    let st = sh("stat", &["-c", "%s %a %F", &m("copy/a/b/c/f3")]);
    assert_eq!(st.trim(), "4095 444 regular file");

    // tar round trip: extract into the mount, archive both trees the same
    // way, and compare the archives byte for byte.
    fs::create_dir(m("tarx")).unwrap();
    let sh_c = |script: &str| {
        let st = std::process::Command::new("sh")
            .args(["-c", script])
            .status()
            .unwrap();
        assert!(st.success(), "{script}: {st}");
    };
    sh_c(&format!(
        "tar -C '{src_s}' -cf - . | tar -C '{}' -xpf -",
        m("tarx")
    ));
    let a1 = host.path().join("a1.tar");
    let a2 = host.path().join("a2.tar");
    for (dir, out) in [(src_s.to_string(), &a1), (m("tarx"), &a2)] {
        sh(
            "tar",
            &[
                "--sort=name",
                "--numeric-owner",
                "-C",
                &dir,
                "-cf",
                out.to_str().unwrap(),
                ".",
            ],
        );
    }
    sh("cmp", &[a1.to_str().unwrap(), a2.to_str().unwrap()]);
    // And back out of the mount.
    let back = host.path().join("back");
    fs::create_dir(&back).unwrap();
    sh_c(&format!(
        "tar -C '{}' -cf - . | tar -C '{}' -xpf -",
        m("tarx"),
        back.display()
    ));
    sh(
        "diff",
        &["-r", "--no-dereference", src_s, back.to_str().unwrap()],
    );

    // mv, ln -s, rm -r.
    sh("mv", &[&m("copy/a/b"), &m("copy/moved")]);
    assert!(Path::new(&m("copy/moved/c/f3")).is_file());
    assert!(!Path::new(&m("copy/a/b")).exists());
    sh("mv", &[&m("copy/f0"), &m("copy/empty/f0")]);
    sh("ln", &["-s", "moved/c/f7", &m("copy/l7")]);
    assert_eq!(
        fs::read(m("copy/l7")).unwrap(),
        bytes(8, (1 << 20) + 3),
        "symlink to a moved file"
    );
    sh("rm", &["-r", &m("copy"), &m("tarx")]);
    assert_eq!(fs::read_dir(&d.mnt).unwrap().count(), 0);

    assert!(d.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(d.fusermount_u());
}

#[test]
fn passthrough_serves_a_host_directory() {
    if !fuse_or_skip("passthrough_serves_a_host_directory") {
        return;
    }
    let host = tempfile::tempdir().unwrap();
    let h = host.path();
    fs::create_dir(h.join("d")).unwrap();
    fs::write(h.join("d/f"), b"from the host").unwrap();
    let d = Daemon::start(&format!("passthrough:{}", h.display()), &[]);
    let m = |p: &str| d.path(p);

    assert_eq!(fs::read(m("d/f")).unwrap(), b"from the host");
    fs::write(m("d/g"), b"from the mount").unwrap();
    assert_eq!(fs::read(h.join("d/g")).unwrap(), b"from the mount");
    fs::create_dir(m("e")).unwrap();
    fs::rename(m("d/g"), m("e/g")).unwrap();
    assert!(h.join("e/g").is_file() && !h.join("d/g").exists());
    std::os::unix::fs::symlink("../d/f", m("e/l")).unwrap();
    assert_eq!(fs::read_link(h.join("e/l")).unwrap(), Path::new("../d/f"));
    assert_eq!(fs::read(m("e/l")).unwrap(), b"from the host");
    fs::set_permissions(m("d/f"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(h.join("d/f")).unwrap().mode() & 0o777, 0o600);
    // A file created read-only is still the creator's to write through
    // the creating open (git makes its objects so); a later open for
    // writing is refused to its owner, allowed to root.
    {
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(m("e/ro"))
            .unwrap();
        f.write_all(b"written once").unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "written once");
    }
    assert_eq!(fs::read(h.join("e/ro")).unwrap(), b"written once");
    assert_eq!(fs::metadata(m("e/ro")).unwrap().mode() & 0o7777, 0o444);
    let again = fs::OpenOptions::new().write(true).open(m("e/ro"));
    let want = if is_root() { 0 } else { libc::EACCES };
    assert_eq!(err_of(again), want);
    // A name created on the host appears in the mount.
    fs::write(h.join("d/new"), b"n").unwrap();
    assert_eq!(fs::read(m("d/new")).unwrap(), b"n");
    assert_eq!(err_of(fs::remove_dir(m("d"))), libc::ENOTEMPTY);
    sh("rm", &["-r", d.mnt.join("d").to_str().unwrap()]);
    assert!(!h.join("d").exists());

    assert!(d.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(d.fusermount_u());
}

#[test]
fn lookups_race_renames_and_unlinks() {
    if !fuse_or_skip("lookups_race_renames_and_unlinks") {
        return;
    }
    // No kernel caching: every stat and open reaches the daemon, and every
    // entry the kernel drops is forgotten at once.
    let d = Daemon::start("mem", &["-o", "timeout=0"]);
    let root = d.mnt.clone();
    fs::create_dir(root.join("sub")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let names: Vec<String> = (0..6)
        .flat_map(|i| [format!("f{i}"), format!("g{i}"), format!("sub/h{i}")])
        .collect();
    let mut readers = Vec::new();
    for t in 0..2 {
        let (stop, root, names) = (stop.clone(), root.clone(), names.clone());
        readers.push(std::thread::spawn(move || {
            let (mut ok, mut missing) = (0u64, 0u64);
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let p = root.join(&names[i % names.len()]);
                i += 1;
                for r in [
                    fs::metadata(&p).map(|_| ()),
                    fs::read(&p).map(|_| ()),
                    fs::symlink_metadata(&p).map(|_| ()),
                ] {
                    match r {
                        Ok(()) => ok += 1,
                        Err(e) if errno(&e) == libc::ENOENT => missing += 1,
                        Err(e) => panic!("{}: unexpected {e}", p.display()),
                    }
                }
            }
            (ok, missing)
        }));
    }
    let writer = {
        let (stop, root) = (stop.clone(), root.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let i = n % 6;
                let f = root.join(format!("f{i}"));
                let g = root.join(format!("g{i}"));
                let h = root.join(format!("sub/h{i}"));
                fs::write(&f, n.to_le_bytes()).unwrap();
                fs::rename(&f, &g).unwrap();
                fs::rename(&g, &h).unwrap();
                if n.is_multiple_of(3) {
                    fs::remove_file(&h).unwrap();
                }
                n += 1;
            }
            n
        })
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    let mut seen = 0;
    for r in readers {
        let (ok, missing) = r.join().unwrap();
        seen += ok + missing;
        assert!(ok > 0, "readers never found a file");
    }
    eprintln!("race: {rounds} writer rounds, {seen} reader calls");
    assert!(rounds > 10 && seen > 10, "{rounds} rounds, {seen} lookups");
    assert_clean_exit(d.kill_with(libc::SIGTERM));
}

#[test]
fn negative_entries_and_options() {
    if !fuse_or_skip("negative_entries_and_options") {
        return;
    }
    let d = Daemon::start(
        "mem",
        &[
            "-o",
            "negative_timeout=30,no_readdirplus",
            "-o",
            "no_default_permissions",
        ],
    );
    let m = |p: &str| d.path(p);
    // A cached negative entry is still answered ENOENT, and creating the
    // name through the mount replaces it.
    for _ in 0..3 {
        assert_eq!(err_of(fs::metadata(m("later"))), libc::ENOENT);
    }
    fs::write(m("later"), b"now").unwrap();
    assert_eq!(fs::read(m("later")).unwrap(), b"now");
    // Plain readdir (no readdirplus).
    for i in 0..50 {
        fs::write(m(&format!("e{i}")), b"").unwrap();
    }
    assert_eq!(fs::read_dir(&d.mnt).unwrap().count(), 51);
    // access(2) is answered by the daemon: root may read and write
    // anything but execute only what has an execute bit; the owner goes
    // by the owner's bits alone.
    fs::set_permissions(m("later"), fs::Permissions::from_mode(0o000)).unwrap();
    if is_root() {
        assert_eq!(access(&m("later"), libc::R_OK | libc::W_OK), Ok(()));
        assert_eq!(access(&m("later"), libc::X_OK), Err(libc::EACCES));
    } else {
        for mask in [libc::R_OK, libc::W_OK, libc::X_OK] {
            assert_eq!(access(&m("later"), mask), Err(libc::EACCES), "{mask}");
        }
        fs::set_permissions(m("later"), fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(access(&m("later"), libc::R_OK | libc::W_OK), Ok(()));
        fs::set_permissions(m("later"), fs::Permissions::from_mode(0o100)).unwrap();
        assert_eq!(access(&m("later"), libc::X_OK), Ok(()));
    }
    // Group execute: root's any execute bit; not the owner's.
    fs::set_permissions(m("later"), fs::Permissions::from_mode(0o010)).unwrap();
    let want = if is_root() { Ok(()) } else { Err(libc::EACCES) };
    assert_eq!(access(&m("later"), libc::X_OK), want);
    assert_eq!(access(&m("nothing"), libc::F_OK), Err(libc::ENOENT));
    assert_clean_exit(d.kill_with(libc::SIGINT));
}

#[test]
fn kernfs_demo_tree() {
    if !fuse_or_skip("kernfs_demo_tree") {
        return;
    }
    let d = Daemon::start("kernfs:rcu", &["-s"]);
    let m = |p: &str| d.path(p);
    assert_eq!(
        fs::read_to_string(m("devices/system/cpu/cpu0/online")).unwrap(),
        "1\n"
    );
    assert_eq!(
        fs::read_link(m("bus/cpu/devices/cpu0")).unwrap(),
        Path::new("../../../devices/system/cpu/cpu0")
    );
    assert_eq!(
        fs::read_to_string(m("bus/cpu/devices/cpu0/online")).unwrap(),
        "1\n"
    );
    fs::write(m("kernel/message"), b"written\n").unwrap();
    assert_eq!(
        fs::read_to_string(m("kernel/message")).unwrap(),
        "written\n"
    );
    // Read-only to users: no new names.
    assert_eq!(err_of(fs::write(m("kernel/new"), b"")), libc::EROFS);
    assert!(d.prune().ends_with("0 nodes still referenced"));
    assert_clean_exit(d.kill_with(libc::SIGTERM));
}

#[test]
fn bench_target_mount_in_process() {
    if !fuse_or_skip("bench_target_mount_in_process") {
        return;
    }
    assert!(dcache_fuse::testing::mount_target("lib", |_| {}).is_err());
    for target in ["fuse", "fuse-cached"] {
        let m = dcache_fuse::testing::mount_target(target, |fs| {
            fs.mkdir_p("dir", 0o755).unwrap();
            fs.write_file("dir/file", b"data").unwrap();
        })
        .unwrap();
        let done = in_process_watchdog(m.path().to_path_buf(), Duration::from_secs(120));
        let file = m.path().join("dir/file");
        for _ in 0..100 {
            assert_eq!(fs::metadata(&file).unwrap().len(), 4);
            assert_eq!(
                err_of(fs::metadata(m.path().join("dir/missing"))),
                libc::ENOENT
            );
            drop(fs::File::open(&file).unwrap());
        }
        let r = m.unmount().unwrap();
        done.store(true, Ordering::SeqCst);
        assert_eq!((r.referenced, r.open_files), (0, 0), "{target}: {r}");
    }
}
