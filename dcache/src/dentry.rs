//! `Dentry`: one cached (parent, name) -> inode binding.
//!
//! Fields are grouped by who touches them, as in Linux's `struct dentry`:
//!
//! - cache line 0: what an rcu-walk reads for every path component —
//!   flags, the `d_seq` counter, the hash-chain link, parent, name
//!   hash+length, inode — and the first `NAME_ON_LINE0` bytes of the name,
//!   so that a step matching a short name reads one line.
//! - the first part of line 1: the rest of the inline name (up to
//!   `DNAME_INLINE_LEN` bytes; out of line beyond), then what no step
//!   reads: the out-of-line name pointer, the owning `Super`, the
//!   revalidation cookie. Lines 0 and 1 are written only on rename,
//!   instantiate, unhash: read-mostly.
//! - cache line 2: the counts. The `LockRef` first: every counted reference
//!   (open, ref-walk, a FUSE node's pin) writes it. Then the children count,
//!   written with the parent's lockref whenever a child is made or killed
//!   (Linux likewise keeps its lists and counters after `d_lockref`).
//!   Sharing a read line with any of them would make every reference taken
//!   by one CPU evict the line all other CPUs' lockless walks are reading.
//!
//! The `const` asserts below make the split a build failure to break: the
//! lookup fields end before line 2, and every field written outside a
//! `d_seq` write section for counting (the lockref, the children count)
//! starts on or after it.

use crate::inode::Inode;
use crate::lockref::LockRef;
use crate::rcu::RcuGuard;
use crate::seqcount::SeqCount;
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Names up to this many bytes live inside the dentry.
pub(crate) const DNAME_INLINE_LEN: usize = 40;
const INLINE_WORDS: usize = DNAME_INLINE_LEN / 8;

/// In the hash table (reachable by lookups).
pub(crate) const D_HASHED: u32 = 1 << 0;
/// Owned by the LRU list (the list frees it, see `vfs::dcache`).
pub(crate) const D_LRU_LIST: u32 = 1 << 1;
/// Used since it was last on the LRU's scan (second chance).
pub(crate) const D_REFERENCED: u32 = 1 << 2;
/// Killed: unhashed, inode dropped, parent reference given back.
pub(crate) const D_KILLED: u32 = 1 << 3;
/// The root of a Vfs: never killed before the Vfs is dropped.
pub(crate) const D_ROOT: u32 = 1 << 4;
/// Negative entry that was counted in the negative-dentry total.
pub(crate) const D_NEG_COUNTED: u32 = 1 << 5;

/// A name too long for the inline buffer: immutable once published, and
/// replaced (never edited) by a rename, so readers need no length pairing.
pub(crate) struct ExtName(pub(crate) Box<[u8]>);

/// One cached name in one directory (Linux's `struct dentry`): parent, name,
/// inode (none for a negative entry) and a [`LockRef`] count. Reached through
/// a [`DentryRef`](crate::DentryRef) or [`At::Dir`](crate::At::Dir).
#[repr(C, align(64))]
pub struct Dentry {
    // ---- read-mostly: rcu-walk reads these ----
    pub(crate) d_flags: AtomicU32,
    /// Bumped around any change to parent, name or inode, and on unhash.
    pub(crate) d_seq: SeqCount,
    /// Next dentry in the hash chain (the chain head holds a lock bit).
    pub(crate) d_hash_next: AtomicPtr<Dentry>,
    pub(crate) d_parent: AtomicPtr<Dentry>,
    /// Name hash in the high 32 bits, name length in the low 32 bits.
    pub(crate) d_hash_len: AtomicU64,
    /// Null for a negative dentry.
    pub(crate) d_inode: AtomicPtr<Inode>,
    /// The name, zero padded, when it fits. Its first
    /// [`NAME_ON_LINE0`] bytes share line 0 with the fields above, so a
    /// step that compares a name that short reads one line of the dentry.
    pub(crate) d_iname: [AtomicU64; INLINE_WORDS],
    /// Out-of-line name (longer than DNAME_INLINE_LEN), else null.
    pub(crate) d_name_ext: AtomicPtr<ExtName>,
    /// The owning Vfs's shared state (Linux's d_sb). Opaque here: the
    /// cache (`vfs::dcache::sb_of`) knows its type, and this module stays
    /// below it. Read once per call (`Vfs::owns`), not per step.
    pub(crate) d_sb: *const (),
    /// Backend cookie recorded at lookup, handed to `revalidate` (d_time);
    /// read only by a revalidating backend's walk.
    pub(crate) d_time: AtomicU64,
    /// Up to the count line: read lines hold nothing else.
    _read_pad: [u8; READ_PAD],
    // ---- write-hot: the counts, on their own cache line ----
    pub(crate) d_lockref: LockRef,
    /// Cached children that pin this dentry (changed with `d_lockref`).
    pub(crate) d_children: AtomicU32,
}

