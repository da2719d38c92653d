//! GETXATTR, SETXATTR, LISTXATTR and REMOVEXATTR as calls on the `Vfs`.
//!
//! A request names an inode, so each is the dentry form of the call
//! (`fgetxattr` and friends), checked for the request's credential. The
//! size a GETXATTR or LISTXATTR carries is the caller's buffer: 0 asks
//! for the length ([`XattrReply::Size`]), a shorter one than the answer
//! is ERANGE, as `getxattr(2)` answers.

use dcache::cred::{Caps, Cred};
use dcache::errno::Result;
use dcache::xattr;

use super::FuseCore;
use crate::nodes::NodeId;

/// The answer to a GETXATTR or LISTXATTR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XattrReply {
    /// The request's size was 0: the length of the value or list.
    Size(u32),
    /// The value, or the NUL-terminated names.
    Data(Vec<u8>),
}

/// The capabilities an attribute request acts with. When the kernel
/// checks permissions (`default_permissions`) it has already applied
/// `xattr_permission` for the caller, but it does not filter a listing:
/// so a caller other than uid 0 gets every capability except
/// CAP_SYS_ADMIN, which keeps `trusted.*` names out of its lists as tmpfs
/// does. When dcache checks (`check_permissions`), uid 0 has every
/// capability and anyone else none, as for every other request.
pub fn xattr_caps(uid: u32, check_permissions: bool) -> Caps {
    if uid == 0 {
        Caps::ALL
    } else if check_permissions {
        Caps::NONE
    } else {
        Caps::ALL.without(Caps::SYS_ADMIN)
    }
}

/// The credential of an attribute request from `uid`, `gid`, task `pid`
/// (see [`xattr_caps`]).
pub fn xattr_cred(uid: u32, gid: u32, pid: u32, check_permissions: bool) -> Cred {
    Cred::of_task(uid, gid, pid, xattr_caps(uid, check_permissions))
}

/// Whether `name` is one of the POSIX ACL attributes. A mount whose kernel
/// did not take FUSE_POSIX_ACL offers no ACLs: that kernel would neither
/// check them (with `default_permissions`) nor leave the umask to the
/// daemon, so ACLs stored there would not mean what they say.
pub fn is_acl(name: &[u8]) -> bool {
    name == xattr::POSIX_ACL_ACCESS || name == xattr::POSIX_ACL_DEFAULT
}

fn sized(data: Vec<u8>, size: u32) -> Result<XattrReply> {
    match xattr::fit(&data, size as usize)? {
        // A value is at most 64 KiB and a list is capped the same way.
        None => Ok(XattrReply::Size(
            u32::try_from(data.len()).unwrap_or(u32::MAX),
        )),
        Some(_) => Ok(XattrReply::Data(data)),
    }
}

impl FuseCore {
    /// GETXATTR: attribute `name` of node `id`, for a buffer of `size`.
    pub fn getxattr(&self, cred: &Cred, id: NodeId, name: &[u8], size: u32) -> Result<XattrReply> {
        let n = self.node(id)?;
        sized(self.vfs.as_cred(cred).getxattr_dentry(&n, name)?, size)
    }

    /// LISTXATTR: the names node `id` has that `cred` may see, for a
    /// buffer of `size`; without the POSIX ACL names when `hide_acls` (a
    /// mount that offers no ACLs, see [`is_acl`]).
    pub fn listxattr(
        &self,
        cred: &Cred,
        id: NodeId,
        size: u32,
        hide_acls: bool,
    ) -> Result<XattrReply> {
        let n = self.node(id)?;
        let mut list = self.vfs.as_cred(cred).listxattr_dentry(&n)?;
        if hide_acls {
            list = list
                .split_inclusive(|&b| b == 0)
                .filter(|name| !is_acl(name.strip_suffix(&[0]).unwrap_or(name)))
                .flatten()
                .copied()
                .collect();
        }
        sized(list, size)
    }

    /// SETXATTR with `setxattr(2)`'s `flags`.
    pub fn setxattr(
        &self,
        cred: &Cred,
        id: NodeId,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        let n = self.node(id)?;
        self.vfs
            .as_cred(cred)
            .setxattr_dentry(&n, name, value, flags)
    }

    /// REMOVEXATTR.
    pub fn removexattr(&self, cred: &Cred, id: NodeId, name: &[u8]) -> Result<()> {
        let n = self.node(id)?;
        self.vfs.as_cred(cred).removexattr_dentry(&n, name)
    }
}
