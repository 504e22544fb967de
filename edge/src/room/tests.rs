//! Waiting-room unit tests on the embedded state (the Redis state runs the same checks in
//! edge/tests/room_redis.rs).

use std::sync::atomic::Ordering;

use super::config::parse_time;
use super::*;
use mode::{Action, Mode, Pace};
use crate::config::WicketConfig;

pub(crate) const HS: &str = "hs-secret-for-room-tests-0123456789abcdef";

pub(crate) fn rooms_with(room_toml: &str) -> Rooms {
    let text = format!(
        "[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n{room_toml}\n"
    );
    let cfg = WicketConfig::from_toml_str(&text).unwrap();
    assert!(validate(&cfg.rooms, cfg.tokens.as_ref()).is_empty(), "{:?}", validate(&cfg.rooms, cfg.tokens.as_ref()));
    Rooms::new(cfg.rooms_config(), Signer::new(b"room-test-secret-0123"), state_backend::Backend::Embedded).unwrap()
}

fn phase(o: StatusOutcome) -> Status {
    match o {
        StatusOutcome::Status(s) => s,
        StatusOutcome::Rejoin => panic!("unexpected rejoin"),
    }
}

#[tokio::test]
async fn fifo_join_order_is_admission_order_for_10000() {
    let rooms = rooms_with("");
    let room = rooms.get("r1").unwrap();
    let mut tickets = Vec::new();
    for i in 0..10_000 {
        let dev = format!("dev-{i}");
        tickets.push((dev.clone(), rooms.join(&room, &dev, &dev).await.unwrap()));
    }
    let mut admitted_order = Vec::new();
    for next in 0..10_000usize {
        room.state.advance("n", 1).await.unwrap();
        // Exactly one more person is in: the next in join order, and nobody behind them.
        let (dev, t) = &tickets[next];
        let s = phase(rooms.status(&room, t, dev).await.unwrap());
        assert_eq!(s.state, Phase::Admitted, "joiner {next} not admitted when serving reached them");
        admitted_order.push(next);
        if let Some((dev2, t2)) = tickets.get(next + 1) {
            let s2 = phase(rooms.status(&room, t2, dev2).await.unwrap());
            assert_eq!(s2.state, Phase::Waiting, "joiner {} admitted before their turn", next + 1);
            assert_eq!(s2.ahead, Some(0));
        }
    }
    assert_eq!(admitted_order, (0..10_000).collect::<Vec<_>>());
    assert_eq!(room.admissions.load(Ordering::Relaxed), 10_000);
}

#[tokio::test]
async fn random_shuffles_the_prequeue_once_and_is_fifo_after() {
    let rooms = rooms_with("method = \"random\"\nschedule = { opens-at = \"2099-01-01T00:00:00Z\" }\n");
    let room = rooms.get("r1").unwrap();
    let mut pre = Vec::new();
    for i in 0..1000 {
        let dev = format!("pre-{i}");
        pre.push((dev.clone(), rooms.join(&room, &dev, &dev).await.unwrap()));
    }
    // Before the open: not_open, no position shown (it is not known yet).
    let s = phase(rooms.status(&room, &pre[0].1, &pre[0].0).await.unwrap());
    assert_eq!(s.state, Phase::NotOpen);
    assert_eq!(s.position, None);
    // Open now.
    let mut spec = (*room.spec()).clone();
    spec.opens_at = Some(parse_time("2020-01-01T00:00:00Z").unwrap());
    room.set_spec(spec);
    let mut post = Vec::new();
    for i in 0..100 {
        let dev = format!("post-{i}");
        post.push((dev.clone(), rooms.join(&room, &dev, &dev).await.unwrap()));
    }
    let c = room.state.counters();
    assert_eq!(c.prequeue, Some(1000), "the pre-queue is frozen at open");
    // Freezing again changes nothing (shuffled once).
    room.state.freeze().await.unwrap();
    assert_eq!(room.state.counters(), c);
    // Admission order: a permutation of 1..=1000 for the pre-queue, not join order; FIFO after.
    let order: Vec<u64> = pre.iter().map(|(_, t)| room.admission_order(t.position, &c)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, (1..=1000).collect::<Vec<_>>());
    let in_place = order.iter().enumerate().filter(|(i, p)| **p == *i as u64 + 1).count();
    assert!(in_place < 20, "{in_place} of 1000 kept their join place: not shuffled");
    for (i, (_, t)) in post.iter().enumerate() {
        assert_eq!(room.admission_order(t.position, &c), 1001 + i as u64);
    }
    // And the room admits in that order: serving 1 admits exactly the one shuffled to 1.
    room.state.advance("n", 1).await.unwrap();
    let firsts: Vec<usize> = {
        let mut v = Vec::new();
        for (i, (d, t)) in pre.iter().enumerate() {
            if phase(rooms.status(&room, t, d).await.unwrap()).state == Phase::Admitted {
                v.push(i);
            }
        }
        v
    };
    assert_eq!(firsts.len(), 1);
    assert_eq!(order[firsts[0]], 1);
    // All the pre-queue goes before anyone who joined after the open.
    room.state.advance("n", 999).await.unwrap();
    assert_eq!(phase(rooms.status(&room, &post[0].1, &post[0].0).await.unwrap()).state, Phase::Waiting);
    room.state.advance("n", 1).await.unwrap();
    assert_eq!(phase(rooms.status(&room, &post[0].1, &post[0].0).await.unwrap()).state, Phase::Admitted);
    assert_eq!(phase(rooms.status(&room, &post[1].1, &post[1].0).await.unwrap()).state, Phase::Waiting);
}

#[tokio::test]
async fn rejoin_second_tab_and_cleared_cookie_keep_the_place_for_a_known_user() {
    let rooms = rooms_with("");
    let room = rooms.get("r1").unwrap();
    for i in 0..5 {
        rooms.join(&room, &format!("other-{i}"), "d").await.unwrap();
    }
    let a = rooms.join(&room, "alice", "dev-1").await.unwrap();
    assert_eq!(a.position, 6);
    // Second tab, rejoin, cleared cookie (a new device id): the same place.
    assert_eq!(rooms.join(&room, "alice", "dev-1").await.unwrap().position, 6);
    assert_eq!(rooms.join(&room, "alice", "dev-2").await.unwrap().position, 6);
    // Another user on the same device: a place of their own, at the back.
    assert_eq!(rooms.join(&room, "bob", "dev-1").await.unwrap().position, 7);
    assert_eq!(room.joins.load(Ordering::Relaxed), 7);
}

