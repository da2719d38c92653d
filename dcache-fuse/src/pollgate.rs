//! When to busy-poll a request queue instead of sleeping on it.
//!
//! A server thread that sleeps in `read(2)` pays a wake-up for every request:
//! the sender's CPU queues the request, then interrupts the sleeper's CPU,
//! which must leave its idle state (in a virtual machine: be scheduled again
//! by the host) before it can read. On the machines we measured that wake-up
//! is most of a FUSE round trip. A thread that keeps calling a non-blocking
//! `read` instead finds the request as soon as it is queued, at the price of
//! a busy CPU. [`PollGate`] decides when that price is worth paying:
//!
//! - **hot**: a request arrived recently. The source is non-blocking and its
//!   reader spins on it.
//! - **cold**: a whole window passed without a request. The source blocks
//!   again, and the next request (after one ordinary wake-up) makes it hot.
//!
//! Every request calls [`PollGate::touch`]; a governor calls
//! [`PollGate::tick`] once per window while the gate is hot. The two only
//! meet on the rare hot/cold change, which takes a mutex so that the
//! source's real mode always equals `hot` when nobody holds it. Everything
//! else is a hint: a `touch` that races a `tick` can let the gate cool while
//! a request is being served, which costs that server one wake-up on the
//! next request, never a lost or stuck request.

use crate::sync::{AtomicU8, Mutex, Ordering};

/// Where a [`PollGate`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollState {
    /// The source blocks; the next request makes it hot.
    Cold,
    /// The source is polled.
    Hot,
}

const COLD: u8 = 0;
const HOT: u8 = 1;

fn decode(s: u8) -> PollState {
    if s == HOT {
        PollState::Hot
    } else {
        PollState::Cold
    }
}

/// The hot/cold state of one request source (see the module docs).
#[derive(Debug, Default)]
pub struct PollGate {
    /// Whether a request arrived since the last tick (0 or 1).
    seen: AtomicU8,
    /// COLD or HOT. Read by every request; written only with `mode`
    /// held, and always together with the source's real mode.
    state: AtomicU8,
    /// Held while the source's mode is changed.
    mode: Mutex<()>,
}

impl PollGate {
    /// A cold gate.
    pub fn new() -> PollGate {
        PollGate::default()
    }

    /// Where the gate stands now.
    pub fn state(&self) -> PollState {
        // Relaxed: a stale answer only delays the governor by one round.
        decode(self.state.load(Ordering::Relaxed))
    }

    /// A request arrived. If the gate was cold, call `set(true)` to make the
    /// source non-blocking and return true (the governor must start ticking).
    #[inline]
    pub fn touch(&self, set: impl FnOnce(bool)) -> bool {
        // Relaxed on both: `seen` and `state` are hints here (module docs);
        // reading `seen` first keeps its cache line shared between requests.
        if self.seen.load(Ordering::Relaxed) == 0 {
            self.seen.store(1, Ordering::Relaxed);
        }
        if self.state.load(Ordering::Relaxed) != COLD {
            return false;
        }
        self.heat(set)
    }

    #[cold]
    fn heat(&self, set: impl FnOnce(bool)) -> bool {
        let _m = lock(&self.mode);
        // Relaxed: `state` is written only under `mode`, which we hold.
        if self.state.load(Ordering::Relaxed) != COLD {
            return false;
        }
        set(true);
        self.state.store(HOT, Ordering::Relaxed);
        true
    }

    /// One window has passed. If the gate is hot and no request arrived
    /// during the window, call `set(false)` to make the source block again.
    /// Returns the state after.
    pub fn tick(&self, set: impl FnOnce(bool)) -> PollState {
        if self.state.load(Ordering::Relaxed) != HOT {
            return self.state();
        }
        // Relaxed: a request that lands just after the swap is seen by the
        // next tick (or by the check below).
        if self.seen.swap(0, Ordering::Relaxed) != 0 {
            return PollState::Hot;
        }
        let _m = lock(&self.mode);
        // A request between the swap and the lock keeps us hot: this
        // narrows (it cannot close) the window in which a touch sees HOT
        // just before we clear it.
        if self.seen.load(Ordering::Relaxed) != 0 || self.state.load(Ordering::Relaxed) != HOT {
            return self.state();
        }
        set(false);
        self.state.store(COLD, Ordering::Relaxed);
        PollState::Cold
    }
}

/// A poisoned mode lock only means a `set` panicked; the flags are still
/// consistent with the last completed change.
fn lock<T>(m: &Mutex<T>) -> crate::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn cold_until_touched_then_cools_after_a_quiet_window() {
        let g = PollGate::new();
        let mode = Cell::new(false);
        let set = |on: bool| mode.set(on);
        assert_eq!(g.state(), PollState::Cold);
        assert_eq!(g.tick(set), PollState::Cold, "a cold gate stays cold");
        assert!(g.touch(set), "the first request heats");
        assert!(mode.get());
        assert_eq!(g.state(), PollState::Hot);
        assert!(!g.touch(|_| panic!("already hot")));
        assert_eq!(g.tick(set), PollState::Hot, "a window with a request");
        assert!(mode.get());
        assert_eq!(g.tick(set), PollState::Cold, "a quiet window cools");
        assert!(!mode.get());
        assert!(g.touch(set), "and the next request heats again");
        assert!(mode.get());
    }
}
