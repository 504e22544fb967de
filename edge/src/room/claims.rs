//! Admission is a promise (issue #39, DESIGN §7c): the tickets already promised to fans the
//! release let in are counted before more fans are let in.
//!
//! A place the release passes is a claim on the stock: its fan will poll, be admitted and — most
//! of the time — hold within seconds. The core's stock answer (read once a second by every edge)
//! says how many tickets are left (`available`) and how many holds were ever made (`holds`, with
//! their tickets `hold_units`); the leader, which moves `serving`, remembers what each of its
//! recent steps released. From the two:
//!
//! - a place is **settled** when a hold is made: each new hold the core counts settles the oldest
//!   place still open (fans let in earlier hold earlier), whatever it bought — a fan who takes one
//!   of the two tickets it may buy frees the other at once;
//! - an open place is **promised** the mean tickets per hold, measured from this sale's holds
//!   (`max-qty` until [`MEASURED_HOLDS`] holds are counted), with a margin of [`MARGIN_SD`] (three)
//!   standard deviations of the open places' sum, so a step whose fans take more than the mean still
//!   finds its tickets (the spread of a hold's tickets is bounded by the mean and `max-qty`);
//! - **the cap** of a step: as many places as the tickets left, less those promised, can serve; and
//!   one more while any ticket is unpromised — the last tickets go to a fan who is offered what is
//!   left (the core answers `409 not_enough_left` with `available` to a hold that asks for more)
//!   rather than to nobody.
//!   What the cap held back of a tick's step goes in between ticks as holds settle places: the
//!   leader reads the stock every [`super::release::BETWEEN`] meanwhile
//!   ([`super::Rooms::step_between`]), and at once when a hold is answered through it
//!   ([`super::Rooms::hold_answered`]).
//!
//! A place is **picked up** when its fan is admitted (a session opened for it: the room's store
//! records the session's place, and the leader's sweep counts, each tick, the places picked up in
//! the range of places each recent step passed). A place not picked up within its step's pickup
//! window lapses (its fan did not come: it stopped polling, or was a script refused at the door):
//! the longest poll the room's answers may have told the step's places ([`super::told::Told::pickup_ms`]), at
//! most [`PICKUP_MS`]; one
//! picked up but not settled lapses at [`CLAIM_MS`] (its fan did not buy). Then the next fans are
//! let in. Holds settle picked-up places first (a fan who holds was admitted). While the stock left
//! is all promised, the room says "sold out for now" and the queue keeps its places
//! ([`super::Room::spoken_for`]). Before the core's first stock answer nothing caps the release (a
//! sale opening as the edge starts may let in a second's worth unchecked). A core that does not
//! count holds (older than this edge) settles nothing: every place is then promised `max-qty`
//! until it lapses.
//!
//! **At the tail** — every ticket left promised ([`Claims::cap`] would be 0) — a place not picked
//! up past its step's **standby time** ([`super::told::Pickup::standby_ms`]: its fan's slowest
//! scripted poll, the session and its count, a follower's tick; 1.7 s for a place told to ask
//! every second on embedded state, against a 3.5-s window) is not counted in the promise: one
//! place behind it is let in to stand by for its tickets. That place is promised as any other, so
//! a no-show lets one fan in, once; the no-show's place lapses at its window as before. A fan who
//! comes late after all is promised again: of the two, the first to hold has the tickets and the
//! other meets "sold out" — for now, on the core's waitlist, while unpaid holds may come back. The
//! last tickets of a sale held by places whose fans never come (scripts refused at the door, a
//! closed page) wait the standby time, not the window, before a fan who buys is let in for them.
//!
//! What it costs: a fan who is admitted later than its step's pickup window, or holds more than
//! [`CLAIM_MS`] after it, settles another fan's place when it holds, so one place too many is let
//! in; if the stock is short then, a fan meets "sold out". A lane place or a late proof is not in
//! its step's range: its promise stands [`CLAIM_MS`], the cautious way. A store that counts no
//! pickups lapses nothing before [`CLAIM_MS`].
//!
//! The book outlives its leader: each tick the leader keeps it in the room's store
//! ([`super::state::RoomState::keep_book`], only while it holds the lease), and an edge that takes
//! the lease over goes on from it ([`super::state::RoomState::kept_book`]) — the places its
//! predecessor let in stay promised, instead of a second full round let in on the same tickets.
//! The book records where `serving` stood at its last step: places let in past it (the leader
//! died between its step and keeping the book) are promised at the takeover as one step
//! ([`Claims::unkept`]), the cautious way. An edge whose ticks failed for longer than the lease
//! takes its lease back as a takeover too, from the newer of its own book and the store's
//! ([`Claims::newer`]); a keep refused (the lease went elsewhere) makes it a follower at once. A
//! new leader's first stock readings may lag the book's count of holds: a lower count settles
//! nothing and is not taken for a counter that started over until [`HOLDS_RESET_MS`] (else the
//! same holds would settle twice). What a failover still costs: a new leader whose clock runs
//! ahead of its predecessor's lapses the book's places early by the difference (the leases rely
//! on synchronised clocks as well).

use std::collections::VecDeque;

use super::state::PickupAsk;

/// How long a released place's promise stands: its fan polls its turn within seconds (every place
/// the stock could reach polls at least every 5 s), is admitted and holds; a place released longer
/// ago has bought or will not (its later hold, if any, may meet "sold out"). Measured on the bots
/// surge (its fans solving proofs of work on two shared cores): from a place's release to its hold
/// took at least 8.7 s for the slowest 10% and 11 s for the slowest 1%, so 10 s let 27 fans of
/// 1,583 meet "sold out".
pub const CLAIM_MS: u64 = 15_000;

