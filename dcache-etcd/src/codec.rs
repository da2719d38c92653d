//! The layout of a namespace in etcd: keys and record encodings.
//!
//! Under a prefix `P` (default `/dcache`):
//!
//! | key | value |
//! | --- | --- |
//! | `P/w/i/<ino:16 hex>` | an inode record ([`Rec`]), extended attributes included |
//! | `P/w/t/<dir:16 hex>/<client id>/<lane:4 hex>` | what that client's changes did to the directory's size, links and times ([`crate::tally`]) |
//! | `P/d/<dir:16 hex>/<name>` | a directory entry ([`Entry`]) |
//! | `P/p/<dir:16 hex>` | the parent of a directory (8 bytes LE) |
//! | `P/c/<ino:16 hex>/<chunk:8 hex>` | up to [`CHUNK`] bytes of file data (inline volumes) |
//! | `P/b/<ino:16 hex>/<chunk:8 hex>` | a 64 MiB chunk's slice list (`crate::slices`; object-store volumes) |
//! | `P/a/n` | the next free slice id (8 bytes LE) |
//! | `P/a/g/<id:16 hex>` | a garbage record: objects dropped, deleted after the grace period |
//! | `P/a/i/<ino:16 hex>` | a removed inode whose slice lists and objects are still to be deleted (ms, 8 bytes LE) |
//! | `P/a/l/<ino:16 hex>` | an `O_TMPFILE` inode that `link` may still name (empty) |
//! | `P/n` | the next free inode number (8 bytes LE) |
//! | `P/volume` | the volume record (`crate::volume`), written by `format` |
//! | `P/o/<client id>/m/<lane:4 hex>` | the sequence number of that client's last transaction made in that lane (on its lease) |
//! | `P/s/<client id>` | that client's session record (on its lease, see [`crate::session`]) |
//!
//! The watch covers `P/d/` up to the end of `P/w/` (everything but file
//! data, which sorts before it): inode records and directory tallies
//! (whose latest mod_revision is the revision a cached entry of that
//! directory is validated against), directory entries (which name
//! changed, for the invalidations a client passes on) and the marker keys
//! (which changes are the client's own). Nothing in it is written on a
//! timer: session records change only when a client connects or leaves.

use std::sync::Arc;

use dcache::{Attr, Errno, FileType, Ino, Result, Timespec};

use crate::xattr::Xattrs;

/// Bytes of file data per key.
pub const CHUNK: u64 = 64 * 1024;
/// The most one write or read moves in one call (one transaction; etcd's
/// default `--max-request-bytes` is 1.5 MiB). A longer call is short.
pub const MAX_IO: usize = 1024 * 1024;
/// The largest file: half of etcd's default 2 GiB backend quota.
pub const MAX_FILE: u64 = 1 << 30;
/// The most links to one inode.
pub const LINK_MAX: u32 = 65_000;
/// The root directory's inode number.
pub const ROOT_INO: Ino = 1;

/// Key builder for one prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    pub prefix: Vec<u8>,
}

