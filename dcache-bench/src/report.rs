//! Results: the per-second samples, the summary table, the JSON file.
//!
//! The JSON schema is fixed (other tools read these names):
//! `{"workload", "cpus", "runs": [{"target", "variant", "threads", "seconds",
//! "ops_per_sec", "per_second": [{"min", "max", "total"}]}]}`. When one
//! invocation runs several workloads (the default tour), the top-level
//! `workload` is `"tour"` and every run carries its own `"workload"` too.
//! A workload that measures memory (`stat-random`) adds an optional
//! `"memory"` object to its runs ([`Footprint`]); other runs have none.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

/// One second of one run: the smallest and largest per-thread operation
/// count of that second, and their sum over all threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sample {
    pub min: u64,
    pub max: u64,
    pub total: u64,
}

impl Sample {
    /// Summarise one second's per-thread increments.
    pub fn from_deltas(deltas: &[u64]) -> Sample {
        Sample {
            min: deltas.iter().copied().min().unwrap_or(0),
            max: deltas.iter().copied().max().unwrap_or(0),
            total: deltas.iter().sum(),
        }
    }
}

/// One measured case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// Only written when the file holds several workloads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    pub target: String,
    pub variant: String,
    pub threads: usize,
    pub seconds: u64,
    pub ops_per_sec: f64,
    pub per_second: Vec<Sample>,
    /// Share of the measured wall time the workers were on a CPU (not in
    /// the JSON, whose schema is fixed; shown in the summary table).
    #[serde(skip)]
    pub cpu_util: Option<f64>,
    /// What the case's cached paths cost in memory, for workloads that
    /// measure it (absent from the JSON otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Footprint>,
}

/// The memory a case's cache took, measured while it was prepared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Footprint {
    /// Paths cached.
    pub paths: u64,
    /// Where the bytes were read: `"rss"`, this process's resident memory
    /// (`/proc/self/statm`), or `"slab"`, the kernel's slab memory
    /// (`/proc/meminfo`, system-wide, so approximate).
    pub source: &'static str,
    /// Growth of `source` while the cache was filled. lib: warming the
    /// `Vfs` after the backend's tree was built, so the dcache alone;
    /// kernel: building the tmpfs tree and stat'ing it (tmpfs keeps its
    /// tree in the dcache, so dentries and inodes both).
    pub cache_bytes: i64,
    pub cache_bytes_per_path: f64,
    /// lib: growth from before the backend's tree was built to after
    /// warming, the backend's own copy of the tree included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_bytes_per_path: Option<f64>,
}

impl Footprint {
    pub fn new(paths: u64, source: &'static str, cache_bytes: i64, total: Option<i64>) -> Self {
        let per = |b: i64| b as f64 / paths.max(1) as f64;
        Footprint {
            paths,
            source,
            cache_bytes,
            cache_bytes_per_path: per(cache_bytes),
            total_bytes: total,
            total_bytes_per_path: total.map(per),
        }
    }

    /// The line printed after the case's prefix, e.g. `paths 100000, 212.4
    /// bytes per cached path (RSS +21.2 MB); ...`.
    pub fn describe(&self) -> String {
        let mb = |b: i64| format!("{:+.1} MB", b as f64 / 1e6);
        let mut s = format!(
            "paths {}, {:.1} bytes per cached path ({})",
            self.paths,
            self.cache_bytes_per_path,
            match self.source {
                "slab" => format!(
                    "kernel slab {}, system-wide, approximate",
                    mb(self.cache_bytes)
                ),
                _ => format!("RSS {}", mb(self.cache_bytes)),
            },
        );
        if let (Some(b), Some(per)) = (self.total_bytes, self.total_bytes_per_path) {
            let _ = write!(
                s,
                "; with the backend's tree {per:.1} bytes per path (RSS {})",
                mb(b)
            );
        }
        s
    }
}

/// The mean of the seconds' totals (0 when there are none).
pub fn mean_total(samples: &[Sample]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.iter().map(|s| s.total as f64).sum::<f64>() / samples.len() as f64
}

