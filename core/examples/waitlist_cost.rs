//! What the waitlist (issue #39) costs a hold on Redis: Redis's own time per call of `lua/hold.lua`
//! (`INFO commandstats`, `cmdstat_evalsha`'s `usec_per_call`), side by side, round after round, in one Redis:
//!
//! - **empty**: a hold that finds the event sold out (one ticket, held) with nobody on its waitlist;
//! - **full**: the same hold on an event whose waitlist holds `WAIT_MAX` (50) fans — the most it can;
//! - **listed**: those fans asking again in turn (what every waiting fan does every 2 s; it also keeps
//!   them on the list, so it runs first in each round);
//! - **sale**: a hold that takes a ticket (the sale's common step), on an event with an empty list.
//!
//! ```sh
//! bash bench/waitlist/run.sh     # redis-server on CPU 0, this on CPU 1; prints the figures as JSON
//! ```

use std::time::Instant;

use clap::Parser;
use wicket_core::model::{EventSpec, HoldOutcome, HoldRequest, Identity, PoolSpec, PutEventOutcome, SkuSpec, WAIT_MAX, new_order_id};
use wicket_core::store::SaleStore;
use wicket_core::store::redis::RedisStore;

#[derive(Parser)]
#[command(about = "Redis time per hold call with an empty and a full waitlist")]
struct Args {
    /// The Redis to measure (nothing else should use it meanwhile).
    #[arg(long)]
    url: String,
    /// Holds per kind and round.
    #[arg(long, default_value_t = 5000)]
    holds: usize,
    /// Rounds; the kinds take turns within each.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

fn ts(ms: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).unwrap()
}

fn spec(now: i64, capacity: u32) -> EventSpec {
    EventSpec {
        name: "waitlist cost".into(),
        opens_at: ts(now - 60_000),
        closes_at: ts(now + 86_400_000),
        hold_seconds: 900,
        pools: vec![PoolSpec { id: "ga".into(), capacity: Some(capacity), seats: None }],
        skus: vec![SkuSpec { id: "ga".into(), pools: vec!["ga".into()], price_cents: 100, max_qty: None }],
        limits: vec![],
    }
}

fn hold(event: &str, user: &str, wait: bool) -> HoldRequest {
    HoldRequest {
        event: event.into(),
        order_id: new_order_id(event),
        sku: "ga".into(),
        qty: 1,
        seats: vec![],
        user: user.into(),
        identity: Identity::default(),
        idempotency_key: format!("k-{user}"),
        fingerprint: HoldRequest::fingerprint_of("ga", 1, &Identity::default(), &[]),
        jti: format!("j-{user}"),
        jti_expires_ms: i64::MAX / 4,
        wait,
    }
}

/// Redis's total microseconds and calls of EVALSHA so far.
fn evalsha_usec(con: &mut redis::Connection) -> anyhow::Result<(f64, f64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con)?;
    let line = info.lines().find(|l| l.starts_with("cmdstat_evalsha:")).ok_or_else(|| anyhow::anyhow!("no evalsha stats"))?;
    let field = |k: &str| -> f64 {
        line.split([':', ',']).find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse().ok()).unwrap_or(0.0)
    };
    Ok((field("usec"), field("calls")))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let store = RedisStore::connect(&args.url).await?;
    let mut con = redis::Client::open(args.url.as_str())?.get_connection()?;
    let now = store.now_ms().await?;
    let tag = std::process::id();
    let (empty, full, sale) = (format!("wl-empty-{tag}"), format!("wl-full-{tag}"), format!("wl-sale-{tag}"));
    let cap = (args.holds * args.rounds + 10) as u32;
    for (ev, capacity) in [(&empty, 1), (&full, 1), (&sale, cap)] {
        anyhow::ensure!(matches!(store.put_event(ev, &spec(now, capacity), true).await?, PutEventOutcome::Created | PutEventOutcome::Updated));
    }
    for ev in [&empty, &full] {
        anyhow::ensure!(matches!(store.hold(&hold(ev, "first", false)).await?, HoldOutcome::Created(_)));
    }
    for i in 0..WAIT_MAX {
        let r = store.hold(&hold(&full, &format!("w{i}"), true)).await?;
        anyhow::ensure!(matches!(r, HoldOutcome::SoldOut(so) if so.listed), "fan {i}: {r:?}");
    }
    let listed: Vec<HoldRequest> = (0..WAIT_MAX).map(|i| hold(&full, &format!("w{i}"), true)).collect();
    let kinds = ["listed", "full", "empty", "sale"];
    let mut per_call = vec![Vec::new(); kinds.len()];
    let mut n = 0u64;
    for round in 0..args.rounds {
        for (k, kind) in kinds.iter().enumerate() {
            let (u0, c0) = evalsha_usec(&mut con)?;
            let t0 = Instant::now();
            for _ in 0..args.holds {
                n += 1;
                let r = match *kind {
                    "empty" => store.hold(&hold(&empty, &format!("e{n}"), false)).await?,
                    "full" => store.hold(&hold(&full, &format!("f{n}"), false)).await?,
                    "listed" => store.hold(&listed[n as usize % WAIT_MAX]).await?,
                    _ => store.hold(&hold(&sale, &format!("s{n}"), false)).await?,
                };
                let ok = match *kind {
                    "sale" => matches!(r, HoldOutcome::Created(_)),
                    "listed" => matches!(r, HoldOutcome::SoldOut(so) if so.listed),
                    _ => matches!(r, HoldOutcome::SoldOut(so) if !so.listed),
                };
                anyhow::ensure!(ok, "{kind}: {r:?}");
            }
            let (u1, c1) = evalsha_usec(&mut con)?;
            let us = (u1 - u0) / (c1 - c0).max(1.0);
            per_call[k].push(us);
            eprintln!("round {round} {kind}: {us:.1} µs of Redis per hold call ({:.0} calls/s end to end)", args.holds as f64 / t0.elapsed().as_secs_f64());
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let m: Vec<f64> = per_call.iter().map(|v| mean(v)).collect();
    println!(
        "{}",
        serde_json::json!({
            "redis_usec_per_hold": {"listed": m[0], "full": m[1], "empty": m[2], "sale": m[3]},
            "full_vs_empty": m[1] / m[2], "listed_vs_empty": m[0] / m[2], "full_vs_sale": m[1] / m[3],
            "waitlist_fans": WAIT_MAX, "holds_per_kind_and_round": args.holds, "rounds": args.rounds,
        })
    );
    Ok(())
}
