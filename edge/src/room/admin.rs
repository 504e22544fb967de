//! The rooms part of the admin API (docs/src/api.md "Admin"):
//!
//! | method, path | does |
//! |---|---|
//! | `GET /admin/rooms` | every room: config and stats |
//! | `GET`/`PUT`/`DELETE /admin/rooms/<room>` | one room; PUT creates (201) or updates (200) it from the docs/src/api.md room body, DELETE removes it (200); its protected paths change with it at once |
//! | `POST /admin/rooms/<room>/pause`, `/resume`, `/queue-all`, `/reject-all` | operator overrides of the release (reject-all: nobody new queued or admitted, the closed page for everyone without a running session; `resume` ends it) |
//! | `POST /admin/rooms/<room>/test-cookie` | `{"seconds"?}` (60–604800, default 3600): a tester's cookie for the room in test mode (`{"name", "value", "cookie", "expires_at", "link"}`) |
//! | `GET /admin/rooms/<room>/preview?state=&lang=` | the room's queue page in a state and language, with sample figures (HTML; nothing of the room is touched) |
//! | `PUT /admin/rooms/<room>/release` | `{"mode": "auto" \| "fixed", "rate"?, "min"?, "max"?}` |
//! | `PUT /admin/rooms/<room>/schedule` | `{"prequeue_at"?, "opens_at"?, "closes_at"?}` (RFC 3339; absent or null: none): the room's schedule alone, validated like the room body |
//! | `GET /admin/rooms/<room>/stats` | counters, rates, the controller's last decision |
//! | `/admin/rooms/<room>/invites[/codes\|/users\|/revoke]` | the invite lane ([`super::invite_admin`]) |
//! | `GET /admin/stream` | server-sent events: `{"at_ms", "rooms": [stats...]}` once a second |
//!
//! ```text
//! curl -X POST -H "Authorization: Bearer $WICKET_ADMIN_TOKEN" http://127.0.0.1:9090/admin/rooms/ev-42/pause
//! ```
//! With Redis room state, a room made, changed or deleted here and an override (pause, resume,
//! queue-all, release) are published, and the other edges sharing the room apply them within a
//! tick (a second): any edge's admin port controls a shared room.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use serde::Deserialize;
use serde_json::json;

use super::config::{QueueMethod, RoomBotCheck, RoomConfig, ScheduleConfig};
use super::page::{PageView, QueuePage};
use super::{Eta, Phase, Status};
use crate::i18n::Lang;
use super::{Room, Rooms, tester, unix_ms};
use crate::admin_reply::{error, json_response};
use super::Operated;
use super::mode::{Action, Pace};

/// `PUT .../release`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseUpdate {
    /// `auto` or `fixed`.
    pub mode: String,
    /// Fixed rate (required with `fixed`).
    #[serde(default)]
    pub rate: Option<f64>,
    /// New lower bound of the controller.
    #[serde(default)]
    pub min: Option<f64>,
    /// New upper bound of the controller.
    #[serde(default)]
    pub max: Option<f64>,
}

fn room_json(room: &Room) -> serde_json::Value {
    json!({"id": room.id, "config": room.spec().config, "stats": room.stats()})
}

/// A room's problems with their paths spelt as the admin API's JSON body spells its keys
/// (`room.queuing_status_code`, not the config file's `room.queuing-status-code`): every key of
/// the room body has its snake_case spelling ([`RoomConfig`]'s aliases), and no key is spelt
/// with `_` in the config file.
fn json_spelling(issues: Vec<crate::check::ConfigIssue>) -> Vec<crate::check::ConfigIssue> {
    issues.into_iter().map(|i| crate::check::ConfigIssue { path: i.path.replace('-', "_"), ..i }).collect()
}

/// True for the paths [`handle`] answers.
pub fn is_rooms_path(path: &str) -> bool {
    path == "/admin/rooms" || path.starts_with("/admin/rooms/")
}

