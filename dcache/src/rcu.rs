//! Read-side critical sections and deferred freeing: the "RCU" of dcache.
//!
//! dcache does not hand-write its reclamation; it wraps a crate. Both
//! candidates are built in so one benchmark run compares them
//! (`dcache bench stat-same --variant reffree,epoch`):
//!
//! - [`Reclaim::Seize`] (the default): `seize` 0.5. Entering is a store to a
//!   per-thread slot plus a compiler fence (the retiring side pays a
//!   `membarrier` syscall instead of the reader paying a fence); leaving is one
//!   atomic swap on that per-thread slot. Memory held by a stalled reader is
//!   bounded. Each `Vfs` owns its collector, so dropping a `Vfs` frees every
//!   retired dentry at once (our leak tests rely on it).
//! - [`Reclaim::Epoch`]: `crossbeam-epoch` 0.9 with its global collector. The
//!   first pin executes a SeqCst fence (`lock`-prefixed RMW on x86); garbage
//!   of a dropped `Vfs` is freed whenever the global epoch advances.
//!
//! Why seize is the default: see the measured figures in docs/BENCHMARKS.md ("Choosing
//! the reclamation crate"); in short the reader side of a 4-component stat is
//! cheaper without the fence, and a per-instance collector gives exact frees.

use crossbeam_epoch as epoch;

/// Which reclamation crate a `Vfs` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reclaim {
    /// `seize` (the default).
    #[default]
    Seize,
    /// `crossbeam-epoch`.
    Epoch,
}

pub(crate) struct Rcu {
    kind: Reclaim,
    collector: seize::Collector,
    /// Under loom neither crate is modelled (they use real atomics and
    /// thread-locals): retired objects wait here until teardown, which is
    /// always safe, so the models check the sequence-count protocols alone.
    #[cfg(loom)]
    deferred: std::sync::Mutex<Vec<Retired>>,
}

/// A read-side critical section: pointers loaded through an [`Rcu`] while a
/// guard lives stay valid until it is dropped.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) enum RcuGuard<'a> {
    Seize(#[allow(dead_code)] seize::LocalGuard<'a>),
    Epoch(#[allow(dead_code)] epoch::Guard),
    #[cfg(loom)]
    Deferred(std::marker::PhantomData<&'a ()>),
}

/// A type-erased pointer + free function, so one retire path serves every
/// kind of object dcache frees late.
struct Retired {
    ptr: *mut u8,
    /// Handed to `free` with `ptr` (the owner of the memory, e.g. the slab
    /// the object returns to).
    ctx: *const (),
    free: unsafe fn(*mut u8, *const ()),
}

// SAFETY: a Retired is only a pointer to an object that no thread can reach
// any more; whichever thread runs `free` owns it exclusively.
unsafe impl Send for Retired {}

impl RcuGuard<'_> {
    /// Let reclamation past this guard without leaving the section for
    /// long: what was retired before now may be freed once every other
    /// reader moved on (seize's `refresh`, crossbeam's `repin`). Nothing
    /// read through the guard before may be used after.
    #[inline]
    pub(crate) fn refresh(&mut self) {
        match self {
            #[cfg(not(loom))]
            RcuGuard::Seize(g) => seize::Guard::refresh(g),
            #[cfg(not(loom))]
            RcuGuard::Epoch(g) => g.repin(),
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
}

impl Rcu {
    pub(crate) fn new(kind: Reclaim) -> Rcu {
        Rcu {
            kind,
            collector: seize::Collector::new(),
            #[cfg(loom)]
            deferred: std::sync::Mutex::new(Vec::new()),
        }
    }

    #[inline(always)]
    pub(crate) fn read_lock(&self) -> RcuGuard<'_> {
        #[cfg(loom)]
        return RcuGuard::Deferred(std::marker::PhantomData);
        #[cfg(not(loom))]
        match self.kind {
            Reclaim::Seize => RcuGuard::Seize(self.collector.enter()),
            Reclaim::Epoch => RcuGuard::Epoch(epoch::pin()),
        }
    }

    /// Free `ptr` with `free(ptr, ctx)` once every read section that might
    /// still see it has ended.
    ///
    /// # Safety
    /// `ptr` must already be unreachable for readers that start from now on,
    /// must not be retired twice, and `free(ptr, ctx)` must be a valid way
    /// to free it once no reader holds it (`ctx` still valid then).
    pub(crate) unsafe fn retire(
        &self,
        ptr: *mut u8,
        ctx: *const (),
        free: unsafe fn(*mut u8, *const ()),
    ) {
        #[cfg(loom)]
        {
            self.deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Retired { ptr, ctx, free });
        }
        #[cfg(not(loom))]
        // SAFETY: forwarded from our caller.
        unsafe {
            self.retire_to_crate(ptr, ctx, free)
        }
    }

    /// # Safety
    /// As `retire`.
    #[cfg(not(loom))]
    unsafe fn retire_to_crate(
        &self,
        ptr: *mut u8,
        ctx: *const (),
        free: unsafe fn(*mut u8, *const ()),
    ) {
        let r = Box::into_raw(Box::new(Retired { ptr, ctx, free }));
        match self.kind {
            Reclaim::Seize => {
                unsafe fn run(r: *mut Retired, _c: &seize::Collector) {
                    // SAFETY: seize calls this once, after the grace period,
                    // with the pointer we gave it (a leaked Box<Retired>).
                    let r = unsafe { Box::from_raw(r) };
                    // SAFETY: the caller of `retire` promised `free` fits.
                    unsafe { (r.free)(r.ptr, r.ctx) };
                }
                // SAFETY: forwarded from our caller; `run` frees `r` as a Box.
                unsafe { self.collector.retire(r, run) };
            }
            Reclaim::Epoch => {
                let r = RetiredBox(r);
                let g = epoch::pin();
                // SAFETY: forwarded from our caller; the closure owns `r`.
                unsafe {
                    g.defer_unchecked(move || {
                        let r = r;
                        let r = Box::from_raw(r.0);
                        (r.free)(r.ptr, r.ctx);
                    })
                };
                g.flush();
            }
        }
    }

    /// Help reclamation along: crossbeam-epoch's global collector frees
    /// garbage only while threads pin and flush; seize needs nothing.
    pub(crate) fn nudge(&self) {
        #[cfg(not(loom))]
        if self.kind == Reclaim::Epoch {
            epoch::pin().flush();
        }
    }

    /// Free everything retired so far, now.
    ///
    /// # Safety
    /// No thread may be inside a read section of this `Rcu` or hold a pointer
    /// it loaded in one (the `Vfs` calls this from `Drop`, with `&mut self`).
    pub(crate) unsafe fn barrier_all(&self) {
        #[cfg(loom)]
        for r in self
            .deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            // SAFETY: exclusivity promised by the caller; each retired once.
            unsafe { (r.free)(r.ptr, r.ctx) };
        }
        // SAFETY: exclusivity promised by the caller.
        unsafe { self.collector.reclaim_all() };
        if self.kind == Reclaim::Epoch {
            // crossbeam-epoch's global collector cannot be drained on
            // demand; pinning and flushing a few times lets it advance.
            for _ in 0..4 {
                epoch::pin().flush();
            }
        }
    }
}

#[cfg_attr(loom, allow(dead_code))]
struct RetiredBox(*mut Retired);
// SAFETY: see `Retired`.
unsafe impl Send for RetiredBox {}
