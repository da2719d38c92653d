//! The path walk (Linux's `fs/namei.c`): one state, one step, two modes.
//!
//! A walk starts in **rcu mode**: inside one read section, every component
//! is looked up in the hash table with no lock and no reference, and each
//! step is checked with sequence counts — a child is trusted only once its
//! parent's `d_seq` is seen unchanged after the child was found, and an
//! answer about a dentry only once that dentry's `d_seq` is. When rcu mode
//! cannot go on (a miss in the table, a dentry mid-change, a backend that
//! must revalidate by blocking, a symlink whose target is not cached), the
//! walk **unlazies**: it takes a reference on the directory it stands in,
//! checks that nothing changed under it, and continues from there in **ref
//! mode**, holding references and calling the backend under the
//! directory's `i_rwsem`. Only when the unlazy finds the state changed does
//! the walk start over, in ref mode, from where it began.
//!
//! The per-component rules — the current dentry must be a directory,
//! search permission on it, NAME_MAX, `.` and `..` (never above the root),
//! negative entries, when a symlink is followed, a trailing slash — are
//! [`step`], written once over the [`Mode`] trait; each mode supplies only
//! how it looks a name up, moves, and reports (rcu mode validates every
//! answer against the sequence it read it under; ref mode needs not).
//!
//! The end of an rcu-mode walk is [`RcuWalk::complete`]: the caller's
//! read of the final dentry runs inside the section and is handed back only
//! once validated, so no caller repeats the final `d_seq` check.

use std::mem::MaybeUninit;

use super::path::{Comp, CompSource, Components, OnePiece, FAST_PATH_MAX};
use super::{At, DentryRef, Super, Vfs};
use crate::cred::Cred;
use crate::dentry::{Dentry, D_HASHED};
use crate::errno::{Errno, Result};
use crate::fs::{Validity, NAME_MAX};
use crate::inode::Inode;
use crate::permission::{generic_permission, search_for_all, MAY_EXEC};
use crate::rcu::RcuGuard;
use crate::table::RcuHit;

/// `d`'s inode, loaded inside the read section `g` (see
/// [`Dentry::inode_rcu`]).
#[inline(always)]
pub(super) fn inode_of<'g>(g: &'g RcuGuard<'_>, d: &'g Dentry) -> Option<&'g Inode> {
    d.inode_rcu(g)
}

/// What the caller wants of the last component.
#[derive(Clone, Copy)]
pub(crate) struct WalkFlags {
    /// Follow a final symlink (`stat`, not `lstat`).
    pub(crate) follow_last: bool,
    /// A missing last component ends the walk on its negative dentry
    /// instead of ENOENT.
    pub(crate) allow_negative: bool,
}

impl WalkFlags {
    pub(crate) const fn follow(follow_last: bool) -> WalkFlags {
        WalkFlags {
            follow_last,
            allow_negative: false,
        }
    }
}

/// Why a step did not move on.
pub(crate) enum Stop {
    /// A definite answer (validated, in rcu mode).
    Err(Errno),
    /// rcu mode cannot decide here; retry this component in ref mode.
    Fallback,
}

impl From<Errno> for Stop {
    fn from(e: Errno) -> Stop {
        Stop::Err(e)
    }
}

/// Where a step leaves the walk.
pub(super) enum Next<T> {
    /// Go on with the next component.
    Go,
    /// Splice a symlink's target in before the rest of the path.
    Link(T),
}

