//! Batched walks: `stat` or `lookup` of many independent paths (what each
//! path's walk answers is an [`Answer`]), interleaved so that their cache
//! misses overlap (group prefetching, as hash joins in the database
//! literature do it).
//!
//! One walk over a cold cache is a dependent chain per component: the
//! hash bucket (from the directory's address and the name's hash), the
//! dentry it points to, the dentry's inode (its mode decides whether the
//! walk may go on). Each load needs the one before it, so a lone walk waits
//! for every miss in turn; Linux cannot do better, since each system call
//! brings one path. A caller of the library with many paths at once (a
//! build tool's dependency scan, a server's READDIRPLUS, a sandbox's
//! manifest) can: the walks of different paths are independent.
//!
//! So [`LANES`] walks are in flight at once, inside one read section per
//! chunk of paths, and each component takes three phases, a tick apart:
//!
//! 1. (at the end of the step before) prefetch the bucket of (directory,
//!    name hash): both are known without a load (the walk stands in the
//!    directory; the hash comes from the path scan);
//! 2. load the bucket's first dentry and prefetch its read lines (one for
//!    a name of up to `NAME_ON_LINE0` bytes, two beyond);
//! 3. load that dentry's inode pointer and prefetch the inode (its mode
//!    word; for the last component, the attributes too); when that dentry
//!    is another name's, prefetch the next on the chain instead, and its
//!    inode at the start of phase 4, before the set's steps (a chain's
//!    second entry whose inode waited for the step cost the batch 1.19x
//!    at 1M paths);
//! 4. take the step: [`RcuWalk::step`], the one walk's per-component rules
//!    and checks (`namei::step`), which now finds its lines in the cache,
//!    then scan the next component and prefetch its bucket (1).
//!
//! The lanes are in [`SETS`] sets, each a phase ahead of the next, so every
//! tick does one set's steps (the long phase) and the other sets' loads:
//! between a prefetch and the load that needs it lies a whole tick of
//! other lanes' work. A lane whose walk ends takes the next path at once.
//!
//! Phases 1 to 3 are hints only: they read pointers inside the read section
//! (so the memory is allocated) and decide nothing; a chain whose first
//! dentry is not the one wanted, or that changed meanwhile, only costs the
//! miss the hint meant to hide. Every decision, and every sequence-count
//! validation, is the single walk's own, in the same order, so the batch
//! answers what one `stat` after another would (`tests/batch.rs` checks
//! that against `stat` on random trees); a lane that rcu mode cannot finish
//! (a symlink target, a fallback, a path longer than the padded copy) leaves
//! its lane and ends as a single walk would: the general rcu path at once,
//! or ref mode after the chunk's read section ends.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use super::namei::{inode_of, RcuWalk, RefWalk, WalkFlags, Walked};
use super::path::{check_path, OnePiece, PathCopy, Scanned, FAST_PATH_MAX};
use super::{At, DentryRef, StatMode, Vfs};
use crate::cred::Cred;
use crate::dentry::Dentry;
use crate::errno::{Errno, Result};
use crate::fs::Attr;
use crate::prefetch::{prefetch, prefetch_lines};
use crate::rcu::RcuGuard;
use crate::sync::AtomicPtr;

/// Sets of lanes: a lane's next load is started a whole tick (every other
/// set's work) before it is needed.
const SETS: usize = 3;
/// Lanes per set.
const PER_SET: usize = 8;
/// Walks in flight at once.
pub const LANES: usize = SETS * PER_SET;
/// Paths per read section: the section is left (and what was retired
/// meanwhile may be freed) between chunks, when no walk is in flight.
const CHUNK: usize = 512;

