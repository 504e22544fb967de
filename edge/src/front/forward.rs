//! The forwarded fast path: a plain `GET`/`HEAD` of the origin's pages (protected or not),
//! forwarded over a pooled HTTP/1.1 keep-alive connection without Pingora's proxy machinery.
//!
//! Pingora's proxy builds a header map, a session, a context and a chain of boxed phase futures
//! for every request, and re-frames the answer; for a page that is most of the cost (issue #12
//! measured the full path at 0.38× nginx `proxy_pass` on one core). [`crate::front::Front`]
//! carries out a [`crate::decide::Decision::Pass`] here: the decision step gives the HTTP/1.1 door
//! a pass only for a simple request (HTTP/1.1 `GET`/`HEAD`, no body, no `Upgrade`, `Expect` or
//! `Transfer-Encoding`, canonically spelled, not an edge, room or core path, no bot check on the
//! route, no trusted proxies, an origin configured, `fast-forward` on), after the same checks as
//! every door (blocklists, identity, limits, admission with its session).
//!
//! [`forward`] then writes the request head as the proxy would send it (`Wicket-*` identity
//! headers and `X-Forwarded-For` set, incoming copies and hop-by-hop headers removed, the
//! admission token taken out for the origin), and relays the answer: status and headers as the
//! origin sent them, with the edge's `Date`, `Connection: keep-alive` and cookies (as Pingora
//! writes them), `Wicket-Revoke` acted on and removed; the body relayed as framed (length or
//! chunks), a body delimited by the origin closing re-framed as chunks. Upstream connections are
//! kept per thread (no lock, no shared write per request) for `idle_timeout`; a pooled connection
//! the origin closed meanwhile is retried once on a fresh one, a refused connect `retries` times;
//! an origin that fails before answering is the proxy's 502/504.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pingora::protocols::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::decide::{IDENTITY_HEADERS, Pass, upstream_credentials};
use crate::metrics::Outcome;
use crate::reject::Reject;
use crate::state::{EdgeState, Upstream};

/// Upstream connections kept idle per thread and origin.
const POOL_PER_THREAD: usize = 256;
/// Longest response head accepted from the origin.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Most response headers accepted from the origin.
const MAX_RESPONSE_HEADERS: usize = 128;
/// Read size when relaying a body.
const READ_SIZE: usize = 32 * 1024;
/// Bytes kept free before the origin's answer in the read buffer for the client's head.
const HEAD_ROOM: usize = 1024;

/// Request headers never forwarded: hop-by-hop ones, and those the edge sets itself.
const DROPPED_REQUEST: [&str; 4] = ["connection", "keep-alive", "proxy-connection", "x-forwarded-for"];

/// How forwarding ended.
pub enum Forwarded {
    /// Answered in full; the client connection may take its next request.
    Done,
    /// The client connection must be closed (the answer was cut, or said `Connection: close`).
    Close,
}

