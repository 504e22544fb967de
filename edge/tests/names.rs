//! Upstream names that move while the edge runs (issue #41): the real `wicket serve` binary, with
//! `edge.origin` and `edge.core` given as names, runs in its own mount namespace whose /etc/hosts is a
//! file this test rewrites (`unshare --mount` + a bind mount: root, as in CI). The name moves from a
//! server on 127.0.0.1 to one on 127.0.0.2 (same port):
//!
//! - at the interval (`resolve-every-ms`), with both servers up: requests follow within it, none fails;
//! - with a long interval and the old server gone: the failed connection has the name looked up again at
//!   once, so requests follow within about a second instead of the interval.
//!
//! Both paths are crossed: a plain origin GET (the fast forward path) and a core route (Pingora's proxy).

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wicket_testkit::{Spawned, free_port};

/// A stand-in upstream: its listener and its connections.
struct Labeled {
    accept: tokio::task::JoinHandle<()>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Labeled {
    /// Gone, as a removed container: the listener and every connection closed.
    async fn stop(self) {
        self.accept.abort();
        let _ = self.accept.await;
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A stand-in upstream on `ip:port` that answers every request with `label` (keep-alive).
async fn label_server(ip: Ipv4Addr, port: u16, label: &'static str) -> Labeled {
    let listener = tokio::net::TcpListener::bind((ip, port)).await.unwrap_or_else(|e| panic!("bind {ip}:{port}: {e}"));
    let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
    let kept = conns.clone();
    let accept = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let conn = tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{label}", label.len());
                        if s.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
            kept.lock().unwrap().push(conn.abort_handle());
        }
    });
    Labeled { accept, conns }
}

/// A port free on both 127.0.0.1 and 127.0.0.2.
fn port_on_both() -> u16 {
    loop {
        let p = free_port();
        if std::net::TcpListener::bind(("127.0.0.2", p)).is_ok() {
            return p;
        }
    }
}

/// Rewrites the hosts file in place (the bind mount pins its inode: a rename would not be seen).
fn hosts(file: &Path, origin_ip: &str, core_ip: &str) {
    std::fs::write(file, format!("127.0.0.1 localhost\n{origin_ip} origin.wicket.test\n{core_ip} core.wicket.test\n")).unwrap();
}

