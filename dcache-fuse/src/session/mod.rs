//! Mounting and serving: the `dcache mount` daemon ([`serve()`]) and
//! in-process mounts for tests and benchmarks ([`mount`]).
//!
//! The daemon mounts (and completes the FUSE handshake) before anything
//! else, so a bad mount point or a missing /dev/fuse is reported while the
//! caller still waits. Without `-f` it forks like libfuse's
//! `fuse_daemonize`: the child mounts while the parent waits; an error
//! before the mount is up is printed on the caller's stderr by the parent
//! (exit 1); once it is up the parent exits 0 and the child, which has
//! left the session and the working directory, serves with stdin, stdout
//! and stderr on /dev/null (or stdout and stderr appended to the `--log`
//! file, which then gets the unmount report). Nothing of the caller's is
//! held open, so `out=$(dcache mount ...)` returns once the mount is up.
//!
//! SIGINT, SIGTERM and SIGHUP prune the kernel's cache and unmount;
//! `fusermount3 -u` or `umount` end the session the same way, but without
//! warning. SIGUSR1 prunes and prints the count without unmounting.
//!
//! The parts, each depending only on those listed after it:
//! - `signals`: the one thread that takes the signals (`sigwait`).
//! - `daemon`: going to the background (fork, the pipe the parent waits
//!   on).
//! - `prune`: making the kernel forget what it caches but does not use.
//! - `mountpoint`: the check before mounting (a dead dcache mount is
//!   detached) and `OwnMount`, the mount this process made, the only one
//!   it ever unmounts.
//! - `mountinfo`: the parser of /proc/self/mountinfo.
//! - `transport`: which transport serves the mount (io_uring or
//!   /dev/fuse), and why, for the log.

mod daemon;
mod mountinfo;
mod mountpoint;
mod prune;
mod signals;
mod transport;

pub use self::transport::Transport;

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use dcache::fs::FileSystem;
use dcache::vfs::Counters;
use dcache::Vfs;

use self::mountpoint::{preflight, OwnMount};
use self::prune::Pruner;
use super::backend::Backend;
use super::fs::{DcacheFs, FsConfig};
use super::inval::{InvalSlot, KernelInval};
use super::options::{Allow, MountOptions, DEFAULT_SUBTYPE};
use super::poll::Poller;
use super::stats::{Report, Stats};
use super::usage::Usage;
use super::wire::abi::init;
use super::wire::dev::Notifier;
use super::wire::serve::{self, Access, Workers};
use super::wire::uring::{self, Rings};

/// What `dcache mount` was asked to do.
#[derive(Clone, Debug)]
pub struct ServeRequest {
    /// What to serve.
    pub backend: Backend,
    /// Where to mount it.
    pub mountpoint: PathBuf,
    /// The `-o` options.
    pub options: MountOptions,
    /// `-f`: stay in the foreground.
    pub foreground: bool,
    /// `-s`: one worker thread.
    pub single_threaded: bool,
    /// `--log FILE`: once the mount is up, stdout and stderr (the unmount
    /// report, prune counts, warnings) are appended to this file. `None`:
    /// /dev/null in the background, the caller's stderr with `-f`.
    pub log: Option<PathBuf>,
}

fn fs_config(options: &MountOptions, default_direct_io: bool, log: bool) -> FsConfig {
    FsConfig {
        timeouts: options.timeouts,
        readdirplus: options.readdirplus,
        direct_io: options.direct_io.unwrap_or(default_direct_io),
        passthrough_io: options.passthrough_io,
        check_permissions: !options.default_permissions,
        log,
        max_nodes: options.max_nodes,
        zero_trip_open: options.zero_trip_open,
        writeback_cache: options.writeback_cache,
        posix_acl: options.posix_acl,
        xattr: options.xattr,
        killpriv: options.killpriv,
        locks: options.locks,
    }
}

