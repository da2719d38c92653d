//! POSIX ACLs in the Vfs: the permission check that reads an inode's
//! access ACL (Linux's `generic_permission` with `check_acl`), the cache
//! of those ACLs, and the mode/ACL sync of `setxattr`, `chmod` and
//! creation (`posix_acl_update_mode`, `posix_acl_chmod`,
//! `posix_acl_create`). The rules themselves are [`crate::acl`]'s.
//!
//! The cache: each cached inode's mode word carries its ACL state
//! (unknown, none, or one: see `Inode::acl_state`), so an inode without
//! an ACL costs the walk nothing (Linux's `cache_no_acl`); the ACLs of
//! inodes that have one live in `Super::acls`, keyed by inode number,
//! read from the backend (`getxattr`) on the first check that needs them
//! and dropped when an ACL or the mode changes through the Vfs, or the
//! backend reports the inode changed. The rcu-walk does not take that
//! map's lock: an inode whose state is unknown or that has an ACL the
//! check needs sends the walk to reference mode (Linux's `-ECHILD`).

use std::collections::HashMap;
use std::sync::Arc;

use super::{DentryRef, Super, Vfs};
use crate::acl::{self, PosixAcl};
use crate::cred::Cred;
use crate::errno::{Errno, Result};
use crate::fs::{Ctx, Ino, SetAttr};
use crate::inode::Inode;
use crate::permission::{self, MAY_EXEC, MAY_WRITE};
use crate::sync::{LockExt, Mutex};
use crate::xattr::{POSIX_ACL_ACCESS, POSIX_ACL_DEFAULT};

/// The cached access ACLs of the inodes whose state says they have one.
pub(crate) type AclMap = Mutex<HashMap<Ino, Arc<PosixAcl>>>;

