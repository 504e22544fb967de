//! The admin port: bearer-token API for operators (loopback by default).
//!
//! ```text
//! curl -H "Authorization: Bearer $WICKET_ADMIN_TOKEN" http://127.0.0.1:9090/admin/blocklist
//! ```
//!
//! | method, path | does |
//! |---|---|
//! | `GET /healthz` | 200 `{"status":"ok"}`, no token needed (liveness probes) |
//! | `GET /admin/health` | status, uptime, static files, limiter keys |
//! | `GET /admin/config` | the effective config, secrets redacted |
//! | `GET /admin/limits` | rules and live keys |
//! | `GET`/`POST`/`DELETE /admin/blocklist` | list / add / remove `{"ips","users","devices"}` |
//! | `GET`/`PUT /admin/bot-policy` | routes, proof kind, PoW difficulty, CAPTCHA fail-open |
//! | `GET /admin/tls` | the certificates served (names, expiry) and where session tickets' keys come from |
//! | `POST /admin/tls/reload` | reads the certificate and ticket key files again; a bad file keeps the old set (422 naming it) |
//! | `GET /admin/geoip` | the GeoIP databases, the last window's arrivals, share and baseline by region, the abnormal regions |
//! | `POST /admin/geoip/reload` | reads the GeoIP databases again (as SIGHUP does); a bad file keeps the old ones (422 naming it) |
//! | `GET /metrics` | Prometheus text |
//! | `/admin/rooms...`, `GET /admin/stream` | the waiting rooms (see [`crate::room::admin`]; `GET /admin/rooms/<room>/preview` renders the room's page, framable by the console) |
//! | `GET /admin/rooms/<room>/report` | the room's post-sale report, JSON or CSV ([`crate::room::report`]) |
//!
//! | `GET /`, `/console/...` | the operator console (page and files, no data; [`crate::console`]) |
//! | `POST`/`GET`/`DELETE /admin/session` | console sign-in with the token (session cookie + CSRF token), its state, sign-out |
//!
//! Without a valid token (or console session) every call but `/healthz` and the console's files
//! is 401 and changes nothing; a console session changes things only with its CSRF token.

use std::sync::Arc;