#[tokio::test]
async fn sessions_cap_revoke_and_spent_places() {
    let rooms = rooms_with("total-active-max = 1\nsession-seconds = 60\n");
    let room = rooms.get("r1").unwrap();
    let a = rooms.join(&room, "alice", "da").await.unwrap();
    let b = rooms.join(&room, "bob", "db").await.unwrap();
    room.state.advance("n", 2).await.unwrap();
    let s = phase(rooms.status(&room, &a, "alice").await.unwrap());
    assert_eq!(s.state, Phase::Admitted);
    assert!(s.token.is_some() && s.redirect.as_deref() == Some("/buy"));
    assert!(matches!(rooms.session_ok("r1", "alice", Some("alice"), Some("da")).await, Ok(true)));
    assert!(matches!(rooms.session_ok("r1", "alice", Some("mallory"), Some("dm")).await, Ok(false)), "a token is bound to its sub");
    // Bob's turn came, but the cap is full: first in line, not admitted.
    let s = phase(rooms.status(&room, &b, "bob").await.unwrap());
    assert_eq!((s.state, s.ahead), (Phase::Waiting, Some(0)));
    // The origin revokes Alice: her slot frees, her place is spent, Bob gets in.
    rooms.revoke("r1", "alice").await;
    assert!(matches!(rooms.session_ok("r1", "alice", Some("alice"), Some("da")).await, Ok(false)));
    assert!(matches!(rooms.status(&room, &a, "alice").await.unwrap(), StatusOutcome::Rejoin));
    assert_eq!(phase(rooms.status(&room, &b, "bob").await.unwrap()).state, Phase::Admitted);
    // Alice queues again, at the back.
    assert_eq!(rooms.join(&room, "alice", "da").await.unwrap().position, 3);
    // An expired session frees its slot at the next sweep.
    let swept = room.state.sweep(unix_ms() + 61_000, 120_000).await.unwrap();
    assert_eq!((swept.active, swept.exits), (0, 2));
}

#[tokio::test]
async fn the_tick_releases_at_the_fixed_rate_and_batches_and_stops_when_sold_out() {
    let rooms = rooms_with("release = { mode = \"fixed\", rate = 10.0 }\nbatches = [{ at = \"2020-01-01T00:00:00Z\", count = 25 }]\n");
    let room = rooms.get("r1").unwrap();
    for i in 0..100 {
        rooms.join(&room, &format!("u{i}"), "d").await.unwrap();
    }
    let t0 = unix_ms();
    rooms.tick_room(&room, t0).await.unwrap();
    assert_eq!(room.state.counters().serving, 35, "10/s for the first second plus the due batch");
    rooms.tick_room(&room, t0 + 1000).await.unwrap();
    assert_eq!(room.state.counters().serving, 45);
    room.operate(t0, Action::Pause).unwrap();
    rooms.tick_room(&room, t0 + 2000).await.unwrap();
    assert_eq!(room.state.counters().serving, 45, "paused");
    room.operate(t0, Action::Resume).unwrap();
    room.sold_out.store(true, Ordering::Relaxed);
    rooms.tick_room(&room, t0 + 3000).await.unwrap();
    assert_eq!(room.state.counters().serving, 45, "sold out");
    let t = QueueTicket { room: "r1".into(), position: 90, issued_at: 0, device: "d".into(), owner: "o".into(), owed: false, lane: 0 };
    assert_eq!(phase(rooms.status(&room, &t, "u89").await.unwrap()).state, Phase::SoldOut);
}

/// A room of `toml` with `fans` queued (`u0`, `u1`, ...) and `tickets` left, none held yet, and
/// the time its first tick is to run at.
async fn selling(toml: &str, fans: usize, tickets: u64) -> (Rooms, Arc<Room>, u64) {
    let rooms = rooms_with(toml);
    let room = rooms.get("r1").unwrap();
    for i in 0..fans {
        rooms.join(&room, &format!("u{i}"), "d").await.unwrap();
    }
    room.available.store(tickets, Ordering::Relaxed);
    *room.holds.lock() = Some((0, 0));
    (rooms, room, unix_ms())
}

/// Up to 4 tickets a fan, 100 a second released: the promises' tests.
const PROMISING: &str = "max-qty = 4\ntoken-seconds = 60\nrelease = { mode = \"fixed\", rate = 100.0 }\n";

#[tokio::test]
async fn sold_out_for_now_keeps_places_and_stock_coming_back_lets_in_only_that_many() {
    // 100 fans queued, 100 tickets, none taken yet.
    let (rooms, room, t0) = selling("max-qty = 2\nrelease = { mode = \"fixed\", rate = 50.0 }\n", 100, 100).await;
    rooms.tick_room(&room, t0).await.unwrap();
    assert_eq!(room.state.counters().serving, 50);
    // Everything is held, some of it unpaid: sold out for now. Nobody is released, places are kept.
    room.sold_out.store(true, Ordering::Relaxed);
    room.restock_possible.store(true, Ordering::Relaxed);
    room.available.store(0, Ordering::Relaxed);
    *room.holds.lock() = Some((50, 100));
    rooms.tick_room(&room, t0 + 1000).await.unwrap();
    assert_eq!(room.state.counters().serving, 50);
    let t = QueueTicket { room: "r1".into(), position: 60, issued_at: 0, device: "d".into(), owner: "o".into(), owed: false, lane: 0 };
    let s = phase(rooms.status(&room, &t, "u59").await.unwrap());
    assert_eq!((s.state, s.restock_possible, s.position, s.ahead), (Phase::SoldOut, true, Some(60), Some(9)));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["restock_possible"], true);
    // A place the tickets in unpaid holds could reach asks every 5 s (a restock lets it in at
    // once, and its promise lapses if its fan does not come within the pickup window); one beyond
    // them asks less often.
    let far = QueueTicket { position: 400, ..t.clone() };
    for (held, low, high) in [(500, 4000, 6000), (300, 12_000, 18_000)] {
        room.held.store(held, Ordering::Relaxed);
        let s = phase(rooms.status(&room, &far, "u399").await.unwrap());
        assert_eq!((s.state, s.ahead), (Phase::SoldOut, Some(349)));
        assert!((low..=high).contains(&s.poll_after_ms), "{held} held: {}", s.poll_after_ms);
    }
    // Three unpaid holds timed out: the people those tickets serve go in, not fifty.
    room.sold_out.store(false, Ordering::Relaxed);
    room.restock_possible.store(false, Ordering::Relaxed);
    room.available.store(3, Ordering::Relaxed);
    rooms.tick_room(&room, t0 + 2000).await.unwrap();
    assert_eq!(
        room.state.counters().serving,
        52,
        "three tickets, two a fan: one fan for two and one for the odd ticket, not fifty"
    );
    let s = phase(rooms.status(&room, &t, "u59").await.unwrap());
    assert_eq!((s.state, s.ahead), (Phase::Waiting, Some(7)));
    assert!(serde_json::to_value(&s).unwrap().get("restock_possible").is_none(), "only while sold out");
    // Sold and paid to the last ticket: sold out for good, no place, slow polls.
    room.sold_out.store(true, Ordering::Relaxed);
    room.available.store(0, Ordering::Relaxed);
    let s = phase(rooms.status(&room, &t, "u59").await.unwrap());
    assert_eq!((s.state, s.restock_possible, s.position), (Phase::SoldOut, false, None));
    assert!(s.poll_after_ms >= 20_000);
}

