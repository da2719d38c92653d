//! [`ReadSection`]: many lookups inside one read section.
//!
//! Every `stat` enters and leaves a read section of the reclamation crate,
//! and leaving costs a locked read-modify-write (seize's swap): on this
//! host about as much as the rest of a cached 4-component stat's
//! shared-memory traffic. A caller that makes many calls in a row (a server
//! draining a queue, a build tool stat-ing a tree) can stay in one section
//! and pay that once per `refresh_every` calls: the section is refreshed
//! (seize's `refresh`) every that many calls, so memory retired meanwhile
//! waits at most that many of this caller's calls (or until the section is
//! dropped) before it can be freed. Drop the section before blocking for
//! long: an idle holder delays every free in the `Vfs`.

use super::namei::Walked;
use super::{At, StatMode, Vfs};
use crate::cred::Cred;
use crate::errno::Result;
use crate::fs::Attr;
use crate::rcu::RcuGuard;

/// Calls between refreshes by default.
pub const REFRESH_EVERY: u32 = 64;

/// A read section held across calls (see the module docs). Not `Send`: a
/// section belongs to the thread that opened it.
///
/// ```
/// use std::sync::Arc;
/// use dcache::fs::memfs::MemFs;
/// use dcache::{At, Cred, Vfs};
///
/// let fs = Arc::new(MemFs::new());
/// fs.mkdir_p("src", 0o755)?;
/// for i in 0..100 {
///     fs.write_file(&format!("src/f{i}.rs"), b"fn main() {}")?;
/// }
/// let vfs = Vfs::new(fs)?;
///
/// // A build tool stat-ing a tree: one section for all the calls.
/// let me = Cred::current();
/// let mut s = vfs.read_section();
/// let mut total = 0;
/// for i in 0..100 {
///     total += s.stat(&me, At::Root, format!("src/f{i}.rs"))?.size;
/// }
/// drop(s); // before blocking: a held section delays frees.
/// assert_eq!(total, 1200);
/// # Ok::<(), dcache::Errno>(())
/// ```
pub struct ReadSection<'v> {
    vfs: &'v Vfs,
    /// `None` only while a walk rcu mode could not finish goes on in ref
    /// mode: that may block on the backend, which no read section may.
    guard: Option<RcuGuard<'v>>,
    left: u32,
    every: u32,
}

impl Vfs {
    /// Open a read section refreshed every [`REFRESH_EVERY`] calls.
    pub fn read_section(&self) -> ReadSection<'_> {
        self.read_section_every(REFRESH_EVERY)
    }

    /// Open a read section refreshed every `every` calls (at least 1).
    pub fn read_section_every(&self, every: u32) -> ReadSection<'_> {
        let every = every.max(1);
        ReadSection {
            vfs: self,
            guard: Some(self.sb().rcu.read_lock()),
            left: every,
            every,
        }
    }
}

impl ReadSection<'_> {
    #[inline(always)]
    fn tick(&mut self) {
        self.left -= 1;
        if self.left == 0 {
            if let Some(g) = &mut self.guard {
                g.refresh();
            }
            self.left = self.every;
        }
    }

    /// `stat(2)` on behalf of `cred` (permission-checked as
    /// [`crate::AsCred::stat`]).
    #[inline]
    pub fn stat(&mut self, cred: &Cred, at: At<'_>, path: impl AsRef<[u8]>) -> Result<Attr> {
        self.stat_with(cred, at, path.as_ref(), true)
    }

    /// `stat` or (`follow` false) `lstat` on behalf of `cred`.
    #[inline]
    pub fn stat_with(
        &mut self,
        cred: &Cred,
        at: At<'_>,
        path: impl AsRef<[u8]>,
        follow: bool,
    ) -> Result<Attr> {
        let path = path.as_ref();
        self.tick();
        super::path::check_path(path)?;
        let mut a = std::mem::MaybeUninit::uninit();
        let w = {
            let vfs = self.vfs;
            let g = &*self.guard.get_or_insert_with(|| vfs.sb().rcu.read_lock());
            match vfs.stat_rcu_in(g, cred, at, path, follow, StatMode::RefFree, &mut a) {
                // SAFETY: an rcu-mode answer wrote the attributes.
                Walked::Rcu(()) => return Ok(unsafe { a.assume_init() }),
                Walked::Err(e) => return Err(e),
                Walked::Unlazied(w) => w,
            }
        };
        // Leave the section for the ref-mode rest (it may block on the
        // backend); the next call enters a new one.
        self.guard = None;
        self.vfs.stat_ref(w, cred, follow)
    }
}
