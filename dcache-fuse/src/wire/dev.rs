//! The /dev/fuse channel: a descriptor of one FUSE connection. A worker
//! reads one request per `read` and answers with one `writev`; each worker
//! may have a descriptor of its own (`FUSE_DEV_IOC_CLONE`: same
//! connection, its own queue of requests being answered), so replies never
//! contend on one file. Notifications are writes with unique 0.

use std::fs::OpenOptions;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

use super::abi::{self, Pod};

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;
/// `FUSE_DEV_IOC_BACKING_OPEN`: `_IOW(229, 1, struct fuse_backing_map)`.
const FUSE_DEV_IOC_BACKING_OPEN: libc::c_ulong = 0x4010_e501;
/// `FUSE_DEV_IOC_BACKING_CLOSE`: `_IOW(229, 2, uint32_t)`.
const FUSE_DEV_IOC_BACKING_CLOSE: libc::c_ulong = 0x4004_e502;

/// One descriptor of a FUSE connection.
#[derive(Debug)]
pub struct Dev {
    fd: OwnedFd,
}

impl AsFd for Dev {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What a read of /dev/fuse gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A request of this many bytes is in the buffer.
    Request(usize),
    /// Nothing this time (interrupted, a request that went away, or a
    /// non-blocking descriptor with nothing queued): read again.
    Again,
    /// The connection is gone (unmounted or aborted).
    Gone,
}

impl Dev {
    /// Open /dev/fuse (not yet a connection: mounting makes it one).
    pub fn open() -> io::Result<Dev> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open("/dev/fuse")?;
        Ok(Dev { fd: f.into() })
    }

    /// A descriptor we were handed (by fusermount3).
    pub fn from_fd(fd: OwnedFd) -> Dev {
        Dev { fd }
    }

    /// Another descriptor of the same connection, for one more worker.
    pub fn clone_worker(&self) -> io::Result<Dev> {
        let new = Dev::open()?;
        let mut src: u32 =
            u32::try_from(self.fd.as_raw_fd()).map_err(|_| io::Error::other("fd"))?;
        // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (the source descriptor)
        // from the pointer, which points at a live local.
        let r = unsafe {
            libc::ioctl(
                new.fd.as_raw_fd(),
                FUSE_DEV_IOC_CLONE,
                std::ptr::from_mut(&mut src),
            )
        };
        if r == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(new)
    }

    /// Register `file` as a backing file of this connection (needs
    /// CAP_SYS_ADMIN and a kernel with FUSE passthrough): the id an OPEN
    /// reply names to have the kernel do that file's I/O itself. The
    /// kernel holds its own reference to the file; `file` may be closed.
    pub fn backing_open(&self, file: BorrowedFd<'_>) -> io::Result<i32> {
        let map = abi::BackingMap {
            fd: file.as_raw_fd(),
            flags: 0,
            padding: 0,
        };
        // SAFETY: the ioctl reads one fuse_backing_map from the pointer,
        // which points at a live local of that layout.
        let id = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                FUSE_DEV_IOC_BACKING_OPEN,
                std::ptr::from_ref(&map),
            )
        };
        if id < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(id)
    }

    /// Give back backing id `id` (files opened with it keep their own).
    pub fn backing_close(&self, id: i32) -> io::Result<()> {
        let id = u32::try_from(id).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: the ioctl reads one u32 from the pointer, a live local.
        let r = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                FUSE_DEV_IOC_BACKING_CLOSE,
                std::ptr::from_ref(&id),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Read one request into `buf` (at least [`abi::MIN_READ_BUFFER`] and
    /// max_write plus the write header).
    pub fn receive(&self, buf: &mut [u8]) -> io::Result<Received> {
        debug_assert!(buf.len() >= abi::MIN_READ_BUFFER);
        // SAFETY: read(2) into a live, exclusively borrowed buffer of
        // buf.len() bytes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            // n <= buf.len().
            return Ok(Received::Request(n as usize));
        }
        if n == 0 {
            // /dev/fuse never reads 0 bytes; another channel (a socket in
            // tests) does at its end.
            return Ok(Received::Gone);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // ENOENT: the request was interrupted before we read it.
            Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => Ok(Received::Again),
            Some(libc::ENODEV) => Ok(Received::Gone),
            _ => Err(e),
        }
    }

    /// Send a reply or notification. ENOENT (a reply to an interrupted
    /// request, a notification about something the kernel no longer has)
    /// comes back as an error for the caller to ignore or report.
    pub fn send(&self, iov: &[IoSlice<'_>]) -> io::Result<()> {
        let n = iov.len().min(libc::c_int::MAX as usize) as libc::c_int;
        // SAFETY: IoSlice is ABI-compatible with iovec; the slices borrow
        // live buffers for the duration of the call.
        let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr().cast(), n) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Sends the kernel notifications for one connection (from any thread;
/// never from inside a handler whose request the notification could wait
/// on).
#[derive(Clone, Debug)]
pub struct Notifier {
    dev: Arc<Dev>,
}

impl Notifier {
    /// Notifications on `dev`.
    pub fn new(dev: Arc<Dev>) -> Notifier {
        Notifier { dev }
    }

    /// The connection notifications go to.
    pub fn dev(&self) -> &Dev {
        &self.dev
    }

    fn notify(&self, code: i32, rec: &[u8], name: &[u8]) -> io::Result<()> {
        let len = std::mem::size_of::<abi::OutHeader>() + rec.len() + name.len();
        let h = abi::OutHeader {
            len: u32::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
            error: code,
            unique: 0,
        };
        self.dev.send(&[
            IoSlice::new(h.as_bytes()),
            IoSlice::new(rec),
            IoSlice::new(name),
        ])
    }

    /// Drop the kernel's entry `name` in directory `parent`
    /// (`FUSE_NOTIFY_INVAL_ENTRY`), with the subtree under it.
    pub fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        let rec = abi::NotifyInvalEntry {
            parent,
            namelen: u32::try_from(name.len())
                .map_err(|_| io::Error::from_raw_os_error(libc::ENAMETOOLONG))?,
            flags: 0,
        };
        let mut n = Vec::with_capacity(name.len() + 1);
        n.extend_from_slice(name);
        n.push(0);
        self.notify(abi::NOTIFY_INVAL_ENTRY, rec.as_bytes(), &n)
    }

    /// Drop node `node`'s cached attributes and pages from `off` for `len`
    /// bytes (0, 0: all of them) (`FUSE_NOTIFY_INVAL_INODE`).
    pub fn inval_inode(&self, node: u64, off: i64, len: i64) -> io::Result<()> {
        let rec = abi::NotifyInvalInode {
            ino: node,
            off,
            len,
        };
        self.notify(abi::NOTIFY_INVAL_INODE, rec.as_bytes(), &[])
    }
}
