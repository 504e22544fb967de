//! The fast path: plain `GET`/`HEAD` of a file from memory, and a queued visitor's status poll,
//! answered before Pingora's HTTP machinery sees the request.
//!
//! Pingora builds a request header map, a session, a context and a chain of boxed phase futures
//! for every request; for a page that is a hash lookup and one write, that is most of the cost
//! (a bare Pingora responder measured 0.74–0.93× nginx here). [`FastFront`] sits in front of the
//! proxy on the public listener: it parses the request head with `httparse` into a stack array,
//! and when the request is a simple HTTP/1.1 `GET`/`HEAD` of a static file, it applies the IP
//! blocklist and IP limits with the socket peer, then writes the precomputed header prefix, the
//! cached `Date`, and the body in one write (one syscall; plain HTTP has no write buffer).
//! Anything else (another method or version, a body, `Connection: close`, `Upgrade`, a user or
//! device limit, trusted proxies, a blocked or limited client, a file under a protected prefix, a
//! path not spelled canonically, a non-TCP stream) is handed to the full proxy ([`crate::proxy`])
//! untouched: the bytes read so far are put back into the stream first.
//!
//! It is also the gate of every request head on a plain TCP connection: the head is read whole
//! before anything else happens (a 4 KiB first read, then at most [`MAX_REQUEST_HEAD`] within
//! `header-timeout-ms` of its first byte: 431 / 408 otherwise), and malformed heads, ambiguous
//! targets and the head rules of [`crate::path`] are answered here with the edge's JSON 400, so
//! Pingora never buffers a megabyte of head nor waits forever for a trickled one.
//!
//! The answers are the same as the slow path's (`serve_static` in [`crate::proxy`]): same
//! status, ETag, `Cache-Control`, `Vary`, encodings, 304 and HEAD handling.
//!
//! Status polls (`GET /queue/<room>/status`) are the hottest dynamic request of a sale: every
//! queued person sends one every few seconds. The fast path answers one when it writes nothing:
//! a valid device cookie and queue ticket, no blocked user or device, the device-users anomaly
//! rule observed, IP limits and blocklist applied as for files, and a place still behind
//! `serving` (or a closed, sold-out or not-yet-open room) — [`crate::room::Rooms::waiting_status`].
//! Everything else (no or a bad ticket, a missing device cookie, the visitor's turn, a random
//! room's first poll after opening, user or device limits) goes to the proxy, which answers it the
//! long way ([`crate::room::http`]) with the same JSON.

use std::sync::Arc;
use std::time::Duration;

use pingora::apps::HttpServerApp;
use pingora::protocols::http::ServerSession;
use pingora::protocols::Stream;
use pingora::proxy::HttpProxy;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::limit::LimitKey;
use crate::identity::{DEVICE_COOKIE, HeadView, cookie, header_bytes};
use crate::metrics::{Outcome, Route};
use crate::proxy::EdgeProxy;
use crate::reject::MAX_REQUEST_HEAD;
use crate::room::ticket::{QueueTicket, cookie_name};
use crate::state::{EdgeState, QUEUE_PREFIX};
use crate::statics::{Asset, none_match};

/// The first read of a request head, into the worker thread's buffer (`front::first_read`); longer
/// heads are read on into a buffer of their own (up to [`MAX_REQUEST_HEAD`]).
pub(crate) const FIRST_READ: usize = 4 * 1024;
/// Most request headers accepted (431 above).
const MAX_HEADERS: usize = 100;
/// Answers up to this size go out in one write; larger bodies in chunks of it.
const ONE_WRITE: usize = 64 * 1024;

