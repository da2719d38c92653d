//! The thread side of the harness: the hot loop, its counter and the flags.
//!
//! Each worker counts into its own `Slot`, 256 bytes away from every other
//! (will-it-scale's spacing: x86's adjacent-line prefetcher pulls 128-byte
//! pairs, so 64 bytes apart would still let two counters disturb each
//! other). The loop keeps the count in a register and publishes it with a
//! plain relaxed store; the sampler only needs an eventually fresh value.

use std::hint::black_box;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::cache_aligned::CacheAligned;
use std::hint::spin_loop as spin_hint;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::yield_now;

/// One worker's counters, alone in 256 bytes.
#[repr(C, align(256))]
#[derive(Default)]
pub(crate) struct Slot {
    /// Operations done so far (written by the owner only).
    pub(crate) ops: AtomicU64,
    /// Nanoseconds from the start signal to the end of the loop, written once
    /// when the loop ends.
    pub(crate) elapsed_ns: AtomicU64,
    /// The loop ended (limit reached or stopped).
    pub(crate) done: AtomicBool,
    /// The worker thread's pthread handle (0: never reached its loop), for
    /// reading its CPU clock.
    pub(crate) thread: AtomicU64,
    /// CPU nanoseconds the thread used from the start signal to the end of
    /// its loop, written with `elapsed_ns` (0 if its clock was unreadable).
    pub(crate) cpu_ns: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 256);

/// The stop flag, on a line of its own: every worker reads it once per
/// operation, so it must not share a line with anything that is written.
#[derive(Default)]
pub struct Stop(CacheAligned<AtomicBool>);

impl Stop {
    /// Whether the run is over.
    #[inline(always)]
    pub fn is_set(&self) -> bool {
        // Relaxed: the flag publishes no data; a worker that sees it a few
        // operations late only does a few uncounted extra operations.
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self) {
        // Relaxed: see `is_set`; the join that follows orders the rest.
        self.0.store(true, Ordering::Relaxed);
    }

    /// Sleep for `d`, waking early (within 10 ms) when the run stops.
    /// Returns false when the run has stopped.
    pub fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if self.is_set() {
                return false;
            }
            let now = Instant::now();
            if now >= end {
                return true;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(10)));
        }
    }
}

/// The start line: the harness starts the clock only once every worker has
/// finished its own setup and stands at its loop.
#[derive(Default)]
pub(crate) struct Gate {
    ready: CacheAligned<AtomicUsize>,
    go: CacheAligned<AtomicBool>,
    /// When `go` was raised, for the workers' elapsed times.
    start: Mutex<Option<Instant>>,
}

impl Gate {
    fn arrive(&self) {
        // Release: the worker's setup happens-before the harness's Acquire
        // read of `ready` (nothing depends on it yet, but a case may later).
        self.ready.fetch_add(1, Ordering::Release);
    }

    fn wait_go(&self) -> Instant {
        let mut spins = 0u32;
        // Acquire: pairs with `open`'s Release so the start time is visible.
        while !self.go.load(Ordering::Acquire) {
            spins += 1;
            if spins < 64 {
                spin_hint();
            } else {
                // More threads than CPUs is allowed: let the others run.
                yield_now();
            }
        }
        self.start_time()
    }

    fn start_time(&self) -> Instant {
        match self.start.lock() {
            Ok(g) => g.unwrap_or_else(Instant::now),
            Err(p) => p.into_inner().unwrap_or_else(Instant::now),
        }
    }

