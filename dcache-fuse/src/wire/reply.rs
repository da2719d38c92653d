//! Building what the daemon sends back: one reply per request (none for
//! FORGET, BATCH_FORGET and INTERRUPT), a header and the records the
//! opcode expects, written with one `writev`. [`Out`] is a worker's
//! reusable buffer; [`DirBuf`] packs READDIR and READDIRPLUS records up to
//! the size the kernel asked for.

use std::io::IoSlice;
use std::mem::size_of;
use std::sync::Arc;

use super::abi::{self, dirent_align, Pod};

/// Where a reply sent after its handler returned goes: the transport
/// that carried the request (a /dev/fuse write; an io_uring queue, whose
/// entry `slot` waits parked for it). See [`Out::defer`].
pub trait LateSink: Send + Sync {
    /// Send `out`, the reply to the request that came in `slot`.
    fn send_late(&self, slot: usize, out: Out);
}

/// A reply owed: made by [`Out::defer`], sent (once) by [`Later::send`].
/// Dropping one unsent leaves the request unanswered until the connection
/// ends, which only a session that is going may do.
pub struct Later {
    unique: u64,
    slot: usize,
    sink: Arc<dyn LateSink>,
}

impl std::fmt::Debug for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Later")
            .field("unique", &self.unique)
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl Later {
    /// The request's `unique` (what an INTERRUPT names).
    pub fn unique(&self) -> u64 {
        self.unique
    }

    /// Build the reply with `fill` (given an `Out` started for the
    /// request: success, empty) and send it, from any thread.
    pub fn send(self, fill: impl FnOnce(&mut Out)) {
        let mut out = Out::default();
        out.start(self.unique);
        fill(&mut out);
        self.sink.send_late(self.slot, out);
    }
}

/// One reply being built (reused from request to request).
#[derive(Default)]
pub struct Out {
    unique: u64,
    error: i32,
    /// The records after the header.
    body: Vec<u8>,
    /// Data sent after `body` without copying it there (a read's bytes):
    /// the first `tail_len` bytes. Kept allocated from reply to reply, so
    /// a read into it ([`Out::data_buf`]) allocates and zeroes nothing.
    tail: Vec<u8>,
    tail_len: usize,
    /// False: the request takes no reply.
    reply: bool,
    /// The header, filled in by [`Out::iov`].
    header: abi::OutHeader,
    /// Where a deferred reply goes, if this transport can take one late.
    late: Option<Arc<dyn LateSink>>,
    /// The transport's place of the current request (an io_uring entry).
    slot: usize,
    /// The handler will answer later ([`Out::defer`]).
    deferred: bool,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Out")
            .field("unique", &self.unique)
            .field("error", &self.error)
            .field("body", &self.body.len())
            .field("tail_len", &self.tail_len)
            .field("reply", &self.reply)
            .field("deferred", &self.deferred)
            .finish_non_exhaustive()
    }
}

impl Out {
    /// Start the reply to request `unique`: success, empty.
    pub fn start(&mut self, unique: u64) {
        self.unique = unique;
        self.error = 0;
        self.body.clear();
        self.tail_len = 0;
        self.reply = true;
        self.deferred = false;
    }

    /// The transport can take replies late, through `sink` (set once per
    /// worker or queue).
    pub fn set_late(&mut self, sink: Arc<dyn LateSink>) {
        self.late = Some(sink);
    }

    /// Where the current request came in (an io_uring entry), for a
    /// deferred reply.
    pub fn set_slot(&mut self, slot: usize) {
        self.slot = slot;
    }

    /// Answer later: nothing is sent now, and the returned [`Later`] sends
    /// the reply from whatever thread finishes the request (a lock that
    /// must wait). `None` where the transport cannot (a caller driving
    /// the handler directly): the handler must then answer now.
    pub fn defer(&mut self) -> Option<Later> {
        let sink = self.late.clone()?;
        self.deferred = true;
        self.reply = false;
        Some(Later {
            unique: self.unique,
            slot: self.slot,
            sink,
        })
    }

