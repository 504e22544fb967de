//! HTTPS at the front door: `[edge.tls]`, its certificates (chosen by SNI, reloaded without a
//! restart) and the handshake.
//!
//! TLS is OpenSSL through Pingora's own `openssl` feature (`pingora::tls` is the `openssl` crate):
//! the system's libssl (OpenSSL 3.0 on Debian 12), linked dynamically because the repository's
//! `.cargo/config.toml` sets `OPENSSL_NO_VENDOR=1` over the OpenSSL 3.6 that Pingora's feature builds
//! into the binary (`openssl-src`; `OPENSSL_NO_VENDOR=0` builds that one: its state costs an idle
//! HTTPS connection about 7.5 KB more, bench/RESULTS.md "Idle connections"), Mozilla's "intermediate" settings
//! (TLS 1.2 and 1.3, forward-secret AEAD ciphers), session resumption (tickets and the server
//! cache), ALPN `h2` then `http/1.1`. Why not rustls: Pingora marks it experimental; BoringSSL
//! builds from source (cmake, a C++ toolchain, minutes of CI) for the same handshake.
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
//! Connections already open keep the certificate they were made with.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use pingora::protocols::Stream;
use pingora::tls::nid::Nid;
use pingora::tls::ssl::{AlpnError, NameType, SniError, SslAcceptor, SslContext, SslFiletype, SslMethod, SslMode, SslRef, select_next_proto};
use pingora::tls::x509::X509;
use serde::{Deserialize, Serialize};

use crate::check::ConfigIssue;

/// ALPN protocols offered, in preference order (wire format).
const ALPN_H2_H1: &[u8] = b"\x02h2\x08http/1.1";
const ALPN_H1: &[u8] = b"\x08http/1.1";

/// `[edge.tls]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
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
}

fn yes() -> bool {
    true
}

fn handshake_ms() -> u64 {
    10_000
}

/// One `[[edge.tls.certs]]` entry.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
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
            if let Err((field, m)) = load_pair(&resolve(&c.cert_file), &resolve(&c.key_file), self.http2) {
                out.push(issue(format!("edge.tls.certs[{i}].{field}"), m));
            }
        }
        out
    }
}

/// One loaded certificate: its context and the names it answers for.
struct Loaded {
    context: SslContext,
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
    fn load(files: &[(PathBuf, PathBuf)], h2: bool) -> Result<Certs, Vec<String>> {
        let mut loaded = Vec::new();
        let mut problems = Vec::new();
        for (i, (cert, key)) in files.iter().enumerate() {
            match load_pair(cert, key, h2) {
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
    fn pick(&self, sni: Option<&str>) -> &SslContext {
        let i = sni
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .and_then(|n| self.exact.get(&n).copied().or_else(|| n.split_once('.').and_then(|(_, base)| self.wildcard.get(base).copied())))
            .unwrap_or(0);
        &self.loaded[i].context
    }

    fn summary(&self) -> Vec<serde_json::Value> {
        self.loaded.iter().map(|l| serde_json::json!({"names": l.names, "not_after": l.not_after})).collect()
    }
}

/// Loads a chain and key into a context of their own (Mozilla intermediate, ALPN, resumption);
/// `Err((field, message))` names the file at fault.
fn load_pair(cert: &Path, key: &Path, h2: bool) -> Result<Loaded, (&'static str, String)> {
    let pem = std::fs::read(cert).map_err(|e| ("cert-file", format!("cannot read {}: {e}", cert.display())))?;
    let chain = X509::stack_from_pem(&pem).map_err(|e| ("cert-file", format!("not a PEM certificate chain: {}: {e}", cert.display())))?;
    let leaf = chain.first().ok_or(("cert-file", format!("no certificate in {}", cert.display())))?;
    let key_pem = std::fs::read(key).map_err(|e| ("key-file", format!("cannot read {}: {e}", key.display())))?;
    let private = pingora::tls::pkey::PKey::private_key_from_pem(&key_pem)
        .map_err(|e| ("key-file", format!("not a usable PEM private key: {}: {e}", key.display())))?;
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).map_err(|e| ("cert-file", format!("TLS library: {e}")))?;
    b.set_certificate_chain_file(cert).map_err(|e| ("cert-file", format!("not a usable certificate chain: {}: {e}", cert.display())))?;
    let mismatch = || ("key-file", format!("{} is not the key of {}", key.display(), cert.display()));
    b.set_private_key(&private).map_err(|_| mismatch())?;
    b.check_private_key().map_err(|_| mismatch())?;
    b.set_session_id_context(b"wicket").map_err(|e| ("cert-file", format!("TLS library: {e}")))?;
    b.set_alpn_select_callback(if h2 { select_h2_h1 } else { select_h1 });
    b.set_mode(SslMode::RELEASE_BUFFERS);
    let names = names_of(leaf);
    if names.is_empty() {
        return Err(("cert-file", format!("{} names no host (no DNS subject alternative name or common name)", cert.display())));
    }
    let now = openssl::asn1::Asn1Time::days_from_now(0).map_err(|e| ("cert-file", format!("TLS library: {e}")))?;
    if leaf.not_after() < now {
        return Err(("cert-file", format!("{} expired on {}", cert.display(), leaf.not_after())));
    }
    let not_after = leaf.not_after().to_string();
    Ok(Loaded { context: b.build().into_context(), names, not_after })
}

fn select_h2_h1<'a>(_: &mut SslRef, client: &'a [u8]) -> Result<&'a [u8], AlpnError> {
    select_next_proto(ALPN_H2_H1, client).ok_or(AlpnError::NOACK)
}

