//! The release loop: once a second per room (off the request path) it sweeps ended sessions,
//! takes or renews the leader lease, feeds the controller (core P99 and errors measured on the
//! requests this edge forwards, core utilisation from the core's /metrics, occupancy, exits),
//! and — on the leader only — advances `serving` by the controller's rate plus any timed batch
//! that is due (a step admits for at most one and a half ticks, however long since the last:
//! seconds lost to failed ticks are not released at once, [`MAX_STEP_MS`]). In a room with a bot check the advance counts only places whose check is given:
//! owed places it passes are held back (not admitted, not counted) for `proof-grace-seconds`,
//! then lost; a proof given within the grace lets that place in and the next advance one fewer. A second task polls the core's stock (sold out stops releases) and /metrics.
//! Between ticks, a room whose step the tickets already promised held back reads its stock every
//! [`BETWEEN`] and lets in what the holds made since free ([`Rooms::step_between`]); a hold
//! answered through this edge wakes that step at once ([`Rooms::hold_answered`], [`NUDGE_GAP`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::config::QueueMethod;
use super::state::{PickupAsk, StateError};
use super::{Room, Rooms, unix_ms};
use crate::controller::{ReleaseMode, TickInput};

/// How often every room ticks.
pub const TICK: Duration = Duration::from_secs(1);

/// How often a room whose last step the promises held back reads its stock again and lets in
/// what the holds made since free ([`Rooms::step_between`]): the bots surge's last 600 tickets
/// sold in rounds a tick apart each.
pub const BETWEEN: Duration = Duration::from_millis(250);

/// The least time between two steps between ticks when holds answered through this edge wake
/// them ([`Rooms::hold_answered`]): a sale's middle, hundreds of holds a second, reads the stock
/// at most 20 times a second; its tail, a hold now and then, steps within a few milliseconds.
pub const NUDGE_GAP: Duration = Duration::from_millis(50);

/// How often a leader writes its book again while nothing is promised: well within the book's
/// life in the store ([`super::claims::CLAIM_MS`]), so a new leader always finds where `serving`
/// stood and promises the places let in after it ([`super::claims::Claims::unkept`]) — a quiet
/// room's one write every few seconds instead of a book that lapsed.
pub const EMPTY_BOOK_EVERY_MS: u64 = 5_000;
/// Leader lease: a leader that stops renewing is replaced after this long.
pub const LEASE_MS: u64 = 3000;
/// Core utilisation older than this is not used.
pub const UTIL_MAX_AGE_MS: u64 = 5000;
/// The most time one release step admits for: one and a half ticks. A tick that fails (the room
/// state store unreachable, a Redis failover) keeps the time of the last one that released, and
/// the next step would otherwise release the rate times the whole outage at once — onto a core
/// (and a store) that has just recovered: 68, 59, 23 a second around a promotion in a room set to
/// 25/s. The seconds missed are not owed: the controller sets the rate from what is out there, and
/// the queue resumes at it. Half a tick of slack keeps a late timer from costing admissions.
pub const MAX_STEP_MS: u64 = 1500;

/// One release step: admissions for `rate` per second over `dt_ms` (at most [`MAX_STEP_MS`]) plus
/// the fraction `carry` left by the last step; returns the whole admissions and the fraction to
/// carry (under 1). No rate, no step: the carry waits.
pub fn release_step(rate: f64, dt_ms: u64, carry: f64) -> (u64, f64) {
    if !(rate > 0.0 && rate.is_finite()) {
        return (0, carry);
    }
    let n = rate * dt_ms.min(MAX_STEP_MS) as f64 / 1000.0 + carry;
    let whole = n.floor() as u64;
    (whole, (n - whole as f64).min(1.0))
}

/// How long the release loop waits at `now_ms` before it ticks at the next opening (`open_ms`,
/// the first after its last tick, [`Rooms::next_opening_ms`]): until a millisecond after it (never
/// a tick just before the open by the wall clock), at once for one passed while the loop was busy;
/// `None` when no room opens before the next tick could.
fn opening_wait(open_ms: Option<u64>, now_ms: u64) -> Option<Duration> {
    open_ms.map(|at| Duration::from_millis((at + 1).saturating_sub(now_ms))).filter(|d| *d < TICK)
}

