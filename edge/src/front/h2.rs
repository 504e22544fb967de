//! HTTP/2 on the HTTPS listener: Pingora's HTTP/2 connection, with the fast path's answers given
//! on the connection's own task.
//!
//! Pingora serves an HTTP/2 connection by accepting its streams and spawning, for each, the whole
//! proxy machinery (a session, a context, the phase chain) that then writes the answer's head and
//! waits for flow-control capacity before its body: measured here, a page over HTTP/2 ran at
//! 0.55× nginx, with two `sendto` calls per request (the head, then the body, each flushed alone).
//!
//! [`serve`] runs the same accept loop with Pingora's own pieces (its handshake, its stream
//! acceptance with the malformed-stream checks, its session type), and asks the decision step
//! about each stream as the HTTP/2 door ([`crate::decide`]): a file from memory, a queued
//! visitor's status poll, or a refusal is answered right there (a queued visitor's event stream
//! goes on in a small task of its own: [`events`]), its head and body queued together
//! on the connection (the body is reference-counted, sent as the peer's window allows), so the
//! answers of every stream that arrived in one read leave in one write. A decision that has to
//! wait (a limit's pacing, room state in Redis) finishes on a task of its own; everything the door
//! cannot answer is handed to the proxy on its own task, as Pingora does. The answers are the
//! proxy's: the same [`crate::statics::static_response`] head, status JSON and rendered refusal
//! ([`crate::reject`]), plus `Strict-Transport-Security` when configured.
//!
//! The loop also closes a connection idle (no stream in flight, and no answer still being sent, or
//! one that has not moved for as long) for `keepalive-seconds`, gives a
//! stopping edge's clients a `GOAWAY` and serves the streams they had already opened, and closes
//! a connection after [`MAX_REJECTED_STREAMS`] malformed streams, as Pingora's own loop does.
//!
//! Streams handed to the proxy hold one of the connection's upstream slots ([`crate::cancel`]):
//! one connection never has more than `MAX_STREAMS` requests at the upstream, however it paces
//! its `RST_STREAM`s, and one that keeps cancelling is closed with `GOAWAY(ENHANCE_YOUR_CALM)`.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::header;
use pingora::protocols::Stream;
use pingora::protocols::http::ServerSession;
use pingora::protocols::http::v2::server::{H2Accept, HttpSession, handshake};
use pingora::protocols::Digest;
use pingora::server::ShutdownWatch;
use tokio::sync::Notify;

use crate::cancel::Upstreams;
use crate::decide::{Ask, Decision, Door, EventStream, decide};
use crate::room::events::EventFrames;
use super::conn::{Front, Handover};
use crate::path::simple_fields;
use crate::metrics::{Outcome, Route};
use crate::replay::Polls;
use crate::statics::static_response;

/// Malformed streams (refused by Pingora's acceptance checks) after which the connection closes.
pub const MAX_REJECTED_STREAMS: usize = 32;


/// Streams in flight on one connection, so that only an idle connection times out.
#[derive(Default)]
struct Active {
    count: AtomicUsize,
    idle: Notify,
}

/// Held by a stream's task while it runs.
struct InFlight(Arc<Active>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_one();
        }
    }
}

impl Active {
    fn start(self: &Arc<Self>) -> InFlight {
        self.count.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(self))
    }

    /// Resolves once no stream has been in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let notified = self.idle.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                break;
            }
            notified.await;
        }
        tokio::time::sleep(idle).await;
    }
}

/// Serves one HTTP/2 connection (after ALPN chose `h2`) until the client or the edge ends it.
pub async fn serve<P: Handover>(front: &Arc<Front<P>>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
    // The connection's writes are gathered, and flushed once per poll of this task.
    let polls = Arc::new(Polls::default());
    let stream = crate::replay::gathered(stream, Arc::clone(&polls));
    polls.count(Box::pin(drive(front, stream, shutdown, &polls))).await
}

