//! The doors beside the direct HTTP/1.1 one refuse what it refuses (issue #24), tried from
//! outside against real processes: every answer the front gives to a request with a body closes
//! the connection or skips the body (the plaintext port that redirects to HTTPS, files, status
//! polls, refusals, the proxy), so a body is never read as the next request; an HTTP/2 client
//! that cancels the streams it opened never has more than the stream limit at the origin, is
//! closed within the stated budget and writes no ERROR line; the admin port answers only its own
//! host names and never lets a cache keep `/metrics`; an HTTP/1.0 client is closed after its
//! answer unless it asked to keep the connection, through the plain and the TLS door.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wicket_testkit::pki::Pki;

/// The request an attacker hides in a body: if it is ever read as a request, the origin sees
/// its path.
const SMUGGLED: &str = "GET /.well-known/acme-challenge/smuggled HTTP/1.1\r\nHost: a.test\r\n\r\n";

/// The body framings of the table: the smuggled request as a `Content-Length` body, as one chunk,
/// and at the start of a 100 KB body.
fn bodies() -> Vec<(&'static str, String, Vec<u8>)> {
    let chunked = format!("{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", SMUGGLED.len());
    let mut big = SMUGGLED.as_bytes().to_vec();
    big.resize(100_000, b'x');
    vec![
        ("content-length", format!("Content-Length: {}\r\n", SMUGGLED.len()), SMUGGLED.as_bytes().to_vec()),
        ("chunked", "Transfer-Encoding: chunked\r\n".to_owned(), chunked.into_bytes()),
        ("oversized", format!("Content-Length: {}\r\n", big.len()), big),
    ]
}

/// Every answer on a connection, read until the edge closes it (or 5 s pass).
async fn answers(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<(u16, String, Vec<u8>)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    exchange(&mut s, bytes, Duration::from_secs(5)).await.0
}

/// Sends `bytes` on `s` and reads every answer until the edge closes the connection (then
/// `true`) or `wait` passes.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + ?Sized>(s: &mut S, bytes: &[u8], wait: Duration) -> (Vec<(u16, String, Vec<u8>)>, bool) {
    // The oversized body may be refused before it is all sent: the answers still count.
    let _ = s.write_all(bytes).await;
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    let mut chunk = [0u8; 16 * 1024];
    let mut closed = false;
    while let Ok(r) = tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
        match r {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => {
                closed = true;
                break;
            }
        }
    }
    let mut out = Vec::new();
    let mut rest = &buf[..];
    while let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let len = head.lines().find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0))).unwrap_or(0);
        let body_end = (end + 4 + len).min(rest.len());
        out.push((status, head, rest[end + 4..body_end].to_vec()));
        rest = &rest[body_end..];
    }
    (out, closed)
}

