//! The lockref workloads: one shared `LockRef` hammered by every thread,
//! once per retry policy (`dcache`, `linux`, `spinwait`, `waiman`).
//!
//! - `lockref`: get then put, both lock-free while nobody holds the lock:
//!   the will-it-scale stat2 pattern reduced to its reference count.
//! - `lockref-intruder`: the same, plus one uncounted thread that now and
//!   then takes the lock briefly (the "ls of the parent directory" of the
//!   2024 report). A policy that gives up the moment it sees the lock makes
//!   the workers take it themselves, and they keep seeing each other's hold:
//!   throughput collapses and stays collapsed.
//! - `lockref-herd`: the lock is really needed. The count rests at 0, so a
//!   thread that drops the last reference goes through `put_or_lock`'s
//!   locked path, as dput does when it retains an unused dentry. Policies
//!   that spin on a held lock pay for it here (the thundering herd that got
//!   the 2024 fix reverted).
//!
//! The policy is a type parameter, so each variant is its own monomorphised
//! loop; the variant name only picks which one at prepare time.

use std::time::{Duration, Instant};

use crate::cache_aligned::CacheAligned;
use crate::worker::{Stop, Worker};
use crate::workload::{Case, CaseSpec, Workload};
use dcache::lockref::{Dcache, Linux, LockRef, Policy, SpinWait, Waiman};
use std::hint::spin_loop as spin_hint;

const VARIANTS: &[&str] = &["dcache", "linux", "spinwait", "waiman"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    GetPut,
    Intruder,
    Herd,
}

pub struct LockrefWorkload {
    name: &'static str,
    about: &'static str,
    mode: Mode,
}

pub static LOCKREF: LockrefWorkload = LockrefWorkload {
    name: "lockref",
    about: "every thread: get + put_return on one shared LockRef",
    mode: Mode::GetPut,
};

pub static LOCKREF_INTRUDER: LockrefWorkload = LockrefWorkload {
    name: "lockref-intruder",
    about: "lockref + an uncounted thread locking for --hold-ns every --every-us",
    mode: Mode::Intruder,
};

pub static LOCKREF_HERD: LockrefWorkload = LockrefWorkload {
    name: "lockref-herd",
    about: "every thread: get, then drop the last reference via put_or_lock's lock",
    mode: Mode::Herd,
};

impl Workload for LockrefWorkload {
    fn name(&self) -> &'static str {
        self.name
    }

    fn about(&self) -> &'static str {
        self.about
    }

    fn variants(&self) -> &'static [&'static str] {
        VARIANTS
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> Result<Box<dyn Case>, String> {
        let hold = Duration::from_nanos(spec.options.hold_ns);
        let every = Duration::from_micros(spec.options.every_us);
        Ok(match spec.variant {
            "dcache" => LockrefCase::<Dcache>::boxed(self.mode, hold, every),
            "linux" => LockrefCase::<Linux>::boxed(self.mode, hold, every),
            "spinwait" => LockrefCase::<SpinWait>::boxed(self.mode, hold, every),
            "waiman" => LockrefCase::<Waiman>::boxed(self.mode, hold, every),
            other => return Err(format!("unknown variant {other}")),
        })
    }
}

struct LockrefCase<P: Policy> {
    /// Alone on its line: the only shared word the workers write.
    lr: CacheAligned<LockRef<P>>,
    /// The count the workload keeps between operations.
    base: i32,
    mode: Mode,
    hold: Duration,
    every: Duration,
}

impl<P: Policy> LockrefCase<P> {
    fn boxed(mode: Mode, hold: Duration, every: Duration) -> Box<dyn Case> {
        // The herd keeps the count at 0 between cycles so the last put
        // always finds count 1 and must lock; the others hold one base
        // reference, as a cached dentry in use would.
        let base = if mode == Mode::Herd { 0 } else { 1 };
        Box::new(LockrefCase::<P> {
            lr: CacheAligned::new(LockRef::with_count(base)),
            base,
            mode,
            hold,
            every,
        })
    }
}

