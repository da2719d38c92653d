//! A memfs tree (or a host directory, through the passthrough backend)
//! served through the daemon on a fresh temporary directory,
//! for integration tests and benchmarks that want to reach dcache through
//! the kernel (`stat(2)` on the returned path goes kernel -> FUSE -> Vfs).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sync::{AtomicUsize, Ordering};
use dcache::fs::memfs::MemFs;
use dcache::fs::passthrough::Passthrough;

use super::options::MountOptions;
use super::session::{mount, Mounted};
use super::stats::Report;

/// Can this process mount FUSE filesystems? `Err` says why not.
pub fn available() -> Result<(), String> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Err(format!("/dev/fuse: {e}"));
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let helper = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()));
    if !root && !helper {
        return Err("not root and no fusermount3 in PATH".into());
    }
    Ok(())
}

/// A new empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> io::Result<PathBuf> {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: only uniqueness matters; create_dir settles collisions.
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("dcache-{tag}-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// The mount options of `dcache bench`'s FUSE targets: `fuse` sets every
/// timeout to 0, so each `stat` reaches the daemon; `fuse-cached` keeps
/// libfuse's defaults (1 s for names and attributes). Both leave
/// permission checks to the daemon as libfuse's examples do (no
/// `default_permissions`, which with timeouts of 0 would add a GETATTR for
/// every directory on the path). `None` for any other target.
pub fn target_options(target: &str) -> Option<MountOptions> {
    let mut o = MountOptions {
        default_permissions: false,
        ..MountOptions::default()
    };
    match target {
        "fuse" => o.timeouts = super::options::Timeouts::NONE,
        "fuse-cached" => {}
        _ => return None,
    }
    Some(o)
}

/// A memfs tree for bench target `target` (`fuse` or `fuse-cached`), filled
/// by `populate` and mounted through the daemon in this process: point the
/// kernel-target workload code at [`TempMount::path`]. `Err` is a one-line
/// reason (FUSE unusable here, or not a FUSE target).
pub fn mount_target(target: &str, populate: impl FnOnce(&MemFs)) -> Result<TempMount, String> {
    let opts = target_options(target).ok_or_else(|| format!("{target} is not a FUSE target"))?;
    available().map_err(|why| format!("{target} target: FUSE unusable here ({why})"))?;
    TempMount::memfs(&opts, populate).map_err(|e| format!("cannot mount a FUSE target: {e}"))
}

/// The host directory `src` served by the passthrough backend, mounted
/// with `opts` (`-o` spellings) on a new temporary directory.
pub fn mount_passthrough(src: &Path, opts: &[&str]) -> io::Result<Mounted> {
    let o = MountOptions::parse(opts).map_err(io::Error::other)?;
    let fs = Passthrough::new(src).map_err(|e| io::Error::from_raw_os_error(e.raw()))?;
    mount(Arc::new(fs), &temp_dir("mnt")?, &o)
}

/// A memfs mounted on a temporary directory. Dropping it unmounts and
/// removes the directory.
pub struct TempMount {
    mounted: Option<Mounted>,
    dir: PathBuf,
}

impl TempMount {
    /// Mount a memfs that `populate` filled first (through its own helpers,
    /// so nothing is cached yet).
    pub fn memfs(options: &MountOptions, populate: impl FnOnce(&MemFs)) -> io::Result<TempMount> {
        let fs = MemFs::new();
        populate(&fs);
        let dir = temp_dir("mnt")?;
        match mount(Arc::new(fs), &dir, options) {
            Ok(m) => Ok(TempMount {
                mounted: Some(m),
                dir,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Which transport carries the mount's requests.
    pub fn transport(&self) -> Option<&super::session::Transport> {
        self.mounted.as_ref().map(|m| m.transport())
    }

    /// The mount's busy-poller, if it polls.
    pub fn poller(&self) -> Option<&std::sync::Arc<super::poll::Poller>> {
        self.mounted.as_ref().and_then(|m| m.poller())
    }

    /// The daemon's counts now.
    pub fn report_now(&self) -> Option<Report> {
        self.mounted.as_ref().map(|m| m.stats())
    }

    /// OPEN, OPENDIR, FLUSH, RELEASE and RELEASEDIR requests so far.
    pub fn open_requests(&self) -> u64 {
        self.mounted.as_ref().map_or(0, |m| m.open_requests())
    }

    /// Unmount and return the daemon's report.
    pub fn unmount(mut self) -> io::Result<Report> {
        let r = match self.mounted.take() {
            Some(m) => m.unmount(),
            None => Err(io::Error::other("not mounted")),
        };
        let _ = std::fs::remove_dir(&self.dir);
        r
    }
}

impl Drop for TempMount {
    fn drop(&mut self) {
        if let Some(m) = self.mounted.take() {
            drop(m);
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// FUSE over io_uring switched on (`enable_uring` Y) while any of these
/// lives in this process; the first one saves the parameter's value and
/// the last one puts it back, so tests running side by side neither see
/// it flip nor leave it changed. Switching it on is a change to the whole
/// machine, so [`enable_uring`] makes it only where the run asked for it
/// ([`URING_OPT_IN`]).
pub struct UringEnabled(());

/// Saved value and holders of [`UringEnabled`].
static URING_HOLDERS: crate::sync::Mutex<(usize, Option<String>)> =
    crate::sync::Mutex::new((0, None));

/// [`enable_uring`] for test `test`, or one `SKIPPED` line (through
/// [`skipped`]) saying why not.
pub fn uring_or_skip(test: &str) -> Option<UringEnabled> {
    match enable_uring() {
        Ok(on) => Some(on),
        Err(why) => {
            skipped(format_args!(
                "{test}: FUSE over io_uring unavailable here ({why})"
            ));
            None
        }
    }
}

/// The variable that lets tests switch the system-wide `enable_uring` on
/// for their run (`1`); `CI` set does too. `.ci/run` and
/// `scripts/uring-tests.sh` set it. Without either, a test that needs the
/// parameter and finds it off skips rather than change the machine.
pub const URING_OPT_IN: &str = "DCACHE_TEST_ENABLE_URING";

/// Whether this run asked for `enable_uring` to be switched on
/// ([`URING_OPT_IN`] is `1`, or `CI` is set, as the other CI-only
/// behaviours of the tests read it).
fn uring_opted_in() -> bool {
    std::env::var_os(URING_OPT_IN).is_some_and(|v| v == "1") || std::env::var_os("CI").is_some()
}

/// Switch FUSE over io_uring on for this process's mounts (needs root and
/// a kernel with the parameter: 6.14+, `CONFIG_FUSE_IO_URING`), and put it
/// back when the last [`UringEnabled`] goes. Where it is off, only with
/// [`URING_OPT_IN`] or under CI: a plain `cargo test` does not change a
/// system-wide setting the user did not ask to change. `Err` is a
/// one-line reason it is unavailable here.
pub fn enable_uring() -> Result<UringEnabled, String> {
    use super::wire::uring::{usable, ENABLE_PARAM};
    available()?;
    let was = std::fs::read_to_string(ENABLE_PARAM).map_err(|e| {
        format!("{ENABLE_PARAM}: {e} (a kernel before 6.14, or without CONFIG_FUSE_IO_URING)")
    })?;
    if !usable() {
        return Err("io_uring rings cannot be made here".into());
    }
    let mut h = URING_HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
    // The first holder switches it on if it is off (found on: nothing to
    // put back, so nothing is written after).
    if h.0 == 0 && was.trim() != "Y" {
        if !uring_opted_in() {
            return Err(format!(
                "{ENABLE_PARAM} is {}; {URING_OPT_IN}=1 lets the tests switch it on \
                 for their run and put it back",
                was.trim()
            ));
        }
        std::fs::write(ENABLE_PARAM, "Y").map_err(|e| format!("cannot set {ENABLE_PARAM}: {e}"))?;
        h.1 = Some(was);
    }
    h.0 += 1;
    Ok(UringEnabled(()))
}

impl Drop for UringEnabled {
    fn drop(&mut self) {
        let mut h = URING_HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
        h.0 -= 1;
        if h.0 == 0 {
            if let Some(was) = h.1.take() {
                let _ = std::fs::write(super::wire::uring::ENABLE_PARAM, was.trim());
            }
        }
    }
}

/// Print `SKIPPED <what>` where the person running the tests sees it.
///
/// libtest captures what a passing test prints through `print!` and
/// `eprint!` (and so `println!("SKIPPED ...")` never showed in a plain
/// `cargo test`), but not what is written to the process's standard error
/// through [`std::io::stderr`] directly: the line goes out as it is
/// written, beside libtest's own `test ... ok` lines. (Were a libtest to
/// capture that too, `cargo test -- --nocapture` shows every line.)
pub fn skipped(what: impl std::fmt::Display) {
    use std::io::Write;
    let line = format!("SKIPPED {what}\n");
    // One write, so lines of tests running side by side do not interleave.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
