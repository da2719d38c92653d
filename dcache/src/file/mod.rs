//! Open files, Linux `struct file` style, and the per-process descriptor
//! table.
//!
//! A [`FileRef`] is a counted reference to one open file (Linux: a `struct
//! file *` on which `get_file`/`fput` were called). The count lives inside
//! the file, at the place its [`Layout`] puts it, so the `split` and
//! `packed` layouts differ in exactly that. The last `fput` calls the
//! backend's `release` and drops the path payload. [`FdTable`] maps
//! descriptors to files.
//!
//! This is the one open-file type: [`AsCred::open`](crate::AsCred::open)'s
//! [`OpenFile`](crate::OpenFile) is a `FileRef<DentryRef, Split>`, and the
//! FUSE frontend's file handles are its address. `Packed` is kept only as
//! the benchmark's comparison (public with the `experiments` feature).

mod fdtable;
mod idle;
mod layout;
mod seek;

use std::marker::PhantomData;
use std::mem::{align_of, size_of, ManuallyDrop};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::cache_aligned::LINE_PAIR;
use crate::errno::{Errno, Result};
use crate::fs::{FileSystem, Ino};
use crate::sync::{fence, LockExt, Ordering};

pub use fdtable::{Fd, FdTable, DEFAULT_MAX_FDS, NR_OPEN};
pub use idle::IdleFile;
pub use layout::{
    type_layout, FileHot, FileRepr, Layout, LayoutInfo, NewFile, OpenParts, Split, SplitFile,
    HOT_FIELDS,
};
// The benchmark's comparison layout.
#[cfg(any(test, feature = "experiments"))]
pub use layout::{Packed, PackedFile};

// FMODE_* bits, Linux's values.
/// Open for reading.
pub const FMODE_READ: u32 = 0x1;
/// Open for writing.
pub const FMODE_WRITE: u32 = 0x2;
/// The position may be changed (`lseek`).
pub const FMODE_LSEEK: u32 = 0x4;
/// `pread` is allowed (otherwise ESPIPE).
pub const FMODE_PREAD: u32 = 0x8;
/// `pwrite` is allowed (otherwise ESPIPE).
pub const FMODE_PWRITE: u32 = 0x10;
/// Opened with O_PATH: no I/O, close does not flush.
pub const FMODE_PATH: u32 = 0x4000;
/// `read`/`write` serialise on `f_pos_lock` (POSIX position atomicity).
pub const FMODE_ATOMIC_POS: u32 = 0x8000;

/// dcache's own (not Linux's): opened by a caller without CAP_FSETID, so a
/// write through the file drops the set-id bits. Linux asks the writer's
/// credentials at write time; a file write here carries none, so the open
/// records the answer.
pub const FMODE_KILL_PRIV: u32 = 1 << 31;

/// dcache's own: with [`FMODE_KILL_PRIV`], the opener was not in the
/// file's group, so a write drops S_ISGID even without group execute
/// (Linux 6.x's `setattr_should_drop_sgid`, asked at open).
pub const FMODE_KILL_SGID: u32 = 1 << 29;

/// dcache's own: `f_op` borrows the backend rather than holding a count of
/// it, so an open writes no count shared by every file of the backend (as
/// Linux's `f_op`, an uncounted pointer to the ops table). The Vfs's files
/// are opened so: their path, a dentry reference, keeps the Vfs that owns
/// the backend alive.
pub const FMODE_BORROWED_FS: u32 = 1 << 30;

/// The mode bits an `open(2)` with `flags` gives a regular file.
pub fn fmode_from_flags(flags: i32) -> u32 {
    if flags & libc::O_PATH != 0 {
        return FMODE_PATH;
    }
    let io = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => FMODE_READ,
        libc::O_WRONLY => FMODE_WRITE,
        libc::O_RDWR => FMODE_READ | FMODE_WRITE,
        // Access mode 3: neither read nor write (ioctl-only opens).
        _ => 0,
    };
    io | FMODE_LSEEK | FMODE_PREAD | FMODE_PWRITE | FMODE_ATOMIC_POS
}

