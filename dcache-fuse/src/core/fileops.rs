//! The FUSE requests for file operations beyond read and write
//! (FALLOCATE, LSEEK, COPY_FILE_RANGE), and the kernel's own SETATTR that
//! drops set-id bits after a write by another user.

use dcache::cred::Cred;
use dcache::errno::{Errno, Result};
use dcache::fs::FileType;
use dcache::fs::{Attr, SetAttr};
use dcache::permission::{
    generic_permission, mode_after_chown, mode_after_write_by, owner_or_capable, MAY_WRITE,
};
use dcache::DentryRef;

use super::FuseCore;
use crate::handles::Fh;
use crate::nodes::NodeId;

/// The most one COPY_FILE_RANGE copies: its reply counts bytes in 32
/// bits (the kernel asks for at most `UINT_MAX & PAGE_MASK`).
const MAX_COPY: u64 = u32::MAX as u64 & !0xfff;

impl FuseCore {
    /// FALLOCATE on the open file `fh` (`mode`: the `FALLOC_FL_*` bits).
    pub fn fallocate(&self, fh: Fh, offset: u64, len: u64, mode: i32) -> Result<()> {
        self.file(fh)?.fallocate(mode, offset, len)
    }

    /// The backend's host file behind open file `fh`, with its inode
    /// number, for passthrough I/O; `None` where the backend has none.
    pub fn backing_file(&self, fh: Fh) -> Result<Option<(u64, std::os::fd::OwnedFd)>> {
        let f = self.file(fh)?;
        let ino = f.ino();
        Ok(self
            .vfs
            .backend()
            .backing_file(ino, f.fh())
            .map(|fd| (ino, fd)))
    }

    /// The kernel says a caller without CAP_FSETID wrote or truncated node
    /// `id` (FUSE_HANDLE_KILLPRIV_V2): drop S_ISUID, and S_ISGID where
    /// group-executable or the caller is outside the file's group, as
    /// Linux 6.x does for a local file (`setattr_should_drop_suidgid`).
    pub fn kill_suidgid(&self, caller: &Cred, id: NodeId) -> Result<()> {
        let d = self.node(id)?;
        let Some(i) = d.inode() else { return Ok(()) };
        if i.kind() != FileType::Regular {
            return Ok(());
        }
        let p = i.perm();
        let Some(perm) = mode_after_write_by(p, !caller.in_group(p.gid)) else {
            return Ok(());
        };
        let set = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        self.vfs
            .as_root()
            .setattr_dentry(&d, &set, false)
            .map(|_| ())
    }

    /// LSEEK: the kernel asks only for `SEEK_DATA` and `SEEK_HOLE` (it
    /// moves the position itself); the answer is the offset found.
    pub fn lseek(&self, fh: Fh, offset: i64, whence: i32) -> Result<i64> {
        let f = self.file(fh)?;
        let at = match whence {
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                let from = u64::try_from(offset).map_err(|_| Errno(libc::ENXIO))?;
                f.seek_data_hole(from, whence)?
            }
            _ => f.file().lseek(offset, whence)?,
        };
        i64::try_from(at).map_err(|_| Errno::EOVERFLOW)
    }

    /// COPY_FILE_RANGE between two open files of this mount; at most
    /// `MAX_COPY` (4 GiB less a page) bytes per request (the kernel asks again for the rest).
    #[allow(clippy::too_many_arguments)]
    pub fn copy_file_range(
        &self,
        fh_in: Fh,
        off_in: u64,
        fh_out: Fh,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> Result<usize> {
        let flags = u32::try_from(flags).map_err(|_| Errno::EINVAL)?;
        let (src, dst) = (self.file(fh_in)?, self.file(fh_out)?);
        src.copy_file_range(off_in, &dst, off_out, len.min(MAX_COPY), flags)
    }

    /// A SETATTR that is the kernel dropping set-id bits for a caller who
    /// does not own the file (`file_remove_privs` after a write, truncate,
    /// fallocate or copy by another user: without FUSE_HANDLE_KILLPRIV the
    /// kernel sends the new mode as a chmod on that caller's behalf):
    /// `None` if `set` is not one. Such a mode is the file's own with
    /// S_ISUID, and S_ISGID if group-executable, removed; a caller who may
    /// write the file (or names an open file) may get it, since a write
    /// would drop the bits anyway; the chmod rules would refuse it
    /// (EPERM). Everything else in `set` is checked for the caller; the
    /// mode is applied as the kernel acting for itself.
    pub(super) fn setattr_kill_priv(
        &self,
        cred: &Cred,
        n: &DentryRef<'_>,
        set: &SetAttr,
        via_fh: bool,
    ) -> Option<Result<Attr>> {
        let i = n.inode()?;
        let p = i.perm();
        let perm = set.perm?;
        if i.kind() != dcache::fs::FileType::Regular
            || owner_or_capable(cred, p.uid)
            || mode_after_chown(p) != Some(perm)
            || !(via_fh || generic_permission(cred, p, MAY_WRITE).is_ok())
        {
            return None;
        }
        let rest = SetAttr { perm: None, ..*set };
        let run = || -> Result<Attr> {
            let mut a = if rest != SetAttr::default() {
                self.vfs.as_cred(cred).setattr_dentry(n, &rest, via_fh)?
            } else {
                self.vfs.getattr_dentry(n)?
            };
            // A truncate by this caller may have dropped the bits already.
            if let Some(m) = mode_after_chown(i.perm()) {
                let kill = SetAttr {
                    perm: Some(m),
                    ..SetAttr::default()
                };
                a = self.vfs.as_root().setattr_dentry(n, &kill, false)?;
            }
            Ok(a)
        };
        Some(run())
    }
}
