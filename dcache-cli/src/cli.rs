//! The `dcache` command line: argument parsing and dispatch. `main.rs` only
//! calls [`main`]; the work lives in the library so tests can reach it.
//!
//! Every error is one line `dcache: <problem>` on stderr; bad usage exits
//! with status 2, a failure while running with 1.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use dcache::layout;
use dcache_bench::{BenchError, Options, Request};

#[derive(Parser, Debug)]
#[command(
    name = "dcache",
    version,
    about = "The Linux VFS name-lookup fast path in userspace: benchmarks and tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a will-it-scale style benchmark (no WORKLOAD: the default tour).
    Bench(BenchArgs),
    /// Make an etcd prefix a volume that `dcache mount --backend etcd:...`
    /// can serve (once per volume; --adopt for a namespace from before
    /// volumes).
    Format(crate::format::FormatArgs),
    /// Delete the objects of an etcd volume's data store that no file
    /// names (left by writers that died before committing).
    Gc(crate::format::GcArgs),
    /// Print the field layout of dcache's hot structures, pahole-style.
    Layout(LayoutArgs),
    /// Serve a backend through FUSE on MOUNTPOINT (libfuse-style -f, -s, -o).
    #[command(override_usage = crate::mount::USAGE, after_help = crate::mount::after_help())]
    Mount(crate::mount::MountArgs),
}

// Numbers accept a leading `-` so that `--seconds -1` is reported as a
// bad value of --seconds rather than as an unknown flag `-1`.
#[derive(Args, Debug)]
struct BenchArgs {
    /// Workload to run (see --list); none runs the default tour.
    workload: Option<String>,
    /// List the workloads with their variants and targets.
    #[arg(long)]
    list: bool,
    /// Thread counts: `1,2,4` or ranges `1-8` [default: 1..=CPUs].
    #[arg(long, allow_negative_numbers = true, value_name = "N,..")]
    threads: Option<String>,
    /// Measured seconds per case [default: 5; tour: 2].
    #[arg(long, allow_negative_numbers = true, value_name = "S")]
    seconds: Option<u64>,
    /// Uncounted warm-up seconds per case [default: 2; tour: 0.5].
    #[arg(long, allow_negative_numbers = true, value_name = "S")]
    warmup: Option<f64>,
    /// Variants to compare, the first is the base [default: all].
    #[arg(long, value_name = "A,B")]
    variant: Option<String>,
    /// Targets: lib, kernel, fuse, fuse-cached, etcd [default: lib].
    #[arg(long, value_name = "T,..")]
    target: Option<String>,
    /// Write the results as JSON.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Draw ops/s over time and against threads (.svg or .png).
    #[arg(long, value_name = "PATH")]
    plot: Option<PathBuf>,
    /// Intruder: nanoseconds the lock is held each time.
    #[arg(long, allow_negative_numbers = true, value_name = "NS", default_value_t = Options::default().hold_ns)]
    hold_ns: u64,
    /// Intruder: microseconds of sleep between two holds.
    #[arg(long, allow_negative_numbers = true, value_name = "US", default_value_t = Options::default().every_us)]
    every_us: u64,
    /// Operations per thread for iteration-driven workloads (kernfs).
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = Options::default().iterations)]
    iterations: u64,
    /// stat-random: how many paths the tree holds (and the cache caches).
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = Options::default().paths)]
    paths: u64,
    /// data: MiB written and read sequentially (on the etcd target).
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value_t = Options::default().mib)]
    mib: u64,
    /// stat and open workloads: act as this user (lib and kernel targets).
    #[arg(long, value_name = "UID:GID", value_parser = parse_cred)]
    cred: Option<(u32, u32)>,
    /// etcd target: the etcd to use, http://HOST:PORT (default: start a
    /// local single member per case; needs the etcd binary).
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
}

/// `UID:GID` for `--cred`.
fn parse_cred(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s
        .split_once(':')
        .ok_or_else(|| format!("--cred takes UID:GID, not {s:?}"))?;
    let num = |x: &str| {
        x.parse::<u32>()
            .ok()
            .filter(|&v| v != u32::MAX)
            .ok_or_else(|| format!("--cred: {x:?} is not a uid or gid"))
    };
    Ok((num(u)?, num(g)?))
}

