//! `dcache mount` on the command line.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use dcache_fuse::backend::{Backend, Custom};
use dcache_fuse::options::MountOptions;
use dcache_fuse::session::{serve, ServeRequest};

/// Arguments of `dcache mount` (libfuse's conventions).
#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// What to serve: mem, passthrough:DIR, kernfs[:mutex|rwlock|rcu], or
    /// etcd:ENDPOINT[,ENDPOINT..][/PREFIX] (a namespace shared by every
    /// client of that etcd cluster and prefix; see dcache-etcd).
    #[arg(long, default_value = "mem", value_name = "BACKEND")]
    pub backend: String,
    /// Stay in the foreground (default: go to the background once mounted).
    #[arg(short = 'f')]
    pub foreground: bool,
    /// Single-threaded (default: one worker per CPU, 2 to 8).
    #[arg(short = 's')]
    pub single_threaded: bool,
    /// Mount options, comma separated: attr_timeout=S, entry_timeout=S,
    /// negative_timeout=S, allow_other, ro, ... (see the fuse::options docs).
    #[arg(short = 'o', value_name = "OPT[,OPT..]")]
    pub options: Vec<String>,
    /// Where to mount.
    pub mountpoint: PathBuf,
}

impl MountArgs {
    /// Check the arguments without mounting.
    pub fn request(&self) -> Result<ServeRequest, String> {
        Ok(ServeRequest {
            backend: parse_backend(&self.backend)?,
            mountpoint: self.mountpoint.clone(),
            options: MountOptions::parse(&self.options)?,
            foreground: self.foreground,
            single_threaded: self.single_threaded,
        })
    }
}

/// The backends dcache-fuse knows, and `etcd:SPEC`, which is served by
/// dcache-etcd (connected when the mount is made, in the process that
/// serves).
pub fn parse_backend(s: &str) -> Result<Backend, String> {
    let Some(rest) = s.strip_prefix("etcd:") else {
        return s.parse();
    };
    // Check the spec now (bad usage, exit 2); connect later.
    dcache_etcd::parse_spec(rest).map_err(|e| format!("bad etcd spec {rest:?}: {e}"))?;
    let spec = rest.to_string();
    Ok(Backend::Custom(Custom::new(
        format!("etcd:{rest}"),
        move || {
            let fs = dcache_etcd::EtcdFs::connect(&spec)
                .map_err(|e| format!("cannot connect to etcd at {spec}: {e}"))?;
            Ok(Arc::new(fs) as Arc<dyn dcache::fs::FileSystem>)
        },
    )))
}

/// Run `dcache mount`; returns the exit status (2: bad usage, 1: failed).
pub fn main(args: MountArgs) -> i32 {
    let req = match args.request() {
        Ok(r) => r,
        Err(m) => {
            eprintln!("dcache: {m}");
            return 2;
        }
    };
    if let Backend::Passthrough(dir) = &req.backend {
        if !dir.is_dir() {
            eprintln!("dcache: {} is not a directory", dir.display());
            return 2;
        }
    }
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
        let b = parse_backend("etcd:http://127.0.0.1:1,127.0.0.1:2/ns").unwrap();
        match &b {
            Backend::Custom(c) => assert_eq!(c.fsname, "etcd:http://127.0.0.1:1,127.0.0.1:2/ns"),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.fsname(), "etcd:http://127.0.0.1:1,127.0.0.1:2/ns");
        assert!(!b.wants_direct_io());
        for bad in ["etcd:", "etcd:https://127.0.0.1:1", "etcd:/only/a/prefix"] {
            assert!(parse_backend(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_backend("mem"), Ok(Backend::Mem));
    }

    #[test]
    fn etcd_unreachable_is_an_error_not_a_hang() {
        let b = parse_backend("etcd:http://127.0.0.1:1/x").unwrap();
        let t = std::time::Instant::now();
        assert!(b.build().is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(30));
    }
}
