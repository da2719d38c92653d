//! Path resolution for callers: `stat`, `lstat` and `lookup`, each one
//! walk ([`super::namei`]) that reads its answer inside rcu mode when it
//! can and otherwise finishes in ref mode where rcu mode stopped.

use std::mem::MaybeUninit;

use super::namei::{inode_of, RefWalk, WalkFlags, Walked};
use super::path::check_path;
use super::{At, DentryRef, StatMode, Vfs};
use crate::cred::Cred;
use crate::dentry::Dentry;
use crate::errno::{Errno, Result};
use crate::fs::Attr;
use crate::inode::Inode;
use crate::rcu::RcuGuard;

impl Vfs {
    /// `stat` on behalf of `cred`. A cached path is answered in rcu mode
    /// from the cached attributes, without a backend call.
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
        let mut a = MaybeUninit::uninit();
        let w = {
            let g = self.sb().rcu.read_lock();
            match self.stat_rcu_in(&g, cred, at, path, follow, mode, &mut a) {
                // SAFETY: an rcu-mode answer wrote the attributes.
                Walked::Rcu(()) => return Ok(unsafe { a.assume_init() }),
                Walked::Err(e) => return Err(e),
                Walked::Unlazied(w) => w,
            }
        };
        self.stat_ref(w, cred, follow)
    }

    /// The end of a `stat` that rcu mode did not answer, outside the read
    /// section.
    #[cold]
    #[inline(never)]
    pub(crate) fn stat_ref(&self, w: RefWalk<'_, '_>, cred: &Cred, follow: bool) -> Result<Attr> {
        let d = w.finish(self, cred, WalkFlags::follow(follow))?;
        let inode = d.inode().ok_or(Errno::ENOENT)?;
        let a = inode.attr();
        if self.sb().revalidate {
            return self.refresh_attr(inode, a);
        }
        Ok(a)
    }

    /// The rcu-mode part of `stat` inside a read section the caller holds:
    /// `Rcu(())` once the attributes, validated, are in `out` (written in
    /// place: an `Attr` is a dozen words, and every move of it through the
    /// walk's result would cost as many instructions), or where to go on in
    /// ref mode.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stat_rcu_in<'v, 'g, 'p>(
        &'v self,
        g: &'g RcuGuard<'_>,
        cred: &Cred,
        at: At<'g>,
        path: &'p [u8],
        follow: bool,
        mode: StatMode,
        out: &mut MaybeUninit<Attr>,
    ) -> Walked<'v, 'p, ()>
    where
        'v: 'g,
    {
        let flags = WalkFlags::follow(follow);
        match mode {
            StatMode::RefFree => {
                let read = |dd: &'g Dentry| {
                    let i = inode_of(g, dd)?;
                    out.write(i.try_attr()?);
                    Some(i)
                };
                match self.walk_rcu(g, cred, at, path, flags, read) {
                    Walked::Rcu(inode) => {
                        if self.sb().revalidate {
                            // Without a reference the inode may be dying and
                            // already forgotten by the backend (a name
                            // replaced and invalidated meanwhile): an error
                            // is retried in ref mode, which holds what it
                            // asks about.
                            // SAFETY: `read` wrote it before answering.
                            let cached = unsafe { out.assume_init_read() };
                            return match self.refresh_attr(inode, cached) {
                                Ok(a) => {
                                    out.write(a);
                                    Walked::Rcu(())
                                }
                                Err(_) => self.restart(at, path),
                            };
                        }
                        Walked::Rcu(())
                    }
                    Walked::Err(e) => Walked::Err(e),
                    Walked::Unlazied(w) => Walked::Unlazied(w),
                }
            }
            // What Linux does: take and drop a LockRef reference on the
            // last component (complete_walk + dput).
            StatMode::LockRef => {
                match self.walk_rcu(g, cred, at, path, flags, DentryRef::try_get) {
                    Walked::Rcu(r) => {
                        let Some(inode) = r.inode() else {
                            return Walked::Err(Errno::ENOENT);
                        };
                        let a = inode.attr();
                        if self.sb().revalidate {
                            return match self.refresh_attr(inode, a) {
                                Ok(a) => {
                                    out.write(a);
                                    Walked::Rcu(())
                                }
                                Err(e) => Walked::Err(e),
                            };
                        }
                        out.write(a);
                        Walked::Rcu(())
                    }
                    Walked::Err(e) => Walked::Err(e),
                    Walked::Unlazied(w) => Walked::Unlazied(w),
                }
            }
        }
    }

    /// For backends whose truth can change underneath: ask for fresh
    /// attributes and update the cached copy only when they differ.
    fn refresh_attr(&self, inode: &Inode, cached: Attr) -> Result<Attr> {
        let a = self.sb().fs.getattr(inode.ino)?;
        if a != cached && a.kind == inode.kind() {
            inode.set_attr(&a);
            if a.ctime != cached.ctime {
                // Changed underneath (a host's setfacl moves the ctime
                // too): read its ACL again.
                self.sb().forget_acl(inode);
            }
        }
        Ok(a)
    }

    /// [`AsCred::lookup`](crate::AsCred::lookup) on behalf of `cred`: a
    /// counted reference, never negative.
    pub(crate) fn lookup_as(
        &self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        follow: bool,
    ) -> Result<DentryRef<'_>> {
        check_path(path)?;
        match self.walk(
            cred,
            at,
            path,
            WalkFlags::follow(follow),
            DentryRef::try_get,
        )? {
            Ok(d) | Err(d) => Ok(d),
        }
    }

    /// [`AsCred::lookup`](crate::AsCred::lookup) of `path` from `at` (a
    /// final symlink is not followed) for callers that can pin the result
    /// by other means (the FUSE daemon: a node the kernel already holds):
    /// when rcu mode resolves the name, `claim` gets the positive dentry,
    /// its inode (loaded inside the section) and its validated attributes,
    /// still inside the read section (the dentry and inode are only
    /// guaranteed to exist until `claim` returns), and `Ok(Ok(r))` is its
    /// answer. When `claim` declines (`None`), rcu mode stops, or the
    /// backend revalidates names, the walk goes on with references where it
    /// stood, and `Ok(Err(d))` is the counted reference
    /// [`AsCred::lookup`](crate::AsCred::lookup) would return: the name is
    /// walked once either way. Errors as `lookup`'s (EXDEV for an
    /// [`At::Dir`] of another `Vfs`).
    ///
    /// This is how a frontend answers a lookup without touching a shared
    /// cache line: `claim` may pin the result by its own means (dcache-fuse
    /// counts one more kernel lookup on the inode's
    /// [`frontend_word`](crate::inode::Inode::frontend_word) with one
    /// compare-and-swap, which succeeds only while the node it publishes
    /// holds a reference). The `&Dentry`, `&Inode` and attributes must not
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
    /// let r = vfs.lookup_rcu_with(&Cred::ROOT, At::Root, b"f", |_, _, a| Some(a.size))?;
    /// match r {
    ///     Ok(size) => assert_eq!(size, 1),        // answered lock-free
    ///     Err(d) => assert_eq!(d.attr().unwrap().size, 1), // a counted reference
    /// }
    /// # Ok::<(), dcache::Errno>(())
    /// ```
    #[inline]
    pub fn lookup_rcu_with<R>(
        &self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        claim: impl FnOnce(&Dentry, &Inode, &Attr) -> Option<R>,
    ) -> Result<std::result::Result<R, DentryRef<'_>>> {
        check_path(path)?;
        let flags = WalkFlags::follow(false);
        // A revalidating backend must be asked about the name and for fresh
        // attributes: ref mode does that.
        if self.sb().revalidate {
            return self.walk_ref(at, path, flags, cred).map(Err);
        }
        let w = {
            let g = self.sb().rcu.read_lock();
            // The attributes are written in place (see `stat_rcu_in`).
            let mut a = MaybeUninit::uninit();
            let read = |dd| {
                let i = inode_of(&g, dd)?;
                a.write(i.try_attr()?);
                Some((dd, i))
            };
            match self.walk_rcu(&g, cred, at, path, flags, read) {
                Walked::Rcu((dd, i)) => {
                    // SAFETY: `read` wrote the attributes before answering.
                    if let Some(r) = claim(dd, i, unsafe { a.assume_init_ref() }) {
                        return Ok(Ok(r));
                    }
                    if let Some(d) = DentryRef::try_get(dd) {
                        return Ok(Err(d));
                    }
                    RefWalk::start(self, at, path)?
                }
                Walked::Err(e) => return Err(e),
                Walked::Unlazied(w) => w,
            }
        };
        w.finish(self, cred, flags).map(Err)
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
        // The rest after a component keeps the slash that follows it; a
        // rewind goes back to the start of the component returned last.
        let path = b"ab//cd/";
        let mut store = MaybeUninit::uninit();
        let mut one = OnePiece::new(path, &mut store);
        assert_eq!(
            one.next_comp().map(|c| c.name.to_vec()),
            Some(b"ab".to_vec())
        );
        assert_eq!(&path[one.rest_start()..], b"//cd/");
        assert_eq!(
            one.next_comp().map(|c| (c.last, c.must_dir)),
            Some((true, true))
        );
        assert_eq!(&path[one.rest_start()..], b"/");
        one.rewind();
        assert_eq!(&path[one.rest_start()..], b"cd/");
        let mut gen = Components::new(path);
        gen.next_comp();
        gen.next_comp();
        gen.rewind();
        assert_eq!(
            gen.next_comp().map(|c| c.name.to_vec()),
            Some(b"cd".to_vec())
        );
    }

    /// What ref-walk says `path` is: the inode number or the errno.
    fn by_ref_walk(vfs: &Vfs, path: &[u8], follow: bool) -> Result<u64> {
        check_path(path)?;
        let d = vfs.walk_ref(
            At::Root,
            path,
            WalkFlags::follow(follow),
            crate::vfs::root_cred(),
        )?;
        d.inode().map(|i| i.ino).ok_or(Errno::ENOENT)
    }

    /// The one walk's two modes share every per-component rule (`step`);
    /// what they can still disagree on is how each looks a name up (the
    /// table under sequence counts vs `lookup_one`), follows a link (the
    /// inode's cached target vs `read_link`), takes `..`, and reads the
    /// path (the padded fast source vs the general one). Compare them.
    #[test]
    fn rcu_mode_agrees_with_ref_mode() {
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
                // ref mode cached what it saw; rcu mode may now answer.
                let rcu = {
                    let g = vfs.sb().rcu.read_lock();
                    let cred = crate::vfs::root_cred();
                    let mut a = MaybeUninit::uninit();
                    let mode = StatMode::RefFree;
                    match vfs.stat_rcu_in(&g, cred, At::Root, &path, follow, mode, &mut a) {
                        // SAFETY: an rcu-mode answer wrote the attributes.
                        Walked::Rcu(()) => Some(Ok(unsafe { a.assume_init() })),
                        Walked::Err(e) => Some(Err(e)),
                        Walked::Unlazied(_) => None,
                    }
                };
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
