//! HTTPS at the front door (`[edge.tls]`), tried with real clients: curl over HTTP/2 and
//! HTTP/1.1, certificates from a test CA made here with the `openssl` command, SNI, the plaintext
//! redirect, HSTS and `Secure` cookies, reloads (good and broken files), and hostile handshakes.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use wicket_testkit::pki::{Pki, curl, resolve};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_speaks_h2_and_h1_picks_the_certificate_by_sni_and_marks_everything_secure() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test", "*.a.test"], 30);
    let b = pki.leaf("b", &["b.test"], 30);
    let origin = TestUpstream::start("origin").await;
    let port = free_port();
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n{}",
        origin.url(),
        tls_config(port, &[a, b], "hsts-seconds = 31536000\nredirect-http = true\nhandshake-timeout-ms = 600")
    ));
    let ca = pki.path("ca.pem");
    for (name, flag, version) in [("a.test", "--http2", "2"), ("a.test", "--http1.1", "1.1"), ("b.test", "--http2", "2"), ("www.a.test", "--http2", "2")] {
        // The static detail page (answered by the edge) and a page of the origin (proxied).
        let url = format!("https://{name}:{port}/");
        let (code, v, headers, body) = curl(&ca, &url, &[flag, "--resolve", &resolve(name, port)]).unwrap_or_else(|e| panic!("{name} {flag}: curl exit {e}"));
        assert_eq!((code, v.as_str()), (200, version), "{name} {flag}");
        assert!(body.contains("Prehistoric park"), "{body}");
        assert!(headers.contains("strict-transport-security: max-age=31536000"), "{headers}");
        let url = format!("https://{name}:{port}/events/1");
        let (code, _, headers, body) = curl(&ca, &url, &[flag, "--resolve", &resolve(name, port)]).unwrap();
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("\"upstream\":\"origin\""), "{body}");
        // The origin is told the host the client named (over h2: its `:authority`).
        assert!(body.contains(&format!("\"host\":\"{name}:{port}\"")), "{name} {flag}: {body}");
        assert!(headers.contains("strict-transport-security: max-age=31536000"), "{headers}");
        let cookie = headers.lines().find(|l| l.starts_with("set-cookie: wicket_d=")).unwrap_or_else(|| panic!("{headers}"));
        assert!(cookie.contains("; secure"), "{cookie}");
    }
    // A name no certificate has: the default (a.test) is served, which a checking client refuses.
    assert_eq!(curl(&ca, &format!("https://c.test:{port}/"), &["--resolve", &resolve("c.test", port)]), Err(60));
    // Plain HTTP is sent to HTTPS (same host, the TLS port, path and query), ACME challenges are not.
    let r = raw(edge.addr, format!("GET /events/1?x=2 HTTP/1.1\r\nHost: a.test:{}\r\n\r\n", edge.addr.port()).as_bytes()).await.unwrap();
    assert_eq!(r.status, 308, "{}", r.head);
    assert!(r.head.contains(&format!("location: https://a.test:{port}/events/1?x=2")), "{}", r.head);
    let r = raw(edge.addr, b"GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: a.test\r\n\r\n").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.head);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_room_works_over_h2_queue_status_events_and_the_protected_path() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let origin = TestUpstream::start("origin").await;
    let port = free_port();
    let _edge = TestEdge::start(&format!(
        "origin = \"{}\"\nuser-header = \"x-user-id\"\n{}\n\
         [tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\nrelease = {{ mode = \"fixed\", rate = 1000.0 }}\n",
        origin.url(),
        tls_config(port, &[a], "")
    ));
    let ca = pki.path("ca.pem");
    let jar = tempfile::tempdir().unwrap();
    let jar = jar.path().join("jar");
    let jar = jar.to_str().unwrap();
    let base = format!("https://a.test:{port}");
    let rs = resolve("a.test", port);
    let common = ["--http2", "--resolve", &rs, "-b", jar, "-c", jar, "-H", "x-user-id: hana", "-H", "accept: application/json"];
    let (code, v, _, body) = curl(&ca, &format!("{base}/buy/ev-1"), &common).unwrap();
    assert_eq!((code, v.as_str()), (403, "2"), "not admitted yet: {body}");
    let (code, _, _, body) = curl(&ca, &format!("{base}/queue/r1"), &common).unwrap();
    assert_eq!(code, 200, "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _, _, body) = curl(&ca, &format!("{base}/queue/r1/status"), &common).unwrap();
        assert_eq!(code, 200, "{body}");
        if body.contains("\"admitted\"") {
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, _, _, body) = curl(&ca, &format!("{base}/queue/r1/events"), &[&common[..], &["-N", "--max-time", "3"]].concat()).unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("data: "), "{body}");
    let (code, _, _, body) = curl(&ca, &format!("{base}/buy/ev-1"), &common).unwrap();
    assert_eq!(code, 200, "admitted over h2: {body}");
    assert!(body.contains("\"wicket-user\":\"hana\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_reload_and_a_broken_file_keeps_the_old_ones() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let port = free_port();
    let edge = TestEdge::start(&tls_config(port, std::slice::from_ref(&a), ""));
    let ca = pki.path("ca.pem");
    let rs = resolve("a.test", port);
    let url = format!("https://a.test:{port}/");
    assert_eq!(curl(&ca, &url, &["--resolve", &rs]).unwrap().0, 200);
    let before = edge.admin("GET", "/admin/tls", "").await.json();
    // A renewed certificate (another expiry) in the same files.
    pki.leaf("a", &["a.test"], 60);
    let r = edge.admin("POST", "/admin/tls/reload", "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let after = edge.admin("GET", "/admin/tls", "").await.json();
    assert_ne!(before["certificates"][0]["not_after"], after["certificates"][0]["not_after"], "{before} {after}");
    assert_eq!(curl(&ca, &url, &["--resolve", &rs]).unwrap().0, 200);
    // A broken file: 422 naming it; the served certificate does not change.
    std::fs::write(&a.0, "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n").unwrap();
    let r = edge.admin("POST", "/admin/tls/reload", "").await;
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json()["error"], "tls_reload_failed");
    assert!(r.json()["message"].as_str().unwrap().contains("cert-file"), "{}", r.text());
    assert_eq!(edge.admin("GET", "/admin/tls", "").await.json(), after);
    assert_eq!(curl(&ca, &url, &["--resolve", &rs]).unwrap().0, 200);
    // An expired certificate is refused too.
    pki.leaf("a", &["a.test"], -1);
    let r = edge.admin("POST", "/admin/tls/reload", "").await;
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("expired"), "{}", r.text());
    // Without [edge.tls] the routes say so.
    let plain = TestEdge::start("");
    assert_eq!(plain.admin("POST", "/admin/tls/reload", "").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_handshakes_that_never_finish_are_closed_and_others_are_served() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let port = free_port();
    let edge = TestEdge::start(&tls_config(port, &[a], "handshake-timeout-ms = 500"));
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // The count of one reject reason, with the metrics text it was read from.
    let admin = &edge;
    let rejects = move |reason: &'static str| async move {
        let m = String::from_utf8_lossy(&admin.admin("GET", "/metrics", "").await.body).into_owned();
        let prefix = format!("wicket_edge_rejects_total{{reason=\"{reason}\"}} ");
        let line = m.lines().find(|l| l.starts_with(&prefix)).map(str::to_owned);
        (line.and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).unwrap_or(0), m)
    };
    let failed = || rejects("tls_handshake_failed");
    let no_hello = || async { rejects("tls_no_hello").await.0 };
    // A bare TCP connect closed at once (the start's readiness probe, a load balancer's health
    // check) is no failed handshake: counted apart, as `tls_no_hello`.
    let failed_before = failed().await.0;
    let probes_before = no_hello().await;
    drop(tokio::net::TcpStream::connect(addr).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    while no_hello().await <= probes_before {
        assert!(Instant::now() < deadline, "a bare connect was not counted as tls_no_hello");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Plain HTTP on the TLS port: closed, no answer in HTTP.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "not closed");
    assert!(!buf.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&buf));
    // 50 connections that never start (or never finish) a handshake.
    let mut stalled = Vec::new();
    for i in 0..50 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        if i % 2 == 0 {
            // The first bytes of a ClientHello record, then nothing.
            s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await.unwrap();
        }
        stalled.push(s);
    }
    // Others are served meanwhile.
    let ca = pki.path("ca.pem");
    let rs = resolve("a.test", port);
    assert_eq!(curl(&ca, &format!("https://a.test:{port}/"), &["--resolve", &rs]).unwrap().0, 200);
    // Every stalled one is closed after the handshake timeout.
    let started = Instant::now();
    for s in &mut stalled {
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "a stalled handshake was not closed: {r:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    // Counted (not logged above DEBUG): the plain-HTTP one failed, the 50 stalled ones timed out.
    // (A connection's close can reach the client just before its count is made: waited for.)
    let deadline = Instant::now() + Duration::from_secs(2);
    while rejects("tls_handshake_timeout").await.0 < 50 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (failed_after, m) = failed().await;
    assert_eq!(failed_after - failed_before, 1, "{m}");
    assert!(m.contains("wicket_edge_rejects_total{reason=\"tls_handshake_timeout\"} 50\n"), "{m}");
}

