//! The raw ceiling of holds on a Redis: `lua/hold.lua` called with EVALSHA straight from Rust, with no HTTP,
//! no token check and no core in between. Run it beside the HTTP hold benchmark against the same Redis to
//! see what the core costs (issue 3: holds through the core ≥ 0.8 × this ceiling).
//!
//! ```sh
//! redis-server --port 7379 --save '' --appendonly no &
//! cargo run --release -p wicket-core --example evalsha_ceiling -- --url redis://127.0.0.1:7379/0 --connections 64 --seconds 10
//! # prints a summary, then one JSON line: {"holds_per_s":..,"p50_ms":..,"p99_ms":..,"connections":..,"holds":..,"errors":..}
//! ```
//!
//! Each connection is its own TCP connection running a closed loop (send a hold, wait for the answer, send the
//! next), the way a core instance's multiplexed connection sees its share of buyers. Every hold has its own
//! user, idempotency key and jti, on an event with one general-admission pool larger than the run can sell,
//! so every call does the full script (all checks, all writes, an outbox entry).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use wicket_core::model::{EventSpec, PoolSpec, PutEventOutcome, SkuSpec, new_order_id};
use wicket_core::store::SaleStore;
use wicket_core::store::redis::{RedisStore, event_keys, scripts};

#[derive(Parser)]
#[command(about = "Raw EVALSHA ceiling of the hold script")]
struct Args {
    /// The Redis to measure.
    #[arg(long)]
    url: String,
    /// Concurrent connections, each a closed loop.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Length of the measured run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Warm-up before measuring (script load, connections, allocator).
    #[arg(long, default_value_t = 1)]
    warmup_seconds: u64,
    /// Event id to create (a fresh one by default).
    #[arg(long)]
    event: Option<String>,
}

fn ts(ms: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).unwrap()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let event = args.event.clone().unwrap_or_else(|| format!("evalsha-ceiling-{}", std::process::id()));
    let store = RedisStore::connect(&args.url).await?;
    let now = store.now_ms().await?;
    let spec = EventSpec {
        name: "EVALSHA ceiling".into(),
        opens_at: ts(now - 60_000),
        closes_at: ts(now + 86_400_000),
        hold_seconds: 900,
        pools: vec![PoolSpec { id: "ga".into(), capacity: Some(10_000_000), seats: None }],
        skus: vec![SkuSpec { id: "ga".into(), pools: vec!["ga".into()], price_cents: 100, max_qty: None }],
        limits: vec![],
    };
    match store.put_event(&event, &spec, true).await? {
        PutEventOutcome::Created | PutEventOutcome::Updated => {}
        other => anyhow::bail!("cannot create the event: {other:?}"),
    }

    let client = redis::Client::open(args.url.as_str())?;
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(args.warmup_seconds);
    let end = measure_from + Duration::from_secs(args.seconds);
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..args.connections {
        let mut conn = client.get_multiplexed_async_connection().await?;
        let (event, errors) = (event.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat_us: Vec<u32> = Vec::with_capacity(1 << 16);
            let mut n = 0u64;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    return lat_us;
                }
                n += 1;
                let order_id = new_order_id(&event);
                let user = format!("c{c}-{n}");
                let mut inv = scripts::HOLD.prepare_invoke();
                for k in event_keys(&event, Some(&order_id)) {
                    inv.key(k);
                }
                inv.arg(&order_id).arg("ga").arg("1").arg(&user).arg("").arg("").arg("");
                inv.arg(&user).arg("fp").arg(&user).arg(i64::MAX / 4);
                let r: redis::RedisResult<redis::Value> = inv.invoke_async(&mut conn).await;
                let ok = matches!(&r, Ok(redis::Value::Array(a)) if matches!(a.first(), Some(redis::Value::BulkString(b)) if b == b"CREATED"));
                if !ok {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                if t0 >= measure_from {
                    lat_us.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
            }
        }));
    }
    let mut all: Vec<u32> = Vec::new();
    for t in tasks {
        all.extend(t.await?);
    }
    all.sort_unstable();
    let pct = |p: f64| -> f64 {
        if all.is_empty() {
            return 0.0;
        }
        all[((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1] as f64 / 1000.0
    };
    let rate = all.len() as f64 / args.seconds as f64;
    let stock = store.stock(&event).await?.map(|s| s.pools["ga"]);
    println!(
        "EVALSHA hold.lua: {} connections, {} s: {:.0} holds/s, P50 {:.2} ms, P99 {:.2} ms, {} errors; pool after: {:?}",
        args.connections,
        args.seconds,
        rate,
        pct(0.50),
        pct(0.99),
        errors.load(Ordering::Relaxed),
        stock
    );
    println!(
        "{}",
        serde_json::json!({
            "holds_per_s": rate.round(),
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
            "connections": args.connections,
            "holds": all.len(),
            "errors": errors.load(Ordering::Relaxed),
        })
    );
    Ok(())
}
