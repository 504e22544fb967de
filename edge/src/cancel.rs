//! The HTTP/2 cancellation budget: how many requests one connection may have at the upstream,
//! and when a connection that keeps cancelling the streams it opened is closed.
//!
//! A client can open a stream, let the edge hand it to the origin, and reset it a moment later
//! (`RST_STREAM`): the edge's work on it ends, but the origin's goes on. Paced that way, resets
//! are not refused by any stream limit, and one connection could keep hundreds of requests in
//! flight at the origin (the rapid-reset family of attacks, CVE-2023-44487 and its variants).
//! `Upstreams` gives each connection [`MAX_STREAMS`] upstream slots: a stream handed on holds
//! one while the proxy serves it, and one the client cancelled keeps it for the rest of the
//! connection (the edge cannot know when the upstream stops working on it). So one connection
//! never has more than [`MAX_STREAMS`] requests at the upstream, and it is closed once
//! [`CANCEL_BUDGET`] cancelled streams are a quarter of those it handed on, or at
//! [`MAX_CANCELLED_STREAMS`] in any case.
//!
//! The HTTP/2 loop ([`crate::front::h2`]) owns one per connection; the proxy tells it about a reset
//! through `note_client_reset` (a task-local, set on the stream's own task).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Streams a client may have open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`), and so the most
/// requests one connection has at the upstream at once.
pub const MAX_STREAMS: u32 = 100;

/// Streams handed to the upstream and then cancelled by the client (`RST_STREAM` before the
/// answer was done) after which a connection is closed with `GOAWAY(ENHANCE_YOUR_CALM)`, when
/// they are a quarter or more of the streams it handed on.
pub const CANCEL_BUDGET: usize = 32;

/// Cancelled streams after which a connection is closed in any case: each keeps its upstream
/// slot for the rest of the connection, and half of [`MAX_STREAMS`] is as many as one may lose.
pub const MAX_CANCELLED_STREAMS: usize = MAX_STREAMS as usize / 2;

tokio::task_local! {
    /// Set ([`note_client_reset`]) when the client reset the stream this task serves.
    static CLIENT_RESET: Arc<AtomicBool>;
}

/// Called by the proxy when the client reset the stream being served: on a stream's task run by
/// [`Upstreams::serve`] it is counted; elsewhere it does nothing.
pub(crate) fn note_client_reset() {
    let _ = CLIENT_RESET.try_with(|r| r.store(true, Ordering::Relaxed));
}

/// One connection's upstream slots and cancellation count (see the module doc).
pub(crate) struct Upstreams {
    slots: Arc<Semaphore>,
    handed: AtomicUsize,
    cancelled: AtomicUsize,
    /// Woken once the budget is spent: the connection's loop closes it.
    spent: Notify,
}

impl Upstreams {
    pub(crate) fn new() -> Self {
        Upstreams {
            slots: Arc::new(Semaphore::new(MAX_STREAMS as usize)),
            handed: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            spent: Notify::new(),
        }
    }

    /// Waits for a free slot; `None` once the connection is gone ([`Upstreams::close`]).
    pub(crate) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).acquire_owned().await.ok()
    }

    /// Runs `serve` (the proxy serving one stream) in `slot`, and counts the stream as cancelled
    /// when the proxy saw the client reset it.
    pub(crate) async fn serve<F: Future>(&self, slot: OwnedSemaphorePermit, serve: F) -> F::Output {
        self.handed.fetch_add(1, Ordering::Relaxed);
        let reset = Arc::new(AtomicBool::new(false));
        let out = CLIENT_RESET.scope(Arc::clone(&reset), serve).await;
        if reset.load(Ordering::Relaxed) {
            self.cancelled(slot, true);
        }
        out
    }

    /// Counts a cancelled stream; `upstream`: it reached the upstream, and keeps its slot.
    pub(crate) fn cancelled(&self, slot: OwnedSemaphorePermit, upstream: bool) {
        if upstream {
            slot.forget();
        }
        let cancelled = self.cancelled.fetch_add(1, Ordering::Relaxed) + 1;
        let handed = self.handed.load(Ordering::Relaxed);
        if cancelled >= MAX_CANCELLED_STREAMS || (cancelled >= CANCEL_BUDGET && cancelled * 4 >= handed) {
            self.spent.notify_one();
        }
    }

    /// Resolves once the connection has spent its budget.
    pub(crate) async fn spent(&self) {
        self.spent.notified().await;
    }

    /// Streams handed on and cancelled so far.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.handed.load(Ordering::Relaxed), self.cancelled.load(Ordering::Relaxed))
    }

    /// The connection is gone: streams still waiting for a slot end.
    pub(crate) fn close(&self) {
        self.slots.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancelled_streams_keep_their_slot_and_spend_the_budget() {
        let up = Upstreams::new();
        // 3 of 4 served normally, then cancels: closed at CANCEL_BUDGET once they are a quarter.
        for _ in 0..(3 * CANCEL_BUDGET) {
            let slot = up.slot().await.unwrap();
            up.serve(slot, async {}).await;
        }
        assert_eq!(up.slots.available_permits(), MAX_STREAMS as usize, "served streams give their slot back");
        for i in 1..=CANCEL_BUDGET {
            let slot = up.slot().await.unwrap();
            up.serve(slot, async { note_client_reset() }).await;
            assert_eq!(up.slots.available_permits(), MAX_STREAMS as usize - i, "a cancelled stream keeps its slot");
        }
        assert_eq!(up.counts(), (4 * CANCEL_BUDGET, CANCEL_BUDGET));
        tokio::time::timeout(std::time::Duration::from_millis(100), up.spent()).await.expect("the budget is spent");
        // Mostly served: the budget holds up to MAX_CANCELLED_STREAMS.
        let up = Upstreams::new();
        for _ in 0..1000 {
            let slot = up.slot().await.unwrap();
            up.serve(slot, async {}).await;
        }
        for _ in 0..MAX_CANCELLED_STREAMS - 1 {
            let slot = up.slot().await.unwrap();
            up.serve(slot, async { note_client_reset() }).await;
        }
        assert!(tokio::time::timeout(std::time::Duration::from_millis(50), up.spent()).await.is_err(), "not yet");
        let slot = up.slot().await.unwrap();
        up.cancelled(slot, false);
        assert_eq!(up.slots.available_permits(), MAX_STREAMS as usize - (MAX_CANCELLED_STREAMS - 1), "cancelled before the upstream: slot back");
        tokio::time::timeout(std::time::Duration::from_millis(100), up.spent()).await.expect("spent at MAX_CANCELLED_STREAMS");
        // A reset noted outside a served stream counts nothing.
        note_client_reset();
        up.close();
        assert!(up.slot().await.is_none(), "a closed connection's waiting streams end");
    }
}
