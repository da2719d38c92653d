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
use std::mem::MaybeUninit;

use super::dcache::{d_alloc_hashed, d_drop, dput};
use super::{root_cred, At, DentryRef, StatMode, Super, Vfs};
use crate::cred::Cred;
use crate::dentry::{hash_finish, hash_word, load_partial, name_hash, Dentry, D_HASHED, HASH_INIT};
use crate::errno::{Errno, Result};
use crate::fs::{Attr, Validity, NAME_MAX, PATH_MAX};
use crate::inode::Inode;
use crate::permission::{generic_permission, may_search, search_for_all, MAY_EXEC};
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
/// memchr spends more on setup than on the search). The last partial word
/// is read as an overlapping full word when the path has one, so a short
/// tail costs one load instead of a byte loop.
#[inline(always)]
fn has_nul(s: &[u8]) -> bool {
    let n = s.len();
    let mut i = 0;
    while i + 8 <= n {
        if has_zero_byte(load8(s, i)) {
            return true;
        }
        i += 8;
    }
    if i == n {
        return false;
    }
    if n >= 8 {
        // The last 8 bytes overlap ones already checked (none was zero).
        return has_zero_byte(load8(s, n - 8));
    }
    // Shorter than a word: pad with non-zero bytes.
    let k = n - i;
    has_zero_byte(load_partial(&s[i..]) | (!0u64 << (8 * k)))
}

const LO_BYTES: u64 = 0x0101_0101_0101_0101;
const HI_BYTES: u64 = 0x8080_8080_8080_8080;

/// Flags (in bit 7 of its byte) the lowest zero byte of `w` exactly; bytes
/// above it may be flagged spuriously, so only the lowest flag is trusted.
#[inline(always)]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(LO_BYTES) & !w & HI_BYTES
}

#[inline(always)]
fn has_zero_byte(w: u64) -> bool {
    zero_bytes(w) != 0
}

/// Eight bytes of `s` from `i` as a little-endian word (`i + 8 <= s.len()`).
#[inline(always)]
fn load8(s: &[u8], i: usize) -> u64 {
    let c = &s[i..i + 8];
    u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
}

