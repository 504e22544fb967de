//! The store conformance suite, written once against [`SaleStore`] and run on every store.
//!
//! A store file (`tests/embedded.rs`, `tests/redis.rs`) implements [`Harness`] and calls
//! `conformance_suite!(factory)`, which expands to one test per check below. Every check builds its own event
//! with a unique id, relative to the store's clock, so checks can share a server.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wicket_core::model::*;
use wicket_core::store::{DynStore, SaleStore};

/// What a store gives the suite.
#[async_trait::async_trait]
pub trait Harness: Send + Sync {
    fn store(&self) -> DynStore;
    /// Moves the store clock forward (the embedded store's manual clock; a real sleep on Redis).
    async fn advance_ms(&self, ms: i64);
    /// Whether `advance_ms` is free (a manual clock), so property tests may expire holds often.
    fn cheap_time(&self) -> bool;
}

/// A Redis store (a server, a replicated pair, a Cluster) under the suite, in real time: `servers` keeps the
/// `wicket-testkit` processes alive for as long as the store is tested.
pub struct OnRedis<S> {
    pub store: DynStore,
    pub servers: S,
}

#[async_trait::async_trait]
impl<S: Send + Sync> Harness for OnRedis<S> {
    fn store(&self) -> DynStore {
        self.store.clone()
    }
    async fn advance_ms(&self, ms: i64) {
        tokio::time::sleep(std::time::Duration::from_millis(ms.max(0) as u64)).await;
    }
    fn cheap_time(&self) -> bool {
        false
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh event id.
pub fn event_id(tag: &str) -> String {
    format!("{tag}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

fn ts(ms: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).unwrap()
}

/// park (capacity `park`), zoo (capacity `zoo`), stalls (seats A-1..A-`seats`); SKUs park, park+zoo, stalls;
/// the limits given. Open from an hour ago for a day.
pub fn spec(now: i64, park: u32, zoo: u32, seats: usize, limits: &[(Dimension, u32)]) -> EventSpec {
    EventSpec {
        name: "Prehistoric park".into(),
        opens_at: ts(now - 3_600_000),
        closes_at: ts(now + 86_400_000),
        hold_seconds: 900,
        pools: vec![
            PoolSpec { id: "park".into(), capacity: Some(park), seats: None },
            PoolSpec { id: "zoo".into(), capacity: Some(zoo), seats: None },
            PoolSpec { id: "stalls".into(), capacity: None, seats: Some((1..=seats).map(|i| format!("A-{i}")).collect()) },
        ],
        skus: vec![
            SkuSpec { id: "park".into(), pools: vec!["park".into()], price_cents: 100, max_qty: None },
            SkuSpec { id: "park+zoo".into(), pools: vec!["park".into(), "zoo".into()], price_cents: 150, max_qty: None },
            SkuSpec { id: "stalls".into(), pools: vec!["stalls".into()], price_cents: 68000, max_qty: Some(4) },
        ],
        limits: limits.iter().map(|(d, m)| LimitSpec { dimension: *d, max: *m }).collect(),
    }
}

/// Creates an event and returns its id.
pub async fn new_event(h: &dyn Harness, tag: &str, park: u32, zoo: u32, seats: usize, limits: &[(Dimension, u32)]) -> String {
    let s = h.store();
    let id = event_id(tag);
    let now = s.now_ms().await.unwrap();
    assert_eq!(s.put_event(&id, &spec(now, park, zoo, seats, limits), false).await.unwrap(), PutEventOutcome::Created);
    id
}

/// A hold request with a fresh jti and idempotency key.
pub fn req(event: &str, user: &str, sku: &str, qty: u32) -> HoldRequest {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let mut r = HoldRequest {
        event: event.into(),
        order_id: new_order_id(event),
        sku: sku.into(),
        qty,
        seats: vec![],
        user: user.into(),
        identity: Identity::default(),
        idempotency_key: format!("idem-{n}"),
        fingerprint: String::new(),
        jti: format!("jti-{n}-{}", ulid::Ulid::new()),
        jti_expires_ms: i64::MAX / 2,
        wait: false,
    };
    r.refingerprint();
    r
}

pub trait Refingerprint {
    fn refingerprint(&mut self);
}

impl Refingerprint for HoldRequest {
    fn refingerprint(&mut self) {
        self.fingerprint = HoldRequest::fingerprint_of(&self.sku, self.qty, &self.identity, &self.seats);
    }
}

pub async fn created(s: &dyn SaleStore, r: &HoldRequest) -> Order {
    match s.hold(r).await.unwrap() {
        HoldOutcome::Created(o) => o,
        other => panic!("expected a new order, got {other:?}"),
    }
}

pub async fn pool(s: &dyn SaleStore, event: &str, p: &str) -> PoolStock {
    s.stock(event).await.unwrap().unwrap().pools[p]
}

fn pay_req(o: &Order, txn: &str) -> PaymentRequest {
    PaymentRequest { order_id: o.order_id.clone(), txn_id: txn.into(), amount_cents: o.amount_cents }
}

/// Checks every pool: capacity = available + held + sold, and the reconciler agrees.
pub async fn assert_invariants(s: &dyn SaleStore, event: &str) {
    let stock = s.stock(event).await.unwrap().unwrap();
    for (id, p) in &stock.pools {
        assert_eq!(p.capacity, p.available + p.held + p.sold, "pool {id}: {p:?}");
    }
    let rec = s.reconcile(event).await.unwrap().unwrap();
    assert!(rec.ok, "reconcile failed: {rec:?}");
}

// ---------------------------------------------------------------- checks

pub async fn create_and_read_event(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "create", 10, 5, 3, &[]).await;
    let rec = s.get_event(&id).await.unwrap().unwrap();
    assert_eq!(rec.spec.pools.len(), 3);
    assert!(!rec.paused);
    assert!(s.list_events().await.unwrap().contains(&id));
    let stock = s.stock(&id).await.unwrap().unwrap();
    assert_eq!(stock.pools["park"], PoolStock { capacity: 10, available: 10, held: 0, sold: 0 });
    assert_eq!(stock.pools["stalls"].capacity, 3);
    assert_eq!(stock.skus["park+zoo"], SkuStock { available: 5, sold_out: false });
    assert!(s.get_event("no-such-event").await.unwrap().is_none());
    assert!(s.stock("no-such-event").await.unwrap().is_none());
}

pub async fn hold_creates_order(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "hold", 10, 5, 3, &[]).await;
    let now = s.now_ms().await.unwrap();
    let r = req(&id, "alice", "park+zoo", 2);
    let o = created(&*s, &r).await;
    assert_eq!(o.state, OrderState::Created);
    assert_eq!(o.version, 1);
    assert_eq!(o.qty, 2);
    assert_eq!(o.amount_cents, 300);
    assert_eq!(o.user, "alice");
    assert_eq!(o.order_id, r.order_id);
    assert!((o.expires_at_ms - (now + 900_000)).abs() < 5_000, "deadline {} vs now {now}", o.expires_at_ms);
    assert_eq!(s.get_order(&o.order_id).await.unwrap().unwrap(), o);
    assert_eq!(pool(&*s, &id, "park").await, PoolStock { capacity: 10, available: 8, held: 2, sold: 0 });
    assert_eq!(pool(&*s, &id, "zoo").await, PoolStock { capacity: 5, available: 3, held: 2, sold: 0 });
    assert!(s.get_order(&new_order_id(&id)).await.unwrap().is_none());
    assert!(s.get_order("garbage").await.unwrap().is_none());
    assert_invariants(&*s, &id).await;
}

pub async fn idempotent_replay_and_conflict(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "idem", 10, 5, 3, &[]).await;
    let r = req(&id, "alice", "park", 1);
    let o = created(&*s, &r).await;
    // Same key, same body, even with the same (now used) token: the same order.
    let mut again = r.clone();
    again.order_id = new_order_id(&id);
    assert_eq!(s.hold(&again).await.unwrap(), HoldOutcome::Replay(o.clone()));
    // Same key, other body: conflict.
    let mut other = again.clone();
    other.qty = 2;
    other.refingerprint();
    assert_eq!(s.hold(&other).await.unwrap(), HoldOutcome::IdemConflict);
    // Another user may use the same key.
    let mut bob = req(&id, "bob", "park", 1);
    bob.idempotency_key = r.idempotency_key.clone();
    created(&*s, &bob).await;
    assert_eq!(pool(&*s, &id, "park").await.held, 2);
}