impl Rooms {
    /// One tick of one room at `now_ms` (Unix ms).
    pub async fn tick_room(&self, room: &Room, now_ms: u64) -> Result<(), StateError> {
        let spec = room.spec();
        let idle_ms = spec.config.session_idle_seconds * 1000;
        // What the last step held back is this tick's to decide again; a tick that fails before its
        // step leaves nothing to step between ticks on.
        room.book.lock().held_back = 0;
        // The leader's sweep counts the places of its recent steps picked up ([`super::claims`]).
        let ask = if room.leader.load(Ordering::Relaxed) { room.book.lock().claims.ask(room.state.counters().serving) } else { PickupAsk::default() };
        let swept = room.state.sweep_picked(now_ms, idle_ms, &ask).await?;
        let (active, exits) = (swept.active, swept.exits);
        room.forget_touches(now_ms.saturating_sub(idle_ms));
        room.active.store(active, Ordering::Relaxed);
        let leader = room.state.lead(&self.node, LEASE_MS).await?;
        // This edge takes the lease when it did not hold it, or when its renewals stopped for
        // longer than the lease (its ticks failed: another edge may have led meanwhile). The
        // places its predecessor let in stay promised ([`super::claims`]), or a failover lets a
        // second full round in on the same tickets. Until the book is read the edge is not the
        // leader it thinks it is: a read that fails is tried again at the next tick.
        let was = room.leader.load(Ordering::Relaxed);
        let renewed = was && now_ms.saturating_sub(room.book.lock().led_at_ms) <= LEASE_MS;
        let taking = leader && !renewed;
        if taking {
            let kept = match room.state.kept_book().await?.as_deref().map(serde_json::from_str::<super::claims::Claims>) {
                Some(Ok(c)) => Some(c),
                Some(Err(e)) => {
                    tracing::warn!(room = %room.id, "the last leader's book does not read, starting without it: {e}");
                    None
                }
                None => None,
            };
            let mut b = room.book.lock();
            let own = was.then(|| std::mem::take(&mut b.claims));
            b.claims = super::claims::Claims::newer(kept, own);
            b.unkept_due = true;
            tracing::info!(room = %room.id, open = b.claims.open(), "release leader: this edge");
        }
        if leader {
            room.book.lock().led_at_ms = now_ms;
        }
        room.leader.store(leader, Ordering::Relaxed);
        let mut c = room.state.refresh().await?;
        room.front_at(c.serving, c.lane_serving);
        // After a takeover, or a step whose answer never came (the store may have run it): the
        // places let in past the book's last step are promised, once `serving` is read.
        if leader {
            let mut b = room.book.lock();
            if std::mem::take(&mut b.unkept_due) {
                let unkept = b.claims.unkept(now_ms, c.serving, room.state.passed(&c));
                if unkept > 0 {
                    tracing::info!(room = %room.id, unkept, "release leader: places let in after the last book kept are promised");
                }
            }
        }
        room.report.marks.lock().note(super::tally::minute_of(now_ms), c.serving, c.lane_serving);
        let now_s = (now_ms / 1000) as i64;
        let (opens_at, closes_at) = room.window(&spec);
        let open = opens_at.is_none_or(|o| now_s >= o);
        let closed = closes_at.is_some_and(|t| now_s >= t);
        if open && leader && spec.config.method == QueueMethod::Random && c.prequeue.is_none() {
            room.state.freeze().await?;
            c = room.state.refresh().await?;
        }
        let dt_ms = {
            let b = room.book.lock();
            // The first tick of the sale (the loop ticks at the open, [`Rooms::next_opening_ms`])
            // lets in a tick's worth, however short the time since the last tick before it.
            let opening = open && opens_at.is_some_and(|o| ((b.last_tick_ms / 1000) as i64) < o);
            if b.last_tick_ms == 0 || opening { TICK.as_millis() as u64 } else { now_ms.saturating_sub(b.last_tick_ms).clamp(1, 10_000) }
        };
        let stats = self.latency.snapshot(now_ms);
        let util_at = self.core_util_at_ms.load(Ordering::Relaxed);
        let util = (now_ms.saturating_sub(util_at) < UTIL_MAX_AGE_MS)
            .then(|| self.core_util_milli.load(Ordering::Relaxed))
            .filter(|u| *u != u64::MAX)
            .map(|u| u as f64 / 1000.0);
        let newest = self.latency_updated_ms.load(Ordering::Relaxed).max(if util.is_some() { util_at } else { 0 });
        let sold_out = room.sold_out.load(Ordering::Relaxed);
        let fair_share = self.fair_share(room, active);
        let input = TickInput {
            now_ms,
            p99_ms: stats.p99_ms,
            samples: stats.successes + stats.errors,
            error_fraction: stats.error_fraction(),
            utilisation: util,
            occupancy: active as f64,
            exits_per_s: exits as f64 * 1000.0 / dt_ms as f64,
            metrics_age_ms: if newest == 0 { u64::MAX / 2 } else { now_ms.saturating_sub(newest) },
            sold_out,
            fair_share,
        };
        let (decision, events, mode) = {
            let mut ctl = room.controller.lock();
            let d = ctl.tick(&input);
            (d, ctl.drain_events(), ctl.mode())
        };
        for e in events {
            tracing::info!(room = %room.id, event = %serde_json::to_string(&e).unwrap_or_default(), "release controller");
        }
        *room.last_decision.lock() = Some(decision);
        *room.last_input.lock() = Some(input);
        // A room turning everyone away (reject-all) releases nobody: when it takes people again,
        // the queue moves on from where it stood.
        let releasing = open && !closed && !sold_out && !room.rejecting();
        let rate = if releasing { decision.rate } else { 0.0 };
        room.set_release_rate(rate);
        let mut whole: u64;
        let held_back;
        {
            let mut b = room.book.lock();
            (whole, b.carry) = release_step(rate, dt_ms, b.carry);
            let batches_allowed = releasing && !matches!(mode, ReleaseMode::Paused | ReleaseMode::QueueAll);
            while b.batches_done < spec.batches.len() && spec.batches[b.batches_done].0 <= now_s {
                if batches_allowed {
                    whole += spec.batches[b.batches_done].1;
                }
                b.batches_done += 1;
            }
            if let Some(cap) = spec.config.total_active_max {
                whole = whole.min(cap.saturating_sub(active));
            }
            // Admission is a promise ([`super::claims`]): never let in more people than the tickets
            // left, less those promised to the people let in before, can serve — when a few seats
            // come back (an unpaid order timed out), a few people go in, not a second's worth.
            let holds = *room.holds.lock();
            b.claims.picked(&ask, swept.picked.as_deref(), now_ms);
            b.claims.note(now_ms, None, holds);
            let available = room.available.load(Ordering::Acquire);
            let cap = b.claims.cap(available, u64::from(spec.config.max_qty));
            tracing::debug!(
                room = %room.id, whole, cap, available, open = b.claims.open(), standby = b.claims.standby(), holds = ?holds,
                reason = decision.reason.as_str(), budget = decision.budget.round() as u64, occupancy = active, exits,
                pressure = ?decision.pressure.map(|x| (x * 100.0).round() / 100.0),
                "release step"
            );
            tracing::trace!(room = %room.id, book = ?b.claims, "promises");
            let allowed = whole;
            whole = whole.min(cap).min(available);
            // What the promises held back goes in between ticks as holds settle them
            // ([`Rooms::step_between`]), never more than this step's rate allowed — once the step
            // is made (a step whose answer never came leaves its places to be promised first).
            held_back = if releasing && leader { allowed - whole } else { 0 };
            let spoken_for = releasing && leader && cap == 0 && available != u64::MAX && c.waiting() > 0;
            if room.spoken_for.swap(spoken_for, Ordering::Relaxed) != spoken_for {
                room.changed();
            }
            // What the status answers tell the waiting places until the next tick (the order of
            // [`Rooms::status`]): a step's pickup window is bounded by it.
            use super::told::Telling;
            // At the cap on sessions, the places at the front are told 2 s each while they wait
            // for a session to end.
            let capped = spec.config.total_active_max.is_some_and(|cap| active >= cap);
            let telling = if closed || room.rejecting() || (sold_out && !spoken_for) || capped || !room.state.numbered_in_line() {
                Telling::Unbounded
            } else if !open {
                Telling::NotOpen { opens_at_ms: opens_at.map_or(0, |o| o.max(0) as u64 * 1000) }
            } else if room.spoken_for.load(Ordering::Relaxed) {
                Telling::SpokenFor
            } else if room.is_paused() || room.is_queue_all() {
                Telling::Unbounded
            } else {
                moving(room)
            };
            // A spell told since the last tick that this tick no longer sees (sold out for a moment,
            // a pause lifted): from when it began.
            b.told.record_after(room.unbounded_at_ms(), super::told::ToldTick { at: now_ms, serving: c.serving, telling, reach: super::reach(room) });
            b.last_tick_ms = now_ms;
        }
        let step = if leader && whole > 0 { Some(self.advance(room, &spec, c.serving, whole, now_ms, false).await?) } else { None };
        room.book.lock().held_back = held_back;
        let serving = step.map_or(c.serving, |a| a.serving);
        // People, not numbers: a spread room's places are not consecutive.
        let passed = room.state.passed(&super::state::Counters { serving, ..c });
        if leader {
            room.book.lock().claims.served(serving, passed);
            self.keep_book(room, now_ms).await;
        }
        if let Some(a) = step {
            room.report.marks.lock().note(super::tally::minute_of(now_ms), a.serving, a.lane_serving);
        }
        if leader && spec.config.bot_check != super::config::RoomBotCheck::Off {
            // Places whose turn came with the bot check still owed, past the grace: lost.
            room.state.lapse(now_ms, spec.config.proof_grace_seconds * 1000).await?;
        }
        {
            let mut b = room.book.lock();
            if let Some(prev) = b.last_passed {
                let inst = passed.saturating_sub(prev) as f64 * 1000.0 / dt_ms as f64;
                let m = room.measured_rate();
                room.set_measured_rate(if m == 0.0 { inst } else { 0.7 * m + 0.3 * inst });
            }
            b.last_passed = Some(passed);
        }
        // The report: this edge's counts, and from the leader the places it released and its
        // figures (while people wait or sessions run, or something was counted this minute).
        if leader && whole > 0 {
            room.report.tally.count(now_ms, super::tally::Count::Released, step.map_or(0, |a| a.released));
        }
        let gauges = leader.then(|| room.report_gauges());
        let in_play = c.issued > serving || active > 0;
        room.report.flush(now_ms, gauges.as_deref(), in_play).await
    }

