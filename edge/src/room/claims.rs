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
//!   (`max-qty` until [`MEASURED_HOLDS`] holds are counted), with a margin of two standard
//!   deviations of a step's sum, so a step whose fans take more than the mean still finds its
//!   tickets (the spread of a hold's tickets is bounded by the mean and `max-qty`);
//! - **the cap** of a step: as many places as the tickets left, less those promised, can serve; and
//!   one more while any ticket is unpromised — the last tickets go to a fan who is offered what is
//!   left (the core answers `409 not_enough_left` with `available` to a hold that asks for more)
//!   rather than to nobody.
//!
//! A place that is not settled within [`CLAIM_MS`] lapses (its fan did not come): then the next
//! fans are let in. While the stock left is all promised, the room says "sold out for now" and the
//! queue keeps its places ([`super::Room::spoken_for`]). Before the core's first stock answer
//! nothing caps the release (a sale opening as the edge starts may let in a second's worth
//! unchecked). A core that does not count holds (older than this edge) settles nothing: every place
//! is then promised `max-qty` until it lapses.
//!
//! What it costs: a fan who holds more than [`CLAIM_MS`] after its turn settles another fan's
//! place, so one place too many is let in; if the stock is short then, a fan meets "sold out". On a
//! failover the new leader starts with no history: for [`CLAIM_MS`] it counts nothing as promised.

use std::collections::VecDeque;

/// How long a released place's promise stands: its fan polls its turn within seconds (every place
/// the stock could reach polls at least every 5 s), is admitted and holds; a place released longer
/// ago has bought or will not (its later hold, if any, may meet "sold out"). Measured on the bots
/// surge (its fans solving proofs of work on two shared cores): from a place's release to its hold
/// took at least 8.7 s for the slowest 10% and 11 s for the slowest 1%, so 10 s let 27 fans of
/// 1,583 meet "sold out".
pub const CLAIM_MS: u64 = 15_000;

/// Holds counted before their mean replaces `max-qty` as a place's promise.
pub const MEASURED_HOLDS: u64 = 20;

/// What a room's leader remembers of its recent steps (kept in [`super::ReleaseBook`]).
#[derive(Debug, Default, Clone)]
pub struct Claims {
    /// The steps of the last [`CLAIM_MS`]: (when, places released and not settled yet).
    window: VecDeque<(u64, u64)>,
    /// The core's `holds` at the last stock answer seen (`None`: none yet).
    last_holds: Option<u64>,
    /// The core's (`holds`, `hold_units`) at the last answer: the measured tickets per hold.
    measured: (u64, u64),
}

impl Claims {
    /// Records a step at `now_ms`: `released` places, and `holds` = the core's (`holds`,
    /// `hold_units`) now (`None`: not known, or not read again). New holds settle the oldest open
    /// places; steps older than [`CLAIM_MS`] leave.
    pub fn note(&mut self, now_ms: u64, released: u64, holds: Option<(u64, u64)>) {
        if let Some((h, units)) = holds {
            // A counter that went down (the event was made again) starts over: nothing settles.
            let mut new = match self.last_holds {
                Some(before) if h >= before => h - before,
                _ => 0,
            };
            self.last_holds = Some(h);
            self.measured = (h, units);
            for (_, open) in self.window.iter_mut() {
                let n = new.min(*open);
                *open -= n;
                new -= n;
                if new == 0 {
                    break;
                }
            }
        }
        if released > 0 {
            self.window.push_back((now_ms, released));
        }
        while self.window.front().is_some_and(|&(at, open)| open == 0 || at + CLAIM_MS <= now_ms) {
            self.window.pop_front();
        }
    }

    /// Places released within the window and not settled by a hold yet.
    pub fn open(&self) -> u64 {
        self.window.iter().map(|(_, n)| n).sum()
    }

