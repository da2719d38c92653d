//! Extended attributes through the [`AsCred`] handle: `getxattr(2)`,
//! `setxattr(2)`, `listxattr(2)` and `removexattr(2)`, by path (following
//! a final symlink, or not: the `l` variants) and by a held dentry (the
//! `f` variants, and FUSE's requests, which name an inode). Every call is
//! checked in Linux's order: flags, name and value size, the walk (search
//! permission), the rules of [`crate::xattr::permission`], the namespace;
//! then the backend answers. A change re-reads the inode's attributes (its
//! ctime moved).
//!
//! POSIX ACLs (`system.posix_acl_access`, `_default`) are validated and
//! enforced: see `super::acl` and [`crate::acl`]. An access ACL that says
//! no more than the permission bits becomes a chmod, and an empty value a
//! removal.

use super::{AsCred, At, DentryRef, Vfs};
use crate::cred::Cred;
use crate::errno::{Errno, Result};
use crate::inode::Inode;
use crate::xattr;

impl Vfs {
    /// The inode of `d`, which must belong to this Vfs.
    fn xattr_inode<'d>(&self, d: &'d DentryRef<'_>) -> Result<&'d Inode> {
        self.check_owned(d.dentry())?;
        d.inode().ok_or(Errno::ENOENT)
    }

    fn getxattr_dentry_as(&self, cred: &Cred, d: &DentryRef<'_>, name: &[u8]) -> Result<Vec<u8>> {
        xattr::check_name(name)?;
        let i = self.xattr_inode(d)?;
        xattr::permission_by(cred, i.perm(), name, false, |m| {
            self.inode_permission(cred, i, m)
        })?;
        xattr::resolve(name)?;
        let mut value = Vec::new();
        self.sb().fs.getxattr(i.ino, name, &mut value)?;
        // A backend's value past the limit (a host filesystem's) is what
        // Linux answers for a value it cannot hand out.
        xattr::check_value(&value)?;
        Ok(value)
    }

    fn setxattr_dentry_as(
        &self,
        cred: &Cred,
        d: &DentryRef<'_>,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        xattr::check_flags(flags)?;
        xattr::check_name(name)?;
        xattr::check_value(value)?;
        if name == xattr::POSIX_ACL_ACCESS || name == xattr::POSIX_ACL_DEFAULT {
            return self.set_acl(cred, d, name, value, flags);
        }
        self.change_xattr(cred, d, name, |fs, ino| {
            fs.setxattr(ino, name, value, flags)
        })
    }

    fn removexattr_dentry_as(&self, cred: &Cred, d: &DentryRef<'_>, name: &[u8]) -> Result<()> {
        xattr::check_name(name)?;
        self.change_xattr(cred, d, name, |fs, ino| fs.removexattr(ino, name))
    }

    /// The common tail of set and remove: permission, namespace, the
    /// backend's change, and the new ctime in the cached attributes.
    fn change_xattr(
        &self,
        cred: &Cred,
        d: &DentryRef<'_>,
        name: &[u8],
        change: impl FnOnce(&dyn crate::fs::FileSystem, crate::fs::Ino) -> Result<()>,
    ) -> Result<()> {
        let i = self.xattr_inode(d)?;
        xattr::permission_by(cred, i.perm(), name, true, |m| {
            self.inode_permission(cred, i, m)
        })?;
        xattr::resolve(name)?;
        let r = change(&*self.sb().fs, i.ino);
        if r.is_ok() {
            if xattr::resolve(name) == Ok(xattr::Namespace::PosixAcl) {
                self.sb().forget_acl(i);
            }
            self.refresh(i);
        }
        r
    }

    fn listxattr_dentry_as(&self, cred: &Cred, d: &DentryRef<'_>) -> Result<Vec<u8>> {
        let i = self.xattr_inode(d)?;
        let mut list = Vec::new();
        self.sb().fs.listxattr(i.ino, &mut list)?;
        let list = xattr::filter_list(cred, &list);
        if list.len() > xattr::XATTR_LIST_MAX {
            return Err(Errno::E2BIG);
        }
        Ok(list)
    }
}

