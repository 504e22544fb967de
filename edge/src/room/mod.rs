//! The waiting room (DESIGN §3, docs/src/api.md "Edge"): queue tickets, status, one-time admission tokens,
//! active sessions, and the release loop that advances the queue at the controller's rate.
//!
//! # Layout
//! - [`config`]: a room's config (`[[rooms]]`, admin body), defaults, validation with paths.
//! - [`state`]: the [`state::RoomState`] trait and its embedded implementation (counters, not lists).
//! - [`redis`]: the Redis implementation (several edges, one queue, a leader with a lease), every
//!   key of a room in one Cluster slot (`layout = "single"`, the default).
//! - [`spread`]: a room spread across a Redis Cluster (`layout = "spread"`): places ordered by
//!   arrival time bucket and edge, identities and sessions sharded across slots, joins written in
//!   batches.
//! - [`state_backend`] (inline below): which of the two new rooms get, embedded or one shared Redis
//!   connection.
//! - [`ticket`]: the signed `wicket_q_<room>` cookie.
//! - [`mode`]: the operator's mode of a room, one machine (open, paused, queue-all, reject-all),
//!   separate from its release settings; published to the other edges by compare-and-set.
//! - [`tester`]: the signed `wicket_t_<room>` cookie of a tester (a room in test mode meets only them).
//! - [`shuffle`]: the random method's O(1) permutation of the pre-queue.
//! - [`http`]: `/queue/<room>[/join|/status|/events|/challenge]` on the public port, with the
//!   handles the edge lends it ([`lent`]: `QueueEdge`), never the edge's whole state.
//! - [`events`]: an open event stream's state between frames ([`events::EventFrames`], served by
//!   the HTTP/1.1 door for queued fans and by [`http`] for the rest) and the edge's budget of open
//!   streams ([`events::StreamBudget`]).
//! - [`page`]: the queue page rendered on the server for each visit (`[edge.queue-page]` template,
//!   the fan's language, the room's branding and real figures).
//! - [`admin`]: `/admin/rooms...` and `/admin/stream` on the admin port.
//! - [`invite`]: the invite lane (presale, invite-only rooms): codes (hashed, one use each, bound
//!   to the identity that redeems them) and allowlisted users, embedded or in Redis. Its share of
//!   each release (`share`) is a second pair of counters in [`state`] (lane places), moved by the
//!   [`release`] loop with the rest.
//!   [`invite_http`]: the fan's `/queue/<room>/invite` and invite page; [`invite_admin`]:
//!   `/admin/rooms/<room>/invites...`.
//! - [`claims`]: admission is a promise — the tickets promised to the fans let in, counted before
//!   the release lets in more.
//! - [`told`]: the poll intervals a status answer tells a waiting place, and the record of them
//!   that bounds a release step's pickup window.
//! - [`release`]: the background service ticking every room once a second (controller, batches,
//!   sold-out and core metrics polls, leader lease), and stepping between ticks the rooms whose
//!   step the promises held back.
//! - [`tally`]: the post-sale report's per-minute counts (atomics, flushed by the release loop)
//!   and where they are kept (in this process, or in Redis with the room's state).
//! - [`report`]: the post-sale report served (`GET /admin/rooms/<room>/report`), and the hooks
//!   that count a session's first use and refusals on a room's paths.
//! - `tests`: the rooms' unit tests on the embedded state (the Redis state runs the same checks in
//!   edge/tests/room_redis.rs; the two states' conformance suite is edge/tests/common/room_state.rs).
//!
//! # The path of a visitor
//! `GET /queue/r` → (bot check when the room asks) → [`Rooms::join`]: the identity's place, or a new
//! one from the room's counter, in a signed ticket → status polls ([`Rooms::status`]) compare the
//! ticket's place (shuffled for pre-queue joiners of a `random` room) with `serving` → once at or
//! before it, an admission token (JWT from the `[tokens]` signing key) opens a session counted
//! against `total_active_max` → protected paths check the token *and* the session
//! ([`Rooms::session_ok`]); `Wicket-Revoke: 1` or the session's end spends the place.

pub mod admin;
pub mod claims;
pub mod config;
pub mod events;
pub mod http;
pub mod invite;
pub mod invite_admin;
pub mod invite_http;
pub mod lent;
pub mod mode;
pub mod page;
pub mod redis;
pub mod release;
pub mod report;
pub mod shuffle;
pub mod spread;
pub mod state;
pub mod tester;
pub mod tally;
pub mod ticket;
pub mod told;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde_json::json;
use told::{JITTER_MAX, NEAR_POLL_MS, eta_poll_ms, no_rate_poll_ms, not_open_poll_ms, spoken_for_poll_ms};
use wicket_core::token::Keyring;

use crate::admission::{ProtectedRule, ProtectionTable, TokensConfig};
use crate::check::{ConfigIssue, resolve};
use crate::controller::{Bounds, ControllerConfig, Decision, LatencyWindow, ReleaseController, ReleaseMode};
use crate::identity::Signer;
use config::{QueueMethod, QueueWhen, ReleaseModeConfig, RoomSpec};
use shuffle::Shuffle;
use state::{RoomState, StateError, Who};
use ticket::QueueTicket;

/// Prefix of the waiting room's paths: site-wide limits do not count them (they have their own).
pub const QUEUE_PREFIX: &str = "/queue/";

/// Wall clock, Unix ms.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// One room: its spec, its state and its controller.
pub struct Room {
    /// Room id.
    pub id: String,
    spec: RwLock<Arc<RoomSpec>>,
    /// Shared counters and sessions.
    pub state: Arc<dyn RoomState>,
    /// The release controller (operator overrides live in its mode).
    pub controller: Mutex<ReleaseController>,
    /// The core says the linked event is sold out.
    pub sold_out: AtomicBool,
    /// When the room last began telling its waiting places what no pickup window bounds (sold
    /// out, paused, queue-all, reject-all), Unix ms (0: never): set as it happens, between ticks, so
    /// a spell shorter than a tick still reaches [`told::Told`] ([`Room::note_unbounded`]).
    unbounded_at_ms: AtomicU64,
    /// The operator's mode and the release settings ([`mode`]): the controller runs what they say
    /// ([`mode::Operator::controller_mode`]).
    operator: Mutex<mode::Operator>,
    /// `operator`'s mode ([`mode::Mode::code`]), mirrored so status polls take no lock.
    hold: AtomicU8,
    /// The linked core event's `opens_at` / `closes_at` (Unix s; `i64::MIN`: not known yet), read
    /// by the release loop: the room never lets anyone in before its event opens.
    core_opens_at: AtomicI64,
    core_closes_at: AtomicI64,
    /// Sold out, but tickets sit in unpaid holds: they return to sale if those orders time out,
    /// so the queue keeps its places and releases resume when stock comes back.
    pub restock_possible: AtomicBool,
    /// Tickets are left, but all promised to fans let in already ([`claims`]): the queue says sold
    /// out for now and keeps its places; set by the leader's tick (a follower edge shows what its
    /// own tick saw: nothing released, so not spoken for).
    pub spoken_for: AtomicBool,
    /// Steps between ticks that a hold answered through this edge woke ([`Rooms::hold_answered`]),
    /// since the edge started (stats `claims.woken_by_holds`).
    pub hold_wakes: AtomicU64,

    /// Most units any of the event's SKUs can still sell (the core's last stock answer;
    /// `u64::MAX` before the first): a tick never releases more people than that.
    pub available: AtomicU64,
    /// Tickets in unpaid holds and tickets sold, over every pool of the event (the core's last
    /// stock answer; `u64::MAX` before the first), for the `wicket_room_stock_*` gauges.
    pub held: AtomicU64,
    pub sold: AtomicU64,
    /// Holds ever made for the event and their tickets (the core's last stock answer; `None`
    /// before the first): what settles the promises of [`claims`]. Written after `available`, and
    /// read before it, so a tick never pairs new holds with an older, larger `available`.
    pub holds: Mutex<Option<(u64, u64)>>,
    /// Current release rate, admissions/s × 1000 (the controller's last decision).
    rate_milli: AtomicU64,
    /// Measured release rate (serving advance per second, smoothed) × 1000: the ETA's base.
    measured_milli: AtomicU64,
    /// Active sessions at the last sweep.
    pub active: AtomicU64,
    /// This edge leads the room (advances `serving`).
    pub leader: AtomicBool,
    /// The last tick's decision, for stats.
    pub last_decision: Mutex<Option<Decision>>,
    /// What the last tick saw (for the stats).
    pub last_input: Mutex<Option<crate::controller::TickInput>>,
    /// The core's own P99 between the last two reads of its /metrics, µs (`u64::MAX`: none).
    pub core_p99_us: AtomicU64,
    /// Sessions this edge told the room state it saw, and when (throttles [`Rooms::touch`]);
    /// [`USE_NOTED`] set once the session's use was told to the report ([`Rooms::note_use`]).
    touched: dashmap::DashMap<Who, u64>,
    /// The post-sale report: this edge's counts and where they are kept.
    pub report: tally::RoomReport,
    /// Joins and admissions on this edge (stats).
    pub joins: AtomicU64,
    /// Admission tokens issued on this edge.
    pub admissions: AtomicU64,
    /// Passthrough admissions of this edge in the current minute: (minute, count).
    passed: Mutex<(u64, u64)>,
    /// The release loop's bookkeeping between ticks.
    pub(crate) book: Mutex<ReleaseBook>,
    /// The stamp of the operator override this edge made or applied last (0: none), so each
    /// published override is applied once ([`Room::apply_override`]).
    override_stamp: AtomicU64,
    /// Why the room config another edge published last was not applied here (a field this edge
    /// does not know, a problem): the room runs on with the config it had ([`Rooms::sync_specs`]).
    pub sync_problem: Mutex<Option<String>>,
    /// Bumped when what every queued fan sees may have changed (the operator's mode, reject-all,
    /// the spec, sold out or stock back): the room's event streams wait on it beside their
    /// one-second look ([`Room::pulse`]), so such a change reaches every open stream at once.
    pulse: tokio::sync::watch::Sender<u64>,
    /// The front of the queue (`serving`, `lane_serving`) as this edge last saw it move: a step
    /// of this edge's release, or a tick reading another edge's. The streams of places near the
    /// front wait on it beside their one-second look ([`Room::front`]), so a fan whose turn came
    /// hears it at once, not up to a second later — at the tail of a sale each round of the last
    /// tickets (let in, admitted, held) waited for that second.
    front: tokio::sync::watch::Sender<(u64, u64)>,
}

