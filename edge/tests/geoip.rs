//! `[edge.geoip]` end to end: the real `wicket` binary with a MaxMind database written by the test
//! (`wicket_testkit::mmdb`), clients in different "countries" (loopback source addresses
//! `127.x.y.z` the database places, and IPv6 or IPv4-mapped addresses in `X-Forwarded-For` from a
//! trusted proxy): a limit by country, a block by ASN, a challenge by country, the regional
//! anomaly rule tripping on a jump, acting and clearing, a SIGHUP reload changing the answer (and
//! a bad file keeping the old database), and `check-config` naming bad databases and rules by path.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use wicket_testkit::Spawned;
use wicket_testkit::mmdb::Mmdb;

const TOKEN: &str = "geoip-admin-token-0123456789";

/// The test's world: DE, FR, GB, JP and a network (AS64666) in the US, all on loopback; 127.0.x.x
/// is in no network (the region `unknown`); 2001:db8::/32 is AS64666 too.
fn world() -> Mmdb {
    Mmdb::new("Wicket-Test-Country-ASN")
        .network("127.1.0.0/16", Some("DE"), Some(64500))
        .network("127.2.0.0/16", Some("FR"), Some(64501))
        .network("127.3.0.0/16", Some("US"), Some(64666))
        .network("127.4.0.0/16", Some("JP"), Some(64502))
        .network("127.5.0.0/16", Some("GB"), Some(64503))
        .network("127.6.0.0/16", Some("CA"), Some(64504))
        .network("2001:db8::/32", Some("US"), Some(64666))
}

struct Edge {
    addr: SocketAddr,
    admin: u16,
    child: Spawned,
    dir: tempfile::TempDir,
}

impl Edge {
    /// The binary with `[edge.geoip]` = `geoip` (the database written beside the config as
    /// `geo.mmdb` first), an origin, and 127.9.0.0/16 as the trusted proxies.
    async fn start(db: &Mmdb, geoip: &str) -> (Edge, TestUpstream) {
        let origin = TestUpstream::start("origin").await;
        let dir = tempfile::tempdir().unwrap();
        db.write(&dir.path().join("geo.mmdb"));
        std::fs::create_dir_all(dir.path().join("site")).unwrap();
        std::fs::write(dir.path().join("site/index.html"), "<h1>sale</h1>").unwrap();
        let (port, admin) = (free_port(), free_port());
        let cfg = dir.path().join("wicket.toml");
        std::fs::write(
            &cfg,
            format!(
                "[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin}\"\nadmin-token = \"{TOKEN}\"\n\
                 secret = \"geoip-test-secret-0123456789abcdef\"\nsite-dir = \"site\"\norigin = \"{}\"\nthreads = 2\n\
                 shutdown-grace-seconds = 1\nprune-seconds = 1\ntrusted-proxies = [\"127.9.0.0/16\"]\n\
                 [edge.anomaly]\nclient-max-rejects = 0\n{geoip}\n",
                origin.url()
            ),
        )
        .unwrap();
        let log = dir.path().join("stderr.log");
        let child = Spawned::start(Command::new(env!("CARGO_BIN_EXE_wicket")).args(["serve", "--config"]).arg(&cfg), &log, admin, "the edge");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "the edge did not listen: {}", child.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        (Edge { addr, admin, child, dir }, origin)
    }

    /// `GET path` from the source address `from` (a loopback address), with extra header lines.
    async fn get_from(&self, from: &str, path: &str, extra: &str) -> RawResp {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(from.parse().unwrap(), 0)).unwrap();
        let mut s = socket.connect(self.addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: shop.test\r\nAccept: application/json\r\nUser-Agent: fan\r\nAccept-Language: en\r\n{extra}Connection: close\r\n\r\n");
        tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes()).await.unwrap();
        read_answer(&mut s).await.unwrap_or_else(|| panic!("no answer to {path} from {from}"))
    }

    async fn admin(&self, path: &str) -> Resp {
        get(&format!("http://127.0.0.1:{}{path}", self.admin), &[("authorization", &format!("Bearer {TOKEN}"))]).await
    }

    async fn metrics(&self) -> String {
        self.admin("/metrics").await.text()
    }
}

