//! The Redis store's wait settings (`[redis]` `wait-replicas` / `wait-aof`, issue #17 item 5): every
//! acknowledged change is confirmed by a replica before its answer.
//!
//! - the conformance suite on a master with one replica, every change waited;
//! - a replica that is gone: 503 `durability_timeout` (counted), the change stays on the master, and a retry
//!   with the same idempotency key answers with its order once a replica confirms it;
//! - `wait-aof` where WAITAOF cannot work refuses to start;
//! - failover: a 3-master Cluster with a replica each, a burst of holds over HTTP, the master of the
//!   event's slot SIGKILLed mid-burst, its replica promoted: every hold the waiting core acknowledged is an
//!   order on the new master. `WICKET_FAILOVER_ROUNDS` rounds (default 2; 20 for the long run). A second
//!   core without the wait runs the same burst; its losses are printed, not asserted (they are a matter of
//!   timing).
//!
//! `cargo nextest run -p wicket-core --test redis_wait`

mod common;
mod conformance;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::core_server::{TestCore, event_body};
use conformance::OnRedis;
use wicket_core::store::redis::{RedisStore, WaitPolicy};
use wicket_testkit::{RedisCluster, RedisServer};

fn wait_one(ms: u64) -> WaitPolicy {
    WaitPolicy { replicas: 1, aof: false, timeout: Duration::from_millis(ms) }
}

/// A master and its replica.
async fn replicated() -> OnRedis<(RedisServer, RedisServer)> {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let store = RedisStore::connect_with(&master.url(), wait_one(500)).await.expect("connect to the test redis");
    OnRedis { store: Arc::new(store), servers: (master, replica) }
}

conformance_suite!(replicated);

/// The replica dies: a hold is made on the master but not confirmed → 503 `durability_timeout` with
/// `Retry-After`, counted; its replay is 503 too (a replay acknowledges the hold, so it waits as well); a new
/// replica syncs → the replay answers 200 with the order, which was made once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_its_replica_a_hold_is_503_and_its_retry_answers_the_order_later() {
    let master = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&master);
    let store = RedisStore::connect_with(&master.url(), wait_one(50)).await.unwrap();
    let c = TestCore::start(Arc::new(store)).await;
    assert_eq!(c.put_event("dur", &event_body(10, 10, 1, serde_json::json!([]))).await, 201);
    let body = serde_json::json!({"sku": "park", "qty": 1, "idempotency_key": "k1"});
    let (s, first) = c.hold("dur", "alice", &body).await;
    assert_eq!(s, 201, "{first}");

    replica.kill9();
    let token = c.token("dur", "bob");
    let bob = serde_json::json!({"sku": "park", "qty": 2, "idempotency_key": "k2"});
    let r = c.http.post(c.url("/v1/events/dur/holds")).bearer_auth(&token).json(&bob).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["error"], "durability_timeout", "{b}");
    // Applied on the master all the same (reads do not wait).
    let (_, stock) = c.get_json("/v1/events/dur/stock", false).await;
    assert_eq!(stock["pools"]["park"]["held"], 3, "{stock}");
    let (s, b) = c.hold("dur", "bob", &bob).await;
    assert_eq!((s, b["error"].as_str()), (503, Some("durability_timeout")), "a replay waits too: {b}");
    let text = c.http.get(c.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("wicket_core_durability_timeouts_total{route=\"hold\"} 2"), "{text}");

    let _replica2 = RedisServer::start_replica_of(&master);
    // Retried as Retry-After says: on a loaded machine the new replica may miss the first 50 ms wait.
    let (mut s, mut b) = c.hold("dur", "bob", &bob).await;
    for _ in 0..10 {
        if s != 503 || b["error"] != "durability_timeout" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        (s, b) = c.hold("dur", "bob", &bob).await;
    }
    assert_eq!(s, 200, "the retry answers with the order: {b}");
    assert_eq!(b["qty"], 2, "{b}");
    let (_, stock) = c.get_json("/v1/events/dur/stock", false).await;
    assert_eq!(stock["pools"]["park"]["held"], 3, "made once: {stock}");
}

/// `wait-aof` on a server where WAITAOF cannot work (Redis < 7.2, or `appendonly no`): the core refuses to
/// start, naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_aof_where_waitaof_cannot_work_refuses_to_start() {
    let server = RedisServer::start();
    let policy = WaitPolicy { replicas: 0, aof: true, timeout: Duration::from_millis(50) };
    let err = RedisStore::connect_with(&server.url(), policy).await.err().expect("must refuse");
    assert!(err.to_string().contains("redis.wait-aof"), "{err}");
}

/// What one burst client saw.
#[derive(Default)]
struct Seen {
    /// Order ids of every 2xx.
    acked: Vec<String>,
    statuses: HashMap<String, usize>,
}

