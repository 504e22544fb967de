//! The conformance suite of [`RoomState`]: what every backend of a room's shared state must do —
//! places, the serving counter, passthrough, sessions, spent places, idle sessions ([`conformance`]),
//! places whose bot check is owed ([`owed_places`], on a fresh state of its own), and the invite
//! lane's share of the release ([`lane_places`], on a fresh state of its own). Run on the
//! embedded state (tests/room_state.rs) and on a real Redis (tests/room_redis.rs); a new backend
//! runs it too.

use wicket_edge::room::state::{Advanced, Joined, PickupAsk, Proof, ProofState, RoomState, Who};
use wicket_edge::room::unix_ms;

/// A join that gave the room's check (or of a room without one): (place, new).
async fn join(state: &dyn RoomState, who: Who) -> (u64, bool) {
    let j = state.join(who, true, Proof::given(unix_ms())).await.unwrap().expect("a proven join always gets a place");
    (j.position, j.fresh)
}

/// Every check, on a fresh state.
pub async fn conformance(state: &dyn RoomState, t0: u64) {
    places(state).await;
    passing(state).await;
    sessions(state, t0).await;
    idle_sessions(state, t0 + 1_000_000).await;
}

/// One place per identity, handed out in order; `serving` never passes `issued`.
async fn places(state: &dyn RoomState) {
    let (p1, fresh1) = join(state, 1).await;
    let (p2, fresh2) = join(state, 2).await;
    let (again, fresh_again) = join(state, 1).await;
    assert_eq!((p1, p2, again), (1, 2, 1), "places in order, a rejoin keeps its place");
    assert!(fresh1 && fresh2 && !fresh_again);
    let c = state.refresh().await.unwrap();
    assert_eq!((c.issued, c.serving), (2, 0));
    assert!(state.lead("node-a", 10_000).await.unwrap());
    assert_eq!(state.advance("node-a", 1).await.unwrap(), 1);
    assert_eq!(state.advance("node-a", 100).await.unwrap(), 2, "never past issued");
    let c = state.refresh().await.unwrap();
    assert_eq!((c.issued, c.serving), (2, 2));
}

/// Passthrough serves the caller's own place only when every place ahead is served.
async fn passing(state: &dyn RoomState) {
    let (p3, _) = join(state, 3).await;
    assert!(state.pass(p3).await.unwrap(), "nobody waits: served at once");
    let (p4, _) = join(state, 4).await;
    let (p5, _) = join(state, 5).await;
    assert!(!state.pass(p5).await.unwrap(), "place {p4} waits ahead of {p5}");
    assert!(!state.pass(0).await.unwrap());
    assert_eq!(state.refresh().await.unwrap().serving, p3, "a refused pass serves nobody");
    assert!(state.pass(p4).await.unwrap());
    assert!(state.pass(p5).await.unwrap());
    assert!(state.pass(p4).await.unwrap(), "an already served place is served");
    assert_eq!(state.refresh().await.unwrap().serving, p5);
}

/// Sessions: opened once, alive until they end or expire; an ended session spends its place.
pub async fn sessions(state: &dyn RoomState, t0: u64) {
    let who: Who = 7;
    let (pos, _) = join(state, who).await;
    assert!(state.open_session(who, t0 + 60_000, pos).await.unwrap(), "a new session");
    assert!(!state.open_session(who, t0 + 60_000, pos).await.unwrap(), "already running");
    assert!(state.session_alive(who, t0).await.unwrap());
    assert!(!state.session_alive(who, t0 + 60_001).await.unwrap(), "expired");
    assert!(!state.spent(who, pos).await.unwrap());
    assert!(state.end_session(who).await.unwrap());
    assert!(!state.session_alive(who, t0).await.unwrap(), "ended");
    assert!(state.spent(who, pos).await.unwrap(), "its place is spent");
    assert!(!state.end_session(99).await.unwrap(), "no session to end");
}

