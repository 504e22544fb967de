//! Admission is a promise (issue #39, DESIGN §7c): the tickets already promised to fans the
//! release let in are counted before more fans are let in.
//!
//! A place the release passes is a claim on the stock: its fan will poll, be admitted and — most
//! of the time — hold some tickets within its token's lifetime. The core's stock answer (read once
//! a second by every edge) says how many tickets are left (`available`) and how many were taken
//! (`held + sold`); the leader, which moves `serving`, remembers what each of its recent steps
//! released. From the two:
//!
//! - **tickets per released place** `q`: every ticket taken so far over the places released at
//!   least [`CLAIM_MS`] ago (by then a fan who buys has mostly bought; the takes of places
//!   released since count too, so `q` errs high: fewer let in, never more); `max-qty` until 20
//!   such places. It already holds the share of released fans who never buy (the overbooking
//!   discount airlines use), so the tail of a sale does not wait for every unused token to expire;
//! - **promised** tickets: the places released within the last [`CLAIM_MS`] times `q`, less the
//!   tickets taken in that time (the claims already turned into holds);
//! - **the cap** of a step: as many places as the tickets left, less those promised, can serve at
//!   `q` each.
//!
//! A claim ends when its fan holds (its tickets leave `available` and count as taken), or when
//! [`CLAIM_MS`] passes it (its fan did not come, or bought less than `q`): then the next fans are
//! let in. While the stock left is all promised, the room says "sold out for now" and the
//! queue keeps its places ([`super::Room::spoken_for`]).
//!
//! What it costs: `q` is an average. When the fans released together buy more than the average,
//! the last of them meet "sold out" at the hold (the surge bench reports the share,
//! `admitted_sold_out_share`), and so do fans who hold more than [`CLAIM_MS`] after their turn
//! when the stock is short; when they buy less, the next fans wait up to [`CLAIM_MS`] longer
//! than they had to. On a failover the new leader starts with no history: for [`CLAIM_MS`]
//! it counts nothing as promised (the cap is the stock left, as before this module).

use std::collections::VecDeque;

/// Released places before `q` is measured rather than assumed (`max-qty`).
const SETTLED_MIN: u64 = 20;
/// The least `q` may be: a burst of fans who buy nothing does not open the doors wide.
const Q_MIN: f64 = 0.1;
/// How long a released place's promise stands: its fan polls its turn within seconds (the last
/// places poll every 1-5 s), is admitted and holds; a place released longer ago has bought or will
/// not (its later hold, if any, may meet "sold out"), and measures `q`.
pub const CLAIM_MS: u64 = 10_000;

/// What a room's leader remembers of its recent steps (kept in [`super::ReleaseBook`]).
#[derive(Debug, Default, Clone)]
pub struct Claims {
    /// The steps of the last [`CLAIM_MS`]: (when, places released, tickets taken since the step
    /// before).
    window: VecDeque<(u64, u64, u64)>,
    /// Places released in steps that left the window.
    settled: u64,
    /// Tickets taken since the first stock answer.
    taken_total: u64,
    /// `held + sold` at the last stock answer seen (`None`: none yet).
    last_taken: Option<u64>,
}

impl Claims {
    /// Records a step at `now_ms`: `released` places, and `taken` = the core's `held + sold` now
    /// (`None`: not known yet, or not read again). Steps older than [`CLAIM_MS`] settle.
    pub fn note(&mut self, now_ms: u64, released: u64, taken: Option<u64>) {
        // Tickets that came back (an order closed) are not negative takes: `available` shows them.
        let delta = match (self.last_taken, taken) {
            (Some(before), Some(now)) => now.saturating_sub(before),
            _ => 0,
        };
        if taken.is_some() {
            self.last_taken = taken;
        }
        self.taken_total += delta;
        if released > 0 || delta > 0 {
            self.window.push_back((now_ms, released, delta));
        }
        while let Some(&(at, r, _)) = self.window.front() {
            if at + CLAIM_MS > now_ms {
                break;
            }
            self.settled += r;
            self.window.pop_front();
        }
    }

