//! The one test helper of wicket-edge: a real edge (Pingora server on free loopback ports, on its
//! own thread) and real upstream HTTP servers (hyper on 127.0.0.1:0). A real `redis-server` (or Cluster)
//! comes from the `wicket-testkit` crate, shared with the core's tests, and so does the test CA
//! (`wicket_testkit::pki`).
#![allow(dead_code)]

pub mod room_state;


use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use wicket_edge::server::{StopHandle, stop_pair};

/// A loopback port free right now, never one this test was given before (Pingora binds by
/// address).
pub use wicket_testkit::free_port;

/// An `[edge.tls]` table listening on `port` with these (certificate, key) files and `extra` keys.
pub fn tls_config(port: u16, certs: &[(PathBuf, PathBuf)], extra: &str) -> String {
    let mut out = format!("[edge.tls]\nlisten = \"127.0.0.1:{port}\"\n{extra}\n");
    for (cert, key) in certs {
        out.push_str(&format!("[[edge.tls.certs]]\ncert-file = \"{}\"\nkey-file = \"{}\"\n", cert.display(), key.display()));
    }
    out
}

/// A rustls client of `a.test` trusting `ca`, speaking only `version`; its session store (where
/// tickets are kept, by server name and not by port) is shared by every connection made with it.
pub fn rustls_client(ca: &Path, version: &'static rustls::SupportedProtocolVersion) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_file(ca).unwrap()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// A new TLS connection with `client` to `a.test` on the loopback `port`.
pub async fn rustls_connect(client: &Arc<rustls::ClientConfig>, port: u16) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    tokio_rustls::TlsConnector::from(Arc::clone(client)).connect(name, tcp).await.unwrap()
}

/// A loopback address whose port refuses connections.
pub fn dead_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// A response as the tests see it.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// `name=value` of each Set-Cookie, attributes dropped.
    pub fn cookies(&self) -> HashMap<String, String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split(';').next()?.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect()
    }
}

/// One HTTP/1.1 request on a fresh connection.
pub async fn request(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http::<Full<Bytes>>();
    let mut b = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::copy_from_slice(body))).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .expect("request timed out")
        .expect("request failed");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Resp { status, headers, body }
}

pub async fn get(url: &str, headers: &[(&str, &str)]) -> Resp {
    request("GET", url, headers, b"").await
}

/// A fan in a waiting room: a cookie jar (queue ticket, device) kept across requests to one
/// public address (or several edges sharing the room: cookies are per host, not per port).
#[derive(Default)]
pub struct Fan {
    pub jar: HashMap<String, String>,
}

impl Fan {
    /// A JSON GET with the jar's cookies; keeps the cookies the answer sets.
    pub async fn get(&mut self, url: &str) -> Resp {
        let cookie = self.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
        let r = get(url, &[("cookie", &cookie), ("accept", "application/json"), ("user-agent", "fan"), ("accept-language", "en")]).await;
        self.jar.extend(r.cookies());
        r
    }

    /// Joins `room` through the edge at `base` (`http://host:port`); the join's answer.
    pub async fn join(&mut self, base: &str, room: &str) -> Resp {
        self.get(&format!("{base}/queue/{room}")).await
    }

    /// One status poll of `room` through the edge at `base`: the JSON.
    pub async fn status(&mut self, base: &str, room: &str) -> serde_json::Value {
        let r = self.get(&format!("{base}/queue/{room}/status")).await;
        assert!(r.status == 200 || r.status == 503, "status poll: {} {}", r.status, r.text());
        r.json()
    }
}

/// What the test upstream saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: HashMap<String, String>,
}

/// A real HTTP upstream. Paths: `/slow/<ms>` answers after a delay; everything else echoes the
/// request as JSON `{"upstream": name, "path", "headers"}`. paths ending in `/revoke` answer
/// with `Wicket-Revoke: 1`.
pub struct TestUpstream {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    /// `METHOD path` of every request, in order.
    pub seen: Arc<parking_lot::Mutex<Vec<String>>>,
    pub name: &'static str,
}