/// How long a released place's promise stands before its fan is admitted: every place the stock
/// could reach is told to poll at least every [`super::told::NEAR_POLL_MS`] (5 s, 6 s with its
/// jitter), an edge other than the leader sees the step at its next tick (1 s), an event stream
/// hears its turn at once, and the pickup is counted at the leader's next tick (1 s): 8 s at
/// worst. A script refused at the door, a fan who closed the page: their places lapse here, not
/// at [`CLAIM_MS`] (the bots surge sat 14 s with 18 such places holding its last 32 tickets).
pub const PICKUP_MS: u64 = 8_000;

/// The promise's margin over the open places' mean tickets, in standard deviations of their sum.
/// A fan promised too little is offered what is left (`409 not_enough_left` with the number); only
/// one who finds nothing meets "sold out". Tried with 1 σ (2026-12-04, release builds on 2 shared
/// cores): scenic's tickets all held at 9–12 s (11–13 s with 2 σ) and bots' at 14–16 s (15–19 s),
/// but 0.06–0.16% of scenic's admitted met "sold out" at the sellout — and lost their seats to fans
/// admitted after them, on tickets that came back from unpaid holds (`seat_order` 0.69 by admission
/// order) — and 0.89% of StarArena's in a run whose fans came late to their turn. Fans first: 2 σ.
/// Then 3 σ (2026-12-05): with 2 σ, scenic runs had 1–4 admitted fans meet "sold out" in three of
/// four runs (a cohort whose holds ran 1.47 tickets a fan against a measured 1.40; `seat_order`
/// 0.69–0.90, where one such fan among thousands costs a tenth of the pairs), once holds through
/// the leader woke its steps at once ([`super::Rooms::hold_answered`]): a cap read again after
/// every hold admits at the margin's edge more often. One σ more costs the promise half a ticket
/// per √place (6 tickets for 134 open places); the last places are promised `max-qty` each anyway.
/// A scenic run at 3 σ still had three admitted fans meet "sold out": the measured mean's own
/// error, not the places' spread, had run out the margin — it is now in it ([`Claims::promise`]).
pub const MARGIN_SD: f64 = 3.0;

/// Holds counted before their mean replaces `max-qty` as a place's promise.
pub const MEASURED_HOLDS: u64 = 20;

/// How long the core's count of holds may read lower than the book's before it is taken for a
/// counter that started over (the event made again): an edge that takes the lease over reads the
/// core on its own clock, and its first readings can lag the ones its predecessor kept in the
/// book by a poll. Taken at once, a lagging reading would settle the same holds twice when the
/// count catches up — and let as many fans too many in.
pub const HOLDS_RESET_MS: u64 = 5_000;

/// What a room's leader remembers of its recent steps (kept in [`super::ReleaseBook`]). Every field
/// has a default, so a book kept by an edge of another version still reads (a rolling upgrade).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Claims {
    /// The steps of the last [`CLAIM_MS`], oldest first.
    window: VecDeque<Step>,
    /// The core's `holds` at the last stock answer seen (`None`: none yet).
    last_holds: Option<u64>,
    /// The core's (`holds`, `hold_units`) at the last answer: the measured tickets per hold.
    measured: (u64, u64),
    /// Since when the core's `holds` reads lower than `last_holds` (ms, this edge's clock: not
    /// kept in the book), see [`HOLDS_RESET_MS`].
    #[serde(skip)]
    lower_since: Option<u64>,
    /// `serving` after the last step this book recorded, and the room's places passed then
    /// ([`super::state::RoomState::passed`]): an edge that takes the lease over finds the steps
    /// made after it (its predecessor died between a step and keeping the book) by them.
    to: u64,
    passed: u64,
}

/// What one release step did, as [`Claims::note`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Released {
    /// The places it passed: `from < place <= to` (`serving` before and after).
    pub from: u64,
    pub to: u64,
    /// Its fans who may now be admitted ([`super::state::Advanced::released`]).
    pub places: u64,
    /// Of them, the places in the range (the others, lane places and late proofs, are not).
    pub in_line: u64,
    /// Its pickup window ([`super::told::Told::pickup_ms`]; 0: [`PICKUP_MS`]).
    pub pickup_ms: u64,
    /// Its standby time ([`super::told::Pickup::standby_ms`]; 0: none).
    pub standby_ms: u64,
}

impl Released {
    /// How long its places stand before their fans are admitted.
    fn pickup(&self) -> u64 {
        if self.pickup_ms == 0 { PICKUP_MS } else { self.pickup_ms.min(PICKUP_MS) }
    }
}

/// One release step in the window.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct Step {
    /// When it released (ms).
    at: u64,
    r: Released,
    /// Places settled by holds.
    settled: u64,
    /// Places in its range picked up, as last counted (`None`: not counted yet).
    picked: Option<u64>,
    /// Places that lapsed at [`PICKUP_MS`], never picked up.
    lapsed: u64,
    /// Past [`PICKUP_MS`]: `lapsed` is final and pickups are no longer counted.
    checked: bool,
    /// When `picked` was counted (ms).
    picked_at: u64,
    /// Open places not picked up past its standby time, as of the last count: at the tail of a
    /// sale a place behind stands by for their tickets ([`Claims::cap`]).
    standby: u64,
}

