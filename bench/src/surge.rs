//! The surge simulator: virtual users against the real `wicket` edge and `wicket-core` over loopback.
//!
//! Each virtual user joins the room, polls as told (`poll_after_ms`), holds when admitted, then pays after a
//! think time or abandons (the sweeper must give those seats back). Users are multiplexed over a bounded
//! number of connections: a scheduler pops whoever is due and runs their next request under a semaphore, so a
//! 2-core box can play a million of them. Bots share devices, ignore `poll_after_ms` and drop cookies.
//!
//! A fan near the front (told to ask again within [`NEAR_POLL_MS`]) listens on the room's event
//! stream instead, as the queue page does (it opens the stream first, `static/queue.js`): up to
//! [`STREAMS_MAX`] at once, the others poll. Fans far back poll: their stream would say nothing
//! sooner (the edge sends them a frame every 15 s), and a million open streams do not fit this
//! box's open-file limit.

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::cmp::Reverse;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::procs::{Proc, Stack, StackOptions};
use crate::stats::{Recorder, kendall_tau, ordered_tau, seat_order};

/// One scenario's knobs.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub users: usize,
    /// Seats of the main pool.
    pub seats: u32,
    /// Second pool of the combo SKU (0 = no combo).
    pub combo_seats: u32,
    /// Named seats (a seated SKU), 0 = none.
    pub named_seats: u32,
    pub ramp_seconds: f64,
    pub random: bool,
    pub p99_target_ms: u64,
    pub pay_probability: f64,
    pub bots_fraction: f64,
    pub pow: bool,
    pub hold_seconds: u32,
    pub max_seconds: u64,
    pub connections: usize,
    /// Joins in flight at once (0: a quarter of `connections`). A spread room answers a join with its
    /// edge's next batch (every `flush-ms`), so a million fans need many joins in flight, as a million
    /// browsers have.
    pub join_connections: usize,
    /// Halve the core's capacity between these seconds of the run.
    pub capacity_drop: Option<(u64, u64)>,
    pub release_max: u32,
    /// The crash test: Redis (AOF) under the core and two edges sharing the queue; the leader edge, the
    /// core and Redis are SIGKILLed and restarted once each mid-sale, and fans retry as browsers do.
    pub crashes: bool,
    /// The megasale (issue #27 item 2): `edges` edges share one room on a Redis Cluster of three masters with a
    /// replica each; one edge and the room's master are SIGKILLed mid-sale (not restarted: the fans move to
    /// another edge, the replica takes over). Fans retry as in `crashes`.
    pub megasale: bool,
    pub edges: usize,
    /// The room's layout on the cluster (`single` or `spread`).
    pub layout: String,
    /// `[rooms.spread]` of the spread layout: (shards, block, block-ms, flush-ms).
    pub spread: (u32, u32, u32, u32),
}

impl Scenario {
    /// Fans retry as browsers do (backoff, another edge after a failed connection).
    fn retries(&self) -> bool {
        self.crashes || self.megasale
    }

    pub fn preset(name: &str, quick: bool) -> anyhow::Result<Scenario> {
        let base = Scenario {
            name: "stararena",
            users: 1_000_000,
            seats: 20_000,
            combo_seats: 0,
            named_seats: 0,
            ramp_seconds: 10.0,
            random: false,
            p99_target_ms: 100,
            pay_probability: 0.9,
            bots_fraction: 0.0,
            pow: false,
            hold_seconds: 20,
            max_seconds: 600,
            connections: 256,
            join_connections: 0,
            capacity_drop: None,
            release_max: 2000,
            crashes: false,
            megasale: false,
            edges: 1,
            layout: "single".into(),
            spread: (6, 500, 5, 300),
        };
        let mut s = match name {
            "stararena" => base,
            "scenic" => Scenario {
                name: "scenic",
                users: 120_000,
                seats: 3000,
                combo_seats: 600,
                named_seats: 0,
                random: true,
                pay_probability: 0.7,
                ..base
            },
            // Enough stock that the sale is still selling when the capacity comes back (a run that
            // sells out before the drop ends does not test it: --check fails it).
            "capacity-drop" => Scenario {
                name: "capacity-drop",
                users: 200_000,
                seats: 40_000,
                capacity_drop: Some((20, 50)),
                max_seconds: 300,
                ..base
            },
            "bots" => Scenario { name: "bots", users: 50_000, seats: 2000, bots_fraction: 0.10, pow: true, ..base },
            "bots-nopow" => Scenario { name: "bots-nopow", users: 50_000, seats: 2000, bots_fraction: 0.10, pow: false, ..base },
            // Slow enough (at most 80 admissions/s) that the sale is still selling at the third kill.
            "crashes" => Scenario { name: "crashes", users: 20_000, seats: 6000, release_max: 80, max_seconds: 300, crashes: true, ..base },
            // A million fans over four edges; at most 60 admissions/s so the sale still sells when both kills
            // come (a quarter and half of the seats taken).
            "megasale" => Scenario {
                name: "megasale",
                users: 1_000_000,
                seats: 20_000,
                ramp_seconds: 60.0,
                release_max: 60,
                max_seconds: 900,
                join_connections: 1024,
                megasale: true,
                edges: 4,
                ..base
            },
            other => anyhow::bail!("unknown scenario {other}: stararena | scenic | capacity-drop | bots | bots-nopow | crashes | megasale"),
        };
        if quick {
            s.users = (s.users / 200).max(2000);
            s.seats = (s.seats / 100).max(200);
            s.combo_seats /= 100;
            s.ramp_seconds = 3.0;
            s.max_seconds = 50;
            s.connections = 64;
            s.hold_seconds = 5;
            s.capacity_drop = s.capacity_drop.map(|_| (4, 10));
            if s.capacity_drop.is_some() {
                // Enough to sell through the drop even in a debug build (--check fails it otherwise).
                s.users = 6000;
                s.seats = 2000;
                // At most 100 admissions/s: 2,000 seats cannot sell out before the drop ends.
                s.release_max = 100;
            }
            if s.megasale {
                // Enough admitted fans (~1,150) that τ is not a few swapped neighbours, slow enough that both
                // kills come while it sells; under 90 s with debug binaries on 2 cores.
                s.users = 6000;
                s.seats = 1500;
                s.release_max = 60;
                s.ramp_seconds = 5.0;
                s.max_seconds = 45;
                s.join_connections = 256;
            }
            if s.crashes {
                s.users = 2000;
                s.seats = 600;
                s.release_max = 25;
                s.max_seconds = 100;
            }
        }
        Ok(s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Join,
    Poll,
    /// Listening on the room's event stream until the turn comes ([`stream`]).
    Stream,
    Hold,
    Pay,
    /// Leave through the site's "done" page: the session ends and its slot frees.
    Leave,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    None,
    Paid,
    Abandoned,
    SoldOut,
    Refused,
    Error,
}

struct User {
    phase: Phase,
    bot: bool,
    cookies: String,
    token: Option<String>,
    order: Option<(String, u64)>,
    /// When the fan's join was sent and when its answer came, on one counter (`Shared::join_seq`).
    join_seq: u64,
    join_answered: u64,
    /// The first try of a join still unanswered (crashes: tries that failed).
    join_first_try: Option<u64>,
    position: u64,
    admitted_ms: Option<u64>,
    outcome: Outcome,
    qty: u32,
    sku: &'static str,
    polls: u32,
    /// Which edge the fan's requests go to (crashes: the other one after a failed connection).
    edge: usize,
    /// Failed tries in a row (crashes: the backoff grows with it).
    fails: u32,
    /// Since when the fan has seen only failures (crashes), ms.
    stall_since: Option<u64>,
    /// The place of the first answered join; a later answer naming another place is a lost place.
    first_position: u64,
    place_changed: bool,
    /// Refusals of a hold or of the "done" page (crashes: retried a few times).
    refusals: u32,
    /// The provider took this fan's money (the fan saw "paid").
    paid_at_provider: bool,
    /// The edge that answered the fan's join with a place (megasale: τ per edge).
    join_edge: u8,
    /// Megasale: (place, kill) when a kill came while the fan waited there; its next answer is judged.
    place_check: Option<(u64, u8)>,
    /// When the fan's first join was answered, and when a hold of theirs was made (ms since start).
    joined_ms: Option<u64>,
    held_ms: Option<u64>,
    /// The fan's hold got an answer (they tried to buy), and it was "sold out" (admitted, no seat).
    hold_tried: bool,
    hold_sold_out: bool,
    /// Told "sold out for now" at the hold (`restock_possible`): on the core's waitlist, asking again
    /// (issue #39); since when (ms since start).
    waitlisted: Option<u64>,
    /// The last answer before the fan saw "admitted": (state, `poll_after_ms`, `ahead`, ms since
    /// start) — how long the room let it wait before its turn was seen.
    last_told: Option<(&'static str, u64, Option<u64>, u64)>,
}

/// Everything a run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SurgeReport {
    pub scenario: String,
    pub users: usize,
    pub bots: usize,
    pub seats: u64,
    pub seconds: f64,
    pub admitted: u64,
    pub sold: u64,
    pub paid_orders: u64,
    pub abandoned: u64,
    /// People still waiting in the queue when the run ended.
    pub still_waiting: u64,
    /// When the first pool ran out (its `available` reached 0 in the 1-s stock samples), s.
    pub sellout_seconds: Option<f64>,
    /// When as many tickets had been held as the main pool has (the core's `hold_units` reached its
    /// capacity, or `available` 0 first), s: the sellout had no unpaid hold come back meanwhile.
    /// With the run's short holds (`hold_seconds`), tickets come back mid-sale and go to the next
    /// places one release tick at a time, so `available` first reads 0 later than this.
    pub held_through_seconds: Option<f64>,
    /// Of the fans admitted (bots too), the share whose hold met "sold out": admitted, and no seat
    /// (issue #39: admitted should mean a seat). 0 when nobody was admitted.
    pub admitted_sold_out_share: f64,
    /// Admitted fans told "sold out for now" at their hold (on the core's waitlist), and of them those
    /// who got tickets that came back (issue #39).
    pub waitlisted: u64,
    pub waitlisted_seated: u64,
    /// Among pairs of fans (not bots) who tried to buy where exactly one got tickets (a hold was
    /// made), the share where that one came first in the queue's order ([`crate::stats::seat_order`]):
    /// join order, but in a random room (its pre-queue drawn on purpose) admission order, to the
    /// millisecond; `None` without such a pair.
    pub seat_order: Option<f64>,
    /// When every ticket was sold and paid (nothing held any more): abandoned holds resold.
    pub paid_out_seconds: Option<f64>,
    pub oversold: u64,
    pub double_sold: u64,
    pub over_limit_users: u64,
    /// FIFO Kendall τ, place vs join order, over the admitted fans' pairs whose joins did not overlap
    /// (one answered before the other was sent): see [`ordered_tau`].
    pub fifo_tau: f64,
    /// The same over every pair, ordered by when each join was sent: overlapping joins count too,
    /// so the client's own scheduling (a request delayed on a busy machine) shows up as disorder.
    pub fifo_tau_send_order: f64,
    /// The share of the admitted fans' pairs `fifo_tau` could judge (their joins did not overlap).
    pub fifo_pairs_judged: f64,
    /// Fraction of 1-s windows (≥ 5 holds) whose *core* hold P99 is within target, from the core's
    /// own latency histogram (the issue's "core P99 per 1-second window").
    pub p99_windows_ok: f64,
    pub p99_windows: usize,
    /// The same for the hold P99 the bench's clients saw end to end (edge + core + the bench's own
    /// scheduling on the same cores): stricter, and noisier.
    pub client_p99_windows_ok: f64,
    pub client_p99_windows: usize,
    /// The seconds during which the core's capacity was halved (capacity-drop).
    pub drop_window: Option<(u64, u64)>,
    /// `client_p99_windows_ok` over the drop window alone.
    pub drop_window_client_p99_ok: Option<f64>,
    /// The sale was still selling when the drop ended (sell-out after it): the scenario tested what it
    /// names.
    pub drop_while_selling: Option<bool>,
    /// The P99 target the windows were held to, ms.
    pub p99_target_ms: f64,
    /// The longest stall: the longest interval (s) in which no fan was admitted (none saw
    /// "admitted") while fans waited, the sale was not sold out and the core's hold P99 was within
    /// target (idle, or ≥ 99% of that second's holds within it); and the second it began.
    pub longest_stall_s: f64,
    pub longest_stall_from_s: Option<f64>,
    pub bots_share_of_seats: f64,
    pub bots_share_of_population: f64,
    /// Bots among the fans admitted (who saw "admitted"): beside their share of seats, it tells a
    /// race for seats among the admitted from an admission out of turn.
    pub bots_share_of_admitted: f64,
    pub edge_rss_mb: f64,
    pub requests_per_second: f64,
    pub endpoints: Vec<crate::stats::EndpointFigures>,
    pub statuses: BTreeMap<String, u64>,
    /// The first answer of each refused (endpoint, status), to see why.
    pub examples: BTreeMap<String, String>,
    pub release_rate: Vec<(f64, f64)>,
    pub queue_length: Vec<(f64, f64)>,
    pub hold_p99: Vec<(f64, f64)>,
    /// The crash test's figures (scenario `crashes`).
    pub crashes: Option<CrashFigures>,
    /// Users with more than one live (held or paid) order.
    pub users_with_several_orders: u64,
    /// The megasale's figures (scenario `megasale`).
    pub megasale: Option<crate::megasale::MegaFigures>,
}

/// What the crash test measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CrashFigures {
    pub kills: Vec<KillFigures>,
    /// Orders the provider took money for (the fan saw "paid").
    pub paid_at_provider: u64,
    /// Of those, orders not PAID (or USED) in the core at the end.
    pub paid_lost: u64,
    pub paid_lost_examples: Vec<String>,
    /// Holds acknowledged to fans (201, or 200 for a replay).
    pub holds_acknowledged: u64,
    /// Of those, orders the core does not know at the end.
    pub holds_lost: u64,
    /// Fans told a place other than the one their first join gave them.
    pub places_changed: u64,
    /// Places given to more than one fan.
    pub places_shared: u64,
    /// Every kill happened while the sale was still selling (tickets left to sell).
    pub kills_while_selling: bool,
    pub odd: BTreeMap<String, u64>,
    /// The core's stock and each edge's room stats at the end.
    pub final_stock: Value,
    pub final_rooms: Vec<Value>,
}

/// One kill as the fans saw it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KillFigures {
    pub what: String,
    pub at_s: f64,
    /// From the SIGKILL until the restarted process answered its health check (1 s restart delay included).
    pub restarted_after_s: Option<f64>,
    pub restart_error: Option<String>,
    pub sold_at_kill: u64,
    pub held_at_kill: u64,
    /// Fans who met a failure (no connection, a timeout, 502/503/504, a paused hold) from this kill on.
    pub fans_hit: u64,
    /// How long those fans waited for their next answer: median and longest, s.
    pub fan_wait_p50_s: f64,
    pub fan_wait_max_s: f64,
    /// From the kill until the last fan it hit got an answer again, s.
    pub fans_all_back_after_s: f64,
    /// The longest pause in acknowledged holds spanning the kill, s.
    pub hold_gap_s: f64,
    /// The longest pause in admissions (fans seeing "admitted") spanning the kill, s.
    pub admission_gap_s: f64,
    /// How long the queue stood still around the kill: from the last advance of `serving` before it to
    /// the first after it (room stats sampled once a second, so ±1 s).
    pub queue_stall_s: Option<f64>,
}

