//! The dcache's in-memory inode: a cached copy of the backend's attributes
//! that `stat` reads without a lock or a reference, plus what the walk needs
//! (the file type, a cached symlink target) and the per-directory lock that
//! orders slow lookups against creates and unlinks (Linux's `i_rwsem`).
//!
//! Attributes live in atomics under a sequence counter: a reader copies them
//! with Relaxed loads and retries if `i_seq` moved, so a torn copy is never
//! returned and no read is a data race.

use crate::fs::{Attr, FileType, Ino, Timespec};
use crate::lookupcount::LookupCount;
use crate::permission::Perm;
use crate::seqcount::SeqCount;
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const ATTR_WORDS: usize = 11;

/// The cached inode one or more dentries point to (Linux's `struct inode`):
/// the backend's inode number, file type and a copy of its attributes.
pub struct Inode {
    pub(crate) ino: Ino,
    pub(crate) kind: FileType,
    /// The full `st_mode`, also kept on its own so that the walk's search
    /// check reads one word next to `kind` (written with `attr`).
    i_mode: AtomicU32,
    /// Guards `attr` (and orders `i_mode` with it).
    i_seq: SeqCount,
    attr: [AtomicU64; ATTR_WORDS],
    /// The symlink target, set once (symlinks are immutable) and freed with
    /// the inode; null until first read. Lets rcu-walk follow links.
    link: AtomicPtr<Box<[u8]>>,
    /// How many dentries point here (changed under the Vfs's inode-map lock).
    pub(crate) i_dentries: AtomicUsize,
    /// Backend replies absorbed into this object (see `FileSystem::forget`);
    /// changed under the inode-map lock.
    pub(crate) i_nlookup: AtomicU64,
    /// The lookup count a frontend keeps for this inode (FUSE: the kernel's
    /// count of entry replies naming it; see [`crate::lookupcount`]). Zero
    /// and untouched for library users.
    pub(crate) i_lookups: LookupCount,
    /// Directory lock: shared for slow lookups, exclusive for changes.
    pub(crate) i_rwsem: std::sync::RwLock<()>,
    /// Serialises attribute writers (`i_seq` needs one writer at a time).
    attr_lock: std::sync::Mutex<()>,
}

fn pack(a: &Attr) -> [u64; ATTR_WORDS] {
    [
        a.ino,
        a.size,
        a.blocks,
        a.atime.sec as u64,
        a.mtime.sec as u64,
        a.ctime.sec as u64,
        (a.atime.nsec as u64) << 32 | a.mtime.nsec as u64,
        (a.ctime.nsec as u64) << 32 | a.mode() as u64,
        (a.nlink as u64) << 32 | a.uid as u64,
        (a.gid as u64) << 32 | a.rdev as u64,
        a.blksize as u64,
    ]
}

fn unpack(w: &[u64; ATTR_WORDS], kind: FileType) -> Attr {
    let mode = w[7] as u32;
    Attr {
        ino: w[0],
        size: w[1],
        blocks: w[2],
        atime: Timespec {
            sec: w[3] as i64,
            nsec: (w[6] >> 32) as u32,
        },
        mtime: Timespec {
            sec: w[4] as i64,
            nsec: w[6] as u32,
        },
        ctime: Timespec {
            sec: w[5] as i64,
            nsec: (w[7] >> 32) as u32,
        },
        kind,
        perm: (mode & 0o7777) as u16,
        nlink: (w[8] >> 32) as u32,
        uid: w[8] as u32,
        gid: (w[9] >> 32) as u32,
        rdev: w[9] as u32,
        blksize: w[10] as u32,
    }
}

impl Inode {
    pub(crate) fn new(attr: &Attr) -> Inode {
        let w = pack(attr);
        Inode {
            ino: attr.ino,
            kind: attr.kind,
            i_mode: AtomicU32::new(attr.mode()),
            i_seq: SeqCount::new(),
            attr: std::array::from_fn(|i| AtomicU64::new(w[i])),
            link: AtomicPtr::new(std::ptr::null_mut()),
            i_dentries: AtomicUsize::new(0),
            i_nlookup: AtomicU64::new(0),
            i_lookups: LookupCount::new(),
            i_rwsem: std::sync::RwLock::new(()),
            attr_lock: std::sync::Mutex::new(()),
        }
    }

    /// The backend's inode number.
    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// The file type (fixed for the inode's life).
    pub fn kind(&self) -> FileType {
        self.kind
    }

