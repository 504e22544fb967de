//! The one decision step: a request in (its door, method, canonical path, head and socket peer),
//! one [`Decision`] out. Every door — the HTTP/1.1 front ([`crate::front::http1`], with the forwarded fast
//! path [`crate::front::forward`]), the HTTP/2 fast path ([`crate::front::h2`]), Pingora's proxy
//! ([`crate::front::proxy`]) and `/wicket/auth` for nginx — asks here and only carries the answer out;
//! this is the only place that knows the order of the checks (docs/src/design.md §7):
//!
//! ```text
//! fast door can take it?  (no: HandOver, before anything is counted)
//! client IP → IP blocklist (403) → its region: GeoIP rule's block (403), arrival counted, the
//!   anomaly rule's block (403), GeoIP limits (429)
//! unprotected file (GET/HEAD) → limits (429) → Static
//! identity (user, device) → user/device blocklist and device-users rule (403) → limits (429)
//! room paths → Room (a fast door: Status, the poll answered from the counters)
//! /wicket/challenge, /wicket/verify → Bot
//! bot check of the route, or of a GeoIP challenge of the region (403)
//! core admin routes (404) → session touch of an admitted fan at the core
//! protected path (a room in test mode: only for its testers) → admission token → its session
//!   (403 / 302 to the queue; 503 when unreadable; a reject-all room: 403 closed) → a protected
//!   file → Static
//! → Pass (the core, the origin; for /wicket/auth: allow)
//! ```
//!
//! A fast door names what it can carry out; what it cannot is [`Decision::HandOver`] before any
//! check runs, so the proxy's decision is the first and only one that counts (limits, the
//! device-users rule and the anomaly rule all count). Refusals are counted here
//! ([`count_refusal`]) and rendered by the door ([`crate::reject`]).

use std::net::IpAddr;
use std::sync::Arc;

use crate::admission::AdmissionClaims;
use crate::bot::{BotCheckMode, BotProofKind, CHALLENGE_PATH, CaptchaOutcome, PASS_COOKIE, PASS_HEADER, VERIFY_PATH, unix_now};
use crate::identity::{DEVICE_COOKIE, Device, HeadView, cookie, header, header_bytes};
use crate::metrics::Route;
use crate::reject::Reject;
use crate::room::Room;
use crate::room::events::StreamSlot;
use crate::room::ticket::{QueueTicket, cookie_name};
use crate::state::{EdgeState, QUEUE_PREFIX};
use crate::statics::Asset;

/// Identity headers the edge sets for the core and origin; incoming copies are removed.
pub const IDENTITY_HEADERS: [&str; 4] = ["wicket-user", "wicket-device", "wicket-room", "wicket-position"];

/// Which door asks, and so what it can carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// The HTTP/1.1 front: files, queued visitors' status polls and event streams, refusals, and plain `GET`/`HEAD`
    /// of a plain-HTTP origin (the forwarded fast path).
    Http1,
    /// The HTTP/2 fast path: files, status polls, queued visitors' event streams, refusals.
    H2,
    /// Pingora's proxy: everything.
    Proxy,
    /// `/wicket/auth` (nginx `auth_request`): the same decision about the original request, its
    /// passes answered 204.
    Auth,
}

/// A request as a door hands it to [`decide`]: the door has applied the head rules
/// ([`crate::path::check_head`]) and `path` is canonical ([`crate::path::canonical`]).
pub struct Ask<'a, H: HeadView + ?Sized> {
    pub door: Door,
    /// `GET`, `POST`, ... as sent.
    pub method: &'a str,
    /// The canonical path, without the query.
    pub path: &'a str,
    /// The request's headers.
    pub head: &'a H,
    /// The socket peer (a trusted proxy speaks for its client through `X-Forwarded-For`).
    pub peer: IpAddr,
}

/// Who asks, as far as the checks found out.
#[derive(Debug, Clone)]
pub struct Visitor {
    /// The client address ([`crate::identity::ClientIp::resolve`]).
    pub ip: IpAddr,
    /// The site's user id, if the request carries one.
    pub user: Option<String>,
    /// The device (`None` when the decision did not need it: a file).
    pub device: Option<Device>,
    /// `Set-Cookie` values for the answer (a new device cookie, a bot pass).
    pub cookies: Vec<String>,
}

/// What the door does with the request.
pub enum Decision {
    /// A fast door cannot carry this request out: the proxy decides it (nothing was counted).
    HandOver,
    /// Refuse (already counted: [`count_refusal`]); the route it is counted under.
    Refuse(Reject, Visitor, Route),
    /// A file from memory (`route`: [`Route::Static`], or [`Route::Protected`] once admitted),
    /// with `Set-Cookie` values (a passthrough admission's; none otherwise).
    Static { asset: Arc<Asset>, route: Route, cookies: Vec<String> },
    /// A fast door's answer to a queued visitor's status poll: the JSON body.
    Status { body: Vec<u8> },
    /// A fast door serves a queued visitor's event stream itself (on a task holding only the
    /// stream's state, [`crate::room::events::EventFrames`]).
    Events(Box<EventStream>),
    /// The waiting room answers ([`crate::room::http::serve`]).
    Room(Visitor),
    /// `/wicket/challenge` (`verify` false) or `/wicket/verify`.
    Bot { verify: bool, visitor: Visitor },
    /// To the core or the origin; at `/wicket/auth`, allowed. (Boxed: the claims are large, and
    /// the decision lives in every request's future.)
    Pass(Box<Pass>),
}

/// A request on its way upstream (or allowed, at `/wicket/auth`).
pub struct Pass {
    pub visitor: Visitor,
    pub route: Route,
    /// To the core (its prefixes), else the origin.
    pub to_core: bool,
    /// The room and claims of a verified admission token (protected paths).
    pub admitted: Option<(String, AdmissionClaims)>,
    /// A browser's admission cookie for a core request that carries no token: (room, token),
    /// sent to the core as `Authorization: Bearer`.
    pub core_bearer: Option<(String, String)>,
}