/// Who is due when: (due time in ms, person), earliest first.
type DueQueue = BinaryHeap<Reverse<(u64, u32)>>;

struct Shared {
    s: Scenario,
    stack: Stack,
    http: reqwest::Client,
    /// The buyers' client (hold, pay, leave), driven by a runtime thread of its own
    /// ([`SaleThread`]): a fan's phone is not slowed by a million other fans' joins and polls, so
    /// the end-to-end figures measure the edge and the core, not the bench's own scheduler.
    sale_http: reqwest::Client,
    /// The event streams' client: no overall timeout (a stream lasts up to the edge's
    /// `event-stream-seconds`), a connection each.
    stream_http: reqwest::Client,
    /// Event streams open now (at most [`STREAMS_MAX`]).
    streams: AtomicUsize,
    users: Vec<Mutex<User>>,
    /// Who is due when, in three lanes: the queue (status polls of fans who joined), the sale (hold,
    /// pay, leave) and the entrance (joins). People act in parallel, so a backlog at the entrance
    /// must not hold up the fans already queued nor the buyers already let in: with one lane for
    /// joins and polls, a million joins due in the first 10 s (more than the bench can send on
    /// this box) came before every poll due later, and fans whose turn came did not poll for tens
    /// of seconds (issue #26: "admissions stopped ... while the core went idle").
    /// A fourth lane opens the event streams of fans near the front.
    lanes: [Mutex<DueQueue>; 4],
    start: Instant,
    rec: Recorder,
    join_seq: AtomicU64,
    admitted: AtomicU64,
    done: AtomicUsize,
    stop: AtomicBool,
    /// The core's main pool reached 0 available at some sample.
    sold_out_seen: AtomicBool,
    /// Every ticket sold and paid (nothing available, nothing held): nothing can come back.
    paid_out_seen: AtomicBool,
    /// The main pool at the last stock sample: (sold, held, capacity).
    last_stock: Mutex<(u64, u64, u64)>,
    /// Crashes: what was killed when, and when it answered again.
    kills: Mutex<Vec<Kill>>,
    /// Crashes: (first failure, next answer) of every run of failures a fan saw, ms.
    stalls: Mutex<Vec<(u64, u64)>>,
    /// Crashes: when each acknowledged hold (201, or 200 for a replay) came back, ms.
    holds_ok: Mutex<Vec<u64>>,
    /// Crashes: odd answers counted (a refused ticket, a refused hold token, a refused "done" page,
    /// callback retries of the provider).
    odd: Mutex<BTreeMap<&'static str, u64>>,
    /// Megasale: the cluster and what its kills recorded.
    mega: Option<crate::megasale::Mega>,
    /// Join answers that gave a place; the first and the last of them, ms.
    joins_placed: AtomicU64,
    first_join_ms: AtomicU64,
    last_join_ms: AtomicU64,
}

/// One SIGKILL of the crash test.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Kill {
    pub what: String,
    pub at_ms: u64,
    /// When the restarted process answered (its health check), ms.
    pub back_ms: Option<u64>,
    pub restart_error: Option<String>,
    /// The main pool at the last sample before the kill.
    pub sold: u64,
    pub held: u64,
    pub capacity: u64,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
    fn schedule(&self, user: u32, at_ms: u64) {
        let lane = match self.users[user as usize].lock().phase {
            Phase::Hold | Phase::Pay | Phase::Leave => 1,
            Phase::Join => 2,
            Phase::Stream => 3,
            _ => 0,
        };
        self.lanes[lane].lock().push(Reverse((at_ms, user)));
    }
    /// Megasale: the first answer with a state after a kill tells whether the fan kept its place.
    fn judge_place(&self, u: u32, body: &Value) {
        let Some(mega) = &self.mega else { return };
        let Some(state) = body["state"].as_str() else { return };
        let Some((old, kill)) = self.users[u as usize].lock().place_check.take() else { return };
        if let Some(t) = mega.places.lock().get_mut(kill as usize) {
            t.judge(old, state, body["position"].as_u64());
        }
    }
}

impl crate::megasale::Sale for Shared {
    fn now(&self) -> u64 {
        self.now_ms()
    }
    fn started(&self) -> Instant {
        self.start
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    fn stock_now(&self) -> (u64, u64, u64) {
        *self.last_stock.lock()
    }
    fn short(&self) -> bool {
        self.s.max_seconds <= 100
    }
    fn stack(&self) -> &Stack {
        &self.stack
    }
    fn http(&self) -> &reqwest::Client {
        &self.http
    }
    /// Marks every fan who waits with a place now (kill `kill`); its next answer is judged.
    fn mark_places(&self, kill: usize) -> u64 {
        let mut n = 0;
        for u in &self.users {
            let mut g = u.lock();
            if !g.bot && g.phase == Phase::Poll && g.admitted_ms.is_none() && g.position > 0 && g.place_check.is_none() {
                g.place_check = Some((g.position, kill as u8));
                n += 1;
            }
        }
        n
    }
}

fn merge_cookies(jar: &mut String, headers: &reqwest::header::HeaderMap) {
    for v in headers.get_all(reqwest::header::SET_COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        let Some(pair) = v.split(';').next() else { continue };
        let Some((name, _)) = pair.split_once('=') else { continue };
        let mut kept: Vec<&str> =
            jar.split("; ").filter(|c| !c.is_empty() && !c.starts_with(&format!("{name}="))).collect();
        kept.push(pair);
        *jar = kept.join("; ");
    }
}

/// Small deterministic per-user randomness (no shared RNG on the hot path).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit(x: u64) -> f64 {
    (mix(x) >> 11) as f64 / (1u64 << 53) as f64
}

