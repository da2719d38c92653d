//! The FUSE wire format: opcodes, flags and the fixed-size records the
//! kernel and the daemon exchange, as the kernel's uapi `linux/fuse.h`
//! defines them (protocol 7.x; we speak [`MINOR`] or the kernel's, if
//! lower). Every record is `repr(C)` with explicit padding fields, so it
//! has no padding bytes: [`Pod`] may view it as bytes and build it from
//! any bytes. Sizes are asserted next to each record.

use std::mem::size_of;

/// The protocol's major version.
pub const MAJOR: u32 = 7;
/// The minor version we implement (7.37 brought FUSE_TMPFILE, 7.40
/// passthrough's backing files; an older kernel's minor wins and its
/// records are the prefixes of ours).
pub const MINOR: u32 = 40;

/// The root's node id.
pub const ROOT_ID: u64 = 1;

/// Request opcodes (`enum fuse_opcode`).
#[allow(missing_docs)]
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const NOTIFY_REPLY: u32 = 41;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const TMPFILE: u32 = 51;
}

/// INIT flags (`flags`, and `flags2` shifted up 32 bits).
#[allow(missing_docs)]
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    /// fcntl locks go to the daemon (GETLK, SETLK, SETLKW).
    pub const POSIX_LOCKS: u64 = 1 << 1;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    /// `flock` goes to the daemon (SETLK/SETLKW with FUSE_LK_FLOCK).
    pub const FLOCK_LOCKS: u64 = 1 << 10;
    pub const AUTO_INVAL_DATA: u64 = 1 << 12;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    /// The kernel caches writes and sends them later (and reads to fill
    /// partial pages, also on write-only opens).
    pub const WRITEBACK_CACHE: u64 = 1 << 16;
    pub const NO_OPEN_SUPPORT: u64 = 1 << 17;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const INIT_EXT: u64 = 1 << 30;
    /// `flags2` bit 5: reads and writes of files opened with a backing
    /// file go to it without the daemon.
    pub const PASSTHROUGH: u64 = 1 << 37;
    /// `FUSE_OVER_IO_URING` (flags2 bit 9, 7.42): requests may come on
    /// io_uring queues (see [`crate::wire::uring`]).
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// `fuse_setattr_in.valid` bits.
#[allow(missing_docs)]
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    /// With HANDLE_KILLPRIV_V2: drop the set-id bits (a truncate by a
    /// caller without CAP_FSETID, or a chown).
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_write_in.write_flags`: the writer lacks CAP_FSETID; drop the
/// set-id bits (HANDLE_KILLPRIV_V2).
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;

/// `fuse_open_in.open_flags` / `fuse_create_in.open_flags`: an O_TRUNC
/// open by a caller without CAP_FSETID; drop the set-id bits.
pub const OPEN_KILL_SUIDGID: u32 = 1 << 0;

/// `fuse_open_out.open_flags`: bypass the page cache.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// `fuse_open_out.open_flags`: no FLUSH at this file's closes (7.34;
/// ignored under FUSE_WRITEBACK_CACHE, which flushes pages at close).
pub const FOPEN_NOFLUSH: u32 = 1 << 5;
/// `fuse_open_out.open_flags`: I/O goes to the backing file named by
/// `backing_id`.
pub const FOPEN_PASSTHROUGH: u32 = 1 << 7;

/// `fuse_lk_in.lk_flags`: a `flock` (whole file, owned by the open file),
/// not an fcntl lock.
pub const LK_FLOCK: u32 = 1 << 0;

/// `fuse_release_in.release_flags`: drop the `flock` of `lock_owner`.
pub const RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;

/// `FUSE_NOTIFY_INVAL_INODE`.
pub const NOTIFY_INVAL_INODE: i32 = 2;
/// `FUSE_NOTIFY_INVAL_ENTRY`.
pub const NOTIFY_INVAL_ENTRY: i32 = 3;

/// FUSE over io_uring (protocol 7.42, `include/uapi/linux/fuse.h`): the
/// commands sent as `IORING_OP_URING_CMD` on /dev/fuse, and the layout of
/// a ring entry's header buffer.
pub mod uring {
    /// `FUSE_IO_URING_CMD_REGISTER`: hand the kernel an entry's two
    /// buffers; it completes when a request is in them.
    pub const CMD_REGISTER: u32 = 1;
    /// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: the reply in the entry's
    /// buffers goes back, and the entry waits for the next request.
    pub const CMD_COMMIT_AND_FETCH: u32 = 2;
    /// `FUSE_URING_IN_OUT_HEADER_SZ`: room for `fuse_in_header` (request)
    /// or `fuse_out_header` (reply) at the start of the header buffer.
    pub const IN_OUT_HEADER_SZ: usize = 128;
    /// `FUSE_URING_OP_IN_OUT_SZ`: room for the request's first argument
    /// (the per-opcode record: `fuse_write_in`, `fuse_mkdir_in`, ...).
    pub const OP_IN_OUT_SZ: usize = 128;
    /// Where `fuse_uring_ent_in_out` starts in the header buffer.
    pub const ENT_IN_OUT_OFFSET: usize = IN_OUT_HEADER_SZ + OP_IN_OUT_SZ;
    /// The SQE128 command area (`sqe->cmd`) holding `fuse_uring_cmd_req`.
    pub const SQE_CMD_SZ: usize = 80;
}

/// The smallest read buffer the kernel accepts.
pub const MIN_READ_BUFFER: usize = 8192;

/// A record with no padding bytes and no invalid bit patterns: every
/// field an integer (or an array of them), laid out `repr(C)` with the
/// padding the uapi header spells out as fields.
///
/// # Safety
/// The implementer is `repr(C)`, made of integers only, and has no
/// implicit padding (its size is the sum of its fields').
pub unsafe trait Pod: Copy + Default {
    /// The record as bytes (what goes on the wire).
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Pod` promises no padding, so all size_of::<Self>() bytes
        // are initialised, and the borrow keeps `self` alive.
        unsafe { std::slice::from_raw_parts((self as *const Self).cast(), size_of::<Self>()) }
    }

    /// The record at the start of `b`, if `b` is long enough. Bytes past
    /// the record are ignored; a short `b` gives `None`.
    fn read(b: &[u8]) -> Option<Self> {
        if b.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: `b` has at least size_of::<Self>() readable bytes, any
        // bytes are a valid `Self` (integers only), and the unaligned read
        // needs no alignment.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<Self>()) })
    }

    /// The record at the start of `b`, zero-extended when `b` is shorter
    /// (an older kernel sends a shorter record; the fields it lacks are 0).
    fn read_prefix(b: &[u8]) -> Self {
        let mut v = Self::default();
        let n = b.len().min(size_of::<Self>());
        // SAFETY: `v` is a live, exclusively borrowed Self of size_of::<Self>()
        // bytes; we write n <= that many bytes into it from `b` (n <= b.len()),
        // and any bytes are a valid Self.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), (&mut v as *mut Self).cast::<u8>(), n);
        }
        v
    }
}

