//! HTTPS at the front door: `[edge.tls]`, its certificates (chosen by SNI, reloaded without a
//! restart), the handshake and the encrypted stream ([`TlsStream`]).
//!
//! The public listener's TLS is rustls (with ring's cryptography), not the OpenSSL that Pingora's
//! `openssl` feature links for the edge's own connections to origins, cores and CAPTCHA providers.
//! The reason is memory per queued fan: an idle HTTPS connection holds its TLS state for as long as
//! the fan waits, and OpenSSL 3's state is about 12 KB a connection (its `SSL` object alone, record
//! layer included, is 7.6 KB; nginx holds the same), where rustls's is about 6 KB with its 4 KiB
//! read buffer (bench/results/idle-conns.md). rustls is a pure-Rust, memory-safe TLS stack;
//! Pingora's own rustls feature is marked experimental, so the edge does not switch Pingora's TLS:
//! it does the handshake itself (`tokio-rustls`) and hands Pingora a stream of its own type.
//!
//! Settings: TLS 1.3 and 1.2, forward-secret AEAD ciphers only (AES-GCM, ChaCha20-Poly1305 with
//! ECDHE: Mozilla's "intermediate" profile less its DHE suites), stateless session tickets (keys of
//! this process rotated every 6 hours, or with `ticket-key-files` keys every edge derives alike:
//! [`tickets`]; TLS 1.2 session ids in a 256-entry cache), ALPN `h2` then `http/1.1` (`http/1.1` alone with
//! `http2 = false`; a client that offers only other protocols is refused, as RFC 7301 says).
//! Certificates may be RSA (2048 bits or more), ECDSA P-256 or P-384, or Ed25519 keys.
//!
//! The TLS listener is a second public service ([`crate::server`]): its [`crate::front::Front`]
//! does the handshake itself (within `handshake-timeout-ms`, failures logged at DEBUG and counted,
//! never an ERROR line per scanner), then hands the stream to the proxy, which speaks HTTP/2 or
//! HTTP/1.1 as ALPN chose. Every answer on it carries `Strict-Transport-Security` when
//! `hsts-seconds` is set; with `redirect-http` the plaintext listener answers every request with
//! 308 to the same URL over HTTPS (but `/.well-known/acme-challenge/`, so certificates can be
//! renewed over plain HTTP).
//!
//! Certificates: each `[[edge.tls.certs]]` pair is a chain and a key in PEM; a handshake gets the
//! certificate whose names (subject alternative names, else the common name; `*.example.com`
//! matches one label) match its SNI, and the first pair when none does or the client sent no SNI.
//! [`Tls::reload`] (SIGHUP, `POST /admin/tls/reload`) reads every file again and swaps the set in
//! whole; a file that does not load keeps the old set and the answer names the problem.
//! Connections already open keep the certificate they were made with. The ticket key files are
//! read again with them (all good, or nothing changes).
//!
//! A queued fan's event stream over HTTPS/1.1 reads nothing once its head has left: [`send_only`]
//! takes the connection's keys out of rustls and seals the frames itself (about 4 KB a stream
//! instead of 11: rustls's read buffer and state go).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::SslDigest;
use pingora::protocols::{ALPN, GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream, TimingDigest, UniqueID, UniqueIDType};
use pingora::tls::nid::Nid;
use pingora::tls::x509::X509;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::check::ConfigIssue;
use crate::replay::Replayed;

pub mod send_only;
pub mod tickets;

/// How long a failed handshake's alert may wait for the client to take it.
const ALERT_WAIT: Duration = Duration::from_millis(100);

/// At most this much of an answer is taken in and encrypted ahead of a client that does not read
/// (rustls's default is 64 KiB; OpenSSL took one record): with the records gathered below it
/// ([`crate::replay::under_tls`], up to 16 KiB), a stalled reader holds about 32 KiB, not 80.
const SEND_AHEAD: usize = 16 * 1024;

