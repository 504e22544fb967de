//! The invite lane on the admin port ([`super::invite`]; the caller checked the bearer token
//! and read the body, at most 4 MiB):
//!
//! | method, path | does |
//! |---|---|
//! | `GET /admin/rooms/<room>/invites` | `{"room", "configured", "invite_only", "only_until", "codes", "redeemed", "users"}` |
//! | `DELETE /admin/rooms/<room>/invites` | every code and allowlisted user removed; the figures after |
//! | `POST /admin/rooms/<room>/invites/codes` | `{"codes": [...]}` uploads codes, `{"generate": n}` makes `n` (1-10,000) and returns them once: `{"added", "given", "codes"?}` |
//! | `POST /admin/rooms/<room>/invites/users` | `{"users": [...]}`: user ids on the allowlist: `{"added", "given"}` |
//! | `POST /admin/rooms/<room>/invites/revoke` | `{"codes"?: [...], "users"?: [...]}`: `{"codes", "users"}` taken back |
//!
//! At most 10,000 codes or users a request; a malformed one refuses the whole request (400 with
//! every problem in `issues`, nothing stored). An uploaded code must also carry at least 40 bits
//! ([`super::invite::code_bits`]: e.g. 8 letters and digits, 9 letters, 13 digits), or it is one
//! of those problems; a revoked one need not (codes uploaded before the rule can still go).

use http::{Method, Response};
use serde::Deserialize;
use serde_json::json;

