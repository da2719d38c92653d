//! How an inode names its host object, and the bound on descriptors.
//!
//! Where the host can reopen file handles (the daemon has
//! `CAP_DAC_READ_SEARCH` and the object sits on the served directory's own
//! mount, on a filesystem that exports handles: ext4, xfs, btrfs, tmpfs...),
//! an inode keeps only its **file handle** (`name_to_handle_at`, a few dozen
//! bytes) and a descriptor is opened from it on demand
//! (`open_by_handle_at(.., O_PATH)`), as virtiofsd's `--inode-file-handles`
//! does. Those descriptors live in a small cache, [`FdCache`], whose size is
//! fixed by configuration: a CLOCK ring of the inodes that have one open,
//! where a use sets the inode's bit and eviction gives each set bit one more
//! turn before closing. So the daemon's descriptor count is bounded by that
//! size plus its open files, whatever the tree's size or what the kernel
//! and the Vfs cache.
//!
//! Elsewhere (a daemon without the capability, a filesystem without handles,
//! a mount below the source) an inode **holds** its `O_PATH` descriptor for
//! its whole life, as before; that count is bounded by what the Vfs caches
//! (its size knob) and the kernel holds, and an `EMFILE` sheds the Vfs's
//! unused entries and retries (`Vfs` side).
//!
//! Confinement is unchanged: a handle is only ever taken of an object
//! reached the confined way (a held directory plus one checked component,
//! or an fd we hold), and `open_by_handle_at` opens that inode itself,
//! resolving no path, exactly as the descriptor it replaces would name it.
//! A handle of a deleted object answers ESTALE (the handle carries the
//! inode's generation, so a reused inode number is not confused with it).

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use crate::errno::{Errno, Result};
use crate::sync::{Arc, AtomicBool, AtomicUsize, LockExt, Ordering};

/// `MAX_HANDLE_SZ`: the largest handle the kernel produces.
const MAX_HANDLE: usize = 128;

/// The opaque identity of a host inode that survives closing every
/// descriptor of it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct FileHandle {
    handle_type: i32,
    bytes: Box<[u8]>,
}

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE],
}

impl RawHandle {
    fn empty() -> RawHandle {
        RawHandle {
            handle_bytes: MAX_HANDLE as libc::c_uint,
            handle_type: 0,
            f_handle: [0; MAX_HANDLE],
        }
    }
}

