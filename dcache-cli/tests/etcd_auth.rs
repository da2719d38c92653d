//! Volumes on an etcd that wants its clients to identify themselves. With
//! authentication on (a `root` user with a password, as `etcdctl user add
//! root && etcdctl auth enable` sets up):
//! `dcache format` and `dcache mount` take the user from their
//! environment (`DCACHE_ETCD_USER`, the password from
//! `DCACHE_ETCD_PASSWORD_FILE` or `DCACHE_ETCD_PASSWORD`). Without them
//! both are refused with a message that says what to set; with a wrong
//! password, refused as such; with the right one, two mounts share the
//! volume, and the password is written nowhere in etcd. (A client whose
//! token etcd forgot authenticates again: `dcache-etcd/tests/auth.rs`.)
//!
//! Over TLS with client certificates (`a_tls_etcd_with_client_certificates`):
//! see that test.
//!
//! Needs /dev/fuse, the right to mount and the `etcd` binary (one SKIPPED
//! line otherwise; with `CI` set a missing etcd fails), and `openssl` for
//! the TLS test.

mod fuse_common;

use std::time::Duration;

use dcache_bench::etcd::EtcdServer;
use fuse_common::{dcache_env, etcd_or_skip, fuse_or_skip, wait_for, Daemon};

const PASSWORD: &str = "pw-for-the-test-7f3a";

/// Turn authentication on: a `root` user (etcd requires one first) with
/// the `root` role.
fn enable_auth(url: &str) {
    let rt = tokio_rt();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([url], None).await.unwrap();
        let _ = c.role_add("root").await;
        c.user_add("root", PASSWORD, None).await.unwrap();
        c.user_grant_role("root", "root").await.unwrap();
        c.auth_enable().await.unwrap();
    });
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every value under `prefix`, read as `root`.
fn values_under(url: &str, prefix: &str) -> Vec<Vec<u8>> {
    tokio_rt().block_on(async {
        let opts = etcd_client::ConnectOptions::new().with_user("root", PASSWORD);
        let mut c = etcd_client::Client::connect([url], Some(opts))
            .await
            .unwrap();
        let r = c
            .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
            .await
            .unwrap();
        r.kvs().iter().map(|kv| kv.value().to_vec()).collect()
    })
}

#[test]
fn an_etcd_with_authentication_takes_the_user_from_the_environment() {
    let t = "an_etcd_with_authentication_takes_the_user_from_the_environment";
    if !fuse_or_skip(t) || !etcd_or_skip(t) {
        return;
    }
    let server = EtcdServer::start_or_use(None).expect("start etcd");
    enable_auth(server.url());
    let spec = server.fresh_spec();
    let backend = format!("etcd:{spec}");

    // No credentials: refused, saying what to set.
    let (rc, out) = dcache_env(&[], &["format", &backend]);
    print!("without credentials: {out}");
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("user name is empty") && out.contains("DCACHE_ETCD_USER"),
        "{out}"
    );
    // A wrong password: refused as such.
    let wrong = [
        ("DCACHE_ETCD_USER", "root"),
        ("DCACHE_ETCD_PASSWORD", "nope"),
    ];
    let (rc, out) = dcache_env(&wrong, &["format", &backend]);
    print!("a wrong password: {out}");
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("authentication failed"), "{out}");
    // The user without a password.
    let (rc, out) = dcache_env(&[("DCACHE_ETCD_USER", "root")], &["format", &backend]);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("DCACHE_ETCD_PASSWORD"), "{out}");

    // The password in a file: formatted, then mounted twice.
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let pw = pw.to_str().unwrap();
    let env = [
        ("DCACHE_ETCD_USER", "root"),
        ("DCACHE_ETCD_PASSWORD_FILE", pw),
    ];
    let (rc, out) = dcache_env(&env, &["format", &backend]);
    assert_eq!(rc, 0, "{out}");
    let a = Daemon::start_env(&backend, &[], &env);
    let b = Daemon::start_env(&backend, &[], &env);
    std::fs::write(a.mnt.join("f"), b"through an authenticated client").unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || {
            std::fs::read(b.mnt.join("f")).is_ok_and(|d| d == b"through an authenticated client")
        }),
        "the other mount reads the file"
    );
    // A mount without the credentials fails at once, with the hint.
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (rc, out) = dcache_env(
        &[],
        &["mount", "--backend", &backend, "-f", mnt.to_str().unwrap()],
    );
    print!("a mount without credentials: {out}");
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("DCACHE_ETCD_USER"), "{out}");

    drop(b);
    drop(a);
    let prefix = spec.rsplit_once('/').map(|(_, p)| format!("/{p}")).unwrap();
    let values = values_under(server.url(), &prefix);
    assert!(!values.is_empty(), "nothing under {prefix}");
    assert!(
        !values
            .iter()
            .any(|v| v.windows(PASSWORD.len()).any(|w| w == PASSWORD.as_bytes())),
        "the password is in etcd"
    );
}

