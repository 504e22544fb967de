//! An HTTPS connection that only sends: what a queued fan's event stream needs once its request
//! is read (issue #40). rustls's buffered connection keeps a 4 KiB read buffer for as long as the
//! connection lives (it never gives it back while the connection may read), its handshake's and
//! record layer's state beside it: about 9.9 KB a connection (bench/results/sse-fanout.md). An
//! event stream reads nothing more; it writes a frame every few seconds. So after the answer's
//! head has left through rustls, the connection's traffic keys and sequence numbers are taken out
//! of it (rustls's `dangerous_extract_secrets`, made for kernel TLS; `enable_secret_extraction`
//! is set on the listener's config for this) and rustls is dropped whole; [`SendOnlyTls`] seals
//! each write as one record (or more, of at most 16 KiB each) with ring's AEAD itself — TLS 1.3's
//! and TLS 1.2's record formats for AES-GCM and ChaCha20-Poly1305, the ciphers the listener
//! offers — and what is left per stream is one sealing key and a sequence number (about 0.6 KB for
//! AES-GCM's key schedule, less for ChaCha20).
//!
//! Reading: the stream only needs to know when the client goes. End of file is the client gone
//! (or half-closed); any byte is a record the stream will not read (a `close_notify`, a pipelined
//! request, a key update): [`SendOnlyTls`]'s read says so with [`std::io::ErrorKind::InvalidData`],
//! and the stream then ends with its last chunk and closes the connection with its own
//! `close_notify` ([`Shutdown`]) — the connection cannot be served on, since its read side was
//! never decrypted. Browsers open an event stream on a connection of its own and never pipeline
//! on it; a client that does is answered by a closed connection and retries on a new one.
//!
//! The keys are never used past `MAX_RECORDS` records (far beyond what a stream of
//! `event-stream-seconds` writes; a TLS 1.3 key update is not needed before 2^24.5 records with
//! AES-GCM): a write past it is an error, and the stream ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::SslDigest;
use pingora::protocols::{ALPN, GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, Ssl, SocketDigest, TimingDigest, UniqueID, UniqueIDType};
use ring::aead;
use rustls::ConnectionTrafficSecrets;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::replay::Replayed;

/// The largest TLS plaintext a record carries (RFC 8446 §5.1, RFC 5246 §6.2.1).
const MAX_FRAGMENT: usize = 16 * 1024;
/// Records sealed with one key at most: well under TLS 1.3's AES-GCM limit (2^24.5), and far
/// more than an event stream writes.
const MAX_RECORDS: u64 = 1 << 24;
/// TLS content types.
const APPLICATION_DATA: u8 = 23;
const ALERT: u8 = 21;
/// A record's header: type, legacy version 3.3, length.
const HEADER: usize = 5;
/// The AEAD tag of every cipher the listener offers.
const TAG: usize = 16;
/// TLS 1.2 AES-GCM's explicit nonce, sent before each record's ciphertext (RFC 5288 §3).
const EXPLICIT_NONCE: usize = 8;

/// Which record format the keys seal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// TLS 1.3: the content type inside the ciphertext, the header as the additional data.
    Tls13,
    /// TLS 1.2 with AES-GCM: an explicit nonce before the ciphertext.
    Tls12Gcm,
    /// TLS 1.2 with ChaCha20-Poly1305: no explicit nonce.
    Tls12Chacha,
}

/// What seals the records: the key, its nonce base and the next record's sequence number.
struct Sealer {
    key: aead::LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
    seq: u64,
    format: Format,
}

