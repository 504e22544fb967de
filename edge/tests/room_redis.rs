//! Two edges on one real Redis (two `Rooms` with the same secret, as two edge processes would
//! be configured): one queue, one serving counter advanced by the leader only, sessions shared,
//! the pre-queue frozen once, and leader failover when the leader stops.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use wicket_edge::WicketConfig;
use wicket_edge::identity::Signer;
use wicket_edge::room::config::parse_time;
use wicket_edge::room::redis::{RedisRooms, RoomStore};
use wicket_edge::room::release::LEASE_MS;
use wicket_edge::room::state_backend::Backend;
use wicket_edge::room::{Phase, Room, Rooms, StatusOutcome, unix_ms};
use wicket_testkit::{RedisCluster, RedisServer};

fn edge(url: &str, room_toml: &str) -> Rooms {
    let text = format!(
        "store = \"{url}\"\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\n\
         secret = \"hs-secret-for-room-tests-0123456789abcdef\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n{room_toml}\n"
    );
    let cfg = WicketConfig::from_toml_str(&text).unwrap();
    assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
    assert_eq!(cfg.room_store, Some(RoomStore::Url(url.to_owned())));
    // Edges sharing a queue share the edge secret: identities hash the same on both.
    Rooms::new(cfg.rooms_config(), Signer::new(b"shared-edge-secret-0123"), Backend::Redis(RedisRooms::new(url).unwrap())).unwrap()
}

/// Two edges on `redis` sharing a room of up to 4 tickets a fan released at a fixed `rate`, 100
/// fans queued through the first, `tickets` left on both (none held yet: every edge reads the
/// core's stock), each edge ticked once at the time returned: the first leads.
async fn selling(redis: &RedisServer, rate: f64, tickets: u64) -> (Rooms, Rooms, Arc<Room>, Arc<Room>, u64) {
    let room = format!("max-qty = 4\ntoken-seconds = 60\nrelease = {{ mode = \"fixed\", rate = {rate:?} }}\n");
    let (a, b) = (edge(&redis.url(), &room), edge(&redis.url(), &room));
    let (ra, rb) = (a.get("r1").unwrap(), b.get("r1").unwrap());
    for i in 0..100 {
        a.join(&ra, &format!("u{i}"), "d").await.unwrap();
    }
    for r in [&ra, &rb] {
        r.available.store(tickets, Ordering::Relaxed);
        *r.holds.lock() = Some((0, 0));
    }
    let t0 = unix_ms();
    a.tick_room(&ra, t0).await.unwrap();
    b.tick_room(&rb, t0).await.unwrap();
    (a, b, ra, rb, t0)
}

