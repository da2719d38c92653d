//! `Vfs`: the dentry cache in front of a [`FileSystem`] backend, with
//! *at-style calls relative to a directory handle or the root.
//!
//! Inside (private modules): `namei`, the path walk — rcu mode first,
//! unlazied to ref mode where it stops; `lookup_one`, one component with
//! references; `path`, the path lexer; `dcache`, dentry lifetime — allocation, `dput`, kill,
//! LRU, shrinking; `icache`, the inodes dentries share; `ops` and `open`, the namespace operations and open
//! files; `as_cred`, the permission-checked [`AsCred`] handle; `batch`,
//! many walks interleaved ([`AsCred::stat_many`]); `section`,
//! [`ReadSection`]; `xattr`, extended attributes.
//!
//! Lock order (outermost first): the rename mutex, directory `i_rwsem`s (by
//! address), a dentry's `d_lock` (its LockRef's lock), a hash bucket's bit
//! lock; the LRU mutex and the inode-map mutex are leaves. Backend calls are
//! made with at most `i_rwsem`s held and must not call back into the Vfs.

mod acl;
mod as_cred;
mod batch;
pub(crate) mod dcache;
mod fileops;
mod filp;
mod icache;
mod invalidate;
mod lookup;
mod lookup_one;
#[cfg(all(test, loom))]
mod loom_invalidate;
#[cfg(all(test, loom))]
mod loom_walk;
mod namei;
mod open;
mod ops;
mod path;
mod section;
mod xattr;

use std::marker::PhantomData;
use std::ptr::NonNull;
// The counters are statistics: std atomics on purpose, outside loom's model
// (they order nothing, and modelling them would only multiply interleavings).
// Everything that synchronises goes through the `sync` facade.
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crate::sync::{AtomicPtr, Mutex, Ordering};

use crate::cred::Cred;
use crate::dentry::Dentry;
use crate::fs::{Attr, FileSystem, FileType, Ino};
use crate::inode::Inode;
use crate::rcu::Rcu;
use crate::seqcount::SeqCount;
use crate::slab::Slab;
use crate::table::Table;

pub use as_cred::{AsCred, AT_EACCESS};
pub use batch::LANES;
pub use open::OpenFile;
pub use section::{ReadSection, REFRESH_EVERY};

/// The credential the `Vfs`'s own methods act with (every capability).
static ROOT_CRED: Cred = Cred::ROOT;

#[inline(always)]
pub(crate) fn root_cred() -> &'static Cred {
    &ROOT_CRED
}

/// Sizing and policy knobs of a `Vfs`.
#[derive(Clone, Debug)]
pub struct Config {
    /// Expected number of cached dentries: sizes the hash table once (two
    /// buckets per dentry at least, a power of two), so readers never meet
    /// a resize. Default 32,768 (a 512 KiB table).
    pub capacity: usize,
    /// Unused (count 0) dentries beyond this are shrunk.
    pub max_unused: usize,
    /// Negative dentries beyond this are shrunk first.
    pub max_negative: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            // 65,536 buckets (512 KiB), the table's size before it got two
            // buckets per entry: a `Vfs` made with the defaults (every test,
            // and each one under miri walks all its buckets at teardown)
            // costs what it did. Large trees set `capacity`.
            capacity: 1 << 15,
            max_unused: 1 << 20,
            max_negative: 1 << 16,
        }
    }
}

