//! `create`: create throughput on etcd, one client per thread.
//!
//! Target `etcd` only: thread N is a client of its own (its own `EtcdFs`
//! and `Vfs`, as on a separate host) creating new files `d/tN-K` in one
//! shared directory, each create one etcd transaction (and, when two
//! clients change the directory at once, a conflict and a retry). Run
//! with `--threads 1,2` for one client and two clients on the same etcd.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::etcd::{client, scratch_volume, Client, EtcdServer};
use crate::report::RunResult;
use crate::worker::Worker;
use crate::workload::{Case, CaseSpec, Workload};
use dcache::vfs::At;

pub struct CreateWorkload;

pub static CREATE: CreateWorkload = CreateWorkload;

impl Workload for CreateWorkload {
    fn name(&self) -> &'static str {
        "create"
    }
    fn about(&self) -> &'static str {
        "etcd: thread N is its own client creating files in one shared directory"
    }
    fn variants(&self) -> &'static [&'static str] {
        &["excl"]
    }
    fn targets(&self) -> &'static [&'static str] {
        &["etcd"]
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> Result<Box<dyn Case>, String> {
        let (server, ns) = scratch_volume(spec.options)?;
        let clients = (0..spec.threads)
            .map(|_| client(&ns))
            .collect::<Result<Vec<_>, _>>()?;
        clients[0]
            .vfs
            .as_root()
            .mkdir(At::Root, "d", 0o755)
            .map_err(|e| format!("mkdir d: {e}"))?;
        Ok(Box::new(CreateCase {
            clients,
            next: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            _server: server,
        }))
    }
}

/// Fields drop in order: the clients, then the etcd this case started.
struct CreateCase {
    clients: Vec<Client>,
    /// Names are unique across the warm-up and the measured seconds.
    next: AtomicU64,
    /// Creates that failed (counted as operations by the loop; reported).
    failed: AtomicU64,
    _server: EtcdServer,
}

impl Case for CreateCase {
    fn worker(&self, w: Worker<'_>) {
        let i = w.index();
        let vfs = &self.clients[i].vfs;
        w.run(|| {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            if vfs
                .as_root()
                .create(At::Root, format!("d/t{i}-{k}"), 0o644)
                .is_err()
            {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        })
    }

    fn summary(&self, r: &RunResult) -> Option<String> {
        let failed = self.failed.load(Ordering::Relaxed);
        let clients = self.clients.len();
        // Where a create's time went, summed over the clients (warm-up
        // included): its reads and its transactions, and the conflicts
        // that sent it back to read again.
        let sum = |f: fn(&dcache_etcd::CacheStats) -> &AtomicU64| -> u64 {
            self.clients
                .iter()
                .map(|c| f(c.fs.stats()).load(Ordering::Relaxed))
                .sum()
        };
        let made = (self.next.load(Ordering::Relaxed) - failed).max(1) as f64;
        let (reads, read_ns) = (sum(|s| &s.reads), sum(|s| &s.read_ns));
        let (commits, commit_ns) = (sum(|s| &s.commits), sum(|s| &s.commit_ns));
        let conflicts = sum(|s| &s.conflicts);
        let avg_us = |ns: u64, n: u64| ns as f64 / n.max(1) as f64 / 1e3;
        Some(format!(
            "{:.0} creates/s with {clients} client{} on one etcd ({failed} failed, \
             warm-up included); per create: {:.2} reads of {:.0} us, {:.2} transactions \
             of {:.0} us, {:.2} conflicts",
            r.ops_per_sec,
            if clients == 1 { "" } else { "s" },
            reads as f64 / made,
            avg_us(read_ns, reads),
            commits as f64 / made,
            avg_us(commit_ns, commits),
            conflicts as f64 / made,
        ))
    }
}
