//! The core's API over HTTPS (`[tls]`), tried with real clients: curl trusting a test CA made here with
//! the `openssl` command (an event read, a hold with an admission token), curl trusting another CA
//! (refused), handshakes that never finish and bytes that are not TLS (closed, others served meanwhile),
//! the head deadline and idle limit after the handshake, every certificate problem named by its key, and the `wicket-core serve` binary naming its TLS listener.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::core_server::{ADMIN, TestCore, config_text, event_body};
use wicket_testkit::pki::{Pki, curl, resolve};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wicket_core::config::{ConfigError, CoreConfig};
use wicket_core::store::embedded::EmbeddedStore;

/// `[tls]` with these files (and more keys of the table).
fn tls_table(cert: &Path, key: &Path, extra: &str) -> String {
    format!("[tls]\ncert-file = \"{}\"\nkey-file = \"{}\"\n{extra}\n", cert.display(), key.display())
}

/// An in-process core with `[tls]`, its certificate for `core.test`.
async fn tls_core(pki: &Pki, extra: &str) -> TestCore {
    let (cert, key) = pki.leaf("core", &["core.test"], 30);
    let text = format!("{}\n{}", config_text(None, 4096), tls_table(&cert, &key, extra));
    let cfg = CoreConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    TestCore::start_config(std::sync::Arc::new(EmbeddedStore::new()), cfg).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_with_the_test_ca_reads_an_event_and_holds_and_another_ca_is_refused() {
    let pki = Pki::new();
    let c = tls_core(&pki, "").await;
    let port = c.addr.port();
    let ca = pki.path("ca.pem");
    let rs = resolve("core.test", port);
    let base = format!("https://core.test:{port}");
    let admin = format!("authorization: Bearer {ADMIN}");
    let body = event_body(10, 5, 4, json!([])).to_string();
    let put = ["--resolve", &rs, "-X", "PUT", "-H", &admin, "-H", "content-type: application/json", "-d", &body];
    let (code, version, _, text) = curl(&ca, &format!("{base}/v1/events/ev"), &put).expect("curl over TLS");
    assert_eq!((code, version.as_str()), (201, "1.1"), "{text}");
    let (code, _, _, text) = curl(&ca, &format!("{base}/v1/events/ev"), &["--resolve", &rs]).unwrap();
    assert_eq!(code, 200, "{text}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap()["name"], "Test sale", "{text}");
    // A hold with an admission token: the same order as over plain HTTP.
    let auth = format!("authorization: Bearer {}", c.token("ev", "alice"));
    let hold = json!({"sku": "park", "qty": 1, "idempotency_key": "k1", "identity": {"phone": "13800000000"}}).to_string();
    let args = ["--resolve", &rs, "-X", "POST", "-H", &auth, "-H", "content-type: application/json", "-d", &hold];
    let (code, _, _, text) = curl(&ca, &format!("{base}/v1/events/ev/holds"), &args).unwrap();
    assert_eq!(code, 201, "{text}");
    let order: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(order["order_id"].is_string(), "{text}");
    // Verified against another CA: curl refuses the certificate (60), nothing is served.
    let other = Pki::new();
    assert_eq!(curl(&other.path("ca.pem"), &format!("{base}/v1/events/ev"), &["--resolve", &rs]), Err(60));
    // A name the certificate does not have: refused too.
    assert_eq!(curl(&ca, &format!("https://127.0.0.1:{port}/v1/events/ev"), &[]), Err(60));
    // Below TLS 1.2: no handshake (35).
    assert_eq!(curl(&ca, &format!("{base}/v1/events/ev"), &["--resolve", &rs, "--tls-max", "1.1"]), Err(35));
    // HTTP/2 is not offered: a client asking for it goes on with HTTP/1.1.
    let (code, version, _, _) = curl(&ca, &format!("{base}/v1/events/ev"), &["--resolve", &rs, "--http2"]).unwrap();
    assert_eq!((code, version.as_str()), (200, "1.1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_handshakes_that_never_finish_are_closed_and_others_are_served() {
    let pki = Pki::new();
    let c = tls_core(&pki, "handshake-timeout-ms = 1500").await;
    let port = c.addr.port();
    // Plain HTTP, then bytes of nothing at all, on the TLS port: closed, no answer in HTTP.
    for garbage in [&b"GET /v1/events/ev HTTP/1.1\r\nHost: core.test\r\n\r\n"[..], &[0u8, 1, 2, 3, 0xff, 0xfe, 0x16, 0x16][..]] {
        let mut s = tokio::net::TcpStream::connect(c.addr).await.unwrap();
        s.write_all(garbage).await.unwrap();
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "not closed after {garbage:?}");
        assert!(!buf.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&buf));
    }
    // 50 connections that never start (or never finish) a handshake.
    let mut stalled = Vec::new();
    for i in 0..50 {
        let mut s = tokio::net::TcpStream::connect(c.addr).await.unwrap();
        if i % 2 == 0 {
            // The first bytes of a ClientHello record, then nothing.
            s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await.unwrap();
        }
        stalled.push(s);
    }
    // Another client is served meanwhile.
    let ca = pki.path("ca.pem");
    let rs = resolve("core.test", port);
    let started = Instant::now();
    let (code, _, _, text) = curl(&ca, &format!("https://core.test:{port}/v1/events/nope"), &["--resolve", &rs]).unwrap();
    assert_eq!(code, 404, "{text}");
    assert!(started.elapsed() < Duration::from_millis(1200), "waited for the stalled handshakes: {:?}", started.elapsed());
    // Every stalled one is closed at the handshake deadline.
    for s in &mut stalled {
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "a stalled handshake was not closed: {r:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert_eq!(curl(&ca, &format!("https://core.test:{port}/v1/events/nope"), &["--resolve", &rs]).unwrap().0, 404);
}

/// A TLS client trusting `ca`, checking the name `core.test`, its handshake done.
async fn tls_client(addr: std::net::SocketAddr, ca: &Path) -> tokio_openssl::SslStream<tokio::net::TcpStream> {
    let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls()).unwrap();
    b.set_ca_file(ca).unwrap();
    let ssl = b.build().configure().unwrap().into_ssl("core.test").unwrap();
    let mut s = tokio_openssl::SslStream::new(ssl, tokio::net::TcpStream::connect(addr).await.unwrap()).unwrap();
    std::pin::Pin::new(&mut s).connect().await.expect("handshake");
    s
}

/// After the handshake the connection is hyper's as over plain HTTP: a head trickled a header at a time
/// is cut at `core.header-timeout-ms`, and so is a kept-alive connection left idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_head_deadline_and_the_idle_limit_hold_as_over_plain_http() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("core", &["core.test"], 30);
    let text = format!("{}\n{}", config_text(None, 4096), tls_table(&cert, &key, ""))
        .replace("max-inflight = 4096", "max-inflight = 4096\nheader-timeout-ms = 600");
    let cfg = CoreConfig::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let c = TestCore::start_config(std::sync::Arc::new(EmbeddedStore::new()), cfg).await;
    let ca = pki.path("ca.pem");
    // A head trickled one header every 100 ms: closed at the deadline, never answered.
    let mut s = tls_client(c.addr, &ca).await;
    s.write_all(b"GET /v1/events/nope HTTP/1.1\r\nHost: core.test\r\n").await.unwrap();
    let started = Instant::now();
    let closed = loop {
        if s.write_all(b"X-Slow: 1\r\n").await.is_err() || s.flush().await.is_err() {
            break started.elapsed();
        }
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break started.elapsed(),
            Ok(Ok(n)) => assert!(!buf[..n].starts_with(b"HTTP/1.1 404"), "a trickled head was served"),
            Err(_) => {}
        }
        assert!(started.elapsed() < Duration::from_secs(5), "a trickled head kept the connection for 5 s");
    };
    assert!(closed >= Duration::from_millis(500), "closed before the deadline: {closed:?}");
    // A whole request is answered; the kept-alive connection, left idle, is closed at the deadline.
    let mut s = tls_client(c.addr, &ca).await;
    s.write_all(b"GET /v1/events/nope HTTP/1.1\r\nHost: core.test\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 404"), "{:?}", String::from_utf8_lossy(&buf[..n]));
    let idle = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "an idle kept-alive connection was not closed: {r:?}");
    assert!(idle.elapsed() >= Duration::from_millis(500), "{:?}", idle.elapsed());
}

