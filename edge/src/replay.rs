//! A connection with bytes put back in front of it: how the fast front hands a request it read
//! from a TLS stream to the proxy (plain TCP streams have Pingora's own `rewind`); and a
//! connection whose writes are gathered until a flush ([`gathered`]), for HTTP/2 over TLS.
//!
//! [`Replayed`] reads its put-back bytes first, then the stream; everything else (writes, TLS
//! and socket details, ALPN) is the stream's. A connection is wrapped once: a wrapped stream that
//! comes back is given its next put-back bytes in place.
//!
//! The HTTP/2 codec writes a frame buffer and then each large `DATA` payload as separate writes
//! before one flush; over TLS each write is a record of its own and, past the socket's small
//! write buffer, a `sendto` of its own (two per page answered). Gathered, the writes between two
//! flushes leave as one record in one `sendto`.
//!
//! Under TLS ([`under_tls`]) the same gathering stands in for a write buffer: the records written
//! between two flushes leave in one `write`, and an idle connection keeps no buffer.

use std::pin::Pin;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::{GetProxyDigest, GetSocketDigest, GetTimingDigest, SocketDigest, TimingDigest};
use pingora::protocols::tls::SslDigest;
use pingora::protocols::{ALPN, Peek, Shutdown, Ssl, Stream, UniqueID, UniqueIDType};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A stream with bytes to read before its own, and perhaps its writes gathered until a flush.
#[derive(Debug)]
pub struct Replayed {
    inner: Stream,
    front: Vec<u8>,
    pos: usize,
    /// Gathering writes (HTTP/2 over TLS).
    gather: Option<Gather>,
    /// A byte has been read from `inner` (a TLS listener's connection that closes before its
    /// first byte is a TCP probe, not a failed handshake).
    read_any: bool,
}

/// Most bytes gathered before they are written without waiting for a flush: one TLS record.
pub const GATHER_MAX: usize = 16 * 1024;

/// The polls of the task that drives a gathered stream, counted by [`Polls::count`] (zero while
/// flushes are not to be put off), and the bytes the stream has written.
#[derive(Debug, Default)]
pub struct Polls {
    polls: AtomicU64,
    written: AtomicU64,
}

impl Polls {
    /// Puts off flushes from now on: each goes out at the driving task's next poll.
    pub fn start(&self) {
        self.polls.store(1, Ordering::Relaxed);
    }

    /// Wraps the future that drives the stream, so that each of its polls is counted.
    pub fn count<F: Future + Unpin>(self: &Arc<Self>, future: F) -> Counted<F> {
        Counted { polls: Arc::clone(self), future }
    }

    /// Bytes written to the stream so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn now(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }
}

/// A future whose polls are counted (see [`Polls`]).
pub struct Counted<F> {
    polls: Arc<Polls>,
    future: F,
}

impl<F: Future + Unpin> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let now = self.polls.now();
        if now != 0 {
            self.polls.polls.store(now + 1, Ordering::Relaxed);
        }
        Pin::new(&mut self.future).poll(cx)
    }
}

#[derive(Debug)]
struct Gather {
    /// What waits for the next flush (at most [`GATHER_MAX`]).
    out: Vec<u8>,
    /// HTTP/2: flushes put off to the next poll (see [`gathered`]); `None`: an HTTP/1.1
    /// connection of the proxy ([`buffered`]), flushed when asked.
    polls: Option<Arc<Polls>>,
    /// The poll in which a flush was put off (the task was woken to be polled again).
    put_off: Option<u64>,
}

/// `stream` with its writes gathered until a flush (or [`GATHER_MAX`] bytes). Once `polls` is
/// started, a flush is put off until the next poll of the task (woken at once), so the answers
/// of every stream handled in one poll leave together; `polls` must count every poll of the
/// task that drives the stream ([`Polls::count`]).
pub fn gathered(stream: Stream, polls: Arc<Polls>) -> Stream {
    Box::new(Replayed { inner: stream, front: Vec::new(), pos: 0, gather: Some(Gather { out: Vec::new(), polls: Some(polls), put_off: None }), read_any: false })
}

