//! # Wicket's release controller
//!
//! The release controller (DESIGN §4) and the latency window it reads: pure arithmetic over
//! measurements, with no Pingora, no tokio and no I/O, so it can be read, tested and reused alone
//! (the edge, the nginx path). `cargo run -p wicket-controller --example sim` prints the simulator's
//! comparison reports.
//!
//! # Layout
//! - [`LatencyWindow`]: a sliding-window latency histogram the proxy feeds with every forwarded core
//!   request (O(1), lock-free, no allocation after construction); [`LatencyWindow::snapshot`] gives
//!   the P99, the sample count and the error fraction over the last few seconds.
//! - [`ReleaseController`]: once a second (off the request path) turns those figures plus the room's
//!   occupancy into a release rate (admissions per second) and a [`Decision`] saying why; operator
//!   overrides ([`ReleaseMode`], [`Bounds`]) always win, and every change leaves a [`ControlEvent`].
//! - [`sim`]: a simulated core with a known capacity curve, a fixed-rate policy and a clairvoyant
//!   oracle, used by the tests here and by bench/ for the comparison figures.
//!
//! Nothing here does I/O or reads a clock: time is passed in as milliseconds since any fixed origin
//! (the room's start, the Unix epoch...), so the tests run the loop for minutes in milliseconds.
//!
//! # Why a session budget, not a rate
//! A released token loads the core only seconds later (the user polls, sees "admitted", clicks) and
//! then for a whole session. Steering the release *rate* from the P99 hunts at the knee because of that
//! delay. The controller steers a **budget** L of admitted-but-unfinished sessions instead (Little's
//! law: what the core feels is the number of live sessions) and derives the rate that keeps the
//! occupancy at L: `rate = (L − occ) / horizon + exits`. Over the latency target L is cut from what is
//! really out there (`min(L, occ)`), then left alone until the cut has had time to show (cool-down), the
//! way TCP treats a congestion window.
//!
//! Growth is delay-aware: the metrics show the load of the occupancy one actuation delay ago, so L may
//! run ahead of *that* occupancy only as far as the pressure leaves room for (at most 15%, 30% in slow
//! start). Without this bound a loop that grows a few % per second overshoots the knee by the whole
//! delay's growth before the first bad P99 arrives, and the overshoot then takes a session length to
//! drain. Tuning and the figures behind the defaults: bench/controller/README-notes.
//!
//! # Rooms sharing a core, and memory that ages
//! Every room of an edge reads the same core figures, so one room's load is every room's pressure.
//! Each room's release is still its own: its controller state comes only from its own decisions
//! and from pressure while it held its share. The rooms share the core **max-min by demand**,
//! weighted by the operator ([`fair_shares`]): what is divided is what the rooms hold now (their
//! total occupancy); a room's demand is its occupancy plus its queue; a room wanting less than its
//! weighted part gets all it wants, the others split the rest. So a small sale beside a surge is
//! entitled to everyone in its queue, and the surge is over its share exactly while they wait.
//!
//! - Over target, only a room at or over its share cuts and learns a slow-start threshold; one
//!   under it holds ([`Reason::OverShared`]) and keeps at least its minimum rate.
//! - Under target, a room under its share grows towards it ([`Reason::GrowToShare`]): about ×1.15 a
//!   tick (the budget 30% ahead of the occupancy), at any pressure under target and past any
//!   ssthresh, up to the share and to `share_lead` (3) × the occupancy the metrics reflect.
//! - A room over its share does not grow once the core is past the slow-start exit pressure (the
//!   room left is the waiting room's), and gives way `share_yield` (3%) of its budget a tick, down
//!   to its share, while the core is at the hold pressure ([`Reason::YieldShare`]) — before the
//!   core is pushed over target and every room pays a cut.
//!
//! Without this the surge held the core at the hold pressure, where a room under its share could
//! only hold, and the small sale's fans waited minutes (`rooms_at_once_one_surging` in [`sim`]:
//! 148 of 300 buyers in 120 s; now all within 26.4 s, seeds 1–10). The edge must pass shares by
//! demand: with the equal split of [`fair_share`] a room with nobody waiting looks under its share,
//! the surge yields to it for nothing and its goodput suffers (0.80–0.86 of the oracle instead of
//! 0.87–0.95 in that scenario).
//!
//! What pressure taught ages: after `pressure_memory_ms` (60 s) without a tick over target,
//! ssthresh and the last cut's level are forgotten; light load grows past any ssthresh.
//!
//! # Errors alone are an outage, not congestion
//! Errors cut the budget like latency does (a core that fails is not to be fed), and the cut sets the
//! slow-start threshold. When the latency and the utilisation stayed under target, though, the errors
//! were most likely an outage — the core restarting, a network blip — and say nothing about the core's
//! capacity: kept, that cut held a sale for minutes at half its level after a one-second restart
//! (the `surge crashes` bench: light load may never grow past ssthresh, so the release sat at the
//! room's minimum to the end of the sale). So a cut made for errors alone remembers where the loop
//! was (the level it cut from, ssthresh before it), and once the core has been healthy for
//! `error_recovery_ticks` consecutive ticks (default 5: fresh metrics, some requests, errors under a
//! fifth of the threshold, pressure ≤ 1) the cut is undone ([`Reason::ErrorsCleared`]): ssthresh back to
//! its old value, the cool-down over, and the budget back to the old level but no higher than the
//! occupancy the healthy metrics reflect (one actuation delay ago) — the core has just been seen to
//! carry that much, and the occupancy drains slowly, so after a short outage it is most of the way.
//! Slow start, with its usual lead bound and exit pressure, finds the rest.
//!
//! It stays cautious where the errors are load: a cut with the latency or the utilisation over target
//! is never undone, nor is an error cut once any tick since has been over on pressure; errors that keep
//! coming back keep the healthy streak short, so the cuts stand (the first cut of an episode is the
//! level remembered, never a later, higher one). Undoing rather than regrowing was chosen because
//! regrowing (faster growth above ssthresh at low pressure) would apply to every cut, latency ones
//! included; the undo touches only the error-only case and needs no new growth rule.
//!
//! # A cut's cool-down ends by pressure, not by occupancy
//! After a cut the budget is held (no growth) and further cuts are off while the cut takes effect.
//! That cool-down used to end only once the occupancy, now and one actuation delay ago, had drained
//! to the cut budget (or after `max_cooldown_ms`, 30 s). But the occupancy counts every admitted
//! session, and the fans who already bought stay on the site for the rest of theirs, loading the
//! core little: after a cut it often never drains to the budget, and every cut held the release at
//! its minimum for the whole 30 s with the core idle and the queue full (issue #39: a core stopped
//! for 1 s cost a cautious sale 30 s; one slow second of a busy machine cost the default room
//! 30 s).
//!
//! The pressure is what the cut is for, so the pressure says when it has shown: after
//! `cooldown_clear_ticks` (2) consecutive calm ticks — fresh metrics, some requests, pressure under
//! the slow-start exit (0.6), no errors to speak of — the cool-down is over, whatever the
//! occupancy. The core has then carried everything out there, well clear of its knee, on samples
//! taken after the cut: holding the budget longer protects nothing. Calm is the slow-start exit,
//! not the hold level or the target: near the knee the occupancy is the load, and there the old
//! rule (drain to the budget) still decides. (Calm at the hold level, 0.88, put seed 42 of the
//! simulator's −50% step 11 s more over target than the oracle, against a goal of 10, and
//! confirmed over three ticks its +50% step at 0.835 of the oracle's goodput, against 0.85; at 0.6
//! the standard scenarios' figures are those of before.) With few requests, a core idle by its own
//! count (utilisation ≤ 5%) and under target is calm too, as it is light for growth. Two things
//! stay as they were, so this is not a way to wind up:
//! - no cut within `cooldown_ms` (8 s: one actuation delay and a window) of the last one: over
//!   target again that soon, the release drains at its minimum and the budget follows the
//!   occupancy down ([`Reason::CoolDown`]), as before;
//! - growth after the cool-down keeps its bounds: the light-load doubling is at most twice the
//!   occupancy, and the loaded rules grow from the cut budget within their lead over the
//!   occupancy the metrics reflect, so the release rises from the minimum only as the budget passes
//!   the occupancy — the sessions already out there still count against it.
//!
//! The simpler alternative, counting only sessions that have not bought yet as load, needs the edge
//! to tell sessions apart by what they did at the core; the pressure is already here, and it
//! measures what the core feels whoever causes it. A cut for errors alone is not cleared this way:
//! its undo ([`Reason::ErrorsCleared`]) does more and comes after `error_recovery_ticks`.
//!
//! # After a cut, the release resumes at the rate it carried
//! While a cut drains, the occupancy is over the budget and the release sits at its minimum. The
//! upward slew limiter (`slew_abs` 10, `slew_rel` 25% a tick) then took it back from that minimum:
//! in a StarArena surge one far cut (P99 1.6 × the target, 17 s in) dropped the rate from 575/s to
//! 20/s, the core was calm two ticks later, and the rate climbed 20, 30, 40, 50, 62 … 465/s over
//! 13 ticks with thousands waiting — a 38-s sellout against 25–28 s without the cut (issue #39).
//! The budget was cut by a factor (`far_cut` 0.5, `mild_cut` 0.7); the rate the core carried before
//! the cut, scaled by the same factor, is as safe a place to resume as the budget itself. So a cut
//! remembers that rate, and once its cool-down is over and the core is under target the slew
//! limiter may lift the release straight to it; the budget still bounds the release as ever
//! (`(L − occ) / horizon + exits`), so it is a ceiling lifted, never a floor. A further cut before
//! the rate got back scales the remembered rate again; after an error-only cut's undo the rate
//! before the outage is remembered whole (the missed seconds are never released, the rate is). It
//! is not used while requests still fail or an error-only cut waits for its undo, and is forgotten
//! once reached, `max_cooldown_ms` after the cut (a cut whose cool-down runs that long resumes by
//! the slew limiter alone), at sold out and by an override. Simulator (seeds 1–10):
//! the standard scenarios as before, the 1.5-s outage's admissions back in 4–6 s instead of 6–8,
//! the cautious sale with its core stopped 17.3 s instead of 18.4.
//!
//! What it does not mend: in StarArena with the core stopped for a second mid-sale (bench runs of
//! 2026-12-05, `bench/surge-stop/run.sh`) the release comes back at once, but the budget does not.
//! Stopped at 14 s (11 s after the open): 30, 48, 43, 49, 52 s against 24–26 s without the stop;
//! stopped at 8 s: 80 and 81 s. By the log's decisions: a far cut at the stop; in its cool-down the
//! P99 window still holds the stalled requests (pressure 12 two ticks after it), so the budget
//! follows the occupancy down (754 → 273, [`Reason::CoolDown`]); then slow start regrows it ×1.15 on
//! every other tick, `awaiting_load` between, at pressure 0.2–0.4 — 40 ticks back to 2,000 — and a
//! second mild cut on the way costs more. The budget is filled, besides, by sessions that no longer
//! load the core: about one admitted fan in ten holds and never pays, and its session counts in the
//! occupancy until idle for `session-idle-seconds` (120 s) — 800 of them 14 s into the sale.
//! Tried and not kept (`bench/surge-stop/tried-quiet-holders.patch`, on the edge and here):
//! leaving every session that held out of the occupancy — it is then only the fans on their way to
//! the core, a cut from it is tiny (124, then 1) and the budget never refilled (112 s); leaving out
//! those quiet 5 s since their hold, with a dip no cut asked for lifted straight back to the rate of
//! the last 5 s carried under as large a budget (the simulator within its goals) — stopped at 8 s
//! 68, 44, 80 s against 80, 81, but a StarArena run with no fault 72 s: a mild cut at the first
//! rush, the cool-down following the smaller occupancy down to 422, and the same slow regrowth.
//! A smaller occupancy makes every cut and every follow-down deeper; the regrowth is the lever
//! (the follow-down on a window still holding a stall's requests, slow start's wait for the
//! metrics after a cut that was a stall). Also tried and not kept: giving slow start back up to 90%
//! of the level cut from when a cut shows within its cool-down (42 and 59 s stopped at 14 s; the
//! simulator's 60–120-s-session plant 4 of 200 steady windows over target instead of 2); adding
//! the places let in and not yet picked up to the occupancy (DESIGN §4's tokens out: 0–200 here).
//! What was then left, the regrowth after a far cut that was a spike, the next section takes on.
//!
//! # A far cut that was a spike is recovered from as fast as slow start
//! A far cut halves the budget and, since the core most often changed (a capacity drop, a node
//! lost), forgets the level it cut from: growth is then 3% a tick within 15% of the occupancy of
//! one actuation delay ago. On a busy box one slow second is far over too: StarArena's budget
//! went 1,964 → 982 at pressure 1.79 (after 0.6 and 0.65), the core was at 0.25 two ticks later
//! and 0.12–0.3 for the rest of the sale, and the budget took 40 ticks to grow back — tickets
//! all held at 66 and 39 s against 26–28 s in the runs without a cut (2026-12-06).
//!
//! What tells the two apart is the cool-down: a core that changed stays over target until the
//! occupancy is down to what it now carries — about the cut budget — while after a spike the
//! pressure is calm (under the slow-start exit) with more sessions out there than the cut left,
//! the release at its minimum and the fans admitted before still leaving. So a far cut keeps its
//! level aside, and a calm tick in its cool-down with the occupancy at least `SPIKE_MARGIN` (1.1)
//! × the budget makes it the level to recover towards (`cut_from`, as after a mild cut); the
//! cool-down's end without one forgets it. The calm core then recovers as fast as slow start:
//! ×`slow_start_factor` a tick, the budget up to `max_lead_slow_start` ahead of the occupancy
//! *now* (the level was carried seconds ago: what the metrics lag behind was measured), whether
//! or not the occupancy has filled the budget yet, up to `recover_fraction` (90%) of the level; at
//! pressures from the slow-start exit to the hold pressure, `recover_growth` within the usual
//! lead, as after a mild cut. The rate the cut remembered ([`Reason::CutFar`]'s resume) is kept
//! for the whole `max_cooldown_ms`, not forgotten once reached, so a dip under the growing budget
//! comes straight back. A cut while the budget is still recovering says the level was wrong after
//! all: a far one then remembers nothing.
//!
//! Simulator (seeds 1–10): the standard scenarios, the outage and the rooms to the digit as before
//! (their far cuts are capacity drops and outages, over target until drained); of the other plants, the 60–120-s-session plant's seed 3
//! 0.885 of the oracle's goodput (0.864). Tried on the way: recovering after every far cut put the
//! −50% step 24 s over target beyond the oracle (goal 10); recovering that fast after mild cuts
//! too, 12 s — a mild cut's level keeps `recover_growth`; a spike judged after its cool-down had
//! ended (the occupancy drifting a session over the budget; with the dip lift named next), 20 s.
//! StarArena: `bench/results/surge-stararena.md`, "A far cut that was a spike". Tried with it and
//! not kept: the dip lift of `bench/surge-stop/tried-quiet-holders.patch` alone (a rate that dipped
//! with no cut lifted straight back to the highest of the last 5 s): the rooms' surge beside
//! buyers 0.855 of the oracle (goal 0.85, 0.874 without), and no clear gain with the core stopped.
pub mod sim;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

// ---------------------------------------------------------------------------------------------
// Latency window
// ---------------------------------------------------------------------------------------------

/// A far cut was a spike when a calm tick of its cool-down finds at least this many times the cut
/// budget in sessions out there (the crate doc, "A far cut that was a spike").
const SPIKE_MARGIN: f64 = 1.1;

/// Sub-buckets per power of two: 16 keeps the relative error of a quantile under ~3% (half of 1/16).
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Largest exponent kept: 2^31 µs ≈ 36 min; anything slower lands in the last bucket.
const MAX_EXP: u32 = 31;
/// Values below `SUB` µs get one bucket each; then `SUB` buckets per power of two up to `MAX_EXP`.
const BUCKETS: usize = SUB + (MAX_EXP as usize - SUB_BITS as usize + 1) * SUB;

