//! The mount point: checked before mounting, and the mount made on it
//! recorded so that only that one is ever unmounted.
//!
//! **Before mounting** the mount point is checked ([`preflight`]): it must
//! exist and be a directory (a mount on a file succeeds but then answers
//! every access with EIO). A mount point that answers ENOTCONN is a FUSE
//! mount whose daemon died; one of ours (type `fuse.dcache`) is detached
//! and the new mount goes in its place, any other is refused with the
//! command that removes it.
//!
//! **Whose mount.** Right after mounting, the daemon records the new
//! mount's device (`major:minor` in /proc/self/mountinfo) and from then on
//! unmounts only a mount with that device, and only while it is the top
//! one on its path ([`OwnMount`]): unmounting by path alone would, after
//! `fusermount3 -u` of a mount stacked on another dcache mount, unmount
//! the lower one too.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dcache::errno::Errno;

use super::mountinfo;
use crate::options::DEFAULT_SUBTYPE;
use crate::wire::mount::fusermount;

/// Check `mountpoint` before mounting on it and return its canonical path:
/// it must be a directory; a dead dcache mount on it (its daemon killed)
/// is detached first; a dead mount of another file system is refused with
/// the command that removes it.
pub(crate) fn preflight(mountpoint: &Path, subtype: &str) -> Result<PathBuf, String> {
    let fail =
        |e: Errno, hint: &str| format!("cannot mount on {}: {e}{hint}", mountpoint.display());
    // A dead mount may sit on a dead mount: detach a few at most.
    for _ in 0..8 {
        match std::fs::metadata(mountpoint) {
            Ok(m) if m.is_dir() => {
                return std::fs::canonicalize(mountpoint).map_err(|e| fail(Errno::from_io(&e), ""));
            }
            Ok(_) => return Err(fail(Errno::ENOTDIR, "")),
            Err(e) if Errno::from_io(&e) == Errno::ENOTCONN => {
                let refuse = |why: &str| {
                    let hint = format!(
                        " ({why}; `fusermount3 -u {}` removes it)",
                        mountpoint.display()
                    );
                    fail(Errno::ENOTCONN, &hint)
                };
                let at = canonical_parent(mountpoint)
                    .map_err(|_| refuse("a FUSE mount whose daemon is gone"))?;
                let ours = mountinfo::read()
                    .ok()
                    .and_then(|all| mountinfo::top(&all, &at).cloned())
                    .is_some_and(|m| {
                        m.fstype == format!("fuse.{subtype}")
                            || m.fstype == format!("fuse.{DEFAULT_SUBTYPE}")
                    });
                if !ours {
                    return Err(refuse("a dead mount, not dcache's"));
                }
                detach(&at).map_err(|e| {
                    refuse(&format!(
                        "a dead dcache mount that could not be detached: {e}"
                    ))
                })?;
                eprintln!(
                    "dcache: {}: detached a dead dcache mount (its daemon is gone)",
                    at.display()
                );
            }
            Err(e) => return Err(fail(Errno::from_io(&e), "")),
        }
    }
    Err(fail(Errno::ENOTCONN, " (dead mounts keep coming back)"))
}

/// `path` with its directory canonicalised but its last name kept: a dead
/// mount's root cannot be looked at.
fn canonical_parent(path: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => Ok(std::fs::canonicalize(dir)?.join(name)),
        _ => Ok(abs),
    }
}

/// Lazily unmount whatever is on top at `at` (MNT_DETACH as root, else
/// `fusermount3 -u -z`).
fn detach(at: &Path) -> io::Result<()> {
    umount(at, libc::MNT_DETACH)
}

