//! The slice lists this client has read, kept per version of the file's
//! inode record, so that a read while the watch is current costs no round
//! trip to etcd.
//!
//! Every commit that changes a file's lists also puts its inode record
//! (writes, truncates and hole punches compare the record's revision and
//! put it; the collector deletes both), and the record is watched while
//! the lists are not. So the lists read together with the record at
//! revision `r` are the file's lists for as long as the record is still
//! at `r`, which the mirror tells while the watch is current: a read then
//! takes the record from the mirror and the lists from here. A list kept
//! here may be up to the staleness bound old, as every cached answer is;
//! the objects it names outlive their last list by the collector's grace
//! period, and a read that still finds one gone falls back to etcd.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dcache::Ino;

use crate::slices::Slice;

/// At most this many chunk lists are kept (each a few slices); past it
/// the whole cache is dropped and refilled by the reads that follow.
const MAX_LISTS: usize = 1 << 14;

/// One chunk's flattened list (empty: a hole).
pub(crate) type List = Arc<[Slice]>;

struct Version {
    /// The inode record's revision the lists were read with.
    rev: i64,
    /// Chunk index -> its list.
    chunks: HashMap<u64, List>,
}

#[derive(Default)]
pub(crate) struct ListCache {
    inner: Mutex<Lists>,
}

#[derive(Default)]
struct Lists {
    files: HashMap<Ino, Version>,
    count: usize,
}

impl ListCache {
    /// The lists of chunks `first..=last` of `ino` read with its record at
    /// revision `rev`, if every one of them is kept.
    pub fn get(&self, ino: Ino, rev: i64, first: u64, last: u64) -> Option<Vec<(u64, List)>> {
        let l = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let v = l.files.get(&ino).filter(|v| v.rev == rev)?;
        (first..=last)
            .map(|i| v.chunks.get(&i).map(|c| (i, c.clone())))
            .collect()
    }

    /// Keep `lists` (chunk index, list), read together with `ino`'s record
    /// at revision `rev`. A version older than the one kept is dropped.
    pub fn put(&self, ino: Ino, rev: i64, lists: &[(u64, List)]) {
        let mut l = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if l.count + lists.len() > MAX_LISTS {
            l.files.clear();
            l.count = 0;
        }
        let Lists { files, count } = &mut *l;
        let v = files.entry(ino).or_insert_with(|| Version {
            rev,
            chunks: HashMap::new(),
        });
        if v.rev > rev {
            return;
        }
        if v.rev < rev {
            *count -= v.chunks.len();
            v.chunks.clear();
            v.rev = rev;
        }
        for (i, list) in lists {
            if v.chunks.insert(*i, list.clone()).is_none() {
                *count += 1;
            }
        }
    }

    /// Drop what is kept of `ino` (a read found an object gone).
    pub fn forget(&self, ino: Ino) {
        let mut l = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = l.files.remove(&ino) {
            l.count -= v.chunks.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(id: u64) -> List {
        Arc::from(vec![Slice {
            id,
            pos: 0,
            len: 10,
            off: 0,
        }])
    }

    #[test]
    fn lists_serve_their_own_version_only() {
        let c = ListCache::default();
        c.put(1, 10, &[(0, list(7)), (1, Arc::from(vec![]))]);
        let got = c.get(1, 10, 0, 1).expect("kept");
        assert_eq!(got[0].1[0].id, 7);
        assert!(got[1].1.is_empty(), "a hole is kept too");
        assert!(c.get(1, 11, 0, 1).is_none(), "another version");
        assert!(c.get(1, 10, 0, 2).is_none(), "chunk 2 was never read");
        c.put(1, 9, &[(2, list(8))]);
        assert!(c.get(1, 10, 2, 2).is_none(), "an older read is not kept");
        c.put(1, 12, &[(2, list(9))]);
        assert!(c.get(1, 12, 0, 0).is_none(), "a newer version replaces all");
        assert_eq!(c.get(1, 12, 2, 2).unwrap()[0].1[0].id, 9);
        c.forget(1);
        assert!(c.get(1, 12, 2, 2).is_none());
        assert_eq!(c.inner.lock().unwrap().count, 0);
    }

    #[test]
    fn the_cache_is_bounded() {
        let c = ListCache::default();
        for ino in 0..MAX_LISTS as u64 + 5 {
            c.put(ino, 1, &[(0, list(ino))]);
        }
        let l = c.inner.lock().unwrap();
        assert!(l.count <= MAX_LISTS);
        assert_eq!(
            l.count,
            l.files.values().map(|v| v.chunks.len()).sum::<usize>()
        );
    }
}