fn status(o: StatusOutcome) -> wicket_edge::room::Status {
    match o {
        StatusOutcome::Status(s) => s,
        StatusOutcome::Rejoin => panic!("unexpected rejoin"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_one_queue_one_serving_counter_and_leader_failover() {
    let redis = RedisServer::start();
    let a = edge(&redis.url(), "release = { mode = \"fixed\", rate = 5.0 }\n");
    let b = edge(&redis.url(), "release = { mode = \"fixed\", rate = 5.0 }\n");
    let (ra, rb) = (a.get("r1").unwrap(), b.get("r1").unwrap());
    // One queue: joins through either edge take the next place of one counter.
    let mut tickets = Vec::new();
    for i in 0..200u64 {
        let (rooms, room) = if i % 2 == 0 { (&a, &ra) } else { (&b, &rb) };
        let t = rooms.join(room, &format!("u{i}"), "dev").await.unwrap();
        assert_eq!(t.position, i + 1);
        tickets.push(t);
    }
    // The same user through the other edge keeps the place.
    assert_eq!(b.join(&rb, "u0", "other-dev").await.unwrap().position, 1);
    assert_eq!(a.join(&ra, "u1", "other-dev").await.unwrap().position, 2);
    // Exactly one leader.
    let t0 = unix_ms();
    a.tick_room(&ra, t0).await.unwrap();
    b.tick_room(&rb, t0).await.unwrap();
    let (la, lb) = (ra.leader.load(Ordering::Relaxed), rb.leader.load(Ordering::Relaxed));
    assert!(la ^ lb, "one leader: a={la} b={lb}");
    let (leader, lroom, follower, froom) = if la { (&a, &ra, &b, &rb) } else { (&b, &rb, &a, &ra) };
    // A follower cannot move the shared counter.
    let before = froom.state.refresh().await.unwrap().serving;
    assert_eq!(froom.state.advance(&follower.node, 50).await.unwrap(), before);
    assert_eq!(froom.state.refresh().await.unwrap().serving, before);
    // Both edges tick every second; serving moves at one edge's rate (5/s), not two.
    for k in 1..=4 {
        leader.tick_room(lroom, t0 + k * 1000).await.unwrap();
        follower.tick_room(froom, t0 + k * 1000).await.unwrap();
    }
    let serving = lroom.state.refresh().await.unwrap().serving;
    assert_eq!(serving, 25, "5 ticks × 5/s by the leader alone");
    assert_eq!(froom.state.refresh().await.unwrap().serving, 25, "the follower reads the same counter");
    // Admission and sessions are shared: admitted through one edge, revoked through the other.
    let s = status(follower.status(froom, &tickets[0], "u0").await.unwrap());
    assert_eq!(s.state, Phase::Admitted);
    assert!(leader.session_ok("r1", "u0", Some("u0"), None).await.unwrap());
    leader.revoke("r1", "u0").await;
    assert!(!follower.session_ok("r1", "u0", Some("u0"), None).await.unwrap());
    assert!(matches!(follower.status(froom, &tickets[0], "u0").await.unwrap(), StatusOutcome::Rejoin));
    assert_eq!(follower.join(froom, "u0", "dev").await.unwrap().position, 201, "a spent place queues at the back");
    // Someone past serving is not admitted on either edge.
    for (rooms, room) in [(&a, &ra), (&b, &rb)] {
        assert_eq!(status(rooms.status(room, &tickets[30], "u30").await.unwrap()).state, Phase::Waiting);
    }
    // Failover: the leader stops (no resign, no renewal). Until its lease runs out the follower
    // stays a follower; then it takes over and the queue moves on.
    let t1 = unix_ms();
    follower.tick_room(froom, t1).await.unwrap();
    assert!(!froom.leader.load(Ordering::Relaxed), "the lease still holds");
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 300)).await;
    let t2 = unix_ms();
    follower.tick_room(froom, t2).await.unwrap();
    assert!(froom.leader.load(Ordering::Relaxed), "the follower took over");
    follower.tick_room(froom, t2 + 1000).await.unwrap();
    assert!(froom.state.refresh().await.unwrap().serving > 25, "the queue moves on under the new leader");
    // The old leader comes back: it is a follower now.
    leader.tick_room(lroom, t2 + 1000).await.unwrap();
    assert!(!lroom.leader.load(Ordering::Relaxed));
    // A graceful stop hands over at once.
    follower.resign_all().await;
    leader.tick_room(lroom, t2 + 2000).await.unwrap();
    assert!(lroom.leader.load(Ordering::Relaxed), "resign frees the lease at once");
}

/// Admission is a promise across a failover (issue #39): the leader keeps its book of promises in
/// Redis each tick, and the edge that takes its lease over goes on from it — the places the old
/// leader let in stay promised instead of a second full round let in on the same tickets; places
/// picked up through either edge count; places never picked up lapse under the new leader as they
/// would have under the old. A leader that lost its lease cannot overwrite its successor's book.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_keeps_the_promises_of_the_old() {
    let redis = RedisServer::start();
    let room = "max-qty = 4\ntoken-seconds = 60\nrelease = { mode = \"fixed\", rate = 100.0 }\n";
    let (a, b) = (edge(&redis.url(), room), edge(&redis.url(), room));
    let (ra, rb) = (a.get("r1").unwrap(), b.get("r1").unwrap());
    let mut tickets = Vec::new();
    for i in 0..100 {
        tickets.push(a.join(&ra, &format!("u{i}"), "d").await.unwrap());
    }
    // 40 tickets, none held yet (every edge reads the core's stock).
    for r in [&ra, &rb] {
        r.available.store(40, Ordering::Relaxed);
        *r.holds.lock() = Some((0, 0));
    }
    let t0 = unix_ms();
    a.tick_room(&ra, t0).await.unwrap();
    b.tick_room(&rb, t0).await.unwrap();
    assert!(ra.leader.load(Ordering::Relaxed) && !rb.leader.load(Ordering::Relaxed));
    assert_eq!(ra.state.refresh().await.unwrap().serving, 10, "40 tickets, 4 a fan until measured");
    assert!(rb.state.kept_book().await.unwrap().is_some(), "the leader kept its book");
    // Two of the ten are admitted through the other edge: picked up.
    for (i, t) in tickets.iter().enumerate().take(2) {
        assert_eq!(status(b.status(&rb, t, &format!("u{i}")).await.unwrap()).state, Phase::Admitted);
    }
    // The leader dies (no resign); once its lease runs out the other edge leads, from its book.
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 300)).await;
    b.tick_room(&rb, t0 + 1000).await.unwrap();
    assert!(rb.leader.load(Ordering::Relaxed), "the follower took over");
    assert_eq!(rb.state.refresh().await.unwrap().serving, 10, "the old leader's ten still hold all 40 tickets: nobody more");
    assert_eq!(rb.stats()["claims"], serde_json::json!({"open": 10, "promised": 40, "standby": 0, "spoken_for": true, "woken_by_holds": 0}));
    b.tick_room(&rb, t0 + 2000).await.unwrap();
    assert_eq!(rb.state.refresh().await.unwrap().serving, 10);
    // The old leader comes back a follower: its stale book does not overwrite the new one.
    a.tick_room(&ra, t0 + 2000).await.unwrap();
    assert!(!ra.leader.load(Ordering::Relaxed));
    let kept = rb.state.kept_book().await.unwrap();
    assert!(!ra.state.keep_book(&a.node, "{}", 15_000).await.unwrap(), "refused: not the lease holder");
    assert_eq!(rb.state.kept_book().await.unwrap(), kept, "only the lease holder keeps the book");
    // The first step's pickup window passes under the new leader: its 8 places never picked up
    // lapse, the 2 admitted stand (8 tickets): 32 unpromised, 8 fans more.
    b.tick_room(&rb, t0 + wicket_edge::room::claims::PICKUP_MS).await.unwrap();
    assert_eq!(rb.state.refresh().await.unwrap().serving, 18, "8 lapsed of the old leader's step, 2 picked up still promised");
    assert_eq!(rb.stats()["claims"]["open"], 10);
}

