//! `DcacheFs`: the [`Handler`] the FUSE request layer drives, a thin
//! adapter over [`FuseCore`]: each request is one call and one reply. This
//! is the trust boundary: node ids and file handles become [`NodeId`] and
//! [`Fh`] only here, where a parsed request hands over what the kernel
//! sent. The requests themselves are answered in `fs/requests.rs`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dcache::cred::{Caps, Cred};
use dcache::errno::{Errno, Result};
use dcache::fs::{Attr, LockScope};
use dcache::Invalidation;
use dcache::Vfs;

use super::attr::file_attr;
use super::core::{Entry, FuseCore};
use super::handles::Fh;
use super::inval::{InvalSlot, KernelInval};
use super::nodes::NodeId;
use super::options::Timeouts;
use super::poll::Poller;
use super::stats::{Report, Stats};
use super::wire::abi::{self, init};
use super::wire::dev::{Dev, Notifier};
use super::wire::{Handler, Header, Out, Request};

/// The generation of every entry. A node id is an inode number, which
/// memfs and kernfs never reuse; passthrough's are the host's, and a host
/// number reused for a new file while the backend still holds the old one
/// (as it does while the kernel holds its node) gets a number of its own.
const GENERATION: u64 = 0;

/// Per-mount behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsConfig {
    /// How long the kernel may cache attributes and names.
    pub timeouts: Timeouts,
    /// Advertise READDIRPLUS (entries come with attributes and references).
    pub readdirplus: bool,
    /// Open files with FOPEN_DIRECT_IO (reads and writes bypass the page
    /// cache: right for generated files whose size is not their length).
    pub direct_io: bool,
    /// Open the backend's host files with kernel backing files, so the
    /// kernel does their I/O (`-o passthrough_io`, see `fs/backing.rs`).
    pub passthrough_io: bool,
    /// dcache checks permissions itself (`-o no_default_permissions`);
    /// otherwise the kernel has, and requests carry every capability.
    pub check_permissions: bool,
    /// Print the unmount report on stderr.
    pub log: bool,
    /// The most nodes the kernel may hold before the daemon asks it to
    /// drop some (`-o max_nodes`, see `fs/budget.rs`); 0: no bound.
    pub max_nodes: usize,
    /// Ask for zero-trip opens where they apply (`-o zero_trip_open`).
    pub zero_trip_open: bool,
    /// Ask for FUSE_WRITEBACK_CACHE (`-o writeback_cache`).
    pub writeback_cache: bool,
    /// Ask for FUSE_POSIX_ACL / FUSE_DONT_MASK where the backend keeps
    /// attributes (`-o posix_acl`).
    pub posix_acl: bool,
    /// Serve extended attributes (`-o xattr`); off, every xattr request
    /// is answered ENOSYS, which makes the kernel stop sending them.
    pub xattr: bool,
    /// Ask for FUSE_HANDLE_KILLPRIV_V2 (`-o killpriv`).
    pub killpriv: bool,
    /// Ask for FUSE_POSIX_LOCKS and FUSE_FLOCK_LOCKS (`-o locks`): for
    /// any backend that keeps locks (`Some(true)`), never (`Some(false)`),
    /// or for backends shared across hosts (`None`).
    pub locks: Option<bool>,
}

