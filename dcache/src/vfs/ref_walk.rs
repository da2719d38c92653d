//! ref-walk: redo the whole path holding a counted reference on the current
//! directory, calling the backend for misses under the directory's
//! `i_rwsem` (shared), and caching the result — negative results too, so the
//! next miss is answered by rcu-walk.

use std::ptr::NonNull;

use super::dcache::{d_alloc_hashed, d_drop};
use super::path::Components;
use super::{At, DentryRef, Super, Vfs};
use crate::cred::Cred;
use crate::dentry::{name_hash, D_HASHED};
use crate::errno::{Errno, Result};
use crate::fs::{Validity, NAME_MAX};
use crate::inode::Inode;
use crate::permission::may_search;
use crate::table::RcuHit;

impl Vfs {
    /// ref-walk `path` from `at` holding references. Returns the final
    /// dentry, which is negative only with `allow_negative`.
    pub(crate) fn walk_ref<'v>(
        &'v self,
        at: At<'_>,
        path: &[u8],
        follow_last: bool,
        allow_negative: bool,
        cred: &Cred,
    ) -> Result<DentryRef<'v>> {
        let sb = self.sb();
        sb.counters
            .ref_walks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut cur = match at {
            At::Dir(d) if path.first() != Some(&b'/') => {
                DentryRef::try_get(d).ok_or(Errno::ENOENT)?
            }
            _ => self.root(),
        };
        let mut comps = Components::new(path);
        while let Some(comp) = comps.next_comp() {
            let (name, last, must_dir) = (comp.name, comp.last, comp.must_dir);
            let Some(dir) = cur.inode() else {
                return Err(Errno::ENOENT);
            };
            if !dir.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            may_search(cred, dir.perm())?;
            if name.len() > NAME_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            if name == b"." {
                continue;
            }
            if name == b".." {
                if cur.as_ptr() != sb.root() {
                    cur = self.dget_parent(&cur);
                }
                continue;
            }
            let d = self.lookup_one(&cur, name, false)?;
            let Some(inode) = d.inode() else {
                if last && allow_negative {
                    cur = d;
                    break;
                }
                return Err(Errno::ENOENT);
            };
            if inode.is_symlink() && (!last || follow_last || must_dir) {
                let target = self.read_link(inode)?;
                if target.is_empty() {
                    return Err(Errno::ENOENT);
                }
                if target[0] == b'/' {
                    cur = self.root();
                }
                comps.push_link_owned(target)?;
                continue;
            }
            if must_dir && !inode.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            cur = d;
        }
        Ok(cur)
    }

    /// A symlink's target, from the inode's cache or the backend (cached).
    pub(crate) fn read_link(&self, inode: &Inode) -> Result<Vec<u8>> {
        if let Some(t) = inode.cached_link() {
            return Ok(t.to_vec());
        }
        let t = self.sb().fs.readlink(inode.ino)?;
        inode.cache_link(&t);
        Ok(t)
    }

    /// A counted reference to `d`'s current parent (Linux dget_parent).
    pub fn dget_parent<'v>(&'v self, d: &DentryRef<'v>) -> DentryRef<'v> {
        let sb = self.sb();
        loop {
            let g = sb.rcu.read_lock();
            // In a read section in case a rename just moved d and its old
            // parent is on its way out.
            let pr = d
                .dentry()
                .parent_rcu(&g)
                .expect("a dentry of a Vfs has a parent");
            if let Some(parent) = DentryRef::try_get(pr) {
                if d.dentry()
                    .parent_rcu(&g)
                    .is_some_and(|q| std::ptr::eq(q, pr))
                {
                    drop(g);
                    return parent;
                }
                // Moved meanwhile: `parent` is dropped (dput) and we retry.
            }
            drop(g);
            crate::sync::yield_now();
        }
    }

    /// Try the table with a reference: a hashed, live dentry `parent/name`.
    pub(crate) fn lookup_fast<'v>(
        &'v self,
        parent: &DentryRef<'v>,
        name: &[u8],
        hash: u32,
    ) -> Option<DentryRef<'v>> {
        let sb = self.sb();
        let g = sb.rcu.read_lock();
        let RcuHit::Found(found, _) = sb.table.lookup_rcu(&g, parent.as_ptr(), name, hash) else {
            return None;
        };
        let r = DentryRef::try_get(found)?;
        let dr = r.dentry();
        // With a reference held, make sure it still is that name. Still in
        // the read section: a concurrent rename may retire the out-of-line
        // name that the comparison reads, which the reference does not pin.
        let s = dr.d_seq.read_begin();
        // Relaxed: compared only, and validated by d_seq.
        let ok = dr.flags() & D_HASHED != 0
            && dr.d_parent.load(crate::sync::Ordering::Relaxed) == parent.as_ptr()
            && dr.name_eq_rcu(&g, name);
        drop(g);
        if ok && !dr.d_seq.read_retry(s) {
            Some(r)
        } else {
            None
        }
    }

    /// Look one component up in `parent` with references: the table first,
    /// then the backend. `dir_locked`: the caller holds the parent's
    /// `i_rwsem` for writing (namespace operations).
    pub(crate) fn lookup_one<'v>(
        &'v self,
        parent: &DentryRef<'v>,
        name: &[u8],
        dir_locked: bool,
    ) -> Result<DentryRef<'v>> {
        let sb = self.sb();
        let Some(dir) = parent.inode() else {
            return Err(Errno::ENOENT);
        };
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let hash = name_hash(name);
        if let Some(d) = self.lookup_fast(parent, name, hash) {
            if self.still_valid(sb, dir, name, &d) {
                return Ok(d);
            }
            d_drop(sb, d.dentry());
        }
        let _shared = if dir_locked {
            None
        } else {
            Some(dir.i_rwsem.read().unwrap_or_else(|e| e.into_inner()))
        };
        // Someone may have cached it while we waited for the lock.
        if let Some(d) = self.lookup_fast(parent, name, hash) {
            if self.still_valid(sb, dir, name, &d) {
                return Ok(d);
            }
            d_drop(sb, d.dentry());
        }
        let cookie = sb.fs.dir_cookie(dir.ino);
        sb.counters
            .backend_lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let attr = sb.fs.lookup(dir.ino, name)?;
        // SAFETY: `parent` is our reference on a directory of this Vfs.
        let d = unsafe { d_alloc_hashed(sb, parent.as_ptr(), name, attr.as_ref(), cookie) };
        let d = NonNull::new(d).ok_or(Errno::ENOMEM)?;
        // SAFETY: d_alloc_hashed returns a dentry of this Vfs carrying one
        // reference for the caller.
        Ok(unsafe { DentryRef::from_counted(d) })
    }

    fn still_valid(&self, sb: &Super, dir: &Inode, name: &[u8], d: &DentryRef<'_>) -> bool {
        if !sb.revalidate {
            return true;
        }
        let v = sb.fs.revalidate(
            dir.ino,
            name,
            d.ino(),
            d.dentry().d_time.load(crate::sync::Ordering::Relaxed),
            false,
        );
        v == Validity::Valid
    }
}
