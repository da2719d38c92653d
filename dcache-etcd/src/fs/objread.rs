//! Reading and reshaping file contents of a volume whose data is in an
//! object store: reads assembled from the chunks' slice lists and the
//! objects they name (through the read cache), truncation and hole
//! punching as transactions over the lists, SEEK_DATA / SEEK_HOLE from
//! them.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use dcache::{Errno, Ino, Result, Timespec};
use etcd_client::{GetOptions, GetResponse, TxnOp};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path;

use super::client::{delete, get, put, rec_of, same, Outcome};
use super::diskcache::DiskCache;
use super::lists::List;
use super::objdata::{regular, store_err, store_timeout, Report, GROUP, MAX_READ, PARALLEL};
use super::Inner;
use crate::codec::prefix_end;
use crate::slices::{self, Slice, SLICE_CHUNK};

impl Inner {
    /// The get of `ino`'s lists for chunks `first..=last`.
    fn lists_range(&self, ino: Ino, first: u64, last: u64) -> TxnOp {
        TxnOp::get(
            self.keys.slices(ino, first),
            Some(GetOptions::new().with_range(self.keys.slices(ino, last + 1))),
        )
    }

    pub(super) async fn obj_read(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        // Read-your-writes: what this client buffered is committed first.
        self.flush_ino(ino, Report::Keep).await?;
        let want = buf.len().min(MAX_READ);
        if want == 0 {
            return Ok(0);
        }
        let first = off / SLICE_CHUNK;
        let last = (off.saturating_add(want as u64) - 1) / SLICE_CHUNK;
        let o = self.objects()?;
        let lists = &o.lists;
        let whole = o.pattern.whole_objects(ino, off, want);
        // While the watch is current: the record from the mirror, the
        // lists kept from an earlier read of that version (`lists`).
        if let Some((kind, size, rev)) = self.cache.file_at(ino) {
            if let Some(kept) = lists.get(ino, rev, first, last) {
                regular(kind)?;
                let t = std::time::Instant::now();
                match self
                    .assemble(size, off, &kept, &mut buf[..want], whole)
                    .await
                {
                    Ok(n) => return Ok(n),
                    // The store timed out: asking again would wait as long.
                    Err(e) if t.elapsed() >= self.store_limit() => return Err(e),
                    // An object gone (the lists older than the collector's
                    // grace where this client's bound exceeds another's),
                    // or the store refused: ask etcd, then the store again.
                    Err(_) => lists.forget(ino),
                }
            }
        }
        self.cache.stats.list_reads.fetch_add(1, Ordering::Relaxed);
        let (read_rev, rs) = self
            .read(
                self.deadline(),
                vec![
                    get(self.keys.inode(ino)),
                    self.lists_range(ino, first, last),
                ],
            )
            .await?;
        let (rec, rev) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
        regular(rec.kind)?;
        // The mirror then holds the version the lists belong to.
        self.cache.record(ino, Some((&rec, rev)), read_rev);
        // Every chunk of the range, a missing list as an empty one (a hole).
        let mut read: Vec<(u64, List)> = Vec::with_capacity((last - first + 1) as usize);
        let mut next = first;
        for kv in rs[1].kvs() {
            let (_, idx) = self.keys.parse_slices(kv.key()).ok_or(Errno::EIO)?;
            while next < idx {
                read.push((next, List::from(Vec::new())));
                next += 1;
            }
            read.push((idx, slices::flatten(&slices::decode(kv.value())?).into()));
            next = idx + 1;
        }
        while next <= last {
            read.push((next, List::from(Vec::new())));
            next += 1;
        }
        lists.put(ino, rev, &read);
        self.assemble(rec.size, off, &read, &mut buf[..want], whole)
            .await
    }

