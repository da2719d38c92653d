//! File data of a volume kept in an object store: the layout in etcd.
//!
//! A file is cut into chunks of [`SLICE_CHUNK`] bytes. Chunk `i` of inode
//! `n` is the key `P/b/<n:16 hex>/<i:8 hex>`, whose value is the chunk's
//! slice list: each slice names an immutable object (by its slice id), the
//! position in the chunk where its bytes go, their length, and where they
//! start in the object. Later slices cover earlier ones; bytes no slice
//! covers are a hole (zeros). Writers store a list already resolved
//! ([`flatten`]: sorted, no two slices overlapping), so a list never holds
//! a slice that nothing reads, and it is at most as long as the number of
//! separate pieces the chunk is in.
//!
//! An object is named by its slice id ([`object_path`]), holds the bytes
//! of one chunk of one file written by one flush, and is referenced only
//! from that chunk's list: when a change leaves no slice of the list
//! naming it, it is garbage, and the same transaction records it in a
//! garbage record ([`Garbage`]) for the collector, which deletes the
//! object once the grace period has passed.

use dcache::{Errno, Result};

/// Bytes of file per slice list.
pub const SLICE_CHUNK: u64 = 64 << 20;
/// A write buffer is flushed (its objects uploaded and committed) when
/// it holds this much.
pub const BLOCK: usize = 4 << 20;
/// The largest file of a volume whose data is in an object store: 16 TiB.
pub const MAX_FILE_OBJECTS: u64 = 1 << 44;
/// The most slices one chunk's list may hold (20 bytes each: a 320 KiB
/// value, well under etcd's request limit). A flush that would make more
/// rewrites the chunk's data as new objects first (`fs::objdata`'s
/// compaction: the span from the first slice to the last, holes in it
/// filled with zeros, in objects of at most [`BLOCK`] bytes).
pub const MAX_SLICES: usize = 16 * 1024;

const LIST_VERSION: u8 = 1;
const SLICE_BYTES: usize = 20;

/// The id of a slice that names no object: `len` zero bytes that
/// `fallocate` reserved (slice ids from the allocator start at 1). Read as
/// zeros, a hole to SEEK_DATA (as tmpfs's reserved pages), counted in
/// `st_blocks`.
pub const ZERO: u64 = 0;

/// The granularity of allocation and of SEEK_DATA / SEEK_HOLE answers:
/// tmpfs's page.
pub const PAGE: u64 = 4096;

/// The pages of a chunk a resolved list covers (any byte of a page
/// counts it, as a page tmpfs holds).
pub fn pages(list: &[Slice]) -> u64 {
    let mut n = 0;
    // The first page not yet counted.
    let mut next = 0;
    for s in list {
        let (a, b) = ((s.pos / PAGE).max(next), s.end().div_ceil(PAGE));
        if b > a {
            n += b - a;
            next = b;
        }
    }
    n
}

/// One slice: `len` bytes of object `id` from `off` go at `pos` in the chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub id: u64,
    pub pos: u64,
    pub len: u64,
    pub off: u64,
}

impl Slice {
    pub fn end(&self) -> u64 {
        self.pos + self.len
    }
}

/// A chunk's list as stored: a version byte, then 20 bytes a slice (id,
/// then position, length and object offset as u32, little-endian).
pub fn encode(list: &[Slice]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + list.len() * SLICE_BYTES);
    v.push(LIST_VERSION);
    for s in list {
        v.extend_from_slice(&s.id.to_le_bytes());
        v.extend_from_slice(&(s.pos as u32).to_le_bytes());
        v.extend_from_slice(&(s.len as u32).to_le_bytes());
        v.extend_from_slice(&(s.off as u32).to_le_bytes());
    }
    v
}

/// The list as written (in order: later slices cover earlier ones); EIO
/// for a value that is not one.
pub fn decode(b: &[u8]) -> Result<Vec<Slice>> {
    let Some((&LIST_VERSION, rest)) = b.split_first() else {
        return Err(Errno::EIO);
    };
    if !rest.len().is_multiple_of(SLICE_BYTES) {
        return Err(Errno::EIO);
    }
    let u32_at =
        |c: &[u8], i: usize| u64::from(u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]));
    let mut out = Vec::with_capacity(rest.len() / SLICE_BYTES);
    for c in rest.chunks_exact(SLICE_BYTES) {
        let mut id = [0u8; 8];
        id.copy_from_slice(&c[..8]);
        let s = Slice {
            id: u64::from_le_bytes(id),
            pos: u32_at(c, 8),
            len: u32_at(c, 12),
            off: u32_at(c, 16),
        };
        if s.len == 0 || s.end() > SLICE_CHUNK {
            return Err(Errno::EIO);
        }
        out.push(s);
    }
    Ok(out)
}

