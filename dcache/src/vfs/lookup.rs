//! Path resolution for callers: `stat`, `lstat` and `lookup`. rcu-walk
//! ([`super::rcu_walk`]) runs first; when it gives up, ref-walk
//! ([`super::ref_walk`]) redoes the path with references. Both take their
//! components from [`super::path`].

use super::path::check_path;
use super::rcu_walk::{inode_of, RcuWalk};
use super::{At, DentryRef, StatMode, Vfs};
use crate::cred::Cred;
use crate::dentry::Dentry;
use crate::errno::{Errno, Result};
use crate::fs::Attr;
use crate::inode::Inode;
use crate::rcu::RcuGuard;

impl Vfs {
    /// `stat` on behalf of `cred`.
    #[inline]
    pub(crate) fn stat_as(
        &self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        follow: bool,
        mode: StatMode,
    ) -> Result<Attr> {
        check_path(path)?;
        match self.try_stat_rcu(at, path, follow, mode, cred) {
            Some(r) => r,
            None => self.stat_ref(at, path, follow, cred),
        }
    }

    /// `stat` by ref-walk, once rcu-walk gave up.
    #[cold]
    #[inline(never)]
    pub(crate) fn stat_ref(
        &self,
        at: At<'_>,
        path: &[u8],
        follow: bool,
        cred: &Cred,
    ) -> Result<Attr> {
        let sb = self.sb();
        let d = self.walk_ref(at, path, follow, false, cred)?;
        let inode = d.inode().ok_or(Errno::ENOENT)?;
        let a = inode.attr();
        if sb.revalidate {
            return self.refresh_attr(inode, a);
        }
        Ok(a)
    }

    /// The rcu-walk half of `stat`: `None` when it had to give up (the
    /// caller then redoes the walk with references).
    #[inline(always)]
    pub(crate) fn try_stat_rcu(
        &self,
        at: At<'_>,
        path: &[u8],
        follow: bool,
        mode: StatMode,
        cred: &Cred,
    ) -> Option<Result<Attr>> {
        let g = self.sb().rcu.read_lock();
        self.try_stat_rcu_in(&g, at, path, follow, mode, cred)
    }

    /// [`Vfs::try_stat_rcu`] inside a read section the caller holds.
    #[inline(always)]
    pub(crate) fn try_stat_rcu_in(
        &self,
        g: &RcuGuard<'_>,
        at: At<'_>,
        path: &[u8],
        follow: bool,
        mode: StatMode,
        cred: &Cred,
    ) -> Option<Result<Attr>> {
        let sb = self.sb();
        match self.walk_rcu(g, at, path, follow, false, cred) {
            RcuWalk::Err(e) => return Some(Err(e)),
            RcuWalk::Fallback => {}
            RcuWalk::Done(dd, seq) => {
                match mode {
                    StatMode::RefFree => {
                        if let Some(inode) = inode_of(dd) {
                            if let Some(a) = inode.try_attr() {
                                if !dd.d_seq.read_retry(seq) {
                                    if sb.revalidate {
                                        // Without a reference the inode may
                                        // be dying and already forgotten by
                                        // the backend (a name replaced and
                                        // invalidated meanwhile): an error
                                        // is retried in ref-walk, which
                                        // holds what it asks about.
                                        return self.refresh_attr(inode, a).ok().map(Ok);
                                    }
                                    return Some(Ok(a));
                                }
                            }
                        }
                    }
                    StatMode::LockRef => {
                        // Linux's complete_walk: a real reference on the
                        // last component, then dput.
                        if let Some(r) = DentryRef::try_get(dd) {
                            if !dd.d_seq.read_retry(seq) {
                                let Some(inode) = r.inode() else {
                                    return Some(Err(Errno::ENOENT));
                                };
                                let a = inode.attr();
                                if sb.revalidate {
                                    return Some(self.refresh_attr(inode, a));
                                }
                                return Some(Ok(a));
                            }
                        }
                    }
                }
            }
        }
        None
    }

    /// For backends whose truth can change underneath: ask for fresh
    /// attributes and update the cached copy only when they differ.
    fn refresh_attr(&self, inode: &Inode, cached: Attr) -> Result<Attr> {
        let a = self.sb().fs.getattr(inode.ino)?;
        if a != cached && a.kind == inode.kind() {
            inode.set_attr(&a);
        }
        Ok(a)
    }

