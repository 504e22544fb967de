//! What the doors of one connection share: the listener's settings ([`Front`]), its
//! `Strict-Transport-Security` answer, the hand-over of a request to the proxy, and the wait for
//! a connection's next bytes without a buffer of its own ([`first_read`]), parked after a second
//! without anything of Pingora's ([`Parked`], [`next_request_bytes`]). It imports no door; each
//! door and the listener ([`super`]) import it.

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

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
    std::future::poll_fn(|cx| poll_first_read(stream, cx)).await
}

/// One poll of [`first_read`].
fn poll_first_read(stream: &mut Stream, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<Vec<u8>>> {
    FIRST_READ_BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        let mut read = ReadBuf::new(&mut buf[..]);
        match Pin::new(&mut *stream).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(read.filled().to_vec())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    })
}

/// How long a keep-alive connection waits for its next request as it was accepted (Pingora's
/// stream object and socket digest, about 0.9 KB) before it is parked ([`Parked`]). Short enough
/// that an idle fan costs the parked size within a poll interval; long enough that a client
/// sending request after request (a page's assets, a benchmark) never pays the parking's few
/// system calls (a descriptor taken, registered, the old one closed; its peer asked again).
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

/// An idle plain-TCP keep-alive connection holding nothing of Pingora's: a descriptor of its own
/// for the socket, registered with the runtime. What it costs is the
/// runtime's registration (a slab entry) and the connection's task; Pingora's stream object
/// (boxed), its socket digest and its wrapper are freed while the client is idle and made again
/// when it speaks ([`Parked::resume`]), as an accepted connection's are.
pub(crate) struct Parked<'a> {
    tcp: tokio::net::TcpStream,
    _counted: Counted<'a>,
}

/// One of `wicket_edge_parked_connections` while it lives.
struct Counted<'a>(&'a prometheus::IntGauge);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl<'a> Parked<'a> {
    /// `stream` parked, or given back when it is not a plain TCP connection with nothing left to
    /// read before its socket nor to write (TLS, a replayed or gathering wrapper that holds
    /// bytes), or when the runtime refuses the new descriptor.
    pub(crate) fn park(stream: Stream, count: &'a prometheus::IntGauge) -> Result<Parked<'a>, Stream> {
        use std::os::fd::AsRawFd;
        let l4 = crate::replay::plain_tcp(stream)?;
        let Some(fd) = own_descriptor(l4.as_raw_fd()) else { return Err(l4) };
        // Registered before `l4` lets its own go: the socket (non-blocking already: the flag is
        // the open socket's, not the descriptor's) is never without one.
        let tcp = match tokio::net::TcpStream::from_std(std::net::TcpStream::from(fd)) {
            Ok(tcp) => tcp,
            Err(_) => return Err(l4),
        };
        // Closes `l4`'s descriptor and ends its registration; the socket stays open under `tcp`'s.
        drop(l4);
        count.inc();
        Ok(Parked { tcp, _counted: Counted(count) })
    }

    /// The connection as the listener hands a new one over: Pingora's stream with the peer's
    /// address in its socket digest (asked of the socket again: not kept while parked). `None`
    /// when the socket no longer knows its peer (the client reset it, perhaps right after sending
    /// a request): such a connection is closed, never served without its client's address.
    pub(crate) fn resume(self) -> Option<Stream> {
        use pingora::protocols::GetSocketDigest;
        use std::os::fd::AsRawFd;
        let peer = self.tcp.peer_addr().ok()?;
        let mut l4 = pingora::protocols::l4::stream::Stream::from(self.tcp);
        let digest = pingora::protocols::SocketDigest::from_raw_fd(l4.as_raw_fd());
        let _ = digest.peer_addr.set(Some(peer.into()));
        l4.set_socket_digest(digest);
        Some(Box::new(l4))
    }
}

/// A descriptor of this process's own for the socket behind `fd` (open: its stream is alive), or
/// `None` where the system does not allow it (no `pidfd_getfd`: Linux before 5.6, a seccomp filter
/// that refuses it), and idle connections are then not parked. `pidfd_getfd` on this process's own
/// pidfd is `dup` with an owned result, which safe Rust can ask for: Pingora's stream lends only
/// the descriptor's number.
///
/// A refusal by the system (`EPERM`, `EACCES`, `ENOSYS`: systemd's `@system-service` filter without
/// `pidfd_getfd`, a container runtime's default seccomp profile without `CAP_SYS_PTRACE`) is logged
/// once and not asked again; a passing failure (no descriptor left: `EMFILE`) leaves that one
/// connection unparked.
fn own_descriptor(fd: std::os::fd::RawFd) -> Option<std::os::fd::OwnedFd> {
    use rustix::io::Errno;
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};
    use std::sync::atomic::{AtomicBool, Ordering};
    static SELF: std::sync::OnceLock<Option<std::os::fd::OwnedFd>> = std::sync::OnceLock::new();
    static REFUSED: AtomicBool = AtomicBool::new(false);
    if REFUSED.load(Ordering::Relaxed) {
        return None;
    }
    let refused = |e: Errno| {
        if matches!(e, Errno::PERM | Errno::ACCESS | Errno::NOSYS) && !REFUSED.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "idle keep-alive connections are not parked: this system refuses pidfd_open/pidfd_getfd (allow them to the edge: docs/src/deploy.md)");
        }
    };
    let me = SELF.get_or_init(|| pidfd_open(getpid(), PidfdFlags::empty()).map_err(refused).ok()).as_ref()?;
    pidfd_getfd(me, fd, PidfdGetfdFlags::empty()).map_err(refused).ok()
}

