//! Request plumbing for [`Inner`]: how a failed request is classified,
//! the small `TxnOp`/`Compare` builders, decoding of the records a read
//! returns, name checks, and the read/commit loops (deadlines, retries,
//! the marker key and fence that resolve a lost commit) with inode allocation and
//! root creation built on them.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dcache::fs::NAME_MAX;
use dcache::{Errno, FileType, Ino, Result};
use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget,
    Txn, TxnOp, TxnOpResponse,
};

use super::{Inner, DIRENT, INO_BATCH};
use crate::codec::{decode_u64, Entry, Rec, ROOT_INO};
use crate::log::{eio, Cause};

/// How a failed request is treated.
pub(super) enum Fail {
    /// The cluster may answer later (no leader, member down): retry until
    /// the deadline.
    Transient,
    /// etcd no longer knows the session lease (it expired while the
    /// client was cut off): a new one is granted, then the request is
    /// retried.
    LeaseGone,
    Fatal(Errno),
}

pub(super) fn classify(e: &etcd_client::Error) -> Fail {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => {
            let m = s.message();
            if m.contains("lease not found") {
                return Fail::LeaseGone;
            }
            if crate::spec::is_auth_refusal(m) {
                crate::log::failure(Cause::Permission, format_args!("etcd refused: {m}"));
                return Fail::Fatal(Errno::EACCES);
            }
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
                PERMISSION_DENIED | UNAUTHENTICATED => {
                    crate::log::failure(Cause::Permission, format_args!("etcd refused: {m}"));
                    Fail::Fatal(Errno::EACCES)
                }
                _ => Fail::Fatal(eio(Cause::Unavailable, format_args!("etcd answered: {s}"))),
            }
        }
        E::TransportError(_) | E::IoError(_) => Fail::Transient,
        e => Fail::Fatal(eio(Cause::Unavailable, format_args!("etcd client: {e}"))),
    }
}

/// gRPC status codes (tonic's `Code` as i32).
mod grpc {
    pub const CANCELLED: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const ABORTED: i32 = 10;
    pub const PERMISSION_DENIED: i32 = 7;
    pub const INTERNAL: i32 = 13;
    pub const UNAUTHENTICATED: i32 = 16;
    pub const UNAVAILABLE: i32 = 14;
}

pub(super) enum Outcome {
    Committed(i64),
    Conflict,
}

pub(super) fn get(key: Vec<u8>) -> TxnOp {
    TxnOp::get(key, None)
}

pub(super) fn get_prefix(prefix: Vec<u8>) -> TxnOp {
    TxnOp::get(prefix, Some(GetOptions::new().with_prefix()))
}

pub(super) fn same(key: Vec<u8>, mod_rev: i64) -> Compare {
    Compare::mod_revision(key, CompareOp::Equal, mod_rev)
}

pub(super) fn absent(key: Vec<u8>) -> Compare {
    Compare::version(key, CompareOp::Equal, 0)
}

pub(super) fn present(key: Vec<u8>) -> Compare {
    Compare::version(key, CompareOp::Greater, 0)
}

pub(super) fn put(key: Vec<u8>, value: Vec<u8>) -> TxnOp {
    TxnOp::put(key, value, None)
}

pub(super) fn delete(key: Vec<u8>) -> TxnOp {
    TxnOp::delete(key, None)
}

pub(super) fn delete_prefix(prefix: Vec<u8>) -> TxnOp {
    TxnOp::delete(prefix, Some(DeleteOptions::new().with_prefix()))
}

pub(super) fn rec_of(r: &GetResponse) -> Result<Option<(Rec, i64)>> {
    match r.kvs().first() {
        Some(kv) => Ok(Some((
            damaged(kv.key(), Rec::decode(kv.value()))?,
            kv.mod_revision(),
        ))),
        None => Ok(None),
    }
}

pub(super) fn entry_of(r: &GetResponse) -> Result<Option<(Entry, i64)>> {
    match r.kvs().first() {
        Some(kv) => Ok(Some((
            damaged(kv.key(), Entry::decode(kv.value()))?,
            kv.mod_revision(),
        ))),
        None => Ok(None),
    }
}

/// A record's decoding: a failure is logged with the record's key (a
/// damaged record is that object's error, and the operator's to repair).
pub(super) fn damaged<T>(key: &[u8], r: Result<T>) -> Result<T> {
    r.inspect_err(|&e| {
        if e == Errno::EIO {
            crate::log::failure(
                Cause::Corrupt,
                format_args!("record {} does not decode", key.escape_ascii()),
            );
        }
    })
}

