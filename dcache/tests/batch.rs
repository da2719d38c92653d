//! `AsCred::stat_many` / `lstat_many` against one `stat` / `lstat` after
//! another: the same answers on random trees (symlinks relative, absolute,
//! dangling and looping; `.` and `..`; missing names; trailing slashes;
//! directories a caller may not search, so EACCES mid-walk; names and paths
//! too long for the fast path), cold and warm, as root and as users, with
//! every reference given back.

use std::sync::Arc;

use dcache::fs::memfs::MemFs;
use dcache::fs::SetAttr;
use dcache::vfs::LANES;
use dcache::{At, Cred, Errno, Vfs};

mod oracle;
use oracle::Rng;

/// A random tree: directories of random modes and owners, files, symlinks.
/// Returns the Vfs and every name made (for building paths).
fn random_tree(rng: &mut Rng) -> (Vfs, Vec<String>) {
    let fs = Arc::new(MemFs::new());
    let mut dirs = vec![String::new()];
    let mut names: Vec<String> = Vec::new();
    for i in 0..24 {
        let parent = dirs[rng.below(dirs.len())].clone();
        let name = if i % 7 == 3 {
            format!("{parent}long_directory_name_past_the_inline_forty_bytes_{i}")
        } else {
            format!("{parent}d{i}")
        };
        fs.mkdir_p(&name, 0o755).unwrap();
        names.push(name.clone());
        dirs.push(format!("{name}/"));
    }
    for i in 0..40 {
        let parent = &dirs[rng.below(dirs.len())];
        let name = format!("{parent}f{i}");
        fs.write_file(&name, &vec![b'x'; i]).unwrap();
        names.push(name);
    }
    for i in 0..16 {
        let parent = dirs[rng.below(dirs.len())].clone();
        let target = match rng.below(5) {
            0 => format!("/{}", names[rng.below(names.len())]),
            1 => "../".repeat(rng.below(3)) + &names[rng.below(names.len())],
            2 => format!("missing{i}"),
            3 => format!("l{}", rng.below(16)), // may loop
            _ => names[rng.below(names.len())]
                .rsplit('/')
                .next()
                .unwrap()
                .to_string(),
        };
        let name = format!("{parent}l{i}");
        fs.make_symlink(&name, &target).unwrap();
        names.push(name);
    }
    let vfs = Vfs::new(fs).unwrap();
    // Modes and owners: some directories closed to others, some
    // search-only, some group-only.
    for d in dirs.iter().skip(1) {
        let (perm, uid, gid) = match rng.below(6) {
            0 => (0o700, 1000, 1000),
            1 => (0o711, 0, 0),
            2 => (0o750, 0, 1000),
            3 => (0o700, 0, 0),
            _ => (0o755, 0, 0),
        };
        let set = SetAttr {
            perm: Some(perm),
            uid: Some(uid),
            gid: Some(gid),
            ..SetAttr::default()
        };
        vfs.as_root()
            .setattr(At::Root, d.trim_end_matches('/'), &set)
            .unwrap();
    }
    (vfs, names)
}

/// A random path over `names`: a name, possibly with `.`, `..`, missing
/// or over-long components, extra and trailing slashes, a leading slash.
fn random_path(rng: &mut Rng, names: &[String]) -> Vec<u8> {
    let base = names[rng.below(names.len())].clone();
    let mut parts: Vec<String> = base.split('/').map(str::to_string).collect();
    match rng.below(12) {
        0 => parts.push("..".into()),
        1 => parts.insert(rng.below(parts.len() + 1), ".".into()),
        2 => parts.insert(rng.below(parts.len() + 1), "..".into()),
        3 => parts.push("nope".into()),
        4 => parts.insert(rng.below(parts.len() + 1), "gone".into()),
        5 => parts.push("x".repeat(256)), // ENAMETOOLONG
        6 => parts.insert(0, "..".into()),
        _ => {}
    }
    let mut p = parts.join(if rng.below(10) == 0 { "//" } else { "/" });
    match rng.below(10) {
        0 => p.push('/'),
        1 => p.insert(0, '/'),
        2 => p = format!("{}{p}", "./".repeat(130)), // past the padded copy
        _ => {}
    }
    match rng.below(60) {
        0 => Vec::new(),
        1 => b"/".to_vec(),
        2 => b"a\0b".to_vec(),
        _ => p.into_bytes(),
    }
}