/// A queued visitor's event stream, as a fast door serves it.
pub struct EventStream {
    /// The room.
    pub room: Arc<Room>,
    /// The visitor's (valid) ticket.
    pub ticket: QueueTicket,
    /// What places are keyed by: the user, else the device.
    pub sub: String,
    /// The client address (its share of the streams' budget).
    pub ip: IpAddr,
    /// Its slot of the edge's budget of streams, taken by the decision step (`None` until then).
    pub slot: Option<StreamSlot>,
}

/// What a fast door may answer of this request, known before any check runs; `None`: hand over.
enum FastRoute {
    Static,
    Status(Vec<u8>),
    Events(Box<EventStream>),
    Origin,
}

/// The decision about one request (see the module doc for the order). A refusal on a room's
/// paths (its queue's, its protected ones) also counts in that room's report.
pub fn decide<'a, H: HeadView + ?Sized>(st: &'a EdgeState, ask: &'a Ask<'a, H>) -> impl std::future::Future<Output = Decision> + 'a {
    // (A map of the checks' future, not an async fn around it: a request's future grows by two
    // references, not by a second copy of the arguments and a state.)
    futures::FutureExt::map(decide_checks(st, ask), move |d| {
        // (Not the budget of event streams: the edge's capacity, not the room's answer; its
        // metric counts it, and the proxy's stream path does not count it in the report either.)
        if let Decision::Refuse(r, ..) = &d
            && !matches!(r, Reject::EventStreamsFull { .. })
        {
            st.rooms.count_refusal(ask.path, r.reason());
        }
        d
    })
}

async fn decide_checks<H: HeadView + ?Sized>(st: &EdgeState, ask: &Ask<'_, H>) -> Decision {
    let fast = match ask.door {
        Door::Http1 | Door::H2 => match fast_route(st, ask) {
            Some(r) => Some(r),
            None => return Decision::HandOver,
        },
        Door::Proxy | Door::Auth => None,
    };
    let path = ask.path;
    let read = ask.method == "GET" || ask.method == "HEAD";
    let mut v = Visitor { ip: st.client_ip.resolve(ask.peer, ask.head), user: None, device: None, cookies: Vec::new() };
    if st.blocklist.ip(&v.ip) {
        return refuse(st, Reject::Blocked, v);
    }
    // The client's region: the GeoIP rules' and the anomaly rule's block and limits here, their
    // challenge at the bot check. (Only the challenge's source is kept past this point: a
    // request's future stays small.)
    let mut geo_challenge = None;
    if let Some(g) = &st.geoip {
        let place = g.locate(v.ip);
        let verdict = g.verdict(place, path);
        if verdict.challenge.is_some() && matches!(fast, Some(FastRoute::Origin)) {
            // A challenged origin request: the bot check is the proxy's, as on a bot-checked route.
            return Decision::HandOver;
        }
        // A request a rule blocks is not an arrival (the operator dealt with it); one the anomaly
        // rule blocks is, so that its region stays abnormal while the flood lasts.
        if verdict.block != Some(crate::geoip::Source::Rule) {
            g.arrive(place);
        }
        if let Some(source) = verdict.block {
            g.count("block", source);
            return refuse(st, Reject::Blocked, v);
        }
        if g.limits_apply(place, path) {
            match g.check_limits(place, v.ip, path) {
                Ok(paced) => {
                    for (limiter, subject) in paced {
                        limiter.pace(&subject).await;
                    }
                }
                Err(retry_after) => return refuse(st, Reject::RateLimited { retry_after }, v),
            }
        }
        geo_challenge = verdict.challenge;
    }
    // A room in test mode meets only its testers: for everyone else its paths are not protected.
    let protected = st
        .rooms
        .protection()
        .find(path)
        .filter(|p| st.rooms.get(&p.rule.room).is_none_or(|room| st.rooms.meets(&room, ask.head)))
        .cloned();
    if read
        && protected.is_none()
        && let Some(asset) = st.statics.get(path)
    {
        if let Err(r) = limits(st, path, &mut v, ask.head).await {
            return refuse_on(st, r, v, Route::Static);
        }
        if ask.door == Door::Auth {
            return pass(v, Route::Static);
        }
        return Decision::Static { asset: Arc::clone(asset), route: Route::Static, cookies: Vec::new() };
    }
    identify(st, ask.head, &mut v);
    if let Some(device) = &v.device
        && st.identity_refused(v.user.as_deref(), device)
    {
        return refuse(st, Reject::Blocked, v);
    }
    if let Err(r) = limits(st, path, &mut v, ask.head).await {
        return refuse(st, r, v);
    }
    let own = st.rooms.owns(path);
    if ask.door == Door::Auth && (own || path.starts_with("/wicket/")) {
        // The queue's and the edge's own paths: nginx sends them to the edge itself.
        return pass(v, Route::Edge);
    }
    if own {
        return match fast {
            Some(FastRoute::Status(body)) => Decision::Status { body },
            Some(FastRoute::Events(mut stream)) => {
                // Past the budget (the edge's, or this address's share): refused here, so every
                // door answers it as it answers any refusal.
                match st.event_streams.take(v.ip) {
                    Ok(slot) => {
                        stream.ip = v.ip;
                        stream.slot = Some(slot);
                        Decision::Events(stream)
                    }
                    Err(full) => refuse(st, full.reject(), v),
                }
            }
            _ => Decision::Room(v),
        };
    }
    if path == CHALLENGE_PATH || path == VERIFY_PATH {
        return Decision::Bot { verify: path == VERIFY_PATH, visitor: v };
    }
    if (st.bot.any() || geo_challenge.is_some())
        && let Err(r) = bot_gate(st, ask, &mut v, geo_challenge.is_some()).await
    {
        if let (Some(g), Some(source)) = (&st.geoip, geo_challenge) {
            g.count("challenge", source);
        }
        return refuse(st, r, v);
    }
    let to_core = st.core_prefixes.iter().any(|p| path.starts_with(p.as_str()));
    let mut core_bearer = None;
    if to_core {
        if !core_route_public(ask.method, path) {
            // The core's admin routes are for the admin network, never the public port.
            return refuse_on(st, Reject::NotFound, v, Route::Core);
        }
        let bearer = bearer(ask.head);
        if bearer.is_none() {
            // A browser holds its admission token as a cookie; the core wants it as a bearer.
            core_bearer = admission_cookie_for_core(st, ask.head, path);
        }
        if let (Some(token), Some(check)) =
            (bearer.filter(|b| crate::admission::is_admission_jwt(b)).or(core_bearer.as_ref().map(|(_, t)| t.as_str())), &st.admission)
        {
            // An admitted fan at the core (a hold, an order): their session is in use.
            st.rooms.touch_by_token(token, check.as_ref()).await;
        }
    }
    let mut route = if to_core { Route::Core } else { Route::Origin };
    let mut admitted = None;
    if let Some(p) = &protected {
        route = Route::Protected;
        let token = cookie(ask.head, &p.cookie).or_else(|| bearer(ask.head));
        let claims = match (token, &st.admission) {
            (Some(t), Some(check)) => check.verify(t, &p.rule).ok(),
            _ => None,
        };
        // A room's token also needs its session (not revoked, not expired) and its holder: the
        // token's `sub` is the visitor's user or device.
        let claims = match claims {
            Some(c) => {
                let device = v.device.as_ref().map(Device::id);
                match st.rooms.session_ok(&p.rule.room, &c.sub, v.user.as_deref(), device).await {
                    Ok(true) => Some(c),
                    Ok(false) => None,
                    Err(e) => {
                        tracing::warn!(room = %p.rule.room, "admission check: {e}");
                        return refuse_on(st, Reject::RoomStateUnavailable, v, Route::Protected);
                    }
                }
            }
            None => None,
        };
        let (claims, passed) = match claims {
            Some(c) => (c, false),
            // A room turning everyone away: the closed page, never the queue (a running session
            // passes above).
            None if st.rooms.get(&p.rule.room).is_some_and(|room| room.rejecting()) => {
                let room = p.rule.room.clone();
                return refuse_on(st, Reject::RoomClosed { room }, v, Route::Protected);
            }
            // A passthrough room lets the visitor straight in while nobody waits. (Boxed: its
            // writes are a rare way, and every request's future would carry their size.)
            None => match Box::pin(pass_through(st, p, &mut v)).await {
                Ok(Some(c)) => (c, true),
                Ok(None) => {
                    let room = p.rule.room.clone();
                    return refuse_on(st, Reject::NotAdmitted { room }, v, Route::Protected);
                }
                Err(e) => {
                    tracing::warn!(room = %p.rule.room, "passthrough: {e}");
                    return refuse_on(st, Reject::RoomStateUnavailable, v, Route::Protected);
                }
            },
        };
        admitted = Some((p.rule.room.clone(), claims));
        if ask.door != Door::Auth
            && read
            && let Some(asset) = st.statics.get(path)
        {
            // A protected file of the site: served from memory once admitted (with the cookies
            // of a passthrough admission).
            let cookies = if passed { std::mem::take(&mut v.cookies) } else { Vec::new() };
            return Decision::Static { asset: Arc::clone(asset), route: Route::Protected, cookies };
        }
    }
    Decision::Pass(Box::new(Pass { visitor: v, route, to_core, admitted, core_bearer }))
}