pub async fn token_replay(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "jti", 10, 5, 3, &[]).await;
    let r = req(&id, "alice", "park", 1);
    created(&*s, &r).await;
    let mut second = req(&id, "alice", "park", 1);
    second.jti = r.jti.clone();
    assert_eq!(s.hold(&second).await.unwrap(), HoldOutcome::TokenReplay);
    assert_eq!(pool(&*s, &id, "park").await.held, 1);
}

pub async fn limits_per_dimension(h: &dyn Harness) {
    let s = h.store();
    let limits = [(Dimension::User, 2), (Dimension::Phone, 3), (Dimension::IdNumber, 2), (Dimension::Device, 4)];
    let id = new_event(h, "limits", 100, 50, 3, &limits).await;
    let ident = |phone: &str, idn: &str, dev: &str| Identity {
        phone: Some(phone.into()),
        id_number: Some(idn.into()),
        device: Some(dev.into()),
    };
    let hold = |user: &str, qty: u32, ident: Identity| {
        let mut r = req(&id, user, "park", qty);
        r.identity = ident;
        r.refingerprint();
        r
    };
    // user: 2 tickets.
    created(&*s, &hold("u1", 1, ident("p1", "i1", "d1"))).await;
    assert_eq!(s.hold(&hold("u1", 2, ident("p9", "i9", "d9"))).await.unwrap(), HoldOutcome::LimitExceeded(Dimension::User));
    // id_number: 2 tickets.
    assert_eq!(s.hold(&hold("u2", 2, ident("p2", "i1", "d2"))).await.unwrap(), HoldOutcome::LimitExceeded(Dimension::IdNumber));
    // phone: 3 tickets.
    created(&*s, &hold("u3", 2, ident("p1", "i3", "d3"))).await;
    assert_eq!(s.hold(&hold("u4", 1, ident("p1", "i4", "d4"))).await.unwrap(), HoldOutcome::LimitExceeded(Dimension::Phone));
    // device: 4 tickets.
    created(&*s, &hold("u5", 2, ident("p5", "i5", "dd"))).await;
    created(&*s, &hold("u6", 2, ident("p6", "i6", "dd"))).await;
    assert_eq!(s.hold(&hold("u7", 1, ident("p7", "i7", "dd"))).await.unwrap(), HoldOutcome::LimitExceeded(Dimension::Device));
    // A limited dimension the hold does not carry is rejected, nothing written.
    let before = pool(&*s, &id, "park").await;
    let bare = req(&id, "u8", "park", 1);
    assert!(matches!(s.hold(&bare).await.unwrap(), HoldOutcome::Rejected(_)));
    assert_eq!(pool(&*s, &id, "park").await, before);
    // Cancelling returns usage: the same id number (limit 2) may hold 2 again.
    let o = created(&*s, &hold("u9", 1, ident("p9", "i9", "d9"))).await;
    assert_eq!(s.hold(&hold("u10", 2, ident("p10", "i9", "d10"))).await.unwrap(), HoldOutcome::LimitExceeded(Dimension::IdNumber));
    assert!(matches!(s.close(&o.order_id, CloseReason::Cancelled).await.unwrap(), TransitionOutcome::Done(_)));
    created(&*s, &hold("u10", 2, ident("p10", "i9", "d10"))).await;
}