/// What a walk mode supplies to [`step`]: how it reads the directory it
/// stands in, looks a name up, moves, and turns a decision into an answer.
trait Mode {
    /// A looked-up child (rcu: a borrowed dentry and its sequence sample;
    /// ref: a counted reference).
    type Child;
    /// A symlink target (rcu: borrowed from the inode; ref: a copy).
    type Target;
    /// The inode of the directory the walk stands in (None: negative).
    fn dir_inode(&self) -> Option<&Inode>;
    /// Answer `e` about where the walk stands.
    fn fail(&self, e: Errno) -> Stop;
    /// Search permission on `dir` (whose mode is `mode`), where the walk
    /// stands.
    fn search(&self, dir: &Inode, mode: u32) -> std::result::Result<(), Stop>;
    /// Look `c` up in the directory the walk stands in.
    fn lookup(&mut self, c: &Comp<'_>) -> std::result::Result<Self::Child, Stop>;
    /// The child's inode (None: negative).
    fn child_inode<'a>(&'a self, ch: &'a Self::Child) -> Option<&'a Inode>;
    /// Answer `e` about the child.
    fn fail_child(&self, ch: &Self::Child, e: Errno) -> Stop;
    /// Stand in the child.
    fn enter(&mut self, ch: Self::Child);
    /// `..`: to the parent, staying at the root.
    fn up(&mut self) -> std::result::Result<(), Stop>;
    /// The target of the symlink `ch` (non-empty; an absolute one moves the
    /// walk to the root).
    fn link(&mut self, ch: Self::Child) -> std::result::Result<Self::Target, Stop>;
}

/// One component, by the rules every walk shares.
#[inline(always)]
fn step<M: Mode>(
    m: &mut M,
    flags: WalkFlags,
    c: &Comp<'_>,
) -> std::result::Result<Next<M::Target>, Stop> {
    // Only directories have components after them; may_lookup needs search
    // permission on the directory.
    let Some(dir) = m.dir_inode() else {
        return Err(m.fail(Errno::ENOENT));
    };
    // The mode word: `st_mode` and the ACL state bits, which make the
    // search test's fast path fail for an inode with an ACL.
    let mode = dir.mode_word();
    if mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(m.fail(Errno::ENOTDIR));
    }
    m.search(dir, mode)?;
    let name = c.name;
    if name.len() > NAME_MAX {
        return Err(m.fail(Errno::ENAMETOOLONG));
    }
    // `first` is the name zero padded: "." and ".." in one compare each.
    if name.len() <= 2 && c.first as u8 == b'.' {
        if name.len() == 1 {
            return Ok(Next::Go);
        }
        if c.first == u64::from(u16::from_le_bytes(*b"..")) {
            m.up()?;
            return Ok(Next::Go);
        }
    }
    let ch = m.lookup(c)?;
    // The type from the mode's S_IFMT bits (fixed for the inode's life).
    let fmt = match m.child_inode(&ch) {
        Some(i) => i.mode() & libc::S_IFMT,
        None => {
            if c.last && flags.allow_negative {
                m.enter(ch);
                return Ok(Next::Go);
            }
            return Err(m.fail_child(&ch, Errno::ENOENT));
        }
    };
    match fmt {
        libc::S_IFDIR => {}
        libc::S_IFLNK if !c.last || flags.follow_last || c.must_dir => {
            return m.link(ch).map(Next::Link);
        }
        _ if c.must_dir => return Err(m.fail_child(&ch, Errno::ENOTDIR)),
        _ => {}
    }
    m.enter(ch);
    Ok(Next::Go)
}

/// Return `e` if `d` is unchanged since `seq`, else fall back.
#[inline(always)]
fn validated(d: &Dentry, seq: u32, e: Errno) -> Stop {
    if d.d_seq.read_retry(seq) {
        Stop::Fallback
    } else {
        Stop::Err(e)
    }
}

/// An rcu-mode walk: where it stands, and what it must re-check.
pub(crate) struct RcuWalk<'v, 'g, 'c> {
    sb: &'v Super,
    /// The read section every dentry below is borrowed from.
    g: &'g RcuGuard<'g>,
    /// Who walks: search permission is checked for it on every directory.
    cred: &'c Cred,
    root: &'g Dentry,
    cur: &'g Dentry,
    seq: u32,
    /// A `..` was taken: the global rename sequence must be unchanged.
    dotdot: bool,
    rename_seq: u32,
    flags: WalkFlags,
}