/// The public listener's app: the fast path, else the proxy.
pub struct FastFront {
    /// Shared state.
    pub state: Arc<EdgeState>,
    /// The full proxy.
    pub proxy: Arc<HttpProxy<EdgeProxy>>,
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
    /// The value (`max-age=…`), for the HTTP/2 answers ([`crate::fast_h2`]).
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

/// What the fast path does with a request.
pub(crate) enum Fast<'b> {
    /// Serve this file (`head`: no body).
    Static { asset: Arc<Asset>, head: bool, path: &'b str },
    /// A status poll of this room.
    Status { room: &'b str, path: &'b str },
    /// A plain request for the origin: the forwarded fast path ([`crate::forward`]).
    Forward { path: &'b str },
    /// Anything else: the proxy.
    Proxy,
}

impl FastFront {
    /// Whether the IP blocklist or an IP limit applies to a fast-path request for `path`.
    pub(crate) fn needs_guard(&self, path: &str) -> bool {
        let st = &self.state;
        st.blocklist.any() || st.limits.rules.iter().any(|r| r.applies(path, QUEUE_PREFIX))
    }

    /// IP blocklist and IP limits for a fast-path request; `Some(())` when the proxy must answer.
    pub(crate) async fn guard(&self, peer: Option<std::net::IpAddr>, path: &str) -> Option<()> {
        let st = &self.state;
        if !self.needs_guard(path) {
            return None;
        }
        let Some(peer) = peer else { return Some(()) };
        let ip = st.client_ip.resolve_peer(peer);
        if st.blocklist.ip(&ip) {
            return Some(());
        }
        // Only IP rules apply here (classify sends user and device limits to the proxy).
        let Ok(paced) = st.check_limits(path, ip, None, None) else { return Some(()) };
        for (i, subject) in paced {
            st.limits.rules[i].pace(&subject).await;
        }
        None
    }

    async fn to_proxy(self: &Arc<Self>, stream: Stream, read: &[u8], shutdown: &ShutdownWatch) -> Option<Stream> {
        // Put the bytes back so the proxy reads the request from its start; on plain HTTP, with
        // its writes gathered until a flush (the listener has no write buffer: see server.rs).
        let stream = match self.tls {
            Some(_) => crate::replay::put_back(stream, read),
            None => crate::replay::buffered(stream, read),
        };
        // This one request only: the connection then comes back to the front for the next one.
        // (Pingora's own HTTP/1.1 loop would keep it for every later request: past the fast path,
        // and holding its session's buffers while the client is idle.) Keep-alive is set per
        // request, by the proxy's `early_request_filter`.
        let session = ServerSession::new_http1(stream);
        let (stream, _) = self.proxy.process_new_http(session, shutdown).await?.consume();
        Some(stream)
    }

    /// The `Strict-Transport-Security` line the fast answers carry on HTTPS (empty otherwise).
    fn hsts_line(&self) -> &[u8] {
        self.hsts.as_ref().map_or(b"", |h| &h.line)
    }
}

/// How a head read ended when it did not produce a request.
enum HeadRead {
    /// The client went away, or sent nothing before the idle timeout, or the edge is stopping.
    Gone,
    /// The head is refused: answer this and close.
    Refuse(u16, &'static str, &'static str),
}

impl FastFront {
    /// Reads the rest of a head that did not fit the first read, within the header deadline and
    /// [`MAX_REQUEST_HEAD`]; the bytes read so far are in `spill`.
    async fn read_rest(&self, stream: &mut Stream, spill: &mut Vec<u8>, deadline: tokio::time::Instant) -> Result<(), HeadRead> {
        loop {
            match head_len(spill) {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => {}
                Err(r) => return Err(r),
            }
            if spill.len() >= MAX_REQUEST_HEAD {
                return Err(HeadRead::Refuse(431, "bad_request", "request head too large"));
            }
            spill.reserve(4096.min(MAX_REQUEST_HEAD + 1 - spill.len()));
            match tokio::time::timeout_at(deadline, stream.read_buf(spill)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => return Err(HeadRead::Gone),
                Err(_) => return Err(HeadRead::Refuse(408, "bad_request", "the request head did not arrive in time")),
            }
        }
    }

    /// Answers a refused head with the edge's JSON error and closes the connection.
    async fn refuse(&self, mut stream: Stream, status: u16, code: &str, message: &str) -> Option<Stream> {
        let body = serde_json::json!({"error": code, "message": message}).to_string();
        let reason = http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
        let answer = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        self.state.metrics.rejects.with_label_values(&[if status == 431 { "headers_too_large" } else { "bad_request" }]).inc();
        let write = async {
            stream.write_all(answer.as_bytes()).await?;
            stream.flush().await
        };
        let _ = tokio::time::timeout(self.state.timeouts.client_write, write).await;
        None
    }

    /// Handles one complete request head: refused, answered here, or handed to the proxy.
    async fn handle(self: &Arc<Self>, mut stream: Stream, req: httparse::Request<'_, '_>, buf: &[u8], len: usize, shutdown: &ShutdownWatch) -> Option<Stream> {
        let st = &self.state;
        let target = req.path.unwrap_or("");
        let canonical = match crate::path::canonical_target(target) {
            Ok(c) => c,
            Err(e) => return self.refuse(stream, 400, "bad_request", e.message()).await,
        };
        let proto = crate::path::Proto::http1(req.version);
        let fields = || req.headers.iter().map(|h| (h.name.as_bytes(), h.value));
        if let Err(e) = crate::path::check_head(proto, target, fields()) {
            return self.refuse(stream, 400, "bad_request", e.message()).await;
        }
        // The one rule for every answer written here: a request that announces a body, or whose
        // client does not keep the connection, gets its answer and then the connection closes
        // (the unread body would otherwise be read as the next request: smuggling).
        let keep = crate::path::reusable_without_body(proto, fields());
        if let Some(port) = self.https_redirect
            && !canonical.starts_with("/.well-known/acme-challenge/")
        {
            let query = target.split_once('?').map(|(_, q)| q);
            let answer = https_redirect(header_bytes(&*req.headers, "host").unwrap_or_default(), port, &canonical, query, keep);
            if write_answer(&mut stream, &[&answer], b"", st.timeouts.client_write).await.is_err() {
                return None;
            }
            st.metrics.request(Route::Edge, Outcome::Ok);
            return self.next_request(stream, buf, len, keep);
        }
        // A path spelled other than canonically takes the proxy, which rewrites it.
        let fast = match canonical {
            std::borrow::Cow::Borrowed(_) if target.starts_with('/') => classify(st, &req),
            _ => Fast::Proxy,
        };
        let timeout = st.timeouts.client_write;
        let (route, outcome) = match fast {
            // httparse takes some bytes in a target that the proxy's URI parser does not (it would
            // answer a bare 400): refuse those here, in the edge's words.
            Fast::Proxy if !proxy_can_parse(target) => return self.refuse(stream, 400, "bad_request", "invalid characters in the request target").await,
            Fast::Proxy => return self.to_proxy(stream, buf, shutdown).await,
            Fast::Static { asset, head, path } => {
                if self.guard(peer_ip(&stream), path).await.is_some() {
                    // Blocked or over a limit: the proxy answers (a refused check consumed
                    // nothing, so the proxy's own check refuses it again and renders the answer).
                    return self.to_proxy(stream, buf, shutdown).await;
                }
                let ae = header_bytes(&*req.headers, "accept-encoding").unwrap_or_default();
                let (_, variant) = asset.choose(ae);
                let not_modified = header_bytes(&*req.headers, "if-none-match").is_some_and(|v| none_match(v, variant.etag.as_bytes()));
                let heads = &variant.wire;
                let date = pingora::protocols::http::date::get_cached_date();
                let head_bytes = if not_modified { &heads.not_modified } else { &heads.ok };
                let body: &[u8] = if not_modified || head { b"" } else { &variant.body };
                if write_answer(&mut stream, &[head_bytes, date.as_bytes(), self.hsts_line(), b"\r\n\r\n"], body, timeout).await.is_err() {
                    return None;
                }
                (Route::Static, if not_modified { Outcome::NotModified } else { Outcome::Ok })
            }
            Fast::Forward { path } => {
                let Some(peer) = peer_ip(&stream) else { return self.to_proxy(stream, buf, shutdown).await };
                let Some(fwd) = crate::forward::decide(st, peer, req.headers, path).await else {
                    return self.to_proxy(stream, buf, shutdown).await;
                };
                match crate::forward::forward(st, &mut stream, &req, fwd, self.hsts_line()).await {
                    crate::forward::Forwarded::Done => {}
                    crate::forward::Forwarded::Close => return None,
                }
                if *shutdown.borrow() {
                    return None;
                }
                return self.next_request(stream, buf, len, keep);
            }
            Fast::Status { room, path } => {
                // Only a poll this path answers is counted here: one it hands to the proxy (no or a
                // bad ticket, the visitor's turn, ...) is counted by the proxy, once. The answer is
                // write-free, so asking first changes nothing.
                let Some(answer) = status_answer(st, req.headers, room, self.hsts_line()) else {
                    return self.to_proxy(stream, buf, shutdown).await;
                };
                if self.guard(peer_ip(&stream), path).await.is_some() {
                    return self.to_proxy(stream, buf, shutdown).await;
                }
                if write_answer(&mut stream, &[&answer], b"", timeout).await.is_err() {
                    return None;
                }
                (Route::Edge, Outcome::Ok)
            }
        };
        st.metrics.request(route, outcome);
        if *shutdown.borrow() {
            return None;
        }
        self.next_request(stream, buf, len, keep)
    }

    /// The connection after an answered request: closed unless `keep` (see [`Self::handle`]);
    /// else pipelined bytes of the next request (past `len`) are given back to the stream.
    fn next_request(&self, stream: Stream, buf: &[u8], len: usize, keep: bool) -> Option<Stream> {
        keep.then(|| crate::replay::put_back(stream, &buf[len.min(buf.len())..]))
    }
}

/// A 308 to the same URL over HTTPS (`Host` without its port, then `port` unless it is 443);
/// `Connection: close` unless `keep`.
fn https_redirect(host: &[u8], port: u16, path: &str, query: Option<&str>, keep: bool) -> Vec<u8> {
    let host = std::str::from_utf8(host).unwrap_or("");
    // `[v6]:port` or `name:port`: keep the name.
    let name = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    };
    let port = if port == 443 { String::new() } else { format!(":{port}") };
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    let date = pingora::protocols::http::date::get_cached_date();
    let date = date.to_str().unwrap_or("");
    let close = if keep { "" } else { "Connection: close\r\n" };
    format!(
        "HTTP/1.1 308 Permanent Redirect\r\nLocation: https://{name}{port}{path}{query}\r\nContent-Length: 0\r\n\
         Cache-Control: no-store\r\nDate: {date}\r\n{close}\r\n"
    )
    .into_bytes()
}

/// The client's address on a TCP stream.
fn peer_ip(stream: &Stream) -> Option<std::net::IpAddr> {
    stream.get_socket_digest().and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()))
}

