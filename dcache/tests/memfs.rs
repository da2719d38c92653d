//! memfs: every operation and every errno it promises, link counts, times,
//! readdir cookies, unlink-while-open, and a multithreaded consistency run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dcache::errno::Errno;
use dcache::fs::memfs::{Limits, MemFs};
use dcache::fs::{
    Attr, Ctx, DirEntry, FileSystem, FileType, Ino, RenameFlags, SetAttr, SetTime, Timespec,
};

const ME: Ctx = Ctx {
    uid: 1000,
    gid: 100,
};
const NOREPLACE: RenameFlags = RenameFlags {
    noreplace: true,
    exchange: false,
};
const EXCHANGE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: true,
};
const OLD: Timespec = Timespec { sec: 1000, nsec: 5 };

fn fs() -> MemFs {
    MemFs::with_root(0o755, 0, 0)
}

fn attr(fs: &MemFs, path: &str) -> Attr {
    fs.getattr(fs.resolve(path).unwrap()).unwrap()
}

fn names(fs: &MemFs, dir: Ino) -> Vec<String> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, &mut |e| {
        v.push(String::from_utf8(e.name).unwrap());
        true
    })
    .unwrap();
    v
}

/// Set a path's atime and mtime far into the past, so a later stamp is
/// visibly newer whatever the clock resolution.
fn age(fs: &MemFs, ino: Ino) {
    let set = SetAttr {
        atime: Some(SetTime::At(OLD)),
        mtime: Some(SetTime::At(OLD)),
        ..SetAttr::default()
    };
    fs.setattr(ino, &set, ME).unwrap();
}

/// ctime cannot be set, so age it by comparing against a snapshot.
fn assert_newer(after: Timespec, before: Timespec) {
    assert!(after > before, "{after:?} is not after {before:?}");
}

#[test]
fn root_attributes() {
    let fs = MemFs::with_root(0o1777, 5, 6);
    let root = fs.getattr(fs.root()).unwrap();
    assert_eq!(fs.root(), 1);
    assert_eq!(root.ino, 1);
    assert_eq!(root.kind, FileType::Directory);
    assert_eq!(root.perm, 0o1777);
    assert_eq!((root.uid, root.gid, root.nlink), (5, 6, 2));
    assert_eq!(root.blksize, 4096);
    let me = Ctx::current();
    let a = MemFs::new().getattr(1).unwrap();
    assert_eq!((a.uid, a.gid, a.perm), (me.uid, me.gid, 0o755));
    // .. of the root is the root.
    assert_eq!(fs.lookup(1, b"..").unwrap().unwrap().ino, 1);
    assert_eq!(fs.lookup(1, b".").unwrap().unwrap().ino, 1);
}

#[test]
fn create_lookup_getattr() {
    let fs = fs();
    let a = fs.create(1, b"f", 0o100644, ME).unwrap();
    assert_eq!(a.kind, FileType::Regular);
    assert_eq!(a.perm, 0o644, "type bits in perm are dropped");
    assert_eq!(
        (a.uid, a.gid, a.nlink, a.size, a.blocks),
        (1000, 100, 1, 0, 0)
    );
    assert_eq!(a.mode(), libc::S_IFREG | 0o644);
    assert_eq!(fs.lookup(1, b"f").unwrap(), Some(a));
    assert_eq!(fs.getattr(a.ino).unwrap(), a);
    assert_eq!(fs.lookup(1, b"g").unwrap(), None);
    assert_eq!(fs.create(1, b"f", 0o644, ME), Err(Errno::EEXIST));
    assert_eq!(fs.lookup(a.ino, b"x"), Err(Errno::ENOTDIR));
    assert_eq!(fs.create(a.ino, b"x", 0o644, ME), Err(Errno::ENOTDIR));
    assert_eq!(fs.lookup(999, b"x"), Err(Errno::ENOENT));
    assert_eq!(fs.getattr(999), Err(Errno::ENOENT));
    assert_eq!(fs.create(999, b"x", 0o644, ME), Err(Errno::ENOENT));
    let b = fs.create(1, b"g", 0o600, ME).unwrap();
    assert!(b.ino > a.ino, "inode numbers count up");
}

#[test]
fn bad_names() {
    let fs = fs();
    let long = vec![b'x'; 256];
    let max = vec![b'y'; 255];
    assert_eq!(fs.create(1, &long, 0o644, ME), Err(Errno::ENAMETOOLONG));
    assert_eq!(fs.mkdir(1, &long, 0o755, ME), Err(Errno::ENAMETOOLONG));
    assert_eq!(fs.lookup(1, &long), Err(Errno::ENAMETOOLONG));
    assert!(fs.create(1, &max, 0o644, ME).is_ok());
    assert_eq!(fs.create(1, b"a/b", 0o644, ME), Err(Errno::EINVAL));
    assert_eq!(fs.create(1, b"a\0b", 0o644, ME), Err(Errno::EINVAL));
    assert_eq!(fs.create(1, b"", 0o644, ME), Err(Errno::ENOENT));
    assert_eq!(fs.create(1, b".", 0o644, ME), Err(Errno::EEXIST));
    assert_eq!(fs.mkdir(1, b"..", 0o755, ME), Err(Errno::EEXIST));
    assert_eq!(fs.symlink(1, b".", b"t", ME), Err(Errno::EEXIST));
    assert_eq!(fs.unlink(1, b"."), Err(Errno::EISDIR));
    assert_eq!(fs.unlink(1, b".."), Err(Errno::EISDIR));
    assert_eq!(fs.rmdir(1, b"."), Err(Errno::EINVAL));
    assert_eq!(fs.rmdir(1, b".."), Err(Errno::ENOTEMPTY));
    fs.check().unwrap();
}

#[test]
fn directory_nlink_counts_subdirs() {
    let fs = fs();
    let a = fs.mkdir(1, b"a", 0o755, ME).unwrap();
    assert_eq!((a.nlink, a.kind, a.size), (2, FileType::Directory, 40));
    assert_eq!(fs.getattr(1).unwrap().nlink, 3);
    let b = fs.mkdir(a.ino, b"b", 0o700, ME).unwrap();
    fs.mkdir(a.ino, b"c", 0o700, ME).unwrap();
    fs.create(a.ino, b"f", 0o644, ME).unwrap();
    fs.symlink(a.ino, b"l", b"f", ME).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 4, "files add no links");
    assert_eq!(fs.getattr(a.ino).unwrap().size, 40 + 4 * 20);
    assert_eq!(fs.lookup(b.ino, b"..").unwrap().unwrap().ino, a.ino);
    fs.rmdir(a.ino, b"b").unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b.ino), Err(Errno::ENOENT), "freed");
    assert_eq!(fs.getattr(1).unwrap().nlink, 3);
    fs.check().unwrap();
}