fn bucket_of(us: u64) -> usize {
    if us < SUB as u64 {
        return us as usize;
    }
    let exp = (63 - us.leading_zeros()).min(MAX_EXP);
    let us = us.min((1u64 << (MAX_EXP + 1)) - 1);
    let sub = ((us >> (exp - SUB_BITS)) as usize) & (SUB - 1);
    SUB + (exp - SUB_BITS) as usize * SUB + sub
}

/// The middle of a bucket, in µs: what a quantile falling in that bucket reports.
fn bucket_mid_us(idx: usize) -> f64 {
    if idx < SUB {
        return idx as f64;
    }
    let exp = (idx - SUB) / SUB + SUB_BITS as usize;
    let sub = (idx - SUB) % SUB;
    let width = 1u64 << (exp - SUB_BITS as usize);
    let low = (SUB as u64 + sub as u64) * width;
    low as f64 + width as f64 / 2.0
}

/// One time slot of the window: a log histogram of successes plus an error count.
struct Slot {
    /// Which slot-sized period of time the counts belong to (`now_ms / slot_ms`); a recorder that finds
    /// an older epoch claims the slot (compare-and-swap) and clears it, so no ticker is needed.
    epoch: AtomicU64,
    buckets: Box<[AtomicU32]>,
    successes: AtomicU32,
    errors: AtomicU32,
}

/// A sliding-window latency histogram: a ring of `slots` time slots of `slot_ms` each.
///
/// `record_*` are O(1), allocation-free and take `&self` (atomics, relaxed ordering), so every proxy
/// worker can feed one shared window. The price of having no lock: a sample recorded exactly while its
/// slot is being recycled for a new period can be lost or counted in the wrong second; over the
/// thousands of samples a P99 needs that is noise.
pub struct LatencyWindow {
    slots: Box<[Slot]>,
    slot_ms: u64,
}

/// What [`LatencyWindow::snapshot`] saw over the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowStats {
    /// Successful requests in the window (the P99 is over these only).
    pub successes: u64,
    /// Failed or timed-out requests in the window.
    pub errors: u64,
    /// P99 latency of the successes in ms; `None` when there were none.
    pub p99_ms: Option<f64>,
}

impl WindowStats {
    /// errors / (successes + errors); 0 with no requests.
    pub fn error_fraction(&self) -> f64 {
        let total = self.successes + self.errors;
        if total == 0 {
            0.0
        } else {
            self.errors as f64 / total as f64
        }
    }
}

impl LatencyWindow {
    /// A window of `slots` × `slot_ms`; the edge uses 1000 ms slots and a few seconds of them.
    pub fn new(slots: usize, slot_ms: u64) -> Self {
        let slots = slots.max(1);
        let slot_ms = slot_ms.max(1);
        let slots = (0..slots)
            .map(|_| Slot {
                // u64::MAX: "never used", so it never matches a real epoch.
                epoch: AtomicU64::new(u64::MAX),
                buckets: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
                successes: AtomicU32::new(0),
                errors: AtomicU32::new(0),
            })
            .collect();
        Self { slots, slot_ms }
    }

    /// Length of the window in ms.
    pub fn span_ms(&self) -> u64 {
        self.slots.len() as u64 * self.slot_ms
    }

    fn slot_for(&self, now_ms: u64) -> &Slot {
        let epoch = now_ms / self.slot_ms;
        let slot = &self.slots[(epoch % self.slots.len() as u64) as usize];
        let seen = slot.epoch.load(Ordering::Relaxed);
        let claimed = (seen == u64::MAX || seen < epoch)
            && slot.epoch.compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Relaxed).is_ok();
        // A never-used slot is zero from construction: clearing it again would race with
        // recorders that already see the new epoch and lose their samples.
        if claimed && seen != u64::MAX {
            for b in slot.buckets.iter() {
                b.store(0, Ordering::Relaxed);
            }
            slot.successes.store(0, Ordering::Relaxed);
            slot.errors.store(0, Ordering::Relaxed);
        }
        slot
    }

    /// Records a successful request that took `latency_us`, observed at `now_ms`.
    pub fn record_success(&self, now_ms: u64, latency_us: u64) {
        let slot = self.slot_for(now_ms);
        slot.buckets[bucket_of(latency_us)].fetch_add(1, Ordering::Relaxed);
        slot.successes.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a failed request (5xx, connection error, timeout) observed at `now_ms`.
    pub fn record_error(&self, now_ms: u64) {
        self.slot_for(now_ms).errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts and P99 over the slots that fall in the window ending at `now_ms` (the current,
    /// partly filled slot included). Reads `slots × ~450` atomics: meant for the 1 s tick.
    pub fn snapshot(&self, now_ms: u64) -> WindowStats {
        self.quantile_snapshot(now_ms, 0.99)
    }

    /// As [`snapshot`](Self::snapshot) for any quantile `q` in (0, 1].
    pub fn quantile_snapshot(&self, now_ms: u64, q: f64) -> WindowStats {
        let now_epoch = now_ms / self.slot_ms;
        let oldest = now_epoch.saturating_sub(self.slots.len() as u64 - 1);
        let mut counts = [0u64; BUCKETS];
        let (mut successes, mut errors) = (0u64, 0u64);
        for slot in self.slots.iter() {
            let e = slot.epoch.load(Ordering::Acquire);
            if e == u64::MAX || e < oldest || e > now_epoch {
                continue;
            }
            for (c, b) in counts.iter_mut().zip(slot.buckets.iter()) {
                *c += u64::from(b.load(Ordering::Relaxed));
            }
            successes += u64::from(slot.successes.load(Ordering::Relaxed));
            errors += u64::from(slot.errors.load(Ordering::Relaxed));
        }
        // Bucket counts and the success counter are separate atomics: sum the buckets for the rank.
        let in_buckets: u64 = counts.iter().sum();
        let p99_ms = if in_buckets == 0 {
            None
        } else {
            let rank = ((q.clamp(0.0, 1.0) * in_buckets as f64).ceil() as u64).max(1);
            let mut seen = 0;
            let mut at = BUCKETS - 1;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    at = i;
                    break;
                }
            }
            Some(bucket_mid_us(at) / 1000.0)
        };
        WindowStats {
            successes,
            errors,
            p99_ms,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Release controller
// ---------------------------------------------------------------------------------------------

/// Tuning of the loop. The defaults suit a core answering in tens of ms and users who take a few
/// seconds from "admitted" to their first core request.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    /// Core P99 target in ms (room `release.p99_target_ms`; default 100). The controller aims at
    /// 0.8 × this, so that noise around the setpoint stays under the target.
    pub p99_target_ms: f64,
    /// Release bounds and cap in auto mode (room `release.min` / `max`, `total_active_max`).
    pub bounds: Bounds,
    /// First release rate (room `release.start`; default 50/s): where the slew limiter starts from.
    pub start_rate: f64,
    /// First session budget (default `start_rate × 10 s`).
    pub initial_budget: f64,
    /// Time from a release to its load showing in the P99 window (poll, see, click, + window); the
    /// minimum cool-down after a cut. Default 5000 ms.
    pub actuation_delay_ms: u64,
    /// After a cut, cuts stay off at least this long (default: actuation delay + 3 s window), so a cut
    /// is not cut again before it can show (windup). The budget is held (no growth) for this long too
    /// and until the occupancy, now and as the metrics see it (one actuation delay ago), has come down
    /// to the budget — whichever is later, but never longer than `max_cooldown_ms` (default 30 s), so a
    /// core that keeps sinking gets cut again — unless the pressure ends the cool-down first
    /// (`cooldown_clear_ticks`).
    pub cooldown_ms: u64,
    /// Upper bound of the cool-down (see `cooldown_ms`).
    pub max_cooldown_ms: u64,
    /// Consecutive calm ticks after which a cut's cool-down ends, however high the occupancy and however
    /// recent the cut (default 2): fresh metrics with some requests in the window, pressure under
    /// `slow_start_exit_pressure` (or, with few requests, under target at a core idle by its own
    /// utilisation), errors under a fifth of `error_threshold`. The core has then carried
    /// what is out there, well clear of its knee, on samples taken after the cut: the cut has shown. The
    /// occupancy may never come down to the budget (admitted fans who bought stay on the site for the
    /// rest of their session, loading the core little), and waiting for it held every cut at the
    /// minimum rate for the whole `max_cooldown_ms`. Cuts stay off for `cooldown_ms` all the same.
    /// A cut for errors alone ends by its undo instead ([`Reason::ErrorsCleared`]).
    pub cooldown_clear_ticks: u32,
    /// How fast the occupancy is steered back to the budget: `rate = (L − occ) / horizon + exits`.
    /// Default 2000 ms.
    pub horizon_ms: u64,
    /// Budget growth per tick in slow start (default 1.15: doubling in ~5 ticks, one actuation delay).
    pub slow_start_factor: f64,
    /// Slow start ends (ssthresh = L) once the pressure passes this (default 0.6): the knee is near.
    pub slow_start_exit_pressure: f64,
    /// Budget growth per tick above ssthresh at low pressure (default 0.03 = 3%), scaled down to 0 as the
    /// pressure approaches `hold_pressure`.
    pub growth: f64,
    /// Pressure above which the budget is held, not grown (default 0.88).
    pub hold_pressure: f64,
    /// Growth per tick while the budget is back under `recover_fraction` × the level of the last mild
    /// cut (default 0.06): that level was fine until just before the cut, so getting back near it fast
    /// costs little, as in CUBIC. Not after a far cut, whose core most often changed — unless its
    /// cool-down found the core calm with more sessions out there than the cut left (a spike): then
    /// the calm core recovers as fast as slow start (see the crate doc, "A far cut that was a spike").
    pub recover_growth: f64,
    /// See `recover_growth` (default 0.9).
    pub recover_fraction: f64,
    /// Consecutive over-target ticks needed for a mild cut (default 2): one noisy second just over the
    /// setpoint is not worth 30% of the budget. Far over cuts at once.
    pub confirm_ticks: u32,
    /// Pressure above which a cut is "far over" and halves (default 1.5, i.e. P99 ≥ 1.2 × target).
    pub far_pressure: f64,
    /// Cut factor when over but not far over (default 0.7).
    pub mild_cut: f64,
    /// Cut factor when far over (default 0.5).
    pub far_cut: f64,
    /// Error fraction that counts as "over" (default 0.01); five times it counts as far over.
    pub error_threshold: f64,
    /// Consecutive healthy ticks (errors under a fifth of `error_threshold`, pressure ≤ 1, fresh
    /// metrics) after which a cut made for errors alone is undone (default 5, one actuation delay: with
    /// a 3 s window, the last few seconds of requests all came from the healthy core). See
    /// [`Reason::ErrorsCleared`].
    pub error_recovery_ticks: u32,
    /// Growth only when occ ≥ this × L, for the occupancy now *and* the occupancy one actuation delay
    /// ago — the one whose load the metrics show. A budget the occupancy does not fill says nothing about
    /// the core, and growing past what has been measured is how a delayed loop overshoots: this bounds
    /// the budget to 1/near of the last measured level (default 0.95).
    pub near_fraction: f64,
    /// The budget never runs further ahead of the occupancy measured one actuation delay ago than
    /// hold_pressure / pressure (what proportional scaling would allow), capped at this (default 1.15).
    pub max_lead: f64,
    /// As `max_lead`, in slow start while the pressure is under the slow-start exit (default 1.3).
    pub max_lead_slow_start: f64,
    /// Fewer requests than this in the window: thin metrics, never grow (default 200).
    pub min_samples: u64,
    /// Metrics older than this: stale, never grow, never cut (default 3000 ms).
    pub max_metrics_age_ms: u64,
    /// Upward slew limit per tick: the rate rises at most by max(`slew_abs`, `slew_rel` × previous).
    /// Downward is not limited: stopping releases is what protects the core. Defaults 10/s and 0.25.
    pub slew_abs: f64,
    /// See `slew_abs`.
    pub slew_rel: f64,
    /// Smallest budget a cut can leave (default 1 session).
    pub min_budget: f64,
    /// Pressure memory ages: after this long without a tick over target (default 60 s, two
    /// longest cool-downs), the slow-start threshold and the level of the last mild cut are
    /// forgotten ([`ControlEventKind::PressureForgotten`]): the core of a minute ago — another room's load on
    /// it, a capacity since added, a blip — says little about the core now, and slow start, with
    /// its lead bound and exit pressure, finds the level again within a few ticks.
    pub pressure_memory_ms: u64,
    /// Rooms sharing a core: a room over its fair share ([`TickInput::fair_share`]) while the core
    /// is at or over the hold pressure gives way by this fraction of its budget a tick, down to its
    /// share ([`Reason::YieldShare`]; default 0.03, the top growth rate).
    pub share_yield: f64,
    /// Rooms sharing a core: a room under its fair share grows ×`slow_start_factor` a tick up to it
    /// ([`Reason::GrowToShare`]), at most to this multiple of its occupancy one actuation delay ago
    /// (default 2: doubling per actuation delay, as light load does).
    pub share_lead: f64,
}

impl ControllerConfig {
    /// The configuration for a room's `release` block and `total_active_max`; the rest at its default.
    /// The first budget is 10 s of the start rate.
    pub fn for_room(p99_target_ms: f64, start_rate: f64, bounds: Bounds) -> Self {
        Self {
            p99_target_ms,
            bounds,
            start_rate,
            initial_budget: (start_rate * 10.0).max(1.0),
            ..Self::default()
        }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            p99_target_ms: 100.0,
            bounds: Bounds::default(),
            start_rate: 50.0,
            initial_budget: 500.0,
            actuation_delay_ms: 5000,
            cooldown_ms: 8000,
            max_cooldown_ms: 30_000,
            cooldown_clear_ticks: 2,
            horizon_ms: 2000,
            slow_start_factor: 1.15,
            slow_start_exit_pressure: 0.6,
            growth: 0.03,
            hold_pressure: 0.88,
            recover_growth: 0.06,
            recover_fraction: 0.9,
            confirm_ticks: 2,
            far_pressure: 1.5,
            mild_cut: 0.7,
            far_cut: 0.5,
            error_threshold: 0.01,
            error_recovery_ticks: 5,
            near_fraction: 0.95,
            max_lead: 1.15,
            max_lead_slow_start: 1.3,
            min_samples: 200,
            max_metrics_age_ms: 3000,
            slew_abs: 10.0,
            slew_rel: 0.25,
            min_budget: 1.0,
            pressure_memory_ms: 60_000,
            share_yield: 0.03,
            share_lead: 3.0,
        }
    }
}

/// Release bounds: the operator's box around the controller.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Bounds {
    /// Minimum release rate in auto mode, admissions/s (room `release.min`; default 5).
    pub min_rate: f64,
    /// Maximum release rate in auto mode (room `release.max`; default 2000).
    pub max_rate: f64,
    /// Cap on the occupancy (room `total_active_max`): no release while occ ≥ cap, in any mode.
    /// `None`: no cap.
    pub total_active_max: Option<f64>,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            min_rate: 5.0,
            max_rate: 2000.0,
            total_active_max: None,
        }
    }
}

/// Who decides the rate. Anything but `Auto` is an operator override and wins over the loop.
/// JSON: `"auto"`, `{"fixed": 50.0}`, `"paused"`, `"queue_all"`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseMode {
    /// The feedback loop, within the bounds.
    Auto,
    /// Admin "fixed": this many admissions per second (still stopped by the cap and by sold out).
    Fixed(f64),
    /// Admin "pause": nothing is released; the queue keeps its order.
    Paused,
    /// Admin "queue-all": everyone goes through the queue and nothing is released until the mode changes.
    QueueAll,
}

