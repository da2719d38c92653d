//! From command-line words to a checked list of cases, before anything runs.
//!
//! Every problem with the request (an unknown name, zero threads, an output
//! path that cannot be written) is found here, so a bad invocation fails in
//! milliseconds with one line instead of after minutes of measuring.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::harness::Timing;
use super::workload::{Options, Workload, TARGETS};
use super::workloads;

/// The most worker threads one case may ask for.
pub const MAX_THREADS: usize = 4096;
/// The longest measurement and warm-up accepted, in seconds.
pub const MAX_SECONDS: u64 = 24 * 3600;

/// The most MiB `data` may write (1 TiB).
const MAX_MIB: u64 = 1 << 20;

/// The most paths `stat-random` may build (the dcache's table stops
/// growing at 2^27 buckets, two per entry up to 2^26; memory is the real
/// limit).
pub const MAX_PATHS: u64 = 1 << 26;

/// Defaults for a named workload.
pub const DEFAULT_SECONDS: u64 = 5;
pub const DEFAULT_WARMUP: u64 = 2;

/// One workload of the default tour (`dcache bench` with no workload): which
/// targets, and a shorter timing than a named run so the whole tour stays
/// near two minutes on a small machine.
pub struct TourStep {
    pub workload: &'static str,
    pub targets: &'static [&'static str],
    pub seconds: u64,
    pub warmup_ms: u64,
    /// Run as another user (`--cred`) when the tour runs as root and no
    /// `--cred` was given: the README's headline compares the lib and the
    /// kernel as uid 65534, with every directory's search permission
    /// checked. Run by another user the tour checks as that user anyway.
    pub as_user: bool,
}

/// Who a tour step with `as_user` acts as (the README's `nobody`).
pub const TOUR_CRED: (u32, u32) = (65534, 65534);

/// The default tour. Every variant of each workload runs; threads default to
/// the powers of two up to the CPU count, plus the CPU count.
pub const TOUR: &[TourStep] = &[
    TourStep {
        workload: "lockref",
        targets: &["lib"],
        seconds: 2,
        warmup_ms: 500,
        as_user: false,
    },
    TourStep {
        workload: "lockref-intruder",
        targets: &["lib"],
        seconds: 2,
        warmup_ms: 500,
        as_user: false,
    },
    TourStep {
        workload: "lockref-herd",
        targets: &["lib"],
        seconds: 2,
        warmup_ms: 500,
        as_user: false,
    },
    TourStep {
        workload: "stat-same",
        targets: &["lib", "kernel"],
        seconds: 2,
        warmup_ms: 500,
        as_user: true,
    },
    TourStep {
        workload: "stat-missing",
        targets: &["lib", "kernel"],
        seconds: 2,
        warmup_ms: 500,
        as_user: false,
    },
];

/// What the user asked for, as typed (flags not given are `None`).
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub workload: Option<String>,
    pub threads: Option<String>,
    pub seconds: Option<u64>,
    /// Warm-up seconds; fractions allowed (`0.5`).
    pub warmup: Option<f64>,
    pub variants: Option<String>,
    pub targets: Option<String>,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub options: Options,
}

/// One workload's share of the plan.
pub struct Step {
    pub workload: &'static dyn Workload,
    pub targets: Vec<&'static str>,
    /// In the order given; the first is the comparison base.
    pub variants: Vec<&'static str>,
    pub threads: Vec<usize>,
    pub timing: Timing,
    /// This step acts as this user, over the plan's `--cred` (a tour step
    /// with `as_user`).
    pub cred: Option<(u32, u32)>,
}

impl Step {
    pub fn cases(&self) -> usize {
        self.targets
            .iter()
            .map(|t| self.variants_on(t).len())
            .sum::<usize>()
            * self.threads.len()
    }

    /// The variants that run on `target`: those asked for that apply there,
    /// or, when none does, the workload's first one for that target (the
    /// kernel has no `reffree` stat: it runs its `syscall` variant).
    pub fn variants_on(&self, target: &str) -> Vec<&'static str> {
        let applicable = self.workload.variants_for(target);
        let mut v: Vec<&'static str> = self
            .variants
            .iter()
            .copied()
            .filter(|v| applicable.contains(v))
            .collect();
        if v.is_empty() {
            v.extend(applicable.first().copied());
        }
        v
    }
}

/// The checked request.
pub struct Plan {
    pub steps: Vec<Step>,
    /// No workload was named: several workloads, labelled "tour" in JSON.
    pub tour: bool,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
    pub options: Options,
}