pub async fn combo_all_or_nothing(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "combo", 5, 2, 3, &[]).await;
    let a = created(&*s, &req(&id, "a", "park+zoo", 1)).await;
    created(&*s, &req(&id, "b", "park+zoo", 1)).await;
    // zoo is empty: the combo stops though the park has stock, and the park is not touched.
    assert_eq!(s.hold(&req(&id, "c", "park+zoo", 1)).await.unwrap(), sold_out(0, 2, 0));
    let st = s.stock(&id).await.unwrap().unwrap();
    assert_eq!(st.pools["park"].available, 3);
    assert_eq!(st.pools["zoo"].available, 0);
    assert!(st.skus["park+zoo"].sold_out);
    assert!(!st.skus["park"].sold_out);
    created(&*s, &req(&id, "d", "park", 3)).await;
    assert_eq!(s.hold(&req(&id, "e", "park", 1)).await.unwrap(), sold_out(0, 5, 0));
    assert!(s.stock(&id).await.unwrap().unwrap().skus["park"].sold_out);
    // Cancel returns both pools and clears the flags.
    assert!(matches!(s.close(&a.order_id, CloseReason::Cancelled).await.unwrap(), TransitionOutcome::Done(_)));
    let st = s.stock(&id).await.unwrap().unwrap();
    assert_eq!(st.pools["park"].available, 1);
    assert_eq!(st.pools["zoo"].available, 1);
    assert!(!st.skus["park+zoo"].sold_out);
    assert!(!st.skus["park"].sold_out);
    created(&*s, &req(&id, "f", "park+zoo", 1)).await;
    assert_invariants(&*s, &id).await;
}

pub async fn qty_larger_than_stock_is_sold_out_without_flag(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "qty", 3, 2, 3, &[]).await;
    assert_eq!(s.hold(&req(&id, "a", "park", 4)).await.unwrap(), sold_out(3, 0, 0));
    assert!(!s.stock(&id).await.unwrap().unwrap().skus["park"].sold_out);
    assert!(matches!(s.hold(&req(&id, "a", "park", 7)).await.unwrap(), HoldOutcome::Rejected(_)));
    assert!(matches!(s.hold(&req(&id, "a", "nope", 1)).await.unwrap(), HoldOutcome::Rejected(_)));
    assert_eq!(s.hold(&req("no-such-event", "a", "park", 1)).await.unwrap(), HoldOutcome::NotFound);
    assert_eq!(pool(&*s, &id, "park").await.available, 3);
}

/// `SoldOut` as a hold's answer, without a turn on the waitlist.
pub fn sold_out(left: u64, returning: u64, ahead: u64) -> HoldOutcome {
    HoldOutcome::SoldOut(SoldOut { left, returning, ahead, listed: false })
}

/// `SoldOut` as a hold's answer, with a turn on the waitlist.
pub fn waits(left: u64, returning: u64, ahead: u64) -> HoldOutcome {
    HoldOutcome::SoldOut(SoldOut { left, returning, ahead, listed: true })
}

/// The waitlist (issue #39): a fan told "sold out" while unpaid holds may give tickets back, that asked to
/// wait, is first for the tickets that come back, in the order fans met "sold out"; the tickets the fans
/// ahead wait for are nobody else's, also not a fan's who did not ask to wait (told "sold out", no turn); a
/// fan offered fewer than it asked for keeps its turn; a hold ends its turn; when nothing can come back, a
/// fan is told "sold out" and gets no turn.
pub async fn waitlist_is_first_for_tickets_that_come_back(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "wait", 3, 2, 3, &[]).await;
    let a = created(&*s, &req(&id, "a", "park", 2)).await;
    let b = created(&*s, &req(&id, "b", "park", 1)).await;
    let waiting = |r: HoldRequest| HoldRequest { wait: true, ..r };
    // Sold out, 3 tickets in unpaid holds: Cat (2) is first, Dan (1) second, behind Cat's 2.
    let cat = waiting(req(&id, "cat", "park", 2));
    let dan = waiting(req(&id, "dan", "park", 1));
    let eve = req(&id, "eve", "park", 1);
    assert_eq!(s.hold(&cat).await.unwrap(), waits(0, 3, 0));
    assert_eq!(s.hold(&dan).await.unwrap(), waits(0, 3, 2));
    // Eve did not ask to wait: told sold out, behind both, and not listed.
    assert_eq!(s.hold(&eve).await.unwrap(), sold_out(0, 3, 3));
    assert_eq!(s.stock(&id).await.unwrap().unwrap().waiting, 3);
    // Bob's ticket comes back: it is Cat's. Eve and Dan are refused it; Cat is offered 1 of its 2 and keeps
    // its turn.
    assert!(matches!(s.close(&b.order_id, CloseReason::Cancelled).await.unwrap(), TransitionOutcome::Done(_)));
    assert_eq!(s.hold(&eve).await.unwrap(), sold_out(0, 3, 3));
    assert_eq!(s.hold(&dan).await.unwrap(), waits(0, 3, 2));
    assert_eq!(s.hold(&cat).await.unwrap(), waits(1, 2, 0));
    assert_eq!(pool(&*s, &id, "park").await.available, 1);
    // Ann's two come back: Cat takes its two, then Dan the last; Eve finds Dan's ticket spoken for, then none.
    assert!(matches!(s.close(&a.order_id, CloseReason::Cancelled).await.unwrap(), TransitionOutcome::Done(_)));
    let c = created(&*s, &cat).await;
    assert_eq!(s.hold(&eve).await.unwrap(), sold_out(0, 3, 1));
    assert_eq!(s.stock(&id).await.unwrap().unwrap().waiting, 1);
    let d = created(&*s, &dan).await;
    assert_eq!(s.stock(&id).await.unwrap().unwrap().waiting, 0);
    assert_eq!(s.hold(&eve).await.unwrap(), sold_out(0, 3, 0));
    // A used token stays used, on the list or not.
    assert_eq!(s.hold(&HoldRequest { idempotency_key: "again".into(), ..cat.clone() }).await.unwrap(), HoldOutcome::TokenReplay);
    // Every ticket paid: nothing can come back, so a fan who asks to wait is told sold out, with no turn.
    s.pay(&pay_req(&c, "tc")).await.unwrap();
    s.pay(&pay_req(&d, "td")).await.unwrap();
    let fay = waiting(req(&id, "fay", "park", 1));
    assert_eq!(s.hold(&fay).await.unwrap(), sold_out(0, 0, 0));
    assert_eq!(s.stock(&id).await.unwrap().unwrap().waiting, 0);
    assert_invariants(&*s, &id).await;
    // A combo fan waits on each of its pools: with the zoo sold out, its park ticket is set aside too.
    let id = new_event(h, "wait-combo", 5, 1, 3, &[]).await;
    created(&*s, &req(&id, "a", "park+zoo", 1)).await;
    let gil = waiting(req(&id, "gil", "park+zoo", 1));
    assert_eq!(s.hold(&gil).await.unwrap(), waits(0, 1, 0));
    assert_eq!(s.hold(&req(&id, "hal", "park", 4)).await.unwrap(), sold_out(3, 2, 1));
    created(&*s, &req(&id, "hal", "park", 3)).await;
    assert_eq!(pool(&*s, &id, "park").await.available, 1);
    assert_invariants(&*s, &id).await;
}

