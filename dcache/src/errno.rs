//! POSIX error numbers as a small Copy type. Every fallible call in dcache
//! returns `Result<T, Errno>`; bad input becomes one of these, never a panic.

use std::fmt;

/// A POSIX error number (Linux's values), e.g. [`Errno::ENOENT`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

/// `Result<T, Errno>`, what every fallible dcache call returns.
pub type Result<T> = std::result::Result<T, Errno>;

/// The named errnos: one documented constant each (the doc is the C
/// library's description), and the table behind [`Errno::name`].
macro_rules! errnos {
    ($($name:ident => $desc:literal,)*) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`: ", $desc, ".")]
                pub const $name: Errno = Errno(libc::$name);
            )*
        }

        /// Every named errno with its name, for [`Errno::name`].
        const KNOWN: &[(Errno, &str)] = &[$((Errno::$name, stringify!($name)),)*];
    };
}

errnos! {
    EPERM => "Operation not permitted",
    ENOENT => "No such file or directory",
    EIO => "Input/output error",
    E2BIG => "Argument list too long",
    EBADF => "Bad file descriptor",
    EAGAIN => "Resource temporarily unavailable",
    ENOMEM => "Cannot allocate memory",
    EACCES => "Permission denied",
    EBUSY => "Device or resource busy",
    EEXIST => "File exists",
    EXDEV => "Invalid cross-device link",
    ENOTDIR => "Not a directory",
    EISDIR => "Is a directory",
    EINVAL => "Invalid argument",
    ENFILE => "Too many open files in system",
    EMFILE => "Too many open files",
    EFBIG => "File too large",
    ENOSPC => "No space left on device",
    EROFS => "Read-only file system",
    EMLINK => "Too many links",
    ERANGE => "Numerical result out of range",
    ENAMETOOLONG => "File name too long",
    ENOSYS => "Function not implemented",
    ENOTEMPTY => "Directory not empty",
    ELOOP => "Too many levels of symbolic links",
    ENODATA => "No data available",
    EOVERFLOW => "Value too large for defined data type",
    ENOTSUP => "Operation not supported",
    ESTALE => "Stale file handle",
    ENOTCONN => "Transport endpoint is not connected",
}

impl Errno {
    /// `EOPNOTSUPP`: the same number as [`Errno::ENOTSUP`] on Linux (what
    /// an unsupported extended attribute namespace answers).
    pub const EOPNOTSUPP: Errno = Errno::ENOTSUP;

    /// The errno of an `std::io::Error`, EIO when it carries none.
    pub fn from_io(e: &std::io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }

    /// The calling thread's current `errno` (after a failed libc call).
    pub fn last() -> Errno {
        Errno::from_io(&std::io::Error::last_os_error())
    }

    /// The number itself.
    pub fn raw(self) -> i32 {
        self.0
    }

    /// The symbolic name (`"ENOENT"`), or `"E<n>"` for one not listed here.
    pub fn name(self) -> String {
        KNOWN
            .iter()
            .find(|(e, _)| *e == self)
            .map(|(_, n)| n.to_string())
            .unwrap_or_else(|| format!("E{}", self.0))
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl Errno {
    /// The C library's description (`"No such file or directory"`),
    /// without the `" (os error N)"` std appends.
    pub fn description(self) -> String {
        let s = std::io::Error::from_raw_os_error(self.0).to_string();
        match s.rsplit_once(" (os error ") {
            Some((text, _)) => text.to_string(),
            None => s,
        }
    }
}

/// `ENOENT: No such file or directory`.
impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name(), self.description())
    }
}

impl std::error::Error for Errno {}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Self {
        Errno::from_io(&e)
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Errno;

    #[test]
    fn display_is_name_colon_description() {
        assert_eq!(
            Errno::ENOENT.to_string(),
            "ENOENT: No such file or directory"
        );
        assert_eq!(Errno::ENOTDIR.to_string(), "ENOTDIR: Not a directory");
        assert_eq!(
            Errno::ENOTCONN.to_string(),
            "ENOTCONN: Transport endpoint is not connected"
        );
        for e in [Errno::EIO, Errno::ESTALE, Errno(4095)] {
            let s = e.to_string();
            assert!(!s.contains("os error") && !s.contains('('), "{s}");
        }
        assert_eq!(format!("{:?}", Errno::EIO), "EIO");
    }
}
