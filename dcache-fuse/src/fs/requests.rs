//! Each request, answered: the arguments a parsed [`Request`] carries go to
//! one [`FuseCore`](crate::core::FuseCore) call, and its result becomes the
//! reply the opcode expects.

use dcache::errno::Result;
use dcache::fs::lock::{Flavor, LockRelease};
use dcache::permission::search_for_all;

use super::{handle, node, secs, DcacheFs, GENERATION};
use crate::attr::{dirent_type, file_attr, set_attr};
use crate::core::{is_acl, xattr_cred, XattrReply};
use crate::locks::{flock_owner, lk_out, lock_request};
use crate::nodes::NodeId;
use crate::wire::abi::{self, fattr};
use crate::wire::serve::MAX_WRITE;
use crate::wire::{Op, Out, Request};

fn empty(out: &mut Out, r: Result<()>) {
    if let Err(e) = r {
        out.error(e.raw());
    }
}

fn xattr(out: &mut Out, r: Result<XattrReply>) {
    match r {
        Ok(XattrReply::Size(n)) => out.push(&abi::GetxattrOut {
            size: n,
            padding: 0,
        }),
        Ok(XattrReply::Data(d)) => out.data(d),
        Err(e) => out.error(e.raw()),
    }
}

/// A byte count for a WRITE or COPY_FILE_RANGE reply: at most max_write
/// (or the backend's copy limit), which fits.
fn written(out: &mut Out, r: Result<usize>) {
    match r {
        Ok(n) => out.push(&abi::WriteOut {
            size: u32::try_from(n).unwrap_or(u32::MAX),
            padding: 0,
        }),
        Err(e) => out.error(e.raw()),
    }
}

