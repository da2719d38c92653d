//! Open-file records (object-store volumes): which clients have an inode
//! open, so that a file unlinked while open keeps its data for every
//! descriptor on every client.
//!
//! The last unlink of a file keeps its inode record (nlink 0) and writes
//! its dead record `P/a/i/<ino>`; the collector reclaims the inode (its
//! objects, lists and record) only once the dead record is older than
//! `Options::gc_grace` *and* no client has an open record for it. A
//! client keeps one record per inode it has open, `P/a/o/<ino>/<client>`,
//! on its session lease: written by a background task within
//! [`REGISTER_EVERY`] of the first open (no round trip on the open itself)
//! and deleted within as long after the last close. A record is therefore
//! in etcd long before the collector could look (the grace period is at
//! least [`MIN_GRACE`]), and a client that dies takes its records with its
//! lease. The records are outside the watched range: opens and closes
//! cost other clients nothing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dcache::Ino;
use etcd_client::{PutOptions, TxnOp};

use super::client::delete;
use super::Inner;

/// How often the records are brought up to date (at most; sooner after a
/// first open or a last close, batched).
pub(crate) const REGISTER_EVERY: Duration = Duration::from_millis(100);

/// The shortest `gc_grace` an object-store client accepts: many times the
/// time a record takes to reach etcd.
pub(crate) const MIN_GRACE: Duration = Duration::from_secs(1);

/// At most this many puts and deletes per transaction (etcd's default
/// limit is 128 operations).
const OPS_PER_TXN: usize = 100;

#[derive(Default)]
pub(super) struct OpenFiles {
    state: Mutex<State>,
    changed: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    /// This client's open handles per inode.
    counts: HashMap<Ino, u32>,
    /// Inodes whose record is in etcd, and the lease it is on.
    recorded: HashSet<Ino>,
    lease: i64,
}

impl OpenFiles {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle of `ino` was opened.
    pub(super) fn opened(&self, ino: Ino) {
        let mut s = self.state();
        let n = s.counts.entry(ino).or_insert(0);
        *n += 1;
        if *n == 1 && !s.recorded.contains(&ino) {
            self.changed.notify_one();
        }
    }

    /// A handle of `ino` was released.
    pub(super) fn released(&self, ino: Ino) {
        let mut s = self.state();
        let Some(n) = s.counts.get_mut(&ino) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            s.counts.remove(&ino);
            if s.recorded.contains(&ino) {
                self.changed.notify_one();
            }
        }
    }
}

impl Inner {
    /// Whether a file's last unlink keeps its inode record (nlink 0) for
    /// its open descriptors, and opens are recorded: on object-store
    /// volumes, whose collector reclaims it once no client has it open.
    pub(super) fn keeps_unlinked(&self) -> bool {
        self.objects.get().is_some()
    }

    /// Keep this client's open records equal to its open inodes.
    pub(super) async fn open_records_loop(self: Arc<Inner>) {
        loop {
            tokio::select! {
                _ = self.opens.changed.notified() => {}
                _ = tokio::time::sleep(REGISTER_EVERY) => {}
            }
            // Batch what arrives together.
            tokio::time::sleep(Duration::from_millis(5)).await;
            let lease = self.lease_id();
            let (puts, dels) = {
                let mut s = self.opens.state();
                if s.lease != lease {
                    // A new lease: the records on the old one are gone.
                    s.recorded.clear();
                    s.lease = lease;
                }
                let puts: Vec<Ino> = s
                    .counts
                    .keys()
                    .filter(|i| !s.recorded.contains(i))
                    .copied()
                    .collect();
                let dels: Vec<Ino> = s
                    .recorded
                    .iter()
                    .filter(|i| !s.counts.contains_key(i))
                    .copied()
                    .collect();
                (puts, dels)
            };
            if puts.is_empty() && dels.is_empty() {
                continue;
            }
            let opts = PutOptions::new().with_lease(lease);
            let ops: Vec<(Ino, bool, TxnOp)> = puts
                .iter()
                .map(|&i| {
                    let key = self.keys.open_record(i, &self.client_id);
                    (i, true, TxnOp::put(key, Vec::new(), Some(opts.clone())))
                })
                .chain(
                    dels.iter()
                        .map(|&i| (i, false, delete(self.keys.open_record(i, &self.client_id)))),
                )
                .collect();
            for chunk in ops.chunks(OPS_PER_TXN) {
                // With a watched key: the records are outside the watched
                // range, and a revision no watch sees an event at would
                // keep every client's fences waiting (`crate::progress`)
                // until the volume changed again. (Not the commit marker:
                // a lost commit is resolved by reading its value.)
                let marker = TxnOp::put(
                    self.keys.opens_marker(&self.client_id),
                    Vec::new(),
                    Some(opts.clone()),
                );
                let txn = etcd_client::Txn::new().and_then(
                    chunk
                        .iter()
                        .map(|(_, _, op)| op.clone())
                        .chain([marker])
                        .collect::<Vec<_>>(),
                );
                let mut kv = self.client.kv_client();
                let ok = matches!(
                    tokio::time::timeout(self.opts.timeout, kv.txn(txn)).await,
                    Ok(Ok(_))
                );
                if !ok {
                    // Tried again on the next round.
                    break;
                }
                let mut s = self.opens.state();
                if s.lease != lease {
                    break;
                }
                for (i, put, _) in chunk {
                    if *put {
                        s.recorded.insert(*i);
                    } else {
                        s.recorded.remove(i);
                    }
                }
            }
        }
    }
}