/// A directory record, or ENOENT / ENOTDIR. A removed directory (nlink 0
/// can only be seen mid-removal) is ENOENT.
pub(super) fn dir_of(r: &GetResponse) -> Result<(Rec, i64)> {
    let (rec, mr) = rec_of(r)?.ok_or(Errno::ENOENT)?;
    if !rec.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    Ok((rec, mr))
}

pub(super) fn check_name(name: &[u8]) -> Result<()> {
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
    pub(super) fn deadline(&self) -> Instant {
        Instant::now() + self.opts.timeout
    }

    /// Per-attempt limit: a dead member costs at most this before the
    /// request is retried (on another endpoint).
    pub(super) fn attempt_limit(&self, dl: Instant) -> Result<Duration> {
        let rem = dl.saturating_duration_since(Instant::now());
        if rem.is_zero() {
            return Err(eio(
                Cause::Timeout,
                format_args!(
                    "no answer from an etcd quorum within etcd_timeout ({:?})",
                    self.opts.timeout
                ),
            ));
        }
        // No member has answered for a while: fail now rather than wait
        // out the deadline (a quorum that is merely electing a leader, or
        // slow, still answers the probes, and is waited for).
        if let (Some(grace), Some(silent)) = (self.opts.unreachable_after, self.unreachable_for()) {
            if silent >= grace {
                return Err(eio(
                    Cause::Unavailable,
                    format_args!("no etcd member has answered a probe for {silent:.1?}"),
                ));
            }
        }
        Ok(rem.min((self.opts.timeout / 4).max(Duration::from_millis(500))))
    }

    pub(super) async fn pause(&self, attempt: u32) {
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
    pub(super) async fn read(
        &self,
        dl: Instant,
        ops: Vec<TxnOp>,
    ) -> Result<(i64, Vec<GetResponse>)> {
        let txn = Txn::new().and_then(ops);
        let mut attempt = 0;
        loop {
            let lim = self.attempt_limit(dl)?;
            let mut kv = self.client.kv_client();
            let t = std::time::Instant::now();
            match tokio::time::timeout(lim, kv.txn(txn.clone())).await {
                Ok(Ok(resp)) => {
                    let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                    self.cache.note_read(rev);
                    let st = &self.cache.stats;
                    crate::cache::timed(&st.reads, &st.read_ns, t);
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
                    Fail::Transient | Fail::LeaseGone => {}
                    Fail::Fatal(x) => return Err(x),
                },
                Err(_) => {}
            }
            attempt += 1;
            self.transient_pause(attempt).await;
        }
    }

    /// Commit `ops` if every compare holds. A lost response is resolved
    /// by this client's marker key (applied) or the commit's fence (not
    /// applied, and never will be); out of time: EIO (the outcome
    /// is then unknown, as for a local disk that failed mid-write).
    pub(super) async fn commit(
        &self,
        dl: Instant,
        cmps: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<Outcome> {
        Ok(self.commit_as(dl, cmps, ops, false, Vec::new()).await?.0)
    }

    /// `commit` for a namespace operation whose caller, the Vfs, applies
    /// its entry changes to the dcache when it succeeds: those changes
    /// then invalidate none of this client's cached names (`crate::own`).
    /// The caller must return success exactly when this commits.
    pub(super) async fn commit_mirrored(
        &self,
        dl: Instant,
        cmps: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<Outcome> {
        Ok(self.commit_as(dl, cmps, ops, true, Vec::new()).await?.0)
    }

    /// `commit_mirrored`, with `reads` (gets) made instead of the ops when
    /// a compare fails: their answers come with the conflict (at the
    /// revision that failed it), so the caller recomputes without reading
    /// again. (A conflict found by resolving a lost answer has none.)
    pub(super) async fn commit_mirrored_or_read(
        &self,
        dl: Instant,
        cmps: Vec<Compare>,
        ops: Vec<TxnOp>,
        reads: Vec<TxnOp>,
    ) -> Result<(Outcome, Option<(i64, Vec<GetResponse>)>)> {
        self.commit_as(dl, cmps, ops, true, reads).await
    }

    async fn commit_as(
        &self,
        dl: Instant,
        cmps: Vec<Compare>,
        ops: Vec<TxnOp>,
        mirrored: bool,
        or_else: Vec<TxnOp>,
    ) -> Result<(Outcome, Option<(i64, Vec<GetResponse>)>)> {
        let seq = self.op_seq.fetch_add(1, Ordering::Relaxed);
        if !mirrored {
            return self.commit_seq(dl, cmps, ops, or_else, seq).await;
        }
        // Ends the commit's record however this future ends (an error, a
        // conflict, or dropped mid-way: then the caller sees a failure).
        struct Ending<'a> {
            cache: &'a crate::cache::Cache,
            seq: u64,
            applied: bool,
        }
        impl Drop for Ending<'_> {
            fn drop(&mut self) {
                self.cache.own_end(self.seq, self.applied);
            }
        }
        self.cache.own_begin(seq);
        let mut ending = Ending {
            cache: &self.cache,
            seq,
            applied: false,
        };
        let out = self.commit_seq(dl, cmps, ops, or_else, seq).await;
        ending.applied = matches!(out, Ok((Outcome::Committed(_), _)));
        out
    }

    async fn commit_seq(
        &self,
        dl: Instant,
        mut cmps: Vec<Compare>,
        mut ops: Vec<TxnOp>,
        or_else: Vec<TxnOp>,
        seq: u64,
    ) -> Result<(Outcome, Option<(i64, Vec<GetResponse>)>)> {
        // The commit applies only while its fence is absent: a lost
        // answer is resolved by a transaction that either finds the
        // marker (applied) or puts the fence (so the lost request, still
        // queued somewhere between here and etcd's apply loop, fails its
        // compares whenever it arrives). A read of the marker alone could
        // answer "not applied" before the request applied, and the caller
        // would then recompute against its own change (a create reporting
        // EEXIST for the name it made).
        let fence = self.keys.op_fence(&self.client_id, seq);
        cmps.push(absent(fence.clone()));
        let seq = seq.to_le_bytes();
        // A marker no other commit of this client writes until this one
        // is resolved: a lost answer is then read back from it even when
        // the client's other commits went through meanwhile.
        let lane = self.marker_lanes.take();
        let marker = self.keys.op_marker(&self.client_id, lane.n);
        // The marker goes on the session lease, so a client that dies
        // leaves none behind; the lease in use is read at each attempt
        // (it changes when an expired one is replaced).
        ops.push(put(marker.clone(), seq.to_vec()));
        let with_lease = |mut ops: Vec<TxnOp>, lease: i64| {
            let opts = PutOptions::new().with_lease(lease);
            if let Some(last) = ops.last_mut() {
                *last = TxnOp::put(marker.clone(), seq.to_vec(), Some(opts));
            }
            Txn::new()
                .when(cmps.clone())
                .and_then(ops)
                .or_else(or_else.clone())
        };
        let mut attempt = 0;
        let mut uncertain = false;
        // The lease the last attempt put the marker on.
        let mut sent_on = 0;
        loop {
            let lim = self.attempt_limit(dl)?;
            let mut kv = self.client.kv_client();
            if uncertain {
                // Applied (the marker holds this commit's number), or
                // fenced now: one transaction, so etcd orders it before
                // or after the lost request, never beside it.
                let fence_put = TxnOp::put(
                    fence.clone(),
                    Vec::new(),
                    Some(PutOptions::new().with_lease(self.lease_id())),
                );
                let resolve = Txn::new()
                    .when(vec![Compare::value(
                        marker.clone(),
                        CompareOp::Equal,
                        seq.to_vec(),
                    )])
                    .and_then(vec![get(marker.clone())])
                    .or_else(vec![fence_put, get(marker.clone())]);
                match tokio::time::timeout(lim, kv.txn(resolve)).await {
                    Ok(Ok(resp)) => {
                        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                        self.cache.note_read(rev);
                        let found = resp
                            .op_responses()
                            .into_iter()
                            .find_map(|r| match r {
                                TxnOpResponse::Get(g) => Some(g.kvs().first().cloned()),
                                _ => None,
                            })
                            .flatten();
                        return match found {
                            Some(m) if resp.succeeded() => {
                                Ok((Outcome::Committed(m.mod_revision()), None))
                            }
                            // Not applied, and fenced: the caller reads
                            // again and recomputes; the lost request, should
                            // it still arrive, fails its compares.
                            Some(_) => Ok((Outcome::Conflict, None)),
                            // No marker: not applied if the lease it went
                            // on still lives (its keys are deleted only
                            // with it); if the lease expired meanwhile, the
                            // marker may have gone with it: unknown.
                            None => match self.lease_alive(lim, sent_on).await {
                                Some(true) => Ok((Outcome::Conflict, None)),
                                _ => Err(eio(
                                    Cause::Lease,
                                    format_args!(
                                        "a commit's answer was lost and its lease {sent_on:x} \
                                         with it: outcome unknown"
                                    ),
                                )),
                            },
                        };
                    }
                    Ok(Err(e)) => match classify(&e) {
                        Fail::Fatal(x) => return Err(x),
                        // The fence's lease was replaced: put it on the
                        // new one.
                        Fail::LeaseGone => self.lease_refused().await,
                        Fail::Transient => {}
                    },
                    Err(_) => {}
                }
            } else {
                sent_on = self.lease_id();
                let t = std::time::Instant::now();
                match tokio::time::timeout(lim, kv.txn(with_lease(ops.clone(), sent_on))).await {
                    Ok(Ok(resp)) => {
                        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                        self.cache.note_read(rev);
                        let st = &self.cache.stats;
                        crate::cache::timed(&st.commits, &st.commit_ns, t);
                        if resp.succeeded() {
                            return Ok((Outcome::Committed(rev), None));
                        }
                        st.conflicts.fetch_add(1, Ordering::Relaxed);
                        let reads = (!or_else.is_empty())
                            .then(|| {
                                resp.op_responses()
                                    .into_iter()
                                    .map(|r| match r {
                                        TxnOpResponse::Get(g) => Some(g),
                                        _ => None,
                                    })
                                    .collect::<Option<Vec<_>>>()
                            })
                            .flatten()
                            .map(|g| (rev, g));
                        return Ok((Outcome::Conflict, reads));
                    }
                    Ok(Err(e)) => match classify(&e) {
                        Fail::Transient => uncertain = true,
                        // Refused as a whole (the lease is checked
                        // before anything applies): not uncertain.
                        Fail::LeaseGone => self.lease_refused().await,
                        Fail::Fatal(x) => return Err(x),
                    },
                    Err(_) => uncertain = true,
                }
            }
            attempt += 1;
            self.transient_pause(attempt).await;
        }
    }

    pub(super) fn committed(&self, rev: i64, recs: &BTreeMap<Ino, (Rec, i64)>, deleted: &[Ino]) {
        for (ino, (rec, _)) in recs {
            if deleted.contains(ino) {
                self.cache.record(*ino, None, rev);
            } else {
                self.cache.record(*ino, Some((rec, rev)), rev);
            }
        }
    }

    pub(super) async fn alloc_ino(&self, dl: Instant) -> Result<Ino> {
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
                Some(kv) => {
                    let cur = match damaged(kv.key(), decode_u64(kv.value())) {
                        Ok(n) => n,
                        Err(_) => self.ino_past_every_record(dl).await?,
                    };
                    (cur, same(key.clone(), kv.mod_revision()))
                }
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

    /// Where inode numbers go on when the counter is damaged (logged by the
    /// caller): 2^32 past the highest inode record, which no number that a
    /// client reserved before the damage and has not used yet can reach
    /// (each holds at most [`INO_BATCH`] below the counter). The
    /// allocation then writes a sound counter over the damaged one.
    async fn ino_past_every_record(&self, dl: Instant) -> Result<Ino> {
        let last = TxnOp::get(
            self.keys.inode_prefix(),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Key, SortOrder::Descend)
                    .with_limit(1)
                    .with_keys_only(),
            ),
        );
        let (_, rs) = self.read(dl, vec![last]).await?;
        let plen = self.keys.inode_prefix().len();
        let high = match rs[0].kvs().first() {
            Some(kv) => std::str::from_utf8(&kv.key()[plen..])
                .ok()
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    eio(
                        Cause::Corrupt,
                        format_args!("inode key {} does not parse", kv.key().escape_ascii()),
                    )
                })?,
            None => ROOT_INO,
        };
        high.checked_add(1 << 32).ok_or(Errno::ENOSPC)
    }

    /// The volume record (`None`: the prefix holds none), linearizably.
    pub(super) async fn volume_record(
        &self,
        dl: Instant,
    ) -> Result<Option<std::result::Result<crate::volume::VolumeRecord, crate::volume::Error>>>
    {
        let (_, rs) = self.read(dl, vec![get(self.keys.volume())]).await?;
        Ok(rs[0]
            .kvs()
            .first()
            .map(|kv| crate::volume::VolumeRecord::decode(kv.value())))
    }

    /// Create the root if it is missing (`format` creates it with the
    /// volume record; an adopted namespace has one): mode 0755, owned by
    /// the process that creates it, as a new memfs is.
    pub(super) async fn init(&self, dl: Instant) -> Result<()> {
        let me = dcache::fs::Ctx::current();
        let mut root = Rec::new(FileType::Directory, 0o755, me.uid, me.gid);
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
}