pub use mode::OperatorOverride;

/// Where an operator's action took effect ([`Rooms::operate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operated {
    /// On every edge sharing the room (published), or the room has no other edge.
    Shared,
    /// On this edge only: the shared store did not take it (why).
    Local(String),
}

/// What the release loop ([`release`]) remembers about a room between ticks.
#[derive(Debug, Default)]
pub struct ReleaseBook {
    /// Fraction of an admission carried to the next tick.
    pub carry: f64,
    /// Fraction of the invite lane's part carried to the next tick (`[rooms.invite] share`).
    pub lane_carry: f64,
    /// Batches already released (they are sorted by time).
    pub batches_done: usize,
    /// Places passed at the last tick ([`state::RoomState::passed`]), for the measured release rate.
    pub last_passed: Option<u64>,
    /// The tickets promised to the places this edge released lately ([`claims`]).
    pub claims: claims::Claims,
    /// The book kept in the room's store was empty at the last keep, at `kept_at_ms` (this edge's
    /// Unix ms): written again only every [`release::EMPTY_BOOK_EVERY_MS`] until something is
    /// promised, so a quiet room's book (where `serving` stood) never lapses.
    pub kept_empty: bool,
    pub kept_at_ms: u64,
    /// Time of the last tick that reached its release step, Unix ms (a failed tick keeps the old
    /// one: the next step is capped at [`release::MAX_STEP_MS`]).
    pub last_tick_ms: u64,
    /// Time of this edge's last renewal of the leader lease, Unix ms: renewals that stopped for
    /// longer than the lease make the next one a takeover ([`Rooms::tick_room`]).
    pub led_at_ms: u64,
    /// What the room told its waiting places lately, one entry a tick: bounds each step's pickup
    /// window ([`told::Told`]).
    pub told: told::Told,
    /// The places past the book's last step are to be promised at the next read of `serving`
    /// ([`claims::Claims::unkept`]): this edge took the lease, or a step's answer never came.
    pub unkept_due: bool,
    /// Admissions the last tick's step was allowed (its rate, batches and session cap) that the
    /// tickets already promised held back: let in between ticks as holds settle the promises
    /// ([`Rooms::step_between`]); the next tick starts over.
    pub held_back: u64,
}

impl Room {
    fn new(spec: RoomSpec, state: Arc<dyn RoomState>, report: tally::RoomReport) -> Self {
        let mut controller = ReleaseController::new(controller_config(&spec));
        let operator = operator_of(&spec);
        controller.set_mode(0, operator.controller_mode());
        Room {
            id: spec.id.clone(),
            spec: RwLock::new(Arc::new(spec.clone())),
            state,
            controller: Mutex::new(controller),
            sold_out: AtomicBool::new(false),
            unbounded_at_ms: AtomicU64::new(0),
            operator: Mutex::new(operator),
            hold: AtomicU8::new(mode::Mode::Open.code()),
            core_opens_at: AtomicI64::new(i64::MIN),
            core_closes_at: AtomicI64::new(i64::MIN),
            restock_possible: AtomicBool::new(false),
            spoken_for: AtomicBool::new(false),
            hold_wakes: AtomicU64::new(0),
            available: AtomicU64::new(u64::MAX),
            held: AtomicU64::new(u64::MAX),
            sold: AtomicU64::new(u64::MAX),
            holds: Mutex::new(None),
            rate_milli: AtomicU64::new(0),
            measured_milli: AtomicU64::new(0),
            active: AtomicU64::new(0),
            override_stamp: AtomicU64::new(0),
            pulse: tokio::sync::watch::Sender::new(0),
            front: tokio::sync::watch::Sender::new((0, 0)),
            leader: AtomicBool::new(false),
            last_decision: Mutex::new(None),
            last_input: Mutex::new(None),
            core_p99_us: AtomicU64::new(u64::MAX),
            touched: dashmap::DashMap::new(),
            report,
            joins: AtomicU64::new(0),
            admissions: AtomicU64::new(0),
            passed: Mutex::new((0, 0)),
            book: Mutex::new(ReleaseBook::default()),
            sync_problem: Mutex::new(None),
        }
    }

    /// The current spec.
    pub fn spec(&self) -> Arc<RoomSpec> {
        self.spec.read().clone()
    }

    /// Replaces the spec (admin PUT); the controller keeps its state. Release settings that changed
    /// take over the pace and bounds (the operator's mode stays: a new config never lifts a pause
    /// or a reject-all); a new schedule alone leaves the release settings in force as they are.
    pub fn set_spec(&self, spec: RoomSpec) {
        let release_changed = self.spec().config.release != spec.config.release;
        {
            let mut op = self.operator.lock();
            if release_changed {
                let from_spec = operator_of(&spec);
                (op.pace, op.min, op.max) = (from_spec.pace, from_spec.min, from_spec.max);
            }
            let mut c = self.controller.lock();
            let bounds = Bounds { min_rate: op.min, max_rate: op.max, ..controller_config(&spec).bounds };
            c.set_bounds(unix_ms(), bounds);
            c.set_mode(unix_ms(), op.controller_mode());
        }
        *self.spec.write() = Arc::new(spec);
        self.changed();
    }

