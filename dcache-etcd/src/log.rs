//! The one logging facade of the shared volume: every failure the volume
//! returns for a cause of its own ([`Cause`]: etcd unavailable or out of
//! time, the object store, the session lease, a damaged record, a
//! permission refusal, writes dropped, a lock refused on a stale view) is
//! counted and logged here, once, with what it concerned, and nowhere
//! else. So is what an operator must hear about beside errors: quorum lost
//! and regained.
//!
//! Lines go through `tracing` (target `dcache_etcd`): the `dcache mount`
//! daemon writes them to its `--log` file, or to stderr with `-f`; a
//! library user installs the subscriber of their choice. Each cause is
//! rate-limited on its own: at most [`BURST`] lines per [`WINDOW`], then
//! one line saying how many more were not logged. The counters are never
//! limited ([`counts`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dcache::Errno;

pub use crate::error::Cause;

/// Lines one cause may log per [`WINDOW`].
pub const BURST: u32 = 5;
/// The rate limit's window.
pub const WINDOW: Duration = Duration::from_secs(10);

const N: usize = Cause::ALL.len();

/// Failures counted per cause since the process started (every client of
/// the process together).
static COUNTS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];

/// Per cause: the window's start, lines logged in it, lines held back.
struct Limit {
    since: Option<Instant>,
    logged: u32,
    held: u64,
}

static LIMITS: Mutex<[Limit; N]> = Mutex::new(
    [const {
        Limit {
            since: None,
            logged: 0,
            held: 0,
        }
    }; N],
);

/// How many failures of each cause this process has counted, in
/// [`Cause::ALL`]'s order.
pub fn counts() -> [(Cause, u64); N] {
    // Relaxed: independent counters read for a report.
    Cause::ALL.map(|c| (c, COUNTS[c as usize].load(Ordering::Relaxed)))
}

/// The count of one cause.
pub fn count(cause: Cause) -> u64 {
    COUNTS[cause as usize].load(Ordering::Relaxed)
}

/// Count a failure of `cause` and log `what` (rate-limited).
pub(crate) fn failure(cause: Cause, what: fmt::Arguments<'_>) {
    // Relaxed: a counter; nothing is published through it.
    COUNTS[cause as usize].fetch_add(1, Ordering::Relaxed);
    let (log, held) = admit(cause, Instant::now());
    if held > 0 {
        tracing::warn!(
            target: "dcache_etcd",
            cause = cause.name(),
            "{held} more {cause} failures not logged in the last {}s",
            WINDOW.as_secs()
        );
    }
    if log {
        tracing::warn!(target: "dcache_etcd", cause = cause.name(), "{what}");
    }
}

/// [`failure`], answering EIO: `return Err(eio(Cause::Store, format_args!(..)))`.
pub(crate) fn eio(cause: Cause, what: fmt::Arguments<'_>) -> Errno {
    failure(cause, what);
    Errno::EIO
}

/// A state change an operator should see (not counted as a failure).
pub(crate) fn notice(what: fmt::Arguments<'_>) {
    tracing::warn!(target: "dcache_etcd", "{what}");
}

/// Whether a line of `cause` goes out at `now`, and how many lines the
/// window that just ended held back (to be reported first).
fn admit(cause: Cause, now: Instant) -> (bool, u64) {
    let mut l = LIMITS.lock().unwrap_or_else(|e| e.into_inner());
    let l = &mut l[cause as usize];
    let mut held = 0;
    match l.since {
        Some(s) if now.duration_since(s) < WINDOW => {}
        _ => {
            held = std::mem::take(&mut l.held);
            l.since = Some(now);
            l.logged = 0;
        }
    }
    if l.logged < BURST {
        l.logged += 1;
        (true, held)
    } else {
        l.held += 1;
        (false, held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_logs_a_burst_per_window_then_reports_what_it_held() {
        // A cause no other test of this binary uses: the table is global.
        let c = Cause::Stale;
        let t0 = Instant::now() + Duration::from_secs(3600);
        let mut out = Vec::new();
        for i in 0..(BURST as u64 + 7) {
            out.push(admit(c, t0 + Duration::from_millis(i)));
        }
        let logged = out.iter().filter(|o| o.0).count();
        assert_eq!(logged, BURST as usize);
        assert!(out.iter().skip(1).all(|o| o.1 == 0));
        // The next window reports the seven held back, and logs again.
        assert_eq!(admit(c, t0 + WINDOW + Duration::from_secs(1)), (true, 7));
        assert_eq!(admit(c, t0 + WINDOW + Duration::from_secs(2)), (true, 0));
    }

    #[test]
    fn failures_are_counted_past_the_rate_limit() {
        let c = Cause::Permission;
        let before = count(c);
        for _ in 0..(BURST + 3) {
            failure(c, format_args!("test"));
        }
        assert_eq!(count(c) - before, BURST as u64 + 3);
        assert_eq!(eio(c, format_args!("test")), Errno::EIO);
        assert_eq!(count(c) - before, BURST as u64 + 4);
    }
}
