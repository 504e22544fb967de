//! Hostile clients of the queue's event streams (issue #40), which the HTTP/1.1 door serves on a
//! small task of its own: a flood of streams from one address and from many (the budget:
//! `max-event-streams`, `max-event-streams-per-ip`; the rest told 503 and polling), streams that
//! are never read (ended at `event-stream-seconds`, the connection then closed at the keep-alive
//! timeout), half-closed and closed sockets (freed at once), bytes sent on an open stream (the
//! stream ends and the connection serves them), and a stop of the edge (every stream ended).

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// An edge with one room releasing nobody (every fan stays queued) and the given `[edge]` keys.
async fn edge_with(extra: &str) -> (TestUpstream, TestEdge) {
    edge_with_tables(extra, "").await
}

/// [`edge_with`], with further tables (`[edge.tls]`) after the room.
async fn edge_with_tables(extra: &str, tables: &str) -> (TestUpstream, TestEdge) {
    let origin = TestUpstream::start("origin").await;
    let config = format!(
        "{extra}\norigin = \"{}\"\nuser-header = \"x-user-id\"\n[edge.anomaly]\ndevice-max-users = 0\n\
         [tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\n{tables}",
        origin.url()
    );
    let edge = TestEdge::start(&config);
    (origin, edge)
}

/// A fan joined: the request head of its event stream (its cookies and user id).
async fn fan(edge: &TestEdge, user: &str) -> String {
    let r = get(&edge.url("/queue/r1"), &[("accept", "application/json"), ("x-user-id", user), ("user-agent", user)]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let jar: HashMap<String, String> = r.cookies();
    assert!(jar.contains_key("wicket_q_r1") && jar.contains_key("wicket_d"), "{jar:?}");
    let cookies: Vec<String> = jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("GET /queue/r1/events HTTP/1.1\r\nHost: x\r\nX-User-Id: {user}\r\nUser-Agent: {user}\r\nCookie: {}\r\n\r\n", cookies.join("; "))
}

/// A connection to the edge from the loopback address `from`.
async fn connect_from(edge: &TestEdge, from: [u8; 4]) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from((from, 0))).unwrap();
    s.connect(edge.addr).await.unwrap()
}

