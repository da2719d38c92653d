//! memfs's open handles, off the tree lock.
//!
//! Handles live in shards, one per thread up to the number of CPUs (as
//! Linux keeps a descriptor table per task and `struct file`s in per-CPU
//! caches): an open or a release locks only the calling thread's shard
//! (or, for a release, the shard the handle was opened in), a mutex on a
//! line pair no other thread writes while it has a shard of its own; the
//! shard's tables are on line pairs of their own too (`shard_tables.rs`).
//!
//! A shard also keeps a *pin* per inode it has opened: the inode's type
//! and how many of the shard's handles are open on it. A pin at zero opens
//! stays (idle) so that the next open of the same inode from the same
//! thread needs neither the tree lock nor any other shared write: a pin
//! says the inode exists, because pins are only made under the tree lock
//! after looking the inode up, and the only way an inode goes (its last
//! name and its last handle gone, [`Handles::busy_or_forget`] under the
//! tree's write lock) removes every idle pin first.
//!
//! An inode with no name left but open handles (an *orphan*) is freed by
//! the release that closes its last handle. A release does not know the
//! link count (it lives under the tree lock), so it asks the tree only
//! while some orphan exists ([`Handles::orphans`]); see
//! [`Handles::release`] for why it cannot miss one.

use std::collections::HashMap;

use super::shard_tables::{Pin, Pins, Slots};
use crate::cache_aligned::{CacheAligned, PairAligned};
use crate::errno::{Errno, Result};
use crate::fs::{FileType, Ino};
use crate::sync::{AtomicUsize, LockExt, Mutex, Ordering};

/// What an open handle may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handle {
    pub ino: Ino,
    pub read: bool,
    pub write: bool,
    pub append: bool,
}

/// The handle `open(2)` with `flags` gives an inode of type `kind`, after
/// the type checks (tmpfs's errnos).
pub(crate) fn handle_for(ino: Ino, kind: FileType, flags: i32) -> Result<Handle> {
    let path_only = flags & libc::O_PATH != 0;
    let acc = flags & libc::O_ACCMODE;
    let (read, write) = match acc {
        _ if path_only => (false, false),
        libc::O_RDONLY => (true, false),
        libc::O_WRONLY => (false, true),
        libc::O_RDWR => (true, true),
        // Access mode 3: permission checked for both, usable for neither.
        _ => (false, false),
    };
    let trunc = !path_only && flags & libc::O_TRUNC != 0;
    if flags & libc::O_DIRECTORY != 0 && kind != FileType::Directory {
        return Err(Errno::ENOTDIR);
    }
    if !path_only {
        match kind {
            FileType::Symlink => return Err(Errno::ELOOP),
            FileType::Directory if acc != libc::O_RDONLY || trunc => return Err(Errno::EISDIR),
            FileType::Socket => return Err(Errno(libc::ENXIO)),
            _ => {}
        }
    }
    Ok(Handle {
        ino,
        read,
        write,
        append: flags & libc::O_APPEND != 0,
    })
}

/// Bits of a handle number that name its shard.
const SHARD_BITS: u32 = 8;
/// The most shards (a handle number has room for this many).
const MAX_SHARDS: usize = 1 << SHARD_BITS;
/// Bits that name the slot within the shard (above the shard bits; the
/// generation is the top 32 bits).
const SLOT_BITS: u32 = 32 - SHARD_BITS;
/// Idle pins a shard keeps before it drops them all.
const IDLE_MAX: usize = 64;

const _: () = assert!(SHARD_BITS + SLOT_BITS == 32);
const _: () = assert!(MAX_SHARDS == 256); // crate::shard's most

#[derive(Debug)]
struct Shard {
    slots: Slots<Handle>,
    pins: Pins,
    /// Pins with no open handle.
    idle: usize,
    /// Open handles.
    open: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            slots: Slots::new(),
            pins: Pins::new(),
            idle: 0,
            open: 0,
        }
    }
}

impl Shard {
    /// Open one more handle on `ino` under the pin there is: its number's
    /// slot and generation.
    fn open(&mut self, ino: Ino, flags: i32) -> Result<(u32, u32)> {
        self.open_if_pinned(ino, flags)?.ok_or(Errno::EIO)
    }

