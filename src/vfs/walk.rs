//! Path resolution.
//!
//! **rcu-walk** runs first: inside one RCU read section it looks every
//! component up in the hash table, takes no lock and no reference, and
//! checks each step with sequence counters — a child is trusted only once its
//! parent's `d_seq` is seen unchanged after the child was found, and the
//! final dentry's own `d_seq` is checked by the caller after reading what it
//! needs. A miss in the table, a dentry mid-change, a backend that must
//! revalidate with blocking, or a symlink whose target is not cached yet
//! makes it give up (`Fallback`), never answer wrongly.
//!
//! **ref-walk** then redoes the whole path holding a counted reference on
//! the current directory, calling the backend for misses under the
//! directory's `i_rwsem` (shared), and caching the result — negative results
//! too, so the next miss is answered by rcu-walk.
//!
//! Both walk the same [`Components`] iterator, which implements the path
//! rules: `.`, `..` (never above the root), symlinks (40 at most: ELOOP),
//! trailing slashes (the last component must be a directory), ENAMETOOLONG
//! for a component over 255 bytes.

use std::marker::PhantomData;

use super::dcache::{d_alloc_hashed, d_drop, dput};
use super::{At, DentryRef, StatMode, Super, Vfs};
use crate::dentry::{hash_finish, hash_word, load_partial, name_hash, Dentry, D_HASHED, HASH_INIT};
use crate::errno::{Errno, Result};
use crate::fs::{Attr, FileType, Validity, NAME_MAX, PATH_MAX};
use crate::inode::Inode;
use crate::rcu::RcuGuard;
use crate::table::RcuHit;

/// Most symlinks one resolution may follow (Linux MAXSYMLINKS).
pub const MAX_SYMLINKS: u32 = 40;

/// Reject what no walk can accept: empty (ENOENT), too long (ENAMETOOLONG),
/// an embedded NUL (EINVAL).
#[inline]
pub(crate) fn check_path(path: &[u8]) -> Result<()> {
    if path.is_empty() {
        return Err(Errno::ENOENT);
    }
    if path.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if has_nul(path) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Word-at-a-time search for a zero byte (paths are short; a generic
/// memchr spends more on setup than on the search).
#[inline(always)]
fn has_nul(s: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        if w.wrapping_sub(LO) & !w & HI != 0 {
            return true;
        }
    }
    chunks.remainder().contains(&0)
}

/// A name component as the walker sees it.
pub(crate) struct Comp<'a> {
    pub name: &'a [u8],
    /// No component follows (in this path or any pending symlink remainder).
    pub last: bool,
    /// `last`, and a slash followed it: it must resolve to a directory.
    pub must_dir: bool,
    /// `name_hash(name)`, computed while scanning.
    pub hash: u32,
    /// The name's first 8 bytes as a zero-padded word.
    pub first: u64,
}

#[derive(Clone, Copy)]
struct Piece {
    ptr: *const u8,
    len: usize,
    pos: usize,
}

impl Piece {
    fn new(s: &[u8]) -> Piece {
        Piece {
            ptr: s.as_ptr(),
            len: s.len(),
            pos: 0,
        }
    }
    /// The piece's bytes, not tied to the borrow of the `Piece` (it is a
    /// copyable view; see the SAFETY note for why the memory outlives it).
    #[inline(always)]
    fn bytes<'x>(&self) -> &'x [u8] {
        // SAFETY: ptr/len describe a slice that outlives the iterator: the
        // caller's path ('a), a cached symlink target (lives with its inode,
        // which outlives the read section or reference that reached it), or a
        // buffer in `Components::owned` (heap memory that does not move).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn remaining(&self) -> &[u8] {
        &self.bytes()[self.pos..]
    }
}

/// A stack of path pieces: the first few inline, so following cached
/// symlinks in rcu-walk allocates nothing.
struct PieceStack {
    /// `inline[..len]` are initialised.
    inline: [std::mem::MaybeUninit<Piece>; 8],
    len: usize,
    spill: Vec<Piece>,
}

