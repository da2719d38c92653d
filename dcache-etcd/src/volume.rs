//! A volume: the record `P/volume` that [`format()`] writes before any client
//! may use the prefix `P`, and that every client reads at connect.
//!
//! The record says what the namespace under `P` is: its UUID (16 bytes of
//! /dev/urandom as a version-4 UUID), the layout's format version, the size
//! of a data chunk and where file data is kept. Today that is `inline`
//! (in etcd, as `P/c/<ino>/<chunk>` keys); the `store-url` field is left
//! for an object store (`-`: none). A client refuses a record it cannot
//! serve (a newer format, another chunk size, another store) rather than
//! misread the namespace.

use std::fmt;
use std::time::Duration;

use dcache::{Errno, FileType};
use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};

use crate::codec::{Keys, Rec, CHUNK, ROOT_INO};
use crate::slices::SLICE_CHUNK;
use crate::spec::{parse_spec, Spec};

/// The newest layout version this build writes and reads: 2, file data
/// in an object store (slice lists in etcd, `crate::slices`). Volumes
/// whose data is inline in etcd keep version 1, their layout unchanged,
/// so clients built before object stores still serve them.
pub const FORMAT_VERSION: u32 = 2;
/// The version of a volume whose data is inline in etcd.
pub const FORMAT_INLINE: u32 = 1;

/// The first line of every record.
const MAGIC: &str = "dcache-volume 1";

pub use crate::error::{Error, ENOMEDIUM};

/// Where a volume keeps file data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataStore {
    /// In etcd, 64 KiB a key (`P/c/`): format 1.
    Inline,
    /// Objects in the store at this URL (`crate::store`), slice lists of
    /// 64 MiB chunks in etcd (`P/b/`): format 2.
    Objects(String),
}

/// The volume record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeRecord {
    pub uuid: String,
    pub format: u32,
    pub chunk: u64,
    pub store: DataStore,
    /// Seconds since the Unix epoch when it was formatted (or adopted).
    pub created: u64,
}

/// A volume a client joined or `format` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    pub record: VolumeRecord,
    pub prefix: String,
    /// The etcd cluster's id (from the response header).
    pub cluster_id: u64,
}

impl fmt::Display for Volume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "volume {} (prefix {}) from etcd cluster {:016x}",
            self.record.uuid, self.prefix, self.cluster_id
        )
    }
}

impl VolumeRecord {
    /// A new record with a random UUID and inline data.
    pub fn new() -> Result<VolumeRecord, Error> {
        VolumeRecord::with_store(DataStore::Inline)
    }