/// Answers `/admin/rooms...` (the caller checked the bearer token and read the body). A room
/// made, changed or deleted here is published to the edges sharing the room state.
pub async fn handle(rooms: &Rooms, method: &Method, path: &str, body: &[u8]) -> Response<Vec<u8>> {
    if path == "/admin/rooms" {
        return match *method {
            Method::GET => json_response(200, &json!({"rooms": rooms.all().iter().map(|r| room_json(r)).collect::<Vec<_>>()})),
            _ => error(405, "bad_request", "GET only"),
        };
    }
    let rest = path.trim_start_matches("/admin/rooms/");
    let (id, action) = rest.split_once('/').unwrap_or((rest, ""));
    if *method == Method::PUT && action.is_empty() {
        let cfg: RoomConfig = match serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(body)) {
            Ok(c) => c,
            // The field that does not parse, by its path (`room.release.weight`), as the config's issues do.
            Err(e) if e.path().iter().next().is_some() => {
                let path = format!("room.{}", e.path());
                let message = e.inner().to_string();
                return json_response(
                    400,
                    &json!({"error": "bad_request", "message": format!("invalid room body at {path}: {message}"),
                            "issues": [{"path": path, "message": message}]}),
                );
            }
            Err(e) => return error(400, "bad_request", format!("invalid room body: {}", e.inner())),
        };
        return match cfg.compile(id, "room").map_err(json_spelling) {
            Err(issues) => json_response(
                400,
                &json!({"error": "bad_request", "message": "invalid room", "issues": issues}),
            ),
            Ok(spec) => {
                let existed = rooms.get(id).is_some();
                if let Some(old) = rooms.get(id)
                    && (old.spec().config.layout, &old.spec().config.spread) != (spec.config.layout, &spec.config.spread)
                {
                    // The state was made for the old layout: moving it would lose places.
                    return error(409, "conflict", "a room's layout and [rooms.spread] settings are fixed while it exists: delete it and create it again");
                }
                if let Err(e) = rooms.publish(id, Some(&spec.config)).await {
                    return error(503, "unavailable", format!("the room state store did not take the change: {e}"));
                }
                let release_changed = rooms.get(id).is_some_and(|old| old.spec().config.release != spec.config.release);
                let room = rooms.insert(spec);
                if release_changed {
                    // The new release settings become the published machine's too (its mode
                    // untouched), so a later pause or resume on any edge does not bring back the
                    // old pace.
                    let op = room.operator();
                    if let Ok(Operated::Local(e)) = rooms.operate(&room, Action::Release { pace: op.pace, min: op.min, max: op.max }).await {
                        tracing::warn!(room = %room.id, "the new release settings were not published: {e}");
                    }
                }
                json_response(if existed { 200 } else { 201 }, &room_json(&room))
            }
        };
    }
    let Some(room) = rooms.get(id) else { return error(404, "not_found", format!("no room {id:?}")) };
    if action == "invites" || action.starts_with("invites/") {
        return super::invite_admin::admin(rooms, &room, method, action, body).await;
    }
    let now = unix_ms();
    match (method.clone(), action) {
        (Method::GET, "") => json_response(200, &room_json(&room)),
        (Method::DELETE, "") => {
            if let Err(e) = rooms.publish(id, None).await {
                return error(503, "unavailable", format!("the room state store did not take the change: {e}"));
            }
            rooms.remove(id);
            tracing::info!(room = %room.id, "admin: room deleted");
            json_response(200, &json!({"deleted": room.id}))
        }
        (Method::GET, "stats") => json_response(200, &room.stats()),
        (Method::POST, "pause") => operate(rooms, &room, Action::Pause).await,
        (Method::POST, "reject-all") => operate(rooms, &room, Action::RejectAll).await,
        (Method::POST, "test-cookie") => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Ask {
                #[serde(default)]
                seconds: Option<u64>,
            }
            // Nothing, or a JSON object (serde would also take `[]` for the struct).
            let ask = if body.iter().all(u8::is_ascii_whitespace) {
                Ok(Ask { seconds: None })
            } else {
                match serde_json::from_slice::<serde_json::Value>(body) {
                    Ok(v) if v.is_object() => serde_json::from_value::<Ask>(v),
                    Ok(_) => return error(400, "bad_request", "the body must be a JSON object: {\"seconds\"?}"),
                    Err(e) => Err(e),
                }
            };
            let ask = match ask {
                Ok(a) => a,
                Err(e) => return error(400, "bad_request", format!("invalid body: {e}")),
            };
            let seconds = ask.seconds.unwrap_or(tester::DEFAULT_SECONDS);
            if !(60..=tester::MAX_SECONDS).contains(&seconds) {
                return error(400, "bad_request", format!("seconds must be between 60 and {}", tester::MAX_SECONDS));
            }
            let expires_at = now / 1000 + seconds;
            let value = tester::issue(&rooms.signer, &room.id, expires_at);
            let name = tester::cookie_name(&room.id);
            tracing::info!(room = %room.id, seconds, "admin: test cookie issued");
            json_response(
                200,
                &json!({
                    "room": room.id, "test_mode": room.test_mode(), "name": name, "value": value,
                    "cookie": format!("{name}={value}"), "seconds": seconds,
                    "expires_at": super::rfc3339(expires_at as i64),
                    "link": format!("/queue/{}/test?key={value}", room.id),
                }),
            )
        }
        (Method::POST, "queue-all") => operate(rooms, &room, Action::QueueAll).await,
        (Method::POST, "resume") => operate(rooms, &room, Action::Resume).await,
        (Method::PUT, "release") => {
            let u: ReleaseUpdate = match serde_json::from_slice(body) {
                Ok(u) => u,
                Err(e) => return error(400, "bad_request", format!("invalid body: {e}")),
            };
            let ok = |x: Option<f64>| x.is_none_or(|v| v.is_finite() && (0.0..=1_000_000.0).contains(&v));
            if !ok(u.rate) || !ok(u.min) || !ok(u.max) {
                return error(400, "bad_request", "rate, min and max must be between 0 and 1000000");
            }
            let pace = match (u.mode.as_str(), u.rate) {
                ("auto", _) => Pace::Auto,
                ("fixed", Some(r)) => Pace::Fixed(r),
                ("fixed", None) => return error(400, "bad_request", "mode \"fixed\" needs \"rate\""),
                _ => return error(400, "bad_request", "mode must be \"auto\" or \"fixed\""),
            };
            // Bounds left out keep the ones in force (checked again against the published state).
            let old = room.operator();
            let (min, max) = (u.min.unwrap_or(old.min), u.max.unwrap_or(old.max));
            if min > max {
                return error(400, "bad_request", "min must not exceed max");
            }
            operate(rooms, &room, Action::Release { pace, min, max }).await
        }
        (Method::PUT, "schedule") => {
            // An object only: serde would also take `[]` (or `["..."]`) for the struct.
            let schedule = match serde_json::from_slice::<serde_json::Value>(body) {
                Ok(v) if v.is_object() => serde_json::from_value::<ScheduleConfig>(v),
                Ok(_) => return error(400, "bad_request", "the schedule must be a JSON object"),
                Err(e) => Err(e),
            };
            let schedule = match schedule {
                Ok(s) => s,
                Err(e) => return error(400, "bad_request", format!("invalid schedule: {e}")),
            };
            // The rest of the room stays as it is; the whole room is validated again (a random
            // room needs `opens_at`, `closes_at` must follow it...).
            let mut cfg = room.spec().config.clone();
            cfg.schedule = schedule;
            let spec = match cfg.compile(id, "room").map_err(json_spelling) {
                Ok(spec) => spec,
                Err(issues) => {
                    let message = issues.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
                    return json_response(400, &json!({"error": "bad_request", "message": message, "issues": issues}));
                }
            };
            if let Err(e) = rooms.publish(id, Some(&spec.config)).await {
                return error(503, "unavailable", format!("the room state store did not take the change: {e}"));
            }
            let room = rooms.insert(spec);
            tracing::info!(room = %room.id, "admin: schedule");
            json_response(200, &room_json(&room))
        }
        (_, "" | "stats" | "pause" | "resume" | "queue-all" | "reject-all" | "test-cookie" | "release" | "schedule" | "preview") => {
            error(405, "bad_request", "method not allowed here")
        }
        _ => error(404, "not_found", "no such room endpoint"),
    }
}

