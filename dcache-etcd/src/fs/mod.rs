//! `EtcdFs`: the [`FileSystem`] over etcd.
//!
//! Every operation that changes more than one key is one etcd transaction
//! whose compares (`mod_revision` of every record it read, `version == 0`
//! for every key it expects absent) make it apply only to the state it was
//! computed from; on a failed compare it reads again and recomputes, so two
//! clients racing on one name get the outcomes one machine would give.
//!
//! Each transaction also writes a marker key of the client's,
//! `P/o/<client>/m/<lane>`, with a fresh sequence number: when a response
//! is lost (a member died after the commit), reading the marker tells
//! whether the transaction applied, so a retry never reports EEXIST for a
//! create that succeeded. The lane is held by the commit until it is
//! resolved, so no concurrent commit of the same client overwrites it.
//!
//! This file holds [`EtcdFs`] (its public methods, teardown) and its
//! [`FileSystem`] impl; `connect` makes one; the work is done by `Inner`, whose methods are
//! split by idea: `client` (request plumbing: read, commit, retries),
//! `namespace` (lookup, create, remove, link, rename), `data` (setattr,
//! file contents, readdir, statfs), `xattr` (extended attributes, kept
//! in the inode record), `lease` (the session lease and record),
//! `background` (fences, watch, endpoint health), and for volumes whose
//! data is in an object store `buffer` (the store, write buffers, read
//! cache), `objdata` (buffered writes, flushes, commits), `objread`
//! (reads, truncation, punching, seeking) and `collect` (deleting
//! garbage after the grace period).

mod background;
mod buffer;
mod client;
mod collect;
mod connect;
mod data;
mod diskcache;
mod lease;
mod lists;
mod locks;
mod lru;
mod namespace;
mod objdata;
mod objread;
mod opens;
mod readpattern;
mod tallies;
mod xattr;

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dcache::fs::{StatFs, Validity};
use dcache::{Attr, Ctx, DirEntry, Errno, FileSystem, FileType, Ino, RenameFlags, Result, SetAttr};
use etcd_client::{Client, GetOptions};
use tokio::runtime::Runtime;

use crate::cache::{Cache, CacheStats};
use crate::codec::{Keys, DIRENT, ROOT_INO};
use crate::spec::Options;
use crate::volume::Volume;
use client::{check_name, get};
use objdata::Report;
use objread::Edit;

/// Inode numbers a client reserves at a time.
const INO_BATCH: u64 = 64;
/// etcd's default backend quota (`--quota-backend-bytes`), reported by
/// statfs.
pub const DEFAULT_QUOTA: u64 = 2 << 30;

/// A namespace held in etcd, served to a [`dcache::Vfs`].
pub struct EtcdFs {
    inner: Arc<Inner>,
    rt: Option<Runtime>,
    volume: Volume,
}

struct Inner {
    client: Client,
    keys: Keys,
    opts: Options,
    client_id: String,
    cache: Cache,
    op_seq: AtomicU64,
    pool: Mutex<(u64, u64)>,
    rng: AtomicU64,
    /// Set once a Vfs attaches: where the watch sends the changes other
    /// clients made, for the thread that reports them to the Vfs.
    inval: OnceLock<std::sync::mpsc::Sender<Change>>,
    /// The invalidator of the Vfs attached last, which that thread uses.
    attached: Arc<Mutex<Option<dcache::Invalidator>>>,
    /// The session lease the marker and session record are put on.
    lease: AtomicI64,
    /// Told when a commit finds the lease gone: the lease task renews it.
    lease_gone: tokio::sync::Notify,
    /// Told by a fence the watch has not caught up with: the watch task
    /// sends a progress request (only when `progress_trusted`).
    progress_wanted: tokio::sync::Notify,
    /// Every member given reports an etcd version that orders progress
    /// notifications with events (`crate::progress`).
    progress_trusted: bool,
    /// The etcd cluster's id and each endpoint's version, as their status
    /// answered at connect (`None`: it did not answer).
    cluster_id: u64,
    versions: Vec<Option<String>>,
    /// Waiters for a lock on an inode to go (`locks`): woken by the
    /// watch's lock events and by this client's own releases.
    lock_wakers: dcache::fs::lock::UnlockWakers,
    /// The revision up to which the watch has handed other clients'
    /// changes to the report thread (`locks`: a granted lock waits for
    /// it).
    reported: AtomicI64,
    /// Told whenever `reported` moves.
    reported_moved: tokio::sync::Notify,
    /// The object store of a volume whose data is kept there (`None`:
    /// inline in etcd).
    objects: OnceLock<buffer::Objects>,
    /// Since when (`cache.now_ns`) no member has answered a health probe;
    /// 0 while one does (`health_loop`).
    silent_since: AtomicU64,
    /// The inodes this client has open, and their records (`opens`).
    opens: opens::OpenFiles,
    /// This client's tally lanes (`tallies`).
    lanes: tallies::Lanes,
    /// The lock records this client holds (`locks`).
    held: locks::HeldKeys,
    /// Its commit-marker lanes (`client::commit_seq`): a pool of their
    /// own, so that an operation's commit does not take a second tally
    /// lane and double the tallies a directory gets from each client.
    marker_lanes: tallies::Lanes,
}

