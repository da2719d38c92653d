//! One client: the POSIX answers of the etcd backend (exchange, replace,
//! truncate, large writes, limits, readdir cookies), seen through a `Vfs`
//! and through a second, cold client.

mod common;

use std::time::Duration;

use common::{client, etcd_available, eventually, Cluster};
use dcache::{At, Errno, RenameFlags, SetAttr};
use dcache_etcd::Options;

const EXCHANGE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: true,
};

fn write(v: &dcache::Vfs, path: &str, off: u64, data: &[u8]) -> Result<usize, Errno> {
    let f = v
        .as_root()
        .open(At::Root, path, libc::O_CREAT | libc::O_WRONLY, 0o644)?;
    f.write(off, data)
}

fn read(v: &dcache::Vfs, path: &str, off: u64, len: usize) -> Vec<u8> {
    let f = v.as_root().open(At::Root, path, libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; len];
    let n = f.read(off, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn posix_answers() {
    if !etcd_available("posix_answers") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/sem");
    let (_fa, a) = client(&spec, Options::default());

    // RENAME_EXCHANGE of a file and a directory across directories.
    a.as_root().mkdir(At::Root, "/p", 0o755).unwrap();
    a.as_root().mkdir(At::Root, "/q", 0o755).unwrap();
    a.as_root().create(At::Root, "/p/file", 0o644).unwrap();
    a.as_root().mkdir(At::Root, "/q/dir", 0o755).unwrap();
    a.as_root().mkdir(At::Root, "/q/dir/sub", 0o755).unwrap();
    let file = a.as_root().stat(At::Root, "/p/file").unwrap().ino;
    let dir = a.as_root().stat(At::Root, "/q/dir").unwrap().ino;
    a.as_root()
        .rename(At::Root, "/p/file", At::Root, "/q/dir", EXCHANGE)
        .unwrap();
    let (_fc, c) = client(&spec, Options::default());
    for v in [&a, &c] {
        assert_eq!(v.as_root().stat(At::Root, "/p/file").unwrap().ino, dir);
        assert_eq!(v.as_root().stat(At::Root, "/q/dir").unwrap().ino, file);
        assert!(v.as_root().stat(At::Root, "/p/file/sub").is_ok());
        assert_eq!(v.as_root().stat(At::Root, "/p").unwrap().nlink, 3);
        assert_eq!(v.as_root().stat(At::Root, "/q").unwrap().nlink, 2);
    }
    // Exchange with a missing name; noreplace onto an existing one.
    assert_eq!(
        a.as_root()
            .rename(At::Root, "/p/file", At::Root, "/q/none", EXCHANGE),
        Err(Errno::ENOENT)
    );
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    a.as_root().create(At::Root, "/q/other", 0o644).unwrap();
    assert_eq!(
        a.as_root()
            .rename(At::Root, "/q/dir", At::Root, "/q/other", noreplace),
        Err(Errno::EEXIST)
    );
    // Replacing: a file over a file frees the old one; a directory over
    // a non-empty one is ENOTEMPTY, over an empty one fine.
    a.as_root()
        .rename(At::Root, "/q/dir", At::Root, "/q/other", RenameFlags::NONE)
        .unwrap();
    assert_eq!(a.as_root().stat(At::Root, "/q/other").unwrap().ino, file);
    a.as_root().mkdir(At::Root, "/q/empty", 0o755).unwrap();
    assert_eq!(
        a.as_root()
            .rename(At::Root, "/q/empty", At::Root, "/p/file", RenameFlags::NONE),
        Err(Errno::ENOTEMPTY)
    );
    a.as_root().rmdir(At::Root, "/p/file/sub").unwrap();
    a.as_root()
        .rename(At::Root, "/q/empty", At::Root, "/p/file", RenameFlags::NONE)
        .unwrap();
    let (_fd, d) = client(&spec, Options::default());
    assert_eq!(d.as_root().stat(At::Root, "/p").unwrap().nlink, 3);
    assert_eq!(d.as_root().stat(At::Root, "/q").unwrap().nlink, 2);
    assert_eq!(d.as_root().rmdir(At::Root, "/p"), Err(Errno::ENOTEMPTY));
    assert_eq!(
        d.as_root()
            .link(At::Root, "/p", At::Root, "/plink")
            .unwrap_err(),
        Errno::EPERM
    );

    // Data: sparse write, overwrite across a chunk boundary, truncate
    // down and up (the cut bytes read back as zeros).
    let chunk = dcache_etcd::codec::CHUNK;
    write(&a, "/data", chunk - 3, b"abcdef").unwrap();
    assert_eq!(a.as_root().stat(At::Root, "/data").unwrap().size, chunk + 3);
    let r = read(&c, "/data", chunk - 5, 16);
    assert_eq!(r, b"\0\0abcdef".to_vec());
    let set = |size| SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    a.as_root()
        .setattr(At::Root, "/data", &set(chunk - 1))
        .unwrap();
    a.as_root()
        .setattr(At::Root, "/data", &set(chunk + 10))
        .unwrap();
    let r = read(&c, "/data", chunk - 3, 16);
    assert_eq!(r, b"ab\0\0\0\0\0\0\0\0\0\0\0".to_vec());

    // A write over 1 MiB is short (one transaction); the rest follows.
    let big: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
    let n = write(&a, "/big", 0, &big).unwrap();
    assert_eq!(n, dcache_etcd::codec::MAX_IO);
    assert_eq!(
        write(&a, "/big", n as u64, &big[n..]).unwrap(),
        big.len() - n
    );
    let mut back = Vec::new();
    while back.len() < big.len() {
        let part = read(&c, "/big", back.len() as u64, 1 << 20);
        assert!(!part.is_empty());
        back.extend(part);
    }
    assert!(back == big, "1.5 MB read back");
    // Past the largest file: EFBIG.
    assert_eq!(
        write(&a, "/big", dcache_etcd::codec::MAX_FILE, b"x"),
        Err(Errno::EFBIG)
    );
    assert_eq!(
        a.as_root()
            .setattr(At::Root, "/big", &set(dcache_etcd::codec::MAX_FILE + 1)),
        Err(Errno::EFBIG)
    );

    // readdir cookies: resuming after an entry skips exactly what was
    // returned, even with entries removed and added in between.
    a.as_root().mkdir(At::Root, "/r", 0o755).unwrap();
    for i in 0..10 {
        a.as_root()
            .create(At::Root, format!("/r/e{i}"), 0o644)
            .unwrap();
    }
    let mut first = Vec::new();
    let mut cookie = 0;
    a.as_root()
        .readdir(At::Root, "/r", 0, &mut |e| {
            cookie = e.offset;
            first.push(e.name);
            first.len() < 6
        })
        .unwrap();
    a.as_root().unlink(At::Root, "/r/e0").unwrap();
    a.as_root().unlink(At::Root, "/r/e9").unwrap();
    a.as_root().create(At::Root, "/r/late", 0o644).unwrap();
    let mut rest = Vec::new();
    a.as_root()
        .readdir(At::Root, "/r", cookie, &mut |e| {
            rest.push(String::from_utf8(e.name).unwrap());
            true
        })
        .unwrap();
    assert_eq!(first.len(), 6);
    assert_eq!(rest, vec!["e4", "e5", "e6", "e7", "e8", "late"]);

    // statfs counts inodes.
    let st = a.statfs().unwrap();
    assert!(st.files >= 10 && st.blocks > 0);

    // The other client agrees, once its cache catches up.
    eventually(Duration::from_secs(5), || {
        c.as_root().stat(At::Root, "/r/late").is_ok()
            && c.as_root().stat(At::Root, "/r/e0").is_err()
    })
    .unwrap();
}

#[test]
fn bad_specs_are_einval() {
    for s in ["", "nohost", "https://127.0.0.1:1", "127.0.0.1:99999"] {
        assert_eq!(
            dcache_etcd::EtcdFs::connect(s).err().map(|e| e.errno),
            Some(Errno::EINVAL),
            "{s}"
        );
    }
    // Nobody listening: EIO within the timeout, not a hang.
    let opts = Options {
        timeout: Duration::from_millis(500),
        ..Options::default()
    };
    let t = std::time::Instant::now();
    let r = dcache_etcd::EtcdFs::connect_with("127.0.0.1:1", opts);
    assert_eq!(r.err().map(|e| e.errno), Some(Errno::EIO));
    assert!(t.elapsed() < Duration::from_secs(10));
}

/// A create changes its directory's mtime and ctime, a new subdirectory
/// its link count too, on the creating client and the other.
#[test]
fn creates_update_the_directory_times() {
    if !etcd_available("creates_update_the_directory_times") {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/times");
    let (_fa, a) = client(&spec, Options::default());
    let (_fb, b) = client(&spec, Options::default());
    a.as_root().mkdir(At::Root, "/d", 0o755).unwrap();
    let times = |v: &dcache::Vfs| {
        let s = v.as_root().stat(At::Root, "/d").unwrap();
        (s.mtime, s.ctime, s.nlink)
    };
    let t0 = times(&a);
    std::thread::sleep(Duration::from_millis(250));
    a.as_root().create(At::Root, "/d/f", 0o644).unwrap();
    let t1 = times(&a);
    assert!(t1.0 > t0.0 && t1.1 > t0.1, "{t0:?} -> {t1:?}");
    std::thread::sleep(Duration::from_millis(250));
    a.as_root().mkdir(At::Root, "/d/s", 0o755).unwrap();
    let t2 = times(&a);
    assert!(t2.0 > t1.0 && t2.2 == t1.2 + 1, "{t1:?} -> {t2:?}");
    eventually(Duration::from_secs(5), || times(&b) == t2).expect("B sees the new times");
}
