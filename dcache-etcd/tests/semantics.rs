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

/// Two clients change one directory concurrently (creates, mkdirs,
/// unlinks, links, renames out): its size and link count are what one
/// machine's would be, on a cold client and on both of them; setting its
/// times folds the clients' tallies into its record and the times stick;
/// a later create moves them on again.
#[test]
fn directory_tallies_add_up_and_fold_when_times_are_set() {
    use dcache::fs::SetTime;
    use dcache::Timespec;
    const T: &str = "directory_tallies_add_up_and_fold_when_times_are_set";
    if !etcd_available(T) {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/tallies");
    let (_fa, a) = client(&spec, Options::default());
    let (_fb, b) = client(&spec, Options::default());
    a.as_root().mkdir(At::Root, "/d", 0o755).unwrap();
    a.as_root().mkdir(At::Root, "/e", 0o755).unwrap();
    let d_ino = a.as_root().stat(At::Root, "/d").unwrap().ino;
    std::thread::scope(|s| {
        for (c, v) in [&a, &b].into_iter().enumerate() {
            s.spawn(move || {
                let r = v.as_root();
                for i in 0..20 {
                    r.create(At::Root, format!("/d/f{c}-{i}"), 0o644).unwrap();
                }
                for i in 0..2 + c {
                    r.mkdir(At::Root, format!("/d/s{c}-{i}"), 0o755).unwrap();
                }
                for i in 0..3 {
                    r.unlink(At::Root, format!("/d/f{c}-{i}")).unwrap();
                }
                r.rmdir(At::Root, format!("/d/s{c}-0")).unwrap();
                // Links and renames of the other client's names.
                let o = 1 - c;
                eventually(Duration::from_secs(5), || {
                    r.link(
                        At::Root,
                        format!("/d/f{o}-10"),
                        At::Root,
                        format!("/d/l{c}"),
                    )
                    .is_ok()
                })
                .expect("link");
                eventually(Duration::from_secs(5), || {
                    r.rename(
                        At::Root,
                        format!("/d/f{o}-11"),
                        At::Root,
                        format!("/e/m{c}"),
                        RenameFlags::default(),
                    )
                    .is_ok()
                })
                .expect("rename");
            });
        }
    });
    // Per client: 20 files - 3 unlinked - 1 moved out + 1 link; 2 or 3
    // subdirectories, one removed.
    let names = 2 * (20 - 3 - 1 + 1) + 1 + 2;
    let (size, nlink) = (20 * (2 + names), 2 + 1 + 2);
    let shape = |v: &dcache::Vfs| {
        let s = v.as_root().stat(At::Root, "/d").unwrap();
        (s.size, s.nlink)
    };
    let (_fc, c) = client(&spec, Options::default());
    assert_eq!(shape(&c), (size, nlink), "a cold client");
    for v in [&a, &b] {
        eventually(Duration::from_secs(5), || shape(v) == (size, nlink))
            .unwrap_or_else(|| panic!("{:?} where {:?}", shape(v), (size, nlink)));
    }
    let e = c.as_root().stat(At::Root, "/e").unwrap();
    assert_eq!(e.size, 20 * 4);
    let tallies =
        || common::keys_under(&etcd.endpoint(0), &format!("/tallies/w/t/{d_ino:016x}/")).len();
    assert!(tallies() >= 2, "one tally per client at least");

    // Set back: the times stick, the counts stay, the tallies are folded.
    let past = Timespec { sec: 1000, nsec: 5 };
    let set = SetAttr {
        mtime: Some(SetTime::At(past)),
        atime: Some(SetTime::At(past)),
        ..Default::default()
    };
    a.as_root().setattr(At::Root, "/d", &set).unwrap();
    assert_eq!(tallies(), 0, "folded into the record");
    let (_fd, d) = client(&spec, Options::default());
    let s = d.as_root().stat(At::Root, "/d").unwrap();
    assert_eq!((s.mtime, s.size, s.nlink), (past, size, nlink));
    eventually(Duration::from_secs(5), || {
        b.as_root().stat(At::Root, "/d").unwrap().mtime == past
    })
    .expect("B sees the times set");
    b.as_root().create(At::Root, "/d/late", 0o644).unwrap();
    for v in [&a, &b, &d] {
        eventually(Duration::from_secs(5), || {
            let s = v.as_root().stat(At::Root, "/d").unwrap();
            s.mtime > past && s.size == size + 20
        })
        .expect("a create after the fold moves the times on");
    }
}

/// Tallies left by many clients (here written straight into etcd, as
/// clients long gone would have left them): the first client to read
/// more than `FOLD_AT` folds them into the directory's record, and the
/// directory's attributes do not change.
#[test]
fn many_tallies_are_folded_by_the_first_reader() {
    use dcache_etcd::codec::Keys;
    use dcache_etcd::tally::{Tally, FOLD_AT};
    const T: &str = "many_tallies_are_folded_by_the_first_reader";
    if !etcd_available(T) {
        return;
    }
    let etcd = Cluster::start(1);
    let spec = etcd.volume("/fold");
    let (_fa, a) = client(&spec, Options::default());
    a.as_root().mkdir(At::Root, "/d", 0o755).unwrap();
    let before = a.as_root().stat(At::Root, "/d").unwrap();
    let keys = Keys::new("/fold");
    let n = FOLD_AT + 20;
    let late = dcache::Timespec {
        sec: before.mtime.sec + 100,
        nsec: 0,
    };
    // `n` tallies of 20 bytes each (every other one a link too, `links`).
    let put_tallies = |from: usize, links: bool| {
        common::rt().block_on(async {
            let mut c = etcd_client::Client::connect([etcd.endpoint(0)], None)
                .await
                .unwrap();
            for i in from..from + n {
                let t = Tally::default().changed(20, (links && i % 2 == 1) as i64, late);
                let key = keys.tally(before.ino, &format!("gone{i}"), 0);
                c.put(key, t.encode(), None).await.unwrap();
            }
        })
    };
    put_tallies(0, true);
    let prefix = String::from_utf8(keys.tallies(before.ino)).unwrap();
    let left = || common::keys_under(&etcd.endpoint(0), &prefix).len();
    assert_eq!(left(), n);
    let want = (
        before.size + 20 * n as u64,
        before.nlink + n as u32 / 2,
        late,
    );
    let (_fb, b) = client(&spec, Options::default());
    let s = b.as_root().stat(At::Root, "/d").unwrap();
    assert_eq!((s.size, s.nlink, s.mtime), want, "read with the tallies");
    assert_eq!(left(), 0, "folded by the reader");
    let (_fc, c) = client(&spec, Options::default());
    let s = c.as_root().stat(At::Root, "/d").unwrap();
    assert_eq!((s.size, s.nlink, s.mtime), want, "read from the record");
    eventually(Duration::from_secs(5), || {
        let s = a.as_root().stat(At::Root, "/d").unwrap();
        (s.size, s.nlink, s.mtime) == want
    })
    .expect("the first client sees the same");

    // As many again, and the times set back: setattr folds them in rounds
    // (one transaction takes at most 128 operations).
    put_tallies(n, false);
    let past = dcache::Timespec { sec: 1000, nsec: 0 };
    let set = SetAttr {
        mtime: Some(dcache::fs::SetTime::At(past)),
        ..Default::default()
    };
    let s = a.as_root().setattr(At::Root, "/d", &set).unwrap();
    let want = (want.0 + 20 * n as u64, want.1, past);
    assert_eq!((s.size, s.nlink, s.mtime), want);
    assert_eq!(left(), 0, "folded by setattr");
    let (_fd, d) = client(&spec, Options::default());
    let s = d.as_root().stat(At::Root, "/d").unwrap();
    assert_eq!((s.size, s.nlink, s.mtime), want, "read from the record");
}