/// A passthrough room's admission of a visitor without a token ([`crate::room::Rooms::pass_through`]):
/// the claims of the token it issued, set as the room's admission cookie on the answer (before the
/// device cookie: nginx's `auth_request_set` passes the first `Set-Cookie` on). `None`: the room
/// is not a passthrough room, or its queue is on.
async fn pass_through(st: &EdgeState, p: &crate::admission::ProtectedPath, v: &mut Visitor) -> Result<Option<AdmissionClaims>, crate::room::RoomError> {
    let Some(room) = st.rooms.get(&p.rule.room) else { return Ok(None) };
    if !room.passing(&room.spec()) {
        return Ok(None);
    }
    let device = v.stable_device(st);
    let sub = v.user.clone().unwrap_or_else(|| device.clone());
    let Some(status) = st.rooms.pass_through(&room, &sub, &device).await? else { return Ok(None) };
    let (Some(token), Some(secs), Some(check)) = (&status.token, status.token_seconds, &st.admission) else { return Ok(None) };
    let Ok(claims) = check.verify(token, &p.rule) else { return Ok(None) };
    v.cookies.insert(0, st.cookie(&p.cookie, token, secs));
    st.metrics.passthrough.inc();
    Ok(Some(claims))
}

fn pass(visitor: Visitor, route: Route) -> Decision {
    Decision::Pass(Box::new(Pass { visitor, route, to_core: false, admitted: None, core_bearer: None }))
}

fn refuse(st: &EdgeState, r: Reject, v: Visitor) -> Decision {
    refuse_on(st, r, v, Route::Edge)
}

fn refuse_on(st: &EdgeState, r: Reject, v: Visitor, route: Route) -> Decision {
    count_refusal(st, v.ip, &r);
    Decision::Refuse(r, v, route)
}

/// Counts a refusal, and feeds the anomaly rule for clients that keep hitting limits or failing
/// bot checks (a client that trips it is blocked for a while).
pub fn count_refusal(st: &EdgeState, ip: IpAddr, r: &Reject) {
    st.metrics.rejects.with_label_values(&[r.reason()]).inc();
    if matches!(r, Reject::RateLimited { .. } | Reject::BotCheckFailed(_)) && st.anomaly.observe_reject(ip) {
        st.blocklist.block_ip_for(ip, st.anomaly.block_for());
        st.metrics.anomalies.with_label_values(&[crate::anomaly::Tripped::ClientRejects.label()]).inc();
    }
}