/// One second's view of the core and the room. Every field is a measurement the edge already has.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct TickInput {
    /// Time of this tick, ms since the same origin as every other call.
    pub now_ms: u64,
    /// Core P99 over the sliding window (successes only), ms; `None` with no successes.
    pub p99_ms: Option<f64>,
    /// Requests (successes + errors) behind `p99_ms` and `error_fraction`.
    pub samples: u64,
    /// Failed or timed-out fraction of those requests.
    pub error_fraction: f64,
    /// Core in-flight / core concurrency limit, when the core reports it.
    pub utilisation: Option<f64>,
    /// Unredeemed unexpired admission tokens + active sessions.
    pub occupancy: f64,
    /// Sessions that ended (or tokens that expired unused) per second, over the last tick.
    pub exits_per_s: f64,
    /// Age of the newest metrics, ms (time since the window or the core's /metrics last updated).
    pub metrics_age_ms: u64,
    /// The core says the event is sold out.
    pub sold_out: bool,
    /// When other rooms' admissions load the same core: the occupancy this room is entitled to
    /// ([`fair_shares`], max-min by demand). Over target, only a room at or above its share cuts
    /// (and learns a slow-start threshold); one under it holds: it did not cause the pressure, and
    /// cutting it would hand its part of the core to the room that did. Under target, a room under
    /// its share grows towards it ([`Reason::GrowToShare`]) and one over it does not grow, and
    /// gives way at the hold pressure ([`Reason::YieldShare`]). `None`: the room is alone on its
    /// core.
    pub fair_share: Option<f64>,
}

/// A room's fair share of a core shared by `rooms_in_play` rooms that have people queued or
/// admitted, with `total_occupancy` over all of them: an equal part each. This is
/// [`fair_shares`] when every room in play wants more than an equal part (and weights are
/// equal); it over-states the share of a room whose queue is empty — it holds all it wants —
/// and so makes the other rooms look over their share and yield for nothing. Kept for callers
/// that do not know the rooms' queues; prefer [`fair_shares`]. `None` with one room in play or
/// none: nothing to share.
pub fn fair_share(total_occupancy: f64, rooms_in_play: usize) -> Option<f64> {
    (rooms_in_play > 1 && total_occupancy.is_finite())
        .then(|| total_occupancy.max(0.0) / rooms_in_play as f64)
}

/// One room's claim on a core it shares with other rooms, as [`fair_shares`] divides it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoomDemand {
    /// The room's occupancy (tokens out + active sessions): what it holds of the core now.
    pub occupancy: f64,
    /// People queued (joined, not yet admitted): what it would add if it could.
    pub queued: f64,
    /// Operator weight: a room of weight 2 is entitled to twice the part of a room of weight 1
    /// when both want more than that. 1 for an equal part; not finite or ≤ 0 counts as 1.
    pub weight: f64,
}

impl RoomDemand {
    /// A room of weight 1.
    pub fn new(occupancy: f64, queued: f64) -> Self {
        Self { occupancy, queued, weight: 1.0 }
    }
}

/// Each room's fair share of a core shared by `rooms`, for [`TickInput::fair_share`]: weighted
/// max-min fairness by demand. What is divided is what the rooms hold of the core now (their
/// total occupancy); a room's demand is its occupancy plus its queue. A room that wants less
/// than its weighted part gets all it wants (occupancy + queue); the rest is split among the
/// others in proportion to their weights, again capped at their demands. So a small sale next to
/// a surge is entitled to everyone in its queue (while that fits in an equal part), and the surge
/// is over its share exactly while the small sale has people waiting: it yields to them first
/// ([`Reason::YieldShare`]), and once their queue is empty every room's share is what it holds.
///
/// Rooms with nobody queued or admitted are not in play (`None`); with fewer than two rooms in
/// play every entry is `None`: nothing to share. The shares of the rooms in play add up to their
/// total occupancy.
pub fn fair_shares(rooms: &[RoomDemand]) -> Vec<Option<f64>> {
    let clean = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    let rooms: Vec<(f64, f64, f64)> = rooms
        .iter()
        .map(|r| {
            let occ = clean(r.occupancy);
            let weight = if r.weight.is_finite() && r.weight > 0.0 { r.weight } else { 1.0 };
            (occ, occ + clean(r.queued), weight)
        })
        .collect();
    let in_play: Vec<usize> = (0..rooms.len()).filter(|&i| rooms[i].1 > 0.0).collect();
    let mut shares = vec![None; rooms.len()];
    if in_play.len() < 2 {
        return shares;
    }
    // Water-filling: rooms in order of demand per weight; each one whose demand fits under the
    // current level gets its demand, the level is recomputed over the rest.
    let mut order = in_play;
    order.sort_by(|&a, &b| (rooms[a].1 / rooms[a].2).total_cmp(&(rooms[b].1 / rooms[b].2)));
    let mut left: f64 = order.iter().map(|&i| rooms[i].0).sum();
    let mut weights: f64 = order.iter().map(|&i| rooms[i].2).sum();
    for (k, &i) in order.iter().enumerate() {
        let (_, demand, weight) = rooms[i];
        let level = left / weights;
        if demand <= level * weight {
            shares[i] = Some(demand);
            left -= demand;
            weights -= weight;
        } else {
            for &j in &order[k..] {
                shares[j] = Some(level * rooms[j].2);
            }
            break;
        }
    }
    shares
}

/// Light load: the budget doubles once this share of it is in use (as much as any growth asks:
/// doubling sooner overshoots a big sale's cold start, where the first seconds look light too;
/// what makes a quiet sale quick is how fast the occupancy fills each doubling, see
/// `ReleaseController::light_rate`)...
const LIGHT_FILL: f64 = 0.95;
/// ...up to this multiple of the occupancy (doubling per interval, as slow start does).
const LIGHT_LEAD: f64 = 2.0;
/// With few requests, a core whose own utilisation (in flight / its concurrency limit) is at most
/// this is idle, whatever the tail of those few says: a P99 of 40 requests is their slowest one,
/// and on a busy machine (the edge swamped by joins on the same cores) that is scheduling noise,
/// not load. Light load then grows the budget as it does when the few are all fast.
const LIGHT_UTIL: f64 = 0.05;

/// Why the tick chose its rate. JSON: the same snake_case name as [`Reason::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Sold out: nothing more to sell, nothing released.
    SoldOut,
    /// Operator pause.
    Paused,
    /// Operator queue-all.
    QueueAll,
    /// Operator fixed rate.
    Fixed,
    /// Occupancy at the total-active cap.
    AtCap,
    /// Over target (or errors): budget cut ×0.7.
    CutMild,
    /// Far over target (or many errors): budget cut ×0.5.
    CutFar,
    /// A cut is taking effect: no second cut, and the budget is held (no growth) until the pressure
    /// has been calm for `cooldown_clear_ticks` ticks, or the occupancy has drained to the budget,
    /// or `max_cooldown_ms` has passed. Over target within `cooldown_ms` of a cut, always.
    CoolDown,
    /// Just over target for the first tick: a mild cut waits for a second one.
    Confirming,
    /// Metrics too old: the budget is held.
    StaleMetrics,
    /// Too few requests in the window and some of them slow or failing: the budget is held.
    ThinMetrics,
    /// Light load: few requests, all fast and none failing, and the budget in use: the budget
    /// doubles each tick (at most twice the occupancy), as slow start would, and until it is in use
    /// the release keeps the rate that fills the doubling in one horizon — past any ssthresh:
    /// light load is itself the measurement that the core has room, and growing past the level
    /// where pressure once appeared forgets that level.
    LightLoad,
    /// Under target but the occupancy does not fill the budget: the budget is held. Never when the
    /// occupancy is at or over the budget.
    BudgetUnfilled,
    /// The budget is in use, but the metrics still show the lower occupancy of one actuation delay
    /// ago: held until the load shows (growing past what has been measured is how a delayed loop
    /// overshoots).
    AwaitingLoad,
    /// Over target while other rooms load the same core, and this room holds less than its fair
    /// share of it: no cut (the rooms over their share cut), the budget is held.
    OverShared,
    /// The core is at or over the hold pressure and this room holds more than its fair share of it
    /// while another room has people waiting: the budget gives way `share_yield` (3%) a tick, down
    /// to the share.
    YieldShare,
    /// Under its fair share of a shared core, the core under target and the budget in use: the
    /// budget grows ×1.15 a tick (at most twice the occupancy the metrics reflect) up to the share,
    /// at any pressure under target and past any ssthresh.
    GrowToShare,

    /// Slow start: the budget grows geometrically.
    SlowStart,
    /// Pressure reached the slow-start exit: ssthresh set, budget held.
    SlowStartExit,
    /// Above ssthresh, under the hold pressure: the budget grows a few %.
    Grow,
    /// Under 0.9 × the level of the last cut: the budget grows back faster.
    Recover,
    /// The last cuts were for errors alone (latency and utilisation never over) and the core has been
    /// healthy for `error_recovery_ticks` ticks since: the cuts are undone — the budget goes back to
    /// the level before them, at most the occupancy the healthy metrics reflect, the slow-start
    /// threshold to its value before them, the cool-down ends. An outage (core restart, network blip)
    /// says nothing about the core's capacity.
    ErrorsCleared,
    /// Near the setpoint: the budget is held.
    Hold,
}

impl Reason {
    /// Stable snake_case name for logs, metrics labels and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::SoldOut => "sold_out",
            Reason::Paused => "paused",
            Reason::QueueAll => "queue_all",
            Reason::Fixed => "fixed",
            Reason::AtCap => "at_cap",
            Reason::CutMild => "cut_mild",
            Reason::CutFar => "cut_far",
            Reason::CoolDown => "cool_down",
            Reason::Confirming => "confirming",
            Reason::StaleMetrics => "stale_metrics",
            Reason::ThinMetrics => "thin_metrics",
            Reason::LightLoad => "light_load",
            Reason::BudgetUnfilled => "budget_unfilled",
            Reason::AwaitingLoad => "awaiting_load",
            Reason::OverShared => "over_shared",
            Reason::YieldShare => "yield_share",
            Reason::GrowToShare => "grow_to_share",
            Reason::SlowStart => "slow_start",
            Reason::SlowStartExit => "slow_start_exit",
            Reason::Grow => "grow",
            Reason::Recover => "recover",
            Reason::ErrorsCleared => "errors_cleared",
            Reason::Hold => "hold",
        }
    }
}

/// What one tick decided, and from what: one per tick, for the stats stream and the dashboard.
/// (An infinite `ssthresh` serializes as JSON `null`.)
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Decision {
    pub at_ms: u64,
    /// Admissions per second until the next tick.
    pub rate: f64,
    /// Session budget L after this tick.
    pub budget: f64,
    /// Slow-start threshold after this tick (`f64::INFINITY` before the first cut or exit).
    pub ssthresh: f64,
    /// The occupancy the tick saw.
    pub occupancy: f64,
    /// max(P99 / (0.8 × target), u / 0.85); `None` when the metrics were stale or empty.
    pub pressure: Option<f64>,
    pub reason: Reason,
}

/// A change worth a log line and an exported event: operator actions and the loop's cuts.
/// JSON: `{"at_ms": 1000, "event": "budget_cut", "from": 400.0, "to": 280.0, ...}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ControlEvent {
    pub at_ms: u64,
    #[serde(flatten)]
    pub kind: ControlEventKind,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ControlEventKind {
    /// The operator changed the mode.
    ModeChanged { from: ReleaseMode, to: ReleaseMode },
    /// The operator changed the bounds or cap.
    BoundsChanged { from: Bounds, to: Bounds },
    /// The loop cut the budget.
    BudgetCut {
        from: f64,
        to: f64,
        pressure: Option<f64>,
        error_fraction: f64,
    },
    /// Cuts made for errors alone were undone: the core was healthy again (see
    /// [`Reason::ErrorsCleared`]). `ssthresh` is the restored threshold (`null` when infinite).
    ErrorCutUndone { from: f64, to: f64, ssthresh: f64 },
    /// Slow start ended at this budget.
    SlowStartEnded { budget: f64, pressure: f64 },
    /// No pressure for `pressure_memory_ms` (or light load grew the budget past it): the slow-start
    /// threshold (`null` when infinite) and the last mild cut's level are forgotten.
    PressureForgotten { ssthresh: f64, cut_from: f64 },
    /// Metrics went stale (true) or came back (false).
    MetricsStale { stale: bool, age_ms: u64 },
    /// The core's sold-out flag changed.
    SoldOut { sold_out: bool },
}

/// Ticks of occupancy history kept; enough for a 30 s actuation delay at one tick a second.
const HISTORY: usize = 32;

/// Events kept for export when nobody drains them; beyond it the oldest go (and are counted).
const EVENT_BACKLOG: usize = 1024;

/// The session-budget release controller of DESIGN §4. One per room; call [`tick`](Self::tick) about
/// once a second with fresh figures, release at the returned rate until the next tick.
#[derive(Debug, Clone)]
pub struct ReleaseController {
    config: ControllerConfig,
    mode: ReleaseMode,
    budget: f64,
    ssthresh: f64,
    /// The budget the last cut started from (min(L, occ) then): the level known to be just too much.
    cut_from: f64,
    /// The level a far cut started from, until its cool-down shows whether the core changed: a
    /// calm tick with the occupancy still over the cut budget makes it `cut_from` (the budget
    /// recovers towards it as after a mild cut); the cool-down's end without one forgets it.
    far_from: Option<f64>,
    /// `cut_from` is a far cut's level that its cool-down showed was a spike: the calm core
    /// recovers towards it as fast as slow start, leading the occupancy now.
    spike: bool,
    /// Consecutive ticks over target.
    over_streak: u32,
    /// Set by a cut made for errors alone: (the level it started from, ssthresh before it, the rate
    /// before it), kept over the further error-only cuts of the same episode; cleared by a
    /// latency/utilisation over, by the undo and by an override.
    error_cut: Option<(f64, f64, f64)>,
    /// Consecutive healthy ticks: fresh metrics, errors under a fifth of the threshold, pressure ≤ 1.
    healthy_streak: u32,
    /// When the last cut happened: cuts are off until it has shown (cool-down).
    last_cut_ms: Option<u64>,
    /// Consecutive calm ticks: fresh metrics, some requests, pressure under the slow-start exit,
    /// errors under a fifth of the threshold (see `cooldown_clear_ticks`).
    calm_streak: u32,
    /// The last cut has shown in the pressure (`cooldown_clear_ticks` calm ticks since it): its
    /// cool-down is over whatever the occupancy; cleared by the next cut.
    cut_settled: bool,
    /// When pressure last appeared (a tick over target, or slow start ending at its exit
    /// pressure): the pressure memory (ssthresh, cut level) is forgotten `pressure_memory_ms` after.
    last_pressure_ms: u64,
    /// Rate of the previous tick, for the slew limiter.
    prev_rate: f64,
    /// The rate the release may come straight back to once the last cut is over (cool-down done, the
    /// core under target): the rate before the cut times the cut's factor — the budget's own step —
    /// or, after an error-only cut is undone, the rate before the outage. Without it the slew
    /// limiter climbed from the minimum the cut's drain left (+10, then +25% a tick: 13 ticks from
    /// 20/s back to 465/s in a StarArena surge, issue 39). With when it was set: it holds for
    /// `max_cooldown_ms` after (a rate carried longer ago says little; a cut whose cool-down runs
    /// that long resumes by the slew limiter alone). Dropped once the rate has reached it, by sold
    /// out and by an override; the next cut sets it anew.
    resume: Option<(f64, u64)>,
    /// The rate that fills the last light-load doubling in one horizon, and the budget it was
    /// computed for: held while light load leaves that budget unfilled (see [`Reason::LightLoad`]),
    /// never more than a second's gap to it; dropped once any other rule decides or the budget
    /// changes (an override's reseed, a lower cap). Steering by
    /// `(L − occ) / horizon` alone slows as the occupancy nears the budget: 95% of a doubling took
    /// `horizon × ln 10` (4.6 s), a cautious sale of 300 at an idle core 22.5 s in the simulator and
    /// 27–34 s on an edge (issue 39); filled linearly, 13–15 s and 14–18 s. The doubling itself is
    /// unchanged (at 95%, at most twice the occupancy), so the surge scenarios are as before:
    /// doubling at 90% instead cost the surge beside buyers 0.842 of the oracle.
    light_rate: f64,
    light_for: f64,
    /// Occupancy of the last ticks (ms, occ), a ring: what the core feels now was released one actuation
    /// delay ago.
    history: [(u64, f64); HISTORY],
    history_len: usize,
    history_next: usize,
    /// After an override the budget is re-seeded from the occupancy when auto resumes: the budget of
    /// an hour ago says nothing about the core now.
    reseed: bool,
    stale: bool,
    sold_out: bool,
    events: VecDeque<ControlEvent>,
    dropped_events: u64,
}

