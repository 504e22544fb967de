//! The queue's public endpoints (docs/src/api.md "Edge"):
//!
//! | method, path | does |
//! |---|---|
//! | `GET /queue/<room>` | joins when needed; the queue page rendered with the status in the fan's language ([`super::page`]; `?lang=` sets the `wicket_lang` cookie), a 302 to the target once admitted (no-JS), or the status JSON for `Accept: application/json` |
//! | `POST /queue/<room>/join` | joins (`{}`) or gives the room's check for the place held (`{"pow":{"challenge","nonce"}}` / `{"captcha":"..."}`); the status JSON |
//! | `GET /queue/<room>/status` | the status JSON; 401 without a valid ticket |
//! | `GET /queue/<room>/events` | the status JSON as server-sent events until admitted (then `redirect` is `/queue/<room>`, which sets the admission cookie) |
//! | `GET /queue/<room>/challenge` | a proof-of-work challenge |
//! | `GET /queue/<room>/test?key=<test cookie>` | sets the room's test cookie (from `POST /admin/rooms/<room>/test-cookie`) and sends the browser to the queue page |
//! | `POST /queue/<room>/invite` | redeems an invite code ([`super::invite_http`]); `GET /queue/<room>?invite=<code>` too |
//!
//! A room in test mode answers only its testers (a valid `wicket_t_<room>` cookie): anyone else is
//! sent to the room's target (a browser's page) or told 404 (JSON). A room that turns everyone away
//! (reject-all) queues nobody: the queue page and the JSON answers say `closed`.
//!
//! The room's `queuing-status-code` (200, 202 or 429; the last two with `Retry-After`, the poll
//! interval) is the status of the queue page and of the JSON answers of `GET /queue/<room>` and
//! `POST .../join` while the visitor is queued ([`Status::queued`]); status polls and event
//! streams stay 200 (a client polls on, it is not told to back off).
//!
//! While a room is invite-only (`[rooms.invite]`), a visitor without a place who is not an
//! invitee gets the invite page (403) or `{"error": "invite_only"}` instead of a place.
//!
//! A room with a bot check gives the place at the first arrival and the check gates admission:
//! until it is given, status answers say `proof_owed` (with a challenge on JSON answers of a
//! proof-of-work room), and the place is not admitted at its turn (kept `proof-grace-seconds`).
//!
//! ```text
//! curl -i -H 'Accept: application/json' http://127.0.0.1:8080/queue/ev-42
//! ```

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::json;

use super::config::RoomBotCheck;
use super::events::EventFrames;
use super::lent::QueueEdge;
use super::page::PageView;
use super::ticket::{QueueTicket, cookie_name};
use super::{Phase, Room, RoomError, Status, StatusOutcome};
use crate::bot::{CaptchaOutcome, ProofBody, PASS_COOKIE, PASS_HEADER, unix_now};
use crate::i18n::{LANG_COOKIE, Lang};
use crate::identity::{cookie, header as header_str};

/// Who is asking, as the proxy resolved it.
pub struct QueueRequest {
    /// Client IP.
    pub ip: IpAddr,
    /// The site's user id, when known.
    pub user: Option<String>,
    /// The device id (a signed `wicket_d` cookie the client holds or is being given).
    pub device: String,
    /// `Set-Cookie` values for the answer.
    pub cookies: Vec<String>,
}

impl QueueRequest {
    /// What places, sessions and tokens are keyed by: the user, else the device.
    pub fn sub(&self) -> &str {
        self.user.as_deref().unwrap_or(&self.device)
    }
}

fn bot_name(b: RoomBotCheck) -> &'static str {
    b.name()
}
async fn answer(session: &mut Session, status: u16, ctype: &str, body: Bytes, extra: &[(http::HeaderName, String)]) -> pingora::Result<bool> {
    let mut h = ResponseHeader::build(status, Some(4 + extra.len()))?;
    h.insert_header(header::CONTENT_TYPE, ctype)?;
    h.insert_header(header::CONTENT_LENGTH, body.len())?;
    h.insert_header(header::CACHE_CONTROL, "no-store")?;
    for (k, v) in extra {
        h.append_header(k.clone(), v.as_str())?;
    }
    // Header and body in one task list: one write to the socket, not two (status polls are the
    // hottest dynamic answer of a sale).
    let head = session.req_header().method == http::Method::HEAD;
    let tasks = if head || body.is_empty() {
        vec![pingora::protocols::http::HttpTask::Header(Box::new(h), true)]
    } else {
        vec![
            pingora::protocols::http::HttpTask::Header(Box::new(h), false),
            pingora::protocols::http::HttpTask::Body(Some(body), true),
        ]
    };
    session.write_response_tasks(tasks).await?;
    Ok(true)
}