/// Mount, serve until unmounted, print the report. Returns the report.
///
/// Without `-f` the process forks first (after checking the mount point
/// and opening the log) and the child builds the backend, mounts and
/// serves, while the parent waits until the child reports the mount made
/// (exit 0) or failed (the child's message on stderr, exit 1). Building
/// the backend in the child lets it start threads (dcache-etcd's runtime
/// and watch): `fork` keeps only the calling thread.
pub fn serve(req: &ServeRequest) -> Result<Report, String> {
    let subtype = req.options.subtype.as_deref().unwrap_or(DEFAULT_SUBTYPE);
    let at = preflight(&req.mountpoint, subtype)?;
    let sink = daemon::Sink::open(req.log.as_deref())?;
    // Before any thread exists, so that every thread inherits the mask.
    let signals = signals::block()?;
    let (ready, sink) = if req.foreground {
        (None, Some(sink))
    } else {
        (Some(daemon::detach(sink)?), None)
    };
    let started = start_serving(req, &at);
    if let (Ok(_), Backend::Custom(c)) = (&started, &req.backend) {
        // Still the caller's stdout: the mount is up, `tell` not sent.
        if let Some(line) = c.notice.lock().unwrap_or_else(|e| e.into_inner()).take() {
            use std::io::Write;
            // A closed stdout is no reason to fail a mount that is up.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}").and_then(|_| out.flush());
        }
    }
    if let Some(r) = ready {
        // The parent exits now: 0, or 1 with the message.
        r.tell(started.as_ref().map(|_| ()).map_err(|m| m.as_str()));
    } else if let (Ok(_), Some(s)) = (&started, sink) {
        s.redirect();
    }
    let (session, own, report, stats, counters, backend) = started?;
    eprintln!("dcache: {}", session.transport);
    let pruner = Pruner {
        notifier: session.notifier.clone(),
        mountpoint: at,
        stats,
        counters,
        backend,
    };
    signals::spawn_waiter(signals, own, pruner)?;
    session.join().map_err(|e| format!("session: {e}"))?;
    report
        .get()
        .copied()
        .ok_or_else(|| "session ended without a report".to_string())
}

type Started = (
    Serving,
    OwnMount,
    Arc<OnceLock<Report>>,
    Arc<Stats>,
    Arc<Counters>,
    Arc<dyn dcache::FileSystem>,
);

/// Build the backend, mount it on `at` and start the workers: everything
/// `serve` does in the process that serves.
fn start_serving(req: &ServeRequest, at: &Path) -> Result<Started, String> {
    let backend = req.backend.build_with(&req.options)?;
    let vfs = Vfs::with_config(backend, req.options.vfs_config())
        .map_err(|e| format!("backend root: {e}"))?;
    let counters = vfs.counters();
    let backend = vfs.backend().clone();
    let cfg = fs_config(&req.options, req.backend.wants_direct_io(), true);
    let fs = DcacheFs::new(vfs, cfg);
    let report = fs.report_slot();
    let stats = fs.stats();
    let spec = req.options.mount_spec(&req.backend.fsname());
    let (session, own) =
        start(fs, at, &req.options, &spec, req.single_threaded).map_err(|e| match e {
            StartError::Mount(e) => mountpoint::mount_failed(&req.mountpoint, &e),
            StartError::Other(m) => m,
        })?;
    Ok((session, own, report, stats, counters, backend))
}

/// Why [`start`] failed: the mount itself, or what came after it.
enum StartError {
    Mount(io::Error),
    Other(String),
}

/// A mounted connection being served: its workers, the filesystem they
/// answer with, and what must live as long as the mount.
pub(crate) struct Serving {
    workers: Workers,
    /// The io_uring queues, when they carry the requests.
    rings: Option<Rings>,
    transport: Transport,
    fs: Arc<DcacheFs>,
    notifier: Notifier,
    /// fusermount3's `auto_unmount` watch: closed when this process ends.
    _watch: Option<UnixStream>,
}

impl Serving {
    /// Wait until the connection ends (unmount), then record the report;
    /// the filesystem's references go when the last holder drops it.
    fn join(self) -> io::Result<()> {
        let mut r = self.workers.join();
        // The /dev/fuse workers end when the connection does; the queues
        // end with it too (every entry completes with ENOTCONN), and are
        // told to in any case.
        if let Some(rings) = self.rings {
            rings.stop();
            let q = rings.join();
            if r.is_ok() {
                r = q;
            }
        }
        self.fs.finish();
        r
    }
}

