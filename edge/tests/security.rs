//! The gate, tried as an attacker would (issue #10): every way past it and every way to exhaust
//! the edge that was found, through a real edge and a real nginx origin, with raw requests (no
//! client normalises anything).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;

const SECRET_PAGE: &str = "SECRET-PAGE-only-for-admitted-fans";

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// `[tokens]` with one HS256 key (signing too, so rooms can be created by the admin API).
fn tokens() -> String {
    format!("[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n")
}

/// An nginx origin whose protected pages are under `/buy/<room>/`.
fn nginx_site(rooms: &[&str]) -> (tempfile::TempDir, Nginx) {
    let root = tempfile::tempdir().unwrap();
    for r in rooms {
        let d = root.path().join("buy").join(r);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("index.html"), format!("{SECRET_PAGE} {r}\n")).unwrap();
    }
    std::fs::write(root.path().join("open.html"), "open page\n").unwrap();
    let nginx = Nginx::start(root.path());
    (root, nginx)
}

fn get_raw(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\nAccept: application/json\r\n{extra}Connection: close\r\n\r\n").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_protected_path_is_protected_and_the_origin_gets_the_canonical_one() {
    let (_root, nginx) = nginx_site(&["r1"]);
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\nuser-header = \"x-user-id\"\n[[edge.protected]]\npath = \"/buy/r1\"\nroom = \"r1\"\n{}",
        nginx.url(),
        tokens()
    ));
    // Positive control: nginx serves the page to anyone who reaches it.
    let direct = raw(nginx.addr, &get_raw("//buy/./x/../r1", "")).await.unwrap();
    assert!(direct.status == 200 && direct.text().contains(SECRET_PAGE), "{direct:?}");
    for spelling in [
        "/buy/r1", "//buy/r1", "/./buy/r1", "/x/../buy/r1", "/%62uy/r1", "/buy/%72%31", "/b%75y/r1/", "/queue/../buy/r1",
        "/buy//r1", "/%2e/buy/r1", "/buy/r1/.", "/buy/r1/x/..", "http://shop.example/buy/r1", "/%2E%2E/buy/r1",
    ] {
        let r = raw(edge.addr, &get_raw(spelling, "")).await.unwrap_or_else(|| panic!("{spelling}: no answer"));
        assert_eq!(r.status, 403, "{spelling}: {}", r.text());
        assert_eq!(r.json()["error"], "forbidden", "{spelling}");
        assert!(!r.text().contains(SECRET_PAGE), "{spelling}");
    }
    // Spellings origins read in different ways are refused outright.
    for spelling in ["/buy%2Fr1", "/buy%2fr1", "/buy%5Cr1", "/buy\\r1", "/buy;x=1/r1", "/buy/r1%00", "/buy/%zz"] {
        let r = raw(edge.addr, &get_raw(spelling, "")).await.unwrap_or_else(|| panic!("{spelling}: no answer"));
        assert_eq!(r.status, 400, "{spelling}: {}", r.text());
        assert_eq!(r.json()["error"], "bad_request", "{spelling}");
    }
    // An admitted fan reaches the page whatever the spelling, and the origin is asked the canonical path.
    let token = mint_token("r1", "r1", "fan-1", 120, "wicket", "hs-1", HS_SECRET);
    let r = raw(edge.addr, &get_raw("//b%75y/./r1/", &format!("Authorization: Bearer {token}\r\nX-User-Id: fan-1\r\n"))).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains(SECRET_PAGE));
    // The same token in another fan's hands is refused.
    let r = raw(edge.addr, &get_raw("/buy/r1", &format!("Authorization: Bearer {token}\r\nX-User-Id: fan-2\r\n"))).await.unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(!r.text().contains(SECRET_PAGE));
    // Pages that are not protected still pass in any spelling.
    let r = raw(edge.addr, &get_raw("/x/../open.html", "")).await.unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "open page\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rooms_made_changed_and_deleted_by_the_admin_api_guard_exactly_their_paths_at_once() {
    let (_root, nginx) = nginx_site(&["r9", "r9b"]);
    let edge = TestEdge::start(&format!("origin = \"{}\"\n{}", nginx.url(), tokens()));
    let open = raw(edge.addr, &get_raw("/buy/r9/", "")).await.unwrap();
    assert_eq!(open.status, 200, "no room yet: the origin answers");
    let body = json!({"event": "r9", "target": "/buy/r9", "protected": ["/buy/r9"]}).to_string();
    assert_eq!(edge.admin("PUT", "/admin/rooms/r9", &body).await.status, 201);
    // Protected from the next request on: no token, a forged one, and a valid token without a session.
    let forged = mint_token("r9", "r9", "fan", 120, "wicket", "hs-1", "not-the-secret-0123456789abcdef0123");
    let valid_no_session = mint_token("r9", "r9", "fan", 120, "wicket", "hs-1", HS_SECRET);
    for (what, extra) in [
        ("no token", String::new()),
        ("forged token", format!("Cookie: wicket_a_r9={forged}\r\n")),
        ("token without a queue session", format!("Authorization: Bearer {valid_no_session}\r\nX-User-Id: fan\r\n")),
    ] {
        for spelling in ["/buy/r9/", "//buy/r9/", "/%62uy/r9/"] {
            let r = raw(edge.addr, &get_raw(spelling, &extra)).await.unwrap();
            assert_eq!(r.status, 403, "{what} {spelling}: {}", r.text());
        }
    }
    // An update moves the protection; a delete removes it.
    let body = json!({"event": "r9", "target": "/buy/r9b", "protected": ["/buy/r9b"]}).to_string();
    assert_eq!(edge.admin("PUT", "/admin/rooms/r9", &body).await.status, 200);
    assert_eq!(raw(edge.addr, &get_raw("/buy/r9/", "")).await.unwrap().status, 200);
    assert_eq!(raw(edge.addr, &get_raw("/buy/r9b/", "")).await.unwrap().status, 403);
    let r = edge.admin("DELETE", "/admin/rooms/r9", "").await;
    assert_eq!((r.status, r.json()["deleted"].as_str()), (200, Some("r9")));
    assert_eq!(raw(edge.addr, &get_raw("/buy/r9b/", "")).await.unwrap().status, 200);
    assert_eq!(edge.admin("DELETE", "/admin/rooms/r9", "").await.status, 404);
    // A room body whose paths are not canonical is refused with the path of the problem.
    let body = json!({"event": "r9", "target": "/buy/r9", "protected": ["//buy/r9"]}).to_string();
    let r = edge.admin("PUT", "/admin/rooms/r9", &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("room.protected[0]"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_under_a_protected_prefix_need_a_token() {
    let origin = TestUpstream::start("origin").await;
    let members = b"<p>members only</p>".repeat(20);
    let edge = TestEdge::start_with_files(
        &format!("origin = \"{}\"\nuser-header = \"x-user-id\"\n[[edge.protected]]\npath = \"/vip/\"\nroom = \"vip\"\n{}", origin.url(), tokens()),
        &[("vip/members.html", &members)],
    );
    // Keep-alive (the fast path would take it) and Connection: close (the proxy): both refuse.
    for path in ["/vip/members.html", "/vip/./members.html", "//vip/members.html"] {
        let keep = format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n");
        let r = raw(edge.addr, keep.as_bytes()).await.unwrap();
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        let r = raw(edge.addr, &get_raw(path, "")).await.unwrap();
        assert_eq!(r.status, 403, "{path}: {}", r.text());
    }
    let token = mint_token("vip", "vip", "fan", 120, "wicket", "hs-1", HS_SECRET);
    let r = raw(edge.addr, &get_raw("/vip/members.html", &format!("Cookie: wicket_a_vip={token}\r\nX-User-Id: someone-else\r\n"))).await.unwrap();
    assert_eq!(r.status, 403, "another visitor's token");
    let r = raw(edge.addr, &get_raw("/vip/members.html", &format!("Cookie: wicket_a_vip={token}\r\nX-User-Id: fan\r\n"))).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, members, "served from memory once admitted");
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::SeqCst), 0, "and never from the origin");
    // Other files stay on the fast path.
    assert_eq!(raw(edge.addr, &get_raw("/app.js", "")).await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cores_admin_routes_are_not_reachable_through_the_public_port() {
    let core = TestUpstream::start("core").await;
    let edge = TestEdge::start(&format!("core = \"{}\"\n", core.url()));
    let admin = format!("Bearer {ADMIN_TOKEN}");
    for (method, path) in [
        ("PUT", "/v1/events/ev-1"),
        ("POST", "/v1/events/ev-1/pause"),
        ("POST", "/v1/events/ev-1/resume"),
        ("GET", "/v1/events/ev-1/outbox"),
        ("GET", "/v1/events/ev-1/reconcile"),
        ("POST", "/v1/orders/o-1/redeem"),
        ("POST", "/v1/orders/o-1/refund"),
        ("POST", "/v1/events/ev-1/stock"),
        ("DELETE", "/v1/orders/o-1"),
        ("POST", "/v1//events/ev-1/./pause"),
        ("POST", "/v1/events/ev-1/pause/"),
    ] {
        let r = request(method, &edge.url(path), &[("authorization", &admin), ("accept", "application/json")], b"{}").await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
        assert_eq!(r.json()["error"], "not_found");
    }
    let reached: Vec<String> = core.seen.lock().iter().filter(|p| p.contains("/v1/")).cloned().collect();
    assert!(reached.is_empty(), "nothing reached the core: {reached:?}");
    // The fans' routes pass; an admin token never travels with them, an admission token does.
    for (method, path) in [
        ("GET", "/v1/events/ev-1"),
        ("GET", "/v1/events/ev-1/stock"),
        ("POST", "/v1/events/ev-1/holds"),
        ("GET", "/v1/orders/o-1"),
        ("POST", "/v1/orders/o-1/cancel"),
        ("POST", "/v1/payments/callback"),
    ] {
        let r = request(method, &edge.url(path), &[("authorization", &admin)], b"{}").await;
        assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
        let seen = r.json();
        assert_eq!(seen["upstream"], "core");
        assert!(seen["headers"].get("authorization").is_none(), "{method} {path}: {seen}");
    }
    let token = mint_token("r1", "ev-1", "fan", 120, "wicket", "hs-1", HS_SECRET);
    let r = request("GET", &edge.url("/v1/orders/o-1"), &[("authorization", &format!("Bearer {token}"))], b"").await;
    assert_eq!(r.json()["headers"]["authorization"], format!("Bearer {token}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_and_malformed_heads_get_a_json_400_and_never_reach_the_origin() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!("origin = \"{}\"\n", origin.url()));
    let cases: &[(&str, &[u8])] = &[
        ("duplicate content-length", b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd"),
        ("listed content-length", b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 4, 4\r\n\r\nabcd"),
        ("signed content-length", b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: +4\r\n\r\nabcd"),
        ("content-length and chunked", b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("unknown transfer coding", b"POST /form HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ("two hosts on a static file", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ("host with user info", b"GET / HTTP/1.1\r\nHost: user@x\r\n\r\n"),
        ("no host", b"GET /app.js HTTP/1.1\r\n\r\n"),
        ("malformed header line", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"),
        ("bad request line", b"GET\x01/ HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("a fragment in the target", b"GET /open#/../form HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("a byte the proxy's URI parser refuses", b"GET /form` HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("absolute-form naming another host", b"GET http://x/index.html HTTP/1.1\r\nHost: y\r\n\r\n"),
        ("absolute-form with another port", b"GET http://x:80/index.html HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("absolute-form with user info", b"GET http://u@x/index.html HTTP/1.1\r\nHost: u@x\r\n\r\n"),
        ("absolute-form of another scheme", b"GET ftp://x/index.html HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("HTTP/1.0 with transfer-encoding", b"POST /form HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ];
    for (what, req) in cases {
        let r = raw(edge.addr, req).await.unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(r.status, 400, "{what}: {r:?}");
        assert!(r.head.contains("content-type: application/json"), "{what}: {}", r.head);
        assert!(!r.head.contains("server: pingora"), "{what}: {}", r.head);
        assert_eq!(r.json()["error"], "bad_request", "{what}");
    }
    let huge = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(40 * 1024));
    let r = raw(edge.addr, huge.as_bytes()).await.unwrap();
    assert_eq!(r.status, 431);
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Absolute-form naming the Host is served as its path.
    let r = raw(edge.addr, b"GET http://x/index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text().contains("Prehistoric park"));
    // A well-formed request still passes.
    assert_eq!(raw(edge.addr, b"POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd").await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_with_crit_an_empty_sub_or_absurd_times_are_refused() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\nuser-header = \"x-user-id\"\n[[edge.protected]]\npath = \"/buy/r1\"\nroom = \"r1\"\n{}",
        origin.url(),
        tokens()
    ));
    let t = now();
    let header = json!({"alg": "HS256", "typ": "admission+jwt", "kid": "hs-1"});
    let claims = |sub: &str, iat: i64, exp: i64| {
        json!({"iss": "wicket", "aud": "r1", "sub": sub, "jti": "0123456789abcdef0123", "iat": iat, "nbf": t - 1, "exp": exp, "room": "r1", "pos": 1})
    };
    let good = sign_raw(&header, &claims("fan", t, t + 60), HS_SECRET);
    let bearer = |tok: &str| format!("Bearer {tok}");
    let fan = ("x-user-id", "fan");
    assert_eq!(request("GET", &edge.url("/buy/r1"), &[("authorization", &bearer(&good)), fan], b"").await.status, 200, "control");
    let mut crit = header.clone();
    crit["crit"] = json!(["exp"]);
    for (what, tok) in [
        ("crit", sign_raw(&crit, &claims("fan", t, t + 60), HS_SECRET)),
        ("empty sub", sign_raw(&header, &claims("", t, t + 60), HS_SECRET)),
        ("issued in the future", sign_raw(&header, &claims("fan", t + 3600, t + 3660), HS_SECRET)),
        ("exp before iat", sign_raw(&header, &claims("fan", t, t - 10), HS_SECRET)),
        ("lifetime too long", sign_raw(&header, &claims("fan", t, t + 301), HS_SECRET)),
    ] {
        let r = request("GET", &edge.url("/buy/r1"), &[("authorization", &bearer(&tok)), fan, ("accept", "application/json")], b"").await;
        assert_eq!(r.status, 403, "{what}: {}", r.text());
    }
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sharing_a_nat_and_a_browser_are_never_blocked_as_one_device() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!("origin = \"{}\"\nuser-header = \"x-user-id\"\n[edge.anomaly]\ndevice-max-users = 5\n", origin.url()));
    // Same IP, same browser headers, no cookies: one fingerprint, eight people.
    let same = [("user-agent", "Mozilla/5.0 (same phone)"), ("accept-language", "zh-CN"), ("accept-encoding", "gzip")];
    for i in 0..8 {
        let user = format!("user-{i}");
        let mut h = same.to_vec();
        h.push(("x-user-id", &user));
        let r = request("GET", &edge.url("/page"), &h, b"").await;
        assert_eq!(r.status, 200, "{user}: {}", r.text());
    }
    let r = request("GET", &edge.url("/page"), &same, b"").await;
    assert_eq!(r.status, 200, "a cookie-less visitor with that browser: {}", r.text());
    // A real device cookie with too many users still trips the rule.
    let r = request("GET", &edge.url("/page"), &same, b"").await;
    let device = r.cookies().get("wicket_d").cloned().expect("a device cookie");
    let cookie = format!("wicket_d={device}");
    let mut statuses = Vec::new();
    for i in 0..7 {
        let user = format!("other-{i}");
        let h = [("cookie", cookie.as_str()), ("x-user-id", user.as_str())];
        statuses.push(request("GET", &edge.url("/page"), &h, b"").await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 403, 403]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_slow_bodies_are_answered_at_once_or_cut() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\nbody-timeout-ms = 800\nbody-min-rate = 1024\n{}\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n",
        origin.url(),
        tokens()
    ));
    // A declared body far over the cap: 413 before a byte of it is sent.
    let t = Instant::now();
    let r = raw(edge.addr, b"POST /queue/r1/join HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 999999999999\r\n\r\n").await.unwrap();
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.json()["error"], "payload_too_large");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // A body that stalls, to the edge itself (join) and to the origin: 408 after body-timeout-ms.
    for path in ["/queue/r1/join", "/slow/5000"] {
        let mut s = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
        let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{");
        s.write_all(head.as_bytes()).await.unwrap();
        let t = Instant::now();
        let r = read_answer(&mut s).await;
        let waited = t.elapsed();
        assert!(waited < Duration::from_secs(4), "{path}: {waited:?}");
        if let Some(r) = r {
            assert_eq!(r.status, 408, "{path}: {r:?}");
        }
    }
    // A body trickled below body-min-rate (10 bytes every 200 ms): cut with 408.
    let mut s = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(b"POST /slow/5000 HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n").await.unwrap();
    let t = Instant::now();
    let mut answer = Vec::new();
    while t.elapsed() < Duration::from_secs(8) {
        if s.write_all(&[b'a'; 10]).await.is_err() {
            break;
        }
        let mut buf = [0u8; 4096];
        match tokio::time::timeout(Duration::from_millis(200), tokio::io::AsyncReadExt::read(&mut s, &mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                answer.extend_from_slice(&buf[..n]);
                break;
            }
            Err(_) => {}
        }
    }
    let waited = t.elapsed();
    assert!(waited < Duration::from_secs(4), "the trickle was not cut: {waited:?}");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
}
