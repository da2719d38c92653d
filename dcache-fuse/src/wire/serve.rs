//! Serving a connection: the INIT handshake, then worker threads that each
//! read a request, hand it to the [`Handler`] and write its reply, until
//! the connection goes away (unmount).

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::abi::{self, init, op};
use super::dev::{Dev, Received};
use super::reply::{LateSink, Out};
use super::request::{Malformed, Op, Request};

/// The largest write the kernel may send in one request (`max_write`):
/// 1 MiB, what 256 pages (`max_pages`) carry.
pub const MAX_WRITE: u32 = 1 << 20;

/// A worker's read buffer: a write request's header and arguments fit in
/// the page beyond the data.
const BUFFER: usize = MAX_WRITE as usize + 4096;

const _: () = assert!(BUFFER >= abi::MIN_READ_BUFFER);

/// What answers requests.
pub trait Handler: Send + Sync + 'static {
    /// The INIT handshake: `offered` are the kernel's capability flags
    /// (`flags | flags2 << 32`); returns those the handler wants, a subset
    /// of `offered` (the transport adds what it needs itself).
    fn init(&mut self, offered: u64) -> u64;

    /// Answer one request into `out` (started for it: success, empty).
    fn handle(&self, req: &Request<'_>, out: &mut Out);
}

/// Who may send requests besides the mounting user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Whoever the kernel lets in (it enforces owner-only without
    /// `allow_other`).
    Kernel,
    /// The owner `uid` and root only (`allow_root`): requests from anyone
    /// else are refused with EACCES, save those that end something
    /// already granted (libfuse's list).
    OwnerAndRoot(u32),
}

impl Access {
    fn refuses(&self, uid: u32, opcode: u32) -> bool {
        match *self {
            Access::Kernel => false,
            Access::OwnerAndRoot(owner) => {
                uid != owner
                    && uid != 0
                    && !matches!(
                        opcode,
                        op::INIT
                            | op::READ
                            | op::WRITE
                            | op::FSYNC
                            | op::RELEASE
                            | op::READDIR
                            | op::FSYNCDIR
                            | op::RELEASEDIR
                            | op::NOTIFY_REPLY
                            | op::READDIRPLUS
                            | op::FORGET
                            | op::BATCH_FORGET
                            | op::INTERRUPT
                            | op::DESTROY
                    )
            }
        }
    }
}

/// What the handshake settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The protocol minor version both sides speak.
    pub minor: u32,
    /// The capability flags in force.
    pub flags: u64,
}

/// Answer the kernel's INIT on `dev` (the first request of a new mount).
/// `uring`: ask for FUSE over io_uring where the kernel offers it (the
/// caller then registers the rings, [`super::uring`]).
pub fn handshake<H: Handler>(dev: &Dev, handler: &mut H, uring: bool) -> io::Result<Negotiated> {
    let mut buf = vec![0u8; BUFFER];
    let mut out = Out::default();
    loop {
        let n = match dev.receive(&mut buf)? {
            Received::Request(n) => n,
            Received::Again => continue,
            Received::Gone => return Err(io::Error::from_raw_os_error(libc::ENODEV)),
        };
        let req = Request::parse(&buf[..n]).map_err(|_| io::Error::other("malformed INIT"))?;
        out.start(req.header.unique);
        let Op::Init(i) = req.op else {
            out.error(libc::EIO);
            let _ = dev.send(&out.iov());
            return Err(io::Error::other("a request before INIT"));
        };
        if i.major > abi::MAJOR {
            // A newer kernel: tell it our major; it asks again.
            out.push(&abi::InitOut {
                major: abi::MAJOR,
                minor: abi::MINOR,
                ..Default::default()
            });
            dev.send(&out.iov())?;
            continue;
        }
        if i.major < abi::MAJOR || i.minor < 13 {
            out.error(libc::EPROTO);
            let _ = dev.send(&out.iov());
            return Err(io::Error::other(format!(
                "FUSE protocol {}.{} is too old",
                i.major, i.minor
            )));
        }
        let mut offered = u64::from(i.flags);
        if offered & init::INIT_EXT != 0 {
            offered |= u64::from(i.flags2) << 32;
        }
        let mut base = init::ASYNC_READ | init::BIG_WRITES | init::MAX_PAGES;
        if uring {
            base |= init::OVER_IO_URING;
        }
        let flags = (base | handler.init(offered)) & offered;
        let flags = if offered & init::INIT_EXT != 0 {
            flags | init::INIT_EXT
        } else {
            flags
        };
        let minor = i.minor.min(abi::MINOR);
        out.push(&abi::InitOut {
            major: abi::MAJOR,
            minor,
            max_readahead: i.max_readahead,
            flags: flags as u32,
            max_background: 16,
            congestion_threshold: 12,
            max_write: MAX_WRITE,
            time_gran: 1,
            max_pages: (MAX_WRITE / 4096) as u16,
            map_alignment: 0,
            flags2: (flags >> 32) as u32,
            // A backing file's filesystem is one level below ours.
            max_stack_depth: u32::from(flags & init::PASSTHROUGH != 0),
            unused: [0; 6],
        });
        dev.send(&out.iov())?;
        return Ok(Negotiated { minor, flags });
    }
}

