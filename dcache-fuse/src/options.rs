//! `-o` mount options, in libfuse's spelling where libfuse has one.
//!
//! | option | meaning |
//! |---|---|
//! | `attr_timeout=S` | seconds the kernel caches attributes (default 1) |
//! | `entry_timeout=S` | seconds it caches a name (default 1) |
//! | `negative_timeout=S` | seconds it caches a missing name (default 0: not at all) |
//! | `timeout=S` | all three |
//! | `allow_other`, `allow_root` | who besides the mounting user may enter |
//! | `default_permissions` / `no_default_permissions` | the kernel checks modes (default), or dcache does, for the credential of each request (uid, gid, and the groups of the calling task from /proc) |
//! | `readdirplus` / `no_readdirplus` | answer `ls -l` with one request per page (default on) |
//! | `direct_io` / `no_direct_io` | bypass the page cache (default: only kernfs) |
//! | `passthrough_io` / `no_passthrough_io` | the kernel does the I/O of passthrough's host files itself (FUSE passthrough, needs root; default on) |
//! | `writeback_cache` / `no_writeback_cache` | the kernel keeps written data in its page cache and sends it later, merged (FUSE_WRITEBACK_CACHE; default off; needs `default_permissions`; turns passthrough I/O off; see docs/DESIGN.md for what it changes) |
//! | `zero_trip_open` / `no_zero_trip_open` | let the kernel open files and directories without asking where nothing needs the open (FUSE_NO_OPEN_SUPPORT, FUSE_NO_OPENDIR_SUPPORT; default on, only with `default_permissions`) |
//! | `posix_acl` / `no_posix_acl` | have the kernel check POSIX ACLs and leave the umask to the daemon (FUSE_POSIX_ACL, FUSE_DONT_MASK; default on for backends that keep attributes) |
//! | `locks` / `no_locks` | the daemon keeps `flock` and `fcntl` locks (FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS): by default for backends shared across hosts (etcd), with `locks` for any backend that keeps them (memfs, passthrough: same semantics as the kernel's own, one request per lock; turns zero-trip opens off for files); `no_locks` leaves locking to each host's kernel |
//! | `xattr` / `no_xattr` | serve extended attributes (default), or answer the first request for one with ENOSYS, after which the kernel sends none and answers EOPNOTSUPP itself: no xattrs and no POSIX ACLs on the mount, and, with passthrough I/O, no GETXATTR of `security.capability` before every `write(2)` |
//! | `killpriv` / `no_killpriv` | have the kernel say who wrote or truncated, so set-id bits drop by Linux's rule (FUSE_HANDLE_KILLPRIV_V2; default on) |
//! | `file_handles` / `no_file_handles` | passthrough names host inodes by file handles where the host allows (default on), or holds a descriptor per cached inode |
//! | `max_threads=N`, `clone_fd` / `no_clone_fd` | workers and per-worker /dev/fuse fds |
//! | `max_cached=N` | unused names the dentry cache keeps, with their inodes, beyond what the kernel holds (default 65536; bounds the daemon's memory and, where the backend holds a descriptor per inode, its descriptors) |
//! | `max_nodes=N` | nodes the kernel may hold before the daemon asks it to drop some (default 131072; 0: no bound): with `max_cached`, bounds the daemon's memory whatever the kernel caches |
//! | `uring` / `no_uring` | serve requests through FUSE over io_uring (one queue and thread per CPU) where the kernel offers it (default: whenever it does: Linux 6.14+ with `/sys/module/fuse/parameters/enable_uring` Y), or always through /dev/fuse reads and writes; on io_uring `max_threads`, `clone_fd` and `-s` do not apply (one /dev/fuse worker is left, for FORGETs and INTERRUPTs) |
//! | `poll_us=N` | over /dev/fuse, one worker busy-polls it until N µs pass without a request (default: 1000 on machines with 4 CPUs or more, else off; needs `clone_fd` with several workers); over io_uring, only when given, a `SCHED_IDLE` keeper per queue keeps the queue's CPU from halting until N µs pass without a request there (for VMs with dedicated cores; see `crate::awake`); 0: neither |
//! | `fsname=`, `subtype=`, `ro`, `rw`, `nosuid`, `suid`, `nodev`, `dev`, `noexec`, `exec`, `noatime`, `atime`, `sync`, `async`, `dirsync`, `auto_unmount` | passed to the mount |

