//! The operator console on the admin port: the page and its files (`GET /`, `/console/...`,
//! compiled into the binary from `static/console/`), and browser sessions for it.
//!
//! A browser signs in with the admin token (`POST /admin/session {"token"}`) and gets an
//! `HttpOnly`, `SameSite=Strict` session cookie that expires ([`SESSION_SECONDS`]) and a CSRF
//! token. With the cookie it may read everything the bearer token reads (the page's
//! `EventSource` on `/admin/stream` sends no headers, only cookies); a change (`POST`, `PUT`,
//! `DELETE`) also needs the CSRF token in `X-CSRF-Token` and, when the browser sends `Origin`,
//! the admin port's own origin. Scripts keep using `Authorization: Bearer`. Wrong tokens are
//! counted per client address (after trusted proxies): after [`MAX_FAILURES`] in a minute from
//! one address, its sign-ins answer 429 for the rest of it, so one guesser locks out only itself;
//! after [`MAX_FAILURES_ALL`] in a minute from all addresses together (guessing spread over many
//! addresses), every sign-in waits out the minute. The bearer token is never locked out.
//!
//! The page (`static/console/`) charts each room live from the stream (uPlot, vendored with its
//! licence) and drives the admin API for pause, resume, queue-all and reject-all (confirmed first),
//! the release mode and bounds, the schedule, the blocklist and the bot policy, in zh-CN and en; it
//! shows each room's queue page in a chosen state and language in a frame (`GET
//! /admin/rooms/<room>/preview`, the one frame source its policy allows: the admin port itself), a
//! room's invite lane (`lane.js`, loaded when a room has a lane share: the share, the lane's queue
//! and its chart), the regions of `[edge.geoip]` (`regions.js`, loaded when the edge has it: the
//! databases, the last window's arrivals, share and baseline by region, the abnormal regions), and a room's post-sale report (`report.js`, loaded when first opened: totals,
//! per-minute charts, the CSV). The files are served gzipped to browsers that take it (about 31 KB
//! in all).

use std::net::IpAddr;
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
/// Wrong tokens allowed per minute from one client address before its sign-ins are refused for
/// the rest of the minute.
pub const MAX_FAILURES: u64 = 10;
/// Wrong tokens allowed per minute from all addresses together before every sign-in is refused
/// for the rest of the minute: the ceiling on guessing spread over many addresses.
pub const MAX_FAILURES_ALL: u64 = 200;

/// One signed-in browser.
struct Session {
    csrf: String,
    expires: Instant,
}

/// Console sessions of this edge (in memory: a restart signs everyone out).
pub struct Sessions {
    map: DashMap<String, Session>,
    /// Per client address: (minute, wrong tokens in it). Bounded: entries of past minutes go when
    /// it grows past twice [`MAX_FAILURES_ALL`], and this minute's cannot outnumber that ceiling.
    failures_by_ip: DashMap<IpAddr, (u64, u64)>,
    /// All addresses together: minute << 32 | wrong tokens in it.
    failures: AtomicU64,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions { map: DashMap::new(), failures_by_ip: DashMap::new(), failures: AtomicU64::new(0) }
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
    /// Too many wrong tokens this minute from `client`, or from everyone together.
    pub fn locked_out(&self, client: IpAddr) -> bool {
        self.locked_out_at(client, minute_now())
    }

    fn locked_out_at(&self, client: IpAddr, minute: u64) -> bool {
        let all = self.failures.load(Ordering::Relaxed);
        if all >> 32 == minute && (all & 0xffff_ffff) >= MAX_FAILURES_ALL {
            return true;
        }
        self.failures_by_ip.get(&client).is_some_and(|e| e.0 == minute && e.1 >= MAX_FAILURES)
    }

    /// Counts a wrong token from `client`.
    pub fn failed(&self, client: IpAddr) {
        self.failed_at(client, minute_now());
    }

    fn failed_at(&self, client: IpAddr, minute: u64) {
        let _ = self.failures.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(if v >> 32 == minute { v + 1 } else { (minute << 32) | 1 })
        });
        if self.failures_by_ip.len() >= 2 * MAX_FAILURES_ALL as usize {
            self.failures_by_ip.retain(|_, e| e.0 == minute);
        }
        let mut e = self.failures_by_ip.entry(client).or_insert((minute, 0));
        *e = if e.0 == minute { (minute, e.1 + 1) } else { (minute, 1) };
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
        let csrf_ok = csrf.is_some_and(|c| crate::admin_reply::token_matches(c, &expected));
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