    /// The room begins telling its waiting places what no pickup window bounds (sold out, a
    /// mode other than open), at `now_ms`: the next tick records it ([`told::Told`]) even if the
    /// spell is over by then.
    pub fn note_unbounded(&self, now_ms: u64) {
        self.unbounded_at_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// When the room last began an unbounded telling ([`Room::note_unbounded`]; 0: never).
    pub fn unbounded_at_ms(&self) -> u64 {
        self.unbounded_at_ms.load(Ordering::Relaxed)
    }

    /// Tells the room's event streams that what a queued fan sees may have changed.
    pub fn changed(&self) {
        self.pulse.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// What an event stream waits on beside its timer: changes after this call ([`Room::changed`]).
    pub fn pulse(&self) -> tokio::sync::watch::Receiver<u64> {
        self.pulse.subscribe()
    }

    /// The front of the queue is at (`serving`, `lane_serving`) now: the streams waiting on
    /// [`Room::front`] wake when it moved.
    pub(crate) fn front_at(&self, serving: u64, lane_serving: u64) {
        self.front.send_if_modified(|f| std::mem::replace(f, (serving, lane_serving)) != (serving, lane_serving));
    }

    /// What the streams of places near the front wait on beside their timer: the front moving
    /// after this call ([`Room::front_at`]).
    pub fn front(&self) -> tokio::sync::watch::Receiver<(u64, u64)> {
        self.front.subscribe()
    }

    /// Admissions per second the release runs at now.
    pub fn release_rate(&self) -> f64 {
        self.rate_milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    pub(crate) fn set_release_rate(&self, r: f64) {
        self.rate_milli.store((r.max(0.0) * 1000.0) as u64, Ordering::Relaxed);
    }

    /// Measured positions released per second.
    pub fn measured_rate(&self) -> f64 {
        self.measured_milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    pub(crate) fn set_measured_rate(&self, r: f64) {
        self.measured_milli.store((r.max(0.0) * 1000.0) as u64, Ordering::Relaxed);
    }

    /// The mode the release controller runs (the operator's mode and pace together).
    pub fn mode(&self) -> ReleaseMode {
        self.controller.lock().mode()
    }

    /// The operator's mode ([`mode`]; lock-free).
    pub fn operator_mode(&self) -> mode::Mode {
        mode::Mode::from_code(self.hold.load(Ordering::Relaxed))
    }

    /// The operator's machine now: mode, pace and bounds.
    pub fn operator(&self) -> mode::Operator {
        *self.operator.lock()
    }

    /// Makes `next` the room's state under `stamp` (the stamp of the published override that
    /// carries it: an edge applies each stamp once).
    fn install(&self, now_ms: u64, op: &mut mode::Operator, next: mode::Operator, stamp: u64) {
        {
            let mut c = self.controller.lock();
            let bounds = Bounds { min_rate: next.min, max_rate: next.max, ..c.config().bounds };
            c.set_bounds(now_ms, bounds);
            c.set_mode(now_ms, next.controller_mode());
        }
        *op = next;
        if next.mode != mode::Mode::Open {
            self.note_unbounded(now_ms);
        }
        self.hold.store(next.mode.code(), Ordering::Relaxed);
        self.override_stamp.store(stamp, Ordering::Relaxed);
        self.changed();
    }

    /// Carries out an operator's action on this edge (the embedded state's rooms, which have no
    /// other edge); the state after it, as an override under a new stamp.
    pub fn operate(&self, now_ms: u64, action: mode::Action) -> Result<OperatorOverride, mode::Refused> {
        let mut op = self.operator.lock();
        let next = op.apply(action)?;
        let stamp = new_stamp();
        self.install(now_ms, &mut op, next, stamp);
        Ok(next.publish(stamp))
    }

    /// Carries out an operator's action on this edge alone, when the shared store cannot be
    /// reached ([`Rooms::operate`]): the stamp of the override applied last stays, so that same
    /// override is not applied again when the store answers (it would undo an emergency stop made
    /// while it did not); the next override published by any edge replaces this state.
    pub(crate) fn operate_here(&self, now_ms: u64, action: mode::Action) -> Result<(), mode::Refused> {
        let mut op = self.operator.lock();
        let next = op.apply(action)?;
        let stamp = self.override_stamp.load(Ordering::Relaxed);
        self.install(now_ms, &mut op, next, stamp);
        Ok(())
    }

    /// The state in force now as an override, under the stamp it was installed with.
    pub fn operator_override(&self) -> OperatorOverride {
        self.operator().publish(self.override_stamp.load(Ordering::Relaxed))
    }

    /// Applies an override another edge published, once per stamp; false when already applied
    /// or not understood.
    pub fn apply_override(&self, now_ms: u64, o: &OperatorOverride) -> bool {
        if self.override_stamp.load(Ordering::Relaxed) == o.stamp {
            return false;
        }
        let mut op = self.operator.lock();
        let Some(next) = o.read(&op) else { return false };
        self.install(now_ms, &mut op, next, o.stamp);
        true
    }

    /// Whether the room turns everyone away (its `reject-all` setting, or the operator's run-time
    /// switch): nobody new is queued, nobody queued is admitted, and fans without a running
    /// session get the closed page. Sessions admitted before keep running until they end.
    pub fn rejecting(&self) -> bool {
        self.operator_mode() == mode::Mode::RejectAll || self.spec.read().config.reject_all
    }

    /// Whether the room is in test mode (`test-mode`): only testers meet it.
    pub fn test_mode(&self) -> bool {
        self.spec.read().config.test_mode
    }

    /// Whether a ticket (signature already checked) still names a place in this room's queue:
    /// [`Room::ticket_fresh`], and not issued before the room state began (an edge with embedded
    /// room state that restarted holds none of the places it gave out before: those tickets get
    /// "no valid queue ticket: join first", never a place that someone else now holds).
    pub fn ticket_valid(&self, issued_at: u64, now_s: u64) -> bool {
        issued_at >= self.state.epoch_s() && self.ticket_fresh(issued_at, now_s)
    }

    /// Whether a ticket issued at `issued_at` (Unix s) may still be used at `now_s`: not from the
    /// future, and not older than the room's longest possible wait (from its pre-queue or opening
    /// to its closing; a week when it never closes — a ticket cookie lives at most that long).
    pub fn ticket_fresh(&self, issued_at: u64, now_s: u64) -> bool {
        let spec = self.spec();
        let (opens, closes) = self.window(&spec);
        let start = spec.prequeue_at.or(opens);
        let longest = match (start, closes) {
            (Some(a), Some(b)) if b > a => (b - a) as u64 + 3600,
            _ => 7 * 86_400,
        };
        issued_at <= now_s + 60 && now_s.saturating_sub(issued_at) <= longest
    }

    /// True when this edge told the room state about `who` less than a quarter of the idle window
    /// ago ([`Rooms::touch`] skips the write then).
    pub fn touched_recently(&self, who: Who, now_ms: u64) -> bool {
        let quarter = self.spec().config.session_idle_seconds * 250;
        self.touched.get(&who).is_some_and(|t| now_ms.saturating_sub(*t & !USE_NOTED) < quarter)
    }

    /// Whether this edge already told the report that `who`'s session was used.
    pub fn use_noted(&self, who: Who) -> bool {
        self.touched.get(&who).is_some_and(|t| *t & USE_NOTED != 0)
    }

    /// Remembers (while the session is remembered here) that its use was told to the report. A
    /// session not touched here yet is marked as touched long ago, so its next touch is written.
    pub fn mark_use_noted(&self, who: Who) {
        self.touched.entry(who).and_modify(|t| *t |= USE_NOTED).or_insert(USE_NOTED);
    }

    /// Forgets this edge's touches older than `before_ms` (the release loop's tick).
    pub fn forget_touches(&self, before_ms: u64) {
        self.touched.retain(|_, t| *t & !USE_NOTED >= before_ms);
    }

    /// Whether the operator paused releases (lock-free: status polls read it).
    pub fn is_paused(&self) -> bool {
        self.operator_mode() == mode::Mode::Paused
    }

    /// Whether the operator queues everyone (nothing released; lock-free).
    pub fn is_queue_all(&self) -> bool {
        self.operator_mode() == mode::Mode::QueueAll
    }

    /// When the room lets people in: the later of its own `opens-at` and its core event's
    /// `opens_at`, the earlier of the two closing times (Unix s).
    pub fn window(&self, spec: &RoomSpec) -> (Option<i64>, Option<i64>) {
        let known = |v: i64| (v != i64::MIN).then_some(v);
        let core_open = known(self.core_opens_at.load(Ordering::Relaxed));
        let core_close = known(self.core_closes_at.load(Ordering::Relaxed));
        let opens = match (spec.opens_at, core_open) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let closes = match (spec.closes_at, core_close) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (opens, closes)
    }

    /// Records the core event's schedule (the release loop's poll of `GET /v1/events/{event}`).
    pub fn set_core_window(&self, opens_at: Option<i64>, closes_at: Option<i64>) {
        let opens = self.core_opens_at.swap(opens_at.unwrap_or(i64::MIN), Ordering::Relaxed);
        let closes = self.core_closes_at.swap(closes_at.unwrap_or(i64::MIN), Ordering::Relaxed);
        if (opens, closes) != (opens_at.unwrap_or(i64::MIN), closes_at.unwrap_or(i64::MIN)) {
            self.changed();
        }
    }

    /// Where `position` (join order) stands in admission order.
    pub fn admission_order(&self, position: u64, c: &state::Counters) -> u64 {
        match (self.spec().config.method, c.prequeue) {
            (QueueMethod::Random, Some(n)) => Shuffle::new(n, c.shuffle_key).apply(position),
            _ => position,
        }
    }

    /// Whether a passthrough room lets visitors straight in now (see [`Rooms::pass_through`]),
    /// this edge's count of the minute included.
    pub fn passing(&self, spec: &RoomSpec) -> bool {
        if spec.config.queue != QueueWhen::WhenNeeded
            || self.is_paused()
            || self.is_queue_all()
            || self.rejecting()
            || self.sold_out.load(Ordering::Relaxed)
        {
            return false;
        }
        let now_s = (unix_ms() / 1000) as i64;
        let (opens_at, closes_at) = self.window(spec);
        // Invite-only: everyone queues (the queue lets invitees alone take a place).
        if opens_at.is_some_and(|o| now_s < o) || closes_at.is_some_and(|c| now_s >= c) || spec.invite_only(now_s) {
            return false;
        }
        // This edge's straight-in budget of the minute (`new-per-minute`): once spent, visitors
        // queue for the rest of the minute.
        let minute = unix_ms() / 60_000;
        let passed = *self.passed.lock();
        if passed.0 == minute && passed.1 >= spec.config.passthrough.new_per_minute {
            return false;
        }
        let c = self.state.counters();
        c.issued <= c.serving && self.active.load(Ordering::Relaxed) < spec.config.passthrough.active_max
    }

    /// Stats for the admin API and the stream.
    pub fn stats(&self) -> serde_json::Value {
        let c = self.state.counters();
        let d = *self.last_decision.lock();
        let input = *self.last_input.lock();
        let spec = self.spec();
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        let claims = {
            let b = self.book.lock();
            json!({
                "open": b.claims.open(),
                "promised": b.claims.promised(u64::from(spec.config.max_qty)),
                "standby": b.claims.standby(),
                "spoken_for": self.spoken_for.load(Ordering::Relaxed),
                "woken_by_holds": self.hold_wakes.load(Ordering::Relaxed),
            })
        };
        json!({
            "core": {
                "p99_target_ms": spec.config.release.p99_target_ms,
                "p99_ms_edge": input.and_then(|i| i.p99_ms).map(round),
                "p99_ms_core": Some(self.core_p99_us.load(Ordering::Relaxed)).filter(|v| *v != u64::MAX).map(|us| us as f64 / 1000.0),
                "samples": input.map(|i| i.samples),
                "error_fraction": input.map(|i| round(i.error_fraction)),
                "utilisation": input.and_then(|i| i.utilisation).map(round),
                "metrics_age_ms": input.map(|i| i.metrics_age_ms),
            },
            "budget": d.map(|d| d.budget),
            "weight": spec.config.release.weight,
            "fair_share": input.and_then(|i| i.fair_share).map(round),
            "room": self.id,
            "event": self.spec().config.event,
            "mode": self.mode(),
            "operator_mode": self.operator_mode().name(),
            "issued": c.issued,
            "serving": c.serving,
            "queued": c.waiting(),
            "prequeue": c.prequeue,
            "active": self.active.load(Ordering::Relaxed),
            "release_per_second": self.release_rate(),
            "measured_release_per_second": self.measured_rate(),
            "window": {
                "opens_at": self.window(&spec).0.and_then(rfc3339),
                "closes_at": self.window(&spec).1.and_then(rfc3339),
            },
            "sold_out": self.sold_out.load(Ordering::Relaxed),
            "restock_possible": self.restock_possible.load(Ordering::Relaxed),
            "available": match self.available.load(Ordering::Relaxed) { u64::MAX => serde_json::Value::Null, n => n.into() },
            // Admission is a promise ([`claims`]; the leader's count, zero elsewhere): places let in
            // and not settled by a hold yet, the tickets promised to them, and whether every ticket
            // left is promised (the queue says sold out for now).
            "claims": claims,
            "leader": self.leader.load(Ordering::Relaxed),
            "joins": self.joins.load(Ordering::Relaxed),
            "admissions": self.admissions.load(Ordering::Relaxed),
            "queue": spec.config.queue,
            "layout": spec.config.layout,
            "passing": self.passing(&spec),
            "reject_all": self.rejecting(),
            "test_mode": spec.config.test_mode,
            // The invite lane's share of the release (`[rooms.invite] share`; null without one):
            // lane places given (in lane order), lane places let in by the lane, and lane places
            // `serving` has passed.
            "lane": spec.lane_share.map(|share| json!({
                "share": share,
                "issued": c.lane_issued,
                "serving": c.lane_serving,
                "passed": c.lane_passed,
            })),
            "tracked": self.state.tracked(),
            "decision": d,
            "config_sync_error": *self.sync_problem.lock(),
        })
    }
}

/// The bit of a [`Room`]'s `touched` entry saying the session's use was told to the report.
const USE_NOTED: u64 = 1 << 63;

/// A new stamp for a published override (never 0, the stamp of "none applied").
fn new_stamp() -> u64 {
    rand::random::<u64>() | 1
}

/// The operator's machine of a new room: open, at its config's pace and bounds.
fn operator_of(spec: &RoomSpec) -> mode::Operator {
    let r = &spec.config.release;
    let pace = match (r.mode, r.rate) {
        (ReleaseModeConfig::Fixed, rate) => mode::Pace::Fixed(rate.unwrap_or(0.0)),
        (ReleaseModeConfig::Auto, _) => mode::Pace::Auto,
    };
    mode::Operator { mode: mode::Mode::Open, pace, min: r.min, max: r.max }
}

/// The controller settings of a room.
pub fn controller_config(spec: &RoomSpec) -> ControllerConfig {
    let r = &spec.config.release;
    let bounds = Bounds { min_rate: r.min, max_rate: r.max, total_active_max: spec.config.total_active_max.map(|c| c as f64) };
    ControllerConfig::for_room(r.p99_target_ms, r.start, bounds)
}

/// The visitor's state in a room (docs/src/api.md status `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the sale opens (pre-queue).
    NotOpen,
    /// Queued.
    Waiting,
    /// In: the answer carries a token.
    Admitted,
    /// The operator paused releases.
    Paused,
    /// The core sold out.
    SoldOut,
    /// The room closed.
    Closed,
    /// The room turns everyone away for now (the operator's reject-all, or the config's
    /// `reject-all`): the place is kept, nobody is admitted until the room resumes.
    Stopped,
}

/// ETA band, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Eta {
    /// Optimistic.
    pub low: u64,
    /// Pessimistic.
    pub high: u64,
}

/// A status answer (docs/src/api.md `GET /queue/<room>/status`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// The visitor's state.
    pub state: Phase,
    /// Place in admission order.
    pub position: Option<u64>,
    /// People before it still waiting.
    pub ahead: Option<u64>,
    /// When it may be the visitor's turn.
    pub eta_seconds: Option<Eta>,
    /// When to ask again (jittered, longer far from the front).
    pub poll_after_ms: u64,
    /// Admissions per second now.
    pub release_per_second: f64,
    /// The admission token (admitted only; also set as the `wicket_a_<room>` cookie).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Where to go (admitted only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect: Option<String>,
    /// Seconds the token is valid (admitted only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_seconds: Option<u64>,
    /// `not_open` only: when the room opens (RFC 3339), for a countdown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opens_at: Option<String>,
    /// `sold_out` only: tickets in unpaid orders may still return to sale; the place is kept and
    /// the queue moves on when they do.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub restock_possible: bool,
    /// The room's bot check (`pow` or `captcha`) is still owed for this place: the place is kept,
    /// but it is not admitted until the check is given (`POST /queue/<room>/join` with the proof).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof_owed: Option<&'static str>,
    /// With `proof_owed` once the place's turn came: seconds left to give the check before the
    /// place is lost (the room's `proof-grace-seconds` from its turn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof_deadline_seconds: Option<u64>,
    /// The most tickets any of the event's SKUs can still sell, as the core last said
    /// ([`Room::available`]), rounded down for the fan ([`tickets_left`]); absent until the core
    /// has answered (or for a room whose event the core does not know), never a guess.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tickets_left: Option<u64>,
}

impl Status {
    /// The answer of a room that turns everyone away (reject-all) to a visitor without a place:
    /// `closed`, nobody queued.
    pub fn closed() -> Status {
        Status {
            state: Phase::Closed,
            position: None,
            ahead: None,
            eta_seconds: None,
            poll_after_ms: jitter(60_000),
            release_per_second: 0.0,
            token: None,
            redirect: None,
            token_seconds: None,
            opens_at: None,
            restock_possible: false,
            proof_owed: None,
            proof_deadline_seconds: None,
            tickets_left: None,
        }
    }