use super::invite::{CODE_MIN_BITS, MAX_BATCH, USER_MAX, code_bits, code_hash, generate, normalize};
use super::state::{StateError, Who};
use super::{Room, Rooms, invite_until_text, unix_ms};
use crate::admin_reply::{error, json_response};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CodesBody {
    #[serde(default)]
    codes: Option<Vec<String>>,
    #[serde(default)]
    generate: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersBody {
    users: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokeBody {
    #[serde(default)]
    codes: Vec<String>,
    #[serde(default)]
    users: Vec<String>,
}

/// A refusal of an admin request (boxed: a response is large).
type Refused = Box<Response<Vec<u8>>>;

fn issues_reply(message: &str, issues: Vec<serde_json::Value>) -> Response<Vec<u8>> {
    json_response(400, &json!({"error": "bad_request", "message": message, "issues": issues}))
}

/// Whether codes are being uploaded (each must carry [`CODE_MIN_BITS`]) or revoked (any code
/// that matches).
#[derive(Clone, Copy, PartialEq, Eq)]
enum CodeUse {
    Upload,
    Revoke,
}

/// The hashes of `codes`, or every malformed (or, uploaded, too weak) one (`<field>[i]`).
fn hashes(rooms: &Rooms, room: &str, field: &str, codes: &[String], used: CodeUse) -> Result<Vec<String>, Refused> {
    if codes.len() > MAX_BATCH {
        return Err(Box::new(error(400, "bad_request", format!("at most {MAX_BATCH} {field} a request"))));
    }
    let mut out = Vec::with_capacity(codes.len());
    let mut bad = Vec::new();
    for (i, c) in codes.iter().enumerate() {
        match normalize(c) {
            Some(n) if used == CodeUse::Upload && code_bits(&n) < CODE_MIN_BITS => bad.push(json!({
                "path": format!("{field}[{i}]"),
                "message": format!(
                    "too easy to guess: {:.0} bits (its length times log2 of its alphabet: 10 digits, 26 letters, 36 both); \
                     at least {CODE_MIN_BITS:.0}, e.g. 8 letters and digits, 9 letters or 13 digits",
                    code_bits(&n).floor()
                ),
            })),
            Some(n) => out.push(code_hash(&rooms.signer, room, &n)),
            None => bad.push(json!({"path": format!("{field}[{i}]"), "message": "6-64 letters, digits and '-'"})),
        }
    }
    if !bad.is_empty() {
        return Err(Box::new(issues_reply("malformed or weak codes: nothing was stored", bad)));
    }
    Ok(out)
}

/// The identities of allowlisted `users`, or every malformed one.
fn whos(rooms: &Rooms, room: &str, users: &[String]) -> Result<Vec<Who>, Refused> {
    if users.len() > MAX_BATCH {
        return Err(Box::new(error(400, "bad_request", format!("at most {MAX_BATCH} users a request"))));
    }
    let mut bad = Vec::new();
    for (i, u) in users.iter().enumerate() {
        if u.is_empty() || u.len() > USER_MAX || u.chars().any(char::is_control) {
            bad.push(json!({"path": format!("users[{i}]"), "message": "1-256 bytes, no control characters"}));
        }
    }
    if !bad.is_empty() {
        return Err(Box::new(issues_reply("malformed user ids: nothing was stored", bad)));
    }
    Ok(users.iter().map(|u| rooms.who(room, u)).collect())
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Refused> {
    serde_json::from_slice(body).map_err(|e| Box::new(error(400, "bad_request", format!("invalid body: {e}"))))
}

fn unavailable(e: StateError) -> Response<Vec<u8>> {
    error(503, "unavailable", format!("the room state store did not answer: {e}"))
}

/// The lane's figures and window.
async fn summary(rooms: &Rooms, room: &Room) -> Response<Vec<u8>> {
    let lane = room.state.counters();
    match rooms.invites(&room.id).counts().await {
        Ok(c) => json_response(
            200,
            &json!({
                "room": room.id,
                "invite_only": room.spec().invite_only((unix_ms() / 1000) as i64),
                "only_until": invite_until_text(room),
                "configured": room.spec().config.invite.is_some(),
                "codes": c.codes, "redeemed": c.redeemed, "users": c.users,
                // The lane's share of the release, its places given and admitted (as this edge
                // last read the room state).
                "share": room.spec().lane_share,
                "lane_places": lane.lane_issued, "lane_admitted": lane.lane_serving,
            }),
        ),
        Err(e) => unavailable(e),
    }
}

/// `/admin/rooms/<room>/invites[/...]` (`action`: what follows the room id).
pub async fn admin(rooms: &Rooms, room: &Room, method: &Method, action: &str, body: &[u8]) -> Response<Vec<u8>> {
    let store = rooms.invites(&room.id);
    match (method.clone(), action) {
        (Method::GET, "invites") => summary(rooms, room).await,
        (Method::DELETE, "invites") => match store.clear().await {
            Ok(()) => {
                tracing::info!(room = %room.id, "admin: invites cleared");
                summary(rooms, room).await
            }
            Err(e) => unavailable(e),
        },
        (Method::POST, "invites/codes") => {
            let b: CodesBody = match parse(body) {
                Ok(b) => b,
                Err(r) => return *r,
            };
            let (given, generated) = match (b.codes, b.generate) {
                (Some(c), None) if !c.is_empty() => (c, false),
                (None, Some(n)) if (1..=MAX_BATCH as u64).contains(&n) => ((0..n).map(|_| generate()).collect(), true),
                (None, Some(_)) => return error(400, "bad_request", format!("generate must be between 1 and {MAX_BATCH}")),
                _ => return error(400, "bad_request", "give either \"codes\": [...] (not empty) or \"generate\": n"),
            };
            let h = match hashes(rooms, &room.id, "codes", &given, CodeUse::Upload) {
                Ok(h) => h,
                Err(r) => return *r,
            };
            match store.add_codes(&h).await {
                Ok(added) => {
                    tracing::info!(room = %room.id, added, "admin: invite codes");
                    let mut v = json!({"added": added, "given": given.len()});
                    if generated {
                        // Shown once: only their hashes are kept.
                        v["codes"] = json!(given);
                    }
                    json_response(200, &v)
                }
                Err(e) => unavailable(e),
            }
        }
        (Method::POST, "invites/users") => {
            let b: UsersBody = match parse(body) {
                Ok(b) => b,
                Err(r) => return *r,
            };
            if b.users.is_empty() {
                return error(400, "bad_request", "\"users\" must not be empty");
            }
            let w = match whos(rooms, &room.id, &b.users) {
                Ok(w) => w,
                Err(r) => return *r,
            };
            match store.add_users(&w).await {
                Ok(added) => json_response(200, &json!({"added": added, "given": w.len()})),
                Err(e) => unavailable(e),
            }
        }
        (Method::POST, "invites/revoke") => {
            let b: RevokeBody = match parse(body) {
                Ok(b) => b,
                Err(r) => return *r,
            };
            if b.codes.is_empty() && b.users.is_empty() {
                return error(400, "bad_request", "give \"codes\" and/or \"users\" to revoke");
            }
            let (h, w) = match (hashes(rooms, &room.id, "codes", &b.codes, CodeUse::Revoke), whos(rooms, &room.id, &b.users)) {
                (Ok(h), Ok(w)) => (h, w),
                (Err(r), _) | (_, Err(r)) => return *r,
            };
            let codes = match store.revoke_codes(&h).await {
                Ok(n) => n,
                Err(e) => return unavailable(e),
            };
            match store.remove_users(&w).await {
                Ok(users) => {
                    tracing::info!(room = %room.id, codes, users, "admin: invites revoked");
                    json_response(200, &json!({"codes": codes, "users": users}))
                }
                Err(e) => unavailable(e),
            }
        }
        (_, "invites" | "invites/codes" | "invites/users" | "invites/revoke") => error(405, "bad_request", "method not allowed here"),
        _ => error(404, "not_found", "no such room endpoint"),
    }
}
