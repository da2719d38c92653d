//! Read-side critical sections and deferred freeing: the "RCU" of dcache.
//!
//! dcache does not hand-write its reclamation; it wraps `seize` 0.5 and uses
//! it only through its public API (`Collector::enter`, `Guard::protect`,
//! `Guard::refresh`, `Collector::retire`, `Collector::reclaim_all`).
//! Entering is a store to a per-thread slot plus a compiler fence (the
//! retiring side pays a `membarrier` syscall instead of the reader paying a
//! fence); leaving is one atomic swap on that per-thread slot. Memory held by
//! a stalled reader is bounded. Each `Vfs` owns its collector, so dropping a
//! `Vfs` frees every retired object at once (our leak tests rely on it).
//!
//! Why seize and not crossbeam-epoch: see the measured figures in
//! docs/BENCHMARKS.md ("Choosing the reclamation crate"); in short the
//! reader side of a 4-component stat is cheaper without crossbeam's fence
//! on pin, and a per-instance collector gives exact frees on drop.
//!
//! Every load of a pointer that a reader dereferences after it and that a
//! writer may retire concurrently (a hash-bucket head, `d_hash_next`,
//! `d_parent`, `d_inode`, `d_name_ext`) goes through [`RcuGuard::protect`],
//! which needs the guard: a protected load cannot be written outside a read
//! section.

use crate::sync::AtomicPtr;
#[cfg(loom)]
use crate::sync::Ordering;

pub(crate) struct Rcu {
    #[cfg(not(loom))]
    collector: seize::Collector,
    /// Under loom seize is not modelled (it uses real atomics and
    /// thread-locals): retired objects wait here until teardown, which is
    /// always safe, so the models check the sequence-count protocols alone.
    #[cfg(loom)]
    deferred: std::sync::Mutex<Vec<Retired>>,
}

/// A read-side critical section: pointers loaded through
/// [`RcuGuard::protect`] while a guard lives stay valid until it is dropped
/// (or refreshed).
pub(crate) struct RcuGuard<'a> {
    #[cfg(not(loom))]
    guard: seize::LocalGuard<'a>,
    #[cfg(loom)]
    _section: std::marker::PhantomData<&'a ()>,
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
    /// Load `p` inside this read section: the object it points to, if it
    /// was reachable when loaded, is not freed before this guard is dropped
    /// or refreshed (the caller still needs `unsafe` to dereference it, and
    /// a borrow of the result should be tied to `&self`).
    ///
    /// Ordering: we ask seize for Acquire, which is what the reader needs
    /// from the data: the pointee's fields, written before the Release (or
    /// AcqRel) store that installed the pointer, or before the Release
    /// bucket unlock that published the dentry holding it, are visible. seize's
    /// `Guard::protect` strengthens it to SeqCst (`raw::Collector::protect`)
    /// so the load joins the single total order that the light barrier in
    /// `enter` and the heavy barrier (membarrier) on the retiring side
    /// establish: either the retirer sees this thread active, or this load
    /// sees the pointer's new value and never the retired one. On x86 a
    /// SeqCst load is a plain `mov`, as Acquire.
    ///
    /// Under loom seize is not used (nothing is freed before teardown), so
    /// this is a plain Acquire load of loom's atomic.
    #[inline(always)]
    pub(crate) fn protect<T>(&self, p: &AtomicPtr<T>) -> *mut T {
        #[cfg(not(loom))]
        return seize::Guard::protect(
            &self.guard,
            p,
            // Acquire: see above (seize raises it to SeqCst).
            std::sync::atomic::Ordering::Acquire,
        );
        // Acquire: see the pointee's initialisation; nothing is freed
        // under loom before teardown, so no grace period is at stake.
        #[cfg(loom)]
        return p.load(Ordering::Acquire);
    }

    /// Let reclamation past this guard without leaving the section for
    /// long: what was retired before now may be freed once every other
    /// reader moved on (seize's `refresh`). Nothing read through the guard
    /// before may be used after; `&mut self` ends every borrow tied to it.
    #[inline]
    pub(crate) fn refresh(&mut self) {
        #[cfg(not(loom))]
        seize::Guard::refresh(&mut self.guard);
    }
}

impl Rcu {
    pub(crate) fn new() -> Rcu {
        Rcu {
            #[cfg(not(loom))]
            collector: seize::Collector::new(),
            #[cfg(loom)]
            deferred: std::sync::Mutex::new(Vec::new()),
        }
    }

    #[inline(always)]
    pub(crate) fn read_lock(&self) -> RcuGuard<'_> {
        RcuGuard {
            #[cfg(not(loom))]
            guard: self.collector.enter(),
            #[cfg(loom)]
            _section: std::marker::PhantomData,
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
            use crate::sync::LockExt;
            self.deferred
                .lock_unpoisoned()
                .push(Retired { ptr, ctx, free });
        }
        #[cfg(not(loom))]
        {
            unsafe fn run(r: *mut Retired, _c: &seize::Collector) {
                // SAFETY: seize calls this once, after the grace period,
                // with the pointer we gave it (a leaked Box<Retired>).
                let r = unsafe { Box::from_raw(r) };
                // SAFETY: the caller of `retire` promised `free` fits.
                unsafe { (r.free)(r.ptr, r.ctx) };
            }
            let r = Box::into_raw(Box::new(Retired { ptr, ctx, free }));
            // SAFETY: forwarded from our caller; `run` frees `r` as a Box.
            unsafe { self.collector.retire(r, run) };
        }
    }

    /// Free everything retired so far, now.
    ///
    /// # Safety
    /// No thread may be inside a read section of this `Rcu` or hold a pointer
    /// it loaded in one (the `Vfs` calls this from `Drop`, with `&mut self`).
    pub(crate) unsafe fn barrier_all(&self) {
        #[cfg(loom)]
        for r in crate::sync::LockExt::lock_unpoisoned(&self.deferred).drain(..) {
            // SAFETY: exclusivity promised by the caller; each retired once.
            unsafe { (r.free)(r.ptr, r.ctx) };
        }
        // SAFETY: exclusivity promised by the caller.
        #[cfg(not(loom))]
        unsafe {
            self.collector.reclaim_all()
        };
    }
}
