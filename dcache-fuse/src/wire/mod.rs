//! The FUSE request layer: the wire format ([`abi`]), parsing requests
//! ([`request`]), building replies ([`reply`]), the /dev/fuse channel
//! ([`dev`]), mounting ([`mount`]) and the workers that serve a
//! connection ([`serve`]). A [`Handler`] answers parsed requests; the
//! transport that carries them (today /dev/fuse reads and writes) is
//! separate, so another one (FUSE over io_uring) serves the same handler.
//!
//! Modules depend one way: `abi` on nothing, `request`/`reply`/`dev` on
//! `abi`, `mount` on `dev`, `serve` on all of them.

pub mod abi;
pub mod dev;
pub mod mount;
pub mod reply;
pub mod request;
pub mod serve;

pub use self::reply::Out;
pub use self::request::{Header, Op, Request};
pub use self::serve::Handler;
