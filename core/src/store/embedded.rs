//! The embedded store: all sale state in this process, behind one mutex; durable on local disk
//! ([`EmbeddedStore::open`], `store = "embedded"`) or in memory only ([`EmbeddedStore::new`], `store = "memory"`).
//!
//! A `parking_lot::Mutex` rather than a Tokio one: every operation is a few map lookups that never await, so
//! holding it across an `.await` can't happen and an uncontended lock costs tens of nanoseconds. One lock over
//! everything makes each operation trivially atomic (the property the Redis store gets from Lua).
//! Each operation does every check before its first write, so an early return leaves nothing half-done.
//!
//! **Durability** (the data dir's files: [`super::journal`]). Every operation that changes state is an [`Op`]:
//! its inputs plus the store clock's `now`, so applying it again to the same state gives the same result. An
//! operation runs under the state lock as in memory; when it changed something, its record is queued for the
//! journal with the next LSN while the lock is still held (so journal order = apply order), and the caller
//! waits until the journal writer thread has the record's frame on disk (`fdatasync`) before it answers.
//! Group commit: the writer takes every record queued while the previous frame was being synced and writes
//! them as one frame with one `fdatasync`, so many concurrent holds share one sync. A read that saw state whose
//! records are not on disk yet waits for them too, so nothing is ever shown (or acknowledged) before it is
//! durable. Start-up rebuilds the state from the newest snapshot plus the journal records after it, by
//! applying the same operations.
//!
//! **Write errors.** A frame that cannot be written or synced is never acknowledged: the writer cuts the file
//! back to its last durable frame, rebuilds the in-memory state from disk (so no half-applied change stays in
//! memory), answers every waiting operation with [`StoreError::ReadOnly`] (503), and refuses writes until a
//! probe succeeds. Before that, while the data dir's file system has less than the reserve free, new holds
//! and event changes are refused but payments, cancels, closes, refunds and redemptions still go through
//! (they use the reserve). Reads are served throughout. Leases are not journaled: they coordinate live
//! processes, and a restarted process has none.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use super::journal::{self, Segment};
use super::{MAX_OUTBOX_PAGE, SaleStore, StoreError};
use crate::clock::{Clock, SystemClock};
use crate::model::{
    CloseReason, Dimension, EventRecord, EventSpec, FieldError, HoldOutcome, HoldRequest, Order, OrderState,
    OutboxEntry, PayOutcome, PaymentRequest, PoolStock, PutEventOutcome, ReconcileReport, SkuStock, SoldOut,
    StockView, TransitionOutcome, WAIT_LIVE_MS, WAIT_MAX, event_of_order, reconcile_from,
};

/// In-process [`SaleStore`]: durable ([`open`](Self::open)) or in memory ([`new`](Self::new)).
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    /// The journal writer thread (durable mode): told to stop and joined on drop.
    writer: Option<std::thread::JoinHandle<()>>,
}

struct Inner {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    /// `None` in memory mode.
    disk: Option<Disk>,
}

/// How the durable store is set up.
#[derive(Debug, Clone)]
pub struct DiskOptions {
    /// Below this many free bytes on the data dir's file system, new holds and event changes are refused;
    /// payments, cancels and the sweeper's closes go on using the rest.
    pub reserve_bytes: u64,
    /// A snapshot is taken (and the journal restarted) once the journal is this long.
    pub snapshot_bytes: u64,
    /// Test hook: pretend the file system has this many free bytes at start, and that every journal byte
    /// written uses one of them (writes past it fail as on a full disk).
    pub test_free_bytes: Option<u64>,
}

impl Default for DiskOptions {
    fn default() -> Self {
        DiskOptions { reserve_bytes: 64 << 20, snapshot_bytes: 64 << 20, test_free_bytes: None }
    }
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
    /// Holds ever made and their tickets (`StockView::holds`, `hold_units`).
    holds: (u64, u64),
    /// The waitlist ([`crate::model::SoldOut`]): admission-token jti → its fan. Soft state, neither
    /// journaled nor in snapshots: after a restart its fans are back on it at their next ask (Redis keeps
    /// it with the event's other keys).
    wait: HashMap<String, Waiter>,
    /// The last turn given on the waitlist.
    wait_turn: u64,
}

/// A fan on the waitlist (lua/hold.lua's `wait` entry).
struct Waiter {
    /// Its turn (the order fans met "sold out"); when it last asked, when its token expires (ms).
    turn: u64,
    seen: i64,
    until: i64,
    qty: u64,
    pools: Vec<String>,
}

impl Waiter {
    fn live(&self, now: i64) -> bool {
        self.seen + WAIT_LIVE_MS >= now && self.until > now
    }
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
            holds: (0, 0),
            wait: HashMap::new(),
            wait_turn: 0,
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

    fn stock(&self, now: i64) -> StockView {
        let waiting = self.wait.values().filter(|w| w.live(now)).map(|w| w.qty).sum();
        let mut view = StockView { holds: self.holds.0, hold_units: self.holds.1, waiting, ..StockView::default() };
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


/// An operation needed to write and was not allowed to ([`Disk::may_write`]).
#[derive(Debug)]
struct NeedsWrite;

/// One state-changing operation, as the journal records it: applied again to the same state (with the same
/// `now`), it does the same thing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Op {
    PutEvent { id: String, spec: EventSpec, force: bool },
    SetPaused { id: String, paused: bool },
    Hold(HoldRequest),
    Pay(PaymentRequest),
    Close { order_id: String, reason: CloseReason },
    Redeem { order_id: String, pool: Option<String> },
    Refund { order_id: String },
}

/// A journal record: the store clock at the operation, and the operation.
#[derive(Serialize)]
struct RecordRef<'a> {
    now: i64,
    op: &'a Op,
}

#[derive(Deserialize)]
struct Record {
    now: i64,
    op: Op,
}

/// What an [`Op`] answered.
enum Answer {
    Put(PutEventOutcome),
    Paused(bool),
    Hold(HoldOutcome),
    Pay(PayOutcome),
    Moved(TransitionOutcome),
}

/// Returns `Err(NeedsWrite)` unless writing is allowed: put right before an operation's first write.
macro_rules! may_write {
    ($w:expr) => {
        if !$w {
            return Err(NeedsWrite);
        }
    };
}

