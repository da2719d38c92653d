//! Mounting and serving: the `dcache mount` daemon ([`serve`]) and
//! in-process mounts for tests and benchmarks ([`mount`]).
//!
//! The daemon mounts (and completes the FUSE handshake) before anything
//! else, so a bad mount point or a missing /dev/fuse is reported while the
//! caller still waits. Without `-f` it then forks like libfuse's
//! `fuse_daemonize`: the parent exits 0, the child leaves the session and
//! the working directory and serves; stdin and stdout go to /dev/null but
//! stderr is kept, so the unmount report still reaches whoever started it.
//!
//! SIGINT, SIGTERM and SIGHUP are blocked in every thread and taken by one
//! thread with `sigwait`, which prunes (below) and unmounts (lazily if the
//! mount is busy); the workers then see the device close, finish, and the
//! report is printed. `fusermount3 -u` or `umount` end the session the same
//! way, but without warning: the kernel never sends forgets at unmount, so
//! what it still caches then is reported as referenced. SIGUSR1 prunes and
//! prints the count without unmounting. A second SIGINT/SIGTERM/SIGHUP
//! exits at once.
//!
//! **Pruning** asks the kernel to drop the cached entries of every name in
//! the root directory (FUSE_NOTIFY_INVAL_ENTRY, which prunes the whole
//! subtree under a directory); the kernel forgets every node nobody uses,
//! and we wait until the forgets stop arriving. What is still referenced
//! after that is in use (an open file, a working directory) or leaked.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, INodeNo, Notifier, Session, SessionUnmounter};

use crate::fs::FileSystem;
use crate::Vfs;

use super::backend::Backend;
use super::fs::{DcacheFs, FsConfig};
use super::options::MountOptions;
use super::poll::Poller;
use super::stats::{Report, Stats};

/// What `dcache mount` was asked to do.
#[derive(Clone, Debug)]
pub struct ServeRequest {
    pub backend: Backend,
    pub mountpoint: PathBuf,
    pub options: MountOptions,
    /// `-f`: stay in the foreground.
    pub foreground: bool,
    /// `-s`: one worker thread.
    pub single_threaded: bool,
}

fn fs_config(options: &MountOptions, default_direct_io: bool, log: bool) -> FsConfig {
    FsConfig {
        timeouts: options.timeouts,
        readdirplus: options.readdirplus,
        direct_io: options.direct_io.unwrap_or(default_direct_io),
        log,
    }
}

/// Mount, serve until unmounted, print the report. Returns the report.
pub fn serve(req: &ServeRequest) -> Result<Report, String> {
    let backend = req.backend.build()?;
    let vfs = Vfs::new(backend).map_err(|e| format!("backend root: {e}"))?;
    let cfg = fs_config(&req.options, req.backend.wants_direct_io(), true);
    let fs = DcacheFs::new(vfs, cfg);
    let report = fs.report_slot();
    let stats = fs.stats();
    let poll = fs.poll_slot();
    let config = req
        .options
        .fuser_config(req.single_threaded, &req.backend.fsname());
    // Before any thread exists, so that every thread inherits the mask.
    let signals = signals::block()?;
    let mut start_poll = None;
    let mut session = Session::new(fs, &req.mountpoint, &config)
        .map_err(|e| format!("cannot mount on {}: {e}", req.mountpoint.display()))?;
    if let Some(w) = req.options.poll_window(req.single_threaded) {
        // After the fork below the governor thread would not exist: start
        // it in the process that serves.
        start_poll = Some(w);
    }
    if !req.foreground {
        daemon::detach()?;
    }
    if let Some(w) = start_poll {
        let p = Poller::start(session.as_fd(), w).map_err(|e| format!("poller: {e}"))?;
        let _ = poll.set(p);
    }
    let unmounter = session.unmount_callable();
    let at = std::fs::canonicalize(&req.mountpoint).unwrap_or_else(|_| req.mountpoint.clone());
    let pruner = Pruner {
        notifier: session.notifier(),
        mountpoint: at.clone(),
        stats,
    };
    signals::spawn_waiter(signals, unmounter, pruner, at)?;
    session.run().map_err(|e| format!("session: {e}"))?;
    report
        .get()
        .copied()
        .ok_or_else(|| "session ended without a report".to_string())
}

/// Makes the kernel forget what it caches but does not use.
pub struct Pruner {
    notifier: Notifier,
    mountpoint: PathBuf,
    stats: Arc<Stats>,
}

impl Pruner {
    /// Invalidate every root entry, wait (at most ~2 s) for the forgets to
    /// settle, and return the counts then.
    pub fn prune(&self) -> Report {
        // Listing the root goes through the mount (our own workers answer).
        if let Ok(rd) = std::fs::read_dir(&self.mountpoint) {
            let names: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
            for n in names {
                // ENOENT: the kernel had nothing cached under that name.
                let _ = self.notifier.inval_entry(INodeNo::ROOT, &n);
            }
        }
        let start = Instant::now();
        let mut last = self.stats.report();
        let mut last_change = start;
        loop {
            if last.referenced == 0 || start.elapsed() > Duration::from_secs(2) {
                return last;
            }
            std::thread::sleep(Duration::from_millis(5));
            let r = self.stats.report();
            if r != last {
                last = r;
                last_change = Instant::now();
            } else if last_change.elapsed() > Duration::from_millis(200) {
                return last;
            }
        }
    }
}

