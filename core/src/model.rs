//! The sale's domain: events, pools, SKUs, limits, orders, and the typed outcomes of every store operation.
//!
//! Everything here is plain data shared by both stores, the HTTP layer and the tests. Times are unix
//! milliseconds (`i64`) inside the core and RFC 3339 strings on the wire.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest id accepted for events, pools, SKUs, seats and idempotency keys.
pub const MAX_ID_LEN: usize = 64;
/// Most pools, SKUs or limits an event may have.
pub const MAX_ITEMS: usize = 64;
/// Most named seats in one pool (a stadium block is far smaller).
pub const MAX_SEATS: usize = 100_000;
/// Default hold time: the 15-minute seat lock.
pub const DEFAULT_HOLD_SECONDS: u32 = 900;
/// Default most tickets one hold may ask for when a SKU names no `max_qty`.
pub const DEFAULT_SKU_MAX_QTY: u32 = 6;

/// Whether `s` is a safe identifier: 1..=64 of `[A-Za-z0-9_.+-]`, not starting with `.`.
///
/// Ids end up in Redis keys, URLs and outbox entries, so they are kept to a small alphabet.
pub fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && !s.starts_with('.')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+'))
}

/// Whether `s` is a valid event id: like [`valid_id`], without `+` (order ids embed the event).
pub fn valid_event_id(s: &str) -> bool {
    valid_id(s) && !s.contains('+')
}

/// One stock of tickets: general admission (`capacity`) or named seats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seats: Option<Vec<String>>,
}

impl PoolSpec {
    /// Number of tickets this pool can ever sell.
    pub fn capacity(&self) -> u32 {
        match (&self.seats, self.capacity) {
            (Some(seats), _) => seats.len() as u32,
            (None, Some(c)) => c,
            (None, None) => 0,
        }
    }

    pub fn is_seated(&self) -> bool {
        self.seats.is_some()
    }
}

/// A thing a buyer can hold: one unit of each of its pools per ticket (two pools make a combo ticket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkuSpec {
    pub id: String,
    pub pools: Vec<String>,
    pub price_cents: u64,
    /// Most tickets one hold may ask for (default 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_qty: Option<u32>,
}

impl SkuSpec {
    pub fn max_qty(&self) -> u32 {
        self.max_qty.unwrap_or(DEFAULT_SKU_MAX_QTY)
    }
}

/// The dimensions a purchase limit can count tickets on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// The admission token's `sub`.
    User,
    Phone,
    IdNumber,
    Device,
}

impl Dimension {
    pub const ALL: [Dimension; 4] = [Dimension::User, Dimension::Phone, Dimension::IdNumber, Dimension::Device];

    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::User => "user",
            Dimension::Phone => "phone",
            Dimension::IdNumber => "id_number",
            Dimension::Device => "device",
        }
    }
}

/// At most `max` tickets per value of `dimension` over the whole event (live and paid orders count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    pub dimension: Dimension,
    pub max: u32,
}

/// The event body of `PUT /v1/events/{event}` (docs/src/api.md "Event body").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    pub name: String,
    /// RFC 3339; holds before it answer `event_not_open`.
    #[serde(with = "time::serde::rfc3339")]
    pub opens_at: time::OffsetDateTime,
    /// RFC 3339; holds after it answer `event_not_open`.
    #[serde(with = "time::serde::rfc3339")]
    pub closes_at: time::OffsetDateTime,
    #[serde(default = "default_hold_seconds")]
    pub hold_seconds: u32,
    pub pools: Vec<PoolSpec>,
    pub skus: Vec<SkuSpec>,
    #[serde(default)]
    pub limits: Vec<LimitSpec>,
}

fn default_hold_seconds() -> u32 {
    DEFAULT_HOLD_SECONDS
}

