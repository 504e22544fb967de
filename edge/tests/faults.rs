//! Faults between the edges and what they share (issue #41), with the real `wicket serve` binary: two
//! edges share room `r1` in one Redis, twenty fans join through both, and then
//!
//! - **an edge cut off from Redis** (the edge in a network namespace of its own; an nftables rule inside it
//!   drops every packet to Redis, silently, for 4 s): its fans are answered honestly meanwhile (their place,
//!   or a 503 with a JSON error — never another place), the other edge goes on, and after the heal every
//!   fan has the place it had and everybody is let in;
//! - **a spread room's edge cut off from every node of the Redis Cluster** the room is spread across: the
//!   same;
//! - **a clock jump of +30 s and then −30 s on one edge** (libfaketime, the wall clock only: an NTP step):
//!   places are kept, both edges keep answering, and everybody is let in.
//!
//! Root (network namespaces, nftables) and Debian's `faketime`, as in CI.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{ADMIN_TOKEN, Fan, SECRET, hs_tokens};
use wicket_testkit::{Netns, RedisCluster, RedisServer, Spawned, free_port};

/// One `wicket serve` sharing `r1` in the Redis at `store`, listening on `ip`.
struct Edge {
    _proc: Spawned,
    base: String,
}

fn config(dir: &Path, name: &str, ip: &str, port: u16, store: &str) -> std::path::PathBuf {
    let admin = free_port();
    // A store given as a TOML value (a cluster) is used as it is; a URL is quoted.
    let store = if store.starts_with('{') { store.to_string() } else { format!("\"{store}\"") };
    let layout = if store.starts_with('{') { "layout = \"spread\"\nspread = { block = 4, block-ms = 10, flush-ms = 20 }\n" } else { "" };
    let text = format!(
        "store = {store}\n[edge]\nlisten = \"{ip}:{port}\"\nadmin-listen = \"{ip}:{admin}\"\nadmin-token = \"{ADMIN_TOKEN}\"\n\
         secret = \"{SECRET}\"\nthreads = 2\nshutdown-grace-seconds = 1\n{}\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
         release = {{ mode = \"fixed\", rate = 2.0 }}\n{layout}",
        hs_tokens()
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Waits until `ip:port` accepts.
fn wait_up(edge: &mut Spawned, ip: &str, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect((ip, port)).is_err() {
        assert!(edge.exited().is_none(), "the edge exited: {}", edge.log_text());
        assert!(Instant::now() < deadline, "the edge did not start: {}", edge.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn edge_in_root(dir: &Path, name: &str, store: &str, env: &[(&str, &str)]) -> Edge {
    let port = free_port();
    let cfg = config(dir, name, "127.0.0.1", port, store);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_wicket"));
    cmd.args(["serve", "--config"]).arg(&cfg).envs(env.iter().copied()).stdout(std::process::Stdio::null());
    let mut proc = Spawned::spawn(&mut cmd, &dir.join(format!("{name}.log")), name);
    wait_up(&mut proc, "127.0.0.1", port);
    Edge { _proc: proc, base: format!("http://127.0.0.1:{port}") }
}

fn edge_in(ns: &Netns, dir: &Path, name: &str, store: &str) -> Edge {
    let port = free_port();
    let cfg = config(dir, name, "0.0.0.0", port, store);
    let mut cmd = ns.command(env!("CARGO_BIN_EXE_wicket"));
    cmd.args(["serve", "--config"]).arg(&cfg).stdout(std::process::Stdio::null());
    let mut proc = Spawned::spawn(&mut cmd, &dir.join(format!("{name}.log")), name);
    wait_up(&mut proc, ns.ip(), port);
    Edge { _proc: proc, base: format!("http://{}:{port}", ns.ip()) }
}

/// Twenty fans, joined alternately through `a` and `b`: each with the edge it uses and its place.
async fn join_twenty(a: &Edge, b: &Edge) -> Vec<(Fan, String, u64)> {
    let mut fans = Vec::new();
    for i in 0..20 {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        let mut fan = Fan::default();
        let r = fan.join(base, "r1").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = fan.status(base, "r1").await;
        let place = v["position"].as_u64().unwrap_or_else(|| panic!("a place: {v}"));
        fans.push((fan, base.clone(), place));
    }
    let mut places: Vec<u64> = fans.iter().map(|f| f.2).collect();
    places.sort();
    places.dedup();
    assert_eq!(places.len(), 20, "one place each");
    fans
}

/// Polls every fan at its edge until all are admitted (within `secs`); each status on the way must be
/// honest: the fan's own place, or a 503 with a JSON error.
async fn all_admitted(fans: &mut [(Fan, String, u64)], secs: u64) -> HashMap<String, usize> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut done = vec![false; fans.len()];
    while done.iter().any(|d| !d) {
        for (i, (fan, base, place)) in fans.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            let v = fan.status(base, "r1").await;
            honest(&v, *place);
            let state = v["state"].as_str().unwrap_or("error").to_string();
            *seen.entry(state.clone()).or_default() += 1;
            done[i] = state == "admitted";
        }
        assert!(Instant::now() < deadline, "not everybody admitted within {secs} s: {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// A status answer is the fan's own place (waiting or admitted), or an error with its JSON code.
fn honest(v: &serde_json::Value, place: u64) {
    match v["state"].as_str() {
        Some("waiting" | "admitted") => {
            if let Some(p) = v["position"].as_u64() {
                assert_eq!(p, place, "a fan's place changed: {v}");
            }
        }
        Some(other) => panic!("unexpected state {other}: {v}"),
        None => assert!(v["error"].is_string() && v["message"].is_string(), "neither a place nor an error: {v}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_cut_off_from_redis_keeps_every_place_and_everybody_is_let_in_after_the_heal() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Netns::new();
    let redis = RedisServer::start_with(&["--appendonly", "no", "--bind", "0.0.0.0"]);
    let a = edge_in(&ns, dir.path(), "a", &format!("redis://{}:{}/0", Netns::HOST_IP, redis.port()));
    let b = edge_in_root(dir.path(), "b", &redis.url(), &[]);
    let mut fans = join_twenty(&a, &b).await;

    ns.cut(redis.port());
    let during = poll_for(&mut fans, &a, Duration::from_secs(4)).await;
    ns.heal();
    eprintln!("while edge a was cut off from Redis: {during:?}");
    assert!(during.keys().any(|k| k.starts_with("b ")), "edge b answered nothing: {during:?}");
    // Edge b kept answering its fans with their places all along.
    assert!(!during.keys().any(|k| k.starts_with("b ") && !k.ends_with("waiting") && !k.ends_with("admitted")), "{during:?}");
    let seen = all_admitted(&mut fans, 40).await;
    eprintln!("after the heal: {seen:?}");
}

/// The same with a room spread across a Redis Cluster (`layout = "spread"`): edge a cut off from every
/// node of the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spread_room_edge_cut_off_from_the_cluster_keeps_every_place_and_everybody_is_let_in_after_the_heal() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Netns::new();
    let cluster = RedisCluster::start_announcing(3, Netns::HOST_IP);
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port()).collect();
    let seeds = |ip: &str| format!("{{ cluster = [{}] }}", ports.iter().map(|p| format!("\"redis://{ip}:{p}\"")).collect::<Vec<_>>().join(", "));
    let a = edge_in(&ns, dir.path(), "a", &seeds(Netns::HOST_IP));
    let b = edge_in_root(dir.path(), "b", &seeds("127.0.0.1"), &[]);
    let mut fans = join_twenty(&a, &b).await;

    ns.cut_ports(&ports);
    let during = poll_for(&mut fans, &a, Duration::from_secs(4)).await;
    ns.heal();
    eprintln!("while edge a was cut off from the cluster: {during:?}");
    assert!(during.keys().any(|k| k.starts_with("b ")), "edge b answered nothing: {during:?}");
    let seen = all_admitted(&mut fans, 40).await;
    eprintln!("after the heal: {seen:?}");
}

/// Polls every fan at its edge for `how_long`, each answer honest; counts the answers per edge and state.
async fn poll_for(fans: &mut [(Fan, String, u64)], a: &Edge, how_long: Duration) -> HashMap<String, usize> {
    let t = Instant::now();
    let mut during: HashMap<String, usize> = HashMap::new();
    while t.elapsed() < how_long {
        for (fan, base, place) in fans.iter_mut() {
            let v = fan.status(base, "r1").await;
            honest(&v, *place);
            let label = format!("{} {}", if *base == a.base { "a" } else { "b" }, v["state"].as_str().or(v["error"].as_str()).unwrap_or("?"));
            *during.entry(label).or_default() += 1;
        }
    }
    during
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_jump_on_one_edge_keeps_every_place_and_everybody_is_let_in() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let clock = dir.path().join("faketime");
    std::fs::write(&clock, "+0s\n").unwrap();
    let faketime = [
        ("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
        ("FAKETIME_TIMESTAMP_FILE", clock.to_str().unwrap()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ("FAKETIME_CACHE_DURATION", "1"),
    ];
    assert!(Path::new(faketime[0].1).exists(), "Debian's faketime package (libfaketime)");
    let a = edge_in_root(dir.path(), "a", &redis.url(), &faketime);
    let b = edge_in_root(dir.path(), "b", &redis.url(), &[]);
    let mut fans = join_twenty(&a, &b).await;
    let mut during: HashMap<String, usize> = HashMap::new();
    for jump in ["+30s", "-30s", "+0s"] {
        std::fs::write(&clock, format!("{jump}\n")).unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            for (fan, base, place) in fans.iter_mut() {
                let v = fan.status(base, "r1").await;
                honest(&v, *place);
                *during.entry(format!("{jump} {}", v["state"].as_str().or(v["error"].as_str()).unwrap_or("?"))).or_default() += 1;
            }
        }
    }
    eprintln!("through the jumps: {during:?}");
    let seen = all_admitted(&mut fans, 40).await;
    eprintln!("after: {seen:?}");
}