/// A counted reference to an open file. Clone is `get_file`, drop is
/// `fput`.
pub struct FileRef<T: Send + Sync, L: Layout = Split> {
    ptr: NonNull<L::Repr<T>>,
    _owns: PhantomData<L::Repr<T>>,
}

// SAFETY: a FileRef is a shared reference to a `Repr<T>`, which is Send +
// Sync (a `FileRepr` bound); the count it manipulates is atomic.
unsafe impl<T: Send + Sync, L: Layout> Send for FileRef<T, L> {}
// SAFETY: as above; `&FileRef` only gives `&Repr<T>`.
unsafe impl<T: Send + Sync, L: Layout> Sync for FileRef<T, L> {}

/// The parts and `f_mode` of a file whose `f_op` borrows `fs`
/// ([`FMODE_BORROWED_FS`]): an Arc that holds no count of its own, made
/// straight into a ManuallyDrop, which the file never drops.
///
/// # Safety
/// The count `fs` is outlives the file made from the parts.
pub(crate) unsafe fn borrowing_parts<T>(
    path: T,
    fs: &Arc<dyn FileSystem>,
    ino: Ino,
    fh: u64,
    flags: i32,
    extra: u32,
) -> (NewFile<T>, u32) {
    let mode = fmode_from_flags(flags) | extra | FMODE_BORROWED_FS;
    // SAFETY: never dropped by the file (FMODE_BORROWED_FS), and the count
    // it borrows outlives the file (the caller's contract).
    let fs = ManuallyDrop::new(unsafe { Arc::from_raw(Arc::as_ptr(fs)) });
    let parts = NewFile {
        path,
        fs,
        ino,
        fh,
        flags,
    };
    (parts, mode)
}

impl<T: Send + Sync, L: Layout> FileRef<T, L> {
    /// A new open file with count 1, mode bits from `parts.flags`.
    pub fn open(parts: OpenParts<T>) -> Self {
        Self::open_with_mode(parts, 0)
    }

    /// As [`FileRef::open`], with the `FMODE_*` bits `extra` set as well
    /// (e.g. [`FMODE_KILL_PRIV`]).
    pub fn open_with_mode(parts: OpenParts<T>, extra: u32) -> Self {
        let mode = (fmode_from_flags(parts.flags) | extra) & !FMODE_BORROWED_FS;
        let parts = NewFile {
            path: parts.path,
            fs: ManuallyDrop::new(parts.fs),
            ino: parts.ino,
            fh: parts.fh,
            flags: parts.flags,
        };
        Self::from_new(parts, mode)
    }

    /// As [`FileRef::open_with_mode`], but `f_op` borrows `fs`: the file
    /// writes no count of the backend, at open or at the last `fput`
    /// ([`FMODE_BORROWED_FS`]).
    ///
    /// # Safety
    /// The count `fs` is outlives the file: every reference to it, however
    /// it is held.
    pub(crate) unsafe fn open_borrowing_fs(
        path: T,
        fs: &Arc<dyn FileSystem>,
        ino: Ino,
        fh: u64,
        flags: i32,
        extra: u32,
    ) -> Self {
        // SAFETY: the caller's contract is `borrowing_parts`'s.
        let (parts, mode) = unsafe { borrowing_parts(path, fs, ino, fh, flags, extra) };
        Self::from_new(parts, mode)
    }

    fn from_new(parts: NewFile<T>, mode: u32) -> Self {
        let file = <L::Repr<T> as FileRepr<T>>::new(parts, mode);
        FileRef {
            ptr: alloc_file(file),
            _owns: PhantomData,
        }
    }

