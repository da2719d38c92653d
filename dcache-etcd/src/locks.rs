//! File locks in etcd: the keys and the record of one owner's locks.
//!
//! | key | value |
//! | --- | --- |
//! | `P/l/<ino:16 hex>/<client id>/<p or f><owner:16 hex>` | one owner's locks on the inode ([`encode`]), on its client's session lease |
//!
//! One record per (inode, client, owner, flavour): `p` for POSIX record
//! locks (the owner is a process's file table, or an open file for OFD
//! locks), `f` for `flock` (the owner is an open file). The value lists
//! the owner's ranges (type, first and last byte, pid, the open file it
//! was taken through), already split and merged by
//! [`dcache::fs::lock::InodeLocks`]. Records live on the client's
//! session lease, so a client that dies or is cut off past the lease's
//! TTL loses its locks when etcd expires the lease. The keys sit inside
//! the watched range (`P/d/` to the end of `P/w/`), so every client sees
//! every lock change; a deletion or a put wakes its waiters.

use dcache::fs::lock::{Flavor, HeldLock, InodeLocks, LockType};
use dcache::{Errno, Ino, Result};

use crate::codec::{prefix_end, Keys};

/// The record format's version byte.
const VERSION: u8 = 1;
/// Bytes per range in a record.
const RANGE: usize = 1 + 8 + 8 + 4 + 8;

/// A client's id as the lock table's 64-bit client (FNV-1a of the id):
/// only compared for equality, between records of one inode.
pub fn client_hash(client: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in client.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The prefix of every lock record of `ino`.
pub fn inode_prefix(keys: &Keys, ino: Ino) -> Vec<u8> {
    let mut k = keys.prefix.clone();
    k.extend_from_slice(format!("/l/{ino:016x}/").as_bytes());
    k
}

/// The key of `client`'s owner `owner` (`flavor`) on `ino`.
pub fn owner_key(keys: &Keys, ino: Ino, client: &str, owner: u64, flavor: Flavor) -> Vec<u8> {
    let mut k = inode_prefix(keys, ino);
    let f = match flavor {
        Flavor::Posix => 'p',
        Flavor::Flock => 'f',
    };
    k.extend_from_slice(format!("{client}/{f}{owner:016x}").as_bytes());
    k
}

/// The inode a lock key is about, if `key` is one.
pub fn parse_key(keys: &Keys, key: &[u8]) -> Option<Ino> {
    let rest = key.strip_prefix(keys.prefix.as_slice())?;
    let rest = rest.strip_prefix(b"/l/")?;
    let hex = std::str::from_utf8(rest.get(..16)?).ok()?;
    if rest.get(16) != Some(&b'/') {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// The client id and the owner a lock key names (after the inode).
fn parse_owner(key: &[u8], prefix_len: usize) -> Result<(&str, Flavor, u64)> {
    let rest =
        std::str::from_utf8(key.get(prefix_len..).ok_or(Errno::EIO)?).map_err(|_| Errno::EIO)?;
    let (client, owner) = rest.rsplit_once('/').ok_or(Errno::EIO)?;
    let flavor = match owner.as_bytes().first() {
        Some(b'p') => Flavor::Posix,
        Some(b'f') => Flavor::Flock,
        _ => return Err(Errno::EIO),
    };
    let id = u64::from_str_radix(&owner[1..], 16).map_err(|_| Errno::EIO)?;
    Ok((client, flavor, id))
}

/// The end of `ino`'s lock keys (exclusive).
pub fn inode_end(keys: &Keys, ino: Ino) -> Vec<u8> {
    prefix_end(&inode_prefix(keys, ino))
}

/// One owner's locks as a record value (all of `held` are that owner's).
pub fn encode(held: &[HeldLock]) -> Vec<u8> {
    let mut v = Vec::with_capacity(6 + held.len() * RANGE);
    v.push(VERSION);
    v.extend_from_slice(&(held.len() as u32).to_le_bytes());
    for h in held {
        v.push(match h.kind {
            LockType::Read => 0,
            LockType::Write => 1,
        });
        v.extend_from_slice(&h.start.to_le_bytes());
        v.extend_from_slice(&h.end.to_le_bytes());
        v.extend_from_slice(&h.pid.to_le_bytes());
        v.extend_from_slice(&h.file.to_le_bytes());
    }
    v
}

fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}

/// Add the locks of record `key` = `value` (under `prefix`, the inode's)
/// to `into`. EIO for a record that does not decode.
pub fn decode_into(into: &mut InodeLocks, prefix: &[u8], key: &[u8], value: &[u8]) -> Result<()> {
    let (client, flavor, owner) = parse_owner(key, prefix.len())?;
    let client = client_hash(client);
    let (&ver, rest) = value.split_first().ok_or(Errno::EIO)?;
    if ver != VERSION || rest.len() < 4 {
        return Err(Errno::EIO);
    }
    let n = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let body = &rest[4..];
    if body.len() != n.checked_mul(RANGE).ok_or(Errno::EIO)? {
        return Err(Errno::EIO);
    }
    for r in body.chunks_exact(RANGE) {
        let kind = match r[0] {
            0 => LockType::Read,
            1 => LockType::Write,
            _ => return Err(Errno::EIO),
        };
        let (start, end) = (le64(&r[1..9]), le64(&r[9..17]));
        if start > end {
            return Err(Errno::EIO);
        }
        into.held.push(HeldLock {
            owner,
            flavor,
            file: le64(&r[21..29]),
            kind,
            start,
            end,
            pid: u32::from_le_bytes([r[17], r[18], r[19], r[20]]),
            client,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_records_round_trip() {
        let keys = Keys::new("/v");
        let k = owner_key(&keys, 0x2a, "0000018c-77", 0xdead, Flavor::Flock);
        assert_eq!(
            std::str::from_utf8(&k).unwrap(),
            "/v/l/000000000000002a/0000018c-77/f000000000000dead"
        );
        assert_eq!(parse_key(&keys, &k), Some(0x2a));
        assert_eq!(parse_key(&keys, b"/v/w/i/000000000000002a"), None);
        assert!(k.starts_with(&inode_prefix(&keys, 0x2a)));
        assert!(k.as_slice() < inode_end(&keys, 0x2a).as_slice());
        let one = HeldLock {
            owner: 0xdead,
            flavor: Flavor::Flock,
            file: 9,
            kind: LockType::Write,
            start: 0,
            end: dcache::fs::lock::OFFSET_MAX,
            pid: 77,
            client: client_hash("0000018c-77"),
        };
        let two = HeldLock {
            kind: LockType::Read,
            start: 5,
            end: 9,
            ..one
        };
        let held = vec![one, two];
        let mut l = InodeLocks::new();
        let v = encode(&held);
        decode_into(&mut l, &inode_prefix(&keys, 0x2a), &k, &v).unwrap();
        assert_eq!(l.held, held);
        assert_eq!(
            decode_into(&mut l, &inode_prefix(&keys, 0x2a), &k, &v[..v.len() - 1]),
            Err(Errno::EIO)
        );
    }
}
