//! Going to the background like libfuse's `fuse_daemonize`: the parent
//! waits until the child has mounted, then exits 0 (or 1 with the child's
//! message); the child leaves the session and the working directory and
//! serves. Until the mount is up the child's stderr is still the caller's
//! (an error before then reaches the caller through the parent); once it
//! is up, stdin, stdout and stderr point at /dev/null, or stdout and
//! stderr at the log file (`--log FILE`), so nothing of the caller's is
//! held open: `out=$(dcache mount ... 2>&1)` returns as soon as the mount
//! is up.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// Where the background daemon's messages go once the mount is up.
pub struct Sink(Option<OwnedFd>);

impl Sink {
    /// `path` opened for appending (created 0644 if missing), or /dev/null
    /// for `None`. Opened by the caller, before forking and before the
    /// working directory changes, so that a relative path is the
    /// caller's and an error is reported while the caller waits.
    pub fn open(path: Option<&Path>) -> Result<Sink, String> {
        let Some(p) = path else {
            return Ok(Sink(None));
        };
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o644)
            .open(p)
            .map(|f| Sink(Some(f.into())))
            .map_err(|e| {
                format!(
                    "cannot open the log {}: {}",
                    p.display(),
                    dcache::Errno::from_io(&e)
                )
            })
    }

    /// With `-f`: point stdout and stderr at the log file, if one was
    /// given (else leave them alone).
    pub fn redirect(self) {
        if let Some(f) = &self.0 {
            // SAFETY: dup2 of a descriptor we own onto 1 and 2.
            unsafe {
                libc::dup2(f.as_raw_fd(), 1);
                libc::dup2(f.as_raw_fd(), 2);
            }
        }
    }

    /// In the background: point stdin at /dev/null, and stdout and
    /// stderr at the log file or /dev/null.
    fn detach_stdio(&self) {
        // SAFETY: plain syscalls on descriptors we own or a static path;
        // dup2 onto 0, 1 and 2 replaces them for every thread.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            let out = self.0.as_ref().map_or(null, |f| f.as_raw_fd());
            if null >= 0 {
                libc::dup2(null, 0);
            }
            if out >= 0 {
                libc::dup2(out, 1);
                libc::dup2(out, 2);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
}

/// The serving child's end of the pipe its parent waits on.
pub struct Ready {
    pipe: libc::c_int,
    sink: Sink,
}

impl Ready {
    /// Tell the waiting parent how the mount went (it exits 0, or
    /// prints the message and exits 1). On success first point stdout
    /// and stderr at the log (or /dev/null), so that the caller's are
    /// closed by the time the parent exits; then leave the working
    /// directory like `fuse_daemonize`. On failure the child exits too.
    pub fn tell(self, r: Result<(), &str>) {
        if r.is_ok() {
            self.sink.detach_stdio();
        }
        let msg = match r {
            Ok(()) => b"0".to_vec(),
            Err(m) => [b"1", m.as_bytes()].concat(),
        };
        let mut off = 0;
        while off < msg.len() {
            // SAFETY: writes from a live buffer to our own pipe fd.
            let n = unsafe { libc::write(self.pipe, msg[off..].as_ptr().cast(), msg.len() - off) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        // SAFETY: our own descriptor and a static path.
        unsafe {
            libc::close(self.pipe);
            libc::chdir(c"/".as_ptr());
        }
        drop(self.sink);
        if r.is_err() {
            // SAFETY: the parent reports the error; nothing else is
            // left to do here (the failed mount was dropped already).
            unsafe { libc::_exit(1) };
        }
    }
}

/// Fork into the background (libfuse's `fuse_daemonize`): the parent
/// waits until the child reports through a pipe ([`Ready::tell`]),
/// then exits without running destructors; the child leaves the
/// session and continues (its stdin is pointed at /dev/null, its stdout
/// and stderr at `sink`, when it tells the parent the mount is up).
pub fn detach(sink: Sink) -> Result<Ready, String> {
    // fork() copies only the calling thread; a helper thread's locks
    // would stay held forever in the child.
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
    if threads != 1 {
        return Err(format!(
            "cannot go to the background with {threads} threads running; use -f"
        ));
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid out array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: single-threaded (checked above), so the child may run
    // arbitrary code.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            // SAFETY: plain syscalls on valid arguments. stdin, stdout
            // and stderr stay the caller's until the mount is up (an
            // error before then may be printed there; the parent prints
            // the one the pipe carries), and are replaced in `tell`.
            unsafe {
                libc::close(fds[0]);
                libc::setsid();
            }
            Ok(Ready { pipe: fds[1], sink })
        }
        _ => {
            // SAFETY: our own write end, which only the child keeps.
            unsafe { libc::close(fds[1]) };
            drop(sink);
            let mut got = Vec::new();
            let mut buf = [0u8; 512];
            loop {
                // SAFETY: reads into a live buffer of that length.
                let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
                if n > 0 {
                    got.extend_from_slice(&buf[..n as usize]);
                } else if n == 0
                    || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR)
                {
                    break;
                }
            }
            let code = match got.split_first() {
                Some((b'0', _)) => 0,
                Some((_, m)) => {
                    eprintln!("dcache: {}", String::from_utf8_lossy(m));
                    1
                }
                None => {
                    eprintln!("dcache: the background process ended before mounting");
                    1
                }
            };
            // SAFETY: _exit ends the process without unwinding or
            // destructors, which is the point (nothing of the child's
            // is ours to clean up).
            unsafe { libc::_exit(code) }
        }
    }
}
