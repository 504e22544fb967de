//! The operator console on the admin port (edge/src/console.rs), tried as a browser and as an
//! attacker would: its page and files, sign-in, the session cookie, CSRF, origins, lock-out.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn room_edge() -> TestEdge {
    TestEdge::start(&format!(
        "[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n"
    ))
}

/// Signs in; returns (cookie header value, CSRF token).
async fn sign_in(edge: &TestEdge) -> (String, String) {
    let r = request("POST", &edge.admin_url("/admin/session"), &[("content-type", "application/json")], format!("{{\"token\":\"{ADMIN_TOKEN}\"}}").as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let set = r.header("set-cookie").unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"] {
        assert!(set.contains(attr), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_owned();
    (cookie, r.json()["csrf"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_files_are_served_with_a_strict_policy_and_hold_no_data() {
    let edge = room_edge();
    let page = get(&edge.admin_url("/"), &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert!(page.text().contains("/console/console.js") && !page.text().contains("r1"), "no room data in the page");
    for f in ["/console/console.js", "/console/report.js", "/console/lane.js", "/console/console.css", "/console/vendor/uplot/uPlot.iife.min.js", "/console/vendor/uplot/uPlot.min.css", "/console/vendor/uplot/LICENSE"] {
        assert_eq!(get(&edge.admin_url(f), &[]).await.status, 200, "{f}");
    }
    // The page weight a browser downloads (gzip): what docs/src/console.md reports.
    let mut weight = 0;
    for f in ["/", "/console/console.js", "/console/console.css", "/console/vendor/uplot/uPlot.iife.min.js", "/console/vendor/uplot/uPlot.min.css"] {
        let r = get(&edge.admin_url(f), &[("accept-encoding", "gzip, deflate, br")]).await;
        assert_eq!((r.status, r.header("content-encoding"), r.header("vary")), (200, Some("gzip"), Some("Accept-Encoding")), "{f}");
        weight += r.body.len();
    }
    assert!(weight < 32 * 1024, "the console weighs {weight} bytes gzipped");
    // Anything else still needs a credential.
    assert_eq!(get(&edge.admin_url("/console/../admin/rooms"), &[]).await.status, 401);
    assert_eq!(get(&edge.admin_url("/admin/rooms"), &[]).await.status, 401);
    // The public port does not serve it.
    assert_ne!(get(&edge.url("/console/console.js"), &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reads_and_changes_only_with_its_csrf_token_from_its_own_origin() {
    let edge = room_edge();
    let (cookie, csrf) = sign_in(&edge).await;
    let c = [("cookie", cookie.as_str())];
    assert_eq!(request("GET", &edge.admin_url("/admin/rooms"), &c, b"").await.status, 200);
    assert_eq!(get(&edge.admin_url("/metrics"), &c).await.status, 200);
    let v = get(&edge.admin_url("/admin/session"), &c).await;
    assert_eq!((v.status, v.json()["csrf"].as_str()), (200, Some(csrf.as_str())));
    // The page's EventSource sends only the cookie.
    let mut s = tokio::net::TcpStream::connect(edge.admin).await.unwrap();
    s.write_all(format!("GET /admin/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n\r\n").as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(6).any(|w| w == b"data: ") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
    drop(s);
    // Changes: no token, a forged one, a foreign origin are refused; nothing changes.
    let pause = edge.admin_url("/admin/rooms/r1/pause");
    for headers in [
        vec![("cookie", cookie.as_str())],
        vec![("cookie", cookie.as_str()), ("x-csrf-token", "forged")],
        vec![("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str()), ("origin", "https://evil.example")],
    ] {
        let r = request("POST", &pause, &headers, b"").await;
        assert_eq!(r.status, 403, "{headers:?}: {}", r.text());
        assert_eq!(r.json()["error"], "forbidden");
    }
    let mode = |v: serde_json::Value| v["stats"]["mode"].as_str().unwrap_or_default().to_owned();
    assert_ne!(mode(edge.admin("GET", "/admin/rooms/r1", "").await.json()), "paused");
    // With its token, from its own page: done.
    let own = format!("http://{}", edge.admin);
    let r = request("POST", &pause, &[("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str()), ("origin", own.as_str())], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(mode(edge.admin("GET", "/admin/rooms/r1", "").await.json()), "paused");
    // Scripts keep the bearer token, no CSRF token needed.
    assert_eq!(edge.admin("POST", "/admin/rooms/r1/resume", "").await.status, 200);
    // Sign-out ends the session and clears the cookie.
    let r = request("DELETE", &edge.admin_url("/admin/session"), &[("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str())], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(get(&edge.admin_url("/admin/rooms"), &c).await.status, 401);
    assert_eq!(get(&edge.admin_url("/admin/session"), &c).await.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_cookies_wrong_tokens_and_foreign_sign_ins_are_refused_and_guessing_is_locked_out() {
    let edge = room_edge();
    for forged in ["wicket_admin=", "wicket_admin=AAAA", "wicket_admin=../../etc", &format!("wicket_admin={}", "A".repeat(5000))] {
        assert_eq!(get(&edge.admin_url("/admin/rooms"), &[("cookie", forged)]).await.status, 401, "{forged:.40}");
    }
    // Malformed sign-ins: clear JSON errors, no cookie.
    for body in ["", "{", "{\"token\":5}", "{\"token\":\"x\",\"extra\":1}"] {
        let r = request("POST", &edge.admin_url("/admin/session"), &[("content-type", "application/json")], body.as_bytes()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.header("set-cookie").is_none());
    }
    // A sign-in from another site's page is refused even with the right token.
    let right = format!("{{\"token\":\"{ADMIN_TOKEN}\"}}");
    let r = request("POST", &edge.admin_url("/admin/session"), &[("origin", "https://evil.example")], right.as_bytes()).await;
    assert_eq!(r.status, 403);
    assert!(r.header("set-cookie").is_none());
    // Guessing: ten wrong tokens, then even the right one from the same address waits out the
    // minute.
    for i in 0..10 {
        let r = request("POST", &edge.admin_url("/admin/session"), &[], format!("{{\"token\":\"guess-{i}\"}}").as_bytes()).await;
        assert_eq!(r.status, 401);
        assert!(r.header("set-cookie").is_none());
    }
    let r = request("POST", &edge.admin_url("/admin/session"), &[], right.as_bytes()).await;
    assert_eq!(r.status, 429, "{}", r.text());
    // The bearer token is not locked out (scripts keep working).
    assert_eq!(edge.admin("GET", "/admin/rooms", "").await.status, 200);
}

/// The lock-out is per client address (after trusted proxies): a guesser locks out only itself,
/// and an operator elsewhere still signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guesser_locks_out_only_its_own_address() {
    let edge = TestEdge::start("trusted-proxies = [\"127.0.0.1/32\"]\n");
    let sign_in_from = |ip: &'static str, token: String| {
        let url = edge.admin_url("/admin/session");
        async move { request("POST", &url, &[("x-forwarded-for", ip)], format!("{{\"token\":\"{token}\"}}").as_bytes()).await }
    };
    for i in 0..10 {
        assert_eq!(sign_in_from("203.0.113.7", format!("guess-{i}")).await.status, 401);
    }
    let r = sign_in_from("203.0.113.7", ADMIN_TOKEN.into()).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"], "too_many_attempts");
    // Another address (another operator) is not locked out, and its one mistake does not add up
    // with the guesser's.
    assert_eq!(sign_in_from("198.51.100.1", "typo".into()).await.status, 401);
    let r = sign_in_from("198.51.100.1", ADMIN_TOKEN.into()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("set-cookie").is_some());
    // An untrusted peer cannot pick its address: without the proxy hop it is 127.0.0.1 itself.
    let r = request("POST", &edge.admin_url("/admin/session"), &[], format!("{{\"token\":\"{ADMIN_TOKEN}\"}}").as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// `PUT /admin/rooms/<room>/schedule`, the console's schedule control: a new opening is what fans
/// see at once; anything malformed, inconsistent, oversized or unauthorised is refused with a
/// JSON `{error, message}` and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_route_moves_the_opening_and_refuses_hostile_bodies() {
    let edge = room_edge();
    let base = format!("http://{}", edge.addr);
    let url = edge.admin_url("/admin/rooms/r1/schedule");
    let schedule = |v: &serde_json::Value| v["config"]["schedule"].clone();
    // Later today's sale: fans queue and are told when it opens.
    let body = r#"{"prequeue_at":"2020-01-01T00:00:00Z","opens_at":"2099-01-01T10:00:00Z","closes_at":"2099-01-01T22:00:00+08:00"}"#;
    let r = edge.admin("PUT", "/admin/rooms/r1/schedule", body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(schedule(&r.json())["opens-at"], "2099-01-01T10:00:00Z");
    let mut fan = Fan::default();
    fan.join(&base, "r1").await;
    let s = fan.status(&base, "r1").await;
    assert_eq!((s["state"].as_str(), s["opens_at"].as_str()), (Some("not_open"), Some("2099-01-01T10:00:00Z")), "{s}");
    let before = schedule(&edge.admin("GET", "/admin/rooms/r1", "").await.json());
    // Hostile bodies: each refused with a JSON error, none changes the schedule.
    for (bad, status) in [
        ("", 400),
        ("{", 400),
        ("[]", 400),
        (r#"["2099-01-01T10:00:00Z"]"#, 400),
        ("null", 400),
        (r#"{"opens_at":5}"#, 400),
        (r#"{"opens_at":["2099-01-01T10:00:00Z"]}"#, 400),
        (r#"{"open_at":"2099-01-01T10:00:00Z"}"#, 400),
        (r#"{"opens_at":"tomorrow"}"#, 400),
        (r#"{"opens_at":"2099-01-01 10:00"}"#, 400),
        (r#"{"opens_at":"2099-01-01T10:00:00Z","closes_at":"2099-01-01T09:00:00Z"}"#, 400),
        (r#"{"prequeue_at":"2099-01-02T00:00:00Z","opens_at":"2099-01-01T10:00:00Z"}"#, 400),
    ] {
        let r = edge.admin("PUT", "/admin/rooms/r1/schedule", bad).await;
        assert_eq!(r.status, status, "{bad}: {}", r.text());
        assert_eq!(r.json()["error"], "bad_request", "{bad}");
        assert!(r.json()["message"].as_str().is_some_and(|m| !m.is_empty()), "{bad}");
    }
    let r = edge.admin("PUT", "/admin/rooms/r1/schedule", r#"{"opens_at":"2099-01-01T10:00:00Z","closes_at":"2099-01-01T09:00:00Z"}"#).await;
    // Named as the body spells it (issue #38).
    assert!(r.json()["message"].as_str().unwrap().contains("room.schedule.closes_at"), "{}", r.text());
    assert_eq!(r.json()["issues"][0]["path"], "room.schedule.closes_at", "{}", r.text());
    let big = format!("{{\"opens_at\":\"{}\"}}", "9".repeat(wicket_edge::admin::MAX_ADMIN_BODY));
    let r = edge.admin("PUT", "/admin/rooms/r1/schedule", &big).await;
    assert_eq!((r.status, r.json()["error"].as_str()), (413, Some("payload_too_large")));
    let r = edge.admin("PUT", "/admin/rooms/nope/schedule", "{}").await;
    assert_eq!((r.status, r.json()["error"].as_str()), (404, Some("not_found")));
    assert_eq!(edge.admin("GET", "/admin/rooms/r1/schedule", "").await.status, 405);
    // No credential, a wrong one, a console session without its CSRF token or from elsewhere.
    let (cookie, csrf) = sign_in(&edge).await;
    let own = format!("http://{}", edge.admin);
    for headers in [
        vec![],
        vec![("authorization", "Bearer wrong")],
        vec![("cookie", cookie.as_str())],
        vec![("cookie", cookie.as_str()), ("x-csrf-token", "forged")],
        vec![("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str()), ("origin", "http://evil.example")],
    ] {
        let r = request("PUT", &url, &headers, b"{}").await;
        assert!(r.status == 401 || r.status == 403, "{headers:?}: {} {}", r.status, r.text());
    }
    assert_eq!(schedule(&edge.admin("GET", "/admin/rooms/r1", "").await.json()), before, "nothing changed");
    // The console's own call: open now (an empty schedule), and the fan moves on.
    let headers = [("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str()), ("origin", own.as_str()), ("content-type", "application/json")];
    let r = request("PUT", &url, &headers, b"{\"opens_at\":null}").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(schedule(&r.json())["opens-at"], serde_json::Value::Null);
    let s = fan.status(&base, "r1").await;
    assert_ne!(s["state"], "not_open", "{s}");
}
