//! Passthrough I/O through a real mount of the passthrough backend: files
//! are opened with kernel backing files, so reads, writes and shared
//! mappings reach the host file without a READ or WRITE request, with the
//! same bytes on both sides; `-o no_passthrough_io` brings the requests
//! back; every backing id is given back at the last close. Needs root (the
//! kernel registers backing files only for CAP_SYS_ADMIN) and a kernel
//! with FUSE passthrough (6.9); otherwise one SKIPPED line.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use dcache_fuse::testing::{available, mount_passthrough, temp_dir};
use dcache_fuse::Mounted;

fn usable(test: &str) -> bool {
    if let Err(why) = available() {
        dcache_fuse::testing::skipped(format_args!("{test}: FUSE unusable here ({why})"));
        return false;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        dcache_fuse::testing::skipped(format_args!("{test}: backing files need root"));
        return false;
    }
    true
}

/// Write 4 MiB through the mount in 64 KiB pieces, read it back, rewrite
/// a page through a shared mapping, and compare with the host file.
fn io_round(m: &Mounted, src: &Path) {
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let p = m.path().join("big");
    {
        let mut f = fs::File::create(&p).unwrap();
        for c in data.chunks(64 << 10) {
            f.write_all(c).unwrap();
        }
        f.sync_all().unwrap();
    }
    let mut back = Vec::new();
    fs::File::open(&p).unwrap().read_to_end(&mut back).unwrap();
    assert!(back == data, "read back through the mount");
    assert!(fs::read(src.join("big")).unwrap() == data, "the host file");
    // A shared mapping of the mounted file writes the host file.
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    // SAFETY: a fresh shared mapping of 4096 bytes of an open file,
    // written through its pointer and unmapped before the file closes.
    unsafe {
        let a = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        );
        assert_ne!(a, libc::MAP_FAILED, "mmap");
        std::ptr::write_bytes(a.cast::<u8>(), b'M', 4096);
        assert_eq!(libc::msync(a, 4096, libc::MS_SYNC), 0);
        libc::munmap(a, 4096);
    }
    let mut page = [0u8; 4096];
    fs::File::open(src.join("big"))
        .unwrap()
        .read_exact_at(&mut page, 0)
        .unwrap();
    assert!(
        page.iter().all(|&b| b == b'M'),
        "the mapping reached the host"
    );
    drop(f);
}

#[test]
fn reads_writes_and_mappings_skip_the_daemon() {
    if !usable("reads_writes_and_mappings_skip_the_daemon") {
        return;
    }
    let src = temp_dir("ptio-src").unwrap();
    let m = mount_passthrough(&src, &[]).unwrap();
    io_round(&m, &src);
    if m.data_requests() > 0 {
        // The kernel has no FUSE passthrough (or refused it): the same
        // bytes went through the daemon, which is still correct.
        dcache_fuse::testing::skipped(format_args!(
            "reads_writes_and_mappings_skip_the_daemon: no passthrough I/O here ({} data requests)",
            m.data_requests()
        ));
        return;
    }
    // Two opens of one file at once share its backing; both give it back.
    let p = m.path().join("big");
    let a = fs::File::open(&p).unwrap();
    let b = OpenOptions::new().write(true).open(&p).unwrap();
    b.write_all_at(b"xy", 10).unwrap();
    let mut two = [0u8; 2];
    a.read_exact_at(&mut two, 10).unwrap();
    assert_eq!(&two, b"xy");
    assert_eq!(m.backing_files(), 1, "one backing file for the inode");
    drop((a, b));
    assert_eq!(m.data_requests(), 0, "no READ or WRITE reached the daemon");
    let r = m.unmount().unwrap();
    assert_eq!((r.referenced, r.open_files), (0, 0), "{r}");
    fs::remove_dir_all(&src).unwrap();
}

#[test]
fn no_passthrough_io_sends_every_read_and_write() {
    if !usable("no_passthrough_io_sends_every_read_and_write") {
        return;
    }
    let src = temp_dir("ptio-src").unwrap();
    let m = mount_passthrough(&src, &["no_passthrough_io"]).unwrap();
    io_round(&m, &src);
    assert!(m.data_requests() > 0, "the daemon carried the data");
    assert_eq!(m.backing_files(), 0);
    let r = m.unmount().unwrap();
    assert_eq!((r.referenced, r.open_files), (0, 0), "{r}");
    fs::remove_dir_all(&src).unwrap();
}