/// One walk in flight: where it stands, its path's padded copy, and the
/// component it takes next.
struct Lane<'v, 'g, 'c, 's> {
    /// The walk; `None` while the lane is idle.
    w: Option<RcuWalk<'v, 'g, 'c>>,
    one: OnePiece<'s>,
    /// The next component.
    comp: Scanned,
    /// Its bucket (prefetched).
    bucket: &'v AtomicPtr<Dentry>,
    /// The first dentry on that component's chain, once loaded; or the
    /// second, when the first was another name's (`chased`).
    head: Option<&'g Dentry>,
    /// `head` is the chain's second dentry, prefetched in phase 1 (taken
    /// back at the start of the step phase, before any step).
    chased: bool,
    /// Which path of the chunk.
    k: usize,
}

impl<'g> Lane<'_, 'g, '_, '_> {
    /// The dentry `head` holds, and whether its hints (parent, name hash)
    /// say it is the one the lane's component looks for.
    #[inline(always)]
    fn candidate(&self) -> Option<(&'g Dentry, bool)> {
        let (Some(w), Some(d)) = (&self.w, self.head) else {
            return None;
        };
        Some((d, d.hint_matches(w.cur(), self.comp.hash)))
    }
}

/// Ref-mode rests of a chunk's walks (index in the chunk, the walk),
/// finished once its read section has ended.
type Late<'v, 'p> = Vec<(usize, RefWalk<'v, 'p>)>;

/// What a batched walk answers for each path: the final inode's
/// attributes ([`Stat`]) or a counted reference to the final dentry
/// ([`Lookup`]).
pub(crate) trait Answer<'v> {
    type Out;
    /// Whether `read` takes a reference: the final dentry's count line is
    /// then prefetched with its inode.
    const TAKES_REF: bool;
    /// Inside the read section, for the walk's final dentry: write the
    /// answer into `slot` in place (an `Attr` is a dozen words; no move
    /// of it through the walk's result). What it writes stands only if
    /// the walk then validates it; otherwise the slot is written again
    /// with the answer of the ref-mode rest (a reference taken here is
    /// then dropped).
    fn read<'g>(g: &'g RcuGuard<'_>, dd: &'g Dentry, slot: &mut Result<Self::Out>) -> Option<()>
    where
        'v: 'g;
    /// The ref-mode rest of a walk, outside any read section.
    fn finish(vfs: &'v Vfs, w: RefWalk<'v, '_>, cred: &Cred, follow: bool) -> Result<Self::Out>;
    /// One path on its own (a backend that revalidates every name).
    fn one(vfs: &'v Vfs, cred: &Cred, at: At<'_>, path: &[u8], follow: bool) -> Result<Self::Out>;
}

/// `stat` / `lstat`: the attributes.
pub(crate) struct Stat;

impl<'v> Answer<'v> for Stat {
    type Out = Attr;
    const TAKES_REF: bool = false;

    #[inline(always)]
    fn read<'g>(g: &'g RcuGuard<'_>, dd: &'g Dentry, slot: &mut Result<Attr>) -> Option<()>
    where
        'v: 'g,
    {
        *slot = Ok(inode_of(g, dd)?.try_attr()?);
        Some(())
    }

    fn finish(vfs: &'v Vfs, w: RefWalk<'v, '_>, cred: &Cred, follow: bool) -> Result<Attr> {
        vfs.stat_ref(w, cred, follow)
    }

    fn one(vfs: &'v Vfs, cred: &Cred, at: At<'_>, path: &[u8], follow: bool) -> Result<Attr> {
        vfs.stat_as(cred, at, path, follow, StatMode::RefFree)
    }
}

/// `lookup`: a counted reference to the final dentry (negative or not).
pub(crate) struct Lookup;

impl<'v> Answer<'v> for Lookup {
    type Out = DentryRef<'v>;
    const TAKES_REF: bool = true;

    #[inline(always)]
    fn read<'g>(
        _g: &'g RcuGuard<'_>,
        dd: &'g Dentry,
        slot: &mut Result<DentryRef<'v>>,
    ) -> Option<()>
    where
        'v: 'g,
    {
        *slot = Ok(DentryRef::try_get(dd)?);
        Some(())
    }

    fn finish(
        vfs: &'v Vfs,
        w: RefWalk<'v, '_>,
        cred: &Cred,
        follow: bool,
    ) -> Result<DentryRef<'v>> {
        w.finish(vfs, cred, WalkFlags::follow(follow))
    }

    fn one(
        vfs: &'v Vfs,
        cred: &Cred,
        at: At<'_>,
        path: &[u8],
        follow: bool,
    ) -> Result<DentryRef<'v>> {
        vfs.lookup_as(cred, at, path, follow)
    }
}

