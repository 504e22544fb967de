//! The waiting room through a real edge: join, status, SSE, admission, protected paths, bad
//! tickets and tokens, revocation, the anomaly rule, and the rooms admin API.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use common::*;
use serde_json::{Value, json};

const ED_KID: &str = "ed-1";

fn keys_dir() -> String {
    format!("{}/../core/examples/keys", env!("CARGO_MANIFEST_DIR"))
}

/// `[edge]` extras + `[tokens]` (EdDSA signing, an HS256 key too) + room `r1` guarding `/buy/ev-1`.
fn room_config(origin: &str, room_extra: &str) -> String {
    let k = keys_dir();
    format!(
        "origin = \"{origin}\"\nuser-header = \"x-user-id\"\n\
         [edge.anomaly]\ndevice-max-users = 2\n\
         [tokens]\nissuer = \"wicket\"\nsigning-kid = \"{ED_KID}\"\n\
         [[tokens.keys]]\nkid = \"{ED_KID}\"\nalg = \"EdDSA\"\nprivate-key-file = \"{k}/demo-ed25519.pem\"\npublic-key-file = \"{k}/demo-ed25519.pub.pem\"\n\
         [[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n{room_extra}\n\
         [[rooms]]\nid = \"r2\"\nevent = \"ev-2\"\ntarget = \"/buy/ev-2\"\nprotected = [\"/buy/ev-2\"]\nrelease = {{ mode = \"fixed\", rate = 1000.0 }}\n"
    )
}

/// A browser-ish client: a cookie jar and an optional user id.
#[derive(Default, Clone)]
struct Client {
    jar: HashMap<String, String>,
    user: Option<String>,
    /// Distinct per client: the edge fingerprints cookie-less devices by IP and headers.
    ua: String,
}

impl Client {
    fn user(u: &str) -> Self {
        Client { user: Some(u.into()), ..Client::default() }
    }
    fn cookie_header(&self) -> String {
        self.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }
    async fn send(&mut self, method: &str, url: &str, extra: &[(&str, &str)], body: &[u8]) -> Resp {
        let cookie = self.cookie_header();
        let mut h: Vec<(&str, &str)> = extra.to_vec();
        if !cookie.is_empty() {
            h.push(("cookie", &cookie));
        }
        if let Some(u) = &self.user {
            h.push(("x-user-id", u));
        }
        if self.ua.is_empty() {
            self.ua = format!("room-test-{}", rand::random::<u64>());
        }
        let ua = self.ua.clone();
        h.push(("user-agent", &ua));
        h.push(("accept-language", "en"));
        let r = request(method, url, &h, body).await;
        for (k, v) in r.cookies() {
            if v.is_empty() {
                self.jar.remove(&k);
            } else {
                self.jar.insert(k, v);
            }
        }
        r
    }
    async fn json(&mut self, url: &str) -> Resp {
        self.send("GET", url, &[("accept", "application/json")], b"").await
    }
}

async fn until_admitted(edge: &TestEdge, c: &mut Client, room: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = c.json(&edge.url(&format!("/queue/{room}/status"))).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        if v["state"] == "admitted" {
            return v;
        }
        assert!(Instant::now() < deadline, "not admitted: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_wait_admit_and_pass_the_protected_path_with_verified_identity() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), "release = { mode = \"fixed\", rate = 2.0 }\n"));
    // Not admitted: browsers are sent to the queue, apps get 403 JSON.
    let mut c = Client::user("alice");
    let r = c.send("GET", &edge.url("/buy/ev-1"), &[("accept", "text/html")], b"").await;
    assert_eq!((r.status, r.header("location")), (302, Some("/queue/r1")));
    // The queue page (HTML) joins and sets the ticket.
    let r = c.send("GET", &edge.url("/queue/r1"), &[("accept", "text/html")], b"").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("/static/queue.js"), "the queue page");
    assert!(c.jar.contains_key("wicket_q_r1") && c.jar.contains_key("wicket_d"), "{:?}", c.jar);
    assert_eq!(get(&edge.url("/static/queue.js"), &[]).await.status, 200);
    // Status JSON: a place; a rejoin keeps it.
    let v = c.json(&edge.url("/queue/r1")).await.json();
    assert_eq!(v["position"], 1, "{v}");
    assert!(v["poll_after_ms"].as_u64().unwrap() >= 500);
    let v = c.send("POST", &edge.url("/queue/r1/join"), &[("content-type", "application/json")], b"{}").await.json();
    assert_eq!(v["position"], 1, "{v}");
    // Server-sent events carry the same status.
    let r = c.send("GET", &edge.url("/queue/r1/events"), &[], b"").await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let first = r.text().lines().find_map(|l| l.strip_prefix("data: ").map(str::to_owned)).unwrap();
    let frame: Value = serde_json::from_str(&first).unwrap();
    assert!(frame["state"] == "admitted" || frame["state"] == "waiting", "{frame}");
    // Admitted: a token in the body and the cookie, the target to go to.
    let v = until_admitted(&edge, &mut c, "r1").await;
    assert_eq!(v["redirect"], "/buy/ev-1");
    let token = v["token"].as_str().unwrap().to_owned();
    assert_eq!(c.jar.get("wicket_a_r1"), Some(&token));
    let header: Value = serde_json::from_slice(&B64.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
    assert_eq!((header["alg"].as_str(), header["kid"].as_str(), header["typ"].as_str()), (Some("EdDSA"), Some(ED_KID), Some("admission+jwt")));
    // No-JS: /queue/r1 now redirects to the target.
    let r = c.send("GET", &edge.url("/queue/r1"), &[("accept", "text/html")], b"").await;
    assert_eq!((r.status, r.header("location")), (302, Some("/buy/ev-1")));
    // The protected path passes; the origin sees verified identity, never the token or forged headers.
    let r = c
        .send("GET", &edge.url("/buy/ev-1/seat"), &[("wicket-room", "forged"), ("wicket-position", "0"), ("accept", "application/json")], b"")
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = r.json();
    let h = &seen["headers"];
    assert_eq!(h["wicket-user"], "alice");
    assert_eq!(h["wicket-room"], "r1");
    assert_eq!(h["wicket-position"], "1");
    assert!(h["wicket-device"].as_str().is_some_and(|d| !d.is_empty()));
    let cookies = h["cookie"].as_str().unwrap_or("");
    assert!(!cookies.contains("wicket_a_r1") && !cookies.contains(&token), "token forwarded: {cookies}");
    // Bearer works for apps and is stripped too.
    let mut app = Client::user("alice");
    app.jar.insert("wicket_d".into(), c.jar["wicket_d"].clone());
    let auth = format!("Bearer {token}");
    let r = app.send("GET", &edge.url("/buy/ev-1"), &[("authorization", &auth), ("accept", "application/json")], b"").await;
    assert_eq!(r.status, 200);
    assert!(r.json()["headers"].get("authorization").is_none());
    // The room's stats saw it.
    let s = edge.admin("GET", "/admin/rooms/r1/stats", "").await.json();
    assert_eq!(s["admissions"], 1);
    assert_eq!(s["active"], 1);
    // And exports it (after the next tick).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let m = edge.admin("GET", "/metrics", "").await.text();
    assert!(m.contains("wicket_room_active{room=\"r1\"} 1"), "{m}");
    assert!(m.contains("wicket_room_serving{room=\"r1\"}"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_tab_and_cleared_cookie_keep_the_place_another_user_on_the_device_gets_one_and_trips_the_anomaly_rule() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), "release = { mode = \"fixed\", rate = 0.0 }\n"));
    let mut first = Client::user("u0");
    assert_eq!(first.json(&edge.url("/queue/r1")).await.json()["position"], 1);
    let mut alice = Client::user("alice");
    assert_eq!(alice.json(&edge.url("/queue/r1")).await.json()["position"], 2);
    // A second tab shares the cookies: the same place.
    let mut tab = alice.clone();
    assert_eq!(tab.json(&edge.url("/queue/r1")).await.json()["position"], 2);
    // Cleared cookies (a new device, no ticket), same user: the same place.
    let mut cleared = Client::user("alice");
    assert_eq!(cleared.json(&edge.url("/queue/r1")).await.json()["position"], 2);
    // Another user id on Alice's device: a place of their own at the back...
    let mut bob = Client { jar: alice.jar.clone(), user: Some("bob".into()), ua: alice.ua.clone() };
    bob.jar.remove("wicket_q_r1");
    let v = bob.json(&edge.url("/queue/r1")).await.json();
    assert_eq!(v["position"], 3, "{v}");
    // ...and counts toward the anomaly rule: a third user on that device is blocked.
    let mut carol = Client { jar: alice.jar.clone(), user: Some("carol".into()), ua: alice.ua.clone() };
    let r = carol.json(&edge.url("/queue/r1")).await;
    assert_eq!(r.status, 403, "{}", r.text());
    // Anonymous visitors are keyed by their device: a new device is a new place.
    let mut anon = Client::default();
    assert_eq!(anon.json(&edge.url("/queue/r1")).await.json()["position"], 4);
    assert_eq!(anon.json(&edge.url("/queue/r1")).await.json()["position"], 4);
}

