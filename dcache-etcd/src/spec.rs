//! The connection spec (`etcd:http://127.0.0.1:2379,http://10.0.0.2:2379/ns`)
//! and the options of a client.

use std::time::Duration;

use dcache::{Errno, Result};

/// The prefix used when the spec names none.
pub const DEFAULT_PREFIX: &str = "/dcache";

/// How a client caches and how long it waits.
#[derive(Clone, Debug)]
pub struct Options {
    /// The staleness bound: a cached entry or attribute is served without
    /// asking etcd only while this client's watch is known to have
    /// delivered every change committed up to at most this long ago.
    /// Past it, every use is revalidated against etcd (a linearizable
    /// read) until the watch catches up again.
    pub staleness: Duration,
    /// How long one operation may take, retries and failover included,
    /// before it returns EIO (e.g. while no quorum can be reached).
    pub timeout: Duration,
    /// How often the client writes its heartbeat key (which measures the
    /// watch's progress). `None`: a quarter of `staleness`.
    pub heartbeat: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            staleness: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            heartbeat: None,
        }
    }
}

impl Options {
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat
            .unwrap_or(self.staleness / 4)
            .max(Duration::from_millis(10))
    }
}

/// A parsed spec: the endpoints and the key prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub endpoints: Vec<String>,
    pub prefix: String,
}

/// Parse `[etcd:]ENDPOINT[,ENDPOINT...][/prefix]`, where an endpoint is
/// `[http://]host:port`. The prefix follows the last endpoint (or any,
/// when they all name the same one). EINVAL for anything else (https is
/// not supported: this build has no TLS).
pub fn parse_spec(spec: &str) -> Result<Spec> {
    let s = spec.strip_prefix("etcd:").unwrap_or(spec);
    let s = s.strip_prefix("//").unwrap_or(s);
    let mut endpoints = Vec::new();
    let mut prefix: Option<String> = None;
    for part in s.split(',') {
        let part = part.trim();
        if part.starts_with("https://") {
            return Err(Errno::EINVAL);
        }
        let rest = part.strip_prefix("http://").unwrap_or(part);
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        let (host, port) = hostport.rsplit_once(':').ok_or(Errno::EINVAL)?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(Errno::EINVAL);
        }
        if let Some(p) = path {
            let p = p.trim_end_matches('/');
            if p.is_empty() || p.contains("//") || p.bytes().any(|b| b == 0) {
                return Err(Errno::EINVAL);
            }
            match &prefix {
                Some(q) if q != p => return Err(Errno::EINVAL),
                _ => prefix = Some(p.to_string()),
            }
        }
        endpoints.push(format!("http://{hostport}"));
    }
    if endpoints.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(Spec {
        endpoints,
        prefix: prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = parse_spec("http://127.0.0.1:2379").unwrap();
        assert_eq!(s.endpoints, vec!["http://127.0.0.1:2379"]);
        assert_eq!(s.prefix, DEFAULT_PREFIX);
        let s = parse_spec("etcd:127.0.0.1:1,http://127.0.0.1:2/ns/a/").unwrap();
        assert_eq!(
            s.endpoints,
            vec!["http://127.0.0.1:1", "http://127.0.0.1:2"]
        );
        assert_eq!(s.prefix, "/ns/a");
        for bad in [
            "",
            "etcd:",
            "127.0.0.1",
            "h:notaport",
            "https://h:1",
            "h:1/a,h:2/b",
            "h:1/",
            ":1",
        ] {
            assert_eq!(parse_spec(bad), Err(Errno::EINVAL), "{bad}");
        }
    }
}