impl State {
    /// Applies `op` at `now`; `w`: whether it may write. Returns its answer and whether it changed anything
    /// (what the journal must record).
    fn apply(&mut self, op: &Op, now: i64, w: bool) -> Result<(Answer, bool), NeedsWrite> {
        Ok(match op {
            Op::PutEvent { id, spec, force } => {
                let (a, c) = self.put_event(id, spec, *force, now, w)?;
                (Answer::Put(a), c)
            }
            Op::SetPaused { id, paused } => {
                let (a, c) = self.set_paused(id, *paused, w)?;
                (Answer::Paused(a), c)
            }
            Op::Hold(req) => {
                let (a, c) = self.hold(req, now, w)?;
                (Answer::Hold(a), c)
            }
            Op::Pay(req) => {
                let (a, c) = self.pay(req, now, w)?;
                (Answer::Pay(a), c)
            }
            Op::Close { order_id, reason } => {
                let (a, c) = self.close(order_id, *reason, now, w)?;
                (Answer::Moved(a), c)
            }
            Op::Redeem { order_id, pool } => {
                let (a, c) = self.redeem(order_id, pool.as_deref(), now, w)?;
                (Answer::Moved(a), c)
            }
            Op::Refund { order_id } => {
                let (a, c) = self.refund(order_id, now, w)?;
                (Answer::Moved(a), c)
            }
        })
    }

    fn put_event(
        &mut self,
        id: &str,
        spec: &EventSpec,
        force: bool,
        now: i64,
        w: bool,
    ) -> Result<(PutEventOutcome, bool), NeedsWrite> {
        let Some(ev) = self.events.get_mut(id) else {
            may_write!(w);
            self.events.insert(id.to_string(), EventState::new(spec.clone()));
            return Ok((PutEventOutcome::Created, true));
        };
        if ev.spec == *spec {
            // The same body again (a restart putting its event files): nothing to change or record.
            return Ok((PutEventOutcome::Updated, false));
        }
        let (pools, moves) = match plan_update(ev, spec) {
            Ok(plan) => plan,
            Err(errs) => return Ok((PutEventOutcome::Rejected(errs), false)),
        };
        if moves && now >= ev.spec.opens_at_ms() && !force {
            return Ok((
                PutEventOutcome::NeedsForce("the sale is open: a change that moves stock needs ?force=true".into()),
                false,
            ));
        }
        may_write!(w);
        ev.pools = pools;
        ev.spec = spec.clone();
        Ok((PutEventOutcome::Updated, true))
    }

    fn set_paused(&mut self, id: &str, paused: bool, w: bool) -> Result<(bool, bool), NeedsWrite> {
        Ok(match self.events.get_mut(id) {
            Some(e) if e.paused == paused => (true, false),
            Some(e) => {
                may_write!(w);
                e.paused = paused;
                (true, true)
            }
            None => (false, false),
        })
    }

