//! The passthrough backend against real host directories (tempfile::TempDir
//! on the test machine's disk; /dev/shm for tmpfs where present).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dcache::fs::passthrough::{Passthrough, PassthroughOptions, ROOT_INO};
use dcache::fs::{
    Attr, Ctx, DirEntry, FileSystem, FileType, Ino, RenameFlags, SetAttr, SetTime, Timespec,
    Validity,
};
use dcache::Errno;
use tempfile::TempDir;

fn with_ttl(ttl: Duration) -> PassthroughOptions {
    // Non-exhaustive: start from the defaults and set fields.
    let mut o = PassthroughOptions::default();
    o.entry_ttl = ttl;
    o.attr_ttl = ttl;
    o
}

fn setup() -> (TempDir, Passthrough) {
    setup_ttl(Duration::from_secs(3600))
}

fn setup_ttl(ttl: Duration) -> (TempDir, Passthrough) {
    let dir = TempDir::new().unwrap();
    let fs = Passthrough::with_options(dir.path(), with_ttl(ttl)).unwrap();
    (dir, fs)
}

/// A backend whose inodes each hold their descriptor (no file handles).
fn setup_held() -> (TempDir, Passthrough) {
    let dir = TempDir::new().unwrap();
    let mut o = with_ttl(Duration::from_secs(3600));
    o.file_handles = false;
    let fs = Passthrough::with_options(dir.path(), o).unwrap();
    (dir, fs)
}

fn lk(fs: &Passthrough, dir: Ino, name: &str) -> Attr {
    fs.lookup(dir, name.as_bytes())
        .unwrap_or_else(|e| panic!("lookup {name}: {e}"))
        .unwrap_or_else(|| panic!("lookup {name}: missing"))
}

fn errno_of<T>(r: std::io::Result<T>) -> Errno {
    Errno::from_io(&r.err().expect("host call should have failed"))
}

/// Every entry of a listing from `offset` on, keyed by name.
fn list_from(fs: &Passthrough, dir: Ino, offset: u64) -> Vec<DirEntry> {
    let mut out = Vec::new();
    fs.readdir(dir, offset, &mut |e| {
        out.push(e);
        true
    })
    .unwrap();
    out
}

fn names(entries: &[DirEntry]) -> BTreeSet<String> {
    entries
        .iter()
        .map(|e| String::from_utf8(e.name.clone()).unwrap())
        .collect()
}

/// Descriptors of this process that point inside `root` (tests run in
/// parallel in one process; each test has its own tree, so this count is
/// its own).
fn fds_inside(root: &Path) -> usize {
    let canon = fs::canonicalize(root).unwrap();
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.starts_with(&canon))
        .count()
}

fn current() -> Ctx {
    Ctx::current()
}

#[test]
fn lookup_and_getattr_report_the_host_object() {
    let (d, fs) = setup();
    fs::write(d.path().join("f"), b"hello").unwrap();
    fs::set_permissions(d.path().join("f"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::create_dir(d.path().join("sub")).unwrap();

    let root = fs.getattr(fs.root()).unwrap();
    assert_eq!(fs.root(), ROOT_INO);
    assert_eq!(root.kind, FileType::Directory);

    let f = lk(&fs, ROOT_INO, "f");
    let meta = fs::symlink_metadata(d.path().join("f")).unwrap();
    assert_eq!(f.kind, FileType::Regular);
    assert_eq!(f.size, 5);
    assert_eq!(f.perm, 0o640);
    assert_eq!(f.nlink, 1);
    assert_eq!(f.uid, meta.uid());
    assert_eq!(f.mtime.sec, meta.mtime());
    assert_eq!(f.mtime.nsec as i64, meta.mtime_nsec());
    assert_ne!(f.ino, ROOT_INO);
    assert_eq!(fs.getattr(f.ino).unwrap(), f);

    // The same host inode keeps its number; each reply is counted.
    assert_eq!(lk(&fs, ROOT_INO, "f").ino, f.ino);
    assert_eq!(fs.lookup_count(f.ino), Some(2));
    assert_eq!(fs.inode_count(), 2);

    let sub = lk(&fs, ROOT_INO, "sub");
    assert_eq!(sub.kind, FileType::Directory);
    assert_ne!(sub.ino, f.ino);

    assert_eq!(fs.lookup(ROOT_INO, b"missing").unwrap(), None);
    assert_eq!(fs.lookup(f.ino, b"x"), Err(Errno::ENOTDIR));
    assert_eq!(fs.getattr(987_654), Err(Errno::ESTALE));
    assert_eq!(fs.lookup(987_654, b"f"), Err(Errno::ESTALE));

    // getattr always asks the host: a change made there shows at once.
    fs::write(d.path().join("f"), b"longer now").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, 10);
}

#[test]
fn bad_names_are_rejected_everywhere() {
    let (d, fs) = setup();
    fs::write(d.path().join("f"), b"").unwrap();
    let f = lk(&fs, ROOT_INO, "f").ino;
    let long = vec![b'x'; 256];
    let bad: Vec<(&[u8], Errno)> = vec![
        (b"..", Errno::EINVAL),
        (b".", Errno::EINVAL),
        (b"", Errno::EINVAL),
        (b"a/b", Errno::EINVAL),
        (b"../f", Errno::EINVAL),
        (b"/etc", Errno::EINVAL),
        (b"a\0b", Errno::EINVAL),
        (&long, Errno::ENAMETOOLONG),
    ];
    let ctx = current();
    for (name, want) in bad {
        assert_eq!(fs.lookup(ROOT_INO, name), Err(want), "{name:?}");
        assert_eq!(fs.create(ROOT_INO, name, 0o644, ctx).err(), Some(want));
        assert_eq!(fs.mkdir(ROOT_INO, name, 0o755, ctx).err(), Some(want));
        assert_eq!(fs.unlink(ROOT_INO, name), Err(want));
        assert_eq!(fs.rmdir(ROOT_INO, name), Err(want));
        assert_eq!(fs.symlink(ROOT_INO, name, b"t", ctx).err(), Some(want));
        assert_eq!(fs.link(f, ROOT_INO, name).err(), Some(want));
        assert_eq!(
            fs.rename(ROOT_INO, b"f", ROOT_INO, name, RenameFlags::NONE),
            Err(want)
        );
        assert_eq!(
            fs.rename(ROOT_INO, name, ROOT_INO, b"g", RenameFlags::NONE),
            Err(want)
        );
        assert_eq!(
            fs.revalidate(ROOT_INO, name, None, 0, false),
            Validity::Invalid
        );
    }
    // Nothing moved, nothing appeared outside or inside.
    assert!(d.path().join("f").exists());
    assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    // A 255-byte name is fine.
    let max = vec![b'y'; 255];
    assert_eq!(fs.lookup(ROOT_INO, &max).unwrap(), None);
    assert!(fs.create(ROOT_INO, &max, 0o600, ctx).is_ok());
}

#[test]
fn symlinks_are_returned_never_traversed() {
    let (d, fs) = setup();
    let outside = TempDir::new().unwrap();
    fs::write(outside.path().join("secret"), b"s").unwrap();
    let outside_mode = fs::metadata(outside.path()).unwrap().permissions().mode();
    symlink(outside.path(), d.path().join("out")).unwrap();
    symlink("../..", d.path().join("up")).unwrap();

    let out = lk(&fs, ROOT_INO, "out");
    assert_eq!(out.kind, FileType::Symlink);
    assert_eq!(out.size, outside.path().as_os_str().len() as u64);
    assert_eq!(
        fs.readlink(out.ino).unwrap(),
        outside.path().as_os_str().as_bytes()
    );
    // Looking a name up "inside" the link does not follow it.
    assert_eq!(fs.lookup(out.ino, b"secret"), Err(Errno::ENOTDIR));
    assert_eq!(fs.readdir(out.ino, 0, &mut |_| true), Err(Errno::ENOTDIR));
    assert_eq!(fs.open(out.ino, libc::O_RDONLY), Err(Errno::ELOOP));
    assert_eq!(
        fs.create(out.ino, b"x", 0o644, current()).err(),
        Some(Errno::ENOTDIR)
    );
    assert!(!outside.path().join("x").exists());
    // chmod/truncate would act on the target: refused.
    let chmod = SetAttr {
        perm: Some(0o777),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(out.ino, &chmod, current()), Err(Errno::ENOTSUP));
    let trunc = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(out.ino, &trunc, current()), Err(Errno::EINVAL));
    assert_eq!(fs::read(outside.path().join("secret")).unwrap(), b"s");
    assert_eq!(
        fs::metadata(outside.path()).unwrap().permissions().mode(),
        outside_mode
    );

    let up = lk(&fs, ROOT_INO, "up");
    assert_eq!(up.kind, FileType::Symlink);
    assert_eq!(fs.readlink(up.ino).unwrap(), b"../..");
    assert_eq!(fs.lookup(up.ino, b"etc"), Err(Errno::ENOTDIR));

    // readlink of a non-link is the host's EINVAL.
    let f = fs.create(ROOT_INO, b"f", 0o644, current()).unwrap();
    assert_eq!(fs.readlink(f.ino), Err(Errno::EINVAL));

    // Creating a symlink stores the target verbatim.
    let s = fs
        .symlink(ROOT_INO, b"made", b"/nowhere/at/all", current())
        .unwrap();
    assert_eq!(s.kind, FileType::Symlink);
    assert_eq!(
        fs::read_link(d.path().join("made")).unwrap(),
        PathBuf::from("/nowhere/at/all")
    );
    assert_eq!(fs.readlink(s.ino).unwrap(), b"/nowhere/at/all");
    assert_eq!(
        fs.symlink(ROOT_INO, b"made", b"x", current()).err(),
        Some(Errno::EEXIST)
    );
    assert_eq!(
        fs.symlink(ROOT_INO, b"nul", b"a\0b", current()).err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        fs.symlink(ROOT_INO, b"long", &vec![b'a'; 4096], current())
            .err(),
        Some(Errno::ENAMETOOLONG)
    );
}

