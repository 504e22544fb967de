//! Passthrough rooms (`queue = "when-needed"`, issue #26 item 4), against a real edge and origin:
//! under its thresholds a fan's first request of a protected path reaches the origin in one round
//! trip (admitted on the spot, the admission cookie set on the origin's answer); once a threshold
//! is crossed the queue forms and admits in join order; when the queue is empty and the room is
//! under its thresholds again, fans pass straight through again. The stats say which state the
//! room is in. A room with the default (`always`) queues everyone, as before.
//!
//! `cargo nextest run -p wicket-edge --test passthrough`

mod common;

use std::time::{Duration, Instant};

use common::*;

/// An edge with room r1 guarding `/buy/ev-1`, passthrough while fewer than `active_max` sessions
/// run, releasing 4/s once the queue is on.
fn passthrough_edge(origin: &TestUpstream, queue: &str, active_max: u64) -> TestEdge {
    passthrough_edge_per_minute(origin, queue, active_max, 1000)
}

/// [`passthrough_edge`] with its `new-per-minute`.
fn passthrough_edge_per_minute(origin: &TestUpstream, queue: &str, active_max: u64, per_minute: u64) -> TestEdge {
    TestEdge::start(&format!(
        "origin = \"{}\"\n{}\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         queue = \"{queue}\"\n\
         release = {{ mode = \"fixed\", rate = 4.0 }}\n\
         [rooms.passthrough]\nactive-max = {active_max}\nnew-per-minute = {per_minute}\n",
        origin.url(),
        hs_tokens(),
    ))
}

