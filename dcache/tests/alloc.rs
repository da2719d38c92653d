//! A counting global allocator (tests/counting_alloc) proves the lookup
//! fast paths allocate nothing: a repeated miss (negative dentry), a
//! repeated hit, and a stat through a cached symlink.

use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::{At, Errno, Vfs};

mod counting_alloc;

/// Allocations made by `f` on this thread.
fn allocations(f: impl FnOnce()) -> usize {
    counting_alloc::allocations(f).0
}

#[test]
fn repeated_lookups_allocate_nothing() {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("a/b/c", 0o755).unwrap();
    fs.write_file("a/b/c/file", b"x").unwrap();
    fs.make_symlink("a/link", "b/c/file").unwrap();
    let vfs = Vfs::new(fs).unwrap();
    // Warm: the first miss allocates the negative dentry; the first stat
    // registers this thread with the reclamation crate.
    assert_eq!(
        vfs.as_root().stat(At::Root, "a/b/c/missing"),
        Err(Errno::ENOENT)
    );
    vfs.as_root().stat(At::Root, "a/b/c/file").unwrap();
    vfs.as_root().stat(At::Root, "a/link").unwrap();
    vfs.as_root().stat(At::Root, "a/link").unwrap();

    let n = allocations(|| {
        for _ in 0..1000 {
            assert_eq!(
                vfs.as_root().stat(At::Root, "a/b/c/missing"),
                Err(Errno::ENOENT)
            );
        }
    });
    assert_eq!(n, 0, "a repeated miss must not allocate");
    let n = allocations(|| {
        for _ in 0..1000 {
            vfs.as_root().stat(At::Root, "a/b/c/file").unwrap();
            // The benchmark's lockref stat (`experiments` feature).
            #[cfg(feature = "experiments")]
            vfs.as_root()
                .stat_with(At::Root, b"a/b/c/file", true, dcache::StatMode::LockRef)
                .unwrap();
        }
    });
    assert_eq!(n, 0, "a repeated hit must not allocate");
    let n = allocations(|| {
        for _ in 0..1000 {
            vfs.as_root().stat(At::Root, "a/link").unwrap();
        }
    });
    assert_eq!(n, 0, "following a cached symlink must not allocate");
    // The counter works: fresh misses do allocate. (Dentries come from a
    // slab whose chunks hold several, so one miss may not need a new chunk;
    // a hundred do.)
    let n = allocations(|| {
        for i in 0..100 {
            let _ = vfs.as_root().stat(At::Root, format!("a/b/c/other{i}"));
        }
    });
    assert!(n > 0);
}