    /// A new record with a random UUID whose data goes to `store`.
    pub fn with_store(store: DataStore) -> Result<VolumeRecord, Error> {
        let (format, chunk) = match store {
            DataStore::Inline => (FORMAT_INLINE, CHUNK),
            DataStore::Objects(_) => (FORMAT_VERSION, SLICE_CHUNK),
        };
        Ok(VolumeRecord {
            uuid: new_uuid()?,
            format,
            chunk,
            store,
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let (store, url) = match &self.store {
            DataStore::Inline => ("inline", "-"),
            DataStore::Objects(url) => ("objects", url.as_str()),
        };
        format!(
            "{MAGIC}\nuuid {}\nformat {}\nchunk {}\nstore {store}\nstore-url {url}\ncreated {}\n",
            self.uuid, self.format, self.chunk, self.created
        )
        .into_bytes()
    }

    /// The record, or why this build cannot serve it (EIO).
    pub fn decode(b: &[u8]) -> Result<VolumeRecord, Error> {
        let bad = |why: &str| Error::new(Errno::EIO, format!("bad volume record: {why}"));
        let s = std::str::from_utf8(b).map_err(|_| bad("not text"))?;
        let mut lines = s.lines();
        if lines.next() != Some(MAGIC) {
            return Err(bad("not a dcache volume record"));
        }
        let (mut uuid, mut format, mut chunk, mut store, mut url, mut created) =
            (None, None, None, None, None, None);
        for l in lines {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            match k {
                "uuid" => uuid = Some(v.to_string()),
                "format" => format = v.parse::<u32>().ok(),
                "chunk" => chunk = v.parse::<u64>().ok(),
                "store" => store = Some(v.to_string()),
                "store-url" => url = Some(v.to_string()),
                "created" => created = v.parse::<u64>().ok(),
                _ => {} // a field of a later version
            }
        }
        let format = format.ok_or_else(|| bad("no format"))?;
        if format > FORMAT_VERSION {
            return Err(Error::new(
                Errno::EIO,
                format!(
                    "the volume has format {format}; this dcache reads up to {FORMAT_VERSION}: \
                     upgrade it"
                ),
            ));
        }
        let chunk = chunk.ok_or_else(|| bad("no chunk size"))?;
        let store = match (format, store.as_deref(), url.as_deref()) {
            (FORMAT_INLINE, Some("inline"), None | Some("-")) => DataStore::Inline,
            // Only the canonical forms `format` writes.
            (FORMAT_VERSION, Some("objects"), Some(u))
                if u.starts_with("file:///") || u.starts_with("s3://") =>
            {
                crate::store::StoreUrl::parse(u)
                    .map_err(|e| Error::new(Errno::EIO, format!("the volume's data store: {e}")))?;
                DataStore::Objects(u.to_string())
            }
            (f, s, u) => {
                return Err(Error::new(
                    Errno::EIO,
                    format!(
                        "the volume (format {f}) keeps its data in store {} {}, which this \
                         dcache cannot serve (it knows inline data, format 1, and objects, \
                         format 2)",
                        s.unwrap_or("?"),
                        u.unwrap_or("-")
                    ),
                ))
            }
        };
        let want = match store {
            DataStore::Inline => CHUNK,
            DataStore::Objects(_) => SLICE_CHUNK,
        };
        if chunk != want {
            return Err(Error::new(
                Errno::EIO,
                format!("the volume's chunks are {chunk} bytes; this dcache uses {want}"),
            ));
        }
        Ok(VolumeRecord {
            uuid: uuid.filter(|u| is_uuid(u)).ok_or_else(|| bad("no uuid"))?,
            format,
            chunk,
            store,
            created: created.ok_or_else(|| bad("no creation time"))?,
        })
    }
}

/// A version-4 UUID from /dev/urandom.
fn new_uuid() -> Result<String, Error> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::new(Errno::from_io(&e), format!("/dev/urandom: {e}")))?;
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    ))
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// What [`format()`] may do.
#[derive(Clone, Debug, Default)]
pub struct FormatOptions {
    /// Write the record over a namespace that a dcache-etcd from before
    /// volumes created (its data kept as it is; its clients' heartbeat
    /// keys `P/w/h/` deleted). Without it, a prefix holding any key is
    /// refused.
    pub adopt: bool,
    /// Where file data goes: a store URL (`crate::store`: `file:///DIR`,
    /// `s3://BUCKET/PREFIX?endpoint=...`), or `None` to keep it inline
    /// in etcd (small files on one host, see the README).
    pub data: Option<String>,
}

/// The spec as a person would type it again (`etcd:EP,EP/prefix`).
pub fn spec_string(spec: &Spec) -> String {
    format!("etcd:{}{}", spec.endpoints.join(","), spec.prefix)
}

pub(crate) fn unreachable(spec: &Spec, e: impl fmt::Display) -> Error {
    let why = e.to_string();
    let at = spec.endpoints.join(",");
    if crate::spec::is_auth_refusal(&why) {
        let hint = crate::spec::auth_hint();
        return Error::new(
            Errno::EACCES,
            format!("etcd at {at} refused this client: {why}{hint}"),
        );
    }
    // A TLS handshake refused for want of a client certificate shows
    // only as a closed connection.
    let hint = if spec.endpoints.iter().any(|e| crate::spec::is_https(e))
        && std::env::var_os(crate::spec::ENV_CERT).is_none()
    {
        format!(
            " (if etcd checks client certificates: set {} and {})",
            crate::spec::ENV_CERT,
            crate::spec::ENV_KEY
        )
    } else {
        String::new()
    };
    Error::new(
        Errno::EIO,
        format!("cannot reach etcd at {at}: {why}{hint}"),
    )
}

/// A client of `spec`'s cluster.
pub(crate) async fn client_of(spec: &Spec, limit: Duration) -> Result<Client, Error> {
    let opts = crate::spec::connect_options(&spec.endpoints, limit)
        .map_err(|m| Error::new(Errno::EINVAL, m))?;
    Client::connect(spec.endpoints.clone(), Some(opts))
        .await
        .map_err(|e| unreachable(spec, e))
}

