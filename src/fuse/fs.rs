//! `DcacheFs`: the object fuser drives. It owns the `Vfs`; each request is
//! one call into [`super::ops`] and one reply.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow, WriteFlags,
};

use crate::errno::{Errno, Result};
use crate::fs::Ctx;
use crate::Vfs;

use super::attr::{file_attr, kind, negative, set_attr};
use super::handles::Handles;
use super::nodes::Nodes;
use super::ops::Entry;
use super::options::Timeouts;
use super::poll::Poller;
use super::stats::{Report, Stats};

/// Node ids are never reused while the kernel may hold them, so one
/// generation number serves.
const GENERATION: Generation = Generation(0);

/// Per-mount behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsConfig {
    pub timeouts: Timeouts,
    /// Advertise READDIRPLUS (entries come with attributes and references).
    pub readdirplus: bool,
    /// Open files with FOPEN_DIRECT_IO (reads and writes bypass the page
    /// cache: right for generated files whose size is not their length).
    pub direct_io: bool,
    /// Print the unmount report on stderr.
    pub log: bool,
}

/// The FUSE filesystem: a `Vfs` plus the node-id and handle bookkeeping.
pub struct DcacheFs {
    pub(crate) nodes: Nodes,
    pub(crate) handles: Handles,
    stats: Arc<Stats>,
    cfg: FsConfig,
    report: Arc<OnceLock<Report>>,
    /// Set once the session is mounted, if it busy-polls (`poll_us`).
    poll: Arc<OnceLock<Arc<Poller>>>,
    /// Declared last: dropped after `Drop::drop` gave back our references.
    pub(crate) vfs: Vfs,
}

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw())
}

fn ctx(req: &Request) -> Ctx {
    Ctx {
        uid: req.uid(),
        gid: req.gid(),
    }
}

impl DcacheFs {
    pub fn new(vfs: Vfs, cfg: FsConfig) -> DcacheFs {
        let stats = Arc::new(Stats::default());
        DcacheFs {
            nodes: Nodes::new(&vfs, stats.clone()),
            handles: Handles::new(stats.clone()),
            stats,
            cfg,
            report: Arc::new(OnceLock::new()),
            poll: Arc::new(OnceLock::new()),
            vfs,
        }
    }

    pub fn vfs(&self) -> &Vfs {
        &self.vfs
    }

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

    /// End of session: record and log the report, give back the root.
    /// References the kernel still holds cannot be found without a node
    /// table (by design there is none), so they are not dropped one by one:
    /// the Vfs teardown frees every hashed dentry regardless of its count.
    /// Only an unhashed dentry the kernel still held (a file unlinked while
    /// it was open or cached) stays allocated, until the process exits.
    fn finish(&mut self) {
        if self.report.get().is_some() {
            return;
        }
        let r = self.stats.report();
        let _ = self.report.set(r);
        if self.cfg.log {
            eprintln!("dcache: unmounted, {r}");
        }
        self.nodes.release(&self.vfs);
    }

    fn reply_entry(&self, reply: ReplyEntry, r: Result<Entry>) {
        match r {
            Ok((id, a)) => reply.entry_with_ttls(
                &self.cfg.timeouts.attr,
                &self.cfg.timeouts.entry,
                &file_attr(id, &a),
                GENERATION,
            ),
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
        self.nodes.release(&self.vfs);
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
        // Ask only for what this kernel offers.
        let _ = config.add_capabilities(want & config.capabilities());
        Ok(())
    }

    fn destroy(&mut self) {
        self.finish();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.touch();
        match self.do_lookup(parent.0, name.as_bytes()) {
            Ok(Some(e)) => self.reply_entry(reply, Ok(e)),
            Ok(None) if !self.cfg.timeouts.negative.is_zero() => reply.entry_with_ttls(
                &Duration::ZERO,
                &self.cfg.timeouts.negative,
                &negative(),
                GENERATION,
            ),
            Ok(None) => reply.error(fuser::Errno::ENOENT),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.touch();
        self.do_forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.touch();
        match self.do_getattr(ino.0) {
            Ok(a) => reply.attr(&self.cfg.timeouts.attr, &file_attr(ino.0, &a)),
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
        match self.do_setattr(ino.0, &set, ctx(req)) {
            Ok(a) => reply.attr(&self.cfg.timeouts.attr, &file_attr(ino.0, &a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.touch();
        match self.do_readlink(ino.0) {
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
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.touch();
        let r = self.do_mknod(parent.0, name.as_bytes(), mode, rdev, ctx(req));
        self.reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.touch();
        let r = self.do_mkdir(parent.0, name.as_bytes(), mode, ctx(req));
        self.reply_entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.touch();
        Self::reply_empty(reply, self.do_unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.touch();
        Self::reply_empty(reply, self.do_rmdir(parent.0, name.as_bytes()));
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
        let r = self.do_symlink(
            parent.0,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            ctx(req),
        );
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.touch();
        let r = self.do_rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags.bits(),
        );
        Self::reply_empty(reply, r);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.touch();
        let r = self.do_link(ino.0, newparent.0, newname.as_bytes());
        self.reply_entry(reply, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.touch();
        match self.do_open(ino.0, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags()),
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
        match self.do_read(fh.0, offset, size) {
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
        match self.do_write(fh.0, offset, data) {
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
        Self::reply_empty(reply, self.do_flush(fh.0));
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
        Self::reply_empty(reply, self.do_release(fh.0));
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
        Self::reply_empty(reply, self.do_fsync(fh.0, datasync));
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
        let r = self.do_readdir(ino.0, offset, &mut |i, off, k, name| {
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
        let (attr_ttl, entry_ttl) = (self.cfg.timeouts.attr, self.cfg.timeouts.entry);
        // fuser sends one timeout per entry for both the name and the
        // attributes: the shorter one keeps both promises.
        let ttl = attr_ttl.min(entry_ttl);
        let r = self.do_readdirplus(ino.0, offset, &mut |id, off, name, a| {
            reply.add(
                INodeNo(id),
                off,
                OsStr::from_bytes(name),
                &ttl,
                &file_attr(id, a),
                GENERATION,
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
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
        match self.do_statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.touch();
        let r = self.do_access(ino.0, req.uid(), req.gid(), req.pid(), mask.bits());
        Self::reply_empty(reply, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.touch();
        match self.do_create(parent.0, name.as_bytes(), mode, flags, ctx(req)) {
            // fuser sends one timeout for the name and the attributes.
            Ok(((id, a), fh)) => reply.created(
                &self.cfg.timeouts.entry.min(self.cfg.timeouts.attr),
                &file_attr(id, &a),
                GENERATION,
                FileHandle(fh),
                self.open_flags(),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }
}
