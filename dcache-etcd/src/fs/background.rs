//! Background tasks of [`Inner`], spawned on the client's runtime at
//! connect: the fences that tell how current the watch is (see
//! `crate::progress`), the watch that keeps the cache coherent and reports
//! other clients' changes, and the endpoint health probe that takes dead
//! members out of the balancer. (The session lease's task is in `lease`.)

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};

use super::client::get;
use super::{Change, Inner};
use crate::codec::{Rec, ROOT_INO};

/// The largest watch response taken (see `watch_loop`). etcd batches at
/// most 1000 revisions into one catch-up response; a revision puts at
/// most four inode records (a rename's) of at most 133 KiB each, plus
/// small entry keys: under 600 MiB.
const WATCH_MESSAGE_MAX: usize = 1 << 30;

impl Inner {
    /// Every `progress_every`: a fence (the time, then a linearizable
    /// read's revision), caught up with by the watch's events or, where
    /// the server orders them, by a progress notification requested now.
    pub(super) async fn fence_loop(self: Arc<Inner>) {
        let key = self.keys.inode(ROOT_INO);
        let every = self.opts.progress_every();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            // Taken before the read is sent: the read's revision covers
            // every change committed before this instant.
            let t0 = self.cache.now_ns();
            let mut kv = self.client.kv_client();
            let lim = self.opts.timeout.min(every * 4);
            // Linearizable (the default); count only: nothing is sent back.
            let read = kv.get(key.clone(), Some(GetOptions::new().with_count_only()));
            let Ok(Ok(resp)) = tokio::time::timeout(lim, read).await else {
                continue;
            };
            let Some(rev) = resp.header().map(|h| h.revision()) else {
                continue;
            };
            if !self.cache.fence(t0, rev) && self.progress_trusted {
                self.progress_wanted.notify_one();
            }
        }
    }

    pub(super) async fn watch_loop(self: Arc<Inner>) {
        let markers = self.keys.op_markers(&self.client_id);
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
            // A response catching up on many revisions carries every
            // record they put, attributes included: past tonic's 4 MiB
            // default, the stream would fail on it at every restart and
            // the watch would never be current again.
            let mut wc = self
                .client
                .watch_client()
                .max_decoding_message_size(WATCH_MESSAGE_MAX);
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
            let (mut tx, mut rx) = stream.split();
            loop {
                let msg = tokio::select! {
                    m = rx.message() => m,
                    _ = self.progress_wanted.notified() => {
                        if tx.request_progress().await.is_err() {
                            break;
                        }
                        continue;
                    }
                };
                let Ok(Some(resp)) = msg else { break };
                if resp.canceled() {
                    if resp.compact_revision() > 0 {
                        self.resync().await;
                    }
                    break;
                }
                // A transaction's events come in one response, its marker
                // put among them when it is this client's own: those
                // changes went through this client's Vfs already.
                // (revision, the marker's value: the commit's sequence number)
                let own: Vec<(i64, u64)> = resp
                    .events()
                    .iter()
                    .filter_map(|ev| ev.kv())
                    .filter(|kv| kv.key().starts_with(&markers))
                    .map(|kv| {
                        let seq = kv.value().try_into().map_or(0, u64::from_le_bytes);
                        (kv.mod_revision(), seq)
                    })
                    .collect();
                if resp.events().is_empty() {
                    // A progress notification (or the creation's answer).
                    if !resp.created() {
                        self.cache
                            .stats
                            .progress_notifications
                            .fetch_add(1, Ordering::Relaxed);
                        // Only from a server that sends it after every
                        // event up to its revision (crate::progress).
                        if self.progress_trusted {
                            if let Some(h) = resp.header() {
                                self.cache.passed(h.revision());
                                self.cache.caught_up();
                            }
                        }
                    }
                    continue;
                }
                self.cache
                    .stats
                    .key_events
                    .fetch_add(resp.events().len() as u64, Ordering::Relaxed);
                let mut changes = Vec::new();
                let mut unlocked = Vec::new();
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    let rev = kv.mod_revision();
                    let seq = own.iter().find(|o| o.0 == rev).map(|o| o.1);
                    let theirs = seq.is_none();
                    if let Some(ino) = self.keys.parse_inode(kv.key()) {
                        let rec = match ev.event_type() {
                            EventType::Put => Rec::decode(kv.value()).ok(),
                            EventType::Delete => None,
                        };
                        if theirs && rec.is_some() {
                            changes.push(Change::Inode(ino));
                        }
                        self.cache.event(ino, rec, rev);
                    } else if let Some(dir) = self.keys.parse_tally(kv.key()) {
                        let tally = match ev.event_type() {
                            EventType::Put => crate::tally::Tally::decode(kv.value()).ok(),
                            EventType::Delete => None,
                        };
                        // Another client's: the directory's attributes
                        // changed (its size, links or times).
                        if theirs && tally.is_some() {
                            changes.push(Change::Inode(dir));
                        }
                        self.cache.tally(dir, kv.key(), tally, rev, true);
                    } else if let Some((dir, name)) = self.keys.parse_entry(kv.key()) {
                        // Reported unless this client's dcache applied it.
                        if self.cache.entry_event(dir, rev, seq) {
                            changes.push(Change::Entry(dir, name.to_vec()));
                        }
                    } else {
                        self.cache.passed(rev);
                        if let Some(ino) = crate::locks::parse_key(&self.keys, kv.key()) {
                            unlocked.push(ino);
                        }
                    }
                }
                // A lock record put or deleted (a lease expiring too):
                // whoever waits on the inode tries again.
                for ino in unlocked.drain(..) {
                    self.lock_wakers.wake(ino);
                }
                for &(_, seq) in &own {
                    self.cache.own_delivered(seq);
                }
                // Every event up to the response's last is applied: the
                // fences it reaches hold.
                self.cache.caught_up();
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
                // Release: a lock grant that reads it then queues a
                // barrier behind these reports (`locks`).
                if let Some(last) = resp
                    .events()
                    .iter()
                    .filter_map(|e| e.kv())
                    .map(|kv| kv.mod_revision())
                    .max()
                {
                    self.reported.fetch_max(last, Ordering::Release);
                    self.reported_moved.notify_waiters();
                }
            }
        }
    }

    /// Endpoint health: every 250 ms, probe every member at once (a
    /// status request, so a frozen member gives none, and one that has
    /// lost its quorum still answers). When none answers and none accepts
    /// a connection either (`probe_member`: slow is not down), operations
    /// fail fast (`Inner::unreachable_for`, used by `attempt_limit`).
    /// With several members, take the ones that do not answer the status
    /// request out of the client's balancer, so requests stop being sent
    /// there, and put them back when they answer again; at least one
    /// endpoint always stays in.
    /// `out`: the endpoints connect already took out of the balancer.
    pub(super) async fn health_loop(self: Arc<Inner>, endpoints: Vec<String>, mut out: Vec<bool>) {
        let probe_every = Duration::from_millis(250);
        let mut probes: Vec<Option<Client>> = vec![None; endpoints.len()];
        loop {
            tokio::time::sleep(probe_every).await;
            let ups = futures_util::future::join_all(
                probes
                    .iter_mut()
                    .zip(&endpoints)
                    .map(|(probe, ep)| probe_member(probe, ep)),
            )
            .await;
            self.note_answers(ups.iter().any(|h| h.alive));
            if endpoints.len() < 2 {
                continue;
            }
            for (i, (ep, h)) in endpoints.iter().zip(&ups).enumerate() {
                let up = h.answered;
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

    /// Record one health round: whether any member answered.
    fn note_answers(&self, any: bool) {
        // Relaxed: a hint read by requests deciding whether to give up
        // early; no other memory is published through it.
        if any {
            let was = self.silent_since.swap(0, Ordering::Relaxed);
            if was != 0 {
                let for_ = Duration::from_nanos(self.cache.now_ns().saturating_sub(was));
                crate::log::notice(format_args!(
                    "etcd answers again (no member had answered for {for_:.1?})"
                ));
            }
        } else {
            let now = self.cache.now_ns().max(1);
            if self
                .silent_since
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                crate::log::notice(format_args!(
                    "no etcd member answers its health probe or accepts a connection \
                     (each waited {PROBE_LIMIT:?})"
                ));
            }
        }
    }

    /// How long no member has answered a health probe (`None`: one did
    /// in the last round).
    pub(super) fn unreachable_for(&self) -> Option<Duration> {
        // Relaxed: see `note_answers`.
        match self.silent_since.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Duration::from_nanos(self.cache.now_ns().saturating_sub(t))),
        }
    }

    /// After a compaction gap: forget what the watch can no longer bring
    /// up to date, and resume from the current revision.
    async fn resync(&self) {
        loop {
            let dl = self.deadline();
            if let Ok((rev, _)) = self.read(dl, vec![get(self.keys.inode(ROOT_INO))]).await {
                self.cache.reset(rev);
                self.reported.fetch_max(rev, Ordering::Release);
                self.reported_moved.notify_waiters();
                // Lock events in the gap are lost: every waiter retries.
                self.lock_wakers.wake_all();
                return;
            }
            // Paced: with no member answering, a read fails at once.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// How long a health probe waits for a member's connect, and then for
/// its status: past it the member is taken out of the balancer.
const STATUS_LIMIT: Duration = Duration::from_millis(400);
/// How long a probe that got no status waits for a TCP connection to the
/// member: past it (or refused) the member counts as down.
pub(super) const PROBE_LIMIT: Duration = Duration::from_secs(2);

/// What one probe of a member found.
struct Health {
    /// It answered a status request: requests may go there.
    answered: bool,
    /// It answered, or at least accepted a TCP connection: alive, if slow.
    alive: bool,
}

/// One member's health probe: connect (kept in `probe` for the next
/// round) and ask its status, [`STATUS_LIMIT`] for each. A member that
/// gives no status but still accepts a TCP connection is slow, not down
/// (a stalled fsync, a frozen or starved process): it counts as alive,
/// and requests wait for it up to the operation's timeout. Only a member
/// that refuses connections, or that cannot be reached at all within the
/// limit (a partition, a host gone), is down.
async fn probe_member(probe: &mut Option<Client>, ep: &str) -> Health {
    let limit = STATUS_LIMIT;
    if probe.is_none() {
        let opts = crate::spec::connect_options(&[ep], limit).ok();
        if let Ok(Ok(c)) = tokio::time::timeout(limit, Client::connect([ep], opts)).await {
            *probe = Some(c);
        }
    }
    let up = match probe {
        Some(c) => matches!(tokio::time::timeout(limit, c.status()).await, Ok(Ok(_))),
        None => false,
    };
    if up {
        return Health {
            answered: true,
            alive: true,
        };
    }
    *probe = None;
    Health {
        answered: false,
        alive: accepts(ep, PROBE_LIMIT).await,
    }
}

/// Whether the member at endpoint `ep` (`http[s]://HOST:PORT`) accepts a
/// TCP connection within `limit`.
async fn accepts(ep: &str, limit: Duration) -> bool {
    let rest = ep.split_once("://").map_or(ep, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    matches!(
        tokio::time::timeout(limit, tokio::net::TcpStream::connect(authority)).await,
        Ok(Ok(_))
    )
}
