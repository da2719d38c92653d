//! Passthrough I/O: a file the backend keeps on a host filesystem is
//! opened with a backing file (`FUSE_DEV_IOC_BACKING_OPEN` on the host
//! descriptor, `FOPEN_PASSTHROUGH` and the id in the OPEN reply), and the
//! kernel then reads, writes and maps it itself, as the daemon's
//! credential, without a request. The kernel wants every open of an inode
//! to name the same backing (EBUSY otherwise), so an inode has one id
//! while any of its files is open here, given back at the last RELEASE.
//!
//! The kernel registers backing files only for a daemon with
//! CAP_SYS_ADMIN ([`may_register`]): without it (a user's daemon, mounted
//! through fusermount3) passthrough is not asked for at all, which keeps
//! FUSE_HANDLE_KILLPRIV_V2 (the two exclude each other). Where the kernel
//! refuses anyway (a stacking depth it does not allow) the first failure
//! is logged and the mount goes on without passthrough; requests then
//! carry the I/O as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::core::FuseCore;
use crate::handles::Fh;
use crate::wire::dev::Dev;

/// Linux's `CAP_SYS_ADMIN`, which `FUSE_DEV_IOC_BACKING_OPEN` requires.
const CAP_SYS_ADMIN: u32 = 21;

/// Whether this process may register backing files: `CAP_SYS_ADMIN` in
/// its effective set (`CapEff` of /proc/self/status; false if unreadable).
pub(crate) fn may_register() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| has_cap(&s, CAP_SYS_ADMIN))
}

/// Whether the `CapEff:` line of a /proc status text has capability `cap`.
fn has_cap(status: &str, cap: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << cap) != 0)
}

#[derive(Default)]
struct State {
    /// Backend inode -> (backing id, files open with it).
    by_ino: HashMap<u64, (i32, u32)>,
    /// Handle -> backend inode, for the files opened with a backing id.
    by_fh: HashMap<u64, u64>,
}

/// The backing files of one mount (registered on the connection the
/// caller passes: the mount's own).
#[derive(Default)]
pub(crate) struct Backing {
    /// Negotiated (FUSE_PASSTHROUGH) and not refused since.
    on: AtomicBool,
    log: bool,
    state: Mutex<State>,
}

impl Backing {
    pub(crate) fn new(log: bool) -> Backing {
        Backing {
            log,
            ..Backing::default()
        }
    }

    /// The kernel agreed to passthrough: files opened from now on may
    /// use it.
    pub(crate) fn enable(&self) {
        // Relaxed: a switch read by later requests; no data rides on it.
        self.on.store(true, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The backing id for the file just opened as `fh`, if it gets one
    /// (registered on `dev`).
    pub(crate) fn open(&self, dev: &Dev, core: &FuseCore, fh: Fh) -> Option<i32> {
        // Relaxed: see `enable`.
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let (ino, fd) = core.backing_file(fh).ok()??;
        let mut st = self.lock();
        let id = match st.by_ino.get_mut(&ino) {
            Some((id, n)) => {
                *n += 1;
                *id
            }
            None => {
                match dev.backing_open(std::os::fd::AsFd::as_fd(&fd)) {
                    Ok(id) => {
                        st.by_ino.insert(ino, (id, 1));
                        id
                    }
                    Err(e) => {
                        // Relaxed: see `enable`; only the first failure logs.
                        if self.on.swap(false, Ordering::Relaxed) && self.log {
                            eprintln!("dcache: passthrough I/O off: the kernel refused a backing file ({e})");
                        }
                        return None;
                    }
                }
            }
        };
        st.by_fh.insert(fh.raw(), ino);
        Some(id)
    }

    /// `fh` is being released: its inode's backing id goes (from `dev`)
    /// with the last file opened with it.
    pub(crate) fn release(&self, dev: &Dev, fh: Fh) {
        let mut st = self.lock();
        let Some(ino) = st.by_fh.remove(&fh.raw()) else {
            return;
        };
        let last = match st.by_ino.get_mut(&ino) {
            Some((id, n)) => {
                *n -= 1;
                (*n == 0).then_some(*id)
            }
            None => None,
        };
        if let Some(id) = last {
            st.by_ino.remove(&ino);
            let _ = dev.backing_close(id);
        }
    }

    /// Backing ids registered now (for tests and the usage line).
    pub(crate) fn registered(&self) -> usize {
        self.lock().by_ino.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_lines() {
        let root = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert!(has_cap(root, CAP_SYS_ADMIN));
        let user = "CapPrm:\t000001ffffffffff\nCapEff:\t0000000000000000\n";
        assert!(!has_cap(user, CAP_SYS_ADMIN));
        // Only that bit: CAP_DAC_OVERRIDE and CAP_FOWNER are not enough.
        assert!(!has_cap("CapEff:\t0000000000000009\n", CAP_SYS_ADMIN));
        assert!(has_cap("CapEff:\t0000000000200000\n", CAP_SYS_ADMIN));
        assert!(!has_cap("no such line\n", CAP_SYS_ADMIN));
        assert!(!has_cap("CapEff:\tnot hex\n", CAP_SYS_ADMIN));
    }
}