impl DcacheFs {
    /// Answer `req` into `out`.
    pub(super) fn answer(&self, req: &Request<'_>, out: &mut Out) {
        let h = &req.header;
        let id = h.nodeid;
        let core = &self.core;
        match &req.op {
            // A second INIT: the handshake is over.
            Op::Init(_) => out.error(libc::EIO),
            Op::Destroy => self.finish(),
            // Every request but a waiting SETLKW is answered promptly:
            // only such a wait is interrupted (answered EINTR).
            Op::Interrupt(i) => {
                if let Some(l) = &self.locks {
                    l.interrupt(i.unique);
                }
                out.none();
            }
            Op::Forget(f) => {
                core.forget(node(id), f.nlookup);
                out.none();
            }
            Op::BatchForget(v) => {
                for f in v {
                    core.forget(node(f.nodeid), f.nlookup);
                }
                out.none();
            }
            Op::Lookup { name } => self.lookup(h, name, out),
            Op::Getattr(_) => match core.getattr(node(id)) {
                Ok(a) => self.attr_out(out, &a),
                Err(e) => out.error(e.raw()),
            },
            Op::Setattr(s) => self.setattr(h, s, out),
            Op::Readlink => match core.readlink(node(id)) {
                Ok(t) => out.data(t),
                Err(e) => out.error(e.raw()),
            },
            Op::Symlink { name, target } => {
                let r = core.symlink(&self.cred(h), node(id), name, target);
                self.reply_entry(out, r);
            }
            Op::Mknod { arg, name } => {
                let cred = self.create_cred(h, arg.umask);
                let r = core.mknod(&cred, node(id), name, arg.mode, arg.rdev);
                self.reply_entry(out, r);
            }
            Op::Mkdir { arg, name } => {
                let cred = self.create_cred(h, arg.umask);
                let r = core.mkdir(&cred, node(id), name, arg.mode);
                self.reply_entry(out, r);
            }
            Op::Unlink { name } => empty(out, core.unlink(&self.cred(h), node(id), name)),
            Op::Rmdir { name } => empty(out, core.rmdir(&self.cred(h), node(id), name)),
            Op::Rename {
                newdir,
                flags,
                name,
                newname,
            } => {
                let r = core.rename(
                    &self.cred(h),
                    node(id),
                    name,
                    node(*newdir),
                    newname,
                    *flags,
                );
                empty(out, r);
            }
            Op::Link { arg, name } => {
                let r = core.link(&self.cred(h), node(arg.oldnodeid), node(id), name);
                self.reply_entry(out, r);
            }
            Op::Open(o) => {
                self.stats.open_requests.add(1);
                // ENOSYS: the kernel opens this mount's files without
                // asking from now on (FUSE_NO_OPEN_SUPPORT).
                if core.no_open() {
                    return out.error(libc::ENOSYS);
                }
                match core.open(&self.cred(h), node(id), self.open_flags_for(o.flags)) {
                    Ok(fh) => {
                        if o.open_flags & abi::OPEN_KILL_SUIDGID != 0 {
                            let _ = core.kill_suidgid(&self.killer(h), node(id));
                            self.attr_changed(id);
                        }
                        out.push(&self.open_out(fh));
                    }
                    Err(e) => out.error(e.raw()),
                }
            }
            Op::Read(r) => {
                self.stats.data_requests.add(1);
                match self.file_of(r.fh, id) {
                    Ok(f) => {
                        // The kernel asks at most max_pages' worth
                        // (MAX_WRITE); a larger size is not read into memory.
                        let buf = out.data_buf(r.size.min(MAX_WRITE) as usize);
                        match core.read_into(f, r.offset, buf) {
                            Ok(n) => out.data_len(n),
                            Err(e) => out.error(e.raw()),
                        }
                    }
                    Err(e) => out.error(e.raw()),
                }
            }
            Op::Write { arg, data } => {
                self.stats.data_requests.add(1);
                let kill = arg.write_flags & abi::WRITE_KILL_SUIDGID != 0;
                let before = kill.then(|| core.getattr(node(id)).map(|a| a.perm).ok());
                let r = self.file_of(arg.fh, id);
                // With a writeback cache the kernel places appends itself.
                let append = arg.flags as i32 & libc::O_APPEND != 0 && !self.writeback;
                let r = r.and_then(|f| match append {
                    true => core.append(f, arg.offset, data),
                    false => core.write(f, arg.offset, data),
                });
                if r.is_ok() && kill {
                    let _ = core.kill_suidgid(&self.killer(h), node(id));
                    // The kernel keeps the mode it had: tell it it changed.
                    if core.getattr(node(id)).map(|a| a.perm).ok() != before.flatten() {
                        self.attr_changed(id);
                    }
                }
                written(out, r);
            }
            Op::Statfs => match core.statfs() {
                Ok(s) => out.push(&abi::StatfsOut {
                    blocks: s.blocks,
                    bfree: s.bfree,
                    bavail: s.bavail,
                    files: s.files,
                    ffree: s.ffree,
                    bsize: s.bsize,
                    namelen: s.namelen,
                    frsize: s.frsize,
                    ..Default::default()
                }),
                Err(e) => out.error(e.raw()),
            },
            Op::Release(r) => {
                self.stats.open_requests.add(1);
                // The file first, so what it wrote is committed before its
                // locks go (the next holder must find it).
                // Handle 0 names no file of ours (a file the kernel opened
                // without asking); nothing to close.
                let closed = (r.fh != 0).then(|| {
                    if let Some(n) = self.notifier.get() {
                        self.backing.release(n.dev(), handle(r.fh));
                    }
                    core.release_file(handle(r.fh))
                });
                if let Some(l) = &self.locks {
                    // The open file's flock (the kernel names its owner)
                    // and anything else taken through it (OFD locks).
                    let ino = self.core.ids().ino(id);
                    let backend = l.backend();
                    if r.release_flags & abi::RELEASE_FLOCK_UNLOCK != 0 {
                        let owner = flock_owner(r.lock_owner, r.fh);
                        let _ =
                            backend.release_locks(ino, LockRelease::Owner(owner, Flavor::Flock));
                    }
                    let _ = backend.release_locks(ino, LockRelease::File(r.fh));
                }
                if let Some(res) = closed {
                    empty(out, res);
                }
            }
            Op::Flush(f) => {
                self.stats.open_requests.add(1);
                self.stats.flush_requests.add(1);
                // ENOSYS: nothing to flush on this backend; the kernel
                // stops sending FLUSH at every close.
                if self.no_flush {
                    return out.error(libc::ENOSYS);
                }
                // What the file wrote is committed first, then the
                // process's POSIX locks on the file go (Linux's
                // `locks_remove_posix` at every close): the next holder
                // finds the data.
                let flushed = self.file_of(f.fh, id).and_then(|f| core.flush(f));
                if let Some(l) = &self.locks {
                    let ino = self.core.ids().ino(id);
                    let what = LockRelease::Owner(f.lock_owner, Flavor::Posix);
                    let _ = l.backend().release_locks(ino, what);
                }
                empty(out, flushed);
            }
            Op::Fsync(f) => {
                let r = self.file_of(f.fh, id);
                empty(out, r.and_then(|fh| core.fsync(fh, f.fsync_flags & 1 != 0)));
            }
            Op::Opendir(o) => {
                self.stats.open_requests.add(1);
                if self.no_opendir {
                    return out.error(libc::ENOSYS);
                }
                // Without our own checks the kernel checked; nothing is kept
                // per open directory.
                let r = if self.cfg.check_permissions {
                    core.opendir(&self.cred(h), node(id), o.flags as i32)
                } else {
                    Ok(())
                };
                match r {
                    Ok(()) => out.push(&abi::OpenOut::default()),
                    Err(e) => out.error(e.raw()),
                }
            }
            Op::Readdir(r) => {
                let mut buf = out.dir(r.size);
                let res = core.readdir(node(id), r.offset, &mut |ino, off, k, name| {
                    !buf.add(ino, off, dirent_type(k), name)
                });
                if let Err(e) = res {
                    out.error(e.raw());
                }
            }
            Op::Readdirplus(r) => self.readdirplus(id, r, out),
            Op::Releasedir(_) => self.stats.open_requests.add(1),
            // Directory changes are made in the backend as they happen.
            Op::Fsyncdir(_) => {}
            Op::Access(a) => empty(out, core.access(&self.cred(h), node(id), a.mask as i32)),
            Op::Create { arg, name } => {
                let cred = self.create_cred(h, arg.umask);
                let mut r = core.create(
                    &cred,
                    node(id),
                    name,
                    arg.mode,
                    self.open_flags_for(arg.flags),
                );
                if let (Ok((e, _)), true) = (&mut r, arg.open_flags & abi::OPEN_KILL_SUIDGID != 0) {
                    // An existing file opened with O_TRUNC.
                    // SAFETY: the entry's node was just handed out for
                    // this reply, so it is held until the kernel forgets it.
                    let n = unsafe { NodeId::from_kernel(e.id) };
                    let _ = core.kill_suidgid(&self.killer(h), n);
                    if let Ok(a) = core.getattr(n) {
                        e.attr = a;
                    }
                }
                self.reply_created(out, r);
            }
            Op::Tmpfile { arg } => {
                let cred = self.create_cred(h, arg.umask);
                let r = core.tmpfile(&cred, node(id), arg.mode, arg.flags as i32);
                self.reply_created(out, r);
            }
            // Extended attributes (see `core::xattr`): a size of 0 asks for
            // the length, a short buffer is ERANGE. `xattr_gate` counts
            // each request and answers the refused ones.
            Op::Getxattr { arg, name } => {
                if let Some(cred) = self.xattr_gate(h, Some(name), out) {
                    xattr(out, core.getxattr(&cred, node(id), name, arg.size));
                }
            }
            Op::Listxattr(arg) => {
                if let Some(cred) = self.xattr_gate(h, None, out) {
                    let r = core.listxattr(&cred, node(id), arg.size, self.acls_hidden);
                    xattr(out, r);
                }
            }
            Op::Setxattr { arg, name, value } => {
                if let Some(cred) = self.xattr_gate(h, Some(name), out) {
                    let r = core.setxattr(&cred, node(id), name, value, arg.flags as i32);
                    empty(out, r);
                }
            }
            Op::Removexattr { name } => {
                if let Some(cred) = self.xattr_gate(h, Some(name), out) {
                    empty(out, core.removexattr(&cred, node(id), name));
                }
            }
            // File operations beyond read and write. Answering these keeps
            // the kernel asking: an ENOSYS to LSEEK makes it treat every
            // file as all data, one to FALLOCATE or COPY_FILE_RANGE makes
            // it answer EOPNOTSUPP (or copy through the page cache) for
            // the rest of the mount.
            Op::Fallocate(f) => {
                let r = self
                    .file_of(f.fh, id)
                    .and_then(|fh| core.fallocate(fh, f.offset, f.length, f.mode as i32));
                empty(out, r);
            }
            Op::Lseek(l) => match self
                .file_of(l.fh, id)
                .and_then(|fh| core.lseek(fh, l.offset as i64, l.whence as i32))
            {
                Ok(at) => out.push(&abi::LseekOut { offset: at as u64 }),
                Err(e) => out.error(e.raw()),
            },
            Op::CopyFileRange(c) => {
                let r = self.file_of(c.fh_in, id).and_then(|fin| {
                    let fout = self.file_of(c.fh_out, c.nodeid_out)?;
                    core.copy_file_range(fin, c.off_in, fout, c.off_out, c.len, c.flags)
                });
                written(out, r);
            }
            Op::Getlk(a) => self.getlk(id, a, out),
            Op::Setlk(a) => self.setlk(h, a, false, out),
            Op::Setlkw(a) => self.setlk(h, a, true, out),
            Op::Unknown => out.error(libc::ENOSYS),
        }
    }