#[derive(Args, Debug)]
struct LayoutArgs {
    /// Only types whose name contains one of these words.
    types: Vec<String>,
}

/// Run the CLI on `args` (the program name first); returns the exit status.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    2
                } else {
                    0
                };
            }
            eprintln!("dcache: {}", one_line(&e.to_string()));
            return 2;
        }
    };
    match cli.command {
        Command::Bench(a) => bench_main(a),
        Command::Format(a) => crate::format::main(a),
        Command::Gc(a) => crate::format::gc_main(a),
        Command::Layout(a) => layout_main(a),
        Command::Mount(a) => crate::mount::main(a),
    }
}

/// clap's message on one line: without its "error: " label, tips and
/// help hint; a list under the first line (the missing arguments) is
/// joined onto it, followed by the usage line, so that `dcache mount`
/// alone says what it needs.
fn one_line(msg: &str) -> String {
    let mut lines = msg.lines().skip_while(|l| l.trim().is_empty());
    let first = lines.next().unwrap_or("bad usage");
    let mut out = first.trim().trim_start_matches("error: ").to_string();
    if out.ends_with(':') {
        let items: Vec<&str> = lines
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        if !items.is_empty() {
            out.push(' ');
            out.push_str(&items.join(", "));
        }
        if let Some(usage) = msg.lines().find_map(|l| l.trim().strip_prefix("Usage: ")) {
            out.push_str(&format!(" (usage: {usage})"));
        }
    }
    out
}

fn bench_main(a: BenchArgs) -> i32 {
    if a.list {
        print!("{}", dcache_bench::list());
        return 0;
    }
    let req = Request {
        workload: a.workload,
        threads: a.threads,
        seconds: a.seconds,
        warmup: a.warmup,
        variants: a.variant,
        targets: a.target,
        json: a.json,
        plot: a.plot,
        options: Options {
            hold_ns: a.hold_ns,
            every_us: a.every_us,
            iterations: a.iterations,
            paths: a.paths,
            cred: a.cred,
            etcd: a.etcd,
            mib: a.mib,
        },
    };
    match dcache_bench::run(&req) {
        Ok(_) => 0,
        Err(BenchError::Usage(m)) => {
            eprintln!("dcache: {m}");
            2
        }
        Err(BenchError::Failed(m)) => {
            eprintln!("dcache: {m}");
            1
        }
    }
}

fn layout_main(a: LayoutArgs) -> i32 {
    let all = layout::registry();
    let chosen: Vec<_> = all
        .iter()
        .filter(|t| a.types.is_empty() || a.types.iter().any(|w| t.name.contains(w.as_str())))
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        eprintln!(
            "dcache: no registered type matches {} (types: {})",
            a.types.join(", "),
            names.join(", ")
        );
        return 2;
    }
    let text: Vec<String> = chosen.iter().map(|t| t.render()).collect();
    print!("{}", text.join("\n"));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line() {
        let msg =
            "error: unexpected argument '--bogus' found\n\n  tip: ...\n\nUsage: dcache bench\n";
        assert_eq!(one_line(msg), "unexpected argument '--bogus' found");
        let missing = "error: the following required arguments were not provided:\n  \
                       <MOUNTPOINT>\n\nUsage: dcache mount <MOUNTPOINT>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(missing),
            "the following required arguments were not provided: <MOUNTPOINT> \
             (usage: dcache mount <MOUNTPOINT>)"
        );
    }

    #[test]
    fn parse_errors_exit_2_and_help_exits_0() {
        let run = |args: &[&str]| main(args.iter().map(OsString::from));
        assert_eq!(run(&["dcache", "bench", "--bogus"]), 2);
        assert_eq!(run(&["dcache", "bench", "--seconds", "x"]), 2);
        assert_eq!(run(&["dcache", "bench", "nope"]), 2);
        assert_eq!(run(&["dcache", "bench", "--help"]), 0);
        assert_eq!(run(&["dcache", "layout", "NoSuchType"]), 2);
        assert_eq!(run(&["dcache", "layout"]), 0);
        assert_eq!(run(&["dcache", "mount"]), 2);
    }
}
