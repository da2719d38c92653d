//! File locks: POSIX record locks (`fcntl` F_GETLK / F_SETLK / F_SETLKW,
//! per process or per open file description) and BSD `flock`, with
//! Linux's semantics, as pure data ([`InodeLocks`]) every backend can
//! share, an in-process table for local backends ([`LocalLocks`]), and
//! the wake-up registry a backend uses to tell a frontend's blocked
//! waiters that a lock went ([`UnlockWakers`]).
//!
//! The semantics (Linux's `fs/locks.c`):
//!
//! - POSIX locks belong to an owner (a process, or an open file
//!   description for OFD locks) and cover a byte range; an owner's locks
//!   never conflict with each other. A new lock replaces whatever the owner
//!   held on its range (splitting a lock it cuts through), and the owner's
//!   locks of one type that overlap or touch are merged. Unlocking a range
//!   cuts it out of the owner's locks. Two owners' locks conflict where
//!   they overlap and either is a write lock.
//! - `flock` locks cover the whole file and belong to an open file
//!   description. Converting one (shared to exclusive or back) first drops
//!   the old lock and then asks for the new one, which may fail: Linux's
//!   conversion is not atomic either. `flock` and POSIX locks do not
//!   conflict with each other (on Linux's local filesystems).
//! - F_GETLK reports one conflicting lock (type, range, pid) or none; the
//!   asking owner's own locks never count.
//! - A conflicting F_SETLK is EAGAIN, and nothing changes.
//!
//! Not modelled: deadlock detection (EDEADLK) for blocking POSIX locks,
//! mandatory locks, leases.

use std::collections::HashMap;

use crate::errno::{Errno, Result};
use crate::fs::Ino;
use crate::sync::{LockExt, Mutex};

/// The largest offset a lock reaches: a lock "to the end of the file" ends
/// here (Linux's `OFFSET_MAX`, what the kernel sends for `l_len == 0`).
pub const OFFSET_MAX: u64 = i64::MAX as u64;

/// Read (shared) or write (exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockType {
    /// `F_RDLCK`, `LOCK_SH`.
    Read,
    /// `F_WRLCK`, `LOCK_EX`.
    Write,
}

impl LockType {
    /// The `F_RDLCK` / `F_WRLCK` value.
    pub fn raw(self) -> i32 {
        match self {
            LockType::Read => libc::F_RDLCK,
            LockType::Write => libc::F_WRLCK,
        }
    }

    fn conflicts(self, other: LockType) -> bool {
        self == LockType::Write || other == LockType::Write
    }
}

/// A lock as `struct flock` asks for or reports it, its range resolved
/// to inclusive offsets (`start..=end`, `end` [`OFFSET_MAX`] for "to the
/// end of the file").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLock {
    /// The type; `None` is `F_UNLCK` (unlock, or "no conflict" in a
    /// F_GETLK answer).
    pub kind: Option<LockType>,
    /// The first byte covered.
    pub start: u64,
    /// The last byte covered (inclusive).
    pub end: u64,
    /// The process that asked (F_GETLK reports the holder's).
    pub pid: u32,
}

impl FileLock {
    /// A lock of `kind` (None: unlock) on `start..=end` for `pid`.
    pub fn new(kind: Option<LockType>, start: u64, end: u64, pid: u32) -> FileLock {
        FileLock {
            kind,
            start,
            end,
            pid,
        }
    }

    /// From `F_RDLCK` / `F_WRLCK` / `F_UNLCK`; EINVAL for anything else or
    /// a range that ends before it starts or past [`OFFSET_MAX`].
    pub fn from_raw(kind: i32, start: u64, end: u64, pid: u32) -> Result<FileLock> {
        let kind = match kind {
            libc::F_RDLCK => Some(LockType::Read),
            libc::F_WRLCK => Some(LockType::Write),
            libc::F_UNLCK => None,
            _ => return Err(Errno::EINVAL),
        };
        if start > end || end > OFFSET_MAX {
            return Err(Errno::EINVAL);
        }
        Ok(FileLock::new(kind, start, end, pid))
    }

