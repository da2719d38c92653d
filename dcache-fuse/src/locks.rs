//! File locks through FUSE: GETLK, SETLK and SETLKW for a backend that
//! keeps locks ([`FileSystem::lock_scope`]), and the waiting that SETLKW
//! needs without tying up a worker.
//!
//! The backend's `setlk` never blocks: it takes the lock or answers
//! EAGAIN. A SETLKW that gets EAGAIN is *deferred* ([`Out::defer`]): the
//! worker (or io_uring queue) returns at once to other requests, and the
//! request waits in [`LockWaits`] under its `unique`, with a [`Later`]
//! that sends its reply from whichever thread finishes it. Before every
//! try after the first, a waker is registered with the backend
//! (`wake_on_unlock`), so a release that follows a failed try always
//! finds it; the waker only queues the request's `unique` for the retry
//! thread (it runs on a backend thread: the etcd watch, or the releasing
//! request's worker), which tries again, and replies or goes back to
//! waiting. An INTERRUPT naming a waiting request answers it EINTR (the
//! kernel then returns EINTR, or restarts the call for a signal handler
//! with SA_RESTART; a killed process can exit). An INTERRUPT that comes
//! before its request is waiting (the kernel sends it as soon as the
//! request was read) is remembered for a while and answers the request
//! when it starts to wait.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dcache::errno::{Errno, Result};
use dcache::fs::lock::{FileLock, Flavor, LockOwner};
use dcache::fs::{FileSystem, Ino};

use crate::inval::{InvalBarrier, InvalSlot, KernelInval};
use crate::lockbook::WaitBook;
use crate::sync::{Arc, Mutex};
use crate::wire::abi::{self, LkIn};
use crate::wire::reply::{Later, Out};

/// How long an INTERRUPT for a request not (yet) waiting is remembered.
const INTERRUPT_MEMORY: Duration = Duration::from_secs(30);

