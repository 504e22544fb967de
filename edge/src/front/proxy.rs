//! The public service: Pingora's `ProxyHttp` with the edge's decisions in its phases.
//!
//! ```text
//! early_request_filter   keep-alive timeout
//!        │
//! request_filter         head rules, canonical path, nginx's /wicket/auth and /wicket/revoke, then
//!        │               the decision ([`crate::decide`]: blocklists, identity, limits, rooms,
//!        │               bot check, core routes, protected paths) carried out: a file, the room,
//!        │               the bot endpoints, a refusal, or on to the upstream
//!        ▼
//! upstream_peer          core (core prefixes) or origin; none → 502
//! upstream_request_filter strip and set Wicket-* identity headers, X-Forwarded-For
//! upstream_response_filter  upstream latency
//! response_filter        Set-Cookie (device, bot pass), Wicket-Revoke
//! fail_to_connect        retry idempotent requests on connect failure
//! fail_to_proxy          502/504 (or the edge's own reject) as JSON or HTML
//! logging                requests by route and outcome
//! ```

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use http::header;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{Error, ErrorType, HttpPeer};
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{ErrorSource, Result};

use crate::admission::AdmissionClaims;
use crate::bot::{ProofBody, unix_now};
use crate::decide::{Ask, Decision, Door, IDENTITY_HEADERS, Pass, Visitor, bearer, upstream_credentials};
use crate::identity::header as header_str;
use crate::metrics::{Outcome, Route};
use crate::i18n::Words;
use crate::reject::{Reject, send, send_json, wants_html};
use crate::state::{EdgeState, Upstream};
use crate::statics::{Asset, static_response};

/// Per-request state carried between phases.
pub struct RequestCtx {
    route: Route,
    /// Who asks, as the decision found out (client address, user, device, cookies to set).
    v: Visitor,
    admitted: Option<(String, AdmissionClaims)>,
    to_core: bool,
    /// A reject decided in a phase that cannot answer itself (upstream_peer).
    fail: Option<Reject>,
    upstream_started: Option<Instant>,
    /// The request head was sent upstream (a reset after that leaves the upstream working).
    sent_upstream: bool,
    tries: usize,
    /// When the request head was done (the body-rate floor counts from here), and body bytes
    /// seen so far.
    head_done: Option<Instant>,
    body_bytes: u64,
    /// An nginx `auth_request` subrequest ([`AUTH_PATH`]): decide about the original request,
    /// answer 204/401/403, never forward.
    auth: bool,
    /// A browser's admission cookie for a core request that carries no token: (room, token),
    /// sent to the core as `Authorization: Bearer` (the cookie itself is not forwarded).
    core_bearer: Option<(String, String)>,
}

/// The authorisation endpoint for nginx's `auth_request` (nginx-compat/): answered only to
/// trusted proxies, about the request named by `X-Original-URI` and `X-Original-Method`.
pub const AUTH_PATH: &str = "/wicket/auth";

/// Where nginx reports an origin's `Wicket-Revoke: 1` (nginx-compat/: `post_action`): answered
/// only to trusted proxies, about the request named by `X-Original-URI`, whose admission token
/// (cookie or bearer, as the original request carried it) ends its session.
pub const REVOKE_PATH: &str = "/wicket/revoke";

/// Where nginx's Lua path (nginx-compat/lua) reports the sessions it passed locally and learns
/// which it may go on passing ([`crate::decide::lua_sessions`]): answered only to trusted proxies.
pub const SESSIONS_PATH: &str = "/wicket/sessions";

/// The `ProxyHttp` implementation.
pub struct EdgeProxy {
    /// Shared state.
    pub state: Arc<EdgeState>,
    /// `Strict-Transport-Security` on every answer (the HTTPS service with `hsts-seconds`).
    pub hsts: Option<http::HeaderValue>,
}

impl EdgeProxy {
    /// Counts and answers a refusal the proxy itself finds (a head it cannot take, an endpoint's
    /// bad input); the decision's refusals are counted where they are decided.
    async fn reject(&self, session: &mut Session, ctx: &mut RequestCtx, r: Reject) -> Result<bool> {
        crate::decide::count_refusal(&self.state, ctx.v.ip, &r);
        self.render(session, ctx, r).await
    }

