//! Model-checks the FUSE lookup-count protocol (`dcache_fuse::lookupcount`):
//! lock-free lookups of a held node, counted lookups under the transition
//! lock, and forgets, in every interleaving. A stand-in "map" (an atomic
//! flag) records whether the node is published; the models assert that
//!
//! - once everyone is done, the node is published exactly when its count
//!   is above zero (no lost node, no leaked one);
//! - whoever counted a lookup (and would reply with the node id) saw the
//!   node published at that moment, so a request that follows finds it;
//! - publishing and unpublishing alternate (never twice in a row);
//! - a forget of more than was counted changes nothing.
//!
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release -p dcache-fuse --test loom_lookupcount
#![cfg(loom)]

use dcache_fuse::lookupcount::{LookupCount, OverForget};
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// A node as dcache-fuse keeps it: the count in a word of the inode
/// (`Inode::frontend_word`), viewed through `LookupCount::of`.
struct Node {
    word: AtomicU64,
    lock: Mutex<()>,
    published: AtomicBool,
}

impl Node {
    fn count(&self) -> &LookupCount {
        LookupCount::of(&self.word)
    }

    fn new() -> Arc<Node> {
        Arc::new(Node {
            word: AtomicU64::new(0),
            lock: Mutex::new(()),
            published: AtomicBool::new(false),
        })
    }

    fn publish(&self) {
        // Relaxed: the protocol must order it (the count's Release store,
        // the lock); the model catches it if it does not.
        let was = self.published.swap(true, Ordering::Relaxed);
        assert!(!was, "published twice");
    }

    fn unpublish(&self) {
        let was = self.published.swap(false, Ordering::Relaxed);
        assert!(was, "unpublished a node that was not published");
    }

    /// A lookup: the held fast path, else the counted one. Afterwards the
    /// node must be findable (the reply names it).
    fn lookup(&self) {
        if !self.count().get_held() {
            let g = self.lock.lock().unwrap();
            self.count().get_locked(&g, || self.publish());
        }
        assert!(
            self.published.load(Ordering::Relaxed),
            "a lookup was counted while the node was not published"
        );
    }

    fn forget(&self, n: u64) -> Result<bool, OverForget> {
        self.count()
            .put(n, || self.lock.lock().unwrap(), || self.unpublish())
    }

    fn check(&self) {
        assert_eq!(
            self.published.load(Ordering::Relaxed),
            self.count().load() > 0,
            "published must mean count > 0"
        );
    }
}

/// The node is held once; a forget of that lookup races a second lookup.
#[test]
fn forget_to_zero_vs_lookup() {
    loom::model(|| {
        let node = Node::new();
        node.lookup();
        let n2 = node.clone();
        let t = thread::spawn(move || n2.lookup());
        let emptied = node.forget(1).unwrap();
        t.join().unwrap();
        node.check();
        // Either the lookup came first (count 2 -> 1, not emptied) or the
        // forget emptied it and the lookup published anew.
        assert_eq!(node.count().load(), 1);
        let _ = emptied;
    });
}

/// Two lookups of a node nobody holds race each other and a forget of
/// one of them.
#[test]
fn two_first_lookups_and_a_forget() {
    loom::model(|| {
        let node = Node::new();
        let n2 = node.clone();
        let t = thread::spawn(move || {
            n2.lookup();
            n2.forget(1).unwrap();
        });
        node.lookup();
        t.join().unwrap();
        node.check();
        assert_eq!(node.count().load(), 1);
        assert_eq!(node.forget(1), Ok(true));
        node.check();
    });
}

/// Two forgets that together empty the node, one from each thread.
#[test]
fn split_forgets_unpublish_once() {
    loom::model(|| {
        let node = Node::new();
        node.lookup();
        node.lookup();
        let n2 = node.clone();
        let t = thread::spawn(move || n2.forget(1).unwrap());
        let mine = node.forget(1).unwrap();
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs, "exactly one forget empties the node");
        node.check();
    });
}

/// A forget of more than was counted is refused and changes nothing.
#[test]
fn over_forget_is_refused() {
    loom::model(|| {
        let node = Node::new();
        node.lookup();
        assert_eq!(node.forget(2), Err(OverForget));
        assert_eq!(node.count().load(), 1);
        node.check();
        assert_eq!(node.forget(1), Ok(true));
        node.check();
    });
}
