//! HTTP/2 on the HTTPS listener (`edge::front::h2`), with a real HTTP/2 client (the `h2` crate
//! over OpenSSL, ALPN `h2`, the test CA): the fast answers equal the proxy's, many streams of one
//! connection each get their whole answer, limits still hold, malformed streams and idle
//! connections are closed, a live stream keeps its connection open, and a stopping edge finishes
//! the streams in flight before it closes the connection; a slow download outlives
//! `keepalive-seconds` while it moves, a stalled one does not; a client that picks h2 and then
//! sends no preface is closed after `header-timeout-ms`; paths spelled other ways and oversized
//! heads get the proxy's answers.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use h2::client::SendRequest;
use wicket_testkit::pki::Pki;

/// An edge on HTTPS with room `r1` guarding `/buy/ev-1` (fixed rate 0: visitors stay queued),
/// users from `x-user-id`, HSTS, a 200 KB `/big.bin`, an origin, and `extra` `[edge]` keys.
struct Site {
    pki: Pki,
    port: u16,
    edge: TestEdge,
    _origin: TestUpstream,
}

impl Site {
    async fn start(extra: &str) -> Site {
        let pki = Pki::new();
        let origin = TestUpstream::start("origin").await;
        let port = free_port();
        let a = pki.leaf("a", &["a.test"], 30);
        let big: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let edge = TestEdge::start_with_files(
            &format!(
                "origin = \"{}\"\nuser-header = \"x-user-id\"\n{extra}\n{}\n{}\
                 [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
                 release = {{ mode = \"fixed\", rate = 0.0 }}\n",
                origin.url(),
                tls_config(port, &[a], "hsts-seconds = 600"),
                hs_tokens(),
            ),
            &[("big.bin", &big)],
        );
        Site { pki, port, edge, _origin: origin }
    }

    /// An HTTP/2 connection as `a.test`: the request handle and the connection's task (it ends
    /// when the edge closes the connection).
    async fn connect(&self) -> (SendRequest<Bytes>, tokio::task::JoinHandle<Result<(), h2::Error>>) {
        let (send, conn) = h2::client::handshake(self.silent().await).await.unwrap();
        (send, tokio::spawn(conn))
    }

    /// A TLS connection that chose h2 and has sent nothing yet.
    async fn silent(&self) -> tokio_openssl::SslStream<tokio::net::TcpStream> {
        tls_h2(&self.pki.path("ca.pem"), self.port).await
    }
}

/// The cookies an answer sets, as a `Cookie` header.
fn cookies_set(answer: &http::response::Parts) -> String {
    answer.headers.get_all("set-cookie").iter().map(|c| c.to_str().unwrap().split(';').next().unwrap()).collect::<Vec<_>>().join("; ")
}

/// Opens a `GET` stream of `path` and returns its body as it comes (read it at your own pace).
async fn open(send: &SendRequest<Bytes>, path: &str, headers: &[(&str, &str)]) -> h2::RecvStream {
    let mut req = http::Request::get(format!("https://a.test{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let (answer, _) = send.clone().ready().await.unwrap().send_request(req.body(()).unwrap(), true).unwrap();
    answer.await.unwrap().into_body()
}

/// One request (`method`, path, headers, no body): the answer's head and whole body.
async fn ask(send: &SendRequest<Bytes>, method: &str, path: &str, headers: &[(&str, &str)]) -> Result<(http::response::Parts, Vec<u8>), h2::Error> {
    let mut req = http::Request::builder().method(method).uri(format!("https://a.test{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut send = send.clone().ready().await?;
    let (answer, _) = send.send_request(req.body(()).unwrap(), true)?;
    let (parts, mut body) = answer.await?.into_parts();
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    Ok((parts, out))
}

async fn get(send: &SendRequest<Bytes>, path: &str, headers: &[(&str, &str)]) -> (http::response::Parts, Vec<u8>) {
    ask(send, "GET", path, headers).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// The value of one sample of the edge's `/metrics`, 0 when absent.
async fn metric(edge: &TestEdge, sample: &str) -> f64 {
    let text = edge.admin("GET", "/metrics", "").await.text();
    text.lines().find_map(|l| l.strip_prefix(sample).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

const SAME: [&str; 8] = ["etag", "content-type", "content-length", "cache-control", "vary", "content-encoding", "strict-transport-security", "set-cookie"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_answers_over_h2_equal_the_proxys_and_are_counted_once() {
    let site = Site::start("").await;
    let (send, _conn) = site.connect().await;
    let counted = "wicket_edge_requests_total{outcome=\"ok\",route=\"static\"}";
    let not_modified = "wicket_edge_requests_total{outcome=\"not_modified\",route=\"static\"}";
    let (ok0, nm0) = (metric(&site.edge, counted).await, metric(&site.edge, not_modified).await);
    for (method, accept) in [("GET", ""), ("GET", "gzip"), ("GET", "br"), ("GET", "gzip, br"), ("HEAD", "gzip")] {
        let (first, _) = get(&send, "/", &[("accept-encoding", accept)]).await;
        let etag = first.headers["etag"].to_str().unwrap().to_owned();
        for inm in [None, Some(etag.as_str()), Some("\"other\"")] {
            let mut h = vec![("accept-encoding", accept)];
            if let Some(v) = inm {
                h.push(("if-none-match", v));
            }
            let (fast, fast_body) = ask(&send, method, "/", &h).await.unwrap();
            // `Expect` sends the same request through the full proxy.
            h.push(("expect", "nothing"));
            let (slow, slow_body) = ask(&send, method, "/", &h).await.unwrap();
            let what = format!("{method} {accept:?} {inm:?}");
            assert_eq!(fast.status, slow.status, "{what}");
            assert_eq!(fast.status, if inm == Some(etag.as_str()) { 304 } else { 200 }, "{what}");
            for name in SAME {
                assert_eq!(fast.headers.get_all(name).iter().collect::<Vec<_>>(), slow.headers.get_all(name).iter().collect::<Vec<_>>(), "{name}: {what}");
            }
            assert!(fast.headers.contains_key("date"), "{what}");
            assert_eq!(fast.headers["strict-transport-security"], "max-age=600", "{what}");
            assert_eq!(fast_body, slow_body, "{what}");
            assert_eq!(fast_body.is_empty(), method == "HEAD" || fast.status == 304, "{what}");
        }
    }
    // Every answer counted once: 5 first GETs, then 5 × 3 pairs, a third of them 304.
    assert_eq!(metric(&site.edge, counted).await - ok0, (5 + 5 * 2 * 2) as f64);
    assert_eq!(metric(&site.edge, not_modified).await - nm0, (5 * 2) as f64);

    // A queued visitor's status poll: the same JSON both ways.
    let (joined, _) = get(&send, "/queue/r1", &[("x-user-id", "hana"), ("accept", "application/json")]).await;
    let cookie = cookies_set(&joined);
    assert!(cookie.contains("wicket_q_r1="), "{cookie}");
    let h = [("x-user-id", "hana"), ("cookie", cookie.as_str())];
    let (fast, fast_body) = get(&send, "/queue/r1/status", &h).await;
    let (slow, slow_body) = get(&send, "/queue/r1/status", &[h[0], h[1], ("expect", "nothing")]).await;
    assert_eq!((fast.status, slow.status), (http::StatusCode::OK, http::StatusCode::OK));
    for name in ["content-type", "cache-control", "strict-transport-security", "set-cookie"] {
        assert_eq!(fast.headers.get(name), slow.headers.get(name), "{name}");
    }
    let (fast, slow): (serde_json::Value, serde_json::Value) = (serde_json::from_slice(&fast_body).unwrap(), serde_json::from_slice(&slow_body).unwrap());
    assert_eq!((&fast["state"], &fast["position"], &fast["ahead"]), (&slow["state"], &slow["position"], &slow["ahead"]), "{fast} {slow}");
    assert_eq!(fast["state"], "waiting", "{fast}");
    // Another user with hana's cookies is not answered from them.
    let (other, body) = get(&send, "/queue/r1/status", &[("x-user-id", "mallory"), ("cookie", cookie.as_str())]).await;
    assert_ne!(String::from_utf8_lossy(&body), String::from_utf8_lossy(&slow_body), "{other:?}");
    // A protected path is never a fast answer, over HTTP/2 either.
    let (p, _) = get(&send, "/buy/ev-1", &[("x-user-id", "hana"), ("cookie", cookie.as_str()), ("accept", "application/json")]).await;
    assert_eq!(p.status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_streams_on_one_connection_each_get_their_whole_answer() {
    let site = Site::start("").await;
    let (send, conn) = site.connect().await;
    let (_, page) = get(&send, "/", &[]).await;
    let (_, big) = get(&send, "/big.bin", &[]).await;
    assert_eq!(big.len(), 200_000);
    for round in 0..3 {
        // Files (a page, a 200 KB file past the stream window, gzip), and pages of the origin
        // (the proxy), all in flight at once: the gathered writes interleave them.
        let mut tasks = Vec::new();
        for i in 0..300 {
            let send = send.clone();
            tasks.push(tokio::spawn(async move {
                let (path, accept) = match i % 4 {
                    0 => ("/".to_owned(), ""),
                    1 => ("/big.bin".to_owned(), ""),
                    2 => (format!("/events/{i}"), ""),
                    _ => ("/app.js".to_owned(), "gzip"),
                };
                let (head, body) = ask(&send, "GET", &path, &[("accept-encoding", accept)]).await.unwrap_or_else(|e| panic!("{path}: {e}"));
                (i, path, head, body)
            }));
        }
        for t in tasks {
            let (i, path, head, body) = t.await.unwrap();
            assert_eq!(head.status, 200, "round {round}, {path}");
            match i % 4 {
                0 => assert_eq!(body, page, "round {round}, stream {i}"),
                1 => assert_eq!(body, big, "round {round}, stream {i}"),
                2 => assert!(String::from_utf8_lossy(&body).contains(&format!("\"path\":\"{path}\"")), "{}", String::from_utf8_lossy(&body)),
                _ => {
                    assert_eq!(head.headers["content-encoding"], "gzip");
                    assert_eq!(head.headers["content-length"].to_str().unwrap(), body.len().to_string());
                }
            }
        }
    }
    assert!(!conn.is_finished(), "the connection is still open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_over_h2_and_the_refusal_is_the_proxys() {
    let site = Site::start("[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 2\nnodelay = true\n").await;
    let (send, _conn) = site.connect().await;
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(get(&send, "/", &[]).await.0.status.as_u16());
    }
    assert_eq!(codes, [200, 200, 200, 429, 429, 429]);
    let (refused, body) = get(&send, "/app.js", &[("accept", "application/json")]).await;
    assert_eq!(refused.status, 429);
    assert!(refused.headers.contains_key("retry-after"), "{refused:?}");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&body).unwrap()["error"], "rate_limited");
    // A blocked address: refused on the fast path's files and status polls too; unblocked, served.
    let fresh = Site::start("").await;
    let (send, _conn) = fresh.connect().await;
    assert_eq!(get(&send, "/", &[]).await.0.status, 200);
    let r = fresh.edge.admin("POST", "/admin/blocklist", "{\"ips\": [\"127.0.0.0/8\"]}").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(get(&send, "/", &[]).await.0.status, 403);
    assert_eq!(get(&send, "/app.js", &[]).await.0.status, 403);
    fresh.edge.admin("DELETE", "/admin/blocklist", "{\"ips\": [\"127.0.0.0/8\"]}").await;
    assert_eq!(get(&send, "/", &[]).await.0.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_streams_close_the_connection_and_others_are_served() {
    let site = Site::start("").await;
    let (send, conn) = site.connect().await;
    // Conflicting Content-Length values: the stream is reset, the connection lives on.
    let e = ask(&send, "GET", "/", &[("content-length", "1"), ("content-length", "2")]).await.unwrap_err();
    assert_eq!(e.reason(), Some(h2::Reason::PROTOCOL_ERROR), "{e:?}");
    assert_eq!(get(&send, "/", &[]).await.0.status, 200);
    // Two Host fields: each such stream is answered 400 by Pingora's checks, and the connection
    // is closed after 32 of them.
    let mut refused = 0;
    while let Ok((head, _)) = ask(&send, "GET", "/", &[("host", "a.test"), ("host", "b.test")]).await {
        assert_eq!(head.status, 400);
        refused += 1;
        assert!(refused <= 32, "{refused} malformed streams and the connection is still open");
    }
    assert!(refused >= 31, "closed after {refused}");
    tokio::time::timeout(Duration::from_secs(5), conn).await.expect("the connection was not closed").unwrap().ok();
    // A well-formed client meanwhile.
    let (send, _conn) = site.connect().await;
    assert_eq!(get(&send, "/", &[]).await.0.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_h2_connection_is_closed_after_keepalive_seconds_but_a_live_stream_keeps_it() {
    let site = Site::start("keepalive-seconds = 1").await;
    // Idle after one answer: closed about a second later.
    let (send, conn) = site.connect().await;
    assert_eq!(get(&send, "/", &[]).await.0.status, 200);
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), conn).await.expect("an idle connection was kept").unwrap().ok();
    assert!(started.elapsed() >= Duration::from_millis(800), "{:?}", started.elapsed());
    // A queued fan following the room's events for 3 s: not idle, not closed.
    let (send, conn) = site.connect().await;
    let (joined, _) = get(&send, "/queue/r1", &[("x-user-id", "kai"), ("accept", "application/json")]).await;
    let cookie = cookies_set(&joined);
    let mut events = open(&send, "/queue/r1/events", &[("x-user-id", "kai"), ("cookie", &cookie)]).await;
    let until = Instant::now() + Duration::from_secs(3);
    let mut got = 0;
    while Instant::now() < until {
        match tokio::time::timeout_at(until.into(), events.data()).await {
            Ok(Some(Ok(chunk))) => {
                got += chunk.len();
                let _ = events.flow_control().release_capacity(chunk.len());
            }
            Ok(other) => panic!("the event stream ended: {other:?}"),
            Err(_) => break,
        }
    }
    assert!(got > 0, "no event arrived");
    assert!(!conn.is_finished(), "a connection with a live stream was closed as idle");
    drop(events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_edge_finishes_the_streams_in_flight_then_closes_the_connection() {
    // At the stop, connections get a GOAWAY; what still runs 2 s later is dropped.
    let site = Site::start("shutdown-grace-seconds = 3").await;
    let (send, conn) = site.connect().await;
    assert_eq!(get(&send, "/", &[]).await.0.status, 200);
    // An origin page that takes 1 s, in flight when the stop begins.
    let slow = tokio::spawn({
        let send = send.clone();
        async move { ask(&send, "GET", "/slow/1000", &[]).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopped = Instant::now();
    site.edge.begin_stop();
    let (head, body) = slow.await.unwrap().expect("the stream in flight was cut");
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    // Then the connection is closed (by its GOAWAY, before the runtime drops what is left 2 s after
    // the stop), and nothing more is taken on it.
    tokio::time::timeout(Duration::from_secs(4), conn).await.expect("the connection outlived the stop").unwrap().ok();
    assert!(stopped.elapsed() < Duration::from_millis(1800), "closed only {:?} after the stop", stopped.elapsed());
    assert!(ask(&send, "GET", "/", &[]).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_download_outlives_keepalive_seconds_and_a_stalled_one_is_closed() {
    let site = Site::start("keepalive-seconds = 1").await;
    let (_, big) = {
        let (send, _conn) = site.connect().await;
        get(&send, "/big.bin", &[]).await
    };
    // A reader that takes its time: each 16 KB frame taken 250 ms after it came, the 200 KB file
    // over about 3 s, three times the keep-alive period. It moves, so it is served whole.
    let (send, conn) = site.connect().await;
    let started = Instant::now();
    let mut body = open(&send, "/big.bin", &[]).await;
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("a slow download was cut");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    assert_eq!(got, big);
    assert!(started.elapsed() > Duration::from_secs(2), "{:?}", started.elapsed());
    drop(body);
    // Done and idle: closed about a keep-alive period later.
    tokio::time::timeout(Duration::from_secs(5), conn).await.expect("an idle connection was kept").unwrap().ok();
    // A reader that takes nothing after the first window: closed once nothing has moved for a
    // whole keep-alive period (so within about two), not kept forever.
    let (send, conn) = site.connect().await;
    let _stalled = open(&send, "/big.bin", &[]).await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(6), conn).await.expect("a stalled reader was kept").unwrap().ok();
    assert!(started.elapsed() >= Duration::from_millis(1500), "closed after {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_chooses_h2_and_then_says_nothing_is_closed_after_the_head_deadline() {
    let site = Site::start("header-timeout-ms = 500").await;
    let mut silent = Vec::new();
    for _ in 0..20 {
        silent.push(site.silent().await);
    }
    // Others are served meanwhile.
    let (send, _conn) = site.connect().await;
    assert_eq!(get(&send, "/", &[]).await.0.status, 200);
    let started = Instant::now();
    for tls in &mut silent {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 256];
        // The edge's SETTINGS may come first; then the close.
        loop {
            match tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(_)) => continue,
                Err(_) => panic!("a silent h2 client was kept"),
            }
        }
    }
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_spelled_otherwise_and_oversized_heads_over_h2_get_the_proxys_answers() {
    let site = Site::start("").await;
    let (send, _conn) = site.connect().await;
    let json = ("accept", "application/json");
    // The protected path, spelled other ways: refused like the canonical spelling, never served.
    for path in ["/buy/ev-1", "//buy/ev-1", "/./buy/ev-1", "/x/../buy/ev-1", "/%62uy/ev-1", "/buy//ev-1", "/BUY/../buy/ev-1"] {
        let (head, body) = get(&send, path, &[json]).await;
        assert_eq!(head.status, 403, "{path}: {}", String::from_utf8_lossy(&body));
    }
    // An encoded slash is ambiguous: refused with the edge's JSON 400.
    let (head, body) = get(&send, "/buy%2Fev-1", &[json]).await;
    assert_eq!(head.status, 400, "{}", String::from_utf8_lossy(&body));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&body).unwrap()["error"], "bad_request");
    // A file spelled other ways: the proxy rewrites it and answers the same bytes.
    let (_, canonical) = get(&send, "/app.js", &[]).await;
    for path in ["//app.js", "/./app.js", "/%61pp.js", "/img/../app.js"] {
        let (head, body) = get(&send, path, &[]).await;
        assert_eq!((head.status.as_u16(), &body), (200, &canonical), "{path}");
    }
    // A head over the edge's 32 KiB (within HTTP/2's own 64 KiB list): the proxy's 431, not a file.
    let cookie = format!("a={}", "x".repeat(40_000));
    let (head, _) = get(&send, "/", &[("cookie", &cookie)]).await;
    assert_eq!(head.status, 431);
    assert_eq!(get(&send, "/", &[]).await.0.status, 200);
}

/// The cancellation budget (`edge/src/cancel.rs`) counts only streams the upstream was working
/// on: a fan who leaves the queue page's event stream (the edge's own answer) again and again
/// keeps the connection, and so does one cancelling now and then among many served pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_closing_event_streams_and_now_and_then_a_page_keeps_the_connection() {
    let site = Site::start("").await;
    let (send, conn) = site.connect().await;
    let who = [("x-user-id", "kai"), ("accept", "text/html")];
    let (queued, _) = get(&send, "/queue/r1", &who).await;
    let cookies = cookies_set(&queued);
    let who = [("x-user-id", "kai"), ("cookie", cookies.as_str())];
    for i in 0..80 {
        // The event stream answers at once; the fan navigates away (RST_STREAM) mid-stream.
        let mut events = open(&send, "/queue/r1/events", &who).await;
        assert!(events.data().await.is_some(), "event stream {i}: no frame");
        drop(events);
        // Now and then a page of the origin, cancelled as a browser cancels a navigation.
        if i % 8 == 0 {
            let req = http::Request::get(format!("https://a.test:{}/slow/300", site.port)).header("x-user-id", "kai");
            let (answer, mut stream) = send.clone().ready().await.unwrap().send_request(req.body(()).unwrap(), true).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            stream.send_reset(h2::Reason::CANCEL);
            drop(answer);
        }
        let (page, _) = get(&send, "/events/1", &[("x-user-id", "kai")]).await;
        assert_eq!(page.status, 200, "page {i}");
    }
    assert!(!conn.is_finished(), "the connection was closed");
    let (page, _) = get(&send, "/", &[]).await;
    assert_eq!(page.status, 200);
}

/// Queue event streams over HTTP/2 (issue #40): served by the HTTP/2 door on a task of their own,
/// within the same budget as HTTP/1.1's (past `max-event-streams-per-ip`, 503 `unavailable`); a
/// stream the client resets gives its slot back at once, and so do those of a connection the
/// client closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_event_streams_keep_to_the_budget_and_give_their_slots_back_when_reset() {
    let site = Site::start("max-event-streams-per-ip = 3").await;
    let open_streams = || async {
        let m = site.edge.admin("GET", "/metrics", "").await.text();
        m.lines().find_map(|l| l.strip_prefix("wicket_edge_event_streams ")).and_then(|v| v.parse::<u64>().ok()).unwrap()
    };
    let until_open = |want: u64| async move {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let n = open_streams().await;
            if n == want {
                return;
            }
            assert!(Instant::now() < deadline, "{n} event streams open, not {want}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (send, conn) = site.connect().await;
    let mut streams = Vec::new();
    for i in 0..3 {
        let user = format!("fan{i}");
        let (joined, _) = get(&send, "/queue/r1", &[("x-user-id", &user), ("accept", "application/json")]).await;
        let cookie = cookies_set(&joined);
        let mut events = open(&send, "/queue/r1/events", &[("x-user-id", &user), ("cookie", &cookie)]).await;
        let first = tokio::time::timeout(Duration::from_secs(5), events.data()).await.expect("a first frame").unwrap().unwrap();
        assert!(String::from_utf8_lossy(&first).starts_with("data: {") && String::from_utf8_lossy(&first).ends_with("}\nretry: 1000\n\n"), "{first:?}");
        streams.push(events);
    }
    until_open(3).await;
    // A fourth from the same address: refused, the page polls.
    let (joined, _) = get(&send, "/queue/r1", &[("x-user-id", "fan3"), ("accept", "application/json")]).await;
    let cookie = cookies_set(&joined);
    let (head, body) = ask(&send, "GET", "/queue/r1/events", &[("x-user-id", "fan3"), ("cookie", &cookie)]).await.unwrap();
    assert_eq!(head.status, 503, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"], "unavailable", "{v}");
    assert_eq!(head.headers.get("retry-after").map(|v| v.to_str().unwrap()), Some("5"));
    // One reset by the client: its slot comes back at once; then the fourth fan gets one.
    drop(streams.pop());
    until_open(2).await;
    let mut events = open(&send, "/queue/r1/events", &[("x-user-id", "fan3"), ("cookie", &cookie)]).await;
    tokio::time::timeout(Duration::from_secs(5), events.data()).await.expect("a first frame").unwrap().unwrap();
    until_open(3).await;
    // The client closes the connection: every slot comes back.
    drop((send, streams, events));
    conn.abort();
    until_open(0).await;
}
