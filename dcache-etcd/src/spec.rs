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
    /// Fail fast when the cluster is gone: once no member has been alive
    /// for this long (each gave no answer to the client's status probe,
    /// every 250 ms, and refused a TCP connection or gave none within
    /// 2 s), operations return EIO at once instead of waiting out
    /// `timeout`. Members that are slow (they still accept connections)
    /// or answer without a quorum (a leader election, a minority
    /// partition) are waited for, up to `timeout`. `None`: always wait out
    /// `timeout`.
    pub unreachable_after: Option<Duration>,
    /// How often the client checks that its watch is current (a
    /// linearizable read and a progress request on the watch, see the
    /// crate's README; nothing is written). `None`: a quarter of
    /// `staleness`.
    pub progress_interval: Option<Duration>,
    /// The time to live of the client's session lease: its session record
    /// and marker key vanish this long after the client stops renewing it
    /// (a crash, a partition). Renewed every third of it. Whole seconds,
    /// at least 2 s (etcd's minimum lease TTL is longer on most clusters:
    /// the server may raise it).
    pub lease_ttl: Duration,
    /// Object-store volumes: how long an object no list names any more
    /// (overwritten, truncated, unlinked) is kept before the collector
    /// deletes it, so that a read that began before the change can still
    /// fetch it. Every client collects; this one's bound applies to what
    /// it collects.
    pub gc_grace: Duration,
    /// Object-store volumes: the most bytes of objects kept in memory
    /// after a read (objects never change, so what is kept is never
    /// stale).
    pub read_cache_bytes: u64,
    /// Object-store volumes: a local directory that keeps objects read
    /// (in `<dir>/<volume uuid>/`), so that a restarted client, or one
    /// whose memory cache let them go, reads them from disk instead of
    /// the store. `None`: memory only.
    pub read_cache_dir: Option<std::path::PathBuf>,
    /// The most bytes `read_cache_dir` holds (least recently used out
    /// first).
    pub read_cache_dir_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            staleness: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            unreachable_after: Some(Duration::from_secs(1)),
            progress_interval: None,
            lease_ttl: Duration::from_secs(10),
            gc_grace: Duration::from_secs(60),
            read_cache_bytes: 256 << 20,
            read_cache_dir: None,
            read_cache_dir_bytes: 4 << 30,
        }
    }
}

impl Options {
    /// How often the watch's currency is checked.
    pub fn progress_every(&self) -> Duration {
        self.progress_interval
            .unwrap_or(self.staleness / 4)
            .max(Duration::from_millis(10))
    }

    /// The lease TTL in whole seconds (at least 2).
    pub fn lease_ttl_secs(&self) -> i64 {
        self.lease_ttl.as_secs().clamp(2, i64::MAX as u64) as i64
    }
}

/// A parsed spec: the endpoints and the key prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub endpoints: Vec<String>,
    pub prefix: String,
}

impl Spec {
    /// Try a TCP connection to every endpoint at once, each given
    /// `timeout` (name resolution included), so that a mount can say at
    /// once why etcd cannot be reached instead of failing with EIO after
    /// [`Options::timeout`]. `Ok`: at least one endpoint accepted; it
    /// holds a line for each that did not. `Err`: none did; a line for
    /// each, such as `http://127.0.0.1:1: connection refused` or
    /// `http://nohost:2379: unknown host nohost`.
    pub fn probe(&self, timeout: Duration) -> std::result::Result<Vec<String>, Vec<String>> {
        let (tx, rx) = std::sync::mpsc::channel();
        for (i, ep) in self.endpoints.iter().enumerate() {
            let (tx, ep) = (tx.clone(), ep.clone());
            // Detached: a resolver that hangs past the deadline is left
            // to finish on its own.
            let _ = std::thread::Builder::new()
                .name("dcache-etcd-probe".into())
                .spawn(move || {
                    let _ = tx.send((i, probe_one(&ep, timeout)));
                });
        }
        drop(tx);
        let mut got: Vec<Option<std::result::Result<(), String>>> =
            vec![None; self.endpoints.len()];
        let until = std::time::Instant::now() + timeout + Duration::from_millis(200);
        while got.iter().any(Option::is_none) {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok((i, r)) => got[i] = Some(r),
                Err(_) => break,
            }
        }
        let mut up = false;
        let mut down = Vec::new();
        for (ep, r) in self.endpoints.iter().zip(got) {
            match r {
                Some(Ok(())) => up = true,
                Some(Err(why)) => down.push(format!("{ep}: {why}")),
                None => down.push(format!("{ep}: no answer within {timeout:?}")),
            }
        }
        if up {
            Ok(down)
        } else {
            Err(down)
        }
    }
}

