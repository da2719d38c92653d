//! The `dcache` binary end to end, with tiny settings (one measured second,
//! no warm-up, one thread): exit codes, the per-second line format, the
//! JSON schema other tools read, and one-line errors for bad input.
#![cfg(not(loom))]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn dcache(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dcache"))
        .args(args)
        .output()
        .expect("run dcache")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `<workload> <target> <variant> <n>t: min:<a> max:<b> total:<c>`, parsed.
fn per_second_line(line: &str) -> Option<(String, String, String, usize, [u64; 3])> {
    let (head, counts) = line.split_once(": ")?;
    let head: Vec<&str> = head.split(' ').collect();
    let [w, t, v, n] = head[..] else { return None };
    let n: usize = n.strip_suffix('t')?.parse().ok()?;
    let mut vals = [0u64; 3];
    let parts: Vec<&str> = counts.split(' ').collect();
    if parts.len() != 3 {
        return None;
    }
    for ((part, key), val) in parts.iter().zip(["min:", "max:", "total:"]).zip(&mut vals) {
        *val = part.strip_prefix(key)?.parse().ok()?;
    }
    Some((w.into(), t.into(), v.into(), n, vals))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

#[test]
fn lockref_run_prints_seconds_table_and_exact_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let o = dcache(&[
        "bench",
        "lockref",
        "--seconds",
        "2",
        "--warmup",
        "0",
        "--threads",
        "1",
        "--variant",
        "linux,dcache",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<_> = out.lines().filter_map(per_second_line).collect();
    assert_eq!(lines.len(), 4, "{out}");
    for (w, t, _, n, [min, max, total]) in &lines {
        assert_eq!((w.as_str(), t.as_str(), *n), ("lockref", "lib", 1));
        // One thread: its count is the min, the max and the total.
        assert!(min == max && max == total && *total > 0);
    }
    assert_eq!(lines[0].2, "linux");
    assert_eq!(lines[3].2, "dcache");
    assert!(out.contains("== lockref =="), "{out}");
    assert!(out.contains("vs linux"), "{out}");

    let v = read_json(&json);
    assert_eq!(keys(&v), ["cpus", "runs", "workload"]);
    assert_eq!(v["workload"], "lockref");
    assert!(v["cpus"].as_u64().unwrap() >= 1);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for (run, variant) in runs.iter().zip(["linux", "dcache"]) {
        assert_eq!(
            keys(run),
            [
                "ops_per_sec",
                "per_second",
                "seconds",
                "target",
                "threads",
                "variant"
            ]
        );
        assert_eq!(run["variant"], variant);
        assert_eq!(run["target"], "lib");
        assert_eq!(run["threads"], 1);
        assert_eq!(run["seconds"], 2);
        let secs = run["per_second"].as_array().unwrap();
        assert_eq!(secs.len(), 2);
        let mut sum = 0.0;
        for s in secs {
            assert_eq!(keys(s), ["max", "min", "total"]);
            sum += s["total"].as_u64().unwrap() as f64;
        }
        // ops_per_sec is the mean of the measured seconds' totals.
        assert_eq!(run["ops_per_sec"].as_f64().unwrap(), sum / 2.0);
    }
    // The printed lines are the JSON's seconds.
    let first = &runs[0]["per_second"][0];
    assert_eq!(first["total"].as_u64().unwrap(), lines[0].4[2]);
    // No temporary file is left next to the result.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn intruder_and_herd_run_and_keep_the_count_balanced() {
    // A lost update would make the case's teardown fail the run (exit 1).
    for w in ["lockref-intruder", "lockref-herd"] {
        let o = dcache(&[
            "bench",
            w,
            "--seconds",
            "1",
            "--warmup",
            "0",
            "--threads",
            "2",
            "--variant",
            "dcache,linux,spinwait,waiman",
        ]);
        assert_eq!(o.status.code(), Some(0), "{w}: {}", stderr(&o));
        let n = stdout(&o)
            .lines()
            .filter_map(per_second_line)
            .filter(|l| l.0 == w && l.3 == 2)
            .count();
        assert_eq!(n, 4, "{w}: {}", stdout(&o));
    }
}

#[test]
fn tour_labels_runs_with_their_workload_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("t.json");
    let svg = dir.path().join("t.svg");
    let o = dcache(&[
        "bench",
        "--seconds",
        "1",
        "--warmup",
        "0",
        "--threads",
        "1",
        "--variant",
        "linux",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = read_json(&json);
    assert_eq!(v["workload"], "tour");
    let names: Vec<&str> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lockref", "lockref-intruder", "lockref-herd"]);
    let out = stdout(&o);
    for w in names {
        assert!(out.contains(&format!("== {w} ==")), "{out}");
    }
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg"));
}

/// Every bad request: exit 2, exactly one line on stderr naming the problem,
/// nothing on stdout, no file written.
#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let as_dir = dir.path().to_str().unwrap().to_string();
    // Under a directory this test made absent, not /nonexistent (which a
    // machine may have).
    let json_nowhere = format!("{as_dir}/absent/dir/r.json");
    let json_nowhere_err = format!("cannot write --json {json_nowhere}");
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "nosuch"], "unknown workload 'nosuch'"),
        (
            &["bench", "lockref", "--variant", "fast"],
            "no variant 'fast'",
        ),
        (
            &["bench", "lockref", "--target", "kernel"],
            "no target 'kernel'",
        ),
        (
            &["bench", "lockref", "--threads", "0"],
            "threads must be at least 1",
        ),
        (
            &["bench", "lockref", "--threads", "two"],
            "bad thread count 'two'",
        ),
        (
            &["bench", "lockref", "--seconds", "0"],
            "--seconds must be at least 1",
        ),
        (&["bench", "lockref", "--seconds", "-1"], "--seconds"),
        (&["bench", "stat-random", "--paths", "0"], "--paths"),
        (
            &["bench", "lockref", "--json", &json_nowhere],
            &json_nowhere_err,
        ),
        (&["bench", "lockref", "--json", &as_dir], "is a directory"),
        (
            &["bench", "lockref", "--plot", "/tmp/x.gif"],
            ".svg or .png",
        ),
        (&["bench", "lockref", "--bogus"], "--bogus"),
        (
            &["bench", "--variant", "warp"],
            "no workload of the tour has variant",
        ),
        (
            &["layout", "NoSuchType"],
            "no registered type matches NoSuchType",
        ),
        (&["frobnicate"], "frobnicate"),
    ];
    for (args, want) in cases {
        let o = dcache(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("dcache: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: {}", stdout(&o));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn list_and_help_exit_0() {
    let o = dcache(&["bench", "--list"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    for w in [
        "lockref",
        "lockref-intruder",
        "lockref-herd",
        "kernfs-files",
        "kernfs-missing",
        "dup-close",
        "file-sharing",
        "stat-random",
        "lookup-dir",
    ] {
        assert!(out.lines().any(|l| l.starts_with(w)), "{out}");
    }
    assert!(out.contains("variants: dcache, linux, spinwait, waiman"));
    let o = dcache(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("bench"));
}

#[test]
fn layout_prints_the_lockref_alone_on_its_line() {
    let o = dcache(&["layout"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("struct CacheAligned<LockRef>"), "{out}");
    assert!(out.contains("--- cache line 0 (offset 0) ---"), "{out}");
    assert!(out.contains("hot 0: alone on cache line 0"), "{out}");
    // The dentry's counts share line 2 with nothing an rcu-walk reads.
    assert!(
        out.contains("hot d_lockref: shares cache line 2 only with hot d_children"),
        "{out}"
    );
}

#[test]
fn layout_shows_file_in_both_layouts() {
    let o = dcache(&["layout", "File"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("struct SplitFile<DentryRef"), "{out}");
    assert!(out.contains("struct PackedFile<DentryRef"), "{out}");
    assert!(!out.contains("LockRef>"), "{out}");
    assert!(
        out.contains("hot f_count: shares cache line 0 only with hot"),
        "{out}"
    );
    assert!(
        out.contains("hot f_count: shares cache line 0 with f_path, f_op, f_inode"),
        "{out}"
    );
}

/// `<prefix>: single: total <ms>ms per <us>us` and friends, parsed: the
/// numbers of each kind of line, keyed by the case prefix.
fn iteration_lines(out: &str) -> Vec<(String, String, Vec<f64>)> {
    let mut v = Vec::new();
    for line in out.lines() {
        let Some((head, rest)) = line.split_once(": ") else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once(": ") else {
            continue;
        };
        if !["single", "concur", "times"].contains(&kind) {
            continue;
        }
        let nums: Vec<f64> = rest
            .split(' ')
            .filter_map(|w| {
                w.trim_end_matches("ms")
                    .trim_end_matches("us")
                    .parse::<f64>()
                    .ok()
            })
            .collect();
        v.push((head.to_string(), kind.to_string(), nums));
    }
    v
}

#[test]
fn kernfs_workloads_print_fox_chen_lines_and_json() {
    for w in ["kernfs-files", "kernfs-missing"] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("k.json");
        let o = dcache(&[
            "bench",
            w,
            "--threads",
            "2",
            "--iterations",
            "300",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{w}: {}", stderr(&o));
        let out = stdout(&o);
        let lines = iteration_lines(&out);
        for v in ["mutex", "rwlock", "rcu"] {
            let head = format!("{w} lib {v} 2t");
            let mine: Vec<_> = lines.iter().filter(|l| l.0 == head).collect();
            let kinds: Vec<&str> = mine.iter().map(|l| l.1.as_str()).collect();
            assert_eq!(kinds, ["single", "concur", "concur", "times"], "{out}");
            // single/concur: total <ms> per <us> (concur adds CPU <n>).
            assert!(mine[0].2.len() == 2 && mine[0].2[0] > 0.0, "{out}");
            assert!(mine[1].2.len() == 3 && mine[2].2.len() == 3, "{out}");
            assert_eq!(mine[3].2[..2], [300.0, 2.0], "{out}");
        }
        // The base first: the ratio column compares with the old kernfs.
        assert!(out.contains(&format!("== {w} ==")), "{out}");
        assert!(out.contains("vs mutex"), "{out}");
        let v = read_json(&json);
        assert_eq!(v["workload"], w);
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3);
        for (run, variant) in runs.iter().zip(["mutex", "rwlock", "rcu"]) {
            assert_eq!(run["variant"], variant);
            assert_eq!(run["threads"], 2);
            assert!(run["ops_per_sec"].as_f64().unwrap() > 0.0, "{run}");
        }
    }
}

#[test]
fn dup_close_runs_on_lib_and_kernel() {
    let child = Command::new(env!("CARGO_BIN_EXE_dcache"))
        .args([
            "bench",
            "dup-close",
            "--seconds",
            "1",
            "--warmup",
            "0",
            "--threads",
            "2",
            "--target",
            "lib,kernel",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run dcache");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait for dcache");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<_> = out.lines().filter_map(per_second_line).collect();
    let cases: Vec<(&str, &str)> = lines.iter().map(|l| (l.1.as_str(), l.2.as_str())).collect();
    assert_eq!(
        cases,
        [("lib", "split"), ("lib", "packed"), ("kernel", "syscall")],
        "{out}"
    );
    assert!(lines.iter().all(|l| l.4[2] > 0), "{out}");
    assert!(out.contains("vs split"), "{out}");
    // The kernel target's files are gone again.
    let prefix = format!("dcache-dup-{pid}-");
    let left = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(left, 0);
}

/// `lookup-dir` on a small directory: both variants run and count names.
#[test]
fn lookup_dir_runs_one_at_a_time_and_batched() {
    let o = dcache(&[
        "bench",
        "lookup-dir",
        "--paths",
        "1000",
        "--seconds",
        "1",
        "--warmup",
        "0",
        "--threads",
        "1",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<_> = out.lines().filter_map(per_second_line).collect();
    let cases: Vec<(&str, &str)> = lines.iter().map(|l| (l.1.as_str(), l.2.as_str())).collect();
    assert_eq!(cases, [("lib", "one"), ("lib", "batch")], "{out}");
    assert!(lines.iter().all(|l| l.4[2] > 0), "{out}");
}

/// `stat-random` on a tiny tree through the CLI: both targets run, each
/// prints its bytes per cached path, and the JSON keeps them.
#[test]
fn stat_random_reports_ops_and_bytes_per_path() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let child = Command::new(env!("CARGO_BIN_EXE_dcache"))
        .args([
            "bench",
            "stat-random",
            "--paths",
            "1000",
            "--seconds",
            "1",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--target",
            "lib,kernel",
            "--json",
            json.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run dcache");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait for dcache");
    let out = stdout(&o);
    // A machine without /dev/shm runs lib alone and reports the kernel case.
    let kernel = std::path::Path::new("/dev/shm").is_dir();
    if !kernel {
        assert!(stderr(&o).contains("/dev/shm"), "{}", stderr(&o));
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<_> = out.lines().filter_map(per_second_line).collect();
    let cases: Vec<(&str, &str)> = lines.iter().map(|l| (l.1.as_str(), l.2.as_str())).collect();
    assert_eq!(
        cases,
        [("lib", "reffree"), ("lib", "batch"), ("kernel", "syscall")],
        "{out}"
    );
    assert!(lines.iter().all(|l| l.4[2] > 0), "{out}");
    for head in [
        "stat-random lib reffree 1t",
        "stat-random lib batch 1t",
        "stat-random kernel syscall 1t",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{head}: paths 1000, ")))
            .unwrap_or_else(|| panic!("no memory line for {head}: {out}"));
        assert!(line.contains(" bytes per cached path ("), "{line}");
    }
    // Each lib variant against the kernel, per path.
    for variant in ["reffree", "batch"] {
        let head = format!("lib {variant} / kernel syscall at 1t: ");
        let line = out
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no lib/kernel line for {variant}: {out}"));
        assert!(
            line.contains(" per CPU-second); per op per thread "),
            "{line}"
        );
    }
    let v = read_json(&json);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let lib = &runs[0]["memory"];
    assert_eq!(lib["paths"], 1000);
    assert_eq!(lib["source"], "rss");
    // 1000 dentries and inodes cannot fit in nothing, nor need 100 KiB each.
    let per = lib["cache_bytes_per_path"].as_f64().unwrap();
    assert!(per > 0.0 && per < 100_000.0, "{lib}");
    assert!(
        lib["total_bytes_per_path"].as_f64().unwrap() >= per,
        "{lib}"
    );
    assert!(runs[0]["ops_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(runs[1]["variant"], "batch");
    assert!(runs[1]["ops_per_sec"].as_f64().unwrap() > 0.0);
    // The kernel's slab figure is system-wide: only its presence is sure.
    let k = &runs[2]["memory"];
    assert_eq!(k["source"], "slab", "{k}");
    assert!(k["cache_bytes_per_path"].is_f64(), "{k}");
    // The kernel target's tree is gone again.
    let prefix = format!("dcache-bench-{pid}-");
    let left = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(left, 0);
}

/// `dcache mount` alone: one line naming what is missing and the usage,
/// with the backend option, not clap's cut-off first line.
#[test]
fn mount_without_mountpoint_names_it_and_the_backend_option() {
    let o = dcache(&["mount"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("dcache: "), "{err}");
    assert!(err.contains("MOUNTPOINT"), "{err}");
    assert!(err.contains("--backend"), "{err}");
    assert!(!err.trim_end().ends_with(':'), "{err}");
    assert!(o.stdout.is_empty());
}

/// `--cred UID:GID`: the stat workers act as another user (lib through
/// `Vfs::as_cred`, kernel with the worker thread's fsuid/fsgid), every
/// directory is 0755 so every check passes; `section` holds one read
/// section across stats. A malformed credential is a usage error.
#[test]
fn stat_runs_as_another_user() {
    let o = dcache(&["bench", "stat-same", "--cred", "65534", "--seconds", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("UID:GID"), "{}", stderr(&o));
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let targets = if root { "lib,kernel" } else { "lib" };
    let o = dcache(&[
        "bench",
        "stat-same",
        "--target",
        targets,
        "--variant",
        "reffree,section,syscall",
        "--cred",
        "65534:65534",
        "--threads",
        "1",
        "--seconds",
        "1",
        "--warmup",
        "0",
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("lib     section"), "{out}");
    if root {
        assert!(out.contains("kernel  syscall"), "{out}");
    }
}

/// `dcache mount`'s messages name the problem: every backend form for an
/// unknown one (etcd's too), ENOENT or ENOTDIR for a passthrough
/// directory, the expected form for a bad etcd spec. One line, exit 2.
#[test]
fn mount_usage_errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let mnt = dir.path().to_str().unwrap();
    let pt_file = format!("passthrough:{}", file.display());
    // A directory this test made absent, not /nonexistent: where that
    // exists the background mount below would serve it and never return.
    let absent = dir.path().join("absent");
    let pt_absent = format!("passthrough:{}", absent.display());
    let absent_err = format!(
        "cannot serve {}: ENOENT: No such file or directory",
        absent.display()
    );
    let cases: &[(&str, &str)] = &[
        (
            "bogus",
            "unknown backend \"bogus\" (mem, passthrough:DIR, kernfs[:mutex|rwlock|rcu] \
             or etcd:http://HOST:PORT[,...]/prefix)",
        ),
        (&pt_absent, &absent_err),
        (
            &pt_file,
            &format!("cannot serve {}: ENOTDIR: Not a directory", file.display()),
        ),
        (
            "etcd:nohost",
            "bad etcd spec \"nohost\": expected etcd:http://HOST:PORT[,...]/prefix",
        ),
    ];
    for (backend, want) in cases {
        let o = dcache(&["mount", "-f", "--backend", backend, mnt]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{backend}: {err}");
        assert_eq!(err.lines().count(), 1, "{backend}: {err}");
        assert!(
            err.starts_with(&format!("dcache: {want}")),
            "{backend}: {err}"
        );
        assert!(!err.contains("EINVAL"), "{backend}: {err}");
        assert!(o.stdout.is_empty(), "{backend}");
    }
    assert!(!absent.exists());
    let o = dcache(&["mount", "--backend", &pt_absent, mnt]);
    assert!(!stderr(&o).contains("Not a directory"), "{}", stderr(&o));
}

/// An etcd that cannot be reached is said at once (no 5 s wait, no EIO),
/// naming each endpoint and why; exit 1, in the background as with -f.
#[test]
fn unreachable_etcd_is_said_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().to_str().unwrap();
    for fg in [true, false] {
        let t = std::time::Instant::now();
        let backend = "etcd:http://127.0.0.1:1,nohost.invalid:2379/x";
        let mut args = vec!["mount", "--backend", backend, mnt];
        if fg {
            args.insert(1, "-f");
        }
        let o = dcache(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(4),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(
                "dcache: cannot connect to etcd: http://127.0.0.1:1: connection refused; \
                 http://nohost.invalid:2379: unknown host nohost.invalid"
            ),
            "{err}"
        );
        assert!(!err.contains("EIO"), "{err}");
    }
}

/// `-o help` prints the mount options, one line each (exit 0, no mount
/// point needed); `mount --help` lists them and `--log`.
#[test]
fn mount_options_are_listed() {
    let o = dcache(&["mount", "-o", "help"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for opt in [
        "attr_timeout=S ",
        "entry_timeout=S ",
        "negative_timeout=S ",
        "allow_other ",
        "default_permissions ",
        "max_threads=N ",
        "poll_us=N ",
        "ro, rw ",
        "auto_unmount ",
    ] {
        assert_eq!(
            out.lines().filter(|l| l.starts_with(opt)).count(),
            1,
            "{opt:?} not on one line:\n{out}"
        );
    }
    assert!(!out.contains("unknown"), "{out}");
    assert_eq!(
        dcache(&["mount", "-o", "ro,help", "/x"]).status.code(),
        Some(0)
    );
    let o = dcache(&["mount", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for want in ["--log <FILE>", "attr_timeout=S", "allow_other", "-o help"] {
        assert!(help.contains(want), "{want:?} missing:\n{help}");
    }
    let o = dcache(&["mount", "-o", "frobnicate", "/x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown mount option \"frobnicate\""));
}

/// A non-root mount that fails because /dev/fuse is not open to the user
/// says so, instead of blaming the mount point. Needs root (to run as
/// nobody) and a /dev/fuse that others may not open.
#[test]
fn a_non_root_mount_names_dev_fuse() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    const T: &str = "a_non_root_mount_names_dev_fuse";
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        dcache_fuse::testing::skipped(format_args!("{T}: not root (cannot run as nobody)"));
        return;
    }
    match std::fs::metadata("/dev/fuse") {
        Ok(m) if m.mode() & 0o006 != 0o006 => {}
        _ => {
            dcache_fuse::testing::skipped(format_args!(
                "{T}: /dev/fuse missing or open to every user"
            ));
            return;
        }
    }
    let Ok(setpriv) = Command::new("setpriv").arg("--version").output() else {
        dcache_fuse::testing::skipped(format_args!("{T}: no setpriv"));
        return;
    };
    assert!(setpriv.status.success());
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::os::unix::fs::chown(&mnt, Some(65534), Some(65534)).unwrap();
    for fg in [&["-f"][..], &[]] {
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_dcache"))
            .arg("mount")
            .args(fg)
            .arg(&mnt)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.starts_with(
                "dcache: cannot mount: cannot open /dev/fuse: EACCES: Permission denied"
            ),
            "{err}"
        );
        assert!(!err.contains(mnt.to_str().unwrap()), "{err}");
    }
}