    fn hold(&mut self, req: &HoldRequest, now: i64, w: bool) -> Result<(HoldOutcome, bool), NeedsWrite> {
        let Some(ev) = self.events.get_mut(&req.event) else {
            return Ok((HoldOutcome::NotFound, false));
        };
        let no = |o: HoldOutcome| Ok((o, false));
        // Reads and checks. Idempotency first: a replay is answered from the order it made, always.
        let idem_key = format!("{}\n{}", req.user, req.idempotency_key);
        if let Some(found) = replay_of(ev, &idem_key, &req.fingerprint) {
            return no(found);
        }
        if now < ev.spec.opens_at_ms() || now >= ev.spec.closes_at_ms() {
            return no(HoldOutcome::NotOpen);
        }
        if ev.paused {
            // A fan on the waitlist that asks while the event is paused keeps its turn (lua/hold.lua's).
            if let Some(w) = ev.wait.get_mut(&req.jti).filter(|w| req.wait && w.live(now)) {
                w.seen = now;
            }
            return no(HoldOutcome::Paused);
        }
        // Forgetting expired jtis changes nothing a later operation can see (each prunes before it looks),
        // so it is not a journaled change.
        ev.prune_jtis(now);
        if ev.jtis.contains_key(&req.jti) {
            return no(HoldOutcome::TokenReplay);
        }
        let Some(sku) = ev.spec.sku(&req.sku).cloned() else {
            return no(HoldOutcome::Rejected(format!("unknown sku {}", req.sku)));
        };
        if req.qty == 0 || req.qty > sku.max_qty() {
            return no(HoldOutcome::Rejected(format!("qty must be 1..={}", sku.max_qty())));
        }
        let qty = req.qty as u64;
        for limit in &ev.spec.limits {
            let Some(value) = req.dimension_value(limit.dimension) else {
                return no(HoldOutcome::Rejected(format!(
                    "the event limits {} but the hold carries none",
                    limit.dimension.as_str()
                )));
            };
            let used = ev.usage.get(&(limit.dimension, value.to_string())).copied().unwrap_or(0);
            if used + qty > limit.max as u64 {
                return no(HoldOutcome::LimitExceeded(limit.dimension));
            }
        }
        // The waitlist (lua/hold.lua's): lapsed fans dropped, then the tickets of each pool that live fans
        // who met "sold out" before this one wait for.
        ev.wait.retain(|_, w| w.live(now));
        let mine = ev.wait.get(&req.jti).map(|w| w.turn);
        let ahead_in = |ev: &EventState, pid: &str| -> u64 {
            ev.wait
                .iter()
                .filter(|(j, w)| *j != &req.jti && mine.is_none_or(|m| w.turn < m))
                .filter(|(_, w)| w.pools.iter().any(|p| p == pid))
                .map(|(_, w)| w.qty)
                .sum()
        };
        let sold_out = |ev: &mut EventState| {
            let (mut left, mut returning, mut ahead) = (qty, None::<u64>, 0);
            for pid in &sku.pools {
                let a = ahead_in(ev, pid);
                let (avail, held) = ev.pools.get(pid).map_or((0, 0), |p| (p.available, p.held));
                let free = avail.saturating_sub(a);
                left = left.min(free);
                if free < qty {
                    // What may still become this fan's: unpaid holds, and tickets set aside for fans ahead.
                    let may = held + avail.min(a);
                    returning = Some(returning.map_or(may, |r| r.min(may)));
                }
                ahead = ahead.max(a);
            }
            let returning = returning.unwrap_or(0);
            // A fan on the list keeps its turn while tickets may come back (also when some are left, fewer
            // than it asked for); one not on it joins when none are left for it.
            let listed = req.wait && returning > 0 && (mine.is_some() || (left == 0 && ev.wait.len() < WAIT_MAX));
            if listed {
                let turn = mine.unwrap_or_else(|| {
                    ev.wait_turn += 1;
                    ev.wait_turn
                });
                let w = Waiter { turn, seen: now, until: req.jti_expires_ms, qty, pools: sku.pools.clone() };
                ev.wait.insert(req.jti.clone(), w);
            } else {
                ev.wait.remove(&req.jti);
            }
            Ok((HoldOutcome::SoldOut(SoldOut { left, returning, ahead, listed }), false))
        };
        let mut seat_picks: Vec<usize> = Vec::new();
        let mut seated_pool: Option<String> = None;
        for pid in &sku.pools {
            let short = ev.pools.get(pid).map(|pool| pool.available < qty + ahead_in(ev, pid));
            let Some(short) = short else {
                return no(HoldOutcome::Rejected(format!("sku {} names a missing pool {pid}", sku.id)));
            };
            if short {
                return sold_out(ev);
            }
            let pool = &ev.pools[pid];
            if let Some(seats) = &pool.seats {
                seated_pool = Some(pid.clone());
                if req.seats.is_empty() {
                    seat_picks = seats.free.iter().take(req.qty as usize).copied().collect();
                    if seat_picks.len() < req.qty as usize {
                        return sold_out(ev);
                    }
                } else {
                    if req.seats.len() != req.qty as usize {
                        return no(HoldOutcome::Rejected("seats must name exactly qty seats".into()));
                    }
                    for name in &req.seats {
                        let Some(&i) = seats.index.get(name) else {
                            return no(HoldOutcome::Rejected(format!("unknown seat {name}")));
                        };
                        if !seats.free.contains(&i) || seat_picks.contains(&i) {
                            return no(HoldOutcome::SeatTaken(name.clone()));
                        }
                        seat_picks.push(i);
                    }
                }
            }
        }
        if seated_pool.is_none() && !req.seats.is_empty() {
            return no(HoldOutcome::Rejected("this sku has no named seats".into()));
        }
        may_write!(w);
        // Writes.
        ev.wait.remove(&req.jti);
        ev.holds = (ev.holds.0 + 1, ev.holds.1 + qty);
        let mut seat_names = Vec::new();
        for pid in &sku.pools {
            let Some(pool) = ev.pools.get_mut(pid) else { continue };
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
        Ok((HoldOutcome::Created(order), true))
    }

    fn pay(&mut self, req: &PaymentRequest, now: i64, w: bool) -> Result<(PayOutcome, bool), NeedsWrite> {
        let Some(event) = event_of_order(&req.order_id) else { return Ok((PayOutcome::NotFound, false)) };
        let Some(ev) = self.events.get_mut(event) else { return Ok((PayOutcome::NotFound, false)) };
        let Some(order) = ev.orders.get(&req.order_id).cloned() else { return Ok((PayOutcome::NotFound, false)) };
        let txn_key = format!("{}\n{}", req.order_id, req.txn_id);
        if let Some(seen) = ev.txns.get(&txn_key) {
            return Ok((
                match seen {
                    TxnResult::Paid => PayOutcome::AlreadyPaid(order),
                    TxnResult::RefundRequired => PayOutcome::RefundRequired(order),
                },
                false,
            ));
        }
        if req.amount_cents != order.amount_cents {
            return Ok((PayOutcome::AmountMismatch { expected: order.amount_cents }, false));
        }
        may_write!(w);
        if order.state != OrderState::Created {
            // Closed, or already paid by another transaction: the money must go back, and the site must know.
            ev.txns.insert(txn_key, TxnResult::RefundRequired);
            ev.append(now, &order, "refund_required", Some(&req.txn_id), Some(req.amount_cents), None);
            return Ok((PayOutcome::RefundRequired(order), true));
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
        Ok((PayOutcome::Paid(paid), true))
    }

    fn close(&mut self, order_id: &str, reason: CloseReason, now: i64, w: bool) -> Result<(TransitionOutcome, bool), NeedsWrite> {
        let no = |o| Ok((o, false));
        let Some(event) = event_of_order(order_id) else { return no(TransitionOutcome::NotFound) };
        let Some(ev) = self.events.get_mut(event) else { return no(TransitionOutcome::NotFound) };
        let Some(order) = ev.orders.get(order_id).cloned() else { return no(TransitionOutcome::NotFound) };
        if order.state != OrderState::Created {
            return no(TransitionOutcome::Invalid(order));
        }
        if reason == CloseReason::Expired && now < order.expires_at_ms {
            return no(TransitionOutcome::NotDue(order));
        }
        may_write!(w);
        ev.release(&order, false);
        ev.deadlines.remove(&(order.expires_at_ms, order.order_id.clone()));
        let mut closed = order;
        closed.state = OrderState::Closed;
        closed.version += 1;
        ev.append(now, &closed, reason.as_str(), None, None, None);
        ev.orders.insert(closed.order_id.clone(), closed.clone());
        Ok((TransitionOutcome::Done(closed), true))
    }

    fn redeem(&mut self, order_id: &str, pool: Option<&str>, now: i64, w: bool) -> Result<(TransitionOutcome, bool), NeedsWrite> {
        let no = |o| Ok((o, false));
        let Some(event) = event_of_order(order_id) else { return no(TransitionOutcome::NotFound) };
        let Some(ev) = self.events.get_mut(event) else { return no(TransitionOutcome::NotFound) };
        let Some(order) = ev.orders.get(order_id).cloned() else { return no(TransitionOutcome::NotFound) };
        if let Some(p) = pool
            && !order.pools.iter().any(|x| x == p)
        {
            return no(TransitionOutcome::UnknownPool);
        }
        if order.state != OrderState::Paid {
            return no(TransitionOutcome::Invalid(order));
        }
        let to_redeem: Vec<String> = match pool {
            Some(p) if order.redeemed_pools.iter().any(|x| x == p) => return no(TransitionOutcome::Invalid(order)),
            Some(p) => vec![p.to_string()],
            None => order.pools.iter().filter(|p| !order.redeemed_pools.contains(p)).cloned().collect(),
        };
        may_write!(w);
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
        Ok((TransitionOutcome::Done(o), true))
    }

    fn refund(&mut self, order_id: &str, now: i64, w: bool) -> Result<(TransitionOutcome, bool), NeedsWrite> {
        let no = |o| Ok((o, false));
        let Some(event) = event_of_order(order_id) else { return no(TransitionOutcome::NotFound) };
        let Some(ev) = self.events.get_mut(event) else { return no(TransitionOutcome::NotFound) };
        let Some(order) = ev.orders.get(order_id).cloned() else { return no(TransitionOutcome::NotFound) };
        if order.state != OrderState::Paid || !order.redeemed_pools.is_empty() {
            return no(TransitionOutcome::Invalid(order));
        }
        may_write!(w);
        ev.release(&order, true);
        let mut o = order;
        o.state = OrderState::Refunded;
        o.version += 1;
        ev.append(now, &o, "refunded", o.txn_id.clone().as_deref(), Some(o.amount_cents), None);
        ev.orders.insert(o.order_id.clone(), o.clone());
        Ok((TransitionOutcome::Done(o), true))
    }
}

/// The answer to a hold whose idempotency key `idem_key` (`user \n key`) was seen: `Replay` with the order
/// it made (same fingerprint), `IdemConflict` (another one); `None` when the key is new.
fn replay_of(ev: &EventState, idem_key: &str, fingerprint: &str) -> Option<HoldOutcome> {
    let (fp, order_id) = ev.idem.get(idem_key)?;
    if fp != fingerprint {
        return Some(HoldOutcome::IdemConflict);
    }
    Some(match ev.orders.get(order_id) {
        Some(o) => HoldOutcome::Replay(o.clone()),
        None => HoldOutcome::IdemConflict,
    })
}

// ------------------------------------------------------------------ snapshots

/// The whole state as a snapshot stores it (derived indexes — deadlines, jti expiry, free seats — are
/// rebuilt on load).
#[derive(Serialize, Deserialize)]
struct Snap {
    events: Vec<SnapEvent>,
}

#[derive(Serialize, Deserialize)]
struct SnapEvent {
    id: String,
    spec: EventSpec,
    paused: bool,
    pools: Vec<SnapPool>,
    orders: Vec<Order>,
    /// (`user \n key`, fingerprint, order id)
    idem: Vec<(String, String, String)>,
    jtis: Vec<(String, i64)>,
    usage: Vec<(Dimension, String, u64)>,
    /// (`order \n txn`, paid: true / refund required: false)
    txns: Vec<(String, bool)>,
    outbox: Vec<OutboxEntry>,
    last_id: (i64, u64),
    /// (holds ever made, their tickets); absent in snapshots written before it existed.
    #[serde(default)]
    holds: (u64, u64),
}

#[derive(Serialize, Deserialize)]
struct SnapPool {
    id: String,
    capacity: u64,
    available: u64,
    held: u64,
    sold: u64,
    seats: Option<SnapSeats>,
}

#[derive(Serialize, Deserialize)]
struct SnapSeats {
    /// Seat names in the event body's order.
    names: Vec<String>,
    /// (seat name, order id) of the taken ones.
    taken: Vec<(String, String)>,
}

impl State {
    fn to_snap(&self) -> Snap {
        let events = self
            .events
            .iter()
            .map(|(id, e)| SnapEvent {
                id: id.clone(),
                spec: e.spec.clone(),
                paused: e.paused,
                pools: e
                    .pools
                    .iter()
                    .map(|(pid, p)| SnapPool {
                        id: pid.clone(),
                        capacity: p.capacity,
                        available: p.available,
                        held: p.held,
                        sold: p.sold,
                        seats: p.seats.as_ref().map(|s| SnapSeats { names: s.names.clone(), taken: s.taken_by_name().into_iter().collect() }),
                    })
                    .collect(),
                orders: e.orders.values().cloned().collect(),
                idem: e.idem.iter().map(|(k, (fp, o))| (k.clone(), fp.clone(), o.clone())).collect(),
                jtis: e.jtis.iter().map(|(j, x)| (j.clone(), *x)).collect(),
                usage: e.usage.iter().map(|((d, v), n)| (*d, v.clone(), *n)).collect(),
                txns: e.txns.iter().map(|(k, r)| (k.clone(), *r == TxnResult::Paid)).collect(),
                outbox: e.outbox.clone(),
                last_id: e.last_id,
                holds: e.holds,
            })
            .collect();
        Snap { events }
    }

    fn from_snap(snap: Snap) -> State {
        let mut st = State::default();
        for e in snap.events {
            let mut ev = EventState::new(e.spec);
            ev.paused = e.paused;
            ev.holds = e.holds;
            ev.pools = e
                .pools
                .into_iter()
                .map(|p| {
                    let seats = p.seats.map(|s| Seats::build(&s.names, &s.taken.into_iter().collect::<HashMap<_, _>>()));
                    (p.id, PoolState { capacity: p.capacity, available: p.available, held: p.held, sold: p.sold, seats })
                })
                .collect();
            for o in e.orders {
                if o.state == OrderState::Created {
                    ev.deadlines.insert((o.expires_at_ms, o.order_id.clone()));
                }
                ev.orders.insert(o.order_id.clone(), o);
            }
            ev.idem = e.idem.into_iter().map(|(k, fp, o)| (k, (fp, o))).collect();
            for (j, x) in e.jtis {
                ev.jti_expiry.insert((x, j.clone()));
                ev.jtis.insert(j, x);
            }
            ev.usage = e.usage.into_iter().map(|(d, v, n)| ((d, v), n)).collect();
            ev.txns = e
                .txns
                .into_iter()
                .map(|(k, paid)| (k, if paid { TxnResult::Paid } else { TxnResult::RefundRequired }))
                .collect();
            ev.outbox = e.outbox;
            ev.last_id = e.last_id;
            st.events.insert(e.id, ev);
        }
        st
    }

    /// The state the files describe: the snapshot, then every journal record applied in order.
    fn rebuild(rec: &journal::Recovered) -> Result<State, String> {
        let mut st = match &rec.snapshot {
            Some((lsn, payload)) => State::from_snap(
                serde_json::from_slice(payload).map_err(|e| format!("snapshot {lsn} cannot be read: {e}"))?,
            ),
            None => State::default(),
        };
        for (lsn, bytes) in &rec.records {
            let r: Record =
                serde_json::from_slice(bytes).map_err(|e| format!("journal record {lsn} cannot be read: {e}"))?;
            match st.apply(&r.op, r.now, true) {
                Ok((_, true)) => {}
                Ok((_, false)) => tracing::warn!(lsn, "journal record changed nothing when applied again"),
                Err(NeedsWrite) => return Err(format!("journal record {lsn} was refused when applied again")),
            }
        }
        Ok(st)
    }
}

// ------------------------------------------------------------------ the journal writer

/// Durable mode: what request threads and the journal writer thread share.
struct Disk {
    dir: PathBuf,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Last LSN applied in memory (assigned under the state lock).
    appended: AtomicU64,
    /// Last LSN on disk.
    durable: AtomicU64,
    /// [`MODE_OK`], [`MODE_LOW_SPACE`] or [`MODE_FAILED`].
    mode: AtomicU8,
    opts: DiskOptions,
    /// Test hook: free bytes left ([`DiskOptions::test_free_bytes`]).
    test_free: Option<AtomicU64>,
    /// The last write error, for the 503's message.
    last_error: Mutex<String>,
}

/// Everything may be written.
const MODE_OK: u8 = 0;
/// Less free space than the reserve: new holds and event changes are refused.
const MODE_LOW_SPACE: u8 = 1;
/// A write failed: every change is refused until a probe succeeds.
const MODE_FAILED: u8 = 2;

/// Records waiting for the writer, and who waits for them.
#[derive(Default)]
struct Queue {
    /// Records (each length-prefixed) of the next frame.
    body: Vec<u8>,
    count: u32,
    /// LSN of the first record in `body`.
    first: u64,
    /// Told `true` once everything queued before them is on disk, `false` if it was rolled back.
    waiters: Vec<tokio::sync::oneshot::Sender<bool>>,
    stop: bool,
}

/// What the writer takes from the queue at once.
struct Batch {
    body: Vec<u8>,
    count: u32,
    first: u64,
    waiters: Vec<tokio::sync::oneshot::Sender<bool>>,
}

impl Queue {
    fn take(&mut self) -> Batch {
        Batch {
            body: std::mem::take(&mut self.body),
            count: std::mem::replace(&mut self.count, 0),
            first: self.first,
            waiters: std::mem::take(&mut self.waiters),
        }
    }
}

/// How often the writer looks at free space (and, after a failure, probes the disk).
const CHECK_PERIOD: Duration = Duration::from_millis(200);
/// How often a read is done again when what it saw was rolled back (a write error) before it was on disk.
/// Concurrent writes keep landing in memory until the writer has marked the disk failed, and a read
/// done again may see one of them rolled back too: 3 tries were refused once in three full CI runs
/// (`embedded_durable::a_write_error_is_refused_and_rolled_back`, a busy machine); each try waits at most
/// one frame's write, so 10 cost little more.
const READ_TRIES: usize = 10;
/// Least time between two probes after a write failure.
const PROBE_PERIOD: Duration = Duration::from_secs(1);

impl Disk {
    fn may_write(&self, op: &Op) -> bool {
        match self.mode.load(Ordering::Acquire) {
            MODE_OK => true,
            MODE_LOW_SPACE => !matches!(op, Op::Hold(_) | Op::PutEvent { .. }),
            _ => false,
        }
    }

    fn refusal(&self) -> StoreError {
        let reserve_mb = self.opts.reserve_bytes as f64 / (1 << 20) as f64;
        match self.mode.load(Ordering::Acquire) {
            MODE_LOW_SPACE => StoreError::ReadOnly(format!(
                "the disk of the data dir has less than {reserve_mb:.0} MB free: new holds and event changes are refused \
                 (nothing was written); payments, cancels and reads are still served"
            )),
            _ => StoreError::ReadOnly(format!(
                "the data dir cannot be written ({}): changes are refused (nothing was written); reads are still served",
                self.last_error.lock()
            )),
        }
    }

    /// Queues a record with the next LSN (call under the state lock); the receiver hears when it is on disk.
    fn push(&self, record: &[u8]) -> tokio::sync::oneshot::Receiver<bool> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut q = self.queue.lock();
        let lsn = self.appended.load(Ordering::Acquire) + 1;
        self.appended.store(lsn, Ordering::Release);
        if q.count == 0 {
            q.first = lsn;
        }
        journal::push_record(&mut q.body, record);
        q.count += 1;
        q.waiters.push(tx);
        drop(q);
        self.wake.notify_one();
        rx
    }

    /// When the state just read has records not yet on disk (call under the state lock): a receiver that
    /// hears when they are.
    fn pending(&self) -> Option<tokio::sync::oneshot::Receiver<bool>> {
        if self.appended.load(Ordering::Acquire) <= self.durable.load(Ordering::Acquire) {
            return None;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.queue.lock().waiters.push(tx);
        self.wake.notify_one();
        Some(rx)
    }

    async fn settle(&self, rx: tokio::sync::oneshot::Receiver<bool>) -> Result<(), StoreError> {
        match rx.await {
            Ok(true) => Ok(()),
            _ => Err(StoreError::ReadOnly(format!(
                "writing to the data dir failed ({}): the change was not acknowledged and is undone; retry later \
                 (holds with the same idempotency key)",
                self.last_error.lock()
            ))),
        }
    }

    /// Free bytes on the data dir's file system (or the test hook's).
    fn free(&self) -> std::io::Result<u64> {
        match &self.test_free {
            Some(f) => Ok(f.load(Ordering::Acquire)),
            None => journal::free_bytes(&self.dir),
        }
    }

    fn append(&self, seg: &mut Segment, frame: &[u8]) -> std::io::Result<()> {
        if let Some(f) = &self.test_free {
            let left = f.load(Ordering::Acquire);
            if left < frame.len() as u64 {
                f.store(0, Ordering::Release);
                return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device (test hook)"));
            }
            f.store(left - frame.len() as u64, Ordering::Release);
        }
        seg.append(frame)
    }

    /// Looks at free space: low → refuse new holds; enough → accept them again (not after a failure).
    fn check_space(&self) {
        if self.mode.load(Ordering::Acquire) == MODE_FAILED {
            return;
        }
        let Ok(free) = self.free() else { return };
        let low = free < self.opts.reserve_bytes;
        let was = self.mode.swap(if low { MODE_LOW_SPACE } else { MODE_OK }, Ordering::AcqRel);
        match (was, low) {
            (MODE_OK, true) => tracing::error!(
                dir = %self.dir.display(), free, reserve = self.opts.reserve_bytes,
                "data dir disk nearly full: new holds refused; payments and cancels still taken"
            ),
            (MODE_LOW_SPACE, false) => tracing::info!(dir = %self.dir.display(), free, "data dir disk has room again: holds accepted"),
            _ => {}
        }
    }
}

impl Inner {
    /// The journal writer: group commit, snapshots, free-space checks, roll-back after a write error.
    fn write_loop(self: Arc<Inner>, mut seg: Segment, lock: journal::DirLock) {
        let Some(disk) = &self.disk else { return };
        let mut last_check = Instant::now();
        let mut last_probe = Instant::now();
        let mut snapshot: Option<std::thread::JoinHandle<()>> = None;
        disk.check_space();
        loop {
            let (batch, stop) = {
                let mut q = disk.queue.lock();
                if q.count == 0 && q.waiters.is_empty() && !q.stop {
                    disk.wake.wait_for(&mut q, CHECK_PERIOD);
                }
                (q.take(), q.stop)
            };
            self.commit(disk, &mut seg, batch);
            if stop && disk.queue.lock().waiters.is_empty() {
                break;
            }
            if last_check.elapsed() >= CHECK_PERIOD {
                last_check = Instant::now();
                disk.check_space();
                if disk.mode.load(Ordering::Acquire) == MODE_FAILED && last_probe.elapsed() >= PROBE_PERIOD {
                    last_probe = Instant::now();
                    self.probe(disk, &mut seg);
                }
            }
            if seg.len >= disk.opts.snapshot_bytes
                && disk.mode.load(Ordering::Acquire) == MODE_OK
                && snapshot.as_ref().is_none_or(|h| h.is_finished())
            {
                if let Some(h) = snapshot.take() {
                    let _ = h.join();
                }
                snapshot = self.rotate(disk, &mut seg);
            }
        }
        if let Some(h) = snapshot.take() {
            let _ = h.join();
        }
        drop(lock);
    }

    /// Writes a batch as one frame and tells its waiters; rolls back on an error.
    fn commit(&self, disk: &Disk, seg: &mut Segment, batch: Batch) {
        if batch.count == 0 {
            // Only readers waiting, for frames already written (the writer is sequential).
            for w in batch.waiters {
                let _ = w.send(true);
            }
            return;
        }
        let frame = journal::frame(batch.first, batch.count, &batch.body);
        match disk.append(seg, &frame) {
            Ok(()) => {
                disk.durable.store(batch.first + batch.count as u64 - 1, Ordering::Release);
                for w in batch.waiters {
                    let _ = w.send(true);
                }
            }
            Err(e) => self.roll_back(disk, seg, &e, batch.waiters),
        }
    }

    /// After a failed write: cut the journal back to its last durable frame, rebuild memory from disk (nothing
    /// unacknowledged stays applied), fail every waiting operation, refuse writes until a probe succeeds.
    fn roll_back(&self, disk: &Disk, seg: &mut Segment, err: &std::io::Error, failed: Vec<tokio::sync::oneshot::Sender<bool>>) {
        let mut st = self.state.lock();
        // Everything queued since was applied on top of the failed records: it goes too.
        let later = disk.queue.lock().take();
        let durable = disk.durable.load(Ordering::Acquire);
        *disk.last_error.lock() = err.to_string();
        disk.mode.store(MODE_FAILED, Ordering::Release);
        tracing::error!(dir = %disk.dir.display(), error = %err, durable_lsn = durable,
            "journal write failed: unacknowledged changes rolled back; changes refused until the disk can be written");
        if let Err(e) = seg.cut() {
            tracing::error!(file = %seg.path.display(), error = %e, "cannot cut the journal back to its last durable frame");
        }
        match journal::recover(&disk.dir, Some(durable), false).and_then(|r| State::rebuild(&r)) {
            Ok(state) => *st = state,
            // The files could not be read back: keep refusing writes; what is in memory may hold changes that
            // were never acknowledged (no one was told they succeeded).
            Err(e) => tracing::error!(error = %e, "cannot rebuild the state from the data dir after a write error"),
        }
        disk.appended.store(durable, Ordering::Release);
        drop(st);
        for w in failed.into_iter().chain(later.waiters) {
            let _ = w.send(false);
        }
    }

    /// After a failure: the journal can be cut and synced, and there is room again → accept writes.
    fn probe(&self, disk: &Disk, seg: &mut Segment) {
        let ok = seg.cut().is_ok() && disk.free().is_ok_and(|f| f >= disk.opts.reserve_bytes.max(64 << 10));
        if ok {
            disk.mode.store(MODE_OK, Ordering::Release);
            tracing::info!(dir = %disk.dir.display(), "data dir writable again: changes accepted");
            disk.check_space();
        }
    }

    /// Starts a new journal and writes a snapshot of the state up to its first record on another thread;
    /// once the snapshot is durable, the journals it covers are removed.
    fn rotate(&self, disk: &Disk, seg: &mut Segment) -> Option<std::thread::JoinHandle<()>> {
        // Under the state lock no record can be added: the snapshot is the state after LSN `upto`, and
        // every record up to `upto` is in this batch or already on disk.
        let (snap, upto, batch) = {
            let st = self.state.lock();
            let upto = disk.appended.load(Ordering::Acquire);
            let batch = disk.queue.lock().take();
            (st.to_snap(), upto, batch)
        };
        self.commit(disk, seg, batch);
        if disk.durable.load(Ordering::Acquire) != upto {
            return None; // the batch failed and was rolled back
        }
        let next = match Segment::create(&disk.dir, upto + 1) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(dir = %disk.dir.display(), error = %e, "cannot start a new journal; snapshot postponed");
                return None;
            }
        };
        *seg = next;
        let dir = disk.dir.clone();
        let started = Instant::now();
        std::thread::Builder::new()
            .name("wicket-snapshot".into())
            .spawn(move || {
                let written = serde_json::to_vec(&snap)
                    .map_err(std::io::Error::other)
                    .and_then(|payload| journal::write_snapshot(&dir, upto, &payload));
                match written.and_then(|n| journal::remove_covered(&dir, upto, upto + 1).map(|()| n)) {
                    Ok(bytes) => tracing::info!(dir = %dir.display(), lsn = upto, bytes, ms = started.elapsed().as_millis() as u64, "snapshot written"),
                    Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "snapshot failed; the journals stay (start-up replays them)"),
                }
            })
            .ok()
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        if let Some(disk) = &self.inner.disk {
            disk.queue.lock().stop = true;
            disk.wake.notify_one();
        }
        if let Some(h) = self.writer.take() {
            let _ = h.join();
        }
    }
}