    /// Whether the handler deferred its reply ([`Out::defer`]).
    pub fn is_deferred(&self) -> bool {
        self.deferred
    }

    /// Answer with an error (a positive errno); drops anything added.
    pub fn error(&mut self, errno: i32) {
        self.error = -errno;
        self.body.clear();
        self.tail_len = 0;
    }

    /// Send nothing (FORGET and its kind).
    pub fn none(&mut self) {
        self.reply = false;
    }

    /// Whether a reply is to be sent.
    pub fn wants_reply(&self) -> bool {
        self.reply
    }

    /// The errno answered (0: success), for tests.
    pub fn errno(&self) -> i32 {
        -self.error
    }

    /// Append a record.
    pub fn push<T: Pod>(&mut self, r: &T) {
        self.body.extend_from_slice(r.as_bytes());
    }

    /// Append bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.body.extend_from_slice(b);
    }

    /// Send `data` after the records, without copying it.
    pub fn data(&mut self, data: Vec<u8>) {
        self.tail_len = data.len();
        self.tail = data;
    }

    /// A buffer of `len` bytes to read the reply's data into (sent after
    /// the records); [`Out::data_len`] then says how much of it was
    /// filled. The buffer is this `Out`'s, reused from reply to reply: its
    /// bytes are what an earlier reply left, not zeroes.
    pub fn data_buf(&mut self, len: usize) -> &mut [u8] {
        if self.tail.len() < len {
            self.tail.resize(len, 0);
        }
        self.tail_len = len;
        &mut self.tail[..len]
    }

    /// Send only the first `n` bytes of the [`Out::data_buf`] buffer.
    pub fn data_len(&mut self, n: usize) {
        self.tail_len = self.tail_len.min(n);
    }

    /// The body so far (for tests).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The buffer READDIR and READDIRPLUS records go into.
    pub fn dir(&mut self, max: u32) -> DirBuf<'_> {
        DirBuf {
            buf: &mut self.body,
            max: max as usize,
        }
    }

    fn out_header(&self) -> abi::OutHeader {
        let len = size_of::<abi::OutHeader>() + self.body.len() + self.tail_len;
        abi::OutHeader {
            // A reply is at most a header, a directory buffer or a read of
            // at most max_write bytes: far below 4 GiB.
            len: u32::try_from(len).unwrap_or(u32::MAX),
            error: self.error,
            unique: self.unique,
        }
    }

    /// The reply's pieces, header first, for one `writev`.
    pub fn iov(&mut self) -> [IoSlice<'_>; 3] {
        self.header = self.out_header();
        [
            IoSlice::new(self.header.as_bytes()),
            IoSlice::new(&self.body),
            IoSlice::new(&self.tail[..self.tail_len]),
        ]
    }

    /// The reply as a transport that places the pieces itself takes it
    /// (an io_uring entry: the header into its in/out area, the records
    /// and then the data into its payload buffer): the header, the
    /// records, the data.
    pub fn parts(&self) -> (abi::OutHeader, &[u8], &[u8]) {
        (self.out_header(), &self.body, &self.tail[..self.tail_len])
    }
}

/// Directory records for one READDIR(PLUS) reply, at most `max` bytes.
pub struct DirBuf<'a> {
    buf: &'a mut Vec<u8>,
    max: usize,
}

