//! The operator console on the admin port: the page and its files (`GET /`, `/console/...`,
//! compiled into the binary from `static/console/`), and browser sessions for it.
//!
//! A browser signs in with the admin token (`POST /admin/session {"token"}`) and gets an
//! `HttpOnly`, `SameSite=Strict` session cookie that expires ([`SESSION_SECONDS`]) and a CSRF
//! token. With the cookie it may read everything the bearer token reads (the page's
//! `EventSource` on `/admin/stream` sends no headers, only cookies); a change (`POST`, `PUT`,
//! `DELETE`) also needs the CSRF token in `X-CSRF-Token` and, when the browser sends `Origin`,
//! the admin port's own origin. Scripts keep using `Authorization: Bearer`. Wrong tokens are
//! counted: after [`MAX_FAILURES`] in a minute, sign-ins answer 429 for the rest of it.
//!
//! The page (`static/console/`) charts each room live from the stream (uPlot, vendored with its
//! licence) and drives the admin API for pause, resume, queue-all, the release mode and bounds,
//! the blocklist and the bot policy, in zh-CN and en.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use dashmap::DashMap;
use http::Response;

/// The session cookie.
pub const SESSION_COOKIE: &str = "wicket_admin";
/// A console session lasts this long (then sign in again).
pub const SESSION_SECONDS: u64 = 8 * 3600;
/// Sessions kept at most (the oldest are dropped beyond it).
const MAX_SESSIONS: usize = 256;
/// Wrong tokens allowed per minute before sign-ins are refused for the rest of it.
pub const MAX_FAILURES: u64 = 10;

/// One signed-in browser.
struct Session {
    csrf: String,
    expires: Instant,
}

/// Console sessions of this edge (in memory: a restart signs everyone out).
pub struct Sessions {
    map: DashMap<String, Session>,
    /// (minute, failures in it).
    failures: AtomicU64,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions { map: DashMap::new(), failures: AtomicU64::new(0) }
    }
}

fn random_token() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

fn minute_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 60)
}

/// How a request is authorised on the admin port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No valid credential.
    None,
    /// A browser session: reads; changes only with the CSRF token and same origin.
    Session { csrf_ok: bool },
}

impl Sessions {
    /// Too many wrong tokens this minute.
    pub fn locked_out(&self) -> bool {
        let v = self.failures.load(Ordering::Relaxed);
        v >> 32 == minute_now() && (v & 0xffff_ffff) >= MAX_FAILURES
    }

    /// Counts a wrong token.
    pub fn failed(&self) {
        let minute = minute_now();
        let _ = self.failures.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(if v >> 32 == minute { v + 1 } else { (minute << 32) | 1 })
        });
    }

    /// A new session: (cookie value, CSRF token).
    pub fn create(&self) -> (String, String) {
        let now = Instant::now();
        self.map.retain(|_, s| s.expires > now);
        if self.map.len() >= MAX_SESSIONS {
            let oldest = self.map.iter().min_by_key(|e| e.value().expires).map(|e| e.key().clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
            }
        }
        let (id, csrf) = (random_token(), random_token());
        self.map.insert(id.clone(), Session { csrf: csrf.clone(), expires: now + Duration::from_secs(SESSION_SECONDS) });
        (id, csrf)
    }

    /// The session's CSRF token and seconds left, when `id` is a live session.
    pub fn get(&self, id: &str) -> Option<(String, u64)> {
        let s = self.map.get(id)?;
        let left = s.expires.checked_duration_since(Instant::now())?;
        Some((s.csrf.clone(), left.as_secs()))
    }

    /// What a request with this cookie value and CSRF header may do.
    pub fn access(&self, id: Option<&str>, csrf: Option<&str>) -> Access {
        let Some((expected, _)) = id.and_then(|id| self.get(id)) else { return Access::None };
        let csrf_ok = csrf.is_some_and(|c| crate::admin::token_matches(c, &expected));
        Access::Session { csrf_ok }
    }

    /// Ends a session.
    pub fn end(&self, id: &str) {
        self.map.remove(id);
    }
}

/// The `Set-Cookie` of a new session (or, with `None`, the one that clears it).
pub fn session_cookie(id: Option<&str>) -> String {
    match id {
        Some(id) => format!("{SESSION_COOKIE}={id}; Path=/; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict"),
        None => format!("{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
    }
}

/// The console's files: path → (content type, bytes).
fn file(path: &str) -> Option<(&'static str, &'static [u8])> {
    Some(match path {
        "/" | "/console" | "/console/" => ("text/html; charset=utf-8", include_bytes!("../../static/console/index.html")),
        "/console/console.js" => ("text/javascript; charset=utf-8", include_bytes!("../../static/console/console.js")),
        "/console/console.css" => ("text/css; charset=utf-8", include_bytes!("../../static/console/console.css")),
        "/console/vendor/uplot/uPlot.iife.min.js" => ("text/javascript; charset=utf-8", include_bytes!("../../static/console/vendor/uplot/uPlot.iife.min.js")),
        "/console/vendor/uplot/uPlot.min.css" => ("text/css; charset=utf-8", include_bytes!("../../static/console/vendor/uplot/uPlot.min.css")),
        "/console/vendor/uplot/LICENSE" => ("text/plain; charset=utf-8", include_bytes!("../../static/console/vendor/uplot/LICENSE")),
        _ => return None,
    })
}

/// The console page or one of its files (no credential needed: they hold no data), with a
/// strict content security policy.
pub fn serve_file(path: &str) -> Option<Response<Vec<u8>>> {
    let (content_type, body) = file(path)?;
    Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::CONTENT_LENGTH, body.len())
        .header(http::header::CACHE_CONTROL, "no-cache")
        .header(
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
             base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        )
        .header("x-frame-options", "DENY")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .body(body.to_vec())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_are_ended_and_need_their_csrf_token() {
        let s = Sessions::default();
        let (id, csrf) = s.create();
        assert_eq!(s.access(Some(&id), Some(&csrf)), Access::Session { csrf_ok: true });
        assert_eq!(s.access(Some(&id), Some("forged")), Access::Session { csrf_ok: false });
        assert_eq!(s.access(Some(&id), None), Access::Session { csrf_ok: false });
        assert_eq!(s.access(Some("forged"), Some(&csrf)), Access::None);
        assert_eq!(s.access(None, Some(&csrf)), Access::None);
        s.end(&id);
        assert_eq!(s.access(Some(&id), Some(&csrf)), Access::None);
        // Bounded: the oldest go first.
        let first = s.create().0;
        for _ in 0..MAX_SESSIONS {
            s.create();
        }
        assert!(s.get(&first).is_none());
        assert!(s.map.len() <= MAX_SESSIONS);
    }

    #[test]
    fn wrong_tokens_lock_sign_in_for_the_minute() {
        let s = Sessions::default();
        for _ in 0..MAX_FAILURES - 1 {
            s.failed();
        }
        assert!(!s.locked_out());
        s.failed();
        assert!(s.locked_out());
    }
}
