//! The client's session: one etcd lease granted at connect, kept alive
//! with the LeaseKeepAlive stream, carrying the session record
//! `P/s/<client>` and the marker keys `P/o/<client>/m/<lane>`. A client that
//! crashes or is cut off for longer than [`Options::lease_ttl`] leaves
//! neither behind (etcd deletes a lease's keys when it expires); one that
//! is dropped revokes it.
//!
//! [`Options::lease_ttl`]: crate::Options::lease_ttl

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::PutOptions;

use super::Inner;
use crate::session::SessionRecord;

impl Inner {
    /// The lease this client's keys are put on now.
    pub(super) fn lease_id(&self) -> i64 {
        // Acquire: pairs with the Release in `open_session`; the session
        // record was written on the lease before it is used.
        self.lease.load(Ordering::Acquire)
    }

    /// Grant a lease and write the session record on it; retried until
    /// `dl` (EIO past it).
    pub(super) async fn open_session(&self, dl: Instant) -> dcache::Result<i64> {
        let ttl = self.opts.lease_ttl_secs();
        let record = SessionRecord::current().encode();
        let key = self.keys.session(&self.client_id);
        let mut attempt = 0;
        loop {
            let lim = self.attempt_limit(dl)?;
            let mut lc = self.client.lease_client();
            let mut kv = self.client.kv_client();
            let granted = async {
                let g = lc.grant(ttl, None).await?;
                let opts = PutOptions::new().with_lease(g.id());
                kv.put(key.clone(), record.clone(), Some(opts)).await?;
                Ok::<_, etcd_client::Error>(g.id())
            };
            if let Ok(Ok(id)) = tokio::time::timeout(lim, granted).await {
                self.lease.store(id, Ordering::Release);
                return Ok(id);
            }
            // A grant whose put failed expires by itself.
            attempt += 1;
            self.pause(attempt).await;
        }
    }

    /// Keep the lease alive every third of its TTL; when it is found
    /// expired (the client was cut off longer than the TTL, or a commit
    /// was refused for it), grant a new one and write the record again.
    pub(super) async fn lease_loop(self: Arc<Inner>) {
        let every = Duration::from_secs(self.opts.lease_ttl_secs() as u64) / 3;
        let lim = self.opts.timeout.min(every);
        loop {
            let id = self.lease_id();
            let mut lc = self.client.lease_client();
            // Opening the stream renews once and reads the answer (an
            // error when etcd no longer knows the lease).
            let expired = match tokio::time::timeout(lim, lc.keep_alive(id)).await {
                Ok(Ok((mut keeper, mut stream))) => loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = self.lease_gone.notified() => {}
                    }
                    if keeper.keep_alive().await.is_err() {
                        break false;
                    }
                    match tokio::time::timeout(lim, stream.message()).await {
                        Ok(Ok(Some(r))) if r.ttl() > 0 => {}
                        // TTL 0: etcd no longer knows the lease.
                        Ok(Ok(Some(_))) => break true,
                        // The stream broke or the member did not answer:
                        // open another (perhaps to another member).
                        _ => break false,
                    }
                },
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(m))) => m.contains("not found"),
                _ => false,
            };
            if expired {
                self.cache
                    .stats
                    .lease_renewals
                    .fetch_add(1, Ordering::Relaxed);
                let locked = self.held.inodes();
                crate::log::failure(
                    crate::log::Cause::Lease,
                    format_args!(
                        "session lease {id:x} expired (cut off longer than its TTL): \
                         its locks on {locked} files are lost, writes made under them \
                         are refused; a new session is opened"
                    ),
                );
                // Paced: with no member answering, a try fails at once.
                while self.open_session(self.deadline()).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// A request was refused because its lease is gone: wake the lease
    /// loop to put a new one in place, and give it a moment before the
    /// caller tries again.
    pub(super) async fn lease_refused(&self) {
        self.lease_gone.notify_one();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    /// Whether etcd still knows lease `id` (`None`: no answer in `lim`).
    pub(super) async fn lease_alive(&self, lim: Duration, id: i64) -> Option<bool> {
        let mut lc = self.client.lease_client();
        match tokio::time::timeout(lim, lc.time_to_live(id, None)).await {
            Ok(Ok(r)) => Some(r.ttl() > 0),
            _ => None,
        }
    }

    /// Revoke the lease (the session record and marker go with it). Best
    /// effort, within `lim`: otherwise they expire after the TTL.
    pub(super) async fn close_session(&self, lim: Duration) {
        let mut lc = self.client.lease_client();
        let _ = tokio::time::timeout(lim, lc.revoke(self.lease_id())).await;
    }
}
