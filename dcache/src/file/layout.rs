//! Where an open file's fields sit: the `split` layout (the hot, written
//! fields alone on one cache line) and the `packed` one (the hot fields on
//! the same line as the read-mostly ones, as Linux's struct file had them).
//!
//! Every `fget`/`fput` writes `f_count`; every `read` takes `f_pos_lock` and
//! writes `f_pos`. `f_mode`, `f_op`, `f_inode` and `f_path` are written once
//! at open and then only read, but read by every operation. When both kinds
//! share a line, each count change on one CPU evicts the line another CPU
//! only needed for reading. `split` is the layout of every file the `Vfs`
//! opens; both are compiled into every binary so that one benchmark run
//! compares them; the `const` assertions below keep each honest about what
//! it claims.
//!
//! `f_mode` is the field that decides it. Linux kept it next to `f_count`
//! (the mode bits are checked together with the count: `__fget_files`
//! tests `f_mode & mask` right before taking the reference, `filp_close`
//! tests `FMODE_PATH` right before the final `fput`). With the count and
//! the mode on one line, every such check is a read of the line the other
//! CPUs keep writing: a read miss that fetches it Shared, then the atomic
//! increment or decrement must upgrade it again, two coherence transactions
//! where one RFO would do. Linux's fix (the `file_ref_t` rework, v6.13)
//! moved the count to the end of `struct file`, away from `f_mode` and
//! `f_op`. `split` does the same: its hot line holds only what is
//! written (count, position lock, position); the mode, being written only at
//! open, is read-mostly and sits with `f_op`, `f_inode` and the handle on a
//! line that nobody writes, so those checks hit a Shared line that stays
//! Shared. `packed` keeps the old order: count, mode, ops and inode on one
//! line.

use std::any::type_name;
use std::mem::{align_of, offset_of, size_of, ManuallyDrop};
// The backend handle is plain shared ownership, no part of a lock-free
// protocol, so std's Arc (which coerces to `dyn`) rather than the facade's.
use std::sync::Arc;

use super::FMODE_BORROWED_FS;
use crate::cache_aligned::{CacheAligned, CACHE_LINE};
use crate::fs::{FileSystem, Ino};
use crate::pahole::{short_type_name, FieldLayout, TypeLayout};
use crate::sync::{AtomicU64, AtomicUsize, Mutex};

/// What `open` produced; the cold, read-mostly part of a file.
pub struct OpenParts<T> {
    /// The path the file was opened by (the Vfs puts its dentry reference
    /// here); dropped when the last reference to the file goes.
    pub path: T,
    /// The backend that serves the file.
    pub fs: Arc<dyn FileSystem>,
    /// The open inode's number.
    pub ino: Ino,
    /// The backend's handle from `FileSystem::open`.
    pub fh: u64,
    /// `open(2)` flags.
    pub flags: i32,
}

/// [`OpenParts`] with the backend held as the file will hold it: a file
/// whose mode has [`FMODE_BORROWED_FS`] never drops it.
pub struct NewFile<T> {
    /// As [`OpenParts::path`].
    pub path: T,
    /// As [`OpenParts::fs`], counted or (with `FMODE_BORROWED_FS`) not.
    pub fs: ManuallyDrop<Arc<dyn FileSystem>>,
    /// As [`OpenParts::ino`].
    pub ino: Ino,
    /// As [`OpenParts::fh`].
    pub fh: u64,
    /// As [`OpenParts::flags`].
    pub flags: i32,
}

/// Field access common to both layouts; the fd table and `FileRef` are
/// written once against it.
pub trait FileRepr<T>: Send + Sync + Sized {
    /// A file from `parts` with `FMODE_*` bits `mode` and a count of 1. Its
    /// `f_op` is `parts.fs`, which it drops unless `mode` has
    /// [`FMODE_BORROWED_FS`].
    fn new(parts: NewFile<T>, mode: u32) -> Self;
    /// The reference count.
    fn f_count(&self) -> &AtomicUsize;
    /// The `FMODE_*` bits.
    fn f_mode(&self) -> u32;
    /// Serialises users of the position.
    fn f_pos_lock(&self) -> &Mutex<()>;
    /// Changed only with `f_pos_lock` held (for FMODE_ATOMIC_POS files).
    fn f_pos(&self) -> &AtomicU64;
    /// The path payload.
    fn f_path(&self) -> &T;
    /// The backend.
    fn f_op(&self) -> &Arc<dyn FileSystem>;
    /// The inode number.
    fn f_inode(&self) -> Ino;
    /// The backend's handle.
    fn fh(&self) -> u64;
    /// The `open(2)` flags.
    fn f_flags(&self) -> i32;
    /// Take the path payload out, dropping the rest as `drop` would (a
    /// file whose last reference went, kept for its path: see
    /// [`IdleFile`](super::IdleFile)).
    fn into_path(self) -> T;
}

