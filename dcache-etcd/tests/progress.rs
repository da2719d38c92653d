//! etcd bug #15220, measured on the installed etcd: a requested progress
//! notification that overtakes events up to its revision. The client
//! trusts progress notifications only from versions that carry the fix
//! (`dcache_etcd::progress::progress_ordered`); this test checks that the
//! installed server either orders them or is one the client distrusts.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{etcd_available, Cluster};
use dcache_etcd::progress::progress_ordered;
use etcd_client::{Client, WatchOptions};

/// What a watch stream delivered, in order: events' revisions and
/// progress notifications' revisions. Returns the number of events that
/// arrived after a progress notification at or past their revision.
fn overtakes(log: &[(bool, i64)]) -> usize {
    let mut progress = 0;
    let mut n = 0;
    for &(is_progress, rev) in log {
        if is_progress {
            progress = progress.max(rev);
        } else if rev <= progress {
            n += 1;
        }
    }
    n
}

async fn writers(ep: String, stop: Arc<AtomicBool>, n: usize) {
    let mut tasks = Vec::new();
    for w in 0..n {
        let (ep, stop) = (ep.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect([ep], None).await.unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A value of some size keeps the server's send busy.
                let _ = c
                    .put(format!("/p/w{w}/{}", i % 64), vec![b'x'; 2048], None)
                    .await;
                i += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Watch `/p/` from `start` (0: now), asking for progress every `every`
/// for `secs`, logging what arrives.
async fn watch_log(ep: &str, start: i64, every: Duration, secs: f64) -> Vec<(bool, i64)> {
    let mut c = Client::connect([ep], None).await.unwrap();
    let mut opts = WatchOptions::new().with_prefix();
    if start > 0 {
        opts = opts.with_start_revision(start);
    }
    let (mut tx, mut rx) = c.watch("/p/", Some(opts)).await.unwrap().split();
    let mut log = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs_f64(secs);
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if tokio::time::Instant::now() > until {
                    break;
                }
                tx.request_progress().await.unwrap();
            }
            m = rx.message() => {
                let Ok(Some(r)) = m else { break };
                if r.events().is_empty() {
                    if !r.created() {
                        log.push((true, r.header().unwrap().revision()));
                    }
                } else {
                    for e in r.events() {
                        log.push((false, e.kv().unwrap().mod_revision()));
                    }
                }
            }
        }
    }
    log
}

#[test]
fn progress_notifications_and_pending_events() {
    if !etcd_available("progress_notifications_and_pending_events") {
        return;
    }
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let version = rt.block_on(async {
        let mut c = Client::connect([ep.as_str()], None).await.unwrap();
        c.status().await.unwrap().version().to_string()
    });

    // 1. A synced watch, writers committing as fast as they can, a
    //    progress request every millisecond.
    let stop = Arc::new(AtomicBool::new(false));
    let w = rt.spawn(writers(ep.clone(), stop.clone(), 4));
    std::thread::sleep(Duration::from_millis(300));
    let synced = rt.block_on(watch_log(&ep, 0, Duration::from_millis(1), 4.0));
    // 2. Watches that start 1000s of revisions back (they begin unsynced
    //    on the server and catch up), asked for progress at once, while
    //    the writers go on.
    let mut behind = Vec::new();
    for _ in 0..5 {
        behind.extend(rt.block_on(watch_log(&ep, 1, Duration::from_millis(2), 0.6)));
    }
    stop.store(true, Ordering::Relaxed);
    rt.block_on(w).unwrap();

    let count = |l: &[(bool, i64)]| {
        let p = l.iter().filter(|e| e.0).count();
        (l.len() - p, p, overtakes(l))
    };
    let (se, sp, so) = count(&synced);
    let (be, bp, bo) = count(&behind);
    let shows = so + bo > 0;
    println!(
        "etcd {version}: synced watch: {se} events, {sp} progress notifications, {so} events \
         after a progress notification at or past their revision; watches from revision 1: \
         {be} events, {bp} notifications, {bo} such events. #15220 {}; the client {} \
         progress notifications from this version",
        if shows { "SHOWS" } else { "did not show" },
        if progress_ordered(&version) {
            "trusts"
        } else {
            "does not trust"
        },
    );
    assert!(se > 100 && sp > 100, "the synced run did too little");
    // The sound rule: a version trusted must not have shown the bug.
    if shows {
        assert!(
            !progress_ordered(&version),
            "etcd {version} is trusted but sent progress ahead of events"
        );
    }
    // And the client follows the rule.
    let spec = etcd.volume("/client");
    let fs = dcache_etcd::EtcdFs::connect(&spec).unwrap();
    assert_eq!(fs.trusts_progress(), progress_ordered(&version));
}

#[test]
fn overtakes_are_counted() {
    assert_eq!(
        overtakes(&[(false, 1), (true, 3), (false, 2), (false, 4)]),
        1
    );
    assert_eq!(
        overtakes(&[(false, 1), (false, 2), (true, 2), (false, 3)]),
        0
    );
}
