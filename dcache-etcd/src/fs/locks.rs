//! File locks for [`Inner`]: F_GETLK, F_SETLK (never blocking) and the
//! releases at close, as records under `P/l/<ino>/` (`crate::locks`).
//!
//! A change reads every lock record of the inode at one revision `R`
//! (one linearizable range read), decides with the same semantics as a
//! local table ([`InodeLocks`]: conflicts, splitting, merging, `flock`
//! conversion), and commits the owner's new record (or its deletion) in
//! a transaction that compares every key under the inode's lock prefix
//! to a `mod_revision` of at most `R`: a lock another client took, or any
//! change of this owner's record since the read, fails the compare and
//! the change is read and decided again. (A record deleted meanwhile
//! fails nothing: it only frees what the decision already allowed.) The
//! outcome of a commit whose answer was lost is found the same way: the
//! next read shows the owner's record as written or not, and deciding
//! again from it is idempotent.
//!
//! Records go on the session lease: a client that crashes or is cut off
//! past the TTL loses them. Waiters (`FileSystem::wake_on_unlock`) are
//! woken by the watch, which sees every lock key's put and delete (a
//! lease expiring included), and at once by this client's own releases.

use std::time::Instant;

use dcache::fs::lock::{FileLock, InodeLocks, LockOwner, LockRelease};
use dcache::{Errno, Ino, Result};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use super::client::{classify, Fail};
use super::{Change, Inner};
use crate::locks::{client_hash, decode_into, encode, inode_end, inode_prefix, owner_key};

impl Inner {
    fn me(&self) -> u64 {
        client_hash(&self.client_id)
    }

    /// Every lock on `ino`, and the revision it was read at.
    async fn lock_state(&self, dl: Instant, ino: Ino) -> Result<(i64, InodeLocks)> {
        let prefix = inode_prefix(&self.keys, ino);
        let get = TxnOp::get(
            prefix.clone(),
            Some(GetOptions::new().with_range(inode_end(&self.keys, ino))),
        );
        let (rev, rs) = self.read(dl, vec![get]).await?;
        let mut l = InodeLocks::new();
        for kv in rs[0].kvs() {
            decode_into(&mut l, &prefix, kv.key(), kv.value())?;
        }
        Ok((rev, l))
    }

    pub(super) async fn getlk(
        &self,
        ino: Ino,
        who: &LockOwner,
        want: &FileLock,
    ) -> Result<Option<FileLock>> {
        let (_, l) = self.lock_state(self.deadline(), ino).await?;
        Ok(l.conflict(self.me(), who, want).map(|h| h.as_file_lock()))
    }

    pub(super) async fn setlk(&self, ino: Ino, who: &LockOwner, want: &FileLock) -> Result<()> {
        let dl = self.deadline();
        let me = self.me();
        let mut attempt = 0;
        loop {
            let (rev, mut l) = self.lock_state(dl, ino).await?;
            let before = l.owned_by(me, who);
            let (r, released) = l.set_reporting(me, who, want);
            let after = l.owned_by(me, who);
            if before == after {
                return r;
            }
            let key = owner_key(&self.keys, ino, &self.client_id, who.id, who.flavor);
            let write = [(key, after)];
            if let Some(at) = self.commit_locks(dl, ino, rev, &write).await? {
                if released {
                    self.lock_wakers.wake(ino);
                }
                if r.is_ok() && want.kind.is_some() {
                    self.catch_up_to(at, dl).await;
                }
                return r;
            }
            attempt += 1;
            self.pause(attempt).await;
        }
    }