fn hex16(n: u64) -> String {
    format!("{n:016x}")
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    fn k(&self, parts: &[&[u8]]) -> Vec<u8> {
        let mut v = self.prefix.clone();
        for p in parts {
            v.extend_from_slice(p);
        }
        v
    }

    /// The first key watched.
    pub fn watched(&self) -> Vec<u8> {
        self.k(&[b"/d/"])
    }
    /// The end of the watched range (exclusive).
    pub fn watched_end(&self) -> Vec<u8> {
        prefix_end(&self.k(&[b"/w/"]))
    }
    pub fn inode_prefix(&self) -> Vec<u8> {
        self.k(&[b"/w/i/"])
    }
    pub fn inode(&self, ino: Ino) -> Vec<u8> {
        self.k(&[b"/w/i/", hex16(ino).as_bytes()])
    }
    /// The volume record (`crate::volume`).
    pub fn volume(&self) -> Vec<u8> {
        self.k(&[b"/volume"])
    }
    /// Every key of the volume: the prefix followed by `/`.
    pub fn all(&self) -> Vec<u8> {
        self.k(&[b"/"])
    }
    /// The heartbeat keys clients wrote before fences (see `crate::progress`).
    pub fn old_heartbeats(&self) -> Vec<u8> {
        self.k(&[b"/w/h/"])
    }
    pub fn session(&self, client: &str) -> Vec<u8> {
        self.k(&[b"/s/", client.as_bytes()])
    }
    /// The prefix of all session records.
    pub fn sessions(&self) -> Vec<u8> {
        self.k(&[b"/s/"])
    }
    /// The inode number of an inode key, `None` for any other key.
    pub fn parse_inode(&self, key: &[u8]) -> Option<Ino> {
        let p = self.inode_prefix();
        let rest = key.strip_prefix(p.as_slice())?;
        if rest.len() != 16 {
            return None;
        }
        u64::from_str_radix(std::str::from_utf8(rest).ok()?, 16).ok()
    }
    /// A client lane's tally of directory `dir` (`crate::tally`).
    pub fn tally(&self, dir: Ino, client: &str, lane: u16) -> Vec<u8> {
        self.k(&[
            b"/w/t/",
            hex16(dir).as_bytes(),
            b"/",
            client.as_bytes(),
            b"/",
            format!("{lane:04x}").as_bytes(),
        ])
    }
    /// The prefix of every tally of `dir`.
    pub fn tallies(&self, dir: Ino) -> Vec<u8> {
        self.k(&[b"/w/t/", hex16(dir).as_bytes(), b"/"])
    }
    /// The directory a tally key counts for, `None` for any other key.
    pub fn parse_tally(&self, key: &[u8]) -> Option<Ino> {
        let rest = key
            .strip_prefix(self.prefix.as_slice())?
            .strip_prefix(b"/w/t/")?;
        if rest.len() < 18 || rest[16] != b'/' {
            return None;
        }
        u64::from_str_radix(std::str::from_utf8(&rest[..16]).ok()?, 16).ok()
    }
    /// The directory and name of an entry key, `None` for any other key.
    pub fn parse_entry<'k>(&self, key: &'k [u8]) -> Option<(Ino, &'k [u8])> {
        let rest = key
            .strip_prefix(self.prefix.as_slice())?
            .strip_prefix(b"/d/")?;
        if rest.len() < 18 || rest[16] != b'/' {
            return None;
        }
        let dir = u64::from_str_radix(std::str::from_utf8(&rest[..16]).ok()?, 16).ok()?;
        Some((dir, &rest[17..]))
    }
    pub fn entry(&self, dir: Ino, name: &[u8]) -> Vec<u8> {
        self.k(&[b"/d/", hex16(dir).as_bytes(), b"/", name])
    }
    /// The prefix of all of `dir`'s entries.
    pub fn entries(&self, dir: Ino) -> Vec<u8> {
        self.k(&[b"/d/", hex16(dir).as_bytes(), b"/"])
    }
    pub fn parent(&self, dir: Ino) -> Vec<u8> {
        self.k(&[b"/p/", hex16(dir).as_bytes()])
    }
    pub fn chunk(&self, ino: Ino, idx: u64) -> Vec<u8> {
        self.k(&[
            b"/c/",
            hex16(ino).as_bytes(),
            b"/",
            format!("{idx:08x}").as_bytes(),
        ])
    }
    /// The prefix of all of `ino`'s data chunks.
    pub fn chunks(&self, ino: Ino) -> Vec<u8> {
        self.k(&[b"/c/", hex16(ino).as_bytes(), b"/"])
    }
    /// Chunk `idx`'s slice list (object-store volumes).
    pub fn slices(&self, ino: Ino, idx: u64) -> Vec<u8> {
        self.k(&[
            b"/b/",
            hex16(ino).as_bytes(),
            b"/",
            format!("{idx:08x}").as_bytes(),
        ])
    }
    /// The prefix of all of `ino`'s slice lists.
    pub fn slice_lists(&self, ino: Ino) -> Vec<u8> {
        self.k(&[b"/b/", hex16(ino).as_bytes(), b"/"])
    }
    /// The prefix of every slice list of the volume.
    pub fn all_slice_lists(&self) -> Vec<u8> {
        self.k(&[b"/b/"])
    }
    /// The inode and chunk index of a slice-list key.
    pub fn parse_slices(&self, key: &[u8]) -> Option<(Ino, u64)> {
        let rest = key
            .strip_prefix(self.prefix.as_slice())?
            .strip_prefix(b"/b/")?;
        if rest.len() != 25 || rest[16] != b'/' {
            return None;
        }
        let s = std::str::from_utf8(rest).ok()?;
        Some((
            u64::from_str_radix(&s[..16], 16).ok()?,
            u64::from_str_radix(&s[17..], 16).ok()?,
        ))
    }
    pub fn next_slice(&self) -> Vec<u8> {
        self.k(&[b"/a/n"])
    }
    pub fn garbage(&self, id: u64) -> Vec<u8> {
        self.k(&[b"/a/g/", hex16(id).as_bytes()])
    }
    pub fn all_garbage(&self) -> Vec<u8> {
        self.k(&[b"/a/g/"])
    }
    pub fn dead_inode(&self, ino: Ino) -> Vec<u8> {
        self.k(&[b"/a/i/", hex16(ino).as_bytes()])
    }
    /// `P/a/l/<ino>`: an inode made by `O_TMPFILE` without `O_EXCL`, which
    /// `link` may still give a name (Linux's `I_LINKABLE`).
    pub fn linkable(&self, ino: Ino) -> Vec<u8> {
        self.k(&[b"/a/l/", hex16(ino).as_bytes()])
    }
    pub fn dead_inodes(&self) -> Vec<u8> {
        self.k(&[b"/a/i/"])
    }
    /// `P/a/o/<ino>/<client>`: `client` has the inode open (object-store
    /// volumes; on the client's session lease, outside the watched range).
    pub fn open_record(&self, ino: Ino, client: &str) -> Vec<u8> {
        self.k(&[b"/a/o/", hex16(ino).as_bytes(), b"/", client.as_bytes()])
    }
    pub fn open_records(&self, ino: Ino) -> Vec<u8> {
        self.k(&[b"/a/o/", hex16(ino).as_bytes(), b"/"])
    }
    /// The number at the end of a `P/a/g/` or `P/a/i/` key.
    pub fn parse_tail(key: &[u8]) -> Option<u64> {
        let s = std::str::from_utf8(key.get(key.len().checked_sub(16)?..)?).ok()?;
        u64::from_str_radix(s, 16).ok()
    }
    pub fn next_ino(&self) -> Vec<u8> {
        self.k(&[b"/n"])
    }
    /// The marker key of `client`'s commits in `lane` (`fs::client`): one
    /// per operation in flight, so a lost answer is resolved by a key no
    /// concurrent commit of the client overwrote.
    pub fn op_marker(&self, client: &str, lane: u16) -> Vec<u8> {
        self.k(&[
            b"/o/",
            client.as_bytes(),
            b"/m/",
            format!("{lane:04x}").as_bytes(),
        ])
    }
    /// `P/a/f/<client>/<seq>`: the fence of `client`'s commit number
    /// `seq` (`fs::client`). Every commit requires it absent; resolving a
    /// lost answer puts it, so the lost request, should it reach etcd
    /// later, can no longer apply. On the session lease; outside the
    /// watched range.
    pub fn op_fence(&self, client: &str, seq: u64) -> Vec<u8> {
        self.k(&[b"/a/f/", client.as_bytes(), b"/", hex16(seq).as_bytes()])
    }
    /// The prefix of every marker key of `client`.
    pub fn op_markers(&self, client: &str) -> Vec<u8> {
        self.k(&[b"/o/", client.as_bytes(), b"/m/"])
    }
    /// Put with every write of a client's open records (which are outside
    /// the watched range): a watched key, so that the revision has an
    /// event; not the marker, whose value resolves a lost commit.
    pub fn opens_marker(&self, client: &str) -> Vec<u8> {
        self.k(&[b"/o/", client.as_bytes(), b"/opens"])
    }
}