    fn f(&self) -> &L::Repr<T> {
        // SAFETY: this reference is counted in `f_count`, so the allocation
        // made by `open` lives at least as long as `self`.
        unsafe { self.ptr.as_ref() }
    }

    /// The raw pointer, keeping the reference (the fd table owns it now).
    pub(crate) fn into_raw(self) -> *mut L::Repr<T> {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        p
    }

    /// Take back a reference given away by `into_raw`.
    ///
    /// # Safety
    /// `p` came from `into_raw` and that reference is not used again.
    pub(crate) unsafe fn from_raw(p: *mut L::Repr<T>) -> Self {
        FileRef {
            // SAFETY: `into_raw` pointers are never null (caller's contract).
            ptr: unsafe { NonNull::new_unchecked(p) },
            _owns: PhantomData,
        }
    }

    /// A new reference to the file at `p` (Linux get_file).
    ///
    /// # Safety
    /// Some reference to `p` is held, and cannot be dropped, for the whole
    /// call.
    pub(crate) unsafe fn get_raw(p: *mut L::Repr<T>) -> Self {
        // SAFETY: the caller's reference keeps `p` alive.
        let f = unsafe { &*p };
        // Relaxed: taking a reference while holding one publishes nothing
        // (as Arc::clone); the count is decremented with Release.
        f.f_count().fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `from_raw`; the count now includes this reference.
        unsafe { Self::from_raw(p) }
    }

    /// `f_count` now (racy by nature; for tests and diagnostics).
    pub fn count(&self) -> usize {
        // Relaxed: a snapshot, ordering nothing.
        self.f().f_count().load(Ordering::Relaxed)
    }

    /// The `FMODE_*` bits (`f_mode`).
    pub fn mode(&self) -> u32 {
        self.f().f_mode()
    }

    /// The `open(2)` flags (`f_flags`).
    pub fn flags(&self) -> i32 {
        self.f().f_flags()
    }

    /// The open inode's number (`f_inode`).
    pub fn ino(&self) -> Ino {
        self.f().f_inode()
    }

    /// The backend's handle from [`FileSystem::open`].
    pub fn fh(&self) -> u64 {
        self.f().fh()
    }

    /// The path payload the file was opened with (`f_path`).
    pub fn path(&self) -> &T {
        self.f().f_path()
    }

    /// The backend that serves the file's I/O (`f_op`).
    pub fn fs(&self) -> &Arc<dyn FileSystem> {
        self.f().f_op()
    }

    /// The file position.
    pub fn pos(&self) -> u64 {
        // Relaxed: a snapshot; `read` orders its own accesses by the lock.
        self.f().f_pos().load(Ordering::Relaxed)
    }

    /// Is this the same open file as `other` (same `struct file`)?
    pub fn same_file(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }

    /// This layout's field placement for payload `T`.
    pub fn layout() -> LayoutInfo {
        L::describe::<T>()
    }

    /// Read at the file position and advance it, serialised with other
    /// position users on `f_pos_lock` (Linux fdget_pos + vfs_read).
    pub fn read(&self, buf: &mut [u8]) -> Result<usize> {
        let f = self.f();
        if f.f_mode() & FMODE_READ == 0 {
            return Err(Errno::EBADF);
        }
        self.with_pos(|pos| f.f_op().read(f.f_inode(), f.fh(), pos, buf))
    }

    /// Read at `offset`, leaving the position alone.
    pub fn pread(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let f = self.f();
        if f.f_mode() & FMODE_READ == 0 {
            return Err(Errno::EBADF);
        }
        if f.f_mode() & FMODE_PREAD == 0 {
            return Err(Errno(libc::ESPIPE));
        }
        f.f_op().read(f.f_inode(), f.fh(), offset, buf)
    }

    /// Write at the file position and advance it.
    pub fn write(&self, data: &[u8]) -> Result<usize> {
        let f = self.f();
        if f.f_mode() & FMODE_WRITE == 0 {
            return Err(Errno::EBADF);
        }
        self.with_pos(|pos| f.f_op().write(f.f_inode(), f.fh(), pos, data))
    }

