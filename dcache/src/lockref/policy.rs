//! Retry policies: what the shared lock-free loop does when its CAS fails or
//! the lock half reads held.
//!
//! A policy is a zero-sized marker type whose associated consts steer the one
//! loop in [`LockRef::cmpxchg_loop`](super::LockRef); monomorphisation folds
//! the consts away, so each policy compiles to its own straight-line loop and
//! four policies can run side by side in one binary.
//!
//! Under `--cfg loom` every bound shrinks (100 CAS attempts become 3, spin
//! budgets become 2) so that the model checker explores the same code paths,
//! including "retries ran out" and "spin budget spent", in a small state space.

/// What the loop does when it reads the lock half held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnHeld {
    /// Abandon the lock-free path at once (Linux 6.17, Waiman).
    GiveUp,
    /// Spin-hint, re-read, and count the round as one of the attempts
    /// (the 2024 linux-next variant).
    SpinCounted,
    /// Wait read-only, with capped backoff and a total budget, but only for a
    /// [`SHORT`](super::SHORT) holder; give up at once on any other holder (dcache).
    WaitShort,
}

/// Which way an operation moves the count (the Waiman thresholds differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// The count goes up (`get`).
    Inc,
    /// The count goes down (`put`).
    Dec,
}

/// How an operation retries its lock-free path.
pub trait Policy: Send + Sync + 'static {
    /// Short name used by the bench harness and `Debug`.
    const NAME: &'static str;
    /// Loop rounds before the lock-free path gives up. A failed CAS is one
    /// round; so is a held-lock re-read under [`OnHeld::SpinCounted`].
    const MAX_ATTEMPTS: u32 = CMPXCHG_LOOP_MAX;
    /// Reaction to a held lock.
    const ON_HELD: OnHeld = OnHeld::GiveUp;
    /// The lock-free path runs only while `count > floor` for this direction
    /// (`None`: no floor). Whatever the floor, each operation's result is the
    /// one its locked path would give; only the path taken changes.
    const INC_FLOOR: Option<i32> = None;
    /// As `INC_FLOOR`, for operations that decrement.
    const DEC_FLOOR: Option<i32> = None;
}

/// Linux's retry cap (lib/lockref.c). Shrunk under loom.
#[cfg(not(loom))]
pub const CMPXCHG_LOOP_MAX: u32 = 100;
/// The loom build's bound (small, so models reach the limit).
#[cfg(loom)]
pub const CMPXCHG_LOOP_MAX: u32 = 3;

/// Waiman's 2013 seed tried the CAS twice before locking.
#[cfg(any(test, feature = "experiments"))]
pub const WAIMAN_TRIES: u32 = 2;

/// Total spin hints a `Dcache` operation may spend waiting for
/// [`SHORT`](super::SHORT) holders before it takes the locked path.
///
/// Sized to outlast the burst that follows a transient locker: the threads
/// that queued behind it each take the lock `SHORT` once, a few cache-line
/// transfers apiece. Guzik observed ~1000 spins were needed for a 60-way
/// same-file stat to stay lockless. The bound itself is for a holder that was
/// preempted mid-hold; past it the operation queues like `Linux`. A hint's
/// length varies by CPU (`pause` is ~10 to ~140 cycles), so this is a count,
/// not a time, and is not yet tuned against measurements.
#[cfg(not(loom))]
pub const SHORT_SPIN_BUDGET: u32 = 1024;
/// The loom build's bound (small, so models reach the limit).
#[cfg(loom)]
pub const SHORT_SPIN_BUDGET: u32 = 2;

/// Largest single backoff step (in spin hints) between re-reads while waiting
/// for a [`SHORT`](super::SHORT) holder. Re-reading a line nobody writes is a
/// local cache hit, so backoff buys little; it only staggers the waiters so
/// they do not all CAS in the cycle the holder releases. Kept small because a
/// waiter mid-step notices the release up to one step late, and a short hold
/// is itself only a few steps long.
#[cfg(not(loom))]
pub const SHORT_BACKOFF_MAX: u32 = 8;
/// The loom build's bound (small, so models reach the limit).
#[cfg(loom)]
pub const SHORT_BACKOFF_MAX: u32 = 1;

