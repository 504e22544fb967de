//! Holds per second through the core's HTTP API: the real `wicket-core` binary on loopback, N clients
//! with keep-alive connections, each hold with a fresh admission token, for a fixed time.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use wicket_core::config::CoreConfig;
use wicket_core::token::Keyring;
use wicket_testkit::core_toml::CoreToml;
use wicket_testkit::free_port;

const ADMIN: &str = "bench-admin-token-0123456789";
const HS: &str = "bench-hs256-secret-0123456789abcdef";

/// What one run measured.
#[derive(Debug, Clone)]
pub struct HoldFigures {
    pub holds: u64,
    pub seconds: f64,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
}

/// Whether `holds-vs-evalsha --pin` asked for CPU pinning of the processes it starts.
pub static PIN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// A command for `program`, run under `taskset -c CPUS` when pinning is on (Redis on CPU 0, the core and the
/// EVALSHA client on CPU 1) or when the variable `var` names CPUs; else as is.
pub fn pinned(program: PathBuf, var: &str) -> Command {
    let default = match (PIN.get().copied().unwrap_or(false), var) {
        (true, "WICKET_BENCH_REDIS_CPUS") => Some("0".to_string()),
        (true, _) => Some("1".to_string()),
        _ => None,
    };
    match std::env::var(var).ok().or(default) {
        Some(cpus) if !cpus.is_empty() => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpus).arg(program);
            c
        }
        _ => Command::new(program),
    }
}

/// A `wicket-core` child process with its config in a temp dir; killed on drop.
pub struct CoreProcess {
    child: Child,
    pub base: String,
    _dir: tempfile::TempDir,
}

impl Drop for CoreProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The core's config on `store`; the durable embedded store keeps its files in `data_dir`.
fn config_text(port: u16, store: &str, data_dir: Option<&std::path::Path>) -> String {
    let mut cfg = CoreToml::new(ADMIN, "bench-callback-secret-0123456789", HS).listen(port).store(store);
    if let Some(d) = data_dir {
        cfg = cfg.data_dir(&d.display().to_string());
    }
    cfg.core("sweeper-period-ms = 1000").core("max-inflight = 100000").build()
}

