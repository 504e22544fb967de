//! `wicket-bench`: Wicket's benchmarks, each writing its figures to its page in bench/results/ (summed up in bench/RESULTS.md) and
//! bench/results/summary.json.
//!
//! ```text
//! cargo build --release -p wicket-core -p wicket-bench
//! target/release/wicket-bench holds --store embedded --clients 64 --seconds 10
//! target/release/wicket-bench holds --store compare --clients 64 --seconds 5 --rounds 3
//! ```
//!
//! # Layout
//!
//! - `holds`: holds per second through the core's HTTP API (and the raw EVALSHA ceiling).
//! - `controller`: the release controller against a fixed rate and an oracle on the simulated core
//!   (`wicket-controller`'s simulator).
//! - `surge`: a flash sale end to end against the real edge and core (`procs`: the processes, the
//!   stand-in origin and payment provider; `stats`, `svg`: figures and plots).
//! - `megasale`: the surge's multi-edge scenario on a Redis Cluster (the cluster, the kills, Redis operations
//!   per join, places kept).
//! - `rooms`: two sales on one edge with a separate core, one after another and at once; or one sale
//!   with the core process stopped for a second mid-sale (`--stop-core-at`).
//! - `report`: where figures go (summary.json and the sections of the pages in bench/results/).

mod controller;
mod holds;
mod megasale;
mod procs;
mod report;
mod rooms;
mod stats;
mod surge;
mod svg;

