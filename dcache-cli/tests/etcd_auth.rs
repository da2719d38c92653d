//! A volume on an etcd with authentication on (a `root` user with a
//! password, as `etcdctl user add root && etcdctl auth enable` sets up):
//! `dcache format` and `dcache mount` take the user from their
//! environment (`DCACHE_ETCD_USER`, the password from
//! `DCACHE_ETCD_PASSWORD_FILE` or `DCACHE_ETCD_PASSWORD`). Without them
//! both are refused with a message that says what to set; with a wrong
//! password, refused as such; with the right one, two mounts share the
//! volume, and the password is written nowhere in etcd. (A client whose
//! token etcd forgot authenticates again: `dcache-etcd/tests/auth.rs`.)
//!
//! Needs /dev/fuse, the right to mount and the `etcd` binary (one SKIPPED
//! line otherwise; with `CI` set a missing etcd fails).

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
