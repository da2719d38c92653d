//! rcu-walk: inside one read section, look every component up in the hash
//! table, take no lock and no reference, and check each step with sequence
//! counters — a child is trusted only once its parent's `d_seq` is seen
//! unchanged after the child was found, and the final dentry's own `d_seq`
//! is checked by the caller after reading what it needs. A miss in the
//! table, a dentry mid-change, a backend that must revalidate with
//! blocking, or a symlink whose target is not cached yet makes it give up
//! (`Fallback`), never answer wrongly.

use std::mem::MaybeUninit;

use super::path::{Comp, CompSource, Components, OnePiece, FAST_PATH_MAX};
use super::{At, Super, Vfs};
use crate::cred::Cred;
use crate::dentry::{Dentry, D_HASHED};
use crate::errno::Errno;
use crate::fs::{Validity, NAME_MAX};
use crate::inode::Inode;
use crate::permission::{generic_permission, search_for_all, MAY_EXEC};
use crate::rcu::RcuGuard;
use crate::table::RcuHit;

/// How an rcu-walk ended. `'g` is the read section it ran in: a dentry it
/// answers with is borrowed for that long and no longer.
pub(crate) enum RcuWalk<'g> {
    /// The final dentry and its d_seq sample, still to be validated by the
    /// caller after it reads what it needs. May be negative only when
    /// `allow_negative` was set.
    Done(&'g Dentry, u32),
    /// A definite answer (validated).
    Err(Errno),
    /// Give up; redo in ref-walk.
    Fallback,
}

/// `d`'s inode, loaded inside the read section `g` (see
/// [`Dentry::inode_rcu`]).
#[inline(always)]
pub(super) fn inode_of<'g>(g: &'g RcuGuard<'_>, d: &'g Dentry) -> Option<&'g Inode> {
    d.inode_rcu(g)
}

/// Where an rcu-walk stands, carried from the fast component source to the
/// general one when a symlink must be followed.
struct RcuState<'c, 'g> {
    /// The read section every dentry below is borrowed from.
    guard: &'g RcuGuard<'g>,
    /// Who walks: search permission is checked for it on every directory.
    cred: &'c Cred,
    cur: &'g Dentry,
    cur_seq: u32,
    /// A `..` was taken: the global rename sequence must be unchanged at the end.
    dotdot: bool,
    rename_seq: u32,
    follow_last: bool,
    allow_negative: bool,
}