#[test]
fn every_certificate_problem_is_named_by_its_key() {
    let pki = Pki::new();
    let good = pki.leaf("good", &["core.test"], 30);
    let other = pki.leaf("other", &["core.test"], 30);
    let expired = pki.leaf("old", &["core.test"], -1);
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n").unwrap();
    let problems = |table: String| -> Vec<String> {
        let text = format!("{}\n{table}", config_text(None, 4096));
        match CoreConfig::from_toml_str(&text) {
            Err(ConfigError::Invalid(errs)) => errs.iter().map(|e| format!("{}: {}", e.path, e.message)).collect(),
            Err(e) => vec![e.to_string()],
            Ok(_) => vec![],
        }
    };
    assert_eq!(problems(tls_table(&good.0, &good.1, "")), Vec::<String>::new());
    let missing = dir.path().join("missing.pem");
    let cases: [(String, &str, &str); 6] = [
        (tls_table(&missing, &good.1, ""), "tls.cert-file", "cannot read"),
        (tls_table(&good.0, &missing, ""), "tls.key-file", "cannot read"),
        (tls_table(&good.0, &other.1, ""), "tls.key-file", "is not the key of"),
        (tls_table(&expired.0, &expired.1, ""), "tls.cert-file", "expired"),
        (tls_table(&not_pem, &good.1, ""), "tls.cert-file", "not a PEM certificate chain"),
        (tls_table(&good.0, &good.1, "handshake-timeout-ms = 50"), "tls.handshake-timeout-ms", "100..=120000"),
    ];
    for (table, key, words) in cases {
        let errs = problems(table);
        assert!(errs.len() == 1 && errs[0].starts_with(key) && errs[0].contains(words), "{key}: {errs:?}");
    }
    // Unknown keys and a missing file key are refused like everywhere else in the file.
    let errs = problems(format!("[tls]\ncert-file = \"{}\"\nkey-file = \"{}\"\nalpn = \"h2\"\n", good.0.display(), good.1.display()));
    assert!(errs.iter().any(|e| e.contains("alpn")), "{errs:?}");
    let errs = problems(format!("[tls]\ncert-file = \"{}\"\n", good.0.display()));
    assert!(errs.iter().any(|e| e.contains("key-file")), "{errs:?}");
}

