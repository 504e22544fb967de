//! The embedded store: all sale state in this process, behind one mutex.
//!
//! A `parking_lot::Mutex` rather than a Tokio one: every operation is a few map lookups that never await, so
//! holding it across an `.await` can't happen and an uncontended lock costs tens of nanoseconds. One lock over
//! everything makes each operation trivially atomic (the property the Redis store gets from Lua).
//! Each operation does every check before its first write, so an early return leaves nothing half-done.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{MAX_OUTBOX_PAGE, SaleStore, StoreError};
use crate::clock::{Clock, SystemClock};
use crate::model::{
    CloseReason, Dimension, EventRecord, EventSpec, FieldError, HoldOutcome, HoldRequest, Order, OrderState,
    OutboxEntry, PayOutcome, PaymentRequest, PoolStock, PutEventOutcome, ReconcileReport, SkuStock, StockView,
    TransitionOutcome, event_of_order, reconcile_from,
};

/// In-process [`SaleStore`].
pub struct EmbeddedStore {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

#[derive(Default)]
struct State {
    events: BTreeMap<String, EventState>,
    leases: HashMap<String, (String, i64)>,
}

struct EventState {
    spec: EventSpec,
    paused: bool,
    pools: BTreeMap<String, PoolState>,
    orders: HashMap<String, Order>,
    /// CREATED orders by deadline: what the sweeper walks.
    deadlines: BTreeSet<(i64, String)>,
    /// `user \n key` → (fingerprint, order id).
    idem: HashMap<String, (String, String)>,
    /// Consumed jtis and when they may be forgotten; `jti_expiry` orders them for pruning.
    jtis: HashMap<String, i64>,
    jti_expiry: BTreeSet<(i64, String)>,
    /// Tickets counted per (dimension, value), over CREATED + PAID + USED orders.
    usage: HashMap<(Dimension, String), u64>,
    /// `order \n txn` pairs already applied, so a repeated callback answers the same.
    txns: HashMap<String, TxnResult>,
    outbox: Vec<OutboxEntry>,
    /// Last outbox id, as a Redis stream id (`ms-seq`), so cursors look the same on both stores.
    last_id: (i64, u64),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TxnResult {
    Paid,
    RefundRequired,
}

#[derive(Default)]
struct PoolState {
    capacity: u64,
    available: u64,
    held: u64,
    sold: u64,
    seats: Option<Seats>,
}

/// Named seats of a pool: their order in the event body, and which live order holds each.
#[derive(Default)]
struct Seats {
    names: Vec<String>,
    index: HashMap<String, usize>,
    free: BTreeSet<usize>,
    taken: HashMap<usize, String>,
}

impl Seats {
    fn build(names: &[String], taken_by_name: &HashMap<String, String>) -> Seats {
        let mut s = Seats { names: names.to_vec(), ..Default::default() };
        for (i, n) in names.iter().enumerate() {
            s.index.insert(n.clone(), i);
            match taken_by_name.get(n) {
                Some(order) => {
                    s.taken.insert(i, order.clone());
                }
                None => {
                    s.free.insert(i);
                }
            }
        }
        s
    }

    fn taken_by_name(&self) -> HashMap<String, String> {
        self.taken.iter().map(|(i, o)| (self.names[*i].clone(), o.clone())).collect()
    }
}

impl Default for EmbeddedStore {
    fn default() -> Self {
        Self::new()
    }
}

impl EmbeddedStore {
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        EmbeddedStore { state: Mutex::new(State::default()), clock }
    }