use std::time::Duration;

use crate::wire::mount::MountSpec;

/// The `-o` options, one line each: what `dcache mount -o help` prints and
/// `dcache mount --help` lists.
pub const HELP: &str = "\
attr_timeout=S          seconds the kernel caches attributes (default 1)
entry_timeout=S         seconds the kernel caches a name (default 1)
negative_timeout=S      seconds it caches a missing name (default 0: not at all)
timeout=S               all three timeouts
allow_other             let every user enter (non-root: needs user_allow_other in /etc/fuse.conf)
allow_root              let root enter it too
default_permissions     the kernel checks permission bits (default)
no_default_permissions  dcache checks them, for each request's credential
readdirplus             answer `ls -l` with one request per page (default)
no_readdirplus          plain READDIR, then one LOOKUP per name
direct_io               read and write around the page cache (default: kernfs)
no_direct_io            use the page cache
passthrough_io          the kernel reads and writes passthrough's host files itself (default, as root)
no_passthrough_io       every read and write goes through the daemon
writeback_cache         the kernel caches writes and sends them later, merged (default off)
no_writeback_cache      every write reaches the daemon before write(2) returns (default)
zero_trip_open          the kernel opens without asking where nothing needs the open (default)
no_zero_trip_open       every open and opendir is a request
posix_acl               the kernel checks POSIX ACLs, the daemon applies the umask (default)
no_posix_acl            neither (as on kernels without FUSE_POSIX_ACL)
locks                   the daemon keeps flock/fcntl locks, for any backend that can (default: shared backends only)
no_locks                each host's kernel locks for its own processes only
xattr                   serve extended attributes (default)
no_xattr                none: the kernel stops asking (no xattrs or ACLs; no round trip before each write)
killpriv                set-id bits dropped by Linux's rule on writes by others (default)
no_killpriv             the kernel's older rule (FUSE without HANDLE_KILLPRIV_V2)
file_handles            passthrough names host inodes by file handles where it can (default)
no_file_handles         passthrough holds a descriptor per cached inode
max_threads=N           worker threads (default: one per CPU, 2 to 8)
clone_fd                one /dev/fuse descriptor per worker (default)
no_clone_fd             every worker reads one descriptor
max_cached=N            unused names kept in the dentry cache (default 65536)
max_nodes=N             nodes the kernel may hold before it is asked to drop some (default 131072; 0: no bound)
poll_us=N               poll until N us pass idle (/dev/fuse: a worker, default 1000 on 4+ CPUs; io_uring: an idle-priority thread per queue's CPU, only if given); 0: never
uring                   FUSE over io_uring where the kernel offers it (default)
no_uring                always /dev/fuse reads and writes
fsname=NAME             the mount's source in the mount table (default: the backend)
subtype=NAME            the mount's type is fuse.NAME (default fuse.dcache)
ro, rw                  read-only, or read-write (default)
nosuid, suid            ignore (default), or honour set-user-ID bits
nodev, dev              no device files (default), or allow them
noexec, exec            no executing from the mount, or allow it (default)
noatime, atime          do not update access times, or do (default)
sync, async             synchronous writes, or not (default)
dirsync                 synchronous directory changes
auto_unmount            unmount when the daemon dies (through fusermount3)
help                    print this list
";

/// [`MountOptions::max_cached`] unless `-o max_cached=` says otherwise:
/// about 40 MiB of names and inodes at most, whatever the tree's size.
pub const DEFAULT_MAX_CACHED: usize = 1 << 16;

/// [`MountOptions::max_nodes`] unless `-o max_nodes=` says otherwise:
/// about 90 MiB of nodes the kernel holds, whatever the tree's size.
pub const DEFAULT_MAX_NODES: usize = 1 << 17;

/// The subtype our mounts carry unless `-o subtype=` says otherwise: the
/// kernel lists them as type `fuse.dcache`.
pub const DEFAULT_SUBTYPE: &str = "dcache";

/// How long the kernel may trust what we tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// How long the kernel caches attributes (`attr_timeout`).
    pub attr: Duration,
    /// How long the kernel caches a name (`entry_timeout`).
    pub entry: Duration,
    /// Zero: missing names are answered with ENOENT and not cached.
    pub negative: Duration,
}

