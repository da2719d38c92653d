//! What the kernel's cache for a mount must drop, queued for the session's
//! invalidator thread (requests and the lock waiter queue them; the
//! thread sends them outside any handler).

use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};

/// Something the kernel's cache for this mount must drop, sent to it by the
/// session's invalidator thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelInval {
    /// The entry `name` under node `parent` (`FUSE_NOTIFY_INVAL_ENTRY`).
    Entry {
        /// The directory's node id.
        parent: u64,
        /// The name.
        name: Vec<u8>,
    },
    /// Node `node`'s attributes and cached data (`FUSE_NOTIFY_INVAL_INODE`).
    Inode {
        /// The node id.
        node: u64,
    },
    /// Nothing to send: passed once every invalidation queued before it
    /// was sent (a granted lock waits for it, see `locks.rs`).
    Barrier(InvalBarrier),
}

/// A mark in the invalidator's queue; see [`KernelInval::Barrier`].
/// Barriers carry no data: any two compare equal.
#[derive(Clone, Debug)]
pub struct InvalBarrier(pub(crate) std::sync::mpsc::Sender<()>);

impl InvalBarrier {
    /// The invalidator reached it.
    pub fn pass(&self) {
        let _ = self.0.send(());
    }
}

impl PartialEq for InvalBarrier {
    fn eq(&self, _: &InvalBarrier) -> bool {
        true
    }
}

impl Eq for InvalBarrier {}

/// Where the session puts the sender of its invalidator thread.
pub type InvalSlot = Arc<OnceLock<Mutex<Sender<KernelInval>>>>;