    /// Fault injection for tests of the reconciler: moves a pool's `available` counter by `delta` without
    /// any order, as a bug or a hand edit would.
    #[doc(hidden)]
    pub fn tamper_available(&self, event: &str, pool: &str, delta: i64) {
        let mut st = self.state.lock();
        if let Some(p) = st.events.get_mut(event).and_then(|e| e.pools.get_mut(pool)) {
            p.available = p.available.saturating_add_signed(delta);
        }
    }
}

impl EventState {
    fn new(spec: EventSpec) -> EventState {
        let mut pools = BTreeMap::new();
        for p in &spec.pools {
            let cap = p.capacity() as u64;
            pools.insert(
                p.id.clone(),
                PoolState {
                    capacity: cap,
                    available: cap,
                    held: 0,
                    sold: 0,
                    seats: p.seats.as_ref().map(|names| Seats::build(names, &HashMap::new())),
                },
            );
        }
        EventState {
            spec,
            paused: false,
            pools,
            orders: HashMap::new(),
            deadlines: BTreeSet::new(),
            idem: HashMap::new(),
            jtis: HashMap::new(),
            jti_expiry: BTreeSet::new(),
            usage: HashMap::new(),
            txns: HashMap::new(),
            outbox: Vec::new(),
            last_id: (0, 0),
        }
    }

    fn append(&mut self, now: i64, order: &Order, kind: &str, txn: Option<&str>, amount: Option<u64>, pool: Option<&str>) {
        let (ms, seq) = self.last_id;
        self.last_id = if now > ms { (now, 0) } else { (ms, seq + 1) };
        self.outbox.push(OutboxEntry {
            cursor: format!("{}-{}", self.last_id.0, self.last_id.1),
            order_id: order.order_id.clone(),
            state: order.state,
            version: order.version,
            at: now,
            kind: kind.to_string(),
            txn_id: txn.map(str::to_string),
            amount_cents: amount,
            pool: pool.map(str::to_string),
        });
    }

    fn stock(&self) -> StockView {
        let mut view = StockView::default();
        for (id, p) in &self.pools {
            view.pools.insert(
                id.clone(),
                PoolStock { capacity: p.capacity, available: p.available, held: p.held, sold: p.sold },
            );
        }
        for sku in &self.spec.skus {
            let available = sku.pools.iter().filter_map(|p| self.pools.get(p)).map(|p| p.available).min().unwrap_or(0);
            view.skus.insert(sku.id.clone(), SkuStock { available, sold_out: available == 0 });
        }
        view
    }

    /// Gives back an order's tickets: counters from `held` or `sold`, seats freed, limit usage returned.
    fn release(&mut self, order: &Order, from_sold: bool) {
        let qty = order.qty as u64;
        for pid in &order.pools {
            if let Some(p) = self.pools.get_mut(pid) {
                if from_sold {
                    p.sold -= qty.min(p.sold);
                } else {
                    p.held -= qty.min(p.held);
                }
                p.available += qty;
                if let Some(seats) = p.seats.as_mut() {
                    for name in &order.seats {
                        if let Some(&i) = seats.index.get(name)
                            && seats.taken.get(&i) == Some(&order.order_id)
                        {
                            seats.taken.remove(&i);
                            seats.free.insert(i);
                        }
                    }
                }
            }
        }
        for (d, v) in order_dimensions(order) {
            if let Some(u) = self.usage.get_mut(&(d, v.clone())) {
                *u -= qty.min(*u);
                if *u == 0 {
                    self.usage.remove(&(d, v));
                }
            }
        }
    }

