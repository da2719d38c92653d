//! loom models of entry invalidation (run with `RUSTFLAGS="--cfg loom"
//! cargo test --release --lib loom_invalidate`): a change made on the
//! backend underneath the Vfs and then reported, against a lookup of the
//! same name that asks the backend concurrently. Whatever the interleaving,
//! once both are done the Vfs must answer with the new state: the lookup
//! cannot cache what it read before the change after the report returned.

use std::sync::Arc as StdArc;

use super::{At, Config, Vfs};
use crate::errno::Errno;
use crate::fs::memfs::MemFs;
use crate::fs::FileSystem;
use crate::sync::{thread, Arc};

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.max_branches = b.max_branches.max(20_000);
    b
}

/// The backend, the Vfs over it with `p` cached, and p's inode number.
fn setup() -> (StdArc<MemFs>, Arc<Vfs>, u64) {
    let fs = StdArc::new(MemFs::new());
    fs.mkdir_p("p", 0o755).unwrap();
    fs.write_file("p/f", b"x").unwrap();
    let vfs = Vfs::with_config(
        fs.clone(),
        Config {
            capacity: 16,
            ..Config::default()
        },
    )
    .unwrap();
    let p = vfs.as_root().stat(At::Root, "p").unwrap().ino;
    (fs, Arc::new(vfs), p)
}

#[test]
fn loom_invalidate_create_vs_lookup() {
    builder().check(|| {
        let (fs, vfs, p) = setup();
        let t = {
            let vfs = vfs.clone();
            // p/x is not cached: this lookup asks the backend, before or
            // after the create.
            thread::spawn(move || {
                let _ = vfs.as_root().stat(At::Root, "p/x");
            })
        };
        // The backend is not modelled (std locks): a loom switch point
        // first, so the lookup can also run before the change.
        thread::yield_now();
        fs.create(p, b"x", 0o644, crate::fs::Ctx::ROOT).unwrap();
        vfs.invalidate_entry(p, b"x");
        t.join().unwrap();
        assert!(
            vfs.as_root().stat(At::Root, "p/x").is_ok(),
            "a miss read before the create outlived its report"
        );
    });
}

#[test]
fn loom_invalidate_unlink_vs_lookup() {
    builder().check(|| {
        let (fs, vfs, p) = setup();
        let t = {
            let vfs = vfs.clone();
            thread::spawn(move || {
                let _ = vfs.as_root().stat(At::Root, "p/f");
            })
        };
        thread::yield_now();
        fs.unlink(p, b"f").unwrap();
        vfs.invalidate_entry(p, b"f");
        t.join().unwrap();
        assert_eq!(
            vfs.as_root().stat(At::Root, "p/f").unwrap_err(),
            Errno::ENOENT,
            "a name read before the unlink outlived its report"
        );
        let c = vfs.counters();
        // The walker's clone went with its thread: this is the last one.
        drop(vfs);
        assert_eq!((c.dentries(), c.inodes()), (0, 0));
    });
}