    /// Answers a refusal: JSON or the fan's page, or for `/wicket/auth` nginx's 401/403.
    async fn render(&self, session: &mut Session, ctx: &mut RequestCtx, r: Reject) -> Result<bool> {
        let st = &self.state;
        if ctx.auth {
            let mut h = r.render_auth();
            for c in ctx.v.cookies.drain(..) {
                h.append_header(header::SET_COOKIE, c)?;
            }
            send(session, h, Bytes::new()).await?;
            return Ok(true);
        }
        let words = wants_html(session).map(|l| st.queue_page.words(l));
        let (mut h, body) = r.render_with(words.as_ref().map(|w| w as &dyn Words));
        for c in ctx.v.cookies.drain(..) {
            h.append_header(header::SET_COOKIE, c)?;
        }
        send(session, h, body).await?;
        Ok(true)
    }

    /// The `auth_request` answer when the original request may pass: 204 with the verified
    /// identity for `auth_request_set` and the cookies the edge sets.
    async fn allow(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let mut h = ResponseHeader::build(204, Some(8))?;
        if let Some((room, claims)) = &ctx.admitted {
            h.insert_header("wicket-user", claims.sub.as_str())?;
            h.insert_header("wicket-room", room.as_str())?;
            h.insert_header("wicket-position", claims.pos.to_string())?;
        } else if let Some(u) = &ctx.v.user {
            h.insert_header("wicket-user", u.as_str())?;
        }
        if let Some(d) = &ctx.v.device {
            h.insert_header("wicket-device", d.id())?;
        }
        // What the origin may see of the client's credentials: the same as the direct edge
        // forwards (`upstream_credentials`); nginx sets both from these (wicket-protect.conf).
        let (cookies, authorization) = credentials_of(session.req_header(), ctx.admitted.as_ref().map(|(room, _)| room.as_str()), false);
        if let Some(c) = cookies {
            h.insert_header("wicket-forward-cookie", c)?;
        }
        if let Some(a) = authorization {
            h.insert_header("wicket-forward-authorization", a.to_vec())?;
        }
        match self.auth_cache_seconds(session.req_header(), ctx) {
            Some(ttl) => {
                h.insert_header("x-accel-expires", ttl.to_string())?;
                if let Some(vary) = &self.state.auth_vary {
                    h.insert_header(header::VARY, vary.clone())?;
                }
            }
            None => h.insert_header(header::CACHE_CONTROL, "no-store")?,
        }
        for c in ctx.v.cookies.drain(..) {
            h.append_header(header::SET_COOKIE, c)?;
        }
        session.write_response_header(Box::new(h), true).await?;
        Ok(true)
    }

    /// [`REVOKE_PATH`]: ends the session of the admission token the original request carried
    /// (the origin answered it with `Wicket-Revoke: 1`); 204 whether there was one or not.
    async fn revoke_original(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx.auth = true;
        if let Err(r) = self.become_original(session.req_header_mut()) {
            return self.reject(session, ctx, r).await;
        }
        let req = session.req_header();
        crate::decide::revoke(&self.state, req, req.uri.path()).await;
        let mut h = ResponseHeader::build(204, Some(1))?;
        h.insert_header(header::CACHE_CONTROL, "no-store")?;
        session.write_response_header(Box::new(h), true).await?;
        Ok(true)
    }