impl<'g> Mode for RcuWalk<'_, 'g, '_> {
    type Child = (&'g Dentry, u32);
    type Target = &'g [u8];

    #[inline(always)]
    fn dir_inode(&self) -> Option<&Inode> {
        inode_of(self.g, self.cur)
    }

    #[inline(always)]
    fn fail(&self, e: Errno) -> Stop {
        validated(self.cur, self.seq, e)
    }

    #[inline(always)]
    fn search(&self, dir: &Inode, mode: u32) -> std::result::Result<(), Stop> {
        // A directory everyone may search costs one test of the mode word
        // the type test just read.
        if search_for_all(mode) {
            return Ok(());
        }
        self.search_slow(dir)
    }

    #[inline(always)]
    fn lookup(&mut self, c: &Comp<'_>) -> std::result::Result<(&'g Dentry, u32), Stop> {
        let cd = self.cur;
        let (dd, dseq) = match self
            .sb
            .table
            .lookup_rcu_word(self.g, cd, c.name, c.hash, c.first)
        {
            RcuHit::Found(d, s) => (d, s),
            RcuHit::Missing | RcuHit::Busy => return Err(Stop::Fallback),
        };
        // The child is only as good as the parent we found it in.
        if cd.d_seq.read_retry(self.seq) {
            return Err(Stop::Fallback);
        }
        if self.sb.revalidate && !self.revalidate(cd, dd, c.name) {
            return Err(Stop::Fallback);
        }
        // A negative answer only from a dentry still in the table: one
        // already unhashed (killed or dropped) can be reached through a
        // chain link read before its removal, with a d_seq sampled after
        // it, and must not say ENOENT for a name that may exist (Linux
        // skips unhashed dentries in __d_lookup_rcu; here only the negative
        // case pays for the test). Its unhash cleared D_HASHED before
        // invalidating d_seq (Release), so a sample taken after that
        // (Acquire) sees the flag cleared.
        if inode_of(self.g, dd).is_none() && dd.flags() & D_HASHED == 0 {
            return Err(Stop::Fallback);
        }
        Ok((dd, dseq))
    }

    #[inline(always)]
    fn child_inode<'a>(&'a self, ch: &'a (&'g Dentry, u32)) -> Option<&'a Inode> {
        inode_of(self.g, ch.0)
    }

    #[inline(always)]
    fn fail_child(&self, ch: &(&'g Dentry, u32), e: Errno) -> Stop {
        validated(ch.0, ch.1, e)
    }

    #[inline(always)]
    fn enter(&mut self, ch: (&'g Dentry, u32)) {
        (self.cur, self.seq) = ch;
    }

    #[inline(always)]
    fn up(&mut self) -> std::result::Result<(), Stop> {
        self.dotdot = true;
        if std::ptr::eq(self.cur, self.root) {
            return Ok(());
        }
        let cd = self.cur;
        // A parent is freed only a grace period after its last child lets
        // it go: protected by the section.
        let Some(pd) = cd.parent_rcu(self.g) else {
            return Err(Stop::Fallback);
        };
        let ps = pd.d_seq.raw_begin();
        if ps & 1 != 0 || cd.d_seq.read_retry(self.seq) {
            return Err(Stop::Fallback);
        }
        self.cur = pd;
        self.seq = ps;
        Ok(())
    }

    #[inline(always)]
    fn link(&mut self, (dd, dseq): (&'g Dentry, u32)) -> std::result::Result<&'g [u8], Stop> {
        let Some(inode) = inode_of(self.g, dd) else {
            return Err(Stop::Fallback);
        };
        // The target lives with the inode, past this read section's use.
        let Some(target) = inode.cached_link() else {
            return Err(Stop::Fallback);
        };
        if dd.d_seq.read_retry(dseq) {
            return Err(Stop::Fallback);
        }
        if target.is_empty() {
            return Err(Stop::Err(Errno::ENOENT));
        }
        if target[0] == b'/' {
            self.cur = self.root;
            self.seq = self.root.d_seq.raw_begin();
        }
        Ok(target)
    }
}

impl<'v, 'g, 'c> RcuWalk<'v, 'g, 'c> {
    /// The full search check: the permission bits may be mid-update.
    #[cold]
    #[inline(never)]
    fn search_slow(&self, dir: &Inode) -> std::result::Result<(), Stop> {
        let Some(p) = dir.try_perm() else {
            return Err(Stop::Fallback);
        };
        // An ACL not read yet, or one that decides for this caller, is
        // read (or taken from the cache's lock) in reference mode: Linux's
        // -ECHILD from `check_acl` under MAY_NOT_BLOCK.
        match dir.acl_state() {
            Some(false) => {}
            Some(true) if self.cred.fsuid == p.uid || p.mode & 0o070 == 0 => {}
            _ => return Err(Stop::Fallback),
        }
        generic_permission(self.cred, p, MAY_EXEC).map_err(|e| self.fail(e))
    }

    /// Ask a revalidating backend, without blocking, whether `dd` (found
    /// under `cd`) still holds.
    #[cold]
    fn revalidate(&self, cd: &Dentry, dd: &Dentry, name: &[u8]) -> bool {
        let Some(dir) = inode_of(self.g, cd) else {
            return false;
        };
        self.sb.fs.revalidate(
            dir.ino,
            name,
            inode_of(self.g, dd).map(|i| i.ino),
            dd.d_time.load(crate::sync::Ordering::Relaxed),
            true,
        ) == Validity::Valid
    }

    /// Walk the components `src` yields. `Err(Stop)` leaves the walk where
    /// it stood before the component that stopped it (`src` rewinds to
    /// it on a fallback). `Ok(Some(target))`: a symlink that `src` cannot
    /// splice in (the walk stands on its directory).
    #[inline(always)]
    fn run<S: CompSource>(&mut self, src: &mut S) -> std::result::Result<Option<&'g [u8]>, Stop> {
        while let Some(comp) = src.next_comp() {
            let r = self.step(&comp);
            if let Some(stopped) = Self::after_step(src, r) {
                return stopped;
            }
        }
        Ok(None)
    }

    /// One component by the shared rules ([`step`]). The batched walk
    /// (`vfs::batch`) calls this once per component, between its
    /// prefetches; `run` calls it in a loop.
    #[inline(always)]
    pub(super) fn step(&mut self, comp: &Comp<'_>) -> std::result::Result<Next<&'g [u8]>, Stop> {
        step(self, self.flags, comp)
    }

    /// What a step's result means for the walk over `src`: `None`, go on
    /// with the next component; `Some(r)`, the walk stops with what `run`
    /// returns (on a fallback, `src` rewound to the component that stopped
    /// it).
    #[inline(always)]
    pub(super) fn after_step<S: CompSource>(
        src: &mut S,
        r: std::result::Result<Next<&'g [u8]>, Stop>,
    ) -> Option<std::result::Result<Option<&'g [u8]>, Stop>> {
        match r {
            Ok(Next::Go) => None,
            Ok(Next::Link(target)) => match src.push_link(target) {
                Ok(true) => None,
                Ok(false) => Some(Ok(Some(target))),
                Err(e) => Some(Err(Stop::Err(e))),
            },
            Err(Stop::Fallback) => {
                src.rewind();
                Some(Err(Stop::Fallback))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// The dentry the walk stands in (the directory the next component is
    /// looked up in).
    #[inline(always)]
    pub(super) fn cur(&self) -> &'g Dentry {
        self.cur
    }

    /// The walk's end: `read` the final dentry inside the section; its
    /// result is returned only if the dentry (and, after a `..`, the
    /// rename sequence) is unchanged since the walk read it, so callers
    /// never repeat the check. `None`: `read` declined or a writer
    /// interfered.
    #[inline(always)]
    fn complete<R>(&self, read: impl FnOnce(&'g Dentry) -> Option<R>) -> Option<R> {
        let r = read(self.cur)?;
        if self.cur.d_seq.read_retry(self.seq)
            || (self.dotdot && self.sb.rename_seq.read_retry(self.rename_seq))
        {
            return None;
        }
        Some(r)
    }

    /// Take a reference where the walk stands, if nothing changed under
    /// it since (Linux's `try_to_unlazy`).
    fn unlazy(&self) -> Option<DentryRef<'v>> {
        let r = DentryRef::try_get(self.cur)?;
        if self.cur.d_seq.read_retry(self.seq)
            || (self.dotdot && self.sb.rename_seq.read_retry(self.rename_seq))
        {
            return None;
        }
        Some(r)
    }
}

/// How an rcu-mode walk ended. Returned in place (the caller's slot): the
/// fast path writes only the tag and `R`; the large ref-mode state is
/// written only when rcu mode stopped, and boxing it would cost an
/// allocation on every fallback.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Walked<'v, 'p, R> {
    /// Answered in rcu mode (validated).
    Rcu(R),
    /// A definite error.
    Err(Errno),
    /// rcu mode stopped: go on in ref mode from here, after leaving the
    /// read section.
    Unlazied(RefWalk<'v, 'p>),
}

/// A walk in ref mode, or the state one continues from: a reference on
/// the directory it stands in and the components still to walk (symlink
/// targets among them copied).
pub(crate) struct RefWalk<'v, 'p> {
    cur: DentryRef<'v>,
    comps: Components<'p>,
}

struct RefMode<'v, 'c> {
    vfs: &'v Vfs,
    cred: &'c Cred,
    cur: DentryRef<'v>,
}

impl<'v> Mode for RefMode<'v, '_> {
    type Child = DentryRef<'v>;
    type Target = Vec<u8>;

    fn dir_inode(&self) -> Option<&Inode> {
        self.cur.inode()
    }

    fn fail(&self, e: Errno) -> Stop {
        Stop::Err(e)
    }

    fn search(&self, dir: &Inode, mode: u32) -> std::result::Result<(), Stop> {
        if search_for_all(mode) {
            return Ok(());
        }
        Ok(self.vfs.inode_permission(self.cred, dir, MAY_EXEC)?)
    }

    fn lookup(&mut self, c: &Comp<'_>) -> std::result::Result<DentryRef<'v>, Stop> {
        Ok(self.vfs.lookup_one(&self.cur, c.name, false)?)
    }

    fn child_inode<'a>(&'a self, ch: &'a DentryRef<'v>) -> Option<&'a Inode> {
        ch.inode()
    }

    fn fail_child(&self, _ch: &DentryRef<'v>, e: Errno) -> Stop {
        Stop::Err(e)
    }

    fn enter(&mut self, ch: DentryRef<'v>) {
        self.cur = ch;
    }

    fn up(&mut self) -> std::result::Result<(), Stop> {
        if self.cur.as_ptr() != self.vfs.sb().root() {
            self.cur = self.cur.parent();
        }
        Ok(())
    }

    fn link(&mut self, ch: DentryRef<'v>) -> std::result::Result<Vec<u8>, Stop> {
        let inode = ch.inode().ok_or(Errno::ENOENT)?;
        let target = self.vfs.read_link(inode)?;
        if target.is_empty() {
            return Err(Stop::Err(Errno::ENOENT));
        }
        if target[0] == b'/' {
            self.cur = self.vfs.root();
        }
        Ok(target)
    }
}

impl<'v, 'p> RefWalk<'v, 'p> {
    /// A ref-mode walk of `path` from `at`, from the start.
    pub(crate) fn start(vfs: &'v Vfs, at: At<'_>, path: &'p [u8]) -> Result<RefWalk<'v, 'p>> {
        let cur = match at {
            At::Dir(d) if path.first() != Some(&b'/') => {
                vfs.check_owned(d)?;
                DentryRef::try_get(d).ok_or(Errno::ENOENT)?
            }
            _ => vfs.root(),
        };
        Ok(RefWalk {
            cur,
            comps: Components::new(path),
        })
    }

    /// Walk the rest with references; the final dentry is negative only
    /// with `allow_negative`.
    pub(crate) fn finish(
        self,
        vfs: &'v Vfs,
        cred: &Cred,
        flags: WalkFlags,
    ) -> Result<DentryRef<'v>> {
        let RefWalk { cur, mut comps } = self;
        let mut m = RefMode { vfs, cred, cur };
        while let Some(comp) = comps.next_comp() {
            match step(&mut m, flags, &comp) {
                Ok(Next::Go) => {}
                Ok(Next::Link(target)) => comps.push_link_owned(target)?,
                Err(Stop::Err(e)) => return Err(e),
                // Ref mode decides every step (none of its steps falls
                // back); answer as for a changed name if one ever did.
                Err(Stop::Fallback) => {
                    debug_assert!(false, "ref-walk fell back");
                    return Err(Errno::ESTALE);
                }
            }
        }
        Ok(m.cur)
    }
}

