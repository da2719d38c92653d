//! What the kernel holds of a mount, counted for the unmount report and
//! shared (`Arc`) with the threads that unmount and prune.
//!
//! All counters are Relaxed: they are statistics that guard no memory, read
//! exactly only once the workers are joined (join orders them) or as a
//! progress signal while pruning.

use crate::sync::{AtomicU64, AtomicUsize, CacheAligned, Ordering};

/// Shards of a [`Sharded`] counter: more than the worker threads of any
/// mount on the machines we target; threads beyond share shards.
const SHARDS: usize = 16;

/// A counter that every FUSE worker updates on nearly every request (one
/// per LOOKUP): one cache line per shard, and each thread adds to its own,
/// so two workers never bounce a line between CPUs for it. A shard may go
/// "negative" (a forget subtracts on another thread than the lookup
/// added); the values wrap, and their wrapping sum is the count.
#[derive(Default)]
pub(crate) struct Sharded([CacheAligned<AtomicU64>; SHARDS]);

/// This thread's shard, assigned round-robin on first use.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    }
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            // Relaxed: only spreads threads over shards.
            i = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

impl Sharded {
    pub fn add(&self, n: u64) {
        // Relaxed: statistics (module docs). fetch_add wraps.
        self.0[shard()].fetch_add(n, Ordering::Relaxed);
    }

    pub fn sub(&self, n: u64) {
        // Relaxed: as in add; fetch_sub wraps.
        self.0[shard()].fetch_sub(n, Ordering::Relaxed);
    }

    /// The sum of the shards: exact once the updaters are quiet (joined),
    /// a recent value while they run.
    pub fn load(&self) -> u64 {
        self.0
            .iter()
            // Relaxed: statistics.
            .fold(0u64, |acc, c| acc.wrapping_add(c.load(Ordering::Relaxed)))
    }
}

/// What the kernel holds of one mount: node references, nodes and open
/// files (updated by the request handlers, read with [`Stats::report`]).
#[derive(Default)]
pub struct Stats {
    /// Counted dentry references handed to the kernel, not yet forgotten.
    pub(crate) kernel_refs: Sharded,
    /// Dentries with at least one such reference.
    pub(crate) kernel_nodes: CacheAligned<AtomicU64>,
    /// Open file handles not yet released.
    pub(crate) open_files: CacheAligned<AtomicU64>,
    /// Forgets that named more references than were handed out (refused).
    pub(crate) bad_forgets: AtomicU64,
    /// READ and WRITE requests answered (none for files the kernel reads
    /// and writes itself, with passthrough I/O).
    pub(crate) data_requests: Sharded,
    /// OPEN, OPENDIR, FLUSH, RELEASE and RELEASEDIR requests that reached
    /// the daemon (those the kernel stops sending once told it need not).
    pub(crate) open_requests: Sharded,
    /// FLUSH requests among those (none for files opened with
    /// FOPEN_NOFLUSH).
    pub(crate) flush_requests: Sharded,
    /// GETXATTR, LISTXATTR, SETXATTR and REMOVEXATTR requests (with
    /// passthrough I/O, one GETXATTR of `security.capability` per
    /// `write(2)`, unless the mount serves no xattrs).
    pub(crate) xattr_requests: Sharded,
}

/// A snapshot of [`Stats`]; printed at unmount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// Nodes the kernel never forgot.
    pub referenced: u64,
    /// Lookup references it held on them.
    pub lookups: u64,
    /// File handles it never released.
    pub open_files: u64,
    /// Forgets that named more references than it had (refused).
    pub bad_forgets: u64,
}

impl Stats {
    /// OPEN, OPENDIR, FLUSH, RELEASE and RELEASEDIR requests so far.
    pub fn open_requests(&self) -> u64 {
        self.open_requests.load()
    }

    /// FLUSH requests so far.
    pub fn flush_requests(&self) -> u64 {
        self.flush_requests.load()
    }

    /// Extended attribute requests so far.
    pub fn xattr_requests(&self) -> u64 {
        self.xattr_requests.load()
    }

    /// READ and WRITE requests answered so far.
    pub fn data_requests(&self) -> u64 {
        self.data_requests.load()
    }

    /// The counts now.
    pub fn report(&self) -> Report {
        // Relaxed: see the module docs.
        Report {
            referenced: self.kernel_nodes.load(Ordering::Relaxed),
            lookups: self.kernel_refs.load(),
            open_files: self.open_files.load(Ordering::Relaxed),
            bad_forgets: self.bad_forgets.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} nodes still referenced", self.referenced)?;
        if self.lookups != self.referenced {
            write!(f, " ({} lookups)", self.lookups)?;
        }
        if self.open_files > 0 {
            write!(f, ", {} files still open", self.open_files)?;
        }
        if self.bad_forgets > 0 {
            write!(f, ", {} bad forgets refused", self.bad_forgets)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharded_sums_over_threads() {
        let c = std::sync::Arc::new(Sharded::default());
        c.add(5);
        // Subtracted on other threads than it was added on: those shards
        // wrap below zero, the sum does not.
        let ts: Vec<_> = (0..3)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || c.sub(1))
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(c.load(), 2);
        c.sub(2);
        assert_eq!(c.load(), 0);
    }

    #[test]
    fn report_text() {
        let mut r = Report {
            referenced: 0,
            lookups: 0,
            open_files: 0,
            bad_forgets: 0,
        };
        assert_eq!(r.to_string(), "0 nodes still referenced");
        r.referenced = 2;
        r.lookups = 5;
        r.open_files = 1;
        assert_eq!(
            r.to_string(),
            "2 nodes still referenced (5 lookups), 1 files still open"
        );
    }
}