/// `[edge.tls]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TlsConfig {
    /// HTTPS listen address, e.g. `0.0.0.0:443`.
    pub listen: String,
    /// Certificate chains and keys (PEM); the first is the default.
    pub certs: Vec<CertFiles>,
    /// Offer HTTP/2 by ALPN. Default true.
    #[serde(default = "yes")]
    pub http2: bool,
    /// The plaintext listener answers 308 to HTTPS. Default false.
    #[serde(default)]
    pub redirect_http: bool,
    /// `Strict-Transport-Security: max-age=…` on every HTTPS answer; 0 = not sent. Default 0.
    #[serde(default)]
    pub hsts_seconds: u64,
    /// A handshake must finish within this many milliseconds. Default 10000.
    #[serde(default = "handshake_ms")]
    pub handshake_timeout_ms: u64,
    /// Files of random bytes every edge shares: session tickets sealed with keys derived from the
    /// first, opened with keys of any ([`tickets`]). Empty (the default): keys of this process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ticket_key_files: Vec<String>,
}

fn yes() -> bool {
    true
}

fn handshake_ms() -> u64 {
    10_000
}

/// One `[[edge.tls.certs]]` entry.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CertFiles {
    /// The certificate chain, leaf first (PEM).
    pub cert_file: String,
    /// Its private key (PEM).
    pub key_file: String,
}

impl TlsConfig {
    /// Every problem with its key path (`edge.tls.…`); certificate files are loaded to check them.
    pub fn validate(&self, resolve: &dyn Fn(&str) -> PathBuf) -> Vec<ConfigIssue> {
        let mut out = Vec::new();
        let issue = |path: String, message: String| ConfigIssue { path, message };
        if crate::check::parse_listen(&self.listen).is_none() {
            out.push(issue("edge.tls.listen".into(), format!("not an address like 0.0.0.0:443: {:?}", self.listen)));
        }
        if self.certs.is_empty() {
            out.push(issue("edge.tls.certs".into(), "needs at least one { cert-file, key-file } pair".into()));
        }
        if self.hsts_seconds > 2 * 365 * 86_400 {
            out.push(issue("edge.tls.hsts-seconds".into(), "must be at most two years (63072000)".into()));
        }
        if !(100..=120_000).contains(&self.handshake_timeout_ms) {
            out.push(issue("edge.tls.handshake-timeout-ms".into(), "must be between 100 and 120000".into()));
        }
        for (i, c) in self.certs.iter().enumerate() {
            if let Err((field, m)) = load_pair(&resolve(&c.cert_file), &resolve(&c.key_file)) {
                out.push(issue(format!("edge.tls.certs[{i}].{field}"), m));
            }
        }
        if self.ticket_key_files.len() > tickets::MAX_FILES {
            out.push(issue("edge.tls.ticket-key-files".into(), format!("at most {} files (the first seals, the others open)", tickets::MAX_FILES)));
        }
        for (i, m) in tickets::check(&self.ticket_files(resolve)) {
            out.push(issue(format!("edge.tls.ticket-key-files[{i}]"), m));
        }
        out
    }

    fn ticket_files(&self, resolve: &dyn Fn(&str) -> PathBuf) -> Vec<PathBuf> {
        self.ticket_key_files.iter().map(|f| resolve(f)).collect()
    }
}

/// One loaded certificate: its context and the names it answers for.
struct Loaded {
    key: Arc<CertifiedKey>,
    names: Vec<String>,
    not_after: String,
}

/// A certificate set, chosen from by SNI.
struct Certs {
    loaded: Vec<Loaded>,
    /// Exact host name → index.
    exact: HashMap<String, usize>,
    /// `*.example.com` → index, stored as `example.com`.
    wildcard: HashMap<String, usize>,
}