    /// The leader's step of `whole` admissions from `serving` at `now_ms`: the invite lane's part
    /// (`[rooms.invite] share`, its fraction carried), the store's advance, and its places
    /// promised in the book ([`super::claims`]) with their pickup window. A step `between` ticks
    /// only adds its places: the pickups are counted at ticks, and places lapse there.
    async fn advance(&self, room: &Room, spec: &super::config::RoomSpec, serving: u64, whole: u64, now_ms: u64, between: bool) -> Result<super::state::Advanced, StateError> {
        let lane = match spec.lane_share {
            Some(share) => {
                let mut b = room.book.lock();
                let part = whole as f64 * share + b.lane_carry;
                // (1e-9: 10 × 0.3 is 3.0000000000000004, 100 × 0.29 is 28.999999999999996.)
                let k = ((part + 1e-9).floor() as u64).min(whole);
                b.lane_carry = (part - k as f64).clamp(0.0, 1.0);
                k
            }
            None => 0,
        };
        room.book.lock().unkept_due = true;
        let a = room.state.advance_lane(&self.node, whole, lane, now_ms).await?;
        room.front_at(a.serving, a.lane_serving);
        let mut b = room.book.lock();
        b.unkept_due = false;
        let p = b.told.pickup(a.serving, now_ms, room.state.epoch_s() * 1000);
        let r = super::claims::Released { from: serving, to: a.serving, places: a.released, in_line: a.in_line, pickup_ms: p.window_ms, standby_ms: p.standby_ms };
        tracing::trace!(room = %room.id, ?r, "released");
        if between {
            b.claims.push(now_ms, r);
        } else {
            b.claims.note(now_ms, Some(r), None);
        }
        Ok(a)
    }

