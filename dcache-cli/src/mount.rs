//! `dcache mount` on the command line.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use dcache_fuse::backend::{Backend, Custom};
use dcache_fuse::options::{self, MountOptions};
use dcache_fuse::session::{serve, ServeRequest};

/// `dcache mount`'s usage line.
pub const USAGE: &str =
    "dcache mount [--backend BACKEND] [-f] [-s] [--log FILE] [-o OPT[,OPT..]] <MOUNTPOINT>";

/// The form of an etcd backend, as messages and `--help` give it.
pub const ETCD_FORM: &str = "etcd:http://HOST:PORT[,...]/prefix";

/// How long the mount waits for an etcd endpoint to accept a connection
/// before saying it cannot be reached.
const ETCD_PROBE: Duration = Duration::from_secs(1);

/// The `-o` options of an etcd backend, which set its client's
/// [`dcache_etcd::Options`] (`-o help` lists them after the frontend's).
pub const ETCD_HELP: &str = "\
etcd_timeout=S          etcd: seconds an operation waits for a quorum before EIO (default 5)
etcd_unreachable=S      etcd: EIO at once after no member accepted a connection for S seconds (default 1)
etcd_staleness=S        etcd: seconds a cached answer may lag other hosts' changes (default 1)
etcd_lease_ttl=S        etcd: seconds this host's session outlives it (default 10; at least 2)
etcd_gc_grace=S         etcd with an object store: seconds removed data is kept for readers (default 60; at least 1)
etcd_cache_dir=DIR      etcd with an object store: also keep objects read on disk, in DIR/<volume uuid>
etcd_cache_size=MIB     the most the cache directory holds (default 4096)
";

/// What `dcache mount --help` shows after the arguments: the `-o` options.
pub fn after_help() -> String {
    format!(
        "Mount options (-o OPT[,OPT..]; -o help prints them alone):\n{}{}",
        indent(options::HELP),
        indent(ETCD_HELP)
    )
}

/// Take the `etcd_*` options out of `-o` arguments: the rest (for the
/// FUSE frontend), and the etcd client's options with them applied
/// (`None` when there were none).
fn split_etcd_options(
    args: &[String],
) -> Result<(Vec<String>, Option<dcache_etcd::Options>), String> {
    let mut rest = Vec::new();
    let mut etcd: Option<dcache_etcd::Options> = None;
    for one in args
        .iter()
        .flat_map(|a| a.split(','))
        .filter(|s| !s.is_empty())
    {
        let Some((key, v)) = one.split_once('=').filter(|(k, _)| k.starts_with("etcd_")) else {
            if one.starts_with("etcd_") {
                return Err(format!("unknown mount option {one:?}"));
            }
            rest.push(one.to_string());
            continue;
        };
        let o = etcd.get_or_insert_with(dcache_etcd::Options::default);
        match key {
            "etcd_cache_dir" => {
                if v.is_empty() {
                    return Err(format!("bad value for {key}: a directory is needed"));
                }
                o.read_cache_dir = Some(v.into());
                continue;
            }
            "etcd_cache_size" => {
                o.read_cache_dir_bytes = v
                    .parse::<u64>()
                    .ok()
                    .and_then(|m| m.checked_mul(1 << 20))
                    .ok_or_else(|| format!("bad value for {key}: {v:?} (MiB)"))?;
                continue;
            }
            _ => {}
        }
        let secs = v
            .parse::<f64>()
            .ok()
            .filter(|s| (0.0..=1e6).contains(s))
            .ok_or_else(|| format!("bad value for {key}: {v:?} (0 to 1e6 seconds)"))?;
        let d = Duration::from_secs_f64(secs);
        match key {
            "etcd_timeout" if !d.is_zero() => o.timeout = d,
            "etcd_unreachable" => o.unreachable_after = Some(d),
            "etcd_staleness" if !d.is_zero() => o.staleness = d,
            "etcd_lease_ttl" if secs >= 2.0 => o.lease_ttl = d,
            "etcd_gc_grace" if secs >= 1.0 => o.gc_grace = d,
            "etcd_timeout" | "etcd_staleness" | "etcd_lease_ttl" | "etcd_gc_grace" => {
                return Err(format!("bad value for {key}: {v:?} (too small)"))
            }
            _ => return Err(format!("unknown mount option {one:?}")),
        }
    }
    Ok((rest, etcd))
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// Arguments of `dcache mount` (libfuse's conventions).
#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// What to serve: mem, passthrough:DIR, kernfs[:mutex|rwlock|rcu], or
    /// etcd:http://HOST:PORT[,...]/prefix (a namespace shared by every
    /// client of that etcd cluster and prefix; see dcache-etcd).
    #[arg(long, default_value = "mem", value_name = "BACKEND")]
    pub backend: String,
    /// Stay in the foreground (default: go to the background once mounted).
    #[arg(short = 'f')]
    pub foreground: bool,
    /// Single-threaded (default: one worker per CPU, 2 to 8).
    #[arg(short = 's')]
    pub single_threaded: bool,
    /// Once mounted, append the daemon's messages (the unmount report,
    /// warnings) to FILE. Default: discarded in the background, stderr
    /// with -f. Errors before the mount is up always go to stderr.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Mount options, comma separated (listed below; -o help prints them).
    #[arg(short = 'o', value_name = "OPT[,OPT..]")]
    pub options: Vec<String>,
    /// Where to mount.
    #[arg(required_unless_present = "options")]
    pub mountpoint: Option<PathBuf>,
}