/// The bytes of `s` from `i` to its end (fewer than 8), zero padded. When
/// `s` has at least 8 bytes this is one overlapping load and a shift
/// instead of a byte-by-byte gather.
#[inline(always)]
fn load_tail(s: &[u8], i: usize) -> u64 {
    let n = s.len();
    let avail = n - i;
    debug_assert!(avail < 8);
    if avail == 0 {
        0
    } else if n >= 8 {
        load8(s, n - 8) >> (8 * (8 - avail))
    } else {
        load_partial(&s[i..])
    }
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
            let n = bytes.len();
            let mut pos = self.top.pos;
            while pos < n && bytes[pos] == b'/' {
                pos += 1;
            }
            if pos == n {
                self.top.pos = pos;
                self.top = self.below.pop()?;
                continue;
            }
            let start = pos;
            let (end, hash, first) = scan_component(bytes, pos);
            // Look past the slashes after it now, so "is this the last
            // component" is one compare in the common case. The piece
            // resumes at `end`: a symlink spliced in here must still see the
            // slash after it (`link/` must be a directory).
            let mut next = end;
            while next < n && bytes[next] == b'/' {
                next += 1;
            }
            self.top.pos = end;
            let (last, must_dir) = if next < n {
                (false, false)
            } else if self.below.is_empty() {
                (true, end < n)
            } else {
                self.ends_here(end < n)
            };
            // SAFETY: see Piece::bytes; the slice outlives &self.
            let name =
                unsafe { std::slice::from_raw_parts(bytes.as_ptr().add(start), end - start) };
            return Some(Comp {
                name,
                last,
                must_dir,
                hash,
                first,
            });
        }
    }

    /// (last, must_dir) for a component that ends its piece while symlink
    /// remainders are pending: it is last only if they hold no name.
    #[cold]
    fn ends_here(&self, slash_here: bool) -> (bool, bool) {
        let more = self
            .below
            .iter()
            .any(|p| p.remaining().iter().any(|&b| b != b'/'));
        let slash = slash_here || self.below.iter().any(|p| !p.remaining().is_empty());
        (!more, !more && slash)
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
/// path 8 bytes at a time (the last partial word as one overlapping load),
/// finding the `/` with the has-zero-byte trick and hashing the same words,
/// so each byte is looked at once.
#[inline(always)]
fn scan_component(bytes: &[u8], mut pos: usize) -> (usize, u32, u64) {
    const SLASHES: u64 = 0x2f2f_2f2f_2f2f_2f2f;
    let n = bytes.len();
    let start = pos;
    let mut h = HASH_INIT;
    let mut first = 0;
    loop {
        let avail = n - pos;
        let w = if avail >= 8 {
            load8(bytes, pos)
        } else {
            load_tail(bytes, pos)
        };
        // Zero padding past the end is never taken for a `/`.
        let z = zero_bytes(w ^ SLASHES);
        let k = if z == 0 {
            8
        } else {
            // The lowest flagged byte is exactly the first `/`.
            (z.trailing_zeros() / 8) as usize
        }
        .min(avail);
        if k == 8 {
            h = hash_word(h, w);
            if pos == start {
                first = w;
            }
            pos += 8;
            continue;
        }
        if k > 0 {
            let m = w & ((1u64 << (8 * k)) - 1);
            h = hash_word(h, m);
            if pos == start {
                first = m;
            }
        }
        pos += k;
        return (pos, hash_finish(h, pos - start), first);
    }
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

/// Where an rcu-walk stands, carried from the fast component source to the
/// general one when a symlink must be followed.
struct RcuState<'c> {
    /// Who walks: search permission is checked for it on every directory.
    cred: &'c Cred,
    cur: *mut Dentry,
    cur_seq: u32,
    /// A `..` was taken: the global rename sequence must be unchanged at the end.
    dotdot: bool,
    rename_seq: u32,
    follow_last: bool,
    allow_negative: bool,
}

/// What one rcu-walk step decided.
enum Step<'t> {
    /// Go on from this dentry (its d_seq sample; whether it is a directory).
    Enter(*mut Dentry, u32, bool),
    /// `.`: stay.
    Stay,
    /// `..`: to the parent (never above the root).
    Up,
    /// A symlink to follow: its cached target.
    Link(&'t [u8]),
    /// The walk ends here.
    End(RcuWalk),
}

/// A source of path components for the walk loop.
pub(crate) trait CompSource {
    fn next_comp(&mut self) -> Option<Comp<'_>>;
    /// Continue with a symlink's `target` (which outlives the walk) before
    /// the rest. `Ok(false)`: this source cannot; the caller switches to one
    /// that can.
    fn push_link(&mut self, target: &[u8]) -> Result<bool>;
}

/// Paths up to this long take the padded fast path ([`OnePiece`]); longer
/// ones go through [`Components`] from the start.
const FAST_PATH_MAX: usize = 240;
/// Words of the padded copy: the path and at least 8 zero bytes after it.
const PAD_WORDS: usize = FAST_PATH_MAX / 8 + 2;

/// The common case: the components of one short path with no symlink to
/// splice in, read from a copy followed by zero bytes. A path holds no NUL
/// (`check_path`), so a zero byte is its end, and every 8-byte load is a
/// plain unaligned load: no bounds checks and no special last word.
struct OnePiece<'a> {
    /// The copy: `len` path bytes, then at least 8 zero bytes.
    buf: &'a [u8],
    len: usize,
    /// Where the next component's search starts (past the slashes after
    /// the last one).
    pos: usize,
    /// Where the last component ended (before those slashes).
    end: usize,
}