/// Whether the proxy (Pingora, the `http` crate) can parse this request target.
fn proxy_can_parse(target: &str) -> bool {
    http::Uri::try_from(target).is_ok()
}

/// Length of a complete head, `None` while it is incomplete, or the refusal of a malformed one.
fn head_len(buf: &[u8]) -> Result<Option<usize>, HeadRead> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::Request::new(&mut headers).parse(buf) {
        Ok(httparse::Status::Complete(n)) => Ok(Some(n)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(malformed(e)),
    }
}

fn malformed(e: httparse::Error) -> HeadRead {
    match e {
        httparse::Error::TooManyHeaders => HeadRead::Refuse(431, "bad_request", "too many request headers"),
        _ => HeadRead::Refuse(400, "bad_request", "malformed request head"),
    }
}

/// Writes `parts` then `body` within `timeout`: in one write when they are small (one segment,
/// one syscall), else the head and then the body in chunks, each chunk within `timeout`.
async fn write_answer(stream: &mut Stream, parts: &[&[u8]], body: &[u8], timeout: Duration) -> std::io::Result<()> {
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "client write timed out");
    let head_len: usize = parts.iter().map(|p| p.len()).sum();
    if head_len + body.len() <= ONE_WRITE {
        let mut out = Vec::with_capacity(head_len + body.len());
        for p in parts {
            out.extend_from_slice(p);
        }
        out.extend_from_slice(body);
        let write = async {
            stream.write_all(&out).await?;
            stream.flush().await
        };
        return tokio::time::timeout(timeout, write).await.map_err(|_| timed_out())?;
    }
    let head = async {
        stream.write_all(&parts.concat()).await?;
        stream.flush().await
    };
    tokio::time::timeout(timeout, head).await.map_err(|_| timed_out())??;
    for chunk in body.chunks(ONE_WRITE) {
        let write = async {
            stream.write_all(chunk).await?;
            stream.flush().await
        };
        tokio::time::timeout(timeout, write).await.map_err(|_| timed_out())??;
    }
    Ok(())
}

