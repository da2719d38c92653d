//! Parsing what the kernel sends: a [`Request`] is the header and an
//! [`Op`] that borrows names and data from the read buffer. Nothing here
//! trusts a length: a record or name the buffer does not hold makes the
//! request [`Malformed`] (answered EINVAL), never a panic.

use super::abi::{self, op, Pod};

/// The header fields every handler may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The request's number, echoed in its reply.
    pub unique: u64,
    /// The opcode.
    pub opcode: u32,
    /// The node the request is about (0 where none).
    pub nodeid: u64,
    /// The caller's fsuid.
    pub uid: u32,
    /// The caller's fsgid.
    pub gid: u32,
    /// The caller's thread group id.
    pub pid: u32,
}

/// One request's operation and arguments.
#[derive(Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op<'a> {
    Init(abi::InitIn),
    Destroy,
    Interrupt(abi::InterruptIn),
    Lookup {
        name: &'a [u8],
    },
    Forget(abi::ForgetIn),
    BatchForget(Vec<abi::ForgetOne>),
    Getattr(abi::GetattrIn),
    Setattr(abi::SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        arg: abi::MknodIn,
        name: &'a [u8],
    },
    Mkdir {
        arg: abi::MkdirIn,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        arg: abi::LinkIn,
        name: &'a [u8],
    },
    Open(abi::OpenIn),
    Read(abi::ReadIn),
    Write {
        arg: abi::WriteIn,
        data: &'a [u8],
    },
    Statfs,
    Release(abi::ReleaseIn),
    Fsync(abi::FsyncIn),
    Setxattr {
        arg: abi::SetxattrIn,
        name: &'a [u8],
        value: &'a [u8],
    },
    Getxattr {
        arg: abi::GetxattrIn,
        name: &'a [u8],
    },
    Listxattr(abi::GetxattrIn),
    Removexattr {
        name: &'a [u8],
    },
    Flush(abi::FlushIn),
    Opendir(abi::OpenIn),
    Readdir(abi::ReadIn),
    Readdirplus(abi::ReadIn),
    Releasedir(abi::ReleaseIn),
    Fsyncdir(abi::FsyncIn),
    Access(abi::AccessIn),
    Create {
        arg: abi::CreateIn,
        name: &'a [u8],
    },
    Tmpfile {
        arg: abi::CreateIn,
    },
    Fallocate(abi::FallocateIn),
    Getlk(abi::LkIn),
    Setlk(abi::LkIn),
    /// SETLK that waits (F_SETLKW, `flock` without LOCK_NB).
    Setlkw(abi::LkIn),
    Lseek(abi::LseekIn),
    CopyFileRange(abi::CopyFileRangeIn),
    /// An opcode we do not implement: answered ENOSYS, which tells the
    /// kernel not to ask again where it keeps track.
    Unknown,
}

/// A request.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The header.
    pub header: Header,
    /// The operation.
    pub op: Op<'a>,
}

/// A request whose lengths do not add up; `unique` is known when the
/// header was whole (the request is then answered EINVAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// The request's number, when the header could be read.
    pub unique: Option<u64>,
}

/// The arguments after the header, consumed front to back. From /dev/fuse
/// they are one run of bytes; from an io_uring entry the first argument
/// (the per-opcode record) is in its own area of the header buffer and
/// the rest (names, data) in the payload buffer: `first` is that area
/// until the first record is taken from it.
struct Args<'a> {
    first: Option<&'a [u8]>,
    rest: &'a [u8],
}

impl<'a> Args<'a> {
    fn rec<T: Pod>(&mut self) -> Option<T> {
        if let Some(f) = self.first.take() {
            return T::read(f);
        }
        let v = T::read(self.rest)?;
        self.rest = &self.rest[std::mem::size_of::<T>()..];
        Some(v)
    }

