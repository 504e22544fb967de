//! Exhausting the edge (issue #10), against the real `wicket` binary in its own process so its
//! memory can be read: idle connections and unfinished heads with an 8 MB file in `site-dir`,
//! trickled heads, clients that stop reading, and what the edge logs about them.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap()
}

struct Edge {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const BIG: usize = 8 * 1024 * 1024;
const HEADER_TIMEOUT_MS: u64 = 1500;
const WRITE_TIMEOUT_MS: u64 = 1500;

fn start_edge(extra: &str) -> Edge {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), detail_page()).unwrap();
    std::fs::write(site.join("big.bin"), vec![7u8; BIG]).unwrap();
    let port = free_port();
    let cfg = dir.path().join("wicket.toml");
    std::fs::write(
        &cfg,
        format!(
            "[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{}\"\nadmin-token = \"{ADMIN_TOKEN}\"\n\
             secret = \"{SECRET}\"\nsite-dir = \"site\"\nthreads = 2\nshutdown-grace-seconds = 1\n\
             header-timeout-ms = {HEADER_TIMEOUT_MS}\nclient-write-timeout-ms = {WRITE_TIMEOUT_MS}\n{extra}\n",
            free_port()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_wicket"))
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "edge did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Edge { child, addr, dir }
}

async fn page_ok(addr: std::net::SocketAddr) {
    let r = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("an answer");
    assert_eq!(r.status, 200);
}

/// Reads until the edge answers or closes; returns what it sent and when that happened.
async fn until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Instant>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (got, Some(Instant::now())),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (got, None),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_and_unfinished_heads_cost_little_and_are_closed_on_time() {
    let edge = start_edge("");
    let pid = edge.child.id();
    // Warm up: the page, the big file, a few connections.
    for _ in 0..5 {
        page_ok(edge.addr).await;
    }
    let r = raw(edge.addr, b"GET /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    assert_eq!(r.body.len(), BIG);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(pid);

    // 2,000 connections that send nothing, 200 that send 20 KiB of a head and stop.
    let mut idle = Vec::new();
    for _ in 0..2000 {
        idle.push(TcpStream::connect(edge.addr).await.unwrap());
    }
    let started = Instant::now();
    let mut unfinished = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(format!("GET / HTTP/1.1\r\nHost: x\r\nX-Pad: {}", "a".repeat(20 * 1024)).as_bytes()).await.unwrap();
        unfinished.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = rss_kib(pid);
    let per_conn = (during.saturating_sub(before) * 1024) / 2200;
    eprintln!("edge RSS {before} KiB -> {during} KiB with 2,200 hostile connections: {per_conn} B each");
    assert!(per_conn <= 16 * 1024, "{per_conn} B per connection (limit 16 KiB): {before} -> {during} KiB");
    // The edge still serves others meanwhile.
    page_ok(edge.addr).await;

    // Every unfinished head is answered 408 and closed within the header deadline.
    let limit = Duration::from_millis(HEADER_TIMEOUT_MS + 3000);
    let mut latest = Duration::ZERO;
    for s in &mut unfinished {
        let (got, closed) = until_closed(s, limit).await;
        let closed = closed.expect("an unfinished head was never closed");
        latest = latest.max(closed - started);
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    }
    assert!(latest < Duration::from_millis(HEADER_TIMEOUT_MS + 2500), "last unfinished head closed after {latest:?}");

    // A head trickled one byte at a time never resets the deadline.
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    let t = Instant::now();
    let mut cut = None;
    for b in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ".iter().cycle().take(60) {
        if s.write_all(&[*b]).await.is_err() {
            cut = Some(t.elapsed());
            break;
        }
        let mut buf = [0u8; 512];
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(250), s.read(&mut buf)).await {
            let n = r.unwrap_or(0);
            assert!(n == 0 || buf[..n].starts_with(b"HTTP/1.1 408"), "{:?}", String::from_utf8_lossy(&buf[..n]));
            cut = Some(t.elapsed());
            break;
        }
    }
    let cut = cut.expect("a trickled head was never cut");
    assert!(cut < Duration::from_millis(HEADER_TIMEOUT_MS + 1000), "{cut:?}");
    drop(idle);
    page_ok(edge.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_are_closed_and_nothing_is_logged_as_an_error() {
    let origin = TestUpstream::start("origin").await;
    let edge = start_edge(&format!("origin = \"{}\"", origin.url()));
    // Thirty pipelined requests for the 8 MB file, then nothing read for a while.
    let mut s = TcpStream::connect(edge.addr).await.unwrap();
    let one = b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(&one.repeat(30)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(WRITE_TIMEOUT_MS + 2500)).await;
    let (got, closed) = until_closed(&mut s, Duration::from_secs(20)).await;
    assert!(closed.is_some(), "the stalled reader was never closed");
    assert!(got.len() < 30 * BIG, "everything was sent: {} bytes", got.len());
    page_ok(edge.addr).await;
    // Proxied requests whose client left, and a disconnect in the middle of a file: no ERROR.
    for _ in 0..20 {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).await;
        drop(s);
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(b"GET /slow/300 HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        drop(s);
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(b"POST /slow/300 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc").await.unwrap();
        drop(s);
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let log = std::fs::read_to_string(edge.dir.path().join("stderr.log")).unwrap();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "client behaviour logged as errors:\n{}", errors.join("\n"));
}

/// Idle keep-alive clients are closed after `keepalive-seconds`, whichever path answered their
/// last request (the fast path's file and forward, Pingora's proxy), and before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_clients_are_closed_after_keepalive_seconds() {
    let origin = TestUpstream::start("origin").await;
    let edge = start_edge(&format!("origin = \"{}\"\nkeepalive-seconds = 1", origin.url()));
    let requests: [&[u8]; 4] = [
        b"",                                                                          // nothing sent
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                                          // a file, fast path
        b"GET /page HTTP/1.1\r\nHost: x\r\n\r\n",                                      // forwarded, fast path
        b"POST /page HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",              // forwarded by the proxy
    ];
    for request in requests {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        let started = Instant::now();
        if !request.is_empty() {
            s.write_all(request).await.unwrap();
            let r = read_answer(&mut s).await.expect("an answer");
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(request));
        }
        let (_, closed) = until_closed(&mut s, Duration::from_secs(5)).await;
        let after = closed.expect("an idle client was never closed") - started;
        assert!(after >= Duration::from_millis(900) && after < Duration::from_millis(2500), "closed after {after:?}: {}", String::from_utf8_lossy(request));
    }
}

