//! `mdtest`: an mdtest-like metadata workload on etcd: create, stat and
//! unlink rates.
//!
//! Variant `one-mount`: every thread is a thread of one client (one
//! `EtcdFs` and `Vfs`, as the processes of one mount); `two-mounts`: the
//! threads alternate between two clients (two hosts' mounts). Each thread
//! works in a directory of its own, `t<N>` (mdtest's `-u`). The timed
//! phase is the creates (the harness's rate); then, as mdtest's later
//! phases, the summary stats every file created (each thread its own) and
//! unlinks them, with as many threads, and prints the three rates beside
//! JuiceFS's published figures on etcd.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::etcd::{client, scratch_volume, Client, EtcdServer};
use crate::report::RunResult;
use crate::worker::Worker;
use crate::workload::{Case, CaseSpec, Workload};
use dcache::vfs::At;

pub struct MdtestWorkload;

pub static MDTEST: MdtestWorkload = MdtestWorkload;

impl Workload for MdtestWorkload {
    fn name(&self) -> &'static str {
        "mdtest"
    }
    fn about(&self) -> &'static str {
        "etcd: create, then stat, then unlink files, each thread in its own directory (mdtest -u)"
    }
    fn variants(&self) -> &'static [&'static str] {
        &["one-mount", "two-mounts"]
    }
    fn targets(&self) -> &'static [&'static str] {
        &["etcd"]
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> Result<Box<dyn Case>, String> {
        let (server, ns) = scratch_volume(spec.options)?;
        let mounts = if spec.variant == "two-mounts" { 2 } else { 1 };
        let clients = (0..mounts)
            .map(|_| client(&ns))
            .collect::<Result<Vec<_>, _>>()?;
        for t in 0..spec.threads {
            clients[0]
                .vfs
                .as_root()
                .mkdir(At::Root, format!("t{t}"), 0o755)
                .map_err(|e| format!("mkdir t{t}: {e}"))?;
        }
        Ok(Box::new(MdtestCase {
            clients,
            created: (0..spec.threads).map(|_| AtomicU64::new(0)).collect(),
            failed: AtomicU64::new(0),
            _server: server,
        }))
    }
}

/// Fields drop in order: the clients, then the etcd this case started.
struct MdtestCase {
    clients: Vec<Client>,
    /// Files thread N has created: `t<N>/f0` up to this.
    created: Vec<AtomicU64>,
    /// Creates that failed (counted as operations by the loop; reported).
    failed: AtomicU64,
    _server: EtcdServer,
}

impl MdtestCase {
    fn vfs(&self, thread: usize) -> &dcache::Vfs {
        &self.clients[thread % self.clients.len()].vfs
    }

    /// Run `op(thread, k)` on every file, each thread on its own, with as
    /// many threads as created them: (files, operations per second,
    /// failures).
    fn phase(&self, op: impl Fn(&dcache::Vfs, String) -> bool + Sync) -> (u64, f64, u64) {
        let failed = AtomicU64::new(0);
        let start = Instant::now();
        std::thread::scope(|s| {
            for (t, n) in self.created.iter().enumerate() {
                let (op, failed, vfs) = (&op, &failed, self.vfs(t));
                let n = n.load(Ordering::Relaxed);
                s.spawn(move || {
                    for k in 0..n {
                        if !op(vfs, format!("t{t}/f{k}")) {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let secs = start.elapsed().as_secs_f64();
        let files: u64 = self.created.iter().map(|n| n.load(Ordering::Relaxed)).sum();
        let rate = if secs > 0.0 { files as f64 / secs } else { 0.0 };
        (files, rate, failed.load(Ordering::Relaxed))
    }
}

impl Case for MdtestCase {
    fn worker(&self, w: Worker<'_>) {
        let i = w.index();
        let vfs = self.vfs(i);
        let made = &self.created[i];
        w.run(|| {
            // Relaxed: only this thread writes its count; the summary reads
            // it after the workers are joined.
            let k = made.load(Ordering::Relaxed);
            match vfs.as_root().create(At::Root, format!("t{i}/f{k}"), 0o644) {
                Ok(_) => made.store(k + 1, Ordering::Relaxed),
                Err(_) => {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    }

    fn summary(&self, r: &RunResult) -> Option<String> {
        let (files, stat, stat_failed) = self.phase(|v, p| v.as_root().stat(At::Root, p).is_ok());
        let (_, unlink, unlink_failed) = self.phase(|v, p| v.as_root().unlink(At::Root, p).is_ok());
        let mounts = self.clients.len();
        Some(format!(
            "mdtest, {} threads on {mounts} mount{}: create {:.0}/s, stat {:.0}/s, \
             unlink {:.0}/s over {files} files ({} creates, {stat_failed} stats, \
             {unlink_failed} unlinks failed); JuiceFS on etcd, 12 processes on 3 hosts \
             (published): create 1,802/s, stat 6,277/s, removal 1,649/s",
            self.created.len(),
            if mounts == 1 { "" } else { "s" },
            r.ops_per_sec,
            stat,
            unlink,
            self.failed.load(Ordering::Relaxed),
        ))
    }
}
