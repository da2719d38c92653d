//! How a client has been reading each file: in sequence (fetch whole
//! objects and keep them, read ahead) or scattered (fetch just the bytes).

use std::collections::HashMap;

use dcache::Ino;

/// How a client has been reading each file, to choose between fetching
/// whole objects (kept in the read cache: one GET serves the reads that
/// follow in sequence) and fetching just the bytes a read wants (a random
/// 4 KiB read would otherwise move a whole 4 MiB object).
#[derive(Default)]
pub(crate) struct ReadPattern {
    /// Inode -> where its last read ended.
    ends: std::sync::Mutex<HashMap<Ino, u64>>,
}

/// A read starting this close to the previous one's end counts as in
/// sequence (a FUSE mount's read-ahead may deliver reads out of order).
const NEAR: u64 = 1 << 20;
/// Reads at least this long fetch whole objects wherever they start.
const LONG: usize = 1 << 20;
/// At most this many files are followed; past it they are forgotten.
const FOLLOWED: usize = 4096;

impl ReadPattern {
    /// Whether a read of `len` bytes at `off` of `ino` should fetch whole
    /// objects: a long read, a file's first read, or one that continues
    /// near where the last one ended. Notes where this one ends.
    pub fn whole_objects(&self, ino: Ino, off: u64, len: usize) -> bool {
        let mut e = self.ends.lock().unwrap_or_else(|e| e.into_inner());
        if e.len() >= FOLLOWED && !e.contains_key(&ino) {
            e.clear();
        }
        let prev = e.insert(ino, off.saturating_add(len as u64));
        len >= LONG || prev.is_none_or(|end| off.abs_diff(end) <= NEAR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_sequence_fetch_whole_objects_and_scattered_ones_ranges() {
        let p = ReadPattern::default();
        assert!(p.whole_objects(1, 0, 4096), "a first read");
        assert!(p.whole_objects(1, 4096, 4096), "in sequence");
        assert!(
            p.whole_objects(1, 8192 + 65536, 4096),
            "near: read-ahead out of order"
        );
        assert!(!p.whole_objects(1, 700 << 20, 4096), "a jump");
        assert!(!p.whole_objects(1, 300 << 20, 4096), "another");
        assert!(p.whole_objects(1, 300 << 20, LONG), "a long read");
        assert!(p.whole_objects(2, 500 << 20, 4096), "each file on its own");
    }
}