    /// Whether the visitor is queued: waiting, before the opening, paused, stopped for now, or
    /// sold out for now with the place kept (the states the room's `queuing-status-code` answers
    /// with).
    pub fn queued(&self) -> bool {
        matches!(self.state, Phase::Waiting | Phase::NotOpen | Phase::Paused | Phase::Stopped)
            || (self.state == Phase::SoldOut && self.restock_possible)
    }
}

/// The status's `tickets_left` for the core's stock figure `available` (`u64::MAX`: not known):
/// exact under 100, else two significant figures rounded down (1,234 → 1,200; 12,345 → 12,000),
/// so the page says "about 1,200" and never more tickets than there are. Rounded because the
/// figure is seconds old and moves with every hold: its last digits would be noise, not news.
pub fn tickets_left(available: u64) -> Option<u64> {
    if available == u64::MAX {
        return None;
    }
    let mut unit = 1;
    while available / unit >= 100 {
        unit *= 10;
    }
    Some(available / unit * unit)
}

/// What a status computation found.
// Returned once per status poll and answered at once, never kept or collected: boxing the answer
// would cost an allocation on the hottest path to save a copy of ~200 bytes.
#[allow(clippy::large_enum_variant)]
pub enum StatusOutcome {
    /// The ticket's place is spent (session over): the visitor must join again.
    Rejoin,
    /// An answer.
    Status(Status),
}

/// What the counters alone say about a ticket.
enum Peek {
    /// The answer: nothing to write.
    Answer(Status),
    /// A random room's pre-queue has to be frozen before places can be compared.
    Freeze,
    /// The holder's turn has come (at this admission-order place): admission decides.
    Front(Status, u64),
}

/// A problem issuing a token or reaching the room state.
#[derive(Debug, thiserror::Error)]
pub enum RoomError {
    /// State backend down.
    #[error(transparent)]
    State(#[from] StateError),
    /// Signing failed.
    #[error("cannot sign an admission token: {0}")]
    Sign(String),
}

/// Every room of this edge, plus what they share.
pub struct Rooms {
    rooms: RwLock<HashMap<String, Arc<Room>>>,
    /// Signs tickets and hashes identities.
    pub signer: Signer,
    keyring: Option<Arc<Keyring>>,
    /// Latency of the core requests this edge forwards (the controller's main input).
    pub latency: Arc<LatencyWindow>,
    /// When the latency window last got a sample, Unix ms.
    pub latency_updated_ms: AtomicU64,
    /// Core utilisation from its /metrics × 1000, and when it was read (Unix ms).
    pub core_util_milli: AtomicU64,
    /// The core's latency histogram at the last read (see `release::latency_buckets`).
    pub core_buckets: Mutex<Vec<(f64, f64)>>,
    /// See `core_util_milli`.
    pub core_util_at_ms: AtomicU64,
    /// Where new rooms keep their state.
    pub backend: state_backend::Backend,
    /// This edge's id in leases.
    pub node: String,
    /// Process start (stats).
    pub started: Instant,
    /// `[[edge.protected]]`: protected paths that belong to no room.
    edge_rules: Vec<ProtectedRule>,
    /// Every protected path (edge rules and rooms'), swapped whole on any room change.
    protection: ArcSwap<ProtectionTable>,
    /// The invite store of each room that used one ([`Rooms::invites`]).
    invites: dashmap::DashMap<String, Arc<dyn invite::InviteStore>>,
    /// Invite code attempts per client address and identity (this edge's).
    pub invite_attempts: invite::Attempts,
    /// Room configs published by other edges that this edge could not apply: id → the problem
    /// (each told in the log once, not every tick).
    sync_problems: Mutex<HashMap<String, String>>,
    /// A hold answered through this edge for a room whose last step the promises held back
    /// ([`Rooms::hold_answered`]): the release loop steps between ticks now, not at its next beat.
    pub hold_nudge: tokio::sync::Notify,
}

pub mod state_backend {
    //! Which [`super::state::RoomState`] new rooms get.
    use std::sync::Arc;

