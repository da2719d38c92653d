//! The `Vfs` side of [`Invalidator`](crate::fs::Invalidator): dropping
//! what a reported change made stale, then telling the listeners.
//!
//! Each `Vfs` has one `Hub`. It holds the Super while the `Vfs` lives (the
//! `Vfs`'s drop detaches it first, under the write lock, so a report either
//! finishes before the teardown starts or finds nothing), and the
//! listeners frontends registered.

use std::ptr::NonNull;
// The handle and the listeners are shared by reference count only; std's
// Arc (loom's cannot hold a `dyn`). What synchronises is the RwLocks.
use std::sync::Arc;

use super::{dcache, DentryRef, Super, Vfs};
use crate::dentry::name_hash;
use crate::fs::invalidate::Target;
use crate::fs::{Attr, Ino, Invalidation, Invalidator, NAME_MAX};
use crate::inode::Inode;
use crate::sync::{LockExt, RwLock, RwLockExt};
use crate::table::RcuHit;

/// A listener (see [`Vfs::subscribe`]).
type Listener = dyn Fn(Invalidation<'_>) + Send + Sync;

/// The Super a report acts on; `None` once the `Vfs` is being dropped.
struct Attached(Option<NonNull<Super>>);

// SAFETY: the pointer is only dereferenced under the hub's read lock while
// it is `Some`, when the Super is alive; the Super is Sync.
unsafe impl Send for Attached {}
// SAFETY: as above.
unsafe impl Sync for Attached {}

pub(crate) struct Hub {
    sb: RwLock<Attached>,
    listeners: RwLock<Vec<Arc<Listener>>>,
}

impl Hub {
    pub(crate) fn new() -> Hub {
        Hub {
            sb: RwLock::new(Attached(None)),
            listeners: RwLock::new(Vec::new()),
        }
    }

    /// Point reports at `sb` (once, when the `Vfs` is built).
    pub(crate) fn attach(&self, sb: NonNull<Super>) {
        self.sb.write_unpoisoned().0 = Some(sb);
    }

    /// Stop acting on the Super, waiting for reports in progress; drop the
    /// listeners (what they hold goes with the `Vfs`).
    pub(crate) fn detach(&self) {
        self.sb.write_unpoisoned().0 = None;
        self.listeners.write_unpoisoned().clear();
    }

    fn notify(&self, what: Invalidation<'_>) {
        // A copy of the list, so a listener may subscribe another.
        let ls: Vec<Arc<Listener>> = self.listeners.read_unpoisoned().clone();
        for l in ls {
            l(what);
        }
    }
}

impl Target for Hub {
    fn entry(&self, dir: Ino, name: &[u8]) {
        {
            let a = self.sb.read_unpoisoned();
            if let Some(sb) = a.0 {
                // SAFETY: attached, so the Vfs (and its Super) is alive
                // until we release the read lock.
                drop_entry(unsafe { sb.as_ref() }, dir, name);
            }
        }
        self.notify(Invalidation::Entry { dir, name });
    }

    fn inode(&self, ino: Ino, attr: Option<&Attr>) {
        {
            let a = self.sb.read_unpoisoned();
            if let Some(sb) = a.0 {
                // SAFETY: as in `entry`.
                refresh_inode(unsafe { sb.as_ref() }, ino, attr);
            }
        }
        self.notify(Invalidation::Inode { ino });
    }
}

/// Unhash `name` under every cached dentry of directory `dir`.
fn drop_entry(sb: &Super, dir: Ino, name: &[u8]) {
    // A name the walk refuses is never cached.
    if name.is_empty()
        || name.len() > NAME_MAX
        || name == b"."
        || name == b".."
        || name.iter().any(|&b| b == b'/' || b == 0)
    {
        return;
    }
    // Counted references on the directory's dentries, taken under the map
    // lock, where every listed alias is live (see `InodeMap::aliases`).
    let aliases: Vec<DentryRef<'_>> = {
        let map = sb.inodes.lock_unpoisoned();
        let Some(p) = map.get(dir) else { return };
        map.aliases(p)
            // SAFETY: listed aliases are live while the lock is held.
            .filter_map(|d| DentryRef::try_get(unsafe { d.as_ref() }))
            .collect()
    };
    let Some(inode) = aliases.iter().find_map(|a| a.inode()) else {
        return;
    };
    // Wait out lookups of this directory that are asking the backend (they
    // hold the lock shared and insert what they find): one of them that
    // read the old state cannot cache it after we return.
    let _dir = inode.i_rwsem.write_unpoisoned();
    let hash = name_hash(name);
    for a in &aliases {
        let child = {
            let g = sb.rcu.read_lock();
            match sb.table.lookup_rcu(&g, a.as_ptr(), name, hash) {
                RcuHit::Found(c, _) => DentryRef::try_get(c),
                RcuHit::Missing | RcuHit::Busy => None,
            }
        };
        if let Some(c) = child {
            // A rename may have moved it meanwhile: only that name goes.
            // Compared in a read section: a rename may retire the
            // out-of-line name, which our reference does not pin.
            let d = c.dentry();
            let g = sb.rcu.read_lock();
            // Relaxed: the parent pointer is only compared, never
            // dereferenced.
            let same = d.d_parent.load(crate::sync::Ordering::Relaxed) == a.as_ptr()
                && d.name_eq_rcu(&g, name);
            drop(g);
            if same {
                dcache::d_drop(sb, d);
            }
        }
    }
}

