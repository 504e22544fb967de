//! What waiting for a replica costs (issue #17 item 5; issue #27: the default `wait-replicas = "auto"`):
//! holds/s and latency through the real `wicket-core` binary on a Redis master with one replica, the wait off
//! (`wait-replicas = 0`) vs on (`--wait auto`, the default: the config has no `[redis]` table and the core
//! finds the replica; or `--wait 1`), same machine, same load.
//! A stand-in for `wicket-bench holds` that builds with the core alone: the same load shape (N clients with
//! keep-alive, a fresh HS256 token and idempotency key per hold, one general-admission pool).
//!
//! ```sh
//! cargo build --release -p wicket-core --bin wicket-core --example wait_cost
//! target/release/examples/wait_cost --clients 64 --seconds 5 --rounds 3            # auto vs 0
//! target/release/examples/wait_cost --clients 64 --seconds 5 --rounds 3 --wait 1   # 1 vs 0
//! # one line per round and store, then one JSON line: {"off":{..},"on":{..},"redis_wait_vs_nowait":..}
//! ```
//! `redis-server` from `PATH` (or `WICKET_REDIS_SERVER`: `wicket_testkit::RedisServer`); the core binary
//! next to this example's folder (`target/release/wicket-core`) or `WICKET_CORE_BIN`. Each core runs in its own process; rounds alternate off/on so drift hits both.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use wicket_core::config::CoreConfig;
use wicket_core::token::Keyring;
use wicket_testkit::core_toml::CoreToml;
use wicket_testkit::{RedisServer, free_port};

const ADMIN: &str = "bench-admin-token-0123456789";
const HS: &str = "bench-hs256-secret-0123456789abcdef";

#[derive(Parser)]
#[command(about = "Holds/s and P99 with the Redis wait setting off vs on")]
struct Args {
    #[arg(long, default_value_t = 64)]
    clients: usize,
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// `redis.wait-timeout-ms` of the waiting core.
    #[arg(long, default_value_t = 100)]
    wait_timeout_ms: u64,
    /// `redis.wait-replicas` of the waiting core: `auto` (the default, written as no setting at all unless
    /// `--wait-timeout-ms` differs from 100) or a number ≥ 1.
    #[arg(long, default_value = "auto")]
    wait: String,
}

/// A child process, killed on drop.
struct Proc(Child, #[allow(dead_code)] tempfile::TempDir);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn config_text(port: u16, store: &str, wait: &str) -> String {
    CoreToml::new(ADMIN, "bench-callback-secret-0123456789", HS)
        .listen(port)
        .store(store)
        .core("max-inflight = 100000")
        .then(wait)
        .build()
}

fn core_bin() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("WICKET_CORE_BIN") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe()?;
    let bin = exe.parent().and_then(|p| p.parent()).map(|p| p.join("wicket-core")).unwrap_or_default();
    anyhow::ensure!(bin.is_file(), "no {} (build it, or set WICKET_CORE_BIN)", bin.display());
    Ok(bin)
}

/// A core on `store` with the `[redis]` text `wait`; its start-up log must say `policy` (the wait policy it
/// chose), so a measurement never runs on a policy other than the one it names.
async fn start_core(store: &str, wait: &str, policy: &str) -> anyhow::Result<(Proc, String)> {
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let cfg = dir.path().join("core.toml");
    std::fs::write(&cfg, config_text(port, store, wait))?;
    let log = dir.path().join("core.log");
    let child = Command::new(core_bin()?)
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let child = Proc(child, dir);
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = reqwest::get(format!("{base}/healthz")).await
            && let Ok(h) = r.json::<serde_json::Value>().await
            && h["rechecking"] == false
        {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the core did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = std::fs::read_to_string(&log)?;
    let line = text.lines().find(|l| l.contains("redis.wait-replicas")).unwrap_or("(no wait policy logged)");
    anyhow::ensure!(line.contains(policy), "expected a core that {policy}, its log says: {line}");
    eprintln!("{line}");
    Ok((child, base))
}

async fn put_event(base: &str, event: &str) -> anyhow::Result<()> {
    let now = time::OffsetDateTime::now_utc();
    let fmt = &time::format_description::well_known::Rfc3339;
    let body = serde_json::json!({
        "name": "bench",
        "opens_at": (now - time::Duration::hours(1)).format(fmt)?,
        "closes_at": (now + time::Duration::days(1)).format(fmt)?,
        "pools": [{"id": "ga", "capacity": 1_000_000u64}],
        "skus": [{"id": "ga", "pools": ["ga"], "price_cents": 100}],
    });
    // The replica may still be syncing: the waiting core answers 503 until it confirms.
    for _ in 0..100 {
        let r = reqwest::Client::new().put(format!("{base}/v1/events/{event}")).bearer_auth(ADMIN).json(&body).send().await?;
        if r.status().is_success() {
            return Ok(());
        }
        anyhow::ensure!(r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE, "PUT event: {}", r.status());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("PUT event: still 503 after 10 s")
}

struct Figures {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
}

fn pct(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)] as f64 / 1000.0
}