    /// Fill `out` with the file's bytes from `off` (at most to `size`)
    /// from the flattened lists of the chunks it spans; returns the count.
    /// `whole`: objects not cached are fetched whole and cached (reads in
    /// sequence); otherwise only the bytes wanted are (ranged GETs).
    async fn assemble(
        &self,
        size: u64,
        off: u64,
        lists: &[(u64, List)],
        out: &mut [u8],
        whole: bool,
    ) -> Result<usize> {
        if off >= size {
            return Ok(0);
        }
        let n = (size - off).min(out.len() as u64) as usize;
        let out = &mut out[..n];
        out.fill(0);
        let hi = off + n as u64;
        // (object, offset in it, length, offset in `out`)
        let mut copies = Vec::new();
        for (idx, list) in lists {
            let base = idx * SLICE_CHUNK;
            // Reserved (object-less) slices read as the zeros `out` holds.
            for s in list.iter().filter(|s| s.id != slices::ZERO) {
                let (a, b) = ((base + s.pos).max(off), (base + s.end()).min(hi));
                if a < b {
                    copies.push((s.id, s.off + (a - base - s.pos), b - a, a - off));
                }
            }
        }
        if !whole {
            return self.assemble_ranges(copies, out).await.map(|()| n);
        }
        let mut ids: BTreeSet<u64> = copies.iter().map(|c| c.0).collect();
        // Read-ahead: a read in sequence that must go to the store fetches
        // the objects that follow it too, in the same parallel round.
        let o = self.objects()?;
        if ids.iter().any(|&id| !o.cache.contains(id)) {
            ids.extend(ahead(lists, hi, &ids, |id| o.cache.contains(id)));
        }
        let objs = self.fetch_objects(ids).await?;
        for (id, from, len, at) in copies {
            let b = objs.get(&id).ok_or(Errno::EIO)?;
            let (from, len, at) = (from as usize, len as usize, at as usize);
            let src = b.get(from..from + len).ok_or(Errno::EIO)?;
            out[at..at + len].copy_from_slice(src);
        }
        Ok(n)
    }

    /// The `copies` (object, offset in it, length, offset in `out`) from
    /// the objects cached, and the rest as ranged GETs of just their
    /// bytes, at most [`PARALLEL`] at a time, not cached.
    async fn assemble_ranges(
        &self,
        copies: Vec<(u64, u64, u64, u64)>,
        out: &mut [u8],
    ) -> Result<()> {
        let o = self.objects()?;
        let mut ranged = Vec::new();
        for c @ (id, from, len, at) in copies {
            match o.cache.get(id) {
                Some(b) => {
                    let (from, len, at) = (from as usize, len as usize, at as usize);
                    let src = b.get(from..from + len).ok_or(Errno::EIO)?;
                    out[at..at + len].copy_from_slice(src);
                }
                None => ranged.push(c),
            }
        }
        let gets = stream::iter(ranged.into_iter().map(|(id, from, len, at)| {
            let path = Path::from(slices::object_path(&o.uuid, id));
            let store = o.store.clone();
            let disk = o.disk.clone();
            async move {
                let b = match on_disk(&disk, move |d| d.get_range(id, from, len)).await {
                    Some(b) => b,
                    None => store.get_range(&path, from..from + len).await?,
                };
                Ok::<_, object_store::Error>((at as usize, len as usize, b))
            }
        }))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<_>>();
        let limit = self.store_limit();
        let fetched = match tokio::time::timeout(limit, gets).await {
            Ok(r) => r.map_err(store_err)?,
            Err(_) => return Err(store_timeout("a read", limit)),
        };
        for (at, len, b) in fetched {
            if b.len() != len {
                return Err(Errno::EIO);
            }
            out[at..at + len].copy_from_slice(&b);
        }
        Ok(())
    }