/// A field placement for open files.
pub trait Layout: Send + Sync + 'static {
    /// The layout's name (`"split"`, `"packed"`).
    const NAME: &'static str;
    /// The file struct this layout lays out.
    type Repr<T: Send + Sync>: FileRepr<T>;
    /// Field offsets and sizes of `Repr<T>`.
    fn describe<T: Send + Sync>() -> LayoutInfo;
}

/// The written-often fields; the rest (`f_mode` among them: it is set at
/// open and only read afterwards) are read-mostly.
pub const HOT_FIELDS: [&str; 3] = ["f_count", "f_pos_lock", "f_pos"];

/// A type's layout as `dcache layout` prints it (made by
/// [`Layout::describe`]; more may be reported later).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayoutInfo {
    /// `"split"` or `"packed"`.
    pub layout: &'static str,
    /// The Rust type name of the file struct.
    pub type_name: &'static str,
    /// `size_of` the struct.
    pub size: usize,
    /// `align_of` the struct.
    pub align: usize,
    /// (field, offset, size), in offset order.
    pub fields: Vec<(&'static str, usize, usize)>,
}

impl LayoutInfo {
    /// Cache lines a field touches (first, last).
    pub fn lines(&self, field: &str) -> Option<(usize, usize)> {
        let &(_, off, size) = self.fields.iter().find(|f| f.0 == field)?;
        Some((off / CACHE_LINE, (off + size.max(1) - 1) / CACHE_LINE))
    }

    /// Does a line holding a hot field also hold a read-mostly one?
    pub fn hot_shares_line_with_cold(&self) -> bool {
        let span =
            |f: &(&str, usize, usize)| (f.1 / CACHE_LINE, (f.1 + f.2.max(1) - 1) / CACHE_LINE);
        let (hot, cold): (Vec<_>, Vec<_>) =
            self.fields.iter().partition(|f| HOT_FIELDS.contains(&f.0));
        hot.iter().any(|h| {
            let (h0, h1) = span(h);
            cold.iter().any(|c| {
                let (c0, c1) = span(c);
                c.2 > 0 && c0 <= h1 && h0 <= c1
            })
        })
    }
}

/// The written fields, alone on their line in `SplitFile`.
#[repr(C)]
pub struct FileHot {
    f_count: AtomicUsize,
    f_pos_lock: Mutex<()>,
    f_pos: AtomicU64,
}

/// Hot fields on line 0, everything read-mostly from line 1 on. What `fget`,
/// `close` and `read` read besides the count (mode, ops, inode, handle)
/// comes first, so it shares line 1 whatever the size of the path payload.
#[repr(C, align(64))]
pub struct SplitFile<T> {
    hot: CacheAligned<FileHot>,
    f_mode: u32,
    f_flags: i32,
    /// Dropped by `Drop` unless `f_mode` has `FMODE_BORROWED_FS`.
    f_op: ManuallyDrop<Arc<dyn FileSystem>>,
    f_inode: Ino,
    fh: u64,
    f_path: T,
}

/// Linux's order before the fix: path, ops and inode, then the count, mode
/// and position lock, all on line 0 (for a pointer-sized `T`): reading the
/// mode or the ops table is a read of the line the count is written on.
#[repr(C, align(64))]
#[cfg(any(test, feature = "experiments"))]
pub struct PackedFile<T> {
    f_path: T,
    /// Dropped by `Drop` unless `f_mode` has `FMODE_BORROWED_FS`.
    f_op: ManuallyDrop<Arc<dyn FileSystem>>,
    f_inode: Ino,
    f_count: AtomicUsize,
    f_flags: i32,
    f_mode: u32,
    f_pos_lock: Mutex<()>,
    f_pos: AtomicU64,
    fh: u64,
}