impl ReleaseController {
    pub fn new(config: ControllerConfig) -> Self {
        let budget = config.initial_budget.max(config.min_budget);
        let prev_rate = config.start_rate;
        Self {
            config,
            mode: ReleaseMode::Auto,
            budget,
            ssthresh: f64::INFINITY,
            cut_from: 0.0,
            far_from: None,
            spike: false,
            over_streak: 0,
            error_cut: None,
            healthy_streak: 0,
            last_cut_ms: None,
            calm_streak: 0,
            cut_settled: false,
            last_pressure_ms: 0,
            prev_rate,
            resume: None,
            light_rate: 0.0,
            light_for: 0.0,
            history: [(0, 0.0); HISTORY],
            history_len: 0,
            history_next: 0,
            reseed: false,
            stale: false,
            sold_out: false,
            events: VecDeque::new(),
            dropped_events: 0,
        }
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    pub fn mode(&self) -> ReleaseMode {
        self.mode
    }

    /// The session budget L.
    pub fn budget(&self) -> f64 {
        self.budget
    }

    pub fn ssthresh(&self) -> f64 {
        self.ssthresh
    }

    /// Operator override: takes effect at the next tick and wins over the loop.
    pub fn set_mode(&mut self, now_ms: u64, mode: ReleaseMode) {
        let mode = match mode {
            ReleaseMode::Fixed(r) if !r.is_finite() || r < 0.0 => ReleaseMode::Fixed(0.0),
            m => m,
        };
        if mode == self.mode {
            return;
        }
        let from = self.mode;
        self.mode = mode;
        if mode == ReleaseMode::Auto {
            self.reseed = true;
        }
        self.push_event(now_ms, ControlEventKind::ModeChanged { from, to: mode });
    }

    /// Operator's new bounds / cap. Bad numbers are made safe rather than refused (min ≤ max, ≥ 0):
    /// validating the admin request is the API layer's job.
    pub fn set_bounds(&mut self, now_ms: u64, bounds: Bounds) {
        let mut to = bounds;
        to.min_rate = if to.min_rate.is_finite() {
            to.min_rate.max(0.0)
        } else {
            0.0
        };
        to.max_rate = if to.max_rate.is_finite() {
            to.max_rate.max(to.min_rate)
        } else {
            to.min_rate
        };
        to.total_active_max = to
            .total_active_max
            .filter(|c| c.is_finite())
            .map(|c| c.max(0.0));
        if to == self.config.bounds {
            return;
        }
        let from = self.config.bounds;
        self.config.bounds = to;
        if let Some(cap) = to.total_active_max {
            self.budget = self.budget.min(cap.max(self.config.min_budget));
        }
        self.push_event(now_ms, ControlEventKind::BoundsChanged { from, to });
    }

    /// Takes the events since the last call, oldest first.
    pub fn drain_events(&mut self) -> Vec<ControlEvent> {
        self.events.drain(..).collect()
    }

    /// Events dropped because nobody drained them (backlog of 1024).
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    fn push_event(&mut self, at_ms: u64, kind: ControlEventKind) {
        if self.events.len() == EVENT_BACKLOG {
            self.events.pop_front();
            self.dropped_events += 1;
        }
        self.events.push_back(ControlEvent { at_ms, kind });
    }

    fn remember(&mut self, now_ms: u64, occ: f64) {
        self.history[self.history_next] = (now_ms, occ);
        self.history_next = (self.history_next + 1) % HISTORY;
        self.history_len = (self.history_len + 1).min(HISTORY);
    }

    /// The newest remembered occupancy at least `ago_ms` old; `None` before there is one.
    fn occupancy_ago(&self, now_ms: u64, ago_ms: u64) -> Option<f64> {
        let cutoff = now_ms.checked_sub(ago_ms)?;
        (0..self.history_len)
            .map(|i| self.history[(self.history_next + HISTORY - 1 - i) % HISTORY])
            .find(|(at, _)| *at <= cutoff)
            .map(|(_, occ)| occ)
    }

    /// max(P99 / (0.8 × target), u / 0.85), from whatever of the two is present.
    fn pressure(&self, input: &TickInput) -> Option<f64> {
        let lat = input
            .p99_ms
            .filter(|p| p.is_finite())
            .map(|p| p / (0.8 * self.config.p99_target_ms));
        let util = input
            .utilisation
            .filter(|u| u.is_finite())
            .map(|u| u / 0.85);
        match (lat, util) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The rate a cut remembered to resume at ([`ReleaseController::resume`]), 0 when none.
    fn pending_resume(&self) -> f64 {
        self.resume.map_or(0.0, |(r, _)| r)
    }

    /// One control step. Call about once a second; the returned rate holds until the next call.
    pub fn tick(&mut self, input: &TickInput) -> Decision {
        let now = input.now_ms;
        let occ = if input.occupancy.is_finite() {
            input.occupancy.max(0.0)
        } else {
            0.0
        };
        let exits = if input.exits_per_s.is_finite() {
            input.exits_per_s.max(0.0)
        } else {
            0.0
        };
        let err = if input.error_fraction.is_finite() {
            input.error_fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };

        // A rate remembered from a cut ([`ReleaseController::resume`]) says little once
        // `max_cooldown_ms` old: forgotten before anything (a later cut) could take it up again.
        let max_cooldown_ms = self.config.max_cooldown_ms;
        self.resume = self.resume.filter(|&(_, at)| now.saturating_sub(at) < max_cooldown_ms);

        if input.sold_out != self.sold_out {
            self.sold_out = input.sold_out;
            self.push_event(
                now,
                ControlEventKind::SoldOut {
                    sold_out: input.sold_out,
                },
            );
        }
        let stale = input.metrics_age_ms > self.config.max_metrics_age_ms;
        if stale != self.stale {
            self.stale = stale;
            self.push_event(
                now,
                ControlEventKind::MetricsStale {
                    stale,
                    age_ms: input.metrics_age_ms,
                },
            );
        }
        let pressure = if stale { None } else { self.pressure(input) };
        let measured_occ = self.occupancy_ago(now, self.config.actuation_delay_ms);
        self.remember(now, occ);

        // Overrides first: they always win, and the loop's state is not moved by them.
        let forced = if self.sold_out {
            Some((0.0, Reason::SoldOut))
        } else {
            match self.mode {
                ReleaseMode::Paused => Some((0.0, Reason::Paused)),
                ReleaseMode::QueueAll => Some((0.0, Reason::QueueAll)),
                ReleaseMode::Fixed(r) => Some((r, Reason::Fixed)),
                ReleaseMode::Auto => None,
            }
        };
        if let Some((rate, reason)) = forced {
            self.light_rate = 0.0;
            // Sold out or an operator's override: the release comes back from what it then is,
            // never straight to a rate remembered from before.
            self.resume = None;
            let (rate, reason) = self.apply_cap(rate, reason, occ);
            if self.mode != ReleaseMode::Auto {
                self.reseed = true;
            }
            return self.decide(now, rate, occ, pressure, reason);
        }

        if self.reseed {
            // Back from an override: start from what is out there, as after a cut, and let slow start
            // (bounded by the remembered ssthresh) find the level again.
            self.reseed = false;
            self.resume = None;
            // Not below the configured first budget: an emptied room (long pause) would otherwise
            // have too few requests to measure, and thin metrics never grow.
            self.budget = occ
                .max(self.config.initial_budget)
                .max(self.config.min_budget);
            self.last_cut_ms = None;
            self.error_cut = None;
            self.healthy_streak = 0;
        }

        let cfg = &self.config;
        let enough = input.samples >= cfg.min_samples;
        let over_latency = pressure.is_some_and(|x| x > 1.0);
        let over_errors = enough && err > cfg.error_threshold;
        let over = !stale && (over_latency || over_errors);
        // A saturated core (every worker busy over the whole window) is far over whatever its P99
        // says yet: the queue behind it grows every second a mild cut waits for confirmation.
        let saturated = !stale && input.utilisation.is_some_and(|u| u.is_finite() && u >= 1.0);
        let far = pressure.is_some_and(|x| x >= cfg.far_pressure)
            || saturated
            || (enough && err >= 5.0 * cfg.error_threshold);
        // Other rooms load the same core and this one holds less than its part of it: the pressure
        // is theirs, and so are the cuts and the thresholds it teaches.
        let share = input.fair_share.filter(|s| s.is_finite()).map(|s| s.max(0.0));
        let under_share = share.is_some_and(|s| occ < s);
        if over {
            self.last_pressure_ms = now;
        }
        // Pressure memory ages: a calm core for `pressure_memory_ms` forgets where it was once
        // too much (another room's load, a blip, a capacity since added).
        let calm = pressure.is_some_and(|x| x <= cfg.slow_start_exit_pressure) && err == 0.0;
        if calm
            && !over
            && (self.ssthresh.is_finite() || self.cut_from > 0.0)
            && now.saturating_sub(self.last_pressure_ms) >= cfg.pressure_memory_ms
            && self.last_cut_ms.is_none_or(|c| now.saturating_sub(c) >= cfg.pressure_memory_ms)
        {
            let (ssthresh, cut_from) = (self.ssthresh, self.cut_from);
            self.ssthresh = f64::INFINITY;
            self.cut_from = 0.0;
            self.push_event(now, ControlEventKind::PressureForgotten { ssthresh, cut_from });
        }
        let cfg = &self.config;

        // Undoing error-only cuts. Errors with the latency and the utilisation under target are an
        // outage (a core restart, a network blip), not load: once the core has been healthy for a few
        // ticks, go back to where the loop was before. Any over-target pressure since the cut means the
        // core is loaded after all, and the cut stands.
        let healthy = !stale
            && input.samples > 0
            && err <= 0.2 * cfg.error_threshold
            && pressure.is_some_and(|x| x <= 1.0);
        self.healthy_streak = if healthy {
            self.healthy_streak.saturating_add(1)
        } else {
            0
        };
        if over_latency && !stale {
            self.error_cut = None;
        }
        let mut undone = false;
        if let Some((level, ssthresh, rate_before)) = self.error_cut {
            if self.healthy_streak >= cfg.error_recovery_ticks {
                // Back to the level before the cuts, but no further than the occupancy the healthy
                // metrics reflect (one actuation delay ago; now, before there is one): that much the
                // core has just been seen to carry. Slow start, bounded as ever by the lead over the
                // measured occupancy and by its exit pressure, finds the rest.
                let from = self.budget;
                let carried = measured_occ.unwrap_or(occ);
                self.budget = self.budget.max(level.min(carried));
                self.ssthresh = self.ssthresh.max(ssthresh);
                self.last_cut_ms = None;
                self.error_cut = None;
                // The outage is over and the core carries what it did: resume at the rate before it
                // (the budget, back where it was, still bounds it), never with the missed seconds.
                self.resume = Some((self.pending_resume().max(rate_before), now));
                undone = true;
                let (to, ssthresh) = (self.budget, self.ssthresh);
                self.push_event(now, ControlEventKind::ErrorCutUndone { from, to, ssthresh });
            }
        }
        let cfg = &self.config;
        // A cut has shown once the pressure has been calm for `cooldown_clear_ticks` ticks since it
        // (the core carries what is out there, well clear of its knee), or once the occupancy, now and as the
        // metrics reflect it (one actuation delay ago), is down to the budget. Only the first is
        // sure to come while people wait: the sessions of fans who bought keep the occupancy up and
        // load the core little. A cut for errors alone waits for its undo (`error_recovery_ticks`).
        let idle = input.samples < cfg.min_samples
            && input.utilisation.is_some_and(|u| u.is_finite() && (0.0..=LIGHT_UTIL).contains(&u));
        let calm = !stale
            && input.samples > 0
            && err <= 0.2 * cfg.error_threshold
            && pressure.is_some_and(|x| x < cfg.slow_start_exit_pressure || (idle && x <= 1.0));
        self.calm_streak = if calm { self.calm_streak.saturating_add(1) } else { 0 };
        if calm && !self.cut_settled && occ > SPIKE_MARGIN * self.budget {
            // A far cut's cool-down, and the core calm with clearly more sessions out there than
            // the cut left: what went over was a spike, not the core's capacity. Its level is
            // worth recovering towards, as a mild cut's is.
            if let Some(level) = self.far_from.take() {
                self.cut_from = level;
                self.spike = true;
            }
        }
        if self.last_cut_ms.is_some() && self.error_cut.is_none() && self.calm_streak >= cfg.cooldown_clear_ticks.max(1) {
            self.cut_settled = true;
        }
        let shown = self.cut_settled
            || (occ <= self.budget * 1.05 && measured_occ.is_some_and(|m| m <= self.budget * 1.05));
        let since_cut = self.last_cut_ms.map(|cut| now.saturating_sub(cut));
        // The budget is held while a cut takes effect...
        let in_cooldown = since_cut.is_some_and(|since| {
            !self.cut_settled && (since < cfg.cooldown_ms || (!shown && since < cfg.max_cooldown_ms))
        });
        if !in_cooldown {
            // Only the cut's own cool-down tells a spike: past it, the level is forgotten.
            self.far_from = None;
        }
        // ...and cutting again before it can show is windup, whatever the pressure says meanwhile.
        let cuts_held = in_cooldown || since_cut.is_some_and(|since| since < cfg.cooldown_ms);

        self.over_streak = if over {
            self.over_streak.saturating_add(1)
        } else {
            0
        };
        let mut light_unfilled = false;
        // Recovering from a far cut that was a spike, the core calm: as fast as slow start (see the
        // crate doc), whether or not the occupancy has filled the budget yet.
        // Under the level of the last cut that is worth recovering towards (see `recover_growth`).
        let recovering = self.budget < cfg.recover_fraction * self.cut_from;
        let spike_recovery = self.spike
            && recovering
            && self.budget >= self.ssthresh
            && pressure.is_some_and(|x| x <= cfg.slow_start_exit_pressure);
        let reason = if undone {
            Reason::ErrorsCleared
        } else if over {
            if under_share {
                Reason::OverShared
            } else if cuts_held {
                // The cut is taking effect and the core is still over target with the occupancy
                // under the budget: the cut was not deep enough (a capacity drop bigger than the
                // cut). The budget follows the occupancy down, so that the core is not refilled to
                // a level it has just been seen over target at.
                if occ < self.budget {
                    self.budget = occ.max(cfg.min_budget);
                    self.ssthresh = self.ssthresh.min(self.budget);
                }
                Reason::CoolDown
            } else if !far && self.over_streak < cfg.confirm_ticks {
                Reason::Confirming
            } else {
                let base = self.budget.min(occ);
                let factor = if far { cfg.far_cut } else { cfg.mild_cut };
                let from = self.budget;
                // Errors alone (latency and utilisation under target): remember where the loop was,
                // to undo the cut once the core is healthy again. The first cut of an outage is the
                // one that counts.
                if !over_latency && self.error_cut.is_none() {
                    self.error_cut = Some((base, self.ssthresh, self.prev_rate));
                }
                // Once the cut is over, the release may come back at once to the rate before it,
                // scaled as the budget was; a further cut before the rate got back there (it is at
                // the minimum while a cut drains) scales the rate it would have come back to.
                self.resume = Some((self.prev_rate.max(self.pending_resume()) * factor, now));
                // After a mild cut the old level was nearly right: get back near it fast. After a far
                // cut the core itself changed; the old level means nothing.
                // A far cut remembers its level too, unless it came while the budget was still
                // recovering towards the last one: then that level was wrong (the core changed).
                self.cut_from = if far { 0.0 } else { base };
                self.far_from = (far && !recovering).then_some(base);
                self.spike = false;
                self.budget = (base * factor).max(cfg.min_budget);
                self.ssthresh = self.budget;
                self.last_cut_ms = Some(now);
                self.calm_streak = 0;
                self.cut_settled = false;
                let to = self.budget;
                self.push_event(
                    now,
                    ControlEventKind::BudgetCut {
                        from,
                        to,
                        pressure,
                        error_fraction: err,
                    },
                );
                if far { Reason::CutFar } else { Reason::CutMild }
            }
        } else if stale {
            Reason::StaleMetrics
        } else if pressure.is_none() {
            Reason::ThinMetrics
        } else if !enough {
            // Few requests. Light is not thin: when the few are all fast (pressure well under the
            // slow-start exit), or the core's own utilisation is near nothing (LIGHT_UTIL), and
            // none failed, the core is idle, not unmeasured — grow as slow
            // start does, doubling while the occupancy fills the budget. Anything slow or failing
            // among the few: hold.
            let x = pressure.unwrap_or(f64::INFINITY);
            // (Under target here: over it is cut above.) The core's own utilisation says idle.
            let idle = x <= 1.0 && input.utilisation.is_some_and(|u| u.is_finite() && (0.0..=LIGHT_UTIL).contains(&u));
            if (x > cfg.slow_start_exit_pressure && !idle) || err > 0.0 {
                Reason::ThinMetrics
            } else if in_cooldown {
                Reason::CoolDown
            } else if occ < LIGHT_FILL * self.budget {
                light_unfilled = true;
                Reason::BudgetUnfilled
            } else {
                // At any ssthresh: the few requests, all fast, are the measurement that the core has
                // room now, whoever's load once set that threshold. Pressure, when it comes, shows
                // as slow requests (held above) or as enough of them for the loaded rules.
                self.budget = (self.budget * 2.0).min(occ.max(1.0) * LIGHT_LEAD).max(self.budget);
                if self.budget > self.ssthresh {
                    let (ssthresh, cut_from) = (self.ssthresh, self.cut_from);
                    self.ssthresh = f64::INFINITY;
                    self.cut_from = 0.0;
                    self.push_event(now, ControlEventKind::PressureForgotten { ssthresh, cut_from });
                }
                Reason::LightLoad
            }
        } else if in_cooldown {
            // Under target again but still at the setpoint while the cut drains: the budget keeps
            // following the occupancy down until the pressure is under the hold level, so the core
            // is refilled from a level it carried with room, not from the knee.
            if pressure.is_some_and(|x| x >= cfg.hold_pressure) && occ < self.budget && !under_share {
                self.budget = occ.max(cfg.min_budget);
                self.ssthresh = self.ssthresh.min(self.budget);
            }
            Reason::CoolDown
        } else if let Some(s) = share.filter(|s| occ > *s && pressure.is_some_and(|x| x > cfg.slow_start_exit_pressure)) {
            // This room holds more than its share of the core while another room has people
            // waiting (with shares by demand, see [`fair_shares`]) and the core is past the
            // slow-start exit: what room there is left is theirs, so no growth; and once the core
            // is at the hold pressure, give way a few % a tick, down to the share, before the core
            // is pushed over target and everyone pays a cut. The room under its share grows into
            // what this one gives up.
            if pressure.is_some_and(|x| x >= cfg.hold_pressure) {
                self.budget = self.budget.min((self.budget.min(occ) * (1.0 - cfg.share_yield)).max(s)).max(cfg.min_budget);
            }
            Reason::YieldShare
        } else if let Some(target) = share.filter(|_| under_share).and_then(|s| {
            let measured = measured_occ?;
            Some((occ * cfg.max_lead_slow_start).min(s).min(measured * cfg.share_lead))
        }).filter(|t| *t > self.budget) {
            // Under its share of a shared core (with shares by demand: people waiting), the core
            // under target: the budget runs `max_lead_slow_start` (30%) ahead of the occupancy, so
            // the occupancy grows about ×1.15 a tick, as in slow start — at any pressure under
            // target and past any ssthresh, up to the share. The room's own load is a part of the
            // core's, so its lead over what the metrics reflect is bounded by its share and by
            // `share_lead`, not by the core's pressure, which the rooms over their share answer by
            // yielding.
            self.budget = target;
            Reason::GrowToShare
        } else if occ < cfg.near_fraction * self.budget && !spike_recovery {
            Reason::BudgetUnfilled
        } else if measured_occ.is_none() {
            Reason::AwaitingLoad
        } else {
            let x = pressure.unwrap_or(0.0);
            // How far the budget may run ahead of the occupancy the metrics reflect: as far as the
            // pressure would scale to the hold level if it grew in proportion (utilisation does; a P99
            // near its knee does not, hence the cap), and at least 1/near.
            // In slow start, far from the knee, it may run further ahead (up to max_lead_slow_start).
            let max_lead = if self.budget < self.ssthresh && x <= cfg.slow_start_exit_pressure {
                cfg.max_lead_slow_start
            } else {
                cfg.max_lead
            };
            let ratio = if x > 0.0 {
                cfg.hold_pressure / x
            } else {
                max_lead
            };
            let lead = ratio.clamp(
                1.0 / cfg.near_fraction,
                max_lead.max(1.0 / cfg.near_fraction),
            );
            let mut ceiling = measured_occ.unwrap_or(0.0) * lead;
            // Back under the level of the last cut, with the core calm (far from its knee): that
            // level was carried seconds ago, so the budget may lead the occupancy *now* as slow
            // start leads the measured one; what the metrics lag behind was already measured.
            if spike_recovery {
                ceiling = ceiling.max(occ * cfg.max_lead_slow_start);
            }
            if self.budget >= ceiling {
                Reason::AwaitingLoad
            } else if self.budget < self.ssthresh && under_share && x >= cfg.hold_pressure {
                // At its share already (the occupancy lags the budget) while another room's load
                // holds the core near its setpoint: hold, and learn no threshold from pressure
                // this room did not cause.
                Reason::Hold
            } else if self.budget < self.ssthresh {
                if x > cfg.slow_start_exit_pressure && !under_share {
                    self.last_pressure_ms = now;
                    self.ssthresh = self.budget;
                    let budget = self.budget;
                    self.push_event(
                        now,
                        ControlEventKind::SlowStartEnded {
                            budget,
                            pressure: x,
                        },
                    );
                    Reason::SlowStartExit
                } else {
                    self.budget = (self.budget * self.config.slow_start_factor)
                        .min(self.ssthresh)
                        .min(ceiling);
                    Reason::SlowStart
                }
            } else if x >= cfg.hold_pressure {
                Reason::Hold
            } else {
                let headroom = ((cfg.hold_pressure - x) / 0.3).clamp(0.0, 1.0);
                if recovering {
                    let factor = if spike_recovery { cfg.slow_start_factor } else { 1.0 + cfg.recover_growth * headroom };
                    self.budget = (self.budget * factor)
                        .min(cfg.recover_fraction * self.cut_from)
                        .min(ceiling);
                    Reason::Recover
                } else {
                    self.budget = (self.budget * (1.0 + cfg.growth * headroom)).min(ceiling);
                    Reason::Grow
                }
            }
        };
        if let Some(cap) = self.config.bounds.total_active_max {
            self.budget = self.budget.min(cap.max(self.config.min_budget));
        }

        let cfg = &self.config;
        let horizon_s = cfg.horizon_ms.max(1) as f64 / 1000.0;
        let mut raw = (self.budget - occ) / horizon_s + exits;
        if reason == Reason::LightLoad {
            (self.light_rate, self.light_for) = (raw, self.budget);
        } else if light_unfilled && occ < self.budget && self.budget == self.light_for {
            // At most a second's gap: the occupancy the metrics show lags the release.
            raw = raw.max(self.light_rate.min(self.budget - occ + exits));
        } else {
            self.light_rate = 0.0;
        }
        let b = cfg.bounds;
        let mut rate = raw.clamp(b.min_rate, b.max_rate.max(b.min_rate));
        if reason == Reason::CoolDown && over {
            // A cut taking effect and the core still over target: the cut was not deep enough yet
            // (the occupancy the metrics show is still draining). Refilling the budget now, as the
            // occupancy passes under it, is what brings a second episode over target after a
            // capacity drop; let it drain at the minimum until the pressure is under target.
            rate = b.min_rate;
        }
        let mut up = self.prev_rate + (cfg.slew_abs).max(cfg.slew_rel * self.prev_rate);
        if let Some((resume, _)) = self.resume {
            // Not while a cut for errors waits for its undo, nor with requests still failing
            // (errors count as over only with enough samples).
            let clean = self.error_cut.is_none() && err <= 0.2 * cfg.error_threshold;
            if !over && !in_cooldown && clean && pressure.is_some_and(|x| x <= 1.0) {
                // The cut is over and the core under target: back to the rate it carried, scaled
                // as the budget was, at once (the budget bounds `raw` as ever); the slew limiter
                // works from there.
                up = up.max(resume);
            }
        }
        rate = rate.min(up);
        if !self.spike && self.resume.is_some_and(|(resume, _)| rate >= resume) {
            self.resume = None;
        }
        let (rate, reason) = self.apply_cap(rate, reason, occ);
        self.decide(now, rate, occ, pressure, reason)
    }

    /// The total-active cap holds in every mode: it is the operator's own hard limit.
    fn apply_cap(&self, rate: f64, reason: Reason, occ: f64) -> (f64, Reason) {
        match self.config.bounds.total_active_max {
            Some(cap) if occ >= cap && rate > 0.0 => (0.0, Reason::AtCap),
            _ => (rate, reason),
        }
    }

    fn decide(
        &mut self,
        now: u64,
        rate: f64,
        occ: f64,
        pressure: Option<f64>,
        reason: Reason,
    ) -> Decision {
        let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
        self.prev_rate = rate;
        Decision {
            at_ms: now,
            rate,
            budget: self.budget,
            ssthresh: self.ssthresh,
            occupancy: occ,
            pressure,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_close() {
        let mut last = 0;
        for us in [
            0u64,
            1,
            15,
            16,
            17,
            31,
            32,
            100,
            999,
            1000,
            65_535,
            1 << 20,
            1 << 31,
            1 << 40,
        ] {
            let b = bucket_of(us);
            assert!(b >= last, "bucket of {us} went down");
            assert!(b < BUCKETS);
            last = b;
            if (16..(1 << 31)).contains(&us) {
                let mid = bucket_mid_us(b);
                assert!(
                    (mid - us as f64).abs() / us as f64 <= 1.0 / 16.0 + 1e-9,
                    "{us} → {mid}"
                );
            }
        }
    }

    #[test]
    fn window_p99_and_expiry() {
        let w = LatencyWindow::new(3, 1000);
        // 990 fast requests and 10 slow ones in second 0.
        for i in 0..1000u64 {
            let us = if i % 100 == 99 { 80_000 } else { 5_000 };
            w.record_success(500, us);
        }
        w.record_error(600);
        let s = w.snapshot(900);
        assert_eq!((s.successes, s.errors), (1000, 1));
        let p99 = s.p99_ms.unwrap();
        assert!((4.5..=5.5).contains(&p99), "p99 {p99}");
        // 11 slow out of 1000: the P99 is slow.
        w.record_success(700, 80_000);
        w.record_success(700, 80_000);
        let p99 = w.snapshot(900).p99_ms.unwrap();
        assert!((75.0..=85.0).contains(&p99), "p99 {p99}");
        // Still in the window two seconds later, gone after three.
        assert_eq!(w.snapshot(2999).successes, 1002);
        assert_eq!(w.snapshot(3000).successes, 0);
        assert_eq!(w.snapshot(3000).p99_ms, None);
        // A recycled slot starts from zero.
        w.record_success(3100, 1000);
        let s = w.snapshot(3100);
        assert_eq!((s.successes, s.errors), (1, 0));
    }

    #[test]
    fn window_is_shared_between_threads() {
        let w = std::sync::Arc::new(LatencyWindow::new(2, 1000));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        w.record_success(1500, 2000);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // Same slot, no recycling: nothing may be lost.
        assert_eq!(w.snapshot(1500).successes, 40_000);
    }

    fn calm(now_ms: u64, occupancy: f64) -> TickInput {
        TickInput {
            now_ms,
            p99_ms: Some(20.0),
            samples: 1000,
            error_fraction: 0.0,
            utilisation: Some(0.2),
            occupancy,
            exits_per_s: 10.0,
            metrics_age_ms: 100,
            sold_out: false,
            fair_share: None,
        }
    }

    #[test]
    fn grows_only_when_the_budget_is_filled() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        let d = c.tick(&calm(0, 10.0));
        assert_eq!(d.reason, Reason::BudgetUnfilled);
        assert_eq!(d.budget, 500.0);
        // Filled now, but the metrics still show the load of 5 s ago (10 sessions): no growth yet.
        let d = c.tick(&calm(1000, 480.0));
        assert_eq!(d.reason, Reason::AwaitingLoad);
        for s in 2..=5 {
            c.tick(&calm(s * 1000, 480.0));
        }
        // 5 s later the metrics reflect a filled budget: slow start, bounded by the lead over 480.
        let d = c.tick(&calm(6000, 480.0));
        assert_eq!(d.reason, Reason::SlowStart);
        assert!(d.budget > 500.0 && d.budget <= 480.0 * 1.5, "{}", d.budget);
    }

    #[test]
    fn cut_then_cool_down_no_windup() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut hot = calm(0, 400.0);
        hot.p99_ms = Some(90.0); // x = 1.125: over, not far
        let d = c.tick(&hot);
        assert_eq!(
            d.reason,
            Reason::Confirming,
            "one mildly-over second is not enough"
        );
        assert_eq!(d.budget, 500.0);
        let d = c.tick(&hot);
        assert_eq!(d.reason, Reason::CutMild);
        assert!(
            (d.budget - 280.0).abs() < 1e-9,
            "cut from min(L, occ) = 400"
        );
        assert_eq!(d.ssthresh, d.budget);
        assert_eq!(d.rate, 5.0, "occupancy above budget: only the minimum rate");
        // Still hot for the next seconds: no second cut during the cool-down.
        for s in 1..8 {
            hot.now_ms = s * 1000;
            let d = c.tick(&hot);
            assert_eq!(d.reason, Reason::CoolDown, "second {s}");
            assert!((d.budget - 280.0).abs() < 1e-9);
        }
        // Occupancy down to the budget now, but the metrics still reflect the old one: still cooling.
        hot.now_ms = 9000;
        hot.occupancy = 280.0;
        hot.p99_ms = Some(200.0);
        assert_eq!(c.tick(&hot).reason, Reason::CoolDown);
        // Once the occupancy one actuation delay ago is down too, a far-over core is cut again.
        for s in 10..=13 {
            hot.now_ms = s * 1000;
            assert_eq!(c.tick(&hot).reason, Reason::CoolDown, "second {s}");
        }
        hot.now_ms = 14_000;
        let d = c.tick(&hot);
        assert_eq!(d.reason, Reason::CutFar);
        assert!((d.budget - 140.0).abs() < 1e-9);
        let cuts = c
            .drain_events()
            .into_iter()
            .filter(|e| matches!(e.kind, ControlEventKind::BudgetCut { .. }))
            .count();
        assert_eq!(cuts, 2);
    }

    /// Issue 39: a cautious room (start 2/s, min 1/s) at an idle core, 300 fans, the core stopped
    /// for a second 8 s into the sale: one far cut, then the pressure back to 0.01–0.1 while the
    /// occupancy (sessions of fans who bought, staying on the site) stays far over the cut budget.
    /// The cool-down waited for that occupancy to drain, so the release sat at 1/s for the whole
    /// 30 s; now it ends at the second calm tick and light load grows the release again.
    #[test]
    fn a_cut_ends_by_pressure_when_long_sessions_keep_the_occupancy_up() {
        let cfg = ControllerConfig::for_room(100.0, 2.0, Bounds { min_rate: 1.0, max_rate: 2000.0, total_active_max: None });
        let mut c = ReleaseController::new(cfg);
        let light = |now_ms: u64, occupancy: f64, p99_ms: f64| TickInput {
            samples: 12,
            p99_ms: Some(p99_ms),
            utilisation: Some(0.01),
            exits_per_s: 0.0,
            ..calm(now_ms, occupancy)
        };
        let mut occ = 20.0;
        for s in 0..8u64 {
            let d = c.tick(&light(s * 1000, occ, 4.0));
            occ = (occ + d.rate).min(300.0);
        }
        // The stop: the requests held for a second land in the window, P99 ≈ 1 s, for three ticks.
        let d = c.tick(&light(8000, occ, 1000.0));
        assert_eq!(d.reason, Reason::CutFar, "{d:?}");
        let cut_budget = d.budget;
        assert!(occ > 1.5 * cut_budget, "the occupancy stays well over the cut: {occ} vs {cut_budget}");
        for s in 9..11u64 {
            assert_eq!(c.tick(&light(s * 1000, occ, 1000.0)).reason, Reason::CoolDown, "second {s}");
        }
        // Calm again from 11 s; the sessions stay (no exits), fans keep coming in at the release rate.
        let mut decisions = Vec::new();
        for s in 11..40u64 {
            let d = c.tick(&light(s * 1000, occ, 4.0));
            occ += d.rate;
            decisions.push((s, d));
        }
        let held: Vec<u64> = decisions.iter().filter(|(_, d)| d.reason == Reason::CoolDown).map(|(s, _)| *s).collect();
        assert_eq!(held, vec![11], "cool-down ends at the second calm tick, not when the occupancy drains");
        assert_eq!(decisions[1].1.reason, Reason::LightLoad, "{:?}", decisions[1]);
        // The budget doubles from the cut level, past the occupancy at the next tick: the release
        // leaves its minimum two seconds after the core was calm again, and never returns to it.
        let at_min: Vec<u64> = decisions.iter().filter(|(_, d)| d.rate <= 1.0).map(|(s, _)| *s).collect();
        assert_eq!(at_min, vec![11, 12], "{decisions:?}");
        assert!(decisions.last().is_some_and(|(_, d)| d.rate > 20.0), "{decisions:?}");

        // The loaded rules too (the default room, enough samples): cut far on one slow second, the core
        // calm at once with 800 sessions held up by long sessions and a cut budget of 250.
        let mut c = ReleaseController::new(ControllerConfig { initial_budget: 1000.0, ..ControllerConfig::default() });
        for s in 0..6u64 {
            c.tick(&calm(s * 1000, 500.0));
        }
        let mut slow = calm(6000, 500.0);
        slow.p99_ms = Some(233.0);
        assert_eq!(c.tick(&slow).reason, Reason::CutFar);
        assert_eq!(c.budget(), 250.0);
        for s in 7..9u64 {
            slow.now_ms = s * 1000;
            assert_eq!(c.tick(&slow).reason, Reason::CoolDown, "second {s}");
        }
        let reasons: Vec<Reason> = (9..13u64).map(|s| c.tick(&calm(s * 1000, 800.0)).reason).collect();
        assert_eq!(reasons[0], Reason::CoolDown, "{reasons:?}");
        assert!(reasons[1..].iter().all(|r| *r != Reason::CoolDown), "{reasons:?}");
        // Over target again within `cooldown_ms` (8 s) of the cut: no second cut (windup), the
        // release drains at its minimum.
        let mut hot = calm(13_000, 800.0);
        hot.p99_ms = Some(300.0);
        let d = c.tick(&hot);
        assert_eq!((d.reason, d.rate), (Reason::CoolDown, 5.0), "{d:?}");
        // Past it, a far-over core is cut again at once.
        hot.now_ms = 14_000;
        assert_eq!(c.tick(&hot).reason, Reason::CutFar);
    }

    /// Issue 39, StarArena: a surge releasing ~575/s, one far cut (P99 1.6 × the target) that the
    /// sessions of fans who bought keep the occupancy over: the rate went to its minimum for the
    /// cool-down, then the slew limiter grew it by 10 and then 25% a tick, 13 ticks back to 465/s
    /// with the core calm and thousands waiting. Now, once the cut is over, the rate comes back at
    /// once to the rate before it scaled as the budget was (×0.5), bounded as ever by the budget.
    #[test]
    fn after_a_cut_the_release_resumes_at_the_rate_it_carried_scaled_as_the_budget() {
        let busy = |now_ms: u64, occupancy: f64, p99_ms: f64| TickInput { p99_ms: Some(p99_ms), exits_per_s: 400.0, ..calm(now_ms, occupancy) };
        let surge = || {
            let mut c = ReleaseController::new(ControllerConfig { initial_budget: 2000.0, bounds: Bounds { max_rate: 5000.0, ..Bounds::default() }, ..ControllerConfig::default() });
            let mut rate = 0.0;
            for s in 0..20u64 {
                rate = c.tick(&busy(s * 1000, 1900.0, 40.0)).rate;
            }
            assert!(rate > 400.0, "the surge's rate: {rate}");
            let d = c.tick(&busy(20_000, 1900.0, 160.0));
            assert_eq!(d.reason, Reason::CutFar, "{d:?}");
            assert_eq!(d.rate, 5.0, "the occupancy over the cut budget (950): the minimum");
            (c, rate)
        };
        // The fans admitted before the cut leave at 400/s while the release is at its minimum.
        let (mut c, rate) = surge();
        let d = c.tick(&busy(21_000, 1500.0, 40.0));
        assert_eq!((d.reason, d.rate), (Reason::CoolDown, 15.0), "in the cool-down, the slew limiter alone: {d:?}");
        // The cut is over (two calm ticks): the release is back at half the rate it had before the
        // cut at once (the budget's (1,092 − 1,100) / 2 s + 400 exits would allow 396/s), where the
        // slew limiter alone allowed 15 + 10 = 25/s; from there +25% a tick at most. (The core was
        // calm with 1,500 sessions out there, more than the cut's 950: a spike, whose level the
        // budget recovers towards, ×1.15 a tick —
        // `a_far_cut_the_calm_core_disowns_is_recovered_from_as_fast_as_slow_start`.)
        let d = c.tick(&busy(22_000, 1100.0, 40.0));
        assert_eq!((d.reason, d.budget), (Reason::Recover, 950.0 * 1.15), "{d:?}");
        assert!((d.rate - rate * 0.5).abs() < 1e-9, "{} vs {rate}", d.rate);
        let d2 = c.tick(&busy(23_000, 900.0, 40.0));
        assert!(d2.rate > d.rate && d2.rate <= d.rate * 1.25 + 1e-9, "{d2:?}");

        // It lifts the slew limiter's ceiling, it is no floor: a budget with no room keeps the
        // release at what the budget allows.
        let (mut c, _) = surge();
        c.tick(&busy(21_000, 1500.0, 40.0));
        let d = c.tick(&TickInput { exits_per_s: 0.0, ..busy(22_000, 1100.0, 40.0) });
        assert_eq!((d.reason, d.rate), (Reason::Recover, 5.0), "the occupancy over the budget, nobody leaving: {d:?}");

        // A rate remembered longer than `max_cooldown_ms` (30 s) says nothing: the slew limiter alone.
        // (Here the metrics go stale for 31 s, nobody leaving: the release creeps up to 25/s.)
        let (mut c, _) = surge();
        for s in 21..=51u64 {
            let d = c.tick(&TickInput { metrics_age_ms: 10_000, exits_per_s: 0.0, ..busy(s * 1000, 900.0, 40.0) });
            assert!(d.rate <= 25.0, "{d:?}");
        }
        let d = c.tick(&busy(52_000, 900.0, 40.0));
        assert_ne!(d.reason, Reason::CoolDown, "{d:?}");
        assert!(d.rate <= 35.0, "from 25/s, +10: {d:?}");

        // The cool-down over but the budget with no room (nobody leaving): the rate kept pending,
        // then not lifted on stale metrics, nor with requests still failing (under the cut
        // threshold): the slew limiter alone, from 25/s.
        for t in [TickInput { metrics_age_ms: 10_000, ..busy(23_000, 900.0, 40.0) }, TickInput { error_fraction: 0.005, ..busy(23_000, 900.0, 40.0) }] {
            let (mut c, _) = surge();
            c.tick(&busy(21_000, 1500.0, 40.0));
            let d = c.tick(&TickInput { exits_per_s: 0.0, ..busy(22_000, 1100.0, 40.0) });
            assert_eq!((d.reason, d.rate), (Reason::Recover, 5.0), "{d:?}");
            let d = c.tick(&t);
            assert!(d.rate <= 15.0, "{d:?}");
            // The next clean tick lifts it.
            let d = c.tick(&busy(24_000, 900.0, 40.0));
            assert!((d.rate - 300.0).abs() < 1e-9, "{d:?}");
        }

        // Sold out forgets it: a sale whose tickets come back goes on from nothing, by the slew.
        let (mut c, _) = surge();
        c.tick(&busy(21_000, 1500.0, 40.0));
        assert_eq!(c.tick(&TickInput { sold_out: true, ..busy(22_000, 1100.0, 40.0) }).rate, 0.0);
        let d = c.tick(&busy(23_000, 900.0, 40.0));
        assert!(d.rate <= 10.0, "{d:?}");

        // An override forgets it.
        let (mut c, _) = surge();
        c.set_mode(20_500, ReleaseMode::Paused);
        assert_eq!(c.tick(&busy(21_000, 1500.0, 40.0)).rate, 0.0);
        c.set_mode(21_500, ReleaseMode::Auto);
        let d = c.tick(&busy(22_000, 900.0, 40.0));
        assert!(d.rate <= 10.0, "after a pause, the slew limiter alone: {d:?}");
    }

    /// Issue 39: on a busy box one slow second of the core (P99 2 × the target, then 0.25 × at once)
    /// cut StarArena's budget from 1,964 to 982, and the budget grew back 3% a tick within 15% of
    /// the occupancy of 5 s before: 35–40 s at 150–200 fans a second where 600 had gone in, the
    /// core at pressure 0.12–0.3 all along. A far cut whose cool-down finds the core calm with more
    /// sessions out there than the cut left was a spike: its level is recovered towards as fast as
    /// slow start (×1.15 a tick, 30% ahead of the occupancy now), up to 90% of it. A core that
    /// changed is calm only once the occupancy is down to the cut budget: no recovery, as before.
    #[test]
    fn a_far_cut_the_calm_core_disowns_is_recovered_from_as_fast_as_slow_start() {
        // Sessions of ~3.5 s: the occupancy follows the release within a few ticks.
        let tick = |c: &mut ReleaseController, s: u64, occ: f64, p99_ms: f64| {
            let exits = occ / 3.5;
            let d = c.tick(&TickInput { p99_ms: Some(p99_ms), exits_per_s: exits, ..calm(s * 1000, occ) });
            (d, (occ + d.rate - exits).max(0.0))
        };
        let cut = |calm_above: bool| {
            let mut c = ReleaseController::new(ControllerConfig { initial_budget: 2000.0, bounds: Bounds { max_rate: 5000.0, ..Bounds::default() }, ..ControllerConfig::default() });
            let mut occ = 1900.0;
            for s in 0..20u64 {
                occ = tick(&mut c, s, occ, 40.0).1.max(1900.0);
            }
            let (d, _) = tick(&mut c, 20, 1960.0, 160.0);
            assert_eq!((d.reason, d.budget), (Reason::CutFar, 980.0), "{d:?}");
            // The window still holds the slow second.
            assert_eq!(tick(&mut c, 21, 1600.0, 160.0).0.reason, Reason::CoolDown);
            // Calm at once, 1,180 sessions out there (the spike), or only once they are down to
            // the cut budget (the core changed: over target until then).
            let occ = if calm_above { 1180.0 } else { 960.0 };
            let (d, occ) = tick(&mut c, 22, occ, 20.0);
            assert_eq!(d.reason, Reason::CoolDown, "{d:?}");
            (c, occ)
        };
        let run = |c: &mut ReleaseController, mut occ: f64, from: u64, to: u64| {
            let mut last = None;
            for s in from..to {
                let (d, next) = tick(c, s, occ, 20.0);
                occ = next;
                last = Some(d);
            }
            last.unwrap()
        };

        let (mut c, occ) = cut(true);
        let d = run(&mut c, occ, 23, 33);
        assert!(d.budget >= 0.9 * 1960.0 - 1e-6, "ten calm ticks after a spike: {d:?}");
        assert!(d.budget <= 0.9 * 1960.0 * 1.03 + 1e-6, "recovery stops at 90% of the level, then 3% a tick: {d:?}");
        let (mut c, occ) = cut(false);
        let d = run(&mut c, occ, 23, 33);
        assert!(d.budget < 1.3 * 980.0, "a core that changed grows 3% a tick within 15% of what the metrics reflect: {d:?}");

        // Over target again while recovering: that level was wrong after all, and is forgotten.
        let (mut c, occ) = cut(true);
        let d = run(&mut c, occ, 23, 27);
        assert_eq!(d.reason, Reason::Recover, "{d:?}");
        let (d, _) = tick(&mut c, 30, d.occupancy, 160.0);
        assert_eq!(d.reason, Reason::CutFar, "{d:?}");
        let before = d.budget;
        tick(&mut c, 31, before * 1.3, 20.0);
        let d = run(&mut c, before, 32, 42);
        assert!(d.budget < 1.3 * before, "no second recovery: {d:?} after a cut to {before}");
    }

    #[test]
    fn errors_alone_cut() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut t = calm(0, 400.0);
        t.error_fraction = 0.2;
        assert_eq!(c.tick(&t).reason, Reason::CutFar);
    }

    /// The `surge crashes` bench: a light sale (few core requests, all fast) at 220 sessions, the core
    /// killed for a second. The errors cut the budget to 110 and set ssthresh there; before errors could
    /// be undone, light-load growth stopped at that ssthresh for the rest of the sale.
    #[test]
    fn a_short_outage_is_undone_once_the_core_is_healthy() {
        let cfg = ControllerConfig::for_room(100.0, 11.0, Bounds { min_rate: 20.0, max_rate: 80.0, total_active_max: None });
        let mut c = ReleaseController::new(cfg);
        let light = |now_ms: u64, occupancy: f64| TickInput { samples: 120, p99_ms: Some(5.0), utilisation: None, exits_per_s: 20.0, ..calm(now_ms, occupancy) };
        let mut now = 0;
        let mut before = 0.0;
        for occ in [110.0, 110.0, 110.0, 220.0, 220.0, 220.0, 220.0, 220.0, 220.0] {
            before = c.tick(&light(now, occ)).rate;
            now += 1000;
        }
        assert!(c.budget() >= 220.0, "{}", c.budget());
        // The outage: every forwarded request fails (a few fast successes from before the kill).
        let mut down = light(now, 220.0);
        down.samples = 400;
        down.error_fraction = 0.6;
        let d = c.tick(&down);
        assert_eq!(d.reason, Reason::CutFar);
        assert_eq!((d.budget, d.ssthresh), (110.0, 110.0));
        now += 1000;
        // The errors leave the 3 s window: a few requests, some still failing: thin, held.
        for _ in 0..3 {
            let mut t = light(now, 215.0);
            t.error_fraction = 0.2;
            assert_eq!(c.tick(&t).reason, Reason::ThinMetrics);
            now += 1000;
        }
        // Healthy again: after five healthy ticks the cut is undone...
        let mut reasons = Vec::new();
        let mut undone_at = 0.0;
        for _ in 0..5 {
            let d = c.tick(&light(now, 215.0));
            reasons.push(d.reason);
            undone_at = d.rate;
            now += 1000;
        }
        assert_eq!(reasons[..4], [Reason::CoolDown; 4], "{reasons:?}");
        assert_eq!(reasons[4], Reason::ErrorsCleared);
        assert_eq!(undone_at, 20.0, "the budget back at the occupancy: the exits only");
        // ...to the level before it, at most the occupancy the healthy metrics reflect.
        assert_eq!(c.budget(), 215.0);
        assert_eq!(c.ssthresh(), f64::INFINITY, "ssthresh as before the cut");
        assert!(c.drain_events().iter().any(|e| matches!(e.kind, ControlEventKind::ErrorCutUndone { from, to, .. } if from == 110.0 && to == 215.0)));
        // Light load grows past the level of the sessions out there before the outage again, and the
        // release is not stuck at the minimum.
        let d = c.tick(&light(now, 215.0));
        assert_eq!(d.reason, Reason::LightLoad, "{d:?}");
        assert!(d.budget > 220.0, "{d:?}");
        // ...and at the rate before the outage at once (80/s, the room's maximum), where the slew
        // limiter alone would allow 20 + 10: the missed seconds are not released, the rate is.
        assert_eq!(d.rate, before, "{d:?}");
    }

    #[test]
    fn latency_cuts_and_persistent_errors_are_not_undone() {
        // A latency cut stands however calm the core is afterwards.
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut hot = calm(0, 400.0);
        hot.p99_ms = Some(90.0);
        c.tick(&hot);
        hot.now_ms = 1000;
        assert_eq!(c.tick(&hot).reason, Reason::CutMild);
        for s in 2..40 {
            let d = c.tick(&calm(s * 1000, 280.0));
            assert_ne!(d.reason, Reason::ErrorsCleared, "second {s}");
            assert!(d.ssthresh <= 280.0 + 1e-9);
        }
        // Errors with the latency over too: a loaded core, not an outage.
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut t = calm(0, 400.0);
        t.error_fraction = 0.2;
        t.p99_ms = Some(150.0);
        assert_eq!(c.tick(&t).reason, Reason::CutFar);
        for s in 1..40 {
            assert_ne!(c.tick(&calm(s * 1000, 200.0)).reason, Reason::ErrorsCleared, "second {s}");
        }
        // Errors alone, then the latency over while the cut is cooling down: the cut stands.
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut t = calm(0, 400.0);
        t.error_fraction = 0.2;
        assert_eq!(c.tick(&t).reason, Reason::CutFar);
        let mut hot = calm(1000, 400.0);
        hot.p99_ms = Some(90.0);
        assert_eq!(c.tick(&hot).reason, Reason::CoolDown);
        for s in 2..40 {
            assert_ne!(c.tick(&calm(s * 1000, 200.0)).reason, Reason::ErrorsCleared, "second {s}");
        }
        // Errors that keep coming back before the core has been healthy for five ticks: cut after cut,
        // never undone; once they stop, undone to the level before the first cut.
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut budgets = Vec::new();
        for s in 0..60u64 {
            let mut t = calm(s * 1000, 400.0);
            if s % 4 == 0 {
                t.error_fraction = 0.2;
            }
            let d = c.tick(&t);
            assert_ne!(d.reason, Reason::ErrorsCleared, "second {s}");
            budgets.push(d.budget);
        }
        assert!(c.budget() < 200.0, "{budgets:?}");
        let mut undone = None;
        for s in 60..70u64 {
            let d = c.tick(&calm(s * 1000, 400.0));
            if d.reason == Reason::ErrorsCleared {
                undone = Some((s, d.budget));
            }
        }
        // The last errors at 56 s: healthy from 57 s, undone at the fifth healthy tick.
        assert_eq!(undone, Some((61, 400.0)));
    }

    #[test]
    fn light_load_grows_like_slow_start_and_thin_or_failing_does_not() {
        // A cautious room (start 2/s: budget 20) at an idle core: few requests, all fast.
        let cfg = ControllerConfig::for_room(100.0, 2.0, Bounds { min_rate: 1.0, max_rate: 50.0, total_active_max: None });
        let mut c = ReleaseController::new(cfg.clone());
        let light = |now_ms: u64, occupancy: f64| TickInput { samples: 6, p99_ms: Some(3.5), utilisation: Some(0.0), exits_per_s: 0.0, ..calm(now_ms, occupancy) };
        // The budget not in use yet: held.
        let d = c.tick(&light(0, 5.0));
        assert_eq!((d.reason, d.budget), (Reason::BudgetUnfilled, 20.0));
        // In use: it doubles each tick, never past twice the occupancy.
        let d = c.tick(&light(1000, 20.0));
        assert_eq!((d.reason, d.budget), (Reason::LightLoad, 40.0));
        let d = c.tick(&light(2000, 39.0));
        assert_eq!((d.reason, d.budget), (Reason::LightLoad, 78.0), "twice the occupancy at most");
        let d = c.tick(&light(3000, 78.0));
        assert_eq!((d.reason, d.budget), (Reason::LightLoad, 156.0));
        assert!(d.rate > 1.0, "the release follows: {d:?}");
        // One failure among the few, or slow ones: held.
        let mut failing = light(5000, 156.0);
        failing.error_fraction = 1.0 / 6.0;
        assert_ne!(c.tick(&failing).reason, Reason::LightLoad);
        let mut c = ReleaseController::new(cfg.clone());
        let mut slow = light(0, 20.0);
        slow.p99_ms = Some(70.0);
        slow.utilisation = None;
        let d = c.tick(&slow);
        assert_eq!((d.reason, d.budget), (Reason::ThinMetrics, 20.0));
        // Slow ones at a core that is busy by its own count: held too.
        slow.utilisation = Some(0.5);
        slow.now_ms = 500;
        assert_eq!(c.tick(&slow).reason, Reason::ThinMetrics);
        // Issue 26 (StarArena): slow ones under target while the core's own utilisation is near
        // nothing — the tail of a few requests on a machine swamped by joins, not load: light load
        // grows, it does not hold the sale at its minimum rate.
        let mut c = ReleaseController::new(cfg);
        slow.utilisation = Some(0.003);
        let d = c.tick(&slow);
        assert_eq!((d.reason, d.budget), (Reason::LightLoad, 40.0));
        // Over target is over, whatever the utilisation.
        slow.p99_ms = Some(130.0);
        slow.now_ms = 1000;
        assert!(matches!(c.tick(&slow).reason, Reason::CutFar | Reason::CutMild | Reason::Confirming), "over target");
        // No measurement at all (no latency, no utilisation): thin, held.
        let mut none = light(1000, 20.0);
        none.p99_ms = None;
        none.utilisation = None;
        assert_eq!(c.tick(&none).reason, Reason::ThinMetrics);
    }

    /// Issue 39: after a light-load doubling the release keeps the rate that fills the doubling in
    /// one horizon until the budget is in use, instead of `(L − occ) / horizon`, which slows as the
    /// occupancy nears the budget: 95% of a doubling took `horizon × ln 10` (4.6 s), and a cautious
    /// sale of 300 needed about 25 s. Any other rule drops the kept rate.
    #[test]
    fn light_load_fills_each_doubling_in_one_horizon() {
        let cfg = ControllerConfig::for_room(100.0, 2.0, Bounds { min_rate: 1.0, max_rate: 500.0, total_active_max: None });
        let mut c = ReleaseController::new(cfg);
        let light = |now_ms: u64, occupancy: f64| TickInput { samples: 6, p99_ms: Some(3.5), utilisation: Some(0.0), exits_per_s: 0.0, ..calm(now_ms, occupancy) };
        let d = c.tick(&light(0, 20.0));
        assert_eq!((d.reason, d.budget, d.rate), (Reason::LightLoad, 40.0, 10.0));
        // Half-way: the doubling's rate, not (40 − 30) / 2 = 5.
        let d = c.tick(&light(1000, 30.0));
        assert_eq!((d.reason, d.rate), (Reason::BudgetUnfilled, 10.0));
        // Near the budget, a second's gap at most (40 − 37).
        let d = c.tick(&light(2000, 37.0));
        assert_eq!((d.reason, d.rate), (Reason::BudgetUnfilled, 3.0));
        // In use: the next doubling, and its own rate (19.5/s, its first tick up from 3/s by the
        // slew limit).
        let d = c.tick(&light(3000, 39.0));
        assert_eq!((d.reason, d.budget, d.rate), (Reason::LightLoad, 78.0, 13.0));
        let d = c.tick(&light(4000, 45.0));
        assert_eq!((d.reason, d.rate), (Reason::BudgetUnfilled, 19.5));
        // Slow ones among the few: held, and the kept rate is gone; the release is the budget's gap.
        let mut slow = light(4500, 50.0);
        slow.p99_ms = Some(70.0);
        slow.utilisation = None;
        let d = c.tick(&slow);
        assert_eq!((d.reason, d.rate), (Reason::ThinMetrics, 14.0));
        let d = c.tick(&light(5000, 60.0));
        assert_eq!((d.reason, d.rate), (Reason::BudgetUnfilled, 9.0), "not the old doubling's rate");
        // Never more than a second's gap to the budget.
        let d = c.tick(&light(6000, 78.0));
        assert_eq!((d.reason, d.budget), (Reason::LightLoad, 156.0));
        let d = c.tick(&light(7000, 140.0));
        assert_eq!((d.reason, d.rate), (Reason::BudgetUnfilled, 16.0), "the gap, not the doubling's 39/s");
    }

    /// The kept light-load rate never outlives its budget: after an operator's override (the
    /// budget reseeded from the occupancy) or a lower cap, the release is the new budget's gap, not
    /// the old doubling's rate (a room paused at a budget of thousands released hundreds a second
    /// on resuming with 5 sessions out).
    #[test]
    fn the_light_load_rate_does_not_outlive_its_budget() {
        let cfg = ControllerConfig::for_room(100.0, 2.0, Bounds { min_rate: 1.0, max_rate: 5000.0, total_active_max: None });
        let light = |now_ms: u64, occupancy: f64| TickInput { samples: 6, p99_ms: Some(3.5), utilisation: Some(0.0), exits_per_s: 0.0, ..calm(now_ms, occupancy) };
        let grown = || {
            let mut c = ReleaseController::new(cfg.clone());
            let mut occ = 20.0;
            for s in 0..8 {
                let d = c.tick(&light(s * 1000, occ));
                assert_eq!(d.reason, Reason::LightLoad);
                occ = d.budget;
            }
            c
        };
        for (what, ops) in [("fixed", ReleaseMode::Fixed(300.0)), ("paused", ReleaseMode::Paused), ("queue-all", ReleaseMode::QueueAll)] {
            let mut c = grown();
            c.set_mode(8000, ops);
            c.tick(&light(8000, 5.0));
            c.set_mode(9000, ReleaseMode::Auto);
            let d = c.tick(&light(9000, 5.0));
            assert!(d.rate <= 10.0, "{what}: back to auto at 5 sessions, budget {}: {d:?}", d.budget);
            let d = c.tick(&light(10_000, 6.0));
            assert!(d.rate <= 20.0, "{what}: {d:?}");
        }
        let mut c = grown();
        c.set_bounds(8000, Bounds { total_active_max: Some(60.0), ..cfg.bounds });
        let d = c.tick(&light(8000, 40.0));
        assert!(d.rate <= 20.0, "a cap of 60 at 40 sessions: {d:?}");
    }

    /// Issue 26: a cautious room (start 2/s, min 1/s) at an idle core. One slow second (the edge
    /// busy as 300 fans join, or another room's load) cut it and set ssthresh at 24; light load
    /// then never grew past that ssthresh, and the loop said `budget_unfilled` with the occupancy
    /// four times the budget while it released at its minimum.
    #[test]
    fn light_load_grows_past_an_old_ssthresh_and_unfilled_means_unfilled() {
        let cfg = ControllerConfig::for_room(100.0, 2.0, Bounds { min_rate: 1.0, max_rate: 2000.0, total_active_max: None });
        let mut c = ReleaseController::new(cfg);
        let light = |now_ms: u64, occupancy: f64| TickInput { samples: 6, p99_ms: Some(2.0), utilisation: None, exits_per_s: 0.0, ..calm(now_ms, occupancy) };
        let mut decisions = vec![c.tick(&light(0, 20.0))];
        assert_eq!(decisions[0].budget, 40.0);
        let mut blip = light(1000, 48.0);
        blip.p99_ms = Some(300.0);
        let d = c.tick(&blip);
        assert_eq!((d.reason, d.budget, d.ssthresh), (Reason::CutFar, 20.0, 20.0));
        // The occupancy keeps growing at the minimum rate (tokens out, fans arriving) past the cut.
        let mut occ = 48.0;
        for s in 2..40u64 {
            occ += d.rate.max(1.0);
            decisions.push(c.tick(&light(s * 1000, occ)));
        }
        for d in &decisions {
            assert!(
                d.reason != Reason::BudgetUnfilled || d.occupancy < d.budget,
                "budget_unfilled at occupancy {} ≥ budget {}",
                d.occupancy,
                d.budget
            );
        }
        let last = decisions.last().unwrap();
        assert!(last.budget > 2.0 * 20.0, "light load grows past the old ssthresh: {last:?}");
        assert!(last.rate > 1.0, "the release is not held at its minimum: {last:?}");
        assert!(decisions.iter().any(|d| d.reason == Reason::LightLoad && d.budget > 20.0));
        assert!(c.drain_events().iter().any(|e| matches!(e.kind, ControlEventKind::PressureForgotten { ssthresh, .. } if ssthresh == 20.0)));
    }

    /// Pressure memory ages: a threshold learnt a minute ago (another room's load, a blip, a
    /// smaller core) is forgotten once the core has been calm that long, and slow start resumes.
    #[test]
    fn pressure_memory_ages() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut hot = calm(0, 400.0);
        hot.p99_ms = Some(90.0);
        c.tick(&hot);
        hot.now_ms = 1000;
        assert_eq!(c.tick(&hot).reason, Reason::CutMild);
        assert_eq!(c.ssthresh(), 280.0);
        let mut forgot = None;
        for s in 2..90u64 {
            let d = c.tick(&calm(s * 1000, c.budget()));
            if d.ssthresh.is_infinite() && forgot.is_none() {
                forgot = Some(s);
            }
        }
        assert_eq!(forgot, Some(61), "forgotten 60 s after the last tick over target");
        assert!(c.drain_events().iter().any(|e| matches!(e.kind, ControlEventKind::PressureForgotten { ssthresh, .. } if ssthresh == 280.0)));
        // Then it grows as slow start does again (×1.15 a tick at most, within the lead bound).
        let b = c.budget();
        let d = c.tick(&calm(90_000, b));
        assert_eq!(d.reason, Reason::SlowStart, "{d:?}");
    }

