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
//! **Whose mount.** Right after mounting, the daemon records the new
//! mount's device (`major:minor` in /proc/self/mountinfo) and from then on
//! unmounts only a mount with that device, and only while it is the top
//! one on its path (`OwnMount`). fuser's own unmount (when its session or
//! `BackgroundSession` is dropped) is never let run: it unmounts by path,
//! and fuser 0.18's "already unmounted?" test (a poll of /dev/fuse) takes
//! POLLERR, which an unmounted connection returns, for "still mounted" —
//! so after `fusermount3 -u` of a mount stacked on another dcache mount,
//! the upper daemon would unmount the lower one too.
//!
//! **Before mounting** the mount point is checked (`preflight`): it must
//! exist and be a directory (a mount on a file succeeds but then answers
//! every access with EIO). A mount point that answers ENOTCONN is a FUSE
//! mount whose daemon died; one of ours (type `fuse.dcache`) is detached
//! and the new mount goes in its place, any other is refused with the
//! command that removes it.
//!
//! **Pruning** asks the kernel to drop the cached entries of every name in
//! the root directory (FUSE_NOTIFY_INVAL_ENTRY, which prunes the whole
//! subtree under a directory); the kernel forgets every node nobody uses,
//! and we wait until the forgets stop arriving. What is still referenced
//! after that is in use (an open file, a working directory) or leaked.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, INodeNo, Notifier, Session};

use dcache::errno::Errno;
use dcache::fs::FileSystem;
use dcache::Vfs;

use super::backend::Backend;
use super::fs::{DcacheFs, FsConfig, InvalSlot, KernelInval};
use super::options::{MountOptions, DEFAULT_SUBTYPE};
use super::poll::Poller;
use super::stats::{Report, Stats};

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
}

fn fs_config(options: &MountOptions, default_direct_io: bool, log: bool) -> FsConfig {
    FsConfig {
        timeouts: options.timeouts,
        readdirplus: options.readdirplus,
        direct_io: options.direct_io.unwrap_or(default_direct_io),
        check_permissions: !options.default_permissions,
        log,
    }
}

/// Mount, serve until unmounted, print the report. Returns the report.
///
/// Without `-f` the process forks first (after checking the mount point)
/// and the child builds the backend, mounts and serves, while the parent
/// waits until the child reports the mount made (exit 0) or failed (the
/// child's message on stderr, exit 1). Building the backend in the child
/// lets it start threads (dcache-etcd's runtime and watch): `fork` keeps
/// only the calling thread.
pub fn serve(req: &ServeRequest) -> Result<Report, String> {
    let subtype = req.options.subtype.as_deref().unwrap_or(DEFAULT_SUBTYPE);
    let at = preflight(&req.mountpoint, subtype)?;
    // Before any thread exists, so that every thread inherits the mask.
    let signals = signals::block()?;
    let ready = if req.foreground {
        None
    } else {
        Some(daemon::detach()?)
    };
    let started = start_serving(req, &at);
    if let Some(r) = ready {
        // The parent exits now: 0, or 1 with the message.
        r.tell(started.as_ref().map(|_| ()).map_err(|m| m.as_str()));
    }
    let (session, own, report, stats) = started?;
    let pruner = Pruner {
        notifier: session.notifier(),
        mountpoint: at,
        stats,
    };
    signals::spawn_waiter(signals, own, pruner)?;
    join(session).map_err(|e| format!("session: {e}"))?;
    report
        .get()
        .copied()
        .ok_or_else(|| "session ended without a report".to_string())
}

type Started = (
    BackgroundSession,
    OwnMount,
    Arc<OnceLock<Report>>,
    Arc<Stats>,
);

/// Build the backend, mount it on `at` and start the workers: everything
/// `serve` does in the process that serves.
fn start_serving(req: &ServeRequest, at: &Path) -> Result<Started, String> {
    let backend = req.backend.build()?;
    let vfs = Vfs::new(backend).map_err(|e| format!("backend root: {e}"))?;
    let cfg = fs_config(&req.options, req.backend.wants_direct_io(), true);
    let fs = DcacheFs::new(vfs, cfg);
    let report = fs.report_slot();
    let stats = fs.stats();
    let poll = fs.poll_slot();
    let inval = fs.inval_slot();
    let config = req
        .options
        .fuser_config(req.single_threaded, &req.backend.fsname());
    let session = Session::new(fs, at, &config)
        .map_err(|e| format!("cannot mount on {}: {e}", req.mountpoint.display()))?;
    let own = OwnMount::record(at)
        .map_err(|e| format!("cannot find our mount on {}: {e}", at.display()))?;
    if let Some(w) = req.options.poll_window(req.single_threaded) {
        let p = Poller::start(session.as_fd(), w).map_err(|e| format!("poller: {e}"))?;
        let _ = poll.set(p);
    }
    let session = session.spawn().map_err(|e| format!("session: {e}"))?;
    start_invalidator(session.notifier(), &inval).map_err(|e| format!("invalidator: {e}"))?;
    Ok((session, own, report, stats))
}

/// Wait for a session's threads to finish, without ever letting fuser
/// unmount (see the module docs): the `BackgroundSession` is not dropped,
/// so fuser's `Mount` in it never runs its unmount-by-path. Its
/// /dev/fuse descriptor stays open (a connection that is already gone).
fn join(bg: BackgroundSession) -> io::Result<()> {
    let bg = ManuallyDrop::new(bg);
    // SAFETY: `guard` is a public field, read out exactly once; `bg` is
    // never used or dropped afterwards, so nothing is dropped twice (its
    // other fields are leaked on purpose).
    let guard = unsafe { std::ptr::read(&bg.guard) };
    guard
        .join()
        .map_err(|_| io::Error::other("session thread panicked"))?
}