impl Inner {
    /// The file is not what a caller that caches it believes (an O_APPEND
    /// write went elsewhere than its offset, bytes it wrote were dropped):
    /// a kernel's pages and size are dropped through the report thread,
    /// as for another client's change.
    fn stale_for_caller(&self, ino: Ino) {
        if let Some(tx) = self.inval.get() {
            let _ = tx.send(Change::Inode(ino));
        }
    }
}

/// A change another client made, as the watch saw it.
enum Change {
    Entry(Ino, Vec<u8>),
    Inode(Ino),
    /// Told once every change sent before it was reported (`locks`).
    Barrier(tokio::sync::oneshot::Sender<()>),
}

impl EtcdFs {
    fn block<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        match &self.rt {
            Some(rt) => run_on(rt, f),
            None => unreachable!("the runtime lives until drop"),
        }
    }

    /// This client's id (its session record and marker key are named by
    /// it).
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The volume this client joined: its record, prefix and the etcd
    /// cluster's id (`Display`: `volume UUID (prefix P) from etcd cluster
    /// ID`).
    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    /// The id of this client's session lease (it changes when an expired
    /// lease is replaced).
    pub fn lease_id(&self) -> i64 {
        self.inner.lease_id()
    }

    /// The etcd cluster's id (0 if no member answered a status request at
    /// connect).
    pub fn cluster_id(&self) -> u64 {
        self.inner.cluster_id
    }

    /// Each endpoint's etcd version at connect (`None`: no answer).
    pub fn server_versions(&self) -> &[Option<String>] {
        &self.inner.versions
    }

    /// Whether progress notifications are trusted to tell that the watch
    /// is current (every member runs an etcd that orders them with events,
    /// see [`crate::progress`]); otherwise only the watch's own events do.
    pub fn trusts_progress(&self) -> bool {
        self.inner.progress_trusted
    }

    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Cache counters.
    pub fn stats(&self) -> &CacheStats {
        &self.inner.cache.stats
    }

    /// Whether cached answers are being served without asking etcd (the
    /// watch is within the staleness bound).
    pub fn is_current(&self) -> bool {
        self.inner.cache.fresh()
    }

    /// How long ago the watch was last known to be current.
    pub fn watch_lag(&self) -> Option<Duration> {
        self.inner.cache.lag()
    }

    /// The committed attributes (what other clients see).
    fn getattr_committed(&self, ino: Ino) -> Result<Attr> {
        let i = &self.inner;
        if let Some(a) = i.cache.attr(ino) {
            return Ok(a);
        }
        i.cache.stats.attr_misses.fetch_add(1, Ordering::Relaxed);
        match self.block(async { i.fetch(i.deadline(), ino).await.map(|r| r.attr(ino)) }) {
            // Removed since the caller's dentry was validated: its last
            // attributes with nlink 0, as a stat racing an unlink gets on
            // Linux, rather than ENOENT for a name that was there.
            Err(Errno::ENOENT) => i.cache.last_known(ino).ok_or(Errno::ENOENT),
            r => r,
        }
    }

    /// `a` with this client's buffered writes: the size they reach and
    /// the time of the last.
    fn with_pending(&self, mut a: Attr) -> Attr {
        if let Some(o) = self.inner.objects.get() {
            if let Some((end, mtime)) = o.pending(a.ino) {
                a.size = a.size.max(end);
                if let Some(t) = mtime {
                    a.mtime = t;
                    a.ctime = t;
                }
            }
        }
        a
    }

    /// Object-store volumes: run the collector once now (objects past
    /// the grace period deleted); how many objects it deleted.
    pub fn collect_garbage(&self) -> Result<u64> {
        if self.inner.objects.get().is_none() {
            return Ok(0);
        }
        self.block(self.inner.collect_once())
    }

    /// A write at `offset`, or with `append` at the end of the file as
    /// committed; a caller that caches the file is told when the bytes
    /// went elsewhere than it asked.
    fn write_where(&self, ino: Ino, offset: u64, append: bool, data: &[u8]) -> Result<usize> {
        let i = &self.inner;
        let (n, at) = self.block(async {
            if i.objects.get().is_none() {
                return i.write(ino, offset, append, data).await;
            }
            // The caller's offset counts too: on this host it is past the
            // bytes of a flush still committing (which neither the buffer
            // nor etcd shows yet), as a kernel serialises its appends.
            let at = match append {
                true => i.append_at(ino).await?.max(offset),
                false => offset,
            };
            Ok((i.obj_write(ino, at, data).await?, at))
        })?;
        if at != offset {
            i.stale_for_caller(ino);
        }
        Ok(n)
    }

    /// Commit what this client buffered for `ino`. A file removed
    /// meanwhile (by any client) has nothing to commit to: its bytes are
    /// dropped and `close` succeeds, as on Linux for an unlinked file.
    fn commit_buffered(&self, ino: Ino) -> Result<()> {
        match self.block(self.inner.flush_ino(ino, Report::Drop)) {
            Err(Errno::ENOENT) => Ok(()),
            r => r,
        }
    }

    /// Object-store volumes: commit every buffered write of this client.
    pub fn flush_all(&self) -> Result<()> {
        self.block(self.inner.flush_all(Report::Drop))
    }

    /// Time one plain serializable get (answered by the member the client
    /// reaches, no quorum): the round trip a cached stat saves.
    pub fn serializable_round_trip(&self) -> Result<Duration> {
        let key = self.inner.keys.inode(ROOT_INO);
        let lim = self.inner.opts.timeout;
        let mut kv = self.inner.client.kv_client();
        self.block(async move {
            let t = Instant::now();
            match tokio::time::timeout(
                lim,
                kv.get(key, Some(GetOptions::new().with_serializable())),
            )
            .await
            {
                Ok(Ok(_)) => Ok(t.elapsed()),
                _ => Err(Errno::EIO),
            }
        })
    }

    /// Time one linearizable get (what a revalidation costs when the
    /// watch is not current).
    pub fn linearizable_round_trip(&self) -> Result<Duration> {
        let i = self.inner.clone();
        self.block(async move {
            let t = Instant::now();
            i.read(i.deadline(), vec![get(i.keys.inode(ROOT_INO))])
                .await?;
            Ok(t.elapsed())
        })
    }
}