/// Mount `fs` on `at`, answer INIT, start the poller (if the options ask
/// for one), the workers and the invalidator.
fn start(
    mut fs: DcacheFs,
    at: &Path,
    options: &MountOptions,
    spec: &super::wire::mount::MountSpec,
    single: bool,
) -> Result<(Serving, OwnMount), StartError> {
    let other = |what: &str, e: io::Error| StartError::Other(format!("{what}: {e}"));
    let m = super::wire::mount::mount(at, spec).map_err(StartError::Mount)?;
    let own = OwnMount::record(at).map_err(|e| {
        StartError::Other(format!("cannot find our mount on {}: {e}", at.display()))
    })?;
    let dev = Arc::new(m.dev);
    let usable = options.uring != Some(false) && uring::usable();
    let agreed = serve::handshake(&dev, &mut fs, usable).map_err(|e| other("FUSE handshake", e))?;
    fs.connected(dev.clone());
    let poll = fs.poll_slot();
    let inval = fs.inval_slot();
    let access = match options.allow {
        // SAFETY: geteuid cannot fail.
        Allow::OwnerAndRoot => Access::OwnerAndRoot(unsafe { libc::geteuid() }),
        Allow::Owner | Allow::All => Access::Kernel,
    };
    let root_not_roots = fs.root_owner().is_some_and(|owner| owner != (0, 0));
    let fs = Arc::new(fs);
    let (rings, why) = if agreed.flags & init::OVER_IO_URING != 0 {
        match uring::start(
            &dev,
            fs.clone(),
            access,
            uring::DEFAULT_DEPTH,
            serve::MAX_WRITE as usize,
            options.awake_window(),
        )
        .map_err(|e| other("io_uring", e))?
        {
            uring::Started::Rings(r) => (Some(r), String::new()),
            uring::Started::FellBack(e) => (None, format!("{e}")),
        }
    } else {
        (None, transport::why_not(options.uring, usable))
    };
    // On io_uring, /dev/fuse carries only FORGET and INTERRUPT: one worker,
    // and nothing to busy-poll.
    let n = if rings.is_some() {
        1
    } else {
        options.threads(single)
    };
    if rings.is_none() {
        if let Some(w) = options.poll_window(single) {
            let p = Poller::start(dev.as_fd(), w).map_err(|e| other("poller", e))?;
            let _ = poll.set(p);
        }
    }
    let workers = serve::start(&dev, fs.clone(), n, options.clone_fd && n > 1, access)
        .map_err(|e| other("workers", e))?;
    let transport = match &rings {
        Some(r) => Transport::Uring {
            queues: r.queues(),
            depth: r.depth(),
        },
        None => Transport::DevFuse { workers: n, why },
    };
    let notifier = Notifier::new(dev);
    start_invalidator(notifier.clone(), &inval).map_err(|e| other("invalidator", e))?;
    // The kernel makes the root's inode owned by uid and gid 0 and asks
    // for its attributes only when something looks at it; until then
    // (with default_permissions) it refuses a chmod, chown or utimens of
    // the root by its real, non-root owner with EPERM, judging by that
    // placeholder. Where the root is not root's (a user's daemon), one
    // stat from here, now that the workers answer, gives it the real ones.
    if root_not_roots {
        let _ = std::fs::metadata(at);
    }
    Ok((
        Serving {
            workers,
            rings,
            transport,
            fs,
            notifier,
            _watch: m.watch,
        },
        own,
    ))
}

/// Leave a session's threads running and its mount alone: a mount that
/// could not be unmounted (busy, or another mount sits on it), whose
/// threads would never end.
fn abandon(s: Serving) {
    std::mem::forget(s);
}

/// A thread that sends the kernel the invalidations handlers queue (a
/// handler must not send one itself: the kernel may hold the locks the
/// notification needs until that very handler replies) and those the
/// backend reports through the Vfs. It ends when the filesystem, which
/// holds the sender, is gone.
fn start_invalidator(notifier: Notifier, slot: &InvalSlot) -> io::Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<KernelInval>();
    std::thread::Builder::new()
        .name("dcache-inval".into())
        .spawn(move || {
            for msg in rx {
                // ENOENT: the kernel held nothing of that name or node.
                let _ = match msg {
                    KernelInval::Entry { parent, name } => notifier.inval_entry(parent, &name),
                    // Offset 0, length 0: the attributes and every cached
                    // page.
                    KernelInval::Inode { node } => notifier.inval_inode(node, 0, 0),
                    KernelInval::Barrier(b) => {
                        b.pass();
                        Ok(())
                    }
                };
            }
        })?;
    let _ = slot.set(std::sync::Mutex::new(tx));
    Ok(())
}