/// Forwards a decided request to the origin and relays the answer to the client.
/// `extra` is added to the answer's head as it is (the HTTPS listener's `Strict-Transport-Security` line).
pub async fn forward(st: &EdgeState, client: &mut Stream, req: &httparse::Request<'_, '_>, fwd: Pass, extra: &[u8]) -> Forwarded {
    let Some(up) = st.origin.as_ref() else { return Forwarded::Close };
    let head_only = req.method == Some("HEAD");
    let request = request_head(req, &fwd);
    let started = Instant::now();
    let mut connects = 0;
    let mut stale_retry = true;
    let (mut conn, mut buf, resp) = loop {
        let (conn, pooled) = match pool_take(up.addr()) {
            Some(c) => (c, true),
            None => {
                connects += 1;
                match connect(up).await {
                    Ok(c) => (c, false),
                    Err(e) if connects <= st.retries => {
                        tracing::debug!("origin connect failed, retrying: {e}");
                        continue;
                    }
                    Err(e) => return fail(st, client, req.headers, &fwd, e).await,
                }
            }
        };
        match exchange(st, up, conn, &request, client).await {
            Ok(got) => break got,
            // The origin closed an idle pooled connection just as it was reused: not the
            // request's failure (nothing was answered), so once more on a fresh connection.
            Err(Exchange::Stale) if pooled && stale_retry => stale_retry = false,
            Err(Exchange::Stale) => {
                let e = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the origin closed the connection without answering");
                return fail(st, client, req.headers, &fwd, e).await;
            }
            Err(Exchange::Io(e)) => return fail(st, client, req.headers, &fwd, e).await,
        }
    };
    st.metrics.origin_seconds.observe(started.elapsed().as_secs_f64());

    let framing = if head_only || resp.status == 204 || resp.status == 304 { Framing::None } else { resp.framing };
    let mut resp = resp;
    let mut out = std::mem::take(&mut resp.client);
    finish_response_head(st, &mut out, &resp, framing, &fwd, extra).await;
    let outcome = match resp.status {
        500.. => Outcome::Error,
        304 => Outcome::NotModified,
        400..=499 => Outcome::Rejected,
        _ => Outcome::Ok,
    };
    let body_start = HEAD_ROOM + resp.head_len;
    let relayed = relay_body(st, up, client, &mut conn, &mut buf, body_start, out, framing).await;
    st.metrics.request(fwd.route, if relayed.is_ok() { outcome } else { Outcome::Error });
    match relayed {
        Ok(Relayed { reusable }) => {
            if reusable && resp.keep_alive {
                pool_give(up.addr(), conn);
            }
            Forwarded::Done
        }
        Err(e) => {
            tracing::debug!("forwarding cut: {e}");
            Forwarded::Close
        }
    }
}

/// The request head as the proxy sends it upstream.
fn request_head(req: &httparse::Request<'_, '_>, fwd: &Pass) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(req.method.unwrap_or("GET").as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.path.unwrap_or("/").as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let admitted_room = fwd.admitted.as_ref().map(|(room, _)| room.as_str());
    for h in req.headers.iter() {
        let name = h.name;
        if DROPPED_REQUEST.iter().chain(IDENTITY_HEADERS.iter()).any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        if admitted_room.is_some() && (name.eq_ignore_ascii_case("cookie") || name.eq_ignore_ascii_case("authorization")) {
            continue; // written below as the proxy passes them on: never the admission token
        }
        push_header(&mut out, name.as_bytes(), h.value);
    }
    if admitted_room.is_some() {
        let cookies = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("cookie")).map(|h| h.value);
        let authorization = req.headers.iter().find(|h| h.name.eq_ignore_ascii_case("authorization")).map(|h| h.value);
        let (cookies, authorization) = upstream_credentials(cookies, authorization, admitted_room, false);
        if let Some(kept) = cookies {
            push_header(&mut out, b"cookie", kept.as_bytes());
        }
        if let Some(a) = authorization {
            push_header(&mut out, b"authorization", a);
        }
    }
    if let Some((room, claims)) = &fwd.admitted {
        push_header(&mut out, b"wicket-user", claims.sub.as_bytes());
        push_header(&mut out, b"wicket-room", room.as_bytes());
        push_header(&mut out, b"wicket-position", claims.pos.to_string().as_bytes());
    } else if let Some(u) = &fwd.visitor.user {
        push_header(&mut out, b"wicket-user", u.as_bytes());
    }
    if let Some(d) = &fwd.visitor.device {
        push_header(&mut out, b"wicket-device", d.id().as_bytes());
    }
    out.extend_from_slice(b"x-forwarded-for: ");
    let _ = std::io::Write::write_fmt(&mut out, format_args!("{}\r\n", fwd.visitor.ip));
    out.extend_from_slice(b"\r\n");
    out
}

fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// How the origin frames its answer's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (HEAD, 204, 304).
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the origin closes (re-framed as chunks for the client).
    Close,
}

/// The parts of the origin's response head the relay needs.
struct ResponseHead {
    head_len: usize,
    status: u16,
    framing: Framing,
    /// The origin keeps the connection open after this answer.
    keep_alive: bool,
    /// The client's status line and the origin's headers it gets (no final blank line).
    client: Vec<u8>,
    /// The origin sent `Wicket-Revoke: 1`.
    revoke: bool,
}

