//! The inode cache (Linux's `fs/inode.c`): one inode object per backend
//! inode number, shared by all its dentries (hard links), found through the
//! inode map, and freed a grace period after its last dentry lets it go.

use std::borrow::Borrow;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::ptr::NonNull;
use std::sync::atomic::Ordering as StdOrdering;

use super::Super;
use crate::dentry::Dentry;
use crate::fs::{Attr, FileType, Ino};
use crate::inode::Inode;
use crate::sync::{LockExt, Ordering};

/// ino -> the inode shared by all its dentries (hard links): Linux's inode
/// hash. Each entry is the inode pointer alone, the key read through it
/// (`Inode::ino`, immutable), so a slot costs 8 bytes instead of a
/// `HashMap<Ino, _>`'s 16 (measured: ~18 instead of ~34 bytes per cached
/// path, `docs/memory.md`). Used under `Super::inodes`' mutex only, on the
/// slow paths (iget, iput, teardown).
///
/// Beside it, for directory inodes only, the dentries that point to each
/// (Linux's `i_dentry` alias list, which `d_find_alias` reads): how an
/// entry invalidation, which names a directory by inode number, finds the
/// hash chains its name is on. Usually one (a 16-byte slot, no allocation:
/// ~1 byte per cached path at 1M paths in 33k directories); more while a
/// directory renamed underneath is still cached under its old name too.
#[derive(Default)]
pub(crate) struct InodeMap {
    inodes: HashSet<Mapped>,
    alias: HashMap<NonNull<Inode>, NonNull<Dentry>>,
    more_aliases: HashMap<NonNull<Inode>, Vec<NonNull<Dentry>>>,
}

/// One entry: an inode that is live for as long as it is in the map (iput
/// removes it before retiring it). Never copied out of the map.
struct Mapped(NonNull<Inode>);

impl Mapped {
    #[inline]
    fn ino(&self) -> &Ino {
        // SAFETY: a mapped inode is live (see the type's docs), and `ino`
        // never changes.
        &unsafe { self.0.as_ref() }.ino
    }
}

impl Hash for Mapped {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // As `Ino`'s own hash, which `Borrow` requires.
        self.ino().hash(h);
    }
}

impl PartialEq for Mapped {
    fn eq(&self, other: &Mapped) -> bool {
        self.ino() == other.ino()
    }
}

impl Eq for Mapped {}

impl Borrow<Ino> for Mapped {
    fn borrow(&self) -> &Ino {
        self.ino()
    }
}

impl InodeMap {
    /// Forget every directory alias (teardown: every dentry is gone).
    pub(crate) fn clear_aliases(&mut self) {
        self.alias.clear();
        self.more_aliases.clear();
    }

    pub(crate) fn get(&self, ino: Ino) -> Option<NonNull<Inode>> {
        self.inodes.get(&ino).map(|m| m.0)
    }

    /// Map `p` under its number, replacing any inode mapped there.
    fn insert(&mut self, p: NonNull<Inode>) {
        self.inodes.replace(Mapped(p));
    }

    /// Unmap `p` if it is the inode mapped under its number.
    pub(crate) fn remove(&mut self, p: NonNull<Inode>) {
        // SAFETY: the caller's inode is live.
        let ino = unsafe { p.as_ref() }.ino;
        if self.get(ino) == Some(p) {
            self.inodes.remove(&ino);
        }
    }

    /// Record that dentry `d` points to directory inode `p`.
    fn add_alias(&mut self, p: NonNull<Inode>, d: NonNull<Dentry>) {
        match self.alias.entry(p) {
            Entry::Occupied(_) => self.more_aliases.entry(p).or_default().push(d),
            Entry::Vacant(v) => {
                v.insert(d);
            }
        }
    }

    /// Dentry `d` no longer points to directory inode `p`.
    fn remove_alias(&mut self, p: NonNull<Inode>, d: NonNull<Dentry>) {
        if self.alias.get(&p) == Some(&d) {
            match self.more_aliases.get_mut(&p).and_then(|v| v.pop()) {
                Some(next) => {
                    self.alias.insert(p, next);
                }
                None => {
                    self.alias.remove(&p);
                }
            }
        } else if let Some(v) = self.more_aliases.get_mut(&p) {
            v.retain(|&x| x != d);
        }
        if self.more_aliases.get(&p).is_some_and(|v| v.is_empty()) {
            self.more_aliases.remove(&p);
        }
    }

