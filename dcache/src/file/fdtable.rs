//! The per-process descriptor table.
//!
//! Slots are atomic pointers, one per descriptor, allocated at the table's
//! size limit and never moved. Allocating a descriptor (lowest free, as
//! POSIX wants) takes a mutex, as Linux's `files->file_lock`; `fget` and
//! `fput` never do.
//!
//! `fget` must not touch a file that a racing `close` has already freed.
//! Linux reads the slot under RCU and relies on files being freed only
//! after a grace period. We have no grace periods; instead a reader *pins*
//! the slot: the low six bits of a slot word (files are 64-byte aligned) hold
//! a pin count and a CLOSING flag. `fget` adds a pin with a CAS (refused once
//! CLOSING is set), takes its file reference, and removes the pin; `close`
//! sets CLOSING, waits for the pins to drain (each is held for two atomic
//! operations), and only then clears the slot and drops the table's
//! reference. The price against RCU: `fget` writes the slot's line. With one
//! table per thread (the dup/close benchmark) that line is private; threads
//! sharing a table and hammering one descriptor share it, as they share the
//! file's count anyway.

use crate::errno::{Errno, Result};
use crate::sync::{spin_hint, yield_now, AtomicPtr, LockExt, Mutex, Ordering};

use super::{FileRef, Layout};

/// A file descriptor.
pub type Fd = i32;

/// Default table size (Linux's default RLIMIT_NOFILE soft limit).
pub const DEFAULT_MAX_FDS: usize = 1024;
/// The largest table (Linux's default fs.nr_open).
pub const NR_OPEN: usize = 1 << 20;

const PINS: usize = 0x1f;
const CLOSING: usize = 0x20;
const TAGS: usize = PINS | CLOSING;

struct FdAlloc {
    used: Vec<u64>,
    /// No descriptor below this is free (Linux files->next_fd).
    next_fd: usize,
    open: usize,
}

impl FdAlloc {
    fn take_lowest(&mut self, max: usize) -> Option<usize> {
        let mut w = self.next_fd / 64;
        while w < self.used.len() {
            let bits = self.used[w];
            if bits != u64::MAX {
                let fd = w * 64 + bits.trailing_ones() as usize;
                if fd >= max {
                    return None;
                }
                self.used[w] |= 1 << (fd % 64);
                self.next_fd = fd + 1;
                self.open += 1;
                return Some(fd);
            }
            w += 1;
        }
        None
    }

    fn free(&mut self, fd: usize) {
        self.used[fd / 64] &= !(1 << (fd % 64));
        self.next_fd = self.next_fd.min(fd);
        self.open -= 1;
    }
}

/// A descriptor table (Linux's `files_struct`): descriptors map to
/// [`FileRef`](super::FileRef)s, and the lowest free one is handed out first.
pub struct FdTable<T: Send + Sync, L: Layout = super::Split> {
    slots: Box<[AtomicPtr<L::Repr<T>>]>,
    alloc: Mutex<FdAlloc>,
}

fn untag<F>(p: *mut F) -> *mut F {
    p.map_addr(|a| a & !TAGS)
}

impl<T: Send + Sync, L: Layout> Default for FdTable<T, L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + Sync, L: Layout> FdTable<T, L> {
    /// A table of `DEFAULT_MAX_FDS` descriptors.
    pub fn new() -> Self {
        Self::build(DEFAULT_MAX_FDS)
    }

    /// A table of `max_fds` descriptors: EINVAL unless 1..=NR_OPEN.
    pub fn with_max_fds(max_fds: usize) -> Result<Self> {
        if max_fds == 0 || max_fds > NR_OPEN {
            return Err(Errno::EINVAL);
        }
        Ok(Self::build(max_fds))
    }

    fn build(max: usize) -> Self {
        FdTable {
            slots: (0..max)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            alloc: Mutex::new(FdAlloc {
                used: vec![0; max.div_ceil(64)],
                next_fd: 0,
                open: 0,
            }),
        }
    }

    /// How many descriptors the table holds (valid fds are `0..max_fds`).
    pub fn max_fds(&self) -> usize {
        self.slots.len()
    }

    /// Descriptors in use.
    pub fn open_fds(&self) -> usize {
        self.alloc.lock_unpoisoned().open
    }

    fn slot(&self, fd: Fd) -> Result<&AtomicPtr<L::Repr<T>>> {
        usize::try_from(fd)
            .ok()
            .and_then(|i| self.slots.get(i))
            .ok_or(Errno::EBADF)
    }

    /// Give `file` the lowest free descriptor (Linux get_unused_fd +
    /// fd_install). The table owns the reference from now on; on EMFILE it
    /// is dropped.
    pub fn install(&self, file: FileRef<T, L>) -> Result<Fd> {
        let fd = {
            let mut a = self.alloc.lock_unpoisoned();
            a.take_lowest(self.slots.len())
        };
        let Some(fd) = fd else {
            drop(file);
            return Err(Errno::EMFILE);
        };
        // Release: an fget that loads this pointer sees the file fully built
        // and the reference it stands for counted. The slot is null: a
        // descriptor is only freed after its slot was cleared.
        self.slots[fd].store(file.into_raw(), Ordering::Release);
        Ok(fd as Fd)
    }