/// Steps between ticks (issue #39) on a shared room: only the leader makes them, its book keeps
/// their places for the next leader, and an edge whose lease went to another while it still
/// believes it leads moves nothing (the store refuses it) and learns it follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_between_ticks_are_the_leaders_and_reach_its_book() {
    let redis = RedisServer::start();
    let (a, b, ra, rb, t0) = selling(&redis, 100.0, 40).await;
    assert!(ra.leader.load(Ordering::Relaxed) && !rb.leader.load(Ordering::Relaxed));
    assert_eq!(ra.state.refresh().await.unwrap().serving, 10, "40 tickets, 4 a fan");
    // Six of the ten hold, 1 ticket each: the leader lets five in between ticks, the follower none.
    for r in [&ra, &rb] {
        r.available.store(34, Ordering::Relaxed);
        *r.holds.lock() = Some((6, 6));
    }
    assert_eq!(b.step_between(&rb, t0 + 250).await.unwrap(), 0, "a follower steps nothing");
    assert_eq!(a.step_between(&ra, t0 + 250).await.unwrap(), 5);
    assert_eq!(rb.state.refresh().await.unwrap().serving, 15);
    let kept = rb.state.kept_book().await.unwrap().expect("kept");
    assert!(kept.contains("\"to\":15"), "the step between ticks reached the book: {kept}");
    // The leader dies; the follower takes over from the book: the five let in between ticks stay
    // promised (9 places open at 4: 36 of the 34 left), nobody more goes in.
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 300)).await;
    b.tick_room(&rb, t0 + 1000).await.unwrap();
    assert!(rb.leader.load(Ordering::Relaxed), "the follower took over");
    assert_eq!(rb.state.refresh().await.unwrap().serving, 15, "every ticket promised: nobody more");
    assert_eq!(rb.stats()["claims"]["open"], 9);
    // The old leader still believes it leads and holds back what its tick did: the store refuses
    // its step, and it follows from then on.
    assert!(ra.leader.load(Ordering::Relaxed));
    ra.available.store(30, Ordering::Relaxed);
    *ra.holds.lock() = Some((9, 9));
    assert_eq!(a.step_between(&ra, t0 + 1250).await.unwrap(), 0, "not the lease holder: nothing moves");
    assert_eq!(rb.state.refresh().await.unwrap().serving, 15);
    assert!(!ra.leader.load(Ordering::Relaxed), "it learnt it follows");
}

/// The takeover's corners (issue #39, review of the book's takeover): an edge whose ticks stopped
/// for longer than the lease while another led takes its lease back from the other's book, not
/// its own stale one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_back_from_silence_goes_on_from_its_successors_book() {
    let redis = RedisServer::start();
    let (a, b, ra, rb, t0) = selling(&redis, 100.0, 40).await;
    assert!(ra.leader.load(Ordering::Relaxed));
    assert_eq!(ra.state.refresh().await.unwrap().serving, 10, "40 tickets, 4 a fan");
    // The leader's ticks stop (its store unreachable from it, say); the other edge takes over from
    // its book. Eight of the ten hold: two stay promised, and six more fans go in on the 32 left.
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 300)).await;
    rb.available.store(32, Ordering::Relaxed);
    *rb.holds.lock() = Some((8, 8));
    b.tick_room(&rb, t0 + 1000).await.unwrap();
    assert!(rb.leader.load(Ordering::Relaxed));
    assert_eq!(rb.state.refresh().await.unwrap().serving, 16, "2 open + 6 new fans, 4 each: all 32 promised");
    // The successor stops as well; the first edge's ticks come back. It still believes it leads
    // (none of its ticks failed where it could see it), but its lease lapsed: it takes it back
    // from the successor's book. Its own says 10 let in and none held: 8 holds would settle 8 and
    // let 6 more in, on the 32 tickets the successor's 8 open places are promised.
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 300)).await;
    ra.available.store(32, Ordering::Relaxed);
    *ra.holds.lock() = Some((8, 8));
    assert!(ra.leader.load(Ordering::Relaxed), "it thinks it still leads");
    a.tick_room(&ra, t0 + 5000).await.unwrap();
    assert!(ra.leader.load(Ordering::Relaxed));
    assert_eq!(ra.state.refresh().await.unwrap().serving, 16, "every ticket is promised: nobody more");
    assert_eq!(ra.stats()["claims"], serde_json::json!({"open": 8, "promised": 32, "standby": 0, "spoken_for": true, "woken_by_holds": 0}));
}