/// Live-object counts. Shared through an `Arc` so a test can read them after
/// the `Vfs` is dropped (all must then be 0). More counters may come, so
/// only dcache constructs it.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Counters {
    /// Live dentries: allocated and not yet retired.
    pub dentries: AtomicUsize,
    /// Dentry memory not yet freed (live ones plus those waiting for a
    /// grace period).
    pub allocated: AtomicUsize,
    /// Hashed negative dentries.
    pub negative: AtomicUsize,
    /// Dentries on the LRU lists.
    pub unused: AtomicUsize,
    /// Allocated inodes, including those waiting for a grace period.
    pub inodes: AtomicUsize,
    /// Walks that went on in ref mode (racy sums for diagnostics: bumped
    /// only on the slow path): every walk rcu mode did not answer, and the
    /// namespace operations' walks to a parent.
    pub ref_walks: AtomicUsize,
    /// Of those, walks that rcu mode handed over where it stopped (a
    /// reference taken on the directory it stood in).
    pub unlazied: AtomicUsize,
    /// Of those, walks that started over from their start (the state
    /// changed under rcu mode).
    pub restarts: AtomicUsize,
    /// Backend lookups (cache misses).
    pub backend_lookups: AtomicUsize,
    /// Backend calls that ran out of descriptors (EMFILE/ENFILE) and were
    /// retried after the unused entries were freed.
    pub fd_sheds: AtomicUsize,
}

impl Counters {
    /// [`Counters::dentries`](field@Counters::dentries) now.
    pub fn dentries(&self) -> usize {
        self.dentries.load(Ordering::Relaxed)
    }
    /// [`Counters::allocated`](field@Counters::allocated) now.
    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }
    /// [`Counters::negative`](field@Counters::negative) now.
    pub fn negative(&self) -> usize {
        self.negative.load(Ordering::Relaxed)
    }
    /// [`Counters::unused`](field@Counters::unused) now.
    pub fn unused(&self) -> usize {
        self.unused.load(Ordering::Relaxed)
    }
    /// [`Counters::inodes`](field@Counters::inodes) now.
    pub fn inodes(&self) -> usize {
        self.inodes.load(Ordering::Relaxed)
    }
    /// [`Counters::backend_lookups`](field@Counters::backend_lookups) now.
    pub fn backend_lookups(&self) -> usize {
        self.backend_lookups.load(Ordering::Relaxed)
    }
    /// [`Counters::fd_sheds`](field@Counters::fd_sheds) now.
    pub fn fd_sheds(&self) -> usize {
        self.fd_sheds.load(Ordering::Relaxed)
    }
    /// [`Counters::ref_walks`](field@Counters::ref_walks) now.
    pub fn ref_walks(&self) -> usize {
        self.ref_walks.load(Ordering::Relaxed)
    }
    /// [`Counters::unlazied`](field@Counters::unlazied) now.
    pub fn unlazied(&self) -> usize {
        self.unlazied.load(Ordering::Relaxed)
    }
    /// [`Counters::restarts`](field@Counters::restarts) now.
    pub fn restarts(&self) -> usize {
        self.restarts.load(Ordering::Relaxed)
    }
}

/// The state every dentry points back to (Linux's super_block).
pub(crate) struct Super {
    pub(crate) fs: Arc<dyn FileSystem>,
    /// `fs.needs_revalidate()`, read once.
    pub(crate) revalidate: bool,
    pub(crate) table: Table,
    pub(crate) rcu: Rcu,
    /// Bumped around every rename: a walk that crossed `..` or missed in the
    /// table checks it before trusting the result.
    pub(crate) rename_seq: SeqCount,
    /// Serialises renames (the writer side of `rename_seq`).
    pub(crate) rename_lock: Mutex<()>,
    /// ino -> the inode object shared by all its dentries (hard links).
    pub(crate) inodes: Mutex<icache::InodeMap>,
    /// The access ACLs of cached inodes that have one (see `acl`).
    pub(crate) acls: acl::AclMap,
    /// Where every dentry and inode of this Vfs lives (Linux's
    /// `dentry_cache` and `inode_cache` slabs). After `rcu`, so that they
    /// are dropped after it.
    pub(crate) dentry_cache: Slab<Dentry>,
    pub(crate) inode_cache: Slab<Inode>,
    pub(crate) lru: Mutex<dcache::Lru>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) config: Config,
    /// Where reported changes underneath arrive (see `invalidate`).
    pub(crate) hub: Arc<invalidate::Hub>,
    /// Files whose last reference went, kept per thread for the next open
    /// of the same dentry (see `filp`).
    pub(crate) filps: filp::FilpCache,
    /// Set once, right after the Super is placed at its final address (the
    /// root dentry points back to it); atomic so no `&mut Super` is ever
    /// needed, which would invalidate the `d_sb` pointers dentries hold.
    root: AtomicPtr<Dentry>,
}