impl Certs {
    fn load(files: &[(PathBuf, PathBuf)]) -> Result<Certs, Vec<String>> {
        let mut loaded = Vec::new();
        let mut problems = Vec::new();
        for (i, (cert, key)) in files.iter().enumerate() {
            match load_pair(cert, key) {
                Ok(l) => loaded.push(l),
                Err((field, m)) => problems.push(format!("certs[{i}].{field}: {m}")),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let (mut exact, mut wildcard) = (HashMap::new(), HashMap::new());
        for (i, l) in loaded.iter().enumerate() {
            for n in &l.names {
                match n.strip_prefix("*.") {
                    Some(base) => wildcard.entry(base.to_owned()).or_insert(i),
                    None => exact.entry(n.clone()).or_insert(i),
                };
            }
        }
        Ok(Certs { loaded, exact, wildcard })
    }

    /// The certificate for an SNI name (the first one when none matches or no name was sent).
    fn pick(&self, sni: Option<&str>) -> &Arc<CertifiedKey> {
        let i = sni
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .and_then(|n| self.exact.get(&n).copied().or_else(|| n.split_once('.').and_then(|(_, base)| self.wildcard.get(base).copied())))
            .unwrap_or(0);
        &self.loaded[i].key
    }

    fn summary(&self) -> Vec<serde_json::Value> {
        self.loaded.iter().map(|l| serde_json::json!({"names": l.names, "not_after": l.not_after})).collect()
    }
}

/// Loads a chain and its key, checked to belong together; `Err((field, message))` names the file
/// at fault.
fn load_pair(cert: &Path, key: &Path) -> Result<Loaded, (&'static str, String)> {
    let pem = std::fs::read(cert).map_err(|e| ("cert-file", format!("cannot read {}: {e}", cert.display())))?;
    let parsed = X509::stack_from_pem(&pem).map_err(|e| ("cert-file", format!("not a PEM certificate chain: {}: {e}", cert.display())))?;
    let leaf = parsed.first().ok_or(("cert-file", format!("no certificate in {}", cert.display())))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ("cert-file", format!("not a PEM certificate chain: {}: {e}", cert.display())))?;
    let key_pem = std::fs::read(key).map_err(|e| ("key-file", format!("cannot read {}: {e}", key.display())))?;
    let unusable = |e: &dyn std::fmt::Display| {
        ("key-file", format!("not a usable PEM private key (RSA, ECDSA P-256 or P-384, Ed25519): {}: {e}", key.display()))
    };
    let der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| unusable(&e))?;
    let signing = provider().key_provider.load_private_key(der).map_err(|e| unusable(&e))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // `Unknown`: the key cannot tell its public half; the handshake's signature will.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => return Err(("key-file", format!("{} is not the key of {}", key.display(), cert.display()))),
    }
    let names = names_of(leaf);
    if names.is_empty() {
        return Err(("cert-file", format!("{} names no host (no DNS subject alternative name or common name)", cert.display())));
    }
    let now = openssl::asn1::Asn1Time::days_from_now(0).map_err(|e| ("cert-file", format!("TLS library: {e}")))?;
    if leaf.not_after() < now {
        return Err(("cert-file", format!("{} expired on {}", cert.display(), leaf.not_after())));
    }
    let not_after = leaf.not_after().to_string();
    Ok(Loaded { key: Arc::new(certified), names, not_after })
}

/// The cryptography rustls uses here: ring's.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// DNS names of a certificate (lower case): its subject alternative names, else its common name.
fn names_of(cert: &X509) -> Vec<String> {
    let mut names: Vec<String> = cert
        .subject_alt_names()
        .map(|sans| sans.iter().filter_map(|n| n.dnsname().map(str::to_ascii_lowercase)).collect())
        .unwrap_or_default();
    if names.is_empty() {
        names = cert
            .subject_name()
            .entries_by_nid(Nid::COMMONNAME)
            .filter_map(|e| e.data().to_string().ok().map(|s| s.to_ascii_lowercase()))
            .collect();
    }
    names
}

/// Each handshake's certificate, picked by SNI from the set in force ([`Certs::pick`]).
struct BySni(Arc<ArcSwap<Certs>>);

impl std::fmt::Debug for BySni {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BySni").field(&self.0.load().summary()).finish()
    }
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(self.0.load().pick(hello.server_name())))
    }
}

/// The HTTPS listener's TLS: the acceptor, and the certificate set it picks from.
pub struct Tls {
    /// The validated settings.
    pub config: TlsConfig,
    files: Vec<(PathBuf, PathBuf)>,
    certs: Arc<ArcSwap<Certs>>,
    /// The ticket key files and what seals with them, when set.
    shared: Option<(Vec<PathBuf>, Arc<tickets::SharedTickets>)>,
    acceptor: tokio_rustls::TlsAcceptor,
}

/// Each ticket key file's problem, as a reload or a start names it.
fn ticket_problems(problems: Vec<(usize, String)>) -> Vec<String> {
    problems.into_iter().map(|(i, m)| format!("ticket-key-files[{i}]: {m}")).collect()
}

