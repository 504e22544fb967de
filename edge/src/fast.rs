//! The static fast path: plain `GET`/`HEAD` of a file from memory, answered before Pingora's
//! HTTP machinery sees the request.
//!
//! Pingora builds a request header map, a session, a context and a chain of boxed phase futures
//! for every request; for a page that is a hash lookup and one write, that is most of the cost
//! (a bare Pingora responder measured 0.74–0.93× nginx here). [`FastFront`] sits in front of the
//! proxy on the public listener: it parses the request head with `httparse` into a stack array,
//! and when the request is a simple HTTP/1.1 `GET`/`HEAD` of a static file, it applies the IP
//! blocklist and IP limits with the socket peer, then writes the precomputed header prefix, the
//! cached `Date`, and the body into the connection's write buffer: one syscall, no allocation.
//! Anything else (another method or version, a body, `Connection: close`, `Upgrade`, a user or
//! device limit, trusted proxies, a blocked or limited client, a head split over reads or over
//! 8 KiB, a non-TCP stream) is handed to the full proxy ([`crate::proxy`]) untouched: the bytes
//! read so far are put back into the stream first.
//!
//! The answers are the same as the slow path's (`serve_static` in [`crate::proxy`]): same
//! status, ETag, `Cache-Control`, `Vary`, encodings, 304 and HEAD handling.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::proxy::HttpProxy;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::LimitKey;
use crate::limit::{Subject, Verdict};
use crate::metrics::{Outcome, Route};
use crate::proxy::EdgeProxy;
use crate::state::{EdgeState, QUEUE_PREFIX};
use crate::statics::{Asset, none_match};

/// Longest request head the fast path reads; longer ones go to the proxy.
const MAX_HEAD: usize = 8 * 1024;
/// Most request headers the fast path parses; more go to the proxy.
const MAX_HEADERS: usize = 48;

/// The public listener's app: the fast path, else the proxy.
pub struct FastFront {
    /// Shared state.
    pub state: Arc<EdgeState>,
    /// The full proxy.
    pub proxy: Arc<HttpProxy<EdgeProxy>>,
}

enum Head {
    /// Serve this asset; the head is `len` bytes.
    Static {
        asset: Arc<Asset>,
        head: bool,
        len: usize,
        path: (usize, usize),
        accept_encoding: (usize, usize),
        inm: Option<(usize, usize)>,
    },
    /// Anything else: the proxy.
    Proxy,
}

impl FastFront {
    fn classify(&self, buf: &[u8]) -> Option<Head> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let len = match req.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return None,
            Err(_) => return Some(Head::Proxy),
        };
        let head = match req.method {
            Some("GET") => false,
            Some("HEAD") => true,
            _ => return Some(Head::Proxy),
        };
        if req.version != Some(1) {
            return Some(Head::Proxy);
        }
        let target = req.path.unwrap_or("");
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let st = &self.state;
        let Some(asset) = st.statics.get(path) else { return Some(Head::Proxy) };
        // Limits by user or device need the identity, and X-Forwarded-For needs the full
        // header walk: those requests take the proxy. IP limits and the IP blocklist are applied
        // here with the socket peer.
        let mut limited = false;
        for r in st.limits.rules.iter().filter(|r| r.applies(path, QUEUE_PREFIX)) {
            if r.rule.key != LimitKey::Ip || !st.client_ip.is_plain() {
                return Some(Head::Proxy);
            }
            limited = true;
        }
        if (limited || st.blocklist.any()) && !st.client_ip.is_plain() {
            return Some(Head::Proxy);
        }
        let base = buf.as_ptr() as usize;
        let span = |v: &[u8]| (v.as_ptr() as usize - base, v.len());
        let (mut ae, mut inm) = ((0, 0), None);
        for h in req.headers.iter() {
            let n = h.name.as_bytes();
            if n.eq_ignore_ascii_case(b"accept-encoding") {
                ae = span(h.value);
            } else if n.eq_ignore_ascii_case(b"if-none-match") {
                inm = Some(span(h.value));
            } else if n.eq_ignore_ascii_case(b"content-length") {
                if h.value != b"0" {
                    return Some(Head::Proxy);
                }
            } else if n.eq_ignore_ascii_case(b"transfer-encoding")
                || n.eq_ignore_ascii_case(b"upgrade")
                || n.eq_ignore_ascii_case(b"expect")
                || (n.eq_ignore_ascii_case(b"connection") && !h.value.eq_ignore_ascii_case(b"keep-alive"))
            {
                return Some(Head::Proxy);
            }
        }
        let path = span(path.as_bytes());
        Some(Head::Static { asset: Arc::clone(asset), head, len, path, accept_encoding: ae, inm })
    }

    /// IP blocklist and IP limits for a static file; `Some(())` when the proxy must answer.
    async fn guard(&self, stream: &Stream, path: &str) -> Option<()> {
        let st = &self.state;
        let applies = |r: &&crate::limit::RuleLimiter| r.applies(path, QUEUE_PREFIX);
        if !st.blocklist.any() && !st.limits.rules.iter().any(|r| applies(&r)) {
            return None;
        }
        let ip = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()))
            .map(|ip| st.client_ip.resolve_peer(ip))?;
        if st.blocklist.ip(&ip) {
            return Some(());
        }
        let subject = Subject::Ip(ip);
        let mut paced = Vec::new();
        for (i, r) in st.limits.rules.iter().enumerate().filter(|(_, r)| applies(r)) {
            match r.check(&subject) {
                Verdict::Pass => {}
                Verdict::Paced => paced.push(i),
                Verdict::Refuse(_) => return Some(()),
            }
        }
        for i in paced {
            st.limits.rules[i].pace(&subject).await;
        }
        None
    }

    async fn to_proxy(self: &Arc<Self>, stream: Stream, read: &[u8], shutdown: &ShutdownWatch) -> Option<Stream> {
        let stream = if read.is_empty() {
            stream
        } else {
            // Put the bytes back so the proxy reads the request from its start.
            let mut l4 = stream.into_any().downcast::<pingora::protocols::l4::stream::Stream>().ok()?;
            l4.rewind(read);
            l4
        };
        self.proxy.process_new(stream, shutdown).await
    }
}

