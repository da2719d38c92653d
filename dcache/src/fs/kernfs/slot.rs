//! Per-inode state readable without the tree lock.
//!
//! Everything a lockless path needs (directory revision, the node's place in
//! the tree, its active count, the attribute copy and the show/store
//! callbacks) lives in a `Slot` indexed directly by inode number. Inode
//! numbers are never reused, so a slot belongs to one node for the life of
//! the `KernFs`, and a slot is never freed before the `KernFs` is: a reader
//! holding `&KernFs` can index any slot with no reclamation scheme. The cost
//! is the slot of a removed node (192 bytes) staying until the `KernFs` is
//! dropped; the callbacks and the locked tree data are freed at removal.
//!
//! The table grows in segments of doubling size that are never moved, so
//! growing (under the tree's write lock) never disturbs a lockless reader.

use crate::cache_aligned::CacheAligned;
use crate::errno::{Errno, Result};
use crate::fs::{FileType, Ino};
use crate::sync::{spin_hint, yield_now, AtomicI32, AtomicPtr, AtomicU64, AtomicU8, Ordering};

use super::attr_cell::AttrCell;

/// Generates an attribute file's contents.
pub type ShowFn = Box<dyn Fn() -> Vec<u8> + Send + Sync>;
/// Takes a write to an attribute file; returns how many bytes it consumed.
pub type StoreFn = Box<dyn Fn(&[u8]) -> Result<usize> + Send + Sync>;

pub(super) struct AttrOps {
    pub show: ShowFn,
    pub store: Option<StoreFn>,
}

/// Added to the active count when a node is removed (Linux:
/// KN_DEACTIVATED_BIAS). Half of `i32::MIN`, so transient increments by
/// readers that then back off can neither wrap it positive nor underflow.
const DEACTIVATED_BIAS: i32 = i32::MIN / 2;

pub(super) const KIND_DIR: u8 = 1;
pub(super) const KIND_FILE: u8 = 2;
pub(super) const KIND_LINK: u8 = 3;
/// Flag bit: the attribute file accepts writes.
pub(super) const HAS_STORE: u8 = 0x10;

#[repr(C, align(64))]
pub(super) struct Slot {
    /// Kind code and `HAS_STORE`; set once before activation.
    pub flags: AtomicU8,
    /// Parent directory's inode number (0 for the root).
    pub parent: AtomicU64,
    /// The parent's revision right after this node got its current
    /// (parent, name): a positive entry recorded at an older revision may
    /// name the node by a name it no longer has.
    pub name_rev: AtomicU64,
    /// Directory revision: bumped after every change to the entries.
    pub rev: AtomicU64,
    /// Attribute version: bumped after every change to the attributes.
    pub attr_ver: AtomicU64,
    ops: AtomicPtr<AttrOps>,
    pub snap: AttrCell,
    /// kernfs' active reference count: >= 0 while the node is live (the
    /// number of readers inside show/store), negative once removed. Alone on
    /// its line: every read writes it, while lookups only read the fields
    /// above.
    active: CacheAligned<AtomicI32>,
}

impl Slot {
    fn new() -> Self {
        Slot {
            flags: AtomicU8::new(0),
            parent: AtomicU64::new(0),
            name_rev: AtomicU64::new(0),
            rev: AtomicU64::new(1),
            attr_ver: AtomicU64::new(1),
            ops: AtomicPtr::new(std::ptr::null_mut()),
            snap: AttrCell::new(),
            // A slot starts deactivated and drained: lockless readers of an
            // inode number that was never handed out fail.
            active: CacheAligned::new(AtomicI32::new(DEACTIVATED_BIAS)),
        }
    }

    pub(super) fn kind(&self) -> Option<FileType> {
        // Relaxed: written before `activate`'s Release, which every caller
        // that found the node live has already synchronised with.
        match self.flags.load(Ordering::Relaxed) & 0xf {
            KIND_DIR => Some(FileType::Directory),
            KIND_FILE => Some(FileType::Regular),
            KIND_LINK => Some(FileType::Symlink),
            _ => None,
        }
    }

