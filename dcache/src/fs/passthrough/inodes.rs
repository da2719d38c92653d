//! The inode table: host `(st_dev, st_ino)` <-> our `Ino`, each entry
//! anchored to its host object by a file handle or a held O_PATH fd
//! ([`super::anchor`]).
//!
//! **Numbers.** The served directory is [`ROOT_INO`]. Everything else on
//! the source's own filesystem keeps the host's `st_ino`, so a number is
//! stable while the file exists, the same after it is forgotten and looked
//! up again, and the same after a daemon restart. A file on another
//! filesystem mounted below the source (whose host numbers could collide
//! with the source's) gets a number of ours from `1 << 63` up, fixed for
//! the table's life (the mapping is never dropped); so does a host number
//! 1 that is not the source itself (tmpfs numbers its root 1).
//!
//! One `RwLock` guards both maps, held only for hash-map work: every syscall
//! (the openat and fstat of a lookup, the close of a dropped fd) happens
//! outside it. Readers clone the entry's `Arc`, so an fd stays open while an
//! operation uses it even if `forget` removes the entry meanwhile.
//! (`std::sync::RwLock` directly: this is a blocking table, not lock-free
//! code, and the `sync` facade has no reader-writer lock.)

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::anchor::{Anchor, FdCache, HostFd};
use super::sys::{self, HostKey};
use crate::errno::{Errno, Result};
use crate::fs::{FileType, Ino};
use crate::sync::{Arc, AtomicU64, LockExt, Ordering, RwLockExt};

/// Our inode number for the served directory.
pub const ROOT_INO: Ino = 1;

/// What the backend knows about one host inode.
pub(crate) struct Inode {
    anchor: Anchor,
    pub(crate) key: HostKey,
    /// Fixed for the inode's life (a held fd pins the host inode; a handle
    /// names one inode generation, ESTALE once it is gone).
    pub(crate) kind: FileType,
    /// How many replies handed this inode out (lookup, create, link...).
    nlookup: AtomicU64,
    /// ctime and mtime (signed ns) of the last `Attr` handed out for it;
    /// revalidation compares the host's against these.
    ctime_ns: AtomicU64,
    mtime_ns: AtomicU64,
}

impl Inode {
    /// Remember the times of an `Attr` being handed out.
    pub(crate) fn record_times(&self, st: &libc::stat) {
        let (c, m) = sys::change_times(st);
        // Relaxed: each value is a standalone hint compared on its own; no
        // other memory is published through it, and a stale read only turns a
        // revalidation into a spurious Invalid (a refetch), never a missed one
        // for a change made after the store.
        self.ctime_ns.store(c as u64, Ordering::Relaxed);
        self.mtime_ns.store(m as u64, Ordering::Relaxed);
    }

    /// Whether the host's ctime/mtime still equal the recorded ones.
    pub(crate) fn times_match(&self, st: &libc::stat) -> bool {
        let (c, m) = sys::change_times(st);
        // Relaxed: see `record_times`.
        self.ctime_ns.load(Ordering::Relaxed) == c as u64
            && self.mtime_ns.load(Ordering::Relaxed) == m as u64
    }

    fn add_lookup(&self) {
        // Relaxed: a plain statistic; nothing is ordered by it.
        self.nlookup.fetch_add(1, Ordering::Relaxed);
    }
}

struct Maps {
    by_ino: HashMap<Ino, Arc<Inode>>,
    by_key: HashMap<HostKey, Ino>,
}

pub(crate) struct InodeTable {
    maps: RwLock<Maps>,
    /// The served directory's host identity.
    root_key: HostKey,
    /// Numbers of host inodes not on the source's filesystem (module docs).
    foreign: Mutex<HashMap<HostKey, Ino>>,
    next_foreign: AtomicU64,
    /// Descriptors opened from handles.
    cache: FdCache,
}