enum Exchange {
    /// Nothing came back on a connection (a pooled one the origin had closed).
    Stale,
    Io(std::io::Error),
}

/// Sends the request head and reads the response head; informational answers (103 Early Hints)
/// are passed on to the client as they come, as the proxy does.
async fn exchange(st: &EdgeState, up: &Upstream, mut conn: TcpStream, request: &[u8], client: &mut Stream) -> Result<(TcpStream, Vec<u8>, ResponseHead), Exchange> {
    let write_timeout = up.options.write_timeout.unwrap_or(Duration::from_secs(10));
    let read_timeout = up.options.read_timeout.unwrap_or(Duration::from_secs(30));
    let timed_out = |what: &str| Exchange::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("origin {what} timed out")));
    match tokio::time::timeout(write_timeout, conn.write_all(request)).await {
        Err(_) => return Err(timed_out("write")),
        Ok(Err(e)) if is_stale(&e) => return Err(Exchange::Stale),
        Ok(Err(e)) => return Err(Exchange::Io(e)),
        Ok(Ok(())) => {}
    }
    // Room before the answer for the client's head, so head and body leave in one write without
    // moving the body ([`relay_body`]).
    let mut buf: Vec<u8> = Vec::with_capacity(HEAD_ROOM + READ_SIZE);
    buf.resize(HEAD_ROOM, 0);
    loop {
        if buf.len() - HEAD_ROOM >= MAX_RESPONSE_HEAD {
            return Err(Exchange::Io(std::io::Error::other("origin response head too large")));
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(READ_SIZE);
        }
        let n = match tokio::time::timeout(read_timeout, conn.read_buf(&mut buf)).await {
            Err(_) => return Err(timed_out("read")),
            Ok(Err(e)) if is_stale(&e) && buf.len() == HEAD_ROOM => return Err(Exchange::Stale),
            Ok(Err(e)) => return Err(Exchange::Io(e)),
            Ok(Ok(n)) => n,
        };
        if n == 0 {
            return Err(if buf.len() == HEAD_ROOM {
                Exchange::Stale
            } else {
                Exchange::Io(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "origin closed mid-head"))
            });
        }
        loop {
            match parse_response(&buf[HEAD_ROOM..]) {
                Ok(Some(head)) if (100..200).contains(&head.status) => {
                    let mut out = Vec::with_capacity(head.head_len);
                    informational_head(&mut out, &buf[HEAD_ROOM..HEAD_ROOM + head.head_len]);
                    write_client(client, &out, st.timeouts.client_write).await.map_err(Exchange::Io)?;
                    buf.drain(HEAD_ROOM..HEAD_ROOM + head.head_len);
                }
                Ok(Some(head)) => return Ok((conn, buf, head)),
                Ok(None) => break,
                Err(e) => return Err(Exchange::Io(e)),
            }
        }
    }
}

fn is_stale(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionAborted)
}

fn parse_response(buf: &[u8]) -> std::io::Result<Option<ResponseHead>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad origin response head: {e}"))),
    };
    let status = resp.code.unwrap_or(0);
    if status == 101 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "origin switched protocols without an upgrade request"));
    }
    let mut keep_alive = resp.version == Some(1);
    let mut length = None;
    let mut chunked = false;
    let mut revoke = false;
    let mut client = Vec::with_capacity(head_len + 64);
    client.extend_from_slice(b"HTTP/1.1 ");
    client.extend_from_slice(status.to_string().as_bytes());
    client.push(b' ');
    client.extend_from_slice(resp.reason.unwrap_or("").as_bytes());
    client.extend_from_slice(b"\r\n");
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("wicket-revoke") {
            revoke |= h.value == b"1";
        }
        if !DROPPED_RESPONSE.iter().any(|d| h.name.eq_ignore_ascii_case(d)) {
            push_header(&mut client, h.name.as_bytes(), h.value);
        }
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked is the last coding when present (RFC 9112 §6.1); then any length is ignored.
            chunked = h.value.split(|b| *b == b',').next_back().is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            if !chunked {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "origin transfer coding without chunked"));
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<u64>().ok());
            match (n, length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "origin sent a bad or conflicting Content-Length")),
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Close,
    };
    if framing == Framing::Close {
        keep_alive = false;
    }
    Ok(Some(ResponseHead { head_len, status, framing, keep_alive, client, revoke }))
}