    pub(super) fn has_store(&self) -> bool {
        // Relaxed: as in `kind`.
        self.flags.load(Ordering::Relaxed) & HAS_STORE != 0
    }

    /// Fill in a fresh slot and make it live. Called once per slot, under
    /// the tree's write lock.
    pub(super) fn activate(&self, flags: u8, parent: Ino, name_rev: u64, ops: Option<AttrOps>) {
        // Relaxed stores: published by the Release RMW on `active` below,
        // which lockless readers acquire before reading any of them.
        self.flags.store(flags, Ordering::Relaxed);
        self.parent.store(parent, Ordering::Relaxed);
        self.name_rev.store(name_rev, Ordering::Relaxed);
        if let Some(ops) = ops {
            self.ops
                .store(Box::into_raw(Box::new(ops)), Ordering::Relaxed);
        }
        // Release: publishes the fields above. An add, not a store: a reader
        // probing this inode early may be between its failed increment and
        // its undo, and a store would make that undo push the count negative.
        self.active.fetch_sub(DEACTIVATED_BIAS, Ordering::Release);
    }

    pub(super) fn is_active(&self) -> bool {
        // Acquire: pairs with `activate`, so a caller that sees the node live
        // also sees its fields.
        self.active.load(Ordering::Acquire) >= 0
    }

    /// Take an active reference (Linux kernfs_get_active): the callbacks
    /// stay alive until the matching `put_active`.
    pub(super) fn get_active(&self) -> bool {
        // Acquire: pairs with `activate` (the callbacks pointer) through the
        // release sequence of RMWs on this counter.
        let prev = self.active.fetch_add(1, Ordering::Acquire);
        if prev >= 0 {
            return true;
        }
        // Relaxed: undoing an increment that gave us nothing to order.
        self.active.fetch_sub(1, Ordering::Relaxed);
        false
    }

    pub(super) fn put_active(&self) {
        // Release: our use of the callbacks happens before the remover's
        // Acquire load in `drain` sees the count drop, and so before it
        // frees them.
        self.active.fetch_sub(1, Ordering::Release);
    }

    /// Mark the node removed: no new active references. Called once, under
    /// the tree's write lock.
    pub(super) fn deactivate(&self) {
        // Relaxed: the RMW order on this one counter is all readers rely on;
        // `drain` does the acquiring.
        self.active.fetch_add(DEACTIVATED_BIAS, Ordering::Relaxed);
    }

    /// Wait until every active reference taken before `deactivate` is put,
    /// then free the callbacks. Must not be called with the tree lock held
    /// (a reader may need it to finish), nor from inside a callback of this
    /// node.
    pub(super) fn drain(&self) {
        let mut spins = 0u32;
        // Acquire: pairs with `put_active`'s Release.
        while self.active.load(Ordering::Acquire) != DEACTIVATED_BIAS {
            spins += 1;
            if spins < 64 {
                spin_hint();
            } else {
                yield_now();
            }
        }
        self.free_ops();
    }

    fn free_ops(&self) {
        // Acquire: the callbacks were written by `activate` on another thread.
        let p = self.ops.swap(std::ptr::null_mut(), Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `p` came from Box::into_raw in `activate`; the swap
            // makes this the only owner, and no active reference is left
            // (drained, or the table is being dropped).
            drop(unsafe { Box::from_raw(p) });
        }
    }

    /// Run `f` on the callbacks; the caller holds an active reference.
    pub(super) fn with_ops<R>(&self, f: impl FnOnce(&AttrOps) -> R) -> Result<R> {
        // Relaxed: the pointer was published by `activate` and the caller's
        // `get_active` acquired it; it is only cleared after `drain`.
        let p = self.ops.load(Ordering::Relaxed);
        if p.is_null() {
            return Err(Errno::EIO);
        }
        // SAFETY: non-null, and the caller's active reference keeps `drain`
        // (the only path that frees it while the table lives) waiting.
        Ok(f(unsafe { &*p }))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.free_ops();
    }
}