#[test]
fn create_mkdir_mknod_make_host_objects() {
    let (d, fs) = setup();
    let ctx = current();
    let f = fs.create(ROOT_INO, b"f", 0o640, ctx).unwrap();
    assert_eq!(f.kind, FileType::Regular);
    assert_eq!(f.perm, 0o640);
    assert_eq!(f.size, 0);
    let m = fs::symlink_metadata(d.path().join("f")).unwrap();
    assert!(m.is_file());
    assert_eq!(m.permissions().mode() & 0o7777, 0o640);
    assert_eq!(lk(&fs, ROOT_INO, "f").ino, f.ino);

    // Requested bits survive the daemon's umask (the caller applied its own).
    let old = unsafe_umask(0o077);
    let wide = fs.mkdir(ROOT_INO, b"wide", 0o777, ctx);
    let widef = fs.create(ROOT_INO, b"widef", 0o666, ctx);
    unsafe_umask(old);
    assert_eq!(wide.unwrap().perm, 0o777);
    assert_eq!(widef.unwrap().perm, 0o666);
    assert_eq!(
        fs::metadata(d.path().join("wide"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o777
    );

    let sub = fs.mkdir(ROOT_INO, b"sub", 0o750, ctx).unwrap();
    assert_eq!(sub.kind, FileType::Directory);
    assert_eq!(sub.perm, 0o750);
    assert!(d.path().join("sub").is_dir());
    let inner = fs.create(sub.ino, b"inner", 0o600, ctx).unwrap();
    assert!(d.path().join("sub/inner").is_file());
    assert_eq!(lk(&fs, sub.ino, "inner").ino, inner.ino);

    let fifo = fs
        .mknod(ROOT_INO, b"fifo", FileType::Fifo, 0o600, 0, ctx)
        .unwrap();
    assert_eq!(fifo.kind, FileType::Fifo);
    assert!(fs::symlink_metadata(d.path().join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    let sock = fs
        .mknod(ROOT_INO, b"sock", FileType::Socket, 0o600, 0, ctx)
        .unwrap();
    assert_eq!(sock.kind, FileType::Socket);
    assert!(fs::symlink_metadata(d.path().join("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    let reg = fs
        .mknod(ROOT_INO, b"reg", FileType::Regular, 0o600, 0, ctx)
        .unwrap();
    assert_eq!(reg.kind, FileType::Regular);

    // Existing names: EEXIST, whatever the kind asked for.
    for name in [&b"f"[..], b"sub", b"fifo"] {
        assert_eq!(
            fs.create(ROOT_INO, name, 0o644, ctx).err(),
            Some(Errno::EEXIST)
        );
        assert_eq!(
            fs.mkdir(ROOT_INO, name, 0o755, ctx).err(),
            Some(Errno::EEXIST)
        );
    }
    // Creating inside a regular file: ENOTDIR, as the host says.
    assert_eq!(
        fs.create(f.ino, b"x", 0o644, ctx).err(),
        Some(Errno::ENOTDIR)
    );
    assert_eq!(
        fs.mkdir(f.ino, b"x", 0o755, ctx).err(),
        Some(Errno::ENOTDIR)
    );
    // mknod of a directory is the host's EPERM.
    assert_eq!(
        fs.mknod(ROOT_INO, b"d", FileType::Directory, 0o755, 0, ctx)
            .err(),
        Some(Errno::EPERM)
    );
}

fn unsafe_umask(mask: u32) -> u32 {
    // The umask is process-wide; other tests running meanwhile only see their
    // created modes narrowed, which the backend restores anyway.
    // SAFETY: umask cannot fail and has no memory arguments.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

#[test]
fn new_objects_belong_to_the_caller_when_root() {
    if Ctx::current().uid != 0 {
        return; // a non-root daemon keeps what it creates (module docs)
    }
    let (d, fs) = setup();
    let ctx = Ctx {
        uid: 1234,
        gid: 5678,
    };
    let f = fs.create(ROOT_INO, b"f", 0o644, ctx).unwrap();
    assert_eq!((f.uid, f.gid), (1234, 5678));
    let m = fs::metadata(d.path().join("f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    let s = fs.symlink(ROOT_INO, b"s", b"f", ctx).unwrap();
    assert_eq!((s.uid, s.gid), (1234, 5678));
    let m = fs::symlink_metadata(d.path().join("s")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));

    // In a set-group-ID directory the group is inherited, as locally.
    let sg = fs.mkdir(ROOT_INO, b"sg", 0o775, Ctx::ROOT).unwrap();
    let setgid = SetAttr {
        gid: Some(4242),
        ..SetAttr::default()
    };
    fs.setattr(sg.ino, &setgid, Ctx::ROOT).unwrap();
    let mode = SetAttr {
        perm: Some(0o2775),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(sg.ino, &mode, Ctx::ROOT).unwrap().perm, 0o2775);
    let inner = fs.create(sg.ino, b"inner", 0o644, ctx).unwrap();
    assert_eq!((inner.uid, inner.gid), (1234, 4242));
}

/// Run the same operation through the backend on tree A and directly on
/// the host on tree B (identical), and expect the same errno.
#[test]
fn errors_match_the_host() {
    let a = TempDir::new().unwrap();
    let b = TempDir::new().unwrap();
    for t in [a.path(), b.path()] {
        fs::write(t.join("file"), b"x").unwrap();
        fs::create_dir(t.join("empty")).unwrap();
        fs::create_dir(t.join("full")).unwrap();
        fs::write(t.join("full/child"), b"").unwrap();
        symlink("file", t.join("link")).unwrap();
    }
    let fs = Passthrough::with_options(a.path(), with_ttl(Duration::ZERO)).unwrap();
    let ctx = current();
    let file = lk(&fs, ROOT_INO, "file").ino;
    let full = lk(&fs, ROOT_INO, "full").ino;
    let bp = b.path();

    let none = RenameFlags::NONE;
    let cases: Vec<(&str, Errno, Errno)> = vec![
        (
            "unlink missing",
            fs.unlink(ROOT_INO, b"nope").unwrap_err(),
            errno_of(fs::remove_file(bp.join("nope"))),
        ),
        (
            "unlink dir",
            fs.unlink(ROOT_INO, b"empty").unwrap_err(),
            errno_of(fs::remove_file(bp.join("empty"))),
        ),
        (
            "rmdir file",
            fs.rmdir(ROOT_INO, b"file").unwrap_err(),
            errno_of(fs::remove_dir(bp.join("file"))),
        ),
        (
            "rmdir symlink",
            fs.rmdir(ROOT_INO, b"link").unwrap_err(),
            errno_of(fs::remove_dir(bp.join("link"))),
        ),
        (
            "rmdir non-empty",
            fs.rmdir(ROOT_INO, b"full").unwrap_err(),
            errno_of(fs::remove_dir(bp.join("full"))),
        ),
        (
            "rmdir missing",
            fs.rmdir(ROOT_INO, b"nope").unwrap_err(),
            errno_of(fs::remove_dir(bp.join("nope"))),
        ),
        (
            "mkdir existing",
            fs.mkdir(ROOT_INO, b"file", 0o755, ctx).unwrap_err(),
            errno_of(fs::create_dir(bp.join("file"))),
        ),
        (
            "create over a symlink",
            fs.create(ROOT_INO, b"link", 0o644, ctx).unwrap_err(),
            errno_of(
                fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(bp.join("link")),
            ),
        ),
        (
            "create under a file",
            fs.create(file, b"x", 0o644, ctx).unwrap_err(),
            errno_of(fs::write(bp.join("file/x"), b"")),
        ),
        (
            "rename missing",
            fs.rename(ROOT_INO, b"nope", ROOT_INO, b"x", none)
                .unwrap_err(),
            errno_of(fs::rename(bp.join("nope"), bp.join("x"))),
        ),
        (
            "rename dir over non-empty dir",
            fs.rename(ROOT_INO, b"empty", ROOT_INO, b"full", none)
                .unwrap_err(),
            errno_of(fs::rename(bp.join("empty"), bp.join("full"))),
        ),
        (
            "rename dir over file",
            fs.rename(ROOT_INO, b"empty", ROOT_INO, b"file", none)
                .unwrap_err(),
            errno_of(fs::rename(bp.join("empty"), bp.join("file"))),
        ),
        (
            "rename file over dir",
            fs.rename(ROOT_INO, b"file", ROOT_INO, b"empty", none)
                .unwrap_err(),
            errno_of(fs::rename(bp.join("file"), bp.join("empty"))),
        ),
        (
            "rename dir into itself",
            fs.rename(ROOT_INO, b"full", full, b"x", none).unwrap_err(),
            errno_of(fs::rename(bp.join("full"), bp.join("full/x"))),
        ),
        (
            "link a directory",
            fs.link(full, ROOT_INO, b"x").unwrap_err(),
            errno_of(fs::hard_link(bp.join("full"), bp.join("x"))),
        ),
        (
            "link onto existing",
            fs.link(file, ROOT_INO, b"empty").unwrap_err(),
            errno_of(fs::hard_link(bp.join("file"), bp.join("empty"))),
        ),
        (
            "readdir of a file",
            fs.readdir(file, 0, &mut |_| true).unwrap_err(),
            errno_of(fs::read_dir(bp.join("file"))),
        ),
    ];
    let expected = [
        Errno::ENOENT,
        Errno::EISDIR,
        Errno::ENOTDIR,
        Errno::ENOTDIR,
        Errno::ENOTEMPTY,
        Errno::ENOENT,
        Errno::EEXIST,
        Errno::EEXIST,
        Errno::ENOTDIR,
        Errno::ENOENT,
        Errno::ENOTEMPTY,
        Errno::ENOTDIR,
        Errno::EISDIR,
        Errno::EINVAL,
        Errno::EPERM,
        Errno::EEXIST,
        Errno::ENOTDIR,
    ];
    assert_eq!(cases.len(), expected.len());
    for ((what, ours, host), want) in cases.iter().zip(expected) {
        assert_eq!(ours, host, "{what}: backend vs host");
        assert_eq!(*ours, want, "{what}");
    }
    // The failed calls changed nothing.
    let listing = |p: &Path| {
        let mut v: Vec<_> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(listing(a.path()), listing(b.path()));
}

#[test]
fn unlink_and_rmdir_remove_host_entries() {
    let (d, fs) = setup();
    let ctx = current();
    let f = fs.create(ROOT_INO, b"f", 0o644, ctx).unwrap();
    fs.mkdir(ROOT_INO, b"d", 0o755, ctx).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    assert!(!d.path().join("f").exists());
    assert!(!d.path().join("d").exists());
    assert_eq!(fs.lookup(ROOT_INO, b"f").unwrap(), None);
    // The held inode is still readable until forgotten (nlink 0), as an
    // open-but-unlinked file is.
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 0);
    // Unlinking a symlink removes the link, not its target.
    fs::write(d.path().join("t"), b"t").unwrap();
    symlink("t", d.path().join("l")).unwrap();
    fs.unlink(ROOT_INO, b"l").unwrap();
    assert!(d.path().join("t").exists());
}

#[test]
fn rename_plain_noreplace_and_exchange() {
    let (d, fs) = setup();
    let p = d.path();
    fs::write(p.join("a"), b"A").unwrap();
    fs::write(p.join("b"), b"B").unwrap();
    fs::create_dir(p.join("dir")).unwrap();
    let dir = lk(&fs, ROOT_INO, "dir").ino;
    let a = lk(&fs, ROOT_INO, "a").ino;

    // Plain rename across directories keeps the inode.
    fs.rename(ROOT_INO, b"a", dir, b"a2", RenameFlags::NONE)
        .unwrap();
    assert_eq!(fs::read(p.join("dir/a2")).unwrap(), b"A");
    assert!(!p.join("a").exists());
    assert_eq!(lk(&fs, dir, "a2").ino, a);
    assert_eq!(fs.getattr(a).unwrap().size, 1);

    // Plain rename replaces.
    fs::write(p.join("c"), b"C").unwrap();
    fs.rename(ROOT_INO, b"c", ROOT_INO, b"b", RenameFlags::NONE)
        .unwrap();
    assert_eq!(fs::read(p.join("b")).unwrap(), b"C");

    // NOREPLACE refuses an existing target and leaves both alone.
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert_eq!(
        fs.rename(dir, b"a2", ROOT_INO, b"b", noreplace),
        Err(Errno::EEXIST)
    );
    assert_eq!(fs::read(p.join("b")).unwrap(), b"C");
    assert_eq!(fs::read(p.join("dir/a2")).unwrap(), b"A");
    fs.rename(dir, b"a2", ROOT_INO, b"fresh", noreplace)
        .unwrap();
    assert_eq!(fs::read(p.join("fresh")).unwrap(), b"A");

    // EXCHANGE swaps atomically, even a file with a directory.
    let exchange = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    fs.rename(ROOT_INO, b"fresh", ROOT_INO, b"b", exchange)
        .unwrap();
    assert_eq!(fs::read(p.join("fresh")).unwrap(), b"C");
    assert_eq!(fs::read(p.join("b")).unwrap(), b"A");
    fs.rename(ROOT_INO, b"b", ROOT_INO, b"dir", exchange)
        .unwrap();
    assert!(p.join("b").is_dir());
    assert_eq!(fs::read(p.join("dir")).unwrap(), b"A");
    assert_eq!(lk(&fs, ROOT_INO, "b").ino, dir);
    assert_eq!(lk(&fs, ROOT_INO, "dir").ino, a);
    // Both names must exist.
    assert_eq!(
        fs.rename(ROOT_INO, b"b", ROOT_INO, b"nope", exchange),
        Err(Errno::ENOENT)
    );
    // Both flags at once is the host's EINVAL.
    let both = RenameFlags {
        noreplace: true,
        exchange: true,
    };
    assert_eq!(
        fs.rename(ROOT_INO, b"b", ROOT_INO, b"dir", both),
        Err(Errno::EINVAL)
    );
}

#[test]
fn hard_links_share_one_inode() {
    let (d, fs) = setup();
    let ctx = current();
    let f = fs.create(ROOT_INO, b"f", 0o644, ctx).unwrap();
    let sub = fs.mkdir(ROOT_INO, b"sub", 0o755, ctx).unwrap();
    let before = fs.lookup_count(f.ino).unwrap();
    let l = fs.link(f.ino, sub.ino, b"g").unwrap();
    assert_eq!(l.ino, f.ino);
    assert_eq!(l.nlink, 2);
    assert_eq!(fs.lookup_count(f.ino), Some(before + 1));
    assert_eq!(
        fs::metadata(d.path().join("sub/g")).unwrap().ino(),
        fs::metadata(d.path().join("f")).unwrap().ino()
    );
    assert_eq!(lk(&fs, sub.ino, "g").ino, f.ino);
    // A link made on the host is recognised as the same inode too.
    fs::hard_link(d.path().join("f"), d.path().join("h")).unwrap();
    assert_eq!(lk(&fs, ROOT_INO, "h").ino, f.ino);
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 3);

    // A symlink can be hard-linked; the new name is a link too.
    let s = fs.symlink(ROOT_INO, b"s", b"target", ctx).unwrap();
    let s2 = fs.link(s.ino, ROOT_INO, b"s2").unwrap();
    assert_eq!(s2.kind, FileType::Symlink);
    assert_eq!(
        fs::read_link(d.path().join("s2")).unwrap(),
        PathBuf::from("target")
    );
}

#[test]
fn setattr_chmod_chown_truncate_utimens() {
    let (d, fs) = setup();
    let p = d.path().join("f");
    fs::write(&p, b"0123456789").unwrap();
    let f = lk(&fs, ROOT_INO, "f").ino;
    let ctx = current();

    let a = fs
        .setattr(
            f,
            &SetAttr {
                perm: Some(0o4751),
                ..SetAttr::default()
            },
            ctx,
        )
        .unwrap();
    assert_eq!(a.perm, 0o4751);
    assert_eq!(
        fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
        0o4751
    );

    if ctx.uid == 0 {
        let a = fs
            .setattr(
                f,
                &SetAttr {
                    uid: Some(4321),
                    gid: Some(8765),
                    ..SetAttr::default()
                },
                ctx,
            )
            .unwrap();
        assert_eq!((a.uid, a.gid), (4321, 8765));
        let m = fs::metadata(&p).unwrap();
        assert_eq!((m.uid(), m.gid()), (4321, 8765));
        // gid alone leaves uid.
        let a = fs
            .setattr(
                f,
                &SetAttr {
                    gid: Some(1),
                    ..SetAttr::default()
                },
                ctx,
            )
            .unwrap();
        assert_eq!((a.uid, a.gid), (4321, 1));
    }

    let a = fs
        .setattr(
            f,
            &SetAttr {
                size: Some(3),
                ..SetAttr::default()
            },
            ctx,
        )
        .unwrap();
    assert_eq!(a.size, 3);
    assert_eq!(fs::read(&p).unwrap(), b"012");
    let a = fs
        .setattr(
            f,
            &SetAttr {
                size: Some(5),
                ..SetAttr::default()
            },
            ctx,
        )
        .unwrap();
    assert_eq!(a.size, 5);
    assert_eq!(fs::read(&p).unwrap(), b"012\0\0");

    let at = Timespec {
        sec: 1_000_000_000,
        nsec: 123_456_789,
    };
    let mt = Timespec {
        sec: 1_200_000_000,
        nsec: 5,
    };
    let a = fs
        .setattr(
            f,
            &SetAttr {
                atime: Some(SetTime::At(at)),
                mtime: Some(SetTime::At(mt)),
                ..SetAttr::default()
            },
            ctx,
        )
        .unwrap();
    assert_eq!((a.atime, a.mtime), (at, mt));
    let m = fs::metadata(&p).unwrap();
    assert_eq!((m.atime(), m.atime_nsec()), (1_000_000_000, 123_456_789));
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_200_000_000, 5));
    // mtime alone leaves atime; Now moves it to the present.
    let a = fs
        .setattr(
            f,
            &SetAttr {
                mtime: Some(SetTime::Now),
                ..SetAttr::default()
            },
            ctx,
        )
        .unwrap();
    assert_eq!(a.atime, at);
    assert!(a.mtime.sec > mt.sec);

    // A bad nanosecond count is the host's EINVAL.
    let bad = Timespec {
        sec: 0,
        nsec: 2_000_000_000,
    };
    assert_eq!(
        fs.setattr(
            f,
            &SetAttr {
                atime: Some(SetTime::At(bad)),
                ..SetAttr::default()
            },
            ctx
        ),
        Err(Errno::EINVAL)
    );

    // Truncating a directory: EISDIR, as truncate(2).
    fs::create_dir(d.path().join("dir")).unwrap();
    let dir = lk(&fs, ROOT_INO, "dir").ino;
    assert_eq!(
        fs.setattr(
            dir,
            &SetAttr {
                size: Some(0),
                ..SetAttr::default()
            },
            ctx
        ),
        Err(Errno::EISDIR)
    );
    // Times of a symlink are the link's own (lutimes).
    symlink("f", d.path().join("l")).unwrap();
    let l = lk(&fs, ROOT_INO, "l").ino;
    let a = fs
        .setattr(
            l,
            &SetAttr {
                mtime: Some(SetTime::At(at)),
                ..SetAttr::default()
            },
            ctx,
        )
        .unwrap();
    assert_eq!(a.mtime, at);
    assert_eq!(
        fs::symlink_metadata(d.path().join("l")).unwrap().mtime(),
        at.sec
    );
    assert_ne!(fs::metadata(&p).unwrap().mtime(), at.sec);
}

#[test]
fn open_read_write_flush_fsync_release() {
    let (d, fs) = setup();
    let p = d.path().join("f");
    fs::write(&p, b"hello world").unwrap();
    let f = lk(&fs, ROOT_INO, "f").ino;

    let r = fs.open(f, libc::O_RDONLY).unwrap();
    assert_ne!(r, 0);
    let mut buf = [0u8; 5];
    assert_eq!(fs.read(f, r, 6, &mut buf).unwrap(), 5);
    assert_eq!(&buf, b"world");
    let mut big = [0u8; 64];
    assert_eq!(fs.read(f, r, 0, &mut big).unwrap(), 11);
    assert_eq!(fs.read(f, r, 100, &mut big).unwrap(), 0);
    // Offsets beyond what off_t holds: the host's EINVAL, no panic.
    assert_eq!(fs.read(f, r, u64::MAX, &mut buf), Err(Errno::EINVAL));
    assert_eq!(fs.read(f, r, 1 << 63, &mut buf), Err(Errno::EINVAL));
    // A read-only handle refuses writes with the host's EBADF.
    assert_eq!(fs.write(f, r, 0, b"x"), Err(Errno::EBADF));

    let w = fs.open(f, libc::O_RDWR).unwrap();
    assert_ne!(w, r);
    assert_eq!(fs.handle_count(), 2);
    assert_eq!(fs.write(f, w, 6, b"there").unwrap(), 5);
    fs.flush(f, w).unwrap();
    fs.fsync(f, w, false).unwrap();
    fs.fsync(f, w, true).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"hello there");
    // Writes past the end extend the file (with a hole).
    assert_eq!(fs.write(f, w, 20, b"!").unwrap(), 1);
    assert_eq!(fs.getattr(f).unwrap().size, 21);
    assert_eq!(fs.read(f, r, 0, &mut big).unwrap(), 21);
    assert_eq!(&big[..12], b"hello there\0");

    // A handle belongs to its inode.
    fs::write(d.path().join("g"), b"").unwrap();
    let g = lk(&fs, ROOT_INO, "g").ino;
    assert_eq!(fs.read(g, r, 0, &mut buf), Err(Errno::EBADF));
    assert_eq!(fs.read(f, 999_999, 0, &mut buf), Err(Errno::EBADF));
    assert_eq!(fs.release(g, r), Err(Errno::EBADF));

    fs.release(f, r).unwrap();
    fs.release(f, w).unwrap();
    assert_eq!(fs.release(f, w), Err(Errno::EBADF));
    assert_eq!(fs.read(f, r, 0, &mut buf), Err(Errno::EBADF));
    assert_eq!(fs.handle_count(), 0);

    // O_TRUNC truncates; O_CREAT/O_EXCL are ignored for an existing object.
    let t = fs
        .open(
            f,
            libc::O_WRONLY | libc::O_TRUNC | libc::O_CREAT | libc::O_EXCL,
        )
        .unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"");
    fs.release(f, t).unwrap();
    // O_APPEND writes at the end whatever the offset.
    fs::write(&p, b"abc").unwrap();
    let ap = fs.open(f, libc::O_WRONLY | libc::O_APPEND).unwrap();
    fs.write(f, ap, 0, b"def").unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"abcdef");
    fs.release(f, ap).unwrap();

    // Directories open read-only; for writing they are EISDIR.
    fs::create_dir(d.path().join("dir")).unwrap();
    let dir = lk(&fs, ROOT_INO, "dir").ino;
    let dh = fs.open(dir, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
    assert_eq!(fs.read(dir, dh, 0, &mut buf), Err(Errno::EISDIR));
    fs.release(dir, dh).unwrap();
    assert_eq!(fs.open(dir, libc::O_WRONLY), Err(Errno::EISDIR));
    assert_eq!(
        fs.open(f, libc::O_RDONLY | libc::O_DIRECTORY),
        Err(Errno::ENOTDIR)
    );

    // Access checks are the host's; root bypasses them, so only a non-root
    // run can see EACCES.
    if Ctx::current().uid != 0 {
        fs::set_permissions(&p, fs::Permissions::from_mode(0o000)).unwrap();
        assert_eq!(fs.open(f, libc::O_RDONLY), Err(Errno::EACCES));
    }
}

#[test]
fn readdir_lists_the_host_directory_with_dot_entries() {
    let (d, fs) = setup();
    let p = d.path();
    fs::write(p.join("file"), b"").unwrap();
    fs::create_dir(p.join("sub")).unwrap();
    symlink("file", p.join("link")).unwrap();
    let file = lk(&fs, ROOT_INO, "file").ino;
    let sub = lk(&fs, ROOT_INO, "sub").ino;

    let all = list_from(&fs, ROOT_INO, 0);
    assert_eq!(
        names(&all),
        [".", "..", "file", "link", "sub"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
    assert_eq!((all[0].name.as_slice(), all[0].offset), (&b"."[..], 1));
    assert_eq!((all[1].name.as_slice(), all[1].offset), (&b".."[..], 2));
    assert_eq!(all[0].ino, ROOT_INO);
    assert_eq!(all[1].ino, ROOT_INO);
    let by_name: BTreeMap<_, _> = all.iter().map(|e| (e.name.clone(), e)).collect();
    assert_eq!(by_name[&b"file".to_vec()].kind, FileType::Regular);
    assert_eq!(by_name[&b"file".to_vec()].ino, file);
    assert_eq!(by_name[&b"sub".to_vec()].kind, FileType::Directory);
    assert_eq!(by_name[&b"sub".to_vec()].ino, sub);
    assert_eq!(by_name[&b"link".to_vec()].kind, FileType::Symlink);
    // Not looked up yet: the number a lookup will give (the host's).
    let link_ino = by_name[&b"link".to_vec()].ino;
    assert_eq!(
        link_ino,
        fs::symlink_metadata(p.join("link")).unwrap().ino()
    );
    assert_eq!(lk(&fs, ROOT_INO, "link").ino, link_ino);
    // Offsets are distinct, so each names one resume point.
    let offs: BTreeSet<u64> = all.iter().map(|e| e.offset).collect();
    assert_eq!(offs.len(), all.len());

    // A subdirectory's `..` is its parent, `.` itself.
    let subl = list_from(&fs, sub, 0);
    assert_eq!(names(&subl).len(), 2);
    assert_eq!(subl[0].ino, sub);
    assert_eq!(subl[1].ino, ROOT_INO);

    // Resuming after each entry in turn yields exactly the rest.
    for (i, e) in all.iter().enumerate() {
        let rest = list_from(&fs, ROOT_INO, e.offset);
        assert_eq!(names(&rest), names(&all[i + 1..]), "after {:?}", e.name);
    }
    // A cookie the host never gave: its error (EINVAL for a negative
    // offset), not a panic.
    assert_eq!(
        fs.readdir(ROOT_INO, u64::MAX, &mut |_| true),
        Err(Errno::EINVAL)
    );
    // emit returning false stops the listing at once.
    let mut seen = 0;
    fs.readdir(ROOT_INO, 0, &mut |_| {
        seen += 1;
        seen < 3
    })
    .unwrap();
    assert_eq!(seen, 3);
}

fn resume_survives_concurrent_changes(base: &Path) {
    let fs = Passthrough::with_options(base, with_ttl(Duration::ZERO)).unwrap();
    for i in 0..300 {
        fs::write(base.join(format!("keep{i:03}")), b"").unwrap();
        fs::write(base.join(format!("gone{i:03}")), b"").unwrap();
    }
    // Page through the directory 7 entries at a time; between pages, delete
    // the `gone` names and create new ones.
    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut offset = 0;
    let mut page = 0;
    loop {
        let mut batch = Vec::new();
        fs.readdir(ROOT_INO, offset, &mut |e| {
            batch.push(e);
            batch.len() < 7
        })
        .unwrap();
        if batch.is_empty() {
            break;
        }
        offset = batch.last().unwrap().offset;
        seen.extend(batch.into_iter().map(|e| e.name));
        let _ = fs::remove_file(base.join(format!("gone{page:03}")));
        fs::write(base.join(format!("new{page:03}")), b"").unwrap();
        page += 1;
    }
    let mut uniq = seen.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), seen.len(), "an entry was listed twice");
    for i in 0..300 {
        let keep = format!("keep{i:03}").into_bytes();
        assert!(seen.contains(&keep), "keep{i:03} skipped");
    }
    assert!(seen.contains(&b".".to_vec()) && seen.contains(&b"..".to_vec()));
}

#[test]
fn readdir_offsets_survive_concurrent_changes_on_disk() {
    let d = TempDir::new().unwrap();
    resume_survives_concurrent_changes(d.path());
}

#[test]
fn readdir_offsets_survive_concurrent_changes_on_tmpfs() {
    let Ok(d) = TempDir::new_in("/dev/shm") else {
        // Said, not silent: a machine without /dev/shm does not run this.
        eprintln!("SKIP readdir_offsets_survive_concurrent_changes_on_tmpfs: no /dev/shm");
        return;
    };
    resume_survives_concurrent_changes(d.path());
}

#[test]
fn statfs_is_the_hosts() {
    let (d, fs) = setup();
    let s = fs.statfs().unwrap();
    let c = CString::new(d.path().as_os_str().as_bytes()).unwrap();
    // SAFETY: all-zero is a valid statvfs; `c` is NUL-terminated.
    let mut host: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `host` is a valid out-buffer.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut host) }, 0);
    assert_eq!(s.blocks, host.f_blocks);
    assert_eq!(s.bsize as u64, host.f_bsize);
    assert_eq!(s.frsize as u64, host.f_frsize);
    assert_eq!(s.files, host.f_files);
    assert_eq!(s.namelen, 255);
}

#[test]
fn revalidation_within_ttl_is_valid_without_asking() {
    let (d, fs) = setup(); // TTL of an hour
    assert!(fs.needs_revalidate());
    let c = fs.dir_cookie(ROOT_INO);
    assert_eq!(fs.lookup(ROOT_INO, b"x").unwrap(), None);
    fs::write(d.path().join("x"), b"").unwrap();
    // The host changed, but the entry is young: trusted, in rcu mode too.
    assert_eq!(
        fs.revalidate(ROOT_INO, b"x", None, c, true),
        Validity::Valid
    );
    assert_eq!(
        fs.revalidate(ROOT_INO, b"x", None, c, false),
        Validity::Valid
    );
    // Cookie 0 (no time recorded) is never fresh.
    assert_eq!(
        fs.revalidate(ROOT_INO, b"x", None, 0, true),
        Validity::NeedBlocking
    );
    assert_eq!(
        fs.revalidate(ROOT_INO, b"x", None, 0, false),
        Validity::Invalid
    );
}

#[test]
fn revalidation_sees_host_changes_after_the_ttl() {
    let (d, fs) = setup_ttl(Duration::ZERO);
    let p = d.path();
    let ctx = current();

    // Negative entry: valid while missing, invalid once created on the host.
    let c = fs.dir_cookie(ROOT_INO);
    assert_eq!(fs.lookup(ROOT_INO, b"n").unwrap(), None);
    assert_eq!(
        fs.revalidate(ROOT_INO, b"n", None, c, true),
        Validity::NeedBlocking
    );
    assert_eq!(
        fs.revalidate(ROOT_INO, b"n", None, c, false),
        Validity::Valid
    );
    fs::write(p.join("n"), b"").unwrap();
    assert_eq!(
        fs.revalidate(ROOT_INO, b"n", None, c, false),
        Validity::Invalid
    );

    // Positive entry: valid while unchanged.
    let c = fs.dir_cookie(ROOT_INO);
    let f = fs.create(ROOT_INO, b"f", 0o644, ctx).unwrap();
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f.ino), c, false),
        Validity::Valid
    );
    // Removed on the host: invalid.
    fs::remove_file(p.join("f")).unwrap();
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f.ino), c, false),
        Validity::Invalid
    );
    // Replaced by another file of the same name: invalid (other inode).
    fs::write(p.join("f"), b"").unwrap();
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f.ino), c, false),
        Validity::Invalid
    );
    let f2 = lk(&fs, ROOT_INO, "f");
    assert_ne!(f2.ino, f.ino);
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f2.ino), c, false),
        Validity::Valid
    );
    // Attributes changed on the host (ctime moves): invalid, so the dcache
    // refetches them; a fresh lookup makes it valid again.
    fs::set_permissions(p.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f2.ino), c, false),
        Validity::Invalid
    );
    assert_eq!(lk(&fs, ROOT_INO, "f").perm, 0o600);
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f2.ino), c, false),
        Validity::Valid
    );
    // Content written on the host (mtime moves): invalid.
    fs::write(p.join("f"), b"more").unwrap();
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f2.ino), c, false),
        Validity::Invalid
    );
    assert_eq!(fs.getattr(f2.ino).unwrap().size, 4);
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f2.ino), c, false),
        Validity::Valid
    );
    // Renamed away on the host and something else put in its place.
    fs::rename(p.join("f"), p.join("g")).unwrap();
    fs::create_dir(p.join("f")).unwrap();
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f2.ino), c, false),
        Validity::Invalid
    );
    assert_eq!(lk(&fs, ROOT_INO, "g").ino, f2.ino);
    // A forgotten or unknown inode / directory is never valid.
    assert_eq!(
        fs.revalidate(ROOT_INO, b"g", Some(424_242), c, false),
        Validity::Invalid
    );
    assert_eq!(
        fs.revalidate(424_242, b"g", None, c, false),
        Validity::Invalid
    );
}