/// The waitlist is bounded (every hold reads it): past `WAIT_MAX` fans a fan who asks to wait is told sold out
/// without a turn; one on the list keeps asking and keeps its turn.
pub async fn the_waitlist_is_bounded(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "wait-full", 1, 1, 3, &[]).await;
    created(&*s, &req(&id, "a", "park", 1)).await;
    let mut fans = Vec::new();
    for i in 0..WAIT_MAX as u64 {
        let r = HoldRequest { wait: true, ..req(&id, &format!("w{i}"), "park", 1) };
        assert_eq!(s.hold(&r).await.unwrap(), waits(0, 1, i), "fan {i}");
        fans.push(r);
    }
    let late = HoldRequest { wait: true, ..req(&id, "late", "park", 1) };
    assert_eq!(s.hold(&late).await.unwrap(), sold_out(0, 1, WAIT_MAX as u64));
    assert_eq!(s.stock(&id).await.unwrap().unwrap().waiting, WAIT_MAX as u64);
    assert_eq!(s.hold(&fans[WAIT_MAX - 1]).await.unwrap(), waits(0, 1, WAIT_MAX as u64 - 1));
}

pub async fn pay_paths(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "pay", 10, 5, 3, &[]).await;
    let o = created(&*s, &req(&id, "alice", "park", 2)).await;
    let bad = PaymentRequest { amount_cents: o.amount_cents + 1, ..pay_req(&o, "t1") };
    assert_eq!(s.pay(&bad).await.unwrap(), PayOutcome::AmountMismatch { expected: 200 });
    let paid = match s.pay(&pay_req(&o, "t1")).await.unwrap() {
        PayOutcome::Paid(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(paid.state, OrderState::Paid);
    assert_eq!(paid.version, 2);
    assert_eq!(paid.txn_id.as_deref(), Some("t1"));
    assert_eq!(pool(&*s, &id, "park").await, PoolStock { capacity: 10, available: 8, held: 0, sold: 2 });
    // The provider repeats its callback.
    assert_eq!(s.pay(&pay_req(&o, "t1")).await.unwrap(), PayOutcome::AlreadyPaid(paid.clone()));
    // A second payment for the same order: the money goes back.
    assert_eq!(s.pay(&pay_req(&o, "t2")).await.unwrap(), PayOutcome::RefundRequired(paid.clone()));
    assert_eq!(s.pay(&pay_req(&o, "t2")).await.unwrap(), PayOutcome::RefundRequired(paid.clone()));
    // A paid order cannot be closed.
    assert_eq!(s.close(&o.order_id, CloseReason::Cancelled).await.unwrap(), TransitionOutcome::Invalid(paid.clone()));
    let unknown = PaymentRequest { order_id: new_order_id(&id), txn_id: "t3".into(), amount_cents: 1 };
    assert_eq!(s.pay(&unknown).await.unwrap(), PayOutcome::NotFound);
    let outbox = s.outbox(&id, None, 100).await.unwrap();
    let kinds: Vec<&str> = outbox.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["created", "paid", "refund_required"]);
    assert_invariants(&*s, &id).await;
}

pub async fn payment_after_close_is_refund_required(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "late", 10, 5, 3, &[]).await;
    let o = created(&*s, &req(&id, "alice", "park", 1)).await;
    let closed = match s.close(&o.order_id, CloseReason::Cancelled).await.unwrap() {
        TransitionOutcome::Done(c) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(closed.state, OrderState::Closed);
    assert_eq!(closed.version, 2);
    assert_eq!(s.pay(&pay_req(&o, "late-1")).await.unwrap(), PayOutcome::RefundRequired(closed.clone()));
    assert_eq!(s.get_order(&o.order_id).await.unwrap().unwrap().state, OrderState::Closed);
    let last = s.outbox(&id, None, 100).await.unwrap().pop().unwrap();
    assert_eq!(last.kind, "refund_required");
    assert_eq!(last.txn_id.as_deref(), Some("late-1"));
    assert_eq!(last.order_id, o.order_id);
    // Closing twice is not a transition.
    assert!(matches!(s.close(&o.order_id, CloseReason::Cancelled).await.unwrap(), TransitionOutcome::Invalid(_)));
    assert_eq!(pool(&*s, &id, "park").await.available, 10);
}