impl Default for EmbeddedStore {
    fn default() -> Self {
        Self::new()
    }
}

impl EmbeddedStore {
    /// The in-memory store (`store = "memory"`): state lives and dies with the process.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        EmbeddedStore { inner: Arc::new(Inner { state: Mutex::new(State::default()), clock, disk: None }), writer: None }
    }

    /// The durable store on `dir` (`store = "embedded"`): locks the dir, rebuilds the state from its files
    /// (cutting a torn last write), and starts the journal writer. Errors say what is wrong with the dir.
    pub fn open(dir: &Path, opts: DiskOptions) -> Result<Self, String> {
        Self::open_with_clock(dir, opts, Arc::new(SystemClock))
    }

    pub fn open_with_clock(dir: &Path, opts: DiskOptions, clock: Arc<dyn Clock>) -> Result<Self, String> {
        let started = Instant::now();
        let lock = journal::lock_dir(dir)?;
        let rec = journal::recover(dir, None, true)?;
        if let Some(torn) = &rec.torn {
            tracing::warn!("{torn}");
        }
        let state = State::rebuild(&rec)?;
        let seg = match &rec.segment {
            Some((path, first, len)) => Segment::open(path.clone(), *first, *len),
            None => Segment::create(dir, rec.last_lsn + 1),
        }
        .map_err(|e| format!("data-dir {}: cannot open the journal: {e}", dir.display()))?;
        let orders: usize = state.events.values().map(|e| e.orders.len()).sum();
        tracing::info!(
            dir = %dir.display(),
            events = state.events.len(),
            orders,
            snapshot_lsn = rec.snapshot.as_ref().map(|s| s.0),
            journal_records = rec.records.len(),
            ms = started.elapsed().as_millis() as u64,
            "embedded store recovered from its data dir"
        );
        let disk = Disk {
            dir: dir.to_path_buf(),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            appended: AtomicU64::new(rec.last_lsn),
            durable: AtomicU64::new(rec.last_lsn),
            mode: AtomicU8::new(MODE_OK),
            test_free: opts.test_free_bytes.map(AtomicU64::new),
            opts,
            last_error: Mutex::new(String::new()),
        };
        let inner = Arc::new(Inner { state: Mutex::new(state), clock, disk: Some(disk) });
        let writer_inner = inner.clone();
        let writer = std::thread::Builder::new()
            .name("wicket-journal".into())
            .spawn(move || writer_inner.write_loop(seg, lock))
            .map_err(|e| format!("cannot start the journal writer thread: {e}"))?;
        Ok(EmbeddedStore { inner, writer: Some(writer) })
    }

    /// The data dir, when durable.
    pub fn data_dir(&self) -> Option<&Path> {
        self.inner.disk.as_ref().map(|d| d.dir.as_path())
    }

    /// Fault injection for tests of the reconciler: moves a pool's `available` counter by `delta` without
    /// any order, as a bug or a hand edit would. In memory only (never journaled).
    #[doc(hidden)]
    pub fn tamper_available(&self, event: &str, pool: &str, delta: i64) {
        let mut st = self.inner.state.lock();
        if let Some(p) = st.events.get_mut(event).and_then(|e| e.pools.get_mut(pool)) {
            p.available = p.available.saturating_add_signed(delta);
        }
    }

    /// Runs a state-changing operation; in durable mode, answers once its record is on disk.
    async fn mutate(&self, op: Op) -> Result<Answer, StoreError> {
        let now = self.inner.clock.now_ms();
        let Some(disk) = &self.inner.disk else {
            let mut st = self.inner.state.lock();
            return st.apply(&op, now, true).map(|(a, _)| a).map_err(|NeedsWrite| StoreError::Internal("refused".into()));
        };
        // Encoded before the lock is taken: the lock is held only to apply and queue.
        let record = serde_json::to_vec(&RecordRef { now, op: &op }).map_err(|e| StoreError::Internal(e.to_string()))?;
        let may_write = disk.may_write(&op);
        let (answer, wait) = {
            let mut st = self.inner.state.lock();
            match st.apply(&op, now, may_write) {
                Err(NeedsWrite) => return Err(disk.refusal()),
                Ok((answer, true)) => (answer, Some(disk.push(&record))),
                Ok((answer, false)) => (answer, disk.pending()),
            }
        };
        if let Some(rx) = wait {
            disk.settle(rx).await?;
        }
        Ok(answer)
    }

    /// Reads the state; in durable mode, answers once everything the read saw is on disk. When what it saw
    /// was rolled back instead (a write error), memory now holds only what is on disk: the read is done again.
    async fn read<T>(&self, f: impl Fn(&mut State) -> T) -> Result<T, StoreError> {
        for _ in 0..READ_TRIES {
            let (value, wait) = {
                let mut st = self.inner.state.lock();
                let value = f(&mut st);
                (value, self.inner.disk.as_ref().and_then(Disk::pending))
            };
            let undone = match wait {
                Some(rx) => rx.await != Ok(true),
                None => false,
            };
            if !undone {
                return Ok(value);
            }
        }
        let last_error = self.inner.disk.as_ref().map(|d| d.last_error.lock().clone()).unwrap_or_default();
        Err(StoreError::ReadOnly(format!(
            "writing to the data dir keeps failing ({last_error}): what this read saw was rolled back {READ_TRIES} \
             times; retry later"
        )))
    }
}