    /// Rooms on one core: over target, only a room at or over its fair share cuts; one under it
    /// holds and learns no threshold from pressure it did not cause.
    #[test]
    fn a_room_under_its_share_of_a_shared_core_does_not_cut() {
        let cfg = ControllerConfig::for_room(100.0, 2.0, Bounds { min_rate: 1.0, max_rate: 2000.0, total_active_max: None });
        let mut small = ReleaseController::new(cfg.clone());
        let mut big = ReleaseController::new(ControllerConfig::default());
        let share = fair_share(20.0 + 1200.0, 2);
        assert_eq!(share, Some(610.0));
        for s in 0..10u64 {
            let mut hot = calm(s * 1000, 20.0);
            hot.p99_ms = Some(200.0);
            hot.fair_share = share;
            let d = small.tick(&hot);
            assert_eq!(d.reason, Reason::OverShared, "second {s}");
            assert_eq!((d.budget, d.ssthresh), (20.0, f64::INFINITY));
            assert!(d.rate >= 1.0);
            hot.occupancy = 1200.0;
            let d = big.tick(&hot);
            if s == 0 {
                assert_eq!(d.reason, Reason::CutFar);
            }
        }
        assert!(big.ssthresh() < 1200.0);
        // Near the setpoint from the other room's load: not taught a threshold either.
        let mut warm = calm(10_000, 20.0);
        warm.p99_ms = Some(60.0); // x = 0.75: past the slow-start exit
        warm.utilisation = Some(0.5);
        warm.fair_share = share;
        for s in 10..20u64 {
            warm.now_ms = s * 1000;
            let d = small.tick(&warm);
            assert_ne!(d.reason, Reason::SlowStartExit);
            assert_eq!(d.ssthresh, f64::INFINITY);
        }
        // Alone on its core the same pressure cuts as before.
        assert_eq!(fair_share(20.0, 1), None);
        let mut alone = ReleaseController::new(cfg);
        let mut hot = calm(0, 20.0);
        hot.p99_ms = Some(200.0);
        assert_eq!(alone.tick(&hot).reason, Reason::CutFar);
    }