pub async fn expiry_needs_the_deadline(h: &dyn Harness) {
    let s = h.store();
    let id = event_id("expiry");
    let now = s.now_ms().await.unwrap();
    let mut sp = spec(now, 10, 5, 3, &[]);
    sp.hold_seconds = 1;
    s.put_event(&id, &sp, false).await.unwrap();
    let o = created(&*s, &req(&id, "alice", "park", 1)).await;
    assert!(matches!(s.close(&o.order_id, CloseReason::Expired).await.unwrap(), TransitionOutcome::NotDue(_)));
    assert!(s.due_holds(&id, 10).await.unwrap().is_empty());
    h.advance_ms(1_100).await;
    let due = s.due_holds(&id, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].0, o.order_id);
    assert!(matches!(s.close(&o.order_id, CloseReason::Expired).await.unwrap(), TransitionOutcome::Done(_)));
    assert!(s.due_holds(&id, 10).await.unwrap().is_empty());
    assert_eq!(pool(&*s, &id, "park").await.available, 10);
    assert_eq!(s.outbox(&id, None, 10).await.unwrap().last().unwrap().kind, "expired");
}

pub async fn paid_after_deadline_before_close_wins(h: &dyn Harness) {
    let s = h.store();
    let id = event_id("race");
    let now = s.now_ms().await.unwrap();
    let mut sp = spec(now, 10, 5, 3, &[]);
    sp.hold_seconds = 1;
    s.put_event(&id, &sp, false).await.unwrap();
    let o = created(&*s, &req(&id, "alice", "park", 1)).await;
    h.advance_ms(1_100).await;
    // The deadline passed but the sweeper has not closed it yet: the payment wins, the close loses.
    assert!(matches!(s.pay(&pay_req(&o, "t")).await.unwrap(), PayOutcome::Paid(_)));
    assert!(matches!(s.close(&o.order_id, CloseReason::Expired).await.unwrap(), TransitionOutcome::Invalid(_)));
    assert!(s.due_holds(&id, 10).await.unwrap().is_empty());
}

pub async fn redeem_per_pool(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "redeem", 10, 5, 3, &[]).await;
    let o = created(&*s, &req(&id, "alice", "park+zoo", 1)).await;
    assert!(matches!(s.redeem(&o.order_id, None).await.unwrap(), TransitionOutcome::Invalid(_)), "CREATED cannot be used");
    s.pay(&pay_req(&o, "t")).await.unwrap();
    assert_eq!(s.redeem(&o.order_id, Some("stalls")).await.unwrap(), TransitionOutcome::UnknownPool);
    let part = match s.redeem(&o.order_id, Some("park")).await.unwrap() {
        TransitionOutcome::Done(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(part.state, OrderState::Paid);
    assert_eq!(part.redeemed_pools, vec!["park".to_string()]);
    assert!(matches!(s.redeem(&o.order_id, Some("park")).await.unwrap(), TransitionOutcome::Invalid(_)));
    assert!(matches!(s.refund(&o.order_id).await.unwrap(), TransitionOutcome::Invalid(_)), "partly used: no refund");
    let used = match s.redeem(&o.order_id, Some("zoo")).await.unwrap() {
        TransitionOutcome::Done(u) => u,
        other => panic!("{other:?}"),
    };
    assert_eq!(used.state, OrderState::Used);
    assert_eq!(used.version, 4);
    assert_eq!(s.get_order(&o.order_id).await.unwrap().unwrap().redeemed_pools.len(), 2);
    // All at once.
    let o2 = created(&*s, &req(&id, "bob", "park+zoo", 1)).await;
    s.pay(&pay_req(&o2, "t2")).await.unwrap();
    match s.redeem(&o2.order_id, None).await.unwrap() {
        TransitionOutcome::Done(u) => assert_eq!(u.state, OrderState::Used),
        other => panic!("{other:?}"),
    }
    assert_invariants(&*s, &id).await;
}

pub async fn refund_returns_stock(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "refund", 2, 5, 3, &[(Dimension::User, 2)]).await;
    let o = created(&*s, &req(&id, "alice", "park", 2)).await;
    assert!(matches!(s.refund(&o.order_id).await.unwrap(), TransitionOutcome::Invalid(_)));
    s.pay(&pay_req(&o, "t")).await.unwrap();
    assert_eq!(s.hold(&req(&id, "bob", "park", 1)).await.unwrap(), sold_out(0, 0, 0));
    match s.refund(&o.order_id).await.unwrap() {
        TransitionOutcome::Done(r) => assert_eq!((r.state, r.version), (OrderState::Refunded, 3)),
        other => panic!("{other:?}"),
    }
    assert_eq!(pool(&*s, &id, "park").await, PoolStock { capacity: 2, available: 2, held: 0, sold: 0 });
    created(&*s, &req(&id, "alice", "park", 2)).await;
    assert!(matches!(s.refund(&o.order_id).await.unwrap(), TransitionOutcome::Invalid(_)));
    assert_invariants(&*s, &id).await;
}