    /// A release step between two ticks (issue #39), run every [`BETWEEN`] while the last tick's
    /// step was held back by the tickets already promised ([`super::ReleaseBook::held_back`]): the
    /// stock read again, the holds made since settle their places, and as many of the held-back
    /// admissions go in as the tickets no one is promised now serve. The last tickets of a sale
    /// sell in rounds (let in, admitted, held, settled); a round that waits for the next tick
    /// costs up to a second each. Never more than the tick's rate allowed; nothing while the room
    /// is paused, queues all, turns everyone away, is closed or sold out, or this edge does not
    /// lead (the store refuses a step from an edge whose lease lapsed). Returns the admissions let
    /// in.
    pub async fn step_between(&self, room: &Room, now_ms: u64) -> Result<u64, StateError> {
        let spec = room.spec();
        let (_, closes_at) = room.window(&spec);
        let stopped = room.is_paused() || room.is_queue_all() || room.rejecting() || room.sold_out.load(Ordering::Relaxed);
        if !room.leader.load(Ordering::Relaxed) || stopped || closes_at.is_some_and(|t| (now_ms / 1000) as i64 >= t) {
            room.book.lock().held_back = 0;
            return Ok(0);
        }
        // The holds made since the tick free their places here, and are noted at the next tick
        // ([`super::claims::Claims::cap_after`]).
        let holds = *room.holds.lock();
        let max_qty = u64::from(spec.config.max_qty);
        let (whole, available, tick_ms) = {
            let b = room.book.lock();
            // Nothing held back; or a step whose answer never came (the store may have made it):
            // its places are promised at the next tick, before anyone else goes in.
            if b.held_back == 0 || b.unkept_due {
                return Ok(0);
            }
            let available = room.available.load(Ordering::Acquire);
            let cap = b.claims.cap_after(b.last_tick_ms, holds, available, max_qty);
            (b.held_back.min(cap).min(available), available, b.last_tick_ms)
        };
        let c = room.state.counters();
        let mut released = 0;
        if whole > 0 {
            let a = self.advance(room, &spec, c.serving, whole, now_ms, true).await?;
            released = a.released;
            tracing::debug!(room = %room.id, whole, available, held_back = room.book.lock().held_back - whole, "release step between ticks");
            let passed = room.state.passed(&super::state::Counters { serving: a.serving, ..c });
            {
                let mut b = room.book.lock();
                b.held_back -= whole;
                b.claims.served(a.serving, passed);
            }
            self.keep_book(room, now_ms).await;
            room.report.marks.lock().note(super::tally::minute_of(now_ms), a.serving, a.lane_serving);
            room.report.tally.count(now_ms, super::tally::Count::Released, a.released);
            if !room.leader.load(Ordering::Relaxed) {
                // The lease went to another edge since the tick (the store moved nothing).
                return Ok(released);
            }
        }
        // Every ticket left promised again, or some free: what the places behind are told turns
        // with it, and the told record keeps the slower of the two for the next steps' windows.
        let mut b = room.book.lock();
        let cap = b.claims.cap_after(tick_ms, holds, available, max_qty);
        let spoken_for = cap == 0 && room.state.counters().waiting() > 0;
        if room.spoken_for.swap(spoken_for, Ordering::Relaxed) != spoken_for {
            let serving = room.state.counters().serving;
            let telling = if spoken_for { super::told::Telling::SpokenFor } else { moving(room) };
            b.told.record_after(room.unbounded_at_ms(), super::told::ToldTick { at: now_ms, serving, telling, reach: super::reach(room) });
            drop(b);
            room.changed();
        }
        Ok(released)
    }

    /// `room`'s fair share of the core, which every room of this edge shares (one core, one latency
    /// window): the rooms' total occupancy (tokens out and sessions active) divided max-min by
    /// demand ([`crate::controller::fair_shares`]), weighted by each room's `release.weight`: a room
    /// whose occupancy plus queue is under its weighted part gets all it wants, the others split
    /// the rest in proportion to their weights. A room under its share grows
    /// towards it while the core is under target, one over it gives way at the hold pressure, and
    /// over target only the rooms at or over their share cut, so one room's surge neither starves
    /// another's release nor teaches it a threshold, and no room is held below its minimum rate.
    /// `active` is `room`'s occupancy of this tick (the others' are from their last sweep);
    /// `None` when `room` is alone on the core.
    pub fn fair_share(&self, room: &Room, active: u64) -> Option<f64> {
        let rooms = self.all();
        let demands: Vec<crate::controller::RoomDemand> = rooms
            .iter()
            .map(|r| {
                let occ = if r.id == room.id { active } else { r.active.load(Ordering::Relaxed) };
                let c = r.state.counters();
                let weight = r.spec().config.release.weight;
                crate::controller::RoomDemand { weight, ..crate::controller::RoomDemand::new(occ as f64, c.waiting() as f64) }
            })
            .collect();
        let i = rooms.iter().position(|r| r.id == room.id)?;
        crate::controller::fair_shares(&demands).into_iter().nth(i).flatten()
    }

    /// When the next room opens (Unix ms), after `now_ms`: the release loop ticks then, so the
    /// sale's first step comes at its open rather than up to a tick later (a tick's worth: see
    /// [`Rooms::tick_room`]).
    pub fn next_opening_ms(&self, now_ms: u64) -> Option<u64> {
        self.all()
            .iter()
            .filter_map(|r| r.window(&r.spec()).0)
            .filter_map(|o| u64::try_from(o).ok()?.checked_mul(1000))
            .filter(|at| *at > now_ms)
            .min()
    }

    /// Ticks every room (after applying room changes published by other edges).
    pub async fn tick_all(&self, now_ms: u64) {
        if let Err(e) = self.sync_specs().await {
            tracing::warn!("room configs from other edges: {e}");
        }
        for room in self.all() {
            if let Err(e) = self.tick_room(&room, now_ms).await {
                tracing::warn!(room = %room.id, "release tick: {e}");
            }
        }
    }