    fn prune_jtis(&mut self, now: i64) {
        while let Some((exp, _)) = self.jti_expiry.first() {
            if *exp > now {
                break;
            }
            if let Some((_, jti)) = self.jti_expiry.pop_first() {
                self.jtis.remove(&jti);
            }
        }
    }
}

/// The (dimension, value) pairs an order counts against.
fn order_dimensions(order: &Order) -> Vec<(Dimension, String)> {
    let mut v = vec![(Dimension::User, order.user.clone())];
    if let Some(x) = &order.identity.phone {
        v.push((Dimension::Phone, x.clone()));
    }
    if let Some(x) = &order.identity.id_number {
        v.push((Dimension::IdNumber, x.clone()));
    }
    if let Some(x) = &order.identity.device {
        v.push((Dimension::Device, x.clone()));
    }
    v
}

/// Plans an update of an existing event: the new pool states, or what makes it impossible.
/// Returns (new pools, whether stock moves).
fn plan_update(ev: &EventState, spec: &EventSpec) -> Result<(BTreeMap<String, PoolState>, bool), Vec<FieldError>> {
    let mut errs = Vec::new();
    let mut moves = false;
    let mut pools = BTreeMap::new();
    for (i, p) in spec.pools.iter().enumerate() {
        let new_cap = p.capacity() as u64;
        match ev.pools.get(&p.id) {
            None => {
                moves = true;
                pools.insert(
                    p.id.clone(),
                    PoolState {
                        capacity: new_cap,
                        available: new_cap,
                        seats: p.seats.as_ref().map(|n| Seats::build(n, &HashMap::new())),
                        ..Default::default()
                    },
                );
            }
            Some(old) => {
                let used = old.held + old.sold;
                if old.seats.is_some() != p.is_seated() && used > 0 {
                    errs.push(FieldError {
                        path: format!("pools[{i}]"),
                        message: "cannot switch between capacity and seats while tickets are held or sold".into(),
                    });
                    continue;
                }
                let taken = old.seats.as_ref().map(Seats::taken_by_name).unwrap_or_default();
                if let Some(names) = &p.seats {
                    let keep: std::collections::HashSet<&String> = names.iter().collect();
                    let mut removed: Vec<&String> = taken.keys().filter(|n| !keep.contains(n)).collect();
                    removed.sort_by_key(|n| old.seats.as_ref().and_then(|s| s.index.get(*n).copied()));
                    for name in removed {
                        errs.push(FieldError {
                            path: format!("pools[{i}].seats"),
                            message: format!("seat {name} is held or sold and cannot be removed"),
                        });
                    }
                    let old_names: Option<&Vec<String>> = old.seats.as_ref().map(|s| &s.names);
                    if old_names != Some(names) {
                        moves = true;
                    }
                } else if new_cap < used {
                    errs.push(FieldError {
                        path: format!("pools[{i}].capacity"),
                        message: format!("cannot be lowered below held + sold ({used})"),
                    });
                    continue;
                }
                if new_cap != old.capacity {
                    moves = true;
                }
                pools.insert(
                    p.id.clone(),
                    PoolState {
                        capacity: new_cap,
                        available: new_cap.saturating_sub(used),
                        held: old.held,
                        sold: old.sold,
                        seats: p.seats.as_ref().map(|n| Seats::build(n, &taken)),
                    },
                );
            }
        }
    }
    for (id, old) in &ev.pools {
        if spec.pool(id).is_none() {
            moves = true;
            if old.held + old.sold > 0 {
                errs.push(FieldError {
                    path: "pools".into(),
                    message: format!("pool {id} has held or sold tickets and cannot be removed"),
                });
            }
        }
    }
    if errs.is_empty() { Ok((pools, moves)) } else { Err(errs) }
}

#[async_trait]
impl SaleStore for EmbeddedStore {
    async fn now_ms(&self) -> Result<i64, StoreError> {
        Ok(self.clock.now_ms())
    }

    async fn put_event(&self, id: &str, spec: &EventSpec, force: bool) -> Result<PutEventOutcome, StoreError> {
        let now = self.clock.now_ms();
        let mut st = self.state.lock();
        let Some(ev) = st.events.get_mut(id) else {
            st.events.insert(id.to_string(), EventState::new(spec.clone()));
            return Ok(PutEventOutcome::Created);
        };
        let (pools, moves) = match plan_update(ev, spec) {
            Ok(plan) => plan,
            Err(errs) => return Ok(PutEventOutcome::Rejected(errs)),
        };
        if moves && now >= ev.spec.opens_at_ms() && !force {
            return Ok(PutEventOutcome::NeedsForce(
                "the sale is open: a change that moves stock needs ?force=true".into(),
            ));
        }
        ev.pools = pools;
        ev.spec = spec.clone();
        Ok(PutEventOutcome::Updated)
    }

    async fn get_event(&self, id: &str) -> Result<Option<EventRecord>, StoreError> {
        let st = self.state.lock();
        Ok(st.events.get(id).map(|e| EventRecord { id: id.to_string(), spec: e.spec.clone(), paused: e.paused }))
    }