    /// The first record, zero-extended where the kernel sent less (an
    /// older kernel's shorter record).
    fn rec_prefix<T: Pod>(&mut self) -> T {
        match self.first.take() {
            Some(f) => T::read_prefix(f),
            None => T::read_prefix(self.rest),
        }
    }

    /// A NUL-terminated name (without its NUL).
    fn name(&mut self) -> Option<&'a [u8]> {
        let end = self.rest.iter().position(|&b| b == 0)?;
        let (n, rest) = self.rest.split_at(end);
        self.rest = &rest[1..];
        Some(n)
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (b, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(b)
    }
}

impl<'a> Request<'a> {
    /// Parse one request: `buf` holds exactly what one read of /dev/fuse
    /// returned.
    pub fn parse(buf: &'a [u8]) -> Result<Request<'a>, Malformed> {
        let h = abi::InHeader::read(buf).ok_or(Malformed { unique: None })?;
        let bad = Malformed {
            unique: Some(h.unique),
        };
        let len = usize::try_from(h.len).map_err(|_| bad)?;
        if len < std::mem::size_of::<abi::InHeader>() || len > buf.len() {
            return Err(bad);
        }
        let body = &buf[std::mem::size_of::<abi::InHeader>()..len];
        let args = Args {
            first: None,
            rest: body,
        };
        Self::with_header(&h, args).ok_or(bad)
    }

    /// Parse one request from an io_uring entry: `header` is the entry's
    /// in/out area (`fuse_in_header` first), `op_in` its per-opcode area
    /// (the request's first argument, zero-padded), `payload` the part of
    /// the payload buffer the kernel filled (the other arguments: names,
    /// a write's data, borrowed, not copied). The header's `len` counts
    /// what /dev/fuse would carry and is not checked here: the payload's
    /// size bounds what is read.
    pub fn parse_parts(
        header: &'a [u8],
        op_in: &'a [u8],
        payload: &'a [u8],
    ) -> Result<Request<'a>, Malformed> {
        let h = abi::InHeader::read(header).ok_or(Malformed { unique: None })?;
        let args = Args {
            first: Some(op_in),
            rest: payload,
        };
        Self::with_header(&h, args).ok_or(Malformed {
            unique: Some(h.unique),
        })
    }

