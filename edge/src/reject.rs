//! The one mapping from "the edge says no" to an HTTP answer.
//!
//! JSON clients get `{"error": "<code>", "message": "<text>", ...}` (docs/src/api.md's codes); browsers
//! (`Accept` naming `text/html`) get a small page where a page is what they need. Every answer
//! carries `Content-Length` (Pingora closes the connection otherwise) and `Cache-Control:
//! no-store`.

use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::json;

use crate::i18n::{LANG_COOKIE, Lang, Words, html_escape};

/// Largest request head (target and headers) the edge accepts; nginx's default buffers allow
/// about as much.
pub const MAX_REQUEST_HEAD: usize = 32 * 1024;

/// Why the edge answers instead of forwarding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reject {
    /// Over a rate limit.
    RateLimited {
        /// For `Retry-After` (rounded up to whole seconds, at least 1).
        retry_after: Duration,
    },
    /// On the blocklist (configured, admin-set, or an anomaly rule).
    Blocked,
    /// The route asks for a bot check the client has not passed.
    BotCheckRequired,
    /// A proof was offered and is wrong, expired or reused.
    BotCheckFailed(&'static str),
    /// The CAPTCHA provider could not answer and the switch says fail closed.
    BotCheckUnavailable,
    /// A protected path without a valid admission token.
    NotAdmitted {
        /// The room whose queue the client is sent to.
        room: String,
    },
    /// A protected path of a room that turns everyone away (reject-all), without a running
    /// session: the closed page (JSON `closed`), never the queue.
    RoomClosed {
        /// The room.
        room: String,
    },
    /// Malformed input.
    BadRequest(&'static str),
    /// A body over the configured cap.
    PayloadTooLarge,
    /// A request body that stalled or trickled below the rate floor.
    RequestTimeout,
    /// A request head (line and headers) over [`MAX_REQUEST_HEAD`].
    HeadersTooLarge,
    /// Nothing here.
    NotFound,
    /// The upstream failed before answering.
    BadGateway,
    /// The upstream did not answer in time.
    GatewayTimeout,
    /// No upstream configured for this path.
    NoUpstream,
    /// The waiting room's shared state could not be read (Redis down): retry shortly. Never
    /// "not admitted" for an admitted fan because a store blinked.
    RoomStateUnavailable,
    /// An event stream past the edge's budget (`max-event-streams`, or `max-event-streams-per-ip`
    /// when `per_ip`): the page polls the status instead, after `Retry-After`.
    EventStreamsFull {
        /// The client's address has its share open (else the edge is full).
        per_ip: bool,
    },
}

impl Reject {
    /// Status code.
    pub fn status(&self) -> u16 {
        match self {
            Reject::RateLimited { .. } => 429,
            Reject::Blocked | Reject::BotCheckRequired | Reject::BotCheckFailed(_) | Reject::NotAdmitted { .. } => 403,
            Reject::RoomClosed { .. } => 403,
            Reject::BotCheckUnavailable | Reject::RoomStateUnavailable | Reject::EventStreamsFull { .. } => 503,
            Reject::BadRequest(_) => 400,
            Reject::PayloadTooLarge => 413,
            Reject::RequestTimeout => 408,
            Reject::HeadersTooLarge => 431,
            Reject::NotFound => 404,
            Reject::BadGateway | Reject::NoUpstream => 502,
            Reject::GatewayTimeout => 504,
        }
    }

    /// docs/src/api.md error code.
    pub fn code(&self) -> &'static str {
        match self {
            Reject::RateLimited { .. } => "rate_limited",
            Reject::Blocked | Reject::BotCheckRequired | Reject::BotCheckFailed(_) | Reject::NotAdmitted { .. } => {
                "forbidden"
            }
            Reject::RoomClosed { .. } => "closed",
            Reject::BadRequest(_) | Reject::HeadersTooLarge | Reject::RequestTimeout => "bad_request",
            Reject::PayloadTooLarge => "payload_too_large",
            Reject::NotFound => "not_found",
            Reject::BotCheckUnavailable
            | Reject::BadGateway
            | Reject::GatewayTimeout
            | Reject::NoUpstream
            | Reject::RoomStateUnavailable
            | Reject::EventStreamsFull { .. } => "unavailable",
        }
    }

    /// Metric label of the reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Reject::RateLimited { .. } => "rate_limited",
            Reject::Blocked => "blocked",
            Reject::BotCheckRequired => "bot_required",
            Reject::BotCheckFailed(_) => "bot_failed",
            Reject::BotCheckUnavailable => "bot_unavailable",
            Reject::NotAdmitted { .. } => "not_admitted",
            Reject::RoomClosed { .. } => "room_closed",
            Reject::BadRequest(_) => "bad_request",
            Reject::PayloadTooLarge => "payload_too_large",
            Reject::RequestTimeout => "request_timeout",
            Reject::HeadersTooLarge => "headers_too_large",
            Reject::NotFound => "not_found",
            Reject::BadGateway => "bad_gateway",
            Reject::GatewayTimeout => "gateway_timeout",
            Reject::NoUpstream => "no_upstream",
            Reject::RoomStateUnavailable => "room_state_unavailable",
            Reject::EventStreamsFull { per_ip: false } => "event_streams_full",
            Reject::EventStreamsFull { per_ip: true } => "event_streams_per_ip",
        }
    }

    /// Human text.
    pub fn message(&self) -> String {
        match self {
            Reject::RateLimited { retry_after } => {
                format!("too many requests; retry after {} s", retry_secs(*retry_after))
            }
            Reject::Blocked => "access denied".into(),
            Reject::BotCheckRequired => "a bot check is required: solve the challenge and retry".into(),
            Reject::BotCheckFailed(why) => format!("bot check failed: {why}"),
            Reject::BotCheckUnavailable => "bot check is unavailable; retry shortly".into(),
            Reject::NotAdmitted { room } => format!("an admission token for room {room} is required"),
            Reject::RoomClosed { room } => format!("room {room} admits nobody now: the sale is closed"),
            Reject::BadRequest(why) => (*why).into(),
            Reject::PayloadTooLarge => "request body too large".into(),
            Reject::RequestTimeout => "the request body was too slow".into(),
            Reject::HeadersTooLarge => format!("request headers over {MAX_REQUEST_HEAD} bytes"),
            Reject::NotFound => "not found".into(),
            Reject::BadGateway => "the upstream failed".into(),
            Reject::GatewayTimeout => "the upstream timed out".into(),
            Reject::NoUpstream => "no upstream for this path".into(),
            Reject::RoomStateUnavailable => "the waiting room cannot check your admission right now; retry in a few seconds".into(),
            Reject::EventStreamsFull { per_ip: false } => "too many open event streams on this edge: poll the status instead".into(),
            Reject::EventStreamsFull { per_ip: true } => "too many open event streams from this address: poll the status instead".into(),
        }
    }

    /// Status, headers and body for a client that wants a page (in `page`'s language) or JSON
    /// (`None`).
    pub fn render(&self, page: Option<Lang>) -> (ResponseHeader, Bytes) {
        self.render_with(page.as_ref().map(|l| l as &dyn Words))
    }

    /// [`Reject::render`] with the page's words from `page` (the edge passes the queue page's
    /// catalogue, so an operator's `[edge.queue-page.text.<lang>]` overrides reach these pages too).
    pub fn render_with(&self, page: Option<&dyn Words>) -> (ResponseHeader, Bytes) {
        if let (Some(_), Reject::NotAdmitted { room }) = (page, self) {
            let mut h = ResponseHeader::build(302, Some(4)).expect("static status");
            let _ = h.insert_header(http::header::LOCATION, format!("/queue/{room}"));
            let _ = h.insert_header(http::header::CACHE_CONTROL, "no-store");
            let _ = h.insert_header(http::header::CONTENT_LENGTH, "0");
            return (h, Bytes::new());
        }
        let (ct, body) = if let Some(words) = page {
            ("text/html; charset=utf-8", Bytes::from(self.page(words)))
        } else {
            let mut v = json!({"error": self.code(), "message": self.message()});
            match self {
                Reject::NotAdmitted { room } => v["queue"] = json!(format!("/queue/{room}")),
                Reject::RoomClosed { room } => v["room"] = json!(room),
                Reject::BotCheckRequired | Reject::BotCheckFailed(_) => {
                    v["challenge"] = json!(crate::bot::CHALLENGE_PATH);
                    v["verify"] = json!(crate::bot::VERIFY_PATH);
                }
                Reject::RateLimited { retry_after } => v["retry_after"] = json!(retry_secs(*retry_after)),
                _ => {}
            }
            ("application/json", Bytes::from(v.to_string()))
        };
        let mut h = ResponseHeader::build(self.status(), Some(5)).expect("valid status");
        let _ = h.insert_header(http::header::CONTENT_TYPE, ct);
        let _ = h.insert_header(http::header::CONTENT_LENGTH, body.len());
        let _ = h.insert_header(http::header::CACHE_CONTROL, "no-store");
        if let Some(s) = self.retry_after() {
            let _ = h.insert_header(http::header::RETRY_AFTER, s);
        }
        (h, body)
    }

    /// Its `Retry-After` (seconds), when it has one.
    pub fn retry_after(&self) -> Option<String> {
        match self {
            Reject::RateLimited { retry_after } => Some(retry_secs(*retry_after).to_string()),
            Reject::RoomStateUnavailable => Some("2".into()),
            // The queue page polls the status then (a stream slot frees when a fan leaves).
            Reject::EventStreamsFull { .. } => Some("5".into()),
            _ => None,
        }
    }

    /// The answer to nginx's `auth_request` subrequest (`/wicket/auth`): 401 with
    /// `Wicket-Queue: /queue/<room>` when the visitor must queue, else 403 with the status the
    /// edge itself would answer in `Wicket-Status` (and `Retry-After` when rate-limited). No body:
    /// nginx passes only 401 and 403 on (anything else becomes 500), and its `error_page` sends
    /// the original request to the edge, which answers it in full.
    pub fn render_auth(&self) -> ResponseHeader {
        let status = if matches!(self, Reject::NotAdmitted { .. }) { 401 } else { 403 };
        let mut h = ResponseHeader::build(status, Some(5)).expect("static status");
        let _ = h.insert_header("wicket-status", self.status().to_string());
        let _ = h.insert_header("wicket-reason", self.reason());
        if let Reject::NotAdmitted { room } = self {
            let _ = h.insert_header("wicket-queue", format!("/queue/{room}"));
        }
        if let Reject::RateLimited { retry_after } = self {
            let _ = h.insert_header(http::header::RETRY_AFTER, retry_secs(*retry_after));
        }
        let _ = h.insert_header(http::header::CACHE_CONTROL, "no-store");
        let _ = h.insert_header(http::header::CONTENT_LENGTH, "0");
        h
    }

    /// The catalogue keys of this refusal's page title and text.
    fn page_keys(&self) -> (&'static str, &'static str) {
        match self {
            Reject::RateLimited { .. } => ("err_busy_title", "err_busy_text"),
            Reject::BotCheckRequired | Reject::BotCheckFailed(_) => ("err_check_title", "err_check_text"),
            Reject::Blocked => ("err_blocked_title", "err_blocked_text"),
            // The words of the queue page's closed state (the operator's overrides included).
            Reject::RoomClosed { .. } => ("title_closed", "detail_closed"),
            Reject::NotFound => ("err_not_found_title", "err_not_found_text"),
            Reject::BadRequest(_) | Reject::PayloadTooLarge | Reject::RequestTimeout | Reject::HeadersTooLarge => {
                ("err_bad_request_title", "err_bad_request_text")
            }
            Reject::NotAdmitted { .. }
            | Reject::BotCheckUnavailable
            | Reject::RoomStateUnavailable
            | Reject::EventStreamsFull { .. }
            | Reject::BadGateway
            | Reject::GatewayTimeout
            | Reject::NoUpstream => ("err_unavailable_title", "err_unavailable_text"),
        }
    }

    /// The fan-facing page, in `lang` from the message catalogue (the JSON answer keeps the
    /// English `message` for programs).
    pub fn page(&self, lang: &dyn Words) -> String {
        let (title_key, text_key) = self.page_keys();
        let title = html_escape(lang.text(title_key));
        let (text, extra) = match self {
            Reject::RateLimited { retry_after } => {
                let s = retry_secs(*retry_after);
                (
                    html_escape(&lang.fill(text_key, &[("s", &format!("\u{1}{s}\u{2}"))]))
                        .replace('\u{1}', "<b id=s>")
                        .replace('\u{2}', "</b>"),
                    format!(
                        "<noscript><meta http-equiv=refresh content={s}></noscript>\
                         <script>let s={s};setInterval(()=>{{if(--s<=0)location.reload();document.getElementById('s').textContent=s}},1000)</script>"
                    ),
                )
            }
            Reject::BotCheckRequired | Reject::BotCheckFailed(_) => (
                html_escape(lang.text(text_key)),
                format!(
                    "<noscript><p>{}</p></noscript><script src=\"{}\" data-auto=\"reload\" data-failed=\"{}\"></script>",
                    html_escape(lang.text("err_check_needs_js")),
                    crate::bot::POW_JS_PATH,
                    html_escape(lang.text("err_check_failed")),
                ),
            ),
            _ => (html_escape(lang.text(text_key)), String::new()),
        };
        // The operator's colours (CSS variables, the browser's own colours without them), logo
        // and event name, as on the queue page.
        let brand = lang.brand();
        let mut top = String::new();
        if let Some(url) = brand.logo_url {
            top.push_str(&format!("<img class=logo src=\"{}\" alt=\"\" style=\"max-height:48px;max-width:60%\">", html_escape(url)));
        }
        if let Some(name) = brand.event_name {
            top.push_str(&format!("<p class=brand style=\"margin:.5em 0 0;opacity:.75\">{}</p>", html_escape(name)));
        }
        format!(
            "<!doctype html><html lang={}{}><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
             <title>{title}</title>{}<body style=\"font:16px system-ui;max-width:36em;margin:4em auto;padding:0 1em;\
             background:var(--bg,Canvas);color:var(--text,CanvasText)\">\
             {top}<h1 style=\"color:var(--accent,inherit)\">{title}</h1><p id=pow-status>{text}</p>{extra}</body></html>",
            lang.lang().tag(),
            if lang.lang().is_rtl() { " dir=rtl" } else { "" },
            brand.colours_css,
        )
    }
}

