//! loom models of `Slab`: threads allocating and freeing at once never get
//! the same slot, never see another's object, and every slot comes back.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p dcache --lib loom_slab`.

use crate::slab::Slab;
use crate::sync::{thread, Arc};

/// `loom::model` with a default preemption bound of 3.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Two words, so a slot handed to two owners shows as a torn pair.
struct Obj(u64, u64);

fn churn(s: &Slab<Obj>, id: u64) {
    let a = s.alloc(Obj(id, id));
    let b = s.alloc(Obj(id + 100, id + 100));
    assert_ne!(a, b);
    // SAFETY: both are ours and live.
    unsafe {
        assert_eq!((a.as_ref().0, a.as_ref().1), (id, id));
        s.free(a);
        assert_eq!((b.as_ref().0, b.as_ref().1), (id + 100, id + 100));
    }
    // The slot just freed (ours, or the other thread's) comes back.
    let c = s.alloc(Obj(id + 200, id + 200));
    // SAFETY: as above; each freed once.
    unsafe {
        assert_eq!((c.as_ref().0, c.as_ref().1), (id + 200, id + 200));
        s.free(b);
        s.free(c);
    }
}

#[test]
fn concurrent_alloc_and_free_keep_slots_private() {
    model(|| {
        let s = Arc::new(Slab::<Obj>::new());
        let s2 = s.clone();
        let t = thread::spawn(move || churn(&s2, 1));
        churn(&s, 2);
        t.join().unwrap();
        assert_eq!(s.live(), 0);
    });
}

#[test]
fn a_slot_freed_on_one_thread_is_reused_on_another() {
    model(|| {
        let s = Arc::new(Slab::<Obj>::new());
        let p = s.alloc(Obj(1, 1));
        let addr = p.as_ptr() as usize;
        let s2 = s.clone();
        // SAFETY: moved to the freeing thread, which owns it from then on.
        let p = SendPtr(p);
        let t = thread::spawn(move || {
            let p = p;
            // SAFETY: allocated above, freed once, not used after.
            unsafe { s2.free(p.0) };
        });
        t.join().unwrap();
        let q = s.alloc(Obj(2, 2));
        assert_eq!(q.as_ptr() as usize, addr);
        // SAFETY: live, freed once.
        unsafe {
            assert_eq!(q.as_ref().1, 2);
            s.free(q);
        }
        assert_eq!(s.live(), 0);
    });
}

struct SendPtr(std::ptr::NonNull<Obj>);
// SAFETY: the pointer's object is handed over whole to the receiving thread.
unsafe impl Send for SendPtr {}
