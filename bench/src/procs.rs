//! The processes of a surge run: the real `wicket-core` and `wicket` binaries (release builds next to this
//! one), a stand-in origin, and an optional capacity shaper between the edge and the core (a reverse proxy
//! with K concurrent slots and a fixed service time, so "half the core's capacity" is a real, known step).
//!
//! With `crashes` the stack is the production shape: a redis-server with AOF (`appendfsync always`) holding
//! both the sale (the core's `store`) and the room state of two edges that share one queue, a stand-in
//! payment provider whose status query the core asks after a restart, and every process restartable on its
//! own ports and data ([`Stack::kill`], [`Stack::restart`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wicket_testkit::core_toml::CoreToml;
use wicket_testkit::free_port;

pub const ADMIN: &str = "bench-admin-token-0123456789";
pub(crate) const CALLBACK: &str = "bench-callback-secret-0123456789";
pub(crate) const HS: &str = "bench-hs256-secret-0123456789abcdef";
pub const EVENT: &str = "ev";
pub const ROOM: &str = "ev";
/// Proof-of-work difficulty of the bench's room (bits): ~4,000 hashes a join, ~1-2 ms of a core.
const POW_DIFFICULTY: u8 = 12;

type SolveJob = (String, u32, tokio::sync::oneshot::Sender<String>);

/// The fans' solver: one thread at the lowest CPU priority, solving in arrival order. A fan's
/// proof-of-work runs on the fan's own device; here every fan shares this box's two cores with the
/// edge and the core, so solving takes only what they leave (it would otherwise take both cores
/// during the ramp, ~7 cores' worth of hashing at 5,000 joins/s).
static SOLVER: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<SolveJob>>> = std::sync::OnceLock::new();

async fn solve_in_background(challenge: String, difficulty: u32) -> anyhow::Result<String> {
    let tx = SOLVER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<SolveJob>();
        std::thread::spawn(move || {
            // This thread (a task of its own on Linux) at nice 19.
            if let Some(tid) = std::fs::read_link("/proc/thread-self").ok().and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned())) {
                let _ = Command::new("renice").args(["-n", "19", "-p", &tid]).stdout(Stdio::null()).stderr(Stdio::null()).status();
            }
            for (challenge, difficulty, done) in rx {
                let _ = done.send(solve_pow(&challenge, difficulty));
            }
        });
        std::sync::Mutex::new(tx)
    });
    let (done, answer) = tokio::sync::oneshot::channel();
    tx.lock().map_err(|_| anyhow::anyhow!("solver gone"))?.send((challenge, difficulty, done))?;
    Ok(answer.await?)
}

/// Finds a decimal nonce whose `sha256(challenge ‖ nonce)` starts with `difficulty` zero bits.
pub fn solve_pow(challenge: &str, difficulty: u32) -> String {
    use sha2::{Digest, Sha256};
    for n in 0u64.. {
        let nonce = n.to_string();
        let h = Sha256::new().chain_update(challenge.as_bytes()).chain_update(nonce.as_bytes()).finalize();
        let mut zeros = 0;
        for b in h.iter() {
            if *b == 0 {
                zeros += 8;
                continue;
            }
            zeros += b.leading_zeros();
            break;
        }
        if zeros >= difficulty {
            return nonce;
        }
    }
    unreachable!("u64 nonces do not run out before a solution")
}