fn creds() -> Vec<Cred> {
    vec![
        Cred::ROOT,
        Cred::user(1000, 1000, &[]),
        Cred::user(1001, 1001, &[1000]),
        Cred::user(1002, 1002, &[]),
    ]
}

/// Batch and singles on `vfs` for every credential, `rounds` times (the
/// first may run on a cold cache), in `order` (batch first or singles
/// first).
fn compare(
    vfs: &Vfs,
    paths: &[Vec<u8>],
    rounds: usize,
    batch_first: bool,
    seen: &mut std::collections::HashSet<Option<Errno>>,
) {
    for cred in creds() {
        let me = vfs.as_cred(&cred);
        for round in 0..rounds {
            for follow in [true, false] {
                let mut batch = vec![Err(Errno::EINVAL); paths.len()];
                let mut single = Vec::new();
                let many = |out: &mut [dcache::Result<dcache::Attr>]| {
                    if follow {
                        me.stat_many(At::Root, paths, out)
                    } else {
                        me.lstat_many(At::Root, paths, out)
                    }
                };
                let one = |p: &Vec<u8>| {
                    if follow {
                        me.stat(At::Root, p)
                    } else {
                        me.lstat(At::Root, p)
                    }
                };
                if batch_first {
                    many(&mut batch).unwrap();
                    single.extend(paths.iter().map(one));
                } else {
                    single.extend(paths.iter().map(one));
                    many(&mut batch).unwrap();
                }
                for (i, p) in paths.iter().enumerate() {
                    seen.insert(batch[i].as_ref().err().copied());
                    assert_eq!(
                        batch[i],
                        single[i],
                        "path {:?} (cred {}, round {round}, follow {follow})",
                        String::from_utf8_lossy(p),
                        cred.fsuid
                    );
                }
            }
        }
    }
}

#[test]
fn batch_answers_as_one_stat_after_another() {
    let mut seen = std::collections::HashSet::new();
    for seed in 1..=12u64 {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let (vfs, names) = random_tree(&mut rng);
        let n = [1, LANES - 1, LANES, LANES + 1, 3 * LANES + 5, 200][seed as usize % 6];
        let paths: Vec<Vec<u8>> = (0..n).map(|_| random_path(&mut rng, &names)).collect();
        let c = vfs.counters();
        compare(&vfs, &paths, 2, seed % 2 == 0, &mut seen);
        drop(vfs);
        assert_eq!(c.dentries(), 0, "every dentry freed (seed {seed})");
        assert_eq!(c.inodes(), 0, "every inode freed (seed {seed})");
    }
    // The trees and paths reach every kind of answer.
    for e in [
        None,
        Some(Errno::ENOENT),
        Some(Errno::EACCES),
        Some(Errno::ENOTDIR),
        Some(Errno::ELOOP),
        Some(Errno::ENAMETOOLONG),
        Some(Errno::EINVAL),
    ] {
        assert!(seen.contains(&e), "no answer {e:?} among {seen:?}");
    }
}

