//! `DcacheFs`: the object fuser drives, a thin adapter over
//! [`FuseCore`]: each request is one call and one reply. This is the trust
//! boundary: node ids and file handles become [`NodeId`] and [`Fh`] only
//! here, where fuser hands over what the kernel sent.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use fuser::{CopyFileRangeFlags, ReplyLseek};

use dcache::cred::{Caps, Cred};
use dcache::errno::{Errno, Result};
use dcache::permission::search_for_all;
use dcache::Invalidation;
use dcache::Vfs;

use super::attr::{file_attr, kind, negative, set_attr};
use super::core::{xattr_cred, Entry, FuseCore, XattrReply};
use super::handles::Fh;
use super::nodes::NodeId;
use super::options::Timeouts;
use super::poll::Poller;
use super::stats::{Report, Stats};

/// The generation of every entry. A node id is an inode number, which
/// memfs and kernfs never reuse; passthrough's are the host's, and a host
/// number reused for a new file while the backend still holds the old one
/// (as it does while the kernel holds its node) gets a number of its own.
const GENERATION: Generation = Generation(0);

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
    /// dcache checks permissions itself (`-o no_default_permissions`);
    /// otherwise the kernel has, and requests carry every capability.
    pub check_permissions: bool,
    /// Print the unmount report on stderr.
    pub log: bool,
    /// The most nodes the kernel may hold before the daemon asks it to
    /// drop some (`-o max_nodes`, see `fs/budget.rs`); 0: no bound.
    pub max_nodes: usize,
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
    /// When the kernel may next be asked to drop nodes.
    budget: budget::NodeBudget,
}

mod budget;

/// Something the kernel's cache for this mount must drop, sent to it by the
/// session's invalidator thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelInval {
    /// The entry `name` under node `parent` (`FUSE_NOTIFY_INVAL_ENTRY`).
    Entry {
        /// The directory's node id.
        parent: u64,
        /// The name.
        name: Vec<u8>,
    },
    /// Node `node`'s attributes and cached data (`FUSE_NOTIFY_INVAL_INODE`).
    Inode {
        /// The node id.
        node: u64,
    },
}

/// Where the session puts the sender of its invalidator thread.
pub type InvalSlot = Arc<OnceLock<Mutex<Sender<KernelInval>>>>;

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw())
}

/// The node a request names.
fn node(ino: INodeNo) -> NodeId {
    // SAFETY: fuser hands us the node id of a request the kernel sent, and
    // the kernel keeps that node until the request is answered.
    unsafe { NodeId::from_kernel(ino.0) }
}

