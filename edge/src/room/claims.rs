//! Admission is a promise (issue #39, DESIGN §7c): the tickets already promised to fans the
//! release let in are counted before more fans are let in.
//!
//! A place the release passes is a claim on the stock: its fan will poll, be admitted and — most
//! of the time — hold some tickets within its token's lifetime. The core's stock answer (read once
//! a second by every edge) says how many tickets are left (`available`) and how many were taken
//! (`held + sold`); the leader, which moves `serving`, remembers what each of its recent steps
//! released. From the two:
//!
//! - **tickets per released place** `q`: tickets taken over places released, over the places
//!   whose claim window has closed (so their fans had their chance to buy); `max-qty` until 20 such
//!   places were released. It already holds the share of released fans who never buy (the
//!   overbooking discount airlines use), so the tail of a sale does not wait for every unused
//!   token to expire;
//! - **promised** tickets: the places released within the last claim window (the token's
//!   lifetime plus the time a fan takes to poll its turn) times `q`, less the tickets taken in that
//!   window (the claims already turned into holds);
//! - **the cap** of a step: as many places as the tickets left, less those promised, can serve at
//!   `q` each.
//!
//! A claim ends when its fan holds (its tickets leave `available` and count as taken), or when the
//! window passes it (its token expired unused, or its fan bought less than `q`): then the next fans
//! are let in. While the stock left is all promised, the room says "sold out for now" and the
//! queue keeps its places ([`super::Room::spoken_for`]).
//!
//! What it costs: `q` is an average. When the fans released together buy more than the average,
//! the last of them meet "sold out" at the hold (bench/RESULTS.md reports the share,
//! `admitted_sold_out_share`); when they buy less, the next fans wait up to one claim window
//! longer than they had to. On a failover the new leader starts with no history: for one window
//! it counts nothing as promised (the cap is the stock left, as before this module).

use std::collections::VecDeque;

/// Released places before `q` is measured rather than assumed (`max-qty`).
const SETTLED_MIN: u64 = 20;
/// The least `q` may be: a burst of fans who buy nothing does not open the doors wide.
const Q_MIN: f64 = 0.1;

/// What a room's leader remembers of its recent steps (kept in [`super::ReleaseBook`]).
#[derive(Debug, Default, Clone)]
pub struct Claims {
    /// The steps still inside the claim window: (when, places released, tickets taken since the
    /// step before).
    window: VecDeque<(u64, u64, u64)>,
    /// Places released and tickets taken whose window has closed, since the room began.
    settled: (u64, u64),
    /// `held + sold` at the last stock answer seen (`None`: none yet).
    last_taken: Option<u64>,
}

impl Claims {
    /// Records a step at `now_ms`: `released` places, and `taken` = the core's `held + sold` now
    /// (`None`: not known yet). Steps older than `window_ms` are settled.
    pub fn note(&mut self, now_ms: u64, released: u64, taken: Option<u64>, window_ms: u64) {
        // Tickets that came back (an order closed) are not negative takes: `available` shows them.
        let delta = match (self.last_taken, taken) {
            (Some(before), Some(now)) => now.saturating_sub(before),
            _ => 0,
        };
        if taken.is_some() {
            self.last_taken = taken;
        }
        if released > 0 || delta > 0 {
            self.window.push_back((now_ms, released, delta));
        }
        while let Some(&(at, r, d)) = self.window.front() {
            if at + window_ms > now_ms {
                break;
            }
            self.settled.0 += r;
            self.settled.1 += d;
            self.window.pop_front();
        }
    }

    /// Tickets a released place takes: measured over the settled places, `max_qty` before.
    pub fn per_place(&self, max_qty: u64) -> f64 {
        let max = max_qty.max(1) as f64;
        if self.settled.0 < SETTLED_MIN {
            return max;
        }
        (self.settled.1 as f64 / self.settled.0 as f64).clamp(Q_MIN, max)
    }