#[cfg(not(loom))]
const fn line(off: usize) -> usize {
    off / CACHE_LINE
}

#[cfg(not(loom))]
const fn last_line(off: usize, size: usize) -> usize {
    (off + size - 1) / CACHE_LINE
}

// Files are at least line-aligned: the fd table keeps tag bits in the low
// six bits of file pointers, and the line arithmetic starts at offset 0.
const _: () = assert!(align_of::<SplitFile<u8>>() >= CACHE_LINE);
#[cfg(any(test, feature = "experiments"))]
const _: () = assert!(align_of::<PackedFile<u8>>() >= CACHE_LINE);

// The layout claims, checked for the std build (loom's atomics and mutex
// have other sizes).
#[cfg(not(loom))]
const _: () = {
    // split: the hot part fills line 0 exactly, so every read-mostly field,
    // for any payload, starts on a later line.
    assert!(size_of::<FileHot>() <= CACHE_LINE);
    assert!(size_of::<CacheAligned<FileHot>>() == CACHE_LINE);
    assert!(offset_of!(SplitFile<u8>, hot) == 0);
    assert!(offset_of!(SplitFile<()>, f_path) >= CACHE_LINE);
    assert!(offset_of!(SplitFile<()>, f_op) >= CACHE_LINE);
    assert!(offset_of!(SplitFile<usize>, f_path) >= CACHE_LINE);
    assert!(offset_of!(SplitFile<usize>, f_op) >= CACHE_LINE);
    assert!(offset_of!(SplitFile<usize>, f_inode) >= CACHE_LINE);
    assert!(offset_of!(SplitFile<usize>, fh) >= CACHE_LINE);
    assert!(offset_of!(SplitFile<usize>, f_flags) >= CACHE_LINE);
    assert!(offset_of!(SplitFile<usize>, f_mode) >= CACHE_LINE);
    assert!(offset_of!(SplitFile<[u8; 200]>, f_op) >= CACHE_LINE);
    // What the fast path reads besides the count shares one read-mostly
    // line (line 1), for any payload: the payload comes after it.
    type S = SplitFile<[u8; 200]>;
    assert!(line(offset_of!(S, f_mode)) == 1);
    assert!(last_line(offset_of!(S, f_op), size_of::<Arc<dyn FileSystem>>()) == 1);
    assert!(last_line(offset_of!(S, f_inode), size_of::<Ino>()) == 1);
    assert!(last_line(offset_of!(S, fh), 8) == 1);

    // The open file the Vfs makes (`AsCred::open`'s `OpenFile`, whose path is
    // a dentry reference) takes two lines: line 0 the hot part, line 1
    // everything read-mostly, its path included.
    type O = SplitFile<crate::vfs::DentryRef<'static>>;
    assert!(size_of::<O>() == 2 * CACHE_LINE);
    assert!(line(offset_of!(O, f_mode)) == 1);
    assert!(line(offset_of!(O, f_path)) == 1);
    assert!(
        last_line(
            offset_of!(O, f_path),
            size_of::<crate::vfs::DentryRef<'static>>()
        ) == 1
    );
};

#[cfg(all(not(loom), any(test, feature = "experiments")))]
const _: () = {
    // packed: with a pointer-sized path, count, mode and position lock share
    // line 0 with path, ops and inode.
    type P = PackedFile<usize>;
    let l = line(offset_of!(P, f_count));
    assert!(l == 0);
    assert!(line(offset_of!(P, f_path)) == l);
    assert!(line(offset_of!(P, f_op)) == l);
    assert!(line(offset_of!(P, f_inode)) == l);
    assert!(line(offset_of!(P, f_mode)) == l);
    assert!(last_line(offset_of!(P, f_pos_lock), size_of::<Mutex<()>>()) == l);
    assert!(last_line(offset_of!(P, f_pos), 8) == l);
};

/// Drop `f_op` if the file holds a count of it.
fn drop_f_op(f_op: &mut ManuallyDrop<Arc<dyn FileSystem>>, mode: u32) {
    if mode & FMODE_BORROWED_FS == 0 {
        // SAFETY: without FMODE_BORROWED_FS `f_op` is the counted Arc the
        // opener gave, dropped here once, by the file's own drop.
        unsafe { ManuallyDrop::drop(f_op) }
    }
}

