//! Who is asking: a credential, as Linux's `struct cred` holds what a
//! filesystem looks at: the filesystem uid and gid, the real ones (for
//! `access(2)`), the supplementary groups, and the capabilities that
//! override file permissions.
//!
//! A `Vfs` call is made on behalf of one: [`Vfs::as_cred`] gives a handle
//! whose calls check permissions as the kernel would for that caller; the
//! `Vfs`'s own methods act as [`Cred::root`] (every capability), like the
//! kernel acting for itself.
//!
//! [`Vfs::as_cred`]: crate::Vfs::as_cred

use std::sync::OnceLock;

/// The capabilities that matter to a filesystem (bit numbers as Linux's
/// `CAP_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Caps(u32);

impl Caps {
    /// Change any file's owner, and its group to any group.
    pub const CHOWN: Caps = Caps(1 << 0);
    /// Read, write and search anything; execute anything with an x bit.
    pub const DAC_OVERRIDE: Caps = Caps(1 << 1);
    /// Read any file; read and search any directory.
    pub const DAC_READ_SEARCH: Caps = Caps(1 << 2);
    /// Act as the owner of any file (chmod, utimes, sticky directories).
    pub const FOWNER: Caps = Caps(1 << 3);
    /// Keep S_ISUID/S_ISGID where a change would clear them.
    pub const FSETID: Caps = Caps(1 << 4);
    /// Read and write `trusted.*` extended attributes, write `security.*`
    /// ones (the part of CAP_SYS_ADMIN a filesystem looks at).
    pub const SYS_ADMIN: Caps = Caps(1 << 21);
    /// No capabilities.
    pub const NONE: Caps = Caps(0);
    /// Every capability above.
    pub const ALL: Caps = Caps(0b1_1111 | 1 << 21);

    /// True if every capability in `c` is in `self`.
    pub const fn contains(self, c: Caps) -> bool {
        self.0 & c.0 == c.0
    }

    /// The capabilities in either set.
    pub const fn union(self, c: Caps) -> Caps {
        Caps(self.0 | c.0)
    }

    /// The capabilities of `self` that are not in `c`.
    pub const fn without(self, c: Caps) -> Caps {
        Caps(self.0 & !c.0)
    }

    /// From a Linux capability mask (the low word of `CapEff`).
    pub const fn from_linux(mask: u64) -> Caps {
        Caps((mask & Caps::ALL.0 as u64) as u32)
    }
}

/// A credential (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cred {
    /// Owner of new files; compared with a file's owner.
    pub fsuid: u32,
    /// Group of new files (outside setgid directories).
    pub fsgid: u32,
    /// Real uid: what `access(2)` checks without `AT_EACCESS`.
    pub uid: u32,
    /// Real gid: what `access(2)` checks without `AT_EACCESS`.
    pub gid: u32,
    /// Supplementary groups, sorted; read from `/proc/PID/status` on first
    /// use when `groups_of` names a task (FUSE requests: most checks never
    /// need them).
    groups: OnceLock<Vec<u32>>,
    groups_of: u32,
    /// The capabilities that override file permissions.
    pub caps: Caps,
    /// The umask the Vfs applies to new files' permission bits, except in
    /// a directory with a default ACL (see [`Cred::with_umask`]).
    umask: u16,
}

impl Cred {
    /// The superuser with every capability. (A const with a `OnceLock`
    /// inside: each use is a fresh, empty one, which is what `ROOT` means:
    /// no supplementary groups, none to load.)
    #[allow(clippy::declare_interior_mutable_const)]
    pub const ROOT: Cred = Cred {
        fsuid: 0,
        fsgid: 0,
        uid: 0,
        gid: 0,
        groups: OnceLock::new(),
        groups_of: 0,
        caps: Caps::ALL,
        umask: 0,
    };

    /// The superuser with every capability ([`Cred::ROOT`]).
    pub fn root() -> Cred {
        Cred::ROOT
    }

    /// An unprivileged caller: `uid`, `gid` (as both real and filesystem
    /// ids), supplementary `groups`, no capabilities.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dcache::fs::memfs::MemFs;
    /// use dcache::{At, Cred, Errno, Vfs};
    ///
    /// // Root-owned tree; `secret` is mode 0700.
    /// let fs = Arc::new(MemFs::with_root(0o755, 0, 0));
    /// fs.mkdir_p("secret", 0o700)?;
    /// let vfs = Vfs::new(fs)?;
    ///
    /// let alice = Cred::user(1000, 1000, &[100]);
    /// assert!(alice.in_group(100));
    /// // No search permission on `secret` for alice.
    /// let err = vfs.as_cred(&alice).stat(At::Root, "secret/x").unwrap_err();
    /// assert_eq!(err, Errno::EACCES);
    /// # Ok::<(), Errno>(())
    /// ```
    pub fn user(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        let mut g = groups.to_vec();
        g.sort_unstable();
        g.dedup();
        Cred {
            fsuid: uid,
            fsgid: gid,
            uid,
            gid,
            groups: OnceLock::from(g),
            groups_of: 0,
            caps: Caps::NONE,
            umask: 0,
        }
    }

    /// A caller whose supplementary groups are those of task `tid` (read
    /// from `/proc/TID/status` when first needed, as libfuse's
    /// `fuse_req_getgroups` does), with `caps`.
    pub fn of_task(uid: u32, gid: u32, tid: u32, caps: Caps) -> Cred {
        Cred {
            fsuid: uid,
            fsgid: gid,
            uid,
            gid,
            groups: OnceLock::new(),
            groups_of: tid,
            caps,
            umask: 0,
        }
    }

