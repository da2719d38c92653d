//! One component with references (Linux's `lookup_fast` and
//! `lookup_slow`): the hash table first, then the backend under the
//! directory's `i_rwsem` (shared), caching the result — negative results
//! too, so the next miss is answered by rcu-walk. Ref-mode walks
//! ([`super::namei`]) and the namespace operations call it.

use std::ptr::NonNull;

use super::dcache::{d_alloc_hashed, d_drop};
use super::{DentryRef, Super, Vfs};
use crate::dentry::{name_hash, D_HASHED};
use crate::errno::{Errno, Result};
use crate::fs::Validity;
use crate::inode::Inode;
use crate::sync::RwLockExt;
use crate::table::RcuHit;

impl Vfs {
    /// A symlink's target, from the inode's cache or the backend (cached).
    pub(crate) fn read_link(&self, inode: &Inode) -> Result<Vec<u8>> {
        if let Some(t) = inode.cached_link() {
            return Ok(t.to_vec());
        }
        let t = self.sb().fs.readlink(inode.ino)?;
        inode.cache_link(&t);
        Ok(t)
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
            Some(dir.i_rwsem.read_unpoisoned())
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
        let attr = super::dcache::fd_retry(sb, || sb.fs.lookup(dir.ino, name))?;
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
