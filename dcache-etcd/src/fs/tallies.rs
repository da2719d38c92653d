//! How namespace transactions change a directory through this client's
//! tally instead of its record (`crate::tally`), and the reads that bring
//! a directory's tallies with its record.

use std::sync::Mutex;

use dcache::{Errno, Ino, Result, Timespec};
use etcd_client::{Compare, CompareOp, GetOptions, GetResponse, TxnOp};

use super::client::{absent, damaged, delete, get, get_prefix, put, rec_of, same};
use super::Inner;
use crate::cache::ReadTallies;
use crate::codec::{prefix_end, Rec};
use crate::tally::{apply, Tally, FOLD_AT};

/// The most tallies one transaction folds (etcd takes at most 128
/// operations in one, `--max-txn-ops`).
pub(super) const FOLD_BATCH: usize = 100;

/// Where the slots (readdir cookies) of entries made without writing
/// their directory's record start: such an entry's slot is this plus a
/// number from the inode allocator, unique in the volume, so clients
/// need not agree on a per-directory counter. The record's `next_slot`
/// (below this) is what clients before tallies used.
pub(super) const SLOT_BASE: u64 = 1 << 48;

/// A pool of lanes: a number held by each operation in flight, so that
/// no two of them write one tally (each would fail the other's compare)
/// or, in a pool of its own, one commit marker (`client::commit_seq`). As
/// many as the most operations ever in flight at once.
#[derive(Default)]
pub(super) struct Lanes(Mutex<(Vec<u16>, u16)>);

pub(super) struct Lane<'a> {
    lanes: &'a Lanes,
    pub n: u16,
}

impl Lanes {
    pub fn take(&self) -> Lane<'_> {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = match l.0.pop() {
            Some(n) => n,
            None => {
                // Past 65,536 operations at once, lanes are shared. Their
                // tallies' compares make them take turns (never miscount);
                // a lost answer may then be read as a conflict, as with
                // one marker per client.
                let n = l.1;
                l.1 = l.1.wrapping_add(1);
                n
            }
        };
        Lane { lanes: self, n }
    }
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        let mut l = self.lanes.0.lock().unwrap_or_else(|e| e.into_inner());
        l.0.push(self.n);
    }
}

/// This operation's change to one directory, through its lane's tally.
pub(super) struct DirChange {
    pub dir: Ino,
    pub key: Vec<u8>,
    /// The tally as read, and its mod_revision (`None`: absent).
    pub read: Option<(Tally, i64)>,
    pub size: i64,
    pub nlink: i64,
}

impl DirChange {
    /// The compare that the tally is still as read.
    pub fn compare(&self) -> Compare {
        match self.read {
            Some((_, mr)) => same(self.key.clone(), mr),
            None => absent(self.key.clone()),
        }
    }

    /// The tally after this change at `now`.
    pub fn tally(&self, now: Timespec) -> Tally {
        let t = self.read.map(|r| r.0).unwrap_or_default();
        t.changed(self.size, self.nlink, now)
    }
}

/// A compare that the keys starting with `prefix` are none (etcd compares
/// every key of a range, and an empty range as one absent key).
pub(super) fn none_under(prefix: Vec<u8>) -> Compare {
    let end = prefix_end(&prefix);
    Compare::version(prefix, CompareOp::Equal, 0).with_range(end)
}

impl Inner {
    /// This client's tally of `dir` in `lane`.
    pub(super) fn tally_key(&self, dir: Ino, lane: &Lane<'_>) -> Vec<u8> {
        self.keys.tally(dir, &self.client_id, lane.n)
    }

    /// A change to `dir` from the tally read in `r`.
    pub(super) fn dir_change(&self, dir: Ino, key: Vec<u8>, r: &GetResponse) -> Result<DirChange> {
        // A damaged tally (logged with its key) is replaced by this change,
        // as if it had held nothing: the directory's creates go on, its
        // size and link count lose what the damaged tally counted.
        let read = r.kvs().first().map(|kv| {
            let t = damaged(kv.key(), Tally::decode(kv.value())).unwrap_or_default();
            (t, kv.mod_revision())
        });
        Ok(DirChange {
            dir,
            key,
            read,
            size: 0,
            nlink: 0,
        })
    }

    /// The compares and puts of `changes` at `now` (one per directory),
    /// and the tallies to mirror once committed.
    pub(super) fn tally_ops(
        &self,
        changes: &[DirChange],
        now: Timespec,
        cmps: &mut Vec<Compare>,
        ops: &mut Vec<TxnOp>,
    ) -> Vec<(Ino, Vec<u8>, Tally)> {
        let mut out = Vec::with_capacity(changes.len());
        for c in changes {
            let t = c.tally(now);
            cmps.push(c.compare());
            ops.push(put(c.key.clone(), t.encode()));
            out.push((c.dir, c.key.clone(), t));
        }
        out
    }

    /// Mirror tallies this client committed at `rev`.
    pub(super) fn tallies_committed(&self, rev: i64, tallies: Vec<(Ino, Vec<u8>, Tally)>) {
        for (dir, key, t) in tallies {
            self.cache.tally(dir, &key, Some(t), rev, false);
        }
    }