/// Run `f` to completion on a runtime of its own, within `limit`. From
/// inside another runtime (which cannot block in place) it runs on a
/// thread of its own.
pub(crate) fn block<T: Send>(
    spec: &Spec,
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, Error>> + Send,
) -> Result<T, Error> {
    let run = || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::new(Errno::from_io(&e), format!("runtime: {e}")))?;
        match rt.block_on(async { tokio::time::timeout(limit, f).await }) {
            Ok(r) => r,
            Err(_) => Err(unreachable(spec, format!("no answer within {limit:?}"))),
        }
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(run)
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    } else {
        run()
    }
}

/// Format the prefix of `spec` (`[etcd:]ENDPOINT[,...][/prefix]`) as a
/// new volume: its record and its root directory, in one transaction.
/// Refused (EEXIST, saying why and what to do) when the prefix already
/// holds a volume, or any key unless `opts.adopt`.
pub fn format(spec: &str, opts: &FormatOptions) -> Result<Volume, Error> {
    let spec = parse_spec(spec).map_err(|e| {
        Error::new(
            e,
            format!("bad etcd spec {spec:?}: expected etcd:http://HOST:PORT[,...]/prefix"),
        )
    })?;
    let limit = Duration::from_secs(10);
    block(&spec, limit, format_on(&spec, opts, limit))
}