impl<'v> AsCred<'v, '_> {
    /// `getxattr(2)`: the value of attribute `name` of what `path` names
    /// (a final symlink followed). ENODATA when it has none; see
    /// [`crate::xattr::copy_out`] for the syscall's buffer semantics.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{At, Cred, Errno, Vfs};
    ///
    /// let vfs = Vfs::new(Arc::new(MemFs::new()))?;
    /// vfs.as_root().create(At::Root, "f", 0o644)?;
    /// vfs.as_root().setxattr(At::Root, "f", b"user.color", b"blue", 0)?;
    /// let bob = Cred::user(1001, 1001, &[]);
    /// assert_eq!(vfs.as_cred(&bob).getxattr(At::Root, "f", b"user.color")?, b"blue");
    /// // bob may read the file, not write it.
    /// let err = vfs.as_cred(&bob).setxattr(At::Root, "f", b"user.color", b"red", 0);
    /// assert_eq!(err.unwrap_err(), Errno::EACCES);
    /// # Ok::<(), Errno>(())
    /// ```
    pub fn getxattr(&self, at: At<'_>, path: impl AsRef<[u8]>, name: &[u8]) -> Result<Vec<u8>> {
        self.xattr_path(at, path.as_ref(), name, true)
    }

    /// `lgetxattr(2)`: [`getxattr`](Self::getxattr) of a final symlink
    /// itself.
    pub fn lgetxattr(&self, at: At<'_>, path: impl AsRef<[u8]>, name: &[u8]) -> Result<Vec<u8>> {
        self.xattr_path(at, path.as_ref(), name, false)
    }

    fn xattr_path(&self, at: At<'_>, path: &[u8], name: &[u8], follow: bool) -> Result<Vec<u8>> {
        xattr::check_name(name)?;
        let d = self.vfs().lookup_as(self.cred(), at, path, follow)?;
        self.getxattr_dentry(&d, name)
    }

    /// `fgetxattr(2)`: [`getxattr`](Self::getxattr) of a dentry the caller
    /// holds. EXDEV for another `Vfs`'s dentry.
    pub fn getxattr_dentry(&self, d: &DentryRef<'_>, name: &[u8]) -> Result<Vec<u8>> {
        self.vfs().getxattr_dentry_as(self.cred(), d, name)
    }

    /// `setxattr(2)`: set attribute `name` of what `path` names to `value`
    /// (at most 64 KiB, E2BIG past it). `flags`: 0, or
    /// [`XATTR_CREATE`](crate::xattr::XATTR_CREATE) (EEXIST if it exists)
    /// or [`XATTR_REPLACE`](crate::xattr::XATTR_REPLACE) (ENODATA if not).
    /// Who may set what: [`crate::xattr::permission`].
    pub fn setxattr(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        self.set_path(at, path.as_ref(), name, value, flags, true)
    }

    /// `lsetxattr(2)`: [`setxattr`](Self::setxattr) on a final symlink
    /// itself (where `user.*` is EPERM, as on Linux).
    pub fn lsetxattr(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        self.set_path(at, path.as_ref(), name, value, flags, false)
    }

    fn set_path(
        &self,
        at: At<'_>,
        path: &[u8],
        name: &[u8],
        value: &[u8],
        flags: i32,
        follow: bool,
    ) -> Result<()> {
        // The argument checks come before the walk, as in the syscall.
        xattr::check_flags(flags)?;
        xattr::check_name(name)?;
        xattr::check_value(value)?;
        let d = self.vfs().lookup_as(self.cred(), at, path, follow)?;
        self.setxattr_dentry(&d, name, value, flags)
    }

    /// `fsetxattr(2)`: [`setxattr`](Self::setxattr) on a dentry the caller
    /// holds.
    pub fn setxattr_dentry(
        &self,
        d: &DentryRef<'_>,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        self.vfs()
            .setxattr_dentry_as(self.cred(), d, name, value, flags)
    }

    /// `listxattr(2)`: the names of the attributes of what `path` names,
    /// each followed by a NUL, without the `trusted.*` ones unless the
    /// caller has CAP_SYS_ADMIN. No permission on the file is needed.
    pub fn listxattr(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let d = self.vfs().lookup_as(self.cred(), at, path.as_ref(), true)?;
        self.listxattr_dentry(&d)
    }

    /// `llistxattr(2)`: [`listxattr`](Self::listxattr) of a final symlink
    /// itself.
    pub fn llistxattr(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let d = self
            .vfs()
            .lookup_as(self.cred(), at, path.as_ref(), false)?;
        self.listxattr_dentry(&d)
    }

    /// `flistxattr(2)`: [`listxattr`](Self::listxattr) of a dentry the
    /// caller holds.
    pub fn listxattr_dentry(&self, d: &DentryRef<'_>) -> Result<Vec<u8>> {
        self.vfs().listxattr_dentry_as(self.cred(), d)
    }

    /// `removexattr(2)`: remove attribute `name` of what `path` names
    /// (ENODATA if it has none; the permission rules are `setxattr`'s).
    pub fn removexattr(&self, at: At<'_>, path: impl AsRef<[u8]>, name: &[u8]) -> Result<()> {
        self.remove_path(at, path.as_ref(), name, true)
    }

    /// `lremovexattr(2)`: [`removexattr`](Self::removexattr) on a final
    /// symlink itself.
    pub fn lremovexattr(&self, at: At<'_>, path: impl AsRef<[u8]>, name: &[u8]) -> Result<()> {
        self.remove_path(at, path.as_ref(), name, false)
    }

    fn remove_path(&self, at: At<'_>, path: &[u8], name: &[u8], follow: bool) -> Result<()> {
        xattr::check_name(name)?;
        let d = self.vfs().lookup_as(self.cred(), at, path, follow)?;
        self.removexattr_dentry(&d, name)
    }

    /// `fremovexattr(2)`: [`removexattr`](Self::removexattr) on a dentry
    /// the caller holds.
    pub fn removexattr_dentry(&self, d: &DentryRef<'_>, name: &[u8]) -> Result<()> {
        self.vfs().removexattr_dentry_as(self.cred(), d, name)
    }
}