#[test]
fn revalidation_with_a_short_ttl() {
    let (d, fs) = setup_ttl(Duration::from_millis(20));
    let c = fs.dir_cookie(ROOT_INO);
    let f = fs.create(ROOT_INO, b"f", 0o644, current()).unwrap();
    fs::remove_file(d.path().join("f")).unwrap();
    // Young: trusted even though the host removed it (that is the TTL's
    // point), unless the clock already passed the TTL on a slow machine.
    let young = fs.revalidate(ROOT_INO, b"f", Some(f.ino), c, true);
    assert!(matches!(young, Validity::Valid | Validity::NeedBlocking));
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f.ino), c, true),
        Validity::NeedBlocking
    );
    assert_eq!(
        fs.revalidate(ROOT_INO, b"f", Some(f.ino), c, false),
        Validity::Invalid
    );
}

#[test]
fn forget_closes_the_held_descriptor() {
    let (d, fs) = setup_held();
    let p = d.path();
    fs::write(p.join("a"), b"").unwrap();
    fs::create_dir(p.join("dir")).unwrap();
    fs::write(p.join("dir/b"), b"").unwrap();
    let base = fds_inside(p);
    assert_eq!(base, 1, "the root's fd");

    let a = lk(&fs, ROOT_INO, "a").ino;
    let dir = lk(&fs, ROOT_INO, "dir").ino;
    let b = lk(&fs, dir, "b").ino;
    lk(&fs, ROOT_INO, "a"); // a repeat holds no second fd
    assert_eq!(fds_inside(p), base + 3);
    assert_eq!(fs.inode_count(), 4);

    fs.forget(a, u64::MAX);
    assert_eq!(fds_inside(p), base + 2);
    assert_eq!(fs.getattr(a), Err(Errno::ESTALE));
    fs.forget(b, u64::MAX);
    fs.forget(dir, u64::MAX);
    assert_eq!(fds_inside(p), base);
    assert_eq!(fs.inode_count(), 1);
    // Unknown numbers and the root are ignored.
    fs.forget(a, u64::MAX);
    fs.forget(123_456, u64::MAX);
    fs.forget(ROOT_INO, u64::MAX);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().kind, FileType::Directory);
    assert_eq!(fds_inside(p), base);

    // Looked up again: the same number (the host's) for the same object.
    let a2 = lk(&fs, ROOT_INO, "a").ino;
    assert_eq!(a2, a);
    assert_eq!(a2, fs::metadata(p.join("a")).unwrap().ino());
    assert_eq!(fs.lookup_count(a2), Some(1));

    // An open handle keeps its own descriptor past forget; release closes it.
    let h = fs.open(a2, libc::O_RDONLY).unwrap();
    assert_eq!(fds_inside(p), base + 2);
    fs.forget(a2, u64::MAX);
    assert_eq!(fds_inside(p), base + 1);
    // The handle is still usable by number/ino pairing until released.
    let mut buf = [0u8; 1];
    assert_eq!(fs.read(a2, h, 0, &mut buf).unwrap(), 0);
    fs.release(a2, h).unwrap();
    assert_eq!(fds_inside(p), base);

    // Dropping the backend closes everything, the root included.
    lk(&fs, ROOT_INO, "dir");
    drop(fs);
    assert_eq!(fds_inside(p), 0);
}

