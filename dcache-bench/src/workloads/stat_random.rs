//! `stat-random`: every thread stats uniformly random paths among N cached
//! ones (`--paths N`, default 100000): how a lookup's cost and a cached
//! path's memory grow with the number of cached paths.
//!
//! The tree holds N empty files `dA/dB/dC/fD` (directories 0755, files
//! 0644) with a fan-out of f = ceil(N^(1/4)) per level, so every directory
//! holds about f entries (the last ones at each level fewer). Path i is i's
//! four digits in base f, zero-padded, so every path has the same length and
//! the precomputed table is one flat `Vec<u8>` with a fixed stride, each
//! entry NUL-terminated: the lib target takes the entry less its NUL, the
//! kernel target passes it as it is. A worker draws the next index from its
//! own splitmix64 and prefetches that table entry one operation ahead, so
//! choosing a path costs a few instructions and no cache miss (the `batch`
//! variant draws a call's indices and leaves the prefetching to
//! `stat_many`, which does it for any caller's paths).
//!
//! Targets: `lib` is dcache's `Vfs` over memfs (variant `reffree`, as in
//! `stat-same`, one `stat` after another; variant `batch`, [`BATCH`] random
//! paths per `AsCred::stat_many` call, whose walks overlap their cache
//! misses, each path counted as one operation), with the table sized for
//! every path and no shrinking;
//! `kernel` is the same tree on tmpfs under /dev/shm (removed afterwards),
//! stat'ed with `fstatat` relative to the tree's directory (variant
//! `syscall`). Before measuring, every path is stat'ed once.
//!
//! Memory, printed once per case and kept in the JSON (`memory`):
//! - lib: the process's RSS (`/proc/self/status` `VmRSS`, after giving
//!   freed heap back with `malloc_trim`) before building memfs's tree, after
//!   building it, and after warming the `Vfs`. Warming minus building is the
//!   dcache alone (dentries, inodes, hash table, inode map): the figure that
//!   matters; the whole growth, memfs's own copy of the tree included, is
//!   printed beside it.
//! - kernel: RSS does not see kernel memory. The growth of `Slab:` in
//!   /proc/meminfo across building and stat'ing the tree stands in for it.
//!   It is system-wide (anything else on the machine allocating or freeing
//!   slab objects meanwhile counts too) and only approximate; as tmpfs keeps
//!   its files in the dcache, it is dentries plus shmem inodes (plus the
//!   directories' offset maps), the whole tree's cost. The files are empty,
//!   so tmpfs holds no data pages for them.

use std::ffi::CStr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::sync::Arc;

use super::stat::{stat_at, ShmTree};
use crate::report::Footprint;
use crate::worker::Worker;
use crate::workload::{Case, CaseSpec, Workload};
use dcache::errno::Errno;
use dcache::fs::memfs::{Limits, MemFs};
use dcache::vfs::{At, Config, StatMode, Vfs};

pub struct StatRandom;

pub static STAT_RANDOM: StatRandom = StatRandom;

impl Workload for StatRandom {
    fn name(&self) -> &'static str {
        "stat-random"
    }
    fn about(&self) -> &'static str {
        "stats uniformly random paths among --paths N (100000) cached dA/dB/dC/fD; prints bytes per cached path"
    }
    fn variants(&self) -> &'static [&'static str] {
        &["reffree", "batch", "syscall"]
    }
    fn targets(&self) -> &'static [&'static str] {
        &["lib", "kernel"]
    }
    fn variants_for(&self, target: &str) -> &'static [&'static str] {
        if target == "lib" {
            &["reffree", "batch"]
        } else {
            &["syscall"]
        }
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> Result<Box<dyn Case>, String> {
        let n = paths_option(spec)?;
        // The table is built before the first reading, so it is not counted.
        let paths = Paths::new(Shape::new(n));
        match (spec.target, spec.variant) {
            ("lib", "reffree") => LibCase::new(paths, false).map(|c| Box::new(c) as Box<dyn Case>),
            ("lib", "batch") => LibCase::new(paths, true).map(|c| Box::new(c) as Box<dyn Case>),
            ("kernel", "syscall") => KernelCase::new(paths).map(|c| Box::new(c) as Box<dyn Case>),
            (t, v) => Err(format!("variant {v} does not run on target {t}")),
        }
    }
}

/// `--paths`, at least 1.
pub(super) fn paths_option(spec: &CaseSpec<'_>) -> Result<usize, String> {
    usize::try_from(spec.options.paths)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| "--paths must be at least 1".to_string())
}