fn unexpected() -> StoreError {
    StoreError::Internal("the embedded store answered another operation".into())
}

#[async_trait]
impl SaleStore for EmbeddedStore {
    async fn now_ms(&self) -> Result<i64, StoreError> {
        Ok(self.inner.clock.now_ms())
    }

    async fn put_event(&self, id: &str, spec: &EventSpec, force: bool) -> Result<PutEventOutcome, StoreError> {
        match self.mutate(Op::PutEvent { id: id.to_string(), spec: spec.clone(), force }).await? {
            Answer::Put(o) => Ok(o),
            _ => Err(unexpected()),
        }
    }

    async fn get_event(&self, id: &str) -> Result<Option<EventRecord>, StoreError> {
        self.read(|st| st.events.get(id).map(|e| EventRecord { id: id.to_string(), spec: e.spec.clone(), paused: e.paused }))
            .await
    }

    async fn list_events(&self) -> Result<Vec<String>, StoreError> {
        self.read(|st| st.events.keys().cloned().collect()).await
    }

    async fn set_paused(&self, id: &str, paused: bool) -> Result<bool, StoreError> {
        match self.mutate(Op::SetPaused { id: id.to_string(), paused }).await? {
            Answer::Paused(p) => Ok(p),
            _ => Err(unexpected()),
        }
    }

