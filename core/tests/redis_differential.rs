//! Differential test: the same random operation sequences on the embedded store (the reference) and on
//! Redis give the same outcomes step by step, and the same stock, orders, outbox and reconciliation at the end.
//!
//! `cargo nextest run -p wicket-core --test redis_differential`
//! (`WICKET_DIFF_SEQS` / `WICKET_DIFF_OPS` change how many sequences and steps; the failing seed is printed.)


use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wicket_core::clock::ManualClock;
use wicket_core::model::*;
use wicket_core::store::SaleStore;
use wicket_core::store::embedded::EmbeddedStore;
use wicket_core::store::redis::RedisStore;

fn ts(ms: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).unwrap()
}

fn spec(now: i64, park: u32, seats: usize, limits: bool) -> EventSpec {
    EventSpec {
        name: "diff".into(),
        opens_at: ts(now - 3_600_000),
        closes_at: ts(now + 86_400_000),
        hold_seconds: 900,
        pools: vec![
            PoolSpec { id: "park".into(), capacity: Some(park), seats: None },
            PoolSpec { id: "zoo".into(), capacity: Some(4), seats: None },
            PoolSpec { id: "stalls".into(), capacity: None, seats: Some((1..=seats).map(|i| format!("A-{i}")).collect()) },
        ],
        skus: vec![
            SkuSpec { id: "park".into(), pools: vec!["park".into()], price_cents: 100, max_qty: None },
            SkuSpec { id: "park+zoo".into(), pools: vec!["park".into(), "zoo".into()], price_cents: 150, max_qty: Some(3) },
            SkuSpec { id: "stalls".into(), pools: vec!["stalls".into()], price_cents: 68000, max_qty: Some(4) },
        ],
        limits: if limits {
            vec![
                LimitSpec { dimension: Dimension::User, max: 5 },
                LimitSpec { dimension: Dimension::Phone, max: 6 },
            ]
        } else {
            vec![]
        },
    }
}

/// An order without the times (each store has its own clock).
fn norm(o: &Order) -> Order {
    Order { expires_at_ms: 0, created_at_ms: 0, ..o.clone() }
}

fn show_hold(r: HoldOutcome) -> String {
    match r {
        HoldOutcome::Created(o) => format!("Created({:?})", norm(&o)),
        HoldOutcome::Replay(o) => format!("Replay({:?})", norm(&o)),
        other => format!("{other:?}"),
    }
}

fn show_pay(r: PayOutcome) -> String {
    match r {
        PayOutcome::Paid(o) => format!("Paid({:?})", norm(&o)),
        PayOutcome::AlreadyPaid(o) => format!("AlreadyPaid({:?})", norm(&o)),
        PayOutcome::RefundRequired(o) => format!("RefundRequired({:?})", norm(&o)),
        other => format!("{other:?}"),
    }
}

fn show_tr(r: TransitionOutcome) -> String {
    match r {
        TransitionOutcome::Done(o) => format!("Done({:?})", norm(&o)),
        TransitionOutcome::Invalid(o) => format!("Invalid({:?})", norm(&o)),
        TransitionOutcome::NotDue(o) => format!("NotDue({:?})", norm(&o)),
        other => format!("{other:?}"),
    }
}

struct Gen {
    rng: StdRng,
    event: String,
    holds: Vec<HoldRequest>,
    orders: Vec<String>,
    n: u64,
}

impl Gen {
    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() { None } else { Some(&v[self.rng.random_range(0..v.len())]) }
    }

    fn new_hold(&mut self) -> HoldRequest {
        self.n += 1;
        let sku = if self.rng.random_bool(0.03) { "nope" } else { ["park", "park+zoo", "stalls"][self.rng.random_range(0..3)] };
        let qty = self.rng.random_range(0..5u32);
        let mut seats = Vec::new();
        if self.rng.random_bool(0.3) {
            for _ in 0..qty.max(1) {
                seats.push(if self.rng.random_bool(0.9) { format!("A-{}", self.rng.random_range(1..=6)) } else { "Z-9".into() });
            }
        }
        let identity = Identity {
            phone: self.rng.random_bool(0.9).then(|| format!("p{}", self.rng.random_range(0..3))),
            id_number: self.rng.random_bool(0.3).then(|| format!("id{}", self.rng.random_range(0..3))),
            device: None,
        };
        let mut r = HoldRequest {
            event: self.event.clone(),
            order_id: new_order_id(&self.event),
            sku: sku.into(),
            qty,
            seats,
            user: format!("u{}", self.rng.random_range(0..5)),
            identity,
            idempotency_key: format!("k{}", self.n),
            fingerprint: String::new(),
            jti: format!("j{}", self.n),
            jti_expires_ms: i64::MAX / 4,
            wait: self.rng.random_bool(0.5),
        };
        r.fingerprint = HoldRequest::fingerprint_of(&r.sku, r.qty, &r.identity, &r.seats);
        r
    }
}