/// A `Vfs` sizing for a cache that holds all of `entries` dentries: the
/// table sized for them, and nothing unused shrunk.
pub(super) fn holding_all(entries: usize) -> Config {
    Config {
        capacity: entries,
        max_unused: entries.saturating_mul(2).max(1 << 20),
        ..Config::default()
    }
}

/// The tree's shape for N paths: fan-out `fanout` per level, names
/// zero-padded to `width` digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    n: usize,
    fanout: usize,
    width: usize,
}

impl Shape {
    fn new(n: usize) -> Shape {
        let mut fanout = 1usize;
        while fanout.saturating_pow(4) < n {
            fanout += 1;
        }
        let width = (fanout - 1).max(1).ilog10() as usize + 1;
        Shape { n, fanout, width }
    }

    /// Every path's length: four components of a letter and `width` digits.
    fn len(&self) -> usize {
        4 * (1 + self.width) + 3
    }

    /// `levels` leading components of path `i * fanout^(4 - levels)` (the
    /// directory `j` of that level when called with `i = j`), appended to
    /// `out`: `dA`, `dA/dB`, `dA/dB/dC`, or with 4 the file `dA/dB/dC/fD`.
    fn write(&self, j: usize, levels: u32, out: &mut Vec<u8>) {
        for level in 0..levels {
            if level > 0 {
                out.push(b'/');
            }
            out.push(if level == 3 { b'f' } else { b'd' });
            let digit = j / self.fanout.pow(levels - 1 - level) % self.fanout;
            let start = out.len();
            let mut d = digit;
            for _ in 0..self.width {
                out.push(b'0' + (d % 10) as u8);
                d /= 10;
            }
            out[start..].reverse();
        }
    }

    /// The directories of level `levels` (1 to 3) that hold something.
    fn dirs_at(&self, levels: u32) -> usize {
        self.n.div_ceil(self.fanout.pow(4 - levels))
    }

    /// Every directory, parents before children, as relative paths.
    fn dirs(&self) -> impl Iterator<Item = String> + '_ {
        (1..=3).flat_map(move |levels| {
            (0..self.dirs_at(levels)).map(move |j| {
                let mut v = Vec::with_capacity(self.len());
                self.write(j, levels, &mut v);
                String::from_utf8(v).unwrap_or_default()
            })
        })
    }

    fn dir_count(&self) -> usize {
        (1..=3).map(|l| self.dirs_at(l)).sum()
    }
}

/// Every path, flat: entry i is `stride` bytes, the path then one NUL.
struct Paths {
    shape: Shape,
    stride: usize,
    bytes: Vec<u8>,
}

impl Paths {
    fn new(shape: Shape) -> Paths {
        let stride = shape.len() + 1;
        let mut bytes = Vec::with_capacity(shape.n * stride);
        for i in 0..shape.n {
            shape.write(i, 4, &mut bytes);
            bytes.push(0);
        }
        debug_assert_eq!(bytes.len(), shape.n * stride);
        Paths {
            shape,
            stride,
            bytes,
        }
    }

    fn len(&self) -> usize {
        self.shape.n
    }

    /// Path i, NUL included.
    #[inline(always)]
    fn with_nul(&self, i: usize) -> &[u8] {
        &self.bytes[i * self.stride..(i + 1) * self.stride]
    }

    /// Path i without its NUL.
    #[inline(always)]
    fn name(&self, i: usize) -> &[u8] {
        &self.bytes[i * self.stride..(i + 1) * self.stride - 1]
    }

    /// Path i for the `*at` syscalls.
    #[inline(always)]
    fn c_str(&self, i: usize) -> &CStr {
        let b = self.with_nul(i);
        debug_assert!(b[..b.len() - 1].iter().all(|&c| c != 0) && b[b.len() - 1] == 0);
        // SAFETY: every entry is digits, letters and slashes followed by
        // exactly one NUL (built so in `new`, never changed).
        unsafe { CStr::from_bytes_with_nul_unchecked(b) }
    }

    fn str(&self, i: usize) -> &str {
        std::str::from_utf8(self.name(i)).unwrap_or_default()
    }

    /// Hint the CPU to fetch entry i (no effect on other architectures).
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        let p = self.with_nul(i).as_ptr();
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch never
        // faults or changes memory whatever the address.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }
}

/// splitmix64: one add, three multiplies and shifts per number.
pub(super) struct SplitMix(u64);