    /// Block until `n` workers have arrived.
    pub(crate) fn wait_ready(&self, n: usize) {
        // Acquire: pairs with `arrive`.
        while self.ready.load(Ordering::Acquire) < n {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Let the workers go; returns the start instant.
    pub(crate) fn open(&self) -> Instant {
        let now = Instant::now();
        match self.start.lock() {
            Ok(mut g) => *g = Some(now),
            Err(p) => *p.into_inner() = Some(now),
        }
        // Release: the start time written above is visible to every worker
        // that sees `go`.
        self.go.store(true, Ordering::Release);
        now
    }
}

/// Shared by the harness and every worker of one case.
pub(crate) struct Shared<'a> {
    pub(crate) slots: &'a [Slot],
    pub(crate) stop: &'a Stop,
    pub(crate) gate: &'a Gate,
    pub(crate) failures: &'a Mutex<Vec<String>>,
    /// Operations per worker before it ends by itself (`u64::MAX`: never).
    pub(crate) limit: u64,
}

/// What a worker thread gets: its index, its CPU, and the loop.
pub struct Worker<'a> {
    index: usize,
    cpu: Option<usize>,
    threads: usize,
    shared: &'a Shared<'a>,
    arrived: bool,
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
        index: usize,
        cpu: Option<usize>,
        threads: usize,
        shared: &'a Shared<'a>,
    ) -> Self {
        Worker {
            index,
            cpu,
            threads,
            shared,
            arrived: false,
        }
    }

    /// This worker's number, 0..threads.
    pub fn index(&self) -> usize {
        self.index
    }

    /// How many workers this case runs.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The CPU this thread is pinned to (None when pinning failed).
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }

    /// Record a failure of the case (a syscall that should have worked).
    /// The run still ends normally; the harness reports the message and the
    /// command exits non-zero.
    pub fn fail(&self, msg: impl Into<String>) {
        let msg = msg.into();
        match self.shared.failures.lock() {
            Ok(mut v) => v.push(msg),
            Err(p) => p.into_inner().push(msg),
        }
    }

    /// The measured loop: wait for the start, then call `op` until the run
    /// stops (or the iteration limit is reached), counting each call. Meant
    /// to be inlined into the case's `worker` so `op` is inlined too.
    #[inline(always)]
    pub fn run<R>(mut self, mut op: impl FnMut() -> R) {
        let (start, cpu_start) = self.start();
        let slot = &self.shared.slots[self.index];
        let stop = self.shared.stop;
        let limit = self.shared.limit;
        let mut n: u64 = 0;
        while n < limit && !stop.is_set() {
            black_box(op());
            n += 1;
            // Relaxed: the sampler reads a monotone counter written only
            // here; it needs no ordering with anything else.
            slot.ops.store(n, Ordering::Relaxed);
        }
        self.finish(start, cpu_start);
    }

    /// As [`Worker::run`] for an `op` that does `per_call` operations at
    /// once (a batch): each call counts `per_call`, and the iteration limit
    /// is reached within one call.
    #[inline(always)]
    pub fn run_batch<R>(mut self, per_call: u64, mut op: impl FnMut() -> R) {
        let (start, cpu_start) = self.start();
        let slot = &self.shared.slots[self.index];
        let stop = self.shared.stop;
        let limit = self.shared.limit;
        let mut n: u64 = 0;
        while n < limit && !stop.is_set() {
            black_box(op());
            n += per_call.max(1);
            // Relaxed: as in `run`.
            slot.ops.store(n, Ordering::Relaxed);
        }
        self.finish(start, cpu_start);
    }

    /// Wait for the start; returns the start instant and this thread's CPU
    /// time at it.
    #[inline(never)]
    fn start(&mut self) -> (Instant, Option<Duration>) {
        self.arrived = true;
        let me = super::cputime::current_thread();
        // Relaxed: published by `arrive`'s Release.
        self.shared.slots[self.index]
            .thread
            .store(me, Ordering::Relaxed);
        self.shared.gate.arrive();
        let start = self.shared.gate.wait_go();
        (start, super::cputime::thread_cpu_time(me))
    }

    #[inline(never)]
    fn finish(&self, start: Instant, cpu_start: Option<Duration>) {
        let slot = &self.shared.slots[self.index];
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Read by the thread itself, so it works for runs that end on their
        // own too (the harness cannot read a clock of an exited thread).
        let cpu = cpu_start
            .zip(super::cputime::thread_cpu_time(
                super::cputime::current_thread(),
            ))
            .map_or(0, |(a, b)| {
                u64::try_from(b.saturating_sub(a).as_nanos()).unwrap_or(u64::MAX)
            });
        // Relaxed for the times, Release for `done`: a reader that sees
        // `done` (Acquire) also sees the final times and count.
        slot.cpu_ns.store(cpu, Ordering::Relaxed);
        slot.elapsed_ns.store(ns, Ordering::Relaxed);
        slot.done.store(true, Ordering::Release);
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        // A worker that never reached `run` (it returned early or panicked)
        // must still arrive, or the harness would wait for it forever.
        if !self.arrived {
            self.shared.gate.arrive();
            // Release: pairs with the harness's Acquire read of `done`.
            self.shared.slots[self.index]
                .done
                .store(true, Ordering::Release);
        }
    }
}

/// Run `f`, turning a panic into a recorded failure (so one broken case
/// cannot take the whole bench down).
pub(crate) fn catch(failures: &Mutex<Vec<String>>, what: &str, f: impl FnOnce()) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let line = format!("{what} panicked: {msg}");
        match failures.lock() {
            Ok(mut v) => v.push(line),
            Err(p) => p.into_inner().push(line),
        }
    }
}