    /// The steps between ticks ([`Rooms::step_between`]) of every room this edge leads whose last
    /// step the promises held back, each after a fresh read of its stock from `core`; `woken`: a
    /// hold answered through this edge woke them (counted per room, `hold_wakes`).
    pub async fn step_all_between(&self, core: SocketAddr, woken: bool) {
        for room in self.all() {
            if room.book.lock().held_back == 0 || !room.leader.load(Ordering::Relaxed) {
                continue;
            }
            if woken {
                room.hold_wakes.fetch_add(1, Ordering::Relaxed);
            }
            self.poll_stock(core, &room).await;
            if let Err(e) = self.step_between(&room, unix_ms()).await {
                tracing::warn!(room = %room.id, "release step between ticks: {e}");
            }
        }
    }

    /// Keeps `room`'s book of promises for the next leader ([`super::state::RoomState::keep_book`]):
    /// every tick while something is promised, and once when nothing is any more. A store that
    /// fails here costs the tick nothing (its step is made): a failover then starts from the book
    /// kept before.
    async fn keep_book(&self, room: &Room, now_ms: u64) {
        let text = {
            let mut b = room.book.lock();
            if b.claims.is_empty() && b.kept_empty && now_ms.saturating_sub(b.kept_at_ms) < EMPTY_BOOK_EVERY_MS {
                return;
            }
            b.kept_empty = b.claims.is_empty();
            b.kept_at_ms = now_ms;
            // An empty book still says where `serving` stood (for [`super::claims::Claims::unkept`]).
            serde_json::to_string(&b.claims).unwrap_or_default()
        };
        match room.state.keep_book(&self.node, &text, super::claims::CLAIM_MS).await {
            Ok(true) => {}
            Ok(false) => {
                // The lease went to another edge since this tick renewed it: that edge's book
                // stands; this one reads it if it takes the lease back.
                room.book.lock().kept_empty = false;
                room.leader.store(false, Ordering::Relaxed);
                tracing::warn!(room = %room.id, "release: the lease was lost before the book was kept");
            }
            Err(e) => {
                room.book.lock().kept_empty = false;
                tracing::warn!(room = %room.id, "release: the book of promises not kept for the next leader: {e}");
            }
        }
    }

    /// Gives up every lease (graceful stop).
    pub async fn resign_all(&self) {
        for room in self.all() {
            let _ = room.state.resign(&self.node).await;
            room.leader.store(false, Ordering::Relaxed);
        }
    }

    /// Asks the core for each room's stock (every tick: a hold settles its fan's promise, and
    /// the next fans go in, within a tick), and with `all` also for the event's schedule and the
    /// core's utilisation (every other tick).
    pub async fn poll_core(&self, core: SocketAddr, all: bool) {
        for room in self.all() {
            let event = room.spec().config.event.clone();
            // The event's schedule: the room never admits before it opens.
            if all
                && let Some((200, body)) = http_get(core, &format!("/v1/events/{event}")).await
                && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
            {
                let t = |k: &str| v.get(k).and_then(|x| x.as_str()).and_then(super::config::parse_time);
                room.set_core_window(t("opens_at"), t("closes_at"));
            }
            self.poll_stock(core, &room).await;
        }
        if !all {
            return;
        }
        if let Some((200, body)) = http_get(core, "/metrics").await {
            let text = String::from_utf8_lossy(&body);
            if let Some(u) = utilisation(&text) {
                self.core_util_milli.store((u * 1000.0) as u64, Ordering::Relaxed);
                self.core_util_at_ms.store(unix_ms(), Ordering::Relaxed);
            }
            // The core's own P99 since the last poll, for the stats next to the edge's.
            let now = latency_buckets(&text);
            let mut prev = self.core_buckets.lock();
            let p99 = p99_between(&prev, &now);
            *prev = now;
            drop(prev);
            for room in self.all() {
                room.core_p99_us.store(p99.map_or(u64::MAX, |ms| (ms * 1000.0) as u64), Ordering::Relaxed);
            }
        }
    }

    /// Asks the core for `room`'s stock: what is left, held and sold, and the holds made (a hold
    /// settles its fan's promise, [`super::claims`]).
    async fn poll_stock(&self, core: SocketAddr, room: &Room) {
        let event = room.spec().config.event.clone();
        if let Some((200, body)) = http_get(core, &format!("/v1/events/{event}/stock")).await
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
            && let Some(stock) = Stock::read(&v)
        {
            room.available.store(stock.available, Ordering::Release);
            room.held.store(stock.held, Ordering::Relaxed);
            room.sold.store(stock.sold, Ordering::Relaxed);
            *room.holds.lock() = Some((stock.holds, stock.hold_units));
            let restock = stock.sold_out && stock.held > 0;
            let restock_changed = room.restock_possible.swap(restock, Ordering::Relaxed) != restock;
            if stock.sold_out {
                room.note_unbounded(unix_ms());
            }
            let sold_out_changed = room.sold_out.swap(stock.sold_out, Ordering::Relaxed) != stock.sold_out;
            if restock_changed || sold_out_changed {
                room.changed();
            }
            if sold_out_changed {
                tracing::info!(room = %room.id, sold_out = stock.sold_out, held = stock.held, "core stock");
                if stock.sold_out
                    && let Err(e) = room.report.store.sold_out(unix_ms()).await
                {
                    tracing::warn!(room = %room.id, "report: sold-out time not kept: {e}");
                }
            }
        }
    }
}

/// What a moving queue's places are told: their turn at the measured release rate (the set one
/// before any is measured).
fn moving(room: &Room) -> super::told::Telling {
    let measured = room.measured_rate();
    let per_s = if measured > 0.0 { measured } else { room.release_rate() };
    if per_s > 0.0 { super::told::Telling::Moving { per_s } } else { super::told::Telling::NoRate }
}