/// An informational answer as the client gets it: the origin's status line (as HTTP/1.1) and
/// headers, nothing added.
fn informational_head(out: &mut Vec<u8>, raw: &[u8]) {
    let line_end = raw.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
    let rest = raw[..line_end].splitn(2, |b| *b == b' ').nth(1).unwrap_or(b"");
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(rest);
    out.extend_from_slice(&raw[line_end..]);
}

/// Response headers never passed on: hop-by-hop ones, and those the edge writes itself.
const DROPPED_RESPONSE: [&str; 5] = ["connection", "keep-alive", "proxy-connection", "date", "wicket-revoke"];

/// The client's response head: the origin's status line and headers, with the edge's `Date`,
/// `Connection`, cookies and `Wicket-Revoke` handling (as the proxy's `response_filter` and
/// Pingora's writer do).
async fn finish_response_head(st: &EdgeState, out: &mut Vec<u8>, resp: &ResponseHead, framing: Framing, fwd: &Pass, extra: &[u8]) {
    for c in &fwd.visitor.cookies {
        push_header(out, b"set-cookie", c.as_bytes());
    }
    if resp.revoke
        && let Some((room, claims)) = &fwd.admitted
    {
        push_header(out, b"set-cookie", st.cookie(&format!("wicket_a_{room}"), "", 0).as_bytes());
        st.rooms.revoke(room, &claims.sub).await;
    }
    if framing == Framing::Close {
        push_header(out, b"transfer-encoding", b"chunked");
    }
    out.extend_from_slice(b"date: ");
    out.extend_from_slice(pingora::protocols::http::date::get_cached_date().as_bytes());
    out.extend_from_slice(extra);
    out.extend_from_slice(b"\r\nconnection: keep-alive\r\n\r\n");
}

struct Relayed {
    /// The origin's connection ended exactly at the answer's end.
    reusable: bool,
}

/// Relays the body after the head (its first bytes are in `buf[start..]`), `out` holding the
/// client's head: one write for a small answer, then read by read. The head goes into the room
/// before the body when it fits, so the body's first bytes are written where they were read.
#[allow(clippy::too_many_arguments)]
async fn relay_body(
    st: &EdgeState,
    up: &Upstream,
    client: &mut Stream,
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
    start: usize,
    mut out: Vec<u8>,
    framing: Framing,
) -> std::io::Result<Relayed> {
    let read_timeout = up.options.read_timeout.unwrap_or(Duration::from_secs(30));
    let write_timeout = st.timeouts.client_write;
    let mut chunks = ChunkParser::default();
    let mut remaining = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    let mut pos = start;
    let mut first = framing != Framing::Close;
    loop {
        let available = buf.len() - pos;
        // Take what this answer owns from what was read.
        let (take, done) = match framing {
            Framing::None => (0, true),
            Framing::Length(_) => {
                let n = remaining.min(available as u64) as usize;
                remaining -= n as u64;
                (n, remaining == 0)
            }
            Framing::Chunked => match chunks.feed(&buf[pos..]) {
                Ok(n) => (n, chunks.done()),
                Err(()) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunked body from the origin")),
            },
            Framing::Close => (available, false),
        };
        // Bytes past the answer's end: the origin is confused; do not reuse its connection.
        let reusable = available == take;
        if std::mem::take(&mut first) && out.len() <= pos {
            let head_at = pos - out.len();
            buf[head_at..pos].copy_from_slice(&out);
            out.clear();
            write_client(client, &buf[head_at..pos + take], write_timeout).await?;
        } else if framing == Framing::Close {
            if take > 0 {
                out.extend_from_slice(format!("{take:x}\r\n").as_bytes());
                out.extend_from_slice(&buf[pos..pos + take]);
                out.extend_from_slice(b"\r\n");
            }
        } else {
            out.extend_from_slice(&buf[pos..pos + take]);
        }
        if !out.is_empty() {
            write_client(client, &out, write_timeout).await?;
            out.clear();
        }
        if done {
            return Ok(Relayed { reusable });
        }
        buf.clear();
        pos = 0;
        let n = match tokio::time::timeout(read_timeout, conn.read_buf(buf)).await {
            Err(_) => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "origin body read timed out")),
            Ok(r) => r?,
        };
        if n == 0 {
            if framing == Framing::Close {
                write_client(client, b"0\r\n\r\n", write_timeout).await?;
                return Ok(Relayed { reusable: false });
            }
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "origin closed mid-body"));
        }
    }
}

