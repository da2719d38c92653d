//! The dcache's in-memory inode: a cached copy of the backend's attributes
//! that `stat` reads without a lock or a reference, plus what the walk needs
//! (the file type, a cached symlink target) and the per-directory lock that
//! orders slow lookups against creates and unlinks (Linux's `i_rwsem`).
//!
//! Attributes live in atomics under a sequence counter: a reader copies them
//! with Relaxed loads and retries if `i_seq` moved, so a torn copy is never
//! returned and no read is a data race.

use crate::fs::{Attr, FileType, Ino, Timespec};
use crate::permission::{Perm, I_ACL, I_ACL_BITS, I_ACL_UNKNOWN};
use crate::seqcount::SeqCount;
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// The attributes other than `ino` (immutable, a field of its own) and the
/// mode (`i_mode`), packed: see `pack`.
const ATTR_WORDS: usize = 9;

/// The cached inode one or more dentries point to (Linux's `struct inode`):
/// the backend's inode number, file type and a copy of its attributes.
///
/// Fields are ordered by size; the `const` asserts below keep the object
/// at 128 bytes, the size of the slab slot it lives in (`Super::inode_cache`).
/// What was cut to get there: the type is read from `i_mode`'s `S_IFMT` bits
/// (which never change) rather than kept in a field of its own, the
/// attribute words do not repeat `ino` and the mode, and attribute writers
/// are serialised by `i_seq` itself (a seqlock) rather than a mutex.
pub struct Inode {
    pub(crate) ino: Ino,
    attr: [AtomicU64; ATTR_WORDS],
    /// The symlink target, set once (symlinks are immutable) and freed with
    /// the inode; null until first read. Lets rcu-walk follow links.
    link: AtomicPtr<Box<[u8]>>,
    /// Backend replies absorbed into this object (see `FileSystem::forget`);
    /// changed under the inode-map lock.
    pub(crate) i_nlookup: AtomicU64,
    /// The frontend's word ([`Inode::frontend_word`]; Linux's `i_private`).
    /// dcache zeroes it at allocation and never touches it again. It sits
    /// where the FUSE lookup count it holds used to sit: a word the
    /// frontend writes on every kernel LOOKUP, next to `i_nlookup`.
    i_frontend: AtomicU64,
    /// The full `st_mode`: the type bits (fixed for the inode's life) give
    /// `kind()`, and the walk's search check reads the permission bits
    /// with one load (written with `attr`, inside the `i_seq` section).
    i_mode: AtomicU32,
    /// Guards `attr` and `i_mode`; also the lock that serialises attribute
    /// writers (`SeqCount::write_lock`).
    i_seq: SeqCount,
    /// How many dentries point here (changed under the Vfs's inode-map lock).
    pub(crate) i_dentries: AtomicU32,
    /// Directory lock: shared for slow lookups, exclusive for changes.
    pub(crate) i_rwsem: crate::sync::RwLock<()>,
}

// The size rule, checked at build time (not under loom, whose atomics are
// larger): one inode per 128-byte slab slot.
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Inode>() <= 128);
#[cfg(not(loom))]
const _: () = assert!(std::mem::align_of::<Inode>() == 8);

/// `a` minus `ino` and the mode, as the words `attr` holds. Nanoseconds and
/// the 32-bit fields share words.
fn pack(a: &Attr) -> [u64; ATTR_WORDS] {
    [
        a.size,
        a.blocks,
        a.atime.sec as u64,
        a.mtime.sec as u64,
        a.ctime.sec as u64,
        (a.atime.nsec as u64) << 32 | a.mtime.nsec as u64,
        (a.ctime.nsec as u64) << 32 | a.blksize as u64,
        (a.nlink as u64) << 32 | a.uid as u64,
        (a.gid as u64) << 32 | a.rdev as u64,
    ]
}

#[inline(always)]
fn unpack(ino: Ino, w: &[u64; ATTR_WORDS], mode: u32) -> Attr {
    Attr {
        ino,
        size: w[0],
        blocks: w[1],
        atime: Timespec {
            sec: w[2] as i64,
            nsec: (w[5] >> 32) as u32,
        },
        mtime: Timespec {
            sec: w[3] as i64,
            nsec: w[5] as u32,
        },
        ctime: Timespec {
            sec: w[4] as i64,
            nsec: (w[6] >> 32) as u32,
        },
        kind: kind_of(mode),
        perm: (mode & 0o7777) as u16,
        nlink: (w[7] >> 32) as u32,
        uid: w[7] as u32,
        gid: (w[8] >> 32) as u32,
        rdev: w[8] as u32,
        blksize: w[6] as u32,
    }
}