/// The worker threads serving one connection.
#[derive(Debug)]
pub struct Workers {
    threads: Vec<JoinHandle<io::Result<()>>>,
}

/// Start `n` workers on `dev` (after the handshake). With `clone_fd`
/// every worker but the first reads a descriptor of its own.
pub fn start<H: Handler>(
    dev: &Arc<Dev>,
    handler: Arc<H>,
    n: usize,
    clone_fd: bool,
    access: Access,
) -> io::Result<Workers> {
    let mut threads = Vec::with_capacity(n);
    for k in 0..n.max(1) {
        let d = if k > 0 && clone_fd {
            Arc::new(dev.clone_worker()?)
        } else {
            dev.clone()
        };
        let h = handler.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("dcache-fuse-{k}"))
                .spawn(move || work(&d, &*h, access))?,
        );
    }
    Ok(Workers { threads })
}

impl Workers {
    /// Wait until every worker has seen the connection end.
    pub fn join(self) -> io::Result<()> {
        join_all(self.threads, "a FUSE worker panicked")
    }
}

/// Wait for every thread; the first error any ended with (`panicked` for
/// one that panicked).
pub(crate) fn join_all(
    threads: impl IntoIterator<Item = JoinHandle<io::Result<()>>>,
    panicked: &str,
) -> io::Result<()> {
    first_error(
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err(io::Error::other(panicked)))),
    )
}

/// The first error of `results`, all of them consumed (`Ok` if none).
pub(crate) fn first_error(results: impl Iterator<Item = io::Result<()>>) -> io::Result<()> {
    // Every result is taken (a thread joined, a message received) even
    // after an error: no short-circuit.
    let mut first = Ok(());
    for r in results {
        first = first.and(r);
    }
    first
}

/// A reply sent late over /dev/fuse: a write like any other, from the
/// thread that finished the request (the kernel matches it by `unique`).
impl LateSink for Dev {
    fn send_late(&self, _slot: usize, mut out: Out) {
        if out.wants_reply() {
            // ENOENT: the request was interrupted and is gone.
            let _ = self.send(&out.iov());
        }
    }
}

fn work<H: Handler>(dev: &Arc<Dev>, handler: &H, access: Access) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    let mut out = Out::default();
    out.set_late(dev.clone());
    loop {
        let n = match dev.receive(&mut buf)? {
            Received::Request(n) => n,
            Received::Again => continue,
            Received::Gone => return Ok(()),
        };
        if !answer(Request::parse(&buf[..n]), handler, access, &mut out) {
            continue;
        }
        if out.wants_reply() {
            // ENOENT: the request was interrupted and is gone; nothing to
            // do. Any other error ends only this reply.
            let _ = dev.send(&out.iov());
        }
    }
}

