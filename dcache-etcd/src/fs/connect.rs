//! Connecting an [`EtcdFs`]: the etcd client, the members' status (the
//! cluster's id, whether progress notifications are trusted), the volume
//! record (refused without one), the session, the root, and the
//! background tasks.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dcache::Errno;
use etcd_client::{Client, GetOptions};
use tokio::runtime::Runtime;

use super::buffer::Objects;
use super::diskcache::DiskCache;
use super::{run_on, EtcdFs, Inner};
use crate::cache::Cache;
use crate::codec::Keys;
use crate::progress::progress_ordered;
use crate::spec::{parse_spec, Options, Spec};
use crate::store::StoreUrl;
use crate::volume::{spec_string, DataStore, Error, Volume, ENOMEDIUM};

impl EtcdFs {
    /// Connect with default [`Options`] to the volume at the spec
    /// `[etcd:]http://host:port[,http://host:port...][/prefix]`, which
    /// [`crate::format`] made (`dcache format`). A prefix without a volume
    /// record is refused (ENOMEDIUM, the message naming the prefix and the
    /// command that formats it); an unreachable cluster is EIO after
    /// [`Options::timeout`]. [`EtcdFs::volume`] tells which volume and
    /// cluster it joined.
    pub fn connect(spec: &str) -> std::result::Result<EtcdFs, Error> {
        EtcdFs::connect_with(spec, Options::default())
    }

    pub fn connect_with(spec: &str, opts: Options) -> std::result::Result<EtcdFs, Error> {
        let parsed = parse_spec(spec).map_err(|e| {
            Error::new(
                e,
                format!("bad etcd spec {spec:?}: expected etcd:http://HOST:PORT[,...]/prefix"),
            )
        })?;
        EtcdFs::connect_spec(parsed, opts)
    }