impl TestUpstream {
    pub async fn start(name: &'static str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let h = hits.clone();
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let h = h.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let h = h.clone();
                        let log = log.clone();
                        async move {
                            h.fetch_add(1, Ordering::SeqCst);
                            log.lock().push(format!("{} {}", req.method(), req.uri().path()));
                            let path = req.uri().path().to_owned();
                            if let Some(ms) = path.strip_prefix("/slow/").and_then(|m| m.parse::<u64>().ok()) {
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                            }
                            let headers: HashMap<String, String> = req
                                .headers()
                                .iter()
                                .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
                                .collect();
                            let body = serde_json::json!({"upstream": name, "path": path, "headers": headers});
                            let mut resp = http::Response::builder()
                                .header("content-type", "application/json")
                                .header("x-upstream", name);
                            if path.ends_with("/revoke") {
                                resp = resp.header("wicket-revoke", "1");
                            }
                            Ok::<_, Infallible>(resp.body(Full::new(Bytes::from(body.to_string()))).unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        TestUpstream { addr, hits, seen, name }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// A fake CAPTCHA provider. Siteverify (Turnstile, hCaptcha, reCAPTCHA): the answer depends on the
/// `response` field: `yes` → success (with the right secret and a `remoteip`), `no` → failure,
/// `slow` → answers after 3 s, `garbage` → not JSON, `score-<x>` → success with reCAPTCHA v3's
/// score `x`. GeeTest v4 (a form with `lot_number`): `result: success` when `captcha_id` is
/// `gt-id`, `sign_token` is the HMAC-SHA256 of `lot_number` under the secret and `captcha_output` is
/// `yes`; `garbage` → not JSON. Over HTTPS with [`FakeSiteverify::start_tls`].
pub struct FakeSiteverify {
    pub addr: SocketAddr,
    pub calls: Arc<AtomicUsize>,
}

impl FakeSiteverify {
    pub async fn start(secret: &'static str) -> Self {
        Self::start_with(secret, None).await
    }

    /// The same over HTTPS with this certificate chain and key (PEM files).
    pub async fn start_tls(secret: &'static str, cert: &std::path::Path, key: &std::path::Path) -> Self {
        let mut b = openssl::ssl::SslAcceptor::mozilla_intermediate_v5(openssl::ssl::SslMethod::tls_server()).unwrap();
        b.set_certificate_chain_file(cert).unwrap();
        b.set_private_key_file(key, openssl::ssl::SslFiletype::PEM).unwrap();
        Self::start_with(secret, Some(Arc::new(b.build()))).await
    }

    async fn start_with(secret: &'static str, tls: Option<Arc<openssl::ssl::SslAcceptor>>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let c = c.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let c = c.clone();
                        async move {
                            c.fetch_add(1, Ordering::SeqCst);
                            let query = req.uri().query().unwrap_or("").to_owned();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let form: HashMap<String, String> = String::from_utf8_lossy(&body)
                                .split('&')
                                .filter_map(|kv| kv.split_once('='))
                                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                                .collect();
                            let answer = if let Some(lot) = form.get("lot_number") {
                                use hmac::Mac;
                                let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
                                mac.update(lot.as_bytes());
                                let signed = form.get("sign_token") == Some(&hex::encode(mac.finalize().into_bytes()));
                                match form.get("captcha_output").map(String::as_str) {
                                    Some("garbage") => "<html>oops".to_owned(),
                                    Some("yes") if signed && query == "captcha_id=gt-id" => {
                                        r#"{"status":"success","result":"success","reason":""}"#.to_owned()
                                    }
                                    _ => r#"{"status":"success","result":"fail","reason":"pass_token expire"}"#.to_owned(),
                                }
                            } else {
                                let ok_secret = form.get("secret").map(String::as_str) == Some(secret);
                                match form.get("response").map(String::as_str) {
                                    Some("yes") if ok_secret && form.contains_key("remoteip") => r#"{"success":true}"#.to_owned(),
                                    Some("slow") => {
                                        tokio::time::sleep(Duration::from_secs(3)).await;
                                        r#"{"success":true}"#.to_owned()
                                    }
                                    Some("garbage") => "<html>oops".to_owned(),
                                    Some(s) if ok_secret && s.starts_with("score-") => {
                                        format!(r#"{{"success":true,"score":{},"action":"queue"}}"#, &s[6..])
                                    }
                                    _ => r#"{"success":false,"error-codes":["invalid-input-response"]}"#.to_owned(),
                                }
                            };
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(answer))))
                        }
                    });
                    match tls {
                        None => {
                            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                        }
                        Some(acceptor) => {
                            let Ok(ssl) = openssl::ssl::Ssl::new(acceptor.context()) else { return };
                            let Ok(mut tls) = tokio_openssl::SslStream::new(ssl, stream) else { return };
                            if std::pin::Pin::new(&mut tls).accept().await.is_err() {
                                return;
                            }
                            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), svc).await;
                        }
                    }
                });
            }
        });
        FakeSiteverify { addr, calls }
    }
}

