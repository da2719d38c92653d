//! `dup-close`: UnixBench's syscall loop reduced to `close(dup(fd))` on one
//! open file that every thread shares.
//!
//! Each thread has its own descriptor table holding a reference to the same
//! file, as processes forked from one parent share the files they inherited.
//! `dup` takes a file reference (`f_count`, written), `close` tests the mode
//! (`FMODE_PATH`), asks the ops table whether the backend has a flush (memfs,
//! like tmpfs, has none; one that has gets `f_inode` and the handle) and
//! drops the reference again. In the `packed` layout those
//! reads land on the line the other threads keep writing, so every close
//! misses on it (a read that fetches the line Shared, then the decrement
//! that must upgrade it again); in `split` they sit on a line nobody writes
//! and the count's line sees only the two atomic read-modify-writes. The
//! count itself is shared in both: the difference between the variants is
//! the false sharing alone.
//!
//! Its variant there is `syscall`.
//!
//! `file-sharing` isolates the effect: worker 0 only takes and drops
//! references (it writes `f_count`), every other worker only reads the
//! read-mostly fields that `close` and `read` read (`f_mode`, `f_op`,
//! `f_inode`, the handle).
//! Nothing is shared between them but the cache line in `packed`; in
//! `split`, nothing at all. It shows whether a machine's CPUs pay for false
//! sharing at all, which `dup-close` alone cannot tell apart from the true
//! sharing of the count.
//!
//! Target `kernel` runs the real syscalls on one file in /dev/shm; each
//! worker first unshares its descriptor table (`unshare(CLONE_FILES)`), so
//! the threads contend on the kernel's `struct file` only, not on one
//! `files_struct` lock. It has no layout to choose: its `split` and `packed`
//! rows measure the same thing, and their ratio shows the run's noise.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cache_aligned::CacheAligned;
use crate::worker::Worker;
use crate::workload::{Case, CaseSpec, Workload};
use dcache::errno::Result;
use dcache::file::{Fd, FdTable, FileRef, Layout, OpenParts, Packed, Split};
use dcache::fs::memfs::MemFs;
use dcache::fs::FileSystem;
use dcache::vfs::DentryRef;
use std::sync::atomic::{AtomicU64, Ordering};

const VARIANTS: &[&str] = &["split", "packed", "syscall"];
/// The layouts: what the library compares.
const LIB_VARIANTS: &[&str] = &["split", "packed"];
/// The kernel has its own `struct file`.
const KERNEL_VARIANTS: &[&str] = &["syscall"];

/// The path payload of the benchmark's file: one pointer, standing for the
/// dentry reference a Vfs-opened file carries (`dcache layout` shows the
/// layouts with `DentryRef`; the sizes must agree for that to be the
/// layout measured here).
pub struct OpenPath(Arc<Vec<u8>>);

impl OpenPath {
    /// The name the file was opened by.
    pub fn name(&self) -> &[u8] {
        &self.0
    }
}

const _: () = assert!(std::mem::size_of::<OpenPath>() == std::mem::size_of::<DentryRef<'_>>());

pub struct DupWorkload;

pub static DUP_CLOSE: DupWorkload = DupWorkload;

impl Workload for DupWorkload {
    fn name(&self) -> &'static str {
        "dup-close"
    }

    fn about(&self) -> &'static str {
        "every thread: close(dup(fd)) on one shared open file, own fd table (UnixBench syscall)"
    }

    fn variants(&self) -> &'static [&'static str] {
        VARIANTS
    }

    fn targets(&self) -> &'static [&'static str] {
        &["lib", "kernel"]
    }

    fn variants_for(&self, target: &str) -> &'static [&'static str] {
        if target == "kernel" {
            KERNEL_VARIANTS
        } else {
            LIB_VARIANTS
        }
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> std::result::Result<Box<dyn Case>, String> {
        match (spec.target, spec.variant) {
            ("kernel", "syscall") => Ok(Box::new(KernelCase::open()?)),
            ("lib", "split") => Ok(Box::new(LibCase::<Split>::open()?)),
            ("lib", "packed") => Ok(Box::new(LibCase::<Packed>::open()?)),
            (t, v) => Err(format!("no variant {v} on target {t}")),
        }
    }
}

pub struct SharingWorkload;

pub static FILE_SHARING: SharingWorkload = SharingWorkload;

impl Workload for SharingWorkload {
    fn name(&self) -> &'static str {
        "file-sharing"
    }

    fn about(&self) -> &'static str {
        "worker 0: get/put the shared file's count; the others: read its read-mostly fields"
    }

    fn variants(&self) -> &'static [&'static str] {
        LIB_VARIANTS
    }

    fn prepare(&self, spec: &CaseSpec<'_>) -> std::result::Result<Box<dyn Case>, String> {
        match spec.variant {
            "split" => Ok(Box::new(SharingCase(LibCase::<Split>::open()?))),
            "packed" => Ok(Box::new(SharingCase(LibCase::<Packed>::open()?))),
            other => Err(format!("unknown variant {other}")),
        }
    }
}

