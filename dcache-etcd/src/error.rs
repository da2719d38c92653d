//! The error of the volume-level calls (format, connect, gc): an errno and
//! one line for a person.

use std::fmt;

use dcache::Errno;

/// An error with what to do about it: the errno a caller maps it to, and
/// one line for a person (naming the prefix, the command to run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub errno: Errno,
    pub message: String,
}

impl Error {
    pub fn new(errno: Errno, message: impl Into<String>) -> Error {
        Error {
            errno,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<Error> for Errno {
    fn from(e: Error) -> Errno {
        e.errno
    }
}

/// `ENOMEDIUM`: what connecting to a prefix that holds no volume returns.
pub const ENOMEDIUM: Errno = Errno(libc::ENOMEDIUM);

/// Why the volume failed an operation for a cause of its own (not the
/// caller's: a missing name is ENOENT and no cause). Every such failure
/// goes through [`crate::log`], which counts it here and logs it once,
/// rate-limited, with what it concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Cause {
    /// No etcd member answered the health probes within their bound (no
    /// member up, or none reachable from here): failed at once.
    Unavailable = 0,
    /// A request ran past `etcd_timeout` (members up but no quorum, or
    /// an answer lost with its outcome unknown).
    Timeout,
    /// The object store refused a request or did not answer in time.
    Store,
    /// The session lease is gone: what hung on it (locks, commit markers)
    /// was lost, and what depended on it is refused.
    Lease,
    /// A record did not decode: damaged, or written by a newer version.
    Corrupt,
    /// etcd refused this user.
    Permission,
    /// Buffered writes dropped after their failure was reported (they
    /// never land later).
    Dropped,
    /// A lock could not be granted on a view known to be current.
    Stale,
}

impl Cause {
    /// Every cause, in the order of their counters.
    pub const ALL: [Cause; 8] = [
        Cause::Unavailable,
        Cause::Timeout,
        Cause::Store,
        Cause::Lease,
        Cause::Corrupt,
        Cause::Permission,
        Cause::Dropped,
        Cause::Stale,
    ];

    /// The cause's name in log lines and counters.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Unavailable => "unavailable",
            Cause::Timeout => "timeout",
            Cause::Store => "store",
            Cause::Lease => "lease",
            Cause::Corrupt => "corrupt",
            Cause::Permission => "permission",
            Cause::Dropped => "dropped",
            Cause::Stale => "stale",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
