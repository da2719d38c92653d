//! The `rcu` variant answers repeated revalidations (and clean getattrs)
//! without allocating. A counting global allocator counts, per thread, the
//! allocations made while a thread-local flag is set, so test threads running
//! beside it do not disturb the count.

use dcache::fs::kernfs::{KernFs, Variant, ROOT_INO};
use dcache::fs::{FileSystem, Validity};

mod counting_alloc;
use counting_alloc::allocations;

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