    async fn list_events(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.state.lock().events.keys().cloned().collect())
    }

    async fn set_paused(&self, id: &str, paused: bool) -> Result<bool, StoreError> {
        let mut st = self.state.lock();
        Ok(match st.events.get_mut(id) {
            Some(e) => {
                e.paused = paused;
                true
            }
            None => false,
        })
    }

    async fn stock(&self, id: &str) -> Result<Option<StockView>, StoreError> {
        Ok(self.state.lock().events.get(id).map(EventState::stock))
    }

    async fn hold(&self, req: &HoldRequest) -> Result<HoldOutcome, StoreError> {
        let now = self.clock.now_ms();
        let mut st = self.state.lock();
        let Some(ev) = st.events.get_mut(&req.event) else {
            return Ok(HoldOutcome::NotFound);
        };
        // Reads and checks.
        let idem_key = format!("{}\n{}", req.user, req.idempotency_key);
        if let Some((fp, order_id)) = ev.idem.get(&idem_key) {
            if *fp != req.fingerprint {
                return Ok(HoldOutcome::IdemConflict);
            }
            return Ok(match ev.orders.get(order_id) {
                Some(o) => HoldOutcome::Replay(o.clone()),
                None => HoldOutcome::IdemConflict,
            });
        }
        if now < ev.spec.opens_at_ms() || now >= ev.spec.closes_at_ms() {
            return Ok(HoldOutcome::NotOpen);
        }
        if ev.paused {
            return Ok(HoldOutcome::Paused);
        }
        ev.prune_jtis(now);
        if ev.jtis.contains_key(&req.jti) {
            return Ok(HoldOutcome::TokenReplay);
        }
        let Some(sku) = ev.spec.sku(&req.sku).cloned() else {
            return Ok(HoldOutcome::Rejected(format!("unknown sku {}", req.sku)));
        };
        if req.qty == 0 || req.qty > sku.max_qty() {
            return Ok(HoldOutcome::Rejected(format!("qty must be 1..={}", sku.max_qty())));
        }
        let qty = req.qty as u64;
        for limit in &ev.spec.limits {
            let Some(value) = req.dimension_value(limit.dimension) else {
                return Ok(HoldOutcome::Rejected(format!(
                    "the event limits {} but the hold carries none",
                    limit.dimension.as_str()
                )));
            };
            let used = ev.usage.get(&(limit.dimension, value.to_string())).copied().unwrap_or(0);
            if used + qty > limit.max as u64 {
                return Ok(HoldOutcome::LimitExceeded(limit.dimension));
            }
        }
        let mut seat_picks: Vec<usize> = Vec::new();
        let mut seated_pool: Option<String> = None;
        for pid in &sku.pools {
            let Some(pool) = ev.pools.get(pid) else {
                return Ok(HoldOutcome::Rejected(format!("sku {} names a missing pool {pid}", sku.id)));
            };
            if pool.available < qty {
                return Ok(HoldOutcome::SoldOut);
            }
            if let Some(seats) = &pool.seats {
                seated_pool = Some(pid.clone());
                if req.seats.is_empty() {
                    seat_picks = seats.free.iter().take(req.qty as usize).copied().collect();
                    if seat_picks.len() < req.qty as usize {
                        return Ok(HoldOutcome::SoldOut);
                    }
                } else {
                    if req.seats.len() != req.qty as usize {
                        return Ok(HoldOutcome::Rejected("seats must name exactly qty seats".into()));
                    }
                    for name in &req.seats {
                        let Some(&i) = seats.index.get(name) else {
                            return Ok(HoldOutcome::Rejected(format!("unknown seat {name}")));
                        };
                        if !seats.free.contains(&i) || seat_picks.contains(&i) {
                            return Ok(HoldOutcome::SeatTaken(name.clone()));
                        }
                        seat_picks.push(i);
                    }
                }
            }
        }
        if seated_pool.is_none() && !req.seats.is_empty() {
            return Ok(HoldOutcome::Rejected("this sku has no named seats".into()));
        }
        // Writes.
        let mut seat_names = Vec::new();
        for pid in &sku.pools {
            let pool = ev.pools.get_mut(pid).expect("checked above");
            pool.available -= qty;
            pool.held += qty;
            if let Some(seats) = pool.seats.as_mut() {
                for &i in &seat_picks {
                    seats.free.remove(&i);
                    seats.taken.insert(i, req.order_id.clone());
                    seat_names.push(seats.names[i].clone());
                }
            }
        }
        let order = Order {
            order_id: req.order_id.clone(),
            event: req.event.clone(),
            sku: sku.id.clone(),
            qty: req.qty,
            seats: seat_names,
            user: req.user.clone(),
            state: OrderState::Created,
            version: 1,
            amount_cents: sku.price_cents * qty,
            expires_at_ms: now + ev.spec.hold_seconds as i64 * 1000,
            created_at_ms: now,
            redeemed_pools: Vec::new(),
            txn_id: None,
            identity: req.identity.clone(),
            pools: sku.pools.clone(),
        };
        for dv in order_dimensions(&order) {
            *ev.usage.entry(dv).or_insert(0) += qty;
        }
        ev.deadlines.insert((order.expires_at_ms, order.order_id.clone()));
        ev.idem.insert(idem_key, (req.fingerprint.clone(), order.order_id.clone()));
        ev.jtis.insert(req.jti.clone(), req.jti_expires_ms);
        ev.jti_expiry.insert((req.jti_expires_ms, req.jti.clone()));
        ev.append(now, &order, "created", None, Some(order.amount_cents), None);
        ev.orders.insert(order.order_id.clone(), order.clone());
        Ok(HoldOutcome::Created(order))
    }

    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError> {
        let Some(event) = event_of_order(order_id) else { return Ok(None) };
        let st = self.state.lock();
        Ok(st.events.get(event).and_then(|e| e.orders.get(order_id)).cloned())
    }

