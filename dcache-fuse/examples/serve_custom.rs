//! The custom backend of dcache's `custom_backend` example, served over
//! FUSE: `cargo run --example serve_custom` (as root, or with fusermount3).

#[path = "../../dcache/examples/common/static_fs.rs"]
mod static_fs;

use std::sync::Arc;

use dcache::FileType;
use dcache_fuse::{mount, MountOptions};
use static_fs::StaticFs;

fn main() -> std::io::Result<()> {
    let mut fs = StaticFs::new();
    let etc = fs.add(1, "etc", FileType::Directory, b"");
    fs.add(etc, "motd", FileType::Regular, b"hello over FUSE\n");
    let dir = tempfile::tempdir()?;
    let mnt = mount(Arc::new(fs), dir.path(), &MountOptions::default())?;
    print!("{}", std::fs::read_to_string(mnt.path().join("etc/motd"))?);
    mnt.unmount()?;
    Ok(())
}