/// What `close` and `read` read of a file besides its count: the mode, the
/// ops table (through which they call), the inode and the handle.
#[inline(always)]
fn read_mostly<L: Layout>(file: &FileRef<OpenPath, L>) -> usize {
    // black_box on the reference: the fields are reloaded every time
    // instead of being hoisted out of the loop as loop-invariant.
    let f = std::hint::black_box(file);
    let ops = Arc::as_ptr(f.fs()) as *const u8 as usize;
    ops ^ f.mode() as usize ^ f.ino() as usize ^ f.fh() as usize
}

struct SharingCase<L: Layout>(LibCase<L>);

impl<L: Layout> Case for SharingCase<L> {
    fn worker(&self, w: Worker<'_>) {
        let file = &self.0.file;
        if w.index() == 0 {
            w.run(|| drop(file.clone()));
        } else {
            w.run(|| read_mostly(file));
        }
    }

    fn teardown(self: Box<Self>) -> std::result::Result<(), String> {
        Box::new(self.0).teardown()
    }
}

/// A file in a fresh memfs, opened read-write: the shared open file.
fn open_shared<L: Layout>() -> Result<FileRef<OpenPath, L>> {
    let fs = Arc::new(MemFs::new());
    let name = b"/syscall".to_vec();
    let ino = fs.write_file("syscall", b"dup-close\n")?;
    let flags = libc::O_RDWR;
    let fh = fs.open(ino, flags)?;
    Ok(FileRef::open(OpenParts {
        path: OpenPath(Arc::new(name)),
        fs: fs as Arc<dyn FileSystem>,
        ino,
        fh,
        flags,
    }))
}

/// The UnixBench step: a new descriptor for `fd`'s file, closed again.
#[inline(always)]
fn close_dup<L: Layout>(table: &FdTable<OpenPath, L>, fd: Fd) -> Result<()> {
    let n = table.dup(fd)?;
    table.close(n)
}

struct LibCase<L: Layout> {
    /// The case's own reference; the threads' tables add theirs.
    file: FileRef<OpenPath, L>,
    /// Failed operations (written only on failure).
    errors: CacheAligned<AtomicU64>,
}

impl<L: Layout> LibCase<L> {
    fn open() -> std::result::Result<Self, String> {
        Ok(LibCase {
            file: open_shared::<L>().map_err(|e| format!("cannot open the shared file: {e}"))?,
            errors: CacheAligned::new(AtomicU64::new(0)),
        })
    }
}