/// One problem found in an input, with the path of the offending field (`pools[2].capacity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl EventSpec {
    pub fn opens_at_ms(&self) -> i64 {
        (self.opens_at.unix_timestamp_nanos() / 1_000_000) as i64
    }

    pub fn closes_at_ms(&self) -> i64 {
        (self.closes_at.unix_timestamp_nanos() / 1_000_000) as i64
    }

    pub fn pool(&self, id: &str) -> Option<&PoolSpec> {
        self.pools.iter().find(|p| p.id == id)
    }

    pub fn sku(&self, id: &str) -> Option<&SkuSpec> {
        self.skus.iter().find(|s| s.id == id)
    }

    pub fn limit(&self, d: Dimension) -> Option<u32> {
        self.limits.iter().find(|l| l.dimension == d).map(|l| l.max)
    }

    /// Reads an event body (JSON, docs/src/api.md "Event body") and checks it, naming every problem in one answer,
    /// each with its path: every wrong type, unknown and missing field ([`crate::strict_json`]), and every
    /// rule of [`validate`](Self::validate) on the body as read with a stand-in for each wrong or missing
    /// value, except what a rule says about such a value itself ([`crate::problems::within`]).
    pub fn read_checked(bytes: &[u8]) -> Result<EventSpec, Vec<FieldError>> {
        let (spec, shape) = crate::strict_json::object_from_slice_partial::<EventSpec>(bytes);
        let mut errs: Vec<FieldError> =
            shape.iter().map(|e| FieldError { path: e.path().to_owned(), message: e.message().to_owned() }).collect();
        let Some(spec) = spec else { return Err(errs) };
        let rules = spec.validate();
        errs.extend(rules.into_iter().filter(|r| !shape.iter().any(|s| crate::problems::within(&r.path, s.path()))));
        if errs.is_empty() { Ok(spec) } else { Err(errs) }
    }

    /// Every problem of the body, each with its path; empty when valid.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut err = |path: String, message: &str| errs.push(FieldError { path, message: message.to_string() });
        if self.name.is_empty() || self.name.len() > 200 {
            err("name".into(), "must be 1..=200 characters");
        }
        if self.closes_at <= self.opens_at {
            err("closes_at".into(), "must be after opens_at");
        }
        if self.hold_seconds == 0 || self.hold_seconds > 86_400 {
            err("hold_seconds".into(), "must be 1..=86400");
        }
        if self.pools.is_empty() || self.pools.len() > MAX_ITEMS {
            err("pools".into(), "must hold 1..=64 pools");
        }
        let mut pool_ids = std::collections::HashSet::new();
        for (i, p) in self.pools.iter().enumerate() {
            if !valid_id(&p.id) {
                err(format!("pools[{i}].id"), "must be 1..=64 of [A-Za-z0-9_.+-]");
            } else if !pool_ids.insert(p.id.as_str()) {
                err(format!("pools[{i}].id"), "duplicate pool id");
            }
            match (&p.capacity, &p.seats) {
                (Some(_), Some(_)) => err(format!("pools[{i}]"), "has both capacity and seats; choose one"),
                (None, None) => err(format!("pools[{i}]"), "needs capacity or seats"),
                (Some(c), None) if *c > 10_000_000 => err(format!("pools[{i}].capacity"), "must be ≤ 10000000"),
                (None, Some(seats)) => {
                    if seats.is_empty() || seats.len() > MAX_SEATS {
                        err(format!("pools[{i}].seats"), "must hold 1..=100000 seats");
                    }
                    let mut seen = std::collections::HashSet::new();
                    for (j, s) in seats.iter().enumerate() {
                        if !valid_id(s) {
                            err(format!("pools[{i}].seats[{j}]"), "must be 1..=64 of [A-Za-z0-9_.+-]");
                        } else if !seen.insert(s.as_str()) {
                            err(format!("pools[{i}].seats[{j}]"), "duplicate seat");
                        }
                    }
                }
                _ => {}
            }
        }
        if self.skus.is_empty() || self.skus.len() > MAX_ITEMS {
            err("skus".into(), "must hold 1..=64 SKUs");
        }
        let mut sku_ids = std::collections::HashSet::new();
        for (i, s) in self.skus.iter().enumerate() {
            if !valid_id(&s.id) {
                err(format!("skus[{i}].id"), "must be 1..=64 of [A-Za-z0-9_.+-]");
            } else if !sku_ids.insert(s.id.as_str()) {
                err(format!("skus[{i}].id"), "duplicate SKU id");
            }
            if s.pools.is_empty() || s.pools.len() > 8 {
                err(format!("skus[{i}].pools"), "must name 1..=8 pools");
            }
            let mut seen = std::collections::HashSet::new();
            let mut seated = 0;
            for (j, p) in s.pools.iter().enumerate() {
                match self.pool(p) {
                    None => err(format!("skus[{i}].pools[{j}]"), "unknown pool"),
                    Some(pool) => {
                        if pool.is_seated() {
                            seated += 1;
                        }
                    }
                }
                if !seen.insert(p.as_str()) {
                    err(format!("skus[{i}].pools[{j}]"), "pool named twice");
                }
            }
            if seated > 1 {
                err(format!("skus[{i}].pools"), "at most one pool of a SKU may have named seats");
            }
            if s.price_cents > 10_000_000_000 {
                err(format!("skus[{i}].price_cents"), "must be ≤ 10000000000");
            }
            if let Some(m) = s.max_qty
                && (m == 0 || m > 100)
            {
                err(format!("skus[{i}].max_qty"), "must be 1..=100");
            }
        }
        let mut dims = std::collections::HashSet::new();
        for (i, l) in self.limits.iter().enumerate() {
            if !dims.insert(l.dimension) {
                err(format!("limits[{i}].dimension"), "duplicate dimension");
            }
            if l.max == 0 {
                err(format!("limits[{i}].max"), "must be ≥ 1");
            }
        }
        errs
    }
}

