//! Namespace transactions of [`Inner`]: lookup, create (every kind),
//! unlink/rmdir, link and rename, each one etcd transaction guarded by
//! compares on the records it read, recomputed on conflict. A directory
//! whose names change is compared, not written: its size, links and
//! times change in this client's tally of it (`crate::tally`).

use std::collections::BTreeMap;
use std::time::Instant;

use dcache::permission;
use dcache::{Attr, Ctx, Errno, FileType, Ino, RenameFlags, Result, Timespec};
use etcd_client::{Compare, GetOptions, TxnOp};

use super::client::{
    absent, check_name, delete, delete_prefix, dir_of, entry_of, get, put, rec_of, same, Outcome,
};
use super::tallies::{tallies_of, SLOT_BASE};
use super::{Inner, DIRENT};
use crate::codec::{decode_u64, Entry, Rec, LINK_MAX, ROOT_INO};
use crate::tally::FOLD_AT;

impl Inner {
    pub(super) async fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        let dl = self.deadline();
        loop {
            let (rev, rs) = self
                .read(
                    dl,
                    vec![
                        get(self.keys.inode(dir)),
                        get(self.keys.entry(dir, name)),
                        self.tallies_read(dir),
                    ],
                )
                .await?;
            let (drec, dmr) = dir_of(&rs[0])?;
            let tallies = tallies_of(&rs[2])?;
            let many = tallies.len() > FOLD_AT;
            self.cache
                .record_parts(dir, Some((&drec, dmr)), Some(tallies), rev);
            if many {
                // Best effort: the lookup's answer stands either way.
                let _ = self.fold_dir(dir).await;
            }
            let Some((e, _)) = entry_of(&rs[1])? else {
                return Ok(None);
            };
            if let Some(a) = self.cache.attr(e.ino) {
                return Ok(Some(a));
            }
            match self.fetch(dl, e.ino).await {
                Ok(rec) => return Ok(Some(rec.attr(e.ino))),
                // Unlinked between the two reads: look again.
                Err(Errno::ENOENT) => continue,
                Err(x) => return Err(x),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn make(
        &self,
        dir: Ino,
        name: &[u8],
        kind: FileType,
        perm: u16,
        rdev: u32,
        target: &[u8],
        ctx: Ctx,
    ) -> Result<Attr> {
        check_name(name)?;
        let dl = self.deadline();
        let ino = self.alloc_ino(dl).await?;
        let mut attempt = 0;
        let dkey = self.keys.inode(dir);
        let ekey = self.keys.entry(dir, name);
        let lane = self.lanes.take();
        let tkey = self.tally_key(dir, &lane);
        let reads = || vec![get(dkey.clone()), get(ekey.clone()), get(tkey.clone())];
        // What a conflict returned: the same reads, at the revision that
        // failed the compare (no second round trip to read them).
        let mut fresh = None;
        loop {
            let rs = match fresh.take() {
                Some((_, rs)) => rs,
                None => self.read(dl, reads()).await?.1,
            };
            let (drec, dmr) = dir_of(&rs[0])?;
            if drec.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            if !rs[1].kvs().is_empty() {
                return Err(Errno::EEXIST);
            }
            let mut change = self.dir_change(dir, tkey.clone(), &rs[2])?;
            let is_dir = kind == FileType::Directory;
            // What this client's lane counted on top of the record (other
            // clients' subdirectories can only make it more).
            let links = drec.nlink as i64 + change.read.map_or(0, |t| t.0.nlink);
            if is_dir && links >= LINK_MAX as i64 {
                return Err(Errno::EMLINK);
            }
            let (perm, gid) = permission::inode_init_owner(drec.perm_of(), ctx.gid, perm, is_dir);
            let mut rec = Rec::new(kind, perm, ctx.uid, gid);
            rec.rdev = rdev;
            rec.target = target.to_vec();
            if kind == FileType::Regular && self.keeps_unlinked() {
                rec.alloc = 1; // its pages are counted from the start
            }
            rec.size = if is_dir {
                2 * DIRENT
            } else {
                target.len() as u64
            };
            let now = rec.ctime;
            change.size = DIRENT as i64;
            change.nlink = is_dir as i64;
            let ikey = self.keys.inode(ino);
            let entry = Entry {
                ino,
                kind,
                slot: SLOT_BASE.saturating_add(ino),
            };
            let mut cmps = vec![
                same(dkey.clone(), dmr),
                absent(ekey.clone()),
                absent(ikey.clone()),
            ];
            let mut ops = vec![put(ekey.clone(), entry.encode()), put(ikey, rec.encode())];
            let tallies = self.tally_ops(std::slice::from_ref(&change), now, &mut cmps, &mut ops);
            if is_dir {
                ops.push(put(self.keys.parent(ino), dir.to_le_bytes().to_vec()));
            }
            match self.commit_mirrored_or_read(dl, cmps, ops, reads()).await? {
                (Outcome::Committed(rev), _) => {
                    self.tallies_committed(rev, tallies);
                    // A new directory has no tallies yet.
                    let none = is_dir.then(Vec::new);
                    self.cache.record_parts(ino, Some((&rec, rev)), none, rev);
                    return Ok(rec.attr(ino));
                }
                (Outcome::Conflict, read) => {
                    attempt += 1;
                    // With the state that beat it in hand, try again at
                    // once (somebody else's create went through: progress);
                    // back off only after repeated losses, or without it.
                    if read.is_none() || attempt > 3 {
                        self.pause(attempt).await;
                    }
                    fresh = read;
                }
            }
        }
    }

    /// unlink (`dir_op` false) or rmdir (true).
    pub(super) async fn remove(&self, dir: Ino, name: &[u8], dir_op: bool) -> Result<()> {
        check_name(name)?;
        let dl = self.deadline();
        let mut attempt = 0;
        let lane = self.lanes.take();
        loop {
            let dkey = self.keys.inode(dir);
            let ekey = self.keys.entry(dir, name);
            let tkey = self.tally_key(dir, &lane);
            let (_, rs) = self
                .read(
                    dl,
                    vec![get(dkey.clone()), get(ekey.clone()), get(tkey.clone())],
                )
                .await?;
            let (_, dmr) = dir_of(&rs[0])?;
            let (e, emr) = entry_of(&rs[1])?.ok_or(Errno::ENOENT)?;
            let mut change = self.dir_change(dir, tkey, &rs[2])?;
            let ckey = self.keys.inode(e.ino);
            let mut reads = vec![get(ckey.clone())];
            if dir_op {
                reads.push(TxnOp::get(
                    self.keys.entries(e.ino),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_keys_only()
                            .with_limit(1),
                    ),
                ));
            }
            let (_, rs2) = self.read(dl, reads).await?;
            let Some((mut crec, cmr)) = rec_of(&rs2[0])? else {
                // The entry changed under us: read again.
                attempt += 1;
                self.pause(attempt).await;
                continue;
            };
            if dir_op && !crec.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            if !dir_op && crec.is_dir() {
                return Err(Errno::EISDIR);
            }
            if dir_op && !rs2[1].kvs().is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
            let now = Timespec::now();
            let mut recs = BTreeMap::new();
            change.size = -(DIRENT as i64);
            change.nlink = -(dir_op as i64);
            let mut cmps = vec![
                same(dkey.clone(), dmr),
                same(ekey.clone(), emr),
                same(ckey.clone(), cmr),
            ];
            let mut ops = vec![delete(ekey)];
            let tallies = self.tally_ops(std::slice::from_ref(&change), now, &mut cmps, &mut ops);
            let mut deleted = Vec::new();
            if !dir_op && crec.nlink <= 1 && self.keeps_unlinked() {
                // Kept (nlink 0) for the descriptors still open on any
                // client, until the collector reclaims it (`opens`).
                crec.nlink = 0;
                crec.ctime = now;
                ops.push(put(ckey, crec.encode()));
                ops.push(self.drop_data(e.ino));
            } else if dir_op || crec.nlink <= 1 {
                ops.push(delete(ckey));
                if dir_op {
                    ops.push(delete(self.keys.parent(e.ino)));
                    // Empty still at commit: its creates compare its
                    // record no more than they write it.
                    self.removed_dir(e.ino, &mut cmps, &mut ops);
                } else {
                    ops.push(self.drop_data(e.ino));
                }
                deleted.push(e.ino);
            } else {
                crec.nlink -= 1;
                crec.ctime = now;
                ops.push(put(ckey, crec.encode()));
            }
            recs.insert(e.ino, (crec, cmr));
            match self.commit_mirrored(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.committed(rev, &recs, &deleted);
                    self.tallies_committed(rev, tallies);
                    return Ok(());
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }

    /// `O_TMPFILE` in `dir` (object-store volumes): a regular file with no
    /// name, kept (nlink 0) as an unlinked open file is: its dead record
    /// is written with it, so the collector reclaims it after its last
    /// close (`opens`). Without `O_EXCL` it is also marked linkable.
    pub(super) async fn tmpfile(&self, dir: Ino, perm: u16, flags: i32, ctx: Ctx) -> Result<Attr> {
        let dl = self.deadline();
        let ino = self.alloc_ino(dl).await?;
        let dkey = self.keys.inode(dir);
        let mut attempt = 0;
        loop {
            let (_, rs) = self.read(dl, vec![get(dkey.clone())]).await?;
            let (drec, dmr) = dir_of(&rs[0])?;
            if drec.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            let (perm, gid) = permission::inode_init_owner(drec.perm_of(), ctx.gid, perm, false);
            let mut rec = Rec::new(FileType::Regular, perm, ctx.uid, gid);
            rec.nlink = 0;
            rec.alloc = 1;
            let ikey = self.keys.inode(ino);
            let cmps = vec![same(dkey.clone(), dmr), absent(ikey.clone())];
            let mut ops = vec![put(ikey, rec.encode()), self.drop_data(ino)];
            if flags & libc::O_EXCL == 0 {
                ops.push(put(self.keys.linkable(ino), Vec::new()));
            }
            match self.commit(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.cache.record(ino, Some((&rec, rev)), rev);
                    return Ok(rec.attr(ino));
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }

    pub(super) async fn link(&self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        check_name(newname)?;
        let dl = self.deadline();
        let mut attempt = 0;
        let lane = self.lanes.take();
        // The new name's readdir slot: a number no other entry has.
        let slot = SLOT_BASE.saturating_add(self.alloc_ino(dl).await?);
        loop {
            let ikey = self.keys.inode(ino);
            let dkey = self.keys.inode(newdir);
            let ekey = self.keys.entry(newdir, newname);
            let tkey = self.tally_key(newdir, &lane);
            let lkey = self.keys.linkable(ino);
            let (_, rs) = self
                .read(
                    dl,
                    vec![
                        get(ikey.clone()),
                        get(dkey.clone()),
                        get(ekey.clone()),
                        get(tkey.clone()),
                        get(lkey.clone()),
                    ],
                )
                .await?;
            let (mut rec, imr) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
            let (drec, dmr) = dir_of(&rs[1])?;
            if rec.is_dir() {
                return Err(Errno::EPERM);
            }
            // An unlinked inode gets no name back, unless it is an
            // O_TMPFILE one made without O_EXCL (as on Linux).
            let linkable = rs[4].kvs().first().map(|kv| kv.mod_revision());
            if (rec.nlink == 0 && linkable.is_none()) || drec.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            if !rs[2].kvs().is_empty() {
                return Err(Errno::EEXIST);
            }
            if rec.nlink >= LINK_MAX {
                return Err(Errno::EMLINK);
            }
            let mut change = self.dir_change(newdir, tkey, &rs[3])?;
            change.size = DIRENT as i64;
            let now = Timespec::now();
            rec.nlink += 1;
            rec.ctime = now;
            let entry = Entry {
                ino,
                kind: rec.kind,
                slot,
            };
            let mut cmps = vec![
                same(ikey.clone(), imr),
                same(dkey.clone(), dmr),
                absent(ekey.clone()),
            ];
            let mut ops = vec![put(ikey, rec.encode()), put(ekey, entry.encode())];
            if let (1, Some(lmr)) = (rec.nlink, linkable) {
                // The tmpfile's first name: no longer linkable, and no
                // longer the collector's once closed.
                cmps.push(same(lkey.clone(), lmr));
                ops.push(delete(lkey));
                ops.push(delete(self.keys.dead_inode(ino)));
            }
            let tallies = self.tally_ops(std::slice::from_ref(&change), now, &mut cmps, &mut ops);
            match self.commit_mirrored(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.cache.record(ino, Some((&rec, rev)), rev);
                    self.tallies_committed(rev, tallies);
                    return Ok(rec.attr(ino));
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }

    /// EINVAL if directory `d` is `start` or one of its ancestors; the
    /// parent pointers walked are added to `cmps` so the answer holds at
    /// commit.
    async fn check_not_ancestor(
        &self,
        dl: Instant,
        d: Ino,
        start: Ino,
        cmps: &mut Vec<Compare>,
    ) -> Result<()> {
        let mut cur = start;
        for _ in 0..4096 {
            if cur == d {
                return Err(Errno::EINVAL);
            }
            if cur == ROOT_INO {
                return Ok(());
            }
            let pkey = self.keys.parent(cur);
            let (_, rs) = self.read(dl, vec![get(pkey.clone())]).await?;
            let kv = rs[0].kvs().first().ok_or(Errno::ENOENT)?;
            cmps.push(same(pkey, kv.mod_revision()));
            cur = decode_u64(kv.value())?;
        }
        Err(Errno::ELOOP)
    }

    pub(super) async fn rename(
        &self,
        od: Ino,
        on: &[u8],
        nd: Ino,
        nn: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        check_name(on)?;
        check_name(nn)?;
        if flags.noreplace && flags.exchange {
            return Err(Errno::EINVAL);
        }
        let dl = self.deadline();
        let mut attempt = 0;
        let lane = self.lanes.take();
        // The moved name's readdir slot: a number no other entry has.
        let slot = SLOT_BASE.saturating_add(self.alloc_ino(dl).await?);
        'retry: loop {
            if attempt > 0 {
                self.pause(attempt).await;
            }
            attempt += 1;
            let k = &self.keys;
            let mut reads = vec![
                get(k.inode(od)),
                get(k.inode(nd)),
                get(k.entry(od, on)),
                get(k.entry(nd, nn)),
                get(self.tally_key(od, &lane)),
            ];
            if nd != od {
                reads.push(get(self.tally_key(nd, &lane)));
            }
            let (_, rs) = self.read(dl, reads).await?;
            let (odrec, odmr) = dir_of(&rs[0])?;
            let (ndrec, ndmr) = dir_of(&rs[1])?;
            if odrec.nlink == 0 || ndrec.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            let (se, semr) = entry_of(&rs[2])?.ok_or(Errno::ENOENT)?;
            let te = entry_of(&rs[3])?;
            if flags.exchange && te.is_none() {
                return Err(Errno::ENOENT);
            }
            if let Some((t, _)) = te {
                if t.ino == se.ino {
                    // Two names of one inode: rename does nothing.
                    return Ok(());
                }
                if flags.noreplace {
                    return Err(Errno::EEXIST);
                }
            }
            // This operation's change to each directory: [od] or [od, nd].
            let mut changes = vec![self.dir_change(od, self.tally_key(od, &lane), &rs[4])?];
            if nd != od {
                changes.push(self.dir_change(nd, self.tally_key(nd, &lane), &rs[5])?);
            }
            let mut reads = vec![get(k.inode(se.ino))];
            if let Some((t, _)) = te {
                reads.push(get(k.inode(t.ino)));
                reads.push(TxnOp::get(
                    k.entries(t.ino),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_keys_only()
                            .with_limit(1),
                    ),
                ));
            }
            let (_, rs2) = self.read(dl, reads).await?;
            let Some((srec, smr)) = rec_of(&rs2[0])? else {
                continue 'retry;
            };
            let tgt = match te {
                Some((t, tmr)) => {
                    let Some((trec, trmr)) = rec_of(&rs2[1])? else {
                        continue 'retry;
                    };
                    Some((t, tmr, trec, trmr, !rs2[2].kvs().is_empty()))
                }
                None => None,
            };
            if !flags.exchange {
                if let Some((_, _, trec, _, nonempty)) = &tgt {
                    if srec.is_dir() && !trec.is_dir() {
                        return Err(Errno::ENOTDIR);
                    }
                    if !srec.is_dir() && trec.is_dir() {
                        return Err(Errno::EISDIR);
                    }
                    if trec.is_dir() && *nonempty {
                        return Err(Errno::ENOTEMPTY);
                    }
                }
            }
            let mut cmps = Vec::new();
            if od != nd || (se.kind == FileType::Directory && tgt.is_some()) {
                if srec.is_dir() {
                    self.check_not_ancestor(dl, se.ino, nd, &mut cmps).await?;
                }
                if let Some((t, _, trec, _, _)) = &tgt {
                    if flags.exchange && trec.is_dir() {
                        self.check_not_ancestor(dl, t.ino, od, &mut cmps).await?;
                    }
                }
            }
            // The directories are compared, and changed through tallies;
            // the records written are the moved and replaced inodes'.
            cmps.push(same(k.inode(od), odmr));
            if nd != od {
                cmps.push(same(k.inode(nd), ndmr));
            }
            let now = Timespec::now();
            let mut recs: BTreeMap<Ino, (Rec, i64)> = BTreeMap::new();
            recs.insert(se.ino, (srec.clone(), smr));
            if let Some((t, _, trec, trmr, _)) = &tgt {
                recs.entry(t.ino).or_insert((trec.clone(), *trmr));
            }
            let mut deleted: Vec<Ino> = Vec::new();
            let mut ops = Vec::new();
            cmps.push(same(k.entry(od, on), semr));
            match &tgt {
                Some((_, tmr, _, _, _)) => cmps.push(same(k.entry(nd, nn), *tmr)),
                None => cmps.push(absent(k.entry(nd, nn))),
            }
            let src_dir = srec.is_dir();
            // (size, links) added to directory `d`.
            let mut add = |d: Ino, size: i64, nlink: i64| {
                if let Some(c) = changes.iter_mut().find(|c| c.dir == d) {
                    c.size += size;
                    c.nlink += nlink;
                }
            };
            macro_rules! rec {
                ($ino:expr) => {
                    &mut recs.get_mut(&$ino).ok_or(Errno::EIO)?.0
                };
            }
            if flags.exchange {
                let Some((t, _, trec, _, _)) = &tgt else {
                    return Err(Errno::ENOENT);
                };
                ops.push(put(
                    k.entry(od, on),
                    Entry {
                        ino: t.ino,
                        kind: t.kind,
                        slot: se.slot,
                    }
                    .encode(),
                ));
                ops.push(put(
                    k.entry(nd, nn),
                    Entry {
                        ino: se.ino,
                        kind: se.kind,
                        slot: t.slot,
                    }
                    .encode(),
                ));
                if od != nd {
                    if src_dir {
                        add(od, 0, -1);
                        add(nd, 0, 1);
                        ops.push(put(k.parent(se.ino), nd.to_le_bytes().to_vec()));
                    }
                    if trec.is_dir() {
                        add(nd, 0, -1);
                        add(od, 0, 1);
                        ops.push(put(k.parent(t.ino), od.to_le_bytes().to_vec()));
                    }
                }
                rec!(t.ino).ctime = now;
            } else {
                ops.push(delete(k.entry(od, on)));
                // od loses a name; nd gains one unless it replaces one.
                add(od, -(DIRENT as i64), 0);
                if tgt.is_none() {
                    add(nd, DIRENT as i64, 0);
                }
                ops.push(put(
                    k.entry(nd, nn),
                    Entry {
                        ino: se.ino,
                        kind: se.kind,
                        slot,
                    }
                    .encode(),
                ));
                if src_dir && od != nd {
                    add(od, 0, -1);
                    add(nd, 0, 1);
                    ops.push(put(k.parent(se.ino), nd.to_le_bytes().to_vec()));
                }
                if let Some((t, _, trec, _, _)) = &tgt {
                    if trec.is_dir() {
                        // The replaced directory's ".." no longer links nd.
                        add(nd, 0, -1);
                        deleted.push(t.ino);
                        ops.push(delete(k.parent(t.ino)));
                        self.removed_dir(t.ino, &mut cmps, &mut ops);
                    } else {
                        let r = rec!(t.ino);
                        r.nlink = r.nlink.saturating_sub(1);
                        r.ctime = now;
                        if r.nlink == 0 {
                            // Kept (nlink 0) where open files are (see unlink).
                            if !self.keeps_unlinked() {
                                deleted.push(t.ino);
                            }
                            ops.push(self.drop_data(t.ino));
                        }
                    }
                }
            }
            rec!(se.ino).ctime = now;
            for (ino, (rec, mr)) in &recs {
                cmps.push(same(k.inode(*ino), *mr));
                if deleted.contains(ino) {
                    ops.push(delete(k.inode(*ino)));
                } else {
                    ops.push(put(k.inode(*ino), rec.encode()));
                }
            }
            let tallies = self.tally_ops(&changes, now, &mut cmps, &mut ops);
            match self.commit_mirrored(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.committed(rev, &recs, &deleted);
                    self.tallies_committed(rev, tallies);
                    return Ok(());
                }
                Outcome::Conflict => continue 'retry,
            }
        }
    }
}

impl Inner {
    /// The op that frees a removed file's data: inline, its chunk keys;
    /// in an object store, a record `P/a/i/<ino>` that the collector
    /// finds after the grace period (the lists stay until then: the
    /// number is never used again).
    fn drop_data(&self, ino: Ino) -> TxnOp {
        if self.objects.get().is_some() {
            put(
                self.keys.dead_inode(ino),
                crate::slices::now_ms().to_le_bytes().to_vec(),
            )
        } else {
            delete_prefix(self.keys.chunks(ino))
        }
    }
}
