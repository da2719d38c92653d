//! loom model of `SeqCount::write_lock`, the seqlock an inode's attribute
//! writers share (`Inode::set_attr`): writers exclude each other through the
//! counter alone, and a reader whose section validates never sees a torn
//! pair of fields.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p dcache --lib loom_seqcount`.

use crate::seqcount::SeqCount;
use crate::sync::{thread, Arc, AtomicU64, Ordering};

struct Pair {
    seq: SeqCount,
    a: AtomicU64,
    b: AtomicU64,
}

/// One writer's update: read both fields and store them plus one, as a
/// read-modify-write that only mutual exclusion keeps from losing updates.
fn bump(p: &Pair) {
    p.seq.write_lock();
    let a = p.a.load(Ordering::Relaxed);
    let b = p.b.load(Ordering::Relaxed);
    p.a.store(a + 1, Ordering::Relaxed);
    p.b.store(b + 1, Ordering::Relaxed);
    p.seq.write_end();
}

#[test]
fn writers_exclude_each_other_and_readers_see_no_torn_pair() {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(|| {
        let p = Arc::new(Pair {
            seq: SeqCount::new(),
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
        });
        let p1 = p.clone();
        let w = thread::spawn(move || bump(&p1));
        let p2 = p.clone();
        let r = thread::spawn(move || {
            let s = p2.seq.raw_begin();
            let a = p2.a.load(Ordering::Relaxed);
            let b = p2.b.load(Ordering::Relaxed);
            if !p2.seq.read_retry(s) {
                assert_eq!(a, b, "a validated read saw a torn pair");
            }
        });
        bump(&p);
        w.join().unwrap();
        r.join().unwrap();
        // Both updates landed: neither writer overwrote the other's.
        assert_eq!(p.a.load(Ordering::Relaxed), 2);
        assert_eq!(p.b.load(Ordering::Relaxed), 2);
        assert_eq!(p.seq.peek(), 4);
    });
}