fn cookie_headers(q: &mut QueueRequest) -> Vec<(http::HeaderName, String)> {
    q.cookies.drain(..).map(|c| (header::SET_COOKIE, c)).collect()
}

async fn json_answer(session: &mut Session, q: &mut QueueRequest, status: u16, v: &serde_json::Value) -> pingora::Result<bool> {
    let extra = cookie_headers(q);
    answer(session, status, "application/json", Bytes::from(v.to_string()), &extra).await
}

fn error_json(code: &str, message: &str) -> serde_json::Value {
    json!({"error": code, "message": message})
}

/// Counts a refusal of this room's endpoints in its report (reasons: [`super::tally::REASONS`]).
fn refused(room: &Room, reason: &str) {
    room.report.tally.refused(super::unix_ms(), reason);
}

/// Counts the refusal a page or join answer carries: closed (or turning everyone away), sold out
/// for good. Status polls and event streams are not counted (a fan polls many times).
fn count_outcome(room: &Room, s: &Status) {
    match s.state {
        Phase::Closed => refused(room, if room.rejecting() { "reject_all" } else { "room_closed" }),
        Phase::Stopped => refused(room, "reject_all"),
        Phase::SoldOut if !s.restock_possible => refused(room, "sold_out"),
        _ => {}
    }
}

/// True when the client asked for JSON rather than a page.
fn wants_json(session: &Session) -> bool {
    let accept = header_str(session.req_header(), "accept").unwrap_or("");
    accept.contains("application/json") && !accept.contains("text/html")
}

/// Answers every `/queue/...` request. Always `Ok(true)` (answered) unless writing failed.
pub async fn serve(st: &QueueEdge<'_>, session: &mut Session, q: &mut QueueRequest) -> pingora::Result<bool> {
    let path = session.req_header().uri.path().to_owned();
    let rest = path.strip_prefix(super::QUEUE_PREFIX).unwrap_or("");
    let (room_id, action) = rest.split_once('/').unwrap_or((rest, ""));
    let Some(room) = st.rooms.get(room_id) else {
        return json_answer(session, q, 404, &error_json("not_found", "no such room")).await;
    };
    let method = session.req_header().method.clone();
    if method == http::Method::GET && action == "test" {
        return test_link(st, session, q, &room).await;
    }
    if !st.rooms.meets(&room, session.req_header()) {
        // Test mode, and not a tester: the room is off for this visitor.
        if action.is_empty() && !wants_json(session) && matches!(method, http::Method::GET | http::Method::HEAD) {
            let mut extra = cookie_headers(q);
            extra.push((header::LOCATION, room.spec().config.target.clone()));
            return answer(session, 302, "text/plain; charset=utf-8", Bytes::new(), &extra).await;
        }
        return json_answer(session, q, 404, &error_json("not_found", "this room is in test mode: only testers meet it")).await;
    }
    match (method, action) {
        (http::Method::GET | http::Method::HEAD, "") => page(st, session, q, &room).await,
        (http::Method::POST, "join") => join(st, session, q, &room).await,
        (http::Method::POST, "invite") => {
            let sub = q.sub().to_owned();
            let reply = super::invite_http::serve(st, session, q.ip, &sub, &room).await;
            send_reply(session, q, reply).await
        }
        (http::Method::GET, "status") => status(st, session, q, &room).await,
        (http::Method::GET, "events") => events(st, session, q, &room).await,
        (http::Method::GET, "challenge") => {
            let v = challenge_json(st, q.ip);
            json_answer(session, q, 200, &v).await
        }
        (_, "" | "join" | "status" | "events" | "challenge" | "invite") => {
            refused(&room, "bad_request");
            json_answer(session, q, 405, &error_json("bad_request", "method not allowed here")).await
        }
        _ => {
            refused(&room, "not_found");
            json_answer(session, q, 404, &error_json("not_found", "no such queue endpoint")).await
        }
    }
}

