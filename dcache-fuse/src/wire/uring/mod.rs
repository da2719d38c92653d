//! FUSE over io_uring (Linux 6.14+, protocol 7.42): requests come on
//! rings instead of `read(2)`s of /dev/fuse, and a reply and the fetch of
//! the next request are one submission.
//!
//! How the kernel drives it (`fs/fuse/dev_uring.c`):
//! - INIT negotiates `FUSE_OVER_IO_URING` (offered only while
//!   `/sys/module/fuse/parameters/enable_uring` is Y). From then on new
//!   requests wait until the ring is *ready*: every possible CPU's queue
//!   (`qid` = CPU index, `num_possible_cpus()` of them) has an entry
//!   registered. So [`start`] registers a queue for every possible CPU or
//!   the mount stalls; where it cannot, it makes the kernel give up the
//!   ring (a REGISTER the kernel refuses clears the connection's io_uring
//!   and wakes the waiters), and requests flow through /dev/fuse again.
//! - A request goes to the queue of the CPU its caller runs on; each queue
//!   here has a thread of its own, pinned to that CPU.
//! - FORGET, BATCH_FORGET and INTERRUPT still come through /dev/fuse, and
//!   notifications still go there: the /dev/fuse workers keep reading.
//! - On unmount every entry completes with ENOTCONN and the queue's thread
//!   ends; [`Rings::stop`] ends them otherwise.
//!
//! The parts: `region` (the buffers lent to the kernel) and `queue` (one
//! ring and its serving loop).

mod queue;
mod region;

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use io_uring::types;

use super::dev::Dev;
#[cfg(doc)]
use super::serve::MAX_WRITE;
use super::serve::{first_error, join_all, Access, Handler};

/// Entries per queue unless the caller says otherwise (libfuse's default).
pub const DEFAULT_DEPTH: usize = 8;

/// The module parameter that lets connections use io_uring.
pub const ENABLE_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the running kernel lets FUSE use io_uring now: `Some(true)`
/// when `enable_uring` is Y, `None` when the kernel has no such parameter
/// (older than 6.14, or built without `CONFIG_FUSE_IO_URING`).
pub fn kernel_enabled() -> Option<bool> {
    let s = std::fs::read_to_string(ENABLE_PARAM).ok()?;
    Some(s.trim_start().starts_with(['Y', 'y', '1']))
}

/// Whether this process can make the rings FUSE commands need (io_uring
/// may be switched off by `kernel.io_uring_disabled`, or refused by a
/// seccomp filter). Asked before INIT: once FUSE_OVER_IO_URING is agreed,
/// the kernel holds requests until a ring is registered.
pub fn usable() -> bool {
    queue::ring(2).is_ok()
}

/// How many queues the kernel expects: one per possible CPU
/// (`/sys/devices/system/cpu/possible`, a list like `0-3,8-11`).
pub fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(s.trim()).ok_or_else(|| io::Error::other(format!("cpu list {s:?}")))
}

fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let a = part.parse().ok()?;
                (a, a)
            }
        };
        n = n.checked_add(b.checked_sub(a)? + 1)?;
    }
    (n > 0).then_some(n)
}

/// The queue threads serving one connection.
#[derive(Debug)]
pub struct Rings {
    threads: Vec<JoinHandle<io::Result<()>>>,
    /// Readable once [`Rings::stop`] was called: every queue polls it.
    stop: Arc<OwnedFd>,
    depth: usize,
}

/// What [`start`] did.
#[derive(Debug)]
pub enum Started {
    /// Every queue is registered: the kernel sends requests on the rings.
    Rings(Rings),
    /// A queue could not be made or registered (the error says which and
    /// why); the kernel was told to use /dev/fuse for this connection.
    FellBack(io::Error),
}

/// Start one queue per possible CPU on `dev` (after a handshake that
/// agreed FUSE_OVER_IO_URING), `depth` entries each with a payload buffer
/// of `payload` bytes (the kernel refuses one smaller than the max_write
/// INIT agreed: [`MAX_WRITE`]). With `awake`, each queue's CPU is kept
/// from halting for that long after the queue's last request
/// ([`crate::awake`]). Err only when a queue failed and the kernel could
/// not be told to use /dev/fuse instead: the connection cannot be served
/// then.
pub fn start<H: Handler>(
    dev: &Arc<Dev>,
    handler: Arc<H>,
    access: Access,
    depth: usize,
    payload: usize,
    awake: Option<Duration>,
) -> io::Result<Started> {
    let mut rings = Rings {
        threads: Vec::new(),
        stop: Arc::new(eventfd()?),
        depth,
    };
    let started = rings.spawn(dev, handler, access, payload, awake);
    if let Err(e) = started {
        rings.stop();
        let _ = rings.join();
        give_up(dev).map_err(|g| {
            io::Error::other(format!(
                "{e}; and the kernel could not be told to use /dev/fuse instead: {g}"
            ))
        })?;
        return Ok(Started::FellBack(e));
    }
    Ok(Started::Rings(rings))
}

