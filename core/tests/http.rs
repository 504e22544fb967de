//! The core's HTTP API over a real socket: status codes and bodies of docs/src/api.md, bad input without state change,
//! hostile tokens, bodies and connections, the surge over HTTP, and the sweeper against a real (test) payment
//! query endpoint.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::core_server::{ADMIN, CALLBACK_SECRET, HS_SECRET, TestCore, config_text, event_body};
use serde_json::{Value, json};
use wicket_core::clock::ManualClock;
use wicket_core::config::CoreConfig;
use wicket_core::store::DynStore;
use wicket_core::store::embedded::EmbeddedStore;

fn embedded() -> DynStore {
    Arc::new(EmbeddedStore::new())
}

fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

async fn setup(limits: Value) -> TestCore {
    let c = TestCore::start(embedded()).await;
    assert_eq!(c.put_event("ev", &event_body(10, 5, 4, limits)).await, 201);
    c
}

async fn stock(c: &TestCore, event: &str) -> Value {
    c.get_json(&format!("/v1/events/{event}/stock"), false).await.1
}

fn hold_body(sku: &str, qty: i64, key: &str) -> Value {
    json!({"sku": sku, "qty": qty, "idempotency_key": key})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_answered_from_its_order_while_sold_out_memory_store() {
    let c = TestCore::start(embedded()).await;
    common::core_server::replay_is_answered_from_its_order(&c, "ev").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_answered_from_its_order_while_sold_out_durable_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Default::default()).expect("data dir");
    let c = TestCore::start(Arc::new(store)).await;
    common::core_server::replay_is_answered_from_its_order(&c, "ev").await;
}

#[tokio::test]
async fn hold_answers_as_the_contract_says() {
    let c = setup(json!([{"dimension": "user", "max": 2}])).await;
    let (s, b) = c.hold("ev", "alice", &hold_body("park+zoo", 2, "k1")).await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["state"], "CREATED");
    assert_eq!(b["qty"], 2);
    assert_eq!(b["amount_cents"], 300);
    assert!(b["expires_at"].as_str().unwrap().ends_with('Z'));
    let order = b["order_id"].as_str().unwrap().to_string();
    // Replay: same key, same body, new token → 200, same order.
    let (s, b2) = c.hold("ev", "alice", &hold_body("park+zoo", 2, "k1")).await;
    assert_eq!(s, 200);
    assert_eq!(b2["order_id"], order.as_str());
    // Conflict: same key, other body.
    let (s, b3) = c.hold("ev", "alice", &hold_body("park", 1, "k1")).await;
    assert_eq!((s, b3["error"].as_str()), (409, Some("idem_conflict")));
    // Limit.
    let (s, b4) = c.hold("ev", "alice", &hold_body("park", 1, "k2")).await;
    assert_eq!((s, b4["error"].as_str()), (409, Some("limit_exceeded")));
    // Token replay: a used token with a new key.
    let t = c.token("ev", "bob");
    assert_eq!(c.hold_with("ev", &t, &hold_body("park", 1, "b1")).await.0, 201);
    let (s, b5) = c.hold_with("ev", &t, &hold_body("park", 1, "b2")).await;
    assert_eq!((s, b5["error"].as_str()), (409, Some("token_replay")));
    // ...but the same token with the same key and body is a replay.
    assert_eq!(c.hold_with("ev", &t, &hold_body("park", 1, "b1")).await.0, 200);
    // The order: the buyer sees it, a stranger does not, the admin does.
    let (s, o) = c
        .http
        .get(c.url(&format!("/v1/orders/{order}")))
        .bearer_auth(c.token("ev", "alice"))
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .unwrap();
    assert_eq!(s, 200);
    let o: Value = o.json().await.unwrap();
    assert_eq!(o["user"], "alice");
    assert_eq!(o["version"], 1);
    assert_eq!(o["redeemed_pools"], json!([]));
    let s = c.http.get(c.url(&format!("/v1/orders/{order}"))).bearer_auth(c.token("ev", "mallory")).send().await.unwrap().status();
    assert_eq!(s, 404);
    assert_eq!(c.get_json(&format!("/v1/orders/{order}"), true).await.0, 200);
    assert_eq!(c.get_json(&format!("/v1/orders/{order}"), false).await.0, 401);
}

