//! A copy of a node's `Attr` that `getattr` can read without the tree lock.
//!
//! A sequence count guards eight words; every word is an atomic, so a reader
//! racing with a refresh reads torn values through atomics (defined
//! behaviour) and then throws them away when the count moved. The copy
//! carries the attribute version it was made from: the reader compares it
//! with the node's current version and only falls back to the lock when the
//! node changed since (Linux kernfs re-copies its iattrs into the inode under
//! the lock on every getattr/permission; this keeps the copy and skips that).
//!
//! Refreshers run under the tree's *read* lock, so several may race: the
//! first to flip the count odd writes, the others skip (they would write the
//! same values, since attributes only change under the write lock).

use crate::fs::{Attr, FileType, Ino, Timespec};
use crate::sync::{fence, AtomicU64, Ordering};

const WORDS: usize = 8;

pub(super) struct AttrCell {
    seq: AtomicU64,
    /// The node attribute version this copy was made from (0: none yet;
    /// versions start at 1).
    version: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl AttrCell {
    pub(super) fn new() -> Self {
        AttrCell {
            seq: AtomicU64::new(0),
            version: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The cached copy and its version, or `None` while a refresh is in
    /// flight or when one raced with this read.
    pub(super) fn load(&self, ino: Ino) -> Option<(u64, Attr)> {
        // Acquire: pairs with the Release store that ended the last refresh,
        // so the words read below are at least that refresh's.
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        // Relaxed: the sequence recheck below decides whether these reads
        // are used; the fence orders them before it.
        let version = self.version.load(Ordering::Relaxed);
        let mut w = [0u64; WORDS];
        for (dst, src) in w.iter_mut().zip(&self.words) {
            *dst = src.load(Ordering::Relaxed);
        }
        // Acquire fence: if any word above came from a refresh that started
        // after s1, that refresh's Release fence synchronises with this one,
        // so the reload below sees its odd (or later) count.
        fence(Ordering::Acquire);
        // Relaxed: ordered by the fence above.
        if self.seq.load(Ordering::Relaxed) != s1 {
            return None;
        }
        Some((version, decode(ino, &w)?))
    }

    /// The version of the copy now in the cell or being written to it; a
    /// hint that lets refreshers skip a cell that is already current.
    pub(super) fn version_hint(&self) -> u64 {
        // Relaxed: only compared with a version read under the tree lock;
        // a match means a refresh of the same attributes is done or under
        // way, and readers check the sequence count themselves.
        self.version.load(Ordering::Relaxed)
    }

    /// Replace the copy with `attr` made at `version`; false when another
    /// refresher holds the cell (the caller just returns its own `attr`).
    pub(super) fn try_store(&self, version: u64, attr: &Attr) -> bool {
        // Relaxed: only a hint; the CAS below decides.
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 != 0 {
            return false;
        }
        // Acquire on success: orders this refresh's stores after the
        // previous refresher's (whose Release store we read), so they cannot
        // be overwritten by older values.
        if self
            .seq
            .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Release fence: a reader that sees any word written below also sees
        // the odd count (see `load`).
        fence(Ordering::Release);
        let w = encode(attr);
        // Relaxed: published by the fence above and the Release store below.
        self.version.store(version, Ordering::Relaxed);
        for (dst, v) in self.words.iter().zip(w) {
            dst.store(v, Ordering::Relaxed);
        }
        // Release: readers that see the even count see every word above.
        self.seq.store(s + 2, Ordering::Release);
        true
    }
}

fn kind_code(kind: FileType) -> u64 {
    match kind {
        FileType::Directory => 1,
        FileType::Regular => 2,
        FileType::Symlink => 3,
        FileType::CharDevice => 4,
        FileType::BlockDevice => 5,
        FileType::Fifo => 6,
        FileType::Socket => 7,
    }
}

fn kind_from_code(code: u64) -> Option<FileType> {
    Some(match code {
        1 => FileType::Directory,
        2 => FileType::Regular,
        3 => FileType::Symlink,
        4 => FileType::CharDevice,
        5 => FileType::BlockDevice,
        6 => FileType::Fifo,
        7 => FileType::Socket,
        _ => return None,
    })
}

const LOW: u64 = 0xffff_ffff;

/// kernfs attributes have no blocks and no device number, so eight words
/// hold the rest exactly (`decode(encode(a)) == a` for such attributes).
fn encode(a: &Attr) -> [u64; WORDS] {
    [
        a.size,
        a.atime.sec as u64,
        a.mtime.sec as u64,
        a.ctime.sec as u64,
        a.atime.nsec as u64 | (a.mtime.nsec as u64) << 32,
        a.ctime.nsec as u64 | (a.perm as u64) << 32 | kind_code(a.kind) << 48,
        a.nlink as u64 | (a.uid as u64) << 32,
        a.gid as u64 | (a.blksize as u64) << 32,
    ]
}

fn decode(ino: Ino, w: &[u64; WORDS]) -> Option<Attr> {
    Some(Attr {
        ino,
        size: w[0],
        blocks: 0,
        atime: Timespec {
            sec: w[1] as i64,
            nsec: (w[4] & LOW) as u32,
        },
        mtime: Timespec {
            sec: w[2] as i64,
            nsec: (w[4] >> 32) as u32,
        },
        ctime: Timespec {
            sec: w[3] as i64,
            nsec: (w[5] & LOW) as u32,
        },
        kind: kind_from_code((w[5] >> 48) & 0xffff)?,
        perm: ((w[5] >> 32) & 0xffff) as u16,
        nlink: (w[6] & LOW) as u32,
        uid: (w[6] >> 32) as u32,
        gid: (w[7] & LOW) as u32,
        rdev: 0,
        blksize: (w[7] >> 32) as u32,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn sample() -> Attr {
        Attr {
            ino: 7,
            size: 4096,
            blocks: 0,
            atime: Timespec { sec: 1, nsec: 2 },
            mtime: Timespec {
                sec: -3,
                nsec: 999_999_999,
            },
            ctime: Timespec { sec: 5, nsec: 6 },
            kind: FileType::Regular,
            perm: 0o644,
            nlink: 1,
            uid: u32::MAX,
            gid: 1000,
            rdev: 0,
            blksize: 4096,
        }
    }

    #[test]
    fn round_trip() {
        let c = AttrCell::new();
        assert!(c.load(7).is_none(), "an empty cell has no valid kind");
        assert!(c.try_store(3, &sample()));
        assert_eq!(c.load(7), Some((3, sample())));
    }

    #[test]
    fn odd_count_blocks_readers_and_writers() {
        let c = AttrCell::new();
        assert!(c.try_store(1, &sample()));
        c.seq.fetch_add(1, Ordering::Relaxed);
        assert!(c.load(7).is_none());
        assert!(!c.try_store(2, &sample()));
    }
}
