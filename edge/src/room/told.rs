//! What the room tells its waiting places, and what the release learns from it (issue #39): the
//! poll intervals a status answer tells ([`super::Rooms::status`]), and each tick's record of
//! them ([`Told`]) that bounds how long a release step's places stand before their fans are
//! admitted ([`super::claims`]'s pickup window).

use std::collections::VecDeque;

use super::claims::PICKUP_MS;

/// The slowest poll told to a place the tickets could reach (and to the last thousand): its turn
/// may come at any step, and its promise lapses if its fan is not admitted within
/// [`PICKUP_MS`]. Tried at 3 s (with a 6-s pickup window): the bots surge was not clearly
/// faster (14–19 s in three runs, against 15–19 s), and each fan in reach of a big stock (about
/// 14,000 in StarArena) polls 5/3 as often; one of StarArena's two runs went over its P99 target
/// on the bench's two cores and sold in 50 s (26 s in the other).
pub const NEAR_POLL_MS: u64 = 5000;

/// The fewest seconds between two refreshes of the page without JavaScript: near the front the
/// status asks for a poll every second or two, and the release's promise of the place lapses if
/// the fan is not admitted within a few seconds of its turn ([`Told`]).
pub const NOSCRIPT_MIN_REFRESH_S: u64 = 2;

/// The poll interval told to a place before the open, `until_open_s` seconds away (before jitter).
pub fn not_open_poll_ms(until_open_s: u64) -> u64 {
    (until_open_s * 1000 / 4).clamp(1000, 30_000)
}

/// The poll interval told to a waiting place `eta` seconds from its turn (before jitter): about
/// ten polls on the way, never faster than 1/s, nor slower than [`NEAR_POLL_MS`] when `near` (the
/// last thousand places, and every place the tickets could reach) or 30 s.
pub fn eta_poll_ms(eta: f64, near: bool) -> u64 {
    ((eta * 100.0) as u64).clamp(1000, if near { NEAR_POLL_MS } else { 30_000 })
}

/// The poll interval told to a waiting place while the room has no release rate (before jitter):
/// 2 s to the places the first steps could reach (`soon`), 10 s to the others.
pub fn no_rate_poll_ms(soon: bool) -> u64 {
    if soon { 2000 } else { 10_000 }
}

/// The poll interval told to a place `ahead` places from the front while every ticket left is
/// promised and it is in the stock's reach or the last thousand (before jitter): promises settle
/// within seconds and the release lets the next fans in between ticks
/// ([`super::Rooms::step_between`]), so the next hundred ask every second.
pub fn spoken_for_poll_ms(ahead: u64) -> u64 {
    if ahead < SPOKEN_FOR_NEXT { 1000 } else { NEAR_POLL_MS }
}

/// The places behind "sold out for now" told to ask every second ([`spoken_for_poll_ms`]).
pub const SPOKEN_FOR_NEXT: u64 = 100;

/// The most jitter (`super::jitter`) stretches a poll interval by.
pub const JITTER_MAX: f64 = 1.2;

/// How far back [`Told`] looks: a place told more than 10 s (× [`JITTER_MAX`]) before it
/// is not bounded by it (such places were far from the front: beyond the stock's reach, or more
/// than a thousand places back, a step [`TOLD_MS`] later reaches them only when stock returns).
pub const TOLD_MS: u64 = 12_000;

/// A step's pickup window beyond its fans' slowest poll: a follower edge sees the step at its next
/// tick (1 s, [`FOLLOWER_TICK_MS`]), the fan's poll and the session it opens (0.5 s), and the
/// leader counts pickups at its next tick (1 s).
pub const PICKUP_SLACK_MS: u64 = 2_500;

/// The part of [`PICKUP_SLACK_MS`] for a follower edge's tick: a room whose state is this
/// process's own (embedded) has no follower — every status answer sees the step at once — and
/// its windows are a second shorter (the bots surge's scripts' places from the open, 4.9 s).
pub const FOLLOWER_TICK_MS: u64 = 1_000;