impl PieceStack {
    #[inline(always)]
    fn new() -> PieceStack {
        PieceStack {
            inline: [std::mem::MaybeUninit::uninit(); 8],
            len: 0,
            spill: Vec::new(),
        }
    }
    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn push(&mut self, p: Piece) {
        if self.len < self.inline.len() {
            self.inline[self.len] = std::mem::MaybeUninit::new(p);
            self.len += 1;
        } else {
            self.spill.push(p);
        }
    }
    fn pop(&mut self) -> Option<Piece> {
        if let Some(p) = self.spill.pop() {
            return Some(p);
        }
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: entries below `len` were written by `push`.
        Some(unsafe { self.inline[self.len].assume_init() })
    }
    fn iter(&self) -> impl Iterator<Item = &Piece> {
        self.inline[..self.len]
            .iter()
            // SAFETY: entries below `len` were written by `push`.
            .map(|p| unsafe { p.assume_init_ref() })
            .chain(self.spill.iter())
    }
}

/// Iterates the components of a path, splicing in symlink targets.
/// Allocates nothing unless more than 8 symlinks nest or a target had to be
/// copied (ref-walk).
pub(crate) struct Components<'a> {
    top: Piece,
    below: PieceStack,
    /// Copies of symlink targets (ref-walk), leaked from Boxes so pieces can
    /// point into them without a later move of the Box re-asserting
    /// uniqueness; freed in Drop.
    owned: Vec<*mut [u8]>,
    links: u32,
    _path: PhantomData<&'a [u8]>,
}

impl<'a> Components<'a> {
    pub(crate) fn new(path: &'a [u8]) -> Components<'a> {
        Components {
            top: Piece::new(path),
            below: PieceStack::new(),
            owned: Vec::new(),
            links: 0,
            _path: PhantomData,
        }
    }

    #[inline(always)]
    pub(crate) fn next_comp(&mut self) -> Option<Comp<'_>> {
        loop {
            let bytes = self.top.bytes();
            let mut pos = self.top.pos;
            while pos < bytes.len() && bytes[pos] == b'/' {
                pos += 1;
            }
            if pos == bytes.len() {
                self.top.pos = pos;
                self.top = self.below.pop()?;
                continue;
            }
            let start = pos;
            let (hash, first);
            (pos, hash, first) = scan_component(bytes, pos);
            self.top.pos = pos;
            let rest = &bytes[pos..];
            let more = rest.iter().any(|&b| b != b'/')
                || (!self.below.is_empty()
                    && self
                        .below
                        .iter()
                        .any(|p| p.remaining().iter().any(|&b| b != b'/')));
            let slash = !rest.is_empty()
                || (!self.below.is_empty() && self.below.iter().any(|p| !p.remaining().is_empty()));
            // SAFETY: see Piece::bytes; the slice outlives &self.
            let name =
                unsafe { std::slice::from_raw_parts(bytes.as_ptr().add(start), pos - start) };
            return Some(Comp {
                name,
                last: !more,
                must_dir: !more && slash,
                hash,
                first,
            });
        }
    }

    /// Continue with `target` before the rest of the path. The caller
    /// guarantees `target` outlives the iterator (a cached link target).
    /// Returns ELOOP past MAX_SYMLINKS.
    pub(crate) fn push_link_borrowed(&mut self, target: &[u8]) -> Result<()> {
        self.count_link()?;
        let old = std::mem::replace(&mut self.top, Piece::new(target));
        self.below.push(old);
        Ok(())
    }

    /// As `push_link_borrowed`, keeping a private copy of the target.
    pub(crate) fn push_link_owned(&mut self, target: Vec<u8>) -> Result<()> {
        self.count_link()?;
        let raw: *mut [u8] = Box::into_raw(target.into_boxed_slice());
        self.owned.push(raw);
        let piece = Piece {
            ptr: raw as *const u8,
            len: raw.len(),
            pos: 0,
        };
        let old = std::mem::replace(&mut self.top, piece);
        self.below.push(old);
        Ok(())
    }

    fn count_link(&mut self) -> Result<()> {
        self.links += 1;
        if self.links > MAX_SYMLINKS {
            return Err(Errno::ELOOP);
        }
        Ok(())
    }
}