/// The buyer's identity as given in the hold body (the user comes from the token).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// A validated hold, ready for the store's one atomic step (serialized only in the embedded store's journal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldRequest {
    pub event: String,
    /// New order id, generated by the core (`<event>+<ULID>`).
    pub order_id: String,
    pub sku: String,
    pub qty: u32,
    /// Named seats asked for; empty means "the first free ones" (seated pools) or none.
    pub seats: Vec<String>,
    /// The token's `sub`.
    pub user: String,
    pub identity: Identity,
    pub idempotency_key: String,
    /// Fingerprint of the request body (sku, qty, identity, seats): same key + other fingerprint is a conflict.
    pub fingerprint: String,
    pub jti: String,
    /// When the jti may be forgotten (token `exp` + leeway), unix ms.
    pub jti_expires_ms: i64,
    /// The buyer will ask again when told "sold out" while tickets may come back: put it on the waitlist
    /// ([`SoldOut`]). Not part of the fingerprint.
    #[serde(default)]
    pub wait: bool,
}

impl HoldRequest {
    /// The value of `d` this hold carries, if any.
    pub fn dimension_value(&self, d: Dimension) -> Option<&str> {
        match d {
            Dimension::User => Some(self.user.as_str()),
            Dimension::Phone => self.identity.phone.as_deref(),
            Dimension::IdNumber => self.identity.id_number.as_deref(),
            Dimension::Device => self.identity.device.as_deref(),
        }
    }

    /// A stable fingerprint of the parts of a hold that an idempotent replay must repeat.
    pub fn fingerprint_of(sku: &str, qty: u32, identity: &Identity, seats: &[String]) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        let canon = serde_json::json!({
            "sku": sku, "qty": qty, "identity": identity, "seats": seats,
        });
        h.update(canon.to_string().as_bytes());
        hex::encode(&h.finalize()[..16])
    }
}

/// The life of an order (DESIGN §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum OrderState {
    Created,
    Paid,
    Used,
    Closed,
    Refunded,
}

impl OrderState {
    pub const ALL: [OrderState; 5] =
        [OrderState::Created, OrderState::Paid, OrderState::Used, OrderState::Closed, OrderState::Refunded];

    pub fn as_str(self) -> &'static str {
        match self {
            OrderState::Created => "CREATED",
            OrderState::Paid => "PAID",
            OrderState::Used => "USED",
            OrderState::Closed => "CLOSED",
            OrderState::Refunded => "REFUNDED",
        }
    }

    pub fn parse(s: &str) -> Option<OrderState> {
        OrderState::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// An order as the API shows it (docs/src/api.md "Order").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub order_id: String,
    pub event: String,
    pub sku: String,
    pub qty: u32,
    pub seats: Vec<String>,
    pub user: String,
    pub state: OrderState,
    pub version: u64,
    pub amount_cents: u64,
    /// Hold deadline, unix ms.
    pub expires_at_ms: i64,
    pub created_at_ms: i64,
    pub redeemed_pools: Vec<String>,
    /// The provider's transaction that paid it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn_id: Option<String>,
    pub identity: Identity,
    /// The pools of the SKU at hold time (a later SKU edit does not change a live order).
    pub pools: Vec<String>,
}

/// Why a close happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// The buyer or an operator cancelled.
    Cancelled,
    /// The sweeper closed a hold past its deadline (only allowed once the store clock says so).
    Expired,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Cancelled => "cancelled",
            CloseReason::Expired => "expired",
        }
    }
}

/// Fixed outcomes of the hold step (DESIGN §5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    /// A new order.
    Created(Order),
    /// Same idempotency key and body as an earlier hold: that order.
    Replay(Order),
    /// Fewer tickets than asked for are this hold's: what it may take now, and the waitlist's say.
    SoldOut(SoldOut),
    /// A limit on this dimension would be exceeded.
    LimitExceeded(Dimension),
    TokenReplay,
    IdemConflict,
    /// A named seat is taken (held or sold by a live order).
    SeatTaken(String),
    NotOpen,
    Paused,
    /// No such event.
    NotFound,
    /// The request does not fit the event as the store has it (unknown SKU or seat, qty over the SKU's
    /// max, a limit on a dimension the hold does not carry); nothing was written.
    Rejected(String),
}