/// A queue place belongs to the identity that joined: Bob showing Alice's device and ticket
/// cookies with his own user id is not admitted on her place (fast path or proxy), before or
/// after she was admitted, and a Bob who never joined gets no token either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_queue_place_admits_one_person() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), "release = { mode = \"fixed\", rate = 0.0 }\n"));
    let mut alice = Client::user("alice");
    assert_eq!(alice.json(&edge.url("/queue/r2")).await.json()["position"], 1);
    let stolen = |from: &Client, user: &str| {
        let mut c = Client { jar: from.jar.clone(), user: Some(user.into()), ua: from.ua.clone() };
        c.jar.remove("wicket_a_r2");
        c
    };
    // While Alice waits (r1: nothing released) and once she is admitted (r2: 1000/s).
    let mut waiting = Client::user("alice");
    assert_eq!(waiting.json(&edge.url("/queue/r1")).await.json()["position"], 1);
    for (room, holder) in [("r1", &waiting), ("r2", &alice)] {
        if room == "r2" {
            let v = until_admitted(&edge, &mut alice.clone(), "r2").await;
            assert_eq!(v["position"], 1, "{v}");
        }
        let url = edge.url(&format!("/queue/{room}/status"));
        for close in [false, true] {
            let mut bob = stolen(holder, "bob");
            let extra: &[(&str, &str)] = if close { &[("accept", "application/json"), ("connection", "close")] } else { &[("accept", "application/json")] };
            let r = bob.send("GET", &url, extra, b"").await;
            assert_eq!(r.status, 401, "{room} (connection close: {close}): {}", r.text());
            assert_eq!(r.json()["error"], "unauthorized");
            assert!(!bob.jar.contains_key(&format!("wicket_a_{room}")), "no admission cookie for Bob");
        }
        // Joining with the stolen cookies gives Bob a place of his own, never hers.
        let mut bob = stolen(holder, "bob");
        let r = bob.send("POST", &edge.url(&format!("/queue/{room}/join")), &[("content-type", "application/json")], b"{}").await;
        assert_eq!(r.status, 200, "{room}: {}", r.text());
        let v = r.json();
        assert!(v["position"].as_u64().is_some_and(|p| p > 1), "{room}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_polls_answer_the_same_on_the_fast_path_and_through_the_proxy() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), "release = { mode = \"fixed\", rate = 0.0 }\n"));
    Client::user("alice").json(&edge.url("/queue/r1")).await;
    let mut bob = Client::user("bob");
    assert_eq!(bob.json(&edge.url("/queue/r1")).await.json()["position"], 2);
    let url = edge.url("/queue/r1/status");
    // A keep-alive poll takes the fast path; `Connection: close` sends the same poll to the proxy.
    let fast = bob.json(&url).await;
    let slow = bob.send("GET", &url, &[("accept", "application/json"), ("connection", "close")], b"").await;
    let mut bodies = Vec::new();
    for (name, r) in [("fast", &fast), ("proxy", &slow)] {
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"), "{name}");
        assert_eq!(r.header("cache-control"), Some("no-store"), "{name}");
        assert!(r.header("date").is_some(), "{name}");
        assert!(r.cookies().is_empty(), "{name} set cookies: {:?}", r.cookies());
        let mut v = r.json();
        assert!((500..=60_000).contains(&v["poll_after_ms"].as_u64().unwrap()), "{name}: {v}");
        v["poll_after_ms"] = json!("jittered");
        bodies.push(v);
    }
    assert_eq!(bodies[0], bodies[1]);
    assert_eq!((bodies[0]["state"].as_str(), bodies[0]["position"].as_u64(), bodies[0]["ahead"].as_u64()), (Some("waiting"), Some(2), Some(1)));
    // Without the device cookie the proxy answers (401, and a new device cookie); paused rooms
    // answer `paused` on the fast path too.
    let mut lost = bob.clone();
    lost.jar.remove("wicket_d");
    assert_eq!(lost.json(&url).await.status, 401);
    edge.admin("POST", "/admin/rooms/r1/pause", "").await;
    assert_eq!(bob.json(&url).await.json()["state"], "paused");
}

