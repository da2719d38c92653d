//! The lock table against the host kernel: the same random sequence of
//! F_SETLK / F_GETLK requests from three owners, and `flock`s from three
//! open files, made on a tmpfs file (open file description locks, so one
//! process holds three owners; `flock` on three descriptions) and on
//! [`LocalLocks`]. Every answer is compared (taken or EAGAIN; the
//! conflicting lock F_GETLK reports), and after every step the locks the
//! kernel lists in /proc/locks for the file (type and range, split and
//! merged as Linux does it) must be exactly the table's.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use dcache::errno::Errno;
use dcache::fs::lock::{
    FileLock, Flavor, HeldLock, LocalLocks, LockOwner, LockRelease, LockType, OFFSET_MAX,
};

const INO: u64 = 1;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn flock_struct(kind: i32, start: u64, len: u64) -> libc::flock {
    // SAFETY: struct flock is plain data; zero is a valid value.
    let mut f: libc::flock = unsafe { std::mem::zeroed() };
    f.l_type = kind as i16;
    f.l_whence = libc::SEEK_SET as i16;
    f.l_start = start as i64;
    f.l_len = len as i64;
    f
}

/// `[start, start + len)` as the table's inclusive range (len 0: to EOF).
fn range(start: u64, len: u64) -> (u64, u64) {
    if len == 0 {
        (start, OFFSET_MAX)
    } else {
        (start, start + len - 1)
    }
}

fn kind_of(raw: i32) -> Option<LockType> {
    match raw {
        libc::F_RDLCK => Some(LockType::Read),
        libc::F_WRLCK => Some(LockType::Write),
        _ => None,
    }
}

/// The locks /proc/locks lists for inode `ino`: (flock?, type, start, end).
fn kernel_locks(ino: u64) -> Vec<(bool, LockType, u64, u64)> {
    let s = std::fs::read_to_string("/proc/locks").unwrap();
    let mut v = Vec::new();
    for line in s.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: OFDLCK ADVISORY WRITE -1 00:1b:123 0 EOF"; blocked waiters
        // ("->") never occur here.
        if f.len() < 8 || f[1] == "->" {
            continue;
        }
        let node: u64 = f[5].rsplit(':').next().unwrap().parse().unwrap();
        if node != ino {
            continue;
        }
        let kind = match f[3] {
            "READ" => LockType::Read,
            "WRITE" => LockType::Write,
            other => panic!("lock type {other}"),
        };
        let end = if f[7] == "EOF" {
            OFFSET_MAX
        } else {
            f[7].parse().unwrap()
        };
        v.push((f[1] == "FLOCK", kind, f[6].parse().unwrap(), end));
    }
    v.sort_by_key(|l| (l.0, l.2, l.3, l.1 == LockType::Write));
    v
}

fn table_locks(held: &[HeldLock]) -> Vec<(bool, LockType, u64, u64)> {
    let mut v: Vec<_> = held
        .iter()
        .map(|h| (h.flavor == Flavor::Flock, h.kind, h.start, h.end))
        .collect();
    v.sort_by_key(|l| (l.0, l.2, l.3, l.1 == LockType::Write));
    v
}

#[test]
fn random_sequences_match_tmpfs() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("f");
    File::create(&path).unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    // Owner i is open file description `files[i]` (OFD locks and flock).
    let files: Vec<File> = (0..3)
        .map(|_| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap()
        })
        .collect();
    let table = LocalLocks::new();
    let owner = |i: usize, flavor| LockOwner {
        id: i as u64 + 1,
        file: i as u64 + 1,
        flavor,
    };
    let seed = std::env::var("DCACHE_LOCK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_u64);
    let mut rng = Rng(seed);
    let (mut taken, mut refused, mut reported) = (0, 0, 0);
    for step in 0..4000 {
        let i = rng.below(3) as usize;
        let fd = files[i].as_raw_fd();
        let op = rng.below(10);
        let what = format!("seed {seed:#x} step {step}: owner {i} op {op}");
        if op == 9 {
            // flock: shared, exclusive or unlock, never blocking.
            let (how, kind) = match rng.below(3) {
                0 => (libc::LOCK_SH, Some(LockType::Read)),
                1 => (libc::LOCK_EX, Some(LockType::Write)),
                _ => (libc::LOCK_UN, None),
            };
            // SAFETY: flock(2) on a descriptor we own.
            let k = unsafe { libc::flock(fd, how | libc::LOCK_NB) };
            let k = if k == 0 { Ok(()) } else { Err(Errno::last()) };
            let lock = FileLock::new(kind, 0, OFFSET_MAX, 1);
            let t = table.setlk(INO, &owner(i, Flavor::Flock), &lock);
            assert_eq!(k, t, "{what}: flock {how}");
        } else {
            let start = rng.below(48);
            let len = if rng.below(8) == 0 {
                0
            } else {
                1 + rng.below(24)
            };
            let (s, e) = range(start, len);
            let kind = match rng.below(3) {
                0 => libc::F_RDLCK,
                1 => libc::F_WRLCK,
                _ => libc::F_UNLCK,
            };
            let lock = FileLock::new(kind_of(kind), s, e, 1);
            let me = owner(i, Flavor::Posix);
            if op < 3 && kind != libc::F_UNLCK {
                // F_OFD_GETLK: the kernel's conflicting lock must be one
                // that conflicts in the table; none iff none.
                let mut fl = flock_struct(kind, start, len);
                // SAFETY: fcntl with a live struct flock.
                assert_eq!(unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) }, 0);
                let t = table.getlk(INO, &me, &lock).unwrap();
                if i32::from(fl.l_type) == libc::F_UNLCK {
                    assert_eq!(t, None, "{what}: kernel reports no conflict");
                } else {
                    reported += 1;
                    let (ks, ke) = range(fl.l_start as u64, fl.l_len as u64);
                    let held = table.held(INO);
                    assert!(
                        held.iter().any(|h| h.flavor == Flavor::Posix
                            && h.owner != me.id
                            && (h.kind, h.start, h.end)
                                == (kind_of(fl.l_type.into()).unwrap(), ks, ke)),
                        "{what}: kernel reports {:?} {ks}..={ke}, table holds {held:?}",
                        fl.l_type
                    );
                    assert!(t.is_some(), "{what}: table reports no conflict");
                }
            } else {
                let fl = flock_struct(kind, start, len);
                // SAFETY: fcntl with a live struct flock.
                let k = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &fl) };
                let k = if k == 0 { Ok(()) } else { Err(Errno::last()) };
                let t = table.setlk(INO, &me, &lock);
                assert_eq!(k, t, "{what}: F_OFD_SETLK {kind} {s}..={e}");
                if t.is_ok() {
                    taken += 1;
                } else {
                    refused += 1;
                }
            }
        }
        assert_eq!(
            kernel_locks(ino),
            table_locks(&table.held(INO)),
            "{what}: the locks held"
        );
    }
    // Closing an open file drops its OFD and flock locks, as RELEASE does.
    for (i, f) in files.into_iter().enumerate() {
        drop(f);
        table.release(INO, LockRelease::File(i as u64 + 1));
        assert_eq!(kernel_locks(ino), table_locks(&table.held(INO)));
    }
    assert!(table.held(INO).is_empty());
    println!(
        "4000 steps (seed {seed:#x}): {taken} locks set, {refused} refused (EAGAIN), {reported} conflicts reported, all as tmpfs"
    );
    assert!(
        taken > 500 && refused > 100 && reported > 50,
        "the sequence exercises conflicts"
    );
}