/// The FUSE filesystem: the request core plus per-mount behaviour.
pub struct DcacheFs {
    core: FuseCore,
    stats: Arc<Stats>,
    cfg: FsConfig,
    report: Arc<OnceLock<Report>>,
    /// Set once the session is mounted, if it busy-polls (`poll_us`).
    poll: Arc<OnceLock<Arc<Poller>>>,
    /// Set once the session is mounted: what a thread asks the kernel to
    /// drop from its cache (never from a handler).
    inval: InvalSlot,
    /// The kernel leaves the umask to us (FUSE_POSIX_ACL and FUSE_DONT_MASK
    /// negotiated): creates carry the caller's umask, which the Vfs
    /// applies unless the directory has a default ACL.
    umask_here: bool,
    /// The backend keeps POSIX ACLs but the kernel did not take
    /// FUSE_POSIX_ACL: the mount offers none (see `core::is_acl`).
    acls_hidden: bool,
    /// The kernel caches writes (FUSE_WRITEBACK_CACHE negotiated): opens
    /// are widened for its reads (`open_flags_for`).
    writeback: bool,
    /// When the kernel may next be asked to drop nodes.
    budget: budget::NodeBudget,
    /// Backing files for passthrough I/O.
    backing: backing::Backing,
    /// The kernel opens directories without asking.
    no_opendir: bool,
    /// FLUSH does nothing here: answered ENOSYS, so the kernel stops.
    no_flush: bool,
    /// Files whose flush does nothing are opened with FOPEN_NOFLUSH (no
    /// locks to drop at close, no writeback cache to flush).
    noflush_files: bool,
    /// Notifications sent from handlers (attributes only), once connected.
    notifier: OnceLock<Notifier>,
    /// The backend keeps this mount's locks (FUSE_POSIX_LOCKS and
    /// FUSE_FLOCK_LOCKS negotiated); SETLKW requests wait here.
    locks: Option<crate::locks::LockWaits>,
}

mod backing;
mod budget;

/// The node a request names.
fn node(id: u64) -> NodeId {
    // SAFETY: the id is one the kernel sent in a request, and the kernel
    // keeps that node until the request is answered.
    unsafe { NodeId::from_kernel(id) }
}

/// The file handle a request names.
fn handle(fh: u64) -> Fh {
    // SAFETY: the handle is one the kernel sent in a request: one we
    // returned from open, create or tmpfile and that it has not released
    // (its RELEASE comes once, after every other request on the handle).
    unsafe { Fh::from_kernel(fh) }
}