impl<T> Drop for SplitFile<T> {
    fn drop(&mut self) {
        drop_f_op(&mut self.f_op, self.f_mode);
    }
}

#[cfg(any(test, feature = "experiments"))]
impl<T> Drop for PackedFile<T> {
    fn drop(&mut self) {
        drop_f_op(&mut self.f_op, self.f_mode);
    }
}

impl<T: Send + Sync> FileRepr<T> for SplitFile<T> {
    fn new(p: NewFile<T>, mode: u32) -> Self {
        SplitFile {
            hot: CacheAligned::new(FileHot {
                f_count: AtomicUsize::new(1),
                f_pos_lock: Mutex::new(()),
                f_pos: AtomicU64::new(0),
            }),
            f_mode: mode,
            f_flags: p.flags,
            f_op: p.fs,
            f_inode: p.ino,
            fh: p.fh,
            f_path: p.path,
        }
    }
    fn f_count(&self) -> &AtomicUsize {
        &self.hot.f_count
    }
    fn f_mode(&self) -> u32 {
        self.f_mode
    }
    fn f_pos_lock(&self) -> &Mutex<()> {
        &self.hot.f_pos_lock
    }
    fn f_pos(&self) -> &AtomicU64 {
        &self.hot.f_pos
    }
    fn f_path(&self) -> &T {
        &self.f_path
    }
    fn f_op(&self) -> &Arc<dyn FileSystem> {
        &self.f_op
    }
    fn f_inode(&self) -> Ino {
        self.f_inode
    }
    fn fh(&self) -> u64 {
        self.fh
    }
    fn f_flags(&self) -> i32 {
        self.f_flags
    }
    fn into_path(self) -> T {
        let mut f = ManuallyDrop::new(self);
        let mode = f.f_mode;
        drop_f_op(&mut f.f_op, mode);
        // SAFETY: `f` is never dropped, so each field is read or dropped
        // here once: the path moved out, the hot part dropped in place
        // (`f_op` just above; the rest are plain values).
        unsafe {
            std::ptr::drop_in_place(&mut f.hot);
            std::ptr::read(&f.f_path)
        }
    }
}

#[cfg(any(test, feature = "experiments"))]
impl<T: Send + Sync> FileRepr<T> for PackedFile<T> {
    fn new(p: NewFile<T>, mode: u32) -> Self {
        PackedFile {
            f_path: p.path,
            f_op: p.fs,
            f_inode: p.ino,
            f_count: AtomicUsize::new(1),
            f_flags: p.flags,
            f_mode: mode,
            f_pos_lock: Mutex::new(()),
            f_pos: AtomicU64::new(0),
            fh: p.fh,
        }
    }
    fn f_count(&self) -> &AtomicUsize {
        &self.f_count
    }
    fn f_mode(&self) -> u32 {
        self.f_mode
    }
    fn f_pos_lock(&self) -> &Mutex<()> {
        &self.f_pos_lock
    }
    fn f_pos(&self) -> &AtomicU64 {
        &self.f_pos
    }
    fn f_path(&self) -> &T {
        &self.f_path
    }
    fn f_op(&self) -> &Arc<dyn FileSystem> {
        &self.f_op
    }
    fn f_inode(&self) -> Ino {
        self.f_inode
    }
    fn fh(&self) -> u64 {
        self.fh
    }
    fn f_flags(&self) -> i32 {
        self.f_flags
    }
    fn into_path(self) -> T {
        let mut f = ManuallyDrop::new(self);
        let mode = f.f_mode;
        drop_f_op(&mut f.f_op, mode);
        // SAFETY: `f` is never dropped, so each field is read or dropped
        // here once: the path moved out, the lock and atomics dropped in
        // place (`f_op` just above; the rest are plain values).
        unsafe {
            std::ptr::drop_in_place(&mut f.f_count);
            std::ptr::drop_in_place(&mut f.f_pos_lock);
            std::ptr::drop_in_place(&mut f.f_pos);
            std::ptr::read(&f.f_path)
        }
    }
}