/// Holds on `event` from `clients` tasks until `stop`, each with a fresh token and its own key.
fn burst(core: Arc<TestCore>, event: String, tag: String, clients: usize, stop: Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<Seen>> {
    (0..clients)
        .map(|t| {
            let (core, event, tag, stop) = (core.clone(), event.clone(), tag.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = Seen::default();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let body = serde_json::json!({"sku": "park", "qty": 1, "idempotency_key": format!("{tag}-{t}-{i}")});
                    let (s, b) = core.hold(&event, &format!("{tag}-u{t}-{i}"), &body).await;
                    let label = match b["error"].as_str() {
                        Some(e) => format!("{s} {e}"),
                        None => s.to_string(),
                    };
                    *seen.statuses.entry(label).or_default() += 1;
                    if (200..300).contains(&s) {
                        seen.acked.push(b["order_id"].as_str().unwrap_or_default().to_string());
                    }
                    i += 1;
                }
                seen
            })
        })
        .collect()
}

async fn collect(tasks: Vec<tokio::task::JoinHandle<Seen>>) -> Seen {
    let mut all = Seen::default();
    for t in tasks {
        let s = t.await.expect("burst client");
        all.acked.extend(s.acked);
        for (k, v) in s.statuses {
            *all.statuses.entry(k).or_default() += v;
        }
    }
    all
}

/// Of `orders`, those that are not orders on the cluster now.
async fn missing(store: &RedisStore, orders: &[String]) -> Vec<String> {
    use wicket_core::store::SaleStore;
    let mut out = Vec::new();
    for id in orders {
        let mut tries = 0;
        loop {
            match store.get_order(id).await {
                Ok(Some(_)) => break,
                Ok(None) => {
                    out.push(id.clone());
                    break;
                }
                Err(e) => {
                    tries += 1;
                    assert!(tries < 100, "cannot read {id}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_of_the_slot_master_loses_no_acknowledged_hold() {
    let rounds: usize = std::env::var("WICKET_FAILOVER_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let mut cluster = RedisCluster::start_with_replicas(3, 500);
    let seeds = cluster.seeds();
    let waited = RedisStore::connect_cluster_with(&seeds, wait_one(200)).await.expect("connect");
    let plain = RedisStore::connect_cluster(&seeds).await.expect("connect");
    let core_w = Arc::new(TestCore::start(Arc::new(waited)).await);
    let core_p = Arc::new(TestCore::start(Arc::new(plain)).await);
    let (mut lost_waited, mut lost_plain, mut acked_waited, mut acked_plain) = (0, 0, 0, 0);
    for round in 0..rounds {
        let event = format!("fo{round}");
        let started = Instant::now();
        loop {
            let s = core_w.put_event(&event, &event_body(1_000_000, 10, 1, serde_json::json!([]))).await;
            if s == 201 || s == 200 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "PUT event: {s}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let key = format!("wk:{{ev:{event}}}:ev");
        let victim = cluster.master_of(&key).expect("the slot has a master");
        let stop = Arc::new(AtomicBool::new(false));
        let w = burst(core_w.clone(), event.clone(), format!("w{round}"), 16, stop.clone());
        let p = burst(core_p.clone(), event.clone(), format!("p{round}"), 16, stop.clone());
        tokio::time::sleep(Duration::from_millis(400)).await;
        cluster.nodes[victim].kill9();
        let killed = Instant::now();
        let promoted = loop {
            if let Some(m) = cluster.master_of(&key)
                && m != victim
            {
                break m;
            }
            assert!(killed.elapsed() < Duration::from_secs(30), "round {round}: no replica was promoted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let failover = killed.elapsed();
        // Holds go on for a while on the new master (without a replica: the waiting core answers 503).
        tokio::time::sleep(Duration::from_millis(600)).await;
        stop.store(true, Ordering::Relaxed);
        let (w, p) = (collect(w).await, collect(p).await);

        let live: Vec<String> =
            cluster.nodes.iter().filter(|n| n.is_running()).map(|n| format!("redis://127.0.0.1:{}", n.port())).collect();
        let check = RedisStore::connect_cluster(&live).await.expect("connect to the survivors");
        let (mw, mp) = (missing(&check, &w.acked).await, missing(&check, &p.acked).await);
        eprintln!(
            "round {round}: failover in {failover:?} (node {victim} -> {promoted}); waiting core: {} acknowledged, {} \
             missing, {:?}; plain core: {} acknowledged, {} missing, {:?}",
            w.acked.len(),
            mw.len(),
            w.statuses,
            p.acked.len(),
            mp.len(),
            p.statuses
        );
        assert!(mw.is_empty(), "round {round}: holds acknowledged with the wait on are gone: {mw:?}");
        lost_waited += mw.len();
        lost_plain += mp.len();
        acked_waited += w.acked.len();
        acked_plain += p.acked.len();

        // The old master comes back as a replica of the new one, so the next round has a replica everywhere.
        cluster.nodes[victim].restart();
        cluster.nodes[victim].wait_link_up();
    }
    eprintln!(
        "{rounds} rounds: waiting core {acked_waited} acknowledged, {lost_waited} lost; plain core {acked_plain} \
         acknowledged, {lost_plain} lost"
    );
}