use async_trait::async_trait;
use http::{Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::json;

pub use crate::admin_reply::{error, json_response, token_matches};
use crate::blocklist::BlockEntries;
use crate::bot::BotPolicyUpdate;
use crate::state::EdgeState;

/// Largest admin request body.
pub const MAX_ADMIN_BODY: usize = 4 * 1024 * 1024;

/// The admin service.
pub struct AdminService {
    /// Shared state.
    pub state: Arc<EdgeState>,
    /// Console sign-ins.
    pub sessions: crate::console::Sessions,
}

/// `POST /admin/session`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

impl AdminService {
    /// The bearer token, checked.
    fn bearer_ok(&self, session: &ServerSession) -> bool {
        let Some(expected) = &self.state.admin_token else { return false };
        let presented = session
            .req_header()
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        presented.is_some_and(|p| token_matches(p.trim(), expected))
    }

    /// The client's address (after the edge's trusted proxies), for the sign-in lock-out.
    fn client_ip(&self, session: &ServerSession) -> std::net::IpAddr {
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |a| a.ip());
        self.state.client_ip.resolve(peer, session.req_header())
    }

    /// `None` when the request may go on; else the refusal. A bearer token may do everything; a
    /// console session reads, and changes only with its CSRF token from the admin port's origin.
    fn authorize(&self, session: &ServerSession, method: &Method) -> Option<Response<Vec<u8>>> {
        if self.bearer_ok(session) {
            return None;
        }
        let req = session.req_header();
        let csrf = req.headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
        match self.sessions.access(crate::identity::cookie(req, crate::console::SESSION_COOKIE), csrf) {
            crate::console::Access::None => Some(error(401, "unauthorized", "a valid admin bearer token (or console session) is required")),
            _ if method == Method::GET || method == Method::HEAD => None,
            crate::console::Access::Session { csrf_ok: false } => Some(error(403, "forbidden", "a console change needs its X-CSRF-Token")),
            crate::console::Access::Session { csrf_ok: true } if !same_origin(req) => {
                Some(error(403, "forbidden", "a console change must come from the admin port's own page"))
            }
            crate::console::Access::Session { .. } => None,
        }
    }

    /// `/admin/session`: sign in with the token (cookie + CSRF token), ask, sign out.
    async fn session_route(&self, session: &mut ServerSession, method: &Method) -> Response<Vec<u8>> {
        use crate::console::{SESSION_COOKIE, SESSION_SECONDS, session_cookie};
        let with_cookie = |mut r: Response<Vec<u8>>, cookie: String| {
            if let Ok(v) = http::HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(http::header::SET_COOKIE, v);
            }
            r
        };
        let current = crate::identity::cookie(session.req_header(), SESSION_COOKIE).map(str::to_owned);
        match *method {
            Method::POST => {
                let client = self.client_ip(session);
                if self.sessions.locked_out(client) {
                    return error(429, "too_many_attempts", "too many wrong tokens: wait a minute");
                }
                let Some(expected) = self.state.admin_token.clone() else {
                    return error(401, "unauthorized", "no admin token is configured: the console is off");
                };
                let SignIn { token } = match self.body::<SignIn>(session).await {
                    Ok(b) => b,
                    Err(r) => return r,
                };
                if !token_matches(token.trim(), &expected) {
                    self.sessions.failed(client);
                    return error(401, "unauthorized", "wrong admin token");
                }
                if !same_origin(session.req_header()) {
                    return error(403, "forbidden", "sign in from the admin port's own page");
                }
                let (id, csrf) = self.sessions.create();
                with_cookie(json_response(200, &json!({"csrf": csrf, "expires_in": SESSION_SECONDS})), session_cookie(Some(&id)))
            }
            Method::GET => match current.as_deref().and_then(|id| self.sessions.get(id)) {
                Some((csrf, left)) => json_response(200, &json!({"csrf": csrf, "expires_in": left})),
                None => error(401, "unauthorized", "not signed in"),
            },
            Method::DELETE => {
                if let Some(r) = self.authorize(session, method) {
                    return r;
                }
                if let Some(id) = &current {
                    self.sessions.end(id);
                }
                with_cookie(json_response(200, &json!({"signed_out": true})), session_cookie(None))
            }
            _ => error(405, "bad_request", "use POST, GET or DELETE"),
        }
    }

    async fn body<T: serde::de::DeserializeOwned>(&self, session: &mut ServerSession) -> Result<T, Response<Vec<u8>>> {
        let buf = self.raw_body(session).await?;
        serde_json::from_slice(&buf).map_err(|e| error(400, "bad_request", format!("invalid JSON body: {e}")))
    }

    async fn route(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let st = &self.state;
        let method = session.req_header().method.clone();
        let path = session.req_header().uri.path().to_owned();
        if path == "/healthz" && method == Method::GET {
            return json_response(200, &json!({"status": "ok"}));
        }
        if !host_allowed(session.req_header(), &st.config.edge.admin_hosts) {
            return error(421, "misdirected_request", "the admin port answers only its address, localhost and edge.admin-hosts");
        }
        if method == Method::GET
            && let Some(page) = crate::console::serve_file(
                &path,
                crate::console::accepts_gzip(crate::identity::header(session.req_header(), "accept-encoding")),
            )
        {
            return page;
        }
        if path == "/admin/session" {
            return self.session_route(session, &method).await;
        }
        if let Some(refused) = self.authorize(session, &method) {
            return refused;
        }
        match (method, path.as_str()) {
            (Method::GET, "/admin/health") => json_response(
                200,
                &json!({
                    "status": "ok",
                    "uptime_seconds": st.started.elapsed().as_secs(),
                    "static_files": st.statics.len(),
                    "origin": st.origin.as_ref().map(|u| u.addr().to_string()),
                    "core": st.core.as_ref().map(|u| u.addr().to_string()),
                }),
            ),
            (Method::GET, "/admin/config") => json_response(200, &st.config.redacted_json()),
            (Method::GET, "/admin/limits") => {
                let rules: Vec<_> = st
                    .limits
                    .rules
                    .iter()
                    .map(|r| {
                        json!({
                            "path": r.rule.path, "key": r.rule.key, "rate": r.rule.rate,
                            "burst": r.rule.burst, "nodelay": r.rule.nodelay, "live_keys": r.keys(),
                        })
                    })
                    .collect();
                json_response(200, &json!({"limits": rules}))
            }
            (Method::GET, "/admin/blocklist") => json_response(200, &st.blocklist.to_json()),
            (Method::POST, "/admin/blocklist") => match self.body::<BlockEntries>(session).await {
                Err(r) => r,
                Ok(e) => match st.blocklist.add(&e) {
                    Ok(()) => json_response(200, &st.blocklist.to_json()),
                    Err(p) => error(400, "bad_request", p.join("; ")),
                },
            },
            (Method::DELETE, "/admin/blocklist") => match self.body::<BlockEntries>(session).await {
                Err(r) => r,
                Ok(e) => match st.blocklist.remove(&e) {
                    Ok(()) => json_response(200, &st.blocklist.to_json()),
                    Err(p) => error(400, "bad_request", p.join("; ")),
                },
            },
            (Method::GET, "/admin/tls") => match &st.tls {
                Some(tls) => json_response(200, &json!({"listen": tls.config.listen, "certificates": tls.summary(), "session-tickets": tls.tickets_summary()})),
                None => error(404, "not_found", "no [edge.tls] is configured"),
            },
            (Method::POST, "/admin/tls/reload") => match &st.tls {
                Some(tls) => match tls.reload() {
                    Ok(summary) => json_response(200, &json!({"reloaded": true, "certificates": summary})),
                    Err(problems) => {
                        tracing::warn!("TLS reload refused, the old certificates stay: {}", problems.join("; "));
                        json_response(
                            422,
                            &json!({"error": "tls_reload_failed", "message": format!("the old certificates stay: {}", problems.join("; ")), "problems": problems}),
                        )
                    }
                },
                None => error(404, "not_found", "no [edge.tls] is configured"),
            },
            (Method::GET, "/admin/geoip") => match &st.geoip {
                Some(g) => json_response(200, &g.snapshot()),
                None => error(404, "not_found", "no [edge.geoip] is configured"),
            },
            (Method::POST, "/admin/geoip/reload") => match &st.geoip {
                Some(g) => match g.reload() {
                    Ok(summary) => json_response(200, &json!({"reloaded": true, "databases": summary})),
                    Err(problem) => {
                        tracing::warn!("GeoIP reload refused, the old databases stay: {problem}");
                        json_response(422, &json!({"error": "geoip_reload_failed", "message": format!("the old databases stay: {problem}")}))
                    }
                },
                None => error(404, "not_found", "no [edge.geoip] is configured"),
            },
            (Method::GET, "/admin/bot-policy") => json_response(200, &st.bot.policy_json()),
            (Method::PUT, "/admin/bot-policy") => match self.body::<BotPolicyUpdate>(session).await {
                Err(r) => r,
                Ok(u) => match st.bot.update(&u) {
                    Ok(()) => json_response(200, &st.bot.policy_json()),
                    Err(p) => error(400, "bad_request", p.join("; ")),
                },
            },
            (Method::GET, "/metrics") => {
                let body = st.metrics.encode();
                Response::builder()
                    .status(StatusCode::OK)
                    .header(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")
                    .header(http::header::CACHE_CONTROL, "no-store")
                    .header(http::header::CONTENT_LENGTH, body.len())
                    .body(body)
                    .unwrap_or_else(|_| Response::new(Vec::new()))
            }
            (Method::GET, "/admin/stream") => {
                crate::room::admin::stream(&st.rooms, session).await;
                Response::new(Vec::new())
            }
            (Method::GET, p) if crate::room::admin::is_preview_path(p) => {
                let css = st.statics.get("/static/queue.css").map(|a| String::from_utf8_lossy(&a.identity.body).into_owned());
                let query = session.req_header().uri.query();
                crate::room::admin::preview(&st.rooms, &st.queue_page, css.as_deref().unwrap_or(crate::room::page::QUEUE_CSS), p, query)
            }
            (m, p) if let Some(room) = crate::room::report::report_room(p) => {
                let req = session.req_header();
                let accept = crate::identity::header(req, "accept");
                crate::room::report::handle(&st.rooms, &m, room, req.uri.query(), accept).await
            }
            (m, p) if crate::room::admin::is_rooms_path(p) => {
                let body = if m == Method::PUT || m == Method::POST {
                    match self.raw_body(session).await {
                        Ok(b) => b,
                        Err(r) => return r,
                    }
                } else {
                    Vec::new()
                };
                crate::room::admin::handle(&st.rooms, &m, p, &body).await
            }
            _ => error(404, "not_found", "no such admin endpoint"),
        }
    }

    /// The raw request body, bounded by [`MAX_ADMIN_BODY`].
    async fn raw_body(&self, session: &mut ServerSession) -> Result<Vec<u8>, Response<Vec<u8>>> {
        let mut buf = Vec::new();
        loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) => {
                    if buf.len() + chunk.len() > MAX_ADMIN_BODY {
                        return Err(error(413, "payload_too_large", "request body too large"));
                    }
                    buf.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(buf),
                Err(_) => return Err(error(400, "bad_request", "could not read the request body")),
            }
        }
    }
}