    async fn pay(&self, req: &PaymentRequest) -> Result<PayOutcome, StoreError> {
        let now = self.clock.now_ms();
        let Some(event) = event_of_order(&req.order_id) else { return Ok(PayOutcome::NotFound) };
        let mut st = self.state.lock();
        let Some(ev) = st.events.get_mut(event) else { return Ok(PayOutcome::NotFound) };
        let Some(order) = ev.orders.get(&req.order_id).cloned() else { return Ok(PayOutcome::NotFound) };
        let txn_key = format!("{}\n{}", req.order_id, req.txn_id);
        if let Some(seen) = ev.txns.get(&txn_key) {
            return Ok(match seen {
                TxnResult::Paid => PayOutcome::AlreadyPaid(order),
                TxnResult::RefundRequired => PayOutcome::RefundRequired(order),
            });
        }
        if req.amount_cents != order.amount_cents {
            return Ok(PayOutcome::AmountMismatch { expected: order.amount_cents });
        }
        if order.state != OrderState::Created {
            // Closed, or already paid by another transaction: the money must go back, and the site must know.
            ev.txns.insert(txn_key, TxnResult::RefundRequired);
            ev.append(now, &order, "refund_required", Some(&req.txn_id), Some(req.amount_cents), None);
            return Ok(PayOutcome::RefundRequired(order));
        }
        let mut paid = order;
        for pid in &paid.pools {
            if let Some(p) = ev.pools.get_mut(pid) {
                p.held -= (paid.qty as u64).min(p.held);
                p.sold += paid.qty as u64;
            }
        }
        ev.deadlines.remove(&(paid.expires_at_ms, paid.order_id.clone()));
        paid.state = OrderState::Paid;
        paid.version += 1;
        paid.txn_id = Some(req.txn_id.clone());
        ev.txns.insert(txn_key, TxnResult::Paid);
        ev.append(now, &paid, "paid", Some(&req.txn_id), Some(req.amount_cents), None);
        ev.orders.insert(paid.order_id.clone(), paid.clone());
        Ok(PayOutcome::Paid(paid))
    }