/// Answer one request, whichever transport brought it: refused, handled,
/// or EINVAL for one whose lengths do not add up. False when there is no
/// header to answer (nothing can be sent back).
pub(crate) fn answer<H: Handler>(
    parsed: Result<Request<'_>, Malformed>,
    handler: &H,
    access: Access,
    out: &mut Out,
) -> bool {
    match parsed {
        Ok(req) => {
            out.start(req.header.unique);
            if access.refuses(req.header.uid, req.header.opcode) {
                out.error(libc::EACCES);
            } else {
                handler.handle(&req, out);
            }
            true
        }
        Err(Malformed { unique: Some(u) }) => {
            out.start(u);
            out.error(libc::EINVAL);
            true
        }
        Err(Malformed { unique: None }) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::abi::Pod;
    use std::os::fd::{FromRawFd, OwnedFd};

    /// Two ends of a SOCK_SEQPACKET pair: one read returns one message,
    /// as a read of /dev/fuse returns one request.
    fn channel() -> (Dev, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: socketpair fills two descriptors we then own.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: both descriptors were just created and are ours alone.
        unsafe {
            (
                Dev::from_fd(OwnedFd::from_raw_fd(fds[0])),
                OwnedFd::from_raw_fd(fds[1]),
            )
        }
    }

    fn send(to: &OwnedFd, opcode: u32, unique: u64, uid: u32, body: &[u8]) {
        let h = abi::InHeader {
            len: (40 + body.len()) as u32,
            opcode,
            unique,
            nodeid: 1,
            uid,
            ..Default::default()
        };
        let mut m = h.as_bytes().to_vec();
        m.extend_from_slice(body);
        // SAFETY: write(2) of a live buffer.
        let n = unsafe {
            libc::write(
                std::os::fd::AsRawFd::as_raw_fd(to),
                m.as_ptr().cast(),
                m.len(),
            )
        };
        assert_eq!(n as usize, m.len());
    }

    fn recv(from: &OwnedFd) -> (abi::OutHeader, Vec<u8>) {
        let mut b = vec![0u8; 4096];
        // SAFETY: read(2) into a live buffer.
        let n = unsafe {
            libc::read(
                std::os::fd::AsRawFd::as_raw_fd(from),
                b.as_mut_ptr().cast(),
                b.len(),
            )
        };
        assert!(n >= 16, "a reply");
        let h = abi::OutHeader::read(&b).unwrap();
        assert_eq!(h.len as isize, n, "the header's length is the reply's");
        (h, b[16..n as usize].to_vec())
    }

    /// Answers LOOKUP of "x" with ENOENT and takes FORGETs silently.
    struct Toy(u64);

    impl Handler for Toy {
        fn init(&mut self, offered: u64) -> u64 {
            self.0 = offered;
            init::PARALLEL_DIROPS | init::POSIX_ACL
        }
        fn handle(&self, req: &Request<'_>, out: &mut Out) {
            match req.op {
                Op::Lookup { name: b"x" } => out.error(libc::ENOENT),
                Op::Forget(_) => out.none(),
                _ => out.error(libc::ENOSYS),
            }
        }
    }

    #[test]
    fn handshake_then_requests_over_a_channel() {
        let (dev, kernel) = channel();
        let dev = Arc::new(dev);
        // A newer major first: we answer with ours and wait for another.
        let init_in = |major, minor, flags| abi::InitIn {
            major,
            minor,
            max_readahead: 65536,
            flags,
            ..Default::default()
        };
        send(&kernel, op::INIT, 1, 0, init_in(8, 0, 0).as_bytes());
        let offered = (init::ASYNC_READ | init::PARALLEL_DIROPS | init::BIG_WRITES) as u32;
        send(&kernel, op::INIT, 2, 0, init_in(7, 45, offered).as_bytes());
        let mut toy = Toy(0);
        let n = handshake(&dev, &mut toy, true).unwrap();
        let (h, b) = recv(&kernel);
        let first = abi::InitOut::read_prefix(&b);
        assert_eq!((h.unique, first.major), (1, abi::MAJOR));
        let (h, b) = recv(&kernel);
        let out = abi::InitOut::read_prefix(&b);
        assert_eq!(
            (h.unique, h.error, out.major, out.minor),
            (2, 0, 7, abi::MINOR)
        );
        // Only what the kernel offered: POSIX_ACL was not.
        assert_eq!(
            u64::from(out.flags),
            init::ASYNC_READ | init::PARALLEL_DIROPS | init::BIG_WRITES
        );
        assert_eq!(n.flags, u64::from(out.flags));
        assert_eq!((out.max_write, out.max_readahead), (MAX_WRITE, 65536));
        assert_eq!(toy.0, u64::from(offered));

        let w = start(&dev, Arc::new(toy), 2, false, Access::OwnerAndRoot(1000)).unwrap();
        send(&kernel, op::LOOKUP, 3, 1000, b"x\0");
        let (h, b) = recv(&kernel);
        assert_eq!((h.unique, h.error, b.len()), (3, -libc::ENOENT, 0));
        // A FORGET gets no reply: the next reply is the next request's.
        send(
            &kernel,
            op::FORGET,
            4,
            1000,
            abi::ForgetIn { nlookup: 1 }.as_bytes(),
        );
        // Not the owner nor root: refused before the handler sees it.
        send(&kernel, op::LOOKUP, 5, 1001, b"x\0");
        let (h, _) = recv(&kernel);
        assert_eq!((h.unique, h.error), (5, -libc::EACCES));
        // A lying length is answered EINVAL.
        send(&kernel, op::LOOKUP, 6, 1000, b"no-nul");
        let (h, _) = recv(&kernel);
        assert_eq!((h.unique, h.error), (6, -libc::EINVAL));
        // An opcode nobody knows: ENOSYS from the handler.
        send(&kernel, 4242, 7, 1000, b"");
        let (h, _) = recv(&kernel);
        assert_eq!((h.unique, h.error), (7, -libc::ENOSYS));
        // The other end goes: every worker ends.
        drop(kernel);
        w.join().unwrap();
    }

    #[test]
    fn allow_root_refuses_others_but_lets_them_finish() {
        let a = Access::OwnerAndRoot(1000);
        assert!(!a.refuses(1000, op::LOOKUP));
        assert!(!a.refuses(0, op::LOOKUP));
        assert!(a.refuses(1001, op::LOOKUP));
        assert!(!a.refuses(1001, op::RELEASE));
        assert!(!a.refuses(1001, op::FORGET));
        assert!(!Access::Kernel.refuses(1001, op::LOOKUP));
    }
}
