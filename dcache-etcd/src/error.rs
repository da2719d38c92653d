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