#[test]
fn eacces_mid_walk_and_references_balance() {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("open/deep", 0o755).unwrap();
    fs.write_file("open/deep/file", b"x").unwrap();
    fs.mkdir_p("closed/inner", 0o755).unwrap();
    fs.write_file("closed/inner/file", b"y").unwrap();
    let vfs = Vfs::new(fs.clone()).unwrap();
    let set = SetAttr {
        perm: Some(0o700),
        ..SetAttr::default()
    };
    vfs.as_root().setattr(At::Root, "closed", &set).unwrap();
    let paths = [
        "open/deep/file",
        "closed/inner/file",
        "closed",
        "closed/nope",
        "open/deep/file/",
        "open/../closed/inner",
    ];
    let user = Cred::user(1000, 1000, &[]);
    let mut out = vec![Err(Errno::EINVAL); paths.len()];
    for _ in 0..2 {
        vfs.as_cred(&user)
            .stat_many(At::Root, &paths, &mut out)
            .unwrap();
        assert_eq!(out[0].as_ref().map(|a| a.size), Ok(1));
        assert_eq!(out[1], Err(Errno::EACCES));
        assert!(out[2].is_ok());
        assert_eq!(out[3], Err(Errno::EACCES));
        assert_eq!(out[4], Err(Errno::ENOTDIR));
        assert_eq!(out[5], Err(Errno::EACCES));
    }
    vfs.as_root().stat_many(At::Root, &paths, &mut out).unwrap();
    assert!(out[1].is_ok() && out[5].is_ok());
    assert_eq!(out[3], Err(Errno::ENOENT));
    // Every count as after the same stats one at a time.
    let twin = Vfs::new(fs.clone()).unwrap();
    let root = Cred::ROOT;
    for cred in [&user, &root] {
        for p in paths {
            let _ = twin.as_cred(cred).stat(At::Root, p);
        }
    }
    for p in [
        "",
        "closed",
        "closed/inner",
        "closed/inner/file",
        "open/deep",
    ] {
        let count = |v: &Vfs| match p {
            "" => v.root().count(),
            _ => v.as_root().lookup(At::Root, p, true).unwrap().count(),
        };
        assert_eq!(count(&vfs), count(&twin), "{p}");
    }
    // A length mismatch is EINVAL and writes nothing.
    let mut short = [Err(Errno::ENOSYS)];
    assert_eq!(
        vfs.as_root().stat_many(At::Root, &paths, &mut short),
        Err(Errno::EINVAL)
    );
    assert_eq!(short[0], Err(Errno::ENOSYS));
    let c = vfs.counters();
    drop(vfs);
    assert_eq!(c.dentries(), 0);
}

#[test]
fn relative_to_a_directory_and_across_vfs() {
    let fs = Arc::new(MemFs::new());
    fs.mkdir_p("a/b", 0o755).unwrap();
    fs.write_file("a/b/f", b"12").unwrap();
    let vfs = Vfs::new(fs.clone()).unwrap();
    let other = Vfs::new(fs).unwrap();
    let a = vfs.as_root().lookup(At::Root, "a", true).unwrap();
    let paths = ["b/f", "/a/b/f", "../a/b", "b/../b/f"];
    let mut out = vec![Err(Errno::EINVAL); paths.len()];
    vfs.as_root()
        .stat_many(At::from(&a), &paths, &mut out)
        .unwrap();
    for (p, r) in paths.iter().zip(&out) {
        assert_eq!(*r, vfs.as_root().stat(At::from(&a), p), "{p}");
    }
    other
        .as_root()
        .stat_many(At::from(&a), &paths, &mut out)
        .unwrap();
    assert_eq!(out[0], Err(Errno::EXDEV));
    assert!(out[1].is_ok(), "an absolute path ignores the directory");
    // The same with references: the batch's own, then one at a time.
    let mut refs: Vec<_> = paths.iter().map(|_| Err(Errno::EINVAL)).collect();
    vfs.as_root()
        .lookup_many(At::from(&a), &paths, true, &mut refs)
        .unwrap();
    for (p, r) in paths.iter().zip(&refs) {
        assert_eq!(
            found(r),
            found(&vfs.as_root().lookup(At::from(&a), p, true)),
            "{p}"
        );
    }
    other
        .as_root()
        .lookup_many(At::from(&a), &paths, true, &mut refs)
        .unwrap();
    assert!(matches!(refs[0], Err(Errno::EXDEV)));
    assert!(refs[1].is_ok(), "an absolute path ignores the directory");
    drop(refs);
    drop(a);
    let c = vfs.counters();
    drop((vfs, other));
    assert_eq!(c.dentries(), 0, "every reference given back");
}