impl Default for Timeouts {
    /// libfuse's defaults.
    fn default() -> Self {
        Timeouts {
            attr: Duration::from_secs(1),
            entry: Duration::from_secs(1),
            negative: Duration::ZERO,
        }
    }
}

impl Timeouts {
    /// Every timeout zero: every lookup and stat reaches the daemon.
    pub const NONE: Timeouts = Timeouts {
        attr: Duration::ZERO,
        entry: Duration::ZERO,
        negative: Duration::ZERO,
    };
}

/// How long the poller keeps spinning after the last request (one to two
/// of these): long enough to span a client's gap between two requests,
/// short enough that the governor wakes rarely.
pub const DEFAULT_POLL: Duration = Duration::from_micros(1000);

/// Poll by default only on machines with this many CPUs: the poller keeps
/// one busy, which on smaller machines is a client's.
pub const MIN_CPUS_TO_POLL: usize = 4;

/// Everything `-o` can set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOptions {
    /// The kernel's cache timeouts (`attr_timeout`, `entry_timeout`,
    /// `negative_timeout`, `timeout`).
    pub timeouts: Timeouts,
    /// Who besides the mounting user may enter (`allow_other`,
    /// `allow_root`).
    pub allow: Allow,
    /// The kernel checks permissions (`default_permissions`, the default);
    /// `false`: dcache checks them for each request's credential.
    pub default_permissions: bool,
    /// Advertise READDIRPLUS (default on).
    pub readdirplus: bool,
    /// `None`: the backend's default.
    pub direct_io: Option<bool>,
    /// Let the kernel do the I/O of files the backend keeps on a host
    /// filesystem (`passthrough_io`, default on; FUSE passthrough).
    pub passthrough_io: bool,
    /// Ask for FUSE_NO_OPEN_SUPPORT / FUSE_NO_OPENDIR_SUPPORT where they
    /// apply (`zero_trip_open`, default on).
    pub zero_trip_open: bool,
    /// Ask for FUSE_WRITEBACK_CACHE (`writeback_cache`, default off).
    pub writeback_cache: bool,
    /// Ask for FUSE_POSIX_ACL and FUSE_DONT_MASK where the backend keeps
    /// attributes (`posix_acl`, default on).
    pub posix_acl: bool,
    /// Serve extended attributes (`xattr`, default on); off, the first
    /// xattr request is answered ENOSYS and the kernel sends no more.
    pub xattr: bool,
    /// Ask for FUSE_HANDLE_KILLPRIV_V2 (`killpriv`, default on).
    pub killpriv: bool,
    /// Ask for FUSE_POSIX_LOCKS and FUSE_FLOCK_LOCKS: `Some(true)`
    /// (`locks`) for any backend that keeps locks, `Some(false)`
    /// (`no_locks`) never, `None` (default) for backends shared across
    /// hosts.
    pub locks: Option<bool>,
    /// The passthrough backend anchors inodes by file handles where the
    /// host allows it (`file_handles`, default on).
    pub file_handles: bool,
    /// Worker threads; 0 picks one per CPU (2 to 8).
    pub max_threads: usize,
    /// Unused dentries the cache keeps (`max_cached=N`, default
    /// [`DEFAULT_MAX_CACHED`]): the `Vfs`'s `Config::max_unused`.
    pub max_cached: usize,
    /// Nodes the kernel may hold before the daemon asks it to drop some
    /// (`max_nodes=N`, default [`DEFAULT_MAX_NODES`]; 0: no bound).
    pub max_nodes: usize,
    /// One /dev/fuse descriptor per worker (`clone_fd`, default on).
    pub clone_fd: bool,
    /// FUSE over io_uring ([`crate::wire::uring`]): `Some(false)` never
    /// (`no_uring`); otherwise whenever the kernel offers it (`uring`, or
    /// `None`, the default), with /dev/fuse where it does not.
    pub uring: Option<bool>,
    /// Busy-poll window ([`super::poll`]), and the io_uring keepers'
    /// ([`crate::awake`]); zero: neither; `None`: [`DEFAULT_POLL`] for the
    /// /dev/fuse poller on machines with [`MIN_CPUS_TO_POLL`] CPUs or more,
    /// no keepers.
    pub poll: Option<Duration>,
    /// The mount's source name (`fsname=`); `None`: a default chosen by
    /// the caller (the backend's name for `dcache mount`).
    pub fsname: Option<String>,
    /// The mount's type suffix (`subtype=`); `None`: [`DEFAULT_SUBTYPE`].
    pub subtype: Option<String>,
    /// The generic mount flags asked for, by name (`ro`, `nosuid`, ...).
    pub flags: Vec<String>,
    /// Unmount when the daemon dies (`auto_unmount`, via fusermount3).
    pub auto_unmount: bool,
}