/// The end of the range of keys starting with `prefix` (etcd's
/// `clientv3.GetPrefixRangeEnd`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// An inode as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub kind: FileType,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// Directories: the slot the next entry gets (its readdir cookie).
    pub next_slot: u64,
    /// Regular files of object-store volumes: 1 + the pages their lists
    /// cover (`st_blocks`, as tmpfs counts the pages it holds); 0: not
    /// counted (inline volumes, files from before the count), `st_blocks`
    /// is then the size. Stored in the word a directory's `next_slot` is.
    pub alloc: u64,
    /// Symlinks: the target.
    pub target: Vec<u8>,
    /// Extended attributes (shared, so that copying a record, as the
    /// cache does on every change, does not copy them).
    pub xattrs: Arc<Xattrs>,
}

/// The record layout without extended attributes: the fixed part, then
/// the symlink target to the end. Still written for every inode that has
/// none, so clients that predate attributes read those records.
const REC_VERSION: u8 = 1;
/// With extended attributes: the fixed part, the target's length (u32)
/// and bytes, the number of attributes (u32), then each as the name's
/// length (u8), the value's length (u32), the name, the value.
const REC_VERSION_XATTR: u8 = 2;
const REC_FIXED: usize = 1 + 1 + 2 + 4 * 4 + 8 + 12 * 3 + 8;