/// Idle sessions: a session counts as active while seen within the idle
/// window, stops counting when idle, counts again when seen, and never after it ended.
pub async fn idle_sessions(state: &dyn RoomState, t0: u64) {
    let (a, b, c): (Who, Who, Who) = (11, 22, 33);
    let idle = 10_000;
    // Their places (far from any other test's): a session opened picks its place up.
    let p = 9_000_000;
    for (i, who) in [a, b, c].into_iter().enumerate() {
        assert!(state.open_session(who, t0 + 600_000, p + 1 + i as u64).await.unwrap());
        state.touch(who, t0).await.unwrap();
    }
    assert!(!state.open_session(a, t0 + 600_000, p + 1).await.unwrap());
    let ask = PickupAsk { ranges: vec![(p, p + 2), (p + 2, p + 10), (p + 10, p + 20)], forget_to: None };
    let swept = state.sweep_picked(t0 + 1000, idle, &ask).await.unwrap();
    assert_eq!(swept.active, 3, "all three just seen");
    assert_eq!(swept.picked, Some(vec![2, 1, 0]), "picked up by range (a running session opened again counts once)");
    // The leader forgets the places below its window.
    let forget = PickupAsk { ranges: vec![(p, p + 10)], forget_to: Some(p + 1) };
    assert_eq!(state.sweep_picked(t0 + 1000, idle, &forget).await.unwrap().picked, Some(vec![2]));
    assert_eq!(state.sweep_picked(t0 + 1000, idle, &ask).await.unwrap().picked, Some(vec![1, 1, 0]));
    // b is seen again later; a and c go idle.
    state.touch(b, t0 + 8000).await.unwrap();
    assert_eq!(state.sweep(t0 + 12_000, idle).await.unwrap().active, 1, "only b was seen within the window");
    // a comes back.
    state.touch(a, t0 + 13_000).await.unwrap();
    assert_eq!(state.sweep(t0 + 14_000, idle).await.unwrap().active, 2);
    // An ended session no longer counts, and its session is gone for session_alive.
    assert!(state.end_session(a).await.unwrap());
    assert_eq!(state.sweep(t0 + 15_000, idle).await.unwrap().active, 1);
    assert!(state.session_alive(c, t0 + 15_000).await.unwrap(), "idle is not ended: c's token still works");
    // Expired sessions leave too.
    let swept = state.sweep_picked(t0 + 700_000, idle, &ask).await.unwrap();
    assert_eq!((swept.active, swept.picked), (0, Some(vec![1, 1, 0])), "an expiry picks nothing up nor forgets it");
}

