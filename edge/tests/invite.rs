//! The invite lane through real edges (issue #28): a presale window in which only invitees take
//! a place, invite-only rooms, codes (uploaded, generated, revoked; one use each, bound to the
//! identity that redeems them), the allowlist of user ids, the invite page in the fan's
//! language, and the hostile cases — reused, guessed, shared, brute-forced (429), malformed and
//! oversized codes, a code of another room — on the embedded store and on a real Redis shared by
//! two edges and kept over an edge's restart.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use wicket_testkit::RedisServer;

/// `[edge]` extras: users from `x-user-id`, the device-users rule wide open (the tests use many
/// user ids from one address), `[tokens]`, and rooms `r1` (with `r1_extra`) and `r2`, both
/// releasing at once.
fn config(r1_extra: &str) -> String {
    format!(
        "user-header = \"x-user-id\"\nmax-body-bytes = 2048\n[edge.anomaly]\ndevice-max-users = 1000\n{}\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 1000.0 }}\n{r1_extra}\n\
         [[rooms]]\nid = \"r2\"\nevent = \"ev-2\"\ntarget = \"/buy/ev-2\"\nprotected = [\"/buy/ev-2\"]\n\
         release = {{ mode = \"fixed\", rate = 1000.0 }}\ninvite = {{ only = true }}\n",
        hs_tokens()
    )
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339).unwrap()
}

/// A fan: a cookie jar, a user agent of its own, and maybe a user id.
struct Fan {
    jar: HashMap<String, String>,
    ua: String,
    user: Option<String>,
    lang: &'static str,
}

impl Fan {
    fn new(name: &str) -> Self {
        Fan { jar: HashMap::new(), ua: format!("fan-{name}"), user: None, lang: "en" }
    }

    fn user(name: &str) -> Self {
        Fan { user: Some(name.to_owned()), ..Fan::new(name) }
    }

    async fn send(&mut self, method: &str, url: &str, accept: &str, ctype: &str, body: &[u8]) -> Resp {
        let cookie = self.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
        let mut h = vec![("cookie", cookie.as_str()), ("accept", accept), ("user-agent", self.ua.as_str()), ("accept-language", self.lang)];
        if let Some(u) = &self.user {
            h.push(("x-user-id", u.as_str()));
        }
        if !ctype.is_empty() {
            h.push(("content-type", ctype));
        }
        let r = request(method, url, &h, body).await;
        self.jar.extend(r.cookies());
        r
    }

    async fn get(&mut self, url: &str) -> Resp {
        self.send("GET", url, "application/json", "", b"").await
    }

    async fn page(&mut self, url: &str) -> Resp {
        self.send("GET", url, "text/html", "", b"").await
    }

    async fn redeem(&mut self, edge: &TestEdge, room: &str, code: &str) -> Resp {
        let body = json!({ "code": code }).to_string();
        self.send("POST", &edge.url(&format!("/queue/{room}/invite")), "application/json", "application/json", body.as_bytes()).await
    }

