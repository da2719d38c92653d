//! Which shard of a per-thread structure the calling thread uses: the
//! userspace stand-in for Linux's per-CPU data. Threads take numbers in
//! turn at their first use, so up to as many threads as there are shards
//! each have one of their own, whatever CPUs they run on.

/// How many shards a per-thread structure has by default: one per CPU, a
/// power of two (so the thread's number is masked, not divided), 1..=256.
pub(crate) fn default_count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 256)
        .next_power_of_two()
}

std::thread_local! {
    static THREAD_NUMBER: usize = {
        // Not part of any protocol: a number that only has to differ from
        // the other threads' (std's atomic, under loom too).
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        // Relaxed: only distinctness matters.
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    };
}

/// The calling thread's shard among `count`, a power of two.
#[inline]
pub(crate) fn this_thread(count: usize) -> usize {
    debug_assert!(count.is_power_of_two());
    THREAD_NUMBER.with(|n| *n) & (count - 1)
}
