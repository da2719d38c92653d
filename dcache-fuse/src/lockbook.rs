//! Who answers a waiting SETLKW: the book of waiting lock requests that
//! the FUSE lock layer (`locks.rs`) keeps, and the INTERRUPTs that may
//! race them. Three parties touch one request: the worker that parks it
//! after its first try failed ([`WaitBook::park`]), the retry thread that
//! takes it out to try again and puts it back when that fails
//! ([`WaitBook::take`], [`WaitBook::put_back`]), and the /dev/fuse worker
//! that reads an INTERRUPT for it ([`WaitBook::interrupt`]). Each call
//! that returns the waiter hands over the duty to answer it, so a
//! request is answered exactly once: by the try that settles it, or with
//! EINTR by whoever sees it interrupted while not settled. An INTERRUPT
//! that finds it out of the book (not parked yet, or being tried) is
//! remembered, and `park` / `put_back` find it.
//!
//! Model-checked in `tests/loom_lockbook.rs`.

use std::collections::HashMap;

use crate::sync::{Mutex, MutexGuard};

struct Inner<W> {
    waiting: HashMap<u64, W>,
    /// INTERRUPTs that found no waiting request, by unique, with a stamp
    /// (the caller's clock) for forgetting old ones.
    interrupted: HashMap<u64, u64>,
}

/// Waiting requests by `unique`, and unmatched INTERRUPTs.
pub struct WaitBook<W> {
    inner: Mutex<Inner<W>>,
}

impl<W> Default for WaitBook<W> {
    fn default() -> Self {
        WaitBook {
            inner: Mutex::new(Inner {
                waiting: HashMap::new(),
                interrupted: HashMap::new(),
            }),
        }
    }
}

impl<W> WaitBook<W> {
    /// An empty book.
    pub fn new() -> WaitBook<W> {
        WaitBook::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner<W>> {
        // A panic under this lock leaves two maps that are still
        // consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Park request `unique`. `Some(w)` when it was interrupted already:
    /// the caller answers it EINTR.
    pub fn park(&self, unique: u64, w: W) -> Option<W> {
        let mut g = self.lock();
        if g.interrupted.remove(&unique).is_some() {
            return Some(w);
        }
        g.waiting.insert(unique, w);
        None
    }

    /// Take request `unique` out to try it again; `None` if it is not
    /// waiting (answered already).
    pub fn take(&self, unique: u64) -> Option<W> {
        self.lock().waiting.remove(&unique)
    }

    /// The try of a taken request failed: it waits again, unless it was
    /// interrupted meanwhile (`Some(w)`: the caller answers EINTR).
    pub fn put_back(&self, unique: u64, w: W) -> Option<W> {
        self.park(unique, w)
    }

    /// INTERRUPT of `unique` at time `now` (any clock the caller keeps):
    /// the waiting request to answer EINTR, or `None` (it is remembered;
    /// ones stamped before `forget_before` are dropped).
    pub fn interrupt(&self, unique: u64, now: u64, forget_before: u64) -> Option<W> {
        let mut g = self.lock();
        if let Some(w) = g.waiting.remove(&unique) {
            return Some(w);
        }
        g.interrupted.retain(|_, t| *t >= forget_before);
        g.interrupted.insert(unique, now);
        None
    }

    /// How many requests wait.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}
