//! Model-checks the book of waiting SETLKW requests
//! (`dcache_fuse::lockbook`): a worker parks a request whose first try
//! failed, the retry thread takes it and (its try failing again) puts it
//! back, and an INTERRUPT for it arrives at any point. In every
//! interleaving the request is answered exactly once, with EINTR, and
//! nothing is left waiting: an interrupt is never lost between the
//! book's hands.
//!
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release -p dcache-fuse --test loom_lockbook
#![cfg(loom)]

use dcache_fuse::lockbook::WaitBook;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A waiting request: answering it counts.
struct Waiter(Arc<AtomicUsize>);

impl Waiter {
    fn answer_eintr(self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn an_interrupt_answers_a_waiting_request_exactly_once() {
    loom::model(|| {
        let book = Arc::new(WaitBook::new());
        let answers = Arc::new(AtomicUsize::new(0));
        const U: u64 = 7;
        // The worker parks it (its first try failed).
        let (b1, a1) = (book.clone(), answers.clone());
        let worker = thread::spawn(move || {
            if let Some(w) = b1.park(U, Waiter(a1)) {
                w.answer_eintr();
            }
        });
        // The retry thread tries it once more, in vain.
        let b2 = book.clone();
        let retry = thread::spawn(move || {
            if let Some(w) = b2.take(U) {
                if let Some(w) = b2.put_back(U, w) {
                    w.answer_eintr();
                }
            }
        });
        // The interrupt.
        if let Some(w) = book.interrupt(U, 1, 0) {
            w.answer_eintr();
        }
        worker.join().unwrap();
        retry.join().unwrap();
        assert_eq!(answers.load(Ordering::SeqCst), 1, "answered once");
        assert_eq!(book.waiting(), 0, "nothing left waiting");
    });
}