impl Tls {
    /// Loads the certificates and builds the acceptor.
    pub fn new(config: TlsConfig, resolve: &dyn Fn(&str) -> PathBuf) -> Result<Tls, Vec<String>> {
        let files: Vec<(PathBuf, PathBuf)> = config.certs.iter().map(|c| (resolve(&c.cert_file), resolve(&c.key_file))).collect();
        let certs = Arc::new(ArcSwap::from_pointee(Certs::load(&files)?));
        let tls_err = |e: rustls::Error| vec![format!("TLS library: {e}")];
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(tls_err)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(BySni(Arc::clone(&certs))));
        // A queued fan's event stream over HTTPS/1.1 sheds rustls once its answer's head has left
        // and seals its frames with the connection's keys itself ([`send_only`]).
        server.enable_secret_extraction = true;
        server.alpn_protocols = if config.http2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
        // Stateless resumption: tickets sealed with keys every edge derives from the shared files,
        // or with keys of this process (rotated every 6 hours).
        let shared = match config.ticket_key_files.is_empty() {
            true => None,
            false => {
                let paths = config.ticket_files(resolve);
                let t = Arc::new(tickets::SharedTickets::new(tickets::read(&paths).map_err(ticket_problems)?));
                Some((paths, t))
            }
        };
        server.ticketer = match &shared {
            Some((_, t)) => Arc::clone(t) as Arc<dyn rustls::server::ProducesTickets>,
            None => rustls::crypto::ring::Ticketer::new().map_err(tls_err)?,
        };
        Ok(Tls { config, files, certs, shared, acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)) })
    }

    /// Reads every certificate file again and, when all load, serves them to new handshakes;
    /// otherwise keeps the current set and returns the problems.
    pub fn reload(&self) -> Result<serde_json::Value, Vec<String>> {
        let fresh = Certs::load(&self.files);
        let keys = match &self.shared {
            Some((paths, t)) => tickets::read(paths).map(|k| Some((t, k))).map_err(ticket_problems),
            None => Ok(None),
        };
        let (fresh, keys) = match (fresh, keys) {
            (Ok(f), Ok(k)) => (f, k),
            (f, k) => return Err(f.err().unwrap_or_default().into_iter().chain(k.err().unwrap_or_default()).collect()),
        };
        if let Some((t, k)) = keys {
            t.replace(k);
        }
        let summary = serde_json::json!(fresh.summary());
        self.certs.store(Arc::new(fresh));
        tracing::info!("TLS certificates reloaded: {summary}");
        Ok(summary)
    }

    /// The certificates served now (names and expiry), for the admin API.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!(self.certs.load().summary())
    }

    /// Where session tickets' keys come from, for the admin API.
    pub fn tickets_summary(&self) -> serde_json::Value {
        match &self.shared {
            Some((_, t)) => serde_json::json!({"keys": "shared", "files": t.files(), "rotate-s": tickets::PERIOD_S}),
            None => serde_json::json!({"keys": "this-process", "rotate-s": tickets::PERIOD_S}),
        }
    }

    /// The handshake of a new connection, within `handshake-timeout-ms`; the reason, as
    /// `wicket_edge_rejects_total` counts it, when it failed, timed out or the connection closed
    /// before its first byte (`tls_no_hello`: health checks and probes), logged at DEBUG only:
    /// scanners and broken clients are everyday events.
    /// `Ok` says whether the session was resumed.
    pub async fn handshake(&self, stream: Stream) -> Result<(Stream, bool), &'static str> {
        let l4 = stream.into_any().downcast::<pingora::protocols::l4::stream::Stream>().map_err(|_| "tls_handshake_failed")?;
        // The records are gathered until each flush, in a buffer that exists only while there
        // are some (the listener has no write buffer: server.rs).
        let under = crate::replay::under_tls(l4);
        let limit = Duration::from_millis(self.config.handshake_timeout_ms);
        match tokio::time::timeout(limit, self.accept(under)).await {
            Ok(Ok(tls)) => {
                let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                Ok((Box::new(TlsStream(tls)), resumed))
            }
            Ok(Err((_, under))) if !under.has_read() => {
                // Closed before its first byte: a load balancer's TCP health check or a port
                // probe, not a client that failed a handshake.
                tracing::debug!("TLS connection closed before a ClientHello");
                Err("tls_no_hello")
            }
            Ok(Err((e, mut under))) => {
                tracing::debug!("TLS handshake failed: {e}");
                // The alert that says why (no shared cipher or protocol, a bad record...) is
                // gathered below; it leaves now, unless the client does not even read.
                let _ = tokio::time::timeout(ALERT_WAIT, tokio::io::AsyncWriteExt::flush(&mut under)).await;
                Err("tls_handshake_failed")
            }
            Err(_) => {
                tracing::debug!("TLS handshake timed out");
                Err("tls_handshake_timeout")
            }
        }
    }

    /// The handshake over `under`; the IO back with the error when it fails.
    fn accept(&self, under: Replayed) -> tokio_rustls::FallibleAccept<Replayed> {
        self.acceptor
            .accept_with(under, |tls| {
                tls.set_buffer_limit(Some(SEND_AHEAD));
            })
            .into_fallible()
    }

    /// The `Strict-Transport-Security` value, when sent.
    pub fn hsts(&self) -> Option<String> {
        (self.config.hsts_seconds > 0).then(|| format!("max-age={}", self.config.hsts_seconds))
    }
}