    pub fn connect_spec(spec: Spec, opts: Options) -> std::result::Result<EtcdFs, Error> {
        let at = spec.endpoints.join(",");
        let fail = |e: Errno| {
            let hint = if e == Errno::EACCES {
                crate::spec::auth_hint()
            } else {
                String::new()
            };
            Error::new(e, format!("cannot connect to etcd at {at}: {e}{hint}"))
        };
        if opts.timeout.is_zero() || opts.staleness.is_zero() {
            return Err(Error::new(
                Errno::EINVAL,
                "the timeout and the staleness bound must not be zero",
            ));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("dcache-etcd")
            .enable_all()
            .build()
            .map_err(|e| fail(Errno::from_io(&e)))?;
        let copts =
            crate::spec::connect_options(&spec.endpoints, opts.timeout.min(Duration::from_secs(2)))
                .map_err(|m| Error::new(Errno::EINVAL, m))?
                .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
                .with_keep_alive_while_idle(true)
                .with_require_leader(true);
        let endpoints = spec.endpoints.clone();
        let client = run_on(
            &rt,
            async move { Client::connect(endpoints, Some(copts)).await },
        )
        .map_err(|e| crate::volume::unreachable(&spec, e))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let client_id = format!("{:016x}-{}", nanos, std::process::id());
        let lim = opts.timeout.min(Duration::from_secs(2));
        let (cluster_id, versions) = run_on(&rt, member_status(spec.endpoints.clone(), lim));
        // Members that did not answer go out of the balancer before the
        // first request (the health loop brings them back when they
        // answer): a request the balancer sent to a dead member would
        // wait for its connection to fail, and a connect listing one dead
        // member of three could spend its whole deadline on that.
        let mut out = vec![false; spec.endpoints.len()];
        if versions.iter().any(Option::is_some) && spec.endpoints.len() > 1 {
            for (i, v) in versions.iter().enumerate() {
                let ep = spec.endpoints[i].clone();
                if v.is_none() && run_on(&rt, client.remove_endpoint(ep)).is_ok() {
                    out[i] = true;
                }
            }
        }
        let progress_trusted = versions
            .iter()
            .all(|v| v.as_deref().is_some_and(progress_ordered));
        let inner = Arc::new(Inner {
            client,
            keys: Keys::new(&spec.prefix),
            cache: Cache::new(opts.staleness),
            opts,
            client_id,
            op_seq: AtomicU64::new(1),
            pool: Mutex::new((0, 0)),
            lanes: Default::default(),
            marker_lanes: Default::default(),
            held: Default::default(),
            rng: AtomicU64::new(nanos | 1),
            inval: OnceLock::new(),
            attached: Arc::default(),
            lease: AtomicI64::new(0),
            lease_gone: tokio::sync::Notify::new(),
            progress_wanted: tokio::sync::Notify::new(),
            progress_trusted,
            cluster_id,
            versions,
            lock_wakers: Default::default(),
            reported: AtomicI64::new(0),
            reported_moved: tokio::sync::Notify::new(),
            objects: OnceLock::new(),
            silent_since: AtomicU64::new(0),
            opens: Default::default(),
        });
        let i = inner.clone();
        let record =
            match run_on(&rt, async move { i.volume_record(i.deadline()).await }).map_err(fail)? {
                Some(r) => {
                    r.map_err(|e| Error::new(e.errno, format!("etcd prefix {}: {e}", spec.prefix)))?
                }
                None => return Err(no_volume(&inner, &rt, &spec)),
            };
        if let DataStore::Objects(url) = &record.store {
            let parsed = StoreUrl::parse(url)
                .map_err(|e| Error::new(e.errno, format!("volume {}: {e}", record.uuid)))?;
            let store = parsed
                .open(false)
                .map_err(|e| Error::new(e.errno, format!("volume {}: {e}", record.uuid)))?;
            // A local directory's objects are fsynced by the flush that
            // commits them (`objdata::upload`): the store does not.
            let local = match &parsed {
                StoreUrl::Local(p) => Some(p.clone()),
                _ => None,
            };
            if inner.opts.gc_grace < super::opens::MIN_GRACE {
                return Err(Error::new(
                    Errno::EINVAL,
                    format!(
                        "gc_grace must be at least {:?} on a volume with an object store",
                        super::opens::MIN_GRACE
                    ),
                ));
            }
            let cache = inner.opts.read_cache_bytes;
            let disk = match &inner.opts.read_cache_dir {
                Some(dir) => Some(Arc::new(
                    DiskCache::open(dir, &record.uuid, inner.opts.read_cache_dir_bytes).map_err(
                        |e| {
                            Error::new(
                                Errno(e.raw_os_error().unwrap_or(libc::EIO)),
                                format!("read cache directory {}: {e}", dir.display()),
                            )
                        },
                    )?,
                )),
                None => None,
            };
            let _ = inner
                .objects
                .set(Objects::new(store, local, record.uuid.clone(), cache, disk));
        }
        let i = inner.clone();
        run_on(&rt, async move {
            // The session first: every commit puts the marker on its lease.
            i.open_session(i.deadline()).await?;
            i.init(i.deadline()).await
        })
        .map_err(fail)?;
        // The watch starts where the root was read: the mirror is empty,
        // so nothing older is needed.
        let start = inner.cache.cookie() as i64;
        inner.cache.watched.store(start, Ordering::Release);
        // Nothing before the watch's start is known to this client: a
        // record read before it (none is) could not count as current.
        inner.cache.floor.store(start, Ordering::Release);
        rt.spawn(inner.clone().watch_loop());
        rt.spawn(inner.clone().fence_loop());
        rt.spawn(inner.clone().lease_loop());
        rt.spawn(inner.clone().health_loop(spec.endpoints.clone(), out));
        if inner.objects.get().is_some() {
            rt.spawn(inner.clone().collect_loop());
            rt.spawn(inner.clone().open_records_loop());
        }
        let fs = EtcdFs {
            volume: Volume {
                record,
                prefix: spec.prefix.clone(),
                cluster_id: inner.cluster_id,
            },
            inner,
            rt: Some(rt),
        };
        // Give the watch a moment to become current (not required: until
        // it is, everything is revalidated against etcd).
        let until = Instant::now() + fs.inner.opts.timeout.min(Duration::from_secs(2));
        while !fs.inner.cache.fresh() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(fs)
    }
}

/// The error for a prefix with no volume record: what to run, and whether
/// the prefix holds an older, unformatted namespace (one count of its
/// keys, made only on this path).
fn no_volume(inner: &Inner, rt: &Runtime, spec: &Spec) -> Error {
    let again = spec_string(spec);
    let all = inner.keys.all();
    let mut kv = inner.client.kv_client();
    let lim = inner.opts.timeout;
    let count = run_on(rt, async move {
        let opts = GetOptions::new().with_prefix().with_count_only();
        match tokio::time::timeout(lim, kv.get(all, Some(opts))).await {
            Ok(Ok(r)) => r.count(),
            _ => 0,
        }
    });
    let more = if count > 0 {
        format!(
            " It holds {count} keys: if an older dcache-etcd wrote them, \
             `dcache format --adopt {again}` makes them a volume as they are."
        )
    } else {
        String::new()
    };
    Error::new(
        ENOMEDIUM,
        format!(
            "no dcache volume at etcd prefix {} (cluster {}): format it first with \
             `dcache format {again}`.{more}",
            spec.prefix,
            spec.endpoints.join(",")
        ),
    )
}

/// Ask every endpoint for its status, at once, each within `lim`: the
/// cluster's id (from the first answer) and each endpoint's version.
async fn member_status(endpoints: Vec<String>, lim: Duration) -> (u64, Vec<Option<String>>) {
    let asks: Vec<_> = endpoints
        .into_iter()
        .map(|ep| {
            tokio::spawn(async move {
                let status = async {
                    let opts = crate::spec::connect_options(&[&ep], lim).ok();
                    let mut c = Client::connect([ep.as_str()], opts).await?;
                    c.status().await
                };
                match tokio::time::timeout(lim, status).await {
                    Ok(Ok(s)) => Some((
                        s.header().map(|h| h.cluster_id()).unwrap_or(0),
                        s.version().to_string(),
                    )),
                    _ => None,
                }
            })
        })
        .collect();
    let mut cluster = 0;
    let mut versions = Vec::new();
    for a in asks {
        let got = a.await.ok().flatten();
        if let Some((id, _)) = &got {
            if cluster == 0 {
                cluster = *id;
            }
        }
        versions.push(got.map(|(_, v)| v));
    }
    (cluster, versions)
}