/// Who besides the mounting user may enter the mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allow {
    /// Only the user who mounted (the kernel enforces it).
    Owner,
    /// That user and root (`allow_root`: mounted `allow_other`, and the
    /// daemon refuses everyone else's requests with EACCES, as libfuse does).
    OwnerAndRoot,
    /// Everyone (`allow_other`).
    All,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            timeouts: Timeouts::default(),
            allow: Allow::Owner,
            default_permissions: true,
            readdirplus: true,
            direct_io: None,
            passthrough_io: true,
            zero_trip_open: true,
            writeback_cache: false,
            posix_acl: true,
            xattr: true,
            killpriv: true,
            locks: None,
            file_handles: true,
            max_threads: 0,
            max_cached: DEFAULT_MAX_CACHED,
            max_nodes: DEFAULT_MAX_NODES,
            clone_fd: true,
            uring: None,
            poll: None,
            fsname: None,
            subtype: None,
            flags: Vec::new(),
            auto_unmount: false,
        }
    }
}

/// Seconds as a float, as libfuse takes them.
fn seconds(key: &str, v: &str) -> Result<Duration, String> {
    let s: f64 = v
        .parse()
        .map_err(|_| format!("bad value for {key}: {v:?} (seconds expected)"))?;
    if !(0.0..=1e9).contains(&s) {
        return Err(format!("bad value for {key}: {v:?} (0 to 1e9 seconds)"));
    }
    Ok(Duration::from_secs_f64(s))
}

impl MountOptions {
    /// Whether the `-o` arguments ask for [`HELP`] (`-o help`).
    pub fn asks_for_help<S: AsRef<str>>(args: &[S]) -> bool {
        args.iter()
            .any(|a| a.as_ref().split(',').any(|o| o == "help"))
    }

    /// The dentry cache's sizing for a mount with these options: the hash
    /// table is sized once for what the cache may hold, the unused
    /// dentries it keeps plus the nodes the kernel may hold (without a
    /// bound on nodes, twice the unused ones), so that its chains stay
    /// short when the cache is full.
    pub fn vfs_config(&self) -> dcache::vfs::Config {
        let held = match self.max_nodes {
            0 => self.max_cached,
            n => n,
        };
        let d = dcache::vfs::Config::default();
        dcache::vfs::Config {
            capacity: self.max_cached.saturating_add(held).max(d.capacity),
            max_unused: self.max_cached,
            ..d
        }
    }

