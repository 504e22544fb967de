//! The sale store: one trait, two implementations (DESIGN §6).
//!
//! Every operation is one atomic step: all reads and checks, then all writes, so a failed check leaves no
//! trace. Transitions are compare-and-set on the order's state (and so its version). Deadlines come from the
//! store's own clock (`now_ms`), never the caller's, so several core instances agree on when a hold expires.
//!
//! - [`embedded`]: in-process, one mutex over all state; the zero-setup default, durable on local disk
//!   ([`journal`]: journal with group commit + snapshots) or in memory only.
//! - [`redis`]: Lua scripts in `lua/`, one Cluster slot per event; the production store. Optionally every
//!   acknowledged change waits for replicas / the AOF (`WAIT` / `WAITAOF`, config `[redis]`); [`replicas`]:
//!   which replicas could still be promoted, what `"auto"` waits for.
//!
//! Both run the same conformance suite (`core/tests/conformance/`).

pub mod embedded;
pub mod journal;
pub mod redis;
pub mod replicas;

use std::sync::Arc;

use async_trait::async_trait;

use crate::model::{
    CloseReason, EventRecord, EventSpec, HoldOutcome, HoldRequest, Order, OutboxEntry, PayOutcome,
    PaymentRequest, PutEventOutcome, ReconcileReport, StockView, TransitionOutcome,
};

/// Most outbox entries one read returns.
pub const MAX_OUTBOX_PAGE: usize = 1000;

/// One server process that holds sale state: a Redis (or each master of a Cluster) and the `run_id` it
/// reported, which changes whenever that process restarts (an AOF reload keeps the data, not the run id).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerId {
    /// Where the server answers (`host:port`), for logs.
    pub node: String,
    /// The server's `run_id` (INFO server).
    pub run_id: String,
}

/// Why a store call failed. Callers branch on it: `Unavailable` is safe to retry, `OutcomeUnknown` only with
/// the same idempotency key (the request may have been applied).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The request was not sent (no connection, pool exhausted): nothing happened.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The request was sent but no answer came back: it may or may not have been applied.
    #[error("store outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The store answered something the core does not understand (a bug or a corrupted key).
    #[error("store error: {0}")]
    Internal(String),
    /// The store refuses changes it cannot make durable (the embedded store's disk is full or failing); the
    /// message says what is still served. Nothing was changed.
    #[error("store refuses changes: {0}")]
    ReadOnly(String),
    /// The change was made on the Redis master, but its replicas (or AOF) did not confirm it within
    /// `redis.wait-timeout-ms` (`[redis]` wait settings): it may not survive a failover. Retry with the same
    /// idempotency key (a hold answers with the order it made).
    #[error("store durability timeout: {0}")]
    DurabilityTimeout(String),
}

impl StoreError {
    /// The error of a call that only reads: nothing can have changed, so "outcome unknown" (a write
    /// sent without an answer) is plain "unavailable, retry".
    pub fn read(self) -> StoreError {
        match self {
            StoreError::OutcomeUnknown(m) => StoreError::Unavailable(m),
            e => e,
        }
    }
}

