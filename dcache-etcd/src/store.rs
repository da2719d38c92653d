//! Where a volume keeps its file data: the store URL written in the
//! volume record (`dcache format --data URL`) and the `object_store`
//! client made from it.
//!
//! - `file:///abs/dir` (or `/abs/dir`): a local directory
//!   (`LocalFileSystem`), for one host or a directory every client
//!   mounts (NFS).
//! - `s3://BUCKET[/PREFIX]?endpoint=http://HOST:PORT&region=REGION`: an
//!   S3-compatible server (`AmazonS3`, path-style requests; `http://`
//!   endpoints allowed). `endpoint` may be left out for AWS itself.
//!   Credentials are never part of the URL (which is stored in etcd):
//!   they come from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (and
//!   `AWS_SESSION_TOKEN`) in the environment of each client, or else from
//!   a credentials file: `DCACHE_S3_CREDENTIALS`, else
//!   `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials` (its
//!   `[default]` section, `aws_access_key_id = ...` lines). Without any,
//!   requests are sent unsigned (a server that allows anonymous access).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dcache::Errno;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectStore};

use crate::error::Error;

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    Local(PathBuf),
    S3 {
        bucket: String,
        prefix: String,
        endpoint: Option<String>,
        region: String,
    },
}

fn bad(url: &str, why: &str) -> Error {
    Error::new(
        Errno::EINVAL,
        format!(
            "bad data store {url:?}: {why} (expected file:///DIR or \
             s3://BUCKET/PREFIX?endpoint=http://HOST:PORT&region=REGION)"
        ),
    )
}

impl StoreUrl {
    /// Parse `url`. A relative local path is made absolute against the
    /// current directory.
    pub fn parse(url: &str) -> Result<StoreUrl, Error> {
        if let Some(rest) = url.strip_prefix("s3://") {
            return parse_s3(url, rest);
        }
        let path = url.strip_prefix("file://").unwrap_or(url);
        if path.is_empty()
            || path.contains('?')
            || url.contains("://") && !url.starts_with("file://")
        {
            return Err(bad(url, "unknown scheme"));
        }
        let p = PathBuf::from(path);
        let p = if p.is_absolute() {
            p
        } else {
            std::env::current_dir()
                .map_err(|e| bad(url, &e.to_string()))?
                .join(p)
        };
        Ok(StoreUrl::Local(p))
    }

    /// The URL as the volume record keeps it.
    pub fn canonical(&self) -> String {
        match self {
            StoreUrl::Local(p) => format!("file://{}", p.display()),
            StoreUrl::S3 {
                bucket,
                prefix,
                endpoint,
                region,
            } => {
                let mut s = format!("s3://{bucket}");
                if !prefix.is_empty() {
                    s.push('/');
                    s.push_str(prefix);
                }
                s.push_str(&format!("?region={region}"));
                if let Some(e) = endpoint {
                    s.push_str(&format!("&endpoint={e}"));
                }
                s
            }
        }
    }

    /// The client for this store. `create`: make a missing local
    /// directory (what `format` does); a client joining a volume wants it
    /// there already.
    pub fn open(&self, create: bool) -> Result<Arc<dyn ObjectStore>, Error> {
        match self {
            StoreUrl::Local(p) => {
                if create {
                    std::fs::create_dir_all(p).map_err(|e| {
                        Error::new(
                            Errno::from_io(&e),
                            format!("cannot create data directory {}: {e}", p.display()),
                        )
                    })?;
                }
                if !p.is_dir() {
                    return Err(Error::new(
                        Errno::ENOENT,
                        format!(
                            "the volume's data directory {} is missing on this host",
                            p.display()
                        ),
                    ));
                }
                let fs = LocalFileSystem::new_with_prefix(p).map_err(|e| {
                    Error::new(Errno::EIO, format!("data directory {}: {e}", p.display()))
                })?;
                Ok(Arc::new(fs))
            }
            StoreUrl::S3 {
                bucket,
                prefix,
                endpoint,
                region,
            } => {
                let mut b = AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_virtual_hosted_style_request(false)
                    .with_client_options(
                        ClientOptions::new()
                            .with_allow_http(true)
                            .with_connect_timeout(Duration::from_secs(5))
                            .with_timeout(Duration::from_secs(60)),
                    );
                if let Some(e) = endpoint {
                    b = b.with_endpoint(e);
                }
                match credentials() {
                    Some(c) => {
                        b = b.with_access_key_id(c.key).with_secret_access_key(c.secret);
                        if let Some(t) = c.token {
                            b = b.with_token(t);
                        }
                    }
                    None => b = b.with_skip_signature(true),
                }
                let s3 = b.build().map_err(|e| {
                    Error::new(
                        Errno::EINVAL,
                        format!("data store {}: {e}", self.canonical()),
                    )
                })?;
                if prefix.is_empty() {
                    Ok(Arc::new(s3))
                } else {
                    Ok(Arc::new(PrefixStore::new(s3, prefix.as_str())))
                }
            }
        }
    }
}