/// Admission is a promise (issue #39): the release lets in only as many fans as the tickets left,
/// less those promised to the fans let in before, can serve; while every ticket left is promised
/// the fans behind say "sold out for now" (their places kept), and when the promised fans have
/// held (a hold settles its fan's whole promise) or their window passed (a short one for a fan
/// never admitted), the next ones are let in.
#[tokio::test]
async fn the_release_counts_the_tickets_already_promised() {
    let (rooms, room, t0) = selling(PROMISING, 200, 40).await;
    // 40 tickets, 4 a fan until measured: 10 fans, not a second's 100.
    rooms.tick_room(&room, t0).await.unwrap();
    assert_eq!(room.state.counters().serving, 10);
    rooms.tick_room(&room, t0 + 1000).await.unwrap();
    assert_eq!(room.state.counters().serving, 10, "all 40 promised");
    assert!(room.spoken_for.load(Ordering::Relaxed));
    assert_eq!(room.stats()["claims"], serde_json::json!({"open": 10, "promised": 40, "standby": 0, "spoken_for": true, "woken_by_holds": 0}));
    let behind = QueueTicket { room: "r1".into(), position: 11, issued_at: 0, device: "d".into(), owner: "o".into(), owed: false, lane: 0 };
    let s = phase(rooms.status(&room, &behind, "u10").await.unwrap());
    assert_eq!((s.state, s.restock_possible, s.ahead), (Phase::SoldOut, true, Some(0)), "sold out for now, the place kept");
    let front = QueueTicket { position: 10, ..behind.clone() };
    assert_eq!(phase(rooms.status(&room, &front, "u9").await.unwrap()).state, Phase::Admitted, "a fan let in is still admitted");
    // Six of the ten held, 1 ticket each: 34 left, 4 places open at 4 = 16 promised, 18 free.
    room.available.store(34, Ordering::Relaxed);
    *room.holds.lock() = Some((6, 6));
    rooms.tick_room(&room, t0 + 2000).await.unwrap();
    assert_eq!(room.state.counters().serving, 15, "four fans of 4 and one offered the last 2");
    assert!(!room.spoken_for.load(Ordering::Relaxed));
    assert_eq!(phase(rooms.status(&room, &behind, "u10").await.unwrap()).state, Phase::Admitted);
    // Another fan of the second step polls and is admitted: two of its five places are picked up.
    let late = QueueTicket { position: 13, ..behind.clone() };
    assert_eq!(phase(rooms.status(&room, &late, "u12").await.unwrap()).state, Phase::Admitted);
    // The tail: with 9 places open every ticket left is promised again (36 of 34). The first step's
    // four places left open were never picked up (its one fan admitted is settled first by the six
    // holds) and are past their standby time: its places were told to ask every second, which a
    // page's script stretches to 1.2 s at most, and 0.5 s for the session and the count
    // (`told::Pickup::standby_ms`: 1.7 s). Four fans behind stand by for their tickets.
    rooms.tick_room(&room, t0 + 2500).await.unwrap();
    assert_eq!(room.state.counters().serving, 19, "20 promised to the five who may still come, 14 unpromised: three fans of 4 and one offered the last 2");
    assert_eq!(
        room.stats()["claims"],
        serde_json::json!({"open": 13, "promised": 52, "standby": 4, "spoken_for": false, "woken_by_holds": 0})
    );
    assert_eq!(phase(rooms.status(&room, &behind, "u10").await.unwrap()).state, Phase::Admitted);
    // Nothing more for the same no-shows: the fans who stand by are promised their tickets.
    rooms.tick_room(&room, t0 + 3000).await.unwrap();
    assert_eq!(room.state.counters().serving, 19, "the standby fans are promised");
    // The first step's pickup window passes (2 s for the page without JavaScript, and 1.5 s of
    // slack in a room no other edge answers for: 3.5 s): its four lapse, and the fans who stood by
    // for them stay promised. The second step's five stand: its standby time (1.7 s after 2 s) is
    // not counted yet.
    rooms.tick_room(&room, t0 + 3500).await.unwrap();
    assert_eq!(room.state.counters().serving, 19, "within the second step's standby time");
    assert_eq!(room.stats()["claims"]["open"], 9);
    assert_eq!(room.stats()["claims"]["standby"], 0);
    // Counted past it: its three never admitted stand by, its two admitted stand (with the third
    // step's four): 6 promised, 24 tickets, 10 unpromised: two fans of 4 and one offered the last 2.
    rooms.tick_room(&room, t0 + 4000).await.unwrap();
    assert_eq!(room.state.counters().serving, 22, "two fans of 4 and one offered the last 2");
    assert_eq!(room.stats()["claims"]["standby"], 3);
    // Its window passes: its three lapse, and the fans who stood by for them stay promised. The
    // third step's four, never admitted, are past their standby time: four fans more, promised
    // 5 × 4 of the 34.
    rooms.tick_room(&room, t0 + 2000 + 3500).await.unwrap();
    assert_eq!(room.state.counters().serving, 26);
    assert_eq!(room.stats()["claims"]["open"], 13, "the second step's two admitted, the third's four, the fourth's three and the fifth's four");
    assert_eq!(room.stats()["claims"]["standby"], 4);
}