#[test]
fn cached_paths_are_answered_in_rcu_mode() {
    let fs = Arc::new(MemFs::new());
    let mut paths = Vec::new();
    for a in 0..6 {
        for b in 0..6 {
            fs.mkdir_p(&format!("d{a}/d{b}"), 0o755).unwrap();
            for c in 0..6 {
                let p = format!("d{a}/d{b}/f{c}");
                fs.write_file(&p, b"").unwrap();
                paths.push(p);
            }
        }
    }
    let vfs = Vfs::new(fs).unwrap();
    let me = vfs.as_root();
    for p in &paths {
        me.stat(At::Root, p).unwrap();
    }
    let c = vfs.counters();
    let (walks, unlazied, restarts) = (c.ref_walks(), c.unlazied(), c.restarts());
    let mut out = vec![Err(Errno::EINVAL); paths.len()];
    for _ in 0..3 {
        me.stat_many(At::Root, &paths, &mut out).unwrap();
        assert!(out.iter().all(|r| r.is_ok()));
    }
    assert_eq!(
        (c.ref_walks(), c.unlazied(), c.restarts()),
        (walks, unlazied, restarts),
        "a cached path left rcu mode"
    );
    let mut refs: Vec<_> = paths.iter().map(|_| Err(Errno::EINVAL)).collect();
    me.lookup_many(At::Root, &paths, true, &mut refs).unwrap();
    assert!(refs
        .iter()
        .all(|r| r.as_ref().is_ok_and(|d| d.count() == 1)));
    assert_eq!(
        (c.ref_walks(), c.unlazied(), c.restarts()),
        (walks, unlazied, restarts),
        "a cached path's lookup left rcu mode"
    );
}

/// What a lookup answered, comparable across two calls: the dentry (by
/// address) and whether it is negative, or the errno.
fn found(r: &dcache::Result<dcache::DentryRef<'_>>) -> Result<(usize, bool), Errno> {
    r.as_ref()
        .map(|d| (d.dentry() as *const _ as usize, d.is_negative()))
        .map_err(|e| *e)
}

#[test]
fn lookup_many_answers_as_one_lookup_after_another() {
    let mut seen = std::collections::HashSet::new();
    for seed in 1..=8u64 {
        let mut rng = Rng(0x51ed_2701_aa31_9c4d ^ seed);
        let (vfs, names) = random_tree(&mut rng);
        let n = [LANES + 1, 3 * LANES + 5, 64, 7][seed as usize % 4];
        let paths: Vec<Vec<u8>> = (0..n).map(|_| random_path(&mut rng, &names)).collect();
        // And single names in one directory, as READDIRPLUS asks.
        let dir = vfs.as_root().lookup(At::Root, &names[0], true).unwrap();
        let mut in_dir: Vec<Vec<u8>> = names
            .iter()
            .filter_map(|p| p.strip_prefix(&format!("{}/", names[0])))
            .filter(|rest| !rest.contains('/'))
            .map(|s| s.as_bytes().to_vec())
            .collect();
        in_dir.push(b"missing".to_vec());
        let c = vfs.counters();
        for cred in creds() {
            let me = vfs.as_cred(&cred);
            for (at, paths) in [(At::Root, &paths), (At::from(&dir), &in_dir)] {
                for follow in [true, false] {
                    for round in 0..2 {
                        let mut many: Vec<_> = paths.iter().map(|_| Err(Errno::EINVAL)).collect();
                        me.lookup_many(at, paths, follow, &mut many).unwrap();
                        for (i, p) in paths.iter().enumerate() {
                            let one = me.lookup(at, p, follow);
                            seen.insert(found(&many[i]).map(|(_, neg)| neg).err());
                            assert_eq!(
                                found(&many[i]),
                                found(&one),
                                "path {:?} (cred {}, round {round}, follow {follow})",
                                String::from_utf8_lossy(p),
                                cred.fsuid
                            );
                            if let (Ok(a), Ok(b)) = (&many[i], &one) {
                                assert_eq!(a.count(), b.count(), "both references counted");
                            }
                        }
                    }
                }
            }
        }
        drop(dir);
        drop(vfs);
        assert_eq!(c.dentries(), 0, "every reference given back (seed {seed})");
        assert_eq!(c.inodes(), 0, "every inode freed (seed {seed})");
    }
    for e in [
        None,
        Some(Errno::EACCES),
        Some(Errno::ENOTDIR),
        Some(Errno::ELOOP),
    ] {
        assert!(seen.contains(&e), "no answer {e:?} among {seen:?}");
    }
}