    /// Issue 26: shares by demand. A room that wants less than an equal part (occupancy + queue)
    /// gets all it wants; the rest is split by weight; the shares add up to what the rooms hold.
    #[test]
    fn fair_shares_are_max_min_by_demand_and_weight() {
        let d = RoomDemand::new;
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        // A surge and a small sale with 260 people waiting: the small one is entitled to all of
        // them (40 + 260), the surge to the rest of what the two hold.
        let s = fair_shares(&[d(1400.0, 13_000.0), d(40.0, 260.0)]);
        assert!(close(s[0], 1140.0) && close(s[1], 300.0), "{s:?}");
        // Its queue empty: every room's share is what it holds; nobody is over it.
        let s = fair_shares(&[d(1400.0, 13_000.0), d(290.0, 0.0)]);
        assert!(close(s[0], 1400.0) && close(s[1], 290.0), "{s:?}");
        // Two surges: an equal part each, whatever they hold now; by weight when weighted.
        let s = fair_shares(&[d(1000.0, 5000.0), d(200.0, 5000.0)]);
        assert!(close(s[0], 600.0) && close(s[1], 600.0), "{s:?}");
        let s = fair_shares(&[RoomDemand { weight: 2.0, ..d(1000.0, 5000.0) }, d(200.0, 5000.0)]);
        assert!(close(s[0], 800.0) && close(s[1], 400.0), "{s:?}");
        // Three rooms: the small one gets its demand, the two big ones split the rest.
        let s = fair_shares(&[d(900.0, 100.0), d(500.0, 900.0), d(0.0, 50.0)]);
        assert!(close(s[2], 50.0) && close(s[0], 675.0) && close(s[1], 675.0), "{s:?}");
        assert!((s.iter().flatten().sum::<f64>() - 1400.0).abs() < 1e-9);
        // Not in play (nobody queued or admitted): no share; one room in play: nothing to share.
        assert_eq!(fair_shares(&[d(1200.0, 10.0), d(0.0, 0.0)]), vec![None, None]);
        assert_eq!(fair_shares(&[d(1200.0, 10.0)]), vec![None]);
        let s = fair_shares(&[d(1200.0, 10.0), d(0.0, 0.0), d(0.0, 5.0)]);
        assert_eq!(s[1], None);
        assert!(close(s[2], 5.0) && close(s[0], 1195.0), "{s:?}");
        // Garbage is safe: counted as nothing, weight 1.
        let s = fair_shares(&[RoomDemand { occupancy: f64::NAN, queued: 10.0, weight: f64::NAN }, d(100.0, f64::INFINITY)]);
        assert!(s.iter().flatten().all(|x| x.is_finite() && *x >= 0.0), "{s:?}");
        // Equal split when every room wants more than an equal part: the old `fair_share`.
        let s = fair_shares(&[d(1200.0, 1000.0), d(20.0, 1000.0)]);
        assert_eq!(s[0], fair_share(1220.0, 2));
    }

