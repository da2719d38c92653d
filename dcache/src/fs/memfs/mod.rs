//! memfs: an in-memory backend with the semantics of tmpfs.
//!
//! Regular files (sparse page data), directories, symlinks and special
//! nodes, with modes, owners, link counts, sizes, block counts and times
//! kept the way Linux keeps them on tmpfs, and every failure reported with
//! the errno tmpfs gives (see `tree.rs` and `rename.rs` for the check order).
//!
//! - **Locking.** One `RwLock` over the whole tree: reads (`lookup`,
//!   `getattr`, `read`, `readdir`) share it, changes take it alone. Open
//!   handles are kept apart, in per-thread shards (`handles.rs`): an open
//!   without O_TRUNC of an inode the thread has opened before, and its
//!   release, take no tree lock at all. The
//!   dcache in front answers cached lookups and stats without calling in
//!   here, so this lock is off the fast path. No lock is held while user
//!   code runs: `readdir` copies a batch of entries out under the lock and
//!   calls `emit` after dropping it, so `emit` may call back into the fs.
//! - **Lifetime.** An inode lives while it has a name (`nlink > 0`) or an
//!   open handle; the last `unlink`/`rmdir`/`release` frees it. Inode
//!   numbers count up from the root's 1 and are never reused, so a stale
//!   number held elsewhere gets ENOENT, never another file. `forget` is
//!   therefore a no-op: memfs keeps nothing per dcache reference.
//!   Unlike tmpfs, an inode with neither a name nor a handle is gone even
//!   if the dcache (or the kernel, through FUSE) still caches it.
//! - **Times.** Creating, removing or renaming a name stamps the directory's
//!   mtime and ctime; write and a size-changing truncate stamp mtime and
//!   ctime; chmod, chown, utimens, link, unlink and rename stamp ctime of the
//!   inode. Reads do not update atime (as if mounted `noatime`).
//! - **Permissions** are stored, not enforced: memfs is meant to be mounted
//!   with the kernel checking modes (FUSE `default_permissions`). A write
//!   does not clear set-user-ID bits; a chown does, as on Linux.
//! - **Extended attributes** are kept per inode in name order (`xattr.rs`);
//!   the Vfs checks names, sizes and permissions first.
//! - **Beyond read and write** (`fileops.rs`): `fallocate` reserves pages
//!   (counted in `st_blocks`, holes to `SEEK_DATA` until written or
//!   reserved again, as tmpfs), punches holes and, unlike tmpfs, zeroes
//!   ranges; `SEEK_DATA`/`SEEK_HOLE` answer as tmpfs; `copy_file_range`
//!   keeps the source's holes; `O_TMPFILE` files may be linked unless
//!   opened with `O_EXCL`.
//! - **Space.** `Limits` caps bytes and inodes (default: half of RAM, the
//!   tmpfs default); past them writes and creates fail with ENOSPC.

mod check;
mod dir;
mod file;
mod fileops;
mod handles;
mod inode;
mod rename;
mod shard_tables;
mod tree;
mod xattr;

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::errno::{Errno, Result};
use crate::fs::{Attr, Ctx, DirEntry, FileSystem, FileType, Ino, RenameFlags, SetAttr, StatFs};
use crate::sync::RwLockExt;
use handles::Handles;
use tree::{Tree, ROOT};

/// How many entries `readdir` copies out per lock hold.
const READDIR_BATCH: usize = 128;

/// Space limits, like tmpfs's `size=` and `nr_inodes=` mount options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// File data bytes (rounded down to whole 4 KiB pages).
    pub max_bytes: u64,
    /// Inodes, the root included.
    pub max_inodes: u64,
}

impl Limits {
    /// No limits.
    pub const UNLIMITED: Limits = Limits {
        max_bytes: u64::MAX,
        max_inodes: u64::MAX,
    };
}

