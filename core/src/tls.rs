//! The core's API over HTTPS (`[tls]`), for an edge and a core on different hosts.
//!
//! OpenSSL through the `openssl` crate, the binding Pingora's `openssl` feature already builds the edge's
//! client side on (the edge's connections to the core use it). The edge's public listener speaks rustls
//! instead, for the memory a million idle fans' connections hold (edge/src/tls.rs); the core serves a few
//! long-lived connections from edges, where that does not count. Mozilla's "intermediate" settings (TLS 1.2 and 1.3, forward-secret
//! AEAD ciphers); ALPN `http/1.1` only, since [`crate::serve`] speaks HTTP/1 (a client offering only `h2`
//! gets no ALPN answer and may go on with HTTP/1.1). The files are read once, at start: a new certificate
//! takes a restart (the edge's reload is for public certificates renewed every few weeks; the core's is
//! usually a private CA's with a long life).
//!
//! [`TlsAcceptor::handshake`] runs on the connection's own task with its own deadline, so a client that
//! opens a connection and never finishes the handshake holds nothing but that task until the deadline, and
//! bytes that are not TLS (plain HTTP on the TLS port, a scanner) fail the handshake at once: the
//! connection is closed without an answer.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openssl::ssl::{AlpnError, Ssl, SslAcceptor, SslMethod, SslRef, select_next_proto};
use openssl::x509::X509;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

/// `[tls]`: the core's listener speaks HTTPS: TLS 1.2 or 1.3, ALPN `http/1.1`. The files
/// are read at start (a new certificate takes a restart).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TlsConfig {
    /// The certificate chain, leaf first (PEM), relative to the config file's folder. Required. The edge
    /// checks it for the host of its `core = "https://host:port"` URL.
    pub cert_file: PathBuf,
    /// The certificate's private key (PEM), relative to the config file's folder. Required.
    pub key_file: PathBuf,
    /// A handshake must finish within this many milliseconds, or the connection is closed (the request
    /// head then has its own `core.header-timeout-ms`). 100..=120000, default 10000.
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
}

fn default_handshake_timeout_ms() -> u64 {
    10_000
}

/// ALPN protocols offered (wire format): HTTP/1.1 only.
const ALPN_H1: &[u8] = b"\x08http/1.1";

/// A certificate file problem: the config key at fault (`tls.cert-file` or `tls.key-file`) and why.
pub type TlsProblem = (&'static str, String);

/// The listener's TLS: an acceptor built from `[tls]` and the handshake deadline. Cheap to clone.
#[derive(Clone)]
pub struct TlsAcceptor {
    acceptor: Arc<SslAcceptor>,
    handshake_timeout: Duration,
}

impl TlsAcceptor {
    /// Loads the certificate chain and key of `config` (paths already made absolute by the config).
    pub fn new(config: &TlsConfig) -> Result<TlsAcceptor, TlsProblem> {
        Ok(TlsAcceptor {
            acceptor: Arc::new(load(&config.cert_file, &config.key_file)?),
            handshake_timeout: Duration::from_millis(config.handshake_timeout_ms),
        })
    }

    /// The server side of the handshake on `tcp`, within `tls.handshake-timeout-ms`; `Err` says why it
    /// failed (for a DEBUG line: scanners and broken clients are everyday events).
    pub async fn handshake(&self, tcp: TcpStream) -> Result<SslStream<TcpStream>, String> {
        let ssl = Ssl::new(self.acceptor.context()).map_err(|e| format!("TLS library: {e}"))?;
        let mut stream = SslStream::new(ssl, tcp).map_err(|e| format!("TLS library: {e}"))?;
        match tokio::time::timeout(self.handshake_timeout, Pin::new(&mut stream).accept()).await {
            Ok(Ok(())) => Ok(stream),
            Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
            Err(_) => Err(format!("TLS handshake not finished within {} ms", self.handshake_timeout.as_millis())),
        }
    }
}

/// Builds an acceptor from a chain (leaf first) and its key, both PEM; every problem names its key.
fn load(cert: &Path, key: &Path) -> Result<SslAcceptor, TlsProblem> {
    const CERT: &str = "tls.cert-file";
    const KEY: &str = "tls.key-file";
    let pem = std::fs::read(cert).map_err(|e| (CERT, format!("cannot read {}: {e}", cert.display())))?;
    let chain = X509::stack_from_pem(&pem).map_err(|e| (CERT, format!("not a PEM certificate chain: {}: {e}", cert.display())))?;
    let leaf = chain.first().ok_or((CERT, format!("no certificate in {}", cert.display())))?;
    let now = openssl::asn1::Asn1Time::days_from_now(0).map_err(|e| (CERT, format!("TLS library: {e}")))?;
    if leaf.not_after() < now {
        return Err((CERT, format!("{} expired on {}", cert.display(), leaf.not_after())));
    }
    let key_pem = std::fs::read(key).map_err(|e| (KEY, format!("cannot read {}: {e}", key.display())))?;
    let private = openssl::pkey::PKey::private_key_from_pem(&key_pem)
        .map_err(|e| (KEY, format!("not a usable PEM private key: {}: {e}", key.display())))?;
    // Mozilla intermediate: TLS 1.2 at least.
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).map_err(|e| (CERT, format!("TLS library: {e}")))?;
    b.set_certificate_chain_file(cert).map_err(|e| (CERT, format!("not a usable certificate chain: {}: {e}", cert.display())))?;
    let mismatch = || (KEY, format!("{} is not the key of {}", key.display(), cert.display()));
    b.set_private_key(&private).map_err(|_| mismatch())?;
    b.check_private_key().map_err(|_| mismatch())?;
    b.set_alpn_select_callback(select_h1);
    Ok(b.build())
}

fn select_h1<'a>(_: &mut SslRef, client: &'a [u8]) -> Result<&'a [u8], AlpnError> {
    select_next_proto(ALPN_H1, client).ok_or(AlpnError::NOACK)
}
