//! A full consistency check of the tree (fsck), for tests and stress runs:
//! it recounts every link and page from scratch and compares.

use std::collections::{HashMap, HashSet};

use super::tree::{Tree, ROOT};
use crate::fs::Ino;

impl Tree {
    pub fn check(&self) -> Result<(), String> {
        let root = self.inodes.get(&ROOT).ok_or("root inode missing")?;
        match root.dir() {
            Some(d) if d.parent == ROOT => {}
            _ => return Err("root is not a directory that is its own parent".into()),
        }

        let mut opens = self.handles.recount()?;
        if self.handles.orphans() != self.orphans.len() {
            return Err(format!(
                "{} orphans counted, {} kept",
                self.handles.orphans(),
                self.orphans.len()
            ));
        }
        let mut names: HashMap<Ino, u32> = HashMap::new();
        let mut pages = 0;
        for (&ino, inode) in &self.inodes {
            pages += inode.pages();
            if ino >= self.next_ino {
                return Err(format!("ino {ino} not below the counter {}", self.next_ino));
            }
            if inode.nlink == 0 && !opens.contains_key(&ino) {
                return Err(format!("ino {ino} has no name and no handle but lives"));
            }
            if (inode.nlink == 0) != self.orphans.contains(&ino) {
                return Err(format!(
                    "ino {ino}: nlink {} but orphan set says otherwise",
                    inode.nlink
                ));
            }
            let Some(dir) = inode.dir() else { continue };
            dir.check().map_err(|e| format!("dir {ino}: {e}"))?;
            if inode.nlink == 0 {
                if !dir.is_empty() {
                    return Err(format!("removed dir {ino} still has entries"));
                }
                continue;
            }
            let mut subdirs = 0u32;
            for (_, name, child) in dir.after(0) {
                let c = self.inodes.get(&child).ok_or_else(|| {
                    format!(
                        "dir {ino}: {:?} names missing ino {child}",
                        String::from_utf8_lossy(name)
                    )
                })?;
                *names.entry(child).or_default() += 1;
                if let Some(cd) = c.dir() {
                    subdirs += 1;
                    if cd.parent != ino {
                        return Err(format!(
                            "dir {child} is in {ino} but its parent is {}",
                            cd.parent
                        ));
                    }
                }
            }
            if inode.nlink != 2 + subdirs {
                return Err(format!(
                    "dir {ino}: nlink {} but {subdirs} subdirectories",
                    inode.nlink
                ));
            }
        }
        if pages != self.used_pages {
            return Err(format!("{pages} pages held, {} counted", self.used_pages));
        }

        for (&ino, inode) in &self.inodes {
            let n = names.get(&ino).copied().unwrap_or(0);
            if inode.is_dir() {
                let expect = if ino == ROOT || inode.nlink == 0 {
                    0
                } else {
                    1
                };
                if n != expect {
                    return Err(format!("dir {ino} has {n} names"));
                }
            } else if inode.nlink != n {
                return Err(format!("ino {ino}: nlink {} but {n} names", inode.nlink));
            }
        }

        for &ino in self.inodes.keys() {
            opens.remove(&ino);
        }
        if let Some(ino) = opens.keys().next() {
            return Err(format!("a handle points at freed ino {ino}"));
        }

        // Every named directory must hang from the root: a rename bug that
        // made a cycle would leave counts right but the cycle unreachable.
        let mut seen = HashSet::from([ROOT]);
        let mut todo = vec![ROOT];
        while let Some(ino) = todo.pop() {
            if let Some(d) = self.inodes.get(&ino).and_then(|i| i.dir()) {
                for (_, _, child) in d.after(0) {
                    if seen.insert(child) {
                        todo.push(child);
                    }
                }
            }
        }
        for (&ino, inode) in &self.inodes {
            if inode.nlink > 0 && !seen.contains(&ino) {
                return Err(format!(
                    "ino {ino} is named but not reachable from the root"
                ));
            }
        }
        Ok(())
    }
}