impl FastFront {
    /// Reads the rest of a head whose first bytes are `got`, and handles the request.
    pub(crate) async fn serve(self: &Arc<Self>, mut stream: Stream, got: &[u8], shutdown: &ShutdownWatch) -> Option<Stream> {
        let deadline = tokio::time::Instant::now() + self.state.timeouts.header;
        // The header slots are on the heap, uninitialised: in this future they would be copied
        // into its box at every request (it is boxed per request, so that an idle connection
        // holds only a small future).
        let mut slots: Vec<httparse::Header<'_>> = Vec::with_capacity(MAX_HEADERS);
        {
            let mut req = httparse::Request::new(&mut []);
            match req.parse_with_uninit_headers(got, slots.spare_capacity_mut()) {
                Ok(httparse::Status::Complete(len)) => return self.handle(stream, req, got, len, shutdown).await,
                Ok(httparse::Status::Partial) => {}
                Err(e) => {
                    let HeadRead::Refuse(status, code, msg) = malformed(e) else { return None };
                    return self.refuse(stream, status, code, msg).await;
                }
            }
        }
        // A head longer than the first read (long cookies, or a slow client).
        let mut spill = got.to_vec();
        match self.read_rest(&mut stream, &mut spill, deadline).await {
            Ok(()) => {}
            Err(HeadRead::Gone) => return None,
            Err(HeadRead::Refuse(status, code, msg)) => return self.refuse(stream, status, code, msg).await,
        }
        let mut slots: Vec<httparse::Header<'_>> = Vec::with_capacity(MAX_HEADERS);
        let mut req = httparse::Request::new(&mut []);
        match req.parse_with_uninit_headers(&spill, slots.spare_capacity_mut()) {
            Ok(httparse::Status::Complete(len)) => self.handle(stream, req, &spill, len, shutdown).await,
            _ => None,
        }
    }
}