    /// As `open`, `Ok(None)` when the shard does not pin `ino`.
    fn open_if_pinned(&mut self, ino: Ino, flags: i32) -> Result<Option<(u32, u32)>> {
        let Some(pin) = self.pins.get_mut(ino) else {
            return Ok(None);
        };
        let handle = handle_for(ino, pin.kind, flags)?;
        if pin.opens == u32::MAX {
            return Err(Errno::EMFILE);
        }
        let Some((slot, gen)) = self.slots.take(1 << SLOT_BITS, handle) else {
            return Err(Errno::EMFILE);
        };
        if pin.opens == 0 {
            self.idle -= 1;
        }
        pin.opens += 1;
        self.open += 1;
        Ok(Some((slot, gen)))
    }

    fn get(&self, ino: Ino, slot: usize, gen: u32) -> Result<Handle> {
        match self.slots.get(slot) {
            Some(s) if s.gen == gen => match s.handle {
                Some(h) if h.ino == ino => Ok(h),
                _ => Err(Errno::EBADF),
            },
            _ => Err(Errno::EBADF),
        }
    }
}

/// The handle table: see the module docs.
pub(crate) struct Handles {
    shards: Box<[PairAligned<Mutex<Shard>>]>,
    /// Inodes with no name but open handles (the tree keeps which).
    orphans: CacheAligned<AtomicUsize>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles")
            .field("shards", &self.shards.len())
            .field("open", &self.len())
            .finish()
    }
}

fn split_fh(fh: u64) -> (usize, usize, u32) {
    let shard = (fh as usize) & (MAX_SHARDS - 1);
    let slot = ((fh & 0xffff_ffff) >> SHARD_BITS) as usize;
    (shard, slot, (fh >> 32) as u32)
}

fn make_fh(shard: usize, slot: u32, gen: u32) -> u64 {
    (u64::from(gen) << 32) | (u64::from(slot) << SHARD_BITS) | shard as u64
}

impl Handles {
    /// One shard per CPU (a power of two, at most 256).
    pub fn new() -> Handles {
        Self::with_shards(crate::shard::default_count())
    }

    /// `n` shards (rounded up to a power of two, 1..=256).
    pub fn with_shards(n: usize) -> Handles {
        let n = n.clamp(1, MAX_SHARDS).next_power_of_two();
        Handles {
            shards: (0..n)
                .map(|_| PairAligned::new(Mutex::new(Shard::default())))
                .collect(),
            orphans: CacheAligned::new(AtomicUsize::new(0)),
        }
    }

    /// The calling thread's shard.
    pub fn this_shard(&self) -> usize {
        crate::shard::this_thread(self.shards.len())
    }

    /// Open `ino` with `flags` in `shard` if that shard pins it already
    /// (the fast path: no tree lock); `Ok(None)` if it does not.
    pub fn open_pinned(&self, shard: usize, ino: Ino, flags: i32) -> Result<Option<u64>> {
        let mut s = self.shards[shard].lock_unpoisoned();
        let opened = s.open_if_pinned(ino, flags)?;
        Ok(opened.map(|(slot, gen)| make_fh(shard, slot, gen)))
    }

    /// Open `ino`, of type `kind`, with `flags` in `shard`, pinning it
    /// there. The caller holds the tree lock (read or write) and found the
    /// inode alive: that is what makes a pin's word good.
    pub fn open(&self, shard: usize, ino: Ino, kind: FileType, flags: i32) -> Result<u64> {
        // Checked before a pin is made, so a refused open leaves none.
        handle_for(ino, kind, flags)?;
        let mut s = self.shards[shard].lock_unpoisoned();
        let s = &mut *s;
        if s.pins.insert_new(ino, Pin::new(0, kind)) {
            s.idle += 1;
        }
        let (slot, gen) = s.open(ino, flags)?;
        Ok(make_fh(shard, slot, gen))
    }

    /// The handle `fh`, which must have been opened on `ino`: EBADF if not.
    pub fn get(&self, ino: Ino, fh: u64) -> Result<Handle> {
        let (shard, slot, gen) = split_fh(fh);
        let s = self.shards.get(shard).ok_or(Errno::EBADF)?;
        s.lock_unpoisoned().get(ino, slot, gen)
    }

