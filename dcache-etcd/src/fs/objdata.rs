//! Writing file contents of a volume whose data is in an object store
//! (`crate::slices` has the layout): writes buffered per inode and
//! flushed as new objects, then one transaction per group of chunks that
//! puts the slices over the chunks' lists; slice ids and garbage
//! records. (`objread` reads, truncates, punches and seeks.)
//!
//! Objects are always uploaded before the transaction that makes them
//! reachable; an object a change leaves unreferenced goes into a garbage
//! record in that same transaction (`collect` deletes it after the grace
//! period).

use std::time::{Duration, Instant};

use bytes::Bytes;
use dcache::{Errno, FileType, Ino, Result, Timespec};
use etcd_client::TxnOp;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path;

use super::buffer::Objects;
use super::client::{absent, get, present, put, rec_of, same, Outcome};
use super::Inner;
use crate::codec::decode_u64;
use crate::log::{eio, Cause};
use crate::slices::{self, Garbage, Slice, BLOCK, MAX_FILE_OBJECTS, MAX_SLICES, SLICE_CHUNK};

/// Slice ids a client reserves at a time.
const SLICE_BATCH: u64 = 1024;
/// Chunks one transaction changes at most (etcd's default
/// `--max-txn-ops` is 128).
pub(super) const GROUP: usize = 32;
/// The most one `read` call returns (a longer one is short).
pub(super) const MAX_READ: usize = 16 << 20;
/// Objects uploaded or fetched at once.
pub(super) const PARALLEL: usize = 8;
/// An inode's buffer past which a write flushes before buffering more,
/// and returns the flush's error (so a store that is down does not make
/// the buffer grow without bound).
const BUFFER_MAX: usize = 4 * BLOCK;

/// The errno for a store's failure: the store's own answer where it has
/// one (a local directory that is full, read-only or over quota: ENOSPC,
/// EROFS, EDQUOT), else EIO, logged with the store's words.
pub(super) fn store_err(e: object_store::Error) -> Errno {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if let Some(n @ (libc::ENOSPC | libc::EROFS | libc::EDQUOT)) = io.raw_os_error() {
                crate::log::failure(Cause::Store, format_args!("object store: {e}"));
                return Errno(n);
            }
        }
        src = s.source();
    }
    eio(Cause::Store, format_args!("object store: {e}"))
}

/// EIO for a store request that ran past its limit.
pub(super) fn store_timeout(what: &str, limit: Duration) -> Errno {
    eio(
        Cause::Store,
        format_args!("object store: {what} got no answer within {limit:?}"),
    )
}

pub(super) fn regular(kind: FileType) -> Result<()> {
    match kind {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(Errno::EISDIR),
        _ => Err(Errno::EINVAL),
    }
}

impl Inner {
    pub(super) fn objects(&self) -> Result<&Objects> {
        self.objects.get().ok_or(Errno::EIO)
    }

    /// How long an upload or a fetch of one batch may take.
    pub(super) fn store_limit(&self) -> Duration {
        self.opts.timeout.max(Duration::from_secs(60))
    }

    /// `n` fresh slice ids (from `P/a/n`, reserved [`SLICE_BATCH`] at a time).
    pub(super) async fn alloc_slices(&self, dl: Instant, n: usize) -> Result<Vec<u64>> {
        let o = self.objects()?;
        let mut out = Vec::with_capacity(n);
        let take = |out: &mut Vec<u64>| {
            let mut p = o.ids.lock().unwrap_or_else(|e| e.into_inner());
            while out.len() < n && p.0 < p.1 {
                out.push(p.0);
                p.0 += 1;
            }
        };
        take(&mut out);
        let key = self.keys.next_slice();
        let mut attempt = 0;
        while out.len() < n {
            let want = ((n - out.len()) as u64).max(SLICE_BATCH);
            let (_, rs) = self.read(dl, vec![get(key.clone())]).await?;
            let (cur, cmp) = match rs[0].kvs().first() {
                Some(kv) => (
                    decode_u64(kv.value())?,
                    same(key.clone(), kv.mod_revision()),
                ),
                None => (1, absent(key.clone())),
            };
            let end = cur.checked_add(want).ok_or(Errno::ENOSPC)?;
            let ops = vec![put(key.clone(), end.to_le_bytes().to_vec())];
            if let Outcome::Committed(_) = self.commit(dl, vec![cmp], ops).await? {
                *o.ids.lock().unwrap_or_else(|e| e.into_inner()) = (cur, end);
                take(&mut out);
            } else {
                attempt += 1;
                self.pause(attempt).await;
            }
        }
        Ok(out)
    }

