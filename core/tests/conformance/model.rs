//! A property test: random operation sequences against a small reference model of the sale, checking the
//! outcome of every step, the stock after every step, and the invariants.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use wicket_core::model::*;

use super::{Harness, Refingerprint, assert_invariants, event_id, req};

const POOLS: [&str; 3] = ["park", "zoo", "stalls"];
const SKUS: [(&str, &[usize], u64); 3] = [("park", &[0], 100), ("park+zoo", &[0, 1], 150), ("stalls", &[2], 68000)];
const CAPACITY: [u64; 3] = [5, 3, 4];
const USER_MAX: u64 = 3;
const PHONE_MAX: u64 = 4;
const HOLD_MS: i64 = 900_000;

#[derive(Debug, Clone)]
pub enum Op {
    Hold { user: u8, phone: u8, sku: usize, qty: u32 },
    Replay { order: usize },
    Pay { order: usize, txn: u8, good_amount: bool },
    Cancel { order: usize },
    Expire { order: usize },
    Redeem { order: usize, pool: Option<usize> },
    Refund { order: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u8..3, 0usize..3, 1u32..4).prop_map(|(user, phone, sku, qty)| Op::Hold { user, phone, sku, qty }),
        1 => any::<usize>().prop_map(|order| Op::Replay { order }),
        3 => (any::<usize>(), 0u8..2, prop::bool::weighted(0.85)).prop_map(|(order, txn, good_amount)| Op::Pay { order, txn, good_amount }),
        2 => any::<usize>().prop_map(|order| Op::Cancel { order }),
        1 => any::<usize>().prop_map(|order| Op::Expire { order }),
        2 => (any::<usize>(), prop::option::of(0usize..3)).prop_map(|(order, pool)| Op::Redeem { order, pool }),
        1 => any::<usize>().prop_map(|order| Op::Refund { order }),
    ]
}

#[derive(Debug, Clone)]
struct MOrder {
    req: HoldRequest,
    user: String,
    phone: String,
    pools: Vec<usize>,
    seats: Vec<usize>,
    qty: u64,
    amount: u64,
    state: OrderState,
    version: u64,
    deadline: i64,
    redeemed: Vec<usize>,
    txns: HashMap<u8, &'static str>,
}

#[derive(Debug, Default)]
struct Model {
    now: i64,
    available: [u64; 3],
    held: [u64; 3],
    sold: [u64; 3],
    free_seats: std::collections::BTreeSet<usize>,
    usage: HashMap<String, u64>,
    orders: Vec<MOrder>,
}

impl Model {
    fn give_back(&mut self, i: usize, from_sold: bool) {
        let o = self.orders[i].clone();
        for &p in &o.pools {
            if from_sold { self.sold[p] -= o.qty } else { self.held[p] -= o.qty }
            self.available[p] += o.qty;
        }
        self.free_seats.extend(o.seats.iter().copied());
        *self.usage.get_mut(&format!("u:{}", o.user)).unwrap() -= o.qty;
        *self.usage.get_mut(&format!("p:{}", o.phone)).unwrap() -= o.qty;
    }
}

fn summary_hold(o: &HoldOutcome) -> String {
    match o {
        HoldOutcome::Created(o) => format!("created:{}:{}:{:?}", o.qty, o.amount_cents, o.seats),
        HoldOutcome::Replay(o) => format!("replay:{}:{}", o.state.as_str(), o.version),
        HoldOutcome::LimitExceeded(d) => format!("limit:{}", d.as_str()),
        other => format!("{other:?}"),
    }
}

fn summary_transition(o: &TransitionOutcome) -> String {
    match o {
        TransitionOutcome::Done(o) => format!("done:{}:{}:{}", o.state.as_str(), o.version, o.redeemed_pools.len()),
        TransitionOutcome::Invalid(o) => format!("invalid:{}", o.state.as_str()),
        TransitionOutcome::NotDue(_) => "not_due".into(),
        TransitionOutcome::UnknownPool => "unknown_pool".into(),
        TransitionOutcome::NotFound => "not_found".into(),
    }
}

fn summary_pay(o: &PayOutcome) -> String {
    match o {
        PayOutcome::Paid(o) => format!("paid:{}", o.version),
        PayOutcome::AlreadyPaid(o) => format!("already_paid:{}", o.state.as_str()),
        PayOutcome::RefundRequired(o) => format!("refund_required:{}", o.state.as_str()),
        PayOutcome::AmountMismatch { expected } => format!("amount_mismatch:{expected}"),
        PayOutcome::NotFound => "not_found".into(),
    }
}

