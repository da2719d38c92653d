//! Namespace operations (create, mkdir, unlink, rmdir, rename, symlink,
//! link, readlink, readdir, setattr); opening files is [`super::open`].
//!
//! Each change locks the parent directory's `i_rwsem` for writing, looks
//! the name up under it (so no slow lookup can cache a stale answer
//! meanwhile), asks the backend, and then updates the cache: a negative
//! dentry becomes positive in place (`d_instantiate`), an unlinked one
//! becomes negative or is unhashed (`d_delete`), a renamed one moves
//! (`d_move`) under the global rename sequence count.

use super::acl::NewAcls;
use super::dcache::{d_delete, d_drop, d_instantiate, dput};
use super::namei::WalkFlags;
use super::path::check_path;
use super::{At, DentryRef, Super, Vfs};
use crate::cred::Cred;
use crate::dentry::{name_hash, Dentry, ExtName, D_HASHED};
use crate::errno::{Errno, Result};
use crate::fs::{Attr, Ctx, DirEntry, FileType, RenameFlags, SetAttr, SetTime, StatFs, NAME_MAX};
use crate::inode::Inode;
use crate::permission::{self, MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::sync::{LockExt, Ordering, RwLockExt};

/// Split `path` into (parent path, last component, trailing slash).
pub(super) fn split_last(path: &[u8]) -> (&[u8], &[u8], bool) {
    let mut end = path.len();
    while end > 0 && path[end - 1] == b'/' {
        end -= 1;
    }
    let trailing = end < path.len();
    let trimmed = &path[..end];
    match trimmed.iter().rposition(|&b| b == b'/') {
        Some(i) => (&trimmed[..=i], &trimmed[i + 1..], trailing),
        None => (&[][..], trimmed, trailing),
    }
}

pub(super) fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Vfs {
    /// Resolve all but the last component: (parent directory, last name,
    /// trailing slash). The name is empty when the path names the root.
    /// Search permission is checked on every directory walked, the parent
    /// included (it is searched for the last name).
    pub(super) fn walk_parent<'v, 'p>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &'p [u8],
    ) -> Result<(DentryRef<'v>, &'p [u8], bool)> {
        check_path(path)?;
        let (parent_path, name, trailing) = split_last(path);
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let parent = if parent_path.is_empty() {
            match at {
                At::Root => self.root(),
                At::Dir(d) => {
                    self.check_owned(d)?;
                    DentryRef::try_get(d).ok_or(Errno::ENOENT)?
                }
            }
        } else {
            self.walk_ref(at, parent_path, WalkFlags::follow(true), cred)?
        };
        match parent.inode() {
            Some(i) if i.kind() == FileType::Directory => {
                if !name.is_empty() && !permission::search_for_all(i.mode_word()) {
                    self.inode_permission(cred, i, MAY_EXEC)?;
                }
                Ok((parent, name, trailing))
            }
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// Re-read an inode's attributes from the backend after a change.
    pub(crate) fn refresh(&self, inode: &Inode) {
        if let Ok(a) = self.sb().fs.getattr(inode.ino) {
            if a.kind == inode.kind() {
                inode.set_attr(&a);
            }
        }
    }

    /// The common shape of create/mkdir/mknod/symlink: lock the parent,
    /// look the name up, refuse if it exists, let `make` create it in the
    /// backend, instantiate the dentry, then store the ACLs the new inode
    /// inherits (`make` returns them; after the dentry, so a name the
    /// backend made is in the cache even when they fail to store, and the
    /// error is still returned).
    ///
    /// Permissions, in Linux's order: search on every directory walked
    /// (EACCES), the name must not exist (EEXIST), `pre` (link's own
    /// checks), then write and search on the parent (EACCES).
    fn create_common<'v>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        dir_ok: bool,
        pre: impl FnOnce() -> Result<()>,
        mut make: impl FnMut(&Inode, &[u8]) -> Result<(Attr, NewAcls)>,
    ) -> Result<DentryRef<'v>> {
        let (parent, name, trailing) = self.walk_parent(cred, at, path)?;
        if name.is_empty() || is_dot_or_dotdot(name) {
            return Err(Errno::EEXIST);
        }
        let dir = parent.inode().ok_or(Errno::ENOENT)?;
        let _w = dir.i_rwsem.write_unpoisoned();
        let d = self.lookup_one(&parent, name, true)?;
        if !d.is_negative() {
            return Err(Errno::EEXIST);
        }
        if trailing && !dir_ok {
            return Err(Errno::ENOENT);
        }
        pre()?;
        self.may_create_in(cred, dir)?;
        let (attr, acls) = super::dcache::fd_retry(self.sb(), || make(dir, name))?;
        d_instantiate(self.sb(), d.dentry(), &attr);
        self.refresh(dir);
        self.acl_store_new(attr.ino, &acls)?;
        Ok(d)
    }

    pub(crate) fn create_as<'v>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        perm: u16,
        ctx: Ctx,
    ) -> Result<DentryRef<'v>> {
        let fs = &self.sb().fs;
        self.create_common(
            cred,
            at,
            path,
            false,
            || Ok(()),
            |dir, name| {
                let (perm, acls) = self.acl_create(cred, dir, libc::S_IFREG, perm)?;
                let perm = permission::mode_strip_sgid(cred, dir.perm(), perm);
                let a = fs.create(dir.ino, name, perm, ctx)?;
                Ok((a, acls))
            },
        )
        .map_err(|e| {
            if e == Errno::ENOENT && path.ends_with(b"/") {
                Errno::EISDIR
            } else {
                e
            }
        })
    }

    pub(crate) fn mkdir_as<'v>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        perm: u16,
        ctx: Ctx,
    ) -> Result<DentryRef<'v>> {
        let fs = &self.sb().fs;
        self.create_common(
            cred,
            at,
            path,
            true,
            || Ok(()),
            // vfs_mkdir keeps only the permission bits and the sticky bit
            // (the backend adds S_ISGID under a setgid directory).
            |dir, name| {
                let (perm, acls) = self.acl_create(cred, dir, libc::S_IFDIR, perm & 0o1777)?;
                let a = fs.mkdir(dir.ino, name, perm, ctx)?;
                Ok((a, acls))
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mknod_as<'v>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        kind: FileType,
        perm: u16,
        rdev: u32,
        ctx: Ctx,
    ) -> Result<DentryRef<'v>> {
        let fs = &self.sb().fs;
        self.create_common(
            cred,
            at,
            path,
            false,
            || Ok(()),
            |dir, name| {
                if kind == FileType::Directory || kind == FileType::Symlink {
                    return Err(Errno::EINVAL);
                }
                let (perm, acls) = self.acl_create(cred, dir, kind.mode_bits(), perm)?;
                let perm = permission::mode_strip_sgid(cred, dir.perm(), perm);
                let a = if kind == FileType::Regular {
                    fs.create(dir.ino, name, perm, ctx)?
                } else {
                    fs.mknod(dir.ino, name, kind, perm, rdev, ctx)?
                };
                Ok((a, acls))
            },
        )
    }

    pub(crate) fn symlink_as<'v>(
        &'v self,
        cred: &Cred,
        target: &[u8],
        at: At<'_>,
        path: &[u8],
        ctx: Ctx,
    ) -> Result<DentryRef<'v>> {
        check_path(target)?;
        let fs = &self.sb().fs;
        let d = self.create_common(
            cred,
            at,
            path,
            false,
            || Ok(()),
            |dir, name| Ok((fs.symlink(dir.ino, name, target, ctx)?, NewAcls::default())),
        )?;
        if let Some(i) = d.inode() {
            i.cache_link(target);
        }
        Ok(d)
    }

    pub(crate) fn readlink_as(&self, cred: &Cred, at: At<'_>, path: &[u8]) -> Result<Vec<u8>> {
        let d = self.lookup_as(cred, at, path, false)?;
        self.readlink_dentry(&d)
    }

    /// The target of the symlink `d` (EINVAL if it is not one); cached on
    /// the inode after the first read.
    pub fn readlink_dentry(&self, d: &DentryRef<'_>) -> Result<Vec<u8>> {
        self.check_owned(d.dentry())?;
        let i = d.inode().ok_or(Errno::ENOENT)?;
        if i.kind() != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        self.read_link(i)
    }

    pub(crate) fn link_as<'v>(
        &'v self,
        cred: &Cred,
        old_at: At<'_>,
        old_path: &[u8],
        new_at: At<'_>,
        new_path: &[u8],
    ) -> Result<DentryRef<'v>> {
        let old = self.lookup_as(cred, old_at, old_path, false)?;
        self.link_dentry_as(cred, &old, new_at, new_path)
    }

    /// With Linux's `fs.protected_hardlinks` (on by default): only the
    /// owner, CAP_FOWNER, or a caller who may read and write a regular file
    /// that is not set-user-ID (nor set-group-ID and group-executable) may
    /// link to it (EPERM).
    /// [`AsCred::link_dentry`](crate::AsCred::link_dentry)'s body.
    pub(crate) fn link_dentry_as<'v>(
        &'v self,
        cred: &Cred,
        old: &DentryRef<'_>,
        new_at: At<'_>,
        new_path: &[u8],
    ) -> Result<DentryRef<'v>> {
        self.check_owned(old.dentry())?;
        let inode = old.inode().ok_or(Errno::ENOENT)?;
        let fs = &self.sb().fs;
        let ino = inode.ino;
        let kind = inode.kind();
        let pre = || {
            let p = inode.perm();
            let rw = || {
                self.inode_permission(cred, inode, MAY_READ | MAY_WRITE)
                    .is_ok()
            };
            if !permission::may_hardlink_by(cred, p, kind == FileType::Regular, rw) {
                return Err(Errno::EPERM);
            }
            Ok(())
        };
        self.create_common(cred, new_at, new_path, false, pre, |dir, name| {
            if kind == FileType::Directory {
                return Err(Errno::EPERM);
            }
            Ok((fs.link(ino, dir.ino, name)?, NewAcls::default()))
        })
    }

    /// unlink/rmdir on behalf of `cred`: after the name is found, write and
    /// search on the directory (EACCES) and the sticky bit (EPERM), before
    /// the type checks, as Linux's `may_delete`.
    pub(crate) fn remove_common(
        &self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        dir_op: bool,
    ) -> Result<()> {
        let (parent, name, trailing) = self.walk_parent(cred, at, path)?;
        if name.is_empty() {
            return Err(if dir_op { Errno::EBUSY } else { Errno::EISDIR });
        }
        if name == b"." {
            return Err(if dir_op { Errno::EINVAL } else { Errno::EISDIR });
        }
        if name == b".." {
            return Err(if dir_op {
                Errno::ENOTEMPTY
            } else {
                Errno::EISDIR
            });
        }
        let sb = self.sb();
        let dir = parent.inode().ok_or(Errno::ENOENT)?;
        let _w = dir.i_rwsem.write_unpoisoned();
        let d = self.lookup_one(&parent, name, true)?;
        let inode = d.inode().ok_or(Errno::ENOENT)?;
        self.may_delete_in(cred, dir, inode.perm().uid)?;
        let is_dir = inode.kind() == FileType::Directory;
        if dir_op {
            if !is_dir {
                return Err(Errno::ENOTDIR);
            }
            sb.fs.rmdir(dir.ino, name)?;
        } else {
            if is_dir {
                return Err(Errno::EISDIR);
            }
            if trailing {
                return Err(Errno::ENOTDIR);
            }
            sb.fs.unlink(dir.ino, name)?;
            // Other names of the inode see the new link count.
            self.refresh(inode);
        }
        d_delete(sb, d);
        self.refresh(dir);
        Ok(())
    }

    /// `renameat2` on behalf of `cred`: `may_delete` on the old name, then
    /// `may_delete` on the new one or `may_create` in its directory, then
    /// write permission on a directory that changes parent (its `..`).
    pub(crate) fn rename_as(
        &self,
        cred: &Cred,
        old_at: At<'_>,
        old_path: &[u8],
        new_at: At<'_>,
        new_path: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.noreplace && flags.exchange {
            return Err(Errno::EINVAL);
        }
        let (op, oname, otrail) = self.walk_parent(cred, old_at, old_path)?;
        let (np, nname, ntrail) = self.walk_parent(cred, new_at, new_path)?;
        if oname.is_empty()
            || nname.is_empty()
            || is_dot_or_dotdot(oname)
            || is_dot_or_dotdot(nname)
        {
            return Err(Errno::EBUSY);
        }
        let sb = self.sb();
        let odir = op.inode().ok_or(Errno::ENOENT)?;
        let ndir = np.inode().ok_or(Errno::ENOENT)?;
        let _rl = sb.rename_lock.lock_unpoisoned();
        let same_dir = std::ptr::eq(odir, ndir);
        let (first, second) = if (odir as *const Inode) < (ndir as *const Inode) {
            (odir, ndir)
        } else {
            (ndir, odir)
        };
        let _w1 = first.i_rwsem.write_unpoisoned();
        let _w2 = if same_dir {
            None
        } else {
            Some(second.i_rwsem.write_unpoisoned())
        };
        let od = self.lookup_one(&op, oname, true)?;
        let oinode = od.inode().ok_or(Errno::ENOENT)?;
        let nd = self.lookup_one(&np, nname, true)?;
        if (otrail || ntrail) && oinode.kind() != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        if flags.exchange && nd.is_negative() {
            return Err(Errno::ENOENT);
        }
        if flags.noreplace && !nd.is_negative() {
            return Err(Errno::EEXIST);
        }
        // Loops, in the VFS as Linux checks them (do_renameat2's trap): a
        // directory may not move into itself or below itself (EINVAL), and
        // the target may not be an ancestor of the source (ENOTEMPTY; EINVAL
        // for an exchange). Parents cannot change under the rename lock.
        if oinode.kind() == FileType::Directory && is_ancestor_or_self(od.dentry(), np.dentry()) {
            return Err(Errno::EINVAL);
        }
        if !nd.is_negative() && is_ancestor_or_self(nd.dentry(), op.dentry()) {
            return Err(if flags.exchange {
                Errno::EINVAL
            } else {
                Errno::ENOTEMPTY
            });
        }
        if let Some(ni) = nd.inode() {
            if std::ptr::eq(ni, oinode) {
                // Two names of one file: POSIX says do nothing.
                return Ok(());
            }
        }
        self.may_delete_in(cred, odir, oinode.perm().uid)?;
        match nd.inode() {
            Some(ni) => self.may_delete_in(cred, ndir, ni.perm().uid)?,
            None => self.may_create_in(cred, ndir)?,
        }
        if !same_dir {
            if oinode.kind() == FileType::Directory {
                self.inode_permission(cred, oinode, MAY_WRITE)?;
            }
            if let Some(ni) = nd.inode() {
                if flags.exchange && ni.kind() == FileType::Directory {
                    self.inode_permission(cred, ni, MAY_WRITE)?;
                }
            }
        }
        sb.fs.rename(odir.ino, oname, ndir.ino, nname, flags)?;
        sb.rename_seq.write_begin();
        if flags.exchange {
            self.d_exchange(&od, &nd);
        } else {
            let replaced = nd.inode().map(|i| i as *const Inode);
            d_drop(sb, nd.dentry());
            self.d_move(&od, &np, nname);
            if let Some(i) = replaced {
                // SAFETY: nd still holds the inode (unhashed, not killed).
                self.refresh(unsafe { &*i });
            }
        }
        sb.rename_seq.write_end();
        self.refresh(oinode);
        if let Some(i) = nd.inode() {
            self.refresh(i);
        }
        self.refresh(odir);
        if !same_dir {
            self.refresh(ndir);
        }
        Ok(())
    }

    /// Move `d` to `new_parent/new_name` in the cache.
    fn d_move(&self, d: &DentryRef<'_>, new_parent: &DentryRef<'_>, new_name: &[u8]) {
        let sb = self.sb();
        let dd = d.dentry();
        new_parent.dentry().d_lockref.get();
        new_parent
            .dentry()
            .d_children
            .fetch_add(1, Ordering::Relaxed);
        let g = dd.d_lockref.lock();
        let hashed = dd.flags() & D_HASHED != 0;
        if hashed {
            // SAFETY: hashed under its old parent and name; our reference
            // and d_lock keep it, and the rename lock keeps others off it.
            unsafe { sb.table.remove(d.as_ptr()) };
        }
        dd.d_seq.write_begin();
        // AcqRel: Release so a reader whose protected load sees the new
        // parent sees it initialised; Acquire for the old one we dput.
        let old_parent = dd.d_parent.swap(new_parent.as_ptr(), Ordering::AcqRel);
        let old_ext = dd.store_name(new_name);
        dd.d_hash_len.store(
            crate::dentry::hash_len(name_hash(new_name), new_name.len()),
            Ordering::Relaxed,
        );
        dd.d_seq.write_end();
        if hashed {
            // SAFETY: removed above, now with its new parent and name; the
            // target name was cleared by the caller (no live duplicate).
            unsafe { sb.table.insert(d.as_ptr()) };
        }
        drop(g);
        if let Some(p) = old_ext {
            retire_ext(sb, p);
        }
        // SAFETY: the moved dentry held a reference on its old parent.
        unsafe { &*old_parent }
            .d_children
            .fetch_sub(1, Ordering::Relaxed);
        // SAFETY: that reference is now given back.
        unsafe { dput(old_parent) };
    }

    /// Swap two dentries' places (RENAME_EXCHANGE).
    fn d_exchange(&self, a: &DentryRef<'_>, b: &DentryRef<'_>) {
        let sb = self.sb();
        let (ad, bd) = (a.dentry(), b.dentry());
        // The rename lock keeps both names (name_held).
        let (an, bn) = (ad.name_held(), bd.name_held());
        let (first, second) = if a.as_ptr() < b.as_ptr() {
            (ad, bd)
        } else {
            (bd, ad)
        };
        let g1 = first.d_lockref.lock();
        let g2 = second.d_lockref.lock();
        for x in [a, b] {
            if x.dentry().flags() & D_HASHED != 0 {
                // SAFETY: hashed under its old name; our reference and both
                // d_locks keep it, the rename lock keeps others off it.
                unsafe { sb.table.remove(x.as_ptr()) };
            }
        }
        ad.d_seq.write_begin();
        bd.d_seq.write_begin();
        let ap = ad.d_parent.load(Ordering::Relaxed);
        let bp = bd.d_parent.load(Ordering::Relaxed);
        // Release: a reader whose protected load sees a new parent sees it
        // initialised (as in d_move).
        ad.d_parent.store(bp, Ordering::Release);
        bd.d_parent.store(ap, Ordering::Release);
        let ea = ad.store_name(&bn);
        let eb = bd.store_name(&an);
        ad.d_hash_len.store(
            crate::dentry::hash_len(name_hash(&bn), bn.len()),
            Ordering::Relaxed,
        );
        bd.d_hash_len.store(
            crate::dentry::hash_len(name_hash(&an), an.len()),
            Ordering::Relaxed,
        );
        bd.d_seq.write_end();
        ad.d_seq.write_end();
        // Re-insert through the references' own pointers: the table must
        // hold pointers with the allocation's provenance, not ones made
        // from a shared borrow.
        for x in [a, b] {
            if x.dentry().flags() & D_HASHED != 0 {
                // SAFETY: removed above; the exchange leaves no other live
                // entry under either name.
                unsafe { sb.table.insert(x.as_ptr()) };
            }
        }
        drop(g2);
        drop(g1);
        for p in [ea, eb].into_iter().flatten() {
            retire_ext(sb, p);
        }
    }

    /// readdir on behalf of `cred`: read permission on the directory (as
    /// `opendir` checks it).
    pub(crate) fn readdir_as(
        &self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        offset: u64,
        emit: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        let d = self.lookup_as(cred, at, path, true)?;
        let i = d.inode().ok_or(Errno::ENOENT)?;
        if i.kind() != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        self.inode_permission(cred, i, MAY_READ)?;
        self.readdir_dentry(&d, offset, emit)
    }

    /// Read the directory `d` from cookie `offset` (no permission check;
    /// ENOTDIR for a non-directory).
    pub fn readdir_dentry(
        &self,
        d: &DentryRef<'_>,
        offset: u64,
        emit: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<()> {
        self.check_owned(d.dentry())?;
        let i = d.inode().ok_or(Errno::ENOENT)?;
        if i.kind() != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        self.sb().fs.readdir(i.ino, offset, emit)
    }

    /// Change attributes on behalf of `cred`, with Linux's rules (see
    /// [`AsCred::setattr_dentry`](crate::AsCred::setattr_dentry)).
    pub(crate) fn setattr_as(
        &self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        set: &SetAttr,
    ) -> Result<Attr> {
        let d = self.lookup_as(cred, at, path, true)?;
        self.setattr_dentry_as(cred, &d, set, false)
    }

    /// `setattr_prepare`'s rules: a size change needs write permission
    /// (EACCES) unless made through a descriptor open for writing
    /// (`via_writable_fd`); chown needs CAP_CHOWN, chgrp ownership and
    /// membership of the new group or CAP_CHOWN (EPERM); chmod ownership
    /// or CAP_FOWNER (EPERM), and S_ISGID is dropped for a caller outside
    /// the file's group without CAP_FSETID; explicit times need ownership
    /// (EPERM), times set to now ownership or write permission (EACCES).
    pub(crate) fn setattr_dentry_as(
        &self,
        cred: &Cred,
        d: &DentryRef<'_>,
        set: &SetAttr,
        via_writable_fd: bool,
    ) -> Result<Attr> {
        self.check_owned(d.dentry())?;
        let i = d.inode().ok_or(Errno::ENOENT)?;
        let p = i.perm();
        let mut set = *set;
        if set.size.is_some() && !via_writable_fd {
            if i.kind() == FileType::Directory {
                return Err(Errno::EISDIR);
            }
            self.inode_permission(cred, i, MAY_WRITE)?;
        }
        permission::chown(cred, p, set.uid, set.gid)?;
        if let Some(perm) = set.perm {
            set.perm = Some(permission::chmod(cred, p, perm)?);
        }
        let explicit =
            matches!(set.atime, Some(SetTime::At(_))) || matches!(set.mtime, Some(SetTime::At(_)));
        if set.atime.is_some() || set.mtime.is_some() {
            if explicit || permission::owner_or_capable(cred, p.uid) {
                permission::utimes(cred, p, explicit)?;
            } else {
                // To now, not the owner: write permission, ACL included.
                self.inode_permission(cred, i, MAY_WRITE)?;
            }
        }
        if set.size.is_some() && set.perm.is_none() {
            // A truncate by a caller without CAP_FSETID drops set-id bits.
            set.perm = permission::mode_after_write(cred, p);
        }
        let ctx = Ctx {
            uid: cred.fsuid,
            gid: cred.fsgid,
        };
        let a = self.setattr_dentry(d, &set, ctx)?;
        if set.perm.is_some() && !i.is_symlink() {
            // posix_acl_chmod: the access ACL follows the new mode.
            self.acl_chmod(i, a.mode());
        }
        Ok(a)
    }

    /// Change the attributes of `d` in the backend and the cached copy (no
    /// permission check; `ctx` is passed to the backend).
    pub(crate) fn setattr_dentry(
        &self,
        d: &DentryRef<'_>,
        set: &SetAttr,
        ctx: Ctx,
    ) -> Result<Attr> {
        self.check_owned(d.dentry())?;
        let i = d.inode().ok_or(Errno::ENOENT)?;
        let a = self.sb().fs.setattr(i.ino, set, ctx)?;
        if a.kind == i.kind() {
            i.set_attr(&a);
        }
        Ok(a)
    }

    /// Attributes of a dentry the caller holds (cached; refreshed from the
    /// backend when it needs revalidation).
    pub fn getattr_dentry(&self, d: &DentryRef<'_>) -> Result<Attr> {
        self.check_owned(d.dentry())?;
        let i = d.inode().ok_or(Errno::ENOENT)?;
        if self.sb().revalidate {
            let a = self.sb().fs.getattr(i.ino)?;
            if a.kind == i.kind() {
                i.set_attr(&a);
            }
            return Ok(a);
        }
        Ok(i.attr())
    }

    /// `statfs(2)`, answered by the backend.
    pub fn statfs(&self) -> Result<StatFs> {
        self.sb().fs.statfs()
    }
}