/// Whether the admin port answers this `Host`: an IP address (which no DNS answer can rebind),
/// `localhost`, or a name the operator listed (`edge.admin-hosts`), with any port. A request
/// without `Host` (HTTP/1.0; no browser sends one) passes.
fn host_allowed(req: &pingora::http::RequestHeader, listed: &[String]) -> bool {
    let Some(host) = req.headers.get(http::header::HOST) else { return true };
    let Ok(host) = host.to_str() else { return false };
    let name = match host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`
        Some(rest) => return rest.split_once(']').is_some_and(|(ip, port)| ip.parse::<std::net::Ipv6Addr>().is_ok() && (port.is_empty() || port_ok(port))),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port_ok(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    name.parse::<std::net::Ipv4Addr>().is_ok() || name.eq_ignore_ascii_case("localhost") || listed.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// `:<port>`.
fn port_ok(s: &str) -> bool {
    s.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// True when the request has no `Origin` (not a browser's cross-site request) or its own
/// (`http(s)://<Host>`).
fn same_origin(req: &pingora::http::RequestHeader) -> bool {
    let Some(origin) = req.headers.get(http::header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let Some(host) = req.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()) else { return false };
    origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) == Some(host)
}

#[async_trait]
impl ServeHttp for AdminService {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        self.route(session).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_localhost_and_listed_names_reach_the_admin_port() {
        let listed = vec!["wicket-admin.internal".to_owned()];
        let with = |host: Option<&str>| {
            let mut req = pingora::http::RequestHeader::build("GET", b"/admin/health", None).unwrap();
            if let Some(h) = host {
                req.insert_header("host", h).unwrap();
            }
            host_allowed(&req, &listed)
        };
        for ok in ["127.0.0.1:9090", "127.0.0.1", "10.1.2.3:9090", "[::1]:9090", "[::1]", "localhost:9090", "LOCALHOST", "localhost.", "wicket-admin.internal:9090", "Wicket-Admin.Internal"] {
            assert!(with(Some(ok)), "{ok}");
        }
        assert!(with(None), "no Host (HTTP/1.0)");
        for refused in ["rebind.example", "rebind.example:9090", "127.0.0.1.nip.io:9090", "localhost.evil.test", "[::1]x", "127.0.0.1:90a", "wicket-admin.internal.evil", "", "[zz]:1"] {
            assert!(!with(Some(refused)), "{refused}");
        }
    }

    #[test]
    fn token_compare() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abd", "abc"));
        assert!(!token_matches("", "abc"));
    }
}