impl<'a> OnePiece<'a> {
    /// Copy `path` (at most FAST_PATH_MAX bytes, no NUL) into `store`.
    /// Only the bytes the walk can read are written: the path and the
    /// words after it up to 8 zero bytes past its end.
    #[inline(always)]
    fn new(path: &[u8], store: &'a mut MaybeUninit<[u64; PAD_WORDS]>) -> OnePiece<'a> {
        let n = path.len();
        assert!(n <= FAST_PATH_MAX);
        let words = store.as_mut_ptr().cast::<u64>();
        // SAFETY: n / 8 + 1 < PAD_WORDS (n <= FAST_PATH_MAX), so both words
        // are inside `store`; then the path's n bytes go over their start
        // (the copy does not overlap `path`: store is our own buffer). The
        // bytes [0, (n / 8 + 2) * 8) are now initialised, and every read
        // stays below n + 8 <= that bound (see `byte`).
        let buf = unsafe {
            words.add(n / 8).write(0);
            words.add(n / 8 + 1).write(0);
            std::ptr::copy_nonoverlapping(path.as_ptr(), words.cast::<u8>(), n);
            std::slice::from_raw_parts(words.cast::<u8>(), (n / 8 + 2) * 8)
        };
        OnePiece {
            buf,
            len: n,
            pos: 0,
            end: 0,
        }
    }

    /// The unwalked rest of the path, from the last component's end: a
    /// symlink handed to `Components` there must still see the slash after
    /// it (`link/` must be a directory).
    fn rest(&self) -> &'a [u8] {
        &self.buf[self.end..self.len]
    }

    #[inline(always)]
    fn byte(&self, i: usize) -> u8 {
        debug_assert!(i < self.buf.len());
        // SAFETY: callers stay within len + 8 < buf.len(): every scan stops
        // at the first zero byte, and buf[len..len + 8] are zero.
        unsafe { *self.buf.as_ptr().add(i) }
    }

    #[inline(always)]
    fn word(&self, i: usize) -> u64 {
        debug_assert!(i + 8 <= self.buf.len());
        // SAFETY: as `byte`: i <= len, and buf extends 8 bytes past len.
        u64::from_le(unsafe { self.buf.as_ptr().add(i).cast::<u64>().read_unaligned() })
    }
}

impl CompSource for OnePiece<'_> {
    #[inline(always)]
    fn next_comp(&mut self) -> Option<Comp<'_>> {
        const SLASHES: u64 = 0x2f2f_2f2f_2f2f_2f2f;
        let mut pos = self.pos;
        while self.byte(pos) == b'/' {
            pos += 1;
        }
        if pos >= self.len {
            self.pos = pos;
            self.end = pos;
            return None;
        }
        let start = pos;
        // A component ends at its first `/` or at the zero after the path.
        let mut w = self.word(pos);
        let mut stop = zero_bytes(w ^ SLASHES) | zero_bytes(w);
        let mut h = HASH_INIT;
        let first;
        if stop == 0 {
            first = w;
            loop {
                h = hash_word(h, w);
                pos += 8;
                w = self.word(pos);
                stop = zero_bytes(w ^ SLASHES) | zero_bytes(w);
                if stop != 0 {
                    break;
                }
            }
            // The lowest flag of either test is exact: the end.
            let k = (stop.trailing_zeros() / 8) as usize;
            if k > 0 {
                h = hash_word(h, w & ((1u64 << (8 * k)) - 1));
            }
            pos += k;
        } else {
            // k >= 1: the byte at pos is neither `/` nor zero.
            let k = (stop.trailing_zeros() / 8) as usize;
            let m = w & ((1u64 << (8 * k)) - 1);
            first = m;
            h = hash_word(h, m);
            pos += k;
        }
        let end = pos;
        let hash = hash_finish(h, end - start);
        while self.byte(pos) == b'/' {
            pos += 1;
        }
        self.pos = pos;
        self.end = end;
        let last = pos >= self.len;
        debug_assert!(start < end && end <= self.len);
        // SAFETY: start < end <= len <= buf.len() (the scan stops at the
        // zero byte at len at the latest).
        let name = unsafe { self.buf.get_unchecked(start..end) };
        Some(Comp {
            name,
            last,
            must_dir: last && end < self.len,
            hash,
            first,
        })
    }

    #[inline(always)]
    fn push_link(&mut self, _target: &[u8]) -> Result<bool> {
        Ok(false)
    }
}

impl CompSource for Components<'_> {
    #[inline(always)]
    fn next_comp(&mut self) -> Option<Comp<'_>> {
        Components::next_comp(self)
    }

    fn push_link(&mut self, target: &[u8]) -> Result<bool> {
        self.push_link_borrowed(target).map(|()| true)
    }
}

#[inline(always)]
fn is_dir(d: &Dentry) -> bool {
    inode_of(d).is_some_and(|i| i.is_dir())
}

