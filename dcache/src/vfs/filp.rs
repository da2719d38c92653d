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

use crate::cache_aligned::CacheAligned;
use crate::dentry::Dentry;
use crate::file::{IdleFile, Split};
use crate::sync::{LockExt, Mutex};

use super::DentryRef;

/// Idle files a shard keeps.
pub(crate) const PER_SHARD: usize = 8;

/// An idle file of this Vfs. The `'static` is a lie told only inside this
/// module: every idle file is dropped before the Vfs is (see `flush`).
type Idle = IdleFile<DentryRef<'static>, Split>;

/// The per-thread shards of idle files.
pub(crate) struct FilpCache {
    shards: Box<[CacheAligned<Mutex<Vec<Idle>>>]>,
}

impl FilpCache {
    pub(crate) fn new() -> FilpCache {
        FilpCache {
            shards: (0..crate::shard::default_count())
                .map(|_| CacheAligned::new(Mutex::new(Vec::with_capacity(PER_SHARD))))
                .collect(),
        }
    }

    fn mine(&self) -> &Mutex<Vec<Idle>> {
        &self.shards[crate::shard::this_thread(self.shards.len())]
    }

    /// The calling thread's idle file on `d`, if it has one.
    #[inline]
    pub(crate) fn take<'v>(&self, d: &Dentry) -> Option<IdleFile<DentryRef<'v>, Split>> {
        let mut s = self.mine().lock_unpoisoned();
        let i = s.iter().rposition(|f| std::ptr::eq(f.path().dentry(), d))?;
        let f = s.swap_remove(i);
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
        let evicted = {
            let mut s = self.mine().lock_unpoisoned();
            let old = (s.len() == PER_SHARD).then(|| s.remove(0));
            s.push(f);
            old
        };
        // Outside the lock: dput may free the dentry.
        drop(evicted);
    }

    /// Drop the idle files on `d` (every shard); whether there were any.
    pub(crate) fn forget(&self, d: &Dentry) -> bool {
        let mut gone = Vec::new();
        for s in self.shards.iter() {
            let mut s = s.lock_unpoisoned();
            while let Some(i) = s.iter().position(|f| std::ptr::eq(f.path().dentry(), d)) {
                gone.push(s.swap_remove(i));
            }
        }
        !gone.is_empty()
    }

    /// Drop every idle file; how many there were.
    pub(crate) fn flush(&self) -> usize {
        let mut gone = Vec::new();
        for s in self.shards.iter() {
            gone.append(&mut s.lock_unpoisoned());
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