    /// A counted reference to the file behind `fd`; EBADF if none.
    pub fn fget(&self, fd: Fd) -> Result<FileRef<T, L>> {
        let slot = self.slot(fd)?;
        // Relaxed: only a first guess for the CAS, which acquires.
        let mut w = slot.load(Ordering::Relaxed);
        loop {
            if untag(w).is_null() || w.addr() & CLOSING != 0 {
                return Err(Errno::EBADF);
            }
            if w.addr() & PINS == PINS {
                // Pin count full: wait for a reader to leave.
                spin_hint();
                // Relaxed: as above.
                w = slot.load(Ordering::Relaxed);
                continue;
            }
            // Acquire on success: pairs with `install`'s Release, so the file
            // behind the pointer is seen initialised.
            match slot.compare_exchange_weak(
                w,
                w.map_addr(|a| a + 1),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(cur) => w = cur,
            }
        }
        // SAFETY: our pin keeps `close` from dropping the table's reference
        // until we unpin, so the file is alive and referenced.
        let file = unsafe { FileRef::get_raw(untag(w)) };
        Self::unpin(slot);
        Ok(file)
    }

    fn unpin(slot: &AtomicPtr<L::Repr<T>>) {
        // Relaxed: first guess for the CAS.
        let mut w = slot.load(Ordering::Relaxed);
        loop {
            // Release: our count increment happens before `close` sees the
            // pins drained and drops the table's reference.
            match slot.compare_exchange_weak(
                w,
                w.map_addr(|a| a - 1),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(cur) => w = cur,
            }
        }
    }

    /// Drop a reference from `fget` (Linux fput).
    pub fn fput(&self, file: FileRef<T, L>) {
        drop(file);
    }

    /// A new descriptor (the lowest free) for the file behind `fd`.
    pub fn dup(&self, fd: Fd) -> Result<Fd> {
        let file = self.fget(fd)?;
        self.install(file)
    }

    /// Take the file out of `fd` and free the descriptor; the caller gets
    /// the table's reference.
    fn detach(&self, fd: Fd) -> Result<FileRef<T, L>> {
        let slot = self.slot(fd)?;
        // Relaxed: first guess for the CAS.
        let mut w = slot.load(Ordering::Relaxed);
        loop {
            if untag(w).is_null() || w.addr() & CLOSING != 0 {
                return Err(Errno::EBADF);
            }
            // Relaxed: winning the CAS only makes us the one closer; the
            // drain loop below does the acquiring.
            match slot.compare_exchange_weak(
                w,
                w.map_addr(|a| a | CLOSING),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(cur) => w = cur,
            }
        }
        let mut spins = 0u32;
        // Acquire: pairs with `unpin`'s Release; every pinned fget's count
        // increment is visible before we drop the table's reference.
        while slot.load(Ordering::Acquire).addr() & PINS != 0 {
            spins += 1;
            if spins < 64 {
                spin_hint();
            } else {
                yield_now();
            }
        }
        // Relaxed: the alloc mutex orders this store before the descriptor
        // can be handed out again.
        slot.store(std::ptr::null_mut(), Ordering::Relaxed);
        self.alloc.lock_unpoisoned().free(fd as usize);
        // SAFETY: the slot held the table's reference to this file; it is
        // cleared, so the reference passes to us exactly once.
        Ok(unsafe { FileRef::from_raw(untag(w)) })
    }

    /// Close `fd` (Linux close: filp_close = flush, then fput). The
    /// descriptor is freed even when flush fails; its error is returned.
    pub fn close(&self, fd: Fd) -> Result<()> {
        let file = self.detach(fd)?;
        file.flush()
    }

    /// `read(2)` on `fd`: at the file position, advancing it.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        self.fget(fd)?.read(buf)
    }

    /// `pread(2)` on `fd`: at `offset`; the position stays.
    pub fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.fget(fd)?.pread(buf, offset)
    }

    /// `write(2)` on `fd`: at the file position, advancing it.
    pub fn write(&self, fd: Fd, data: &[u8]) -> Result<usize> {
        self.fget(fd)?.write(data)
    }

    /// `pwrite(2)` on `fd`: at `offset`; the position stays.
    pub fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> Result<usize> {
        self.fget(fd)?.pwrite(data, offset)
    }
}

impl<T: Send + Sync, L: Layout> Drop for FdTable<T, L> {
    /// Close every descriptor (Linux close_files at exit).
    fn drop(&mut self) {
        for slot in self.slots.iter() {
            // Acquire: the file was published by another thread's install.
            let w = slot.swap(std::ptr::null_mut(), Ordering::Acquire);
            if !untag(w).is_null() {
                // SAFETY: the slot held the table's reference; `&mut self`
                // rules out pins and closers, and the swap took it once.
                let file = unsafe { FileRef::<T, L>::from_raw(untag(w)) };
                let _ = file.flush();
            }
        }
    }
}

// Pin bits must fit below the file alignment.
const _: () = assert!(TAGS < crate::cache_aligned::CACHE_LINE);