/// Bytes from the end of the read fields to the count line (line 2): the
/// read fields are 64 bytes of pointers and words plus the inline name.
const READ_PAD: usize = 2 * 64 - (64 + DNAME_INLINE_LEN);

/// How many bytes of an inline name lie on the dentry's first line, with
/// the fields every step reads (24): names up to this long are compared
/// without touching line 1 (the batched walk prefetches one line for
/// them, `vfs::batch`). Most names are this short; Linux's `d_iname`
/// likewise starts on the first line. (0 under loom, whose atomics are
/// larger: a hint only.)
pub(crate) const NAME_ON_LINE0: usize =
    crate::cache_aligned::CACHE_LINE.saturating_sub(std::mem::offset_of!(Dentry, d_iname));

// The rules of the layout, checked at build time. (Not under loom, whose
// instrumented atomics are larger than the real ones.)
#[cfg(not(loom))]
mod layout_rules {
    use super::*;
    use crate::cache_aligned::CACHE_LINE;
    use std::mem::{offset_of, size_of};
    const LOCKREF_OFF: usize = offset_of!(Dentry, d_lockref);
    const LOOKUP_END: usize = offset_of!(Dentry, d_time) + size_of::<AtomicU64>();
    const _: () = assert!(LOCKREF_OFF % CACHE_LINE == 0);
    // Every lookup field ends before the LockRef's cache line starts...
    const _: () = assert!(LOOKUP_END <= LOCKREF_OFF);
    const _: () = assert!(offset_of!(Dentry, d_inode) + 8 <= LOCKREF_OFF);
    // ...and every count written after the dentry is published (by every
    // reference, every child made or killed) sits on the count line, never
    // on a line an rcu-walk reads.
    const COUNTS: [usize; 2] = [
        offset_of!(Dentry, d_lockref),
        offset_of!(Dentry, d_children),
    ];
    const _: () = {
        let mut i = 0;
        while i < COUNTS.len() {
            assert!(COUNTS[i] >= LOCKREF_OFF && COUNTS[i] < LOCKREF_OFF + CACHE_LINE);
            i += 1;
        }
    };
    const _: () = assert!(size_of::<Dentry>() == LOCKREF_OFF + CACHE_LINE);
    const _: () = assert!(size_of::<Dentry>() <= 192);
    // The per-step hot fields (declared before the inline name, `repr(C)`)
    // fit in the first line, and so do the first 24 bytes of the name.
    const _: () = assert!(NAME_ON_LINE0 == 24);
    // What no step reads comes after the inline name, off line 0.
    const _: () = assert!(offset_of!(Dentry, d_name_ext) >= CACHE_LINE);
    const _: () = assert!(DNAME_INLINE_LEN >= 32 && DNAME_INLINE_LEN % 8 == 0);
}

// SAFETY: all shared mutable state is atomic or behind the lockref; `d_sb`
// points to the Vfs's Super, which outlives every dentry and is Sync.
unsafe impl Send for Dentry {}
// SAFETY: as above.
unsafe impl Sync for Dentry {}

/// Incremental form of [`name_hash`]: the walker feeds it the words it
/// reads anyway while looking for the next `/` (Linux's `hash_name` does
/// the same), so a component is scanned once.
pub(crate) const HASH_INIT: u64 = 0x243F_6A88_85A3_08D3;
const HASH_K: u64 = 0x9E37_79B9_7F4A_7C15;

/// Mix one little-endian word of the name (the last one zero padded).
#[inline(always)]
pub(crate) fn hash_word(h: u64, w: u64) -> u64 {
    let h = (h ^ w).wrapping_mul(HASH_K);
    h ^ (h >> 29)
}

/// Finish: fold in the length and reduce to 32 bits.
#[inline(always)]
pub(crate) fn hash_finish(h: u64, len: usize) -> u32 {
    ((h ^ len as u64).wrapping_mul(HASH_K) >> 32) as u32
}

/// The hash of one name component (independent of the parent).
///
/// Word-at-a-time multiply-xorshift; dcache hashes are not an attack surface
/// that needs SipHash (the bucket index also mixes the parent address), but
/// they must spread short similar names.
#[inline]
pub(crate) fn name_hash(name: &[u8]) -> u32 {
    let mut h = HASH_INIT;
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        h = hash_word(
            h,
            u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
        );
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        h = hash_word(h, load_partial(rest));
    }
    hash_finish(h, name.len())
}

