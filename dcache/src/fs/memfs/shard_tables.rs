//! A handle shard's two tables (its handle slots and its pins), kept in
//! 128-byte blocks that no other allocation shares.
//!
//! A shard's tables are written by the thread that owns the shard on
//! every open and release, but they are allocated by whichever thread used
//! the shard first, from that thread's malloc arena, next to whatever else
//! it allocated there. Kept in a `Vec` and a `HashMap` (as they were), a
//! shard's small buffers could share a line with data another thread
//! reads on every operation. In `open-same` at 2 threads about half the
//! runs were then 1.3x one thread instead of 1.9x: the other worker's load
//! of its own bench state missed on each open (`perf annotate`: 69% of its
//! loop's samples on that load) and the owner's mutex release waited for
//! its stores (docs/BENCHMARKS.md, "Opens on line pairs of their own"). A
//! block aligned to a line pair (the unit the spatial prefetcher fetches)
//! leaves no room for a neighbour.

use crate::cache_aligned::{PairAligned, LINE_PAIR};
use crate::fs::{FileType, Ino};

/// `T`s in blocks of `N`, each block alone on its line pair.
#[derive(Debug)]
struct Blocks<T, const N: usize>(Vec<PairAligned<[T; N]>>);

impl<T: Copy, const N: usize> Blocks<T, N> {
    /// A block holds `N` items, `N` a power of two (the index is split
    /// with a shift and a mask).
    const FITS: () = assert!(size_of::<[T; N]>() <= LINE_PAIR && N.is_power_of_two());

    fn new() -> Self {
        let () = Self::FITS;
        Blocks(Vec::new())
    }

    /// `blocks` blocks of `fill`.
    fn filled(blocks: usize, fill: T) -> Self {
        let () = Self::FITS;
        Blocks(vec![PairAligned::new([fill; N]); blocks])
    }

    fn len(&self) -> usize {
        self.0.len() * N
    }

    fn push_block(&mut self, fill: T) {
        self.0.push(PairAligned::new([fill; N]));
    }

    #[inline]
    fn get(&self, i: usize) -> Option<&T> {
        self.0.get(i / N).map(|b| &b[i % N])
    }

    #[inline]
    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.0.get_mut(i / N).map(|b| &mut b[i % N])
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.0.iter().flat_map(|b| b.iter())
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut().flat_map(|b| b.iter_mut())
    }
}

/// Sentinel of the free list: no slot.
const NONE: u32 = u32::MAX;

/// One handle slot.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot<T> {
    /// Bumped when the slot is freed: a stale handle number is EBADF.
    pub gen: u32,
    /// The next free slot while this one is free.
    next: u32,
    pub handle: Option<T>,
}

/// Handle slots, four to a block, with the free ones linked through
/// themselves (no free list of its own to allocate).
#[derive(Debug)]
pub(super) struct Slots<T> {
    blocks: Blocks<Slot<T>, 4>,
    /// Slots handed out at least once (the first `used`).
    used: u32,
    /// The first free slot below `used`, or [`NONE`].
    free: u32,
}

impl<T: Copy> Slots<T> {
    pub fn new() -> Self {
        Slots {
            blocks: Blocks::new(),
            used: 0,
            free: NONE,
        }
    }

    /// A slot for `handle`, if fewer than `max` are in use: its number
    /// and generation.
    #[inline]
    pub fn take(&mut self, max: u32, handle: T) -> Option<(u32, u32)> {
        let slot = if self.free != NONE {
            let s = self.free;
            self.free = self.blocks.get(s as usize)?.next;
            s
        } else if self.used < max {
            // Below `max`, so never `NONE` (u32::MAX).
            if self.used as usize == self.blocks.len() {
                self.blocks.push_block(Slot {
                    gen: 1,
                    next: NONE,
                    handle: None,
                });
            }
            self.used += 1;
            self.used - 1
        } else {
            return None;
        };
        let s = self.blocks.get_mut(slot as usize)?;
        s.handle = Some(handle);
        Some((slot, s.gen))
    }

    /// Slot `slot`, if it was ever handed out.
    #[inline]
    pub fn get(&self, slot: usize) -> Option<&Slot<T>> {
        if slot < self.used as usize {
            self.blocks.get(slot)
        } else {
            None
        }
    }