impl Step {
    /// Places in its range not picked up (after the check: those that lapsed).
    fn unpicked(&self) -> u64 {
        if self.checked {
            return self.lapsed;
        }
        self.picked.map_or(0, |p| self.r.in_line - p.min(self.r.in_line))
    }

    /// Places neither settled nor lapsed.
    fn open(&self) -> u64 {
        self.r.places.saturating_sub(self.settled + self.lapsed)
    }

    /// Open places whose fan may hold: not the ones never picked up.
    fn holdable(&self) -> u64 {
        self.r.places.saturating_sub(self.settled + self.unpicked())
    }
}

impl Claims {
    /// What the leader's sweep should count: the ranges of the steps whose pickup window runs, and
    /// the places below them (and below `serving`) no longer needed.
    pub fn ask(&self, serving: u64) -> PickupAsk {
        let ranges: Vec<(u64, u64)> = self.window.iter().filter(|s| !s.checked).map(|s| (s.r.from, s.r.to)).collect();
        let forget_to = ranges.iter().map(|r| r.0).min().unwrap_or(serving).min(serving);
        PickupAsk { ranges, forget_to: Some(forget_to) }
    }

    /// Records the sweep's answer to `ask` at `now_ms` (`None`: not counted): the places picked
    /// up in each step's range.
    pub fn picked(&mut self, ask: &PickupAsk, counts: Option<&[u64]>, now_ms: u64) {
        let Some(counts) = counts else { return };
        for (range, n) in ask.ranges.iter().zip(counts) {
            if let Some(s) = self.window.iter_mut().find(|s| !s.checked && (s.r.from, s.r.to) == *range) {
                s.picked = Some(*n);
                s.picked_at = now_ms;
            }
        }
    }

    /// Records a step at `now_ms` (`None`: this tick released nobody), and `holds` = the core's
    /// (`holds`, `hold_units`) now (`None`: not known, or not read again). New holds settle the
    /// oldest places picked up and open, then (holds counted before their pickups) the oldest open
    /// ones; places not picked up within [`PICKUP_MS`] lapse; steps older than [`CLAIM_MS`] leave.
    pub fn note(&mut self, now_ms: u64, released: Option<Released>, holds: Option<(u64, u64)>) {
        if let Some((h, units)) = holds {
            // A lower reading lags (a new leader's first readings): it is let pass. One lower for
            // [`HOLDS_RESET_MS`] is a counter that started over (the event was made again):
            // nothing settles, and it counts from there.
            let before = self.last_holds;
            if before.is_some_and(|b| h < b) {
                let since = *self.lower_since.get_or_insert(now_ms);
                if now_ms < since + HOLDS_RESET_MS {
                    return self.step(now_ms, released);
                }
            }
            self.lower_since = None;
            let mut new = before.filter(|b| h >= *b).map_or(0, |b| h - b);
            self.last_holds = Some(h);
            self.measured = (h, units);
            for holdable in [true, false] {
                for step in self.window.iter_mut() {
                    if new == 0 {
                        break;
                    }
                    let n = new.min(if holdable { step.holdable() } else { step.open() });
                    step.settled += n;
                    new -= n;
                }
            }
        }
        self.step(now_ms, released);
    }

    /// [`Claims::note`] after the holds: records the step, lapses and drops.
    fn step(&mut self, now_ms: u64, released: Option<Released>) {
        if let Some(r) = released {
            self.push(now_ms, r);
        }
        for step in self.window.iter_mut().filter(|s| !s.checked && s.at + s.r.pickup() <= now_ms) {
            step.lapsed = step.unpicked().min(step.open());
            step.checked = true;
        }
        for step in self.window.iter_mut() {
            let counted = step.r.standby_ms > 0 && step.picked.is_some() && step.picked_at >= step.at + step.r.standby_ms;
            step.standby = if counted && !step.checked { step.unpicked().min(step.open()) } else { 0 };
        }
        while self.window.front().is_some_and(|s| s.open() == 0 || s.at + CLAIM_MS <= now_ms) {
            self.window.pop_front();
        }
    }

    /// Records where the room stands after the leader's tick: `serving` and the places passed
    /// ([`super::state::RoomState::passed`]).
    pub fn served(&mut self, serving: u64, passed: u64) {
        self.to = self.to.max(serving);
        self.passed = self.passed.max(passed);
    }

    /// The book an edge that takes the lease goes on from: the one kept in the store, or this
    /// edge's own (`own`: it led until its ticks failed for longer than the lease) when that went
    /// further — its last steps were not kept; the store's book is then its own, older. With
    /// neither, nothing is promised.
    pub fn newer(kept: Option<Claims>, own: Option<Claims>) -> Claims {
        match (kept, own) {
            (Some(k), Some(o)) if o.to > k.to => o,
            (Some(k), _) => k,
            (None, o) => o.unwrap_or_default(),
        }
    }

    /// At a takeover at `now_ms`, with the room at `serving` and `passed` places passed: the places
    /// released after this book's last step (the leader died between a step and keeping its book,
    /// or the store ran a step whose answer it never got) are promised as one step now, the
    /// cautious way — their fans may be polling their turn. Nothing when the book recorded no step.
    pub fn unkept(&mut self, now_ms: u64, serving: u64, passed: u64) -> u64 {
        if self.to == 0 || serving <= self.to || passed <= self.passed {
            return 0;
        }
        let places = passed - self.passed;
        self.note(now_ms, Some(Released { from: self.to, to: serving, places, in_line: places, pickup_ms: 0, standby_ms: 0 }), None);
        self.served(serving, passed);
        places
    }

