//! The kernfs workloads: Fox Chen's sysfs benchmark as the 2021 kernfs
//! locking series was measured with, over the three kernfs variants.
//!
//! - `kernfs-files`: every thread opens, reads and closes one attribute
//!   file, `--iterations` times; the threads share `threads / 2` distinct
//!   files (at least one), as the original spread them.
//! - `kernfs-missing`: the same open on one path that does not exist, the
//!   storm of failed lookups that made the old kernfs allocate and free a
//!   dentry under its global mutex on every try.
//!
//! Each variant is a [`Vfs`] over `KernFs::for_variant(v)`, and every
//! operation goes through the Vfs (`open`, `OpenFile::read`, `close`):
//! - `mutex`: the backend refuses to revalidate in rcu-walk, so every walk
//!   falls back to ref-walk and takes the tree mutex once per component (and
//!   again in open and read); a cached negative entry is never trusted.
//! - `rwlock`: the same walks, sharing a reader-writer lock; negative
//!   entries stay valid while their directory's revision is unchanged.
//! - `rcu`: dcache's rcu-walk, revalidating from atomics: no lock at all on
//!   hits and on cached misses, and no allocation on a repeated miss.
//!
//! The tree is a small sysfs: `devices/system/cpu/cpuN/{topology,cache/
//! indexK}/...`, six or seven components deep, a few hundred nodes.

use std::sync::Arc;

use crate::cache_aligned::CacheAligned;
use crate::worker::Worker;
use crate::workload::{Case, CaseSpec, Driver, Workload};
use dcache::errno::{Errno, Result};
use dcache::fs::kernfs::{KernFs, ROOT_INO};
use dcache::fs::Ino;
use dcache::vfs::{At, Vfs};
use std::sync::atomic::{AtomicU64, Ordering};

/// Variants, the comparison base first: the summary's ratio column then
/// reads as the speed-up over the old kernfs.
const VARIANTS: &[&str] = &["mutex", "rwlock", "rcu"];

/// CPUs in the generated tree when fewer files are needed (a realistic
/// size: the walk's cost must not come from an unrealistically tiny tree).
pub const TREE_CPUS: usize = 16;

/// The attribute every thread of `kernfs-files` reads, in cpu `n`'s
/// directory.
pub fn file_path(n: usize) -> String {
    format!("devices/system/cpu/cpu{n}/topology/core_id")
}

/// The name `kernfs-missing` looks up: its parent exists, it does not.
pub const MISSING_PATH: &str = "devices/system/cpu/cpu0/topology/missing";

fn show(text: String) -> dcache::fs::kernfs::ShowFn {
    let bytes = text.into_bytes();
    Box::new(move || bytes.clone())
}