/// `GET /queue/<room>/test?key=<value>`: a tester's link. A valid test cookie of this room is set
/// as `wicket_t_<room>` (for as long as it is valid) and the browser sent to the queue page; anything
/// else is 403.
async fn test_link(st: &QueueEdge<'_>, session: &mut Session, q: &mut QueueRequest, room: &Room) -> pingora::Result<bool> {
    let key = session.req_header().uri.query().and_then(|qs| qs.split('&').find_map(|p| p.strip_prefix("key="))).unwrap_or("").to_owned();
    let now = unix_now();
    if !super::tester::verify(&st.rooms.signer, &room.id, &key, now) {
        refused(room, "test_key_invalid");
        return json_answer(session, q, 403, &error_json("forbidden", "not a valid test key of this room")).await;
    }
    let left = key.split('.').next().and_then(|e| e.parse::<u64>().ok()).map_or(60, |e| e.saturating_sub(now));
    q.cookies.push(st.cookie(&super::tester::cookie_name(&room.id), &key, left));
    let mut extra = cookie_headers(q);
    extra.push((header::LOCATION, format!("/queue/{}", room.id)));
    answer(session, 302, "text/plain; charset=utf-8", Bytes::new(), &extra).await
}

/// The status and extra headers of a queue answer: the room's `queuing-status-code` while the
/// visitor is queued (with `Retry-After`, the poll interval in whole seconds, when not 200), else 200.
fn queuing(room: &Room, s: Option<&Status>) -> (u16, Option<(http::HeaderName, String)>) {
    let code = room.spec().config.queuing_status_code;
    match s {
        Some(s) if s.queued() && code != 200 => (code, Some((header::RETRY_AFTER, s.poll_after_ms.div_ceil(1000).max(1).to_string()))),
        _ => (200, None),
    }
}

fn ticket_of(st: &QueueEdge<'_>, session: &Session, q: &QueueRequest, room: &Room) -> Option<QueueTicket> {
    let v = cookie(session.req_header(), &cookie_name(&room.id))?;
    QueueTicket::decode(v, &st.rooms.signer, &room.id, &q.device, &st.rooms.owner(&room.id, q.sub()))
        .filter(|t| room.ticket_valid(t.issued_at, unix_now()))
}

/// A valid bot pass for this device, when the room asks for a check.
fn has_pass(st: &QueueEdge<'_>, session: &Session, q: &QueueRequest) -> bool {
    let req = session.req_header();
    let pass = cookie(req, PASS_COOKIE).or_else(|| header_str(req, PASS_HEADER));
    pass.is_some_and(|p| st.bot.check_pass(p, &q.device, unix_now()))
}

fn bot_refusal(room: &Room, why: &str) -> serde_json::Value {
    let check = bot_name(room.spec().config.bot_check);
    json!({"error": "forbidden", "message": why, "bot_check": check, "challenge": format!("/queue/{}/challenge", room.id),
           "join": format!("/queue/{}/join", room.id)})
}

/// Joins (or re-finds the place of) the visitor and sets the ticket cookie. `proven`: the visitor
/// gave the room's bot check (or holds a pass); otherwise the place is given with the check owed.
/// `None`: an owed place could not be remembered (the check must come first).
async fn do_join(st: &QueueEdge<'_>, q: &mut QueueRequest, room: &Room, proven: bool) -> Result<Option<QueueTicket>, super::state::StateError> {
    let sub = q.sub().to_owned();
    let Some(t) = st.rooms.join_with(room, &sub, &q.device, proven).await? else { return Ok(None) };
    let max_age = room.spec().closes_at.map_or(86_400, |c| (c - unix_now() as i64).clamp(60, 7 * 86_400) as u64);
    q.cookies.push(st.cookie(&cookie_name(&room.id), &t.encode(&st.rooms.signer), max_age));
    Ok(Some(t))
}

/// Status of a ticket; a spent (or lost) place joins again. A ticket with the check owed from a
/// visitor who has given it since (`proven`) is made proven first. Sets the admission cookie when
/// admitted.
async fn status_for(st: &QueueEdge<'_>, q: &mut QueueRequest, room: &Room, t: QueueTicket, proven: bool) -> Result<Status, RoomError> {
    let sub = q.sub().to_owned();
    let t = match (t.owed && proven).then_some(()) {
        Some(()) => do_join(st, q, room, true).await?.unwrap_or(t),
        None => t,
    };
    let mut outcome = st.rooms.status(room, &t, &sub).await?;
    if let StatusOutcome::Rejoin = outcome {
        let Some(t) = do_join(st, q, room, proven).await? else {
            return Err(RoomError::State(super::state::StateError("no place for an owed check".into())));
        };
        outcome = st.rooms.status(room, &t, &sub).await?;
    }
    let s = match outcome {
        StatusOutcome::Status(s) => s,
        StatusOutcome::Rejoin => return Err(RoomError::Sign("place spent twice".into())),
    };
    if let (Some(token), Some(secs)) = (&s.token, s.token_seconds) {
        q.cookies.push(st.cookie(&format!("wicket_a_{}", room.id), token, secs));
    }
    Ok(s)
}

