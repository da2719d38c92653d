//! `dcache bench --target etcd --etcd URL` against a cluster the user
//! runs: each case formats a scratch volume and deletes every key it
//! wrote when it ends.

use dcache_bench::etcd::{etcd_binary, EtcdServer};
use dcache_bench::{Options, Request};

fn keys_under(url: &str, prefix: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([url], None).await.unwrap();
        let o = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        c.get(prefix, Some(o)).await.unwrap().count()
    })
}

#[test]
fn etcd_cases_leave_nothing_behind() {
    if !etcd_binary() {
        if std::env::var_os("CI").is_some() {
            panic!("the etcd binary is missing (apt-get install etcd-server)");
        }
        println!("SKIPPED etcd_cases_leave_nothing_behind: no etcd binary");
        return;
    }
    // Stands for the user's cluster.
    let theirs = EtcdServer::start_or_use(None).unwrap();
    let url = theirs.url().to_string();
    for workload in ["stat-same", "create", "mdtest", "data"] {
        let req = Request {
            workload: Some(workload.into()),
            targets: Some("etcd".into()),
            threads: Some("1".into()),
            seconds: Some(1),
            warmup: Some(0.0),
            // data: a small file in a local directory store.
            variants: (workload == "data").then(|| "local".into()),
            options: Options {
                etcd: Some(url.clone()),
                mib: 8,
                ..Options::default()
            },
            ..Request::default()
        };
        let runs = dcache_bench::run(&req).unwrap_or_else(|e| panic!("{workload}: {e:?}"));
        assert!(
            !runs.is_empty() && runs.iter().all(|r| r.ops_per_sec > 0.0),
            "{workload}: a case measured nothing"
        );
        assert_eq!(
            keys_under(&url, "/dcache-bench-"),
            0,
            "{workload} left keys behind"
        );
    }
    // The cases did write there (a volume each, deleted).
    let probe = EtcdServer::start_or_use(Some(&url)).unwrap();
    let spec = probe.fresh_volume().unwrap();
    assert!(keys_under(&url, "/dcache-bench-") > 0);
    drop(probe);
    assert_eq!(keys_under(&url, "/dcache-bench-"), 0, "{spec}");
}