/// What the fast path does with a parsed HTTP/1.1 request head.
fn classify<'b>(st: &EdgeState, req: &httparse::Request<'_, 'b>) -> Fast<'b> {
    match (req.version, req.method) {
        (Some(1), Some(method)) => classify_head(st, method, req.path.unwrap_or(""), req.headers.iter().map(|h| (h.name.as_bytes(), h.value))),
        _ => Fast::Proxy,
    }
}

/// What the fast path does with a request: its method, target and headers (HTTP/1.1 or HTTP/2).
pub(crate) fn classify_head<'b, 'h>(st: &EdgeState, method: &str, target: &'b str, headers: impl Iterator<Item = (&'h [u8], &'h [u8])>) -> Fast<'b> {
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Fast::Proxy,
    };
    // The path without its query.
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let fast = if let Some(asset) = st.statics.get(path) {
        Fast::Static { asset: Arc::clone(asset), head, path }
    } else if let Some(room) = path.strip_prefix(QUEUE_PREFIX).and_then(|r| r.strip_suffix("/status"))
        && !head
        && !room.contains('/')
    {
        Fast::Status { room, path }
    } else if forwardable(st, path) {
        Fast::Forward { path }
    } else {
        return Fast::Proxy;
    };
    if !matches!(fast, Fast::Forward { .. }) {
        // A file under a protected prefix needs an admission check: the proxy does it.
        if st.rooms.protection().find(path).is_some() {
            return Fast::Proxy;
        }
        // Limits by user or device need the identity, and X-Forwarded-For needs the full
        // header walk: those requests take the proxy. IP limits and the IP blocklist are applied
        // here with the socket peer.
        let mut limited = false;
        for r in st.limits.rules.iter().filter(|r| r.applies(path, QUEUE_PREFIX)) {
            if r.rule.key != LimitKey::Ip || !st.client_ip.is_plain() {
                return Fast::Proxy;
            }
            limited = true;
        }
        if (limited || st.blocklist.any()) && !st.client_ip.is_plain() {
            return Fast::Proxy;
        }
    }
    for (n, value) in headers {
        if n.eq_ignore_ascii_case(b"content-length") {
            if value != b"0" {
                return Fast::Proxy;
            }
        } else if n.eq_ignore_ascii_case(b"transfer-encoding")
            || n.eq_ignore_ascii_case(b"upgrade")
            || n.eq_ignore_ascii_case(b"expect")
            || (n.eq_ignore_ascii_case(b"connection") && !value.eq_ignore_ascii_case(b"keep-alive"))
        {
            return Fast::Proxy;
        }
    }
    fast
}

/// Whether a path not answered by the edge itself may take the forwarded fast path: a path of
/// the origin (not the edge's, a room's or the core's) with no bot check on its route, without
/// trusted proxies (whose `X-Forwarded-For` walk the proxy does), to a plain-HTTP origin (an
/// `https://` origin takes the proxy's TLS connections).
fn forwardable(st: &EdgeState, path: &str) -> bool {
    st.fast_forward
        && st.origin.as_ref().is_some_and(|o| !o.tls)
        && st.client_ip.is_plain()
        && !path.starts_with("/wicket/")
        && !st.rooms.owns(path)
        && !st.core_prefixes.iter().any(|p| path.starts_with(p.as_str()))
        && (!st.bot.any() || st.bot.mode(path) == crate::bot::BotCheckMode::Off)
}