fn put_ts(v: &mut Vec<u8>, t: Timespec) {
    v.extend_from_slice(&t.sec.to_le_bytes());
    v.extend_from_slice(&t.nsec.to_le_bytes());
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        if self.0.len() < N {
            return Err(Errno::EIO);
        }
        let (a, b) = self.0.split_at(N);
        self.0 = b;
        a.try_into().map_err(|_| Errno::EIO)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            return Err(Errno::EIO);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn ts(&mut self) -> Result<Timespec> {
        let sec = i64::from_le_bytes(self.take()?);
        let nsec = self.u32()?;
        Ok(Timespec { sec, nsec })
    }
}

fn kind_code(k: FileType) -> u8 {
    match k {
        FileType::Regular => 1,
        FileType::Directory => 2,
        FileType::Symlink => 3,
        FileType::CharDevice => 4,
        FileType::BlockDevice => 5,
        FileType::Fifo => 6,
        FileType::Socket => 7,
    }
}

fn kind_of(c: u8) -> Result<FileType> {
    Ok(match c {
        1 => FileType::Regular,
        2 => FileType::Directory,
        3 => FileType::Symlink,
        4 => FileType::CharDevice,
        5 => FileType::BlockDevice,
        6 => FileType::Fifo,
        7 => FileType::Socket,
        _ => return Err(Errno::EIO),
    })
}

impl Rec {
    pub fn new(kind: FileType, perm: u16, uid: u32, gid: u32) -> Rec {
        let now = Timespec::now();
        Rec {
            kind,
            perm: perm & 0o7777,
            uid,
            gid,
            rdev: 0,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            next_slot: 0,
            alloc: 0,
            target: Vec::new(),
            xattrs: Arc::default(),
        }
    }