    async fn stock(&self, id: &str) -> Result<Option<StockView>, StoreError> {
        let now = self.inner.clock.now_ms();
        self.read(|st| st.events.get(id).map(|ev| ev.stock(now))).await
    }

    async fn hold(&self, req: &HoldRequest) -> Result<HoldOutcome, StoreError> {
        match self.mutate(Op::Hold(req.clone())).await? {
            Answer::Hold(o) => Ok(o),
            _ => Err(unexpected()),
        }
    }

    async fn find_replay(
        &self,
        event: &str,
        user: &str,
        idempotency_key: &str,
        fingerprint: &str,
    ) -> Result<Option<HoldOutcome>, StoreError> {
        let idem_key = format!("{user}\n{idempotency_key}");
        self.read(|st| st.events.get(event).and_then(|ev| replay_of(ev, &idem_key, fingerprint))).await
    }

    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError> {
        let Some(event) = event_of_order(order_id) else { return Ok(None) };
        self.read(|st| st.events.get(event).and_then(|e| e.orders.get(order_id)).cloned()).await
    }

    async fn pay(&self, req: &PaymentRequest) -> Result<PayOutcome, StoreError> {
        match self.mutate(Op::Pay(req.clone())).await? {
            Answer::Pay(o) => Ok(o),
            _ => Err(unexpected()),
        }
    }

