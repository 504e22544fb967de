//! The room against a model (issue #38, DESIGN §7c): random sequences of operator actions (pause,
//! queue-all, reject-all, resume, a rate change, a new room config) and fan actions (join, poll
//! with the newest or an old ticket, revoke, every session expiring, a poll through another
//! edge, an edge restarted) are carried out on the real rooms, through the admin API's handler and
//! the rooms' own calls, and every answer is compared with a reference model of the room: a
//! fan's place has one life (ticket → waiting → admitted → session → ended; the only way back is
//! a new join at the back), and the operator's mode is one machine that only its own transitions
//! move, on every edge.
//!
//! Stores: the embedded state (one edge), and two edges sharing one real Redis (edges restarted
//! in the run). A failing sequence is shrunk to a minimal one (steps dropped while it still
//! fails) and printed with its seed.
//!
//! `WICKET_MODEL_SEQUENCES=N` (default 150 embedded, 40 on Redis) and `WICKET_MODEL_STEPS`
//! (default 60) make a long run:
//! `WICKET_MODEL_SEQUENCES=3000 cargo nextest run -p wicket-edge --test room_model`.

use http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wicket_edge::WicketConfig;
use wicket_edge::controller::ReleaseMode;
use wicket_edge::identity::Signer;
use wicket_edge::room::redis::RedisRooms;
use wicket_edge::room::state_backend::Backend;
use wicket_edge::room::ticket::QueueTicket;
use wicket_edge::room::{Phase, Rooms, StatusOutcome, admin, unix_ms};
use wicket_testkit::RedisServer;

const FANS: usize = 6;
const RATES: [f64; 4] = [0.0, 1.0, 2.0, 3.0];

/// One step of a sequence.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `POST /admin/rooms/r1/<action>` through edge `e`.
    Operator { e: usize, action: &'static str },
    /// `PUT /admin/rooms/r1/release` with a fixed rate.
    Rate { e: usize, rate: f64 },
    /// The room's config sent again with a fixed rate (`PUT /admin/rooms/r1`).
    Config { e: usize, rate: f64 },
    /// Fan `f` joins through edge `e`.
    Join { e: usize, f: usize },
    /// Fan `f` polls with its `k`-th newest ticket through edge `e`.
    Poll { e: usize, f: usize, k: usize },
    /// The origin ends fan `f`'s session (`Wicket-Revoke: 1`) through edge `e`.
    Revoke { e: usize, f: usize },
    /// Every session runs out.
    Expire,
    /// A release tick on every edge.
    Tick,
    /// Edge `e` restarts gracefully (Redis only).
    Restart { e: usize },
}

/// The operator's mode in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Open,
    Paused,
    QueueAll,
    RejectAll,
}

/// A fan in the model.
#[derive(Debug, Clone, Default)]
struct Fan {
    /// Every ticket it was given, oldest first.
    tickets: Vec<QueueTicket>,
    /// Its live place (None: none, or its session ended).
    place: Option<u64>,
    /// Its session runs.
    session: bool,
}

/// The reference model.
#[derive(Debug, Clone)]
struct Model {
    mode: Mode,
    rate: f64,
    /// The rate of the room's config.
    config_rate: f64,
    issued: u64,
    serving: u64,
    fans: Vec<Fan>,
}

struct World {
    edges: Vec<Rooms>,
    redis: Option<String>,
    clock: u64,
}

