//! Directory contents with stable readdir cookies.
//!
//! Every name gets a cookie from a per-directory counter when it is inserted,
//! and entries are listed in cookie order. A reader that resumes "after
//! cookie c" therefore sees every entry that was present for the whole
//! listing exactly once, whatever was created or removed meanwhile: new
//! names always sort after every cookie already handed out, and removing a
//! name never shifts another one. Cookies 1 and 2 belong to `.` and `..`.

use std::collections::{BTreeMap, HashMap};

use crate::fs::Ino;

/// The first cookie a real entry gets (1 and 2 are `.` and `..`).
pub const FIRST_COOKIE: u64 = 3;

#[derive(Debug)]
pub struct Dir {
    /// The directory holding this one (the root is its own parent).
    pub parent: Ino,
    by_name: HashMap<Box<[u8]>, (u64, Ino)>,
    by_cookie: BTreeMap<u64, (Box<[u8]>, Ino)>,
    next_cookie: u64,
}

impl Dir {
    pub fn new(parent: Ino) -> Dir {
        Dir {
            parent,
            by_name: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
        }
    }

    pub fn get(&self, name: &[u8]) -> Option<Ino> {
        self.by_name.get(name).map(|&(_, ino)| ino)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Add a name that is not present; it sorts after every existing entry.
    pub fn insert(&mut self, name: &[u8], ino: Ino) {
        debug_assert!(!self.by_name.contains_key(name));
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.by_name.insert(name.into(), (cookie, ino));
        self.by_cookie.insert(cookie, (name.into(), ino));
    }

    /// Remove a name; returns the inode it named.
    pub fn remove(&mut self, name: &[u8]) -> Option<Ino> {
        let (cookie, ino) = self.by_name.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }

    /// Point an existing name at another inode, keeping its cookie: a
    /// rename over a name (or an exchange) does not move it in the listing,
    /// so a concurrent reader neither misses nor repeats it. Returns the
    /// inode it named before.
    pub fn replace(&mut self, name: &[u8], ino: Ino) -> Option<Ino> {
        let slot = self.by_name.get_mut(name)?;
        let old = std::mem::replace(&mut slot.1, ino);
        if let Some(entry) = self.by_cookie.get_mut(&slot.0) {
            entry.1 = ino;
        }
        Some(old)
    }

    /// Entries with a cookie greater than `after`, in cookie order.
    pub fn after(&self, after: u64) -> impl Iterator<Item = (u64, &[u8], Ino)> + '_ {
        self.by_cookie
            .range(after.saturating_add(1)..)
            .map(|(&cookie, (name, ino))| (cookie, &name[..], *ino))
    }

    /// Internal consistency of the two indexes (for `MemFs::check`).
    pub fn check(&self) -> Result<(), String> {
        if self.by_name.len() != self.by_cookie.len() {
            return Err(format!(
                "index sizes differ: {} names, {} cookies",
                self.by_name.len(),
                self.by_cookie.len()
            ));
        }
        for (cookie, (name, ino)) in &self.by_cookie {
            if *cookie < FIRST_COOKIE || *cookie >= self.next_cookie {
                return Err(format!("cookie {cookie} out of range"));
            }
            if self.by_name.get(name) != Some(&(*cookie, *ino)) {
                return Err(format!(
                    "entry {:?} disagrees between indexes",
                    String::from_utf8_lossy(name)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(d: &Dir, after: u64) -> Vec<Vec<u8>> {
        d.after(after).map(|(_, n, _)| n.to_vec()).collect()
    }

    #[test]
    fn cookies_increase_and_survive_removal() {
        let mut d = Dir::new(1);
        d.insert(b"a", 10);
        d.insert(b"b", 11);
        d.insert(b"c", 12);
        let cookies: Vec<u64> = d.after(0).map(|(c, _, _)| c).collect();
        assert_eq!(cookies, vec![3, 4, 5]);
        assert_eq!(d.remove(b"b"), Some(11));
        d.insert(b"b", 13);
        assert_eq!(names(&d, 3), vec![b"c".to_vec(), b"b".to_vec()]);
        assert_eq!(names(&d, 4), vec![b"c".to_vec(), b"b".to_vec()]);
        assert_eq!(names(&d, u64::MAX), Vec::<Vec<u8>>::new());
        d.check().unwrap();
    }

    #[test]
    fn replace_keeps_position() {
        let mut d = Dir::new(1);
        d.insert(b"a", 10);
        d.insert(b"b", 11);
        assert_eq!(d.replace(b"a", 20), Some(10));
        assert_eq!(d.replace(b"zz", 20), None);
        let v: Vec<(u64, Vec<u8>, Ino)> = d.after(0).map(|(c, n, i)| (c, n.to_vec(), i)).collect();
        assert_eq!(v, vec![(3, b"a".to_vec(), 20), (4, b"b".to_vec(), 11)]);
        assert_eq!(d.get(b"a"), Some(20));
        d.check().unwrap();
    }
}
