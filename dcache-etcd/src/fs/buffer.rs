//! What a client holds for a volume whose data is in an object store:
//! the store, the bounded cache of objects read, the slice ids reserved,
//! and each inode's write buffer (the bytes written and not yet
//! committed, as disjoint extents).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use dcache::{Ino, Timespec};
use object_store::ObjectStore;

use super::diskcache::DiskCache;
use super::lru::Lru;

/// The object store of a volume and this client's state for it.
pub(crate) struct Objects {
    pub store: Arc<dyn ObjectStore>,
    /// The directory of a local store (`file://`), whose objects a flush
    /// fsyncs before committing them: `LocalFileSystem` does not.
    pub local: Option<std::path::PathBuf>,
    pub uuid: String,
    pub cache: ReadCache,
    /// The local directory under it (`Options::read_cache_dir`).
    pub disk: Option<Arc<DiskCache>>,
    /// The slice lists read, per version of a file's record.
    pub lists: super::lists::ListCache,
    /// How each file is being read (whole objects or ranges).
    pub pattern: super::readpattern::ReadPattern,
    files: Mutex<HashMap<Ino, Arc<FileBuf>>>,
    /// How many inodes have a buffer (read without the lock, so that a
    /// `getattr` with nothing buffered anywhere costs one load).
    buffered: AtomicUsize,
    /// Slice ids reserved (`[next, end)`).
    pub ids: Mutex<(u64, u64)>,
}

/// One inode's buffer: its bytes, and the lock a flush holds from taking
/// them until they are committed, so that flushes of one inode commit in
/// the order their bytes were written.
pub(crate) struct FileBuf {
    pub dirty: Mutex<Dirty>,
    pub flushing: tokio::sync::Mutex<()>,
}

/// Bytes written and not committed.
#[derive(Default)]
pub(crate) struct Dirty {
    /// Disjoint, non-adjacent extents by start offset.
    pub extents: BTreeMap<u64, Vec<u8>>,
    pub bytes: usize,
    /// The end of the last byte buffered.
    pub end: u64,
    /// When the last write was buffered.
    pub mtime: Option<Timespec>,
    /// A flush of these bytes failed and kept them, without its error
    /// being reported to anyone: the revision of the file's record this
    /// client knew then (0: none). They commit later only if the record
    /// is still at it; if another change came in between they are
    /// dropped (`objdata::flush_ino`), never laid over newer data.
    pub failed_on: Option<i64>,
    /// Bytes were dropped without their error being reported: the next
    /// flush, fsync or close reports it (as Linux reports a writeback
    /// error at the next `fsync` or `close`).
    pub lost: Option<dcache::Errno>,
    /// Taken out of the map: a writer that finds this takes another.
    dead: bool,
}

impl Dirty {
    /// Buffer `data` at `off`, over whatever is buffered there.
    pub fn add(&mut self, off: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = off + data.len() as u64;
        self.end = self.end.max(end);
        // Extents that overlap or touch [off, end).
        let touching: Vec<u64> = self
            .extents
            .range(..=end)
            .rev()
            .take_while(|(s, v)| **s + v.len() as u64 >= off)
            .map(|(s, _)| *s)
            .collect();
        if let [only] = touching[..] {
            if only <= off {
                // Grow the one extent in place (an append, an overwrite).
                let Some(v) = self.extents.get_mut(&only) else {
                    return;
                };
                let at = (off - only) as usize;
                let before = v.len();
                if v.len() < at + data.len() {
                    v.resize(at + data.len(), 0);
                }
                v[at..at + data.len()].copy_from_slice(data);
                self.bytes += v.len() - before;
                return;
            }
        }
        let start = touching.last().map_or(off, |s| (*s).min(off));
        let mut stop = end;
        for s in &touching {
            stop = stop.max(s + self.extents[s].len() as u64);
        }
        let mut v = vec![0u8; (stop - start) as usize];
        for s in touching {
            if let Some(old) = self.extents.remove(&s) {
                self.bytes -= old.len();
                let at = (s - start) as usize;
                v[at..at + old.len()].copy_from_slice(&old);
            }
        }
        let at = (off - start) as usize;
        v[at..at + data.len()].copy_from_slice(data);
        self.bytes += v.len();
        self.extents.insert(start, v);
    }

    pub fn is_empty(&self) -> bool {
        self.extents.is_empty()
    }

    /// Everything buffered, leaving the buffer empty.
    pub fn take(&mut self) -> (Vec<(u64, Vec<u8>)>, Option<Timespec>) {
        self.bytes = 0;
        self.end = 0;
        (
            std::mem::take(&mut self.extents).into_iter().collect(),
            self.mtime.take(),
        )
    }

    /// Put back extents a failed flush took, under what was written since.
    pub fn restore(&mut self, old: Vec<(u64, Vec<u8>)>, mtime: Option<Timespec>) {
        let (newer, newer_mtime) = self.take();
        for (o, v) in old.iter().chain(newer.iter()) {
            self.add(*o, v);
        }
        self.mtime = newer_mtime.or(mtime);
    }
}