    /// GETLK: the lock that would conflict, or F_UNLCK.
    fn getlk(&self, id: u64, a: &abi::LkIn, out: &mut Out) {
        let Some(l) = &self.locks else {
            return out.error(libc::ENOSYS);
        };
        match lock_request(a) {
            Ok((owner, lock)) => {
                let ino = self.core.ids().ino(id);
                lk_out(out, &lock, l.backend().getlk(ino, &owner, &lock));
            }
            Err(e) => out.error(e.raw()),
        }
    }

    /// SETLK, and SETLKW (`sleep`), which may wait (see `locks.rs`).
    fn setlk(&self, h: &crate::wire::Header, a: &abi::LkIn, sleep: bool, out: &mut Out) {
        let Some(l) = &self.locks else {
            return out.error(libc::ENOSYS);
        };
        match lock_request(a) {
            Ok((owner, lock)) => {
                let ino = self.core.ids().ino(h.nodeid);
                l.setlk(h.unique, h.nodeid, ino, owner, lock, sleep, out);
            }
            Err(e) => out.error(e.raw()),
        }
    }

    /// The open file a request names: its handle, or for handle 0 (a file
    /// the kernel opened without asking) the node's implicit file; EBADF
    /// where the kernel was never told it may do that.
    fn file_of(&self, fh: u64, nodeid: u64) -> Result<crate::handles::Fh> {
        if fh != 0 {
            return Ok(handle(fh));
        }
        if !self.core.no_open() {
            return Err(dcache::errno::Errno::EBADF);
        }
        self.core.implicit_file(node(nodeid))
    }

