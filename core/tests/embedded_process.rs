//! The durable embedded store in the real `wicket-core` binary:
//!
//! - a crash loop: concurrent holds, payments, cancels and replays over HTTP, SIGKILL at a random moment,
//!   restart on the same data dir; after each restart every acknowledged order is there in its acknowledged
//!   state (or a later one), no order is lost or duplicated, stock = capacity − held − sold, and the
//!   reconciliation passes. 5 rounds here; `WICKET_CRASH_LOOPS=20` for the long run.
//! - a disk that fills up (the core's test hook `WICKET_TEST_DISK_FREE_BYTES`): new holds get 503
//!   `store_read_only`, reads, payments and cancels are served, and nothing acknowledged is lost.
//! - two processes on one data dir: the second refuses to start, naming the dir.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::core_server::{ADMIN, CALLBACK_SECRET, HS_SECRET};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::{Value, json};
use wicket_core::token::Keyring;
use wicket_testkit::core_toml::CoreToml;
use wicket_testkit::{Spawned, free_port};

const CAPACITY: u64 = 100_000;

fn config(port: u16, data: &Path, extra: &str) -> String {
    CoreToml::new(ADMIN, CALLBACK_SECRET, HS_SECRET)
        .listen(port)
        .store("embedded")
        .data_dir(&data.display().to_string())
        .top("snapshot-every-mb = 1")
        .top(r#"event-files = ["ev.json"]"#)
        .top(extra)
        .core("sweeper-period-ms = 200")
        .core("reconciler-period-seconds = 1")
        .build()
}

/// A temp dir with the event file; the data dir inside it.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let now = time::OffsetDateTime::now_utc();
    let fmt = &time::format_description::well_known::Rfc3339;
    let event = json!({
        "name": "crash loop",
        "opens_at": (now - time::Duration::hours(1)).format(fmt).unwrap(),
        "closes_at": (now + time::Duration::days(1)).format(fmt).unwrap(),
        "hold_seconds": 900,
        "pools": [{"id": "park", "capacity": CAPACITY}],
        "skus": [{"id": "park", "pools": ["park"], "price_cents": 100}],
    });
    std::fs::write(dir.path().join("ev.json"), event.to_string()).unwrap();
    let data = dir.path().join("data");
    (dir, data)
}

fn keyring() -> Keyring {
    let text = config(1, Path::new("/tmp/unused"), "");
    let cfg: wicket_core::config::CoreConfig = toml::from_str(&text).unwrap();
    Keyring::from_config(&cfg.tokens).unwrap()
}

/// A running `wicket-core serve`.
struct Core {
    process: Spawned,
    base: String,
}

impl Core {
    /// Starts the binary on `dir`'s config; waits until it serves and its start-up re-check is done.
    async fn start(dir: &Path, data: &Path, extra: &str, env: &[(&str, String)]) -> Core {
        let port = free_port();
        let cfg = dir.join("core.toml");
        std::fs::write(&cfg, config(port, data, extra)).unwrap();
        let log = dir.join(format!("core-{port}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_wicket-core"));
        cmd.args(["serve", "--config"]).arg(&cfg).env("RUST_LOG", "info").stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut process = Spawned::spawn(&mut cmd, &log, "wicket-core");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = process.exited() {
                panic!("wicket-core exited ({status}): {}", process.log_text());
            }
            if let Ok(r) = http.get(format!("{base}/healthz")).send().await
                && let Ok(v) = r.json::<Value>().await
                && v["rechecking"] == false
            {
                break;
            }
            assert!(Instant::now() < deadline, "wicket-core did not start: {}", process.log_text());
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        Core { process, base }
    }

    fn kill9(&mut self) {
        self.process.kill9();
    }

    fn log(&self) -> String {
        self.process.log_text()
    }
}

/// What the client was told about one order.
#[derive(Debug, Clone)]
struct Acked {
    user: String,
    body: Value,
    /// `CREATED`, `PAID` or `CLOSED`.
    state: &'static str,
    qty: u64,
}

fn later_or_same(acked: &str, now: &str) -> bool {
    match acked {
        "CREATED" => ["CREATED", "PAID", "CLOSED"].contains(&now),
        other => other == now,
    }
}

struct Client {
    http: reqwest::Client,
    keys: Arc<Keyring>,
    base: String,
}

impl Client {
    fn token(&self, sub: &str) -> String {
        self.keys.sign(&self.keys.new_claims("ev", sub, "room", 0, 4, 300), None).unwrap()
    }

    async fn hold(&self, user: &str, body: &Value) -> Option<(u16, Value)> {
        let r = self.http.post(format!("{}/v1/events/ev/holds", self.base)).bearer_auth(self.token(user)).json(body).send().await.ok()?;
        let s = r.status().as_u16();
        Some((s, r.json().await.ok()?))
    }

