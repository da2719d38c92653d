//! Zero-trip opens on a memfs mount (whose handles carry no state): the
//! kernel opens files and directories without asking and does not flush
//! at close, so a hundred open-read-close cycles and listings reach the
//! daemon as no OPEN, OPENDIR, FLUSH or RELEASE at all past the first
//! refusal; the I/O goes to one file per node the daemon keeps while the
//! kernel holds the node, so a file unlinked while open keeps its data, as
//! on tmpfs. With `no_default_permissions` (dcache checks at open) every
//! open still comes. Without FUSE, one SKIPPED line.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;

use dcache_fuse::testing::{available, TempMount};
use dcache_fuse::MountOptions;

fn mount(opts: &[&str]) -> Option<TempMount> {
    if let Err(why) = available() {
        dcache_fuse::testing::skipped(format_args!("fuse_no_open: FUSE unusable here ({why})"));
        return None;
    }
    let o = MountOptions::parse(opts).unwrap();
    Some(
        TempMount::memfs(&o, |fs| {
            fs.mkdir_p("d", 0o755).unwrap();
            fs.write_file("d/f", b"hello").unwrap();
        })
        .expect("mount"),
    )
}

fn cycles(m: &TempMount) {
    for _ in 0..100 {
        let mut s = String::new();
        fs::File::open(m.path().join("d/f"))
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hello");
        assert_eq!(fs::read_dir(m.path().join("d")).unwrap().count(), 1);
    }
}

#[test]
fn opens_and_listings_make_no_requests() {
    let Some(m) = mount(&[]) else { return };
    cycles(&m);
    let first = m.open_requests();
    assert!(
        first <= 4,
        "{first} open-type requests for 100 opens and 100 listings"
    );
    cycles(&m);
    assert_eq!(m.open_requests(), first, "none at all once refused");
    // Writes, truncates and appends go to the node's own file.
    let p = m.path().join("d/g");
    fs::write(&p, "0123456789").unwrap();
    let f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all_at(b"ab", 0).unwrap();
    drop(f);
    assert_eq!(fs::read(&p).unwrap(), b"ab");
    let mut a = OpenOptions::new().append(true).open(&p).unwrap();
    a.write_all(b"cd").unwrap();
    drop(a);
    assert_eq!(fs::read(&p).unwrap(), b"abcd");
    let r = m.unmount().unwrap();
    assert_eq!((r.referenced, r.open_files), (0, 0), "{r}");
}

/// An open file whose name goes keeps its data (its node's file is opened
/// before the unlink), whether it was written before or after.
#[test]
fn an_unlinked_open_file_keeps_its_data() {
    let Some(m) = mount(&[]) else { return };
    let p = m.path().join("d/tmp");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all_at(b"before", 0).unwrap();
    let g = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    fs::remove_file(&p).unwrap();
    let mut buf = [0u8; 6];
    g.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"before");
    g.write_all_at(b"after!", 6).unwrap();
    let mut all = [0u8; 12];
    f.read_exact_at(&mut all, 0).unwrap();
    assert_eq!(&all, b"beforeafter!");
    // Replaced by a rename, the same.
    let q = m.path().join("d/q");
    fs::write(&q, "old data").unwrap();
    let h = fs::File::open(&q).unwrap();
    fs::write(m.path().join("d/new"), "new").unwrap();
    fs::rename(m.path().join("d/new"), &q).unwrap();
    let mut s = String::new();
    (&h).read_to_string(&mut s).unwrap();
    assert_eq!(s, "old data");
    assert_eq!(fs::read_to_string(&q).unwrap(), "new");
    drop((f, g, h));
    let r = m.unmount().unwrap();
    assert_eq!((r.referenced, r.open_files), (0, 0), "{r}");
}

#[test]
fn no_default_permissions_keeps_every_open() {
    let Some(m) = mount(&["no_default_permissions"]) else {
        return;
    };
    cycles(&m);
    assert!(m.open_requests() >= 200, "{}", m.open_requests());
    let r = m.unmount().unwrap();
    assert_eq!((r.referenced, r.open_files), (0, 0), "{r}");
}