    /// An extended attribute request (about attribute `name`; `None`: a
    /// listing): counted (`Stats::xattr_requests`), then either answered
    /// here, ENOSYS on a mount without xattrs (`-o no_xattr`: the kernel
    /// then sends none and answers EOPNOTSUPP itself) or EOPNOTSUPP for an
    /// ACL name where the mount offers no ACLs (`is_acl`), or passed on
    /// with the credential it acts with.
    fn xattr_gate(
        &self,
        h: &crate::wire::Header,
        name: Option<&[u8]>,
        out: &mut Out,
    ) -> Option<dcache::cred::Cred> {
        self.stats.xattr_requests.add(1);
        if !self.cfg.xattr {
            out.error(libc::ENOSYS);
            return None;
        }
        if self.acls_hidden && name.is_some_and(is_acl) {
            out.error(libc::EOPNOTSUPP);
            return None;
        }
        Some(xattr_cred(h.uid, h.gid, h.pid, self.cfg.check_permissions))
    }

    /// The caller whose write or truncate drops set-id bits (the kernel
    /// said it lacks CAP_FSETID); its groups are read only if needed.
    fn killer(&self, h: &crate::wire::Header) -> dcache::cred::Cred {
        dcache::cred::Cred::of_task(h.uid, h.gid, h.pid, dcache::cred::Caps::NONE)
    }