/// True when the visitor need not give the room's check (none asked, or a valid pass).
fn check_given(st: &QueueEdge<'_>, session: &Session, q: &QueueRequest, room: &Room) -> bool {
    room.spec().config.bot_check == RoomBotCheck::Off || has_pass(st, session, q)
}

/// A fresh proof-of-work challenge for a client at `ip` (its difficulty counts the proofs its
/// address gave lately).
fn challenge_json(st: &QueueEdge<'_>, ip: IpAddr) -> serde_json::Value {
    let (challenge, difficulty) = st.bot.pow.issue(unix_now(), ip);
    json!({"challenge": challenge, "difficulty": difficulty, "expires_in": st.bot.pow.ttl()})
}

/// A status answer as JSON; with the check owed in a proof-of-work room, a fresh challenge rides
/// along (the page starts solving without another round trip).
fn status_json(st: &QueueEdge<'_>, room: &Room, s: &Status, ip: IpAddr) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if s.proof_owed.is_some() && room.spec().config.bot_check == RoomBotCheck::Pow {
        v["challenge"] = challenge_json(st, ip);
        v["join"] = json!(format!("/queue/{}/join", room.id));
    }
    v
}

async fn room_error(session: &mut Session, q: &mut QueueRequest, room: &Room, e: RoomError) -> pingora::Result<bool> {
    tracing::warn!("waiting room: {e}");
    refused(room, "room_state_unavailable");
    json_answer(session, q, 503, &error_json("unavailable", "the waiting room is unavailable, try again shortly")).await
}

/// Writes an answer of the invite lane, with the visitor's cookies.
async fn send_reply(session: &mut Session, q: &mut QueueRequest, r: super::invite_http::Reply) -> pingora::Result<bool> {
    let mut extra = cookie_headers(q);
    extra.extend(r.headers);
    answer(session, r.status, r.content_type, r.body, &extra).await
}

/// The invite lane's say before a visitor without a place takes one: `Some(answer)` when the
/// visitor is refused (not an invitee while the room is invite-only, or a `?invite=` code that
/// did not redeem), `None` to go on.
async fn invite_gate(st: &QueueEdge<'_>, session: &mut Session, q: &mut QueueRequest, room: &Room, html: bool) -> Option<pingora::Result<bool>> {
    use super::invite_http::{Refusal, attempt, refuse};
    let sub = q.sub().to_owned();
    let code = session.req_header().uri.query().and_then(|qs| {
        url::form_urlencoded::parse(qs.as_bytes()).find(|(k, _)| k == "invite").map(|(_, v)| v.into_owned())
    });
    if let Some(code) = code {
        match attempt(st, q.ip, &sub, room, &code).await {
            Ok(Ok(_)) => return None,
            Ok(Err(why)) => return Some(send_reply(session, q, refuse(st, session.req_header(), room, why, html)).await),
            Err(e) => return Some(room_error(session, q, room, e.into()).await),
        }
    }
    match st.rooms.may_join(room, &sub).await {
        Ok(true) => None,
        Ok(false) => Some(send_reply(session, q, refuse(st, session.req_header(), room, Refusal::InviteOnly, html)).await),
        Err(e) => Some(room_error(session, q, room, e.into()).await),
    }
}

