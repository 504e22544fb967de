//! The HTTP/1.1 door: plain `GET`/`HEAD` of a file from memory, a queued visitor's status poll,
//! refusals, and plain requests for the origin ([`crate::front::forward`]), answered before Pingora's
//! HTTP machinery sees the request. What the edge decides is [`crate::decide`]'s (this door asks
//! it as [`crate::decide::Door::Http1`] and carries the decision out); this module holds the
//! transport: reading and checking the head, writing answers, handing over to the proxy.
//!
//! Pingora builds a request header map, a session, a context and a chain of boxed phase futures
//! for every request; for a page that is a hash lookup and one write, that is most of the cost
//! (a bare Pingora responder measured 0.74–0.93× nginx here). [`Front`] sits in front of the
//! proxy on the public listener: it parses the request head with `httparse` into a stack array,
//! and when the request is a simple HTTP/1.1 `GET`/`HEAD` of a static file, it applies the IP
//! blocklist and IP limits with the socket peer, then writes the precomputed header prefix, the
//! cached `Date`, and the body in one write (one syscall; plain HTTP has no write buffer).
//! Anything else (another method or version, a body, `Connection: close`, `Upgrade`, a user or
//! device limit, trusted proxies, a blocked or limited client, a file under a protected prefix, a
//! path not spelled canonically, a non-TCP stream) is handed to the full proxy ([`crate::front::proxy`])
//! untouched: the bytes read so far are put back into the stream first.
//!
//! It is also the gate of every request head on a plain TCP connection: the head is read whole
//! before anything else happens (a 4 KiB first read, then at most [`MAX_REQUEST_HEAD`] within
//! `header-timeout-ms` of its first byte: 431 / 408 otherwise), and malformed heads, ambiguous
//! targets and the head rules of [`crate::path`] are answered here with the edge's JSON 400, so
//! Pingora never buffers a megabyte of head nor waits forever for a trickled one.
//!
//! The answers are the same as the slow path's (`serve_static` in [`crate::front::proxy`]): same
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

use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::conn::{Front, Handover};
use crate::decide::{Ask, Decision, Door, EventStream, decide};
use crate::identity::header_bytes;
use crate::metrics::{Outcome, Route};
use crate::reject::MAX_REQUEST_HEAD;
use crate::room::events::EventFrames;
use crate::statics::none_match;

/// Most request headers accepted (431 above).
const MAX_HEADERS: usize = 100;
/// Answers up to this size go out in one write; larger bodies in chunks of it.
const ONE_WRITE: usize = 64 * 1024;

/// How a head read ended when it did not produce a request.
enum HeadRead {
    /// The client went away, or sent nothing before the idle timeout, or the edge is stopping.
    Gone,
    /// The head is refused: answer this and close.
    Refuse(u16, &'static str, &'static str),
}