/// `ops_per_sec` of this run divided by that of the 1-thread run with the
/// same workload, target and variant.
pub fn scaling(runs: &[RunResult], run: &RunResult) -> Option<f64> {
    let base = runs.iter().find(|r| {
        r.threads == 1
            && r.workload == run.workload
            && r.target == run.target
            && r.variant == run.variant
    })?;
    ratio(run.ops_per_sec, base.ops_per_sec)
}

/// `ops_per_sec` of this run divided by that of the run of `base_variant`
/// with the same workload, target and threads.
pub fn ratio_vs(runs: &[RunResult], run: &RunResult, base_variant: &str) -> Option<f64> {
    let base = runs.iter().find(|r| {
        r.variant == base_variant
            && r.workload == run.workload
            && r.target == run.target
            && r.threads == run.threads
    })?;
    ratio(run.ops_per_sec, base.ops_per_sec)
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0 && a.is_finite()).then(|| a / b)
}

/// Operations per second in a short human form: 1234 -> "1.23k".
pub fn si(v: f64) -> String {
    let (div, suffix) = if v >= 1e9 {
        (1e9, "G")
    } else if v >= 1e6 {
        (1e6, "M")
    } else if v >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    format!("{:.2}{suffix}", v / div)
}

/// The mean over the measured seconds of the slowest thread's count: with
/// ops/s per thread it shows whether threads shared the work fairly (a
/// starved thread, or a thread that lost its CPU to another process).
pub fn mean_min(samples: &[Sample]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    Some(samples.iter().map(|s| s.min as f64).sum::<f64>() / samples.len() as f64)
}

const COLUMNS: usize = 9;

