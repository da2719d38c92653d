//! What one client remembers between round trips: the revision each inode
//! was last seen changing at (advanced by the watch), a mirror of the inode
//! records it has read, and how current the watch is known to be.
//!
//! Readers (`revalidate`, `getattr`) use no lock: two lock-free maps and a
//! few atomics. Writers (the watch task, and operations recording what they
//! read or committed) serialise on one mutex, so an operation's record and
//! the watch's events cannot overwrite each other out of revision order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::time::ClockId;

use dcache::{Attr, FileType, Ino};

use crate::codec::Rec;
use crate::own::OwnCommits;
use crate::tally::{DirParts, Tally};
use crate::xattr::Xattrs;

/// A record as this client last saw it.
pub(crate) struct Cached {
    /// As `stat` reports it: a directory's with its tallies applied.
    pub rec: Rec,
    /// The latest revision of its parts (a directory's record or tallies).
    pub mod_rev: i64,
    /// Kept current by the watch: may answer without a round trip. A
    /// record read when the watch had already gone past it is kept only
    /// as the last known state (for a deleted inode's last attributes).
    /// Never set for a directory whose tallies are not known.
    pub live: bool,
    /// A directory's stored record and tallies (`crate::tally`), when a
    /// read brought every tally.
    dir: Option<Box<DirParts>>,
}

impl Cached {
    /// A record kept as it is: never live for a directory, whose tallies
    /// are not known.
    fn plain(rec: Rec, mod_rev: i64, live: bool) -> Cached {
        Cached {
            live: live && !rec.is_dir(),
            rec,
            mod_rev,
            dir: None,
        }
    }

    /// A directory from its stored record and every tally.
    fn dir(parts: Box<DirParts>, mod_rev: i64, live: bool) -> Cached {
        Cached {
            rec: parts.effective(),
            mod_rev,
            live,
            dir: Some(parts),
        }
    }
}

/// The tallies of one directory as read: (key, tally, mod_revision).
pub(crate) type ReadTallies = Vec<(Vec<u8>, Tally, i64)>;

/// Counters for tests and diagnostics (relaxed sums).
#[derive(Debug, Default)]
pub struct CacheStats {
    /// `getattr` that asked etcd. (Answers from the mirror are not
    /// counted: one shared counter written by every cached `stat` was
    /// what kept `stat-same --target etcd` from scaling past 3x.)
    pub attr_misses: AtomicU64,
    /// `revalidate` that had to ask etcd (watch not current).
    pub remote_revalidations: AtomicU64,
    /// Watch events applied to inode records.
    pub events: AtomicU64,
    /// Every key event the watch delivered (records, entries, markers,
    /// session records): what other clients' activity costs this one.
    /// Progress notifications are not key events.
    pub key_events: AtomicU64,
    /// Progress notifications received on the watch.
    pub progress_notifications: AtomicU64,
    /// Currency checks made (a linearizable read each, see `fence`).
    pub fences: AtomicU64,
    /// Times the session lease was found expired and granted again.
    pub lease_renewals: AtomicU64,
    /// Requests that failed without an answer (member down, no leader)
    /// and were retried.
    pub transient_errors: AtomicU64,
    /// Endpoints taken out of the balancer because they did not answer.
    pub endpoints_removed: AtomicU64,
    /// Times the watch had to be re-established.
    pub watch_restarts: AtomicU64,
    /// Times the watch fell behind a compaction (everything revalidated).
    pub resyncs: AtomicU64,
    /// Linearizable reads (`Inner::read`) answered, and the time from
    /// sending each to its answer, summed.
    pub reads: AtomicU64,
    pub read_ns: AtomicU64,
    /// Transactions with compares answered (the time from sending each
    /// to its answer summed in `commit_ns`), and how many of them found
    /// a compare false (a concurrent change: read again, recompute).
    pub commits: AtomicU64,
    pub commit_ns: AtomicU64,
    pub conflicts: AtomicU64,
    /// Reads of a file's slice lists from etcd (object-store volumes; a
    /// read whose lists were kept from an earlier one is not counted).
    pub list_reads: AtomicU64,
    /// Changes by other clients (entries and inode records) reported to
    /// the Vfs, and through it to its frontend (the kernel, for a mount).
    pub invalidations: AtomicU64,
}

