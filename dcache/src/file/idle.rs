//! Idle files: what is left of an open file after its last `fput`, kept
//! for the next open of the same path (Linux keeps freed `struct file`s in
//! a per-CPU slab cache; this keeps the path reference too).
//!
//! An [`IdleFile`] owns the file's memory block (no file in it any more:
//! the backend was released and the rest dropped) and the path payload,
//! still held. Reopening writes a new file into the same block with the
//! same path: no allocation, and no write to whatever the path counts
//! (for the Vfs, the dentry's lockref).

use std::mem::{size_of, ManuallyDrop};
use std::ptr::NonNull;
use std::sync::Arc;

use super::PhantomData;
use super::{borrowing_parts, free_block, FileRef, FileRepr, Layout};
use crate::errno::Result;
use crate::fs::{FileSystem, Ino};
use crate::sync::{fence, Ordering};

/// A released file's block and path, for the next open of that path: see
/// the module docs. Dropping it frees the block and drops the path.
pub struct IdleFile<T: Send + Sync, L: Layout> {
    /// A block from `alloc_block`, with no file in it.
    block: NonNull<L::Repr<T>>,
    path: ManuallyDrop<T>,
}

// SAFETY: the block is memory this value owns alone (no file lives in it);
// the path is `T`, Send + Sync.
unsafe impl<T: Send + Sync, L: Layout> Send for IdleFile<T, L> {}
// SAFETY: `&IdleFile` gives only `&T`.
unsafe impl<T: Send + Sync, L: Layout> Sync for IdleFile<T, L> {}

impl<T: Send + Sync, L: Layout> IdleFile<T, L> {
    /// The path the file was opened by, still held.
    pub fn path(&self) -> &T {
        &self.path
    }

    /// The path, given up; the block is freed.
    pub fn into_path(self) -> T {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped: the path moves out once, and the
        // block (no file in it) is freed once.
        unsafe {
            free_block(this.block);
            ManuallyDrop::take(&mut this.path)
        }
    }

    /// A new open file in this block with this path, its `f_op` borrowing
    /// `fs` (as [`FileRef::open_borrowing_fs`](super::FileRef)).
    ///
    /// # Safety
    /// As `open_borrowing_fs`: the count `fs` is outlives the file.
    pub(crate) unsafe fn reopen_borrowing_fs(
        self,
        fs: &Arc<dyn FileSystem>,
        ino: Ino,
        fh: u64,
        flags: i32,
        extra: u32,
    ) -> FileRef<T, L> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the path moves out once.
        let path = unsafe { ManuallyDrop::take(&mut this.path) };
        // SAFETY: the caller's contract is `borrowing_parts`'s.
        let (parts, mode) = unsafe { borrowing_parts(path, fs, ino, fh, flags, extra) };
        let file = <L::Repr<T> as FileRepr<T>>::new(parts, mode);
        // SAFETY: the block is ours, sized and aligned for the file, and
        // holds none: the write does not overwrite a live value.
        unsafe { this.block.as_ptr().write(file) };
        FileRef {
            ptr: this.block,
            _owns: PhantomData,
        }
    }
}

impl<T: Send + Sync, L: Layout> Drop for IdleFile<T, L> {
    fn drop(&mut self) {
        // SAFETY: dropped once; the block holds no file.
        unsafe {
            free_block(self.block);
            ManuallyDrop::drop(&mut self.path);
        }
    }
}

impl<T: Send + Sync, L: Layout> FileRef<T, L> {
    /// Drop this reference (Linux fput); when it was the last, release the
    /// backend (its result is the first half) and keep the block and the
    /// path as an [`IdleFile`] rather than freeing and dropping them.
    pub fn put_idle(self) -> (Result<()>, Option<IdleFile<T, L>>) {
        let this = ManuallyDrop::new(self);
        // Release: this holder's uses of the file happen before the last
        // holder takes it apart.
        if this.f().f_count().fetch_sub(1, Ordering::Release) != 1 {
            return (Ok(()), None);
        }
        // Acquire: pairs with every other holder's Release decrement.
        fence(Ordering::Acquire);
        // SAFETY: the count reached zero: no other reference exists, and
        // this one is never used again (`this` is not dropped), so the file
        // moves out of its block once; the block stays allocated.
        let file = unsafe { this.ptr.as_ptr().read() };
        let r = file.f_op().release(file.f_inode(), file.fh());
        let path = file.into_path();
        let idle = IdleFile {
            block: this.ptr,
            path: ManuallyDrop::new(path),
        };
        (r, Some(idle))
    }
}

