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
    /// Keep file data in this object store, metadata in etcd:
    /// file:///DIR (a local directory) or
    /// s3://BUCKET/PREFIX?endpoint=http://HOST:PORT&region=REGION
    /// (credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or a
    /// credentials file, never stored). Without it, data stays inline in
    /// etcd: files up to 1 GiB, all of them within etcd's quota.
    #[arg(long, value_name = "URL")]
    pub data: Option<String>,
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
    let opts = dcache_etcd::FormatOptions {
        adopt: a.adopt,
        data: a.data.clone(),
    };
    match dcache_etcd::format(rest, &opts) {
        Ok(v) => {
            let how = if a.adopt { "adopted as" } else { "formatted" };
            println!(
                "{how} volume {} (prefix {}) on etcd cluster {:016x}",
                v.record.uuid, v.prefix, v.cluster_id
            );
            match &v.record.store {
                dcache_etcd::DataStore::Objects(url) => {
                    println!("file data: objects in {url}, under {}/", v.record.uuid)
                }
                dcache_etcd::DataStore::Inline => println!(
                    "file data: inline in etcd (files up to 1 GiB, all within etcd's quota; \
                     `--data URL` keeps it in an object store)"
                ),
            }
            0
        }
        Err(e) => {
            eprintln!("dcache: {e}");
            1
        }
    }
}

/// Arguments of `dcache gc`.
#[derive(Args, Debug, Clone)]
pub struct GcArgs {
    /// Keep objects uploaded less than this many seconds ago (a writer
    /// may still commit them): keep it well over the clients' timeout
    /// plus their lease TTL.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub min_age: u64,
    /// Count the orphan objects, delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The volume: etcd:http://HOST:PORT[,...]/prefix.
    #[arg(value_name = "etcd:SPEC")]
    pub spec: String,
}

/// Run `dcache gc`: delete the volume's objects that nothing names
/// (those a writer uploaded and died before committing).
pub fn gc_main(a: GcArgs) -> i32 {
    let Some(rest) = a.spec.strip_prefix("etcd:") else {
        eprintln!(
            "dcache: gc takes {}, not {:?}",
            crate::mount::ETCD_FORM,
            a.spec
        );
        return 2;
    };
    let opts = dcache_etcd::GcOptions {
        min_age: std::time::Duration::from_secs(a.min_age),
        dry_run: a.dry_run,
    };
    match dcache_etcd::gc(rest, &opts) {
        Ok(r) => {
            let did = if a.dry_run { "would delete" } else { "deleted" };
            println!(
                "{} objects ({} bytes): {} named by a file, {} awaiting the collector, \
                 {} younger than {} s; {did} {} orphans ({} bytes)",
                r.objects,
                r.bytes,
                r.named,
                r.pending,
                r.young,
                a.min_age,
                r.orphans,
                r.orphan_bytes
            );
            0
        }
        Err(e) => {
            eprintln!("dcache: {e}");
            1
        }
    }
}