/// `attr`'s `st_mode`, permission bits kept out of the type bits whatever
/// the backend put in `perm`.
fn imode(attr: &Attr) -> u32 {
    attr.kind.mode_bits() | (attr.perm as u32 & 0o7777)
}

/// A new inode's ACL state: unknown (read on the first check that needs
/// it), except for symlinks, which never have one.
fn initial_acl_state(attr: &Attr) -> u32 {
    if attr.kind == FileType::Symlink {
        0
    } else {
        I_ACL_UNKNOWN
    }
}

/// `S_IFMT >> 12` -> type: a table, so that decoding the type every `stat`
/// returns costs one load rather than a chain of compares.
const KINDS: [FileType; 16] = {
    let mut t = [FileType::Regular; 16];
    let all = [
        (libc::S_IFREG, FileType::Regular),
        (libc::S_IFDIR, FileType::Directory),
        (libc::S_IFLNK, FileType::Symlink),
        (libc::S_IFCHR, FileType::CharDevice),
        (libc::S_IFBLK, FileType::BlockDevice),
        (libc::S_IFIFO, FileType::Fifo),
        (libc::S_IFSOCK, FileType::Socket),
    ];
    let mut i = 0;
    while i < all.len() {
        t[(all[i].0 >> 12) as usize & 15] = all[i].1;
        i += 1;
    }
    t
};

/// The type in an inode's mode. Every inode's mode was made by `imode`, so
/// the bits are always one of the known types.
#[inline(always)]
fn kind_of(mode: u32) -> FileType {
    KINDS[(mode >> 12) as usize & 15]
}

impl Inode {
    pub(crate) fn new(attr: &Attr) -> Inode {
        let w = pack(attr);
        Inode {
            ino: attr.ino,
            attr: std::array::from_fn(|i| AtomicU64::new(w[i])),
            link: AtomicPtr::new(std::ptr::null_mut()),
            i_nlookup: AtomicU64::new(0),
            i_frontend: AtomicU64::new(0),
            i_mode: AtomicU32::new(imode(attr) | initial_acl_state(attr)),
            i_seq: SeqCount::new(),
            i_dentries: AtomicU32::new(0),
            i_rwsem: crate::sync::RwLock::new(()),
        }
    }

    /// Start loading what a walk reads next (a hint, see
    /// `crate::prefetch`): the mode word, which a step tests, and with
    /// `attrs` every attribute word, which `stat` copies out.
    #[inline(always)]
    pub(crate) fn prefetch(&self, attrs: bool) {
        crate::prefetch::prefetch(&self.i_mode);
        if attrs {
            crate::prefetch::prefetch(&self.attr[0]);
            crate::prefetch::prefetch(&self.attr[ATTR_WORDS - 1]);
        }
    }

    /// The backend's inode number.
    pub fn ino(&self) -> Ino {
        self.ino
    }

    /// The file type (the `S_IFMT` bits of the mode, which never change).
    #[inline(always)]
    pub fn kind(&self) -> FileType {
        kind_of(self.mode_word())
    }

    /// True for a directory.
    #[inline(always)]
    pub fn is_dir(&self) -> bool {
        self.mode_word() & libc::S_IFMT == libc::S_IFDIR
    }

    /// True for a symbolic link.
    #[inline(always)]
    pub fn is_symlink(&self) -> bool {
        self.mode_word() & libc::S_IFMT == libc::S_IFLNK
    }

    /// The full `st_mode` now (one load; not ordered with the other
    /// attributes).
    #[inline(always)]
    pub fn mode(&self) -> u32 {
        self.mode_word() & !I_ACL_BITS
    }

    /// The mode word as stored: `st_mode` plus the ACL state bits
    /// (`I_ACL_UNKNOWN`, `I_ACL`), which the walk's search test reads
    /// with the permission bits in one load.
    #[inline(always)]
    pub(crate) fn mode_word(&self) -> u32 {
        // Relaxed: a single word whose old or new value is an answer.
        self.i_mode.load(Ordering::Relaxed)
    }

    /// Whether the inode has an access ACL: `Some(false)` none,
    /// `Some(true)` one (the Vfs caches it), `None` not read yet.
    #[inline]
    pub(crate) fn acl_state(&self) -> Option<bool> {
        let w = self.mode_word();
        if w & I_ACL_UNKNOWN != 0 {
            None
        } else {
            Some(w & I_ACL != 0)
        }
    }