/// Keep-alive clients that wait between requests (an idle connection holds no read buffer: see
/// `fast::idle_state`) are answered as before when they speak again: a whole head, a head in two
/// parts, two pipelined requests; and are closed `keepalive-seconds` after their last request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_clients_that_wait_are_answered_when_they_speak_again() {
    let edge = start_edge("keepalive-seconds = 3");
    let mut conns = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(edge.addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        assert_eq!(read_answer(&mut s).await.expect("an answer").status, 200);
        conns.push(s);
    }
    let answered = Instant::now();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut s = conns.pop().unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let r = read_answer(&mut s).await.expect("an answer after a wait");
    assert_eq!((r.status, r.body.as_slice()), (200, detail_page().as_bytes()));
    let mut s = conns.pop().unwrap();
    s.write_all(b"G").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.write_all(b"ET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let r = read_answer(&mut s).await.expect("an answer to a head in two parts");
    assert_eq!((r.status, r.body.as_slice()), (200, detail_page().as_bytes()));
    let mut s = conns.pop().unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let (got, closed) = until_closed(&mut s, Duration::from_secs(5)).await;
    assert!(closed.is_some());
    let text = String::from_utf8_lossy(&got);
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    // The last one: closed keepalive-seconds after its request.
    let mut s = conns.pop().unwrap();
    let (_, closed) = until_closed(&mut s, Duration::from_secs(6)).await;
    let after = closed.expect("an idle client was never closed") - answered;
    assert!(after >= Duration::from_millis(2900) && after < Duration::from_millis(4500), "closed {after:?} after its request");
    page_ok(edge.addr).await;
}