/// A poll the fast path hands to the proxy (here: no device cookie) is counted by the limits once,
/// not once on the fast path and again in the proxy (a fan then hit the limit twice as fast).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_poll_handed_to_the_proxy_is_counted_once() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(
        &origin.url(),
        "release = { mode = \"fixed\", rate = 0.0 }\n[[edge.limits]]\npath = \"/queue/r1/status\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 1\nnodelay = true\n",
    ));
    let mut bob = Client::user("bob");
    bob.json(&edge.url("/queue/r1")).await;
    bob.jar.remove("wicket_d");
    let url = edge.url("/queue/r1/status");
    // `burst = 1`: two polls pass the limit, the third is refused.
    for i in 0..2 {
        let r = bob.send("GET", &url, &[("accept", "application/json")], b"").await;
        assert_eq!(r.status, 401, "poll {i}: {}", r.text());
        bob.jar.remove("wicket_d");
    }
    let r = bob.send("GET", &url, &[("accept", "application/json")], b"").await;
    assert_eq!(r.status, 429, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tickets_never_admit_they_join_at_the_back() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), "release = { mode = \"fixed\", rate = 0.0 }\n"));
    for i in 0..3 {
        Client::user(&format!("u{i}")).json(&edge.url("/queue/r1")).await;
    }
    // Serving is 0, so any ticket claiming position 1 would be in once serving moves; we move it to 3.
    edge.admin("PUT", "/admin/rooms/r1/release", r#"{"mode":"fixed","rate":1000}"#).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    edge.admin("PUT", "/admin/rooms/r1/release", r#"{"mode":"fixed","rate":0}"#).await;
    let stats = edge.admin("GET", "/admin/rooms/r1/stats", "").await.json();
    let serving = stats["serving"].as_u64().unwrap();
    assert_eq!(serving, 3);
    let mut m = Client::default();
    m.json(&edge.url("/queue/r2")).await; // a real ticket, for the other room
    let other_room = m.jar.get("wicket_q_r2").cloned().unwrap();
    let device = m.jar.get("wicket_d").cloned().unwrap();
    let edited = {
        let (_, tag) = other_room.split_once('.').unwrap();
        format!("{}.{tag}", B64.encode(format!("r1|1|0|{}", device.split('.').next().unwrap())))
    };
    let forged = format!("{}.{}", B64.encode(format!("r1|1|0|{}", device.split('.').next().unwrap())), B64.encode([7u8; 16]));
    for (name, ticket) in [("other room", other_room.clone()), ("edited position", edited), ("forged", forged), ("garbage", "x.y".into())] {
        let mut c = Client::default();
        c.jar.insert("wicket_d".into(), device.clone());
        c.jar.insert("wicket_q_r1".into(), ticket);
        let r = c.json(&edge.url("/queue/r1/status")).await;
        assert_eq!(r.status, 401, "{name}: {}", r.text());
        assert_eq!(r.json()["error"], "unauthorized");
        assert!(r.json().get("token").is_none());
    }
    // Joining with a bad ticket gives the device its own place, at the back, not admitted.
    let mut c = Client::default();
    c.jar.insert("wicket_d".into(), device.clone());
    c.jar.insert("wicket_q_r1".into(), other_room);
    let v = c.json(&edge.url("/queue/r1")).await.json();
    assert_eq!((v["state"].as_str(), v["position"].as_u64()), (Some("waiting"), Some(4)), "{v}");
    // A stolen ticket (another device's) does not verify either.
    let mut thief = Client::default();
    thief.jar.insert("wicket_q_r1".into(), c.jar["wicket_q_r1"].clone());
    assert_eq!(thief.json(&edge.url("/queue/r1/status")).await.status, 401);
}