    /// The `F_*LCK` value of [`kind`](Self::kind).
    pub fn raw_kind(&self) -> i32 {
        self.kind.map_or(libc::F_UNLCK, LockType::raw)
    }
}

/// Which kind of lock an owner takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// `fcntl` record locks (per process, or OFD locks per open file).
    Posix,
    /// `flock(2)`: whole file, per open file description.
    Flock,
}

/// Who takes a lock: the kernel's owner id (the process's file table for
/// POSIX locks, the open file for OFD and `flock` locks), the open file
/// the request came through, and the flavour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockOwner {
    /// The owner id (FUSE's `lock_owner`): equal ids are one owner.
    pub id: u64,
    /// The open file the lock was asked through (a frontend's handle,
    /// unique among this client's open files while open): when that file
    /// is finally closed, the locks taken through it go
    /// ([`LockRelease::File`]).
    pub file: u64,
    /// POSIX or `flock`.
    pub flavor: Flavor,
}

/// One lock held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldLock {
    /// Whose.
    pub owner: u64,
    /// POSIX or `flock`.
    pub flavor: Flavor,
    /// The open file it was taken through.
    pub file: u64,
    /// Read or write.
    pub kind: LockType,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
    /// The process that took it.
    pub pid: u32,
    /// Which client holds it (0 for a local backend; a shared backend's
    /// client id, so that equal owner ids of two hosts stay apart).
    pub client: u64,
}

impl HeldLock {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    /// As an F_GETLK answer.
    pub fn as_file_lock(&self) -> FileLock {
        FileLock::new(Some(self.kind), self.start, self.end, self.pid)
    }

    fn same_owner(&self, client: u64, who: &LockOwner) -> bool {
        self.client == client && self.owner == who.id && self.flavor == who.flavor
    }
}

/// What to release at once, as a file is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockRelease {
    /// Every lock of this owner and flavour (FUSE's FLUSH: a process closed
    /// a descriptor of the file, which drops all its POSIX locks on it;
    /// RELEASE with FUSE_RELEASE_FLOCK_UNLOCK: the open file's `flock`).
    Owner(u64, Flavor),
    /// Every lock taken through this open file (its last close: OFD and
    /// `flock` locks it owns go; a process's POSIX locks taken through it
    /// went already, with that process's own close).
    File(u64),
}

/// The locks held on one inode: a short list, as files rarely have many.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InodeLocks {
    /// Every lock held, in no particular order.
    pub held: Vec<HeldLock>,
}

impl InodeLocks {
    /// No locks.
    pub fn new() -> InodeLocks {
        InodeLocks::default()
    }

    /// Whether no lock is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The lock of another owner that `want` (held by `who` of `client`)
    /// conflicts with, if any: the one that starts first. F_GETLK's
    /// answer.
    pub fn conflict(&self, client: u64, who: &LockOwner, want: &FileLock) -> Option<HeldLock> {
        let kind = want.kind?;
        self.held
            .iter()
            .filter(|h| {
                !h.same_owner(client, who)
                    && h.flavor == who.flavor
                    && h.overlaps(want.start, want.end)
                    && h.kind.conflicts(kind)
            })
            .min_by_key(|h| (h.start, h.end))
            .copied()
    }

    /// The locks `client`'s owner `who` holds, sorted by start.
    pub fn owned_by(&self, client: u64, who: &LockOwner) -> Vec<HeldLock> {
        let mut v: Vec<HeldLock> = self
            .held
            .iter()
            .filter(|h| h.same_owner(client, who))
            .copied()
            .collect();
        v.sort_by_key(|h| h.start);
        v
    }