impl Vfs {
    /// rcu-walk `path` from `at`. Must be called inside `g`.
    ///
    /// The common path (no symlink to follow) reads its components straight
    /// from `path` ([`OnePiece`]); the first symlink to follow hands the
    /// walk, where it stands, to the general [`Components`] iterator. Both
    /// run the same loop and the same per-component step ([`Vfs::rcu_step`]).
    #[inline]
    pub(crate) fn walk_rcu(
        &self,
        _g: &RcuGuard<'_>,
        at: At<'_>,
        path: &[u8],
        follow_last: bool,
        allow_negative: bool,
        cred: &Cred,
    ) -> RcuWalk {
        let sb = self.sb();
        let rename_seq = sb.rename_seq.raw_begin();
        if rename_seq & 1 != 0 {
            return RcuWalk::Fallback;
        }
        let cur: *mut Dentry = match at {
            At::Dir(d) if path.first() != Some(&b'/') => d as *const Dentry as *mut Dentry,
            _ => sb.root(),
        };
        // SAFETY: cur is the root or a dentry the caller holds a reference on.
        let cur_seq = unsafe { &*cur }.d_seq.raw_begin();
        if cur_seq & 1 != 0 {
            return RcuWalk::Fallback;
        }
        let mut st = RcuState {
            cred,
            cur,
            cur_seq,
            dotdot: false,
            rename_seq,
            follow_last,
            allow_negative,
        };
        if path.len() > FAST_PATH_MAX {
            return self.walk_rcu_general(&mut st, Components::new(path));
        }
        let mut store = MaybeUninit::uninit();
        let mut one = OnePiece::new(path, &mut store);
        match self.rcu_loop(&mut st, &mut one) {
            Ok(r) => r,
            Err(target) => self.walk_rcu_links(&mut st, target, one.rest()),
        }
    }

    /// The rest of an rcu-walk once a symlink must be followed: `target`
    /// first, then `rest` of the path.
    #[cold]
    fn walk_rcu_links(&self, st: &mut RcuState<'_>, target: &[u8], rest: &[u8]) -> RcuWalk {
        let mut comps = Components::new(rest);
        if let Err(e) = comps.push_link_borrowed(target) {
            return RcuWalk::Err(e);
        }
        self.walk_rcu_general(st, comps)
    }

    /// rcu-walk with the general iterator (long paths, symlinks).
    #[cold]
    #[inline(never)]
    fn walk_rcu_general(&self, st: &mut RcuState<'_>, mut comps: Components<'_>) -> RcuWalk {
        match self.rcu_loop(st, &mut comps) {
            Ok(r) => r,
            // Components follows links itself; this cannot happen.
            Err(_) => RcuWalk::Fallback,
        }
    }