    async fn pay(&self, order: &str, amount: u64) -> Option<(u16, Value)> {
        let body = json!({"order_id": order, "txn_id": format!("txn-{order}"), "amount_cents": amount, "status": "SUCCESS"}).to_string();
        let t = time::OffsetDateTime::now_utc().unix_timestamp();
        let sig = wicket_core::payment::sign(body.as_bytes(), CALLBACK_SECRET.as_bytes(), t);
        let r = self
            .http
            .post(format!("{}/v1/payments/callback", self.base))
            .header("Wicket-Signature", sig)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .ok()?;
        let s = r.status().as_u16();
        Some((s, r.json().await.ok()?))
    }

    async fn cancel(&self, order: &str, user: &str) -> Option<(u16, Value)> {
        let r = self.http.post(format!("{}/v1/orders/{order}/cancel", self.base)).bearer_auth(self.token(user)).send().await.ok()?;
        let s = r.status().as_u16();
        Some((s, r.json().await.ok()?))
    }

    async fn admin(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(format!("{}{path}", self.base)).bearer_auth(ADMIN).send().await.unwrap();
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }
}

/// One client's loop until `stop` (or the core dies): hold, then pay, cancel, replay or leave it.
async fn load(c: Arc<Client>, id: usize, round: usize, model: Arc<Mutex<HashMap<String, Acked>>>, stop: Arc<AtomicBool>, seq: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let user = format!("r{round}-c{id}-{n}");
        let qty = 1 + n % 2;
        let body = json!({"sku": "park", "qty": qty, "idempotency_key": format!("k-{n}")});
        let Some((s, b)) = c.hold(&user, &body).await else { return };
        if s != 201 {
            assert!(s == 503 || s == 403, "hold: {s} {b}");
            continue;
        }
        let order = b["order_id"].as_str().unwrap().to_string();
        model.lock().insert(order.clone(), Acked { user: user.clone(), body: body.clone(), state: "CREATED", qty });
        let roll: u32 = rand::rng().random_range(0..10);
        if roll < 4 {
            let Some((s, b)) = c.pay(&order, 100 * qty).await else { return };
            assert_eq!((s, b["result"].as_str()), (200, Some("paid")), "{b}");
            if let Some(a) = model.lock().get_mut(&order) {
                a.state = "PAID";
            }
        } else if roll < 7 {
            let Some((s, b)) = c.cancel(&order, &user).await else { return };
            assert_eq!((s, b["state"].as_str()), (200, Some("CLOSED")), "{b}");
            if let Some(a) = model.lock().get_mut(&order) {
                a.state = "CLOSED";
            }
        } else if roll < 8 {
            let Some((s, b)) = c.hold(&user, &body).await else { return };
            assert_eq!((s, b["order_id"].as_str()), (200, Some(order.as_str())), "immediate replay: {b}");
        }
    }
}

