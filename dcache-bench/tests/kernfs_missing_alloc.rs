//! The kernfs variants as the benchmarks drive them: through the Vfs.
//!
//! A counting global allocator (per thread, only while armed, so the test
//! harness's other threads do not disturb it) proves that the `rcu`
//! variant's repeated miss allocates nothing, while the Vfs's counters show
//! which path each variant takes: `mutex` and `rwlock` fall back to ref-walk
//! on every open (their revalidate cannot answer in rcu-walk), `mutex`
//! asks the backend again on every miss, `rcu` does neither.
#![cfg(not(loom))]

use std::sync::Arc;

use dcache::fs::kernfs::KernFs;
use dcache::{At, Errno, Vfs};
use dcache_bench::workloads::kernfs::{build_cpu_tree, file_path, MISSING_PATH, TREE_CPUS};

#[path = "../../dcache/tests/counting_alloc/mod.rs"]
mod counting_alloc;
use counting_alloc::allocations;

const N: usize = 1000;

fn mount(variant: &str) -> (Arc<KernFs>, Vfs) {
    let fs = Arc::new(KernFs::for_variant(variant).unwrap());
    build_cpu_tree(&fs, TREE_CPUS).unwrap();
    let vfs = Vfs::new(fs.clone()).unwrap();
    (fs, vfs)
}

fn open_missing(vfs: &Vfs) -> dcache::Result<()> {
    vfs.as_root()
        .open(At::Root, MISSING_PATH, libc::O_RDONLY, 0)
        .map(drop)
}

fn open_read_close(vfs: &Vfs, path: &str) -> Vec<u8> {
    let f = vfs
        .as_root()
        .open(At::Root, path, libc::O_RDONLY, 0)
        .unwrap();
    let mut buf = [0u8; 64];
    let n = f.read(0, &mut buf).unwrap();
    f.close().unwrap();
    buf[..n].to_vec()
}

/// (ref-walks, backend lookups) that `f` caused.
fn walks(vfs: &Vfs, f: impl FnOnce()) -> (usize, usize) {
    let c = vfs.counters();
    let (w0, l0) = (c.ref_walks(), c.backend_lookups());
    f();
    (c.ref_walks() - w0, c.backend_lookups() - l0)
}

#[test]
fn the_counter_sees_allocations() {
    let (n, v) = allocations(|| vec![1u8; 100]);
    assert!(n >= 1);
    drop(v);
}

#[test]
fn rcu_repeated_miss_through_the_vfs_allocates_nothing_and_never_falls_back() {
    let (_fs, vfs) = mount("rcu");
    // Warm: the first miss caches the negative dentry (and registers this
    // thread with the reclamation crate).
    assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
    assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
    let (n, (w, l)) = allocations(|| {
        walks(&vfs, || {
            for _ in 0..N {
                assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
                assert_eq!(
                    vfs.as_root().stat(At::Root, MISSING_PATH),
                    Err(Errno::ENOENT)
                );
            }
        })
    });
    assert_eq!(n, 0, "allocations in {N} repeated misses");
    assert_eq!((w, l), (0, 0), "ref-walks and backend lookups");
}

#[test]
fn rwlock_keeps_the_negative_entry_but_walks_with_references() {
    let (_fs, vfs) = mount("rwlock");
    assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
    let (n, (w, l)) = allocations(|| {
        walks(&vfs, || {
            for _ in 0..N {
                assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
            }
        })
    });
    // Every walk is a ref-walk (its revalidate needs the lock), but the
    // negative entry stays valid by revision: no new lookup, no allocation.
    assert_eq!((w, l), (N, 0));
    assert_eq!(n, 0);
}

#[test]
fn mutex_relooks_every_miss() {
    let (_fs, vfs) = mount("mutex");
    assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
    let (n, (w, l)) = allocations(|| {
        walks(&vfs, || {
            for _ in 0..N {
                assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
            }
        })
    });
    // The old kernfs: negative entries are never trusted, so each miss is
    // a backend lookup and a fresh negative dentry. The dentries come from
    // the Vfs's slab, which reuses the slots the earlier misses' dentries
    // gave back, so the allocator sees only reclamation bookkeeping.
    assert_eq!((w, l), (N, N));
    assert!(n > 0, "{n} allocations for {N} misses");
}

#[test]
fn hits_walk_by_reference_except_in_rcu() {
    let path = file_path(3);
    for (variant, ref_walks) in [("mutex", N), ("rwlock", N), ("rcu", 0)] {
        let (_fs, vfs) = mount(variant);
        assert_eq!(open_read_close(&vfs, &path), b"1\n");
        let (w, l) = walks(&vfs, || {
            for _ in 0..N {
                assert_eq!(open_read_close(&vfs, &path), b"1\n");
            }
        });
        assert_eq!((w, l), (ref_walks, 0), "{variant}");
    }
}

#[test]
fn a_cached_miss_goes_stale_when_its_directory_changes() {
    for variant in ["mutex", "rwlock", "rcu"] {
        let (fs, vfs) = mount(variant);
        assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
        assert_eq!(open_missing(&vfs), Err(Errno::ENOENT));
        // A change elsewhere keeps the negative entry.
        let cpu0 = fs.resolve("devices/system/cpu/cpu0").unwrap();
        fs.create_file(
            cpu0,
            "crash_notes",
            0o444,
            Box::new(|| b"x\n".to_vec()),
            None,
        )
        .unwrap();
        assert_eq!(open_missing(&vfs), Err(Errno::ENOENT), "{variant}");
        // The name appears in its directory: the next open sees it.
        let topo = fs.resolve("devices/system/cpu/cpu0/topology").unwrap();
        fs.create_file(
            topo,
            "missing",
            0o444,
            Box::new(|| b"here\n".to_vec()),
            None,
        )
        .unwrap();
        assert_eq!(open_read_close(&vfs, MISSING_PATH), b"here\n", "{variant}");
    }
}