impl Default for Limits {
    /// Half of physical memory for data and one inode per two pages of
    /// memory, as tmpfs sizes itself when mounted without options.
    fn default() -> Limits {
        let ram = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().strip_suffix("kB"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .map_or(4 << 30, |kib| kib.saturating_mul(1024));
        Limits {
            max_bytes: ram / 2,
            max_inodes: ram / 2 / 4096,
        }
    }
}

/// The in-memory filesystem. See the module docs.
#[derive(Debug)]
pub struct MemFs {
    tree: RwLock<Tree>,
    /// The open handles, which `open` and `release` reach without the tree
    /// lock when the calling thread's shard pins the inode (`handles.rs`).
    handles: Arc<Handles>,
    /// Who the path helpers (`mkdir_p`, `write_file`) create files as.
    owner: Ctx,
    /// File locks (`flock`, `fcntl`).
    locks: crate::fs::lock::LocalLocks,
}

impl Default for MemFs {
    fn default() -> Self {
        MemFs::new()
    }
}

impl MemFs {
    /// An empty filesystem whose root (mode 0755) belongs to the calling
    /// process's effective uid and gid.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{At, Vfs};
    ///
    /// let fs = Arc::new(MemFs::new());
    /// fs.mkdir_p("a/b", 0o755)?;
    /// fs.write_file("a/b/greeting", b"hello")?;
    /// fs.make_symlink("a/link", "b/greeting")?;
    /// assert_eq!(fs.read_file("a/b/greeting")?, b"hello");
    ///
    /// // The same tree through the dentry cache.
    /// let vfs = Vfs::new(fs)?;
    /// assert_eq!(vfs.as_root().stat(At::Root, "a/link")?.size, 5);
    /// # Ok::<(), dcache::Errno>(())
    /// ```
    pub fn new() -> MemFs {
        let me = Ctx::current();
        MemFs::with_root(0o755, me.uid, me.gid)
    }

    /// An empty filesystem with the given root permissions and owner.
    pub fn with_root(perm: u16, uid: u32, gid: u32) -> MemFs {
        let tree = Tree::new(perm, uid, gid, Limits::default());
        MemFs {
            handles: tree.handles.clone(),
            tree: RwLock::new(tree),
            owner: Ctx { uid, gid },
            locks: Default::default(),
        }
    }

    /// Replace the space limits (existing contents are kept even if they
    /// exceed the new ones; only growth is refused).
    pub fn with_limits(self, limits: Limits) -> MemFs {
        {
            let mut t = self.write_lock();
            t.max_pages = limits.max_bytes / file::PAGE as u64;
            t.max_inodes = limits.max_inodes;
        }
        self
    }

    // Poisoning is ignored (every operation checks before it mutates; see
    // `crate::sync::LockExt`).
    fn read_lock(&self) -> RwLockReadGuard<'_, Tree> {
        self.tree.read_unpoisoned()
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Tree> {
        self.tree.write_unpoisoned()
    }

    /// The inode at `path` (relative to the root, `/`-separated, `.` and
    /// `..` understood, symlinks not followed).
    pub fn resolve(&self, path: &str) -> Result<Ino> {
        walk(&self.read_lock(), path.as_bytes())
    }

    /// Make the directory `path` and any missing parents (mode `perm`, owned
    /// by the root's owner); existing directories are fine, anything else in
    /// the way is ENOTDIR.
    pub fn mkdir_p(&self, path: &str, perm: u16) -> Result<Ino> {
        let mut t = self.write_lock();
        let mut ino = ROOT;
        for comp in components(path.as_bytes()) {
            ino = match t.lookup(ino, comp)? {
                Some(a) if a.kind == FileType::Directory => a.ino,
                Some(_) => return Err(Errno::ENOTDIR),
                None => t.mkdir(ino, comp, perm, self.owner)?.ino,
            };
        }
        Ok(ino)
    }

    /// Create or overwrite the regular file `path` (mode 0644 when new) with
    /// `data`; its parent must exist.
    pub fn write_file(&self, path: &str, data: &[u8]) -> Result<Ino> {
        let mut t = self.write_lock();
        let (dir, name) = split_last(&t, path.as_bytes())?;
        let ino = match t.lookup(dir, name)? {
            Some(a) => a.ino,
            None => t.create(dir, name, 0o644, self.owner)?.ino,
        };
        let fh = t.open(ino, libc::O_WRONLY | libc::O_TRUNC)?;
        let written = t.write(ino, fh, 0, data);
        t.release(ino, fh)?;
        written.map(|_| ino)
    }

