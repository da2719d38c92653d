//! The concurrency tests' oracle: a history of which inode held which
//! name when, recorded by the threads that change the names, against which
//! every lookup answer is checked.
//!
//! Each mutator thread owns its names, so it can log their history
//! without races: before an operation it takes a tick (`t0`), after it
//! another (`t1`); a name it created was held from some instant in
//! `[t0, t1]`, so the hold's *loose* start is `t0` (the true start is no
//! earlier) and its *tight* start `t1` (no later); an end likewise. A
//! lookup that ran during `[t0, t1]` is correct for a linearizable
//! namespace when its answer was the name's state at some instant of
//! that window: [`Oracle::lag`] is 0. A cache allowed to be up to `S`
//! stale (another client's etcd cache) must answer with a state of some
//! instant in `[t0 - S, t1]`: `lag <= S`.
//!
//! Ticks are nanoseconds since the oracle was made, strictly increasing
//! across threads (a shared counter never behind the monotonic clock), so
//! lags are real time.
//!
//! Shared by `dcache/tests/stress.rs` (one Vfs) and
//! `dcache-etcd/tests/concurrent.rs` (two clients on one etcd), which
//! includes this file by path.

#![allow(dead_code)] // each includer uses its part

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use dcache::{At, Errno, RenameFlags, Vfs};

/// One period during which `ino` held a name. `loose_*` contain the true
/// period, `tight_*` are contained in it (None = still holding).
#[derive(Clone, Debug)]
struct Held {
    ino: u64,
    loose_start: u64,
    tight_start: u64,
    tight_end: Option<u64>,
    loose_end: Option<u64>,
}

pub struct Oracle {
    epoch: Instant,
    clock: AtomicU64,
    history: Mutex<HashMap<String, Vec<Held>>>,
    /// Per mutator: a tick no later than the start of its operation whose
    /// history is not recorded yet (u64::MAX when none).
    busy: Vec<AtomicU64>,
}

impl Oracle {
    pub fn new(mutators: usize) -> Oracle {
        Oracle {
            epoch: Instant::now(),
            clock: AtomicU64::new(1),
            history: Mutex::new(HashMap::new()),
            busy: (0..mutators).map(|_| AtomicU64::new(u64::MAX)).collect(),
        }
    }

    /// Now, in nanoseconds since the oracle was made; every call returns
    /// more than every call that returned before it started.
    pub fn tick(&self) -> u64 {
        let now = self.epoch.elapsed().as_nanos() as u64;
        // SeqCst: the ticks are one total order with `enter`'s load.
        let mut prev = self.clock.load(Ordering::SeqCst);
        loop {
            let next = now.max(prev + 1);
            match self
                .clock
                .compare_exchange_weak(prev, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(p) => prev = p,
            }
        }
    }

    /// Nanoseconds `ns` as milliseconds, for messages.
    pub fn ms(ns: u64) -> f64 {
        ns as f64 / 1e6
    }

