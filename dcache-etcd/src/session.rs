//! A client's session record, `P/s/<client id>`: who holds the session,
//! written at connect on the client's lease, so it vanishes when the
//! client leaves (the lease revoked) or dies (the lease expires).
//!
//! Plain text, one `field value` line each, so that `etcdctl get --prefix
//! P/s/` shows who is connected.

use dcache::{Errno, Result};

/// The first line of every record.
const MAGIC: &str = "dcache-session 1";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    pub host: String,
    pub pid: u32,
    /// Seconds since the Unix epoch when the client connected.
    pub mounted: u64,
    /// The version of dcache-etcd the client runs.
    pub version: String,
}

impl SessionRecord {
    /// This process, now.
    pub fn current() -> SessionRecord {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown".to_string());
        SessionRecord {
            host,
            pid: std::process::id(),
            mounted: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        // A host name holds no newline (the kernel's is one token), but
        // one from elsewhere must not break the format.
        let clean = |s: &str| s.replace(['\n', '\r'], " ");
        format!(
            "{MAGIC}\nhost {}\npid {}\nmounted {}\nversion {}\n",
            clean(&self.host),
            self.pid,
            self.mounted,
            clean(&self.version)
        )
        .into_bytes()
    }

    /// EIO for anything that is not a record.
    pub fn decode(b: &[u8]) -> Result<SessionRecord> {
        let s = std::str::from_utf8(b).map_err(|_| Errno::EIO)?;
        let mut lines = s.lines();
        if lines.next() != Some(MAGIC) {
            return Err(Errno::EIO);
        }
        let (mut host, mut pid, mut mounted, mut version) = (None, None, None, None);
        for l in lines {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            match k {
                "host" => host = Some(v.to_string()),
                "pid" => pid = v.parse().ok(),
                "mounted" => mounted = v.parse().ok(),
                "version" => version = Some(v.to_string()),
                _ => {} // a later version's field
            }
        }
        Ok(SessionRecord {
            host: host.ok_or(Errno::EIO)?,
            pid: pid.ok_or(Errno::EIO)?,
            mounted: mounted.ok_or(Errno::EIO)?,
            version: version.ok_or(Errno::EIO)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let r = SessionRecord::current();
        assert_eq!(r.pid, std::process::id());
        assert_eq!(SessionRecord::decode(&r.encode()), Ok(r.clone()));
        let odd = SessionRecord {
            host: "a\nb".into(),
            ..r
        };
        assert_eq!(SessionRecord::decode(&odd.encode()).unwrap().host, "a b");
        for bad in [&b""[..], b"x", b"dcache-session 1\nhost h\n", b"\xff"] {
            assert_eq!(SessionRecord::decode(bad), Err(Errno::EIO));
        }
    }
}