    /// The whole contents of the regular file at `path`.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let mut t = self.write_lock();
        let ino = walk(&t, path.as_bytes())?;
        let fh = t.open(ino, libc::O_RDONLY)?;
        let mut buf = vec![0u8; t.getattr(ino)?.size as usize];
        let n = t.read(ino, fh, 0, &mut buf);
        t.release(ino, fh)?;
        buf.truncate(n?);
        Ok(buf)
    }

    /// Make a symlink at `path` pointing to `target`; its parent must exist.
    pub fn make_symlink(&self, path: &str, target: &str) -> Result<Ino> {
        let mut t = self.write_lock();
        let (dir, name) = split_last(&t, path.as_bytes())?;
        Ok(t.symlink(dir, name, target.as_bytes(), self.owner)?.ino)
    }

    /// Live inodes, the root and open-but-unlinked ones included.
    pub fn inode_count(&self) -> usize {
        self.read_lock().inodes.len()
    }

    /// Open file handles not yet released.
    pub fn open_handles(&self) -> usize {
        self.handles.len()
    }

    /// Recount every link, subdirectory, handle and page and compare with
    /// what is stored; describes the first disagreement. For tests and
    /// stress runs (it walks the whole tree under the lock).
    pub fn check(&self) -> std::result::Result<(), String> {
        self.read_lock().check()
    }
}

fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty())
}

fn walk(t: &Tree, path: &[u8]) -> Result<Ino> {
    let mut ino = ROOT;
    for comp in components(path) {
        ino = t.lookup(ino, comp)?.ok_or(Errno::ENOENT)?.ino;
    }
    Ok(ino)
}

/// The directory holding the last component of `path`, and that component.
fn split_last<'p>(t: &Tree, path: &'p [u8]) -> Result<(Ino, &'p [u8])> {
    let mut comps: Vec<&[u8]> = components(path).collect();
    let name = comps.pop().ok_or(Errno::EEXIST)?;
    let mut dir = ROOT;
    for comp in comps {
        dir = t.lookup(dir, comp)?.ok_or(Errno::ENOENT)?.ino;
    }
    Ok((dir, name))
}

impl FileSystem for MemFs {
    fn root(&self) -> Ino {
        ROOT
    }

    fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Option<Attr>> {
        self.read_lock().lookup(dir, name)
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.read_lock().getattr(ino)
    }

    fn setattr(&self, ino: Ino, set: &SetAttr, _ctx: Ctx) -> Result<Attr> {
        self.write_lock().setattr(ino, set)
    }

    /// Entries are copied out in batches and `emit` runs with no lock held,
    /// so it may call back into this filesystem. A directory removed between
    /// two batches simply ends the listing.
    fn readdir(&self, dir: Ino, offset: u64, emit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let mut pos = offset;
        let mut first = true;
        loop {
            let (batch, end) = match self.read_lock().readdir(dir, pos, READDIR_BATCH) {
                Ok(r) => r,
                Err(_) if !first => return Ok(()),
                Err(e) => return Err(e),
            };
            first = false;
            for entry in batch {
                pos = entry.offset;
                if !emit(entry) {
                    return Ok(());
                }
            }
            if end {
                return Ok(());
            }
        }
    }

    fn create(&self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        self.write_lock().create(dir, name, perm, ctx)
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
        self.write_lock().mknod(dir, name, kind, perm, rdev, ctx)
    }

    fn mkdir(&self, dir: Ino, name: &[u8], perm: u16, ctx: Ctx) -> Result<Attr> {
        self.write_lock().mkdir(dir, name, perm, ctx)
    }

    fn unlink(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.write_lock().unlink(dir, name)
    }

    fn rmdir(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.write_lock().rmdir(dir, name)
    }

    fn rename(
        &self,
        olddir: Ino,
        oldname: &[u8],
        newdir: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.write_lock()
            .rename(olddir, oldname, newdir, newname, flags)
    }

