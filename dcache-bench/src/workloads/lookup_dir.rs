//! `lookup-dir`: every thread looks up uniformly random names among
//! `--paths N` (100000) cached files of one directory and gives the
//! reference back, one `lookup` at a time (variant `one`) or 64 names per
//! `AsCred::lookup_many` call (variant `batch`, as a FUSE server's
//! READDIRPLUS asks for a page of names). The walks of a batch interleave,
//! so a large directory's cache misses overlap; each name counts as one
//! operation in both variants.

use std::sync::Arc;

use super::stat_random::{holding_all, paths_option, SplitMix};
use crate::worker::Worker;
use crate::workload::{Case, CaseSpec, Workload};
use dcache::errno::Errno;
use dcache::fs::memfs::{Limits, MemFs};
use dcache::vfs::{At, Vfs};
use dcache::DentryRef;

pub struct LookupDir;

pub static LOOKUP_DIR: LookupDir = LookupDir;

/// Names per `lookup_many` call in the `batch` variant (the daemon's
/// READDIRPLUS collects at most as many).
const BATCH: usize = 64;

impl Workload for LookupDir {
    fn name(&self) -> &'static str {
        "lookup-dir"
    }
    fn about(&self) -> &'static str {
        "looks up random names among --paths N (100000) cached files of one directory: one at a time, or 64 per lookup_many call"
    }
    fn variants(&self) -> &'static [&'static str] {
        &["one", "batch"]
    }
    fn targets(&self) -> &'static [&'static str] {
        &["lib"]
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> Result<Box<dyn Case>, String> {
        let n = paths_option(spec)?;
        match (spec.target, spec.variant) {
            ("lib", "one") => DirCase::new(n, false).map(|c| Box::new(c) as Box<dyn Case>),
            ("lib", "batch") => DirCase::new(n, true).map(|c| Box::new(c) as Box<dyn Case>),
            (t, v) => Err(format!("variant {v} does not run on target {t}")),
        }
    }
}

/// Width of a name: `file_` and 7 digits.
const NAME: usize = 12;

struct DirCase {
    vfs: Vfs,
    /// Every name, `NAME` bytes each.
    names: Vec<u8>,
    batch: bool,
}

impl DirCase {
    fn new(n: usize, batch: bool) -> Result<DirCase, String> {
        if n > 10_000_000 {
            return Err("--paths: at most 10000000 names in one directory".into());
        }
        let fs = Arc::new(MemFs::new().with_limits(Limits::UNLIMITED));
        fs.mkdir_p("d", 0o755)
            .map_err(|e| format!("memfs d: {e}"))?;
        let mut names = Vec::with_capacity(n * NAME);
        for i in 0..n {
            let name = format!("file_{i:07}");
            fs.write_file(&format!("d/{name}"), b"")
                .map_err(|e| format!("memfs d/{name}: {e}"))?;
            names.extend_from_slice(name.as_bytes());
        }
        // Every name, the directory and the root fit; nothing is shrunk.
        let vfs = Vfs::with_config(fs, holding_all(n + 2)).map_err(|e| format!("vfs: {e}"))?;
        let case = DirCase { vfs, names, batch };
        // Every name cached before the first reading.
        {
            let me = case.vfs.as_root();
            let dir = me
                .lookup(At::Root, "d", true)
                .map_err(|e| format!("d: {e}"))?;
            for i in 0..n {
                me.lookup(At::from(&dir), case.name(i), false)
                    .map_err(|e| format!("warm-up lookup {i}: {e}"))?;
            }
        }
        Ok(case)
    }

    fn len(&self) -> usize {
        self.names.len() / NAME
    }

    #[inline(always)]
    fn name(&self, i: usize) -> &[u8] {
        &self.names[i * NAME..(i + 1) * NAME]
    }
}

impl Case for DirCase {
    fn worker(&self, w: Worker<'_>) {
        let me = self.vfs.as_root();
        let dir = match me.lookup(At::Root, "d", true) {
            Ok(d) => d,
            Err(e) => return w.fail(format!("d: {e}")),
        };
        let at = At::from(&dir);
        let mut rng = SplitMix::for_thread(w.index());
        let n = self.len();
        if !self.batch {
            return w.run(|| {
                let r = me.lookup(at, self.name(rng.below(n)), false);
                debug_assert!(r.as_ref().is_ok_and(|d| !d.is_negative()));
                r.is_ok()
            });
        }
        let mut out: Vec<dcache::Result<DentryRef<'_>>> =
            (0..BATCH).map(|_| Err(Errno::EINVAL)).collect();
        w.run_batch(BATCH as u64, || {
            let names: [&[u8]; BATCH] = std::array::from_fn(|_| self.name(rng.below(n)));
            let r = me.lookup_many(at, &names, false, &mut out);
            debug_assert!(out
                .iter()
                .all(|r| r.as_ref().is_ok_and(|d| !d.is_negative())));
            // The references given back, as the one-at-a-time loop does.
            out.iter_mut().for_each(|o| *o = Err(Errno::EINVAL));
            r.is_ok()
        })
    }
}