/// Remove `[lo, hi)` of the chunk from a resolved list.
pub fn punch(list: &mut Vec<Slice>, lo: u64, hi: u64) {
    if lo >= hi || !list.iter().any(|s| s.pos < hi && s.end() > lo) {
        return;
    }
    let mut out = Vec::with_capacity(list.len() + 1);
    for s in list.drain(..) {
        if s.end() <= lo || s.pos >= hi {
            out.push(s);
            continue;
        }
        if s.pos < lo {
            out.push(Slice {
                len: lo - s.pos,
                ..s
            });
        }
        if s.end() > hi {
            out.push(Slice {
                id: s.id,
                pos: hi,
                len: s.end() - hi,
                off: s.off + (hi - s.pos),
            });
        }
    }
    *list = out;
}

/// Put `s` over a resolved list (it covers what it overlaps).
pub fn overlay(list: &mut Vec<Slice>, s: Slice) {
    punch(list, s.pos, s.end());
    let i = list.partition_point(|x| x.pos < s.pos);
    list.insert(i, s);
}

/// The bytes a list as written shows: sorted, none overlapping, each
/// later slice covering what it overlaps of earlier ones.
pub fn flatten(written: &[Slice]) -> Vec<Slice> {
    let mut out = Vec::with_capacity(written.len());
    let sorted = written.windows(2).all(|w| w[0].end() <= w[1].pos);
    if sorted {
        out.extend_from_slice(written);
        return out;
    }
    for s in written {
        overlay(&mut out, *s);
    }
    out
}