/// `[tokens]` with the HS256 test key (`hs-1`, [`HS_SECRET`]).
pub fn hs_tokens() -> String {
    format!("[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n")
}

/// An edge with the core in-process (memory store): event `ev-1` named `name` (100 park tickets,
/// one per user) opening at `opens` for two hours, and room `r1` guarding `/buy`, releasing a
/// fixed `rate` a second; users from `x-user-id`. Also the core's own port (its `/metrics`).
pub fn embedded_sale_edge(name: &str, opens: time::OffsetDateTime, rate: f64) -> (TestEdge, u16) {
    let fmt = |t: time::OffsetDateTime| t.format(&time::format_description::well_known::Rfc3339).unwrap();
    let event = serde_json::json!({
        "name": name, "opens_at": fmt(opens), "closes_at": fmt(opens + time::Duration::hours(2)),
        "hold_seconds": 900, "pools": [{"id": "park", "capacity": 100}],
        "skus": [{"id": "park", "pools": ["park"], "price_cents": 100}], "limits": [{"dimension": "user", "max": 1}]
    });
    let core_port = free_port();
    let top = format!(
        "listen = \"127.0.0.1:{core_port}\"\nadmin-token = \"{ADMIN_TOKEN}\"\nstore = \"memory\"\nevent-files = [\"ev-1.json\"]\n\
         [payment]\ncallback-secret = \"callback-secret-0123456789\"\n"
    );
    let edge = TestEdge::start_full(
        &top,
        &format!(
            "core = \"embedded\"\nuser-header = \"x-user-id\"\n{}\n\
             [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nrelease = {{ mode = \"fixed\", rate = {rate:?} }}\n",
            hs_tokens()
        ),
        &[],
        &[("ev-1.json", event.to_string().as_bytes())],
    );
    (edge, core_port)
}

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";
pub const SECRET: &str = "test-edge-secret-0123456789";
pub const HS_SECRET: &str = "hs-secret-for-tests-0123456789abcdef";

/// A running edge.
pub struct TestEdge {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
    stop: StopHandle,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

/// The detail page every test edge serves at `/`.
pub fn detail_page() -> String {
    format!("<!doctype html><title>Sale</title>{}", "<p>Prehistoric park, 1-yuan day ticket</p>\n".repeat(60))
}

impl TestEdge {
    /// Starts an edge whose `[edge]` table is `listen`, `admin-listen`, `admin-token`, `secret`,
    /// `site-dir` plus `edge_extra` (more `[edge]` keys, then any further tables).
    pub fn start(edge_extra: &str) -> Self {
        Self::start_with_files(edge_extra, &[])
    }

    /// Like [`TestEdge::start`], with more files in `site-dir` (relative path, contents).
    pub fn start_with_files(edge_extra: &str, files: &[(&str, &[u8])]) -> Self {
        Self::start_full("", edge_extra, files, &[])
    }