/// The release loop ticks at a sale's open ([`Rooms::next_opening_ms`]); that first tick lets in a
/// tick's worth however soon after the last tick before the open it comes, and the next ones
/// their time as before.
#[tokio::test]
async fn the_first_tick_at_the_open_lets_in_a_ticks_worth() {
    const OPEN_MS: u64 = 4_070_908_800_000; // 2099-01-01T00:00:00Z
    let rooms = rooms_with("schedule = { opens-at = \"2099-01-01T00:00:00Z\" }\nrelease = { mode = \"fixed\", rate = 100.0 }\n");
    let room = rooms.get("r1").unwrap();
    for i in 0..400 {
        rooms.join(&room, &format!("u{i}"), "d").await.unwrap();
    }
    assert_eq!(rooms.next_opening_ms(OPEN_MS - 5000), Some(OPEN_MS));
    assert_eq!(rooms.next_opening_ms(OPEN_MS), None, "open: nothing to wait for");
    rooms.tick_room(&room, OPEN_MS - 900).await.unwrap();
    rooms.tick_room(&room, OPEN_MS - 100).await.unwrap();
    assert_eq!(room.state.counters().serving, 0, "not open yet");
    rooms.tick_room(&room, OPEN_MS + 1).await.unwrap();
    assert_eq!(room.state.counters().serving, 100, "a tick's worth at the open, not 0.1 s's");
    rooms.tick_room(&room, OPEN_MS + 1001).await.unwrap();
    assert_eq!(room.state.counters().serving, 200);
    rooms.tick_room(&room, OPEN_MS + 1501).await.unwrap();
    assert_eq!(room.state.counters().serving, 250, "then the time since the last tick");
}

/// The steps between ticks (issue #39): what the promises held back at a tick goes in as the
/// holds made since settle them, a quarter of a second later rather than at the next tick —
/// never more than the tick's step allowed, never while the room is paused or sold out or this
/// edge does not lead; the next tick starts over.
#[tokio::test]
async fn the_promises_held_back_go_in_between_ticks_as_holds_settle_them() {
    // 40 tickets, 4 a fan: the tick's 100 held back to 10, 90 held back.
    let (rooms, room, t0) = selling(PROMISING, 200, 40).await;
    rooms.tick_room(&room, t0).await.unwrap();
    assert_eq!(room.state.counters().serving, 10);
    assert_eq!(room.book.lock().held_back, 90);
    assert_eq!(rooms.step_between(&room, t0 + 250).await.unwrap(), 0, "no hold yet");
    assert!(room.spoken_for.load(Ordering::Relaxed));
    // Six of the ten held, 1 ticket each (as at the tick of the test before): the same five go in
    // at once, and everything is promised again.
    room.available.store(34, Ordering::Relaxed);
    *room.holds.lock() = Some((6, 6));
    assert_eq!(rooms.step_between(&room, t0 + 500).await.unwrap(), 5);
    assert_eq!(room.state.counters().serving, 15, "four fans of 4 and one offered the last 2");
    assert_eq!(room.book.lock().held_back, 85);
    assert!(room.spoken_for.load(Ordering::Relaxed), "9 places open: every ticket promised again");
    let behind = QueueTicket { room: "r1".into(), position: 16, issued_at: 0, device: "d".into(), owner: "o".into(), owed: false, lane: 0 };
    let s = phase(rooms.status(&room, &behind, "u15").await.unwrap());
    assert_eq!((s.state, s.ahead), (Phase::SoldOut, Some(0)));
    assert!(s.poll_after_ms <= 1200, "the next fan asks within a second: {}", s.poll_after_ms);
    let front = QueueTicket { position: 15, ..behind.clone() };
    assert_eq!(phase(rooms.status(&room, &front, "u14").await.unwrap()).state, Phase::Admitted);
    // Paused: holds settle nothing into the queue until the operator resumes; sold out likewise.
    room.operate(t0 + 600, Action::Pause).unwrap();
    room.available.store(26, Ordering::Relaxed);
    *room.holds.lock() = Some((10, 14));
    assert_eq!(rooms.step_between(&room, t0 + 750).await.unwrap(), 0, "paused");
    assert_eq!(room.book.lock().held_back, 0, "a stop forgets what was held back");
    room.operate(t0 + 800, Action::Resume).unwrap();
    assert_eq!(rooms.step_between(&room, t0 + 1000).await.unwrap(), 0, "the next tick starts over");
    assert_eq!(room.state.counters().serving, 15);
    rooms.tick_room(&room, t0 + 1000).await.unwrap();
    let serving = room.state.counters().serving;
    assert!(serving > 15, "the tick lets in what the holds freed: {serving}");
    // A step whose answer never came (the store may have made it): its places are promised at
    // the next tick before anyone else goes in.
    room.book.lock().unkept_due = true;
    *room.holds.lock() = Some((20, 40));
    room.available.store(26, Ordering::Relaxed);
    assert_eq!(rooms.step_between(&room, t0 + 1250).await.unwrap(), 0, "a step's answer lost");
    room.book.lock().unkept_due = false;
    room.sold_out.store(true, Ordering::Relaxed);
    assert_eq!(rooms.step_between(&room, t0 + 1500).await.unwrap(), 0, "sold out");
    assert_eq!(room.state.counters().serving, serving);

    // The rate bounds it: 12 a second, the tick's 12 held back to 10, two go in between ticks
    // however many the holds free, and the places behind are not told "sold out for now".
    let (rooms, room, t0) = selling("max-qty = 4\ntoken-seconds = 60\nrelease = { mode = \"fixed\", rate = 12.0 }\n", 200, 40).await;
    rooms.tick_room(&room, t0).await.unwrap();
    assert_eq!((room.state.counters().serving, room.book.lock().held_back), (10, 2));
    room.available.store(30, Ordering::Relaxed);
    *room.holds.lock() = Some((10, 10));
    assert_eq!(rooms.step_between(&room, t0 + 250).await.unwrap(), 2);
    assert_eq!((room.state.counters().serving, room.book.lock().held_back), (12, 0));
    assert!(!room.spoken_for.load(Ordering::Relaxed), "tickets free: the places wait for the rate");
    assert_eq!(rooms.step_between(&room, t0 + 500).await.unwrap(), 0);
    // Its released places are in the book: they are promised at the next tick (2 open at 4 each, 22
    // free: 5 fans and one offered the last 2, bounded by the rate's 12).
    rooms.tick_room(&room, t0 + 1000).await.unwrap();
    assert_eq!(room.state.counters().serving, 18);

    // An edge that does not lead steps nothing between ticks.
    let (rooms, room, t0) = selling(PROMISING, 200, 40).await;
    rooms.tick_room(&room, t0).await.unwrap();
    room.leader.store(false, Ordering::Relaxed);
    room.available.store(34, Ordering::Relaxed);
    *room.holds.lock() = Some((6, 6));
    assert_eq!(rooms.step_between(&room, t0 + 250).await.unwrap(), 0);
    assert_eq!(room.state.counters().serving, 10);
}