/// A hold short of tickets (issue #39). A fan admitted and told "sold out" while unpaid holds could still
/// give tickets back is put on the event's **waitlist**: it is first for the tickets that come back, in the
/// order fans met "sold out", while it asks again within [`WAIT_LIVE_MS`] and its admission token lasts;
/// tickets the live fans ahead of a hold wait for are not that hold's to take. At most [`WAIT_MAX`] fans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SoldOut {
    /// What this hold may take now (under its `qty`): `409 not_enough_left` when not 0.
    pub left: u64,
    /// Tickets of the pools it is short of that may still become its fan's (the fewest over them): in
    /// unpaid holds, or set aside for fans ahead on the waitlist; 0 means none can, sold out for good.
    pub returning: u64,
    /// Tickets the waitlist holds for fans who met "sold out" before this one (the most over its pools).
    pub ahead: u64,
    /// This fan has a turn on the waitlist (it asked to wait, none are left for it, some may come back,
    /// and the list had room or it was on it already).
    pub listed: bool,
}

/// How long a fan stays on the waitlist without asking again ([`SoldOut`]).
pub const WAIT_LIVE_MS: i64 = 10_000;
/// Most fans on an event's waitlist ([`SoldOut`]); a fan past it is told "sold out" without a turn. Every
/// hold reads the whole list (the tickets it waits for are nobody else's), so it is kept short: with claims
/// (the edge's release promises the tickets left), an admitted fan meets "sold out" a few times a sale.
pub const WAIT_MAX: usize = 50;

/// A payment callback or a positive payment query, ready for the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentRequest {
    pub order_id: String,
    pub txn_id: String,
    pub amount_cents: u64,
}

/// Outcome of applying a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayOutcome {
    /// CREATED → PAID.
    Paid(Order),
    /// This txn already paid this order (a repeated callback).
    AlreadyPaid(Order),
    /// The money arrived for an order that cannot take it (CLOSED, or paid by another txn):
    /// recorded in the outbox as `refund_required`, the order untouched.
    RefundRequired(Order),
    AmountMismatch { expected: u64 },
    NotFound,
}

/// Outcome of a compare-and-set transition (close, redeem, refund).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionOutcome {
    Done(Order),
    /// The order is not in a state that allows it (carries the order as it is).
    Invalid(Order),
    /// An expiry close asked before the store clock reached the deadline.
    NotDue(Order),
    /// A redeem naming a pool that is not in the order.
    UnknownPool,
    NotFound,
}

/// Result of `PUT` on an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutEventOutcome {
    Created,
    Updated,
    /// The change would move stock of an open sale and `force` was not given.
    NeedsForce(String),
    /// The change is impossible (capacity below held + sold, removing a taken seat...).
    Rejected(Vec<FieldError>),
}

/// An event as stored: its spec plus run-time flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    pub id: String,
    pub spec: EventSpec,
    pub paused: bool,
}

/// Counters of one pool. Invariant: `capacity == available + held + sold`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStock {
    pub capacity: u64,
    pub available: u64,
    pub held: u64,
    pub sold: u64,
}

/// Availability of one SKU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkuStock {
    pub available: u64,
    pub sold_out: bool,
}

/// `GET /v1/events/{event}/stock`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockView {
    pub pools: BTreeMap<String, PoolStock>,
    pub skus: BTreeMap<String, SkuStock>,
    /// Holds ever made for the event (orders created; never goes down): how the edge's release
    /// ends the promise of an admitted fan who held (issue #39, edge `room::claims`).
    #[serde(default)]
    pub holds: u64,
    /// Tickets in those holds, ever (`hold_units / holds` is the mean tickets per hold).
    #[serde(default)]
    pub hold_units: u64,
    /// Tickets the waitlist's live fans wait for ([`SoldOut`]): back in `available`, but theirs first.
    #[serde(default)]
    pub waiting: u64,
}