const _: () = assert!(size_of::<IdleFile<usize, super::Split>>() == 2 * size_of::<usize>());

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::file::{OpenParts, Packed, Split, FMODE_BORROWED_FS};
    use crate::fs::Attr;
    use crate::Errno;
    use std::sync::atomic::AtomicUsize;

    #[derive(Default)]
    struct CountFs {
        releases: AtomicUsize,
    }

    impl FileSystem for CountFs {
        fn root(&self) -> Ino {
            1
        }
        fn lookup(&self, _dir: Ino, _name: &[u8]) -> Result<Option<Attr>> {
            Ok(None)
        }
        fn getattr(&self, _ino: Ino) -> Result<Attr> {
            Err(Errno::ENOENT)
        }
        fn release(&self, _ino: Ino, fh: u64) -> Result<()> {
            self.releases
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if fh == 13 {
                return Err(Errno::EIO);
            }
            Ok(())
        }
    }

    fn idle_cycle<L: Layout>() {
        let fs: Arc<dyn FileSystem> = Arc::new(CountFs::default());
        let counts = || {
            let fs = Arc::as_ptr(&fs) as *const CountFs;
            // SAFETY: `fs` is the CountFs made above, alive here.
            unsafe { &*fs }
                .releases
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        let path = Arc::new(7u32);
        let f = FileRef::<Arc<u32>, L>::open(OpenParts {
            path: path.clone(),
            fs: fs.clone(),
            ino: 5,
            fh: 13,
            flags: libc::O_RDONLY,
        });
        let g = f.clone();
        let (r, idle) = g.put_idle();
        assert!(r.is_ok() && idle.is_none(), "not the last reference");
        assert_eq!(counts(), 0);
        let p = f.clone().into_raw();
        assert_eq!(
            p as usize % crate::cache_aligned::LINE_PAIR,
            0,
            "a file starts on a line pair of its own"
        );
        // SAFETY: from `into_raw` just above, taken back once.
        drop(unsafe { FileRef::<Arc<u32>, L>::from_raw(p) });
        let (r, idle) = f.put_idle();
        assert_eq!(r, Err(Errno::EIO), "release's answer");
        assert_eq!(counts(), 1);
        let idle = idle.expect("the last reference leaves the file idle");
        assert_eq!(Arc::strong_count(&path), 2, "the path is still held");
        assert_eq!(**idle.path(), 7);
        // SAFETY: `fs` outlives the file (dropped at the end of the test).
        let f = unsafe { idle.reopen_borrowing_fs(&fs, 6, 14, libc::O_RDWR, 0) };
        assert_eq!(f.clone().into_raw(), p, "the same block");
        // SAFETY: as above.
        drop(unsafe { FileRef::<Arc<u32>, L>::from_raw(p) });
        assert_eq!(
            (f.count(), f.ino(), f.fh(), f.flags()),
            (1, 6, 14, libc::O_RDWR)
        );
        assert_eq!(f.mode() & FMODE_BORROWED_FS, FMODE_BORROWED_FS);
        // The first file's counted f_op went when it fell idle; the new
        // one borrows.
        assert_eq!(Arc::strong_count(&fs), 1, "borrowed: no count taken");
        let (r, idle) = f.put_idle();
        assert!(r.is_ok());
        assert_eq!(counts(), 2);
        let idle = idle.unwrap();
        assert_eq!(Arc::strong_count(&fs), 1);
        assert_eq!(Arc::into_inner(idle.into_path()), None, "ours is left");
        assert_eq!(Arc::strong_count(&path), 1, "the idle file's path went");
        // And one simply dropped frees its block and its path.
        let f = FileRef::<Arc<u32>, L>::open(OpenParts {
            path: path.clone(),
            fs: fs.clone(),
            ino: 5,
            fh: 1,
            flags: libc::O_RDONLY,
        });
        drop(f.put_idle().1);
        assert_eq!(Arc::strong_count(&path), 1);
        assert_eq!(Arc::strong_count(&fs), 1, "the counted f_op was dropped");
    }

    #[test]
    fn idle_file_split() {
        idle_cycle::<Split>();
    }

    #[test]
    fn idle_file_packed() {
        idle_cycle::<Packed>();
    }
}