impl Vfs {
    /// Walk `path` from `at` for `cred`: rcu mode inside `g` first; `read`
    /// takes what the caller needs from the final dentry inside the
    /// section (handed back validated). When rcu mode stops, the walk
    /// unlazies where it stood: the caller leaves the read section and
    /// finishes it with [`RefWalk::finish`].
    #[inline]
    pub(crate) fn walk_rcu<'v, 'g, 'p, R>(
        &'v self,
        g: &'g RcuGuard<'_>,
        cred: &Cred,
        at: At<'g>,
        path: &'p [u8],
        flags: WalkFlags,
        read: impl FnOnce(&'g Dentry) -> Option<R>,
    ) -> Walked<'v, 'p, R>
    where
        'v: 'g,
    {
        let sb = self.sb();
        // SAFETY: the root lives as long as the Vfs.
        let root: &'g Dentry = unsafe { &*sb.root() };
        let start: &'g Dentry = match at {
            At::Dir(d) if path.first() != Some(&b'/') => {
                if !self.owns(d) {
                    return Walked::Err(Errno::EXDEV);
                }
                d
            }
            _ => root,
        };
        let mut w = RcuWalk {
            sb,
            g,
            cred,
            root,
            cur: start,
            seq: start.d_seq.raw_begin(),
            dotdot: false,
            rename_seq: sb.rename_seq.raw_begin(),
            flags,
        };
        if (w.seq | w.rename_seq) & 1 != 0 {
            return self.restart(at, path);
        }
        if path.len() > FAST_PATH_MAX {
            let stopped = w.run_general(Components::new(path));
            return self.finish_rcu(w, at, path, stopped, read);
        }
        let mut store = MaybeUninit::uninit();
        let mut one = OnePiece::new(path, &mut store);
        match w.run(&mut one) {
            Ok(None) => match w.complete(read) {
                Some(r) => Walked::Rcu(r),
                None => w.unlazy_or_restart(self, at, path, Components::new(&path[path.len()..])),
            },
            Ok(Some(target)) => {
                let stopped = w.run_links(target, &path[one.rest_start()..]);
                self.finish_rcu(w, at, path, stopped, read)
            }
            Err(Stop::Err(e)) => Walked::Err(e),
            // Continue in ref mode from the component that stopped it: the
            // same bytes of the caller's path as of the copy.
            Err(Stop::Fallback) => {
                let rest = Components::new(&path[one.rest_start()..]);
                w.unlazy_or_restart(self, at, path, rest)
            }
        }
    }

    /// An rcu-mode walk of `path` from `at` standing at its start, or
    /// `None` when it cannot start: [`Vfs::rcu_not_started`] says why. The
    /// batched walk's start; `walk_rcu` writes the same lines inline (going
    /// through this costs its fast path a dozen instructions of moves, and
    /// the cached stat is held to its instruction count).
    #[inline(always)]
    pub(super) fn rcu_start<'v, 'g, 'c>(
        &'v self,
        g: &'g RcuGuard<'_>,
        cred: &'c Cred,
        at: At<'g>,
        path: &[u8],
        flags: WalkFlags,
    ) -> Option<RcuWalk<'v, 'g, 'c>>
    where
        'v: 'g,
    {
        let sb = self.sb();
        // SAFETY: the root lives as long as the Vfs.
        let root: &'g Dentry = unsafe { &*sb.root() };
        let start: &'g Dentry = match at {
            At::Dir(d) if path.first() != Some(&b'/') => {
                if !self.owns(d) {
                    return None;
                }
                d
            }
            _ => root,
        };
        let w = RcuWalk {
            sb,
            g,
            cred,
            root,
            cur: start,
            seq: start.d_seq.raw_begin(),
            dotdot: false,
            rename_seq: sb.rename_seq.raw_begin(),
            flags,
        };
        if (w.seq | w.rename_seq) & 1 != 0 {
            return None;
        }
        Some(w)
    }

    /// Why `rcu_start` could not start: EXDEV for another `Vfs`'s
    /// directory, else the start was mid-change (a ref-mode restart).
    #[cold]
    #[inline(never)]
    pub(super) fn rcu_not_started<'v, 'p, R>(
        &'v self,
        at: At<'_>,
        path: &'p [u8],
    ) -> Walked<'v, 'p, R> {
        match at {
            At::Dir(d) if path.first() != Some(&b'/') && !self.owns(d) => Walked::Err(Errno::EXDEV),
            _ => self.restart(at, path),
        }
    }

    /// The end of an rcu walk over a [`OnePiece`] copy of `path`: `ran` is
    /// what the walk returned (the batched walk's last `after_step`),
    /// `rest_start` the source's `rest_start()` then. The batched walk's
    /// end; `walk_rcu` matches the same cases inline, for the reason given
    /// at `rcu_start`.
    #[inline(always)]
    pub(super) fn end_one<'v, 'g, 'p, R>(
        &'v self,
        mut w: RcuWalk<'v, 'g, '_>,
        at: At<'_>,
        path: &'p [u8],
        rest_start: usize,
        ran: std::result::Result<Option<&'g [u8]>, Stop>,
        read: impl FnOnce(&'g Dentry) -> Option<R>,
    ) -> Walked<'v, 'p, R> {
        match ran {
            Ok(None) => match w.complete(read) {
                Some(r) => Walked::Rcu(r),
                None => w.unlazy_or_restart(self, at, path, Components::new(&path[path.len()..])),
            },
            Ok(Some(target)) => {
                let stopped = w.run_links(target, &path[rest_start..]);
                self.finish_rcu(w, at, path, stopped, read)
            }
            Err(Stop::Err(e)) => Walked::Err(e),
            // Continue in ref mode from the component that stopped it: the
            // same bytes of the caller's path as of the copy.
            Err(Stop::Fallback) => {
                let rest = Components::new(&path[rest_start..]);
                w.unlazy_or_restart(self, at, path, rest)
            }
        }
    }

    /// The rcu walk's end on the general path (long paths, symlinks).
    #[cold]
    #[inline(never)]
    fn finish_rcu<'v, 'g, 'p, R>(
        &'v self,
        w: RcuWalk<'v, 'g, '_>,
        at: At<'_>,
        path: &'p [u8],
        (comps, stopped): (Components<'p>, std::result::Result<(), Stop>),
        read: impl FnOnce(&'g Dentry) -> Option<R>,
    ) -> Walked<'v, 'p, R> {
        match stopped {
            Ok(()) => match w.complete(read) {
                Some(r) => Walked::Rcu(r),
                None => w.unlazy_or_restart(self, at, path, comps),
            },
            Err(Stop::Err(e)) => Walked::Err(e),
            Err(Stop::Fallback) => w.unlazy_or_restart(self, at, path, comps),
        }
    }

    /// Start over in ref mode (the walk's state changed under it).
    #[cold]
    pub(super) fn restart<'v, 'p, R>(&'v self, at: At<'_>, path: &'p [u8]) -> Walked<'v, 'p, R> {
        let counters = &self.sb().counters;
        counters
            .ref_walks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        counters
            .restarts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match RefWalk::start(self, at, path) {
            Ok(w) => Walked::Unlazied(w),
            Err(e) => Walked::Err(e),
        }
    }

    /// A whole walk for `cred`: rcu mode in a read section of its own,
    /// then, if it stopped, ref mode outside it.
    pub(crate) fn walk<'v, R>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        flags: WalkFlags,
        read: impl FnOnce(&Dentry) -> Option<R>,
    ) -> Result<std::result::Result<R, DentryRef<'v>>> {
        let w = {
            let g = self.sb().rcu.read_lock();
            match self.walk_rcu(&g, cred, at, path, flags, read) {
                Walked::Rcu(r) => return Ok(Ok(r)),
                Walked::Err(e) => return Err(e),
                Walked::Unlazied(w) => w,
            }
        };
        w.finish(self, cred, flags).map(Err)
    }

    /// A walk in ref mode only (namespace operations resolving a parent).
    pub(crate) fn walk_ref<'v>(
        &'v self,
        at: At<'_>,
        path: &[u8],
        flags: WalkFlags,
        cred: &Cred,
    ) -> Result<DentryRef<'v>> {
        self.sb()
            .counters
            .ref_walks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        RefWalk::start(self, at, path)?.finish(self, cred, flags)
    }
}