    /// Read every tally of `ino` (none for anything but a directory).
    pub(super) fn tallies_read(&self, ino: Ino) -> TxnOp {
        get_prefix(self.keys.tallies(ino))
    }

    /// The ops that delete a removed directory's tallies, and the compare
    /// that it has no entries.
    pub(super) fn removed_dir(&self, dir: Ino, cmps: &mut Vec<Compare>, ops: &mut Vec<TxnOp>) {
        cmps.push(none_under(self.keys.entries(dir)));
        ops.push(TxnOp::delete(
            self.keys.tallies(dir),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        ));
    }

    /// The record of `ino` from etcd with a directory's tallies applied,
    /// both mirrored.
    pub(super) async fn fetch(&self, dl: std::time::Instant, ino: Ino) -> Result<Rec> {
        let (rev, rs) = self
            .read(dl, vec![get(self.keys.inode(ino)), self.tallies_read(ino)])
            .await?;
        match rec_of(&rs[0])? {
            Some((mut rec, mr)) => {
                let ts = tallies_of(&rs[1])?;
                if ts.len() > FOLD_AT {
                    // Best effort: the answer below stands either way.
                    let _ = self.fold_dir(ino).await;
                }
                if rec.is_dir() {
                    self.cache
                        .record_parts(ino, Some((&rec, mr)), Some(ts.clone()), rev);
                    apply(&mut rec, ts.iter().map(|t| &t.1));
                } else {
                    self.cache.record(ino, Some((&rec, mr)), rev);
                }
                Ok(rec)
            }
            None => {
                self.cache.record(ino, None, rev);
                Err(Errno::ENOENT)
            }
        }
    }

    /// Fold the tallies of `dir` into its record until at most
    /// [`FOLD_BATCH`] are left; a change racing it wins, and a later read
    /// folds again.
    pub(super) async fn fold_dir(&self, dir: Ino) -> Result<()> {
        let dl = self.deadline();
        let dkey = self.keys.inode(dir);
        loop {
            let (rev, rs) = self
                .read(dl, vec![get(dkey.clone()), self.tallies_read(dir)])
                .await?;
            let Some((mut rec, mr)) = rec_of(&rs[0])? else {
                return Ok(());
            };
            let mut cmps = vec![same(dkey.clone(), mr)];
            let mut ops = Vec::new();
            let all = self.fold(dir, &mut rec, &rs[1], rev, &mut cmps, &mut ops)?;
            ops.push(put(dkey.clone(), rec.encode()));
            let super::client::Outcome::Committed(rev) = self.commit(dl, cmps, ops).await? else {
                return Ok(());
            };
            if all {
                self.cache
                    .record_parts(dir, Some((&rec, rev)), Some(Vec::new()), rev);
                return Ok(());
            }
        }
    }

    /// The latest revision of `ino`'s record or any of its tallies (None:
    /// gone), asked of etcd: a name cached in a directory since then is
    /// current (every change to its entries puts a tally or the record).
    pub(super) async fn remote_rev(&self, ino: Ino) -> Result<Option<i64>> {
        let dl = self.deadline();
        let keys_only = GetOptions::new().with_prefix().with_keys_only();
        let (_, rs) = self
            .read(
                dl,
                vec![
                    get(self.keys.inode(ino)),
                    TxnOp::get(self.keys.tallies(ino), Some(keys_only)),
                ],
            )
            .await?;
        Ok(rs[0].kvs().first().map(|kv| {
            rs[1]
                .kvs()
                .iter()
                .map(|t| t.mod_revision())
                .fold(kv.mod_revision(), i64::max)
        }))
    }

    /// Fold the tallies of directory `ino`, as read in `r` at `read_rev`,
    /// into `rec` (about to be written), at most [`FOLD_BATCH`] of them: a
    /// compare that no tally changed or appeared since, and ops that
    /// delete those folded. Returns whether that was all of them.
    pub(super) fn fold(
        &self,
        ino: Ino,
        rec: &mut Rec,
        r: &GetResponse,
        read_rev: i64,
        cmps: &mut Vec<Compare>,
        ops: &mut Vec<TxnOp>,
    ) -> Result<bool> {
        let mut ts = tallies_of(r)?;
        let all = ts.len() <= FOLD_BATCH;
        ts.truncate(FOLD_BATCH);
        apply(rec, ts.iter().map(|t| &t.1));
        let prefix = self.keys.tallies(ino);
        let end = prefix_end(&prefix);
        cmps.push(
            Compare::mod_revision(prefix, CompareOp::Less, read_rev.saturating_add(1))
                .with_range(end),
        );
        for (key, _, _) in ts {
            ops.push(delete(key));
        }
        Ok(all)
    }
}

/// The tallies a prefix read returned. A damaged one (logged with its key)
/// counts as empty: the directory's attributes lose what it counted, and
/// everything else about the directory works.
pub(super) fn tallies_of(r: &GetResponse) -> Result<ReadTallies> {
    Ok(r.kvs()
        .iter()
        .map(|kv| {
            let t = damaged(kv.key(), Tally::decode(kv.value())).unwrap_or_default();
            (kv.key().to_vec(), t, kv.mod_revision())
        })
        .collect())
}
