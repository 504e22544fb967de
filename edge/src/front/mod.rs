//! The public listeners: each new connection's TLS handshake (on the HTTPS listener), then the
//! door for its protocol, which asks [`crate::decide`] and carries the decision out, handing what
//! it does not carry out itself to Pingora's proxy.
//!
//! The doors sit side by side here and none imports another (tests/structure.rs):
//! - [`http1`]: the HTTP/1.1 door (the head read and checked, files, status polls, refusals),
//!   with [`forward`], its way to a plain-HTTP origin over the edge's own pooled connections;
//! - [`h2`]: the HTTP/2 door (Pingora's connection, the same answers per stream);
//! - [`proxy`]: Pingora's proxy phases (`ProxyHttp`), the door of everything the others hand over
//!   and of nginx's `/wicket/auth`.
//!
//! [`Front`] (in `conn`, with what every door shares: HSTS, the handover to the proxy) is generic
//! over what it hands over to ([`Handover`]), so the HTTP/1.1 and HTTP/2 doors never name the
//! proxy; [`crate::server`] puts the two together.

mod conn;
pub mod forward;
pub mod h2;
pub mod http1;
pub mod proxy;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;

pub use conn::{Front, Handover, Hsts};
use conn::next_request_bytes;


#[async_trait]
impl<P: Handover> ServerApp for Front<P> {
    /// Every new connection is served by a task of its own ([`Front::connection`] on HTTPS,
    /// [`Front::serve_on`] on plain TCP); Pingora's task for it ends here.
    ///
    /// Pingora's task holds, for the whole life of the connection, the futures of its accept-side
    /// handshake (unused here: the listener is plain TCP, the front does TLS itself) and of its
    /// 60 s handshake timeout, boxed timer included: about 2.9 KB per connection, idle or not,
    /// against a few hundred bytes for the front's own task.
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        if self.tls.is_some() {
            tokio::spawn(Arc::clone(self).connection(stream, shutdown.clone()));
        } else {
            // Plain TCP: no handshake, and the task is the loop alone.
            tokio::spawn(Arc::clone(self).serve_on(stream, shutdown.clone()));
        }
        None
    }
}

impl<P: Handover> Front<P> {
    /// A connection from its TLS handshake (on the HTTPS listener) to its close (see
    /// [`Front::serve_on`]).
    pub async fn connection(self: Arc<Self>, stream: Stream, shutdown: ShutdownWatch) {
        let stream = match &self.tls {
            // A new HTTPS connection: the handshake first (its state boxed, gone once done).
            Some(tls) => match Box::pin(tls.handshake(stream)).await {
                Ok((secured, resumed)) => {
                    self.state.metrics.tls_handshakes[usize::from(resumed)].inc();
                    secured
                }
                Err(reason) => {
                    self.state.metrics.rejects.with_label_values(&[reason]).inc();
                    return;
                }
            },
            None => stream,
        };
        self.serve_on(stream, shutdown).await;
    }

    /// Serves a connection's requests one after another until it closes (also where an event
    /// stream's task goes on with its connection once the stream has ended): each request head
    /// read whole (within `header-timeout-ms` and [`crate::reject::MAX_REQUEST_HEAD`]), checked
    /// ([`crate::path`]), then answered here or handed to the proxy with its bytes put back; the
    /// proxy hands each connection back after one request (on plain HTTP perhaps wrapped by
    /// `replay::buffered`).
    ///
    /// One loop, not a function per request: an idle keep-alive connection's whole task is this
    /// future while it waits — the wait (no buffer: `first_read`, and after a second its socket
    /// alone, `Parked`: Pingora's stream object is made again when the client speaks), the
    /// front and the stop signal. The work on a request is a boxed future of its own,
    /// allocated while the request is handled.
    pub(crate) async fn serve_on(self: Arc<Self>, mut stream: Stream, mut shutdown: ShutdownWatch) {
        loop {
            let back = if stream.selected_alpn_proto() == Some(pingora::protocols::ALPN::H2) {
                // HTTP/2: Pingora's connection, with the door's answers on it.
                Box::pin(h2::serve(&self, stream, &shutdown)).await
            } else if *shutdown.borrow() {
                // A stop has begun: the proxy answers (and closes).
                Box::pin(self.proxy.process_new(stream, &shutdown)).await
            } else {
                // Wait for a request at most the keep-alive timeout, and not past the start of a stop.
                let idle = Duration::from_secs(self.state.keepalive);
                let Some((waited, first)) = next_request_bytes(stream, idle, &mut shutdown, &self.state.metrics.parked).await else { return };
                Box::pin(http1::serve(&self, waited, &first, &shutdown)).await
            };
            match back {
                Some(s) => stream = s,
                None => return,
            }
        }
    }
}