#[test]
fn rmdir_errors() {
    let fs = fs();
    let a = fs.mkdir(1, b"a", 0o755, ME).unwrap();
    let f = fs.create(a.ino, b"f", 0o644, ME).unwrap();
    assert_eq!(fs.rmdir(1, b"nope"), Err(Errno::ENOENT));
    assert_eq!(fs.rmdir(a.ino, b"f"), Err(Errno::ENOTDIR));
    assert_eq!(fs.rmdir(1, b"a"), Err(Errno::ENOTEMPTY));
    assert_eq!(fs.rmdir(f.ino, b"x"), Err(Errno::ENOTDIR));
    fs.unlink(a.ino, b"f").unwrap();
    fs.rmdir(1, b"a").unwrap();
    assert_eq!(fs.rmdir(1, b"a"), Err(Errno::ENOENT));
    fs.check().unwrap();
}

#[test]
fn unlink_errors_and_accounting() {
    let fs = fs();
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap();
    let f = fs.create(1, b"f", 0o644, ME).unwrap();
    assert_eq!(fs.unlink(1, b"nope"), Err(Errno::ENOENT));
    assert_eq!(fs.unlink(1, b"d"), Err(Errno::EISDIR));
    assert_eq!(fs.unlink(f.ino, b"x"), Err(Errno::ENOTDIR));
    assert_eq!(fs.inode_count(), 3);
    fs.unlink(1, b"f").unwrap();
    assert_eq!(fs.lookup(1, b"f").unwrap(), None);
    assert_eq!(fs.getattr(f.ino), Err(Errno::ENOENT));
    assert_eq!(fs.inode_count(), 2);
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, 2);
    fs.check().unwrap();
}

#[test]
fn hard_links() {
    let fs = fs();
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap();
    let f = fs.create(1, b"f", 0o644, ME).unwrap();
    let l = fs.link(f.ino, d.ino, b"g").unwrap();
    assert_eq!((l.ino, l.nlink), (f.ino, 2));
    assert_eq!(fs.lookup(d.ino, b"g").unwrap().unwrap().nlink, 2);
    assert_eq!(fs.lookup(1, b"f").unwrap().unwrap().nlink, 2);
    assert_eq!(fs.link(d.ino, 1, b"d2"), Err(Errno::EPERM));
    assert_eq!(
        fs.link(f.ino, 1, b"d"),
        Err(Errno::EEXIST),
        "EEXIST before EPERM"
    );
    assert_eq!(fs.link(d.ino, 1, b"f"), Err(Errno::EEXIST));
    assert_eq!(fs.link(f.ino, 999, b"x"), Err(Errno::ENOENT));
    assert_eq!(fs.link(999, 1, b"x"), Err(Errno::ENOENT));
    assert_eq!(fs.link(f.ino, f.ino, b"x"), Err(Errno::ENOTDIR));
    assert_eq!(
        fs.getattr(d.ino).unwrap().nlink,
        2,
        "file links are no subdirs"
    );
    fs.unlink(1, b"f").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    fs.unlink(d.ino, b"g").unwrap();
    assert_eq!(fs.getattr(f.ino), Err(Errno::ENOENT));
    fs.check().unwrap();
}

#[test]
fn symlinks() {
    let fs = fs();
    let s = fs.symlink(1, b"s", b"some/where", ME).unwrap();
    assert_eq!(
        (s.kind, s.perm, s.size, s.blocks),
        (FileType::Symlink, 0o777, 10, 0)
    );
    assert_eq!(fs.readlink(s.ino).unwrap(), b"some/where");
    let long = vec![b'x'; 200];
    let l = fs.symlink(1, b"l", &long, ME).unwrap();
    assert_eq!((l.size, l.blocks), (200, 8));
    let f = fs.create(1, b"f", 0o644, ME).unwrap();
    assert_eq!(fs.readlink(f.ino), Err(Errno::EINVAL));
    assert_eq!(fs.readlink(1), Err(Errno::EINVAL));
    assert_eq!(fs.readlink(999), Err(Errno::ENOENT));
    assert_eq!(fs.symlink(1, b"e", b"", ME), Err(Errno::ENOENT));
    assert_eq!(
        fs.symlink(1, b"e", &[b'x'; 4096], ME),
        Err(Errno::ENAMETOOLONG)
    );
    assert!(fs.symlink(1, b"e", &[b'x'; 4095], ME).is_ok());
    assert_eq!(fs.symlink(1, b"s", b"t", ME), Err(Errno::EEXIST));
    // Opening a symlink (without O_PATH) is ELOOP, as with O_NOFOLLOW.
    assert_eq!(fs.open(s.ino, libc::O_RDONLY), Err(Errno::ELOOP));
    let fh = fs.open(s.ino, libc::O_PATH).unwrap();
    fs.release(s.ino, fh).unwrap();
}

#[test]
fn mknod_kinds() {
    let fs = fs();
    let p = fs.mknod(1, b"p", FileType::Fifo, 0o600, 0, ME).unwrap();
    assert_eq!(
        (p.kind, p.perm, p.rdev, p.nlink),
        (FileType::Fifo, 0o600, 0, 1)
    );
    let c = fs
        .mknod(1, b"c", FileType::CharDevice, 0o666, 0x0103, ME)
        .unwrap();
    assert_eq!((c.kind, c.rdev), (FileType::CharDevice, 0x0103));
    let b = fs
        .mknod(1, b"b", FileType::BlockDevice, 0o660, 0x0801, ME)
        .unwrap();
    assert_eq!(b.rdev, 0x0801);
    let s = fs.mknod(1, b"s", FileType::Socket, 0o755, 7, ME).unwrap();
    assert_eq!((s.kind, s.rdev), (FileType::Socket, 0));
    let r = fs.mknod(1, b"r", FileType::Regular, 0o644, 0, ME).unwrap();
    let fh = fs.open(r.ino, libc::O_RDWR).unwrap();
    assert_eq!(fs.write(r.ino, fh, 0, b"ok"), Ok(2));
    fs.release(r.ino, fh).unwrap();
    assert_eq!(
        fs.mknod(1, b"d", FileType::Directory, 0o755, 0, ME),
        Err(Errno::EPERM)
    );
    assert_eq!(
        fs.mknod(1, b"l", FileType::Symlink, 0o777, 0, ME),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fs.mknod(1, b"p", FileType::Fifo, 0o600, 0, ME),
        Err(Errno::EEXIST)
    );
    assert_eq!(fs.open(s.ino, libc::O_RDWR), Err(Errno(libc::ENXIO)));
    let names: BTreeSet<String> = names(&fs, 1).into_iter().collect();
    assert!(names.is_superset(&["p", "c", "b", "s", "r"].map(String::from).into()));
    fs.check().unwrap();
}

