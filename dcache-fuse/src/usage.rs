//! What a running mount uses, for a user checking its bounds in the field:
//! the daemon's descriptors and memory (from /proc/self), the dentry
//! cache's counts and its calls to the backend. `SIGUSR1` prints it (to
//! the `--log` file once the daemon is detached) after pruning.

use std::fmt;

use dcache::vfs::Counters;

use crate::stats::Report;

/// A snapshot of a mount's resource use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usage {
    /// Descriptors the process has open (None: /proc unreadable).
    pub fds: Option<usize>,
    /// Resident memory in KiB (None: /proc unreadable).
    pub rss_kib: Option<u64>,
    /// Cached dentries, of which unused and negative.
    pub dentries: usize,
    /// Unused dentries (the `max_cached` bound applies to these).
    pub unused: usize,
    /// Negative dentries.
    pub negative: usize,
    /// Cached inodes.
    pub inodes: usize,
    /// Backend lookups so far (cache misses).
    pub backend_lookups: usize,
    /// Backend calls that ran out of descriptors and were retried.
    pub fd_sheds: usize,
    /// Nodes the kernel holds.
    pub kernel_nodes: u64,
}

/// Entries in /proc/self/fd (the directory's own descriptor excluded).
fn open_fds() -> Option<usize> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some(n.saturating_sub(1))
}

/// Resident set size from /proc/self/statm (pages) in KiB.
fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()? / 1024)
}

impl Usage {
    /// The use now, from the cache's counters and the kernel's holdings.
    pub fn now(counters: &Counters, kernel: &Report) -> Usage {
        Usage {
            fds: open_fds(),
            rss_kib: rss_kib(),
            dentries: counters.dentries(),
            unused: counters.unused(),
            negative: counters.negative(),
            inodes: counters.inodes(),
            backend_lookups: counters.backend_lookups(),
            fd_sheds: counters.fd_sheds(),
            kernel_nodes: kernel.referenced,
        }
    }
}

fn opt<T: fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} descriptors, {} KiB resident; cache: {} dentries ({} unused, {} negative), \
             {} inodes; kernel holds {} nodes; {} backend lookups, {} descriptor sheds",
            opt(self.fds),
            opt(self.rss_kib),
            self.dentries,
            self.unused,
            self.negative,
            self.inodes,
            self.kernel_nodes,
            self.backend_lookups,
            self.fd_sheds
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let c = Counters::default();
        let r = Report {
            referenced: 3,
            lookups: 3,
            open_files: 0,
            bad_forgets: 0,
        };
        let u = Usage::now(&c, &r);
        assert!(u.fds.unwrap() >= 3, "{u:?}");
        assert!(u.rss_kib.unwrap() > 0, "{u:?}");
        let text = u.to_string();
        assert!(text.contains("kernel holds 3 nodes"), "{text}");
        assert!(text.contains("0 dentries"), "{text}");
    }
}