    /// The general form: `top` (top-level keys: the embedded core's) before `[edge]`, files in
    /// `site-dir`, and files beside the config (event files).
    pub fn start_full(top: &str, edge_extra: &str, files: &[(&str, &[u8])], beside: &[(&str, &[u8])]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (path, body) in beside {
            std::fs::write(dir.path().join(path), body).unwrap();
        }
        let site = dir.path().join("site");
        std::fs::create_dir_all(site.join("img")).unwrap();
        std::fs::write(site.join("index.html"), detail_page()).unwrap();
        std::fs::write(site.join("app.js"), "console.log('sale');\n".repeat(50)).unwrap();
        std::fs::write(site.join("img/logo.png"), [0x89, b'P', b'N', b'G', 0, 1, 2, 3]).unwrap();
        for (path, body) in files {
            let f = site.join(path);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, body).unwrap();
        }
        let port = free_port();
        let admin_port = free_port();
        // A quick stop unless the test sets its own grace.
        let grace = if edge_extra.contains("shutdown-grace-seconds") { "" } else { "shutdown-grace-seconds = 1\n" };
        let text = format!(
            "{top}\n[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin_port}\"\n\
             admin-token = \"{ADMIN_TOKEN}\"\nsecret = \"{SECRET}\"\nsite-dir = \"site\"\n\
             {grace}threads = 2\n{edge_extra}\n"
        );
        let path = dir.path().join("wicket.toml");
        std::fs::write(&path, &text).unwrap();
        let cfg = wicket_edge::WicketConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let issues = cfg.validate();
        assert!(issues.is_empty(), "{issues:?}\n{text}");
        // The HTTPS listener starts apart from the others: waited for too.
        let https: Option<SocketAddr> = cfg.edge.tls.as_ref().and_then(|t| t.listen.parse().ok());
        let (watch, stop) = stop_pair();
        let thread = std::thread::spawn(move || wicket_edge::run(cfg, Box::new(watch)));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
        // Generous: CI runs the test binaries side by side on two cores (once, 20 s was not enough).
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(addr).is_err() || TcpStream::connect(admin).is_err() || https.is_some_and(|a| TcpStream::connect(a).is_err()) {
            // An edge that stopped at start says why (a port another process took meanwhile, ...).
            if thread.is_finished() {
                panic!("the edge stopped at start: {:?}", thread.join());
            }
            assert!(Instant::now() < deadline, "edge did not start within 60 s (listen {addr}, admin {admin})");
            std::thread::sleep(Duration::from_millis(20));
        }
        TestEdge { addr, admin, dir, stop, thread: Some(thread) }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Starts a graceful stop (as SIGTERM does): connections are told to finish, and what is still
    /// running `shutdown-grace-seconds` − 1 later is dropped (at once with the default 1).
    pub fn begin_stop(&self) {
        self.stop.stop();
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    pub async fn admin(&self, method: &str, path: &str, body: &str) -> Resp {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        request(method, &self.admin_url(path), &[("authorization", &auth), ("content-type", "application/json")], body.as_bytes()).await
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Signs in to the console on the admin port, as its page does.
    pub async fn console(&self) -> ConsoleSession {
        let r = request("POST", &self.admin_url("/admin/session"), &[("content-type", "application/json")], format!("{{\"token\":\"{ADMIN_TOKEN}\"}}").as_bytes()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let cookie = r.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
        ConsoleSession { admin: self.admin, cookie, csrf: r.json()["csrf"].as_str().unwrap().to_owned() }
    }
}

/// A signed-in console (cookie and CSRF token), calling the admin API as the page does.
pub struct ConsoleSession {
    pub admin: SocketAddr,
    pub cookie: String,
    pub csrf: String,
}

impl ConsoleSession {
    /// A call from the console page: the cookie, and for changes the CSRF token and the page's origin.
    pub async fn call(&self, method: &str, path: &str, body: &str) -> Resp {
        let origin = format!("http://{}", self.admin);
        let headers = [("cookie", self.cookie.as_str()), ("x-csrf-token", self.csrf.as_str()), ("origin", origin.as_str()), ("content-type", "application/json")];
        let n = if method == "GET" { 1 } else { headers.len() };
        request(method, &format!("http://{}{path}", self.admin), &headers[..n], body.as_bytes()).await
    }
}

impl Drop for TestEdge {
    fn drop(&mut self) {
        self.stop.stop();
        // Not joined: the process ends with the test; Pingora's stop takes about a second.
        drop(self.thread.take());
    }
}

/// Mints an admission token (HS256) like the waiting room will.
pub fn mint_token(room: &str, event: &str, sub: &str, lifetime: i64, issuer: &str, kid: &str, secret: &str) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.typ = Some("admission+jwt".into());
    header.kid = Some(kid.into());
    let claims = serde_json::json!({
        "iss": issuer, "aud": event, "sub": sub, "jti": "0123456789abcdef0123456789abcdef",
        "iat": now, "nbf": now, "exp": now + lifetime, "room": room, "pos": 42, "max_qty": 2,
    });
    jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes())).unwrap()
}

/// An answer read off a raw connection.
#[derive(Debug)]
pub struct RawResp {
    pub status: u16,
    /// The head, lower-cased.
    pub head: String,
    pub body: Vec<u8>,
}

impl RawResp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.head, String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one answer (head, then `Content-Length` bytes or until the peer closes) within 10 s.
pub async fn read_answer<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<RawResp> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let status = head.split(' ').nth(1)?.parse().ok()?;
            let len = head.lines().find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)));
            if let Some(len) = len
                && buf.len() >= end + 4 + len
            {
                return Some(RawResp { status, head, body: buf[end + 4..end + 4 + len].to_vec() });
            }
            if len.is_none() && head.contains("connection: close") {
                // Read to the end below.
            }
        }
        let n = tokio::time::timeout_at(deadline, s.read(&mut chunk)).await.ok()?.ok()?;
        if n == 0 {
            let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let status = head.split(' ').nth(1)?.parse().ok()?;
            return Some(RawResp { status, head, body: buf[end + 4..].to_vec() });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends raw bytes on a fresh connection and reads one answer (`None`: closed without one).
pub async fn raw(addr: SocketAddr, request: &[u8]) -> Option<RawResp> {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.ok()?;
    read_answer(&mut s).await
}

/// A real nginx serving `root` on a free loopback port (a stock origin that normalises paths).
pub type Nginx = NginxWith;

impl NginxWith {
    /// [`start_nginx`] with one server serving the files under `root`.
    pub fn start(root: &std::path::Path) -> Self {
        let port = free_port();
        start_nginx(
            port,
            &format!(
                " server {{\n  listen 127.0.0.1:{port};\n  root {};\n  location / {{ try_files $uri $uri/index.html =404; }}\n }}",
                root.display()
            ),
        )
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Signs a JWT with HS256 from raw header and claims JSON (to make tokens no library would).
pub fn sign_raw(header: &serde_json::Value, claims: &serde_json::Value, secret: &str) -> String {
    use base64::Engine;
    use hmac::Mac;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let input = format!("{}.{}", b64.encode(header.to_string()), b64.encode(claims.to_string()));
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(input.as_bytes());
    format!("{input}.{}", b64.encode(mac.finalize().into_bytes()))
}

// nginx with the shipped nginx-compat/ files (nginx_compat.rs, doors.rs).

pub fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nginx-compat")
}

pub fn nginx_bin() -> &'static str {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].into_iter().find(|p| Path::new(p).exists()).unwrap_or("nginx")
}

/// A real nginx running `http_body` (inside `http { }`) on a port of its own.
pub struct NginxWith {
    pub addr: std::net::SocketAddr,
    pub child: std::process::Child,
    pub dir: tempfile::TempDir,
}

impl Drop for NginxWith {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn nginx_conf(dir: &Path, http_body: &str) -> PathBuf {
    nginx_conf_with(dir, "", http_body)
}

/// [`nginx_conf`] with `main` (e.g. `load_module` lines) at the top of the main context.
pub fn nginx_conf_with(dir: &Path, main: &str, http_body: &str) -> PathBuf {
    let d = dir.display();
    let conf = format!(
        "{main}daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\n\
         events {{ worker_connections 512; }}\n\
         http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n{http_body}\n}}\n"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    path
}

pub fn start_nginx(port: u16, http_body: &str) -> NginxWith {
    start_nginx_with(port, "", http_body)
}

/// [`start_nginx`] with `main` at the top of the main context.
pub fn start_nginx_with(port: u16, main: &str, http_body: &str) -> NginxWith {
    let dir = tempfile::tempdir().unwrap();
    let conf = nginx_conf_with(dir.path(), main, http_body);
    let child = Command::new(nginx_bin())
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx (scripts/test.sh installs it)");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "nginx did not start: {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
    NginxWith { addr, child, dir }
}

/// The shipped wicket-http.conf, its cache zone in the test's own folder (relative to nginx's -p).
pub fn shipped_http_conf() -> String {
    let text = std::fs::read_to_string(compat_dir().join("wicket-http.conf")).unwrap();
    assert!(text.contains("/var/lib/nginx/wicket-auth"), "{text}");
    text.replace("/var/lib/nginx/wicket-auth", "wicket-auth")
}

/// A TLS connection to the edge's HTTPS port as `a.test` that chose `h2` by ALPN.
pub async fn tls_h2(ca: &Path, port: u16) -> tokio_openssl::SslStream<tokio::net::TcpStream> {
    let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls()).unwrap();
    b.set_ca_file(ca).unwrap();
    b.set_alpn_protos(b"\x02h2").unwrap();
    let ssl = b.build().configure().unwrap().into_ssl("a.test").unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = tokio_openssl::SslStream::new(ssl, tcp).unwrap();
    std::pin::Pin::new(&mut tls).connect().await.unwrap();
    assert_eq!(tls.ssl().selected_alpn_protocol(), Some(&b"h2"[..]));
    tls
}

/// A real nginx in front of `edge` with the shipped files: wicket-http.conf in `http`, wicket.conf
/// in the server, then `locations` (where `{c}` names the folder of the shipped snippets).
pub fn compat_nginx(edge: &TestEdge, locations: &str) -> NginxWith {
    let compat = compat_dir().canonicalize().unwrap();
    let port = free_port();
    let locations = locations.replace("{c}", &compat.display().to_string());
    start_nginx(
        port,
        &format!(
            " upstream wicket_edge {{ server {}; keepalive 8; }}\n{}\n\
             server {{\n  listen 127.0.0.1:{port};\n  include {}/wicket.conf;\n  {locations}\n }}",
            edge.addr,
            shipped_http_conf(),
            compat.display()
        ),
    )
}

/// The `load_module` lines of Debian's lua module and the NDK it needs (libnginx-mod-http-lua,
/// which scripts/test.sh installs), read from the package's own files with absolute paths (a
/// test nginx's prefix is its temp folder).
pub fn lua_modules() -> String {
    ["mod-http-ndk.conf", "mod-http-lua.conf"]
        .iter()
        .map(|f| {
            let path = format!("/usr/share/nginx/modules-available/{f}");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (scripts/test.sh installs libnginx-mod-http-lua)"));
            text.replace(" modules/", " /usr/lib/nginx/modules/")
        })
        .collect()
}

/// A real nginx with the lua module in front of `edge`, the OpenResty path's shipped files
/// (wicket-http.conf and wicket-lua-http.conf in `http`, lua/wicket.lua configured by `configure`,
/// the arguments of `require("wicket").configure{}`), wicket.conf in the server, then `locations`
/// (where `{c}` names the folder of the shipped snippets).
pub fn compat_lua_nginx(edge: &TestEdge, configure: &str, locations: &str) -> NginxWith {
    compat_lua_nginx_loading(edge, configure, locations, "")
}

/// The native fast path's module (nginx-compat/native) built for this nginx, once per test process
/// (`nginx-compat/native/build.sh`, which rebuilds only when its source changed): its path.
pub fn native_module() -> String {
    static MODULE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MODULE
        .get_or_init(|| {
            let script = compat_dir().join("native/build.sh");
            let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nginx-native");
            let run = std::process::Command::new("bash").arg(&script).arg(&out).output().expect("bash");
            assert!(
                run.status.success(),
                "{} failed (scripts/test.sh installs nginx-dev, gcc, make, libpcre2-dev, zlib1g-dev): {}",
                script.display(),
                String::from_utf8_lossy(&run.stderr)
            );
            String::from_utf8(run.stdout).unwrap().trim().to_owned()
        })
        .clone()
}

/// [`compat_lua_nginx`] with the native fast path's module loaded after the lua module (the
/// locations include wicket-native-protect.conf).
pub fn compat_native_nginx(edge: &TestEdge, configure: &str, locations: &str) -> NginxWith {
    compat_lua_nginx_loading(edge, configure, locations, &format!("load_module {};\n", native_module()))
}

fn compat_lua_nginx_loading(edge: &TestEdge, configure: &str, locations: &str, modules: &str) -> NginxWith {
    let compat = compat_dir().canonicalize().unwrap();
    let port = free_port();
    let locations = locations.replace("{c}", &compat.display().to_string());
    let lua_http = std::fs::read_to_string(compat.join("wicket-lua-http.conf")).unwrap();
    assert!(lua_http.contains("/etc/nginx/wicket/lua/"), "{lua_http}");
    let lua_http = lua_http.replace("/etc/nginx/wicket/lua/", &format!("{}/lua/", compat.display()));
    start_nginx_with(
        port,
        &(lua_modules() + modules),
        &format!(
            " upstream wicket_edge {{ server {}; keepalive 8; }}\n{}\n{lua_http}\n\
             init_by_lua_block {{ require(\"wicket\").configure{{ edge = \"{}\", {configure} }} }}\n\
             server {{\n  listen 127.0.0.1:{port};\n  include {}/wicket.conf;\n  {locations}\n }}",
            edge.addr,
            shipped_http_conf(),
            edge.addr,
            compat.display()
        ),
    )
}

/// A child process under test, killed (and reaped) if the test ends — or panics — before it exited, so a
/// failed test leaves no server behind.
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// An edge with the core in it (`core = "embedded"`, memory store) selling one event, `ev-1`, open
/// since a minute ago: one pool `pool` of `capacity` tickets and its SKU, `user_max` tickets a
/// user; `rooms` is the edge's `[[rooms]]` TOML (after `user-header = "x-user-id"` and the test
/// tokens).
pub fn edge_with_embedded_sale(name: &str, pool: &str, capacity: u64, user_max: u64, rooms: &str) -> TestEdge {
    let fmt = |t: time::OffsetDateTime| t.format(&time::format_description::well_known::Rfc3339).unwrap();
    let opens = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    let event = serde_json::json!({
        "name": name, "opens_at": fmt(opens), "closes_at": fmt(opens + time::Duration::hours(2)),
        "hold_seconds": 900, "pools": [{"id": pool, "capacity": capacity}],
        "skus": [{"id": pool, "pools": [pool], "price_cents": 100}], "limits": [{"dimension": "user", "max": user_max}]
    });
    let core_port = free_port();
    TestEdge::start_full(
        &format!(
            "listen = \"127.0.0.1:{core_port}\"\nadmin-token = \"{ADMIN_TOKEN}\"\nstore = \"memory\"\nevent-files = [\"ev-1.json\"]\n\
             [payment]\ncallback-secret = \"callback-secret-0123456789\"\n"
        ),
        &format!("core = \"embedded\"\nuser-header = \"x-user-id\"\n{}\n{rooms}", hs_tokens()),
        &[],
        &[("ev-1.json", event.to_string().as_bytes())],
    )
}