    use super::state::{EmbeddedState, RoomState};

    /// Embedded, or a Redis connection shared by every room.
    #[derive(Clone)]
    pub enum Backend {
        /// In this process.
        Embedded,
        /// In Redis.
        Redis(super::redis::RedisRooms),
    }

    impl Backend {
        /// The state of a new room (its layout on Redis: one slot, or spread).
        pub fn state_for(&self, spec: &super::RoomSpec) -> Arc<dyn RoomState> {
            let c = &spec.config;
            match self {
                Backend::Embedded => Arc::new(EmbeddedState::new(c.max_tracked)),
                Backend::Redis(r) if c.layout == super::config::RoomLayout::Spread => {
                    super::spread::SpreadRoom::new(r.clone(), &spec.id, c.spread.clone(), c.max_tracked)
                }
                Backend::Redis(r) => Arc::new(r.room(&spec.id)),
            }
        }
    }
}

/// The latency window: 3 slots of 1 s (what the controller's defaults assume).
pub fn new_latency_window() -> LatencyWindow {
    LatencyWindow::new(3, 1000)
}

/// What the rooms read from the config file (the config module lends it: `WicketConfig::rooms_config`).
#[derive(Debug, Clone, Copy)]
pub struct RoomsConfig<'a> {
    /// `[[rooms]]`, as raw TOML: [`config::compile_rooms`] reads them.
    pub rooms: &'a [toml::Value],
    /// `[tokens]`: the keys admission tokens are signed with.
    pub tokens: Option<&'a TokensConfig>,
    /// `[[edge.protected]]`: paths guarded besides the rooms' own.
    pub edge_rules: &'a [ProtectedRule],
    /// Folder of the config file, for the key files it names.
    pub base_dir: &'a std::path::Path,
}

/// Converts the edge's `[tokens]` into the core's, for [`Keyring`] (paths resolved).
pub fn keyring_from(cfg: RoomsConfig<'_>) -> Result<Option<Keyring>, String> {
    let Some(t) = cfg.tokens else { return Ok(None) };
    let keys = t
        .keys
        .iter()
        .map(|k| wicket_core::config::KeyConfig {
            kid: k.kid.clone(),
            alg: k.alg.clone(),
            private_key_file: k.private_key_file.as_deref().map(|p| resolve(cfg.base_dir, p)),
            public_key_file: k.public_key_file.as_deref().map(|p| resolve(cfg.base_dir, p)),
            secret: k.secret.clone(),
            secret_env: k.secret_env.clone(),
        })
        .collect();
    let core = wicket_core::config::TokensConfig {
        issuer: t.issuer.clone(),
        signing_kid: t.signing_kid.clone(),
        leeway_seconds: Some(t.leeway_seconds),
        keys,
    };
    Keyring::from_config(&core).map(Some).map_err(|e| format!("{e:#}"))
}

/// Config problems of the rooms (for `validate()`): each room, and the signing key they need.
pub fn validate(rooms: &[toml::Value], tokens: Option<&TokensConfig>) -> Vec<ConfigIssue> {
    let mut out = match config::compile_rooms(rooms) {
        Ok(_) => Vec::new(),
        Err(e) => e,
    };
    if !rooms.is_empty() {
        match tokens {
            None => out.push(ConfigIssue { path: "tokens".into(), message: "rooms need [tokens] to sign admission tokens".into() }),
            Some(t) => match t.signing_kid.as_deref().and_then(|kid| t.keys.iter().find(|k| k.kid == kid)) {
                None => out.push(ConfigIssue {
                    path: "tokens.signing-kid".into(),
                    message: "rooms need a signing-kid naming one of tokens.keys".into(),
                }),
                Some(k) if k.alg == "EdDSA" && k.private_key_file.is_none() => out.push(ConfigIssue {
                    path: "tokens.signing-kid".into(),
                    message: format!("key {:?} has no private-key-file to sign with", k.kid),
                }),
                Some(_) => {}
            },
        }
    }
    out
}

/// The `room` claim of a JWT, unverified (only to choose the rule to verify it against).
fn token_room(token: &str) -> Option<String> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("room")?.as_str().map(str::to_owned)
}

/// Unix seconds as RFC 3339.
fn rfc3339(t: i64) -> Option<String> {
    time::OffsetDateTime::from_unix_timestamp(t).ok()?.format(&time::format_description::well_known::Rfc3339).ok()
}


/// Whether the tickets left, with those in unpaid holds that may come back, could reach a place
/// `ahead` places from the front.
fn within_reach(room: &Room, ahead: u64) -> bool {
    ahead < reach(room)
}

/// How many places past `serving` the tickets left and those in unpaid holds reach (0: the stock
/// is not known).
fn reach(room: &Room) -> u64 {
    let left = room.available.load(Ordering::Relaxed);
    let held = room.held.load(Ordering::Relaxed);
    if left == u64::MAX { 0 } else { left.saturating_add(if held == u64::MAX { 0 } else { held }) }
}


fn jitter(ms: u64) -> u64 {
    let f: f64 = 0.8 + (JITTER_MAX - 0.8) * rand::random::<f64>();
    (ms as f64 * f) as u64
}

impl Rooms {
    /// Rooms from a validated config.
    pub fn new(cfg: RoomsConfig<'_>, signer: Signer, backend: state_backend::Backend) -> Result<Self, Vec<ConfigIssue>> {
        let specs = config::compile_rooms(cfg.rooms)?;
        let keyring = keyring_from(cfg).map_err(|m| vec![ConfigIssue { path: "tokens".into(), message: m }])?;
        let rooms = Rooms {
            rooms: RwLock::new(HashMap::new()),
            signer,
            keyring: keyring.map(Arc::new),
            latency: Arc::new(new_latency_window()),
            latency_updated_ms: AtomicU64::new(0),
            core_util_milli: AtomicU64::new(u64::MAX),
            core_buckets: Mutex::new(Vec::new()),
            core_util_at_ms: AtomicU64::new(0),
            backend,
            node: hex::encode(rand::random::<[u8; 8]>()),
            started: Instant::now(),
            edge_rules: cfg.edge_rules.to_vec(),
            protection: ArcSwap::from_pointee(ProtectionTable::default()),
            invites: dashmap::DashMap::new(),
            invite_attempts: invite::Attempts::default(),
            sync_problems: Mutex::new(HashMap::new()),
            hold_nudge: tokio::sync::Notify::new(),
        };
        for s in specs {
            rooms.insert(s);
        }
        rooms.rebuild_protection();
        Ok(rooms)
    }

    /// Adds or replaces a room; its protected paths are guarded from the next request on.
    pub fn insert(&self, spec: RoomSpec) -> Arc<Room> {
        let room = match self.get(&spec.id) {
            Some(r) => {
                r.set_spec(spec);
                r
            }
            None => {
                let state = self.backend.state_for(&spec);
                let redis = match &self.backend {
                    state_backend::Backend::Redis(r) => Some(r),
                    state_backend::Backend::Embedded => None,
                };
                // (A spread room's sessions are sharded: its report marks a session's use next to it.)
                let sessions = match spec.config.layout {
                    config::RoomLayout::Spread => spread::shard_prefixes(&spec.id, spec.config.spread.shards),
                    config::RoomLayout::Single => Vec::new(),
                };
                let report = tally::RoomReport::new(redis, &spec.id, sessions);
                let room = Arc::new(Room::new(spec, state, report));
                self.rooms.write().insert(room.id.clone(), room.clone());
                room
            }
        };
        self.rebuild_protection();
        room
    }

    /// Deletes a room (its paths are no longer guarded by it); false when there was none.
    pub fn remove(&self, id: &str) -> bool {
        let gone = self.rooms.write().remove(id).is_some();
        if gone {
            self.invites.remove(id);
            self.rebuild_protection();
        }
        gone
    }

    /// Tells the other edges sharing this room state about an admin change of room `id` (its
    /// new config, or `None` when deleted, which drops its operator override too). Embedded
    /// state: nothing to tell.
    pub async fn publish(&self, id: &str, config: Option<&config::RoomConfig>) -> Result<(), StateError> {
        let state_backend::Backend::Redis(r) = &self.backend else { return Ok(()) };
        let json = config.map(|c| serde_json::to_string(c).unwrap_or_default());
        r.put_spec(id, json.as_deref()).await?;
        if config.is_none() {
            r.put_override(id, "").await?;
        }
        Ok(())
    }

