//! The dentry hash table: (parent, name) -> dentry.
//!
//! Buckets are singly linked chains whose head pointer carries a lock in its
//! low bit (Linux's `hlist_bl`): writers set the bit to serialise changes to
//! one chain, readers ignore it and walk with plain loads inside an RCU read
//! section — no lock, no reference count, no allocation, no store.
//!
//! Removal unlinks a dentry but leaves its own `next` pointer intact, so a
//! reader standing on it still reaches the rest of the chain; the memory is
//! freed only after a grace period. A dentry that a rename moves to another
//! chain can make a concurrent reader miss an entry; the walk detects that
//! with the global rename sequence count and retries (see `vfs::namei`).
//!
//! The table is sized once from a capacity (`Config::capacity`), so readers
//! never meet a resize.

use crate::dentry::{hash_len, Dentry, D_KILLED};
use crate::rcu::RcuGuard;
use crate::sync::{spin_hint, yield_now, AtomicPtr, Ordering};

const LOCK_BIT: usize = 1;

pub(crate) struct Table {
    #[cfg(not(loom))]
    buckets: Buckets,
    /// Under loom: loom's atomics, allocated and dropped the ordinary way.
    #[cfg(loom)]
    buckets: Box<[AtomicPtr<Dentry>]>,
    mask: usize,
}

/// The bucket array in one allocation of its own: huge-page aligned and
/// backed by huge pages once it spans one (at a million cached paths the
/// table is 8-16 MiB, and every lookup's first load is a random bucket: with
/// 4 KiB pages, nearly always a TLB miss too).
#[cfg(not(loom))]
struct Buckets {
    ptr: std::ptr::NonNull<AtomicPtr<Dentry>>,
    len: usize,
    layout: std::alloc::Layout,
}

#[cfg(not(loom))]
impl Buckets {
    fn new(len: usize) -> Buckets {
        use crate::slab::{advise_huge, HUGE_PAGE};
        use std::alloc::{alloc, handle_alloc_error, Layout};
        let bytes = len.max(1) * std::mem::size_of::<AtomicPtr<Dentry>>();
        let align = if bytes >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            crate::cache_aligned::CACHE_LINE
        };
        let layout = Layout::from_size_align(bytes, align)
            .unwrap_or_else(|_| handle_alloc_error(Layout::new::<usize>()));
        // SAFETY: the layout's size is at least one pointer.
        let p = unsafe { alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(p.cast::<AtomicPtr<Dentry>>()) else {
            handle_alloc_error(layout)
        };
        // Before the first touch, so the kernel faults huge pages in.
        if bytes >= HUGE_PAGE {
            advise_huge(p, bytes / HUGE_PAGE * HUGE_PAGE);
        }
        for i in 0..len {
            // SAFETY: i < len, inside the allocation just made (aligned for
            // the element type: align >= 64); each slot written once.
            unsafe {
                ptr.as_ptr()
                    .add(i)
                    .write(AtomicPtr::new(std::ptr::null_mut()))
            };
        }
        Buckets { ptr, len, layout }
    }
}