async fn run_sequence(
    seed: u64,
    ops: usize,
    emb: &EmbeddedStore,
    red: &RedisStore,
    now: i64,
    seen: &mut std::collections::BTreeSet<String>,
) {
    let event = format!("diff-{}-{seed}", std::process::id());
    let limits = seed % 2 == 0;
    let sp = spec(now, 8, 5, limits);
    assert_eq!(emb.put_event(&event, &sp, false).await.unwrap(), red.put_event(&event, &sp, false).await.unwrap());
    let mut g = Gen { rng: StdRng::seed_from_u64(seed), event: event.clone(), holds: vec![], orders: vec![], n: 0 };
    for step in 0..ops {
        let choice = g.rng.random_range(0..100);
        let (what, a, b) = match choice {
            0..=34 => {
                let r = g.new_hold();
                let a = show_hold(emb.hold(&r).await.unwrap());
                let b = show_hold(red.hold(&r).await.unwrap());
                if a.starts_with("Created") {
                    g.orders.push(r.order_id.clone());
                }
                g.holds.push(r.clone());
                (format!("hold {r:?}"), a, b)
            }
            35..=42 => {
                // Replays: the same request, the same key with another body, or a used token with a new key.
                let Some(mut r) = g.pick(&g.holds.clone()).cloned() else { continue };
                match g.rng.random_range(0..3) {
                    0 => {}
                    1 => {
                        r.qty += 1;
                        r.fingerprint = HoldRequest::fingerprint_of(&r.sku, r.qty, &r.identity, &r.seats);
                    }
                    _ => {
                        r.idempotency_key = format!("fresh{step}");
                        r.order_id = new_order_id(&event);
                    }
                }
                let a = show_hold(emb.hold(&r).await.unwrap());
                let b = show_hold(red.hold(&r).await.unwrap());
                if a.starts_with("Created") {
                    g.orders.push(r.order_id.clone());
                }
                (format!("replay {r:?}"), a, b)
            }
            43..=62 => {
                let Some(o) = g.pick(&g.orders.clone()).cloned() else { continue };
                let Some(order) = emb.get_order(&o).await.unwrap() else { continue };
                let amount = if g.rng.random_bool(0.9) { order.amount_cents } else { order.amount_cents + 1 };
                let req = PaymentRequest { order_id: o.clone(), txn_id: format!("t{}", g.rng.random_range(0..2)), amount_cents: amount };
                (format!("pay {req:?}"), show_pay(emb.pay(&req).await.unwrap()), show_pay(red.pay(&req).await.unwrap()))
            }
            63..=74 => {
                let Some(o) = g.pick(&g.orders.clone()).cloned() else { continue };
                let reason = if g.rng.random_bool(0.8) { CloseReason::Cancelled } else { CloseReason::Expired };
                (
                    format!("close {o} {reason:?}"),
                    show_tr(emb.close(&o, reason).await.unwrap()),
                    show_tr(red.close(&o, reason).await.unwrap()),
                )
            }
            75..=82 => {
                let Some(o) = g.pick(&g.orders.clone()).cloned() else { continue };
                let pool = [None, Some("park"), Some("zoo"), Some("stalls"), Some("moon")][g.rng.random_range(0..5)];
                (
                    format!("redeem {o} {pool:?}"),
                    show_tr(emb.redeem(&o, pool).await.unwrap()),
                    show_tr(red.redeem(&o, pool).await.unwrap()),
                )
            }
            83..=88 => {
                let Some(o) = g.pick(&g.orders.clone()).cloned() else { continue };
                (format!("refund {o}"), show_tr(emb.refund(&o).await.unwrap()), show_tr(red.refund(&o).await.unwrap()))
            }
            89..=92 => {
                let p = g.rng.random_bool(0.5);
                (
                    format!("paused {p}"),
                    format!("{:?}", emb.set_paused(&event, p).await.unwrap()),
                    format!("{:?}", red.set_paused(&event, p).await.unwrap()),
                )
            }
            93..=96 => {
                let park = g.rng.random_range(0..14);
                let seats = g.rng.random_range(3..8);
                let force = g.rng.random_bool(0.7);
                let sp = spec(now, park, seats, limits);
                // The embedded store lists taken seats in hash order: compare the errors as sets.
                let sorted = |o: PutEventOutcome| match o {
                    PutEventOutcome::Rejected(mut e) => {
                        e.sort_by(|a, b| (&a.path, &a.message).cmp(&(&b.path, &b.message)));
                        format!("{:?}", PutEventOutcome::Rejected(e))
                    }
                    other => format!("{other:?}"),
                };
                (
                    format!("update park={park} seats={seats} force={force}"),
                    sorted(emb.put_event(&event, &sp, force).await.unwrap()),
                    sorted(red.put_event(&event, &sp, force).await.unwrap()),
                )
            }
            _ => (
                "stock".into(),
                format!("{:?}", emb.stock(&event).await.unwrap()),
                format!("{:?}", red.stock(&event).await.unwrap()),
            ),
        };
        assert_eq!(a, b, "seed {seed} step {step}: {what}");
        seen.insert(a.split(['(', ' ', '{']).next().unwrap_or("").to_string());
    }
    // The end state.
    assert_eq!(emb.stock(&event).await.unwrap(), red.stock(&event).await.unwrap(), "seed {seed}: final stock");
    let (ra, rb) = (emb.reconcile(&event).await.unwrap().unwrap(), red.reconcile(&event).await.unwrap().unwrap());
    assert_eq!(ra, rb, "seed {seed}: reconcile");
    assert!(ra.ok, "seed {seed}: {ra:?}");
    for o in &g.orders {
        let a = emb.get_order(o).await.unwrap().map(|o| norm(&o));
        let b = red.get_order(o).await.unwrap().map(|o| norm(&o));
        assert_eq!(a, b, "seed {seed}: order {o}");
    }
    let strip = |v: Vec<OutboxEntry>| -> Vec<OutboxEntry> {
        v.into_iter().map(|e| OutboxEntry { cursor: String::new(), at: 0, ..e }).collect()
    };
    let oa = strip(emb.outbox(&event, None, 1000).await.unwrap());
    let ob = strip(red.outbox(&event, None, 1000).await.unwrap());
    assert_eq!(oa, ob, "seed {seed}: outbox");
    assert_eq!(emb.due_holds(&event, 100).await.unwrap(), red.due_holds(&event, 100).await.unwrap());
    assert_eq!(
        emb.get_event(&event).await.unwrap().map(|e| (e.spec, e.paused)),
        red.get_event(&event).await.unwrap().map(|e| (e.spec, e.paused))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_and_redis_agree_on_random_sequences() {
    let server = wicket_testkit::RedisServer::start();
    let red = RedisStore::connect(&server.url()).await.unwrap();
    let now = red.now_ms().await.unwrap();
    let clock = Arc::new(ManualClock::new(now));
    let emb = EmbeddedStore::with_clock(clock.clone());
    let seqs: u64 = std::env::var("WICKET_DIFF_SEQS").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let ops: usize = std::env::var("WICKET_DIFF_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..seqs {
        run_sequence(seed, ops, &emb, &red, now, &mut seen).await;
    }
    // The sequences reached every outcome (a generator that stopped doing so would make this test vacuous).
    for outcome in [
        "Created", "Replay", "IdemConflict", "TokenReplay", "SoldOut", "LimitExceeded", "SeatTaken", "Rejected",
        "Paused", "Paid", "AlreadyPaid", "RefundRequired", "AmountMismatch", "Done", "Invalid", "NotDue",
        "UnknownPool", "NeedsForce", "Updated",
    ] {
        if seqs >= 40 {
            assert!(seen.contains(outcome), "no sequence reached {outcome}: {seen:?}");
        }
    }
    assert_eq!(emb.list_events().await.unwrap(), red.list_events().await.unwrap());

    // Expiry, which the sequences above never reach (900 s holds): 1 s holds, both clocks moved past the
    // deadlines, then the sweeper's two calls.
    let event = format!("diff-exp-{}", std::process::id());
    let mut sp = spec(now, 8, 5, false);
    sp.hold_seconds = 1;
    assert_eq!(emb.put_event(&event, &sp, false).await.unwrap(), red.put_event(&event, &sp, false).await.unwrap());
    let mut g = Gen { rng: StdRng::seed_from_u64(7), event: event.clone(), holds: vec![], orders: vec![], n: 0 };
    for i in 0..6 {
        let mut r = g.new_hold();
        (r.sku, r.qty, r.seats) = (["park", "park+zoo", "stalls"][i % 3].into(), 1, vec![]);
        r.fingerprint = HoldRequest::fingerprint_of(&r.sku, r.qty, &r.identity, &r.seats);
        assert_eq!(show_hold(emb.hold(&r).await.unwrap()), show_hold(red.hold(&r).await.unwrap()));
        g.orders.push(r.order_id.clone());
    }
    let paid = PaymentRequest { order_id: g.orders[1].clone(), txn_id: "t".into(), amount_cents: 150 };
    assert_eq!(show_pay(emb.pay(&paid).await.unwrap()), show_pay(red.pay(&paid).await.unwrap()));
    let early = show_tr(emb.close(&g.orders[0], CloseReason::Expired).await.unwrap());
    assert!(early.starts_with("NotDue"), "{early}");
    assert_eq!(early, show_tr(red.close(&g.orders[0], CloseReason::Expired).await.unwrap()));
    assert!(red.due_holds(&event, 10).await.unwrap().is_empty());
    clock.advance_ms(1_100);
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let ids = |v: Vec<(String, i64)>| -> Vec<String> { v.into_iter().map(|(id, _)| id).collect() };
    let due = ids(emb.due_holds(&event, 10).await.unwrap());
    assert_eq!(due.len(), 5, "every unpaid hold is due");
    // Ties of deadline are broken by order id on both, but the two clocks group holds into milliseconds
    // differently: compare as sets, and check Redis's own order.
    let red_due = red.due_holds(&event, 10).await.unwrap();
    assert!(red_due.windows(2).all(|w| (w[0].1, &w[0].0) <= (w[1].1, &w[1].0)), "oldest first: {red_due:?}");
    let red_due = ids(red_due);
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(sorted(due.clone()), sorted(red_due.clone()), "the same holds are due");
    assert_eq!(ids(red.due_holds(&event, 2).await.unwrap()), red_due[..2].to_vec());
    for o in &due {
        let a = show_tr(emb.close(o, CloseReason::Expired).await.unwrap());
        assert!(a.starts_with("Done"), "{a}");
        assert_eq!(a, show_tr(red.close(o, CloseReason::Expired).await.unwrap()));
    }
    assert!(red.due_holds(&event, 10).await.unwrap().is_empty());
    let late = PaymentRequest { order_id: g.orders[0].clone(), txn_id: "late".into(), amount_cents: 100 };
    assert_eq!(show_pay(emb.pay(&late).await.unwrap()), show_pay(red.pay(&late).await.unwrap()));
    assert_eq!(emb.stock(&event).await.unwrap(), red.stock(&event).await.unwrap());
    let kinds = |v: Vec<OutboxEntry>| -> Vec<(String, String)> { v.into_iter().map(|e| (e.order_id, e.kind)).collect() };
    assert_eq!(kinds(emb.outbox(&event, None, 100).await.unwrap()), kinds(red.outbox(&event, None, 100).await.unwrap()));
}

/// The same on a 3-master Redis Cluster (fewer sequences: the code path differs only in the connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_and_redis_cluster_agree() {
    let cluster = wicket_testkit::RedisCluster::start(3);
    let red = RedisStore::connect_cluster(&cluster.seeds()).await.unwrap();
    let now = red.now_ms().await.unwrap();
    let emb = EmbeddedStore::with_clock(Arc::new(ManualClock::new(now)));
    let mut seen = std::collections::BTreeSet::new();
    for seed in 100..110 {
        run_sequence(seed, 200, &emb, &red, now, &mut seen).await;
    }
    assert_eq!(emb.list_events().await.unwrap(), red.list_events().await.unwrap());
}