pub async fn named_seats(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "seats", 10, 5, 4, &[]).await;
    let mut r = req(&id, "alice", "stalls", 2);
    r.seats = vec!["A-3".into(), "A-1".into()];
    r.refingerprint();
    let o = created(&*s, &r).await;
    let mut got = o.seats.clone();
    got.sort();
    assert_eq!(got, ["A-1", "A-3"]);
    assert_eq!(o.amount_cents, 136000);
    let mut taken = req(&id, "bob", "stalls", 1);
    taken.seats = vec!["A-3".into()];
    taken.refingerprint();
    assert_eq!(s.hold(&taken).await.unwrap(), HoldOutcome::SeatTaken("A-3".into()));
    let mut unknown = req(&id, "bob", "stalls", 1);
    unknown.seats = vec!["Z-9".into()];
    unknown.refingerprint();
    assert!(matches!(s.hold(&unknown).await.unwrap(), HoldOutcome::Rejected(_)));
    let mut twice = req(&id, "bob", "stalls", 2);
    twice.seats = vec!["A-2".into(), "A-2".into()];
    twice.refingerprint();
    assert!(matches!(s.hold(&twice).await.unwrap(), HoldOutcome::SeatTaken(_)));
    // First free ones, in the event's order.
    let first = created(&*s, &req(&id, "carol", "stalls", 1)).await;
    assert_eq!(first.seats, ["A-2"]);
    assert_eq!(created(&*s, &req(&id, "dave", "stalls", 1)).await.seats, ["A-4"]);
    assert_eq!(s.hold(&req(&id, "erin", "stalls", 1)).await.unwrap(), sold_out(0, 4, 0));
    s.close(&o.order_id, CloseReason::Cancelled).await.unwrap();
    assert_eq!(created(&*s, &req(&id, "erin", "stalls", 2)).await.seats, ["A-1", "A-3"]);
    assert_invariants(&*s, &id).await;
}

pub async fn event_updates(h: &dyn Harness) {
    let s = h.store();
    let id = event_id("update");
    let now = s.now_ms().await.unwrap();
    // Not open yet: stock may move freely.
    let mut sp = spec(now, 10, 5, 3, &[]);
    sp.opens_at = ts(now + 3_600_000);
    s.put_event(&id, &sp, false).await.unwrap();
    sp.pools[0].capacity = Some(20);
    assert_eq!(s.put_event(&id, &sp, false).await.unwrap(), PutEventOutcome::Updated);
    assert_eq!(pool(&*s, &id, "park").await.available, 20);
    assert_eq!(s.hold(&req(&id, "a", "park", 1)).await.unwrap(), HoldOutcome::NotOpen);
    // Open it; hold some.
    sp.opens_at = ts(now - 1000);
    assert_eq!(s.put_event(&id, &sp, false).await.unwrap(), PutEventOutcome::Updated);
    created(&*s, &req(&id, "a", "park", 4)).await;
    // Moving stock of an open sale needs force.
    sp.pools[0].capacity = Some(30);
    assert!(matches!(s.put_event(&id, &sp, false).await.unwrap(), PutEventOutcome::NeedsForce(_)));
    assert_eq!(pool(&*s, &id, "park").await.capacity, 20);
    assert_eq!(s.put_event(&id, &sp, true).await.unwrap(), PutEventOutcome::Updated);
    assert_eq!(pool(&*s, &id, "park").await, PoolStock { capacity: 30, available: 26, held: 4, sold: 0 });
    // Never below held + sold.
    sp.pools[0].capacity = Some(3);
    assert!(matches!(s.put_event(&id, &sp, true).await.unwrap(), PutEventOutcome::Rejected(_)));
    sp.pools[0].capacity = Some(4);
    assert_eq!(s.put_event(&id, &sp, true).await.unwrap(), PutEventOutcome::Updated);
    assert_eq!(pool(&*s, &id, "park").await, PoolStock { capacity: 4, available: 0, held: 4, sold: 0 });
    assert_eq!(s.hold(&req(&id, "b", "park", 1)).await.unwrap(), sold_out(0, 4, 0));
    // A change that moves no stock (a price) needs no force.
    sp.skus[0].price_cents = 90;
    assert_eq!(s.put_event(&id, &sp, false).await.unwrap(), PutEventOutcome::Updated);
    // A held seat cannot be removed.
    let o = created(&*s, &req(&id, "c", "stalls", 1)).await;
    sp.pools[2].seats = Some(vec!["A-2".into(), "A-3".into()]);
    assert_eq!(o.seats, ["A-1"]);
    assert!(matches!(s.put_event(&id, &sp, true).await.unwrap(), PutEventOutcome::Rejected(_)));
    sp.pools[2].seats = Some(vec!["A-1".into(), "A-2".into(), "A-3".into(), "A-4".into()]);
    assert_eq!(s.put_event(&id, &sp, true).await.unwrap(), PutEventOutcome::Updated);
    assert_eq!(pool(&*s, &id, "stalls").await, PoolStock { capacity: 4, available: 3, held: 1, sold: 0 });
    assert_invariants(&*s, &id).await;
}

pub async fn pause_and_window(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "pause", 10, 5, 3, &[]).await;
    assert!(s.set_paused(&id, true).await.unwrap());
    assert!(s.get_event(&id).await.unwrap().unwrap().paused);
    assert_eq!(s.hold(&req(&id, "a", "park", 1)).await.unwrap(), HoldOutcome::Paused);
    assert!(s.set_paused(&id, false).await.unwrap());
    created(&*s, &req(&id, "a", "park", 1)).await;
    assert!(!s.set_paused("no-such-event", true).await.unwrap());
    // Closed window.
    let id2 = event_id("closed");
    let now = s.now_ms().await.unwrap();
    let mut sp = spec(now, 10, 5, 3, &[]);
    sp.opens_at = ts(now - 7_200_000);
    sp.closes_at = ts(now - 3_600_000);
    s.put_event(&id2, &sp, false).await.unwrap();
    assert_eq!(s.hold(&req(&id2, "a", "park", 1)).await.unwrap(), HoldOutcome::NotOpen);
}