/// Sends `first` (a head ending in its framing line, then `body`) and a pipelined `GET /after`
/// on one connection, and checks what came back: the first answer has `status`, and the only
/// other answer there may be is the one to `/after` (in its `Location` or its body). The origin
/// must never see the smuggled path.
async fn no_smuggling(door: &str, addr: std::net::SocketAddr, first: &str, status: u16, origin: &TestUpstream) {
    for (framing, line, body) in bodies() {
        let mut bytes = format!("{first}{line}\r\n").into_bytes();
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(b"GET /after HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
        let got = answers(addr, &bytes).await;
        let what = format!("{door} × {framing}");
        let shown: Vec<_> = got.iter().map(|(s, h, b)| format!("{s} {h} {}", String::from_utf8_lossy(&b[..b.len().min(200)]))).collect();
        assert!(!got.is_empty(), "{what}: no answer");
        if framing == "oversized" && got[0].0 == 400 && status != 400 {
            // The proxy (Pingora) reads a large body in pieces; a piece that runs past its end
            // into the next request is refused as a whole ("sent data after end of body"): a 400
            // and the connection closed, never a request made of it.
            assert_eq!(got.len(), 1, "{what}: {shown:#?}");
            assert!(got[0].1.contains("application/json"), "{what}: {shown:#?}");
        } else {
            assert_eq!(got[0].0, status, "{what}: {shown:#?}");
        }
        assert!(got.len() <= 2, "{what}: the body was read as requests: {shown:#?}");
        if let Some((_, head, body)) = got.get(1) {
            let to_after = head.contains("/after") || String::from_utf8_lossy(body).contains("/after");
            assert!(to_after, "{what}: the second answer is not the pipelined request's: {shown:#?}");
        }
        let seen = origin.seen.lock().clone();
        assert!(!seen.iter().any(|p| p.contains("smuggled")), "{what}: the origin received the smuggled request: {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_is_never_read_as_the_next_request_whatever_answers_it() {
    // The plaintext port of an HTTPS edge: every request is redirected (ACME challenges excepted,
    // which reach the origin: the smuggled path would).
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let origin = TestUpstream::start("origin").await;
    let tls_port = free_port();
    let redirecting = TestEdge::start(&format!("origin = \"{}\"\n{}", origin.url(), tls_config(tls_port, &[a], "redirect-http = true")));
    no_smuggling("redirect", redirecting.addr, "POST /o/form HTTP/1.1\r\nHost: a.test\r\n", 308, &origin).await;
    no_smuggling("redirect of a GET", redirecting.addr, "GET /o/page HTTP/1.1\r\nHost: a.test\r\n", 308, &origin).await;
    no_smuggling("acme challenge", redirecting.addr, "POST /.well-known/acme-challenge/x HTTP/1.1\r\nHost: a.test\r\n", 200, &origin).await;

    // The direct edge: a file, a status poll, the queue page, a refusal, the core's admin route,
    // a protected path without a token, a request the origin answers.
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\nuser-header = \"x-user-id\"\n{}\n[[edge.limits]]\npath = \"/limited/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 0\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\n",
        origin.url(),
        hs_tokens()
    ));
    // Spend the limit, so that the next request to /limited/ is refused.
    assert_eq!(get(&edge.url("/limited/x"), &[]).await.status, 200);
    for (door, first, status) in [
        ("static file", "GET /app.js HTTP/1.1\r\nHost: a.test\r\n", 200),
        ("status poll", "GET /queue/r1/status HTTP/1.1\r\nHost: a.test\r\nAccept: application/json\r\n", 401),
        ("queue page", "GET /queue/r1 HTTP/1.1\r\nHost: a.test\r\nAccept: text/html\r\n", 200),
        ("limit refusal", "POST /limited/x HTTP/1.1\r\nHost: a.test\r\n", 429),
        ("core admin route", "POST /v1/events HTTP/1.1\r\nHost: a.test\r\n", 404),
        ("protected, no token", "POST /buy/ev-1 HTTP/1.1\r\nHost: a.test\r\nAccept: application/json\r\n", 403),
        ("origin", "POST /form HTTP/1.1\r\nHost: a.test\r\n", 200),
    ] {
        no_smuggling(door, edge.addr, first, status, &origin).await;
    }
}

/// HTTP/1.0 keeps a connection only when the client asks (`Connection: keep-alive`): a client
/// that reads its answer to the end of the connection (ApacheBench, `openssl s_time`, old health
/// checks) must see the edge close it, through the plain and the TLS door, whatever answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_client_is_closed_after_its_answer_unless_it_asks_to_keep_the_connection() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let origin = TestUpstream::start("origin").await;
    let tls_port = free_port();
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n{}\n{}\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\n",
        origin.url(),
        tls_config(tls_port, &[a], ""),
        hs_tokens()
    ));
    let client = rustls_client(&pki.path("ca.pem"), &rustls::version::TLS13);
    let connect = |door: &'static str| {
        let client = std::sync::Arc::clone(&client);
        async move {
            match door {
                "plain" => Box::new(tokio::net::TcpStream::connect(edge.addr).await.unwrap()) as Box<dyn AsyncStream>,
                _ => Box::new(rustls_connect(&client, tls_port).await),
            }
        }
    };
    let wait = Duration::from_secs(3);
    for (what, path, status) in [
        ("static file", "/app.js", 200),
        ("detail page", "/", 200),
        ("status poll, no ticket", "/queue/r1/status", 401),
        ("queue page", "/queue/r1", 200),
        ("protected, no token", "/buy/ev-1", 403),
        ("origin", "/events/1", 200),
        ("dot segments, to the origin", "/a/../b//c", 200),
        ("an encoded NUL", "/a%00b", 400),
    ] {
        for door in ["plain", "tls"] {
            // Without keep-alive: one answer, `Connection: close`, and the connection closed at once.
            let bytes = format!("GET {path} HTTP/1.0\r\nHost: a.test\r\nAccept: application/json\r\n\r\n");
            let started = Instant::now();
            let (got, closed) = exchange(&mut *connect(door).await, bytes.as_bytes(), wait).await;
            let shown: Vec<_> = got.iter().map(|(s, h, _)| format!("{s} {h}")).collect();
            assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec![status], "{what} over {door}: {shown:#?}");
            assert!(closed && started.elapsed() < Duration::from_secs(2), "{what} over {door}: left open: {shown:#?}");
            assert!(!got[0].1.contains("connection: keep-alive"), "{what} over {door}: {shown:#?}");
            // With keep-alive: a request, its answer, another request on the same connection, its
            // answer; the connection left open. (A request pipelined behind one the proxy answers is
            // not answered: Pingora closes the connection, and the client sends it again.)
            let one = format!("GET {path} HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\nAccept: application/json\r\n\r\n");
            let mut conn = connect(door).await;
            for round in 1..=2 {
                let (got, closed) = exchange(&mut *conn, one.as_bytes(), Duration::from_millis(500)).await;
                let shown: Vec<_> = got.iter().map(|(s, h, _)| format!("{s} {h}")).collect();
                assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec![status], "{what} over {door}, keep-alive, request {round}: {shown:#?}");
                if status == 400 {
                    // A refused head closes the connection whatever the client asked.
                    assert!(closed, "{what} over {door}: {shown:#?}");
                    break;
                }
                assert!(!closed, "{what} over {door}, keep-alive, request {round}: closed: {shown:#?}");
                assert!(got[0].1.contains("connection: keep-alive"), "{what} over {door}: {shown:#?}");
            }
        }
    }
}

