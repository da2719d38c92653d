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

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dcache::fs::lock::{FileLock, HeldLock, InodeLocks, LockOwner, LockRelease};
use dcache::{Ino, Result};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use super::client::{classify, damaged, Fail};
use super::objdata::Report;
use super::{Change, Inner};
use crate::locks::{client_hash, decode_into, encode, inode_end, inode_prefix, owner_key};
use crate::log::{eio, Cause};

/// The lock records this client holds, by inode, as its own commits left
/// them: what a flush of the file's data fences on (`objdata`), and
/// whether a release must commit the file's data first.
#[derive(Default)]
pub(super) struct HeldKeys(Mutex<HashMap<Ino, BTreeSet<Vec<u8>>>>);

impl HeldKeys {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Ino, BTreeSet<Vec<u8>>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The keys of this client's lock records on `ino`.
    pub(super) fn keys(&self, ino: Ino) -> Vec<Vec<u8>> {
        self.map()
            .get(&ino)
            .map_or_else(Vec::new, |s| s.iter().cloned().collect())
    }

    /// How many files this client holds locks on.
    pub(super) fn inodes(&self) -> usize {
        self.map().len()
    }

    fn holds(&self, ino: Ino) -> bool {
        self.map().contains_key(&ino)
    }

    /// Whether this client still believes it holds `key` on `ino`: a key
    /// it released is forgotten before the release is sent, so a key
    /// found gone and still believed held was lost, not given back.
    pub(super) fn believes(&self, ino: Ino, key: &[u8]) -> bool {
        self.map().get(&ino).is_some_and(|s| s.contains(key))
    }

    /// Record that `key` now holds `held` (nothing: gone).
    fn set(&self, ino: Ino, key: &[u8], held: bool) {
        let mut m = self.map();
        if held {
            m.entry(ino).or_default().insert(key.to_vec());
        } else if let Some(s) = m.get_mut(&ino) {
            s.remove(key);
            if s.is_empty() {
                m.remove(&ino);
            }
        }
    }
}

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
            damaged(kv.key(), decode_into(&mut l, &prefix, kv.key(), kv.value()))?;
        }
        Ok((rev, l))
    }

    /// A lock record of this client's on `ino` was found gone (its lease
    /// expired while the client was cut off): logged, and forgotten.
    pub(super) fn lock_lost(&self, ino: Ino, key: &[u8]) {
        crate::log::failure(
            Cause::Lease,
            format_args!(
                "lock {} on inode {ino} is gone (the session lease expired): \
                 writes made under it are refused",
                key.escape_ascii()
            ),
        );
        self.held.set(ino, key, false);
    }

    /// Before a lock of this client's on `ino` ends or weakens: commit
    /// what it buffered for the file, so the next holder finds it. A
    /// failure keeps the bytes (marked, so they never land over the next
    /// holder's changes, `objdata::flush_ino`) and does not stop the
    /// release: it is logged, and reported by the next close or fsync.
    async fn hand_over(&self, ino: Ino) {
        if self.held.holds(ino) {
            let _ = self.flush_ino(ino, Report::Keep).await;
        }
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
        // An unlock, or a write lock turned into a read lock: others may
        // read (or lock) what this client wrote under it.
        if !want
            .kind
            .is_some_and(|k| k == dcache::fs::lock::LockType::Write)
        {
            self.hand_over(ino).await;
        }
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
            let write = [(key.clone(), after)];
            if let Some(at) = self.commit_locks(dl, ino, rev, &write).await? {
                if released {
                    self.lock_wakers.wake(ino);
                }
                if r.is_ok() && want.kind.is_some() {
                    if let Err(e) = self.catch_up_to(at, dl).await {
                        // Not granted on a stale view: the lock goes back
                        // to what the owner held before.
                        self.undo_grant(ino, at, key, before).await;
                        return Err(e);
                    }
                }
                return r;
            }
            attempt += 1;
            self.pause(attempt).await;
        }
    }

    pub(super) async fn release_locks(&self, ino: Ino, what: LockRelease) -> Result<()> {
        self.hand_over(ino).await;
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
    /// Out of time: EIO, logged (a lock is never granted on a view not
    /// known to be current).
    async fn catch_up_to(&self, at: i64, dl: Instant) -> Result<()> {
        let stale = || {
            eio(
                Cause::Stale,
                format_args!(
                    "a lock taken at revision {at} was refused: this client's view \
                     did not catch up with it within etcd_timeout"
                ),
            )
        };
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
                return Err(stale());
            }
        }
        let Some(tx) = self.inval.get() else {
            return Ok(());
        };
        let (done, passed) = tokio::sync::oneshot::channel();
        if tx.send(Change::Barrier(done)).is_ok() {
            let left = dl.saturating_duration_since(Instant::now());
            // A closed channel: the report thread is gone, and with it
            // whatever it would have reported to.
            if tokio::time::timeout(left, passed).await.is_err() {
                return Err(stale());
            }
        }
        Ok(())
    }

    /// Put `key` (this owner's record on `ino`) back to `before` after a
    /// grant committed at revision `at` was refused. Best effort, with a
    /// deadline of its own: a failure is logged, and the record goes with
    /// the session lease at the latest.
    async fn undo_grant(&self, ino: Ino, at: i64, key: Vec<u8>, before: Vec<HeldLock>) {
        let dl = Instant::now() + self.opts.timeout.max(Duration::from_secs(1));
        let write = [(key, before)];
        match self.commit_locks(dl, ino, at, &write).await {
            Ok(Some(_)) => self.lock_wakers.wake(ino),
            _ => crate::log::failure(
                Cause::Stale,
                format_args!(
                    "a refused lock on inode {ino} could not be undone: it ends with the session"
                ),
            ),
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
        // Keys given back are forgotten first: a flush of this client's
        // that reads one gone meanwhile must not take it for a lost lock.
        for (k, held) in write {
            if held.is_empty() {
                self.held.set(ino, k, false);
            }
        }
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
                    if resp.succeeded() {
                        for (k, held) in write {
                            self.held.set(ino, k, !held.is_empty());
                        }
                    }
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
                return Err(eio(
                    Cause::Lease,
                    format_args!("a lock change on inode {ino} was refused 100 times for a lease"),
                ));
            }
        }
    }
}
