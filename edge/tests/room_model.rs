//! The room against a model (issue #38, DESIGN §7c): random sequences of operator actions (pause,
//! queue-all, reject-all, resume, a rate change, a new room config) and fan actions (join, poll
//! with the newest or an old ticket, revoke, every session expiring, a poll through another
//! edge, an edge restarted) are carried out on the real rooms, through the admin API's handler and
//! the rooms' own calls, and every answer is compared with a reference model of the room: a
//! fan's place has one life (ticket → waiting → admitted → session → ended; the only way back is
//! a new join at the back), and the operator's mode is one machine that only its own transitions
//! move, on every edge.
//!
//! Stores: the embedded state (one edge), two edges sharing one real Redis, and two edges
//! sharing a spread room on a real Redis Cluster (`layout = "spread"`, 3 masters, a new room for
//! each sequence); edges restarted in the runs on both. On the spread layout places are not
//! consecutive numbers and `serving` moves only over recorded places, so its model checks what
//! must hold rather than the numbers: a join keeps the live place or gives one after every place
//! the fan held; a token only for the fan's live place at or before `serving` (never a spent
//! ticket, on either edge); `serving` passes no fan's place while the room releases nobody, and
//! reaches the first fan waiting while it releases; `ahead`, when told, is never fewer than the
//! fans truly ahead, and once time passes (a settle step) every edge tells every fan waiting. A
//! failing sequence is shrunk to a minimal one (steps dropped while it still fails) and printed
//! with its seed.
//!
//! `WICKET_MODEL_SEQUENCES=N` (default 150 embedded, 40 on Redis, 10 spread: its ticks wait real
//! time for places to be recorded) and `WICKET_MODEL_STEPS` (default 60; 30 spread) make a long
//! run: `WICKET_MODEL_SEQUENCES=3000 cargo nextest run -p wicket-edge --test room_model`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wicket_edge::WicketConfig;
use wicket_edge::controller::ReleaseMode;
use wicket_edge::identity::Signer;
use wicket_edge::room::redis::RedisRooms;
use wicket_edge::room::state_backend::Backend;
use wicket_edge::room::ticket::QueueTicket;
use wicket_edge::room::{Phase, Room, Rooms, StatusOutcome, admin, unix_ms};
use wicket_testkit::{RedisCluster, RedisServer};

const FANS: usize = 6;
/// Fans that act on the spread layout: fewer, so the short runs its real-time ticks allow still
/// take each fan through several lives (admitted, ended, joined again).
const SPREAD_FANS: usize = 3;
/// Runs on the spread layout so far (each takes a new room id).
static RUNS: AtomicUsize = AtomicUsize::new(0);
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
    /// Edge `e` restarts gracefully (Redis and spread).
    Restart { e: usize },
    /// Time passes (spread only) until every place handed out is recorded and counted: every
    /// edge can tell each fan waiting how many people are ahead. Nobody is released.
    Settle,
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
    /// Places handed out and `serving` (single layouts: consecutive numbers; the spread layout's
    /// checks read `serving` from the edges, [`World::seen`]).
    issued: u64,
    serving: u64,
    fans: Vec<Fan>,
}

/// Where the room's state lives.
#[derive(Debug, Clone)]
enum Store {
    /// In the edge's memory (one edge).
    Embedded,
    /// One Redis (`layout = "single"`), at this URL.
    Redis(String),
    /// A Redis Cluster (`layout = "spread"`), at these seeds.
    Spread(Vec<String>),
}

struct World {
    edges: Vec<Rooms>,
    store: Store,
    /// The room's id: on the spread layout a new one for every run (no cleanup between runs, and
    /// no late batch of a dropped edge lands in the next run's room).
    room: String,
    clock: u64,
    /// The spread layout: `serving` as each edge last read it.
    seen: Vec<u64>,
    /// The spread layout: joins answered with a spent place an edge still remembered (the door's
    /// status then says join again, and the next join takes a new place).
    stale_joins: usize,
    /// The spread layout: polls admitted, and ticks that had to wait for places to be recorded.
    admitted: usize,
    waited_ticks: usize,
    /// The spread layout: waiting answers told a number of people ahead, and of those the ones
    /// with fans truly ahead.
    told_ahead: usize,
    told_ahead_of_fans: usize,
    /// The spread layout: edges restarted.
    restarts: usize,
}

