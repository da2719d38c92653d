//! A 3-member etcd cluster loses its leader (and, separately, a follower)
//! in the middle of a create/rename workload: every acknowledged operation
//! is there afterwards, link counts balance, and the clients keep working.
//! Once more with the file data in an object store, each file written
//! before its rename: every acknowledged write reads back. And what a
//! client does when no member answers, or no quorum.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{client, etcd_available, eventually, object_volume, Cluster, Store, TestStore};
use dcache::{At, Errno, RenameFlags};
use dcache_etcd::Options;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ack {
    Done,
    /// EIO: the outcome is unknown (no quorum answered in time).
    Unknown,
    NotTried,
}

fn opts() -> Options {
    Options {
        staleness: Duration::from_millis(500),
        timeout: Duration::from_secs(4),
        ..Options::default()
    }
}

/// What file `i` of the workload holds when it is written.
fn payload(i: usize) -> Vec<u8> {
    format!("file {i} written through the object store\n")
        .repeat(i % 7 + 1)
        .into_bytes()
}

/// The whole of `path` as `v` reads it.
fn contents(v: &dcache::Vfs, path: &str) -> Vec<u8> {
    let f = v.as_root().open(At::Root, path, libc::O_RDONLY, 0).unwrap();
    let mut out = vec![0u8; 1 << 16];
    let n = f.read(0, &mut out).unwrap();
    out.truncate(n);
    f.close().unwrap();
    out
}

