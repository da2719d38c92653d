//! A backend of your own behind the dentry cache: `cargo run --example
//! custom_backend`. The backend (examples/common/static_fs.rs) is 79 lines.

#[path = "common/static_fs.rs"]
mod static_fs;

use std::sync::Arc;

use dcache::oflags::{O_RDONLY, O_WRONLY};
use dcache::{At, Errno, FileType, Vfs};
use static_fs::StaticFs;

fn main() -> dcache::Result<()> {
    let mut fs = StaticFs::new();
    let etc = fs.add(1, "etc", FileType::Directory, b"");
    fs.add(
        etc,
        "motd",
        FileType::Regular,
        b"hello from a custom backend\n",
    );
    let vfs = Vfs::new(Arc::new(fs))?;

    // Walked once through the backend, then answered by the cache.
    let st = vfs.as_root().stat(At::Root, "etc/motd")?;
    println!(
        "etc/motd: inode {}, {} bytes, mode {:o}",
        st.ino,
        st.size,
        st.mode()
    );
    let lookups = vfs.counters().backend_lookups();
    vfs.as_root().stat(At::Root, "/etc/../etc/./motd")?;
    assert_eq!(vfs.counters().backend_lookups(), lookups);

    let f = vfs.as_root().open(At::Root, "etc/motd", O_RDONLY, 0)?;
    let mut buf = [0u8; 64];
    let n = f.read(0, &mut buf)?;
    print!("read: {}", String::from_utf8_lossy(&buf[..n]));

    // The POSIX answers come from the Vfs and the backend together.
    assert_eq!(
        vfs.as_root().stat(At::Root, "etc/motd/x").err(),
        Some(Errno::ENOTDIR)
    );
    assert_eq!(
        vfs.as_root().stat(At::Root, "etc/nope").err(),
        Some(Errno::ENOENT)
    );
    let w = vfs.as_root().open(At::Root, "etc/motd", O_WRONLY, 0);
    assert_eq!(w.err(), Some(Errno::EROFS));

    let mut names = Vec::new();
    vfs.as_root().readdir(At::Root, "etc", 0, &mut |e| {
        names.push(String::from_utf8_lossy(&e.name).into_owned());
        true
    })?;
    println!("etc: {names:?}");
    assert_eq!(names, [".", "..", "motd"]);
    Ok(())
}