/// Replace the cached attributes of `ino` (if it is cached).
fn refresh_inode(sb: &Super, ino: Ino, attr: Option<&Attr>) {
    let cached = |sb: &Super| {
        let map = sb.inodes.lock_unpoisoned();
        map.get(ino).is_some()
    };
    let fresh;
    let attr = match attr {
        Some(a) => a,
        None => {
            if !cached(sb) {
                return;
            }
            match sb.fs.getattr(ino) {
                Ok(a) => {
                    fresh = a;
                    &fresh
                }
                // Gone, or unreachable: the next use asks again (a
                // revalidating backend) or sees the last copy.
                Err(_) => return,
            }
        }
    };
    if attr.ino != ino {
        return;
    }
    // Under the map lock the mapped inode is live; writing its attributes
    // there is iget's order too (map lock, then the inode's i_seq).
    let map = sb.inodes.lock_unpoisoned();
    if let Some(p) = map.get(ino) {
        // SAFETY: mapped inodes are live.
        let i: &Inode = unsafe { p.as_ref() };
        if i.kind() == attr.kind {
            i.set_attr(attr);
            // Its ACL may have changed too (lock order: map, then acls).
            sb.forget_acl(i);
        }
    }
}

impl Vfs {
    /// The handle through which changes made underneath this `Vfs` are
    /// reported (the backend got one at construction, through
    /// [`FileSystem::attach`](crate::FileSystem::attach)). See
    /// [`crate::fs::invalidate`].
    pub fn invalidator(&self) -> Invalidator {
        Invalidator::new(self.sb().hub.clone())
    }

    /// Report that `name` in directory `dir` changed underneath (as
    /// [`Invalidator::entry`]).
    pub fn invalidate_entry(&self, dir: Ino, name: &[u8]) {
        self.sb().hub.entry(dir, name)
    }

    /// Report that the attributes or data of `ino` changed underneath (as
    /// [`Invalidator::inode`]).
    pub fn invalidate_inode(&self, ino: Ino, attr: Option<&Attr>) {
        self.sb().hub.inode(ino, attr)
    }

    /// Call `listener` after the dcache has acted on each reported change,
    /// on the reporting thread: a frontend with a cache of its own (the
    /// FUSE frontend: the kernel's) drops what the change made stale
    /// there. A listener must not block on the `Vfs` or report changes;
    /// one that must do slow work queues it. Listeners go with the `Vfs`.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{At, Invalidation, Vfs};
    ///
    /// let vfs = Vfs::new(Arc::new(MemFs::new()))?;
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let s = seen.clone();
    /// vfs.subscribe(move |what| {
    ///     if let Invalidation::Entry { dir, name } = what {
    ///         s.lock().unwrap().push((dir, name.to_vec()));
    ///     }
    /// });
    /// let root = vfs.root().ino().unwrap();
    /// vfs.as_root().mkdir(At::Root, "d", 0o755)?;
    /// assert!(vfs.as_root().stat(At::Root, "d").is_ok());
    /// // Another writer removed "d" behind the Vfs's back and says so:
    /// vfs.invalidate_entry(root, b"d");
    /// assert_eq!(*seen.lock().unwrap(), vec![(root, b"d".to_vec())]);
    /// # Ok::<(), dcache::Errno>(())
    /// ```
    pub fn subscribe(&self, listener: impl Fn(Invalidation<'_>) + Send + Sync + 'static) {
        self.sb()
            .hub
            .listeners
            .write_unpoisoned()
            .push(Arc::new(listener));
    }
}