impl MountArgs {
    /// Check the arguments without mounting.
    pub fn request(&self) -> Result<ServeRequest, String> {
        let mountpoint = self.mountpoint.clone().ok_or_else(|| {
            format!(
                "the following required arguments were not provided: <MOUNTPOINT> (usage: {USAGE})"
            )
        })?;
        let (options, etcd) = split_etcd_options(&self.options)?;
        if etcd.is_some() && !self.backend.starts_with("etcd:") {
            return Err(format!(
                "etcd_* mount options apply to an etcd backend only, not {:?}",
                self.backend
            ));
        }
        Ok(ServeRequest {
            backend: parse_backend(&self.backend, etcd.unwrap_or_default())?,
            mountpoint,
            options: MountOptions::parse(&options)?,
            foreground: self.foreground,
            single_threaded: self.single_threaded,
            log: self.log.clone(),
        })
    }
}

/// The backends dcache-fuse knows, and `etcd:SPEC`, which is served by
/// dcache-etcd (its endpoints probed, then connected with `etcd`, when
/// the mount is made, in the process that serves).
pub fn parse_backend(s: &str, etcd: dcache_etcd::Options) -> Result<Backend, String> {
    let Some(rest) = s.strip_prefix("etcd:") else {
        return Backend::parse_listing(s, &[ETCD_FORM]);
    };
    // Check the spec now (bad usage, exit 2); connect later.
    let parsed = dcache_etcd::parse_spec(rest).map_err(|_| {
        format!(
            "bad etcd spec {rest:?}: expected {ETCD_FORM} (HOST:PORT without http:// \
             is taken too, https:// for TLS, every endpoint alike; the prefix is optional, \
             /dcache by default)"
        )
    })?;
    let spec = rest.to_string();
    let notice = Arc::new(std::sync::Mutex::new(None));
    let said = notice.clone();
    let mut custom = Custom::new(format!("etcd:{rest}"), move || {
        // Say at once why etcd cannot be reached (refused, unknown
        // host), not EIO after the client's timeout.
        match parsed.probe(ETCD_PROBE) {
            Ok(down) => {
                for d in down {
                    eprintln!("dcache: warning: etcd endpoint {d} (using the others)");
                }
            }
            Err(down) => {
                return Err(format!("cannot connect to etcd: {}", down.join("; ")));
            }
        }
        // The error says what to do (format the prefix, adopt it).
        let fs =
            dcache_etcd::EtcdFs::connect_with(&spec, etcd.clone()).map_err(|e| e.to_string())?;
        *said.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("mounted {}", fs.volume()));
        Ok(Arc::new(fs) as Arc<dyn dcache::fs::FileSystem>)
    });
    custom.notice = notice;
    Ok(Backend::Custom(custom))
}