    /// Record the ACL state (`None`: unknown, read it again); a writer of
    /// the mode word like `set_attr`, so serialised with it.
    pub(crate) fn set_acl_state(&self, state: Option<bool>) {
        let bits = match state {
            None => I_ACL_UNKNOWN,
            Some(true) => I_ACL,
            Some(false) => 0,
        };
        self.i_seq.write_lock();
        // Relaxed: inside the write section; published by write_end.
        let m = self.i_mode.load(Ordering::Relaxed);
        self.i_mode
            .store((m & !I_ACL_BITS) | bits, Ordering::Relaxed);
        self.i_seq.write_end();
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
        let mode = self.i_mode.load(Ordering::Relaxed);
        let w7 = self.attr[7].load(Ordering::Relaxed);
        let w8 = self.attr[8].load(Ordering::Relaxed);
        if self.i_seq.read_retry(s) {
            return None;
        }
        Some(Perm {
            mode: mode & (libc::S_IFMT | 0o7777),
            uid: w7 as u32,
            gid: (w8 >> 32) as u32,
        })
    }

    /// One word owned by the frontend that serves this cache (Linux's
    /// `i_private`, or the state `fuse_inode` wraps around its `inode`):
    /// dcache-fuse keeps the kernel's lookup count of the node here. dcache
    /// never reads or writes it after zeroing it when the inode is
    /// allocated; what it means, and which orderings its accesses need, is
    /// the frontend's protocol. It lives as long as the inode (a cached
    /// inode is reused for every dentry naming the same backend inode, and
    /// freed a grace period after the last one lets it go). A library user
    /// with no frontend leaves it alone.
    #[inline(always)]
    pub fn frontend_word(&self) -> &AtomicU64 {
        &self.i_frontend
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
        let mode = self.i_mode.load(Ordering::Relaxed);
        if self.i_seq.read_retry(s) {
            return None;
        }
        Some(unpack(self.ino, &w, mode))
    }

    /// Replace the cached attributes with what the backend reported. The
    /// type of an inode never changes; a backend that says otherwise gave us
    /// a different inode under a reused number, which the caller handles.
    pub(crate) fn set_attr(&self, attr: &Attr) {
        debug_assert_eq!(attr.ino, self.ino);
        debug_assert_eq!(attr.kind, self.kind());
        let w = pack(attr);
        // Waits out (spinning) another writer: writers only store a few
        // words inside, never block.
        self.i_seq.write_lock();
        for (slot, v) in self.attr.iter().zip(w) {
            // Relaxed: published by the seqcount's write_end (Release).
            slot.store(v, Ordering::Relaxed);
        }
        // Relaxed: as above; a lone reader of the mode sees the old or the
        // new one, as Linux's rcu-walk reads i_mode. The ACL state bits
        // are kept: only an ACL change (or an invalidation) resets them.
        let acl = self.i_mode.load(Ordering::Relaxed) & I_ACL_BITS;
        self.i_mode.store(imode(attr) | acl, Ordering::Relaxed);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn sample(kind: FileType, perm: u16) -> Attr {
        Attr {
            ino: u64::MAX - 7,
            size: 1 << 40,
            blocks: 12345,
            atime: Timespec {
                sec: -5,
                nsec: 999_999_999,
            },
            mtime: Timespec {
                sec: 1 << 40,
                nsec: 1,
            },
            ctime: Timespec {
                sec: 1_700_000_000,
                nsec: 500,
            },
            kind,
            perm,
            nlink: u32::MAX,
            uid: 1000,
            gid: u32::MAX - 1,
            rdev: 0x0801,
            blksize: 4096,
        }
    }

    #[test]
    fn attributes_round_trip_through_the_packed_words() {
        for kind in [
            FileType::Regular,
            FileType::Directory,
            FileType::Symlink,
            FileType::CharDevice,
            FileType::BlockDevice,
            FileType::Fifo,
            FileType::Socket,
        ] {
            let a = sample(kind, 0o4755);
            let i = Inode::new(&a);
            assert_eq!(i.attr(), a);
            assert_eq!(i.kind(), kind);
            assert_eq!(i.is_dir(), kind == FileType::Directory);
            assert_eq!(i.is_symlink(), kind == FileType::Symlink);
            assert_eq!(i.mode(), a.mode());
            let p = i.perm();
            assert_eq!((p.mode, p.uid, p.gid), (a.mode(), a.uid, a.gid));
            let b = Attr {
                size: 3,
                perm: 0o600,
                uid: 7,
                ..a
            };
            i.set_attr(&b);
            assert_eq!(i.attr(), b);
            assert_eq!(i.kind(), kind);
        }
    }

    #[test]
    fn permission_bits_cannot_change_the_type() {
        let i = Inode::new(&sample(FileType::Regular, 0xffff));
        assert_eq!(i.kind(), FileType::Regular);
        assert_eq!(i.attr().perm, 0o7777);
    }
}