    /// [`AsCred::lookup`](crate::AsCred::lookup) on behalf of `cred`.
    pub(crate) fn lookup_as(
        &self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        follow: bool,
    ) -> Result<DentryRef<'_>> {
        check_path(path)?;
        let sb = self.sb();
        {
            let g = sb.rcu.read_lock();
            match self.walk_rcu(&g, at, path, follow, false, cred) {
                RcuWalk::Err(e) => return Err(e),
                RcuWalk::Fallback => {}
                RcuWalk::Done(dd, seq) => {
                    if let Some(r) = DentryRef::try_get(dd) {
                        if !dd.d_seq.read_retry(seq) && !r.is_negative() {
                            return Ok(r);
                        }
                    }
                }
            }
        }
        self.walk_ref(at, path, follow, false, cred)
    }

    /// [`AsCred::lookup`](crate::AsCred::lookup) without a reference, for callers that can pin the
    /// result by other means (the FUSE daemon: a node the kernel already
    /// holds). Resolves `path` from `at` (a final symlink is not followed)
    /// in rcu-walk only, then, still inside the read section, hands the
    /// positive dentry and its validated attributes to `claim`, which
    /// returns `None` to decline. The dentry is only guaranteed to exist
    /// until `claim` returns.
    ///
    /// `None`: no answer here (the walk gave up, the backend revalidates
    /// names, a writer interfered, or `claim` declined); the caller then
    /// falls back to [`AsCred::lookup`](crate::AsCred::lookup). `Some(Err)`:
    /// a definite error, as `lookup` would return it (EXDEV for an
    /// [`At::Dir`] of another `Vfs`).
    ///
    /// This is how a frontend answers a lookup without touching a shared
    /// cache line: `claim` may pin the result by its own means (dcache-fuse
    /// counts one more kernel lookup on the inode's
    /// [`frontend_word`](crate::inode::Inode::frontend_word) with one
    /// compare-and-swap, which succeeds only while the node it publishes
    /// holds a reference). The `&Dentry` and the attributes must not
    /// escape `claim` unless so pinned.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use dcache::fs::memfs::MemFs;
    /// # use dcache::{At, Cred, Vfs};
    /// # let fs = Arc::new(MemFs::new());
    /// # fs.write_file("f", b"x")?;
    /// let vfs = Vfs::new(fs)?;
    /// vfs.as_root().stat(At::Root, "f")?; // cache it
    /// let size = vfs.lookup_rcu_with(&Cred::ROOT, At::Root, b"f", |_, a| Some(a.size));
    /// // Answered lock-free, or `None`: then ask `lookup`.
    /// assert!(matches!(size, Some(Ok(1)) | None));
    /// # Ok::<(), dcache::Errno>(())
    /// ```
    #[inline]
    pub fn lookup_rcu_with<R>(
        &self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        claim: impl FnOnce(&Dentry, &Attr) -> Option<R>,
    ) -> Option<Result<R>> {
        if let Err(e) = check_path(path) {
            return Some(Err(e));
        }
        let sb = self.sb();
        // A revalidating backend must be asked about the name and for fresh
        // attributes: the ref-walk path does that.
        if sb.revalidate {
            return None;
        }
        let g = sb.rcu.read_lock();
        match self.walk_rcu(&g, at, path, false, false, cred) {
            RcuWalk::Err(e) => Some(Err(e)),
            RcuWalk::Fallback => None,
            RcuWalk::Done(dd, seq) => {
                let a = inode_of(dd)?.try_attr()?;
                // The attributes belong to the name only if the dentry did
                // not change since the walk sampled it.
                if dd.d_seq.read_retry(seq) {
                    return None;
                }
                let r = claim(dd, &a)?;
                drop(g);
                Some(Ok(r))
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod fast_path_tests {
    use std::mem::MaybeUninit;
    use std::sync::Arc;

    use crate::dentry::name_hash;
    use crate::fs::PATH_MAX;
    use crate::vfs::path::{CompSource, Components, OnePiece, FAST_PATH_MAX};

    use super::*;
    use crate::fs::memfs::MemFs;

    /// A small deterministic generator (xorshift64*), so failures replay.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// A random path of `words`, joined by 1-3 slashes, sometimes with
    /// leading and trailing slashes.
    fn random_path(r: &mut Rng, words: &[Vec<u8>], max_len: usize) -> Vec<u8> {
        let mut p = Vec::new();
        if r.below(4) == 0 {
            p.push(b'/');
        }
        for i in 0..1 + r.below(6) {
            if i > 0 {
                p.extend(std::iter::repeat_n(b'/', 1 + r.below(3)));
            }
            p.extend_from_slice(&words[r.below(words.len())]);
        }
        if r.below(4) == 0 {
            p.extend(std::iter::repeat_n(b'/', 1 + r.below(2)));
        }
        p.truncate(max_len);
        p
    }

    type Seen = (Vec<u8>, bool, bool, u32, u64);

    fn drain(src: &mut impl CompSource) -> Vec<Seen> {
        let mut v = Vec::new();
        while let Some(c) = src.next_comp() {
            v.push((c.name.to_vec(), c.last, c.must_dir, c.hash, c.first));
        }
        v
    }

    #[test]
    fn padded_scan_agrees_with_general_iterator() {
        // Lengths around the word size and its multiples, dots, and names
        // that end exactly where the path does.
        let mut words: Vec<Vec<u8>> = [1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31]
            .iter()
            .map(|&n| (0..n).map(|i| b'a' + (i % 26) as u8).collect())
            .collect();
        words.extend([
            b".".to_vec(),
            b"..".to_vec(),
            b"...".to_vec(),
            b".x".to_vec(),
        ]);
        let mut r = Rng(0x9E37_79B9_7F4A_7C15);
        // Under miri (which checks every unchecked load of the padded copy)
        // a few hundred paths are enough.
        let n = if cfg!(miri) { 300 } else { 20_000 };
        for _ in 0..n {
            let path = random_path(&mut r, &words, FAST_PATH_MAX);
            let mut store = MaybeUninit::uninit();
            let mut one = OnePiece::new(&path, &mut store);
            let mut gen = Components::new(&path);
            let a = drain(&mut one);
            let b = drain(&mut gen);
            assert_eq!(a, b, "path {:?}", String::from_utf8_lossy(&path));
            for (name, ..) in &a {
                assert_eq!(
                    a.iter().find(|s| &s.0 == name).map(|s| s.3),
                    Some(name_hash(name))
                );
            }
        }
        // `rest` after a component keeps the slash that follows it.
        let mut store = MaybeUninit::uninit();
        let mut one = OnePiece::new(b"ab//cd/", &mut store);
        assert_eq!(
            one.next_comp().map(|c| c.name.to_vec()),
            Some(b"ab".to_vec())
        );
        assert_eq!(one.rest(), b"//cd/");
        assert_eq!(
            one.next_comp().map(|c| (c.last, c.must_dir)),
            Some((true, true))
        );
        assert_eq!(one.rest(), b"/");
    }

    /// What ref-walk says `path` is: the inode number or the errno.
    fn by_ref_walk(vfs: &Vfs, path: &[u8], follow: bool) -> Result<u64> {
        check_path(path)?;
        let d = vfs.walk_ref(At::Root, path, follow, false, crate::vfs::root_cred())?;
        d.inode().map(|i| i.ino).ok_or(Errno::ENOENT)
    }

    #[test]
    fn rcu_walk_agrees_with_ref_walk() {
        let vfs = Vfs::new(Arc::new(MemFs::new())).unwrap();
        for d in ["d1", "d1/d2", "eightchr", "sixteen_bytes_xx"] {
            vfs.as_root().mkdir(At::Root, d, 0o755).unwrap();
        }
        for f in ["f", "d1/f", "d1/d2/f", "eightchr/f"] {
            vfs.as_root().create(At::Root, f, 0o644).unwrap();
        }
        let long_name = vec![b'n'; 250];
        let mut long_file = b"d1/".to_vec();
        long_file.extend_from_slice(&long_name);
        vfs.as_root().create(At::Root, &long_file, 0o644).unwrap();
        for (link, target) in [
            ("l_file", "d1/f"),
            ("l_dir", "d1"),
            ("l_abs", "/d1/d2"),
            ("l_loop", "l_loop"),
            ("l_dangle", "nope"),
            ("l_dot", "."),
            ("d1/l_up", ".."),
            ("d1/l_slash", "d2/"),
            ("l_chain", "l_dir/l_up/l_file"),
        ] {
            vfs.as_root().symlink(target, At::Root, link).unwrap();
        }
        let mut words: Vec<Vec<u8>> = [
            "d1",
            "d2",
            "f",
            "eightchr",
            "sixteen_bytes_xx",
            "l_file",
            "l_dir",
            "l_abs",
            "l_loop",
            "l_dangle",
            "l_dot",
            "l_up",
            "l_slash",
            "l_chain",
            "missing",
            ".",
            "..",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        words.push(long_name);
        words.push(vec![b'x'; 300]);
        let mut r = Rng(0x0123_4567_89AB_CDEF);
        let (mut answered, mut total) = (0, 0);
        for i in 0..6_000 {
            // Mostly short paths (the padded fast path), some long ones.
            let max = if i % 5 == 0 {
                PATH_MAX + 100
            } else {
                FAST_PATH_MAX
            };
            let path = random_path(&mut r, &words, max);
            if path.is_empty() {
                continue;
            }
            for follow in [true, false] {
                let want = by_ref_walk(&vfs, &path, follow);
                // ref-walk cached what it saw; rcu-walk may now answer.
                let rcu = vfs.try_stat_rcu(
                    At::Root,
                    &path,
                    follow,
                    StatMode::RefFree,
                    crate::vfs::root_cred(),
                );
                total += 1;
                if let Some(got) = rcu {
                    answered += 1;
                    assert_eq!(
                        got.map(|a| a.ino),
                        want,
                        "rcu-walk of {:?} (follow {follow})",
                        String::from_utf8_lossy(&path)
                    );
                }
                let full = if follow {
                    vfs.as_root().stat(At::Root, &path)
                } else {
                    vfs.as_root().lstat(At::Root, &path)
                };
                assert_eq!(full.map(|a| a.ino), want);
            }
        }
        // The comparison means something only if rcu-walk mostly answered.
        assert!(
            answered * 10 > total * 8,
            "rcu-walk answered {answered} of {total}"
        );
    }
}