/// Count one request in `n` and the time since `start` in `ns` (relaxed
/// sums, as every counter here).
pub(crate) fn timed(n: &AtomicU64, ns: &AtomicU64, start: std::time::Instant) {
    n.fetch_add(1, Ordering::Relaxed);
    ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// How many inodes' revisions `ino_rev` keeps before it is cleared (16
/// bytes each; a client that ran long enough would otherwise keep one for
/// every inode that ever changed).
const PRUNE_AT: usize = 1 << 20;

/// The keys of the per-inode maps are inode numbers: hashed with
/// foldhash (seeded per process) instead of SipHash, which was a sixth of
/// a cached `stat`'s instructions.
type InoMap<V> = papaya::HashMap<Ino, V, foldhash::fast::RandomState>;

/// The clock the staleness bound is checked on, read several times per
/// cached `stat` (once per revalidated component). With a bound of at
/// least [`COARSE_MIN_BOUND`] times its resolution, the coarse monotonic
/// clock (a few ns: no TSC read) is used and its resolution counted
/// against the bound; otherwise the precise one.
struct Clock {
    id: ClockId,
    /// How far a reading may lag the true time (the coarse clock's tick).
    slack_ns: u64,
}

const COARSE_MIN_BOUND: u64 = 8;

fn ns(t: rustix::time::Timespec) -> u64 {
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

impl Clock {
    fn for_bound(bound_ns: u64) -> Clock {
        let res = ns(rustix::time::clock_getres(ClockId::MonotonicCoarse));
        if res > 0 && res.saturating_mul(COARSE_MIN_BOUND) <= bound_ns {
            Clock {
                id: ClockId::MonotonicCoarse,
                slack_ns: res,
            }
        } else {
            Clock {
                id: ClockId::Monotonic,
                slack_ns: 0,
            }
        }
    }

    /// Nanoseconds since boot on this clock, plus one (never 0).
    #[inline]
    fn now_ns(&self) -> u64 {
        ns(rustix::time::clock_gettime(self.id)) + 1
    }
}

pub(crate) struct Cache {
    clock: Clock,
    /// How long after a caught-up fence's stamp the watch counts as current:
    /// the staleness bound less the clock's slack (a coarse reading lags
    /// by up to a tick, counted as elapsed once here, not on every check).
    fresh_for_ns: u64,
    /// ino -> the highest revision at which this client saw its record
    /// or, for a directory, one of its tallies change (put or delete). A
    /// directory's entries change only together with one of those, so
    /// this is also the directory's revision.
    ino_rev: InoMap<i64>,
    /// dir -> the highest revision at which one of its entries changed in
    /// a way this client's dcache did not apply itself: another client's
    /// change, or a commit of this one whose caller was told it failed
    /// (`crate::own`). A name cached in `dir` at a revision at least this
    /// is still true.
    dir_rev: InoMap<i64>,
    recs: InoMap<Cached>,
    /// Lock order: `own`, then `write`.
    own: Mutex<OwnCommits>,
    write: Mutex<()>,
    /// Every watch event up to this revision has been applied.
    pub watched: AtomicI64,
    /// The highest revision a (linearizable) response carried.
    last_read: AtomicI64,
    /// Cached entries whose cookie is below this were recorded before a
    /// gap in the watch and must be looked up again.
    pub floor: AtomicI64,
    /// `ino_rev` entries at or below this revision were dropped, to bound
    /// the map: a record read before it is not taken as live on the word
    /// of `ino_rev` (see `record_parts`).
    pruned: AtomicI64,
    /// `ino_rev` is pruned when it holds more entries than this.
    prune_at: usize,
    /// `now_ns()` of the latest fence the watch has caught up with: every
    /// change committed before then has been applied. 0: never.
    synced_at: AtomicU64,
    /// Fences not yet caught up with: (taken at `now_ns()`, a revision at
    /// least that of every change committed before then), in the order
    /// taken (so both fields grow).
    fences: Mutex<VecDeque<(u64, i64)>>,
    pub stats: CacheStats,
}

impl Cache {
    pub fn new(bound: Duration) -> Cache {
        let bound_ns = bound.as_nanos().min(u64::MAX as u128) as u64;
        let clock = Clock::for_bound(bound_ns);
        Cache {
            // No underflow: a clock with slack is chosen only for a bound
            // of at least COARSE_MIN_BOUND ticks.
            fresh_for_ns: bound_ns - clock.slack_ns,
            clock,
            ino_rev: InoMap::default(),
            dir_rev: InoMap::default(),
            recs: InoMap::default(),
            own: Mutex::default(),
            write: Mutex::new(()),
            watched: AtomicI64::new(0),
            last_read: AtomicI64::new(0),
            floor: AtomicI64::new(0),
            pruned: AtomicI64::new(0),
            prune_at: PRUNE_AT,
            synced_at: AtomicU64::new(0),
            fences: Mutex::new(VecDeque::new()),
            stats: CacheStats::default(),
        }
    }

    /// Nanoseconds on this client's clock (never 0).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Whether the watch is known to have delivered everything committed
    /// up to at most the staleness bound ago.
    #[inline]
    pub fn fresh(&self) -> bool {
        // Acquire: pairs with the Release in `synced`, so the events
        // applied before the fence was caught up with are visible.
        let s = self.synced_at.load(Ordering::Acquire);
        s != 0 && self.now_ns().saturating_sub(s) <= self.fresh_for_ns
    }

    /// How long ago the watch was last known current (`None`: never).
    pub fn lag(&self) -> Option<Duration> {
        let s = self.synced_at.load(Ordering::Acquire);
        (s != 0).then(|| Duration::from_nanos(self.now_ns().saturating_sub(s)))
    }

    /// The cookie for a lookup about to be made: a lookup made after now
    /// reads at a revision at least this (linearizable reads), so what it
    /// finds reflects every change up to it.
    pub fn cookie(&self) -> u64 {
        let w = self.watched.load(Ordering::Acquire);
        let r = self.last_read.load(Ordering::Acquire);
        w.max(r).max(0) as u64
    }

    pub fn note_read(&self, rev: i64) {
        self.last_read.fetch_max(rev, Ordering::AcqRel);
    }

    /// The revision `ino` was last seen changing at (0: not since this
    /// client started watching).
    #[inline]
    pub fn ino_rev(&self, ino: Ino) -> i64 {
        self.ino_rev.pin().get(&ino).copied().unwrap_or(0)
    }

    /// The revision at which an entry of `dir` last changed without this
    /// client's dcache applying the change (0: not since this client
    /// started watching).
    #[inline]
    pub fn dir_rev(&self, dir: Ino) -> i64 {
        self.dir_rev.pin().get(&dir).copied().unwrap_or(0)
    }

    /// A namespace commit with marker value `seq` is about to be sent; the
    /// caller's dcache applies it if it succeeds.
    pub fn own_begin(&self, seq: u64) {
        self.own
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .begin(seq);
    }

    /// That commit ended (`applied`: it succeeded, and its caller applies
    /// it). Entry changes the watch already delivered for a failed one
    /// count as foreign now.
    pub fn own_end(&self, seq: u64, applied: bool) {
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        let foreign = own.end(seq, applied);
        if !foreign.is_empty() {
            let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
            for (dir, rev) in foreign {
                self.raise_dir_rev(dir, rev);
            }
        }
    }

    /// A watch event on an entry of `dir` at `rev`, from this client's
    /// commit `seq` (`None`: another client's). Returns whether this
    /// client's dcache does not have the change (to be reported to it).
    pub fn entry_event(&self, dir: Ino, rev: i64, seq: Option<u64>) -> bool {
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        let foreign = own.entry_changed(seq, dir, rev);
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        if foreign {
            self.raise_dir_rev(dir, rev);
        }
        self.watched.fetch_max(rev, Ordering::AcqRel);
        foreign
    }

    /// The watch delivered every event of this client's commit `seq`.
    pub fn own_delivered(&self, seq: u64) {
        self.own
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .delivered(seq);
    }

    /// Under the write lock.
    fn raise_dir_rev(&self, dir: Ino, rev: i64) {
        let revs = self.dir_rev.pin();
        if revs.get(&dir).is_none_or(|&r| r < rev) {
            revs.insert(dir, rev);
        }
    }

    /// The record of `ino`, if mirrored and the watch is current.
    pub fn attr(&self, ino: Ino) -> Option<Attr> {
        if !self.fresh() {
            return None;
        }
        let m = self.recs.pin();
        let a = m.get(&ino).filter(|c| c.live).map(|c| c.rec.attr(ino));
        drop(m);
        if a.is_some() && self.fresh() {
            return a;
        }
        None
    }

    /// The record of `ino` (a symlink's target), if mirrored and current.
    pub fn rec(&self, ino: Ino) -> Option<Rec> {
        if !self.fresh() {
            return None;
        }
        self.recs
            .pin()
            .get(&ino)
            .filter(|c| c.live)
            .map(|c| c.rec.clone())
    }

    /// The kind and size of `ino` and the revision its record was put
    /// at, if mirrored and current (a file's lists are unchanged while it
    /// is, `fs::lists`). Copied out, not the record: cloning it would
    /// write its shared extended-attribute count on every read.
    pub fn file_at(&self, ino: Ino) -> Option<(FileType, u64, i64)> {
        if !self.fresh() {
            return None;
        }
        let m = self.recs.pin();
        let r = m
            .get(&ino)
            .filter(|c| c.live)
            .map(|c| (c.rec.kind, c.rec.size, c.mod_rev));
        drop(m);
        // Checked again after the read, as `attr` does: the watch may
        // have stopped being current while the record was read.
        r.filter(|_| self.fresh())
    }

    /// The revision of the last record of `ino` this client mirrored,
    /// current or not (what a write buffered now was written against).
    pub fn known_rev(&self, ino: Ino) -> Option<i64> {
        self.recs.pin().get(&ino).map(|c| c.mod_rev)
    }

    /// The extended attributes of `ino`, if mirrored and current (shared:
    /// nothing is copied).
    pub fn xattrs(&self, ino: Ino) -> Option<Arc<Xattrs>> {
        if !self.fresh() {
            return None;
        }
        self.recs
            .pin()
            .get(&ino)
            .filter(|c| c.live)
            .map(|c| c.rec.xattrs.clone())
    }

    /// The last attributes this client knew for `ino`, with `nlink` 0:
    /// what `stat` of a name being removed concurrently may report (as
    /// Linux's can), instead of ENOENT for a dentry the caller holds.
    pub fn last_known(&self, ino: Ino) -> Option<Attr> {
        self.recs.pin().get(&ino).map(|c| {
            let mut a = c.rec.attr(ino);
            a.nlink = 0;
            a
        })
    }

    /// Record what a response at revision `read_rev` said about `ino`
    /// (`None`: it does not exist). Skipped when the watch has already
    /// gone past `read_rev`, since an event in between may be newer. A
    /// directory's tallies are those this client knew (none known: the
    /// record is kept, but not as live).
    pub fn record(&self, ino: Ino, rec: Option<(&Rec, i64)>, read_rev: i64) {
        self.record_parts(ino, rec, None, read_rev);
    }

    /// [`record`](Self::record), with every tally of the directory as the
    /// same response read them.
    pub fn record_parts(
        &self,
        ino: Ino,
        rec: Option<(&Rec, i64)>,
        tallies: Option<ReadTallies>,
        read_rev: i64,
    ) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        // Once the watch has gone past `read_rev`, an event in between may
        // be newer than what was read: keep it, but not as live. Unless
        // no event applied names `ino` after `read_rev` (`ino_rev`, under
        // this lock: tally events count for their directory) and the watch
        // missed none since (`floor`, raised when it resumes past a
        // compaction): then what was read is still the latest, and later
        // events will update it. (A file this client has just created,
        // while its other threads' commits move the watch on, is then
        // answered from the mirror.)
        let live = read_rev >= self.watched.load(Ordering::Acquire)
            || (read_rev >= self.floor.load(Ordering::Acquire)
                && read_rev >= self.pruned.load(Ordering::Acquire)
                && self.ino_rev(ino) <= read_rev);
        let m = self.recs.pin();
        let cur = m.get(&ino);
        match rec {
            Some((r, mut mod_rev)) => {
                let dir = match (r.is_dir(), tallies) {
                    (false, _) => None,
                    (true, Some(ts)) => {
                        let mut tallies = std::collections::BTreeMap::new();
                        for (k, t, rev) in ts {
                            mod_rev = mod_rev.max(rev);
                            tallies.insert(k, (t, rev));
                        }
                        Some(Box::new(DirParts {
                            base: r.clone(),
                            tallies,
                        }))
                    }
                    // The tallies kept current by the watch still apply.
                    (true, None) => cur
                        .filter(|c| c.live)
                        .and_then(|c| c.dir.as_ref())
                        .map(|d| d.with_base(r.clone())),
                };
                if cur.is_some_and(|c| c.mod_rev > mod_rev || (c.live && !live)) {
                    return;
                }
                let new = match dir {
                    Some(d) => Cached::dir(d, mod_rev, live),
                    None => Cached::plain(r.clone(), mod_rev, live),
                };
                m.insert(ino, new);
            }
            None => {
                if let Some(c) = cur {
                    if c.mod_rev < read_rev {
                        let mut rec = c.rec.clone();
                        rec.nlink = 0;
                        m.insert(ino, Cached::plain(rec, read_rev, live));
                    }
                }
            }
        }
    }

    /// A tally of directory `dir` put at `rev` (`None`: deleted), as the
    /// watch delivered it (`from_watch`) or as this client committed it.
    pub fn tally(&self, dir: Ino, key: &[u8], tally: Option<Tally>, rev: i64, from_watch: bool) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        self.raise_ino_rev(dir, rev);
        let m = self.recs.pin();
        if let Some(c) = m.get(&dir) {
            if let Some(d) = c.dir.as_ref() {
                let mut d = d.clone();
                if d.event(key, tally, rev) {
                    m.insert(dir, Cached::dir(d, c.mod_rev.max(rev), c.live));
                }
            }
        }
        if from_watch {
            self.watched.fetch_max(rev, Ordering::AcqRel);
            self.stats.events.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Under the write lock.
    fn raise_ino_rev(&self, ino: Ino, rev: i64) {
        let revs = self.ino_rev.pin();
        if revs.get(&ino).is_none_or(|&r| r < rev) {
            revs.insert(ino, rev);
        }
        if revs.len() > self.prune_at {
            // Every entry is at most `rev`, which the watch is applying:
            // forget them all, and trust `ino_rev` only for reads made at
            // or after `rev` (an entry dropped was at most that, so such a
            // read saw its change). Reads in flight lose their liveness:
            // what they read is fetched again once.
            revs.clear();
            self.pruned.fetch_max(rev, Ordering::AcqRel);
        }
    }

    /// One watch event on an inode record, at revision `rev`.
    pub fn event(&self, ino: Ino, rec: Option<Rec>, rev: i64) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        self.raise_ino_rev(ino, rev);
        let m = self.recs.pin();
        if let Some(c) = m.get(&ino) {
            // A directory's parts may have moved it to `rev` already: a
            // transaction that folds tallies deletes them with the put.
            if c.mod_rev < rev || (c.mod_rev == rev && c.dir.is_some()) {
                let new = match rec {
                    // A directory's tallies stay as they are.
                    Some(r) => match c.dir.as_ref().filter(|_| r.is_dir()) {
                        Some(d) => Cached::dir(d.with_base(r), rev, c.live),
                        None => Cached::plain(r, rev, c.live),
                    },
                    None => {
                        // Deleted: keep the last attributes, nlink 0.
                        let mut r = c.rec.clone();
                        r.nlink = 0;
                        Cached::plain(r, rev, c.live)
                    }
                };
                m.insert(ino, new);
            }
        }
        self.watched.fetch_max(rev, Ordering::AcqRel);
        self.stats.events.fetch_add(1, Ordering::Relaxed);
    }

    /// Any other watch event (an entry, a marker, a session record) at
    /// `rev`, or a progress notification at `rev` that is trusted (see
    /// `crate::progress`): every event up to `rev` has been applied.
    pub fn passed(&self, rev: i64) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        self.watched.fetch_max(rev, Ordering::AcqRel);
    }

    /// A fence: at `t0_ns` this client read (linearizably) revision
    /// `rev`, which is at least that of every change committed before
    /// `t0_ns`. Once the watch has applied every event up to `rev`, it is
    /// current as of `t0_ns`. Returns whether it is already.
    pub fn fence(&self, t0_ns: u64, rev: i64) -> bool {
        self.stats.fences.fetch_add(1, Ordering::Relaxed);
        {
            let mut f = self.fences.lock().unwrap_or_else(|e| e.into_inner());
            // Bounded: a watch that never catches up keeps the latest
            // fences only (a later one releases more than an earlier).
            if f.len() >= 64 {
                f.pop_front();
            }
            f.push_back((t0_ns, rev));
        }
        self.caught_up()
    }

    /// Release the fences the watch has caught up with (called after
    /// each watch response is applied). Returns whether any was.
    pub fn caught_up(&self) -> bool {
        // Acquire: pairs with the AcqRel updates of `watched`; the events
        // up to it were applied before it was raised.
        let w = self.watched.load(Ordering::Acquire);
        let mut f = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        let mut at = 0;
        while let Some(&(t0, rev)) = f.front() {
            if rev > w {
                break;
            }
            at = t0;
            f.pop_front();
        }
        drop(f);
        if at != 0 {
            self.synced(at);
        }
        at != 0
    }

    /// The watch has applied everything committed before `t0_ns`.
    fn synced(&self, t0_ns: u64) {
        // Release: the events applied before it are published with it.
        self.synced_at.fetch_max(t0_ns, Ordering::Release);
    }

    /// The watch missed events (compaction): everything cached before
    /// `rev` must be looked up again; the watch resumes after `rev`.
    pub fn reset(&self, rev: i64) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        self.floor.fetch_max(rev, Ordering::AcqRel);
        let m = self.recs.pin();
        let stale: Vec<(Ino, Cached)> = m
            .iter()
            .map(|(k, c)| {
                let old = Cached {
                    rec: c.rec.clone(),
                    mod_rev: c.mod_rev,
                    live: false,
                    dir: c.dir.clone(),
                };
                (*k, old)
            })
            .collect();
        for (ino, old) in stale {
            m.insert(ino, old);
        }
        self.watched.store(rev, Ordering::Release);
        self.stats.resyncs.fetch_add(1, Ordering::Relaxed);
        drop(_w);
        self.caught_up();
    }

    /// The dcache dropped its inode: stop mirroring it.
    pub fn forget(&self, ino: Ino) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        self.recs.pin().remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_serves_a_bound_well_above_its_tick_only() {
        let tick = ns(rustix::time::clock_getres(ClockId::MonotonicCoarse));
        let c = Clock::for_bound(1_000_000_000);
        assert!(matches!(c.id, ClockId::MonotonicCoarse), "tick {tick} ns");
        assert_eq!(c.slack_ns, tick);
        for bound in [0, tick, tick * COARSE_MIN_BOUND - 1] {
            let c = Clock::for_bound(bound);
            assert!(matches!(c.id, ClockId::Monotonic), "bound {bound}");
            assert_eq!(c.slack_ns, 0);
        }
        let a = c.now_ns();
        assert!(a > 0 && c.now_ns() >= a);
    }

    #[test]
    fn fresh_holds_for_the_bound_and_no_longer() {
        for bound in [Duration::ZERO, Duration::from_millis(200)] {
            let c = Cache::new(bound);
            assert!(!c.fresh(), "never synced");
            let start = std::time::Instant::now();
            assert!(
                c.fence(c.now_ns(), 0),
                "a fence at revision 0 holds at once"
            );
            // The fence was stamped after `start`: once `bound` has
            // passed since `start`, the cache must not call itself fresh
            // (`e` is taken before each check, so a preemption between
            // the two cannot fail the test).
            loop {
                let e = start.elapsed();
                if !c.fresh() {
                    break;
                }
                assert!(e <= bound, "still fresh {e:?} after a {bound:?} bound");
            }
            if !bound.is_zero() {
                // Fresh for most of the bound (less one coarse tick).
                assert!(
                    start.elapsed() + Duration::from_nanos(c.clock.slack_ns) * 2 >= bound,
                    "fresh for only {:?} of {bound:?}",
                    start.elapsed()
                );
            }
        }
    }

    #[test]
    fn a_directory_is_served_only_with_its_tallies_applied() {
        use crate::tally::Tally;
        let ts = |sec| dcache::Timespec { sec, nsec: 0 };
        let c = Cache::new(Duration::from_secs(60));
        c.passed(10);
        assert!(c.fence(c.now_ns(), 10));
        let mut base = Rec::new(FileType::Directory, 0o755, 0, 0);
        base.size = 40;
        base.nlink = 2;
        base.mtime = ts(100);
        // Without its tallies a directory is kept, never served.
        c.record(7, Some((&base, 5)), 10);
        assert!(c.attr(7).is_none());
        // With them: the sums and the latest time.
        let t1 = Tally::default().changed(40, 1, ts(200));
        c.record_parts(7, Some((&base, 5)), Some(vec![(b"t1".to_vec(), t1, 8)]), 10);
        let a = c.attr(7).expect("served");
        assert_eq!((a.size, a.nlink, a.mtime), (80, 3, ts(200)));
        // A later record without tallies keeps the ones the watch keeps.
        let mut b2 = base.clone();
        b2.perm = 0o700;
        c.event(7, Some(b2.clone()), 11);
        let a = c.attr(7).unwrap();
        assert_eq!((a.size, a.perm), (80, 0o700));
        // Watch events on tallies: a new one counts, one older than what
        // is known does not.
        let t2 = Tally::default().changed(20, 0, ts(300));
        c.tally(7, b"t2", Some(t2), 12, true);
        c.tally(7, b"t1", None, 7, true);
        let a = c.attr(7).unwrap();
        assert_eq!((a.size, a.mtime), (100, ts(300)));
        // A fold: the tallies deleted and the record put at one revision,
        // the deletes delivered first. The record must still apply.
        let mut folded = b2.clone();
        folded.size = 100;
        folded.nlink = 3;
        folded.mtime = ts(50); // set back by the setattr that folded
        c.tally(7, b"t1", None, 13, true);
        c.tally(7, b"t2", None, 13, true);
        c.event(7, Some(folded), 13);
        let a = c.attr(7).unwrap();
        assert_eq!((a.size, a.nlink, a.mtime), (100, 3, ts(50)));
        // This client's own commit, mirrored before the watch brings it,
        // does not move the watch.
        let w = c.watched.load(Ordering::Relaxed);
        let t3 = Tally::default().changed(20, 0, ts(60));
        c.tally(7, b"t3", Some(t3), 20, false);
        assert_eq!(c.watched.load(Ordering::Relaxed), w);
        assert_eq!(c.attr(7).unwrap().size, 120);
        c.tally(7, b"t3", Some(t3), 20, true);
        assert_eq!(c.attr(7).unwrap().size, 120, "applied once");
    }

    #[test]
    fn the_revision_map_is_bounded_and_stays_sound() {
        let mut c = Cache::new(Duration::from_secs(60));
        c.prune_at = 100;
        c.passed(1000);
        assert!(c.fence(c.now_ns(), 1000));
        let rec = Rec::new(FileType::Regular, 0o644, 0, 0);
        for ino in 2..300 {
            c.event(ino, None, 1000 + ino as i64);
            assert!(c.ino_rev.pin().len() <= 100);
        }
        let p = c.pruned.load(Ordering::Relaxed);
        assert!(p > 1000);
        // A read from before the prune, of an inode whose change the
        // watch has applied and forgotten, is not taken as live; one made
        // after it is.
        c.record(5, Some((&rec, 3)), p - 1);
        assert!(c.attr(5).is_none());
        c.record(6, Some((&rec, p)), p);
        assert!(c.attr(6).is_some());
    }

    #[test]
    fn a_fence_holds_once_the_watch_reaches_its_revision() {
        let c = Cache::new(Duration::from_secs(60));
        c.passed(10);
        assert!(c.fence(c.now_ns(), 10), "caught up already");
        assert!(c.fresh());
        let c = Cache::new(Duration::from_secs(60));
        c.passed(10);
        let (t1, t2) = (c.now_ns(), c.now_ns() + 1);
        assert!(!c.fence(t1, 12));
        assert!(!c.fence(t2, 15));
        assert!(!c.fresh(), "no fence caught up with");
        c.passed(11);
        assert!(!c.caught_up());
        c.passed(13);
        assert!(c.caught_up(), "the first fence holds");
        assert_eq!(c.synced_at.load(Ordering::Relaxed), t1);
        c.passed(20);
        assert!(c.caught_up());
        assert_eq!(c.synced_at.load(Ordering::Relaxed), t2);
        assert!(!c.caught_up(), "released once");
    }
}