/// Whether `anc` is `d` or one of its ancestors. The caller holds the
/// rename lock (no parent changes) and a reference on `d`, whose ancestors
/// are pinned by their children.
fn is_ancestor_or_self(anc: &Dentry, d: &Dentry) -> bool {
    let mut cur: *const Dentry = d;
    loop {
        if std::ptr::eq(cur, anc) {
            return true;
        }
        // SAFETY: `cur` is `d` or an ancestor of it, pinned (see above).
        let parent = unsafe { &*cur }.parent_ptr_held() as *const Dentry;
        if std::ptr::eq(parent, cur) {
            // The root is its own parent.
            return false;
        }
        cur = parent;
    }
}

fn retire_ext(sb: &Super, p: *mut ExtName) {
    /// # Safety
    /// `p` is a retired `Box<ExtName>` whose grace period is over.
    unsafe fn free_ext(p: *mut u8, _: *const ()) {
        // SAFETY: retired once after a grace period; allocated as a Box.
        drop(unsafe { Box::from_raw(p as *mut ExtName) });
    }
    // SAFETY: the name was swapped out under d_seq; readers that start now
    // see the new one; free_ext frees a Box<ExtName>.
    unsafe { sb.rcu.retire(p as *mut u8, std::ptr::null(), free_ext) };
}