/// One endpoint (`http://host:port`): resolve it and connect to any of its
/// addresses within `timeout`; the error in a few words.
fn probe_one(endpoint: &str, timeout: Duration) -> std::result::Result<(), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let hostport = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
    let start = std::time::Instant::now();
    let addrs: Vec<_> = hostport
        .to_socket_addrs()
        .map_err(|e| {
            let why = e.to_string();
            let why = why
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(&why)
                .to_string();
            format!("unknown host {host} ({why})")
        })?
        .collect();
    let mut last = format!("unknown host {host} (no address)");
    for a in addrs {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(format!("no answer within {timeout:?}"));
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(_) => return Ok(()),
            Err(e) => {
                last = match e.raw_os_error() {
                    Some(libc::ECONNREFUSED) => "connection refused".to_string(),
                    Some(libc::ENETUNREACH) => "network unreachable".to_string(),
                    Some(libc::EHOSTUNREACH) => "host unreachable".to_string(),
                    _ if e.kind() == std::io::ErrorKind::TimedOut => {
                        format!("no answer within {timeout:?}")
                    }
                    _ => Errno::from_io(&e).to_string(),
                }
            }
        }
    }
    Err(last)
}

/// The etcd user a process connects as (etcd's user/password
/// authentication): `DCACHE_ETCD_USER`.
pub const ENV_USER: &str = "DCACHE_ETCD_USER";
/// The user's password: `DCACHE_ETCD_PASSWORD`, or the first line of the
/// file named by [`ENV_PASSWORD_FILE`] (which wins when both are set).
pub const ENV_PASSWORD: &str = "DCACHE_ETCD_PASSWORD";
/// A file holding the user's password (its first line).
pub const ENV_PASSWORD_FILE: &str = "DCACHE_ETCD_PASSWORD_FILE";

/// What to add to a refusal by etcd when this process gave no
/// credentials: which to set (empty when it gave some).
pub(crate) fn auth_hint() -> String {
    match credentials() {
        Ok(None) => " (etcd has authentication on: set DCACHE_ETCD_USER, \
                     and DCACHE_ETCD_PASSWORD or DCACHE_ETCD_PASSWORD_FILE)"
            .to_string(),
        _ => String::new(),
    }
}

/// The contents of the file named by environment variable `var` (`None`
/// when it is unset); the error names the variable and the file.
fn env_file(var: &str) -> std::result::Result<Option<Vec<u8>>, String> {
    match std::env::var_os(var) {
        None => Ok(None),
        Some(f) => std::fs::read(&f)
            .map(Some)
            .map_err(|e| format!("{var}={}: {e}", std::path::Path::new(&f).display())),
    }
}

/// Whether etcd's error message says that it refused the client's
/// credentials (none given, a wrong password, a user without the right).
pub(crate) fn is_auth_refusal(m: &str) -> bool {
    m.contains("user name is empty")
        || m.contains("authentication failed")
        || m.contains("permission denied")
        || m.contains("invalid auth token")
        || m.contains("authentication is not enabled")
}

/// The credentials this process connects with, from its environment
/// (never from a spec, never written to etcd or printed): `None` when
/// [`ENV_USER`] is unset.
pub(crate) fn credentials() -> std::result::Result<Option<(String, String)>, String> {
    let Some(user) = std::env::var_os(ENV_USER) else {
        return Ok(None);
    };
    let user = user
        .into_string()
        .map_err(|_| format!("{ENV_USER} is not UTF-8"))?;
    let password = match env_file(ENV_PASSWORD_FILE)? {
        Some(text) => String::from_utf8_lossy(&text)
            .lines()
            .next()
            .unwrap_or("")
            .to_string(),
        None => std::env::var(ENV_PASSWORD).map_err(|_| {
            format!("{ENV_USER} is set but neither {ENV_PASSWORD} nor {ENV_PASSWORD_FILE}")
        })?,
    };
    Ok(Some((user, password)))
}

/// A PEM file of the certificate authorities an `https://` endpoint's
/// certificate must be signed by (required for TLS: no system roots are
/// trusted).
pub const ENV_CACERT: &str = "DCACHE_ETCD_CACERT";
/// A PEM file of this client's certificate, for an etcd that checks
/// clients' certificates (`--client-cert-auth`); with [`ENV_KEY`].
pub const ENV_CERT: &str = "DCACHE_ETCD_CERT";
/// A PEM file of the key of [`ENV_CERT`].
pub const ENV_KEY: &str = "DCACHE_ETCD_KEY";