/// Fill `fs` with a sysfs-like cpu tree for `cpus` CPUs:
/// `devices/system/cpu/{online,possible,present}` and, per CPU,
/// `cpuN/online`, `cpuN/topology/` (six attributes) and
/// `cpuN/cache/index0..3/` (four attributes each). Returns the number of
/// nodes created.
pub fn build_cpu_tree(fs: &KernFs, cpus: usize) -> Result<usize> {
    let mut nodes = 0;
    let mut dir = |parent: Ino, name: &str| -> Result<Ino> {
        nodes += 1;
        fs.create_dir(parent, name, 0o755)
    };
    let devices = dir(ROOT_INO, "devices")?;
    let system = dir(devices, "system")?;
    let cpu = dir(system, "cpu")?;
    let mut files = 0;
    let mut file = |parent: Ino, name: &str, text: String| -> Result<Ino> {
        files += 1;
        fs.create_file(parent, name, 0o444, show(text), None)
    };
    let last = cpus.saturating_sub(1);
    for name in ["online", "possible", "present"] {
        file(cpu, name, format!("0-{last}\n"))?;
    }
    for n in 0..cpus {
        let c = dir(cpu, &format!("cpu{n}"))?;
        file(c, "online", "1\n".into())?;
        let topo = dir(c, "topology")?;
        // Two threads per core, eight cores per package.
        let core = n / 2;
        file(topo, "core_id", format!("{}\n", core % 8))?;
        file(topo, "physical_package_id", format!("{}\n", core / 8))?;
        file(topo, "die_id", format!("{}\n", core / 8))?;
        file(topo, "cluster_id", format!("{core}\n"))?;
        let sib = core * 2;
        file(topo, "thread_siblings_list", format!("{sib}-{}\n", sib + 1))?;
        let pkg = (core / 8) * 16;
        file(topo, "core_siblings_list", format!("{pkg}-{}\n", pkg + 15))?;
        let cache = dir(c, "cache")?;
        let levels = [
            (1, "Data", "48K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "2048K"),
            (3, "Unified", "32768K"),
        ];
        for (k, (level, kind, size)) in levels.into_iter().enumerate() {
            let idx = dir(cache, &format!("index{k}"))?;
            file(idx, "level", format!("{level}\n"))?;
            file(idx, "type", format!("{kind}\n"))?;
            file(idx, "size", format!("{size}\n"))?;
            file(idx, "coherency_line_size", "64\n".into())?;
        }
    }
    Ok(nodes + files)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Files,
    Missing,
}

pub struct KernfsWorkload {
    name: &'static str,
    about: &'static str,
    mode: Mode,
}

pub static KERNFS_FILES: KernfsWorkload = KernfsWorkload {
    name: "kernfs-files",
    about: "every thread: open + read + close one of threads/2 kernfs attributes (Fox Chen)",
    mode: Mode::Files,
};

pub static KERNFS_MISSING: KernfsWorkload = KernfsWorkload {
    name: "kernfs-missing",
    about: "every thread: open one missing kernfs path (ENOENT), --iterations times",
    mode: Mode::Missing,
};

impl Workload for KernfsWorkload {
    fn name(&self) -> &'static str {
        self.name
    }

    fn about(&self) -> &'static str {
        self.about
    }

    fn variants(&self) -> &'static [&'static str] {
        VARIANTS
    }

    fn driver(&self) -> Driver {
        Driver::Iterations
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> std::result::Result<Box<dyn Case>, String> {
        let fs = KernFs::for_variant(spec.variant)
            .map_err(|_| format!("unknown variant {}", spec.variant))?;
        build_cpu_tree(&fs, files_for(spec.threads).max(TREE_CPUS))
            .map_err(|e| format!("cannot build the kernfs tree: {e}"))?;
        let vfs =
            Vfs::new(Arc::new(fs)).map_err(|e| format!("cannot mount the kernfs tree: {e}"))?;
        Ok(Box::new(KernfsCase {
            vfs,
            paths: paths(self.mode, spec.threads),
            mode: self.mode,
            errors: CacheAligned::new(AtomicU64::new(0)),
        }))
    }
}

/// Distinct files `threads` threads share: half as many, at least one.
fn files_for(threads: usize) -> usize {
    (threads / 2).max(1)
}

/// The path each thread uses is `paths[index % len]`.
fn paths(mode: Mode, threads: usize) -> Vec<Vec<u8>> {
    match mode {
        Mode::Files => (0..files_for(threads))
            .map(|n| file_path(n).into_bytes())
            .collect(),
        Mode::Missing => vec![MISSING_PATH.as_bytes().to_vec()],
    }
}

struct KernfsCase {
    vfs: Vfs,
    paths: Vec<Vec<u8>>,
    mode: Mode,
    /// Operations that did not give the expected answer; written only on
    /// failure, so it costs the loop nothing while all is well.
    errors: CacheAligned<AtomicU64>,
}

/// Fox Chen's loop body: open, read the attribute, close.
#[inline(always)]
fn open_read_close(vfs: &Vfs, path: &[u8], buf: &mut [u8]) -> Result<usize> {
    let f = vfs.as_root().open(At::Root, path, libc::O_RDONLY, 0)?;
    let n = f.read(0, buf)?;
    f.close()?;
    Ok(n)
}

/// An open of the missing path: ENOENT is the success.
#[inline(always)]
fn open_missing(vfs: &Vfs, path: &[u8]) -> Result<()> {
    match vfs.as_root().open(At::Root, path, libc::O_RDONLY, 0) {
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Err(Errno::EEXIST),
    }
}