async fn format_on(spec: &Spec, opts: &FormatOptions, limit: Duration) -> Result<Volume, Error> {
    let keys = Keys::new(&spec.prefix);
    let again = spec_string(spec);
    let store = match &opts.data {
        None => DataStore::Inline,
        Some(_) if opts.adopt => {
            return Err(Error::new(
                Errno::EINVAL,
                "an adopted namespace keeps its data inline in etcd: --adopt takes no --data",
            ))
        }
        Some(u) => {
            let url = crate::store::StoreUrl::parse(u)?;
            let store = url.open(true)?;
            probe_store(&*store, &url.canonical()).await?;
            DataStore::Objects(url.canonical())
        }
    };
    let mut c = client_of(spec, limit).await?;
    {
        let err = |e: etcd_client::Error| unreachable(spec, e);
        let vkey = keys.volume();
        let all = keys.all();
        let root = keys.inode(ROOT_INO);
        let existing = c.get(vkey.clone(), None).await.map_err(err)?;
        if let Some(kv) = existing.kvs().first() {
            let what = match VolumeRecord::decode(kv.value()) {
                Ok(r) => format!("volume {}", r.uuid),
                Err(e) => format!("a volume record ({e})"),
            };
            return Err(Error::new(
                Errno::EEXIST,
                format!(
                    "etcd prefix {} already holds {what}; nothing written (mount it with \
                     `dcache mount --backend {again} MOUNTPOINT`)",
                    spec.prefix
                ),
            ));
        }
        let count = c
            .get(
                all.clone(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .map_err(err)?
            .count();
        let root_rec = c.get(root.clone(), None).await.map_err(err)?;
        let root_ok = root_rec
            .kvs()
            .first()
            .is_some_and(|kv| Rec::decode(kv.value()).is_ok_and(|r| r.is_dir()));
        if count > 0 && !opts.adopt {
            let hint = if root_ok {
                format!(
                    "it looks like a namespace written by dcache-etcd before volumes: \
                     `dcache format --adopt {again}` makes it a volume as it is"
                )
            } else {
                "it is not a dcache namespace: choose another prefix".to_string()
            };
            return Err(Error::new(
                Errno::EEXIST,
                format!(
                    "etcd prefix {} already holds {count} keys and no volume record; \
                     nothing written ({hint})",
                    spec.prefix
                ),
            ));
        }
        if count > 0 && !root_ok {
            return Err(Error::new(
                Errno::EEXIST,
                format!(
                    "etcd prefix {} holds {count} keys but no dcache root directory: \
                     nothing to adopt; nothing written",
                    spec.prefix
                ),
            ));
        }
        let record = VolumeRecord::with_store(store)?;
        let mut cmps = vec![Compare::version(vkey.clone(), CompareOp::Equal, 0)];
        let mut ops = vec![TxnOp::put(vkey.clone(), record.encode(), None)];
        if count == 0 {
            // Owned by whoever formats, as a new memfs's root is (a user's
            // volume is then writable by that user's mounts).
            let me = dcache::fs::Ctx::current();
            let mut r = Rec::new(FileType::Directory, 0o755, me.uid, me.gid);
            r.nlink = 2;
            r.size = 2 * crate::codec::DIRENT;
            cmps.push(Compare::version(root.clone(), CompareOp::Equal, 0));
            ops.push(TxnOp::put(root, r.encode(), None));
            ops.push(TxnOp::put(
                keys.parent(ROOT_INO),
                ROOT_INO.to_le_bytes().to_vec(),
                None,
            ));
        } else {
            // The older clients' heartbeat keys: nothing reads them now.
            let hb = keys.old_heartbeats();
            ops.push(TxnOp::delete(hb, Some(DeleteOptions::new().with_prefix())));
        }
        let resp = c
            .txn(Txn::new().when(cmps).and_then(ops))
            .await
            .map_err(err)?;
        if !resp.succeeded() {
            return Err(Error::new(
                Errno::EEXIST,
                format!(
                    "etcd prefix {} was formatted by someone else meanwhile; nothing written",
                    spec.prefix
                ),
            ));
        }
        Ok(Volume {
            record,
            prefix: spec.prefix.clone(),
            cluster_id: resp.header().map(|h| h.cluster_id()).unwrap_or(0),
        })
    }
}

/// Write and delete one object, so that a store `format` names is known
/// to take the volume's data.
async fn probe_store(store: &dyn object_store::ObjectStore, url: &str) -> Result<(), Error> {
    let p = object_store::path::Path::from("dcache-format-probe");
    let fail = |e: object_store::Error| {
        Error::new(
            Errno::EIO,
            format!("data store {url} refused a test object: {e}"),
        )
    };
    store
        .put(&p, bytes::Bytes::from_static(b"probe").into())
        .await
        .map_err(fail)?;
    store.delete(&p).await.map_err(fail)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_what_they_cannot_serve() {
        let r = VolumeRecord::new().unwrap();
        assert!(is_uuid(&r.uuid), "{}", r.uuid);
        assert_eq!(&r.uuid[14..15], "4");
        assert_ne!(VolumeRecord::new().unwrap().uuid, r.uuid);
        assert_eq!(VolumeRecord::decode(&r.encode()), Ok(r.clone()));
        let text = String::from_utf8(r.encode()).unwrap();
        for (from, to, says) in [
            ("format 1", "format 2", "format 2"),
            ("chunk 65536", "chunk 4096", "4096"),
            ("store inline", "store s3", "s3"),
            ("store-url -", "store-url s3://b", "s3://b"),
        ] {
            let e = VolumeRecord::decode(text.replace(from, to).as_bytes()).unwrap_err();
            assert_eq!(e.errno, Errno::EIO);
            assert!(e.message.contains(says), "{e}");
        }
        for bad in [
            &b""[..],
            b"dcache-volume 1\n",
            b"\xff",
            b"dcache-volume 1\nformat 1\n",
        ] {
            assert_eq!(VolumeRecord::decode(bad).unwrap_err().errno, Errno::EIO);
        }
        // A format-2 record names its store; the combinations that do not
        // go together are refused.
        let o = VolumeRecord::with_store(DataStore::Objects("file:///d".into())).unwrap();
        assert_eq!((o.format, o.chunk), (2, SLICE_CHUNK));
        assert_eq!(VolumeRecord::decode(&o.encode()), Ok(o.clone()));
        let otext = String::from_utf8(o.encode()).unwrap();
        for (from, to) in [
            ("format 2", "format 1"),
            ("chunk 67108864", "chunk 65536"),
            ("store-url file:///d", "store-url s3://k:s@b"),
            ("store-url file:///d", "store-url -"),
        ] {
            let e = VolumeRecord::decode(otext.replace(from, to).as_bytes()).unwrap_err();
            assert_eq!(e.errno, Errno::EIO, "{to}: {e}");
        }
        // A later version's extra field is ignored.
        let more = format!("{text}colour blue\n");
        assert_eq!(VolumeRecord::decode(more.as_bytes()), Ok(r));
    }
}