/// Whether `endpoint` is reached over TLS.
pub(crate) fn is_https(endpoint: &str) -> bool {
    endpoint.starts_with("https://")
}

/// TLS to `https://` endpoints: the authorities of [`ENV_CACERT`], and
/// the client's certificate and key where both are given.
fn tls_options() -> std::result::Result<etcd_client::TlsOptions, String> {
    let ca = env_file(ENV_CACERT)?.ok_or_else(|| {
        format!("an https:// etcd needs {ENV_CACERT} (a PEM file of the authorities to trust)")
    })?;
    let mut tls =
        etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(ca));
    match (env_file(ENV_CERT)?, env_file(ENV_KEY)?) {
        (Some(cert), Some(key)) => tls = tls.identity(etcd_client::Identity::from_pem(cert, key)),
        (None, None) => {}
        _ => return Err(format!("{ENV_CERT} and {ENV_KEY} go together")),
    }
    Ok(tls)
}

/// The options every etcd client of this crate connects with, to
/// `endpoints`: `limit` to connect, TLS for `https://` ones, and the
/// environment's credentials (which etcd checks at connect: a wrong
/// password fails it).
pub(crate) fn connect_options<S: AsRef<str>>(
    endpoints: &[S],
    limit: Duration,
) -> std::result::Result<etcd_client::ConnectOptions, String> {
    let mut opts = etcd_client::ConnectOptions::new().with_connect_timeout(limit);
    if endpoints.iter().any(|e| is_https(e.as_ref())) {
        opts = opts.with_tls(tls_options()?);
    }
    Ok(match credentials()? {
        // The token etcd hands out expires (`--auth-token-ttl`, 5 min by
        // default): a request refused for it authenticates again.
        Some((user, password)) => opts.with_user(user, password).with_auto_token_refresh(true),
        None => opts,
    })
}

/// Parse `[etcd:]ENDPOINT[,ENDPOINT...][/prefix]`, where an endpoint is
/// `[http://]host:port` or `https://host:port` (TLS, see
/// [`ENV_CACERT`]; every endpoint of a spec the same). The prefix follows
/// the last endpoint (or any, when they all name the same one). EINVAL
/// for anything else.
pub fn parse_spec(spec: &str) -> Result<Spec> {
    let s = spec.strip_prefix("etcd:").unwrap_or(spec);
    let s = s.strip_prefix("//").unwrap_or(s);
    let mut endpoints: Vec<String> = Vec::new();
    let mut prefix: Option<String> = None;
    for part in s.split(',') {
        let part = part.trim();
        let (scheme, rest) = match part.strip_prefix("https://") {
            Some(rest) => ("https", rest),
            None => ("http", part.strip_prefix("http://").unwrap_or(part)),
        };
        if !endpoints.is_empty() && is_https(&endpoints[0]) != (scheme == "https") {
            return Err(Errno::EINVAL);
        }
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
        endpoints.push(format!("{scheme}://{hostport}"));
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
        let s = parse_spec("https://h:1,https://h:2/x").unwrap();
        assert_eq!(s.endpoints, vec!["https://h:1", "https://h:2"]);
        for bad in [
            "",
            "etcd:",
            "127.0.0.1",
            "h:notaport",
            "https://h:1,http://h:2",
            "h:1/a,h:2/b",
            "h:1/",
            ":1",
        ] {
            assert_eq!(parse_spec(bad), Err(Errno::EINVAL), "{bad}");
        }
    }

    #[test]
    fn probes_say_why_at_once() {
        let t = std::time::Instant::now();
        let spec = parse_spec("127.0.0.1:1,nohost.invalid:2379/x").unwrap();
        let down = spec.probe(Duration::from_secs(1)).unwrap_err();
        assert_eq!(down.len(), 2, "{down:?}");
        assert_eq!(down[0], "http://127.0.0.1:1: connection refused");
        assert!(
            down[1].starts_with("http://nohost.invalid:2379: unknown host nohost.invalid"),
            "{down:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // One listening endpoint is enough; the other is named.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let spec = parse_spec(&format!("127.0.0.1:{port},127.0.0.1:1")).unwrap();
        assert_eq!(
            spec.probe(Duration::from_secs(1)),
            Ok(vec!["http://127.0.0.1:1: connection refused".to_string()])
        );
    }
}