/// A spell between two ticks that told the waiting places what no window bounds (an operator's
/// pause lifted within the second: paused places are told 4 s; the stock task's sold out, should
/// a tick fail after it) reaches the told record: the next step's places keep the longest window,
/// though no tick saw the spell (as the last test, whose second step's window is 3.5 s without it).
#[tokio::test]
async fn a_spell_between_ticks_gives_the_next_step_the_longest_window() {
    let (rooms, room, t0) = selling(PROMISING, 200, 40).await;
    rooms.tick_room(&room, t0).await.unwrap();
    rooms.tick_room(&room, t0 + 1000).await.unwrap();
    assert_eq!(room.state.counters().serving, 10, "all 40 promised");
    // Paused at 1.5 s, resumed at 1.6 s: no tick saw it.
    room.operate(t0 + 1500, Action::Pause).unwrap();
    room.operate(t0 + 1600, Action::Resume).unwrap();
    assert_eq!(room.unbounded_at_ms(), t0 + 1500, "the pause stamped, not the resume");
    room.available.store(34, Ordering::Relaxed);
    *room.holds.lock() = Some((6, 6));
    rooms.tick_room(&room, t0 + 2000).await.unwrap();
    assert_eq!(room.state.counters().serving, 15);
    // The first step's window (3.5 s) passes: its four never admitted lapse.
    rooms.tick_room(&room, t0 + 3500).await.unwrap();
    assert_eq!(room.state.counters().serving, 19);
    // The second step's five, none admitted, stand past 3.5 s: their window is 8 s.
    rooms.tick_room(&room, t0 + 2000 + 3500).await.unwrap();
    assert_eq!(room.state.counters().serving, 19, "the spell's step is not bounded by 3.5 s");
    rooms.tick_room(&room, t0 + 2000 + claims::PICKUP_MS - 500).await.unwrap();
    assert_eq!(room.state.counters().serving, 19);
    rooms.tick_room(&room, t0 + 2000 + claims::PICKUP_MS).await.unwrap();
    assert!(room.state.counters().serving > 19, "{:?}", room.state.counters());
    // The stock task's sold out stamps the same way.
    room.note_unbounded(t0 + 20_000);
    assert_eq!(room.unbounded_at_ms(), t0 + 20_000);
}

#[tokio::test]
async fn status_poll_interval_grows_with_distance_and_eta_has_a_band() {
    let rooms = rooms_with("release = { mode = \"fixed\", rate = 100.0 }\n");
    let room = rooms.get("r1").unwrap();
    room.set_measured_rate(100.0);
    room.set_release_rate(100.0);
    let near = QueueTicket { room: "r1".into(), position: 5, issued_at: 0, device: "d".into(), owner: "o".into(), owed: false, lane: 0 };
    let far = QueueTicket { room: "r1".into(), position: 1_000_000, issued_at: 0, device: "d".into(), owner: "o".into(), owed: false, lane: 0 };
    let n = phase(rooms.status(&room, &near, "x").await.unwrap());
    let f = phase(rooms.status(&room, &far, "y").await.unwrap());
    assert_eq!(f.ahead, Some(999_999));
    assert!(f.poll_after_ms > n.poll_after_ms, "{} vs {}", f.poll_after_ms, n.poll_after_ms);
    let eta = f.eta_seconds.unwrap();
    assert!(eta.low < 10_000 && eta.high > 10_000, "{eta:?}");
    assert!(f.poll_after_ms > 20_000, "far, and the stock not known: {}", f.poll_after_ms);
    // A place the tickets left could reach asks every 5 s at most (a step that frees promised
    // tickets reaches its fan within the promise's window); one beyond them may wait 30 s.
    room.available.store(2_000_000, Ordering::Relaxed);
    let f = phase(rooms.status(&room, &far, "y").await.unwrap());
    assert!(f.poll_after_ms <= 6000, "within reach of the stock: {}", f.poll_after_ms);
    room.available.store(500_000, Ordering::Relaxed);
    let f = phase(rooms.status(&room, &far, "y").await.unwrap());
    assert!(f.poll_after_ms > 20_000, "beyond the stock's reach: {}", f.poll_after_ms);
    // Tickets in unpaid holds may come back: the places they could reach ask as often.
    room.held.store(600_000, Ordering::Relaxed);
    let f = phase(rooms.status(&room, &far, "y").await.unwrap());
    assert!(f.poll_after_ms <= 6000, "within reach of the stock and the unpaid holds: {}", f.poll_after_ms);
    room.held.store(0, Ordering::Relaxed);
    // No rate yet (the sale opened since the last tick): the places the first steps could reach
    // ask again in 2 s, not 10 s behind their turn; the others in 10 s.
    room.set_measured_rate(0.0);
    room.set_release_rate(0.0);
    let mid = QueueTicket { position: 400_000, ..far.clone() };
    for (t, who, low, high) in [(&near, "x", 1600, 2400), (&mid, "z", 1600, 2400), (&far, "y", 8000, 12_000)] {
        let s = phase(rooms.status(&room, t, who).await.unwrap());
        assert!((low..=high).contains(&s.poll_after_ms), "{:?} ahead: {}", s.ahead, s.poll_after_ms);
    }
}


