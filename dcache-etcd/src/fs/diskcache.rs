//! A client's bounded directory of objects it has read: the local disk
//! cache under the in-memory one (`Options::read_cache_dir`).
//!
//! Objects never change (an id is never reused), so a file here is never
//! stale; it is the whole object, written to a temporary name, synced,
//! then renamed to the id, so a crash leaves either no file or a whole
//! one (partial temporaries are removed at the next open). The cache is
//! bounded by `max` bytes, least recently used out first; what a
//! restarted client finds is kept, oldest modified first out. A file that
//! cannot be read (removed underneath, short) is a miss and is dropped
//! from the index. One client per directory keeps the bound exact;
//! several share it safely (each may delete what another indexed, which
//! that one then reads from the store).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use super::lru::Lru;

pub(crate) struct DiskCache {
    dir: PathBuf,
    max: u64,
    index: Mutex<Lru<()>>,
    /// Numbers temporary files (with the process id: unique on the host).
    temp: AtomicU64,
}

fn file_name(id: u64) -> String {
    format!("{id:016x}")
}

impl DiskCache {
    /// The cache of volume `uuid` in `root/<uuid>` (created), at most
    /// `max` bytes.
    pub fn open(root: &Path, uuid: &str, max: u64) -> std::io::Result<DiskCache> {
        let dir = root.join(uuid);
        std::fs::create_dir_all(&dir)?;
        let mut found = Vec::new();
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(n) = name.to_str() else { continue };
            if n.starts_with(".tmp-") {
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            let Ok(id) = u64::from_str_radix(n, 16) else {
                continue;
            };
            if n.len() != 16 {
                continue;
            }
            let md = e.metadata()?;
            found.push((md.modified().ok(), id, md.len()));
        }
        found.sort();
        let c = DiskCache {
            dir,
            max,
            index: Mutex::default(),
            temp: AtomicU64::new(0),
        };
        for (_, id, len) in found {
            let evicted = c.lock().insert(id, (), len, max);
            c.remove_files(&evicted);
        }
        Ok(c)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru<()>> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(file_name(id))
    }

    fn remove_files(&self, ids: &[u64]) {
        for &id in ids {
            let _ = std::fs::remove_file(self.path(id));
        }
    }

    /// Object `id`, if held.
    pub fn get(&self, id: u64) -> Option<Bytes> {
        self.lock().get(id)?;
        match std::fs::read(self.path(id)) {
            Ok(v) => Some(v.into()),
            Err(_) => {
                self.lock().remove(id);
                None
            }
        }
    }

    /// Bytes `[from, from + len)` of object `id`, if held.
    pub fn get_range(&self, id: u64, from: u64, len: u64) -> Option<Bytes> {
        self.lock().get(id)?;
        let mut buf = vec![0u8; len as usize];
        match File::open(self.path(id)).and_then(|f| f.read_exact_at(&mut buf, from)) {
            Ok(()) => Some(buf.into()),
            Err(_) => {
                self.lock().remove(id);
                None
            }
        }
    }

    /// Keep object `id` (a whole object just fetched). Errors (a full
    /// disk) leave it out; the cache is only ever an optimisation.
    pub fn put(&self, id: u64, b: &[u8]) {
        let len = b.len() as u64;
        if len > self.max || self.lock().contains(id) {
            return;
        }
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            self.temp.fetch_add(1, Ordering::Relaxed)
        ));
        let written = File::create(&tmp)
            .and_then(|mut f| {
                f.write_all(b)?;
                // Whole before it has its name: a crash then leaves a
                // temporary file (removed at the next open), never a short
                // object under its id.
                f.sync_data()
            })
            .and_then(|()| std::fs::rename(&tmp, self.path(id)));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
            return;
        }
        let evicted = self.lock().insert(id, (), len, self.max);
        self.remove_files(&evicted);
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

    fn files(dir: &Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn objects_come_back_whole_or_in_ranges_within_the_bound() {
        let root = tempfile::tempdir().unwrap();
        let c = DiskCache::open(root.path(), "vol", 3000).unwrap();
        let obj = |k: u8| vec![k; 1000];
        for id in 1..=3 {
            c.put(id, &obj(id as u8));
        }
        assert_eq!(c.get(1).as_deref(), Some(&obj(1)[..]));
        // 1 was used last: 2 goes first.
        c.put(4, &obj(4));
        assert!(c.get(2).is_none());
        assert_eq!(c.bytes(), 3000);
        assert_eq!(files(&root.path().join("vol")), 3);
        assert_eq!(c.get_range(4, 10, 5).as_deref(), Some(&[4u8; 5][..]));
        assert!(c.get_range(4, 998, 5).is_none(), "past the end: a miss");
        assert!(c.get(4).is_none(), "and dropped");
        c.put(5, &vec![0; 4000]);
        assert!(c.get(5).is_none(), "larger than the bound: not kept");
    }

    #[test]
    fn a_reopened_cache_keeps_whole_objects_and_drops_temporaries() {
        let root = tempfile::tempdir().unwrap();
        let c = DiskCache::open(root.path(), "vol", 10_000).unwrap();
        c.put(7, &[7; 100]);
        drop(c);
        let dir = root.path().join("vol");
        std::fs::write(dir.join(".tmp-1-1"), [0; 50]).unwrap();
        std::fs::write(dir.join("not-an-object"), [0; 50]).unwrap();
        let c = DiskCache::open(root.path(), "vol", 10_000).unwrap();
        assert_eq!(c.get(7).as_deref(), Some(&[7u8; 100][..]));
        assert_eq!(c.bytes(), 100);
        assert!(!dir.join(".tmp-1-1").exists());
        // Removed underneath: a miss, and forgotten.
        std::fs::remove_file(dir.join(file_name(7))).unwrap();
        assert!(c.get(7).is_none());
        assert_eq!(c.bytes(), 0);
        // A smaller bound at the next open evicts the oldest.
        drop(c);
        let c = DiskCache::open(root.path(), "vol", 10_000).unwrap();
        c.put(8, &[8; 100]);
        c.put(9, &[9; 100]);
        drop(c);
        let c = DiskCache::open(root.path(), "vol", 150).unwrap();
        assert_eq!(c.bytes(), 100);
        assert_eq!(files(&dir), 2, "an evicted file is deleted");
    }
}