    /// Issue 26: a surge holds the core at its setpoint when a small sale opens beside it. The
    /// small sale, under its share, grows into the core at any pressure under target (about
    /// ×1.15 a tick, at most its share and `share_lead` × what the metrics reflect); the surge,
    /// over its share, does not grow and gives way 3% a tick down to its share while the core is at
    /// the hold pressure. Alone, the same figures hold both.
    #[test]
    fn a_room_over_its_share_yields_and_one_under_grows_to_it() {
        let cfg = ControllerConfig::for_room(100.0, 2.0, Bounds { min_rate: 1.0, max_rate: 2000.0, total_active_max: None });
        let full = |now_ms: u64, occupancy: f64, utilisation: f64, fair_share: Option<f64>| TickInput {
            p99_ms: Some(50.0),
            utilisation: Some(utilisation),
            fair_share,
            ..calm(now_ms, occupancy)
        };
        // The small sale: 20 in, 280 waiting; the surge: 1400 in, thousands waiting.
        let mut small = ReleaseController::new(cfg.clone());
        let mut big = ReleaseController::new(ControllerConfig { initial_budget: 1400.0, ..ControllerConfig::default() });
        let shares = |small_occ: f64, big_occ: f64| fair_shares(&[RoomDemand::new(small_occ, 300.0 - small_occ), RoomDemand::new(big_occ, 10_000.0)]);
        let (mut occ_small, mut occ_big) = (20.0, 1400.0);
        let mut measured_small = vec![occ_small];
        for s in 0..12u64 {
            let sh = shares(occ_small, occ_big);
            // u = 0.8: pressure 0.94, between the hold pressure and the target.
            let d = small.tick(&full(s * 1000, occ_small, 0.8, sh[0]));
            let b = big.tick(&full(s * 1000, occ_big, 0.8, sh[1]));
            if s >= 5 {
                // Grows, or waits for the load to show once three times what the metrics reflect.
                let ago = measured_small[measured_small.len() - 6];
                let grew = d.reason == Reason::GrowToShare;
                assert!(grew || (d.reason == Reason::AwaitingLoad && d.budget >= 3.0 * ago - 1e-9), "second {s}: {d:?}");
                assert!(d.budget <= occ_small * 1.3 + 1e-9 && d.budget <= 3.0 * ago + 1e-9 && d.budget <= sh[0].unwrap() + 1e-9, "second {s}: {d:?}");
                assert!(!grew || d.rate > 1.0, "second {s}: {d:?}");
            }
            assert_eq!(d.ssthresh, f64::INFINITY, "second {s}");
            assert_eq!(b.reason, Reason::YieldShare, "second {s}: {b:?}");
            assert!(b.budget >= sh[1].unwrap() - 1e-9, "never under its share: {b:?} {sh:?}");
            assert!(b.budget <= (occ_big * 0.97).max(sh[1].unwrap()) + 1e-9, "second {s}: {b:?}");
            // The occupancies follow the budgets.
            occ_small = d.budget.min(300.0);
            occ_big = (occ_big - 30.0).max(b.budget);
            measured_small.push(occ_small);
        }
        assert!(occ_small > 60.0, "{occ_small}");
        // Over target: the small sale holds (no cut, no growth), the surge cuts.
        let sh = shares(occ_small, occ_big);
        let d = small.tick(&full(12_000, occ_small, 1.0, sh[0]));
        assert_eq!((d.reason, d.budget), (Reason::OverShared, small.budget()));
        assert_eq!(big.tick(&full(12_000, occ_big, 1.0, sh[1])).reason, Reason::CutFar);
        // Over its share, the core past the slow-start exit but under the hold pressure: the surge
        // does not grow (the room left is the small sale's), and does not give way either.
        let mut big = ReleaseController::new(ControllerConfig { initial_budget: 1400.0, ..ControllerConfig::default() });
        for s in 0..8u64 {
            let d = big.tick(&full(s * 1000, 1400.0, 0.6, Some(1200.0)));
            assert_eq!((d.reason, d.budget), (Reason::YieldShare, 1400.0), "second {s}");
        }
        // Its share back to what it holds (the small sale's queue empty): it grows as before.
        let d = big.tick(&full(8000, 1400.0, 0.6, Some(1400.0)));
        assert_eq!(d.reason, Reason::SlowStartExit, "{d:?}");
        let d = big.tick(&full(9000, 1400.0, 0.6, Some(1400.0)));
        assert!(d.reason == Reason::Grow && d.budget > 1400.0, "{d:?}");
        // Alone on the core the same figures hold both rooms.
        let mut alone = ReleaseController::new(cfg);
        for s in 0..10u64 {
            let d = alone.tick(&full(s * 1000, 20.0, 0.8, None));
            assert_eq!(d.budget, 20.0, "second {s}: {d:?}");
        }
        let mut alone = ReleaseController::new(ControllerConfig { initial_budget: 1400.0, ..ControllerConfig::default() });
        for s in 0..10u64 {
            let d = alone.tick(&full(s * 1000, 1400.0, 0.8, None));
            assert_eq!(d.budget, 1400.0, "second {s}: {d:?}");
            assert_ne!(d.reason, Reason::YieldShare, "second {s}: {d:?}");
        }
    }

