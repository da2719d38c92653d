//! `dcache bench`: a will-it-scale style harness.
//!
//! N worker threads, pinned one per CPU, run one operation in a loop and
//! count into their own 256-byte slot; every second the main thread reads
//! the counters and prints `<workload> <target> <variant> <n>t: min:<ops>
//! max:<ops> total:<ops>` (the smallest and largest per-thread count of
//! that second, and the sum). Warm-up seconds are not counted. After every
//! case a summary table compares variants and thread counts; `--json` and
//! `--plot` keep the numbers.
//!
//! - [`workload`]: the `Workload`/`Case` traits a workload implements.
//! - [`worker`]: the per-thread loop and counters.
//! - [`harness`]: running one case; [`plan`]: checking a request.
//! - [`report`], [`plot`]: the outputs. [`workloads`]: the registry.

pub mod affinity;
pub mod cache_aligned;
mod cputime;
pub mod etcd;
pub mod harness;
pub mod plan;
pub mod plot;
mod progress;
pub mod report;
pub mod seaweedfs;
pub mod worker;
pub mod workload;
pub mod workloads;

use std::fmt::Write as _;

pub use plan::Request;
pub use report::{RunResult, Sample};
pub use worker::{Stop, Worker};
pub use workload::{Case, CaseSpec, Driver, Options, Workload};

use progress::Progress;

/// Why a bench ended badly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BenchError {
    /// The request itself was wrong (exit status 2); nothing ran.
    Usage(String),
    /// Something failed while running or writing results (exit status 1).
    Failed(String),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Usage(m) | BenchError::Failed(m) => f.write_str(m),
        }
    }
}

/// `dcache bench --list`: every workload with its variants and targets.
pub fn list() -> String {
    let mut out = String::new();
    for w in workloads::REGISTRY {
        let _ = writeln!(out, "{:<18} {}", w.name(), w.about());
        let _ = writeln!(
            out,
            "{:<18} variants: {}; targets: {}",
            "",
            w.variants().join(", "),
            w.targets().join(", ")
        );
    }
    out
}

/// Run what `req` asks for, printing per-second lines and the summary on
/// stdout. Returns the results of every case that ran.
pub fn run(req: &Request) -> Result<Vec<RunResult>, BenchError> {
    let cpus = affinity::allowed_cpus();
    let plan = plan::plan(req, cpus.len()).map_err(BenchError::Usage)?;
    let progress = Progress::new(plan.planned_ticks());

    let max_threads = plan
        .steps
        .iter()
        .flat_map(|s| s.threads.iter().copied())
        .max()
        .unwrap_or(1);
    if max_threads > cpus.len() {
        progress.eprintln(&format!(
            "dcache: warning: up to {max_threads} threads on {} CPUs: pinning wraps around",
            cpus.len()
        ));
    }
    if plan.tour {
        progress.println(&format!(
            "dcache bench tour: {} cases, about {:.0} s (threads {:?}, {} CPUs)",
            plan.steps.iter().map(|s| s.cases()).sum::<usize>(),
            plan.planned_seconds(),
            plan.steps
                .first()
                .map(|s| s.threads.clone())
                .unwrap_or_default(),
            cpus.len()
        ));
    }

    let mut all: Vec<RunResult> = Vec::new();
    let mut tables = String::new();
    let mut errors: Vec<String> = Vec::new();
    // The why of a CPU-starved row is printed once, under the first table
    // that has one.
    let mut explained = false;
    let mut headline = None;
    for step in &plan.steps {
        let mut runs: Vec<RunResult> = Vec::new();
        let step_options = step.cred.map(|cred| workload::Options {
            cred: Some(cred),
            ..plan.options.clone()
        });
        let options = step_options.as_ref().unwrap_or(&plan.options);
        for target in &step.targets {
            for variant in &step.variants_on(target) {
                for &threads in &step.threads {
                    let spec = CaseSpec {
                        target,
                        variant,
                        threads,
                        options,
                    };
                    let out =
                        harness::run_case(step.workload, &spec, step.timing, &cpus, &progress);
                    for w in &out.warnings {
                        progress.eprintln(&format!("dcache: warning: {w}"));
                    }
                    for e in &out.errors {
                        progress.eprintln(&format!("dcache: {e}"));
                    }
                    // The tour goes on past a case this machine cannot
                    // host (no /dev/shm, no FUSE); anything else counts.
                    if out.result.is_some() || !plan.tour {
                        errors.extend(out.errors);
                    }
                    if let Some(mut r) = out.result {
                        if plan.tour {
                            r.workload = Some(step.workload.name().to_string());
                        }
                        runs.push(r);
                    }
                }
            }
        }
        if !runs.is_empty() {
            let base = step.variants[0];
            let title = match options.cred {
                Some((u, g)) => format!("{} (as {u}:{g})", step.workload.name()),
                None => step.workload.name().to_string(),
            };
            tables.push_str(&report::summary_table(&title, &runs, base, !explained));
            tables.push_str(&report::lib_vs_kernel(&runs));
            if plan.tour && step.workload.name() == "stat-same" {
                headline = report::headline(&runs, options.cred);
            }
            explained |= runs.iter().any(report::starved);
            tables.push('\n');
        }
        all.extend(runs);
    }
    progress.finish();
    progress.println(&format!("\n{}", tables.trim_end()));
    if let Some(h) = headline {
        progress.println(&h);
    }

    let label = match (&plan.tour, plan.steps.first()) {
        (false, Some(s)) => s.workload.name(),
        _ => "tour",
    };
    if let Some(path) = &plan.json {
        report::write_atomically(path, &report::to_json(label, cpus.len(), &all))
            .map_err(BenchError::Failed)?;
    }
    if let Some(path) = &plan.plot {
        if let Some(warning) = plot::write_plot(path, label, &all).map_err(BenchError::Failed)? {
            progress.eprintln(&format!("dcache: warning: {warning}"));
        }
    }
    if !errors.is_empty() {
        return Err(BenchError::Failed(format!(
            "{} problem(s), first: {}",
            errors.len(),
            errors[0]
        )));
    }
    Ok(all)
}