/// Scan one component starting at `pos` (not a `/`): returns the position
/// of the `/` or end that ends it, its hash and its first word. Reads the
/// path 8 bytes at a time, finding the `/` with the has-zero-byte trick and
/// hashing the same words, so each byte is looked at once.
#[inline(always)]
fn scan_component(bytes: &[u8], mut pos: usize) -> (usize, u32, u64) {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const SLASHES: u64 = 0x2f2f_2f2f_2f2f_2f2f;
    let start = pos;
    let mut h = HASH_INIT;
    let mut first = None;
    while pos + 8 <= bytes.len() {
        let c = &bytes[pos..pos + 8];
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let x = w ^ SLASHES;
        let z = x.wrapping_sub(LO) & !x & HI;
        if z == 0 {
            h = hash_word(h, w);
            first.get_or_insert(w);
            pos += 8;
            continue;
        }
        // The lowest flagged byte is exactly the first `/`.
        let k = (z.trailing_zeros() / 8) as usize;
        if k > 0 {
            let m = w & ((1u64 << (8 * k)) - 1);
            h = hash_word(h, m);
            first.get_or_insert(m);
        }
        pos += k;
        return (pos, hash_finish(h, pos - start), first.unwrap_or(0));
    }
    let tail = pos;
    while pos < bytes.len() && bytes[pos] != b'/' {
        pos += 1;
    }
    if pos > tail {
        let m = load_partial(&bytes[tail..pos]);
        h = hash_word(h, m);
        first.get_or_insert(m);
    }
    (pos, hash_finish(h, pos - start), first.unwrap_or(0))
}