/// The console's files: (name under /console/, content type, bytes).
const FILES: [(&str, &str, &[u8]); 9] = [
    ("index.html", "text/html; charset=utf-8", include_bytes!("../../static/console/index.html")),
    ("console.js", "text/javascript; charset=utf-8", include_bytes!("../../static/console/console.js")),
    ("report.js", "text/javascript; charset=utf-8", include_bytes!("../../static/console/report.js")),
    ("lane.js", "text/javascript; charset=utf-8", include_bytes!("../../static/console/lane.js")),
    ("regions.js", "text/javascript; charset=utf-8", include_bytes!("../../static/console/regions.js")),
    ("console.css", "text/css; charset=utf-8", include_bytes!("../../static/console/console.css")),
    ("vendor/uplot/uPlot.iife.min.js", "text/javascript; charset=utf-8", include_bytes!("../../static/console/vendor/uplot/uPlot.iife.min.js")),
    ("vendor/uplot/uPlot.min.css", "text/css; charset=utf-8", include_bytes!("../../static/console/vendor/uplot/uPlot.min.css")),
    ("vendor/uplot/LICENSE", "text/plain; charset=utf-8", include_bytes!("../../static/console/vendor/uplot/LICENSE")),
];

/// Each of [`FILES`] gzipped (level 9), made on first use: the page is about 30 KB on the wire
/// instead of 73 KB (docs/src/console.md).
static GZIPPED: std::sync::LazyLock<Vec<Vec<u8>>> = std::sync::LazyLock::new(|| {
    use std::io::Write;
    FILES
        .iter()
        .map(|(_, _, body)| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            let _ = gz.write_all(body);
            gz.finish().unwrap_or_default()
        })
        .collect()
});

/// The index in [`FILES`] of a request path.
fn file(path: &str) -> Option<usize> {
    let name = match path {
        "/" | "/console" | "/console/" => "index.html",
        p => p.strip_prefix("/console/")?,
    };
    FILES.iter().position(|(n, _, _)| *n == name)
}

/// True when an `Accept-Encoding` value takes gzip (`gzip` or `*`, not with `q=0`).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|v| {
        v.split(',').any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| p.strip_prefix("q=").is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q == 0.0)));
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
    })
}

/// The console page or one of its files (no credential needed: they hold no data), with a
/// strict content security policy; gzipped when the browser takes it.
pub fn serve_file(path: &str, gzip: bool) -> Option<Response<Vec<u8>>> {
    let i = file(path)?;
    let (_, content_type, plain) = FILES[i];
    let body: &[u8] = if gzip && !GZIPPED[i].is_empty() { &GZIPPED[i] } else { plain };
    let mut r = Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::CONTENT_LENGTH, body.len())
        .header(http::header::CACHE_CONTROL, "no-cache")
        .header(http::header::VARY, "Accept-Encoding")
        .header(
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
             frame-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        )
        .header("x-frame-options", "DENY")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer");
    if body.len() != plain.len() {
        r = r.header(http::header::CONTENT_ENCODING, "gzip");
    }
    r.body(body.to_vec()).ok()
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
    fn wrong_tokens_lock_out_their_address_for_the_minute_and_everyone_past_the_ceiling() {
        let s = Sessions::default();
        let (guesser, operator): (IpAddr, IpAddr) = ("203.0.113.7".parse().unwrap(), "198.51.100.1".parse().unwrap());
        for _ in 0..MAX_FAILURES - 1 {
            s.failed_at(guesser, 100);
        }
        assert!(!s.locked_out_at(guesser, 100));
        s.failed_at(guesser, 100);
        assert!(s.locked_out_at(guesser, 100));
        assert!(!s.locked_out_at(operator, 100), "one guesser locks out only itself");
        assert!(!s.locked_out_at(guesser, 101), "for the rest of the minute");
        // Guessing spread over many addresses: past the ceiling, everyone waits the minute out.
        for i in 0..MAX_FAILURES_ALL {
            s.failed_at(IpAddr::from([10, 0, (i >> 8) as u8, i as u8]), 101);
        }
        assert!(s.locked_out_at(operator, 101));
        assert!(!s.locked_out_at(operator, 102));
        // Bounded: old minutes' addresses are dropped.
        for i in 0..4 * MAX_FAILURES_ALL {
            s.failed_at(IpAddr::from([10, 1, (i >> 8) as u8, i as u8]), 102 + i);
        }
        assert!(s.failures_by_ip.len() <= 2 * MAX_FAILURES_ALL as usize);
    }

    #[test]
    fn files_are_gzipped_for_browsers_that_take_it() {
        for (v, yes) in [
            (Some("gzip, deflate, br, zstd"), true),
            (Some("br;q=1.0, GZIP;q=0.5"), true),
            (Some("*"), true),
            (Some("gzip;q=0, br"), false),
            (Some("identity"), false),
            (Some("x-gzip-ish"), false),
            (None, false),
        ] {
            assert_eq!(accepts_gzip(v), yes, "{v:?}");
        }
        for (name, _, plain) in FILES {
            let path = format!("/console/{name}");
            let r = serve_file(&path, true).unwrap();
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&r.body()[..]), &mut out).unwrap();
            assert_eq!(out, plain, "{name}");
            assert_eq!(r.headers()["content-encoding"], "gzip");
            assert_eq!(serve_file(&path, false).unwrap().body(), plain);
        }
        assert!(serve_file("/console/../admin/rooms", true).is_none());
        assert!(serve_file("/console/vendor/uplot/README", true).is_none());
    }
}