#[cfg(not(loom))]
impl std::ops::Deref for Buckets {
    type Target = [AtomicPtr<Dentry>];
    #[inline(always)]
    fn deref(&self) -> &[AtomicPtr<Dentry>] {
        // SAFETY: `len` initialised elements (`new`), alive until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(not(loom))]
impl Drop for Buckets {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once; the
        // elements (atomic pointers) need no drop.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) };
    }
}

// SAFETY: the array is atomics only, owned by the table.
#[cfg(not(loom))]
unsafe impl Send for Buckets {}
// SAFETY: as above: shared access is through the atomics.
#[cfg(not(loom))]
unsafe impl Sync for Buckets {}

/// What a lockless lookup found.
pub(crate) enum RcuHit<'g> {
    /// A dentry with a matching parent and name; `seq` is its d_seq sampled
    /// before the comparison (the caller re-validates it). Borrowed from the
    /// read section the lookup ran in.
    Found(&'g Dentry, u32),
    /// No matching entry on the chain.
    Missing,
    /// A matching entry is mid-change (odd d_seq): the caller must fall back.
    Busy,
}

/// Buckets per expected entry. A chain's other entries cost a walk a
/// miss each when they are cold. At one bucket per entry (a load factor of
/// 0.5 to 1), 38% of the batched walk's steps at 1M paths found another
/// name first; at 2 (0.25 to 0.5) `stat_many` runs 1.31x, one walk at a
/// time 1.14x, for 8 more bytes per cached path (docs/BENCHMARKS.md,
/// "Chains, not lines"). Linux sizes its dentry hash by memory, which
/// gives a similar load on a large tree.
pub(crate) const BUCKETS_PER_ENTRY: usize = 2;

#[inline(always)]
fn untag(p: *mut Dentry) -> *mut Dentry {
    (p as usize & !LOCK_BIT) as *mut Dentry
}

impl Table {
    /// A table for `capacity` dentries: [`BUCKETS_PER_ENTRY`] buckets per
    /// entry at least, rounded up to a power of two (so the load factor at
    /// `capacity` is at most 1 / BUCKETS_PER_ENTRY).
    pub(crate) fn with_capacity(capacity: usize) -> Table {
        let n = capacity
            .saturating_mul(BUCKETS_PER_ENTRY)
            .clamp(16, 1 << 27)
            .next_power_of_two();
        Table {
            #[cfg(not(loom))]
            buckets: Buckets::new(n),
            #[cfg(loom)]
            buckets: (0..n)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            mask: n - 1,
        }
    }

    pub(crate) fn buckets(&self) -> usize {
        self.buckets.len()
    }

    #[inline(always)]
    fn bucket(&self, parent: *const Dentry, hash: u32) -> &AtomicPtr<Dentry> {
        // Mix the parent's address with the name hash: the same name in many
        // directories ("Makefile", "index") must not share one chain.
        // Under loom the model must be deterministic, and addresses are not:
        // chains are then chosen by the name alone.
        #[cfg(loom)]
        let p = {
            let _ = parent;
            0u64
        };
        // The parent's address is on the walk's critical path (it comes
        // from the previous component's lookup) and the name hash is not
        // (it comes from the path), so all the mixing happens on the hash
        // side and the address only costs a shift and an xor. Dentries are
        // 64-byte aligned and 192 bytes apart, so `addr >> 6` differs in its
        // low bits between any two of them.
        #[cfg(not(loom))]
        let p = (parent as usize as u64) >> 6;
        let h = (hash as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let i = (h ^ p) as usize & self.mask;
        debug_assert!(i < self.buckets.len());
        // SAFETY: mask is len - 1 and len a power of two, so i < len.
        unsafe { self.buckets.get_unchecked(i) }
    }

    /// The bucket (parent, hash) falls in (the batched walk prefetches it
    /// and loads its head; the lookup proper is `lookup_rcu_word`, which
    /// finds the bucket again).
    #[inline(always)]
    pub(crate) fn bucket_for(&self, parent: *const Dentry, hash: u32) -> &AtomicPtr<Dentry> {
        self.bucket(parent, hash)
    }

    /// The first dentry on bucket `b`'s chain, inside the read section `g`
    /// (a hint for the batched walk's prefetches).
    #[inline(always)]
    pub(crate) fn head_rcu<'g>(
        &self,
        g: &'g RcuGuard<'_>,
        b: &AtomicPtr<Dentry>,
    ) -> Option<&'g Dentry> {
        debug_assert!(self.buckets.as_ptr_range().contains(&(b as *const _)));
        let p = untag(g.protect(b));
        // SAFETY: `b` is one of this table's buckets (every caller gets it
        // from `bucket_for`), loaded through `g`: a dentry removed since is
        // freed only after the section ends (as in `lookup_rcu_word`).
        unsafe { p.as_ref() }
    }