pub async fn outbox_is_ordered_and_paged(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "outbox", 100, 50, 3, &[]).await;
    let mut orders = Vec::new();
    for i in 0..5 {
        orders.push(created(&*s, &req(&id, &format!("u{i}"), "park", 1)).await);
    }
    s.pay(&pay_req(&orders[1], "t1")).await.unwrap();
    s.close(&orders[2].order_id, CloseReason::Cancelled).await.unwrap();
    let all = s.outbox(&id, None, 100).await.unwrap();
    assert_eq!(all.len(), 7);
    assert_eq!(all[5].kind, "paid");
    assert_eq!((all[5].state, all[5].version), (OrderState::Paid, 2));
    assert_eq!(all[6].kind, "cancelled");
    assert_eq!((all[6].state, all[6].version), (OrderState::Closed, 2));
    let cursors: Vec<&str> = all.iter().map(|e| e.cursor.as_str()).collect();
    let mut unique = cursors.clone();
    unique.dedup();
    assert_eq!(unique.len(), 7);
    // Paging from a cursor gives the rest, in order.
    let page1 = s.outbox(&id, None, 3).await.unwrap();
    assert_eq!(page1, all[..3]);
    let page2 = s.outbox(&id, Some(&page1[2].cursor), 3).await.unwrap();
    assert_eq!(page2, all[3..6]);
    let page3 = s.outbox(&id, Some(&page2[2].cursor), 3).await.unwrap();
    assert_eq!(page3, all[6..]);
    assert!(s.outbox(&id, Some(&all[6].cursor), 3).await.unwrap().is_empty());
}

pub async fn reconcile_reports(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "recon", 10, 5, 3, &[]).await;
    let a = created(&*s, &req(&id, "a", "park+zoo", 2)).await;
    created(&*s, &req(&id, "b", "stalls", 1)).await;
    s.pay(&pay_req(&a, "t")).await.unwrap();
    let rep = s.reconcile(&id).await.unwrap().unwrap();
    assert!(rep.ok, "{rep:?}");
    assert_eq!(rep.checks.len(), 9);
    assert!(s.reconcile("no-such-event").await.unwrap().is_none());
}

pub async fn lease(h: &dyn Harness) {
    let s = h.store();
    let name = event_id("lease");
    assert!(s.try_lease(&name, "a", 60_000).await.unwrap());
    assert!(!s.try_lease(&name, "b", 60_000).await.unwrap());
    assert!(s.try_lease(&name, "a", 60_000).await.unwrap());
    let short = event_id("lease");
    assert!(s.try_lease(&short, "a", 200).await.unwrap());
    h.advance_ms(300).await;
    assert!(s.try_lease(&short, "b", 200).await.unwrap());
}

/// `created_orders` walks every CREATED order (paged, maybe with repeats) and nothing else; a bad cursor is
/// an error, not a restart from the beginning.
pub async fn created_orders_are_paged(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "created", 50, 5, 3, &[]).await;
    let mut want = BTreeMap::new();
    let mut orders = Vec::new();
    for i in 0..7 {
        orders.push(created(&*s, &req(&id, &format!("u{i}"), "park", 1)).await);
    }
    assert!(matches!(s.pay(&pay_req(&orders[0], "t0")).await.unwrap(), PayOutcome::Paid(_)));
    assert!(matches!(s.close(&orders[1].order_id, CloseReason::Cancelled).await.unwrap(), TransitionOutcome::Done(_)));
    for o in &orders[2..] {
        want.insert(o.order_id.clone(), o.expires_at_ms);
    }
    let mut got = BTreeMap::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let (page, next) = s.created_orders(&id, cursor.as_deref(), 2).await.unwrap();
        got.extend(page);
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(got, want);
    assert_eq!(s.created_orders("no-such-event", None, 10).await.unwrap(), (vec![], None));
    assert!(s.created_orders(&id, Some("not a cursor"), 10).await.is_err());
}

// ---------------------------------------------------------------- concurrency

/// 64 tasks make 20,000 hold attempts against capacity 1,000: exactly 1,000 tickets held, no user over the
/// limit of 2.
pub async fn concurrent_holds_never_oversell(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "surge", 1000, 1, 1, &[(Dimension::User, 2)]).await;
    let mut tasks = Vec::new();
    for t in 0..64 {
        let s = s.clone();
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for i in 0..(20_000 / 64 + 1) {
                let user = format!("user-{}", (t * 1000 + i) % 700);
                let qty = 1 + (i % 2) as u32;
                if let HoldOutcome::Created(o) = s.hold(&req(&id, &user, "park", qty)).await.unwrap() {
                    won.push(o);
                }
            }
            won
        }));
    }
    let mut per_user: BTreeMap<String, u32> = BTreeMap::new();
    let mut total = 0;
    for t in tasks {
        for o in t.await.unwrap() {
            total += o.qty;
            *per_user.entry(o.user).or_default() += o.qty;
        }
    }
    assert_eq!(total, 1000);
    assert!(per_user.values().all(|&q| q <= 2), "a user over the limit");
    assert_eq!(pool(&*s, &id, "park").await, PoolStock { capacity: 1000, available: 0, held: 1000, sold: 0 });
    assert_invariants(&*s, &id).await;
}

