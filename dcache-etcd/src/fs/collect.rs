//! The collector every client of an object-store volume runs in the
//! background: objects in garbage records (`P/a/g/`) and the lists and
//! objects of removed inodes (`P/a/i/`) are deleted once they are older
//! than [`Options::gc_grace`](crate::Options::gc_grace), so a reader that
//! read a list before the change can still fetch what it names. Objects
//! go first, then the keys that name them; each step can be repeated, so
//! two clients collecting at once, or a client that dies midway, leave
//! nothing wrong behind.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{DeleteOptions, GetOptions, TxnOp};
use futures_util::stream::{self, StreamExt};
use object_store::path::Path;

use super::client::{delete, same, Outcome};
use super::Inner;
use crate::codec::{decode_u64, prefix_end, Keys};
use crate::slices::{self, Garbage};
use dcache::{Errno, Result};

impl Inner {
    pub(super) async fn collect_loop(self: Arc<Inner>) {
        let every =
            (self.opts.gc_grace / 4).clamp(Duration::from_millis(50), Duration::from_secs(10));
        loop {
            tokio::time::sleep(every).await;
            let _ = self.collect_once().await;
        }
    }

    /// One pass over the garbage that is due; how many objects it deleted.
    pub(super) async fn collect_once(&self) -> Result<u64> {
        let grace = self.opts.gc_grace.as_millis() as u64;
        let now = slices::now_ms();
        let dl = self.deadline();
        let page = |p: Vec<u8>, n| {
            let end = prefix_end(&p);
            TxnOp::get(p, Some(GetOptions::new().with_range(end).with_limit(n)))
        };
        let reads = vec![
            page(self.keys.all_garbage(), 64),
            // Dead inodes still open are skipped, so a page holds more
            // than a pass is likely to reclaim.
            page(self.keys.dead_inodes(), 256),
        ];
        let (_, rs) = self.read(dl, reads).await?;
        let mut deleted = 0;
        for kv in rs[0].kvs() {
            // A record this build cannot read is left for a newer one.
            let Ok(g) = Garbage::decode(kv.value()) else {
                continue;
            };
            if now < g.dropped_ms.saturating_add(grace) {
                continue;
            }
            deleted += self.delete_objects(&g.ids).await?;
            let key = kv.key().to_vec();
            let _ = self
                .commit(
                    dl,
                    vec![same(key.clone(), kv.mod_revision())],
                    vec![delete(key)],
                )
                .await?;
        }
        for kv in rs[1].kvs() {
            let Ok(at) = decode_u64(kv.value()) else {
                continue;
            };
            let Some(ino) = Keys::parse_tail(kv.key()) else {
                continue;
            };
            if now < at.saturating_add(grace) {
                continue;
            }
            // Still open somewhere: left for a later pass (the records go
            // at the last close, or with their client's lease).
            let ask = TxnOp::get(
                self.keys.open_records(ino),
                Some(GetOptions::new().with_prefix().with_count_only()),
            );
            let (_, open) = self.read(dl, vec![ask]).await?;
            if open[0].count() > 0 {
                continue;
            }
            deleted += self.collect_inode(ino).await?;
            let key = kv.key().to_vec();
            // The inode record (kept, nlink 0, for open files) goes last.
            let _ = self
                .commit(
                    dl,
                    vec![same(key.clone(), kv.mod_revision())],
                    vec![
                        delete(key),
                        delete(self.keys.inode(ino)),
                        delete(self.keys.linkable(ino)),
                    ],
                )
                .await?;
        }
        Ok(deleted)
    }

    /// Delete a removed inode's objects and lists, a page at a time.
    async fn collect_inode(&self, ino: dcache::Ino) -> Result<u64> {
        let prefix = self.keys.slice_lists(ino);
        let end = prefix_end(&prefix);
        let mut deleted = 0;
        loop {
            let dl = self.deadline();
            let page = TxnOp::get(
                prefix.clone(),
                Some(GetOptions::new().with_range(end.clone()).with_limit(64)),
            );
            let (_, rs) = self.read(dl, vec![page]).await?;
            let kvs = rs[0].kvs();
            let (Some(first), Some(last)) = (kvs.first(), kvs.last()) else {
                return Ok(deleted);
            };
            let mut ids = Vec::new();
            for kv in kvs {
                // An unreadable list names nothing this build can delete.
                if let Ok(l) = slices::decode(kv.value()) {
                    ids.extend(l.iter().map(|s| s.id));
                }
            }
            ids.sort_unstable();
            ids.dedup();
            deleted += self.delete_objects(&ids).await?;
            let mut upto = last.key().to_vec();
            upto.push(0);
            let op = TxnOp::delete(
                first.key().to_vec(),
                Some(DeleteOptions::new().with_range(upto)),
            );
            if let Outcome::Conflict = self.commit(dl, vec![], vec![op]).await? {
                return Err(Errno::EIO);
            }
        }
    }

    /// Delete objects (one already gone counts as deleted).
    async fn delete_objects(&self, ids: &[u64]) -> Result<u64> {
        let o = self.objects()?;
        let dels = stream::iter(ids.iter().copied().map(|id| {
            let path = Path::from(slices::object_path(&o.uuid, id));
            let store = o.store.clone();
            async move {
                match store.delete(&path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        }))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
        if dels.iter().any(|r| r.is_err()) {
            return Err(Errno::EIO);
        }
        Ok(ids.len() as u64)
    }
}