impl Plan {
    /// Whole seconds the progress bar counts: each timed case ticks once
    /// per whole warm-up second and once per measured second.
    pub fn planned_ticks(&self) -> u64 {
        self.steps
            .iter()
            .map(|s| s.cases() as u64 * (s.timing.seconds + s.timing.warmup.as_secs()))
            .sum()
    }

    /// The planned run time of the timed cases, in seconds.
    pub fn planned_seconds(&self) -> f64 {
        self.steps
            .iter()
            .map(|s| s.cases() as f64 * (s.timing.seconds as f64 + s.timing.warmup.as_secs_f64()))
            .sum()
    }
}

/// Check `req` against the registry and the machine (`cpus` usable CPUs).
pub fn plan(req: &Request, cpus: usize) -> Result<Plan, String> {
    if req.seconds == Some(0) {
        return Err("--seconds must be at least 1".into());
    }
    if let Some(w) = req.warmup {
        if w.is_nan() || w < 0.0 {
            return Err("--warmup must be a number of seconds, 0 or more".into());
        }
    }
    if req.seconds.unwrap_or(0) > MAX_SECONDS || req.warmup.unwrap_or(0.0) > MAX_SECONDS as f64 {
        return Err(format!(
            "--seconds and --warmup are limited to {MAX_SECONDS}"
        ));
    }
    if req.options.iterations == 0 {
        return Err("--iterations must be at least 1".into());
    }
    if req.options.paths == 0 || req.options.paths > MAX_PATHS {
        return Err(format!("--paths must be between 1 and {MAX_PATHS}"));
    }
    if req.options.mib == 0 || req.options.mib > MAX_MIB {
        return Err(format!("--mib must be between 1 and {MAX_MIB}"));
    }
    if req.options.hold_ns > 1_000_000_000 || req.options.every_us > 1_000_000 {
        return Err("--hold-ns is limited to 1 s and --every-us to 1 s".into());
    }
    let threads = match &req.threads {
        Some(s) => Some(parse_threads(s)?),
        None => None,
    };
    let want_variants = req
        .variants
        .as_deref()
        .map(|s| parse_list("--variant", s))
        .transpose()?;
    let want_targets = req
        .targets
        .as_deref()
        .map(|s| parse_list("--target", s))
        .transpose()?;
    if let Some(ts) = &want_targets {
        if let Some(t) = ts.iter().find(|t| !TARGETS.contains(&t.as_str())) {
            return Err(format!(
                "unknown target '{t}' (targets: {})",
                TARGETS.join(", ")
            ));
        }
    }

    let mut steps = Vec::new();
    match &req.workload {
        Some(name) => {
            let w = workloads::find(name).ok_or_else(|| {
                let known: Vec<&str> = workloads::REGISTRY.iter().map(|w| w.name()).collect();
                format!(
                    "unknown workload '{name}' (workloads: {})",
                    known.join(", ")
                )
            })?;
            let variants = match &want_variants {
                Some(vs) => pick(vs, w.variants(), "variant", w.name())?,
                None => w.variants().to_vec(),
            };
            // A named workload runs on its first target unless told.
            let targets = match &want_targets {
                Some(ts) => pick(ts, w.targets(), "target", w.name())?,
                None => vec![w.targets()[0]],
            };
            steps.push(Step {
                workload: w,
                targets,
                variants,
                threads: threads.clone().unwrap_or_else(|| (1..=cpus).collect()),
                timing: Timing {
                    warmup: req
                        .warmup
                        .map_or(Duration::from_secs(DEFAULT_WARMUP), Duration::from_secs_f64),
                    seconds: req.seconds.unwrap_or(DEFAULT_SECONDS),
                },
                cred: None,
            });
        }
        None => {
            // In the tour --variant and --target filter: each step keeps the
            // names it knows, and a name no step knows is an error.
            for t in TOUR {
                let Some(w) = workloads::find(t.workload) else {
                    return Err(format!("tour names unknown workload '{}'", t.workload));
                };
                let variants: Vec<&'static str> = w
                    .variants()
                    .iter()
                    .copied()
                    .filter(|v| {
                        want_variants
                            .as_ref()
                            .is_none_or(|vs| vs.iter().any(|x| x == v))
                    })
                    .collect();
                let targets: Vec<&'static str> = t
                    .targets
                    .iter()
                    .copied()
                    .filter(|tg| w.targets().contains(tg))
                    .filter(|tg| {
                        want_targets
                            .as_ref()
                            .is_none_or(|ts| ts.iter().any(|x| x == tg))
                    })
                    .collect();
                if variants.is_empty() || targets.is_empty() {
                    continue;
                }
                steps.push(Step {
                    workload: w,
                    targets,
                    variants,
                    threads: threads.clone().unwrap_or_else(|| tour_threads(cpus)),
                    timing: Timing {
                        warmup: match req.warmup {
                            Some(s) => Duration::from_secs_f64(s),
                            None => Duration::from_millis(t.warmup_ms),
                        },
                        seconds: req.seconds.unwrap_or(t.seconds),
                    },
                    cred: (t.as_user && req.options.cred.is_none() && is_root())
                        .then_some(TOUR_CRED),
                });
            }
            for (flag, wanted, known) in [
                (
                    "variant",
                    &want_variants,
                    steps
                        .iter()
                        .flat_map(|s| s.variants.clone())
                        .collect::<Vec<_>>(),
                ),
                (
                    "target",
                    &want_targets,
                    steps.iter().flat_map(|s| s.targets.clone()).collect(),
                ),
            ] {
                if let Some(ws) = wanted {
                    if let Some(x) = ws.iter().find(|x| !known.contains(&x.as_str())) {
                        return Err(format!("no workload of the tour has {flag} '{x}'"));
                    }
                }
            }
            if steps.is_empty() {
                return Err("nothing of the tour is left to run".into());
            }
        }
    }

    for (flag, path) in [("--json", &req.json), ("--plot", &req.plot)] {
        if let Some(p) = path {
            if flag == "--plot" {
                super::plot::check_extension(p)?;
            }
            check_writable(flag, p)?;
        }
    }

    Ok(Plan {
        steps,
        tour: req.workload.is_none(),
        json: req.json.clone(),
        plot: req.plot.clone(),
        options: req.options.clone(),
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The tour's default thread counts: 1, 2, 4, ... up to `cpus`, and `cpus`.
pub fn tour_threads(cpus: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|&n| n <= cpus)
        .collect();
    if v.last() != Some(&cpus) && cpus > 0 {
        v.push(cpus);
    }
    v
}

/// `1,2,4` or ranges `1-4`; every count >= 1; duplicates dropped, order kept.
pub fn parse_threads(s: &str) -> Result<Vec<usize>, String> {
    let mut out: Vec<usize> = Vec::new();
    for item in parse_list("--threads", s)? {
        let num = |t: &str| -> Result<usize, String> {
            let n: usize = t
                .trim()
                .parse()
                .map_err(|_| format!("bad thread count '{item}' in --threads"))?;
            if n == 0 {
                return Err("threads must be at least 1".into());
            }
            if n > MAX_THREADS {
                return Err(format!("threads are limited to {MAX_THREADS} (asked {n})"));
            }
            Ok(n)
        };
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(&item)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(format!("empty thread range '{item}' in --threads"));
        }
        for n in lo..=hi {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    Ok(out)
}

fn parse_list(flag: &str, s: &str) -> Result<Vec<String>, String> {
    let items: Vec<String> = s.split(',').map(|x| x.trim().to_string()).collect();
    if items.iter().any(|x| x.is_empty()) {
        return Err(format!("empty item in {flag} '{s}'"));
    }
    let mut out: Vec<String> = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    Ok(out)
}

/// The names of `wanted` as they appear in `known` (in the wanted order).
fn pick(
    wanted: &[String],
    known: &'static [&'static str],
    what: &str,
    workload: &str,
) -> Result<Vec<&'static str>, String> {
    wanted
        .iter()
        .map(|w| {
            known.iter().copied().find(|k| k == w).ok_or_else(|| {
                format!(
                    "workload {workload} has no {what} '{w}' ({what}s: {})",
                    known.join(", ")
                )
            })
        })
        .collect()
}

/// Fail now if `path` cannot be written later (through `path.tmp` and a
/// rename, as the report does). Leaves no file behind.
fn check_writable(flag: &str, path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err(format!("{flag} needs a file name"));
    }
    if path.is_dir() {
        return Err(format!(
            "cannot write {flag} {}: is a directory",
            path.display()
        ));
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let existed = tmp.exists();
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&tmp)
    {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(&tmp);
            }
            Ok(())
        }
        Err(e) => Err(format!("cannot write {flag} {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(workload: Option<&str>) -> Request {
        Request {
            workload: workload.map(str::to_string),
            ..Request::default()
        }
    }

    #[test]
    fn threads_lists_and_ranges() {
        assert_eq!(parse_threads("1,2,4").unwrap(), vec![1, 2, 4]);
        assert_eq!(parse_threads("1-3,2,8").unwrap(), vec![1, 2, 3, 8]);
        assert!(parse_threads("0").unwrap_err().contains("at least 1"));
        assert!(parse_threads("1,,2").unwrap_err().contains("empty item"));
        assert!(parse_threads("x")
            .unwrap_err()
            .contains("bad thread count 'x'"));
        assert!(parse_threads("3-1")
            .unwrap_err()
            .contains("empty thread range"));
        assert!(parse_threads("100000").unwrap_err().contains("limited"));
    }

    #[test]
    fn tour_threads_are_powers_of_two_and_the_cpu_count() {
        assert_eq!(tour_threads(1), vec![1]);
        assert_eq!(tour_threads(2), vec![1, 2]);
        assert_eq!(tour_threads(6), vec![1, 2, 4, 6]);
        assert_eq!(tour_threads(16), vec![1, 2, 4, 8, 16]);
    }

    #[test]
    fn the_tour_stats_as_nobody_when_root_and_never_over_cred() {
        let p = plan(&req(None), 2).unwrap();
        for s in &p.steps {
            let want = (s.workload.name() == "stat-same" && is_root()).then_some(TOUR_CRED);
            assert_eq!(s.cred, want, "{}", s.workload.name());
        }
        let mut r = req(None);
        r.options.cred = Some((1, 1));
        assert!(plan(&r, 2).unwrap().steps.iter().all(|s| s.cred.is_none()));
        let named = plan(&req(Some("stat-same")), 2).unwrap();
        assert_eq!(named.steps[0].cred, None);
    }

    #[test]
    fn named_workload_defaults() {
        let p = plan(&req(Some("lockref")), 2).unwrap();
        assert!(!p.tour);
        let s = &p.steps[0];
        assert_eq!(s.variants, vec!["dcache", "linux", "spinwait", "waiman"]);
        assert_eq!(s.targets, vec!["lib"]);
        assert_eq!(s.threads, vec![1, 2]);
        assert_eq!(s.timing.seconds, DEFAULT_SECONDS);
        assert_eq!(s.timing.warmup, Duration::from_secs(DEFAULT_WARMUP));
    }

    #[test]
    fn variant_order_is_kept_for_the_comparison_base() {
        let mut r = req(Some("lockref"));
        r.variants = Some("linux,dcache".into());
        let p = plan(&r, 2).unwrap();
        assert_eq!(p.steps[0].variants, vec!["linux", "dcache"]);
    }

    #[test]
    fn bad_requests_are_refused_with_the_reason() {
        let e = |r: Request| plan(&r, 2).err().unwrap();
        assert!(e(req(Some("nope"))).contains("unknown workload 'nope'"));
        let mut r = req(Some("lockref"));
        r.variants = Some("fast".into());
        assert!(e(r).contains("no variant 'fast'"));
        let mut r = req(Some("lockref"));
        r.targets = Some("kernel".into());
        assert!(e(r).contains("has no target 'kernel'"));
        let mut r = req(Some("lockref"));
        r.targets = Some("moon".into());
        assert!(e(r).contains("unknown target 'moon'"));
        let mut r = req(Some("lockref"));
        r.seconds = Some(0);
        assert!(e(r).contains("--seconds"));
        for bad in [-1.0, f64::NAN, 1e12] {
            let mut r = req(Some("lockref"));
            r.warmup = Some(bad);
            assert!(e(r).contains("--warmup"), "{bad}");
        }
        let mut r = req(Some("lockref"));
        r.json = Some("/nonexistent-dir/x.json".into());
        assert!(e(r).contains("cannot write --json"));
        let mut r = req(Some("lockref"));
        r.plot = Some("/tmp/x.gif".into());
        assert!(e(r).contains(".svg or .png"));
        let mut r = req(None);
        r.variants = Some("warp".into());
        assert!(e(r).contains("no workload of the tour has variant 'warp'"));
    }

    #[test]
    fn tour_runs_every_step_with_short_timing() {
        let p = plan(&req(None), 2).unwrap();
        assert!(p.tour);
        assert_eq!(p.steps.len(), TOUR.len());
        // Two minutes is the promise (2 CPUs here).
        assert!(p.planned_seconds() <= 120.0, "{}", p.planned_seconds());
        let mut r = req(None);
        r.variants = Some("linux".into());
        r.seconds = Some(1);
        let p = plan(&r, 2).unwrap();
        assert!(p
            .steps
            .iter()
            .all(|s| s.variants == ["linux"] && s.timing.seconds == 1));
        // The tour's own warm-up is half a second; so may the user's be.
        r.warmup = Some(0.25);
        let p = plan(&r, 2).unwrap();
        assert!(p
            .steps
            .iter()
            .all(|s| s.timing.warmup == Duration::from_millis(250)));
    }

    #[test]
    fn writable_check_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        check_writable("--json", &path).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(check_writable("--json", dir.path())
            .unwrap_err()
            .contains("is a directory"));
    }
}
