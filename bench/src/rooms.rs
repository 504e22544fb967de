//! Several sales on one edge (issue #26): the real `wicket` edge and a separate `wicket-core` process
//! (durable embedded store), two rooms with a cautious start (auto release, start 2/s, min 1/s, max
//! 2000/s, P99 target 100 ms) at an idle core. Each sale has `fans` fans who join within 2 s, poll
//! as told, hold one ticket through the edge once admitted and stay on the site (a protected page
//! every 5 s) until the run ends.
//!
//! - one after another: sale A (room `a`, in the config file) runs until every fan is admitted;
//!   then room `b` is created through the admin API and sale B runs on the same edge, with A's
//!   fans still on the site;
//! - at once: a fresh stack, both rooms in the config, both sales start together.
//!
//! The figure of each sale is the time from its first join to its last admission; the goal is
//! every fan of each sale admitted within 30 s (`--check` fails otherwise).
//!
//! With `--stop-core-at S` ([`run_core_stopped`], issue #39) it runs one sale instead, in room `a`
//! of a fresh stack, and stops the core process (SIGSTOP) `S` seconds in for `--stop-core-for`
//! seconds (SIGCONT): the requests held meanwhile answer a second late, the room's P99 jumps, its
//! controller cuts. The figures: every fan admitted within 30 s, and no stall — neither a gap
//! between admissions nor a run of the room's ticks in cool-down with the core under target —
//! longer than 5 s while fans wait (`--check` fails otherwise).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use wicket_testkit::core_toml::CoreToml;
use wicket_testkit::free_port;

use crate::procs::{ADMIN, CALLBACK, HS, binary, start_origin, wait_http};

/// The goal: every fan of a sale admitted within this many seconds of its first join.
pub const GOAL_SECONDS: f64 = 30.0;
/// The goal with the core stopped: no stall longer than this while fans wait.
pub const STALL_GOAL_SECONDS: f64 = 5.0;
/// A sale that has not admitted everyone by then is cut off (and fails the goal).
const GIVE_UP: Duration = Duration::from_secs(60);

/// The release of both rooms: cautious, at an idle core.
const RELEASE: &str = "mode = \"auto\"\nstart = 2\nmin = 1\nmax = 2000\np99-target-ms = 100";

/// One sale's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Sale {
    /// Seconds from the sale's first join at which each fan saw "admitted", in order.
    #[serde(skip)]
    pub admitted_at: Vec<f64>,
    pub room: String,
    pub fans: usize,
    pub admitted: usize,
    /// Holds the core answered 201 to.
    pub held: usize,
    /// From the sale's first join to its last admission (`None`: not everyone was admitted).
    pub last_admitted_s: Option<f64>,
    /// The room's release decision at the end (`reason`, `budget`, `rate`, ...).
    pub decision: Value,
}