/// The summary table of the runs of one workload. `base_variant` is the
/// variant ratios are taken against (the first one that was run).
///
/// Besides the ratios: `min/thread` is the slowest thread's mean ops/s
/// (fairness), `cpu` the share of the measured time the workers were
/// actually on a CPU (below 90% the machine was busy with something else
/// and the numbers are suspect). Such a row's ops/s cell also shows its
/// rate per CPU-second the workers did get, what the row would have done
/// with its CPUs to itself if the work scaled. `explain`: end with the
/// paragraph that says why a row can be short of CPU (a tour prints it
/// once, under the first table that needs it); without it, one line
/// naming the rows.
pub fn summary_table(title: &str, runs: &[RunResult], base_variant: &str, explain: bool) -> String {
    let header = [
        "target".to_string(),
        "variant".to_string(),
        "threads".to_string(),
        "ops/s".to_string(),
        "ops/s/thread".to_string(),
        "min/thread".to_string(),
        "cpu".to_string(),
        "scaling".to_string(),
        format!("vs {base_variant}"),
    ];
    let mut rows: Vec<[String; COLUMNS]> = vec![header];
    for r in runs {
        let per_thread = r.ops_per_sec / r.threads.max(1) as f64;
        let fmt_x = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
        let rate = match per_cpu_second(r) {
            Some(v) if starved(r) => format!("{} ({}/cpu-s)", si(r.ops_per_sec), si(v)),
            _ => si(r.ops_per_sec),
        };
        rows.push([
            r.target.clone(),
            r.variant.clone(),
            r.threads.to_string(),
            rate,
            si(per_thread),
            mean_min(&r.per_second).map_or("-".to_string(), si),
            r.cpu_util
                .map_or("-".to_string(), |u| format!("{:.0}%", u * 100.0)),
            fmt_x(scaling(runs, r)),
            fmt_x(ratio_vs(runs, r, base_variant)),
        ]);
    }
    let mut widths = [0usize; COLUMNS];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "== {title} ==");
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (col, (cell, w)) in row.iter().zip(widths).enumerate() {
            if col > 0 {
                line.push_str("  ");
            }
            // Names left-aligned, numbers right-aligned.
            if col < 2 {
                let _ = write!(line, "{cell:<w$}");
            } else {
                let _ = write!(line, "{cell:>w$}");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    let starved: Vec<String> = runs
        .iter()
        .filter(|r| starved(r))
        .map(|r| format!("{} {} {}t", r.target, r.variant, r.threads))
        .collect();
    if !starved.is_empty() && explain {
        let _ = writeln!(
            out,
            "note: {} run(s) had their CPUs less than {:.0}% of the time (cpu): {}. \
             Either another process competed, or the workload's own extra thread \
             (the lockref intruder, the FUSE daemon) shared the workers' CPUs because \
             the workers filled them all; those numbers include that contention, and \
             their ops/s cell adds the rate per CPU-second the workers got. Treat \
             those rows as suspect",
            starved.len(),
            STARVED * 100.0,
            starved.join(", ")
        );
    } else if !starved.is_empty() {
        let _ = writeln!(
            out,
            "note: cpu below {:.0}% (suspect, see the first note): {}",
            STARVED * 100.0,
            starved.join(", ")
        );
    }
    out
}

/// Lines comparing each `lib` run with the `kernel` run of the same
/// threads (the first kernel variant run): nanoseconds per operation per
/// thread, and lib/kernel both per wall-clock second and per CPU-second
/// (`ops/s` over `cpu`: on a shared machine whose neighbours took the
/// workers' CPUs for part of a run, the fairer of the two). Empty unless
/// both targets ran.
pub fn lib_vs_kernel(runs: &[RunResult]) -> String {
    let mut out = String::new();
    let per_cpu = |r: &RunResult| r.cpu_util.filter(|&u| u > 0.0).map(|u| r.ops_per_sec / u);
    let ns = |v: f64, threads: usize| {
        if v > 0.0 {
            format!("{:.0} ns", 1e9 * threads.max(1) as f64 / v)
        } else {
            "-".to_string()
        }
    };
    for lib in runs.iter().filter(|r| r.target == "lib") {
        let Some(k) = runs.iter().find(|r| {
            r.target == "kernel" && r.threads == lib.threads && r.workload == lib.workload
        }) else {
            continue;
        };
        let cpu_ratio = per_cpu(lib)
            .zip(per_cpu(k))
            .and_then(|(a, b)| ratio(a, b))
            .map_or("-".to_string(), |v| format!("{v:.1}x"));
        let _ = writeln!(
            out,
            "lib {} / kernel {} at {}t: {} ({} per CPU-second); per op per thread {} vs {}",
            lib.variant,
            k.variant,
            lib.threads,
            ratio(lib.ops_per_sec, k.ops_per_sec).map_or("-".to_string(), |v| format!("{v:.1}x")),
            cpu_ratio,
            ns(lib.ops_per_sec, lib.threads),
            ns(k.ops_per_sec, k.threads),
        );
    }
    out
}

/// The tour's last line: the README's headline ratio, the lib's cached
/// `stat` (`reffree`) against the kernel's (`syscall`) at one thread, as
/// the same user on both (`cred`, or whoever ran the tour). `None` without
/// both runs.
pub fn headline(runs: &[RunResult], cred: Option<(u32, u32)>) -> Option<String> {
    let one = |target: &str, variant: &str| {
        runs.iter()
            .find(|r| r.target == target && r.variant == variant && r.threads == 1)
    };
    let (lib, kernel) = (one("lib", "reffree")?, one("kernel", "syscall")?);
    let r = ratio(lib.ops_per_sec, kernel.ops_per_sec)?;
    let who = match cred {
        Some((u, _)) => format!("uid {u}"),
        // SAFETY: geteuid has no preconditions and cannot fail.
        None => format!("uid {}", unsafe { libc::geteuid() }),
    };
    let suspect = if starved(lib) || starved(kernel) {
        " (suspect: cpu below 90%)"
    } else {
        ""
    };
    Some(format!(
        "lib/kernel, cached stat of a/b/c/file as {who} on both, 1 thread: {} / {} = {r:.1}x{suspect} \
         (the README's headline row)",
        si(lib.ops_per_sec),
        si(kernel.ops_per_sec)
    ))
}

/// Did the run's workers get less than 90% of their CPUs?
pub fn starved(r: &RunResult) -> bool {
    r.cpu_util.is_some_and(|u| u < STARVED)
}

/// Operations per CPU-second the workers had: ops/s over (CPU share x
/// threads).
pub fn per_cpu_second(r: &RunResult) -> Option<f64> {
    let cpu = r.cpu_util? * r.threads.max(1) as f64;
    (cpu > 0.0).then(|| r.ops_per_sec / cpu)
}

/// Below this CPU share a run is flagged as disturbed.
const STARVED: f64 = 0.9;

#[derive(Serialize)]
struct JsonReport<'a> {
    workload: &'a str,
    cpus: usize,
    runs: &'a [RunResult],
}