    /// After a capacity drop deeper than the cut, the core stays over target while the occupancy
    /// drains under the budget: the release stays at its minimum and the budget follows the
    /// occupancy down (no refill to a level the core was just over target at); a saturated core
    /// is cut at once, without a confirming tick.
    #[test]
    fn a_cut_too_shallow_drains_and_follows_the_occupancy() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut hot = calm(0, 1000.0);
        hot.p99_ms = Some(85.0); // x = 1.06: mild...
        hot.utilisation = Some(1.0); // ...but every worker busy: far
        let d = c.tick(&hot);
        assert_eq!((d.reason, d.budget), (Reason::CutFar, 250.0), "from min(L, occ) = 500");
        // Occupancy draining under the budget, the core still over target.
        for (s, occ) in [(1u64, 400.0), (2, 300.0), (3, 240.0), (4, 200.0)] {
            hot.now_ms = s * 1000;
            hot.occupancy = occ;
            hot.utilisation = Some(0.9);
            let d = c.tick(&hot);
            assert_eq!(d.reason, Reason::CoolDown);
            assert_eq!(d.rate, 5.0, "second {s}: drains at the minimum");
            assert_eq!(d.budget, occ.min(250.0), "second {s}");
        }
        assert_eq!(c.ssthresh(), 200.0);
    }

    #[test]
    fn stale_or_thin_metrics_never_grow() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        let mut t = calm(0, 500.0);
        t.metrics_age_ms = 10_000;
        for s in 0..30 {
            t.now_ms = s * 1000;
            let d = c.tick(&t);
            assert_eq!(d.reason, Reason::StaleMetrics);
            assert_eq!(d.budget, 500.0);
        }
        // Few requests, and slow ones: thin, held.
        let mut t = calm(31_000, 500.0);
        t.samples = 10;
        t.p99_ms = Some(80.0);
        let d = c.tick(&t);
        assert_eq!(d.reason, Reason::ThinMetrics);
        assert_eq!(d.budget, 500.0);
        let ev = c.drain_events();
        assert!(ev.iter().any(|e| e.kind
            == ControlEventKind::MetricsStale {
                stale: true,
                age_ms: 10_000
            }));
        assert!(
            ev.iter()
                .any(|e| matches!(e.kind, ControlEventKind::MetricsStale { stale: false, .. }))
        );
    }

    #[test]
    fn slew_limits_the_rise_not_the_fall() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        let d = c.tick(&calm(0, 0.0));
        // (500 − 0) / 2 s + 10 = 260/s wanted, from 50/s: at most +25%.
        assert!((d.rate - 62.5).abs() < 1e-9, "{}", d.rate);
        let d = c.tick(&calm(1000, 0.0));
        assert!((d.rate - 78.125).abs() < 1e-9, "{}", d.rate);
        let d = c.tick(&calm(2000, 600.0));
        assert_eq!(d.rate, 5.0, "falls to the minimum at once");
    }

    #[test]
    fn overrides_win_and_are_logged() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        c.set_mode(0, ReleaseMode::Paused);
        assert_eq!(c.tick(&calm(0, 0.0)).rate, 0.0);
        c.set_mode(1000, ReleaseMode::Fixed(123.0));
        let mut hot = calm(1000, 10.0);
        hot.p99_ms = Some(500.0);
        let d = c.tick(&hot);
        assert_eq!(
            (d.rate, d.reason),
            (123.0, Reason::Fixed),
            "fixed wins even when hot"
        );
        c.set_mode(2000, ReleaseMode::QueueAll);
        assert_eq!(c.tick(&calm(2000, 0.0)).reason, Reason::QueueAll);
        c.set_bounds(
            3000,
            Bounds {
                min_rate: 1.0,
                max_rate: 7.0,
                total_active_max: Some(100.0),
            },
        );
        c.set_mode(3000, ReleaseMode::Auto);
        let d = c.tick(&calm(3000, 50.0));
        assert!(d.rate <= 7.0 && d.rate >= 1.0, "{}", d.rate);
        assert!(d.budget <= 100.0);
        let d = c.tick(&calm(4000, 100.0));
        assert_eq!((d.rate, d.reason), (0.0, Reason::AtCap));
        c.set_mode(5000, ReleaseMode::Fixed(50.0));
        assert_eq!(
            c.tick(&calm(5000, 100.0)).reason,
            Reason::AtCap,
            "the cap holds in fixed mode too"
        );
        let ev = c.drain_events();
        let modes = ev
            .iter()
            .filter(|e| matches!(e.kind, ControlEventKind::ModeChanged { .. }))
            .count();
        let bounds = ev
            .iter()
            .filter(|e| matches!(e.kind, ControlEventKind::BoundsChanged { .. }))
            .count();
        assert_eq!((modes, bounds), (5, 1));
    }

    #[test]
    fn sold_out_stops_every_mode() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        c.set_mode(0, ReleaseMode::Fixed(100.0));
        let mut t = calm(0, 0.0);
        t.sold_out = true;
        let d = c.tick(&t);
        assert_eq!((d.rate, d.reason), (0.0, Reason::SoldOut));
        c.set_mode(1000, ReleaseMode::Auto);
        t.now_ms = 1000;
        assert_eq!(c.tick(&t).rate, 0.0);
        assert!(
            c.drain_events()
                .iter()
                .any(|e| e.kind == ControlEventKind::SoldOut { sold_out: true })
        );
    }

    #[test]
    fn records_serialize_for_export() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        c.set_mode(1000, ReleaseMode::Fixed(12.5));
        let ev = c.drain_events();
        let json = serde_json::to_value(&ev[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"at_ms": 1000, "event": "mode_changed", "from": "auto", "to": {"fixed": 12.5}})
        );
        let d = c.tick(&calm(2000, 0.0));
        let json = serde_json::to_value(d).unwrap();
        assert_eq!(json["reason"], "fixed");
        assert_eq!(json["rate"], 12.5);
        assert!(json["ssthresh"].is_null(), "infinite before the first cut");
    }

    #[test]
    fn garbage_input_is_safe() {
        let mut c = ReleaseController::new(ControllerConfig::default());
        let t = TickInput {
            now_ms: 0,
            p99_ms: Some(f64::NAN),
            samples: 0,
            error_fraction: f64::NAN,
            utilisation: Some(f64::INFINITY),
            occupancy: f64::NAN,
            exits_per_s: -3.0,
            metrics_age_ms: 0,
            sold_out: false,
            fair_share: None,
        };
        let d = c.tick(&t);
        assert!(d.rate.is_finite() && d.rate >= 0.0);
        c.set_bounds(
            0,
            Bounds {
                min_rate: f64::NAN,
                max_rate: -1.0,
                total_active_max: Some(f64::NAN),
            },
        );
        let d = c.tick(&calm(1000, 10.0));
        assert!(d.rate.is_finite() && d.rate >= 0.0);
    }
}
