//! Sessions as etcd leases, and a watch kept current without writes.

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{client, etcd_available, eventually, Cluster};
use dcache::At;
use dcache_etcd::session::SessionRecord;
use dcache_etcd::Options;

/// Whether `key` exists, read from the cluster directly.
/// Whether `key` exists, or (ending in `/`) any key under it.
fn exists(ep: &str, key: &str) -> bool {
    let rt = common::rt();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([ep], None).await.unwrap();
        let opts = key
            .ends_with('/')
            .then(|| etcd_client::GetOptions::new().with_prefix());
        let r = c.get(key, opts).await.unwrap();
        !r.kvs().is_empty()
    })
}

#[test]
fn idle_clients_receive_no_key_events() {
    if !etcd_available("idle_clients_receive_no_key_events") {
        return;
    }
    const CLIENTS: usize = 8;
    const IDLE: Duration = Duration::from_secs(10);
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/idle");
    let fs: Vec<_> = (0..CLIENTS)
        .map(|_| client(&spec, Options::default()))
        .collect();
    eventually(Duration::from_secs(5), || {
        fs.iter().all(|(f, _)| f.is_current())
    })
    .expect("every client current after connect");
    // Settle: the last connects' session records reach every client's
    // watch. A client current after more than its staleness bound (1 s)
    // has been delivered everything written before that wait began.
    std::thread::sleep(Duration::from_secs(2));
    eventually(Duration::from_secs(5), || {
        fs.iter().all(|(f, _)| f.is_current())
    })
    .expect("every client current after settling");
    // An outside observer of the whole prefix, started once all are in.
    let rt = common::rt();
    let observed = rt.block_on(async {
        let mut c = etcd_client::Client::connect([etcd.endpoint(0)], None)
            .await
            .unwrap();
        let opts = etcd_client::WatchOptions::new().with_prefix();
        let mut s = c.watch("/idle/", Some(opts)).await.unwrap();
        let before: Vec<(u64, u64, u64)> = fs
            .iter()
            .map(|(f, _)| {
                let s = f.stats();
                (
                    s.key_events.load(Ordering::Relaxed),
                    s.fences.load(Ordering::Relaxed),
                    s.remote_revalidations.load(Ordering::Relaxed),
                )
            })
            .collect();
        let until = tokio::time::Instant::now() + IDLE;
        let mut n = 0;
        while let Ok(Ok(Some(r))) = tokio::time::timeout_at(until, s.message()).await {
            n += r.events().len();
        }
        (n, before)
    });
    let (seen_outside, before) = observed;
    let mut events = 0;
    let mut fences = 0;
    for ((f, v), (e0, f0, _)) in fs.iter().zip(&before) {
        let s = f.stats();
        events += s.key_events.load(Ordering::Relaxed) - e0;
        fences += s.fences.load(Ordering::Relaxed) - f0;
        // Still current at the end, with nothing written: a cached stat
        // asks etcd nothing.
        assert!(f.is_current(), "client {} not current", f.client_id());
        let r0 = s.remote_revalidations.load(Ordering::Relaxed);
        v.as_root().stat(At::Root, "/").unwrap();
        assert_eq!(s.remote_revalidations.load(Ordering::Relaxed), r0);
    }
    println!(
        "{CLIENTS} idle clients over {IDLE:?}: {events} key events delivered to them \
         ({:.1} per client; an outside watch of the prefix saw {seen_outside}); \
         {fences} fences ({:.1}/s per client), progress trusted: {}",
        events as f64 / CLIENTS as f64,
        fences as f64 / CLIENTS as f64 / IDLE.as_secs_f64(),
        fs[0].0.trusts_progress()
    );
    assert_eq!(events, 0, "idle clients were sent key events");
    assert_eq!(seen_outside, 0, "something wrote under the prefix");
    assert!(
        fences as usize >= CLIENTS * 20,
        "fences not taken: {fences}"
    );
}