    async fn close(&self, order_id: &str, reason: CloseReason) -> Result<TransitionOutcome, StoreError> {
        match self.mutate(Op::Close { order_id: order_id.to_string(), reason }).await? {
            Answer::Moved(o) => Ok(o),
            _ => Err(unexpected()),
        }
    }

    async fn redeem(&self, order_id: &str, pool: Option<&str>) -> Result<TransitionOutcome, StoreError> {
        match self.mutate(Op::Redeem { order_id: order_id.to_string(), pool: pool.map(str::to_string) }).await? {
            Answer::Moved(o) => Ok(o),
            _ => Err(unexpected()),
        }
    }

    async fn refund(&self, order_id: &str) -> Result<TransitionOutcome, StoreError> {
        match self.mutate(Op::Refund { order_id: order_id.to_string() }).await? {
            Answer::Moved(o) => Ok(o),
            _ => Err(unexpected()),
        }
    }

    async fn due_holds(&self, event: &str, limit: usize) -> Result<Vec<(String, i64)>, StoreError> {
        let now = self.inner.clock.now_ms();
        self.read(|st| {
            let Some(ev) = st.events.get(event) else { return Vec::new() };
            ev.deadlines.iter().take_while(|(d, _)| *d <= now).take(limit).map(|(d, id)| (id.clone(), *d)).collect()
        })
        .await
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
        self.read(|st| {
            let Some(ev) = st.events.get(event) else { return (Vec::new(), None) };
            let start = match &after {
                None => Bound::Unbounded,
                Some(a) => Bound::Excluded(a),
            };
            let page: Vec<(String, i64)> =
                ev.deadlines.range((start, Bound::Unbounded)).take(count.max(1)).map(|(d, id)| (id.clone(), *d)).collect();
            let next = match page.last() {
                Some((id, d))
                    if ev.deadlines.range((Bound::Excluded(&(*d, id.clone())), Bound::Unbounded)).next().is_some() =>
                {
                    Some(format!("{d}:{id}"))
                }
                _ => None,
            };
            (page, next)
        })
        .await
    }

