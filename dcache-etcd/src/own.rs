//! Which of this client's own commits its dcache applied itself.
//!
//! A name cached in a directory stays true until an entry of that
//! directory changes in a way the dcache did not see. The namespace
//! operations this client makes through its Vfs (create, link, unlink,
//! rename) are applied to the dcache by the Vfs when they succeed, so
//! their entry changes need not invalidate anything; every other entry
//! change (another client's, or a commit of this one whose caller was told
//! it failed) must. The watch tells this client's commits apart by their
//! marker (`Keys::op_marker`), whose value is the commit's sequence
//! number; this records, per sequence number, whether its caller applied
//! it. The watch and the commit's answer race, so both orders are handled:
//!
//! - answer first: a success is remembered until the watch delivers the
//!   commit's events (`applied`);
//! - watch first: its entry changes wait with the commit in flight, and
//!   count as foreign if the commit then ends in failure.
//!
//! A sequence number that is neither in flight nor remembered (a commit
//! that failed, or one made for nobody's dcache) is foreign: the safe
//! default, which costs a lookup, never a stale answer.

use std::collections::{HashMap, HashSet};

use dcache::Ino;

/// At most this many successes wait for the watch; past it they are
/// forgotten (their events then count as foreign: one lookup each, never
/// a wrong answer). Reached only when the watch falls far behind.
const APPLIED_MAX: usize = 1 << 16;

#[derive(Default)]
pub(crate) struct OwnCommits {
    /// Commits sent and not yet answered -> the entry changes `(dir,
    /// revision)` the watch has already delivered for them.
    in_flight: HashMap<u64, Vec<(Ino, i64)>>,
    /// Commits that succeeded (their callers apply them) whose events the
    /// watch has not delivered yet.
    applied: HashSet<u64>,
}

impl OwnCommits {
    /// Commit `seq` is about to be sent; its caller applies it to the
    /// dcache if it succeeds.
    pub fn begin(&mut self, seq: u64) {
        self.in_flight.insert(seq, Vec::new());
    }

    /// Commit `seq` ended: `applied` if it succeeded. Returns the entry
    /// changes the watch delivered for it that now count as foreign (the
    /// caller was told it failed, so its dcache does not have them).
    pub fn end(&mut self, seq: u64, applied: bool) -> Vec<(Ino, i64)> {
        let Some(seen) = self.in_flight.remove(&seq) else {
            return Vec::new();
        };
        if applied {
            // Watch first: it has delivered the commit already (a commit's
            // events come in one watch response).
            if seen.is_empty() {
                if self.applied.len() >= APPLIED_MAX {
                    self.applied.clear();
                }
                self.applied.insert(seq);
            }
            Vec::new()
        } else {
            seen
        }
    }

    /// The watch delivered a change to an entry of `dir` at `rev`, from
    /// this client's commit `seq` (`None`: another client's). Returns
    /// whether it is foreign to this client's dcache.
    pub fn entry_changed(&mut self, seq: Option<u64>, dir: Ino, rev: i64) -> bool {
        let Some(seq) = seq else { return true };
        if let Some(seen) = self.in_flight.get_mut(&seq) {
            seen.push((dir, rev));
            return false;
        }
        !self.applied.contains(&seq)
    }

    /// The watch has delivered every event of commit `seq`.
    pub fn delivered(&mut self, seq: u64) {
        self.applied.remove(&seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_answered_before_the_watch_is_the_clients_own() {
        let mut o = OwnCommits::default();
        o.begin(1);
        assert!(o.end(1, true).is_empty());
        assert!(!o.entry_changed(Some(1), 5, 10));
        assert!(!o.entry_changed(Some(1), 6, 10), "a rename's second entry");
        o.delivered(1);
        assert!(o.entry_changed(Some(1), 5, 10), "forgotten once delivered");
    }

    #[test]
    fn a_success_the_watch_delivered_first_is_the_clients_own() {
        let mut o = OwnCommits::default();
        o.begin(1);
        assert!(!o.entry_changed(Some(1), 5, 10));
        o.delivered(1);
        assert!(o.end(1, true).is_empty());
        assert!(o.applied.is_empty(), "nothing waits for a delivered commit");
    }

    #[test]
    fn a_failure_is_foreign_in_either_order() {
        let mut o = OwnCommits::default();
        o.begin(1);
        assert!(!o.entry_changed(Some(1), 5, 10));
        assert!(!o.entry_changed(Some(1), 6, 10));
        o.delivered(1);
        assert_eq!(o.end(1, false), vec![(5, 10), (6, 10)]);
        o.begin(2);
        assert!(o.end(2, false).is_empty());
        assert!(o.entry_changed(Some(2), 5, 11), "applied after its failure");
    }

    #[test]
    fn other_clients_and_unknown_commits_are_foreign() {
        let mut o = OwnCommits::default();
        assert!(o.entry_changed(None, 5, 10));
        assert!(o.entry_changed(Some(9), 5, 10), "never begun");
        o.begin(1);
        assert!(o.entry_changed(None, 5, 11), "another client's, meanwhile");
    }

    #[test]
    fn remembered_successes_are_bounded() {
        let mut o = OwnCommits::default();
        for s in 0..APPLIED_MAX as u64 + 10 {
            o.begin(s);
            o.end(s, true);
        }
        assert!(o.applied.len() <= APPLIED_MAX);
        assert!(o.entry_changed(Some(0), 5, 10), "forgotten: foreign");
        assert!(!o.entry_changed(Some(APPLIED_MAX as u64 + 9), 5, 10));
    }
}