/// What the release needs from the core's stock answer (docs/src/api.md `GET /v1/events/{event}/stock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stock {
    /// Every SKU is sold out.
    pub sold_out: bool,
    /// Most units any one SKU can still sell, less the tickets the core's waitlist holds for fans it
    /// told "sold out" while tickets could come back (`waiting`): those are theirs first, not the next
    /// fans' (issue #39).
    pub available: u64,
    /// Tickets in unpaid holds, over every pool: they return to sale if their orders time out.
    pub held: u64,
    /// Tickets sold, over every pool.
    pub sold: u64,
    /// Holds ever made for the event and their tickets (0 from a core that does not count them).
    pub holds: u64,
    pub hold_units: u64,
}

impl Stock {
    /// From the stock JSON; `None` when it has no SKUs.
    pub fn read(v: &serde_json::Value) -> Option<Stock> {
        let skus = v.get("skus")?.as_object().filter(|s| !s.is_empty())?;
        let sold_out = skus.values().all(|s| s.get("sold_out").and_then(serde_json::Value::as_bool) == Some(true));
        let available = skus.values().filter_map(|s| s.get("available")?.as_u64()).max().unwrap_or(0);
        let pools = v.get("pools").and_then(|p| p.as_object());
        let total = |key: &str| pools.map_or(0, |pools| pools.values().filter_map(|p| p.get(key)?.as_u64()).sum());
        let count = |key: &str| v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0);
        let available = available.saturating_sub(count("waiting"));
        Some(Stock { sold_out, available, held: total("held"), sold: total("sold"), holds: count("holds"), hold_units: count("hold_units") })
    }
}

/// The core's request-latency histogram (`wicket_core_request_duration_seconds`, every route),
/// cumulative count per upper bound in seconds, from its Prometheus text.
pub fn latency_buckets(text: &str) -> Vec<(f64, f64)> {
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    for l in text.lines().filter(|l| l.starts_with("wicket_core_request_duration_seconds_bucket{")) {
        let Some(le) = l.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else { continue };
        let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::NAN) };
        let Some(n) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else { continue };
        if le.is_nan() {
            continue;
        }
        match by_le.iter_mut().find(|(b, _)| *b == le) {
            Some(e) => e.1 += n,
            None => by_le.push((le, n)),
        }
    }
    by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
    by_le
}

/// P99 in ms of the requests between two readings of [`latency_buckets`] (the bucket's upper
/// bound; `None` without requests in between, or beyond the last finite bucket).
pub fn p99_between(before: &[(f64, f64)], now: &[(f64, f64)]) -> Option<f64> {
    let delta: Vec<(f64, f64)> = now
        .iter()
        .map(|(le, n)| (*le, n - before.iter().find(|(b, _)| b == le).map_or(0.0, |(_, m)| *m)))
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    delta.iter().find(|(_, n)| *n >= 0.99 * total).and_then(|(le, _)| le.is_finite().then_some(le * 1000.0))
}

/// `wicket_core_inflight / wicket_core_concurrency_limit` from the core's Prometheus text.
pub fn utilisation(text: &str) -> Option<f64> {
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let (inflight, limit) = (value("wicket_core_inflight")?, value("wicket_core_concurrency_limit")?);
    (limit > 0.0).then(|| inflight / limit)
}

async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, Bytes)> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<Bytes>>();
    let uri: http::Uri = format!("http://{addr}{path}").parse().ok()?;
    let resp = tokio::time::timeout(Duration::from_millis(800), client.get(uri)).await.ok()?.ok()?;
    let status = resp.status().as_u16();
    let body = tokio::time::timeout(Duration::from_millis(800), resp.into_body().collect()).await.ok()?.ok()?.to_bytes();
    Some((status, body))
}

/// How a tick reads one room gauge (`None`: not known yet, the room's series is left out rather
/// than shown as 0).
type ReadGauge = fn(&Rooms, &Room) -> Option<f64>;

/// One room gauge: its name, its help, and how it is read.
type RoomGauge = (&'static str, &'static str, ReadGauge);

/// Reads an atomic that holds `u64::MAX` until its first value.
fn known(v: &std::sync::atomic::AtomicU64) -> Option<f64> {
    Some(v.load(Ordering::Relaxed)).filter(|v| *v != u64::MAX).map(|v| v as f64)
}

