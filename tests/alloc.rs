//! A counting global allocator proves the lookup fast paths allocate
//! nothing: a repeated miss (negative dentry), a repeated hit, and a stat
//! through a cached symlink. Counts only this thread's allocations, and
//! only while armed, so the test harness's own threads do not interfere.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::{At, Errno, StatMode, Vfs};

struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only
// const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.with(|a| a.get()) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ARMED.with(|a| a.get()) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations(f: impl FnOnce()) -> usize {
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    COUNT.with(|c| c.get())
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
    assert_eq!(vfs.stat(At::Root, "a/b/c/missing"), Err(Errno::ENOENT));
    vfs.stat(At::Root, "a/b/c/file").unwrap();
    vfs.stat(At::Root, "a/link").unwrap();
    vfs.stat(At::Root, "a/link").unwrap();

    let n = allocations(|| {
        for _ in 0..1000 {
            assert_eq!(vfs.stat(At::Root, "a/b/c/missing"), Err(Errno::ENOENT));
        }
    });
    assert_eq!(n, 0, "a repeated miss must not allocate");
    let n = allocations(|| {
        for _ in 0..1000 {
            vfs.stat(At::Root, "a/b/c/file").unwrap();
            vfs.stat_with(At::Root, b"a/b/c/file", true, StatMode::LockRef)
                .unwrap();
        }
    });
    assert_eq!(n, 0, "a repeated hit must not allocate");
    let n = allocations(|| {
        for _ in 0..1000 {
            vfs.stat(At::Root, "a/link").unwrap();
        }
    });
    assert_eq!(n, 0, "following a cached symlink must not allocate");
    // The counter works: a fresh miss does allocate.
    let n = allocations(|| {
        let _ = vfs.stat(At::Root, "a/b/c/other");
    });
    assert!(n > 0);
}