/// A leader that let places in and died before keeping its book: the edge that takes over
/// promises them (the book says where `serving` stood at its last step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn places_let_in_after_the_last_book_kept_stay_promised() {
    let redis = RedisServer::start();
    let (a, b, ra, rb, t0) = selling(&redis, 10.0, 80).await;
    assert_eq!(ra.state.refresh().await.unwrap().serving, 10, "10 a second");
    // Its next step is made, and it dies before keeping the book.
    let step = ra.state.advance_lane(&a.node, 5, 0, t0 + 1000).await.unwrap();
    assert_eq!(step.serving, 15);
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 300)).await;
    b.tick_room(&rb, t0 + 2000).await.unwrap();
    assert!(rb.leader.load(Ordering::Relaxed));
    // 15 promised 60 of the 80: five more, not ten (the book's ten alone leave 40).
    assert_eq!(rb.state.refresh().await.unwrap().serving, 20);
    assert_eq!(rb.stats()["claims"]["open"], 20);
}

/// A quiet room's leader writes its empty book again every few seconds (it says where `serving`
/// stood, for the next leader's [`Claims::unkept`]): a book written once lapsed after 15 s, and a
/// leader that died after its first step of the next rush lost that step's promises.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_rooms_book_is_kept_alive() {
    let redis = RedisServer::start();
    let a = edge(&redis.url(), "release = { mode = \"fixed\", rate = 10.0 }\n");
    let ra = a.get("r1").unwrap();
    let t0 = unix_ms();
    a.tick_room(&ra, t0).await.unwrap();
    assert!(ra.leader.load(Ordering::Relaxed));
    assert!(ra.state.kept_book().await.unwrap().is_some(), "the empty book is kept");
    // The key lapses (dropped here as its 15 s would).
    assert!(ra.state.keep_book(&a.node, "", 1).await.unwrap());
    for k in 1..5 {
        a.tick_room(&ra, t0 + k * 1000).await.unwrap();
        assert!(ra.state.kept_book().await.unwrap().is_none(), "not written every tick ({k} s)");
    }
    a.tick_room(&ra, t0 + wicket_edge::room::release::EMPTY_BOOK_EVERY_MS).await.unwrap();
    let kept = ra.state.kept_book().await.unwrap().expect("written again");
    assert!(kept.contains("\"to\":0"), "{kept}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_random_room_freezes_the_prequeue_once_and_fifo_order_holds() {
    let redis = RedisServer::start();
    let room = "method = \"random\"\nschedule = { opens-at = \"2099-01-01T00:00:00Z\" }\n";
    let a = edge(&redis.url(), room);
    let b = edge(&redis.url(), room);
    let (ra, rb) = (a.get("r1").unwrap(), b.get("r1").unwrap());
    let mut pre = Vec::new();
    for i in 0..300u64 {
        let (rooms, r) = if i % 2 == 0 { (&a, &ra) } else { (&b, &rb) };
        pre.push(rooms.join(r, &format!("p{i}"), "d").await.unwrap());
    }
    for r in [&ra, &rb] {
        let mut spec = (*r.spec()).clone();
        spec.opens_at = Some(parse_time("2020-01-01T00:00:00Z").unwrap());
        r.set_spec(spec);
    }
    let post = b.join(&rb, "late", "d").await.unwrap();
    assert_eq!(post.position, 301);
    a.join(&ra, "later", "d").await.unwrap();
    let (ca, cb) = (ra.state.refresh().await.unwrap(), rb.state.refresh().await.unwrap());
    assert_eq!(ca.prequeue, Some(300));
    assert_eq!(ca, cb, "both edges see one frozen pre-queue and one shuffle key");
    let order: Vec<u64> = pre.iter().map(|t| ra.admission_order(t.position, &ca)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, (1..=300).collect::<Vec<_>>());
    assert!(order.iter().enumerate().filter(|(i, p)| **p == *i as u64 + 1).count() < 15, "shuffled");
    assert_eq!(rb.admission_order(post.position, &cb), 301, "FIFO after the open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_share_one_queue_on_a_redis_cluster() {
    let cluster = RedisCluster::start(3);
    let seeds = cluster.seeds();
    let list = seeds.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    let text = format!(
        "store = {{ cluster = [{list}] }}\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\n\
         secret = \"hs-secret-for-room-tests-0123456789abcdef\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nrelease = {{ mode = \"fixed\", rate = 3.0 }}\n"
    );
    let cfg = WicketConfig::from_toml_str(&text).unwrap();
    assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
    assert_eq!(cfg.room_store, Some(RoomStore::Cluster(seeds.clone())));
    // Two edges built the way `wicket serve` builds them: from the shared `store`.
    let edges: Vec<Rooms> = (0..2)
        .map(|_| {
            let backend = Backend::Redis(RedisRooms::for_store(cfg.room_store.as_ref().unwrap()).unwrap());
            Rooms::new(cfg.rooms_config(), Signer::new(b"shared-edge-secret-0123"), backend).unwrap()
        })
        .collect();
    let rooms: Vec<_> = edges.iter().map(|e| e.get("r1").unwrap()).collect();
    let mut tickets = Vec::new();
    for i in 0..20u64 {
        let e = (i % 2) as usize;
        let t = edges[e].join(&rooms[e], &format!("u{i}"), "dev").await.unwrap();
        assert_eq!(t.position, i + 1, "one counter on the cluster");
        tickets.push(t);
    }
    assert_eq!(edges[1].join(&rooms[1], "u0", "dev").await.unwrap().position, 1, "a rejoin keeps the place");
    let t0 = unix_ms();
    for (e, r) in edges.iter().zip(&rooms) {
        e.tick_room(r, t0).await.unwrap();
    }
    assert_eq!(rooms.iter().filter(|r| r.leader.load(Ordering::Relaxed)).count(), 1, "one leader");
    for (e, r) in edges.iter().zip(&rooms) {
        e.tick_room(r, t0 + 1000).await.unwrap();
    }
    // The leader advanced serving once per tick; both edges see it.
    let mut serving = Vec::new();
    for r in &rooms {
        serving.push(r.state.refresh().await.unwrap().serving);
    }
    assert!(serving[0] == serving[1] && (3..=6).contains(&serving[0]), "{serving:?}");
    let s = status(edges[1].status(&rooms[1], &tickets[0], "u0").await.unwrap());
    assert_eq!(s.state, Phase::Admitted, "{s:?}");
    let s = status(edges[0].status(&rooms[0], &tickets[19], "u19").await.unwrap());
    assert_eq!((s.state, s.position), (Phase::Waiting, Some(20)));
}

/// A room made, changed or deleted through one edge's admin API reaches the other edge sharing
/// the Redis state at its next tick, protected paths included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_made_changed_and_deleted_on_one_edge_reach_the_other() {
    use http::Method;
    use wicket_edge::room::admin::handle;
    let redis = RedisServer::start();
    let a = edge(&redis.url(), "");
    let b = edge(&redis.url(), "");
    // r1 (from the file) guards "/buy": which room guards a path?
    let guard = |rooms: &Rooms, path: &str| rooms.protection().find(path).map(|p| p.rule.room.clone());
    let put = |paths: &[&str]| serde_json::json!({"event": "ev-7", "target": "/buy/r7", "protected": paths}).to_string();
    let r = handle(&a, &Method::PUT, "/admin/rooms/r7", put(&["/buy/r7"]).as_bytes()).await;
    assert_eq!(r.status(), 201, "{}", String::from_utf8_lossy(r.body()));
    assert_eq!(guard(&a, "/buy/r7/seat").as_deref(), Some("r7"), "at once on the edge that was told");
    assert_eq!(guard(&b, "/buy/r7/seat").as_deref(), Some("r1"));
    b.tick_all(unix_ms()).await;
    let rule = b.protection().find("/buy/r7/seat").map(|p| p.rule.clone()).expect("the other edge guards it after a tick");
    assert_eq!((rule.room.as_str(), rule.event.as_deref()), ("r7", Some("ev-7")));
    assert!(b.get("r7").is_some());
    // Changed: the old path is free, the new one guarded.
    assert_eq!(handle(&a, &Method::PUT, "/admin/rooms/r7", put(&["/buy/r7b"]).as_bytes()).await.status(), 200);
    b.tick_all(unix_ms()).await;
    assert_eq!(guard(&b, "/buy/r7/seat").as_deref(), Some("r1"));
    assert_eq!(guard(&b, "/buy/r7b").as_deref(), Some("r7"));
    // A weight (issue 26) travels with the room; a bad one is refused with its path and changes
    // nothing on either edge; back to the default, it is not written at all.
    let weighted = |w: serde_json::Value| {
        serde_json::json!({"event": "ev-7", "target": "/buy/r7", "protected": ["/buy/r7b"], "release": {"weight": w}}).to_string()
    };
    assert_eq!(handle(&a, &Method::PUT, "/admin/rooms/r7", weighted(serde_json::json!(2)).as_bytes()).await.status(), 200);
    b.tick_all(unix_ms()).await;
    assert_eq!(b.get("r7").unwrap().spec().config.release.weight, 2.0, "the other edge has the weight");
    assert_eq!(b.get("r7").unwrap().stats()["weight"], 2.0);
    for (bad, why) in [
        (serde_json::json!(0), "more than 0"),
        (serde_json::json!(-1), "more than 0"),
        (serde_json::json!(1e6), "at most 1000"),
        (serde_json::json!("NaN"), "invalid type"),
        (serde_json::json!("inf"), "invalid type"),
        (serde_json::json!("2"), "invalid type"),
        (serde_json::json!(null), "invalid type"),
    ] {
        let r = handle(&a, &Method::PUT, "/admin/rooms/r7", weighted(bad.clone()).as_bytes()).await;
        let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!((r.status().as_u16(), v["error"].as_str()), (400, Some("bad_request")), "{bad}: {v}");
        assert_eq!(v["issues"][0]["path"], "room.release.weight", "{bad}: {v}");
        assert!(v["issues"][0]["message"].as_str().unwrap().contains(why), "{bad}: {v}");
    }
    b.tick_all(unix_ms()).await;
    assert_eq!(a.get("r7").unwrap().spec().config.release.weight, 2.0, "a refused body changes nothing here");
    assert_eq!(b.get("r7").unwrap().spec().config.release.weight, 2.0, "nor there");
    assert_eq!(handle(&a, &Method::PUT, "/admin/rooms/r7", put(&["/buy/r7b"]).as_bytes()).await.status(), 200);
    b.tick_all(unix_ms()).await;
    assert_eq!(b.get("r7").unwrap().spec().config.release.weight, 1.0);
    let r = handle(&a, &Method::GET, "/admin/rooms/r7", b"").await;
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert!(v["config"]["release"].get("weight").is_none(), "the default is not written: {v}");
    // Deleted: gone on both; the config file's room stays.
    assert_eq!(handle(&a, &Method::DELETE, "/admin/rooms/r7", b"").await.status(), 200);
    assert!(a.get("r7").is_none());
    b.tick_all(unix_ms()).await;
    assert!(b.get("r7").is_none());
    assert_eq!(guard(&b, "/buy/r7b").as_deref(), Some("r1"), "r1 from the file is untouched");
}