    /// The same caller with `caps`.
    pub fn with_caps(mut self, caps: Caps) -> Cred {
        self.caps = caps;
        self
    }

    /// This credential with a umask. The Vfs removes its bits from a new
    /// file's, directory's or node's permission bits unless the parent
    /// directory has a default ACL, which replaces the umask (Linux's
    /// `posix_acl_create`). The default is 0: a caller that applies its
    /// umask itself (as the `perm` of `create` and `mkdir` always could)
    /// keeps working, but then a default ACL limits umasked bits.
    pub fn with_umask(mut self, umask: u16) -> Cred {
        self.umask = umask & 0o777;
        self
    }

    /// The umask (see [`Cred::with_umask`]).
    pub fn umask(&self) -> u16 {
        self.umask
    }

    /// The same caller with different real ids (for `access(2)`).
    pub fn with_real_ids(mut self, uid: u32, gid: u32) -> Cred {
        self.uid = uid;
        self.gid = gid;
        self
    }

    /// The supplementary groups, sorted (loaded from `/proc` on first use
    /// for a credential made with [`Cred::of_task`]).
    pub fn groups(&self) -> &[u32] {
        self.groups.get_or_init(|| {
            if self.groups_of == 0 {
                return Vec::new();
            }
            let mut g = task_groups(self.groups_of);
            g.sort_unstable();
            g.dedup();
            g
        })
    }

    /// Linux's `in_group_p`: the filesystem gid or a supplementary group.
    #[inline]
    pub fn in_group(&self, gid: u32) -> bool {
        gid == self.fsgid || self.groups().binary_search(&gid).is_ok()
    }

    /// True if the credential holds every capability in `c`.
    #[inline(always)]
    pub fn has(&self, c: Caps) -> bool {
        self.caps.contains(c)
    }

    /// The calling thread's credential: its filesystem and real ids, its
    /// supplementary groups and its effective capabilities.
    pub fn current() -> Cred {
        #[cfg(miri)]
        return Cred::root();
        #[cfg(not(miri))]
        current_thread()
    }
}

/// The supplementary groups of task `tid`, from `/proc/TID/status` (empty
/// if it is gone or unreadable).
pub fn task_groups(tid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .map(|s| parse_groups(&s))
        .unwrap_or_default()
}

/// The `Groups:` line of a `/proc/PID/status` text.
pub fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(not(miri))]
fn current_thread() -> Cred {
    // SAFETY: setfsuid/setfsgid with an invalid id (-1) change nothing and
    // return the current filesystem id; getuid/getgid cannot fail.
    let (fsuid, fsgid, uid, gid) = unsafe {
        (
            libc::setfsuid(u32::MAX) as u32,
            libc::setfsgid(u32::MAX) as u32,
            libc::getuid(),
            libc::getgid(),
        )
    };
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        // SAFETY: the buffer holds groups.len() gids.
        let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
        if n >= 0 {
            groups.truncate(n as usize);
            break;
        }
        // EINVAL: more groups than room; ask for the count and retry.
        // SAFETY: a size of 0 only returns the count.
        let want = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        if want <= 0 {
            groups.clear();
            break;
        }
        groups.resize(want as usize, 0);
    }
    let mut cred = Cred::user(fsuid, fsgid, &groups).with_real_ids(uid, gid);
    cred.caps = Caps::from_linux(effective_caps());
    cred
}

/// This thread's effective capability mask (`CapEff`), 0 if unreadable.
#[cfg(not(miri))]
fn effective_caps() -> u64 {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut h = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget with a version-3 header reads into two Data records,
    // which `d` provides; pid 0 is the calling thread.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
    if r != 0 {
        return 0;
    }
    u64::from(d[0].effective) | u64::from(d[1].effective) << 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_sorted_and_checked_with_the_fsgid() {
        let c = Cred::user(1000, 100, &[30, 10, 20, 10]);
        assert_eq!(c.groups(), &[10, 20, 30]);
        assert!(c.in_group(100) && c.in_group(20));
        assert!(!c.in_group(0) && !c.in_group(25));
        assert!(!c.has(Caps::DAC_OVERRIDE));
        assert!(Cred::root().has(Caps::FOWNER.union(Caps::CHOWN)));
        assert!(Cred::root().has(Caps::SYS_ADMIN));
        assert!(!Caps::ALL.without(Caps::SYS_ADMIN).contains(Caps::SYS_ADMIN));
        // CAP_SYS_ADMIN is bit 21 of a Linux mask, CAP_FOWNER bit 3.
        assert_eq!(
            Caps::from_linux(1 << 21 | 1 << 3 | 1 << 40),
            Caps::SYS_ADMIN.union(Caps::FOWNER)
        );
    }

    #[test]
    fn groups_line() {
        let s = "Name:\tx\nUid:\t0\t0\t0\t0\nGroups:\t4 24 100 \nNgid:\t0\n";
        assert_eq!(parse_groups(s), vec![4, 24, 100]);
        assert_eq!(parse_groups("Groups:\n"), Vec::<u32>::new());
        #[cfg(not(miri))]
        assert!(task_groups(u32::MAX).is_empty());
    }

    #[cfg(not(miri))]
    #[test]
    fn current_matches_the_thread() {
        let c = Cred::current();
        // SAFETY: plain id queries.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        assert_eq!((c.fsuid, c.fsgid), (euid, egid));
        if euid == 0 {
            // Root in the initial namespace (as the tests run) has the
            // filesystem capabilities.
            assert!(c.has(Caps::DAC_OVERRIDE), "{c:?}");
        }
    }
}
