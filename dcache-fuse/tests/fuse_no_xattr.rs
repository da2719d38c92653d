//! `-o no_xattr`. With passthrough I/O the kernel asks the server for
//! `security.capability` before every `write(2)` (its backing-file write
//! drops privileges on the FUSE file, and FUSE superblocks lack
//! `SB_NOSEC`): one round trip per write. A mount that serves no extended
//! attributes answers the first xattr request ENOSYS; the kernel then
//! sends none, answers `setxattr` with EOPNOTSUPP itself, and writes make
//! no xattr round trip. By default xattrs work, and with passthrough I/O
//! every write brings its GETXATTR. On a passthrough mount, with and
//! without passthrough I/O (which needs root). Without FUSE, one SKIPPED
//! line.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use dcache_fuse::testing::{available, mount_passthrough, temp_dir};
use dcache_fuse::Mounted;

/// 100 writes of one line each to one open file; the data is all there.
/// Returns the xattr requests the daemon saw meanwhile, and whether the
/// kernel wrote the file itself (passthrough I/O: a backing file was
/// registered for it).
fn writes(m: &Mounted) -> (u64, bool) {
    let p = m.path().join("data");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&p)
        .unwrap();
    let passthrough = m.backing_files() > 0;
    let before = m.xattr_requests();
    let mut want = Vec::new();
    for i in 0..100 {
        let line = format!("line {i}\n");
        f.write_all(line.as_bytes()).unwrap();
        want.extend_from_slice(line.as_bytes());
    }
    let seen = m.xattr_requests() - before;
    drop(f);
    assert!(fs::read(&p).unwrap() == want, "the 100 lines");
    (seen, passthrough)
}

/// `setxattr(2)` of a user attribute on `p`: Ok or the errno.
fn set_user_xattr(p: &Path) -> Result<(), i32> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and name, a 1-byte value.
    let r = unsafe { libc::setxattr(c.as_ptr(), c"user.k".as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

#[test]
fn without_xattrs_writes_make_no_xattr_round_trip() {
    if let Err(why) = available() {
        dcache_fuse::testing::skipped(format_args!("fuse_no_xattr: FUSE unusable here ({why})"));
        return;
    }
    let src = temp_dir("noxattr-src").unwrap();
    for opts in [&[][..], &["no_passthrough_io"][..]] {
        // Default: xattrs work, and with passthrough I/O every write
        // brings a GETXATTR (the kernel's own write path asks once).
        let m = mount_passthrough(&src, opts).unwrap();
        let (seen, passthrough) = writes(&m);
        if passthrough {
            assert!(
                seen >= 100,
                "{opts:?}: {seen} xattr requests for 100 writes"
            );
        } else {
            eprintln!("{opts:?}: no passthrough I/O, {seen} xattr requests for 100 writes");
        }
        assert_eq!(set_user_xattr(&m.path().join("data")), Ok(()), "{opts:?}");
        m.unmount().unwrap();

        // no_xattr: at most the first request, answered ENOSYS.
        let mut o = opts.to_vec();
        o.push("no_xattr");
        let m = mount_passthrough(&src, &o).unwrap();
        let (seen, _) = writes(&m);
        assert!(seen <= 1, "{o:?}: {seen} xattr requests for 100 writes");
        assert_eq!(
            set_user_xattr(&m.path().join("data")),
            Err(libc::EOPNOTSUPP),
            "{o:?}"
        );
        let after = m.xattr_requests();
        assert!(
            writes(&m).0 == 0 && m.xattr_requests() == after,
            "{o:?}: none later"
        );
        let r = m.unmount().unwrap();
        assert_eq!((r.referenced, r.open_files), (0, 0), "{r}");
    }
    fs::remove_dir_all(&src).unwrap();
}