    /// The dentries pointing to directory inode `p`. Each is live while it
    /// is listed (kill and d_delete unlist it, in `iput`, before the
    /// dentry can be freed), so valid to borrow under the map's lock.
    pub(crate) fn aliases(&self, p: NonNull<Inode>) -> impl Iterator<Item = NonNull<Dentry>> + '_ {
        let more = self.more_aliases.get(&p).map_or(&[][..], |v| v.as_slice());
        self.alias.get(&p).into_iter().chain(more).copied()
    }
}

/// The inode object for `attr.ino`, shared by all its dentries; takes one
/// dentry reference on it, for dentry `d`. Refreshes the cached attributes.
pub(crate) fn iget(sb: &Super, attr: &Attr, d: *const Dentry) -> *mut Inode {
    let mut map = sb.inodes.lock_unpoisoned();
    let found = map.get(attr.ino).filter(|p| {
        // SAFETY: mapped inodes are live (removed from the map before free).
        let i = unsafe { p.as_ref() };
        // Otherwise the backend reused the number for a different object:
        // the old inode stays with its old dentries; new ones get a fresh
        // one.
        i.kind() == attr.kind
    });
    let p = match found {
        Some(p) => {
            // SAFETY: as above.
            let i = unsafe { p.as_ref() };
            i.set_attr(attr);
            i.i_dentries.fetch_add(1, Ordering::Relaxed);
            i.i_nlookup.fetch_add(1, Ordering::Relaxed);
            p
        }
        None => {
            let p = sb.inode_cache.alloc(Inode::new(attr));
            // SAFETY: fresh.
            unsafe { p.as_ref() }.i_dentries.store(1, Ordering::Relaxed);
            // SAFETY: fresh.
            unsafe { p.as_ref() }.i_nlookup.store(1, Ordering::Relaxed);
            sb.counters.inodes.fetch_add(1, StdOrdering::Relaxed);
            map.insert(p);
            p
        }
    };
    if attr.kind == FileType::Directory {
        // SAFETY: the caller's dentry is allocated, so not null.
        map.add_alias(p, unsafe { NonNull::new_unchecked(d.cast_mut()) });
    }
    p.as_ptr()
}

/// Drop dentry `d`'s reference on an inode; at zero, unmap it, tell the
/// backend (`forget`) and free it after a grace period.
pub(crate) fn iput(sb: &Super, inode: *mut Inode, d: *const Dentry) {
    // SAFETY: the caller gives up a dentry reference it held.
    let i = unsafe { &*inode };
    // SAFETY: the caller's reference kept it live, so not null.
    let p = unsafe { NonNull::new_unchecked(inode) };
    let mut map = sb.inodes.lock_unpoisoned();
    if i.is_dir() {
        // SAFETY: the caller's dentry is allocated, so not null.
        map.remove_alias(p, unsafe { NonNull::new_unchecked(d.cast_mut()) });
    }
    if i.i_dentries.fetch_sub(1, Ordering::Relaxed) != 1 {
        return;
    }
    map.remove(p);
    let nlookup = i.i_nlookup.load(Ordering::Relaxed);
    sb.evict_acl(i);
    drop(map);
    sb.fs.forget(i.ino, nlookup);
    /// # Safety
    /// `p` is an inode of the Super `sb` points to, retired once, and its
    /// grace period is over.
    unsafe fn free_inode(p: *mut u8, sb: *const ()) {
        // SAFETY: the Super outlives its retired objects (teardown waits
        // for them), and the inode came from its slab (iget).
        unsafe {
            (*sb.cast::<Super>())
                .inode_cache
                .free(NonNull::new_unchecked(p.cast::<Inode>()))
        };
    }
    sb.counters.inodes.fetch_sub(1, StdOrdering::Relaxed);
    // SAFETY: no dentry points to the inode any more and it is unmapped, so
    // readers that start now cannot reach it; free_inode returns it to the
    // slab of the Super passed with it.
    unsafe {
        sb.rcu.retire(
            inode.cast::<u8>(),
            std::ptr::from_ref(sb).cast(),
            free_inode,
        )
    };
}
