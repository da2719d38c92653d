//! rename and renameat2's RENAME_NOREPLACE / RENAME_EXCHANGE, with the
//! checks in the order Linux makes them (do_renameat2, then vfs_rename,
//! then shmem_rename2), so each failure reports the errno tmpfs would.

use super::tree::{check_name, is_dot, Tree, ROOT};
use crate::errno::{Errno, Result};
use crate::fs::{Ino, RenameFlags, Timespec};

impl Tree {
    /// Is directory `a` the directory `b` or one of its ancestors?
    fn is_ancestor_or_self(&self, a: Ino, mut b: Ino) -> bool {
        loop {
            if a == b {
                return true;
            }
            if b == ROOT {
                return false;
            }
            match self.inodes.get(&b).and_then(|i| i.dir()) {
                Some(d) => b = d.parent,
                None => return false,
            }
        }
    }

    pub fn rename(
        &mut self,
        odir: Ino,
        oname: &[u8],
        ndir: Ino,
        nname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.exchange && flags.noreplace {
            return Err(Errno::EINVAL);
        }
        self.live_dir(odir)?;
        self.live_dir(ndir)?;
        if is_dot(oname) {
            return Err(Errno::EBUSY);
        }
        if is_dot(nname) {
            return Err(if flags.noreplace {
                Errno::EEXIST
            } else {
                Errno::EBUSY
            });
        }
        check_name(oname)?;
        check_name(nname)?;
        let src = self.live_dir(odir)?.get(oname).ok_or(Errno::ENOENT)?;
        let dst = self.live_dir(ndir)?.get(nname);
        if flags.noreplace && dst.is_some() {
            return Err(Errno::EEXIST);
        }
        if flags.exchange && dst.is_none() {
            return Err(Errno::ENOENT);
        }
        let src_is_dir = self.inode(src)?.is_dir();
        let dst_is_dir = match dst {
            Some(d) => self.inode(d)?.is_dir(),
            None => false,
        };
        // A directory cannot move under itself; nor can a name that is an
        // ancestor of the source be replaced (Linux's lock_rename trap).
        if src_is_dir && self.is_ancestor_or_self(src, ndir) {
            return Err(Errno::EINVAL);
        }
        if let Some(d) = dst {
            if dst_is_dir && self.is_ancestor_or_self(d, odir) {
                return Err(if flags.exchange {
                    Errno::EINVAL
                } else {
                    Errno::ENOTEMPTY
                });
            }
        }
        if dst == Some(src) {
            // Two names of one inode (or one name onto itself): POSIX says
            // do nothing and succeed.
            return Ok(());
        }
        if let (Some(d), false) = (dst, flags.exchange) {
            if src_is_dir && !dst_is_dir {
                return Err(Errno::ENOTDIR);
            }
            if !src_is_dir && dst_is_dir {
                return Err(Errno::EISDIR);
            }
            if dst_is_dir && self.inode(d)?.dir().is_some_and(|d| !d.is_empty()) {
                return Err(Errno::ENOTEMPTY);
            }
        }

        // Subdirectory counts move with the directories; work them out and
        // check they fit before touching anything.
        let mut delta_old: i64 = 0;
        let mut delta_new: i64 = 0;
        if src_is_dir {
            delta_old -= 1;
            delta_new += 1;
        }
        if dst_is_dir {
            delta_new -= 1;
            if flags.exchange {
                delta_old += 1;
            }
        }
        let (o_nlink, n_nlink) = if odir == ndir {
            let n = i64::from(self.inode(odir)?.nlink) + delta_old + delta_new;
            (n, n)
        } else {
            (
                i64::from(self.inode(odir)?.nlink) + delta_old,
                i64::from(self.inode(ndir)?.nlink) + delta_new,
            )
        };
        let o_nlink = u32::try_from(o_nlink).map_err(|_| Errno::EMLINK)?;
        let n_nlink = u32::try_from(n_nlink).map_err(|_| Errno::EMLINK)?;

        let now = Timespec::now();
        match dst {
            Some(d) if flags.exchange => {
                self.dir_mut(odir)?.replace(oname, d);
                self.dir_mut(ndir)?.replace(nname, src);
                if dst_is_dir {
                    self.dir_mut(d)?.parent = odir;
                }
                self.inode_mut(d)?.ctime = now;
            }
            Some(d) => {
                self.dir_mut(odir)?.remove(oname);
                self.dir_mut(ndir)?.replace(nname, src);
                let victim = self.inode_mut(d)?;
                victim.nlink = if dst_is_dir { 0 } else { victim.nlink - 1 };
                victim.ctime = now;
            }
            None => {
                self.dir_mut(odir)?.remove(oname);
                self.dir_mut(ndir)?.insert(nname, src);
            }
        }
        if src_is_dir {
            self.dir_mut(src)?.parent = ndir;
        }
        self.inode_mut(src)?.ctime = now;
        for (dir, nlink) in [(odir, o_nlink), (ndir, n_nlink)] {
            let inode = self.inode_mut(dir)?;
            inode.nlink = nlink;
            inode.touch_modified(now);
        }
        if let (Some(d), false) = (dst, flags.exchange) {
            self.maybe_free(d);
        }
        Ok(())
    }
}
