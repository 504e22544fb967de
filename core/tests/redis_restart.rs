//! The re-check after a Redis restart (DESIGN §6, `core/src/recheck.rs`), on a real `redis-server` with
//! `appendfsync always` and a test payment provider whose answers the test holds back: the restart is
//! detected by the run id, holds are refused while CREATED orders are re-checked (callbacks still land), what
//! the provider says is paid becomes PAID, the rest stays CREATED, and holds are accepted again after.
//!
//! `cargo nextest run -p wicket-core --test redis_restart`

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::core_server::{TestCore, event_body};
use parking_lot::Mutex;
use serde_json::{Value, json};
use wicket_core::recheck::{RecheckReport, WatchOutcome};
use wicket_core::store::DynStore;
use wicket_core::store::redis::RedisStore;
use wicket_testkit::{RedisCluster, RedisServer};

/// What the test provider answers for an order.
#[derive(Clone)]
enum Answer {
    /// `SUCCESS` with txn `txn-<order id>` and this amount.
    Paid(u64),
    NotPaid,
    /// A 500: the status is unknown.
    Broken,
}

/// A payment provider's status query endpoint (docs/src/api.md "Payment status query"). Answers wait while `hold`
/// is set, so a test can look at the core in the middle of a re-check.
struct Provider {
    url: String,
    answers: Arc<Mutex<HashMap<String, Answer>>>,
    asked: Arc<AtomicUsize>,
    hold: tokio::sync::watch::Sender<bool>,
}