    /// Walk the components `src` yields from `st`. `Err(target)`: a symlink
    /// to follow that `src` cannot take (the walk stands on its directory).
    #[inline(always)]
    fn rcu_loop<'t, S: CompSource>(
        &self,
        st: &mut RcuState<'_>,
        src: &mut S,
    ) -> std::result::Result<RcuWalk, &'t [u8]> {
        let sb = self.sb();
        let root = sb.root();
        // SAFETY: st.cur was reached inside the read section.
        let mut cur_dir = is_dir(unsafe { &*st.cur });
        while let Some(comp) = src.next_comp() {
            if !cur_dir {
                // Only directories have components after them.
                // SAFETY: st.cur was reached inside the read section.
                let cd = unsafe { &*st.cur };
                let e = if inode_of(cd).is_none() {
                    Errno::ENOENT
                } else {
                    Errno::ENOTDIR
                };
                return Ok(validated(cd, st.cur_seq, e));
            }
            match self.rcu_step(sb, st, &comp) {
                Step::Enter(d, seq, dir) => {
                    st.cur = d;
                    st.cur_seq = seq;
                    cur_dir = dir;
                }
                Step::Stay => {}
                Step::Up => {
                    st.dotdot = true;
                    if st.cur != root {
                        // SAFETY: st.cur was reached inside the read section.
                        let cd = unsafe { &*st.cur };
                        let p = cd.parent_ptr();
                        // SAFETY: a parent outlives its children's read sections.
                        let pd = unsafe { &*p };
                        let ps = pd.d_seq.raw_begin();
                        if ps & 1 != 0 || cd.d_seq.read_retry(st.cur_seq) {
                            return Ok(RcuWalk::Fallback);
                        }
                        st.cur = p;
                        st.cur_seq = ps;
                        cur_dir = is_dir(pd);
                    }
                }
                Step::Link(target) => {
                    if target[0] == b'/' {
                        st.cur = root;
                        // SAFETY: the root lives as long as the Vfs.
                        st.cur_seq = unsafe { &*root }.d_seq.raw_begin();
                        cur_dir = true;
                    }
                    match src.push_link(target) {
                        Ok(true) => {}
                        Ok(false) => return Err(target),
                        Err(e) => return Ok(RcuWalk::Err(e)),
                    }
                }
                Step::End(r) => return Ok(r),
            }
        }
        if st.dotdot && sb.rename_seq.read_retry(st.rename_seq) {
            return Ok(RcuWalk::Fallback);
        }
        Ok(RcuWalk::Done(st.cur, st.cur_seq))
    }

    /// One rcu-walk step from the directory `st.cur`: look `c` up and say
    /// where the walk goes next. Nothing is trusted until the parent's
    /// `d_seq` is seen unchanged after the child was found.
    #[inline(always)]
    fn rcu_step<'t>(&self, sb: &Super, st: &RcuState<'_>, c: &Comp<'_>) -> Step<'t> {
        let cur = st.cur;
        // SAFETY: st.cur was reached inside the read section.
        let cd = unsafe { &*cur };
        // may_lookup: search permission on the directory we stand in. A
        // directory everyone may search costs one test of a word on the
        // inode's first line, which `is_dir` just read.
        if let Some(dir) = inode_of(cd) {
            if !search_for_all(dir.mode()) {
                if let Some(e) = self.rcu_search_denied(st, cd, dir) {
                    return Step::End(e);
                }
            }
        }
        let name = c.name;
        if name.len() > NAME_MAX {
            return Step::End(validated(cd, st.cur_seq, Errno::ENAMETOOLONG));
        }
        // `first` is the name zero padded: "." and ".." in one compare each.
        if name.len() <= 2 && c.first as u8 == b'.' {
            if name.len() == 1 {
                return Step::Stay;
            }
            if c.first == u64::from(u16::from_le_bytes(*b"..")) {
                return Step::Up;
            }
        }
        let (d, dseq) = match sb.table.lookup_rcu_word(cur, name, c.hash, c.first) {
            RcuHit::Found(d, s) => (d, s),
            RcuHit::Missing | RcuHit::Busy => return Step::End(RcuWalk::Fallback),
        };
        // The child is only as good as the parent we found it in.
        if cd.d_seq.read_retry(st.cur_seq) {
            return Step::End(RcuWalk::Fallback);
        }
        // SAFETY: found in the table inside the read section.
        let dd = unsafe { &*d };
        let inode = inode_of(dd);
        if sb.revalidate && !self.rcu_revalidate(sb, cd, dd, name) {
            return Step::End(RcuWalk::Fallback);
        }
        let Some(inode) = inode else {
            // A negative answer only from a dentry still in the table: one
            // already unhashed (killed or dropped) can be reached through a
            // chain link read before its removal, with a d_seq sampled
            // after it, and must not say ENOENT for a name that may exist
            // (Linux skips unhashed dentries in __d_lookup_rcu; here only
            // the negative case pays for the test). Its unhash cleared
            // D_HASHED before invalidating d_seq (Release), so a sample
            // taken after that (Acquire) sees the flag cleared.
            if dd.flags() & D_HASHED == 0 {
                return Step::End(RcuWalk::Fallback);
            }
            if c.last && st.allow_negative {
                return Step::Enter(d, dseq, false);
            }
            return Step::End(validated(dd, dseq, Errno::ENOENT));
        };
        // The type from the mode's S_IFMT bits (fixed for the inode's life).
        match inode.mode() & libc::S_IFMT {
            libc::S_IFDIR => Step::Enter(d, dseq, true),
            libc::S_IFLNK if !c.last || st.follow_last || c.must_dir => {
                let Some(target) = inode.cached_link() else {
                    return Step::End(RcuWalk::Fallback);
                };
                if dd.d_seq.read_retry(dseq) {
                    return Step::End(RcuWalk::Fallback);
                }
                if target.is_empty() {
                    return Step::End(RcuWalk::Err(Errno::ENOENT));
                }
                // The target lives with the inode, past this read section's
                // use of it.
                Step::Link(target)
            }
            _ if c.must_dir => Step::End(validated(dd, dseq, Errno::ENOTDIR)),
            _ => Step::Enter(d, dseq, false),
        }
    }

    /// The full search check in rcu-walk: `Some` ends the walk (EACCES, or
    /// a fallback when a writer interfered).
    #[cold]
    #[inline(never)]
    fn rcu_search_denied(&self, st: &RcuState<'_>, cd: &Dentry, dir: &Inode) -> Option<RcuWalk> {
        let Some(p) = dir.try_perm() else {
            return Some(RcuWalk::Fallback);
        };
        match generic_permission(st.cred, p, MAY_EXEC) {
            Ok(()) => None,
            Err(e) => Some(validated(cd, st.cur_seq, e)),
        }
    }

    /// Ask a revalidating backend, without blocking, whether `dd` (found
    /// under `cd`) still holds.
    #[cold]
    fn rcu_revalidate(&self, sb: &Super, cd: &Dentry, dd: &Dentry, name: &[u8]) -> bool {
        let Some(dir) = inode_of(cd) else {
            return false;
        };
        sb.fs.revalidate(
            dir.ino,
            name,
            inode_of(dd).map(|i| i.ino),
            dd.d_time.load(crate::sync::Ordering::Relaxed),
            true,
        ) == Validity::Valid
    }

    /// ref-walk `path` from `at` holding references. Returns the final
    /// dentry, which is negative only with `allow_negative`.
    pub(crate) fn walk_ref<'v>(
        &'v self,
        at: At<'_>,
        path: &[u8],
        follow_last: bool,
        allow_negative: bool,
        cred: &Cred,
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
            if !dir.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            may_search(cred, dir.perm())?;
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
            if inode.is_symlink() && (!last || follow_last || must_dir) {
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
            if must_dir && !inode.is_dir() {
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
        if !dir.is_dir() {
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
    pub fn stat_with(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        follow: bool,
        mode: StatMode,
    ) -> Result<Attr> {
        self.stat_as(root_cred(), at, path.as_ref(), follow, mode)
    }

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

    /// Resolve `path` to a counted reference (following a final symlink
    /// when `follow`). Never negative: a missing name is ENOENT.
    pub fn lookup(
        &self,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        follow: bool,
    ) -> Result<DentryRef<'_>> {
        self.lookup_as(root_cred(), at, path.as_ref(), follow)
    }

    /// [`Vfs::lookup`] on behalf of `cred`.
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
        self.walk_ref(at, path, follow, false, cred)
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

#[cfg(all(test, not(loom)))]
mod fast_path_tests {
    use std::sync::Arc;

    use super::*;
    use crate::fs::memfs::MemFs;
    use crate::fs::Ctx;

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
        let d = vfs.walk_ref(At::Root, path, follow, false, root_cred())?;
        d.inode().map(|i| i.ino).ok_or(Errno::ENOENT)
    }

    #[test]
    fn rcu_walk_agrees_with_ref_walk() {
        let vfs = Vfs::new(Arc::new(MemFs::new())).unwrap();
        let c = Ctx::ROOT;
        for d in ["d1", "d1/d2", "eightchr", "sixteen_bytes_xx"] {
            vfs.mkdir(At::Root, d, 0o755, c).unwrap();
        }
        for f in ["f", "d1/f", "d1/d2/f", "eightchr/f"] {
            vfs.create(At::Root, f, 0o644, c).unwrap();
        }
        let long_name = vec![b'n'; 250];
        let mut long_file = b"d1/".to_vec();
        long_file.extend_from_slice(&long_name);
        vfs.create(At::Root, &long_file, 0o644, c).unwrap();
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
            vfs.symlink(target, At::Root, link, c).unwrap();
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
                let rcu = vfs.try_stat_rcu(At::Root, &path, follow, StatMode::RefFree, root_cred());
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
                let full = vfs.stat_with(At::Root, &path, follow, StatMode::RefFree);
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