/// What every [`RoomState`] must do with places whose bot check is owed (on a fresh room): a place is fixed at
/// the first arrival whatever the order of the proofs; the release counts only places whose check
/// is given and holds owed ones back for the grace; a proof within the grace lets the place in (and
/// the next release one fewer); past the grace the place is lost and a join queues anew.
pub async fn owed_places(state: &dyn RoomState, node: &str, t0: u64) {
    let grace = 10_000;
    let owed = |now_ms| Proof { proven: false, now_ms, grace_ms: grace, lane: false };
    let given = |now_ms| Proof { proven: true, now_ms, grace_ms: grace, lane: false };
    let join = |who: Who, p: Proof| async move { state.join(who, true, p).await.unwrap().unwrap() };
    assert!(state.lead(node, 60_000).await.unwrap());
    let (a, b, c, d, e, f, g, h) = (1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008);
    // A arrives first, B second, both owing the check; C has given it.
    assert_eq!(join(a, owed(t0)).await, Joined { position: 1, fresh: true, owed: true, lane: 0 });
    assert_eq!(join(b, owed(t0)).await, Joined { position: 2, fresh: true, owed: true, lane: 0 });
    assert_eq!(join(c, given(t0)).await, Joined { position: 3, fresh: true, owed: false, lane: 0 });
    // A rejoin keeps the place and the debt.
    assert_eq!(join(a, owed(t0 + 10)).await, Joined { position: 1, fresh: false, owed: true, lane: 0 });
    // B proves first, A later: each keeps the place of their arrival.
    assert_eq!(join(b, given(t0 + 100)).await, Joined { position: 2, fresh: false, owed: false, lane: 0 });
    assert_eq!(state.proof_state(a, 1, t0 + 100, grace).await.unwrap(), ProofState::Owed);
    assert_eq!(state.proof_state(b, 2, t0 + 100, grace).await.unwrap(), ProofState::Proven);
    assert_eq!(state.proof_state(c, 2, t0 + 100, grace).await.unwrap(), ProofState::Lost, "another identity's place");
    assert_eq!(join(a, given(t0 + 200)).await, Joined { position: 1, fresh: false, owed: false, lane: 0 });
    assert_eq!(join(a, given(t0 + 300)).await, Joined { position: 1, fresh: false, owed: false, lane: 0 }, "a second proof changes nothing");
    assert_eq!(state.advance_at(node, 2, t0 + 1000).await.unwrap(), 2, "A then B");
    assert_eq!(state.advance_at(node, 1, t0 + 1000).await.unwrap(), 3);
    // D never proves; E has. A release of one passes D (held back, not counted) and reaches E.
    assert_eq!(join(d, owed(t0)).await.position, 4);
    assert_eq!(join(e, given(t0)).await.position, 5);
    let t1 = t0 + 2000;
    let step = state.advance_lane(node, 1, 0, t1).await.unwrap();
    assert_eq!(step.serving, 5, "the owed place does not take the release slot");
    assert_eq!(step.released, 1, "E only: D is nobody's turn until its proof comes (no promise of tickets for it)");
    assert_eq!(state.proof_state(d, 4, t1 + 500, grace).await.unwrap(), ProofState::Passed { ago_ms: 500 });
    // D proves within the grace: in, and the next release lets in one fewer.
    assert_eq!(join(d, given(t1 + 5000)).await, Joined { position: 4, fresh: false, owed: false, lane: 0 });
    assert_eq!(state.proof_state(d, 4, t1 + 5000, grace).await.unwrap(), ProofState::Proven);
    assert_eq!(join(f, given(t1)).await.position, 6);
    assert_eq!(join(g, given(t1)).await.position, 7);
    let step = state.advance_lane(node, 1, 0, t1 + 6000).await.unwrap();
    assert_eq!((step.serving, step.released), (5, 1), "the late proof took this slot: D is let in now");
    assert_eq!(state.advance_at(node, 2, t1 + 6000).await.unwrap(), 7);
    // H never proves: held back for the grace, then lost (the release tick's lapse).
    assert_eq!(join(h, owed(t1)).await.position, 8);
    let t2 = t1 + 7000;
    assert_eq!(state.advance_at(node, 1, t2).await.unwrap(), 8, "passed, nobody behind");
    assert_eq!(state.proof_state(h, 8, t2 + grace, grace).await.unwrap(), ProofState::Passed { ago_ms: grace });
    assert!(!state.spent(h, 8).await.unwrap());
    assert_eq!(state.lapse(t2 + grace + 1, grace).await.unwrap(), 1);
    assert!(state.spent(h, 8).await.unwrap(), "lost");
    assert_eq!(state.proof_state(h, 8, t2 + grace + 2, grace).await.unwrap(), ProofState::Lost);
    // Its next join queues at the back (owed again); a proof then proves the new place only.
    assert_eq!(join(h, owed(t2 + grace + 3)).await, Joined { position: 9, fresh: true, owed: true, lane: 0 });
    // A proof past the grace that the lapse has not seen yet: the place is lost all the same.
    assert_eq!(state.advance_at(node, 1, t2 + grace + 4).await.unwrap(), 9);
    let late = t2 + 2 * grace + 10;
    assert_eq!(join(h, given(late)).await, Joined { position: 10, fresh: true, owed: false, lane: 0 });
    assert_eq!(state.proof_state(h, 9, late, grace).await.unwrap(), ProofState::Lost);
}