/// What one rcu-walk step decided.
enum Step<'g> {
    /// Go on from this dentry (its d_seq sample; whether it is a directory).
    Enter(&'g Dentry, u32, bool),
    /// `.`: stay.
    Stay,
    /// `..`: to the parent (never above the root).
    Up,
    /// A symlink to follow: its cached target.
    Link(&'g [u8]),
    /// The walk ends here.
    End(RcuWalk<'g>),
}

#[inline(always)]
fn is_dir(g: &RcuGuard<'_>, d: &Dentry) -> bool {
    inode_of(g, d).is_some_and(|i| i.is_dir())
}

impl Vfs {
    /// rcu-walk `path` from `at`. Must be called inside `g`.
    ///
    /// The common path (no symlink to follow) reads its components straight
    /// from `path` ([`OnePiece`]); the first symlink to follow hands the
    /// walk, where it stands, to the general [`Components`] iterator. Both
    /// run the same loop and the same per-component step ([`Vfs::rcu_step`]).
    #[inline]
    pub(crate) fn walk_rcu<'g>(
        &'g self,
        g: &'g RcuGuard<'_>,
        at: At<'g>,
        path: &[u8],
        follow_last: bool,
        allow_negative: bool,
        cred: &Cred,
    ) -> RcuWalk<'g> {
        let sb = self.sb();
        let rename_seq = sb.rename_seq.raw_begin();
        if rename_seq & 1 != 0 {
            return RcuWalk::Fallback;
        }
        let cur: &'g Dentry = match at {
            At::Dir(d) if path.first() != Some(&b'/') => d,
            // SAFETY: the root lives as long as the Vfs.
            _ => unsafe { &*sb.root() },
        };
        let cur_seq = cur.d_seq.raw_begin();
        if cur_seq & 1 != 0 {
            return RcuWalk::Fallback;
        }
        let mut st = RcuState {
            guard: g,
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
    fn walk_rcu_links<'g>(
        &'g self,
        st: &mut RcuState<'_, 'g>,
        target: &[u8],
        rest: &[u8],
    ) -> RcuWalk<'g> {
        let mut comps = Components::new(rest);
        if let Err(e) = comps.push_link_borrowed(target) {
            return RcuWalk::Err(e);
        }
        self.walk_rcu_general(st, comps)
    }

    /// rcu-walk with the general iterator (long paths, symlinks).
    #[cold]
    #[inline(never)]
    fn walk_rcu_general<'g>(
        &'g self,
        st: &mut RcuState<'_, 'g>,
        mut comps: Components<'_>,
    ) -> RcuWalk<'g> {
        match self.rcu_loop(st, &mut comps) {
            Ok(r) => r,
            // Components follows links itself; this cannot happen.
            Err(_) => RcuWalk::Fallback,
        }
    }

    /// Walk the components `src` yields from `st`. `Err(target)`: a symlink
    /// to follow that `src` cannot take (the walk stands on its directory).
    #[inline(always)]
    fn rcu_loop<'g, S: CompSource>(
        &'g self,
        st: &mut RcuState<'_, 'g>,
        src: &mut S,
    ) -> std::result::Result<RcuWalk<'g>, &'g [u8]> {
        let sb = self.sb();
        // SAFETY: the root lives as long as the Vfs.
        let root: &'g Dentry = unsafe { &*sb.root() };
        let mut cur_dir = is_dir(st.guard, st.cur);
        while let Some(comp) = src.next_comp() {
            if !cur_dir {
                // Only directories have components after them.
                let cd = st.cur;
                let e = if inode_of(st.guard, cd).is_none() {
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
                    if !std::ptr::eq(st.cur, root) {
                        let cd = st.cur;
                        // A parent is freed only a grace period after its
                        // last child lets it go: protected by the section.
                        let Some(pd) = cd.parent_rcu(st.guard) else {
                            return Ok(RcuWalk::Fallback);
                        };
                        let ps = pd.d_seq.raw_begin();
                        if ps & 1 != 0 || cd.d_seq.read_retry(st.cur_seq) {
                            return Ok(RcuWalk::Fallback);
                        }
                        st.cur = pd;
                        st.cur_seq = ps;
                        cur_dir = is_dir(st.guard, pd);
                    }
                }
                Step::Link(target) => {
                    if target[0] == b'/' {
                        st.cur = root;
                        st.cur_seq = root.d_seq.raw_begin();
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
    fn rcu_step<'g>(&self, sb: &Super, st: &RcuState<'_, 'g>, c: &Comp<'_>) -> Step<'g> {
        let cd = st.cur;
        // may_lookup: search permission on the directory we stand in. A
        // directory everyone may search costs one test of a word on the
        // inode's first line, which `is_dir` just read.
        if let Some(dir) = inode_of(st.guard, cd) {
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
        let (dd, dseq) = match sb
            .table
            .lookup_rcu_word(st.guard, cd, name, c.hash, c.first)
        {
            RcuHit::Found(d, s) => (d, s),
            RcuHit::Missing | RcuHit::Busy => return Step::End(RcuWalk::Fallback),
        };
        // The child is only as good as the parent we found it in.
        if cd.d_seq.read_retry(st.cur_seq) {
            return Step::End(RcuWalk::Fallback);
        }
        let inode = inode_of(st.guard, dd);
        if sb.revalidate && !self.rcu_revalidate(sb, st.guard, cd, dd, name) {
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
                return Step::Enter(dd, dseq, false);
            }
            return Step::End(validated(dd, dseq, Errno::ENOENT));
        };
        // The type from the mode's S_IFMT bits (fixed for the inode's life).
        match inode.mode() & libc::S_IFMT {
            libc::S_IFDIR => Step::Enter(dd, dseq, true),
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
            _ => Step::Enter(dd, dseq, false),
        }
    }

    /// The full search check in rcu-walk: `Some` ends the walk (EACCES, or
    /// a fallback when a writer interfered).
    #[cold]
    #[inline(never)]
    fn rcu_search_denied<'g>(
        &self,
        st: &RcuState<'_, 'g>,
        cd: &Dentry,
        dir: &Inode,
    ) -> Option<RcuWalk<'g>> {
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
    fn rcu_revalidate(
        &self,
        sb: &Super,
        g: &RcuGuard<'_>,
        cd: &Dentry,
        dd: &Dentry,
        name: &[u8],
    ) -> bool {
        let Some(dir) = inode_of(g, cd) else {
            return false;
        };
        sb.fs.revalidate(
            dir.ino,
            name,
            inode_of(g, dd).map(|i| i.ino),
            dd.d_time.load(crate::sync::Ordering::Relaxed),
            true,
        ) == Validity::Valid
    }
}

/// Return `e` if `d` is unchanged since `seq`, else fall back.
#[inline(always)]
fn validated<'g>(d: &Dentry, seq: u32, e: Errno) -> RcuWalk<'g> {
    if d.d_seq.read_retry(seq) {
        RcuWalk::Fallback
    } else {
        RcuWalk::Err(e)
    }
}