impl Provider {
    async fn start() -> Provider {
        use axum::extract::Query;
        let answers: Arc<Mutex<HashMap<String, Answer>>> = Arc::default();
        let asked = Arc::new(AtomicUsize::new(0));
        let (hold, held) = tokio::sync::watch::channel(false);
        let (a, n) = (answers.clone(), asked.clone());
        let app = axum::Router::new().route(
            "/query",
            axum::routing::get(move |Query(q): Query<HashMap<String, String>>| {
                let (answers, asked, mut held) = (a.clone(), n.clone(), held.clone());
                async move {
                    asked.fetch_add(1, Ordering::SeqCst);
                    let _ = held.wait_for(|h| !*h).await;
                    let id = q.get("order_id").cloned().unwrap_or_default();
                    let answer = answers.lock().get(&id).cloned().unwrap_or(Answer::Broken);
                    match answer {
                        Answer::Paid(amount) => (
                            axum::http::StatusCode::OK,
                            axum::Json(json!({"order_id": id, "status": "SUCCESS", "txn_id": format!("txn-{id}"), "amount_cents": amount})),
                        ),
                        Answer::NotPaid => (axum::http::StatusCode::OK, axum::Json(json!({"order_id": id, "status": "NOTPAY"}))),
                        Answer::Broken => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, axum::Json(json!({}))),
                    }
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        Provider { url: format!("http://{addr}/query"), answers, asked, hold }
    }

    fn answer(&self, order: &str, a: Answer) {
        self.answers.lock().insert(order.to_string(), a);
    }

    fn hold_answers(&self, on: bool) {
        self.hold.send_replace(on);
    }
}

/// Polls `check` until it is true; fails with `what` after `secs`.
async fn until<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn redis_core(url: &str, query: &str) -> TestCore {
    let store: DynStore = Arc::new(RedisStore::connect(url).await.expect("redis store"));
    TestCore::start_with(store, Some(query), 4096).await
}

fn hold_body(key: &str) -> Value {
    json!({"sku": "park", "qty": 1, "idempotency_key": key})
}

/// A new order of `user`; returns its id.
async fn order(c: &TestCore, user: &str) -> String {
    let (s, b) = c.hold("ev", user, &hold_body("k")).await;
    assert_eq!(s, 201, "{b}");
    b["order_id"].as_str().unwrap().to_string()
}

async fn state(c: &TestCore, id: &str) -> String {
    let (s, b) = c.get_json(&format!("/v1/orders/{id}"), true).await;
    assert_eq!(s, 200, "{b}");
    b["state"].as_str().unwrap().to_string()
}

async fn rechecking(c: &TestCore) -> bool {
    let (s, b) = c.get_json("/healthz", false).await;
    assert_eq!(s, 200);
    b["rechecking"].as_bool().unwrap()
}

async fn metrics(c: &TestCore) -> String {
    c.http.get(c.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

/// The 403 a hold gets during a re-check.
fn paused_body() -> Value {
    json!({
        "error": "event_paused",
        "message": "the sale is paused while unpaid orders are re-checked with the payment provider (the sale store \
                    restarted, or this core just started); retry in a few seconds"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restart_rechecks_created_orders_before_holds_reopen() {
    let mut redis = RedisServer::start_aof();
    let provider = Provider::start().await;
    let c = redis_core(&redis.url(), &provider.url).await;
    assert_eq!(c.put_event("ev", &event_body(10, 5, 4, json!([]))).await, 201);
    let (cr, pr) = (&c, &provider);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    c.core.spawn_background(stop);
    // The first check since start re-checks too (nothing CREATED yet), then holds open; it is no restart.
    until(10, "the startup re-check", || async move { !rechecking(cr).await }).await;
    let m = metrics(&c).await;
    assert!(m.contains("wicket_core_recheck_runs_total{reason=\"startup\"} 1"), "{m}");
    assert!(m.contains("wicket_core_redis_restarts_total 0"), "{m}");

    let paid = order(&c, "paid").await;
    let unpaid = order(&c, "unpaid").await;
    let unknown = order(&c, "unknown").await;
    let by_callback = order(&c, "callback").await;
    provider.answer(&paid, Answer::Paid(100));
    provider.answer(&unpaid, Answer::NotPaid);
    provider.answer(&unknown, Answer::Broken);
    // The provider knows this one as paid, and its (delayed) callback arrives during the re-check.
    provider.answer(&by_callback, Answer::Paid(100));
    provider.hold_answers(true);

    redis.kill9();
    redis.restart();
    // The watcher sees the new run id and starts asking the provider, which holds its answers.
    until(15, "the re-check to ask the provider", || async move { pr.asked.load(Ordering::SeqCst) > 0 }).await;

    // Holds are refused, before the store is asked: the token stays unused.
    let token = c.token("ev", "late");
    let r = c.http.post(c.url("/v1/events/ev/holds")).bearer_auth(&token).json(&hold_body("k-late")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(r.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("2"));
    assert_eq!(r.json::<Value>().await.unwrap(), paused_body());
    assert_eq!(c.hold("ev", "other", &hold_body("k-other")).await, (403, paused_body()));
    assert_eq!(c.get_json("/v1/events/ev", false).await.1["status"], "paused");
    assert_eq!(c.get_json("/healthz", false).await, (200, json!({"status": "ok", "rechecking": true})));
    let m = metrics(&c).await;
    assert!(m.contains("wicket_core_rechecking 1"), "{m}");
    assert!(m.contains("wicket_core_redis_restarts_total 1"), "{m}");
    // A payment callback is accepted meanwhile: a paid order is never refused.
    let txn = format!("txn-{by_callback}");
    assert_eq!(
        c.pay(&by_callback, &txn, 100).await,
        (200, json!({"result": "paid", "order_id": by_callback, "state": "PAID"}))
    );

    provider.hold_answers(false);
    until(15, "the re-check to finish", || async move { !rechecking(cr).await }).await;
    assert_eq!(state(&c, &paid).await, "PAID");
    assert_eq!(c.get_json(&format!("/v1/orders/{paid}"), true).await.1["txn_id"], json!(format!("txn-{paid}")));
    assert_eq!(state(&c, &unpaid).await, "CREATED", "not paid: left for the sweeper at its deadline");
    assert_eq!(state(&c, &unknown).await, "CREATED", "unknown: left and counted");
    assert_eq!(state(&c, &by_callback).await, "PAID");
    assert_eq!(provider.asked.load(Ordering::SeqCst), 4, "each CREATED order asked once");
    let m = metrics(&c).await;
    for line in [
        "wicket_core_recheck_orders_total{result=\"paid\"} 1",
        "wicket_core_recheck_orders_total{result=\"not_paid\"} 1",
        "wicket_core_recheck_orders_total{result=\"unknown\"} 1",
        "wicket_core_recheck_orders_total{result=\"moved\"} 1",
        "wicket_core_recheck_runs_total{reason=\"restart\"} 1",
        "wicket_core_recheck_runs_total{reason=\"startup\"} 1",
        "wicket_core_redis_restarts_total 1",
        "wicket_core_rechecking 0",
    ] {
        assert!(m.contains(line), "missing {line:?} in\n{m}");
    }

    // Open again: the refused token still works, and the event says so.
    let (s, b) = c.hold_with("ev", &token, &hold_body("k-late")).await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["state"], "CREATED");
    assert_eq!(c.get_json("/v1/events/ev", false).await.1["status"], "open");
    let (_, stock) = c.get_json("/v1/events/ev/stock", false).await;
    assert_eq!(stock["pools"]["park"], json!({"capacity": 10, "available": 5, "held": 3, "sold": 2}));
    let (_, rec) = c.get_json("/v1/events/ev/reconcile", true).await;
    assert_eq!(rec["ok"], true, "{rec}");
    // The same servers again: nothing more to do.
    assert_eq!(c.core.watch_store_once().await, WatchOutcome::Unchanged);
    let _ = stop_tx.send(true);
}

/// A core starting on a Redis that already holds CREATED orders is no restart, but it cannot know what
/// happened while it was down: it re-checks before its first hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_core_starting_on_an_existing_redis_rechecks_before_its_first_hold() {
    let redis = RedisServer::start_aof();
    let provider = Provider::start().await;
    let first = redis_core(&redis.url(), &provider.url).await;
    assert_eq!(first.put_event("ev", &event_body(10, 5, 4, json!([]))).await, 201);
    let paid = order(&first, "paid").await;
    let unpaid = order(&first, "unpaid").await;
    provider.answer(&paid, Answer::Paid(100));
    provider.answer(&unpaid, Answer::NotPaid);
    provider.hold_answers(true);

    let c = redis_core(&redis.url(), &provider.url).await;
    let (cr, pr) = (&c, &provider);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    c.core.spawn_background(stop);
    // Refused from the start, before the watcher has even looked.
    assert_eq!(c.hold("ev", "early", &hold_body("k")).await, (403, paused_body()));
    until(15, "the startup re-check to ask the provider", || async move { pr.asked.load(Ordering::SeqCst) > 0 }).await;
    assert_eq!(c.hold("ev", "early", &hold_body("k")).await, (403, paused_body()));
    provider.hold_answers(false);
    until(15, "the startup re-check to finish", || async move { !rechecking(cr).await }).await;
    assert_eq!(state(&c, &paid).await, "PAID");
    assert_eq!(state(&c, &unpaid).await, "CREATED");
    let m = metrics(&c).await;
    for line in [
        "wicket_core_recheck_orders_total{result=\"paid\"} 1",
        "wicket_core_recheck_orders_total{result=\"not_paid\"} 1",
        "wicket_core_recheck_runs_total{reason=\"startup\"} 1",
        "wicket_core_redis_restarts_total 0",
    ] {
        assert!(m.contains(line), "missing {line:?} in\n{m}");
    }
    assert_eq!(c.hold("ev", "early", &hold_body("k")).await.0, 201);
    let _ = stop_tx.send(true);
}

/// On a Cluster every master's run id is watched: restarting one master is a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_cluster_master_is_a_restart() {
    let mut cluster = RedisCluster::start(3);
    let provider = Provider::start().await;
    let store: DynStore = Arc::new(RedisStore::connect_cluster(&cluster.seeds()).await.expect("cluster store"));
    let ids = store.server_ids().await.unwrap();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let c = TestCore::start_with(store, Some(&provider.url), 4096).await;
    assert_eq!(
        c.core.watch_store_once().await,
        WatchOutcome::Rechecked { reason: "startup", report: RecheckReport::default() }
    );
    assert_eq!(c.core.watch_store_once().await, WatchOutcome::Unchanged);
    cluster.nodes[1].restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.core.watch_store_once().await {
            WatchOutcome::Rechecked { reason, .. } => {
                assert_eq!(reason, "restart");
                break;
            }
            other => assert!(Instant::now() < deadline, "restart not seen: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(metrics(&c).await.contains("wicket_core_redis_restarts_total 1"));
    assert_eq!(c.core.watch_store_once().await, WatchOutcome::Unchanged);
}