/// Starts the core on `store` (`embedded`: durable, its data dir in the process's temp dir; `memory`; or a
/// `redis://` URL) and waits until it answers (and its start-up re-check is done).
pub async fn start_core(store: &str) -> anyhow::Result<CoreProcess> {
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let cfg = dir.path().join("core.toml");
    let data = dir.path().join("data");
    std::fs::write(&cfg, config_text(port, store, (store == "embedded").then_some(data.as_path())))?;
    let child = pinned(crate::procs::binary("wicket-core")?, "WICKET_BENCH_CORE_CPUS")
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let base = format!("http://127.0.0.1:{port}");
    crate::procs::wait_http(&format!("{base}/healthz")).await?;
    // Holds are refused until the start-up re-check of CREATED orders is done (durable store, Redis).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h: serde_json::Value = reqwest::get(format!("{base}/healthz")).await?.json().await?;
        if h["rechecking"] == false {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the core's start-up re-check did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(CoreProcess { child, base, _dir: dir })
}

/// The keyring that signs the bench's tokens (the same HS256 key as the core's config).
pub fn keyring() -> anyhow::Result<Keyring> {
    let cfg = CoreConfig::from_toml_str(&config_text(1, "memory", None)).map_err(|e| anyhow::anyhow!("{e}"))?;
    Keyring::from_config(&cfg.tokens)
}

/// Puts a big general-admission event `event` (no limits, so every hold succeeds).
pub async fn put_event(base: &str, event: &str, capacity: u64) -> anyhow::Result<()> {
    let now = time::OffsetDateTime::now_utc();
    let fmt = &time::format_description::well_known::Rfc3339;
    let body = json!({
        "name": "bench",
        "opens_at": (now - time::Duration::hours(1)).format(fmt)?,
        "closes_at": (now + time::Duration::days(1)).format(fmt)?,
        "pools": [{"id": "ga", "capacity": capacity}],
        "skus": [{"id": "ga", "pools": ["ga"], "price_cents": 100}],
    });
    let r = reqwest::Client::new().put(format!("{base}/v1/events/{event}")).bearer_auth(ADMIN).json(&body).send().await?;
    anyhow::ensure!(r.status().is_success(), "PUT event: {}", r.status());
    Ok(())
}

/// Runs `clients` concurrent clients for `duration` against `base`; counts 201s.
pub async fn run_holds(base: &str, event: &str, clients: usize, duration: Duration) -> anyhow::Result<HoldFigures> {
    let keys = Arc::new(keyring()?);
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let url = format!("{base}/v1/events/{event}/holds");
    let mut tasks = Vec::new();
    let started = Instant::now();
    let run = started.elapsed().as_nanos() ^ std::process::id() as u128 ^ time::OffsetDateTime::now_utc().unix_timestamp_nanos() as u128;
    for c in 0..clients {
        let (keys, http, stop, errors, url, event) =
            (keys.clone(), http.clone(), stop.clone(), errors.clone(), url.clone(), event.to_string());
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(100_000);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let sub = format!("r{run:x}-c{c}-{i}");
                let token = keys.sign(&keys.new_claims(&event, &sub, "bench", 0, 4, 120), None).unwrap_or_default();
                let body = format!(r#"{{"sku":"ga","qty":1,"idempotency_key":"{sub}"}}"#);
                let t0 = Instant::now();
                let ok = match http.post(&url).bearer_auth(token).header("content-type", "application/json").body(body).send().await {
                    Ok(r) => {
                        let s = r.status().as_u16();
                        let _ = r.bytes().await;
                        s == 201
                    }
                    Err(_) => false,
                };
                if ok {
                    lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            lat
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await?);
    }
    let seconds = started.elapsed().as_secs_f64();
    all.sort_unstable();
    Ok(HoldFigures {
        holds: all.len() as u64,
        seconds,
        per_second: all.len() as f64 / seconds,
        p50_ms: crate::report::percentile_ms(&all, 0.50),
        p99_ms: crate::report::percentile_ms(&all, 0.99),
        errors: errors.load(Ordering::Relaxed),
    })
}

/// A private `redis-server` on a free port with its own temp dir; stopped on drop.
pub struct RedisProcess {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RedisProcess {
    pub async fn start(extra: &[&str]) -> anyhow::Result<RedisProcess> {
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let child = pinned("redis-server".into(), "WICKET_BENCH_REDIS_CPUS")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .arg("--dir")
            .arg(dir.path())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot run redis-server ({e}); install redis-server"))?;
        let url = format!("redis://127.0.0.1:{port}/0");
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            anyhow::ensure!(Instant::now() < deadline, "redis-server did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(RedisProcess { child, url, _dir: dir })
    }
}

/// Runs the `evalsha_ceiling` example (built next to this binary) and parses its JSON line.
pub fn evalsha_ceiling(url: &str, connections: usize, seconds: u64) -> anyhow::Result<HoldFigures> {
    let exe = std::env::current_exe()?;
    let bin = exe.parent().map(|d| d.join("examples/evalsha_ceiling")).unwrap_or_default();
    anyhow::ensure!(bin.is_file(), "{} not found: run `cargo build --release -p wicket-core --examples` first", bin.display());
    let out = pinned(bin, "WICKET_BENCH_CLIENT_CPUS")
        .args(["--url", url, "--connections", &connections.to_string(), "--seconds", &seconds.to_string()])
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(out.status.success(), "evalsha_ceiling failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{')).ok_or_else(|| anyhow::anyhow!("no JSON line from evalsha_ceiling"))?;
    let v: serde_json::Value = serde_json::from_str(line)?;
    let per_second = v["holds_per_s"].as_f64().unwrap_or(0.0);
    Ok(HoldFigures {
        holds: v["holds"].as_u64().unwrap_or(0),
        seconds: seconds as f64,
        per_second,
        p50_ms: v["p50_ms"].as_f64().unwrap_or(0.0),
        p99_ms: v["p99_ms"].as_f64().unwrap_or(0.0),
        errors: v["errors"].as_u64().unwrap_or(0),
    })
}

/// Pre-built hold requests (fresh token and idempotency key each), so the timed loop only writes bytes.
pub fn prebuilt_requests(event: &str, count: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let keys = keyring()?;
    let run = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as u128 ^ std::process::id() as u128;
    (0..count)
        .map(|i| {
            let sub = format!("p{run:x}-{i}");
            let token = keys.sign(&keys.new_claims(event, &sub, "bench", 0, 4, 300), None)?;
            let body = format!(r#"{{"sku":"ga","qty":1,"idempotency_key":"{sub}"}}"#);
            Ok(format!(
                "POST /v1/events/{event}/holds HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes())
        })
        .collect()
}

/// Like [`run_holds`] with a load generator that costs next to nothing: raw HTTP/1.1 keep-alive sockets
/// writing pre-built requests, so the machine's cores go to the core and Redis, as the EVALSHA client's do.
pub async fn run_holds_raw(addr: std::net::SocketAddr, requests: Arc<Vec<Vec<u8>>>, clients: usize, duration: Duration) -> anyhow::Result<HoldFigures> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let end = started + duration;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (next, errors, requests) = (next.clone(), errors.clone(), requests.clone());
        let mut sock = tokio::net::TcpStream::connect(addr).await?;
        sock.set_nodelay(true)?;
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(1 << 16);
            let mut buf = vec![0u8; 8192];
            while Instant::now() < end {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(req) = requests.get(i) else { break };
                let t0 = Instant::now();
                if sock.write_all(req).await.is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                // Read one response: headers, then Content-Length bytes of body.
                let mut have = 0usize;
                let status = loop {
                    match sock.read(&mut buf[have..]).await {
                        Ok(0) | Err(_) => break 0,
                        Ok(n) => have += n,
                    }
                    let Some(h) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                    let head = String::from_utf8_lossy(&buf[..h]).to_ascii_lowercase();
                    let status: u16 = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while have < h + 4 + len {
                        match sock.read(&mut buf[have..]).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => have += n,
                        }
                    }
                    break status;
                };
                if status == 201 {
                    lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    if status == 0 {
                        break;
                    }
                }
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await?);
    }
    let seconds = started.elapsed().as_secs_f64().min(duration.as_secs_f64().max(0.001));
    all.sort_unstable();
    Ok(HoldFigures {
        holds: all.len() as u64,
        seconds,
        per_second: all.len() as f64 / seconds,
        p50_ms: crate::report::percentile_ms(&all, 0.50),
        p99_ms: crate::report::percentile_ms(&all, 0.99),
        errors: errors.load(Ordering::Relaxed),
    })
}

/// One store's figures in the durable-store comparison.
pub struct StoreRun {
    pub store: &'static str,
    pub rounds: Vec<HoldFigures>,
}

impl StoreRun {
    fn mean(&self, f: fn(&HoldFigures) -> f64) -> f64 {
        self.rounds.iter().map(f).sum::<f64>() / self.rounds.len().max(1) as f64
    }
    pub fn per_second(&self) -> f64 {
        self.mean(|f| f.per_second)
    }
    pub fn p50_ms(&self) -> f64 {
        self.mean(|f| f.p50_ms)
    }
    pub fn p99_ms(&self) -> f64 {
        self.mean(|f| f.p99_ms)
    }
    pub fn errors(&self) -> u64 {
        self.rounds.iter().map(|f| f.errors).sum()
    }
}

/// Holds/s of the core on the durable embedded store, on the in-memory store, and on Redis with AOF
/// `appendfsync always` (a private redis-server): one core process per store, all started first, then
/// `rounds` rounds taking the stores in turn, each `seconds` long with `clients` raw keep-alive connections
/// writing pre-built holds (fresh HS256 token and idempotency key each).
pub async fn compare_durable(clients: usize, seconds: u64, rounds: usize) -> anyhow::Result<Vec<StoreRun>> {
    let redis = RedisProcess::start(&["--appendonly", "yes", "--appendfsync", "always"]).await?;
    let cores = [
        ("embedded", start_core("embedded").await?),
        ("memory", start_core("memory").await?),
        ("redis-aof", start_core(&redis.url).await?),
    ];
    let mut runs: Vec<StoreRun> = cores.iter().map(|(s, _)| StoreRun { store: s, rounds: Vec::new() }).collect();
    for (_, core) in &cores {
        put_event(&core.base, "bench", 10_000_000).await?;
        // Warm up connections and code paths.
        run_holds(&core.base, "bench", clients, Duration::from_secs(1)).await?;
    }
    for round in 0..rounds {
        for (i, (store, core)) in cores.iter().enumerate() {
            // Enough pre-built requests for 45,000 holds/s; built outside the timed window.
            let reqs = Arc::new(prebuilt_requests("bench", 45_000 * seconds as usize)?);
            let addr: std::net::SocketAddr = core.base.trim_start_matches("http://").parse()?;
            let f = run_holds_raw(addr, reqs, clients, Duration::from_secs(seconds)).await?;
            println!(
                "round {round} {store:>9}: {:.0} holds/s, P50 {:.2} ms, P99 {:.2} ms, {} errors",
                f.per_second, f.p50_ms, f.p99_ms, f.errors
            );
            runs[i].rounds.push(f);
        }
    }
    Ok(runs)
}
