//! Going to the background like libfuse's `fuse_daemonize`: the parent
//! waits until the child has mounted, then exits 0 (or 1 with the child's
//! message); the child leaves the session and the working directory and
//! serves; stdin and stdout go to /dev/null but stderr is kept, so the
//! unmount report still reaches whoever started it.

/// The serving child's end of the pipe its parent waits on.
pub struct Ready(libc::c_int);

impl Ready {
    /// Tell the waiting parent how the mount went (it exits 0, or
    /// prints the message and exits 1); then leave the working
    /// directory like `fuse_daemonize`. On failure the child exits too.
    pub fn tell(self, r: Result<(), &str>) {
        let msg = match r {
            Ok(()) => b"0".to_vec(),
            Err(m) => [b"1", m.as_bytes()].concat(),
        };
        let mut off = 0;
        while off < msg.len() {
            // SAFETY: writes from a live buffer to our own pipe fd.
            let n = unsafe { libc::write(self.0, msg[off..].as_ptr().cast(), msg.len() - off) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        // SAFETY: our own descriptors and a static path.
        unsafe {
            libc::close(self.0);
            libc::chdir(c"/".as_ptr());
        }
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
/// session, points stdin and stdout at /dev/null (stderr is kept, for
/// the unmount report) and continues.
pub fn detach() -> Result<Ready, String> {
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
            // SAFETY: plain syscalls on valid arguments.
            unsafe {
                libc::close(fds[0]);
                libc::setsid();
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 {
                    libc::dup2(null, 0);
                    libc::dup2(null, 1);
                    if null > 2 {
                        libc::close(null);
                    }
                }
            }
            Ok(Ready(fds[1]))
        }
        _ => {
            // SAFETY: our own write end, which only the child keeps.
            unsafe { libc::close(fds[1]) };
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
