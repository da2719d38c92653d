//! A software prefetch: ask the CPU to start loading a cache line that a
//! later step will read, so that several independent misses are in flight
//! at once (the batched walk, `vfs::batch`). A hint only: it never faults,
//! never changes memory, and is a no-op off x86-64 (and under miri, which
//! has no caches to model).

/// Start loading the cache line that holds `p` into every cache level
/// (`PREFETCHT0`). Any address is allowed, valid or not.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: SSE is part of the x86_64 baseline, and a prefetch neither
    // faults nor changes memory whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}

/// Prefetch the `lines` cache lines from `p` on (a dentry's two read lines,
/// an inode's two lines). The address is only computed, never dereferenced.
#[inline(always)]
pub(crate) fn prefetch_lines<T>(p: *const T, lines: usize) {
    let b = p.cast::<u8>();
    for i in 0..lines {
        prefetch(b.wrapping_add(i * crate::cache_aligned::CACHE_LINE));
    }
}