    fn lookup(&self, h: &crate::wire::Header, name: &[u8], out: &mut Out) {
        let parent = node(h.nodeid);
        match self.core.lookup(&self.cred(h), parent, name) {
            Ok(Some(e)) => self.reply_entry(out, Ok(e)),
            Ok(None)
                if !self.cfg.timeouts.negative.is_zero()
                    && !self
                        .entry_ttl(self.core.searchable_by_all(parent))
                        .is_zero() =>
            {
                // Node id 0: the kernel caches the name as missing for the
                // entry timeout.
                let (entry_valid, entry_valid_nsec) = secs(self.cfg.timeouts.negative);
                out.push(&abi::EntryOut {
                    entry_valid,
                    entry_valid_nsec,
                    generation: GENERATION,
                    ..Default::default()
                });
            }
            Ok(None) => out.error(libc::ENOENT),
            Err(e) => out.error(e.raw()),
        }
    }

    fn setattr(&self, h: &crate::wire::Header, s: &abi::SetattrIn, out: &mut Out) {
        let id = node(h.nodeid);
        // A handle (ftruncate, futimens) names the same node: the change
        // goes to the node either way.
        let set = set_attr(s);
        // A directory that stops being searchable by everyone: the kernel
        // may still hold names under it with their timeouts, which it would
        // serve to callers who may no longer search there (it checks no
        // search permission itself under no_default_permissions). Ask it to
        // drop the directory's entry, and with it the subtree.
        let watch =
            self.cfg.check_permissions && set.perm.is_some() && self.core.searchable_by_all(id);
        let via_fh = s.valid & fattr::FH != 0;
        // A truncate by a caller without CAP_FSETID (a chown drops the bits
        // by its own rule, in the Vfs).
        let kill = s.valid & fattr::KILL_SUIDGID != 0 && set.uid.is_none() && set.gid.is_none();
        let r = self.core.setattr(&self.cred(h), id, &set, via_fh);
        let r = match r {
            Ok(_) if kill => {
                let _ = self.core.kill_suidgid(&self.killer(h), id);
                self.core.getattr(id)
            }
            r => r,
        };
        match r {
            Ok(a) => {
                self.attr_out(out, &a);
                if watch && !search_for_all(a.mode()) {
                    self.invalidate_entry_of(id);
                }
            }
            Err(e) => out.error(e.raw()),
        }
    }

    fn readdirplus(&self, id: u64, r: &abi::ReadIn, out: &mut Out) {
        let (entry_valid, entry_valid_nsec) =
            secs(self.entry_ttl(self.core.searchable_by_all(node(id))));
        let (attr_valid, attr_valid_nsec) = secs(self.cfg.timeouts.attr);
        let mut buf = out.dir(r.size);
        let max = r.size as usize / crate::wire::reply::DirBuf::PLUS_MIN;
        let res = self
            .core
            .readdirplus(node(id), r.offset, max, &mut |nodeid, off, name, a| {
                let e = abi::EntryOut {
                    nodeid,
                    generation: GENERATION,
                    entry_valid,
                    attr_valid,
                    entry_valid_nsec,
                    attr_valid_nsec,
                    attr: file_attr(a),
                };
                !buf.add_plus(&e, off, dirent_type(a.kind), name)
            });
        if let Err(e) = res {
            out.error(e.raw());
        }
        self.bound_kernel_nodes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::abi::Pod;
    use dcache::errno::Errno;

    #[test]
    fn helpers_answer_errors_without_a_body() {
        let mut o = Out::default();
        o.start(1);
        written(&mut o, Err(Errno::ENOSPC));
        assert_eq!((o.errno(), o.body().len()), (libc::ENOSPC, 0));
        o.start(2);
        written(&mut o, Ok(5));
        assert_eq!(o.body().len(), 8);
        o.start(3);
        xattr(&mut o, Ok(XattrReply::Size(12)));
        assert_eq!(abi::GetxattrOut::read_prefix(o.body()).size, 12);
    }
}