/// What the stack is built for.
pub struct StackOptions {
    pub seats: u32,
    pub combo_seats: u32,
    pub named_seats: u32,
    pub random: bool,
    pub p99_target_ms: u64,
    pub pow: bool,
    pub hold_seconds: u32,
    pub shaper: bool,
    pub release_max: u32,
    /// The crash test's stack: Redis (AOF always) for the sale and the room, two edges, a payment
    /// provider with a status query.
    pub crashes: bool,
    /// The megasale's stack (issue #27): the room's state on this Redis Cluster (seed URLs), shared by
    /// `edges` edges; the core on its own embedded store, so the cluster carries the room alone.
    pub room_cluster: Option<Vec<String>>,
    /// Edges sharing the room with `room_cluster` (1 otherwise, 2 with `crashes`).
    pub edges: usize,
    /// The room's layout on the cluster: `None` or `single` (the default: every key in one slot), `spread`.
    pub layout: Option<String>,
    /// With `layout = "spread"`: (shards, block, block-ms, flush-ms) of `[rooms.spread]`.
    pub spread: (u32, u32, u32, u32),
    /// The queue's per-address budget of edge/examples/wicket.toml (`[[edge.limits]]` on `/queue/`
    /// by `ip`, 5 r/s, burst 10, nodelay): the bots scenarios run the edge as the example does.
    pub queue_ip_limit: bool,
}

/// A process of the stack that can be SIGKILLed and started again with the same command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proc {
    Core,
    Edge(usize),
    Redis,
}

impl std::fmt::Display for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proc::Core => write!(f, "core"),
            Proc::Edge(i) => write!(f, "edge {i}"),
            Proc::Redis => write!(f, "redis-server"),
        }
    }
}

/// One edge: its ports and config file.
pub struct EdgeProc {
    pub base: String,
    pub admin: String,
    cfg: PathBuf,
    child: parking_lot::Mutex<Option<Child>>,
}

/// The crash stack's redis-server: port and AOF folder.
struct RedisProc {
    port: u16,
    dir: PathBuf,
    child: parking_lot::Mutex<Option<Child>>,
}

/// The stand-in payment provider: what it took money for (order → txn, amount), answered to the
/// core's status query (`GET /query?order_id=...`, docs/src/api.md "Payment status query").
#[derive(Default)]
pub struct Provider {
    pub paid: parking_lot::Mutex<HashMap<String, (String, u64)>>,
}