/// What a connection waiting for its next request holds.
enum Waiting<'a> {
    /// The connection as it came, for the first [`PARK_AFTER`] (or for good: not one to park).
    Holding(Stream),
    Parked(Parked<'a>),
    /// Given back (or gone).
    Done,
}

/// Waits for a keep-alive connection's next request, at most `idle` and not past a change of
/// `stop` (the start of a stop): its first bytes, with the connection. After [`PARK_AFTER`]
/// without a byte the connection waits parked ([`Parked`], counted in `parked`); a client that speaks then gets its
/// connection made again. One timer and one watch for both phases (the wait is every idle
/// connection's whole state: a few hundred bytes).
pub(crate) async fn next_request_bytes(stream: Stream, idle: Duration, stop: &mut ShutdownWatch, parked: &prometheus::IntGauge) -> Option<(Stream, Vec<u8>)> {
    use std::future::Future;
    use tokio::time::Instant;
    let deadline = Instant::now() + idle;
    let timer = tokio::time::sleep_until((Instant::now() + PARK_AFTER).min(deadline));
    let stopping = stop.changed();
    tokio::pin!(timer, stopping);
    let mut conn = Waiting::Holding(stream);
    let mut parkable = true;
    std::future::poll_fn(move |cx| {
        loop {
            if stopping.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            match &mut conn {
                Waiting::Holding(stream) => match poll_first_read(stream, cx) {
                    Poll::Ready(Ok(bytes)) if !bytes.is_empty() => {
                        let Waiting::Holding(stream) = std::mem::replace(&mut conn, Waiting::Done) else { unreachable!() };
                        return Poll::Ready(Some((stream, bytes)));
                    }
                    Poll::Ready(_) => return Poll::Ready(None),
                    Poll::Pending => {}
                },
                Waiting::Parked(parked) => match parked.tcp.poll_read_ready(cx) {
                    Poll::Ready(Ok(())) => {
                        // The client spoke (or closed): its connection as it came, read at once.
                        let Waiting::Parked(parked) = std::mem::replace(&mut conn, Waiting::Done) else { unreachable!() };
                        let Some(stream) = parked.resume() else { return Poll::Ready(None) };
                        conn = Waiting::Holding(stream);
                        timer.as_mut().reset((Instant::now() + PARK_AFTER).min(deadline));
                        continue;
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(None),
                    Poll::Pending => {}
                },
                Waiting::Done => return Poll::Ready(None),
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if Instant::now() >= deadline || !parkable {
                return Poll::Ready(None);
            }
            timer.as_mut().reset(deadline);
            conn = match std::mem::replace(&mut conn, Waiting::Done) {
                Waiting::Holding(stream) => match Parked::park(stream, parked) {
                    Ok(parked) => Waiting::Parked(parked),
                    // Not one to park: it waits as it is, to the end.
                    Err(stream) => {
                        parkable = false;
                        Waiting::Holding(stream)
                    }
                },
                other => other,
            };
        }
    })
    .await
}