impl Sale {
    pub fn ok(&self) -> bool {
        self.admitted == self.fans && self.last_admitted_s.is_some_and(|s| s <= GOAL_SECONDS)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RoomsReport {
    pub fans_per_sale: usize,
    pub one_after_another: Vec<Sale>,
    pub at_once: Vec<Sale>,
}

impl RoomsReport {
    pub fn ok(&self) -> bool {
        self.one_after_another.iter().chain(&self.at_once).all(Sale::ok)
    }

    pub fn table(&self) -> String {
        let mut t = String::from("| scenario | room | fans | admitted | held | last admitted (s) | goal ≤ 30 s |\n|---|---|---|---|---|---|---|\n");
        for (name, sales) in [("one after another", &self.one_after_another), ("at once", &self.at_once)] {
            for s in sales {
                t.push_str(&format!(
                    "| {name} | {} | {} | {} | {} | {} | {} |\n",
                    s.room,
                    s.fans,
                    s.admitted,
                    s.held,
                    s.last_admitted_s.map_or("—".into(), |v| format!("{v:.1}")),
                    if s.ok() { "yes" } else { "no" }
                ));
            }
        }
        t
    }
}

/// The processes of one run; killed on drop.
struct Stack {
    edge: Child,
    core: Child,
    base: String,
    admin: String,
    _dir: tempfile::TempDir,
}

impl Drop for Stack {
    fn drop(&mut self) {
        for c in [&mut self.edge, &mut self.core] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn room_toml(id: &str) -> String {
    format!(
        "[[rooms]]\nid = \"{id}\"\nevent = \"ev-{id}\"\ntarget = \"/buy/ev-{id}\"\nprotected = [\"/buy/ev-{id}\"]\n\
         session-seconds = 300\n[rooms.release]\n{RELEASE}\n"
    )
}

async fn start(rooms: &[&str]) -> anyhow::Result<Stack> {
    let dir = tempfile::tempdir()?;
    let origin: SocketAddr = start_origin().await?;
    let (core_port, edge_port, admin_port) = (free_port(), free_port(), free_port());
    let now = time::OffsetDateTime::now_utc();
    let fmt = |t: time::OffsetDateTime| t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
    for id in ["a", "b"] {
        let event = json!({
            "name": format!("sale {id}"), "opens_at": fmt(now - time::Duration::minutes(1)),
            "closes_at": fmt(now + time::Duration::hours(2)), "hold_seconds": 900,
            "pools": [{"id": "main", "capacity": 100_000}], "skus": [{"id": "ga", "pools": ["main"], "price_cents": 990}],
            "limits": [{"dimension": "user", "max": 2}],
        });
        std::fs::write(dir.path().join(format!("ev-{id}.json")), event.to_string())?;
    }
    let core = CoreToml::new(ADMIN, CALLBACK, HS)
        .listen(core_port)
        .store("embedded")
        .data_dir("core-data")
        .top("event-files = [\"ev-a.json\", \"ev-b.json\"]")
        .build();
    let rooms: String = rooms.iter().map(|r| room_toml(r)).collect();
    let config = format!(
        "{core}\n[edge]\nlisten = \"127.0.0.1:{edge_port}\"\nadmin-listen = \"127.0.0.1:{admin_port}\"\nthreads = 2\n\
         origin = \"http://{origin}\"\ncore = \"http://127.0.0.1:{core_port}\"\nuser-header = \"X-User-Id\"\n\
         trusted-proxies = [\"127.0.0.1/32\"]\nsecret = \"bench-edge-secret-0123456789abcdef\"\nshutdown-grace-seconds = 1\n\n{rooms}"
    );
    let cfg = dir.path().join("wicket.toml");
    std::fs::write(&cfg, config)?;
    let spawn = |bin: &str| -> anyhow::Result<Child> {
        Ok(Command::new(binary(bin)?).args(["serve", "--config"]).arg(&cfg).env("RUST_LOG", "warn").stdout(Stdio::null()).stderr(Stdio::inherit()).spawn()?)
    };
    let core = spawn("wicket-core")?;
    let edge = spawn("wicket")?;
    let stack = Stack { edge, core, base: format!("http://127.0.0.1:{edge_port}"), admin: format!("http://127.0.0.1:{admin_port}"), _dir: dir };
    wait_http(&format!("http://127.0.0.1:{core_port}/healthz")).await?;
    wait_http(&format!("{}/admin/health", stack.admin)).await?;
    Ok(stack)
}

/// A fan's cookie jar, as `Cookie` sends it.
#[derive(Default)]
struct Jar(HashMap<String, String>);

impl Jar {
    fn keep(&mut self, r: &reqwest::Response) {
        for v in r.headers().get_all("set-cookie") {
            if let Some((k, v)) = v.to_str().ok().and_then(|v| v.split(';').next()).and_then(|kv| kv.split_once('=')) {
                self.0.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    fn header(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }
}

/// One fan of room `room`: joins after `delay`, polls as told until admitted (the seconds since
/// `t0`), holds a ticket, then stays on the site until `stop`.
#[allow(clippy::too_many_arguments)] // one fan's whole day: each argument is a part of it
async fn fan(
    http: reqwest::Client,
    base: String,
    room: String,
    i: usize,
    delay: Duration,
    t0: Instant,
    held: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> Option<f64> {
    tokio::time::sleep(delay).await;
    let user = format!("{room}-fan-{i}");
    // Each fan speaks from an address of its own (the edge trusts the bench as a proxy).
    let ip = format!("10.{}.{}.{}", i / 65_536 % 256, i / 256 % 256, i % 256);
    let mut jar = Jar::default();
    let mut url = format!("{base}/queue/{room}/join");
    let mut post = true;
    let deadline = t0 + GIVE_UP;
    let (token, admitted_at) = loop {
        if Instant::now() > deadline || stop.load(Ordering::Relaxed) {
            return None;
        }
        let rb = if post { http.post(&url).json(&json!({})) } else { http.get(&url) };
        let r = rb
            .header("Accept", "application/json")
            .header("X-User-Id", &user)
            .header("X-Forwarded-For", &ip)
            .header("User-Agent", "Mozilla/5.0 bench")
            .header("Accept-Language", "en")
            .header("Cookie", jar.header())
            .send()
            .await;
        let v: Value = match r {
            Ok(r) => {
                jar.keep(&r);
                r.json().await.unwrap_or(Value::Null)
            }
            Err(_) => Value::Null,
        };
        if v["state"] == "admitted"
            && let Some(t) = v["token"].as_str()
        {
            break (t.to_owned(), t0.elapsed().as_secs_f64());
        }
        post = false;
        url = format!("{base}/queue/{room}/status");
        let wait = v["poll_after_ms"].as_u64().unwrap_or(1000).clamp(200, 30_000);
        tokio::time::sleep(Duration::from_millis(wait)).await;
    };
    let r = http
        .post(format!("{base}/v1/events/ev-{room}/holds"))
        .bearer_auth(&token)
        .header("X-User-Id", &user)
        .header("X-Forwarded-For", &ip)
        .json(&json!({"sku": "ga", "qty": 1, "idempotency_key": format!("{user}-1"), "identity": {"phone": format!("p-{user}")}}))
        .send()
        .await;
    if r.is_ok_and(|r| r.status().as_u16() == 201) {
        held.fetch_add(1, Ordering::Relaxed);
    }
    // On the site: a protected page every 5 s keeps the session in use.
    let http2 = http.clone();
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let _ = http2
                .get(format!("{base}/buy/ev-{room}"))
                .header("X-User-Id", &user)
                .header("X-Forwarded-For", &ip)
                .header("Cookie", jar.header())
                .send()
                .await;
        }
    });
    Some(admitted_at)
}

/// Runs one sale to its end (everyone admitted, or [`GIVE_UP`]).
async fn sale(stack: &Stack, http: &reqwest::Client, room: &str, fans: usize, stop: &Arc<AtomicBool>) -> anyhow::Result<Sale> {
    let t0 = Instant::now();
    let held = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..fans)
        .map(|i| {
            // Joins spread over 2 s, the same for every run.
            let delay = Duration::from_millis((i as u64 * 7919) % 2000);
            tokio::spawn(fan(http.clone(), stack.base.clone(), room.to_owned(), i, delay, t0, held.clone(), stop.clone()))
        })
        .collect();
    let mut times = Vec::new();
    for t in tasks {
        if let Some(s) = t.await? {
            times.push(s);
        }
    }
    let stats: Value = http
        .get(format!("{}/admin/rooms/{room}/stats", stack.admin))
        .bearer_auth(ADMIN)
        .send()
        .await?
        .json()
        .await
        .unwrap_or(Value::Null);
    times.sort_by(f64::total_cmp);
    Ok(Sale {
        admitted_at: times.clone(),
        room: room.to_owned(),
        fans,
        admitted: times.len(),
        held: held.load(Ordering::Relaxed),
        last_admitted_s: (times.len() == fans).then(|| times.iter().cloned().fold(0.0, f64::max)),
        decision: stats["decision"].clone(),
    })
}

pub async fn run(fans: usize) -> anyhow::Result<RoomsReport> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(64).timeout(Duration::from_secs(10)).build()?;

    // One after another: sale A, then room b made through the admin API, sale B.
    let stop = Arc::new(AtomicBool::new(false));
    let stack = start(&["a"]).await?;
    let a = sale(&stack, &http, "a", fans, &stop).await?;
    let body = json!({
        "event": "ev-b", "target": "/buy/ev-b", "protected": ["/buy/ev-b"], "session_seconds": 300,
        "release": {"mode": "auto", "start": 2, "min": 1, "max": 2000, "p99_target_ms": 100},
    });
    let r = http.put(format!("{}/admin/rooms/b", stack.admin)).bearer_auth(ADMIN).json(&body).send().await?;
    anyhow::ensure!(r.status().is_success(), "creating room b: {} {}", r.status(), r.text().await.unwrap_or_default());
    let b = sale(&stack, &http, "b", fans, &stop).await?;
    stop.store(true, Ordering::Relaxed);
    drop(stack);

    // At once: both rooms from the start, both sales together.
    let stop = Arc::new(AtomicBool::new(false));
    let stack = start(&["a", "b"]).await?;
    let (a2, b2) = tokio::join!(sale(&stack, &http, "a", fans, &stop), sale(&stack, &http, "b", fans, &stop));
    stop.store(true, Ordering::Relaxed);
    drop(stack);
    Ok(RoomsReport { fans_per_sale: fans, one_after_another: vec![a, b], at_once: vec![a2?, b2?] })
}

/// One sale with the core stopped mid-way (`--stop-core-at`, issue #39).
#[derive(Debug, Clone, Serialize)]
pub struct CoreStopped {
    pub sale: Sale,
    /// When the core was stopped (seconds from the sale's first join) and for how long.
    pub stop_at_s: f64,
    pub stop_for_s: f64,
    /// Longest time without an admission while fans waited: between two admissions, or from the
    /// first join to the first admission, seconds.
    pub longest_gap_s: f64,
    /// Longest run of the room's decisions (read once a second) in `cool_down` with the pressure
    /// under target while fans were queued, seconds: the release kept back with the core idle.
    pub longest_idle_cool_down_s: f64,
    /// Admissions in each second from the first join.
    pub admissions_per_second: Vec<usize>,
    /// The room's decision once a second: `[t, reason, pressure, rate, budget, occupancy, queued]`.
    pub decisions: Vec<Value>,
}

impl CoreStopped {
    pub fn ok(&self) -> bool {
        self.sale.ok() && self.longest_gap_s <= STALL_GOAL_SECONDS && self.longest_idle_cool_down_s <= STALL_GOAL_SECONDS
    }

    pub fn table(&self) -> String {
        let s = &self.sale;
        format!(
            "| room | fans | admitted | core stopped | last admitted (s) | longest gap (s) | idle cool-down (s) | goal |\n|---|---|---|---|---|---|---|---|\n\
             | {} | {} | {} | {:.1} s at {:.1} s | {} | {:.1} | {:.0} | {} |\n",
            s.room,
            s.fans,
            s.admitted,
            self.stop_for_s,
            self.stop_at_s,
            s.last_admitted_s.map_or("—".into(), |v| format!("{v:.1}")),
            self.longest_gap_s,
            self.longest_idle_cool_down_s,
            if self.ok() { "yes" } else { "no" }
        )
    }
}

/// One sale of `fans` in a cautious room, the core process stopped (SIGSTOP) `stop_at` seconds
/// after the first join and continued (SIGCONT) `stop_for` seconds later.
pub async fn run_core_stopped(fans: usize, stop_at: f64, stop_for: f64) -> anyhow::Result<CoreStopped> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(64).timeout(Duration::from_secs(10)).build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stack = start(&["a"]).await?;
    let pid = stack.core.id().to_string();
    let signal = move |sig: &str| Command::new("kill").args([sig, pid.as_str()]).status().map(|s| s.success()).unwrap_or(false);
    let t0 = Instant::now();
    // The room's decisions, once a second, while the sale runs.
    let watch = {
        let (http, admin, stop) = (http.clone(), stack.admin.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let stats: Value = match http.get(format!("{admin}/admin/rooms/a/stats")).bearer_auth(ADMIN).send().await {
                    Ok(r) => r.json().await.unwrap_or(Value::Null),
                    Err(_) => Value::Null,
                };
                let d = &stats["decision"];
                seen.push(json!([
                    (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                    d["reason"], d["pressure"], d["rate"], d["budget"], d["occupancy"], stats["queued"]
                ]));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            seen
        })
    };
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs_f64(stop_at)).await;
        let stopped = signal("-STOP");
        tokio::time::sleep(Duration::from_secs_f64(stop_for)).await;
        signal("-CONT") && stopped
    });
    let sale = sale(&stack, &http, "a", fans, &stop).await?;
    stop.store(true, Ordering::Relaxed);
    let stopped = stopper.await?;
    let decisions = watch.await?;
    drop(stack);
    anyhow::ensure!(stopped, "the core was not stopped and continued (kill -STOP / -CONT)");

    let end = sale.admitted_at.last().copied().unwrap_or(GIVE_UP.as_secs_f64());
    let mut longest_gap_s = sale.admitted_at.first().copied().unwrap_or(end);
    for w in sale.admitted_at.windows(2) {
        longest_gap_s = longest_gap_s.max(w[1] - w[0]);
    }
    let mut admissions_per_second = vec![0; end as usize + 1];
    for t in &sale.admitted_at {
        admissions_per_second[*t as usize] += 1;
    }
    // Ticks in cool-down with the core under target while people were queued, in a row.
    let (mut run, mut longest) = (0.0f64, 0.0f64);
    for d in &decisions {
        let idle = d[1] == "cool_down" && d[2].as_f64().is_some_and(|x| x <= 1.0) && d[6].as_u64().is_some_and(|q| q > 0);
        run = if idle { run + 1.0 } else { 0.0 };
        longest = longest.max(run);
    }
    Ok(CoreStopped {
        sale,
        stop_at_s: stop_at,
        stop_for_s: stop_for,
        longest_gap_s: (longest_gap_s * 10.0).round() / 10.0,
        longest_idle_cool_down_s: longest,
        admissions_per_second,
        decisions,
    })
}
