//! `Slab<T>`: objects of one type carved from large chunks, as Linux's
//! `kmem_cache` (`dentry_cache`, `inode_cache`) does.
//!
//! Why not `Box`: a dentry is 192 bytes aligned to 64, and glibc serves an
//! over-aligned `malloc` by carving an aligned piece out of a larger chunk,
//! which cost about 110 bytes more per dentry (measured, `docs/memory.md`);
//! even an ordinary object pays an 8-byte header and rounding to 16. Here a
//! slot is exactly `size_of::<T>()` bytes, every slot aligned to
//! `align_of::<T>()` (a chunk is allocated with that alignment and the size
//! is a multiple of it).
//!
//! Chunks double in size from `MIN_SLOTS` slots up to `MAX_CHUNK_BYTES`, so
//! a small cache (a test's `Vfs` with a root and a few entries) costs a few
//! KiB and a large one pays one allocation per ~2 MiB. A 2 MiB chunk is
//! backed by a huge page (fewer TLB misses for a large cache's lookups):
//! from its first touch once the slab is large, else once it is full.
//! Freed slots go on an intrusive LIFO list (the link is written into the
//! dead slot's first word) and are reused before a chunk is carved
//! further. Memory returns to
//! the system only when the slab is dropped; Linux also frees empty slab
//! pages under pressure, which this does not do.
//!
//! One mutex (through the crate's `sync` facade, so loom models it) guards
//! the list and the chunks. Allocation and freeing happen only on slow
//! paths — a cache miss that just asked the backend, a reclamation callback
//! after a grace period — never on a lookup; Linux puts per-CPU caches in
//! front of its slab lock, which would be the next step if that lock ever
//! showed in a profile. Objects are freed only after their grace period (the
//! caller's business, see `vfs::dcache`), so a slot is never reused while a
//! lockless reader may still stand on it.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::cache_aligned::CACHE_LINE;
use crate::sync::{LockExt, Mutex};

/// The first chunk's slots (later chunks double, up to `MAX_CHUNK_BYTES`).
const MIN_SLOTS: usize = 16;
/// The largest chunk: one huge page (rounded up to whole slots); big enough
/// that chunks are few (a million dentries take ~100), small enough that a
/// half-used last chunk wastes little.
const MAX_CHUNK_BYTES: usize = HUGE_PAGE;

/// x86-64's (and arm64's with 4 KiB pages) transparent huge page.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Bytes a slab holds before new chunks are backed by huge pages from
/// their first touch (a huge page is backed whole, so the last, partly used
/// chunk then costs up to 2 MiB: past this, under 3%). Chunks carved before
/// get huge pages once full (`Inner::take`).
const HUGE_AFTER: usize = 64 << 20;

/// `MADV_COLLAPSE` (Linux 6.1, `include/uapi/asm-generic/mman-common.h`):
/// back a range with huge pages now, copying what is there.
#[cfg(all(target_os = "linux", not(miri)))]
const MADV_COLLAPSE: libc::c_int = 25;