    /// [`SESSIONS_PATH`]: nginx's Lua path reports the sessions it passed (`POST`, one line each)
    /// and gets back which it may go on passing, with the edge's protected paths.
    async fn lua_sessions(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        if session.req_header().method != http::Method::POST {
            return self.reject(session, ctx, Reject::BadRequest("use POST")).await;
        }
        let body = match self.state.read_body(session).await {
            Ok(b) => b,
            Err(r) => return self.reject(session, ctx, r).await,
        };
        let v = crate::decide::lua_sessions(&self.state, &body).await;
        let extra = [(header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"))];
        send_json(session, 200, &v, &extra).await?;
        Ok(true)
    }

    /// How long nginx may cache this pass (`auth-cache-seconds`), or `None`: never when it sets a
    /// cookie, when a limit rule covers the path (each request must be counted), or when the
    /// admission token expires within the cache time.
    fn auth_cache_seconds(&self, req: &RequestHeader, ctx: &RequestCtx) -> Option<u64> {
        let ttl = self.state.config.edge.auth_cache_seconds;
        if ttl == 0 || !ctx.v.cookies.is_empty() || !crate::decide::auth_cacheable(&self.state, req.uri.path()) {
            return None;
        }
        if let Some((_, claims)) = &ctx.admitted
            && claims.exp < crate::bot::unix_now().saturating_add(ttl + 1)
        {
            return None;
        }
        Some(ttl)
    }

    /// Turns an `auth_request` subrequest into the request it asks about (method and canonical
    /// path from `X-Original-Method` / `X-Original-URI`); the rest of the head (cookies, user
    /// header, client address via `X-Forwarded-For`) is the original's, as nginx passes it.
    fn become_original(&self, req: &mut RequestHeader) -> std::result::Result<(), Reject> {
        let target = header_str(req, "x-original-uri").ok_or(Reject::BadRequest("X-Original-URI is required"))?.to_owned();
        let method = header_str(req, "x-original-method").unwrap_or("GET");
        let method = http::Method::from_bytes(method.as_bytes()).map_err(|_| Reject::BadRequest("bad X-Original-Method"))?;
        let canonical = crate::path::canonical_target(&target).map_err(|e| Reject::BadRequest(e.message()))?;
        let query = target.split_once('?').map(|(_, q)| q);
        let uri = crate::path::origin_form(&canonical, query).map_err(|_| Reject::BadRequest("bad X-Original-URI"))?;
        req.set_uri(uri);
        req.set_method(method);
        Ok(())
    }

    /// Serves a file from memory ([`static_response`]).
    async fn serve_static(&self, session: &mut Session, asset: &Asset, cookies: Vec<String>) -> Result<Outcome> {
        let (mut h, body, outcome) = static_response(asset, session.req_header())?;
        for c in cookies {
            h.append_header(header::SET_COOKIE, c)?;
        }
        session.write_response_header(Box::new(h), body.is_none()).await?;
        if let Some(body) = body {
            session.write_response_body(Some(body), true).await?;
        }
        Ok(outcome)
    }

    /// `/wicket/challenge` and `/wicket/verify`.
    async fn bot_endpoint(&self, session: &mut Session, ctx: &mut RequestCtx, verify: bool) -> Result<bool> {
        let st = Arc::clone(&self.state);
        if !verify {
            let (challenge, difficulty) = st.bot.pow.issue(unix_now(), ctx.v.ip);
            let v = serde_json::json!({"challenge": challenge, "difficulty": difficulty, "expires_in": st.bot.pow.ttl()});
            let extra = self.cookie_headers(ctx);
            send_json(session, 200, &v, &extra).await?;
            return Ok(true);
        }
        if session.req_header().method != http::Method::POST {
            return self.reject(session, ctx, Reject::BadRequest("use POST")).await;
        }
        let body = match st.read_body(session).await {
            Ok(b) => b,
            Err(r) => return self.reject(session, ctx, r).await,
        };
        let Ok(proof) = serde_json::from_slice::<ProofBody>(&body) else {
            return self.reject(session, ctx, Reject::BadRequest("body must be {\"pow\":{...}} or {\"captcha\":\"...\"}")).await;
        };
        let pow = proof.pow.as_ref().map(|p| (p.challenge.as_str(), p.nonce.as_str()));
        if let Err(r) = crate::decide::check_proof(&st, pow, proof.captcha.as_deref(), ctx.v.ip).await {
            return self.reject(session, ctx, r).await;
        }
        let pass = ctx.v.grant_pass(&st);
        let v = serde_json::json!({"ok": true, "pass": pass, "expires_in": st.bot.pass_seconds()});
        let extra = self.cookie_headers(ctx);
        send_json(session, 200, &v, &extra).await?;
        Ok(true)
    }

    fn cookie_headers(&self, ctx: &mut RequestCtx) -> Vec<(http::HeaderName, http::HeaderValue)> {
        ctx.v
            .cookies
            .drain(..)
            .filter_map(|c| http::HeaderValue::from_str(&c).ok().map(|v| (header::SET_COOKIE, v)))
            .collect()
    }

    fn upstream(&self, ctx: &RequestCtx) -> Option<&Upstream> {
        if ctx.to_core { self.state.core.as_ref() } else { self.state.origin.as_ref() }
    }

    /// Carries out the decision about the request ([`crate::decide`]); `Ok(false)`: forward it.
    async fn carry_out(&self, session: &mut Session, ctx: &mut RequestCtx, decision: Decision) -> Result<bool> {
        let st = Arc::clone(&self.state);
        match decision {
            Decision::Refuse(r, v, route) => {
                ctx.v = v;
                ctx.route = route;
                if route == Route::Static {
                    // `logging` leaves files to whoever answers them.
                    st.metrics.request(route, Outcome::Rejected);
                }
                self.render(session, ctx, r).await
            }
            Decision::Static { asset, route, cookies } => {
                let outcome = self.serve_static(session, &asset, cookies).await?;
                st.metrics.request(route, outcome);
                ctx.route = Route::Static;
                Ok(true)
            }
            Decision::Room(v) => {
                ctx.v = v;
                // The waiting room answers its rooms' paths and runs the room's bot check itself.
                let device = ctx.v.stable_device(&st);
                let mut q = crate::room::http::QueueRequest {
                    ip: ctx.v.ip,
                    user: ctx.v.user.clone(),
                    device,
                    cookies: std::mem::take(&mut ctx.v.cookies),
                };
                crate::room::http::serve(&st.queue_edge(), session, &mut q).await
            }
            Decision::Bot { verify, visitor } => {
                ctx.v = visitor;
                self.bot_endpoint(session, ctx, verify).await
            }
            Decision::Pass(pass) => {
                let Pass { visitor, route, to_core, admitted, core_bearer } = *pass;
                ctx.v = visitor;
                ctx.route = route;
                ctx.to_core = to_core;
                ctx.admitted = admitted;
                ctx.core_bearer = core_bearer;
                if ctx.auth {
                    return self.allow(session, ctx).await;
                }
                ctx.head_done = Some(Instant::now());
                Ok(false)
            }
            // Only the fast doors are handed over or answer polls from the counters.
            Decision::HandOver | Decision::Status { .. } | Decision::Events(_) => self.reject(session, ctx, Reject::BadRequest("not a proxy decision")).await,
        }
    }
}

/// An HTTP/2 client that reset its stream (or closed its connection) while it was served: a fan
/// who closed a tab, or a client cancelling what it asked for (counted per connection by
/// [`crate::front::h2`]).
fn client_reset(e: &Error) -> bool {
    e.esource() == &ErrorSource::Downstream && e.etype() == &ErrorType::H2Error
}

/// A failed write to the client: from Pingora's proxying (source downstream) or from a phase
/// answering itself (source unset: an event stream or a file whose client went away).
fn client_write_failed(e: &Error) -> bool {
    matches!(e.esource(), ErrorSource::Downstream | ErrorSource::Unset)
        && matches!(e.etype(), ErrorType::WriteError | ErrorType::WriteTimedout | ErrorType::ConnectionClosed)
}

/// [`upstream_credentials`] of a parsed request head.
fn credentials_of<'a>(req: &'a RequestHeader, room: Option<&str>, keep_bearer: bool) -> (Option<String>, Option<&'a [u8]>) {
    let cookies = req.headers.get_all(header::COOKIE).into_iter().map(|v| v.as_bytes());
    upstream_credentials(cookies, req.headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()), room, keep_bearer)
}