impl Rings {
    fn spawn<H: Handler>(
        &mut self,
        dev: &Arc<Dev>,
        handler: Arc<H>,
        access: Access,
        payload: usize,
        awake: Option<Duration>,
    ) -> io::Result<()> {
        let n = possible_cpus()?;
        let qids = u16::try_from(n).map_err(|_| io::Error::other("too many CPUs"))?;
        let (tx, rx) = mpsc::channel::<io::Result<()>>();
        for qid in 0..qids {
            let (dev, handler, stop, tx) =
                (dev.clone(), handler.clone(), self.stop.clone(), tx.clone());
            let depth = self.depth;
            let t = std::thread::Builder::new()
                .name(format!("dcache-ring-{qid}"))
                .spawn(move || {
                    pin_to_cpu(usize::from(qid));
                    // No keeper is no loss but speed: its errors are not
                    // the queue's.
                    let keeper = awake.and_then(|w| crate::awake::start(usize::from(qid), w).ok());
                    let q = queue::Queue::new(dev.as_fd().as_raw_fd(), qid, depth, payload, &*stop);
                    let served = match q {
                        Ok(q) => {
                            let _ = tx.send(Ok(()));
                            q.serve(&*handler, access, keeper.as_ref().map(|(a, _)| &**a))
                        }
                        Err(e) => {
                            let _ = tx.send(Err(io::Error::new(
                                e.kind(),
                                format!("io_uring queue {qid}: {e}"),
                            )));
                            Ok(())
                        }
                    };
                    if let Some((a, t)) = keeper {
                        a.stop();
                        let _ = t.join();
                    }
                    served
                })?;
            self.threads.push(t);
        }
        drop(tx);
        first_error((0..n).map(|_| {
            rx.recv()
                .unwrap_or_else(|_| Err(io::Error::other("an io_uring queue thread died")))
        }))
    }

    /// Queues serving.
    pub fn queues(&self) -> usize {
        self.threads.len()
    }

    /// Entries per queue.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Make every queue thread end at its next wake-up (dropping its ring
    /// cancels the commands it has with the kernel). Used when the
    /// connection is already gone, or was never served by the rings.
    pub fn stop(&self) {
        let one: u64 = 1;
        // SAFETY: write(2) of 8 bytes from a live u64 to our eventfd.
        unsafe {
            libc::write(
                self.stop.as_raw_fd(),
                std::ptr::from_ref(&one).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }

    /// Wait for every queue thread; the first error any ended with.
    pub fn join(self) -> io::Result<()> {
        join_all(self.threads, "an io_uring queue thread panicked")
    }
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) makes a new descriptor or fails.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just made and is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Run this thread on `cpu` only: its queue gets the requests of callers
/// running there, so caller and server share the CPU's caches, and the
/// caller, waiting for the reply, leaves it free. Best effort.
fn pin_to_cpu(cpu: usize) {
    let _ = crate::awake::pin_to_cpu(cpu);
}

/// Make the kernel serve this connection through /dev/fuse after all: a
/// REGISTER for a queue that does not exist is refused, and a refused
/// REGISTER clears the connection's io_uring and wakes the requests
/// waiting for the ring.
fn give_up(dev: &Dev) -> io::Result<()> {
    let mut ring = queue::ring(2)?;
    let sqe = queue::register_sqe(types::Fixed(0), u16::MAX, 0, 0);
    ring.submitter()
        .register_files(&[dev.as_fd().as_raw_fd()])?;
    // SAFETY: the command names no buffer (address 0; the kernel refuses
    // the queue number before it would look).
    unsafe { ring.submission().push(&sqe) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    ring.submit_and_wait(1)?;
    let res = ring.completion().next().map(|c| c.result());
    match res {
        // Refused: what we wanted.
        Some(r) if r < 0 => Ok(()),
        _ => Err(io::Error::other("a REGISTER for no queue was accepted")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-3,8-11"), Some(8));
        assert_eq!(parse_cpu_list("0,2,4"), Some(3));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert!(possible_cpus().unwrap() >= 1);
    }
}