async fn room_stats(edge: &TestEdge) -> serde_json::Value {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let r = get(&format!("http://{}/admin/rooms/r1", edge.admin), &[("authorization", &auth), ("host", "127.0.0.1")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// The room's stats object, wherever the admin answer nests it.
fn stats_of(v: &serde_json::Value) -> &serde_json::Value {
    if v.get("passing").is_some() { v } else { &v["stats"] }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_its_thresholds_a_fan_goes_straight_through_and_over_them_the_queue_forms_in_join_order() {
    let origin = TestUpstream::start("origin").await;
    let edge = passthrough_edge(&origin, "when-needed", 3);
    assert_eq!(stats_of(&room_stats(&edge).await)["passing"], true);

    // Under the thresholds: one round trip to the origin, admitted on the spot.
    let mut through = Vec::new();
    for i in 0..3 {
        let mut fan = Fan::default();
        let r = fan.get(&edge.url("/buy/ev-1")).await;
        assert_eq!(r.status, 200, "fan {i}: {}", r.text());
        let v = r.json();
        assert_eq!(v["upstream"], "origin");
        assert_eq!(v["headers"]["wicket-room"], "r1", "{v}");
        assert!(v["headers"]["wicket-user"].as_str().is_some_and(|u| !u.is_empty()), "{v}");
        assert!(v["headers"]["cookie"].as_str().is_none_or(|c| !c.contains("wicket_a_")), "the admission token never reaches the origin: {v}");
        assert!(fan.jar.contains_key("wicket_a_r1") && fan.jar.contains_key("wicket_d"), "{:?}", fan.jar);
        through.push(fan);
    }
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::SeqCst), 3, "one request each");
    // The admission holds on the next request (the session, not a new place).
    let r = through[0].get(&edge.url("/buy/ev-1/next")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let issued_before = stats_of(&room_stats(&edge).await)["issued"].as_u64().unwrap();
    assert_eq!(issued_before, 3, "each fan took one place");

    // Three sessions run: the threshold is crossed, the queue is on.
    let stats = room_stats(&edge).await;
    assert_eq!(stats_of(&stats)["passing"], false, "{stats}");
    let mut queued = Vec::new();
    for i in 0..8 {
        let mut fan = Fan::default();
        let r = fan.get(&edge.url("/buy/ev-1")).await;
        assert_eq!(r.status, 403, "fan {i} must queue: {}", r.text());
        assert_eq!(r.json()["queue"], "/queue/r1");
        let r = fan.join(&edge.url(""), "r1").await;
        assert_eq!(r.status, 200, "{}", r.text());
        queued.push(fan);
    }
    // Admitted in join order: each fan's admission is seen in a round no earlier than the one
    // before it in the line. A release step may come between two fans' looks in one round, so
    // once a fan is seen admitted, everyone ahead of it not yet seen is asked again at once: they
    // must be in by then (and count as seen in this round).
    let mut admitted_in_round = vec![None; queued.len()];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    while admitted_in_round.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "not all admitted: {admitted_in_round:?}");
        for i in 0..queued.len() {
            if admitted_in_round[i].is_none() && queued[i].status(&edge.url(""), "r1").await["state"] == "admitted" {
                admitted_in_round[i] = Some(round);
                for j in 0..i {
                    if admitted_in_round[j].is_none() {
                        let v = queued[j].status(&edge.url(""), "r1").await;
                        assert_eq!(v["state"], "admitted", "fan {j} is behind fan {i}, admitted before it: {v}");
                        admitted_in_round[j] = Some(round);
                    }
                }
            }
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rounds: Vec<u32> = admitted_in_round.into_iter().map(Option::unwrap).collect();
    assert!(rounds.windows(2).all(|w| w[0] <= w[1]), "admitted out of join order: {rounds:?}");
    for fan in &mut queued {
        assert_eq!(fan.get(&edge.url("/buy/ev-1")).await.status, 200, "an admitted fan reaches the page");
    }

    // Sessions end (the origin revokes them): the queue is empty and under the threshold again,
    // so the room dissolves its queue and fans pass straight through once more.
    for fan in through.iter_mut().chain(queued.iter_mut()) {
        assert_eq!(fan.get(&edge.url("/buy/ev-1/revoke")).await.status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats_of(&room_stats(&edge).await)["passing"] != true {
        assert!(Instant::now() < deadline, "the queue did not dissolve: {}", room_stats(&edge).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut late = Fan::default();
    let r = late.get(&edge.url("/buy/ev-1")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["headers"]["wicket-room"], "r1");
}

/// The stats say what a visitor meets: once this edge's `new-per-minute` is spent, `passing` is
/// false for the rest of the minute, as the next visitor is sent to the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_say_not_passing_once_the_minutes_budget_is_spent() {
    let origin = TestUpstream::start("origin").await;
    let edge = passthrough_edge_per_minute(&origin, "when-needed", 100, 2);
    // (A minute's turn between the two fans would give a fresh budget: start early in one.)
    let into_minute = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() % 60;
    if into_minute > 50 {
        tokio::time::sleep(Duration::from_secs(61 - into_minute)).await;
    }
    for i in 0..2 {
        assert_eq!(stats_of(&room_stats(&edge).await)["passing"], true, "before fan {i}");
        let r = Fan::default().get(&edge.url("/buy/ev-1")).await;
        assert_eq!(r.status, 200, "fan {i}: {}", r.text());
    }
    let stats = room_stats(&edge).await;
    assert_eq!(stats_of(&stats)["passing"], false, "the minute's budget is spent: {stats}");
    let r = Fan::default().get(&edge.url("/buy/ev-1")).await;
    assert_eq!(r.status, 403, "the third fan queues, as the stats say: {}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_that_always_queues_sends_the_first_fan_to_the_queue() {
    let origin = TestUpstream::start("origin").await;
    let edge = passthrough_edge(&origin, "always", 3);
    assert_eq!(stats_of(&room_stats(&edge).await)["passing"], false);
    let mut fan = Fan::default();
    let r = fan.get(&edge.url("/buy/ev-1")).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// Hostile: a forged or another room's admission cookie is not a pass; a passthrough admission
/// is a place like any other (one per identity: the same fan twice takes one place), and bad
/// thresholds are refused with their paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_takes_one_place_per_fan_and_bad_settings_are_refused() {
    let origin = TestUpstream::start("origin").await;
    let edge = passthrough_edge(&origin, "when-needed", 100);
    let mut fan = Fan::default();
    fan.jar.insert("wicket_a_r1".into(), "forged.token.value".into());
    let r = fan.get(&edge.url("/buy/ev-1")).await;
    assert_eq!(r.status, 200, "a forged cookie is ignored and the fan passes as a new visitor: {}", r.text());
    assert_ne!(fan.jar["wicket_a_r1"], "forged.token.value");
    // The same fan without their admission cookie (cleared) comes back: the same place.
    fan.jar.remove("wicket_a_r1");
    assert_eq!(fan.get(&edge.url("/buy/ev-1")).await.status, 200);
    assert_eq!(stats_of(&room_stats(&edge).await)["issued"], 1, "one identity, one place");

    let bad = wicket_edge::WicketConfig::from_toml_str(&format!(
        "[edge]\nsecret = \"{SECRET}\"\n{}\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nqueue = \"when-needed\"\nmethod = \"random\"\n\
         [rooms.passthrough]\nactive-max = 0\nnew-per-minute = 0\n",
        hs_tokens()
    ));
    let text = match bad {
        Err(e) => format!("{e}"),
        Ok(c) => format!("{:?}", c.validate()),
    };
    for path in ["rooms[0].passthrough.active-max", "rooms[0].passthrough.new-per-minute", "rooms[0].queue"] {
        assert!(text.contains(path), "{path} not named: {text}");
    }
    let unknown = wicket_edge::WicketConfig::from_toml_str(&format!(
        "[edge]\nsecret = \"{SECRET}\"\n{}[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nqueue = \"sometimes\"\n",
        hs_tokens()
    ));
    let text = match unknown {
        Err(e) => format!("{e}"),
        Ok(c) => format!("{:?}", c.validate()),
    };
    assert!(text.contains("rooms[0]") && text.contains("sometimes"), "an unknown queue mode is refused, naming it: {text}");
}