/// Applies `op` to the model and returns the expected summary (None: the op does not apply).
fn expect(m: &mut Model, op: &Op, cheap_time: bool, event: &str) -> Option<(String, Option<HoldRequest>)> {
    let n = m.orders.len();
    let pick = |i: usize| if n == 0 { None } else { Some(i % n) };
    Some(match *op {
        Op::Hold { user, phone, sku, qty } => {
            let (sku_id, pools, price) = SKUS[sku];
            let user = format!("user{user}");
            let phone = format!("phone{phone}");
            let mut r = req(event, &user, sku_id, qty);
            r.identity.phone = Some(phone.clone());
            r.refingerprint();
            let q = qty as u64;
            let out = if m.usage.get(&format!("u:{user}")).copied().unwrap_or(0) + q > USER_MAX {
                "limit:user".to_string()
            } else if m.usage.get(&format!("p:{phone}")).copied().unwrap_or(0) + q > PHONE_MAX {
                "limit:phone".to_string()
            } else if pools.iter().any(|&p| m.available[p] < q) {
                // No hold here asks to wait: what is left, and the unpaid holds of the short pools.
                let left = pools.iter().map(|&p| m.available[p]).min().unwrap_or(0).min(q);
                let returning = pools.iter().filter(|&&p| m.available[p] < q).map(|&p| m.held[p]).min().unwrap_or(0);
                format!("{:?}", HoldOutcome::SoldOut(SoldOut { left, returning, ahead: 0, listed: false }))
            } else {
                let seats: Vec<usize> =
                    if pools.contains(&2) { m.free_seats.iter().take(qty as usize).copied().collect() } else { vec![] };
                for s in &seats {
                    m.free_seats.remove(s);
                }
                for &p in pools {
                    m.available[p] -= q;
                    m.held[p] += q;
                }
                *m.usage.entry(format!("u:{user}")).or_default() += q;
                *m.usage.entry(format!("p:{phone}")).or_default() += q;
                let names: Vec<String> = seats.iter().map(|s| format!("A-{}", s + 1)).collect();
                m.orders.push(MOrder {
                    req: r.clone(),
                    user,
                    phone,
                    pools: pools.to_vec(),
                    seats,
                    qty: q,
                    amount: price * q,
                    state: OrderState::Created,
                    version: 1,
                    deadline: m.now + HOLD_MS,
                    redeemed: vec![],
                    txns: HashMap::new(),
                });
                format!("created:{qty}:{}:{names:?}", price * q)
            };
            (out, Some(r))
        }
        Op::Replay { order } => {
            let o = &m.orders[pick(order)?];
            let mut r = o.req.clone();
            r.order_id = new_order_id(event);
            r.jti = format!("{}-again", r.jti);
            (format!("replay:{}:{}", o.state.as_str(), o.version), Some(r))
        }
        Op::Pay { order, txn, good_amount } => {
            let i = pick(order)?;
            let o = &mut m.orders[i];
            if let Some(seen) = o.txns.get(&txn) {
                let kind = *seen;
                return Some((format!("{kind}:{}", o.state.as_str()), None));
            }
            if !good_amount {
                return Some((format!("amount_mismatch:{}", o.amount), None));
            }
            if o.state != OrderState::Created {
                o.txns.insert(txn, "refund_required");
                return Some((format!("refund_required:{}", o.state.as_str()), None));
            }
            o.txns.insert(txn, "already_paid");
            o.state = OrderState::Paid;
            o.version += 1;
            let (pools, qty, v) = (o.pools.clone(), o.qty, o.version);
            for p in pools {
                m.held[p] -= qty;
                m.sold[p] += qty;
            }
            (format!("paid:{v}"), None)
        }
        Op::Cancel { order } | Op::Expire { order } => {
            let i = pick(order)?;
            let expire = matches!(op, Op::Expire { .. });
            if expire && cheap_time {
                m.now += HOLD_MS + 1000;
            }
            let o = &m.orders[i];
            if o.state != OrderState::Created {
                return Some((format!("invalid:{}", o.state.as_str()), None));
            }
            if expire && m.now < o.deadline {
                return Some(("not_due".into(), None));
            }
            m.give_back(i, false);
            let o = &mut m.orders[i];
            o.state = OrderState::Closed;
            o.version += 1;
            (format!("done:CLOSED:{}:0", o.version), None)
        }
        Op::Redeem { order, pool } => {
            let o = &mut m.orders[pick(order)?];
            if let Some(p) = pool
                && !o.pools.contains(&p)
            {
                return Some(("unknown_pool".into(), None));
            }
            if o.state != OrderState::Paid || pool.is_some_and(|p| o.redeemed.contains(&p)) {
                return Some((format!("invalid:{}", o.state.as_str()), None));
            }
            match pool {
                Some(p) => o.redeemed.push(p),
                None => {
                    let rest: Vec<usize> = o.pools.iter().filter(|p| !o.redeemed.contains(p)).copied().collect();
                    o.redeemed.extend(rest);
                }
            }
            o.version += 1;
            if o.pools.iter().all(|p| o.redeemed.contains(p)) {
                o.state = OrderState::Used;
            }
            (format!("done:{}:{}:{}", o.state.as_str(), o.version, o.redeemed.len()), None)
        }
        Op::Refund { order } => {
            let i = pick(order)?;
            let o = &m.orders[i];
            if o.state != OrderState::Paid || !o.redeemed.is_empty() {
                return Some((format!("invalid:{}", o.state.as_str()), None));
            }
            m.give_back(i, true);
            let o = &mut m.orders[i];
            o.state = OrderState::Refunded;
            o.version += 1;
            (format!("done:REFUNDED:{}:0", o.version), None)
        }
    })
}