fn jwt(header: &Value, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let h = B64.encode(header.to_string());
    let p = B64.encode(claims.to_string());
    let sig = sign(format!("{h}.{p}").as_bytes());
    format!("{h}.{p}.{}", B64.encode(sig))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::Mac;
    let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_admission_token_is_refused_at_the_protected_path() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), "release = { mode = \"fixed\", rate = 1000.0 }\n"));
    let mut c = Client::user("alice");
    c.json(&edge.url("/queue/r1")).await;
    let good = until_admitted(&edge, &mut c, "r1").await["token"].as_str().unwrap().to_owned();
    let old_ticket = c.jar["wicket_q_r1"].clone();
    let parts: Vec<&str> = good.split('.').collect();
    let claims: Value = serde_json::from_slice(&B64.decode(parts[1]).unwrap()).unwrap();
    let now = claims["iat"].as_i64().unwrap();
    let hs = |h: Value, c: Value| jwt(&h, &c, |d| hmac(HS_SECRET.as_bytes(), d));
    let hs_header = json!({"alg": "HS256", "typ": "admission+jwt", "kid": "hs-1"});
    let with = |k: &str, v: Value| {
        let mut c = claims.clone();
        c[k] = v;
        c
    };
    let pubkey = std::fs::read(format!("{}/demo-ed25519.pub.pem", keys_dir())).unwrap();
    let mut bad: Vec<(&str, String)> = vec![
        ("forged (unknown HS secret)", jwt(&hs_header, &claims, |d| hmac(b"not-the-secret-not-the-secret-xx", d))),
        ("expired", hs(hs_header.clone(), with("exp", json!(now - 60)).as_object().map(|_| {
            let mut c = with("exp", json!(now - 60));
            c["iat"] = json!(now - 120);
            c["nbf"] = json!(now - 120);
            c
        }).unwrap())),
        ("other room", hs(hs_header.clone(), with("room", json!("r2")))),
        ("other event", hs(hs_header.clone(), with("aud", json!("ev-2")))),
        ("tampered signature", format!("{}.{}.{}A", parts[0], parts[1], &parts[2][..parts[2].len() - 1])),
        ("alg none", format!("{}.{}.", B64.encode(json!({"alg":"none","typ":"admission+jwt","kid":ED_KID}).to_string()), parts[1])),
        ("HS/EdDSA confusion", jwt(&json!({"alg":"HS256","typ":"admission+jwt","kid":ED_KID}), &claims, |d| hmac(&pubkey, d))),
        ("unknown kid", jwt(&json!({"alg":"HS256","typ":"admission+jwt","kid":"nope"}), &claims, |d| hmac(HS_SECRET.as_bytes(), d))),
        ("edited claims", format!("{}.{}.{}", parts[0], B64.encode(with("pos", json!(0)).to_string()), parts[2])),
        ("other user's token (sub)", hs(hs_header.clone(), with("sub", json!("mallory")))),
        ("wrong typ", jwt(&json!({"alg":"HS256","typ":"JWT","kid":"hs-1"}), &claims, |d| hmac(HS_SECRET.as_bytes(), d))),
    ];
    // A valid HS256 token for the right room and user passes (the refusals above are not an accident).
    let ok_hs = hs(hs_header.clone(), claims.clone());
    let r = c.send("GET", &edge.url("/buy/ev-1"), &[("authorization", &format!("Bearer {ok_hs}")), ("accept", "application/json")], b"").await;
    assert_eq!(r.status, 200, "the control token passes: {}", r.text());
    // Replayed: the origin revokes the session; the same token is refused afterwards.
    let r = c.send("GET", &edge.url("/buy/ev-1/revoke"), &[("accept", "application/json")], b"").await;
    assert_eq!(r.status, 200);
    assert!(!c.jar.contains_key("wicket_a_r1"), "the revoke clears the cookie");
    bad.push(("replayed after revoke", good.clone()));
    for (name, token) in &bad {
        let mut who = Client { jar: c.jar.clone(), user: Some("alice".into()), ua: c.ua.clone() };
        who.jar.remove("wicket_a_r1");
        let r = who.send("GET", &edge.url("/buy/ev-1"), &[("authorization", &format!("Bearer {token}")), ("accept", "application/json")], b"").await;
        assert_eq!(r.status, 403, "{name}: {}", r.text());
        assert_eq!(r.json()["queue"], "/queue/r1", "{name}");
        let mut browser = Client { jar: c.jar.clone(), user: Some("alice".into()), ua: c.ua.clone() };
        browser.jar.insert("wicket_a_r1".into(), token.clone());
        let r = browser.send("GET", &edge.url("/buy/ev-1"), &[("accept", "text/html")], b"").await;
        assert_eq!((r.status, r.header("location")), (302, Some("/queue/r1")), "{name}");
    }
    // After the revoke the place is spent: Alice queues again, at the back, and is not admitted at once.
    edge.admin("PUT", "/admin/rooms/r1/release", r#"{"mode":"fixed","rate":0}"#).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let v = c.json(&edge.url("/queue/r1/status")).await.json();
    assert_eq!(v["state"], "waiting", "{v}");
    assert_eq!(v["position"], 2, "{v}");
    assert!(v.get("token").is_none());
    // The ticket of the spent place shown again and again (issue #38: the second replay was
    // admitted at rate 0): each time Alice's live place, never an admission.
    for i in 0..3 {
        let mut replay = Client { jar: c.jar.clone(), user: Some("alice".into()), ua: c.ua.clone() };
        replay.jar.insert("wicket_q_r1".into(), old_ticket.clone());
        let v = replay.json(&edge.url("/queue/r1/status")).await.json();
        assert_eq!((v["state"].as_str(), v["position"].as_u64()), (Some("waiting"), Some(2)), "replay {i}: {v}");
        assert!(v.get("token").is_none(), "replay {i}: {v}");
        let r = replay.send("GET", &edge.url("/buy/ev-1"), &[("accept", "application/json")], b"").await;
        assert_eq!(r.status, 403, "replay {i}: {}", r.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_admin_api_pause_resume_queue_all_release_stats_stream() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), ""));
    let rooms = edge.admin("GET", "/admin/rooms", "").await.json();
    assert_eq!(rooms["rooms"].as_array().unwrap().len(), 2);
    // Unauthorised calls change nothing.
    assert_eq!(request("POST", &edge.admin_url("/admin/rooms/r1/pause"), &[], b"").await.status, 401);
    // Create a room; invalid bodies list every problem with its path.
    let body = json!({"event": "ev-9", "target": "/buy/ev-9", "protected": ["/buy/ev-9"],
        "release": {"mode": "fixed", "rate": 1000}, "total_active_max": 10});
    let r = edge.admin("PUT", "/admin/rooms/r9", &body.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(edge.admin("PUT", "/admin/rooms/r9", &body.to_string()).await.status, 200);
    let r = edge.admin("PUT", "/admin/rooms/r9", r#"{"event":"","target":"x","protected":[],"token_seconds":999}"#).await;
    assert_eq!(r.status, 400);
    let paths: Vec<String> = r.json()["issues"].as_array().unwrap().iter().map(|i| i["path"].as_str().unwrap().to_owned()).collect();
    for p in ["room.event", "room.target", "room.protected", "room.token_seconds"] {
        assert!(paths.iter().any(|x| x == p), "{p} missing in {paths:?}");
    }
    assert_eq!(edge.admin("PUT", "/admin/rooms/r9", "{nope").await.status, 400);
    // The new room works at once.
    let mut c = Client::user("zed");
    assert_eq!(c.json(&edge.url("/queue/r9")).await.json()["position"], 1);
    // Pause: the queue says paused; queue-all: waiting, nothing released; resume.
    let r = edge.admin("POST", "/admin/rooms/r9/pause", "").await;
    assert_eq!(r.json()["mode"], "paused");
    let mut d = Client::user("yan");
    let v = d.json(&edge.url("/queue/r9")).await.json();
    assert_eq!(v["state"], "paused", "{v}");
    assert_eq!(edge.admin("POST", "/admin/rooms/r9/queue-all", "").await.json()["mode"], "queue_all");
    assert_eq!(edge.admin("POST", "/admin/rooms/r9/resume", "").await.json()["mode"], json!({"fixed": 1000.0}));
    let r = edge.admin("PUT", "/admin/rooms/r9/release", r#"{"mode":"auto","min":1,"max":50}"#).await;
    assert_eq!((r.status, r.json()["mode"].clone()), (200, json!("auto")));
    for bad in [r#"{"mode":"fixed"}"#, r#"{"mode":"warp"}"#, r#"{"mode":"auto","min":9,"max":1}"#, r#"{"mode":"auto","min":-1}"#] {
        assert_eq!(edge.admin("PUT", "/admin/rooms/r9/release", bad).await.status, 400, "{bad}");
    }
    let s = edge.admin("GET", "/admin/rooms/r9/stats", "").await.json();
    assert_eq!(s["issued"], 2);
    assert_eq!(edge.admin("GET", "/admin/rooms/nope", "").await.status, 404);
    // The stream: one stats frame a second (read two, then hang up).
    let stream = tokio::net::TcpStream::connect(edge.admin).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    wr.write_all(format!("GET /admin/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\r\n").as_bytes()).await.unwrap();
    let mut got = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.matches("data: ").count() < 2 && Instant::now() < deadline {
        let mut buf = [0u8; 8192];
        let n = tokio::time::timeout(Duration::from_secs(3), rd.read(&mut buf)).await.unwrap().unwrap();
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.contains("text/event-stream"), "{got}");
    assert!(got.matches("data: ").count() >= 2, "{got}");
    assert!(got.contains("\"room\":\"r9\""));
}

/// A fan closing the queue page's event stream is a normal end: no 502, no `bad_gateway`
/// refusal counted (issue #12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_closing_the_event_stream_is_not_an_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), "release = { mode = \"fixed\", rate = 0.0 }\n"));
    let mut c = Client::user("erin");
    assert_eq!(c.json(&edge.url("/queue/r1")).await.status, 200);
    let cookies: Vec<String> = c.jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
        let head = format!(
            "GET /queue/r1/events HTTP/1.1\r\nHost: x\r\nX-User-Id: erin\r\nUser-Agent: {}\r\nAccept-Language: en\r\nCookie: {}\r\n\r\n",
            c.ua,
            cookies.join("; ")
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(6).any(|w| w == b"data: ") {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.expect("a first frame").unwrap();
            assert!(n > 0, "{}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
        drop(s);
    }
    // The stream notices the close at its next frame (at most the 5 s poll interval).
    tokio::time::sleep(Duration::from_secs(7)).await;
    let m = edge.admin("GET", "/metrics", "").await.text();
    let bad: Vec<&str> = m.lines().filter(|l| l.starts_with("wicket_edge_rejects_total") && (l.contains("bad_gateway") || l.contains("bad_request"))).collect();
    assert!(bad.iter().all(|l| l.ends_with(" 0")), "{bad:?}");
    let errors: Vec<&str> = m.lines().filter(|l| l.starts_with("wicket_edge_requests_total") && l.contains("outcome=\"error\"")).collect();
    assert!(errors.iter().all(|l| l.ends_with(" 0")), "{errors:?}");
}

/// A room-wide change reaches every open event stream at once, not at each stream's next
/// one-second look: the room's pulse wakes them. Twenty streams each read their first frame; the
/// room is paused right after (within the second those streams sleep through); every stream gets
/// its `paused` frame well within that second, then `waiting` again on resume. A stream whose
/// fan hung up is not held by the pulse (the streams end when their fans go; see the close test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_and_a_resume_reach_every_open_event_stream_at_once() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&room_config(&origin.url(), "release = { mode = \"fixed\", rate = 0.0 }\n"));
    async fn until(s: &mut tokio::net::TcpStream, got: &mut Vec<u8>, what: &[u8]) {
        let mut buf = [0u8; 4096];
        while !got.windows(what.len()).any(|w| w == what) {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.expect("a frame").unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(got));
            got.extend_from_slice(&buf[..n]);
        }
        got.clear();
    }
    let mut streams = Vec::new();
    for i in 0..20 {
        let mut c = Client::user(&format!("fan{i}"));
        assert_eq!(c.json(&edge.url("/queue/r1")).await.status, 200);
        let cookies: Vec<String> = c.jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut s = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
        let head = format!(
            "GET /queue/r1/events HTTP/1.1\r\nHost: x\r\nX-User-Id: fan{i}\r\nUser-Agent: {}\r\nAccept-Language: en\r\nCookie: {}\r\n\r\n",
            c.ua,
            cookies.join("; ")
        );
        s.write_all(head.as_bytes()).await.unwrap();
        streams.push((s, Vec::new()));
    }
    for (s, got) in streams.iter_mut() {
        until(s, got, b"\"state\":\"waiting\"").await;
    }
    for (change, state) in [("pause", "paused"), ("resume", "waiting")] {
        let at = Instant::now();
        assert_eq!(edge.admin("POST", &format!("/admin/rooms/r1/{change}"), "").await.status, 200);
        let needle = format!("\"state\":\"{state}\"");
        for (s, got) in streams.iter_mut() {
            until(s, got, needle.as_bytes()).await;
        }
        // Each stream would otherwise see it at its next look, up to a second later.
        let took = at.elapsed();
        assert!(took < Duration::from_millis(700), "{change} reached 20 streams in {took:?}");
    }
}

/// An edge with embedded room state that restarts holds none of the places it gave out: their
/// tickets are refused with "join first" (never read as a place someone else now holds), and
/// the fans join the new queue (issue #17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_with_embedded_room_state_old_tickets_are_refused_not_reused() {
    let origin = TestUpstream::start("origin").await;
    let config = room_config(&origin.url(), "release = { mode = \"fixed\", rate = 0.0 }\n");
    let before = TestEdge::start(&config);
    let mut fans: Vec<Client> = ["ann", "bob", "cy"].iter().map(|u| Client::user(u)).collect();
    for (i, c) in fans.iter_mut().enumerate() {
        let v = c.json(&before.url("/queue/r1")).await.json();
        assert_eq!(v["position"], i as u64 + 1, "{v}");
    }
    drop(before);
    // Tickets are whole seconds: the restarted edge's queue begins in a later second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let after = TestEdge::start(&config);
    // A newcomer takes place 1 of the new queue.
    let mut dee = Client::user("dee");
    assert_eq!(dee.json(&after.url("/queue/r1")).await.json()["position"], 1);
    // cy's old ticket said place 3: refused, with the way back in.
    let cy = &mut fans[2];
    let r = cy.json(&after.url("/queue/r1/status")).await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["error"], "unauthorized");
    assert_eq!(r.json()["join"], "/queue/r1/join");
    // Joining again puts cy behind dee, once.
    let v = cy.json(&after.url("/queue/r1")).await.json();
    assert_eq!(v["position"], 2, "{v}");
    let v = cy.json(&after.url("/queue/r1/status")).await.json();
    assert_eq!(v["position"], 2, "{v}");
}