/// A backend mounted by this process (worker threads in the background).
/// Dropping it unmounts.
pub struct Mounted {
    session: Option<Serving>,
    transport: Transport,
    own: OwnMount,
    report: Arc<OnceLock<Report>>,
    poll: Arc<OnceLock<Arc<Poller>>>,
    pruner: Pruner,
    path: PathBuf,
}

impl Mounted {
    /// The mount point (canonical).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which transport carries the requests.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The busy-poller, if this mount polls (`poll_us`, [`super::poll`]).
    pub fn poller(&self) -> Option<&Arc<Poller>> {
        self.poll.get()
    }

    /// The counts now.
    pub fn stats(&self) -> Report {
        self.pruner.stats.report()
    }

    /// READ and WRITE requests the daemon answered so far (files with
    /// passthrough I/O make none).
    pub fn data_requests(&self) -> u64 {
        self.pruner.stats.data_requests()
    }

    /// OPEN, OPENDIR, FLUSH, RELEASE and RELEASEDIR requests the daemon
    /// saw so far (the kernel stops most once told it need not send them).
    pub fn open_requests(&self) -> u64 {
        self.pruner.stats.open_requests()
    }

    /// FLUSH requests the daemon saw so far (none for files whose flush
    /// does nothing: they are opened with FOPEN_NOFLUSH).
    pub fn flush_requests(&self) -> u64 {
        self.pruner.stats.flush_requests()
    }

    /// GETXATTR, LISTXATTR, SETXATTR and REMOVEXATTR requests the daemon
    /// saw so far.
    pub fn xattr_requests(&self) -> u64 {
        self.pruner.stats.xattr_requests()
    }

    /// Backing files registered with the kernel now (passthrough I/O).
    pub fn backing_files(&self) -> usize {
        self.session.as_ref().map_or(0, |s| s.fs.backing_files())
    }

    /// What the mount uses now (descriptors, memory, cache counts).
    pub fn usage(&self) -> Usage {
        self.pruner.usage()
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
        let Some(s) = self.session.take() else {
            return Ok(());
        };
        match self.own.unmount(false) {
            Ok(()) => s.join(),
            Err(e) => {
                // Still mounted: joining would wait forever.
                abandon(s);
                Err(e)
            }
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Mount `backend` on `mountpoint` in this process with `options`, behind
/// a dentry cache ([`Vfs`]); FUSE worker threads serve it in the
/// background until the returned [`Mounted`] is unmounted or dropped.
///
/// Needs `/dev/fuse` and the right to mount (root, or `fusermount3`).
///
/// ```no_run
/// use std::path::Path;
/// use std::sync::Arc;
/// use dcache::fs::memfs::MemFs;
/// use dcache_fuse::{mount, MountOptions};
///
/// let fs = Arc::new(MemFs::new());
/// fs.write_file("hello", b"world\n")?;
/// let m = mount(fs, Path::new("/mnt/mem"), &MountOptions::default())?;
/// assert_eq!(std::fs::read(m.path().join("hello"))?, b"world\n");
/// let report = m.unmount()?;
/// println!("{} nodes still referenced", report.referenced);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn mount(
    backend: Arc<dyn FileSystem>,
    mountpoint: &Path,
    options: &MountOptions,
) -> io::Result<Mounted> {
    let vfs = Vfs::with_config(backend, options.vfs_config())
        .map_err(|e| io::Error::from_raw_os_error(e.raw()))?;
    let counters = vfs.counters();
    let backend = vfs.backend().clone();
    let fs = DcacheFs::new(vfs, fs_config(options, false, false));
    let report = fs.report_slot();
    let stats = fs.stats();
    let poll = fs.poll_slot();
    // Before mounting: afterwards a lookup of the mount point would wait
    // for workers that do not run yet.
    let path = std::fs::canonicalize(mountpoint)?;
    let (session, own) =
        start(fs, &path, options, &options.mount_spec("dcache"), false).map_err(|e| match e {
            StartError::Mount(e) => e,
            StartError::Other(m) => io::Error::other(m),
        })?;
    Ok(Mounted {
        own,
        transport: session.transport.clone(),
        pruner: Pruner {
            notifier: session.notifier.clone(),
            mountpoint: path.clone(),
            stats,
            counters,
            backend,
        },
        session: Some(session),
        report,
        poll,
        path,
    })
}
