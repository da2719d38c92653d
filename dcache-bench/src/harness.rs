//! Running one case: spawn and pin the workers, start them together, sample
//! their counters every second, stop, join.
//!
//! The main thread only sleeps and reads counters, so it costs the workers
//! nothing but one wake-up a second. Sampling deadlines are absolute
//! (start + k seconds), so late wake-ups do not accumulate into drift.

use std::time::{Duration, Instant};

use super::affinity::{cpu_for, pin_current_thread};
use super::cputime::thread_cpu_time;
use super::progress::Progress;
use super::report::{mean_total, RunResult, Sample};
use super::worker::{catch, Gate, Shared, Slot, Stop, Worker};
use super::workload::{Case, CaseSpec, Driver, Workload};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::thread;

/// How long a case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub warmup: Duration,
    pub seconds: u64,
}

/// What one case produced: its result (None when it could not be prepared),
/// the problems met on the way, and warnings that do not make the run fail
/// (a thread that could not be pinned).
pub struct CaseOutcome {
    pub result: Option<RunResult>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// The prefix of every line a case prints: `<workload> <target> <variant> <n>t`.
pub fn prefix(workload: &str, spec: &CaseSpec<'_>) -> String {
    format!(
        "{workload} {} {} {}t",
        spec.target, spec.variant, spec.threads
    )
}

/// Prepare, run and tear down one case.
pub(crate) fn run_case(
    workload: &dyn Workload,
    spec: &CaseSpec<'_>,
    timing: Timing,
    cpus: &[usize],
    progress: &Progress,
) -> CaseOutcome {
    let name = prefix(workload.name(), spec);
    progress.message(&name);
    let case = match workload.prepare(spec) {
        Ok(c) => c,
        Err(e) => {
            return CaseOutcome {
                result: None,
                errors: vec![format!("{name}: cannot prepare: {e}")],
                warnings: Vec::new(),
            }
        }
    };
    let footprint = case.footprint();
    if let Some(f) = &footprint {
        progress.println(&format!("{name}: {}", f.describe()));
    }
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut result = match workload.driver() {
        Driver::Timed => {
            let phase = drive(
                &*case,
                spec.threads,
                cpus,
                u64::MAX,
                Some(timing),
                &mut |s| {
                    progress.println(&format!(
                        "{name}: min:{} max:{} total:{}",
                        s.min, s.max, s.total
                    ))
                },
                progress,
            );
            errors.extend(phase.errors.iter().map(|e| format!("{name}: {e}")));
            warnings.extend(phase.warnings.iter().map(|e| format!("{name}: {e}")));
            RunResult {
                workload: None,
                target: spec.target.to_string(),
                variant: spec.variant.to_string(),
                threads: spec.threads,
                seconds: phase.samples.len() as u64,
                ops_per_sec: mean_total(&phase.samples),
                per_second: phase.samples,
                cpu_util: phase.cpu_util,
                memory: None,
            }
        }
        Driver::Iterations => {
            let iterations = spec.options.iterations;
            let single = drive(&*case, 1, cpus, iterations, None, &mut |_| {}, progress);
            let t = single.elapsed.first().copied().unwrap_or_default();
            progress.println(&format!(
                "{name}: single: total {:.2}ms per {:.3}us",
                ms(t),
                per_op_us(t, iterations)
            ));
            let concur = drive(
                &*case,
                spec.threads,
                cpus,
                iterations,
                None,
                &mut |_| {},
                progress,
            );
            for (t, cpu) in concur.elapsed.iter().zip(&concur.cpus) {
                let cpu = cpu.map_or("-".to_string(), |c| c.to_string());
                progress.println(&format!(
                    "{name}: concur: total {:.2}ms per {:.3}us CPU {cpu}",
                    ms(*t),
                    per_op_us(*t, iterations)
                ));
            }
            progress.println(&format!(
                "{name}: times: {iterations} threads: {} cpus: {}",
                spec.threads,
                cpus.len()
            ));
            errors.extend(single.errors.iter().map(|e| format!("{name}: single: {e}")));
            errors.extend(concur.errors.iter().map(|e| format!("{name}: concur: {e}")));
            warnings.extend(concur.warnings.iter().map(|e| format!("{name}: {e}")));
            let wall = concur.wall.as_secs_f64();
            RunResult {
                workload: None,
                target: spec.target.to_string(),
                variant: spec.variant.to_string(),
                threads: spec.threads,
                seconds: concur.samples.len() as u64,
                ops_per_sec: if wall > 0.0 {
                    concur.total_ops as f64 / wall
                } else {
                    0.0
                },
                per_second: concur.samples,
                cpu_util: concur.cpu_util,
                memory: None,
            }
        }
    };
    result.memory = footprint;
    if let Some(line) = case.summary(&result) {
        progress.println(&format!("{name}: {line}"));
    }
    if let Err(e) = case.teardown() {
        errors.push(format!("{name}: teardown: {e}"));
    }
    CaseOutcome {
        result: Some(result),
        errors,
        warnings,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn per_op_us(d: Duration, ops: u64) -> f64 {
    d.as_secs_f64() * 1e6 / ops.max(1) as f64
}

/// What one phase of threads produced.
struct Phase {
    samples: Vec<Sample>,
    /// Per worker: time from the start signal to the end of its loop.
    elapsed: Vec<Duration>,
    cpus: Vec<Option<usize>>,
    total_ops: u64,
    /// From the start signal until every worker ended.
    wall: Duration,
    /// The workers' CPU time over the time they had: (workers x window)
    /// for timed runs, the sum of their own loop times for iteration runs;
    /// below 1 when something else took their CPUs.
    cpu_util: Option<f64>,
    errors: Vec<String>,
    warnings: Vec<String>,
}

/// Run `threads` workers of `case`. With `timing`, they loop until stopped
/// after the warm-up and `timing.seconds` samples; without, each ends after
/// `limit` operations and a sample is taken every full second meanwhile.
fn drive(
    case: &dyn Case,
    threads: usize,
    cpus: &[usize],
    limit: u64,
    timing: Option<Timing>,
    on_sample: &mut dyn FnMut(Sample),
    progress: &Progress,
) -> Phase {
    let slots: Vec<Slot> = (0..threads).map(|_| Slot::default()).collect();
    let stop = Stop::default();
    let gate = Gate::default();
    let failures = Mutex::new(Vec::new());
    let pin_error: Mutex<Option<String>> = Mutex::new(None);
    let pinned: Vec<Mutex<Option<usize>>> = (0..threads).map(|_| Mutex::new(None)).collect();
    let shared = Shared {
        slots: &slots,
        stop: &stop,
        gate: &gate,
        failures: &failures,
        limit,
    };
    let mut samples = Vec::new();
    let mut spawn_error = None;
    let mut wall = Duration::ZERO;
    let mut cpu_util = None;

    thread::scope(|s| {
        let mut spawned = 0;
        for i in 0..threads {
            let (shared, pinned, failures, pin_error) =
                (&shared, &pinned[i], &failures, &pin_error);
            let cpu = cpu_for(cpus, i);
            let r = thread::Builder::new()
                .name(format!("bench-{i}"))
                .spawn_scoped(s, move || {
                    let cpu = match pin_current_thread(cpu) {
                        Ok(()) => Some(cpu),
                        Err(e) => {
                            // Unpinned numbers are noisier but still numbers
                            // (a seccomp filter may forbid affinity calls).
                            *lock(pin_error) = Some(format!("cannot pin to CPU {cpu}: {e}"));
                            None
                        }
                    };
                    *lock(pinned) = cpu;
                    let w = Worker::new(i, cpu, threads, shared);
                    catch(failures, &format!("worker {i}"), || case.worker(w));
                });
            match r {
                Ok(_) => spawned += 1,
                Err(e) => {
                    spawn_error = Some(format!("cannot start worker {i}: {e}"));
                    break;
                }
            }
        }
        gate.wait_ready(spawned);
        if spawn_error.is_none() {
            for b in 0..case.background_threads() {
                let (stop, failures) = (&stop, &failures);
                let r = thread::Builder::new()
                    .name(format!("bench-bg-{b}"))
                    .spawn_scoped(s, move || {
                        catch(failures, &format!("background thread {b}"), || {
                            case.background(b, stop)
                        })
                    });
                if let Err(e) = r {
                    spawn_error = Some(format!("cannot start background thread {b}: {e}"));
                    break;
                }
            }
        }
        if spawn_error.is_some() {
            // Let the workers that did start see the stop at once and leave.
            stop.set();
        }
        let start = gate.open();
        match timing {
            _ if spawn_error.is_some() => {}
            Some(t) => {
                let mut next = start;
                for _ in 0..t.warmup.as_secs() {
                    next += Duration::from_secs(1);
                    sleep_until(next);
                    progress.tick();
                }
                let rest = t.warmup - Duration::from_secs(t.warmup.as_secs());
                next += rest;
                sleep_until(next);
                let cpu_start = cpu_times(&slots);
                let measure_start = Instant::now();
                let mut prev = read_ops(&slots);
                for _ in 0..t.seconds {
                    next += Duration::from_secs(1);
                    sleep_until(next);
                    let sample = sample_since(&slots, &mut prev);
                    on_sample(sample);
                    samples.push(sample);
                    progress.tick();
                }
                cpu_util = utilisation(&cpu_start, &cpu_times(&slots), measure_start.elapsed());
                stop.set();
            }
            None => {
                let mut next = start + Duration::from_secs(1);
                let mut prev = vec![0; threads];
                while !all_done(&slots) {
                    let now = Instant::now();
                    if now >= next {
                        let sample = sample_since(&slots, &mut prev);
                        on_sample(sample);
                        samples.push(sample);
                        next += Duration::from_secs(1);
                    }
                    thread::sleep((next - now.min(next)).min(Duration::from_millis(2)));
                }
                wall = start.elapsed();
                stop.set();
            }
        }
    });

    let mut errors = std::mem::take(&mut *lock(&failures));
    errors.extend(spawn_error);
    let elapsed: Vec<Duration> = slots
        .iter()
        .map(|s| Duration::from_nanos(s.elapsed_ns.load(Ordering::Relaxed)))
        .collect();
    if wall.is_zero() {
        wall = elapsed.iter().copied().max().unwrap_or_default();
    }
    if timing.is_none() {
        cpu_util = loop_utilisation(&slots);
    }
    let cpus: Vec<Option<usize>> = pinned.iter().map(|p| *lock(p)).collect();
    let unpinned = cpus.iter().filter(|c| c.is_none()).count();
    let warnings = match lock(&pin_error).take() {
        Some(e) => vec![format!("{unpinned} worker(s) run unpinned: {e}")],
        None => Vec::new(),
    };
    Phase {
        samples,
        elapsed,
        cpus,
        total_ops: read_ops(&slots).iter().sum(),
        wall,
        cpu_util,
        errors,
        warnings,
    }
}

/// Each worker's CPU time so far (None for a worker that never reached its
/// loop, or whose clock cannot be read).
fn cpu_times(slots: &[Slot]) -> Vec<Option<Duration>> {
    slots
        .iter()
        // Relaxed: the handle was published before the start (gate).
        .map(|s| match s.thread.load(Ordering::Relaxed) {
            0 => None,
            h => thread_cpu_time(h),
        })
        .collect()
}

/// CPU time used between two readings over the time available to the
/// workers that have both readings.
fn utilisation(
    start: &[Option<Duration>],
    end: &[Option<Duration>],
    window: Duration,
) -> Option<f64> {
    let (used, n) = start
        .iter()
        .zip(end)
        .filter_map(|(a, b)| Some(b.as_ref()?.saturating_sub(*a.as_ref()?)))
        .fold((Duration::ZERO, 0u32), |(sum, n), d| (sum + d, n + 1));
    let avail = window.as_secs_f64() * f64::from(n);
    (avail > 0.0).then(|| used.as_secs_f64() / avail)
}

/// For runs that end by themselves: the CPU time each worker measured over
/// its own loop, against the loop's wall time. Workers that never ran their
/// loop, or could not read their clock, are left out.
fn loop_utilisation(slots: &[Slot]) -> Option<f64> {
    let (cpu, wall) = slots
        .iter()
        // Relaxed: written before `done`, which the harness has acquired.
        .map(|s| {
            (
                s.cpu_ns.load(Ordering::Relaxed),
                s.elapsed_ns.load(Ordering::Relaxed),
            )
        })
        .filter(|&(c, e)| c > 0 && e > 0)
        .fold((0u64, 0u64), |(c, e), (ci, ei)| {
            (c.saturating_add(ci), e.saturating_add(ei))
        });
    (wall > 0).then(|| cpu as f64 / wall as f64)
}

/// One second's sample: each worker's operations since `prev`, which
/// becomes the current counts.
fn sample_since(slots: &[Slot], prev: &mut Vec<u64>) -> Sample {
    let cur = read_ops(slots);
    let deltas: Vec<u64> = cur
        .iter()
        .zip(prev.iter())
        .map(|(c, p)| c.saturating_sub(*p))
        .collect();
    *prev = cur;
    Sample::from_deltas(&deltas)
}

fn read_ops(slots: &[Slot]) -> Vec<u64> {
    // Relaxed: see `Worker::run`; a slightly stale count only moves a few
    // operations from one second into the next.
    slots
        .iter()
        .map(|s| s.ops.load(Ordering::Relaxed))
        .collect()
}

fn all_done(slots: &[Slot]) -> bool {
    // Acquire: pairs with the worker's Release of `done`, after which its
    // final count and elapsed time are visible.
    slots.iter().all(|s| s.done.load(Ordering::Acquire))
}

fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        thread::sleep(deadline - now);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking worker is caught before it can poison these; if one ever
    // does, the data (a list of messages, a CPU number) is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affinity::allowed_cpus;
    use crate::workload::Options;
    use std::sync::atomic::AtomicU64;

    /// A case that counts its operations in a shared atomic too, so the
    /// harness's counters can be checked against an independent count.
    struct Counting {
        ops: AtomicU64,
        skip_worker: Option<usize>,
        panic_worker: Option<usize>,
        bg_runs: AtomicU64,
    }

    impl Case for Counting {
        fn worker(&self, w: Worker<'_>) {
            if self.skip_worker == Some(w.index()) {
                return;
            }
            if self.panic_worker == Some(w.index()) {
                panic!("boom");
            }
            w.run(|| self.ops.fetch_add(1, Ordering::Relaxed));
        }
        fn background_threads(&self) -> usize {
            1
        }
        fn background(&self, _index: usize, stop: &Stop) {
            while stop.sleep(Duration::from_millis(1)) {}
            self.bg_runs.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counting() -> Counting {
        Counting {
            ops: AtomicU64::new(0),
            skip_worker: None,
            panic_worker: None,
            bg_runs: AtomicU64::new(0),
        }
    }

    #[test]
    fn utilisation_is_used_over_available() {
        let s = |ms| Some(Duration::from_millis(ms));
        let u = utilisation(
            &[s(0), s(100), None],
            &[s(500), s(600), s(9)],
            Duration::from_secs(1),
        );
        assert_eq!(u, Some(0.5));
        assert_eq!(utilisation(&[None], &[s(1)], Duration::from_secs(1)), None);
    }

    #[test]
    fn loop_utilisation_skips_workers_without_a_clock() {
        let slots: Vec<Slot> = (0..3).map(|_| Slot::default()).collect();
        assert_eq!(loop_utilisation(&slots), None);
        for (s, (cpu, wall)) in slots.iter().zip([(300, 1000), (0, 1000), (700, 1000)]) {
            s.cpu_ns.store(cpu, Ordering::Relaxed);
            s.elapsed_ns.store(wall, Ordering::Relaxed);
        }
        assert_eq!(loop_utilisation(&slots), Some(0.5));
    }

    #[test]
    fn iteration_limit_counts_exactly() {
        let case = counting();
        let phase = drive(
            &case,
            3,
            &allowed_cpus(),
            1000,
            None,
            &mut |_| {},
            &Progress::new(0),
        );
        assert!(phase.errors.is_empty(), "{:?}", phase.errors);
        assert_eq!(phase.total_ops, 3000);
        assert_eq!(case.ops.load(Ordering::Relaxed), 3000);
        assert_eq!(case.bg_runs.load(Ordering::Relaxed), 1);
        assert_eq!(phase.elapsed.len(), 3);
        assert!(phase.cpus.iter().all(|c| c.is_some()));
        assert!(phase.cpu_util.is_some_and(|u| u > 0.0));
    }

    #[test]
    fn a_worker_that_skips_run_or_panics_does_not_hang_the_run() {
        let mut case = counting();
        case.skip_worker = Some(0);
        case.panic_worker = Some(1);
        let phase = drive(
            &case,
            3,
            &allowed_cpus(),
            500,
            None,
            &mut |_| {},
            &Progress::new(0),
        );
        assert_eq!(phase.total_ops, 500);
        assert_eq!(phase.errors.len(), 1);
        assert!(phase.errors[0].contains("worker 1 panicked: boom"));
    }

    #[test]
    fn timed_run_samples_every_second() {
        let case = counting();
        let mut seen = 0;
        let phase = drive(
            &case,
            2,
            &allowed_cpus(),
            u64::MAX,
            Some(Timing {
                warmup: Duration::ZERO,
                seconds: 1,
            }),
            &mut |_| seen += 1,
            &Progress::new(0),
        );
        assert_eq!(seen, 1);
        assert_eq!(phase.samples.len(), 1);
        let s = phase.samples[0];
        assert!(s.min <= s.max && s.max <= s.total && s.total > 0);
        // The counters saw at least the sampled operations.
        assert!(case.ops.load(Ordering::Relaxed) >= s.total);
        let util = phase.cpu_util.unwrap();
        assert!(util > 0.0 && util < 1.5, "{util}");
    }

    struct Failing;
    impl Workload for Failing {
        fn name(&self) -> &'static str {
            "failing"
        }
        fn about(&self) -> &'static str {
            "cannot be prepared"
        }
        fn variants(&self) -> &'static [&'static str] {
            &["v"]
        }
        fn prepare(&self, _: &CaseSpec<'_>) -> Result<Box<dyn Case>, String> {
            Err("no /dev/shm".into())
        }
    }

    struct Iterated;
    impl Workload for Iterated {
        fn name(&self) -> &'static str {
            "iterated"
        }
        fn about(&self) -> &'static str {
            "fixed iteration count"
        }
        fn variants(&self) -> &'static [&'static str] {
            &["v"]
        }
        fn driver(&self) -> Driver {
            Driver::Iterations
        }
        fn prepare(&self, _: &CaseSpec<'_>) -> Result<Box<dyn Case>, String> {
            Ok(Box::new(counting()))
        }
    }

    #[test]
    fn iterations_driver_runs_single_then_concurrent() {
        let opts = Options {
            iterations: 5000,
            ..Options::default()
        };
        let spec = CaseSpec {
            target: "lib",
            variant: "v",
            threads: 2,
            options: &opts,
        };
        let timing = Timing {
            warmup: Duration::ZERO,
            seconds: 1,
        };
        let out = run_case(&Iterated, &spec, timing, &allowed_cpus(), &Progress::new(0));
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let r = out.result.unwrap();
        assert_eq!((r.threads, r.seconds), (2, r.per_second.len() as u64));
        assert!(r.ops_per_sec > 0.0);
        // The workers' own CPU clocks over their loops.
        let util = r.cpu_util.unwrap();
        assert!(util > 0.0 && util < 1.5, "{util}");
    }

    #[test]
    fn a_case_that_cannot_be_prepared_is_reported() {
        let opts = Options::default();
        let spec = CaseSpec {
            target: "lib",
            variant: "v",
            threads: 1,
            options: &opts,
        };
        let out = run_case(
            &Failing,
            &spec,
            Timing {
                warmup: Duration::ZERO,
                seconds: 1,
            },
            &allowed_cpus(),
            &Progress::new(0),
        );
        assert!(out.result.is_none());
        assert_eq!(
            out.errors,
            vec!["failing lib v 1t: cannot prepare: no /dev/shm"]
        );
    }
}