    pub(super) async fn release_locks(&self, ino: Ino, what: LockRelease) -> Result<()> {
        let dl = self.deadline();
        let me = self.me();
        let mut attempt = 0;
        loop {
            let (rev, l) = self.lock_state(dl, ino).await?;
            // This client's owners that lose something.
            let mut write = Vec::new();
            let mut after = l.clone();
            if !after.release(me, what) {
                return Ok(());
            }
            let mut owners: Vec<LockOwner> = l
                .held
                .iter()
                .filter(|h| h.client == me)
                .map(|h| LockOwner {
                    id: h.owner,
                    file: h.file,
                    flavor: h.flavor,
                })
                .collect();
            owners.sort_by_key(|o| (o.id, o.flavor == dcache::fs::lock::Flavor::Flock));
            owners.dedup_by_key(|o| (o.id, o.flavor));
            for o in owners {
                let (b, a) = (l.owned_by(me, &o), after.owned_by(me, &o));
                if b != a {
                    let key = owner_key(&self.keys, ino, &self.client_id, o.id, o.flavor);
                    write.push((key, a));
                }
            }
            if self.commit_locks(dl, ino, rev, &write).await?.is_some() {
                self.lock_wakers.wake(ino);
                return Ok(());
            }
            attempt += 1;
            self.pause(attempt).await;
        }
    }

    /// A lock was granted at revision `at`: wait (until `dl` at most)
    /// for the watch to have applied every change up to it and handed
    /// other clients' changes among them to the report thread, and for
    /// that thread to have reported them to the Vfs (whose listeners, a
    /// FUSE mount's invalidator, have them queued then). So what this
    /// client serves next (attributes from its mirror, names, and through
    /// a mount the kernel's cache once its queue is passed) includes every
    /// change the previous holder made before letting go. Data is read
    /// from etcd anyway.
    async fn catch_up_to(&self, at: i64, dl: Instant) {
        loop {
            // Registered before the check: a move after it is not missed.
            let moved = self.reported_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            // Acquire: pairs with the watch's Release after it applied
            // the events up to it and sent their reports.
            if self.reported.load(std::sync::atomic::Ordering::Acquire) >= at {
                break;
            }
            let left = dl.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, moved).await.is_err() {
                return;
            }
        }
        let Some(tx) = self.inval.get() else { return };
        let (done, passed) = tokio::sync::oneshot::channel();
        if tx.send(Change::Barrier(done)).is_ok() {
            let left = dl.saturating_duration_since(Instant::now());
            let _ = tokio::time::timeout(left, passed).await;
        }
    }

    /// Write each owner record in `write` (deleted when it holds nothing),
    /// on the session lease, if no lock record of `ino` changed since
    /// revision `rev`; the revision it committed at. `None`: a conflict,
    /// or an outcome unknown (the caller reads again and decides again).
    async fn commit_locks(
        &self,
        dl: Instant,
        ino: Ino,
        rev: i64,
        write: &[(Vec<u8>, Vec<dcache::fs::lock::HeldLock>)],
    ) -> Result<Option<i64>> {
        let unchanged =
            Compare::mod_revision(inode_prefix(&self.keys, ino), CompareOp::Less, rev + 1)
                .with_range(inode_end(&self.keys, ino));
        let mut attempt = 0;
        loop {
            let lim = self.attempt_limit(dl)?;
            // The lease in use now (a replaced one is re-read each try).
            let lease = self.lease_id();
            let ops: Vec<TxnOp> = write
                .iter()
                .map(|(k, held)| {
                    if held.is_empty() {
                        TxnOp::delete(k.clone(), None)
                    } else {
                        let opts = PutOptions::new().with_lease(lease);
                        TxnOp::put(k.clone(), encode(held), Some(opts))
                    }
                })
                .collect();
            let txn = Txn::new().when(vec![unchanged.clone()]).and_then(ops);
            let mut kv = self.client.kv_client();
            match tokio::time::timeout(lim, kv.txn(txn)).await {
                Ok(Ok(resp)) => {
                    let r = resp.header().map(|h| h.revision()).unwrap_or(0);
                    self.cache.note_read(r);
                    return Ok(resp.succeeded().then_some(r));
                }
                Ok(Err(e)) => match classify(&e) {
                    // Refused before anything applied: a new lease first.
                    Fail::LeaseGone => self.lease_refused().await,
                    // Maybe applied: decide again from a fresh read.
                    Fail::Transient => return Ok(None),
                    Fail::Fatal(x) => return Err(x),
                },
                Err(_) => return Ok(None),
            }
            attempt += 1;
            if attempt > 100 {
                return Err(Errno::EIO);
            }
        }
    }
}
