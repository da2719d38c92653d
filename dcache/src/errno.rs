//! POSIX error numbers as a small Copy type. Every fallible call in dcache
//! returns `Result<T, Errno>`; bad input becomes one of these, never a panic.

use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

pub type Result<T> = std::result::Result<T, Errno>;

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EMFILE: Errno = Errno(libc::EMFILE);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const EOVERFLOW: Errno = Errno(libc::EOVERFLOW);
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const ENOTCONN: Errno = Errno(libc::ENOTCONN);

    /// The errno of an `std::io::Error`, EIO when it carries none.
    pub fn from_io(e: &std::io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }

    /// The calling thread's current `errno` (after a failed libc call).
    pub fn last() -> Errno {
        Errno::from_io(&std::io::Error::last_os_error())
    }

    pub fn raw(self) -> i32 {
        self.0
    }

    /// The symbolic name (`"ENOENT"`), or `"E<n>"` for one not listed here.
    pub fn name(self) -> String {
        let known: &[(Errno, &str)] = &[
            (Errno::EPERM, "EPERM"),
            (Errno::ENOENT, "ENOENT"),
            (Errno::EIO, "EIO"),
            (Errno::EBADF, "EBADF"),
            (Errno::EAGAIN, "EAGAIN"),
            (Errno::ENOMEM, "ENOMEM"),
            (Errno::EACCES, "EACCES"),
            (Errno::EBUSY, "EBUSY"),
            (Errno::EEXIST, "EEXIST"),
            (Errno::EXDEV, "EXDEV"),
            (Errno::ENOTDIR, "ENOTDIR"),
            (Errno::EISDIR, "EISDIR"),
            (Errno::EINVAL, "EINVAL"),
            (Errno::EMFILE, "EMFILE"),
            (Errno::EFBIG, "EFBIG"),
            (Errno::ENOSPC, "ENOSPC"),
            (Errno::EROFS, "EROFS"),
            (Errno::EMLINK, "EMLINK"),
            (Errno::ERANGE, "ERANGE"),
            (Errno::ENAMETOOLONG, "ENAMETOOLONG"),
            (Errno::ENOSYS, "ENOSYS"),
            (Errno::ENOTEMPTY, "ENOTEMPTY"),
            (Errno::ELOOP, "ELOOP"),
            (Errno::ENODATA, "ENODATA"),
            (Errno::EOVERFLOW, "EOVERFLOW"),
            (Errno::ENOTSUP, "ENOTSUP"),
            (Errno::ESTALE, "ESTALE"),
            (Errno::ENOTCONN, "ENOTCONN"),
        ];
        known
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
