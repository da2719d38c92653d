//! `dcache format`: make an etcd prefix a volume.

use clap::Args;

/// Arguments of `dcache format`.
#[derive(Args, Debug, Clone)]
pub struct FormatArgs {
    /// Make a namespace written by dcache-etcd before volumes a volume as
    /// it is (its data kept); without it a prefix holding any key is
    /// refused.
    #[arg(long)]
    pub adopt: bool,
    /// The volume: etcd:http://HOST:PORT[,...]/prefix.
    #[arg(value_name = "etcd:SPEC")]
    pub spec: String,
}

/// Run `dcache format`; returns the exit status (2: bad usage, 1: refused
/// or failed).
pub fn main(a: FormatArgs) -> i32 {
    let Some(rest) = a.spec.strip_prefix("etcd:") else {
        eprintln!(
            "dcache: format takes {}, not {:?}",
            crate::mount::ETCD_FORM,
            a.spec
        );
        return 2;
    };
    if dcache_etcd::parse_spec(rest).is_err() {
        eprintln!(
            "dcache: bad etcd spec {rest:?}: expected {}",
            crate::mount::ETCD_FORM
        );
        return 2;
    }
    let opts = dcache_etcd::FormatOptions { adopt: a.adopt };
    match dcache_etcd::format(rest, &opts) {
        Ok(v) => {
            let how = if a.adopt { "adopted as" } else { "formatted" };
            println!(
                "{how} volume {} (prefix {}) on etcd cluster {:016x}",
                v.record.uuid, v.prefix, v.cluster_id
            );
            0
        }
        Err(e) => {
            eprintln!("dcache: {e}");
            1
        }
    }
}
