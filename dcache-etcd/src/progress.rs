//! How a client knows its watch is current, without writing anything.
//!
//! Every [`Options::progress_every`](crate::Options::progress_every) a
//! client takes a *fence*: it notes the time `t0`, then makes one
//! linearizable read (a count-only get of one key: a ReadIndex round at
//! the leader, no write, no event for anyone). The read's revision `Rl` is
//! at least that of every change committed before `t0`. The watch is
//! current as of `t0` once it has delivered every event up to `Rl`, which
//! the client learns in one of two ways:
//!
//! 1. **An event at or past `Rl`.** A watch delivers events in revision
//!    order without gaps, so an event at revision `r >= Rl` means every
//!    event up to `Rl` has been delivered. When one volume is all its etcd
//!    cluster holds, every revision changes a key the watch covers (each
//!    transaction writes its client's marker; a session ending deletes
//!    its record), so the watch's last event *is* the cluster's revision
//!    whenever nothing is in flight: an idle volume's fences hold at once.
//! 2. **A progress notification at `R >= Rl`** (the client sends a
//!    progress request on its watch stream after the read returns), when
//!    the server is known to order progress notifications with events.
//!
//! The second is what progress notifications are for, but etcd before the
//! fix of its bug #15220 (pull request #15237) sends a requested
//! progress notification from a separate control channel, with the
//! store's current revision, racing the events still queued for the
//! watcher (a watcher catching up from an older revision, or events queued
//! behind a slow send): a notification at `R` can arrive before events at
//! revisions up to `R`. Trusting it would let a client call itself current
//! while a change committed before `t0` is still on its way: an answer
//! older than the staleness bound. `tests/progress.rs` measures it on the
//! installed etcd: on Debian's 3.4.23 it shows (see the README).
//!
//! So a progress notification is trusted only from a server whose every
//! member the client was given reports a version that carries the fix and
//! its follow-up (#17557): 3.4.31+, 3.5.13+, 3.6+ ([`progress_ordered`];
//! conservative bounds, releases after both were merged in March 2024,
//! not checked against etcd's changelogs: a release that has the fix but
//! is below them only goes without notifications).
//! Elsewhere the client does not request them and relies on (1). That is
//! sound on any server; its cost is in a cluster shared with other writers
//! (another volume, another application): while they write and this
//! volume is idle, the cluster's revision moves past the watch's last
//! event, fences are not caught up with, and the client revalidates every
//! use against etcd (correct, slower) until its own volume changes again.
//!
//! Why the read: the watch's member may be a follower that has not yet
//! applied everything the leader committed; a progress notification says
//! what that member has applied, not what the cluster has committed. The
//! linearizable read ties the fence to the cluster's commit order.

/// Whether etcd `version` (as its status reports it, e.g. `3.4.23`) orders
/// requested progress notifications with the watch's events: it carries
/// the fix of #15220 and of the follow-up #17557. Unknown or unparsable
/// versions are not trusted.
pub fn progress_ordered(version: &str) -> bool {
    let mut it = version.trim().split(['.', '-', '+']);
    let mut num = || it.next().and_then(|p| p.parse::<u32>().ok());
    let (Some(major), Some(minor), Some(patch)) = (num(), num(), num()) else {
        return false;
    };
    match (major, minor) {
        (3, 4) => patch >= 31,
        (3, 5) => patch >= 13,
        (3, m) => m >= 6,
        (m, _) => m > 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for v in ["3.4.31", "3.5.13", "3.5.21", "3.6.0", "4.0.0", "3.6.1-rc.0"] {
            assert!(progress_ordered(v), "{v}");
        }
        for v in [
            "3.4.23", "3.4.30", "3.5.12", "3.3.27", "", "3.4", "x.y.z", "2.3.8",
        ] {
            assert!(!progress_ordered(v), "{v}");
        }
    }
}