impl Super {
    #[inline(always)]
    pub(crate) fn root(&self) -> *mut Dentry {
        // Relaxed: written once before the Vfs is shared.
        self.root.load(Ordering::Relaxed)
    }
}

// SAFETY: the raw pointers in Super (root, inode map) point to objects whose
// shared state is atomic or lock-protected; the map itself is behind a Mutex.
unsafe impl Send for Super {}
// SAFETY: as above.
unsafe impl Sync for Super {}

/// The dentry cache over one backend.
pub struct Vfs {
    /// A leaked `Box<Super>`, freed in `Drop`. Held raw (not as a Box) so
    /// that no unique borrow of the Super is ever taken while dentries hold
    /// `d_sb` pointers into it.
    sb: NonNull<Super>,
}

// SAFETY: the Vfs owns the Super, which is Send + Sync.
unsafe impl Send for Vfs {}
// SAFETY: as above.
unsafe impl Sync for Vfs {}

/// Where a relative path starts: the root, or a directory the caller holds.
#[derive(Clone, Copy)]
pub enum At<'a> {
    /// The `Vfs`'s root directory (an absolute path, or `AT_FDCWD` at `/`).
    Root,
    /// A directory the caller holds a reference to (like a `dirfd`); a
    /// [`DentryRef`] converts with `At::from(&d)`.
    Dir(&'a Dentry),
}

impl<'a> From<&'a DentryRef<'_>> for At<'a> {
    fn from(d: &'a DentryRef<'_>) -> At<'a> {
        At::Dir(d.dentry())
    }
}

mod stat_mode {
    /// How `stat` treats the last component: one of the benchmark's
    /// comparison knobs (public only with the `experiments` feature, for
    /// [`AsCred::stat_with`](crate::AsCred::stat_with)).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub enum StatMode {
        /// dcache's own: read the attributes inside the read section and
        /// validate the sequence counters; no reference, no shared store.
        #[default]
        RefFree,
        /// What Linux does: take and drop a LockRef reference on the last
        /// component (complete_walk + dput).
        #[cfg_attr(not(feature = "experiments"), allow(dead_code))]
        LockRef,
    }
}
#[cfg(feature = "experiments")]
pub use stat_mode::StatMode;
#[cfg(not(feature = "experiments"))]
pub(crate) use stat_mode::StatMode;

/// A counted reference to a dentry; dropping it is `dput`.
pub struct DentryRef<'v> {
    d: NonNull<Dentry>,
    _vfs: PhantomData<&'v Vfs>,
}

// SAFETY: a DentryRef is a counted reference; the dentry is Sync and the
// count is dropped with an atomic protocol from any thread.
unsafe impl Send for DentryRef<'_> {}
// SAFETY: as above.
unsafe impl Sync for DentryRef<'_> {}