    /// F_SETLK for `client`'s owner `who`: take, change or drop `want`.
    /// EAGAIN on a conflict. Returns whether anything held was released
    /// or narrowed (waiters may then get what they wait for). A `flock`
    /// conversion that fails has still dropped the old lock (as Linux's),
    /// and reports that release even though it fails: see
    /// [`InodeLocks::set_reporting`].
    pub fn set(&mut self, client: u64, who: &LockOwner, want: &FileLock) -> Result<bool> {
        let (r, released) = self.set_reporting(client, who, want);
        r.map(|()| released)
    }

    /// [`set`](Self::set), also telling whether anything was released
    /// when it fails (a failed `flock` conversion drops the old lock).
    pub fn set_reporting(
        &mut self,
        client: u64,
        who: &LockOwner,
        want: &FileLock,
    ) -> (Result<()>, bool) {
        if want.start > want.end || want.end > OFFSET_MAX {
            return (Err(Errno::EINVAL), false);
        }
        match who.flavor {
            Flavor::Flock => self.set_flock(client, who, want),
            Flavor::Posix => self.set_posix(client, who, want),
        }
    }

    fn set_flock(&mut self, client: u64, who: &LockOwner, want: &FileLock) -> (Result<()>, bool) {
        let mine = self.held.iter().position(|h| h.same_owner(client, who));
        if let (Some(i), Some(k)) = (mine, want.kind) {
            if self.held[i].kind == k {
                return (Ok(()), false);
            }
        }
        // Linux's flock_lock_inode: the old lock goes first, whatever
        // becomes of the new one.
        let released = mine.is_some();
        if let Some(i) = mine {
            self.held.swap_remove(i);
        }
        let Some(kind) = want.kind else {
            return (Ok(()), released);
        };
        let whole = FileLock::new(Some(kind), 0, OFFSET_MAX, want.pid);
        if self.conflict(client, who, &whole).is_some() {
            return (Err(Errno::EAGAIN), released);
        }
        self.held.push(HeldLock {
            owner: who.id,
            flavor: Flavor::Flock,
            file: who.file,
            kind,
            start: 0,
            end: OFFSET_MAX,
            pid: want.pid,
            client,
        });
        (Ok(()), released)
    }

    fn set_posix(&mut self, client: u64, who: &LockOwner, want: &FileLock) -> (Result<()>, bool) {
        if want.kind.is_some() && self.conflict(client, who, want).is_some() {
            return (Err(Errno::EAGAIN), false);
        }
        let before = self.owned_by(client, who);
        let mut mine = Vec::with_capacity(before.len() + 2);
        let mut released = false;
        // Cut [start, end] out of the owner's locks.
        for h in &before {
            if !h.overlaps(want.start, want.end) {
                mine.push(*h);
                continue;
            }
            // Others gain from an unlock, or a write lock turned read;
            // a lock replaced by one as strong releases nothing.
            released |= match want.kind {
                None => true,
                Some(LockType::Read) => h.kind == LockType::Write,
                Some(LockType::Write) => false,
            };
            if h.start < want.start {
                mine.push(HeldLock {
                    end: want.start - 1,
                    ..*h
                });
            }
            if h.end > want.end {
                mine.push(HeldLock {
                    start: want.end + 1,
                    ..*h
                });
            }
        }
        if let Some(kind) = want.kind {
            mine.push(HeldLock {
                owner: who.id,
                flavor: Flavor::Posix,
                file: who.file,
                kind,
                start: want.start,
                end: want.end,
                pid: want.pid,
                client,
            });
        }
        // Merge the owner's locks of one type that overlap or touch.
        mine.sort_by_key(|h| (h.start, h.end));
        let mut merged: Vec<HeldLock> = Vec::with_capacity(mine.len());
        for h in mine {
            if let Some(last) = merged.last_mut() {
                if last.kind == h.kind && h.start <= last.end.saturating_add(1) {
                    last.end = last.end.max(h.end);
                    if h.start == want.start && h.end == want.end {
                        // The new lock's process and file win.
                        last.pid = h.pid;
                        last.file = h.file;
                    }
                    continue;
                }
            }
            merged.push(h);
        }
        self.held.retain(|h| !h.same_owner(client, who));
        self.held.extend(merged);
        (Ok(()), released)
    }