    /// Whole objects, from the read cache or the store.
    pub(super) async fn fetch_objects(&self, ids: BTreeSet<u64>) -> Result<HashMap<u64, Bytes>> {
        let o = self.objects()?;
        let mut got = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match o.cache.get(id) {
                Some(b) => {
                    got.insert(id, b);
                }
                None => missing.push(id),
            }
        }
        let gets = stream::iter(missing.into_iter().map(|id| {
            let path = Path::from(slices::object_path(&o.uuid, id));
            let store = o.store.clone();
            let disk = o.disk.clone();
            async move {
                if let Some(b) = on_disk(&disk, move |d| d.get(id)).await {
                    return Ok((id, b, true));
                }
                let b = store.get(&path).await?.bytes().await?;
                Ok::<_, object_store::Error>((id, b, false))
            }
        }))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<_>>();
        let limit = self.store_limit();
        let fetched = match tokio::time::timeout(limit, gets).await {
            Ok(r) => r.map_err(store_err)?,
            Err(_) => return Err(store_timeout("a read", limit)),
        };
        for (id, b, from_disk) in fetched {
            o.cache.put(id, b.clone());
            if let (Some(d), false) = (&o.disk, from_disk) {
                // Written behind the read: nothing waits for the disk.
                let (d, b) = (d.clone(), b.clone());
                tokio::task::spawn_blocking(move || d.put(id, &b));
            }
            got.insert(id, b);
        }
        Ok(got)
    }

    /// The reads a truncate to `size` makes besides the record: the
    /// highest lists at or past the cut, at most [`GROUP`] of them.
    pub(super) fn cut_read(&self, ino: Ino, size: u64) -> TxnOp {
        let from = self.keys.slices(ino, size / SLICE_CHUNK);
        let to = prefix_end(&self.keys.slice_lists(ino));
        TxnOp::get(
            from,
            Some(
                GetOptions::new()
                    .with_range(to)
                    .with_sort(
                        etcd_client::SortTarget::Key,
                        etcd_client::SortOrder::Descend,
                    )
                    .with_limit(GROUP as i64),
            ),
        )
    }

    /// What cutting the lists `r` (from [`cut_read`](Self::cut_read)) at
    /// `size` takes.
    pub(super) fn cut_ops(&self, size: u64, r: &GetResponse) -> Result<Cut> {
        let mut ops = Vec::new();
        let mut gone = Vec::new();
        let mut lowest = u64::MAX;
        let mut pages = 0i64;
        for kv in r.kvs() {
            let (_, idx) = self.keys.parse_slices(kv.key()).ok_or(Errno::EIO)?;
            lowest = lowest.min(idx);
            let base = idx * SLICE_CHUNK;
            let old = slices::flatten(&slices::decode(kv.value())?);
            let mut list = old.clone();
            slices::punch(&mut list, size.saturating_sub(base), SLICE_CHUNK);
            pages += slices::pages(&list) as i64 - slices::pages(&old) as i64;
            gone.extend(slices::dropped(&old, &list));
            ops.push(if list.is_empty() {
                delete(kv.key().to_vec())
            } else {
                put(kv.key().to_vec(), slices::encode(&list))
            });
        }
        let partial = r.more().then(|| (lowest * SLICE_CHUNK).max(size));
        Ok(Cut {
            ops,
            gone,
            partial,
            pages,
        })
    }

    /// `fallocate` on the lists of `[lo, hi)`, [`GROUP`] chunks a
    /// transaction compared on the record (every change to a list writes
    /// it):
    /// - [`Edit::Punch`] (PUNCH_HOLE, and ZERO_RANGE first) removes the
    ///   range; the objects left unreferenced become garbage;
    /// - [`Edit::Reserve`] (mode 0, KEEP_SIZE, and ZERO_RANGE after the
    ///   punch) fills the holes of the pages the range touches with
    ///   object-less zero slices ([`slices::ZERO`]), so `st_blocks` counts
    ///   them as tmpfs counts the pages it reserves; they read as zeros and
    ///   stay holes to SEEK_DATA. A file whose pages are not counted (from
    ///   before the count) reserves nothing, as before.
    pub(super) async fn edit_lists(&self, ino: Ino, lo: u64, hi: u64, edit: Edit) -> Result<()> {
        let page = slices::PAGE;
        let (lo, hi) = match edit {
            Edit::Punch => (lo, hi),
            Edit::Reserve => (lo / page * page, hi.div_ceil(page) * page),
        };
        if lo >= hi {
            return Ok(());
        }
        self.flush_ino(ino, Report::Keep).await?;
        let dl = self.deadline();
        let ikey = self.keys.inode(ino);
        let last = (hi - 1) / SLICE_CHUNK;
        let mut first = lo / SLICE_CHUNK;
        while first <= last {
            let upto = (first + GROUP as u64 - 1).min(last);
            let mut attempt = 0;
            loop {
                let reads = vec![get(ikey.clone()), self.lists_range(ino, first, upto)];
                let (_, rs) = self.read(dl, reads).await?;
                let (mut rec, mr) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
                regular(rec.kind)?;
                if edit == Edit::Reserve && rec.alloc == 0 {
                    return Ok(());
                }
                let mut have = HashMap::new();
                for kv in rs[1].kvs() {
                    let (_, idx) = self.keys.parse_slices(kv.key()).ok_or(Errno::EIO)?;
                    have.insert(idx, slices::flatten(&slices::decode(kv.value())?));
                }
                let mut ops = Vec::new();
                let mut gone = Vec::new();
                let mut pages = 0i64;
                for idx in first..=upto {
                    let base = idx * SLICE_CHUNK;
                    let (a, b) = (lo.max(base) - base, hi.min(base + SLICE_CHUNK) - base);
                    let old = have.remove(&idx).unwrap_or_default();
                    let list = match edit {
                        Edit::Punch => {
                            let mut l = old.clone();
                            slices::punch(&mut l, a, b);
                            l
                        }
                        Edit::Reserve => with_zeros(&old, a, b),
                    };
                    if list == old {
                        continue;
                    }
                    pages += slices::pages(&list) as i64 - slices::pages(&old) as i64;
                    gone.extend(slices::dropped(&old, &list));
                    let key = self.keys.slices(ino, idx);
                    ops.push(if list.is_empty() {
                        delete(key)
                    } else {
                        put(key, slices::encode(&list))
                    });
                }
                if ops.is_empty() {
                    break;
                }
                rec.count_pages(pages);
                let now = Timespec::now();
                if edit == Edit::Punch {
                    rec.mtime = now;
                }
                rec.ctime = now;
                ops.push(put(ikey.clone(), rec.encode()));
                if !gone.is_empty() {
                    ops.push(self.garbage_op(dl, gone).await?);
                }
                match self.commit(dl, vec![same(ikey.clone(), mr)], ops).await? {
                    Outcome::Committed(rev) => {
                        self.cache.record(ino, Some((&rec, rev)), rev);
                        break;
                    }
                    Outcome::Conflict => {
                        attempt += 1;
                        self.pause(attempt).await;
                    }
                }
            }
            first = upto + 1;
        }
        Ok(())
    }

    /// `SEEK_DATA` / `SEEK_HOLE` from `off`, from the lists in pages of
    /// [`slices::PAGE`] bytes (the end of the file is a hole; so is any
    /// page no written slice touches).
    pub(super) async fn obj_seek(&self, ino: Ino, off: u64, whence: i32) -> Result<u64> {
        self.flush_ino(ino, Report::Keep).await?;
        let dl = self.deadline();
        let (_, rs) = self.read(dl, vec![get(self.keys.inode(ino))]).await?;
        let (rec, _) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
        regular(rec.kind)?;
        if off >= rec.size {
            return Err(Errno(libc::ENXIO));
        }
        let data = whence == libc::SEEK_DATA;
        let end = prefix_end(&self.keys.slice_lists(ino));
        let mut from = self.keys.slices(ino, off / SLICE_CHUNK);
        // Data and holes in whole pages, as tmpfs (and ext4, in blocks)
        // answer: a page with any byte written is data.
        let page = slices::PAGE;
        let (down, up) = (|x: u64| x & !(page - 1), |x: u64| x.div_ceil(page) * page);
        // SEEK_HOLE: the end of the data that runs on from `off`.
        let mut cur = off;
        loop {
            let page = TxnOp::get(
                from.clone(),
                Some(GetOptions::new().with_range(end.clone()).with_limit(64)),
            );
            let (_, rs) = self.read(dl, vec![page]).await?;
            for kv in rs[0].kvs() {
                let (_, idx) = self.keys.parse_slices(kv.key()).ok_or(Errno::EIO)?;
                let base = idx * SLICE_CHUNK;
                // Reserved slices are holes, as tmpfs's reserved pages.
                let written = slices::flatten(&slices::decode(kv.value())?);
                for s in written.into_iter().filter(|s| s.id != slices::ZERO) {
                    let (a, b) = (down(base + s.pos), up(base + s.end()));
                    if b <= cur {
                        continue;
                    }
                    if data {
                        let at = a.max(off);
                        return if at < rec.size {
                            Ok(at)
                        } else {
                            Err(Errno(libc::ENXIO))
                        };
                    }
                    if a > cur {
                        return Ok(cur.min(rec.size));
                    }
                    cur = b;
                }
            }
            match rs[0].kvs().last() {
                Some(kv) if rs[0].more() => {
                    from = kv.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        if data {
            Err(Errno(libc::ENXIO))
        } else {
            Ok(cur.min(rec.size))
        }
    }
}

/// What [`Inner::edit_lists`] does to the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Edit {
    Punch,
    Reserve,
}

/// A truncate's round over the lists past the cut.
pub(super) struct Cut {
    /// The puts and deletes of the lists.
    pub ops: Vec<TxnOp>,
    /// The objects they leave unreferenced.
    pub gone: Vec<u64>,
    /// When more lists lie past the cut than one transaction takes: the
    /// size this round leaves the file at (the lowest chunk it emptied),
    /// for another round to go on from.
    pub partial: Option<u64>,
    /// The pages the cut frees (negative).
    pub pages: i64,
}

/// A resolved list with its holes in `[a, b)` filled by zero slices.
fn with_zeros(list: &[Slice], a: u64, b: u64) -> Vec<Slice> {
    let mut out = list.to_vec();
    let mut at = a;
    for s in list {
        if s.end() <= at {
            continue;
        }
        if s.pos >= b {
            break;
        }
        if s.pos > at {
            slices::overlay(&mut out, zero(at, s.pos));
        }
        at = at.max(s.end());
    }
    if at < b {
        slices::overlay(&mut out, zero(at, b));
    }
    out
}

fn zero(a: u64, b: u64) -> Slice {
    Slice {
        id: slices::ZERO,
        pos: a,
        len: b - a,
        off: 0,
    }
}

/// `f` on the disk cache, if there is one, off the runtime's threads;
/// `None`: no cache, a miss, or the task failed.
async fn on_disk(
    disk: &Option<Arc<DiskCache>>,
    f: impl FnOnce(&DiskCache) -> Option<Bytes> + Send + 'static,
) -> Option<Bytes> {
    let d = disk.clone()?;
    tokio::task::spawn_blocking(move || f(&d))
        .await
        .ok()
        .flatten()
}

/// Objects fetched ahead of a read in sequence that missed the cache.
const AHEAD: usize = 3;

/// The first [`AHEAD`] objects, in file order, named by slices of `lists`
/// that start at or past `hi`, leaving out those in `have` and those
/// `cached`.
fn ahead(
    lists: &[(u64, List)],
    hi: u64,
    have: &BTreeSet<u64>,
    cached: impl Fn(u64) -> bool,
) -> Vec<u64> {
    let mut next: Vec<(u64, u64)> = lists
        .iter()
        .flat_map(|(idx, l)| l.iter().map(move |s| (idx * SLICE_CHUNK + s.pos, s.id)))
        .filter(|&(at, id)| at >= hi && id != slices::ZERO && !have.contains(&id))
        .collect();
    next.sort_unstable();
    let mut out: Vec<u64> = Vec::with_capacity(AHEAD);
    for (_, id) in next {
        if out.len() == AHEAD {
            break;
        }
        if !out.contains(&id) && !cached(id) {
            out.push(id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserving_fills_only_the_holes_of_the_range() {
        let sl = |id, pos, len| Slice {
            id,
            pos,
            len,
            off: 0,
        };
        let z = |pos, len| sl(slices::ZERO, pos, len);
        assert_eq!(with_zeros(&[], 0, 8192), vec![z(0, 8192)]);
        let list = vec![sl(5, 100, 50), sl(6, 9000, 1000)];
        assert_eq!(
            with_zeros(&list, 0, 12288),
            vec![
                z(0, 100),
                sl(5, 100, 50),
                z(150, 8850),
                sl(6, 9000, 1000),
                z(10000, 2288)
            ]
        );
        // Data is never covered; a range inside one slice adds nothing.
        assert_eq!(with_zeros(&list, 9000, 10000), list);
        assert_eq!(with_zeros(&list, 4096, 8192), {
            let mut l = list.clone();
            slices::overlay(&mut l, z(4096, 4096));
            l
        });
        assert_eq!(slices::pages(&with_zeros(&list, 0, 12288)), 3);
    }

    #[test]
    fn read_ahead_takes_the_next_objects_in_file_order() {
        let sl = |id, pos| Slice {
            id,
            pos,
            len: 4 << 20,
            off: 0,
        };
        // Chunk 0 lists its slices out of order; chunk 1 follows.
        let lists: Vec<(u64, List)> = vec![
            (
                0,
                vec![
                    sl(12, 8 << 20),
                    sl(10, 0),
                    sl(11, 4 << 20),
                    sl(13, 12 << 20),
                ]
                .into(),
            ),
            (1, vec![sl(20, 0)].into()),
        ];
        let have: BTreeSet<u64> = [10].into();
        assert_eq!(ahead(&lists, 4 << 20, &have, |_| false), vec![11, 12, 13]);
        assert_eq!(
            ahead(&lists, 4 << 20, &have, |id| id == 12),
            vec![11, 13, 20]
        );
        assert!(ahead(&lists, 200 << 20, &have, |_| false).is_empty());
    }
}