/// What every [`RoomState`] must do with the invite lane's share of the release (on a fresh room):
/// an invitee's new place also gets a lane place, in join order (a rejoin keeps both; a place
/// taken outside the lane never gets one); each step admits up to its lane part through the lane
/// first, in lane order, and the rest in order, where lane places admitted already cost nothing;
/// with nobody in the lane everything goes in order, with only the lane waiting it gets it all.
pub async fn lane_places(state: &dyn RoomState, node: &str, t0: u64) {
    let lane = |now_ms| Proof { proven: true, now_ms, grace_ms: 0, lane: true };
    let plain = |now_ms| Proof::given(now_ms);
    let join = |who: Who, p: Proof| async move { state.join(who, true, p).await.unwrap().unwrap() };
    assert!(state.lead(node, 60_000).await.unwrap());
    // N1 N2 N3 I1 N4 I2 N5 I3 N6: places 1..9, lane places 1..3.
    let (n1, n2, n3, n4, n5, n6) = (2001, 2002, 2003, 2004, 2005, 2006);
    let (i1, i2, i3, i4, i5) = (3001, 3002, 3003, 3004, 3005);
    for (who, p) in [(n1, 1), (n2, 2), (n3, 3)] {
        assert_eq!(join(who, plain(t0)).await, Joined { position: p, fresh: true, owed: false, lane: 0 });
    }
    assert_eq!(join(i1, lane(t0)).await, Joined { position: 4, fresh: true, owed: false, lane: 1 });
    assert_eq!(join(n4, plain(t0)).await.position, 5);
    assert_eq!(join(i2, lane(t0)).await, Joined { position: 6, fresh: true, owed: false, lane: 2 });
    assert_eq!(join(n5, plain(t0)).await.position, 7);
    assert_eq!(join(i3, lane(t0)).await, Joined { position: 8, fresh: true, owed: false, lane: 3 });
    assert_eq!(join(n6, plain(t0)).await.position, 9);
    // A rejoin keeps the place and the lane place; a place taken outside the lane stays outside.
    assert_eq!(join(i2, lane(t0 + 1)).await, Joined { position: 6, fresh: false, owed: false, lane: 2 });
    assert_eq!(join(i2, plain(t0 + 1)).await, Joined { position: 6, fresh: false, owed: false, lane: 2 });
    assert_eq!(join(n1, lane(t0 + 1)).await, Joined { position: 1, fresh: false, owed: false, lane: 0 });
    let c = state.refresh().await.unwrap();
    assert_eq!((c.issued, c.serving, c.lane_issued, c.lane_serving), (9, 0, 3, 0));
    // Steps of 3, one for the lane: I1 ahead of its turn, then N1 N2.
    let step = |n, part| async move { state.advance_lane(node, n, part, t0 + 10).await.unwrap() };
    assert_eq!(step(3, 1).await, Advanced { serving: 2, lane_serving: 1, released: 3, in_line: 2 });
    assert_eq!(state.refresh().await.unwrap().waiting(), 6, "N3 N4 I2 N5 I3 N6 (I1 is in)");
    // I2 through the lane; in order N3, then I1's place (admitted: free), then N4.
    assert_eq!(step(3, 1).await, Advanced { serving: 5, lane_serving: 2, released: 3, in_line: 2 });
    assert_eq!(state.refresh().await.unwrap().waiting(), 3, "N5 I3 N6 (I2 is in)");
    // The lane's part is 2, but only I3 waits in it: the rest goes in order (N5 N6, the lane
    // places passed for free).
    assert_eq!(step(3, 2).await, Advanced { serving: 9, lane_serving: 3, released: 3, in_line: 2 });
    // Only invitees wait: a step with no lane part reaches them in order (the lane follows).
    assert_eq!(join(i4, lane(t0 + 20)).await, Joined { position: 10, fresh: true, owed: false, lane: 4 });
    assert_eq!(join(i5, lane(t0 + 20)).await, Joined { position: 11, fresh: true, owed: false, lane: 5 });
    assert_eq!(step(1, 0).await, Advanced { serving: 10, lane_serving: 4, released: 1, in_line: 1 });
    // Nobody outside the lane waits... then N7 joins behind I5: the lane's part takes I5, the rest
    // N7 (I5's place passed for free); never past either end.
    let n7 = 2007;
    assert_eq!(join(n7, plain(t0 + 30)).await.position, 12);
    assert_eq!(step(5, 1).await, Advanced { serving: 12, lane_serving: 5, released: 2, in_line: 1 });
    assert_eq!(step(5, 5).await, Advanced { serving: 12, lane_serving: 5, released: 0, in_line: 0 });
    let c = state.refresh().await.unwrap();
    assert_eq!((c.issued, c.serving, c.lane_issued, c.lane_serving), (12, 12, 5, 5));
    // Not the leader: nothing moves.
    assert_eq!(join(2008, plain(t0 + 40)).await.position, 13);
    if !state.lead("someone-else", 60_000).await.unwrap() {
        assert_eq!(state.advance_lane("someone-else", 5, 1, t0 + 50).await.unwrap().released, 0);
        assert_eq!(state.refresh().await.unwrap().serving, 12);
    }
}
