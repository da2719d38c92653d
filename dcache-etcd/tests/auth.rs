//! A client of an etcd with authentication on, the user and password from
//! its environment (`DCACHE_ETCD_USER`, `DCACHE_ETCD_PASSWORD`): it works,
//! and keeps working when etcd forgets every token it handed out (here:
//! authentication switched off and on again; the same happens to a client
//! cut off for longer than `--auth-token-ttl`): the client's next
//! requests are refused for their token, authenticate again and go
//! through, and its watch stays current. Without the refresh the client
//! would answer EACCES from then on.
//!
//! The only test in this binary: it sets the environment variables, which
//! no other thread reads meanwhile.

mod common;

use std::time::Duration;

use common::{client, etcd_available, eventually, Cluster};
use dcache::{At, Errno};
use dcache_etcd::Options;

const PASSWORD: &str = "pw-for-the-test-2b9c";

#[test]
fn an_authenticated_client_survives_etcd_forgetting_its_token() {
    if !etcd_available("an_authenticated_client_survives_etcd_forgetting_its_token") {
        return;
    }
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    common::rt().block_on(async {
        let mut c = etcd_client::Client::connect([ep.as_str()], None)
            .await
            .unwrap();
        let _ = c.role_add("root").await;
        c.user_add("root", PASSWORD, None).await.unwrap();
        c.user_grant_role("root", "root").await.unwrap();
        c.auth_enable().await.unwrap();
    });
    std::env::set_var(dcache_etcd::ENV_USER, "root");
    std::env::set_var(dcache_etcd::ENV_PASSWORD, PASSWORD);

    let spec = etcd.volume("/auth");
    let opts = Options {
        staleness: Duration::from_millis(300),
        ..Options::default()
    };
    let (fs, v) = client(&spec, opts);
    v.as_root().create(At::Root, "/before", 0o644).unwrap();

    common::rt().block_on(async {
        let o = etcd_client::ConnectOptions::new().with_user("root", PASSWORD);
        let mut c = etcd_client::Client::connect([ep.as_str()], Some(o))
            .await
            .unwrap();
        c.auth_disable().await.unwrap();
        // Off now: a client without a token turns it back on.
        let mut c = etcd_client::Client::connect([ep.as_str()], None)
            .await
            .unwrap();
        c.auth_enable().await.unwrap();
    });
    let took = eventually(Duration::from_secs(20), || {
        v.as_root().create(At::Root, "/after", 0o644).is_ok()
    })
    .expect("a create goes through once the token is forgotten");
    println!("first create after the tokens were forgotten: {took:.2?}");
    assert!(v.as_root().stat(At::Root, "/before").is_ok());
    assert_eq!(v.as_root().stat(At::Root, "/none"), Err(Errno::ENOENT));
    eventually(Duration::from_secs(10), || fs.is_current()).expect("the watch is current again");
}