    /// Write at `offset`, leaving the position alone.
    pub fn pwrite(&self, data: &[u8], offset: u64) -> Result<usize> {
        let f = self.f();
        if f.f_mode() & FMODE_WRITE == 0 {
            return Err(Errno::EBADF);
        }
        if f.f_mode() & FMODE_PWRITE == 0 {
            return Err(Errno(libc::ESPIPE));
        }
        f.f_op().write(f.f_inode(), f.fh(), offset, data)
    }

    /// Run `io` at the current position and advance it by what it moved.
    fn with_pos(&self, io: impl FnOnce(u64) -> Result<usize>) -> Result<usize> {
        let f = self.f();
        let _guard = (f.f_mode() & FMODE_ATOMIC_POS != 0).then(|| f.f_pos_lock().lock_unpoisoned());
        // Relaxed: with FMODE_ATOMIC_POS the lock orders position updates;
        // without it concurrent users race on the position, as in Linux.
        let pos = f.f_pos().load(Ordering::Relaxed);
        let n = io(pos)?;
        f.f_pos()
            .store(pos.saturating_add(n as u64), Ordering::Relaxed);
        Ok(n)
    }

    /// What `close` does before dropping the descriptor's reference (Linux
    /// filp_close): the backend's flush, except for O_PATH files and
    /// backends that have none (`FileSystem::flush_on_close`).
    pub fn flush(&self) -> Result<()> {
        let f = self.f();
        if f.f_mode() & FMODE_PATH != 0 || !f.f_op().flush_on_close() {
            return Ok(());
        }
        f.f_op().flush(f.f_inode(), f.fh())
    }
}

impl<T: Send + Sync, L: Layout> Clone for FileRef<T, L> {
    fn clone(&self) -> Self {
        // SAFETY: `self` is a held reference for the whole call.
        unsafe { Self::get_raw(self.ptr.as_ptr()) }
    }
}

impl<T: Send + Sync, L: Layout> FileRef<T, L> {
    /// Drop this reference (Linux fput) and report: when it was the last,
    /// the backend's `release` runs now and its result is returned;
    /// otherwise `Ok(())` (the last holder releases).
    pub fn put(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so its reference is given up
        // here and only here.
        unsafe { this.put_ref() }
    }

    /// Give up this reference; the last one releases and frees the file.
    ///
    /// # Safety
    /// Called once per reference, which is not used afterwards (not even
    /// dropped).
    unsafe fn put_ref(&self) -> Result<()> {
        // Release: this holder's uses of the file happen before the last
        // holder frees it.
        if self.f().f_count().fetch_sub(1, Ordering::Release) != 1 {
            return Ok(());
        }
        // Acquire: pairs with every other holder's Release decrement.
        fence(Ordering::Acquire);
        // SAFETY: the count reached zero, so this was the last reference;
        // the pointer came from `alloc_file` in `open`.
        let file = unsafe { free_file(self.ptr) };
        // Linux __fput: release first, then the path goes with the file.
        let r = file.f_op().release(file.f_inode(), file.fh());
        drop(file);
        r
    }
}

impl<T: Send + Sync, L: Layout> Drop for FileRef<T, L> {
    fn drop(&mut self) {
        // SAFETY: a dropped reference is not used again.
        let _ = unsafe { self.put_ref() };
    }
}

// Files come from plain `malloc` with one alignment's worth of slack,
// aligned by hand, rather than from an over-aligned allocation: glibc serves
// those through `_int_memalign`, past its per-thread cache, splitting and
// consolidating chunks (measured: about 550 instructions per open and close,
// a sixth of a whole `open` + `close` through the Vfs), while the padded
// size comes from the per-thread cache. The block's start is kept in the
// word before the file. The file starts on a line pair and the block covers
// every pair the file touches: a file is written by the thread that opened
// it on every open and close, and a neighbour's data sharing its 128 bytes
// would lose its lines to those writes (see `cache_aligned::PairAligned`).

