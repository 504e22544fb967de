//! The invite lane's public side ([`super::invite`]): `POST /queue/<room>/invite` (a JSON body
//! `{"code": "..."}` gets JSON answers, the invite page's form field `code` a 303 to the queue or
//! the page again with the problem), the `?invite=` redeem of the queue page, and the invite page
//! (403, in the fan's language) or `{"error": "invite_only", ...}` for a visitor outside the lane
//! while the room is invite-only. Redeem attempts are limited per client address and identity,
//! and each room takes a budget of wrong codes a minute ([`super::invite::Attempts`]): 429 with
//! `Retry-After`; once the room's budget is spent no code is judged until the minute ends.

use std::net::IpAddr;

use bytes::Bytes;
use http::header;
use pingora::proxy::Session;
use serde::Deserialize;
use serde_json::json;

use super::invite::Redeemed;
use super::state::StateError;
use super::{Room, invite_until_text as until_text, unix_ms};
use crate::i18n::{LANG_COOKIE, Words, html_escape};
use crate::identity::{cookie, header as header_str};
use super::lent::QueueEdge;

/// An answer for [`super::http`] to write (with the visitor's cookies).
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
    /// More headers (`Retry-After`, `Location`).
    pub headers: Vec<(http::HeaderName, String)>,
}

impl Reply {
    fn json(status: u16, v: &serde_json::Value) -> Self {
        Reply { status, content_type: "application/json", body: Bytes::from(v.to_string()), headers: Vec::new() }
    }
}

fn error_json(code: &str, message: &str) -> serde_json::Value {
    json!({"error": code, "message": message})
}

/// Why a fan is shown the invite page (or its JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not an invitee while the room is invite-only.
    InviteOnly,
    /// Not 6-64 letters, digits and `-`.
    Malformed,
    /// No such code in this room.
    Unknown,
    /// Redeemed by someone else.
    Taken,
    /// Too many attempts from this address or identity (seconds to wait).
    TooMany(u64),
    /// The room's budget of wrong codes this minute is spent: no code is judged (seconds to wait).
    RoomBudget(u64),
}

impl Refusal {
    fn status(self) -> u16 {
        match self {
            Refusal::InviteOnly | Refusal::Unknown => 403,
            Refusal::Malformed => 400,
            Refusal::Taken => 409,
            Refusal::TooMany(_) | Refusal::RoomBudget(_) => 429,
        }
    }

    fn code(self) -> &'static str {
        match self {
            Refusal::InviteOnly => "invite_only",
            Refusal::Malformed => "bad_request",
            Refusal::Unknown => "invite_invalid",
            Refusal::Taken => "invite_taken",
            Refusal::TooMany(_) | Refusal::RoomBudget(_) => "rate_limited",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Refusal::InviteOnly => "this sale is open to invited fans only for now: redeem an invite code first",
            Refusal::Malformed => "an invite code is 6-64 letters, digits and '-'",
            Refusal::Unknown => "no such invite code for this room",
            Refusal::Taken => "this invite code was already redeemed by someone else",
            Refusal::TooMany(_) => "too many invite code attempts: wait, then try again",
            Refusal::RoomBudget(_) => "too many wrong invite codes for this room this minute: no code is checked until it ends, try again then",
        }
    }

    /// The catalogue key of the line under the page's title (none for the plain invite page).
    fn problem_key(self) -> Option<&'static str> {
        match self {
            Refusal::InviteOnly => None,
            Refusal::Malformed | Refusal::Unknown => Some("invite_invalid"),
            Refusal::Taken => Some("invite_taken"),
            Refusal::TooMany(_) | Refusal::RoomBudget(_) => Some("invite_busy"),
        }
    }
}

/// The invite page: why, and a form for a code, in the fan's language, in the words of the queue
/// page (`[edge.queue-page.text.<lang>]` overrides: `invite_title`...) and with its branding (the
/// logo, the colours, the event name — the room's own `event-name` first).
pub fn page(w: &dyn Words, room: &Room, why: Refusal) -> String {
    let brand = w.brand();
    let spec = room.spec();
    let event_name = spec.config.event_name.as_deref().or(brand.event_name);
    let lang = w.lang();
    let title = html_escape(w.text("invite_title"));
    let text = match until_text(room) {
        Some(t) => w.fill("invite_text_until", &[("time", &t.replacen('T', " ", 1))]),
        None => w.text("invite_text").to_owned(),
    };
    let problem = why.problem_key().map_or(String::new(), |k| format!("<p role=alert><b>{}</b></p>", html_escape(w.text(k))));
    let mut top = String::new();
    if let Some(url) = brand.logo_url {
        top.push_str(&format!("<img class=logo src=\"{}\" alt=\"\" style=\"max-height:48px;max-width:60%\">", html_escape(url)));
    }
    if let Some(name) = event_name {
        top.push_str(&format!("<p class=brand style=\"margin:.5em 0 0;opacity:.75\">{}</p>", html_escape(name)));
    }
    format!(
        "<!doctype html><html lang={tag}{dir}><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
         <title>{page_title}</title>{colours}<body style=\"font:16px system-ui;max-width:36em;margin:4em auto;padding:0 1em;\
         background:var(--bg,Canvas);color:var(--text,CanvasText)\">\
         {top}<h1 style=\"color:var(--accent,inherit)\">{title}</h1><p>{text}</p>{problem}\
         <form method=post action=\"/queue/{room}/invite\"><label>{label} <input name=code required maxlength=64 \
         autocomplete=off autocapitalize=characters spellcheck=false></label> <button style=\"background:var(--accent,ButtonFace);\
         color:var(--accent-text,ButtonText)\">{submit}</button></form></body></html>",
        tag = lang.tag(),
        dir = if lang.is_rtl() { " dir=rtl" } else { "" },
        page_title = match event_name {
            Some(name) => format!("{title} · {}", html_escape(name)),
            None => title.clone(),
        },
        colours = brand.colours_css,
        text = html_escape(&text),
        room = room.id,
        label = html_escape(w.text("invite_code_label")),
        submit = html_escape(w.text("invite_submit")),
    )
}