/// Adds `Strict-Transport-Security` to every answer of the HTTPS service (the proxy's, and the
/// edge's own: files, queue pages, refusals), as a Pingora downstream module.
pub struct HstsModule(pub http::HeaderValue);

impl pingora::modules::http::HttpModuleBuilder for HstsModule {
    fn init(&self) -> pingora::modules::http::Module {
        Box::new(Hsts(self.0.clone()))
    }
}

struct Hsts(http::HeaderValue);

#[async_trait::async_trait]
impl pingora::modules::http::HttpModule for Hsts {
    async fn response_header_filter(&mut self, resp: &mut pingora::http::ResponseHeader, _end: bool) -> pingora::Result<()> {
        if !resp.status.is_informational() {
            resp.insert_header("strict-transport-security", self.0.clone())?;
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The CA certificates in a PEM file (for verifying an `https://` upstream).
pub fn load_cas(path: &Path) -> Result<Box<[X509]>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let cas = X509::stack_from_pem(&pem).map_err(|e| format!("not PEM certificates: {}: {e}", path.display()))?;
    if cas.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(cas.into_boxed_slice())
}

/// An HTTPS connection after its handshake: rustls over the connection's socket, as Pingora's
/// [`Stream`]. rustls keeps one 4 KiB read buffer; writes are gathered below it until a flush
/// ([`crate::replay::under_tls`]).
pub struct TlsStream(tokio_rustls::server::TlsStream<Replayed>);

/// `stream` reduced to sending ([`send_only`]) when it is an HTTPS/1.1 connection of the listener
/// with its handshake done, nothing of rustls's left to send and nothing received that has not
/// been read: `Ok` with the new stream. `Err(Some)`: not such a connection, given back as it was;
/// `Err(None)`: the keys could not be taken out, and the connection is lost (rustls consumes it).
pub fn send_only(stream: Stream) -> Result<Stream, Option<Stream>> {
    if !stream.as_any().is::<TlsStream>() {
        return Err(Some(stream));
    }
    let Ok(mut tls) = stream.into_any().downcast::<TlsStream>() else { return Err(None) };
    let conn = tls.0.get_mut().1;
    // Records received and not yet decrypted: a pipelined request the stream must see, or the
    // client's `close_notify` (the stream, kept whole, then reads its end at once).
    let quiet = conn
        .process_new_packets()
        .is_ok_and(|st| st.plaintext_bytes_to_read() == 0 && st.tls_bytes_to_write() == 0 && !st.peer_has_closed());
    if !quiet || !send_only::sendable(conn) {
        return Err(Some(tls));
    }
    let (io, conn) = tls.0.into_inner();
    match send_only::SendOnlyTls::new(io, conn) {
        Ok(s) => Ok(Box::new(s)),
        Err(why) => {
            tracing::debug!("an HTTPS event stream could not be reduced to sending: {why}");
            Err(None)
        }
    }
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (io, tls) = self.0.get_ref();
        f.debug_struct("TlsStream").field("io", io).field("version", &tls.protocol_version()).finish()
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let read = Pin::new(&mut self.0).poll_read(cx, buf);
        if let Poll::Ready(Err(e)) = &read
            && e.kind() == std::io::ErrorKind::InvalidData
        {
            // A record that does not decrypt (or another fatal error): rustls wrote the alert that
            // says so below, where writes are gathered until a flush; one try to send it, no wait.
            let _ = Pin::new(self.0.get_mut().0).poll_flush(cx);
        }
        read
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

#[async_trait]
impl Shutdown for TlsStream {
    /// `close_notify`, then the socket's own shutdown.
    async fn shutdown(&mut self) {
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut self.0).await;
    }
}

impl UniqueID for TlsStream {
    fn id(&self) -> UniqueIDType {
        self.0.get_ref().0.id()
    }
}

impl Ssl for TlsStream {
    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        let tls = self.0.get_ref().1;
        let cipher = tls.negotiated_cipher_suite().and_then(|s| s.suite().as_str()).unwrap_or("");
        let version = tls.protocol_version().and_then(|v| v.as_str()).unwrap_or("");
        Some(Arc::new(SslDigest::new(cipher, version, None, None, Vec::new())))
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        match self.0.get_ref().1.alpn_protocol() {
            Some(b"h2") => Some(ALPN::H2),
            Some(b"http/1.1") => Some(ALPN::H1),
            _ => None,
        }
    }
}

impl GetTimingDigest for TlsStream {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.0.get_ref().0.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.0.get_ref().0.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.0.get_ref().0.get_write_pending_time()
    }
}