async fn apply(h: &dyn Harness, m: &Model, op: &Op, hold: Option<HoldRequest>, cheap_time: bool) -> String {
    let s = h.store();
    let n = m.orders.len();
    let id_of = |i: usize| m.orders[i % n].req.order_id.clone();
    match *op {
        Op::Hold { .. } | Op::Replay { .. } => summary_hold(&s.hold(&hold.expect("hold request")).await.unwrap()),
        Op::Pay { order, txn, good_amount } => {
            let o = &m.orders[order % n];
            let amount = if good_amount { o.amount } else { o.amount + 1 };
            let r = PaymentRequest { order_id: o.req.order_id.clone(), txn_id: format!("txn-{txn}"), amount_cents: amount };
            summary_pay(&s.pay(&r).await.unwrap())
        }
        Op::Cancel { order } => summary_transition(&s.close(&id_of(order), CloseReason::Cancelled).await.unwrap()),
        Op::Expire { order } => {
            if cheap_time {
                h.advance_ms(HOLD_MS + 1000).await;
            }
            summary_transition(&s.close(&id_of(order), CloseReason::Expired).await.unwrap())
        }
        Op::Redeem { order, pool } => {
            summary_transition(&s.redeem(&id_of(order), pool.map(|p| POOLS[p])).await.unwrap())
        }
        Op::Refund { order } => summary_transition(&s.refund(&id_of(order)).await.unwrap()),
    }
}

async fn run_case(h: &dyn Harness, ops: &[Op]) -> Result<(), TestCaseError> {
    let s = h.store();
    let event = event_id("prop");
    let now = s.now_ms().await.unwrap();
    let mut spec = super::spec(now, CAPACITY[0] as u32, CAPACITY[1] as u32, CAPACITY[2] as usize, &[
        (Dimension::User, USER_MAX as u32),
        (Dimension::Phone, PHONE_MAX as u32),
    ]);
    spec.closes_at += time::Duration::days(1000);
    s.put_event(&event, &spec, false).await.unwrap();
    let cheap = h.cheap_time();
    let mut m = Model { now, available: CAPACITY, free_seats: (0..4).collect(), ..Default::default() };
    for (step, op) in ops.iter().enumerate() {
        let Some((want, hold)) = expect(&mut m, op, cheap, &event) else { continue };
        // Only holds add orders, and a hold carries its request: order indexes mean the same on both sides.
        let got = apply(h, &m, op, hold, cheap).await;
        prop_assert_eq!(&got, &want, "step {}: {:?}", step, op);
        let stock = s.stock(&event).await.unwrap().unwrap();
        for (i, p) in POOLS.iter().enumerate() {
            let got = stock.pools[*p];
            prop_assert_eq!(
                (got.available, got.held, got.sold),
                (m.available[i], m.held[i], m.sold[i]),
                "pool {} after step {}: {:?}", p, step, op
            );
        }
        assert_invariants(&*s, &event).await;
    }
    Ok(())
}

/// Runs the property over 64 random sequences of up to 60 operations.
pub fn run_property(make: impl Fn() -> (tokio::runtime::Runtime, Box<dyn Harness>)) {
    let (rt, h) = make();
    let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
    runner
        .run(&prop::collection::vec(op(), 1..60), |ops| rt.block_on(run_case(&*h, &ops)))
        .unwrap();
}