#[tokio::test]
async fn sold_out_then_cancel_then_sale_again() {
    let c = setup(json!([])).await;
    let mut orders = Vec::new();
    for i in 0..5 {
        let (s, b) = c.hold("ev", &format!("u{i}"), &hold_body("park+zoo", 1, "k")).await;
        assert_eq!(s, 201);
        orders.push(b["order_id"].as_str().unwrap().to_string());
    }
    let (s, b) = c.hold("ev", "late", &hold_body("park+zoo", 1, "k")).await;
    assert_eq!((s, b["error"].as_str()), (409, Some("sold_out")));
    // The cached flag answers without touching the hold step, but only to a verified token (its `sub` is
    // needed to answer a replay first): no token or a bad one is 401.
    let r = c.http.post(c.url("/v1/events/ev/holds")).json(&hold_body("park+zoo", 1, "k")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = c.http.post(c.url("/v1/events/ev/holds")).bearer_auth("not.a.token").json(&hold_body("park+zoo", 1, "k")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let (s, b) = c.hold("ev", "late2", &hold_body("park+zoo", 1, "k")).await;
    assert_eq!((s, b["error"].as_str()), (409, Some("sold_out")));
    assert_eq!(stock(&c, "ev").await["skus"]["park+zoo"]["sold_out"], true);
    // The buyer cancels: stock is back and the flag is cleared.
    let r = c
        .http
        .post(c.url(&format!("/v1/orders/{}/cancel", orders[0])))
        .bearer_auth(c.token("ev", "u0"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let closed: Value = r.json().await.unwrap();
    assert_eq!((closed["state"].as_str(), closed["version"].as_i64()), (Some("CLOSED"), Some(2)));
    assert_eq!(stock(&c, "ev").await["skus"]["park+zoo"]["sold_out"], false);
    assert_eq!(c.hold("ev", "late", &hold_body("park+zoo", 1, "k")).await.0, 201);
    // Cancelling a closed order is not a transition.
    let r = c.post_admin(&format!("/v1/orders/{}/cancel", orders[0]), None).await;
    assert_eq!((r.0, r.1["error"].as_str()), (409, Some("invalid_transition")));
}

#[tokio::test]
async fn payments_redeem_refund_outbox_reconcile() {
    let c = setup(json!([])).await;
    let (_, b) = c.hold("ev", "alice", &hold_body("park+zoo", 1, "k")).await;
    let order = b["order_id"].as_str().unwrap().to_string();
    assert_eq!(c.pay(&order, "t1", 151).await.1["error"], "amount_mismatch");
    assert_eq!(c.pay(&order, "t1", 150).await, (200, json!({"result": "paid", "order_id": order, "state": "PAID"})));
    assert_eq!(c.pay(&order, "t1", 150).await.1["result"], "already_paid");
    // Redeem the park; the zoo is still to come.
    let (s, o) = c.post_admin(&format!("/v1/orders/{order}/redeem"), Some(json!({"pool": "park"}))).await;
    assert_eq!(s, 200);
    assert_eq!((o["state"].as_str(), o["redeemed_pools"].clone()), (Some("PAID"), json!(["park"])));
    assert_eq!(c.post_admin(&format!("/v1/orders/{order}/redeem"), Some(json!({"pool": "stalls"}))).await.0, 404);
    assert_eq!(c.post_admin(&format!("/v1/orders/{order}/redeem"), Some(json!({"pool": "park"}))).await.0, 409);
    let (s, o) = c.post_admin(&format!("/v1/orders/{order}/redeem"), None).await;
    assert_eq!((s, o["state"].as_str()), (200, Some("USED")));
    // Refund of another paid order.
    let (_, b) = c.hold("ev", "bob", &hold_body("park", 2, "k")).await;
    let o2 = b["order_id"].as_str().unwrap().to_string();
    c.pay(&o2, "t2", 200).await;
    let (s, r) = c.post_admin(&format!("/v1/orders/{o2}/refund"), None).await;
    assert_eq!((s, r["state"].as_str()), (200, Some("REFUNDED")));
    assert_eq!(c.post_admin(&format!("/v1/orders/{o2}/refund"), None).await.0, 409);
    // The outbox, paged.
    let (s, page) = c.get_json("/v1/events/ev/outbox?limit=3", true).await;
    assert_eq!(s, 200);
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    let kinds: Vec<&str> = entries.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["created", "paid", "redeemed"]);
    let cursor = page["cursor"].as_str().unwrap();
    let (_, rest) = c.get_json(&format!("/v1/events/ev/outbox?after={cursor}&limit=100"), true).await;
    let kinds: Vec<&str> = rest["entries"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["used", "created", "paid", "refunded"]);
    assert_eq!(c.get_json("/v1/events/ev/outbox", false).await.0, 401);
    let (s, rec) = c.get_json("/v1/events/ev/reconcile", true).await;
    assert_eq!((s, rec["ok"].as_bool()), (200, Some(true)));
    // Metrics carry what the edge reads.
    let text = c.http.get(c.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("wicket_core_request_duration_seconds_bucket{route=\"hold\""), "{text}");
    assert!(text.contains("wicket_core_holds_total{outcome=\"created\"} 2"));
    assert!(text.contains("wicket_core_payments_total{result=\"paid\"} 2"));
    assert!(text.contains("wicket_core_concurrency_limit 4096"));
    assert_eq!(c.get_json("/healthz", false).await.0, 200);
}

#[tokio::test]
async fn payment_after_close_is_refund_required_over_http() {
    let c = setup(json!([])).await;
    let (_, b) = c.hold("ev", "alice", &hold_body("park", 1, "k")).await;
    let order = b["order_id"].as_str().unwrap().to_string();
    assert_eq!(c.post_admin(&format!("/v1/orders/{order}/cancel"), None).await.0, 200);
    let (s, r) = c.pay(&order, "late", 100).await;
    assert_eq!((s, r["result"].as_str(), r["state"].as_str()), (200, Some("refund_required"), Some("CLOSED")));
    let (_, page) = c.get_json("/v1/events/ev/outbox", true).await;
    let last = page["entries"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["kind"].as_str(), last["txn_id"].as_str()), (Some("refund_required"), Some("late")));
}

#[tokio::test]
async fn events_pause_resume_status_and_force() {
    let c = setup(json!([])).await;
    let (_, ev) = c.get_json("/v1/events/ev", false).await;
    assert_eq!(ev["status"], "open");
    assert!(ev.get("limits").is_some());
    assert_eq!(c.post_admin("/v1/events/ev/pause", None).await.0, 200);
    assert_eq!(c.get_json("/v1/events/ev", false).await.1["status"], "paused");
    let (s, b) = c.hold("ev", "a", &hold_body("park", 1, "k")).await;
    assert_eq!((s, b["error"].as_str()), (403, Some("event_paused")));
    assert_eq!(c.post_admin("/v1/events/ev/resume", None).await.0, 200);
    assert_eq!(c.hold("ev", "a", &hold_body("park", 1, "k")).await.0, 201);
    // Moving stock of an open sale needs ?force=true.
    let mut body = event_body(20, 5, 4, json!([]));
    assert_eq!(c.put_event("ev", &body).await, 409);
    let r = c.http.put(c.url("/v1/events/ev?force=true")).bearer_auth(ADMIN).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(stock(&c, "ev").await["pools"]["park"]["capacity"], 20);
    // Below held + sold: refused with the path.
    body["pools"][0]["capacity"] = json!(0);
    let r = c.http.put(c.url("/v1/events/ev?force=true")).bearer_auth(ADMIN).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["errors"][0]["path"], "pools[0].capacity");
    // Not yet open.
    let mut later = event_body(5, 5, 1, json!([]));
    later["opens_at"] = json!("2099-01-01T00:00:00Z");
    later["closes_at"] = json!("2099-01-02T00:00:00Z");
    assert_eq!(c.put_event("later", &later).await, 201);
    assert_eq!(c.get_json("/v1/events/later", false).await.1["status"], "scheduled");
    let (s, b) = c.hold("later", "a", &hold_body("park", 1, "k")).await;
    assert_eq!((s, b["error"].as_str()), (403, Some("event_not_open")));
}

/// Every bad input of the issue: the exact 4xx, a JSON error, and no state change at all.
#[tokio::test]
async fn bad_input_is_refused_without_state_change() {
    let c = setup(json!([{"dimension": "phone", "max": 2}])).await;
    let before_stock = stock(&c, "ev").await;
    let before_outbox = c.get_json("/v1/events/ev/outbox", true).await.1;
    let post = |token: Option<String>, body: Vec<u8>| {
        let mut rb = c.http.post(c.url("/v1/events/ev/holds")).header("Content-Type", "application/json").body(body);
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        rb.send()
    };
    let phone = json!({"phone": "138"});
    let cases: Vec<(Option<String>, Vec<u8>, u16, &str)> = vec![
        (Some(c.token("ev", "a")), b"{not json".to_vec(), 400, "bad_request"),
        (Some(c.token("ev", "a")), vec![b' '; 70 * 1024], 413, "payload_too_large"),
        (Some(c.token("ev", "a")), json!({"sku": "park", "qty": 1, "idempotency_key": "k", "identity": phone, "extra": 1}).to_string().into(), 400, "bad_request"),
        (Some(c.token("ev", "a")), json!({"sku": "park", "qty": 0, "idempotency_key": "k", "identity": phone}).to_string().into(), 400, "bad_request"),
        (Some(c.token("ev", "a")), json!({"sku": "park", "qty": -3, "idempotency_key": "k", "identity": phone}).to_string().into(), 400, "bad_request"),
        (Some(c.token("ev", "a")), json!({"sku": "park", "qty": 7, "idempotency_key": "k", "identity": phone}).to_string().into(), 400, "bad_request"),
        (Some(c.token("ev", "a")), json!({"sku": "nope", "qty": 1, "idempotency_key": "k", "identity": phone}).to_string().into(), 400, "bad_request"),
        (Some(c.token("ev", "a")), json!({"sku": "stalls", "qty": 1, "idempotency_key": "k", "identity": phone, "seats": ["Z-1"]}).to_string().into(), 400, "bad_request"),
        (Some(c.token("ev", "a")), json!({"sku": "park", "qty": 1, "idempotency_key": "k"}).to_string().into(), 400, "bad_request"),
        (Some(c.token("ev", "a")), json!({"sku": "park", "qty": 1, "idempotency_key": "", "identity": phone}).to_string().into(), 400, "bad_request"),
        (None, json!({"sku": "park", "qty": 1, "idempotency_key": "k", "identity": phone}).to_string().into(), 401, "unauthorized"),
        (Some("garbage".into()), json!({"sku": "park", "qty": 1, "idempotency_key": "k", "identity": phone}).to_string().into(), 401, "unauthorized"),
    ];
    for (i, (token, body, status, code)) in cases.into_iter().enumerate() {
        let r = post(token, body).await.unwrap();
        assert_eq!(r.status().as_u16(), status, "case {i}");
        assert_eq!(r.headers()["content-type"], "application/json", "case {i}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], code, "case {i}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "case {i}");
    }
    // Tokens: expired, not yet valid, wrong audience, unknown kid, alg mismatch, wrong type, edited claims.
    let body = json!({"sku": "park", "qty": 1, "idempotency_key": "k", "identity": phone});
    let now = now_ms() / 1000;
    let mut expired = c.claims("ev", "a");
    (expired.iat, expired.nbf, expired.exp) = (now - 400, now - 400, now - 200);
    let mut future = c.claims("ev", "a");
    (future.iat, future.nbf, future.exp) = (now + 60, now + 60, now + 200);
    let other = c.claims("other-event", "a");
    let hs = c.sign_claims(&c.claims("ev", "a"), "hs");
    let forged_kid = {
        use base64::Engine;
        let parts: Vec<&str> = hs.split('.').collect();
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(r#"{"typ":"admission+jwt","alg":"HS256","kid":"nope"}"#);
        format!("{header}.{}.{}", parts[1], parts[2])
    };
    let alg_confusion = {
        // HS256 signed with the EdDSA public key's bytes, claiming the EdDSA kid.
        use base64::Engine;
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = e.encode(r#"{"typ":"admission+jwt","alg":"HS256","kid":"ed"}"#);
        let payload = e.encode(serde_json::to_string(&c.claims("ev", "a")).unwrap());
        let pem = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/keys/demo-ed25519.pub.pem")).unwrap();
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&pem).unwrap();
        mac.update(format!("{header}.{payload}").as_bytes());
        format!("{header}.{payload}.{}", e.encode(mac.finalize().into_bytes()))
    };
    let alg_none = {
        use base64::Engine;
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = e.encode(r#"{"typ":"admission+jwt","alg":"none","kid":"hs"}"#);
        format!("{header}.{}.", e.encode(serde_json::to_string(&c.claims("ev", "a")).unwrap()))
    };
    let edited = {
        use base64::Engine;
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let parts: Vec<&str> = hs.split('.').collect();
        let mut claims: Value = serde_json::from_slice(&e.decode(parts[1]).unwrap()).unwrap();
        claims["max_qty"] = json!(100);
        format!("{}.{}.{}", parts[0], e.encode(claims.to_string()), parts[2])
    };
    for (name, token) in [
        ("expired", c.sign_claims(&expired, "hs")),
        ("not yet valid", c.sign_claims(&future, "hs")),
        ("wrong audience", c.sign_claims(&other, "hs")),
        ("unknown kid", forged_kid),
        ("alg confusion", alg_confusion),
        ("alg none", alg_none),
        ("edited claims", edited),
    ] {
        let r = post(Some(token), body.to_string().into()).await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{name}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "unauthorized", "{name}");
    }
    // The EdDSA key works.
    let ed = c.sign_claims(&c.claims("ev", "a"), "ed");
    assert_eq!(post(Some(ed), body.to_string().into()).await.unwrap().status(), 201);
    let after = stock(&c, "ev").await;
    assert_eq!(after["pools"]["park"]["held"], before_stock["pools"]["park"]["held"].as_u64().unwrap() + 1);
    let outbox = c.get_json("/v1/events/ev/outbox", true).await.1;
    assert_eq!(outbox["entries"].as_array().unwrap().len(), before_outbox["entries"].as_array().unwrap().len() + 1);

    // Payment callbacks: bad and stale signatures, bad bodies.
    let cb = json!({"order_id": "ev+01ARZ3NDEKTSV4RRFFQ69G5FAV", "txn_id": "t", "amount_cents": 1, "status": "SUCCESS"}).to_string();
    let t = now_ms() / 1000;
    let send = |sig: Option<String>, body: String| {
        let mut rb = c.http.post(c.url("/v1/payments/callback")).body(body);
        if let Some(s) = sig {
            rb = rb.header("Wicket-Signature", s);
        }
        rb.send()
    };
    let sign = |b: &str, t: i64, secret: &str| wicket_core::payment::sign(b.as_bytes(), secret.as_bytes(), t);
    assert_eq!(send(None, cb.clone()).await.unwrap().status(), 401);
    assert_eq!(send(Some(sign(&cb, t, "wrong-secret")), cb.clone()).await.unwrap().status(), 401);
    assert_eq!(send(Some(sign(&cb, t - 1000, CALLBACK_SECRET)), cb.clone()).await.unwrap().status(), 401);
    assert_eq!(send(Some("t=1,v1=zz".into()), cb.clone()).await.unwrap().status(), 401);
    assert_eq!(send(Some(sign(&cb, t, CALLBACK_SECRET)), cb.clone()).await.unwrap().status(), 404);
    let junk = "{\"order_id\": 3}".to_string();
    assert_eq!(send(Some(sign(&junk, t, CALLBACK_SECRET)), junk.clone()).await.unwrap().status(), 400);

    // Admin calls without or with a wrong token change nothing.
    let r = c.http.post(c.url("/v1/events/ev/pause")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = c.http.post(c.url("/v1/events/ev/pause")).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(c.get_json("/v1/events/ev", false).await.1["status"], "open");
    // Events: unknown, invalid bodies with every path.
    assert_eq!(c.get_json("/v1/events/nope", false).await.0, 404);
    assert_eq!(c.get_json("/v1/events/nope/stock", false).await.0, 404);
    assert_eq!(c.post_admin("/v1/events/nope/pause", None).await.0, 404);
    let bad = json!({"name": "", "opens_at": "2026-01-02T00:00:00Z", "closes_at": "2026-01-01T00:00:00Z",
        "pools": [{"id": "p", "capacity": 1, "seats": ["A"]}], "skus": [{"id": "s", "pools": ["q"], "price_cents": 1}]});
    let r = c.http.put(c.url("/v1/events/bad")).bearer_auth(ADMIN).json(&bad).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    let paths: Vec<&str> = v["errors"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["name", "closes_at", "pools[0]", "skus[0].pools[0]"]);
    assert_eq!(c.get_json("/v1/events/bad", false).await.0, 404);
    // Wrong types and a missing field: every one at once, each with its path (not one parser message).
    let typed = json!({"name": "x", "opens_at": "tomorrow", "closes_at": "2026-01-02T00:00:00Z",
        "pools": [{"id": "p", "capacity": -5}], "hold_seconds": "long"});
    let r = c.http.put(c.url("/v1/events/bad")).bearer_auth(ADMIN).json(&typed).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "bad_request");
    let mut paths: Vec<&str> = v["errors"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    paths.sort_unstable();
    assert_eq!(paths, ["hold_seconds", "opens_at", "pools[0].capacity", "skus"], "{v}");
    assert!(v["message"].as_str().unwrap().contains("skus: missing field `skus`"), "{v}");
    assert_eq!(c.get_json("/v1/events/bad", false).await.0, 404);
    // A wrong type and a broken rule in one pass (issue #25): the rules are checked on the rest of the
    // body although `capacity` is wrong, and that pool's own rules say nothing more about it.
    let mut both = event_body(5, 5, 1, json!([]));
    both["pools"][0]["capacity"] = json!(-5);
    both["skus"][0]["pools"] = json!(["nowhere"]);
    let r = c.http.put(c.url("/v1/events/bad")).bearer_auth(ADMIN).json(&both).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    let got: Vec<(&str, &str)> =
        v["errors"].as_array().unwrap().iter().map(|e| (e["path"].as_str().unwrap(), e["message"].as_str().unwrap())).collect();
    assert_eq!(got, [("pools[0].capacity", "invalid value: integer `-5`, expected u32"), ("skus[0].pools[0]", "unknown pool")], "{v}");
    assert_eq!(c.get_json("/v1/events/bad", false).await.0, 404);
    let unknown_field = json!({"name": "x", "opens_at": "2026-01-01T00:00:00Z", "closes_at": "2026-01-02T00:00:00Z", "pools": [], "skus": [], "colour": "red"});
    let r = c.http.put(c.url("/v1/events/bad")).bearer_auth(ADMIN).json(&unknown_field).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("colour"));
    // Orders: unknown, malformed ids.
    assert_eq!(c.get_json("/v1/orders/nope", true).await.0, 404);
    assert_eq!(c.get_json("/v1/orders/ev+01ARZ3NDEKTSV4RRFFQ69G5FAV", true).await.0, 404);
    assert_eq!(c.get_json("/v1/no/such/route", false).await, (404, json!({"error": "not_found", "message": "no such route"})));
    assert_eq!(c.get_json("/v1/events/ev/outbox?after=garbage", true).await.0, 400);
    assert_eq!(c.get_json("/v1/events/ev/outbox?limit=0", true).await.0, 400);
    assert_eq!(stock(&c, "ev").await, after);
}

/// 64 concurrent clients, 20,000 hold attempts over HTTP, capacity 1,000: exactly 1,000 held, no pool
/// negative, nobody over the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn surge_over_http_never_oversells() {
    let c = Arc::new(TestCore::start(embedded()).await);
    assert_eq!(c.put_event("surge", &event_body(1000, 1, 1, json!([{"dimension": "user", "max": 2}]))).await, 201);
    let out = common::core_server::surge(std::slice::from_ref(&c), "surge").await;
    assert_eq!(out.total, 1000, "statuses {:?}", out.statuses);
    assert!(out.per_user.values().all(|&q| q <= 2));
    assert!(out.statuses.keys().all(|s| [201, 409].contains(s)), "{:?}", out.statuses);
    let s = stock(&c, "surge").await;
    assert_eq!(s["pools"]["park"], json!({"capacity": 1000, "available": 0, "held": 1000, "sold": 0}));
}

/// The core's own concurrency limit answers a quick 503 instead of queueing: with a limit of 1, a hold whose
/// body is still arriving keeps the only slot, and every other request is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_the_concurrency_limit_is_a_quick_503() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let c = TestCore::start_with(embedded(), None, 1).await;
    assert_eq!(c.put_event("ev", &event_body(100_000, 1, 1, json!([]))).await, 201);
    let body = hold_body("park", 1, "slow").to_string();
    let token = c.token("ev", "slow");
    let mut slow = tokio::net::TcpStream::connect(c.addr).await.unwrap();
    let head = format!(
        "POST /v1/events/ev/holds HTTP/1.1\r\nHost: core\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body.as_bytes()[..5]).await.unwrap();
    // The slow request holds the slot once the core has its head; others now get a quick 503.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let mut refused = 0;
    let mut seen = Vec::new();
    for i in 0..50 {
        let (s, b) = c.hold("ev", &format!("u{i}"), &hold_body("park", 1, "k")).await;
        seen.push(s);
        if s == 503 {
            assert_eq!(b["error"], "unavailable");
            refused += 1;
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        if refused >= 3 {
            break;
        }
    }
    assert!(refused >= 3, "no 503 while the only slot was taken: {seen:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // The slow one completes normally, and the slot is free again.
    slow.write_all(&body.as_bytes()[5..]).await.unwrap();
    let mut answer = String::new();
    slow.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert_eq!(c.hold("ev", "after", &hold_body("park", 1, "k")).await.0, 201);
}

/// A fake provider's status query: SUCCESS for some orders, NOTPAY for others, an error for the rest.
async fn payment_provider(paid: Vec<(String, u64)>, not_paid: Vec<String>) -> String {
    use axum::extract::Query;
    let paid: Arc<HashMap<String, u64>> = Arc::new(paid.into_iter().collect());
    let not_paid: Arc<Vec<String>> = Arc::new(not_paid);
    let app = axum::Router::new().route(
        "/query",
        axum::routing::get(move |Query(q): Query<HashMap<String, String>>| {
            let paid = paid.clone();
            let not_paid = not_paid.clone();
            async move {
                let id = q.get("order_id").cloned().unwrap_or_default();
                if let Some(amount) = paid.get(&id) {
                    (axum::http::StatusCode::OK, axum::Json(json!({"order_id": id, "status": "SUCCESS", "txn_id": format!("txn-{id}"), "amount_cents": amount})))
                } else if not_paid.contains(&id) {
                    (axum::http::StatusCode::OK, axum::Json(json!({"order_id": id, "status": "NOTPAY"})))
                } else {
                    (axum::http::StatusCode::INTERNAL_SERVER_ERROR, axum::Json(json!({})))
                }
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    format!("http://{addr}/query")
}

/// A lost callback must not cost a paid seat: the sweeper asks the provider before closing.
#[tokio::test]
async fn sweeper_pays_what_the_provider_says_is_paid() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let store: DynStore = Arc::new(EmbeddedStore::with_clock(clock.clone()));
    // Orders ids are made by the core, so find them first, then start the provider that knows them.
    let probe = TestCore::start(store.clone()).await;
    assert_eq!(probe.put_event("ev", &event_body(10, 5, 4, json!([]))).await, 201);
    let mut ids = Vec::new();
    for u in ["paid", "unpaid", "unknown"] {
        let (s, b) = probe.hold("ev", u, &hold_body("park", 1, "k")).await;
        assert_eq!(s, 201);
        ids.push(b["order_id"].as_str().unwrap().to_string());
    }
    drop(probe);
    let url = payment_provider(vec![(ids[0].clone(), 100)], vec![ids[1].clone()]).await;
    let c = TestCore::start_with(store.clone(), Some(&url), 4096).await;
    // Not due yet: nothing happens.
    assert_eq!(c.core.sweep_once().await, Default::default());
    clock.advance_ms(901_000);
    let rep = c.core.sweep_once().await;
    assert_eq!((rep.paid, rep.closed, rep.kept), (1, 1, 1), "{rep:?}");
    let state = |id: String| {
        let c = &c;
        async move { c.get_json(&format!("/v1/orders/{id}"), true).await.1["state"].as_str().unwrap().to_string() }
    };
    assert_eq!(state(ids[0].clone()).await, "PAID");
    assert_eq!(state(ids[1].clone()).await, "CLOSED");
    assert_eq!(state(ids[2].clone()).await, "CREATED", "unknown status: kept within the grace period");
    // Past the grace period (60 s in the test config) it closes.
    clock.advance_ms(61_000);
    let rep = c.core.sweep_once().await;
    assert_eq!((rep.paid, rep.closed, rep.kept), (0, 1, 0));
    assert_eq!(state(ids[2].clone()).await, "CLOSED");
    let s = stock(&c, "ev").await;
    assert_eq!(s["pools"]["park"], json!({"capacity": 10, "available": 9, "held": 0, "sold": 1}));
    // The provider's late callback for the closed one is a refund, never a lost payment.
    assert_eq!(c.pay(&ids[2], "late", 100).await.1["result"], "refund_required");
}

/// A reconciliation mismatch pauses the event and raises the metrics (the failure, and the pause).
#[tokio::test]
async fn reconciler_pauses_on_mismatch() {
    let store = Arc::new(EmbeddedStore::new());
    let c = TestCore::start(store.clone()).await;
    assert_eq!(c.put_event("ev", &event_body(10, 5, 4, json!([]))).await, 201);
    assert_eq!(c.hold("ev", "a", &hold_body("park", 1, "k")).await.0, 201);
    assert!(c.core.reconcile_once().await.is_empty());
    let text = c.http.get(c.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("wicket_core_event_paused{event=\"ev\"} 0"), "{text}");
    store.tamper_available("ev", "park", 1);
    let failed = c.core.reconcile_once().await;
    assert_eq!(failed.len(), 1);
    assert_eq!(c.get_json("/v1/events/ev", false).await.1["status"], "paused");
    let text = c.http.get(c.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("wicket_core_reconcile_ok{event=\"ev\"} 0"), "{text}");
    assert!(text.contains("wicket_core_reconcile_failures_total{event=\"ev\"} 1"));
    assert!(text.contains("wicket_core_event_paused{event=\"ev\"} 1"), "{text}");
}

#[test]
fn shipped_example_config_is_valid() {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/core.toml"));
    wicket_core::config::CoreConfig::from_file(path).expect("examples/core.toml is valid");
}

/// Asserts an API error answer: `status`, `Content-Type: application/json`, `{"error": code, "message": ...}`;
/// returns the message.
async fn expect_error(r: reqwest::Response, status: u16, code: &str, case: &str) -> String {
    assert_eq!(r.status().as_u16(), status, "{case}");
    assert_eq!(r.headers()["content-type"], "application/json", "{case}");
    let v: Value = r.json().await.unwrap_or_else(|e| panic!("{case}: not JSON ({e})"));
    assert_eq!(v["error"], code, "{case}: {v}");
    let message = v["message"].as_str().unwrap_or_default().to_string();
    assert!(!message.is_empty(), "{case}: {v}");
    message
}

/// Tokens signed with the right key whose claims are absurd (times that overflow `exp + 60` or `exp − iat`,
/// past year 9999, a lifetime of zero or stretched by a future `iat`), with a `crit` header or an empty `sub`:
/// 401 with the JSON error, nothing held. A good token still holds once and only once.
#[tokio::test]
async fn absurd_token_claims_are_refused() {
    let c = setup(json!([])).await;
    let before = stock(&c, "ev").await;
    let now = now_ms() / 1000;
    let year_10000 = 253_402_300_800;
    let with_times = |iat: i64, nbf: i64, exp: i64| {
        let mut claims = c.claims("ev", "mallory");
        (claims.iat, claims.nbf, claims.exp) = (iat, nbf, exp);
        c.sign_claims(&claims, "hs")
    };
    let crit = {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.typ = Some("admission+jwt".into());
        header.kid = Some("hs".into());
        header.crit = Some(vec!["exp".into()]);
        let key = jsonwebtoken::EncodingKey::from_secret(HS_SECRET.as_bytes());
        jsonwebtoken::encode(&header, &c.claims("ev", "mallory"), &key).unwrap()
    };
    let mut no_sub = c.claims("ev", "mallory");
    no_sub.sub = String::new();
    let cases = [
        ("exp and iat near i64::MAX", with_times(i64::MAX - 100, now, i64::MAX - 1)),
        ("iat = i64::MIN", with_times(i64::MIN, now, now + 60)),
        ("iat negative", with_times(-1, now, now + 60)),
        ("exp past year 9999", with_times(year_10000, now, year_10000 + 60)),
        ("exp = iat", with_times(now, now, now)),
        ("exp before iat", with_times(now, now - 10, now - 1)),
        ("iat in the future stretches the lifetime", with_times(now + 3600, now, now + 3660)),
        ("crit header", crit),
        ("empty sub", c.sign_claims(&no_sub, "hs")),
    ];
    for (i, (case, token)) in cases.into_iter().enumerate() {
        let r = c
            .http
            .post(c.url("/v1/events/ev/holds"))
            .bearer_auth(token)
            .json(&hold_body("park", 1, &format!("absurd-{i}")))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{case}: no answer ({e})"));
        expect_error(r, 401, "unauthorized", case).await;
    }
    assert_eq!(stock(&c, "ev").await, before, "an absurd token held tickets");
    // One-time use still holds, for a token of the longest lifetime allowed.
    let mut longest = c.claims("ev", "alice");
    (longest.iat, longest.nbf, longest.exp) = (now, now, now + 300);
    let t = c.sign_claims(&longest, "hs");
    assert_eq!(c.hold_with("ev", &t, &hold_body("park", 1, "once")).await.0, 201);
    let (s, b) = c.hold_with("ev", &t, &hold_body("park", 1, "twice")).await;
    assert_eq!((s, b["error"].as_str()), (409, Some("token_replay")));
    assert_eq!(stock(&c, "ev").await["pools"]["park"]["held"], 1);
}

/// A request head trickled a byte every 300 ms is cut at the configured deadline (1 s here), and so are a
/// connection that sends nothing and a kept-alive one left idle; normal requests are served all the while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_request_head_is_cut_at_the_deadline() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    let mut cfg = CoreConfig::from_toml_str(&config_text(None, 4096)).expect("test config is valid");
    cfg.core.header_timeout_ms = 1000;
    let deadline = Duration::from_millis(1000);
    let c = TestCore::start_config(embedded(), cfg).await;
    assert_eq!(c.put_event("ev", &event_body(10, 5, 4, json!([]))).await, 201);

    /// Reads until the core closes the connection (EOF or reset), writing `trickle`'s next byte every 300 ms;
    /// returns how long after `started` it closed, and what the core sent.
    async fn until_closed(
        s: &mut TcpStream,
        started: Instant,
        mut trickle: impl Iterator<Item = u8>,
    ) -> (Duration, String) {
        let mut got = Vec::new();
        loop {
            assert!(started.elapsed() < Duration::from_secs(6), "the connection is still open after 6 s");
            let mut buf = [0u8; 1024];
            tokio::select! {
                r = s.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return (started.elapsed(), String::from_utf8_lossy(&got).into_owned()),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                },
                () = tokio::time::sleep(Duration::from_millis(300)) => {
                    if let Some(b) = trickle.next()
                        && s.write_all(&[b]).await.is_err()
                    {
                        return (started.elapsed(), String::from_utf8_lossy(&got).into_owned());
                    }
                }
            }
        }
    }
    let within_deadline = |took: Duration, case: &str| {
        assert!(took >= deadline - Duration::from_millis(100), "{case}: closed after {took:?}, before the deadline");
        assert!(took < deadline + Duration::from_millis(1500), "{case}: closed only after {took:?}");
    };

    // The slow-loris: a valid head, one byte at a time, that never ends.
    let mut slow = TcpStream::connect(c.addr).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap();
    let trickle = b"st: core\r\nX-Slow: ".iter().copied().chain(std::iter::repeat(b'a'));
    let (serve_normal, (took, got)) = tokio::join!(
        async {
            // A normal request while the trickle goes on.
            tokio::time::sleep(Duration::from_millis(400)).await;
            c.get_json("/healthz", false).await.0
        },
        until_closed(&mut slow, started, trickle)
    );
    assert_eq!(serve_normal, 200);
    assert!(!got.contains(" 200 "), "a head that never ended was answered: {got}");
    within_deadline(took, "trickled head");

    // A connection that never sends a byte.
    let mut silent = TcpStream::connect(c.addr).await.unwrap();
    let (took, _) = until_closed(&mut silent, Instant::now(), std::iter::empty()).await;
    within_deadline(took, "silent connection");

    // A kept-alive connection after one request: served, then closed when idle for the deadline.
    let mut idle = TcpStream::connect(c.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: core\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    let (took, _) = until_closed(&mut idle, Instant::now(), std::iter::empty()).await;
    within_deadline(took, "idle kept-alive connection");

    // And the API works as ever.
    assert_eq!(c.hold("ev", "alice", &hold_body("park", 1, "k")).await.0, 201);
}

/// A JSON array (or a scalar) where the API expects an object is a 400 that names the path, at the top of
/// every body and wherever an object is nested; serde would otherwise read a struct from its fields in
/// order. Nothing changes.
#[tokio::test]
async fn arrays_never_stand_in_for_objects() {
    let c = setup(json!([{"dimension": "phone", "max": 2}])).await;
    let body = json!({"sku": "park", "qty": 1, "idempotency_key": "k", "identity": {"phone": "138"}});
    let (s, b) = c.hold("ev", "alice", &body).await;
    assert_eq!(s, 201, "{b}");
    let order = b["order_id"].as_str().unwrap().to_string();
    let before = stock(&c, "ev").await;
    let hold = |body: &'static str| {
        let rb = c.http.post(c.url("/v1/events/ev/holds")).bearer_auth(c.token("ev", "bob"));
        rb.header("Content-Type", "application/json").body(body).send()
    };
    // The two of the report: a positional hold body, and an identity given as an array.
    let r = hold(r#"["park",1,"k1",{"phone":"139"}]"#).await.unwrap();
    let m = expect_error(r, 400, "bad_request", "hold body as an array").await;
    assert!(m.contains("expected a JSON object"), "{m}");
    let m = expect_error(
        hold(r#"{"sku":"park","qty":1,"idempotency_key":"k2","identity":["13800000000"]}"#).await.unwrap(),
        400,
        "bad_request",
        "identity as an array",
    )
    .await;
    assert!(m.contains("identity: ") && m.contains("expected a JSON object"), "{m}");
    expect_error(hold(r#""park""#).await.unwrap(), 400, "bad_request", "hold body as a string").await;
    // Nested: an event whose limit is positional.
    let mut event = event_body(10, 5, 4, json!([]));
    event["limits"] = json!([["phone", 2]]);
    let r = c.http.put(c.url("/v1/events/arr")).bearer_auth(ADMIN).json(&event).send().await.unwrap();
    let m = expect_error(r, 400, "bad_request", "positional limit").await;
    assert!(m.contains("limits[0]: "), "{m}");
    let r = c.http.put(c.url("/v1/events/arr")).bearer_auth(ADMIN).json(&json!([event])).send().await.unwrap();
    expect_error(r, 400, "bad_request", "event body as an array").await;
    assert_eq!(c.get_json("/v1/events/arr", false).await.0, 404);
    // A signed callback and a redeem as arrays.
    let cb = json!([order, "t1", 100, "SUCCESS"]).to_string();
    let sig = wicket_core::payment::sign(cb.as_bytes(), CALLBACK_SECRET.as_bytes(), now_ms() / 1000);
    let r = c.http.post(c.url("/v1/payments/callback")).header("Wicket-Signature", sig).body(cb).send().await.unwrap();
    expect_error(r, 400, "bad_request", "callback as an array").await;
    let (s, v) = c.post_admin(&format!("/v1/orders/{order}/redeem"), Some(json!(["park"]))).await;
    assert_eq!((s, v["error"].as_str()), (400, Some("bad_request")), "{v}");
    assert_eq!(c.get_json(&format!("/v1/orders/{order}"), true).await.1["state"], "CREATED");
    assert_eq!(stock(&c, "ev").await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewer_left_is_said_and_holds_are_counted_memory_store() {
    let c = TestCore::start(embedded()).await;
    common::core_server::fewer_left_and_hold_counts(&c, "ev").await;
}

/// (That the counts survive a restart, snapshot and journal, is embedded_durable.rs's
/// `snapshot_and_journal_give_back_the_state_before`: its dump holds the stock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewer_left_is_said_and_holds_are_counted_durable_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Default::default()).expect("data dir");
    let c = TestCore::start(Arc::new(store)).await;
    common::core_server::fewer_left_and_hold_counts(&c, "ev").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_hold_is_first_for_a_ticket_that_comes_back_memory_store() {
    let c = TestCore::start(embedded()).await;
    common::core_server::a_waiting_hold_is_first_for_a_ticket_that_comes_back(&c, "ev").await;
}