    /// Tickets promised to `places` open places: the measured mean per hold plus a margin of two
    /// standard deviations of their sum, never more than `max-qty` each.
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
        let p = places as f64 * mean + 2.0 * sd * (places as f64).sqrt();
        (p.ceil() as u64).min(places.saturating_mul(max))
    }

    /// Tickets promised to the places released within the window and not settled yet.
    pub fn promised(&self, max_qty: u64) -> u64 {
        self.promise(self.open(), max_qty)
    }

    /// Most places a step may release with `available` tickets left (`u64::MAX`: not known, no
    /// cap): as many as the tickets no one is promised serve, and one more while any ticket is
    /// unpromised (offered what is left).
    pub fn cap(&self, available: u64, max_qty: u64) -> u64 {
        if available == u64::MAX {
            return u64::MAX;
        }
        let open = self.open();
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

    #[test]
    fn each_released_place_is_promised_max_qty_until_holds_are_measured() {
        let mut c = Claims::default();
        c.note(0, 0, Some((0, 0)));
        assert_eq!(c.cap(100, 4), 25, "100 tickets, 4 a fan");
        c.note(1000, 10, Some((0, 0)));
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
        c.note(0, 0, Some((0, 0)));
        c.note(1000, 10, Some((0, 0)));
        // Six fans held, one ticket each: six places settled, four open at 4.
        c.note(2000, 0, Some((6, 6)));
        assert_eq!(c.open(), 4);
        assert_eq!(c.promised(4), 16);
        assert_eq!(c.cap(94, 4), 20, "19 fans of 4 and one for the last 2");
        // The window passes: the four who did not hold lapse.
        c.note(1000 + CLAIM_MS, 0, Some((6, 6)));
        assert_eq!(c.open(), 0);
        assert_eq!(c.cap(94, 4), 24, "23 fans of 4 and one for the last 2");
    }

    #[test]
    fn holds_settle_the_oldest_places_first_and_extra_holds_are_not_carried() {
        let mut c = Claims::default();
        c.note(0, 0, Some((100, 150)));
        c.note(1000, 3, None);
        c.note(2000, 5, None);
        c.note(3000, 0, Some((104, 156)));
        assert_eq!(c.open(), 4, "3 of the first step and 1 of the second");
        c.note(2000 + CLAIM_MS - 1, 0, None);
        assert_eq!(c.open(), 4, "the second step's four are still open");
        // Late holds (their places lapsed) settle what is open, and no more.
        c.note(2000 + CLAIM_MS - 1, 0, Some((120, 180)));
        assert_eq!(c.open(), 0);
        c.note(2000 + CLAIM_MS, 2, None);
        assert_eq!(c.open(), 2, "nothing carried to places released later");
    }

    #[test]
    fn the_measured_mean_with_its_margin_replaces_max_qty() {
        let mut c = Claims::default();
        // 100 holds of 150 tickets: a mean of 1.5, max 2 → sd 0.5.
        c.note(0, 100, Some((100, 150)));
        assert_eq!(c.promised(2), 160, "100 × 1.5 + 2 × 0.5 × 10");
        // Every hold took max-qty: no margin needed, the promise is max-qty.
        let mut all = Claims::default();
        all.note(0, 50, Some((40, 80)));
        assert_eq!(all.promised(2), 100);
        // The margin keeps a step's sum under the tickets: 1,000 left, mean 1.5, max 2.
        let mut c = Claims::default();
        c.note(0, 0, Some((100, 150)));
        let n = c.cap(1000, 2);
        assert!(c.promise(n - 1, 2) < 1000 && c.promise(n, 2) > 1000, "n = {n}: the last one offered what is left");
        assert!((640..667).contains(&n), "{n} places for 1,000 tickets at 1.5 ± margin");
    }

    /// The last tickets, fewer than `max-qty`, are released once their promises lapse: the sale sells
    /// out (it stalled with one ticket of 600 left and 1,549 fans queued when the cap rounded down).
    #[test]
    fn the_last_tickets_below_max_qty_are_released() {
        let mut c = Claims::default();
        c.note(0, 0, Some((599, 599)));
        assert_eq!(c.cap(1, 2), 1);
        c.note(1000, 1, Some((599, 599)));
        assert_eq!(c.cap(1, 2), 0, "promised to the fan just let in");
        c.note(1000 + CLAIM_MS, 0, Some((599, 599)));
        assert_eq!(c.cap(1, 2), 1, "its promise lapsed without a hold: the next fan");
        c.note(2000 + CLAIM_MS, 1, None);
        c.note(3000 + CLAIM_MS, 0, Some((600, 600)));
        assert_eq!(c.open(), 0, "that fan held: settled at once");
    }

    #[test]
    fn without_hold_counts_places_lapse_and_a_reset_counter_settles_nothing() {
        // Before any stock answer nothing is settled; a core without `holds` reads as 0 forever.
        let mut fresh = Claims::default();
        fresh.note(0, 3, None);
        assert_eq!(fresh.promised(2), 6);
        fresh.note(1000, 0, Some((0, 0)));
        assert_eq!(fresh.open(), 3);
        assert_eq!(fresh.cap(20, 4), 2, "20 tickets left, 3 fans promised 4 each: two more");
        fresh.note(CLAIM_MS, 0, Some((0, 0)));
        assert_eq!(fresh.open(), 0);
        // The event was made again: its counter starts at 0 and settles nothing.
        let mut c = Claims::default();
        c.note(0, 0, Some((50, 75)));
        c.note(1000, 5, Some((2, 2)));
        assert_eq!(c.open(), 5);
    }
}