/// The accept loop of [`serve`].
async fn drive<P: Handover>(front: &Arc<Front<P>>, stream: Stream, shutdown: &ShutdownWatch, polls: &Polls) -> Option<Stream> {
    let digest = Arc::new(Digest {
        ssl_digest: stream.get_ssl_digest(),
        timing_digest: stream.get_timing_digest(),
        proxy_digest: stream.get_proxy_digest(),
        socket_digest: stream.get_socket_digest(),
    });
    let peer = digest.socket_digest.as_ref().and_then(|d| d.peer_addr()).and_then(|a| a.as_inet()).map(|a| a.ip());
    // The client's preface and SETTINGS within the head deadline, as a first request head on
    // HTTP/1.1: a client that chose h2 and then says nothing is not kept.
    let mut options = front.proxy.h2_options().unwrap_or_else(pingora::protocols::http::v2::server::default_h2_options);
    options.max_concurrent_streams(crate::cancel::MAX_STREAMS);
    let mut conn = match tokio::time::timeout(front.state.timeouts.header, handshake(stream, Some(options))).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!("HTTP/2 handshake failed: {e}");
            return None;
        }
        Err(_) => {
            tracing::debug!("HTTP/2 preface did not arrive in time");
            return None;
        }
    };
    polls.start();
    let active = Arc::new(Active::default());
    let upstreams = Arc::new(Upstreams::new());
    let _close_slots = CloseSlots(Arc::clone(&upstreams));
    let idle = Duration::from_secs(front.state.keepalive);
    let mut stop = shutdown.clone();
    let mut stopping = *stop.borrow();
    if stopping {
        conn.graceful_shutdown();
    }
    let mut rejected = 0;
    let mut stalled_at = None;
    loop {
        let next = if stopping {
            // Serve what the client opened before it saw the GOAWAY, and let the codec finish.
            HttpSession::from_h2_conn(&mut conn, digest.clone()).await
        } else {
            tokio::select! {
                biased;
                _ = stop.changed() => {
                    conn.graceful_shutdown();
                    stopping = true;
                    continue;
                }
                _ = upstreams.spent() => {
                    // A client that cancels what it asks for: no more streams from it.
                    let (handed, cancelled) = upstreams.counts();
                    tracing::debug!(handed, cancelled, "HTTP/2 connection closed: too many cancelled streams");
                    front.state.metrics.rejects.with_label_values(&["h2_cancel_budget"]).inc();
                    conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                    stopping = true;
                    continue;
                }
                next = HttpSession::from_h2_conn(&mut conn, digest.clone()) => next,
                _ = active.idle_for(idle) => {
                    // No task in flight, but fast answers may still be on their way to a slow
                    // reader: the connection stays while they move, and closes once they have
                    // not moved a byte for a whole keep-alive period.
                    let sent = polls.written();
                    if !conn.has_streams() || stalled_at == Some(sent) {
                        return None;
                    }
                    stalled_at = Some(sent);
                    continue;
                }
            }
        };
        match next {
            // Clients often just close the socket; nothing to log above debug.
            Err(e) => {
                tracing::debug!("HTTP/2 connection ended: {e}");
                return None;
            }
            Ok(None) => return None,
            Ok(Some(H2Accept::Rejected)) => {
                rejected += 1;
                if rejected >= MAX_REJECTED_STREAMS {
                    tracing::debug!("HTTP/2 connection closed after {rejected} malformed streams");
                    return None;
                }
            }
            Ok(Some(H2Accept::Session(session))) => on_stream(front, session, peer, &active, &upstreams, shutdown),
        }
    }
}

/// Hands one stream to the proxy within the connection's upstream slots ([`crate::cancel`]).
async fn hand_on<P: Handover>(upstreams: &Upstreams, proxy: &Arc<P>, mut session: HttpSession, shutdown: &ShutdownWatch) {
    let Some(slot) = upstreams.slot().await else { return };
    // Reset while it waited for a slot: nothing reached the upstream.
    let reset = std::pin::pin!(session.idle()).poll(&mut std::task::Context::from_waker(std::task::Waker::noop())).is_ready();
    if reset {
        upstreams.cancelled(slot, false);
        return;
    }
    upstreams.serve(slot, proxy.process_new_http(ServerSession::new_http2(session), shutdown)).await;
}

