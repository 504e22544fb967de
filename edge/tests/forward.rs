//! The forwarded fast path (`edge/src/front/forward.rs`) answers exactly as the full proxy path does.
//!
//! Two real edges in front of one real origin (a raw TCP server that records every request head
//! it receives and answers with every framing HTTP/1.1 has): one with `fast-forward = true`
//! (the default), one with `fast-forward = false` (everything through Pingora's proxy). Each
//! request goes to both; the answers (status, headers but `Date`, decoded body, framing kind)
//! and what the origin saw (request line and headers) must be equal.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The origin's log: every request head it received, raw.
type Log = Arc<parking_lot::Mutex<Vec<String>>>;

/// A raw HTTP/1.1 origin. `close_idle`: close each connection right after its answer without
/// saying so (a keep-alive origin whose idle timeout is shorter than the edge's pool's).
async fn raw_origin(close_idle: bool) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let l = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let l = l.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let end = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break end + 4;
                        }
                        let mut chunk = [0u8; 8192];
                        match s.read(&mut chunk).await {
                            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                            _ => return,
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    l.lock().push(head.clone());
                    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                    let is_head = head.starts_with("HEAD ");
                    let (answer, close) = answer_for(&path, is_head);
                    if s.write_all(&answer).await.is_err() {
                        return;
                    }
                    if close || close_idle {
                        return;
                    }
                }
            });
        }
    });
    (addr, log)
}