/// Every acknowledged order in its acknowledged state or a later one, each once; stock and reconciliation.
async fn verify(c: &Client, model: &HashMap<String, Acked>, core: &Core) {
    // Last state of every order from the outbox, and how often each was created.
    let mut last: HashMap<String, String> = HashMap::new();
    let mut created: HashMap<String, usize> = HashMap::new();
    let mut cursor = "0".to_string();
    loop {
        let (s, page) = c.admin(&format!("/v1/events/ev/outbox?after={cursor}&limit=1000")).await;
        assert_eq!(s, 200, "{page}");
        let entries = page["entries"].as_array().cloned().unwrap_or_default();
        if entries.is_empty() {
            break;
        }
        for e in entries {
            let id = e["order_id"].as_str().unwrap().to_string();
            if e["kind"] == "created" {
                *created.entry(id.clone()).or_default() += 1;
            }
            if e["kind"] != "refund_required" {
                last.insert(id, e["state"].as_str().unwrap().to_string());
            }
        }
        cursor = page["cursor"].as_str().unwrap().to_string();
    }
    assert!(created.values().all(|&n| n == 1), "an order created twice");
    for (id, a) in model {
        let Some(now) = last.get(id) else { panic!("acknowledged order {id} ({}) lost:\n{}", a.state, core.log()) };
        assert!(later_or_same(a.state, now), "order {id} acknowledged {} is {now}", a.state);
    }
    // No duplicates: a replay of acknowledged holds (new token, same user, key and body) gets its own order.
    let mut rng = rand::rng();
    let ids: Vec<&String> = model.keys().collect();
    for _ in 0..ids.len().min(100) {
        let id = ids[rng.random_range(0..ids.len())];
        let a = &model[id];
        let (s, b) = c.hold(&a.user, &a.body).await.expect("replay");
        assert_eq!((s, b["order_id"].as_str()), (200, Some(id.as_str())), "replay of {id}: {b}");
    }
    // Stock = capacity − held − sold, with held and sold what the orders say.
    let (mut held, mut sold) = (0u64, 0u64);
    for (id, state) in &last {
        let qty = match model.get(id) {
            Some(a) => a.qty,
            None => c.admin(&format!("/v1/orders/{id}")).await.1["qty"].as_u64().unwrap(),
        };
        match state.as_str() {
            "CREATED" => held += qty,
            "PAID" => sold += qty,
            _ => {}
        }
    }
    let stock: Value = c.http.get(format!("{}/v1/events/ev/stock", c.base)).send().await.unwrap().json().await.unwrap();
    let park = &stock["pools"]["park"];
    assert_eq!((park["held"].as_u64(), park["sold"].as_u64()), (Some(held), Some(sold)), "{stock}");
    assert_eq!(park["available"].as_u64(), Some(CAPACITY - held - sold), "{stock}");
    let (s, rec) = c.admin("/v1/events/ev/reconcile").await;
    assert_eq!((s, rec["ok"].as_bool()), (200, Some(true)), "{rec}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_loop_loses_nothing_acknowledged() {
    let rounds: usize = std::env::var("WICKET_CRASH_LOOPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let (dir, data) = workspace();
    let keys = Arc::new(keyring());
    let model: Arc<Mutex<HashMap<String, Acked>>> = Arc::new(Mutex::new(HashMap::new()));
    let seq = Arc::new(AtomicU64::new(0));
    let http = reqwest::Client::builder().pool_max_idle_per_host(64).timeout(Duration::from_secs(10)).build().unwrap();
    let started = Instant::now();
    for round in 0..=rounds {
        let mut core = Core::start(dir.path(), &data, "", &[]).await;
        let c = Arc::new(Client { http: http.clone(), keys: keys.clone(), base: core.base.clone() });
        let snapshot = model.lock().clone();
        verify(&c, &snapshot, &core).await;
        if round == rounds {
            break;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..16)
            .map(|id| tokio::spawn(load(c.clone(), id, round, model.clone(), stop.clone(), seq.clone())))
            .collect();
        let ms = rand::rng().random_range(200..1500);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        core.kill9();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.expect("a client saw a wrong answer");
        }
    }
    let m = model.lock();
    let paid = m.values().filter(|a| a.state == "PAID").count();
    eprintln!("{rounds} crashes, {} acknowledged orders ({paid} paid) in {:.1} s", m.len(), started.elapsed().as_secs_f64());
    assert!(m.len() > rounds * 10, "the load did too little: {}", m.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_holds_and_serves_reads_payments_and_cancels() {
    let (dir, data) = workspace();
    let keys = Arc::new(keyring());
    let http = reqwest::Client::new();
    // 1 MiB reserve, 1 MiB + 48 KiB "free": a few dozen holds, then 503 on holds only.
    let env = [(wicket_core::TEST_DISK_FREE_ENV, ((1 << 20) + (48 << 10)).to_string())];
    let mut core = Core::start(dir.path(), &data, "disk-reserve-mb = 1", &env).await;
    let c = Client { http: http.clone(), keys: keys.clone(), base: core.base.clone() };
    let mut model = HashMap::new();
    let mut refused = None;
    for n in 0..5000 {
        let user = format!("u{n}");
        let body = json!({"sku": "park", "qty": 1, "idempotency_key": "k"});
        let (s, b) = c.hold(&user, &body).await.unwrap();
        if s == 503 {
            refused = Some(b);
            break;
        }
        assert_eq!(s, 201, "{b}");
        model.insert(b["order_id"].as_str().unwrap().to_string(), Acked { user, body, state: "CREATED", qty: 1 });
        if n % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let refused = refused.expect("holds were never refused");
    assert_eq!(refused["error"], "store_read_only", "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("new holds"), "{refused}");
    // Reads are served.
    let (id, a) = model.iter().next().map(|(k, v)| (k.clone(), v.clone())).unwrap();
    assert_eq!(c.admin(&format!("/v1/orders/{id}")).await.0, 200);
    let r = http.get(format!("{}/v1/events/ev/stock", core.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // A replay is answered from its order.
    let (s, b) = c.hold(&a.user, &a.body).await.unwrap();
    assert_eq!((s, b["order_id"].as_str()), (200, Some(id.as_str())), "{b}");
    // Payments and cancels go through (the reserve).
    let ids: Vec<String> = model.keys().cloned().collect();
    let (s, b) = c.pay(&ids[0], 100).await.unwrap();
    assert_eq!((s, b["result"].as_str()), (200, Some("paid")), "{b}");
    model.get_mut(&ids[0]).unwrap().state = "PAID";
    let (s, b) = c.cancel(&ids[1], &model[&ids[1]].user).await.unwrap();
    assert_eq!((s, b["state"].as_str()), (200, Some("CLOSED")), "{b}");
    model.get_mut(&ids[1]).unwrap().state = "CLOSED";
    // Nothing acknowledged is lost across a crash (the disk has room again after it).
    core.kill9();
    let core = Core::start(dir.path(), &data, "", &[]).await;
    let c = Client { http, keys, base: core.base.clone() };
    verify(&c, &model, &core).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_never_share_a_data_dir() {
    let (dir, data) = workspace();
    let _first = Core::start(dir.path(), &data, "", &[]).await;
    let cfg = dir.path().join("second.toml");
    std::fs::write(&cfg, config(free_port(), &data, "")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wicket-core")).args(["serve", "--config"]).arg(&cfg).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another wicket core") && err.contains(&data.display().to_string()), "{err}");
    // And a data dir that is a file is a config error with its path (exit 2).
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    std::fs::write(&cfg, config(free_port(), &file, "")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wicket-core")).args(["check-config"]).arg(&cfg).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data-dir") && err.contains("not a directory"), "{err}");
}