/// How far before the last record a record may be stamped and still be taken as out of order, not
/// as a clock gone back ([`Told::record`]): a tick stamps its record with the time it began, and
/// reads the store (its sweep, its lease, the stock) before it records — a step between ticks
/// ([`super::Rooms::step_between`], every 250 ms) may record meanwhile. Taken for a clock gone
/// back, every such tick forgot what was told: each step's pickup window was then [`PICKUP_MS`]
/// for the next 12 s (the bots surge, 2026-12-06: 8 s for every step once steps between ticks
/// began, the last tickets of a run held 4–5 s past a 3.5-s window).
pub const OUT_OF_ORDER_MS: u64 = 2_000;

/// How soon after a room's birth its first tick records what it tells (the release loop's first
/// tick comes within a second of the edge's start; its state's birth is in whole seconds).
const BORN_SLACK_MS: u64 = 3_000;

/// What the room told its waiting places lately (recorded every tick on every edge: the leader's
/// successor has its own): a step's pickup window is its slowest fan's last poll interval, not
/// the [`PICKUP_MS`] of a place told [`NEAR_POLL_MS`]. A sale's first steps pass places
/// told to ask every second or two (before the open, and at it), so a script that got a place and
/// never comes holds its tickets about 4 s, not 8 (the bots surge: 19 such places from the first
/// step held its last tickets until 11–13 s).
#[derive(Debug, Default)]
pub struct Told {
    ticks: VecDeque<ToldTick>,
}

/// One tick's telling: from `at` until the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToldTick {
    pub at: u64,
    /// `serving` as the tick found it (a follower's answers may lag it by a tick: the entry before
    /// covers that).
    pub serving: u64,
    /// How many places past `serving` the tickets left and those in unpaid holds reach at the tick
    /// (their status is told the near polls, `super::within_reach`); 0: not known. The reach only
    /// shrinks as tickets are paid for, so a telling is judged by the smaller of its own and the
    /// next record's.
    pub reach: u64,
    pub telling: Telling,
}

/// What the room told a waiting place (the status answer, [`super::Rooms::status`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Telling {
    /// Before the open, at `opens_at_ms` (Unix ms).
    NotOpen { opens_at_ms: u64 },
    /// Places move at `per_s` (the rate their ETA is made at).
    Moving { per_s: f64 },
    /// No rate yet (the sale opened since the last tick).
    NoRate,
    /// Every ticket left promised: "sold out for now" ([`super::Room::spoken_for`]).
    SpokenFor,
    /// Anything else (paused, sold out, a room at its cap on sessions, a room not numbered in
    /// line): not bounded. A sold-out or operator spell begun and over between two ticks is
    /// recorded from when it began ([`super::Room::note_unbounded`]).
    Unbounded,
}

impl Told {
    /// Records the telling from `tick.at` on, and forgets what no window can need (a clock that
    /// went back by [`OUT_OF_ORDER_MS`] or more forgets everything). A record stamped before the
    /// last one, by less, is a tick's (stamped when it began: a step between ticks recorded a
    /// telling while the tick read the store) and follows it, a millisecond after — it is the
    /// newer, and the step's telling is kept for the windows it may bound.
    pub fn record(&mut self, mut tick: ToldTick) {
        if let Some(last) = self.ticks.back().map(|t| t.at) {
            if tick.at + OUT_OF_ORDER_MS <= last {
                self.ticks.clear();
            } else if tick.at <= last {
                tick.at = last + 1;
            }
        }
        self.ticks.push_back(tick);
        while self.ticks.get(1).is_some_and(|t| t.at + TOLD_MS <= tick.at) {
            self.ticks.pop_front();
        }
    }

    /// [`Told::record`], after the spell that began at `spell` (Unix ms,
    /// [`super::Room::unbounded_at_ms`]) when it began since the last telling recorded and before
    /// this one: a sold-out or operator spell told between two records reaches the next steps'
    /// windows.
    pub fn record_after(&mut self, spell: u64, tick: ToldTick) {
        if spell > self.ticks.back().map_or(0, |t| t.at) && spell < tick.at {
            self.record(ToldTick { at: spell, telling: Telling::Unbounded, ..tick });
        }
        self.record(tick);
    }