    /// The op that records `ids` as garbage (dropped now).
    pub(super) async fn garbage_op(&self, dl: Instant, ids: Vec<u64>) -> Result<TxnOp> {
        let kid = self.alloc_slices(dl, 1).await?[0];
        let g = Garbage {
            dropped_ms: slices::now_ms(),
            ids,
        };
        Ok(put(self.keys.garbage(kid), g.encode()))
    }

    /// Where an O_APPEND write goes: past what this client buffered for
    /// the file, else at its end as committed (read from etcd, not the
    /// mirror: an append right after a lock was taken must follow the
    /// previous holder's, and the caller's idea of the size, a kernel's
    /// cached one, may be older still).
    pub(super) async fn append_at(&self, ino: Ino) -> Result<u64> {
        if let Some((end, _)) = self.objects()?.pending(ino) {
            let size = self.cache.attr(ino).map_or(0, |a| a.size);
            return Ok(end.max(size));
        }
        let (_, rs) = self
            .read(self.deadline(), vec![get(self.keys.inode(ino))])
            .await?;
        let (rec, _) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
        regular(rec.kind)?;
        Ok(rec.size)
    }

    /// Buffer a write; flush when the inode holds a block.
    pub(super) async fn obj_write(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        if off >= MAX_FILE_OBJECTS {
            return Err(Errno::EFBIG);
        }
        if let Some(a) = self.cache.attr(ino) {
            match a.kind {
                FileType::Regular => {}
                FileType::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
        }
        let o = self.objects()?;
        let len = data.len().min((MAX_FILE_OBJECTS - off) as usize);
        if o.pending(ino).is_some() {
            let held = o.file(ino).map_or(0, |f| {
                f.dirty.lock().unwrap_or_else(|e| e.into_inner()).bytes
            });
            if held >= BUFFER_MAX {
                // Its error is this write's answer: reported.
                self.flush_ino(ino, Report::Drop).await?;
            }
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(BLOCK);
            let held = o.buffer(ino, off + done as u64, &data[done..done + n]);
            done += n;
            if held >= BLOCK {
                // An error stays with the buffer (the bytes are kept and
                // retried): fsync and close report it.
                let _ = self.flush_ino(ino, Report::Keep).await;
            }
        }
        Ok(len)
    }

    /// Commit what `ino` has buffered. ENOENT: the file is gone (its
    /// bytes are dropped, their objects recorded as garbage).
    ///
    /// Another error, by [`Report`]: `Keep` leaves the bytes buffered, to
    /// be tried again, marked with the file's record revision as this
    /// client knew it (`Dirty::failed_on`); `Drop` (the caller returns the
    /// error to the writer: close, fsync, a write) drops them and logs
    /// which bytes. Kept bytes never land over a newer change: the next
    /// try commits them only if the record is still at that revision,
    /// else drops them and owes the next reporting flush an EIO. Bytes
    /// written under a lock commit only in a transaction that finds the
    /// lock still held (`locks`); a lock that is gone drops them too.
    pub(super) async fn flush_ino(&self, ino: Ino, report: Report) -> Result<()> {
        let Some(o) = self.objects.get() else {
            return Ok(());
        };
        let Some(fb) = o.file(ino) else {
            return Ok(());
        };
        let _g = fb.flushing.lock().await;
        let (ext, mtime, failed_on, owed) = {
            let mut d = fb.dirty.lock().unwrap_or_else(|e| e.into_inner());
            let owed = match report {
                Report::Drop => d.lost.take(),
                Report::Keep => None,
            };
            if d.is_empty() {
                drop(d);
                o.retire(ino);
                return owed.map_or(Ok(()), Err);
            }
            let (ext, mtime) = d.take();
            (ext, mtime, d.failed_on.take(), owed)
        };
        // The record's revision as the commit first read it.
        let mut seen = None;
        let err = match self
            .commit_extents(ino, &ext, mtime, failed_on, &mut seen)
            .await
        {
            Ok(()) => {
                o.retire(ino);
                return owed.map_or(Ok(()), Err);
            }
            Err(Errno::ENOENT) => {
                o.retire(ino);
                return Err(Errno::ENOENT);
            }
            Err(e) => e,
        };
        // Overtaken (another change since the failure kept them) or
        // fenced (the lock they were written under is gone): never
        // committed, whoever asks.
        let refused = err == STALE || err == FENCED;
        if report == Report::Keep && !refused {
            let mut d = fb.dirty.lock().unwrap_or_else(|e| e.into_inner());
            d.restore(ext, mtime);
            let known = || self.cache.known_rev(ino).unwrap_or(0);
            d.failed_on = Some(failed_on.or(seen).unwrap_or_else(known));
            return Err(err);
        }
        let (lo, hi) = extent_span(&ext);
        let bytes: usize = ext.iter().map(|(_, v)| v.len()).sum();
        let why = match err {
            STALE => "the file changed on another client after an earlier failure kept them",
            FENCED => "the lock they were written under is gone (its session lease expired)",
            _ => "their commit failed and the failure was reported",
        };
        crate::log::failure(
            Cause::Dropped,
            format_args!(
                "inode {ino}: {bytes} bytes written in {lo}..{hi} dropped: {why} ({err:?})"
            ),
        );
        // The writer's own cache (a kernel's pages) still shows them.
        self.stale_for_caller(ino);
        let answer = if refused { Errno::EIO } else { err };
        if report == Report::Keep {
            // Owed to the next close or fsync; the caller (a read, a
            // truncate) goes on with the file as committed.
            fb.dirty.lock().unwrap_or_else(|e| e.into_inner()).lost = Some(answer);
            return Ok(());
        }
        o.retire(ino);
        Err(answer)
    }

    /// Flush every inode's buffer; the first error.
    pub(super) async fn flush_all(&self, report: Report) -> Result<()> {
        let Some(o) = self.objects.get() else {
            return Ok(());
        };
        let mut first = Ok(());
        for ino in o.buffered_inodes() {
            if let Err(e) = self.flush_ino(ino, report).await {
                if first.is_ok() && e != Errno::ENOENT {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Upload the extents as one object per chunk they touch, then commit
    /// their slices, [`GROUP`] chunks a transaction.
    /// `base`: the bytes were kept after a failure, when the file's record
    /// was at this revision; they commit only if it still is.
    async fn commit_extents(
        &self,
        ino: Ino,
        ext: &[(u64, Vec<u8>)],
        mtime: Option<Timespec>,
        base: Option<i64>,
        seen: &mut Option<i64>,
    ) -> Result<()> {
        let dl = self.deadline();
        let mut pieces: std::collections::BTreeMap<u64, Vec<(u64, &[u8])>> = Default::default();
        for (off, v) in ext {
            let mut at = 0usize;
            while at < v.len() {
                let abs = off + at as u64;
                let (idx, pos) = (abs / SLICE_CHUNK, abs % SLICE_CHUNK);
                let n = (v.len() - at).min((SLICE_CHUNK - pos) as usize);
                pieces.entry(idx).or_default().push((pos, &v[at..at + n]));
                at += n;
            }
        }
        let ids = self.alloc_slices(dl, pieces.len()).await?;
        let mut uploads = Vec::with_capacity(ids.len());
        let mut lists = Vec::with_capacity(ids.len());
        for ((idx, ps), id) in pieces.iter().zip(ids) {
            let mut obj = Vec::with_capacity(ps.iter().map(|p| p.1.len()).sum());
            let mut list = Vec::with_capacity(ps.len());
            for (pos, b) in ps {
                list.push(Slice {
                    id,
                    pos: *pos,
                    len: b.len() as u64,
                    off: obj.len() as u64,
                });
                obj.extend_from_slice(b);
            }
            uploads.push((id, Bytes::from(obj)));
            lists.push((*idx, list));
        }
        // The state these bytes go over, read while they upload (neither
        // waits for the other: a store that is up uploads while etcd is
        // slow): a failure from here on keeps them against it
        // (`flush_ino`); with a `base`, they go only over that (checked
        // again in the commit's compare). A read that fails leaves the
        // commit to find out.
        let (read, uploaded) =
            futures_util::future::join(self.record_rev(dl, ino), self.upload(uploads)).await;
        if let Ok(Some(mr)) = read {
            *seen = Some(mr);
            if base.is_some_and(|b| b != mr) {
                // (What was uploaded is named by no list: `gc` removes it.)
                return Err(STALE);
            }
        }
        uploaded?;
        // The commits get a deadline of their own from here: one counted
        // from before the upload would fail every flush whose upload
        // takes longer than `timeout` (a slow link, a store still warming
        // up after a restart), again at each retry. `gc` allows for it
        // (its `min_age` covers an upload's time and then the timeout).
        let dl = self.deadline();
        for (g, group) in lists.chunks(GROUP).enumerate() {
            let end = group
                .iter()
                .flat_map(|(idx, l)| l.iter().map(move |s| idx * SLICE_CHUNK + s.end()))
                .max()
                .unwrap_or(0);
            // The base holds for the first group only: the next ones
            // follow this client's own commit of the first.
            let base = if g == 0 { base } else { None };
            if let Err(e) = self.commit_slices(dl, ino, group, end, mtime, base).await {
                if e == Errno::ENOENT {
                    // The file is gone: nothing will reference these.
                    let ids: Vec<u64> = lists[g * GROUP..]
                        .iter()
                        .flat_map(|(_, l)| l.first().map(|s| s.id))
                        .collect();
                    let op = self.garbage_op(dl, ids).await?;
                    self.commit(dl, vec![], vec![op]).await?;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// The revision of `ino`'s record (`None`: it is gone).
    async fn record_rev(&self, dl: Instant, ino: Ino) -> Result<Option<i64>> {
        let (_, rs) = self.read(dl, vec![get(self.keys.inode(ino))]).await?;
        Ok(rec_of(&rs[0])?.map(|(_, mr)| mr))
    }

    /// A list too long to store, rewritten: the bytes from its first
    /// slice's start to its last one's end (holes between as zeros) in
    /// new objects of at most [`BLOCK`] bytes, one slice each. The old
    /// objects are dropped with the list they were in.
    async fn compact(&self, dl: Instant, list: &[Slice]) -> Result<Vec<Slice>> {
        let (Some(first), Some(last)) = (list.first(), list.last()) else {
            return Ok(Vec::new());
        };
        let (lo, hi) = (first.pos, last.end());
        let written = || list.iter().filter(|s| s.id != slices::ZERO);
        let objs = self
            .fetch_objects(written().map(|s| s.id).collect())
            .await?;
        let mut bytes = vec![0u8; (hi - lo) as usize];
        // (Reserved slices are zeros: they become written ones.)
        for s in written() {
            let b = objs.get(&s.id).ok_or(Errno::EIO)?;
            let src = b
                .get(s.off as usize..(s.off + s.len) as usize)
                .ok_or(Errno::EIO)?;
            let at = (s.pos - lo) as usize;
            bytes[at..at + src.len()].copy_from_slice(src);
        }
        let pieces: Vec<&[u8]> = bytes.chunks(BLOCK).collect();
        let ids = self.alloc_slices(dl, pieces.len()).await?;
        let mut out = Vec::with_capacity(pieces.len());
        let mut uploads = Vec::with_capacity(pieces.len());
        let mut pos = lo;
        for (p, id) in pieces.into_iter().zip(ids) {
            out.push(Slice {
                id,
                pos,
                len: p.len() as u64,
                off: 0,
            });
            pos += p.len() as u64;
            uploads.push((id, Bytes::copy_from_slice(p)));
        }
        self.upload(uploads).await?;
        Ok(out)
    }

    /// Put the objects (and on a local directory store, fsync them and
    /// their directories: a commit names only objects that survive a
    /// crash of the host).
    async fn upload(&self, objs: Vec<(u64, Bytes)>) -> Result<()> {
        let o = self.objects()?;
        let synced: Option<Vec<std::path::PathBuf>> = o.local.as_ref().map(|root| {
            objs.iter()
                .map(|(id, _)| root.join(slices::object_path(&o.uuid, *id)))
                .collect()
        });
        let puts = stream::iter(objs.into_iter().map(|(id, b)| {
            let path = Path::from(slices::object_path(&o.uuid, id));
            let store = o.store.clone();
            async move { store.put(&path, b.into()).await.map(|_| ()) }
        }))
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>();
        let limit = self.store_limit();
        let put = async {
            puts.await.map_err(store_err)?;
            if let Some(paths) = synced {
                let done = tokio::task::spawn_blocking(move || fsync_all(&paths)).await;
                let r = done.unwrap_or_else(|e| Err(std::io::Error::other(e)));
                r.map_err(|e| {
                    let n = e.raw_os_error().unwrap_or(libc::EIO);
                    crate::log::failure(Cause::Store, format_args!("object store: fsync: {e}"));
                    if matches!(n, libc::ENOSPC | libc::EROFS | libc::EDQUOT) {
                        Errno(n)
                    } else {
                        Errno::EIO
                    }
                })?;
            }
            Ok(())
        };
        match tokio::time::timeout(limit, put).await {
            Ok(r) => r,
            Err(_) => Err(store_timeout("an upload", limit)),
        }
    }

    /// One transaction: each chunk's new slices put over its list, the
    /// size grown to `end`, the objects no slice names any more recorded
    /// as garbage; recomputed on conflict.
    async fn commit_slices(
        &self,
        dl: Instant,
        ino: Ino,
        group: &[(u64, Vec<Slice>)],
        end: u64,
        mtime: Option<Timespec>,
        base: Option<i64>,
    ) -> Result<()> {
        let ikey = self.keys.inode(ino);
        let mut attempt = 0;
        let mut dl = dl;
        loop {
            // The locks this client holds on the file: the bytes commit
            // only while they are still held (a fence: a holder whose
            // lease expired, and so lost them, commits nothing after).
            let fence = self.held.keys(ino);
            let mut reads = vec![get(ikey.clone())];
            reads.extend(
                group
                    .iter()
                    .map(|(idx, _)| get(self.keys.slices(ino, *idx))),
            );
            reads.extend(fence.iter().map(|k| get(k.clone())));
            let (_, rs) = self.read(dl, reads).await?;
            let (mut rec, mr) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
            regular(rec.kind)?;
            if base.is_some_and(|b| b != mr) {
                return Err(STALE);
            }
            let held = &rs[1 + group.len()..];
            let mut cmps = vec![same(ikey.clone(), mr)];
            for (k, r) in fence.iter().zip(held) {
                if !r.kvs().is_empty() {
                    cmps.push(present(k.clone()));
                } else if self.held.believes(ino, k) {
                    // Gone, and not given back by this client: lost.
                    self.lock_lost(ino, k);
                    return Err(FENCED);
                }
            }
            let mut ops = Vec::with_capacity(group.len() + 2);
            let mut gone = Vec::new();
            let mut pages = 0i64;
            for ((idx, new), r) in group.iter().zip(&rs[1..]) {
                let old = list_of(r)?;
                let mut list = old.clone();
                for s in new {
                    slices::overlay(&mut list, *s);
                }
                if list.len() > MAX_SLICES {
                    list = self.compact(dl, &list).await?;
                    // As after any upload: the commit's time starts now.
                    dl = self.deadline();
                }
                gone.extend(slices::dropped(&old, &list));
                pages += slices::pages(&list) as i64 - slices::pages(&old) as i64;
                ops.push(put(self.keys.slices(ino, *idx), slices::encode(&list)));
            }
            rec.count_pages(pages);
            let now = Timespec::now();
            rec.size = rec.size.max(end);
            rec.mtime = mtime.unwrap_or(now);
            rec.ctime = now;
            ops.push(put(ikey.clone(), rec.encode()));
            if !gone.is_empty() {
                ops.push(self.garbage_op(dl, gone).await?);
            }
            match self.commit(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.cache.record(ino, Some((&rec, rev)), rev);
                    return Ok(());
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }
}

/// Whether a flush's error is returned to a writer (`Drop`: the bytes are
/// dropped once it is) or not (`Keep`: they stay buffered, to be tried
/// again). See [`Inner::flush_ino`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Report {
    Keep,
    Drop,
}

/// A commit refused because the file changed since the failure that kept
/// its bytes (internal to `flush_ino`, answered as EIO).
pub(super) const STALE: Errno = Errno::ESTALE;
/// A commit refused because the lock its bytes were written under is
/// gone (internal to `flush_ino`, answered as EIO).
pub(super) const FENCED: Errno = Errno(libc::ENOLCK);

/// fsync each file and, once each, the directories they are in.
fn fsync_all(paths: &[std::path::PathBuf]) -> std::io::Result<()> {
    let mut dirs = std::collections::BTreeSet::new();
    for p in paths {
        std::fs::File::open(p)?.sync_all()?;
        if let Some(d) = p.parent() {
            dirs.insert(d.to_path_buf());
        }
    }
    for d in dirs {
        std::fs::File::open(d)?.sync_all()?;
    }
    Ok(())
}

/// The range the extents cover, from the first's start to the last's end.
fn extent_span(ext: &[(u64, Vec<u8>)]) -> (u64, u64) {
    let lo = ext.first().map_or(0, |e| e.0);
    let hi = ext.last().map_or(0, |(o, v)| o + v.len() as u64);
    (lo, hi)
}

/// A chunk's list as a get returned it (empty when absent), resolved.
fn list_of(r: &etcd_client::GetResponse) -> Result<Vec<Slice>> {
    match r.kvs().first() {
        Some(kv) => Ok(slices::flatten(&slices::decode(kv.value())?)),
        None => Ok(Vec::new()),
    }
}