fn parse_s3(url: &str, rest: &str) -> Result<StoreUrl, Error> {
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
    if bucket.contains('@') || bucket.contains(':') {
        return Err(bad(
            url,
            "credentials are never part of the URL (it is stored in etcd): give them \
             in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a credentials file",
        ));
    }
    if bucket.is_empty() {
        return Err(bad(url, "no bucket"));
    }
    let (mut endpoint, mut region) = (None, None);
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "endpoint" if v.starts_with("http://") || v.starts_with("https://") => {
                endpoint = Some(v.trim_end_matches('/').to_string())
            }
            "endpoint" => return Err(bad(url, "the endpoint must be an http(s):// URL")),
            "region" if !v.is_empty() => region = Some(v.to_string()),
            k if k.contains("key") || k.contains("secret") || k.contains("token") => {
                return Err(bad(
                    url,
                    "credentials are never part of the URL (it is stored in etcd): give \
                     them in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a credentials file",
                ))
            }
            _ => return Err(bad(url, &format!("unknown parameter {k:?}"))),
        }
    }
    Ok(StoreUrl::S3 {
        bucket: bucket.to_string(),
        prefix: prefix.trim_matches('/').to_string(),
        endpoint,
        region: region.unwrap_or_else(|| "us-east-1".to_string()),
    })
}

struct Credentials {
    key: String,
    secret: String,
    token: Option<String>,
}

fn credentials() -> Option<Credentials> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(key), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        return Some(Credentials {
            key,
            secret,
            token: env("AWS_SESSION_TOKEN"),
        });
    }
    let file = env("DCACHE_S3_CREDENTIALS")
        .or_else(|| env("AWS_SHARED_CREDENTIALS_FILE"))
        .or_else(|| env("HOME").map(|h| format!("{h}/.aws/credentials")))?;
    parse_credentials(&std::fs::read_to_string(file).ok()?)
}

/// `name = value` (or `NAME=VALUE`) lines; of sections (`[name]`), only
/// `[default]` and lines before any section count.
fn parse_credentials(text: &str) -> Option<Credentials> {
    let (mut key, mut secret, mut token) = (None, None, None);
    let mut wanted = true;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(sec) = line.strip_prefix('[') {
            wanted = sec.trim_end_matches(']').trim() == "default";
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if !wanted {
            continue;
        }
        let v = v.trim().to_string();
        match k.trim().to_ascii_lowercase().as_str() {
            "aws_access_key_id" => key = Some(v),
            "aws_secret_access_key" => secret = Some(v),
            "aws_session_token" => token = Some(v),
            _ => {}
        }
    }
    Some(Credentials {
        key: key?,
        secret: secret?,
        token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_credentials_stay_out() {
        let u =
            StoreUrl::parse("s3://b/some/pre/?endpoint=http://127.0.0.1:8333&region=r1").unwrap();
        assert_eq!(
            u,
            StoreUrl::S3 {
                bucket: "b".into(),
                prefix: "some/pre".into(),
                endpoint: Some("http://127.0.0.1:8333".into()),
                region: "r1".into()
            }
        );
        assert_eq!(StoreUrl::parse(&u.canonical()).unwrap(), u);
        assert_eq!(
            StoreUrl::parse("file:///x/y").unwrap(),
            StoreUrl::Local("/x/y".into())
        );
        assert_eq!(StoreUrl::parse("/x/y").unwrap().canonical(), "file:///x/y");
        for bad in [
            "s3://key:secret@b/p",
            "s3://b?secret_access_key=x",
            "s3://b?endpoint=127.0.0.1",
            "s3://b?colour=blue",
            "s3://",
            "gs://b",
            "",
        ] {
            let e = StoreUrl::parse(bad).unwrap_err();
            assert_eq!(e.errno, Errno::EINVAL, "{bad}");
        }
        let c = parse_credentials("[other]\naws_access_key_id=no\n[default]\naws_access_key_id = k\naws_secret_access_key = s\n").unwrap();
        assert_eq!(
            (c.key.as_str(), c.secret.as_str(), c.token),
            ("k", "s", None)
        );
        assert!(parse_credentials("aws_access_key_id=k\n").is_none());
        // An S3 client is made without asking the server anything.
        assert!(u.open(false).is_ok());
    }
}