/// Up to 8 bytes as a zero-padded little-endian word, without a
/// variable-length copy (which would be a call to memcpy on the hot path).
#[inline(always)]
pub(crate) fn load_partial(rest: &[u8]) -> u64 {
    let n = rest.len();
    debug_assert!(n <= 8);
    if n >= 8 {
        return u64::from_le_bytes([
            rest[0], rest[1], rest[2], rest[3], rest[4], rest[5], rest[6], rest[7],
        ]);
    }
    let mut v = 0u64;
    let mut i = 0;
    if n >= 4 {
        v = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
        i = 4;
    }
    if n - i >= 2 {
        v |= (u16::from_le_bytes([rest[i], rest[i + 1]]) as u64) << (8 * i);
        i += 2;
    }
    if n - i >= 1 {
        v |= (rest[i] as u64) << (8 * i);
    }
    v
}

/// The first (up to) 8 bytes of a name as a zero-padded word.
#[inline(always)]
pub(crate) fn first_word(name: &[u8]) -> u64 {
    if name.len() >= 8 {
        u64::from_le_bytes([
            name[0], name[1], name[2], name[3], name[4], name[5], name[6], name[7],
        ])
    } else {
        load_partial(name)
    }
}

#[inline(always)]
pub(crate) fn hash_len(hash: u32, len: usize) -> u64 {
    (hash as u64) << 32 | len as u64
}

impl Dentry {
    /// A new dentry with count 1, not hashed (the cache moves it into its
    /// slab, `Super::dentry_cache`).
    pub(crate) fn new(sb: *const (), parent: *mut Dentry, name: &[u8], hash: u32) -> Dentry {
        let d = Dentry {
            d_flags: AtomicU32::new(0),
            d_seq: SeqCount::new(),
            d_hash_next: AtomicPtr::new(std::ptr::null_mut()),
            d_parent: AtomicPtr::new(parent),
            d_hash_len: AtomicU64::new(hash_len(hash, name.len())),
            d_inode: AtomicPtr::new(std::ptr::null_mut()),
            d_iname: std::array::from_fn(|_| AtomicU64::new(0)),
            d_name_ext: AtomicPtr::new(std::ptr::null_mut()),
            d_sb: sb,
            d_time: AtomicU64::new(0),
            _read_pad: [0; READ_PAD],
            d_lockref: LockRef::new(),
            d_children: AtomicU32::new(0),
        };
        d.store_name(name);
        d
    }

    /// Write the name storage (inline words or a fresh out-of-line buffer).
    /// Returns the previous out-of-line buffer, which the caller retires.
    /// Callers hold `d_seq` for writing (or own the dentry exclusively).
    pub(crate) fn store_name(&self, name: &[u8]) -> Option<*mut ExtName> {
        let new_ext = if name.len() > DNAME_INLINE_LEN {
            Box::into_raw(Box::new(ExtName(name.into())))
        } else {
            for (i, slot) in self.d_iname.iter().enumerate() {
                let lo = (i * 8).min(name.len());
                let hi = (i * 8 + 8).min(name.len());
                // Relaxed: published by the d_seq write section (or by the
                // Release insertion into the hash table for a new dentry).
                slot.store(load_partial(&name[lo..hi]), Ordering::Relaxed);
            }
            std::ptr::null_mut()
        };
        // Release: a reader that loads the new pointer (protected, or
        // Acquire by a lock holder) sees the ExtName's bytes written above.
        let old = self.d_name_ext.swap(new_ext, Ordering::Release);
        if old.is_null() {
            None
        } else {
            Some(old)
        }
    }

    /// Does this dentry's name equal `name`? Inside the read section `g`
    /// (the out-of-line name is a protected load). Called with `d_seq`
    /// sampled (the caller validates it afterwards), so the reads are atomic
    /// and a torn view only produces a mismatch that the sequence check
    /// discards. `first` is the name's first word (zero padded), which the
    /// walker already holds: names of up to 8 bytes compare with one load.
    #[inline(always)]
    pub(crate) fn name_eq_word(&self, g: &RcuGuard<'_>, name: &[u8], first: u64) -> bool {
        if name.len() <= 8 {
            // Relaxed: validated by the caller's d_seq check.
            self.d_iname[0].load(Ordering::Relaxed) == first
        } else {
            self.name_eq_rcu(g, name)
        }
    }