impl Sealer {
    fn new(version: rustls::ProtocolVersion, seq: u64, secrets: ConnectionTrafficSecrets) -> Result<Sealer, &'static str> {
        let tls13 = match version {
            rustls::ProtocolVersion::TLSv1_3 => true,
            rustls::ProtocolVersion::TLSv1_2 => false,
            _ => return Err("a protocol version the listener does not speak"),
        };
        let (alg, key, iv, format) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv, if tls13 { Format::Tls13 } else { Format::Tls12Gcm }),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv, if tls13 { Format::Tls13 } else { Format::Tls12Gcm }),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (&aead::CHACHA20_POLY1305, key, iv, if tls13 { Format::Tls13 } else { Format::Tls12Chacha }),
            _ => return Err("a cipher the listener does not offer"),
        };
        let key = aead::UnboundKey::new(alg, key.as_ref()).map_err(|_| "a traffic key of the wrong length")?;
        let iv: [u8; aead::NONCE_LEN] = iv.as_ref().try_into().map_err(|_| "a nonce base of the wrong length")?;
        Ok(Sealer { key: aead::LessSafeKey::new(key), iv, seq, format })
    }

    /// Appends `plain` to `out` as records of content type `typ`.
    fn seal(&mut self, typ: u8, plain: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        for fragment in plain.chunks(MAX_FRAGMENT) {
            if self.seq >= MAX_RECORDS {
                return Err(std::io::Error::other("the stream's TLS keys have sealed their last record"));
            }
            let mut nonce = self.iv;
            for (n, s) in nonce[aead::NONCE_LEN - 8..].iter_mut().zip(self.seq.to_be_bytes()) {
                *n ^= s;
            }
            let start = out.len();
            match self.format {
                Format::Tls13 => {
                    // The inner plaintext: the content, then its real type (RFC 8446 §5.2).
                    let len = fragment.len() + 1 + TAG;
                    out.extend_from_slice(&[APPLICATION_DATA, 3, 3]);
                    out.extend_from_slice(&(len as u16).to_be_bytes());
                    out.extend_from_slice(fragment);
                    out.push(typ);
                    let header: [u8; HEADER] = out[start..start + HEADER].try_into().expect("five bytes");
                    self.seal_in_place(nonce, aead::Aad::from(header), out, start + HEADER)?;
                }
                Format::Tls12Gcm | Format::Tls12Chacha => {
                    let explicit = if self.format == Format::Tls12Gcm { EXPLICIT_NONCE } else { 0 };
                    let len = explicit + fragment.len() + TAG;
                    out.extend_from_slice(&[typ, 3, 3]);
                    out.extend_from_slice(&(len as u16).to_be_bytes());
                    // RFC 5246 §6.2.3.3: the sequence number, type, version and plaintext length.
                    let mut aad = [0u8; 13];
                    aad[..8].copy_from_slice(&self.seq.to_be_bytes());
                    aad[8..11].copy_from_slice(&[typ, 3, 3]);
                    aad[11..].copy_from_slice(&(fragment.len() as u16).to_be_bytes());
                    out.extend_from_slice(&nonce[aead::NONCE_LEN - explicit..]);
                    out.extend_from_slice(fragment);
                    self.seal_in_place(nonce, aead::Aad::from(aad), out, start + HEADER + explicit)?;
                }
            }
            self.seq += 1;
        }
        Ok(())
    }

    /// Seals `out[from..]` in place and appends the tag.
    fn seal_in_place<A: AsRef<[u8]>>(&self, nonce: [u8; aead::NONCE_LEN], aad: aead::Aad<A>, out: &mut Vec<u8>, from: usize) -> std::io::Result<()> {
        let tag = self
            .key
            .seal_in_place_separate_tag(aead::Nonce::assume_unique_for_key(nonce), aad, &mut out[from..])
            .map_err(|_| std::io::Error::other("a TLS record could not be sealed"))?;
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }
}

/// An HTTPS/1.1 connection after its request, reduced to sending (module docs), as Pingora's
/// [`pingora::protocols::Stream`]. Writes are sealed into records and handed to the socket's
/// gathering layer ([`crate::replay::under_tls`]); nothing is held between writes.
pub struct SendOnlyTls {
    io: Replayed,
    sealer: Box<Sealer>,
    /// Sealed records the socket has not taken yet (empty, without capacity, between writes).
    out: Vec<u8>,
    sent: usize,
    /// `close_notify` has been sealed.
    closing: bool,
    /// For the digest: the suite and version names.
    names: (&'static str, &'static str),
}