/// What a fast door can answer: a `GET`/`HEAD` of a file, a status poll the counters answer
/// (write-free: asking first changes nothing), or (HTTP/1.1 only) a plain request for a
/// plain-HTTP origin with no bot check on its route. Behind trusted proxies the proxy decides
/// (its `X-Forwarded-For` handling is the upstream's too).
fn fast_route<H: HeadView + ?Sized>(st: &EdgeState, ask: &Ask<'_, H>) -> Option<FastRoute> {
    let head_only = match ask.method {
        "GET" => false,
        "HEAD" => true,
        _ => return None,
    };
    if !st.fast_path || !st.client_ip.is_plain() {
        return None;
    }
    let path = ask.path;
    if st.statics.get(path).is_some() {
        return Some(FastRoute::Static);
    }
    if let Some(room) = path.strip_prefix(QUEUE_PREFIX).and_then(|r| r.strip_suffix("/status"))
        && !head_only
        && !room.contains('/')
    {
        return status_body(st, ask.head, room).map(FastRoute::Status);
    }
    if let Some(room) = path.strip_prefix(QUEUE_PREFIX).and_then(|r| r.strip_suffix("/events"))
        && !head_only
        && !room.contains('/')
    {
        return event_stream(st, ask.head, room, ask.peer).map(FastRoute::Events);
    }
    let forwardable = ask.door == Door::Http1
        && st.fast_forward
        && st.origin.as_ref().is_some_and(|o| !o.tls)
        && !path.starts_with("/wicket/")
        && !st.rooms.owns(path)
        && !st.core_prefixes.iter().any(|p| path.starts_with(p.as_str()))
        && (!st.bot.any() || st.bot.mode(path) == BotCheckMode::Off);
    forwardable.then_some(FastRoute::Origin)
}

/// The JSON body of a queued visitor's status poll when the counters answer it: a valid device
/// cookie and queue ticket, and a place still behind `serving` (or a closed, sold-out or
/// not-yet-open room: [`crate::room::Rooms::waiting_status`]); else `None` (the room answers the
/// long way: no or a bad ticket, the visitor's turn, ...).
fn status_body<H: HeadView + ?Sized>(st: &EdgeState, head: &H, room_id: &str) -> Option<Vec<u8>> {
    let (room, ticket, _) = queued_ticket(st, head, room_id)?;
    let status = st.rooms.waiting_status(&room, &ticket)?;
    serde_json::to_vec(&status).ok()
}

/// A queued visitor's valid ticket when the counters answer its status (as for [`status_body`]),
/// with what its event stream needs; `None`: the room serves the stream the long way.
fn queued_ticket<'h, H: HeadView + ?Sized>(st: &EdgeState, head: &'h H, room_id: &str) -> Option<(Arc<Room>, QueueTicket, &'h str)> {
    let room = st.rooms.get(room_id)?;
    if !st.rooms.meets(&room, head) {
        return None;
    }
    let user = st.users.user(head);
    let device = cookie(head, DEVICE_COOKIE).and_then(|v| st.devices.verify(v))?;
    let ticket = cookie(head, &cookie_name(&room.id))?;
    let sub = user.unwrap_or(device);
    let owner = st.rooms.owner(&room.id, sub);
    let ticket = QueueTicket::decode(ticket, &st.rooms.signer, &room.id, device, &owner).filter(|t| room.ticket_valid(t.issued_at, unix_now()))?;
    Some((room, ticket, sub))
}

/// A queued visitor's event stream when a fast door can serve it: a valid ticket whose
/// status the counters answer ([`queued_ticket`]), no bot check owed (the pass is the proxy's to
/// read); `peer` until the checks resolve the client address.
fn event_stream<H: HeadView + ?Sized>(st: &EdgeState, head: &H, room_id: &str, peer: IpAddr) -> Option<Box<EventStream>> {
    let (room, ticket, sub) = queued_ticket(st, head, room_id)?;
    if ticket.owed {
        return None;
    }
    st.rooms.waiting_status(&room, &ticket)?;
    Some(Box::new(EventStream { room, ticket, sub: sub.to_owned(), ip: peer, slot: None }))
}

/// Fills in user and device ([`EdgeState::identify`]), once.
fn identify<H: HeadView + ?Sized>(st: &EdgeState, head: &H, v: &mut Visitor) {
    if v.device.is_some() {
        return;
    }
    let id = st.identify(head, v.ip);
    v.user = id.user.map(str::to_owned);
    v.cookies.extend(id.cookie);
    v.device = Some(id.device);
}

/// Counts the request against every rule for `path` ([`EdgeState::check_limits`]; the identity
/// first when a rule is keyed by it), and waits out the pacing each needs.
async fn limits<H: HeadView + ?Sized>(st: &EdgeState, path: &str, v: &mut Visitor, head: &H) -> Result<(), Reject> {
    if st.limits.rules.is_empty() {
        return Ok(());
    }
    if st.limits_need_identity(path) {
        identify(st, head, v);
    }
    let paced = st
        .check_limits(path, v.ip, v.user.as_deref(), v.device.as_ref().map(Device::id))
        .map_err(|retry_after| Reject::RateLimited { retry_after })?;
    for (i, subject) in paced {
        st.limits.rules[i].pace(&subject).await;
    }
    Ok(())
}