async fn write_client(client: &mut Stream, bytes: &[u8], timeout: Duration) -> std::io::Result<()> {
    let write = async {
        client.write_all(bytes).await?;
        client.flush().await
    };
    tokio::time::timeout(timeout, write).await.map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "client write timed out"))?
}

/// Follows `Transfer-Encoding: chunked` framing over relayed bytes to find the body's end
/// (RFC 9112 §7.1: sizes, extensions, data, trailer fields).
#[derive(Debug, Default)]
struct ChunkParser {
    state: ChunkState,
    size: u64,
    digits: u8,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    TrailerLine,
    EndLf,
    Done,
}

impl ChunkParser {
    /// Consumes `bytes` up to the body's end; how many belong to the body.
    fn feed(&mut self, bytes: &[u8]) -> Result<usize, ()> {
        use ChunkState::*;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match self.state {
                Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let v = (b as char).to_digit(16).ok_or(())? as u64;
                        self.digits += 1;
                        if self.digits > 16 {
                            return Err(());
                        }
                        self.size = self.size * 16 + v;
                    }
                    b';' | b' ' | b'\t' if self.digits > 0 => self.state = Extension,
                    b'\r' if self.digits > 0 => self.state = SizeLf,
                    _ => return Err(()),
                },
                Extension => match b {
                    b'\r' => self.state = SizeLf,
                    b'\n' => return Err(()),
                    _ => {}
                },
                SizeLf => {
                    if b != b'\n' {
                        return Err(());
                    }
                    self.state = if self.size == 0 { TrailerStart } else { Data };
                }
                Data => {
                    let n = self.size.min((bytes.len() - i) as u64);
                    self.size -= n;
                    i += n as usize;
                    if self.size == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr => self.state = if b == b'\r' { DataLf } else { return Err(()) },
                DataLf => {
                    if b != b'\n' {
                        return Err(());
                    }
                    self.state = Size;
                    self.digits = 0;
                }
                TrailerStart => self.state = if b == b'\r' { EndLf } else { TrailerLine },
                TrailerLine => {
                    if b == b'\n' {
                        self.state = TrailerStart;
                    }
                }
                EndLf => {
                    if b != b'\n' {
                        return Err(());
                    }
                    self.state = Done;
                    return Ok(i + 1);
                }
                Done => return Ok(i),
            }
            i += 1;
        }
        Ok(i)
    }

    fn done(&self) -> bool {
        self.state == ChunkState::Done
    }
}

/// Connects to the origin within its connect timeout.
async fn connect(up: &Upstream) -> std::io::Result<TcpStream> {
    let timeout = up.options.connection_timeout.unwrap_or(Duration::from_secs(5));
    let conn = tokio::time::timeout(timeout, TcpStream::connect(up.addr()))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "origin connect timed out"))
        .and_then(|r| r)
        .inspect_err(|_| up.target.connect_failed())?;
    conn.set_nodelay(true)?;
    Ok(conn)
}

