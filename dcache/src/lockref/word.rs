//! The 64-bit lockref word: lock in the low half, signed count in the high
//! half, as `struct lockref` lays out on little-endian 64-bit Linux.
//!
//! Keeping both halves in one word is what lets a single compare-and-swap
//! check "the lock is free" and change the count at the same instant.

/// Count value of a dead lockref (Linux: -128).
pub const DEAD: i32 = -128;

/// Lock-half value: free.
pub const UNLOCKED: u32 = 0;
/// Lock-half value: held by a caller of [`lock`](super::LockRef::lock), or
/// returned held by [`put_or_lock`](super::LockRef::put_or_lock). How long it
/// stays held is up to the caller, so nobody should wait for it optimistically.
pub const LOCKED: u32 = 1;
/// Lock-half value: held by a lockref operation's own slow path, which
/// releases it after one count update. The `Dcache` policy waits for such a
/// holder instead of queueing behind it.
pub const SHORT: u32 = 2;

#[inline(always)]
pub(super) fn lock_half(w: u64) -> u32 {
    w as u32
}

#[inline(always)]
pub(super) fn count_half(w: u64) -> i32 {
    (w >> 32) as u32 as i32
}

#[inline(always)]
pub(super) fn make(lock: u32, count: i32) -> u64 {
    ((count as u32 as u64) << 32) | lock as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_round_trip() {
        for &c in &[0, 1, -1, DEAD, i32::MAX, i32::MIN] {
            for &l in &[UNLOCKED, LOCKED, SHORT] {
                let w = make(l, c);
                assert_eq!(count_half(w), c);
                assert_eq!(lock_half(w), l);
            }
        }
    }

    #[test]
    fn count_is_the_high_half() {
        // Linux x86-64: the spinlock is the first 4 bytes, the count the next 4.
        assert_eq!(make(UNLOCKED, 1), 1u64 << 32);
        assert_eq!(make(LOCKED, 0), 1);
    }
}