    /// Tickets promised to the places released within the window and not taken yet.
    pub fn promised(&self, max_qty: u64) -> f64 {
        let (released, taken) = self.window.iter().fold((0, 0), |(r, t), (_, pr, pt)| (r + pr, t + pt));
        (released as f64 * self.per_place(max_qty) - taken as f64).max(0.0)
    }

    /// Most places a step may release with `available` tickets left (`u64::MAX`: not known, no
    /// cap).
    pub fn cap(&self, available: u64, max_qty: u64) -> u64 {
        if available == u64::MAX {
            return u64::MAX;
        }
        let free = available as f64 - self.promised(max_qty);
        if free <= 0.0 {
            return 0;
        }
        // A place is let in while a whole `q` of tickets is free for it (at least one ticket).
        let q = self.per_place(max_qty).max(1.0);
        (free / q).floor() as u64
    }
}

/// How long a released place's claim stands: its fan's token lifetime, and the time it takes to
/// see its turn (the last places poll every few seconds) and buy.
pub fn window_ms(token_seconds: u64) -> u64 {
    (token_seconds + 15) * 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_anything_is_measured_each_place_is_promised_max_qty() {
        let mut c = Claims::default();
        c.note(0, 0, Some(0), 60_000);
        assert_eq!(c.cap(100, 4), 25, "100 tickets, 4 a fan");
        c.note(1000, 10, Some(0), 60_000);
        assert_eq!(c.promised(4), 40.0);
        assert_eq!(c.cap(100, 4), 15);
        // Unknown stock: no cap.
        assert_eq!(c.cap(u64::MAX, 4), u64::MAX);
    }

    #[test]
    fn a_hold_turns_a_claim_into_tickets_taken_and_the_window_frees_the_rest() {
        let mut c = Claims::default();
        c.note(0, 0, Some(0), 60_000);
        c.note(1000, 10, Some(0), 60_000);
        // Six fans held 2 each: 12 tickets taken, 88 left; 40 promised less 12 taken.
        c.note(2000, 0, Some(12), 60_000);
        assert_eq!(c.promised(4), 28.0);
        assert_eq!(c.cap(88, 4), 15);
        // The window passes: the 10 places settle (12 tickets over 10 places: 1.2 a place, under
        // the 20 places needed to measure: still max-qty), nothing promised.
        c.note(62_000, 0, Some(12), 60_000);
        assert_eq!(c.promised(4), 0.0);
        assert_eq!(c.cap(88, 4), 22);
    }

    #[test]
    fn the_measured_take_per_place_discounts_fans_who_never_buy() {
        let mut c = Claims::default();
        c.note(0, 0, Some(0), 10_000);
        // 100 places released, 60 tickets taken (30 fans bought 2, 70 never came).
        c.note(1000, 100, Some(0), 10_000);
        c.note(5000, 0, Some(60), 10_000);
        c.note(20_000, 0, Some(60), 10_000);
        assert!((c.per_place(4) - 0.6).abs() < 1e-9);
        // 600 tickets left: 600 places can be let in at one ticket each (q < 1 counts one).
        assert_eq!(c.cap(600, 4), 600);
        // 50 more released now: 30 tickets promised.
        c.note(21_000, 50, Some(60), 10_000);
        assert!((c.promised(4) - 30.0).abs() < 1e-9);
        assert_eq!(c.cap(600, 4), 570);
    }

    #[test]
    fn stock_spoken_for_caps_at_zero_and_returns_are_not_negative_takes() {
        let mut c = Claims::default();
        c.note(0, 0, Some(50), 30_000);
        c.note(1000, 5, Some(50), 30_000);
        assert_eq!(c.cap(20, 4), 0, "20 tickets left, 5 fans promised 4 each");
        // An order closed: taken goes down; nothing negative is counted.
        c.note(2000, 0, Some(40), 30_000);
        assert_eq!(c.promised(4), 20.0);
        assert_eq!(c.cap(30, 4), 2);
    }
}
