//! `dcache gc etcd:SPEC`: delete the objects of an object-store volume
//! that nothing names and no writer can still commit.
//!
//! A writer uploads its objects, then commits the transaction that puts
//! their slices in the lists. One that dies in between (a crash, SIGKILL,
//! a lost network) leaves objects no list names and no garbage record
//! holds: only a scan finds them. The scan lists the store first, keeping
//! the objects older than [`GcOptions::min_age`], then reads every slice
//! list and garbage record: an object that was old enough when the store
//! was listed and is named by neither is deleted.
//!
//! Why a named object is never deleted: an object is named only by the
//! list of the one chunk it was written for, and only after it was
//! uploaded. A client commits within [`Options::timeout`] of its
//! upload's end (each attempt checks the deadline, and a client frozen
//! past its lease finds the lease gone and gives up), so an object whose
//! upload is older than `min_age` (keep it well over the clients' timeout
//! plus their lease TTL, plus the time an upload may take: at most a
//! minute, and an S3 server may date an object from the start of its
//! upload; the default is an hour)
//! has either been named before the store was listed, and so is seen by
//! the reads that follow, or never will be. When a list drops it, the
//! same transaction puts it in a garbage record, which the reads see if
//! the list no longer does.
//!
//! [`Options::timeout`]: crate::Options::timeout

use std::collections::HashSet;
use std::time::Duration;

use dcache::Errno;
use etcd_client::{Client, GetOptions};
use futures_util::StreamExt;
use object_store::path::Path;

use crate::codec::{prefix_end, Keys};
use crate::slices::{self, Garbage};
use crate::spec::{parse_spec, Spec};
use crate::store::StoreUrl;
use crate::volume::{block, client_of, unreachable, DataStore, Error, VolumeRecord, ENOMEDIUM};

/// What [`gc`] may delete.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// Objects uploaded less than this long ago are kept whatever the
    /// lists say (a writer may still commit them).
    pub min_age: Duration,
    /// Count, delete nothing.
    pub dry_run: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            min_age: Duration::from_secs(3600),
            dry_run: false,
        }
    }
}

/// What [`gc`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Objects of the volume in the store, and their bytes.
    pub objects: u64,
    pub bytes: u64,
    /// Of those: younger than `min_age` (kept unexamined).
    pub young: u64,
    /// Named by a slice list.
    pub named: u64,
    /// In a garbage record (the collector deletes them after the grace
    /// period).
    pub pending: u64,
    /// Named by nothing: deleted (unless a dry run), and their bytes.
    pub orphans: u64,
    pub orphan_bytes: u64,
}

/// Scan the volume at `spec` and delete its orphan objects.
pub fn gc(spec: &str, opts: &GcOptions) -> Result<GcReport, Error> {
    let spec = parse_spec(spec).map_err(|e| Error::new(e, format!("bad etcd spec {spec:?}")))?;
    block(&spec, Duration::from_secs(24 * 3600), gc_on(&spec, opts))
}

/// The volume record and store of `spec` (refused for an inline volume).
pub(crate) async fn volume_store(
    spec: &Spec,
    c: &mut Client,
) -> Result<Option<(VolumeRecord, std::sync::Arc<dyn object_store::ObjectStore>)>, Error> {
    let keys = Keys::new(&spec.prefix);
    let r = c
        .get(keys.volume(), None)
        .await
        .map_err(|e| unreachable(spec, e))?;
    let Some(kv) = r.kvs().first() else {
        return Err(Error::new(
            ENOMEDIUM,
            format!("no dcache volume at etcd prefix {}", spec.prefix),
        ));
    };
    let rec = VolumeRecord::decode(kv.value())?;
    let DataStore::Objects(url) = &rec.store else {
        return Ok(None);
    };
    let store = StoreUrl::parse(url)?.open(false)?;
    Ok(Some((rec, store)))
}