impl Drop for Components<'_> {
    fn drop(&mut self) {
        for &raw in &self.owned {
            // SAFETY: each pointer came from Box::into_raw in
            // push_link_owned and is freed once, here.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

/// How an rcu-walk ended.
pub(crate) enum RcuWalk {
    /// The final dentry and its d_seq sample, still to be validated by the
    /// caller after it reads what it needs. May be negative only when
    /// `allow_negative` was set.
    Done(*mut Dentry, u32),
    /// A definite answer (validated).
    Err(Errno),
    /// Give up; redo in ref-walk.
    Fallback,
}

#[inline(always)]
fn inode_of<'g>(d: &Dentry) -> Option<&'g Inode> {
    // SAFETY: callers are inside a read section (or hold a reference); an
    // inode is freed only after a grace period once no dentry points to it.
    unsafe { d.inode_ptr().as_ref() }
}

impl Vfs {
    /// rcu-walk `path` from `at`. Must be called inside `g`.
    #[inline]
    pub(crate) fn walk_rcu(
        &self,
        _g: &RcuGuard<'_>,
        at: At<'_>,
        path: &[u8],
        follow_last: bool,
        allow_negative: bool,
    ) -> RcuWalk {
        let sb = self.sb();
        let root = sb.root();
        let rename_seq = sb.rename_seq.raw_begin();
        if rename_seq & 1 != 0 {
            return RcuWalk::Fallback;
        }
        let mut cur: *mut Dentry = match at {
            At::Dir(d) if path.first() != Some(&b'/') => d as *const Dentry as *mut Dentry,
            _ => root,
        };
        // SAFETY: cur is the root or a dentry the caller holds a reference on.
        let mut cur_seq = unsafe { &*cur }.d_seq.raw_begin();
        if cur_seq & 1 != 0 {
            return RcuWalk::Fallback;
        }
        let mut dotdot = false;
        let mut comps = Components::new(path);
        loop {
            // SAFETY: cur was reached inside the read section.
            let cd = unsafe { &*cur };
            let Some(comp) = comps.next_comp() else {
                break;
            };
            let (name, last, must_dir) = (comp.name, comp.last, comp.must_dir);
            let (hash, first) = (comp.hash, comp.first);
            // Only directories have components after them.
            let Some(dir) = inode_of(cd) else {
                return validated(cd, cur_seq, Errno::ENOENT);
            };
            if dir.kind != FileType::Directory {
                return validated(cd, cur_seq, Errno::ENOTDIR);
            }
            if name.len() > NAME_MAX {
                return validated(cd, cur_seq, Errno::ENAMETOOLONG);
            }
            if name == b"." {
                continue;
            }
            if name == b".." {
                dotdot = true;
                if cur != root {
                    let p = cd.parent_ptr();
                    // SAFETY: a parent outlives its children's read sections.
                    let ps = unsafe { &*p }.d_seq.raw_begin();
                    if ps & 1 != 0 || cd.d_seq.read_retry(cur_seq) {
                        return RcuWalk::Fallback;
                    }
                    cur = p;
                    cur_seq = ps;
                }
                continue;
            }
            let (d, dseq) = match sb.table.lookup_rcu_word(cur, name, hash, first) {
                RcuHit::Found(d, s) => (d, s),
                RcuHit::Missing | RcuHit::Busy => return RcuWalk::Fallback,
            };
            // The child is only as good as the parent we found it in.
            if cd.d_seq.read_retry(cur_seq) {
                return RcuWalk::Fallback;
            }
            // SAFETY: found in the table inside the read section.
            let dd = unsafe { &*d };
            let inode = inode_of(dd);
            if sb.revalidate {
                let v = sb.fs.revalidate(
                    dir.ino,
                    name,
                    inode.map(|i| i.ino),
                    dd.d_time.load(crate::sync::Ordering::Relaxed),
                    true,
                );
                if v != Validity::Valid {
                    return RcuWalk::Fallback;
                }
            }
            let Some(inode) = inode else {
                if last && allow_negative {
                    cur = d;
                    cur_seq = dseq;
                    break;
                }
                return validated(dd, dseq, Errno::ENOENT);
            };
            if inode.kind == FileType::Symlink && (!last || follow_last || must_dir) {
                let Some(target) = inode.cached_link() else {
                    return RcuWalk::Fallback;
                };
                if dd.d_seq.read_retry(dseq) {
                    return RcuWalk::Fallback;
                }
                if target.is_empty() {
                    return RcuWalk::Err(Errno::ENOENT);
                }
                if target[0] == b'/' {
                    cur = root;
                    // SAFETY: the root lives as long as the Vfs.
                    cur_seq = unsafe { &*root }.d_seq.raw_begin();
                }
                // The target lives with the inode, past this read section's
                // use of it.
                if let Err(e) = comps.push_link_borrowed(target) {
                    return RcuWalk::Err(e);
                }
                continue;
            }
            if must_dir && inode.kind != FileType::Directory {
                return validated(dd, dseq, Errno::ENOTDIR);
            }
            cur = d;
            cur_seq = dseq;
        }
        if dotdot && sb.rename_seq.read_retry(rename_seq) {
            return RcuWalk::Fallback;
        }
        RcuWalk::Done(cur, cur_seq)
    }

    /// ref-walk `path` from `at` holding references. Returns the final
    /// dentry, which is negative only with `allow_negative`.
    pub(crate) fn walk_ref<'v>(
        &'v self,
        at: At<'_>,
        path: &[u8],
        follow_last: bool,
        allow_negative: bool,
    ) -> Result<DentryRef<'v>> {
        let sb = self.sb();
        sb.counters
            .ref_walks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut cur = match at {
            At::Dir(d) if path.first() != Some(&b'/') => {
                d.d_lockref.get();
                DentryRef::from_counted(d as *const Dentry as *mut Dentry)
            }
            _ => self.root(),
        };
        let mut comps = Components::new(path);
        while let Some(comp) = comps.next_comp() {
            let (name, last, must_dir) = (comp.name, comp.last, comp.must_dir);
            let Some(dir) = cur.inode() else {
                return Err(Errno::ENOENT);
            };
            if dir.kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            if name.len() > NAME_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            if name == b"." {
                continue;
            }
            if name == b".." {
                if cur.as_ptr() != sb.root() {
                    cur = self.dget_parent(&cur);
                }
                continue;
            }
            let d = self.lookup_one(&cur, name, false)?;
            let Some(inode) = d.inode() else {
                if last && allow_negative {
                    cur = d;
                    break;
                }
                return Err(Errno::ENOENT);
            };
            if inode.kind == FileType::Symlink && (!last || follow_last || must_dir) {
                let target = self.read_link(inode)?;
                if target.is_empty() {
                    return Err(Errno::ENOENT);
                }
                if target[0] == b'/' {
                    cur = self.root();
                }
                comps.push_link_owned(target)?;
                continue;
            }
            if must_dir && inode.kind != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            cur = d;
        }
        Ok(cur)
    }

    /// A symlink's target, from the inode's cache or the backend (cached).
    pub(crate) fn read_link(&self, inode: &Inode) -> Result<Vec<u8>> {
        if let Some(t) = inode.cached_link() {
            return Ok(t.to_vec());
        }
        let t = self.sb().fs.readlink(inode.ino)?;
        inode.cache_link(&t);
        Ok(t)
    }

    /// A counted reference to `d`'s current parent (Linux dget_parent).
    pub(crate) fn dget_parent<'v>(&'v self, d: &DentryRef<'v>) -> DentryRef<'v> {
        let sb = self.sb();
        loop {
            let g = sb.rcu.read_lock();
            let p = d.dentry().parent_ptr();
            // SAFETY: the parent is alive while d (which pins it) is, and we
            // are in a read section in case a rename just moved d.
            let pr = unsafe { &*p };
            if pr.d_lockref.get_not_dead() {
                if d.dentry().parent_ptr() == p {
                    drop(g);
                    return DentryRef::from_counted(p);
                }
                // SAFETY: the reference we just took.
                unsafe { dput(p) };
            }
            drop(g);
            crate::sync::yield_now();
        }
    }

    /// Try the table with a reference: a hashed, live dentry `parent/name`.
    pub(crate) fn lookup_fast<'v>(
        &'v self,
        parent: &DentryRef<'v>,
        name: &[u8],
        hash: u32,
    ) -> Option<DentryRef<'v>> {
        let sb = self.sb();
        let g = sb.rcu.read_lock();
        let RcuHit::Found(d, _) = sb.table.lookup_rcu(parent.as_ptr(), name, hash) else {
            return None;
        };
        // SAFETY: found inside the read section.
        let dr = unsafe { &*d };
        if !dr.d_lockref.get_not_dead() {
            return None;
        }
        drop(g);
        let r = DentryRef::from_counted(d);
        // With a reference held, make sure it still is that name.
        let s = dr.d_seq.read_begin();
        let ok = dr.flags() & D_HASHED != 0
            && dr.d_parent.load(crate::sync::Ordering::Relaxed) == parent.as_ptr()
            && dr.name_eq(name);
        if ok && !dr.d_seq.read_retry(s) {
            Some(r)
        } else {
            None
        }
    }

    /// Look one component up in `parent` with references: the table first,
    /// then the backend. `dir_locked`: the caller holds the parent's
    /// `i_rwsem` for writing (namespace operations).
    pub(crate) fn lookup_one<'v>(
        &'v self,
        parent: &DentryRef<'v>,
        name: &[u8],
        dir_locked: bool,
    ) -> Result<DentryRef<'v>> {
        let sb = self.sb();
        let Some(dir) = parent.inode() else {
            return Err(Errno::ENOENT);
        };
        if dir.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        let hash = name_hash(name);
        if let Some(d) = self.lookup_fast(parent, name, hash) {
            if self.still_valid(sb, dir, name, &d) {
                return Ok(d);
            }
            d_drop(sb, d.dentry());
        }
        let _shared = if dir_locked {
            None
        } else {
            Some(dir.i_rwsem.read().unwrap_or_else(|e| e.into_inner()))
        };
        // Someone may have cached it while we waited for the lock.
        if let Some(d) = self.lookup_fast(parent, name, hash) {
            if self.still_valid(sb, dir, name, &d) {
                return Ok(d);
            }
            d_drop(sb, d.dentry());
        }
        let cookie = sb.fs.dir_cookie(dir.ino);
        sb.counters
            .backend_lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let attr = sb.fs.lookup(dir.ino, name)?;
        let d = d_alloc_hashed(sb, parent.as_ptr(), name, attr.as_ref(), cookie);
        Ok(DentryRef::from_counted(d))
    }

    fn still_valid(&self, sb: &Super, dir: &Inode, name: &[u8], d: &DentryRef<'_>) -> bool {
        if !sb.revalidate {
            return true;
        }
        let v = sb.fs.revalidate(
            dir.ino,
            name,
            d.ino(),
            d.dentry().d_time.load(crate::sync::Ordering::Relaxed),
            false,
        );
        v == Validity::Valid
    }

    /// `stat(2)`: follows a final symlink.
    pub fn stat(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Attr> {
        self.stat_with(at, path.as_ref(), true, StatMode::RefFree)
    }

    /// `lstat(2)`: does not follow a final symlink.
    pub fn lstat(&self, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Attr> {
        self.stat_with(at, path.as_ref(), false, StatMode::RefFree)
    }

    /// `stat` with the choice of how the last component is handled.
    #[inline]
    pub fn stat_with(&self, at: At<'_>, path: &[u8], follow: bool, mode: StatMode) -> Result<Attr> {
        check_path(path)?;
        if let Some(r) = self.try_stat_rcu(at, path, follow, mode) {
            return r;
        }
        let sb = self.sb();
        let d = self.walk_ref(at, path, follow, false)?;
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
    ) -> Option<Result<Attr>> {
        let sb = self.sb();
        let g = sb.rcu.read_lock();
        match self.walk_rcu(&g, at, path, follow, false) {
            RcuWalk::Err(e) => return Some(Err(e)),
            RcuWalk::Fallback => {}
            RcuWalk::Done(d, seq) => {
                // SAFETY: found inside the read section.
                let dd = unsafe { &*d };
                match mode {
                    StatMode::RefFree => {
                        if let Some(inode) = inode_of(dd) {
                            if let Some(a) = inode.try_attr() {
                                if !dd.d_seq.read_retry(seq) {
                                    if sb.revalidate {
                                        return Some(self.refresh_attr(inode, a));
                                    }
                                    return Some(Ok(a));
                                }
                            }
                        }
                    }
                    StatMode::LockRef => {
                        // Linux's complete_walk: a real reference on the
                        // last component, then dput.
                        if dd.d_lockref.get_not_dead() {
                            let r = DentryRef::from_counted(d);
                            if !dd.d_seq.read_retry(seq) {
                                drop(g);
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
        if a != cached && a.kind == inode.kind {
            inode.set_attr(&a);
        }
        Ok(a)
    }

    /// Resolve `path` to a counted reference (following a final symlink
    /// when `follow`). Never negative: a missing name is ENOENT.
    pub fn lookup(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        follow: bool,
    ) -> Result<DentryRef<'_>> {
        let path = path.as_ref();
        check_path(path)?;
        let sb = self.sb();
        {
            let g = sb.rcu.read_lock();
            match self.walk_rcu(&g, at, path, follow, false) {
                RcuWalk::Err(e) => return Err(e),
                RcuWalk::Fallback => {}
                RcuWalk::Done(d, seq) => {
                    // SAFETY: found inside the read section.
                    let dd = unsafe { &*d };
                    if dd.d_lockref.get_not_dead() {
                        let r = DentryRef::from_counted(d);
                        if !dd.d_seq.read_retry(seq) && !r.is_negative() {
                            return Ok(r);
                        }
                    }
                }
            }
        }
        self.walk_ref(at, path, follow, false)
    }

    /// [`Vfs::lookup`] without a reference, for callers that can pin the
    /// result by other means (the FUSE daemon: a node the kernel already
    /// holds). Resolves `path` from `at` (a final symlink is not followed)
    /// in rcu-walk only, then, still inside the read section, hands the
    /// positive dentry and its validated attributes to `claim`, which
    /// returns `None` to decline. The dentry is only guaranteed to exist
    /// until `claim` returns.
    ///
    /// `None`: no answer here (the walk gave up, the backend revalidates
    /// names, a writer interfered, or `claim` declined); the caller then
    /// falls back to [`Vfs::lookup`]. `Some(Err)`: a definite error, as
    /// `lookup` would return it.
    #[inline]
    pub fn lookup_rcu_with<R>(
        &self,
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
        match self.walk_rcu(&g, at, path, false, false) {
            RcuWalk::Err(e) => Some(Err(e)),
            RcuWalk::Fallback => None,
            RcuWalk::Done(d, seq) => {
                // SAFETY: found inside the read section, which lasts until
                // `g` drops, after `claim` returns.
                let dd = unsafe { &*d };
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

/// Return `e` if `d` is unchanged since `seq`, else fall back.
#[inline(always)]
fn validated(d: &Dentry, seq: u32, e: Errno) -> RcuWalk {
    if d.d_seq.read_retry(seq) {
        RcuWalk::Fallback
    } else {
        RcuWalk::Err(e)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::dentry::first_word;

    #[test]
    fn scanning_hashes_like_name_hash() {
        let names: Vec<Vec<u8>> = (0..40)
            .map(|n| (0..n).map(|i| b'a' + (i * 7 % 26) as u8).collect())
            .collect();
        for name in names.iter().filter(|n| !n.is_empty()) {
            for pre in 0..9 {
                for post in ["", "/", "/x", "//yy/z"] {
                    let mut path = vec![b'q'; pre];
                    path.push(b'/');
                    let start = path.len();
                    path.extend_from_slice(name);
                    path.extend_from_slice(post.as_bytes());
                    let (end, hash, first) = scan_component(&path, start);
                    assert_eq!(&path[start..end], &name[..]);
                    assert_eq!(hash, name_hash(name), "{name:?} in {path:?}");
                    assert_eq!(first, first_word(name));
                }
            }
        }
    }

    #[test]
    fn nul_detection() {
        assert!(!has_nul(b"a/b/c/file"));
        assert!(has_nul(b"a/b/c/fil\0"));
        assert!(has_nul(b"\0"));
        assert!(has_nul(b"abcdefgh\0ijk"));
        assert!(!has_nul(b"abcdefghijklmnop"));
    }
}