/// The value of the metric line starting with `series` (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

fn refusal(r: &RawResp, status: u16, error: &str) {
    assert_eq!(r.status, status, "{}\n{}", r.head, r.text());
    let v = r.json();
    assert_eq!(v["error"], error, "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_limit_by_country_block_by_asn_and_challenge_by_country() {
    let (edge, origin) = Edge::start(
        &world(),
        "[edge.geoip]\ndatabase = \"geo.mmdb\"\n\
         [[edge.geoip.rules]]\ncountry = \"DE\"\naction = \"limit\"\nrate = \"1r/m\"\nburst = 2\nnodelay = true\n\
         [[edge.geoip.rules]]\nasn = 64666\naction = \"block\"\n\
         [[edge.geoip.rules]]\ncountry = \"FR\"\naction = \"challenge\"\npath = \"/events/\"\n",
    )
    .await;
    // DE shares one budget (burst 2: three requests), whichever of its addresses asks, files and
    // the origin alike; then 429 with Retry-After. Other countries are untouched.
    for from in ["127.1.0.1", "127.1.0.2", "127.1.7.7"] {
        assert_eq!(edge.get_from(from, "/", "").await.status, 200, "{from}");
    }
    let r = edge.get_from("127.1.9.9", "/events/1", "").await;
    refusal(&r, 429, "rate_limited");
    assert!(r.head.contains("retry-after: "), "{}", r.head);
    assert_eq!(edge.get_from("127.6.0.1", "/events/1", "").await.status, 200, "CA has no rule");
    assert_eq!(edge.get_from("127.0.0.1", "/", "").await.status, 200, "unknown has no rule");

    // AS64666 is blocked: over IPv4, and over IPv6 and IPv4-mapped IPv6 from the trusted proxy.
    refusal(&edge.get_from("127.3.0.9", "/", "").await, 403, "forbidden");
    refusal(&edge.get_from("127.3.0.9", "/events/1", "").await, 403, "forbidden");
    refusal(&edge.get_from("127.9.0.1", "/events/1", "X-Forwarded-For: 2001:db8:5::7\r\n").await, 403, "forbidden");
    refusal(&edge.get_from("127.9.0.1", "/events/1", "X-Forwarded-For: ::ffff:127.3.1.1\r\n").await, 403, "forbidden");
    // X-Forwarded-For from a peer that is not a trusted proxy is not believed: CA stays CA.
    assert_eq!(edge.get_from("127.6.0.2", "/events/1", "X-Forwarded-For: 127.3.0.9\r\n").await.status, 200);
    // ... and a trusted proxy speaking for a CA client is let through.
    assert_eq!(edge.get_from("127.9.0.1", "/events/1", "X-Forwarded-For: 127.6.0.3\r\n").await.status, 200);

    // FR is challenged on /events/ (the route bot check), not elsewhere.
    let r = edge.get_from("127.2.0.1", "/events/1", "").await;
    refusal(&r, 403, "forbidden");
    assert!(r.text().contains("bot check"), "{}", r.text());
    assert_eq!(edge.get_from("127.2.0.1", "/", "").await.status, 200);
    let before = origin.hits.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(edge.get_from("127.2.0.1", "/about", "").await.status, 200);
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::SeqCst), before + 1);

    let m = edge.metrics().await;
    assert_eq!(metric(&m, "wicket_edge_geoip_actions_total{action=\"limit\",source=\"rule\"}"), 1.0, "{m}");
    assert_eq!(metric(&m, "wicket_edge_geoip_actions_total{action=\"block\",source=\"rule\"}"), 4.0, "{m}");
    assert_eq!(metric(&m, "wicket_edge_geoip_actions_total{action=\"challenge\",source=\"rule\"}"), 1.0, "{m}");
    drop(edge);
}

