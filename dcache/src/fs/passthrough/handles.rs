//! Open file handles: `fh` -> the descriptor `open` reopened for I/O.
//!
//! Same shape as the inode table: a lock held only for map work, entries
//! shared through `Arc` so that a `release` racing a `read` closes the fd
//! after the read finishes, never under it.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::RwLock;

use crate::errno::{Errno, Result};
use crate::fs::Ino;

use super::sys;
use crate::sync::{Arc, AtomicU64, Ordering, RwLockExt};

pub(crate) struct Handle {
    ino: Ino,
    fd: OwnedFd,
    /// Whether closing the host file would reach its filesystem's flush
    /// (`sys::close_flushes`), read once at open.
    flushes: bool,
}

impl Handle {
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn flushes(&self) -> bool {
        self.flushes
    }
}

pub(crate) struct HandleTable {
    map: RwLock<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
}

impl HandleTable {
    pub(crate) fn new() -> HandleTable {
        HandleTable {
            map: RwLock::new(HashMap::new()),
            // 0 is what a backend without handles returns; never hand it out.
            next_fh: AtomicU64::new(1),
        }
    }

    pub(crate) fn insert(&self, ino: Ino, fd: OwnedFd) -> u64 {
        // Relaxed: only distinctness matters; the handle is published through
        // the map's lock.
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let flushes = sys::close_flushes(fd.as_fd());
        let h = Arc::new(Handle { ino, fd, flushes });
        self.map.write_unpoisoned().insert(fh, h);
        fh
    }

    /// The handle `fh`, which must have been opened on `ino`; EBADF otherwise.
    pub(crate) fn get(&self, ino: Ino, fh: u64) -> Result<Arc<Handle>> {
        let map = self.map.read_unpoisoned();
        match map.get(&fh) {
            Some(h) if h.ino == ino => Ok(h.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    pub(crate) fn remove(&self, ino: Ino, fh: u64) -> Result<()> {
        let removed = {
            let mut map = self.map.write_unpoisoned();
            match map.get(&fh) {
                Some(h) if h.ino == ino => map.remove(&fh),
                _ => return Err(Errno::EBADF),
            }
        };
        // Closed here, outside the lock (or later by an in-flight user).
        drop(removed);
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.map.read_unpoisoned().len()
    }
}