/// `openssl` with `args` in `dir`; panics on failure.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate authority, a server certificate for 127.0.0.1 and a
/// client certificate, all signed by it (P-256 keys), in `dir`.
fn make_certificates(dir: &std::path::Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=dcache test CA",
        ],
    ]
    .concat();
    openssl(dir, &ca);
    for (name, usage, san) in [
        ("server", "serverAuth", "subjectAltName=IP:127.0.0.1\n"),
        ("client", "clientAuth", ""),
    ] {
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        let subject = format!("/CN=dcache test {name}");
        std::fs::write(dir.join(&ext), format!("{san}extendedKeyUsage={usage}\n")).unwrap();
        let req = [
            &["req"][..],
            &ec,
            &["-keyout", &key, "-out", &csr, "-subj", &subject],
        ]
        .concat();
        openssl(dir, &req);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }
}

/// An etcd started with TLS on its client port and `--client-cert-auth`;
/// killed when dropped.
struct TlsEtcd {
    child: std::process::Child,
    url: String,
}

impl TlsEtcd {
    fn start(dir: &std::path::Path) -> TlsEtcd {
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (cp, pp) = (port(), port());
        let url = format!("https://127.0.0.1:{cp}");
        let peer = format!("http://127.0.0.1:{pp}");
        let pem = |f: &str| dir.join(f).to_str().unwrap().to_string();
        let child = std::process::Command::new("etcd")
            .args(["--name", "tls", "--data-dir"])
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("tls={peer}")])
            .args([
                "--cert-file",
                &pem("server.pem"),
                "--key-file",
                &pem("server.key"),
            ])
            .args(["--trusted-ca-file", &pem("ca.pem"), "--client-cert-auth"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("etcd.log")).unwrap())
            .spawn()
            .expect("start etcd");
        let etcd = TlsEtcd { child, url };
        assert!(
            wait_for(Duration::from_secs(20), || {
                std::net::TcpStream::connect(("127.0.0.1", cp)).is_ok()
            }),
            "etcd did not listen"
        );
        etcd
    }
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An `https://` etcd that checks client certificates: `dcache format`
/// and `dcache mount` trust the authority of `DCACHE_ETCD_CACERT` and
/// present `DCACHE_ETCD_CERT` / `DCACHE_ETCD_KEY`; without the authority
/// they say what to set, without the client certificate etcd refuses
/// them; with both, two mounts share the volume.
#[test]
fn a_tls_etcd_with_client_certificates() {
    let t = "a_tls_etcd_with_client_certificates";
    if !fuse_or_skip(t) || !etcd_or_skip(t) {
        return;
    }
    if std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_err()
    {
        dcache_fuse::testing::skipped(format_args!(
            "{t}: no openssl binary to make certificates with"
        ));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certificates(dir.path());
    let etcd = TlsEtcd::start(dir.path());
    let backend = format!("etcd:{}/tls", etcd.url);
    let pem = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let (ca, cert, key) = (pem("ca.pem"), pem("client.pem"), pem("client.key"));

    let (rc, out) = dcache_env(&[], &["format", &backend]);
    print!("no authority: {out}");
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("DCACHE_ETCD_CACERT"), "{out}");
    let (rc, out) = dcache_env(&[("DCACHE_ETCD_CACERT", &ca)], &["format", &backend]);
    print!("no client certificate: {out}");
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("DCACHE_ETCD_CERT"), "{out}");

    let env = [
        ("DCACHE_ETCD_CACERT", ca.as_str()),
        ("DCACHE_ETCD_CERT", cert.as_str()),
        ("DCACHE_ETCD_KEY", key.as_str()),
    ];
    let (rc, out) = dcache_env(&env, &["format", &backend]);
    assert_eq!(rc, 0, "{out}");
    let a = Daemon::start_env(&backend, &[], &env);
    let b = Daemon::start_env(&backend, &[], &env);
    std::fs::write(a.mnt.join("f"), b"over TLS").unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || {
            std::fs::read(b.mnt.join("f")).is_ok_and(|d| d == b"over TLS")
        }),
        "the other mount reads the file"
    );
    drop(b);
    drop(a);
    drop(etcd);
}