fn retry_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

/// A refusal as bytes on the wire, for the doors that answer without Pingora's session
/// ([`crate::front::http1`], [`crate::front::forward`]): the head (status line, the rendered headers, the
/// `cookies` to set, `Date`, `extra` as it is, `Connection`), and the body.
pub fn wire(reject: &Reject, page: Option<&dyn Words>, keep_alive: bool, cookies: &[String], extra: &[u8]) -> (Vec<u8>, Bytes) {
    let (h, body) = reject.render_with(page);
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(format!("HTTP/1.1 {} {}\r\n", h.status.as_u16(), h.status.canonical_reason().unwrap_or("")).as_bytes());
    let fields = h.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
    for (name, value) in fields.chain(cookies.iter().map(|c| (&b"set-cookie"[..], c.as_bytes()))) {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"date: ");
    out.extend_from_slice(pingora::protocols::http::date::get_cached_date().as_bytes());
    out.extend_from_slice(extra);
    out.extend_from_slice(if keep_alive { b"\r\nconnection: keep-alive\r\n\r\n" } else { b"\r\nconnection: close\r\n\r\n" });
    (out, body)
}

/// The language of the page a client wants, or `None` when it wants JSON (no `text/html` in
/// `Accept`): the one rule of every door.
pub fn html_lang<H: crate::identity::HeadView + ?Sized>(head: &H, query: Option<&str>) -> Option<Lang> {
    let header = |name: &str| crate::identity::header(head, name);
    if !header("accept").is_some_and(|a| a.contains("text/html")) {
        return None;
    }
    Some(page_lang(query, crate::identity::cookie(head, LANG_COOKIE), header("accept-language")))
}