/// A proof-of-work room through [`Rooms`]: the place at the first arrival, status says the check
/// is owed, the place is not admitted at its turn without it (held back with a deadline), is
/// admitted once it is given, and an unproven place is lost after the grace.
#[tokio::test]
async fn a_pow_room_admits_in_arrival_order_whatever_the_order_of_the_proofs() {
    let rooms = rooms_with("bot-check = \"pow\"\nproof-grace-seconds = 1\n");
    let room = rooms.get("r1").unwrap();
    // A arrives first, B second; B proves first.
    let a = rooms.join_with(&room, "alice", "da", false).await.unwrap().unwrap();
    let b = rooms.join_with(&room, "bob", "db", false).await.unwrap().unwrap();
    assert!(a.owed && b.owed && (a.position, b.position) == (1, 2));
    let s = phase(rooms.status(&room, &a, "alice").await.unwrap());
    assert_eq!((s.state, s.proof_owed, s.position), (Phase::Waiting, Some("pow"), Some(1)));
    assert_eq!(serde_json::to_value(&s).unwrap()["proof_owed"], "pow");
    let b2 = rooms.join(&room, "bob", "db").await.unwrap();
    assert_eq!((b2.position, b2.owed), (2, false));
    let a2 = rooms.join(&room, "alice", "da").await.unwrap();
    assert_eq!((a2.position, a2.owed), (1, false));
    // One released: A (the first to arrive), not B.
    room.state.advance("n", 1).await.unwrap();
    assert_eq!(phase(rooms.status(&room, &a2, "alice").await.unwrap()).state, Phase::Admitted);
    assert_eq!(phase(rooms.status(&room, &b2, "bob").await.unwrap()).state, Phase::Waiting);
    // The old ticket (made while the check was owed) works too: the state has it as given.
    room.state.advance("n", 1).await.unwrap();
    assert_eq!(phase(rooms.status(&room, &b, "bob").await.unwrap()).state, Phase::Admitted);
    // C never proves: the release passes it without counting it, and D behind it gets in.
    let c = rooms.join_with(&room, "carol", "dc", false).await.unwrap().unwrap();
    let d = rooms.join(&room, "dave", "dd").await.unwrap();
    assert_eq!(room.state.advance("n", 1).await.unwrap(), d.position);
    assert_eq!(phase(rooms.status(&room, &d, "dave").await.unwrap()).state, Phase::Admitted);
    let s = phase(rooms.status(&room, &c, "carol").await.unwrap());
    assert_eq!((s.state, s.ahead, s.proof_owed, s.token.is_none()), (Phase::Waiting, Some(0), Some("pow"), true));
    assert!(s.proof_deadline_seconds.is_some_and(|d| d <= 1), "{s:?}");
    // Past the grace: the place is lost; the fan queues again at the back.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert!(matches!(rooms.status(&room, &c, "carol").await.unwrap(), StatusOutcome::Rejoin));
    let c2 = rooms.join_with(&room, "carol", "dc", false).await.unwrap().unwrap();
    assert!(c2.position > d.position && c2.owed, "{c2:?}");
    assert_eq!(room.admissions.load(Ordering::Relaxed), 3, "A, B and D; never C");
}

#[tokio::test]
async fn tickets_from_the_future_or_older_than_the_longest_wait_are_refused() {
    let rooms = rooms_with("schedule = { opens-at = \"2020-01-01T00:00:00Z\", closes-at = \"2020-01-01T02:00:00Z\" }\n");
    let room = rooms.get("r1").unwrap();
    let opens = parse_time("2020-01-01T00:00:00Z").unwrap() as u64;
    assert!(room.ticket_fresh(opens, opens + 60));
    assert!(room.ticket_fresh(opens, opens + 2 * 3600 + 3599), "the whole sale plus an hour");
    assert!(!room.ticket_fresh(opens, opens + 3 * 3600 + 1), "older than the longest wait");
    assert!(!room.ticket_fresh(opens + 3600, opens), "issued in the future");
    let open_ended = rooms_with("");
    let r = open_ended.get("r1").unwrap();
    assert!(r.ticket_fresh(1_000_000, 1_000_000 + 6 * 86_400));
    assert!(!r.ticket_fresh(1_000_000, 1_000_000 + 8 * 86_400));
}

#[test]
fn an_operator_override_from_another_edge_is_applied_once_and_a_bad_one_not_at_all() {
    let (here, there) = (rooms_with(""), rooms_with(""));
    let (a, b) = (here.get("r1").unwrap(), there.get("r1").unwrap());
    let fixed = a.operate(1, Action::Release { pace: Pace::Fixed(7.0), min: 5.0, max: 2000.0 }).unwrap();
    assert_eq!((fixed.mode.as_str(), fixed.release.as_deref(), fixed.rate), ("open", Some("fixed"), Some(7.0)));
    assert!(!a.apply_override(2, &fixed), "the edge that made it has it already");
    assert!(b.apply_override(2, &fixed));
    assert_eq!(b.mode(), ReleaseMode::Fixed(7.0));
    let paused = a.operate(3, Action::Pause).unwrap();
    assert!(b.apply_override(4, &paused));
    assert!(b.is_paused());
    // Resumed there by hand, the same stamp is not applied again; the pace set at run time stays.
    b.operate_here(5, Action::Resume).unwrap();
    assert!(!b.apply_override(6, &paused));
    assert_eq!(b.mode(), ReleaseMode::Fixed(7.0));
    for bad in [
        OperatorOverride { mode: "turbo".into(), ..paused.clone() },
        OperatorOverride { release: Some("fixed".into()), rate: None, ..paused.clone() },
        OperatorOverride { mode: "fixed".into(), release: None, rate: Some(f64::NAN), ..paused.clone() },
        OperatorOverride { min: 10.0, max: 1.0, ..paused.clone() },
    ] {
        assert!(!b.apply_override(7, &OperatorOverride { stamp: 99, ..bad }));
    }
    assert_eq!(b.mode(), ReleaseMode::Fixed(7.0));
}