#[async_trait]
impl ServerApp for FastFront {
    async fn process_new(self: &Arc<Self>, mut stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        if !stream.as_any().is::<pingora::protocols::l4::stream::Stream>() || self.state.statics.is_empty() {
            return self.proxy.process_new(stream, shutdown).await;
        }
        let mut buf = [0u8; MAX_HEAD];
        let idle = Duration::from_secs(self.state.keepalive);
        // Wait for a request at most the keep-alive timeout, and not past the start of a stop.
        let mut stop = shutdown.clone();
        if *stop.borrow() {
            return self.proxy.process_new(stream, shutdown).await;
        }
        let read = tokio::select! {
            r = tokio::time::timeout(idle, stream.read(&mut buf)) => r,
            _ = stop.changed() => return None,
        };
        let filled = match read {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        // A head split over reads (rare for a GET) or over MAX_HEAD goes to the proxy.
        let classified = self.classify(&buf[..filled]).unwrap_or(Head::Proxy);
        let Head::Static { asset, head, len, path, accept_encoding, inm } = classified else {
            return self.to_proxy(stream, &buf[..filled], shutdown).await;
        };
        let path = std::str::from_utf8(&buf[path.0..path.0 + path.1]).unwrap_or("/");
        if self.guard(&stream, path).await.is_some() {
            // Blocked or over a limit: the proxy answers (a refused check consumed nothing, so
            // the proxy's own check refuses it again and renders the answer).
            return self.to_proxy(stream, &buf[..filled], shutdown).await;
        }
        let ae = &buf[accept_encoding.0..accept_encoding.0 + accept_encoding.1];
        let (_, variant) = asset.choose(ae);
        let heads = &variant.wire;
        let not_modified = inm.is_some_and(|(o, l)| none_match(&buf[o..o + l], variant.etag.as_bytes()));
        let date = pingora::protocols::http::date::get_cached_date();
        let write = async {
            stream.write_all(if not_modified { &heads.not_modified } else { &heads.ok }).await?;
            stream.write_all(date.as_bytes()).await?;
            stream.write_all(b"\r\n\r\n").await?;
            if !not_modified && !head {
                stream.write_all(&variant.body).await?;
            }
            stream.flush().await
        };
        if write.await.is_err() {
            return None;
        }
        self.state.metrics.request(Route::Static, if not_modified { Outcome::NotModified } else { Outcome::Ok });
        if *shutdown.borrow() {
            return None;
        }
        if filled > len {
            // Pipelined bytes of the next request: give them back to the stream.
            let mut l4 = stream.into_any().downcast::<pingora::protocols::l4::stream::Stream>().ok()?;
            l4.rewind(&buf[len..filled]);
            return Some(l4);
        }
        Some(stream)
    }
}
