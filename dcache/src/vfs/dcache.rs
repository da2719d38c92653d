//! Dentry lifetime: allocation, instantiation, `dput`, kill, the LRU of
//! unused dentries and the shrinker, and teardown (Linux's `fs/dcache.c`;
//! the inodes they share are [`super::icache`]).
//!
//! A cached dentry with no users has count 0 and stays hashed; it sits on an
//! LRU list (lazily: it is put there by the `dput` that dropped it to 0 and
//! stays listed while reused, like Linux). A listed dentry is *owned* by the
//! list: whoever kills it leaves the memory to the shrinker, which frees it
//! when it pops the entry. Memory is always freed through RCU, after every
//! lockless walker that might stand on it has left its read section.

use std::collections::{HashSet, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::Ordering as StdOrdering;

use super::icache::{iget, iput};
use super::{DentryRef, Super};
use crate::dentry::{
    name_hash, Dentry, D_HASHED, D_KILLED, D_LRU_LIST, D_NEG_COUNTED, D_REFERENCED, D_ROOT,
};
use crate::fs::Attr;
use crate::lockref::LockRefGuard;
use crate::sync::{LockExt, Ordering};

/// The unused-dentry lists: negative entries are reclaimed first.
#[derive(Default)]
pub(crate) struct Lru {
    negative: VecDeque<NonNull<Dentry>>,
    positive: VecDeque<NonNull<Dentry>>,
}

// SAFETY: the list only stores pointers; the dentries are Sync and ownership
// of a listed dentry's memory moves with the D_LRU_LIST flag under d_lock.
unsafe impl Send for Lru {}

#[inline(always)]
pub(crate) fn sb_of(d: &Dentry) -> &Super {
    // SAFETY: every dentry's d_sb points to the Super of the Vfs that owns
    // it, and the Super outlives all its dentries (teardown frees them first).
    unsafe { &*(d.d_sb as *const Super) }
}

/// Allocate the root dentry (count 1, held by the Vfs until teardown).
pub(crate) fn d_alloc_root(sb: *const Super, attr: &Attr) -> *mut Dentry {
    // SAFETY: the caller passes its live, fully built Super.
    let d = unsafe { &*sb }
        .dentry_cache
        .alloc(Dentry::new(
            sb.cast(),
            std::ptr::null_mut(),
            b"/",
            name_hash(b"/"),
        ))
        .as_ptr();
    // SAFETY: freshly allocated, not shared yet.
    let dr = unsafe { &*d };
    // The root is its own parent, so `..` at the root stays there.
    dr.d_parent.store(d, Ordering::Relaxed);
    dr.set_flags(D_ROOT);
    let s = sb_of(dr);
    s.counters.dentries.fetch_add(1, StdOrdering::Relaxed);
    s.counters.allocated.fetch_add(1, StdOrdering::Relaxed);
    let inode = iget(s, attr, d);
    dr.d_inode.store(inode, Ordering::Relaxed);
    d
}

/// Allocate a child of `parent` (which the caller holds a reference on),
/// bound to `attr` (`None`: negative), and hash it. If another thread hashed
/// the same name first, ours is discarded and theirs is returned. The result
/// carries one reference for the caller.
///
/// # Safety
/// `parent` is a live directory dentry of `sb` on which the caller holds a
/// reference for the whole call (the child takes one of its own).
pub(crate) unsafe fn d_alloc_hashed(
    sb: &Super,
    parent: *mut Dentry,
    name: &[u8],
    attr: Option<&Attr>,
    cookie: u64,
) -> *mut Dentry {
    let hash = name_hash(name);
    loop {
        // SAFETY: the caller's contract (a held directory of sb).
        let d = unsafe { d_alloc_child(sb, parent, name, hash, attr) };
        // SAFETY: freshly allocated.
        let dr = unsafe { &*d };
        dr.d_time.store(cookie, Ordering::Relaxed);
        dr.set_flags(D_HASHED);
        if attr.is_none() {
            dr.set_flags(D_NEG_COUNTED);
            sb.counters.negative.fetch_add(1, StdOrdering::Relaxed);
        }
        let g = sb.rcu.read_lock();
        // SAFETY: d is ours (one reference), off every chain, with parent
        // and name set; it is freed only through retire_dentry.
        match unsafe { sb.table.insert_unique(d, name, hash) } {
            None => return d,
            Some(existing) => {
                // Lost the race: undo ours (never published, so free now).
                dr.clear_flags(D_HASHED);
                discard_unpublished(sb, d);
                // SAFETY: `existing` was on the chain inside our read section.
                let er = unsafe { &*existing };
                if er.d_lockref.get_not_dead() {
                    drop(g);
                    return existing;
                }
                // It is dying: it will be unhashed shortly; try again.
                drop(g);
                crate::sync::yield_now();
            }
        }
    }
}

/// Allocate a child of `parent` named `name`, bound to `attr` (`None`:
/// negative), not hashed: one reference for the caller, one taken on the
/// parent.
///
/// # Safety
/// As [`d_alloc_hashed`]: `parent` is a live directory dentry of `sb`
/// that the caller holds for the whole call.
unsafe fn d_alloc_child(
    sb: &Super,
    parent: *mut Dentry,
    name: &[u8],
    hash: u32,
    attr: Option<&Attr>,
) -> *mut Dentry {
    let d = sb
        .dentry_cache
        .alloc(Dentry::new(
            std::ptr::from_ref(sb).cast(),
            parent,
            name,
            hash,
        ))
        .as_ptr();
    // SAFETY: freshly allocated.
    let dr = unsafe { &*d };
    sb.counters.dentries.fetch_add(1, StdOrdering::Relaxed);
    sb.counters.allocated.fetch_add(1, StdOrdering::Relaxed);
    if let Some(a) = attr {
        dr.d_inode.store(iget(sb, a, d), Ordering::Relaxed);
    }
    // The child pins its parent.
    // SAFETY: the caller holds a reference on parent.
    let pr = unsafe { &*parent };
    pr.d_lockref.get();
    pr.d_children.fetch_add(1, Ordering::Relaxed);
    d
}

/// Linux's `d_tmpfile`: a dentry for a file with no name (O_TMPFILE),
/// under `parent` and called `#<ino>`, never hashed, so no lookup finds
/// it; it dies with its last reference. One reference for the caller.
///
/// # Safety
/// As [`d_alloc_hashed`].
pub(crate) unsafe fn d_alloc_tmpfile(sb: &Super, parent: *mut Dentry, attr: &Attr) -> *mut Dentry {
    let name = format!("#{}", attr.ino);
    // SAFETY: the caller's contract.
    unsafe {
        d_alloc_child(
            sb,
            parent,
            name.as_bytes(),
            name_hash(name.as_bytes()),
            Some(attr),
        )
    }
}

/// Free a dentry that was never reachable by anyone else.
fn discard_unpublished(sb: &Super, d: *mut Dentry) {
    // SAFETY: d is ours alone (never hashed).
    let dr = unsafe { &*d };
    if dr.flags() & D_NEG_COUNTED != 0 {
        sb.counters.negative.fetch_sub(1, StdOrdering::Relaxed);
    }
    let inode = dr.d_inode.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !inode.is_null() {
        iput(sb, inode, d);
    }
    let parent = dr.d_parent.load(Ordering::Relaxed);
    // SAFETY: we took a reference on the parent in d_alloc_hashed.
    unsafe { &*parent }
        .d_children
        .fetch_sub(1, Ordering::Relaxed);
    sb.counters.dentries.fetch_sub(1, StdOrdering::Relaxed);
    sb.counters.allocated.fetch_sub(1, StdOrdering::Relaxed);
    // SAFETY: never published, so nobody else can see it; it came from
    // this Super's slab (d_alloc_hashed).
    unsafe { sb.dentry_cache.free(NonNull::new_unchecked(d)) };
    // SAFETY: the reference we took on the parent.
    unsafe { dput(parent) };
}

/// Bind a negative dentry to an inode (create, mkdir, ...). The caller holds
/// a reference on `d` and the parent's i_rwsem for writing.
pub(crate) fn d_instantiate(sb: &Super, d: &Dentry, attr: &Attr) {
    let inode = iget(sb, attr, d);
    let _g = d.d_lockref.lock();
    d.d_seq.write_begin();
    // AcqRel: Release so a reader whose protected load (`RcuGuard::protect`)
    // sees the new pointer sees the inode's fields; Acquire for the old
    // value we go on to drop. (seize's grace-period argument rests on its
    // own barriers, not on this store.)
    let old = d.d_inode.swap(inode, Ordering::AcqRel);
    d.d_seq.write_end();
    if d.flags() & D_NEG_COUNTED != 0 {
        d.clear_flags(D_NEG_COUNTED);
        sb.counters.negative.fetch_sub(1, StdOrdering::Relaxed);
    }
    drop(_g);
    if !old.is_null() {
        iput(sb, old, d);
    }
}

/// After an unlink/rmdir: if the caller holds the only reference, turn the
/// dentry negative in place (a cached miss for the next lookup); otherwise
/// unhash it so other holders keep their inode while new lookups miss.
///
/// Takes the caller's reference by value: the only moment a held dentry's
/// inode may go is when its sole holder gives it up here, so no `&Inode`
/// borrowed from that reference ([`DentryRef::inode`]) can outlive it.
pub(crate) fn d_delete(sb: &Super, dref: DentryRef<'_>) {
    let d = dref.dentry();
    // Idle files would keep the name from turning into a cached miss.
    sb.filps.forget(d);
    let g = d.d_lockref.lock();
    if g.count() == 1 && d.flags() & D_HASHED != 0 {
        d.d_seq.write_begin();
        // AcqRel: as in d_instantiate (null publishes nothing; Acquire for
        // the old inode we go on to drop).
        let old = d.d_inode.swap(std::ptr::null_mut(), Ordering::AcqRel);
        d.d_seq.write_end();
        if d.flags() & D_NEG_COUNTED == 0 {
            d.set_flags(D_NEG_COUNTED);
            sb.counters.negative.fetch_add(1, StdOrdering::Relaxed);
        }
        drop(g);
        if !old.is_null() {
            iput(sb, old, d);
        }
    } else {
        unhash_locked(sb, d, &g);
    }
}

/// Remove a dentry from the hash so no new lookup finds it (Linux
/// `d_invalidate`/`__d_drop`). Existing references stay valid.
pub(crate) fn d_drop(sb: &Super, d: &Dentry) {
    let g = d.d_lockref.lock();
    unhash_locked(sb, d, &g);
}

fn unhash_locked(sb: &Super, d: &Dentry, _g: &LockRefGuard<'_>) {
    if d.flags() & D_HASHED == 0 {
        return;
    }
    // SAFETY: D_HASHED says d is on the table; the caller's d_lock (`_g`)
    // keeps it alive and stops a rename from moving it meanwhile.
    unsafe { sb.table.remove(d as *const Dentry as *mut Dentry) };
    d.clear_flags(D_HASHED);
    // Every rcu-walker that sampled d_seq before now will fail its check.
    d.d_seq.invalidate();
    if d.flags() & D_NEG_COUNTED != 0 {
        d.clear_flags(D_NEG_COUNTED);
        sb.counters.negative.fetch_sub(1, StdOrdering::Relaxed);
    }
}

/// Drop a reference (Linux `dput`, with `fast_dput`'s lockless common case).
///
/// # Safety
/// The caller owns one reference to `d`, a dentry of a live Vfs.
pub(crate) unsafe fn dput(mut d: *mut Dentry) {
    loop {
        // SAFETY: we own a reference, so d is alive.
        let dr = unsafe { &*d };
        let r = dr.d_lockref.put_return();
        if r > 0 {
            return;
        }
        if r == 0 {
            // Dropped to zero without the lock. If it is hashed, listed and
            // recently used, nothing more to do: the common retain case.
            let f = dr.flags();
            if f & (D_HASHED | D_LRU_LIST | D_REFERENCED) == (D_HASHED | D_LRU_LIST | D_REFERENCED)
            {
                return;
            }
            let g = dr.d_lockref.lock();
            if g.count() != 0 {
                // Someone took a reference meanwhile; they own the decision.
                return;
            }
            match retain_or_kill(d, dr, g) {
                Some(parent) => d = parent,
                None => return,
            }
            continue;
        }
        // The lockless path gave up (lock held or retries ran out).
        let mut g = dr.d_lockref.lock();
        if g.count() > 1 {
            g.set_count(g.count() - 1);
            return;
        }
        g.set_count(0);
        match retain_or_kill(d, dr, g) {
            Some(parent) => d = parent,
            None => return,
        }
    }
}

/// Count is 0 and we hold the lock: keep the dentry cached (LRU) or kill it
/// if it is unhashed. Returns the parent whose reference the kill released,
/// for the caller to put (iteratively, so long chains cannot overflow the
/// stack).
///
/// `dp` is the dentry's raw pointer as allocated (the LRU stores it and the
/// free goes through it); `d` is the same dentry borrowed.
fn retain_or_kill(dp: *mut Dentry, d: &Dentry, g: LockRefGuard<'_>) -> Option<*mut Dentry> {
    let sb = sb_of(d);
    if d.flags() & D_ROOT != 0 {
        return None;
    }
    if d.flags() & D_HASHED != 0 {
        d.set_flags(D_REFERENCED);
        let mut over = false;
        if d.flags() & D_LRU_LIST == 0 {
            d.set_flags(D_LRU_LIST);
            let mut lru = sb.lru.lock_unpoisoned();
            // SAFETY: dp is not null.
            let p = unsafe { NonNull::new_unchecked(dp) };
            if d.inode_ptr_held().is_null() {
                lru.negative.push_back(p);
            } else {
                lru.positive.push_back(p);
            }
            let unused = sb.counters.unused.fetch_add(1, StdOrdering::Relaxed) + 1;
            over = unused > sb.config.max_unused
                || sb.counters.negative.load(StdOrdering::Relaxed) > sb.config.max_negative;
        }
        drop(g);
        if over {
            shrink(sb, 64, true);
        }
        return None;
    }
    Some(kill(sb, dp, g))
}

/// Kill a dentry whose count is 0 and whose lock we hold: mark it dead,
/// unhash it, drop its inode, and free it (or leave it to the LRU that owns
/// it). Returns the parent, whose reference the caller must put.
fn kill(sb: &Super, dp: *mut Dentry, mut g: LockRefGuard<'_>) -> *mut Dentry {
    // SAFETY: the caller holds the dentry's lock, so it is alive.
    let d = unsafe { &*dp };
    g.mark_dead();
    unhash_locked(sb, d, &g);
    d.set_flags(D_KILLED);
    // Clear the inode inside a d_seq write section (Linux's
    // dentry_unlink_inode). A walker can still reach this dentry through a
    // chain link it read before the unhash above, and sample d_seq after
    // the unhash's invalidation: without a second change here it would
    // then see the inode gone under an unchanged d_seq and answer ENOENT
    // for a name that exists (tests/stress.rs has the race).
    d.d_seq.write_begin();
    // AcqRel: as in d_instantiate (Acquire for the inode we go on to drop).
    let inode = d.d_inode.swap(std::ptr::null_mut(), Ordering::AcqRel);
    d.d_seq.write_end();
    let listed = d.flags() & D_LRU_LIST != 0;
    drop(g);
    if !inode.is_null() {
        iput(sb, inode, dp);
    }
    let parent = d.d_parent.load(Ordering::Relaxed);
    // SAFETY: the child's reference keeps the parent alive until we put it.
    unsafe { &*parent }
        .d_children
        .fetch_sub(1, Ordering::Relaxed);
    if !listed {
        // SAFETY: killed, unhashed and not on the LRU: nothing can reach
        // it but readers already inside a read section.
        unsafe { retire_dentry(sb, dp) };
    }
    parent
}

/// Free `d` a grace period from now.
///
/// # Safety
/// `d` is a dentry of `sb`, killed and unhashed, that no reference, list
/// or table entry reaches any more (only readers already inside a read
/// section may still see it), retired once.
unsafe fn retire_dentry(sb: &Super, d: *mut Dentry) {
    /// # Safety
    /// `p` is a dentry of the Super `sb` points to, retired once, and its
    /// grace period is over.
    unsafe fn free_dentry(p: *mut u8, sb: *const ()) {
        // SAFETY: the Super outlives its retired objects (teardown waits
        // for them).
        let sb = unsafe { &*sb.cast::<Super>() };
        sb.counters.allocated.fetch_sub(1, StdOrdering::Relaxed);
        // SAFETY: allocated from this slab (d_alloc_hashed), now unreachable.
        unsafe {
            sb.dentry_cache
                .free(NonNull::new_unchecked(p.cast::<Dentry>()))
        };
    }
    sb.counters.dentries.fetch_sub(1, StdOrdering::Relaxed);
    // SAFETY: the dentry is unhashed and killed; no new reader can reach it;
    // free_dentry returns it to the slab of the Super passed with it.
    unsafe {
        sb.rcu
            .retire(d.cast::<u8>(), std::ptr::from_ref(sb).cast(), free_dentry)
    };
}

/// Run a backend call that may open host descriptors (a lookup, a create,
/// an open). If the process is out of them (EMFILE, ENFILE), free every
/// unused dentry, so that the backend inodes only they kept are forgotten
/// and drop what they hold, and run it once more: running out is never
/// sticky while the cache holds what nobody uses.
pub(crate) fn fd_retry<T>(sb: &Super, mut f: impl FnMut() -> crate::Result<T>) -> crate::Result<T> {
    match f() {
        Err(e) if e == crate::Errno::EMFILE || e == crate::Errno::ENFILE => {
            sb.counters.fd_sheds.fetch_add(1, StdOrdering::Relaxed);
            let unused = sb.counters.unused.load(StdOrdering::Relaxed);
            shrink(sb, unused, false);
            f()
        }
        r => r,
    }
}

/// Free up to `n` unused dentries, negative first. With `only_over`, stop
/// once the counts are back under their caps.
pub(crate) fn shrink(sb: &Super, n: usize, only_over: bool) -> usize {
    let mut freed = 0;
    let mut budget = n.saturating_mul(2).max(n); // entries examined
    while freed < n && budget > 0 {
        budget -= 1;
        let negatives_over =
            sb.counters.negative.load(StdOrdering::Relaxed) > sb.config.max_negative;
        if only_over
            && !negatives_over
            && sb.counters.unused.load(StdOrdering::Relaxed) <= sb.config.max_unused
        {
            break;
        }
        let popped = {
            let mut lru = sb.lru.lock_unpoisoned();
            if only_over && negatives_over && !lru.negative.is_empty() {
                lru.negative.pop_front()
            } else {
                lru.negative
                    .pop_front()
                    .or_else(|| lru.positive.pop_front())
            }
        };
        let Some(p) = popped else { break };
        // SAFETY: a listed dentry is owned by the list (never freed while
        // D_LRU_LIST is set), so it is alive.
        let d = unsafe { p.as_ref() };
        let g = d.d_lockref.lock();
        d.clear_flags(D_LRU_LIST);
        sb.counters.unused.fetch_sub(1, StdOrdering::Relaxed);
        if d.flags() & D_KILLED != 0 {
            // Killed while listed: its memory was left to us.
            drop(g);
            // SAFETY: killed (unhashed) and now off the LRU, whose list was
            // its last owner.
            unsafe { retire_dentry(sb, p.as_ptr()) };
            freed += 1;
            continue;
        }
        if g.count() != 0 {
            // In use again: it leaves the list; its next dput re-lists it.
            continue;
        }
        if d.flags() & D_REFERENCED != 0 && !only_over {
            // Second chance: recently used entries go to the back once.
            d.clear_flags(D_REFERENCED);
            d.set_flags(D_LRU_LIST);
            sb.counters.unused.fetch_add(1, StdOrdering::Relaxed);
            let mut lru = sb.lru.lock_unpoisoned();
            if d.inode_ptr_held().is_null() {
                lru.negative.push_back(p);
            } else {
                lru.positive.push_back(p);
            }
            continue;
        }
        let parent = kill(sb, p.as_ptr(), g);
        freed += 1;
        // SAFETY: kill handed us the parent reference the child held.
        unsafe { dput(parent) };
    }
    freed
}

/// Free every dentry and inode of a Vfs being dropped, those retired
/// earlier included (the Vfs's own collector frees them in `barrier_all`):
/// afterwards nothing refers to the Super.
pub(crate) fn teardown(sb: &Super) {
    // Nobody else can hold references (DentryRefs borrow the Vfs), so every
    // cached dentry is unused or pinned only by its children. Free them all
    // directly; order does not matter, nothing is dereferenced after.
    let mut frees = sb.table.drain_all();
    frees.push(sb.root());
    // An unhashed dentry still alive is pinned by a child (it would have
    // been killed at count 0 otherwise): a directory unlinked, replaced or
    // invalidated while names under it stayed cached. It is an ancestor of
    // a hashed one; find each once.
    let mut seen: HashSet<usize> = frees.iter().map(|&d| d as usize).collect();
    for i in 0..frees.len() {
        // SAFETY: exclusive access during drop; every listed dentry is
        // allocated, and so is the parent each pins.
        let mut p = unsafe { &*frees[i] }.d_parent.load(Ordering::Relaxed);
        while !p.is_null() && seen.insert(p as usize) {
            frees.push(p);
            // SAFETY: as above.
            p = unsafe { &*p }.d_parent.load(Ordering::Relaxed);
        }
    }
    {
        // Killed dentries still on a list are not in the table; the lists
        // own their memory, so they are freed here too.
        let mut guard = sb.lru.lock_unpoisoned();
        let lru = &mut *guard;
        for p in lru.negative.drain(..).chain(lru.positive.drain(..)) {
            // SAFETY: listed dentries are alive (owned by the list).
            if unsafe { p.as_ref() }.flags() & D_KILLED != 0 {
                frees.push(p.as_ptr());
            }
        }
    }
    let mut inodes = Vec::new();
    for &d in &frees {
        // SAFETY: exclusive access during drop.
        let dr = unsafe { &*d };
        let i = dr.d_inode.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !i.is_null() {
            inodes.push(i);
        }
    }
    // SAFETY: no reader exists any more (&mut self on the Vfs).
    unsafe { sb.rcu.barrier_all() };
    for d in frees {
        sb.counters.dentries.fetch_sub(1, StdOrdering::Relaxed);
        sb.counters.allocated.fetch_sub(1, StdOrdering::Relaxed);
        // SAFETY: exclusive; each dentry is freed once here, to the slab it
        // came from.
        unsafe { sb.dentry_cache.free(NonNull::new_unchecked(d)) };
    }
    let mut map = sb.inodes.lock_unpoisoned();
    map.clear_aliases();
    let mut seen = std::collections::HashSet::new();
    for i in inodes {
        if seen.insert(i as usize) {
            // SAFETY: exclusive; still allocated (only iput frees inodes,
            // and these still had dentry references), so not null.
            map.remove(unsafe { NonNull::new_unchecked(i) });
            sb.counters.inodes.fetch_sub(1, StdOrdering::Relaxed);
            // SAFETY: as above; freed once thanks to `seen`, to the slab
            // it came from.
            unsafe { sb.inode_cache.free(NonNull::new_unchecked(i)) };
        }
    }
    drop(map);
    sb.counters.negative.store(0, StdOrdering::Relaxed);
    sb.counters.unused.store(0, StdOrdering::Relaxed);
    // Objects retired before the teardown were freed by `barrier_all`
    // (seize's `reclaim_all` on this Vfs's collector) above.
    debug_assert_eq!(sb.dentry_cache.live(), 0);
    debug_assert_eq!(sb.inode_cache.live(), 0);
}
