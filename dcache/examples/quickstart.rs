//! The dentry cache over an in-memory filesystem, used by two callers:
//! `cargo run --example quickstart`.

use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::{At, Cred, Errno, SetAttr, Vfs};

fn main() -> dcache::Result<()> {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("home/alice", 0o755)?;
    fs.write_file("home/alice/notes", b"hello")?;
    let vfs = Vfs::new(fs)?;

    // The Vfs's own methods act as root; close alice's home to others.
    let close = SetAttr {
        perm: Some(0o700),
        uid: Some(1000),
        ..SetAttr::default()
    };
    vfs.as_root().setattr(At::Root, "home/alice", &close)?;

    // Every call through `as_cred` is checked for that caller, in rcu-walk.
    let alice = Cred::user(1000, 1000, &[]);
    let bob = Cred::user(1001, 1001, &[]);
    let a = vfs.as_cred(&alice).stat(At::Root, "home/alice/notes")?;
    println!("alice: notes has {} bytes, inode {}", a.size, a.ino);
    assert_eq!(
        vfs.as_cred(&bob).stat(At::Root, "home/alice/notes"),
        Err(Errno::EACCES)
    );
    println!("bob: {}", Errno::EACCES);

    // Cached: a second stat reads no backend and writes nothing shared.
    let before = vfs.counters().backend_lookups();
    vfs.as_cred(&alice).stat(At::Root, "home/alice/notes")?;
    assert_eq!(vfs.counters().backend_lookups(), before);
    Ok(())
}