const ROOM: &str = "[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
                    release = { mode = \"fixed\", rate = 2.0, min = 0.0, max = 100.0 }\nsession-seconds = 600\n";

fn edge(redis: Option<&str>) -> Rooms {
    let store = redis.map(|u| format!("store = \"{u}\"\n")).unwrap_or_default();
    let text = format!(
        "{store}[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\n\
         secret = \"hs-secret-for-room-tests-0123456789abcdef\"\n{ROOM}"
    );
    let cfg = WicketConfig::from_toml_str(&text).unwrap();
    assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
    let backend = match redis {
        Some(u) => Backend::Redis(RedisRooms::new(u).unwrap()),
        None => Backend::Embedded,
    };
    Rooms::new(cfg.rooms_config(), Signer::new(b"shared-edge-secret-0123"), backend).unwrap()
}

fn sub(f: usize) -> String {
    format!("fan-{f}")
}

fn gen_step(rng: &mut StdRng, edges: usize, redis: bool) -> Step {
    let e = rng.random_range(0..edges);
    let f = rng.random_range(0..FANS);
    match rng.random_range(0..100) {
        0..6 => Step::Operator { e, action: "pause" },
        6..10 => Step::Operator { e, action: "queue-all" },
        10..14 => Step::Operator { e, action: "reject-all" },
        14..22 => Step::Operator { e, action: "resume" },
        22..27 => Step::Rate { e, rate: RATES[rng.random_range(0..RATES.len())] },
        27..30 => Step::Config { e, rate: RATES[rng.random_range(0..RATES.len())] },
        30..45 => Step::Join { e, f },
        45..70 => Step::Poll { e, f, k: if rng.random_bool(0.6) { 0 } else { rng.random_range(1..4) } },
        70..77 => Step::Revoke { e, f },
        77..80 => Step::Expire,
        80..97 => Step::Tick,
        _ if redis => Step::Restart { e },
        _ => Step::Tick,
    }
}

async fn admin_call(rooms: &Rooms, method: Method, path: &str, body: &str) -> (u16, serde_json::Value) {
    let r = admin::handle(rooms, &method, path, body.as_bytes()).await;
    let v = serde_json::from_slice(r.body()).unwrap_or(serde_json::Value::Null);
    (r.status().as_u16(), v)
}

impl World {
    async fn new(redis: Option<&str>, n: usize) -> World {
        if let Some(u) = redis {
            let c = ::redis::Client::open(u).unwrap();
            let mut conn = c.get_multiplexed_async_connection().await.unwrap();
            let _: () = ::redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
        }
        World { edges: (0..n).map(|_| edge(redis)).collect(), redis: redis.map(str::to_owned), clock: unix_ms() }
    }

    /// Every edge takes what was published (the release loop's sync, a tick later).
    async fn sync(&self) -> Result<(), String> {
        for rooms in &self.edges {
            rooms.sync_specs().await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn refresh(&self, e: usize) -> Result<(), String> {
        self.edges[e].get("r1").unwrap().state.refresh().await.map(|_| ()).map_err(|e| e.to_string())
    }
}

fn want_controller(m: &Model) -> ReleaseMode {
    match m.mode {
        Mode::Open => ReleaseMode::Fixed(m.rate),
        Mode::Paused | Mode::RejectAll => ReleaseMode::Paused,
        Mode::QueueAll => ReleaseMode::QueueAll,
    }
}

/// Carries out one step on the world and checks its answers against the model.
async fn step(w: &mut World, m: &mut Model, s: Step) -> Result<(), String> {
    match s {
        Step::Operator { e, action } => {
            let (code, v) = admin_call(&w.edges[e], Method::POST, &format!("/admin/rooms/r1/{action}"), "").await;
            let refused = m.mode == Mode::RejectAll && matches!(action, "pause" | "queue-all");
            if refused {
                if code != 409 || v["error"] != "mode_conflict" {
                    return Err(format!("{action} during reject-all: {code} {v}"));
                }
            } else {
                if code != 200 {
                    return Err(format!("{action}: {code} {v}"));
                }
                m.mode = match action {
                    "pause" => Mode::Paused,
                    "queue-all" => Mode::QueueAll,
                    "reject-all" => Mode::RejectAll,
                    _ => Mode::Open,
                };
            }
            w.sync().await?;
        }
        Step::Rate { e, rate } => {
            let (code, v) = admin_call(&w.edges[e], Method::PUT, "/admin/rooms/r1/release", &format!("{{\"mode\":\"fixed\",\"rate\":{rate}}}")).await;
            if code != 200 {
                return Err(format!("release: {code} {v}"));
            }
            m.rate = rate;
            w.sync().await?;
        }
        Step::Config { e, rate } => {
            let (code, v) = admin_call(&w.edges[e], Method::GET, "/admin/rooms/r1", "").await;
            if code != 200 {
                return Err(format!("get room: {code} {v}"));
            }
            let mut cfg = v["config"].clone();
            cfg["release"]["mode"] = "fixed".into();
            cfg["release"]["rate"] = rate.into();
            let (code, v) = admin_call(&w.edges[e], Method::PUT, "/admin/rooms/r1", &cfg.to_string()).await;
            if code != 200 {
                return Err(format!("put room: {code} {v}"));
            }
            // Release settings that changed take over the pace (the operator's mode untouched);
            // the same ones sent again leave the pace set at run time.
            if rate != m.config_rate {
                (m.rate, m.config_rate) = (rate, rate);
            }
            w.sync().await?;
        }
        Step::Join { e, f } => {
            let rooms = &w.edges[e];
            let room = rooms.get("r1").unwrap();
            if m.mode == Mode::RejectAll {
                // The door refuses new places (edge/src/room/http.rs); the room says so.
                if !room.rejecting() {
                    return Err("reject-all not seen by the joining edge".into());
                }
                return Ok(());
            }
            let t = rooms.join(&room, &sub(f), "dev").await.map_err(|e| e.to_string())?;
            let fan = &mut m.fans[f];
            match fan.place {
                Some(p) if t.position != p => return Err(format!("fan {f} holds place {p} but a join gave {}", t.position)),
                Some(_) => {}
                None => {
                    if t.position != m.issued + 1 {
                        return Err(format!("fan {f}'s new place {} is not at the back ({})", t.position, m.issued + 1));
                    }
                    m.issued += 1;
                    fan.place = Some(t.position);
                }
            }
            fan.tickets.push(t);
        }
        Step::Poll { e, f, k } => {
            let n = m.fans[f].tickets.len();
            if n == 0 {
                return Ok(());
            }
            let t = m.fans[f].tickets[n - 1 - k.min(n - 1)].clone();
            w.refresh(e).await?;
            poll(w, m, e, f, t, 0).await?;
        }
        Step::Revoke { e, f } => {
            w.edges[e].revoke("r1", &sub(f)).await;
            let fan = &mut m.fans[f];
            if fan.session {
                fan.session = false;
                fan.place = None;
            }
        }
        Step::Expire => {
            let room = w.edges[0].get("r1").unwrap();
            let later = unix_ms() + 700_000;
            room.state.sweep(later, 60_000).await.map_err(|e| e.to_string())?;
            for fan in &mut m.fans {
                if fan.session {
                    fan.session = false;
                    fan.place = None;
                }
            }
        }
        Step::Tick => {
            w.clock += 1000;
            for rooms in &w.edges {
                let room = rooms.get("r1").unwrap();
                rooms.tick_room(&room, w.clock).await.map_err(|e| e.to_string())?;
            }
            if m.mode == Mode::Open {
                m.serving = (m.serving + m.rate as u64).min(m.issued).max(m.serving);
            }
            for (e, rooms) in w.edges.iter().enumerate() {
                let c = rooms.get("r1").unwrap().state.refresh().await.map_err(|e| e.to_string())?;
                if c.serving != m.serving {
                    return Err(format!("edge {e}: serving {} after a tick, the model says {} ({:?}, rate {})", c.serving, m.serving, m.mode, m.rate));
                }
            }
        }
        Step::Restart { e } => {
            // A graceful restart (a deploy): the lease is given up, the new process starts bare.
            let old = &w.edges[e];
            old.get("r1").unwrap().state.resign(&old.node).await.map_err(|e| e.to_string())?;
            w.edges[e] = edge(w.redis.as_deref());
            w.sync().await?;
        }
    }
    // On every edge, the mode the model says (the machine, and what the controller runs).
    for (e, rooms) in w.edges.iter().enumerate() {
        let room = rooms.get("r1").unwrap();
        let want = want_controller(m);
        if room.mode() != want || room.rejecting() != (m.mode == Mode::RejectAll) {
            return Err(format!("edge {e}: controller {:?}, rejecting {}; the model says {:?} ({want:?})", room.mode(), room.rejecting(), m.mode));
        }
    }
    Ok(())
}

/// A status poll as the door makes it (edge/src/room/http.rs `status_for`): a spent place joins
/// again and is asked once more.
async fn poll(w: &World, m: &mut Model, e: usize, f: usize, t: QueueTicket, depth: u8) -> Result<(), String> {
    let rooms = &w.edges[e];
    let room = rooms.get("r1").unwrap();
    let out = rooms.status(&room, &t, &sub(f)).await.map_err(|e| e.to_string())?;
    let fan_place = m.fans[f].place;
    let live = fan_place == Some(t.position);
    if m.mode == Mode::RejectAll {
        return match out {
            StatusOutcome::Status(s) if s.state == Phase::Stopped && s.token.is_none() => Ok(()),
            StatusOutcome::Status(s) => Err(format!("fan {f} during reject-all: {:?} token {}", s.state, s.token.is_some())),
            StatusOutcome::Rejoin => Err(format!("fan {f} during reject-all: rejoin")),
        };
    }
    match out {
        StatusOutcome::Rejoin => {
            if live {
                return Err(format!("fan {f}'s live place {} told to join again", t.position));
            }
            if depth > 0 {
                return Err("place spent twice".into());
            }
            let t2 = rooms.join(&room, &sub(f), "dev").await.map_err(|e| e.to_string())?;
            let fan = &mut m.fans[f];
            match fan.place {
                Some(p) if p != t2.position => return Err(format!("fan {f} rejoined at {} holding {p}", t2.position)),
                Some(_) => {}
                None => {
                    if t2.position != m.issued + 1 {
                        return Err(format!("fan {f} rejoined at {}, not at the back ({})", t2.position, m.issued + 1));
                    }
                    m.issued += 1;
                    fan.place = Some(t2.position);
                }
            }
            fan.tickets.push(t2.clone());
            Box::pin(poll(w, m, e, f, t2, depth + 1)).await
        }
        StatusOutcome::Status(s) => {
            if t.position <= m.serving {
                if !live {
                    return Err(format!("fan {f}'s spent ticket {} answered {:?} (token {})", t.position, s.state, s.token.is_some()));
                }
                if s.state != Phase::Admitted || s.token.is_none() {
                    return Err(format!("fan {f} at {} (serving {}) answered {:?}", t.position, m.serving, s.state));
                }
                m.fans[f].session = true;
                return Ok(());
            }
            let want = if m.mode == Mode::Paused { Phase::Paused } else { Phase::Waiting };
            if s.token.is_some() || s.state != want {
                return Err(format!("fan {f} at {} behind serving {}: {:?} token {}, the model says {want:?}", t.position, m.serving, s.state, s.token.is_some()));
            }
            let ahead = t.position - m.serving - 1;
            if s.ahead != Some(ahead) {
                return Err(format!("fan {f} at {}: told {:?} ahead, {ahead} are", t.position, s.ahead));
            }
            Ok(())
        }
    }
}

async fn run(seq: &[Step], redis: Option<&str>, edges: usize) -> Result<(), (usize, String)> {
    let mut w = World::new(redis, edges).await;
    let mut m = Model { mode: Mode::Open, rate: 2.0, config_rate: 2.0, issued: 0, serving: 0, fans: vec![Fan::default(); FANS] };
    for (i, s) in seq.iter().enumerate() {
        step(&mut w, &mut m, *s).await.map_err(|e| (i, e))?;
    }
    Ok(())
}

/// Drops steps while the sequence still fails: a minimal failing sequence.
async fn shrink(mut seq: Vec<Step>, redis: Option<&str>, edges: usize) -> (Vec<Step>, String) {
    let mut last = run(&seq, redis, edges).await.err().map(|e| e.1).unwrap_or_default();
    loop {
        let mut smaller = false;
        let mut i = seq.len();
        while i > 0 {
            i -= 1;
            let mut s = seq.clone();
            s.remove(i);
            if let Err((at, e)) = run(&s, redis, edges).await {
                s.truncate(at + 1);
                seq = s;
                last = e;
                smaller = true;
                i = i.min(seq.len());
            }
        }
        if !smaller {
            return (seq, last);
        }
    }
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn check(redis: Option<&str>, edges: usize, sequences: usize) -> (usize, usize) {
    let steps = env_count("WICKET_MODEL_STEPS", 60);
    let base: u64 = std::env::var("WICKET_MODEL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    let mut total = 0;
    for n in 0..sequences as u64 {
        let seed = base.wrapping_add(n);
        let mut rng = StdRng::seed_from_u64(seed);
        let seq: Vec<Step> = (0..steps).map(|_| gen_step(&mut rng, edges, redis.is_some())).collect();
        if let Err((at, e)) = run(&seq, redis, edges).await {
            let (min, why) = shrink(seq[..=at].to_vec(), redis, edges).await;
            panic!("seed {seed} (WICKET_MODEL_SEED={seed}) failed at step {at}: {e}\nminimal sequence ({} steps, fails with: {why}):\n{min:#?}", min.len());
        }
        total += seq.len();
    }
    (sequences, total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_room_follows_the_model() {
    let (n, steps) = check(None, 1, env_count("WICKET_MODEL_SEQUENCES", 150)).await;
    eprintln!("embedded: {n} sequences, {steps} steps, every answer as the model says");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_on_redis_follow_the_model() {
    let redis = RedisServer::start();
    let (n, steps) = check(Some(&redis.url()), 2, env_count("WICKET_MODEL_SEQUENCES", 40)).await;
    eprintln!("redis, two edges: {n} sequences, {steps} steps, every answer as the model says");
}

/// The replay the issue found, step by step on both stores: a fan admitted and revoked shows its
/// old ticket again and again (through the other edge, during queue-all, at rate 0, after its
/// sessions ran out) and is never admitted on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_ticket_after_a_revoke_is_never_admitted() {
    for redis in [None, Some(RedisServer::start())] {
        let url = redis.as_ref().map(RedisServer::url);
        let edges = if url.is_some() { 2 } else { 1 };
        let other = edges - 1;
        let seq = [
            Step::Join { e: 0, f: 0 },
            Step::Tick,
            Step::Poll { e: 0, f: 0, k: 0 },
            Step::Revoke { e: 0, f: 0 },
            // The old ticket: a new place at the back (waiting), then the same old ticket again.
            Step::Poll { e: other, f: 0, k: 0 },
            Step::Poll { e: other, f: 0, k: 1 },
            Step::Tick,
            Step::Operator { e: 0, action: "queue-all" },
            Step::Poll { e: other, f: 0, k: 1 },
            Step::Operator { e: 0, action: "resume" },
            Step::Rate { e: 0, rate: 0.0 },
            Step::Poll { e: other, f: 0, k: 1 },
            Step::Expire,
            Step::Poll { e: 0, f: 0, k: 2 },
        ];
        run(&seq, url.as_deref(), edges).await.unwrap_or_else(|(i, e)| panic!("step {i}: {e}"));
    }
}