    async fn close(&self, order_id: &str, reason: CloseReason) -> Result<TransitionOutcome, StoreError> {
        let now = self.clock.now_ms();
        let Some(event) = event_of_order(order_id) else { return Ok(TransitionOutcome::NotFound) };
        let mut st = self.state.lock();
        let Some(ev) = st.events.get_mut(event) else { return Ok(TransitionOutcome::NotFound) };
        let Some(order) = ev.orders.get(order_id).cloned() else { return Ok(TransitionOutcome::NotFound) };
        if order.state != OrderState::Created {
            return Ok(TransitionOutcome::Invalid(order));
        }
        if reason == CloseReason::Expired && now < order.expires_at_ms {
            return Ok(TransitionOutcome::NotDue(order));
        }
        ev.release(&order, false);
        ev.deadlines.remove(&(order.expires_at_ms, order.order_id.clone()));
        let mut closed = order;
        closed.state = OrderState::Closed;
        closed.version += 1;
        ev.append(now, &closed, reason.as_str(), None, None, None);
        ev.orders.insert(closed.order_id.clone(), closed.clone());
        Ok(TransitionOutcome::Done(closed))
    }

    async fn redeem(&self, order_id: &str, pool: Option<&str>) -> Result<TransitionOutcome, StoreError> {
        let now = self.clock.now_ms();
        let Some(event) = event_of_order(order_id) else { return Ok(TransitionOutcome::NotFound) };
        let mut st = self.state.lock();
        let Some(ev) = st.events.get_mut(event) else { return Ok(TransitionOutcome::NotFound) };
        let Some(order) = ev.orders.get(order_id).cloned() else { return Ok(TransitionOutcome::NotFound) };
        if let Some(p) = pool
            && !order.pools.iter().any(|x| x == p)
        {
            return Ok(TransitionOutcome::UnknownPool);
        }
        if order.state != OrderState::Paid {
            return Ok(TransitionOutcome::Invalid(order));
        }
        let to_redeem: Vec<String> = match pool {
            Some(p) if order.redeemed_pools.iter().any(|x| x == p) => return Ok(TransitionOutcome::Invalid(order)),
            Some(p) => vec![p.to_string()],
            None => order.pools.iter().filter(|p| !order.redeemed_pools.contains(p)).cloned().collect(),
        };
        let mut o = order;
        o.redeemed_pools.extend(to_redeem.iter().cloned());
        o.version += 1;
        let all = o.pools.iter().all(|p| o.redeemed_pools.contains(p));
        if all {
            o.state = OrderState::Used;
        }
        let kind = if all { "used" } else { "redeemed" };
        let pool_note = (to_redeem.len() == 1).then(|| to_redeem[0].as_str());
        ev.append(now, &o, kind, None, None, pool_note);
        ev.orders.insert(o.order_id.clone(), o.clone());
        Ok(TransitionOutcome::Done(o))
    }

    async fn refund(&self, order_id: &str) -> Result<TransitionOutcome, StoreError> {
        let now = self.clock.now_ms();
        let Some(event) = event_of_order(order_id) else { return Ok(TransitionOutcome::NotFound) };
        let mut st = self.state.lock();
        let Some(ev) = st.events.get_mut(event) else { return Ok(TransitionOutcome::NotFound) };
        let Some(order) = ev.orders.get(order_id).cloned() else { return Ok(TransitionOutcome::NotFound) };
        if order.state != OrderState::Paid || !order.redeemed_pools.is_empty() {
            return Ok(TransitionOutcome::Invalid(order));
        }
        ev.release(&order, true);
        let mut o = order;
        o.state = OrderState::Refunded;
        o.version += 1;
        ev.append(now, &o, "refunded", o.txn_id.clone().as_deref(), Some(o.amount_cents), None);
        ev.orders.insert(o.order_id.clone(), o.clone());
        Ok(TransitionOutcome::Done(o))
    }