impl<P: Handover> Front<P> {
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
        // A path spelled other than canonically takes the proxy, which rewrites it; so does a
        // request this door cannot answer without reading on (a body, an upgrade, ...).
        let canonical_spelling = matches!(canonical, std::borrow::Cow::Borrowed(_)) && target.starts_with('/');
        let decision = match (req.method, canonical_spelling && crate::path::simple_head(&req)) {
            (Some(method), true) => {
                let Some(peer) = peer_ip(&stream) else { return self.to_proxy(stream, buf, shutdown).await };
                let path = target.split_once('?').map_or(target, |(p, _)| p);
                decide(st, &Ask { door: Door::Http1, method, path, head: &*req.headers, peer }).await
            }
            _ => Decision::HandOver,
        };
        let timeout = st.timeouts.client_write;
        let (route, outcome) = match decision {
            // httparse takes some bytes in a target that the proxy's URI parser does not (it would
            // answer a bare 400): refuse those here, in the edge's words.
            Decision::HandOver if !proxy_can_parse(target) => return self.refuse(stream, 400, "bad_request", "invalid characters in the request target").await,
            Decision::HandOver => return self.to_proxy(stream, buf, shutdown).await,
            Decision::Static { asset, route, cookies } => {
                let ae = header_bytes(&*req.headers, "accept-encoding").unwrap_or_default();
                let (_, variant) = asset.choose(ae);
                let not_modified = header_bytes(&*req.headers, "if-none-match").is_some_and(|v| none_match(v, variant.etag.as_bytes()));
                let heads = &variant.wire;
                let date = pingora::protocols::http::date::get_cached_date();
                let head_bytes = if not_modified { &heads.not_modified } else { &heads.ok };
                let body: &[u8] = if not_modified || req.method == Some("HEAD") { b"" } else { &variant.body };
                let cookies: Vec<u8> = cookies.iter().flat_map(|c| [&b"\r\nset-cookie: "[..], c.as_bytes()].concat()).collect();
                if write_answer(&mut stream, &[head_bytes, date.as_bytes(), self.hsts_line(), &cookies, b"\r\n\r\n"], body, timeout).await.is_err() {
                    return None;
                }
                (route, if not_modified { Outcome::NotModified } else { Outcome::Ok })
            }
            Decision::Pass(pass) => {
                match super::forward::forward(st, &mut stream, &req, *pass, self.hsts_line()).await {
                    super::forward::Forwarded::Done => {}
                    super::forward::Forwarded::Close => return None,
                }
                if *shutdown.borrow() {
                    return None;
                }
                return self.next_request(stream, buf, len, keep);
            }
            Decision::Status { body } => {
                if write_answer(&mut stream, &[&status_answer(&body, self.hsts_line())], b"", timeout).await.is_err() {
                    return None;
                }
                (Route::Edge, Outcome::Ok)
            }
            Decision::Refuse(reject, visitor, route) => {
                let words = crate::reject::html_lang(&*req.headers, target.split_once('?').map(|(_, q)| q)).map(|l| st.queue_page.words(l));
                let answer = crate::reject::wire(&reject, words.as_ref().map(|w| w as &dyn crate::i18n::Words), keep, &visitor.cookies, self.hsts_line());
                let body: &[u8] = if req.method == Some("HEAD") { b"" } else { &answer.1 };
                if write_answer(&mut stream, &[&answer.0], body, timeout).await.is_err() {
                    return None;
                }
                (route, Outcome::Rejected)
            }
            Decision::Events(ev) => {
                // (Its slot of the budget taken by the decision step, which refuses past it.)
                st.metrics.request(Route::Edge, Outcome::Ok);
                // The stream goes on in a task of its own, holding only what it needs: this
                // request's head, its buffers and the decision's future are freed now.
                let rest = if keep { Some(buf[len.min(buf.len())..].to_vec()) } else { None };
                tokio::spawn(Arc::clone(self).events(stream, ev, rest, shutdown.clone()));
                return None;
            }
            // Not given to this door (it can answer none of them).
            Decision::Room(_) | Decision::Bot { .. } => return self.refuse(stream, 400, "bad_request", "not a decision of this door").await,
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

/// The door's entry from the listener ([`super`]): a connection whose next request's first bytes
/// are `got`.
pub fn serve<'a, P: Handover>(front: &'a Arc<Front<P>>, stream: Stream, got: &'a [u8], shutdown: &'a ShutdownWatch) -> impl Future<Output = Option<Stream>> + Send + 'a {
    front.serve(stream, got, shutdown)
}