/// umount2(2) on `at` with `flags`; where that is not allowed (not root),
/// `fusermount3 -u` (`-z` for MNT_DETACH).
fn umount(at: &Path, flags: i32) -> io::Result<()> {
    let c = std::ffi::CString::new(at.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: c is a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EPERM) {
        return Err(e);
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if flags & libc::MNT_DETACH != 0 {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(at).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "fusermount3 -u: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Why mounting on `mountpoint` failed (error `e`), naming the
/// real cause rather than blaming the mount point: /dev/fuse that cannot
/// be opened (missing module, or not open to this user), a missing
/// `fusermount3` (how a non-root user mounts), fusermount3's own
/// message, and why fusermount3 could not enter a mount point that is
/// itself a FUSE mount.
pub(crate) fn mount_failed(mountpoint: &Path, e: &io::Error) -> String {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .err();
    let on_fuse = std::fs::canonicalize(mountpoint).is_ok_and(|at| {
        mountinfo::read().is_ok_and(|all| {
            mountinfo::top(&all, &at).is_some_and(|m| m.fstype.starts_with("fuse"))
        })
    });
    explain_mount_error(mountpoint, e, root, dev.as_ref(), &fusermount(), on_fuse)
}

/// What fusermount3 says when it may not look at the mount point.
const HELPER_DENIED: &str = "failed to access mountpoint";

/// [`mount_failed`] given what it found: whether we are root, the error
/// opening /dev/fuse (if any), the mount helper, and whether the mount
/// point is the root of a FUSE mount.
fn explain_mount_error(
    mountpoint: &Path,
    e: &io::Error,
    root: bool,
    dev_fuse: Option<&io::Error>,
    helper: &Result<PathBuf, String>,
    on_fuse: bool,
) -> String {
    if let Some(d) = dev_fuse {
        let errno = Errno::from_io(d);
        let hint = match errno.0 {
            libc::ENOENT | libc::ENODEV | libc::ENXIO => {
                " (no FUSE in this kernel: `modprobe fuse`)"
            }
            libc::EACCES | libc::EPERM if !root => {
                " (a non-root user needs read and write access to it: distributions make it 0666)"
            }
            _ => "",
        };
        return format!("cannot mount: cannot open /dev/fuse: {errno}{hint}");
    }
    if let Err(name) = helper {
        if e.kind() == io::ErrorKind::NotFound {
            return format!(
                "cannot mount: {name} not found (a non-root mount goes through \
                 the setuid fusermount3: install fuse3)"
            );
        }
    }
    match e.raw_os_error() {
        Some(n) => format!("cannot mount on {}: {}", mountpoint.display(), Errno(n)),
        // fusermount3's message ("fusermount3: ..."), or ours.
        None => {
            let msg = e.to_string();
            // A FUSE mount without allow_other lets in only processes
            // whose every uid is its owner's: not the setuid fusermount3,
            // which therefore cannot stack a user's mount on it.
            let hint = if on_fuse && !root && msg.contains(HELPER_DENIED) {
                " (the mount point is a FUSE mount that lets in only its owner, and \
                 fusermount3 runs as root: mount that one with -o allow_other, which \
                 /etc/fuse.conf allows users with user_allow_other)"
            } else {
                ""
            };
            format!(
                "cannot mount on {}: {}{hint}",
                mountpoint.display(),
                msg.trim()
            )
        }
    }
}

/// The mount this process made: its path and its device (`major:minor`),
/// which no other mount shares. Unmounting goes by path (there is no other
/// way), so it is done only while the top mount on the path is this one.
#[derive(Clone, Debug)]
pub(crate) struct OwnMount {
    path: PathBuf,
    dev: (u32, u32),
}

impl OwnMount {
    /// The mount just made on `path` (canonical): the top one there. Read
    /// from /proc/self/mountinfo; nothing looks into the mount, whose
    /// workers may not run yet.
    pub fn record(path: &Path) -> io::Result<OwnMount> {
        let all = mountinfo::read()?;
        let top = mountinfo::top(&all, path).ok_or_else(|| {
            io::Error::other(format!("{} is not in /proc/self/mountinfo", path.display()))
        })?;
        Ok(OwnMount {
            path: path.to_path_buf(),
            dev: top.dev,
        })
    }

    /// Unmount our mount if it is still there: `Ok` once it is gone (or
    /// was already). An error if another mount sits on top of ours, which
    /// unmounting by path would hit instead. `lazy`: detach it even while
    /// it is busy.
    pub fn unmount(&self, lazy: bool) -> io::Result<()> {
        let all = mountinfo::read()?;
        let here: Vec<&mountinfo::Entry> = all.iter().filter(|m| m.at == self.path).collect();
        if !here.iter().any(|m| m.dev == self.dev) {
            return Ok(());
        }
        if mountinfo::top(&all, &self.path).map(|m| m.dev) != Some(self.dev) {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "another mount sits on ours at {}; unmount it first",
                    self.path.display()
                ),
            ));
        }
        match umount(&self.path, 0) {
            Err(e) if lazy && e.raw_os_error() == Some(libc::EBUSY) => detach(&self.path),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(n: i32) -> io::Error {
        io::Error::from_raw_os_error(n)
    }

    #[test]
    fn mount_errors_name_the_real_cause() {
        let mnt = Path::new("/mnt/x");
        let helper = Ok(PathBuf::from("/usr/bin/fusermount3"));
        let acces = io(libc::EACCES);
        // /dev/fuse not open to a non-root user: /dev/fuse, not the
        // mount point.
        let m = explain_mount_error(mnt, &io(libc::EACCES), false, Some(&acces), &helper, false);
        assert!(
            m.starts_with("cannot mount: cannot open /dev/fuse: EACCES: Permission denied ("),
            "{m}"
        );
        assert!(!m.contains("/mnt/x"), "{m}");
        let m = explain_mount_error(
            mnt,
            &io(libc::ENOENT),
            true,
            Some(&io(libc::ENOENT)),
            &helper,
            false,
        );
        assert!(
            m.contains("/dev/fuse: ENOENT") && m.contains("modprobe fuse"),
            "{m}"
        );
        // No fusermount3 where the mount looks for it.
        let none = Err("fusermount3".to_string());
        let m = explain_mount_error(mnt, &io(libc::ENOENT), false, None, &none, false);
        assert!(
            m.starts_with("cannot mount: fusermount3 not found ("),
            "{m}"
        );
        // fusermount3's own message is passed on.
        let fm = io::Error::new(
            io::ErrorKind::PermissionDenied,
            "fusermount3: option allow_other only allowed if 'user_allow_other' is set in /etc/fuse.conf\n",
        );
        let m = explain_mount_error(mnt, &fm, false, None, &helper, false);
        assert_eq!(
            m,
            "cannot mount on /mnt/x: fusermount3: option allow_other only allowed if \
             'user_allow_other' is set in /etc/fuse.conf"
        );
        // fusermount3 kept out of a user's FUSE mount it was to stack on.
        let denied = io::Error::other(
            "/usr/bin/fusermount3: failed to access mountpoint /mnt/x: Permission denied\n",
        );
        let m = explain_mount_error(mnt, &denied, false, None, &helper, true);
        assert!(
            m.starts_with("cannot mount on /mnt/x: /usr/bin/fusermount3: failed to access mountpoint /mnt/x: Permission denied (the mount point is a FUSE mount"),
            "{m}"
        );
        assert!(
            m.contains("-o allow_other") && m.contains("user_allow_other"),
            "{m}"
        );
        // Not on a FUSE mount (or as root): the message alone.
        for (root, on_fuse) in [(false, false), (true, true)] {
            let m = explain_mount_error(mnt, &denied, root, None, &helper, on_fuse);
            assert!(!m.contains("allow_other"), "{m}");
        }
        // Anything else is the mount point's, by errno name.
        let m = explain_mount_error(mnt, &io(libc::EINVAL), true, None, &helper, false);
        assert_eq!(m, "cannot mount on /mnt/x: EINVAL: Invalid argument");
    }
}