/// `wicket check-config` of an edge with these certificate pairs and `[edge.tls]` lines: its exit
/// code and what it printed.
fn check_config(pairs: &[(std::path::PathBuf, std::path::PathBuf)], extra: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("wicket.toml");
    std::fs::write(&cfg, format!("[edge]\nsecret = \"{SECRET}\"\n{}", tls_config(8443, pairs, extra))).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wicket")).arg("check-config").arg(&cfg).output().unwrap();
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn check_config_names_each_broken_certificate() {
    let pki = Pki::new();
    let good = pki.leaf("good", &["a.test"], 30);
    let expired = pki.leaf("old", &["a.test"], -1);
    let other = pki.leaf("other", &["b.test"], 30);
    let dir = tempfile::tempdir().unwrap();
    let pairs = [good.clone(), expired, (good.0.clone(), other.1), (dir.path().join("missing.pem"), good.1.clone())];
    let (code, text) = check_config(&pairs, "hsts-seconds = 999999999");
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("edge.tls.certs[1].cert-file") && text.contains("expired"), "{text}");
    assert!(text.contains("edge.tls.certs[2].key-file") && text.contains("is not the key of"), "{text}");
    assert!(text.contains("edge.tls.certs[3].cert-file") && text.contains("cannot read"), "{text}");
    assert!(text.contains("edge.tls.hsts-seconds"), "{text}");
    assert!(!text.contains("certs[0]"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_origin_is_verified_with_its_ca_and_a_wrong_certificate_is_a_502() {
    let pki = Pki::new();
    let localhost = pki.leaf("localhost", &["localhost"], 30);
    // The origin: another edge serving a page over HTTPS.
    let origin_port = free_port();
    let origin = TestEdge::start_with_files(&tls_config(origin_port, &[localhost], ""), &[("only-on-origin.html", b"<p>from the https origin</p>")]);
    let ca = pki.path("ca.pem");
    let edge = TestEdge::start(&format!("origin = \"https://localhost:{origin_port}\"\norigin-ca-file = \"{}\"", ca.display()));
    let r = get(&edge.url("/only-on-origin.html"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("from the https origin"), "{}", r.text());
    // Verified against another CA: refused, never a silent pass.
    let other = Pki::new();
    let wrong = TestEdge::start(&format!("origin = \"https://localhost:{origin_port}\"\norigin-ca-file = \"{}\"", other.path("ca.pem").display()));
    let r = get(&wrong.url("/only-on-origin.html"), &[]).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["error"], "unavailable");
    // A name the certificate does not have: refused too.
    let misnamed = TestEdge::start(&format!("origin = \"https://127.0.0.1:{origin_port}\"\norigin-ca-file = \"{}\"", ca.display()));
    assert_eq!(get(&misnamed.url("/only-on-origin.html"), &[]).await.status, 502);
    drop(origin);
}

/// `edge/examples/https.toml` is a config `wicket check-config` accepts once its certificate
/// files exist (here: test ones in their place).
#[test]
fn the_https_example_config_passes_check_config() {
    let pki = Pki::new();
    let one = pki.leaf("one", &["tickets.example.com"], 30);
    let two = pki.leaf("two", &["example.com", "*.example.com"], 30);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let text = std::fs::read_to_string(examples.join("https.toml")).unwrap();
    let text = text
        .replace("/etc/letsencrypt/live/tickets.example.com/fullchain.pem", one.0.to_str().unwrap())
        .replace("/etc/letsencrypt/live/tickets.example.com/privkey.pem", one.1.to_str().unwrap())
        .replace("/etc/letsencrypt/live/example.com/fullchain.pem", two.0.to_str().unwrap())
        .replace("/etc/letsencrypt/live/example.com/privkey.pem", two.1.to_str().unwrap());
    let cfg = examples.join(format!("https-test-{}.toml", std::process::id()));
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wicket")).arg("check-config").arg(&cfg).env("WICKET_SECRET", SECRET).output().unwrap();
    std::fs::remove_file(&cfg).unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
}

/// SIGHUP reloads the certificates of a running `wicket serve` (a renewal by certbot's hook).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_certificates_of_a_running_edge() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let dir = tempfile::tempdir().unwrap();
    let (port, admin, tls_port) = (free_port(), free_port(), free_port());
    let cfg = dir.path().join("wicket.toml");
    std::fs::write(
        &cfg,
        format!(
            "admin-token = \"{ADMIN_TOKEN}\"\n[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin}\"\nsecret = \"{SECRET}\"\n{}",
            tls_config(tls_port, &[a], "")
        ),
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    let child = wicket_testkit::Spawned::start(
        Command::new(env!("CARGO_BIN_EXE_wicket")).args(["serve", "--config"]).arg(&cfg),
        &log,
        admin,
        "the edge",
    );
    let admin_url = format!("http://127.0.0.1:{admin}/admin/tls");
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let before = request("GET", &admin_url, &[("authorization", &auth)], b"").await.json();
    pki.leaf("a", &["a.test"], 90);
    assert!(Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = request("GET", &admin_url, &[("authorization", &auth)], b"").await.json();
        if now["certificates"][0]["not_after"] != before["certificates"][0]["not_after"] {
            break;
        }
        assert!(Instant::now() < deadline, "SIGHUP did not reload: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ca = pki.path("ca.pem");
    assert_eq!(curl(&ca, &format!("https://a.test:{tls_port}/healthz-missing"), &["--resolve", &resolve("a.test", tls_port)]).unwrap().0, 502);
    drop(child);
    // Each listener was named at start, the HTTPS one too.
    let log = std::fs::read_to_string(&log).unwrap();
    for line in [format!("listening on 127.0.0.1:{port} (public HTTP)"), format!("listening on 127.0.0.1:{tls_port} (public HTTPS)")] {
        assert_eq!(log.matches(&line).count(), 1, "{line}: {log}");
    }
}

/// A core on another host with `[tls]` (here: `wicket_core::run` in this process): the edge reaches it as
/// `core = "https://localhost:<port>"`, verifies its certificate against `origin-ca-file`, and forwards a
/// fan's reads and holds over TLS; verified against another CA, the answer is a 502, never a silent pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_over_https_is_verified_with_its_ca_and_a_wrong_certificate_is_a_502() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("core", &["localhost"], 30);
    let text = format!(
        "admin-token = \"{ADMIN_TOKEN}\"\nstore = \"memory\"\n[payment]\ncallback-secret = \"callback-secret-0123456789\"\n\
         [tokens]\nissuer = \"wicket\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
         [tls]\ncert-file = \"{}\"\nkey-file = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let cfg = wicket_core::config::CoreConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    // An embedded core is reached over loopback in plain HTTP: `[tls]` there is refused, by its key.
    let err = wicket_edge::server::EmbeddedCore::start(cfg.clone()).err().expect("an embedded core with [tls] is refused");
    assert!(err.to_string().starts_with("tls: "), "{err}");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let core_port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let core = tokio::spawn(wicket_core::run(cfg, listener, async move {
        let _ = stopped.await;
    }));
    let ca = pki.path("ca.pem");
    // An event, put straight at the core (its admin API is not on the edge).
    let now = time::OffsetDateTime::now_utc();
    let fmt = &time::format_description::well_known::Rfc3339;
    let event = serde_json::json!({
        "name": "Park over TLS", "hold_seconds": 900,
        "opens_at": (now - time::Duration::hours(1)).format(fmt).unwrap(),
        "closes_at": (now + time::Duration::days(1)).format(fmt).unwrap(),
        "pools": [{"id": "park", "capacity": 10}],
        "skus": [{"id": "park", "pools": ["park"], "price_cents": 100}],
    })
    .to_string();
    let admin = format!("authorization: Bearer {ADMIN_TOKEN}");
    let put = ["-X", "PUT", "-H", &admin, "-H", "content-type: application/json", "-d", &event];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match curl(&ca, &format!("https://localhost:{core_port}/v1/events/ev-1"), &put) {
            Ok((code, _, _, body)) => {
                assert_eq!(code, 201, "{body}");
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "the core did not start: curl exit {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let edge = TestEdge::start(&format!(
        "core = \"https://localhost:{core_port}\"\norigin-ca-file = \"{}\"\n\
         [tokens]\nissuer = \"wicket\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n",
        ca.display()
    ));
    let r = get(&edge.url("/v1/events/ev-1"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["name"], "Park over TLS", "{}", r.text());
    // A hold with an admission token, forwarded over the same TLS.
    let token = mint_token("r1", "ev-1", "hana", 120, "wicket", "hs-1", HS_SECRET);
    let auth = format!("Bearer {token}");
    let hold = serde_json::json!({"sku": "park", "qty": 1, "idempotency_key": "k1", "identity": {"phone": "13800000000"}}).to_string();
    let r = request("POST", &edge.url("/v1/events/ev-1/holds"), &[("authorization", &auth), ("content-type", "application/json")], hold.as_bytes()).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(r.json()["order_id"].is_string(), "{}", r.text());
    // Verified against another CA: 502, and the core sees nothing.
    let other = Pki::new();
    let wrong = TestEdge::start(&format!("core = \"https://localhost:{core_port}\"\norigin-ca-file = \"{}\"", other.path("ca.pem").display()));
    let r = get(&wrong.url("/v1/events/ev-1"), &[]).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["error"], "unavailable", "{}", r.text());
    // A plain-HTTP edge config against the TLS core gets no answer in HTTP either.
    let plain = TestEdge::start(&format!("core = \"http://127.0.0.1:{core_port}\""));
    assert_eq!(get(&plain.url("/v1/events/ev-1"), &[]).await.status, 502);
    drop((edge, wrong, plain));
    let _ = stop.send(());
    core.await.unwrap().unwrap();
}

/// `wicket serve` against a core whose certificate its `origin-ca-file` does not sign: a 502, and a log
/// line that says why (Pingora's, naming the certificate check and the name it checked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_certificate_from_another_ca_is_a_502_with_a_clear_log_line() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("core", &["localhost"], 30);
    let text = format!(
        "admin-token = \"{ADMIN_TOKEN}\"\nstore = \"memory\"\n[payment]\ncallback-secret = \"callback-secret-0123456789\"\n\
         [[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n[tls]\ncert-file = \"{}\"\nkey-file = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let cfg = wicket_core::config::CoreConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let core_port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let core = tokio::spawn(wicket_core::run(cfg, listener, async move {
        let _ = stopped.await;
    }));
    let other = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let edge_cfg = dir.path().join("wicket.toml");
    std::fs::write(
        &edge_cfg,
        format!(
            "admin-token = \"{ADMIN_TOKEN}\"\n[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin}\"\nsecret = \"{SECRET}\"\n\
             core = \"https://localhost:{core_port}\"\norigin-ca-file = \"{}\"\nshutdown-grace-seconds = 1\nthreads = 1\n",
            other.path("ca.pem").display()
        ),
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    let child = wicket_testkit::Spawned::start(
        Command::new(env!("CARGO_BIN_EXE_wicket")).args(["serve", "--config"]).arg(&edge_cfg),
        &log,
        port,
        "the edge",
    );
    let r = get(&format!("http://127.0.0.1:{port}/v1/events/ev-1"), &[]).await;
    assert_eq!(r.status, 502, "{}", r.text());
    // (The line may be written just after the answer.)
    let deadline = Instant::now() + Duration::from_secs(5);
    let line = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if let Some(l) = text.lines().find(|l| l.contains("ERROR") && l.contains("InvalidCert")) {
            break l.to_owned();
        }
        assert!(Instant::now() < deadline, "no log line: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(child);
    assert!(line.contains("certificate verify failed") && line.contains("SNI: localhost") && line.contains("status: 502"), "{line}");
    let _ = stop.send(());
    core.await.unwrap().unwrap();
}

/// CAPTCHA verification over HTTPS, each provider's dialect against a stub with a test-CA
/// certificate: a pass, a refusal, garbage and a slow answer; reCAPTCHA v3's score against the
/// threshold; GeeTest v4's signed form. A stub whose certificate does not chain to `ca-file` is
/// "unavailable" (503 when failing closed) and never reached — never a silent pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captcha_providers_verify_over_https_with_the_certificate_checked() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("captcha", &["127.0.0.1", "localhost"], 30);
    let stub = FakeSiteverify::start_tls("cap-secret", &cert, &key).await;
    let stranger = Pki::new();
    let origin = TestUpstream::start("origin").await;
    let edge_for = |provider: &str, extra: &str, ca: &Path| {
        TestEdge::start(&format!(
            "origin = \"{}\"\n[edge.bot]\nproof = \"captcha\"\n[edge.bot.captcha]\nprovider = \"{provider}\"\n\
             verify-url = \"https://127.0.0.1:{}/siteverify\"\nca-file = \"{}\"\nsecret = \"cap-secret\"\ntimeout-ms = 1000\n{extra}\n\
             [[edge.bot.routes]]\npath = \"/api/\"\ncheck = \"always\"\n",
            origin.url(),
            stub.addr.port(),
            ca.display()
        ))
    };
    let verify = |edge: &TestEdge, answer: String| {
        let url = edge.url("/wicket/verify");
        async move {
            let body = serde_json::json!({ "captcha": answer }).to_string();
            request("POST", &url, &[("content-type", "application/json")], body.as_bytes()).await
        }
    };
    let ca = pki.path("ca.pem");
    for provider in ["turnstile", "hcaptcha", "recaptcha", "siteverify"] {
        let edge = edge_for(provider, "", &ca);
        let r = verify(&edge, "yes".into()).await;
        assert_eq!(r.status, 200, "{provider}: {}", r.text());
        assert!(r.cookies().contains_key("wicket_b"), "{provider}: a bot pass");
        assert_eq!(verify(&edge, "no".into()).await.status, 403, "{provider}");
        assert_eq!(verify(&edge, "garbage".into()).await.status, 503, "{provider}");
    }
    let edge = edge_for("turnstile", "", &ca);
    let started = Instant::now();
    assert_eq!(verify(&edge, "slow".into()).await.status, 503);
    assert!(started.elapsed() < Duration::from_millis(2500), "the timeout bounds the wait");
    // reCAPTCHA v3: the score decides.
    let edge = edge_for("recaptcha", "score-threshold = 0.7", &ca);
    assert_eq!(verify(&edge, "score-0.9".into()).await.status, 200);
    assert_eq!(verify(&edge, "score-0.3".into()).await.status, 403);
    // GeeTest v4: the widget's JSON, signed by the edge with the secret, for this captcha_id.
    let edge = edge_for("geetest", "site-key = \"gt-id\"", &ca);
    let gt = |out: &str| {
        serde_json::json!({"lot_number": "lot-1", "captcha_output": out, "pass_token": "p", "gen_time": "1700000000"}).to_string()
    };
    assert_eq!(verify(&edge, gt("yes")).await.status, 200);
    assert_eq!(verify(&edge, gt("no")).await.status, 403);
    assert_eq!(verify(&edge, gt("garbage")).await.status, 503);
    assert_eq!(verify(&edge, "not-geetest-json".into()).await.status, 403, "a malformed widget answer is the client's failure");
    let edge = edge_for("geetest", "site-key = \"other\"", &ca);
    assert_eq!(verify(&edge, gt("yes")).await.status, 403, "another captcha_id");
    // A certificate the edge does not trust: unavailable, and the request never reaches the stub.
    let before = stub.calls.load(std::sync::atomic::Ordering::SeqCst);
    let edge = edge_for("turnstile", "", &stranger.path("ca.pem"));
    let r = verify(&edge, "yes".into()).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"], "unavailable");
    assert_eq!(stub.calls.load(std::sync::atomic::Ordering::SeqCst), before);
    // ... and with the degrade switch open, the fan passes (fail-open as today).
    edge.admin("PUT", "/admin/bot-policy", "{\"captcha_fail_open\": true}").await;
    assert_eq!(verify(&edge, "yes".into()).await.status, 200);
}

/// A TLS client (the `openssl` crate, as browsers' stacks would) to `a.test` on `port`, trusting
/// `ca`, set up by `setup`; the handshake's error as text when it fails.
async fn tls_client(
    ca: &Path,
    port: u16,
    setup: impl FnOnce(&mut openssl::ssl::SslConnectorBuilder),
) -> Result<tokio_openssl::SslStream<tokio::net::TcpStream>, String> {
    let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls()).unwrap();
    b.set_ca_file(ca).unwrap();
    setup(&mut b);
    let connector = b.build();
    let ssl = connector.configure().unwrap().into_ssl("a.test").unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = tokio_openssl::SslStream::new(ssl, tcp).unwrap();
    match tokio::time::timeout(Duration::from_secs(5), std::pin::Pin::new(&mut tls).connect()).await {
        Ok(Ok(())) => Ok(tls),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("handshake timed out".into()),
    }
}

/// One GET of the detail page on an HTTPS stream: the status.
async fn get_page(tls: &mut tokio_openssl::SslStream<tokio::net::TcpStream>) -> u16 {
    tls.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n").await.unwrap();
    read_answer(tls).await.expect("an answer").status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocols_ciphers_alpn_and_resumption_are_what_the_docs_say() {
    use openssl::ssl::SslVersion;
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let port = free_port();
    let _edge = TestEdge::start(&tls_config(port, &[a], ""));
    let ca = pki.path("ca.pem");
    // TLS 1.3 and TLS 1.2 (forward-secret AEAD) are served.
    let mut t13 = tls_client(&ca, port, |_| {}).await.unwrap();
    assert_eq!(t13.ssl().version_str(), "TLSv1.3");
    assert_eq!(get_page(&mut t13).await, 200);
    let mut t12 = tls_client(&ca, port, |b| b.set_max_proto_version(Some(SslVersion::TLS1_2)).unwrap()).await.unwrap();
    assert_eq!(t12.ssl().version_str(), "TLSv1.2");
    assert!(t12.ssl().current_cipher().unwrap().name().contains("GCM"), "{:?}", t12.ssl().current_cipher().unwrap().name());
    assert_eq!(get_page(&mut t12).await, 200);
    // TLS 1.2 with only CBC or only RSA key exchange: no shared cipher.
    for list in ["ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA", "AES128-GCM-SHA256:AES256-GCM-SHA384"] {
        let r = tls_client(&ca, port, |b| {
            b.set_max_proto_version(Some(SslVersion::TLS1_2)).unwrap();
            b.set_cipher_list(list).unwrap();
        })
        .await;
        assert!(r.is_err(), "{list} was accepted");
    }
    // ALPN: h2 first, http/1.1, none at all (HTTP/1.1); only protocols the edge does not speak:
    // refused (RFC 7301's no_application_protocol), not answered in some protocol it did not ask.
    for (offer, chosen) in [(&b"\x08http/1.1\x02h2"[..], Some(&b"h2"[..])), (b"\x08http/1.1", Some(b"http/1.1")), (b"", None)] {
        let mut t = tls_client(&ca, port, |b| if !offer.is_empty() { b.set_alpn_protos(offer).unwrap() }).await.unwrap();
        assert_eq!(t.ssl().selected_alpn_protocol(), chosen);
        if chosen != Some(b"h2") {
            assert_eq!(get_page(&mut t).await, 200);
        }
    }
    let r = tls_client(&ca, port, |b| b.set_alpn_protos(b"\x08spdy/3.1\x06h2c-14").unwrap()).await;
    assert!(r.as_ref().is_err_and(|e| e.contains("no application protocol")), "{:?}", r.map(|_| ()));
    // Resumption: curl's second connection resumes the first one's TLS 1.3 ticket or TLS 1.2
    // session (its own session cache, one process; `Connection: close` makes it a new connection).
    let url = format!("https://a.test:{port}/");
    for max in ["1.3", "1.2"] {
        let out = Command::new("curl")
            .args(["-sv", "--http1.1", "--tls-max", max, "-o", "/dev/null", "-o", "/dev/null", "-H", "Connection: close", "--cacert"])
            .arg(&ca)
            .args(["--resolve", &resolve("a.test", port), &url, &url])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{log}");
        assert_eq!(log.matches("Connected to").count(), 2, "{log}");
        assert!(log.contains("SSL re-using session ID") || log.contains("SSL reusing session"), "TLS {max}: not resumed: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_p384_ed25519_and_older_key_formats_serve_and_an_unsupported_key_is_named() {
    let pki = Pki::new();
    let rsa = pki.leaf_with_key("rsa", &["a.test"], 30, &["-newkey", "rsa:2048"]);
    let p384 = pki.leaf_with_key("p384", &["a.test"], 30, &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"]);
    let ed = pki.leaf_with_key("ed", &["a.test"], 30, &["-newkey", "ed25519"]);
    let p256 = pki.leaf("p256", &["a.test"], 30);
    let rsa1 = (rsa.0.clone(), pki.traditional_key(&rsa.1, "rsa1.key"));
    let sec1 = (p256.0.clone(), pki.traditional_key(&p256.1, "sec1.key"));
    let ca = pki.path("ca.pem");
    for (what, pair) in [("RSA 2048", rsa), ("ECDSA P-384", p384), ("Ed25519", ed), ("RSA, PKCS#1 key", rsa1), ("P-256, SEC1 key", sec1)] {
        let port = free_port();
        let _edge = TestEdge::start(&tls_config(port, &[pair], ""));
        let mut t = tls_client(&ca, port, |_| {}).await.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(get_page(&mut t).await, 200, "{what}");
    }
    // A P-521 key (OpenSSL signs with it, ring does not) and a key file that is a certificate:
    // check-config names each, with the file at fault.
    let p521 = pki.leaf_with_key("p521", &["a.test"], 30, &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-521"]);
    let (code, text) = check_config(&[p256.clone(), p521, (p256.0.clone(), p256.0.clone())], "");
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("edge.tls.certs[1].key-file") && text.contains("not a usable PEM private key (RSA, ECDSA P-256 or P-384, Ed25519)"), "{text}");
    assert!(text.contains("edge.tls.certs[2].key-file"), "{text}");
    assert!(!text.contains("certs[0]"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_spelled_differently_gets_the_same_certificate_and_an_oversized_hello_is_refused() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let b = pki.leaf("b", &["b.test", "*.b.test"], 30);
    let port = free_port();
    let _edge = TestEdge::start(&tls_config(port, &[a, b], ""));
    let ca = pki.path("ca.pem");
    // The certificate served for each SNI: upper case and a wildcard's label in any case pick b.test's; an
    // IP address or no SNI at all get the first (a.test).
    let served = |sni: Option<&'static str>| {
        let ca = ca.clone();
        async move {
            let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls()).unwrap();
            b.set_ca_file(&ca).unwrap();
            let mut cfg = b.build().configure().unwrap().verify_hostname(false);
            cfg.set_use_server_name_indication(sni.is_some());
            let ssl = cfg.into_ssl(sni.unwrap_or("x")).unwrap();
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let mut tls = tokio_openssl::SslStream::new(ssl, tcp).unwrap();
            std::pin::Pin::new(&mut tls).connect().await.unwrap();
            let cert = tls.ssl().peer_certificate().unwrap();
            cert.subject_name().entries().next().unwrap().data().to_string().unwrap()
        }
    };
    assert_eq!(served(Some("B.TEST")).await, "b.test");
    assert_eq!(served(Some("Www.B.Test")).await, "b.test");
    assert_eq!(served(Some("a.test")).await, "a.test");
    assert_eq!(served(Some("127.0.0.1")).await, "a.test");
    assert_eq!(served(None).await, "a.test");
    // A ClientHello over 64 KiB (a handshake message larger than any real one): refused, the
    // connection closed.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A handshake record announcing a 16 MB ClientHello, then 70 KiB of it in records of 16 KiB.
    let mut hello = vec![0x01, 0xff, 0xff, 0xff];
    hello.extend(std::iter::repeat_n(0u8, 70 * 1024));
    for chunk in hello.chunks(16 * 1024) {
        let mut rec = vec![0x16, 0x03, 0x03, (chunk.len() >> 8) as u8, chunk.len() as u8];
        rec.extend_from_slice(chunk);
        if s.write_all(&rec).await.is_err() {
            break;
        }
    }
    let mut buf = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
    assert!(r.is_ok(), "an oversized ClientHello was not refused");
    assert!(!buf.starts_with(b"HTTP/"), "{buf:?}");
    // And the edge still serves.
    assert_eq!(served(Some("a.test")).await, "a.test");
}

/// One GET of the detail page on a new connection to `port` as `a.test`: its status, and whether
/// the handshake resumed a session (the answer read whole, so the tickets sent after it are kept).
async fn get_resuming(client: &std::sync::Arc<rustls::ClientConfig>, port: u16) -> (u16, bool) {
    let mut tls = rustls_connect(client, port).await;
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    tls.write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer)).await.expect("an answer in 5 s").unwrap();
    let head = String::from_utf8_lossy(&answer[..answer.len().min(12)]).into_owned();
    (head.strip_prefix("HTTP/1.1 ").and_then(|s| s.get(..3)).and_then(|s| s.parse().ok()).unwrap_or(0), resumed)
}

fn random_key_file(path: &Path) {
    std::fs::write(path, rand::random::<[u8; 32]>().iter().chain(rand::random::<[u8; 32]>().iter()).copied().collect::<Vec<_>>()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_from_one_edge_resumes_on_another_with_the_same_key_files_through_rotations() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let ca = pki.path("ca.pem");
    let keys = tempfile::tempdir().unwrap();
    let k = |n: &str| keys.path().join(n);
    for n in ["k1", "k0", "k3"] {
        random_key_file(&k(n));
    }
    // Edge B reads two files (the current key first); "b-cur" starts as a copy of A's key.
    std::fs::copy(k("k1"), k("b-cur")).unwrap();
    std::fs::copy(k("k0"), k("b-prev")).unwrap();
    let files = |list: &[&str]| format!("ticket-key-files = [{}]", list.iter().map(|n| format!("{:?}", k(n).display().to_string())).collect::<Vec<_>>().join(", "));
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let _edge_a = TestEdge::start(&tls_config(ports[0], std::slice::from_ref(&a), &files(&["k1"])));
    let edge_b = TestEdge::start(&tls_config(ports[1], std::slice::from_ref(&a), &files(&["b-cur", "b-prev"])));
    let _edge_c = TestEdge::start(&tls_config(ports[2], std::slice::from_ref(&a), &files(&["k3"])));
    let edge_d = TestEdge::start(&tls_config(ports[3], std::slice::from_ref(&a), ""));
    let [pa, pb, pc, pd] = ports;
    let mut resumed_on_b = 0;
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let v = format!("{:?}", version.version);
        // A's ticket resumes on B (another process: as another edge behind the balancer, or A
        // after a restart), and B's on A.
        let client = rustls_client(&ca, version);
        assert_eq!(get_resuming(&client, pa).await, (200, false), "{v}");
        assert_eq!(get_resuming(&client, pb).await, (200, true), "{v}: A's ticket on B");
        assert_eq!(get_resuming(&client, pa).await, (200, true), "{v}: B's ticket on A");
        resumed_on_b += 1;
        // An edge with another secret, and one with keys of its own process: a full handshake,
        // served all the same.
        for (port, what) in [(pc, "another secret"), (pd, "no key files")] {
            let client = rustls_client(&ca, version);
            assert_eq!(get_resuming(&client, pa).await, (200, false), "{v}");
            assert_eq!(get_resuming(&client, port).await, (200, false), "{v}: {what}");
            // ...and it resumes its own tickets.
            assert_eq!(get_resuming(&client, port).await, (200, true), "{v}: {what}, its own ticket");
        }
    }
    // Rotation on B: a new first file, A's key second. A's tickets still resume on B; B's new
    // tickets are sealed with the new key, which A does not have.
    random_key_file(&k("b-cur"));
    std::fs::copy(k("k1"), k("b-prev")).unwrap();
    let r = edge_b.admin("POST", "/admin/tls/reload", "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let client = rustls_client(&ca, &rustls::version::TLS13);
    assert_eq!(get_resuming(&client, pa).await, (200, false));
    assert_eq!(get_resuming(&client, pb).await, (200, true), "the second file opens A's ticket");
    resumed_on_b += 1;
    assert_eq!(get_resuming(&client, pa).await, (200, false), "B seals with its new first file");
    // A file that is not a key: 422 naming it, and B's keys stay (its own ticket resumes).
    let kept = rustls_client(&ca, &rustls::version::TLS13);
    assert_eq!(get_resuming(&kept, pb).await, (200, false));
    std::fs::write(k("b-prev"), "short").unwrap();
    let r = edge_b.admin("POST", "/admin/tls/reload", "").await;
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("ticket-key-files[1]") && r.text().contains("holds 5 bytes"), "{}", r.text());
    assert_eq!(get_resuming(&kept, pb).await, (200, true), "the keys in use stay");
    resumed_on_b += 1;
    // The old key dropped: A's tickets no longer resume on B.
    random_key_file(&k("b-prev"));
    assert_eq!(edge_b.admin("POST", "/admin/tls/reload", "").await.status, 200);
    let client = rustls_client(&ca, &rustls::version::TLS13);
    assert_eq!(get_resuming(&client, pa).await, (200, false));
    assert_eq!(get_resuming(&client, pb).await, (200, false), "A's key is gone from B");
    // What the admin API and the metrics say.
    let b = edge_b.admin("GET", "/admin/tls", "").await.json();
    assert_eq!(b["session-tickets"], serde_json::json!({"keys": "shared", "files": 2, "rotate-s": 21600}), "{b}");
    let d = edge_d.admin("GET", "/admin/tls", "").await.json();
    assert_eq!(d["session-tickets"], serde_json::json!({"keys": "this-process", "rotate-s": 21600}), "{d}");
    let m = String::from_utf8_lossy(&edge_b.admin("GET", "/metrics", "").await.body).into_owned();
    assert!(m.contains(&format!("wicket_edge_tls_handshakes_total{{kind=\"resumed\"}} {resumed_on_b}\n")), "{m}");
    assert!(m.contains("wicket_edge_tls_handshakes_total{kind=\"full\"} 2\n"), "{m}");
}

#[test]
fn check_config_names_each_bad_ticket_key_file() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], 30);
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.key");
    random_key_file(&good);
    let short = dir.path().join("short.key");
    std::fs::write(&short, "changeme").unwrap();
    let missing = dir.path().join("missing.key");
    let list = [&good, &short, &missing].map(|p| format!("{:?}", p.display().to_string())).join(", ");
    let (code, out) = check_config(std::slice::from_ref(&a), &format!("ticket-key-files = [{list}]"));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("edge.tls.ticket-key-files[1]") && out.contains("holds 8 bytes"), "{out}");
    assert!(out.contains("edge.tls.ticket-key-files[2]") && out.contains("missing.key"), "{out}");
    assert!(!out.contains("ticket-key-files[0]"), "{out}");
    let five = [&good; 5].map(|p| format!("{:?}", p.display().to_string())).join(", ");
    let (code, out) = check_config(std::slice::from_ref(&a), &format!("ticket-key-files = [{five}]"));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("edge.tls.ticket-key-files: at most 4 files"), "{out}");
    let (code, out) = check_config(&[a], &format!("ticket-key-files = [{:?}]", good.display().to_string()));
    assert_eq!(code, Some(0), "{out}");
}
