//! One queue of FUSE over io_uring: a ring of its own (SQE128, one
//! issuer, task work deferred to our waits), the /dev/fuse descriptor as
//! its one fixed file, and `depth` entries whose buffers ([`Region`]) the
//! kernel fills with requests. The thread that made it serves it: wait
//! for completions, answer each request with the [`Handler`] straight
//! from the entry's buffers, and send the reply and the fetch of the next
//! request as one COMMIT_AND_FETCH.
//!
//! When the kernel writes the buffers: only inside this thread's
//! `io_uring_enter` (a commit is read and the next request written while
//! the command is issued; a request for an idle entry is written by task
//! work, which `IORING_SETUP_DEFER_TASKRUN` runs only in our waits), and
//! only to entries whose command is in flight. An entry is ours from its
//! completion until its next command is pushed; that is the window in
//! which [`Region::entry`] is called.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::region::Region;
use crate::awake::Awake;
use crate::wire::abi::{self, uring, Pod};
use crate::wire::reply::{LateSink, Out};
use crate::wire::request::{Malformed, Request};
use crate::wire::serve::{answer, Access, Handler};

/// The stop poll's `user_data` (entries use their index).
const STOP: u64 = u64::MAX;
/// The late-reply poll's `user_data`.
const LATE: u64 = u64::MAX - 1;

/// Replies sent after their handler returned (a lock that waited): the
/// thread that finishes such a request posts its reply here with the
/// entry it came in, and wakes the queue's thread through the eventfd,
/// which the ring polls. The entry stays parked (not lent to the kernel)
/// until then; the queue's thread writes the reply into it and commits.
pub(super) struct Mailbox {
    replies: Mutex<Vec<(usize, Out)>>,
    efd: OwnedFd,
}