impl SendOnlyTls {
    /// Takes the keys out of `conn` (after its handshake, with nothing left to send: the caller
    /// flushed) and keeps `io`. `Err` says why not; the connection is then lost (rustls consumes
    /// it), so the callers check [`sendable`] first.
    pub(super) fn new(io: Replayed, conn: rustls::ServerConnection) -> Result<SendOnlyTls, &'static str> {
        let version = conn.protocol_version().ok_or("no protocol version")?;
        let suite = conn.negotiated_cipher_suite().and_then(|s| s.suite().as_str()).unwrap_or("");
        let names = (suite, version.as_str().unwrap_or(""));
        let secrets = conn.dangerous_extract_secrets().map_err(|_| "the connection's keys could not be taken out")?;
        let (seq, tx) = secrets.tx;
        Ok(SendOnlyTls { io, sealer: Box::new(Sealer::new(version, seq, tx)?), out: Vec::new(), sent: 0, closing: false, names })
    }

    /// Hands the sealed records to the socket; `Ready(Ok)` once it took them all.
    fn poll_out(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.sent < self.out.len() {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out = Vec::new();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

/// Whether `conn` can be reduced to sending: its handshake done, nothing of rustls's left to send.
pub(super) fn sendable(conn: &rustls::ServerConnection) -> bool {
    !conn.is_handshaking() && !conn.wants_write() && conn.alpn_protocol() != Some(b"h2")
}

impl std::fmt::Debug for SendOnlyTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendOnlyTls").field("io", &self.io).field("version", &self.names.1).field("seq", &self.sealer.seq).finish()
    }
}

impl AsyncRead for SendOnlyTls {
    /// End of file when the client closed its side; any byte is an error (module docs).
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        if buf.filled().len() == before {
            return Poll::Ready(Ok(()));
        }
        buf.set_filled(before);
        Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "TLS records on a connection that only sends")))
    }
}

impl AsyncWrite for SendOnlyTls {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_out(cx))?;
        if self.closing {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        let this = &mut *self;
        let mut out = std::mem::take(&mut this.out);
        this.sealer.seal(APPLICATION_DATA, buf, &mut out)?;
        this.out = out;
        // Taken: what the socket does not take now leaves at the next write or flush.
        let _ = self.poll_out(cx)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_out(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// `close_notify`, then the socket's own shutdown.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_out(cx))?;
        if !self.closing {
            self.closing = true;
            let this = &mut *self;
            // Alert level warning (1), description close_notify (0).
            this.sealer.seal(ALERT, &[1, 0], &mut this.out)?;
            std::task::ready!(self.poll_out(cx))?;
        }
        std::task::ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// How long a closing stream's `close_notify` may wait for the client to take it.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

#[async_trait]
impl Shutdown for SendOnlyTls {
    async fn shutdown(&mut self) {
        let _ = tokio::time::timeout(CLOSE_WAIT, tokio::io::AsyncWriteExt::shutdown(self)).await;
    }
}

impl UniqueID for SendOnlyTls {
    fn id(&self) -> UniqueIDType {
        self.io.id()
    }
}

impl Ssl for SendOnlyTls {
    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        Some(Arc::new(SslDigest::new(self.names.0, self.names.1, None, None, Vec::new())))
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        Some(ALPN::H1)
    }
}

impl GetTimingDigest for SendOnlyTls {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.io.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.io.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.io.get_write_pending_time()
    }
}

impl GetProxyDigest for SendOnlyTls {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.io.get_proxy_digest()
    }
}

impl GetSocketDigest for SendOnlyTls {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.io.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.io.set_socket_digest(digest)
    }
}

impl Peek for SendOnlyTls {}
