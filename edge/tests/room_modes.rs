//! A room's operating modes beside the queue (issue #28 items 1 and 4), against real edges, a real
//! origin and, where the room's state is shared, a real Redis: reject-all (the config setting and
//! the operator's run-time switch, published to every edge sharing the room), the queuing status
//! code (200 / 202 / 429 with `Retry-After`), the preview of the room's page on the admin port, and
//! test mode (only fans with the operator's signed test cookie meet the room).
//!
//! `cargo nextest run -p wicket-edge --test room_modes`

mod common;

use std::time::{Duration, Instant};

use common::*;
use wicket_testkit::RedisServer;

const ROOM: &str = "[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n";

/// An edge on `store` (a `store = ...` line, or empty: embedded) in front of `origin`, with `rooms`.
fn edge_with(store: &str, origin: &TestUpstream, rooms: &str) -> TestEdge {
    TestEdge::start_full(store, &format!("origin = \"{}\"\n{}{rooms}", origin.url(), hs_tokens()), &[], &[])
}

async fn stats(edge: &TestEdge, room: &str) -> serde_json::Value {
    let r = edge.admin("GET", &format!("/admin/rooms/{room}/stats"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Polls `fan`'s status of `room` at `base` until `want(state)` holds (up to `secs`); the JSON then.
async fn until_state(fan: &mut Fan, base: &str, room: &str, secs: u64, want: &dyn Fn(&str) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = fan.status(base, room).await;
        if want(v["state"].as_str().unwrap_or("")) {
            return v;
        }
        assert!(Instant::now() < deadline, "not there within {secs} s: {v}");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn html() -> [(&'static str, &'static str); 2] {
    [("accept", "text/html"), ("accept-language", "en")]
}

/// Reject-all at run time, on two edges sharing the room in Redis: switched on at one edge's admin
/// port, every fan without a running session is turned away at both — the queued fan's status says
/// `stopped` (its place kept, its page goes on asking), a new fan gets `closed` without a place (nothing is issued), the protected path answers
/// 403 `closed` (JSON) or the closed page (a browser), never the queue — while the admitted fan's
/// session keeps reaching the origin. `resume` takes people again, from where the queue stood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_all_turns_every_new_fan_away_on_every_edge_and_admitted_sessions_keep_going() {
    let redis = RedisServer::start();
    let origin = TestUpstream::start("origin").await;
    let store = format!("store = \"{}\"", redis.url());
    let room = format!("{ROOM}total-active-max = 1\nrelease = {{ mode = \"fixed\", rate = 1000.0 }}\n");
    let a = edge_with(&store, &origin, &room);
    let b = edge_with(&store, &origin, &room);
    let (base_a, base_b) = (format!("http://{}", a.addr), format!("http://{}", b.addr));

    // One fan in (the cap is one session), one waiting behind it.
    let mut inside = Fan::default();
    assert_eq!(inside.join(&base_a, "r1").await.status, 200);
    until_state(&mut inside, &base_a, "r1", 10, &|s| s == "admitted").await;
    assert_eq!(inside.get(&a.url("/buy/ev-1")).await.json()["upstream"], "origin");
    let mut queued = Fan::default();
    assert_eq!(queued.join(&base_b, "r1").await.status, 200);
    assert_eq!(queued.status(&base_b, "r1").await["state"], "waiting");

    // Switched on at B's admin port.
    let r = b.admin("POST", "/admin/rooms/r1/reject-all", "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["reject_all"], true, "{}", r.text());
    // A applies it within a tick: the queued fan is told entry is stopped, on either edge, and
    // its page says so (not "the sale has ended") and keeps asking.
    until_state(&mut queued, &base_a, "r1", 5, &|s| s == "stopped").await;
    assert_eq!(queued.status(&base_b, "r1").await["state"], "stopped");
    let cookie = queued.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
    let r = get(&format!("{base_a}/queue/r1"), &[("cookie", &cookie), ("accept", "text/html"), ("accept-language", "en")]).await;
    assert!(r.text().contains("data-state=\"stopped\"") && r.text().contains("Entry is stopped for now"), "{}", r.text());
    // Neither a hold nor a rate change lifts it, on either edge.
    for (edge, action) in [(&a, "pause"), (&b, "queue-all")] {
        let r = edge.admin("POST", &format!("/admin/rooms/r1/{action}"), "").await;
        assert_eq!((r.status, r.json()["error"].as_str()), (409, Some("mode_conflict")), "{}", r.text());
    }
    let r = a.admin("PUT", "/admin/rooms/r1/release", r#"{"mode":"fixed","rate":30}"#).await;
    assert_eq!((r.status, r.json()["reject_all"].as_bool()), (200, Some(true)), "{}", r.text());
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(stats(&b, "r1").await["reject_all"], true, "the rate change reached B and lifted nothing");
    assert_eq!(queued.status(&base_b, "r1").await["state"], "stopped");
    let issued = stats(&a, "r1").await["issued"].clone();
    for base in [&base_a, &base_b] {
        // A new fan: `closed`, no place, no ticket.
        let mut late = Fan::default();
        let r = late.join(base, "r1").await;
        assert_eq!((r.status, r.json()["state"].as_str()), (200, Some("closed")), "{}", r.text());
        assert!(!late.jar.contains_key("wicket_q_r1"), "{:?}", late.jar);
        let r = late.get(&format!("{base}/queue/r1/join")).await;
        assert_ne!(r.status, 200, "join is a POST");
        let r = request("POST", &format!("{base}/queue/r1/join"), &[("accept", "application/json")], b"{}").await;
        assert_eq!((r.status, r.json()["state"].as_str()), (200, Some("closed")), "{}", r.text());
        // The protected path: 403 closed (JSON), the closed page (a browser), never the queue.
        let r = late.get(&format!("{base}/buy/ev-1")).await;
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!((r.json()["error"].as_str(), r.json()["room"].as_str()), (Some("closed"), Some("r1")));
        let r = get(&format!("{base}/buy/ev-1"), &html()).await;
        assert_eq!(r.status, 403, "{}", r.text());
        assert!(r.header("location").is_none() && r.text().contains("The sale has ended"), "{}", r.text());
        let r = get(&format!("{base}/queue/r1"), &html()).await;
        assert_eq!(r.status, 200);
        assert!(r.text().contains("data-state=\"closed\"") && !r.cookies().contains_key("wicket_q_r1"), "{}", r.text());
        // The admitted fan's session goes on.
        let r = inside.get(&format!("{base}/buy/ev-1")).await;
        assert_eq!((r.status, r.json()["upstream"].as_str()), (200, Some("origin")), "{}", r.text());
    }
    assert_eq!(stats(&b, "r1").await["issued"], issued, "nobody was queued");
    let metrics = a.admin("GET", "/metrics", "").await.text();
    assert!(metrics.contains("wicket_room_reject_all{room=\"r1\"} 1"), "{metrics}");
    assert!(metrics.contains("wicket_room_paused{room=\"r1\"} 0"), "reject-all is not a pause");
    // Other verbs, a body: refused, nothing changes.
    assert_eq!(b.admin("GET", "/admin/rooms/r1/reject-all", "").await.status, 405);
    assert_eq!(b.admin("POST", "/admin/rooms/nope/reject-all", "").await.status, 404);

    // Resumed at A: B takes people again; the waiting fan is back in the line.
    assert_eq!(a.admin("POST", "/admin/rooms/r1/resume", "").await.status, 200);
    until_state(&mut queued, &base_b, "r1", 5, &|s| s != "stopped").await;
    let mut later = Fan::default();
    let r = later.join(&base_b, "r1").await;
    assert_ne!(r.json()["state"], "closed", "{}", r.text());
    assert!(later.jar.contains_key("wicket_q_r1"));
    assert_eq!(stats(&a, "r1").await["reject_all"], false);
}

/// Reject-all as a room setting (`reject-all = true` in `[[rooms]]`, `reject_all` in the admin
/// body): the same answers, and `resume` does not end it (the setting does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_all_as_a_room_setting_from_the_config_and_the_admin_api() {
    let origin = TestUpstream::start("origin").await;
    let edge = edge_with("", &origin, &format!("{ROOM}reject-all = true\n"));
    let mut fan = Fan::default();
    let r = fan.join(&format!("http://{}", edge.addr), "r1").await;
    assert_eq!(r.json()["state"], "closed", "{}", r.text());
    assert_eq!(fan.get(&edge.url("/buy/ev-1")).await.json()["error"], "closed");
    assert_eq!(edge.admin("POST", "/admin/rooms/r1/resume", "").await.status, 200);
    assert_eq!(fan.get(&edge.url("/buy/ev-1")).await.json()["error"], "closed", "resume does not end the setting");
    // The admin body: off, then on again.
    let body = |reject: bool| format!(r#"{{"event":"ev-1","target":"/buy/ev-1","protected":["/buy/ev-1"],"release":{{"mode":"fixed","rate":0}},"reject_all":{reject}}}"#);
    assert_eq!(edge.admin("PUT", "/admin/rooms/r1", &body(false)).await.status, 200);
    let r = fan.get(&edge.url("/buy/ev-1")).await;
    assert_eq!((r.status, r.json()["error"].as_str()), (403, Some("forbidden")), "back to the queue: {}", r.text());
    assert_eq!(fan.join(&format!("http://{}", edge.addr), "r1").await.json()["state"], "waiting");
    let r = edge.admin("PUT", "/admin/rooms/r1", &body(true)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["config"]["reject-all"], true, "{}", r.text());
    assert_eq!(fan.status(&format!("http://{}", edge.addr), "r1").await["state"], "stopped", "the place is kept");
}

/// The queuing status code: 202 or 429 (with `Retry-After`) on the queue page and the JSON answers
/// of the queue page and join while the fan is queued; status polls stay 200; a room that is over
/// answers 200; the default is 200 as before. Any other code is a config error with its path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queuing_status_code_is_the_rooms_choice_of_200_202_or_429() {
    let origin = TestUpstream::start("origin").await;
    let room = |id: &str, extra: &str| {
        format!("[[rooms]]\nid = \"{id}\"\nevent = \"ev-{id}\"\ntarget = \"/buy/{id}\"\nprotected = [\"/buy/{id}\"]\nrelease = {{ mode = \"fixed\", rate = 0.0 }}\n{extra}")
    };
    let edge = edge_with(
        "",
        &origin,
        &[
            room("plain", ""),
            room("accepted", "queuing-status-code = 202\n"),
            room("busy", "queuing-status-code = 429\n"),
            room("over", "queuing-status-code = 429\nschedule = { opens-at = \"2020-01-01T00:00:00Z\", closes-at = \"2020-01-02T00:00:00Z\" }\n"),
        ]
        .concat(),
    );
    let base = format!("http://{}", edge.addr);
    for (id, code) in [("plain", 200), ("accepted", 202), ("busy", 429)] {
        let queued = code != 200;
        // The page, for browsers and crawlers.
        let r = get(&edge.url(&format!("/queue/{id}")), &html()).await;
        assert_eq!(r.status, code, "{id}: {}", r.text());
        assert!(r.text().contains("data-state=\"waiting\""), "{id}");
        assert_eq!(r.header("retry-after").is_some(), queued, "{id}: {:?}", r.headers);
        if queued {
            let secs: u64 = r.header("retry-after").unwrap().parse().unwrap();
            assert!((1..=30).contains(&secs), "{id}: {secs}");
        }
        // The JSON of the page and of join, for apps.
        let mut fan = Fan::default();
        let r = fan.join(&base, id).await;
        assert_eq!((r.status, r.header("retry-after").is_some()), (code, queued), "{id}: {}", r.text());
        assert_eq!(r.json()["state"], "waiting");
        let cookie = fan.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
        let r = request("POST", &edge.url(&format!("/queue/{id}/join")), &[("cookie", &cookie), ("accept", "application/json")], b"{}").await;
        assert_eq!(r.status, code, "{id} join: {}", r.text());
        // Polls stay 200.
        let r = fan.get(&edge.url(&format!("/queue/{id}/status"))).await;
        assert_eq!((r.status, r.header("retry-after")), (200, None), "{id} poll");
    }
    // Over: nothing to wait for, 200.
    let r = get(&edge.url("/queue/over"), &[("accept", "application/json")]).await;
    assert_eq!((r.status, r.json()["state"].as_str(), r.header("retry-after")), (200, Some("closed"), None), "{}", r.text());

    // Any other code: a config error with its path, and 400 at the admin API.
    for bad in ["queuing-status-code = 503", "queuing-status-code = 200.5", "queuing-status-code = \"429\""] {
        let text = format!("{}{}", hs_tokens(), room("bad", bad));
        let cfg = wicket_edge::WicketConfig::from_toml_str(&text).unwrap();
        let issues = cfg.validate();
        assert!(issues.iter().any(|i| i.path == "rooms[0].queuing-status-code"), "{bad}: {issues:?}");
    }
    let r = edge.admin("PUT", "/admin/rooms/x", r#"{"event":"e","target":"/x","protected":["/x"],"queuing_status_code":302}"#).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["issues"], serde_json::json!([{"path": "room.queuing_status_code", "message": "must be 200, 202 or 429"}]), "the JSON body's spelling: {}", r.text());
    // Nested keys too (the config file keeps its kebab-case: `rooms[0].queuing-status-code` above).
    let r = edge.admin("PUT", "/admin/rooms/x", r#"{"event":"e","target":"/x","protected":["/x"],"session_idle_seconds":1,"release":{"p99_target_ms":0}}"#).await;
    let v = r.json();
    let paths: Vec<&str> = v["issues"].as_array().unwrap().iter().map(|i| i["path"].as_str().unwrap()).collect();
    assert_eq!((r.status, paths), (400, vec!["room.release.p99_target_ms", "room.session_idle_seconds"]), "{}", r.text());
}

/// Test mode, on two edges sharing the room in Redis: a fan without the test cookie reaches the
/// origin as if the room were off (its queue is not for them); a fan with the cookie one edge's
/// admin port issued is queued and admitted through the other; a forged cookie, or another
/// room's, is no cookie. The tester's link sets the cookie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_mode_queues_and_admits_only_the_operators_testers() {
    let redis = RedisServer::start();
    let origin = TestUpstream::start("origin").await;
    let store = format!("store = \"{}\"", redis.url());
    let rooms = format!(
        "{ROOM}test-mode = true\nrelease = {{ mode = \"fixed\", rate = 1000.0 }}\n\
         [[rooms]]\nid = \"r2\"\nevent = \"ev-2\"\ntarget = \"/buy/ev-2\"\nprotected = [\"/buy/ev-2\"]\ntest-mode = true\n"
    );
    let a = edge_with(&store, &origin, &rooms);
    let b = edge_with(&store, &origin, &rooms);
    let base_b = format!("http://{}", b.addr);

    // Not a tester: straight to the origin, no room identity; the queue is not theirs.
    let mut fan = Fan::default();
    let r = fan.get(&b.url("/buy/ev-1")).await;
    assert_eq!((r.status, r.json()["upstream"].as_str()), (200, Some("origin")), "{}", r.text());
    assert!(r.json()["headers"]["wicket-room"].is_null(), "{}", r.text());
    assert_eq!(get(&b.url("/buy/ev-1"), &html()).await.status, 200);
    assert_eq!(fan.join(&base_b, "r1").await.status, 404);
    let r = get(&b.url("/queue/r1"), &html()).await;
    assert_eq!((r.status, r.header("location")), (302, Some("/buy/ev-1")));

    // The operator's cookie, from A's admin port.
    let r = a.admin("POST", "/admin/rooms/r1/test-cookie", r#"{"seconds": 600}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let issued = r.json();
    assert_eq!((issued["name"].as_str(), issued["test_mode"].as_bool()), (Some("wicket_t_r1"), Some(true)), "{issued}");
    let value = issued["value"].as_str().unwrap().to_owned();
    assert_eq!(issued["cookie"].as_str().unwrap(), format!("wicket_t_r1={value}"));
    // Hostile bodies: 400 JSON, no cookie.
    for bad in [r#"{"seconds": 5}"#, r#"{"seconds": 604801}"#, r#"{"seconds": -1}"#, r#"{"seconds": "600"}"#, r#"{"secs": 600}"#, "[]", "{", "null"] {
        let r = a.admin("POST", "/admin/rooms/r1/test-cookie", bad).await;
        assert_eq!((r.status, r.json()["error"].as_str()), (400, Some("bad_request")), "{bad}: {}", r.text());
        assert!(r.json().get("value").is_none());
    }
    let r = a.admin("POST", "/admin/rooms/r1/test-cookie", &format!("{{\"seconds\": 600, \"pad\": \"{}\"}}", "x".repeat(5 << 20))).await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(a.admin("GET", "/admin/rooms/r1/test-cookie", "").await.status, 405);
    assert_eq!(get(&a.admin_url("/admin/rooms/r1/test-cookie"), &[]).await.status, 401);
    let metrics = a.admin("GET", "/metrics", "").await.text();
    assert!(metrics.contains("wicket_room_test_mode{room=\"r1\"} 1"), "{metrics}");
    assert_eq!(a.admin("POST", "/admin/rooms/nope/test-cookie", "").await.status, 404);

    // A tester through B: sent to the queue, queued, admitted, at the origin as r1's.
    let mut tester = Fan::default();
    tester.jar.insert("wicket_t_r1".into(), value.clone());
    let r = tester.get(&b.url("/buy/ev-1")).await;
    assert_eq!((r.status, r.json()["queue"].as_str()), (403, Some("/queue/r1")), "{}", r.text());
    assert_eq!(tester.join(&base_b, "r1").await.status, 200);
    until_state(&mut tester, &base_b, "r1", 10, &|s| s == "admitted").await;
    let r = tester.get(&b.url("/buy/ev-1")).await;
    assert_eq!((r.status, r.json()["headers"]["wicket-room"].as_str()), (200, Some("r1")), "{}", r.text());
    assert_eq!(stats(&a, "r1").await["issued"], 1, "only the tester was queued");
    assert_eq!(stats(&a, "r1").await["test_mode"], true);

    // Forged (one character of the tag changed), another room's, garbage: no tester.
    let mut forged = value.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let other = a.admin("POST", "/admin/rooms/r2/test-cookie", "").await.json()["value"].as_str().unwrap().to_owned();
    for (what, v) in [("forged", forged), ("another room's", other), ("garbage", "x.y.z".to_owned())] {
        let mut f = Fan::default();
        f.jar.insert("wicket_t_r1".into(), v);
        let r = f.get(&b.url("/buy/ev-1")).await;
        assert_eq!((r.status, r.json()["upstream"].as_str()), (200, Some("origin")), "{what}: {}", r.text());
        assert!(r.json()["headers"]["wicket-room"].is_null(), "{what}: {}", r.text());
        assert_eq!(f.join(&base_b, "r1").await.status, 404, "{what}");
    }
    assert_eq!(stats(&b, "r1").await["issued"], 1);

    // The tester's link sets the cookie and opens the queue page; a bad key is refused.
    let r = get(&b.url(&format!("/queue/r1/test?key={value}")), &html()).await;
    assert_eq!((r.status, r.header("location")), (302, Some("/queue/r1")), "{}", r.text());
    assert_eq!(r.cookies().get("wicket_t_r1"), Some(&value));
    assert_eq!(get(&b.url("/queue/r1/test?key=x.y.z"), &html()).await.status, 403);
}

/// The preview of a room's page on the admin port: each state in any of the 17 languages, with the
/// operator's branding, framable by the console only, styled without the public port, behind the
/// admin token (or a console session); nothing of the room changes. Bad input is 4xx JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_renders_every_state_in_every_language_and_touches_nothing() {
    let origin = TestUpstream::start("origin").await;
    let edge = edge_with(
        "",
        &origin,
        &format!(
            "[edge.queue-page]\nevent-name = \"Summer Tour\"\n[edge.queue-page.text.en]\ntitle_sold_out = \"All gone, sorry\"\n\
             {ROOM}schedule = {{ opens-at = \"2099-01-01T00:00:00Z\" }}\n"
        ),
    );
    let states = ["waiting", "queue_all", "paused", "not_open", "sold_out", "sold_out_for_now", "closed", "reject_all", "check"];
    for state in states {
        for lang in ["en", "ar", "zh-CN", "pt-BR"] {
            let r = edge.admin("GET", &format!("/admin/rooms/r1/preview?state={state}&lang={lang}"), "").await;
            assert_eq!(r.status, 200, "{state} {lang}: {}", r.text());
            assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
            let page = r.text();
            let dir = if lang == "ar" { "rtl" } else { "ltr" };
            assert!(page.contains(&format!("<html lang=\"{lang}\" dir=\"{dir}\">")), "{state} {lang}: {page}");
            assert!(page.contains("Summer Tour") && page.contains("<style>") && !page.contains("href=\"/static/queue.css\""), "{state} {lang}");
            let csp = r.header("content-security-policy").unwrap_or_default();
            assert!(csp.contains("frame-ancestors 'self'") && !csp.contains("script-src"), "{csp}");
            // Its CSP allows no script (`default-src 'none'`): the page carries none, so the
            // console's frame logs no error (issue #38).
            assert!(csp.starts_with("default-src 'none';"), "{csp}");
            assert!(!page.to_ascii_lowercase().contains("<script"), "{state} {lang}: {page}");
            assert_eq!(r.header("x-frame-options"), Some("SAMEORIGIN"));
        }
    }
    let page = |state: &str, lang: &str| {
        let edge = &edge;
        let path = format!("/admin/rooms/r1/preview?state={state}&lang={lang}");
        async move { edge.admin("GET", &path, "").await.text() }
    };
    assert!(page("sold_out", "en").await.contains("<h1 id=\"headline\">All gone, sorry</h1>"), "the operator's words");
    assert!(page("sold_out", "ar").await.contains("data-state=\"sold_out\""));
    assert!(page("waiting", "en").await.contains("<dd id=\"ahead\">1,259</dd>"));
    let not_open = page("not_open", "en").await;
    assert!(not_open.contains("data-opens-at=\"2099-01-01T00:00:00Z\""), "the room's real opening: {not_open}");
    assert!(page("reject_all", "ja").await.contains("data-state=\"stopped\""), "a fan holding a place: its place kept");
    assert!(page("closed", "ja").await.contains("data-state=\"closed\""));
    assert!(page("check", "en").await.contains("data-state=\"check\""));
    // No state, no language: waiting, in English.
    let r = edge.admin("GET", "/admin/rooms/r1/preview", "").await;
    assert!(r.status == 200 && r.text().contains("data-state=\"waiting\"") && r.text().contains("lang=\"en\""));
    // Bad input: 4xx JSON.
    for (path, code) in [
        ("/admin/rooms/r1/preview?state=bogus", 400),
        ("/admin/rooms/r1/preview?lang=xx-YY", 400),
        ("/admin/rooms/r1/preview?state=", 400),
        ("/admin/rooms/r1/preview?state=SOLD_OUT", 400),
        ("/admin/rooms/r1/preview?state=sold_out&lang=", 400),
        ("/admin/rooms/r1/preview?state=sold_out&lang=%3Cscript%3E", 400),
        ("/admin/rooms/r1/x/preview", 404),
        ("/admin/rooms/nope/preview?state=waiting", 404),
    ] {
        let r = edge.admin("GET", path, "").await;
        assert_eq!(r.status, code, "{path}: {}", r.text());
        assert!(r.json()["error"].is_string(), "{path}");
    }
    assert_eq!(edge.admin("POST", "/admin/rooms/r1/preview", "").await.status, 405);
    // The admin token or a console session, nothing else.
    assert_eq!(get(&edge.admin_url("/admin/rooms/r1/preview?state=sold_out"), &[]).await.status, 401);
    let console = edge.console().await;
    assert_eq!(console.call("GET", "/admin/rooms/r1/preview?state=sold_out&lang=ar", "").await.status, 200);
    // Nothing of the room was touched.
    let s = stats(&edge, "r1").await;
    assert_eq!((s["issued"].as_u64(), s["joins"].as_u64(), s["mode"].as_str()), (Some(0), Some(0), Some("auto")), "{s}");
}

/// Issue #28 item 6: a room's own `event-name` names its page (over the edge-wide one, which
/// other rooms keep), and the edge's refusal pages carry the operator's logo, colours and event
/// name as the queue page does. A blank or overlong name is a config error with its path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rooms_event_name_and_the_operators_branding_on_refusal_pages() {
    let origin = TestUpstream::start("origin").await;
    let edge = edge_with(
        "",
        &origin,
        &format!(
            "[[edge.limits]]\npath = \"/limited/\"\nkey = \"ip\"\nrate = \"1r/m\"\n\
             [edge.queue-page]\nevent-name = \"Edge Wide Fair\"\nlogo-url = \"https://cdn.example/logo.png\"\n\
             [edge.queue-page.colours]\naccent = \"#0a7\"\nbackground = \"#101820\"\n\
             {ROOM}event-name = \"Room One Live\"\n\
             [[rooms]]\nid = \"r2\"\nevent = \"ev-2\"\ntarget = \"/buy/ev-2\"\nprotected = [\"/buy/ev-2\"]\n"
        ),
    );
    let r1 = get(&edge.url("/queue/r1"), &html()).await.text();
    assert!(r1.contains("Room One Live") && !r1.contains("Edge Wide Fair"), "{r1}");
    let r2 = get(&edge.url("/queue/r2"), &html()).await.text();
    assert!(r2.contains("Edge Wide Fair") && !r2.contains("Room One Live"), "{r2}");
    let preview = edge.admin("GET", "/admin/rooms/r1/preview?state=sold_out", "").await.text();
    assert!(preview.contains("Room One Live"), "the preview shows the room's own name");
    // A refusal page (over the limit): the operator's logo, colours and event name.
    assert_eq!(get(&edge.url("/limited/a"), &html()).await.status, 200);
    let r = get(&edge.url("/limited/a"), &[("accept", "text/html"), ("accept-language", "fa")]).await;
    assert_eq!(r.status, 429);
    let page = r.text();
    assert!(page.contains("<img class=logo src=\"https://cdn.example/logo.png\""), "{page}");
    assert!(page.contains("--accent:#0a7;") && page.contains("--bg:#101820;") && page.contains("Edge Wide Fair"), "{page}");
    assert!(page.contains("<html lang=fa dir=rtl>"), "{page}");
    // Bad names: config errors with their paths.
    for bad in ["event-name = \"  \"", &format!("event-name = \"{}\"", "x".repeat(201))] {
        let text = format!("{}{ROOM}{bad}\n", hs_tokens());
        let issues = wicket_edge::WicketConfig::from_toml_str(&text).unwrap().validate();
        assert!(issues.iter().any(|i| i.path == "rooms[0].event-name"), "{bad}: {issues:?}");
    }
}