impl Vfs {
    /// `stat` (`follow`) or `lstat` of every path in `paths` on behalf of
    /// `cred`, answers in `out` (EINVAL, and nothing written, unless the
    /// two have the same length). Never inlined: one call per batch, and
    /// `scripts/callgrind-batch.sh` counts paths by its calls.
    #[inline(never)]
    pub(crate) fn stat_many_as<P: AsRef<[u8]>>(
        &self,
        cred: &Cred,
        at: At<'_>,
        paths: &[P],
        follow: bool,
        out: &mut [Result<Attr>],
    ) -> Result<()> {
        self.walk_many::<Stat, P>(cred, at, paths, follow, out)
    }

    /// `lookup` of every path in `paths` on behalf of `cred`, counted
    /// references in `out`, as [`Vfs::stat_many_as`].
    pub(crate) fn lookup_many_as<'v, P: AsRef<[u8]>>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        paths: &[P],
        follow: bool,
        out: &mut [Result<DentryRef<'v>>],
    ) -> Result<()> {
        self.walk_many::<Lookup, P>(cred, at, paths, follow, out)
    }

    /// The walks of `paths`, interleaved, answered by `A`.
    fn walk_many<'v, A: Answer<'v>, P: AsRef<[u8]>>(
        &'v self,
        cred: &Cred,
        at: At<'_>,
        paths: &[P],
        follow: bool,
        out: &mut [Result<A::Out>],
    ) -> Result<()> {
        if paths.len() != out.len() {
            return Err(Errno::EINVAL);
        }
        // A revalidating backend is asked about every name and for fresh
        // attributes, by blocking calls: nothing to interleave.
        if self.sb().revalidate {
            for (p, o) in paths.iter().zip(out.iter_mut()) {
                *o = A::one(self, cred, at, p.as_ref(), follow);
            }
            return Ok(());
        }
        let flags = WalkFlags::follow(follow);
        let mut stores = [MaybeUninit::uninit(); LANES];
        for (paths, out) in paths.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            let mut late = Late::new();
            {
                let g = self.sb().rcu.read_lock();
                self.walk_chunk::<A, P>(&g, cred, at, flags, paths, out, &mut stores, &mut late);
            }
            // Outside the read section: ref mode may block on the backend.
            for (k, w) in late {
                out[k] = A::finish(self, w, cred, follow);
            }
        }
        Ok(())
    }

    /// One chunk of paths inside the read section `g`: [`LANES`] walks in
    /// flight, in [`SETS`] sets a phase apart; every tick, each set does
    /// its phase for each of its lanes (see the module docs), and a lane
    /// whose walk ends takes the next path.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn walk_chunk<'v, 'g, 'c, 'p, A: Answer<'v>, P: AsRef<[u8]>>(
        &'v self,
        g: &'g RcuGuard<'_>,
        cred: &'c Cred,
        at: At<'g>,
        flags: WalkFlags,
        paths: &'p [P],
        out: &mut [Result<A::Out>],
        stores: &mut [PathCopy; LANES],
        late: &mut Late<'v, 'p>,
    ) where
        'v: 'g,
    {
        let mut feed = Feed {
            vfs: self,
            g,
            cred,
            at,
            flags,
            paths,
            out,
            late,
            next: 0,
            answer: PhantomData::<A>,
        };
        let table = &self.sb().table;
        let idle = table.bucket_for(std::ptr::null(), 0);
        let mut lanes = stores.each_mut().map(|s| Lane {
            w: None,
            one: OnePiece::new(b"", s),
            comp: Scanned::default(),
            bucket: idle,
            head: None,
            chased: false,
            k: 0,
        });
        let mut live = 0;
        for l in lanes.iter_mut() {
            live += usize::from(feed.start(l));
        }
        // Set s does phase (tick + s) % SETS; `first` is set 0's.
        let mut first = 0;
        while live > 0 {
            let mut phase = first;
            for set in lanes.chunks_mut(PER_SET) {
                match phase {
                    // The first dentry of each chain (its bucket was
                    // prefetched a tick ago): its lookup fields, and the
                    // inline name's line 1 when the name reaches it.
                    0 => {
                        for l in set.iter_mut() {
                            if l.w.is_some() {
                                l.head = table.head_rcu(g, l.bucket);
                                if let Some(d) = l.head {
                                    prefetch_lines(d, l.one.dentry_lines());
                                }
                            }
                        }
                    }
                    // Its inode (the step reads the mode, `stat` every
                    // word) and, for a lookup's last component, its
                    // count line; or, when that dentry is another name's,
                    // the next on the chain.
                    1 => {
                        for l in set.iter_mut() {
                            let Some((d, hit)) = l.candidate() else {
                                continue;
                            };
                            if hit {
                                prefetch_target::<A>(g, d, l.comp);
                            } else if let Some(n) = d.hash_next_rcu(g) {
                                prefetch_lines(n, l.one.dentry_lines());
                                l.head = Some(n);
                                l.chased = true;
                            }
                        }
                    }
                    // The steps; the next component's bucket.
                    _ => {
                        // A chain's second dentry, prefetched a tick ago:
                        // if it is the one, its inode now, a few steps
                        // ahead of its lane's.
                        for l in set.iter_mut() {
                            if !std::mem::take(&mut l.chased) {
                                continue;
                            }
                            if let Some((d, true)) = l.candidate() {
                                prefetch_target::<A>(g, d, l.comp);
                            }
                        }
                        for l in set.iter_mut() {
                            if l.w.is_none() || feed.step(table, l) {
                                continue;
                            }
                            live -= 1;
                            live += usize::from(feed.start(l));
                        }
                    }
                }
                phase = if phase + 1 == SETS { 0 } else { phase + 1 };
            }
            first = if first + 1 == SETS { 0 } else { first + 1 };
        }
    }
}