/// A refusal: the invite page (`html`, in the language the request asks for, in the queue page's
/// words and branding) or `{"error", "message", "invite", "only_until"}`.
pub fn refuse(st: &QueueEdge<'_>, req: &pingora::http::RequestHeader, room: &Room, why: Refusal, html: bool) -> Reply {
    // Counted in the room's report under the answer's error code (`invite_only`, `bad_request`,
    // `invite_invalid`, `invite_taken`, `rate_limited`).
    room.report.tally.refused(unix_ms(), why.code());
    let mut headers = Vec::new();
    if let Refusal::TooMany(s) | Refusal::RoomBudget(s) = why {
        headers.push((header::RETRY_AFTER, s.to_string()));
    }
    if html {
        let lang = crate::reject::page_lang(req.uri.query(), cookie(req, LANG_COOKIE), header_str(req, "accept-language"));
        let body = Bytes::from(page(&st.queue_page.words(lang), room, why));
        return Reply { status: why.status(), content_type: "text/html; charset=utf-8", body, headers };
    }
    let mut v = error_json(why.code(), why.message());
    v["invite"] = json!(format!("/queue/{}/invite", room.id));
    v["only_until"] = json!(until_text(room));
    Reply { headers, ..Reply::json(why.status(), &v) }
}

/// One redeem attempt of `sub` from `ip` (rate-limited per address and identity, then by the
/// room's budget of wrong codes): `Ok(again)` when `sub` is an invitee of `room` now.
pub async fn attempt(st: &QueueEdge<'_>, ip: IpAddr, sub: &str, room: &Room, code: &str) -> Result<Result<bool, Refusal>, StateError> {
    let attempts = &st.rooms.invite_attempts;
    if let Err(s) = attempts.attempt(ip, sub, unix_ms()) {
        return Ok(Err(Refusal::TooMany(s)));
    }
    if super::invite::normalize(code).is_none() {
        // Never looked up: no guess, nothing of the budget spent.
        return Ok(Err(Refusal::Malformed));
    }
    let budget = room.spec().config.invite.as_ref().map_or(super::invite::WRONG_CODES_PER_MINUTE, |i| i.wrong_codes_budget());
    if let Err(s) = attempts.reserve_wrong(&room.id, budget, unix_ms()) {
        return Ok(Err(Refusal::RoomBudget(s)));
    }
    let redeemed = st.rooms.redeem(room, sub, code).await;
    if !matches!(redeemed, Ok(Some(Redeemed::Unknown))) {
        attempts.judged(&room.id, unix_ms());
    }
    Ok(match redeemed? {
        None => Err(Refusal::Malformed),
        Some(Redeemed::Unknown) => Err(Refusal::Unknown),
        Some(Redeemed::Taken) => Err(Refusal::Taken),
        Some(Redeemed::Now) => {
            tracing::info!(room = %room.id, "invite code redeemed");
            Ok(false)
        }
        Some(Redeemed::Again | Redeemed::AlreadyInvited) => Ok(true),
    })
}

/// The `code` of a JSON (`{"code": "..."}`) or form (`code=...`) body; `None`: neither.
fn body_code(body: &[u8], form: bool) -> Option<String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct CodeBody {
        code: String,
    }
    if form {
        return url::form_urlencoded::parse(body).find(|(k, _)| k == "code").map(|(_, v)| v.into_owned());
    }
    serde_json::from_slice::<CodeBody>(body).ok().map(|b| b.code)
}

/// `POST /queue/<room>/invite` from `sub` at `ip`.
pub async fn serve(st: &QueueEdge<'_>, session: &mut Session, ip: IpAddr, sub: &str, room: &Room) -> Reply {
    let form = header_str(session.req_header(), "content-type").is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
    let body = match st.read_body(session).await {
        Ok(b) => b,
        Err(r) => {
            room.report.tally.refused(unix_ms(), r.reason());
            return Reply::json(r.status(), &error_json(r.code(), &r.message()));
        }
    };
    let Some(code) = body_code(&body, form) else {
        if form {
            return refuse(st, session.req_header(), room, Refusal::Malformed, true);
        }
        room.report.tally.refused(unix_ms(), "bad_request");
        return Reply::json(400, &error_json("bad_request", "body must be {\"code\": \"...\"} (or the form field code)"));
    };
    match attempt(st, ip, sub, room, &code).await {
        Err(e) => {
            tracing::warn!(room = %room.id, "invite redeem: {e}");
            room.report.tally.refused(unix_ms(), "room_state_unavailable");
            Reply::json(503, &error_json("unavailable", "the waiting room is unavailable, try again shortly"))
        }
        Ok(Err(why)) => refuse(st, session.req_header(), room, why, form),
        Ok(Ok(_)) if form => Reply {
            status: 303,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from_static(b"invited\n"),
            headers: vec![(header::LOCATION, format!("/queue/{}", room.id))],
        },
        Ok(Ok(again)) => Reply::json(200, &json!({"invited": true, "again": again, "queue": format!("/queue/{}", room.id)})),
    }
}