/// An HTTP/1.1 connection (plain, or the plain side of TLS) handed to the proxy, with `bytes` put back in front and its
/// writes gathered until a flush (as Pingora's own write buffer would, so an answer's head and a
/// short body leave in one `write`). Unlike that buffer, this one exists only while something
/// is gathered: an idle keep-alive connection holds none (the public listener has no write
/// buffer of its own, see `server.rs`).
pub fn buffered(stream: Stream, bytes: &[u8]) -> Stream {
    let mut r = replayed(put_back(stream, bytes));
    r.gather.get_or_insert(Gather { out: Vec::new(), polls: None, put_off: None });
    r
}

/// The connection under an HTTPS connection's TLS: its writes (the TLS records) gathered until a
/// flush, so a handshake flight or an answer's records leave in one `write`, as Pingora's 4 KiB
/// write buffer under TLS did; unlike that buffer, this one exists only while records are
/// gathered, and an idle HTTPS connection holds none.
pub fn under_tls(stream: Stream) -> Replayed {
    Replayed { inner: stream, front: Vec::new(), pos: 0, gather: Some(Gather { out: Vec::new(), polls: None, put_off: None }), read_any: false }
}

impl Replayed {
    /// Whether any byte has been read from the stream underneath.
    pub fn has_read(&self) -> bool {
        self.read_any
    }