impl<'v> DentryRef<'v> {
    /// Wrap a dentry whose reference the caller transfers to us.
    ///
    /// # Safety
    /// `d` must be a dentry of the `Vfs` borrowed for `'v` whose count
    /// includes one reference that the caller gives up to the result (it
    /// will be dropped once, by the result's `dput`).
    pub(crate) unsafe fn from_counted(d: NonNull<Dentry>) -> DentryRef<'v> {
        DentryRef {
            d,
            _vfs: PhantomData,
        }
    }

    /// A new reference to `d` (Linux `lockref_get_not_dead`), or `None`
    /// if it is dying. `d` is borrowed from a read section or a reference,
    /// so it is allocated; a live one cannot be freed while we count it.
    #[inline]
    pub(crate) fn try_get(d: &Dentry) -> Option<DentryRef<'v>> {
        if !d.d_lockref.get_not_dead() {
            return None;
        }
        // SAFETY: the reference just taken is handed to the result; `d` is
        // a dentry of this Vfs (every dentry the crate hands out is).
        Some(unsafe { DentryRef::from_counted(NonNull::from(d)) })
    }

    /// The dentry itself.
    pub fn dentry(&self) -> &Dentry {
        // SAFETY: we hold a reference, so the dentry is not freed.
        unsafe { self.d.as_ref() }
    }

    pub(crate) fn as_ptr(&self) -> *mut Dentry {
        self.d.as_ptr()
    }

    /// Give up ownership without dropping the count: the reference lives
    /// on in the returned pointer, for a frontend that keeps references in
    /// its own tables (dcache-fuse: the dentry a published node pins; an
    /// NFS server's file handles would be another). The dentry, its inode
    /// and the `Vfs` stay alive until the reference is taken back with
    /// [`Vfs::dentry_from_raw`] and dropped; a pointer never taken back
    /// leaks the dentry, and the `Vfs` cannot free its cache on drop.
    ///
    /// While the reference is held the pointer may be dereferenced (it
    /// points at a live dentry of this `Vfs`), e.g. for
    /// [`Dentry::inode_ptr_held`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use dcache::fs::memfs::MemFs;
    /// # use dcache::{At, Vfs};
    /// # let fs = Arc::new(MemFs::new());
    /// # fs.write_file("f", b"x")?;
    /// let vfs = Vfs::new(fs)?;
    /// let d = vfs.as_root().lookup(At::Root, "f", true)?;
    /// let p = d.into_raw(); // kept in a table, say
    /// // SAFETY: `p` came from `into_raw` on this Vfs and is taken back once.
    /// let d = unsafe { vfs.dentry_from_raw(p) };
    /// assert_eq!(d.ino(), Some(vfs.as_root().stat(At::Root, "f")?.ino));
    /// # Ok::<(), dcache::Errno>(())
    /// ```
    pub fn into_raw(self) -> *const Dentry {
        let p = self.d.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The inode, or `None` for a negative dentry.
    pub fn inode(&self) -> Option<&Inode> {
        let p = self.dentry().inode_ptr_held();
        // SAFETY: the result borrows this reference, and while a counted
        // reference exists the dentry's inode pointer does not go away: it
        // changes only from null (`d_instantiate` of a negative dentry),
        // when the dentry dies (count zero, impossible while we hold one),
        // or in `d_delete` when its caller holds the only reference — and
        // `d_delete` consumes that reference, so no borrow of it survives.
        // A dentry pointing at an inode keeps the inode allocated.
        unsafe { p.as_ref() }
    }

    /// True if the name has no inode (a cached "does not exist").
    pub fn is_negative(&self) -> bool {
        self.dentry().inode_ptr_held().is_null()
    }

    /// The inode number, or `None` for a negative dentry.
    pub fn ino(&self) -> Option<Ino> {
        self.inode().map(|i| i.ino())
    }

    /// The file type, or `None` for a negative dentry.
    pub fn kind(&self) -> Option<FileType> {
        self.inode().map(|i| i.kind())
    }

    /// The cached attributes (no backend call).
    pub fn attr(&self) -> Option<Attr> {
        self.inode().map(|i| i.attr())
    }

    /// The last component of the name, copied (empty for the root).
    pub fn name(&self) -> Vec<u8> {
        // A read section: our reference does not keep a concurrent rename
        // from retiring the out-of-line name being copied.
        let d = self.dentry();
        let g = dcache::sb_of(d).rcu.read_lock();
        d.name_rcu(&g)
    }

    /// The reference count (racy; diagnostics and tests).
    pub fn count(&self) -> i32 {
        self.dentry().count()
    }

    /// Whether this is a dentry of `vfs` (handles of one `Vfs` given to
    /// another are refused with EXDEV).
    pub fn belongs_to(&self, vfs: &Vfs) -> bool {
        vfs.owns(self.dentry())
    }

    /// A counted reference to the current parent (Linux's `dget_parent`);
    /// the root is its own parent.
    pub fn parent(&self) -> DentryRef<'v> {
        let sb = dcache::sb_of(self.dentry());
        loop {
            let g = sb.rcu.read_lock();
            // In a read section in case a rename just moved the dentry and
            // its old parent is on its way out.
            if let Some(pr) = self.dentry().parent_rcu(&g) {
                if let Some(parent) = DentryRef::try_get(pr) {
                    let same = self
                        .dentry()
                        .parent_rcu(&g)
                        .is_some_and(|q| std::ptr::eq(q, pr));
                    if same {
                        drop(g);
                        return parent;
                    }
                    // Moved meanwhile: `parent` is dropped (dput); retry.
                }
            }
            drop(g);
            crate::sync::yield_now();
        }
    }
}

