//! The public listeners' entry: each new connection's TLS handshake (on the HTTPS listener), then
//! HTTP/2 ([`crate::fast_h2`]) or HTTP/1.1 ([`crate::fast`]), each of which hands what it does not
//! answer itself to the proxy.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use tokio::io::AsyncReadExt;

use crate::fast::{FIRST_READ, FastFront};

#[async_trait]
impl ServerApp for FastFront {
    /// Every request head on a plain TCP connection passes here: read whole (within
    /// `header-timeout-ms` and [`MAX_REQUEST_HEAD`]), checked ([`crate::path`]), then answered
    /// here or handed to the proxy with its bytes put back.
    ///
    /// An idle keep-alive connection holds only this function's small state (the first-read
    /// buffer and the wait); the work on a request is a boxed future of its own, allocated while
    /// the request is handled.
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        let st = &self.state;
        let fresh = stream.as_any().is::<pingora::protocols::l4::stream::Stream>();
        let mut stream = match &self.tls {
            // A new HTTPS connection: the handshake first.
            Some(tls) if fresh => match tls.handshake(stream).await {
                Some(secured) => secured,
                None => return None,
            },
            // HTTPS, a request after the first: the same front.
            Some(_) => stream,
            None if fresh => stream,
            None => return Box::pin(self.proxy.process_new(stream, shutdown)).await,
        };
        if stream.selected_alpn_proto() == Some(pingora::protocols::ALPN::H2) {
            // HTTP/2: Pingora's connection, with the fast answers on it (crate::fast_h2).
            return Box::pin(crate::fast_h2::serve(self, stream, shutdown)).await;
        }
        let idle = Duration::from_secs(st.keepalive);
        // Wait for a request at most the keep-alive timeout, and not past the start of a stop.
        let mut stop = shutdown.clone();
        if *stop.borrow() {
            return Box::pin(self.proxy.process_new(stream, shutdown)).await;
        }
        // On the heap, not in this future: Pingora boxes the future of every request, and a
        // buffer inside it would be copied into that box each time.
        let mut first = Vec::with_capacity(FIRST_READ);
        let read = tokio::select! {
            r = tokio::time::timeout(idle, stream.read_buf(&mut first)) => r,
            _ = stop.changed() => return None,
        };
        let filled = match read {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        Box::pin(self.serve(stream, &first[..filled], shutdown)).await
    }
}