fn solve_pow(challenge: &str, difficulty: u64) -> String {
    use sha2::{Digest, Sha256};
    (0u64..)
        .map(|n| n.to_string())
        .find(|n| wicket_edge::bot::leading_zero_bits(&Sha256::digest(format!("{challenge}{n}").as_bytes())) as u64 >= difficulty)
        .unwrap()
}

/// The proof body for the challenge a join answer carried.
fn proof_for(answer: &Value) -> String {
    let c = &answer["challenge"];
    let (challenge, difficulty) = (c["challenge"].as_str().unwrap(), c["difficulty"].as_u64().unwrap());
    json!({"pow": {"challenge": challenge, "nonce": solve_pow(challenge, difficulty)}}).to_string()
}

/// Proof-of-work per address (issue #26): once one address gave `address-free` proofs, each
/// further place it takes costs one more bit per doubling; fans at other addresses pay the base,
/// and a challenge fetched from a quiet address does not serve the busy one. Through the room's
/// join (the /wicket door is in tests/edge.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pow_room_charges_a_busy_address_more_for_each_place() {
    let origin = TestUpstream::start("origin").await;
    let cfg = room_config(&origin.url(), "bot-check = \"pow\"\nrelease = { mode = \"fixed\", rate = 0.0 }\n")
        .replace("user-header", "trusted-proxies = [\"127.0.0.1\"]\nuser-header")
        .replace("[tokens]", "[edge.bot.pow]\ndifficulty = 4\naddress-free = 3\naddress-max-extra-bits = 2\n[tokens]");
    let edge = TestEdge::start(&cfg);
    let url = edge.url("/queue/r1/join");
    let headers = |ip: &'static str| [("x-forwarded-for", ip), ("content-type", "application/json"), ("accept", "application/json")];
    let farm = "198.51.100.7";
    let mut paid = Vec::new();
    for i in 0..8 {
        let mut c = Client::user(&format!("farm{i}"));
        let r = c.send("POST", &url, &headers(farm), b"{}").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        paid.push(v["challenge"]["difficulty"].as_u64().unwrap());
        let r = c.send("POST", &url, &headers(farm), proof_for(&v).as_bytes()).await;
        assert_eq!((r.status, r.json().get("proof_owed").cloned()), (200, None), "{}", r.text());
    }
    // 3 at the base, then +1 (3 proofs given), +2 (6 given), capped at +2.
    assert_eq!(paid, [4, 4, 4, 5, 5, 5, 6, 6]);
    // A fan elsewhere pays the base, also on the standalone challenge endpoint.
    let mut fan = Client::user("fan");
    let r = fan.send("POST", &url, &headers("203.0.113.9"), b"{}").await;
    let v_fan = r.json();
    assert_eq!(v_fan["challenge"]["difficulty"], 4, "{v_fan}");
    let c = fan.send("GET", &edge.url("/queue/r1/challenge"), &headers(farm), b"").await.json();
    assert_eq!(c["difficulty"], 6, "{c}");
    // The farm gives the fan's (cheaper) challenge for a place of its own: refused, nothing spent.
    let mut late = Client::user("farm-late");
    let r = late.send("POST", &url, &headers(farm), b"{}").await;
    assert_eq!(r.status, 200);
    let borrowed = proof_for(&v_fan);
    let r = late.send("POST", &url, &headers(farm), borrowed.as_bytes()).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("too easy"), "{}", r.text());
    assert_eq!(late.json(&edge.url("/queue/r1/status")).await.json()["proof_owed"], "pow");
    // The fan still gives it.
    let r = fan.send("POST", &url, &headers("203.0.113.9"), borrowed.as_bytes()).await;
    assert_eq!((r.status, r.json().get("proof_owed").cloned()), (200, None), "{}", r.text());
    // The admin API shows the per-address settings.
    let p = edge.admin("GET", "/admin/bot-policy", "").await.json();
    assert_eq!(p["pow_per_address"], json!({"free": 3, "window_seconds": 600, "max_extra_bits": 2}), "{p}");
}

