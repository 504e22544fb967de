//! A real core on `127.0.0.1:0` for HTTP tests, with HS256 and EdDSA keys and helpers to mint tokens and
//! sign payment callbacks.

use std::net::SocketAddr;
use std::sync::Arc;

use wicket_core::Core;
use wicket_core::config::CoreConfig;
use wicket_core::store::DynStore;
use wicket_core::token::{AdmissionClaims, Keyring};
use wicket_testkit::core_toml::CoreToml;

pub const ADMIN: &str = "test-admin-token-0123456789";
pub const CALLBACK_SECRET: &str = "test-callback-secret-0123456789";
pub const HS_SECRET: &str = "test-hs256-secret-0123456789abcdef";

/// A core serving on a free port until dropped.
pub struct TestCore {
    pub addr: SocketAddr,
    pub base: String,
    pub core: Arc<Core>,
    pub keys: Keyring,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The test config: HS256 key `hs` (signing) and the demo EdDSA key `ed`.
pub fn config_text(query_url: Option<&str>, max_inflight: usize) -> String {
    let keys = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/keys");
    let mut cfg = CoreToml::new(ADMIN, CALLBACK_SECRET, HS_SECRET);
    if let Some(u) = query_url {
        cfg = cfg.payment(&format!("query-url = \"{u}\"")).payment("unknown-grace-seconds = 60");
    }
    cfg.core(&format!("max-inflight = {max_inflight}"))
        .key(&format!(
            "kid = \"ed\"\nalg = \"EdDSA\"\nprivate-key-file = \"{keys}/demo-ed25519.pem\"\npublic-key-file = \"{keys}/demo-ed25519.pub.pem\""
        ))
        .build()
}

impl TestCore {
    pub async fn start(store: DynStore) -> TestCore {
        Self::start_with(store, None, 4096).await
    }

    pub async fn start_with(store: DynStore, query_url: Option<&str>, max_inflight: usize) -> TestCore {
        let cfg = CoreConfig::from_toml_str(&config_text(query_url, max_inflight)).expect("test config is valid");
        Self::start_config(store, cfg).await
    }