impl Clone for DentryRef<'_> {
    fn clone(&self) -> Self {
        self.dentry().d_lockref.get();
        DentryRef {
            d: self.d,
            _vfs: PhantomData,
        }
    }
}

impl Drop for DentryRef<'_> {
    fn drop(&mut self) {
        // SAFETY: we own one reference to a live dentry of this Vfs.
        unsafe { dcache::dput(self.d.as_ptr()) };
    }
}

impl std::fmt::Debug for DentryRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DentryRef")
            .field("name", &String::from_utf8_lossy(&self.name()))
            .field("ino", &self.ino())
            .field("count", &self.count())
            .finish()
    }
}

impl Vfs {
    /// A dentry cache over `fs` with the default [`Config`]. Reads the
    /// root's attributes once; ENOTDIR if the root is not a directory.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{At, FileType, Vfs};
    ///
    /// let vfs = Vfs::new(Arc::new(MemFs::new()))?;
    /// assert_eq!(vfs.as_root().stat(At::Root, "/")?.kind, FileType::Directory);
    /// # Ok::<(), dcache::Errno>(())
    /// ```
    pub fn new(fs: Arc<dyn FileSystem>) -> crate::Result<Vfs> {
        Vfs::with_config(fs, Config::default())
    }

    /// [`Vfs::new`] with explicit sizing and policy.
    pub fn with_config(fs: Arc<dyn FileSystem>, config: Config) -> crate::Result<Vfs> {
        let root_ino = fs.root();
        let root_attr = fs.getattr(root_ino)?;
        if root_attr.kind != FileType::Directory {
            return Err(crate::Errno::ENOTDIR);
        }
        let sb = Box::new(Super {
            revalidate: fs.needs_revalidate(),
            fs,
            table: Table::with_capacity(config.capacity),
            rcu: Rcu::new(),
            rename_seq: SeqCount::new(),
            rename_lock: Mutex::new(()),
            inodes: Mutex::new(icache::InodeMap::default()),
            acls: Mutex::new(std::collections::HashMap::new()),
            dentry_cache: Slab::new(),
            inode_cache: Slab::new(),
            lru: Mutex::new(dcache::Lru::default()),
            counters: Arc::new(Counters::default()),
            config,
            hub: Arc::new(invalidate::Hub::new()),
            filps: filp::FilpCache::new(),
            root: AtomicPtr::new(std::ptr::null_mut()),
        });
        let sbp = Box::into_raw(sb);
        let root = dcache::d_alloc_root(sbp, &root_attr);
        // SAFETY: sbp is the live allocation we just leaked; shared access.
        let s = unsafe { &*sbp };
        s.root.store(root, Ordering::Relaxed);
        // SAFETY: Box::into_raw never returns null.
        let sb = unsafe { NonNull::new_unchecked(sbp) };
        s.hub.attach(sb);
        s.fs.attach(crate::fs::Invalidator::new(s.hub.clone()));
        Ok(Vfs { sb })
    }