    /// True for a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    /// The full `st_mode` now (one load; not ordered with the other
    /// attributes).
    #[inline(always)]
    pub fn mode(&self) -> u32 {
        // Relaxed: a single word whose old or new value is an answer.
        self.i_mode.load(Ordering::Relaxed)
    }

    /// Mode, owner and group as one consistent triple (for permission
    /// checks); `None` if a writer interfered.
    #[inline]
    pub(crate) fn try_perm(&self) -> Option<Perm> {
        let s = self.i_seq.raw_begin();
        if s & 1 != 0 {
            return None;
        }
        // Relaxed: ordered by the seqcount's Acquire load and fence.
        let w7 = self.attr[7].load(Ordering::Relaxed);
        let w8 = self.attr[8].load(Ordering::Relaxed);
        let w9 = self.attr[9].load(Ordering::Relaxed);
        if self.i_seq.read_retry(s) {
            return None;
        }
        Some(Perm {
            mode: self.kind.mode_bits() | (w7 as u32 & 0o7777),
            uid: w8 as u32,
            gid: (w9 >> 32) as u32,
        })
    }

    /// The count of kernel lookups a FUSE frontend has handed out for this
    /// inode (see [`crate::lookupcount`]); zero for library users.
    pub fn lookups(&self) -> &LookupCount {
        &self.i_lookups
    }

    /// Mode, owner and group as one consistent triple, for the
    /// [`permission`](crate::permission) checks (retried while a writer
    /// is updating the attributes).
    pub fn perm(&self) -> Perm {
        loop {
            if let Some(p) = self.try_perm() {
                return p;
            }
            crate::sync::spin_hint();
        }
    }

    /// Copy the cached attributes. Lock-free and store-free; retries only
    /// while a writer is updating them.
    #[inline]
    pub fn attr(&self) -> Attr {
        loop {
            if let Some(a) = self.try_attr() {
                return a;
            }
            crate::sync::spin_hint();
        }
    }

    /// One attempt at a consistent copy; `None` if a writer interfered.
    #[inline(always)]
    pub(crate) fn try_attr(&self) -> Option<Attr> {
        let s = self.i_seq.raw_begin();
        if s & 1 != 0 {
            return None;
        }
        // Relaxed: ordered by the seqcount's Acquire load and fence.
        let w: [u64; ATTR_WORDS] = std::array::from_fn(|i| self.attr[i].load(Ordering::Relaxed));
        if self.i_seq.read_retry(s) {
            return None;
        }
        Some(unpack(&w, self.kind))
    }

    /// Replace the cached attributes with what the backend reported. The
    /// type of an inode never changes; a backend that says otherwise gave us
    /// a different inode under a reused number, which the caller handles.
    pub(crate) fn set_attr(&self, attr: &Attr) {
        let w = pack(attr);
        let _g = self.attr_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.i_seq.write_begin();
        for (slot, v) in self.attr.iter().zip(w) {
            // Relaxed: published by the seqcount's write_end (Release).
            slot.store(v, Ordering::Relaxed);
        }
        // Relaxed: as above; a lone reader of the mode sees the old or the
        // new one, as Linux's rcu-walk reads i_mode.
        self.i_mode.store(attr.mode(), Ordering::Relaxed);
        self.i_seq.write_end();
    }

    /// The cached symlink target, if one has been read.
    ///
    /// The returned slice lives as long as the inode, which outlives any rcu
    /// read section that reached it.
    pub(crate) fn cached_link(&self) -> Option<&[u8]> {
        // Acquire: pairs with the Release publication in `cache_link`.
        let p = self.link.load(Ordering::Acquire);
        if p.is_null() {
            None
        } else {
            // SAFETY: a non-null `link` points to a Box published once and
            // freed only when the inode itself is freed.
            Some(unsafe { &**p })
        }
    }

    /// Remember a symlink target (first writer wins; targets never change).
    pub(crate) fn cache_link(&self, target: &[u8]) {
        let b = Box::into_raw(Box::new(target.to_vec().into_boxed_slice()));
        // Release: the target bytes are visible before the pointer.
        if self
            .link
            .compare_exchange(
                std::ptr::null_mut(),
                b,
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_err()
        {
            // SAFETY: `b` was never published.
            drop(unsafe { Box::from_raw(b) });
        }
    }
}

impl Drop for Inode {
    fn drop(&mut self) {
        let p = self.link.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: we own the inode exclusively now; the Box was leaked by
            // `cache_link` and is freed exactly here.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