impl GetProxyDigest for TlsStream {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.0.get_ref().0.get_proxy_digest()
    }
}

impl GetSocketDigest for TlsStream {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.0.get_ref().0.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.0.get_mut().0.set_socket_digest(digest)
    }
}

impl Peek for TlsStream {}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The edge's TLS for `a.test` and a rustls client trusting its test CA.
    fn setup() -> (Tls, Arc<rustls::ClientConfig>, wicket_testkit::pki::Pki) {
        let pki = wicket_testkit::pki::Pki::new();
        let (cert, key) = pki.leaf("a", &["a.test"], 30);
        let files = CertFiles { cert_file: cert.display().to_string(), key_file: key.display().to_string() };
        let cfg = TlsConfig {
            listen: "127.0.0.1:0".into(),
            certs: vec![files],
            http2: true,
            redirect_http: false,
            hsts_seconds: 0,
            handshake_timeout_ms: 5000,
            ticket_key_files: vec![],
        };
        let tls = Tls::new(cfg, &|p| PathBuf::from(p)).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&std::fs::read(pki.path("ca.pem")).unwrap()) {
            roots.add(c.unwrap()).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (tls, Arc::new(client), pki)
    }

    /// A server stream (as [`Tls::handshake`] makes it) and a client over an in-memory pipe of
    /// `cap` bytes each way.
    async fn pair(tls: &Tls, client: Arc<rustls::ClientConfig>, cap: usize) -> (TlsStream, tokio_rustls::client::TlsStream<tokio::io::DuplexStream>) {
        let (a, b) = tokio::io::duplex(cap);
        let server = async { TlsStream(tls.accept(crate::replay::under_tls(Box::new(a))).await.map_err(|(e, _)| e).unwrap()) };
        let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
        let client = async { tokio_rustls::TlsConnector::from(client).connect(name, b).await.unwrap() };
        tokio::join!(server, client)
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_makes_the_edge_hold_little() {
        let (tls, client, _pki) = setup();
        let (mut server, _client) = pair(&tls, client, 4096).await;
        let chunk = vec![0u8; 1024];
        let mut taken = 0usize;
        while let Ok(written) = tokio::time::timeout(Duration::from_millis(200), server.write(&chunk)).await {
            taken += written.unwrap();
        }
        // The pipe's 4 KiB, the records gathered (up to 16 KiB), what rustls encrypts ahead (16 KiB)
        // and a record's overhead: rustls's default would take about 80 KiB.
        assert!(taken <= 4096 + 2 * SEND_AHEAD + 1024, "{taken} bytes taken from the answer of a client that does not read");
        assert!(taken >= SEND_AHEAD, "{taken}");
    }

    #[tokio::test]
    async fn a_record_that_does_not_decrypt_is_answered_with_an_alert() {
        let (tls, client, _pki) = setup();
        let (mut server, client) = pair(&tls, client, 65536).await;
        let (mut raw, _) = client.into_inner();
        // What the server sent after the handshake (its session tickets) is read and set aside.
        let mut tickets = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_millis(200), raw.read(&mut tickets)).await;
        // An application-data record of 32 bytes of zeros.
        raw.write_all(&[23, 3, 3, 0, 32]).await.unwrap();
        raw.write_all(&[0u8; 32]).await.unwrap();
        let mut buf = [0u8; 16];
        let read = server.read(&mut buf).await;
        assert_eq!(read.map_err(|e| e.kind()).err(), Some(std::io::ErrorKind::InvalidData));
        drop(server);
        let mut back = Vec::new();
        let _ = tokio::time::timeout(Duration::from_millis(500), raw.read_to_end(&mut back)).await;
        // An encrypted alert record (TLS 1.3 hides its type: application data, 0x17).
        assert!(back.len() >= 5 && back[0] == 23, "{back:?}");
    }

    #[tokio::test]
    async fn a_close_without_close_notify_is_an_error_and_a_clean_one_the_end() {
        let (tls, config, _pki) = setup();
        let (mut server, client) = pair(&tls, config.clone(), 65536).await;
        drop(client.into_inner().0);
        let mut buf = [0u8; 16];
        // A truncation an attacker could cause: never taken for the end of a request.
        assert_eq!(server.read(&mut buf).await.map_err(|e| e.kind()).err(), Some(std::io::ErrorKind::UnexpectedEof));
        let (mut server, mut client) = pair(&tls, config, 65536).await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"GET / HTTP/1.1\r\n\r\n");
        // The answer still reaches a client that closed its side.
        server.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await.unwrap();
        server.flush().await.unwrap();
        let mut answer = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), client.read(&mut answer)).await.unwrap().unwrap();
        assert_eq!(&answer[..n], b"HTTP/1.1 204 No Content\r\n\r\n");
    }

    /// A client of `a.test` speaking only `version` with only `suite`.
    fn client_with(pki: &wicket_testkit::pki::Pki, version: &'static rustls::SupportedProtocolVersion, suite: rustls::SupportedCipherSuite) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&std::fs::read(pki.path("ca.pem")).unwrap()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = rustls::crypto::CryptoProvider { cipher_suites: vec![suite], ..rustls::crypto::ring::default_provider() };
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// Every version and cipher the listener offers: once its request is read and its head sent
    /// through rustls, a stream reduced to sending seals what follows so that a stock rustls client
    /// reads every byte in order (small writes, and one of several records), and its close is a
    /// clean `close_notify`, not a truncation.
    #[tokio::test]
    async fn a_stream_reduced_to_sending_is_read_whole_by_a_client_of_every_version_and_cipher() {
        use rustls::crypto::ring::cipher_suite as cs;
        let (tls, _, pki) = setup();
        let combos = [
            (&rustls::version::TLS13, cs::TLS13_AES_128_GCM_SHA256),
            (&rustls::version::TLS13, cs::TLS13_AES_256_GCM_SHA384),
            (&rustls::version::TLS13, cs::TLS13_CHACHA20_POLY1305_SHA256),
            (&rustls::version::TLS12, cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
            (&rustls::version::TLS12, cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
            (&rustls::version::TLS12, cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
        ];
        for (version, suite) in combos {
            let what = format!("{:?}", suite.suite());
            let (mut server, mut client) = pair(&tls, client_with(&pki, version, suite), 1 << 20).await;
            assert_eq!(server.0.get_ref().1.negotiated_cipher_suite(), Some(suite), "{what}");
            client.write_all(b"GET /queue/r1/events HTTP/1.1\r\n\r\n").await.unwrap();
            let mut head = [0u8; 64];
            let n = server.read(&mut head).await.unwrap();
            assert_eq!(&head[..n], b"GET /queue/r1/events HTTP/1.1\r\n\r\n", "{what}");
            server.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
            server.flush().await.unwrap();
            let mut stream = match send_only(Box::new(server)) {
                Ok(s) => s,
                Err(_) => panic!("{what}: not reduced"),
            };
            assert!(stream.as_any().is::<send_only::SendOnlyTls>(), "{what}");
            let big: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
            let mut want = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
            for part in [&b"5\r\nhello\r\n"[..], &big, b"0\r\n\r\n"] {
                stream.write_all(part).await.unwrap();
                stream.flush().await.unwrap();
                want.extend_from_slice(part);
            }
            stream.shutdown().await.unwrap();
            let mut got = Vec::new();
            // `Ok` only with the server's close_notify: rustls calls a bare end of file an error.
            tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got)).await.unwrap().unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(got == want, "{what}: {} bytes read, {} sent", got.len(), want.len());
        }
    }

    /// A client that sends anything to a stream reduced to sending (a request, its own
    /// `close_notify`) is an error on the stream's read; one that closes is its end of file; and a
    /// connection with received data not yet read is not reduced (the stream must see it).
    #[tokio::test]
    async fn a_stream_reduced_to_sending_hears_the_client_speak_or_go() {
        let (tls, config, _pki) = setup();
        let reduced = |server: TlsStream| match send_only(Box::new(server)) {
            Ok(s) => s,
            Err(_) => panic!("not reduced"),
        };
        let (server, mut client) = pair(&tls, config.clone(), 65536).await;
        let mut stream = reduced(server);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        let err = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await.unwrap().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        let (server, mut client) = pair(&tls, config.clone(), 65536).await;
        let mut stream = reduced(server);
        client.shutdown().await.unwrap();
        let err = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await.unwrap().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "a close_notify is a record too");
        let (server, client) = pair(&tls, config.clone(), 65536).await;
        let mut stream = reduced(server);
        drop(client);
        let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await.unwrap().unwrap();
        assert_eq!(n, 0);
        // Bytes rustls decrypted and the reader did not take yet: kept whole, and read on.
        let (mut server, mut client) = pair(&tls, config.clone(), 65536).await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\nGET /next HTTP/1.1\r\n\r\n").await.unwrap();
        let mut first = [0u8; 18];
        server.read_exact(&mut first).await.unwrap();
        let mut kept = match send_only(Box::new(server)) {
            Ok(_) => panic!("reduced with a pipelined request unread"),
            Err(kept) => kept.expect("given back"),
        };
        let mut rest = [0u8; 22];
        kept.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"GET /next HTTP/1.1\r\n\r\n");
        // The client's close_notify read with its request: kept whole, and its end read at once.
        let (mut server, mut client) = pair(&tls, config.clone(), 65536).await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        client.shutdown().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut request = [0u8; 64];
        assert_eq!(server.read(&mut request).await.unwrap(), 18);
        let mut kept = match send_only(Box::new(server)) {
            Ok(_) => panic!("reduced after the client's close_notify"),
            Err(kept) => kept.expect("given back"),
        };
        assert_eq!(tokio::time::timeout(Duration::from_secs(2), kept.read(&mut buf)).await.unwrap().unwrap(), 0);
        // A plain stream is given back as it was.
        let (a, _b) = tokio::io::duplex(64);
        assert!(matches!(send_only(Box::new(crate::replay::under_tls(Box::new(a)))), Err(Some(_))));
    }

    /// A client that never reads a stream reduced to sending: the stream takes one sealed record
    /// beyond what the socket's gathering layer holds (16 KiB) and the pipe, then waits; the
    /// stream's write timeout ends it.
    #[tokio::test]
    async fn a_stream_reduced_to_sending_holds_little_for_a_client_that_does_not_read() {
        let (tls, client, _pki) = setup();
        let (server, _client) = pair(&tls, client, 4096).await;
        let mut stream = match send_only(Box::new(server)) {
            Ok(s) => s,
            Err(_) => panic!("not reduced"),
        };
        let chunk = vec![7u8; 1024];
        let mut taken = 0usize;
        while let Ok(written) = tokio::time::timeout(Duration::from_millis(200), stream.write(&chunk)).await {
            taken += written.unwrap();
        }
        assert!(taken <= 4096 + crate::replay::GATHER_MAX + 2048, "{taken} bytes taken from the frames of a client that does not read");
        assert!(taken >= 4096, "{taken}");
    }
}