/// Runs a scenario end to end and returns its report.
pub async fn run(s: Scenario, progress: bool) -> anyhow::Result<SurgeReport> {
    let mega = if s.megasale { Some(crate::megasale::Mega::start().await?) } else { None };
    let stack = Stack::start(StackOptions {
        seats: s.seats,
        combo_seats: s.combo_seats,
        named_seats: s.named_seats,
        random: s.random,
        p99_target_ms: s.p99_target_ms,
        pow: s.pow,
        hold_seconds: s.hold_seconds,
        shaper: s.capacity_drop.is_some(),
        release_max: s.release_max,
        crashes: s.crashes,
        room_cluster: mega.as_ref().map(|m| m.seeds()),
        edges: s.edges,
        layout: s.megasale.then(|| s.layout.clone()),
        spread: s.spread,
        queue_ip_limit: s.bots_fraction > 0.0,
    })
    .await?;
    let stack_edges = stack.edges.len();
    let bots = (s.users as f64 * s.bots_fraction) as usize;
    let users: Vec<Mutex<User>> = (0..s.users)
        .map(|i| {
            let r = mix(i as u64);
            let (sku, qty) = if s.combo_seats > 0 && r % 5 == 0 {
                ("combo", 1)
            } else {
                ("ga", 1 + (r >> 8) as u32 % 2)
            };
            Mutex::new(User {
                phase: Phase::Join,
                bot: i < bots,
                cookies: String::new(),
                token: None,
                order: None,
                join_seq: 0,
                join_answered: 0,
                join_first_try: None,
                position: 0,
                admitted_ms: None,
                outcome: Outcome::None,
                qty,
                sku,
                polls: 0,
                edge: i % stack_edges,
                fails: 0,
                stall_since: None,
                first_position: 0,
                place_changed: false,
                refusals: 0,
                paid_at_provider: false,
                join_edge: 0,
                place_check: None,
                joined_ms: None,
                held_ms: None,
                hold_tried: false,
                hold_sold_out: false,
                waitlisted: None,
                last_told: None,
            })
        })
        .collect();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(s.connections + s.join_connections)
        .timeout(Duration::from_secs(10))
        .build()?;
    let sale = SaleThread::start()?;
    let sale_http = reqwest::Client::builder().pool_max_idle_per_host(s.connections).timeout(Duration::from_secs(10)).build()?;
    let sh = Arc::new(Shared {
        s: s.clone(),
        stack,
        http,
        sale_http,
        stream_http: reqwest::Client::builder().connect_timeout(Duration::from_secs(10)).pool_max_idle_per_host(0).build()?,
        streams: AtomicUsize::new(0),
        users,
        lanes: [Mutex::new(BinaryHeap::new()), Mutex::new(BinaryHeap::new()), Mutex::new(BinaryHeap::new()), Mutex::new(BinaryHeap::new())],
        start: Instant::now(),
        rec: Recorder::default(),
        join_seq: AtomicU64::new(0),
        admitted: AtomicU64::new(0),
        done: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        sold_out_seen: AtomicBool::new(false),
        paid_out_seen: AtomicBool::new(false),
        last_stock: Mutex::new((0, 0, 0)),
        kills: Mutex::new(Vec::new()),
        stalls: Mutex::new(Vec::new()),
        holds_ok: Mutex::new(Vec::new()),
        odd: Mutex::new(BTreeMap::new()),
        mega,
        joins_placed: AtomicU64::new(0),
        first_join_ms: AtomicU64::new(u64::MAX),
        last_join_ms: AtomicU64::new(0),
    });
    if let Some(m) = &sh.mega {
        m.read_before();
    }
    // Arrivals spread over the ramp, in a shuffled order so bots are not all first.
    for i in 0..s.users {
        let at = (unit(i as u64 ^ 0xA5A5) * s.ramp_seconds * 1000.0) as u64;
        sh.schedule(i as u32, at);
    }
    // Samplers: the room's stats and the core's stock every second.
    let samples = Arc::new(Mutex::new(Vec::<(f64, Value, Value)>::new()));
    // The core's own hold latency histogram, read every second: (t, holds, holds within target).
    let core_hist = Arc::new(Mutex::new(Vec::<(f64, u64, u64)>::new()));
    let sampler = {
        let sh = sh.clone();
        let samples = samples.clone();
        let core_hist = core_hist.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while !sh.stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let t = sh.start.elapsed().as_secs_f64();
                let stats = sh.stack.room_stats(&sh.http).await.unwrap_or(Value::Null);
                let stock = sh.stack.stock(&sh.http).await.unwrap_or(Value::Null);
                if stock["pools"]["main"]["available"].as_u64() == Some(0) {
                    sh.sold_out_seen.store(true, Ordering::Relaxed);
                }
                if paid_out(&stock) {
                    sh.paid_out_seen.store(true, Ordering::Relaxed);
                }
                let main = &stock["pools"]["main"];
                if let (Some(sold), Some(held), Some(cap)) = (main["sold"].as_u64(), main["held"].as_u64(), main["capacity"].as_u64()) {
                    *sh.last_stock.lock() = (sold, held, cap);
                }
                if progress {
                    let done = sh.done.load(Ordering::Relaxed);
                    let sold = stock["pools"]["main"]["sold"].as_u64().unwrap_or(0);
                    let held = stock["pools"]["main"]["held"].as_u64().unwrap_or(0);
                    let bar = (done * 30 / sh.s.users.max(1)).min(30);
                    eprint!(
                        "\r[{}{}] {t:5.0}s done {done}/{} admitted {} held {held} sold {sold}   ",
                        "#".repeat(bar),
                        " ".repeat(30 - bar),
                        sh.s.users,
                        sh.admitted.load(Ordering::Relaxed)
                    );
                    let _ = std::io::stderr().flush();
                }
                // The bench's own count of fans who saw "admitted", beside the room's figures (the
                // longest stall is read from it: a place served that nobody picks up admits nobody).
                let mut stats = stats;
                if let Some(o) = stats.as_object_mut() {
                    o.insert("bench_admitted".into(), json!(sh.admitted.load(Ordering::Relaxed)));
                }
                samples.lock().push((t, stats, stock));
                if let Ok(text) = sh.stack.core_metrics(&sh.http).await
                    && let Some((n, within)) = hold_histogram(&text, sh.s.p99_target_ms)
                {
                    core_hist.lock().push((t, n, within));
                }
            }
        })
    };
    if let Some((from, to)) = s.capacity_drop {
        let sh2 = sh.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(from)).await;
            sh2.stack.set_core_capacity(0.5);
            tokio::time::sleep(Duration::from_secs(to - from)).await;
            sh2.stack.set_core_capacity(1.0);
        });
    }
    let killer = s.crashes.then(|| {
        let sh = sh.clone();
        tokio::spawn(async move { crash_plan(&sh).await })
    });
    let mega_killer = s.megasale.then(|| {
        let sh = sh.clone();
        tokio::spawn(async move {
            if let Some(m) = &sh.mega {
                crate::megasale::plan(&*sh, m).await;
            }
        })
    });
    // The queue's connections are shared between polls and joins as before the lanes were split
    // (more connections at once would load the edge more, and the end-to-end figures with it).
    let sale_conns = (s.connections / 4).max(8);
    let join_conns = if s.join_connections > 0 { s.join_connections } else { (s.connections / 4).max(8) };
    let poll_conns = s.connections.saturating_sub((s.connections / 4).max(8)).max(8);
    let sems = [
        Arc::new(tokio::sync::Semaphore::new(poll_conns)),
        Arc::new(tokio::sync::Semaphore::new(sale_conns)),
        Arc::new(tokio::sync::Semaphore::new(join_conns)),
        Arc::new(tokio::sync::Semaphore::new(STREAMS_MAX)),
    ];
    let deadline = Duration::from_secs(s.max_seconds);
    let mut last_progress = (0usize, Instant::now());
    loop {
        if sh.start.elapsed() > deadline || sh.done.load(Ordering::Relaxed) >= s.users {
            break;
        }
        // Once every ticket is sold and paid, a run that makes no more progress for 10 s is over (the
        // people still queued have been told, or will be at their next poll); a sold-out sale that
        // makes no progress for 60 s (holds neither paid nor given back) is over too. Either way
        // the people still queued are reported as such.
        let done_now = sh.done.load(Ordering::Relaxed);
        let quiet = if sh.paid_out_seen.load(Ordering::Relaxed) { 10 } else { 60 };
        if done_now != last_progress.0 {
            last_progress = (done_now, Instant::now());
        } else if sh.sold_out_seen.load(Ordering::Relaxed) && last_progress.1.elapsed() > Duration::from_secs(quiet) {
            break;
        }
        let now = sh.now_ms();
        let mut dispatched = false;
        for lane in [1, 3, 0, 2] {
            // Run whoever is due in this lane while it has free connections.
            loop {
                let Ok(permit) = sems[lane].clone().try_acquire_owned() else { break };
                let next = {
                    let mut h = sh.lanes[lane].lock();
                    match h.peek() {
                        Some(Reverse((at, _))) if *at <= now => h.pop().map(|Reverse((_, u))| u),
                        _ => None,
                    }
                };
                let Some(u) = next else { break };
                dispatched = true;
                let sh2 = sh.clone();
                let work = async move {
                    step(&sh2, u).await;
                    drop(permit);
                };
                if lane == 1 {
                    sale.spawn(work);
                } else {
                    tokio::spawn(work);
                }
            }
        }
        if !dispatched {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    sh.stop.store(true, Ordering::Relaxed);
    let _ = sems[0].acquire_many(poll_conns as u32).await;
    let _ = sems[1].acquire_many(sale_conns as u32).await;
    let _ = sems[2].acquire_many(join_conns as u32).await;
    let _ = sems[3].acquire_many(STREAMS_MAX as u32).await;
    drop(sale);
    let _ = sampler.await;
    if let Some(k) = killer {
        // It stops waiting once the run stops; a kill under way finishes its restart first.
        let _ = k.await;
    }
    if let Some(k) = mega_killer {
        let _ = k.await;
    }
    if let Some(m) = &sh.mega {
        m.read_end();
    }
    if progress {
        eprintln!();
    }
    // Let the sweeper give back abandoned holds before reading the result.
    let seconds = sh.start.elapsed().as_secs_f64();
    let core_windows = core_p99_windows(&core_hist.lock(), 5);
    // The samples are taken out of the lock before the report awaits anything.
    let samples = std::mem::take(&mut *samples.lock());
    report(&sh, &samples, &core_windows, seconds, bots).await
}

/// The runtime thread the sale lane runs on (one worker): the buyers' requests are not queued
/// behind the entrance's and the queue's tasks on the bench's main runtime.
struct SaleThread {
    rt: Option<tokio::runtime::Runtime>,
}

impl SaleThread {
    fn start() -> anyhow::Result<SaleThread> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name("sale-lane").enable_all().build()?;
        Ok(SaleThread { rt: Some(rt) })
    }

    fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Some(rt) = &self.rt {
            rt.spawn(work);
        }
    }
}

