//! `LockRef`: a spinlock and a reference count in one 64-bit word.
//!
//! Layout as Linux x86-64: the lock in the low 32 bits, a signed 32-bit count
//! in the high 32 bits. While the lock half reads free, every operation
//! changes the count with one compare-and-swap of the whole word, so the
//! common get/put never takes the lock; an operation that sees the lock held
//! falls back to taking it (how soon is the retry policy's business).
//!
//! (Skeleton: the policy variants, their documentation and loom tests are
//! filled in by the lockref work item; the API below is the contract.)

use std::marker::PhantomData;

use crate::sync::{spin_hint, yield_now, AtomicU64, Ordering};

/// Count value of a dead lockref (Linux: -128).
pub const DEAD: i32 = -128;

/// Lock-half value: free.
pub const UNLOCKED: u32 = 0;
/// Lock-half value: held by someone outside the lockref ops (unknown hold).
pub const LOCKED: u32 = 1;

#[inline(always)]
fn lock_half(w: u64) -> u32 {
    w as u32
}
#[inline(always)]
fn count_half(w: u64) -> i32 {
    (w >> 32) as u32 as i32
}
#[inline(always)]
fn make(lock: u32, count: i32) -> u64 {
    ((count as u32 as u64) << 32) | lock as u64
}

/// How an operation retries its lock-free path.
pub trait Policy: Send + Sync + 'static {
    const NAME: &'static str;
}

/// Linux 6.17: relaxed CAS, at most 100 attempts, give up when the lock is seen held.
pub struct Linux;
impl Policy for Linux {
    const NAME: &'static str = "linux";
}

/// The 2024 linux-next variant: spin-hint and re-read while the lock is held.
/// (Skeleton: behaves as `Linux` until the lockref work item lands.)
pub struct SpinWait;
impl Policy for SpinWait {
    const NAME: &'static str = "spinwait";
}

/// The 2013 seed: CAS only while count > 1 (get) / > 2 (put), two tries.
/// (Skeleton: behaves as `Linux` until the lockref work item lands.)
pub struct Waiman;
impl Policy for Waiman {
    const NAME: &'static str = "waiman";
}

/// dcache's own policy, the default. (Skeleton: behaves as `Linux` until the
/// lockref work item lands.)
pub struct Dcache;
impl Policy for Dcache {
    const NAME: &'static str = "dcache";
}

const CMPXCHG_LOOP_MAX: u32 = 100;

#[repr(C, align(8))]
pub struct LockRef<P: Policy = Dcache> {
    word: AtomicU64,
    _policy: PhantomData<fn() -> P>,
}

const _: () = assert!(std::mem::size_of::<LockRef>() == 8);
const _: () = assert!(std::mem::align_of::<LockRef>() == 8);

impl<P: Policy> Default for LockRef<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Policy> std::fmt::Debug for LockRef<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = self.word.load(Ordering::Relaxed);
        f.debug_struct("LockRef")
            .field("policy", &P::NAME)
            .field("locked", &(lock_half(w) != UNLOCKED))
            .field("count", &count_half(w))
            .finish()
    }
}

impl<P: Policy> LockRef<P> {
    /// Count 1, unlocked.
    pub fn new() -> Self {
        Self::with_count(1)
    }

    pub fn with_count(count: i32) -> Self {
        LockRef {
            word: AtomicU64::new(make(UNLOCKED, count)),
            _policy: PhantomData,
        }
    }

    /// The lock-free path shared by every operation: while the lock reads
    /// free, compute the new count with `f` and CAS it in. `f` returning
    /// `Err(r)` ends the loop with `r` (no change). `None` means the lock-free
    /// path gave up (lock seen held, or retries ran out).
    #[inline(always)]
    fn cmpxchg_loop<R>(&self, mut f: impl FnMut(i32) -> Result<(i32, R), R>) -> Option<R> {
        // Relaxed: the lockref orders nothing but itself (Linux uses
        // cmpxchg64_relaxed); callers that publish data use their own fences.
        let mut old = self.word.load(Ordering::Relaxed);
        for _ in 0..CMPXCHG_LOOP_MAX {
            if lock_half(old) != UNLOCKED {
                return None;
            }
            let (new_count, r) = match f(count_half(old)) {
                Ok(v) => v,
                Err(r) => return Some(r),
            };
            match self.word.compare_exchange_weak(
                old,
                make(UNLOCKED, new_count),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(r),
                Err(cur) => old = cur,
            }
        }
        None
    }

