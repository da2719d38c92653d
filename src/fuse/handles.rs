//! Open files: a FUSE file handle is the address of a boxed
//! [`OpenFile`], which holds its own dentry reference and backend handle.
//! No table and no lock: the kernel hands the number back on every read,
//! write and release, and `release` re-owns the box exactly once.
//!
//! The box's lifetime parameter is erased to `'static`: an `OpenFile`
//! borrows the `Vfs`, which the mount's filesystem object owns and drops
//! only after the session ends. Handles the kernel never released (it
//! releases every file before the superblock goes, so only an aborted
//! connection leaves any) are leaked rather than closed against a dead Vfs.

use crate::sync::{Arc, Ordering};
use crate::OpenFile;

use super::stats::Stats;

/// Makes and takes back handles, counting them for the unmount report.
pub struct Handles {
    stats: Arc<Stats>,
}

impl Handles {
    pub fn new(stats: Arc<Stats>) -> Handles {
        Handles { stats }
    }

    /// Box `f` and return its handle number.
    pub fn insert(&self, f: OpenFile<'_>) -> u64 {
        // Relaxed: a statistic (stats.rs).
        self.stats.open_files.fetch_add(1, Ordering::Relaxed);
        let p = Box::into_raw(Box::new(f));
        p as u64
    }

    /// The open file behind handle `fh`.
    ///
    /// # Safety
    /// `fh` came from `insert` on this `Handles`, has not been removed, and
    /// is not removed while the returned borrow lives (the kernel sends no
    /// release while a read, write or flush on the handle is in flight).
    /// `'v` must not outlive the `Vfs` the file was opened on.
    pub unsafe fn get<'v>(&self, fh: u64) -> &OpenFile<'v> {
        // SAFETY: caller's contract; the box is alive until `remove`.
        unsafe { &*(fh as *const OpenFile<'v>) }
    }

    /// Take handle `fh` back (release); dropping the result closes it.
    ///
    /// # Safety
    /// As for `get`, and each handle is removed once.
    pub unsafe fn remove<'v>(&self, fh: u64) -> OpenFile<'v> {
        // Relaxed: see insert.
        self.stats.open_files.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: made by Box::into_raw in insert, re-owned once.
        *unsafe { Box::from_raw(fh as *mut OpenFile<'v>) }
    }
}
