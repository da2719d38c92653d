//! `EtcdFs`: the [`FileSystem`] over etcd.
//!
//! Every operation that changes more than one key is one etcd transaction
//! whose compares (`mod_revision` of every record it read, `version == 0`
//! for every key it expects absent) make it apply only to the state it was
//! computed from; on a failed compare it reads again and recomputes, so two
//! clients racing on one name get the outcomes one machine would give.
//!
//! Each transaction also writes the client's marker key `P/o/<client>` with
//! a fresh sequence number: when a response is lost (a member died after
//! the commit), reading the marker tells whether the transaction applied,
//! so a retry never reports EEXIST for a create that succeeded.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dcache::fs::{StatFs, Validity, NAME_MAX};
use dcache::permission;
use dcache::{
    Attr, Ctx, DirEntry, Errno, FileSystem, FileType, Ino, RenameFlags, Result, SetAttr, SetTime,
    Timespec,
};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, GetResponse,
    Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::runtime::Runtime;

use crate::cache::{Cache, CacheStats};
use crate::codec::{
    decode_u64, prefix_end, Entry, Keys, Rec, CHUNK, LINK_MAX, MAX_FILE, MAX_IO, ROOT_INO,
};
use crate::spec::{parse_spec, Options, Spec};

/// Inode numbers a client reserves at a time.
const INO_BATCH: u64 = 64;
/// etcd's default backend quota (`--quota-backend-bytes`), reported by
/// statfs.
pub const DEFAULT_QUOTA: u64 = 2 << 30;
/// A directory's size grows by this per entry, from two (`.` and `..`) in
/// an empty one, as on tmpfs (its `BOGO_DIRENT_SIZE`).
const DIRENT: u64 = 20;

/// A namespace held in etcd, served to a [`dcache::Vfs`].
pub struct EtcdFs {
    inner: Arc<Inner>,
    rt: Option<Runtime>,
}

struct Inner {
    client: Client,
    keys: Keys,
    opts: Options,
    client_id: String,
    cache: Cache,
    op_seq: AtomicU64,
    pool: Mutex<(u64, u64)>,
    rng: AtomicU64,
    /// Set once a Vfs attaches: where the watch sends the changes other
    /// clients made, for the thread that reports them to the Vfs.
    inval: OnceLock<std::sync::mpsc::Sender<Change>>,
    /// The invalidator of the Vfs attached last, which that thread uses.
    attached: Arc<Mutex<Option<dcache::Invalidator>>>,
}

/// A change another client made, as the watch saw it.
enum Change {
    Entry(Ino, Vec<u8>),
    Inode(Ino),
}

/// How a failed request is treated.
enum Fail {
    /// The cluster may answer later (no leader, member down): retry until
    /// the deadline.
    Transient,
    Fatal(Errno),
}

fn classify(e: &etcd_client::Error) -> Fail {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => {
            let m = s.message();
            if m.contains("database space exceeded") {
                return Fail::Fatal(Errno::ENOSPC);
            }
            if m.contains("request is too large")
                || m.contains("too many operations")
                || m.contains("larger than max")
            {
                return Fail::Fatal(Errno::EFBIG);
            }
            use grpc::*;
            match s.code() as i32 {
                UNAVAILABLE | DEADLINE_EXCEEDED | CANCELLED | UNKNOWN | ABORTED | INTERNAL => {
                    Fail::Transient
                }
                _ => Fail::Fatal(Errno::EIO),
            }
        }
        E::TransportError(_) | E::IoError(_) => Fail::Transient,
        _ => Fail::Fatal(Errno::EIO),
    }
}

/// gRPC status codes (tonic's `Code` as i32).
mod grpc {
    pub const CANCELLED: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const ABORTED: i32 = 10;
    pub const INTERNAL: i32 = 13;
    pub const UNAVAILABLE: i32 = 14;
}

enum Outcome {
    Committed(i64),
    Conflict,
}

fn get(key: Vec<u8>) -> TxnOp {
    TxnOp::get(key, None)
}

fn get_prefix(prefix: Vec<u8>) -> TxnOp {
    TxnOp::get(prefix, Some(GetOptions::new().with_prefix()))
}

fn same(key: Vec<u8>, mod_rev: i64) -> Compare {
    Compare::mod_revision(key, CompareOp::Equal, mod_rev)
}

fn absent(key: Vec<u8>) -> Compare {
    Compare::version(key, CompareOp::Equal, 0)
}

fn put(key: Vec<u8>, value: Vec<u8>) -> TxnOp {
    TxnOp::put(key, value, None)
}

fn delete(key: Vec<u8>) -> TxnOp {
    TxnOp::delete(key, None)
}

fn delete_prefix(prefix: Vec<u8>) -> TxnOp {
    TxnOp::delete(prefix, Some(DeleteOptions::new().with_prefix()))
}

fn rec_of(r: &GetResponse) -> Result<Option<(Rec, i64)>> {
    match r.kvs().first() {
        Some(kv) => Ok(Some((Rec::decode(kv.value())?, kv.mod_revision()))),
        None => Ok(None),
    }
}

fn entry_of(r: &GetResponse) -> Result<Option<(Entry, i64)>> {
    match r.kvs().first() {
        Some(kv) => Ok(Some((Entry::decode(kv.value())?, kv.mod_revision()))),
        None => Ok(None),
    }
}