impl Drop for SaleThread {
    /// Ends it without waiting (a runtime cannot be dropped where blocking is not allowed; at the
    /// end of a run its tasks are done: every sale permit is back).
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Seconds between a process's restart and the next kill (the sale settles in between).
const KILL_SPACING_S: u64 = 8;
/// How long a killed process stays down before it is started again (a supervisor's restart delay).
const RESTART_DELAY_MS: u64 = 1000;

/// The crash test's plan: SIGKILL the leader edge, then the core, then Redis, each once, each when the
/// sale has taken the given share of its seats (sold + held) and at least [`KILL_SPACING_S`] after the
/// previous restart; each is started again after [`RESTART_DELAY_MS`] with the same ports, config and data.
async fn crash_plan(sh: &Shared) {
    let spacing = if sh.s.max_seconds <= 100 { 5 } else { KILL_SPACING_S };
    let mut ready_at = Instant::now();
    for (target, share) in [(None, 0.20), (Some(Proc::Core), 0.45), (Some(Proc::Redis), 0.70)] {
        loop {
            if sh.stop.load(Ordering::Relaxed) {
                return;
            }
            let (sold, held, cap) = *sh.last_stock.lock();
            if cap > 0 && (sold + held) as f64 >= share * cap as f64 && ready_at.elapsed() >= Duration::from_secs(spacing) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The edge that leads the room now: the one whose loss stops the queue until another takes the lease.
        let p = match target {
            Some(p) => p,
            None => {
                let mut leader = None;
                for _ in 0..100 {
                    leader = sh.stack.leader_edge(&sh.http).await;
                    if leader.is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Proc::Edge(leader.unwrap_or(0))
            }
        };
        let (sold, held, capacity) = *sh.last_stock.lock();
        let at_ms = sh.now_ms();
        sh.stack.kill(p);
        if std::env::var_os("WICKET_BENCH_VERBOSE").is_some() {
            eprintln!("\n[{:.1}s] SIGKILL {p} (sold {sold} held {held} of {capacity})", at_ms as f64 / 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(RESTART_DELAY_MS)).await;
        let res = sh.stack.restart(p).await;
        let back_ms = res.is_ok().then(|| sh.now_ms());
        sh.kills.lock().push(Kill {
            what: match p {
                Proc::Edge(i) => format!("leader edge (edge {i})"),
                other => other.to_string(),
            },
            at_ms,
            back_ms,
            restart_error: res.err().map(|e| format!("{e:#}")),
            sold,
            held,
            capacity,
        });
        ready_at = Instant::now();
    }
}

/// Crashes: a try failed the way a crash fails it (no connection, a timeout, a 502/503/504, the core's
/// re-check pause). The fan keeps everything (cookies, token, idempotency key) and tries again with
/// backoff (0.5, 1, 2, 4 s...), on the other edge when the connection itself failed (what a load
/// balancer's health check does for a browser).
fn retry_later(sh: &Shared, u: u32, other_edge: bool, jitter: u64) {
    let now = sh.now_ms();
    let mut g = sh.users[u as usize].lock();
    g.fails += 1;
    g.stall_since.get_or_insert(now);
    if other_edge {
        g.edge = (g.edge + 1) % sh.stack.edges.len();
    }
    let backoff = (250u64 << g.fails.min(4)).min(4000);
    drop(g);
    sh.schedule(u, now + backoff + jitter % 250);
}

/// Crashes: an answer came back; a run of failures ends here.
fn answered(sh: &Shared, u: u32) {
    if !sh.s.retries() {
        return;
    }
    let mut g = sh.users[u as usize].lock();
    g.fails = 0;
    if let Some(t) = g.stall_since.take() {
        drop(g);
        sh.stalls.lock().push((t, sh.now_ms()));
    }
}

fn odd(sh: &Shared, what: &'static str) {
    *sh.odd.lock().entry(what).or_default() += 1;
}

/// The place an answer names: the first one is the fan's; another one later is a lost place.
fn note_position(g: &mut User, body: &Value) {
    if let Some(p) = body["position"].as_u64().filter(|p| *p > 0) {
        if g.first_position == 0 {
            g.first_position = p;
        } else if p != g.first_position {
            g.place_changed = true;
        }
    }
}

async fn step(sh: &Shared, u: u32) {
    let (phase, bot, cookies, token, order, sku, qty, edge) = {
        let g = sh.users[u as usize].lock();
        (g.phase, g.bot, g.cookies.clone(), g.token.clone(), g.order.clone(), g.sku, g.qty, g.edge)
    };
    let crashes = sh.s.retries();
    let user_id = format!("u{u}");
    // Each person has an address of their own; bots come from a handful.
    let ip = if bot { format!("10.255.0.{}", u % 4) } else { format!("10.{}.{}.{}", (u >> 16) & 255, (u >> 8) & 255, u & 255) };
    let t0 = Instant::now();
    let second = sh.start.elapsed().as_secs() as u32;
    let jitter = mix(u as u64 ^ sh.now_ms());
    let gateway = |status: u16| crashes && matches!(status, 502..=504);
    match phase {
        Phase::Join => {
            let seq = sh.join_seq.fetch_add(1, Ordering::Relaxed);
            let r = sh.stack.join(&sh.http, edge, &user_id, &ip, bot, if bot { "" } else { &cookies }).await;
            let answered_seq = sh.join_seq.fetch_add(1, Ordering::Relaxed);
            // A try that failed may still have given the place (the answer lost in a kill): the
            // join is timed from its first try.
            let first_try = *sh.users[u as usize].lock().join_first_try.get_or_insert(seq);
            let Ok((status, headers, body)) = r else {
                if crashes {
                    return retry_later(sh, u, true, jitter);
                }
                return finish(sh, u, Outcome::Error);
            };
            sh.rec.record("join", second, status, t0.elapsed().as_micros() as u32);
            sh.rec.example("join", status, &body);
            if gateway(status) {
                return retry_later(sh, u, false, jitter);
            }
            answered(sh, u);
            let mut g = sh.users[u as usize].lock();
            if !bot {
                merge_cookies(&mut g.cookies, &headers);
            }
            g.join_first_try = None;
            let position = body["position"].as_u64().unwrap_or(0);
            // A rejoin that keeps the fan's place keeps the time it was given.
            if position == 0 || position != g.position || g.join_answered == 0 {
                g.join_seq = first_try;
                g.join_answered = answered_seq;
            }
            g.joined_ms.get_or_insert(sh.now_ms());
            g.position = position;
            g.join_edge = edge as u8;
            note_position(&mut g, &body);
            drop(g);
            if status == 200 && body["position"].as_u64().is_some_and(|p| p > 0) {
                let now = sh.now_ms();
                sh.joins_placed.fetch_add(1, Ordering::Relaxed);
                sh.first_join_ms.fetch_min(now, Ordering::Relaxed);
                sh.last_join_ms.fetch_max(now, Ordering::Relaxed);
            }
            if status < 400 {
                sh.judge_place(u, &body);
            }
            after_status(sh, u, status, &headers, &body, bot, jitter);
        }
        Phase::Poll => {
            let r = sh.stack.status(&sh.http, edge, &user_id, &ip, bot, if bot { "" } else { &cookies }).await;
            let Ok((status, headers, body)) = r else {
                if crashes {
                    return retry_later(sh, u, true, jitter);
                }
                sh.schedule(u, sh.now_ms() + 1000);
                return;
            };
            sh.rec.record("status", second, status, t0.elapsed().as_micros() as u32);
            if gateway(status) {
                return retry_later(sh, u, false, jitter);
            }
            answered(sh, u);
            if crashes && status == 401 {
                // The edge refused the fan's own ticket: they must join again (a place at risk).
                odd(sh, "status_ticket_refused");
                sh.rec.example("status", status, &body);
            }
            let mut g = sh.users[u as usize].lock();
            if !bot {
                merge_cookies(&mut g.cookies, &headers);
            }
            note_position(&mut g, &body);
            drop(g);
            if status < 400 {
                sh.judge_place(u, &body);
            }
            after_status(sh, u, status, &headers, &body, bot, jitter);
        }
        Phase::Hold => {
            let Some(token) = token else { return finish(sh, u, Outcome::Error) };
            let r = sh.stack.hold(&sh.sale_http, edge, &token, sku, qty, &user_id, &ip, if bot { "" } else { &cookies }).await;
            let Ok((status, body)) = r else {
                // The hold may have been made: the retry carries the same key, token and body.
                if crashes {
                    return retry_later(sh, u, true, jitter);
                }
                return finish(sh, u, Outcome::Error);
            };
            sh.rec.record("hold", second, status, t0.elapsed().as_micros() as u32);
            sh.rec.example("hold", status, &body);
            if gateway(status) {
                return retry_later(sh, u, false, jitter);
            }
            if crashes && status == 403 && body["error"] == "event_paused" {
                // The core re-checks CREATED orders after a restart: holds wait.
                return retry_later(sh, u, false, jitter);
            }
            answered(sh, u);
            {
                let mut g = sh.users[u as usize].lock();
                g.hold_tried = true;
                let for_now = status == 409 && body["error"] == "sold_out" && body["restock_possible"] == true;
                g.hold_sold_out |= status == 409 && body["error"] == "sold_out" && !for_now;
                if for_now {
                    g.waitlisted.get_or_insert(sh.now_ms());
                }
            }
            match status {
                // 200: a replay answered from the order it made.
                201 | 200 => {
                    let id = body["order_id"].as_str().unwrap_or_default().to_string();
                    let amount = body["amount_cents"].as_u64().unwrap_or(0);
                    let pays = unit(u as u64 ^ 0x5EED) < sh.s.pay_probability;
                    if crashes {
                        sh.holds_ok.lock().push(sh.now_ms());
                    }
                    let mut g = sh.users[u as usize].lock();
                    g.order = Some((id, amount));
                    g.held_ms.get_or_insert(sh.now_ms());
                    if pays {
                        g.phase = Phase::Pay;
                        drop(g);
                        sh.schedule(u, sh.now_ms() + 500 + jitter % 2500);
                    } else {
                        drop(g);
                        finish(sh, u, Outcome::Abandoned);
                    }
                }
                // Sold out for now: the core keeps this fan first for tickets that come back while it asks
                // again within 10 s (`Retry-After: 2`); it gives up after WAITLIST_PATIENCE_MS.
                409 if body["error"] == "sold_out" && body["restock_possible"] == true => {
                    let mut g = sh.users[u as usize].lock();
                    if g.waitlisted.is_some_and(|since| sh.now_ms().saturating_sub(since) > WAITLIST_PATIENCE_MS) {
                        g.hold_sold_out = true;
                        drop(g);
                        return leave(sh, u, Outcome::SoldOut);
                    }
                    drop(g);
                    sh.schedule(u, sh.now_ms() + 1500 + jitter % 1000);
                }
                409 if body["error"] == "sold_out" => leave(sh, u, Outcome::SoldOut),
                // Fewer left than the fan asked for: it takes those (same token, still unused).
                409 if body["error"] == "not_enough_left" => {
                    let left = body["available"].as_u64().unwrap_or(0).min(u64::from(u32::MAX)) as u32;
                    let mut g = sh.users[u as usize].lock();
                    if left == 0 {
                        g.hold_sold_out = true;
                        drop(g);
                        return leave(sh, u, Outcome::SoldOut);
                    }
                    odd(sh, "hold_fewer_left");
                    g.qty = g.qty.min(left);
                    drop(g);
                    sh.schedule(u, sh.now_ms() + 100 + jitter % 400);
                }
                429 | 503 => sh.schedule(u, sh.now_ms() + 500 + jitter % 1000),
                401 | 403 if crashes => {
                    // The token was refused: back to the queue page for a fresh one (the place is kept).
                    odd(sh, "hold_token_refused");
                    let mut g = sh.users[u as usize].lock();
                    g.refusals += 1;
                    if g.refusals > 5 {
                        drop(g);
                        return finish(sh, u, Outcome::Refused);
                    }
                    g.phase = Phase::Poll;
                    drop(g);
                    sh.schedule(u, sh.now_ms() + 500 + jitter % 500);
                }
                _ => finish(sh, u, Outcome::Refused),
            }
        }
        Phase::Pay => {
            let Some((order, amount)) = order else { return finish(sh, u, Outcome::Error) };
            if crashes {
                // The provider takes the money (the fan sees "paid"), then calls the core back until the
                // callback lands; the core also asks the provider after a restart and before closing a
                // hold whose deadline passed.
                let first = {
                    let mut g = sh.users[u as usize].lock();
                    !std::mem::replace(&mut g.paid_at_provider, true)
                };
                if first {
                    sh.stack.provider.paid.lock().insert(order.clone(), (format!("txn-{order}"), amount));
                    let mut g = sh.users[u as usize].lock();
                    g.outcome = Outcome::Paid;
                }
            }
            match sh.stack.pay(&sh.sale_http, &order, amount).await {
                Ok(status) if crashes && (status >= 500 || status == 429) => {
                    sh.rec.record("pay", second, status, t0.elapsed().as_micros() as u32);
                    odd(sh, "callback_retries");
                    sh.schedule(u, sh.now_ms() + 1000 + jitter % 1000);
                }
                Ok(status) => {
                    sh.rec.record("pay", second, status, t0.elapsed().as_micros() as u32);
                    if crashes && status != 200 {
                        odd(sh, "callback_refused");
                    }
                    // Crashes: the fan saw "paid" at the provider, whatever the callback met.
                    leave(sh, u, if status == 200 || crashes { Outcome::Paid } else { Outcome::Error });
                }
                Err(_) => {
                    if crashes {
                        odd(sh, "callback_retries");
                    }
                    sh.schedule(u, sh.now_ms() + 1000)
                }
            }
        }
        Phase::Leave => {
            let r = sh.stack.leave(&sh.sale_http, edge, &user_id, &ip, if bot { "" } else { &cookies }).await;
            if let Ok(status) = r {
                sh.rec.record("leave", second, status, t0.elapsed().as_micros() as u32);
            }
            if crashes {
                // The "done" page is retried a few times: a failed connection or a gateway error as
                // above; a 401 (the edge could not confirm the session) a few times too.
                let tries = sh.users[u as usize].lock().refusals;
                match r {
                    Err(_) if tries < 8 => {
                        sh.users[u as usize].lock().refusals += 1;
                        return retry_later(sh, u, true, jitter);
                    }
                    Ok(status) if (gateway(status) || status == 401) && tries < 8 => {
                        if status == 401 {
                            odd(sh, "done_page_refused");
                        }
                        sh.users[u as usize].lock().refusals += 1;
                        return retry_later(sh, u, false, jitter);
                    }
                    Ok(status) if status < 400 => answered(sh, u),
                    _ => {
                        odd(sh, "done_page_given_up");
                        answered(sh, u);
                    }
                }
            }
            let outcome = sh.users[u as usize].lock().outcome;
            finish(sh, u, outcome);
        }
        Phase::Stream => stream(sh, u, edge, &user_id, &ip, &cookies, jitter).await,
        Phase::Done => {}
    }
}

/// A fan told to ask again within this listens on the event stream, as the page would.
const NEAR_POLL_MS: u64 = 2000;
/// How long a fan told "sold out for now" at its hold keeps asking for tickets that come back (the
/// run's holds last `hold_seconds`, 20 s: an unpaid one comes back within it).
const WAITLIST_PATIENCE_MS: u64 = 60_000;
/// Event streams the bench holds open at once; the fans past it poll.
const STREAMS_MAX: usize = 4000;

/// What ended a fan's event stream.
enum Heard {
    /// "admitted": the page goes through `/queue/<room>` at once (its status, with the token).
    Admitted,
    /// An answer that ends the wait otherwise (sold out for good, closed...).
    Final(Value),
    /// The stream ended or failed (its time up, refused, the run over): the page asks again.
    Ended,
}

/// The fan listens on the room's event stream (`GET /queue/<room>/events`) until a frame says
/// its turn came (or the wait ended), as `static/queue.js` does; the waiting frames are noted
/// like polled answers.
async fn stream(sh: &Shared, u: u32, edge: usize, user_id: &str, ip: &str, cookies: &str, jitter: u64) {
    let second = sh.start.elapsed().as_secs() as u32;
    let t0 = Instant::now();
    let opened = tokio::time::timeout(Duration::from_secs(10), sh.stack.events(&sh.stream_http, edge, user_id, ip, cookies)).await;
    let heard = match opened.unwrap_or_else(|_| Err(anyhow::anyhow!("no answer in 10 s"))) {
        Ok(r) => {
            let status = r.status().as_u16();
            sh.rec.record("events", second, status, t0.elapsed().as_micros() as u32);
            if status == 200 { listen(sh, u, r).await } else { Heard::Ended }
        }
        Err(_) => Heard::Ended,
    };
    sh.streams.fetch_sub(1, Ordering::Relaxed);
    match heard {
        Heard::Admitted => {
            sh.users[u as usize].lock().phase = Phase::Poll;
            sh.schedule(u, sh.now_ms());
        }
        Heard::Final(body) => after_status(sh, u, 200, &reqwest::header::HeaderMap::new(), &body, false, jitter),
        Heard::Ended => {
            // The stream's `retry: 1000`: the page is back within a second.
            sh.users[u as usize].lock().phase = Phase::Poll;
            sh.schedule(u, sh.now_ms() + 1000);
        }
    }
}

/// A stream that says nothing for this long is given up (the edge sends a near place a frame
/// at least every 5 s).
const STREAM_SILENCE: Duration = Duration::from_secs(20);

/// Reads a stream's frames (`data: <status JSON>`) until one ends the wait.
async fn listen(sh: &Shared, u: u32, mut r: reqwest::Response) -> Heard {
    let mut buf: Vec<u8> = Vec::new();
    let mut heard_at = Instant::now();
    loop {
        // A second at most between looks at the run's end: its streams do not hold it up.
        if sh.stop.load(Ordering::Relaxed) || heard_at.elapsed() > STREAM_SILENCE {
            return Heard::Ended;
        }
        let chunk = match tokio::time::timeout(Duration::from_secs(1), r.chunk()).await {
            Err(_) => continue,
            Ok(Ok(Some(c))) => c,
            Ok(_) => return Heard::Ended,
        };
        heard_at = Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buf.drain(..end + 2).collect();
            let frame = String::from_utf8_lossy(&frame);
            for data in frame.lines().filter_map(|l| l.strip_prefix("data: ")) {
                let body: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                let state = body["state"].as_str().unwrap_or("");
                match state {
                    "admitted" => return Heard::Admitted,
                    "waiting" | "paused" | "not_open" => {}
                    "sold_out" if body["restock_possible"] == true => {}
                    _ => return Heard::Final(body),
                }
                let mut g = sh.users[u as usize].lock();
                g.last_told = Some((state_name(state), body["poll_after_ms"].as_u64().unwrap_or(0), body["ahead"].as_u64(), sh.now_ms()));
                if let Some(p) = body["position"].as_u64() {
                    g.position = p;
                }
            }
        }
    }
}

/// The states a fan's last answer before "admitted" is reported as (`WICKET_BENCH_USERS`).
fn state_name(state: &str) -> &'static str {
    ["waiting", "paused", "sold_out", "not_open", "closed", "stopped"].into_iter().find(|s| *s == state).unwrap_or("other")
}

/// A fan told to ask again soon listens on the event stream from now on, while the bench has a
/// stream to spare (bots poll as they do; the crash scenarios judge every answer of a poll).
fn takes_stream(sh: &Shared, bot: bool, body: &Value) -> bool {
    if bot || sh.s.retries() || body["poll_after_ms"].as_u64().is_none_or(|t| t > NEAR_POLL_MS) {
        return false;
    }
    if sh.streams.fetch_add(1, Ordering::Relaxed) < STREAMS_MAX {
        return true;
    }
    sh.streams.fetch_sub(1, Ordering::Relaxed);
    false
}

/// Records the outcome now and leaves through the "done" page next (bots just go).
fn leave(sh: &Shared, u: u32, outcome: Outcome) {
    let mut g = sh.users[u as usize].lock();
    g.outcome = outcome;
    if g.bot {
        drop(g);
        return finish(sh, u, outcome);
    }
    g.phase = Phase::Leave;
    drop(g);
    sh.schedule(u, sh.now_ms() + 200);
}

fn after_status(sh: &Shared, u: u32, status: u16, headers: &reqwest::header::HeaderMap, body: &Value, bot: bool, jitter: u64) {
    let retry_ms = || {
        headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(|s| s * 1000)
            .unwrap_or(1000)
    };
    if status == 429 {
        sh.schedule(u, sh.now_ms() + retry_ms() + jitter % 500);
        return;
    }
    if status >= 400 {
        // A refused bot, a blocked device: it tries again later, as scripts do, but counts as refused.
        let mut g = sh.users[u as usize].lock();
        g.polls += 1;
        if g.polls > 20 {
            drop(g);
            return finish(sh, u, Outcome::Refused);
        }
        g.phase = Phase::Join;
        drop(g);
        sh.schedule(u, sh.now_ms() + 2000 + jitter % 2000);
        return;
    }
    let state = body["state"].as_str().unwrap_or("");
    let mut g = sh.users[u as usize].lock();
    g.polls += 1;
    if g.admitted_ms.is_none() && state != "admitted" {
        let told = state_name(state);
        g.last_told = Some((told, body["poll_after_ms"].as_u64().unwrap_or(0), body["ahead"].as_u64(), sh.now_ms()));
    }
    if let Some(p) = body["position"].as_u64() {
        g.position = p;
    }
    match state {
        "admitted" => {
            g.token = body["token"].as_str().map(str::to_string);
            if g.admitted_ms.is_none() {
                g.admitted_ms = Some(sh.now_ms());
                sh.admitted.fetch_add(1, Ordering::Relaxed);
            }
            g.phase = Phase::Hold;
            drop(g);
            // See "admitted", click "buy".
            sh.schedule(u, sh.now_ms() + 200 + jitter % 800);
        }
        // Sold out for now (unpaid holds may come back): the place is kept, keep polling.
        "sold_out" if body["restock_possible"] == true && !bot => {
            drop(g);
            let streams = takes_stream(sh, bot, body);
            sh.users[u as usize].lock().phase = if streams { Phase::Stream } else { Phase::Poll };
            sh.schedule(u, sh.now_ms() + if streams { 0 } else { body["poll_after_ms"].as_u64().unwrap_or(15_000) });
        }
        "sold_out" | "closed" => {
            drop(g);
            finish(sh, u, Outcome::SoldOut);
        }
        _ => {
            drop(g);
            let streams = takes_stream(sh, bot, body);
            sh.users[u as usize].lock().phase = if streams { Phase::Stream } else { Phase::Poll };
            let told = body["poll_after_ms"].as_u64().unwrap_or(2000);
            let wait = if streams { 0 } else if bot { 100 + jitter % 100 } else { told };
            sh.schedule(u, sh.now_ms() + wait);
        }
    }
}

fn finish(sh: &Shared, u: u32, outcome: Outcome) {
    let mut g = sh.users[u as usize].lock();
    if g.phase != Phase::Done {
        g.phase = Phase::Done;
        g.outcome = outcome;
        sh.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// `WICKET_BENCH_USERS=path`: one CSV line per virtual user (who they were, when they joined, the
/// place they got, when they were admitted and held, what they bought, whether their hold met "sold
/// out"), to study who got the seats.
fn write_users(sh: &Shared, path: &str, orders: &[Value]) -> anyhow::Result<()> {
    let mut paid: HashMap<&str, u64> = HashMap::new();
    for o in orders.iter().filter(|o| matches!(o["state"].as_str(), Some("PAID" | "USED"))) {
        *paid.entry(o["user"].as_str().unwrap_or("")).or_default() += o["qty"].as_u64().unwrap_or(0);
    }
    let ms = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    let mut out = String::from("user,bot,join_seq,joined_ms,position,admitted_ms,held_ms,outcome,paid_qty,hold_sold_out,last_state,last_poll_after_ms,last_ahead,last_at_ms,waitlisted_ms\n");
    for (i, u) in sh.users.iter().enumerate() {
        let g = u.lock();
        let id = format!("u{i}");
        let bought = paid.get(id.as_str()).copied().unwrap_or(0);
        let (ls, lp, la, lt) = match g.last_told {
            Some((s, p, a, t)) => (s, p.to_string(), ms(a), t.to_string()),
            None => ("", String::new(), String::new(), String::new()),
        };
        out += &format!(
            "{id},{},{},{},{},{},{},{:?},{bought},{},{ls},{lp},{la},{lt},{}\n",
            u8::from(g.bot),
            g.join_seq,
            ms(g.joined_ms),
            g.first_position,
            ms(g.admitted_ms),
            ms(g.held_ms),
            g.outcome,
            u8::from(g.hold_sold_out),
            ms(g.waitlisted)
        );
    }
    std::fs::write(path, out).map_err(|e| anyhow::anyhow!("writing {path}: {e}"))
}

/// Nothing available and nothing held in any pool of a stock answer: every ticket is paid for.
fn paid_out(stock: &Value) -> bool {
    stock["pools"].as_object().is_some_and(|pools| {
        !pools.is_empty() && pools.values().all(|p| p["available"].as_u64() == Some(0) && p["held"].as_u64() == Some(0))
    })
}

/// `(holds, holds within target_ms)` from the core's Prometheus text: the `hold` route of
/// `wicket_core_request_duration_seconds`, counted up to the largest bucket bound ≤ the target.
fn hold_histogram(text: &str, target_ms: u64) -> Option<(u64, u64)> {
    let target = target_ms as f64 / 1000.0;
    let (mut count, mut within) = (None, 0u64);
    let mut best_le = -1.0f64;
    for line in text.lines().filter(|l| l.contains("route=\"hold\"")) {
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if line.starts_with("wicket_core_request_duration_seconds_count") {
            count = value.map(|v| v as u64);
        } else if line.starts_with("wicket_core_request_duration_seconds_bucket")
            && let Some(le) = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()).and_then(|v| v.parse::<f64>().ok())
            && le <= target + 1e-9
            && le > best_le
        {
            best_le = le;
            within = value.map_or(0, |v| v as u64);
        }
    }
    Some((count?, within))
}

/// Per 1-s window with at least `min` holds: (second, fraction of the core's holds within target).
fn core_p99_windows(hist: &[(f64, u64, u64)], min: u64) -> Vec<(f64, f64)> {
    hist.windows(2)
        .filter_map(|w| {
            let (n, ok) = (w[1].1.saturating_sub(w[0].1), w[1].2.saturating_sub(w[0].2));
            (n >= min).then(|| (w[1].0, ok as f64 / n as f64))
        })
        .collect()
}

async fn report(sh: &Shared, samples: &[(f64, Value, Value)], core_windows: &[(f64, f64)], seconds: f64, bots: usize) -> anyhow::Result<SurgeReport> {
    // Give abandoned holds back (hold time + a sweeper pass), then read the truth from the core.
    let (orders, stock) = sh.stack.read_back(&sh.http).await?;
    let capacity: u64 = stock["pools"]["main"]["capacity"].as_u64().unwrap_or(0);
    let mut live_qty: HashMap<String, u64> = HashMap::new();
    let mut per_user: HashMap<String, u64> = HashMap::new();
    let mut orders_per_user: HashMap<String, u64> = HashMap::new();
    let mut seat_owners: HashMap<String, u32> = HashMap::new();
    let mut paid_orders = 0;
    let mut sold_by_bots = 0u64;
    let mut sold = 0u64;
    for o in &orders {
        let state = o["state"].as_str().unwrap_or("");
        if !matches!(state, "CREATED" | "PAID" | "USED") {
            continue;
        }
        let qty = o["qty"].as_u64().unwrap_or(0);
        let pools: Vec<String> = if o["sku"] == "combo" { vec!["main".into(), "combo".into()] } else { vec!["main".into()] };
        for p in pools {
            *live_qty.entry(p).or_default() += qty;
        }
        *per_user.entry(o["user"].as_str().unwrap_or("").to_string()).or_default() += qty;
        *orders_per_user.entry(o["user"].as_str().unwrap_or("").to_string()).or_default() += 1;
        for seat in o["seats"].as_array().into_iter().flatten() {
            *seat_owners.entry(seat.as_str().unwrap_or("").to_string()).or_default() += 1;
        }
        if state != "CREATED" {
            paid_orders += 1;
            sold += qty;
            let uid: usize = o["user"].as_str().and_then(|u| u.strip_prefix('u')).and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
            if uid < bots {
                sold_by_bots += qty;
            }
        }
    }
    let mut oversold = 0;
    for (pool, q) in &live_qty {
        let cap = stock["pools"][pool]["capacity"].as_u64().unwrap_or(0);
        oversold += q.saturating_sub(cap);
        let p = &stock["pools"][pool];
        let counted = p["held"].as_u64().unwrap_or(0) + p["sold"].as_u64().unwrap_or(0) + p["available"].as_u64().unwrap_or(0);
        oversold += counted.saturating_sub(cap);
    }
    if let Ok(path) = std::env::var("WICKET_BENCH_USERS") {
        write_users(sh, &path, &orders)?;
    }
    let double_sold = seat_owners.values().filter(|&&n| n > 1).count() as u64;
    let over_limit_users = per_user.values().filter(|&&q| q > 2).count() as u64;
    let users_with_several_orders = orders_per_user.values().filter(|&&n| n > 1).count() as u64;
    // Megasale's double-sold: a user with more than one live order, or more tickets than the limit.
    let double_sold_users = per_user.iter().filter(|(u, q)| **q > 2 || orders_per_user.get(*u).is_some_and(|n| *n > 1)).count() as u64;
    // FIFO fidelity: the order users sent their join vs the order of the positions the edge gave them.
    let mut pairs: Vec<(u64, u64)> = Vec::new();
    let mut timed: Vec<(u64, u64, u64)> = Vec::new();
    let mut abandoned = 0;
    let (mut admitted_all, mut admitted_bots, mut admitted_sold_out) = (0u64, 0u64, 0u64);
    let (mut waitlisted, mut waitlisted_seated) = (0u64, 0u64);
    // Fans who tried to buy: (join order, got tickets), for the seat order.
    let mut buyers: Vec<(u64, bool)> = Vec::new();
    for (i, u) in sh.users.iter().enumerate() {
        let g = u.lock();
        if g.outcome == Outcome::Abandoned {
            abandoned += 1;
        }
        if g.admitted_ms.is_some() {
            admitted_all += 1;
            admitted_bots += u64::from(g.bot);
            // A fan still on the waitlist when the run ended has no seat either.
            admitted_sold_out += u64::from(g.hold_sold_out || (g.waitlisted.is_some() && g.held_ms.is_none()));
            waitlisted += u64::from(g.waitlisted.is_some());
            waitlisted_seated += u64::from(g.waitlisted.is_some() && g.held_ms.is_some());
        }
        if !g.bot && g.hold_tried {
            let order = if sh.s.random { g.admitted_ms.unwrap_or(u64::MAX) } else { g.join_seq };
            buyers.push((order, g.held_ms.is_some()));
        }
        if !g.bot && g.admitted_ms.is_some() && g.position > 0 {
            pairs.push((g.join_seq, g.position));
            timed.push((g.join_seq, g.join_answered, g.position));
        }
        let _ = i;
    }
    // Only arrivals after the open are FIFO; the pre-queue is shuffled on purpose.
    let ((fifo_tau, fifo_pairs_judged), fifo_tau_send_order) =
        if sh.s.random { ((f64::NAN, 0.0), f64::NAN) } else { (ordered_tau(&timed), kendall_tau(&mut pairs)) };
    let target = sh.s.p99_target_ms as f64;
    let windows = sh.rec.p99_per_second("hold", 5);
    let ok = windows.iter().filter(|w| w.1 <= target).count();
    let sellout = samples
        .iter()
        .find(|(_, _, st)| st["pools"]["main"]["available"].as_u64() == Some(0))
        .map(|(t, _, _)| *t);
    // The first second as many tickets had been held as the main pool has (the core's `hold_units`,
    // which only grows): where `available` would read 0 if no unpaid hold came back meanwhile.
    let held_through = samples
        .iter()
        .find(|(_, _, st)| {
            let main = &st["pools"]["main"];
            main["available"].as_u64() == Some(0)
                || matches!((st["hold_units"].as_u64(), main["capacity"].as_u64()), (Some(u), Some(c)) if c > 0 && u >= c)
        })
        .map(|(t, _, _)| *t);
    let paid_out = samples.iter().find(|(_, _, st)| paid_out(st)).map(|(t, _, _)| *t);
    let release_rate = samples
        .iter()
        .filter_map(|(t, st, _)| st["release_per_second"].as_f64().or(st["release_rate"].as_f64()).map(|r| (*t, r)))
        .collect();
    let queue_length = samples
        .iter()
        .filter_map(|(t, st, _)| st["queued"].as_f64().or(st["queue_length"].as_f64()).map(|q| (*t, q)))
        .collect();
    let (longest_stall_s, longest_stall_from_s) = longest_stall(samples, core_windows);
    let endpoints = sh.rec.endpoints(seconds);
    let total_requests: u64 = endpoints.iter().map(|e| e.requests).sum();
    let layout_in_stats = match &sh.mega {
        Some(_) => sh.stack.room_stats(&sh.http).await.ok().and_then(|v| v["layout"].as_str().map(str::to_string)),
        None => None,
    };
    Ok(SurgeReport {
        scenario: sh.s.name.to_string(),
        users: sh.s.users,
        bots,
        seats: capacity,
        seconds,
        admitted: sh.admitted.load(Ordering::Relaxed),
        sold,
        paid_orders,
        abandoned,
        still_waiting: (sh.s.users - sh.done.load(Ordering::Relaxed)) as u64,
        sellout_seconds: sellout,
        held_through_seconds: held_through,
        admitted_sold_out_share: if admitted_all == 0 { 0.0 } else { admitted_sold_out as f64 / admitted_all as f64 },
        waitlisted,
        waitlisted_seated,
        seat_order: seat_order(&mut buyers),
        paid_out_seconds: paid_out,
        oversold,
        double_sold,
        over_limit_users,
        fifo_tau,
        fifo_tau_send_order,
        fifo_pairs_judged,
        p99_windows_ok: if core_windows.is_empty() { 1.0 } else {
            core_windows.iter().filter(|w| w.1 >= 0.99).count() as f64 / core_windows.len() as f64
        },
        p99_windows: core_windows.len(),
        client_p99_windows_ok: if windows.is_empty() { 1.0 } else { ok as f64 / windows.len() as f64 },
        client_p99_windows: windows.len(),
        drop_window: sh.s.capacity_drop,
        drop_window_client_p99_ok: sh.s.capacity_drop.map(|(from, to)| {
            let during: Vec<_> = windows.iter().filter(|w| (from..=to).contains(&u64::from(w.0))).collect();
            if during.is_empty() { 0.0 } else { during.iter().filter(|w| w.1 <= target).count() as f64 / during.len() as f64 }
        }),
        drop_while_selling: sh.s.capacity_drop.map(|(_, to)| sellout.is_none_or(|t| t > to as f64)),
        p99_target_ms: target,
        longest_stall_s,
        longest_stall_from_s,
        bots_share_of_seats: if sold == 0 { 0.0 } else { sold_by_bots as f64 / sold as f64 },
        bots_share_of_population: bots as f64 / sh.s.users.max(1) as f64,
        bots_share_of_admitted: if admitted_all == 0 { 0.0 } else { admitted_bots as f64 / admitted_all as f64 },
        edge_rss_mb: sh.stack.edge_peak_rss_mb(),
        requests_per_second: total_requests as f64 / seconds,
        endpoints,
        statuses: sh.rec.statuses(),
        examples: sh.rec.examples(),
        release_rate,
        queue_length,
        hold_p99: windows.iter().map(|w| (w.0 as f64, w.1)).collect(),
        crashes: if sh.s.crashes { Some(crash_figures(sh, &stock, samples, paid_out).await?) } else { None },
        users_with_several_orders,
        megasale: sh.mega.as_ref().map(|m| {
            let (mut fans, mut fans_timed, mut placed, mut placed_timed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for u in &sh.users {
                let g = u.lock();
                if !g.bot && g.position > 0 {
                    placed.push((usize::from(g.join_edge), g.join_seq, g.position));
                    placed_timed.push((g.join_seq, g.join_answered, g.position));
                    if g.admitted_ms.is_some() {
                        fans.push((usize::from(g.join_edge), g.join_seq, g.position));
                        fans_timed.push((g.join_seq, g.join_answered, g.position));
                    }
                }
            }
            let (first, last) = (sh.first_join_ms.load(Ordering::Relaxed), sh.last_join_ms.load(Ordering::Relaxed));
            let join_seconds = if last > first { (last - first) as f64 / 1000.0 } else { 0.0 };
            let sale = crate::megasale::SaleFigures {
                fans: sh.s.users,
                seats: capacity,
                seconds,
                admitted: sh.admitted.load(Ordering::Relaxed),
                sold,
                oversold,
                seats_double_sold: double_sold,
                still_waiting: (sh.s.users - sh.done.load(Ordering::Relaxed)) as u64,
                sellout_seconds: sellout,
                paid_out_seconds: paid_out,
                requests_per_second: total_requests as f64 / seconds,
            };
            crate::megasale::figures(
                sale,
                m,
                (&sh.s.layout, layout_in_stats, sh.s.spread),
                sh.stack.edges.len(),
                (sh.joins_placed.load(Ordering::Relaxed), join_seconds),
                double_sold_users,
                (crate::megasale::tau_across_edges(&fans, sh.stack.edges.len()), ordered_tau(&fans_timed)),
                {
                    let (judged, share) = ordered_tau(&placed_timed);
                    (judged, share, crate::megasale::tau_across_edges(&placed, 0).0)
                },
            )
        }),
    })
}

/// The longest stall of a run from its one-second samples (t, room stats with the bench's count of
/// fans admitted, `bench_admitted`, stock) and the core's windows (t, fraction of its holds within
/// target; a second without a window saw fewer than 5 holds: an idle core, under target): the
/// longest run of consecutive samples in which no fan was admitted (the bench's count did not
/// move; the room's `serving` where the samples have no count) while fans waited (places issued
/// beyond those admitted; people queued where there is no count), the sale was not sold out and the core was within target.
/// (seconds, when it began); (0, None) when there was none.
fn longest_stall(samples: &[(f64, Value, Value)], core_windows: &[(f64, f64)]) -> (f64, Option<f64>) {
    let core_ok = |t: f64| core_windows.iter().find(|w| (w.0 - t).abs() < 0.01).is_none_or(|w| w.1 >= 0.99);
    let admitted = |st: &Value| st["bench_admitted"].as_u64().or(st["serving"].as_u64());
    let (mut best, mut best_from) = (0.0f64, None);
    let mut run: Option<f64> = None;
    for pair in samples.windows(2) {
        let ((t0, a, _), (t1, b, stock)) = (&pair[0], &pair[1]);
        let (Some(n0), Some(n1)) = (admitted(a), admitted(b)) else {
            run = None;
            continue;
        };
        let waiting = if a["bench_admitted"].is_u64() { a["issued"].as_u64().unwrap_or(0) > n0 } else { a["queued"].as_u64().unwrap_or(0) > 0 };
        // Every ticket left promised to fans let in (the room says sold out for now): the release
        // stands still on purpose.
        let spoken_for = a["claims"]["spoken_for"] == true || b["claims"]["spoken_for"] == true;
        let sold_out = a["sold_out"] == true || b["sold_out"] == true || stock["pools"]["main"]["available"].as_u64() == Some(0) || spoken_for;
        if n1 == n0 && waiting && !sold_out && core_ok(*t1) {
            let from = *run.get_or_insert(*t0);
            if t1 - from > best {
                best = t1 - from;
                best_from = Some(from);
            }
        } else {
            run = None;
        }
    }
    ((best * 10.0).round() / 10.0, best_from.map(|f| f.round()))
}

/// The gap in a sorted list of event times (ms) that spans `t`: next event at or after `t` minus the
/// last one before it (to the end of the run when nothing came after).
fn gap_spanning(times: &[u64], t: u64, end: u64) -> f64 {
    let i = times.partition_point(|x| *x < t);
    let before = if i == 0 { t } else { times[i - 1] };
    let after = times.get(i).copied().unwrap_or(end);
    after.saturating_sub(before) as f64 / 1000.0
}

/// From the last advance of `serving` before `t` to the first after it, s (`None`: it never moved again).
fn queue_stall(serving: &[(f64, u64)], t: f64) -> Option<f64> {
    let i = serving.partition_point(|(at, _)| *at < t);
    let at_kill = serving.get(i.checked_sub(1)?)?.1;
    let last_move = serving[..i].iter().rev().take_while(|(_, s)| *s == at_kill).last().map_or(t, |(at, _)| *at);
    let resumed = serving[i..].iter().find(|(_, s)| *s > at_kill)?.0;
    Some(((resumed - last_move) * 10.0).round() / 10.0)
}

async fn crash_figures(sh: &Shared, stock: &Value, samples: &[(f64, Value, Value)], paid_out_s: Option<f64>) -> anyhow::Result<CrashFigures> {
    let serving: Vec<(f64, u64)> = samples.iter().filter_map(|(t, st, _)| st["serving"].as_u64().map(|s| (*t, s))).collect();
    let mut final_rooms = Vec::new();
    for e in &sh.stack.edges {
        let r = sh.http.get(format!("{}/admin/rooms/{}/stats", e.admin, crate::procs::ROOM)).bearer_auth(crate::procs::ADMIN).send().await;
        final_rooms.push(match r {
            Ok(r) => r.json::<Value>().await.unwrap_or(Value::Null),
            Err(e) => json!(e.to_string()),
        });
    }
    let end = sh.now_ms();
    let kills = sh.kills.lock().clone();
    // Every order the provider took money for must be PAID (or USED) in the core; every acknowledged
    // hold must be an order the core knows.
    let paid: Vec<String> = sh.stack.provider.paid.lock().keys().cloned().collect();
    let acked: Vec<String> = sh.users.iter().filter_map(|u| u.lock().order.as_ref().map(|o| o.0.clone())).collect();
    let states = order_states(sh, paid.iter().chain(acked.iter()).cloned().collect()).await?;
    let lost: Vec<String> = paid.iter().filter(|o| !matches!(states.get(*o).and_then(|s| s.as_deref()), Some("PAID" | "USED"))).cloned().collect();
    let holds_lost = acked.iter().filter(|o| states.get(*o).is_none_or(|s| s.is_none())).count() as u64;
    let mut places: HashMap<u64, u32> = HashMap::new();
    let mut places_changed = 0;
    let mut admits = Vec::new();
    for u in &sh.users {
        let g = u.lock();
        if g.bot {
            continue;
        }
        if g.place_changed {
            places_changed += 1;
        }
        if g.first_position > 0 {
            *places.entry(g.first_position).or_default() += 1;
        }
        if let Some(t) = g.admitted_ms {
            admits.push(t);
        }
    }
    admits.sort_unstable();
    let mut holds = sh.holds_ok.lock().clone();
    holds.sort_unstable();
    let stalls = sh.stalls.lock().clone();
    let mut figures = Vec::new();
    for (i, k) in kills.iter().enumerate() {
        let next = kills.get(i + 1).map_or(u64::MAX, |n| n.at_ms);
        let mut waits: Vec<u64> = stalls.iter().filter(|(a, _)| *a >= k.at_ms && *a < next).map(|(a, b)| b - a).collect();
        let last_back = stalls.iter().filter(|(a, _)| *a >= k.at_ms && *a < next).map(|(_, b)| *b).max().unwrap_or(k.at_ms);
        waits.sort_unstable();
        figures.push(KillFigures {
            what: k.what.clone(),
            at_s: k.at_ms as f64 / 1000.0,
            restarted_after_s: k.back_ms.map(|b| (b - k.at_ms) as f64 / 1000.0),
            restart_error: k.restart_error.clone(),
            sold_at_kill: k.sold,
            held_at_kill: k.held,
            fans_hit: waits.len() as u64,
            fan_wait_p50_s: waits.get(waits.len() / 2).map_or(0.0, |w| *w as f64 / 1000.0),
            fan_wait_max_s: waits.last().map_or(0.0, |w| *w as f64 / 1000.0),
            fans_all_back_after_s: (last_back - k.at_ms) as f64 / 1000.0,
            hold_gap_s: gap_spanning(&holds, k.at_ms, end),
            admission_gap_s: gap_spanning(&admits, k.at_ms, end),
            queue_stall_s: queue_stall(&serving, k.at_ms as f64 / 1000.0),
        });
    }
    let selling = kills.len() == 3
        && kills.iter().all(|k| k.sold < k.capacity && paid_out_s.is_none_or(|p| p * 1000.0 > k.at_ms as f64));
    Ok(CrashFigures {
        kills: figures,
        paid_at_provider: paid.len() as u64,
        paid_lost: lost.len() as u64,
        paid_lost_examples: lost.into_iter().take(5).collect(),
        holds_acknowledged: acked.len() as u64,
        holds_lost,
        places_changed,
        places_shared: places.values().filter(|n| **n > 1).count() as u64,
        kills_while_selling: selling,
        odd: sh.odd.lock().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        final_stock: stock.clone(),
        final_rooms,
    })
}

/// Each order's state in the core (`None`: unknown to it), read 32 at a time.
async fn order_states(sh: &Shared, ids: Vec<String>) -> anyhow::Result<HashMap<String, Option<String>>> {
    let mut out = HashMap::new();
    for chunk in ids.chunks(32) {
        let mut set = tokio::task::JoinSet::new();
        for id in chunk {
            let (http, id) = (sh.http.clone(), id.clone());
            let base = sh.stack.core_base.clone();
            set.spawn(async move {
                let mut last = None;
                for _ in 0..5 {
                    let r = http.get(format!("{base}/v1/orders/{id}")).bearer_auth(crate::procs::ADMIN).send().await;
                    match r {
                        Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => return Ok((id, None)),
                        Ok(r) if r.status().is_success() => {
                            let v: Value = r.json().await.unwrap_or(Value::Null);
                            return Ok((id, Some(v["state"].as_str().unwrap_or("?").to_string())));
                        }
                        Ok(r) => last = Some(format!("status {}", r.status())),
                        Err(e) => last = Some(e.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(anyhow::anyhow!("GET /v1/orders/{id}: {}", last.unwrap_or_default()))
            });
        }
        while let Some(r) = set.join_next().await {
            let (id, state) = r??;
            out.insert(id, state);
        }
    }
    Ok(out)
}

/// Writes the report's figures to summary.json and its page in bench/results/, and its plots to bench/results/.
pub fn publish(r: &SurgeReport, command: &str) -> anyhow::Result<()> {
    use crate::svg::{Series, line_chart};
    if let Some(m) = &r.megasale {
        return crate::megasale::publish(m, command);
    }
    if let Some(c) = &r.crashes {
        return publish_crashes(r, c, command);
    }
    let key = r.scenario.replace('-', "_");
    crate::report::merge_summary(
        &key,
        json!({
            "users": r.users, "seats": r.seats, "oversold": r.oversold, "double_sold": r.double_sold,
            "over_limit_users": r.over_limit_users,
            "p99_windows_ok": r.p99_windows_ok, "p99_windows": r.p99_windows,
            "client_p99_windows_ok": r.client_p99_windows_ok, "client_p99_windows": r.client_p99_windows,
            "drop_window": r.drop_window, "drop_window_client_p99_ok": r.drop_window_client_p99_ok, "drop_while_selling": r.drop_while_selling,
            "client_p99_windows_over": r.hold_p99.iter().filter(|w| w.1 > r.p99_target_ms).map(|w| json!([w.0, (w.1 * 10.0).round() / 10.0])).collect::<Vec<_>>(),
            "fifo_tau": if r.fifo_tau.is_nan() { Value::Null } else { json!(r.fifo_tau) },
            "fifo_tau_send_order": if r.fifo_tau_send_order.is_nan() { Value::Null } else { json!(r.fifo_tau_send_order) },
            "fifo_pairs_judged": if r.fifo_tau.is_nan() { Value::Null } else { json!((r.fifo_pairs_judged * 10_000.0).round() / 10_000.0) },
            "edge_rss_mb": r.edge_rss_mb, "sellout_seconds": r.sellout_seconds, "held_through_seconds": r.held_through_seconds, "paid_out_seconds": r.paid_out_seconds, "admitted": r.admitted,
            "admitted_sold_out_share": r.admitted_sold_out_share, "seat_order": r.seat_order,
            "waitlisted": r.waitlisted, "waitlisted_seated": r.waitlisted_seated,
            "sold": r.sold, "abandoned": r.abandoned, "still_waiting": r.still_waiting, "seconds": r.seconds, "requests_per_second": r.requests_per_second.round(),
            "bots_share_of_seats": r.bots_share_of_seats, "bots_share_of_population": r.bots_share_of_population,
            "bots_share_of_admitted": r.bots_share_of_admitted,
            "longest_stall_seconds": r.longest_stall_s, "longest_stall_from_seconds": r.longest_stall_from_s,
        }),
    )?;
    let dir = crate::report::bench_dir().join("results");
    std::fs::write(
        dir.join(format!("{}-release.svg", r.scenario)),
        line_chart(&format!("{}: release rate", r.scenario), "seconds", "admissions / s", &[Series { name: "release rate", color: "#06c", points: r.release_rate.clone() }], None),
    )?;
    std::fs::write(
        dir.join(format!("{}-p99.svg", r.scenario)),
        line_chart(&format!("{}: hold P99 per second", r.scenario), "seconds", "ms", &[Series { name: "hold P99", color: "#c60", points: r.hold_p99.clone() }], Some((100.0, "target"))),
    )?;
    std::fs::write(
        dir.join(format!("{}-queue.svg", r.scenario)),
        line_chart(&format!("{}: queue length", r.scenario), "seconds", "people waiting", &[Series { name: "queue", color: "#393", points: r.queue_length.clone() }], None),
    )?;
    let mut rows = String::new();
    for e in &r.endpoints {
        rows.push_str(&format!("| {} | {} | {:.0} | {:.2} ms | {:.2} ms |\n", e.endpoint, e.requests, e.per_second, e.p50_ms, e.p99_ms));
    }
    let body = format!(
        "## Surge: {name}\n\nCommand: `{command}`\n\nMachine: {machine}.\n\n{shaper_note}\
         | figure | value |\n|---|---|\n\
         | virtual users (bots) | {users} ({bots}) |\n| seats | {seats} |\n| run time | {secs:.1} s |\n\
         | admitted | {admitted} |\n| tickets sold (paid) | {sold} |\n| abandoned holds | {abandoned} |\n\
         | still queued at the end | {waiting} |\n\
         | time to sell out (tickets held = seats / `available` 0 / every ticket paid) | {held_through} / {sellout} / {paid_out} |\n| oversold | {oversold} |\n| double-sold seats | {double} |\n\
         | users over their limit | {overlimit} |\n| FIFO Kendall τ (place vs join order; pairs whose joins overlapped left out / every pair by send order) | {tau} / {tau_send} |\n\
         | admitted who met \"sold out\" at their hold and got no seat (share of the admitted) | {aso:.3} |\n\
         | admitted told \"sold out for now\" at their hold (the core's waitlist) / of them seated from tickets that came back | {wl} / {wls} |\n\
         | seat order (pairs of buyers, exactly one with tickets: the share of the one first in the queue's order — join order, admission order in a random room) | {seat_order} |\n\
         | 1-s windows with the core's hold P99 ≤ target (core histogram) | {ok:.3} of {nw} |\n\
         | 1-s windows with hold P99 ≤ target at the bench's clients (end to end) | {cok:.3} of {cnw} |\n{drop}| longest stall (no fan admitted while fans wait, not sold out, core within target) | {stall} |\n\
         | bots' share of seats / of population / of the fans admitted | {bs:.3} / {bp:.3} / {ba:.3} |\n\
         | edge peak RSS | {rss:.1} MB |\n| real requests/s (all endpoints) | {rps:.0} |\n\n\
         | endpoint | requests | per s | P50 | P99 |\n|---|---|---|---|---|\n{rows}\n\
         Plots: `results/{name}-release.svg`, `results/{name}-p99.svg`, `results/{name}-queue.svg`.\n",
        name = r.scenario,
        machine = crate::report::machine(),
        shaper_note = if r.scenario == "capacity-drop" {
            "The core's capacity here is a shaper in front of it (32 slots × 10 ms, halved mid-sale): the core's own \
             histogram does not see the shaper's queue, so the end-to-end row is the one that shows the drop.\n\n"
        } else {
            ""
        },
        users = r.users,
        bots = r.bots,
        seats = r.seats,
        secs = r.seconds,
        admitted = r.admitted,
        sold = r.sold,
        abandoned = r.abandoned,
        waiting = r.still_waiting,
        sellout = r.sellout_seconds.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "not sold out".into()),
        held_through = r.held_through_seconds.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "never".into()),
        paid_out = r.paid_out_seconds.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "not paid out".into()),
        oversold = r.oversold,
        double = r.double_sold,
        overlimit = r.over_limit_users,
        aso = r.admitted_sold_out_share,
        wl = r.waitlisted,
        wls = r.waitlisted_seated,
        seat_order = r.seat_order.map_or_else(|| "no such pair".to_string(), |o| format!("{o:.4}")),
        tau = if r.fifo_tau.is_nan() { "n/a (random pre-queue)".to_string() } else { format!("{:.4}", r.fifo_tau) },
        tau_send = if r.fifo_tau_send_order.is_nan() { "n/a".to_string() } else { format!("{:.4}", r.fifo_tau_send_order) },
        ok = r.p99_windows_ok,
        nw = r.p99_windows,
        cok = r.client_p99_windows_ok,
        cnw = r.client_p99_windows,
        drop = match (r.drop_window, r.drop_window_client_p99_ok, r.drop_while_selling) {
            (Some((from, to)), Some(ok), Some(selling)) => format!(
                "| capacity halved at (s) | {from}–{to}, {} |\n| end-to-end windows within target during the drop | {ok:.3} |\n",
                if selling { "while the sale was selling" } else { "**after the sale sold out: the drop was not tested**" }
            ),
            _ => String::new(),
        },
        stall = match r.longest_stall_from_s {
            Some(from) => format!("{:.1} s (from {from:.0} s)", r.longest_stall_s),
            None => "none".into(),
        },
        bs = r.bots_share_of_seats,
        bp = r.bots_share_of_population,
        ba = r.bots_share_of_admitted,
        rss = r.edge_rss_mb,
        rps = r.requests_per_second,
    );
    crate::report::write_section(&format!("surge-{}", r.scenario), &body)
}

/// The crash test's keys (`crashes_*`; `crashes_quick_*` for `--quick`) and its section of bench/results/surge-crashes.md.
fn publish_crashes(r: &SurgeReport, c: &CrashFigures, command: &str) -> anyhow::Result<()> {
    let quick = command.contains("--quick");
    let key = if quick { "crashes_quick" } else { "crashes" };
    let tau = if r.fifo_tau.is_nan() { Value::Null } else { json!((r.fifo_tau * 10_000.0).round() / 10_000.0) };
    let round = |x: f64| (x * 10.0).round() / 10.0;
    let flat = [
        ("oversold", json!(r.oversold)),
        ("double_sold", json!(r.double_sold)),
        ("paid_lost", json!(c.paid_lost)),
        ("holds_lost", json!(c.holds_lost)),
        ("places_changed", json!(c.places_changed)),
        ("places_shared", json!(c.places_shared)),
        ("fifo_tau", tau),
        ("fifo_tau_send_order", if r.fifo_tau_send_order.is_nan() { Value::Null } else { json!((r.fifo_tau_send_order * 10_000.0).round() / 10_000.0) }),
        ("fifo_pairs_judged", json!((r.fifo_pairs_judged * 10_000.0).round() / 10_000.0)),
        ("sellout_seconds", json!(r.sellout_seconds.map(round))),
        ("paid_out_seconds", json!(r.paid_out_seconds.map(round))),
        ("admitted_sold_out_share", json!((r.admitted_sold_out_share * 10_000.0).round() / 10_000.0)),
        ("waitlisted", json!(r.waitlisted)),
        ("waitlisted_seated", json!(r.waitlisted_seated)),
        ("seat_order", json!(r.seat_order.map(|o| (o * 10_000.0).round() / 10_000.0))),
        ("kills_while_selling", json!(c.kills_while_selling)),
    ];
    for (k, v) in &flat {
        crate::report::merge_summary(&format!("{key}_{k}"), v.clone())?;
    }
    crate::report::merge_summary(
        key,
        json!({
            "command": command, "users": r.users, "seats": r.seats, "seconds": round(r.seconds), "admitted": r.admitted,
            "sold": r.sold, "paid_orders": r.paid_orders, "abandoned": r.abandoned, "still_waiting": r.still_waiting,
            "over_limit_users": r.over_limit_users, "paid_at_provider": c.paid_at_provider,
            "holds_acknowledged": c.holds_acknowledged, "kills": c.kills, "odd": c.odd,
        }),
    )?;
    let mut rows = String::new();
    for k in &c.kills {
        rows.push_str(&format!(
            "| {} | {:.1} s | {} / {} | {} | {} | {:.1} s / {:.1} s | {:.1} s | {:.1} s | {:.1} s | {} |\n",
            k.what,
            k.at_s,
            k.sold_at_kill,
            k.held_at_kill,
            k.restarted_after_s.map(|s| format!("{s:.1} s")).or_else(|| k.restart_error.clone()).unwrap_or_default(),
            k.fans_hit,
            k.fan_wait_p50_s,
            k.fan_wait_max_s,
            k.fans_all_back_after_s,
            k.hold_gap_s,
            k.admission_gap_s,
            k.queue_stall_s.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "never moved again".into()),
        ));
    }
    let odd: Vec<String> = c.odd.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let body = format!(
        "## Surge: crashes{quick_title}\n\nCommand: `{command}`\n\nMachine: {machine}; 2 shared cores: the bench, two edges, the core and \
         redis-server all run on them.\n\n\
         The whole sale through crashes: one redis-server with AOF (`appendonly yes`, `appendfsync always`) holds the sale \
         (the core's `store`) and the room state of two edges sharing one queue (top-level `store = \"redis://...\"`, one \
         `edge.secret`); a stand-in payment provider answers the core's status query (`payment.query-url`). Fans are \
         spread over both edges. Mid-sale, each when the sale has taken 20% / 45% / 70% of its seats (sold + held) and at least \
         a few seconds after the previous restart: SIGKILL of the edge holding the room's leader lease (its admin stats say \
         `leader`), then of the core, then of redis-server; each is started again 1 s later with the same ports, config and \
         data. Fans act as browsers do: a failed connection, a timeout, a 502/503/504 or the core's re-check pause \
         (`403 event_paused`) is retried with backoff (0.5, 1, 2, 4 s) keeping every cookie (ticket, device, admission), the \
         token and the idempotency key; a failed connection sends the next try to the other edge (a load balancer's health \
         check). Paying: the provider takes the money (the fan sees \"paid\"), then calls the core back until the callback \
         lands; the core asks the provider about CREATED orders after a restart and before closing an expired hold.\n\n\
         | figure | value |\n|---|---|\n\
         | fans / seats | {users} / {seats} |\n| run time | {secs:.1} s |\n| admitted | {admitted} |\n\
         | tickets sold (paid) | {sold} |\n| abandoned holds (resold) | {abandoned} |\n\
         | time to sell out (first / every ticket paid) | {sellout} / {paid_out} |\n\
         | oversold | {oversold} |\n| double-sold | {double} |\n| users over their limit | {overlimit} |\n\
         | paid at the provider / **paid orders lost** (not PAID in the core at the end) | {paid} / **{lost}** |\n\
         | holds acknowledged / lost | {acked} / {hlost} |\n\
         | fans told another place than their first / places given twice | {changed} / {shared} |\n\
         | FIFO Kendall τ (join order vs place, admitted fans, whole sale; pairs whose joins overlapped left out / every pair by send order) | {tau} / {tau_send} |\n\
         | every kill while the sale was selling | {selling} |\n| other answers counted | {odd} |\n\n\
         Each kill as the fans saw it (a fan's wait: from their first failed try to their next answer; a gap: the pause \
         in acknowledged holds or in admissions that spans the kill; the queue standing still: `serving` not advancing, \
         which for the leader edge is the lease's 3 s running out before the other edge takes it):\n\n\
         | kill | at | sold / held then | answering again after | fans hit | fan wait P50 / max | last fan back after | hold gap | admission gap | queue stood still (±1 s) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n{rows}",
        quick_title = if quick { " (quick)" } else { "" },
        machine = crate::report::machine(),
        users = r.users,
        seats = r.seats,
        secs = r.seconds,
        admitted = r.admitted,
        sold = r.sold,
        abandoned = r.abandoned,
        sellout = r.sellout_seconds.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "not sold out".into()),
        paid_out = r.paid_out_seconds.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "not paid out".into()),
        oversold = r.oversold,
        double = r.double_sold,
        overlimit = r.over_limit_users,
        paid = c.paid_at_provider,
        lost = c.paid_lost,
        acked = c.holds_acknowledged,
        hlost = c.holds_lost,
        changed = c.places_changed,
        shared = c.places_shared,
        tau = if r.fifo_tau.is_nan() { "n/a".to_string() } else { format!("{:.4}", r.fifo_tau) },
        tau_send = if r.fifo_tau_send_order.is_nan() { "n/a".to_string() } else { format!("{:.4}", r.fifo_tau_send_order) },
        selling = c.kills_while_selling,
        odd = if odd.is_empty() { "none".to_string() } else { odd.join(", ") },
    );
    crate::report::write_section(if quick { "surge-crashes-quick" } else { "surge-crashes" }, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_hold_windows_come_from_histogram_deltas() {
        let text = |n: u64, fast: u64| {
            format!(
                "wicket_core_request_duration_seconds_bucket{{route=\"hold\",le=\"0.075\"}} {}\n\
                 wicket_core_request_duration_seconds_bucket{{route=\"hold\",le=\"0.1\"}} {fast}\n\
                 wicket_core_request_duration_seconds_bucket{{route=\"hold\",le=\"0.15\"}} {n}\n\
                 wicket_core_request_duration_seconds_count{{route=\"hold\"}} {n}\n\
                 wicket_core_request_duration_seconds_count{{route=\"pay\"}} 999\n",
                fast / 2
            )
        };
        assert_eq!(hold_histogram(&text(10, 9), 100), Some((10, 9)));
        assert_eq!(hold_histogram(&text(10, 9), 120), Some((10, 9)), "the largest bound under the target");
        assert_eq!(hold_histogram("nothing here", 100), None);
        let hist = [(1.0, 0, 0), (2.0, 1000, 995), (3.0, 1002, 997), (4.0, 2002, 1900)];
        assert_eq!(core_p99_windows(&hist, 5), vec![(2.0, 0.995), (4.0, 0.903)]);
    }

    /// A stall counts only while people wait, the sale sells and the core is within target: an
    /// over-target second or a sold-out sale ends it, as does an admission.
    #[test]
    fn the_longest_stall_is_counted_only_while_fans_wait_under_target() {
        let sample = |t: f64, serving: u64, queued: u64, available: u64| {
            (t, json!({"serving": serving, "issued": serving + queued, "queued": queued, "sold_out": false}), json!({"pools": {"main": {"available": available}}}))
        };
        // Admitting until 3 s, then stuck from 3 to 10 s (7 s) with people queued.
        let mut s: Vec<_> = (0..=3).map(|t| sample(t as f64, 10 * t, 500, 100)).collect();
        s.extend((4..=10).map(|t| sample(t as f64, 30, 500, 100)));
        s.extend((11..=12).map(|t| sample(t as f64, 30 + t, 500, 100)));
        assert_eq!(longest_stall(&s, &[]), (7.0, Some(3.0)));
        // The core over target at 7 s: that second is the core's own limit, not a stall: 3 s, then 3 s.
        assert_eq!(longest_stall(&s, &[(7.0, 0.9)]), (3.0, Some(3.0)));
        // Within target (≥ 99% of holds in time): still a stall.
        assert_eq!(longest_stall(&s, &[(7.0, 0.995)]).0, 7.0);
        // Nobody queued, or sold out: nothing is owed.
        let idle: Vec<_> = (0..10).map(|t| sample(t as f64, 5, 0, 100)).collect();
        assert_eq!(longest_stall(&idle, &[]), (0.0, None));
        let sold: Vec<_> = (0..10).map(|t| sample(t as f64, 5, 900, 0)).collect();
        assert_eq!(longest_stall(&sold, &[]), (0.0, None));
        // With the bench's count: places served that nobody picks up (fans told to come back later
        // than their turn) admit nobody: a stall, though `serving` moves.
        let fans = |t: u64, admitted: u64| {
            (t as f64, json!({"serving": 100 * t, "issued": 10_000, "queued": 9000, "bench_admitted": admitted}), json!({"pools": {"main": {"available": 100}}}))
        };
        let s: Vec<_> = [(0, 0), (1, 50), (2, 90), (3, 90), (4, 90), (5, 90), (6, 90), (7, 120)].map(|(t, n)| fans(t, n)).to_vec();
        assert_eq!(longest_stall(&s, &[]), (4.0, Some(2.0)));
        // Everyone who joined admitted: nobody waits.
        let done: Vec<_> = (0..5).map(|t| fans(t, 10_000)).collect();
        assert_eq!(longest_stall(&done, &[]), (0.0, None));
    }
}