/// A duration as the wire's seconds and nanoseconds.
fn secs(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

impl DcacheFs {
    /// Serve `vfs` with `cfg`.
    pub fn new(vfs: Vfs, cfg: FsConfig) -> DcacheFs {
        let core = FuseCore::new(vfs);
        let inval: InvalSlot = Arc::new(OnceLock::new());
        // Changes the backend reports underneath the Vfs (another client
        // of a shared namespace, say) reach the kernel's cache too: queued
        // for the invalidator thread, as the reporting thread may be one a
        // handler waits for.
        let (slot, ids) = (inval.clone(), core.ids());
        core.vfs().subscribe(move |what| {
            let Some(tx) = slot.get() else { return };
            let msg = match what {
                Invalidation::Entry { dir, name } => KernelInval::Entry {
                    parent: ids.id(dir),
                    name: name.to_vec(),
                },
                Invalidation::Inode { ino } => KernelInval::Inode { node: ids.id(ino) },
            };
            let _ = tx.lock().unwrap_or_else(|e| e.into_inner()).send(msg);
        });
        DcacheFs {
            stats: core.stats(),
            core,
            cfg,
            report: Arc::new(OnceLock::new()),
            poll: Arc::new(OnceLock::new()),
            inval,
            umask_here: false,
            acls_hidden: false,
            writeback: false,
            budget: budget::NodeBudget::new(),
            backing: backing::Backing::new(cfg.log),
            no_opendir: false,
            no_flush: false,
            noflush_files: false,
            notifier: OnceLock::new(),
            locks: None,
        }
    }

    /// The connection is up: backing files are registered on `dev`, and
    /// attribute changes the kernel cannot know of are told on it.
    pub fn connected(&self, dev: Arc<Dev>) {
        let _ = self.notifier.set(Notifier::new(dev));
    }

    /// Node `id`'s attributes changed in a way no reply tells the kernel
    /// (set-id bits dropped after a WRITE): drop its cached attributes.
    /// Offset -1 invalidates attributes only, which takes no page lock,
    /// so it may be sent from the handler of a request on that node.
    fn attr_changed(&self, id: u64) {
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(id, -1, 0);
        }
    }

    /// SETLKW requests waiting for a lock now (0 where the kernel keeps
    /// this mount's locks).
    pub fn lock_waiters(&self) -> usize {
        self.locks.as_ref().map_or(0, |l| l.waiting())
    }

    /// Backing files registered with the kernel now (passthrough I/O).
    pub fn backing_files(&self) -> usize {
        self.backing.registered()
    }

    /// Where the session's entry invalidator goes once it is mounted.
    pub fn inval_slot(&self) -> InvalSlot {
        self.inval.clone()
    }

    /// The dentry cache underneath.
    pub fn vfs(&self) -> &Vfs {
        self.core.vfs()
    }

    /// The request core this adapter drives.
    pub fn core(&self) -> &FuseCore {
        &self.core
    }

    /// The per-mount behaviour.
    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    /// Where the unmount report will appear (set once, at session end).
    pub fn report_slot(&self) -> Arc<OnceLock<Report>> {
        self.report.clone()
    }

    /// Where the session's [`Poller`] goes once it is mounted.
    pub fn poll_slot(&self) -> Arc<OnceLock<Arc<Poller>>> {
        self.poll.clone()
    }

    /// The credential a request acts with: the caller's uid and gid (owner
    /// and group of what it creates) and its task's groups, read only if a
    /// check needs them. Checked by dcache only with `no_default_permissions`
    /// (uid 0 then has the filesystem capabilities, as root has by
    /// default); otherwise the kernel checked already and the credential
    /// carries every capability.
    fn cred(&self, h: &Header) -> Cred {
        let caps = if !self.cfg.check_permissions || h.uid == 0 {
            Caps::ALL
        } else {
            Caps::NONE
        };
        Cred::of_task(h.uid, h.gid, h.pid, caps)
    }

    /// The owner and group of the backend's root, as the Vfs has them.
    pub(crate) fn root_owner(&self) -> Option<(u32, u32)> {
        let p = self.core.vfs().root().inode()?.perm();
        Some((p.uid, p.gid))
    }

    /// Whether the backend can hold POSIX ACLs: it answers `getxattr` of
    /// the root's access ACL with something other than EOPNOTSUPP.
    fn backend_has_acls(&self) -> bool {
        let vfs = self.core.vfs();
        let Some(root) = vfs.root().inode().map(|i| i.ino()) else {
            return false;
        };
        let mut v = Vec::new();
        let r = vfs
            .backend()
            .getxattr(root, dcache::xattr::POSIX_ACL_ACCESS, &mut v);
        !matches!(r, Err(Errno::EOPNOTSUPP | Errno::ENOSYS))
    }

    /// [`cred`](Self::cred) for a create, mkdir or mknod: with the
    /// request's umask when the kernel left it to us.
    /// The flags to open a file with for an OPEN or CREATE carrying
    /// `flags`. With a writeback cache the kernel reads pages to fill
    /// partial writes (on a write-only open too) and places appends
    /// itself, sending each write at its offset: so write-only opens are
    /// made read-write and O_APPEND is dropped (the kernel has checked the
    /// caller's open as asked: `writeback_cache` needs
    /// `default_permissions`).
    fn open_flags_for(&self, flags: u32) -> i32 {
        let mut f = flags as i32;
        if self.writeback {
            f &= !libc::O_APPEND;
            if f & libc::O_ACCMODE == libc::O_WRONLY {
                f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
            }
        }
        f
    }

    fn create_cred(&self, h: &Header, umask: u32) -> Cred {
        let cred = self.cred(h);
        if self.umask_here {
            cred.with_umask(umask as u16)
        } else {
            cred
        }
    }

    /// Queue an invalidation of node `id`'s entry in its parent (sent by
    /// the session's invalidator thread, outside any handler).
    fn invalidate_entry_of(&self, id: NodeId) {
        let (Some(tx), Some((parent, name))) = (self.inval.get(), self.core.parent_and_name(id))
        else {
            return;
        };
        let _ = tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(KernelInval::Entry { parent, name });
    }

    /// Every request: tell the poller (if any) that work arrived.
    #[inline]
    fn touch(&self) {
        if let Some(p) = self.poll.get() {
            p.touch();
        }
    }

    /// The live counts, shared (they stay readable after the fs is moved
    /// into a session).
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// End of session: record and log the report (once). The references
    /// every node holds are given back when the filesystem is dropped.
    pub fn finish(&self) {
        if self.report.get().is_some() {
            return;
        }
        let r = self.stats.report();
        let _ = self.report.set(r);
        if self.cfg.log {
            eprintln!("dcache: unmounted, {r}");
        }
    }

    /// How long the kernel may keep a name in `parent` without asking.
    /// When dcache checks permissions, a name in a directory not everyone
    /// may search is not kept at all: with `no_default_permissions` the
    /// kernel checks no search permission itself, so a name it cached for
    /// one caller would be served to another who may not search there;
    /// asking each time lets the LOOKUP check it for every caller.
    /// `open_parent`: everyone may search the directory (the core says so
    /// with each entry, from the node it already holds).
    fn entry_ttl(&self, open_parent: bool) -> Duration {
        if self.cfg.check_permissions && !open_parent {
            Duration::ZERO
        } else {
            self.cfg.timeouts.entry
        }
    }

    /// The entry record for `e`: the name kept for the entry timeout
    /// (none where the directory's searchers must be checked each time),
    /// the attributes for the attribute timeout.
    fn entry_out(&self, e: &Entry) -> abi::EntryOut {
        let (entry_valid, entry_valid_nsec) = secs(self.entry_ttl(e.open_parent));
        let (attr_valid, attr_valid_nsec) = secs(self.cfg.timeouts.attr);
        abi::EntryOut {
            nodeid: e.id,
            generation: GENERATION,
            entry_valid,
            attr_valid,
            entry_valid_nsec,
            attr_valid_nsec,
            attr: file_attr(&e.attr),
        }
    }

    fn reply_entry(&self, out: &mut Out, r: Result<Entry>) {
        match r {
            Ok(e) => {
                out.push(&self.entry_out(&e));
                self.bound_kernel_nodes();
            }
            Err(e) => out.error(e.raw()),
        }
    }

    /// An entry and an open file (CREATE, TMPFILE).
    fn reply_created(&self, out: &mut Out, r: Result<(Entry, Fh)>) {
        match r {
            Ok((e, fh)) if self.core.no_open() => {
                // The kernel sends no RELEASE for files it has stopped
                // opening through us, created ones included: the file
                // becomes the node's own, and the reply names handle 0, as
                // every I/O on such files does.
                self.core.adopt_implicit(e.id, fh);
                out.push(&self.entry_out(&e));
                out.push(&abi::OpenOut::default());
                self.bound_kernel_nodes();
            }
            Ok((e, fh)) => {
                out.push(&self.entry_out(&e));
                out.push(&self.open_out(fh));
                self.bound_kernel_nodes();
            }
            Err(e) => out.error(e.raw()),
        }
    }

    /// The OPEN reply for a file just opened as `fh`: with a backing file
    /// when passthrough I/O is on and the backend has one.
    fn open_out(&self, fh: Fh) -> abi::OpenOut {
        let id = self
            .notifier
            .get()
            .and_then(|n| self.backing.open(n.dev(), &self.core, fh));
        let mut open_flags = self.open_flags();
        if self.noflush_files && !self.core.flush_needed(fh) {
            open_flags |= abi::FOPEN_NOFLUSH;
        }
        match id {
            Some(id) => abi::OpenOut {
                fh: fh.raw(),
                open_flags: open_flags | abi::FOPEN_PASSTHROUGH,
                backing_id: id,
            },
            None => abi::OpenOut {
                fh: fh.raw(),
                open_flags,
                backing_id: 0,
            },
        }
    }

    fn attr_out(&self, out: &mut Out, a: &Attr) {
        let (attr_valid, attr_valid_nsec) = secs(self.cfg.timeouts.attr);
        out.push(&abi::AttrOut {
            attr_valid,
            attr_valid_nsec,
            dummy: 0,
            attr: file_attr(a),
        });
    }

    fn open_flags(&self) -> u32 {
        if self.cfg.direct_io {
            abi::FOPEN_DIRECT_IO
        } else {
            0
        }
    }
}