    /// Lockless lookup inside the read section `g`: a dentry found is
    /// borrowed for as long as that section.
    #[inline]
    pub(crate) fn lookup_rcu<'g>(
        &self,
        g: &'g RcuGuard<'_>,
        parent: *const Dentry,
        name: &[u8],
        hash: u32,
    ) -> RcuHit<'g> {
        self.lookup_rcu_word(g, parent, name, hash, crate::dentry::first_word(name))
    }

    /// `lookup_rcu` with the name's first word already loaded (the walker
    /// has it from scanning the path).
    #[inline(always)]
    pub(crate) fn lookup_rcu_word<'g>(
        &self,
        g: &'g RcuGuard<'_>,
        parent: *const Dentry,
        name: &[u8],
        hash: u32,
        first: u64,
    ) -> RcuHit<'g> {
        let want = hash_len(hash, name.len());
        // Protected loads (bucket head, then each `d_hash_next`): see
        // `RcuGuard::protect` for the ordering.
        let mut p = untag(g.protect(self.bucket(parent, hash)));
        while !p.is_null() {
            // SAFETY: p was loaded through `g` from the table; a removed
            // dentry is freed only after the section ends, so the borrow may
            // last as long as `g`'s.
            let d: &'g Dentry = unsafe { &*p };
            // Sample d_seq before comparing (as Linux's __d_lookup_rcu):
            // a match against fields read after the sample is validated by
            // the caller's later check of that same sample. Comparing first
            // and sampling after could pair an old match with a new seq.
            let seq = d.d_seq.raw_begin();
            // Relaxed: validated by the d_seq sample above and the caller.
            if d.d_hash_len.load(Ordering::Relaxed) == want
                && std::ptr::eq(d.d_parent.load(Ordering::Relaxed), parent)
                && d.name_eq_word(g, name, first)
            {
                if seq & 1 != 0 {
                    return RcuHit::Busy;
                }
                return RcuHit::Found(d, seq);
            }
            p = g.protect(&d.d_hash_next);
        }
        RcuHit::Missing
    }

    fn lock_bucket(&self, b: &AtomicPtr<Dentry>) -> *mut Dentry {
        let mut spins = 0u32;
        loop {
            // Relaxed read; the CAS below acquires.
            let cur = b.load(Ordering::Relaxed);
            if cur as usize & LOCK_BIT == 0 {
                let locked = (cur as usize | LOCK_BIT) as *mut Dentry;
                // Acquire: see the chain as the previous writer left it.
                if b.compare_exchange_weak(cur, locked, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return cur;
                }
                continue;
            }
            spins += 1;
            if spins < 64 {
                spin_hint();
            } else {
                spins = 0;
                yield_now();
            }
        }
    }

    fn unlock_bucket(&self, b: &AtomicPtr<Dentry>, head: *mut Dentry) {
        // Release: our chain edits (and a new dentry's fields) are visible
        // to readers that load the new head, and to the next writer.
        b.store(untag(head), Ordering::Release);
    }

    /// Insert `d` unless a live entry with the same parent and name exists;
    /// returns that entry instead (the caller tries to reference it; it may
    /// be dying, in which case the caller retries).
    ///
    /// # Safety
    /// `d` is a live dentry, not on any chain, whose parent and name are
    /// set, kept alive by the caller (a reference it owns) for the call and
    /// freed only a grace period after a later `remove`.
    pub(crate) unsafe fn insert_unique(
        &self,
        d: *mut Dentry,
        name: &[u8],
        hash: u32,
    ) -> Option<*mut Dentry> {
        // SAFETY: the caller keeps d alive (contract above).
        let dr = unsafe { &*d };
        let parent = dr.d_parent.load(Ordering::Relaxed) as *const Dentry;
        let b = self.bucket(parent, hash);
        let head = self.lock_bucket(b);
        let want = hash_len(hash, name.len());
        let mut p = head;
        let mut last: Option<&Dentry> = None;
        while !p.is_null() {
            // SAFETY: chain members are live while we hold the bucket lock
            // (removal needs the lock; freeing waits for a grace period).
            let e = unsafe { &*p };
            if std::ptr::eq(e.d_parent.load(Ordering::Relaxed), parent)
                && e.d_hash_len.load(Ordering::Relaxed) == want
                && e.flags() & D_KILLED == 0
                && e.name_eq_held(name)
            {
                self.unlock_bucket(b, head);
                return Some(p);
            }
            last = Some(e);
            p = e.d_hash_next.load(Ordering::Relaxed);
        }
        match last {
            // A directory goes first, anything else last: every walk to a
            // name below a directory matches the directory on its chain, so
            // it must not wait behind a cold file's line. (At the head, a
            // directory made before its files ends up behind the files of
            // other directories made later; `stat_many` ran 1.09x and one
            // stat 1.09x at 1M paths with this order, docs/BENCHMARKS.md.)
            Some(tail) if !Self::goes_first(dr) => {
                // Relaxed: d is not reachable before the store below.
                dr.d_hash_next
                    .store(std::ptr::null_mut(), Ordering::Relaxed);
                // Release: a reader that follows tail's next sees d's
                // fields (parent, name, inode) initialised.
                tail.d_hash_next.store(d, Ordering::Release);
                self.unlock_bucket(b, head);
            }
            _ => {
                // Relaxed: published by the Release in unlock_bucket.
                dr.d_hash_next.store(head, Ordering::Relaxed);
                self.unlock_bucket(b, d);
            }
        }
        None
    }

    /// Whether a new entry goes to its chain's head: a directory (walks
    /// pass through it to every name below), not a file, a symlink or a
    /// negative entry.
    fn goes_first(d: &Dentry) -> bool {
        // Relaxed: the inode was bound before the insertion, by this thread.
        let i = d.d_inode.load(Ordering::Relaxed);
        // SAFETY: a positive dentry's inode lives as long as the dentry,
        // which the caller keeps alive.
        !i.is_null() && unsafe { &*i }.is_dir()
    }

    /// Insert without a duplicate check (rename re-hashing a dentry whose
    /// target name the caller already cleared).
    ///
    /// # Safety
    /// As [`Table::insert_unique`]; and no live entry with `d`'s parent and
    /// name may be on the table.
    pub(crate) unsafe fn insert(&self, d: *mut Dentry) {
        // SAFETY: the caller keeps d alive (contract above).
        let dr = unsafe { &*d };
        let parent = dr.d_parent.load(Ordering::Relaxed) as *const Dentry;
        let hash = (dr.d_hash_len.load(Ordering::Relaxed) >> 32) as u32;
        let b = self.bucket(parent, hash);
        let head = self.lock_bucket(b);
        // Relaxed: published by the Release in unlock_bucket.
        dr.d_hash_next.store(head, Ordering::Relaxed);
        self.unlock_bucket(b, d);
    }

    /// Unlink `d` from its chain (found from its current parent and hash).
    /// Its own `next` stays intact for readers standing on it.
    ///
    /// # Safety
    /// `d` is on this table, kept alive by the caller (a reference, or its
    /// `d_lock` held), and its parent and name are those it was inserted
    /// with; it is freed only a grace period after this returns.
    pub(crate) unsafe fn remove(&self, d: *mut Dentry) {
        // SAFETY: the caller keeps d alive (contract above).
        let dr = unsafe { &*d };
        let parent = dr.d_parent.load(Ordering::Relaxed) as *const Dentry;
        let hash = (dr.d_hash_len.load(Ordering::Relaxed) >> 32) as u32;
        let b = self.bucket(parent, hash);
        let head = self.lock_bucket(b);
        let next = dr.d_hash_next.load(Ordering::Relaxed);
        if head == d {
            self.unlock_bucket(b, next);
            return;
        }
        let mut p = head;
        while !p.is_null() {
            // SAFETY: chain members are live while we hold the bucket lock.
            let e = unsafe { &*p };
            let n = e.d_hash_next.load(Ordering::Relaxed);
            if n == d {
                // Release: a reader that follows e's next sees d's successor
                // fully initialised.
                e.d_hash_next.store(next, Ordering::Release);
                break;
            }
            p = n;
        }
        self.unlock_bucket(b, head);
    }

    /// Every dentry in the table (for teardown, with exclusive access).
    pub(crate) fn drain_all(&self) -> Vec<*mut Dentry> {
        let mut out = Vec::new();
        for b in self.buckets.iter() {
            let mut p = untag(b.load(Ordering::Relaxed));
            b.store(std::ptr::null_mut(), Ordering::Relaxed);
            while !p.is_null() {
                out.push(p);
                // SAFETY: exclusive access; nothing has been freed yet.
                p = unsafe { &*p }.d_hash_next.load(Ordering::Relaxed);
            }
        }
        out
    }
}