/// A backend mounted by this process (worker threads in the background).
/// Dropping it unmounts.
pub struct Mounted {
    session: Option<BackgroundSession>,
    report: Arc<OnceLock<Report>>,
    poll: Arc<OnceLock<Arc<Poller>>>,
    pruner: Pruner,
    path: PathBuf,
}

impl Mounted {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The busy-poller, if this mount polls (`poll_us`, [`super::poll`]).
    pub fn poller(&self) -> Option<&Arc<Poller>> {
        self.poll.get()
    }

    /// The counts now.
    pub fn stats(&self) -> Report {
        self.pruner.stats.report()
    }

    /// Make the kernel forget what it does not use; returns the counts.
    pub fn prune(&self) -> Report {
        self.pruner.prune()
    }

    /// Prune, unmount, wait for the workers, and return the report.
    pub fn unmount(mut self) -> io::Result<Report> {
        self.pruner.prune();
        self.stop()?;
        self.report
            .get()
            .copied()
            .ok_or_else(|| io::Error::other("session ended without a report"))
    }

    fn stop(&mut self) -> io::Result<()> {
        match self.session.take() {
            Some(s) => s.umount_and_join(),
            None => Ok(()),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Mount `backend` on `mountpoint` in this process with `options`.
pub fn mount(
    backend: Arc<dyn FileSystem>,
    mountpoint: &Path,
    options: &MountOptions,
) -> io::Result<Mounted> {
    let vfs = Vfs::new(backend).map_err(|e| io::Error::from_raw_os_error(e.raw()))?;
    let fs = DcacheFs::new(vfs, fs_config(options, false, false));
    let report = fs.report_slot();
    let stats = fs.stats();
    let poll = fs.poll_slot();
    let config = options.fuser_config(false, "dcache");
    let session = Session::new(fs, mountpoint, &config)?;
    if let Some(w) = options.poll_window(false) {
        let _ = poll.set(Poller::start(session.as_fd(), w)?);
    }
    let session = session.spawn()?;
    let path = std::fs::canonicalize(mountpoint)?;
    Ok(Mounted {
        pruner: Pruner {
            notifier: session.notifier(),
            mountpoint: path.clone(),
            stats,
        },
        session: Some(session),
        report,
        poll,
        path,
    })
}

mod signals {
    use std::path::PathBuf;

    use super::{Pruner, SessionUnmounter};

    pub struct Blocked(libc::sigset_t);

    /// Block SIGINT, SIGTERM, SIGHUP and SIGUSR1 in this thread (and so in
    /// every thread it starts).
    pub fn block() -> Result<Blocked, String> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it before
        // use, and pthread_sigmask only reads it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
                libc::sigaddset(&mut set, s);
            }
            let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if r != 0 {
                return Err(format!("pthread_sigmask: errno {r}"));
            }
            Ok(Blocked(set))
        }
    }

    /// A thread that waits for the blocked signals: SIGUSR1 prunes and
    /// reports, the others prune and unmount.
    pub fn spawn_waiter(
        set: Blocked,
        mut unmounter: SessionUnmounter,
        pruner: Pruner,
        at: PathBuf,
    ) -> Result<(), String> {
        std::thread::Builder::new()
            .name("dcache-signals".into())
            .spawn(move || {
                let mut first = true;
                loop {
                    let mut sig = 0;
                    // SAFETY: set is an initialised sigset; sig is a valid
                    // out pointer.
                    if unsafe { libc::sigwait(&set.0, &mut sig) } != 0 {
                        continue;
                    }
                    if sig == libc::SIGUSR1 {
                        eprintln!("dcache: pruned, {}", pruner.prune());
                        continue;
                    }
                    if !first {
                        eprintln!("dcache: second signal, exiting without unmounting");
                        std::process::exit(130);
                    }
                    first = false;
                    pruner.prune();
                    if unmounter.unmount().is_err() {
                        lazy_unmount(&at);
                    }
                }
            })
            .map(|_| ())
            .map_err(|e| format!("signal thread: {e}"))
    }

    /// Detach the mount even though it is busy; it goes away, and our
    /// session ends, once its last user leaves.
    fn lazy_unmount(at: &std::path::Path) {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(at.as_os_str().as_bytes()) else {
            return;
        };
        // SAFETY: c is a NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            return;
        }
        let _ = std::process::Command::new("fusermount3")
            .args(["-u", "-z", "--"])
            .arg(at)
            .status();
    }
}

mod daemon {
    /// Fork into the background (libfuse's `fuse_daemonize`): the parent
    /// exits 0 at once, without running destructors (its copy of the
    /// session must not unmount); the child continues.
    pub fn detach() -> Result<(), String> {
        // fork() copies only the calling thread; a helper thread's locks
        // would stay held forever in the child.
        let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
        if threads != 1 {
            return Err(format!(
                "cannot go to the background with {threads} threads running; use -f"
            ));
        }
        // SAFETY: single-threaded (checked above), so the child may run
        // arbitrary code.
        match unsafe { libc::fork() } {
            -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
            0 => {
                // SAFETY: plain syscalls on valid arguments.
                unsafe {
                    libc::setsid();
                    libc::chdir(c"/".as_ptr());
                    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                    if null >= 0 {
                        libc::dup2(null, 0);
                        libc::dup2(null, 1);
                        if null > 2 {
                            libc::close(null);
                        }
                    }
                }
                Ok(())
            }
            // SAFETY: _exit ends the process without unwinding or
            // destructors, which is the point.
            _ => unsafe { libc::_exit(0) },
        }
    }
}
