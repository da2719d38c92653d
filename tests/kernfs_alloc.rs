//! The `rcu` variant answers repeated revalidations (and clean getattrs)
//! without allocating. A counting global allocator counts, per thread, the
//! allocations made while a thread-local flag is set, so test threads running
//! beside it do not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use dcache::fs::kernfs::{KernFs, Variant, ROOT_INO};
use dcache::fs::{FileSystem, Validity};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    // try_with: the thread-locals may already be gone while a thread exits.
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counting touches only const-initialised thread-locals, which do not
// allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `layout` is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through `alloc` above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: `ptr`/`layout` came from this allocator, which is `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let before = ALLOCS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    (ALLOCS.with(Cell::get) - before, r)
}

#[test]
fn the_counter_sees_allocations() {
    let (n, v) = allocations(|| vec![1u8; 100]);
    assert!(n >= 1, "the counting allocator must notice a Vec");
    drop(v);
}

#[test]
fn rcu_revalidate_of_a_missing_name_allocates_nothing() {
    let fs = KernFs::with_variant(Variant::Rcu);
    let sys = fs.create_dir(ROOT_INO, "sys", 0o755).unwrap();
    let class = fs.create_dir(sys, "class", 0o755).unwrap();
    let file = fs
        .create_file(class, "uevent", 0o644, Box::new(|| b"x\n".to_vec()), None)
        .unwrap();
    let cookie = fs.dir_cookie(class);
    assert_eq!(fs.lookup(class, b"missing").unwrap(), None);
    fs.getattr(file).unwrap();

    let (n, answers) = allocations(|| {
        let mut all_valid = true;
        for _ in 0..10_000 {
            let c = fs.dir_cookie(class);
            all_valid &= c == cookie;
            all_valid &= fs.revalidate(class, b"missing", None, c, true) == Validity::Valid;
            all_valid &= fs.revalidate(class, b"uevent", Some(file), c, true) == Validity::Valid;
            all_valid &= fs.revalidate(sys, b"class", Some(class), fs.dir_cookie(sys), true)
                == Validity::Valid;
            all_valid &= fs.getattr(file).is_ok();
            all_valid &= fs.getattr_cached(class).is_some() || fs.getattr(class).is_ok();
        }
        all_valid
    });
    assert!(answers, "every answer Valid");
    assert_eq!(n, 0, "allocations in 10000 lockless revalidations");

    // The stale answer is allocation-free too.
    fs.create_dir(class, "new", 0o755).unwrap();
    let (n, v) = allocations(|| fs.revalidate(class, b"missing", None, cookie, true));
    assert_eq!((n, v), (0, Validity::Invalid));
}

#[test]
fn old_variants_do_not_answer_in_rcu_mode() {
    for v in [Variant::Mutex, Variant::RwLock] {
        let fs = KernFs::with_variant(v);
        let cookie = fs.dir_cookie(ROOT_INO);
        let (n, a) = allocations(|| fs.revalidate(ROOT_INO, b"missing", None, cookie, true));
        assert_eq!((n, a), (0, Validity::NeedBlocking), "{v}");
    }
}