/// Prefetch what a step into `d` (found for `comp`) reads: its inode
/// (the mode; for the last component, the attributes too) and, when the
/// answer takes a reference, the count line.
#[inline(always)]
fn prefetch_target<'v, A: Answer<'v>>(g: &RcuGuard<'_>, d: &Dentry, comp: Scanned) {
    let last = OnePiece::is_last(comp);
    if let Some(i) = inode_of(g, d) {
        i.prefetch(last);
    }
    if A::TAKES_REF && last {
        prefetch(&d.d_lockref);
    }
}

/// What a chunk's lanes share: the walk's parameters, the paths and where
/// their answers go.
struct Feed<'v, 'g, 'c, 'p, 'o, A: Answer<'v>, P> {
    vfs: &'v Vfs,
    g: &'g RcuGuard<'g>,
    cred: &'c Cred,
    at: At<'g>,
    flags: WalkFlags,
    paths: &'p [P],
    out: &'o mut [Result<A::Out>],
    late: &'o mut Late<'v, 'p>,
    /// The next path to start.
    next: usize,
    answer: PhantomData<A>,
}

impl<'v: 'g, 'g, 'c, 'p, A: Answer<'v>, P: AsRef<[u8]>> Feed<'v, 'g, 'c, 'p, '_, A, P> {
    /// The answer read inside the section ([`Answer::read`]), written
    /// straight into the path's slot `out`.
    #[inline(always)]
    fn read<'o>(
        g: &'g RcuGuard<'g>,
        out: &'o mut Result<A::Out>,
    ) -> impl FnOnce(&'g Dentry) -> Option<()> + 'o + use<'v, 'g, 'o, 'c, 'p, A, P>
    where
        'g: 'o,
    {
        move |dd| A::read(g, dd, out)
    }

    /// Start the next path that needs a walk in lane `l` (answering the
    /// ones decided before their first component on the way). False when
    /// no path is left; the lane is then idle.
    #[inline(always)]
    fn start(&mut self, l: &mut Lane<'v, 'g, 'c, '_>) -> bool {
        while let Some(path) = self.paths.get(self.next) {
            let k = self.next;
            self.next += 1;
            // The path a lane takes about a round of starts from now: a
            // caller's paths lie wherever it keeps them (a random sample
            // of a large table, strings on the heap), and copying one in
            // cold stalls every lane.
            if let Some(p) = self.paths.get(k + LANES) {
                prefetch(p.as_ref().as_ptr());
            }
            let path = path.as_ref();
            if let Err(e) = check_path(path) {
                self.out[k] = Err(e);
                continue;
            }
            if path.len() > FAST_PATH_MAX {
                self.single(k, path);
                continue;
            }
            let Some(w) = self
                .vfs
                .rcu_start(self.g, self.cred, self.at, path, self.flags)
            else {
                let done = self.vfs.rcu_not_started(self.at, path);
                put(&mut self.out[k], self.late, k, done);
                continue;
            };
            l.one.reset(path);
            let Some(comp) = l.one.next_scanned() else {
                // No component ("/"): the walk ends where it starts.
                let rest = l.one.rest_start();
                let read = Self::read(self.g, &mut self.out[k]);
                let done = self.vfs.end_one(w, self.at, path, rest, Ok(None), read);
                put(&mut self.out[k], self.late, k, done);
                continue;
            };
            l.bucket = self.vfs.sb().table.bucket_for(w.cur(), comp.hash);
            prefetch(l.bucket);
            l.w = Some(w);
            l.comp = comp;
            l.head = None;
            l.k = k;
            return true;
        }
        false
    }

    /// A path too long for the padded copy: the single walk, at once.
    #[cold]
    fn single(&mut self, k: usize, path: &'p [u8]) {
        let read = Self::read(self.g, &mut self.out[k]);
        let w = self
            .vfs
            .walk_rcu(self.g, self.cred, self.at, path, self.flags, read);
        put(&mut self.out[k], self.late, k, w);
    }

    /// Lane `l`'s step. True: it goes on (the next component's bucket is
    /// prefetched); false: its walk ended (answered, or left for ref mode)
    /// and the lane is idle.
    #[inline(always)]
    fn step(&mut self, table: &'v crate::table::Table, l: &mut Lane<'v, 'g, 'c, '_>) -> bool {
        let Some(w) = &mut l.w else {
            return false;
        };
        let r = {
            let comp = l.one.comp(l.comp);
            w.step(&comp)
        };
        let ran = match RcuWalk::after_step(&mut l.one, r) {
            None => match l.one.next_scanned() {
                Some(comp) => {
                    l.comp = comp;
                    l.head = None;
                    l.bucket = table.bucket_for(w.cur(), comp.hash);
                    prefetch(l.bucket);
                    return true;
                }
                None => Ok(None),
            },
            Some(ran) => ran,
        };
        let Some(w) = l.w.take() else {
            return false;
        };
        let k = l.k;
        let path = self.paths[k].as_ref();
        let read = Self::read(self.g, &mut self.out[k]);
        let done = self
            .vfs
            .end_one(w, self.at, path, l.one.rest_start(), ran, read);
        put(&mut self.out[k], self.late, k, done);
        false
    }
}

/// Record how path `k`'s walk ended: its error, or its ref-mode rest for
/// later (an rcu-mode answer is already in `out`, see `Feed::read`).
#[inline(always)]
fn put<'v, 'p, T>(out: &mut Result<T>, late: &mut Late<'v, 'p>, k: usize, w: Walked<'v, 'p, ()>) {
    match w {
        Walked::Rcu(()) => {}
        Walked::Err(e) => *out = Err(e),
        Walked::Unlazied(w) => late.push((k, w)),
    }
}
