//! A room spread across a real Redis Cluster (`layout = "spread"`, edge/src/room/spread.rs): edges
//! (each a `SpreadRoom` on its own cluster connection, as each edge process has) number joins by
//! time bucket and edge index; the leader counts only real places and skips the holes; a rejoin at
//! another edge keeps its place; sessions live on shards; the room's Redis work is spread over the
//! masters; a failover of the master holding the edges' claims numbers no place twice; and across
//! edges places follow the join order.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use wicket_edge::room::config::SpreadConfig;
use wicket_edge::room::redis::RedisRooms;
use wicket_edge::room::spread::{EPOCH_MS, Numbering, SpreadRoom, counter_tag, shard_tags, slot};
use wicket_edge::room::state::{Proof, RoomState, Who};
use wicket_edge::room::unix_ms;
use wicket_testkit::RedisCluster;

fn edge(cluster: &RedisCluster, id: &str, cfg: SpreadConfig) -> Arc<SpreadRoom> {
    SpreadRoom::new(RedisRooms::cluster(&cluster.seeds()).unwrap(), id, cfg, 10_000_000)
}

async fn join(e: &SpreadRoom, who: Who) -> (u64, bool) {
    let j = e.join(who, true, Proof::given(unix_ms())).await.unwrap().expect("a place");
    assert!(!j.owed && j.lane == 0);
    (j.position, j.fresh)
}

/// Joins `whos` at `e` at once (one batch); their places.
async fn burst(e: &SpreadRoom, whos: impl Iterator<Item = Who>) -> Vec<(Who, u64)> {
    let all = futures::future::join_all(whos.map(|w| async move { (w, join(e, w).await.0) })).await;
    all.into_iter().collect()
}