    /// The record's bytes: version 1 without attributes, 2 with.
    pub fn encode(&self) -> Vec<u8> {
        let extra = if self.xattrs.is_empty() {
            0
        } else {
            crate::xattr::usage(&self.xattrs).0 + 8
        };
        let mut v = Vec::with_capacity(REC_FIXED + self.target.len() + extra);
        v.push(if self.xattrs.is_empty() {
            REC_VERSION
        } else {
            REC_VERSION_XATTR
        });
        v.push(kind_code(self.kind));
        v.extend_from_slice(&self.perm.to_le_bytes());
        v.extend_from_slice(&self.uid.to_le_bytes());
        v.extend_from_slice(&self.gid.to_le_bytes());
        v.extend_from_slice(&self.rdev.to_le_bytes());
        v.extend_from_slice(&self.nlink.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        put_ts(&mut v, self.atime);
        put_ts(&mut v, self.mtime);
        put_ts(&mut v, self.ctime);
        // One word: a directory's next slot, a file's allocation count.
        let word = if self.is_dir() {
            self.next_slot
        } else {
            self.alloc
        };
        v.extend_from_slice(&word.to_le_bytes());
        if self.xattrs.is_empty() {
            v.extend_from_slice(&self.target);
            return v;
        }
        // A target is under PATH_MAX. `crate::xattr::set` makes only
        // names of 1 to 255 bytes and values of at most 64 KiB; an entry
        // put in by hand that the format cannot hold is left out.
        let fits = |(n, v): &(&Vec<u8>, &Vec<u8>)| {
            (1..=u8::MAX as usize).contains(&n.len()) && u32::try_from(v.len()).is_ok()
        };
        v.extend_from_slice(&(self.target.len() as u32).to_le_bytes());
        v.extend_from_slice(&self.target);
        let count = self.xattrs.iter().filter(fits).count();
        v.extend_from_slice(&(count as u32).to_le_bytes());
        for (name, value) in self.xattrs.iter().filter(fits) {
            v.push(name.len() as u8);
            v.extend_from_slice(&(value.len() as u32).to_le_bytes());
            v.extend_from_slice(name);
            v.extend_from_slice(value);
        }
        v
    }

    /// EIO for a record this version cannot read, or a malformed one.
    pub fn decode(b: &[u8]) -> Result<Rec> {
        let mut r = Reader(b);
        let version = r.u8()?;
        if version != REC_VERSION && version != REC_VERSION_XATTR {
            return Err(Errno::EIO);
        }
        let mut rec = Rec {
            kind: kind_of(r.u8()?)?,
            perm: r.u16()? & 0o7777,
            uid: r.u32()?,
            gid: r.u32()?,
            rdev: r.u32()?,
            nlink: r.u32()?,
            size: r.u64()?,
            atime: r.ts()?,
            mtime: r.ts()?,
            ctime: r.ts()?,
            next_slot: r.u64()?,
            alloc: 0,
            target: Vec::new(),
            xattrs: Arc::default(),
        };
        if !rec.is_dir() {
            rec.alloc = std::mem::take(&mut rec.next_slot);
        }
        if version == REC_VERSION {
            rec.target = r.0.to_vec();
            return Ok(rec);
        }
        let n = r.u32()? as usize;
        rec.target = r.bytes(n)?.to_vec();
        let mut x = Xattrs::new();
        for _ in 0..r.u32()? {
            let nlen = r.u8()? as usize;
            let vlen = r.u32()? as usize;
            let name = r.bytes(nlen)?.to_vec();
            let value = r.bytes(vlen)?.to_vec();
            if name.is_empty() || x.insert(name, value).is_some() {
                return Err(Errno::EIO);
            }
        }
        if !r.0.is_empty() {
            return Err(Errno::EIO);
        }
        rec.xattrs = Arc::new(x);
        Ok(rec)
    }

    pub fn attr(&self, ino: Ino) -> Attr {
        // Counted files: the pages held, in 4 KiB blocks as tmpfs's.
        let (blocks, blksize) = match self.alloc {
            0 => (self.size.div_ceil(512), CHUNK as u32),
            n => (
                (n - 1) * (crate::slices::PAGE / 512),
                crate::slices::PAGE as u32,
            ),
        };
        Attr {
            ino,
            size: self.size,
            blocks,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize,
        }
    }

    /// Add `delta` pages to a counted file's allocation.
    pub fn count_pages(&mut self, delta: i64) {
        if self.alloc > 0 {
            self.alloc = self.alloc.saturating_add_signed(delta).max(1);
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    /// Mode, owner and group, as dcache's permission rules take them.
    pub fn perm_of(&self) -> dcache::permission::Perm {
        dcache::permission::Perm {
            mode: self.kind.mode_bits() | self.perm as u32,
            uid: self.uid,
            gid: self.gid,
        }
    }
}

/// A directory entry as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub ino: Ino,
    pub kind: FileType,
    /// Its position in readdir order (cookie `slot + 3`).
    pub slot: u64,
}

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(17);
        v.extend_from_slice(&self.ino.to_le_bytes());
        v.push(kind_code(self.kind));
        v.extend_from_slice(&self.slot.to_le_bytes());
        v
    }