/// The file handle a request names.
fn handle(fh: FileHandle) -> Fh {
    // SAFETY: fuser hands us the handle of a request the kernel sent: one
    // we returned from open or create and that it has not released (its
    // RELEASE comes once, after every other request on the handle).
    unsafe { Fh::from_kernel(fh.0) }
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
            budget: budget::NodeBudget::new(),
        }
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
    fn cred(&self, req: &Request) -> Cred {
        let caps = if !self.cfg.check_permissions || req.uid() == 0 {
            Caps::ALL
        } else {
            Caps::NONE
        };
        Cred::of_task(req.uid(), req.gid(), req.pid(), caps)
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
    fn create_cred(&self, req: &Request, umask: u32) -> Cred {
        let cred = self.cred(req);
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

    /// End of session: record and log the report, then give back every
    /// node's reference and the root's.
    fn finish(&mut self) {
        if self.report.get().is_some() {
            return;
        }
        let r = self.stats.report();
        let _ = self.report.set(r);
        if self.cfg.log {
            eprintln!("dcache: unmounted, {r}");
        }
        self.core.release();
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

    fn reply_entry(&self, reply: ReplyEntry, r: Result<Entry>) {
        match r {
            Ok(e) => {
                reply.entry_with_ttls(
                    &self.cfg.timeouts.attr,
                    &self.entry_ttl(e.open_parent),
                    &file_attr(&e.attr),
                    GENERATION,
                );
                self.bound_kernel_nodes();
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn reply_empty(reply: ReplyEmpty, r: Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open_flags(&self) -> FopenFlags {
        if self.cfg.direct_io {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
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

impl Filesystem for DcacheFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Lookups and readdirs in one directory need not be serialised by
        // the kernel: the dcache takes its own locks.
        let mut want = InitFlags::FUSE_PARALLEL_DIROPS;
        if self.cfg.readdirplus {
            want |= InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO;
        }
        // A backend whose files change underneath us (passthrough): when an
        // attribute reply shows a new mtime or size, the kernel drops the
        // node's cached pages (one node per inode: for every name at once).
        if self.core.vfs().backend().needs_revalidate() {
            want |= InitFlags::FUSE_AUTO_INVAL_DATA;
        }
        // POSIX ACLs: FUSE_POSIX_ACL makes the kernel check them with
        // default_permissions (reading them with GETXATTR; dcache checks
        // them without) and stop the VFS's umask; FUSE_DONT_MASK stops
        // FUSE's own. Both are needed for the umask to reach us with each
        // create, so that a default ACL replaces it as on tmpfs.
        // Only for a backend that keeps attributes: Linux gives a
        // filesystem without them no ACLs (and its kernel would fail every
        // check that reads one with the backend's EOPNOTSUPP).
        if self.backend_has_acls() {
            want |= InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
        }
        // Ask only for what this kernel offers.
        let got = want & config.capabilities();
        self.umask_here = got.contains(InitFlags::FUSE_DONT_MASK | InitFlags::FUSE_POSIX_ACL);
        let _ = config.add_capabilities(got);
        Ok(())
    }

    fn destroy(&mut self) {
        self.finish();
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.touch();
        match self
            .core
            .lookup(&self.cred(req), node(parent), name.as_bytes())
        {
            Ok(Some(e)) => self.reply_entry(reply, Ok(e)),
            Ok(None)
                if !self.cfg.timeouts.negative.is_zero()
                    && !self
                        .entry_ttl(self.core.searchable_by_all(node(parent)))
                        .is_zero() =>
            {
                reply.entry_with_ttls(
                    &Duration::ZERO,
                    &self.cfg.timeouts.negative,
                    &negative(),
                    GENERATION,
                )
            }
            Ok(None) => reply.error(fuser::Errno::ENOENT),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.touch();
        self.core.forget(node(ino), nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.touch();
        match self.core.getattr(node(ino)) {
            Ok(a) => reply.attr(&self.cfg.timeouts.attr, &file_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.touch();
        // A handle (ftruncate, futimens) names the same node: the change
        // goes to the node either way.
        let set = set_attr(mode, uid, gid, size, atime, mtime);
        // A directory that stops being searchable by everyone: the kernel
        // may still hold names under it with their timeouts, which it would
        // serve to callers who may no longer search there (it checks no
        // search permission itself under no_default_permissions). Ask it to
        // drop the directory's entry, and with it the subtree.
        let watch = self.cfg.check_permissions
            && set.perm.is_some()
            && self.core.searchable_by_all(node(ino));
        match self
            .core
            .setattr(&self.cred(req), node(ino), &set, _fh.is_some())
        {
            Ok(a) => {
                reply.attr(&self.cfg.timeouts.attr, &file_attr(&a));
                if watch && !search_for_all(a.mode()) {
                    self.invalidate_entry_of(node(ino));
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.touch();
        match self.core.readlink(node(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.touch();
        let r = self.core.mknod(
            &self.create_cred(req, umask),
            node(parent),
            name.as_bytes(),
            mode,
            rdev,
        );
        self.reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.touch();
        let r = self.core.mkdir(
            &self.create_cred(req, umask),
            node(parent),
            name.as_bytes(),
            mode,
        );
        self.reply_entry(reply, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.touch();
        Self::reply_empty(
            reply,
            self.core
                .unlink(&self.cred(req), node(parent), name.as_bytes()),
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.touch();
        Self::reply_empty(
            reply,
            self.core
                .rmdir(&self.cred(req), node(parent), name.as_bytes()),
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.touch();
        let r = self.core.symlink(
            &self.cred(req),
            node(parent),
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
        );
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.touch();
        let r = self.core.rename(
            &self.cred(req),
            node(parent),
            name.as_bytes(),
            node(newparent),
            newname.as_bytes(),
            flags.bits(),
        );
        Self::reply_empty(reply, r);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.touch();
        let r = self.core.link(
            &self.cred(req),
            node(ino),
            node(newparent),
            newname.as_bytes(),
        );
        self.reply_entry(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.touch();
        match self.core.open(&self.cred(req), node(ino), flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh.raw()), self.open_flags()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.touch();
        match self.core.read(handle(fh), offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.touch();
        match self.core.write(handle(fh), offset, data) {
            // A write never exceeds max_write (16 MiB), so the count fits.
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.touch();
        Self::reply_empty(reply, self.core.flush(handle(fh)));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.touch();
        Self::reply_empty(reply, self.core.release_file(handle(fh)));
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.touch();
        Self::reply_empty(reply, self.core.fsync(handle(fh), datasync));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.touch();
        if !self.cfg.check_permissions {
            // The kernel checked; nothing to keep per open directory.
            reply.opened(FileHandle(0), FopenFlags::empty());
            return;
        }
        match self.core.opendir(&self.cred(req), node(ino), flags.0) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.touch();
        let r = self
            .core
            .readdir(node(ino), offset, &mut |i, off, k, name| {
                reply.add(INodeNo(i), off, kind(k), OsStr::from_bytes(name))
            });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.touch();
        let (attr_ttl, entry_ttl) = (
            self.cfg.timeouts.attr,
            self.entry_ttl(self.core.searchable_by_all(node(ino))),
        );
        // fuser sends one timeout per entry for both the name and the
        // attributes: the shorter one keeps both promises.
        let ttl = attr_ttl.min(entry_ttl);
        let r = self
            .core
            .readdirplus(node(ino), offset, &mut |id, off, name, a| {
                reply.add(
                    INodeNo(id),
                    off,
                    OsStr::from_bytes(name),
                    &ttl,
                    &file_attr(a),
                    GENERATION,
                )
            });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
        self.bound_kernel_nodes();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.touch();
        // Directory changes are made in the backend as they happen.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.touch();
        match self.core.statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.touch();
        let r = self.core.access(&self.cred(req), node(ino), mask.bits());
        Self::reply_empty(reply, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.touch();
        match self.core.create(
            &self.create_cred(req, umask),
            node(parent),
            name.as_bytes(),
            mode,
            flags,
        ) {
            // fuser sends one timeout for the name and the attributes.
            Ok((e, fh)) => reply.created(
                &self.entry_ttl(e.open_parent).min(self.cfg.timeouts.attr),
                &file_attr(&e.attr),
                GENERATION,
                FileHandle(fh.raw()),
                self.open_flags(),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    // Extended attributes (see `core::xattr`): a size of 0 asks for the
    // length, a short buffer is ERANGE.

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.touch();
        let cred = xattr_cred(req.uid(), req.gid(), req.pid(), self.cfg.check_permissions);
        match self.core.getxattr(&cred, node(ino), name.as_bytes(), size) {
            Ok(XattrReply::Size(n)) => reply.size(n),
            Ok(XattrReply::Data(d)) => reply.data(&d),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.touch();
        let cred = xattr_cred(req.uid(), req.gid(), req.pid(), self.cfg.check_permissions);
        match self.core.listxattr(&cred, node(ino), size) {
            Ok(XattrReply::Size(n)) => reply.size(n),
            Ok(XattrReply::Data(d)) => reply.data(&d),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.touch();
        let cred = xattr_cred(req.uid(), req.gid(), req.pid(), self.cfg.check_permissions);
        let r = self
            .core
            .setxattr(&cred, node(ino), name.as_bytes(), value, flags);
        Self::reply_empty(reply, r);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.touch();
        let cred = xattr_cred(req.uid(), req.gid(), req.pid(), self.cfg.check_permissions);
        let r = self.core.removexattr(&cred, node(ino), name.as_bytes());
        Self::reply_empty(reply, r);
    }

    // File operations beyond read and write. Answering these (rather than
    // fuser's ENOSYS) keeps the kernel asking: an ENOSYS to LSEEK makes it
    // treat every file as all data, one to FALLOCATE or COPY_FILE_RANGE
    // makes it answer EOPNOTSUPP (or copy through the page cache) for the
    // rest of the mount.

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.touch();
        let r = self.core.fallocate(handle(fh), offset, length, mode);
        Self::reply_empty(reply, r);
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.touch();
        match self.core.lseek(handle(fh), offset, whence) {
            Ok(at) => reply.offset(at),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.touch();
        let r = self.core.copy_file_range(
            handle(fh_in),
            offset_in,
            handle(fh_out),
            offset_out,
            len,
            flags.bits(),
        );
        match r {
            // At most MAX_COPY bytes, which fit.
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(errno(e)),
        }
    }
}