impl Drop for DcacheFs {
    fn drop(&mut self) {
        // Without a session end (no destroy) there is nothing to report.
        if let Some(p) = self.poll.get() {
            p.stop();
        }
        self.core.release();
    }
}

impl Handler for DcacheFs {
    fn init(&mut self, offered: u64) -> u64 {
        // Lookups and readdirs in one directory need not be serialised by
        // the kernel: the dcache takes its own locks.
        let mut want = init::PARALLEL_DIROPS;
        if self.cfg.readdirplus {
            want |= init::DO_READDIRPLUS | init::READDIRPLUS_AUTO;
        }
        // A backend whose files change underneath us (passthrough): when an
        // attribute reply shows a new mtime or size, the kernel drops the
        // node's cached pages (one node per inode: for every name at once).
        if self.core.vfs().backend().needs_revalidate() {
            want |= init::AUTO_INVAL_DATA;
        }
        // POSIX ACLs: FUSE_POSIX_ACL makes the kernel check them with
        // default_permissions (reading them with GETXATTR; dcache checks
        // them without) and stop the VFS's umask; FUSE_DONT_MASK stops
        // FUSE's own. Both are needed for the umask to reach us with each
        // create, so that a default ACL replaces it as on tmpfs.
        // Only for a backend that keeps attributes: Linux gives a
        // filesystem without them no ACLs (and its kernel would fail every
        // check that reads one with the backend's EOPNOTSUPP).
        if self.cfg.posix_acl && self.cfg.xattr && self.backend_has_acls() {
            want |= init::POSIX_ACL | init::DONT_MASK;
        }
        // Passthrough I/O: only where the backend keeps host files, and not
        // around the page cache (the kernel refuses FOPEN_DIRECT_IO with
        // a backing file).
        // And only for a daemon the kernel lets register backing files
        // (CAP_SYS_ADMIN): asked for in vain, it would cost
        // HANDLE_KILLPRIV_V2 below.
        let host_files = self.core.vfs().backend().has_host_files();
        let may_register = backing::may_register();
        // A writeback cache: the kernel keeps written pages and sends
        // them later, merged. Linux does not combine it with passthrough
        // I/O (it would refuse the backing files).
        if self.cfg.writeback_cache {
            want |= init::WRITEBACK_CACHE;
        } else if self.cfg.passthrough_io && host_files && !self.cfg.direct_io && may_register {
            want |= init::PASSTHROUGH;
        }
        // Zero-trip opens: when the kernel checks permissions itself (with
        // no_default_permissions the open is where dcache checks them),
        // directories are opened without asking, and so are files of a
        // backend whose handles carry no state (I/O without a handle then
        // goes to one the daemon keeps per node, for as long as the kernel
        // holds the node: `FuseCore::implicit_file`).
        let backend = self.core.vfs().backend();
        // Locks kept by the backend: the kernel sends GETLK/SETLK/SETLKW,
        // a FLUSH with the owner at each close (a process's POSIX locks
        // go) and a RELEASE at the last (its open file's flock and OFD
        // locks go). So files must be opened through us (a file the
        // kernel opens without asking gets no RELEASE) and FLUSH must
        // keep coming.
        let locks = match (self.cfg.locks, backend.lock_scope()) {
            (_, LockScope::None) | (Some(false), _) => false,
            (Some(true), _) | (None, LockScope::Shared) => true,
            (None, LockScope::Local) => false,
        };
        if locks {
            want |= init::POSIX_LOCKS | init::FLOCK_LOCKS;
        }
        if self.cfg.zero_trip_open && !self.cfg.check_permissions {
            want |= init::NO_OPENDIR_SUPPORT;
            if !backend.needs_open() && !locks {
                want |= init::NO_OPEN_SUPPORT;
            }
        }
        // A symlink's target never changes (a new target is a new inode).
        want |= init::CACHE_SYMLINKS;
        // Set-id bits: the kernel tells us who wrote or truncated, and we
        // drop them by Linux's own rule (its FUSE code without this drops
        // S_ISGID only when group-executable). Not with passthrough I/O:
        // the kernel then writes the backing file itself and would leave
        // the dropping to a WRITE that never comes.
        if self.cfg.killpriv && want & offered & init::PASSTHROUGH == 0 {
            want |= init::HANDLE_KILLPRIV_V2;
        }
        // O_TRUNC in the OPEN rather than a SETATTR first (not with
        // no-open, where the kernel would then truncate nothing).
        if want & init::NO_OPEN_SUPPORT == 0 {
            want |= init::ATOMIC_O_TRUNC;
        }
        // Ask only for what this kernel offers.
        let got = want & offered;
        let locks_on = got & (init::POSIX_LOCKS | init::FLOCK_LOCKS) != 0;
        self.no_flush = !backend.flush_on_close() && !locks_on;
        // Per file where the backend knows (a passthrough file on tmpfs or
        // ext4 has nothing to flush, one on NFS has): not with locks, whose
        // FLUSH carries the closer's lock owner, nor with the writeback
        // cache, where the kernel ignores the flag.
        self.noflush_files = !self.no_flush && !locks_on && got & init::WRITEBACK_CACHE == 0;
        if locks_on {
            // Other hosts write the files of a shared backend: a lock
            // taken drops the kernel's cached pages first, unless the
            // kernel caches none (direct_io).
            let coherent = backend.lock_scope() == LockScope::Shared && !self.cfg.direct_io;
            self.locks = Some(crate::locks::LockWaits::new(
                backend.clone(),
                coherent,
                self.inval.clone(),
            ));
        }
        if self.cfg.log && locks && !locks_on {
            eprintln!(
                "dcache: locks local to this host (the kernel does not offer FUSE_POSIX_LOCKS)"
            );
        }
        self.no_opendir = got & init::NO_OPENDIR_SUPPORT != 0;
        if got & init::NO_OPEN_SUPPORT != 0 {
            self.core.set_no_open();
        }
        if got & init::PASSTHROUGH != 0 {
            self.backing.enable();
        }
        if self.cfg.log && host_files {
            let why = if !self.cfg.passthrough_io {
                "off (-o no_passthrough_io)"
            } else if self.cfg.writeback_cache {
                "off (writeback_cache)"
            } else if self.cfg.direct_io {
                "off (direct_io)"
            } else if !may_register {
                "off (the kernel registers backing files only for a daemon with CAP_SYS_ADMIN)"
            } else if got & init::PASSTHROUGH == 0 {
                "off (the kernel does not offer FUSE_PASSTHROUGH)"
            } else {
                "on"
            };
            eprintln!("dcache: passthrough I/O {why}");
        }
        let both = init::DONT_MASK | init::POSIX_ACL;
        self.umask_here = got & both == both;
        self.acls_hidden = got & init::POSIX_ACL == 0 && self.backend_has_acls();
        self.writeback = got & init::WRITEBACK_CACHE != 0;
        if self.cfg.log && self.cfg.writeback_cache {
            let how = if self.writeback {
                "on"
            } else {
                "off (the kernel does not offer FUSE_WRITEBACK_CACHE)"
            };
            eprintln!("dcache: writeback cache {how}");
        }
        if self.cfg.log && self.acls_hidden {
            let why = if !self.cfg.xattr {
                "-o no_xattr"
            } else if self.cfg.posix_acl {
                "the kernel does not offer FUSE_POSIX_ACL"
            } else {
                "-o no_posix_acl"
            };
            eprintln!("dcache: POSIX ACLs off ({why}): ACL attributes answer EOPNOTSUPP");
        }
        got
    }

    // Out of line: one call per request, which scripts/fuse-callgrind.sh
    // counts requests by (a few instructions of some 1,600).
    #[inline(never)]
    fn handle(&self, req: &Request<'_>, out: &mut Out) {
        self.touch();
        self.answer(req, out);
    }
}

mod requests;