/// The daemon's log lines (each failure of the volume's own, with its
/// cause: `dcache_etcd::log`) go to stderr: the terminal with `-f`, the
/// `--log` file once the daemon is detached (stderr is pointed there),
/// nowhere without either.
fn log_to_stderr() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// Run `dcache mount`; returns the exit status (2: bad usage, 1: failed).
pub fn main(args: MountArgs) -> i32 {
    if MountOptions::asks_for_help(&args.options) {
        print!("{}{ETCD_HELP}", options::HELP);
        return 0;
    }
    let req = match args.request() {
        Ok(r) => r,
        Err(m) => {
            eprintln!("dcache: {m}");
            return 2;
        }
    };
    if let Backend::Passthrough(dir) = &req.backend {
        let errno = match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => None,
            Ok(_) => Some(dcache::Errno::ENOTDIR),
            Err(e) => Some(dcache::Errno::from_io(&e)),
        };
        if let Some(e) = errno {
            eprintln!("dcache: cannot serve {}: {e}", dir.display());
            return 2;
        }
    }
    log_to_stderr();
    match serve(&req) {
        Ok(_) => 0,
        Err(m) => {
            eprintln!("dcache: {m}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_specs() {
        let b =
            parse_backend("etcd:http://127.0.0.1:1,127.0.0.1:2/ns", Default::default()).unwrap();
        match &b {
            Backend::Custom(c) => assert_eq!(c.fsname, "etcd:http://127.0.0.1:1,127.0.0.1:2/ns"),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.fsname(), "etcd:http://127.0.0.1:1,127.0.0.1:2/ns");
        assert!(!b.wants_direct_io());
        for bad in [
            "etcd:",
            "etcd:https://127.0.0.1:1,http://127.0.0.1:2",
            "etcd:/only/a/prefix",
        ] {
            assert!(
                parse_backend(bad, Default::default()).is_err(),
                "{bad:?} accepted"
            );
        }
        assert_eq!(parse_backend("mem", Default::default()), Ok(Backend::Mem));
    }

    #[test]
    fn etcd_unreachable_is_said_at_once() {
        let b = parse_backend("etcd:http://127.0.0.1:1/x", Default::default()).unwrap();
        let t = std::time::Instant::now();
        assert_eq!(
            b.build().err().as_deref(),
            Some("cannot connect to etcd: http://127.0.0.1:1: connection refused")
        );
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }

    #[test]
    fn etcd_options_are_taken_out_of_the_mount_options() {
        let args = vec![
            "ro,etcd_timeout=2".to_string(),
            "etcd_unreachable=0.25,timeout=0".into(),
        ];
        let (rest, o) = split_etcd_options(&args).unwrap();
        assert_eq!(rest, ["ro", "timeout=0"]);
        let o = o.unwrap();
        assert_eq!(o.timeout, Duration::from_secs(2));
        assert_eq!(o.unreachable_after, Some(Duration::from_millis(250)));
        assert_eq!(o.staleness, dcache_etcd::Options::default().staleness);
        assert!(split_etcd_options(&["ro".into()]).unwrap().1.is_none());
        let (_, o) =
            split_etcd_options(&["etcd_cache_dir=/var/cache/d,etcd_cache_size=512".into()])
                .unwrap();
        let o = o.unwrap();
        assert_eq!(
            o.read_cache_dir.as_deref(),
            Some(std::path::Path::new("/var/cache/d"))
        );
        assert_eq!(o.read_cache_dir_bytes, 512 << 20);
        for bad in [
            "etcd_cache_dir=",
            "etcd_cache_size=-1",
            "etcd_timeout=0",
            "etcd_timeout=x",
            "etcd_lease_ttl=1",
            "etcd_bogus=1",
            "etcd_timeout",
        ] {
            assert!(
                split_etcd_options(&[bad.to_string()]).is_err(),
                "{bad:?} accepted"
            );
        }
        let req = MountArgs {
            backend: "mem".into(),
            foreground: true,
            single_threaded: false,
            log: None,
            options: vec!["etcd_timeout=1".into()],
            mountpoint: Some("/mnt".into()),
        }
        .request();
        let Err(why) = req else {
            panic!("etcd_timeout accepted for mem")
        };
        assert!(why.contains("etcd backend only"), "{why}");
    }
}
