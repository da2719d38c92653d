//! What a benchmark workload is, as the harness sees it.
//!
//! A [`Workload`] is a named family of measurements: it lists its variants
//! (the first is the comparison base) and the targets it can run on, and for
//! every (target, variant, threads) it prepares a [`Case`]: the shared state
//! the threads hammer. The case owns its per-thread loop, so the operation
//! under test is inlined into [`Worker::run`]'s loop instead of costing a
//! dynamic call per operation; the harness makes one dynamic call per thread.
//!
//! Adding a workload is one file under `workloads/` and one line in the
//! registry in `workloads/mod.rs`.

use super::report::{Footprint, RunResult};
use super::worker::{Stop, Worker};

/// Where a workload runs: dcache itself (`lib`), the running kernel through
/// real syscalls (`kernel`), or a FUSE mount served by dcache (`fuse`,
/// `fuse-cached`), or dcache over dcache-etcd (`etcd`, see [`crate::etcd`]).
/// A workload lists the ones it supports.
pub const TARGETS: &[&str] = &["lib", "kernel", "fuse", "fuse-cached", "etcd"];

/// How the harness drives a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// will-it-scale: threads loop until stopped; after the warm-up, one
    /// sample per second for `--seconds` seconds.
    Timed,
    /// A fixed count (`--iterations`) of operations per thread, first one
    /// thread alone (`single:`), then all threads together (`concur:` per
    /// thread), as Fox Chen's kernfs benchmark reports them. `ops_per_sec`
    /// is then the concurrent phase's operations over its wall time.
    Iterations,
}

/// Knobs that some workloads read; each has a CLI flag of the same name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `--hold-ns`: how long an intruder holds the lock.
    pub hold_ns: u64,
    /// `--every-us`: how long an intruder sleeps between two holds.
    pub every_us: u64,
    /// `--iterations`: operations per thread under [`Driver::Iterations`].
    pub iterations: u64,
    /// `--paths`: how many paths `stat-random` caches.
    pub paths: u64,
    /// `--cred UID:GID`: the stat and open workers act as this user (lib:
    /// through `Vfs::as_cred`; kernel: the worker thread's fsuid/fsgid).
    pub cred: Option<(u32, u32)>,
    /// `--etcd URL`: the etcd the `etcd` target uses (default: start a
    /// local single member for each case).
    pub etcd: Option<String>,
    /// `--mib N`: how many MiB `data` writes and reads sequentially.
    pub mib: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            hold_ns: 200,
            every_us: 1000,
            iterations: 10_000,
            paths: 100_000,
            cred: None,
            etcd: None,
            mib: 1024,
        }
    }
}

/// One measurement to prepare: which target and variant, how many threads.
#[derive(Clone, Copy, Debug)]
pub struct CaseSpec<'a> {
    pub target: &'a str,
    pub variant: &'a str,
    pub threads: usize,
    pub options: &'a Options,
}

/// A named family of measurements.
pub trait Workload: Sync {
    /// The name given on the command line (`dcache bench NAME`).
    fn name(&self) -> &'static str;

    /// One line for `dcache bench --list`.
    fn about(&self) -> &'static str;

    /// The variants, the comparison base first.
    fn variants(&self) -> &'static [&'static str];

    /// The targets this workload can run on (a subset of [`TARGETS`]).
    fn targets(&self) -> &'static [&'static str] {
        &["lib"]
    }

    /// The variants that mean something on `target` (the kernel does what
    /// it does: `stat` has no reference-free variant there). When none of
    /// the requested variants applies to a target, the harness runs the
    /// first of these instead.
    fn variants_for(&self, _target: &str) -> &'static [&'static str] {
        self.variants()
    }

    fn driver(&self) -> Driver {
        Driver::Timed
    }

    /// Build the shared state for one case. The harness only asks for
    /// variants and targets this workload lists. An environment that cannot
    /// host the case (no /dev/shm, no FUSE) is an `Err` with a one-line
    /// reason; the harness reports it and goes on with the next case.
    fn prepare(&self, spec: &CaseSpec<'_>) -> Result<Box<dyn Case>, String>;
}

/// The prepared shared state of one measurement.
pub trait Case: Send + Sync {
    /// The body of worker thread `w.index()`: any per-thread setup, then
    /// exactly one `w.run(|| op())`. A worker that returns without calling
    /// `run` simply counts nothing.
    fn worker(&self, w: Worker<'_>);

    /// Uncounted helper threads (an intruder) running beside the workers
    /// from the start of the warm-up until the stop.
    fn background_threads(&self) -> usize {
        0
    }

    /// The body of background thread `index`; must return soon after
    /// `stop.is_set()` turns true (`stop.sleep` helps).
    fn background(&self, _index: usize, _stop: &Stop) {}

    /// What the prepared cache costs in memory, for workloads that measure
    /// it; printed once per case and kept in the run's JSON.
    fn footprint(&self) -> Option<Footprint> {
        None
    }

    /// A line printed after the measurement, given its result (the `etcd`
    /// target compares the rate with a round trip to etcd).
    fn summary(&self, _result: &RunResult) -> Option<String> {
        None
    }

    /// Undo what `prepare` made outside the process (files, mounts). Called
    /// once after the threads are joined; `Drop` should also clean up in
    /// case a run is abandoned.
    fn teardown(self: Box<Self>) -> Result<(), String> {
        Ok(())
    }
}