impl<'v, 'g> RcuWalk<'v, 'g, '_> {
    /// rcu mode with the general iterator (long paths, symlinks). Returns
    /// the iterator, positioned where the walk stopped.
    #[cold]
    #[inline(never)]
    fn run_general<'p>(
        &mut self,
        mut comps: Components<'p>,
    ) -> (Components<'p>, std::result::Result<(), Stop>) {
        // Components splices every link in itself: `run` ends with `None`.
        let r = self.run(&mut comps).map(|_| ());
        (comps, r)
    }

    /// The rest of an rcu walk once a symlink must be followed: `target`
    /// first, then `rest` of the path.
    #[cold]
    fn run_links<'p>(
        &mut self,
        target: &'g [u8],
        rest: &'p [u8],
    ) -> (Components<'p>, std::result::Result<(), Stop>) {
        let mut comps = Components::new(rest);
        if let Err(e) = comps.push_link_borrowed(target) {
            return (comps, Err(Stop::Err(e)));
        }
        self.run_general(comps)
    }

    /// Go on in ref mode where the walk stands (the components left in
    /// `comps`), or, if the state changed under it, from the start.
    #[cold]
    #[inline(never)]
    fn unlazy_or_restart<'p, R>(
        &self,
        vfs: &'v Vfs,
        at: At<'_>,
        path: &'p [u8],
        mut comps: Components<'p>,
    ) -> Walked<'v, 'p, R> {
        let counters = &self.sb.counters;
        match self.unlazy() {
            Some(cur) => {
                counters
                    .ref_walks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // The symlink targets still to walk are the inodes' cached
                // copies, kept only as long as the read section: copy them.
                comps.own_links();
                counters
                    .unlazied
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Walked::Unlazied(RefWalk { cur, comps })
            }
            None => vfs.restart(at, path),
        }
    }
}
