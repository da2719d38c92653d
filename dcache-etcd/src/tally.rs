//! Directory tallies: what one client's namespace changes did to a
//! directory's size, link count and times, kept apart from the
//! directory's record so that clients creating and removing names in one
//! directory do not all compare and rewrite one key.
//!
//! A create, unlink, link, mkdir, rmdir or rename changes its directory's
//! size (20 bytes per name, as tmpfs counts), maybe its link count (a
//! subdirectory's `..`), and sets its mtime and ctime to now. Done on the
//! directory's record, every such change from every client is a
//! compare-and-swap on that one key, and all but one of a round of
//! concurrent creates fail their compare and start again. Instead each
//! change puts the changing client's tally `P/w/t/<dir>/<client>/<lane>`
//! (a lane per concurrent operation of that client, so no two of them
//! write one tally either); the directory's record is still compared
//! (that it exists and its mode is what the change read) but not written.
//!
//! What a directory's attributes are, whoever computes them:
//! - size and link count: the record's plus the sum of every tally's
//!   (the deltas may be negative);
//! - mtime and ctime: the latest of the record's and every tally's;
//! - the rest: the record's.
//!
//! Setting a directory's times explicitly (`touch -d`, `tar`, `rsync -a`)
//! could move them back, which "the latest" would undo: `setattr` on a
//! directory folds every tally into the record in the same transaction
//! (deleting them). So does the first client to read more than
//! [`FOLD_AT`] of them, which bounds how many a directory keeps as
//! clients come and go. `rmdir` deletes the directory's tallies with it.

use std::collections::BTreeMap;

use dcache::{Errno, Result, Timespec};

use crate::codec::Rec;

/// A directory with more tallies than this is folded into its record by
/// the next client that reads them all (each client leaves one per lane
/// that ever changed the directory, and clients come and go): what a cold
/// lookup of it reads stays bounded.
pub const FOLD_AT: usize = 128;

/// One client lane's accumulated changes to a directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Added to the record's size (bytes; negative: names removed).
    pub size: i64,
    /// Added to the record's link count.
    pub nlink: i64,
    pub mtime: Timespec,
    pub ctime: Timespec,
}

const TALLY_LEN: usize = 8 + 8 + 12 + 12;

impl Tally {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(TALLY_LEN);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.nlink.to_le_bytes());
        for t in [self.mtime, self.ctime] {
            v.extend_from_slice(&t.sec.to_le_bytes());
            v.extend_from_slice(&t.nsec.to_le_bytes());
        }
        v
    }

    pub fn decode(b: &[u8]) -> Result<Tally> {
        if b.len() != TALLY_LEN {
            return Err(Errno::EIO);
        }
        let i64_at = |o: usize| i64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let ts_at = |o: usize| Timespec {
            sec: i64_at(o),
            nsec: u32::from_le_bytes(b[o + 8..o + 12].try_into().unwrap_or([0; 4])),
        };
        Ok(Tally {
            size: i64_at(0),
            nlink: i64_at(8),
            mtime: ts_at(16),
            ctime: ts_at(28),
        })
    }

    /// This tally after a change of `size` bytes and `nlink` links at
    /// `now`.
    pub fn changed(mut self, size: i64, nlink: i64, now: Timespec) -> Tally {
        self.size += size;
        self.nlink += nlink;
        self.mtime = self.mtime.max(now);
        self.ctime = self.ctime.max(now);
        self
    }
}

/// Apply `tallies` to a directory's stored record: what `stat` reports.
pub fn apply<'a>(rec: &mut Rec, tallies: impl IntoIterator<Item = &'a Tally>) {
    let (mut size, mut nlink) = (rec.size as i64, rec.nlink as i64);
    for t in tallies {
        size += t.size;
        nlink += t.nlink;
        rec.mtime = rec.mtime.max(t.mtime);
        rec.ctime = rec.ctime.max(t.ctime);
    }
    // Never below an empty directory's, whatever a damaged tally says.
    rec.size = size.max(0) as u64;
    rec.nlink = nlink.clamp(1, u32::MAX as i64) as u32;
}

/// A directory's stored record and tallies as one client knows them:
/// each part with the revision it was put at, to apply events in order.
#[derive(Clone, Debug)]
pub struct DirParts {
    pub base: Rec,
    /// Tally key -> (tally, mod_revision).
    pub tallies: BTreeMap<Vec<u8>, (Tally, i64)>,
}

impl DirParts {
    /// The same tallies over a new stored record (the record changed; the
    /// tallies the watch keeps still apply).
    pub fn with_base(&self, base: Rec) -> Box<DirParts> {
        Box::new(DirParts {
            base,
            tallies: self.tallies.clone(),
        })
    }

    /// The directory's attributes from its parts.
    pub fn effective(&self) -> Rec {
        let mut r = self.base.clone();
        apply(&mut r, self.tallies.values().map(|(t, _)| t));
        r
    }

    /// A watch event on tally `key` at `rev` (`None`: deleted). Returns
    /// whether it changed anything (an older event does not).
    pub fn event(&mut self, key: &[u8], tally: Option<Tally>, rev: i64) -> bool {
        match (self.tallies.get(key), tally) {
            (Some(&(_, r)), _) if r >= rev => false,
            (_, Some(t)) => {
                self.tallies.insert(key.to_vec(), (t, rev));
                true
            }
            (Some(_), None) => {
                self.tallies.remove(key);
                true
            }
            (None, None) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dcache::FileType;

    fn ts(sec: i64) -> Timespec {
        Timespec { sec, nsec: 7 }
    }

    #[test]
    fn tallies_round_trip_and_reject_other_lengths() {
        let t = Tally {
            size: -40,
            nlink: 3,
            mtime: ts(5),
            ctime: ts(6),
        };
        assert_eq!(Tally::decode(&t.encode()), Ok(t));
        assert_eq!(Tally::decode(&t.encode()[1..]), Err(Errno::EIO));
        assert_eq!(Tally::decode(&[]), Err(Errno::EIO));
    }

    #[test]
    fn a_directory_sums_sizes_and_links_and_takes_the_latest_times() {
        let mut base = Rec::new(FileType::Directory, 0o755, 0, 0);
        base.size = 40 + 3 * 20;
        base.nlink = 3;
        base.mtime = ts(10);
        base.ctime = ts(12);
        let a = Tally::default().changed(20, 1, ts(11));
        let b = Tally::default()
            .changed(20, 0, ts(9))
            .changed(-40, 0, ts(8));
        let mut parts = DirParts {
            base: base.clone(),
            tallies: BTreeMap::new(),
        };
        assert_eq!(parts.effective(), base, "no tallies: the record");
        assert!(parts.event(b"a", Some(a), 5));
        assert!(parts.event(b"b", Some(b), 6));
        let e = parts.effective();
        assert_eq!((e.size, e.nlink), (40 + 3 * 20 + 20 - 20, 4));
        assert_eq!((e.mtime, e.ctime), (ts(11), ts(12)));
        assert!(!parts.event(b"a", None, 4), "older than what is known");
        assert!(parts.event(b"a", None, 7));
        assert_eq!(parts.effective().nlink, 3);
        assert!(!parts.event(b"c", None, 8), "deleting what is unknown");
    }

    #[test]
    fn a_damaged_tally_cannot_make_sizes_negative() {
        let mut r = Rec::new(FileType::Directory, 0o755, 0, 0);
        r.size = 40;
        r.nlink = 2;
        let t = Tally::default().changed(-1000, -10, ts(1));
        apply(&mut r, [&t]);
        assert_eq!((r.size, r.nlink), (0, 1));
    }
}