async fn page(st: &QueueEdge<'_>, session: &mut Session, q: &mut QueueRequest, room: &Room) -> pingora::Result<bool> {
    let json = wants_json(session);
    let bot = room.spec().config.bot_check;
    let given = check_given(st, session, q, room);
    let mut ticket = ticket_of(st, session, q, room);
    let rejected = ticket.is_none() && room.rejecting();
    if !rejected
        && ticket.is_none()
        && let Some(refused) = invite_gate(st, session, q, room, !json).await
    {
        return refused;
    }
    if ticket.is_none() && !rejected {
        // The first arrival takes the place, whether or not the check is given yet: the check
        // gates admission, not the place.
        match do_join(st, q, room, given).await {
            Ok(t) => ticket = t,
            Err(e) => return room_error(session, q, room, e.into()).await,
        }
    }
    let status = match ticket {
        Some(t) => match status_for(st, q, room, t, given).await {
            Ok(s) => Some(s),
            Err(e) => return room_error(session, q, room, e).await,
        },
        // Reject-all: nobody new is queued.
        None if rejected => Some(Status::closed()),
        None => None,
    };
    if let Some(s) = &status {
        count_outcome(room, s);
    }
    let (code, retry) = queuing(room, status.as_ref());
    if json {
        return match status {
            Some(s) => {
                let mut extra = cookie_headers(q);
                extra.extend(retry);
                answer(session, code, "application/json", Bytes::from(status_json(st, room, &s, q.ip).to_string()), &extra).await
            }
            None => {
                refused(room, "bot_required");
                json_answer(session, q, 403, &bot_refusal(room, "solve the room's bot check, then POST join")).await
            }
        };
    }
    if let Some(s) = &status
        && s.state == Phase::Admitted
        && let Some(target) = &s.redirect
    {
        let mut extra = cookie_headers(q);
        extra.push((header::LOCATION, target.clone()));
        return answer(session, 302, "text/plain; charset=utf-8", Bytes::from_static(b"admitted\n"), &extra).await;
    }
    let req = session.req_header();
    let asked = crate::i18n::query_lang(req.uri.query()).and_then(Lang::from_tag);
    let lang = crate::reject::page_lang(req.uri.query(), cookie(req, LANG_COOKIE), header_str(req, "accept-language"));
    if let Some(l) = asked {
        // A fan's explicit choice (the page's language links) sticks to later pages.
        q.cookies.push(st.cookie(LANG_COOKIE, l.tag(), 365 * 86_400));
    }
    let now = unix_now() as i64;
    let opens_in = status
        .as_ref()
        .filter(|s| s.state == Phase::NotOpen)
        .and_then(|s| s.opens_at.as_deref())
        .and_then(super::config::parse_time)
        .map(|o| (o - now).max(0) as u64);
    let owed = status.as_ref().and_then(|s| s.proof_owed);
    let spec = room.spec();
    let view = PageView {
        lang,
        status: status.as_ref(),
        bot_check: if status.is_none() { bot_name(bot) } else { owed.unwrap_or("") },
        now,
        opens_in,
        event_name: spec.config.event_name.as_deref(),
    };
    let html = st.queue_page.render(&view);
    let mut extra = cookie_headers(q);
    extra.extend(retry);
    answer(session, code, "text/html; charset=utf-8", Bytes::from(html), &extra).await
}

async fn join(st: &QueueEdge<'_>, session: &mut Session, q: &mut QueueRequest, room: &Room) -> pingora::Result<bool> {
    let body = match st.read_body(session).await {
        Ok(b) => b,
        Err(r) => {
            refused(room, r.reason());
            return json_answer(session, q, r.status(), &error_json(r.code(), &r.message())).await;
        }
    };
    let proof: ProofBody = if body.iter().all(u8::is_ascii_whitespace) {
        ProofBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(p) => p,
            Err(_) => {
                refused(room, "bad_request");
                return json_answer(session, q, 400, &error_json("bad_request", "body must be {}, {\"pow\":{...}} or {\"captcha\":\"...\"}"))
                    .await;
            }
        }
    };
    let bot = room.spec().config.bot_check;
    let mut given = check_given(st, session, q, room);
    if !given && (proof.pow.is_some() || proof.captcha.is_some()) {
        let verdict = match (bot, &proof.pow, &proof.captcha) {
            (RoomBotCheck::Pow, Some(p), _) => st.bot.pow.verify(&p.challenge, &p.nonce, unix_now(), q.ip).map_err(|e| e.text()),
            (RoomBotCheck::Captcha, _, Some(resp)) if !resp.is_empty() && resp.len() <= 4096 => match &st.bot.captcha {
                None => Err("no captcha configured"),
                Some(c) => match c.siteverify(resp, q.ip).await {
                    CaptchaOutcome::Pass => Ok(()),
                    CaptchaOutcome::Unavailable if c.fail_open() => Ok(()),
                    CaptchaOutcome::Unavailable => Err("captcha provider unavailable"),
                    CaptchaOutcome::Fail => Err("captcha not solved"),
                },
            },
            _ => Err("not this room's bot check"),
        };
        if let Err(why) = verdict {
            // A wrong, forged, expired or replayed proof: refused, and any place held stays owed.
            refused(room, "bot_failed");
            return json_answer(session, q, 403, &bot_refusal(room, why)).await;
        }
        let pass = st.bot.issue_pass(&q.device, unix_now());
        q.cookies.push(st.cookie(PASS_COOKIE, &pass, st.bot.pass_seconds()));
        given = true;
    }
    let ticket = ticket_of(st, session, q, room);
    if ticket.is_none()
        && let Some(refused) = invite_gate(st, session, q, room, false).await
    {
        return refused;
    }
    let t = match ticket {
        Some(t) => t,
        // Reject-all: nobody new is queued.
        None if room.rejecting() => {
            refused(room, "reject_all");
            return json_answer(session, q, 200, &status_json(st, room, &Status::closed(), q.ip)).await;
        }
        None => match do_join(st, q, room, given).await {
            Ok(Some(t)) => t,
            Ok(None) => {
                refused(room, "bot_required");
                return json_answer(session, q, 403, &bot_refusal(room, "solve the room's bot check, then POST join")).await;
            }
            Err(e) => return room_error(session, q, room, e.into()).await,
        },
    };
    match status_for(st, q, room, t, given).await {
        Ok(s) => {
            count_outcome(room, &s);
            let (code, retry) = queuing(room, Some(&s));
            let mut extra = cookie_headers(q);
            extra.extend(retry);
            answer(session, code, "application/json", Bytes::from(status_json(st, room, &s, q.ip).to_string()), &extra).await
        }
        Err(e) => room_error(session, q, room, e).await,
    }
}

