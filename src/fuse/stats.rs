//! What the kernel holds of a mount, counted for the unmount report and
//! shared (`Arc`) with the threads that unmount and prune.
//!
//! All counters are Relaxed: they are statistics that guard no memory, read
//! exactly only once the workers are joined (join orders them) or as a
//! progress signal while pruning.

use crate::cache_aligned::CacheAligned;
use crate::sync::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Stats {
    /// Counted dentry references handed to the kernel, not yet forgotten.
    pub(crate) kernel_refs: CacheAligned<AtomicU64>,
    /// Dentries with at least one such reference.
    pub(crate) kernel_nodes: CacheAligned<AtomicU64>,
    /// Open file handles not yet released.
    pub(crate) open_files: CacheAligned<AtomicU64>,
    /// Forgets that named more references than were handed out (refused).
    pub(crate) bad_forgets: AtomicU64,
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
    pub fn report(&self) -> Report {
        // Relaxed: see the module docs.
        Report {
            referenced: self.kernel_nodes.load(Ordering::Relaxed),
            lookups: self.kernel_refs.load(Ordering::Relaxed),
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