/// The owner of a `flock` taken through open file `fh`, from the kernel's
/// lock owner. The kernel names a `flock` by its `struct file`, whose
/// address another open may get as soon as the file is freed, before
/// this daemon has handled the RELEASE that drops the old one's lock:
/// owner alone, the new file would be taken for the holder (granted at
/// once while the old one still holds the lock, and released by the old
/// one's RELEASE). The handle `fh` stays the old file's until that RELEASE,
/// so the pair names one open file.
pub(crate) fn flock_owner(owner: u64, fh: u64) -> u64 {
    // splitmix64's finaliser over both: distinct pairs, distinct ids.
    let mut x = owner ^ fh.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The lock request a FUSE `fuse_lk_in` carries, as the backend takes it.
pub(crate) fn lock_request(arg: &LkIn) -> Result<(LockOwner, FileLock)> {
    let (flavor, id) = if arg.lk_flags & abi::LK_FLOCK != 0 {
        (Flavor::Flock, flock_owner(arg.owner, arg.fh))
    } else {
        (Flavor::Posix, arg.owner)
    };
    let owner = LockOwner {
        id,
        file: arg.fh,
        flavor,
    };
    let lock = FileLock::from_raw(arg.lk.kind as i32, arg.lk.start, arg.lk.end, arg.lk.pid)?;
    Ok((owner, lock))
}

/// A GETLK reply: the conflicting lock, or F_UNLCK for none.
pub(crate) fn lk_out(out: &mut Out, asked: &FileLock, r: Result<Option<FileLock>>) {
    match r {
        Ok(Some(l)) => out.push(&abi::LkOut {
            lk: abi::FileLock {
                start: l.start,
                end: l.end,
                kind: l.raw_kind() as u32,
                pid: l.pid,
            },
        }),
        Ok(None) => out.push(&abi::LkOut {
            lk: abi::FileLock {
                start: asked.start,
                end: asked.end,
                kind: libc::F_UNLCK as u32,
                pid: 0,
            },
        }),
        Err(e) => out.error(e.raw()),
    }
}

/// A SETLKW waiting for a conflicting lock to go.
struct Waiter {
    node: u64,
    ino: Ino,
    owner: LockOwner,
    lock: FileLock,
    reply: Later,
}

impl Waiter {
    fn interrupted(self) {
        self.reply.send(|o| o.error(libc::EINTR));
    }
}

/// A lock taken, to be answered once the kernel dropped its cache.
struct Granted {
    node: u64,
    ino: Ino,
    owner: LockOwner,
    lock: FileLock,
    reply: Later,
}

enum Msg {
    /// Try request `unique` again.
    Retry(u64),
    /// A lock was taken: drop the kernel's cached pages and attributes
    /// of the node, then answer.
    Granted(Granted),
    /// The session ends.
    Stop,
}

/// What the lock thread shares with the mount.
struct Shared {
    book: WaitBook<Waiter>,
    backend: Arc<dyn FileSystem>,
    /// The mount's invalidator queue (once mounted).
    inval: InvalSlot,
    /// Other hosts change files (a shared backend): a lock taken must not
    /// let the kernel serve pages, attributes or names it cached before.
    coherent: bool,
}

/// How long a grant waits for the kernel's invalidations at most; past
/// it the lock is given back and the request fails (EIO, logged): a lock
/// is never granted on a view the kernel may still serve stale.
const INVAL_WAIT: Duration = Duration::from_secs(30);

impl Shared {
    /// Lock-to-read coherence (as NFS gives): before a lock taken on a
    /// shared backend is answered, the kernel drops what it cached of the
    /// file (pages and attributes) and every invalidation queued before
    /// (names and attributes other hosts changed, which the backend
    /// reported up to the lock's revision before `setlk` returned) has
    /// been sent. The invalidator thread sends them, never a request
    /// handler (dropping pages may wait on a page a READ holds); this
    /// waits for it to pass a barrier queued after them.
    /// Whether the kernel's cache was dropped within [`INVAL_WAIT`] (no
    /// invalidator: nothing to drop).
    fn invalidate(&self, node: u64) -> bool {
        let Some(tx) = self.inval.get() else {
            return true;
        };
        let (btx, brx) = channel();
        {
            let tx = tx.lock().unwrap_or_else(|e| e.into_inner());
            let _ = tx.send(KernelInval::Inode { node });
            let _ = tx.send(KernelInval::Barrier(InvalBarrier(btx)));
        }
        // A barrier dropped unanswered (the invalidator is gone with its
        // connection) leaves nothing cached to serve.
        !matches!(
            brx.recv_timeout(INVAL_WAIT),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        )
    }

    /// A lock just taken for `owner` on `ino` (node `node`), answered once
    /// the kernel's cache of the file is dropped; if that does not happen
    /// in time, the lock is given back and the answer is EIO.
    fn grant(&self, node: u64, ino: Ino, owner: &LockOwner, lock: &FileLock) -> Result<()> {
        if self.invalidate(node) {
            return Ok(());
        }
        let undo = FileLock {
            kind: None,
            ..*lock
        };
        let _ = self.backend.setlk(ino, owner, &undo);
        tracing::warn!(
            target: "dcache_fuse",
            cause = "stale",
            "a lock on inode {ino} was refused (EIO): the kernel's cache of the file \
             was not dropped within {INVAL_WAIT:?}"
        );
        Err(Errno::EIO)
    }
}

/// The SETLKW requests of one mount that wait (see the module docs).
pub(crate) struct LockWaits {
    shared: Arc<Shared>,
    /// The lock thread's queue, once started (at the first wait or grant).
    retry: OnceLock<Mutex<Sender<Msg>>>,
    /// The clock INTERRUPTs are stamped with.
    epoch: Instant,
}

impl LockWaits {
    /// For `backend`; `coherent`: invalidate the kernel's cache of a file
    /// whose lock is granted (a backend shared across hosts).
    pub(crate) fn new(backend: Arc<dyn FileSystem>, coherent: bool, inval: InvalSlot) -> LockWaits {
        LockWaits {
            shared: Arc::new(Shared {
                book: WaitBook::new(),
                backend,
                inval,
                coherent,
            }),
            retry: OnceLock::new(),
            epoch: Instant::now(),
        }
    }

    /// The backend that keeps the locks.
    pub(crate) fn backend(&self) -> &dyn FileSystem {
        &*self.shared.backend
    }

    /// Requests waiting now.
    pub(crate) fn waiting(&self) -> usize {
        self.shared.book.waiting()
    }

    fn sender(&self) -> Sender<Msg> {
        let tx = self.retry.get_or_init(|| {
            let (tx, rx) = channel();
            let (shared, me) = (self.shared.clone(), tx.clone());
            // Without the thread nothing would retry: waiters would wait
            // until interrupted, which is what a failed spawn leaves.
            let _ = std::thread::Builder::new()
                .name("dcache-locks".into())
                .spawn(move || lock_loop(&shared, &me, &rx));
            Mutex::new(tx)
        });
        tx.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// SETLK / SETLKW `owner`'s `lock` on `ino`, answering into `out`:
    /// at once, or (SETLKW meeting a conflict, on a transport that can
    /// answer late) deferred until the lock is taken or the request is
    /// interrupted.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn setlk(
        &self,
        unique: u64,
        node: u64,
        ino: Ino,
        owner: LockOwner,
        lock: FileLock,
        sleep: bool,
        out: &mut Out,
    ) {
        let first = self.shared.backend.setlk(ino, &owner, &lock);
        if first.is_ok() && lock.kind.is_some() && self.shared.coherent {
            if let Some(later) = out.defer() {
                let _ = self.sender().send(Msg::Granted(Granted {
                    node,
                    ino,
                    owner,
                    lock,
                    reply: later,
                }));
                return;
            }
        }
        if !sleep || first != Err(Errno::EAGAIN) || lock.kind.is_none() {
            return reply(out, first);
        }
        let Some(later) = out.defer() else {
            // Nobody to answer late (a caller driving the handler
            // directly): wait here.
            return reply(out, self.wait_here(ino, &owner, &lock));
        };
        debug_assert_eq!(later.unique(), unique);
        let w = Waiter {
            node,
            ino,
            owner,
            lock,
            reply: later,
        };
        if let Some(w) = self.shared.book.park(unique, w) {
            return w.interrupted();
        }
        // The retry thread registers the waker and tries again, so a
        // release since our try is not missed.
        let _ = self.sender().send(Msg::Retry(unique));
    }

    /// INTERRUPT of request `unique`: a waiting SETLKW is answered EINTR;
    /// any other is remembered a while in case it is about to wait.
    pub(crate) fn interrupt(&self, unique: u64) {
        let now = self.epoch.elapsed();
        let forget = now.saturating_sub(INTERRUPT_MEMORY).as_millis() as u64;
        if let Some(w) = self
            .shared
            .book
            .interrupt(unique, now.as_millis() as u64, forget)
        {
            w.interrupted();
        }
    }

    /// F_SETLKW on this thread (no late replies): try, register, try
    /// again, sleep until woken.
    fn wait_here(&self, ino: Ino, owner: &LockOwner, l: &FileLock) -> Result<()> {
        loop {
            let (tx, rx) = channel::<()>();
            self.shared.backend.wake_on_unlock(
                ino,
                Box::new(move || {
                    let _ = tx.send(());
                }),
            );
            match self.shared.backend.setlk(ino, owner, l) {
                Err(Errno::EAGAIN) => {
                    let _ = rx.recv();
                }
                r => return r,
            }
        }
    }
}

impl Drop for LockWaits {
    fn drop(&mut self) {
        if let Some(tx) = self.retry.get() {
            let _ = tx.lock().unwrap_or_else(|e| e.into_inner()).send(Msg::Stop);
        }
        // Requests still waiting are left unanswered: the session is
        // over, and the kernel ends them with the connection.
    }
}

fn reply(out: &mut Out, r: Result<()>) {
    if let Err(e) = r {
        out.error(e.raw());
    }
}

fn lock_loop(shared: &Shared, me: &Sender<Msg>, rx: &Receiver<Msg>) {
    loop {
        let unique = match rx.recv() {
            Ok(Msg::Retry(u)) => u,
            Ok(Msg::Granted(g)) => {
                let r = shared.grant(g.node, g.ino, &g.owner, &g.lock);
                g.reply.send(|o| reply(o, r));
                continue;
            }
            Ok(Msg::Stop) | Err(_) => return,
        };
        // Out of the book while it is tried: an INTERRUPT meanwhile is
        // remembered and seen when it goes back.
        let Some(w) = shared.book.take(unique) else {
            continue;
        };
        // Registered before the try: a release after it wakes us.
        let tx = me.clone();
        shared.backend.wake_on_unlock(
            w.ino,
            Box::new(move || {
                let _ = tx.send(Msg::Retry(unique));
            }),
        );
        match shared.backend.setlk(w.ino, &w.owner, &w.lock) {
            Err(Errno::EAGAIN) => {
                if let Some(w) = shared.book.put_back(unique, w) {
                    w.interrupted();
                }
            }
            r => {
                let r = match r {
                    Ok(()) if shared.coherent => shared.grant(w.node, w.ino, &w.owner, &w.lock),
                    r => r,
                };
                w.reply.send(|o| reply(o, r));
            }
        }
    }
}