    /// Drop what `what` names (of `client`'s owners); whether anything
    /// went.
    pub fn release(&mut self, client: u64, what: LockRelease) -> bool {
        let n = self.held.len();
        self.held.retain(|h| {
            h.client != client
                || match what {
                    LockRelease::Owner(id, flavor) => h.owner != id || h.flavor != flavor,
                    LockRelease::File(f) => h.file != f,
                }
        });
        self.held.len() != n
    }
}

/// Something to call once, when a lock a waiter may want was released.
pub type UnlockWake = Box<dyn FnOnce() + Send>;

/// Per inode, the waiters to wake when a lock on it is released or
/// narrowed. A backend calls [`wake`](Self::wake) after every such
/// change; a waiter registers ([`add`](Self::add)) *before* it tries
/// again, so a release that follows its failed try always finds it (the
/// try and the release are ordered by the backend's own lock or
/// transaction order, and the registration precedes the try).
#[derive(Default)]
pub struct UnlockWakers {
    waiting: Mutex<HashMap<Ino, Vec<UnlockWake>>>,
}

impl std::fmt::Debug for UnlockWakers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnlockWakers").finish_non_exhaustive()
    }
}

impl UnlockWakers {
    /// An empty registry.
    pub fn new() -> UnlockWakers {
        UnlockWakers::default()
    }

    /// Call `wake` at the next [`wake`](Self::wake) of `ino`.
    pub fn add(&self, ino: Ino, wake: UnlockWake) {
        self.waiting
            .lock_unpoisoned()
            .entry(ino)
            .or_default()
            .push(wake);
    }

    /// Locks on `ino` were released: call (and forget) its wakers, outside
    /// the registry's lock.
    pub fn wake(&self, ino: Ino) {
        let woken = self.waiting.lock_unpoisoned().remove(&ino);
        for w in woken.into_iter().flatten() {
            w();
        }
    }

    /// Wake every waiter (the backend lost track: a resynchronised watch).
    pub fn wake_all(&self) {
        let all = std::mem::take(&mut *self.waiting.lock_unpoisoned());
        for w in all.into_values().flatten() {
            w();
        }
    }