    /// Writes out what is gathered; `Ready(Ok)` once nothing is left.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let Some(g) = self.gather.as_mut() else { return Poll::Ready(Ok(())) };
        while !g.out.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &g.out) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    g.out.drain(..n);
                    if let Some(polls) = &g.polls {
                        polls.written.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        g.put_off = None;
        // An idle connection keeps no large buffer (an HTTP/1.1 one none at all).
        if g.out.capacity() > GATHER_MAX || g.polls.is_none() {
            g.out = Vec::new();
        }
        Poll::Ready(Ok(()))
    }

    /// Whether this flush may wait for the next poll: the first flush of a poll with something
    /// gathered wakes the task and waits; later ones in the same poll wait with it.
    fn put_off_flush(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(g) = self.gather.as_mut() else { return false };
        let Some(polls) = &g.polls else { return false };
        let now = polls.now();
        if now == 0 || g.out.is_empty() || g.out.len() >= GATHER_MAX {
            return false;
        }
        match g.put_off {
            None => {
                g.put_off = Some(now);
                cx.waker().wake_by_ref();
                true
            }
            Some(at) => at == now,
        }
    }

    /// Whether a flush put off in an earlier poll is still to be done.
    fn flush_due(&self) -> bool {
        self.gather.as_ref().is_some_and(|g| g.put_off.is_some_and(|at| g.polls.as_ref().is_some_and(|p| at != p.now())))
    }

    /// Gathers `bufs` (as much as fits in [`GATHER_MAX`]), writing out what was gathered first
    /// when it is full. On HTTP/1.1 ([`buffered`]) a write of [`GATHER_MAX`] or more goes
    /// straight out once what was gathered before it has (as with a write buffer): a large file
    /// leaves in one write, not copied in pieces.
    fn poll_gather(&mut self, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if len == 0 {
            return Poll::Ready(Ok(0));
        }
        if self.gather.as_ref().is_some_and(|g| g.polls.is_none()) && len >= GATHER_MAX {
            std::task::ready!(self.poll_drain(cx))?;
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        if self.gather.as_ref().is_some_and(|g| g.out.len() >= GATHER_MAX) || self.flush_due() {
            std::task::ready!(self.poll_drain(cx))?;
        }
        let Some(g) = self.gather.as_mut() else { return Poll::Ready(Ok(0)) };
        let mut room = GATHER_MAX - g.out.len();
        let mut taken = 0;
        for b in bufs {
            let n = b.len().min(room);
            g.out.extend_from_slice(&b[..n]);
            taken += n;
            room -= n;
            if room == 0 {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }
}

/// `stream` with `bytes` put back in front (re-using the wrapper when it is one already).
pub fn put_back(stream: Stream, bytes: &[u8]) -> Stream {
    if bytes.is_empty() {
        return stream;
    }
    if stream.as_any().is::<pingora::protocols::l4::stream::Stream>() {
        let Ok(mut l4) = stream.into_any().downcast::<pingora::protocols::l4::stream::Stream>() else { unreachable!() };
        l4.rewind(bytes);
        return l4;
    }
    let mut r = replayed(stream);
    let mut front = bytes.to_vec();
    front.extend_from_slice(&r.front[r.pos..]);
    r.front = front;
    r.pos = 0;
    r
}

/// The plain TCP connection under `stream` (Pingora's own), when nothing waits in front of its
/// socket to be read nor behind it to be written: what an idle connection parks
/// ([`crate::front`]). Anything else is given back as it came.
pub fn plain_tcp(stream: Stream) -> Result<Box<pingora::protocols::l4::stream::Stream>, Stream> {
    if stream.as_any().is::<Replayed>() {
        let Ok(r) = stream.into_any().downcast::<Replayed>() else { unreachable!() };
        let idle = r.pos >= r.front.len() && r.gather.as_ref().is_none_or(|g| g.out.is_empty() && g.put_off.is_none());
        if !idle || !r.inner.as_any().is::<pingora::protocols::l4::stream::Stream>() {
            return Err(r);
        }
        return plain_tcp(r.inner);
    }
    if !stream.as_any().is::<pingora::protocols::l4::stream::Stream>() {
        return Err(stream);
    }
    let Ok(l4) = stream.into_any().downcast::<pingora::protocols::l4::stream::Stream>() else { unreachable!() };
    Ok(l4)
}

/// `stream` as this wrapper: itself when it is one already, else wrapped (nothing put back, writes
/// passed through).
fn replayed(stream: Stream) -> Box<Replayed> {
    if stream.as_any().is::<Replayed>() {
        let Ok(r) = stream.into_any().downcast::<Replayed>() else { unreachable!() };
        return r;
    }
    Box::new(Replayed { inner: stream, front: Vec::new(), pos: 0, gather: None, read_any: false })
}

impl AsyncRead for Replayed {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.pos < this.front.len() {
            let n = (this.front.len() - this.pos).min(buf.remaining());
            buf.put_slice(&this.front[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.front.len() {
                this.front = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        if this.flush_due() {
            // A flush put off in an earlier poll goes out before the task waits for input (a
            // write that cannot finish now is woken, and finished, by the socket).
            let _ = this.poll_drain(cx);
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.read_any |= buf.filled().len() > before;
        r
    }
}

impl AsyncWrite for Replayed {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if self.gather.is_some() {
            return self.poll_gather(cx, &[std::io::IoSlice::new(buf)]);
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.put_off_flush(cx) {
            return Poll::Ready(Ok(()));
        }
        std::task::ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        if self.gather.is_some() {
            return self.poll_gather(cx, bufs);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.gather.is_some() || self.inner.is_write_vectored()
    }
}

#[async_trait]
impl Shutdown for Replayed {
    async fn shutdown(&mut self) {
        // What is gathered goes out first.
        let _ = std::future::poll_fn(|cx| self.poll_drain(cx)).await;
        self.inner.shutdown().await
    }
}

impl UniqueID for Replayed {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Replayed {
    fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Replayed {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for Replayed {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for Replayed {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl Peek for Replayed {}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn put_back_bytes_come_first_then_the_stream_and_writes_pass_through() {
        let (a, mut b) = tokio::io::duplex(1024);
        let inner: Stream = Box::new(a);
        b.write_all(b" world").await.unwrap();
        let mut s = put_back(inner, b"hello");
        assert!(s.as_any().is::<Replayed>());
        let mut got = vec![0u8; 11];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello world");
        // Wrapped once: more put-back bytes go into the same wrapper.
        let mut s = put_back(s, b"again");
        assert!(s.as_any().is::<Replayed>());
        let mut got = vec![0u8; 5];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"again");
        s.write_all(b"out").await.unwrap();
        let mut echo = [0u8; 3];
        b.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"out");
    }

    /// The proxy's HTTP/1.1 connection: put-back bytes first; writes held until a flush (a head
    /// and a short body leave in one write), and nothing held once they are out.
    #[tokio::test]
    async fn buffered_writes_leave_at_the_flush_and_leave_no_buffer() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        b.write_all(b" rest").await.unwrap();
        let mut s = buffered(Box::new(a), b"head");
        let mut got = vec![0u8; 9];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"head rest");
        s.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        s.write_all(b"body").await.unwrap();
        assert_eq!(received(&mut b).await, b"");
        s.flush().await.unwrap();
        assert_eq!(received(&mut b).await, b"HTTP/1.1 200 OK\r\n\r\nbody");
        let Ok(r) = s.into_any().downcast::<Replayed>() else { panic!("not wrapped") };
        assert_eq!(r.gather.as_ref().map(|g| g.out.capacity()), Some(0), "an idle connection holds no write buffer");
        // Handed to the proxy again: the same wrapper, its put-back bytes first.
        let mut s = buffered(r, b"next");
        let mut got = vec![0u8; 4];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"next");
        // A large write goes straight out after what was gathered before it, all in order.
        s.write_all(b"small").await.unwrap();
        let big = vec![7u8; GATHER_MAX * 2 + 5];
        s.write_all(&big).await.unwrap();
        s.flush().await.unwrap();
        assert_eq!(received(&mut b).await, [&b"small"[..], &big].concat());
        // Pingora's shutdown of the stream sends what is gathered first.
        s.write_all(b"last").await.unwrap();
        Shutdown::shutdown(&mut *s).await;
        assert_eq!(received(&mut b).await, b"last");
    }

    /// Counts the wakes of a task.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What the other end has received so far (waits briefly).
    async fn received(b: &mut tokio::io::DuplexStream) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(Ok(n)) = tokio::time::timeout(std::time::Duration::from_millis(50), b.read(&mut buf)).await {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    #[tokio::test]
    async fn gathered_writes_leave_together_at_the_next_poll_of_the_task() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let polls = Arc::new(Polls::default());
        let mut s = gathered(Box::new(a), Arc::clone(&polls));
        assert!(s.is_write_vectored());
        // Before `start` (the HTTP/2 handshake), a flush writes at once.
        s.write_all(b"hello").await.unwrap();
        s.flush().await.unwrap();
        assert_eq!(received(&mut b).await, b"hello");
        polls.start();
        let wakes = Arc::new(Wakes(Default::default()));
        let waker = std::task::Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        // One poll: two answers, each flushed; nothing leaves yet, and the task is woken once.
        for part in [&b"one"[..], b"two"] {
            assert!(matches!(Pin::new(&mut s).poll_write(&mut cx, part), Poll::Ready(Ok(3))));
            assert!(matches!(Pin::new(&mut s).poll_flush(&mut cx), Poll::Ready(Ok(()))));
        }
        assert_eq!(received(&mut b).await, b"");
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        // The next poll's flush sends both in one write.
        polls.count(std::future::ready(())).await;
        assert!(matches!(Pin::new(&mut s).poll_flush(&mut cx), Poll::Ready(Ok(()))));
        assert_eq!(received(&mut b).await, b"onetwo");
        // A flush put off, then the next poll reads first: the flush goes out before the read.
        assert!(matches!(Pin::new(&mut s).poll_write(&mut cx, b"three"), Poll::Ready(Ok(5))));
        assert!(matches!(Pin::new(&mut s).poll_flush(&mut cx), Poll::Ready(Ok(()))));
        polls.count(std::future::ready(())).await;
        let mut buf = [0u8; 8];
        let mut rb = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut s).poll_read(&mut cx, &mut rb).is_pending());
        assert_eq!(received(&mut b).await, b"three");
        // More than one record's worth in one poll leaves in records as it fills, the rest at
        // the next poll; shutdown writes what is left.
        let big = vec![7u8; GATHER_MAX * 2 + 100];
        s.write_all(&big).await.unwrap();
        assert_eq!(received(&mut b).await.len(), GATHER_MAX * 2);
        s.shutdown().await.unwrap();
        assert_eq!(received(&mut b).await.len(), 100);
    }
}