/// Read the ACL `name` of `ino` from the backend: `None` when it has none
/// (ENODATA) or the backend keeps no attributes; EIO for a stored value
/// that is not a valid ACL.
fn read_acl(sb: &Super, ino: Ino, name: &[u8]) -> Result<Option<PosixAcl>> {
    let mut v = Vec::new();
    match sb.fs.getxattr(ino, name, &mut v) {
        Ok(()) => PosixAcl::from_xattr(&v).map_err(|_| Errno::EIO),
        Err(Errno::ENODATA | Errno::EOPNOTSUPP | Errno::ENOSYS) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Super {
    /// The access ACL of `i` (`get_inode_acl`), read and cached on first
    /// use.
    pub(crate) fn access_acl(&self, i: &Inode) -> Result<Option<Arc<PosixAcl>>> {
        if i.acl_state() == Some(false) {
            return Ok(None);
        }
        let mut map = self.acls.lock_unpoisoned();
        match i.acl_state() {
            Some(false) => return Ok(None),
            Some(true) => {
                if let Some(a) = map.get(&i.ino) {
                    return Ok(Some(a.clone()));
                }
            }
            None => {}
        }
        // Under the map's lock, so a concurrent `forget_acl` either comes
        // before (and we read the new value) or after (and resets us).
        let acl = read_acl(self, i.ino, POSIX_ACL_ACCESS)?.map(Arc::new);
        match &acl {
            Some(a) => map.insert(i.ino, a.clone()),
            None => map.remove(&i.ino),
        };
        i.set_acl_state(Some(acl.is_some()));
        Ok(acl)
    }

    /// Drop what is cached of `i`'s ACL: the next check reads it again.
    pub(crate) fn forget_acl(&self, i: &Inode) {
        if i.is_symlink() {
            return;
        }
        let mut map = self.acls.lock_unpoisoned();
        map.remove(&i.ino);
        i.set_acl_state(None);
    }

    /// The inode `i` is being freed: drop its cached ACL.
    pub(crate) fn evict_acl(&self, i: &Inode) {
        if i.acl_state() == Some(true) {
            self.acls.lock_unpoisoned().remove(&i.ino);
        }
    }
}

impl Vfs {
    /// `inode_permission` for `i`: the mode, or its ACL when it has one
    /// that decides (the caller is not the owner and the mode has group
    /// bits), then the capabilities. EACCES if not allowed.
    pub(crate) fn inode_permission(&self, cred: &Cred, i: &Inode, mask: u32) -> Result<()> {
        let p = i.perm();
        if i.acl_state() == Some(false) {
            return permission::generic_permission(cred, p, mask);
        }
        let a = self.sb().access_acl(i)?;
        acl::check(cred, p, a.as_deref(), mask)
    }

    /// `may_create`: write and search on the directory `dir`.
    pub(crate) fn may_create_in(&self, cred: &Cred, dir: &Inode) -> Result<()> {
        self.inode_permission(cred, dir, MAY_WRITE | MAY_EXEC)
    }

    /// `may_delete` without the type checks: write and search on `dir`,
    /// then the sticky bit (EPERM).
    pub(crate) fn may_delete_in(&self, cred: &Cred, dir: &Inode, victim_uid: u32) -> Result<()> {
        self.inode_permission(cred, dir, MAY_WRITE | MAY_EXEC)?;
        if permission::sticky_forbids(cred, dir.perm(), victim_uid) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// The permission bits a new object gets in `dir` and the ACLs to give
    /// it (`posix_acl_create`): with a default ACL on `dir`, the requested
    /// `perm` (not umasked) limited by it; without, `perm` less the
    /// caller's umask. `kind` is the type's `S_IFMT` bits.
    pub(crate) fn acl_create(
        &self,
        cred: &Cred,
        dir: &Inode,
        kind: u32,
        perm: u16,
    ) -> Result<(u16, NewAcls)> {
        let default = match read_acl(self.sb(), dir.ino, POSIX_ACL_DEFAULT) {
            Ok(d) => d,
            // A default ACL that cannot be read is no default ACL.
            Err(Errno::EIO) => None,
            Err(e) => return Err(e),
        };
        let Some(default) = default else {
            return Ok((perm & !cred.umask(), NewAcls::default()));
        };
        let (mode, access, default) = acl::create(&default, kind | u32::from(perm));
        Ok(((mode & 0o7777) as u16, NewAcls { access, default }))
    }

    /// Store the ACLs a new inode `ino` inherited (see `acl_create`).
    pub(crate) fn acl_store_new(&self, ino: Ino, acls: &NewAcls) -> Result<()> {
        let fs = &self.sb().fs;
        if let Some(a) = &acls.access {
            fs.setxattr(ino, POSIX_ACL_ACCESS, &a.to_xattr(), 0)?;
        }
        if let Some(d) = &acls.default {
            fs.setxattr(ino, POSIX_ACL_DEFAULT, &d.to_xattr(), 0)?;
        }
        Ok(())
    }

    /// After a chmod of `i` to `mode`: its access ACL's owner, mask (or
    /// group) and other entries follow (`posix_acl_chmod`). A backend that
    /// did so itself (a host filesystem) is left alone.
    pub(crate) fn acl_chmod(&self, i: &Inode, mode: u32) {
        self.sb().forget_acl(i);
        let Ok(Some(a)) = read_acl(self.sb(), i.ino, POSIX_ACL_ACCESS) else {
            return;
        };
        let new = a.chmod(mode);
        if new != a {
            let _ = self
                .sb()
                .fs
                .setxattr(i.ino, POSIX_ACL_ACCESS, &new.to_xattr(), 0);
        }
        self.sb().forget_acl(i);
    }

    /// `setxattr` of `system.posix_acl_access` or `_default` (`vfs_set_acl`
    /// and `simple_set_acl`), in Linux's order: the value's format
    /// (EINVAL, EOPNOTSUPP for another version), a symlink (EOPNOTSUPP),
    /// a default ACL on a non-directory (EACCES; removing one is a no-op),
    /// ownership (EPERM). An access ACL sets the mode (its group bits
    /// from the mask) and is stored only if a mode cannot say it; an
    /// empty value removes the ACL.
    pub(crate) fn set_acl(
        &self,
        cred: &Cred,
        d: &DentryRef<'_>,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        let acl = if value.is_empty() {
            None
        } else {
            PosixAcl::from_xattr(value)?
        };
        self.check_owned(d.dentry())?;
        let i = d.inode().ok_or(Errno::ENOENT)?;
        if i.is_symlink() {
            return Err(Errno::EOPNOTSUPP);
        }
        let access = name == POSIX_ACL_ACCESS;
        if !access && !i.is_dir() {
            return if acl.is_some() {
                Err(Errno::EACCES)
            } else {
                Ok(())
            };
        }
        let p = i.perm();
        crate::xattr::permission(cred, p, name, true)?;
        let fs = &self.sb().fs;
        let mut store = acl.as_ref();
        if access {
            if let Some(a) = &acl {
                let (mode, keep) = acl::update_mode(cred, p.mode, p.gid, a);
                store = keep;
                if mode != p.mode {
                    let set = SetAttr {
                        perm: Some((mode & 0o7777) as u16),
                        ..SetAttr::default()
                    };
                    let ctx = Ctx {
                        uid: cred.fsuid,
                        gid: cred.fsgid,
                    };
                    self.setattr_dentry(d, &set, ctx)?;
                }
            }
        }
        let r = match store {
            Some(a) => fs.setxattr(i.ino, name, &a.to_xattr(), flags),
            None => match fs.removexattr(i.ino, name) {
                // Removing what is not there: ENODATA only for an explicit
                // empty value's removal of a missing default ACL? Linux
                // answers 0 for both.
                Err(Errno::ENODATA) => Ok(()),
                r => r,
            },
        };
        self.sb().forget_acl(i);
        self.refresh(i);
        r
    }
}

/// The ACLs a new inode inherits from its directory's default ACL.
#[derive(Default)]
pub(crate) struct NewAcls {
    access: Option<PosixAcl>,
    default: Option<PosixAcl>,
}