async fn run(keys: Arc<Keyring>, base: &str, event: &str, clients: usize, duration: Duration, tag: &str) -> anyhow::Result<Figures> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let url = format!("{base}/v1/events/{event}/holds");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (keys, http, stop, errors, url, event, tag) =
            (keys.clone(), http.clone(), stop.clone(), errors.clone(), url.clone(), event.to_string(), tag.to_string());
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(100_000);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let sub = format!("{tag}-c{c}-{i}");
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
    Ok(Figures { per_second: all.len() as f64 / seconds, p50_ms: pct(&all, 0.5), p99_ms: pct(&all, 0.99), errors: errors.load(Ordering::Relaxed) })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let master = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&master);
    let url = master.url();
    let wait = match (args.wait.as_str(), args.wait_timeout_ms) {
        ("auto", 100) => String::new(),
        ("auto", ms) => format!("[redis]\nwait-timeout-ms = {ms}\n"),
        (n, ms) => {
            let n: u32 = n.parse().ok().filter(|n| *n >= 1).ok_or_else(|| anyhow::anyhow!("--wait: auto or a number >= 1, got {n:?}"))?;
            format!("[redis]\nwait-replicas = {n}\nwait-timeout-ms = {ms}\n")
        }
    };
    let (_off, off_base) = start_core(&url, "[redis]\nwait-replicas = 0\n", "redis.wait-replicas = 0").await?;
    let (_on, on_base) = start_core(&url, &wait, "every acknowledged change waits for").await?;
    put_event(&off_base, "bench-off").await?;
    put_event(&on_base, "bench-on").await?;
    let cfg = CoreConfig::from_toml_str(&config_text(1, "memory", "")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let keys = Arc::new(Keyring::from_config(&cfg.tokens)?);
    // Warm-up: connections, scripts, allocators.
    for (base, ev) in [(&off_base, "bench-off"), (&on_base, "bench-on")] {
        run(keys.clone(), base, ev, args.clients, Duration::from_secs(1), "warm").await?;
    }
    let mut results: [Vec<Figures>; 2] = [Vec::new(), Vec::new()];
    for round in 0..args.rounds {
        for (i, (name, base, ev)) in [("off", &off_base, "bench-off"), ("on", &on_base, "bench-on")].into_iter().enumerate() {
            let f = run(keys.clone(), base, ev, args.clients, Duration::from_secs(args.seconds), &format!("r{round}")).await?;
            println!(
                "round {round} wait {name:>3}: {:.0} holds/s, P50 {:.2} ms, P99 {:.2} ms, {} errors",
                f.per_second, f.p50_ms, f.p99_ms, f.errors
            );
            results[i].push(f);
        }
    }
    let mean = |v: &[Figures], f: fn(&Figures) -> f64| v.iter().map(f).sum::<f64>() / v.len().max(1) as f64;
    let summary = |v: &[Figures]| {
        serde_json::json!({
            "holds_per_s": mean(v, |f| f.per_second).round(),
            "p50_ms": (mean(v, |f| f.p50_ms) * 100.0).round() / 100.0,
            "p99_ms": (mean(v, |f| f.p99_ms) * 100.0).round() / 100.0,
            "errors": v.iter().map(|f| f.errors).sum::<u64>(),
        })
    };
    let ratio = mean(&results[1], |f| f.per_second) / mean(&results[0], |f| f.per_second).max(1.0);
    println!(
        "{}",
        serde_json::json!({
            "clients": args.clients, "seconds": args.seconds, "rounds": args.rounds, "wait_timeout_ms": args.wait_timeout_ms, "wait": args.wait,
            "off": summary(&results[0]), "on": summary(&results[1]),
            "redis_wait_vs_nowait": (ratio * 100.0).round() / 100.0,
        })
    );
    Ok(())
}