/// The bot check of a route (`forced`: a GeoIP challenge of the client's region, as `always`): a
/// valid pass, or a proof in the request's headers.
async fn bot_gate<H: HeadView + ?Sized>(st: &EdgeState, ask: &Ask<'_, H>, v: &mut Visitor, forced: bool) -> Result<(), Reject> {
    let head = ask.head;
    let needed = forced || match st.bot.mode(ask.path) {
        BotCheckMode::Off => false,
        BotCheckMode::Always => true,
        BotCheckMode::Suspicious => {
            header_bytes(head, "user-agent").is_none()
                || header_bytes(head, "accept-language").is_none()
                || !matches!(v.device, Some(Device::Cookie(_)))
                || st.anomaly.recent_rejects(&v.ip) > 0
        }
    };
    if !needed {
        return Ok(());
    }
    let binding = v.device.as_ref().map(Device::id).unwrap_or_default();
    let pass = cookie(head, PASS_COOKIE).or_else(|| header(head, PASS_HEADER));
    if pass.is_some_and(|p| st.bot.check_pass(p, binding, unix_now())) {
        return Ok(());
    }
    let pow = header(head, "wicket-pow").and_then(|v| v.split_once(' '));
    let captcha = header(head, "wicket-captcha");
    if pow.is_none() && captcha.is_none() {
        return Err(Reject::BotCheckRequired);
    }
    check_proof(st, pow, captcha, v.ip).await?;
    v.grant_pass(st);
    Ok(())
}

/// Verifies a PoW or CAPTCHA proof per the current policy (the bot check of a route, and
/// `/wicket/verify`).
pub async fn check_proof(st: &EdgeState, pow: Option<(&str, &str)>, captcha: Option<&str>, ip: IpAddr) -> Result<(), Reject> {
    match (st.bot.proof(), pow, captcha) {
        (BotProofKind::Pow, Some((c, n)), _) => match st.bot.pow.verify(c, n, unix_now(), ip) {
            Ok(()) => {
                st.metrics.pow.with_label_values(&["pass"]).inc();
                Ok(())
            }
            Err(e) => {
                st.metrics.pow.with_label_values(&["fail"]).inc();
                Err(Reject::BotCheckFailed(e.text()))
            }
        },
        (BotProofKind::Captcha, _, Some(resp)) if !resp.is_empty() && resp.len() <= 4096 => {
            let Some(c) = &st.bot.captcha else { return Err(Reject::BotCheckUnavailable) };
            let outcome = c.siteverify(resp, ip).await;
            let label = match outcome {
                CaptchaOutcome::Pass => "pass",
                CaptchaOutcome::Fail => "fail",
                CaptchaOutcome::Unavailable => "unavailable",
            };
            st.metrics.captcha.with_label_values(&[label]).inc();
            match outcome {
                CaptchaOutcome::Pass => Ok(()),
                CaptchaOutcome::Fail => Err(Reject::BotCheckFailed("captcha not solved")),
                CaptchaOutcome::Unavailable if c.fail_open() => Ok(()),
                CaptchaOutcome::Unavailable => Err(Reject::BotCheckUnavailable),
            }
        }
        _ => Err(Reject::BotCheckRequired),
    }
}

impl Visitor {
    /// A device id the client holds a signed cookie for (a fresh one replaces a fingerprint), so
    /// the waiting room can bind tickets and places to it, and bot passes.
    pub fn stable_device(&mut self, st: &EdgeState) -> String {
        if let Some(Device::Cookie(id)) = &self.device {
            return id.clone();
        }
        // The fingerprint's cookie set by identify() is replaced by one we know the id of.
        self.cookies.retain(|c| !c.starts_with(DEVICE_COOKIE));
        let (id, value) = st.devices.issue();
        self.cookies.push(st.cookie(DEVICE_COOKIE, &value, 400 * 86_400));
        self.device = Some(Device::Cookie(id.clone()));
        id
    }

    /// Issues a bot pass bound to the device (a fresh device cookie when it had none).
    pub fn grant_pass(&mut self, st: &EdgeState) -> String {
        let binding = self.stable_device(st);
        let pass = st.bot.issue_pass(&binding, unix_now());
        self.cookies.push(st.cookie(PASS_COOKIE, &pass, st.bot.pass_seconds()));
        pass
    }
}

/// `/wicket/revoke` (nginx's report of an origin's `Wicket-Revoke: 1`): ends the session of the
/// admission token the request about `path` carried (cookie or bearer, as the original had it).
pub async fn revoke<H: HeadView + ?Sized>(st: &EdgeState, head: &H, path: &str) {
    if let Some(p) = st.rooms.protection().find(path)
        && let Some(check) = &st.admission
        && let Some(claims) = cookie(head, &p.cookie).or_else(|| bearer(head)).and_then(|t| check.verify(t, &p.rule).ok())
    {
        st.rooms.revoke(&p.rule.room, &claims.sub).await;
    }
}

/// Most sessions one `/wicket/sessions` report may name (nginx-compat/lua sends larger sets in
/// several reports).
pub const LUA_REPORT_MAX: usize = 5000;