    /// Close handle `fh` on `ino` (EBADF if it is not one). `Ok(true)`
    /// when the inode may have to be freed now: the handle was its shard's
    /// last on it and some orphan exists; the caller then takes the tree's
    /// write lock and asks [`Handles::busy_or_forget`].
    ///
    /// Why no orphan is missed: `busy_or_forget` marks the orphan (adds to
    /// the count) before it locks each shard in turn. If it locked this
    /// shard after we unlocked it, it saw this handle gone; if before, our
    /// lock came after its unlock, which came after its increment, so the
    /// load below sees the count above zero.
    pub fn release(&self, ino: Ino, fh: u64) -> Result<bool> {
        let (shard, slot, gen) = split_fh(fh);
        let s = self.shards.get(shard).ok_or(Errno::EBADF)?;
        let last = {
            let mut s = s.lock_unpoisoned();
            s.get(ino, slot, gen)?;
            s.slots.free(slot);
            s.open -= 1;
            let pin = s.pins.get_mut(ino).ok_or(Errno::EIO)?;
            pin.opens -= 1;
            let last = pin.opens == 0;
            if last {
                s.idle += 1;
                if s.idle > IDLE_MAX {
                    // Idle pins hold nothing: drop them all.
                    s.pins.retain(|p| p.opens > 0);
                    s.idle = 0;
                }
            }
            last
        };
        // Relaxed: ordered by the shard's mutex (see above).
        Ok(last && self.orphans.load(Ordering::Relaxed) > 0)
    }

    /// Whether any handle is open on `ino`; idle pins on it are dropped on
    /// the way, so that when the answer is no, nothing pins the inode and
    /// only an open under the tree lock can pin it again. Called with the
    /// tree's write lock held.
    pub fn busy_or_forget(&self, ino: Ino) -> bool {
        for s in self.shards.iter() {
            let mut s = s.lock_unpoisoned();
            match s.pins.get(ino) {
                Some(p) if p.opens > 0 => return true,
                Some(_) => {
                    s.pins.remove(ino);
                    s.idle -= 1;
                }
                None => {}
            }
        }
        false
    }

    /// One more orphan (under the tree's write lock, before
    /// [`Handles::busy_or_forget`] is asked about it).
    pub fn orphan_added(&self) {
        // Relaxed: published to releasers by the shard mutexes.
        self.orphans.fetch_add(1, Ordering::Relaxed);
    }

    /// An orphan freed (under the tree's write lock).
    pub fn orphan_freed(&self) {
        // Relaxed: a stale non-zero only sends a release to the tree lock.
        self.orphans.fetch_sub(1, Ordering::Relaxed);
    }

    /// The orphan count (for `check`).
    pub fn orphans(&self) -> usize {
        // Relaxed: read under the tree lock that orders every change.
        self.orphans.load(Ordering::Relaxed)
    }