macro_rules! records {
    ($( $(#[$m:meta])* pub struct $name:ident { $( $(#[$fm:meta])* pub $f:ident : $t:ty ),* $(,)? } = $size:expr; )*) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub struct $name { $( $(#[$fm])* pub $f: $t ),* }
        // No implicit padding: the fields add up to the size, which is the
        // uapi header's.
        const _: () = assert!(size_of::<$name>() == $size);
        const _: () = assert!(0 $( + size_of::<$t>() )* == $size);
        // SAFETY: repr(C), integer fields only, no padding (asserted above).
        unsafe impl Pod for $name {}
    )*};
}

records! {
    /// `struct fuse_in_header`.
    pub struct InHeader {
        pub len: u32, pub opcode: u32, pub unique: u64, pub nodeid: u64,
        pub uid: u32, pub gid: u32, pub pid: u32, pub total_extlen: u16, pub padding: u16,
    } = 40;
    /// `struct fuse_out_header`.
    pub struct OutHeader { pub len: u32, pub error: i32, pub unique: u64 } = 16;
    /// `struct fuse_attr`.
    pub struct Attr {
        pub ino: u64, pub size: u64, pub blocks: u64,
        pub atime: u64, pub mtime: u64, pub ctime: u64,
        pub atimensec: u32, pub mtimensec: u32, pub ctimensec: u32,
        pub mode: u32, pub nlink: u32, pub uid: u32, pub gid: u32, pub rdev: u32,
        pub blksize: u32, pub flags: u32,
    } = 88;
    /// `struct fuse_entry_out`.
    pub struct EntryOut {
        pub nodeid: u64, pub generation: u64, pub entry_valid: u64, pub attr_valid: u64,
        pub entry_valid_nsec: u32, pub attr_valid_nsec: u32, pub attr: Attr,
    } = 128;
    /// `struct fuse_attr_out`.
    pub struct AttrOut {
        pub attr_valid: u64, pub attr_valid_nsec: u32, pub dummy: u32, pub attr: Attr,
    } = 104;
    /// `struct fuse_open_out`.
    pub struct OpenOut { pub fh: u64, pub open_flags: u32, pub backing_id: i32 } = 16;
    /// `struct fuse_write_out`.
    pub struct WriteOut { pub size: u32, pub padding: u32 } = 8;
    /// `struct fuse_kstatfs` (the whole of `fuse_statfs_out`).
    pub struct StatfsOut {
        pub blocks: u64, pub bfree: u64, pub bavail: u64, pub files: u64, pub ffree: u64,
        pub bsize: u32, pub namelen: u32, pub frsize: u32, pub padding: u32, pub spare: [u32; 6],
    } = 80;
    /// `struct fuse_getxattr_out`.
    pub struct GetxattrOut { pub size: u32, pub padding: u32 } = 8;
    /// `struct fuse_lseek_out`.
    pub struct LseekOut { pub offset: u64 } = 8;
    /// `struct fuse_init_in` (7.36 on; older kernels send the first 16 bytes).
    pub struct InitIn {
        pub major: u32, pub minor: u32, pub max_readahead: u32, pub flags: u32,
        pub flags2: u32, pub unused: [u32; 11],
    } = 64;
    /// `struct fuse_init_out`.
    pub struct InitOut {
        pub major: u32, pub minor: u32, pub max_readahead: u32, pub flags: u32,
        pub max_background: u16, pub congestion_threshold: u16, pub max_write: u32,
        pub time_gran: u32, pub max_pages: u16, pub map_alignment: u16, pub flags2: u32,
        pub max_stack_depth: u32, pub unused: [u32; 6],
    } = 64;
    /// `struct fuse_forget_in`.
    pub struct ForgetIn { pub nlookup: u64 } = 8;
    /// `struct fuse_forget_one`.
    pub struct ForgetOne { pub nodeid: u64, pub nlookup: u64 } = 16;
    /// `struct fuse_batch_forget_in`.
    pub struct BatchForgetIn { pub count: u32, pub dummy: u32 } = 8;
    /// `struct fuse_getattr_in`.
    pub struct GetattrIn { pub getattr_flags: u32, pub dummy: u32, pub fh: u64 } = 16;
    /// `struct fuse_setattr_in`.
    pub struct SetattrIn {
        pub valid: u32, pub padding: u32, pub fh: u64, pub size: u64, pub lock_owner: u64,
        pub atime: u64, pub mtime: u64, pub ctime: u64,
        pub atimensec: u32, pub mtimensec: u32, pub ctimensec: u32, pub mode: u32,
        pub unused4: u32, pub uid: u32, pub gid: u32, pub unused5: u32,
    } = 88;
    /// `struct fuse_mknod_in`.
    pub struct MknodIn { pub mode: u32, pub rdev: u32, pub umask: u32, pub padding: u32 } = 16;
    /// `struct fuse_mkdir_in`.
    pub struct MkdirIn { pub mode: u32, pub umask: u32 } = 8;
    /// `struct fuse_rename_in`.
    pub struct RenameIn { pub newdir: u64 } = 8;
    /// `struct fuse_rename2_in`.
    pub struct Rename2In { pub newdir: u64, pub flags: u32, pub padding: u32 } = 16;
    /// `struct fuse_link_in`.
    pub struct LinkIn { pub oldnodeid: u64 } = 8;
    /// `struct fuse_open_in`.
    pub struct OpenIn { pub flags: u32, pub open_flags: u32 } = 8;
    /// `struct fuse_create_in` (also TMPFILE's).
    pub struct CreateIn { pub flags: u32, pub mode: u32, pub umask: u32, pub open_flags: u32 } = 16;
    /// `struct fuse_release_in`.
    pub struct ReleaseIn { pub fh: u64, pub flags: u32, pub release_flags: u32, pub lock_owner: u64 } = 24;
    /// `struct fuse_flush_in`.
    pub struct FlushIn { pub fh: u64, pub unused: u32, pub padding: u32, pub lock_owner: u64 } = 24;
    /// `struct fuse_read_in` (also READDIR's and READDIRPLUS's).
    pub struct ReadIn {
        pub fh: u64, pub offset: u64, pub size: u32, pub read_flags: u32,
        pub lock_owner: u64, pub flags: u32, pub padding: u32,
    } = 40;
    /// `struct fuse_write_in`.
    pub struct WriteIn {
        pub fh: u64, pub offset: u64, pub size: u32, pub write_flags: u32,
        pub lock_owner: u64, pub flags: u32, pub padding: u32,
    } = 40;
    /// `struct fuse_fsync_in`.
    pub struct FsyncIn { pub fh: u64, pub fsync_flags: u32, pub padding: u32 } = 16;
    /// `struct fuse_setxattr_in` as sent without FUSE_SETXATTR_EXT.
    pub struct SetxattrIn { pub size: u32, pub flags: u32 } = 8;
    /// `struct fuse_getxattr_in`.
    pub struct GetxattrIn { pub size: u32, pub padding: u32 } = 8;
    /// `struct fuse_access_in`.
    pub struct AccessIn { pub mask: u32, pub padding: u32 } = 8;
    /// `struct fuse_file_lock`.
    pub struct FileLock { pub start: u64, pub end: u64, pub kind: u32, pub pid: u32 } = 24;
    /// `struct fuse_lk_in` (GETLK, SETLK, SETLKW).
    pub struct LkIn { pub fh: u64, pub owner: u64, pub lk: FileLock, pub lk_flags: u32, pub padding: u32 } = 48;
    /// `struct fuse_lk_out`.
    pub struct LkOut { pub lk: FileLock } = 24;
    /// `struct fuse_interrupt_in`.
    pub struct InterruptIn { pub unique: u64 } = 8;
    /// `struct fuse_fallocate_in`.
    pub struct FallocateIn { pub fh: u64, pub offset: u64, pub length: u64, pub mode: u32, pub padding: u32 } = 32;
    /// `struct fuse_lseek_in`.
    pub struct LseekIn { pub fh: u64, pub offset: u64, pub whence: u32, pub padding: u32 } = 24;
    /// `struct fuse_copy_file_range_in`.
    pub struct CopyFileRangeIn {
        pub fh_in: u64, pub off_in: u64, pub nodeid_out: u64, pub fh_out: u64,
        pub off_out: u64, pub len: u64, pub flags: u64,
    } = 56;
    /// `struct fuse_dirent` without its name.
    pub struct Dirent { pub ino: u64, pub off: u64, pub namelen: u32, pub kind: u32 } = 24;
    /// `struct fuse_notify_inval_inode_out`.
    pub struct NotifyInvalInode { pub ino: u64, pub off: i64, pub len: i64 } = 24;
    /// `struct fuse_backing_map` (`FUSE_DEV_IOC_BACKING_OPEN`'s argument).
    pub struct BackingMap { pub fd: i32, pub flags: u32, pub padding: u64 } = 16;
    /// `struct fuse_notify_inval_entry_out`.
    pub struct NotifyInvalEntry { pub parent: u64, pub namelen: u32, pub flags: u32 } = 16;
    /// `struct fuse_uring_ent_in_out`: the last part of a ring entry's
    /// header buffer. The kernel writes `commit_id` (the request's unique)
    /// and `payload_sz` (the bytes of the payload buffer the request
    /// fills); the daemon writes `payload_sz` of its reply.
    pub struct UringEntInOut {
        pub flags: u64, pub commit_id: u64, pub payload_sz: u32, pub padding: u32, pub reserved: u64,
    } = 32;
    /// `struct fuse_uring_req_header`: one ring entry's header buffer, the
    /// in/out header and the per-opcode record as 128-byte areas.
    pub struct UringReqHeader {
        pub in_out: [u64; 16], pub op_in: [u64; 16], pub ring_ent_in_out: UringEntInOut,
    } = 288;
    /// `struct fuse_uring_cmd_req`, at the start of an SQE128's 80-byte
    /// command area (the rest zero).
    pub struct UringCmdReq { pub flags: u64, pub commit_id: u64, pub qid: u16, pub padding: [u16; 3] } = 24;
}

// The ring entry's header areas as the uapi header lays them out: the
// records go where the kernel reads and writes them.
const _: () = assert!(size_of::<[u64; 16]>() == uring::IN_OUT_HEADER_SZ);
const _: () = assert!(size_of::<[u64; 16]>() == uring::OP_IN_OUT_SZ);
const _: () = assert!(std::mem::offset_of!(UringReqHeader, op_in) == uring::IN_OUT_HEADER_SZ);
const _: () =
    assert!(std::mem::offset_of!(UringReqHeader, ring_ent_in_out) == uring::ENT_IN_OUT_OFFSET);
const _: () = assert!(size_of::<InHeader>() <= uring::IN_OUT_HEADER_SZ);
const _: () = assert!(size_of::<OutHeader>() <= uring::IN_OUT_HEADER_SZ);
const _: () = assert!(size_of::<UringCmdReq>() <= uring::SQE_CMD_SZ);
// Every record that comes first in a request fits the per-opcode area.
const _: () = assert!(size_of::<SetattrIn>() <= uring::OP_IN_OUT_SZ);
const _: () = assert!(size_of::<CopyFileRangeIn>() <= uring::OP_IN_OUT_SZ);
const _: () = assert!(size_of::<InitIn>() <= uring::OP_IN_OUT_SZ);

/// A directory record's length rounded up to 8 bytes (`FUSE_DIRENT_ALIGN`).
pub const fn dirent_align(n: usize) -> usize {
    (n + 7) & !7
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_short_input_is_refused() {
        let h = InHeader {
            len: 41,
            opcode: op::LOOKUP,
            unique: 7,
            nodeid: 1,
            uid: 2,
            gid: 3,
            pid: 4,
            total_extlen: 0,
            padding: 0,
        };
        let b = h.as_bytes().to_vec();
        assert_eq!(InHeader::read(&b), Some(h));
        assert_eq!(InHeader::read(&b[..39]), None);
        // Older kernels send a 16-byte INIT: the rest reads as zero.
        let i = InitIn::read_prefix(&[7, 0, 0, 0, 31, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0]);
        assert_eq!(
            (i.major, i.minor, i.max_readahead, i.flags),
            (7, 31, 131072, 1)
        );
        assert_eq!(i.flags2, 0);
        assert_eq!(dirent_align(24 + 1), 32);
        assert_eq!(dirent_align(128 + 24 + 8), 160);
    }
}