    /// A core from a config of the test's own (start from [`config_text`] and change what the test needs),
    /// served by the core's own server ([`wicket_core::serve`]), as `wicket-core serve` does.
    pub async fn start_config(store: DynStore, cfg: CoreConfig) -> TestCore {
        let errs = cfg.validate();
        assert!(errs.is_empty(), "test config is invalid: {errs:?}");
        let core = Arc::new(Core::new(&cfg, store).await.expect("core starts"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let router = core.router();
        let header_timeout = cfg.core.header_timeout();
        let tls = cfg.tls.as_ref().map(|t| wicket_core::tls::TlsAcceptor::new(t).expect("test certificate loads"));
        let scheme = if tls.is_some() { "https" } else { "http" };
        tokio::spawn(async move {
            let stop = async {
                let _ = rx.await;
            };
            wicket_core::serve::serve(listener, router, header_timeout, tls, stop).await.unwrap();
        });
        TestCore {
            addr,
            base: format!("{scheme}://{addr}"),
            core,
            keys: Keyring::from_config(&cfg.tokens).unwrap(),
            http: reqwest::Client::builder().pool_max_idle_per_host(256).build().unwrap(),
            stop: Some(tx),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn claims(&self, event: &str, sub: &str) -> AdmissionClaims {
        self.keys.new_claims(event, sub, "room-1", 1, 6, 120)
    }

    /// A fresh HS256 admission token for `sub` on `event`.
    pub fn token(&self, event: &str, sub: &str) -> String {
        self.keys.sign(&self.claims(event, sub), None).unwrap()
    }

    pub fn sign_claims(&self, c: &AdmissionClaims, kid: &str) -> String {
        self.keys.sign(c, Some(kid)).unwrap()
    }

    /// PUT an event as admin; returns the status.
    pub async fn put_event(&self, id: &str, body: &serde_json::Value) -> u16 {
        self.http
            .put(self.url(&format!("/v1/events/{id}")))
            .bearer_auth(ADMIN)
            .json(body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// POST a hold with a fresh token; returns (status, body).
    pub async fn hold(&self, event: &str, sub: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let token = self.token(event, sub);
        self.hold_with(event, &token, body).await
    }

    pub async fn hold_with(&self, event: &str, token: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let r = self
            .http
            .post(self.url(&format!("/v1/events/{event}/holds")))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// A signed payment callback; returns (status, body).
    pub async fn pay(&self, order: &str, txn: &str, amount: u64) -> (u16, serde_json::Value) {
        let body = serde_json::json!({"order_id": order, "txn_id": txn, "amount_cents": amount, "status": "SUCCESS"}).to_string();
        let t = time::OffsetDateTime::now_utc().unix_timestamp();
        let sig = wicket_core::payment::sign(body.as_bytes(), CALLBACK_SECRET.as_bytes(), t);
        let r = self
            .http
            .post(self.url("/v1/payments/callback"))
            .header("Wicket-Signature", sig)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    pub async fn get_json(&self, path: &str, admin: bool) -> (u16, serde_json::Value) {
        let mut rb = self.http.get(self.url(path));
        if admin {
            rb = rb.bearer_auth(ADMIN);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    pub async fn post_admin(&self, path: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
        let mut rb = self.http.post(self.url(path)).bearer_auth(ADMIN);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }
}

impl Drop for TestCore {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// The example event body with `opens_at` an hour ago.
pub fn event_body(park: u32, zoo: u32, seats: usize, limits: serde_json::Value) -> serde_json::Value {
    let now = time::OffsetDateTime::now_utc();
    let fmt = &time::format_description::well_known::Rfc3339;
    serde_json::json!({
        "name": "Test sale",
        "opens_at": (now - time::Duration::hours(1)).format(fmt).unwrap(),
        "closes_at": (now + time::Duration::days(1)).format(fmt).unwrap(),
        "hold_seconds": 900,
        "pools": [
            {"id": "park", "capacity": park},
            {"id": "zoo", "capacity": zoo},
            {"id": "stalls", "seats": (1..=seats).map(|i| format!("A-{i}")).collect::<Vec<_>>()}
        ],
        "skus": [
            {"id": "park", "pools": ["park"], "price_cents": 100},
            {"id": "park+zoo", "pools": ["park", "zoo"], "price_cents": 150},
            {"id": "stalls", "pools": ["stalls"], "price_cents": 68000, "max_qty": 4}
        ],
        "limits": limits
    })
}


/// What a surge over HTTP sold.
pub struct SurgeOutcome {
    /// Tickets of every 201.
    pub total: u64,
    pub per_user: std::collections::HashMap<String, u64>,
    pub statuses: std::collections::HashMap<u16, usize>,
}

/// 64 concurrent clients make 20,000 hold attempts on `event` (SKU `park`, 1 or 2 tickets, 800 users),
/// spread round-robin over `cores`.
pub async fn surge(cores: &[Arc<TestCore>], event: &str) -> SurgeOutcome {
    let mut tasks = Vec::new();
    for t in 0..64usize {
        let core = cores[t % cores.len()].clone();
        let event = event.to_string();
        tasks.push(tokio::spawn(async move {
            let mut won: Vec<(String, u64)> = Vec::new();
            let mut statuses = std::collections::HashMap::<u16, usize>::new();
            for i in 0..(20_000 / 64 + 1) {
                let user = format!("user-{}", (t * 1000 + i) % 800);
                let body = serde_json::json!({"sku": "park", "qty": 1 + (i % 2), "idempotency_key": format!("{t}-{i}")});
                let (s, b) = core.hold(&event, &user, &body).await;
                *statuses.entry(s).or_default() += 1;
                if s == 201 {
                    won.push((user, b["qty"].as_u64().unwrap_or(0)));
                }
            }
            (won, statuses)
        }));
    }
    let mut out = SurgeOutcome { total: 0, per_user: Default::default(), statuses: Default::default() };
    for t in tasks {
        let (won, st) = t.await.expect("surge client");
        for (u, q) in won {
            out.total += q;
            *out.per_user.entry(u).or_default() += q;
        }
        for (k, v) in st {
            *out.statuses.entry(k).or_default() += v;
        }
    }
    out
}

/// The replay rule (issue #17 item 4): a replay (same token or a new one, same key and body) is answered
/// from the order it made — even while the SKU is remembered sold out, and while holds are paused for a
/// re-check. Capacity 1: A holds → 201, B holds → 409 `sold_out` (now remembered), A replays → 200, same order.
pub async fn replay_is_answered_from_its_order(c: &TestCore, event: &str) {
    assert_eq!(c.put_event(event, &event_body(1, 1, 1, serde_json::json!([]))).await, 201);
    let body = serde_json::json!({"sku": "park", "qty": 1, "idempotency_key": "ka"});
    let token_a = c.token(event, "alice");
    let (s, first) = c.hold_with(event, &token_a, &body).await;
    assert_eq!(s, 201, "{first}");
    let order = first["order_id"].as_str().unwrap().to_string();
    let (s, b) = c.hold(event, "bob", &serde_json::json!({"sku": "park", "qty": 1, "idempotency_key": "kb"})).await;
    assert_eq!((s, b["error"].as_str()), (409, Some("sold_out")), "{b}");
    // Within the sold-out memory (500 ms): the same request again, with its own token and with a new one.
    let (s, b) = c.hold_with(event, &token_a, &body).await;
    assert_eq!((s, b["order_id"].as_str()), (200, Some(order.as_str())), "replay with the same token: {b}");
    let (s, b) = c.hold(event, "alice", &body).await;
    assert_eq!((s, b["order_id"].as_str()), (200, Some(order.as_str())), "replay with a new token: {b}");
    assert_eq!(b, first, "the replay answers with the order as created");
    // The same key with another body is still a conflict, and a new key is still sold out (from memory).
    let (s, b) = c.hold(event, "alice", &serde_json::json!({"sku": "park", "qty": 2, "idempotency_key": "ka"})).await;
    assert_eq!((s, b["error"].as_str()), (409, Some("idem_conflict")), "{b}");
    let (s, b) = c.hold(event, "carol", &serde_json::json!({"sku": "park", "qty": 1, "idempotency_key": "kc"})).await;
    assert_eq!((s, b["error"].as_str()), (409, Some("sold_out")), "{b}");
    // During a re-check pause: the replay is answered, a new hold waits (403 event_paused).
    c.core.state.set_rechecking(true);
    let (s, b) = c.hold(event, "alice", &body).await;
    assert_eq!((s, b["order_id"].as_str()), (200, Some(order.as_str())), "replay during a re-check: {b}");
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let (s, b) = c.hold(event, "dave", &serde_json::json!({"sku": "zoo", "qty": 1, "idempotency_key": "kd"})).await;
    assert_eq!((s, b["error"].as_str()), (403, Some("event_paused")), "{b}");
    c.core.state.set_rechecking(false);
    let (s, b) = c.hold_with(event, &token_a, &body).await;
    assert_eq!((s, b["order_id"].as_str()), (200, Some(order.as_str())), "{b}");
}

/// A hold asking for more than is left is told how many are (`409 not_enough_left` with
/// `available`; the token stays unused, so the same token takes those), and the stock answer counts
/// the holds ever made and their tickets (`holds`, `hold_units`: the edge's release settles its
/// promises on them), which a close does not take back.
pub async fn fewer_left_and_hold_counts(c: &TestCore, event: &str) {
    assert_eq!(c.put_event(event, &event_body(5, 3, 1, serde_json::json!([]))).await, 201);
    let path = format!("/v1/events/{event}/stock");
    let s0 = c.get_json(&path, false).await.1;
    assert_eq!((s0["holds"].as_u64(), s0["hold_units"].as_u64()), (Some(0), Some(0)), "{s0}");
    let hold = |sku: &str, qty: u32, key: &str| serde_json::json!({"sku": sku, "qty": qty, "idempotency_key": key});
    let (s, a) = c.hold(event, "alice", &hold("park", 4, "a")).await;
    assert_eq!(s, 201, "{a}");
    // One left of park: a hold of 2 is told so, with the number, and nothing is written.
    let t = c.token(event, "bob");
    let (s, b) = c.hold_with(event, &t, &hold("park", 2, "b")).await;
    assert_eq!((s, b["error"].as_str(), b["available"].as_u64()), (409, Some("not_enough_left"), Some(1)), "{b}");
    assert!(b["message"].as_str().is_some_and(|m| m.contains("1 left")), "{b}");
    assert_eq!(c.get_json(&path, false).await.1["pools"]["park"]["available"], 1, "nothing written");
    // The same token, same key, for what is left.
    let (s, b) = c.hold_with(event, &t, &hold("park", 1, "b")).await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = c.hold(event, "carol", &hold("park", 1, "c")).await;
    assert_eq!((s, b["error"].as_str(), b.get("available")), (409, Some("sold_out"), None), "none left is sold out: {b}");
    let st = c.get_json(&path, false).await.1;
    assert_eq!((st["holds"].as_u64(), st["hold_units"].as_u64()), (Some(2), Some(5)), "{st}");
    // Closing an order gives its tickets back but not its count.
    let order = a["order_id"].as_str().unwrap();
    assert_eq!(c.post_admin(&format!("/v1/orders/{order}/cancel"), None).await.0, 200);
    let st = c.get_json(&path, false).await.1;
    assert_eq!((st["pools"]["park"]["available"].as_u64(), st["holds"].as_u64(), st["hold_units"].as_u64()), (Some(4), Some(2), Some(5)), "{st}");
    // A combo over two pools is one hold.
    let (s, b) = c.hold(event, "erin", &hold("park+zoo", 3, "e")).await;
    assert_eq!(s, 201, "{b}");
    let st = c.get_json(&path, false).await.1;
    assert_eq!((st["holds"].as_u64(), st["hold_units"].as_u64()), (Some(3), Some(8)), "{st}");
}

/// The waitlist over HTTP (issue #39): a hold with `"wait": true` that finds none left while unpaid holds
/// may give tickets back is told `409 sold_out` with `restock_possible`, `returning`, `waitlist_ahead` and
/// `Retry-After: 2`; its token stays unused; the ticket that comes back is its, not a later fan's; a hold
/// without `"wait"` gets the plain answer (and the sold-out shortcut does not answer for a waiting one).
pub async fn a_waiting_hold_is_first_for_a_ticket_that_comes_back(c: &TestCore, event: &str) {
    assert_eq!(c.put_event(event, &event_body(1, 1, 1, serde_json::json!([]))).await, 201);
    let hold = |key: &str, wait: bool| serde_json::json!({"sku": "park", "qty": 1, "idempotency_key": key, "wait": wait});
    let (s, a) = c.hold(event, "ann", &hold("a", false)).await;
    assert_eq!(s, 201, "{a}");
    // Bob does not wait: the plain answer (and it is remembered for a moment, for holds that do not wait).
    let (s, b) = c.hold(event, "bob", &hold("b", false)).await;
    assert_eq!((s, b["error"].as_str(), b.get("restock_possible")), (409, Some("sold_out"), None), "{b}");
    // A `wait` that is not a boolean is refused (400, nothing written, the token unused).
    let cat = c.token(event, "cat");
    let (s, b) = c.hold_with(event, &cat, &serde_json::json!({"sku": "park", "qty": 1, "idempotency_key": "c", "wait": "yes"})).await;
    assert_eq!((s, b["error"].as_str()), (400, Some("bad_request")), "{b}");
    assert!(b["message"].as_str().is_some_and(|m| m.contains("wait")), "{b}");
    // Cat waits: sold out for now, on the list, told when to ask again.
    let r = c
        .http
        .post(c.url(&format!("/v1/events/{event}/holds")))
        .bearer_auth(&cat)
        .json(&hold("c", true))
        .send()
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), r.headers().get("retry-after").and_then(|v| v.to_str().ok())), (409, Some("2")));
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (b["error"].as_str(), b["restock_possible"].as_bool(), b["returning"].as_u64(), b["waitlist_ahead"].as_u64()),
        (Some("sold_out"), Some(true), Some(1), Some(0)),
        "{b}"
    );
    let st = c.get_json(&format!("/v1/events/{event}/stock"), false).await.1;
    assert_eq!(st["waiting"].as_u64(), Some(1), "{st}");
    // Dan waits too, behind Cat's ticket.
    let dan = c.token(event, "dan");
    let (s, b) = c.hold_with(event, &dan, &hold("d", true)).await;
    assert_eq!((s, b["restock_possible"].as_bool(), b["waitlist_ahead"].as_u64()), (409, Some(true), Some(1)), "{b}");
    // Ann's ticket comes back: Dan and a fan who does not wait are refused it; Cat's same token takes it.
    let order = a["order_id"].as_str().unwrap();
    assert_eq!(c.post_admin(&format!("/v1/orders/{order}/cancel"), None).await.0, 200);
    let (s, b) = c.hold_with(event, &dan, &hold("d", true)).await;
    assert_eq!((s, b["error"].as_str(), b["returning"].as_u64()), (409, Some("sold_out"), Some(1)), "{b}");
    let (s, b) = c.hold(event, "eve", &hold("e", false)).await;
    assert_eq!((s, b["error"].as_str()), (409, Some("sold_out")), "{b}");
    let (s, b) = c.hold_with(event, &cat, &hold("c", true)).await;
    assert_eq!((s, b["qty"].as_u64()), (201, Some(1)), "{b}");
    // Cat's hold is unpaid and may come back: Dan keeps waiting, first now.
    let (s, b) = c.hold_with(event, &dan, &hold("d", true)).await;
    assert_eq!((s, b["restock_possible"].as_bool(), b["waitlist_ahead"].as_u64()), (409, Some(true), Some(0)), "{b}");
}