/// Reads until `what` arrived (or panics after 5 s); returns everything read.
async fn read_until(s: &mut TcpStream, what: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(what.len()).any(|w| w == what) {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no {:?} in 5 s: {}", String::from_utf8_lossy(what), String::from_utf8_lossy(&got)))
            .unwrap();
        assert!(n > 0, "closed before {:?}: {}", String::from_utf8_lossy(what), String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Reads until the edge closes the connection (`None` if it did not within `limit`).
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
}

/// A metric's value on the admin port (0 when absent).
async fn metric(edge: &TestEdge, line_start: &str) -> f64 {
    let m = edge.admin("GET", "/metrics", "").await.text();
    m.lines().find(|l| l.starts_with(line_start)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

async fn until_metric(edge: &TestEdge, line_start: &str, want: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let v = metric(edge, line_start).await;
        if v == want {
            return;
        }
        assert!(Instant::now() < deadline, "{line_start} is {v}, not {want}, after {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A flood of streams from one address takes `max-event-streams-per-ip` of them; the edge's
/// budget caps them all. Each refused stream is told 503 `unavailable` (the page polls), the
/// connection stays usable, the refusals are counted, and every slot comes back when its fan
/// hangs up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_streams_takes_no_more_than_its_budget() {
    flood("").await;
}

/// The same through Pingora's proxy (`fast-path = false`), which serves the streams the fast
/// doors do not: the same budget, the same refusals (the proxy notices a fan that hung up only
/// when a write fails, a frame or two later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_streams_through_the_proxy_takes_no_more_than_its_budget() {
    flood("fast-path = false").await;
}

async fn flood(extra: &str) {
    let (_origin, edge) = edge_with(&format!("max-event-streams = 6\nmax-event-streams-per-ip = 4\n{extra}")).await;
    let mut heads = Vec::new();
    for i in 0..12 {
        heads.push(fan(&edge, &format!("fan{i}")).await);
    }
    // From 127.0.0.1: four streams open, the fifth and sixth are refused.
    let mut open = Vec::new();
    for head in &heads[..4] {
        let mut s = connect_from(&edge, [127, 0, 0, 1]).await;
        s.write_all(head.as_bytes()).await.unwrap();
        let got = read_until(&mut s, b"\"state\":\"waiting\"").await;
        assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&got));
        assert!(String::from_utf8_lossy(&got).to_ascii_lowercase().contains("content-type: text/event-stream"));
        open.push(s);
    }
    let refused = |got: &[u8], why: &str| {
        let text = String::from_utf8_lossy(got).into_owned();
        assert!(text.starts_with("HTTP/1.1 503 "), "{why}: {text}");
        let body: serde_json::Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["error"], "unavailable", "{why}: {text}");
        assert!(text.to_ascii_lowercase().contains("\r\nretry-after: 5\r\n"), "{text}");
        assert!(body["message"].as_str().unwrap().contains(why), "{text}");
    };
    let mut s = connect_from(&edge, [127, 0, 0, 1]).await;
    for head in &heads[4..6] {
        s.write_all(head.as_bytes()).await.unwrap();
        refused(&read_until(&mut s, b"}").await, "from this address");
    }
    // The refused connection is kept: the fan polls on it.
    let poll = heads[4].replace("/events", "/status");
    s.write_all(poll.as_bytes()).await.unwrap();
    let got = read_until(&mut s, b"\"state\":\"waiting\"").await;
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&got));
    // From 127.0.0.2: two more fit the edge's six, then the edge is full.
    for head in &heads[6..8] {
        let mut s = connect_from(&edge, [127, 0, 0, 2]).await;
        s.write_all(head.as_bytes()).await.unwrap();
        read_until(&mut s, b"\"state\":\"waiting\"").await;
        open.push(s);
    }
    let mut s = connect_from(&edge, [127, 0, 0, 3]).await;
    s.write_all(heads[8].as_bytes()).await.unwrap();
    refused(&read_until(&mut s, b"}").await, "on this edge");
    // The same stream spelled otherwise takes no slot past the budget either: refused, or
    // (rewritten by the proxy) told the edge is full — never a stream.
    let mut full_again = 0.0;
    for spelling in ["/queue/r1//events", "/queue/r1/./events", "/queue/r1/%65vents", "/queue//r1/events", "/queue/r1%2Fevents"] {
        let head = heads[8].replacen("/queue/r1/events", spelling, 1);
        let got = raw(edge.addr, head.as_bytes()).await.unwrap_or_else(|| panic!("{spelling}: no answer"));
        assert_ne!(got.status, 200, "{spelling}: {}", got.head);
        if got.status == 503 {
            full_again += 1.0;
        }
        assert!(!got.head.to_ascii_lowercase().contains("text/event-stream"), "{spelling}: {}", got.head);
    }
    assert_eq!(metric(&edge, "wicket_edge_event_streams ").await, 6.0);
    assert_eq!(metric(&edge, "wicket_edge_rejects_total{reason=\"event_streams_per_ip\"}").await, 2.0);
    assert_eq!(metric(&edge, "wicket_edge_rejects_total{reason=\"event_streams_full\"}").await, 1.0 + full_again);
    // The fans hang up: every slot comes back at once at a fast door (not at the next frame).
    drop(open);
    let within = if extra.is_empty() { 2 } else { 15 };
    until_metric(&edge, "wicket_edge_event_streams ", 0.0, Duration::from_secs(within)).await;
    let mut s = connect_from(&edge, [127, 0, 0, 3]).await;
    s.write_all(heads[9].as_bytes()).await.unwrap();
    read_until(&mut s, b"\"state\":\"waiting\"").await;
}