    /// The pickup window of a step at `now_ms` whose farthest place is `to` ([`Told::pickup`]).
    pub fn pickup_ms(&self, to: u64, now_ms: u64, born_ms: u64) -> u64 {
        self.pickup(to, now_ms, born_ms).window_ms
    }

    /// The pickup window of a step at `now_ms` whose farthest place is `to`: the longest interval
    /// the room may have told that place at a poll whose next one comes after the step, stretched
    /// by the jitter, plus [`PICKUP_SLACK_MS`]; [`PICKUP_MS`] at most, and whenever what was told
    /// is not known for the last [`TOLD_MS`] — unless it is known since `born_ms`, when the room's
    /// first place was given (an embedded room: its places are this process's, and no follower
    /// answers its fans, [`FOLLOWER_TICK_MS`]; 0: a shared room). With it, the step's standby
    /// time ([`Pickup::standby_ms`]).
    pub fn pickup(&self, to: u64, now_ms: u64, born_ms: u64) -> Pickup {
        let unbounded = Pickup { window_ms: PICKUP_MS, standby_ms: 0 };
        let Some(first) = self.ticks.front() else { return unbounded };
        let since_birth = born_ms > 0 && first.at <= born_ms + BORN_SLACK_MS;
        if first.at + TOLD_MS > now_ms && !since_birth {
            return unbounded;
        }
        // The slowest poll told, stretched by the jitter: as a script polls, and as the page
        // without JavaScript refreshes.
        let (mut scripted, mut slowest) = (0u64, 0u64);
        for (i, t) in self.ticks.iter().enumerate() {
            let end = self.ticks.get(i + 1).map_or(now_ms, |n| n.at);
            let ahead = to.saturating_sub(t.serving + 1);
            // Near: the last thousand, and the places the stock reaches.
            let reach = self.ticks.get(i + 1).map_or(t.reach, |n| n.reach.min(t.reach));
            let near = ahead < 1000 || ahead < reach;
            let told = match t.telling {
                // Polls after the open and before the tick that sees it are told as with no rate.
                // The status counts whole seconds to the open from its own second.
                Telling::NotOpen { opens_at_ms } if end > opens_at_ms => {
                    not_open_poll_ms((opens_at_ms / 1000).saturating_sub(t.at / 1000)).max(no_rate_poll_ms(near))
                }
                Telling::NotOpen { opens_at_ms } => not_open_poll_ms((opens_at_ms / 1000).saturating_sub(t.at / 1000)),
                Telling::Moving { per_s } if per_s > 0.0 => eta_poll_ms((ahead + 1) as f64 / per_s, near),
                Telling::Moving { .. } | Telling::NoRate => no_rate_poll_ms(near),
                Telling::SpokenFor if near => spoken_for_poll_ms(ahead),
                Telling::SpokenFor | Telling::Unbounded => return unbounded,
            };
            let jittered = (told as f64 * JITTER_MAX) as u64;
            // A page without JavaScript refreshes at whole seconds, at least every
            // [`NOSCRIPT_MIN_REFRESH_S`].
            let stretched = jittered.max(NOSCRIPT_MIN_REFRESH_S * 1000);
            if end + stretched > now_ms {
                slowest = slowest.max(stretched);
                scripted = scripted.max(jittered);
            }
        }
        let follower = if born_ms > 0 { 0 } else { FOLLOWER_TICK_MS };
        let window_ms = (slowest + PICKUP_SLACK_MS - FOLLOWER_TICK_MS + follower).min(PICKUP_MS);
        let standby = scripted + STANDBY_SLACK_MS + follower;
        Pickup { window_ms, standby_ms: if standby < window_ms { standby } else { 0 } }
    }
}