    fn symlink(&self, dir: Ino, name: &[u8], target: &[u8], ctx: Ctx) -> Result<Attr> {
        self.write_lock().symlink(dir, name, target, ctx)
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        self.read_lock().readlink(ino)
    }

    fn link(&self, ino: Ino, newdir: Ino, newname: &[u8]) -> Result<Attr> {
        self.write_lock().link(ino, newdir, newname)
    }

    /// Without O_TRUNC, no tree write lock: the calling thread's shard
    /// opens an inode it pins already with no shared write at all, and
    /// pins a new one under the tree's read lock.
    fn open(&self, ino: Ino, flags: i32) -> Result<u64> {
        if flags & libc::O_TRUNC != 0 && flags & libc::O_PATH == 0 {
            return self.write_lock().open(ino, flags);
        }
        let shard = self.handles.this_shard();
        if let Some(fh) = self.handles.open_pinned(shard, ino, flags)? {
            return Ok(fh);
        }
        let t = self.read_lock();
        let kind = t.inode(ino)?.kind;
        self.handles.open(shard, ino, kind, flags)
    }

    fn read(&self, ino: Ino, fh: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_lock().read(ino, fh, offset, buf)
    }

    fn write(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_lock().write(ino, fh, offset, data)
    }

    fn flush(&self, ino: Ino, fh: u64) -> Result<()> {
        self.handles.get(ino, fh).map(|_| ())
    }

    /// tmpfs has no `->flush`: `close` does not come here (and so does not
    /// take the tree lock every other closer takes too).
    fn flush_on_close(&self) -> bool {
        false
    }

    /// A handle carries only the access mode and keeps the inode alive.
    fn needs_open(&self) -> bool {
        false
    }

    fn fsync(&self, ino: Ino, fh: u64, _datasync: bool) -> Result<()> {
        self.handles.get(ino, fh).map(|_| ())
    }

    /// The handle's shard only; the tree's write lock too when the inode
    /// may have lost its last name and this was its last handle.
    fn release(&self, ino: Ino, fh: u64) -> Result<()> {
        if self.handles.release(ino, fh)? {
            self.write_lock().maybe_free(ino);
        }
        Ok(())
    }

    fn statfs(&self) -> Result<StatFs> {
        Ok(self.read_lock().statfs())
    }

    /// Nothing to drop: inodes live by their names and open handles, not
    /// by dcache references (see the module docs).
    fn forget(&self, _ino: Ino, _nlookup: u64) {}

    fn getxattr(&self, ino: Ino, name: &[u8], value: &mut Vec<u8>) -> Result<()> {
        self.read_lock().getxattr(ino, name, value)
    }

    fn setxattr(&self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        self.write_lock().setxattr(ino, name, value, flags)
    }

    fn listxattr(&self, ino: Ino, list: &mut Vec<u8>) -> Result<()> {
        self.read_lock().listxattr(ino, list)
    }

    fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<()> {
        self.write_lock().removexattr(ino, name)
    }

    // File operations beyond read and write: see `fileops.rs`.

    fn fallocate(&self, ino: Ino, fh: u64, mode: i32, offset: u64, len: u64) -> Result<()> {
        self.write_lock().fallocate(ino, fh, mode, offset, len)
    }

    fn lseek(&self, ino: Ino, fh: u64, offset: u64, whence: i32) -> Result<u64> {
        self.read_lock().lseek(ino, fh, offset, whence)
    }

    fn copy_file_range(
        &self,
        ino_in: Ino,
        fh_in: u64,
        off_in: u64,
        ino_out: Ino,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> Result<usize> {
        self.write_lock()
            .copy_range(ino_in, fh_in, off_in, ino_out, fh_out, off_out, len)
    }

    fn tmpfile(&self, dir: Ino, perm: u16, flags: i32, ctx: Ctx) -> Result<(Attr, u64)> {
        self.write_lock().tmpfile(dir, perm, flags, ctx)
    }
    // File locks: one in-process table, shared by every client of this
    // backend (`lock::LocalLocks`).

    crate::fs::lock::local_lock_methods!(locks);
}