/// `store`: the volume keeps its data there, and each created file is
/// written (open, write, close) before its rename; every acknowledged
/// write must read back after the kill.
fn survive(kill_leader: bool, store: Option<&TestStore>) {
    let what = if kill_leader { "leader" } else { "follower" };
    let mut etcd = Cluster::start(3);
    let spec = match store {
        Some(st) => object_volume(&etcd, "/faults", st),
        None => etcd.volume("/faults"),
    };
    let (fa, a) = client(&spec, opts());
    let (_fb, b) = client(&spec, opts());
    a.as_root().mkdir(At::Root, "/w", 0o755).unwrap();

    const N: usize = 300;
    let killed = AtomicBool::new(false);
    let after_kill = AtomicUsize::new(0);
    let started = AtomicUsize::new(0);
    let mut acks = vec![(Ack::NotTried, Ack::NotTried); N];
    let mut written = vec![false; N];
    let mut victim = None;
    let mut eio = 0;
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            let mut acks = vec![(Ack::NotTried, Ack::NotTried); N];
            let mut written = vec![false; N];
            let mut eio = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            for (i, ack) in acks.iter_mut().enumerate() {
                if Instant::now() > deadline {
                    break;
                }
                started.store(i, Ordering::Relaxed);
                let f = format!("/w/f{i}");
                let g = format!("/w/g{i}");
                let k = killed.load(Ordering::Relaxed);
                ack.0 = match a.as_root().create(At::Root, &f, 0o644) {
                    Ok(_) => Ack::Done,
                    Err(Errno::EIO) => {
                        eio += 1;
                        Ack::Unknown
                    }
                    Err(e) => panic!("create {f}: {e:?}"),
                };
                if ack.0 == Ack::Unknown {
                    continue;
                }
                if store.is_some() {
                    let w = a
                        .as_root()
                        .open(At::Root, &f, libc::O_WRONLY, 0)
                        .and_then(|h| {
                            h.write(0, &payload(i))?;
                            h.close()
                        });
                    match w {
                        Ok(()) => written[i] = true,
                        Err(Errno::EIO) => eio += 1,
                        Err(e) => panic!("write {f}: {e:?}"),
                    }
                }
                ack.1 = match a
                    .as_root()
                    .rename(At::Root, &f, At::Root, &g, RenameFlags::NONE)
                {
                    Ok(()) => Ack::Done,
                    Err(Errno::EIO) => {
                        eio += 1;
                        Ack::Unknown
                    }
                    Err(e) => panic!("rename {f}: {e:?}"),
                };
                if k && ack.1 == Ack::Done {
                    after_kill.fetch_add(1, Ordering::Relaxed);
                }
            }
            (acks, written, eio)
        });
        // Let the workload run, then kill a member mid-way.
        while started.load(Ordering::Relaxed) < N / 3 && !w.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let leader = etcd.leader().expect("a leader");
        let v = if kill_leader {
            leader
        } else {
            (leader + 1) % 3
        };
        etcd.kill(v);
        killed.store(true, Ordering::Relaxed);
        victim = Some(v);
        let t = Instant::now();
        let (r, wr, e) = w.join().unwrap();
        written = wr;
        println!(
            "workload after the kill: {:.2?}, {} requests retried",
            t.elapsed(),
            fa.stats().transient_errors.load(Ordering::Relaxed)
        );
        acks = r;
        eio = e;
    });
    let victim = victim.unwrap();
    let done = acks.iter().filter(|a| a.1 == Ack::Done).count();
    println!(
        "killed the {what} (member {victim}): {done}/{N} create+rename acknowledged, \
         {} after the kill, {eio} EIO",
        after_kill.load(Ordering::Relaxed)
    );
    assert!(
        after_kill.load(Ordering::Relaxed) >= 20,
        "the client kept working after the {what} died"
    );

    // A fresh client, cold cache, through the surviving members.
    let (_fc, c) = client(&spec, opts());
    let w = c.as_root().stat(At::Root, "/w").unwrap();
    assert_eq!(w.nlink, 2);
    let mut names = std::collections::HashSet::new();
    c.as_root()
        .readdir(At::Root, "/w", 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                names.insert(String::from_utf8(e.name).unwrap());
            }
            true
        })
        .unwrap();
    for (i, (cr, rn)) in acks.iter().enumerate() {
        let f = format!("f{i}");
        let g = format!("g{i}");
        let (hf, hg) = (names.contains(&f), names.contains(&g));
        match (cr, rn) {
            (Ack::Done, Ack::Done) => assert!(hg && !hf, "{i}: acknowledged rename lost"),
            (Ack::Done, Ack::Unknown) => assert!(hf ^ hg, "{i}: half a rename"),
            (Ack::Unknown, _) => assert!(!(hf && hg), "{i}: two names"),
            (Ack::NotTried, _) => assert!(!hf && !hg),
            (Ack::Done, Ack::NotTried) => unreachable!(),
        }
        for n in [&f, &g] {
            if names.contains(n) {
                let st = c.as_root().stat(At::Root, format!("/w/{n}")).unwrap();
                assert_eq!(st.nlink, 1, "{n}");
                if written[i] {
                    assert!(
                        contents(&c, &format!("/w/{n}")) == payload(i),
                        "{n}: an acknowledged write lost"
                    );
                }
            }
        }
    }
    // The other client, whose watch had to move to a surviving member,
    // converges on the same namespace.
    let last_g = (0..N).rev().find(|&i| acks[i].1 == Ack::Done).unwrap();
    eventually(Duration::from_secs(10), || {
        b.as_root().stat(At::Root, format!("/w/g{last_g}")).is_ok()
    })
    .expect("client B sees the last acknowledged rename");

    // The member comes back and catches up; clients still work.
    etcd.restart(victim);
    a.as_root().create(At::Root, "/after", 0o644).unwrap();
    eventually(Duration::from_secs(10), || {
        b.as_root().stat(At::Root, "/after").is_ok()
    })
    .expect("B sees a create after the restart");
}

#[test]
fn leader_killed_during_workload() {
    if !etcd_available("leader_killed_during_workload") {
        return;
    }
    survive(true, None);
}

/// The same on a volume whose file data is in an object store (a local
/// directory): each file is also written before its rename.
#[test]
fn leader_killed_during_workload_with_data_in_the_store() {
    let t = "leader_killed_during_workload_with_data_in_the_store";
    if !etcd_available(t) {
        return;
    }
    let Some(store) = TestStore::new(Store::Local, t) else {
        return;
    };
    survive(true, Some(&store));
}

#[test]
fn follower_killed_during_workload_with_data_in_the_store() {
    let t = "follower_killed_during_workload_with_data_in_the_store";
    if !etcd_available(t) {
        return;
    }
    let Some(store) = TestStore::new(Store::Local, t) else {
        return;
    };
    survive(false, Some(&store));
}

