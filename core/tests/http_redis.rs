//! The core's HTTP API on Redis: two core instances sharing one Redis sell exactly the capacity, and a dead
//! Redis is a quick 503 `unavailable` that heals by itself once Redis is back.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::core_server::{TestCore, event_body};
use serde_json::json;
use wicket_core::store::DynStore;
use wicket_core::store::redis::RedisStore;
use wicket_testkit::RedisServer;

async fn redis_store(url: &str) -> DynStore {
    Arc::new(RedisStore::connect(url).await.expect("redis store"))
}

/// 64 clients split across two cores on one Redis, 20,000 attempts at capacity 1,000: exactly 1,000 held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_cores_on_one_redis_sell_exactly_the_capacity() {
    let redis = RedisServer::start();
    let a = Arc::new(TestCore::start(redis_store(&redis.url()).await).await);
    let b = Arc::new(TestCore::start(redis_store(&redis.url()).await).await);
    assert_eq!(a.put_event("duo", &event_body(1000, 1, 1, json!([{"dimension": "user", "max": 2}]))).await, 201);
    let out = common::core_server::surge(&[a.clone(), b.clone()], "duo").await;
    assert_eq!(out.total, 1000, "{:?}", out.statuses);
    assert!(out.per_user.values().all(|&q| q <= 2));
    assert!(out.statuses.keys().all(|s| [201, 409].contains(s)), "{:?}", out.statuses);
    let (_, stock) = b.get_json("/v1/events/duo/stock", false).await;
    assert_eq!(stock["pools"]["park"], json!({"capacity": 1000, "available": 0, "held": 1000, "sold": 0}));
    let (_, rec) = a.get_json("/v1/events/duo/reconcile", true).await;
    assert_eq!(rec["ok"], true, "{rec}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_answered_from_its_order_while_sold_out() {
    let redis = RedisServer::start();
    let c = TestCore::start(redis_store(&redis.url()).await).await;
    common::core_server::replay_is_answered_from_its_order(&c, "ev").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewer_left_is_said_and_holds_are_counted() {
    let redis = RedisServer::start();
    let c = TestCore::start(redis_store(&redis.url()).await).await;
    common::core_server::fewer_left_and_hold_counts(&c, "ev").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_redis_is_a_quick_503_and_heals_without_a_restart() {
    let mut redis = RedisServer::start_aof();
    let c = TestCore::start(redis_store(&redis.url()).await).await;
    assert_eq!(c.put_event("ev", &event_body(10, 5, 1, json!([]))).await, 201);
    assert_eq!(c.hold("ev", "a", &json!({"sku": "park", "qty": 1, "idempotency_key": "k1"})).await.0, 201);
    redis.kill9();
    let started = Instant::now();
    let (s, b) = c.hold("ev", "b", &json!({"sku": "park", "qty": 1, "idempotency_key": "k2"})).await;
    assert_eq!((s, b["error"].as_str()), (503, Some("unavailable")), "{b}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(c.get_json("/v1/events/ev/stock", false).await.0, 503);
    assert_eq!(c.get_json("/healthz", false).await.0, 200, "the core stays up");
    redis.restart();
    // The same core, no restart: it reconnects by itself, and the acknowledged hold survived.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (s, _) = c.hold("ev", "b", &json!({"sku": "park", "qty": 1, "idempotency_key": "k2"})).await;
        if s == 201 || s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no recovery: last status {s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, stock) = c.get_json("/v1/events/ev/stock", false).await;
    assert_eq!(stock["pools"]["park"]["held"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_hold_is_first_for_a_ticket_that_comes_back() {
    let redis = RedisServer::start();
    let c = TestCore::start(redis_store(&redis.url()).await).await;
    common::core_server::a_waiting_hold_is_first_for_a_ticket_that_comes_back(&c, "ev").await;
}