    pub fn decode(b: &[u8]) -> Result<Entry> {
        let mut r = Reader(b);
        Ok(Entry {
            ino: r.u64()?,
            kind: kind_of(r.u8()?)?,
            slot: r.u64()?,
        })
    }
}

/// An 8-byte little-endian number (the inode counter, a parent pointer).
pub fn decode_u64(b: &[u8]) -> Result<u64> {
    Reader(b).u64()
}

/// A directory's size grows by this per entry, from two (`.` and `..`) in
/// an empty one, as on tmpfs (its `BOGO_DIRENT_SIZE`).
pub(crate) const DIRENT: u64 = 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut r = Rec::new(FileType::Symlink, 0o777, 5, 6);
        r.target = b"some/where".to_vec();
        r.size = 10;
        assert_eq!(Rec::decode(&r.encode()).unwrap(), r);
        let e = Entry {
            ino: 77,
            kind: FileType::Directory,
            slot: 3,
        };
        assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
        assert_eq!(Rec::decode(b"\x01\x02"), Err(Errno::EIO));
        assert_eq!(Entry::decode(b""), Err(Errno::EIO));
    }

    /// A record without attributes is written as before (version 1, the
    /// target to the end), so clients that predate attributes read it.
    #[test]
    fn records_without_xattrs_keep_version_1() {
        let mut r = Rec::new(FileType::Symlink, 0o777, 5, 6);
        r.target = b"t".to_vec();
        let b = r.encode();
        assert_eq!(b[0], 1);
        assert_eq!(b.len(), REC_FIXED + 1);
        assert_eq!(&b[REC_FIXED..], b"t");
        // A version-1 record as an older client wrote it, byte by byte.
        let mut old = vec![1u8, 1];
        old.extend_from_slice(&0o644u16.to_le_bytes());
        for n in [7u32, 8, 0, 1] {
            old.extend_from_slice(&n.to_le_bytes());
        }
        old.extend_from_slice(&12u64.to_le_bytes());
        for s in [1i64, 2, 3] {
            old.extend_from_slice(&s.to_le_bytes());
            old.extend_from_slice(&9u32.to_le_bytes());
        }
        old.extend_from_slice(&0u64.to_le_bytes());
        let d = Rec::decode(&old).unwrap();
        assert_eq!(
            (d.kind, d.perm, d.uid, d.gid, d.size),
            (FileType::Regular, 0o644, 7, 8, 12)
        );
        assert_eq!(d.ctime, Timespec { sec: 3, nsec: 9 });
        assert!(d.xattrs.is_empty() && d.target.is_empty());
        assert_eq!(d.encode(), old);
    }

    #[test]
    fn records_with_xattrs_round_trip() {
        let mut r = Rec::new(FileType::Symlink, 0o777, 5, 6);
        r.target = b"some/where".to_vec();
        let mut x = Xattrs::new();
        x.insert(b"user.empty".to_vec(), Vec::new());
        x.insert(b"trusted.t".to_vec(), b"v".to_vec());
        x.insert(
            b"user.big".to_vec(),
            vec![0xaa; crate::xattr::XATTR_SIZE_MAX],
        );
        r.xattrs = Arc::new(x);
        let b = r.encode();
        assert_eq!(b[0], 2);
        assert!(b.len() <= REC_FIXED + r.target.len() + crate::xattr::REC_XATTR_MAX);
        assert_eq!(Rec::decode(&b).unwrap(), r);
        // Every truncation and a trailing byte are EIO, never a panic.
        for n in 0..b.len().min(REC_FIXED + 64) {
            assert_eq!(Rec::decode(&b[..n]), Err(Errno::EIO), "{n} bytes");
        }
        assert_eq!(Rec::decode(&b[..b.len() - 1]), Err(Errno::EIO));
        let mut long = b.clone();
        long.push(0);
        assert_eq!(Rec::decode(&long), Err(Errno::EIO));
        // Lengths past the end, a count too high, an empty name.
        let mut bad = b.clone();
        bad[REC_FIXED..REC_FIXED + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Rec::decode(&bad), Err(Errno::EIO));
        let at = REC_FIXED + 4 + r.target.len();
        let mut bad = b.clone();
        bad[at..at + 4].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(Rec::decode(&bad), Err(Errno::EIO));
        let mut bad = b.clone();
        bad[at + 4] = 0;
        assert_eq!(Rec::decode(&bad), Err(Errno::EIO));
        assert_eq!(Rec::decode(b"\x03"), Err(Errno::EIO));
        // Entries the format cannot hold are left out, never corrupt it.
        let mut odd = r.clone();
        let x = Arc::make_mut(&mut odd.xattrs);
        x.insert(Vec::new(), b"v".to_vec());
        x.insert(vec![b'n'; 256], b"v".to_vec());
        assert_eq!(Rec::decode(&odd.encode()).unwrap(), r);
    }

    #[test]
    fn keys() {
        let k = Keys::new("/x");
        assert_eq!(k.inode(1), b"/x/w/i/0000000000000001".to_vec());
        assert_eq!(k.parse_inode(&k.inode(0xabc)), Some(0xabc));
        assert_eq!(k.parse_inode(&k.session("c1")), None);
        assert_eq!(prefix_end(b"/x/d/"), b"/x/d0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        let e = k.entry(0x2a, b"name/with.dots");
        assert_eq!(k.parse_entry(&e), Some((0x2a, &b"name/with.dots"[..])));
        assert_eq!(k.parse_entry(&k.entries(0x2a)), None);
        assert_eq!(k.parse_entry(&k.inode(3)), None);
        assert_eq!(Keys::new("/y").parse_entry(&e), None);
        // Everything but file data is watched.
        let (lo, hi) = (k.watched(), k.watched_end());
        for key in [
            e,
            k.inode(1),
            k.session("c"),
            k.op_marker("c", 1),
            k.opens_marker("c"),
            k.parent(9),
            k.tally(7, "c", 3),
        ] {
            assert!(lo <= key && key < hi);
        }
        assert!(k.chunk(1, 0) < lo);
        for key in [
            k.slices(1, 0),
            k.next_slice(),
            k.garbage(1),
            k.dead_inode(1),
            k.linkable(1),
        ] {
            assert!(key < lo);
        }
        assert_eq!(
            k.parse_slices(&k.slices(0xab, 0x1234)),
            Some((0xab, 0x1234))
        );
        assert_eq!(k.parse_slices(&k.chunk(0xab, 1)), None);
        assert_eq!(Keys::parse_tail(&k.garbage(0x77)), Some(0x77));
        assert!(Keys::new("/x2").inode(1) >= hi);
        let t = k.tally(0x2a, "c1", 0xffff);
        assert!(t.starts_with(&k.tallies(0x2a)));
        assert_eq!(k.parse_tally(&t), Some(0x2a));
        assert_eq!(k.parse_tally(&k.inode(0x2a)), None);
        assert_eq!(k.parse_inode(&t), None);
        assert_eq!(k.parse_entry(&t), None);
    }
}