/// `n` orders, each raced by a payment and a close at the same time: exactly one wins each race.
pub async fn pay_close_races(h: &dyn Harness, n: usize) {
    let s = h.store();
    let id = new_event(h, "paycl", n as u32, 1, 1, &[]).await;
    let mut orders = Vec::new();
    for i in 0..n {
        orders.push(created(&*s, &req(&id, &format!("u{i}"), "park", 1)).await);
    }
    let orders = Arc::new(orders);
    let workers = 16;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (s1, s2, o1, o2) = (s.clone(), s.clone(), orders.clone(), orders.clone());
        tasks.push(tokio::spawn(async move {
            let mut paid = HashSet::new();
            for o in o1.iter().skip(w).step_by(workers) {
                match s1.pay(&pay_req(o, "t")).await.unwrap() {
                    PayOutcome::Paid(_) => {
                        paid.insert(o.order_id.clone());
                    }
                    PayOutcome::RefundRequired(x) => assert_eq!(x.state, OrderState::Closed),
                    other => panic!("{other:?}"),
                }
            }
            (paid, true)
        }));
        tasks.push(tokio::spawn(async move {
            let mut closed = HashSet::new();
            for o in o2.iter().skip(w).step_by(workers) {
                match s2.close(&o.order_id, CloseReason::Cancelled).await.unwrap() {
                    TransitionOutcome::Done(_) => {
                        closed.insert(o.order_id.clone());
                    }
                    TransitionOutcome::Invalid(x) => assert_eq!(x.state, OrderState::Paid),
                    other => panic!("{other:?}"),
                }
            }
            (closed, false)
        }));
    }
    let (mut paid, mut closed) = (HashSet::new(), HashSet::new());
    for t in tasks {
        let (set, is_pay) = t.await.unwrap();
        if is_pay { paid.extend(set) } else { closed.extend(set) }
    }
    assert_eq!(paid.len() + closed.len(), n, "every order has exactly one outcome");
    assert!(paid.is_disjoint(&closed), "an order both paid and closed");
    let outbox = s.outbox(&id, None, 1000).await.unwrap();
    let mut refunds = 0;
    let mut after = outbox.last().map(|e| e.cursor.clone());
    let mut entries = outbox;
    while let Some(c) = after.clone() {
        let more = s.outbox(&id, Some(&c), 1000).await.unwrap();
        after = more.last().map(|e| e.cursor.clone());
        entries.extend(more);
    }
    for e in &entries {
        if e.kind == "refund_required" {
            refunds += 1;
            assert!(closed.contains(&e.order_id), "refund_required on an order that was not closed");
        }
    }
    for o in orders.iter() {
        let now = s.get_order(&o.order_id).await.unwrap().unwrap();
        if paid.contains(&o.order_id) {
            assert_eq!(now.state, OrderState::Paid, "PAID → CLOSED happened");
        } else {
            assert_eq!(now.state, OrderState::Closed);
        }
    }
    assert_eq!(refunds, closed.len(), "every late payment is recorded for refund");
    let p = pool(&*s, &id, "park").await;
    assert_eq!(p.sold as usize, paid.len());
    assert_eq!(p.available as usize, closed.len());
    assert_invariants(&*s, &id).await;
}

/// 32 tasks fight over 50 named seats, naming random ones: no seat is ever held by two live orders.
pub async fn seats_never_double_held(h: &dyn Harness) {
    let s = h.store();
    let id = new_event(h, "seatrace", 10, 1, 50, &[]).await;
    let mut tasks = Vec::new();
    for t in 0..32u64 {
        let s = s.clone();
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            let mut x = t * 7919 + 1;
            for i in 0..60 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let mut r = req(&id, &format!("u{t}-{i}"), "stalls", 2);
                let a = (x >> 33) % 50 + 1;
                let b = (x >> 40) % 50 + 1;
                if a == b {
                    continue;
                }
                r.seats = vec![format!("A-{a}"), format!("A-{b}")];
                r.refingerprint();
                if let HoldOutcome::Created(o) = s.hold(&r).await.unwrap() {
                    if i % 3 == 0 {
                        s.close(&o.order_id, CloseReason::Cancelled).await.unwrap();
                    } else {
                        won.push(o);
                    }
                }
            }
            won
        }));
    }
    let mut seen = HashSet::new();
    let mut count = 0;
    for t in tasks {
        for o in t.await.unwrap() {
            for seat in o.seats {
                count += 1;
                assert!(seen.insert(seat.clone()), "seat {seat} held twice");
            }
        }
    }
    assert_eq!(pool(&*s, &id, "stalls").await.held as usize, count);
    assert_invariants(&*s, &id).await;
}

#[macro_export]
macro_rules! conformance_suite {
    ($factory:path) => {
        conformance_suite!(@tests $factory;
            create_and_read_event, hold_creates_order, idempotent_replay_and_conflict, token_replay,
            limits_per_dimension, combo_all_or_nothing, qty_larger_than_stock_is_sold_out_without_flag,
            pay_paths, payment_after_close_is_refund_required, expiry_needs_the_deadline,
            paid_after_deadline_before_close_wins, redeem_per_pool, refund_returns_stock, named_seats,
            event_updates, pause_and_window, outbox_is_ordered_and_paged, reconcile_reports, lease,
            created_orders_are_paged, waitlist_is_first_for_tickets_that_come_back, the_waitlist_is_bounded,
            concurrent_holds_never_oversell, seats_never_double_held
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn pay_close_races_10k() {
            let h = $factory().await;
            conformance::pay_close_races(&h, 10_000).await;
        }
        #[test]
        fn property_random_operations() {
            conformance::model::run_property(|| {
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
                let h = rt.block_on($factory());
                (rt, Box::new(h) as Box<dyn conformance::Harness>)
            });
        }
    };
    (@tests $factory:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let h = $factory().await;
                conformance::$name(&h).await;
            }
        )*
    };
}

pub mod model;