#[test]
fn read_write_and_handles() {
    let fs = fs();
    let f = fs.create(1, b"f", 0o644, ME).unwrap();
    let g = fs.create(1, b"g", 0o644, ME).unwrap();
    let rw = fs.open(f.ino, libc::O_RDWR).unwrap();
    assert_eq!(fs.write(f.ino, rw, 0, b"hello world"), Ok(11));
    assert_eq!(fs.write(f.ino, rw, 6, b"there"), Ok(5));
    let mut buf = [0u8; 64];
    assert_eq!(fs.read(f.ino, rw, 0, &mut buf), Ok(11));
    assert_eq!(&buf[..11], b"hello there");
    assert_eq!(fs.read(f.ino, rw, 11, &mut buf), Ok(0));
    assert_eq!(fs.read(f.ino, rw, 1 << 60, &mut buf), Ok(0));
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.blocks), (11, 8));
    // A write far out leaves a hole that reads as zeros and holds no blocks.
    assert_eq!(fs.write(f.ino, rw, 1 << 20, b"end"), Ok(3));
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.blocks), ((1 << 20) + 3, 16));
    assert_eq!(fs.read(f.ino, rw, 4096, &mut buf), Ok(64));
    assert_eq!(buf, [0u8; 64]);
    assert_eq!(fs.write(f.ino, rw, 5, b""), Ok(0));

    let ro = fs.open(f.ino, libc::O_RDONLY).unwrap();
    let wo = fs.open(f.ino, libc::O_WRONLY).unwrap();
    assert_eq!(fs.write(f.ino, ro, 0, b"x"), Err(Errno::EBADF));
    assert_eq!(fs.read(f.ino, wo, 0, &mut buf), Err(Errno::EBADF));
    assert_eq!(fs.read(f.ino, 9999, 0, &mut buf), Err(Errno::EBADF));
    assert_eq!(
        fs.read(g.ino, rw, 0, &mut buf),
        Err(Errno::EBADF),
        "fh of another inode"
    );
    assert_eq!(fs.write(g.ino, rw, 0, b"x"), Err(Errno::EBADF));
    assert_eq!(fs.flush(f.ino, rw), Ok(()));
    assert_eq!(fs.fsync(f.ino, rw, true), Ok(()));
    assert_eq!(fs.flush(f.ino, 9999), Err(Errno::EBADF));
    // As tmpfs (no ->flush), close does not call flush at all.
    assert!(!fs.flush_on_close());
    assert_eq!(fs.fsync(g.ino, rw, false), Err(Errno::EBADF));
    assert_eq!(fs.open_handles(), 3);
    for fh in [rw, ro, wo] {
        fs.release(f.ino, fh).unwrap();
    }
    assert_eq!(fs.release(f.ino, rw), Err(Errno::EBADF));
    assert_eq!(fs.open_handles(), 0);
    assert_eq!(fs.open(999, libc::O_RDONLY), Err(Errno::ENOENT));
    fs.check().unwrap();
}

#[test]
fn open_flags() {
    let fs = fs();
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap();
    let f = fs.create(1, b"f", 0o644, ME).unwrap();
    assert_eq!(fs.open(d.ino, libc::O_WRONLY), Err(Errno::EISDIR));
    assert_eq!(fs.open(d.ino, libc::O_RDWR), Err(Errno::EISDIR));
    assert_eq!(
        fs.open(d.ino, libc::O_RDONLY | libc::O_TRUNC),
        Err(Errno::EISDIR)
    );
    assert_eq!(fs.open(f.ino, libc::O_DIRECTORY), Err(Errno::ENOTDIR));
    let dh = fs.open(d.ino, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(fs.read(d.ino, dh, 0, &mut buf), Err(Errno::EISDIR));
    fs.release(d.ino, dh).unwrap();
    let ph = fs.open(f.ino, libc::O_PATH).unwrap();
    assert_eq!(fs.read(f.ino, ph, 0, &mut buf), Err(Errno::EBADF));
    fs.release(f.ino, ph).unwrap();

    fs.write_file("f", b"0123456789").unwrap();
    let ap = fs.open(f.ino, libc::O_WRONLY | libc::O_APPEND).unwrap();
    assert_eq!(
        fs.write(f.ino, ap, 0, b"ab"),
        Ok(2),
        "O_APPEND ignores the offset"
    );
    fs.release(f.ino, ap).unwrap();
    assert_eq!(fs.read_file("f").unwrap(), b"0123456789ab");

    age(&fs, f.ino);
    let tr = fs.open(f.ino, libc::O_WRONLY | libc::O_TRUNC).unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.blocks), (0, 0));
    assert_newer(a.mtime, OLD);
    fs.release(f.ino, tr).unwrap();
    fs.check().unwrap();
}

#[test]
fn unlinked_file_lives_while_open() {
    let fs = fs();
    let ino = fs.write_file("f", b"still here").unwrap();
    let fh = fs.open(ino, libc::O_RDWR).unwrap();
    fs.unlink(1, b"f").unwrap();
    assert_eq!(fs.lookup(1, b"f").unwrap(), None);
    let a = fs.getattr(ino).unwrap();
    assert_eq!((a.nlink, a.size), (0, 10));
    assert_eq!(fs.write(ino, fh, 10, b"!"), Ok(1));
    let mut buf = [0u8; 32];
    assert_eq!(fs.read(ino, fh, 0, &mut buf), Ok(11));
    assert_eq!(&buf[..11], b"still here!");
    assert_eq!(fs.link(ino, 1, b"back"), Err(Errno::ENOENT));
    assert!(!names(&fs, 1).contains(&"f".to_string()));
    // A second open of the orphan (Linux allows it via /proc/self/fd).
    let fh2 = fs.open(ino, libc::O_RDONLY).unwrap();
    fs.check().unwrap();
    assert_eq!(fs.inode_count(), 2);
    fs.release(ino, fh).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().nlink, 0);
    fs.release(ino, fh2).unwrap();
    assert_eq!(fs.getattr(ino), Err(Errno::ENOENT));
    assert_eq!(fs.inode_count(), 1);
    assert_eq!(fs.statfs().unwrap().bfree, fs.statfs().unwrap().blocks);
    fs.check().unwrap();
}