/// Closes the upstream slots when the connection's loop ends, so that streams still waiting for
/// one end too.
struct CloseSlots(Arc<Upstreams>);

impl Drop for CloseSlots {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// One stream: the decision step ([`crate::decide`], as the HTTP/2 door) on the connection's own
/// task, its answer (a file, a status poll, a refusal) queued right there; a decision that has to
/// wait (a limit's pacing, the room state in Redis) finishes on a task of its own; what this door
/// cannot answer goes to the proxy on its own task, as Pingora does.
fn on_stream<P: Handover>(front: &Arc<Front<P>>, session: HttpSession, peer: Option<IpAddr>, active: &Arc<Active>, upstreams: &Arc<Upstreams>, shutdown: &ShutdownWatch) {
    let to_proxy = |session: HttpSession, in_flight: InFlight| {
        let proxy = Arc::clone(&front.proxy);
        let shutdown = shutdown.clone();
        let upstreams = Arc::clone(upstreams);
        tokio::spawn(async move {
            let _in_flight = in_flight;
            hand_on(&upstreams, &proxy, session, &shutdown).await;
        });
    };
    let Some(peer) = peer.filter(|_| simple(&session)) else { return to_proxy(session, active.start()) };
    let door = Arc::clone(front);
    let mut task = Box::pin(async move {
        let mut session = session;
        let decision = {
            let req = session.req_header();
            let path = req.uri.path();
            decide(&door.state, &Ask { door: Door::H2, method: req.method.as_str(), path, head: req, peer }).await
        };
        match decision {
            Decision::HandOver => Some((session, None)),
            // Started by the caller, which holds the connection's count of streams in flight.
            Decision::Events(ev) => Some((session, Some(ev))),
            decision => {
                answer(&door, &mut session, decision);
                None
            }
        }
    });
    match task.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(None) => {}
        std::task::Poll::Ready(Some((session, None))) => to_proxy(session, active.start()),
        std::task::Poll::Ready(Some((session, Some(ev)))) => events(front, session, *ev, active.start(), shutdown.clone()),
        std::task::Poll::Pending => {
            // Polled again at once by the runtime, which then holds the waker.
            let in_flight = active.start();
            let front = Arc::clone(front);
            let upstreams = Arc::clone(upstreams);
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                match task.await {
                    Some((session, None)) => hand_on(&upstreams, &front.proxy, session, &shutdown).await,
                    Some((session, Some(ev))) => events(&front, session, *ev, in_flight, shutdown),
                    None => {}
                }
            });
        }
    }
}

/// A queued visitor's event stream ([`crate::room::events`]), its slot of the edge's budget taken
/// by the decision step: the head, then a task of its own holding only the stream's state and
/// the HTTP/2 stream's sending half (the request's session is dropped), each frame a DATA frame,
/// until the frames end (END_STREAM), the edge stops, or the client resets the stream or closes
/// the connection. It counts as a stream in flight, so the connection is not closed as idle.
fn events<P: Handover>(front: &Arc<Front<P>>, mut session: HttpSession, ev: EventStream, in_flight: InFlight, mut shutdown: ShutdownWatch) {
    let st = &front.state;
    let hsts = |h: &mut pingora::http::ResponseHeader| {
        if let Some(v) = &front.hsts {
            let _ = h.insert_header(header::STRICT_TRANSPORT_SECURITY, v.value.clone());
        }
    };
    let Ok(mut h) = pingora::http::ResponseHeader::build_no_case(200, Some(3)).and_then(|mut h| {
        h.insert_header(header::CONTENT_TYPE, "text/event-stream")?;
        h.insert_header(header::CACHE_CONTROL, "no-store")?;
        Ok(h)
    }) else {
        return;
    };
    hsts(&mut h);
    if session.write_response_header(Box::new(h), false).is_err() {
        return;
    }
    let Some(mut writer) = session.take_response_body_writer() else { return };
    drop(session);
    st.metrics.request(Route::Edge, Outcome::Ok);
    let front = Arc::clone(front);
    tokio::spawn(async move {
        // The stream's slot of the budget (taken by the decision step) is held until it ends.
        let EventStream { room, ticket, sub, slot, .. } = ev;
        let _held = (in_flight, slot);
        let mut frames = EventFrames::new(room, ticket, &sub, front.state.event_streams.longest());
        drop(sub);
        loop {
            let frame = tokio::select! {
                f = frames.next(&front.state.rooms) => f,
                _ = std::future::poll_fn(|cx| writer.poll_reset(cx)) => return,
                _ = shutdown.changed() => None,
            };
            let Some(frame) = frame else {
                let _ = writer.send_data(bytes::Bytes::new(), true);
                return;
            };
            if writer.send_data(bytes::Bytes::from(frame), false).is_err() {
                return;
            }
        }
    });
}