    /// Parse every `-o` argument (each a comma-separated list).
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<MountOptions, String> {
        let mut o = MountOptions::default();
        for a in args {
            for one in a.as_ref().split(',').filter(|s| !s.is_empty()) {
                o.apply(one)?;
            }
        }
        // With a writeback cache the kernel reads pages to fill partial
        // writes, on write-only opens too: the daemon opens those files
        // for reading as well, which only the kernel's own check of the
        // caller (default_permissions) makes safe.
        if o.writeback_cache && !o.default_permissions {
            return Err(
                "writeback_cache needs default_permissions (the kernel then checks each open)"
                    .to_string(),
            );
        }
        Ok(o)
    }

    /// Apply one option.
    pub fn apply(&mut self, one: &str) -> Result<(), String> {
        let (key, val) = match one.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (one, None),
        };
        fn need<'a>(key: &str, v: Option<&'a str>) -> Result<&'a str, String> {
            v.ok_or_else(|| format!("option {key} needs a value"))
        }
        match key {
            "poll_us" => {
                let us: u64 = need(key, val)?
                    .parse()
                    .ok()
                    .filter(|&n| n <= 1_000_000)
                    .ok_or_else(|| format!("bad value for poll_us: {val:?} (0 to 1000000)"))?;
                self.poll = Some(Duration::from_micros(us));
            }
            "attr_timeout" => self.timeouts.attr = seconds(key, need(key, val)?)?,
            "entry_timeout" => self.timeouts.entry = seconds(key, need(key, val)?)?,
            "negative_timeout" => self.timeouts.negative = seconds(key, need(key, val)?)?,
            "timeout" => {
                let t = seconds(key, need(key, val)?)?;
                self.timeouts = Timeouts {
                    attr: t,
                    entry: t,
                    negative: t,
                };
            }
            "max_threads" => {
                let v = need(key, val)?;
                self.max_threads = v
                    .parse()
                    .ok()
                    .filter(|&n| (1..=1024).contains(&n))
                    .ok_or_else(|| format!("bad value for max_threads: {v:?} (1 to 1024)"))?;
            }
            "max_cached" => {
                let v = need(key, val)?;
                self.max_cached = v.parse().ok().filter(|&n| n <= 1 << 30).ok_or_else(|| {
                    format!("bad value for max_cached: {v:?} (0 to 1073741824 entries)")
                })?;
            }
            "max_nodes" => {
                let v = need(key, val)?;
                self.max_nodes = v.parse().ok().filter(|&n| n <= 1 << 30).ok_or_else(|| {
                    format!("bad value for max_nodes: {v:?} (0 to 1073741824 nodes)")
                })?;
            }
            "fsname" => self.fsname = Some(need(key, val)?.to_string()),
            "subtype" => self.subtype = Some(need(key, val)?.to_string()),
            _ => {
                if val.is_some() {
                    return Err(format!("unknown mount option {one:?}"));
                }
                match key {
                    "allow_other" => self.allow = Allow::All,
                    "allow_root" => self.allow = Allow::OwnerAndRoot,
                    "auto_unmount" => self.auto_unmount = true,
                    "default_permissions" => self.default_permissions = true,
                    "no_default_permissions" => self.default_permissions = false,
                    "readdirplus" => self.readdirplus = true,
                    "no_readdirplus" => self.readdirplus = false,
                    "direct_io" => self.direct_io = Some(true),
                    "no_direct_io" => self.direct_io = Some(false),
                    "passthrough_io" => self.passthrough_io = true,
                    "no_passthrough_io" => self.passthrough_io = false,
                    "writeback_cache" => self.writeback_cache = true,
                    "no_writeback_cache" => self.writeback_cache = false,
                    "zero_trip_open" => self.zero_trip_open = true,
                    "no_zero_trip_open" => self.zero_trip_open = false,
                    "posix_acl" => self.posix_acl = true,
                    "no_posix_acl" => self.posix_acl = false,
                    "xattr" => self.xattr = true,
                    "no_xattr" => self.xattr = false,
                    "killpriv" => self.killpriv = true,
                    "no_killpriv" => self.killpriv = false,
                    "locks" => self.locks = Some(true),
                    "no_locks" => self.locks = Some(false),
                    "file_handles" => self.file_handles = true,
                    "no_file_handles" => self.file_handles = false,
                    "clone_fd" => self.clone_fd = true,
                    "no_clone_fd" => self.clone_fd = false,
                    "uring" => self.uring = Some(true),
                    "no_uring" => self.uring = Some(false),
                    "ro" | "rw" | "nosuid" | "suid" | "nodev" | "dev" | "noexec" | "exec"
                    | "noatime" | "atime" | "sync" | "async" | "dirsync" => {
                        self.flags.push(key.to_string())
                    }
                    _ => return Err(format!("unknown mount option {one:?}")),
                }
            }
        }
        Ok(())
    }

    /// Worker threads for this mount (`single`: the `-s` flag).
    pub fn threads(&self, single: bool) -> usize {
        if single {
            1
        } else if self.max_threads > 0 {
            self.max_threads
        } else {
            std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .clamp(2, 8)
        }
    }

    /// The busy-poll window for a session with these options, if it polls:
    /// never with `poll_us=0`, nor when several workers share one descriptor.
    pub fn poll_window(&self, single: bool) -> Option<Duration> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.poll_window_on(single, cpus)
    }

    /// [`poll_window`](Self::poll_window) on a machine with `cpus` CPUs.
    pub fn poll_window_on(&self, single: bool, cpus: usize) -> Option<Duration> {
        let shared = self.threads(single) > 1 && !self.clone_fd;
        let w = match self.poll {
            Some(w) => w,
            None if cpus >= MIN_CPUS_TO_POLL => DEFAULT_POLL,
            None => Duration::ZERO,
        };
        (!w.is_zero() && !shared).then_some(w)
    }

    /// How long an io_uring queue's keeper spins after the queue's last
    /// request ([`crate::awake`]): only where `poll_us` is given (keepers
    /// spin on the host's CPUs, which a VM may share: see the module), and
    /// not with `poll_us=0`.
    pub fn awake_window(&self) -> Option<Duration> {
        self.poll.filter(|w| !w.is_zero())
    }

    /// What to ask the kernel (or fusermount3) for; `default_fsname`
    /// unless `fsname=` was given.
    pub fn mount_spec(&self, default_fsname: &str) -> MountSpec {
        MountSpec {
            fsname: self.fsname.clone().unwrap_or_else(|| default_fsname.into()),
            subtype: self
                .subtype
                .clone()
                .unwrap_or_else(|| DEFAULT_SUBTYPE.into()),
            flags: self.flags.clone(),
            default_permissions: self.default_permissions,
            allow_other: self.allow != Allow::Owner,
            auto_unmount: self.auto_unmount,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_libfuse_timeouts() {
        let o = MountOptions::parse::<&str>(&[]).unwrap();
        assert_eq!(o.timeouts, Timeouts::default());
        assert_eq!(o.timeouts.negative, Duration::ZERO);
        assert!(o.default_permissions && o.readdirplus);
        // The table covers every dentry the cache may hold at once.
        let c = o.vfs_config();
        assert_eq!(c.max_unused, DEFAULT_MAX_CACHED);
        assert!(
            c.capacity >= DEFAULT_MAX_CACHED + DEFAULT_MAX_NODES,
            "{c:?}"
        );
        assert_eq!(o.uring, None, "io_uring where the kernel offers it");
    }

    #[test]
    fn uring_on_and_off() {
        assert_eq!(MountOptions::parse(&["uring"]).unwrap().uring, Some(true));
        assert_eq!(
            MountOptions::parse(&["uring,no_uring"]).unwrap().uring,
            Some(false),
            "the last one wins"
        );
        assert!(MountOptions::parse(&["uring=1"]).is_err());
        assert!(HELP.lines().any(|l| l.starts_with("no_uring ")));
    }

    #[test]
    fn locks_default_to_the_backend() {
        assert_eq!(MountOptions::parse::<&str>(&[]).unwrap().locks, None);
        assert_eq!(MountOptions::parse(&["locks"]).unwrap().locks, Some(true));
        assert_eq!(
            MountOptions::parse(&["locks,no_locks"]).unwrap().locks,
            Some(false)
        );
    }

    /// `-o help` lists every option `apply` takes, one line each.
    #[test]
    fn help_lists_every_option() {
        for line in HELP.lines() {
            assert!(!line.starts_with(' '), "a line of its own: {line:?}");
            let head = line.split("  ").next().unwrap();
            for name in head.split(", ") {
                let key = name.split('=').next().unwrap();
                if key.is_empty() || key == "help" {
                    continue;
                }
                let one = match name.split_once('=') {
                    Some((k, "S")) => format!("{k}=1"),
                    Some((k, "N")) => format!("{k}=2"),
                    Some((k, _)) => format!("{k}=x"),
                    None => name.to_string(),
                };
                assert!(MountOptions::parse(&[&one]).is_ok(), "{one} refused");
            }
        }
        for key in [
            "attr_timeout",
            "allow_other",
            "poll_us",
            "auto_unmount",
            "fsname",
        ] {
            assert!(HELP.lines().any(|l| l.starts_with(key)), "{key} missing");
        }
    }

    #[test]
    fn timeouts_and_flags() {
        let o = MountOptions::parse(&[
            "attr_timeout=0.5,entry_timeout=2",
            "negative_timeout=0,allow_other,no_readdirplus",
            "ro,fsname=x,max_threads=3",
        ])
        .unwrap();
        assert_eq!(o.timeouts.attr, Duration::from_millis(500));
        assert_eq!(o.timeouts.entry, Duration::from_secs(2));
        assert_eq!(o.timeouts.negative, Duration::ZERO);
        assert_eq!(o.allow, Allow::All);
        assert!(!o.readdirplus);
        assert_eq!(o.flags, vec!["ro".to_string()]);
        assert_eq!(o.fsname.as_deref(), Some("x"));
        assert_eq!(o.threads(false), 3);
        assert_eq!(o.threads(true), 1);
        let c = o.mount_spec("mem");
        assert_eq!((c.fsname.as_str(), c.subtype.as_str()), ("x", "dcache"));
        assert!(c.default_permissions && c.allow_other && !c.auto_unmount);
        assert_eq!(c.flags, vec!["ro".to_string()]);
        let t = MountOptions::parse(&["timeout=0"]).unwrap();
        assert_eq!(t.timeouts, Timeouts::NONE);
    }

    #[test]
    fn poll_window() {
        let d = MountOptions::parse::<&str>(&[]).unwrap();
        assert_eq!(d.poll_window_on(false, 16), Some(DEFAULT_POLL));
        assert_eq!(d.poll_window_on(true, 4), Some(DEFAULT_POLL));
        assert_eq!(d.poll_window_on(false, 2), None, "off by default on 2 CPUs");
        let o = MountOptions::parse(&["poll_us=250"]).unwrap();
        assert_eq!(o.poll_window_on(false, 2), Some(Duration::from_micros(250)));
        let off = MountOptions::parse(&["poll_us=0"]).unwrap();
        assert_eq!(off.poll_window_on(false, 16), None);
        assert_eq!(off.awake_window(), None, "poll_us=0: no keepers either");
        assert_eq!(d.awake_window(), None, "no keepers unless asked for");
        assert_eq!(o.awake_window(), Some(Duration::from_micros(250)));
        // Several workers on one descriptor would all spin: no polling...
        let shared = MountOptions::parse(&["no_clone_fd,max_threads=4"]).unwrap();
        assert_eq!(shared.poll_window_on(false, 16), None);
        // ...unless there is only one worker.
        assert_eq!(shared.poll_window_on(true, 16), Some(DEFAULT_POLL));
    }

    #[test]
    fn bad_options_are_refused() {
        for bad in [
            "attr_timeout",
            "attr_timeout=x",
            "entry_timeout=-1",
            "negative_timeout=nan",
            "max_threads=0",
            "frobnicate",
            "ro=1",
            "allow_other=yes",
            "poll_us",
            "poll_us=-1",
            "poll_us=1000001",
        ] {
            assert!(MountOptions::parse(&[bad]).is_err(), "{bad} accepted");
        }
    }
}