/// Leave a session's threads running and its mount alone: a mount that
/// could not be unmounted (busy, or another mount sits on it), whose
/// threads would never end.
fn abandon(bg: BackgroundSession) {
    let _ = ManuallyDrop::new(bg);
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
                    KernelInval::Entry { parent, name } => {
                        notifier.inval_entry(INodeNo(parent), std::ffi::OsStr::from_bytes(&name))
                    }
                    // Offset 0, length 0: the attributes and every cached
                    // page.
                    KernelInval::Inode { node } => notifier.inval_inode(INodeNo(node), 0, 0),
                };
            }
        })?;
    let _ = slot.set(std::sync::Mutex::new(tx));
    Ok(())
}

/// Makes the kernel forget what it caches but does not use.
pub(crate) struct Pruner {
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
        let Some(s) = self.session.take() else {
            return Ok(());
        };
        match self.own.unmount(false) {
            Ok(()) => join(s),
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
    let vfs = Vfs::new(backend).map_err(|e| io::Error::from_raw_os_error(e.raw()))?;
    let fs = DcacheFs::new(vfs, fs_config(options, false, false));
    let report = fs.report_slot();
    let stats = fs.stats();
    let poll = fs.poll_slot();
    let inval = fs.inval_slot();
    let config = options.fuser_config(false, "dcache");
    // Before mounting: afterwards a lookup of the mount point would wait
    // for workers that do not run yet.
    let path = std::fs::canonicalize(mountpoint)?;
    let session = Session::new(fs, &path, &config)?;
    let own = OwnMount::record(&path)?;
    if let Some(w) = options.poll_window(false) {
        let _ = poll.set(Poller::start(session.as_fd(), w)?);
    }
    let session = session.spawn()?;
    start_invalidator(session.notifier(), &inval)?;
    Ok(Mounted {
        own,
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

/// /proc/self/mountinfo, the fields we need.
mod mountinfo {
    use std::ffi::OsString;
    use std::io;
    use std::os::unix::ffi::OsStringExt;
    use std::path::{Path, PathBuf};

    #[derive(Clone, Debug)]
    pub struct Entry {
        pub id: u64,
        pub parent: u64,
        pub dev: (u32, u32),
        pub at: PathBuf,
        pub fstype: String,
    }

    pub fn read() -> io::Result<Vec<Entry>> {
        Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
    }

    /// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`
    pub fn parse(text: &str) -> Vec<Entry> {
        text.lines().filter_map(entry).collect()
    }

    fn entry(line: &str) -> Option<Entry> {
        let f: Vec<&str> = line.split(' ').collect();
        let (major, minor) = f.get(2)?.split_once(':')?;
        let sep = f.iter().position(|&x| x == "-")?;
        Some(Entry {
            id: f.first()?.parse().ok()?,
            parent: f.get(1)?.parse().ok()?,
            dev: (major.parse().ok()?, minor.parse().ok()?),
            at: PathBuf::from(unescape(f.get(4)?)),
            fstype: unescape(f.get(sep + 1)?).to_string_lossy().into_owned(),
        })
    }

    /// The kernel writes space, tab, newline and backslash as `\ooo`.
    fn unescape(s: &str) -> OsString {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let oct = b
                .get(i + 1..i + 4)
                .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
            match oct {
                Some(o) if b[i] == b'\\' => {
                    out.push(o.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                    i += 4;
                }
                _ => {
                    out.push(b[i]);
                    i += 1;
                }
            }
        }
        OsString::from_vec(out)
    }

    /// The top mount at `at`: the one no other mount at `at` is stacked on.
    pub fn top<'a>(all: &'a [Entry], at: &Path) -> Option<&'a Entry> {
        let here: Vec<&Entry> = all.iter().filter(|m| m.at == at).collect();
        here.iter()
            .rev()
            .find(|m| !here.iter().any(|o| o.parent == m.id))
            .copied()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn stacked_mounts_and_escapes() {
            let text = "\
22 1 0:21 / / rw - ext4 /dev/root rw
42 22 0:39 / /tmp/a\\040b rw,nosuid - fuse.dcache dcache-mem rw
43 42 0:40 / /tmp/a\\040b rw,nosuid - fuse dcache-mem rw
";
            let all = parse(text);
            assert_eq!(all.len(), 3);
            let at = Path::new("/tmp/a b");
            assert_eq!(all[1].at, at);
            assert_eq!(all[1].fstype, "fuse.dcache");
            assert_eq!(top(&all, at).unwrap().dev, (0, 40));
            assert_eq!(top(&all, Path::new("/")).unwrap().id, 22);
            assert!(top(&all, Path::new("/tmp")).is_none());
        }
    }
}

mod signals {
    use super::{OwnMount, Pruner};

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
    pub fn spawn_waiter(set: Blocked, own: OwnMount, pruner: Pruner) -> Result<(), String> {
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
                    pruner.prune();
                    match own.unmount(true) {
                        // Another mount sits on ours: keep serving, and
                        // let the next signal try again.
                        Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => {
                            eprintln!("dcache: cannot unmount: {e}");
                        }
                        Err(e) => {
                            eprintln!("dcache: cannot unmount: {e}");
                            first = false;
                        }
                        Ok(()) => first = false,
                    }
                }
            })
            .map(|_| ())
            .map_err(|e| format!("signal thread: {e}"))
    }
}

mod daemon {
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
}