/// The origin's answer to `path`, and whether it closes the connection after it.
fn answer_for(path: &str, head: bool) -> (Vec<u8>, bool) {
    let body_of = |n: usize| -> Vec<u8> { (0..n).map(|i| b'a' + (i % 26) as u8).collect() };
    let with_len = |extra: &str, body: &[u8]| {
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Origin: yes\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\n\
             Set-Cookie: site=1; Path=/\r\nCache-Control: private\r\n{extra}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        if !head {
            out.extend_from_slice(body);
        }
        out
    };
    let p = path.split('?').next().unwrap_or(path);
    match p {
        "/chunked" => {
            let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            if !head {
                out.extend_from_slice(b"5\r\nhello\r\n1a;x=y\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n");
            }
            (out, false)
        }
        "/until-close" => {
            let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n".to_vec();
            if !head {
                out.extend_from_slice(&body_of(70_000));
            }
            (out, true)
        }
        "/says-close" => {
            let mut out = with_len("Connection: close\r\n", b"bye");
            out.truncate(out.len());
            (out, true)
        }
        "/not-modified" => (b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=5\r\n\r\n".to_vec(), false),
        "/no-content" => (b"HTTP/1.1 204 No Content\r\nX-Origin: yes\r\n\r\n".to_vec(), false),
        "/early-hints" => {
            let mut out = b"HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n".to_vec();
            out.extend_from_slice(&with_len("", b"after hints"));
            (out, false)
        }
        "/error" => (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nRetry-After: 3\r\n\r\nbusy".to_vec(), false),
        "/big" => (with_len("", &body_of(3 * 1024 * 1024 + 7)), false),
        "/buy/revoke" => (with_len("Wicket-Revoke: 1\r\n", b"paid"), false),
        "/teapot" => (b"HTTP/1.1 418 I'm a teapot\r\nContent-Length: 0\r\n\r\n".to_vec(), false),
        _ => (with_len("", format!("page {path}").as_bytes()), false),
    }
}

/// A complete answer as the client saw it.
#[derive(PartialEq, Eq)]
struct Answer {
    /// Informational answers before the final one (status line and headers).
    informational: Vec<String>,
    status_line: String,
    /// Lower-cased names; `date` left out; device cookie values masked.
    headers: Vec<(String, String)>,
    /// Decoded (de-chunked) body.
    body: Vec<u8>,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let preview = String::from_utf8_lossy(&self.body[..self.body.len().min(80)]).into_owned();
        f.debug_struct("Answer")
            .field("informational", &self.informational)
            .field("status_line", &self.status_line)
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .field("body_start", &preview)
            .finish()
    }
}

/// Sends `request` on `conn` and reads one whole answer (`head`: to a HEAD request).
async fn exchange(conn: &mut TcpStream, request: &str, head: bool) -> Answer {
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut informational = Vec::new();
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            if buf.starts_with(b"HTTP/1.1 1") {
                informational.push(String::from_utf8_lossy(&buf[..end]).into_owned());
                buf.drain(..end + 4);
                continue;
            }
            break end;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut chunk)).await.expect("answer head").unwrap();
        assert!(n > 0, "closed before an answer to {request:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap().to_owned();
    let mut headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_ascii_lowercase(), v.trim().to_owned())
        })
        .filter(|(k, _)| k != "date")
        .map(|(k, v)| {
            if k == "set-cookie" && v.starts_with("wicket_d=") {
                let attrs = v.split_once(';').map_or("", |(_, a)| a).to_owned();
                (k, format!("wicket_d=<device>;{attrs}"))
            } else {
                (k, v)
            }
        })
        .collect();
    headers.sort();
    let mut rest = buf[end + 4..].to_vec();
    let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let no_body = head || status == 204 || status == 304;
    let mut read_more = async |rest: &mut Vec<u8>| -> bool {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut chunk)).await.unwrap_or_else(|_| panic!("no more body for {request:?} after {} bytes", rest.len())).unwrap();
        rest.extend_from_slice(&chunk[..n]);
        n > 0
    };
    let body = if no_body {
        Vec::new()
    } else if get("transfer-encoding").as_deref() == Some("chunked") {
        let mut body = Vec::new();
        let mut pos = 0;
        loop {
            let line_end = loop {
                if let Some(i) = rest[pos..].windows(2).position(|w| w == b"\r\n") {
                    break pos + i;
                }
                assert!(read_more(&mut rest).await, "closed mid-chunk");
            };
            let size_text = String::from_utf8_lossy(&rest[pos..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
            pos = line_end + 2;
            while rest.len() < pos + size + 2 {
                assert!(read_more(&mut rest).await, "closed mid-chunk");
            }
            body.extend_from_slice(&rest[pos..pos + size]);
            pos += size + 2;
            if size == 0 {
                break;
            }
        }
        body
    } else if let Some(len) = get("content-length") {
        let len: usize = len.parse().unwrap();
        while rest.len() < len {
            assert!(read_more(&mut rest).await, "closed mid-body");
        }
        rest.truncate(len);
        rest
    } else {
        while read_more(&mut rest).await {}
        rest
    };
    Answer { informational, status_line, headers, body }
}

/// The origin's view of a request: request line and sorted, lower-cased headers.
fn seen(raw: &str) -> (String, BTreeMap<String, Vec<String>>) {
    let mut lines = raw.trim_end().split("\r\n");
    let line = lines.next().unwrap().to_owned();
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in lines {
        let (k, v) = l.split_once(':').unwrap();
        headers.entry(k.trim().to_ascii_lowercase()).or_default().push(v.trim().to_owned());
    }
    (line, headers)
}

struct Pair {
    fast: TestEdge,
    full: TestEdge,
    log: Log,
}

fn config(origin: SocketAddr, fast: bool, extra: &str) -> String {
    format!(
        "origin = \"http://{origin}\"\nfast-forward = {fast}\nuser-header = \"x-user-id\"\nread-timeout-ms = 1500\n{extra}\n\
         [[edge.protected]]\npath = \"/buy\"\nroom = \"ev-42\"\n\n\
         [tokens]\nissuer = \"wicket\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\""
    )
}

async fn pair(extra: &str) -> Pair {
    let (origin, log) = raw_origin(false).await;
    let fast = TestEdge::start(&config(origin, true, extra));
    let full = TestEdge::start(&config(origin, false, extra));
    Pair { fast, full, log }
}

impl Pair {
    /// Sends `request` to both edges (each on its own kept-alive connection) and checks the
    /// answers and the origin's views are equal; returns the fast path's answer.
    async fn same(&self, conns: &mut (TcpStream, TcpStream), request: &str) -> Answer {
        let head = request.starts_with("HEAD ");
        let before = self.log.lock().len();
        let a = exchange(&mut conns.0, request, head).await;
        let fast_seen: Vec<String> = self.log.lock()[before..].to_vec();
        let before = self.log.lock().len();
        let b = exchange(&mut conns.1, request, head).await;
        let full_seen: Vec<String> = self.log.lock()[before..].to_vec();
        assert_eq!(a, b, "answers differ (left: fast path, right: full path) for {request:?}");
        let fast_seen: Vec<_> = fast_seen.iter().map(|r| seen(r)).collect();
        let full_seen: Vec<_> = full_seen.iter().map(|r| seen(r)).collect();
        assert_eq!(fast_seen, full_seen, "the origin saw different requests (left: fast path) for {request:?}");
        a
    }

    async fn conns(&self) -> (TcpStream, TcpStream) {
        (TcpStream::connect(self.fast.addr).await.unwrap(), TcpStream::connect(self.full.addr).await.unwrap())
    }
}

fn get(path: &str, extra: &str) -> String {
    let accept = if extra.contains("Accept:") { "" } else { "Accept: */*\r\n" };
    format!("GET {path} HTTP/1.1\r\nHost: tickets.example\r\nUser-Agent: test/1\r\n{accept}{extra}\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_answers_equal_the_full_paths_for_every_framing() {
    let p = pair("").await;
    let mut c = p.conns().await;
    // Kept-alive connections: every answer must end exactly where the next begins.
    for path in ["/home", "/events/42?x=1", "/chunked", "/not-modified", "/no-content", "/early-hints", "/error", "/teapot", "/big", "/chunked"] {
        let a = p.same(&mut c, &get(path, "")).await;
        assert!(!a.status_line.is_empty(), "{path}");
    }
    let a = p.same(&mut c, &get("/big", "")).await;
    assert_eq!(a.body.len(), 3 * 1024 * 1024 + 7);
    let a = p.same(&mut c, &get("/chunked", "")).await;
    assert_eq!(a.body, b"helloabcdefghijklmnopqrstuvwxyz");
    let a = p.same(&mut c, "HEAD /events/1 HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(a.body.is_empty());
    p.same(&mut c, "HEAD /chunked HTTP/1.1\r\nHost: x\r\n\r\n").await;
    // Close-delimited bodies are re-framed as chunks, and the connection lives on.
    let a = p.same(&mut c, &get("/until-close", "")).await;
    assert_eq!(a.body.len(), 70_000);
    p.same(&mut c, &get("/home", "")).await;
    // An origin that says `Connection: close` does not end the client's connection.
    p.same(&mut c, &get("/says-close", "")).await;
    let a = p.same(&mut c, &get("/after-close", "")).await;
    assert_eq!(a.body, b"page /after-close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_are_set_and_forged_ones_dropped_alike() {
    let p = pair("").await;
    let mut c = p.conns().await;
    // No device cookie: a fingerprint device and a fresh cookie in the answer, on both paths.
    let a = p.same(&mut c, &get("/a", "")).await;
    assert!(a.headers.iter().any(|(k, v)| k == "set-cookie" && v.starts_with("wicket_d=<device>")), "{a:?}");
    // Forged identity, hop-by-hop and forwarding headers.
    let forged = "X-User-Id: alice\r\nWicket-User: mallory\r\nWicket-Room: ev-42\r\nWicket-Position: 1\r\n\
                  Wicket-Device: dev\r\nX-Forwarded-For: 6.6.6.6\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
                  Cookie: a=1; b=2\r\nIf-None-Match: \"x\"\r\n";
    p.same(&mut c, &get("/b", forged)).await;
    let last = p.log.lock().last().cloned().unwrap();
    let (_, h) = seen(&last);
    assert_eq!(h.get("wicket-user"), Some(&vec!["alice".to_owned()]));
    assert!(!h.contains_key("wicket-room") && !h.contains_key("wicket-position"), "{last}");
    assert_eq!(h.get("x-forwarded-for"), Some(&vec!["127.0.0.1".to_owned()]));
    // A device cookie from the first answer is a device on both edges (each signs with the same secret).
    let device = {
        let r = common::get(&p.fast.url("/c"), &[]).await;
        r.cookies().get("wicket_d").cloned().unwrap()
    };
    let a = p.same(&mut c, &get("/d", &format!("Cookie: wicket_d={device}\r\n"))).await;
    assert!(!a.headers.iter().any(|(k, _)| k == "set-cookie" && !k.is_empty() && a.headers.iter().any(|(_, v)| v.starts_with("wicket_d"))), "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_paths_need_admission_and_the_origin_never_sees_the_token() {
    let p = pair("").await;
    let mut c = p.conns().await;
    let token = mint_token("ev-42", "ev-42", "alice", 120, "wicket", "hs-1", HS_SECRET);
    let before = p.log.lock().len();
    for (extra, status) in [
        ("".to_owned(), 403),
        ("Accept: text/html\r\n".to_owned(), 302),
        ("Cookie: wicket_a_ev-42=forged.token.value\r\n".to_owned(), 403),
        (format!("Cookie: wicket_a_ev-43={token}\r\n"), 403),
    ] {
        let a = p.same(&mut c, &get("/buy/x", &extra)).await;
        assert_eq!(a.status_line.split(' ').nth(1), Some(status.to_string().as_str()), "{extra} {a:?}");
    }
    assert_eq!(p.log.lock().len(), before, "refused requests never reach the origin");
    let admitted = format!("X-User-Id: alice\r\nCookie: a=1; wicket_a_ev-42={token}; b=2\r\nAuthorization: Bearer {token}\r\n");
    let a = p.same(&mut c, &get("/buy/x", &admitted)).await;
    assert!(a.status_line.contains(" 200 "), "{a:?}");
    let last = p.log.lock().last().cloned().unwrap();
    let (_, h) = seen(&last);
    assert_eq!(h.get("cookie"), Some(&vec!["a=1; b=2".to_owned()]), "{last}");
    assert!(!h.contains_key("authorization"), "{last}");
    assert_eq!(h.get("wicket-user"), Some(&vec!["alice".to_owned()]));
    assert_eq!(h.get("wicket-room"), Some(&vec!["ev-42".to_owned()]));
    // The origin revokes the admission (an order paid): the cookie is cleared on both paths.
    let a = p.same(&mut c, &get("/buy/revoke", &admitted)).await;
    assert!(a.headers.iter().any(|(k, v)| k == "set-cookie" && v.starts_with("wicket_a_ev-42=;")), "{a:?}");
    assert!(!a.headers.iter().any(|(k, _)| k == "wicket-revoke"), "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_blocks_refuse_alike_on_the_fast_path() {
    let extra = "[[edge.limits]]\npath = \"/\"\nkey = \"user\"\nrate = \"2r/m\"\nburst = 0\nnodelay = true\n[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1000r/s\"\nburst = 100\nnodelay = true";
    let p = pair(extra).await;
    let mut c = p.conns().await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let a = p.same(&mut c, &get("/limited", "X-User-Id: carol\r\n")).await;
        statuses.push(a.status_line.split(' ').nth(1).unwrap().to_owned());
    }
    assert_eq!(statuses, ["200", "429", "429", "429"], "2r/m with no burst: one a 30 s");
    // A request the fast path hands to the proxy (not admitted) is counted once, not twice: the
    // first gets 403 (under the limit), the next 429, on both.
    // On one connection: the proxy hands it back to the front after each request.
    let mut statuses = Vec::new();
    let mut conn = p.conns().await;
    for _ in 0..2 {
        let a = p.same(&mut conn, &get("/buy/x", "X-User-Id: erin\r\n")).await;
        statuses.push(a.status_line.split(' ').nth(1).unwrap().to_owned());
    }
    assert_eq!(statuses, ["403", "429"]);
    // Blocked by the admin: refused with 403 on both.
    for edge in [&p.fast, &p.full] {
        let r = edge.admin("POST", "/admin/blocklist", r#"{"users":["dave"]}"#).await;
        assert!(r.status < 300, "{}", r.text());
    }
    let a = p.same(&mut c, &get("/x", "X-User-Id: dave\r\n")).await;
    assert!(a.status_line.contains(" 403 "), "{a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_failures_are_the_same_502_and_504() {
    // A dead origin: connection refused.
    let dead = dead_addr();
    let fast = TestEdge::start(&config(dead, true, ""));
    let full = TestEdge::start(&config(dead, false, ""));
    for accept in ["application/json", "text/html"] {
        let req = get("/x", &format!("Accept: {accept}\r\n"));
        let mut a = TcpStream::connect(fast.addr).await.unwrap();
        let mut b = TcpStream::connect(full.addr).await.unwrap();
        let (x, y) = (exchange(&mut a, &req, false).await, exchange(&mut b, &req, false).await);
        assert_eq!(x, y);
        assert!(x.status_line.contains(" 502 "), "{x:?}");
        // The one difference: the fast path keeps the client's connection (the request had no
        // body), Pingora closes it after its 502. It also shows the fast path was taken.
        let again = exchange(&mut a, &req, false).await;
        assert!(again.status_line.contains(" 502 "), "{again:?}");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), b.read_to_end(&mut rest)).await;
        assert!(matches!(closed, Ok(Ok(0))), "the full path closes after its 502");
    }
    // A silent origin: read timeout (1.5 s) → 504.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let fast = TestEdge::start(&config(addr, true, ""));
    let full = TestEdge::start(&config(addr, false, ""));
    let req = get("/x", "");
    let mut a = TcpStream::connect(fast.addr).await.unwrap();
    let mut b = TcpStream::connect(full.addr).await.unwrap();
    let (x, y) = tokio::join!(exchange(&mut a, &req, false), exchange(&mut b, &req, false));
    assert_eq!(x, y);
    assert!(x.status_line.contains(" 504 "), "{x:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_origin_closed_is_retried_not_a_502() {
    let (origin, log) = raw_origin(true).await;
    let edge = TestEdge::start(&config(origin, true, ""));
    let mut c = TcpStream::connect(edge.addr).await.unwrap();
    for i in 0..30 {
        let a = exchange(&mut c, &get(&format!("/p{i}"), ""), false).await;
        assert!(a.status_line.contains(" 200 "), "request {i}: {a:?}");
        assert_eq!(a.body, format!("page /p{i}").as_bytes());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(log.lock().len(), 30, "each request reached the origin once");
}