/// A directory record, or ENOENT / ENOTDIR. A removed directory (nlink 0
/// can only be seen mid-removal) is ENOENT.
fn dir_of(r: &GetResponse) -> Result<(Rec, i64)> {
    let (rec, mr) = rec_of(r)?.ok_or(Errno::ENOENT)?;
    if !rec.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    Ok((rec, mr))
}

fn touch_dir(rec: &mut Rec, now: Timespec) {
    rec.mtime = now;
    rec.ctime = now;
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(Errno::EINVAL);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

impl Inner {
    fn deadline(&self) -> Instant {
        Instant::now() + self.opts.timeout
    }

    /// Per-attempt limit: a dead member costs at most this before the
    /// request is retried (on another endpoint).
    fn attempt_limit(&self, dl: Instant) -> Result<Duration> {
        let rem = dl.saturating_duration_since(Instant::now());
        if rem.is_zero() {
            return Err(Errno::EIO);
        }
        Ok(rem.min((self.opts.timeout / 4).max(Duration::from_millis(500))))
    }

    async fn pause(&self, attempt: u32) {
        // xorshift: cheap jitter so racing clients do not retry in step.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        let cap = 1u64 << attempt.min(5);
        tokio::time::sleep(Duration::from_micros(200 + x % (cap * 1000))).await;
    }

    /// After a transient failure: retry at once (the balancer likely
    /// picks another member), then back off to at most 50 ms.
    async fn transient_pause(&self, attempt: u32) {
        self.cache
            .stats
            .transient_errors
            .fetch_add(1, Ordering::Relaxed);
        if attempt > 1 {
            let ms = (1u64 << attempt.min(6)).min(50);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }

    /// Run the gets in `ops` as one read-only transaction (one revision);
    /// linearizable. Returns the revision and one response per op.
    async fn read(&self, dl: Instant, ops: Vec<TxnOp>) -> Result<(i64, Vec<GetResponse>)> {
        let txn = Txn::new().and_then(ops);
        let mut attempt = 0;
        loop {
            let lim = self.attempt_limit(dl)?;
            let mut kv = self.client.kv_client();
            match tokio::time::timeout(lim, kv.txn(txn.clone())).await {
                Ok(Ok(resp)) => {
                    let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                    self.cache.note_read(rev);
                    let gets = resp
                        .op_responses()
                        .into_iter()
                        .map(|r| match r {
                            TxnOpResponse::Get(g) => Ok(g),
                            _ => Err(Errno::EIO),
                        })
                        .collect::<Result<Vec<_>>>()?;
                    return Ok((rev, gets));
                }
                Ok(Err(e)) => match classify(&e) {
                    Fail::Transient => {}
                    Fail::Fatal(x) => return Err(x),
                },
                Err(_) => {}
            }
            attempt += 1;
            self.transient_pause(attempt).await;
        }
    }

    /// Commit `ops` if every compare holds. A lost response is resolved
    /// by reading this client's marker key; out of time: EIO (the outcome
    /// is then unknown, as for a local disk that failed mid-write).
    async fn commit(
        &self,
        dl: Instant,
        cmps: Vec<Compare>,
        mut ops: Vec<TxnOp>,
    ) -> Result<Outcome> {
        let seq = self.op_seq.fetch_add(1, Ordering::Relaxed).to_le_bytes();
        let marker = self.keys.op_marker(&self.client_id);
        ops.push(put(marker.clone(), seq.to_vec()));
        let txn = Txn::new().when(cmps).and_then(ops);
        let mut attempt = 0;
        let mut uncertain = false;
        loop {
            let lim = self.attempt_limit(dl)?;
            let mut kv = self.client.kv_client();
            if uncertain {
                match tokio::time::timeout(lim, kv.get(marker.clone(), None)).await {
                    Ok(Ok(resp)) => {
                        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                        self.cache.note_read(rev);
                        return Ok(match resp.kvs().first() {
                            Some(m) if m.value() == seq => Outcome::Committed(m.mod_revision()),
                            // Not applied: the caller reads again and
                            // recomputes; the lost request, should it
                            // still apply, fails its compares then.
                            _ => Outcome::Conflict,
                        });
                    }
                    Ok(Err(e)) => {
                        if let Fail::Fatal(x) = classify(&e) {
                            return Err(x);
                        }
                    }
                    Err(_) => {}
                }
            } else {
                match tokio::time::timeout(lim, kv.txn(txn.clone())).await {
                    Ok(Ok(resp)) => {
                        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                        self.cache.note_read(rev);
                        return Ok(if resp.succeeded() {
                            Outcome::Committed(rev)
                        } else {
                            Outcome::Conflict
                        });
                    }
                    Ok(Err(e)) => match classify(&e) {
                        Fail::Transient => uncertain = true,
                        Fail::Fatal(x) => return Err(x),
                    },
                    Err(_) => uncertain = true,
                }
            }
            attempt += 1;
            self.transient_pause(attempt).await;
        }
    }

    /// The record of `ino` from etcd (recorded in the mirror).
    async fn fetch(&self, dl: Instant, ino: Ino) -> Result<Rec> {
        let (rev, rs) = self.read(dl, vec![get(self.keys.inode(ino))]).await?;
        match rec_of(&rs[0])? {
            Some((rec, mr)) => {
                self.cache.record(ino, Some((&rec, mr)), rev);
                Ok(rec)
            }
            None => {
                self.cache.record(ino, None, rev);
                Err(Errno::ENOENT)
            }
        }
    }

    fn committed(&self, rev: i64, recs: &BTreeMap<Ino, (Rec, i64)>, deleted: &[Ino]) {
        for (ino, (rec, _)) in recs {
            if deleted.contains(ino) {
                self.cache.record(*ino, None, rev);
            } else {
                self.cache.record(*ino, Some((rec, rev)), rev);
            }
        }
    }

    async fn alloc_ino(&self, dl: Instant) -> Result<Ino> {
        {
            let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            if p.0 < p.1 {
                p.0 += 1;
                return Ok(p.0 - 1);
            }
        }
        let key = self.keys.next_ino();
        let mut attempt = 0;
        loop {
            let (_, rs) = self.read(dl, vec![get(key.clone())]).await?;
            let (cur, cmp) = match rs[0].kvs().first() {
                Some(kv) => (
                    decode_u64(kv.value())?,
                    same(key.clone(), kv.mod_revision()),
                ),
                None => (ROOT_INO + 1, absent(key.clone())),
            };
            let end = cur.checked_add(INO_BATCH).ok_or(Errno::ENOSPC)?;
            let ops = vec![put(key.clone(), end.to_le_bytes().to_vec())];
            if let Outcome::Committed(_) = self.commit(dl, vec![cmp], ops).await? {
                let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
                *p = (cur + 1, end);
                return Ok(cur);
            }
            attempt += 1;
            self.pause(attempt).await;
        }
    }

    /// Create the root if this prefix is new.
    async fn init(&self, dl: Instant) -> Result<()> {
        let mut root = Rec::new(FileType::Directory, 0o755, 0, 0);
        root.nlink = 2;
        root.size = 2 * DIRENT;
        let k = self.keys.inode(ROOT_INO);
        let txn_cmps = vec![absent(k.clone())];
        let ops = vec![
            put(k, root.encode()),
            put(self.keys.parent(ROOT_INO), ROOT_INO.to_le_bytes().to_vec()),
        ];
        self.commit(dl, txn_cmps, ops).await?;
        // Whoever created it, it must be a directory now.
        let rec = self.fetch(dl, ROOT_INO).await?;
        if !rec.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        Ok(())
    }

    async fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        let dl = self.deadline();
        loop {
            let (rev, rs) = self
                .read(
                    dl,
                    vec![get(self.keys.inode(dir)), get(self.keys.entry(dir, name))],
                )
                .await?;
            let (drec, dmr) = dir_of(&rs[0])?;
            self.cache.record(dir, Some((&drec, dmr)), rev);
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
    async fn make(
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
        loop {
            let dkey = self.keys.inode(dir);
            let ekey = self.keys.entry(dir, name);
            let (_, rs) = self
                .read(dl, vec![get(dkey.clone()), get(ekey.clone())])
                .await?;
            let (mut drec, dmr) = dir_of(&rs[0])?;
            if drec.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            if !rs[1].kvs().is_empty() {
                return Err(Errno::EEXIST);
            }
            let is_dir = kind == FileType::Directory;
            if is_dir && drec.nlink >= LINK_MAX {
                return Err(Errno::EMLINK);
            }
            let (perm, gid) = permission::inode_init_owner(drec.perm_of(), ctx.gid, perm, is_dir);
            let mut rec = Rec::new(kind, perm, ctx.uid, gid);
            rec.rdev = rdev;
            rec.target = target.to_vec();
            rec.size = if is_dir {
                2 * DIRENT
            } else {
                target.len() as u64
            };
            let now = rec.ctime;
            let slot = drec.next_slot;
            drec.next_slot += 1;
            drec.size += DIRENT;
            if is_dir {
                drec.nlink += 1;
            }
            touch_dir(&mut drec, now);
            let ikey = self.keys.inode(ino);
            let entry = Entry { ino, kind, slot };
            let cmps = vec![
                same(dkey.clone(), dmr),
                absent(ekey.clone()),
                absent(ikey.clone()),
            ];
            let mut ops = vec![
                put(dkey, drec.encode()),
                put(ekey, entry.encode()),
                put(ikey, rec.encode()),
            ];
            if is_dir {
                ops.push(put(self.keys.parent(ino), dir.to_le_bytes().to_vec()));
            }
            match self.commit(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.cache.record(dir, Some((&drec, rev)), rev);
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

    /// unlink (`dir_op` false) or rmdir (true).
    async fn remove(&self, dir: Ino, name: &[u8], dir_op: bool) -> Result<()> {
        check_name(name)?;
        let dl = self.deadline();
        let mut attempt = 0;
        loop {
            let dkey = self.keys.inode(dir);
            let ekey = self.keys.entry(dir, name);
            let (_, rs) = self
                .read(dl, vec![get(dkey.clone()), get(ekey.clone())])
                .await?;
            let (drec, dmr) = dir_of(&rs[0])?;
            let (e, emr) = entry_of(&rs[1])?.ok_or(Errno::ENOENT)?;
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
            let mut drec2 = drec.clone();
            touch_dir(&mut drec2, now);
            drec2.size = drec2.size.saturating_sub(DIRENT);
            if dir_op {
                drec2.nlink = drec2.nlink.saturating_sub(1);
            }
            let cmps = vec![
                same(dkey.clone(), dmr),
                same(ekey.clone(), emr),
                same(ckey.clone(), cmr),
            ];
            let mut ops = vec![delete(ekey), put(dkey, drec2.encode())];
            let mut deleted = Vec::new();
            if dir_op || crec.nlink <= 1 {
                ops.push(delete(ckey));
                if dir_op {
                    ops.push(delete(self.keys.parent(e.ino)));
                } else {
                    ops.push(delete_prefix(self.keys.chunks(e.ino)));
                }
                deleted.push(e.ino);
            } else {
                crec.nlink -= 1;
                crec.ctime = now;
                ops.push(put(ckey, crec.encode()));
            }
            recs.insert(dir, (drec2, dmr));
            recs.insert(e.ino, (crec, cmr));
            match self.commit(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.committed(rev, &recs, &deleted);
                    return Ok(());
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }

    async fn link(&self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        check_name(newname)?;
        let dl = self.deadline();
        let mut attempt = 0;
        loop {
            let ikey = self.keys.inode(ino);
            let dkey = self.keys.inode(newdir);
            let ekey = self.keys.entry(newdir, newname);
            let (_, rs) = self
                .read(
                    dl,
                    vec![get(ikey.clone()), get(dkey.clone()), get(ekey.clone())],
                )
                .await?;
            let (mut rec, imr) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
            let (mut drec, dmr) = dir_of(&rs[1])?;
            if rec.is_dir() {
                return Err(Errno::EPERM);
            }
            if rec.nlink == 0 || drec.nlink == 0 {
                return Err(Errno::ENOENT);
            }
            if !rs[2].kvs().is_empty() {
                return Err(Errno::EEXIST);
            }
            if rec.nlink >= LINK_MAX {
                return Err(Errno::EMLINK);
            }
            let now = Timespec::now();
            rec.nlink += 1;
            rec.ctime = now;
            let slot = drec.next_slot;
            drec.next_slot += 1;
            drec.size += DIRENT;
            touch_dir(&mut drec, now);
            let entry = Entry {
                ino,
                kind: rec.kind,
                slot,
            };
            let cmps = vec![
                same(ikey.clone(), imr),
                same(dkey.clone(), dmr),
                absent(ekey.clone()),
            ];
            let ops = vec![
                put(ikey, rec.encode()),
                put(dkey, drec.encode()),
                put(ekey, entry.encode()),
            ];
            match self.commit(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.cache.record(ino, Some((&rec, rev)), rev);
                    self.cache.record(newdir, Some((&drec, rev)), rev);
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

    async fn rename(
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
        'retry: loop {
            if attempt > 0 {
                self.pause(attempt).await;
            }
            attempt += 1;
            let k = &self.keys;
            let (_, rs) = self
                .read(
                    dl,
                    vec![
                        get(k.inode(od)),
                        get(k.inode(nd)),
                        get(k.entry(od, on)),
                        get(k.entry(nd, nn)),
                    ],
                )
                .await?;
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
            // The new state, by inode (a directory may play two roles).
            let now = Timespec::now();
            let mut recs: BTreeMap<Ino, (Rec, i64)> = BTreeMap::new();
            recs.insert(od, (odrec, odmr));
            recs.entry(nd).or_insert((ndrec, ndmr));
            recs.entry(se.ino).or_insert((srec.clone(), smr));
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
            macro_rules! rec {
                ($ino:expr) => {
                    &mut recs.get_mut(&$ino).ok_or(Errno::EIO)?.0
                };
            }
            if flags.exchange {
                let Some((t, tmr_, trec, _, _)) = &tgt else {
                    return Err(Errno::ENOENT);
                };
                let _ = tmr_;
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
                        rec!(od).nlink -= 1;
                        rec!(nd).nlink += 1;
                        ops.push(put(k.parent(se.ino), nd.to_le_bytes().to_vec()));
                    }
                    if trec.is_dir() {
                        rec!(nd).nlink -= 1;
                        rec!(od).nlink += 1;
                        ops.push(put(k.parent(t.ino), od.to_le_bytes().to_vec()));
                    }
                }
                rec!(t.ino).ctime = now;
            } else {
                ops.push(delete(k.entry(od, on)));
                let slot = rec!(nd).next_slot;
                rec!(nd).next_slot += 1;
                // od loses a name; nd gains one unless it replaces one.
                let odr = rec!(od);
                odr.size = odr.size.saturating_sub(DIRENT);
                if tgt.is_none() {
                    rec!(nd).size += DIRENT;
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
                    rec!(od).nlink -= 1;
                    rec!(nd).nlink += 1;
                    ops.push(put(k.parent(se.ino), nd.to_le_bytes().to_vec()));
                }
                if let Some((t, _, trec, _, _)) = &tgt {
                    if trec.is_dir() {
                        // The replaced directory's ".." no longer links nd.
                        rec!(nd).nlink -= 1;
                        deleted.push(t.ino);
                        ops.push(delete(k.parent(t.ino)));
                    } else {
                        let r = rec!(t.ino);
                        r.nlink = r.nlink.saturating_sub(1);
                        r.ctime = now;
                        if r.nlink == 0 {
                            deleted.push(t.ino);
                            ops.push(delete_prefix(k.chunks(t.ino)));
                        }
                    }
                }
            }
            rec!(se.ino).ctime = now;
            touch_dir(rec!(od), now);
            touch_dir(rec!(nd), now);
            for (ino, (rec, mr)) in &recs {
                cmps.push(same(k.inode(*ino), *mr));
                if deleted.contains(ino) {
                    ops.push(delete(k.inode(*ino)));
                } else {
                    ops.push(put(k.inode(*ino), rec.encode()));
                }
            }
            match self.commit(dl, cmps, ops).await? {
                Outcome::Committed(rev) => {
                    self.committed(rev, &recs, &deleted);
                    return Ok(());
                }
                Outcome::Conflict => continue 'retry,
            }
        }
    }

    async fn setattr(&self, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let dl = self.deadline();
        if set.size.is_some_and(|s| s > MAX_FILE) {
            return Err(Errno::EFBIG);
        }
        let mut attempt = 0;
        loop {
            let ikey = self.keys.inode(ino);
            let mut reads = vec![get(ikey.clone())];
            if let Some(s) = set.size {
                reads.push(get(self.keys.chunk(ino, s / CHUNK)));
            }
            let (_, rs) = self.read(dl, reads).await?;
            let (mut rec, mr) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
            let now = Timespec::now();
            let mut ops = Vec::new();
            if let Some(size) = set.size {
                match rec.kind {
                    FileType::Directory => return Err(Errno::EISDIR),
                    FileType::Regular => {}
                    _ => return Err(Errno::EINVAL),
                }
                if size < rec.size {
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
            match self.commit(dl, vec![same(ikey, mr)], ops).await? {
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

    async fn write(&self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        if off >= MAX_FILE {
            return Err(Errno::EFBIG);
        }
        let len = data.len().min(MAX_IO).min((MAX_FILE - off) as usize);
        let data = &data[..len];
        let end = off + len as u64;
        let first = off / CHUNK;
        let last = (end - 1) / CHUNK;
        let dl = self.deadline();
        let mut attempt = 0;
        loop {
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
                    return Ok(len);
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }

    async fn read_data(&self, ino: Ino, off: u64, buf: &mut [u8]) -> Result<usize> {
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

    async fn readdir(&self, dir: Ino) -> Result<(Ino, Vec<(u64, Ino, FileType, Vec<u8>)>)> {
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
        let parent = match rs[1].kvs().first() {
            Some(kv) => decode_u64(kv.value())?,
            None => dir,
        };
        let plen = self.keys.entries(dir).len();
        let mut out = Vec::with_capacity(rs[2].kvs().len());
        for kv in rs[2].kvs() {
            let e = Entry::decode(kv.value())?;
            out.push((e.slot + 3, e.ino, e.kind, kv.key()[plen..].to_vec()));
        }
        out.sort_by_key(|e| e.0);
        Ok((parent, out))
    }

    async fn statfs(&self) -> Result<StatFs> {
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
        let blocks = DEFAULT_QUOTA / bsize;
        let bfree = blocks.saturating_sub(used / bsize);
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

    /// The mod_revision of `ino`'s record (None: gone), asked of etcd.
    async fn remote_rev(&self, ino: Ino) -> Result<Option<i64>> {
        let dl = self.deadline();
        let (_, rs) = self.read(dl, vec![get(self.keys.inode(ino))]).await?;
        Ok(rs[0].kvs().first().map(|kv| kv.mod_revision()))
    }

    // ---- background tasks ----

    async fn heartbeat_loop(self: Arc<Inner>) {
        let key = self.keys.heartbeat(&self.client_id);
        let every = self.opts.heartbeat_interval();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let sent = self.cache.now_ns();
            let mut kv = self.client.kv_client();
            let lim = self.opts.timeout.min(every * 4);
            let _ =
                tokio::time::timeout(lim, kv.put(key.clone(), sent.to_le_bytes().to_vec(), None))
                    .await;
        }
    }

    async fn watch_loop(self: Arc<Inner>) {
        let hb = self.keys.heartbeat(&self.client_id);
        let marker = self.keys.op_marker(&self.client_id);
        let mut first = true;
        loop {
            if !first {
                self.cache
                    .stats
                    .watch_restarts
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            first = false;
            let start = self.cache.watched.load(Ordering::Acquire) + 1;
            let mut wc = self.client.watch_client();
            let opts = WatchOptions::new()
                .with_range(self.keys.watched_end())
                .with_start_revision(start);
            let stream = match tokio::time::timeout(
                self.opts.timeout,
                wc.watch(self.keys.watched(), Some(opts)),
            )
            .await
            {
                Ok(Ok(s)) => s,
                _ => continue,
            };
            // The sender half must stay alive, or the stream ends.
            let (_tx, mut rx) = stream.split();
            while let Ok(Some(resp)) = rx.message().await {
                if resp.canceled() {
                    if resp.compact_revision() > 0 {
                        self.resync().await;
                    }
                    break;
                }
                // A transaction's events come in one response, its marker
                // put among them when it is this client's own: those
                // changes went through this client's Vfs already.
                let own: Vec<i64> = resp
                    .events()
                    .iter()
                    .filter_map(|ev| ev.kv())
                    .filter(|kv| kv.key() == marker.as_slice())
                    .map(|kv| kv.mod_revision())
                    .collect();
                let mut changes = Vec::new();
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    let rev = kv.mod_revision();
                    let theirs = !own.contains(&rev);
                    if let Some(ino) = self.keys.parse_inode(kv.key()) {
                        let rec = match ev.event_type() {
                            EventType::Put => Rec::decode(kv.value()).ok(),
                            EventType::Delete => None,
                        };
                        if theirs && rec.is_some() {
                            changes.push(Change::Inode(ino));
                        }
                        self.cache.event(ino, rec, rev);
                    } else {
                        self.cache.passed(rev);
                        if let Some((dir, name)) = self.keys.parse_entry(kv.key()) {
                            if theirs {
                                changes.push(Change::Entry(dir, name.to_vec()));
                            }
                        } else if kv.key() == hb.as_slice() && ev.event_type() == EventType::Put {
                            if let Ok(sent) = decode_u64(kv.value()) {
                                self.cache.synced(sent);
                            }
                        }
                    }
                }
                // Reported only now that the cache has applied the whole
                // response: a lookup the report causes must see the change.
                if let Some(tx) = self.inval.get() {
                    for c in changes {
                        self.cache
                            .stats
                            .invalidations
                            .fetch_add(1, Ordering::Relaxed);
                        let _ = tx.send(c);
                    }
                }
            }
        }
    }

    /// Endpoint failover: probe every member (a status request, so a
    /// frozen member counts as down too) and take the ones that do not
    /// answer out of the client's balancer, so requests stop being sent
    /// there; put them back when they answer again. At least one endpoint
    /// always stays in.
    async fn health_loop(self: Arc<Inner>, endpoints: Vec<String>) {
        if endpoints.len() < 2 {
            return;
        }
        let probe_every = Duration::from_millis(250);
        let probe_limit = Duration::from_millis(400);
        let mut probes: Vec<Option<Client>> = vec![None; endpoints.len()];
        let mut out = vec![false; endpoints.len()];
        loop {
            tokio::time::sleep(probe_every).await;
            for (i, ep) in endpoints.iter().enumerate() {
                if probes[i].is_none() {
                    let opts = ConnectOptions::new().with_connect_timeout(probe_limit);
                    if let Ok(Ok(c)) = tokio::time::timeout(
                        probe_limit,
                        Client::connect([ep.as_str()], Some(opts)),
                    )
                    .await
                    {
                        probes[i] = Some(c);
                    }
                }
                let up = match &mut probes[i] {
                    Some(c) => matches!(
                        tokio::time::timeout(probe_limit, c.status()).await,
                        Ok(Ok(_))
                    ),
                    None => false,
                };
                if !up {
                    probes[i] = None;
                }
                let n_out = out.iter().filter(|&&o| o).count();
                if !up && !out[i] && n_out + 1 < endpoints.len() {
                    if self.client.remove_endpoint(ep.as_str()).await.is_ok() {
                        out[i] = true;
                        self.cache
                            .stats
                            .endpoints_removed
                            .fetch_add(1, Ordering::Relaxed);
                    }
                } else if up && out[i] && self.client.add_endpoint(ep.as_str()).await.is_ok() {
                    out[i] = false;
                }
            }
        }
    }

    /// After a compaction gap: forget what the watch can no longer bring
    /// up to date, and resume from the current revision.
    async fn resync(&self) {
        loop {
            let dl = self.deadline();
            if let Ok((rev, _)) = self.read(dl, vec![get(self.keys.inode(ROOT_INO))]).await {
                self.cache.reset(rev);
                return;
            }
        }
    }
}

impl EtcdFs {
    /// Connect with default [`Options`] to the spec
    /// `[etcd:]http://host:port[,http://host:port...][/prefix]`, creating
    /// the namespace's root if the prefix is empty.
    pub fn connect(spec: &str) -> Result<EtcdFs> {
        EtcdFs::connect_with(spec, Options::default())
    }

    pub fn connect_with(spec: &str, opts: Options) -> Result<EtcdFs> {
        EtcdFs::connect_spec(parse_spec(spec)?, opts)
    }

    pub fn connect_spec(spec: Spec, opts: Options) -> Result<EtcdFs> {
        if opts.timeout.is_zero() || opts.staleness.is_zero() {
            return Err(Errno::EINVAL);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("dcache-etcd")
            .enable_all()
            .build()
            .map_err(|e| Errno::from_io(&e))?;
        let copts = ConnectOptions::new()
            .with_connect_timeout(opts.timeout.min(Duration::from_secs(2)))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let endpoints = spec.endpoints.clone();
        let client = run_on(
            &rt,
            async move { Client::connect(endpoints, Some(copts)).await },
        )
        .map_err(|_| Errno::EIO)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let client_id = format!("{:016x}-{}", nanos, std::process::id());
        let inner = Arc::new(Inner {
            client,
            keys: Keys::new(&spec.prefix),
            cache: Cache::new(opts.staleness),
            opts,
            client_id,
            op_seq: AtomicU64::new(1),
            pool: Mutex::new((0, 0)),
            rng: AtomicU64::new(nanos | 1),
            inval: OnceLock::new(),
            attached: Arc::default(),
        });
        let i = inner.clone();
        run_on(&rt, async move { i.init(i.deadline()).await })?;
        // The watch starts where the root was read: the mirror is empty,
        // so nothing older is needed.
        let start = inner.cache.cookie() as i64;
        inner.cache.watched.store(start, Ordering::Release);
        rt.spawn(inner.clone().watch_loop());
        rt.spawn(inner.clone().heartbeat_loop());
        rt.spawn(inner.clone().health_loop(spec.endpoints.clone()));
        let fs = EtcdFs {
            inner,
            rt: Some(rt),
        };
        // Give the watch a moment to become current (not required: until
        // it is, everything is revalidated against etcd).
        let until = Instant::now() + fs.inner.opts.timeout.min(Duration::from_secs(2));
        while !fs.inner.cache.fresh() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(fs)
    }

    fn block<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        match &self.rt {
            Some(rt) => run_on(rt, f),
            None => unreachable!("the runtime lives until drop"),
        }
    }

    /// This client's id (its heartbeat and marker keys are named by it).
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Cache counters.
    pub fn stats(&self) -> &CacheStats {
        &self.inner.cache.stats
    }

    /// Whether cached answers are being served without asking etcd (the
    /// watch is within the staleness bound).
    pub fn is_current(&self) -> bool {
        self.inner.cache.fresh()
    }

    /// How long ago the watch was last known to be current.
    pub fn watch_lag(&self) -> Option<Duration> {
        self.inner.cache.lag()
    }

    /// Time one plain serializable get (answered by the member the client
    /// reaches, no quorum): the round trip a cached stat saves.
    pub fn serializable_round_trip(&self) -> Result<Duration> {
        let key = self.inner.keys.inode(ROOT_INO);
        let lim = self.inner.opts.timeout;
        let mut kv = self.inner.client.kv_client();
        self.block(async move {
            let t = Instant::now();
            match tokio::time::timeout(
                lim,
                kv.get(key, Some(GetOptions::new().with_serializable())),
            )
            .await
            {
                Ok(Ok(_)) => Ok(t.elapsed()),
                _ => Err(Errno::EIO),
            }
        })
    }

    /// Time one linearizable get (what a revalidation costs when the
    /// watch is not current).
    pub fn linearizable_round_trip(&self) -> Result<Duration> {
        let i = self.inner.clone();
        self.block(async move {
            let t = Instant::now();
            i.read(i.deadline(), vec![get(i.keys.inode(ROOT_INO))])
                .await?;
            Ok(t.elapsed())
        })
    }
}

/// Run `f` to completion on `rt` from a synchronous caller. A caller that
/// is itself inside a tokio runtime cannot block on another one in place,
/// so it waits from a helper thread.
fn run_on<F>(rt: &Runtime, f: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(|| rt.block_on(f))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    } else {
        rt.block_on(f)
    }
}

impl Drop for EtcdFs {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            // Best effort: remove this client's heartbeat and marker keys.
            let i = self.inner.clone();
            run_on(&rt, async move {
                let mut kv = i.client.kv_client();
                let lim = Duration::from_millis(300);
                let _ = tokio::time::timeout(lim, kv.delete(i.keys.heartbeat(&i.client_id), None))
                    .await;
                let _ = tokio::time::timeout(lim, kv.delete(i.keys.op_marker(&i.client_id), None))
                    .await;
            });
            rt.shutdown_timeout(Duration::from_millis(200));
        }
    }
}

impl FileSystem for EtcdFs {
    fn root(&self) -> Ino {
        ROOT_INO
    }

    fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        check_name(name)?;
        let i = &self.inner;
        self.block(i.lookup(dir, name))
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        let i = &self.inner;
        if let Some(a) = i.cache.attr(ino) {
            return Ok(a);
        }
        i.cache.stats.attr_misses.fetch_add(1, Ordering::Relaxed);
        match self.block(async { i.fetch(i.deadline(), ino).await.map(|r| r.attr(ino)) }) {
            // Removed since the caller's dentry was validated: its last
            // attributes with nlink 0, as a stat racing an unlink gets on
            // Linux, rather than ENOENT for a name that was there.
            Err(Errno::ENOENT) => i.cache.last_known(ino).ok_or(Errno::ENOENT),
            r => r,
        }
    }

    fn setattr(&self, ino: Ino, set: &SetAttr, _ctx: Ctx) -> Result<Attr> {
        self.block(self.inner.setattr(ino, set))
    }

    fn readdir(&self, dir: Ino, offset: u64, emit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let (parent, entries) = self.block(self.inner.readdir(dir))?;
        let dots = [(1u64, dir, b".".to_vec()), (2, parent, b"..".to_vec())];
        for (off, ino, name) in dots {
            if off > offset
                && !emit(DirEntry {
                    ino,
                    offset: off,
                    kind: FileType::Directory,
                    name,
                })
            {
                return Ok(());
            }
        }
        for (off, ino, kind, name) in entries {
            if off > offset
                && !emit(DirEntry {
                    ino,
                    offset: off,
                    kind,
                    name,
                })
            {
                return Ok(());
            }
        }
        Ok(())
    }

    fn create(&self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        self.block(
            self.inner
                .make(dir, name, FileType::Regular, perm, 0, b"", ctx),
        )
    }

    fn mknod(
        &self,
        dir: Ino,
        name: &[u8],
        kind: FileType,
        perm: u16,
        rdev: u32,
        ctx: Ctx,
    ) -> Result<Attr> {
        match kind {
            FileType::Directory | FileType::Symlink => Err(Errno::EINVAL),
            _ => self.block(self.inner.make(dir, name, kind, perm, rdev, b"", ctx)),
        }
    }

    fn mkdir(&self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        self.block(
            self.inner
                .make(dir, name, FileType::Directory, perm, 0, b"", ctx),
        )
    }

    fn unlink(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.block(self.inner.remove(dir, name, false))
    }

    fn rmdir(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.block(self.inner.remove(dir, name, true))
    }

    fn rename(
        &self,
        olddir: Ino,
        oldname: &[u8],
        newdir: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.block(self.inner.rename(olddir, oldname, newdir, newname, flags))
    }

    fn symlink(&self, dir: Ino, name: &[u8], target: &[u8], ctx: Ctx) -> Result<Attr> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() >= dcache::fs::PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.block(
            self.inner
                .make(dir, name, FileType::Symlink, 0o777, 0, target, ctx),
        )
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let i = &self.inner;
        let rec = match i.cache.rec(ino) {
            Some(r) => r,
            None => self.block(async { i.fetch(i.deadline(), ino).await })?,
        };
        if rec.kind != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        Ok(rec.target)
    }

    fn link(&self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        self.block(self.inner.link(ino, newdir, newname))
    }

    fn open(&self, ino: Ino, _flags: i32) -> Result<u64> {
        self.getattr(ino)?;
        Ok(0)
    }

    fn read(&self, ino: Ino, _fh: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.block(self.inner.read_data(ino, offset, buf))
    }

    fn write(&self, ino: Ino, _fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.block(self.inner.write(ino, offset, data))
    }

    fn flush_on_close(&self) -> bool {
        // Every write is committed before it returns: nothing to flush.
        false
    }

    fn statfs(&self) -> Result<StatFs> {
        self.block(self.inner.statfs())
    }

    fn forget(&self, ino: Ino, _nlookup: u64) {
        if ino != ROOT_INO {
            self.inner.cache.forget(ino);
        }
    }

    fn needs_revalidate(&self) -> bool {
        true
    }

    /// Keep the Vfs's invalidator: the watch's changes by other clients go
    /// to a thread of our own that reports them (a report may wait for
    /// lookups in progress, which wait on this client's runtime).
    fn attach(&self, inval: dcache::Invalidator) {
        // A Vfs built later over the same client replaces an earlier one.
        *self
            .inner
            .attached
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(inval);
        let (tx, rx) = std::sync::mpsc::channel::<Change>();
        if self.inner.inval.set(tx).is_err() {
            return; // the thread runs already
        }
        let attached = self.inner.attached.clone();
        let spawned = std::thread::Builder::new()
            .name("dcache-etcd-inval".into())
            .spawn(move || {
                // Ends when the watch's sender goes with the client.
                for c in rx {
                    let Some(inval) = attached.lock().unwrap_or_else(|e| e.into_inner()).clone()
                    else {
                        continue;
                    };
                    match c {
                        Change::Entry(dir, name) => inval.entry(dir, &name),
                        Change::Inode(ino) => inval.inode(ino, None),
                    }
                }
            });
        // Without the thread the watch's sends fail and nothing is told:
        // a mount's kernel then sees other clients' changes only after its
        // timeouts; the Vfs itself still revalidates every use.
        drop(spawned);
    }

    fn dir_cookie(&self, _dir: Ino) -> u64 {
        self.inner.cache.cookie()
    }

    fn revalidate(
        &self,
        dir: Ino,
        _name: &[u8],
        _ino: Option<Ino>,
        cookie: u64,
        rcu: bool,
    ) -> Validity {
        // The rcu case reads two atomics, the clock and a lock-free map
        // (papaya; its guard registers a thread with the collector once,
        // on the thread's first use), and never blocks.
        let c = &self.inner.cache;
        let cookie = cookie.min(i64::MAX as u64) as i64;
        if cookie < c.floor.load(Ordering::Acquire) {
            return if rcu {
                Validity::NeedBlocking
            } else {
                Validity::Invalid
            };
        }
        if c.fresh() {
            return if c.ino_rev(dir) <= cookie {
                Validity::Valid
            } else {
                Validity::Invalid
            };
        }
        if rcu {
            return Validity::NeedBlocking;
        }
        c.stats.remote_revalidations.fetch_add(1, Ordering::Relaxed);
        match self.block(self.inner.remote_rev(dir)) {
            Ok(Some(rev)) if rev <= cookie => Validity::Valid,
            _ => Validity::Invalid,
        }
    }
}