impl SplitMix {
    pub(super) fn for_thread(index: usize) -> SplitMix {
        SplitMix(0x5eed_0000_0000_0000 ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    #[inline(always)]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (multiply-shift; the bias is below n / 2^64).
    #[inline(always)]
    pub(super) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// The measured loop: `op` on a random path each time, the next index drawn
/// and its entry prefetched one operation ahead.
#[inline(always)]
fn random_loop<R>(w: Worker<'_>, paths: &Paths, mut op: impl FnMut(usize) -> R) {
    let mut rng = SplitMix::for_thread(w.index());
    let n = paths.len();
    let mut next = rng.below(n);
    w.run(|| {
        let i = next;
        next = rng.below(n);
        paths.prefetch(next);
        op(i)
    })
}

/// Bytes from a `/proc` file's line `key  <n> kB`.
fn proc_kib(file: &str, key: &str) -> Option<i64> {
    let s = std::fs::read_to_string(file).ok()?;
    let v = s.lines().find_map(|l| l.strip_prefix(key))?;
    let kib: i64 = v.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

/// This process's resident memory, after handing freed heap memory back to
/// the kernel so that what is counted is what is live.
fn rss_bytes() -> Option<i64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; no pointer we hold
    // is affected.
    unsafe {
        libc::malloc_trim(0);
    }
    proc_kib("/proc/self/status", "VmRSS:")
}

/// Paths per `stat_many` call in the `batch` variant.
pub const BATCH: usize = 1024;

struct LibCase {
    vfs: Vfs,
    paths: Paths,
    footprint: Option<Footprint>,
    /// Variant `batch`: `BATCH` paths per call.
    batch: bool,
}

impl LibCase {
    fn new(paths: Paths, batch: bool) -> Result<LibCase, String> {
        let shape = paths.shape;
        let rss0 = rss_bytes();
        let fs = Arc::new(MemFs::new().with_limits(Limits::UNLIMITED));
        for d in shape.dirs() {
            fs.mkdir_p(&d, 0o755)
                .map_err(|e| format!("memfs {d}: {e}"))?;
        }
        for i in 0..paths.len() {
            fs.write_file(paths.str(i), b"")
                .map_err(|e| format!("memfs {}: {e}", paths.str(i)))?;
        }
        let rss1 = rss_bytes();
        // Every path, its directories and the root fit, and nothing unused
        // is shrunk: the measurement is of a cache that holds them all.
        let entries = shape.n + shape.dir_count() + 1;
        let vfs = Vfs::with_config(fs, holding_all(entries)).map_err(|e| format!("vfs: {e}"))?;
        for i in 0..paths.len() {
            vfs.as_root()
                .stat(At::Root, paths.name(i))
                .map_err(|e| format!("warm-up stat {}: {e}", paths.str(i)))?;
        }
        let cached = vfs.counters().dentries();
        if cached < shape.n + shape.dir_count() {
            return Err(format!(
                "the dcache holds {cached} dentries, fewer than the {entries} paths and directories"
            ));
        }
        let rss2 = rss_bytes();
        let footprint = match (rss0, rss1, rss2) {
            (Some(a), Some(b), Some(c)) => {
                Some(Footprint::new(shape.n as u64, "rss", c - b, Some(c - a)))
            }
            _ => None,
        };
        Ok(LibCase {
            vfs,
            paths,
            footprint,
            batch,
        })
    }

    #[inline(always)]
    fn once(&self, i: usize) -> Result<(), Errno> {
        self.vfs
            .as_root()
            .stat_with(At::Root, self.paths.name(i), true, StatMode::RefFree)
            .map(|_| ())
    }

    /// The `batch` variant's loop: `BATCH` random paths per call. Their
    /// table entries are not prefetched here: `stat_many` prefetches each
    /// path a round of lanes before it copies it in, as it does for any
    /// caller's paths (prefetching the whole call's entries up front, as
    /// this loop did before, stalled on its own burst: 1.03-1.05x at 1M).
    fn batch_loop(&self, w: Worker<'_>) {
        let paths = &self.paths;
        let me = self.vfs.as_root();
        let mut out = [Err(Errno::EINVAL); BATCH];
        let first: [&[u8]; BATCH] = std::array::from_fn(|j| paths.name(j % paths.len()));
        if let Err(e) = me.stat_many(At::Root, &first, &mut out) {
            w.fail(format!("stat_many: {e}"));
            return;
        }
        if let Some((j, Err(e))) = out.iter().enumerate().find(|(_, r)| r.is_err()) {
            w.fail(format!("{}: {e}", paths.str(j % paths.len())));
            return;
        }
        let mut rng = SplitMix::for_thread(w.index());
        let n = paths.len();
        w.run_batch(BATCH as u64, || {
            let names: [&[u8]; BATCH] = std::array::from_fn(|_| paths.name(rng.below(n)));
            me.stat_many(At::Root, &names, &mut out)
        })
    }
}

impl Case for LibCase {
    fn worker(&self, w: Worker<'_>) {
        if self.batch {
            return self.batch_loop(w);
        }
        if let Err(e) = self.once(0) {
            w.fail(format!("{}: {e}", self.paths.str(0)));
            return;
        }
        random_loop(w, &self.paths, |i| self.once(i))
    }

    fn footprint(&self) -> Option<Footprint> {
        self.footprint.clone()
    }
}

struct KernelCase {
    tree: ShmTree,
    paths: Paths,
    footprint: Option<Footprint>,
}

impl KernelCase {
    fn new(paths: Paths) -> Result<KernelCase, String> {
        let shape = paths.shape;
        let slab0 = proc_kib("/proc/meminfo", "Slab:");
        let tree = ShmTree::build(|root| {
            let mut dirs = std::fs::DirBuilder::new();
            dirs.mode(0o755);
            for d in shape.dirs() {
                dirs.create(root.join(d))?;
            }
            let mut files = std::fs::OpenOptions::new();
            files.write(true).create_new(true).mode(0o644);
            for i in 0..paths.len() {
                files.open(root.join(paths.str(i)))?;
            }
            Ok(())
        })?;
        for i in 0..paths.len() {
            if stat_at(tree.dir(), paths.c_str(i)) != 0 {
                return Err(format!(
                    "warm-up fstatat {}: {}",
                    paths.str(i),
                    Errno::last()
                ));
            }
        }
        let slab1 = proc_kib("/proc/meminfo", "Slab:");
        let footprint = slab0
            .zip(slab1)
            .map(|(a, b)| Footprint::new(shape.n as u64, "slab", b - a, None));
        Ok(KernelCase {
            tree,
            paths,
            footprint,
        })
    }
}

impl Case for KernelCase {
    fn worker(&self, w: Worker<'_>) {
        let dir = self.tree.dir();
        if stat_at(dir, self.paths.c_str(0)) != 0 {
            w.fail(format!("{}: {}", self.paths.str(0), Errno::last()));
            return;
        }
        random_loop(w, &self.paths, |i| stat_at(dir, self.paths.c_str(i)))
    }

    fn footprint(&self) -> Option<Footprint> {
        self.footprint.clone()
    }

    fn teardown(self: Box<Self>) -> Result<(), String> {
        self.tree.remove()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_spreads_n_paths_over_four_levels() {
        let s = Shape::new(100_000);
        assert_eq!((s.fanout, s.width), (18, 2));
        assert!(s.fanout.pow(4) >= 100_000 && (s.fanout - 1).pow(4) < 100_000);
        let p = Paths::new(s);
        assert_eq!(p.str(0), "d00/d00/d00/f00");
        assert_eq!(p.str(19), "d00/d00/d01/f01");
        assert_eq!(p.c_str(99_999).to_bytes(), p.name(99_999));
        assert_eq!(p.str(99_999).len(), s.len());
        // Every path is distinct, and its directories are in `dirs`.
        let all: std::collections::HashSet<&[u8]> = (0..p.len()).map(|i| p.name(i)).collect();
        assert_eq!(all.len(), 100_000);
        let dirs: std::collections::HashSet<String> = s.dirs().collect();
        assert_eq!(dirs.len(), s.dir_count());
        for i in [0, 17, 18, 5831, 5832, 99_999] {
            let path = p.str(i);
            assert!(dirs.contains(&path[..11]), "{path}");
            assert!(
                dirs.contains(&path[..7]) && dirs.contains(&path[..3]),
                "{path}"
            );
        }
        assert_eq!(Shape::new(1).fanout, 1);
        assert_eq!(Paths::new(Shape::new(1)).str(0), "d0/d0/d0/f0");
        assert_eq!(Shape::new(1_000_000).fanout, 32);
    }

    #[test]
    fn splitmix_stays_in_range_and_covers_it() {
        let mut r = SplitMix::for_thread(3);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[r.below(10)] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
        assert_ne!(
            SplitMix::for_thread(0).next(),
            SplitMix::for_thread(1).next()
        );
    }
}