const ROOM: &str = "event = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
                    release = { mode = \"fixed\", rate = 2.0, min = 0.0, max = 100.0 }\nsession-seconds = 600\n";

/// The spread room's settings: buckets of 5 ms, joins written every 20 ms, so a place is
/// recorded (and can be passed) within [`RECORDED`].
const SPREAD: &str = "layout = \"spread\"\nspread = { shards = 3, block = 10, block-ms = 5, flush-ms = 20 }\n";

/// A bucket, a batch and some slack: how long a spread room's new place takes to be recorded.
const RECORDED: Duration = Duration::from_millis(5 + 20 + 10);

/// How long a spread room's leader may take to reach the first fan waiting while the room
/// releases: an edge with nothing to record writes its watermark once a second (spread.rs
/// `MARK_EVERY`), and positions of an edge silent for 2 s are passed after that grace
/// (`GRACE_MS`); busy CI cores on top.
const REACH: Duration = Duration::from_secs(5);

fn edge(store: &Store, room: &str) -> Rooms {
    let (store_line, layout) = match store {
        Store::Embedded => (String::new(), ""),
        Store::Redis(u) => (format!("store = \"{u}\"\n"), ""),
        Store::Spread(seeds) => {
            let list = seeds.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
            (format!("store = {{ cluster = [{list}] }}\n"), SPREAD)
        }
    };
    let text = format!(
        "{store_line}[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\n\
         secret = \"hs-secret-for-room-tests-0123456789abcdef\"\n[[rooms]]\nid = \"{room}\"\n{ROOM}{layout}"
    );
    let cfg = WicketConfig::from_toml_str(&text).unwrap();
    assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
    let backend = match store {
        Store::Embedded => Backend::Embedded,
        Store::Redis(u) => Backend::Redis(RedisRooms::new(u).unwrap()),
        Store::Spread(_) => Backend::Redis(RedisRooms::for_store(cfg.room_store.as_ref().unwrap()).unwrap()),
    };
    Rooms::new(cfg.rooms_config(), Signer::new(b"shared-edge-secret-0123"), backend).unwrap()
}

fn sub(f: usize) -> String {
    format!("fan-{f}")
}

/// A random step. On the spread layout half the steps are fans' or ticks (the operator acts
/// half as often), and there are fewer fans ([`SPREAD_FANS`]): its runs are short.
fn gen_step(rng: &mut StdRng, edges: usize, store: &Store) -> Step {
    let spread = matches!(store, Store::Spread(_));
    let e = rng.random_range(0..edges);
    let f = rng.random_range(0..if spread { SPREAD_FANS } else { FANS });
    let roll = if spread && rng.random_bool(0.5) { rng.random_range(30..100) } else { rng.random_range(0..100) };
    match roll {
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
        96 if spread => Step::Restart { e },
        80..97 => Step::Tick,
        _ if matches!(store, Store::Redis(_)) => Step::Restart { e },
        _ if spread => Step::Settle,
        _ => Step::Tick,
    }
}

async fn admin_call(rooms: &Rooms, method: Method, path: &str, body: &str) -> (u16, serde_json::Value) {
    let r = admin::handle(rooms, &method, path, body.as_bytes()).await;
    let v = serde_json::from_slice(r.body()).unwrap_or(serde_json::Value::Null);
    (r.status().as_u16(), v)
}

impl World {
    async fn new(store: &Store, n: usize) -> World {
        if let Store::Redis(u) = store {
            let c = ::redis::Client::open(u.as_str()).unwrap();
            let mut conn = c.get_multiplexed_async_connection().await.unwrap();
            let _: () = ::redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
        }
        let room = match store {
            Store::Spread(_) => format!("m{}", RUNS.fetch_add(1, Ordering::Relaxed)),
            _ => "r1".to_owned(),
        };
        World {
            edges: (0..n).map(|_| edge(store, &room)).collect(),
            store: store.clone(),
            room,
            clock: unix_ms(),
            seen: vec![0; n],
            stale_joins: 0,
            admitted: 0,
            waited_ticks: 0,
            told_ahead: 0,
            told_ahead_of_fans: 0,
            restarts: 0,
        }
    }

    fn room(&self, e: usize) -> Arc<Room> {
        self.edges[e].get(&self.room).unwrap()
    }

    /// Every edge takes what was published (the release loop's sync, a tick later).
    async fn sync(&self) -> Result<(), String> {
        for rooms in &self.edges {
            rooms.sync_specs().await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn refresh(&self, e: usize) -> Result<(), String> {
        self.room(e).state.refresh().await.map(|_| ()).map_err(|e| e.to_string())
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
            let (code, v) = admin_call(&w.edges[e], Method::POST, &format!("/admin/rooms/{}/{action}", w.room), "").await;
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
            let (code, v) = admin_call(&w.edges[e], Method::PUT, &format!("/admin/rooms/{}/release", w.room), &format!("{{\"mode\":\"fixed\",\"rate\":{rate}}}")).await;
            if code != 200 {
                return Err(format!("release: {code} {v}"));
            }
            m.rate = rate;
            w.sync().await?;
        }
        Step::Config { e, rate } => {
            let (code, v) = admin_call(&w.edges[e], Method::GET, &format!("/admin/rooms/{}", w.room), "").await;
            if code != 200 {
                return Err(format!("get room: {code} {v}"));
            }
            let mut cfg = v["config"].clone();
            cfg["release"]["mode"] = "fixed".into();
            cfg["release"]["rate"] = rate.into();
            let (code, v) = admin_call(&w.edges[e], Method::PUT, &format!("/admin/rooms/{}", w.room), &cfg.to_string()).await;
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
        // The fans and the clock on the spread layout: what holds there (places not consecutive,
        // serving moving only over recorded places).
        _ if matches!(w.store, Store::Spread(_)) => spread_step(w, m, s).await?,
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
        Step::Settle => return Err("settle is a spread step".into()),
        Step::Restart { e } => {
            // A graceful restart (a deploy): the lease is given up, the new process starts bare.
            let old = &w.edges[e];
            old.get("r1").unwrap().state.resign(&old.node).await.map_err(|e| e.to_string())?;
            w.edges[e] = edge(&w.store, &w.room);
            w.sync().await?;
        }
    }
    // On every edge, the mode the model says (the machine, and what the controller runs).
    for e in 0..w.edges.len() {
        let room = w.room(e);
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
        return stopped_during_reject_all(f, out);
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

/// Every place handed to a fan in the run.
fn handed(m: &Model) -> impl Iterator<Item = u64> + '_ {
    m.fans.iter().flat_map(|f| f.tickets.iter().map(|t| t.position))
}

/// The live places after `serving`: the fans truly waiting.
fn waiting_after(m: &Model, serving: u64) -> impl Iterator<Item = u64> + '_ {
    m.fans.iter().filter_map(|f| f.place).filter(move |p| *p > serving)
}

/// Takes what a join gave fan `f` into the model (spread): the live place it holds, or, without
/// one, a new place after every place it held before.
fn take_place(m: &mut Model, f: usize, t: &QueueTicket, what: &str) -> Result<(), String> {
    let fan = &mut m.fans[f];
    let newest = fan.tickets.iter().map(|t| t.position).max();
    match fan.place {
        Some(p) if t.position != p => return Err(format!("fan {f} holds place {p} but {what} gave {}", t.position)),
        Some(_) => {}
        None if newest.is_none_or(|n| t.position > n) => fan.place = Some(t.position),
        None => return Err(format!("fan {f} without a live place: {what} gave {}, not after every place it held ({newest:?})", t.position)),
    }
    fan.tickets.push(t.clone());
    Ok(())
}

/// Reads edge `e`'s `serving` (a refresh, as the release loop's); it never goes back.
async fn serving_at(w: &mut World, e: usize) -> Result<u64, String> {
    let c = w.room(e).state.refresh().await.map_err(|e| e.to_string())?;
    if c.serving < w.seen[e] {
        return Err(format!("edge {e}: serving went back from {} to {}", w.seen[e], c.serving));
    }
    w.seen[e] = c.serving;
    Ok(c.serving)
}

/// One fan or clock step on the spread layout. Places are not consecutive (time bucket, edge
/// index, order at the edge) and the leader steps only over recorded places, so the model does
/// not predict numbers: it checks what must hold of them (issue #38).
async fn spread_step(w: &mut World, m: &mut Model, s: Step) -> Result<(), String> {
    match s {
        Step::Join { e, f } => {
            let room = w.room(e);
            if m.mode == Mode::RejectAll {
                if !room.rejecting() {
                    return Err("reject-all not seen by the joining edge".into());
                }
                return Ok(());
            }
            let t = w.edges[e].join(&room, &sub(f), "dev").await.map_err(|e| e.to_string())?;
            let fan = &m.fans[f];
            if fan.place != Some(t.position) && fan.tickets.iter().any(|old| old.position == t.position) {
                // The edge remembers the place it numbered (or found) for the fan and answers a
                // join without Redis (spread.rs: a rejoin here costs nothing), but that place was
                // spent elsewhere (a revoke at the other edge, the leader's sweep, a new place
                // taken at the other edge). The door asks the place's status next (http.rs
                // `status_for`): spent, join again — the live place, or a new one.
                w.stale_joins += 1;
                m.fans[f].tickets.push(t.clone());
                serving_at(w, e).await?;
                return spread_poll(w, m, e, f, t, 0).await;
            }
            take_place(m, f, &t, "a join")?;
        }
        Step::Poll { e, f, k } => {
            let n = m.fans[f].tickets.len();
            if n == 0 {
                return Ok(());
            }
            let t = m.fans[f].tickets[n - 1 - k.min(n - 1)].clone();
            serving_at(w, e).await?;
            spread_poll(w, m, e, f, t, 0).await?;
        }
        Step::Revoke { e, f } => {
            w.edges[e].revoke(&w.room, &sub(f)).await;
            let fan = &mut m.fans[f];
            if fan.session {
                fan.session = false;
                fan.place = None;
            }
        }
        Step::Expire => {
            // Only the leader sweeps a spread room's shards: the lease as the release loop takes
            // it (release.rs LEASE_MS), then every edge sweeps (the others do nothing).
            let later = unix_ms() + 700_000;
            for e in 0..w.edges.len() {
                let room = w.room(e);
                room.state.lead(&w.edges[e].node, 3000).await.map_err(|e| e.to_string())?;
                room.state.sweep(later, 60_000).await.map_err(|e| e.to_string())?;
            }
            for fan in &mut m.fans {
                if fan.session {
                    fan.session = false;
                    fan.place = None;
                }
            }
        }
        Step::Tick => spread_tick(w, m).await?,
        Step::Settle => spread_settle(w, m).await?,
        Step::Restart { e } => {
            // A graceful restart (a deploy): the open block is recorded and the lease given up;
            // the new process starts bare (a new edge index, no place remembered, serving read
            // afresh). The old index's later positions are passed once its grace is over.
            let room = w.room(e);
            room.state.resign(&w.edges[e].node).await.map_err(|e| e.to_string())?;
            w.edges[e] = edge(&w.store, &w.room);
            w.seen[e] = 0;
            w.restarts += 1;
            w.sync().await?;
        }
        Step::Operator { .. } | Step::Rate { .. } | Step::Config { .. } => {
            return Err(format!("{s:?} is not a spread fan step"));
        }
    }
    Ok(())
}

/// A release tick on every edge, after the places handed out had time to be recorded. While the
/// room releases nobody (not open, or rate 0) `serving` passes no fan's place (it may pass
/// positions nobody holds); while it releases and fans wait, it reaches the first of them, ticks
/// repeated until the places ahead are recorded ([`REACH`]).
async fn spread_tick(w: &mut World, m: &Model) -> Result<(), String> {
    let before = w.seen.iter().copied().max().unwrap_or(0);
    let releasing = m.mode == Mode::Open && m.rate > 0.0;
    let first = waiting_after(m, before).min();
    let started = Instant::now();
    let mut ticks = 0;
    loop {
        tokio::time::sleep(RECORDED).await;
        w.clock += 1000;
        ticks += 1;
        for e in 0..w.edges.len() {
            let room = w.room(e);
            w.edges[e].tick_room(&room, w.clock).await.map_err(|e| e.to_string())?;
        }
        let mut now = 0;
        for e in 0..w.edges.len() {
            now = now.max(serving_at(w, e).await?);
        }
        if !releasing {
            if let Some(p) = handed(m).find(|p| *p > before && *p <= now) {
                return Err(format!("serving moved from {before} to {now} over fan place {p} while releasing nobody ({:?}, rate {})", m.mode, m.rate));
            }
            return Ok(());
        }
        if first.is_none_or(|p| now >= p) {
            if ticks > 1 {
                w.waited_ticks += 1;
            }
            return Ok(());
        }
        if started.elapsed() > REACH {
            return Err(format!("releasing at {}/s for {ticks} ticks, serving stays at {now}, before the first waiting place {first:?}", m.rate));
        }
    }
}

/// Lets time pass until every edge knows how many people are ahead of each fan waiting (the
/// places recorded, every edge's watermark past them, the leader's count published): within
/// [`REACH`]. The leader steps by nothing (it counts, releases nobody), as its refresh does
/// when it has not stepped for a tick: `serving` passes no fan's place. Then what each edge
/// would tell each fan waiting is never fewer than the fans truly ahead.
async fn spread_settle(w: &mut World, m: &Model) -> Result<(), String> {
    let before = w.seen.iter().copied().max().unwrap_or(0);
    let started = Instant::now();
    loop {
        tokio::time::sleep(RECORDED * 4).await;
        for e in 0..w.edges.len() {
            let room = w.room(e);
            let node = &w.edges[e].node;
            if room.state.lead(node, 3000).await.map_err(|e| e.to_string())? {
                room.state.advance_lane(node, 0, 0, unix_ms()).await.map_err(|e| e.to_string())?;
            }
        }
        let mut unknown = None;
        for e in 0..w.edges.len() {
            serving_at(w, e).await?;
            let room = w.room(e);
            let c = room.state.counters();
            unknown = unknown.or_else(|| waiting_after(m, c.serving).find(|p| room.state.ahead_known(*p, &c).is_none()).map(|p| (e, p)));
        }
        let Some((e, p)) = unknown else { break };
        if started.elapsed() > REACH {
            return Err(format!("edge {e} still cannot tell place {p} how many are ahead after {:?}", started.elapsed()));
        }
    }
    let now = w.seen.iter().copied().max().unwrap_or(0);
    if let Some(p) = handed(m).find(|p| *p > before && *p <= now) {
        return Err(format!("serving moved from {before} to {now} over fan place {p} in steps by nothing"));
    }
    // Every fan waiting, as every edge would tell it: never fewer than the fans truly ahead.
    for e in 0..w.edges.len() {
        let room = w.room(e);
        let c = room.state.counters();
        for p in waiting_after(m, c.serving) {
            let told = room.state.ahead_known(p, &c).unwrap_or(0);
            let truly = waiting_after(m, c.serving).filter(|q| *q < p).count() as u64;
            if told < truly {
                return Err(format!("edge {e}: place {p} would be told {told} ahead, {truly} are (serving {})", c.serving));
            }
            w.told_ahead += 1;
            w.told_ahead_of_fans += usize::from(truly > 0);
        }
    }
    Ok(())
}

/// During reject-all a poll with any ticket is told `stopped`, without a token, on every layout.
fn stopped_during_reject_all(f: usize, out: StatusOutcome) -> Result<(), String> {
    match out {
        StatusOutcome::Status(s) if s.state == Phase::Stopped && s.token.is_none() => Ok(()),
        StatusOutcome::Status(s) => Err(format!("fan {f} during reject-all: {:?} token {}", s.state, s.token.is_some())),
        StatusOutcome::Rejoin => Err(format!("fan {f} during reject-all: rejoin")),
    }
}

/// A status poll as the door makes it (edge/src/room/http.rs `status_for`), against the
/// `serving` edge `e` read just before: admitted (a token) only on the fan's live place at or
/// before it; a spent place there joins again (once) and is asked once more; a place behind it
/// waits, told no fewer people ahead than the fans truly ahead (or nothing yet).
async fn spread_poll(w: &mut World, m: &mut Model, e: usize, f: usize, t: QueueTicket, depth: u8) -> Result<(), String> {
    let room = w.room(e);
    let serving = room.state.counters().serving;
    let out = w.edges[e].status(&room, &t, &sub(f)).await.map_err(|e| e.to_string())?;
    let live = m.fans[f].place == Some(t.position);
    if m.mode == Mode::RejectAll {
        return stopped_during_reject_all(f, out);
    }
    match out {
        StatusOutcome::Rejoin => {
            if live {
                return Err(format!("fan {f}'s live place {} told to join again", t.position));
            }
            if t.position > serving {
                return Err(format!("fan {f}'s place {} behind serving {serving} told to join again", t.position));
            }
            if depth > 0 {
                return Err(format!("fan {f}: place spent twice (the rejoin gave spent place {})", t.position));
            }
            let t2 = w.edges[e].join(&room, &sub(f), "dev").await.map_err(|e| e.to_string())?;
            take_place(m, f, &t2, "a rejoin")?;
            Box::pin(spread_poll(w, m, e, f, t2, depth + 1)).await
        }
        StatusOutcome::Status(s) if s.token.is_some() => {
            if !live {
                return Err(format!("fan {f}'s spent ticket {} admitted at edge {e} (live place {:?})", t.position, m.fans[f].place));
            }
            if t.position > serving || s.state != Phase::Admitted {
                return Err(format!("fan {f} at {} given a token as {:?} with serving {serving}", t.position, s.state));
            }
            m.fans[f].session = true;
            w.admitted += 1;
            Ok(())
        }
        StatusOutcome::Status(s) => {
            if t.position <= serving {
                return Err(format!(
                    "fan {f}'s {} place {} at serving {serving} answered {:?} (no token, no rejoin)",
                    if live { "live" } else { "spent" },
                    t.position,
                    s.state
                ));
            }
            let want = if m.mode == Mode::Paused { Phase::Paused } else { Phase::Waiting };
            if s.state != want {
                return Err(format!("fan {f} at {} behind serving {serving}: {:?}, the model says {want:?}", t.position, s.state));
            }
            let truly = waiting_after(m, serving).filter(|p| *p < t.position).count() as u64;
            if s.ahead.is_some_and(|a| a < truly) {
                return Err(format!("fan {f} at {}: told {:?} ahead, {truly} are (serving {serving})", t.position, s.ahead));
            }
            if s.ahead.is_some() {
                w.told_ahead += 1;
                w.told_ahead_of_fans += usize::from(truly > 0);
            }
            Ok(())
        }
    }
}

/// What a run saw besides the model's checks.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    stale_joins: usize,
    admitted: usize,
    waited_ticks: usize,
    told_ahead: usize,
    told_ahead_of_fans: usize,
    restarts: usize,
}

async fn run(seq: &[Step], store: &Store, edges: usize) -> Result<Tally, (usize, String)> {
    let mut w = World::new(store, edges).await;
    let mut m = Model { mode: Mode::Open, rate: 2.0, config_rate: 2.0, issued: 0, serving: 0, fans: vec![Fan::default(); FANS] };
    for (i, s) in seq.iter().enumerate() {
        step(&mut w, &mut m, *s).await.map_err(|e| (i, e))?;
    }
    Ok(Tally {
        stale_joins: w.stale_joins,
        admitted: w.admitted,
        waited_ticks: w.waited_ticks,
        told_ahead: w.told_ahead,
        told_ahead_of_fans: w.told_ahead_of_fans,
        restarts: w.restarts,
    })
}

/// Drops steps while the sequence still fails: a minimal failing sequence.
async fn shrink(mut seq: Vec<Step>, store: &Store, edges: usize) -> (Vec<Step>, String) {
    let mut last = run(&seq, store, edges).await.err().map(|e| e.1).unwrap_or_default();
    loop {
        let mut smaller = false;
        let mut i = seq.len();
        while i > 0 {
            i -= 1;
            let mut s = seq.clone();
            s.remove(i);
            if let Err((at, e)) = run(&s, store, edges).await {
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

/// Runs `sequences` random sequences of `WICKET_MODEL_STEPS` (default `steps`) steps; the
/// sequences and steps run, and what they saw.
async fn check(store: &Store, edges: usize, sequences: usize, steps: usize) -> (usize, usize, Tally) {
    let steps = env_count("WICKET_MODEL_STEPS", steps);
    let base: u64 = std::env::var("WICKET_MODEL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    let mut total = 0;
    let mut tally = Tally::default();
    for n in 0..sequences as u64 {
        let seed = base.wrapping_add(n);
        let mut rng = StdRng::seed_from_u64(seed);
        let seq: Vec<Step> = (0..steps).map(|_| gen_step(&mut rng, edges, store)).collect();
        match run(&seq, store, edges).await {
            Ok(t) => {
                tally.stale_joins += t.stale_joins;
                tally.admitted += t.admitted;
                tally.waited_ticks += t.waited_ticks;
                tally.told_ahead += t.told_ahead;
                tally.told_ahead_of_fans += t.told_ahead_of_fans;
                tally.restarts += t.restarts;
            }
            Err((at, e)) => {
                let (min, why) = shrink(seq[..=at].to_vec(), store, edges).await;
                panic!("seed {seed} (WICKET_MODEL_SEED={seed}) failed at step {at}: {e}\nminimal sequence ({} steps, fails with: {why}):\n{min:#?}", min.len());
            }
        }
        total += seq.len();
    }
    (sequences, total, tally)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_room_follows_the_model() {
    let (n, steps, _) = check(&Store::Embedded, 1, env_count("WICKET_MODEL_SEQUENCES", 150), 60).await;
    eprintln!("embedded: {n} sequences, {steps} steps, every answer as the model says");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_on_redis_follow_the_model() {
    let redis = RedisServer::start();
    let (n, steps, _) = check(&Store::Redis(redis.url()), 2, env_count("WICKET_MODEL_SEQUENCES", 40), 60).await;
    eprintln!("redis, two edges: {n} sequences, {steps} steps, every answer as the model says");
}

/// Two edges sharing a spread room on a real Redis Cluster (3 masters): a new room for each
/// sequence. Ticks wait real time for places to be recorded, so the default run is small (10
/// sequences of 30 steps); `WICKET_MODEL_SEQUENCES` makes a long one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_on_a_spread_room_follow_the_model() {
    let cluster = RedisCluster::start(3);
    let started = Instant::now();
    let (n, steps, t) = check(&Store::Spread(cluster.seeds()), 2, env_count("WICKET_MODEL_SEQUENCES", 10), 30).await;
    eprintln!(
        "spread, two edges on a 3-master cluster: {n} sequences, {steps} steps in {:?}, every answer as the model says \
         ({} admissions, {} ticks waited for places to be recorded, {} joins answered with a spent place the edge remembered, \
         {} waiting answers told the people ahead, {} of them with fans ahead, {} edges restarted)",
        started.elapsed(),
        t.admitted,
        t.waited_ticks,
        t.stale_joins,
        t.told_ahead,
        t.told_ahead_of_fans,
        t.restarts
    );
}

/// The replay the issue found, step by step on both stores: a fan admitted and revoked shows its
/// old ticket again and again (through the other edge, during queue-all, at rate 0, after its
/// sessions ran out) and is never admitted on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_ticket_after_a_revoke_is_never_admitted() {
    for redis in [None, Some(RedisServer::start())] {
        let store = redis.as_ref().map_or(Store::Embedded, |r| Store::Redis(r.url()));
        let edges = if redis.is_some() { 2 } else { 1 };
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
        run(&seq, &store, edges).await.unwrap_or_else(|(i, e)| panic!("step {i}: {e}"));
    }
}

/// On the spread layout an edge remembers the place it numbered for a fan: a ticket older than
/// that place, shown after the place's session ended too, is spent, and the fan's join takes a
/// new place (not the remembered spent one: the door's status of it would be spent twice, a 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_ticket_after_every_session_ended_gets_a_new_place_on_a_spread_room() {
    let cluster = RedisCluster::start(3);
    let store = Store::Spread(cluster.seeds());
    for (a, b) in [(0, 0), (0, 1), (1, 0)] {
        let seq = [
            Step::Join { e: a, f: 0 },
            Step::Tick,
            Step::Poll { e: a, f: 0, k: 0 },
            Step::Revoke { e: a, f: 0 },
            // Spent: a new place, admitted in turn.
            Step::Poll { e: a, f: 0, k: 0 },
            Step::Tick,
            Step::Poll { e: a, f: 0, k: 0 },
            Step::Expire,
            // The first ticket again: spent, and so is the place the edge remembers.
            Step::Poll { e: b, f: 0, k: 1 },
            Step::Join { e: a, f: 0 },
            Step::Join { e: b, f: 0 },
        ];
        run(&seq, &store, 2).await.unwrap_or_else(|(i, e)| panic!("edges {a}, {b}: step {i}: {e}"));
    }
}