/// The slice ids `before` names that `after` does not: the objects a
/// change left unreferenced.
pub fn dropped(before: &[Slice], after: &[Slice]) -> Vec<u64> {
    let keep: std::collections::HashSet<u64> = after.iter().map(|s| s.id).collect();
    let mut ids: Vec<u64> = before
        .iter()
        .map(|s| s.id)
        .filter(|id| *id != ZERO && !keep.contains(id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// An object's name in the store: `<volume uuid>/s/<id & 0xfff:3 hex>/<id:16 hex>`
/// (the middle level spreads a local directory store's files over 4096
/// directories).
pub fn object_path(uuid: &str, id: u64) -> String {
    format!("{uuid}/s/{:03x}/{id:016x}", id & 0xfff)
}

/// Where a volume's objects are (the prefix to list).
pub fn objects_prefix(uuid: &str) -> String {
    format!("{uuid}/s")
}

/// The slice id of an object's name, `None` for any other name.
pub fn parse_object_path(uuid: &str, path: &str) -> Option<u64> {
    let rest = path.strip_prefix(uuid)?.strip_prefix("/s/")?;
    let (dir, name) = rest.split_once('/')?;
    if dir.len() != 3 || name.len() != 16 {
        return None;
    }
    let id = u64::from_str_radix(name, 16).ok()?;
    (u64::from_str_radix(dir, 16).ok()? == id & 0xfff).then_some(id)
}

/// A garbage record `P/a/g/<key id>`: when the objects were dropped (ms
/// since the Unix epoch, the dropping client's clock), then their slice
/// ids (8 bytes LE each).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Garbage {
    pub dropped_ms: u64,
    pub ids: Vec<u64>,
}

impl Garbage {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 * (1 + self.ids.len()));
        v.extend_from_slice(&self.dropped_ms.to_le_bytes());
        for id in &self.ids {
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    pub fn decode(b: &[u8]) -> Result<Garbage> {
        if b.len() < 8 || !b.len().is_multiple_of(8) {
            return Err(Errno::EIO);
        }
        let mut words = b.chunks_exact(8).map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        });
        let dropped_ms = words.next().ok_or(Errno::EIO)?;
        Ok(Garbage {
            dropped_ms,
            ids: words.collect(),
        })
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: u64, pos: u64, len: u64, off: u64) -> Slice {
        Slice { id, pos, len, off }
    }

    /// What a list shows byte by byte (`None`: a hole), the slow way.
    fn bytes_of(written: &[Slice], n: u64) -> Vec<Option<(u64, u64)>> {
        let mut out = vec![None; n as usize];
        for x in written {
            for i in x.pos..x.end() {
                out[i as usize] = Some((x.id, x.off + (i - x.pos)));
            }
        }
        out
    }

    #[test]
    fn pages_count_each_page_any_slice_touches_once() {
        assert_eq!(pages(&[]), 0);
        assert_eq!(pages(&[s(1, 0, 1, 0)]), 1);
        assert_eq!(pages(&[s(1, 5, 20_000, 0)]), 5, "bytes 5..20005");
        // Two slices in one page, then one across two pages.
        let l = [s(1, 0, 10, 0), s(2, 100, 10, 0), s(3, 4000, 200, 0)];
        assert_eq!(pages(&l), 2);
        // Holes between: each side counted.
        let l = [s(1, 0, PAGE, 0), s(ZERO, 3 * PAGE, 2 * PAGE, 0)];
        assert_eq!(pages(&l), 3);
        // Against a page set, on random resolved lists.
        let mut seed = 7u64;
        for _ in 0..200 {
            let mut list = Vec::new();
            for _ in 0..6 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                let pos = (seed >> 33) % (40 * PAGE);
                let len = 1 + (seed >> 13) % (3 * PAGE);
                overlay(&mut list, s(1 + (seed & 3), pos, len, 0));
            }
            let mut set = std::collections::BTreeSet::new();
            for x in &list {
                for p in x.pos / PAGE..x.end().div_ceil(PAGE) {
                    set.insert(p);
                }
            }
            assert_eq!(pages(&list), set.len() as u64, "{list:?}");
        }
        assert_eq!(dropped(&[s(ZERO, 0, 9, 0), s(4, 9, 1, 0)], &[]), vec![4]);
    }

    #[test]
    fn flatten_matches_the_bytes_later_slices_cover() {
        let mut seed = 0x1234_5678u64;
        let mut rnd = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..300 {
            let written: Vec<Slice> = (0..rnd(12) + 1)
                .map(|i| {
                    let pos = rnd(90);
                    s(i + 1, pos, rnd(100 - pos) + 1, rnd(50))
                })
                .collect();
            let flat = flatten(&written);
            assert!(flat.windows(2).all(|w| w[0].end() <= w[1].pos));
            assert_eq!(bytes_of(&flat, 100), bytes_of(&written, 100));
            let mut cut = flat.clone();
            let (lo, hi) = (rnd(100), rnd(100));
            punch(&mut cut, lo, hi);
            let mut want = bytes_of(&written, 100);
            for b in want.iter_mut().take(hi as usize).skip(lo as usize) {
                *b = None;
            }
            assert_eq!(bytes_of(&cut, 100), want);
            for id in dropped(&flat, &cut) {
                assert!(!cut.iter().any(|x| x.id == id));
                assert!(flat.iter().any(|x| x.id == id));
            }
        }
    }

    #[test]
    fn lists_and_records_round_trip_and_bad_values_are_eio() {
        let l = vec![s(7, 0, 10, 0), s(u64::MAX, 10, SLICE_CHUNK - 10, 3)];
        let b = encode(&l);
        assert_eq!(b.len(), 1 + 2 * SLICE_BYTES);
        assert_eq!(decode(&b).unwrap(), l);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
        for bad in [&b""[..], b"\x02", &b[..b.len() - 1]] {
            assert_eq!(decode(bad), Err(Errno::EIO));
        }
        let mut zero = b.clone();
        zero[13..17].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(decode(&zero), Err(Errno::EIO));
        let g = Garbage {
            dropped_ms: 99,
            ids: vec![1, 2, u64::MAX],
        };
        assert_eq!(Garbage::decode(&g.encode()).unwrap(), g);
        assert_eq!(Garbage::decode(b"1234567"), Err(Errno::EIO));
        let p = object_path("u", 0x1abcd);
        assert_eq!(p, "u/s/bcd/000000000001abcd");
        assert_eq!(parse_object_path("u", &p), Some(0x1abcd));
        assert_eq!(parse_object_path("u", "u/s/bcc/000000000001abcd"), None);
        assert_eq!(parse_object_path("v", &p), None);
    }
}
