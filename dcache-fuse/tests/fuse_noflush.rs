//! FLUSH only where a close has something to do: a passthrough mount opens
//! files of a host filesystem without a flush of its own (the temporary
//! directory: ext4 or tmpfs) with FOPEN_NOFLUSH, so a hundred closes make
//! no FLUSH request, and the data is on the host file at each close all
//! the same. Files on a filesystem whose close does reach it (here a FUSE
//! mount, as NFS would be) still get their FLUSH at every close, and so do
//! all files when the mount keeps locks (a FLUSH carries the closer's lock
//! owner). Without FUSE, one SKIPPED line.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use dcache_fuse::testing::{available, mount_passthrough, temp_dir, TempMount};
use dcache_fuse::{MountOptions, Mounted};

fn usable(test: &str) -> bool {
    if let Err(why) = available() {
        dcache_fuse::testing::skipped(format_args!("{test}: FUSE unusable here ({why})"));
        return false;
    }
    true
}

/// The host filesystem's magic number (`statfs(2)`'s `f_type`).
fn fs_magic(p: &Path) -> u32 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `statfs` is plain old data; all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-buffer.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    st.f_type as u32
}

/// 100 opens of one file, each writing a line and closing; every line is
/// on the host file right after its close. Returns the FLUSH requests the
/// daemon saw meanwhile.
fn write_cycles(m: &Mounted, src: &Path) -> u64 {
    let before = m.flush_requests();
    let p = m.path().join("log");
    let mut want = Vec::new();
    for i in 0..100 {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .unwrap();
        let line = format!("line {i}\n");
        f.write_all(line.as_bytes()).unwrap();
        drop(f);
        want.extend_from_slice(line.as_bytes());
        assert!(
            fs::read(src.join("log")).unwrap() == want,
            "after close {i}"
        );
    }
    m.flush_requests() - before
}

#[test]
fn closes_on_a_local_host_filesystem_make_no_flush() {
    if !usable("closes_on_a_local_host_filesystem_make_no_flush") {
        return;
    }
    let src = temp_dir("noflush-src").unwrap();
    let magic = fs_magic(&src);
    // tmpfs, ext2/3/4, xfs, btrfs: filesystems without `->flush`.
    let local = [0x0102_1994, 0xef53, 0x5846_5342, 0x9123_683e].contains(&magic);
    for opts in [&[][..], &["no_passthrough_io"][..]] {
        let m = mount_passthrough(&src, opts).unwrap();
        let flushes = write_cycles(&m, &src);
        if local {
            assert_eq!(flushes, 0, "{opts:?}: FLUSH requests for 100 closes");
        } else {
            eprintln!("temporary directory on filesystem {magic:#x}: FLUSH kept");
            assert!(flushes >= 100, "{opts:?}: {flushes} FLUSH for 100 closes");
        }
        let r = m.unmount().unwrap();
        assert_eq!((r.referenced, r.open_files), (0, 0), "{r}");
        fs::remove_file(src.join("log")).unwrap();
    }
    fs::remove_dir_all(&src).unwrap();
}

#[test]
fn closes_that_reach_their_filesystem_or_drop_locks_keep_their_flush() {
    if !usable("closes_that_reach_their_filesystem_or_drop_locks_keep_their_flush") {
        return;
    }
    // A host directory on a FUSE mount: its close reaches that daemon.
    let inner = TempMount::memfs(&MountOptions::default(), |fs| {
        fs.mkdir_p("d", 0o755).unwrap();
    })
    .expect("memfs mount");
    let src = inner.path().join("d");
    let m = mount_passthrough(&src, &["no_passthrough_io"]).unwrap();
    let flushes = write_cycles(&m, &src);
    assert!(flushes >= 100, "on FUSE: {flushes} FLUSH for 100 closes");
    m.unmount().unwrap();
    drop(inner);

    // Locks kept by the mount: every close comes, whatever the host.
    let src = temp_dir("noflush-src").unwrap();
    let m = mount_passthrough(&src, &["locks"]).unwrap();
    let flushes = write_cycles(&m, &src);
    assert!(flushes >= 100, "-o locks: {flushes} FLUSH for 100 closes");
    m.unmount().unwrap();
    fs::remove_dir_all(&src).unwrap();
}