/// `/wicket/sessions`: nginx's Lua path (nginx-compat/lua/wicket.lua) reports, once a second, the
/// sessions it passed requests on locally — one line `<room> <sub> <client ip> <user> <device>`
/// each (an absent user empty) — and learns which of them it may go on passing: the answer's `ok`
/// holds one `1` or `0` per line, `1` when the token's `sub` is that user or device, the client
/// address, the user and the device are not blocked, the room still guards a path and neither
/// turns everyone away nor is in test mode, and the session still runs (touched, as a request
/// through the edge touches it). With it comes what the Lua path needs of the edge's config: the
/// protected prefixes, the prefixes whose requests always come to the edge (a limit or bot check
/// covers them, or the edge owns them), and where the user id is read. A malformed line is `0`.
pub async fn lua_sessions(st: &EdgeState, report: &[u8]) -> serde_json::Value {
    let table = st.rooms.protection();
    let local_room = |room: &str| st.rooms.get(room).is_none_or(|r| !r.rejecting() && !r.test_mode());
    let mut ok = String::with_capacity(report.len() / 32);
    for line in report.split(|b| *b == b'\n').filter(|l| !l.is_empty()).take(LUA_REPORT_MAX) {
        let f: Vec<&str> = std::str::from_utf8(line).unwrap_or("").split(' ').collect();
        let alive = match (f.as_slice(), f.get(2).and_then(|i| i.parse::<IpAddr>().ok())) {
            ([room, sub, _, user, device], Some(ip))
                if !sub.is_empty() && (sub == user || sub == device) && table.rules().any(|r| r.room == *room) && local_room(room) =>
            {
                !st.blocklist.ip(&st.client_ip.resolve_peer(ip))
                    && (user.is_empty() || !st.blocklist.user(user))
                    && !st.blocklist.device(device)
                    && st.rooms.session_in_use(room, sub).await.unwrap_or(false)
            }
            _ => false,
        };
        ok.push(if alive { '1' } else { '0' });
    }
    let protected: Vec<serde_json::Value> = table
        .rules()
        .map(|r| serde_json::json!({"path": r.path, "room": r.room, "event": r.event.as_deref().unwrap_or(&r.room), "local": local_room(&r.room)}))
        .collect();
    let mut edge_only: Vec<String> = st.limits.rules.iter().map(|r| r.rule.path.clone()).collect();
    edge_only.extend(st.bot.checked_prefixes());
    edge_only.extend(st.core_prefixes.iter().cloned());
    edge_only.extend([QUEUE_PREFIX.to_owned(), "/wicket/".to_owned()]);
    let e = &st.config.edge;
    serde_json::json!({
        "ok": ok,
        "protected": protected,
        "edge_only": edge_only,
        "user_header": e.user_header.as_deref().map(str::to_ascii_lowercase),
        "user_cookie": e.user_cookie,
    })
}

/// Whether nginx may cache a pass of `/wicket/auth` for `path`: never when a limit rule covers
/// the path, nor when GeoIP counts requests (its limits, the regional anomaly rule): each request
/// must be counted.
pub fn auth_cacheable(st: &EdgeState, path: &str) -> bool {
    !st.limits_cover(path) && st.geoip.as_ref().is_none_or(|g| !g.counts_requests())
}

/// The core's routes that fans and payment providers reach through the public port (docs/src/api.md
/// "Core": event, stock, holds, own orders, payment callbacks). Everything else under the core
/// prefixes — creating events, pause and resume, outbox, reconcile, redeem, refund — is the
/// admin's, and answers 404 at the edge.
pub fn core_route_public(method: &str, path: &str) -> bool {
    let read = method == "GET" || method == "HEAD";
    let post = method == "POST";
    let mut segs = path.strip_prefix('/').unwrap_or(path).split('/');
    let s: [Option<&str>; 5] = [segs.next(), segs.next(), segs.next(), segs.next(), segs.next()];
    match s {
        [Some("v1"), Some("events"), Some(_), None, None] => read,
        [Some("v1"), Some("events"), Some(_), Some("stock"), None] => read,
        [Some("v1"), Some("events"), Some(_), Some("holds"), None] => post,
        [Some("v1"), Some("orders"), Some(_), None, None] => read,
        [Some("v1"), Some("orders"), Some(_), Some("cancel"), None] => post,
        [Some("v1"), Some("payments"), Some("callback"), None, None] => post,
        _ => false,
    }
}

/// The event of a hold (`POST /v1/events/{event}/holds`, the fan's purchase at the core), as
/// [`core_route_public`] spells the route; `None` for every other request.
pub fn hold_event<'a>(method: &str, path: &'a str) -> Option<&'a str> {
    let event = path.strip_prefix("/v1/events/")?.strip_suffix("/holds")?;
    (method == "POST" && !event.is_empty() && !event.contains('/')).then_some(event)
}

/// The admission cookie to present to the core for a request without a token: the cookie of
/// the room whose event the path names (`/v1/events/{event}/…`), or, for the fan's own orders,
/// the only admission cookie the request carries.
fn admission_cookie_for_core<H: HeadView + ?Sized>(st: &EdgeState, head: &H, path: &str) -> Option<(String, String)> {
    // Most core requests (stock polls of the detail page) carry no admission cookie at all.
    let mut any = false;
    head.each("cookie", &mut |v| {
        any = v.windows(9).any(|w| w == b"wicket_a_");
        any
    });
    if !any {
        return None;
    }
    let event = path.strip_prefix("/v1/events/").and_then(|r| r.split('/').next());
    let mut found: Option<(String, String)> = None;
    for room in st.rooms.all() {
        if event.is_some_and(|e| e != room.spec().config.event) {
            continue;
        }
        if let Some(t) = cookie(head, &format!("wicket_a_{}", room.id)).filter(|t| crate::admission::is_admission_jwt(t)) {
            if found.is_some() {
                return None; // several rooms' cookies and no event to choose by
            }
            found = Some((room.id.clone(), t.to_owned()));
        }
    }
    found
}

/// The bearer token of `Authorization`, if any.
pub fn bearer<H: HeadView + ?Sized>(head: &H) -> Option<&str> {
    header(head, "authorization").and_then(|v| v.strip_prefix("Bearer ")).map(str::trim)
}

/// The `Cookie` and `Authorization` values an upstream receives of a request (`None`: the
/// header is left out): the one rule of the proxy, the forwarded fast path and the nginx path.
/// For a request admitted to `room`, without the room's admission token (cookie
/// `wicket_a_<room>`, and a bearer `Authorization` unless `keep_bearer`: the core verifies it
/// itself), whose verified identity travels in `Wicket-*` headers instead; else as the client
/// sent them.
pub fn upstream_credentials<'a>(
    cookies: impl Iterator<Item = &'a [u8]>,
    authorization: Option<&'a [u8]>,
    room: Option<&str>,
    keep_bearer: bool,
) -> (Option<String>, Option<&'a [u8]>) {
    let cookies = match room {
        Some(room) => cookies_without_admission(cookies, room),
        None => {
            let all: Vec<&str> = cookies.filter_map(|v| std::str::from_utf8(v).ok()).collect();
            (!all.is_empty()).then(|| all.join("; "))
        }
    };
    let authorization = authorization.filter(|a| room.is_none() || keep_bearer || !a.starts_with(b"Bearer "));
    (cookies, authorization)
}