async fn gc_on(spec: &Spec, opts: &GcOptions) -> Result<GcReport, Error> {
    let keys = Keys::new(&spec.prefix);
    let mut c = client_of(spec, Duration::from_secs(10)).await?;
    let Some((rec, store)) = volume_store(spec, &mut c).await? else {
        return Err(Error::new(
            Errno::EINVAL,
            format!(
                "the volume at etcd prefix {} keeps its data inline in etcd: no objects to collect",
                spec.prefix
            ),
        ));
    };
    let io = |e: object_store::Error| Error::new(Errno::EIO, format!("data store: {e}"));
    let mut report = GcReport::default();
    // The store first: what is old enough now was named before the reads
    // below, if it ever will be.
    let cutoff = slices::now_ms().saturating_sub(opts.min_age.as_millis() as u64);
    let slack = if opts.min_age.is_zero() { 0 } else { 1000 };
    let prefix = Path::from(slices::objects_prefix(&rec.uuid));
    let mut candidates = Vec::new();
    let mut listing = store.list(Some(&prefix));
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(io)?;
        let Some(id) = slices::parse_object_path(&rec.uuid, meta.location.as_ref()) else {
            continue;
        };
        report.objects += 1;
        report.bytes += meta.size;
        // S3 servers date an object to the second, rounded down
        // (SeaweedFS, and S3's own Last-Modified): a second is added so
        // that an object never looks older than it is (unless min_age is
        // zero: then age does not count).
        let stamp = (meta.last_modified.timestamp_millis().max(0) as u64).saturating_add(slack);
        if stamp > cutoff {
            report.young += 1;
        } else {
            candidates.push((id, meta.location, meta.size));
        }
    }
    drop(listing);
    let mut named = HashSet::new();
    scan(spec, &mut c, keys.all_slice_lists(), |v| {
        named.extend(slices::decode(v)?.iter().map(|s| s.id));
        Ok(())
    })
    .await?;
    let mut pending = HashSet::new();
    scan(spec, &mut c, keys.all_garbage(), |v| {
        pending.extend(Garbage::decode(v)?.ids);
        Ok(())
    })
    .await?;
    for (id, location, size) in candidates {
        if named.contains(&id) {
            report.named += 1;
        } else if pending.contains(&id) {
            report.pending += 1;
        } else {
            report.orphans += 1;
            report.orphan_bytes += size;
            if !opts.dry_run {
                match store.delete(&location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(io(e)),
                }
            }
        }
    }
    Ok(report)
}

/// Every value under `prefix`, a page at a time. A value that cannot be
/// read stops the scan (EIO): what it names is unknown.
async fn scan(
    spec: &Spec,
    c: &mut Client,
    prefix: Vec<u8>,
    mut f: impl FnMut(&[u8]) -> dcache::Result<()>,
) -> Result<(), Error> {
    let end = prefix_end(&prefix);
    let mut from = prefix;
    loop {
        let r = c
            .get(
                from.clone(),
                Some(GetOptions::new().with_range(end.clone()).with_limit(64)),
            )
            .await
            .map_err(|e| unreachable(spec, e))?;
        for kv in r.kvs() {
            f(kv.value()).map_err(|e| {
                Error::new(
                    e,
                    format!(
                        "unreadable key {:?}: nothing deleted",
                        kv.key_str().unwrap_or("?")
                    ),
                )
            })?;
        }
        match r.kvs().last() {
            Some(kv) if r.more() => {
                from = kv.key().to_vec();
                from.push(0);
            }
            _ => return Ok(()),
        }
    }
}

/// Delete every object of the volume (`destroy`); how many.
pub(crate) async fn delete_all(
    store: &dyn object_store::ObjectStore,
    uuid: &str,
) -> Result<u64, Error> {
    let io = |e: object_store::Error| Error::new(Errno::EIO, format!("data store: {e}"));
    let prefix = Path::from(slices::objects_prefix(uuid));
    let mut n = 0;
    loop {
        let batch: Vec<Path> = store
            .list(Some(&prefix))
            .take(1000)
            .map(|m| m.map(|m| m.location))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(io)?;
        if batch.is_empty() {
            return Ok(n);
        }
        for p in batch {
            match store.delete(&p).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => n += 1,
                Err(e) => return Err(io(e)),
            }
        }
    }
}

/// Delete every key under the prefix of `spec`, volume record included,
/// and, for a volume whose data is in an object store, every object of
/// it: the volume and all its data are gone. Returns how many keys were
/// deleted. (For scratch volumes, such as `dcache bench`'s.)
pub fn destroy(spec: &str) -> Result<i64, Error> {
    let spec = parse_spec(spec).map_err(|e| Error::new(e, format!("bad etcd spec {spec:?}")))?;
    let keys = Keys::new(&spec.prefix);
    let limit = Duration::from_secs(10);
    block(&spec, Duration::from_secs(3600), async {
        let mut c = client_of(&spec, limit).await?;
        // No record, or one this build cannot read: the keys go all the
        // same.
        if let Ok(Some((rec, store))) = volume_store(&spec, &mut c).await {
            delete_all(&*store, &rec.uuid).await?;
        }
        let r = c
            .delete(
                keys.all(),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .map_err(|e| unreachable(&spec, e))?;
        Ok(r.deleted())
    })
}