/// Running core, edge, origin (and shaper); everything is stopped on drop.
pub struct Stack {
    core: parking_lot::Mutex<Option<Child>>,
    core_cfg: PathBuf,
    pub edges: Vec<EdgeProc>,
    redis: Option<RedisProc>,
    pub provider: Arc<Provider>,
    pub core_base: String,
    shaper: Option<Arc<Shaper>>,
    /// The room asks for a proof-of-work before a join.
    pow: bool,
    /// The edges' `RUST_LOG` (megasale: `error`, or every edge warns at each try while a master fails over).
    edge_log: &'static str,
    _dir: tempfile::TempDir,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let mut all: Vec<&parking_lot::Mutex<Option<Child>>> = self.edges.iter().map(|e| &e.child).collect();
        all.push(&self.core);
        if let Some(r) = &self.redis {
            all.push(&r.child);
        }
        for c in all {
            if let Some(mut c) = c.lock().take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// A binary of the workspace next to this one (build them with `cargo build --release --workspace`).
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let p = std::env::current_exe()?.with_file_name(name);
    anyhow::ensure!(p.is_file(), "{} not found: run `cargo build --release --workspace` first", p.display());
    Ok(p)
}

/// Waits (≤ 30 s) until `url` answers successfully.
pub async fn wait_http(url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if http.get(url).send().await.is_ok() {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{url} did not answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

impl Stack {
    pub async fn start(o: StackOptions) -> anyhow::Result<Stack> {
        let dir = tempfile::tempdir()?;
        let core_port = free_port();
        let origin = start_origin().await?;
        let shaper = if o.shaper { Some(Shaper::start(core_port, 32, Duration::from_millis(10)).await?) } else { None };
        let core_url = match &shaper {
            Some(s) => format!("http://{}", s.addr),
            None => format!("http://127.0.0.1:{core_port}"),
        };
        let provider = Arc::new(Provider::default());
        let redis = if o.crashes {
            let r = RedisProc { port: free_port(), dir: dir.path().join("redis"), child: parking_lot::Mutex::new(None) };
            std::fs::create_dir_all(&r.dir)?;
            Some(r)
        } else {
            None
        };
        let now = time::OffsetDateTime::now_utc();
        let mut pools = vec![json!({"id": "main", "capacity": o.seats})];
        let mut skus = vec![json!({"id": "ga", "pools": ["main"], "price_cents": 990})];
        if o.combo_seats > 0 {
            pools.push(json!({"id": "combo", "capacity": o.combo_seats}));
            skus.push(json!({"id": "combo", "pools": ["main", "combo"], "price_cents": 1490}));
        }
        if o.named_seats > 0 {
            pools.push(json!({"id": "seated", "seats": (1..=o.named_seats).map(|i| format!("S-{i}")).collect::<Vec<_>>()}));
            skus.push(json!({"id": "seat", "pools": ["seated"], "price_cents": 6800}));
        }
        let event = json!({
            "name": "bench sale",
            "opens_at": rfc3339(now - time::Duration::minutes(1)),
            "closes_at": rfc3339(now + time::Duration::hours(2)),
            "hold_seconds": o.hold_seconds,
            "pools": pools, "skus": skus,
            "limits": [{"dimension": "user", "max": 2}],
        });
        std::fs::write(dir.path().join(format!("{EVENT}.json")), event.to_string())?;
        // The crash stack: sale and room state in one Redis (AOF always), the provider's status query.
        let (store, payment_query) = match &redis {
            Some(r) => {
                let q = start_provider(provider.clone()).await?;
                (format!("redis://127.0.0.1:{}/0", r.port), format!("query-url = \"http://{q}/query\"\n"))
            }
            None => ("embedded".to_string(), String::new()),
        };
        let data_dir = if redis.is_some() { "" } else { "data-dir = \"core-data\"\n" };
        // Megasale: the edges keep the room on the cluster; the core's own file keeps its embedded store.
        let edge_store = match &o.room_cluster {
            Some(seeds) => format!("store = {{ cluster = [{}] }}", seeds.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ")),
            None => format!("store = \"{store}\""),
        };
        let (layout_key, layout_table) = match o.layout.as_deref() {
            Some("spread") => (
                "layout = \"spread\"\n",
                format!(
                    "[rooms.spread]\nshards = {}\nblock = {}\nblock-ms = {}\nflush-ms = {}\n",
                    o.spread.0, o.spread.1, o.spread.2, o.spread.3
                ),
            ),
            _ => ("", String::new()),
        };
        let config = |edge_port: u16, admin_port: u16, store_line: &str| {
            let core = CoreToml::new(ADMIN, CALLBACK, HS)
                .listen(core_port)
                .top(store_line)
                .top(data_dir)
                .top(&format!("event-files = [\"{EVENT}.json\"]"))
                .payment(&payment_query)
                .core("sweeper-period-ms = 500")
                .core("max-inflight = 256")
                .build();
            format!(
                r#"{core}
[edge]
listen = "127.0.0.1:{edge_port}"
admin-listen = "127.0.0.1:{admin_port}"
threads = 2
origin = "http://{origin}"
core = "{core_url}"
user-header = "X-User-Id"
trusted-proxies = ["127.0.0.1/32"]
secret = "bench-edge-secret-0123456789abcdef"
shutdown-grace-seconds = 1

{limits}[edge.anomaly]
device-max-users = 3

[edge.bot.pow]
difficulty = {difficulty}

[[rooms]]
id = "{ROOM}"
event = "{EVENT}"
target = "/buy/{EVENT}"
protected = ["/buy/{EVENT}"]
method = "{method}"
total-active-max = 100000
session-seconds = 120
token-seconds = 120
max-qty = 2
bot-check = "{bot}"
{layout_key}[rooms.schedule]
prequeue-at = "{pre}"
opens-at = "{opens}"
closes-at = "{closes}"
[rooms.release]
mode = "auto"
start = 200
min = 20
max = {max}
p99-target-ms = {p99}
{layout_table}"#,
                method = if o.random { "random" } else { "fifo" },
                bot = if o.pow { "pow" } else { "off" },
                pre = rfc3339(now - time::Duration::seconds(5)),
                opens = rfc3339(now + time::Duration::seconds(3)),
                closes = rfc3339(now + time::Duration::hours(2)),
                max = o.release_max,
                difficulty = POW_DIFFICULTY,
                limits = if o.queue_ip_limit {
                    "[[edge.limits]]\npath = \"/queue/\"\nkey = \"ip\"\nrate = \"5r/s\"\nburst = 10\nnodelay = true\n\n"
                } else {
                    ""
                },
                p99 = o.p99_target_ms,
            )
        };
        let n_edges = if o.room_cluster.is_some() { o.edges.max(1) } else if o.crashes { 2 } else { 1 };
        let mut edges = Vec::new();
        for i in 0..n_edges {
            let (edge_port, admin_port) = (free_port(), free_port());
            let cfg = dir.path().join(format!("wicket-{i}.toml"));
            std::fs::write(&cfg, config(edge_port, admin_port, &edge_store))?;
            edges.push(EdgeProc {
                base: format!("http://127.0.0.1:{edge_port}"),
                admin: format!("http://127.0.0.1:{admin_port}"),
                cfg,
                child: parking_lot::Mutex::new(None),
            });
        }
        let core_cfg = if o.room_cluster.is_some() {
            // The core reads its own file (embedded store); its [edge] and [[rooms]] are not its own.
            let cfg = dir.path().join("core.toml");
            std::fs::write(&cfg, config(free_port(), free_port(), &format!("store = \"{store}\"")))?;
            cfg
        } else {
            edges[0].cfg.clone()
        };
        let stack = Stack {
            core: parking_lot::Mutex::new(None),
            core_cfg,
            edges,
            redis,
            provider,
            core_base: format!("http://127.0.0.1:{core_port}"),
            shaper,
            pow: o.pow,
            edge_log: if o.room_cluster.is_some() { "error" } else { "warn" },
            _dir: dir,
        };
        if stack.redis.is_some() {
            stack.restart(Proc::Redis).await?;
        }
        stack.restart(Proc::Core).await?;
        for i in 0..stack.edges.len() {
            stack.restart(Proc::Edge(i)).await?;
        }
        Ok(stack)
    }

    /// SIGKILL (no goodbye: leases, connections and sockets are left as they are).
    pub fn kill(&self, p: Proc) {
        let slot = match p {
            Proc::Core => &self.core,
            Proc::Edge(i) => &self.edges[i].child,
            Proc::Redis => match &self.redis {
                Some(r) => &r.child,
                None => return,
            },
        };
        if let Some(mut c) = slot.lock().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts `p` (again) with its command, ports and data, and waits until it answers.
    pub async fn restart(&self, p: Proc) -> anyhow::Result<()> {
        match p {
            Proc::Redis => {
                let Some(r) = &self.redis else { return Ok(()) };
                let child = Command::new("redis-server")
                    .args(["--port", &r.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
                    .args(["--appendonly", "yes", "--appendfsync", "always"])
                    .arg("--dir")
                    .arg(&r.dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| anyhow::anyhow!("cannot run redis-server ({e}); install redis-server"))?;
                *r.child.lock() = Some(child);
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    // Answers PING (not LOADING): the AOF is read back.
                    if let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{}/0", r.port))
                        && let Ok(mut c) = client.get_multiplexed_async_connection().await
                        && redis::cmd("PING").query_async::<String>(&mut c).await.is_ok()
                    {
                        break;
                    }
                    anyhow::ensure!(Instant::now() < deadline, "redis-server did not start");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Proc::Core => {
                let child = Command::new(binary("wicket-core")?)
                    .args(["serve", "--config"])
                    .arg(&self.core_cfg)
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit())
                    .spawn()?;
                *self.core.lock() = Some(child);
                wait_http(&format!("{}/healthz", self.core_base)).await?;
            }
            Proc::Edge(i) => {
                let e = &self.edges[i];
                let child = Command::new(binary("wicket")?)
                    .args(["serve", "--config"])
                    .arg(&e.cfg)
                    .env("RUST_LOG", std::env::var("WICKET_BENCH_EDGE_LOG").unwrap_or_else(|_| self.edge_log.to_string()))
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit())
                    .spawn()?;
                *e.child.lock() = Some(child);
                wait_http(&format!("{}/admin/health", e.admin)).await?;
            }
        }
        Ok(())
    }

    /// The edge that holds the room's leader lease now (its admin stats say `leader`).
    pub async fn leader_edge(&self, http: &reqwest::Client) -> Option<usize> {
        for (i, e) in self.edges.iter().enumerate() {
            let r = http.get(format!("{}/admin/rooms/{ROOM}/stats", e.admin)).bearer_auth(ADMIN).timeout(Duration::from_secs(2)).send().await;
            if let Ok(r) = r
                && let Ok(v) = r.json::<Value>().await
                && v["leader"] == true
            {
                return Some(i);
            }
        }
        None
    }

    /// The headers a visitor's browser (or script) sends with every request: who, from where, and cookies.
    fn visitor(rb: reqwest::RequestBuilder, user: &str, ip: &str, bot: bool, cookies: &str) -> reqwest::RequestBuilder {
        let rb = rb
            .header("X-User-Id", user)
            .header("X-Forwarded-For", ip)
            .header("User-Agent", if bot { "bot/1.0" } else { "Mozilla/5.0 bench" });
        if cookies.is_empty() { rb } else { rb.header("Cookie", cookies) }
    }

    pub async fn join(&self, http: &reqwest::Client, edge: usize, user: &str, ip: &str, bot: bool, cookies: &str) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Value)> {
        let rb = Self::visitor(
            http.post(format!("{}/queue/{ROOM}/join", self.edges[edge].base)).header("Accept", "application/json"),
            user,
            ip,
            bot,
            cookies,
        );
        if !self.pow {
            let r = rb.json(&json!({})).send().await?;
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            return Ok((status, headers, r.json().await.unwrap_or(Value::Null)));
        }
        // As static/queue.js does: join first (the place is taken now, with the check owed; the
        // answer carries a challenge), solve it, then give the proof for that place. A fan whose
        // solving takes longer keeps the place of their arrival.
        let r = rb.json(&json!({})).send().await?;
        let status = r.status().as_u16();
        let first = r.headers().clone();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        let c = match &v["challenge"] {
            c if c.is_object() => c.clone(),
            // No challenge with the answer (an older edge, or a refusal): ask for one.
            _ if status == 403 || status == 200 => {
                Self::visitor(http.get(format!("{}/queue/{ROOM}/challenge", self.edges[edge].base)), user, ip, bot, cookies)
                    .send()
                    .await?
                    .json()
                    .await?
            }
            _ => return Ok((status, first, v)),
        };
        if status == 200 && v["proof_owed"].is_null() {
            return Ok((status, first, v));
        }
        let challenge = c["challenge"].as_str().unwrap_or_default().to_string();
        let difficulty = c["difficulty"].as_u64().unwrap_or(0) as u32;
        let nonce = solve_in_background(challenge.clone(), difficulty).await?;
        // The ticket the first answer set (bots drop it: their user id finds the place again).
        let mut jar = cookies.to_string();
        if !bot {
            for v in first.get_all(reqwest::header::SET_COOKIE) {
                let Some(pair) = v.to_str().ok().and_then(|v| v.split(';').next()) else { continue };
                let Some((name, _)) = pair.split_once('=') else { continue };
                let mut kept: Vec<&str> = jar.split("; ").filter(|c| !c.is_empty() && !c.starts_with(&format!("{name}="))).collect();
                kept.push(pair);
                jar = kept.join("; ");
            }
        }
        let rb = Self::visitor(
            http.post(format!("{}/queue/{ROOM}/join", self.edges[edge].base)).header("Accept", "application/json"),
            user,
            ip,
            bot,
            &jar,
        );
        let r = rb.json(&json!({"pow": {"challenge": challenge, "nonce": nonce}})).send().await?;
        let status = r.status().as_u16();
        let mut headers = reqwest::header::HeaderMap::new();
        for v in first.get_all(reqwest::header::SET_COOKIE) {
            headers.append(reqwest::header::SET_COOKIE, v.clone());
        }
        for (k, v) in r.headers() {
            headers.append(k.clone(), v.clone());
        }
        Ok((status, headers, r.json().await.unwrap_or(Value::Null)))
    }

    pub async fn status(&self, http: &reqwest::Client, edge: usize, user: &str, ip: &str, bot: bool, cookies: &str) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Value)> {
        let rb = Self::visitor(
            http.get(format!("{}/queue/{ROOM}/status", self.edges[edge].base)).header("Accept", "application/json"),
            user,
            ip,
            bot,
            cookies,
        );
        let r = rb.send().await?;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        Ok((status, headers, r.json().await.unwrap_or(Value::Null)))
    }

    /// A fan's event stream (`GET /queue/<room>/events`), its frames still to read.
    pub async fn events(&self, http: &reqwest::Client, edge: usize, user: &str, ip: &str, cookies: &str) -> anyhow::Result<reqwest::Response> {
        let rb = Self::visitor(
            http.get(format!("{}/queue/{ROOM}/events", self.edges[edge].base)).header("Accept", "text/event-stream"),
            user,
            ip,
            false,
            cookies,
        );
        Ok(rb.send().await?)
    }

    #[allow(clippy::too_many_arguments)] // one hold as a client sends it: each argument is a part of the request
    pub async fn hold(&self, http: &reqwest::Client, edge: usize, token: &str, sku: &str, qty: u32, user: &str, ip: &str, cookies: &str) -> anyhow::Result<(u16, Value)> {
        let mut rb = http
            .post(format!("{}/v1/events/{EVENT}/holds", self.edges[edge].base))
            .bearer_auth(token)
            .header("X-User-Id", user)
            .header("X-Forwarded-For", ip);
        if !cookies.is_empty() {
            rb = rb.header("Cookie", cookies);
        }
        let r = rb
            .json(&json!({"sku": sku, "qty": qty, "idempotency_key": format!("{user}-1"), "identity": {"phone": format!("p-{user}")}, "wait": true}))
            .send()
            .await?;
        let status = r.status().as_u16();
        Ok((status, r.json().await.unwrap_or(Value::Null)))
    }

    /// The visitor leaves through the site's "done" page, which ends the session (frees a slot).
    pub async fn leave(&self, http: &reqwest::Client, edge: usize, user: &str, ip: &str, cookies: &str) -> anyhow::Result<u16> {
        let mut rb = http
            .get(format!("{}/buy/{EVENT}/done", self.edges[edge].base))
            .header("X-User-Id", user)
            .header("X-Forwarded-For", ip)
            .header("Accept", "text/html");
        if !cookies.is_empty() {
            rb = rb.header("Cookie", cookies);
        }
        let r = rb.send().await?;
        let status = r.status().as_u16();
        let _ = r.bytes().await;
        Ok(status)
    }

    /// The provider's callback, straight to the core (providers don't queue).
    pub async fn pay(&self, http: &reqwest::Client, order: &str, amount: u64) -> anyhow::Result<u16> {
        let body = json!({"order_id": order, "txn_id": format!("txn-{order}"), "amount_cents": amount, "status": "SUCCESS"}).to_string();
        let t = time::OffsetDateTime::now_utc().unix_timestamp();
        let sig = wicket_core::payment::sign(body.as_bytes(), CALLBACK.as_bytes(), t);
        let r = http
            .post(format!("{}/v1/payments/callback", self.core_base))
            .header("Wicket-Signature", sig)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await?;
        Ok(r.status().as_u16())
    }

    /// The room's stats from the first edge that answers (the leader's when one leads).
    pub async fn room_stats(&self, http: &reqwest::Client) -> anyhow::Result<Value> {
        let mut first = None;
        for e in &self.edges {
            let r = http.get(format!("{}/admin/rooms/{ROOM}/stats", e.admin)).bearer_auth(ADMIN).timeout(Duration::from_secs(2)).send().await;
            if let Ok(r) = r
                && let Ok(v) = r.json::<Value>().await
            {
                if v["leader"] == true || self.edges.len() == 1 {
                    return Ok(v);
                }
                first.get_or_insert(v);
            }
        }
        first.ok_or_else(|| anyhow::anyhow!("no edge answered"))
    }

    /// The core's Prometheus text.
    pub async fn core_metrics(&self, http: &reqwest::Client) -> anyhow::Result<String> {
        Ok(http.get(format!("{}/metrics", self.core_base)).send().await?.text().await?)
    }

    pub async fn stock(&self, http: &reqwest::Client) -> anyhow::Result<Value> {
        Ok(http.get(format!("{}/v1/events/{EVENT}/stock", self.core_base)).send().await?.json().await?)
    }

    /// Every order's last state (from the outbox, then each live order in full), and the stock.
    pub async fn read_back(&self, http: &reqwest::Client) -> anyhow::Result<(Vec<Value>, Value)> {
        let mut last: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
        let mut cursor = "0".to_string();
        loop {
            let page: Value = http
                .get(format!("{}/v1/events/{EVENT}/outbox?after={cursor}&limit=1000", self.core_base))
                .bearer_auth(ADMIN)
                .send()
                .await?
                .json()
                .await?;
            let entries = page["entries"].as_array().cloned().unwrap_or_default();
            if entries.is_empty() {
                break;
            }
            for e in entries {
                if e["kind"] != "refund_required" {
                    last.insert(e["order_id"].as_str().unwrap_or_default().to_string(), e);
                }
            }
            cursor = page["cursor"].as_str().unwrap_or("0").to_string();
        }
        let mut orders = Vec::new();
        for (id, e) in last {
            if matches!(e["state"].as_str(), Some("CREATED" | "PAID" | "USED")) {
                let o: Value = http.get(format!("{}/v1/orders/{id}", self.core_base)).bearer_auth(ADMIN).send().await?.json().await?;
                orders.push(o);
            }
        }
        Ok((orders, self.stock(http).await?))
    }

    pub fn set_core_capacity(&self, fraction: f64) {
        if let Some(s) = &self.shaper {
            s.set_fraction(fraction);
        }
    }

    /// Peak resident set of the edge process (VmHWM), MB.
    pub fn edge_peak_rss_mb(&self) -> f64 {
        let Some(pid) = self.edges[0].child.lock().as_ref().map(Child::id) else { return 0.0 };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(0.0)
    }
}

/// The provider's status query: `SUCCESS` with the txn and amount for an order it took money for,
/// `NOTPAY` otherwise.
async fn start_provider(provider: Arc<Provider>) -> anyhow::Result<SocketAddr> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = l.accept().await else { continue };
            let provider = provider.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let provider = provider.clone();
                    async move {
                        // The id is percent-encoded in the query.
                        let order = reqwest::Url::parse(&format!("http://provider{}", req.uri()))
                            .ok()
                            .and_then(|u| u.query_pairs().find(|(k, _)| k == "order_id").map(|(_, v)| v.into_owned()))
                            .unwrap_or_default();
                        let paid = provider.paid.lock().get(&order).cloned();
                        let v = match paid {
                            Some((txn, amount)) => json!({"order_id": order, "status": "SUCCESS", "txn_id": txn, "amount_cents": amount}),
                            None => json!({"order_id": order, "status": "NOTPAY"}),
                        };
                        let mut out = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(v.to_string())));
                        out.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
                        Ok::<_, std::convert::Infallible>(out)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok(addr)
}

/// A stand-in for the existing site: answers every path with a small page; `/done` pages (the end of a
/// purchase) also end the visitor's session with `Wicket-Revoke: 1`, as a site does after checkout.
pub(crate) async fn start_origin() -> anyhow::Result<SocketAddr> {
    let body = "<!doctype html><title>buy</title><p>the site's buy page</p>";
    let page = Arc::new(format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\r\n{body}", body.len()));
    let done = Arc::new(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\nwicket-revoke: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else { continue };
            let (page, done) = (page.clone(), done.clone());
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            let first = buf[..n].split(|b| *b == b'\n').next().unwrap_or_default();
                            let answer = if first.windows(5).any(|w| w == b"/done") { &done } else { &page };
                            if s.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// A reverse proxy with `slots` concurrent requests, each taking at least `service` — a core of known
/// capacity `slots / service`, which `set_fraction` scales at run time.
pub struct Shaper {
    pub addr: SocketAddr,
    sem: Arc<tokio::sync::Semaphore>,
    slots: usize,
    active: AtomicUsize,
}

impl Shaper {
    async fn start(core_port: u16, slots: usize, service: Duration) -> anyhow::Result<Arc<Shaper>> {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = l.local_addr()?;
        let shaper = Arc::new(Shaper { addr, sem: Arc::new(tokio::sync::Semaphore::new(slots)), slots, active: AtomicUsize::new(slots) });
        let sh = shaper.clone();
        let client = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = l.accept().await else { continue };
                let (sh, client) = (sh.clone(), client.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (sh, client) = (sh.clone(), client.clone());
                        async move {
                            use http_body_util::BodyExt;
                            let _permit = sh.sem.clone().acquire_owned().await;
                            let started = Instant::now();
                            let (parts, body) = req.into_parts();
                            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let url = format!("http://127.0.0.1:{core_port}{}", parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
                            let mut rb = client.request(parts.method.clone(), url).body(bytes);
                            for (k, v) in parts.headers.iter() {
                                if k != hyper::header::HOST && k != hyper::header::CONTENT_LENGTH {
                                    rb = rb.header(k, v);
                                }
                            }
                            let resp = rb.send().await;
                            let left = service.saturating_sub(started.elapsed());
                            tokio::time::sleep(left).await;
                            let out = match resp {
                                Ok(r) => {
                                    let status = r.status();
                                    let ct = r.headers().get("content-type").cloned();
                                    let b = r.bytes().await.unwrap_or_default();
                                    let mut out = hyper::Response::new(http_body_util::Full::new(b));
                                    *out.status_mut() = status;
                                    if let Some(ct) = ct {
                                        out.headers_mut().insert("content-type", ct);
                                    }
                                    out
                                }
                                Err(_) => {
                                    let mut out = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")));
                                    *out.status_mut() = hyper::StatusCode::BAD_GATEWAY;
                                    out
                                }
                            };
                            Ok::<_, std::convert::Infallible>(out)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(shaper)
    }

    fn set_fraction(&self, f: f64) {
        let want = ((self.slots as f64 * f).round() as usize).max(1);
        let have = self.active.swap(want, Ordering::SeqCst);
        if want > have {
            self.sem.add_permits(want - have);
        } else if have > want {
            // Only free permits can be forgotten now; under load most are in use, so the rest are
            // taken as they come free (else the drop would take effect late or only in part).
            let n = have - want;
            let rest = n - self.sem.forget_permits(n);
            if rest > 0 {
                let sem = self.sem.clone();
                tokio::spawn(async move {
                    if let Ok(p) = sem.acquire_many_owned(rest as u32).await {
                        p.forget();
                    }
                });
            }
        }
    }
}