fn no_ticket(room: &Room) -> serde_json::Value {
    let mut v = error_json("unauthorized", "no valid queue ticket: join first");
    v["join"] = json!(format!("/queue/{}/join", room.id));
    let bot = room.spec().config.bot_check;
    if bot != RoomBotCheck::Off {
        v["bot_check"] = json!(bot_name(bot));
        v["challenge"] = json!(format!("/queue/{}/challenge", room.id));
    }
    v
}

async fn status(st: &QueueEdge<'_>, session: &mut Session, q: &mut QueueRequest, room: &Room) -> pingora::Result<bool> {
    let Some(t) = ticket_of(st, session, q, room) else {
        refused(room, "no_ticket");
        return json_answer(session, q, 401, &no_ticket(room)).await;
    };
    let given = t.owed && check_given(st, session, q, room);
    match status_for(st, q, room, t, given).await {
        Ok(s) => json_answer(session, q, 200, &status_json(st, room, &s, q.ip)).await,
        Err(e) => room_error(session, q, room, e).await,
    }
}

/// The event stream of a fan the HTTP/1.1 door did not serve itself (HTTP/2, a fan whose turn
/// has come or whose check is owed, `fast-path = false`, ...): the same frames
/// ([`EventFrames`]), through Pingora's session.
async fn events(st: &QueueEdge<'_>, session: &mut Session, q: &mut QueueRequest, room: &Arc<Room>) -> pingora::Result<bool> {
    let Some(t) = ticket_of(st, session, q, room) else {
        refused(room, "no_ticket");
        return json_answer(session, q, 401, &no_ticket(room)).await;
    };
    let _slot = match st.event_streams.take(q.ip) {
        Ok(slot) => slot,
        Err(full) => {
            // The decision step's refusal (the fast doors get it from there).
            let r = full.reject();
            st.rejects.with_label_values(&[r.reason()]).inc();
            let mut extra = cookie_headers(q);
            extra.extend(r.retry_after().map(|s| (header::RETRY_AFTER, s)));
            let (_, body) = r.render(None);
            return answer(session, r.status(), "application/json", body, &extra).await;
        }
    };
    let mut h = ResponseHeader::build(200, Some(6))?;
    h.insert_header(header::CONTENT_TYPE, "text/event-stream")?;
    h.insert_header(header::CACHE_CONTROL, "no-store")?;
    h.insert_header(header::TRANSFER_ENCODING, "chunked")?;
    h.insert_header("x-accel-buffering", "no")?;
    for (k, v) in cookie_headers(q) {
        h.append_header(k, v)?;
    }
    session.write_response_header(Box::new(h), false).await?;
    let mut frames = EventFrames::new(Arc::clone(room), t, q.sub(), st.event_streams.longest());
    while let Some(frame) = frames.next(st.rooms).await {
        session.write_response_body(Some(Bytes::from(frame)), false).await?;
    }
    session.write_response_body(Some(Bytes::new()), true).await?;
    Ok(true)
}