    fn with_header(h: &abi::InHeader, args: Args<'a>) -> Option<Request<'a>> {
        let op = Self::op(h.opcode, args)?;
        Some(Request {
            header: Header {
                unique: h.unique,
                opcode: h.opcode,
                nodeid: h.nodeid,
                uid: h.uid,
                gid: h.gid,
                pid: h.pid,
            },
            op,
        })
    }

    fn op(opcode: u32, mut a: Args<'a>) -> Option<Op<'a>> {
        Some(match opcode {
            op::INIT => Op::Init(a.rec_prefix()),
            op::DESTROY => Op::Destroy,
            op::INTERRUPT => Op::Interrupt(a.rec()?),
            op::LOOKUP => Op::Lookup { name: a.name()? },
            op::FORGET => Op::Forget(a.rec()?),
            op::BATCH_FORGET => {
                let n: abi::BatchForgetIn = a.rec()?;
                let mut v = Vec::with_capacity((n.count as usize).min(a.rest.len() / 16));
                for _ in 0..n.count {
                    v.push(a.rec()?);
                }
                Op::BatchForget(v)
            }
            // Kernels before 7.9 send no getattr_in.
            op::GETATTR => Op::Getattr(a.rec_prefix()),
            op::SETATTR => Op::Setattr(a.rec()?),
            op::READLINK => Op::Readlink,
            op::SYMLINK => {
                let name = a.name()?;
                Op::Symlink {
                    name,
                    target: a.name()?,
                }
            }
            op::MKNOD => Op::Mknod {
                arg: a.rec()?,
                name: a.name()?,
            },
            op::MKDIR => Op::Mkdir {
                arg: a.rec()?,
                name: a.name()?,
            },
            op::UNLINK => Op::Unlink { name: a.name()? },
            op::RMDIR => Op::Rmdir { name: a.name()? },
            op::RENAME => {
                let r: abi::RenameIn = a.rec()?;
                Op::Rename {
                    newdir: r.newdir,
                    flags: 0,
                    name: a.name()?,
                    newname: a.name()?,
                }
            }
            op::RENAME2 => {
                let r: abi::Rename2In = a.rec()?;
                Op::Rename {
                    newdir: r.newdir,
                    flags: r.flags,
                    name: a.name()?,
                    newname: a.name()?,
                }
            }
            op::LINK => Op::Link {
                arg: a.rec()?,
                name: a.name()?,
            },
            op::OPEN => Op::Open(a.rec()?),
            op::READ => Op::Read(a.rec()?),
            op::WRITE => {
                let arg: abi::WriteIn = a.rec()?;
                let data = a.bytes(arg.size as usize)?;
                Op::Write { arg, data }
            }
            op::STATFS => Op::Statfs,
            op::RELEASE => Op::Release(a.rec()?),
            op::FSYNC => Op::Fsync(a.rec()?),
            op::SETXATTR => {
                let arg: abi::SetxattrIn = a.rec()?;
                let name = a.name()?;
                Op::Setxattr {
                    arg,
                    name,
                    value: a.bytes(arg.size as usize)?,
                }
            }
            op::GETXATTR => Op::Getxattr {
                arg: a.rec()?,
                name: a.name()?,
            },
            op::LISTXATTR => Op::Listxattr(a.rec()?),
            op::REMOVEXATTR => Op::Removexattr { name: a.name()? },
            op::FLUSH => Op::Flush(a.rec()?),
            op::OPENDIR => Op::Opendir(a.rec()?),
            op::READDIR => Op::Readdir(a.rec()?),
            op::READDIRPLUS => Op::Readdirplus(a.rec()?),
            op::RELEASEDIR => Op::Releasedir(a.rec()?),
            op::FSYNCDIR => Op::Fsyncdir(a.rec()?),
            op::ACCESS => Op::Access(a.rec()?),
            op::CREATE => Op::Create {
                arg: a.rec()?,
                name: a.name()?,
            },
            // The kernel sends the new dentry's name ("/") after the
            // arguments; there is no name to use.
            op::TMPFILE => Op::Tmpfile { arg: a.rec()? },
            op::FALLOCATE => Op::Fallocate(a.rec()?),
            op::GETLK => Op::Getlk(a.rec()?),
            op::SETLK => Op::Setlk(a.rec()?),
            op::SETLKW => Op::Setlkw(a.rec()?),
            op::LSEEK => Op::Lseek(a.rec()?),
            op::COPY_FILE_RANGE => Op::CopyFileRange(a.rec()?),
            _ => Op::Unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u32, body: &[u8]) -> Vec<u8> {
        let h = abi::InHeader {
            len: (40 + body.len()) as u32,
            opcode,
            unique: 9,
            nodeid: 1,
            uid: 1000,
            gid: 1000,
            pid: 42,
            ..Default::default()
        };
        let mut v = h.as_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn names_and_records() {
        let b = request(op::LOOKUP, b"hello\0");
        let r = Request::parse(&b).unwrap();
        assert_eq!(r.op, Op::Lookup { name: b"hello" });
        assert_eq!((r.header.unique, r.header.uid, r.header.pid), (9, 1000, 42));

        let mut body = abi::Rename2In {
            newdir: 5,
            flags: 1,
            padding: 0,
        }
        .as_bytes()
        .to_vec();
        body.extend_from_slice(b"a\0b\0");
        let b = request(op::RENAME2, &body);
        assert_eq!(
            Request::parse(&b).unwrap().op,
            Op::Rename {
                newdir: 5,
                flags: 1,
                name: b"a",
                newname: b"b"
            }
        );

        let mut body = abi::WriteIn {
            size: 3,
            ..Default::default()
        }
        .as_bytes()
        .to_vec();
        body.extend_from_slice(b"xyz");
        let b = request(op::WRITE, &body);
        match Request::parse(&b).unwrap().op {
            Op::Write { data, .. } => assert_eq!(data, b"xyz"),
            o => panic!("{o:?}"),
        }
        assert_eq!(Request::parse(&request(999, b"")).unwrap().op, Op::Unknown);
    }

    /// From an io_uring entry: the first record in its own area, names and
    /// data in the payload (borrowed from it).
    #[test]
    fn parts_as_a_ring_entry_holds_them() {
        let h = abi::InHeader {
            len: 0,
            opcode: op::MKDIR,
            unique: 3,
            nodeid: 1,
            ..Default::default()
        };
        let mut op_in = [0u8; 128];
        let m = abi::MkdirIn {
            mode: 0o755,
            umask: 0o22,
        };
        op_in[..8].copy_from_slice(m.as_bytes());
        let r = Request::parse_parts(h.as_bytes(), &op_in, b"dir\0").unwrap();
        assert_eq!(
            r.op,
            Op::Mkdir {
                arg: m,
                name: b"dir"
            }
        );
        assert_eq!(r.header.unique, 3);
        // A lookup's first argument is empty: the name is in the payload.
        let h = abi::InHeader {
            opcode: op::LOOKUP,
            ..h
        };
        let r = Request::parse_parts(h.as_bytes(), &[0; 128], b"x\0").unwrap();
        assert_eq!(r.op, Op::Lookup { name: b"x" });
        // A write's data is the payload itself, not a copy.
        let w = abi::WriteIn {
            size: 4,
            ..Default::default()
        };
        let mut op_in = [0u8; 128];
        op_in[..40].copy_from_slice(w.as_bytes());
        let payload = b"data".to_vec();
        let h = abi::InHeader {
            opcode: op::WRITE,
            ..h
        };
        match Request::parse_parts(h.as_bytes(), &op_in, &payload)
            .unwrap()
            .op
        {
            Op::Write { data, .. } => assert_eq!(data.as_ptr(), payload.as_ptr()),
            o => panic!("{o:?}"),
        }
        // A payload shorter than the write claims; a short header.
        assert_eq!(
            Request::parse_parts(h.as_bytes(), &op_in, b"da"),
            Err(Malformed { unique: Some(3) })
        );
        assert_eq!(
            Request::parse_parts(&h.as_bytes()[..20], &op_in, b"data"),
            Err(Malformed { unique: None })
        );
    }

    /// Lengths that do not add up are refused, never read past.
    #[test]
    fn malformed_requests_are_refused() {
        // No NUL after the name.
        let b = request(op::LOOKUP, b"hello");
        assert_eq!(Request::parse(&b), Err(Malformed { unique: Some(9) }));
        // A write claiming more data than it carries.
        let body = abi::WriteIn {
            size: 100,
            ..Default::default()
        };
        let b = request(op::WRITE, body.as_bytes());
        assert!(Request::parse(&b).is_err());
        // A header claiming more than was read, or less than itself.
        let mut b = request(op::STATFS, b"");
        b[0] = 200;
        assert!(Request::parse(&b).is_err());
        b[0] = 10;
        assert!(Request::parse(&b).is_err());
        assert_eq!(Request::parse(&b[..20]), Err(Malformed { unique: None }));
        // A batch forget whose count exceeds its records.
        let mut body = abi::BatchForgetIn { count: 3, dummy: 0 }
            .as_bytes()
            .to_vec();
        body.extend_from_slice(
            abi::ForgetOne {
                nodeid: 2,
                nlookup: 1,
            }
            .as_bytes(),
        );
        assert!(Request::parse(&request(op::BATCH_FORGET, &body)).is_err());
    }
}