    /// Does this dentry's name equal `name`? Inside the read section `g`,
    /// with `d_seq` sampled as for [`Dentry::name_eq_word`].
    #[inline(always)]
    pub(crate) fn name_eq_rcu(&self, g: &RcuGuard<'_>, name: &[u8]) -> bool {
        // SAFETY: a pointer protected by `g` stays valid while `g` lives,
        // which outlasts this call.
        unsafe { self.name_eq_with(name, |p| g.protect(p)) }
    }

    /// Does this dentry's name equal `name`? For a caller outside any read
    /// section that keeps the
    /// out-of-line name from being replaced: it holds the lock of the hash
    /// bucket this dentry is on, or the rename lock (a rename unhashes the
    /// dentry, under the bucket lock, before it replaces the name, and holds
    /// the rename lock throughout).
    pub(crate) fn name_eq_held(&self, name: &[u8]) -> bool {
        // SAFETY: the name cannot be replaced, hence not retired, while the
        // caller holds what it holds (see above), and `self` is alive.
        unsafe { self.name_eq_with(name, Self::ext_held) }
    }

    /// # Safety
    /// `ext` returns `d_name_ext`'s value, and that `ExtName` (if any) stays
    /// allocated until this call returns.
    #[inline(always)]
    unsafe fn name_eq_with(
        &self,
        name: &[u8],
        ext: impl FnOnce(&AtomicPtr<ExtName>) -> *mut ExtName,
    ) -> bool {
        if name.len() <= DNAME_INLINE_LEN {
            let mut chunks = name.chunks_exact(8);
            let mut i = 0;
            for c in &mut chunks {
                let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
                // Relaxed: validated by the caller's d_seq check.
                if self.d_iname[i].load(Ordering::Relaxed) != w {
                    return false;
                }
                i += 1;
            }
            let rest = chunks.remainder();
            if !rest.is_empty() && self.d_iname[i].load(Ordering::Relaxed) != load_partial(rest) {
                return false;
            }
            true
        } else {
            let p = ext(&self.d_name_ext);
            if p.is_null() {
                return false;
            }
            // SAFETY: valid for this call (our contract). A non-null
            // d_name_ext points to an immutable ExtName: a rename installs
            // a new one instead of writing this one, so the bytes cannot
            // change.
            let ext = unsafe { &*p };
            &ext.0[..] == name
        }
    }

    /// The out-of-line name pointer for a caller that keeps it from being
    /// replaced (see [`Dentry::name_eq_held`]). Acquire, not a protected
    /// load: no retire can race with it (nothing is retired while the
    /// caller holds its lock), so it only has to see the `ExtName`'s bytes,
    /// written before the Release swap in `store_name` that published it.
    #[inline(always)]
    fn ext_held(p: &AtomicPtr<ExtName>) -> *mut ExtName {
        p.load(Ordering::Acquire)
    }

    /// The name, copied, for a caller that keeps it from being replaced (the
    /// rename lock, see [`Dentry::name_eq_held`]).
    pub(crate) fn name_held(&self) -> Vec<u8> {
        // SAFETY: as name_eq_held.
        unsafe { self.name_with(Self::ext_held) }
    }

    /// The name, copied, inside the read section `g`: consistent, as the
    /// copy is retried until `d_seq` shows no rename overlapped it.
    pub(crate) fn name_rcu(&self, g: &RcuGuard<'_>) -> Vec<u8> {
        loop {
            let s = self.d_seq.read_begin();
            // SAFETY: a pointer protected by `g` stays valid while `g`
            // lives, which outlasts this call.
            let n = unsafe { self.name_with(|p| g.protect(p)) };
            if !self.d_seq.read_retry(s) {
                return n;
            }
        }
    }

    /// # Safety
    /// As [`Dentry::name_eq_with`].
    unsafe fn name_with(&self, ext: impl FnOnce(&AtomicPtr<ExtName>) -> *mut ExtName) -> Vec<u8> {
        // Relaxed: validated by d_seq (name_rcu) or stable (name_held).
        let len = (self.d_hash_len.load(Ordering::Relaxed) & 0xffff_ffff) as usize;
        if len > DNAME_INLINE_LEN {
            let p = ext(&self.d_name_ext);
            if p.is_null() {
                return Vec::new();
            }
            // SAFETY: valid for this call (our contract); immutable.
            unsafe { (*p).0.to_vec() }
        } else {
            let mut out = Vec::with_capacity(DNAME_INLINE_LEN);
            for slot in &self.d_iname {
                // Relaxed: as the length.
                out.extend_from_slice(&slot.load(Ordering::Relaxed).to_le_bytes());
            }
            out.truncate(len);
            out
        }
    }

    #[inline(always)]
    pub(crate) fn flags(&self) -> u32 {
        // Relaxed: flags are validated by d_seq or read under the d_lock.
        self.d_flags.load(Ordering::Relaxed)
    }