    /// Carries out an operator's action on `room` ([`mode`]). With Redis room state the transition
    /// is made from the state published for the room (not this edge's copy, which may be a tick
    /// behind) and written by compare-and-set, then applied here; the other edges apply it within a
    /// tick. When the store cannot be reached the action is carried out on this edge alone
    /// ([`Operated::Local`]): an emergency stop must still stop this edge.
    pub async fn operate(&self, room: &Room, action: mode::Action) -> Result<Operated, mode::Refused> {
        let now = unix_ms();
        let state_backend::Backend::Redis(r) = &self.backend else {
            room.operate(now, action)?;
            return Ok(Operated::Shared);
        };
        let mut why = String::from("the room's mode kept changing while this edge wrote it");
        for _ in 0..16 {
            let published = match r.get_override(&room.id).await {
                Ok(v) => v.unwrap_or_default(),
                Err(e) => {
                    why = e.to_string();
                    break;
                }
            };
            let here = room.operator();
            let base = (!published.is_empty())
                .then(|| serde_json::from_str::<OperatorOverride>(&published).ok())
                .flatten()
                .and_then(|o| o.read(&here))
                .unwrap_or(here);
            let next = base.apply(action)?;
            let stamp = new_stamp();
            let json = serde_json::to_string(&next.publish(stamp)).unwrap_or_default();
            match r.cas_override(&room.id, &published, &json).await {
                Ok(true) => {
                    let mut op = room.operator.lock();
                    room.install(now, &mut op, next, stamp);
                    return Ok(Operated::Shared);
                }
                Ok(false) => continue,
                Err(e) => {
                    why = e.to_string();
                    break;
                }
            }
        }
        room.operate_here(now, action)?;
        Ok(Operated::Local(why))
    }

    /// Applies the room changes other edges published (the release loop calls it every tick):
    /// new and changed rooms are inserted, deleted ones removed, with their protected paths; then
    /// the operators' overrides (pause, resume, queue-all, release) not applied yet.
    pub async fn sync_specs(&self) -> Result<(), StateError> {
        let state_backend::Backend::Redis(r) = &self.backend else { return Ok(()) };
        self.sync_room_configs(r).await?;
        for (id, json) in r.overrides().await? {
            let Some(room) = self.get(&id) else { continue };
            if json.is_empty() {
                continue;
            }
            match serde_json::from_str::<OperatorOverride>(&json) {
                Ok(o) => {
                    if room.apply_override(unix_ms(), &o) {
                        tracing::info!(room = %id, mode = %o.mode, "operator override from another edge");
                    }
                }
                Err(e) => tracing::warn!(room = %id, "published operator override not applied: {e}"),
            }
        }
        Ok(())
    }

    async fn sync_room_configs(&self, r: &redis::RedisRooms) -> Result<(), StateError> {
        for (id, json) in r.specs().await? {
            if json.is_empty() {
                if self.remove(&id) {
                    tracing::info!(room = %id, "room deleted on another edge");
                }
                continue;
            }
            let spec = match serde_json::from_str::<config::RoomConfig>(&json).map_err(|e| e.to_string()).and_then(|c| {
                c.compile(&id, "room").map_err(|issues| {
                    issues.iter().map(|i| format!("{}: {}", i.path, i.message)).collect::<Vec<_>>().join("; ")
                })
            }) {
                Ok(spec) => spec,
                Err(e) => {
                    // (An edge older than the one that wrote it meets a field it does not know,
                    // named in serde's message: it keeps the room as it had it.)
                    let known = self.get(&id);
                    if self.sync_problems.lock().insert(id.clone(), e.clone()).as_ref() != Some(&e) {
                        let kept = if known.is_some() { "the room runs on with the config it had" } else { "the room is not created here" };
                        tracing::warn!(room = %id, "room config published by another edge not applied ({kept}): {e}");
                    }
                    if let Some(room) = known {
                        *room.sync_problem.lock() = Some(e);
                    }
                    continue;
                }
            };
            if self.sync_problems.lock().remove(&id).is_some()
                && let Some(room) = self.get(&id)
            {
                *room.sync_problem.lock() = None;
            }
            if self.get(&id).is_none_or(|r| r.spec().config != spec.config) {
                tracing::info!(room = %id, "room config from another edge");
                self.insert(spec);
            }
        }
        Ok(())
    }

    /// The protection table now in force (see [`ProtectionTable`]).
    pub fn protection(&self) -> arc_swap::Guard<Arc<ProtectionTable>> {
        self.protection.load()
    }

    /// Rebuilds the protection table from the edge's rules and every room's.
    fn rebuild_protection(&self) {
        // The rooms' write lock orders concurrent rebuilds: each one sees every change before it.
        let rooms = self.rooms.write();
        let mut rules = self.edge_rules.clone();
        for r in rooms.values() {
            let spec = r.spec();
            for p in &spec.config.protected {
                rules.push(ProtectedRule { path: p.clone(), room: r.id.clone(), event: Some(spec.config.event.clone()) });
            }
        }
        self.protection.store(Arc::new(ProtectionTable::new(rules)));
    }

    /// A room by id.
    pub fn get(&self, id: &str) -> Option<Arc<Room>> {
        self.rooms.read().get(id).cloned()
    }

    /// True when no room is configured.
    pub fn is_empty(&self) -> bool {
        self.rooms.read().is_empty()
    }