/// A release step's pickup window and standby time ([`Told::pickup`], [`super::claims`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pickup {
    /// How long its places stand before their fans are admitted.
    pub window_ms: u64,
    /// How long after the step a place whose fan was not admitted stands before, at the tail of a
    /// sale, a place behind it stands by for its tickets ([`super::claims`]): its fan's slowest
    /// poll as the page's script makes it (the page without JavaScript, refreshing every 2 s at
    /// least, is not waited for), [`STANDBY_SLACK_MS`] and a follower edge's tick — the window
    /// less what the leader's tick adds (the standby is judged on a count made past it) and the
    /// page without JavaScript; 0 when that is no sooner than the window (not bounded).
    pub standby_ms: u64,
}

/// A place's standby time beyond its fan's slowest scripted poll: the session the poll opens and
/// the leader's count at its next tick, which comes at whole seconds after the step (a step at a
/// tick is counted a second later, one between ticks at the first tick after this).
pub const STANDBY_SLACK_MS: u64 = 500;

#[cfg(test)]
mod tests {
    use super::*;

    /// A step's pickup window is its slowest place's last poll interval (× 1.2 jitter, 2 s at least:
    /// the page without JavaScript) plus the slack, at most [`PICKUP_MS`]; unknown tellings give
    /// [`PICKUP_MS`].
    #[test]
    fn a_steps_pickup_window_follows_what_its_places_were_told() {
        let tick = |at: u64, serving: u64, telling: Telling| ToldTick { at, serving, telling, reach: 0 };
        let moving = |per_s| Telling::Moving { per_s };
        let mut t = Told::default();
        assert_eq!(t.pickup_ms(10, 0, 0), PICKUP_MS, "nothing known");
        for k in 0..5 {
            t.record(tick(100_000 + k * 1000, 0, moving(100.0)));
        }
        assert_eq!(t.pickup_ms(50, 104_500, 0), PICKUP_MS, "5 s known of a shared room: not enough");
        assert_eq!(t.pickup_ms(50, 104_500, 99_000), 2000 + PICKUP_SLACK_MS - FOLLOWER_TICK_MS, "known since the room's birth, which has no follower");
        assert_eq!(t.pickup(50, 104_500, 99_000).standby_ms, 1200 + STANDBY_SLACK_MS, "no follower's tick either");
        assert_eq!(t.pickup(50, 104_500, 0).standby_ms, 0, "not bounded");
        assert_eq!(t.pickup_ms(50, 104_500, 90_000), PICKUP_MS, "born long before what is known");
        for k in 5..=13 {
            t.record(tick(100_000 + k * 1000, 0, moving(100.0)));
        }
        // At 100/s a place is told a tenth of its ETA, at least 1 s: 50 ahead every second, 2,000
        // ahead every 2 s, 10,000 ahead every 10 s.
        assert_eq!(t.pickup_ms(50, 113_000, 0), 2000 + PICKUP_SLACK_MS);
        assert_eq!(t.pickup_ms(2000, 113_000, 0), 2400 + PICKUP_SLACK_MS);
        assert_eq!(t.pickup_ms(10_000, 113_000, 0), PICKUP_MS);
        // The standby time: the slowest poll a page's script makes (1.2 s, 2.4 s), the session and
        // its count, a follower's tick; none where the window is not bounded.
        assert_eq!(t.pickup(50, 113_000, 0), Pickup { window_ms: 4500, standby_ms: 1200 + STANDBY_SLACK_MS + FOLLOWER_TICK_MS });
        assert_eq!(t.pickup(2000, 113_000, 0), Pickup { window_ms: 4900, standby_ms: 2400 + STANDBY_SLACK_MS + FOLLOWER_TICK_MS });
        assert_eq!(t.pickup(10_000, 113_000, 0), Pickup { window_ms: PICKUP_MS, standby_ms: 0 });
        // The rate fell to 10/s a tick ago: 400 ahead were told 4 s since.
        t.record(tick(114_000, 0, moving(10.0)));
        assert_eq!(t.pickup_ms(400, 114_000, 0), 4800 + PICKUP_SLACK_MS);
        // ... and came back: that telling (4.8 s at most) cannot reach a step 5 s after it ended.
        for k in 15..=19 {
            t.record(tick(100_000 + k * 1000, 0, moving(100.0)));
        }
        assert_eq!(t.pickup_ms(400, 119_000, 0), 4800 + PICKUP_SLACK_MS, "4 s after it ended: it may");
        t.record(tick(120_000, 0, moving(100.0)));
        assert_eq!(t.pickup_ms(400, 120_000, 0), 2000 + PICKUP_SLACK_MS, "5 s after: it cannot");
        // Every ticket promised: the next hundred ask every second (the page without JavaScript
        // every 2 s), the others every 5 s.
        t.record(tick(121_000, 0, Telling::SpokenFor));
        assert_eq!(t.pickup_ms(50, 121_000, 0), 2000 + PICKUP_SLACK_MS);
        assert_eq!(t.pickup(50, 121_000, 0).standby_ms, 1200 + STANDBY_SLACK_MS + FOLLOWER_TICK_MS);
        assert_eq!(t.pickup_ms(500, 121_000, 0), PICKUP_MS);
        assert_eq!(t.pickup(500, 121_000, 0).standby_ms, 6000 + STANDBY_SLACK_MS + FOLLOWER_TICK_MS, "told 5 s");
        // Paused (told 4 s), sold out, a spread room: not bounded (anywhere in the last 12 s).
        t.record(tick(122_000, 0, Telling::Unbounded));
        assert_eq!(t.pickup_ms(50, 122_000, 0), PICKUP_MS);
        // A clock that went back forgets what it knew.
        t.record(tick(50_000, 0, moving(100.0)));
        assert_eq!(t.pickup_ms(50, 50_000, 0), PICKUP_MS);
    }

