//! memfs's extended attributes: a sorted map per inode, as tmpfs keeps
//! them in memory. Any name the Vfs lets through is stored (the POSIX ACL
//! names too, as opaque values); setting or removing one stamps the
//! inode's ctime.

use super::tree::Tree;
use crate::errno::{Errno, Result};
use crate::fs::{Ino, Timespec};
use crate::xattr::{XATTR_CREATE, XATTR_REPLACE};

impl Tree {
    pub fn getxattr(&self, ino: Ino, name: &[u8], value: &mut Vec<u8>) -> Result<()> {
        let v = self.inode(ino)?.xattrs.0.get(name).ok_or(Errno::ENODATA)?;
        value.clear();
        value.extend_from_slice(v);
        Ok(())
    }

    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        let inode = self.inode(ino)?;
        let exists = inode.xattrs.0.contains_key(name);
        if exists && flags & XATTR_CREATE != 0 {
            return Err(Errno::EEXIST);
        }
        if !exists && flags & XATTR_REPLACE != 0 {
            return Err(Errno::ENODATA);
        }
        let inode = self.inode_mut(ino)?;
        inode.xattrs.0.insert(name.into(), value.into());
        inode.ctime = Timespec::now();
        Ok(())
    }

    pub fn listxattr(&self, ino: Ino, list: &mut Vec<u8>) -> Result<()> {
        list.clear();
        for name in self.inode(ino)?.xattrs.0.keys() {
            list.extend_from_slice(name);
            list.push(0);
        }
        Ok(())
    }

    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> {
        let inode = self.inode(ino)?;
        if !inode.xattrs.0.contains_key(name) {
            return Err(Errno::ENODATA);
        }
        let inode = self.inode_mut(ino)?;
        inode.xattrs.0.remove(name);
        inode.ctime = Timespec::now();
        Ok(())
    }
}
