//! The Vfs's cache of idle files, one shard per thread (Linux's per-CPU
//! `filp` slab cache, keeping the path reference as well).
//!
//! When the last reference to a file the Vfs opened goes, the backend is
//! released as always, but the file's memory and its dentry reference are
//! kept in the closing thread's shard ([`IdleFile`]). The next open of the
//! same dentry from that thread takes them back: the walk finds the idle
//! file inside its read section instead of taking a reference on the
//! dentry (a write to the dentry's lockref, which every opener of the file
//! shares), and the new file is built in the old block (no allocation).
//! So an open and close of a file that thread has opened before writes
//! only its own shard's line, the file's own lines, and what the backend
//! writes.
//!
//! An idle file keeps its dentry referenced, so whatever wants a dentry
//! unreferenced drops the idle files on it first: `d_delete` (so an
//! unlinked name turns into a cached miss), the shrinker, and the `Vfs`'s
//! drop (before teardown, which requires that no reference is held).
//! A shard keeps at most [`PER_SHARD`] idle files; the oldest goes first.
//! They are kept in the shard itself, which is alone on its line pair: a
//! list on the heap would be allocated by whichever thread made the cache,
//! next to that thread's other data, and the writes of every close to it
//! would then take lines from other threads' reads (see `shard_tables` in
//! memfs for what that cost).

use crate::cache_aligned::PairAligned;
use crate::dentry::Dentry;
use crate::file::{IdleFile, Split};
use crate::sync::{LockExt, Mutex};

use super::DentryRef;

/// Idle files a shard keeps.
pub(crate) const PER_SHARD: usize = 8;

/// An idle file of this Vfs. The `'static` is a lie told only inside this
/// module: every idle file is dropped before the Vfs is (see `flush`).
type Idle = IdleFile<DentryRef<'static>, Split>;

/// One thread's idle files, oldest first, in place.
struct Shard {
    files: [Option<Idle>; PER_SHARD],
    len: usize,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            files: [const { None }; PER_SHARD],
            len: 0,
        }
    }

    /// Where the newest idle file on `d` is.
    fn newest_on(&self, d: &Dentry) -> Option<usize> {
        self.files[..self.len].iter().rposition(|f| {
            f.as_ref()
                .is_some_and(|f| std::ptr::eq(f.path().dentry(), d))
        })
    }

    /// Take the file at `i`; the newest moves into its place.
    fn swap_remove(&mut self, i: usize) -> Option<Idle> {
        if i >= self.len {
            return None;
        }
        self.len -= 1;
        self.files.swap(i, self.len);
        self.files[self.len].take()
    }

    /// Add `f` as the newest; the oldest when the shard was full.
    fn push(&mut self, f: Idle) -> Option<Idle> {
        let old = if self.len == PER_SHARD {
            self.files.rotate_left(1);
            self.len -= 1;
            self.files[self.len].take()
        } else {
            None
        };
        self.files[self.len] = Some(f);
        self.len += 1;
        old
    }

    /// Take the files `which` picks.
    fn drain_where(&mut self, mut which: impl FnMut(&Idle) -> bool, into: &mut Vec<Idle>) {
        let mut i = 0;
        while i < self.len {
            match &self.files[i] {
                Some(f) if which(f) => into.extend(self.swap_remove(i)),
                _ => i += 1,
            }
        }
    }
}

/// The per-thread shards of idle files.
pub(crate) struct FilpCache {
    shards: Box<[PairAligned<Mutex<Shard>>]>,
}

impl FilpCache {
    pub(crate) fn new() -> FilpCache {
        FilpCache {
            shards: (0..crate::shard::default_count())
                .map(|_| PairAligned::new(Mutex::new(Shard::new())))
                .collect(),
        }
    }

    fn mine(&self) -> &Mutex<Shard> {
        &self.shards[crate::shard::this_thread(self.shards.len())]
    }

    /// The calling thread's idle file on `d`, if it has one.
    #[inline]
    pub(crate) fn take<'v>(&self, d: &Dentry) -> Option<IdleFile<DentryRef<'v>, Split>> {
        let mut s = self.mine().lock_unpoisoned();
        let i = s.newest_on(d)?;
        let f = s.swap_remove(i)?;
        drop(s);
        // Back to the lifetime of the Vfs it came from: `'v` borrows that
        // Vfs (the caller found `d` through it).
        Some(shorten(f))
    }

    /// Keep `f` for the calling thread's next open of its dentry.
    pub(crate) fn put(&self, f: IdleFile<DentryRef<'_>, Split>) {
        // SAFETY: the idle file is dropped by this cache before the Vfs is
        // (`flush` from Vfs::drop), so its reference does not outlive it.
        let f: Idle = unsafe { lengthen(f) };
        let evicted = self.mine().lock_unpoisoned().push(f);
        // Outside the lock: dput may free the dentry.
        drop(evicted);
    }

    /// Drop the idle files on `d` (every shard); whether there were any.
    pub(crate) fn forget(&self, d: &Dentry) -> bool {
        let mut gone = Vec::new();
        for s in self.shards.iter() {
            let same = |f: &Idle| std::ptr::eq(f.path().dentry(), d);
            s.lock_unpoisoned().drain_where(same, &mut gone);
        }
        !gone.is_empty()
    }

    /// Drop every idle file; how many there were.
    pub(crate) fn flush(&self) -> usize {
        let mut gone = Vec::new();
        for s in self.shards.iter() {
            s.lock_unpoisoned().drain_where(|_| true, &mut gone);
        }
        gone.len()
    }
}

fn shorten<'v>(f: Idle) -> IdleFile<DentryRef<'v>, Split> {
    // SAFETY: only the lifetime changes (same type otherwise, same
    // layout), to a shorter one.
    unsafe { std::mem::transmute::<Idle, IdleFile<DentryRef<'v>, Split>>(f) }
}

/// # Safety
/// The result is dropped before the Vfs its dentry belongs to.
unsafe fn lengthen(f: IdleFile<DentryRef<'_>, Split>) -> Idle {
    // SAFETY: only the lifetime changes; the caller keeps the promise.
    unsafe { std::mem::transmute::<IdleFile<DentryRef<'_>, Split>, Idle>(f) }
}