/// `wicket serve` in its own mount namespace with `hosts_file` as its /etc/hosts.
fn edge_with_hosts(dir: &Path, hosts_file: &Path, origin_port: u16, core_port: u16, every_ms: u64) -> (Spawned, SocketAddr) {
    assert!(
        rustix_is_root(),
        "this test runs the edge in its own mount namespace (unshare --mount, mount --bind): it needs root, as CI has"
    );
    let (port, admin) = (free_port(), free_port());
    let config = dir.join("wicket.toml");
    std::fs::write(
        &config,
        format!(
            "[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin}\"\nadmin-token = \"{}\"\n\
             secret = \"{}\"\nthreads = 2\nshutdown-grace-seconds = 1\nretries = 0\n\
             origin = \"http://origin.wicket.test:{origin_port}\"\ncore = \"http://core.wicket.test:{core_port}\"\n\
             resolve-every-ms = {every_ms}\n",
            common::ADMIN_TOKEN,
            common::SECRET
        ),
    )
    .unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\""])
        .arg(hosts_file)
        .arg(env!("CARGO_BIN_EXE_wicket"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null());
    let edge = Spawned::start(&mut cmd, &dir.join("edge.log"), port, "wicket serve under unshare");
    (edge, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn rustix_is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `(status, body)` of a GET through the edge (a fresh client connection each time).
async fn get(edge: SocketAddr, path: &str) -> (u16, String) {
    let r = common::get(&format!("http://{edge}{path}"), &[]).await;
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// Polls `path` until it answers `want`; returns how long that took and every other answer seen.
async fn until(edge: SocketAddr, path: &str, want: &str, within: Duration) -> (Duration, Vec<(u16, String)>) {
    let t0 = Instant::now();
    let mut other = Vec::new();
    loop {
        let got = get(edge, path).await;
        if got == (200, want.to_string()) {
            return (t0.elapsed(), other);
        }
        other.push(got);
        assert!(t0.elapsed() < within, "{path} did not reach {want} within {within:?}: {other:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const ORIGIN_PATH: &str = "/account/page";
const CORE_PATH: &str = "/v1/events/e1/stock";

/// An origin and a core on 127.0.0.1 (`a`, `c`) and their moved copies on 127.0.0.2, the names pointing at
/// the first two, and an edge looking them up every `every_ms`, answered by the first two.
struct Moving {
    dir: tempfile::TempDir,
    a: Labeled,
    c: Labeled,
    _moved: [Labeled; 2],
    _edge: Spawned,
    addr: SocketAddr,
}

impl Moving {
    async fn start(every_ms: u64) -> Moving {
        let dir = tempfile::tempdir().unwrap();
        let (op, cp) = (port_on_both(), port_on_both());
        let a = label_server(Ipv4Addr::new(127, 0, 0, 1), op, "origin-a").await;
        let b = label_server(Ipv4Addr::new(127, 0, 0, 2), op, "origin-b").await;
        let c = label_server(Ipv4Addr::new(127, 0, 0, 1), cp, "core-a").await;
        let d = label_server(Ipv4Addr::new(127, 0, 0, 2), cp, "core-b").await;
        hosts(&dir.path().join("hosts"), "127.0.0.1", "127.0.0.1");
        let (edge, addr) = edge_with_hosts(dir.path(), &dir.path().join("hosts"), op, cp, every_ms);
        assert_eq!(get(addr, ORIGIN_PATH).await, (200, "origin-a".into()));
        assert_eq!(get(addr, CORE_PATH).await, (200, "core-a".into()));
        Moving { dir, a, c, _moved: [b, d], _edge: edge, addr }
    }

    /// Both names now point at 127.0.0.2.
    fn move_names(&self) {
        hosts(&self.dir.path().join("hosts"), "127.0.0.2", "127.0.0.2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_name_is_followed_at_the_interval_without_a_failed_request() {
    let m = Moving::start(500).await;
    let addr = m.addr;
    m.move_names();
    let (t_origin, other_o) = until(addr, ORIGIN_PATH, "origin-b", Duration::from_secs(5)).await;
    let (t_core, other_c) = until(addr, CORE_PATH, "core-b", Duration::from_secs(5)).await;
    eprintln!("followed: origin after {t_origin:?}, core after {t_core:?}");
    // Until the move is seen the old servers answer: no request fails.
    assert!(other_o.iter().all(|a| *a == (200, "origin-a".to_string())), "{other_o:?}");
    assert!(other_c.iter().all(|a| *a == (200, "core-a".to_string())), "{other_c:?}");
    // And it stays moved.
    for _ in 0..5 {
        assert_eq!(get(addr, ORIGIN_PATH).await, (200, "origin-b".into()));
        assert_eq!(get(addr, CORE_PATH).await, (200, "core-b".into()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_connect_has_the_name_looked_up_again_before_the_interval() {
    // An hour between lookups: only a failure makes the edge look again.
    let Moving { dir, a, c, _moved, _edge, addr } = Moving::start(3_600_000).await;
    // The containers are recreated elsewhere: the old ones are gone, the names point at the new ones.
    a.stop().await;
    c.stop().await;
    hosts(&dir.path().join("hosts"), "127.0.0.2", "127.0.0.2");
    let (t_origin, other_o) = until(addr, ORIGIN_PATH, "origin-b", Duration::from_secs(5)).await;
    let (t_core, other_c) = until(addr, CORE_PATH, "core-b", Duration::from_secs(5)).await;
    eprintln!("followed after failures: origin after {t_origin:?} ({} failed), core after {t_core:?} ({} failed)", other_o.len(), other_c.len());
    // What failed meanwhile failed as an upstream failure, never as anything else.
    for (s, b) in other_o.iter().chain(&other_c) {
        assert_eq!(*s, 502, "{b}");
    }
}