/// Run by `a_killed_client_leaves_nothing_behind` in a child process:
/// connect, commit once, say so, wait to be killed.
#[test]
fn child_client_waiting_to_be_killed() {
    let Ok(spec) = std::env::var("DCACHE_ETCD_CHILD_SPEC") else {
        return; // not the child
    };
    let opts = Options {
        lease_ttl: Duration::from_secs(3),
        ..Options::default()
    };
    let (f, v) = client(&spec, opts);
    v.as_root().create(At::Root, "/child", 0o644).unwrap();
    println!("ready {}", f.client_id());
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_client_leaves_nothing_behind() {
    if !etcd_available("a_killed_client_leaves_nothing_behind") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/kill");
    let (_fa, a) = client(&spec, Options::default());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_client_waiting_to_be_killed",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env("DCACHE_ETCD_CHILD_SPEC", &spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let id = out
        .lines()
        .map_while(|l| l.ok())
        .find_map(|l| {
            l.find("ready ")
                .map(|i| l[i + 6..].split_whitespace().next().unwrap().to_string())
        })
        .expect("the child connects");
    let ep = etcd.endpoint(0);
    let (session, marker) = (format!("/kill/s/{id}"), format!("/kill/o/{id}/m/"));
    assert!(exists(&ep, &session) && exists(&ep, &marker));
    eventually(Duration::from_secs(5), || {
        a.as_root().stat(At::Root, "/child").is_ok()
    })
    .expect("the child's create seen");

    child.kill().unwrap(); // SIGKILL: no cleanup
    child.wait().unwrap();
    let killed = Instant::now();
    let gone = eventually(Duration::from_secs(10), || {
        !exists(&ep, &session) && !exists(&ep, &marker)
    })
    .expect("the killed client's keys expire");
    println!("a killed client's session and marker gone {gone:.2?} after SIGKILL (TTL 3 s)");
    assert!(gone <= Duration::from_secs(3 + 2), "{gone:?}");
    assert!(killed.elapsed() < Duration::from_secs(10));
    // What it did stays.
    assert!(a.as_root().stat(At::Root, "/child").is_ok());
}

#[test]
fn sessions_are_recorded_revoked_and_renewed() {
    if !etcd_available("sessions_are_recorded_revoked_and_renewed") {
        return;
    }
    let etcd = Cluster::start(1);
    let ep = etcd.endpoint(0);
    let spec = etcd.volume("/sess");
    let (fa, a) = client(&spec, Options::default());
    let session = format!("/sess/s/{}", fa.client_id());
    let marker = format!("/sess/o/{}/m/", fa.client_id());
    let rt = common::rt();
    let mut c = rt
        .block_on(etcd_client::Client::connect([ep.as_str()], None))
        .unwrap();
    let kv = rt.block_on(c.get(session.as_str(), None)).unwrap();
    let kv = kv.kvs().first().expect("session record").clone();
    assert_eq!(kv.lease(), fa.lease_id());
    let rec = SessionRecord::decode(kv.value()).unwrap();
    assert_eq!(rec.pid, std::process::id());
    assert_eq!(rec.version, env!("CARGO_PKG_VERSION"));
    assert!(fa.cluster_id() != 0);

    // The lease lost behind the client's back (as after a partition
    // longer than the TTL): its next change renews it and succeeds.
    let old = fa.lease_id();
    rt.block_on(c.lease_revoke(old)).unwrap();
    assert!(!exists(&ep, &session));
    a.as_root().mkdir(At::Root, "/after", 0o755).unwrap();
    eventually(Duration::from_secs(10), || {
        fa.lease_id() != old && exists(&ep, &session)
    })
    .expect("a new lease and session record");
    assert_eq!(fa.stats().lease_renewals.load(Ordering::Relaxed), 1);
    let prefix = Some(etcd_client::GetOptions::new().with_prefix());
    let m = rt.block_on(c.get(marker.as_str(), prefix)).unwrap();
    assert!(!m.kvs().is_empty());
    assert!(m.kvs().iter().all(|kv| kv.lease() == fa.lease_id()));

    // A clean drop revokes: nothing left at once.
    drop(a);
    drop(fa);
    assert!(!exists(&ep, &session) && !exists(&ep, &marker));
}