    /// Tickets a released place takes: every ticket taken so far over the settled places (the
    /// takes of the places in the window count too, so `q` errs high: fewer let in, never more);
    /// `max_qty` until [`SETTLED_MIN`] places settled.
    pub fn per_place(&self, max_qty: u64) -> f64 {
        let max = max_qty.max(1) as f64;
        if self.settled < SETTLED_MIN {
            return max;
        }
        (self.taken_total as f64 / self.settled as f64).clamp(Q_MIN, max)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_anything_is_measured_each_place_is_promised_max_qty() {
        let mut c = Claims::default();
        c.note(0, 0, Some(0));
        assert_eq!(c.cap(100, 4), 25, "100 tickets, 4 a fan");
        c.note(1000, 10, Some(0));
        assert_eq!(c.promised(4), 40.0);
        assert_eq!(c.cap(100, 4), 15);
        // Unknown stock: no cap.
        assert_eq!(c.cap(u64::MAX, 4), u64::MAX);
    }

    #[test]
    fn a_hold_turns_a_claim_into_tickets_taken_and_the_window_frees_the_rest() {
        let mut c = Claims::default();
        c.note(0, 0, Some(0));
        c.note(1000, 10, Some(0));
        // Six fans held 2 each: 12 tickets taken, 88 left; 40 promised less 12 taken.
        c.note(2000, 0, Some(12));
        assert_eq!(c.promised(4), 28.0);
        assert_eq!(c.cap(88, 4), 15);
        // The window passes: nothing promised (10 places are too few to measure: still max-qty).
        c.note(1000 + CLAIM_MS, 0, Some(12));
        assert_eq!(c.promised(4), 0.0);
        assert_eq!(c.cap(88, 4), 22);
    }

    #[test]
    fn the_measured_take_per_place_discounts_fans_who_never_buy() {
        let mut c = Claims::default();
        c.note(0, 0, Some(0));
        // 100 places released, 60 tickets taken (30 fans bought 2, 70 never came).
        c.note(1000, 100, Some(0));
        c.note(5000, 0, Some(60));
        assert_eq!(c.per_place(4), 4.0, "not settled yet");
        assert_eq!(c.promised(4), 340.0);
        c.note(5000 + CLAIM_MS, 0, Some(60));
        assert!((c.per_place(4) - 0.6).abs() < 1e-9);
        assert_eq!(c.promised(4), 0.0, "settled: nothing promised");
        // 600 tickets left: 600 places can be let in at one ticket each (q < 1 counts one).
        assert_eq!(c.cap(600, 4), 600);
        // 50 more released now: 30 tickets promised.
        c.note(6000 + CLAIM_MS, 50, Some(60));
        assert!((c.promised(4) - 30.0).abs() < 1e-9);
        assert_eq!(c.cap(600, 4), 570);
        // 18 of them took 2 each: 36 taken; q is now 96 over the 100 settled places (the new takes
        // count at once: q errs high), so 50 × 0.96 - 36 = 12 are still promised.
        c.note(7000 + CLAIM_MS, 0, Some(96));
        assert!((c.promised(4) - 12.0).abs() < 1e-9);
    }

    #[test]
    fn stock_spoken_for_caps_at_zero_and_returns_are_not_negative_takes() {
        let mut c = Claims::default();
        c.note(0, 0, Some(50));
        c.note(1000, 5, Some(50));
        assert_eq!(c.cap(20, 4), 0, "20 tickets left, 5 fans promised 4 each");
        // An order closed: taken goes down; nothing negative is counted.
        c.note(2000, 0, Some(40));
        assert_eq!(c.promised(4), 20.0);
        assert_eq!(c.cap(30, 4), 2);
    }
}