impl DirBuf<'_> {
    /// The smallest readdirplus record (a one-byte name): a reply of
    /// `size` bytes holds at most `size / PLUS_MIN` of them.
    pub const PLUS_MIN: usize =
        dirent_align(size_of::<abi::EntryOut>() + size_of::<abi::Dirent>() + 1);

    /// Add a READDIR record; false when it does not fit (nothing added).
    pub fn add(&mut self, ino: u64, off: u64, kind: u32, name: &[u8]) -> bool {
        let len = dirent_align(size_of::<abi::Dirent>() + name.len());
        if self.buf.len() + len > self.max {
            return false;
        }
        self.record(ino, off, kind, name, len);
        true
    }

    /// Add a READDIRPLUS record; false when it does not fit.
    pub fn add_plus(&mut self, entry: &abi::EntryOut, off: u64, kind: u32, name: &[u8]) -> bool {
        let len = dirent_align(size_of::<abi::EntryOut>() + size_of::<abi::Dirent>() + name.len());
        if self.buf.len() + len > self.max {
            return false;
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(entry.as_bytes());
        self.record(
            entry.attr.ino,
            off,
            kind,
            name,
            len - size_of::<abi::EntryOut>(),
        );
        debug_assert_eq!(self.buf.len() - start, len);
        true
    }

    fn record(&mut self, ino: u64, off: u64, kind: u32, name: &[u8], len: usize) {
        let d = abi::Dirent {
            ino,
            off,
            // A name is at most 255 bytes (the Vfs refuses longer ones).
            namelen: u32::try_from(name.len()).unwrap_or(u32::MAX),
            kind,
        };
        let start = self.buf.len();
        self.buf.extend_from_slice(d.as_bytes());
        self.buf.extend_from_slice(name);
        self.buf.resize(start + len, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_and_directory_records() {
        let mut o = Out::default();
        o.start(5);
        o.push(&abi::WriteOut {
            size: 3,
            padding: 0,
        });
        o.data(b"abc".to_vec());
        let iov = o.iov();
        let total: usize = iov.iter().map(|s| s.len()).sum();
        assert_eq!(total, 16 + 8 + 3);
        let h = abi::OutHeader::read(&iov[0]).unwrap();
        assert_eq!((h.len, h.error, h.unique), (27, 0, 5));

        o.start(6);
        o.push(&abi::WriteOut::default());
        o.error(2);
        let h = abi::OutHeader::read(&o.iov()[0]).unwrap();
        assert_eq!((h.len, h.error), (16, -2), "an error carries no body");
        let (p, body, tail) = o.parts();
        assert_eq!((p, body.len(), tail.len()), (h, 0, 0), "the same reply");

        // A read into the reused buffer: only what was filled is sent, and
        // the next reply starts without data.
        o.start(9);
        o.data_buf(8).copy_from_slice(b"abcdefgh");
        o.data_len(3);
        let (h, _, tail) = o.parts();
        assert_eq!((h.len, tail), (16 + 3, &b"abc"[..]));
        o.start(10);
        assert_eq!(o.parts().2.len(), 0);
        assert_eq!(o.data_buf(4), b"abcd", "reused, not zeroed");
        o.error(5);
        assert_eq!(o.parts().0.len, 16);

        o.start(7);
        let mut d = o.dir(64);
        assert!(d.add(3, 1, 8, b"a"));
        assert!(
            d.add(4, 2, 8, b"bcdefghi"),
            "24 + 8 = 32 bytes: fits exactly"
        );
        assert!(!d.add(5, 3, 8, b"c"), "full");
        assert_eq!(o.body().len(), 64);
        assert_eq!(&o.body()[24..25], b"a");
        assert_eq!(&o.body()[25..32], &[0; 7], "padded to 8 bytes");
        let e = abi::Dirent::read(&o.body()[32..]).unwrap();
        assert_eq!((e.ino, e.off, e.namelen), (4, 2, 8));

        o.start(8);
        let mut d = o.dir(4096);
        let entry = abi::EntryOut {
            nodeid: 9,
            attr: abi::Attr {
                ino: 9,
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(d.add_plus(&entry, 1, 8, b"xyz"));
        assert_eq!(o.body().len(), 160);
        let e = abi::Dirent::read(&o.body()[128..]).unwrap();
        assert_eq!((e.ino, e.namelen), (9, 3));
    }
}