/// Whether two entries with one host key name the same object: always when
/// either holds its descriptor (it pins the host inode), else when their
/// handles are equal.
fn same_object(a: &Inode, b: &Inode) -> bool {
    match (a.anchor.file_handle(), b.anchor.file_handle()) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// The first number given to a host inode from another filesystem.
pub(crate) const FOREIGN_BASE: Ino = 1 << 63;

impl InodeTable {
    /// The table of a source whose root is `root_fd`. `handles`: anchor
    /// inodes by file handles where the host allows it, keeping at most
    /// `max_fds` descriptors opened from them.
    pub(crate) fn new(
        root_fd: OwnedFd,
        root_st: &libc::stat,
        handles: bool,
        max_fds: usize,
    ) -> Result<InodeTable> {
        let root_key = sys::host_key(root_st);
        let mount = if handles {
            FdCache::probe(std::os::fd::AsFd::as_fd(&root_fd))
        } else {
            None
        };
        // The root keeps its descriptor: every walk starts there.
        let root = Inode {
            anchor: Anchor::Held(root_fd),
            key: root_key,
            kind: sys::kind_of(root_st)?,
            nlookup: AtomicU64::new(1),
            ctime_ns: AtomicU64::new(0),
            mtime_ns: AtomicU64::new(0),
        };
        root.record_times(root_st);
        let mut maps = Maps {
            by_ino: HashMap::new(),
            by_key: HashMap::new(),
        };
        maps.by_key.insert(root.key, ROOT_INO);
        maps.by_ino.insert(ROOT_INO, Arc::new(root));
        Ok(InodeTable {
            maps: RwLock::new(maps),
            root_key,
            foreign: Mutex::new(HashMap::new()),
            next_foreign: AtomicU64::new(FOREIGN_BASE),
            cache: FdCache::new(mount, max_fds),
        })
    }

    /// A descriptor of `inode`'s host object for one operation.
    pub(crate) fn fd<'a>(&self, inode: &'a Inode) -> Result<HostFd<'a>> {
        self.cache.fd(&inode.anchor)
    }

    /// Run `f`, which opens a descriptor; if the process is out of them,
    /// close every cached one and run it once more.
    pub(crate) fn retry_fds<T>(&self, mut f: impl FnMut() -> Result<T>) -> Result<T> {
        match f() {
            Err(e) if super::anchor::out_of_fds(e) => {
                self.cache.shed(usize::MAX);
                f()
            }
            r => r,
        }
    }

    /// The descriptor cache (statistics, shedding).
    pub(crate) fn fd_cache(&self) -> &FdCache {
        &self.cache
    }

    /// Whether `inode` holds its descriptor for its whole life.
    fn holds_fd(inode: &Inode) -> bool {
        inode.anchor.file_handle().is_none()
    }

    /// How many inodes hold a descriptor for their whole life (the root
    /// included).
    pub(crate) fn held_fds(&self) -> usize {
        self.read()
            .by_ino
            .values()
            .filter(|i| Self::holds_fd(i))
            .count()
    }

    /// Our number for host inode `key`, held or not (module docs).
    pub(crate) fn number(&self, key: HostKey) -> Ino {
        if key == self.root_key {
            return ROOT_INO;
        }
        if key.0 == self.root_key.0 && key.1 != ROOT_INO && key.1 < FOREIGN_BASE {
            return key.1;
        }
        let mut m = self.foreign.lock_unpoisoned();
        *m.entry(key).or_insert_with(|| {
            // Relaxed: numbers only need to be distinct; the map's lock
            // publishes them.
            self.next_foreign.fetch_add(1, Ordering::Relaxed)
        })
    }

    // Poisoning is ignored (only hash-map calls run under the lock; see
    // `crate::sync::LockExt`).
    fn read(&self) -> RwLockReadGuard<'_, Maps> {
        self.maps.read_unpoisoned()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Maps> {
        self.maps.write_unpoisoned()
    }

    /// The entry for `ino`; ESTALE for one never handed out or forgotten.
    pub(crate) fn get(&self, ino: Ino) -> Result<Arc<Inode>> {
        self.read().by_ino.get(&ino).cloned().ok_or(Errno::ESTALE)
    }

    /// The entry for a host inode, counting one lookup, if there is one
    /// that is surely that object: one holding its descriptor (which pins
    /// the host inode, so its `(dev, ino)` cannot have been reused). An
    /// entry anchored by a handle is not trusted on the key alone (the host
    /// may have reused the number for a new file): [`Self::register`]
    /// compares handles.
    pub(crate) fn hit(&self, key: HostKey) -> Option<(Ino, Arc<Inode>)> {
        let maps = self.read();
        let ino = *maps.by_key.get(&key)?;
        let inode = maps.by_ino.get(&ino)?;
        if !Self::holds_fd(inode) {
            return None;
        }
        inode.add_lookup();
        Some((ino, inode.clone()))
    }

    /// Hand out the host object `fd` (whose stat is `st`): the existing
    /// number if the host inode is already known (a hard link or a repeated
    /// lookup; `fd` is then closed), else a fresh one anchored by `fd` (or
    /// its handle). Counts one lookup either way.
    pub(crate) fn register(&self, fd: OwnedFd, st: &libc::stat) -> Result<(Ino, Arc<Inode>)> {
        self.register_as(fd, st, false)
    }

    /// [`Self::register`] for an object that a handle could not reopen (an
    /// `O_TMPFILE` file has no link, and filesystems refuse handles of
    /// unlinked inodes): it holds `fd` for life.
    pub(crate) fn register_pinned(
        &self,
        fd: OwnedFd,
        st: &libc::stat,
    ) -> Result<(Ino, Arc<Inode>)> {
        self.register_as(fd, st, true)
    }

    fn register_as(&self, fd: OwnedFd, st: &libc::stat, pin: bool) -> Result<(Ino, Arc<Inode>)> {
        let key = sys::host_key(st);
        if let Some(found) = self.hit(key) {
            drop(fd);
            return Ok(found);
        }
        let kind = sys::kind_of(st)?;
        let fresh = Arc::new(Inode {
            anchor: if pin {
                Anchor::Held(fd)
            } else {
                self.cache.anchor(fd)
            },
            key,
            kind,
            nlookup: AtomicU64::new(1),
            ctime_ns: AtomicU64::new(0),
            mtime_ns: AtomicU64::new(0),
        });
        let mut candidate = self.number(key);
        let raced = {
            let mut maps = self.write();
            // Another lookup of the same host inode may have won the race,
            // or an entry of a deleted object whose number the host reused
            // may still be mapped: handles tell the two apart.
            let known = maps
                .by_key
                .get(&key)
                .and_then(|ino| maps.by_ino.get(ino).map(|i| (*ino, i.clone())));
            match known {
                Some(w) if same_object(&w.1, &fresh) => {
                    // Counted under the lock, so a forget cannot slip in
                    // between and drop the entry we are handing out.
                    w.1.add_lookup();
                    Err(w)
                }
                stale => {
                    if stale.is_some() || maps.by_ino.contains_key(&candidate) {
                        // The old entry keeps its number until the Vfs
                        // forgets it; the new object gets one of its own.
                        // Relaxed: as in `number`.
                        candidate = self.next_foreign.fetch_add(1, Ordering::Relaxed);
                    }
                    maps.by_key.insert(key, candidate);
                    maps.by_ino.insert(candidate, fresh.clone());
                    Ok(())
                }
            }
        };
        match raced {
            Ok(()) => Ok((candidate, fresh)),
            Err((ino, inode)) => {
                // `fresh` (and its fd) is closed here, outside the lock.
                drop(fresh);
                Ok((ino, inode))
            }
        }
    }

    /// Count one more reply handing out an inode that is already held.
    pub(crate) fn add_lookup(&self, inode: &Inode) {
        // Under the shared lock, ordered against a counted forget.
        let _maps = self.read();
        inode.add_lookup();
    }

    /// Drop `nlookup` of the references that replies handed out for `ino`
    /// (FUSE's counted forget); at zero the entry goes and its fd closes once
    /// no operation still uses it. A lookup that raced the forget already
    /// added its own count, so it keeps the entry alive. The root and
    /// unknown numbers are ignored.
    pub(crate) fn forget(&self, ino: Ino, nlookup: u64) {
        if ino == ROOT_INO {
            return;
        }
        let removed = {
            let mut maps = self.write();
            let Some(inode) = maps.by_ino.get(&ino) else {
                return;
            };
            // Relaxed: every change to nlookup of a mapped inode happens
            // under this map's lock (shared for lookups, exclusive here).
            let left = inode
                .nlookup
                .load(Ordering::Relaxed)
                .saturating_sub(nlookup);
            inode.nlookup.store(left, Ordering::Relaxed);
            if left > 0 {
                return;
            }
            let removed = maps.by_ino.remove(&ino);
            if let Some(inode) = &removed {
                if maps.by_key.get(&inode.key) == Some(&ino) {
                    maps.by_key.remove(&inode.key);
                }
            }
            removed
        };
        // The close (when this was the last Arc) happens outside the lock.
        drop(removed);
    }

    /// How many inodes are held, the root included.
    pub(crate) fn len(&self) -> usize {
        self.read().by_ino.len()
    }

    /// How many replies handed `ino` out since it was first looked up.
    pub(crate) fn lookup_count(&self, ino: Ino) -> Option<u64> {
        self.read()
            .by_ino
            .get(&ino)
            // Relaxed: a statistic read for reporting.
            .map(|i| i.nlookup.load(Ordering::Relaxed))
    }
}