    async fn due_holds(&self, event: &str, limit: usize) -> Result<Vec<(String, i64)>, StoreError> {
        let now = self.clock.now_ms();
        let st = self.state.lock();
        let Some(ev) = st.events.get(event) else { return Ok(Vec::new()) };
        Ok(ev.deadlines.iter().take_while(|(d, _)| *d <= now).take(limit).map(|(d, id)| (id.clone(), *d)).collect())
    }

    async fn created_orders(
        &self,
        event: &str,
        cursor: Option<&str>,
        count: usize,
    ) -> Result<(Vec<(String, i64)>, Option<String>), StoreError> {
        use std::ops::Bound;
        // The cursor is the last `(deadline, order id)` returned: the walk goes on strictly after it, so an
        // order that stays CREATED is returned exactly once.
        let after = match cursor {
            None => None,
            Some(c) => {
                let parsed = c.split_once(':').and_then(|(d, id)| Some((d.parse::<i64>().ok()?, id.to_string())));
                Some(parsed.ok_or_else(|| StoreError::Internal(format!("bad cursor {c}")))?)
            }
        };
        let st = self.state.lock();
        let Some(ev) = st.events.get(event) else { return Ok((Vec::new(), None)) };
        let start = match &after {
            None => Bound::Unbounded,
            Some(a) => Bound::Excluded(a),
        };
        let page: Vec<(String, i64)> =
            ev.deadlines.range((start, Bound::Unbounded)).take(count.max(1)).map(|(d, id)| (id.clone(), *d)).collect();
        let next = match page.last() {
            Some((id, d)) if ev.deadlines.range((Bound::Excluded(&(*d, id.clone())), Bound::Unbounded)).next().is_some() => {
                Some(format!("{d}:{id}"))
            }
            _ => None,
        };
        Ok((page, next))
    }

    fn is_external(&self) -> bool {
        false
    }

    async fn server_ids(&self) -> Result<Vec<super::ServerId>, StoreError> {
        Ok(Vec::new())
    }

    async fn outbox(&self, event: &str, after: Option<&str>, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let after = match after {
            None => (0, 0),
            Some(c) => parse_cursor(c).ok_or_else(|| StoreError::Internal(format!("bad cursor {c}")))?,
        };
        let st = self.state.lock();
        let Some(ev) = st.events.get(event) else { return Ok(Vec::new()) };
        let start = ev.outbox.partition_point(|e| parse_cursor(&e.cursor).is_some_and(|c| c <= after));
        Ok(ev.outbox[start..].iter().take(limit.min(MAX_OUTBOX_PAGE)).cloned().collect())
    }

    async fn reconcile(&self, event: &str) -> Result<Option<ReconcileReport>, StoreError> {
        let st = self.state.lock();
        let Some(ev) = st.events.get(event) else { return Ok(None) };
        let mut held: BTreeMap<String, u64> = BTreeMap::new();
        let mut sold: BTreeMap<String, u64> = BTreeMap::new();
        for o in ev.orders.values() {
            let target = match o.state {
                OrderState::Created => &mut held,
                OrderState::Paid | OrderState::Used => &mut sold,
                OrderState::Closed | OrderState::Refunded => continue,
            };
            for p in &o.pools {
                *target.entry(p.clone()).or_insert(0) += o.qty as u64;
            }
        }
        Ok(Some(reconcile_from(&ev.stock(), &held, &sold)))
    }

    async fn try_lease(&self, name: &str, holder: &str, ttl_ms: u64) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let mut st = self.state.lock();
        let entry = st.leases.entry(name.to_string()).or_insert_with(|| (holder.to_string(), 0));
        if entry.0 == holder || entry.1 <= now {
            *entry = (holder.to_string(), now + ttl_ms as i64);
            Ok(true)
        } else {
            Ok(false)
        }
    }
}

/// Parses an outbox cursor `ms-seq` (or `0`).
pub fn parse_cursor(c: &str) -> Option<(i64, u64)> {
    if c == "0" {
        return Some((0, 0));
    }
    let (a, b) = c.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}