/// A proof-of-work room (issue #26): the place is fixed at the first arrival, the proof gates
/// admission, not the place. A arrives first and proves after B: A is let in first. Forged,
/// replayed and other-device proofs prove nothing; a ticket of another room is no ticket; a place
/// whose turn came without a proof is held back (the release does not count it), then lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pow_room_fixes_the_place_at_arrival_and_the_proof_gates_admission() {
    let origin = TestUpstream::start("origin").await;
    let cfg = room_config(&origin.url(), "bot-check = \"pow\"\nproof-grace-seconds = 2\nrelease = { mode = \"fixed\", rate = 0.0 }\n")
        .replace("[tokens]", "[edge.bot.pow]\ndifficulty = 8\n[tokens]");
    let edge = TestEdge::start(&cfg);
    let join_url = edge.url("/queue/r1/join");
    let post = |c: &mut Client, body: String| {
        let url = join_url.clone();
        let mut c2 = std::mem::take(c);
        async move {
            let r = c2.send("POST", &url, &[("content-type", "application/json"), ("accept", "application/json")], body.as_bytes()).await;
            (c2, r)
        }
    };
    // A arrives first, B second: both get a place at once, the check owed, a challenge with it.
    let (mut a, mut b) = (Client::user("ann"), Client::user("ben"));
    let ra;
    (a, ra) = post(&mut a, "{}".into()).await;
    assert_eq!(ra.status, 200, "{}", ra.text());
    let va = ra.json();
    assert_eq!((va["position"].as_u64(), va["proof_owed"].as_str()), (Some(1), Some("pow")), "{va}");
    assert!(va["challenge"]["challenge"].is_string() && va["join"] == "/queue/r1/join", "{va}");
    let rb;
    (b, rb) = post(&mut b, "{}".into()).await;
    let vb = rb.json();
    assert_eq!((vb["position"].as_u64(), vb["proof_owed"].as_str()), (Some(2), Some("pow")), "{vb}");
    // The status says the proof is owed (the fast path and the proxy alike), the place is kept.
    let s = a.json(&edge.url("/queue/r1/status")).await.json();
    assert_eq!((s["state"].as_str(), s["position"].as_u64(), s["proof_owed"].as_str()), (Some("waiting"), Some(1), Some("pow")), "{s}");
    // The no-JS page shows the place and says a script must give the check.
    let page = a.send("GET", &edge.url("/queue/r1"), &[("accept", "text/html")], b"").await.text();
    assert!(page.contains("<meta name=\"wicket-bot-check\" content=\"pow\">") && page.contains("turn on JavaScript"), "{page}");
    // A forged proof: refused, B's place still owed.
    let r;
    (b, r) = post(&mut b, json!({"pow": {"challenge": "AAAA.BBBB", "nonce": "1"}}).to_string()).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(b.json(&edge.url("/queue/r1/status")).await.json()["proof_owed"], "pow");
    // B proves first: the same place, proven.
    let proof_b = proof_for(&vb);
    let r;
    (b, r) = post(&mut b, proof_b.clone()).await;
    let v = r.json();
    assert_eq!((r.status, v["position"].as_u64(), v.get("proof_owed")), (200, Some(2), None), "{v}");
    assert!(b.jar.contains_key("wicket_b"));
    // The same proof again (another fan): refused as used, no place given.
    let mut c = Client::user("cat");
    let r;
    (c, r) = post(&mut c, proof_b).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("already used"));
    assert!(!c.jar.contains_key("wicket_q_r1"));
    // X (no user id) holds place 3 and never proves. Y, another device, shows X's ticket with a
    // valid proof: the ticket is not Y's, so Y proves a place of its own; X still owes it.
    let mut x = Client::default();
    let rx;
    (x, rx) = post(&mut x, "{}".into()).await;
    assert_eq!(rx.json()["position"], 3);
    let mut y = Client { jar: [("wicket_q_r1".to_owned(), x.jar["wicket_q_r1"].clone())].into(), ..Client::default() };
    let ry;
    let proof_y = proof_for(&rx.json());
    (y, ry) = post(&mut y, proof_y).await;
    let vy = ry.json();
    assert_eq!((ry.status, vy["position"].as_u64(), vy.get("proof_owed")), (200, Some(4), None), "{vy}");
    assert_eq!(x.json(&edge.url("/queue/r1/status")).await.json()["proof_owed"], "pow");
    // A ticket of another room is no ticket there.
    let mut other = a.clone();
    other.jar.insert("wicket_q_r2".into(), a.jar["wicket_q_r1"].clone());
    assert_eq!(other.json(&edge.url("/queue/r2/status")).await.status, 401);
    // A proves after B.
    let r;
    (a, r) = post(&mut a, proof_for(&va)).await;
    assert_eq!((r.status, r.json()["position"].as_u64()), (200, Some(1)), "{}", r.text());
    // Release one a second: A (first to arrive) goes in before B; X is passed without taking a
    // slot, Y behind it goes in.
    assert_eq!(edge.admin("PUT", "/admin/rooms/r1/release", r#"{"mode":"fixed","rate":1}"#).await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut a_in, mut b_in, mut y_in) = (false, false, false);
    while !(a_in && b_in && y_in) {
        assert!(Instant::now() < deadline, "not all admitted: {a_in} {b_in} {y_in}");
        // Polled back to front: whoever is behind is asked first, so a release step between two polls
        // cannot make the one ahead look later than the one behind.
        y_in |= y.json(&edge.url("/queue/r1/status")).await.json()["state"] == "admitted";
        b_in |= b.json(&edge.url("/queue/r1/status")).await.json()["state"] == "admitted";
        a_in |= a.json(&edge.url("/queue/r1/status")).await.json()["state"] == "admitted";
        assert!(!b_in || a_in, "B went in before A");
        assert!(!y_in || b_in, "Y went in before B");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // X's turn came without a proof: never admitted, held back with a deadline...
    let s = x.json(&edge.url("/queue/r1/status")).await.json();
    assert_eq!((s["state"].as_str(), s["ahead"].as_u64(), s["proof_owed"].as_str()), (Some("waiting"), Some(0), Some("pow")), "{s}");
    assert!(s.get("token").is_none() && s["proof_deadline_seconds"].as_u64().is_some_and(|d| d <= 2), "{s}");
    // ... then the place is lost: its next status queues it again at the back, still owing the check.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let s = x.json(&edge.url("/queue/r1/status")).await.json();
    assert!(s["position"].as_u64().is_some_and(|p| p > 4) && s["proof_owed"] == "pow", "{s}");
    let stats = edge.admin("GET", "/admin/rooms/r1/stats", "").await.json();
    assert_eq!(stats["admissions"], 3, "A, B and Y; never X: {stats}");
}

/// A room made only through the admin API (issue #38): an edge started without `[[rooms]]`
/// serves the queue page's stylesheet and script itself (never the origin), and the room's queue
/// page is the page of the same room made from the config file (up to the figures of the moment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_made_through_the_admin_api_gets_the_queue_pages_assets_from_the_edge() {
    let origin = TestUpstream::start("origin").await;
    let top = format!("origin = \"{}\"\nuser-header = \"x-user-id\"\n{}", origin.url(), hs_tokens());
    let room = "event = \"ev-7\"\ntarget = \"/buy/ev-7\"\nprotected = [\"/buy/ev-7\"]\nrelease = { mode = \"fixed\", rate = 0.0 }\n";
    let bare = TestEdge::start(&top);
    let configured = TestEdge::start(&format!("{top}\n[[rooms]]\nid = \"r7\"\n{room}"));
    let body = json!({"event": "ev-7", "target": "/buy/ev-7", "protected": ["/buy/ev-7"], "release": {"mode": "fixed", "rate": 0.0}});
    let r = bare.admin("PUT", "/admin/rooms/r7", &body.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.text());

    for (path, ctype, body) in [
        ("/static/queue.css", "text/css", wicket_edge::room::page::QUEUE_CSS),
        ("/static/queue.js", "javascript", wicket_edge::room::page::QUEUE_JS),
    ] {
        let r = get(&bare.url(path), &[]).await;
        assert_eq!(r.status, 200, "{path}");
        assert!(r.header("content-type").is_some_and(|c| c.contains(ctype)), "{path}: {:?}", r.header("content-type"));
        assert_eq!(r.text(), body, "{path}");
    }
    assert_eq!(get(&bare.url("/wicket/pow.js"), &[]).await.status, 200);
    assert!(origin.seen.lock().iter().all(|s| !s.contains("/static/") && !s.contains("/wicket/")), "{:?}", origin.seen.lock());

    // The queue page: the same as the configured room's, each to a new fan in the same language,
    // up to the numbers of the moment (the server's time, the refresh's jittered pace).
    let page = |edge: &TestEdge| {
        let url = edge.url("/queue/r7");
        async move { Client::user("fan").send("GET", &url, &[("accept", "text/html")], b"").await }
    };
    let (a, b) = (page(&bare).await, page(&configured).await);
    assert_eq!((a.status, b.status), (200, 200), "{}", a.text());
    let figures = |s: &str| s.chars().map(|c| if c.is_ascii_digit() { '0' } else { c }).collect::<String>();
    assert_eq!(figures(&a.text()), figures(&b.text()));
    assert!(a.text().contains("<link rel=\"stylesheet\" href=\"/static/queue.css\">") && a.text().contains("<script src=\"/static/queue.js\" defer>"));
    assert!(origin.seen.lock().is_empty(), "nothing reached the origin: {:?}", origin.seen.lock());
}

/// The tickets left (issue #39): the edge polls its core's stock (every 2 s), and then the status
/// JSON and the queue page give the tickets left beside the people ahead, rounded down (1,234 →
/// 1,200: never more than there are); a room whose event the core does not know says nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_and_the_page_say_the_tickets_left_once_the_core_has_said_its_stock() {
    // Nobody is let in (rate 0): the fans stay in line and read the figures.
    let edge = edge_with_embedded_sale(
        "Arena",
        "floor",
        1234,
        2,
        "[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nrelease = { mode = \"fixed\", rate = 0.0 }\n\
         [[rooms]]\nid = \"r2\"\nevent = \"ev-unknown\"\ntarget = \"/buy2\"\nprotected = [\"/buy2\"]\nrelease = { mode = \"fixed\", rate = 0.0 }\n",
    );
    let base = format!("http://{}", edge.addr);
    let status = |room: &'static str, user: &'static str| {
        let url = format!("{base}/queue/{room}");
        async move { request("GET", &url, &[("x-user-id", user), ("accept", "application/json")], b"").await.json() }
    };
    status("r1", "ann").await;
    let deadline = Instant::now() + Duration::from_secs(8);
    let v = loop {
        let v = status("r1", "bob").await;
        if !v["tickets_left"].is_null() {
            break v;
        }
        assert!(Instant::now() < deadline, "no tickets_left after 8 s: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!((&v["state"], &v["ahead"], &v["tickets_left"]), (&json!("waiting"), &json!(1), &json!(1200)), "{v}");
    let page = request("GET", &format!("{base}/queue/r1"), &[("x-user-id", "bob"), ("accept", "text/html")], b"").await.text();
    assert!(page.contains("<dd id=\"ahead\">1</dd></div>\n<div id=\"tickets-box\" class=\"wide\"><dt>Tickets left</dt><dd id=\"tickets\">about 1,200</dd>"), "{page}");
    let page = request("GET", &format!("{base}/queue/r1?lang=de"), &[("x-user-id", "bob"), ("accept", "text/html")], b"").await.text();
    assert!(page.contains("<dd id=\"tickets\">etwa 1.200</dd>"), "{page}");
    // The release loop polled every room's stock by now: the unknown event's room has no figure.
    let v = status("r2", "cat").await;
    assert_eq!(v["state"], "waiting", "{v}");
    assert!(v.get("tickets_left").is_none(), "never a guess: {v}");
    let page = request("GET", &format!("{base}/queue/r2"), &[("x-user-id", "cat"), ("accept", "text/html")], b"").await.text();
    assert!(page.contains("<div id=\"tickets-box\" class=\"wide\" hidden>"), "{page}");
}

/// Issue 39: a hold answered through the edge wakes the release's step between ticks. Four
/// tickets, two a fan: the first step lets two fans in and the promises hold the rest back; one of
/// them holds a single ticket through the edge, which frees one ticket no one is promised, and the
/// hold itself (not only the loop's quarter-second beat) wakes the step that lets the third fan in
/// for it — `claims.woken_by_holds` counts such steps. Nobody else goes in: the fourth ticket is
/// the second fan's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_through_the_edge_wakes_the_step_that_lets_the_next_fan_in() {
    let edge = edge_with_embedded_sale(
        "Club",
        "floor",
        4,
        2,
        "[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nmax-qty = 2\nrelease = { mode = \"fixed\", rate = 0.0 }\n",
    );
    let mut fans: Vec<Client> = ["ann", "bob", "cat", "dan", "eve"].iter().map(|u| Client::user(u)).collect();
    for c in fans.iter_mut() {
        assert_eq!(c.json(&edge.url("/queue/r1")).await.status, 200);
    }
    let stats = || async { edge.admin("GET", "/admin/rooms/r1/stats", "").await.json() };
    // The stock is known before anyone goes in (the release loop reads it before each tick).
    let deadline = Instant::now() + Duration::from_secs(8);
    while stats().await["available"] != json!(4) {
        assert!(Instant::now() < deadline, "no stock read: {}", stats().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // 10 a second from now: two fans fit the four tickets, the rest is held back.
    let r = edge.admin("PUT", "/admin/rooms/r1/release", r#"{"mode":"fixed","rate":10}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ann = until_admitted(&edge, &mut fans[0], "r1").await;
    let bob = until_admitted(&edge, &mut fans[1], "r1").await;
    assert_eq!(stats().await["claims"]["woken_by_holds"], 0);
    // Every ticket promised: the queue says so from the step after the one that let them in (the
    // next quarter-second read of the stock, or the next tick).
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let cat_status = fans[2].json(&edge.url("/queue/r1/status")).await.json();
        if cat_status["state"] == "sold_out" {
            break;
        }
        assert!(Instant::now() < deadline, "every ticket promised: {cat_status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hold = |token: String, user: &'static str| {
        let url = edge.url("/v1/events/ev-1/holds");
        async move {
            let auth = format!("Bearer {token}");
            let body = json!({"sku": "floor", "qty": 1, "idempotency_key": format!("{user}-1"), "identity": {"phone": format!("p-{user}")}});
            request("POST", &url, &[("authorization", &auth), ("x-user-id", user), ("content-type", "application/json")], body.to_string().as_bytes())
                .await
        }
    };
    // A hold the core refuses (here a forged token: 401) wakes
    // nothing: only the holds a fan's one-time token buys do.
    let forged = format!("{}x", &ann["token"].as_str().unwrap()[..40]);
    assert_eq!(hold(forged, "ann").await.status, 401);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stats().await["claims"]["woken_by_holds"], 0);
    let r = hold(ann["token"].as_str().unwrap().to_owned(), "ann").await;
    assert_eq!(r.status, 201, "{}", r.text());
    let deadline = Instant::now() + Duration::from_secs(5);
    while stats().await["claims"]["woken_by_holds"] == json!(0) {
        assert!(Instant::now() < deadline, "the hold woke no step: {}", stats().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    until_admitted(&edge, &mut fans[2], "r1").await;
    // Bob's two and Cat's one: every ticket promised again, Dan waits.
    let r = hold(bob["token"].as_str().unwrap().to_owned(), "bob").await;
    assert_eq!(r.status, 201, "{}", r.text());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let dan = fans[3].json(&edge.url("/queue/r1/status")).await.json();
    assert_eq!(dan["state"], "sold_out", "{dan}");
    assert_eq!(stats().await["claims"]["open"], 1, "Cat's place, promised");
}