/// Issue 26: rooms on one edge share one core. A room in play next to a busy one gets an equal
/// part of their total occupancy as its fair share; a room alone, or next to idle rooms, has none.
#[tokio::test]
async fn rooms_on_one_core_share_it_by_demand() {
    let rooms = rooms_with("");
    let a = rooms.get("r1").unwrap();
    // Alone: nothing to share.
    assert_eq!(rooms.fair_share(&a, 1200), None);
    let mut spec = a.spec().as_ref().clone();
    spec.id = "r2".into();
    rooms.insert(spec);
    let b = rooms.get("r2").unwrap();
    // A second room with nobody in it is not in play.
    assert_eq!(rooms.fair_share(&a, 1200), None);
    // Someone queued in the second room: it is in play, and the shares are max-min by demand: the
    // second room wants one place (its one fan), well under an equal part, so it is entitled to
    // it, and the first room's share is the rest of what the rooms hold.
    rooms.join(&b, "fan-1", "fan-1").await.unwrap();
    a.active.store(1200, Ordering::Relaxed);
    assert_eq!(rooms.fair_share(&b, 0), Some(1.0));
    assert_eq!(rooms.fair_share(&a, 1200), Some(1199.0));
    // The controller of the new room, under its share while the core is over target from the
    // other room's load, holds instead of cutting.
    let mut input = crate::controller::TickInput {
        now_ms: 1000,
        p99_ms: Some(300.0),
        samples: 1000,
        occupancy: 0.0,
        fair_share: rooms.fair_share(&b, 0),
        ..Default::default()
    };
    let d = b.controller.lock().tick(&input);
    assert_eq!(d.reason, crate::controller::Reason::OverShared);
    input.occupancy = 1200.0;
    input.fair_share = rooms.fair_share(&a, 1200);
    assert_eq!(a.controller.lock().tick(&input).reason, crate::controller::Reason::CutFar);
}

/// Issue 26: `release.weight`. Two rooms of weights 2 and 1 surging side by side on one core, each
/// with its own controller fed its fair share from the real room state (queues joined, places
/// released by `advance`), on a core whose P99 rises with the rooms' total sessions: once both
/// have settled, their sessions split the core 2:1. Equal weights split it evenly (the control).
#[tokio::test]
async fn rooms_of_weights_two_and_one_split_a_surged_core_two_to_one() {
    async fn run(weight_a: f64) -> (f64, f64) {
        let rooms = rooms_with(&format!("[rooms.release]\nstart = 50\nmin = 5\nmax = 2000\nweight = {weight_a}\n"));
        let a = rooms.get("r1").unwrap();
        assert_eq!(a.spec().config.release.weight, weight_a);
        let mut spec = a.spec().as_ref().clone();
        spec.id = "r2".into();
        spec.config.release.weight = 1.0;
        let b = rooms.insert(spec);
        for i in 0..6000 {
            for r in [&a, &b] {
                let who = format!("{}-fan-{i}", r.id);
                rooms.join(r, &who, &who).await.unwrap();
            }
        }
        // Sessions last 20 s; the core's P99 reaches the 100 ms target at 1,000 sessions.
        const SESSION_TICKS: usize = 20;
        let mut admitted: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
        let mut carry = [0.0f64; 2];
        let mut tail = [0.0f64; 2];
        let occ = |v: &Vec<u64>| v.iter().rev().take(SESSION_TICKS).sum::<u64>();
        for tick in 0..150u64 {
            let total = (occ(&admitted[0]) + occ(&admitted[1])) as f64;
            let p99 = 20.0 + 80.0 * (total / 1000.0).powi(3);
            for (k, room) in [&a, &b].into_iter().enumerate() {
                let active = occ(&admitted[k]);
                room.active.store(active, Ordering::Relaxed);
                let input = crate::controller::TickInput {
                    now_ms: 1_000 + tick * 1000,
                    p99_ms: Some(p99),
                    samples: 1000,
                    occupancy: active as f64,
                    fair_share: rooms.fair_share(room, active),
                    ..Default::default()
                };
                let d = room.controller.lock().tick(&input);
                let n = d.rate + carry[k];
                let whole = (n.floor() as u64).min(room.state.counters().waiting());
                carry[k] = (n - n.floor()).min(1.0);
                room.state.advance("n", whole).await.unwrap();
                admitted[k].push(whole);
                if tick >= 110 {
                    tail[k] += active as f64 / 40.0;
                }
            }
        }
        assert!(a.state.counters().waiting() > 0 && b.state.counters().waiting() > 0, "both still queued: a surge to the end");
        (tail[0], tail[1])
    }
    let (a, b) = run(2.0).await;
    assert!((1.7..=2.3).contains(&(a / b)), "weights 2:1 gave sessions {a:.0} : {b:.0}");
    assert!(a + b > 700.0, "the core is used: {a:.0} + {b:.0}");
    let (a, b) = run(1.0).await;
    assert!((0.85..=1.15).contains(&(a / b)), "weights 1:1 gave sessions {a:.0} : {b:.0}");
}

/// The weight reaches the shares: with both rooms wanting more, weights 3:1 give 3/4 and 1/4 of
/// what they hold; a room whose demand is under its weighted part still gets all it wants.
#[tokio::test]
async fn the_room_weight_divides_the_fair_share() {
    let rooms = rooms_with("[rooms.release]\nweight = 3\n");
    let a = rooms.get("r1").unwrap();
    let mut spec = a.spec().as_ref().clone();
    spec.id = "r2".into();
    spec.config.release.weight = 1.0;
    let b = rooms.insert(spec);
    for i in 0..1000 {
        rooms.join(&a, &format!("a{i}"), &format!("a{i}")).await.unwrap();
    }
    for i in 0..100 {
        rooms.join(&b, &format!("b{i}"), &format!("b{i}")).await.unwrap();
    }
    a.active.store(200, Ordering::Relaxed);
    b.active.store(600, Ordering::Relaxed);
    assert_eq!(rooms.fair_share(&a, 200), Some(600.0));
    assert_eq!(rooms.fair_share(&b, 600), Some(200.0));
    // The light room wants 10 + 100: under its quarter of 1,000, so it gets it all.
    a.active.store(990, Ordering::Relaxed);
    b.active.store(10, Ordering::Relaxed);
    assert_eq!(rooms.fair_share(&b, 10), Some(110.0));
    assert!(rooms.fair_share(&a, 990).is_some_and(|s| (s - 890.0).abs() < 1e-6));
    let stats = a.stats();
    assert_eq!(stats["weight"], 3.0);
}

