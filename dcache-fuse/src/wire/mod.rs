//! The FUSE request layer: the wire format ([`abi`]), parsing requests
//! ([`request`]), building replies ([`reply`]), the /dev/fuse channel
//! ([`dev`]), mounting ([`mount`]), the workers that serve a connection
//! through /dev/fuse reads and writes ([`serve`]), and the queues that
//! serve it through FUSE over io_uring ([`uring`]). A [`Handler`] answers
//! parsed requests, whichever transport carried them.
//!
//! Modules depend one way: `abi` on nothing, `request`/`reply`/`dev` on
//! `abi`, `mount` on `dev`, `serve` on all of them, `uring` on `serve`.

pub mod abi;
pub mod dev;
pub mod mount;
pub mod reply;
pub mod request;
pub mod serve;
pub mod uring;

pub use self::reply::Out;
pub use self::request::{Header, Op, Request};
pub use self::serve::Handler;
