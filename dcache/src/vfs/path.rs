//! The path lexer: [`Components`], the iterator both walks use, which
//! implements the path rules — `.`, `..` (never above the root), symlinks
//! (40 at most: ELOOP), trailing slashes (the last component must be a
//! directory), ENAMETOOLONG for a component over 255 bytes — and
//! [`OnePiece`], the scanner rcu-walk runs on a path with no symlink to
//! follow. Each scans a component and hashes it in one word-at-a-time pass.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use crate::dentry::{hash_finish, hash_word, load_partial, HASH_INIT, NAME_ON_LINE0};
use crate::errno::{Errno, Result};
use crate::fs::PATH_MAX;

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
    /// A symlink target borrowed from its inode's cache: valid only for
    /// the read section that found it (see `Components::own_links`).
    borrowed_link: bool,
}

impl Piece {
    fn new(s: &[u8]) -> Piece {
        Piece {
            ptr: s.as_ptr(),
            len: s.len(),
            pos: 0,
            borrowed_link: false,
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
    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Piece> {
        self.inline[..self.len]
            .iter_mut()
            // SAFETY: entries below `len` were written by `push`.
            .map(|p| unsafe { p.assume_init_mut() })
            .chain(self.spill.iter_mut())
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
    /// Where the last component returned starts in `top` (`rewind`).
    last_start: usize,
    _path: PhantomData<&'a [u8]>,
}

impl<'a> Components<'a> {
    pub(crate) fn new(path: &'a [u8]) -> Components<'a> {
        Components {
            top: Piece::new(path),
            below: PieceStack::new(),
            owned: Vec::new(),
            links: 0,
            last_start: 0,
            _path: PhantomData,
        }
    }

    /// Step back to the start of the component `next_comp` returned last
    /// (the walk retries it in ref mode).
    pub(crate) fn rewind(&mut self) {
        self.top.pos = self.last_start;
    }

    /// Replace every symlink target borrowed from an inode's cache by a
    /// copy of its own: the walk leaves the read section that kept them.
    pub(crate) fn own_links(&mut self) {
        let mut owned = std::mem::take(&mut self.owned);
        for p in std::iter::once(&mut self.top).chain(self.below.iter_mut()) {
            if p.borrowed_link {
                let raw: *mut [u8] = Box::into_raw(p.bytes().to_vec().into_boxed_slice());
                owned.push(raw);
                p.ptr = raw as *const u8;
                p.borrowed_link = false;
            }
        }
        self.owned = owned;
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
            self.last_start = start;
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
        let piece = Piece {
            borrowed_link: true,
            ..Piece::new(target)
        };
        let old = std::mem::replace(&mut self.top, piece);
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
            borrowed_link: false,
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
/// path 8 bytes at a time (the last partial word as one overlapping load)
/// through [`scan_name`], which finds the end and hashes the same words.
#[inline(always)]
fn scan_component(bytes: &[u8], pos: usize) -> (usize, u32, u64) {
    let n = bytes.len();
    let word = |i: usize| {
        if n - i >= 8 {
            load8(bytes, i)
        } else {
            load_tail(bytes, i)
        }
    };
    // The tail word is zero padded and a zero byte is no `/`, so the end of
    // the bytes is flagged on its own: the high bit of the byte at `n`.
    let stop = |w: u64, i: usize| {
        let end = if n - i < 8 {
            0x80u64 << (8 * (n - i))
        } else {
            0
        };
        zero_bytes(w ^ SLASHES) | end
    };
    scan_name(pos, word, stop)
}

/// Eight `/` bytes.
const SLASHES: u64 = 0x2f2f_2f2f_2f2f_2f2f;

/// The word scan both lexers share: from `start` (a byte that is neither
/// `/` nor the end), load words with `word(i)`, ask `stop(w, i)` for a mask
/// whose lowest flagged byte (0x80 in it) is exactly where the name ends,
/// and hash every whole word before it and the masked part of the last.
/// Returns the end, the hash, and the name's first word (masked to the
/// name), so each byte is looked at once.
#[inline(always)]
pub(super) fn scan_name(
    start: usize,
    word: impl Fn(usize) -> u64,
    stop: impl Fn(u64, usize) -> u64,
) -> (usize, u32, u64) {
    let mut pos = start;
    let mut w = word(pos);
    let mut end = stop(w, pos);
    let mut h = HASH_INIT;
    let first;
    if end == 0 {
        first = w;
        loop {
            h = hash_word(h, w);
            pos += 8;
            w = word(pos);
            end = stop(w, pos);
            if end != 0 {
                break;
            }
        }
        let k = (end.trailing_zeros() / 8) as usize;
        if k > 0 {
            h = hash_word(h, w & ((1u64 << (8 * k)) - 1));
        }
        pos += k;
    } else {
        // k >= 1: the byte at start ends nothing.
        let k = (end.trailing_zeros() / 8) as usize;
        let m = w & ((1u64 << (8 * k)) - 1);
        first = m;
        h = hash_word(h, m);
        pos += k;
    }
    (pos, hash_finish(h, pos - start), first)
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

/// A source of path components for the walk loop.
pub(crate) trait CompSource {
    fn next_comp(&mut self) -> Option<Comp<'_>>;
    /// Continue with a symlink's `target` (which outlives the walk) before
    /// the rest. `Ok(false)`: this source cannot; the caller switches to one
    /// that can.
    fn push_link(&mut self, target: &[u8]) -> Result<bool>;
    /// Step back to the start of the component returned last.
    fn rewind(&mut self);
}

/// Paths up to this long take the padded fast path ([`OnePiece`]); longer
/// ones go through [`Components`] from the start.
pub(super) const FAST_PATH_MAX: usize = 240;
/// Words of the padded copy: the path and at least 8 zero bytes after it.
const PAD_WORDS: usize = FAST_PATH_MAX / 8 + 2;
/// The storage a [`OnePiece`] copies its path into.
pub(super) type PathCopy = MaybeUninit<[u64; PAD_WORDS]>;

/// The common case: the components of one short path with no symlink to
/// splice in, read from a copy followed by zero bytes. A path holds no NUL
/// (`check_path`), so a zero byte is its end, and every 8-byte load is a
/// plain unaligned load: no bounds checks and no special last word.
pub(super) struct OnePiece<'a> {
    /// The copy, in the caller's store: `len` path bytes, then at least 8
    /// zero bytes (`copy` writes them; everything read is below
    /// `len + 8`).
    buf: *mut u8,
    len: usize,
    /// Where the next component's search starts (past the slashes after
    /// the last one).
    pos: usize,
    /// Where the last component ended (before those slashes).
    end: usize,
    /// Where the last component started.
    start: usize,
    _store: PhantomData<&'a mut PathCopy>,
}

impl<'a> OnePiece<'a> {
    /// Copy `path` (at most FAST_PATH_MAX bytes, no NUL) into `store`.
    /// Only the bytes the walk can read are written: the path and the
    /// words after it up to 8 zero bytes past its end.
    #[inline(always)]
    pub(super) fn new(path: &[u8], store: &'a mut PathCopy) -> OnePiece<'a> {
        let mut one = OnePiece {
            buf: store.as_mut_ptr().cast::<u8>(),
            len: 0,
            pos: 0,
            end: 0,
            start: 0,
            _store: PhantomData,
        };
        one.copy(path);
        one
    }

    /// Start over on another path (the batched walk reuses its lanes'
    /// stores): as `new`, into the same store.
    #[inline(always)]
    pub(super) fn reset(&mut self, path: &[u8]) {
        self.copy(path);
        self.pos = 0;
        self.end = 0;
        self.start = 0;
    }

    #[inline(always)]
    fn copy(&mut self, path: &[u8]) {
        let n = path.len();
        assert!(n <= FAST_PATH_MAX);
        let words = self.buf.cast::<u64>();
        // SAFETY: `buf` is the start of the store this borrows exclusively
        // for 'a (a `PathCopy`, PAD_WORDS words, 8-aligned). n / 8 + 1 <
        // PAD_WORDS (n <= FAST_PATH_MAX), so both words are inside it; then
        // the path's n bytes go over their start (the copy does not overlap
        // `path`: the store is our own). The bytes [0, (n / 8 + 2) * 8) are
        // now initialised, and every read stays below n + 8 <= that bound
        // (see `byte`).
        unsafe {
            words.add(n / 8).write(0);
            words.add(n / 8 + 1).write(0);
            std::ptr::copy_nonoverlapping(path.as_ptr(), self.buf, n);
        }
        self.len = n;
    }

    /// Where the unwalked rest of the path starts: the last component's
    /// end (a symlink handed to `Components` there must still see the
    /// slash after it: `link/` must be a directory), or, after `rewind`,
    /// the start of the component to retry. An offset into the copy, and
    /// so into the path it was made from.
    pub(super) fn rest_start(&self) -> usize {
        self.end
    }

    #[inline(always)]
    fn byte(&self, i: usize) -> u8 {
        debug_assert!(i < (self.len / 8 + 2) * 8);
        // SAFETY: callers stay within len + 8 (every scan stops at the
        // first zero byte, and the 8 bytes from len are zero), inside the
        // initialised part of the store (`copy`).
        unsafe { *self.buf.add(i) }
    }

    #[inline(always)]
    fn word(&self, i: usize) -> u64 {
        debug_assert!(i + 8 <= (self.len / 8 + 2) * 8);
        // SAFETY: as `byte`: i <= len, and the copy extends 8 bytes past len.
        u64::from_le(unsafe { self.buf.add(i).cast::<u64>().read_unaligned() })
    }
}

/// A component [`OnePiece`] scanned, kept across the phases of a batched
/// walk (`vfs::batch`) until the walk takes its step: the name is the
/// source's last component ([`OnePiece::comp`] rebuilds the [`Comp`]).
#[derive(Clone, Copy, Default)]
pub(super) struct Scanned {
    pub(super) hash: u32,
    pub(super) first: u64,
    last: bool,
    must_dir: bool,
}

impl OnePiece<'_> {
    /// Scan the next component (see [`CompSource::next_comp`]); its name
    /// stays the source's last one until the next scan or `rewind`.
    #[inline(always)]
    pub(super) fn next_scanned(&mut self) -> Option<Scanned> {
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
        self.start = start;
        // A component ends at its first `/` or at the zero after the path.
        let (end, hash, first) = scan_name(
            start,
            |i| self.word(i),
            |w, _| zero_bytes(w ^ SLASHES) | zero_bytes(w),
        );
        let mut pos = end;

        while self.byte(pos) == b'/' {
            pos += 1;
        }
        self.pos = pos;
        self.end = end;
        let last = pos >= self.len;
        debug_assert!(start < end && end <= self.len);
        Some(Scanned {
            hash,
            first,
            last,
            must_dir: last && end < self.len,
        })
    }

    /// How many of a dentry's read lines matching the last scanned name
    /// touches: two when it is longer than the part of the inline name on
    /// a dentry's first line ([`NAME_ON_LINE0`]). The batched walk
    /// prefetches that many.
    #[inline(always)]
    pub(super) fn dentry_lines(&self) -> usize {
        1 + usize::from(self.end - self.start > NAME_ON_LINE0)
    }

    /// Whether no component follows this one.
    #[inline(always)]
    pub(super) fn is_last(s: Scanned) -> bool {
        s.last
    }

    /// The component `s` describes: the last one scanned.
    #[inline(always)]
    pub(super) fn comp(&self, s: Scanned) -> Comp<'_> {
        debug_assert!(self.start < self.end && self.end <= self.len);
        // SAFETY: start < end <= len (set by the scan that returned `s`,
        // which stops at the zero byte at len at the latest): initialised
        // bytes of the copy, not written while `self` is borrowed.
        let name =
            unsafe { std::slice::from_raw_parts(self.buf.add(self.start), self.end - self.start) };
        Comp {
            name,
            last: s.last,
            must_dir: s.must_dir,
            hash: s.hash,
            first: s.first,
        }
    }
}

impl CompSource for OnePiece<'_> {
    #[inline(always)]
    fn next_comp(&mut self) -> Option<Comp<'_>> {
        let s = self.next_scanned()?;
        Some(self.comp(s))
    }

    #[inline(always)]
    fn push_link(&mut self, _target: &[u8]) -> Result<bool> {
        Ok(false)
    }

    fn rewind(&mut self) {
        self.pos = self.start;
        self.end = self.start;
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

    fn rewind(&mut self) {
        Components::rewind(self)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::dentry::{first_word, name_hash};

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
