//! The core's HTTP/1 server: accepts connections and runs hyper on each, with a deadline on request heads.
//!
//! `axum::serve` gives hyper no timer, and without one hyper reads a request head for as long as bytes keep
//! coming: a client trickling one byte every few seconds holds a connection (a file descriptor, a task, its
//! buffer) forever, and a few thousand such clients exhaust the core. Here every connection gets hyper's
//! `header_read_timeout` on a Tokio timer: the whole head must arrive within `core.header-timeout-ms` of
//! the first read, however it trickles. hyper starts the same deadline when a kept-alive connection goes idle,
//! so it is also the keep-alive idle timeout. Once the head is in, the request is the router's ([`crate::http`]).
//!
//! With `[tls]` ([`crate::tls`]) each accepted connection first completes a TLS handshake, on its own task and
//! within `tls.handshake-timeout-ms`, so a handshake that never finishes holds up no other connection and bytes
//! that are not TLS close the connection; then hyper runs on the TLS stream with the same head deadline.
//!
//! Shutdown is graceful: stop accepting, let each connection finish the request it is serving, close idle
//! ones; a connection still sending its head is closed at its deadline at the latest.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;

use crate::tls::TlsAcceptor;

/// Pause after an accept error that is not about one connection (out of file descriptors, say), so the loop
/// does not spin while it lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` completes, then waits for the open connections to finish.
/// `header_timeout`: the deadline of a request head, and of an idle kept-alive connection. `tls`: each
/// connection first completes a TLS handshake (within its own deadline, on the connection's task), and the
/// head deadline starts after it.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    header_timeout: Duration,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(header_timeout).keep_alive(true);
    let http = Arc::new(http);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Watched from the start: shutdown waits for a handshake in progress too (bounded by its deadline).
        let watcher = graceful.watcher();
        let (http, router, tls) = (Arc::clone(&http), router.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(&http, TokioIo::new(stream), router, watcher, peer).await,
                Some(tls) => match tls.handshake(stream).await {
                    Ok(stream) => serve_connection(&http, TokioIo::new(stream), router, watcher, peer).await,
                    Err(e) => tracing::debug!(%peer, "{e}"),
                },
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Runs hyper on one connection (plain or after its handshake) until it closes.
async fn serve_connection<I>(http: &hyper::server::conn::http1::Builder, io: I, router: axum::Router, watcher: Watcher, peer: SocketAddr)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let conn = watcher.watch(http.serve_connection(io, TowerToHyperService::new(router)));
    // Timeouts and resets are the client's doing: not worth more than a debug line each.
    if let Err(e) = conn.await {
        tracing::debug!(%peer, error = %e, timeout = e.is_timeout(), "connection closed with an error");
    }
}

/// An accept error about one connection (it went away before it was accepted): just take the next one.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset)
}