/// A connection of either door.
trait AsyncStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> AsyncStream for T {}

/// An origin that counts the requests it is working on (each takes `work`, and goes on even if
/// the edge hangs up, as a real application does) and the most at once.
struct SlowOrigin {
    addr: std::net::SocketAddr,
    total: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl SlowOrigin {
    async fn start(work: Duration) -> SlowOrigin {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (total, peak, now) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (t, p) = (total.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (t, p, now) = (t.clone(), p.clone(), now.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |_req: http::Request<hyper::body::Incoming>| {
                        let (t, p, now) = (t.clone(), p.clone(), now.clone());
                        async move {
                            t.fetch_add(1, Ordering::SeqCst);
                            let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                            p.fetch_max(at_once, Ordering::SeqCst);
                            // The work runs to its end whatever the connection does.
                            let _ = tokio::spawn(async move {
                                tokio::time::sleep(work).await;
                                now.fetch_sub(1, Ordering::SeqCst);
                            })
                            .await;
                            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(Bytes::from_static(b"done"))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await;
                });
            }
        });
        SlowOrigin { addr, total, peak }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_cancelling_accepted_streams_is_capped_at_the_stream_limit_closed_and_never_logged_as_an_error() {
    let origin = SlowOrigin::start(Duration::from_secs(3)).await;
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let dir = tempfile::tempdir().unwrap();
    let (port, tls_port, admin_port) = (free_port(), free_port(), free_port());
    let cfg = dir.path().join("wicket.toml");
    std::fs::write(
        &cfg,
        format!(
            "[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin_port}\"\nadmin-token = \"{ADMIN_TOKEN}\"\n\
             secret = \"{SECRET}\"\nthreads = 2\nshutdown-grace-seconds = 1\norigin = \"http://{}\"\n{}",
            origin.addr,
            tls_config(tls_port, &[a], "")
        ),
    )
    .unwrap();
    // The real binary, its log as an operator reads it (stderr, the default level).
    let mut edge = Command::new(env!("CARGO_BIN_EXE_wicket"))
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", tls_port)).is_err() || std::net::TcpStream::connect(("127.0.0.1", admin_port)).is_err() {
        assert!(Instant::now() < deadline, "the edge did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // One connection: 1,500 times HEADERS for a slow origin page, 2 ms, RST_STREAM(CANCEL).
    let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls()).unwrap();
    b.set_ca_file(pki.path("ca.pem")).unwrap();
    b.set_alpn_protos(b"\x02h2").unwrap();
    let ssl = b.build().configure().unwrap().into_ssl("a.test").unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", tls_port)).await.unwrap();
    let mut tls = tokio_openssl::SslStream::new(ssl, tcp).unwrap();
    std::pin::Pin::new(&mut tls).connect().await.unwrap();
    let (mut send, conn) = h2::client::handshake(tls).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut sent = 0;
    let started = Instant::now();
    let closed_after = loop {
        if sent == 1500 {
            break None;
        }
        let ready = match tokio::time::timeout(Duration::from_secs(5), send.ready()).await {
            Ok(Ok(s)) => s,
            _ => break Some(sent),
        };
        send = ready;
        let req = http::Request::get(format!("https://a.test:{tls_port}/slow/page")).body(()).unwrap();
        let Ok((response, mut stream)) = send.send_request(req, true) else { break Some(sent) };
        sent += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
        stream.send_reset(h2::Reason::CANCEL);
        drop(response);
    };
    let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
    let closed_after = closed_after.unwrap_or_else(|| panic!("1,500 cancelled streams in {:?} and the connection is still open", started.elapsed()));
    assert!(ended.is_ok(), "the connection did not end after its last stream was refused");
    // The budget: closed once 32 cancelled streams are a quarter of what it handed on, or at 50.
    assert!(closed_after <= 60, "closed only after {closed_after} streams");
    // Let the origin see whatever was still on its way, then count.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (total, peak) = (origin.total.load(Ordering::SeqCst), origin.peak.load(Ordering::SeqCst));
    assert!(peak <= 100, "{peak} requests at the origin at once from one connection (limit 100)");
    assert!(total <= 60, "{total} requests reached the origin from a connection closed after {closed_after} streams");
    assert!(total >= 1, "the cancelled streams must have been handed on (the test would prove nothing)");

    // Counted in a metric, not logged at ERROR.
    let m = request("GET", &format!("http://127.0.0.1:{admin_port}/metrics"), &[("authorization", &format!("Bearer {ADMIN_TOKEN}"))], b"").await;
    let line = m.text().lines().find(|l| l.starts_with("wicket_edge_client_resets_total ")).map(str::to_owned).unwrap_or_default();
    let resets: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
    assert!(resets >= 1.0, "client resets not counted: {line:?}");
    let budget = m.text().lines().any(|l| l.starts_with("wicket_edge_rejects_total{reason=\"h2_cancel_budget\"} 1"));
    assert!(budget, "the closed connection is counted in wicket_edge_rejects_total");
    // A well-behaved client on a new connection is served.
    let (code, v, _, body) = wicket_testkit::pki::curl(&pki.path("ca.pem"), &format!("https://a.test:{tls_port}/"), &["--http2", "--resolve", &wicket_testkit::pki::resolve("a.test", tls_port)]).unwrap();
    assert_eq!((code, v.as_str()), (200, "2"), "{body}");

    terminate(&mut edge);
    let out = edge.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "{} ERROR lines, the first: {:?}", errors.len(), errors.first());
}

/// Stops the edge as an operator does (SIGTERM), without unsafe code: the `kill` command.
fn terminate(child: &mut std::process::Child) {
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_answers_only_its_own_names_and_metrics_are_never_cached() {
    let edge = TestEdge::start("admin-hosts = [\"wicket-admin.internal\"]\n");
    let console = edge.console().await;
    let m = console.call("GET", "/metrics", "").await;
    assert_eq!(m.status, 200);
    assert_eq!(m.header("cache-control"), Some("no-store"), "{:?}", m.headers);
    assert_eq!(edge.admin("GET", "/metrics", "").await.header("cache-control"), Some("no-store"));
    // A DNS-rebinding page: its own host name in Host and Origin. Nothing answers it, signing in
    // with the right token included.
    let url = edge.admin_url("/admin/session");
    let body = format!("{{\"token\":\"{ADMIN_TOKEN}\"}}");
    let foreign = [("host", "rebind.example"), ("origin", "http://rebind.example"), ("content-type", "application/json")];
    let r = request("POST", &url, &foreign, body.as_bytes()).await;
    assert_eq!(r.status, 421, "{}", r.text());
    assert_eq!(r.json()["error"], "misdirected_request");
    assert!(r.header("set-cookie").is_none());
    for path in ["/", "/admin/health", "/metrics"] {
        let r = request("GET", &edge.admin_url(path), &[("host", "rebind.example:9090"), ("cookie", &console.cookie)], b"").await;
        assert_eq!(r.status, 421, "{path}: {}", r.text());
    }
    // Its address, localhost and the listed name are answered; probes need no Host rule.
    for host in [edge.admin.to_string(), format!("localhost:{}", edge.admin.port()), "wicket-admin.internal".to_owned()] {
        let r = request("GET", &edge.admin_url("/admin/health"), &[("host", &host), ("authorization", &format!("Bearer {ADMIN_TOKEN}"))], b"").await;
        assert_eq!(r.status, 200, "{host}: {}", r.text());
    }
    assert_eq!(request("GET", &edge.admin_url("/healthz"), &[("host", "rebind.example")], b"").await.status, 200);
}

/// A row of the five-door table: what, method, path, headers, an edge file, the status.
type Row<'a> = (&'a str, &'a str, &'a str, Vec<(&'a str, String)>, bool, u16);

/// What a door's answer says, in the terms every door must agree on: the status, the error
/// code, where a browser is sent, whether `Retry-After` is there, and — for an answer of the
/// origin — the identity and credentials the origin saw.
#[derive(Debug, PartialEq, Eq)]
struct Said {
    status: u16,
    error: Option<String>,
    message: Option<String>,
    location: Option<String>,
    retry_after: bool,
    origin_saw: Option<Vec<(String, String)>>,
}

/// The origin's echo of what it was sent: the headers the decision sets or strips (the device
/// id by presence: a fingerprint's id is per edge secret and peer).
fn origin_saw(body: &[u8]) -> Option<Vec<(String, String)>> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    (v["upstream"] == "origin").then(|| {
        let h = &v["headers"];
        let mut out: Vec<(String, String)> = ["wicket-user", "wicket-room", "wicket-position", "cookie", "authorization"]
            .iter()
            .filter_map(|k| h[*k].as_str().map(|s| (k.to_string(), s.to_owned())))
            .collect();
        out.push(("wicket-device".into(), h["wicket-device"].as_str().map_or("absent", |_| "present").into()));
        out.sort();
        out
    })
}

fn said(status: u16, header: &dyn Fn(&str) -> Option<String>, body: &[u8]) -> Said {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    Said {
        status,
        error: json.as_ref().and_then(|j| j["error"].as_str().map(str::to_owned)),
        message: json.as_ref().and_then(|j| j["message"].as_str().map(str::to_owned)),
        location: header("location"),
        retry_after: header("retry-after").is_some(),
        origin_saw: origin_saw(body),
    }
}

/// One request of the table through an HTTP/1.1 door (the edge's port, or nginx's).
async fn over_http1(addr: std::net::SocketAddr, method: &str, path: &str, headers: &[(&str, String)]) -> Said {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let r = raw(addr, req.as_bytes()).await.unwrap_or_else(|| panic!("{method} {path}: no answer"));
    let header = |name: &str| r.head.lines().find_map(|l| l.strip_prefix(&format!("{name}:")).map(|v| v.trim().to_owned()));
    said(r.status, &header, &r.body)
}

/// One request of the table over HTTP/2 (its own connection, as a fan's browser tab).
async fn over_h2(ca: &std::path::Path, port: u16, method: &str, path: &str, headers: &[(&str, String)]) -> Said {
    let (send, conn) = h2::client::handshake(tls_h2(ca, port).await).await.unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder().method(method).uri(format!("https://a.test{path}"));
    for (k, v) in headers {
        req = req.header(*k, v.as_str());
    }
    let mut send = send.ready().await.unwrap();
    let (answer, _) = send.send_request(req.body(()).unwrap(), true).unwrap();
    let (parts, mut body) = answer.await.unwrap_or_else(|e| panic!("{method} {path}: {e}")).into_parts();
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    let header = |name: &str| parts.headers.get(name).map(|v| v.to_str().unwrap().to_owned());
    said(parts.status.as_u16(), &header, &out)
}

/// The five doors of docs/src/design.md §7 carry out one decision (issue #25): the same table of
/// requests — files, the origin, identity headers sent and forged, a blocked user, a limit and
/// its refusal, a bot-checked route, a protected path without, with a forged and with a valid
/// admission token (cookie and bearer), a reject-all room and a test-mode room (issue #28), the
/// queue, the core's admin route, other spellings —
/// through the HTTP/1.1 front, the HTTP/1.1 proxy (`fast-path = false`), the HTTP/2 fast path,
/// the HTTP/2 proxy and nginx's `auth_request` with the shipped snippets, each door on an edge
/// of its own with the same settings (a limit counts per edge), gives the same status, error
/// code, redirect, `Retry-After`, and the same identity at the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_door_gives_the_same_answer_to_the_same_request() {
    let origin = TestUpstream::start("origin").await;
    let pki = Pki::new();
    let cert = pki.leaf("a", &["a.test"], 30);
    let ca = pki.path("ca.pem");
    let core = dead_addr();
    let edge = |keys: &str, tls_port: Option<u16>| {
        let tls = tls_port.map(|p| tls_config(p, std::slice::from_ref(&cert), "")).unwrap_or_default();
        TestEdge::start(&format!(
            "origin = \"{}\"\ncore = \"http://{core}\"\nuser-header = \"x-user-id\"\n{keys}\n{tls}\n\
             [[edge.limits]]\npath = \"/limited/\"\nkey = \"ip\"\nrate = \"1r/m\"\n\
             [edge.blocklist]\nusers = [\"mallory\"]\n\
             [edge.bot]\nproof = \"pow\"\n[[edge.bot.routes]]\npath = \"/botted/\"\ncheck = \"always\"\n\
             [[edge.protected]]\npath = \"/members/\"\nroom = \"vip\"\n{}\
             [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
             release = {{ mode = \"fixed\", rate = 0.0 }}\n\
             [[rooms]]\nid = \"shut\"\nevent = \"ev-2\"\ntarget = \"/shut/\"\nprotected = [\"/shut/\"]\nreject-all = true\n\
             [[rooms]]\nid = \"trial\"\nevent = \"ev-3\"\ntarget = \"/trial/\"\nprotected = [\"/trial/\"]\ntest-mode = true\n",
            origin.url(),
            hs_tokens(),
        ))
    };
    let (h2_fast_port, h2_proxy_port) = (free_port(), free_port());
    let h1_fast = edge("", None);
    let h1_proxy = edge("fast-path = false", None);
    let _h2_fast = edge("", Some(h2_fast_port));
    let _h2_proxy = edge("fast-path = false", Some(h2_proxy_port));
    let behind_nginx = edge("trusted-proxies = [\"127.0.0.1\"]", None);
    let nginx = compat_nginx(&behind_nginx, &format!("location / {{\n   include {{c}}/wicket-protect.conf;\n   proxy_pass http://{};\n  }}", origin.addr));

    let token = mint_token("vip", "vip", "alice", 120, "wicket", "hs-1", HS_SECRET);
    let forged = mint_token("vip", "vip", "alice", 120, "wicket", "hs-1", "not-the-secret-0123456789abcdef0123");
    let json = ("accept", "application/json".to_string());
    let html = ("accept", "text/html".to_string());
    let sse = ("accept", "text/event-stream".to_string());
    let user = |u: &str| ("x-user-id", u.to_string());
    // (what, method, path, headers, an edge file (nginx's location serves the origin's instead),
    // the status every door must give)
    let table: Vec<Row> = vec![
        ("a file", "GET", "/app.js", vec![], true, 200),
        ("a file, HEAD", "HEAD", "/app.js", vec![], true, 200),
        ("a file, query", "GET", "/app.js?v=2", vec![json.clone()], true, 200),
        ("the origin", "GET", "/events/42", vec![json.clone()], false, 200),
        ("the origin, a user", "GET", "/events/42", vec![json.clone(), user("alice")], false, 200),
        ("forged identity headers", "GET", "/events/42", vec![json.clone(), ("wicket-user", "root".into()), ("wicket-room", "r1".into())], false, 200),
        ("a blocked user", "GET", "/events/42", vec![json.clone(), user("mallory")], false, 403),
        ("a blocked user, a file", "GET", "/app.js", vec![json.clone(), user("mallory")], true, 200),
        ("a limit, first", "GET", "/limited/a", vec![json.clone()], false, 200),
        ("a limit, over", "GET", "/limited/a", vec![json.clone()], false, 429),
        ("a limit, over, a browser", "GET", "/limited/a", vec![html.clone()], false, 429),
        ("a bot-checked route", "GET", "/botted/x", vec![json.clone()], false, 403),
        ("a bot-checked route, a bad pass", "GET", "/botted/x", vec![json.clone(), ("cookie", "wicket_pass=forged".into())], false, 403),
        ("protected, no token", "GET", "/buy/ev-1", vec![json.clone()], false, 403),
        ("protected, no token, a browser", "GET", "/buy/ev-1", vec![html.clone()], false, 302),
        ("protected, a forged token", "GET", "/members/x", vec![json.clone(), user("alice"), ("cookie", format!("wicket_a_vip={forged}"))], false, 403),
        ("protected, a token", "GET", "/members/x", vec![json.clone(), user("alice"), ("cookie", format!("a=1; wicket_a_vip={token}; b=2"))], false, 200),
        ("protected, a bearer", "GET", "/members/x", vec![json.clone(), user("alice"), ("authorization", format!("Bearer {token}"))], false, 200),
        // An edge-only rule (no room, so no session) still binds its token to the visitor it names:
        // a token copied to another visitor, or shown with no identity, is refused.
        ("protected, another's token", "GET", "/members/x", vec![json.clone(), user("bob"), ("cookie", format!("wicket_a_vip={token}"))], false, 403),
        ("protected, a token and no identity", "GET", "/members/x", vec![json.clone(), ("cookie", format!("wicket_a_vip={token}"))], false, 403),
        ("protected, a token, a blocked user", "GET", "/members/x", vec![json.clone(), user("mallory"), ("cookie", format!("wicket_a_vip={token}"))], false, 403),
        ("a reject-all room", "GET", "/shut/x", vec![json.clone()], false, 403),
        ("a reject-all room, a browser", "GET", "/shut/x", vec![html.clone()], false, 403),
        ("a reject-all room, a forged token", "GET", "/shut/x", vec![json.clone(), ("cookie", format!("wicket_a_shut={forged}"))], false, 403),
        ("a reject-all room's queue", "GET", "/queue/shut", vec![json.clone()], false, 200),
        ("a test-mode room, not a tester", "GET", "/trial/x", vec![json.clone()], false, 200),
        ("a test-mode room, a forged test cookie", "GET", "/trial/x", vec![json.clone(), ("cookie", "wicket_t_trial=4102444800.AAAAAAAAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA".into())], false, 200),
        ("a test-mode room's queue, not a tester", "GET", "/queue/trial", vec![json.clone()], false, 404),
        ("the core's admin route", "POST", "/v1/events/ev-1/reconcile", vec![json.clone()], false, 404),
        ("a status poll without a ticket", "GET", "/queue/r1/status", vec![json.clone()], false, 401),
        // Event streams (issue #40): served by the fast doors on a task of their own; every refusal
        // the same as the proxy's.
        ("an event stream without a ticket", "GET", "/queue/r1/events", vec![sse.clone()], false, 401),
        ("an event stream, a forged ticket", "GET", "/queue/r1/events", vec![sse.clone(), ("cookie", "wicket_q_r1=1.2.forged".into())], false, 401),
        ("an event stream, a room nobody runs", "GET", "/queue/nope/events", vec![sse.clone()], false, 200),
        ("an event stream, another spelling", "GET", "/queue//r1/events", vec![sse.clone()], false, 401),
        ("a room nobody runs", "GET", "/queue/nope/status", vec![json.clone()], false, 200),
        ("another spelling of a protected path", "GET", "/buy//ev-1", vec![json.clone()], false, 403),
        ("an escaped spelling of a protected path", "GET", "/buy/%65v-1", vec![json.clone()], false, 403),
        ("an escaped slash", "GET", "/buy%2fev-1", vec![json.clone()], false, 400),
    ];
    let mut differences = Vec::new();
    for (what, method, path, headers, file, status) in &table {
        let h1 = over_http1(h1_fast.addr, method, path, headers).await;
        assert_eq!(h1.status, *status, "{what}: {h1:?}");
        let doors = [
            ("HTTP/1.1 proxy", over_http1(h1_proxy.addr, method, path, headers).await),
            ("HTTP/2 fast", over_h2(&ca, h2_fast_port, method, path, headers).await),
            ("HTTP/2 proxy", over_h2(&ca, h2_proxy_port, method, path, headers).await),
            ("nginx auth_request", over_http1(nginx.addr, method, path, headers).await),
        ];
        for (door, got) in doors {
            let same = if door.starts_with("nginx") && *file { got.status == h1.status } else { got == h1 };
            if !same {
                differences.push(format!("{what} ({method} {path}): HTTP/1.1 front {h1:?}\n    {door} {got:?}"));
            }
        }
        if *what == "protected, a token" {
            let saw = h1.origin_saw.clone().unwrap_or_default();
            assert!(saw.contains(&("wicket-user".into(), "alice".into())) && saw.contains(&("cookie".into(), "a=1; b=2".into())), "{h1:?}");
        }
        if *what == "forged identity headers" {
            assert!(!h1.origin_saw.clone().unwrap_or_default().iter().any(|(k, _)| k == "wicket-user" || k == "wicket-room"), "{h1:?}");
        }
    }
    assert!(differences.is_empty(), "the doors disagree:\n  {}", differences.join("\n  "));
}