/// Answers an origin failure before any byte of its answer as the proxy does (502, or 504 on a
/// timeout); the client's connection stays open (the request had no body).
async fn fail(st: &EdgeState, client: &mut Stream, headers: &[httparse::Header<'_>], fwd: &Pass, e: std::io::Error) -> Forwarded {
    tracing::warn!("origin {}: {e}", st.origin.as_ref().map_or(String::new(), |u| u.addr().to_string()));
    let reject = if e.kind() == std::io::ErrorKind::TimedOut { Reject::GatewayTimeout } else { Reject::BadGateway };
    st.metrics.rejects.with_label_values(&[reject.reason()]).inc();
    st.metrics.request(fwd.route, Outcome::Error);
    // As every door's refusals (the `?lang=` of the target is the queue page's business).
    let words = crate::reject::html_lang(headers, None).map(|l| st.queue_page.words(l));
    let (head, body) = crate::reject::wire(&reject, words.as_ref().map(|w| w as &dyn crate::i18n::Words), true, &[], b"");
    let mut answer = head;
    answer.extend_from_slice(&body);
    match write_client(client, &answer, st.timeouts.client_write).await {
        Ok(()) => Forwarded::Done,
        Err(_) => Forwarded::Close,
    }
}

struct Idle {
    addr: SocketAddr,
    conn: TcpStream,
    since: Instant,
}

thread_local! {
    /// Idle origin connections of this thread, newest last.
    static POOL: RefCell<Vec<Idle>> = const { RefCell::new(Vec::new()) };
}

/// How long an idle origin connection is kept (Pingora's pool uses the peer's `idle_timeout`).
const IDLE_FOR: Duration = Duration::from_secs(5);

fn pool_take(addr: SocketAddr) -> Option<TcpStream> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let now = Instant::now();
        p.retain(|c| now.duration_since(c.since) < IDLE_FOR);
        let i = p.iter().rposition(|c| c.addr == addr)?;
        Some(p.swap_remove(i).conn)
    })
}

fn pool_give(addr: SocketAddr, conn: TcpStream) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_PER_THREAD {
            p.push(Idle { addr, conn, since: Instant::now() });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parts: &[&[u8]]) -> Result<(usize, bool), ()> {
        let mut p = ChunkParser::default();
        let mut total = 0;
        for part in parts {
            total += p.feed(part)?;
            if p.done() {
                return Ok((total, true));
            }
        }
        Ok((total, p.done()))
    }

    #[test]
    fn chunked_bodies_end_where_they_end_however_they_are_split() {
        let body = b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n";
        for split in 0..=body.len() {
            let mut with_next = body.to_vec();
            with_next.extend_from_slice(b"HTTP/1.1 200 OK");
            let (a, b) = with_next.split_at(split.min(with_next.len()));
            assert_eq!(feed_all(&[a, b]), Ok((body.len(), true)), "split at {split}");
        }
        assert_eq!(feed_all(&[b"0\r\n\r\n"]), Ok((5, true)));
        assert_eq!(feed_all(&[b"3\r\nab"]), Ok((5, false)));
    }

    #[test]
    fn broken_chunked_framing_is_an_error() {
        for bad in [&b"x\r\n"[..], b"\r\n", b"3\r\nabcX", b"3\nabc", b"11111111111111111\r\n", b"3;a\nabc"] {
            assert_eq!(feed_all(&[bad]), Err(()), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn response_framing_follows_rfc_9112() {
        let head = |extra: &str| format!("HTTP/1.1 200 OK\r\n{extra}\r\n");
        let f = |extra: &str| parse_response(head(extra).as_bytes()).unwrap().map(|h| (h.framing, h.keep_alive));
        assert_eq!(f("Content-Length: 12\r\n"), Some((Framing::Length(12), true)));
        assert_eq!(f("Transfer-Encoding: chunked\r\nContent-Length: 12\r\n"), Some((Framing::Chunked, true)));
        assert_eq!(f("Transfer-Encoding: gzip, chunked\r\n"), Some((Framing::Chunked, true)));
        assert_eq!(f(""), Some((Framing::Close, false)));
        assert_eq!(f("Content-Length: 1\r\nConnection: close\r\n"), Some((Framing::Length(1), false)));
        for bad in ["Content-Length: 1\r\nContent-Length: 2\r\n", "Content-Length: -1\r\n", "Transfer-Encoding: gzip\r\n"] {
            assert!(parse_response(head(bad).as_bytes()).is_err(), "{bad}");
        }
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Len").unwrap().is_none());
        let old = parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n").unwrap().unwrap();
        assert!(!old.keep_alive);
    }
}