#[test]
fn concurrent_lookups_agree_and_forgets_are_safe() {
    let (d, fs) = setup_held();
    for i in 0..8 {
        fs::write(d.path().join(format!("f{i}")), b"").unwrap();
    }
    let fs = std::sync::Arc::new(fs);
    // Many threads looking up the same names get one number per host inode.
    let inos: Vec<Vec<Ino>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let fs = fs.clone();
                s.spawn(move || {
                    (0..200)
                        .map(|k| lk(&fs, ROOT_INO, &format!("f{}", k % 8)).ino)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for k in 0..200 {
        let first = inos[0][k];
        assert!(inos.iter().all(|v| v[k] == first));
    }
    assert_eq!(fs.inode_count(), 9);
    let total: u64 = (0..8).map(|i| fs.lookup_count(inos[0][i]).unwrap()).sum();
    assert_eq!(total, 800);

    // Lookups, getattrs and forgets racing: only ESTALE (a forgotten number)
    // may appear, never a wrong object or a panic.
    std::thread::scope(|s| {
        for t in 0..3 {
            let fs = fs.clone();
            s.spawn(move || {
                for k in 0..500 {
                    let name = format!("f{}", (k + t) % 8);
                    let a = lk(&fs, ROOT_INO, &name);
                    match fs.getattr(a.ino) {
                        Ok(g) => assert_eq!(g.kind, FileType::Regular),
                        Err(e) => assert_eq!(e, Errno::ESTALE),
                    }
                    if k % 3 == 0 {
                        fs.forget(a.ino, u64::MAX);
                    }
                }
            });
        }
    });
    for i in 0..8 {
        if let Some(a) = fs.lookup(ROOT_INO, format!("f{i}").as_bytes()).unwrap() {
            fs.forget(a.ino, u64::MAX);
        }
    }
    assert_eq!(fs.inode_count(), 1);
    assert_eq!(fds_inside(d.path()), 1);
}

#[test]
fn file_handles_bound_the_descriptors() {
    let dir = TempDir::new().unwrap();
    let mut o = with_ttl(Duration::from_secs(3600));
    o.max_fds = 8;
    let fs = Passthrough::with_options(dir.path(), o).unwrap();
    if !fs.fd_stats().file_handles {
        println!("SKIPPED file_handles_bound_the_descriptors (no open_by_handle_at here)");
        return;
    }
    fs::create_dir(dir.path().join("d")).unwrap();
    for i in 0..200 {
        fs::write(dir.path().join(format!("d/f{i}")), format!("{i}")).unwrap();
    }
    let d = lk(&fs, ROOT_INO, "d").ino;
    let inos: Vec<Ino> = (0..200).map(|i| lk(&fs, d, &format!("f{i}")).ino).collect();
    assert_eq!(fs.inode_count(), 202);
    // The root's descriptor, the mount descriptor handles open through,
    // and at most 8 cached ones.
    assert!(fds_inside(dir.path()) <= 10, "{}", fds_inside(dir.path()));
    // Every inode still reaches its own file, reopened from its handle.
    for (i, &ino) in inos.iter().enumerate() {
        let fh = fs.open(ino, libc::O_RDONLY).unwrap();
        let mut buf = [0u8; 8];
        let n = fs.read(ino, fh, 0, &mut buf).unwrap();
        assert_eq!(&buf[..n], i.to_string().as_bytes());
        fs.release(ino, fh).unwrap();
        assert!(fs.fd_stats().cached <= 8, "{:?}", fs.fd_stats());
    }
    // A file deleted and its number reused by the host is a new object,
    // which gets a number of its own while the old entry is still held.
    fs::remove_file(dir.path().join("d/f0")).unwrap();
    let mut reused = None;
    for k in 0..64 {
        let p = dir.path().join(format!("d/new{k}"));
        fs::write(&p, b"new").unwrap();
        let host_ino = fs::metadata(&p).unwrap().ino();
        if host_ino == inos[0] {
            reused = Some(format!("new{k}"));
            break;
        }
    }
    if let Some(name) = reused {
        let a = lk(&fs, d, &name);
        assert_ne!(a.ino, inos[0], "a reused host number must not alias");
        assert_eq!(a.size, 3);
        fs.forget(a.ino, u64::MAX);
    }
    for &ino in &inos {
        fs.forget(ino, u64::MAX);
    }
    fs.forget(d, u64::MAX);
    assert_eq!(fs.inode_count(), 1);
    assert_eq!(fs.fd_stats().cached, 0, "{:?}", fs.fd_stats());
}

#[test]
fn devices_can_be_made_by_root() {
    if Ctx::current().uid != 0 {
        return;
    }
    let (d, fs) = setup();
    // /dev/null's numbers, 1:3, in FUSE's 32-bit encoding.
    let n = fs
        .mknod(
            ROOT_INO,
            b"null",
            FileType::CharDevice,
            0o666,
            0x103,
            Ctx::ROOT,
        )
        .unwrap();
    assert_eq!(n.kind, FileType::CharDevice);
    assert_eq!(n.rdev, 0x103);
    let m = fs::symlink_metadata(d.path().join("null")).unwrap();
    assert!(m.file_type().is_char_device());
    assert_eq!(m.rdev(), libc::makedev(1, 3));
}

#[test]
fn construction_errors_are_the_hosts() {
    let d = TempDir::new().unwrap();
    fs::write(d.path().join("file"), b"").unwrap();
    assert_eq!(
        Passthrough::new(&d.path().join("file")).err(),
        Some(Errno::ENOTDIR)
    );
    assert_eq!(
        Passthrough::new(&d.path().join("missing")).err(),
        Some(Errno::ENOENT)
    );
    let nul = PathBuf::from(std::ffi::OsStr::from_bytes(b"/tmp/a\0b"));
    assert_eq!(Passthrough::new(&nul).err(), Some(Errno::EINVAL));
    // The root given may itself be a symlink to a directory (resolved once).
    symlink(d.path(), d.path().join("via")).ok();
    let fs = Passthrough::new(&d.path().join("via")).unwrap();
    assert_eq!(lk(&fs, ROOT_INO, "file").kind, FileType::Regular);
}

/// forget is counted: a lookup that raced a forget keeps the entry alive.
#[test]
fn counted_forget_keeps_raced_lookups() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let fs = dcache::fs::passthrough::Passthrough::new(dir.path()).unwrap();
    let root = fs.root();
    let a = fs.lookup(root, b"f").unwrap().unwrap().ino;
    let b = fs.lookup(root, b"f").unwrap().unwrap().ino;
    assert_eq!(a, b);
    assert_eq!(fs.lookup_count(a), Some(2));
    fs.forget(a, 1);
    assert!(fs.getattr(a).is_ok(), "one lookup is still outstanding");
    fs.forget(a, 1);
    assert_eq!(fs.lookup_count(a), None);
    assert!(fs.getattr(a).is_err());
}