#[test]
fn follower_killed_during_workload() {
    if !etcd_available("follower_killed_during_workload") {
        return;
    }
    survive(false, None);
}

#[test]
fn a_cut_off_client_never_serves_answers_older_than_the_bound() {
    if !etcd_available("a_cut_off_client_never_serves_answers_older_than_the_bound") {
        return;
    }
    let etcd = Cluster::start(3);
    // A reaches members 0 and 2; B only member 1, which is then frozen.
    let spec_a = format!("{},{}/stale", etcd.endpoint(0), etcd.endpoint(2));
    common::format_volume(&spec_a);
    let spec_b = format!("{}/stale", etcd.endpoint(1));
    let bound = Duration::from_millis(300);
    let (_fa, a) = client(&spec_a, opts());
    let (fb, b) = client(
        &spec_b,
        Options {
            staleness: bound,
            timeout: Duration::from_secs(1),
            ..Options::default()
        },
    );
    a.as_root().create(At::Root, "/x", 0o644).unwrap();
    eventually(Duration::from_secs(5), || {
        b.as_root().stat(At::Root, "/x").is_ok()
    })
    .unwrap();
    assert_eq!(b.as_root().stat(At::Root, "/y"), Err(Errno::ENOENT));

    etcd.signal(1, "STOP");
    let frozen = Instant::now();
    // Within the bound B still answers from its cache, without a round
    // trip (its member could not answer one).
    let t = Instant::now();
    let cached = b.as_root().stat(At::Root, "/x");
    if frozen.elapsed() < bound {
        assert_eq!(cached.unwrap().perm, 0o644);
        assert!(t.elapsed() < Duration::from_millis(100));
    }
    // A changes the namespace through the majority.
    let set = dcache::SetAttr {
        perm: Some(0o600),
        ..Default::default()
    };
    a.as_root().setattr(At::Root, "/x", &set).unwrap();
    a.as_root().create(At::Root, "/y", 0o644).unwrap();
    std::thread::sleep(bound + Duration::from_millis(100));
    assert!(!fb.is_current());
    // Past the bound B must ask, cannot get an answer, and says EIO:
    // never the old mode, never ENOENT for /y.
    let t = Instant::now();
    assert_eq!(b.as_root().stat(At::Root, "/x"), Err(Errno::EIO));
    assert_eq!(b.as_root().stat(At::Root, "/y"), Err(Errno::EIO));
    println!(
        "cut off: EIO after {:.2?} (timeout 1 s per request)",
        t.elapsed() / 2
    );
    assert!(fb.stats().remote_revalidations.load(Ordering::Relaxed) > 0);

    etcd.signal(1, "CONT");
    let d = eventually(Duration::from_secs(10), || {
        b.as_root()
            .stat(At::Root, "/x")
            .is_ok_and(|s| s.perm == 0o600)
            && b.as_root().stat(At::Root, "/y").is_ok()
    })
    .expect("B catches up once its member is back");
    eventually(Duration::from_secs(5), || fb.is_current()).expect("watch current again");
    println!("caught up {d:.2?} after the member resumed");
}

