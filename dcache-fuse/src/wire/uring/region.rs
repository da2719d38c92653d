//! The memory one queue lends the kernel: for each ring entry a header
//! buffer (`fuse_uring_req_header`, 288 bytes) and a payload buffer (the
//! largest request or reply, 1 MiB), in one anonymous mapping of its own,
//! and the iovec pairs that name them in the REGISTER commands.
//!
//! The kernel keeps the buffers' addresses from REGISTER until the ring
//! is gone; the mapping is owned by the queue and unmapped only after the
//! queue's ring (see `queue`, whose field order says so). Being a mapping
//! of its own, freed memory is never reused by the allocator: a late
//! write the protocol does not allow would fault, not corrupt.

use std::io;
use std::ptr::NonNull;

use crate::wire::abi::{uring, UringReqHeader};

/// A header buffer's stride: the record, rounded to a cache line.
const HEADER_STRIDE: usize = 320;

const _: () = assert!(HEADER_STRIDE >= std::mem::size_of::<UringReqHeader>());
const _: () = assert!(HEADER_STRIDE % 64 == 0);
const _: () = assert!(uring::ENT_IN_OUT_OFFSET + 32 == std::mem::size_of::<UringReqHeader>());

const PAGE: usize = 4096;

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// The buffers of `entries` ring entries, `payload` bytes of payload each.
#[derive(Debug)]
pub(super) struct Region {
    base: NonNull<u8>,
    len: usize,
    entries: usize,
    payload: usize,
    /// Where the payload buffers start (page-aligned, after the headers).
    payloads_at: usize,
    /// `[header, payload]` for each entry, as REGISTER passes them.
    iovs: Box<[[libc::iovec; 2]]>,
}

// SAFETY: the region is plain memory; which thread may touch which entry
// is the queue's protocol (one thread serves a queue), and the raw
// pointers in it are only dereferenced through `entry`, whose contract
// says when.
unsafe impl Send for Region {}

impl Region {
    /// Map the buffers (zeroed, untouched pages cost nothing until used).
    pub(super) fn new(entries: usize, payload: usize) -> io::Result<Region> {
        let payload = round_up(payload.max(1), PAGE);
        let payloads_at = round_up(entries * HEADER_STRIDE, PAGE);
        let len = entries
            .checked_mul(payload)
            .and_then(|p| p.checked_add(payloads_at))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // named.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave 0"))?;
        let iovs = (0..entries)
            .map(|e| {
                // SAFETY: e < entries, so the offset is inside the
                // len-byte mapping just made.
                let h = unsafe { base.as_ptr().add(e * HEADER_STRIDE) };
                // SAFETY: as above.
                let d = unsafe { base.as_ptr().add(payloads_at + e * payload) };
                [
                    libc::iovec {
                        iov_base: h.cast(),
                        iov_len: std::mem::size_of::<UringReqHeader>(),
                    },
                    libc::iovec {
                        iov_base: d.cast(),
                        iov_len: payload,
                    },
                ]
            })
            .collect();
        Ok(Region {
            base,
            len,
            entries,
            payload,
            payloads_at,
            iovs,
        })
    }

    /// The address of entry `e`'s iovec pair (for REGISTER's `sqe->addr`);
    /// it stays valid while the region lives.
    pub(super) fn iov_addr(&self, e: usize) -> u64 {
        self.iovs[e].as_ptr() as u64
    }

    /// Entry `e`'s header and payload buffers.
    ///
    /// # Safety
    /// The kernel must not be using entry `e`: it completed the entry's
    /// last command and the entry was not submitted again since.
    pub(super) unsafe fn entry(&mut self, e: usize) -> (&mut [u8], &mut [u8]) {
        assert!(e < self.entries, "entry {e} of {}", self.entries);
        // SAFETY: both ranges lie inside the mapping (e < entries) and do
        // not overlap; `&mut self` keeps every other borrow of the region
        // out, and the caller promises that the kernel does not touch them
        // meanwhile.
        unsafe {
            let h = self.base.as_ptr().add(e * HEADER_STRIDE);
            let d = self.base.as_ptr().add(self.payloads_at + e * self.payload);
            (
                std::slice::from_raw_parts_mut(h, std::mem::size_of::<UringReqHeader>()),
                std::slice::from_raw_parts_mut(d, self.payload),
            )
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once. The queue drops
        // its ring before its region, so the kernel no longer holds these
        // buffers.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_do_not_overlap_and_iovs_name_them() {
        let mut r = Region::new(3, 5000).unwrap();
        assert_eq!(r.payload, 8192, "rounded to pages");
        // SAFETY: no kernel holds this region.
        unsafe {
            for e in 0..3 {
                let (h, d) = r.entry(e);
                assert_eq!(h.len(), 288);
                assert!(h.iter().chain(d.iter()).all(|&b| b == 0), "zeroed");
                h.fill(e as u8 + 1);
                d.fill(e as u8 + 1);
                let (hp, dp) = (h.as_mut_ptr(), d.as_mut_ptr());
                assert_eq!(dp as usize % PAGE, 0, "payload page-aligned");
                assert_eq!(r.iovs[e][0].iov_base, hp.cast());
                assert_eq!(r.iovs[e][1].iov_base, dp.cast());
            }
            for e in 0..3 {
                let (h, d) = r.entry(e);
                assert!(h.iter().chain(d.iter()).all(|&b| b == e as u8 + 1));
            }
        }
        assert_eq!(r.iov_addr(1), r.iovs[1].as_ptr() as u64);
    }
}