/// Linux 6.17: relaxed CAS, at most 100 attempts, give up the moment the lock
/// is seen held.
#[derive(Debug, Clone, Copy, Default)]
#[cfg(any(test, feature = "experiments"))]
pub struct Linux;
#[cfg(any(test, feature = "experiments"))]
impl Policy for Linux {
    const NAME: &'static str = "linux";
}

/// The 2024 linux-next variant (merged, then dropped for its thundering herd):
/// while the lock is held, spin-hint and re-read; those rounds count toward
/// the same 100.
#[derive(Debug, Clone, Copy, Default)]
#[cfg(any(test, feature = "experiments"))]
pub struct SpinWait;
#[cfg(any(test, feature = "experiments"))]
impl Policy for SpinWait {
    const NAME: &'static str = "spinwait";
    const ON_HELD: OnHeld = OnHeld::SpinCounted;
}

/// The 2013 seed: CAS only while the count is > 1 for increments and > 2 for
/// decrements, two tries, then the lock (also at once when the lock is held).
#[derive(Debug, Clone, Copy, Default)]
#[cfg(any(test, feature = "experiments"))]
pub struct Waiman;
#[cfg(any(test, feature = "experiments"))]
impl Policy for Waiman {
    const NAME: &'static str = "waiman";
    const MAX_ATTEMPTS: u32 = WAIMAN_TRIES;
    const INC_FLOOR: Option<i32> = Some(1);
    const DEC_FLOOR: Option<i32> = Some(2);
}

/// dcache's own policy, the default: like `Linux`, except that a lock held by
/// another operation's slow path ([`SHORT`](super::SHORT)) is waited for (read-only, capped
/// backoff, bounded budget) instead of joined. See the module docs of
/// [`lockref`](super) for why.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dcache;
impl Policy for Dcache {
    const NAME: &'static str = "dcache";
    const ON_HELD: OnHeld = OnHeld::WaitShort;
}

/// The read-only wait of [`OnHeld::WaitShort`]: exponential backoff capped at
/// [`SHORT_BACKOFF_MAX`] hints, [`SHORT_SPIN_BUDGET`] hints in total.
pub(super) struct ShortWait {
    budget: u32,
    step: u32,
}

impl ShortWait {
    #[inline(always)]
    pub(super) fn new() -> Self {
        ShortWait {
            budget: SHORT_SPIN_BUDGET,
            step: 1,
        }
    }

    /// Spin one backoff step; false once the budget is spent (the caller then
    /// takes the locked path, whose own spinlock yields after a bound).
    #[inline]
    pub(super) fn pause(&mut self) -> bool {
        if self.budget == 0 {
            return false;
        }
        let n = self.step.min(self.budget);
        for _ in 0..n {
            crate::sync::spin_hint();
        }
        self.budget -= n;
        self.step = (self.step * 2).min(SHORT_BACKOFF_MAX);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_wait_spends_exactly_its_budget() {
        let mut w = ShortWait::new();
        let mut rounds = 0;
        while w.pause() {
            rounds += 1;
            assert!(rounds <= SHORT_SPIN_BUDGET, "budget must bound the wait");
        }
        assert_eq!(w.budget, 0);
        assert!(!w.pause(), "a spent budget stays spent");
    }

    #[test]
    fn policy_consts() {
        assert_eq!(Linux::MAX_ATTEMPTS, CMPXCHG_LOOP_MAX);
        assert_eq!(Linux::ON_HELD, OnHeld::GiveUp);
        assert_eq!(SpinWait::ON_HELD, OnHeld::SpinCounted);
        assert_eq!(Waiman::MAX_ATTEMPTS, 2);
        assert_eq!(Waiman::DEC_FLOOR, Some(2));
        assert_eq!(Dcache::ON_HELD, OnHeld::WaitShort);
        assert_eq!(Dcache::MAX_ATTEMPTS, CMPXCHG_LOOP_MAX);
    }
}