    /// True when no step is in the window (nothing promised).
    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    /// Places released within the window, neither settled by a hold nor lapsed.
    pub fn open(&self) -> u64 {
        self.window.iter().map(Step::open).sum()
    }

    /// Tickets promised to `places` open places: the measured mean per hold plus a margin of
    /// [`MARGIN_SD`] standard deviations of their sum — with the mean's own error, since it is
    /// measured from the holds so far — never more than `max-qty` each.
    fn promise(&self, places: u64, max_qty: u64) -> u64 {
        let max = max_qty.max(1);
        let (holds, units) = self.measured;
        if places == 0 {
            return 0;
        }
        if holds < MEASURED_HOLDS {
            return places.saturating_mul(max);
        }
        let mean = (units as f64 / holds as f64).clamp(1.0, max as f64);
        // A hold's tickets lie in 1..=max with this mean: their variance is at most
        // (mean − 1)(max − mean) (Bhatia–Davis).
        let sd = ((mean - 1.0) * (max as f64 - mean)).max(0.0).sqrt();
        // The sum of n places' tickets spreads by sd·√n around n × the true mean, and n × the
        // measured mean is off the true one by about n·sd/√holds: the two add in variance. With
        // hundreds of places open the second is the larger (scenic, 2026-12-05: 604 places promised
        // 1.373 a hold measured over 1,554 holds; the next 387 held 1.439 each, and three fans of
        // the step met "sold out").
        let n = places as f64;
        let p = n * mean + MARGIN_SD * sd * (n + n * n / holds as f64).sqrt();
        (p.ceil() as u64).min(places.saturating_mul(max))
    }

    /// Tickets promised to the places released within the window and not settled yet.
    pub fn promised(&self, max_qty: u64) -> u64 {
        self.promise(self.open(), max_qty)
    }

    /// Records a step between ticks ([`super::Rooms::step_between`]) at `now_ms`: its places are
    /// promised; no place lapses here (pickups are counted at ticks: lapsed on a count up to a
    /// tick old, a place whose fan came since would lose its promise).
    pub fn push(&mut self, now_ms: u64, released: Released) {
        if released.places > 0 {
            let r = Released { in_line: released.in_line.min(released.places), ..released };
            self.window.push_back(Step { at: now_ms, r, ..Step::default() });
        }
    }

    /// [`Claims::cap`] as if the core's `holds` were noted at `tick_ms` (the last tick, whose
    /// pickup count the places' lapses go by), without noting them: a
    /// step between ticks ([`super::Rooms::step_between`]) counts the holds made since the last
    /// tick but leaves them to the next tick's [`Claims::note`], after the sweep has counted the
    /// pickups. Settled on pickup counts a tick old, holds of fans admitted since would settle
    /// places never picked up (a script's) instead of their own, and those fans' places would
    /// stand [`CLAIM_MS`] instead of the scripts' lapsing at their pickup window (the bots surge:
    /// its last 28 tickets held for 13 s by 18 places whose fans had all bought).
    pub fn cap_after(&self, tick_ms: u64, holds: Option<(u64, u64)>, available: u64, max_qty: u64) -> u64 {
        let mut c = self.clone();
        c.note(tick_ms, None, holds);
        c.cap(available, max_qty)
    }

    /// Places standing by ([`Step::standby`]).
    pub fn standby(&self) -> u64 {
        self.window.iter().map(|s| s.standby).sum()
    }

    /// Most places a step may release with `available` tickets left (`u64::MAX`: not known, no
    /// cap): as many as the tickets no one is promised serve, and one more while any ticket is
    /// unpromised (offered what is left). At the tail — every ticket left promised — the places not
    /// picked up past their standby time are not counted: as many fans behind them stand by.
    pub fn cap(&self, available: u64, max_qty: u64) -> u64 {
        if available == u64::MAX {
            return u64::MAX;
        }
        let open = self.open();
        match self.cap_of(open, available, max_qty) {
            0 => self.cap_of(open - self.standby().min(open), available, max_qty),
            n => n,
        }
    }

