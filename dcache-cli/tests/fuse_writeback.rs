//! `dcache mount -o writeback_cache`: the kernel keeps written pages and
//! sends them later, merged, reading pages to fill partial writes (on
//! write-only opens too) and placing appends itself. The same sequence of
//! writes (partial pages through a write-only descriptor, O_APPEND from two
//! descriptors, truncates down and up, a shared mapping, pwrite past the
//! end) runs on a tmpfs directory and on memfs and passthrough mounts with
//! a writeback cache; every file's bytes and size must match, and on
//! passthrough the host file holds them once the writer has closed.
//! `writeback_cache` with `no_default_permissions` is refused.
//!
//! Without usable FUSE, one SKIP line.

mod fuse_common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use fuse_common::*;

/// The writes, each file named for what it does; returns the names.
fn scenario(dir: &Path) -> Vec<&'static str> {
    // Partial pages through a write-only descriptor: the kernel must read
    // the page it fills (the daemon opened the file read-write for it).
    fs::write(dir.join("partial"), vec![b'a'; 10_000]).unwrap();
    {
        let f = OpenOptions::new()
            .write(true)
            .open(dir.join("partial"))
            .unwrap();
        f.write_all_at(b"middle", 5000).unwrap();
        f.write_all_at(b"tail", 9998).unwrap();
        f.write_all_at(b"far", 20_000).unwrap();
    }
    // Two appending descriptors, interleaved.
    {
        let open = || {
            OpenOptions::new()
                .append(true)
                .create(true)
                .truncate(false)
                .open(dir.join("append"))
                .unwrap()
        };
        let (mut a, mut b) = (open(), open());
        for i in 0..50 {
            a.write_all(format!("a{i};").as_bytes()).unwrap();
            b.write_all(format!("bb{i};").as_bytes()).unwrap();
        }
    }
    // Truncate down into a written page, then extend with a write.
    {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("trunc"))
            .unwrap();
        f.write_all_at(&[7u8; 9000], 0).unwrap();
        f.set_len(4100).unwrap();
        f.write_all_at(b"after", 6000).unwrap();
        f.set_len(8000).unwrap();
    }
    // A shared mapping written, then synced.
    {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("mapped"))
            .unwrap();
        f.set_len(8192).unwrap();
        // SAFETY: a fresh shared mapping of 8192 bytes of our file, written
        // inside its bounds and unmapped before the file closes.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            std::ptr::copy_nonoverlapping(b"mapped!".as_ptr(), p.cast::<u8>().add(4090), 7);
            assert_eq!(libc::msync(p, 8192, libc::MS_SYNC), 0);
            libc::munmap(p, 8192);
        }
    }
    // Many small writes, the case the cache merges.
    {
        let mut f = File::create(dir.join("small")).unwrap();
        for i in 0..4096u32 {
            f.write_all(&i.to_le_bytes()).unwrap();
        }
        f.sync_all().unwrap();
    }
    // O_WRONLY | O_APPEND on a file that exists (the daemon drops O_APPEND
    // and writes where the kernel says).
    {
        fs::write(dir.join("wappend"), b"start;").unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .custom_flags(0)
            .open(dir.join("wappend"))
            .unwrap();
        f.write_all(b"end").unwrap();
    }
    vec!["partial", "append", "trunc", "mapped", "small", "wappend"]
}

fn contents(dir: &Path, names: &[&str]) -> Vec<(String, u64, Vec<u8>)> {
    names
        .iter()
        .map(|n| {
            let p = dir.join(n);
            (
                n.to_string(),
                fs::metadata(&p).unwrap().len(),
                fs::read(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn writes_through_a_writeback_cache_match_tmpfs() {
    let test = "writes_through_a_writeback_cache_match_tmpfs";
    if !fuse_or_skip(test) {
        return;
    }
    let tmp = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let names = scenario(tmp.path());
    let want = contents(tmp.path(), &names);
    let src = tempfile::tempdir().unwrap();
    let pt = format!("passthrough:{}", src.path().display());
    for backend in ["mem", pt.as_str()] {
        let d = Daemon::start(backend, &["-o", "writeback_cache"]);
        assert!(
            d.stderr().contains("dcache: writeback cache on"),
            "{backend}: {}",
            d.stderr()
        );
        scenario(&d.mnt);
        let got = contents(&d.mnt, &names);
        for (w, g) in want.iter().zip(&got) {
            assert_eq!((&w.0, w.1), (&g.0, g.1), "{backend}: size");
            assert!(w.2 == g.2, "{backend}: {} differs from tmpfs's", w.0);
        }
        if backend != "mem" {
            // Every writer has closed: the host file has the bytes.
            assert_eq!(contents(src.path(), &names), want, "{backend}: host files");
        }
        assert_clean_exit(d.kill_with(libc::SIGTERM));
    }
}

#[test]
fn writeback_cache_needs_default_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dcache"))
        .args([
            "mount",
            "-f",
            "-o",
            "writeback_cache,no_default_permissions",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("writeback_cache needs default_permissions"),
        "{err}"
    );
}