/// Take a reference and drop it again; when the lock-free put gives up,
/// drop it under the lock (what dput does after `lockref_put_return`
/// fails).
#[inline(always)]
fn get_put<P: Policy>(lr: &LockRef<P>) {
    lr.get();
    if lr.put_return() == -1 {
        let mut g = lr.lock();
        let c = g.count();
        g.set_count(c - 1);
    }
}

/// Take a reference, then drop it; when it was the last one `put_or_lock`
/// returns holding the lock and the count goes to 0 under it.
#[inline(always)]
fn herd_cycle<P: Policy>(lr: &LockRef<P>) {
    lr.get();
    if !lr.put_or_lock() {
        // SAFETY: put_or_lock returned false, so this thread holds the
        // lock; the guard releases it.
        let mut g = unsafe { lr.assume_locked() };
        let c = g.count();
        g.set_count(c - 1);
    }
}

impl<P: Policy> Case for LockrefCase<P> {
    fn worker(&self, w: Worker<'_>) {
        let lr = &*self.lr;
        match self.mode {
            Mode::GetPut | Mode::Intruder => w.run(|| get_put(lr)),
            Mode::Herd => w.run(|| herd_cycle(lr)),
        }
    }

    fn background_threads(&self) -> usize {
        usize::from(self.mode == Mode::Intruder)
    }

    fn background(&self, _index: usize, stop: &Stop) {
        loop {
            {
                let _g = self.lr.lock();
                // Busy-wait on the clock: a sleep would hold the lock for
                // a scheduler tick instead of a few hundred nanoseconds.
                let end = Instant::now() + self.hold;
                while Instant::now() < end {
                    spin_hint();
                }
            }
            if !stop.sleep(self.every) {
                return;
            }
        }
    }

    fn teardown(self: Box<Self>) -> Result<(), String> {
        // Every worker ended its last operation before the join, so the
        // count must be back where it started: a lost update shows here.
        let (count, locked) = (self.lr.count(), self.lr.is_locked());
        if count != self.base || locked {
            return Err(format!(
                "{}: count {count} (expected {}), locked {locked}",
                P::NAME,
                self.base
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cycle_of_each_mode_returns_to_base() {
        let lr = LockRef::<Linux>::with_count(1);
        get_put(&lr);
        assert_eq!(lr.count(), 1);
        assert!(!lr.is_locked());
        let lr = LockRef::<Dcache>::with_count(0);
        herd_cycle(&lr);
        assert_eq!(lr.count(), 0);
        assert!(!lr.is_locked());
    }

    #[test]
    fn get_put_falls_back_to_the_lock_when_put_return_gives_up() {
        // From -1, get brings the count to 0, put_return refuses a count of
        // 0 (returns -1), and the locked fallback decrements it to -1.
        let lr = LockRef::<Waiman>::with_count(-1);
        get_put(&lr);
        assert_eq!(lr.count(), -1);
        assert!(!lr.is_locked());
    }

    #[test]
    fn every_variant_prepares_and_unknown_fails() {
        let opts = crate::workload::Options::default();
        for w in [&LOCKREF, &LOCKREF_INTRUDER, &LOCKREF_HERD] {
            for v in VARIANTS {
                let spec = CaseSpec {
                    target: "lib",
                    variant: v,
                    threads: 1,
                    options: &opts,
                };
                let case = w.prepare(&spec).unwrap();
                let bg = case.background_threads();
                assert_eq!(bg, usize::from(w.mode == Mode::Intruder));
                case.teardown().unwrap();
            }
            let spec = CaseSpec {
                target: "lib",
                variant: "nope",
                threads: 1,
                options: &opts,
            };
            assert!(w.prepare(&spec).is_err());
        }
    }

    #[test]
    fn teardown_reports_a_lost_update() {
        let case = LockrefCase::<Linux> {
            lr: CacheAligned::new(LockRef::with_count(3)),
            base: 1,
            mode: Mode::GetPut,
            hold: Duration::ZERO,
            every: Duration::ZERO,
        };
        let e = Box::new(case).teardown().unwrap_err();
        assert!(e.contains("count 3 (expected 1)"), "{e}");
    }
}