/// Whether this door can take the stream without the proxy's rewriting or refusing: a canonical
/// path within the head size limit, the head rules kept, no body. Transport rules only.
fn simple(session: &HttpSession) -> bool {
    let req = session.req_header();
    let Some(target) = req.uri.path_and_query().map(|p| p.as_str()) else { return false };
    let fields = || req.headers.iter().map(|(k, v)| (k.as_str().as_bytes(), v.as_bytes()));
    let head_len = target.len() + req.headers.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum::<usize>();
    head_len <= crate::reject::MAX_REQUEST_HEAD
        && target.starts_with('/')
        && matches!(crate::path::canonical_target(target), Ok(std::borrow::Cow::Borrowed(_)))
        && crate::path::check_head(crate::path::Proto::H2, target, fields()).is_ok()
        && simple_fields(fields())
        && session.is_body_empty()
}

/// Queues the answer of a decision on the stream. A stream the client has reset is dropped
/// quietly (as a fan closing a tab is).
fn answer<P>(front: &Front<P>, session: &mut HttpSession, decision: Decision) {
    let st = &front.state;
    let built = match decision {
        Decision::Static { asset, route, cookies } => static_response(&asset, session.req_header()).map(|(mut h, body, outcome)| {
            for c in cookies {
                let _ = h.append_header(header::SET_COOKIE, c);
            }
            (h, body, route, outcome)
        }),
        Decision::Status { body } => pingora::http::ResponseHeader::build_no_case(200, Some(4)).and_then(|mut h| {
            h.insert_header(header::CONTENT_TYPE, "application/json")?;
            h.insert_header(header::CACHE_CONTROL, "no-store")?;
            h.insert_header(header::CONTENT_LENGTH, body.len())?;
            Ok((h, Some(bytes::Bytes::from(body)), Route::Edge, Outcome::Ok))
        }),
        Decision::Refuse(reject, visitor, route) => {
            let req = session.req_header();
            let words = crate::reject::html_lang(req, req.uri.query()).map(|l| st.queue_page.words(l));
            let (mut h, body) = reject.render_with(words.as_ref().map(|w| w as &dyn crate::i18n::Words));
            for c in visitor.cookies {
                let _ = h.append_header(header::SET_COOKIE, c);
            }
            let body = (req.method != http::Method::HEAD && !body.is_empty()).then_some(body);
            Ok((h, body, route, Outcome::Rejected))
        }
        // Not given to this door.
        Decision::HandOver | Decision::Room(_) | Decision::Bot { .. } | Decision::Pass(_) | Decision::Events(_) => return,
    };
    let Ok((mut head, body, route, outcome)) = built else { return };
    if let Some(h) = &front.hsts {
        let _ = head.insert_header(header::STRICT_TRANSPORT_SECURITY, h.value.clone());
    }
    if session.write_response_header(Box::new(head), body.is_none()).is_err() {
        return;
    }
    if let Some(body) = body
        && let Some(mut writer) = session.take_response_body_writer()
        && writer.send_data(body, true).is_err()
    {
        return;
    }
    st.metrics.request(route, outcome);
}