/// Layout `L` for payload `T` as `dcache layout` prints it, with the
/// [`HOT_FIELDS`] marked.
pub fn type_layout<T: Send + Sync, L: Layout>() -> TypeLayout {
    let info = L::describe::<T>();
    let ty = |name: &str| {
        short_type_name(match name {
            "f_count" => type_name::<AtomicUsize>(),
            "f_mode" => type_name::<u32>(),
            "f_pos_lock" => type_name::<Mutex<()>>(),
            "f_pos" => type_name::<AtomicU64>(),
            "f_path" => type_name::<T>(),
            "f_op" => type_name::<Arc<dyn FileSystem>>(),
            "f_inode" => "Ino",
            "fh" => type_name::<u64>(),
            "f_flags" => type_name::<i32>(),
            other => other,
        })
    };
    TypeLayout {
        name: short_type_name(info.type_name),
        size: info.size,
        align: info.align,
        fields: info
            .fields
            .iter()
            .map(|&(name, offset, size)| FieldLayout {
                name,
                ty: ty(name),
                offset,
                size,
            })
            .collect(),
        hot: HOT_FIELDS.to_vec(),
    }
}

/// Hot fields on their own line.
pub struct Split;
/// Hot and read-mostly fields mixed (Linux before the fix): the
/// benchmark's comparison (`experiments` feature).
#[cfg(any(test, feature = "experiments"))]
pub struct Packed;

fn sorted(mut fields: Vec<(&'static str, usize, usize)>) -> Vec<(&'static str, usize, usize)> {
    fields.sort_by_key(|f| f.1);
    fields
}

impl Layout for Split {
    const NAME: &'static str = "split";
    type Repr<T: Send + Sync> = SplitFile<T>;

    fn describe<T: Send + Sync>() -> LayoutInfo {
        type S<T> = SplitFile<T>;
        LayoutInfo {
            layout: Self::NAME,
            type_name: std::any::type_name::<SplitFile<T>>(),
            size: size_of::<S<T>>(),
            align: align_of::<S<T>>(),
            fields: sorted(vec![
                (
                    "f_count",
                    offset_of!(S<T>, hot.0.f_count),
                    size_of::<AtomicUsize>(),
                ),
                ("f_mode", offset_of!(S<T>, f_mode), size_of::<u32>()),
                (
                    "f_pos_lock",
                    offset_of!(S<T>, hot.0.f_pos_lock),
                    size_of::<Mutex<()>>(),
                ),
                (
                    "f_pos",
                    offset_of!(S<T>, hot.0.f_pos),
                    size_of::<AtomicU64>(),
                ),
                ("f_path", offset_of!(S<T>, f_path), size_of::<T>()),
                (
                    "f_op",
                    offset_of!(S<T>, f_op),
                    size_of::<Arc<dyn FileSystem>>(),
                ),
                ("f_inode", offset_of!(S<T>, f_inode), size_of::<Ino>()),
                ("fh", offset_of!(S<T>, fh), size_of::<u64>()),
                ("f_flags", offset_of!(S<T>, f_flags), size_of::<i32>()),
            ]),
        }
    }
}

#[cfg(any(test, feature = "experiments"))]
impl Layout for Packed {
    const NAME: &'static str = "packed";
    type Repr<T: Send + Sync> = PackedFile<T>;

    fn describe<T: Send + Sync>() -> LayoutInfo {
        type P<T> = PackedFile<T>;
        LayoutInfo {
            layout: Self::NAME,
            type_name: std::any::type_name::<PackedFile<T>>(),
            size: size_of::<P<T>>(),
            align: align_of::<P<T>>(),
            fields: sorted(vec![
                ("f_path", offset_of!(P<T>, f_path), size_of::<T>()),
                (
                    "f_op",
                    offset_of!(P<T>, f_op),
                    size_of::<Arc<dyn FileSystem>>(),
                ),
                ("f_inode", offset_of!(P<T>, f_inode), size_of::<Ino>()),
                (
                    "f_count",
                    offset_of!(P<T>, f_count),
                    size_of::<AtomicUsize>(),
                ),
                ("f_flags", offset_of!(P<T>, f_flags), size_of::<i32>()),
                ("f_mode", offset_of!(P<T>, f_mode), size_of::<u32>()),
                (
                    "f_pos_lock",
                    offset_of!(P<T>, f_pos_lock),
                    size_of::<Mutex<()>>(),
                ),
                ("f_pos", offset_of!(P<T>, f_pos), size_of::<AtomicU64>()),
                ("fh", offset_of!(P<T>, fh), size_of::<u64>()),
            ]),
        }
    }
}