/// The handle of the object `fd` names (an `O_PATH` fd of ours) and the
/// id of the mount it is on.
pub(crate) fn handle_of(fd: BorrowedFd<'_>) -> Result<(FileHandle, i32)> {
    let mut raw = RawHandle::empty();
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` is a `struct file_handle` header followed by
    // MAX_HANDLE_SZ bytes, as `handle_bytes` tells the kernel; the path is
    // the empty NUL-terminated string with AT_EMPTY_PATH (the fd itself);
    // `mount_id` is a valid out-pointer.
    let r = unsafe {
        libc::name_to_handle_at(
            fd.as_raw_fd(),
            c"".as_ptr(),
            std::ptr::from_mut(&mut raw).cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    let n = (raw.handle_bytes as usize).min(MAX_HANDLE);
    Ok((
        FileHandle {
            handle_type: raw.handle_type,
            bytes: raw.f_handle[..n].into(),
        },
        mount_id,
    ))
}

/// Open `h` as an `O_PATH` descriptor, through `mount_fd` (any fd on the
/// handle's filesystem).
fn open_handle(mount_fd: BorrowedFd<'_>, h: &FileHandle) -> Result<OwnedFd> {
    let mut raw = RawHandle::empty();
    raw.handle_bytes = h.bytes.len() as libc::c_uint;
    raw.handle_type = h.handle_type;
    raw.f_handle[..h.bytes.len()].copy_from_slice(&h.bytes);
    // SAFETY: `raw` is a valid `struct file_handle` whose `handle_bytes`
    // does not exceed the bytes that follow it; the kernel only reads it.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            std::ptr::from_mut(&mut raw).cast::<libc::file_handle>(),
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this descriptor; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the error means "out of descriptors" (ours or the system's).
pub(crate) fn out_of_fds(e: Errno) -> bool {
    e == Errno::EMFILE || e == Errno::ENFILE
}

/// A descriptor opened from a handle, counted while open.
pub(crate) struct CachedFd {
    fd: OwnedFd,
    open: Arc<AtomicUsize>,
}

impl Drop for CachedFd {
    fn drop(&mut self) {
        // Relaxed: a statistic (the descriptor closes right after).
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An inode's place in the descriptor cache.
pub(crate) struct Slot {
    fd: Mutex<Option<Arc<CachedFd>>>,
    /// CLOCK's bit: used since eviction last passed.
    referenced: AtomicBool,
}

impl Slot {
    /// Close the cached descriptor, if any (the inode is going away). An
    /// operation still using it keeps it open until it is done.
    pub(crate) fn clear(&self) {
        let fd = self.fd.lock_unpoisoned().take();
        drop(fd);
    }
}

/// How an inode names its host object.
pub(crate) enum Anchor {
    /// A descriptor held for the inode's life.
    Held(OwnedFd),
    /// A file handle; descriptors come and go through the [`FdCache`].
    Handle { handle: FileHandle, slot: Arc<Slot> },
}

impl Anchor {
    /// A handle anchor whose first descriptor, `fd`, is already open: it is
    /// put in `cache` right away, so the lookup that made it and the calls
    /// that usually follow (getattr, open) reuse it.
    pub(crate) fn handle(cache: &FdCache, handle: FileHandle, fd: OwnedFd) -> Anchor {
        let slot = Arc::new(Slot {
            fd: Mutex::new(None),
            referenced: AtomicBool::new(true),
        });
        cache.insert(&slot, fd);
        Anchor::Handle { handle, slot }
    }

    pub(crate) fn file_handle(&self) -> Option<&FileHandle> {
        match self {
            Anchor::Held(_) => None,
            Anchor::Handle { handle, .. } => Some(handle),
        }
    }
}

impl Drop for Anchor {
    fn drop(&mut self) {
        if let Anchor::Handle { slot, .. } = self {
            slot.clear();
        }
    }
}

/// A descriptor of an inode's host object, usable for one operation.
pub(crate) enum HostFd<'a> {
    Held(BorrowedFd<'a>),
    Cached(Arc<CachedFd>),
}

impl AsFd for HostFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            HostFd::Held(fd) => *fd,
            HostFd::Cached(c) => c.fd.as_fd(),
        }
    }
}

/// The bounded set of descriptors opened from handles (module docs).
pub(crate) struct FdCache {
    /// Where handles are opened (the served directory's mount), if handles
    /// are used at all.
    mount: Option<(OwnedFd, i32)>,
    /// Slots that have (or recently had) a descriptor, in CLOCK order.
    ring: Mutex<VecDeque<Arc<Slot>>>,
    cap: usize,
    /// Cached descriptors open now (some may be out of the ring, still in
    /// use by an operation).
    open: Arc<AtomicUsize>,
}

impl FdCache {
    /// A cache opening handles through `mount` (a descriptor on the served
    /// mount and that mount's id), keeping at most `cap` open; `None`: no
    /// handles (every inode holds its descriptor).
    pub(crate) fn new(mount: Option<(OwnedFd, i32)>, cap: usize) -> FdCache {
        FdCache {
            mount,
            ring: Mutex::new(VecDeque::new()),
            cap: cap.max(1),
            open: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Probe whether handles work for the directory `fd` (the served
    /// root, an `O_PATH` fd): its handle can be taken and opened again.
    /// `Some((a readable fd of that directory, mount id))` if so: the
    /// kernel refuses `O_PATH` descriptors as `open_by_handle_at`'s mount
    /// fd.
    pub(crate) fn probe(fd: BorrowedFd<'_>) -> Option<(OwnedFd, i32)> {
        let (h, mount_id) = handle_of(fd).ok()?;
        let mount = super::sys::open_dir(fd).ok()?;
        open_handle(mount.as_fd(), &h).ok()?;
        Some((mount, mount_id))
    }

    /// The anchor for a newly held object `fd`: a handle when handles are
    /// used and the object is on the served mount, else `fd` itself.
    pub(crate) fn anchor(&self, fd: OwnedFd) -> Anchor {
        if let Some((_, mount_id)) = &self.mount {
            if let Ok((h, id)) = handle_of(fd.as_fd()) {
                if id == *mount_id {
                    return Anchor::handle(self, h, fd);
                }
            }
        }
        Anchor::Held(fd)
    }

    /// Whether inodes on the served mount are anchored by handles.
    pub(crate) fn uses_handles(&self) -> bool {
        self.mount.is_some()
    }

    /// Cached descriptors open now.
    pub(crate) fn open_count(&self) -> usize {
        // Relaxed: a statistic.
        self.open.load(Ordering::Relaxed)
    }

    /// The most descriptors kept open.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// A descriptor for `anchor`'s object.
    pub(crate) fn fd<'a>(&self, anchor: &'a Anchor) -> Result<HostFd<'a>> {
        let (handle, slot) = match anchor {
            Anchor::Held(fd) => return Ok(HostFd::Held(fd.as_fd())),
            Anchor::Handle { handle, slot } => (handle, slot),
        };
        // Relaxed: a hint for eviction; a lost set only costs a reopen.
        slot.referenced.store(true, Ordering::Relaxed);
        if let Some(c) = slot.fd.lock_unpoisoned().as_ref() {
            return Ok(HostFd::Cached(c.clone()));
        }
        let Some((mount, _)) = &self.mount else {
            return Err(Errno::ESTALE);
        };
        let fd = match open_handle(mount.as_fd(), handle) {
            Err(e) if out_of_fds(e) => {
                // Out of descriptors: close every cached one, try once more.
                self.shed(usize::MAX);
                open_handle(mount.as_fd(), handle)
            }
            r => r,
        };
        let fd = match fd {
            // The handle of an inode the host just deleted has been seen to
            // answer ENOMEM rather than ESTALE (ext4, an inode still being
            // evicted). ESTALE makes the caller look the name up again, and
            // a true allocation failure then shows on that lookup.
            Err(e) if e == Errno::ENOMEM => return Err(Errno::ESTALE),
            r => r?,
        };
        Ok(HostFd::Cached(self.insert(slot, fd)))
    }

    /// Put `fd` in `slot` (unless a racing opener did first: then its
    /// descriptor is used and `fd` closed) and evict past the cap.
    fn insert(&self, slot: &Arc<Slot>, fd: OwnedFd) -> Arc<CachedFd> {
        // Relaxed: a statistic.
        self.open.fetch_add(1, Ordering::Relaxed);
        let fresh = Arc::new(CachedFd {
            fd,
            open: self.open.clone(),
        });
        {
            let mut cur = slot.fd.lock_unpoisoned();
            if let Some(c) = cur.as_ref() {
                return c.clone();
            }
            *cur = Some(fresh.clone());
        }
        let over = {
            let mut ring = self.ring.lock_unpoisoned();
            ring.push_back(slot.clone());
            ring.len().saturating_sub(self.cap)
        };
        if over > 0 {
            self.shed(over);
        }
        fresh
    }

    /// Close up to `n` cached descriptors, least recently used first by
    /// CLOCK (`usize::MAX`: all). Closing happens outside the ring's lock.
    pub(crate) fn shed(&self, n: usize) {
        let mut closed: Vec<Arc<CachedFd>> = Vec::new();
        {
            let mut ring = self.ring.lock_unpoisoned();
            let all = n == usize::MAX;
            // Each entry is looked at most twice: once to clear its bit,
            // once to evict it.
            let mut budget = ring.len().saturating_mul(2);
            let mut evicted = 0;
            while evicted < n && budget > 0 {
                budget -= 1;
                let Some(slot) = ring.pop_front() else { break };
                // Relaxed: the CLOCK hint (see `fd`).
                if !all && slot.referenced.swap(false, Ordering::Relaxed) {
                    ring.push_back(slot);
                    continue;
                }
                let fd = slot.fd.lock_unpoisoned().take();
                // An entry whose inode went away (fd already closed) is
                // dropped from the ring without counting.
                if let Some(fd) = fd {
                    closed.push(fd);
                    evicted += 1;
                }
            }
        }
        drop(closed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_fd(p: &std::path::Path) -> OwnedFd {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: NUL-terminated path; open has no other preconditions.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fresh descriptor, owned by no one else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    #[test]
    fn cache_keeps_at_most_cap_open_and_reopens_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let root = path_fd(dir.path());
        let Some(mount) = FdCache::probe(root.as_fd()) else {
            println!("SKIPPED fd cache test (no open_by_handle_at here)");
            return;
        };
        let cache = FdCache::new(Some(mount), 4);
        let mut anchors = Vec::new();
        for i in 0..10 {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, [i as u8]).unwrap();
            let a = cache.anchor(path_fd(&p));
            assert!(a.file_handle().is_some());
            anchors.push(a);
            assert!(cache.open_count() <= 4, "open {}", cache.open_count());
        }
        // Every anchor still reaches its own file.
        for (i, a) in anchors.iter().enumerate() {
            let fd = cache.fd(a).unwrap();
            // SAFETY: stat is plain data; all-zero is a valid value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: live fd, valid out-buffer.
            assert_eq!(unsafe { libc::fstat(fd.as_fd().as_raw_fd(), &mut st) }, 0);
            assert_eq!(st.st_size, 1, "f{i}");
            drop(fd);
            assert!(cache.open_count() <= 4);
        }
        drop(anchors);
        assert_eq!(cache.open_count(), 0);
    }

    #[test]
    fn handle_of_deleted_file_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let root = path_fd(dir.path());
        let Some(mount) = FdCache::probe(root.as_fd()) else {
            println!("SKIPPED stale handle test (no open_by_handle_at here)");
            return;
        };
        let cache = FdCache::new(Some(mount), 4);
        let p = dir.path().join("gone");
        std::fs::write(&p, b"x").unwrap();
        let a = cache.anchor(path_fd(&p));
        cache.shed(usize::MAX);
        assert_eq!(cache.open_count(), 0);
        std::fs::remove_file(&p).unwrap();
        assert_eq!(cache.fd(&a).err(), Some(Errno::ESTALE));
    }
}