/// Streams nobody reads hold the edge no longer than `event-stream-seconds`: the stream ends
/// (its last chunk written) and the idle connection is closed at `keepalive-seconds`, the slot
/// given back, though the client never read a byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_never_read_end_at_their_deadline() {
    let (_origin, edge) = edge_with("event-stream-seconds = 2\nkeepalive-seconds = 1").await;
    let mut never_read = Vec::new();
    for i in 0..20 {
        let head = fan(&edge, &format!("fan{i}")).await;
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        never_read.push(s);
    }
    until_metric(&edge, "wicket_edge_event_streams ", 20.0, Duration::from_secs(3)).await;
    let at = Instant::now();
    until_metric(&edge, "wicket_edge_event_streams ", 0.0, Duration::from_secs(6)).await;
    assert!(at.elapsed() <= Duration::from_secs(4), "{:?}", at.elapsed());
    // Each was closed by the edge, after the stream's end: its frames then the last chunk.
    for mut s in never_read {
        let got = closed_within(&mut s, Duration::from_secs(4)).await.expect("closed at the keep-alive timeout");
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n") && text.contains("data: ") && text.ends_with("\r\n0\r\n\r\n"), "{text}");
        // The first frame tells the browser to reconnect a second after the stream ends (its
        // default is about 3 s: a turn that comes meanwhile would be late for its pickup window).
        assert_eq!(text.matches("\nretry: 1000\n\n").count(), 1, "{text}");
        let first = text.split("data: ").nth(1).unwrap();
        assert!(first.split_once("\n\n").unwrap().0.ends_with("\nretry: 1000"), "{text}");
    }
}

/// A client that closes, or half-closes, its side of a stream frees it at once; one that sends a
/// request on it ends the stream (its last chunk) and is answered on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_and_half_closed_streams_are_freed_at_once_and_bytes_sent_end_the_stream() {
    let (_origin, edge) = edge_with("").await;
    let mut half = Vec::new();
    for i in 0..10 {
        let head = fan(&edge, &format!("fan{i}")).await;
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        read_until(&mut s, b"data: ").await;
        half.push(s);
    }
    assert_eq!(metric(&edge, "wicket_edge_event_streams ").await, 10.0);
    // Half-closed: the edge closes its side too, well before any next frame (5 s apart).
    let at = Instant::now();
    for s in half.iter_mut() {
        s.shutdown().await.unwrap();
    }
    for s in half.iter_mut() {
        closed_within(s, Duration::from_secs(2)).await.expect("the edge closed a half-closed stream");
    }
    until_metric(&edge, "wicket_edge_event_streams ", 0.0, Duration::from_secs(2)).await;
    assert!(at.elapsed() < Duration::from_secs(3), "{:?}", at.elapsed());
    // A request sent on an open stream: the stream ends, the request is answered.
    let head = fan(&edge, "talker").await;
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    read_until(&mut s, b"data: ").await;
    s.write_all(head.replace("/events", "/status").as_bytes()).await.unwrap();
    let got = read_until(&mut s, b"\"state\":\"waiting\"").await;
    let text = String::from_utf8_lossy(&got);
    // (Frames, then) the last chunk, then the answer to the request.
    let (before, rest) = text.split_once("0\r\n\r\nHTTP/1.1 200 OK\r\n").unwrap_or_else(|| panic!("no last chunk before the answer: {text}"));
    assert!(before.is_empty() || before.ends_with("\r\n"), "{text}");
    assert!(rest.to_ascii_lowercase().contains("content-type: application/json"), "{text}");
    until_metric(&edge, "wicket_edge_event_streams ", 0.0, Duration::from_secs(2)).await;
}

/// A stop of the edge ends every open stream with its last chunk, and new ones are not taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_every_open_stream() {
    let (_origin, edge) = edge_with("shutdown-grace-seconds = 3").await;
    let mut open = Vec::new();
    for i in 0..10 {
        let head = fan(&edge, &format!("fan{i}")).await;
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        read_until(&mut s, b"data: ").await;
        open.push(s);
    }
    edge.begin_stop();
    for mut s in open {
        let got = closed_within(&mut s, Duration::from_secs(3)).await.expect("closed at the stop");
        assert!(String::from_utf8_lossy(&got).ends_with("0\r\n\r\n"), "{}", String::from_utf8_lossy(&got));
    }
}

/// An HTTP/1.1 connection over TLS (`max`: the highest version offered) to the edge's HTTPS port.
async fn tls_http1(ca: &std::path::Path, port: u16, max: openssl::ssl::SslVersion) -> tokio_openssl::SslStream<TcpStream> {
    let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls()).unwrap();
    b.set_ca_file(ca).unwrap();
    b.set_alpn_protos(b"\x08http/1.1").unwrap();
    b.set_max_proto_version(Some(max)).unwrap();
    let ssl = b.build().configure().unwrap().into_ssl("a.test").unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = tokio_openssl::SslStream::new(ssl, tcp).unwrap();
    std::pin::Pin::new(&mut tls).connect().await.unwrap();
    tls
}