impl Objects {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        local: Option<std::path::PathBuf>,
        uuid: String,
        cache_bytes: u64,
        disk: Option<Arc<DiskCache>>,
    ) -> Objects {
        Objects {
            store,
            local,
            uuid,
            cache: ReadCache::new(cache_bytes),
            disk,
            lists: Default::default(),
            pattern: Default::default(),
            files: Mutex::default(),
            buffered: AtomicUsize::new(0),
            ids: Mutex::new((0, 0)),
        }
    }

    /// Buffer a write; returns how many bytes the inode has buffered.
    pub fn buffer(&self, ino: Ino, off: u64, data: &[u8]) -> usize {
        loop {
            let fb = {
                let mut m = self.files.lock().unwrap_or_else(|e| e.into_inner());
                let fb = m.entry(ino).or_insert_with(|| {
                    self.buffered.fetch_add(1, Ordering::Relaxed);
                    Arc::new(FileBuf {
                        dirty: Mutex::default(),
                        flushing: tokio::sync::Mutex::new(()),
                    })
                });
                fb.clone()
            };
            let mut d = fb.dirty.lock().unwrap_or_else(|e| e.into_inner());
            if d.dead {
                continue;
            }
            d.add(off, data);
            d.mtime = Some(Timespec::now());
            return d.bytes;
        }
    }

    /// The inode's buffer, if it has one.
    pub fn file(&self, ino: Ino) -> Option<Arc<FileBuf>> {
        if self.buffered.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let m = self.files.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&ino).cloned()
    }

    /// The inodes that have a buffer.
    pub fn buffered_inodes(&self) -> Vec<Ino> {
        let m = self.files.lock().unwrap_or_else(|e| e.into_inner());
        m.keys().copied().collect()
    }

    /// The end of the bytes buffered for `ino` and when the last was
    /// written, if any are.
    pub fn pending(&self, ino: Ino) -> Option<(u64, Option<Timespec>)> {
        let fb = self.file(ino)?;
        let d = fb.dirty.lock().unwrap_or_else(|e| e.into_inner());
        (!d.is_empty()).then_some((d.end, d.mtime))
    }

    /// Drop the inode's buffer if it is empty and owes no error report
    /// (after a flush).
    pub fn retire(&self, ino: Ino) {
        let mut m = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let Some(fb) = m.get(&ino) else { return };
        let mut d = fb.dirty.lock().unwrap_or_else(|e| e.into_inner());
        if d.is_empty() && d.lost.is_none() {
            d.dead = true;
            drop(d);
            m.remove(&ino);
            self.buffered.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A bounded cache of whole objects read (they never change: an id is
/// never reused), least recently used out first.
pub(crate) struct ReadCache {
    max: u64,
    inner: Mutex<Lru<Bytes>>,
}

impl ReadCache {
    pub fn new(max: u64) -> ReadCache {
        ReadCache {
            max,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru<Bytes>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, id: u64) -> Option<Bytes> {
        self.lock().get(id).cloned()
    }

    /// Whether `id` is held (its place in the order unchanged).
    pub fn contains(&self, id: u64) -> bool {
        self.lock().contains(id)
    }

    pub fn put(&self, id: u64, b: Bytes) {
        let len = b.len() as u64;
        if len <= self.max {
            self.lock().insert(id, b, len, self.max);
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.lock().bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_merge_like_a_file() {
        let mut model = vec![None::<u8>; 200];
        let mut d = Dirty::default();
        let mut seed = 77u64;
        for round in 0..2000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let off = seed % 180;
            let len = (seed >> 20) % 20 + 1;
            let byte = (round % 250) as u8 + 1;
            d.add(off, &vec![byte; len as usize]);
            for b in &mut model[off as usize..(off + len) as usize] {
                *b = Some(byte);
            }
            if round % 97 == 0 {
                // A failed flush puts its bytes back under newer ones.
                let (old, t) = d.take();
                d.add(5, &[0xee; 3]);
                model[5..8].fill(Some(0xee));
                d.restore(old, t);
            }
            let mut got = vec![None; 200];
            let mut prev_end = None;
            for (s, v) in &d.extents {
                assert!(prev_end.is_none_or(|e| e < *s), "extents touch");
                prev_end = Some(s + v.len() as u64);
                for (i, b) in v.iter().enumerate() {
                    got[*s as usize + i] = Some(*b);
                }
            }
            assert_eq!(got, model, "round {round}");
            assert_eq!(d.bytes, d.extents.values().map(Vec::len).sum::<usize>());
        }
    }

    #[test]
    fn the_read_cache_is_bounded() {
        let c = ReadCache::new(10);
        c.put(1, Bytes::from_static(b"aaaa"));
        c.put(2, Bytes::from_static(b"bbbb"));
        assert!(c.get(1).is_some());
        c.put(3, Bytes::from_static(b"cccc"));
        assert!(c.get(2).is_none(), "the least recently used goes first");
        assert!(c.get(1).is_some() && c.get(3).is_some());
        c.put(4, Bytes::from(vec![0; 11]));
        assert!(c.get(4).is_none());
        assert_eq!(c.bytes(), 8);
    }
}