    /// [`Claims::cap`] with `open` places promised.
    fn cap_of(&self, open: u64, available: u64, max_qty: u64) -> u64 {
        if self.promise(open, max_qty) >= available {
            return 0;
        }
        // The promise grows with the places: the most `n` with promise(open + n) ≤ available.
        let (mut lo, mut hi) = (0u64, available);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.promise(open + mid, max_qty) <= available {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        // A remainder under a fan's promise: one fan more, offered what is left.
        if self.promise(open + lo, max_qty) < available { lo + 1 } else { lo }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of `n` places, none of them a lane place or a late proof (their range is not
    /// counted here: these tests ask no pickups).
    fn rel(n: u64) -> Option<Released> {
        (n > 0).then_some(Released { from: 0, to: n, places: n, in_line: n, pickup_ms: 0, standby_ms: 0 })
    }

    /// A step over places `from < place <= to`, `extra` of them lane places or late proofs.
    fn over(from: u64, to: u64, extra: u64) -> Option<Released> {
        Some(Released { from, to, places: to - from + extra, in_line: to - from, pickup_ms: 0, standby_ms: 0 })
    }

    /// The leader's sweep: counts the places of `picked` in each range asked.
    fn sweep(c: &mut Claims, serving: u64, picked: &[u64]) -> PickupAsk {
        sweep_at(c, serving, picked, 0)
    }

    /// [`sweep`] at `now_ms`.
    fn sweep_at(c: &mut Claims, serving: u64, picked: &[u64], now_ms: u64) -> PickupAsk {
        let ask = c.ask(serving);
        let counts: Vec<u64> = ask.ranges.iter().map(|&(f, t)| picked.iter().filter(|p| **p > f && **p <= t).count() as u64).collect();
        c.picked(&ask, Some(&counts), now_ms);
        ask
    }

    #[test]
    fn holds_between_ticks_free_places_and_wait_for_the_next_count_of_pickups() {
        // A step of four at 0 s whose fans never come (scripts refused at the door), one of six at
        // 1 s; the tick's sweep at 1 s saw nobody admitted yet.
        let steps = || {
            let mut c = Claims::default();
            c.note(0, None, Some((0, 0)));
            c.note(0, over(0, 4, 0), None);
            c.note(1000, over(4, 10, 0), None);
            sweep(&mut c, 10, &[]);
            c
        };
        let mut c = steps();
        // Between ticks the six of the second step are admitted and hold: the cap counts their
        // holds (4 places open at 2: 8 of 20, six fans more), the book does not settle them yet.
        assert_eq!(c.cap_after(1000, Some((6, 6)), 20, 2), 6);
        assert_eq!(c.open(), 10, "nothing noted");
        // A step between ticks adds its places and lapses nothing: past the first step's pickup
        // window its places wait for the next tick's count (a fan admitted since the last one
        // keeps its promise).
        let mut later = steps();
        later.push(PICKUP_MS + 100, Released { from: 10, to: 12, places: 2, in_line: 2, pickup_ms: 0, standby_ms: 0 });
        assert_eq!(later.open(), 12);
        later.note(PICKUP_MS + 100, None, None);
        assert_eq!(later.open(), 8, "the tick lapses the first step's four never admitted");
        // The next tick counts them admitted, then notes the holds: they settle their own places,
        // and the first step's four lapse at its pickup window.
        sweep(&mut c, 10, &[5, 6, 7, 8, 9, 10]);
        c.note(2000, None, Some((6, 6)));
        assert_eq!(c.open(), 4);
        c.note(PICKUP_MS, None, None);
        assert_eq!(c.open(), 0, "the four never admitted lapsed");
        // Noted on the old count, the holds would have settled the oldest places — the scripts'
        // four and two of the fans' — and four fans who bought would stand the claim window.
        let mut eager = steps();
        eager.note(1500, None, Some((6, 6)));
        sweep(&mut eager, 10, &[5, 6, 7, 8, 9, 10]);
        eager.note(1000 + PICKUP_MS, None, None);
        assert_eq!(eager.open(), 4);
        eager.note(1000 + CLAIM_MS, None, None);
        assert_eq!(eager.open(), 0);
    }

    #[test]
    fn places_never_picked_up_lapse_early_and_picked_up_ones_stand_their_window() {
        let mut c = Claims::default();
        c.note(0, None, Some((0, 0)));
        c.note(1000, over(0, 10, 0), None);
        // Four of the ten were admitted, and one of them held already.
        let ask = sweep(&mut c, 10, &[1, 2, 5, 9]);
        assert_eq!(ask, PickupAsk { ranges: vec![(0, 10)], forget_to: Some(0) });
        c.note(2000, over(10, 15, 0), Some((1, 1)));
        assert_eq!(c.open(), 14);
        sweep(&mut c, 15, &[1, 2, 5, 9, 11, 12, 13, 14, 15]);
        c.note(1000 + PICKUP_MS - 1, None, None);
        assert_eq!(c.open(), 14, "within the pickup window every place stands");
        c.note(1000 + PICKUP_MS, None, None);
        assert_eq!(c.open(), 8, "the first step's six never admitted lapse; its three admitted who did not hold stand");
        assert_eq!(c.ask(15), PickupAsk { ranges: vec![(10, 15)], forget_to: Some(10) }, "its pickups are no longer counted");
        // Five holds settle the oldest places picked up: the first step's three, two of the second's.
        c.note(1000 + PICKUP_MS, None, Some((6, 6)));
        assert_eq!(c.open(), 3);
        c.note(2000 + PICKUP_MS, None, None);
        assert_eq!(c.open(), 3, "nothing of the second step lapses: all five were picked up");
        c.note(2000 + CLAIM_MS, None, None);
        assert_eq!(c.open(), 0, "the second step's window ended");
        assert_eq!(c.ask(15), PickupAsk { ranges: vec![], forget_to: Some(15) });
    }

    /// The no-shows of an early step lapse at its own deadline, whatever later steps' fans do (a
    /// count of sessions, credited to the oldest places, moved them onto each new step and they
    /// held the last tickets 8 s after every step).
    #[test]
    fn a_later_step_picked_up_does_not_carry_an_earlier_steps_no_shows() {
        let mut c = Claims::default();
        c.note(0, None, Some((0, 0)));
        c.note(0, over(0, 10, 0), None);
        sweep(&mut c, 10, &[1, 2, 3, 4, 5, 6, 7, 8]);
        c.note(PICKUP_MS - 3000, over(10, 20, 0), None);
        sweep(&mut c, 20, &[1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]);
        // Everyone admitted held.
        c.note(PICKUP_MS - 2000, None, Some((18, 18)));
        assert_eq!(c.open(), 2, "the first step's two no-shows");
        c.note(PICKUP_MS, None, None);
        assert_eq!(c.open(), 0, "they lapse at the first step's deadline");
    }

    #[test]
    fn lane_places_and_late_proofs_stand_the_claim_window_and_unknown_counts_lapse_nothing_early() {
        let mut c = Claims::default();
        c.note(0, None, Some((0, 0)));
        // Five places in line, two more let in outside the range; nobody picked up in the range.
        c.note(0, over(0, 5, 2), None);
        sweep(&mut c, 5, &[]);
        c.note(PICKUP_MS, None, None);
        assert_eq!(c.open(), 2, "the five lapse; the two outside the range stand");
        c.note(CLAIM_MS, None, None);
        assert_eq!(c.open(), 0);
        // A store that counts nothing: the places stand their whole window.
        let mut c = Claims::default();
        c.note(0, over(0, 10, 0), None);
        let ask = c.ask(10);
        c.picked(&ask, None, 0);
        c.note(PICKUP_MS, None, None);
        assert_eq!(c.open(), 10, "not counted is not 'not picked up'");
    }

    #[test]
    fn each_released_place_is_promised_max_qty_until_holds_are_measured() {
        let mut c = Claims::default();
        c.note(0, rel(0), Some((0, 0)));
        assert_eq!(c.cap(100, 4), 25, "100 tickets, 4 a fan");
        c.note(1000, rel(10), Some((0, 0)));
        assert_eq!(c.promised(4), 40);
        assert_eq!(c.cap(100, 4), 15);
        assert_eq!(c.cap(40, 4), 0, "every ticket promised: nobody more");
        assert_eq!(c.cap(43, 4), 1, "three unpromised tickets: one fan more, offered what is left");
        // Unknown stock: no cap.
        assert_eq!(c.cap(u64::MAX, 4), u64::MAX);
    }

    #[test]
    fn a_hold_settles_a_whole_place_whatever_it_bought() {
        let mut c = Claims::default();
        c.note(0, rel(0), Some((0, 0)));
        c.note(1000, rel(10), Some((0, 0)));
        // Six fans held, one ticket each: six places settled, four open at 4.
        c.note(2000, rel(0), Some((6, 6)));
        assert_eq!(c.open(), 4);
        assert_eq!(c.promised(4), 16);
        assert_eq!(c.cap(94, 4), 20, "19 fans of 4 and one for the last 2");
        // The window passes: the four who did not hold lapse.
        c.note(1000 + CLAIM_MS, rel(0), Some((6, 6)));
        assert_eq!(c.open(), 0);
        assert_eq!(c.cap(94, 4), 24, "23 fans of 4 and one for the last 2");
    }

    #[test]
    fn holds_settle_the_oldest_places_first_and_extra_holds_are_not_carried() {
        let mut c = Claims::default();
        c.note(0, rel(0), Some((100, 150)));
        c.note(1000, rel(3), None);
        c.note(2000, rel(5), None);
        c.note(3000, rel(0), Some((104, 156)));
        assert_eq!(c.open(), 4, "3 of the first step and 1 of the second");
        c.note(2000 + CLAIM_MS - 1, rel(0), None);
        assert_eq!(c.open(), 4, "the second step's four are still open");
        // Late holds (their places lapsed) settle what is open, and no more.
        c.note(2000 + CLAIM_MS - 1, rel(0), Some((120, 180)));
        assert_eq!(c.open(), 0);
        c.note(2000 + CLAIM_MS, rel(2), None);
        assert_eq!(c.open(), 2, "nothing carried to places released later");
    }

    #[test]
    fn the_measured_mean_with_its_margin_replaces_max_qty() {
        let mut c = Claims::default();
        // 100 holds of 150 tickets: a mean of 1.5, max 2 → sd 0.5.
        c.note(0, rel(100), Some((100, 150)));
        assert_eq!(c.promised(2), 172, "100 × 1.5 + MARGIN_SD (3) × 0.5 × √(100 + 100²/100)");
        // Every hold took max-qty: no margin needed, the promise is max-qty.
        let mut all = Claims::default();
        all.note(0, rel(50), Some((40, 80)));
        assert_eq!(all.promised(2), 100);
        // The margin keeps a step's sum under the tickets: 1,000 left, mean 1.5, max 2.
        let mut c = Claims::default();
        c.note(0, rel(0), Some((100, 150)));
        let n = c.cap(1000, 2);
        assert!(c.promise(n - 1, 2) < 1000 && c.promise(n, 2) >= 1000, "n = {n}: the last one fits or is offered what is left");
        assert!((590..620).contains(&n), "{n} places for 1,000 tickets at 1.5 ± margin, measured over 100 holds");
        // Measured over 10,000 holds the mean's own error is small: the margin is the places' spread.
        let mut c = Claims::default();
        c.note(0, rel(0), Some((10_000, 15_000)));
        let n = c.cap(1000, 2);
        assert!(c.promise(n - 1, 2) < 1000 && c.promise(n, 2) >= 1000, "n = {n}");
        assert!((630..667).contains(&n), "{n} places for 1,000 tickets at 1.5 ± margin, measured over 10,000 holds");
    }

    /// The last tickets, fewer than `max-qty`, are released once their promises lapse: the sale sells
    /// out (it stalled with one ticket of 600 left and 1,549 fans queued when the cap rounded down).
    #[test]
    fn the_last_tickets_below_max_qty_are_released() {
        let mut c = Claims::default();
        c.note(0, rel(0), Some((599, 599)));
        assert_eq!(c.cap(1, 2), 1);
        c.note(1000, rel(1), Some((599, 599)));
        assert_eq!(c.cap(1, 2), 0, "promised to the fan just let in");
        c.note(1000 + CLAIM_MS, rel(0), Some((599, 599)));
        assert_eq!(c.cap(1, 2), 1, "its promise lapsed without a hold: the next fan");
        c.note(2000 + CLAIM_MS, rel(1), None);
        c.note(3000 + CLAIM_MS, rel(0), Some((600, 600)));
        assert_eq!(c.open(), 0, "that fan held: settled at once");
    }

    /// A book kept by an edge of another version reads (a rolling upgrade): fields it lacks take
    /// their defaults, fields it has that this version does not know are passed over.
    #[test]
    fn a_book_of_another_version_reads() {
        let old = r#"{"window":[{"at":1000,"r":{"from":0,"to":10,"places":10,"in_line":10},"settled":2,"picked":null,"lapsed":0,"checked":false}],"last_holds":2,"measured":[2,2]}"#;
        let c: Claims = serde_json::from_str(old).unwrap();
        assert_eq!((c.open(), c.to, c.lower_since), (8, 0, None));
        let newer = r#"{"window":[{"at":1000,"r":{"from":0,"to":10,"places":10},"settled":2,"shown":3}],"to":10,"passed":10,"claims_v":3}"#;
        let c: Claims = serde_json::from_str(newer).unwrap();
        assert_eq!((c.open(), c.to, c.window[0].r.in_line), (8, 10, 0));
        assert_eq!(serde_json::from_str::<Claims>("{}").unwrap().open(), 0);
    }

    /// A new leader's first readings of the core's holds can lag the count its predecessor kept in
    /// the book: a lower reading settles nothing and the next higher one settles only the holds
    /// after the book's (taking the lower one at once settled the same two holds twice: two fans
    /// too many let in). A count lower for [`HOLDS_RESET_MS`] started over.
    #[test]
    fn a_lagging_reading_of_holds_does_not_settle_the_same_holds_twice() {
        let mut c = Claims::default();
        c.note(0, None, Some((10, 10)));
        c.note(0, rel(10), None);
        let mut taken: Claims = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        taken.note(1000, None, Some((8, 8)));
        assert_eq!(taken.open(), 10, "a lagging reading settles nothing");
        taken.note(2000, None, Some((12, 12)));
        assert_eq!(taken.open(), 8, "two holds after the book's settle two places, not four");
        // A counter that stays lower started over: from there it counts.
        taken.note(3000, None, Some((1, 1)));
        taken.note(3000 + HOLDS_RESET_MS - 1, None, Some((1, 1)));
        assert_eq!((taken.open(), taken.last_holds), (8, Some(12)), "still taken for a lag");
        taken.note(3000 + HOLDS_RESET_MS, None, Some((1, 1)));
        assert_eq!((taken.open(), taken.last_holds), (8, Some(1)), "started over: nothing settled");
        taken.note(3000 + HOLDS_RESET_MS, None, Some((4, 4)));
        assert_eq!(taken.open(), 5);
        // A lower reading between higher ones is forgotten.
        taken.note(9000, None, Some((3, 3)));
        taken.note(9500, None, Some((5, 5)));
        taken.note(9000 + HOLDS_RESET_MS, None, Some((4, 4)));
        assert_eq!((taken.open(), taken.last_holds), (4, Some(5)), "the lag timer starts again");
    }

    /// The book an edge taking the lease goes on from, and the places let in after its last step.
    #[test]
    fn a_takeover_goes_on_from_the_newer_book_and_promises_steps_never_kept() {
        let book = |to: u64, places: u64| {
            let mut c = Claims::default();
            c.note(0, over(to - places, to, 0), Some((0, 0)));
            c.served(to, to);
            c
        };
        assert_eq!(Claims::newer(Some(book(16, 6)), Some(book(10, 10))).to, 16, "a successor's newer book");
        assert_eq!(Claims::newer(Some(book(10, 10)), Some(book(14, 4))).to, 14, "this edge's own steps, never kept");
        assert_eq!(Claims::newer(Some(book(10, 3)), Some(book(10, 10))).open(), 3, "as far: the store's (later settles)");
        assert_eq!(Claims::newer(None, Some(book(10, 10))).open(), 10);
        assert_eq!(Claims::newer(None, None).open(), 0);
        // The old leader let 5 more in and died before keeping its book: promised at the takeover.
        let mut c = book(10, 10);
        assert_eq!(c.unkept(1000, 15, 15), 5);
        assert_eq!((c.open(), c.to), (15, 15));
        assert_eq!(c.ask(15).ranges, vec![(0, 10), (10, 15)], "their pickups are counted");
        assert_eq!(c.unkept(2000, 15, 15), 0, "once");
        // A spread room: places passed, not numbers.
        let mut c = book(10, 10);
        assert_eq!(c.unkept(1000, 5_000_000, 13), 3);
        // A book that recorded no step (older edge, or nothing released) promises nothing more.
        let mut c = Claims::default();
        assert_eq!(c.unkept(1000, 15, 15), 0);
        assert_eq!(c.open(), 0);
    }

    /// At the tail of a sale (every ticket left promised) a place whose fan was not admitted past
    /// its step's standby time does not keep its tickets from everyone until its pickup window
    /// ends: one fan behind it stands by for them, once. Its fan, coming after all, is promised
    /// again (two fans for one ticket: the first to hold has it, the other is told "sold out" —
    /// for now, while unpaid holds may come back). Before the tail, and for places told to ask
    /// less often, nothing stands by.
    #[test]
    fn at_the_tail_a_place_not_picked_up_past_its_standby_time_lets_one_fan_stand_by() {
        let short = |from: u64, to: u64| Some(Released { from, to, places: to - from, in_line: to - from, pickup_ms: 3500, standby_ms: 1700 });
        // A hundred holds of one ticket each: a place is promised one ticket.
        let tick = |c: &mut Claims, serving: u64, picked: &[u64], now: u64| {
            sweep_at(c, serving, picked, now);
            c.note(now, None, Some((100, 100)));
        };
        let mut c = Claims::default();
        c.note(0, None, Some((100, 100)));
        // One ticket left, promised to place 1.
        c.note(0, short(0, 1), None);
        assert_eq!(c.cap(1, 2), 0);
        tick(&mut c, 1, &[], 1000);
        assert_eq!((c.standby(), c.cap(1, 2)), (0, 0), "counted before its standby time (1.7 s)");
        tick(&mut c, 1, &[], 2000);
        assert_eq!((c.standby(), c.cap(1, 2)), (1, 1), "past it: one fan stands by");
        c.note(2000, short(1, 2), None);
        assert_eq!((c.open(), c.cap(1, 2)), (2, 0), "the fan standing by is promised: nobody more");
        tick(&mut c, 2, &[2], 3000);
        assert_eq!((c.standby(), c.cap(1, 2)), (1, 0));
        // Place 1's fan comes after all (before its window ends at 3.5 s): promised again.
        tick(&mut c, 2, &[1, 2], 3400);
        assert_eq!((c.standby(), c.promised(2), c.cap(1, 2)), (0, 2, 0));
        // Place 2's fan holds the ticket: nothing is left; the one promised to place 1 is not.
        c.note(3600, None, Some((101, 101)));
        assert_eq!((c.open(), c.cap(0, 2)), (1, 0));

        // A place that never comes lapses at its window as before, and the fan who stood by stays
        // promised.
        let mut c = Claims::default();
        c.note(0, None, Some((100, 100)));
        c.note(0, short(0, 1), None);
        tick(&mut c, 1, &[], 2000);
        c.note(2000, short(1, 2), None);
        tick(&mut c, 2, &[], 4000);
        assert_eq!((c.open(), c.standby(), c.cap(1, 2)), (1, 1, 1), "place 1 lapsed at 3.5 s; place 2 is past its own standby time (3.7 s)");

        // Before the tail, places past their standby time are promised: ten tickets, two places
        // open and never picked up: eight fans more, not ten.
        let mut c = Claims::default();
        c.note(0, None, Some((100, 100)));
        c.note(0, short(0, 2), None);
        tick(&mut c, 2, &[], 2000);
        assert_eq!((c.standby(), c.cap(10, 2)), (2, 8));
        assert_eq!(c.cap(2, 2), 2, "at the tail they stand by");
        // Places told to ask every 5 s have no standby time: they stand their window.
        let mut c = Claims::default();
        c.note(0, None, Some((100, 100)));
        c.note(0, Some(Released { from: 0, to: 1, places: 1, in_line: 1, pickup_ms: 8000, standby_ms: 0 }), None);
        tick(&mut c, 1, &[], 7000);
        assert_eq!((c.standby(), c.cap(1, 2)), (0, 0));
        tick(&mut c, 1, &[], 8000);
        assert_eq!(c.cap(1, 2), 1, "lapsed at its window");
    }

    /// Each step lapses its never-picked-up places at its own window.
    #[test]
    fn places_lapse_at_their_steps_own_pickup_window() {
        let mut c = Claims::default();
        c.note(0, None, Some((0, 0)));
        c.note(0, Some(Released { from: 0, to: 10, places: 10, in_line: 10, pickup_ms: 0, standby_ms: 0 }), None);
        c.note(1000, Some(Released { from: 10, to: 20, places: 10, in_line: 10, pickup_ms: 3700, standby_ms: 0 }), None);
        sweep(&mut c, 20, &[1, 11]);
        c.note(4699, None, None);
        assert_eq!(c.open(), 20);
        c.note(4700, None, None);
        assert_eq!(c.open(), 11, "the second step's 9 no-shows lapse at 3.7 s, before the first's");
        c.note(PICKUP_MS, None, None);
        assert_eq!(c.open(), 2);
        assert_eq!(c.ask(20).ranges, Vec::<(u64, u64)>::new());
    }

    #[test]
    fn without_hold_counts_places_lapse_and_a_reset_counter_settles_nothing() {
        // Before any stock answer nothing is settled; a core without `holds` reads as 0 forever.
        let mut fresh = Claims::default();
        fresh.note(0, rel(3), None);
        assert_eq!(fresh.promised(2), 6);
        fresh.note(1000, rel(0), Some((0, 0)));
        assert_eq!(fresh.open(), 3);
        assert_eq!(fresh.cap(20, 4), 2, "20 tickets left, 3 fans promised 4 each: two more");
        fresh.note(CLAIM_MS, rel(0), Some((0, 0)));
        assert_eq!(fresh.open(), 0);
        // The event was made again: its counter starts at 0 and settles nothing.
        let mut c = Claims::default();
        c.note(0, rel(0), Some((50, 75)));
        c.note(1000, rel(5), Some((2, 2)));
        assert_eq!(c.open(), 5);
        c.note(1000 + HOLDS_RESET_MS, rel(0), Some((2, 2)));
        c.note(2000 + HOLDS_RESET_MS, rel(0), Some((3, 3)));
        assert_eq!(c.open(), 4, "counted from where it started over");
    }
}