/// Where a file of type `R` starts in its block: a multiple of this.
const fn file_align<R>() -> usize {
    let a = align_of::<R>();
    if a > LINE_PAIR {
        a
    } else {
        LINE_PAIR
    }
}

/// The block a file of type `R` is allocated in: the file's pairs plus
/// one alignment's worth of slack, word-aligned.
fn file_block<R>() -> std::alloc::Layout {
    const { assert!(align_of::<R>() >= 2 * size_of::<usize>()) };
    let size = size_of::<R>().next_multiple_of(file_align::<R>()) + file_align::<R>();
    std::alloc::Layout::from_size_align(size, align_of::<usize>()).expect("file size overflows")
}

/// Move `file` to a new block, [`file_align`]-aligned.
fn alloc_file<R>(file: R) -> NonNull<R> {
    let p = alloc_block::<R>();
    // SAFETY: a fresh block, sized and aligned for `R`, holding nothing.
    unsafe { p.as_ptr().write(file) };
    p
}

/// A new block for an `R`, [`file_align`]-aligned, holding nothing yet.
fn alloc_block<R>() -> NonNull<R> {
    let block = file_block::<R>();
    // SAFETY: the size is non-zero (it includes the alignment).
    let base = unsafe { std::alloc::alloc(block) };
    if base.is_null() {
        std::alloc::handle_alloc_error(block);
    }
    // The first aligned address with a word free before it: at most
    // `align` bytes past `base`, so the file (and the rest of its last
    // pair) ends within the block.
    let align = file_align::<R>();
    let off = base.align_offset(align);
    let off = if off < size_of::<usize>() {
        off + align
    } else {
        off
    };
    debug_assert!(off <= align && off >= size_of::<usize>());
    // SAFETY: `off + size_of::<R>()` is within the block (above), so the
    // write is in bounds; the word before `p` (a multiple of the word size
    // below an `R`-aligned address) is aligned for a pointer.
    unsafe {
        let p = base.add(off).cast::<R>();
        p.cast::<*mut u8>().sub(1).write(base);
        NonNull::new_unchecked(p)
    }
}

/// Move the file at `p` out of its block and free the block.
///
/// # Safety
/// `p` came from `alloc_file::<R>` (or `alloc_block` and was written
/// since), holds a file, and is not used again.
unsafe fn free_file<R>(p: NonNull<R>) -> R {
    // SAFETY: the caller's contract: a file lives at `p`, read out once,
    // and the block is freed once, holding nothing any more.
    unsafe {
        let file = p.as_ptr().read();
        free_block(p);
        file
    }
}

/// Free the block at `p`, which holds no file.
///
/// # Safety
/// `p` came from `alloc_block::<R>`/`alloc_file::<R>`, holds no live
/// file, and is not used again.
unsafe fn free_block<R>(p: NonNull<R>) {
    // SAFETY: `alloc_block` wrote the block's start in the word before
    // `p`; the block was allocated with `file_block::<R>()`.
    unsafe {
        let base = p.as_ptr().cast::<*mut u8>().sub(1).read();
        std::alloc::dealloc(base, file_block::<R>());
    }
}

/// Drop a file reference (Linux fput), for symmetry with `FdTable::fget`;
/// [`FileRef::put`] does the same and reports the backend's release.
pub fn fput<T: Send + Sync, L: Layout>(file: FileRef<T, L>) {
    drop(file);
}

impl<T: Send + Sync, L: Layout> std::fmt::Debug for FileRef<T, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRef")
            .field("layout", &L::NAME)
            .field("ino", &self.ino())
            .field("count", &self.count())
            .field("mode", &format_args!("{:#x}", self.mode()))
            .finish()
    }
}