    /// Take the spinlock: test-and-test-and-set with a spin hint, yielding
    /// the CPU after a bound so oversubscribed threads cannot livelock.
    pub fn lock(&self) -> LockRefGuard<'_, P> {
        self.raw_lock(LOCKED);
        LockRefGuard { lr: self }
    }

    fn raw_lock(&self, how: u32) {
        let mut spins = 0u32;
        loop {
            let old = self.word.load(Ordering::Relaxed);
            if lock_half(old) == UNLOCKED {
                // Acquire: what the previous holder wrote under the lock is
                // visible to us.
                if self
                    .word
                    .compare_exchange_weak(
                        old,
                        make(how, count_half(old)),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            spins += 1;
            if spins < 128 {
                spin_hint();
            } else {
                spins = 0;
                yield_now();
            }
        }
    }

    /// Release the lock. Only the current holder may call this.
    ///
    /// # Safety
    /// The caller must hold the lock (after `put_or_lock` returned false).
    pub unsafe fn unlock(&self) {
        self.unlock_inner();
    }

    fn unlock_inner(&self) {
        // Only the holder changes the word while locked, so a plain
        // read-modify-write keeps the count. Release: our writes under the
        // lock happen-before the next holder's Acquire.
        let w = self.word.load(Ordering::Relaxed);
        debug_assert_ne!(lock_half(w), UNLOCKED);
        self.word
            .store(make(UNLOCKED, count_half(w)), Ordering::Release);
    }

    /// A guard for a lock that the caller already holds (after
    /// `put_or_lock` returned false).
    ///
    /// # Safety
    /// The caller must hold the lock, and the guard takes over releasing it.
    pub unsafe fn assume_locked(&self) -> LockRefGuard<'_, P> {
        LockRefGuard { lr: self }
    }

    /// The count as last seen (racy unless the lock is held).
    pub fn count(&self) -> i32 {
        count_half(self.word.load(Ordering::Relaxed))
    }

    pub fn is_locked(&self) -> bool {
        lock_half(self.word.load(Ordering::Relaxed)) != UNLOCKED
    }

    /// Increment the count unconditionally.
    pub fn get(&self) {
        if self.cmpxchg_loop(|c| Ok((c + 1, ()))).is_some() {
            return;
        }
        let mut g = self.lock();
        g.set_count(g.count() + 1);
    }

    /// Increment unless the count is <= 0.
    pub fn get_not_zero(&self) -> bool {
        if let Some(r) = self.cmpxchg_loop(|c| if c <= 0 { Err(false) } else { Ok((c + 1, true)) })
        {
            return r;
        }
        let mut g = self.lock();
        if g.count() > 0 {
            g.set_count(g.count() + 1);
            true
        } else {
            false
        }
    }

    /// Increment unless dead (count < 0).
    pub fn get_not_dead(&self) -> bool {
        if let Some(r) = self.cmpxchg_loop(|c| if c < 0 { Err(false) } else { Ok((c + 1, true)) })
        {
            return r;
        }
        let mut g = self.lock();
        if g.count() >= 0 {
            g.set_count(g.count() + 1);
            true
        } else {
            false
        }
    }

    /// Decrement without ever taking the lock; the new count (may be 0), or
    /// -1 when the count was already <= 0, the lock was held, or the retries
    /// ran out (the caller then locks and decides).
    pub fn put_return(&self) -> i32 {
        self.cmpxchg_loop(|c| if c <= 0 { Err(-1) } else { Ok((c - 1, c - 1)) })
            .unwrap_or(-1)
    }

    /// Decrement if the count is > 1 and return true; otherwise return false
    /// *with the lock held* (the caller releases it: `unlock` or a guard from
    /// `assume_locked`).
    pub fn put_or_lock(&self) -> bool {
        if let Some(r) = self.cmpxchg_loop(|c| if c <= 1 { Err(false) } else { Ok((c - 1, true)) })
        {
            if r {
                return true;
            }
        }
        self.raw_lock(LOCKED);
        let c = self.count();
        if c <= 1 {
            return false;
        }
        // Only the holder changes the word while locked.
        let w = self.word.load(Ordering::Relaxed);
        self.word
            .store(make(UNLOCKED, count_half(w) - 1), Ordering::Release);
        true
    }
}

/// The lock held; released on drop.
pub struct LockRefGuard<'a, P: Policy = Dcache> {
    lr: &'a LockRef<P>,
}

impl<P: Policy> LockRefGuard<'_, P> {
    pub fn count(&self) -> i32 {
        self.lr.count()
    }

    pub fn set_count(&mut self, count: i32) {
        // The holder is the only writer: a plain store of the same lock half
        // with the new count.
        let w = self.lr.word.load(Ordering::Relaxed);
        self.lr
            .word
            .store(make(lock_half(w), count), Ordering::Relaxed);
    }

    /// Mark the lockref dead (count = -128): `get_not_dead` fails from now on.
    pub fn mark_dead(&mut self) {
        self.set_count(DEAD);
    }

    pub fn is_dead(&self) -> bool {
        self.count() < 0
    }
}

impl<P: Policy> Drop for LockRefGuard<'_, P> {
    fn drop(&mut self) {
        self.lr.unlock_inner();
    }
}