    /// Places more than a thousand back that the stock reaches were told the near polls (the
    /// status's `within_reach`): at a sale's open, 2 s rather than 10 s — the windows of a sale that
    /// sells out in its first 12 s are bounded by it. The reach is judged by the smaller of a
    /// record's and the next one's (it shrinks as tickets are paid for).
    #[test]
    fn places_the_stock_reaches_are_near_beyond_the_last_thousand() {
        let open = 120_000;
        let record = |reach: u64, reach_after: u64| {
            let mut t = Told::default();
            for at in (100_000..open).step_by(1000) {
                t.record(ToldTick { at, serving: 0, telling: Telling::NotOpen { opens_at_ms: open + 500 }, reach });
            }
            t.record(ToldTick { at: open + 1000, serving: 0, telling: Telling::Moving { per_s: 100.0 }, reach: reach_after });
            t
        };
        // 1,500 places back when the sale opened, 2,000 tickets: told 2 s after the open.
        let t = record(2000, 1900);
        assert_eq!(t.pickup(1500, open + 1500, 0), Pickup { window_ms: 2400 + PICKUP_SLACK_MS, standby_ms: 2400 + STANDBY_SLACK_MS + FOLLOWER_TICK_MS });
        // Beyond the reach, or with the stock not known: 10 s, not bounded.
        assert_eq!(t.pickup(2500, open + 1500, 0), Pickup { window_ms: PICKUP_MS, standby_ms: 0 });
        assert_eq!(record(0, 0).pickup_ms(1500, open + 1500, 0), PICKUP_MS);
        // The reach at the next record is smaller: it judges the telling.
        assert_eq!(record(2000, 1200).pickup_ms(1500, open + 1500, 0), PICKUP_MS);
    }