/// The request's cookies without the room's admission cookie, as one `Cookie` value (`None`
/// when nothing is left).
fn cookies_without_admission<'a>(values: impl Iterator<Item = &'a [u8]>, room: &str) -> Option<String> {
    let name = format!("wicket_a_{room}=");
    let kept: Vec<&str> = values
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.starts_with(&name))
        .collect();
    (!kept.is_empty()).then(|| kept.join("; "))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::WicketConfig;

    const TOKENS: &str = "[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n\
                          [[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"hs-secret-for-fast-tests-0123456789abcdef\"\n";

    /// The hold route as the core spells it, and nothing near it.
    #[test]
    fn a_hold_is_a_post_to_an_events_holds() {
        assert_eq!(hold_event("POST", "/v1/events/ev-1/holds"), Some("ev-1"));
        for (m, p) in [
            ("GET", "/v1/events/ev-1/holds"),
            ("POST", "/v1/events//holds"),
            ("POST", "/v1/events/ev-1/holds/x"),
            ("POST", "/v1/events/a/b/holds"),
            ("POST", "/v1/events/ev-1/stock"),
            ("POST", "/v1/orders/o-1/cancel"),
        ] {
            assert_eq!(hold_event(m, p), None, "{m} {p}");
        }
        assert!(core_route_public("POST", "/v1/events/ev-1/holds"));
    }

    fn state() -> EdgeState {
        let text = format!(
            "[edge]\nsecret = \"fast-path-test-secret-0123456789\"\nuser-header = \"x-user-id\"\n\
             [edge.anomaly]\ndevice-max-users = 2\n{TOKENS}\
             [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
             release = {{ mode = \"fixed\", rate = 0.0 }}\n"
        );
        EdgeState::build(WicketConfig::from_toml_str(&text).unwrap()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A queued visitor's cookie header: device `wicket_d` and a ticket for place `n`'s holder.
    async fn visitor(st: &EdgeState, user: &str) -> (String, String) {
        let (device, device_cookie) = st.devices.issue();
        let room = st.rooms.get("r1").unwrap();
        let t = st.rooms.join(&room, user, &device).await.unwrap();
        (device, format!("a=b; wicket_d={device_cookie}; wicket_q_r1={}", t.encode(&st.rooms.signer)))
    }

    /// What a door decides about an HTTP/1.1 head (a head the HTTP/1.1 front cannot take
    /// itself is handed over, as `front::http1`'s `handle` does).
    async fn ask(st: &EdgeState, door: Door, head: &str) -> Decision {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        assert!(req.parse(head.as_bytes()).unwrap().is_complete());
        if door == Door::Http1 && !crate::path::simple_head(&req) {
            return Decision::HandOver;
        }
        let target = req.path.unwrap();
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        decide(st, &Ask { door, method: req.method.unwrap(), path, head: &*req.headers, peer: "192.0.2.7".parse().unwrap() }).await
    }

    fn name(d: &Decision) -> &'static str {
        match d {
            Decision::HandOver => "proxy",
            Decision::Refuse(..) => "refuse",
            Decision::Static { .. } => "static",
            Decision::Status { .. } => "status",
            Decision::Events(_) => "events",
            Decision::Room(_) => "room",
            Decision::Bot { .. } => "bot",
            Decision::Pass(_) => "forward",
        }
    }

    async fn kind(st: &EdgeState, head: &str) -> &'static str {
        name(&ask(st, Door::Http1, head).await)
    }

    /// A status poll through the HTTP/1.1 door, and through the proxy when it hands it over (as
    /// on the wire): the decision that answers it.
    async fn poll(st: &EdgeState, cookies: &str, user: Option<&str>) -> Decision {
        let user = user.map(|u| format!("X-User-Id: {u}\r\n")).unwrap_or_default();
        let head = format!("GET /queue/r1/status HTTP/1.1\r\nHost: x\r\nCookie: {cookies}\r\n{user}\r\n");
        match ask(st, Door::Http1, &head).await {
            Decision::HandOver => ask(st, Door::Proxy, &head).await,
            d => d,
        }
    }

    fn status(d: &Decision) -> Option<serde_json::Value> {
        match d {
            Decision::Status { body } => Some(serde_json::from_slice(body).unwrap()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn status_polls_and_files_take_the_fast_path_and_nothing_else_does() {
        let st = state();
        let (_, cookies) = visitor(&st, "u1").await;
        let get = |path: &str, extra: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-User-Id: u1\r\nCookie: {cookies}\r\n{extra}\r\n");
        assert_eq!(kind(&st, &get("/queue/r1/status", "")).await, "status");
        assert_eq!(kind(&st, &get("/queue/r1/status?t=1", "Connection: keep-alive\r\n")).await, "status");
        assert_eq!(kind(&st, &get("/static/queue.js", "")).await, "static");
        // A queued fan's event stream: the fast doors serve it.
        assert_eq!(kind(&st, &get("/queue/r1/events", "")).await, "events");
        assert_eq!(name(&ask(&st, Door::H2, &get("/queue/r1/events", "")).await), "events");
        for (head, why) in [
            ("HEAD /queue/r1/status HTTP/1.1\r\nHost: x\r\n\r\n".to_string(), "HEAD"),
            ("POST /queue/r1/status HTTP/1.1\r\nHost: x\r\n\r\n".to_string(), "POST"),
            ("GET /queue/r1/status HTTP/1.0\r\nHost: x\r\n\r\n".to_string(), "HTTP/1.0"),
            (get("/queue/r1/status", "Connection: close\r\n"), "connection close"),
            (get("/queue/r1/status", "Content-Length: 3\r\n"), "a body"),
            (get("/queue/r1/join", ""), "another queue endpoint"),
            ("GET /queue/r1/events HTTP/1.1\r\nHost: x\r\nX-User-Id: u1\r\n\r\n".to_string(), "a stream without a ticket"),
            (get("/queue/r1/events", "Connection: close\r\n"), "a stream, connection close"),
            ("HEAD /queue/r1/events HTTP/1.1\r\nHost: x\r\n\r\n".to_string(), "HEAD of a stream"),
            (get("/queue/r1/x/events", ""), "a nested stream path"),
            (get("/queue/r1/x/status", ""), "a nested path"),
            (get("/queue/r1", ""), "the queue page"),
        ] {
            assert_eq!(kind(&st, &head).await, "proxy", "{why}");
        }
    }

    #[tokio::test]
    async fn plain_origin_requests_take_the_forwarded_fast_path() {
        let with = |extra: &str| {
            let text = format!(
                "[edge]\nsecret = \"fast-path-test-secret-0123456789\"\norigin = \"http://127.0.0.1:9\"\n\
                 core = \"http://127.0.0.1:10\"\n{extra}\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\n\
                 protected = [\"/buy\"]\nrelease = {{ mode = \"fixed\", rate = 0.0 }}\n{TOKENS}"
            );
            EdgeState::build(WicketConfig::from_toml_str(&text).unwrap()).unwrap_or_else(|e| panic!("{e}"))
        };
        let st = with("");
        let get = |path: &str, extra: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n");
        assert_eq!(kind(&st, &get("/events/42", "")).await, "forward");
        assert_eq!(kind(&st, "HEAD /events/42 HTTP/1.1\r\nHost: x\r\n\r\n").await, "forward");
        // Protected: the admission check runs at this door, and so does its refusal.
        assert_eq!(kind(&st, &get("/buy?x=1", "Cookie: a=b\r\n")).await, "refuse");
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
            assert_eq!(kind(&st, &head).await, "proxy", "{why}");
        }
        assert_eq!(kind(&with("fast-forward = false"), &get("/events/42", "")).await, "proxy", "switched off");
        assert_eq!(kind(&with("trusted-proxies = [\"10.0.0.0/8\"]"), &get("/events/42", "")).await, "proxy", "X-Forwarded-For walk");
        let bot = with("[edge.bot]\nproof = \"pow\"\n[[edge.bot.routes]]\npath = \"/events/\"\ncheck = \"always\"");
        assert_eq!(kind(&bot, &get("/events/42", "")).await, "proxy", "a bot-checked route");
        // The proxy's own decisions about the same requests.
        assert_eq!(name(&ask(&bot, Door::Proxy, &get("/events/42", "")).await), "refuse", "no bot pass");
        assert_eq!(name(&ask(&st, Door::Proxy, &get("/queue/r1", "")).await), "room");
        assert_eq!(name(&ask(&st, Door::Proxy, &get("/wicket/challenge", "")).await), "bot");
        assert_eq!(name(&ask(&st, Door::Proxy, &get("/v1/events/ev-1/reconcile", "")).await), "refuse", "the core's admin route");
        assert_eq!(name(&ask(&st, Door::Auth, &get("/queue/r1", "")).await), "forward", "nginx: the edge's own paths pass");
    }

    #[tokio::test]
    async fn a_queued_visitor_is_answered_from_the_counters() {
        let st = state();
        let (_, first) = visitor(&st, "u1").await;
        let (_, second) = visitor(&st, "u2").await;
        let v = status(&poll(&st, &first, Some("u1")).await).expect("fast answer");
        assert_eq!((v["state"].as_str(), v["position"].as_u64(), v["ahead"].as_u64()), (Some("waiting"), Some(1), Some(0)), "{v}");
        let v = status(&poll(&st, &second, Some("u2")).await).expect("fast answer");
        assert_eq!((v["position"].as_u64(), v["ahead"].as_u64()), (Some(2), Some(1)), "{v}");
        assert!(v.get("token").is_none_or(serde_json::Value::is_null), "{v}");
    }

    #[tokio::test]
    async fn everything_else_goes_to_the_room() {
        let st = state();
        let (device, cookies) = visitor(&st, "u1").await;
        // No device cookie, a forged one, no ticket: the room answers the long way (and sets cookies).
        for c in [cookies.replace("wicket_d=", "x="), cookies.replace("wicket_d=", "wicket_d=A"), cookies.replace("wicket_q_r1=", "x=")] {
            assert_eq!(name(&poll(&st, &c, Some("u1")).await), "room", "{c}");
        }
        // A blocked user or device: refused at the door that took it.
        st.blocklist.block_device_for(&device, Duration::from_secs(60));
        assert!(matches!(poll(&st, &cookies, Some("u1")).await, Decision::Refuse(Reject::Blocked, ..)));
        // The visitor's turn: admission writes a session and a token, so the room does it.
        let st = state();
        let (_, cookies) = visitor(&st, "u1").await;
        st.rooms.get("r1").unwrap().state.advance("n", 1).await.unwrap();
        assert_eq!(name(&poll(&st, &cookies, Some("u1")).await), "room");
    }

    #[tokio::test]
    async fn the_device_users_rule_is_observed_and_trips_at_whichever_door_decides() {
        let st = state();
        let (device, cookies) = visitor(&st, "u1").await;
        assert!(status(&poll(&st, &cookies, Some("u1")).await).is_some());
        assert_eq!(name(&poll(&st, &cookies, Some("u2")).await), "room", "u1's ticket is not u2's: the room answers u2");
        assert!(!st.blocklist.device(&device), "a second user on the device is within the rule");
        assert!(matches!(poll(&st, &cookies, Some("u3")).await, Decision::Refuse(Reject::Blocked, ..)), "the third trips it");
        assert!(st.blocklist.device(&device), "and blocks the device");
        assert!(matches!(poll(&st, &cookies, Some("u1")).await, Decision::Refuse(Reject::Blocked, ..)));
    }
}
