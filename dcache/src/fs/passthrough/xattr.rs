//! Extended attributes of held host objects.
//!
//! The `f*xattr` calls refuse `O_PATH` descriptors (EBADF), and reopening
//! the object for reading would open fifos and devices and need read
//! permission on it, so every call here names the held descriptor by its
//! `/proc/self/fd/N` magic link and uses the *following* calls
//! (`getxattr`, `setxattr`, `listxattr`, `removexattr`): resolving the
//! magic link lands on the held object itself and goes no further, a
//! symlink included, so the `l*` variants (which would act on the
//! `/proc` link itself) are never wanted, and no final symlink is ever
//! followed out of the tree. This is what virtiofsd does for the objects
//! it does not reopen (it `fchdir`s into `/proc/self/fd` with a per-thread
//! working directory instead of naming the full path; the objects reached
//! are the same). libfuse's `passthrough_ll` refuses symlinks instead.
//!
//! The host's answers and errnos are passed on unchanged; the host checks
//! its own rules with the daemon's credentials after the Vfs has checked
//! the caller's.

use std::ffi::CString;
use std::os::fd::BorrowedFd;

use super::sys::ProcFdPath;
use crate::errno::{Errno, Result};

/// How often a read whose value grew between the size probe and the read
/// is retried before giving up with ERANGE.
const RETRIES: usize = 8;

fn c_name(name: &[u8]) -> Result<CString> {
    CString::new(name).map_err(|_| Errno::EINVAL)
}

/// A size-returning call's result: the size, or the thread's errno.
fn size_of(ret: libc::ssize_t) -> Result<usize> {
    usize::try_from(ret).map_err(|_| Errno::last())
}

/// Read into `out` what `call(buf, len)` returns (a value or a name
/// list): probe the size, read, and retry if it grew in between.
fn read_sized(
    out: &mut Vec<u8>,
    mut call: impl FnMut(*mut libc::c_void, usize) -> libc::ssize_t,
) -> Result<()> {
    for _ in 0..RETRIES {
        let want = size_of(call(std::ptr::null_mut(), 0))?;
        out.clear();
        if want == 0 {
            return Ok(());
        }
        out.resize(want, 0);
        match size_of(call(out.as_mut_ptr().cast(), out.len())) {
            Ok(n) => {
                out.truncate(n);
                return Ok(());
            }
            Err(Errno::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::ERANGE)
}

/// The value of `name` of the object `fd` holds, into `value`.
pub(super) fn get(fd: BorrowedFd<'_>, name: &[u8], value: &mut Vec<u8>) -> Result<()> {
    let path = ProcFdPath::new(fd);
    let name = c_name(name)?;
    read_sized(value, |buf, len| {
        // SAFETY: `path` and `name` are NUL-terminated; `buf` is null with
        // `len` 0 (a size probe) or points to `len` writable bytes.
        unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf, len) }
    })
}

/// Set `name` of the object `fd` holds to `value` with `flags`.
pub(super) fn set(fd: BorrowedFd<'_>, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
    let path = ProcFdPath::new(fd);
    let name = c_name(name)?;
    // SAFETY: `path` and `name` are NUL-terminated; `value` is a live
    // slice of `value.len()` bytes, which the call only reads.
    let ret = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// The attribute names of the object `fd` holds, NUL-terminated, into
/// `list`.
pub(super) fn list(fd: BorrowedFd<'_>, list: &mut Vec<u8>) -> Result<()> {
    let path = ProcFdPath::new(fd);
    read_sized(list, |buf, len| {
        // SAFETY: `path` is NUL-terminated; `buf` is null with `len` 0 (a
        // size probe) or points to `len` writable bytes.
        unsafe { libc::listxattr(path.as_ptr(), buf.cast(), len) }
    })
}

/// Remove `name` of the object `fd` holds.
pub(super) fn remove(fd: BorrowedFd<'_>, name: &[u8]) -> Result<()> {
    let path = ProcFdPath::new(fd);
    let name = c_name(name)?;
    // SAFETY: `path` and `name` are NUL-terminated.
    let ret = unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
}
