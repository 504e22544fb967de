//! Admission is a promise (issue #39, DESIGN §7c): the tickets already promised to fans the
//! release let in are counted before more fans are let in.
//!
//! A place the release passes is a claim on the stock: its fan will poll, be admitted and — most
//! of the time — hold within seconds. The core's stock answer (read once a second by every edge)
//! says how many tickets are left (`available`) and how many were taken (`held + sold`); the
//! leader, which moves `serving`, remembers what each of its recent steps released. From the two:
//!
//! - **promised** tickets: `max-qty` for every place released in the last [`CLAIM_MS`], less the
//!   tickets taken in that time (the claims already turned into holds);
//! - **the cap** of a step: as many places as the tickets left, less those promised, can serve at
//!   `max-qty` each.
//!
//! A claim ends when its fan holds (its tickets leave `available` and count as taken), or when
//! [`CLAIM_MS`] passes it (its fan did not come, or bought less than `max-qty`): then the next fans
//! are let in. While the stock left is all promised, the room says "sold out for now" and the
//! queue keeps its places ([`super::Room::spoken_for`]). Before the core's first stock answer
//! nothing caps the release (a sale opening as the edge starts may let in a second's worth
//! unchecked).
//!
//! Why `max-qty` and not the measured tickets per released place (which would count the fans
//! who never buy, as airlines overbook): measured on the quick StarArena (bench/RESULTS.md), the
//! mean let 19–32% of the admitted fans meet "sold out" (a step's fans take more than the mean);
//! `max-qty` let 6–10% with the same sellout time, its cost being that a fan who buys less than
//! `max-qty`, or nothing, holds the rest of its promise for [`CLAIM_MS`]. A fan who holds more than
//! [`CLAIM_MS`] after its turn may meet "sold out" when the stock is short. On a failover the new
//! leader starts with no history: for [`CLAIM_MS`] it counts nothing as promised.

use std::collections::VecDeque;

/// How long a released place's promise stands: its fan polls its turn within seconds (the last
/// places poll every 1-5 s), is admitted and holds; a place released longer ago has bought or will
/// not (its later hold, if any, may meet "sold out").
pub const CLAIM_MS: u64 = 10_000;

/// What a room's leader remembers of its recent steps (kept in [`super::ReleaseBook`]).
#[derive(Debug, Default, Clone)]
pub struct Claims {
    /// The steps of the last [`CLAIM_MS`]: (when, places released, tickets taken since the step
    /// before).
    window: VecDeque<(u64, u64, u64)>,
    /// `held + sold` at the last stock answer seen (`None`: none yet).
    last_taken: Option<u64>,
}

impl Claims {
    /// Records a step at `now_ms`: `released` places, and `taken` = the core's `held + sold` now
    /// (`None`: not known yet, or not read again). Steps older than [`CLAIM_MS`] leave.
    pub fn note(&mut self, now_ms: u64, released: u64, taken: Option<u64>) {
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
        while self.window.front().is_some_and(|(at, _, _)| at + CLAIM_MS <= now_ms) {
            self.window.pop_front();
        }
    }

    /// Tickets promised to the places released within the window and not taken yet.
    pub fn promised(&self, max_qty: u64) -> u64 {
        let (released, taken) = self.window.iter().fold((0u64, 0u64), |(r, t), (_, pr, pt)| (r + pr, t + pt));
        (released * max_qty.max(1)).saturating_sub(taken)
    }

    /// Most places a step may release with `available` tickets left (`u64::MAX`: not known, no
    /// cap): one per `max_qty` tickets no one is promised, and one more for a remainder — the last
    /// tickets (fewer than `max-qty`) go to a fan who wants that many or fewer, rather than to nobody.
    pub fn cap(&self, available: u64, max_qty: u64) -> u64 {
        if available == u64::MAX {
            return u64::MAX;
        }
        available.saturating_sub(self.promised(max_qty)).div_ceil(max_qty.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_released_place_is_promised_max_qty() {
        let mut c = Claims::default();
        c.note(0, 0, Some(0));
        assert_eq!(c.cap(100, 4), 25, "100 tickets, 4 a fan");
        c.note(1000, 10, Some(0));
        assert_eq!(c.promised(4), 40);
        assert_eq!(c.cap(100, 4), 15);
        assert_eq!(c.cap(40, 4), 0, "every ticket promised: nobody more");
        assert_eq!(c.cap(43, 4), 1, "three unpromised tickets: one fan more");
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
        assert_eq!(c.promised(4), 28);
        assert_eq!(c.cap(88, 4), 15);
        // The window passes: nothing promised.
        c.note(1000 + CLAIM_MS, 0, Some(12));
        assert_eq!(c.promised(4), 0);
        assert_eq!(c.cap(88, 4), 22);
    }

    /// The last tickets, fewer than `max-qty`, are released once their promises lapse: the sale sells
    /// out (it stalled with one ticket of 600 left and 1,549 fans queued when the cap rounded down).
    #[test]
    fn the_last_tickets_below_max_qty_are_released() {
        let mut c = Claims::default();
        c.note(0, 0, Some(599));
        assert_eq!(c.cap(1, 2), 1);
        c.note(1000, 1, Some(599));
        assert_eq!(c.cap(1, 2), 0, "promised to the fan just let in");
        c.note(1000 + CLAIM_MS, 0, Some(599));
        assert_eq!(c.cap(1, 2), 1, "its promise lapsed without a hold: the next fan");
    }

    #[test]
    fn stock_spoken_for_caps_at_zero_and_returns_are_not_negative_takes() {
        let mut c = Claims::default();
        c.note(0, 0, Some(50));
        c.note(1000, 5, Some(50));
        assert_eq!(c.cap(20, 4), 0, "20 tickets left, 5 fans promised 4 each");
        // An order closed: taken goes down; nothing negative is counted.
        c.note(2000, 0, Some(40));
        assert_eq!(c.promised(4), 20);
        assert_eq!(c.cap(30, 4), 3, "10 unpromised: two fans of 4 and one for the last 2");
        // Before any stock answer nothing is counted as taken.
        let mut fresh = Claims::default();
        fresh.note(0, 3, None);
        assert_eq!(fresh.promised(2), 6);
    }
}