fn select_h1<'a>(_: &mut SslRef, client: &'a [u8]) -> Result<&'a [u8], AlpnError> {
    select_next_proto(ALPN_H1, client).ok_or(AlpnError::NOACK)
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

/// The HTTPS listener's TLS: the acceptor, and the certificate set it picks from.
pub struct Tls {
    /// The validated settings.
    pub config: TlsConfig,
    files: Vec<(PathBuf, PathBuf)>,
    certs: Arc<ArcSwap<Certs>>,
    acceptor: SslAcceptor,
}

impl Tls {
    /// Loads the certificates and builds the acceptor.
    pub fn new(config: TlsConfig, resolve: &dyn Fn(&str) -> PathBuf) -> Result<Tls, Vec<String>> {
        let files: Vec<(PathBuf, PathBuf)> = config.certs.iter().map(|c| (resolve(&c.cert_file), resolve(&c.key_file))).collect();
        let certs = Arc::new(ArcSwap::from_pointee(Certs::load(&files, config.http2)?));
        let tls_err = |e: pingora::tls::error::ErrorStack| vec![format!("TLS library: {e}")];
        let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).map_err(tls_err)?;
        // The handshake's context is the SNI's certificate's (its chain, key and ALPN).
        let pick = Arc::clone(&certs);
        b.set_servername_callback(move |ssl, _alert| {
            let set = pick.load();
            let ctx = set.pick(ssl.servername(NameType::HOST_NAME));
            ssl.set_ssl_context(ctx).map_err(|_| SniError::ALERT_FATAL)
        });
        b.set_alpn_select_callback(if config.http2 { select_h2_h1 } else { select_h1 });
        b.set_session_id_context(b"wicket").map_err(tls_err)?;
        // Read what the socket has, not one record header then one record body: a client's
        // HTTP/2 frames arrive as many small records, two `recvfrom` each without it.
        b.set_read_ahead(true);
        // An idle connection gives its TLS record buffers back (about 34 KB: a read and a write
        // buffer of one full record each) and gets them again for its next record, as nginx does:
        // a million queued fans on HTTPS hold their sockets, not their buffers.
        b.set_mode(SslMode::RELEASE_BUFFERS);
        // A client that sends no SNI still gets the default certificate.
        let (cert, key) = &files[0];
        b.set_certificate_chain_file(cert).map_err(|e| vec![format!("certs[0].cert-file: {e}")])?;
        b.set_private_key_file(key, SslFiletype::PEM).map_err(|e| vec![format!("certs[0].key-file: {e}")])?;
        Ok(Tls { config, files, certs, acceptor: b.build() })
    }

    /// Reads every certificate file again and, when all load, serves them to new handshakes;
    /// otherwise keeps the current set and returns the problems.
    pub fn reload(&self) -> Result<serde_json::Value, Vec<String>> {
        let fresh = Certs::load(&self.files, self.config.http2)?;
        let summary = serde_json::json!(fresh.summary());
        self.certs.store(Arc::new(fresh));
        tracing::info!("TLS certificates reloaded: {summary}");
        Ok(summary)
    }

    /// The certificates served now (names and expiry), for the admin API.
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!(self.certs.load().summary())
    }

    /// The handshake of a new connection, within `handshake-timeout-ms`; `None` when it failed
    /// or timed out (logged at DEBUG: scanners and broken clients are everyday events).
    pub async fn handshake(&self, stream: Stream) -> Option<Stream> {
        let l4 = stream.into_any().downcast::<pingora::protocols::l4::stream::Stream>().ok()?;
        // The records are gathered until each flush, in a buffer that exists only while there
        // are some (the listener has no write buffer: server.rs).
        let under = crate::replay::under_tls(l4);
        let limit = Duration::from_millis(self.config.handshake_timeout_ms);
        match tokio::time::timeout(limit, pingora::protocols::tls::server::handshake(&self.acceptor, under)).await {
            Ok(Ok(tls)) => Some(Box::new(tls)),
            Ok(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!("TLS handshake timed out");
                None
            }
        }
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