/// Over HTTPS/1.1 a stream sheds rustls once its head has left and seals its frames with the
/// connection's keys itself (`tls::send_only`). OpenSSL clients of TLS 1.3 and of TLS 1.2 read its
/// frames and its end — at `event-stream-seconds` the last chunk, then the edge's `close_notify`
/// (OpenSSL reads a bare end of file as an error: the read to the end succeeds only with it); a
/// client that sends a request on the stream, or its own `close_notify`, ends the stream with its
/// last chunk and the connection's clean close, as does a stop of the edge; every slot comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_streams_seal_their_frames_and_end_with_a_clean_close() {
    use openssl::ssl::SslVersion;
    let pki = wicket_testkit::pki::Pki::new();
    let cert = pki.leaf("a", &["a.test"], 30);
    let port = free_port();
    let (_origin, edge) = edge_with_tables("event-stream-seconds = 2\nshutdown-grace-seconds = 3", &tls_config(port, &[cert], "")).await;
    let ca = pki.path("ca.pem");
    async fn read_to(s: &mut tokio_openssl::SslStream<TcpStream>, what: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(what.len()).any(|w| w == what) {
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await.expect("in 5 s").unwrap();
            assert!(n > 0, "closed before {:?}: {}", String::from_utf8_lossy(what), String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        got
    }
    async fn to_the_end(s: &mut tokio_openssl::SslStream<TcpStream>) -> String {
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await.expect("closed in 5 s").expect("a clean close (close_notify)");
        String::from_utf8_lossy(&got).into_owned()
    }
    // At the stream's deadline, for both versions.
    let mut streams = Vec::new();
    for (i, max) in [SslVersion::TLS1_3, SslVersion::TLS1_2, SslVersion::TLS1_3, SslVersion::TLS1_2].into_iter().enumerate() {
        let head = fan(&edge, &format!("fan{i}")).await;
        let mut s = tls_http1(&ca, port, max).await;
        s.write_all(head.as_bytes()).await.unwrap();
        let got = read_to(&mut s, b"data: ").await;
        assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&got));
        streams.push((s, got));
    }
    assert_eq!(metric(&edge, "wicket_edge_event_streams ").await, 4.0);
    for (mut s, mut got) in streams {
        let version = s.ssl().version_str();
        got.extend_from_slice(to_the_end(&mut s).await.as_bytes());
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("\"state\":\"waiting\"") && text.ends_with("\r\n0\r\n\r\n"), "{version}: {text}");
    }
    until_metric(&edge, "wicket_edge_event_streams ", 0.0, Duration::from_secs(2)).await;
    // A request sent on the stream; the client's own close_notify.
    for (i, max) in [SslVersion::TLS1_3, SslVersion::TLS1_2].into_iter().enumerate() {
        let head = fan(&edge, &format!("talker{i}")).await;
        let mut s = tls_http1(&ca, port, max).await;
        s.write_all(head.as_bytes()).await.unwrap();
        read_to(&mut s, b"data: ").await;
        s.write_all(head.replace("/events", "/status").as_bytes()).await.unwrap();
        let rest = to_the_end(&mut s).await;
        assert!(rest.ends_with("0\r\n\r\n") && !rest.contains("HTTP/1.1"), "{rest}");
        let head = fan(&edge, &format!("leaver{i}")).await;
        let mut s = tls_http1(&ca, port, max).await;
        s.write_all(head.as_bytes()).await.unwrap();
        read_to(&mut s, b"data: ").await;
        let _ = std::pin::Pin::new(&mut s).shutdown().await;
        until_metric(&edge, "wicket_edge_event_streams ", 0.0, Duration::from_secs(2)).await;
    }
    // A stop of the edge.
    let head = fan(&edge, "stopped").await;
    let mut s = tls_http1(&ca, port, SslVersion::TLS1_3).await;
    s.write_all(head.as_bytes()).await.unwrap();
    read_to(&mut s, b"data: ").await;
    edge.begin_stop();
    let rest = to_the_end(&mut s).await;
    assert!(rest.ends_with("0\r\n\r\n"), "{rest}");
}