    /// A tick that read the store while a step between ticks recorded a telling records after it
    /// (stamped when it began, before that step): nothing is forgotten, both tellings bound the
    /// windows. A clock gone back 2 s or more forgets.
    #[test]
    fn a_tick_stamped_before_a_step_between_ticks_forgets_nothing() {
        let tick = |at: u64, telling: Telling| ToldTick { at, serving: 0, telling, reach: 0 };
        let mut t = Told::default();
        for k in 0..13 {
            t.record(tick(100_000 + k * 1000, Telling::Moving { per_s: 100.0 }));
        }
        // The tick of 113 s began at 113.0 s; a step between ticks recorded "sold out for now" at
        // 113.1 s; the tick records at 113.0 s (what it tells now: moving again).
        t.record(tick(113_100, Telling::SpokenFor));
        t.record(tick(113_000, Telling::Moving { per_s: 100.0 }));
        assert_eq!(t.pickup(50, 113_200, 0), Pickup { window_ms: 2000 + PICKUP_SLACK_MS, standby_ms: 1200 + STANDBY_SLACK_MS + FOLLOWER_TICK_MS });
        // Told 5 s beyond the next hundred while spoken for: the step's telling is kept.
        assert_eq!(t.pickup_ms(500, 113_200, 0), PICKUP_MS);
        t.record(tick(111_100, Telling::Moving { per_s: 100.0 }));
        assert_eq!(t.pickup_ms(50, 111_200, 0), PICKUP_MS, "a clock 2 s back forgets");
    }

    /// A release step between ticks records its telling; a spell between the two records is
    /// recorded before the second, and one that began before the last record is not (recording it
    /// out of order would read as a clock gone back and forget everything).
    #[test]
    fn a_spell_is_recorded_in_order_between_any_two_records() {
        let tick = |at: u64, telling: Telling| ToldTick { at, serving: 0, telling, reach: 0 };
        let mut t = Told::default();
        for k in 0..13 {
            t.record(tick(100_000 + k * 1000, Telling::Moving { per_s: 100.0 }));
        }
        // A step between ticks (every ticket promised again) at 112.5 s, then a pause told from
        // 112.7 s: the tick at 113 s records the spell first.
        t.record_after(0, tick(112_500, Telling::SpokenFor));
        t.record_after(112_700, tick(113_000, Telling::Moving { per_s: 100.0 }));
        assert_eq!(t.pickup_ms(50, 113_000, 0), PICKUP_MS, "the pause's polls are not bounded");
        // A spell stamped before the last record is that record's business: nothing is forgotten.
        let mut u = Told::default();
        for k in 0..13 {
            u.record(tick(100_000 + k * 1000, Telling::Moving { per_s: 100.0 }));
        }
        u.record_after(0, tick(112_500, Telling::SpokenFor));
        u.record_after(112_400, tick(113_000, Telling::Moving { per_s: 100.0 }));
        assert_eq!(u.pickup_ms(50, 113_000, 0), 2000 + PICKUP_SLACK_MS, "the record stands (12 s of it known)");
    }

    /// A sale's first step: places told before the open (a quarter of the time left, 1 s near it)
    /// and, between the open and the tick that sees it, as with no rate (2 s).
    #[test]
    fn the_first_steps_of_a_sale_wait_for_the_polls_of_the_open() {
        let mut t = Told::default();
        let open = 120_000;
        for at in (100_000..open).step_by(1000) {
            t.record(ToldTick { at, serving: 0, telling: Telling::NotOpen { opens_at_ms: open + 500 }, reach: 0 });
        }
        t.record(ToldTick { at: open + 1000, serving: 0, telling: Telling::Moving { per_s: 100.0 }, reach: 0 });
        // The tick at open − 1 s (told 1 s) spans the open: 2 s.
        assert_eq!(t.pickup_ms(100, open + 1000, 0), 2400 + PICKUP_SLACK_MS);
        for k in 2..=4 {
            t.record(ToldTick { at: open + k * 1000, serving: 100 * (k - 1), telling: Telling::Moving { per_s: 100.0 }, reach: 0 });
        }
        assert_eq!(t.pickup_ms(400, open + 4000, 0), 2000 + PICKUP_SLACK_MS, "the open's 2-s polls are behind");
        // Ten minutes before an open places are told 30 s: a step then is not bounded.
        let mut far = Told::default();
        for at in (0..20_000).step_by(1000) {
            far.record(ToldTick { at, serving: 0, telling: Telling::NotOpen { opens_at_ms: 600_000 }, reach: 0 });
        }
        assert_eq!(far.pickup_ms(10, 20_000, 0), PICKUP_MS);
    }
}