/// A keep-alive connection idle for a second is parked (`front::conn::Parked`: its socket alone,
/// nothing of Pingora's; `wicket_edge_parked_connections` counts them) and made again when its client speaks: the client keeps its address (the
/// origin sees it in `X-Forwarded-For`, whichever path forwards), a connection the proxy served
/// parks and is served again, a client that half-closes while parked is let go at once, and a
/// stop closes parked connections at once, not at the end of its grace nor of `keepalive-seconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_keeps_its_client_and_ends_on_time() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!("origin = \"{}\"\nkeepalive-seconds = 30\nshutdown-grace-seconds = 10", origin.url()));
    let parked = || tokio::time::sleep(Duration::from_millis(1400));
    async fn from(addr: std::net::SocketAddr, ip: [u8; 4]) -> TcpStream {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(std::net::SocketAddr::from((ip, 0))).unwrap();
        s.connect(addr).await.unwrap()
    }
    async fn ask(s: &mut TcpStream, request: &[u8]) -> RawResp {
        s.write_all(request).await.unwrap();
        read_answer(s).await.expect("an answer")
    }
    let forwarded_for = |r: &RawResp| serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["headers"]["x-forwarded-for"].clone();
    const FORWARD: &[u8] = b"GET /page HTTP/1.1\r\nHost: x\r\n\r\n";
    const PROXIED: &[u8] = b"POST /page HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    const PAGE: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    let mut by_forward = from(edge.addr, [127, 0, 0, 2]).await;
    let mut by_proxy = from(edge.addr, [127, 0, 0, 3]).await;
    let mut half_closing = from(edge.addr, [127, 0, 0, 4]).await;
    let mut at_stop = from(edge.addr, [127, 0, 0, 5]).await;
    for (s, request, ip) in [(&mut by_forward, FORWARD, "127.0.0.2"), (&mut by_proxy, PROXIED, "127.0.0.3")] {
        let r = ask(s, request).await;
        assert_eq!((r.status, forwarded_for(&r)), (200, serde_json::json!(ip)), "{}", r.head);
    }
    for s in [&mut half_closing, &mut at_stop] {
        assert_eq!(ask(s, PAGE).await.status, 200);
    }
    let parked_now = || async { edge.admin("GET", "/metrics", "").await.text().lines().find_map(|l| l.strip_prefix("wicket_edge_parked_connections ")).map(str::to_owned) };
    assert_eq!(parked_now().await.as_deref(), Some("0"));
    parked().await;
    assert_eq!(parked_now().await.as_deref(), Some("4"), "every idle connection parked after a second");
    // Parked, then served again with the same address, by either path, twice.
    for _ in 0..2 {
        for (s, ip) in [(&mut by_forward, "127.0.0.2"), (&mut by_proxy, "127.0.0.3")] {
            for request in [FORWARD, PROXIED] {
                let r = ask(s, request).await;
                assert_eq!((r.status, forwarded_for(&r)), (200, serde_json::json!(ip)), "{}", r.head);
            }
            let r = ask(s, PAGE).await;
            assert_eq!((r.status, r.body.as_slice()), (200, detail_page().as_bytes()));
        }
        parked().await;
    }
    // A half-close while parked: the edge closes its side at once.
    half_closing.shutdown().await.unwrap();
    let (got, closed) = until_closed(&mut half_closing, Duration::from_secs(2)).await;
    assert!(closed.is_some() && got.is_empty(), "a half-closed parked connection was kept: {got:?}");
    assert_eq!(parked_now().await.as_deref(), Some("3"));
    // A stop: every parked connection is closed at once (the grace is 10 s, keep-alive 30 s).
    let stop = Instant::now();
    edge.begin_stop();
    for s in [&mut at_stop, &mut by_forward, &mut by_proxy] {
        let (_, closed) = until_closed(s, Duration::from_secs(5)).await;
        let after = closed.expect("a parked connection outlived the stop") - stop;
        assert!(after < Duration::from_secs(2), "closed {after:?} after the stop began");
    }
}