#[test]
fn a_watch_behind_a_compaction_resynchronises() {
    if !etcd_available("a_watch_behind_a_compaction_resynchronises") {
        return;
    }
    let mut etcd = Cluster::start(3);
    let spec_a = format!("{},{}/compact", etcd.endpoint(0), etcd.endpoint(2));
    common::format_volume(&spec_a);
    let spec_b = format!("{}/compact", etcd.endpoint(1));
    let (_fa, a) = client(&spec_a, opts());
    let (fb, b) = client(&spec_b, opts());
    a.as_root().create(At::Root, "/x", 0o644).unwrap();
    a.as_root().mkdir(At::Root, "/d", 0o755).unwrap();
    eventually(Duration::from_secs(5), || {
        b.as_root().stat(At::Root, "/x").is_ok() && b.as_root().stat(At::Root, "/d").is_ok()
    })
    .unwrap();
    assert_eq!(b.as_root().stat(At::Root, "/d/new"), Err(Errno::ENOENT));

    // B's only member goes away; the namespace changes and the history
    // B's watch would resume from is compacted away.
    etcd.kill(1);
    let set = dcache::SetAttr {
        perm: Some(0o600),
        ..Default::default()
    };
    a.as_root().setattr(At::Root, "/x", &set).unwrap();
    a.as_root().create(At::Root, "/d/new", 0o644).unwrap();
    let ep = etcd.endpoint(0);
    common::rt().block_on(async {
        let mut c = etcd_client::Client::connect([ep], None).await.unwrap();
        let rev = c.get("/", None).await.unwrap().header().unwrap().revision();
        c.compact(
            rev,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .unwrap();
    });
    etcd.restart(1);
    let d = eventually(Duration::from_secs(20), || {
        b.as_root()
            .stat(At::Root, "/x")
            .is_ok_and(|s| s.perm == 0o600)
            && b.as_root().stat(At::Root, "/d/new").is_ok()
    })
    .expect("B sees the changes made while its member was down");
    eventually(Duration::from_secs(10), || fb.is_current()).expect("watch current again");
    println!(
        "caught up {d:.2?} after the restart; resyncs {}, watch restarts {}",
        fb.stats().resyncs.load(Ordering::Relaxed),
        fb.stats().watch_restarts.load(Ordering::Relaxed)
    );
    // The restarted member may serve B's new watch from its own history
    // before it applies the compaction it missed (then B resumes with no
    // gap and needs no resync; seen under load): what must hold is that
    // B's watch came back (a restart or a resync) and B is right.
    let (resyncs, restarts) = (
        fb.stats().resyncs.load(Ordering::Relaxed),
        fb.stats().watch_restarts.load(Ordering::Relaxed),
    );
    assert!(resyncs + restarts >= 1, "B's watch never came back");
}

/// A client whose spec lists a member that is down (here: a port nothing
/// listens on, listed first) connects and works without waiting on it:
/// connect takes the members that did not answer out of the balancer
/// before its first request (CI once saw a fresh client's connect spend
/// its whole deadline on a killed leader).
#[test]
fn a_spec_listing_a_dead_member_connects_and_works() {
    if !etcd_available("a_spec_listing_a_dead_member_connects_and_works") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/deadlisted");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let listed = format!("http://127.0.0.1:{port},{spec}");
    for round in 0..5 {
        let start = Instant::now();
        let (_fs, v) = client(&listed, opts());
        for i in 0..10 {
            v.as_root()
                .mkdir(At::Root, format!("/r{round}d{i}"), 0o755)
                .unwrap();
        }
        let took = start.elapsed();
        assert!(took < Duration::from_secs(3), "round {round}: {took:?}");
    }
}

/// Slow is not down. Every member frozen (SIGSTOP: each still accepts TCP
/// connections, as a member in a long fsync or on a starved host does):
/// operations wait for them, bounded by `timeout`, then EIO; a minority
/// that still answers (two of three members frozen, the third up without
/// a quorum) is waited for the same way. Every member gone (SIGKILL:
/// connections refused): operations fail with EIO once the probes found
/// none for `unreachable_after`, not after the whole `timeout`. All
/// recover when the members come back.
#[test]
fn a_frozen_cluster_is_waited_for_and_a_dead_one_fails_fast() {
    if !etcd_available("a_frozen_cluster_is_waited_for_and_a_dead_one_fails_fast") {
        return;
    }
    let mut etcd = Cluster::start(3);
    let spec = etcd.volume("/silent");
    let o = Options {
        staleness: Duration::from_millis(300),
        timeout: Duration::from_secs(3),
        unreachable_after: Some(Duration::from_millis(500)),
        ..Options::default()
    };
    let (_fs, v) = client(&spec, o);
    v.as_root().create(At::Root, "/here", 0o644).unwrap();
    let stat_eio = |name: &str| {
        let t = Instant::now();
        assert_eq!(v.as_root().stat(At::Root, name), Err(Errno::EIO), "{name}");
        t.elapsed()
    };

    // One member left answering, without a quorum: the timeout bounds it.
    etcd.signal(0, "STOP");
    etcd.signal(1, "STOP");
    std::thread::sleep(Duration::from_millis(1500));
    let quorumless = stat_eio("/q");
    // All three frozen: slow, not down; the timeout bounds it too.
    etcd.signal(2, "STOP");
    std::thread::sleep(Duration::from_millis(3000));
    let frozen = stat_eio("/f");
    for i in 0..3 {
        etcd.signal(i, "CONT");
    }
    eventually(Duration::from_secs(15), || {
        v.as_root().stat(At::Root, "/here").is_ok()
    })
    .expect("works again once the members resume");
    // All three gone: fast, once a probe round (every 250 ms; a refused
    // connection answers at once) found none and `unreachable_after`
    // (0.5 s) passed: well within 1.5 s of the kill.
    for i in 0..3 {
        etcd.kill(i);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let dead = stat_eio("/d");
    println!(
        "no quorum: EIO after {quorumless:.2?}; every member frozen: after {frozen:.2?}; \
         every member dead: after {dead:.2?}"
    );
    assert!(quorumless >= Duration::from_secs(2), "{quorumless:?}");
    assert!(
        frozen >= Duration::from_secs(2),
        "frozen is waited for: {frozen:?}"
    );
    assert!(dead < Duration::from_millis(500), "{dead:?}");
    for i in 0..3 {
        etcd.restart(i);
    }
    eventually(Duration::from_secs(20), || {
        v.as_root().stat(At::Root, "/here").is_ok()
    })
    .expect("works again once the members restart");
}

/// Eight threads of one client create names of their own (each in a
/// directory of its own, so their commits are in flight at once; a
/// client's creates in one directory take turns) while its only
/// member is frozen past the per-attempt limit and resumed, four times:
/// the commits whose answers were lost apply when it resumes, and each
/// is resolved by its own marker. A create that applied reports success
/// (or EIO: unknown), never EEXIST for the name it made itself, which a
/// marker shared by the client's concurrent commits gives: all but the
/// last of them read another commit's number there and retry.
#[test]
fn lost_answers_of_concurrent_commits_resolve_to_their_own_outcome() {
    const T: &str = "lost_answers_of_concurrent_commits_resolve_to_their_own_outcome";
    if !etcd_available(T) {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/lost");
    let opts = Options {
        staleness: Duration::from_millis(500),
        // 2 s an attempt (a quarter), and no failing fast: the answers
        // are waited for past the freeze.
        timeout: Duration::from_secs(8),
        unreachable_after: None,
        ..Options::default()
    };
    let (_f, v) = client(&spec, opts);
    for t in 0..8 {
        v.as_root()
            .mkdir(At::Root, format!("/d{t}"), 0o755)
            .unwrap();
    }
    let stop = AtomicBool::new(false);
    let (made, unknown) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let own_eexist = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..8 {
            let (v, stop, made, unknown, own_eexist) = (&v, &stop, &made, &unknown, &own_eexist);
            s.spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("/d{t}/{i}");
                    match v.as_root().create(At::Root, &name, 0o644) {
                        Ok(_) => made.fetch_add(1, Ordering::Relaxed),
                        Err(Errno::EIO) => unknown.fetch_add(1, Ordering::Relaxed),
                        Err(Errno::EEXIST) => {
                            own_eexist.lock().unwrap().push(name);
                            0
                        }
                        Err(e) => panic!("{name}: {e:?}"),
                    };
                    i += 1;
                }
            });
        }
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(300));
            etcd.signal(0, "STOP");
            std::thread::sleep(Duration::from_millis(2500));
            etcd.signal(0, "CONT");
        }
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
    });
    let own_eexist = own_eexist.into_inner().unwrap();
    println!(
        "{} created, {} unknown (EIO), {} EEXIST for a name the thread had made itself",
        made.load(Ordering::Relaxed),
        unknown.load(Ordering::Relaxed),
        own_eexist.len()
    );
    assert!(own_eexist.is_empty(), "{own_eexist:?}");
    let mut listed = 0;
    for t in 0..8 {
        v.as_root()
            .readdir(At::Root, format!("/d{t}"), 0, &mut |e| {
                listed += (e.name[0] != b'.') as usize;
                true
            })
            .unwrap();
    }
    let made = made.load(Ordering::Relaxed);
    assert!(listed >= made && listed <= made + unknown.load(Ordering::Relaxed));
}