    /// Every room, by id.
    pub fn all(&self) -> Vec<Arc<Room>> {
        let mut v: Vec<_> = self.rooms.read().values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// True for `/queue/<room>[/...]` of a configured room (other paths take the normal route).
    pub fn owns(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix(QUEUE_PREFIX) else { return false };
        let id = rest.split_once('/').map_or(rest, |(id, _)| id);
        self.rooms.read().contains_key(id)
    }

    /// True when tokens can be issued.
    pub fn can_admit(&self) -> bool {
        self.keyring.is_some()
    }

    /// A hold of `event` the core answered (2xx) through this edge (issue #39). When a room of that
    /// event is led here and its last step was held back by the tickets already promised, the
    /// release loop is woken to read the stock and step between ticks at once
    /// ([`release::NUDGE_GAP`] apart at most), rather than at its next [`release::BETWEEN`] beat:
    /// the last tickets of a sale sell in rounds (let in, admitted, held, settled), and each round
    /// waited up to a quarter of a second for that beat. Holds through other edges wait for the
    /// beat as before. Returns whether the loop was woken.
    pub fn hold_answered(&self, event: &str) -> bool {
        let waiting = self.rooms.read().values().any(|r| {
            r.leader.load(Ordering::Relaxed) && r.book.lock().held_back > 0 && r.spec().config.event == event
        });
        if waiting {
            self.hold_nudge.notify_one();
        }
        waiting
    }

    /// Records one forwarded core request (the controller's P99 and error inputs).
    pub fn record_core(&self, latency_us: Option<u64>) {
        let now = unix_ms();
        match latency_us {
            Some(us) => self.latency.record_success(now, us),
            None => self.latency.record_error(now),
        }
        self.latency_updated_ms.store(now, Ordering::Relaxed);
    }

    /// Whether `room` meets the visitor who sent `head`: always, unless the room is in test mode
    /// (`test-mode`), where only a visitor with a valid test cookie of the room
    /// ([`tester::verify`]) does; everyone else passes as if the room were off.
    pub fn meets<H: crate::identity::HeadView + ?Sized>(&self, room: &Room, head: &H) -> bool {
        if !room.test_mode() {
            return true;
        }
        crate::identity::cookie(head, &tester::cookie_name(&room.id))
            .is_some_and(|v| tester::verify(&self.signer, &room.id, v, unix_ms() / 1000))
    }

    /// The identity a room keys places and sessions by.
    pub fn who(&self, room: &str, sub: &str) -> Who {
        let m = self.signer.mac(b"room-who", format!("{room}|{sub}").as_bytes());
        u64::from_le_bytes(m[..8].try_into().unwrap_or([0; 8]))
    }

    /// The owner tag a ticket carries: the joining identity, keyed (a place belongs to whoever
    /// joined; a ticket shown with another user id does not verify).
    pub fn owner(&self, room: &str, sub: &str) -> String {
        format!("{:016x}", self.who(room, sub))
    }

    /// A place for `sub` (user id, else device id) on `device`, the room's check given (or none
    /// asked): the one it holds, or the next.
    pub async fn join(&self, room: &Room, sub: &str, device: &str) -> Result<QueueTicket, StateError> {
        self.join_with(room, sub, device, true).await?.ok_or_else(|| StateError("no place given".into()))
    }

    /// A place for `sub` (user id, else device id) on `device`: the one it holds, or the next.
    /// `proven`: the visitor gave the room's bot check (or the room has none); otherwise the place
    /// is given at once and the check is owed ([`state::RoomState::join`]). `None`: no owed place
    /// could be remembered, the check must come first.
    pub async fn join_with(&self, room: &Room, sub: &str, device: &str, proven: bool) -> Result<Option<QueueTicket>, StateError> {
        let now_ms = unix_ms();
        let now_s = now_ms / 1000;
        let spec = room.spec();
        let (opens_at, _) = room.window(&spec);
        let open = opens_at.is_none_or(|o| now_s as i64 >= o);
        let proven = proven || spec.config.bot_check == config::RoomBotCheck::Off;
        let who = self.who(&room.id, sub);
        // An invitee of a room whose lane has a share of the release joins the lane too (one read
        // of the invite store; rooms without a share never read it here).
        let lane = proven && spec.lane_share.is_some() && self.invites(&room.id).is_member(who).await?;
        let proof = state::Proof { proven, now_ms, grace_ms: spec.config.proof_grace_seconds * 1000, lane };
        let Some(j) = room.state.join(who, open, proof).await? else { return Ok(None) };
        if j.fresh {
            room.joins.fetch_add(1, Ordering::Relaxed);
            room.report.tally.count(now_ms, tally::Count::Joins, 1);
        }
        Ok(Some(QueueTicket {
            room: room.id.clone(),
            position: j.position,
            issued_at: now_s,
            device: device.to_owned(),
            owner: self.owner(&room.id, sub),
            owed: j.owed,
            lane: j.lane,
        }))
    }

    /// The status of a ticket's holder; admits (token + session) when it is their turn.
    pub async fn status(&self, room: &Room, t: &QueueTicket, sub: &str) -> Result<StatusOutcome, RoomError> {
        let spec = room.spec();
        let mut peek = self.peek(room, &spec, t, &room.state.counters());
        if let Peek::Freeze = peek {
            room.state.freeze().await?;
            peek = self.peek(room, &spec, t, &room.state.refresh().await?);
        }
        // Lane priority lasts as long as the invitation: a place at the front only through its
        // lane place, whose holder's code or user id was revoked since, is an ordinary place
        // (admitted when `serving` reaches it; its lane turn is spent). One invite store read,
        // only at that front.
        let ordinary;
        let t = match peek {
            Peek::Front(_, pos)
                if t.lane > 0
                    && pos > room.state.counters().serving
                    && !self.invites(&room.id).is_member(self.who(&room.id, sub)).await? =>
            {
                ordinary = QueueTicket { lane: 0, ..t.clone() };
                peek = self.peek(room, &spec, &ordinary, &room.state.counters());
                &ordinary
            }
            _ => t,
        };
        let (s, pos) = match peek {
            Peek::Answer(s) => return Ok(StatusOutcome::Status(s)),
            Peek::Front(s, pos) => (s, pos),
            Peek::Freeze => return Err(RoomError::State(StateError("the pre-queue did not freeze".into()))),
        };
        let now_ms = unix_ms();
        let who = self.who(&room.id, sub);
        if room.state.spent(who, t.position).await? {
            return Ok(StatusOutcome::Rejoin);
        }
        if t.owed {
            // The check was owed when the ticket was made: admitted only once it is given.
            let grace_ms = spec.config.proof_grace_seconds * 1000;
            let ago = match room.state.proof_state(who, t.position, now_ms, grace_ms).await? {
                state::ProofState::Proven => None,
                state::ProofState::Lost => return Ok(StatusOutcome::Rejoin),
                state::ProofState::Owed => Some(0),
                state::ProofState::Passed { ago_ms } => Some(ago_ms),
            };
            if let Some(ago) = ago {
                // Its turn came: held back (the release did not count it) until the check is given
                // or the grace runs out.
                let mut s = s;
                s.ahead = Some(0);
                s.eta_seconds = None;
                s.proof_deadline_seconds = Some(grace_ms.saturating_sub(ago) / 1000);
                s.poll_after_ms = jitter(1000);
                return Ok(StatusOutcome::Status(s));
            }
        }
        let mut s = s;
        s.proof_owed = None;
        let cap = spec.config.total_active_max;
        // Under the cap the session is opened whether or not one runs (opening one that runs
        // changes nothing): its state is asked only at the cap, where a running one is let in.
        let under_cap = cap.is_none_or(|cap| room.active.load(Ordering::Relaxed) < cap);
        let alive = !under_cap && room.state.session_alive(who, now_ms).await?;
        if alive || under_cap {
            let waited_s = (now_ms / 1000).saturating_sub(t.issued_at);
            return self.admit(room, &spec, s, who, sub, (pos, t.lane, waited_s), alive, now_ms).await.map(StatusOutcome::Status);
        }
        // At the total-active cap: first in line, waiting for a session to end.
        s.ahead = Some(0);
        s.eta_seconds = Some(Eta { low: 0, high: spec.config.session_seconds });
        s.poll_after_ms = jitter(2000);
        Ok(StatusOutcome::Status(s))
    }

    /// A passthrough room's straight way in (`queue = "when-needed"`): while the room is open
    /// (not paused, not sold out, in its window), nobody waits, its active sessions are under
    /// `passthrough.active-max` and this edge let fewer than `passthrough.new-per-minute` through
    /// in the current minute, `sub` takes the next place, which is served at once
    /// ([`RoomState::pass`]: only when every place ahead is served, so FIFO holds), and is admitted
    /// (session and token). `Ok(None)`: the queue is on (the visitor queues as in any room).
    pub async fn pass_through(&self, room: &Room, sub: &str, device: &str) -> Result<Option<Status>, RoomError> {
        let spec = room.spec();
        if !room.passing(&spec) {
            return Ok(None);
        }
        let minute = unix_ms() / 60_000;
        {
            let mut passed = room.passed.lock();
            if passed.0 != minute {
                *passed = (minute, 0);
            }
            if passed.1 >= spec.config.passthrough.new_per_minute {
                return Ok(None);
            }
            passed.1 += 1;
        }
        let t = self.join(room, sub, device).await?;
        if !room.state.pass(t.position).await? {
            return Ok(None);
        }
        room.report.tally.count(unix_ms(), tally::Count::Released, 1);
        match self.status(room, &t, sub).await? {
            StatusOutcome::Status(s) if s.token.is_some() => {
                // Let in on the protected path itself: the session is in use at once.
                self.note_use(room, self.who(&room.id, sub), unix_ms()).await;
                Ok(Some(s))
            }
            _ => Ok(None),
        }
    }

    /// The status of a ticket's holder when answering it writes nothing: the room is closed, sold
    /// out or not open yet, or the holder still waits behind `serving`. `None` when it is their
    /// turn (or a random room's pre-queue must be frozen first): [`Rooms::status`] decides then.
    /// The public listener's fast path answers status polls with this.
    pub fn waiting_status(&self, room: &Room, t: &QueueTicket) -> Option<Status> {
        match self.peek(room, &room.spec(), t, &room.state.counters()) {
            Peek::Answer(s) => Some(s),
            Peek::Front(..) | Peek::Freeze => None,
        }
    }

    fn peek(&self, room: &Room, spec: &RoomSpec, t: &QueueTicket, c: &state::Counters) -> Peek {
        let now_s = (unix_ms() / 1000) as i64;
        let rate = room.release_rate();
        let measured = room.measured_rate();
        let mut s = Status {
            state: Phase::Waiting,
            position: None,
            ahead: None,
            eta_seconds: None,
            poll_after_ms: 5000,
            release_per_second: rate,
            token: None,
            redirect: None,
            token_seconds: None,
            opens_at: None,
            restock_possible: false,
            proof_owed: t.owed.then(|| spec.config.bot_check.name()),
            proof_deadline_seconds: None,
            tickets_left: tickets_left(room.available.load(Ordering::Relaxed)),
        };
        let (opens_at, closes_at) = room.window(spec);
        if closes_at.is_some_and(|c| now_s >= c) {
            // Closed: the place is never admitted.
            s.state = Phase::Closed;
            s.poll_after_ms = jitter(60_000);
            return Peek::Answer(s);
        }
        if room.rejecting() {
            // Turning everyone away (reject-all): nobody is admitted, the place is kept for when
            // the room resumes (a resume reaches open event streams at once, polls within 10 s).
            s.state = Phase::Stopped;
            s.poll_after_ms = jitter(10_000);
            return Peek::Answer(s);
        }
        let sold_out = room.sold_out.load(Ordering::Relaxed);
        if sold_out && !room.restock_possible.load(Ordering::Relaxed) {
            s.state = Phase::SoldOut;
            s.poll_after_ms = jitter(30_000);
            return Peek::Answer(s);
        }
        if opens_at.is_some_and(|o| now_s < o) {
            s.state = Phase::NotOpen;
            if spec.config.method == QueueMethod::Fifo {
                s.position = Some(t.position);
                s.ahead = Some(room.state.ahead(t.position, &state::Counters { serving: 0, ..*c }));
            }
            s.opens_at = opens_at.and_then(rfc3339);
            let until_open = opens_at.map_or(0, |o| (o - now_s).max(0) as u64);
            s.poll_after_ms = jitter(not_open_poll_ms(until_open));
            return Peek::Answer(s);
        }
        if spec.config.method == QueueMethod::Random && c.prequeue.is_none() {
            return Peek::Freeze;
        }
        let pos = room.admission_order(t.position, c);
        s.position = Some(pos);
        // Sold out for now: the core's stock is gone but unpaid holds may return (the place
        // is kept, nobody is released until tickets return); or, for the places behind
        // `serving`, every ticket left is promised to fans let in already ([`claims`]).
        let spoken_for = !sold_out && pos > c.serving && room.spoken_for.load(Ordering::Relaxed);
        if sold_out || spoken_for {
            s.state = Phase::SoldOut;
            s.restock_possible = true;
            let ahead = room.state.ahead(pos, c);
            s.ahead = Some(ahead);
            // Promised stock frees within seconds (a hold settles its fan's promise): the places
            // next in line ask again soon. Unpaid holds return over minutes, but when they do the
            // places they reach are let in at once, and a place whose fan does not come within
            // [`claims::PICKUP_MS`] lapses: every place the tickets in unpaid holds could reach
            // asks as often as a place in reach of the stock (told 15 s, the bots surge's restock
            // let in fans who came 17 s later, their promises lapsed, and 12 of them met "sold
            // out").
            s.poll_after_ms = jitter(match (spoken_for, ahead) {
                (true, n) if n < 1000 || within_reach(room, n) => spoken_for_poll_ms(n),
                (false, n) if n < 100 || within_reach(room, n) => NEAR_POLL_MS,
                (_, 100..1000) => 15_000,
                _ => 30_000,
            });
            return Peek::Answer(s);
        }
        if pos <= c.serving || (t.lane > 0 && t.lane <= c.lane_serving) {
            return Peek::Front(s, pos);
        }
        let Some(mut ahead) = room.state.ahead_known(pos, c) else {
            // Not known yet never to be too few (a spread room's newest places): nothing is said
            // but that the place is in line, and the fan asks again soon.
            s.state = if room.is_paused() { Phase::Paused } else { Phase::Waiting };
            s.poll_after_ms = jitter(2000);
            return Peek::Answer(s);
        };
        // The share of the release that `ahead` moves at (a lane place: its lane's, when the lane
        // is the faster way in).
        let mut share = 1.0;
        if t.lane > 0
            && let Some(lane_share) = spec.lane_share
        {
            let lane_ahead = t.lane - c.lane_serving - 1;
            if (lane_ahead + 1) as f64 / lane_share < (ahead + 1) as f64 {
                (ahead, share) = (lane_ahead, lane_share);
            }
        }
        s.ahead = Some(ahead);
        if room.is_paused() || room.is_queue_all() {
            // Nothing is released until the operator resumes: no ETA ("unknown"), and an answer
            // soon, so a resume reaches every fan within 5 s.
            s.state = if room.is_paused() { Phase::Paused } else { Phase::Waiting };
            s.poll_after_ms = jitter(4000);
            return Peek::Answer(s);
        }
        let base = if measured > 0.0 { measured } else { rate } * share;
        if base > 0.0 {
            let eta = (ahead + 1) as f64 / base;
            s.eta_seconds = Some(Eta { low: (eta * 0.8).floor() as u64, high: (eta * 1.3).ceil() as u64 + 1 });
            // About ten polls on the way to the front, never faster than 1/s nor slower than 1/30 s
            // — [`NEAR_POLL_MS`] for the last thousand places, and for every place the tickets
            // could reach, so a release that speeds up (the ETA was made at the old rate; promised
            // tickets freed at once) reaches them in seconds: within their promise's pickup window
            // ([`claims::PICKUP_MS`]), which would otherwise lapse before they come.
            s.poll_after_ms = jitter(eta_poll_ms(eta, ahead < 1000 || within_reach(room, ahead)));
        } else {
            // No rate yet: the sale opened since the room's last tick (its first step comes within
            // a second), or the release stands at 0. The places the first steps could reach — the
            // last thousand, and every place the tickets left could reach — ask again in 2 s; told
            // 10 s, a sale's first fans saw their turn up to 10 s late, their promised tickets
            // held for them all that while (the bots surge sold its 2,000 tickets in 25 s, not 8).
            s.poll_after_ms = jitter(no_rate_poll_ms(ahead < 1000 || within_reach(room, ahead)));
        }
        Peek::Answer(s)
    }

    #[allow(clippy::too_many_arguments)]
    async fn admit(
        &self,
        room: &Room,
        spec: &RoomSpec,
        mut s: Status,
        who: Who,
        sub: &str,
        (pos, lane, waited_s): (u64, u64, u64),
        alive: bool,
        now_ms: u64,
    ) -> Result<Status, RoomError> {
        let Some(keys) = &self.keyring else { return Err(RoomError::Sign("no [tokens] keys".into())) };
        let cfg = &spec.config;
        if !alive && room.state.open_session(who, now_ms + cfg.session_seconds * 1000, pos).await? {
            room.active.fetch_add(1, Ordering::Relaxed);
            room.admissions.fetch_add(1, Ordering::Relaxed);
            // The place's turn came in the minute this edge saw `serving` (or the lane) pass it.
            let turn = room.report.marks.lock().turn_minute(pos, lane).unwrap_or(tally::minute_of(now_ms));
            room.report.tally.admitted(now_ms, waited_s, turn);
            room.report.store.admitted(who, now_ms);
        }
        self.touch(room, who, now_ms).await;
        let claims = keys.new_claims(&cfg.event, sub, &room.id, pos, cfg.max_qty, cfg.token_seconds as i64);
        let token = keys.sign(&claims, None).map_err(|e| RoomError::Sign(format!("{e:#}")))?;
        s.state = Phase::Admitted;
        s.ahead = Some(0);
        s.eta_seconds = Some(Eta { low: 0, high: 0 });
        s.poll_after_ms = jitter(cfg.token_seconds * 1000 / 2);
        s.token = Some(token);
        s.redirect = Some(cfg.target.clone());
        s.token_seconds = Some(cfg.token_seconds);
        Ok(s)
    }

    /// A verified token belongs to this visitor (its `sub` is the visitor's user id or signed
    /// device id) and, for a waiting room, its session still runs. A rule of `[[edge.protected]]`
    /// whose room is no waiting room (its tokens minted elsewhere, e.g. `mint-token --sub`) keeps
    /// no session, but its tokens still pass only for the visitor they name: a token copied to
    /// another visitor, or presented with no identity at all, is refused.
    /// `Err` when the room state could not be read (the caller answers 503, not "not admitted").
    pub async fn session_ok(&self, room: &str, sub: &str, user: Option<&str>, device: Option<&str>) -> Result<bool, StateError> {
        if user != Some(sub) && device != Some(sub) {
            return Ok(false);
        }
        self.session_in_use(room, sub).await
    }

    /// The session of `sub` in `room` is in use (its holder already checked: by
    /// [`Rooms::session_ok`], or by nginx's Lua path): whether it still runs, touched when it does.
    /// A rule without a waiting room keeps no session: true.
    pub async fn session_in_use(&self, room: &str, sub: &str) -> Result<bool, StateError> {
        let Some(r) = self.get(room) else { return Ok(true) };
        let (who, now) = (self.who(room, sub), unix_ms());
        let alive = r.state.session_alive(who, now).await?;
        if alive {
            self.touch(&r, who, now).await;
            if !r.use_noted(who) {
                // (Boxed: once a session on this edge; every request's future would carry its size.)
                Box::pin(self.note_use(&r, who, now)).await;
            }
        }
        Ok(alive)
    }

    /// A session was seen (admission, a protected page, a core request with its token): it counts
    /// against the session budget again. At most one write to the room state per session per
    /// quarter of the idle window from this edge.
    pub async fn touch(&self, room: &Room, who: Who, now_ms: u64) {
        if room.touched_recently(who, now_ms) {
            return;
        }
        room.touched.entry(who).and_modify(|t| *t = now_ms | (*t & USE_NOTED)).or_insert(now_ms);
        if let Err(e) = room.state.touch(who, now_ms).await {
            tracing::debug!(room = %room.id, "session touch: {e}");
        }
    }

    /// A core request carrying an admission token (a hold, an order): its session was seen. The
    /// token is verified first; anything else is ignored.
    pub async fn touch_by_token(&self, token: &str, check: &dyn crate::admission::AdmissionCheck) {
        let Some(room_id) = token_room(token) else { return };
        let Some(room) = self.get(&room_id) else { return };
        let rule = ProtectedRule { path: String::new(), room: room.id.clone(), event: Some(room.spec().config.event.clone()) };
        let Ok(c) = check.verify(token, &rule) else { return };
        let (who, now) = (self.who(&room.id, &c.sub), unix_ms());
        // Most core requests of a fan come within the throttle: no state round trip for them.
        if (!room.touched_recently(who, now) || !room.use_noted(who)) && room.state.session_alive(who, now).await.unwrap_or(false) {
            self.touch(&room, who, now).await;
            if !room.use_noted(who) {
                Box::pin(self.note_use(&room, who, now)).await;
            }
        }
    }

    /// The origin said `Wicket-Revoke: 1`: the session ends, its slot frees, its place is spent.
    pub async fn revoke(&self, room: &str, sub: &str) {
        if let Some(r) = self.get(room)
            && r.state.end_session(self.who(room, sub)).await.unwrap_or(false)
        {
            let _ = r.active.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| Some(a.saturating_sub(1)));
        }
    }
}