    /// How many wakers wait (for tests and reports).
    pub fn len(&self) -> usize {
        self.waiting.lock_unpoisoned().values().map(Vec::len).sum()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The [`FileSystem`](crate::fs::FileSystem) lock methods of a backend
/// whose locks live in a [`LocalLocks`] field `$field` (memfs,
/// passthrough): written inside its `impl FileSystem` block.
macro_rules! local_lock_methods {
    ($field:ident) => {
        fn lock_scope(&self) -> crate::fs::LockScope {
            crate::fs::LockScope::Local
        }

        fn getlk(
            &self,
            ino: crate::fs::Ino,
            owner: &crate::fs::LockOwner,
            lock: &crate::fs::FileLock,
        ) -> crate::errno::Result<Option<crate::fs::FileLock>> {
            self.$field.getlk(ino, owner, lock)
        }

        fn setlk(
            &self,
            ino: crate::fs::Ino,
            owner: &crate::fs::LockOwner,
            lock: &crate::fs::FileLock,
        ) -> crate::errno::Result<()> {
            self.$field.setlk(ino, owner, lock)
        }

        fn release_locks(
            &self,
            ino: crate::fs::Ino,
            what: crate::fs::LockRelease,
        ) -> crate::errno::Result<()> {
            self.$field.release(ino, what);
            Ok(())
        }

        fn wake_on_unlock(&self, ino: crate::fs::Ino, wake: crate::fs::UnlockWake) {
            self.$field.wake_on_unlock(ino, wake)
        }
    };
}
pub(crate) use local_lock_methods;

/// The locks of a local backend: one table per process, which is what
/// every client of a memfs, kernfs or passthrough `Vfs` shares.
#[derive(Debug, Default)]
pub struct LocalLocks {
    table: Mutex<HashMap<Ino, InodeLocks>>,
    wakers: UnlockWakers,
}

impl LocalLocks {
    /// No locks held.
    pub fn new() -> LocalLocks {
        LocalLocks::default()
    }

    /// F_GETLK: the conflicting lock, or `None`.
    pub fn getlk(&self, ino: Ino, who: &LockOwner, want: &FileLock) -> Result<Option<FileLock>> {
        if want.start > want.end || want.end > OFFSET_MAX {
            return Err(Errno::EINVAL);
        }
        let t = self.table.lock_unpoisoned();
        Ok(t.get(&ino)
            .and_then(|l| l.conflict(0, who, want))
            .map(|h| h.as_file_lock()))
    }

    /// F_SETLK (never blocks): EAGAIN on a conflict.
    pub fn setlk(&self, ino: Ino, who: &LockOwner, want: &FileLock) -> Result<()> {
        let (r, released) = {
            let mut t = self.table.lock_unpoisoned();
            let l = t.entry(ino).or_default();
            let r = l.set_reporting(0, who, want);
            if l.is_empty() {
                t.remove(&ino);
            }
            r
        };
        if released {
            self.wakers.wake(ino);
        }
        r
    }

    /// Release what `what` names on `ino`.
    pub fn release(&self, ino: Ino, what: LockRelease) {
        let released = {
            let mut t = self.table.lock_unpoisoned();
            let Some(l) = t.get_mut(&ino) else { return };
            let r = l.release(0, what);
            if l.is_empty() {
                t.remove(&ino);
            }
            r
        };
        if released {
            self.wakers.wake(ino);
        }
    }

    /// Call `wake` once a lock on `ino` is released.
    pub fn wake_on_unlock(&self, ino: Ino, wake: UnlockWake) {
        self.wakers.add(ino, wake);
    }

    /// The locks held on `ino` now.
    pub fn held(&self, ino: Ino) -> Vec<HeldLock> {
        let t = self.table.lock_unpoisoned();
        t.get(&ino).map(|l| l.held.clone()).unwrap_or_default()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn posix(id: u64) -> LockOwner {
        LockOwner {
            id,
            file: id,
            flavor: Flavor::Posix,
        }
    }

    fn flock(id: u64) -> LockOwner {
        LockOwner {
            id,
            file: id,
            flavor: Flavor::Flock,
        }
    }

    const R: Option<LockType> = Some(LockType::Read);
    const W: Option<LockType> = Some(LockType::Write);

    fn ranges(l: &InodeLocks, who: u64, f: Flavor) -> Vec<(LockType, u64, u64)> {
        let o = LockOwner {
            id: who,
            file: who,
            flavor: f,
        };
        l.owned_by(0, &o)
            .iter()
            .map(|h| (h.kind, h.start, h.end))
            .collect()
    }

    #[test]
    fn posix_split_merge_and_conflicts() {
        let mut l = InodeLocks::new();
        let (a, b) = (posix(1), posix(2));
        l.set(0, &a, &FileLock::new(W, 0, 99, 10)).unwrap();
        // Unlock the middle: split in two.
        assert!(l.set(0, &a, &FileLock::new(None, 40, 59, 10)).unwrap());
        assert_eq!(
            ranges(&l, 1, Flavor::Posix),
            vec![(LockType::Write, 0, 39), (LockType::Write, 60, 99)]
        );
        // b may take the hole, not beyond.
        l.set(0, &b, &FileLock::new(R, 40, 59, 20)).unwrap();
        assert_eq!(
            l.set(0, &b, &FileLock::new(R, 39, 40, 20)),
            Err(Errno::EAGAIN)
        );
        let c = l
            .conflict(0, &b, &FileLock::new(W, 0, OFFSET_MAX, 20))
            .unwrap();
        assert_eq!((c.start, c.end, c.pid), (0, 39, 10));
        // Touching locks of one type merge; a downgrade in the middle
        // splits into three.
        l.set(0, &a, &FileLock::new(None, 0, OFFSET_MAX, 10))
            .unwrap();
        l.set(0, &b, &FileLock::new(R, 60, 69, 20)).unwrap();
        assert_eq!(ranges(&l, 2, Flavor::Posix), vec![(LockType::Read, 40, 69)]);
        l.set(0, &b, &FileLock::new(W, 40, 69, 20)).unwrap();
        l.set(0, &b, &FileLock::new(R, 50, 54, 20)).unwrap();
        assert_eq!(
            ranges(&l, 2, Flavor::Posix),
            vec![
                (LockType::Write, 40, 49),
                (LockType::Read, 50, 54),
                (LockType::Write, 55, 69)
            ]
        );
        // Readers share; a writer is refused until they go.
        l.set(0, &a, &FileLock::new(R, 50, 52, 10)).unwrap();
        assert_eq!(
            l.set(0, &a, &FileLock::new(W, 50, 52, 10)),
            Err(Errno::EAGAIN)
        );
        assert!(l.release(0, LockRelease::Owner(2, Flavor::Posix)));
        l.set(0, &a, &FileLock::new(W, 50, 52, 10)).unwrap();
        assert_eq!(
            ranges(&l, 1, Flavor::Posix),
            vec![(LockType::Write, 50, 52)]
        );
    }

    #[test]
    fn flock_converts_by_dropping_first_and_ignores_posix() {
        let mut l = InodeLocks::new();
        let (a, b) = (flock(1), flock(2));
        l.set(0, &a, &FileLock::new(R, 0, OFFSET_MAX, 1)).unwrap();
        l.set(0, &b, &FileLock::new(R, 0, OFFSET_MAX, 2)).unwrap();
        // b's upgrade fails, having dropped its shared lock.
        let (r, released) = l.set_reporting(0, &b, &FileLock::new(W, 0, OFFSET_MAX, 2));
        assert_eq!((r, released), (Err(Errno::EAGAIN), true));
        assert!(ranges(&l, 2, Flavor::Flock).is_empty());
        // a POSIX write lock of another owner does not conflict.
        l.set(0, &posix(3), &FileLock::new(W, 0, OFFSET_MAX, 3))
            .unwrap();
        l.set(0, &a, &FileLock::new(W, 0, OFFSET_MAX, 1)).unwrap();
        assert!(l.release(0, LockRelease::File(1)));
        assert_eq!(ranges(&l, 3, Flavor::Posix).len(), 1);
    }

    #[test]
    fn the_same_owner_of_two_clients_is_two_owners() {
        let mut l = InodeLocks::new();
        l.set(7, &posix(1), &FileLock::new(W, 0, 9, 1)).unwrap();
        assert_eq!(
            l.set(8, &posix(1), &FileLock::new(W, 5, 5, 1)),
            Err(Errno::EAGAIN)
        );
        assert!(!l.release(8, LockRelease::Owner(1, Flavor::Posix)));
        assert!(l.release(7, LockRelease::Owner(1, Flavor::Posix)));
    }

    #[test]
    fn wakers_run_once_outside_the_lock() {
        let w = std::sync::Arc::new(LocalLocks::new());
        let a = posix(1);
        w.setlk(5, &a, &FileLock::new(W, 0, 0, 1)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let w2 = w.clone();
        w.wake_on_unlock(
            5,
            Box::new(move || {
                // May call back into the table: it is not held.
                let _ = w2.held(5);
                tx.send(()).unwrap();
            }),
        );
        // Taking more does not wake.
        w.setlk(5, &a, &FileLock::new(W, 1, 1, 1)).unwrap();
        assert!(rx.try_recv().is_err());
        w.release(5, LockRelease::Owner(1, Flavor::Posix));
        rx.try_recv().unwrap();
        w.release(5, LockRelease::Owner(1, Flavor::Posix));
        assert!(rx.try_recv().is_err(), "once");
    }
}