#[test]
fn removed_directory_while_open() {
    let fs = fs();
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap();
    let fh = fs.open(d.ino, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
    fs.rmdir(1, b"d").unwrap();
    let a = fs.getattr(d.ino).unwrap();
    assert_eq!(a.nlink, 0);
    assert_eq!(fs.readdir(d.ino, 0, &mut |_| true), Err(Errno::ENOENT));
    assert_eq!(fs.lookup(d.ino, b"x").unwrap(), None);
    assert_eq!(fs.lookup(d.ino, b"..").unwrap(), None);
    assert_eq!(fs.create(d.ino, b"x", 0o644, ME), Err(Errno::ENOENT));
    assert_eq!(fs.mkdir(d.ino, b"x", 0o755, ME), Err(Errno::ENOENT));
    assert_eq!(fs.getattr(1).unwrap().nlink, 2);
    fs.check().unwrap();
    fs.release(d.ino, fh).unwrap();
    assert_eq!(fs.getattr(d.ino), Err(Errno::ENOENT));
    fs.check().unwrap();
}

#[test]
fn setattr_cases() {
    let fs = fs();
    let f = fs.create(1, b"f", 0o6755, ME).unwrap();
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap();
    let s = fs.symlink(1, b"s", b"f", ME).unwrap();
    let set = |ino, s: SetAttr| fs.setattr(ino, &s, ME);

    let a = set(
        f.ino,
        SetAttr {
            perm: Some(0o100640),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(a.perm, 0o640);
    set(
        f.ino,
        SetAttr {
            perm: Some(0o6755),
            ..Default::default()
        },
    )
    .unwrap();
    let a = set(
        f.ino,
        SetAttr {
            uid: Some(7),
            gid: Some(8),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        (a.uid, a.gid, a.perm),
        (7, 8, 0o755),
        "chown drops setuid and setgid"
    );
    set(
        f.ino,
        SetAttr {
            perm: Some(0o2745),
            ..Default::default()
        },
    )
    .unwrap();
    let a = set(
        f.ino,
        SetAttr {
            gid: Some(9),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(a.perm, 0o2745, "setgid without group exec survives chown");
    let a = set(
        d.ino,
        SetAttr {
            perm: Some(0o4755),
            ..Default::default()
        },
    )
    .unwrap();
    let a2 = set(
        d.ino,
        SetAttr {
            uid: Some(3),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        (a.perm, a2.perm),
        (0o4755, 0o4755),
        "directories keep their bits"
    );

    fs.write_file("f", b"abcdef").unwrap();
    let a = set(
        f.ino,
        SetAttr {
            size: Some(3),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(a.size, 3);
    let a = set(
        f.ino,
        SetAttr {
            size: Some(10000),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((a.size, a.blocks), (10000, 8));
    assert_eq!(
        fs.read_file("f").unwrap(),
        [&b"abc"[..], &[0u8; 9997]].concat()
    );
    let a = set(
        f.ino,
        SetAttr {
            size: Some(1 << 40),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((a.size, a.blocks), (1 << 40, 8), "growing is sparse");
    let a = set(
        f.ino,
        SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((a.size, a.blocks), (0, 0));
    let too_big = SetAttr {
        size: Some(i64::MAX as u64 + 1),
        ..Default::default()
    };
    assert_eq!(set(f.ino, too_big), Err(Errno::EFBIG));
    let trunc = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(set(d.ino, trunc), Err(Errno::EISDIR));
    assert_eq!(set(s.ino, trunc), Err(Errno::EINVAL));
    assert_eq!(set(999, trunc), Err(Errno::ENOENT));

    let t = Timespec {
        sec: 12345,
        nsec: 678,
    };
    let a = set(
        f.ino,
        SetAttr {
            atime: Some(SetTime::At(t)),
            mtime: Some(SetTime::At(OLD)),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!((a.atime, a.mtime), (t, OLD));
    let a = set(
        f.ino,
        SetAttr {
            mtime: Some(SetTime::Now),
            ..Default::default()
        },
    )
    .unwrap();
    assert_newer(a.mtime, OLD);
    assert_eq!(a.atime, t, "atime left alone");
    let bad = Timespec {
        sec: 1,
        nsec: 1_000_000_000,
    };
    let bad_set = SetAttr {
        atime: Some(SetTime::At(bad)),
        ..Default::default()
    };
    assert_eq!(set(f.ino, bad_set), Err(Errno::EINVAL));
    fs.check().unwrap();
}

#[test]
fn times_follow_posix() {
    let fs = fs();
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap();
    let f = fs.create(d.ino, b"f", 0o644, ME).unwrap();
    assert_eq!((f.atime, f.mtime), (f.ctime, f.ctime));
    let d_now = fs.getattr(d.ino).unwrap();
    assert_eq!(
        d_now.mtime, f.mtime,
        "creation stamps the directory with the same time"
    );

    // write: mtime and ctime move, atime does not.
    age(&fs, f.ino);
    let before = fs.getattr(f.ino).unwrap();
    let fh = fs.open(f.ino, libc::O_WRONLY).unwrap();
    fs.write(f.ino, fh, 0, b"x").unwrap();
    fs.release(f.ino, fh).unwrap();
    let after = fs.getattr(f.ino).unwrap();
    assert_newer(after.mtime, OLD);
    assert!(after.ctime >= before.ctime);
    assert_eq!(after.atime, OLD, "noatime: reads and writes leave atime");

    // truncate to the same size changes nothing; to another size stamps.
    age(&fs, f.ino);
    let a = fs
        .setattr(
            f.ino,
            &SetAttr {
                size: Some(1),
                ..Default::default()
            },
            ME,
        )
        .unwrap();
    assert_eq!(a.mtime, OLD);
    let a = fs
        .setattr(
            f.ino,
            &SetAttr {
                size: Some(2),
                ..Default::default()
            },
            ME,
        )
        .unwrap();
    assert_newer(a.mtime, OLD);

    // chmod: ctime only.
    age(&fs, f.ino);
    let c0 = fs.getattr(f.ino).unwrap().ctime;
    let a = fs
        .setattr(
            f.ino,
            &SetAttr {
                perm: Some(0o600),
                ..Default::default()
            },
            ME,
        )
        .unwrap();
    assert_eq!(a.mtime, OLD);
    assert!(a.ctime >= c0);

    // Names added, removed or moved in a directory stamp its mtime.
    let stamps_dir = |what: &dyn Fn()| {
        age(&fs, d.ino);
        what();
        assert_newer(fs.getattr(d.ino).unwrap().mtime, OLD);
    };
    stamps_dir(&|| {
        fs.create(d.ino, b"g", 0o644, ME).unwrap();
    });
    stamps_dir(&|| {
        fs.mkdir(d.ino, b"sub", 0o755, ME).unwrap();
    });
    stamps_dir(&|| {
        fs.symlink(d.ino, b"s", b"t", ME).unwrap();
    });
    stamps_dir(&|| {
        fs.link(f.ino, d.ino, b"h").unwrap();
    });
    stamps_dir(&|| fs.unlink(d.ino, b"h").unwrap());
    stamps_dir(&|| fs.rmdir(d.ino, b"sub").unwrap());
    stamps_dir(&|| {
        fs.rename(d.ino, b"g", d.ino, b"g2", RenameFlags::NONE)
            .unwrap()
    });
    stamps_dir(&|| {
        fs.rename(d.ino, b"g2", 1, b"g3", RenameFlags::NONE)
            .unwrap()
    });
    stamps_dir(&|| {
        fs.rename(1, b"g3", d.ino, b"g4", RenameFlags::NONE)
            .unwrap()
    });

    // link/unlink/rename move the target's ctime (seen as "not older").
    let c0 = fs.getattr(f.ino).unwrap().ctime;
    fs.link(f.ino, 1, b"x").unwrap();
    let c1 = fs.getattr(f.ino).unwrap().ctime;
    assert!(c1 >= c0);
    fs.unlink(1, b"x").unwrap();
    assert!(fs.getattr(f.ino).unwrap().ctime >= c1);
    fs.check().unwrap();
}

/// A full listing taken `step` entries at a time, resuming from the last
/// offset each time (the way FUSE and getdents page through a directory),
/// with `between` run between pages.
fn paged_listing(fs: &MemFs, dir: Ino, step: usize, mut between: impl FnMut()) -> Vec<DirEntry> {
    let mut out: Vec<DirEntry> = Vec::new();
    let mut off = 0;
    loop {
        let mut got = 0;
        fs.readdir(dir, off, &mut |e| {
            off = e.offset;
            out.push(e);
            got += 1;
            got < step
        })
        .unwrap();
        if got == 0 {
            return out;
        }
        between();
    }
}

#[test]
fn readdir_offsets() {
    let fs = fs();
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap();
    let f = fs.create(d.ino, b"f", 0o644, ME).unwrap();
    let s = fs.mkdir(d.ino, b"s", 0o755, ME).unwrap();
    let l = fs.symlink(d.ino, b"l", b"f", ME).unwrap();
    let all = paged_listing(&fs, d.ino, usize::MAX, || {});
    let view: Vec<(Vec<u8>, Ino, FileType, u64)> = all
        .iter()
        .map(|e| (e.name.clone(), e.ino, e.kind, e.offset))
        .collect();
    assert_eq!(
        view,
        vec![
            (b".".to_vec(), d.ino, FileType::Directory, 1),
            (b"..".to_vec(), 1, FileType::Directory, 2),
            (b"f".to_vec(), f.ino, FileType::Regular, 3),
            (b"s".to_vec(), s.ino, FileType::Directory, 4),
            (b"l".to_vec(), l.ino, FileType::Symlink, 5),
        ]
    );
    // Resuming from any entry's offset yields exactly what followed it.
    for (i, e) in all.iter().enumerate() {
        let mut rest = Vec::new();
        fs.readdir(d.ino, e.offset, &mut |e| {
            rest.push(e);
            true
        })
        .unwrap();
        assert_eq!(rest, all[i + 1..].to_vec());
    }
    // A cookie of a removed entry still resumes in the right place.
    fs.rmdir(d.ino, b"s").unwrap();
    let mut rest = Vec::new();
    fs.readdir(d.ino, 4, &mut |e| {
        rest.push(e.name);
        true
    })
    .unwrap();
    assert_eq!(rest, vec![b"l".to_vec()]);
    assert_eq!(fs.readdir(f.ino, 0, &mut |_| true), Err(Errno::ENOTDIR));
    assert_eq!(fs.readdir(999, 0, &mut |_| true), Err(Errno::ENOENT));
    // One page of one entry at a time still gives everything.
    let paged = paged_listing(&fs, d.ino, 1, || {});
    assert_eq!(paged.len(), 4);
}

#[test]
fn readdir_emit_may_reenter() {
    let fs = fs();
    for i in 0..300 {
        fs.create(1, format!("f{i}").as_bytes(), 0o644, ME).unwrap();
    }
    let mut n = 0;
    fs.readdir(1, 0, &mut |e| {
        // Calling back in (even to change the directory) must not deadlock.
        if e.offset > 2 {
            assert_eq!(fs.lookup(1, &e.name).unwrap().unwrap().ino, e.ino);
            fs.unlink(1, &e.name).unwrap();
        }
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 302, "every entry once, across several internal batches");
    assert_eq!(names(&fs, 1), vec![".", ".."]);
}

#[test]
fn readdir_stable_under_interleaved_changes() {
    let fs = fs();
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap();
    let stable: Vec<String> = (0..40).map(|i| format!("stable{i}")).collect();
    for (i, s) in stable.iter().enumerate() {
        fs.create(d.ino, s.as_bytes(), 0o644, ME).unwrap();
        fs.create(d.ino, format!("churn{i}").as_bytes(), 0o644, ME)
            .unwrap();
    }
    for step in [1, 2, 3, 7] {
        let mut round = 0u32;
        let listing = paged_listing(&fs, d.ino, step, || {
            // Between pages: drop an old churn name, add a new one, and
            // rename one over another (that keeps the target's place).
            // New names land at the end; stop adding them after a while
            // or a one-entry pager would chase them forever.
            round += 1;
            let _ = fs.unlink(d.ino, format!("churn{}", round % 40).as_bytes());
            if round < 60 {
                fs.create(d.ino, format!("new{step}_{round}").as_bytes(), 0o644, ME)
                    .unwrap();
            }
            let _ = fs.unlink(
                d.ino,
                format!("new{step}_{}", round.wrapping_sub(1)).as_bytes(),
            );
            let _ = fs.rename(
                d.ino,
                format!("churn{}", (round + 20) % 40).as_bytes(),
                d.ino,
                format!("stable{}", round % 40).as_bytes(),
                RenameFlags::NONE,
            );
        });
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        for e in &listing {
            *seen
                .entry(String::from_utf8(e.name.clone()).unwrap())
                .or_default() += 1;
        }
        for s in &stable {
            assert_eq!(
                seen.get(s),
                Some(&1),
                "{s} seen {:?} times (step {step})",
                seen.get(s)
            );
        }
        assert!(seen.values().all(|&n| n == 1), "no name repeats: {seen:?}");
        let offsets: Vec<u64> = listing.iter().map(|e| e.offset).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "offsets increase");
        fs.check().unwrap();
    }
}

#[test]
fn rename_basics_and_nlink() {
    let fs = fs();
    let a = fs.mkdir(1, b"a", 0o755, ME).unwrap();
    let b = fs.mkdir(1, b"b", 0o755, ME).unwrap();
    let f = fs.create(a.ino, b"f", 0o644, ME).unwrap();
    fs.rename(a.ino, b"f", a.ino, b"g", RenameFlags::NONE)
        .unwrap();
    assert_eq!(fs.lookup(a.ino, b"f").unwrap(), None);
    assert_eq!(fs.lookup(a.ino, b"g").unwrap().unwrap().ino, f.ino);
    fs.rename(a.ino, b"g", b.ino, b"h", RenameFlags::NONE)
        .unwrap();
    assert_eq!(fs.lookup(b.ino, b"h").unwrap().unwrap().ino, f.ino);

    // Moving a directory moves a link from one parent to the other.
    let s = fs.mkdir(a.ino, b"s", 0o755, ME).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    fs.rename(a.ino, b"s", b.ino, b"s", RenameFlags::NONE)
        .unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.lookup(s.ino, b"..").unwrap().unwrap().ino, b.ino);
    assert_eq!(fs.getattr(s.ino).unwrap().nlink, 2);

    // Over an existing file: the old one loses its name and is freed.
    let v = fs.create(b.ino, b"v", 0o644, ME).unwrap();
    fs.rename(b.ino, b"h", b.ino, b"v", RenameFlags::NONE)
        .unwrap();
    assert_eq!(fs.lookup(b.ino, b"v").unwrap().unwrap().ino, f.ino);
    assert_eq!(fs.getattr(v.ino), Err(Errno::ENOENT));
    // Over a hard link of a file that keeps another name.
    let w = fs.create(1, b"w", 0o644, ME).unwrap();
    fs.link(w.ino, b.ino, b"w2").unwrap();
    fs.rename(b.ino, b"v", b.ino, b"w2", RenameFlags::NONE)
        .unwrap();
    assert_eq!(fs.getattr(w.ino).unwrap().nlink, 1);

    // Over an empty directory, in another parent.
    let e = fs.mkdir(a.ino, b"e", 0o755, ME).unwrap();
    fs.rename(b.ino, b"s", a.ino, b"e", RenameFlags::NONE)
        .unwrap();
    assert_eq!(fs.getattr(e.ino), Err(Errno::ENOENT));
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    assert_eq!(fs.lookup(a.ino, b"e").unwrap().unwrap().ino, s.ino);
    fs.check().unwrap();
}

#[test]
fn rename_errors() {
    let fs = fs();
    let a = fs.mkdir(1, b"a", 0o755, ME).unwrap();
    let sub = fs.mkdir(a.ino, b"sub", 0o755, ME).unwrap();
    let deep = fs.mkdir(sub.ino, b"deep", 0o755, ME).unwrap();
    let full = fs.mkdir(1, b"full", 0o755, ME).unwrap();
    fs.create(full.ino, b"x", 0o644, ME).unwrap();
    let f = fs.create(1, b"f", 0o644, ME).unwrap();
    fs.mkdir(1, b"empty", 0o755, ME).unwrap();
    let r = |od, on: &[u8], nd, nn: &[u8]| fs.rename(od, on, nd, nn, RenameFlags::NONE);

    assert_eq!(r(1, b"nope", 1, b"x"), Err(Errno::ENOENT));
    assert_eq!(r(999, b"f", 1, b"x"), Err(Errno::ENOENT));
    assert_eq!(r(1, b"f", 999, b"x"), Err(Errno::ENOENT));
    assert_eq!(r(f.ino, b"x", 1, b"y"), Err(Errno::ENOTDIR));
    assert_eq!(r(1, b"f", f.ino, b"y"), Err(Errno::ENOTDIR));
    // Into its own subtree (or itself as the new parent).
    assert_eq!(r(1, b"a", sub.ino, b"a"), Err(Errno::EINVAL));
    assert_eq!(r(1, b"a", deep.ino, b"a"), Err(Errno::EINVAL));
    assert_eq!(r(1, b"a", a.ino, b"a2"), Err(Errno::EINVAL));
    // Onto an ancestor of the source.
    assert_eq!(r(sub.ino, b"deep", 1, b"a"), Err(Errno::ENOTEMPTY));
    // Type mismatches and non-empty targets.
    assert_eq!(r(1, b"a", 1, b"full"), Err(Errno::ENOTEMPTY));
    assert_eq!(r(1, b"f", 1, b"empty"), Err(Errno::EISDIR));
    assert_eq!(r(1, b"empty", 1, b"f"), Err(Errno::ENOTDIR));
    // Dots and bad names.
    assert_eq!(r(1, b".", 1, b"x"), Err(Errno::EBUSY));
    assert_eq!(r(1, b"f", 1, b".."), Err(Errno::EBUSY));
    assert_eq!(fs.rename(1, b"f", 1, b".", NOREPLACE), Err(Errno::EEXIST));
    assert_eq!(r(1, b"f", 1, &[b'n'; 256]), Err(Errno::ENAMETOOLONG));
    assert_eq!(r(1, b"f", 1, b"a/b"), Err(Errno::EINVAL));
    let both = RenameFlags {
        noreplace: true,
        exchange: true,
    };
    assert_eq!(fs.rename(1, b"f", 1, b"g", both), Err(Errno::EINVAL));

    // Onto itself, and between two names of one inode: a successful no-op.
    assert_eq!(r(1, b"f", 1, b"f"), Ok(()));
    assert_eq!(r(1, b"a", 1, b"a"), Ok(()));
    fs.link(f.ino, a.ino, b"f2").unwrap();
    assert_eq!(r(1, b"f", a.ino, b"f2"), Ok(()));
    assert_eq!(
        fs.lookup(1, b"f").unwrap().unwrap().ino,
        f.ino,
        "both names remain"
    );
    assert_eq!(fs.lookup(a.ino, b"f2").unwrap().unwrap().nlink, 2);
    // ... but not with RENAME_NOREPLACE.
    assert_eq!(
        fs.rename(1, b"f", a.ino, b"f2", NOREPLACE),
        Err(Errno::EEXIST)
    );
    fs.check().unwrap();
}

#[test]
fn rename_noreplace_and_exchange() {
    let fs = fs();
    let a = fs.mkdir(1, b"a", 0o755, ME).unwrap();
    let b = fs.mkdir(1, b"b", 0o755, ME).unwrap();
    let f = fs.create(a.ino, b"f", 0o644, ME).unwrap();
    let g = fs.create(b.ino, b"g", 0o644, ME).unwrap();
    let sub = fs.mkdir(b.ino, b"sub", 0o755, ME).unwrap();
    fs.create(sub.ino, b"inner", 0o644, ME).unwrap();

    assert_eq!(
        fs.rename(a.ino, b"f", b.ino, b"g", NOREPLACE),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        fs.rename(a.ino, b"f", b.ino, b"sub", NOREPLACE),
        Err(Errno::EEXIST)
    );
    fs.rename(a.ino, b"f", b.ino, b"f", NOREPLACE).unwrap();
    fs.rename(b.ino, b"f", a.ino, b"f", NOREPLACE).unwrap();

    assert_eq!(
        fs.rename(a.ino, b"f", b.ino, b"missing", EXCHANGE),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        fs.rename(a.ino, b"missing", b.ino, b"g", EXCHANGE),
        Err(Errno::ENOENT)
    );
    // Exchange two files.
    fs.rename(a.ino, b"f", b.ino, b"g", EXCHANGE).unwrap();
    assert_eq!(fs.lookup(a.ino, b"f").unwrap().unwrap().ino, g.ino);
    assert_eq!(fs.lookup(b.ino, b"g").unwrap().unwrap().ino, f.ino);
    // Exchange a file with a non-empty directory in another parent: both
    // kinds are allowed, and the subdirectory link moves.
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    fs.rename(a.ino, b"f", b.ino, b"sub", EXCHANGE).unwrap();
    assert_eq!(fs.lookup(a.ino, b"f").unwrap().unwrap().ino, sub.ino);
    assert_eq!(fs.lookup(b.ino, b"sub").unwrap().unwrap().ino, g.ino);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    assert_eq!(fs.lookup(sub.ino, b"..").unwrap().unwrap().ino, a.ino);
    // Exchange two directories in different parents: counts unchanged.
    let c = fs.mkdir(b.ino, b"c", 0o755, ME).unwrap();
    fs.rename(a.ino, b"f", b.ino, b"c", EXCHANGE).unwrap();
    assert_eq!(fs.lookup(c.ino, b"..").unwrap().unwrap().ino, a.ino);
    assert_eq!(fs.lookup(sub.ino, b"..").unwrap().unwrap().ino, b.ino);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    // Exchanging a directory with one of its own descendants or ancestors.
    let inner_dir = fs.mkdir(sub.ino, b"d", 0o755, ME).unwrap();
    assert_eq!(
        fs.rename(b.ino, b"c", sub.ino, b"d", EXCHANGE),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fs.rename(sub.ino, b"d", b.ino, b"c", EXCHANGE),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fs.rename(1, b"b", sub.ino, b"d", EXCHANGE),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fs.rename(sub.ino, b"d", 1, b"b", EXCHANGE),
        Err(Errno::EINVAL)
    );
    let _ = inner_dir;
    fs.check().unwrap();
}

#[test]
fn rename_keeps_replaced_name_in_place() {
    let fs = fs();
    for n in ["a", "b", "c", "d"] {
        fs.create(1, n.as_bytes(), 0o644, ME).unwrap();
    }
    fs.rename(1, b"d", 1, b"b", RenameFlags::NONE).unwrap();
    assert_eq!(names(&fs, 1), vec![".", "..", "a", "b", "c"]);
    fs.rename(1, b"a", 1, b"c", EXCHANGE).unwrap();
    assert_eq!(names(&fs, 1), vec![".", "..", "a", "b", "c"]);
    fs.rename(1, b"a", 1, b"z", RenameFlags::NONE).unwrap();
    assert_eq!(
        names(&fs, 1),
        vec![".", "..", "b", "c", "z"],
        "a new name goes last"
    );
}

#[test]
fn statfs_and_limits() {
    let fs = fs();
    let s = fs.statfs().unwrap();
    assert_eq!((s.bsize, s.frsize, s.namelen), (4096, 4096, 255));
    assert!(s.blocks > 0 && s.bfree == s.blocks && s.files > 1);
    assert_eq!(s.ffree, s.files - 1);
    fs.write_file("f", &[1u8; 5000]).unwrap();
    let t = fs.statfs().unwrap();
    assert_eq!((t.bfree, t.ffree), (s.bfree - 2, s.ffree - 1));

    let small = MemFs::with_root(0o755, 0, 0).with_limits(Limits {
        max_bytes: 8192,
        max_inodes: 3,
    });
    let f = small.create(1, b"f", 0o644, ME).unwrap();
    small.mkdir(1, b"d", 0o755, ME).unwrap();
    assert_eq!(small.create(1, b"g", 0o644, ME), Err(Errno::ENOSPC));
    assert_eq!(small.symlink(1, b"s", b"t", ME), Err(Errno::ENOSPC));
    let fh = small.open(f.ino, libc::O_RDWR).unwrap();
    assert_eq!(small.write(f.ino, fh, 0, &[2u8; 8192]), Ok(8192));
    assert_eq!(small.write(f.ino, fh, 8192, b"x"), Err(Errno::ENOSPC));
    assert_eq!(small.write(f.ino, fh, 100, b"rewrite in place"), Ok(16));
    assert_eq!(small.statfs().unwrap().bfree, 0);
    assert_eq!(small.statfs().unwrap().ffree, 0);
    small
        .setattr(
            f.ino,
            &SetAttr {
                size: Some(4096),
                ..Default::default()
            },
            ME,
        )
        .unwrap();
    assert_eq!(
        small.write(f.ino, fh, 8000, b"x"),
        Ok(1),
        "truncate gave a page back"
    );
    small.release(f.ino, fh).unwrap();
    small.unlink(1, b"f").unwrap();
    assert_eq!(small.statfs().unwrap().bfree, 2);
    small.check().unwrap();
}

#[test]
fn huge_offsets_are_efbig_not_panics() {
    let fs = fs();
    let f = fs.create(1, b"f", 0o644, ME).unwrap();
    let fh = fs.open(f.ino, libc::O_RDWR).unwrap();
    assert_eq!(fs.write(f.ino, fh, u64::MAX, b"x"), Err(Errno::EFBIG));
    assert_eq!(
        fs.write(f.ino, fh, i64::MAX as u64, b"x"),
        Err(Errno::EFBIG)
    );
    assert_eq!(
        fs.write(f.ino, fh, i64::MAX as u64 - 2, b"abcd"),
        Ok(2),
        "cut at the limit"
    );
    assert_eq!(fs.getattr(f.ino).unwrap().size, i64::MAX as u64);
    let mut buf = [0u8; 8];
    assert_eq!(fs.read(f.ino, fh, i64::MAX as u64 - 2, &mut buf), Ok(2));
    assert_eq!(&buf[..2], b"ab");
    fs.release(f.ino, fh).unwrap();
    fs.check().unwrap();
}

#[test]
fn setgid_directory_passes_group_down() {
    let fs = fs();
    let d = fs.mkdir(1, b"d", 0o2775, Ctx { uid: 1, gid: 50 }).unwrap();
    assert_eq!(d.perm, 0o2775);
    let f = fs.create(d.ino, b"f", 0o644, ME).unwrap();
    let s = fs.mkdir(d.ino, b"s", 0o755, ME).unwrap();
    assert_eq!((f.uid, f.gid, f.perm), (ME.uid, 50, 0o644));
    assert_eq!((s.gid, s.perm), (50, 0o2755));
    let plain = fs.create(1, b"p", 0o644, ME).unwrap();
    assert_eq!(plain.gid, ME.gid);
}

#[test]
fn forget_changes_nothing() {
    let fs = fs();
    let ino = fs.write_file("f", b"data").unwrap();
    fs.forget(ino, 1);
    fs.forget(999, 1);
    assert_eq!(fs.read_file("f").unwrap(), b"data");
    assert_eq!(fs.getattr(ino).unwrap().nlink, 1);
}

#[test]
fn path_helpers() {
    let fs = fs();
    let c = fs.mkdir_p("a/b/c", 0o750).unwrap();
    assert_eq!(
        fs.mkdir_p("/a//b/c/", 0o700).unwrap(),
        c,
        "existing dirs are fine"
    );
    assert_eq!(fs.resolve("a/b/c").unwrap(), c);
    assert_eq!(fs.resolve("a/./b/../b/c").unwrap(), c);
    assert_eq!(fs.resolve("").unwrap(), 1);
    assert_eq!(attr(&fs, "a/b").perm, 0o750);
    let f = fs.write_file("a/b/c/file", b"xyz").unwrap();
    assert_eq!(fs.resolve("a/b/c/file").unwrap(), f);
    assert_eq!(fs.read_file("a/b/c/file").unwrap(), b"xyz");
    assert_eq!(
        fs.write_file("a/b/c/file", b"q").unwrap(),
        f,
        "overwrite keeps the inode"
    );
    assert_eq!(fs.read_file("a/b/c/file").unwrap(), b"q");
    assert_eq!(fs.mkdir_p("a/b/c/file/d", 0o755), Err(Errno::ENOTDIR));
    assert_eq!(fs.write_file("nope/file", b""), Err(Errno::ENOENT));
    assert_eq!(fs.write_file("a", b""), Err(Errno::EISDIR));
    assert_eq!(fs.resolve("a/missing"), Err(Errno::ENOENT));
    assert_eq!(fs.resolve("a/b/c/file/x"), Err(Errno::ENOTDIR));
    let l = fs.make_symlink("a/link", "b/c/file").unwrap();
    assert_eq!(fs.readlink(l).unwrap(), b"b/c/file");
    assert_eq!(
        fs.read_file("a/link"),
        Err(Errno::ELOOP),
        "helpers follow no symlinks"
    );
    let root = fs.getattr(1).unwrap();
    assert_eq!(
        (attr(&fs, "a").uid, attr(&fs, "a").gid),
        (root.uid, root.gid)
    );
    fs.check().unwrap();
}

/// Threads create, link, rename, unlink and list under shared directories,
/// each on its own names; afterwards every count must add up and every
/// listing must agree with lookups.
#[test]
fn threads_keep_the_tree_consistent() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 300;
    let fs = Arc::new(fs());
    let shared: Vec<Ino> = (0..3)
        .map(|i| {
            fs.mkdir(1, format!("shared{i}").as_bytes(), 0o755, ME)
                .unwrap()
                .ino
        })
        .collect();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = Arc::clone(&fs);
            let shared = shared.clone();
            std::thread::spawn(move || {
                for r in 0..ROUNDS {
                    let d0 = shared[r % 3];
                    let d1 = shared[(r + t) % 3];
                    let n = |what: &str| format!("t{t}_{what}_{r}").into_bytes();
                    let f = fs.create(d0, &n("f"), 0o644, ME).unwrap();
                    let fh = fs.open(f.ino, libc::O_RDWR).unwrap();
                    fs.write(f.ino, fh, 0, &n("data")).unwrap();
                    fs.link(f.ino, d1, &n("link")).unwrap();
                    let sub = fs.mkdir(d1, &n("dir"), 0o755, ME).unwrap();
                    fs.rename(d0, &n("f"), sub.ino, b"moved", RenameFlags::NONE)
                        .unwrap();
                    fs.rename(d1, &n("dir"), d0, &n("dir2"), RenameFlags::NONE)
                        .unwrap();
                    let mut listed = 0;
                    fs.readdir(d1, 0, &mut |_| {
                        listed += 1;
                        true
                    })
                    .unwrap();
                    assert!(listed >= 2);
                    if r % 2 == 0 {
                        // Leave every other round's files behind, removed
                        // while open half the time.
                        fs.unlink(sub.ino, b"moved").unwrap();
                        fs.unlink(d1, &n("link")).unwrap();
                        fs.rmdir(d0, &n("dir2")).unwrap();
                    }
                    let mut buf = [0u8; 64];
                    let len = fs.read(f.ino, fh, 0, &mut buf).unwrap();
                    assert_eq!(&buf[..len], &n("data")[..]);
                    fs.release(f.ino, fh).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    fs.check().unwrap();
    assert_eq!(fs.open_handles(), 0);
    // Listings agree with lookups, and subdirectory counts with nlink.
    let mut total = 1;
    let mut todo = vec![1];
    while let Some(dir) = todo.pop() {
        let mut entries = Vec::new();
        fs.readdir(dir, 0, &mut |e| {
            entries.push(e);
            true
        })
        .unwrap();
        let mut subdirs = 0;
        for e in entries.iter().skip(2) {
            let a = fs.lookup(dir, &e.name).unwrap().unwrap();
            assert_eq!((a.ino, a.kind), (e.ino, e.kind));
            if e.kind == FileType::Directory {
                subdirs += 1;
                todo.push(e.ino);
            }
            total += 1;
        }
        assert_eq!(fs.getattr(dir).unwrap().nlink, 2 + subdirs);
    }
    // Every kept round left a file with two names and a directory.
    let kept = THREADS * ROUNDS / 2;
    assert_eq!(total, 1 + 3 + 3 * kept);
    assert_eq!(fs.inode_count(), 1 + 3 + 2 * kept);
}

/// While writers churn other names, a reader paging through the directory
/// sees each name that exists throughout exactly once.
#[test]
fn concurrent_readdir_sees_stable_names_once() {
    let fs = Arc::new(fs());
    let d = fs.mkdir(1, b"d", 0o755, ME).unwrap().ino;
    for i in 0..50 {
        fs.create(d, format!("keep{i}").as_bytes(), 0o644, ME)
            .unwrap();
    }
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..2)
        .map(|t| {
            let (fs, done) = (Arc::clone(&fs), Arc::clone(&done));
            std::thread::spawn(move || {
                // Bounded work, so every listing (which also sees the new
                // names, appended at the end) terminates.
                for i in 0..20_000u64 {
                    let name = format!("w{t}_{i}");
                    fs.create(d, name.as_bytes(), 0o644, ME).unwrap();
                    if i >= 3 {
                        fs.unlink(d, format!("w{t}_{}", i - 3).as_bytes()).unwrap();
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
        })
        .collect();
    let mut listings = 0;
    while listings == 0 || done.load(std::sync::atomic::Ordering::Relaxed) < 2 {
        let listing = paged_listing(&fs, d, 3, std::thread::yield_now);
        let mut seen: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
        for e in listing {
            *seen.entry(e.name).or_default() += 1;
        }
        for i in 0..50 {
            assert_eq!(seen.get(format!("keep{i}").as_bytes()), Some(&1));
        }
        assert!(seen.values().all(|&n| n == 1));
        listings += 1;
    }
    for w in writers {
        w.join().unwrap();
    }
    fs.check().unwrap();
}
