//! Which transport carries a mount's requests: FUSE over io_uring where
//! the kernel offers it and the options allow it, else /dev/fuse reads and
//! writes; and, for the log, why.

use std::fmt;

use crate::wire::uring;

/// How a mount's requests reach the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// FUSE over io_uring: `queues` queues (one per possible CPU) of
    /// `depth` entries, each queue with a thread of its own; one /dev/fuse
    /// worker takes FORGETs and INTERRUPTs.
    Uring {
        /// Queues (one per possible CPU).
        queues: usize,
        /// Entries per queue.
        depth: usize,
    },
    /// `/dev/fuse` reads and writes by `workers` threads.
    DevFuse {
        /// Worker threads.
        workers: usize,
        /// Why not io_uring.
        why: String,
    },
}

impl Transport {
    /// Whether requests come on io_uring queues.
    pub fn is_uring(&self) -> bool {
        matches!(self, Transport::Uring { .. })
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Uring { queues, depth } => write!(
                f,
                "FUSE over io_uring, {queues} queue(s) of {depth} entries (one per CPU)"
            ),
            Transport::DevFuse { workers, why } => {
                write!(
                    f,
                    "FUSE over /dev/fuse, {workers} worker(s) (not io_uring: {why})"
                )
            }
        }
    }
}

/// Why the handshake did not agree on io_uring: the mount's `uring`
/// option, whether rings can be made here, and what the kernel has.
pub(super) fn why_not(option: Option<bool>, usable: bool) -> String {
    if option == Some(false) {
        return "-o no_uring".into();
    }
    if !usable {
        return "this process cannot make io_uring rings (kernel.io_uring_disabled, or a seccomp filter)".into();
    }
    match uring::kernel_enabled() {
        None => "this kernel has no FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING)".into(),
        Some(false) => format!(
            "the kernel does not offer it ({} is N)",
            uring::ENABLE_PARAM
        ),
        Some(true) => "the kernel did not offer it".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_line_says_which_and_why() {
        let u = Transport::Uring {
            queues: 2,
            depth: 8,
        };
        assert!(u.is_uring());
        assert!(u.to_string().starts_with("FUSE over io_uring, 2 queue(s)"));
        let d = Transport::DevFuse {
            workers: 3,
            why: why_not(Some(false), true),
        };
        assert_eq!(
            d.to_string(),
            "FUSE over /dev/fuse, 3 worker(s) (not io_uring: -o no_uring)"
        );
        assert!(why_not(None, false).contains("cannot make io_uring rings"));
    }
}