/// The regional anomaly rule with `action`, end to end: five windows of usual traffic (GB about
/// 10 arrivals a second, JP 2, DE 1), then JP floods; once the window closes JP's requests for
/// `probe` get `acted` (status and error) while GB's are served; JP back to its trickle is served
/// again once the hold has passed.
async fn a_jump_is_acted_on_and_cleared(action: &str, probe: &str, acted: (u16, &str)) {
    let (edge, _origin) = Edge::start(
        &world(),
        &format!(
            "[edge.geoip]\ndatabase = \"geo.mmdb\"\nmetric-regions = 2\n\
             [edge.geoip.anomaly]\nwindow-seconds = 1\nbaseline-windows = 3\nthreshold = 3.0\nmin-share = 0.5\n\
             min-arrivals = 20\naction = \"{action}\"\nhold-seconds = 2\nslow-rate = \"1r/m\"\nslow-burst = 0\n"
        ),
    )
    .await;
    let learn_until = Instant::now() + Duration::from_millis(5200);
    let mut i = 0u32;
    while Instant::now() < learn_until {
        assert_eq!(edge.get_from("127.5.0.1", "/", "").await.status, 200);
        if i % 5 == 0 {
            assert_eq!(edge.get_from("127.4.0.1", probe, "").await.status, 200);
        }
        if i % 10 == 0 {
            assert_eq!(edge.get_from("127.1.0.1", "/", "").await.status, 200);
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let v = edge.admin("/admin/geoip").await.json();
    assert!(v["windows_seen"].as_u64().unwrap() >= 4, "{v}");
    assert!(v["regions"].as_array().unwrap().iter().all(|r| r["abnormal_seconds"] == 0), "{v}");
    // The jump: JP floods from many of its addresses, GB carries on.
    let jump = Instant::now();
    // At once (a loaded machine would spread a sequential flood over several 1-s windows), in four waves.
    for wave in 0..4 {
        let addrs: Vec<String> = (wave * 30..wave * 30 + 30).map(|n| format!("127.4.{}.{}", n / 200 + 1, n % 200 + 1)).collect();
        futures::future::join_all(addrs.iter().map(|a| edge.get_from(a, "/", ""))).await;
    }
    let refused = loop {
        assert!(jump.elapsed() < Duration::from_secs(8), "JP was never acted on: {}", edge.admin("/admin/geoip").await.text());
        assert_eq!(edge.get_from("127.5.0.1", probe, "").await.status, 200, "GB is served throughout");
        let r = edge.get_from("127.4.0.1", probe, "").await;
        if r.status != 200 {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    refusal(&refused, acted.0, acted.1);
    let v = edge.admin("/admin/geoip").await.json();
    let jp = v["regions"].as_array().unwrap().iter().find(|r| r["region"] == "JP").cloned().unwrap_or_default();
    assert!(jp["abnormal_seconds"].as_u64().is_some_and(|s| s > 0), "{v}");
    let m = edge.metrics().await;
    assert_eq!(metric(&m, "wicket_edge_anomalies_total{rule=\"region_share\"}"), 1.0, "{m}");
    assert!(metric(&m, &format!("wicket_edge_geoip_actions_total{{action=\"{action}\",source=\"anomaly\"}}")) >= 1.0, "{m}");
    assert_eq!(metric(&m, "wicket_edge_geoip_abnormal_regions"), 1.0, "{m}");
    // Bounded labels: the two largest regions of the last window, the rest as `other`.
    let regions: Vec<&str> = m.lines().filter(|l| l.starts_with("wicket_edge_geoip_arrivals{")).collect();
    assert!((1..=3).contains(&regions.len()), "{regions:?}");
    // JP back to its usual trickle: acted on until the hold (2 s after the last abnormal window)
    // has passed, then served again.
    let calm = Instant::now();
    let cleared = loop {
        assert!(calm.elapsed() < Duration::from_secs(10), "JP was never let back in");
        assert_eq!(edge.get_from("127.5.0.1", "/", "").await.status, 200);
        if edge.get_from("127.4.0.1", probe, "").await.status == 200 {
            break calm.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(cleared >= Duration::from_millis(900), "cleared after {cleared:?}: sooner than the hold");
    // The gauge is set when a window closes: at most a window after the hold ended.
    let gauge = Instant::now();
    while metric(&edge.metrics().await, "wicket_edge_geoip_abnormal_regions") != 0.0 {
        assert!(gauge.elapsed() < Duration::from_secs(3), "the abnormal-regions gauge stayed up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regions_jump_in_share_is_blocked_then_cleared() {
    a_jump_is_acted_on_and_cleared("block", "/", (403, "forbidden")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regions_jump_in_share_is_challenged_then_cleared() {
    // The bot check (proof of work): not on files, so the probe is a page of the origin.
    a_jump_is_acted_on_and_cleared("challenge", "/events/1", (403, "forbidden")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regions_jump_in_share_is_slowed_then_cleared() {
    // 1r/m without burst per client: the first request after the trip may pass, the next is 429.
    a_jump_is_acted_on_and_cleared("slow", "/events/1", (429, "rate_limited")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_database_and_a_bad_file_keeps_the_old_one() {
    let (edge, _origin) = Edge::start(&world(), "[edge.geoip]\ndatabase = \"geo.mmdb\"\n[[edge.geoip.rules]]\nasn = 64666\naction = \"block\"\n").await;
    assert_eq!(edge.get_from("127.6.0.1", "/", "").await.status, 200, "CA is AS64504");
    // The operator's new database moves 127.6.0.0/16 into AS64666.
    world().network("127.6.0.0/16", Some("CA"), Some(64666)).write(&edge.dir.path().join("geo.mmdb"));
    let hup = || assert!(Command::new("kill").args(["-HUP", &edge.child.id().to_string()]).status().unwrap().success());
    hup();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = edge.get_from("127.6.0.1", "/", "").await;
        if r.status == 403 {
            refusal(&r, 403, "forbidden");
            break;
        }
        assert!(Instant::now() < deadline, "the reload did not change the answer: {}", edge.child.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A broken file: the old database stays, and the log names the file.
    std::fs::write(edge.dir.path().join("geo.mmdb"), b"not a database").unwrap();
    hup();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !edge.child.log_text().contains("GeoIP databases not reloaded") {
        assert!(Instant::now() < deadline, "{}", edge.child.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = edge.child.log_text();
    assert!(log.contains("edge.geoip.database") && log.contains("geo.mmdb"), "{log}");
    assert_eq!(edge.get_from("127.6.0.1", "/", "").await.status, 403, "the old database still answers");
    assert_eq!(edge.get_from("127.1.0.1", "/", "").await.status, 200);
    let m = edge.metrics().await;
    assert_eq!(metric(&m, "wicket_edge_geoip_reloads_total{outcome=\"ok\"}"), 1.0, "{m}");
    assert_eq!(metric(&m, "wicket_edge_geoip_reloads_total{outcome=\"failed\"}"), 1.0, "{m}");
}

/// `wicket check-config` on a config beside `geo.mmdb` = `db` (None: no file): exit code, stderr.
fn check_config(dir: &Path, db: Option<&[u8]>, geoip: &str) -> (Option<i32>, String) {
    let path = dir.join("geo.mmdb");
    let _ = std::fs::remove_file(&path);
    if let Some(bytes) = db {
        std::fs::write(&path, bytes).unwrap();
    }
    let cfg = dir.join("wicket.toml");
    std::fs::write(&cfg, format!("admin-token = \"{TOKEN}\"\n[edge]\n{geoip}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wicket")).arg("check-config").arg(&cfg).output().unwrap();
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn check_config_names_bad_databases_and_rules_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let good = world().bytes();
    let base = "[edge.geoip]\ndatabase = \"geo.mmdb\"\n";
    let (code, out) = check_config(dir.path(), Some(&good), base);
    assert_eq!(code, Some(0), "{out}");

    let (code, out) = check_config(dir.path(), None, base);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("edge.geoip.database") && out.contains("geo.mmdb") && out.contains("cannot read"), "{out}");
    let (code, out) = check_config(dir.path(), Some(b"GIF89a not a database at all"), base);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("edge.geoip.database") && out.contains("not a MaxMind DB file"), "{out}");
    // Cut short: the tree is longer than what is left.
    let marker = good.windows(14).rposition(|w| w == b"\xab\xcd\xefMaxMind.com").unwrap();
    let (code, out) = check_config(dir.path(), Some(&[&good[..20], &good[marker..]].concat()), base);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("edge.geoip.database") && out.contains("truncated or corrupt"), "{out}");
    // Huge (sparse: no disk used).
    let (_, _) = check_config(dir.path(), None, base);
    let f = std::fs::File::create(dir.path().join("huge.mmdb")).unwrap();
    f.set_len(wicket_edge::geoip::MAX_DATABASE_BYTES + 1).unwrap();
    std::fs::write(dir.path().join("geo.mmdb"), &good).unwrap();
    let cfg = dir.path().join("wicket.toml");
    std::fs::write(&cfg, format!("admin-token = \"{TOKEN}\"\n[edge.geoip]\ndatabase = \"geo.mmdb\"\nasn-database = \"huge.mmdb\"\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wicket")).arg("check-config").arg(&cfg).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("edge.geoip.asn-database") && text.contains("huge.mmdb") && text.contains("more than"), "{text}");

    let (code, out) = check_config(
        dir.path(),
        Some(&good),
        "[edge.geoip]\ndatabase = \"geo.mmdb\"\nmetric-regions = 0\n\
         [[edge.geoip.rules]]\ncountry = \"DE\"\naction = \"block\"\n\
         [[edge.geoip.rules]]\nasn = 64666\naction = \"limit\"\nrate = \"5r/h\"\n\
         [[edge.geoip.rules]]\ncountry = \"de\"\naction = \"challenge\"\n\
         [[edge.geoip.rules]]\ncountry = \"FR\"\nasn = 1\naction = \"block\"\n\
         [[edge.geoip.rules]]\ncountry = \"FR\"\naction = \"block\"\nrate = \"1r/s\"\npath = \"/a//b\"\n\
         [[edge.geoip.rules]]\ncountry = \"FR\"\naction = \"limit\"\n\
         [edge.geoip.anomaly]\nthreshold = 0.5\nmin-share = 2.0\nslow-rate = \"fast\"\naction = \"slow\"\n",
    );
    assert_eq!(code, Some(2), "{out}");
    for path in [
        "edge.geoip.metric-regions",
        "edge.geoip.rules[1].rate",
        "edge.geoip.rules[2].country",
        "edge.geoip.rules[3]:",
        "edge.geoip.rules[4].rate",
        "edge.geoip.rules[4].path",
        "edge.geoip.rules[5].rate",
        "edge.geoip.anomaly.threshold",
        "edge.geoip.anomaly.min-share",
        "edge.geoip.anomaly.slow-rate",
    ] {
        assert!(out.contains(path), "{path} missing:\n{out}");
    }
    assert!(!out.contains("rules[0]"), "{out}");
    // An unknown key is named too (serde).
    let (code, out) = check_config(dir.path(), Some(&good), "[edge.geoip]\ndatabase = \"geo.mmdb\"\n[[edge.geoip.rules]]\ncountry = \"DE\"\naction = \"ban\"\n");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("edge.geoip.rules") && out.contains("ban"), "{out}");
}