    /// Polls `room` until admitted (at most 10 s).
    async fn admitted(&mut self, edge: &TestEdge, room: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.get(&edge.url(&format!("/queue/{room}/status"))).await;
            assert_eq!(r.status, 200, "{}", r.text());
            if r.json()["state"] == "admitted" {
                return;
            }
            assert!(Instant::now() < deadline, "not admitted: {}", r.text());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The refusal of a fan outside the lane, as JSON.
fn invite_only(room: &str, until: Option<&str>) -> Value {
    json!({
        "error": "invite_only",
        "message": "this sale is open to invited fans only for now: redeem an invite code first",
        "invite": format!("/queue/{room}/invite"),
        "only_until": until,
    })
}

fn refusal(room: &str, code: &str, message: &str, until: Option<&str>) -> Value {
    json!({"error": code, "message": message, "invite": format!("/queue/{room}/invite"), "only_until": until})
}

async fn generate(edge: &TestEdge, room: &str, n: u64) -> Vec<String> {
    let r = edge.admin("POST", &format!("/admin/rooms/{room}/invites/codes"), &json!({ "generate": n }).to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!((v["added"].as_u64(), v["given"].as_u64()), (Some(n), Some(n)), "{v}");
    v["codes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect()
}

async fn counts(edge: &TestEdge, room: &str) -> (u64, u64, u64) {
    let r = edge.admin("GET", &format!("/admin/rooms/{room}/invites"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    (v["codes"].as_u64().unwrap(), v["redeemed"].as_u64().unwrap(), v["users"].as_u64().unwrap())
}

/// The presale: until `only-until` only invitees (a redeemed code, an allowlisted user id) take a
/// place and are admitted; everyone else gets the invite page or `invite_only`; a code redeemed
/// once is the redeemer's (again: idempotent; anyone else: 409); after the window everyone queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presale_window_lets_only_invitees_queue_then_everyone() {
    let until_t = time::OffsetDateTime::now_utc() + time::Duration::seconds(8);
    let until = rfc3339(until_t.replace_nanosecond(0).unwrap());
    let edge = TestEdge::start(&config(&format!("invite = {{ only-until = \"{until}\" }}")));
    let codes = generate(&edge, "r1", 3).await;
    assert!(codes.iter().all(|c| c.len() == 19 && c.matches('-').count() == 3), "{codes:?}");
    let r = edge.admin("POST", "/admin/rooms/r1/invites/users", r#"{"users": ["vip-1", "vip-2"]}"#).await;
    assert_eq!((r.status, r.json()), (200, json!({"added": 2, "given": 2})));
    assert_eq!(counts(&edge, "r1").await, (3, 0, 2));
    let summary = edge.admin("GET", "/admin/rooms/r1/invites", "").await.json();
    assert_eq!(summary["invite_only"], true);
    assert_eq!(summary["only_until"], until.as_str());

    // Outside the lane: refused as JSON, as the page (in the fan's language), and on POST join.
    let mut outsider = Fan::new("outsider");
    let r = outsider.get(&edge.url("/queue/r1")).await;
    assert_eq!((r.status, r.json()), (403, invite_only("r1", Some(&until))));
    assert!(!r.cookies().contains_key("wicket_q_r1"), "no place for an outsider");
    let r = outsider.page(&edge.url("/queue/r1")).await;
    assert_eq!(r.status, 403);
    let page = r.text();
    assert!(page.contains(">Invited fans only</h1>"), "{page}");
    assert!(page.contains(&format!("Until {} (UTC)", until.replacen('T', " ", 1))), "{page}");
    assert!(page.contains("<form method=post action=\"/queue/r1/invite\">") && page.contains("name=code"), "{page}");
    outsider.lang = "ja";
    let page = outsider.page(&edge.url("/queue/r1")).await.text();
    assert!(page.contains("<html lang=ja>") && page.contains("招待されたファン限定"), "{page}");
    outsider.lang = "ar";
    let page = outsider.page(&edge.url("/queue/r1")).await.text();
    assert!(page.contains("<html lang=ar dir=rtl>") && page.contains("للمدعوّين فقط"), "{page}");
    let r = outsider.send("POST", &edge.url("/queue/r1/join"), "application/json", "application/json", b"{}").await;
    assert_eq!((r.status, r.json()), (403, invite_only("r1", Some(&until))));
    let r = outsider.get(&edge.url("/queue/r1/status")).await;
    assert_eq!(r.status, 401, "no ticket: {}", r.text());

    // A code: redeemed, then the queue and admission.
    let mut invitee = Fan::new("invitee");
    let r = invitee.redeem(&edge, "r1", &codes[0]).await;
    assert_eq!((r.status, r.json()), (200, json!({"invited": true, "again": false, "queue": "/queue/r1"})));
    let r = invitee.redeem(&edge, "r1", &codes[0]).await;
    assert_eq!((r.status, r.json()), (200, json!({"invited": true, "again": true, "queue": "/queue/r1"})), "idempotent");
    let r = invitee.get(&edge.url("/queue/r1")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    invitee.admitted(&edge, "r1").await;
    // The same code from someone else (shared, leaked): refused.
    let mut sharer = Fan::new("sharer");
    let r = sharer.redeem(&edge, "r1", &codes[0]).await;
    assert_eq!(
        (r.status, r.json()),
        (409, refusal("r1", "invite_taken", "this invite code was already redeemed by someone else", Some(&until)))
    );
    assert_eq!(sharer.get(&edge.url("/queue/r1")).await.status, 403);
    // An invitee's second code is left for someone else.
    let r = invitee.redeem(&edge, "r1", &codes[1]).await;
    assert_eq!((r.status, r.json()["again"].clone()), (200, json!(true)));
    // Another spelling of a code: lower case, without the dashes.
    let mut other = Fan::new("other");
    let r = other.redeem(&edge, "r1", &codes[1].replace('-', "").to_lowercase()).await;
    assert_eq!((r.status, r.json()["again"].clone()), (200, json!(false)), "{}", r.text());
    assert_eq!(other.get(&edge.url("/queue/r1")).await.status, 200);
    // The allowlist: the user id, on any device.
    let mut vip = Fan::user("vip-1");
    assert_eq!(vip.get(&edge.url("/queue/r1")).await.status, 200);
    vip.admitted(&edge, "r1").await;
    let mut not_vip = Fan::user("vip-3");
    assert_eq!(not_vip.get(&edge.url("/queue/r1")).await.status, 403);
    // A `?invite=` link: redeemed, then the queue page.
    let mut linked = Fan::new("linked");
    let r = linked.page(&edge.url(&format!("/queue/r1?invite={}", codes[2]))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.cookies().contains_key("wicket_q_r1"));
    assert_eq!(counts(&edge, "r1").await, (3, 3, 2));

    // After the window: everyone queues and is let in.
    let wait = (until_t - time::OffsetDateTime::now_utc()).whole_milliseconds().max(0) as u64 + 1200;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let r = outsider.get(&edge.url("/queue/r1")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    outsider.admitted(&edge, "r1").await;
    assert_eq!(sharer.get(&edge.url("/queue/r1")).await.status, 200);
    assert_eq!(edge.admin("GET", "/admin/rooms/r1/invites", "").await.json()["invite_only"], false);
}

/// Guessed, malformed, oversized and brute-forced codes, a code of another room, the form's
/// answers, revocation, and the admin API's bad input: each with its exact answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_codes_are_refused_and_brute_force_hits_the_limit() {
    let edge = TestEdge::start(&config("invite = { only = true }"));
    let r1 = generate(&edge, "r1", 2).await;
    let r2 = generate(&edge, "r2", 1).await;
    let invalid = |room: &str| refusal(room, "invite_invalid", "no such invite code for this room", None);
    let malformed = |room: &str| refusal(room, "bad_request", "an invite code is 6-64 letters, digits and '-'", None);

    // A code of room r2 on room r1: unknown there (and still unused on r2).
    let mut fan = Fan::new("a");
    let r = fan.redeem(&edge, "r1", &r2[0]).await;
    assert_eq!((r.status, r.json()), (403, invalid("r1")));
    // Guessed: unknown.
    let r = fan.redeem(&edge, "r1", "AAAA-BBBB-CCCC-DDDD").await;
    assert_eq!((r.status, r.json()), (403, invalid("r1")));
    // Malformed: too short, too long, other characters.
    let r = fan.redeem(&edge, "r1", "ab-c").await;
    assert_eq!((r.status, r.json()), (400, malformed("r1")));
    // The identity's attempts this minute are spent now (5): the next one is 429, right code or not.
    let r = fan.redeem(&edge, "r1", &"A".repeat(65)).await;
    assert_eq!((r.status, r.json()), (400, malformed("r1")));
    let r = fan.redeem(&edge, "r1", "abc$def1").await;
    assert_eq!((r.status, r.json()), (400, malformed("r1")));
    let r = fan.redeem(&edge, "r1", &r1[0]).await;
    assert_eq!(
        (r.status, r.json()),
        (429, refusal("r1", "rate_limited", "too many invite code attempts: wait, then try again", None))
    );
    let secs: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&secs), "{secs}");
    assert_eq!(fan.get(&edge.url("/queue/r1")).await.status, 403, "still outside the lane");
    // The code of r2 still works on r2.
    let mut b = Fan::new("b");
    let r = b.redeem(&edge, "r2", &r2[0]).await;
    assert_eq!((r.status, r.json()["invited"].clone()), (200, json!(true)));
    assert_eq!(b.get(&edge.url("/queue/r2")).await.status, 200);

    // Bodies: not JSON, unknown fields, over max-body-bytes.
    let mut c = Fan::new("c");
    let url = edge.url("/queue/r1/invite");
    let r = c.send("POST", &url, "application/json", "application/json", b"code=1").await;
    assert_eq!((r.status, r.json()), (400, json!({"error": "bad_request", "message": "body must be {\"code\": \"...\"} (or the form field code)"})));
    let r = c.send("POST", &url, "application/json", "application/json", br#"{"code":"ABCDEFGH","room":"r2"}"#).await;
    assert_eq!(r.status, 400);
    let big = json!({ "code": "A".repeat(4000) }).to_string();
    let r = c.send("POST", &url, "application/json", "application/json", big.as_bytes()).await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["error"], "payload_too_large");
    let r = c.send("GET", &url, "application/json", "", b"").await;
    assert_eq!((r.status, r.json()["error"].clone()), (405, json!("bad_request")));

    // The form: a wrong code gets the page with the problem, the right one a 303 to the queue.
    let mut d = Fan::new("d");
    let r = d.send("POST", &url, "text/html", "application/x-www-form-urlencoded", b"code=ZZZZ-ZZZZ").await;
    assert_eq!(r.status, 403);
    assert!(r.text().contains("This code is not valid for this sale."), "{}", r.text());
    let r = d.send("POST", &url, "text/html", "application/x-www-form-urlencoded", format!("code={}", r1[1]).as_bytes()).await;
    assert_eq!((r.status, r.header("location")), (303, Some("/queue/r1")), "{}", r.text());
    assert_eq!(d.page(&edge.url("/queue/r1")).await.status, 200);

    // Brute force from one address with many identities: 20 attempts a minute, then 429.
    let mut last = 0;
    for i in 0..25 {
        let mut g = Fan::user(&format!("guesser-{i}"));
        let r = g.redeem(&edge, "r1", &format!("GUESS{i:04}")).await;
        last = r.status;
        if r.status == 429 {
            assert!(r.header("retry-after").is_some());
            break;
        }
        assert_eq!(r.status, 403, "{}", r.text());
    }
    assert_eq!(last, 429, "the address limit held");

    // Revoked: gone from the counts (what a revoked code answers is checked on Redis below:
    // this address is over its limit now).
    let fresh = generate(&edge, "r1", 1).await;
    let r = edge.admin("POST", "/admin/rooms/r1/invites/revoke", &json!({"codes": [fresh[0].clone()]}).to_string()).await;
    assert_eq!((r.status, r.json()), (200, json!({"codes": 1, "users": 0})));
    assert_eq!(counts(&edge, "r1").await, (2, 1, 0), "r1[1] redeemed, r1[0] unused, the revoked one gone");

    // The admin API's bad input: nothing stored.
    let post = |path: &'static str, body: &'static str| {
        let edge = &edge;
        async move { edge.admin("POST", path, body).await }
    };
    let r = post("/admin/rooms/r1/invites/codes", r#"{"codes": ["GOOD-CODE-1", "bad", "ALSO GOOD", "x$y"]}"#).await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!((v["error"].as_str(), v["message"].as_str()), (Some("bad_request"), Some("malformed or weak codes: nothing was stored")));
    let paths: Vec<&str> = v["issues"].as_array().unwrap().iter().map(|i| i["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["codes[1]", "codes[2]", "codes[3]"]);
    assert_eq!(counts(&edge, "r1").await, (2, 1, 0));
    for body in [r#"{"codes": []}"#, r#"{"generate": 0}"#, r#"{"generate": 10001}"#, r#"{"codes": ["ABCDEFGH"], "generate": 1}"#, r#"{"code": ["ABCDEFGH"]}"#, "[]", "nope"] {
        let r = edge.admin("POST", "/admin/rooms/r1/invites/codes", body).await;
        assert_eq!((r.status, r.json()["error"].clone()), (400, json!("bad_request")), "{body}: {}", r.text());
    }
    let many = json!({ "codes": (0..10_001).map(|i| format!("CODE{i:06}")).collect::<Vec<_>>() }).to_string();
    let r = edge.admin("POST", "/admin/rooms/r1/invites/codes", &many).await;
    assert_eq!((r.status, r.json()), (400, json!({"error": "bad_request", "message": "at most 10000 codes a request"})));
    let r = post("/admin/rooms/r1/invites/users", r#"{"users": ["ok", "", "a\u0001b"]}"#).await;
    let paths: Vec<String> = r.json()["issues"].as_array().unwrap().iter().map(|i| i["path"].as_str().unwrap().to_owned()).collect();
    assert_eq!((r.status, paths), (400, vec!["users[1]".to_owned(), "users[2]".to_owned()]));
    let r = post("/admin/rooms/r1/invites/revoke", "{}").await;
    assert_eq!((r.status, r.json()), (400, json!({"error": "bad_request", "message": "give \"codes\" and/or \"users\" to revoke"})));
    let r = edge.admin("PUT", "/admin/rooms/r1/invites/codes", "{}").await;
    assert_eq!((r.status, r.json()), (405, json!({"error": "bad_request", "message": "method not allowed here"})));
    let r = edge.admin("GET", "/admin/rooms/nope/invites", "").await;
    assert_eq!((r.status, r.json()["error"].clone()), (404, json!("not_found")));
    let r = request("GET", &edge.admin_url("/admin/rooms/r1/invites"), &[], b"").await;
    assert_eq!(r.status, 401);
    // Cleared: every code gone; the lane is empty.
    let r = edge.admin("DELETE", "/admin/rooms/r1/invites", "").await;
    assert_eq!((r.status, r.json()["codes"].clone(), r.json()["redeemed"].clone()), (200, json!(0), json!(0)));
}

/// Two edges on one Redis: codes uploaded on A are redeemed on B, the redemption holds on A (the
/// same code from someone else: 409), the allowlist made on B lets a user in on A, and an edge
/// started afresh on the same store sees all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_edge_and_a_restart_see_the_redemptions_in_redis() {
    let redis = RedisServer::start();
    let top = format!("store = \"{}\"", redis.url());
    let cfg = config("invite = { only = true }");
    let a = TestEdge::start_full(&top, &cfg, &[], &[]);
    let b = TestEdge::start_full(&top, &cfg, &[], &[]);
    let codes = generate(&a, "r1", 2).await;
    assert_eq!(counts(&b, "r1").await, (2, 0, 0), "B sees A's upload");
    let r = b.admin("POST", "/admin/rooms/r1/invites/users", r#"{"users": ["vip-9"]}"#).await;
    assert_eq!(r.status, 200);

    let mut x = Fan::user("x");
    let r = x.redeem(&b, "r1", &codes[0]).await;
    assert_eq!((r.status, r.json()["again"].clone()), (200, json!(false)));
    let r = x.get(&a.url("/queue/r1")).await;
    assert_eq!(r.status, 200, "an invitee on the other edge: {}", r.text());
    x.admitted(&a, "r1").await;
    let mut y = Fan::user("y");
    let r = y.redeem(&a, "r1", &codes[0]).await;
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(y.get(&a.url("/queue/r1")).await.status, 403);
    let mut vip = Fan::user("vip-9");
    assert_eq!(vip.get(&a.url("/queue/r1")).await.status, 200);
    // A code of r1 is unknown on r2, on the shared store too.
    let r = y.redeem(&b, "r2", &codes[1]).await;
    assert_eq!((r.status, r.json()["error"].clone()), (403, json!("invite_invalid")));

    // A restart: a new edge on the same store.
    drop(a);
    let c = TestEdge::start_full(&top, &cfg, &[], &[]);
    assert_eq!(counts(&c, "r1").await, (2, 1, 1));
    let mut x2 = Fan::user("x");
    assert_eq!(x2.get(&c.url("/queue/r1")).await.status, 200, "x is still an invitee");
    let r = Fan::user("z").redeem(&c, "r1", &codes[0]).await;
    assert_eq!(r.status, 409, "still x's: {}", r.text());
    let r = x2.redeem(&c, "r1", &codes[0]).await;
    assert_eq!((r.status, r.json()["again"].clone()), (200, json!(true)));
    // Revoked on C: the allowlisted user and the code's redeemer are outside again (a place
    // taken before stays with its ticket), and the code is unknown.
    let r = c.admin("POST", "/admin/rooms/r1/invites/revoke", &json!({"codes": [codes[0].clone()], "users": ["vip-9"]}).to_string()).await;
    assert_eq!((r.status, r.json()), (200, json!({"codes": 1, "users": 1})));
    assert_eq!(Fan::user("vip-9").get(&b.url("/queue/r1")).await.status, 403);
    assert_eq!(Fan::user("x").get(&b.url("/queue/r1")).await.status, 403, "x's invitation went with the code");
    assert_eq!(Fan::user("w").redeem(&b, "r1", &codes[0]).await.status, 403);
    assert_eq!(counts(&b, "r1").await, (1, 0, 0));

    // Bound to the identity, not the browser: the device of a fan who redeemed without signing
    // in is no invitee once signed in as someone (that identity is another), and the code stays
    // the device's.
    let mut anon = Fan::new("anon");
    let r = anon.redeem(&b, "r1", &codes[1]).await;
    assert_eq!((r.status, r.json()["again"].clone()), (200, json!(false)));
    let mut signed_in = Fan { user: Some("someone".into()), ..Fan::new("anon") };
    signed_in.jar = anon.jar.clone();
    assert_eq!(signed_in.get(&b.url("/queue/r1")).await.status, 403);
    assert_eq!(signed_in.redeem(&b, "r1", &codes[1]).await.status, 409);
    assert_eq!(anon.get(&b.url("/queue/r1")).await.status, 200);

    // The store down: 503 to retry, never "not invited".
    drop(redis);
    let unavailable = json!({"error": "unavailable", "message": "the waiting room is unavailable, try again shortly"});
    let r = Fan::user("v").redeem(&b, "r1", &codes[1]).await;
    assert_eq!((r.status, r.json()), (503, unavailable.clone()));
    let r = Fan::user("v2").get(&b.url("/queue/r1")).await;
    assert_eq!((r.status, r.json()), (503, unavailable));
    let r = b.admin("GET", "/admin/rooms/r1/invites", "").await;
    assert_eq!((r.status, r.json()["error"].clone()), (503, json!("unavailable")));
}

/// A room whose invite lane has 30% of each release, no invite-only window, releasing only in
/// two batches (10 at `t1`, 4 at `t2`), so each step's counts are exact.
fn lane_config(t1: &str, t2: &str) -> String {
    format!(
        "user-header = \"x-user-id\"\n[edge.anomaly]\ndevice-max-users = 1000\n{}\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\ninvite = {{ share = 0.3 }}\n\
         batches = [{{ at = \"{t1}\", count = 10 }}, {{ at = \"{t2}\", count = 4 }}]\n",
        hs_tokens()
    )
}

/// The lane's share on `edges` (one edge, or two sharing a store; fans join and poll on both):
/// N1..N8 join, then the invitees I1..I5, then N9..N12. The first step (10) admits I1 I2 I3
/// through the lane (30%) and N1..N7 in order; the second (4) admits I4 through the lane and
/// N8, then — I1..I4's places passed for free — I5 at its own turn and N9. N10..N12 wait: no
/// one outside the lane is ever admitted through it.
async fn lane_share_scenario(edges: [&TestEdge; 2], t1: time::OffsetDateTime, t2: time::OffsetDateTime) {
    let (a, b) = (edges[0], edges[1]);
    let r = a.admin("POST", "/admin/rooms/r1/invites/users", r#"{"users": ["inv-1", "inv-2", "inv-3", "inv-4", "inv-5"]}"#).await;
    assert_eq!((r.status, r.json()), (200, json!({"added": 5, "given": 5})));
    let names: Vec<String> =
        (1..=8).map(|i| format!("n-{i}")).chain((1..=5).map(|i| format!("inv-{i}"))).chain((9..=12).map(|i| format!("n-{i}"))).collect();
    let mut fans: Vec<(String, Fan)> = names.iter().map(|n| (n.clone(), Fan::user(n))).collect();
    for (i, (name, fan)) in fans.iter_mut().enumerate() {
        let r = fan.get(&edges[i % 2].url("/queue/r1")).await;
        assert_eq!(r.status, 200, "{name}: {}", r.text());
    }
    // Before the first step: I1 is first in its lane (nobody ahead); N9 has 13 places ahead.
    /// `name`'s status, polled on `edge`.
    async fn ahead(fans: &mut [(String, Fan)], name: &str, edge: &TestEdge) -> Value {
        let i = fans.iter().position(|(n, _)| n == name).unwrap();
        fans[i].1.get(&edge.url("/queue/r1/status")).await.json()
    }
    let s = ahead(&mut fans, "inv-1", b).await;
    assert_eq!((s["state"].as_str(), s["ahead"].as_u64(), s["position"].as_u64()), (Some("waiting"), Some(0), Some(9)), "{s}");
    let s = ahead(&mut fans, "n-9", a).await;
    assert_eq!((s["state"].as_str(), s["ahead"].as_u64()), (Some("waiting"), Some(13)), "{s}");
    let summary = b.admin("GET", "/admin/rooms/r1/invites", "").await.json();
    assert_eq!((summary["share"].as_f64(), summary["invite_only"].as_bool()), (Some(0.3), Some(false)), "{summary}");
    assert!(time::OffsetDateTime::now_utc() < t1, "everyone must have queued before the first step");

    /// Polls every fan not admitted yet (each on the other edge than last time) until `want` are
    /// admitted or `until`; the names admitted.
    async fn admitted(fans: &mut [(String, Fan)], edges: [&TestEdge; 2], want: usize, until: time::OffsetDateTime) -> Vec<String> {
        let mut round = 0;
        loop {
            let mut yes = Vec::new();
            for (i, (name, fan)) in fans.iter_mut().enumerate() {
                let r = fan.get(&edges[(i + round) % 2].url("/queue/r1/status")).await;
                assert_eq!(r.status, 200, "{name}: {}", r.text());
                if r.json()["state"] == "admitted" {
                    yes.push(name.clone());
                }
            }
            round += 1;
            if yes.len() >= want || time::OffsetDateTime::now_utc() >= until {
                return yes;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let wait_until = |t: time::OffsetDateTime| async move {
        let left = t - time::OffsetDateTime::now_utc();
        if left.is_positive() {
            tokio::time::sleep(left.unsigned_abs()).await;
        }
    };
    wait_until(t1).await;
    let first = admitted(&mut fans, edges, 10, t2 - time::Duration::seconds(1)).await;
    let want: Vec<&str> = vec!["n-1", "n-2", "n-3", "n-4", "n-5", "n-6", "n-7", "inv-1", "inv-2", "inv-3"];
    assert_eq!(first, want, "the first step: 3 of 10 through the lane, in its join order, 7 in order");
    // Nothing more until the next step (the release is the batches only).
    let s = ahead(&mut fans, "inv-4", a).await;
    assert_eq!((s["state"].as_str(), s["ahead"].as_u64()), (Some("waiting"), Some(0)), "I4 is next in the lane: {s}");
    wait_until(t2).await;
    let second = admitted(&mut fans, edges, 14, t2 + time::Duration::seconds(8)).await;
    let want: Vec<&str> = vec!["n-1", "n-2", "n-3", "n-4", "n-5", "n-6", "n-7", "n-8", "inv-1", "inv-2", "inv-3", "inv-4", "inv-5", "n-9"];
    assert_eq!(second, want, "the second step: I4 through the lane, then N8, I5 (its own turn) and N9");
    for name in ["n-10", "n-11", "n-12"] {
        let s = ahead(&mut fans, name, b).await;
        assert_eq!(s["state"], "waiting", "{name} is never admitted through the lane: {s}");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let summary = b.admin("GET", "/admin/rooms/r1/invites", "").await.json();
    assert_eq!((summary["lane_places"].as_u64(), summary["lane_admitted"].as_u64()), (Some(5), Some(5)), "{summary}");
}

fn lane_times() -> (time::OffsetDateTime, time::OffsetDateTime, String, String) {
    // Time to start the edges and queue everyone before the first step, on a loaded machine too.
    let t1 = (time::OffsetDateTime::now_utc() + time::Duration::seconds(12)).replace_nanosecond(0).unwrap();
    let t2 = t1 + time::Duration::seconds(8);
    (t1, t2, rfc3339(t1), rfc3339(t2))
}

/// The lane's share of each release on one edge (embedded state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lane_takes_its_share_of_each_release_first_in_join_order() {
    let (t1, t2, s1, s2) = lane_times();
    let edge = TestEdge::start(&lane_config(&s1, &s2));
    lane_share_scenario([&edge, &edge], t1, t2).await;
    // A share out of (0, 1], or beside a random draw, is refused with its path (every problem at
    // once); nothing changes.
    let body = json!({"event": "e9", "target": "/buy/e9", "protected": ["/buy/e9"], "method": "random",
        "schedule": {"opens_at": s2}, "invite": {"share": 1.5}, "max_qty": 0});
    let r = edge.admin("PUT", "/admin/rooms/r9", &body.to_string()).await;
    assert_eq!((r.status, r.json()["error"].as_str()), (400, Some("bad_request")), "{}", r.text());
    let mut paths: Vec<String> = r.json()["issues"].as_array().unwrap().iter().map(|i| i["path"].as_str().unwrap().to_owned()).collect();
    paths.sort();
    assert_eq!(paths, ["room.invite.share", "room.invite.share", "room.max_qty"], "{}", r.text());
    let r = edge.admin("PUT", "/admin/rooms/r9", r#"{"event": "e9", "target": "/", "protected": ["/a"], "invite": {"share": "0.3"}}"#).await;
    assert_eq!((r.status, r.json()["error"].as_str()), (400, Some("bad_request")), "{}", r.text());
    assert_eq!(edge.admin("GET", "/admin/rooms/r9", "").await.status, 404, "nothing was made");
}

/// The same on two edges sharing a real Redis: fans join and poll on both, and both agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lane_share_holds_across_two_edges_on_redis() {
    let redis = RedisServer::start();
    let top = format!("store = \"{}\"", redis.url());
    let (t1, t2, s1, s2) = lane_times();
    let cfg = lane_config(&s1, &s2);
    let a = TestEdge::start_full(&top, &cfg, &[], &[]);
    let b = TestEdge::start_full(&top, &cfg, &[], &[]);
    lane_share_scenario([&a, &b], t1, t2).await;
}

/// Waits, when less than `need` seconds of the current minute are left, for the next minute (the
/// per-minute budgets below must not reset halfway through a test).
async fn a_fresh_minute(need: u64) {
    let into = time::OffsetDateTime::now_utc().unix_timestamp() as u64 % 60;
    if 60 - into < need {
        tokio::time::sleep(Duration::from_secs(60 - into)).await;
    }
}

/// The room's budget of wrong codes (issue #38): guesses from many identities (each under its
/// own limits) spend it; then no code of the room is judged, the right one neither (429 with
/// `Retry-After`), while another room still judges; each refusal is counted as `rate_limited`
/// in the room's report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rooms_wrong_code_budget_stops_all_judging_once_spent() {
    let edge = TestEdge::start(&config("invite = { only = true, wrong-codes-per-minute = 6 }"));
    let r1 = generate(&edge, "r1", 1).await;
    let r2 = generate(&edge, "r2", 1).await;
    a_fresh_minute(20).await;
    // A right code and malformed ones spend nothing of the budget.
    let r = Fan::user("early").redeem(&edge, "r1", &r1[0]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(Fan::user("typo").redeem(&edge, "r1", "no!").await.status, 400);
    for i in 0..6 {
        let r = Fan::user(&format!("guesser-{i}")).redeem(&edge, "r1", &format!("GUESS-{i:04}-X")).await;
        assert_eq!(r.status, 403, "{i}: {}", r.text());
    }
    let spent = refusal(
        "r1",
        "rate_limited",
        "too many wrong invite codes for this room this minute: no code is checked until it ends, try again then",
        None,
    );
    let r = Fan::user("guesser-6").redeem(&edge, "r1", "GUESS-0006-X").await;
    assert_eq!((r.status, r.json()), (429, spent.clone()));
    let secs: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&secs), "{secs}");
    // A right code, from a fan with attempts of their own left: not judged either.
    let fresh = generate(&edge, "r1", 1).await;
    let mut honest = Fan::user("honest");
    let r = honest.redeem(&edge, "r1", &fresh[0]).await;
    assert_eq!((r.status, r.json()), (429, spent));
    assert_eq!(honest.get(&edge.url("/queue/r1")).await.status, 403, "not redeemed");
    // The page says so too.
    let r = honest.send("POST", &edge.url("/queue/r1/invite"), "text/html", "application/x-www-form-urlencoded", b"code=ABCD-1234-EFGH").await;
    assert_eq!(r.status, 429);
    assert!(r.text().contains("Too many tries"), "{}", r.text());
    // Another room has its own budget.
    let r = Fan::user("r2-fan").redeem(&edge, "r2", &r2[0]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Counted where the room's invite refusals are: 6 wrong codes, 3 over the budget.
    let want = (json!(6), json!(3));
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let t = edge.admin("GET", "/admin/rooms/r1/report", "").await.json()["totals"]["refusals"].clone();
        let got = (t["invite_invalid"].clone(), t["rate_limited"].clone());
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "{t}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Uploaded codes carry at least 40 bits (issue #38): a short or digits-only code is refused with
/// its index and why, nothing of the upload is stored; generated codes and revoking any code
/// are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_codes_are_refused_on_upload_with_their_index() {
    let edge = TestEdge::start(&config("invite = { only = true }"));
    let body = json!({"codes": ["ABCD-1234", "ABCDEFGH", "1234-5678-9012", "1234-5678-9012-3", "abcdefghj"]});
    let r = edge.admin("POST", "/admin/rooms/r1/invites/codes", &body.to_string()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!((v["error"].as_str(), v["message"].as_str()), (Some("bad_request"), Some("malformed or weak codes: nothing was stored")));
    let issues: Vec<(String, String)> = v["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["path"].as_str().unwrap().to_owned(), i["message"].as_str().unwrap().to_owned()))
        .collect();
    let weak = |bits: u32| {
        format!(
            "too easy to guess: {bits} bits (its length times log2 of its alphabet: 10 digits, 26 letters, 36 both); \
             at least 40, e.g. 8 letters and digits, 9 letters or 13 digits"
        )
    };
    assert_eq!(issues, [("codes[1]".to_owned(), weak(37)), ("codes[2]".to_owned(), weak(39))], "8 letters, 12 digits");
    assert_eq!(counts(&edge, "r1").await, (0, 0, 0), "nothing stored");
    let strong = json!({"codes": ["ABCD-1234", "1234-5678-9012-3", "abcdefghj"]});
    let r = edge.admin("POST", "/admin/rooms/r1/invites/codes", &strong.to_string()).await;
    assert_eq!((r.status, r.json()), (200, json!({"added": 3, "given": 3})));
    generate(&edge, "r1", 50).await;
    // Revoking does not judge strength: a weak code uploaded before the rule can still go.
    let r = edge.admin("POST", "/admin/rooms/r1/invites/revoke", r#"{"codes": ["ABCDEFGH", "ABCD-1234"]}"#).await;
    assert_eq!((r.status, r.json()), (200, json!({"codes": 1, "users": 0})));
}

/// Lane priority ends with the invitation (issue #38): of two invitees in a lane with the whole
/// release (`share = 1`), the one whose user id is revoked is not admitted at its lane turn (the
/// other is), and keeps its ordinary place: admitted when `serving` reaches it (a release step
/// past it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_invitee_loses_the_lane_but_keeps_its_place() {
    let t1 = (time::OffsetDateTime::now_utc() + time::Duration::seconds(8)).replace_nanosecond(0).unwrap();
    let t2 = t1 + time::Duration::seconds(5);
    let cfg = format!(
        "user-header = \"x-user-id\"\n[edge.anomaly]\ndevice-max-users = 1000\n{}\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\ninvite = {{ share = 1.0 }}\n\
         batches = [{{ at = \"{}\", count = 2 }}, {{ at = \"{}\", count = 4 }}]\n",
        hs_tokens(),
        rfc3339(t1),
        rfc3339(t2)
    );
    let edge = TestEdge::start(&cfg);
    let r = edge.admin("POST", "/admin/rooms/r1/invites/users", r#"{"users": ["inv-1", "inv-2"]}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut fans: Vec<Fan> = ["n-1", "n-2", "n-3", "inv-1", "inv-2"].into_iter().map(Fan::user).collect();
    for f in &mut fans {
        let r = f.get(&edge.url("/queue/r1")).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(time::OffsetDateTime::now_utc() < t1, "everyone must have queued before the first step");
    let r = edge.admin("POST", "/admin/rooms/r1/invites/revoke", r#"{"users": ["inv-1"]}"#).await;
    assert_eq!((r.status, r.json()), (200, json!({"codes": 0, "users": 1})));

    async fn states(fans: &mut [Fan], edge: &TestEdge) -> Vec<String> {
        let mut out = Vec::new();
        for f in fans.iter_mut() {
            let r = f.get(&edge.url("/queue/r1/status")).await;
            assert_eq!(r.status, 200, "{}", r.text());
            out.push(r.json()["state"].as_str().unwrap().to_owned());
        }
        out
    }
    async fn until(fans: &mut [Fan], edge: &TestEdge, want: &[&str], by: time::OffsetDateTime) {
        loop {
            let got = states(fans, edge).await;
            if got == want {
                return;
            }
            assert!(time::OffsetDateTime::now_utc() < by, "{got:?}, want {want:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The first step (2, all the lane's): its two lane places; only inv-2 is still invited.
    until(&mut fans, &edge, &["waiting", "waiting", "waiting", "waiting", "admitted"], t2 - time::Duration::seconds(1)).await;
    let s = fans[3].get(&edge.url("/queue/r1/status")).await.json();
    assert_eq!((s["state"].as_str(), s["position"].as_u64()), (Some("waiting"), Some(4)), "inv-1 waits at its own place: {s}");
    // The second step (4): n-1..n-3, then inv-1 when `serving` reaches its place (its lane turn
    // was spent: it costs the release nothing more, and inv-2's place neither).
    until(&mut fans, &edge, &["admitted"; 5], t2 + time::Duration::seconds(8)).await;
}

/// The invite page in the queue page's words and branding (issue #38): `[edge.queue-page.text.<lang>]
/// invite_title` (and the other invite keys) replace the catalogue's, and the page carries the
/// logo, the colours and the event name (the room's own `event-name` over the edge-wide one), in
/// every language.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_invite_page_has_the_operators_words_and_branding() {
    let queue_page = "[edge.queue-page]\nevent-name = \"Summer Tour\"\nlogo-url = \"/img/logo.png\"\n\
         [edge.queue-page.colours]\naccent = \"#123456\"\n\
         [edge.queue-page.text.en]\ninvite_title = \"Members' presale\"\ninvite_submit = \"Let me in\"\n\
         [edge.queue-page.text.ja]\ninvite_title = \"会員先行\"\n";
    let cfg = config("invite = { only = true }\nevent-name = \"Room One Live\"").replacen("[edge.anomaly]", &format!("{queue_page}[edge.anomaly]"), 1);
    let edge = TestEdge::start(&cfg);
    let mut fan = Fan::new("fan");
    let r = fan.page(&edge.url("/queue/r1")).await;
    assert_eq!(r.status, 403);
    let page = r.text();
    for want in [
        "<title>Members&#39; presale · Room One Live</title>",
        ">Members&#39; presale</h1>",
        "Let me in</button>",
        "<img class=logo src=\"/img/logo.png\"",
        ">Room One Live</p>",
        "<style>:root{--accent:#123456;}</style>",
    ] {
        assert!(page.contains(want), "{want} in {page}");
    }
    assert!(!page.contains("Invited fans only") && !page.contains("Summer Tour"), "{page}");
    // Another room: the edge-wide event name; another language: its own override.
    let page = fan.page(&edge.url("/queue/r2")).await.text();
    assert!(page.contains(">Summer Tour</p>") && page.contains(">Members&#39; presale</h1>"), "{page}");
    fan.lang = "ja";
    let page = fan.page(&edge.url("/queue/r2")).await.text();
    assert!(page.contains(">会員先行</h1>") && page.contains("<img class=logo"), "{page}");
    // The form's answers carry them too.
    fan.lang = "en";
    let r = fan.send("POST", &edge.url("/queue/r1/invite"), "text/html", "application/x-www-form-urlencoded", b"code=ZZZZ-ZZZZ-ZZZZ").await;
    assert_eq!(r.status, 403);
    assert!(r.text().contains(">Members&#39; presale</h1>") && r.text().contains("This code is not valid for this sale."), "{}", r.text());
}
