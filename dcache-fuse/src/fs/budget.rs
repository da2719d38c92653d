//! The kernel's share of the daemon's memory, bounded: every node the
//! kernel holds pins a dentry, an inode and the backend's entry here, and
//! the kernel lets go of them only under its own memory pressure. So when
//! it holds more than `max_nodes`, a handler that just handed nodes out
//! queues `FUSE_NOTIFY_INVAL_ENTRY` for a batch of them (leaves first);
//! the kernel drops those entries it does not use and its forgets bring
//! the count back under the bound. The notifications are sent by the
//! invalidator thread, never by the handler, and at most one batch is
//! queued per [`INTERVAL_NS`], giving the forgets time to arrive.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::{DcacheFs, KernelInval};

/// The least time between two batches.
const INTERVAL_NS: u64 = 20_000_000;

/// The most entries one batch names.
const MAX_BATCH: usize = 8192;

/// When the next batch may be queued (ns since `start`).
pub(crate) struct NodeBudget {
    start: Instant,
    next_ns: AtomicU64,
}

impl NodeBudget {
    pub(crate) fn new() -> NodeBudget {
        NodeBudget {
            start: Instant::now(),
            next_ns: AtomicU64::new(0),
        }
    }

    /// Whether this caller may queue a batch now (and no other may until
    /// the interval passed).
    fn claim(&self) -> bool {
        let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: a rate limit; the CAS picks one claimant, and no other
        // memory is published through the stamp.
        let next = self.next_ns.load(Ordering::Relaxed);
        now >= next
            && self
                .next_ns
                .compare_exchange(
                    next,
                    now.saturating_add(INTERVAL_NS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

impl DcacheFs {
    /// If the kernel holds more nodes than `max_nodes`, queue the
    /// invalidation of enough entries to bring it to 7/8 of the bound.
    pub(super) fn bound_kernel_nodes(&self) {
        let max = self.cfg.max_nodes;
        if max == 0 {
            return;
        }
        // Relaxed: statistics (stats.rs); a stale value only shifts the
        // batch by a few.
        let held = self.stats.kernel_nodes.load(Ordering::Relaxed) as usize;
        if held <= max || !self.budget.claim() {
            return;
        }
        let Some(tx) = self.inval.get() else { return };
        let want = (held - max + max / 8).min(MAX_BATCH);
        let victims = self.core.kernel_victims(want);
        let tx = tx.lock().unwrap_or_else(|e| e.into_inner());
        for (parent, name) in victims {
            if tx.send(KernelInval::Entry { parent, name }).is_err() {
                return;
            }
        }
    }
}