/// Ask the kernel to back `len` bytes at `p` (huge-page aligned) with huge
/// pages: a large cache's lookups then miss the TLB far less (see
/// `docs/memory.md`). Only a hint; any failure is ignored.
pub(crate) fn advise_huge(p: *mut u8, len: usize) {
    #[cfg(all(target_os = "linux", not(miri)))]
    // SAFETY: madvise only changes how the kernel backs the range, which is
    // a live allocation of ours; it never changes its contents.
    unsafe {
        libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (p, len);
}

/// Back `len` bytes at `p` (huge-page aligned, every page already touched)
/// with huge pages now: `MADV_COLLAPSE` copies the small pages into huge
/// ones, and readers running meanwhile see the same bytes (the kernel
/// remaps under the page-table lock). Where collapse is not available
/// (before Linux 6.1) the range is still marked `MADV_HUGEPAGE`, so
/// khugepaged collapses it in the background. A hint; failures ignored.
pub(crate) fn collapse_huge(p: *mut u8, len: usize) {
    advise_huge(p, len);
    #[cfg(all(target_os = "linux", not(miri)))]
    // SAFETY: as in `advise_huge`: a live allocation of ours, whose contents
    // a collapse keeps.
    unsafe {
        libc::madvise(p.cast(), len, MADV_COLLAPSE);
    }
}

pub struct Slab<T> {
    inner: Mutex<Inner>,
    /// The slab hands out and drops `T`s.
    _owns: PhantomData<T>,
}

struct Inner {
    /// The most recently freed slot (its first word holds the next one),
    /// or null.
    free: *mut u8,
    /// The uncarved rest of the newest chunk: `next..end`.
    next: *mut u8,
    end: *mut u8,
    /// Every chunk and its layout, freed when the slab is dropped.
    chunks: Vec<(NonNull<u8>, Layout)>,
    /// Slots carved so far (sizes the next chunk).
    carved: usize,
    /// Slots handed out and not freed.
    live: usize,
    /// The newest chunk's huge-page part, to collapse into huge pages once
    /// every slot in it is carved (a full-size chunk made before the slab
    /// reached `HUGE_AFTER`).
    collapse: Option<(NonNull<u8>, usize)>,
}

// SAFETY: `Inner` holds raw pointers into chunks the slab owns; they are
// only followed under the mutex, by whichever thread holds it.
unsafe impl Send for Inner {}
// SAFETY: every access to the shared state goes through the mutex; the `T`s
// themselves are handed out as raw pointers whose use is the caller's
// contract (`free` may run on any thread, hence `T: Send`).
unsafe impl<T: Send> Sync for Slab<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Slab<T> {}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slab<T> {
    /// A free slot must hold the list link, aligned.
    const SLOT_FITS: () = assert!(
        std::mem::size_of::<T>() >= std::mem::size_of::<*mut u8>()
            && std::mem::align_of::<T>() >= std::mem::align_of::<*mut u8>()
    );

    pub fn new() -> Slab<T> {
        #[allow(clippy::let_unit_value)]
        let () = Self::SLOT_FITS;
        Slab {
            inner: Mutex::new(Inner {
                free: std::ptr::null_mut(),
                next: std::ptr::null_mut(),
                end: std::ptr::null_mut(),
                chunks: Vec::new(),
                carved: 0,
                live: 0,
                collapse: None,
            }),
            _owns: PhantomData,
        }
    }

    /// Move `value` into a slot; the pointer stays valid until `free`.
    pub fn alloc(&self, value: T) -> NonNull<T> {
        let (slot, full) = self.inner.lock_unpoisoned().take::<T>();
        if let Some((chunk, len)) = full {
            // Outside the lock (the guard went with the statement above):
            // a collapse copies 2 MiB. The chunk lives
            // until the slab is dropped, which needs `&mut self`.
            collapse_huge(chunk.as_ptr(), len);
        }
        // SAFETY: `take` returned a slot of `size_of::<T>()` bytes, aligned
        // for `T`, inside a chunk we own, that nobody else holds.
        unsafe { slot.as_ptr().write(value) };
        slot
    }

    /// Drop the object and give its slot back.
    ///
    /// # Safety
    /// `p` came from `alloc` on this slab, has not been freed since, and
    /// nothing will use the object again (for a dentry or an inode: its
    /// grace period has passed).
    pub unsafe fn free(&self, p: NonNull<T>) {
        // SAFETY: a live `T` we are the last user of (caller's contract).
        unsafe { std::ptr::drop_in_place(p.as_ptr()) };
        let mut g = self.inner.lock_unpoisoned();
        let slot = p.as_ptr().cast::<u8>();
        // SAFETY: the slot is ours again and, by `SLOT_FITS`, large and
        // aligned enough for the link.
        unsafe { slot.cast::<*mut u8>().write(g.free) };
        g.free = slot;
        g.live -= 1;
    }

    /// Objects allocated and not freed.
    pub fn live(&self) -> usize {
        self.inner.lock_unpoisoned().live
    }

    /// Bytes of chunks held (live objects, free slots and the uncarved rest).
    #[cfg(all(test, not(loom)))]
    pub fn footprint(&self) -> usize {
        let g = self.inner.lock_unpoisoned();
        g.chunks.iter().map(|(_, l)| l.size()).sum()
    }
}

impl Inner {
    /// A slot for a `T`: the last one freed, else the next uncarved one,
    /// else the first of a new chunk; and, when the chunk before that one
    /// was just carved to its end, its range to collapse into huge pages
    /// (`Inner::collapse`), for the caller to do once the lock is released.
    fn take<T>(&mut self) -> (NonNull<T>, Option<(NonNull<u8>, usize)>) {
        let size = std::mem::size_of::<T>();
        self.live += 1;
        if let Some(slot) = NonNull::new(self.free) {
            // SAFETY: a free slot holds the link written by `free`.
            self.free = unsafe { slot.as_ptr().cast::<*mut u8>().read() };
            return (slot.cast(), None);
        }
        let mut full = None;
        if self.next == self.end {
            // The newest chunk is carved to its end: every page of it is
            // touched, so huge pages now cost no memory.
            full = self.collapse.take();
            let slots = self
                .carved
                .clamp(MIN_SLOTS, MAX_CHUNK_BYTES.div_ceil(size).max(MIN_SLOTS));
            let bytes = slots * size;
            // Cache-line aligned at least, so that an object whose size is
            // a multiple of 64 (the 192-byte dentry, the 128-byte inode)
            // spans no more lines than it must; a full-size chunk is
            // aligned to a huge page, so the kernel can back it with one.
            let align = if bytes >= HUGE_PAGE {
                HUGE_PAGE
            } else {
                std::mem::align_of::<T>().max(CACHE_LINE)
            };
            let layout = Layout::from_size_align(bytes, align)
                .unwrap_or_else(|_| handle_alloc_error(Layout::new::<T>()));
            // SAFETY: the layout's size is at least MIN_SLOTS * size > 0.
            let chunk = unsafe { alloc(layout) };
            let Some(chunk) = NonNull::new(chunk) else {
                handle_alloc_error(layout)
            };
            // Huge pages from the first touch only once the slab is large:
            // a huge page is backed whole, so the last, partly used chunk
            // costs up to 2 MiB; past HUGE_AFTER that is under 3%. Before,
            // a full-size chunk is collapsed into huge pages once full
            // (the chunk after it is then being carved).
            if bytes >= HUGE_PAGE {
                let huge = bytes / HUGE_PAGE * HUGE_PAGE;
                if self.carved * size >= HUGE_AFTER {
                    advise_huge(chunk.as_ptr(), huge);
                } else {
                    self.collapse = Some((chunk, huge));
                }
            }
            self.chunks.push((chunk, layout));
            self.next = chunk.as_ptr();
            // SAFETY: one past the end of the chunk just allocated.
            self.end = unsafe { chunk.as_ptr().add(layout.size()) };
            self.carved += slots;
        }
        let slot = self.next;
        // SAFETY: `next < end` and the chunk's size is a multiple of `size`,
        // so the slot lies inside the chunk and its end is at most `end`.
        self.next = unsafe { slot.add(size) };
        // SAFETY: `slot` lies inside the live chunk (above), so it is not
        // null.
        let slot = unsafe { NonNull::new_unchecked(slot.cast()) };
        (slot, full)
    }
}

impl<T> Drop for Slab<T> {
    /// Frees the chunks. Objects still allocated are not dropped: the owner
    /// frees (or forgets) every object before dropping its slab.
    fn drop(&mut self) {
        let g = self.inner.get_mut_unpoisoned();
        for (chunk, layout) in g.chunks.drain(..) {
            // SAFETY: allocated in `take` with exactly this layout, freed once.
            unsafe { dealloc(chunk.as_ptr(), layout) };
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[repr(align(64))]
    struct Aligned([u64; 24]);

    #[test]
    fn slots_are_aligned_distinct_and_reused() {
        let s = Slab::<Aligned>::new();
        let ps: Vec<_> = (0..40).map(|i| s.alloc(Aligned([i; 24]))).collect();
        for (i, p) in ps.iter().enumerate() {
            assert_eq!(p.as_ptr() as usize % 64, 0);
            // SAFETY: live, allocated above.
            assert_eq!(unsafe { p.as_ref() }.0[23], i as u64);
        }
        let mut addrs: Vec<usize> = ps.iter().map(|p| p.as_ptr() as usize).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), 40);
        assert_eq!(s.live(), 40);
        // 16 + 16 + 32 slots of 192 bytes.
        assert_eq!(s.footprint(), 64 * 192);
        let last = ps[39];
        // SAFETY: allocated above, freed once, not used after.
        unsafe { s.free(last) };
        assert_eq!(s.live(), 39);
        let again = s.alloc(Aligned([7; 24]));
        assert_eq!(again, last, "the last slot freed is reused first");
        for p in ps.into_iter().take(39).chain([again]) {
            // SAFETY: each live slot freed once.
            unsafe { s.free(p) };
        }
        assert_eq!(s.live(), 0);
    }

    #[test]
    fn free_runs_the_destructor_and_drop_frees_the_chunks() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct Counted(#[allow(dead_code)] Box<u32>);
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::Relaxed);
            }
        }
        let s = Slab::<Counted>::new();
        let ps: Vec<_> = (0..100).map(|i| s.alloc(Counted(Box::new(i)))).collect();
        for p in ps {
            // SAFETY: each freed once.
            unsafe { s.free(p) };
        }
        assert_eq!(DROPS.load(Ordering::Relaxed), 100);
        drop(s);
    }

    /// `AnonHugePages` (kB) of the mapping of this process that holds
    /// `addr`, from /proc/self/smaps.
    #[cfg(target_os = "linux")]
    fn anon_huge_kib(addr: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = head.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a <= addr && addr < b;
                    continue;
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("AnonHugePages:") {
                    return v.trim().strip_suffix("kB")?.trim().parse().ok();
                }
            }
        }
        None
    }

    /// A full-size chunk made before `HUGE_AFTER` is on small pages while
    /// it is carved, and collapsed into a huge page once full. Skipped
    /// where this kernel cannot collapse on request (THP off, Linux before
    /// 6.1, no free huge page): a probe range shows that first.
    #[test]
    #[cfg(target_os = "linux")]
    #[cfg_attr(miri, ignore)]
    fn a_full_chunk_is_collapsed_into_a_huge_page() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        let probe = Layout::from_size_align(HUGE_PAGE, HUGE_PAGE).unwrap();
        // SAFETY: a non-zero size; freed below with the same layout.
        let p = unsafe { alloc(probe) };
        assert!(!p.is_null());
        // SAFETY: the HUGE_PAGE bytes just allocated.
        unsafe { p.write_bytes(1, HUGE_PAGE) };
        collapse_huge(p, HUGE_PAGE);
        let can = anon_huge_kib(p as usize).unwrap_or(0) >= 2048;
        // SAFETY: allocated above with this layout.
        unsafe { dealloc(p, probe) };
        if !can {
            println!(
                "SKIPPED: this kernel collapsed no huge page on request (THP: {})",
                thp.trim()
            );
            return;
        }
        struct Page(#[allow(dead_code)] [u64; 512]);
        let s = Slab::<Page>::new();
        // Chunks of 16, 16, 32, 64, 128 and 256 slots, then a full-size one
        // of 512 (2 MiB).
        let ps: Vec<_> = (0..1024).map(|i| s.alloc(Page([i; 512]))).collect();
        let chunk = ps[512].as_ptr() as usize;
        assert_eq!(
            chunk % HUGE_PAGE,
            0,
            "a full-size chunk is huge-page aligned"
        );
        if thp.contains("[madvise]") {
            // (With THP `always` it was huge from its first touch.)
            assert_eq!(anon_huge_kib(chunk), Some(0), "small pages while carved");
        }
        // The next slot opens a new chunk: the full one is collapsed.
        let more = s.alloc(Page([0; 512]));
        assert!(
            anon_huge_kib(chunk).unwrap_or(0) >= 2048,
            "the full chunk is on a huge page"
        );
        for p in ps.into_iter().chain([more]) {
            // SAFETY: each live slot freed once.
            unsafe { s.free(p) };
        }
    }
}
