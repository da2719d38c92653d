//! Pruning asks the kernel to drop the cached entries of every name in
//! the root directory (FUSE_NOTIFY_INVAL_ENTRY, which prunes the whole
//! subtree under a directory); the kernel forgets every node nobody uses,
//! and we wait until the forgets stop arriving. What is still referenced
//! after that is in use (an open file, a working directory) or leaked.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dcache::vfs::Counters;

use crate::stats::{Report, Stats};
use crate::usage::Usage;
use crate::wire::abi::ROOT_ID;
use crate::wire::dev::Notifier;

/// Makes the kernel forget what it caches but does not use.
pub(crate) struct Pruner {
    pub(super) notifier: Notifier,
    pub(super) mountpoint: PathBuf,
    pub(super) stats: Arc<Stats>,
    /// The dentry cache's counters, for [`Pruner::usage`].
    pub(super) counters: Arc<Counters>,
    /// The backend, whose own state line (`FileSystem::status`: a shared
    /// volume's failures by cause) follows the usage line.
    pub(super) backend: Arc<dyn dcache::FileSystem>,
}

impl Pruner {
    /// What the mount uses now.
    pub fn usage(&self) -> Usage {
        Usage::now(&self.counters, &self.stats.report())
    }

    /// The backend's own state line, if it has one.
    pub fn backend_status(&self) -> Option<String> {
        self.backend.status()
    }

    /// Invalidate every root entry, wait (at most ~2 s) for the forgets to
    /// settle, and return the counts then.
    pub fn prune(&self) -> Report {
        // Listing the root goes through the mount (our own workers answer).
        if let Ok(rd) = std::fs::read_dir(&self.mountpoint) {
            let names: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
            for n in names {
                // ENOENT: the kernel had nothing cached under that name.
                let _ = self.notifier.inval_entry(
                    ROOT_ID,
                    std::os::unix::ffi::OsStrExt::as_bytes(n.as_os_str()),
                );
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