impl Mailbox {
    fn new() -> io::Result<Mailbox> {
        // SAFETY: eventfd(2) makes a new descriptor or fails.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Mailbox {
            replies: Mutex::new(Vec::new()),
            // SAFETY: the descriptor was just made and is ours alone.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn take(&self) -> Vec<(usize, Out)> {
        let mut buf = 0u64;
        // SAFETY: read(2) of 8 bytes into a live u64 from our eventfd
        // (non-blocking: nothing posted is EAGAIN, ignored).
        unsafe {
            libc::read(
                self.efd.as_raw_fd(),
                std::ptr::from_mut(&mut buf).cast(),
                std::mem::size_of::<u64>(),
            );
        }
        std::mem::take(&mut *self.replies.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl LateSink for Mailbox {
    fn send_late(&self, slot: usize, out: Out) {
        // The reply is queued before the eventfd is written, under the
        // mutex the queue's thread takes after it sees the eventfd
        // readable: it finds the reply, or a later wake-up does.
        self.replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((slot, out));
        let one: u64 = 1;
        // SAFETY: write(2) of 8 bytes from a live u64 to our eventfd.
        unsafe {
            libc::write(
                self.efd.as_raw_fd(),
                std::ptr::from_ref(&one).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }
}

/// An SQE128 ring whose completions are plain.
pub(super) type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

/// Make a ring for FUSE commands with room for `entries` commands.
pub(super) fn ring(entries: u32) -> io::Result<Ring> {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        // Only the serving thread submits, and task work (the kernel
        // copying a request into an idle entry) runs only when it waits:
        // never behind its back while it reads an entry.
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(entries.saturating_mul(2).max(2))
        .build(entries.max(1))
}

/// `sqe->len` of an SQE128 entry, which the io-uring crate's `UringCmd80`
/// does not set and REGISTER needs (the number of iovecs, 2).
fn with_len(mut sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is repr(C): a 64-byte `struct io_uring_sqe` then
    // 64 bytes of command. In the sqe (uapi io_uring.h) `len` is the u32
    // at byte 24, after opcode (u8), flags (u8), ioprio (u16), fd (s32),
    // off (u64) and addr (u64); the pointer stays inside `sqe`.
    unsafe {
        std::ptr::from_mut(&mut sqe)
            .cast::<u8>()
            .add(24)
            .cast::<u32>()
            .write_unaligned(len);
    }
    sqe
}

/// The 80-byte command area of a FUSE command for queue `qid`.
fn cmd_area(qid: u16, commit_id: u64) -> [u8; uring::SQE_CMD_SZ] {
    let req = abi::UringCmdReq {
        flags: 0,
        commit_id,
        qid,
        padding: [0; 3],
    };
    let mut c = [0u8; uring::SQE_CMD_SZ];
    c[..std::mem::size_of::<abi::UringCmdReq>()].copy_from_slice(req.as_bytes());
    c
}

/// A REGISTER of one entry (its iovec pair at `iovs`), for queue `qid`.
pub(super) fn register_sqe(
    dev: types::Fixed,
    qid: u16,
    iovs: u64,
    user_data: u64,
) -> squeue::Entry128 {
    let sqe = opcode::UringCmd80::new(dev, uring::CMD_REGISTER)
        .cmd(cmd_area(qid, 0))
        .addr(Some(iovs))
        .build()
        .user_data(user_data);
    with_len(sqe, 2)
}

/// One queue being served.
pub(super) struct Queue {
    // Field order is drop order: the ring goes first, and with it every
    // command that lends the kernel the region's buffers; the region is
    // unmapped after.
    ring: Ring,
    region: Region,
    qid: u16,
    /// Entries whose command the kernel still holds or will complete.
    live: usize,
    /// The commit id of each entry's request (0: none yet).
    commit: Vec<u64>,
    /// The first unexpected error a command completed with.
    failed: Option<io::Error>,
    /// Completions reaped while registering that the loop must still see
    /// (a request already in an entry, a REGISTER to send again).
    early: Vec<(u64, i32)>,
    /// Late replies for parked entries.
    mailbox: Arc<Mailbox>,
    /// Entries parked: their request's handler will answer later.
    parked: usize,
    /// Entries registered with the kernel so far (the first `depth`, then
    /// one spare per parked entry, up to all of them).
    registered: usize,
}

impl Queue {
    /// Make queue `qid`'s ring and buffers on `dev` and register every
    /// entry. Err when the kernel refused a registration at once (the
    /// kernel then serves the connection through /dev/fuse).
    pub(super) fn new(
        dev: RawFd,
        qid: u16,
        depth: usize,
        payload: usize,
        stop: &impl AsRawFd,
    ) -> io::Result<Queue> {
        let depth = depth.clamp(1, 4096);
        // As many spare entries, registered only as entries park (a lock
        // request waiting for its late reply), so that parked requests
        // do not take the queue's depth away from other requests. A
        // spare's pages are never touched until it is used.
        let total = depth * 2;
        let region = Region::new(total, payload)?;
        // Two more slots: the stop poll and the late-reply poll.
        let ring = ring(u32::try_from(total + 2).unwrap_or(u32::MAX))?;
        ring.submitter().register_files(&[dev])?;
        let mut q = Queue {
            ring,
            region,
            qid,
            live: 0,
            registered: depth,
            commit: vec![0; total],
            failed: None,
            early: Vec::new(),
            mailbox: Arc::new(Mailbox::new()?),
            parked: 0,
        };
        let poll = opcode::PollAdd::new(types::Fd(stop.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(STOP);
        q.push(&poll.into())?;
        q.arm_late()?;
        for e in 0..depth {
            let sqe = register_sqe(types::Fixed(0), qid, q.region.iov_addr(e), e as u64);
            q.push(&sqe)?;
            q.live += 1;
        }
        q.ring.submit()?;
        // A refused registration completes at once; an accepted one only
        // when a request comes (which the loop then answers).
        let mut refused = None;
        let done: Vec<(u64, i32)> = q
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (ud, res) in done {
            match res.wrapping_neg() {
                e if res < 0 && ud != STOP && e != libc::EAGAIN && e != libc::EINTR => {
                    refused.get_or_insert(io::Error::from_raw_os_error(e));
                }
                _ => q.early.push((ud, res)),
            }
        }
        match refused {
            Some(e) => Err(e),
            None => Ok(q),
        }
    }

    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        // SAFETY: the buffers a command names are the region's (iovecs and
        // their memory), which outlives the ring (field order); the
        // command area is copied into the queue.
        unsafe { self.ring.submission().push(sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    /// Poll the mailbox's eventfd (one shot: armed again each time it
    /// fires).
    fn arm_late(&mut self) -> io::Result<()> {
        let poll =
            opcode::PollAdd::new(types::Fd(self.mailbox.efd.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(LATE);
        self.push(&poll.into())
    }

    /// Commit the late replies posted for parked entries.
    fn send_late(&mut self) -> io::Result<()> {
        for (e, out) in self.mailbox.take() {
            if e >= self.commit.len() {
                continue;
            }
            // SAFETY: entry e is parked: its command completed (with the
            // request now answered) and nothing was pushed for it since,
            // so the kernel does not touch its buffers; this thread alone
            // serves the queue.
            let (head, payload) = unsafe { self.region.entry(e) };
            let commit_id = place_reply(head, payload, &out);
            self.commit[e] = commit_id;
            let sqe = self.commit_sqe(e, commit_id);
            self.push(&sqe)?;
            self.parked -= 1;
        }
        self.arm_late()
    }

    /// Serve until the connection ends (every entry completed with an
    /// error, ENOTCONN on unmount) or the stop poll fires; every round of
    /// completions touches the queue's keeper, if it has one.
    pub(super) fn serve<H: Handler>(
        mut self,
        handler: &H,
        access: Access,
        awake: Option<&Awake>,
    ) -> io::Result<()> {
        let mut out = Out::default();
        out.set_late(self.mailbox.clone());
        let mut done: Vec<(u64, i32)> = std::mem::take(&mut self.early);
        let origin = std::time::Instant::now();
        done.reserve(self.commit.len() + 1);
        loop {
            if done.is_empty() {
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    // A signal, or completions to reap first (EBUSY).
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                    Err(e) => return Err(e),
                }
                done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            }
            if let Some(a) = awake {
                a.touch(origin.elapsed().as_nanos() as u64);
            }
            let mut stop = false;
            for &(ud, res) in &done {
                if ud == STOP {
                    stop = true;
                    continue;
                }
                if ud == LATE {
                    self.send_late()?;
                    continue;
                }
                let Ok(e) = usize::try_from(ud) else { continue };
                if e >= self.commit.len() {
                    continue;
                }
                match res.wrapping_neg() {
                    0 => self.answer_entry(e, handler, access, &mut out)?,
                    libc::EAGAIN | libc::EINTR => self.resend(e)?,
                    // The connection is gone (unmount, abort) or the ring
                    // is going: the entry is done.
                    libc::ENOTCONN | libc::ECANCELED | libc::ECONNABORTED => self.live -= 1,
                    err => {
                        self.live -= 1;
                        self.failed.get_or_insert(io::Error::from_raw_os_error(err));
                    }
                }
            }
            done.clear();
            // The connection is gone when every entry still live is
            // parked and one has ended (all of them parked is a busy
            // queue: the late replies bring them back).
            if stop || (self.live == self.parked && self.live < self.registered) {
                return match self.failed.take() {
                    Some(e) => Err(io::Error::new(
                        e.kind(),
                        format!("io_uring queue {}: {e}", self.qid),
                    )),
                    None => Ok(()),
                };
            }
        }
    }

    /// Send entry `e`'s last command again (it completed with EAGAIN or
    /// EINTR: nothing was done).
    fn resend(&mut self, e: usize) -> io::Result<()> {
        let sqe = match self.commit[e] {
            0 => register_sqe(types::Fixed(0), self.qid, self.region.iov_addr(e), e as u64),
            id => self.commit_sqe(e, id),
        };
        self.push(&sqe)
    }

    fn commit_sqe(&self, e: usize, commit_id: u64) -> squeue::Entry128 {
        opcode::UringCmd80::new(types::Fixed(0), uring::CMD_COMMIT_AND_FETCH)
            .cmd(cmd_area(self.qid, commit_id))
            .build()
            .user_data(e as u64)
    }

    /// Answer the request in entry `e` and queue its commit.
    fn answer_entry<H: Handler>(
        &mut self,
        e: usize,
        handler: &H,
        access: Access,
        out: &mut Out,
    ) -> io::Result<()> {
        // SAFETY: entry e's command just completed (this completion), and
        // the entry is not submitted again until the commit queued below
        // (or, for a deferred reply, the one `send_late` queues).
        let (head, payload) = unsafe { self.region.entry(e) };
        out.set_slot(e);
        let Some(commit_id) = fill_reply(head, payload, handler, access, out) else {
            // Parked until its handler's late reply comes (the mailbox);
            // a spare entry takes its place while there is one.
            self.parked += 1;
            if self.registered < self.commit.len() {
                let s = self.registered;
                let sqe =
                    register_sqe(types::Fixed(0), self.qid, self.region.iov_addr(s), s as u64);
                self.push(&sqe)?;
                self.registered += 1;
                self.live += 1;
            }
            return Ok(());
        };
        self.commit[e] = commit_id;
        let sqe = self.commit_sqe(e, commit_id);
        self.push(&sqe)
    }
}

/// Parse the request in an entry's buffers, answer it, and write the
/// reply into the same buffers: the out header into the in/out area, the
/// records and data into the payload, their size into `payload_sz`.
/// Returns the commit id, or `None` when the handler deferred its reply
/// ([`Out::defer`]: the entry waits for it). A request whose sizes do not
/// add up is answered EINVAL; so is a reply larger than the payload
/// buffer.
pub(super) fn fill_reply<H: Handler>(
    head: &mut [u8],
    payload: &mut [u8],
    handler: &H,
    access: Access,
    out: &mut Out,
) -> Option<u64> {
    let io = abi::UringEntInOut::read(&head[uring::ENT_IN_OUT_OFFSET..]).unwrap_or_default();
    let commit_id = io.commit_id;
    let parsed = match usize::try_from(io.payload_sz) {
        Ok(n) if n <= payload.len() => Request::parse_parts(
            &head[..uring::IN_OUT_HEADER_SZ],
            &head[uring::IN_OUT_HEADER_SZ..uring::ENT_IN_OUT_OFFSET],
            &payload[..n],
        ),
        _ => Err(Malformed {
            unique: Some(commit_id),
        }),
    };
    // A handler that panics (a bug) costs its request an EIO, not the
    // queue: the thread and its ring must live on, or every later request
    // from this CPU would wait for an entry that never comes back.
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        answer(parsed, handler, access, out)
    }));
    match answered {
        Ok(true) if out.is_deferred() => return None,
        Ok(true) if out.wants_reply() => {}
        Err(_) => {
            out.start(commit_id);
            out.error(libc::EIO);
        }
        // Every request on a ring takes a reply (FORGET and INTERRUPT
        // come through /dev/fuse), and the entry's next fetch rides on it.
        Ok(_) => {
            out.start(commit_id);
            out.error(libc::ENOSYS);
        }
    }
    let (_, body, tail) = out.parts();
    if body.len() + tail.len() > payload.len() {
        out.error(libc::EINVAL);
    }
    Some(place_reply(head, payload, out))
}

/// Write the reply `out` into an entry's buffers (which hold its request:
/// the commit id is read from there), returning the commit id. The caller
/// has made sure the reply fits (a late reply is a record or an error).
fn place_reply(head: &mut [u8], payload: &mut [u8], out: &Out) -> u64 {
    let io = abi::UringEntInOut::read(&head[uring::ENT_IN_OUT_OFFSET..]).unwrap_or_default();
    let commit_id = io.commit_id;
    let (header, body, tail) = out.parts();
    let (header, body, tail) = if body.len() + tail.len() > payload.len() {
        let h = abi::OutHeader {
            len: std::mem::size_of::<abi::OutHeader>() as u32,
            error: -libc::EINVAL,
            unique: header.unique,
        };
        (h, &[][..], &[][..])
    } else {
        (header, body, tail)
    };
    let n = body.len() + tail.len();
    payload[..body.len()].copy_from_slice(body);
    payload[body.len()..n].copy_from_slice(tail);
    head[..std::mem::size_of::<abi::OutHeader>()].copy_from_slice(header.as_bytes());
    let io = abi::UringEntInOut {
        // n <= the payload buffer, which is far below 4 GiB.
        payload_sz: u32::try_from(n).unwrap_or(u32::MAX),
        ..io
    };
    head[uring::ENT_IN_OUT_OFFSET..].copy_from_slice(io.as_bytes());
    commit_id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::abi::op;
    use crate::wire::request::Op;

    #[test]
    fn register_sqe_carries_two_iovecs() {
        // The offset `with_len` writes is the one the crate's own builders
        // use for `len`.
        let readv =
            squeue::Entry128::from(opcode::Readv::new(types::Fd(3), std::ptr::null(), 2).build());
        // SAFETY: reading 4 bytes inside a 128-byte value.
        let len_at_24 = |e: &squeue::Entry128| unsafe {
            std::ptr::from_ref(e)
                .cast::<u8>()
                .add(24)
                .cast::<u32>()
                .read_unaligned()
        };
        assert_eq!(len_at_24(&readv), 2);
        let r = register_sqe(types::Fixed(0), 3, 0x1000, 7);
        assert_eq!(len_at_24(&r), 2);
        assert_eq!(r.get_user_data(), 7);
        let a = cmd_area(3, 99);
        let req = abi::UringCmdReq::read(&a).unwrap();
        assert_eq!((req.qid, req.commit_id, req.flags), (3, 99, 0));
        assert!(a[24..].iter().all(|&b| b == 0));
    }

    struct Echo;

    impl Handler for Echo {
        fn init(&mut self, _: u64) -> u64 {
            0
        }
        fn handle(&self, req: &Request<'_>, out: &mut Out) {
            match req.op {
                Op::Lookup { name } => out.bytes(name),
                Op::Write { arg, data } => {
                    out.push(&abi::WriteOut {
                        size: arg.size,
                        padding: 0,
                    });
                    out.data(data.to_vec());
                }
                Op::Forget(_) => out.none(),
                Op::Readlink => panic!("a handler bug"),
                _ => out.error(libc::ENOSYS),
            }
        }
    }

    /// An entry as the kernel fills it: header, first record, payload.
    fn entry(opcode: u32, unique: u64, first: &[u8], payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut head = vec![0u8; 288];
        let h = abi::InHeader {
            len: (40 + first.len() + payload.len()) as u32,
            opcode,
            unique,
            nodeid: 1,
            ..Default::default()
        };
        head[..40].copy_from_slice(h.as_bytes());
        head[128..128 + first.len()].copy_from_slice(first);
        let io = abi::UringEntInOut {
            commit_id: unique,
            payload_sz: payload.len() as u32,
            ..Default::default()
        };
        head[256..].copy_from_slice(io.as_bytes());
        let mut p = vec![0u8; 4096];
        p[..payload.len()].copy_from_slice(payload);
        (head, p)
    }

    fn reply(head: &[u8], payload: &[u8]) -> (abi::OutHeader, Vec<u8>) {
        let h = abi::OutHeader::read(head).unwrap();
        let io = abi::UringEntInOut::read(&head[256..]).unwrap();
        (h, payload[..io.payload_sz as usize].to_vec())
    }

    #[test]
    fn requests_are_answered_in_the_entry() {
        let mut out = Out::default();
        let (mut h, mut p) = entry(op::LOOKUP, 5, &[], b"name\0");
        assert_eq!(
            fill_reply(&mut h, &mut p, &Echo, Access::Kernel, &mut out),
            Some(5)
        );
        let (oh, body) = reply(&h, &p);
        assert_eq!((oh.unique, oh.error, body.as_slice()), (5, 0, &b"name"[..]));

        // A write: the record in the per-opcode area, the data in the
        // payload; the reply's record then data in the payload.
        let w = abi::WriteIn {
            size: 3,
            ..Default::default()
        };
        let (mut h, mut p) = entry(op::WRITE, 6, w.as_bytes(), b"xyz");
        fill_reply(&mut h, &mut p, &Echo, Access::Kernel, &mut out);
        let (oh, body) = reply(&h, &p);
        assert_eq!((oh.unique, oh.error, body.len()), (6, 0, 8 + 3));
        assert_eq!(abi::WriteOut::read(&body).unwrap().size, 3);
        assert_eq!(&body[8..], b"xyz");

        // Refused, and malformed (no NUL; a payload size past the buffer;
        // a write claiming more data than the payload holds): answered.
        let (mut h, mut p) = entry(op::LOOKUP, 7, &[], b"x\0");
        h[24..28].copy_from_slice(&1001u32.to_ne_bytes()); // uid
        fill_reply(&mut h, &mut p, &Echo, Access::OwnerAndRoot(1000), &mut out);
        assert_eq!(reply(&h, &p).0.error, -libc::EACCES);
        let (mut h, mut p) = entry(op::LOOKUP, 8, &[], b"no-nul");
        fill_reply(&mut h, &mut p, &Echo, Access::Kernel, &mut out);
        assert_eq!(
            (reply(&h, &p).0.unique, reply(&h, &p).0.error),
            (8, -libc::EINVAL)
        );
        let (mut h, mut p) = entry(op::LOOKUP, 9, &[], b"x\0");
        h[256 + 16..256 + 20].copy_from_slice(&5000u32.to_ne_bytes());
        fill_reply(&mut h, &mut p, &Echo, Access::Kernel, &mut out);
        assert_eq!(reply(&h, &p).0.error, -libc::EINVAL);
        let w = abi::WriteIn {
            size: 100,
            ..Default::default()
        };
        let (mut h, mut p) = entry(op::WRITE, 10, w.as_bytes(), b"xyz");
        fill_reply(&mut h, &mut p, &Echo, Access::Kernel, &mut out);
        assert_eq!(reply(&h, &p).0.error, -libc::EINVAL);

        // A reply the handler would not send still goes back (ENOSYS): the
        // entry's next fetch rides on it.
        let (mut h, mut p) = entry(op::FORGET, 11, &1u64.to_ne_bytes(), &[]);
        assert_eq!(
            fill_reply(&mut h, &mut p, &Echo, Access::Kernel, &mut out),
            Some(11)
        );
        assert_eq!(reply(&h, &p).0.error, -libc::ENOSYS);

        // A handler that panics: EIO, and the queue goes on.
        let (mut h, mut p) = entry(op::READLINK, 13, &[], &[]);
        assert_eq!(
            fill_reply(&mut h, &mut p, &Echo, Access::Kernel, &mut out),
            Some(13)
        );
        assert_eq!(reply(&h, &p).0.error, -libc::EIO);

        // A reply larger than the payload buffer: EINVAL, nothing copied.
        let w = abi::WriteIn {
            size: 100,
            ..Default::default()
        };
        let (mut h, _) = entry(op::WRITE, 12, w.as_bytes(), &[7u8; 100]);
        let mut exact = vec![7u8; 100];
        fill_reply(&mut h, &mut exact, &Echo, Access::Kernel, &mut out);
        let (oh, body) = reply(&h, &exact);
        assert_eq!((oh.unique, oh.error, body.len()), (12, -libc::EINVAL, 0));
    }
}