/// Every `wicket_room_*` gauge (label `room`), in base units: `promtool check metrics` runs on them
/// in tests/prometheus.rs, and deploy/ (alerts, the Grafana dashboard) charts them as the console does.
const ROOM_GAUGES: &[RoomGauge] = &[
    ("wicket_room_issued", "Last queue position handed out", |_, r| Some(r.state.counters().issued as f64)),
    ("wicket_room_serving", "Positions up to here may enter", |_, r| Some(r.state.counters().serving as f64)),
    ("wicket_room_queued", "People waiting (issued - serving, less invite-lane places admitted ahead of it)", |_, r| {
        Some(r.state.counters().waiting() as f64)
    }),
    ("wicket_room_active", "Admitted sessions running", |_, r| Some(r.active.load(Ordering::Relaxed) as f64)),
    ("wicket_room_release_rate", "Admissions per second the release runs at (set)", |_, r| Some(r.release_rate())),
    ("wicket_room_measured_release_rate", "Positions released per second, measured (smoothed)", |_, r| {
        Some(r.measured_rate())
    }),
    ("wicket_room_budget", "The controller's session budget", |_, r| Some(r.last_decision.lock().map_or(0.0, |d| d.budget))),
    ("wicket_room_core_p99_seconds", "Core P99 measured on the requests this edge forwards, seconds", |rooms, _| {
        Some(rooms.latency.snapshot(unix_ms()).p99_ms.unwrap_or(0.0) / 1000.0)
    }),
    ("wicket_room_core_p99_target_seconds", "The room's core P99 target (release.p99-target-ms), seconds", |_, r| {
        Some(r.spec().config.release.p99_target_ms / 1000.0)
    }),
    ("wicket_room_core_error_ratio", "Failed or timed-out fraction of the core requests the controller saw", |_, r| {
        r.last_input.lock().map(|i| i.error_fraction)
    }),
    ("wicket_room_core_utilisation_ratio", "Core in-flight requests / its concurrency limit, as the controller saw it", |_, r| {
        r.last_input.lock().and_then(|i| i.utilisation)
    }),
    ("wicket_room_leader", "1 when this edge advances the room's serving counter", |_, r| {
        Some(f64::from(u8::from(r.leader.load(Ordering::Relaxed))))
    }),
    ("wicket_room_paused", "1 while the operator has paused the room's releases", |_, r| Some(f64::from(u8::from(r.is_paused())))),
    ("wicket_room_reject_all", "1 while the room turns everyone away (reject-all)", |_, r| Some(f64::from(u8::from(r.rejecting())))),
    ("wicket_room_test_mode", "1 while the room meets only its testers (test mode)", |_, r| Some(f64::from(u8::from(r.test_mode())))),
    ("wicket_room_sold_out", "1 when the core says the event is sold out", |_, r| {
        Some(f64::from(u8::from(r.sold_out.load(Ordering::Relaxed))))
    }),
    ("wicket_room_stock_available", "Most units any SKU of the event can still sell (the core's stock)", |_, r| {
        known(&r.available)
    }),
    ("wicket_room_stock_held", "Tickets in unpaid holds over the event's pools (the core's stock)", |_, r| known(&r.held)),
    ("wicket_room_stock_sold", "Tickets sold over the event's pools (the core's stock)", |_, r| known(&r.sold)),
];

/// The rooms' Prometheus gauges (DESIGN §8), updated every tick.
struct RoomGauges {
    gauges: Vec<(prometheus::GaugeVec, ReadGauge)>,
}

impl RoomGauges {
    fn register(registry: &prometheus::Registry) -> Self {
        let gauges = ROOM_GAUGES
            .iter()
            .filter_map(|&(name, help, read)| {
                let g = prometheus::GaugeVec::new(prometheus::Opts::new(name, help), &["room"]).ok()?;
                registry.register(Box::new(g.clone())).ok()?;
                Some((g, read))
            })
            .collect();
        RoomGauges { gauges }
    }

    fn update(&self, rooms: &Rooms) {
        for room in rooms.all() {
            for (g, read) in &self.gauges {
                match read(rooms, &room) {
                    Some(v) => g.with_label_values(&[room.id.as_str()]).set(v),
                    None => {
                        let _ = g.remove_label_values(&[room.id.as_str()]);
                    }
                }
            }
        }
    }
}

/// The background service: ticks rooms every second, reads the core's stock before each tick and
/// its schedule and metrics every other; between ticks, steps the rooms whose last step the
/// promises held back ([`BETWEEN`]).
pub struct ReleaseLoop {
    /// The rooms it ticks.
    pub rooms: Arc<Rooms>,
    /// The core whose metrics it reads (utilisation), when the edge has one.
    pub core: Option<Arc<crate::resolve::Name>>,
    /// Where the rooms' gauges are registered (the edge's metrics).
    pub registry: prometheus::Registry,
}