/// An operator's action ([`super::mode`]): the room's stats after it (published to the edges
/// sharing the room first); 409 `mode_conflict` when the room's mode refuses it (a pause during a
/// reject-all), 503 when the room state store did not take it (then it holds on this edge only).
async fn operate(rooms: &Rooms, room: &Room, action: Action) -> Response<Vec<u8>> {
    match rooms.operate(room, action).await {
        Ok(Operated::Shared) => {
            tracing::info!(room = %room.id, action = action.name(), mode = room.operator_mode().name(), "admin: operator action");
            json_response(200, &room.stats())
        }
        Ok(Operated::Local(e)) => {
            tracing::warn!(room = %room.id, action = action.name(), "admin: operator action on this edge only: {e}");
            error(503, "unavailable", format!("done on this edge only, the room state store did not take it: {e}"))
        }
        Err(refused) => json_response(
            409,
            &json!({"error": "mode_conflict", "message": refused.to_string(), "mode": refused.mode.name()}),
        ),
    }
}

/// One stats frame for the stream.
pub fn frame(rooms: &Rooms) -> serde_json::Value {
    json!({"at_ms": unix_ms(), "rooms": rooms.all().iter().map(|r| r.stats()).collect::<Vec<_>>()})
}

/// `GET /admin/stream`: one stats frame a second until the client goes away (at most an hour).
/// Written straight to the session; the response the admin service returns afterwards is ignored
/// by Pingora (a header is only sent once).
pub async fn stream(rooms: &Rooms, session: &mut ServerSession) {
    let mut h = match ResponseHeader::build(200, Some(4)) {
        Ok(h) => h,
        Err(_) => return,
    };
    let _ = h.insert_header(http::header::CONTENT_TYPE, "text/event-stream");
    let _ = h.insert_header(http::header::CACHE_CONTROL, "no-store");
    let _ = h.insert_header(http::header::TRANSFER_ENCODING, "chunked");
    if session.write_response_header(Box::new(h)).await.is_err() {
        return;
    }
    for _ in 0..3600 {
        let text = format!("data: {}\n\n", frame(rooms));
        if session.write_response_body(Bytes::from(text), false).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let _ = session.write_response_body(Bytes::new(), true).await;
}

/// `html` without its `<script>` elements, in any case (the template's own too).
fn without_scripts(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len());
    let mut at = 0;
    while let Some(start) = lower[at..].find("<script").map(|i| at + i) {
        out.push_str(&html[at..start]);
        at = lower[start..].find("</script>").map_or(html.len(), |end| start + end + "</script>".len());
    }
    out.push_str(&html[at..]);
    out
}