    /// Free slot `slot` (the caller checked it holds a handle): its
    /// generation moves on, so its old number is stale.
    #[inline]
    pub fn free(&mut self, slot: usize) {
        let head = self.free;
        if let Some(s) = self.blocks.get_mut(slot) {
            s.handle = None;
            s.gen = s.gen.wrapping_add(1).max(1);
            s.next = head;
            self.free = slot as u32;
        }
    }

    /// The handles held.
    pub fn handles(&self) -> impl Iterator<Item = &T> {
        self.blocks
            .iter()
            .take(self.used as usize)
            .filter_map(|s| s.handle.as_ref())
    }
}

/// A shard's pin on an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pin {
    /// The shard's open handles on the inode.
    pub opens: u32,
    pub kind: FileType,
    /// The table entry's state, kept here so that an entry is 16 bytes.
    state: State,
}

impl Pin {
    pub fn new(opens: u32, kind: FileType) -> Pin {
        Pin {
            opens,
            kind,
            state: State::Full,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Empty,
    Full,
    /// Removed: a probe goes on past it; an insert may reuse it.
    Gone,
}

#[derive(Clone, Copy, Debug)]
struct PinEntry {
    ino: Ino,
    pin: Pin,
}

const EMPTY: PinEntry = PinEntry {
    ino: 0,
    pin: Pin {
        opens: 0,
        kind: FileType::Regular,
        state: State::Empty,
    },
};

/// Pins by inode number: open addressing with linear probing over blocks
/// of eight, at most 7/8 full (counting removed entries), so a probe
/// always meets an empty entry.
#[derive(Debug)]
pub(super) struct Pins {
    table: Blocks<PinEntry, 8>,
    len: usize,
    gone: usize,
}

/// Fibonacci hashing: inode numbers are memfs's own, no DoS to resist.
#[inline]
fn hash(ino: Ino) -> usize {
    (ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize
}

impl Pins {
    pub fn new() -> Self {
        Pins {
            table: Blocks::new(),
            len: 0,
            gone: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Where `ino`'s entry is.
    #[inline]
    fn find(&self, ino: Ino) -> Option<usize> {
        let cap = self.table.len();
        if cap == 0 {
            return None;
        }
        let mask = cap - 1;
        let mut i = hash(ino) & mask;
        loop {
            let e = self.table.get(i)?;
            match e.pin.state {
                State::Empty => return None,
                State::Full if e.ino == ino => return Some(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    #[inline]
    pub fn get(&self, ino: Ino) -> Option<&Pin> {
        self.table.get(self.find(ino)?).map(|e| &e.pin)
    }

    #[inline]
    pub fn get_mut(&mut self, ino: Ino) -> Option<&mut Pin> {
        let i = self.find(ino)?;
        self.table.get_mut(i).map(|e| &mut e.pin)
    }

    pub fn contains_key(&self, ino: Ino) -> bool {
        self.find(ino).is_some()
    }

    /// Pin `ino` with `pin` unless it is pinned already; whether it was
    /// added.
    pub fn insert_new(&mut self, ino: Ino, pin: Pin) -> bool {
        if self.find(ino).is_some() {
            return false;
        }
        let cap = self.table.len();
        if (self.len + self.gone + 1) * 8 > cap * 7 {
            // Double when live entries would fill half; otherwise only
            // sweep the removed ones out.
            let want = if (self.len + 1) * 2 > cap {
                cap * 2
            } else {
                cap
            };
            self.rehash(want.max(8));
        }
        let mask = self.table.len() - 1;
        let mut i = hash(ino) & mask;
        loop {
            let Some(e) = self.table.get_mut(i) else {
                return false;
            };
            if e.pin.state != State::Full {
                if e.pin.state == State::Gone {
                    self.gone -= 1;
                }
                *e = PinEntry {
                    ino,
                    pin: Pin {
                        state: State::Full,
                        ..pin
                    },
                };
                self.len += 1;
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    /// A new table of `cap` entries (a power of two) with the live ones.
    fn rehash(&mut self, cap: usize) {
        let old = std::mem::replace(&mut self.table, Blocks::filled(cap / 8, EMPTY));
        self.len = 0;
        self.gone = 0;
        for e in old.iter().filter(|e| e.pin.state == State::Full) {
            self.insert_new(e.ino, e.pin);
        }
    }

    /// Unpin `ino`.
    pub fn remove(&mut self, ino: Ino) -> Option<Pin> {
        let i = self.find(ino)?;
        let e = self.table.get_mut(i)?;
        let pin = e.pin;
        e.pin.state = State::Gone;
        self.len -= 1;
        self.gone += 1;
        Some(pin)
    }

    /// Keep only the pins `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&Pin) -> bool) {
        for e in self.table.iter_mut() {
            if e.pin.state == State::Full && !keep(&e.pin) {
                e.pin.state = State::Gone;
                self.len -= 1;
                self.gone += 1;
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (Ino, &Pin)> {
        self.table
            .iter()
            .filter(|e| e.pin.state == State::Full)
            .map(|e| (e.ino, &e.pin))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn slots_are_reused_under_a_new_generation_and_bounded() {
        let mut s = Slots::<u64>::new();
        let (a, ga) = s.take(3, 10).unwrap();
        let (b, _) = s.take(3, 11).unwrap();
        assert_eq!((a, b), (0, 1));
        assert_eq!(s.get(0).unwrap().handle, Some(10));
        assert!(s.get(2).is_none(), "never handed out");
        s.free(a as usize);
        assert_eq!(s.get(0).unwrap().handle, None);
        let (c, gc) = s.take(3, 12).unwrap();
        assert_eq!(c, a);
        assert_ne!(gc, ga);
        s.take(3, 13).unwrap();
        assert_eq!(s.take(3, 14), None, "at most 3");
        let mut held: Vec<u64> = s.handles().copied().collect();
        held.sort();
        assert_eq!(held, vec![11, 12, 13]);
    }

    #[test]
    fn the_tables_lie_on_line_pairs_of_their_own() {
        let mut s = Slots::<u64>::new();
        let mut p = Pins::new();
        for i in 0..100 {
            s.take(u32::MAX, i).unwrap();
            p.insert_new(i, Pin::new(1, FileType::Regular));
        }
        let slot = s.get(0).unwrap() as *const Slot<u64> as usize;
        let pin = p.table.get(0).unwrap() as *const PinEntry as usize;
        assert_eq!(slot % LINE_PAIR, 0);
        assert_eq!(pin % LINE_PAIR, 0);
        assert_eq!(
            size_of::<PairAligned<[Slot<crate::fs::Ino>; 4]>>(),
            LINE_PAIR
        );
        assert_eq!(size_of::<PairAligned<[PinEntry; 8]>>(), LINE_PAIR);
    }

    /// The pin table against `HashMap` under a random mix of inserts,
    /// removals, updates and sweeps over few keys (so removed entries pile
    /// up and are swept).
    #[test]
    fn pins_answer_as_a_hash_map_does() {
        let mut pins = Pins::new();
        let mut want: HashMap<Ino, Pin> = HashMap::new();
        let mut x = 0x1234_5678_9abc_def0u64;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ino = x % 300;
            let pin = Pin::new(step % 3, FileType::Regular);
            match (x >> 32) % 8 {
                0..=2 => {
                    let added = pins.insert_new(ino, pin);
                    assert_eq!(added, !want.contains_key(&ino));
                    want.entry(ino).or_insert(pin);
                }
                3..=4 => assert_eq!(pins.remove(ino), want.remove(&ino)),
                5 => {
                    if let (Some(p), Some(w)) = (pins.get_mut(ino), want.get_mut(&ino)) {
                        p.opens += 1;
                        w.opens += 1;
                    }
                }
                6 if step % 1000 == 0 => {
                    pins.retain(|p| p.opens > 0);
                    want.retain(|_, p| p.opens > 0);
                }
                _ => assert_eq!(pins.get(ino), want.get(&ino)),
            }
            assert_eq!(pins.len(), want.len());
        }
        let got: HashMap<Ino, Pin> = pins.iter().map(|(i, p)| (i, *p)).collect();
        assert_eq!(got, want);
        assert!(
            pins.table.len() <= 1024,
            "removed entries are swept, not grown into"
        );
    }
}