use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "wicket-bench", version, about = "Wicket's benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Holds per second through the core's HTTP API (the real wicket-core binary over loopback).
    Holds {
        /// `embedded` (durable), `memory`, or `compare`: the durable embedded store vs the in-memory one vs
        /// the core on Redis with AOF `appendfsync always` (keys `embedded_durable_vs_memory` and
        /// `embedded_durable_vs_redis_aof`).
        #[arg(long, default_value = "embedded")]
        store: String,
        /// Rounds of `--store compare` (the stores take turns in each).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long, default_value_t = 64)]
        clients: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Print only; don't write bench/results/ pages / summary.json.
        #[arg(long)]
        dry_run: bool,
    },
    /// Holds/s through the core's HTTP API on Redis vs the raw EVALSHA ceiling of the same script on the same
    /// Redis, alternating A/B rounds in one run.
    HoldsVsEvalsha {
        #[arg(long, default_value_t = 64)]
        clients: usize,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        #[arg(long)]
        dry_run: bool,
        /// Give Redis CPU 0 and the core and both load generators CPU 1 (run the bench itself under
        /// `taskset -c 1`), so both sides drive a Redis with a core of its own.
        #[arg(long)]
        pin: bool,
    },
    /// The release controller vs a fixed rate vs a clairvoyant oracle on the simulated core.
    Controller {
        /// Seeds 1..=N.
        #[arg(long, default_value_t = 10)]
        seeds: u64,
        #[arg(long)]
        dry_run: bool,
    },
    /// Two sales on one edge (the real edge and a separate core process, embedded store), one after
    /// another and at once, each with a cautious start at an idle core (issue #26).
    Rooms {
        /// Fans per sale.
        #[arg(long, default_value_t = 300)]
        fans: usize,
        #[arg(long)]
        dry_run: bool,
        /// Exit non-zero unless every fan of each sale is admitted within 30 s (and, with
        /// `--stop-core-at`, no stall over 5 s while fans wait).
        #[arg(long)]
        check: bool,
        /// Instead: one sale, the core process stopped (SIGSTOP) this many seconds after its first
        /// join, for `--stop-core-for` seconds (issue #39).
        #[arg(long)]
        stop_core_at: Option<f64>,
        /// How long the core stays stopped, seconds.
        #[arg(long, default_value_t = 1.0)]
        stop_core_for: f64,
    },
    /// A flash sale end to end against the real edge and core: stararena | scenic | capacity-drop | bots | bots-nopow |
    /// crashes (two edges and the core on Redis with AOF; the leader edge, the core and Redis SIGKILLed mid-sale) |
    /// megasale (four edges on a Redis Cluster of 3 masters with replicas, a million fans; the leader edge and the
    /// room's master SIGKILLed mid-sale).
    Surge {
        scenario: String,
        /// Small numbers, under a minute (what the test suite runs).
        #[arg(long)]
        quick: bool,
        /// Override the number of virtual users.
        #[arg(long)]
        users: Option<usize>,
        /// Print only; don't write bench/results/ pages / summary.json / plots.
        #[arg(long)]
        dry_run: bool,
        /// Megasale: the room's layout on the cluster, `spread` (across the cluster) or `single` (every key in one slot).
        #[arg(long, default_value = "spread")]
        layout: String,
        /// Megasale, spread layout: places one edge numbers in one time bucket (`[rooms.spread] block`).
        #[arg(long, default_value_t = 500)]
        block: u32,
        /// Megasale, spread layout: the time bucket of a place, ms (`block-ms`): the FIFO error across edges.
        #[arg(long, default_value_t = 5)]
        block_ms: u32,
        /// Megasale, spread layout: an edge writes its joins this often (`flush-ms`).
        #[arg(long, default_value_t = 300)]
        flush_ms: u32,
        /// Override the number of seats.
        #[arg(long)]
        seats: Option<u32>,
        /// Override the most admissions per second.
        #[arg(long)]
        release_max: Option<u32>,
        /// Exit non-zero when oversold or double-sold is not 0 (crashes: also a paid order or a hold lost, a place
        /// changed or shared, FIFO τ < 0.99, a sale that did not sell out, a kill that did not happen mid-sale).
        #[arg(long)]
        check: bool,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Controller { seeds, dry_run } => {
            let list: Vec<u64> = (1..=seeds).collect();
            let (value, table) = tokio::task::spawn_blocking(move || controller::run(&list)).await?;
            println!("{table}\n{}", serde_json::to_string_pretty(&value)?);
            if !dry_run {
                report::merge_summary("controller_vs_oracle", value.clone())?;
                report::write_section(
                    "controller",
                    &format!(
                        "## Release controller vs fixed rate vs oracle\n\n\
                         Command: `cargo build --release -p wicket-bench && target/release/wicket-bench controller --seeds {seeds}`\n\n\
                         Simulated core (controller/src/sim.rs): 8 workers × 10 ms (800 req/s), its own 503 limit, 1 s client \
                         timeout; admitted users reach it 2–6 s later and stay 20–40 s at 0.5 req/s; P99 target 100 ms; the core \
                         reports utilisation. Scenarios: cold start, −50% capacity at 120 s, +50% at 120 s. The oracle knows the \
                         capacity curve and has the same delay; the fixed rate is what the oracle releases at nominal capacity. \
                         A window is over when its P99 (failures count as infinitely slow) exceeds the target.\n\n\
                         ```text\n{table}```\n\n\
                         Issue goals: goodput ≥ 0.85 of the oracle; ≤ 1% of steady windows over target; ≤ 10 s more violation than \
                         the oracle after the −50% step. Per-scenario figures are in summary.json under `controller_vs_oracle`.\n\n\
                         The second table: several rooms on one core, each with its own controller and a share of the core \
                         max-min by demand (occupancy + queue; issue #26) — two cautious sales of 300 fans one after another (the \
                         second opening during a slow second of the core), a 20,000-fan surge with 300 buyers opening beside it, and \
                         one sale at an idle core. Goals: every fan of the cautious sales and every buyer admitted within 30 s; no \
                         tick under a room's minimum; the surge scenario's goodput over 90–180 s ≥ 0.85 of the oracle. The surge \
                         gives way (yield_share) while the buyers wait and they grow into the core (grow_to_share). Figures under \
                         `controller_vs_oracle.rooms`.\n"
                    ),
                )?;
            }
        }
        Cmd::HoldsVsEvalsha { clients, seconds, rounds, dry_run, pin } => {
            let _ = holds::PIN.set(pin);
            let redis = holds::RedisProcess::start(&["--appendonly", "no"]).await?;
            let core = holds::start_core(&redis.url).await?;
            holds::put_event(&core.base, "bench", 10_000_000).await?;
            holds::run_holds(&core.base, "bench", clients, Duration::from_secs(1)).await?;
            let (mut http, mut raw) = (Vec::new(), Vec::new());
            let addr: std::net::SocketAddr = core.base.trim_start_matches("http://").parse()?;
            for round in 0..rounds {
                // Enough pre-built requests for 20,000 holds/s; built outside the timed window.
                let reqs = std::sync::Arc::new(holds::prebuilt_requests("bench", 20_000 * seconds as usize)?);
                let h = holds::run_holds_raw(addr, reqs, clients, Duration::from_secs(seconds)).await?;
                let r = holds::evalsha_ceiling(&redis.url, clients, seconds)?;
                println!(
                    "round {round}: core HTTP {:.0} holds/s (P99 {:.2} ms, {} errors) | raw EVALSHA {:.0} holds/s (P99 {:.2} ms) | ratio {:.3}",
                    h.per_second, h.p99_ms, h.errors, r.per_second, r.p99_ms, h.per_second / r.per_second.max(1.0)
                );
                http.push(h);
                raw.push(r);
            }
            let avg = |v: &[holds::HoldFigures], f: fn(&holds::HoldFigures) -> f64| v.iter().map(f).sum::<f64>() / v.len().max(1) as f64;
            let (hps, rps) = (avg(&http, |f| f.per_second), avg(&raw, |f| f.per_second));
            let (hp99, rp99) = (avg(&http, |f| f.p99_ms), avg(&raw, |f| f.p99_ms));
            let ratio = hps / rps.max(1.0);
            println!("core on Redis {hps:.0} holds/s vs raw EVALSHA {rps:.0} holds/s: ratio {ratio:.3}");
            if !dry_run {
                report::merge_summary("hold_vs_evalsha", serde_json::json!(((ratio * 1000.0).round() / 1000.0)))?;
                report::merge_summary(
                    "core_holds_redis",
                    serde_json::json!({"holds_per_second": hps.round(), "p99_ms": hp99, "evalsha_holds_per_second": rps.round(), "evalsha_p99_ms": rp99, "clients": clients, "rounds": rounds, "seconds_per_round": seconds}),
                )?;
                let mut rows = String::new();
                for (i, (h, r)) in http.iter().zip(&raw).enumerate() {
                    rows.push_str(&format!("| {i} | {:.0} | {:.2} ms | {:.0} | {:.2} ms | {:.3} |\n", h.per_second, h.p99_ms, r.per_second, r.p99_ms, h.per_second / r.per_second.max(1.0)));
                }
                report::write_section(
                    "hold-vs-evalsha",
                    &format!(
                        "## Core holds on Redis vs the raw EVALSHA ceiling\n\n\
                         Command: `cargo build --release --workspace --examples && taskset -c 1 target/release/wicket-bench holds-vs-evalsha --pin --clients {clients} --seconds {seconds} --rounds {rounds}`\n\n\
                         Machine: {}. One private redis-server (no persistence, so the figure is the script, not the disk){}. \
                         A: the real `wicket-core` binary on that Redis, {clients} raw HTTP/1.1 keep-alive connections writing pre-built holds, each with a fresh \
                         HS256 admission token (verified by the core) and idempotency key. B: `lua/hold.lua` by EVALSHA from {clients} Rust connections \
                         (core/examples/evalsha_ceiling.rs), no HTTP, no token. Rounds alternate A, B on the same Redis.\n\n\
                         | round | core holds/s | core P99 | EVALSHA holds/s | EVALSHA P99 | ratio |\n|---|---|---|---|---|---|\n{rows}\n\
                         **hold_vs_evalsha = {ratio:.3}** (mean core {hps:.0} holds/s, P99 {hp99:.2} ms; mean EVALSHA {rps:.0} holds/s, P99 {rp99:.2} ms).\n",
                        report::machine(),
                        if pin { "; with `--pin` Redis runs on CPU 0 and the core, the bench and the EVALSHA client on CPU 1, so both sides drive a Redis that has a core of its own" } else { "" }
                    ),
                )?;
            }
        }
        Cmd::Rooms { fans, dry_run, check, stop_core_at: Some(at), stop_core_for } => {
            let r = rooms::run_core_stopped(fans, at, stop_core_for).await?;
            let table = r.table();
            println!("{table}\n{}", serde_json::to_string_pretty(&r)?);
            if !dry_run {
                report::merge_summary("rooms_core_stopped", serde_json::to_value(&r)?)?;
                report::write_section(
                    "rooms-core-stopped",
                    &format!(
                        "## A sale with the core stopped for a second\n\n\
                         Command: `cargo build --release -p wicket-edge -p wicket-core -p wicket-bench && target/release/wicket-bench rooms --fans {fans} --stop-core-at {at} --stop-core-for {stop_core_for}`\n\n\
                         Machine: {}. As the sales above, one sale in a cautious room (start 2/s, min 1/s, P99 target 100 ms); the \
                         core process stopped (SIGSTOP) {at} s after the first join and continued (SIGCONT) {stop_core_for} s later. \
                         Goals (issue #39): every fan admitted within 30 s, and no stall over 5 s while fans wait — no gap between \
                         admissions, no run of the room's ticks in cool-down with the core under target.\n\n{table}",
                        report::machine()
                    ),
                )?;
            }
            anyhow::ensure!(!check || r.ok(), "the sale with the core stopped missed its goals:\n{table}");
        }
        Cmd::Rooms { fans, dry_run, check, stop_core_at: None, .. } => {
            let r = rooms::run(fans).await?;
            let table = r.table();
            println!("{table}\n{}", serde_json::to_string_pretty(&r)?);
            if !dry_run {
                report::merge_summary("rooms_side_by_side", serde_json::to_value(&r)?)?;
                report::write_section(
                    "rooms",
                    &format!(
                        "## Two sales on one edge\n\n\
                         Command: `cargo build --release -p wicket-edge -p wicket-core -p wicket-bench && target/release/wicket-bench rooms --fans {fans}`\n\n\
                         Machine: {}. The real `wicket` edge and a separate `wicket-core` process (durable embedded store); two \
                         rooms with a cautious start (auto release, start 2/s, min 1/s, max 2000/s, P99 target 100 ms) at an idle \
                         core. Each sale has {fans} fans who join within 2 s, poll as told, hold one ticket through the edge once \
                         admitted and stay on the site (a protected page every 5 s). One after another: sale A, then room b is \
                         created through the admin API and sale B runs with A's fans still on the site. At once: a fresh stack, \
                         both sales start together. Goal (issue #26): every fan of each sale admitted within 30 s of its first \
                         join.\n\n{table}",
                        report::machine()
                    ),
                )?;
            }
            anyhow::ensure!(!check || r.ok(), "not every fan of each sale was admitted within 30 s:\n{table}");
        }
        Cmd::Surge { scenario, quick, users, dry_run, layout, block, block_ms, flush_ms, seats, release_max, check } => {
            let mut s = surge::Scenario::preset(&scenario, quick)?;
            if let Some(u) = users {
                s.users = u;
            }
            if let Some(n) = seats {
                s.seats = n;
            }
            if let Some(n) = release_max {
                s.release_max = n;
            }
            anyhow::ensure!(matches!(layout.as_str(), "single" | "spread"), "--layout single | spread, not {layout}");
            s.layout = layout.clone();
            if layout == "single" {
                // Joins in flight for the spread layout's batches (every flush-ms); a single room answers
                // each join at once, and the default quarter of the connections keeps up with it.
                s.join_connections = 0;
            }
            s.spread.1 = block;
            s.spread.2 = block_ms;
            s.spread.3 = flush_ms;
            let r = surge::run(s, !quick).await?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({
                "scenario": r.scenario, "users": r.users, "seats": r.seats, "seconds": r.seconds,
                "admitted": r.admitted, "sold": r.sold, "abandoned": r.abandoned, "still_waiting": r.still_waiting, "sellout_seconds": r.sellout_seconds, "held_through_seconds": r.held_through_seconds,
                "admitted_sold_out_share": r.admitted_sold_out_share, "seat_order": r.seat_order,
                "waitlisted": r.waitlisted, "waitlisted_seated": r.waitlisted_seated,
                "oversold": r.oversold, "double_sold": r.double_sold, "over_limit_users": r.over_limit_users,
                "fifo_tau": if r.fifo_tau.is_nan() { serde_json::Value::Null } else { serde_json::json!(r.fifo_tau) },
                "fifo_tau_send_order": if r.fifo_tau_send_order.is_nan() { serde_json::Value::Null } else { serde_json::json!(r.fifo_tau_send_order) },
                "fifo_pairs_judged": if r.fifo_tau.is_nan() { serde_json::Value::Null } else { serde_json::json!(r.fifo_pairs_judged) },
                "p99_windows_ok": r.p99_windows_ok, "p99_windows": r.p99_windows,
                "client_p99_windows_ok": r.client_p99_windows_ok, "client_p99_windows": r.client_p99_windows,
                "drop_window": r.drop_window, "drop_window_client_p99_ok": r.drop_window_client_p99_ok, "drop_while_selling": r.drop_while_selling,
                "paid_out_seconds": r.paid_out_seconds,
                "longest_stall_seconds": r.longest_stall_s, "longest_stall_from_seconds": r.longest_stall_from_s,
                "bots_share_of_seats": r.bots_share_of_seats, "bots_share_of_population": r.bots_share_of_population, "bots_share_of_admitted": r.bots_share_of_admitted, "edge_rss_mb": r.edge_rss_mb,
                "requests_per_second": r.requests_per_second, "endpoints": r.endpoints, "statuses": r.statuses, "examples": r.examples,
                "crashes": r.crashes, "megasale": r.megasale,
            }))?);
            if !dry_run {
                let cmd = format!(
                    "cargo build --release --workspace && target/release/wicket-bench surge {scenario}{}{}{}{}{}{}",
                    if quick { " --quick" } else { "" },
                    users.map(|u| format!(" --users {u}")).unwrap_or_default(),
                    seats.map(|u| format!(" --seats {u}")).unwrap_or_default(),
                    release_max.map(|u| format!(" --release-max {u}")).unwrap_or_default(),
                    if scenario == "megasale" { format!(" --layout {layout}") } else { String::new() },
                    if scenario == "megasale" && layout == "spread" && (block, block_ms, flush_ms) != (500, 5, 300) {
                        format!(" --block {block} --block-ms {block_ms} --flush-ms {flush_ms}")
                    } else {
                        String::new()
                    },
                );
                surge::publish(&r, &cmd)?;
            }
            if check && let Some(m) = &r.megasale {
                let bad = megasale::check(m, quick);
                anyhow::ensure!(bad.is_empty(), "megasale: {}", bad.join("; "));
            }
            if check && r.megasale.is_none() {
                anyhow::ensure!(r.oversold == 0 && r.double_sold == 0 && r.over_limit_users == 0, "oversold {} double-sold {} over-limit {}", r.oversold, r.double_sold, r.over_limit_users);
                anyhow::ensure!(r.sold > 0, "nothing was sold");
                if let (Some((from, to)), Some(false)) = (r.drop_window, r.drop_while_selling) {
                    anyhow::bail!("the sale sold out (at {:?} s) before the capacity drop {from}-{to} s ended: the drop was not tested", r.sellout_seconds);
                }
                if let Some(c) = &r.crashes {
                    let mut bad = Vec::new();
                    if c.paid_lost > 0 {
                        bad.push(format!("{} paid orders lost (e.g. {:?})", c.paid_lost, c.paid_lost_examples));
                    }
                    if c.holds_lost > 0 {
                        bad.push(format!("{} acknowledged holds lost", c.holds_lost));
                    }
                    if c.places_changed > 0 || c.places_shared > 0 {
                        bad.push(format!("{} fans told another place, {} places given twice", c.places_changed, c.places_shared));
                    }
                    if r.fifo_tau.is_nan() || r.fifo_tau < 0.99 {
                        bad.push(format!("FIFO tau {:.4} < 0.99", r.fifo_tau));
                    }
                    // τ leaves out pairs whose joins overlapped: it must still judge most of them.
                    if r.fifo_pairs_judged < 0.5 {
                        bad.push(format!("FIFO tau judged only {:.3} of the pairs (joins overlapped)", r.fifo_pairs_judged));
                    }
                    if r.paid_out_seconds.is_none() {
                        bad.push("the sale did not sell out (every ticket paid)".into());
                    }
                    if !c.kills_while_selling {
                        bad.push(format!("not every kill happened mid-sale: {:?}", c.kills.iter().map(|k| (&k.what, k.at_s)).collect::<Vec<_>>()));
                    }
                    for k in &c.kills {
                        if let Some(e) = &k.restart_error {
                            bad.push(format!("{} did not come back: {e}", k.what));
                        }
                    }
                    anyhow::ensure!(bad.is_empty(), "crashes: {}", bad.join("; "));
                }
            }
        }
        Cmd::Holds { store, clients, seconds, dry_run, rounds } if store == "compare" => {
            let runs = holds::compare_durable(clients, seconds, rounds).await?;
            let by = |name: &str| runs.iter().find(|r| r.store == name);
            let (Some(durable), Some(memory), Some(aof)) = (by("embedded"), by("memory"), by("redis-aof")) else {
                anyhow::bail!("a store is missing from the comparison");
            };
            let vs_memory = durable.per_second() / memory.per_second().max(1.0);
            let vs_aof = durable.per_second() / aof.per_second().max(1.0);
            println!(
                "durable embedded {:.0} holds/s (P99 {:.2} ms) | memory {:.0} (P99 {:.2} ms) | Redis AOF always {:.0} (P99 {:.2} ms) | \
                 durable/memory {vs_memory:.3}, durable/redis-aof {vs_aof:.3}",
                durable.per_second(), durable.p99_ms(), memory.per_second(), memory.p99_ms(), aof.per_second(), aof.p99_ms()
            );
            if !dry_run {
                let command = format!(
                    "cargo build --release -p wicket-core -p wicket-bench && target/release/wicket-bench holds --store compare --clients {clients} --seconds {seconds} --rounds {rounds}"
                );
                let fig = |r: &holds::StoreRun| serde_json::json!({"holds_per_second": r.per_second().round(), "p50_ms": r.p50_ms(), "p99_ms": r.p99_ms(), "errors": r.errors()});
                report::merge_summary(
                    "embedded_durable_vs_memory",
                    serde_json::json!({"ratio": (vs_memory * 1000.0).round() / 1000.0, "durable": fig(durable), "memory": fig(memory),
                        "clients": clients, "seconds_per_round": seconds, "rounds": rounds, "command": command}),
                )?;
                report::merge_summary(
                    "embedded_durable_vs_redis_aof",
                    serde_json::json!({"ratio": (vs_aof * 1000.0).round() / 1000.0, "durable": fig(durable), "redis_aof_always": fig(aof),
                        "clients": clients, "seconds_per_round": seconds, "rounds": rounds, "command": command}),
                )?;
                let mut rows = String::new();
                for r in [durable, memory, aof] {
                    let each: Vec<String> = r.rounds.iter().map(|f| format!("{:.0}", f.per_second)).collect();
                    rows.push_str(&format!(
                        "| {} | {:.0} | {} | {:.2} ms | {:.2} ms | {} |\n",
                        match r.store {
                            "embedded" => "embedded, durable (fdatasync per group commit)",
                            "memory" => "memory (not durable)",
                            _ => "Redis, AOF `appendfsync always`",
                        },
                        r.per_second(),
                        each.join(" / "),
                        r.p50_ms(),
                        r.p99_ms(),
                        r.errors()
                    ));
                }
                report::write_section(
                    "embedded-durable",
                    &format!(
                        "## Durable embedded store vs in-memory vs Redis AOF always\n\n\
                         Command: `{command}`\n\n\
                         Machine: {}, shared (the core, the load generator and redis-server on the same cores). Three \
                         `wicket-core` processes (durable embedded store in a temp data dir; `store = \"memory\"`; a private \
                         redis-server with `appendonly yes`, `appendfsync always`), {clients} raw HTTP/1.1 keep-alive connections \
                         writing pre-built holds (fresh HS256 admission token and idempotency key each); the stores take turns, \
                         {rounds} rounds of {seconds} s. Every 201 of the durable store and of Redis is on disk (fdatasync / AOF \
                         fsync) before it is sent.\n\n\
                         | store | holds/s (mean) | per round | P50 | P99 | errors |\n|---|---|---|---|---|---|\n{rows}\n\
                         **embedded_durable_vs_memory = {vs_memory:.3}**, **embedded_durable_vs_redis_aof = {vs_aof:.3}** (goal ≥ 1.0).\n",
                        report::machine()
                    ),
                )?;
            }
        }
        Cmd::Holds { store, clients, seconds, dry_run, .. } => {
            anyhow::ensure!(
                store == "embedded" || store == "memory",
                "holds --store {store}: embedded, memory or compare (Redis: `--store compare`, or `holds-vs-evalsha`)"
            );
            let core = holds::start_core(&store).await?;
            holds::put_event(&core.base, "bench", 10_000_000).await?;
            // Warm up connections and code paths, then measure.
            holds::run_holds(&core.base, "bench", clients, Duration::from_secs(1)).await?;
            let f = holds::run_holds(&core.base, "bench", clients, Duration::from_secs(seconds)).await?;
            println!(
                "{store} store, {clients} clients, {:.1} s: {} holds, {:.0} holds/s, P50 {:.2} ms, P99 {:.2} ms, {} errors",
                f.seconds, f.holds, f.per_second, f.p50_ms, f.p99_ms, f.errors
            );
            if !dry_run {
                report::merge_summary(
                    &format!("core_holds_{store}"),
                    serde_json::json!({
                        "holds_per_second": f.per_second.round(),
                        "p50_ms": f.p50_ms, "p99_ms": f.p99_ms, "clients": clients, "seconds": seconds, "errors": f.errors,
                    }),
                )?;
                report::write_section(
                    &format!("core-holds-{store}"),
                    &format!(
                        "## Core holds on the {store} store\n\n\
                         Command: `cargo build --release -p wicket-core -p wicket-bench && target/release/wicket-bench holds --store {store} --clients {clients} --seconds {seconds}`\n\n\
                         Machine: {}. The real `wicket-core` binary on loopback HTTP/1.1 keep-alive; each hold carries a fresh \
                         HS256 admission token (signed by the client, verified by the core) and its own idempotency key; \
                         load generator and core share the machine's cores.\n\n\
                         | clients | holds/s | P50 | P99 | errors |\n|---|---|---|---|---|\n| {clients} | {:.0} | {:.2} ms | {:.2} ms | {} |\n",
                        report::machine(), f.per_second, f.p50_ms, f.p99_ms, f.errors
                    ),
                )?;
            }
        }
    }
    Ok(())
}