/// The core's state: events, stock, orders, the outbox. See the module doc for the rules every
/// implementation keeps.
#[async_trait]
pub trait SaleStore: Send + Sync + 'static {
    /// The store's clock, unix ms (Redis `TIME` for Redis).
    async fn now_ms(&self) -> Result<i64, StoreError>;

    /// Creates or hot-updates an event. Capacity may be raised, or lowered but never below held + sold;
    /// seats may be added, or removed while free; once the sale is open, a change that moves stock needs
    /// `force`.
    async fn put_event(&self, id: &str, spec: &EventSpec, force: bool) -> Result<PutEventOutcome, StoreError>;

    async fn get_event(&self, id: &str) -> Result<Option<EventRecord>, StoreError>;

    /// Ids of every event, sorted.
    async fn list_events(&self) -> Result<Vec<String>, StoreError>;

    /// Pauses or resumes holds; `false` when the event does not exist.
    async fn set_paused(&self, id: &str, paused: bool) -> Result<bool, StoreError>;

    async fn stock(&self, id: &str) -> Result<Option<StockView>, StoreError>;

    /// The hold step: window and pause, idempotency (same key + same fingerprint → `Replay`, other
    /// fingerprint → `IdemConflict`), jti unused, every limit, seats, every pool of the SKU; then deduct,
    /// record, create the order CREATED with its deadline, append to the outbox, consume the jti.
    /// The caller has checked the SKU, qty and seat names against the event it read.
    async fn hold(&self, req: &HoldRequest) -> Result<HoldOutcome, StoreError>;

    /// The idempotency check of [`hold`](Self::hold) alone, read-only: `Replay` with the order an earlier hold
    /// with this user and key made (same fingerprint), `IdemConflict` (another fingerprint), `None` (new key).
    /// The HTTP layer asks it before any shortcut (sold-out memory, re-check pause), so a replay is always
    /// answered from the order it made.
    async fn find_replay(
        &self,
        event: &str,
        user: &str,
        idempotency_key: &str,
        fingerprint: &str,
    ) -> Result<Option<HoldOutcome>, StoreError>;

    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError>;

    /// CREATED → PAID, idempotent by txn id; money for an order that cannot take it is `RefundRequired`
    /// (one outbox entry per txn, however often the callback repeats).
    async fn pay(&self, req: &PaymentRequest) -> Result<PayOutcome, StoreError>;

    /// CREATED → CLOSED with stock, seats and limit usage returned and sold-out flags cleared.
    /// `Expired` only once the store clock is past the deadline (`NotDue` otherwise).
    async fn close(&self, order_id: &str, reason: CloseReason) -> Result<TransitionOutcome, StoreError>;

    /// Redeems one pool of a PAID order (or every pool left); all pools redeemed → USED.
    async fn redeem(&self, order_id: &str, pool: Option<&str>) -> Result<TransitionOutcome, StoreError>;

    /// PAID → REFUNDED; the tickets go back on sale and the buyer's limit usage is returned.
    async fn refund(&self, order_id: &str) -> Result<TransitionOutcome, StoreError>;

    /// CREATED orders of `event` whose deadline the store clock has passed, oldest first: `(order id,
    /// deadline ms)`.
    async fn due_holds(&self, event: &str, limit: usize) -> Result<Vec<(String, i64)>, StoreError>;

    /// Outbox entries of `event` after `after` (exclusive; `None` = from the start), at most `limit`.
    async fn outbox(&self, event: &str, after: Option<&str>, limit: usize) -> Result<Vec<OutboxEntry>, StoreError>;

    /// Cross-checks pool counters against the orders (`None` when the event does not exist).
    async fn reconcile(&self, event: &str) -> Result<Option<ReconcileReport>, StoreError>;

    /// CREATED orders of `event`, one page at a time: `(order id, deadline ms)` and the cursor of the next
    /// page (`None` after the last). Start with `None`; `count` is a hint. Every order that stays CREATED
    /// from the first page to the last is returned at least once (it may come twice); orders that leave
    /// CREATED meanwhile may or may not show up. An unknown cursor is `Internal`.
    async fn created_orders(
        &self,
        event: &str,
        cursor: Option<&str>,
        count: usize,
    ) -> Result<(Vec<(String, i64)>, Option<String>), StoreError>;

    /// Whether the state lives in a server that can restart while this process runs (Redis), so the core
    /// watches [`server_ids`](Self::server_ids) and re-checks CREATED orders after a restart (DESIGN §6).
    /// The embedded store's state is this process's own: `false`.
    fn is_external(&self) -> bool;

    /// Whether CREATED orders must be re-checked with the payment provider once at start, before holds open:
    /// the durable embedded store, whose state survived a stop or crash of this process (callbacks may have
    /// been lost meanwhile). The Redis store does this through its restart watcher instead.
    fn recheck_at_start(&self) -> bool {
        false
    }

    /// Redis masters whose changes are acknowledged without waiting for a replica because none is left that
    /// could be promoted (`redis.wait-replicas = "auto"`, issue #41); 0 for every other store or setting.
    fn unreplicated_masters(&self) -> usize {
        0
    }

    /// The server processes holding the state, sorted (Redis: the server; Cluster: every master). Empty for
    /// the embedded store.
    async fn server_ids(&self) -> Result<Vec<ServerId>, StoreError>;

    /// Takes or renews a named lease for `ttl_ms`; `true` when `holder` has it. Several core instances use
    /// it so one sweeper works at a time (compare-and-set makes double work harmless, the lease avoids it).
    async fn try_lease(&self, name: &str, holder: &str, ttl_ms: u64) -> Result<bool, StoreError>;
}

/// A shared handle to a store.
pub type DynStore = Arc<dyn SaleStore>;