/// One state change in an event's outbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEntry {
    /// Opaque, increasing; pass it back as `after`.
    pub cursor: String,
    pub order_id: String,
    /// The order's state after the change (for `refund_required`, the state it stayed in).
    pub state: OrderState,
    pub version: u64,
    /// Unix ms of the store clock.
    pub at: i64,
    /// What happened: `created`, `paid`, `closed`, `cancelled`, `expired`, `redeemed`, `used`, `refunded`,
    /// `refund_required`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_cents: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// One line of a reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileCheck {
    pub name: String,
    pub pool: String,
    pub ok: bool,
    pub detail: String,
}

/// Outcome of a reconciliation of one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    pub ok: bool,
    pub checks: Vec<ReconcileCheck>,
}

/// Builds the reconciliation from the pool counters and the orders' own sums.
///
/// `live_qty[pool]` = tickets of CREATED orders, `paid_qty[pool]` = tickets of PAID + USED orders.
pub fn reconcile_from(
    stock: &StockView,
    held_by_orders: &BTreeMap<String, u64>,
    sold_by_orders: &BTreeMap<String, u64>,
) -> ReconcileReport {
    let mut checks = Vec::new();
    for (pool, s) in &stock.pools {
        let total = s.available + s.held + s.sold;
        checks.push(ReconcileCheck {
            name: "capacity".into(),
            pool: pool.clone(),
            ok: total == s.capacity,
            detail: format!("capacity {} = available {} + held {} + sold {}", s.capacity, s.available, s.held, s.sold),
        });
        let held = held_by_orders.get(pool).copied().unwrap_or(0);
        let sold = sold_by_orders.get(pool).copied().unwrap_or(0);
        let deducted = s.held + s.sold;
        checks.push(ReconcileCheck {
            name: "deducted>=orders".into(),
            pool: pool.clone(),
            ok: deducted >= held + sold && s.held == held,
            detail: format!("deducted {deducted} >= order tickets {}; held {} = open holds {held}", held + sold, s.held),
        });
        checks.push(ReconcileCheck {
            name: "orders>=paid".into(),
            pool: pool.clone(),
            ok: s.sold == sold,
            detail: format!("sold {} = paid tickets {sold}", s.sold),
        });
    }
    let ok = checks.iter().all(|c| c.ok);
    ReconcileReport { ok, checks }
}

/// Splits `<event>+<ULID>` into its event.
pub fn event_of_order(order_id: &str) -> Option<&str> {
    let (event, ulid) = order_id.rsplit_once('+')?;
    (valid_event_id(event) && ulid.len() == 26 && ulid.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(event)
}

/// A new order id for `event`: the event, `+`, and a ULID (time-ordered, 80 random bits).
pub fn new_order_id(event: &str) -> String {
    format!("{event}+{}", ulid::Ulid::new())
}

/// Unix ms to RFC 3339 (UTC, millisecond precision).
pub fn rfc3339_ms(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Type and rule problems in one pass (issue #25): a negative capacity and an SKU naming an unknown
    /// pool are both named with their paths.
    #[test]
    fn read_checked_names_type_and_rule_problems_together() {
        let body = br#"{"name": "x", "opens_at": "2026-01-01T00:00:00Z", "closes_at": "2026-01-02T00:00:00Z",
            "hold_seconds": 900, "pools": [{"id": "park", "capacity": -5}],
            "skus": [{"id": "s", "pools": ["nowhere"], "price_cents": 100}]}"#;
        let errs = EventSpec::read_checked(body).unwrap_err();
        let got: Vec<(&str, &str)> = errs.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
        assert_eq!(got, [("pools[0].capacity", "invalid value: integer `-5`, expected u32"), ("skus[0].pools[0]", "unknown pool")]);
        let good = br#"{"name": "x", "opens_at": "2026-01-01T00:00:00Z", "closes_at": "2026-01-02T00:00:00Z",
            "hold_seconds": 900, "pools": [{"id": "park", "capacity": 5}],
            "skus": [{"id": "s", "pools": ["park"], "price_cents": 100}]}"#;
        assert!(EventSpec::read_checked(good).is_ok());
    }

    #[test]
    fn order_ids_carry_their_event() {
        let id = new_order_id("ev-42");
        assert_eq!(event_of_order(&id), Some("ev-42"));
        assert_eq!(event_of_order("ev-42"), None);
        assert_eq!(event_of_order("ev-42+short"), None);
        assert_eq!(event_of_order("+01ARZ3NDEKTSV4RRFFQ69G5FAV"), None);
    }

    #[test]
    fn ids_are_bounded() {
        assert!(valid_id("park+zoo"));
        assert!(!valid_id(""));
        assert!(!valid_id("a b"));
        assert!(!valid_id(&"x".repeat(65)));
        assert!(!valid_event_id("a+b"));
    }
}
