//! One memfs inode: the attributes `stat` shows plus what the type holds.

use super::dir::Dir;
use super::file::{FileData, PAGE};
use crate::fs::{Attr, FileType, Ino, Timespec};

/// One inode's extended attributes, listed in name order (`xattr.rs` has
/// the operations).
#[derive(Debug, Default)]
pub struct Xattrs(pub(super) std::collections::BTreeMap<Box<[u8]>, Box<[u8]>>);

/// tmpfs reports a directory's size as this many bytes per entry, counting
/// `.` and `..`; some tools (`du`, `find -size`) look at it.
const BOGO_DIRENT_SIZE: u64 = 20;

/// tmpfs keeps a symlink target shorter than this inline (no page, 0 blocks).
const SHORT_SYMLINK_LEN: usize = 128;

#[derive(Debug)]
pub enum Body {
    File(FileData),
    Dir(Dir),
    Symlink(Box<[u8]>),
    /// Fifos, sockets and device nodes: the kernel serves their I/O, the
    /// filesystem only keeps the name and the attributes.
    Special,
}

#[derive(Debug)]
pub struct Inode {
    pub kind: FileType,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    /// Names pointing here; for a directory 2 + its subdirectories (its
    /// own `.` and its entry in the parent), 0 once removed.
    pub nlink: u32,
    pub rdev: u32,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// Extended attributes (tmpfs keeps them in memory the same way).
    pub xattrs: Xattrs,
    pub body: Body,
}

impl Inode {
    pub fn attr(&self, ino: Ino) -> Attr {
        let (size, blocks) = match &self.body {
            Body::File(f) => (f.size(), f.pages() * (PAGE as u64 / 512)),
            Body::Dir(d) => ((d.len() as u64 + 2) * BOGO_DIRENT_SIZE, 0),
            Body::Symlink(t) if t.len() < SHORT_SYMLINK_LEN => (t.len() as u64, 0),
            Body::Symlink(t) => (t.len() as u64, PAGE as u64 / 512),
            Body::Special => (0, 0),
        };
        Attr {
            ino,
            size,
            blocks,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: PAGE as u32,
        }
    }

    pub fn dir(&self) -> Option<&Dir> {
        match &self.body {
            Body::Dir(d) => Some(d),
            _ => None,
        }
    }

    pub fn dir_mut(&mut self) -> Option<&mut Dir> {
        match &mut self.body {
            Body::Dir(d) => Some(d),
            _ => None,
        }
    }

    /// Mode, owner and group, as the permission rules take them.
    pub fn perm_of(&self) -> crate::permission::Perm {
        crate::permission::Perm {
            mode: self.kind.mode_bits() | self.perm as u32,
            uid: self.uid,
            gid: self.gid,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    /// Stamp a change to the directory's contents (POSIX: mtime and ctime).
    pub fn touch_modified(&mut self, now: Timespec) {
        self.mtime = now;
        self.ctime = now;
    }

    /// The pages this inode holds (given back to the space count when it
    /// is freed).
    pub fn pages(&self) -> u64 {
        match &self.body {
            Body::File(f) => f.pages(),
            _ => 0,
        }
    }
}