    /// Open handles, all shards.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock_unpoisoned().open).sum()
    }

    /// Open handles per inode, recounted from the slots, after checking
    /// every shard's pins against its own slots (for `check`).
    pub fn recount(&self) -> std::result::Result<HashMap<Ino, u32>, String> {
        let mut all: HashMap<Ino, u32> = HashMap::new();
        for (i, s) in self.shards.iter().enumerate() {
            let s = s.lock_unpoisoned();
            let mut here: HashMap<Ino, u32> = HashMap::new();
            for h in s.slots.handles() {
                *here.entry(h.ino).or_default() += 1;
            }
            let mut idle = 0;
            for (ino, p) in s.pins.iter() {
                let n = here.get(&ino).copied().unwrap_or(0);
                if p.opens != n {
                    return Err(format!("shard {i}: ino {ino} pinned {} but {n}", p.opens));
                }
                idle += usize::from(n == 0);
            }
            if s.pins.iter().count() != s.pins.len() {
                return Err(format!("shard {i}: pin count off"));
            }
            if idle != s.idle || here.values().sum::<u32>() as usize != s.open {
                return Err(format!("shard {i}: idle or open count off"));
            }
            for (ino, n) in here {
                if !s.pins.contains_key(ino) {
                    return Err(format!("shard {i}: ino {ino} has handles but no pin"));
                }
                *all.entry(ino).or_default() += n;
            }
        }
        Ok(all)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn handle_numbers_round_trip_and_go_stale() {
        let h = Handles::with_shards(4);
        let fh = h.open(3, 7, FileType::Regular, libc::O_RDWR).unwrap();
        assert_eq!(split_fh(fh).0, 3);
        assert!(h.get(7, fh).unwrap().write);
        assert_eq!(h.get(8, fh), Err(Errno::EBADF));
        assert_eq!(h.release(7, fh), Ok(false));
        assert_eq!(h.get(7, fh), Err(Errno::EBADF));
        assert_eq!(h.release(7, fh), Err(Errno::EBADF));
        // The slot is reused under a new generation.
        let fh2 = h.open_pinned(3, 7, libc::O_RDONLY).unwrap().unwrap();
        assert_ne!(fh, fh2);
        assert_eq!(h.get(7, fh), Err(Errno::EBADF));
        assert_eq!(h.len(), 1);
        assert_eq!(h.recount().unwrap(), HashMap::from([(7, 1)]));
        assert!(h.busy_or_forget(7));
        assert_eq!(h.release(7, fh2), Ok(false));
        assert!(!h.busy_or_forget(7));
        // The idle pin went with the answer: the fast path declines.
        assert_eq!(h.open_pinned(3, 7, libc::O_RDONLY), Ok(None));
        assert_eq!(h.get(7, u64::MAX), Err(Errno::EBADF));
    }

    #[test]
    fn refused_opens_leave_no_pin_and_idle_pins_are_bounded() {
        let h = Handles::with_shards(1);
        assert_eq!(
            h.open(0, 2, FileType::Directory, libc::O_WRONLY),
            Err(Errno::EISDIR)
        );
        assert_eq!(h.open_pinned(0, 2, libc::O_RDONLY), Ok(None));
        for ino in 0..(IDLE_MAX as u64 + 5) {
            let fh = h.open(0, ino, FileType::Regular, libc::O_RDONLY).unwrap();
            h.release(ino, fh).unwrap();
        }
        h.recount().unwrap();
        assert!(h.shards[0].lock_unpoisoned().pins.len() <= IDLE_MAX);
        // A pinned directory still refuses a write open.
        h.open(0, 1, FileType::Directory, libc::O_RDONLY).unwrap();
        assert_eq!(h.open_pinned(0, 1, libc::O_RDWR), Err(Errno::EISDIR));
    }

    #[test]
    fn a_release_asks_the_tree_only_while_an_orphan_exists() {
        let h = Handles::with_shards(2);
        let a = h.open(0, 5, FileType::Regular, libc::O_RDONLY).unwrap();
        let b = h.open(1, 5, FileType::Regular, libc::O_RDONLY).unwrap();
        h.orphan_added();
        assert!(h.busy_or_forget(5));
        assert_eq!(h.release(5, a), Ok(true));
        assert!(h.busy_or_forget(5));
        assert_eq!(h.release(5, b), Ok(true));
        assert!(!h.busy_or_forget(5));
        h.orphan_freed();
        let c = h.open(0, 6, FileType::Regular, libc::O_RDONLY).unwrap();
        assert_eq!(h.release(6, c), Ok(false));
    }
}

/// The orphan hand-off: an unlink that finds the inode still open races
/// the release of its last handle, on another shard's thread. In every
/// interleaving exactly one of them frees the inode.
#[cfg(all(test, loom))]
mod loom_handles {
    use super::*;
    use crate::sync::{thread, Arc};

    #[test]
    fn unlink_racing_the_last_release_frees_once() {
        loom::model(|| {
            let h = Arc::new(Handles::with_shards(2));
            let fh = h.open(1, 9, FileType::Regular, libc::O_RDONLY).unwrap();
            // The tree lock, and how many times the inode was freed.
            let tree = Arc::new(Mutex::new(0u32));
            let (h2, tree2) = (h.clone(), tree.clone());
            let unlinker = thread::spawn(move || {
                let mut freed = tree2.lock_unpoisoned();
                h2.orphan_added();
                if !h2.busy_or_forget(9) {
                    *freed += 1;
                    h2.orphan_freed();
                }
            });
            if h.release(9, fh).unwrap() {
                let mut freed = tree.lock_unpoisoned();
                // The tree's own check: still there, no name, no handle.
                if *freed == 0 && !h.busy_or_forget(9) {
                    *freed += 1;
                    h.orphan_freed();
                }
            }
            unlinker.join().unwrap();
            assert_eq!(*tree.lock_unpoisoned(), 1);
            assert_eq!(h.orphans(), 0);
        });
    }
}
