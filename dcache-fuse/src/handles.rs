//! Open files: a FUSE file handle is the address of the open file itself
//! (an [`OpenFile`]'s split-layout `struct file`, with its dentry reference
//! and backend handle), holding one reference to it. No table and no lock:
//! the kernel hands the number back on every read, write and release, and
//! `release` takes the reference back exactly once.
//!
//! The file's lifetime parameter is erased: an `OpenFile` borrows the
//! `Vfs`, which the mount's filesystem object owns and drops only after the
//! session ends. Handles the kernel never released (it releases every file
//! before the superblock goes, so only an aborted connection leaves any)
//! are leaked rather than closed against a dead Vfs.

use std::mem::ManuallyDrop;

use crate::sync::{Arc, Ordering};
use dcache::OpenFile;

use super::stats::Stats;

/// A file handle named by a request from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fh(u64);

impl Fh {
    /// The file handle a request names.
    ///
    /// # Safety
    /// `fh` was returned by `Handles::insert` of this mount (the kernel
    /// sends back only handles it got from open or create), it has not been
    /// released, and it is not released while this request runs: the
    /// kernel sends RELEASE once, after every other request on the handle.
    /// A caller standing in for the kernel (tests) keeps the same rules.
    pub unsafe fn from_kernel(fh: u64) -> Fh {
        Fh(fh)
    }

    /// The number sent to the kernel.
    pub fn raw(self) -> u64 {
        self.0
    }
}

/// Makes and takes back handles, counting them for the unmount report.
pub(crate) struct Handles {
    stats: Arc<Stats>,
}

impl Handles {
    /// No handles yet; counts go to `stats`.
    pub fn new(stats: Arc<Stats>) -> Handles {
        Handles { stats }
    }

    /// Give `f`'s reference to a new handle and return it.
    pub fn insert(&self, f: OpenFile<'_>) -> Fh {
        // Relaxed: a statistic (stats.rs).
        self.stats.open_files.fetch_add(1, Ordering::Relaxed);
        Fh(f.into_raw() as u64)
    }

    /// The open file behind handle `fh`, for the length of its request: the
    /// handle's own reference, borrowed (never dropped; clone it for one of
    /// your own).
    ///
    /// # Safety
    /// `'v` must not outlive the `Vfs` the file was opened on (the mount's
    /// filesystem object owns both and drops the Vfs last), and the result
    /// must not be taken out of its `ManuallyDrop`.
    pub unsafe fn get<'v>(&self, fh: Fh) -> ManuallyDrop<OpenFile<'v>> {
        // SAFETY: `Fh`'s contract: the handle's reference is alive until
        // `remove`, which cannot run while this request does; ManuallyDrop
        // keeps this copy from giving that reference up.
        ManuallyDrop::new(unsafe { OpenFile::from_raw(fh.0 as *mut _) })
    }

    /// Take handle `fh` back (RELEASE); closing or dropping the result
    /// gives up the handle's reference.
    ///
    /// # Safety
    /// As for `get`.
    pub unsafe fn remove<'v>(&self, fh: Fh) -> OpenFile<'v> {
        // Relaxed: see insert.
        self.stats.open_files.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: made by `into_raw` in insert and, by `Fh`'s contract,
        // taken back once, by the RELEASE.
        unsafe { OpenFile::from_raw(fh.0 as *mut _) }
    }
}