    pub(crate) fn set_flags(&self, f: u32) {
        // Relaxed: changed under the d_lock; readers validate with d_seq.
        self.d_flags.fetch_or(f, Ordering::Relaxed);
    }

    pub(crate) fn clear_flags(&self, f: u32) {
        // Relaxed: as set_flags.
        self.d_flags.fetch_and(!f, Ordering::Relaxed);
    }

    /// The inode, or `None` for a negative dentry, loaded inside the read
    /// section `g` and borrowed for as long as both `self` and `g` are: an
    /// inode is freed only a grace period after its last dentry lets it go,
    /// so one reachable from a live dentry when `g` loaded it outlives `g`.
    #[inline(always)]
    pub(crate) fn inode_rcu<'g>(&'g self, g: &'g RcuGuard<'_>) -> Option<&'g Inode> {
        // SAFETY: protected by `g` (see above); the result cannot outlive it.
        unsafe { g.protect(&self.d_inode).as_ref() }
    }

    /// The parent, loaded inside the read section `g` (`None` never happens
    /// for a dentry of a `Vfs`; the root is its own parent). A parent is
    /// freed only a grace period after its last child lets it go, so it
    /// outlives `g` if `self` was alive when `g` loaded it.
    #[inline(always)]
    pub(crate) fn parent_rcu<'g>(&'g self, g: &'g RcuGuard<'_>) -> Option<&'g Dentry> {
        // SAFETY: protected by `g` (see above); the result cannot outlive it.
        unsafe { g.protect(&self.d_parent).as_ref() }
    }

    /// The inode, or null, for a caller outside any read section that
    /// keeps it: a counted reference on this dentry (see
    /// `DentryRef::inode` for why that pins the inode pointer) or a lock
    /// under which it is only tested against null. Acquire, not a
    /// protected load: no grace period is involved, since the holder's
    /// reference keeps the inode from being retired, so the load only has
    /// to see the inode's fields, written before the Release (AcqRel)
    /// store that installed the pointer or the publication of the dentry.
    /// (Inside a read section the crate loads it through the guard.)
    ///
    /// For frontends that pin the inode by their own means (see
    /// [`Vfs::lookup_rcu_with`](crate::Vfs::lookup_rcu_with)); a holder of
    /// a [`DentryRef`](crate::DentryRef) has the safe
    /// [`DentryRef::inode`](crate::DentryRef::inode).
    #[inline(always)]
    pub fn inode_ptr_held(&self) -> *mut Inode {
        self.d_inode.load(Ordering::Acquire)
    }

    /// The parent, for a caller outside any read section that keeps it: a
    /// counted reference on this dentry plus the rename lock (no parent
    /// changes, and the child's reference pins the parent). Acquire as
    /// [`Dentry::inode_ptr_held`]: the pointee is kept by what the caller
    /// holds, the load only has to see its initialisation.
    #[inline(always)]
    pub(crate) fn parent_ptr_held(&self) -> *mut Dentry {
        self.d_parent.load(Ordering::Acquire)
    }

    /// Whether this may be the dentry for a name hashing to `hash` in
    /// `parent`: a hint for the batched walk's prefetches, which the
    /// lookup proper decides again (unvalidated loads; the name is not
    /// compared).
    #[inline(always)]
    pub(crate) fn hint_matches(&self, parent: &Dentry, hash: u32) -> bool {
        // Relaxed: a hint, nothing is decided on it.
        (self.d_hash_len.load(Ordering::Relaxed) >> 32) as u32 == hash
            && std::ptr::eq(self.d_parent.load(Ordering::Relaxed), parent)
    }

    /// The next dentry on this one's hash chain, loaded inside the read
    /// section `g` (a hint for the batched walk: a removed dentry keeps its
    /// link, and is freed only a grace period after removal).
    #[inline(always)]
    pub(crate) fn hash_next_rcu<'g>(&'g self, g: &'g RcuGuard<'_>) -> Option<&'g Dentry> {
        // SAFETY: protected by `g`: a chain member reachable when loaded is
        // freed only after `g` ends; the result cannot outlive it.
        unsafe { g.protect(&self.d_hash_next).as_ref() }
    }

    /// The reference count (racy; for tests and diagnostics).
    pub fn count(&self) -> i32 {
        self.d_lockref.count()
    }
}

impl Drop for Dentry {
    fn drop(&mut self) {
        let p = self.d_name_ext.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: we own the dentry exclusively; the ExtName was leaked
            // from a Box by `store_name` and is freed exactly here.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}