/// The states `GET /admin/rooms/<room>/preview` renders, as `?state=` names them.
pub const PREVIEW_STATES: [&str; 9] =
    ["waiting", "queue_all", "paused", "not_open", "sold_out", "sold_out_for_now", "closed", "reject_all", "check"];

/// True for `/admin/rooms/<room>/preview`.
pub fn is_preview_path(path: &str) -> bool {
    path.strip_prefix("/admin/rooms/").and_then(|r| r.strip_suffix("/preview")).is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// `GET /admin/rooms/<room>/preview?state=<state>&lang=<tag>`: the room's queue page (the
/// `[edge.queue-page]` template, branding and text) as a fan in `state` sees it in `lang`, with
/// sample figures (1,259 people ahead, 4–7 minutes, one person every 5 s...) and the room's real
/// opening time when it has one ahead. Nothing of the room is read or written but its config: no
/// join, no counter. `state` defaults to `waiting`, `lang` to `en`; an unknown one is 400, an unknown
/// room 404. The page's stylesheet is inlined (`css`) and its scripts are left out (the no-JS
/// page, as the server renders it: its CSP, `default-src 'none'`, allows no script, and one left
/// in would only log an error in the console), so it shows as it is inside the console's frame
/// on the admin port.
pub fn preview(rooms: &Rooms, page: &QueuePage, css: &str, path: &str, query: Option<&str>) -> Response<Vec<u8>> {
    let id = path.trim_start_matches("/admin/rooms/").trim_end_matches("/preview");
    let Some(room) = rooms.get(id) else { return error(404, "not_found", format!("no room {id:?}")) };
    let param = |name: &str| query.and_then(|q| q.split('&').find_map(|p| p.strip_prefix(name)?.strip_prefix('=')));
    let state = param("state").unwrap_or("waiting");
    if !PREVIEW_STATES.contains(&state) {
        return error(400, "bad_request", format!("state must be one of {}", PREVIEW_STATES.join(", ")));
    }
    let lang = match param("lang") {
        None => Lang::En,
        Some(tag) => match Lang::ALL.into_iter().find(|l| l.tag().eq_ignore_ascii_case(tag)) {
            Some(l) => l,
            None => return error(400, "bad_request", format!("lang must be one of {}", Lang::ALL.map(Lang::tag).join(", "))),
        },
    };
    let spec = room.spec();
    let now = (unix_ms() / 1000) as i64;
    let mut s = Status::closed();
    s.poll_after_ms = 8000;
    let mut opens_in = None;
    match state {
        "waiting" | "queue_all" | "paused" => {
            s.state = if state == "paused" { Phase::Paused } else { Phase::Waiting };
            s.position = Some(1305);
            s.ahead = Some(1259);
            s.tickets_left = Some(1200);
            if state == "waiting" {
                s.eta_seconds = Some(Eta { low: 240, high: 420 });
                s.release_per_second = 0.2;
            }
        }
        "not_open" => {
            s.state = Phase::NotOpen;
            let opens = room.window(&spec).0.filter(|o| *o > now).unwrap_or(now + 3600);
            if spec.config.method == QueueMethod::Fifo {
                s.position = Some(3);
                s.ahead = Some(2);
            }
            s.opens_at = super::rfc3339(opens);
            opens_in = Some((opens - now).max(0) as u64);
        }
        "sold_out" => s.state = Phase::SoldOut,
        // A fan holding a place (a visitor without one meets the closed page).
        "reject_all" => s.state = Phase::Stopped,
        "sold_out_for_now" => {
            s.state = Phase::SoldOut;
            s.restock_possible = true;
            s.position = Some(166);
            s.ahead = Some(120);
        }
        _ => {}
    }
    let check = state == "check";
    let bot = match spec.config.bot_check {
        RoomBotCheck::Off => "pow",
        b => b.name(),
    };
    let view = PageView {
        lang,
        status: (!check).then_some(&s),
        bot_check: if check { bot } else { "off" },
        now,
        opens_in,
        event_name: spec.config.event_name.as_deref(),
    };
    let html = without_scripts(&page.render(&view)).replacen(
        "<link rel=\"stylesheet\" href=\"/static/queue.css\">",
        &format!("<style>{}</style>", css.replace("</", "<\\/")),
        1,
    );
    Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(http::header::CONTENT_LENGTH, html.len())
        .header(http::header::CACHE_CONTROL, "no-store")
        .header(
            "content-security-policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src * data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'",
        )
        .header("x-frame-options", "SAMEORIGIN")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .body(html.into_bytes())
        .unwrap_or_else(|_| Response::new(Vec::new()))
}