#[test]
fn reject_all_is_published_as_its_own_mode_and_only_resume_ends_it() {
    let (here, there) = (rooms_with(""), rooms_with(""));
    let (a, b) = (here.get("r1").unwrap(), there.get("r1").unwrap());
    a.operate(1, Action::Release { pace: Pace::Fixed(7.0), min: 5.0, max: 2000.0 }).unwrap();
    let o = a.operate(2, Action::RejectAll).unwrap();
    assert!(a.rejecting() && !a.is_paused() && a.mode() == ReleaseMode::Paused, "releases stop, and it is not a pause");
    assert_eq!(o.mode, "reject_all");
    assert!(b.apply_override(3, &o));
    assert!(b.rejecting());
    assert!(!b.passing(&b.spec()), "a passthrough check never lets anyone through");
    // Neither a hold nor a rate change lifts it.
    assert_eq!(b.operate(4, Action::Pause).unwrap_err().mode, Mode::RejectAll);
    assert_eq!(b.operate(4, Action::QueueAll).unwrap_err().mode, Mode::RejectAll);
    b.operate(4, Action::Release { pace: Pace::Fixed(30.0), min: 5.0, max: 2000.0 }).unwrap();
    assert!(b.rejecting() && b.mode() == ReleaseMode::Paused);
    b.operate(5, Action::Resume).unwrap();
    assert!(!b.rejecting());
    assert_eq!(b.mode(), ReleaseMode::Fixed(30.0), "the pace set during the stop");
    a.operate(5, Action::Resume).unwrap();
    assert_eq!(a.mode(), ReleaseMode::Fixed(7.0), "here, the pace in force before");
    assert!(!a.rejecting());
}

#[test]
fn a_new_room_config_never_lifts_the_operators_mode() {
    let rooms = rooms_with("");
    let room = rooms.get("r1").unwrap();
    for hold in [Action::Pause, Action::QueueAll, Action::RejectAll] {
        room.operate(1, Action::Resume).unwrap();
        room.operate(1, hold).unwrap();
        let mode = room.operator_mode();
        let mut spec = (*room.spec()).clone();
        spec.config.release.mode = super::config::ReleaseModeConfig::Fixed;
        spec.config.release.rate = Some(40.0 + f64::from(mode.code()));
        room.set_spec(spec);
        assert_eq!(room.operator_mode(), mode, "{} survives a new release config", hold.name());
        assert_ne!(room.mode(), ReleaseMode::Fixed(40.0 + f64::from(mode.code())));
        room.operate(2, Action::Resume).unwrap();
        assert_eq!(room.mode(), ReleaseMode::Fixed(40.0 + f64::from(mode.code())), "the new pace once resumed");
    }
}

#[test]
fn tickets_left_is_exact_under_100_then_two_figures_rounded_down() {
    for (available, shown) in [
        (0, 0),
        (1, 1),
        (99, 99),
        (100, 100),
        (199, 190),
        (1_234, 1_200),
        (1_299, 1_200),
        (9_999, 9_900),
        (12_345, 12_000),
        (987_654_321, 980_000_000),
        (u64::MAX - 1, 18_000_000_000_000_000_000),
    ] {
        assert_eq!(tickets_left(available), Some(shown), "{available}");
        assert!(shown <= available, "never more than there are");
    }
    assert_eq!(tickets_left(u64::MAX), None, "not known before the core's first answer");
}

#[tokio::test]
async fn the_status_says_the_tickets_left_once_the_core_has_said_them() {
    let rooms = rooms_with("release = { mode = \"fixed\", rate = 1.0 }\n");
    let room = rooms.get("r1").unwrap();
    for i in 0..10 {
        rooms.join(&room, &format!("u{i}"), "d").await.unwrap();
    }
    let t = QueueTicket { room: "r1".into(), position: 8, issued_at: 0, device: "d".into(), owner: "o".into(), owed: false, lane: 0 };
    // Before the core's first stock answer: no figure, not a zero.
    let s = phase(rooms.status(&room, &t, "u7").await.unwrap());
    assert_eq!((s.state, s.tickets_left), (Phase::Waiting, None));
    assert!(serde_json::to_value(&s).unwrap().get("tickets_left").is_none(), "omitted while unknown");
    room.available.store(1_234, Ordering::Relaxed);
    let s = phase(rooms.status(&room, &t, "u7").await.unwrap());
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!((&json["state"], &json["ahead"], &json["tickets_left"]), (&serde_json::json!("waiting"), &serde_json::json!(7), &serde_json::json!(1_200)));
    // The fast path (no write) says the same; sold out for now says the last figure, 0.
    assert_eq!(rooms.waiting_status(&room, &t).unwrap().tickets_left, Some(1_200));
    room.sold_out.store(true, Ordering::Relaxed);
    room.restock_possible.store(true, Ordering::Relaxed);
    room.available.store(0, Ordering::Relaxed);
    let s = phase(rooms.status(&room, &t, "u7").await.unwrap());
    assert_eq!((s.state, s.tickets_left), (Phase::SoldOut, Some(0)));
}

/// A hold answered through this edge (issue #39) wakes the release loop for a step between ticks
/// at once — only for a room of that event that this edge leads and whose last step the promises
/// held back; holds coming while the loop is busy leave one wake, not one each.
#[tokio::test]
async fn a_hold_answered_here_wakes_the_step_between_ticks_only_while_promises_hold_one_back() {
    let (rooms, room, t0) = selling(PROMISING, 200, 40).await;
    let event = room.spec().config.event.clone();
    let woken = || async { tokio::time::timeout(std::time::Duration::from_millis(20), rooms.hold_nudge.notified()).await.is_ok() };
    assert!(!rooms.hold_answered(&event), "nothing held back before the first tick");
    rooms.tick_room(&room, t0).await.unwrap();
    assert_eq!(room.book.lock().held_back, 90);
    assert!(!rooms.hold_answered("another-event"), "another event's hold");
    assert!(!woken().await);
    assert!(rooms.hold_answered(&event));
    assert!(rooms.hold_answered(&event));
    assert!(woken().await);
    assert!(!woken().await, "two holds, one wake");
    room.leader.store(false, Ordering::Relaxed);
    assert!(!rooms.hold_answered(&event), "a follower's holds wait for the leader's own beat");
    room.leader.store(true, Ordering::Relaxed);
    // A paused room's step forgets what was held back: holds wake nothing until a tick holds some
    // back again.
    room.operate(t0 + 600, Action::Pause).unwrap();
    assert_eq!(rooms.step_between(&room, t0 + 700).await.unwrap(), 0);
    assert!(!rooms.hold_answered(&event), "paused");
}