    #[inline(always)]
    pub(crate) fn sb(&self) -> &Super {
        // SAFETY: the Super lives until Drop, and is only ever shared.
        unsafe { self.sb.as_ref() }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn FileSystem> {
        &self.sb().fs
    }

    /// The live-object and lookup counters (shared: they outlive the
    /// `Vfs`).
    pub fn counters(&self) -> Arc<Counters> {
        self.sb().counters.clone()
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &Config {
        &self.sb().config
    }

    /// Buckets in the hash table.
    pub fn table_buckets(&self) -> usize {
        self.sb().table.buckets()
    }

    /// A counted reference to the root.
    pub fn root(&self) -> DentryRef<'_> {
        let root = self.sb().root();
        // SAFETY: the root lives as long as the Vfs.
        let r = unsafe { &*root };
        r.d_lockref.get();
        // SAFETY: the reference just taken, on this Vfs's root.
        unsafe { DentryRef::from_counted(NonNull::from(r)) }
    }

    /// Take back a reference given away with [`DentryRef::into_raw`]: the
    /// result owns it again and drops it (`dput`) when dropped. A frontend
    /// that only needs to borrow a pointer it keeps can wrap the result in
    /// `ManuallyDrop`, as long as the reference's owner outlives the
    /// borrow.
    ///
    /// Panics if `p` is null or a dentry of another `Vfs` (one pointer
    /// compare).
    ///
    /// # Safety
    /// `p` must come from [`DentryRef::into_raw`] on a reference of this
    /// `Vfs` whose count has not been taken back yet; each such pointer is
    /// taken back once (or borrowed, never dropping the result, while its
    /// owner keeps it).
    pub unsafe fn dentry_from_raw(&self, p: *const Dentry) -> DentryRef<'_> {
        let p = NonNull::new(p.cast_mut()).expect("dentry_from_raw: null dentry");
        // SAFETY: the caller gives back a counted reference, so the dentry
        // is alive.
        let d = unsafe { p.as_ref() };
        assert!(self.owns(d), "dentry_from_raw: a dentry of another Vfs");
        // SAFETY: the caller gives back a reference `into_raw` gave away,
        // and it is this Vfs's (checked above).
        unsafe { DentryRef::from_counted(p) }
    }

    /// Whether `d` is one of this `Vfs`'s dentries: every entry point that
    /// takes a dentry, a [`DentryRef`] or an [`At::Dir`] checks it (one
    /// pointer compare) and answers EXDEV for another `Vfs`'s, so a handle
    /// can never be walked, linked, opened or pinned by the wrong cache.
    #[inline(always)]
    pub(crate) fn owns(&self, d: &Dentry) -> bool {
        std::ptr::eq(d.d_sb, self.sb.as_ptr() as *const ())
    }

    /// [`Vfs::owns`] as a result: EXDEV for another `Vfs`'s dentry.
    #[inline(always)]
    pub(crate) fn check_owned(&self, d: &Dentry) -> crate::Result<()> {
        if self.owns(d) {
            Ok(())
        } else {
            Err(crate::Errno::EXDEV)
        }
    }

    /// Free up to `n` unused dentries (negative ones first); returns how
    /// many were freed.
    pub fn shrink(&self, n: usize) -> usize {
        // Idle files hold their dentries: let them go first.
        self.sb().filps.flush();
        dcache::shrink(self.sb(), n, false)
    }
}

impl Drop for Vfs {
    fn drop(&mut self) {
        // Reports from now on find nothing; one in progress ends first.
        self.sb().hub.detach();
        // Idle files hold dentry references, which teardown requires gone.
        self.sb().filps.flush();
        dcache::teardown(self.sb());
        // SAFETY: teardown freed every dentry and inode, retired ones
        // included (this Vfs's own collector ran every pending free), so
        // nothing points at the Super any more; the pointer came from
        // Box::into_raw in with_config.
        drop(unsafe { Box::from_raw(self.sb.as_ptr()) });
    }
}
