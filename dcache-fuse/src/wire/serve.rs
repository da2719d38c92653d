//! Serving a connection: the INIT handshake, then worker threads that each
//! read a request, hand it to the [`Handler`] and write its reply, until
//! the connection goes away (unmount).

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::abi::{self, init, op};
use super::dev::{Dev, Received};
use super::reply::Out;
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
pub fn handshake<H: Handler>(dev: &Dev, handler: &mut H) -> io::Result<Negotiated> {
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
        let base = init::ASYNC_READ | init::BIG_WRITES | init::MAX_PAGES;
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
            unused: [0; 7],
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
        let mut first = Ok(());
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a FUSE worker panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

fn work<H: Handler>(dev: &Dev, handler: &H, access: Access) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    let mut out = Out::default();
    loop {
        let n = match dev.receive(&mut buf)? {
            Received::Request(n) => n,
            Received::Again => continue,
            Received::Gone => return Ok(()),
        };
        match Request::parse(&buf[..n]) {
            Ok(req) => {
                out.start(req.header.unique);
                if access.refuses(req.header.uid, req.header.opcode) {
                    out.error(libc::EACCES);
                } else {
                    handler.handle(&req, &mut out);
                }
            }
            Err(Malformed { unique: Some(u) }) => {
                out.start(u);
                out.error(libc::EINVAL);
            }
            // No header to answer: nothing can be sent back.
            Err(Malformed { unique: None }) => continue,
        }
        if out.wants_reply() {
            // ENOENT: the request was interrupted and is gone; nothing to
            // do. Any other error ends only this reply.
            let _ = dev.send(&out.iov());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