#[async_trait]
impl BackgroundService for ReleaseLoop {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let (rooms, core) = (self.rooms.clone(), self.core.clone());
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut between = tokio::time::interval(BETWEEN);
        between.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let gauges = RoomGauges::register(&self.registry);
        let mut n = 0u64;
        // When the last tick began (Unix ms): an opening since then has not been ticked at.
        let mut ticked_ms = unix_ms();
        // When the last step between ticks began (a hold's wake waits out [`NUDGE_GAP`] from it).
        let mut stepped = tokio::time::Instant::now();
        loop {
            // A sale opening before the next tick: the loop ticks at its open and keeps that beat.
            let opening = opening_wait(rooms.next_opening_ms(ticked_ms), unix_ms());
            tokio::select! {
                _ = tokio::time::sleep(opening.unwrap_or(TICK)), if opening.is_some() => {
                    tick.reset_immediately();
                }
                _ = tick.tick() => {
                    ticked_ms = unix_ms();
                    if let Some(core) = &core {
                        rooms.poll_core(core.addr(), n % 2 == 0).await;
                    }
                    rooms.tick_all(unix_ms()).await;
                    gauges.update(&rooms);
                    n += 1;
                }
                _ = between.tick(), if core.is_some() => {
                    if let Some(core) = &core {
                        stepped = tokio::time::Instant::now();
                        rooms.step_all_between(core.addr(), false).await;
                    }
                }
                _ = rooms.hold_nudge.notified(), if core.is_some() => {
                    if let Some(core) = &core {
                        // Holds coming faster than the gap share one step (the permit a hold
                        // leaves while this one runs wakes the next), and the beat starts over.
                        tokio::time::sleep_until(stepped + NUDGE_GAP).await;
                        stepped = tokio::time::Instant::now();
                        rooms.step_all_between(core.addr(), true).await;
                        between.reset();
                    }
                }
                _ = shutdown.changed() => {
                    rooms.resign_all().await;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Issue 39: ticks that fail (the room state store down) keep the time of the last step; the
    /// first step after them releases at most one and a half ticks' worth, not the outage's.
    #[test]
    fn a_step_after_failed_ticks_releases_at_the_rate_not_the_outage() {
        use super::{MAX_STEP_MS, release_step};
        // 25/s, a tick a second: 25 a step.
        let (mut carry, mut released) = (0.0, Vec::new());
        let mut last_tick_ms = 0;
        for now_ms in [1000u64, 2000, 3000, /* 4000..=8000 fail */ 9000, 10_000, 11_000] {
            let whole;
            (whole, carry) = release_step(25.0, now_ms - last_tick_ms, carry);
            released.push(whole);
            last_tick_ms = now_ms;
        }
        assert_eq!(released, vec![25, 25, 25, 37, 25, 25], "6 s of outage release 1.5 s worth, not 150");
        assert_eq!(carry, 0.5, "the fraction is carried, nothing more");
        // A late timer (1.2 s) releases its time; fractions add up across steps.
        assert_eq!(release_step(25.0, 1200, 0.0), (30, 0.0));
        assert_eq!(release_step(2.5, 1000, 0.0), (2, 0.5));
        assert_eq!(release_step(2.5, 1000, 0.5), (3, 0.0));
        assert_eq!(release_step(10.0, MAX_STEP_MS * 10, 0.0), (15, 0.0));
        // No rate (paused, sold out, closed): nothing, and the carry waits.
        assert_eq!(release_step(0.0, 5000, 0.7), (0, 0.7));
        assert_eq!(release_step(f64::NAN, 5000, 0.7), (0, 0.7));
    }

    /// The loop ticks at a sale's open: a millisecond after it, at once when it passed while the
    /// loop was busy, never for an opening a tick or more away (the regular tick comes first).
    #[test]
    fn the_loop_waits_for_an_opening_before_its_next_tick() {
        use super::{Duration, opening_wait};
        assert_eq!(opening_wait(Some(10_300), 10_000), Some(Duration::from_millis(301)));
        assert_eq!(opening_wait(Some(10_000), 10_000), Some(Duration::from_millis(1)));
        assert_eq!(opening_wait(Some(9_990), 10_000), Some(Duration::ZERO), "passed while busy: at once");
        assert_eq!(opening_wait(Some(10_999), 10_000), None, "a tick away: the tick comes first");
        assert_eq!(opening_wait(Some(50_000), 10_000), None);
        assert_eq!(opening_wait(None, 10_000), None);
    }

    #[test]
    fn utilisation_from_prometheus_text() {
        let t = "# HELP x\nwicket_core_inflight_total 9\nwicket_core_inflight 12\nwicket_core_concurrency_limit 48\n";
        assert_eq!(super::utilisation(t), Some(0.25));
        assert_eq!(super::utilisation("wicket_core_inflight 1\n"), None);
    }

    #[test]
    fn core_p99_from_two_readings_of_its_histogram() {
        let text = |a: u64, b: u64, c: u64| {
            format!(
                "wicket_core_request_duration_seconds_bucket{{route=\"holds\",le=\"0.005\"}} {a}\n\
                 wicket_core_request_duration_seconds_bucket{{route=\"holds\",le=\"0.05\"}} {b}\n\
                 wicket_core_request_duration_seconds_bucket{{route=\"holds\",le=\"+Inf\"}} {c}\n\
                 wicket_core_request_duration_seconds_bucket{{route=\"stock\",le=\"0.005\"}} 10\n\
                 wicket_core_request_duration_seconds_bucket{{route=\"stock\",le=\"0.05\"}} 10\n\
                 wicket_core_request_duration_seconds_bucket{{route=\"stock\",le=\"+Inf\"}} 10\n"
            )
        };
        let before = super::latency_buckets(&text(100, 100, 100));
        assert_eq!(before, vec![(0.005, 110.0), (0.05, 110.0), (f64::INFINITY, 110.0)]);
        // 1000 more requests, 990 under 5 ms: P99 5 ms; then 100 more, 50 between 5 and 50 ms: 50 ms.
        let mid = super::latency_buckets(&text(1090, 1100, 1100));
        assert_eq!(super::p99_between(&before, &mid), Some(5.0));
        let after = super::latency_buckets(&text(1140, 1200, 1200));
        assert_eq!(super::p99_between(&mid, &after), Some(50.0));
        assert_eq!(super::p99_between(&after, &after), None, "no requests in between");
    }

    #[test]
    fn stock_from_the_core_answer() {
        use super::Stock;
        let v = serde_json::json!({
            "pools": {"main": {"capacity": 10, "available": 0, "held": 3, "sold": 7}, "combo": {"capacity": 5, "available": 2, "held": 1, "sold": 2}},
            "skus": {"adult": {"available": 0, "sold_out": true}, "combo": {"available": 0, "sold_out": true}},
            "holds": 8, "hold_units": 13
        });
        assert_eq!(Stock::read(&v), Some(Stock { sold_out: true, available: 0, held: 4, sold: 9, holds: 8, hold_units: 13 }));
        let v = serde_json::json!({"pools": {}, "skus": {"a": {"available": 4, "sold_out": false}, "b": {"available": 9, "sold_out": false}}});
        assert_eq!(Stock::read(&v), Some(Stock { sold_out: false, available: 9, held: 0, sold: 0, holds: 0, hold_units: 0 }), "an older core: no hold counts");
        let v = serde_json::json!({"pools": {}, "skus": {"a": {"available": 4, "sold_out": false}}, "waiting": 3});
        assert_eq!(Stock::read(&v).map(|s| s.available), Some(1), "the tickets the core's waitlist waits for are not the next fans'");
        assert_eq!(Stock::read(&serde_json::json!({"skus": {}})), None);
        assert_eq!(Stock::read(&serde_json::json!({"error": "not_found"})), None);
    }
}