impl Case for KernfsCase {
    fn worker(&self, w: Worker<'_>) {
        let path = &self.paths[w.index() % self.paths.len()];
        let vfs = &self.vfs;
        let errors = &*self.errors;
        let mut buf = [0u8; 64];
        // One untimed try, so a broken setup is one clear message rather
        // than a count of failed operations.
        let first = match self.mode {
            Mode::Files => open_read_close(vfs, path, &mut buf).and_then(|n| {
                if n == 0 {
                    Err(Errno::EIO)
                } else {
                    Ok(())
                }
            }),
            Mode::Missing => open_missing(vfs, path),
        };
        if let Err(e) = first {
            w.fail(format!("{}: {e}", String::from_utf8_lossy(path)));
            return;
        }
        let count_error = || {
            // Relaxed: a tally read after the join.
            errors.fetch_add(1, Ordering::Relaxed);
        };
        match self.mode {
            Mode::Files => w.run(|| {
                if open_read_close(vfs, path, &mut buf).is_err() {
                    count_error();
                }
            }),
            Mode::Missing => w.run(|| {
                if open_missing(vfs, path).is_err() {
                    count_error();
                }
            }),
        }
    }

    fn teardown(self: Box<Self>) -> std::result::Result<(), String> {
        // Relaxed: the workers were joined before teardown.
        let n = self.errors.load(Ordering::Relaxed);
        if n > 0 {
            return Err(format!("{n} operation(s) gave an unexpected answer"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Options;

    fn case(w: &KernfsWorkload, variant: &str, threads: usize) -> Box<dyn Case> {
        let opts = Options::default();
        let spec = CaseSpec {
            target: "lib",
            variant,
            threads,
            options: &opts,
        };
        w.prepare(&spec).unwrap()
    }

    #[test]
    fn the_tree_is_sysfs_sized_and_every_file_reads() {
        let fs = KernFs::for_variant("rcu").unwrap();
        let n = build_cpu_tree(&fs, TREE_CPUS).unwrap();
        assert!((300..1000).contains(&n), "{n} nodes");
        assert_eq!(fs.node_count(), n + 1);
        let vfs = Vfs::new(Arc::new(fs)).unwrap();
        let mut buf = [0u8; 64];
        for c in 0..TREE_CPUS {
            let k = open_read_close(&vfs, file_path(c).as_bytes(), &mut buf).unwrap();
            let want = format!("{}\n", (c / 2) % 8);
            assert_eq!(&buf[..k], want.as_bytes());
        }
        let k =
            open_read_close(&vfs, b"devices/system/cpu/cpu3/cache/index2/size", &mut buf).unwrap();
        assert_eq!(&buf[..k], b"2048K\n");
        assert_eq!(open_missing(&vfs, MISSING_PATH.as_bytes()), Ok(()));
    }

    #[test]
    fn threads_share_half_as_many_files() {
        for (threads, files) in [(1, 1), (2, 1), (3, 1), (4, 2), (64, 32)] {
            let p = paths(Mode::Files, threads);
            assert_eq!(p.len(), files, "{threads} threads");
            assert_eq!(p[files - 1], file_path(files - 1).into_bytes());
            assert_eq!(paths(Mode::Missing, threads).len(), 1);
        }
    }

    #[test]
    fn every_variant_prepares_and_unknown_fails() {
        for w in [&KERNFS_FILES, &KERNFS_MISSING] {
            for v in VARIANTS {
                case(w, v, 2).teardown().unwrap();
            }
            let opts = Options::default();
            let spec = CaseSpec {
                target: "lib",
                variant: "spinlock",
                threads: 1,
                options: &opts,
            };
            assert!(w.prepare(&spec).is_err());
        }
    }

    #[test]
    fn teardown_reports_failed_operations() {
        let c = KernfsCase {
            vfs: Vfs::new(Arc::new(KernFs::for_variant("rcu").unwrap())).unwrap(),
            paths: vec![b"x".to_vec()],
            mode: Mode::Files,
            errors: CacheAligned::new(AtomicU64::new(3)),
        };
        let e = Box::new(c).teardown().unwrap_err();
        assert!(e.contains("3 operation(s)"), "{e}");
    }
}