    /// Called by mutator `t` before each operation's first tick. SeqCst
    /// with `tick`: a reader whose window ends after our start sees this.
    pub fn enter(&self, t: usize) {
        self.busy[t].store(self.clock.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    pub fn leave(&self, t: usize) {
        self.busy[t].store(u64::MAX, Ordering::SeqCst);
    }

    /// Wait until every operation that started by `t1` is in the history
    /// (for checking while the mutators still run).
    pub fn settle(&self, t1: u64) {
        for b in &self.busy {
            while b.load(Ordering::SeqCst) <= t1 {
                std::thread::yield_now();
            }
        }
    }

    /// `ino` took `name` by an operation that ran during `[t0, t1]`.
    pub fn begin_hold(&self, name: &str, ino: u64, t0: u64, t1: u64) {
        self.history
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .push(Held {
                ino,
                loose_start: t0,
                tight_start: t1,
                tight_end: None,
                loose_end: None,
            });
    }

    /// `name`'s holder lost it by an operation that ran during `[t0, t1]`.
    pub fn end_hold(&self, name: &str, t0: u64, t1: u64) {
        let mut h = self.history.lock().unwrap();
        let last = h.get_mut(name).and_then(|v| v.last_mut()).expect("held");
        assert!(last.loose_end.is_none());
        last.tight_end = Some(t0);
        last.loose_end = Some(t1);
    }

    /// How long before `t0` the namespace last was as a lookup of `name`
    /// during `[t0, t1]` answered (`answer`: the inode, None for ENOENT):
    /// 0 when it was so at some instant of the window, None when it never
    /// was by `t1` (an inode that never held the name).
    pub fn lag(&self, name: &str, answer: Option<u64>, t0: u64, t1: u64) -> Option<u64> {
        let h = self.history.lock().unwrap();
        let holds = h.get(name).map(Vec::as_slice).unwrap_or(&[]);
        match answer {
            // The latest instant by t1 at which `ino` may have held it.
            Some(ino) => holds
                .iter()
                .filter(|p| p.ino == ino && p.loose_start <= t1)
                .map(|p| p.loose_end.unwrap_or(u64::MAX).min(t1))
                .max()
                .map(|last| t0.saturating_sub(last)),
            // The latest instant by t1 at which no inode surely held it.
            // Two holds of one name never overlap tightly (the second
            // starts after the operation that ended the first), so walk
            // back hold by hold.
            None => {
                let mut x = t1;
                while let Some(p) = holds
                    .iter()
                    .find(|p| p.tight_start <= x && p.tight_end.is_none_or(|e| e >= x))
                {
                    // Ticks start at 2: a hold's start minus one is a tick.
                    x = p.tight_start - 1;
                }
                Some(t0.saturating_sub(x))
            }
        }
    }
}

/// One mutator's changes to the names it owns, each made through a `Vfs`
/// and recorded in the history; `mine` is what it holds (name -> inode).
pub struct Mutator<'o> {
    oracle: &'o Oracle,
    mine: HashMap<String, u64>,
}

impl<'o> Mutator<'o> {
    pub fn new(oracle: &'o Oracle) -> Self {
        Mutator {
            oracle,
            mine: HashMap::new(),
        }
    }

    /// Create `name`; EEXIST only if this mutator holds it.
    pub fn create(&mut self, v: &Vfs, name: &str) {
        let t0 = self.oracle.tick();
        match v.as_root().create(At::Root, name, 0o644) {
            Ok(d) => {
                let ino = d.ino().unwrap();
                self.oracle.begin_hold(name, ino, t0, self.oracle.tick());
                self.mine.insert(name.to_string(), ino);
            }
            Err(Errno::EEXIST) => assert!(self.mine.contains_key(name)),
            Err(e) => panic!("create {name}: {e}"),
        }
    }

    /// Unlink `name`; ENOENT only if this mutator does not hold it.
    pub fn unlink(&mut self, v: &Vfs, name: &str) {
        let t0 = self.oracle.tick();
        match v.as_root().unlink(At::Root, name) {
            Ok(()) => {
                self.oracle.end_hold(name, t0, self.oracle.tick());
                self.mine.remove(name);
            }
            Err(Errno::ENOENT) => assert!(!self.mine.contains_key(name)),
            Err(e) => panic!("unlink {name}: {e}"),
        }
    }

    /// Rename `from` over `to` (both this mutator's names).
    pub fn rename(&mut self, v: &Vfs, from: &str, to: &str) {
        let t0 = self.oracle.tick();
        let r = v
            .as_root()
            .rename(At::Root, from, At::Root, to, RenameFlags::NONE);
        let t1 = self.oracle.tick();
        match r {
            Ok(()) if from == to => {}
            Ok(()) => {
                let ino = self.mine.remove(from).expect("renamed a name it holds");
                self.oracle.end_hold(from, t0, t1);
                if self.mine.contains_key(to) {
                    self.oracle.end_hold(to, t0, t1);
                }
                self.oracle.begin_hold(to, ino, t0, t1);
                self.mine.insert(to.to_string(), ino);
            }
            Err(Errno::ENOENT) => assert!(!self.mine.contains_key(from)),
            Err(e) => panic!("rename {from} -> {to}: {e}"),
        }
    }
}

/// The tests' random numbers: xorshift64*, seeded per thread.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