/// `wicket-core serve` with `[tls]` (files relative to the config): names its listener as TLS and serves
/// curl over it; `check-config` names a broken file by its key.
#[test]
fn the_binary_serves_tls_and_says_so() {
    let pki = Pki::new();
    let (cert, key) = pki.leaf("core", &["core.test"], 30);
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&cert, dir.path().join("core.pem")).unwrap();
    std::fs::copy(&key, dir.path().join("core.key")).unwrap();
    let port = wicket_testkit::free_port();
    let cfg = dir.path().join("core.toml");
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\nstore = \"memory\"\n{}\n{}",
        config_text(None, 4096),
        tls_table(Path::new("core.pem"), Path::new("core.key"), "")
    );
    std::fs::write(&cfg, &text).unwrap();
    let log = dir.path().join("stderr.log");
    let child = wicket_testkit::Spawned::start(
        Command::new(env!("CARGO_BIN_EXE_wicket-core")).args(["serve", "--config"]).arg(&cfg),
        &log,
        port,
        "the core",
    );
    let ca = pki.path("ca.pem");
    let (code, _, _, body) = curl(&ca, &format!("https://core.test:{port}/v1/events/nope"), &["--resolve", &resolve("core.test", port)]).unwrap();
    assert_eq!(code, 404, "{body}");
    drop(child);
    let log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(log.matches(&format!("listening on 127.0.0.1:{port} (core API and /metrics, TLS)")).count(), 1, "{log}");
    // check-config loads the files: a key of another certificate is named by its key.
    let (_, other_key): (PathBuf, PathBuf) = pki.leaf("other", &["core.test"], 30);
    std::fs::copy(&other_key, dir.path().join("core.key")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wicket-core")).arg("check-config").arg(&cfg).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("tls.key-file") && text.contains("is not the key of"), "{text}");
}
