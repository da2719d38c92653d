//! Least-recently-used bookkeeping of objects by id, bounded in bytes:
//! the in-memory object cache (`buffer::ReadCache`) and the index of the
//! disk cache (`diskcache`).

use std::collections::{BTreeMap, HashMap};

pub(crate) struct Lru<V> {
    /// id -> (value, bytes, last use)
    by_id: HashMap<u64, (V, u64, u64)>,
    /// last use -> id
    by_use: BTreeMap<u64, u64>,
    bytes: u64,
    tick: u64,
}

impl<V> Default for Lru<V> {
    fn default() -> Self {
        Lru {
            by_id: HashMap::new(),
            by_use: BTreeMap::new(),
            bytes: 0,
            tick: 0,
        }
    }
}

impl<V> Lru<V> {
    /// `id`'s value, marked used.
    pub fn get(&mut self, id: u64) -> Option<&V> {
        self.tick += 1;
        let tick = self.tick;
        let (v, _, used) = self.by_id.get_mut(&id)?;
        let old = std::mem::replace(used, tick);
        self.by_use.remove(&old);
        self.by_use.insert(tick, id);
        Some(v)
    }

    /// Whether `id` is held (its place in the order unchanged).
    pub fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Hold `id` (`bytes` long) within `max` bytes, the least recently
    /// used out first; returns the ids put out. Nothing changes when `id`
    /// is held already.
    pub fn insert(&mut self, id: u64, v: V, bytes: u64, max: u64) -> Vec<u64> {
        let mut out = Vec::new();
        if self.by_id.contains_key(&id) {
            return out;
        }
        while self.bytes + bytes > max {
            let Some((_, old)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((_, b, _)) = self.by_id.remove(&old) {
                self.bytes -= b;
                out.push(old);
            }
        }
        self.tick += 1;
        self.by_use.insert(self.tick, id);
        self.by_id.insert(id, (v, bytes, self.tick));
        self.bytes += bytes;
        out
    }

    pub fn remove(&mut self, id: u64) {
        if let Some((_, b, used)) = self.by_id.remove(&id) {
            self.by_use.remove(&used);
            self.bytes -= b;
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_go_first() {
        let mut l = Lru::default();
        for id in 1..=3 {
            assert!(l.insert(id, id * 10, 100, 300).is_empty());
        }
        assert_eq!(l.get(1), Some(&10));
        assert_eq!(l.insert(4, 40, 150, 300), vec![2, 3]);
        assert!(l.insert(4, 0, 150, 300).is_empty(), "held: unchanged");
        assert_eq!(l.get(4), Some(&40));
        assert_eq!(l.bytes(), 250);
        l.remove(1);
        assert!(!l.contains(1));
        assert_eq!(l.bytes(), 150);
    }
}