/// Run `f` to completion on `rt` from a synchronous caller. A caller that
/// is itself inside a tokio runtime cannot block on another one in place,
/// so it waits from a helper thread.
fn run_on<F>(rt: &Runtime, f: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(|| rt.block_on(f))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    } else {
        rt.block_on(f)
    }
}

impl Drop for EtcdFs {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            // What is buffered is committed first (best effort).
            let i = self.inner.clone();
            let _ = run_on(&rt, async move { i.flush_all(Report::Drop).await });
            // Revoke the session lease: the session record and marker go
            // with it (if this fails, they expire after the TTL).
            let i = self.inner.clone();
            run_on(&rt, async move {
                i.close_session(Duration::from_millis(500)).await;
            });
            rt.shutdown_timeout(Duration::from_millis(200));
        }
    }
}

impl FileSystem for EtcdFs {
    fn root(&self) -> Ino {
        ROOT_INO
    }

    fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        check_name(name)?;
        let i = &self.inner;
        Ok(self
            .block(i.lookup(dir, name))?
            .map(|a| self.with_pending(a)))
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.getattr_committed(ino).map(|a| self.with_pending(a))
    }

    fn setattr(&self, ino: Ino, set: &SetAttr, _ctx: Ctx) -> Result<Attr> {
        if set.size.is_some() {
            // A truncate applies to what was written before it.
            self.block(self.inner.flush_ino(ino, Report::Keep))?;
        }
        self.block(self.inner.setattr(ino, set))
            .map(|a| self.with_pending(a))
    }

    fn readdir(&self, dir: Ino, offset: u64, emit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let (parent, entries) = self.block(self.inner.readdir(dir))?;
        let dots = [(1u64, dir, b".".to_vec()), (2, parent, b"..".to_vec())];
        for (off, ino, name) in dots {
            if off > offset
                && !emit(DirEntry {
                    ino,
                    offset: off,
                    kind: FileType::Directory,
                    name,
                })
            {
                return Ok(());
            }
        }
        for (off, ino, kind, name) in entries {
            if off > offset
                && !emit(DirEntry {
                    ino,
                    offset: off,
                    kind,
                    name,
                })
            {
                return Ok(());
            }
        }
        Ok(())
    }

    fn create(&self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        self.block(
            self.inner
                .make(dir, name, FileType::Regular, perm, 0, b"", ctx),
        )
    }

    fn mknod(
        &self,
        dir: Ino,
        name: &[u8],
        kind: FileType,
        perm: u16,
        rdev: u32,
        ctx: Ctx,
    ) -> Result<Attr> {
        match kind {
            FileType::Directory | FileType::Symlink => Err(Errno::EINVAL),
            _ => self.block(self.inner.make(dir, name, kind, perm, rdev, b"", ctx)),
        }
    }

    fn mkdir(&self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        self.block(
            self.inner
                .make(dir, name, FileType::Directory, perm, 0, b"", ctx),
        )
    }

    fn unlink(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.block(self.inner.remove(dir, name, false))
    }

    fn rmdir(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.block(self.inner.remove(dir, name, true))
    }

    fn rename(
        &self,
        olddir: Ino,
        oldname: &[u8],
        newdir: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.block(self.inner.rename(olddir, oldname, newdir, newname, flags))
    }

    fn symlink(&self, dir: Ino, name: &[u8], target: &[u8], ctx: Ctx) -> Result<Attr> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() >= dcache::fs::PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        self.block(
            self.inner
                .make(dir, name, FileType::Symlink, 0o777, 0, target, ctx),
        )
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let rec = self.block(self.inner.current_rec(ino))?;
        if rec.kind != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        Ok(rec.target)
    }

    fn link(&self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        self.block(self.inner.link(ino, newdir, newname))
    }

    /// Object-store volumes only (their unlinked open files are kept, and
    /// so is a file with no name yet); inline ones answer EOPNOTSUPP, as
    /// a Linux filesystem without `->tmpfile`.
    fn tmpfile(&self, dir: Ino, perm: u16, flags: i32, ctx: Ctx) -> Result<(Attr, u64)> {
        if !self.inner.keeps_unlinked() {
            return Err(Errno::ENOTSUP);
        }
        let attr = self.block(self.inner.tmpfile(dir, perm, flags, ctx))?;
        // Registered as open before the collector could look (its dead
        // record is younger than the grace period).
        let fh = self.open(attr.ino, flags)?;
        Ok((attr, fh))
    }

    fn open(&self, ino: Ino, _flags: i32) -> Result<u64> {
        self.getattr(ino)?;
        // Close-to-open: the first read after an open asks etcd, so it
        // sees every write closed before the open (`lists`).
        if let Some(o) = self.inner.objects.get() {
            o.lists.forget(ino);
        }
        if self.inner.keeps_unlinked() {
            self.inner.opens.opened(ino);
        }
        Ok(0)
    }

    fn read(&self, ino: Ino, _fh: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if self.inner.objects.get().is_some() {
            return self.block(self.inner.obj_read(ino, offset, buf));
        }
        self.block(self.inner.read_data(ino, offset, buf))
    }

    fn write(&self, ino: Ino, _fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_where(ino, offset, false, data)
    }

    /// At the end of the file as committed in etcd (past what this client
    /// buffered), whatever `offset` the caller had: its idea of the size,
    /// a kernel's cached one, may predate another host's appends.
    fn write_append(&self, ino: Ino, _fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_where(ino, offset, true, data)
    }

    /// Object-store volumes: commit what this client buffered for the
    /// inode (its objects uploaded, then one transaction per 32 chunks);
    /// once it returns, every client's next read sees it.
    fn flush(&self, ino: Ino, _fh: u64) -> Result<()> {
        self.commit_buffered(ino)
    }

    /// As [`flush`](Self::flush): the commit is durable when etcd has
    /// acknowledged it; the objects before it, as the store makes them (an
    /// S3 PUT once acknowledged; on a local directory store the flush
    /// fsyncs each object and its directory before committing).
    fn fsync(&self, ino: Ino, _fh: u64, _datasync: bool) -> Result<()> {
        self.commit_buffered(ino)
    }

    fn release(&self, ino: Ino, _fh: u64) -> Result<()> {
        let r = self.commit_buffered(ino);
        if self.inner.keeps_unlinked() {
            self.inner.opens.released(ino);
        }
        r
    }

    fn lseek(&self, ino: Ino, _fh: u64, offset: u64, whence: i32) -> Result<u64> {
        if self.inner.objects.get().is_some() {
            return self.block(self.inner.obj_seek(ino, offset, whence));
        }
        // Inline: the whole file is data, as Linux's generic llseek says.
        let size = self.getattr(ino)?.size;
        match whence {
            _ if offset >= size => Err(Errno(libc::ENXIO)),
            libc::SEEK_DATA => Ok(offset),
            libc::SEEK_HOLE => Ok(size),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Object-store volumes: mode 0 and `KEEP_SIZE` reserve the range's
    /// holes with object-less zero slices (counted in `st_blocks` as
    /// tmpfs counts reserved pages; an object store itself has nothing to
    /// reserve) and mode 0 grows the size; `PUNCH_HOLE` removes the range
    /// from the slice lists; `ZERO_RANGE` punches, then reserves (as ext4
    /// leaves zeroed blocks allocated). Inline volumes: none.
    fn fallocate(&self, ino: Ino, _fh: u64, mode: i32, offset: u64, len: u64) -> Result<()> {
        if self.inner.objects.get().is_none() {
            return Err(Errno::ENOTSUP);
        }
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let end = offset.checked_add(len).ok_or(Errno::EFBIG)?;
        if end > crate::slices::MAX_FILE_OBJECTS {
            return Err(Errno::EFBIG);
        }
        let (punch, reserve) = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => (false, true),
            libc::FALLOC_FL_PUNCH_HOLE if keep => (true, false),
            libc::FALLOC_FL_ZERO_RANGE => (true, true),
            _ => return Err(Errno::ENOTSUP),
        };
        if punch {
            self.block(self.inner.edit_lists(ino, offset, end, Edit::Punch))?;
        }
        if reserve && len > 0 {
            self.block(self.inner.edit_lists(ino, offset, end, Edit::Reserve))?;
        }
        if !keep && end > self.getattr(ino)?.size {
            let set = SetAttr {
                size: Some(end),
                ..SetAttr::default()
            };
            self.block(self.inner.setattr(ino, &set))?;
        }
        Ok(())
    }

    /// From the mirrored record while the watch is current (another
    /// client's change shows within the staleness bound, as for
    /// `getattr`), else from etcd.
    fn getxattr(&self, ino: Ino, name: &[u8], value: &mut Vec<u8>) -> Result<()> {
        let x = self.xattrs_of(ino)?;
        let v = x.get(name).ok_or(Errno::ENODATA)?;
        value.clear();
        value.extend_from_slice(v);
        Ok(())
    }

    /// One compare-and-swap transaction on the inode record; the limits
    /// are [`crate::xattr`]'s (ENOSPC past them).
    fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        let change = |x: &mut _| crate::xattr::set(x, name, value, flags);
        self.block(self.inner.change_xattrs(ino, change))
    }

    fn listxattr(&self, ino: Ino, list: &mut Vec<u8>) -> Result<()> {
        let x = self.xattrs_of(ino)?;
        crate::xattr::list(&x, list);
        Ok(())
    }

    fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        let change = |x: &mut _| crate::xattr::remove(x, name);
        self.block(self.inner.change_xattrs(ino, change))
    }

    // File locks, shared by every client of the volume (`locks`).

    fn lock_scope(&self) -> dcache::fs::LockScope {
        dcache::fs::LockScope::Shared
    }

    fn getlk(
        &self,
        ino: Ino,
        owner: &dcache::fs::LockOwner,
        lock: &dcache::fs::FileLock,
    ) -> Result<Option<dcache::fs::FileLock>> {
        let i = &self.inner;
        self.block(i.getlk(ino, owner, lock))
    }

    fn setlk(
        &self,
        ino: Ino,
        owner: &dcache::fs::LockOwner,
        lock: &dcache::fs::FileLock,
    ) -> Result<()> {
        let i = &self.inner;
        self.block(i.setlk(ino, owner, lock))
    }

    fn release_locks(&self, ino: Ino, what: dcache::fs::LockRelease) -> Result<()> {
        let i = &self.inner;
        self.block(i.release_locks(ino, what))
    }

    fn wake_on_unlock(&self, ino: Ino, wake: dcache::fs::UnlockWake) {
        self.inner.lock_wakers.add(ino, wake);
    }

    fn flush_on_close(&self) -> bool {
        // Inline: every write is committed before it returns, nothing to
        // flush. Objects: close commits what was buffered.
        self.inner.objects.get().is_some()
    }

    fn statfs(&self) -> Result<StatFs> {
        self.block(self.inner.statfs())
    }

    /// This process's failures by cause (`crate::log`), and whether the
    /// watch is current.
    fn status(&self) -> Option<String> {
        let failures: Vec<String> = crate::log::counts()
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        let current = if self.is_current() {
            "current"
        } else {
            "behind"
        };
        Some(format!(
            "etcd volume {}: watch {current}; failures by cause: {}",
            self.volume.record.uuid,
            failures.join(", ")
        ))
    }

    fn forget(&self, ino: Ino, _nlookup: u64) {
        if ino != ROOT_INO {
            self.inner.cache.forget(ino);
        }
    }

    fn needs_revalidate(&self) -> bool {
        true
    }

    /// Keep the Vfs's invalidator: the watch's changes by other clients go
    /// to a thread of our own that reports them (a report may wait for
    /// lookups in progress, which wait on this client's runtime).
    fn attach(&self, inval: dcache::Invalidator) {
        // A Vfs built later over the same client replaces an earlier one.
        *self
            .inner
            .attached
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(inval);
        let (tx, rx) = std::sync::mpsc::channel::<Change>();
        if self.inner.inval.set(tx).is_err() {
            return; // the thread runs already
        }
        let attached = self.inner.attached.clone();
        let spawned = std::thread::Builder::new()
            .name("dcache-etcd-inval".into())
            .spawn(move || {
                // Ends when the watch's sender goes with the client.
                for c in rx {
                    if let Change::Barrier(done) = c {
                        let _ = done.send(());
                        continue;
                    }
                    let Some(inval) = attached.lock().unwrap_or_else(|e| e.into_inner()).clone()
                    else {
                        continue;
                    };
                    match c {
                        Change::Entry(dir, name) => inval.entry(dir, &name),
                        Change::Inode(ino) => inval.inode(ino, None),
                        Change::Barrier(_) => {}
                    }
                }
            });
        // Without the thread the watch's sends fail and nothing is told:
        // a mount's kernel then sees other clients' changes only after its
        // timeouts; the Vfs itself still revalidates every use.
        drop(spawned);
    }

    fn dir_cookie(&self, _dir: Ino) -> u64 {
        self.inner.cache.cookie()
    }

    fn revalidate(
        &self,
        dir: Ino,
        _name: &[u8],
        _ino: Option<Ino>,
        cookie: u64,
        rcu: bool,
    ) -> Validity {
        // The rcu case reads two atomics, the clock and a lock-free map
        // (papaya; its guard registers a thread with the collector once,
        // on the thread's first use), and never blocks.
        let c = &self.inner.cache;
        let cookie = cookie.min(i64::MAX as u64) as i64;
        if cookie < c.floor.load(Ordering::Acquire) {
            return if rcu {
                Validity::NeedBlocking
            } else {
                Validity::Invalid
            };
        }
        if c.fresh() {
            // Only changes this client's dcache did not apply count: its
            // own creates, unlinks and renames are in the dcache already.
            return if c.dir_rev(dir) <= cookie {
                Validity::Valid
            } else {
                Validity::Invalid
            };
        }
        if rcu {
            return Validity::NeedBlocking;
        }
        c.stats.remote_revalidations.fetch_add(1, Ordering::Relaxed);
        match self.block(self.inner.remote_rev(dir)) {
            Ok(Some(rev)) if rev <= cookie => Validity::Valid,
            _ => Validity::Invalid,
        }
    }
}