/// Inodes in segment 0; segment k holds `FIRST << k`.
const FIRST_SHIFT: u32 = 6;
const SEGMENTS: usize = 26;

pub(super) struct SlotTable {
    segs: [AtomicPtr<Slot>; SEGMENTS],
}

fn locate(ino: Ino) -> Option<(usize, usize)> {
    let i = ino.checked_add(1 << FIRST_SHIFT)?;
    let top = 63 - i.leading_zeros();
    let seg = (top - FIRST_SHIFT) as usize;
    if seg >= SEGMENTS {
        return None;
    }
    Some((seg, (i - (1u64 << top)) as usize))
}

fn seg_len(seg: usize) -> usize {
    (1usize << FIRST_SHIFT) << seg
}

impl SlotTable {
    pub(super) fn new() -> Self {
        SlotTable {
            segs: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// The slot of `ino`, if its segment exists. Lock-free.
    pub(super) fn get(&self, ino: Ino) -> Option<&Slot> {
        let (seg, off) = locate(ino)?;
        // Acquire: pairs with the Release CAS in `grow`, so the slots'
        // initial values are visible.
        let p = self.segs[seg].load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null segment pointer is an allocation of
        // `seg_len(seg)` slots (off < seg_len by `locate`) that is freed only
        // in Drop, which cannot run while `&self` is borrowed.
        Some(unsafe { &*p.add(off) })
    }

    /// The slot of `ino`, allocating its segment if needed. ENOSPC past the
    /// last segment.
    pub(super) fn get_or_grow(&self, ino: Ino) -> Result<&Slot> {
        let (seg, _) = locate(ino).ok_or(Errno::ENOSPC)?;
        // Acquire: as in `get`.
        if self.segs[seg].load(Ordering::Acquire).is_null() {
            let fresh: Box<[Slot]> = (0..seg_len(seg)).map(|_| Slot::new()).collect();
            let p = Box::into_raw(fresh) as *mut Slot;
            // Release: publishes the initialised slots to `get`.
            if self.segs[seg]
                .compare_exchange(
                    std::ptr::null_mut(),
                    p,
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                // SAFETY: `p` is the allocation made just above, never shared.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, seg_len(seg))) });
            }
        }
        self.get(ino).ok_or(Errno::ENOSPC)
    }
}

impl Drop for SlotTable {
    fn drop(&mut self) {
        for (seg, s) in self.segs.iter().enumerate() {
            // Relaxed: `&mut self`, no other thread can see the table.
            let p = s.swap(std::ptr::null_mut(), Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: `p` was made by `get_or_grow` from a boxed slice of
                // exactly `seg_len(seg)` slots, and the swap took it out of
                // the table, so it is freed once.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, seg_len(seg))) });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn locate_covers_every_ino_once() {
        assert_eq!(locate(0), Some((0, 0)));
        assert_eq!(locate(63), Some((0, 63)));
        assert_eq!(locate(64), Some((1, 0)));
        assert_eq!(locate(191), Some((1, 127)));
        assert_eq!(locate(192), Some((2, 0)));
        assert_eq!(locate(u64::MAX), None);
        let mut expect = (0usize, 0usize);
        for ino in 0..2000u64 {
            assert_eq!(locate(ino), Some(expect));
            expect.1 += 1;
            if expect.1 == seg_len(expect.0) {
                expect = (expect.0 + 1, 0);
            }
        }
    }

    #[test]
    fn slot_size_is_three_lines() {
        assert_eq!(std::mem::size_of::<Slot>(), 192);
    }

    #[test]
    fn active_refs_block_drain_until_put() {
        let t = SlotTable::new();
        assert!(t.get(5).is_none());
        let s = t.get_or_grow(5).unwrap();
        assert!(!s.get_active(), "never activated");
        s.activate(KIND_FILE, 1, 1, None);
        assert!(s.get_active());
        s.deactivate();
        assert!(!s.is_active());
        assert!(!s.get_active());
        s.put_active();
        s.drain();
        assert!(!s.get_active());
    }
}