/// The whole HTTP/1.1 answer to a queued visitor's status poll, or `None` when the proxy must
/// answer (see the module doc).
fn status_answer(st: &EdgeState, headers: &[httparse::Header<'_>], room_id: &str, extra: &[u8]) -> Option<Vec<u8>> {
    let body = status_body(st, headers, room_id)?;
    let date = pingora::protocols::http::date::get_cached_date();
    let mut out = Vec::with_capacity(160 + body.len());
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nContent-Length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\nDate: ");
    out.extend_from_slice(date.as_bytes());
    out.extend_from_slice(extra);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&body);
    Some(out)
}

/// The JSON body of a queued visitor's status poll, or `None` when the proxy must answer. Runs
/// the same identity checks as the proxy, in the same order.
pub(crate) fn status_body<H: HeadView + ?Sized>(st: &EdgeState, headers: &H, room_id: &str) -> Option<Vec<u8>> {
    let room = st.rooms.get(room_id)?;
    let user = st.users.user(headers);
    let device = cookie(headers, DEVICE_COOKIE).and_then(|v| st.devices.verify(v))?;
    if st.identity_refused(user, &crate::identity::Device::Cookie(device.to_owned())) {
        return None;
    }
    let ticket = cookie(headers, &cookie_name(&room.id))?;
    let owner = st.rooms.owner(&room.id, user.unwrap_or(device));
    let ticket = QueueTicket::decode(ticket, &st.rooms.signer, &room.id, device, &owner)
        .filter(|t| room.ticket_valid(t.issued_at, crate::bot::unix_now()))?;
    let status = st.rooms.waiting_status(&room, &ticket)?;
    serde_json::to_vec(&status).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WicketConfig;

    fn state() -> EdgeState {
        let text = "[edge]\nsecret = \"fast-path-test-secret-0123456789\"\nuser-header = \"x-user-id\"\n\
                    [edge.anomaly]\ndevice-max-users = 2\n\
                    [tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n\
                    [[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"hs-secret-for-fast-tests-0123456789abcdef\"\n\
                    [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
                    release = { mode = \"fixed\", rate = 0.0 }\n";
        EdgeState::build(WicketConfig::from_toml_str(text).unwrap()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A queued visitor's cookie header: device `wicket_d` and a ticket for place `n`'s holder.
    async fn visitor(st: &EdgeState, user: &str) -> (String, String) {
        let (device, device_cookie) = st.devices.issue();
        let room = st.rooms.get("r1").unwrap();
        let t = st.rooms.join(&room, user, &device).await.unwrap();
        (device, format!("a=b; wicket_d={device_cookie}; wicket_q_r1={}", t.encode(&st.rooms.signer)))
    }

    fn poll(st: &EdgeState, cookies: &str, user: Option<&str>) -> Option<serde_json::Value> {
        let mut headers = vec![httparse::Header { name: "Cookie", value: cookies.as_bytes() }];
        if let Some(u) = user {
            headers.push(httparse::Header { name: "X-User-Id", value: u.as_bytes() });
        }
        let answer = status_answer(st, &headers, "r1", b"")?;
        let text = String::from_utf8(answer).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("Content-Type: application/json\r\n") && head.contains("Cache-Control: no-store\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())), "{head}");
        Some(serde_json::from_str(body).unwrap())
    }

    fn kind(st: &EdgeState, head: &str) -> &'static str {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        assert!(req.parse(head.as_bytes()).unwrap().is_complete());
        match classify(st, &req) {
            Fast::Static { .. } => "static",
            Fast::Status { .. } => "status",
            Fast::Forward { .. } => "forward",
            Fast::Proxy => "proxy",
        }
    }

    #[test]
    fn status_polls_and_files_take_the_fast_path_and_nothing_else_does() {
        let st = state();
        let get = |path: &str, extra: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        assert_eq!(kind(&st, &get("/queue/r1/status", "")), "status");
        assert_eq!(kind(&st, &get("/queue/r1/status?t=1", "Connection: keep-alive\r\n")), "status");
        assert_eq!(kind(&st, &get("/static/queue.js", "")), "static");
        for (head, why) in [
            ("HEAD /queue/r1/status HTTP/1.1\r\nHost: x\r\n\r\n".to_string(), "HEAD"),
            ("POST /queue/r1/status HTTP/1.1\r\nHost: x\r\n\r\n".to_string(), "POST"),
            ("GET /queue/r1/status HTTP/1.0\r\nHost: x\r\n\r\n".to_string(), "HTTP/1.0"),
            (get("/queue/r1/status", "Connection: close\r\n"), "connection close"),
            (get("/queue/r1/status", "Content-Length: 3\r\n"), "a body"),
            (get("/queue/r1/events", ""), "another queue endpoint"),
            (get("/queue/r1/x/status", ""), "a nested path"),
            (get("/queue/r1", ""), "the queue page"),
        ] {
            assert_eq!(kind(&st, &head), "proxy", "{why}");
        }
    }

    #[test]
    fn plain_origin_requests_take_the_forwarded_fast_path() {
        let with = |extra: &str| {
            let text = format!(
                "[edge]\nsecret = \"fast-path-test-secret-0123456789\"\norigin = \"http://127.0.0.1:9\"\n\
                 core = \"http://127.0.0.1:10\"\n{extra}\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\n\
                 protected = [\"/buy\"]\nrelease = {{ mode = \"fixed\", rate = 0.0 }}\n\
                 [tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n\
                 [[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"hs-secret-for-fast-tests-0123456789abcdef\"\n"
            );
            EdgeState::build(WicketConfig::from_toml_str(&text).unwrap()).unwrap_or_else(|e| panic!("{e}"))
        };
        let st = with("");
        let get = |path: &str, extra: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        assert_eq!(kind(&st, &get("/events/42", "")), "forward");
        assert_eq!(kind(&st, &get("/buy?x=1", "Cookie: a=b\r\n")), "forward", "protected: admission is checked on the fast path");
        assert_eq!(kind(&st, "HEAD /events/42 HTTP/1.1\r\nHost: x\r\n\r\n"), "forward");
        for (head, why) in [
            ("POST /events/42 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n".to_string(), "a body"),
            ("GET /events/42 HTTP/1.0\r\nHost: x\r\n\r\n".to_string(), "HTTP/1.0"),
            (get("/events/42", "Connection: close\r\n"), "connection close"),
            (get("/events/42", "Upgrade: websocket\r\nConnection: upgrade\r\n"), "an upgrade"),
            (get("/events/42", "Expect: 100-continue\r\n"), "expect"),
            (get("/v1/events/ev-1", ""), "the core"),
            (get("/wicket/challenge", ""), "the edge's own"),
            (get("/queue/r1", ""), "a room's page"),
            (get("/queue/r1/events", ""), "a room's stream"),
        ] {
            assert_eq!(kind(&st, &head), "proxy", "{why}");
        }
        assert_eq!(kind(&with("fast-forward = false"), &get("/events/42", "")), "proxy", "switched off");
        assert_eq!(kind(&with("trusted-proxies = [\"10.0.0.0/8\"]"), &get("/events/42", "")), "proxy", "X-Forwarded-For walk");
        let bot = with("[edge.bot]\nproof = \"pow\"\n[[edge.bot.routes]]\npath = \"/events/\"\ncheck = \"always\"");
        assert_eq!(kind(&bot, &get("/events/42", "")), "proxy", "a bot-checked route");
    }

    #[tokio::test]
    async fn a_queued_visitor_is_answered_from_the_counters() {
        let st = state();
        let (_, first) = visitor(&st, "u1").await;
        let (_, second) = visitor(&st, "u2").await;
        let v = poll(&st, &first, Some("u1")).expect("fast answer");
        assert_eq!((v["state"].as_str(), v["position"].as_u64(), v["ahead"].as_u64()), (Some("waiting"), Some(1), Some(0)), "{v}");
        let v = poll(&st, &second, Some("u2")).expect("fast answer");
        assert_eq!((v["position"].as_u64(), v["ahead"].as_u64()), (Some(2), Some(1)), "{v}");
        assert!(v.get("token").is_none_or(serde_json::Value::is_null), "{v}");
    }

    #[tokio::test]
    async fn everything_else_goes_to_the_proxy() {
        let st = state();
        let (device, cookies) = visitor(&st, "u1").await;
        // No device cookie, a forged one, no ticket, another room: the proxy answers (and sets cookies).
        assert!(poll(&st, &cookies.replace("wicket_d=", "x="), Some("u1")).is_none());
        assert!(poll(&st, &cookies.replace("wicket_d=", "wicket_d=A"), Some("u1")).is_none());
        assert!(poll(&st, &cookies.replace("wicket_q_r1=", "x="), Some("u1")).is_none());
        let headers = [httparse::Header { name: "Cookie", value: cookies.as_bytes() }];
        assert!(status_answer(&st, &headers, "nope", b"").is_none());
        // A blocked user or device: the proxy refuses it.
        st.blocklist.block_device_for(&device, Duration::from_secs(60));
        assert!(poll(&st, &cookies, Some("u1")).is_none());
        // The visitor's turn: admission writes a session and a token, so the proxy does it.
        let st = state();
        let (_, cookies) = visitor(&st, "u1").await;
        st.rooms.get("r1").unwrap().state.advance("n", 1).await.unwrap();
        assert!(poll(&st, &cookies, Some("u1")).is_none());
    }

    #[tokio::test]
    async fn the_device_users_rule_is_observed_and_trips_on_the_fast_path() {
        let st = state();
        let (device, cookies) = visitor(&st, "u1").await;
        assert!(poll(&st, &cookies, Some("u1")).is_some());
        assert!(poll(&st, &cookies, Some("u2")).is_none(), "u1's ticket is not u2's: the proxy answers u2");
        assert!(!st.blocklist.device(&device), "a second user on the device is within the rule");
        assert!(poll(&st, &cookies, Some("u3")).is_none(), "the third trips it");
        assert!(st.blocklist.device(&device), "and blocks the device");
        assert!(poll(&st, &cookies, Some("u1")).is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 100_000, failure_persistence: None, ..Default::default() })]

        /// 100,000 generated request targets: whenever the fast front accepts a head and hands it
        /// on, the proxy can parse the same target and canonicalises it to the same path, so the
        /// two paths never decide on different spellings (and Pingora never answers a bare 400).
        #[test]
        fn fast_front_and_proxy_agree_on_every_target(target in "(/|http://h/)([a-zA-Z0-9._~%/;:@!$&'()*+,=\\\\\"<>{}|^`#\\[\\] -]|%[0-9a-fA-F]{2}|é){0,24}(\\?[a-z=&%]{0,6})?") {
            let head = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            let Ok(httparse::Status::Complete(_)) = req.parse(head.as_bytes()) else { return Ok(()) };
            let raw = req.path.unwrap_or("");
            // What the fast front refuses itself never reaches the proxy.
            let Ok(canonical) = crate::path::canonical_target(raw) else { return Ok(()) };
            if !proxy_can_parse(raw) {
                return Ok(());
            }
            let mut proxied = pingora::http::RequestHeader::build("GET", raw.as_bytes(), None)
                .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("the proxy cannot parse {raw:?}: {e}")))?;
            crate::proxy::canonicalize(&mut proxied)
                .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{raw:?}: {e:?}")))?;
            proptest::prop_assert_eq!(proxied.uri.path(), canonical.as_ref(), "{}", raw);
        }
    }
}
#[cfg(test)]
mod idle_state {
    /// An idle keep-alive connection waiting in the fast front holds a small future and no
    /// buffer (`front::first_read`; `tests/idle_memory.rs` counts the heap of idle connections,
    /// `bench/idle-conns/run.sh` measures the whole process against nginx).
    ///
    /// Both futures are boxed at every request, so they are kept small: the header slots live on
    /// the heap, not in them (they were 4.4 KB and 8.4 KB, copied at each request).
    #[tokio::test]
    async fn an_idle_connection_and_a_request_have_small_futures() {
        use pingora::apps::ServerApp;
        let text = "[edge]\nsecret = \"fast-path-test-secret-0123456789\"\n";
        let st = std::sync::Arc::new(crate::state::EdgeState::build(crate::config::WicketConfig::from_toml_str(text).unwrap()).unwrap());
        let conf = std::sync::Arc::new(pingora::server::configuration::ServerConf::default());
        let proxy = std::sync::Arc::new(pingora::proxy::http_proxy(&conf, crate::proxy::EdgeProxy { state: st.clone(), hsts: None }));
        let front = std::sync::Arc::new(super::FastFront { state: st, proxy, tls: None, https_redirect: None, hsts: None });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let stream: pingora::protocols::Stream = Box::new(pingora::protocols::l4::stream::Stream::from(client));
        let (_stop, watch) = tokio::sync::watch::channel(false);
        let waiting = front.process_new(stream, &watch);
        let size = std::mem::size_of_val(&*waiting);
        assert!(size <= 1024, "{size} bytes per idle connection's future");
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let stream: pingora::protocols::Stream = Box::new(pingora::protocols::l4::stream::Stream::from(client));
        let serving = front.serve(stream, b"GET / HTTP/1.1\r\n\r\n", &watch);
        let size = std::mem::size_of_val(&serving);
        assert!(size <= 3 * 1024, "{size} bytes in a request's future");
    }
}
