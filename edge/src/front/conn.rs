//! What the doors of one connection share: the listener's settings ([`Front`]), its
//! `Strict-Transport-Security` answer, the hand-over of a request to the proxy, and the wait for
//! a connection's next bytes without a buffer of its own ([`first_read`]). It imports no
//! door; each door and the listener ([`super`]) import it.

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use pingora::apps::HttpServerApp;
use pingora::protocols::Stream;
use pingora::protocols::http::ServerSession;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncRead, ReadBuf};

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

/// The first read of a request head, into the worker thread's buffer ([`first_read`]); longer
/// heads are read on into a buffer of their own (up to [`crate::reject::MAX_REQUEST_HEAD`]).
pub(crate) const FIRST_READ: usize = 4 * 1024;

thread_local! {
    /// The worker thread's buffer for first reads (see [`first_read`]).
    static FIRST_READ_BUF: RefCell<Box<[u8; FIRST_READ]>> = RefCell::new(Box::new([0; FIRST_READ]));
}

/// Waits for the next request's first bytes and returns them (empty: the client closed).
///
/// While it waits the connection holds no buffer: each poll reads into its worker thread's
/// buffer, which a read that is not ready leaves untouched, and only bytes that arrived are
/// copied out, into a vector of their own size. An idle keep-alive connection then costs its
/// socket and a small future, as with nginx (which also frees an idle connection's buffer).
pub(crate) async fn first_read(stream: &mut Stream) -> std::io::Result<Vec<u8>> {
    std::future::poll_fn(|cx| {
        FIRST_READ_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            let mut read = ReadBuf::new(&mut buf[..]);
            match Pin::new(&mut *stream).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(read.filled().to_vec())),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
    })
    .await
}
