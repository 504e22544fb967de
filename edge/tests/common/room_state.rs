//! The conformance suite of [`RoomState`]: what every backend of a room's shared state must do —
//! places, the serving counter, passthrough, sessions, spent places, idle sessions. Run on the
//! embedded state (tests/room_state.rs) and on a real Redis (tests/room_redis.rs); a new backend
//! runs it too.

use wicket_edge::room::state::{Proof, RoomState, Who};
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
async fn sessions(state: &dyn RoomState, t0: u64) {
    let who: Who = 7;
    let (pos, _) = join(state, who).await;
    assert!(state.open_session(who, t0 + 60_000).await.unwrap(), "a new session");
    assert!(!state.open_session(who, t0 + 60_000).await.unwrap(), "already running");
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
async fn idle_sessions(state: &dyn RoomState, t0: u64) {
    let (a, b, c): (Who, Who, Who) = (11, 22, 33);
    let idle = 10_000;
    for who in [a, b, c] {
        assert!(state.open_session(who, t0 + 600_000).await.unwrap());
        state.touch(who, t0).await.unwrap();
    }
    assert_eq!(state.sweep(t0 + 1000, idle).await.unwrap().0, 3, "all three just seen");
    // b is seen again later; a and c go idle.
    state.touch(b, t0 + 8000).await.unwrap();
    assert_eq!(state.sweep(t0 + 12_000, idle).await.unwrap().0, 1, "only b was seen within the window");
    // a comes back.
    state.touch(a, t0 + 13_000).await.unwrap();
    assert_eq!(state.sweep(t0 + 14_000, idle).await.unwrap().0, 2);
    // An ended session no longer counts, and its session is gone for session_alive.
    assert!(state.end_session(a).await.unwrap());
    assert_eq!(state.sweep(t0 + 15_000, idle).await.unwrap().0, 1);
    assert!(state.session_alive(c, t0 + 15_000).await.unwrap(), "idle is not ended: c's token still works");
    // Expired sessions leave too.
    let (active, _) = state.sweep(t0 + 700_000, idle).await.unwrap();
    assert_eq!(active, 0);
}