impl<L: Layout> Case for LibCase<L> {
    fn worker(&self, w: Worker<'_>) {
        // Built on this thread, so the table's own lines (slots, allocator
        // mutex) are private to it, as another process's would be.
        let table = FdTable::<OpenPath, L>::new();
        let fd = match table.install(self.file.clone()) {
            Ok(fd) => fd,
            Err(e) => return w.fail(format!("install: {e}")),
        };
        if let Err(e) = close_dup(&table, fd) {
            return w.fail(format!("close(dup({fd})): {e}"));
        }
        let errors = &*self.errors;
        w.run(|| {
            if close_dup(&table, fd).is_err() {
                // Relaxed: a tally read after the join.
                errors.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    fn teardown(self: Box<Self>) -> std::result::Result<(), String> {
        // Relaxed: the workers were joined, and their tables dropped.
        let errors = self.errors.load(Ordering::Relaxed);
        if errors > 0 {
            return Err(format!("{errors} close(dup()) failed"));
        }
        // Every table dropped its reference: only the case's is left.
        match self.file.count() {
            1 => Ok(()),
            n => Err(format!("{}: file count {n} (expected 1)", L::NAME)),
        }
    }
}

/// One file in /dev/shm, open in the process's table.
struct KernelCase {
    fd: libc::c_int,
    path: Option<PathBuf>,
    errors: CacheAligned<AtomicU64>,
}

impl KernelCase {
    fn open() -> std::result::Result<Self, String> {
        use std::os::unix::ffi::OsStrExt;
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        // Relaxed: only uniqueness matters.
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = PathBuf::from(format!("/dev/shm/dcache-dup-{}-{n}", std::process::id()));
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| "bad path".to_string())?;
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(format!(
                "cannot create {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(KernelCase {
            fd,
            path: Some(path),
            errors: CacheAligned::new(AtomicU64::new(0)),
        })
    }

    fn cleanup(&mut self) -> std::result::Result<(), String> {
        let mut problems = Vec::new();
        if self.fd >= 0 {
            // SAFETY: our own descriptor, closed once (set to -1 below).
            if unsafe { libc::close(self.fd) } != 0 {
                problems.push(format!("close: {}", std::io::Error::last_os_error()));
            }
            self.fd = -1;
        }
        if let Some(p) = self.path.take() {
            if let Err(e) = std::fs::remove_file(&p) {
                problems.push(format!("remove {}: {e}", p.display()));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Case for KernelCase {
    fn worker(&self, w: Worker<'_>) {
        // A private copy of the descriptor table for this thread: the file
        // stays shared (its count is what the threads contend on), the
        // table's lock does not.
        // SAFETY: unshare has no memory-safety preconditions.
        if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
            let e = std::io::Error::last_os_error();
            return w.fail(format!("unshare(CLONE_FILES): {e}"));
        }
        let fd = self.fd;
        let step = || {
            // SAFETY: plain syscalls on descriptors of this thread's table.
            unsafe {
                let n = libc::dup(fd);
                n >= 0 && libc::close(n) == 0
            }
        };
        if !step() {
            let e = std::io::Error::last_os_error();
            return w.fail(format!("close(dup({fd})): {e}"));
        }
        let errors = &*self.errors;
        w.run(|| {
            if !step() {
                // Relaxed: a tally read after the join.
                errors.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    fn teardown(mut self: Box<Self>) -> std::result::Result<(), String> {
        let cleaned = self.cleanup();
        // Relaxed: the workers were joined.
        let errors = self.errors.load(Ordering::Relaxed);
        if errors > 0 {
            return Err(format!("{errors} close(dup()) failed"));
        }
        cleaned
    }
}

impl Drop for KernelCase {
    fn drop(&mut self) {
        let _ = self.cleanup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Options;

    fn spec<'a>(target: &'a str, variant: &'a str, opts: &'a Options) -> CaseSpec<'a> {
        CaseSpec {
            target,
            variant,
            threads: 1,
            options: opts,
        }
    }

    #[test]
    fn close_dup_balances_the_count() {
        let file = open_shared::<Packed>().unwrap();
        let table = FdTable::<OpenPath, Packed>::new();
        let fd = table.install(file.clone()).unwrap();
        assert_eq!(file.count(), 2);
        assert_eq!(file.path().name(), b"/syscall");
        for _ in 0..100 {
            close_dup(&table, fd).unwrap();
        }
        assert_eq!((file.count(), table.open_fds()), (2, 1));
        drop(table);
        assert_eq!(file.count(), 1);
    }

    #[test]
    fn every_target_and_variant_prepares_and_cleans_up() {
        let opts = Options::default();
        for t in DUP_CLOSE.targets() {
            for v in DUP_CLOSE.variants_for(t) {
                assert!(VARIANTS.contains(v));
                let c = DUP_CLOSE.prepare(&spec(t, v, &opts)).unwrap();
                c.teardown().unwrap();
            }
        }
        assert!(DUP_CLOSE.prepare(&spec("lib", "padded", &opts)).is_err());
        assert!(DUP_CLOSE.prepare(&spec("lib", "syscall", &opts)).is_err());
        assert!(DUP_CLOSE.prepare(&spec("kernel", "split", &opts)).is_err());
        for v in LIB_VARIANTS {
            let c = FILE_SHARING.prepare(&spec("lib", v, &opts)).unwrap();
            c.teardown().unwrap();
        }
        assert!(FILE_SHARING.prepare(&spec("lib", "padded", &opts)).is_err());
    }

    #[test]
    fn the_reader_reads_what_close_reads() {
        let file = open_shared::<Split>().unwrap();
        let ops = Arc::as_ptr(file.fs()) as *const u8 as usize;
        let want = ops ^ file.mode() as usize ^ file.ino() as usize ^ file.fh() as usize;
        assert_eq!(read_mostly(&file), want);
        assert_eq!(file.count(), 1);
    }

    #[test]
    fn kernel_teardown_removes_the_file() {
        let mut c = KernelCase::open().unwrap();
        let p = c.path.clone().unwrap();
        assert!(p.exists());
        c.cleanup().unwrap();
        assert!(!p.exists());
        // A second cleanup (Drop after teardown) has nothing left to do.
        c.cleanup().unwrap();
    }

    #[test]
    fn lib_teardown_reports_a_leaked_reference() {
        let c = LibCase::<Split>::open().unwrap();
        let leak = c.file.clone();
        let e = Box::new(c).teardown().unwrap_err();
        assert!(e.contains("file count 2"), "{e}");
        drop(leak);
    }
}
