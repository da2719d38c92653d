//! Inode attributes and contents for [`Inner`]: setattr (truncate
//! included), file data kept in fixed-size chunk keys (write, read),
//! directory listing, statfs, and the remote revision check used to
//! revalidate when the watch is not current.

use std::collections::BTreeMap;

use dcache::fs::{StatFs, NAME_MAX};
use dcache::permission;
use dcache::{Attr, Errno, FileType, Ino, Result, SetAttr, SetTime, Timespec};
use etcd_client::{DeleteOptions, GetOptions, GetResponse, TxnOp};

use super::client::{damaged, dir_of, get, get_prefix, put, rec_of, same, Outcome};
use super::{Inner, DEFAULT_QUOTA};
use crate::codec::{decode_u64, prefix_end, Entry, CHUNK, MAX_FILE, MAX_IO};
use crate::slices::MAX_FILE_OBJECTS;

impl Inner {
    pub(super) async fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let dl = self.deadline();
        let objects = self.objects.get().is_some();
        if set.size.is_some_and(|s| s > self.max_file()) {
            return Err(Errno::EFBIG);
        }
        let mut attempt = 0;
        loop {
            let ikey = self.keys.inode(ino);
            let mut reads = vec![get(ikey.clone())];
            if let Some(s) = set.size {
                reads.push(if objects {
                    self.cut_read(ino, s)
                } else {
                    get(self.keys.chunk(ino, s / CHUNK))
                });
            }
            let tallies_at = reads.len();
            reads.push(self.tallies_read(ino));
            let (read_rev, rs) = self.read(dl, reads).await?;
            let (mut rec, mr) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
            let now = Timespec::now();
            let mut ops = Vec::new();
            let mut cmps = vec![same(ikey.clone(), mr)];
            let dir = rec.is_dir();
            // Its times may be set back: fold the tallies in first (in
            // transactions of their own when there are many).
            let t = &rs[tallies_at];
            if dir && !self.fold(ino, &mut rec, t, read_rev, &mut cmps, &mut ops)? {
                self.fold_dir(ino).await?;
                continue;
            }
            if let Some(size) = set.size {
                match rec.kind {
                    FileType::Directory => return Err(Errno::EISDIR),
                    FileType::Regular => {}
                    _ => return Err(Errno::EINVAL),
                }
                if size < rec.size && objects {
                    let cut = self.cut_ops(size, &rs[1])?;
                    rec.count_pages(cut.pages);
                    ops.extend(cut.ops);
                    if !cut.gone.is_empty() {
                        ops.push(self.garbage_op(dl, cut.gone).await?);
                    }
                    if let Some(part) = cut.partial {
                        // More lists past the cut than one transaction
                        // takes: this round drops the highest and leaves
                        // the size at the lowest of them; the next goes on.
                        rec.size = part;
                        rec.mtime = now;
                        rec.ctime = now;
                        ops.push(put(ikey.clone(), rec.encode()));
                        match self.commit(dl, vec![same(ikey, mr)], ops).await? {
                            Outcome::Committed(rev) => {
                                self.cache.record(ino, Some((&rec, rev)), rev)
                            }
                            Outcome::Conflict => {
                                attempt += 1;
                                self.pause(attempt).await;
                            }
                        }
                        continue;
                    }
                } else if size < rec.size {
                    // Drop every chunk past the new end; trim the last one.
                    let keep = size.div_ceil(CHUNK);
                    let from = self.keys.chunk(ino, keep);
                    let to = prefix_end(&self.keys.chunks(ino));
                    ops.push(TxnOp::delete(
                        from,
                        Some(DeleteOptions::new().with_range(to)),
                    ));
                    if size % CHUNK != 0 {
                        if let Some(kv) = rs[1].kvs().first() {
                            let cut = (size % CHUNK) as usize;
                            if kv.value().len() > cut {
                                ops.push(put(
                                    self.keys.chunk(ino, size / CHUNK),
                                    kv.value()[..cut].to_vec(),
                                ));
                            }
                        }
                    }
                }
                if size != rec.size || set.mtime.is_none() {
                    rec.mtime = now;
                }
                rec.size = size;
            }
            if let Some(p) = set.perm {
                rec.perm = p & 0o7777;
            }
            if set.uid.is_some() || set.gid.is_some() {
                rec.uid = set.uid.unwrap_or(rec.uid);
                rec.gid = set.gid.unwrap_or(rec.gid);
                if set.perm.is_none() {
                    if let Some(m) = permission::mode_after_chown(rec.perm_of()) {
                        rec.perm = m;
                    }
                }
            }
            let at = |t: SetTime| match t {
                SetTime::Now => now,
                SetTime::At(t) => t,
            };
            if let Some(t) = set.atime {
                rec.atime = at(t);
            }
            if let Some(t) = set.mtime {
                rec.mtime = at(t);
            }
            rec.ctime = now;
            ops.push(put(ikey.clone(), rec.encode()));
            match self.commit(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    // A directory's tallies are folded into the record.
                    let none = dir.then(Vec::new);
                    self.cache.record_parts(ino, Some((&rec, rev)), none, rev);
                    return Ok(rec.attr(ino));
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }

    /// The largest file: 1 GiB inline (half etcd's quota), 16 TiB in an
    /// object store.
    pub(super) fn max_file(&self) -> u64 {
        if self.objects.get().is_some() {
            MAX_FILE_OBJECTS
        } else {
            MAX_FILE
        }
    }

    fn chunk_range(&self, ino: Ino, first: u64, last: u64) -> TxnOp {
        TxnOp::get(
            self.keys.chunk(ino, first),
            Some(GetOptions::new().with_range(self.keys.chunk(ino, last + 1))),
        )
    }

    fn chunks_by_index(&self, r: &GetResponse) -> BTreeMap<Vec<u8>, Vec<u8>> {
        r.kvs()
            .iter()
            .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
            .collect()
    }

    /// Write `data` at `off`, or with `append` at the end of the file as
    /// committed (the offset the caller had is ignored: another client may
    /// have appended since); the bytes written and where.
    pub(super) async fn write(
        &self,
        ino: Ino,
        mut off: u64,
        append: bool,
        data: &[u8],
    ) -> Result<(usize, u64)> {
        if data.is_empty() {
            return Ok((0, off));
        }
        let whole = data;
        let dl = self.deadline();
        let mut attempt = 0;
        loop {
            if off >= MAX_FILE {
                return Err(Errno::EFBIG);
            }
            let len = whole.len().min(MAX_IO).min((MAX_FILE - off) as usize);
            let data = &whole[..len];
            let end = off + len as u64;
            let first = off / CHUNK;
            let last = (end - 1) / CHUNK;
            let ikey = self.keys.inode(ino);
            let (_, rs) = self
                .read(
                    dl,
                    vec![get(ikey.clone()), self.chunk_range(ino, first, last)],
                )
                .await?;
            let (mut rec, mr) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
            match rec.kind {
                FileType::Regular => {}
                FileType::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
            if append && rec.size != off {
                // The end moved: read the chunks there (the compare on
                // the record keeps the end from moving again unseen).
                off = rec.size;
                continue;
            }
            let old = self.chunks_by_index(&rs[1]);
            let mut ops = Vec::new();
            for idx in first..=last {
                let key = self.keys.chunk(ino, idx);
                let cstart = idx * CHUNK;
                let mut buf = old.get(&key).cloned().unwrap_or_default();
                // Bytes past the old end of file read as zeros.
                let valid = rec.size.saturating_sub(cstart).min(CHUNK) as usize;
                buf.truncate(valid);
                let lo = off.max(cstart) - cstart;
                let hi = end.min(cstart + CHUNK) - cstart;
                if buf.len() < hi as usize {
                    buf.resize(hi as usize, 0);
                }
                let src = (cstart + lo - off) as usize..(cstart + hi - off) as usize;
                buf[lo as usize..hi as usize].copy_from_slice(&data[src]);
                ops.push(put(key, buf));
            }
            let now = Timespec::now();
            rec.size = rec.size.max(end);
            rec.mtime = now;
            rec.ctime = now;
            ops.push(put(ikey.clone(), rec.encode()));
            match self.commit(dl, vec![same(ikey, mr)], ops).await? {
                Outcome::Committed(rev) => {
                    self.cache.record(ino, Some((&rec, rev)), rev);
                    return Ok((len, off));
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }

    pub(super) async fn read_data(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
        let want = buf.len().min(MAX_IO);
        if want == 0 {
            return Ok(0);
        }
        let dl = self.deadline();
        let first = off / CHUNK;
        let last = (off.saturating_add(want as u64) - 1) / CHUNK;
        let (_, rs) = self
            .read(
                dl,
                vec![
                    get(self.keys.inode(ino)),
                    self.chunk_range(ino, first, last),
                ],
            )
            .await?;
        let (rec, _) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
        match rec.kind {
            FileType::Regular => {}
            FileType::Directory => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        if off >= rec.size {
            return Ok(0);
        }
        let n = (rec.size - off).min(want as u64) as usize;
        let chunks = self.chunks_by_index(&rs[1]);
        let out = &mut buf[..n];
        out.fill(0);
        for idx in first..=last {
            let Some(c) = chunks.get(&self.keys.chunk(ino, idx)) else {
                continue;
            };
            let cstart = idx * CHUNK;
            for (i, b) in c.iter().enumerate() {
                let pos = cstart + i as u64;
                if pos >= off && pos < off + n as u64 {
                    out[(pos - off) as usize] = *b;
                }
            }
        }
        Ok(n)
    }

    pub(super) async fn readdir(
        &self,
        dir: Ino,
    ) -> Result<(Ino, Vec<(u64, Ino, FileType, Vec<u8>)>)> {
        let dl = self.deadline();
        let (_, rs) = self
            .read(
                dl,
                vec![
                    get(self.keys.inode(dir)),
                    get(self.keys.parent(dir)),
                    get_prefix(self.keys.entries(dir)),
                ],
            )
            .await?;
        dir_of(&rs[0])?;
        // A damaged record is its own object's error, logged with its
        // key (`client::damaged`): a parent link that does not decode
        // lists `..` as the directory itself, an entry that does not is
        // left out (looking its name up answers EIO), and the rest list.
        let parent = match rs[1].kvs().first() {
            Some(kv) => damaged(kv.key(), decode_u64(kv.value())).unwrap_or(dir),
            None => dir,
        };
        let plen = self.keys.entries(dir).len();
        let mut out = Vec::with_capacity(rs[2].kvs().len());
        for kv in rs[2].kvs() {
            let Ok(e) = damaged(kv.key(), Entry::decode(kv.value())) else {
                continue;
            };
            out.push((e.slot + 3, e.ino, e.kind, kv.key()[plen..].to_vec()));
        }
        out.sort_by_key(|e| e.0);
        Ok((parent, out))
    }

    pub(super) async fn statfs(&self) -> Result<StatFs> {
        let dl = self.deadline();
        let (_, rs) = self
            .read(
                dl,
                vec![TxnOp::get(
                    self.keys.inode_prefix(),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )],
            )
            .await?;
        let files = rs[0].count().max(0) as u64;
        let mut m = self.client.maintenance_client();
        let used = match tokio::time::timeout(self.attempt_limit(dl)?, m.status()).await {
            Ok(Ok(s)) => s.db_size().max(0) as u64,
            _ => 0,
        };
        let bsize = 4096u64;
        // An object store reports no capacity: its volumes show the
        // largest file as free space; inline ones etcd's quota.
        let (blocks, bfree) = if self.objects.get().is_some() {
            let b = MAX_FILE_OBJECTS / bsize;
            (b, b)
        } else {
            let b = DEFAULT_QUOTA / bsize;
            (b, b.saturating_sub(used / bsize))
        };
        Ok(StatFs {
            blocks,
            bfree,
            bavail: bfree,
            files,
            ffree: u64::MAX - files,
            bsize: bsize as u32,
            namelen: NAME_MAX as u32,
            frsize: bsize as u32,
        })
    }
}
