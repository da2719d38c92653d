//! The locked part of kernfs: names, children and attributes.
//!
//! Everything here is only touched with the tree lock held (shared for
//! reads, exclusive for changes); what lockless paths need is mirrored into
//! the node's `Slot`.

use std::collections::{BTreeMap, HashMap};

use crate::errno::{Errno, Result};
use crate::fs::{Attr, FileType, Ino, Timespec, NAME_MAX};

/// Size kernfs reports for attribute files (sysfs: one page).
pub(super) const ATTR_FILE_SIZE: u64 = 4096;

pub(super) struct DirBody {
    pub by_name: HashMap<Vec<u8>, Ino>,
    /// Children in insertion order; the key is the readdir cookie, which
    /// stays valid across concurrent changes because keys are never reused.
    pub by_pos: BTreeMap<u64, Ino>,
    pub next_pos: u64,
    pub subdirs: u32,
}

pub(super) enum Body {
    Dir(DirBody),
    File { size: u64 },
    Link { target: Ino },
}

pub(super) struct NodeData {
    /// 0 for the root.
    pub parent: Ino,
    pub name: Vec<u8>,
    /// Key in the parent's `by_pos`.
    pub pos: u64,
    pub body: Body,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
}

impl NodeData {
    pub(super) fn new(parent: Ino, name: &[u8], body: Body, perm: u16) -> Self {
        let now = Timespec::now();
        NodeData {
            parent,
            name: name.to_vec(),
            pos: 0,
            body,
            perm: perm & 0o7777,
            uid: 0,
            gid: 0,
            atime: now,
            mtime: now,
            ctime: now,
        }
    }

    pub(super) fn kind(&self) -> FileType {
        match self.body {
            Body::Dir(_) => FileType::Directory,
            Body::File { .. } => FileType::Regular,
            Body::Link { .. } => FileType::Symlink,
        }
    }

    pub(super) fn attr(&self, ino: Ino) -> Attr {
        let (size, nlink) = match &self.body {
            Body::Dir(d) => (0, 2 + d.subdirs),
            Body::File { size } => (*size, 1),
            Body::Link { .. } => (0, 1),
        };
        Attr {
            ino,
            size,
            blocks: 0,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            kind: self.kind(),
            perm: self.perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
        }
    }
}

pub(super) struct Tree {
    pub nodes: HashMap<Ino, NodeData>,
    pub next_ino: Ino,
}

/// A kernel-side name: one component, as the Vfs would accept it.
pub(super) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

impl Tree {
    pub(super) fn node(&self, ino: Ino) -> Result<&NodeData> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }

    pub(super) fn dir(&self, ino: Ino) -> Result<&DirBody> {
        match &self.node(ino)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut DirBody> {
        match &mut self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// `dir/name`, `Ok(None)` for a clean miss.
    pub(super) fn child(&self, dir: Ino, name: &[u8]) -> Result<Option<Ino>> {
        Ok(self.dir(dir)?.by_name.get(name).copied())
    }

    /// Enter `ino` (already in `nodes`, with `parent`/`name` set) into its
    /// parent's maps and stamp the parent's times. The caller has checked the
    /// name is free.
    pub(super) fn link_child(&mut self, ino: Ino) -> Result<()> {
        let node = self.node(ino)?;
        let (parent, name, is_dir) = (
            node.parent,
            node.name.clone(),
            node.kind() == FileType::Directory,
        );
        let d = self.dir_mut(parent)?;
        let pos = d.next_pos;
        d.next_pos += 1;
        d.by_name.insert(name, ino);
        d.by_pos.insert(pos, ino);
        if is_dir {
            d.subdirs += 1;
        }
        self.touch_dir(parent);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.pos = pos;
        }
        Ok(())
    }

    /// Take `ino` out of its parent's maps (it stays in `nodes`).
    pub(super) fn unlink_child(&mut self, ino: Ino) -> Result<()> {
        let node = self.node(ino)?;
        let (parent, name, pos, is_dir) = (
            node.parent,
            node.name.clone(),
            node.pos,
            node.kind() == FileType::Directory,
        );
        let d = self.dir_mut(parent)?;
        d.by_name.remove(&name);
        d.by_pos.remove(&pos);
        if is_dir {
            d.subdirs = d.subdirs.saturating_sub(1);
        }
        self.touch_dir(parent);
        Ok(())
    }

    fn touch_dir(&mut self, dir: Ino) {
        if let Some(n) = self.nodes.get_mut(&dir) {
            let now = Timespec::now();
            n.mtime = now;
            n.ctime = now;
        }
    }

    /// `ino` and everything below it, children before parents.
    pub(super) fn subtree_postorder(&self, ino: Ino) -> Vec<Ino> {
        let mut out = Vec::new();
        let mut stack = vec![(ino, false)];
        while let Some((n, expanded)) = stack.pop() {
            if expanded {
                out.push(n);
                continue;
            }
            stack.push((n, true));
            if let Ok(d) = self.dir(n) {
                stack.extend(d.by_pos.values().map(|&c| (c, false)));
            }
        }
        out
    }

    /// Is `a` an ancestor of `b` (or `b` itself)?
    pub(super) fn is_ancestor(&self, a: Ino, b: Ino) -> bool {
        let mut cur = b;
        while cur != 0 {
            if cur == a {
                return true;
            }
            cur = match self.nodes.get(&cur) {
                Some(n) => n.parent,
                None => return false,
            };
        }
        false
    }

    /// Inodes from the root down to `ino`, both included.
    fn chain(&self, ino: Ino) -> Result<Vec<Ino>> {
        let mut v = vec![ino];
        let mut cur = self.node(ino)?.parent;
        while cur != 0 {
            v.push(cur);
            cur = self.node(cur)?.parent;
        }
        v.reverse();
        Ok(v)
    }

    /// The relative path from directory `from` to `to` (kernfs symlink
    /// targets: `../../devices/x`).
    pub(super) fn relative_path(&self, from: Ino, to: Ino) -> Result<Vec<u8>> {
        let a = self.chain(from)?;
        let b = self.chain(to)?;
        let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        let mut out = Vec::new();
        for _ in common..a.len() {
            out.extend_from_slice(b"../");
        }
        for (i, n) in b[common..].iter().enumerate() {
            if i > 0 {
                out.push(b'/');
            }
            out.extend_from_slice(&self.node(*n)?.name);
        }
        if out.is_empty() {
            out.push(b'.');
        } else if out.ends_with(b"/") {
            out.pop();
        }
        Ok(out)
    }
}