    fn is_external(&self) -> bool {
        false
    }

    fn recheck_at_start(&self) -> bool {
        self.inner.disk.is_some()
    }

    async fn server_ids(&self) -> Result<Vec<super::ServerId>, StoreError> {
        Ok(Vec::new())
    }

    async fn outbox(&self, event: &str, after: Option<&str>, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let after = match after {
            None => (0, 0),
            Some(c) => parse_cursor(c).ok_or_else(|| StoreError::Internal(format!("bad cursor {c}")))?,
        };
        self.read(|st| {
            let Some(ev) = st.events.get(event) else { return Vec::new() };
            let start = ev.outbox.partition_point(|e| parse_cursor(&e.cursor).is_some_and(|c| c <= after));
            ev.outbox[start..].iter().take(limit.min(MAX_OUTBOX_PAGE)).cloned().collect()
        })
        .await
    }

    async fn reconcile(&self, event: &str) -> Result<Option<ReconcileReport>, StoreError> {
        self.read(|st| {
            let ev = st.events.get(event)?;
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
            Some(reconcile_from(&ev.stock(0), &held, &sold))
        })
        .await
    }

    async fn try_lease(&self, name: &str, holder: &str, ttl_ms: u64) -> Result<bool, StoreError> {
        // Not journaled: a lease coordinates live processes, and a restarted one holds none.
        let now = self.inner.clock.now_ms();
        let mut st = self.inner.state.lock();
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