/// The JSON document for `runs`. `workload` is the workload's name, or
/// `"tour"` when the runs span several workloads (each run then names its
/// own).
pub fn to_json(workload: &str, cpus: usize, runs: &[RunResult]) -> String {
    let doc = JsonReport {
        workload,
        cpus,
        runs,
    };
    // Serialising plain structs of strings and numbers cannot fail, but a
    // NaN would become null rather than an error; ops_per_sec is never NaN.
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Write `text` to `path` through a temporary file and a rename, so a reader
/// never sees half a file.
pub fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(variant: &str, threads: usize, ops: f64) -> RunResult {
        RunResult {
            workload: None,
            target: "lib".into(),
            variant: variant.into(),
            threads,
            seconds: 1,
            ops_per_sec: ops,
            per_second: vec![],
            cpu_util: None,
            memory: None,
        }
    }

    #[test]
    fn sample_takes_min_max_and_sum() {
        let s = Sample::from_deltas(&[5, 2, 9]);
        assert_eq!(
            s,
            Sample {
                min: 2,
                max: 9,
                total: 16
            }
        );
        assert_eq!(Sample::from_deltas(&[]), Sample::default());
    }

    #[test]
    fn mean_is_over_the_totals() {
        let s = |total| Sample {
            min: 0,
            max: 0,
            total,
        };
        assert_eq!(mean_total(&[s(10), s(20), s(60)]), 30.0);
        assert_eq!(mean_total(&[]), 0.0);
        assert_eq!(mean_min(&[s(1), s(2)]), Some(0.0));
        let m = |min| Sample {
            min,
            max: 0,
            total: 0,
        };
        assert_eq!(mean_min(&[m(4), m(8)]), Some(6.0));
        assert_eq!(mean_min(&[]), None);
    }

    #[test]
    fn scaling_is_against_one_thread_of_the_same_variant() {
        let runs = vec![
            run("a", 1, 100.0),
            run("a", 2, 190.0),
            run("b", 1, 50.0),
            run("b", 2, 200.0),
        ];
        assert_eq!(scaling(&runs, &runs[1]), Some(1.9));
        assert_eq!(scaling(&runs, &runs[3]), Some(4.0));
        assert_eq!(scaling(&runs, &runs[0]), Some(1.0));
        // No 1-thread run of that variant: no scaling.
        let only2 = vec![run("a", 2, 10.0)];
        assert_eq!(scaling(&only2, &only2[0]), None);
    }

    #[test]
    fn ratio_is_against_the_base_variant_at_the_same_threads() {
        let mut runs = vec![run("a", 2, 200.0), run("b", 2, 50.0), run("b", 1, 70.0)];
        assert_eq!(ratio_vs(&runs, &runs[1], "a"), Some(0.25));
        assert_eq!(ratio_vs(&runs, &runs[0], "a"), Some(1.0));
        assert_eq!(ratio_vs(&runs, &runs[2], "a"), None);
        // Other targets do not count as a base.
        runs[0].target = "kernel".into();
        assert_eq!(ratio_vs(&runs, &runs[1], "a"), None);
        // A zero base gives no ratio rather than infinity.
        let zero = vec![run("a", 1, 0.0), run("b", 1, 5.0)];
        assert_eq!(ratio_vs(&zero, &zero[1], "a"), None);
    }

    #[test]
    fn table_has_one_row_per_run_and_the_ratios() {
        let mut runs = vec![run("a", 1, 1000.0), run("b", 1, 500.0)];
        runs[1].cpu_util = Some(0.5);
        let t = summary_table("w", &runs, "a", true);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "== w ==");
        assert!(lines[1].contains("vs a"));
        assert_eq!(lines.len(), 6);
        assert!(lines[4].contains("500.00 (1.00k/cpu-s)"), "{t}");
        assert!(lines[4].ends_with("0.50x"));
        assert!(lines[4].contains(" 50% "), "{t}");
        assert!(lines[3].contains(" - "), "{t}");
        assert!(!lines[3].contains("cpu-s"), "{t}");
        assert!(lines[5].starts_with("note: 1 run(s)"), "{t}");
        // Once explained, a later table names the rows in one line.
        let t = summary_table("w", &runs, "a", false);
        let last = t.lines().last().unwrap();
        assert_eq!(
            last,
            "note: cpu below 90% (suspect, see the first note): lib b 1t"
        );
    }

    #[test]
    fn headline_is_lib_over_kernel_at_one_thread() {
        let mut runs = vec![
            run("reffree", 1, 9_000_000.0),
            run("reffree", 2, 18_000_000.0),
            run("syscall", 1, 600_000.0),
        ];
        runs[2].target = "kernel".into();
        let h = headline(&runs, Some((65534, 65534))).unwrap();
        assert!(h.contains("as uid 65534 on both"), "{h}");
        assert!(h.contains("9.00M / 600.00k = 15.0x"), "{h}");
        assert!(!h.contains("suspect"), "{h}");
        runs[2].cpu_util = Some(0.5);
        assert!(headline(&runs, None).unwrap().contains("suspect"));
        runs.pop();
        assert_eq!(headline(&runs, None), None);
    }

    #[test]
    fn lib_is_compared_with_the_kernel_at_the_same_threads() {
        let mut runs = vec![
            run("reffree", 1, 2e6),
            run("batch", 1, 8e6),
            run("syscall", 1, 5e5),
        ];
        runs[2].target = "kernel".into();
        runs[1].cpu_util = Some(0.5);
        runs[2].cpu_util = Some(1.0);
        let t = lib_vs_kernel(&runs);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(
            lines[0].starts_with("lib reffree / kernel syscall at 1t: 4.0x (- per"),
            "{t}"
        );
        assert!(lines[0].ends_with("500 ns vs 2000 ns"), "{t}");
        assert!(lines[1].contains(": 16.0x (32.0x per CPU-second)"), "{t}");
        assert_eq!(lib_vs_kernel(&runs[..2]), "");
    }

    #[test]
    fn si_suffixes() {
        assert_eq!(si(12.0), "12.00");
        assert_eq!(si(1234.0), "1.23k");
        assert_eq!(si(45_600_000.0), "45.60M");
        assert_eq!(si(2.5e9), "2.50G");
    }

    #[test]
    fn json_has_the_schema_names() {
        let mut r = run("a", 1, 3.0);
        r.per_second = vec![Sample {
            min: 1,
            max: 2,
            total: 3,
        }];
        let v: serde_json::Value = serde_json::from_str(&to_json("w", 2, &[r])).unwrap();
        assert_eq!(v["workload"], "w");
        assert_eq!(v["cpus"], 2);
        let run = &v["runs"][0];
        assert!(run.get("workload").is_none());
        for k in ["target", "variant", "threads", "seconds", "ops_per_sec"] {
            assert!(run.get(k).is_some(), "{k}");
        }
        assert_eq!(run["per_second"][0]["total"], 3);
        assert!(run["ops_per_sec"].is_f64());
    }
}