/// Calls of every command on a node (`INFO commandstats`, commands inside scripts included).
fn calls(port: u16) -> u64 {
    wicket_testkit::cli(port, &["info", "commandstats"])
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| !l.starts_with("info:") && !l.starts_with("cluster|") && !l.starts_with("cluster:") && !l.starts_with("ping:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Sleeps until a time bucket of `ms` has just begun (so a quick burst falls in one bucket); its number.
async fn bucket_start(ms: u64) -> u64 {
    loop {
        let into = (unix_ms() - EPOCH_MS) % ms;
        if into < 5 {
            return (unix_ms() - EPOCH_MS) / ms;
        }
        tokio::time::sleep(Duration::from_millis(ms - into)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_per_edge_real_places_only_and_a_rejoin_anywhere_keeps_its_place() {
    let cluster = RedisCluster::start(3);
    let cfg = SpreadConfig { shards: 6, block: 10, block_ms: 1000, flush_ms: 20 };
    let num = Numbering::new(&cfg);
    let (a, b) = (edge(&cluster, "r1", cfg.clone()), edge(&cluster, "r1", cfg));
    let t = bucket_start(1000).await;
    // Edge a (the first to claim: index 0) takes 5 joins at once: its block of this bucket, in
    // the order of the batch.
    let got_a = burst(&a, 1..=5).await;
    let mut pa: Vec<u64> = got_a.iter().map(|(_, p)| *p).collect();
    pa.sort_unstable();
    let a0 = num.start(t, 0);
    assert_eq!(pa, [a0, a0 + 1, a0 + 2, a0 + 3, a0 + 4], "{got_a:?}");
    // Edge b (index 1): its own block of the same bucket, right after a's.
    let got_b = burst(&b, 6..=8).await;
    let mut pb: Vec<u64> = got_b.iter().map(|(_, p)| *p).collect();
    pb.sort_unstable();
    let b0 = num.start(t, 1);
    assert_eq!(pb, [b0, b0 + 1, b0 + 2]);
    assert_eq!(b0, num.end(t, 0) + 1);
    let place: HashMap<Who, u64> = got_a.iter().chain(&got_b).copied().collect();
    // A rejoin keeps the place: at its own edge (no Redis), and at the other (the shard's map).
    assert_eq!(join(&a, 1).await, (place[&1], false));
    assert_eq!(join(&b, 2).await, (place[&2], false), "the other edge finds the place in the shard");
    assert_eq!(join(&a, 7).await, (place[&7], false));
    // The leader counts real places only: nothing is recorded while the bucket runs.
    assert!(a.lead("node-a", 10_000).await.unwrap());
    assert!(!b.lead("node-b", 10_000).await.unwrap(), "one leader");
    // The leader's book of promises is kept in the room's slot for the next leader (lua/room_book.lua);
    // only the lease holder writes it, and an empty one is dropped.
    assert!(a.keep_book("node-a", "{\"steps\":1}", 10_000).await.unwrap());
    assert!(!b.keep_book("node-b", "{\"steps\":2}", 10_000).await.unwrap(), "not the lease holder: refused");
    assert_eq!(b.kept_book().await.unwrap().as_deref(), Some("{\"steps\":1}"));
    assert!(a.keep_book("node-a", "", 10_000).await.unwrap());
    assert_eq!(b.kept_book().await.unwrap(), None, "an empty book is dropped");
    let s = a.advance_lane("node-a", 100, 0, unix_ms()).await.unwrap();
    assert_eq!((s.serving, s.released), (0, 0), "the blocks are in use and recorded nothing yet");
    assert_eq!(b.advance_lane("node-b", 100, 0, unix_ms()).await.unwrap().released, 0, "not the leader: nothing moves");
    // Once the bucket is over, each edge's next batch records its block (a: 1-5 and a hole).
    while (unix_ms() - EPOCH_MS) / 1000 == t {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.flush().await;
    b.flush().await;
    // (A step by nothing counts them; the leader's refresh does it when it has not stepped for a tick.)
    a.advance_lane("node-a", 0, 0, unix_ms()).await.unwrap();
    // 10: the 8 fans' places, and the two places the rejoins at the other edge took on arrival
    // before their batch found the places they held (holes the release counts as places).
    let c = a.counters();
    assert_eq!(c.waiting(), 10, "10 places handed out: {c:?}");
    // Every position before a's block is nobody's (no edge numbered there): passed at once.
    let s = a.advance_lane("node-a", 4, 0, unix_ms()).await.unwrap();
    assert_eq!((s.serving, s.released), (a0 + 3, 4));
    // a's fifth and the hole, its unused end, then b's four; then b's unused end.
    let s = a.advance_lane("node-a", 100, 0, unix_ms()).await.unwrap();
    assert_eq!((s.serving, s.released), (num.end(t, 1), 6));
    let c = a.refresh().await.unwrap();
    assert_eq!((c.serving, c.waiting()), (num.end(t, 1), 0));
    // New joins take places after serving.
    let (p, fresh) = join(&b, 100).await;
    assert!(fresh && p > num.end(t, 1), "{p}");
    // Its session lives on its shard: the conformance checks of sessions hold on this layout (the
    // sweep on the leader: only it sweeps the shards, and publishes the active count).
    common::room_state::sessions(&*b, unix_ms()).await;
    common::room_state::idle_sessions(&*a, unix_ms() + 1_000_000).await;
    let swept = b.sweep(unix_ms() + 2_000_000, 10_000).await.unwrap();
    assert_eq!((swept.active, swept.exits, swept.picked), (0, 0, None), "a follower sweeps nothing");
    assert!(!b.lead("node-b", 10_000).await.unwrap());
    // An ended session spends the place: a rejoin anywhere queues anew.
    assert!(a.open_session(1, unix_ms() + 60_000, 1).await.unwrap());
    assert!(a.session_alive(1, unix_ms()).await.unwrap());
    assert!(b.end_session(1).await.unwrap());
    assert!(!b.session_alive(1, unix_ms()).await.unwrap(), "ended where it was ended, at once");
    // The other edge believes the running session it saw for at most a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(!a.session_alive(1, unix_ms()).await.unwrap(), "ended everywhere within a second");
    assert!(a.spent(1, place[&1]).await.unwrap());
    let (again, fresh) = join(&b, 1).await;
    assert!(fresh && again > num.end(t, 1), "a spent place is not given back: {again}");
}

/// Four edges take joins without pause for 4 s (each edge a few hundred per flush) while each
/// ticks once a second as the release loop does: no place given twice, each edge's joins numbered
/// in order, and the room's Redis work spread: a fraction of a command per join on the busiest
/// master, and no master with more than 40% of the room's commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_edges_spread_the_work_over_the_masters() {
    let cluster = RedisCluster::start(3);
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port()).collect();
    let cfg = SpreadConfig::default();
    let edges: Vec<Arc<SpreadRoom>> = (0..4).map(|_| edge(&cluster, "mega", cfg.clone())).collect();
    // The shards sit two on each master (the cluster splits the slots in equal ranges).
    let masters: Vec<usize> = shard_tags("mega", cfg.shards).iter().map(|t| cluster.master_of(&format!("{{{t}}}")).unwrap()).collect();
    for m in 0..3 {
        assert_eq!(masters.iter().filter(|x| **x == m).count(), 2, "{masters:?}");
    }
    assert!(slot("room:mega") < 16384);
    // Warm the connections and scripts, then count from here.
    for (i, e) in edges.iter().enumerate() {
        join(e, 1_000_000_000 + i as u64).await;
    }
    let before: Vec<u64> = ports.iter().map(|p| calls(*p)).collect();
    let until = std::time::Instant::now() + Duration::from_secs(4);
    let work = edges.iter().enumerate().map(|(i, e)| {
        let e = e.clone();
        async move {
            let mut got = Vec::new();
            let mut n = 0u64;
            let mut next_tick = std::time::Instant::now();
            while std::time::Instant::now() < until {
                let base = (i as u64) << 32 | n;
                // 40 fans every 20 ms, each waiting for its batch like a real join.
                let wave: Vec<_> = (0..40).map(|k| {
                    let e = e.clone();
                    tokio::spawn(async move {
                        let asked = std::time::Instant::now();
                        let p = join(&e, base + k).await.0;
                        (base + k, p, asked, std::time::Instant::now())
                    })
                }).collect();
                n += 40;
                got.push(wave);
                tokio::time::sleep(Duration::from_millis(20)).await;
                if std::time::Instant::now() >= next_tick {
                    // The release loop's tick: sweep, lead, refresh; the leader advances.
                    let node = format!("n{i}");
                    e.sweep(unix_ms(), 120_000).await.unwrap();
                    if e.lead(&node, 3000).await.unwrap() {
                        e.advance_lane(&node, 500, 0, unix_ms()).await.unwrap();
                    }
                    e.refresh().await.unwrap();
                    next_tick += Duration::from_secs(1);
                }
            }
            let mut out = Vec::new();
            for wave in got {
                for t in wave {
                    out.push(t.await.unwrap());
                }
            }
            (i, out)
        }
    });
    let mut all: Vec<(usize, Who, u64)> = Vec::new();
    let mut timed: Vec<Vec<(u64, std::time::Instant, std::time::Instant)>> = vec![Vec::new(); 4];
    for (i, got) in futures::future::join_all(work).await {
        for (w, p, asked, answered) in got {
            all.push((i, w, p));
            timed[i].push((p, asked, answered));
        }
    }
    let joins = all.len() as u64;
    let positions: HashSet<u64> = all.iter().map(|(_, _, p)| *p).collect();
    assert_eq!(positions.len(), all.len(), "no place given twice");
    // Each edge numbers its joins as they arrive: one asked after another was answered gets a
    // later place.
    for (i, mine) in timed.iter_mut().enumerate() {
        mine.sort_by_key(|t| t.1);
        let mut earliest_answer: Vec<(std::time::Instant, u64)> = mine.iter().map(|t| (t.2, t.0)).collect();
        earliest_answer.sort_by_key(|t| t.0);
        // For each join, every join answered before it asked has a smaller place.
        let mut k = 0;
        let mut max_before = 0;
        for (p, asked, _) in mine.iter() {
            while k < earliest_answer.len() && earliest_answer[k].0 < *asked {
                max_before = max_before.max(earliest_answer[k].1);
                k += 1;
            }
            assert!(*p > max_before, "edge {i}: place {p} after a join answered with {max_before}");
        }
    }
    let after: Vec<u64> = ports.iter().map(|p| calls(*p)).collect();
    let ops: Vec<u64> = before.iter().zip(&after).map(|(b, a)| a - b).collect();
    let total: u64 = ops.iter().sum();
    let busiest = *ops.iter().max().unwrap();
    eprintln!("commands per master {ops:?}: {total} for {joins} joins ({:.4} per join on the busiest, {:.1}% of the room's)", busiest as f64 / joins as f64, busiest as f64 * 100.0 / total as f64);
    assert!(joins > 10_000, "{joins} joins");
    assert!((busiest as f64) / (joins as f64) <= 0.1, "{busiest} commands on the busiest master for {joins} joins");
    assert!((busiest as f64) / (total as f64) <= 0.4, "the busiest master carries {busiest} of {total}");
}

/// The master holding the edges' claims is SIGKILLed while four edges take joins; its replica
/// takes over, with or without the last claims. Every edge goes on numbering after the failover
/// with the index it had (it asks for it back at its next renewal), so no place is given to two
/// identities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_of_the_claims_master_numbers_no_place_twice() {
    let mut cluster = RedisCluster::start_with_replicas(3, 500);
    let cfg = SpreadConfig { shards: 6, block: 50, block_ms: 10, flush_ms: 20 };
    let edges: Vec<Arc<SpreadRoom>> = (0..4).map(|_| edge(&cluster, "fo", cfg.clone())).collect();
    let claims = cluster.master_of(&format!("{{{}}}", counter_tag("fo"))).unwrap();
    let answered = Arc::new(parking_lot::Mutex::new(Vec::<(Who, u64)>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (i, e) in edges.iter().enumerate() {
        let (e, answered, stop) = (e.clone(), answered.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let whos: Vec<Who> = (0..20).map(|k| (i as u64) << 40 | (n + k)).collect();
                n += 20;
                let res = futures::future::join_all(whos.iter().map(|w| e.join(*w, true, Proof::given(unix_ms())))).await;
                for (w, r) in whos.iter().zip(res) {
                    if let Ok(Some(j)) = r {
                        answered.lock().push((*w, j.position));
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let before_kill = answered.lock().len();
    cluster.nodes[claims].kill9();
    // The replica takes over within a few node timeouts; joins go on, claims are renewed.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if answered.lock().len() > before_kill + 3000 || std::time::Instant::now() > deadline {
            break;
        }
    }
    // At least one renewal (every 2 s) after the failover.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let answered = answered.lock().clone();
    assert!(answered.len() > before_kill + 3000, "joins went on after the failover: {} then {}", before_kill, answered.len());
    let num = Numbering::new(&cfg);
    let mut seen = HashMap::new();
    let mut indexes: HashMap<u64, HashSet<u64>> = HashMap::new();
    for (w, p) in &answered {
        if let Some(other) = seen.insert(*p, *w) {
            panic!("place {p} given to {other:x} and {w:x}");
        }
        indexes.entry(w >> 40).or_default().insert(num.decode(*p).1);
    }
    eprintln!("{} joins answered ({} before the kill); indexes per edge {indexes:?}", answered.len(), before_kill);
    for (edge, idx) in &indexes {
        assert_eq!(idx.len(), 1, "edge {edge} kept its index through the failover: {idx:?}");
    }
}

/// Three edges built as `wicket serve` builds them (`Rooms` from one config with a spread room on a
/// Redis Cluster) run a small sale with their release loops: every fan, joining at any edge, is
/// admitted at any edge in the order of their places, and the places follow the join order across
/// edges exactly (each fan joins after the one before was answered: a later bucket); an edge that
/// dies holding a block does not stop the queue (its positions are passed after the grace, its
/// fans still get in); and the admin API refuses to change a live room's layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_on_a_spread_room_across_three_edges() {
    use std::sync::atomic::Ordering;
    use wicket_edge::WicketConfig;
    use wicket_edge::identity::Signer;
    use wicket_edge::room::state_backend::Backend;
    use wicket_edge::room::{Phase, Rooms, StatusOutcome};
    let cluster = RedisCluster::start(3);
    let list = cluster.seeds().iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
    let text = format!(
        "store = {{ cluster = [{list}] }}\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\n\
         secret = \"hs-secret-for-room-tests-0123456789abcdef\"\n\
         [[rooms]]\nid = \"big\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nlayout = \"spread\"\n\
         release = {{ mode = \"fixed\", rate = 40.0 }}\nspread = {{ block = 20, block-ms = 10, flush-ms = 20 }}\n"
    );
    let cfg = WicketConfig::from_toml_str(&text).unwrap();
    assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
    let edge = || {
        let backend = Backend::Redis(RedisRooms::for_store(cfg.room_store.as_ref().unwrap()).unwrap());
        Rooms::new(cfg.rooms_config(), Signer::new(b"shared-edge-secret-0123"), backend).unwrap()
    };
    let edges: Vec<Rooms> = (0..3).map(|_| edge()).collect();
    let rooms: Vec<_> = edges.iter().map(|e| e.get("big").unwrap()).collect();
    assert_eq!(rooms[0].stats()["layout"], "spread");
    // 60 fans, one after another, round-robin over the edges.
    let mut tickets = Vec::new();
    let mut when = Vec::new();
    for i in 0..60usize {
        let e = i % 3;
        let asked = std::time::Instant::now();
        tickets.push((format!("u{i}"), edges[e].join(&rooms[e], &format!("u{i}"), "dev").await.unwrap()));
        when.push((asked, std::time::Instant::now()));
        if i % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }
    // A fan who asked after another was answered gets a later place, whichever edges they joined
    // at, unless both places were taken in one 10 ms bucket (the FIFO error across edges): then
    // the second asked within 10 ms of the first's answer.
    let mut inversions = 0;
    for i in 0..60 {
        for j in i + 1..60 {
            if tickets[j].1.position < tickets[i].1.position {
                inversions += 1;
                let apart = when[j].0.saturating_duration_since(when[i].1);
                assert!(apart < Duration::from_millis(10), "fan {j} asked {apart:?} after fan {i} was answered, yet got an earlier place");
            }
        }
    }
    eprintln!("{inversions} of {} pairs out of join order", 60 * 59 / 2);
    // A fourth edge takes 5 fans and dies holding its block (never ended).
    let doomed = edge();
    let droom = doomed.get("big").unwrap();
    let mut orphans = Vec::new();
    for i in 0..5 {
        orphans.push((format!("o{i}"), doomed.join(&droom, &format!("o{i}"), "dev").await.unwrap()));
    }
    drop(droom);
    drop(doomed);
    // Ten more fans after it.
    for i in 60..70usize {
        let e = i % 3;
        tickets.push((format!("u{i}"), edges[e].join(&rooms[e], &format!("u{i}"), "dev").await.unwrap()));
    }
    // The release loops tick until everyone is in (40/s; the dead edge's block waits out the grace).
    let mut admitted_at: HashMap<String, usize> = HashMap::new();
    let everyone: Vec<(String, wicket_edge::room::ticket::QueueTicket)> = tickets.iter().chain(&orphans).cloned().collect();
    let started = std::time::Instant::now();
    let mut tick = 0usize;
    // (place, people ahead as told, serving then) of the fans waiting at the second round.
    let mut told: Vec<(u64, Option<u64>, u64)> = Vec::new();
    while admitted_at.len() < everyone.len() && started.elapsed() < Duration::from_secs(30) {
        for (e, r) in edges.iter().zip(&rooms) {
            e.tick_room(r, unix_ms()).await.unwrap();
        }
        for (i, (sub, t)) in everyone.iter().enumerate() {
            if admitted_at.contains_key(sub) {
                continue;
            }
            // Each fan polls an edge other than the one it joined at.
            let e = (i + 1) % 3;
            match edges[e].status(&rooms[e], t, sub).await.unwrap() {
                StatusOutcome::Status(s) if s.state == Phase::Admitted => {
                    admitted_at.insert(sub.clone(), tick);
                }
                StatusOutcome::Status(s) => {
                    if tick == 1 {
                        told.push((t.position, s.ahead, rooms[e].state.counters().serving));
                    }
                }
                StatusOutcome::Rejoin => panic!("{sub} lost its place"),
            }
        }
        tick += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(admitted_at.len(), everyone.len(), "everyone admitted within 30 s: {} of {}", admitted_at.len(), everyone.len());
    // Places are not consecutive numbers: the people ahead are counted over the blocks at the
    // front the leader publishes (here every fan's), so they are the true count (the places
    // between serving and the fan's); a place after the buckets every live edge has recorded is
    // told nothing yet (`null`) rather than too few — only places after every counted one — and
    // a fan further back is never told fewer.
    assert!(told.len() >= 20, "{told:?}");
    told.sort_unstable();
    let known = told.iter().filter(|t| t.1.is_some()).count();
    assert!(known >= 10 && told[..known].iter().all(|t| t.1.is_some()), "unknown only after every counted place: {told:?}");
    let places: Vec<u64> = everyone.iter().map(|(_, t)| t.position).collect();
    for (i, (p, ahead, serving)) in told.iter().enumerate() {
        let Some(ahead) = *ahead else { continue };
        let truth = places.iter().filter(|q| *q > serving && *q < p).count() as u64;
        assert!(ahead >= truth && ahead <= truth + 1, "place {p}: told {ahead} ahead, {truth} really: {told:?}");
        if i > 0
            && told[i - 1].2 == *serving
            && let Some(before) = told[i - 1].1
        {
            assert!(before <= ahead, "further back, no fewer ahead: {told:?}");
        }
    }
    assert_eq!(rooms.iter().filter(|r| r.leader.load(Ordering::Relaxed)).count(), 1, "one leader");
    // Admitted in the order of their places (a fan is never let in before one ahead of it).
    let mut by_place: Vec<(u64, usize)> = everyone.iter().map(|(sub, t)| (t.position, admitted_at[sub])).collect();
    by_place.sort_unstable();
    assert!(by_place.windows(2).all(|w| w[0].1 <= w[1].1), "admitted in place order: {by_place:?}");
    // The release counted people, not numbers: the room's own counters agree.
    let c = rooms[0].state.refresh().await.unwrap();
    assert_eq!(c.waiting(), 0, "{c:?}");
    // The post-sale report finds a session's admission on its shard: its first use is counted
    // once, in the minute it was admitted (not the minute of use).
    let who = edges[0].who("big", "u0");
    let later = unix_ms() + 120_000;
    let session_ms = rooms[0].spec().config.session_seconds * 1000;
    let first = rooms[0].report.store.first_use(who, later, session_ms).await.unwrap().expect("first use");
    assert!(first + 60_000 < later, "admitted {} ms before its use", later - first);
    assert_eq!(rooms[1].report.store.first_use(who, later, session_ms).await.unwrap(), None, "once over every edge");
    // A live room's layout is fixed.
    let body = serde_json::json!({"event": "ev-1", "target": "/buy", "protected": ["/buy"]}).to_string();
    let r = wicket_edge::room::admin::handle(&edges[0], &http::Method::PUT, "/admin/rooms/big", body.as_bytes()).await;
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!((r.status().as_u16(), v["error"].as_str()), (409, Some("conflict")), "{v}");
}

/// Edges whose own clocks are seconds apart still number in join order, and a leader whose clock
/// runs ahead counts every place (it takes no live edge for a silent one): each edge numbers and
/// judges buckets on the room's clock (`TIME` of the node holding the claims).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_with_clocks_seconds_apart_number_in_join_order() {
    let cluster = RedisCluster::start(3);
    let cfg = SpreadConfig { shards: 3, block: 20, block_ms: 10, flush_ms: 20 };
    let edges: Vec<Arc<SpreadRoom>> = (0..3).map(|_| edge(&cluster, "skew", cfg.clone())).collect();
    edges[1].skew_own_clock(-3_000);
    edges[2].skew_own_clock(4_000);
    let mut places = Vec::new();
    for i in 0..30u64 {
        places.push(join(&edges[(i % 3) as usize], 1000 + i).await.0);
        // Each join asked after the last was answered, more than a bucket later.
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert!(places.windows(2).all(|w| w[0] < w[1]), "places out of join order: {places:?}");
    for e in &edges {
        assert!(e.now_ms().abs_diff(unix_ms()) < 50, "the room's clock is this host's: {} vs {}", e.now_ms(), unix_ms());
    }
    // The leader (4 s ahead on its own clock) lets all 30 through, counted as people.
    // (Past the 250 ms a new claim may still number in and a watermark's second, each edge's
    // batch records its blocks.)
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for e in &edges {
        e.flush().await;
    }
    assert!(edges[2].lead("node-c", 10_000).await.unwrap());
    let s = edges[2].advance_lane("node-c", 100, 0, unix_ms()).await.unwrap();
    assert_eq!(s.released, 30, "{s:?}");
    assert!(s.serving >= *places.last().unwrap(), "{s:?} {places:?}");
}

/// Every edge of a spread room must number with the same `shards`, `block` and `block-ms`: an edge
/// configured otherwise takes no place while edges with the room's settings hold live claims (its
/// join fails, saying which settings differ, rather than hand out places the others misread);
/// with no live claim left the room takes the settings of the next edge to claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_with_other_spread_settings_takes_no_place() {
    let cluster = RedisCluster::start(3);
    let cfg = SpreadConfig { shards: 3, block: 20, block_ms: 10, flush_ms: 20 };
    let good = edge(&cluster, "mix", cfg.clone());
    assert!(join(&good, 1).await.0 > 0);
    let odd = edge(&cluster, "mix", SpreadConfig { block_ms: 20, ..cfg.clone() });
    let e = odd.join(2, true, Proof::given(unix_ms())).await.map(|_| ()).unwrap_err();
    assert!(e.0.contains("3:20:20") && e.0.contains("3:20:10"), "{e:?}");
    // Same answer again without asking Redis for 2 s; an edge with the same settings is welcome,
    // flush-ms may differ.
    assert!(odd.join(3, true, Proof::given(unix_ms())).await.is_err());
    let also = edge(&cluster, "mix", SpreadConfig { flush_ms: 50, ..cfg.clone() });
    assert!(join(&also, 4).await.0 > 0);
    // Other shards are other settings too.
    let sharded = edge(&cluster, "mix", SpreadConfig { shards: 4, ..cfg.clone() });
    assert!(sharded.join(5, true, Proof::given(unix_ms())).await.is_err());
    // A room whose claims all went stale (its edges gone) takes the next edge's settings: here
    // a stale claim with other settings, written as a gone edge left it.
    let node = &cluster.nodes[cluster.master_of(&format!("{{{}}}", counter_tag("later"))).unwrap()];
    let key = format!("wk:{{{}}}:edges", counter_tag("later"));
    node.cli(&["hset", &key, "0", "gone-edge:1000", "settings", "9:9:9"]);
    let fresh = edge(&cluster, "later", cfg.clone());
    assert!(join(&fresh, 1).await.0 > 0);
    assert_eq!(node.cli(&["hget", &key, "settings"]).trim(), "3:20:10");
    // A failover lost the claims, and an edge set otherwise claimed first (taking index 0, which
    // an edge of the room still numbered with): at its next renewal the room's edge is refused and
    // stops numbering — no place is handed out twice with one index.
    let node = &cluster.nodes[cluster.master_of(&format!("{{{}}}", counter_tag("lost"))).unwrap()];
    let key = format!("wk:{{{}}}:edges", counter_tag("lost"));
    let a = edge(&cluster, "lost", cfg.clone());
    assert!(join(&a, 1).await.0 > 0);
    node.cli(&["del", &key]);
    let b = edge(&cluster, "lost", SpreadConfig { block_ms: 20, ..cfg });
    assert!(join(&b, 2).await.0 > 0, "the first to claim sets the settings");
    assert_eq!(node.cli(&["hget", &key, "settings"]).trim(), "3:20:20");
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let e = a.join(3, true, Proof::given(unix_ms())).await.map(|_| ()).unwrap_err();
    assert!(e.0.contains("3:20:10"), "{e:?}");
}

/// A place has one life on this layout too (issue #38): a fan whose session ended through one edge
/// (a revoke) is known to the other edge by its old place; there the old ticket is spent, the
/// fan's next join takes a new place (not the spent one again: that was a 503 for every later
/// request), and the old ticket stays spent after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_ended_through_one_edge_is_spent_at_the_other() {
    let cluster = RedisCluster::start(3);
    let cfg = SpreadConfig { shards: 6, block: 10, block_ms: 5, flush_ms: 20 };
    let (a, b) = (edge(&cluster, "r1", cfg.clone()), edge(&cluster, "r1", cfg));
    let (p, fresh) = join(&a, 42).await;
    assert!(fresh);
    assert_eq!(join(&b, 42).await, (p, false), "the other edge learns the place");
    assert!(a.open_session(42, unix_ms() + 60_000, p).await.unwrap());
    assert!(b.session_alive(42, unix_ms()).await.unwrap(), "believed at b too");
    assert!(a.end_session(42).await.unwrap(), "revoked through a");
    assert!(b.spent(42, p).await.unwrap(), "b: the old ticket is spent");
    let (q, fresh) = join(&b, 42).await;
    assert!(fresh && q != p, "b gives a new place, not the spent one: {q} vs {p}");
    assert!(b.spent(42, p).await.unwrap() && a.spent(42, p).await.unwrap(), "the old ticket stays spent on both edges");
    assert!(!b.spent(42, q).await.unwrap() && !a.spent(42, q).await.unwrap(), "the new place is live on both");
    assert!(!b.session_alive(42, unix_ms()).await.unwrap(), "no session runs for it");
    assert_eq!(join(&a, 42).await, (q, false), "and a finds the new place");
}