/// The RoomState conformance suite (tests/common/room_state.rs) on a real Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_room_state_passes_the_conformance_suite() {
    let redis = RedisServer::start();
    let rooms = RedisRooms::new(&redis.url()).unwrap();
    common::room_state::conformance(&rooms.room("conformance"), unix_ms()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owed_places_are_fixed_at_arrival_held_back_at_their_turn_and_lost_after_the_grace_on_redis() {
    let redis = RedisServer::start();
    let rooms = RedisRooms::new(&redis.url()).unwrap();
    common::room_state::owed_places(&rooms.room("owed"), "node-a", 1_000_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_invite_lane_takes_its_share_of_each_release_in_join_order_on_redis() {
    let redis = RedisServer::start();
    let rooms = RedisRooms::new(&redis.url()).unwrap();
    common::room_state::lane_places(&rooms.room("lane"), "node-a", 1_000_000).await;
}

/// An admitted fan whose room state cannot be read (Redis down) is told to retry (503 with
/// `Retry-After`), never "not admitted" (403) because a store blinked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_fan_gets_503_to_retry_while_redis_is_down_not_403() {
    use common::*;
    let redis = RedisServer::start();
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start_full(
        &format!("store = \"{}\"", redis.url()),
        &format!(
            "origin = \"{}\"\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
             [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nrelease = {{ mode = \"fixed\", rate = 1000.0 }}\n",
            origin.url()
        ),
        &[],
        &[],
    );
    let mut jar: std::collections::HashMap<String, String> = Default::default();
    let send = |jar: &std::collections::HashMap<String, String>, path: &str| {
        let cookies: Vec<String> = jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let (url, cookie) = (edge.url(path), cookies.join("; "));
        async move { get(&url, &[("cookie", &cookie), ("accept", "application/json"), ("user-agent", "t"), ("accept-language", "en")]).await }
    };
    let r = send(&jar, "/queue/r1").await;
    jar.extend(r.cookies());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = send(&jar, "/queue/r1/status").await;
        jar.extend(r.cookies());
        if r.json()["state"] == "admitted" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(send(&jar, "/buy").await.status, 200);
    drop(redis);
    let r = send(&jar, "/buy").await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("2"));
    assert_eq!(r.json()["error"], "unavailable");
}

/// Two real edges sharing rooms through one Redis: a room made on edge A shows in edge B's
/// console (API and live stream), and what B's console does to it — pause, resume, a fixed rate —
/// is what a fan polling A sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn either_edges_console_shows_and_controls_a_shared_room() {
    use common::*;
    let redis = RedisServer::start();
    let tokens = format!(
        "[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n"
    );
    let store = format!("store = \"{}\"", redis.url());
    let a = TestEdge::start_full(&store, &tokens, &[], &[]);
    let b = TestEdge::start_full(&store, &tokens, &[], &[]);
    // Made on A, with nobody let in yet.
    let room = r#"{"event":"ev-9","target":"/buy/ev-9","protected":["/buy/ev-9"],"release":{"mode":"fixed","rate":0}}"#;
    assert_eq!(a.admin("PUT", "/admin/rooms/r9", room).await.status, 201);
    let console = b.console().await;
    let until = |what: &str, deadline_s: u64| (what.to_owned(), std::time::Instant::now() + Duration::from_secs(deadline_s));
    let (what, deadline) = until("B's console lists the room made on A", 5);
    loop {
        let r = console.call("GET", "/admin/rooms", "").await;
        assert_eq!(r.status, 200);
        if r.json()["rooms"].as_array().unwrap().iter().any(|x| x["id"] == "r9") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {}", r.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A fan queues through A; B's live stream counts it (one shared queue).
    let (base_a, base_b) = (format!("http://{}", a.addr), format!("http://{}", b.addr));
    let mut fan = Fan::default();
    assert_eq!(fan.join(&base_a, "r9").await.status, 200);
    assert_eq!(fan.status(&base_a, "r9").await["state"], "waiting");
    let mut stream = tokio::net::TcpStream::connect(b.admin).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(format!("GET /admin/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {}\r\n\r\n", console.cookie).as_bytes()).await.unwrap();
    let (mut seen, mut buf) = (String::new(), [0u8; 8192]);
    let (what, deadline) = until("B's stream shows A's fan queued in r9", 6);
    while !seen.split("data: ").filter_map(|f| serde_json::from_str::<serde_json::Value>(f.trim()).ok()).any(|f| {
        f["rooms"].as_array().is_some_and(|rs| rs.iter().any(|r| r["room"] == "r9" && r["issued"] == 1))
    }) {
        let n = tokio::time::timeout_at(deadline.into(), stream.read(&mut buf)).await.unwrap_or_else(|_| panic!("{what}: {seen}")).unwrap();
        assert!(n > 0, "{what}: stream ended: {seen}");
        // Frames are one chunk each; cut the chunk-size lines away.
        for line in String::from_utf8_lossy(&buf[..n]).lines() {
            if line.starts_with("data: ") {
                seen.push_str(line);
                seen.push('\n');
            }
        }
    }
    drop(stream);
    // Paused from B's console: the fan polling A is told so.
    let r = console.call("POST", "/admin/rooms/r9/pause", "").await;
    assert_eq!((r.status, r.json()["mode"].as_str()), (200, Some("paused")), "{}", r.text());
    fan_sees(&mut fan, &base_a, "paused", "the fan on A sees the pause made on B").await;
    assert_eq!(a.admin("GET", "/admin/rooms/r9/stats", "").await.json()["mode"], "paused");
    // Resumed and given a rate from B's console: the fan on A gets in (whichever edge leads).
    assert_eq!(console.call("POST", "/admin/rooms/r9/resume", "").await.status, 200);
    let r = console.call("PUT", "/admin/rooms/r9/release", r#"{"mode":"fixed","rate":1000}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    fan_sees(&mut fan, &base_a, "admitted", "the fan on A is admitted at the rate set on B").await;
    assert_eq!(a.admin("GET", "/admin/rooms/r9/stats", "").await.json()["mode"], serde_json::json!({"fixed": 1000.0}));
    // The same fan through B: admitted there too once B reads the shared counter (a tick).
    fan_sees(&mut fan, &base_b, "admitted", "the fan admitted on A is admitted on B").await;
}

/// Polls the fan's status in room r9 at `base` until it says `state` (within 6 s, the release
/// loop ticking once a second on each edge).
async fn fan_sees(fan: &mut common::Fan, base: &str, state: &str, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    loop {
        let s = fan.status(base, "r9").await;
        if s["state"] == state {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A passthrough room on two edges sharing Redis: either edge lets a fan straight in while nobody
/// waits (no lease needed: `room_pass` serves exactly the caller's place), and once a fan waits —
/// joined on the other edge, not yet served — neither lets anyone pass them (FIFO across edges).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passthrough_room_lets_fans_in_on_any_edge_until_someone_waits() {
    let redis = RedisServer::start();
    let room_toml = "queue = \"when-needed\"\nrelease = { mode = \"fixed\", rate = 0.0 }\n[rooms.passthrough]\nactive-max = 100\n";
    let a = edge(&redis.url(), room_toml);
    let b = edge(&redis.url(), room_toml);
    let (ra, rb) = (a.get("r1").unwrap(), b.get("r1").unwrap());
    let s = a.pass_through(&ra, "u1", "d1").await.unwrap().expect("edge a lets u1 in");
    assert_eq!((s.state, s.position), (Phase::Admitted, Some(1)));
    assert!(s.token.is_some());
    let s = b.pass_through(&rb, "u2", "d2").await.unwrap().expect("edge b lets u2 in, without the lease");
    assert_eq!((s.state, s.position), (Phase::Admitted, Some(2)));
    // u3 joins the queue on edge a and is not served (rate 0): the queue is on.
    let t3 = a.join(&ra, "u3", "d3").await.unwrap();
    assert_eq!(t3.position, 3);
    rb.state.refresh().await.unwrap();
    assert!(b.pass_through(&rb, "u4", "d4").await.unwrap().is_none(), "u4 may not pass u3, who waits");
    assert!(a.pass_through(&ra, "u5", "d5").await.unwrap().is_none());
    let c = rb.state.refresh().await.unwrap();
    assert_eq!(c.serving, 2, "nobody but the passed fans was served");
    // u3's place comes first once the release serves it.
    let s3 = status(a.status(&ra, &t3, "u3").await.unwrap());
    assert_eq!(s3.state, Phase::Waiting);
}

/// A rolling upgrade: a room published without this wave's fields reads on every edge; a room
/// config an edge cannot read (a field it does not know, as an older edge meets a newer one's)
/// leaves the room as that edge had it, says why by name in its stats, and is applied once it reads
/// again. A room this edge never had is not made from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_room_config_an_edge_cannot_read_leaves_its_room_as_it_was_and_says_why() {
    use http::Method;
    use wicket_edge::room::admin::handle;
    let redis = RedisServer::start();
    let a = edge(&redis.url(), "");
    let b = edge(&redis.url(), "");
    let store = RedisRooms::new(&redis.url()).unwrap();
    let body = serde_json::json!({"event": "ev-7", "target": "/buy/r7", "protected": ["/buy/r7"]}).to_string();
    assert_eq!(handle(&a, &Method::PUT, "/admin/rooms/r7", body.as_bytes()).await.status(), 201);
    // What A published carries only the fields the release before knew (none of this wave's at
    // their defaults).
    let published = store.specs().await.unwrap().into_iter().find(|(id, _)| id == "r7").unwrap().1;
    let v: serde_json::Value = serde_json::from_str(&published).unwrap();
    for field in ["reject-all", "queuing-status-code", "test-mode", "event-name", "invite"] {
        assert!(v.get(field).is_none(), "{field} published at its default: {published}");
    }
    b.tick_all(unix_ms()).await;
    assert_eq!(b.get("r7").unwrap().spec().config.target, "/buy/r7");
    assert!(b.get("r7").unwrap().stats()["config_sync_error"].is_null());
    // A newer edge's config with a field B does not know (and a changed target).
    let mut newer = v.clone();
    newer["target"] = "/buy/r7-new".into();
    newer["waiting-music"] = "on".into();
    store.put_spec("r7", Some(&newer.to_string())).await.unwrap();
    for _ in 0..2 {
        b.tick_all(unix_ms()).await;
    }
    let room = b.get("r7").expect("the room is kept");
    assert_eq!(room.spec().config.target, "/buy/r7", "the last config it could read");
    assert_eq!(b.protection().find("/buy/r7/seat").map(|p| p.rule.room.clone()).as_deref(), Some("r7"));
    let why = room.stats()["config_sync_error"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("unknown field `waiting-music`"), "{why}");
    // A new room B cannot read is not made; one it can read again is applied, the problem gone.
    store.put_spec("r8", Some(&newer.to_string())).await.unwrap();
    b.tick_all(unix_ms()).await;
    assert!(b.get("r8").is_none());
    newer.as_object_mut().unwrap().remove("waiting-music");
    store.put_spec("r7", Some(&newer.to_string())).await.unwrap();
    b.tick_all(unix_ms()).await;
    let room = b.get("r7").unwrap();
    assert_eq!(room.spec().config.target, "/buy/r7-new");
    assert!(room.stats()["config_sync_error"].is_null());
    // A config that reads but does not validate is kept out the same way, with its path.
    newer["queuing-status-code"] = 418.into();
    store.put_spec("r7", Some(&newer.to_string())).await.unwrap();
    b.tick_all(unix_ms()).await;
    let room = b.get("r7").unwrap();
    assert_eq!((room.spec().config.target.as_str(), room.spec().config.queuing_status_code), ("/buy/r7-new", 200));
    let why = room.stats()["config_sync_error"].as_str().unwrap_or_default().to_owned();
    assert_eq!(why, "room.queuing-status-code: must be 200, 202 or 429");
}

/// A step of the leader wakes the event streams near the front on the other edge too, when that
/// edge reads it (its tick), not at each stream's next one-second look (api.md: "on an edge that
/// does not lead a shared room, when it reads the step"). A fan queued through the leader streams
/// from the follower; right after its first frame (`waiting`) the leader lets it in and the
/// follower ticks: the `admitted` frame comes within a few hundred ms of the first, where the
/// stream's own look would come a second after it. Three fans, so one lucky look does not pass it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_of_the_leader_wakes_the_streams_near_the_front_on_a_follower() {
    use wicket_edge::room::events::EventFrames;
    let redis = RedisServer::start();
    let (a, b, ra, rb, t0) = selling(&redis, 0.0, 1000).await;
    let (leader, lroom, follower, froom) = if ra.leader.load(Ordering::Relaxed) { (&a, &ra, &b, &rb) } else { (&b, &rb, &a, &ra) };
    assert!(!froom.leader.load(Ordering::Relaxed));
    for (k, i) in [5u64, 6, 7].into_iter().enumerate() {
        let user = format!("u{i}");
        let ticket = a.join(&ra, &user, "d").await.unwrap();
        assert_eq!(ticket.position, i + 1, "the place it had");
        let mut frames = EventFrames::new(Arc::clone(froom), ticket, &user, Duration::from_secs(60));
        let first = frames.next(follower).await.expect("a first frame");
        let at = std::time::Instant::now();
        assert!(first.contains("\"state\":\"waiting\""), "{first}");
        // The leader lets exactly this fan's place in; the follower reads it at its tick.
        let now = t0 + 1000 * (k as u64 + 1);
        let serving = lroom.state.refresh().await.unwrap().serving;
        assert_eq!(lroom.state.advance(&leader.node, i + 1 - serving).await.unwrap(), i + 1);
        follower.tick_room(froom, now).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(3), frames.next(follower)).await.expect("a frame").expect("open");
        let took = at.elapsed();
        assert!(next.contains("\"state\":\"admitted\""), "{next}");
        assert!(took < Duration::from_millis(600), "u{i}'s turn reached its stream on the follower in {took:?}");
    }
}
