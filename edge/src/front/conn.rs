//! What the doors of one connection share: the listener's settings ([`Front`]), its
//! `Strict-Transport-Security` answer, and the hand-over of a request to the proxy. It imports no
//! door; each door and the listener ([`super`]) import it.

use std::sync::Arc;

use pingora::apps::HttpServerApp;
use pingora::protocols::Stream;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;

use crate::state::EdgeState;

/// What the doors hand a request over to: an HTTP app served a connection at a time (in the edge,
/// Pingora's proxy).
pub trait Handover: HttpServerApp + Send + Sync + 'static {}

impl<T: HttpServerApp + Send + Sync + 'static> Handover for T {}

/// The public listener's app: a door (HTTP/1.1 or HTTP/2), else the proxy `P` it hands over to.
pub struct Front<P> {
    /// Shared state.
    pub state: Arc<EdgeState>,
    /// Where a door hands what it does not carry out: Pingora's proxy ([`super::proxy::EdgeProxy`] in
    /// an `HttpProxy`, put together by [`crate::server`]).
    pub proxy: Arc<P>,
    /// On the HTTPS listener: the handshake to do on each new connection (then the proxy
    /// serves it, HTTP/2 or HTTP/1.1).
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// On the plaintext listener with `redirect-http`: the HTTPS port every request is sent to.
    pub https_redirect: Option<u16>,
    /// On the HTTPS listener with `hsts-seconds`: `Strict-Transport-Security`, added to the fast
    /// path's answers (the proxy's get it from a module).
    pub hsts: Option<Hsts>,
}

/// A `Strict-Transport-Security` value, and the same as an HTTP/1.1 header line for the answers
/// written as bytes.
pub struct Hsts {
    /// The value (`max-age=…`), for the HTTP/2 answers ([`super::h2`]).
    pub value: http::HeaderValue,
    /// `\r\nstrict-transport-security: <value>`.
    line: Vec<u8>,
}

impl Hsts {
    pub fn new(value: http::HeaderValue) -> Self {
        let mut line = b"\r\nstrict-transport-security: ".to_vec();
        line.extend_from_slice(value.as_bytes());
        Hsts { value, line }
    }
}

impl<P: Handover> Front<P> {
    pub(crate) async fn to_proxy(self: &Arc<Self>, stream: Stream, read: &[u8], shutdown: &ShutdownWatch) -> Option<Stream> {
        // Put the bytes back so the proxy reads the request from its start, with its writes
        // gathered until a flush (the listener has no write buffer: see server.rs). Under TLS too:
        // an answer's head, a chunk's size line, its data and its end then leave as one TLS record,
        // not one each (an event stream's frame was three records when each write made one).
        let stream = crate::replay::buffered(stream, read);
        // This one request only: the connection then comes back to the front for the next one.
        // (Pingora's own HTTP/1.1 loop would keep it for every later request: past the fast path,
        // and holding its session's buffers while the client is idle.) Keep-alive is set per
        // request, by the proxy's `early_request_filter`.
        let session = ServerSession::new_http1(stream);
        let (stream, _) = self.proxy.process_new_http(session, shutdown).await?.consume();
        Some(stream)
    }

    /// The `Strict-Transport-Security` line the fast answers carry on HTTPS (empty otherwise).
    pub(crate) fn hsts_line(&self) -> &[u8] {
        self.hsts.as_ref().map_or(b"", |h| &h.line)
    }
}