/// The language of the page the client wants, or `None` when it wants JSON (no `text/html` in
/// `Accept`).
pub fn wants_html(session: &Session) -> Option<Lang> {
    let req = session.req_header();
    html_lang(req, req.uri.query())
}

/// The language of a page for a request: `?lang=`, the `wicket_lang` cookie, `Accept-Language`.
pub fn page_lang(query: Option<&str>, saved: Option<&str>, accept_language: Option<&str>) -> Lang {
    crate::i18n::choose(crate::i18n::query_lang(query), saved, accept_language)
}

/// Writes a complete answer (header + body) to the client.
pub async fn send(session: &mut Session, header: ResponseHeader, body: Bytes) -> pingora::Result<()> {
    let head = session.req_header().method == http::Method::HEAD;
    let empty = body.is_empty() || head;
    session.write_response_header(Box::new(header), empty).await?;
    if !empty {
        session.write_response_body(Some(body), true).await?;
    }
    Ok(())
}

/// Writes a JSON answer with extra headers.
pub async fn send_json(
    session: &mut Session,
    status: u16,
    value: &serde_json::Value,
    extra: &[(http::HeaderName, HeaderValue)],
) -> pingora::Result<()> {
    let body = Bytes::from(value.to_string());
    let mut h = ResponseHeader::build(status, Some(4 + extra.len()))?;
    h.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    h.insert_header(http::header::CONTENT_LENGTH, body.len())?;
    h.insert_header(http::header::CACHE_CONTROL, "no-store")?;
    for (k, v) in extra {
        h.append_header(k.clone(), v.clone())?;
    }
    send(session, h, body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_secs(Duration::from_secs(3)), 3);
    }

    /// An event stream past the budget: 503 `unavailable` with `Retry-After: 5` (the page polls
    /// then), its own label for each budget; the same answer at every door, since the decision
    /// step makes it.
    #[test]
    fn a_stream_past_the_budget_is_503_with_retry_after() {
        for (per_ip, label, who) in [(false, "event_streams_full", "on this edge"), (true, "event_streams_per_ip", "from this address")] {
            let r = Reject::EventStreamsFull { per_ip };
            let (h, body) = r.render(None);
            assert_eq!((h.status.as_u16(), r.reason()), (503, label));
            assert_eq!(h.headers.get(http::header::RETRY_AFTER).unwrap(), "5");
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["error"], "unavailable");
            assert_eq!(v["message"], format!("too many open event streams {who}: poll the status instead"));
        }
        assert_eq!(Reject::RateLimited { retry_after: Duration::from_millis(1500) }.retry_after().as_deref(), Some("2"));
        assert_eq!(Reject::NotFound.retry_after(), None);
    }

    #[test]
    fn not_admitted_is_a_redirect_for_browsers_and_403_json_otherwise() {
        let r = Reject::NotAdmitted { room: "ev-1".into() };
        let (h, _) = r.render(Some(Lang::En));
        assert_eq!(h.status.as_u16(), 302);
        assert_eq!(h.headers.get("location").unwrap(), "/queue/ev-1");
        let (h, body) = r.render(None);
        assert_eq!(h.status.as_u16(), 403);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "forbidden");
        assert_eq!(v["queue"], "/queue/ev-1");
    }

    #[test]
    fn refusal_pages_speak_the_fans_language() {
        let busy = Reject::RateLimited { retry_after: Duration::from_secs(3) };
        let (h, body) = busy.render(Some(page_lang(None, None, Some("zh-CN,zh;q=0.9"))));
        let page = String::from_utf8_lossy(&body);
        assert_eq!(h.status.as_u16(), 429);
        assert!(page.contains("<html lang=zh-CN>") && page.contains("访问繁忙") && page.contains("<b id=s>3</b>"), "{page}");
        assert!(!page.contains("Busy"), "{page}");
        for (lang, word) in [(Lang::ZhTw, "繁忙"), (Lang::Ja, "混み合って"), (Lang::Ko, "접속이"), (Lang::En, "Busy")] {
            assert!(busy.page(&lang).contains(word), "{}", lang.tag());
        }
        for r in [Reject::Blocked, Reject::NotFound, Reject::BadGateway, Reject::RoomStateUnavailable, Reject::BotCheckRequired, Reject::RoomClosed { room: "r1".into() }] {
            let en = r.page(&Lang::En);
            for lang in Lang::ALL {
                let page = r.page(&lang);
                let dir = if matches!(lang, Lang::Ar | Lang::Fa) { " dir=rtl" } else { "" };
                assert!(page.contains(&format!("<html lang={}{dir}>", lang.tag())), "{page}");
                assert!(lang == Lang::En || page != en, "{r:?} is not translated into {}", lang.tag());
            }
        }
        assert!(Reject::NotFound.page(&Lang::Ko).contains("페이지를 찾을 수 없습니다"));
        // Without branding (a bare catalogue): the browser's own colours, no logo, no name.
        let bare = Reject::Blocked.page(&Lang::En);
        assert!(bare.contains("background:var(--bg,Canvas)") && !bare.contains("<img") && !bare.contains("<style>"), "{bare}");
        assert!(Reject::BotCheckRequired.page(&Lang::Ja).contains("data-failed="));
    }
}