/// The invite lane ([`invite`]).
impl Rooms {
    /// The invite store of room `id` (made on first use, in the rooms' backend).
    pub fn invites(&self, id: &str) -> Arc<dyn invite::InviteStore> {
        if let Some(s) = self.invites.get(id) {
            return s.clone();
        }
        let store: Arc<dyn invite::InviteStore> = match &self.backend {
            state_backend::Backend::Embedded => Arc::new(invite::EmbeddedInvites::default()),
            state_backend::Backend::Redis(r) => Arc::new(invite::RedisInvites::new(r.clone(), id)),
        };
        self.invites.entry(id.to_owned()).or_insert(store).clone()
    }

    /// Whether `sub` may take a place in `room` now: the room is not invite-only now (no store
    /// read), or `sub` is an invitee.
    pub async fn may_join(&self, room: &Room, sub: &str) -> Result<bool, StateError> {
        if !room.spec().invite_only((unix_ms() / 1000) as i64) {
            return Ok(true);
        }
        self.invites(&room.id).is_member(self.who(&room.id, sub)).await
    }

    /// `sub` redeems `code` (as typed) in `room`: `None` when it is malformed.
    pub async fn redeem(&self, room: &Room, sub: &str, code: &str) -> Result<Option<invite::Redeemed>, StateError> {
        let Some(n) = invite::normalize(code) else { return Ok(None) };
        let hash = invite::code_hash(&self.signer, &room.id, &n);
        self.invites(&room.id).redeem(&hash, self.who(&room.id, sub)).await.map(Some)
    }
}

/// A room's invite-only end as RFC 3339 (`None`: for good, or no lane).
pub fn invite_until_text(room: &Room) -> Option<String> {
    room.spec().invite_until.filter(|u| *u != i64::MAX).and_then(rfc3339)
}

#[cfg(test)]
mod tests;