/// Removes the room's admission token from a request going upstream ([`upstream_credentials`]).
fn strip_admission_token(req: &mut RequestHeader, room: &str, keep_bearer: bool) {
    let (cookies, keep_authorization) = {
        let (cookies, authorization) = credentials_of(req, Some(room), keep_bearer);
        (cookies, authorization.is_some())
    };
    req.remove_header(&header::COOKIE);
    if let Some(kept) = cookies {
        let _ = req.insert_header(header::COOKIE, kept);
    }
    if !keep_authorization {
        req.remove_header(&header::AUTHORIZATION);
    }
}

#[async_trait]
impl ProxyHttp for EdgeProxy {
    type CTX = RequestCtx;

    /// Modules on every answer this service writes. Default: response compression (disabled).
    /// Here: the same, plus `Strict-Transport-Security` on the HTTPS service.
    fn init_downstream_modules(&self, modules: &mut pingora::modules::http::HttpModules) {
        modules.add_module(pingora::modules::http::compression::ResponseCompressionBuilder::enable(0));
        if let Some(v) = &self.hsts {
            modules.add_module(Box::new(crate::tls::HstsModule(v.clone())));
        }
    }

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            route: Route::Edge,
            v: Visitor { ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED), user: None, device: None, cookies: Vec::new() },
            admitted: None,
            to_core: false,
            fail: None,
            upstream_started: None,
            sent_upstream: false,
            tries: 0,
            head_done: None,
            body_bytes: 0,
            auth: false,
            core_bearer: None,
        }
    }

    /// Phase: first, before any module. Default: nothing.
    /// Here: sets the idle keep-alive timeout, the longest pause in a request body and the
    /// longest write to the client (Pingora has none of them by default). The timeout only bounds
    /// a connection the client keeps: Pingora has decided that from the head (HTTP/1.1 unless
    /// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`), and its setter would
    /// turn an HTTP/1.0 connection without it back on.
    async fn early_request_filter(&self, session: &mut Session, _ctx: &mut RequestCtx) -> Result<()> {
        let t = self.state.timeouts;
        if session.get_keepalive().is_some() {
            session.set_keepalive(Some(self.state.keepalive));
        }
        session.set_read_timeout(Some(t.body));
        session.set_write_timeout(Some(t.client_write));
        Ok(())
    }

    /// Phase: after the request header is read; `Ok(true)` means answered. Default: `Ok(false)`.
    /// Here: every edge decision (see the chart at the top of this module).
    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let st = Arc::clone(&self.state);
        let head_len = {
            let req = session.req_header();
            req.uri.path_and_query().map_or(0, |p| p.as_str().len()) + req.headers.iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum::<usize>()
        };
        if head_len > crate::reject::MAX_REQUEST_HEAD {
            return self.reject(session, ctx, Reject::HeadersTooLarge).await;
        }
        // One canonical path for every decision below, and for the upstream.
        if let Err(e) = crate::path::canonicalize(session.req_header_mut()) {
            return self.reject(session, ctx, Reject::BadRequest(e.message())).await;
        }
        let req = session.req_header();
        let proto = match req.version {
            http::Version::HTTP_11 => crate::path::Proto::Http11,
            http::Version::HTTP_2 => crate::path::Proto::H2,
            _ => crate::path::Proto::Http10,
        };
        // The target is origin-form here (`canonicalize` rewrote it); the front checked the raw one.
        if let Err(e) = crate::path::check_head(proto, "/", req.headers.iter().map(|(k, v)| (k.as_str().as_bytes(), v.as_bytes()))) {
            return self.reject(session, ctx, Reject::BadRequest(e.message())).await;
        }
        // Every connection the listeners hand over knows its peer (a parked one that lost it is
        // closed, `front::conn::Parked::resume`): a request without one is refused, never taken
        // for this host's own (which a trusted-proxy rule could believe).
        let Some(peer) = session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip()) else {
            return self.reject(session, ctx, Reject::BadRequest("the client's address is unknown")).await;
        };
        ctx.v.ip = st.client_ip.resolve(peer, session.req_header());
        let path = session.req_header().uri.path();
        if path == REVOKE_PATH || path == AUTH_PATH || path == SESSIONS_PATH {
            // nginx's endpoints: for the proxies it trusts, nobody else.
            if !st.client_ip.is_trusted(&st.client_ip.resolve_peer(peer)) {
                return self.reject(session, ctx, Reject::NotFound).await;
            }
            if path == REVOKE_PATH {
                return self.revoke_original(session, ctx).await;
            }
            if path == SESSIONS_PATH {
                return self.lua_sessions(session, ctx).await;
            }
            ctx.auth = true;
            if let Err(r) = self.become_original(session.req_header_mut()) {
                return self.reject(session, ctx, r).await;
            }
        }
        let decision = {
            let req = session.req_header();
            let door = if ctx.auth { Door::Auth } else { Door::Proxy };
            crate::decide::decide(&st, &Ask { door, method: req.method.as_str(), path: req.uri.path(), head: req, peer }).await
        };
        self.carry_out(session, ctx, decision).await
    }

    /// Phase: each piece of the request body on its way upstream. Default: nothing.
    /// Here: the body-rate floor (`body-min-rate`): a body trickled slower is cut with 408.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        ctx.body_bytes += body.as_ref().map_or(0, |b| b.len() as u64);
        if let Some(t) = ctx.head_done
            && self.state.timeouts.body_too_slow(ctx.body_bytes, t.elapsed())
        {
            ctx.fail = Some(Reject::RequestTimeout);
            return Err(Error::explain(ErrorType::ReadTimedout, "request body below the minimum rate"));
        }
        Ok(())
    }

    /// Phase: choose the upstream. Required (no default).
    /// Here: the core for core prefixes, else the origin; a missing one is a 502 page.
    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut RequestCtx) -> Result<Box<HttpPeer>> {
        ctx.tries += 1;
        let Some(up) = self.upstream(ctx) else {
            ctx.fail = Some(Reject::NoUpstream);
            return Err(Error::explain(ErrorType::HTTPStatus(502), "no upstream configured"));
        };
        let mut peer = HttpPeer::new(up.addr(), up.tls, up.sni.clone());
        peer.options = up.options.clone();
        Ok(Box::new(peer))
    }

    /// Phase: after connecting, before sending the request header. Default: nothing.
    /// Here: removes any incoming `Wicket-*` identity header and sets the verified ones, and
    /// appends the client to `X-Forwarded-For` (replacing it when the peer is not trusted).
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        for h in IDENTITY_HEADERS {
            upstream_request.remove_header(h);
        }
        if ctx.to_core && bearer(upstream_request).is_some_and(|b| !crate::admission::is_admission_jwt(b)) {
            // Only admission tokens travel to the core through the public port: an admin token
            // sent here must not work on the routes that take either.
            upstream_request.remove_header(&header::AUTHORIZATION);
        }
        if let Some((room, claims)) = &ctx.admitted {
            // The core checks the token itself: it keeps the bearer; the origin gets identity only.
            strip_admission_token(upstream_request, room, ctx.to_core);
            upstream_request.insert_header("wicket-user", claims.sub.as_str())?;
            upstream_request.insert_header("wicket-room", room.as_str())?;
            upstream_request.insert_header("wicket-position", claims.pos.to_string())?;
        } else if let Some(u) = &ctx.v.user {
            upstream_request.insert_header("wicket-user", u.as_str())?;
        }
        if let Some(d) = &ctx.v.device {
            upstream_request.insert_header("wicket-device", d.id())?;
        }
        if let Some((room, token)) = &ctx.core_bearer {
            strip_admission_token(upstream_request, room, true);
            upstream_request.insert_header(header::AUTHORIZATION, format!("Bearer {token}"))?;
        }
        let peer = session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip());
        let xff = match (peer, header_str(session.req_header(), "x-forwarded-for")) {
            (Some(p), Some(prev)) if p != ctx.v.ip => format!("{prev}, {p}"),
            _ => ctx.v.ip.to_string(),
        };
        upstream_request.insert_header("x-forwarded-for", xff)?;
        ctx.upstream_started = Some(Instant::now());
        ctx.sent_upstream = true;
        Ok(())
    }

    /// Phase: upstream response header arrived. Default: nothing.
    /// Here: records the upstream's latency; a hold the core made wakes the release's next step.
    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let (Some(t), Some(up)) = (ctx.upstream_started.take(), self.upstream(ctx)) {
            self.state.metrics.upstream_seconds.with_label_values(&[up.name]).observe(t.elapsed().as_secs_f64());
            if ctx.to_core {
                // The release controller's input: every forwarded core request, 5xx as errors.
                let ok = upstream_response.status.as_u16() < 500;
                self.state.rooms.record_core(ok.then(|| t.elapsed().as_micros() as u64));
                // A hold made: the release may let the next fans in now (issue #39).
                let req = session.req_header();
                if upstream_response.status.is_success()
                    && let Some(event) = crate::decide::hold_event(req.method.as_str(), req.uri.path())
                {
                    self.state.rooms.hold_answered(event);
                }
            }
        }
        Ok(())
    }

    /// Phase: before the response header goes to the client. Default: nothing.
    /// Here: adds the edge's cookies to the final answer; `Wicket-Revoke: 1` from the origin
    /// clears the admission.
    async fn response_filter(&self, _session: &mut Session, resp: &mut ResponseHeader, ctx: &mut RequestCtx) -> Result<()> {
        if resp.status.is_informational() {
            // 103 Early Hints pass as they are: cookies belong on the final answer.
            return Ok(());
        }
        for c in ctx.v.cookies.drain(..) {
            resp.append_header(header::SET_COOKIE, c)?;
        }
        if resp.remove_header("wicket-revoke").is_some_and(|v| v.as_bytes() == b"1")
            && let Some((room, claims)) = &ctx.admitted
        {
            let c = self.state.cookie(&format!("wicket_a_{room}"), "", 0);
            resp.append_header(header::SET_COOKIE, c)?;
            self.state.rooms.revoke(room, &claims.sub).await;
        }
        Ok(())
    }

    /// Phase: connecting to the upstream failed. Default: pass the error on (no retry).
    /// Here: idempotent requests are retried up to `retries` times.
    fn fail_to_connect(&self, session: &mut Session, _peer: &HttpPeer, ctx: &mut RequestCtx, mut e: Box<Error>) -> Box<Error> {
        // The name may have moved: it is looked up again soon (crate::resolve).
        if let Some(up) = self.upstream(ctx) {
            up.target.connect_failed();
        }
        if session.req_header().method.is_idempotent() && ctx.tries <= self.state.retries {
            e.set_retry(true);
        }
        e
    }

    /// Phase: a fatal error. Default: a bare status page and closing the connection.
    /// Here: the edge's JSON/HTML error (502, 504, or the reject decided earlier).
    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut RequestCtx) -> FailToProxy
    where
        RequestCtx: Send + Sync,
    {
        let reject = ctx.fail.take().or_else(|| match (e.esource(), e.etype()) {
            // Writing to the client failed (our phases' own answers: an event stream, a file):
            // the client went away. Pingora leaves the source of those errors unset.
            _ if client_write_failed(e) || client_reset(e) => None,
            // The client: gone, or too slow to send its body or read the answer.
            (ErrorSource::Downstream, ErrorType::ReadTimedout) => Some(Reject::RequestTimeout),
            (
                ErrorSource::Downstream,
                ErrorType::ReadError | ErrorType::WriteError | ErrorType::WriteTimedout | ErrorType::ConnectionClosed,
            ) => None,
            (ErrorSource::Downstream, _) => Some(Reject::BadRequest("bad request")),
            (_, ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout) => Some(Reject::GatewayTimeout),
            _ => Some(Reject::BadGateway),
        });
        let Some(reject) = reject else {
            return FailToProxy { error_code: 0, can_reuse_downstream: false };
        };
        let code = reject.status();
        if ctx.to_core && matches!(reject, Reject::BadGateway | Reject::GatewayTimeout) {
            self.state.rooms.record_core(None);
        }
        self.state.metrics.rejects.with_label_values(&[reject.reason()]).inc();
        let words = wants_html(session).map(|l| self.state.queue_page.words(l));
        let (h, body) = reject.render_with(words.as_ref().map(|w| w as &dyn Words));
        let _ = send(session, h, body).await;
        FailToProxy { error_code: code, can_reuse_downstream: false }
    }

    /// Default: every failed request is logged at ERROR. Here: a client that went away, reset its
    /// stream or was too slow is an everyday event (and one a client can repeat at will: never a
    /// line per request at a level operators keep), logged at DEBUG and counted.
    fn suppress_error_log(&self, _session: &Session, ctx: &RequestCtx, e: &Error) -> bool {
        if client_reset(e) {
            self.state.metrics.client_resets.inc();
            // Only a stream the upstream is working on spends the connection's budget: a fan
            // closing the queue page's event stream (the edge's own) costs nothing upstream.
            if ctx.sent_upstream {
                crate::cancel::note_client_reset();
            }
            tracing::debug!("{e}");
            return true;
        }
        let client = client_write_failed(e)
            || e.esource() == &ErrorSource::Downstream
                && matches!(
                e.etype(),
                ErrorType::ReadError | ErrorType::WriteError | ErrorType::ConnectionClosed | ErrorType::ReadTimedout | ErrorType::WriteTimedout
            );
        // The edge's own refusals raised as errors (no upstream for a path) are answered,
        // counted in wicket_rejects_total and not worth a line per request either.
        let own = matches!(e.etype(), ErrorType::HTTPStatus(_)) && e.esource() == &ErrorSource::Unset;
        if client || own {
            tracing::debug!("{e}");
        }
        client || own
    }

    /// Phase: the end of every request. Default: nothing.
    /// Here: counts the request by route and outcome (static pages are counted when served).
    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        if ctx.route == Route::Static {
            return;
        }
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let outcome = match status {
            0 | 500.. => Outcome::Error,
            304 => Outcome::NotModified,
            400..=499 => Outcome::Rejected,
            _ => Outcome::Ok,
        };
        self.state.metrics.request(ctx.route, outcome);
    }
}
