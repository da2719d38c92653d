//! Making the mount: root calls mount(2) with the /dev/fuse descriptor in
//! its options; anyone else (and `auto_unmount`, which needs a process that
//! outlives the daemon) goes through the setuid `fusermount3`, which mounts
//! and hands the descriptor back over a socket (`_FUSE_COMMFD`,
//! `SCM_RIGHTS`), as libfuse does.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::dev::Dev;

/// What to mount, in the words of mount(8)'s FUSE options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountSpec {
    /// The source shown in /proc/mounts (`fsname=`).
    pub fsname: String,
    /// The type shown after `fuse.` (`subtype=`).
    pub subtype: String,
    /// The generic flags, by name: `ro`, `nosuid`, `nodev`, `noexec`,
    /// `noatime`, `sync`, `dirsync` (their opposites are the default and
    /// are dropped).
    pub flags: Vec<String>,
    /// The kernel checks permissions itself (`default_permissions`).
    pub default_permissions: bool,
    /// Others than the mounting user may enter (`allow_other`).
    pub allow_other: bool,
    /// Unmount when the daemon dies (fusermount3 stays to watch).
    pub auto_unmount: bool,
}

/// A mount made: its connection and, with `auto_unmount`, the socket
/// whose closing (when this process dies) tells fusermount3 to unmount.
#[derive(Debug)]
pub struct Mount {
    /// The connection's first descriptor.
    pub dev: Dev,
    /// fusermount3's watch (`auto_unmount`); held for the mount's life.
    pub watch: Option<UnixStream>,
}

fn ms_flag(name: &str) -> Option<libc::c_ulong> {
    Some(match name {
        "ro" => libc::MS_RDONLY,
        "nosuid" => libc::MS_NOSUID,
        "nodev" => libc::MS_NODEV,
        "noexec" => libc::MS_NOEXEC,
        "noatime" => libc::MS_NOATIME,
        "sync" => libc::MS_SYNCHRONOUS,
        "dirsync" => libc::MS_DIRSYNC,
        "rw" | "suid" | "dev" | "exec" | "atime" | "async" => 0,
        _ => return None,
    })
}

/// Mount a new FUSE connection on `at` (an existing directory).
pub fn mount(at: &Path, spec: &MountSpec) -> io::Result<Mount> {
    for f in &spec.flags {
        if ms_flag(f).is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown mount flag {f}"),
            ));
        }
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root && !spec.auto_unmount {
        match mount_direct(at, spec) {
            // Not allowed after all (a user namespace without the right):
            // fusermount3 may still be.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            r => return r,
        }
    }
    mount_helper(at, spec)
}

fn mount_direct(at: &Path, spec: &MountSpec) -> io::Result<Mount> {
    let dev = Dev::open()?;
    let rootmode = std::fs::metadata(at)?.mode() & libc::S_IFMT;
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={:o},user_id={uid},group_id={gid}",
        dev.as_fd().as_raw_fd(),
        rootmode
    );
    if spec.default_permissions {
        data.push_str(",default_permissions");
    }
    if spec.allow_other {
        data.push_str(",allow_other");
    }
    let flags = spec
        .flags
        .iter()
        .filter_map(|f| ms_flag(f))
        .fold(libc::MS_NOSUID | libc::MS_NODEV, |a, f| a | f);
    // nosuid and nodev are libfuse's defaults too; `suid`/`dev` undo them.
    let flags = spec.flags.iter().fold(flags, |a, f| match f.as_str() {
        "suid" => a & !libc::MS_NOSUID,
        "dev" => a & !libc::MS_NODEV,
        _ => a,
    });
    let cstr = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
    let source = cstr(spec.fsname.as_bytes())?;
    let target = cstr(at.as_os_str().as_bytes())?;
    let fstype = cstr(format!("fuse.{}", spec.subtype).as_bytes())?;
    let data = cstr(data.as_bytes())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call; `data` is the text FUSE's mount parses.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Mount { dev, watch: None })
}

/// The mount helper: `$FUSERMOUNT_PATH`, else `fusermount3` or
/// `fusermount` in PATH, /sbin or /bin. `Err` names what was looked for.
pub fn fusermount() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("FUSERMOUNT_PATH") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{} (FUSERMOUNT_PATH)", p.display()))
        };
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/sbin".into(), "/bin".into()]);
    dirs.iter()
        .flat_map(|d| [d.join("fusermount3"), d.join("fusermount")])
        .find(|p| p.is_file())
        .ok_or_else(|| "fusermount3".to_string())
}

fn mount_helper(at: &Path, spec: &MountSpec) -> io::Result<Mount> {
    let helper = fusermount()
        .map_err(|name| io::Error::new(io::ErrorKind::NotFound, format!("{name} not found")))?;
    let mut opts = vec![
        format!("fsname={}", spec.fsname),
        format!("subtype={}", spec.subtype),
    ];
    opts.extend(spec.flags.iter().cloned());
    if spec.default_permissions {
        opts.push("default_permissions".into());
    }
    if spec.allow_other {
        opts.push("allow_other".into());
    }
    if spec.auto_unmount {
        opts.push("auto_unmount".into());
    }
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(&helper);
    cmd.arg("-o")
        .arg(opts.join(","))
        .arg("--")
        .arg(at)
        .env("_FUSE_COMMFD", theirs_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only fcntl, which is async-signal-safe,
    // on a descriptor the child inherited.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(theirs_fd, libc::F_GETFD);
            if flags == -1 || libc::fcntl(theirs_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    drop(theirs);
    let got = receive_fd(&ours);
    let fail = |child: std::process::Child| {
        let out = child.wait_with_output().ok();
        let msg = out
            .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
            .unwrap_or_default();
        io::Error::other(if msg.is_empty() {
            format!("{} failed", helper.display())
        } else {
            msg
        })
    };
    let fd = match got {
        Ok(Some(fd)) => fd,
        _ => return Err(fail(child)),
    };
    if spec.auto_unmount {
        // fusermount3 stays, watching the socket; reap it in the background.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        Ok(Mount {
            dev: Dev::from_fd(fd),
            watch: Some(ours),
        })
    } else {
        drop(ours);
        let st = child.wait()?;
        if !st.success() {
            return Err(io::Error::other(format!(
                "{} exited {st}",
                helper.display()
            )));
        }
        Ok(Mount {
            dev: Dev::from_fd(fd),
            watch: None,
        })
    }
}

/// The descriptor fusermount3 sends (one `SCM_RIGHTS` message); `None`
/// when it closed the socket without one (it failed).
fn receive_fd(sock: &UnixStream) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor's control message, aligned for cmsghdr.
    let mut space = [0u64; 8];
    // SAFETY: msghdr is plain data; zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space);
    // SAFETY: recvmsg writes at most iov_len bytes into `byte` and at most
    // msg_controllen into `space`, both live locals.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: msg was filled by recvmsg; CMSG_FIRSTHDR/CMSG_DATA stay
    // within msg_control (the kernel set msg_controllen to what it wrote).
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return Ok(None);
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
        if fd < 0 {
            return Ok(None);
        }
        Ok(Some(OwnedFd::from_raw_fd(fd)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_flags_are_refused_before_mounting() {
        let spec = MountSpec {
            flags: vec!["frobnicate".into()],
            ..Default::default()
        };
        let e = mount(Path::new("/nonexistent"), &spec).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(ms_flag("ro"), Some(libc::MS_RDONLY));
        assert_eq!(ms_flag("exec"), Some(0));
    }
}