impl<P: Handover> Front<P> {
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

impl<P: Handover> Front<P> {
    /// A queued visitor's event stream ([`crate::room::events`]): the head, then each frame as
    /// an HTTP/1.1 chunk (one write each), until the frames end, the edge stops, or the client
    /// goes. While it waits for the next frame the task holds the stream's state, the socket and
    /// a pending read into the worker thread's buffer (no buffer of its own): a client that
    /// closes (or half-closes) its side, or sends anything, ends the stream at once. Over HTTPS
    /// the connection is reduced to sending once the head has left ([`crate::tls::send_only`]):
    /// a client that sends anything then gets the last chunk and the connection's close. `rest`: the
    /// bytes after the request's head when the connection may be kept (it is served on once the
    /// stream has ended), `None` to close it then.
    async fn events(self: Arc<Self>, mut stream: Stream, ev: Box<EventStream>, rest: Option<Vec<u8>>, mut shutdown: ShutdownWatch) {
        let timeout = self.state.timeouts.client_write;
        let date = pingora::protocols::http::date::get_cached_date();
        let head: &[&[u8]] = &[EVENTS_HEAD, date.as_bytes(), self.hsts_line(), b"\r\n\r\n"];
        if write_answer(&mut stream, head, b"", timeout).await.is_err() {
            return;
        }
        // Over HTTPS/1.1 the stream sheds rustls now and seals its frames itself (about 6 KB less
        // a stream: `tls::send_only`), unless bytes after the head wait to be served after it.
        let mut sending_only = false;
        if rest.as_ref().is_none_or(|r| r.is_empty()) {
            match crate::tls::send_only(stream) {
                Ok(reduced) => (stream, sending_only) = (reduced, true),
                Err(Some(kept)) => stream = kept,
                Err(None) => return,
            }
        }
        // The slot is held until the stream ends.
        let EventStream { room, ticket, sub, slot, .. } = *ev;
        let mut frames = EventFrames::new(room, ticket, &sub, self.state.event_streams.longest());
        drop(sub);
        let mut sent = Vec::new();
        let ended = loop {
            let frame = tokio::select! {
                f = frames.next(&self.state.rooms) => f,
                got = super::conn::first_read(&mut stream) => break match got {
                    Ok(bytes) if !bytes.is_empty() => Some(bytes),
                    // Records sent to a connection that only sends: the stream ends, then the
                    // connection (it cannot be read on).
                    Err(e) if sending_only && e.kind() == std::io::ErrorKind::InvalidData => Some(Vec::new()),
                    _ => None,
                },
                _ = shutdown.changed() => None,
            };
            let Some(frame) = frame else { break Some(Vec::new()) };
            sent.clear();
            sent.extend_from_slice(format!("{:x}\r\n", frame.len()).as_bytes());
            sent.extend_from_slice(frame.as_bytes());
            sent.extend_from_slice(b"\r\n");
            if write_answer(&mut stream, &[&sent], b"", timeout).await.is_err() {
                return;
            }
            sent = Vec::new();
        };
        drop((frames, slot));
        // The client went (or half-closed): nothing more to say.
        let Some(more) = ended else { return };
        if write_answer(&mut stream, &[b"0\r\n\r\n"], b"", timeout).await.is_err() {
            return;
        }
        if sending_only {
            // Its own `close_notify`: the client knows the answer ended whole, not cut.
            let _ = tokio::time::timeout(timeout, stream.shutdown()).await;
            return;
        }
        if *shutdown.borrow() {
            return;
        }
        // Kept: served on from the bytes the client sent meanwhile (after those of the head).
        let Some(mut rest) = rest else { return };
        rest.extend_from_slice(&more);
        let stream = crate::replay::put_back(stream, &rest);
        Box::pin(self.serve_on(stream, shutdown)).await;
    }
}

/// The head of an event stream's answer, up to its `Date` value.
const EVENTS_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
    Transfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\nDate: ";


/// The whole HTTP/1.1 answer to a queued visitor's status poll with its JSON `body`.
fn status_answer(body: &[u8], extra: &[u8]) -> Vec<u8> {
    let date = pingora::protocols::http::date::get_cached_date();
    let mut out = Vec::with_capacity(160 + body.len());
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nContent-Length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\nDate: ");
    out.extend_from_slice(date.as_bytes());
    out.extend_from_slice(extra);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
            crate::path::canonicalize(&mut proxied)
                .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{raw:?}: {e:?}")))?;
            proptest::prop_assert_eq!(proxied.uri.path(), canonical.as_ref(), "{}", raw);
        }
    }
}
