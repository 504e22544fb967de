//! `wicket demo`: the edge, the core (embedded store) and a tiny stand-in for the existing site,
//! in one process, with the example detail page and event. Nothing to install or configure.
//!
//! One story: the detail page counts down to the event's real opening (it reads the event's
//! `opens_at` through the edge, `GET /v1/events/ev-42`); the waiting room opens with the event;
//! an admitted browser lands on the stand-in buy page (`/buy/ev-42`, served by the stand-in
//! site), holds a ticket through the edge (which turns the admission cookie into the core's
//! bearer token), pays through a stand-in provider (`POST /buy/ev-42/pay`: a signed payment
//! callback to the core) and ends on a done page whose `Wicket-Revoke: 1` ends the session.
//!
//! The stand-in site's pages (the detail page at `/`, the buy page, the done page) speak the fan
//! languages of the queue page, chosen as it chooses ([`crate::i18n::choose`]): `?lang=` (kept in
//! the `wicket_lang` cookie the queue page reads too), else that cookie, else `Accept-Language`;
//! right to left for Arabic and Persian. Their texts: static/site/text.json. Their style sheet is
//! served by the edge from memory (`site-dir`).
//!
//! The generated config holds secrets: it lives in a private temp folder (0700, files 0600)
//! removed when the demo stops.
//!
//! ```text
//! wicket demo
//! curl -i http://127.0.0.1:8080/
//! ```

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// The example detail page (static/site/index.html), a template of [`render_site`].
pub const DETAIL_PAGE: &str = include_str!("../../static/site/index.html");

/// The stand-in site's buy page (static/site/buy.html), where an admitted fan holds and pays; a
/// template of [`render_site`].
pub const BUY_PAGE: &str = include_str!("../../static/site/buy.html");

/// The stand-in site's style sheet, served by the edge from the demo's `site-dir`.
pub const SITE_CSS: &str = include_str!("../../static/site/site.css");

/// The stand-in site's texts: language tag → key → text (static/site/text.json).
static SITE_TEXT: std::sync::LazyLock<std::collections::HashMap<String, std::collections::HashMap<String, String>>> =
    std::sync::LazyLock::new(|| serde_json::from_str(include_str!("../../static/site/text.json")).unwrap_or_default());

/// The stand-in site's text `key` in `lang` (English when that language lacks it; empty when no
/// language has it).
pub fn site_text(lang: crate::i18n::Lang, key: &str) -> &'static str {
    SITE_TEXT.get(lang.tag()).and_then(|m| m.get(key)).or_else(|| SITE_TEXT.get("en")?.get(key)).map_or("", String::as_str)
}

/// Fills a stand-in site template for `lang`: `{{lang}}` and `{{dir}}` (the `<html>` attributes),
/// `{{language_links}}` (a link to each language, this one marked current), `{{js_text}}` (the
/// `js_` texts as JSON, for the page's script), and any other `{{key}}` with its text, escaped.
pub fn render_site(template: &str, lang: crate::i18n::Lang) -> String {
    use crate::i18n::{Lang, html_escape};
    let mut out = String::with_capacity(template.len() + 2048);
    let mut rest = template;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let Some(j) = rest[i..].find("}}") else { break };
        let key = &rest[i + 2..i + j];
        match key {
            "lang" => out.push_str(lang.tag()),
            "dir" => out.push_str(if lang.is_rtl() { "rtl" } else { "ltr" }),
            "language_links" => {
                for l in Lang::ALL {
                    let current = if l == lang { " aria-current=\"true\"" } else { "" };
                    out.push_str(&format!(
                        "<a href=\"?lang={t}\" lang=\"{t}\" hreflang=\"{t}\"{current}>{}</a>",
                        html_escape(l.text("lang_name")),
                        t = l.tag()
                    ));
                }
            }
            "js_text" => {
                let texts: serde_json::Map<String, serde_json::Value> = SITE_TEXT
                    .get("en")
                    .into_iter()
                    .flat_map(|m| m.keys())
                    .filter(|k| k.starts_with("js_"))
                    .map(|k| (k.clone(), site_text(lang, k).into()))
                    .collect();
                // (In a script element: no `</` may end it early.)
                out.push_str(&serde_json::Value::Object(texts).to_string().replace("</", "<\\/"));
            }
            k => out.push_str(&html_escape(site_text(lang, k))),
        }
        rest = &rest[i + j + 2..];
    }
    out.push_str(rest);
    out
}

/// The language of a stand-in site request, as the queue page chooses; with a `Set-Cookie` that
/// keeps a `?lang=` choice (for the queue page too).
fn site_lang(req: &http::Request<hyper::body::Incoming>) -> (crate::i18n::Lang, Option<String>) {
    use crate::i18n::{LANG_COOKIE, Lang};
    let query = crate::i18n::query_lang(req.uri().query());
    let asked = query.and_then(Lang::from_tag);
    let saved = crate::identity::cookie(req.headers(), LANG_COOKIE);
    let accept = req.headers().get(http::header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok());
    let lang = crate::i18n::choose(query, saved, accept);
    (lang, asked.map(|l| crate::identity::set_cookie(LANG_COOKIE, l.tag(), 365 * 86_400, false)))
}

/// Seconds from the start of a demo to the sale's opening, unless asked otherwise.
pub const OPENS_IN_SECONDS: u64 = 60;

/// Ports of the demo.
#[derive(Debug, Clone, Copy)]
pub struct DemoPorts {
    /// Public edge port.
    pub edge: u16,
    /// Admin port.
    pub admin: u16,
    /// Core port.
    pub core: u16,
    /// Demo origin port.
    pub origin: u16,
}

impl Default for DemoPorts {
    fn default() -> Self {
        DemoPorts { edge: 8080, admin: 9090, core: 8081, origin: 3000 }
    }
}

/// Secrets of one demo run (random, printed for the operator).
pub struct DemoSecrets {
    /// Admin bearer token of edge and core.
    pub admin_token: String,
    /// HS256 admission-token secret.
    pub hs_secret: String,
    /// Secret of the payment callbacks (the stand-in provider signs with it).
    pub callback_secret: String,
}

impl DemoSecrets {
    /// Fresh random secrets.
    pub fn random() -> Self {
        DemoSecrets { admin_token: random_hex(16), hs_secret: random_hex(24), callback_secret: random_hex(16) }
    }
}

/// The demo's private folder (0700): the generated config with its secrets (0600), the page, the
/// event, the journal. Removed when dropped, so a stopped demo leaves no secrets behind.
pub struct DemoDir {
    path: PathBuf,
}

impl DemoDir {
    /// Creates a fresh folder under the system's temp folder.
    pub fn create() -> std::io::Result<DemoDir> {
        let path = std::env::temp_dir().join(format!("wicket-demo-{}-{}", std::process::id(), random_hex(4)));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(DemoDir { path })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Writes `body` to `path`, readable by its owner only.
fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // An existing file keeps its mode on open: set it again.
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    f.write_all(body)
}

fn random_hex(n: usize) -> String {
    (0..n).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

/// Writes the demo's config, page and event into `dir` (the sale opens in a minute); returns the
/// config path.
pub fn write_files(dir: &Path, ports: DemoPorts, secrets: &DemoSecrets) -> std::io::Result<PathBuf> {
    write_files_opening(dir, ports, secrets, OPENS_IN_SECONDS)
}

/// [`write_files`] with the sale opening `opens_in` seconds from now. Every file is 0600.
pub fn write_files_opening(dir: &Path, ports: DemoPorts, secrets: &DemoSecrets, opens_in: u64) -> std::io::Result<PathBuf> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir.join("site"))?;
    write_private(&dir.join("site/site.css"), SITE_CSS.as_bytes())?;
    let opens = time_plus(opens_in);
    let closes = time_plus(12 * 3600);
    let event = serde_json::json!({
        "name": "Prehistoric park, 1-yuan day ticket",
        "opens_at": opens, "closes_at": closes, "hold_seconds": 900,
        "pools": [{"id": "park", "capacity": 3000}],
        "skus": [{"id": "park", "pools": ["park"], "price_cents": 100}],
        "limits": [{"dimension": "user", "max": 1}]
    });
    write_private(&dir.join("ev-42.json"), &serde_json::to_vec_pretty(&event).unwrap_or_default())?;
    let DemoPorts { edge, admin, core, origin } = ports;
    let config = format!(
        r#"# Generated by `wicket demo`.
listen = "127.0.0.1:{core}"
admin-token = "{admin_token}"
store = "embedded"
data-dir = "data"
event-files = ["ev-42.json"]

[payment]
callback-secret = "{callback}"

[edge]
listen = "127.0.0.1:{edge}"
admin-listen = "127.0.0.1:{admin}"
origin = "http://127.0.0.1:{origin}"
core = "embedded"
site-dir = "site"
secret = "{edge_secret}"
shutdown-grace-seconds = 2

[[edge.limits]]
path = "/"
key = "ip"
rate = "20r/s"
burst = 40
nodelay = true

# The waiting room in front of the sale: visitors queue at /queue/ev-42 and are admitted to /buy/ev-42.
[[rooms]]
id = "ev-42"
event = "ev-42"
target = "/buy/ev-42"
protected = ["/buy/ev-42"]
method = "fifo"
session-seconds = 600
token-seconds = 120
[rooms.release]
mode = "auto"
start = 2
min = 1
max = 50
p99-target-ms = 100

[tokens]
issuer = "wicket"
signing-kid = "demo-hs"
[[tokens.keys]]
kid = "demo-hs"
alg = "HS256"
secret = "{hs}"
"#,
        admin_token = secrets.admin_token,
        callback = secrets.callback_secret,
        edge_secret = random_hex(16),
        hs = secrets.hs_secret,
    );
    let path = dir.join("wicket.toml");
    write_private(&path, config.as_bytes())?;
    Ok(path)
}

fn time_plus(seconds: u64) -> String {
    let t = std::time::SystemTime::now() + std::time::Duration::from_secs(seconds);
    let secs = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // RFC 3339 in UTC without a date library: days since epoch → civil date.
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// What the stand-in site needs to play the payment provider.
#[derive(Clone)]
pub struct StandInProvider {
    /// Where payment callbacks go: the edge's public address (as a real provider's would).
    pub callback_to: SocketAddr,
    /// The callbacks' HMAC secret (`[payment] callback-secret`).
    pub callback_secret: String,
}

/// Serves a stand-in for the existing site on `addr` (on a thread of its own): the buy page
/// (`GET /buy/ev-42`), the stand-in payment (`POST /buy/ev-42/pay`), the done page
/// (`GET /buy/ev-42/done`, with `Wicket-Revoke: 1`), and a plain page for anything else.
pub fn start_origin(addr: SocketAddr, provider: StandInProvider) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| anyhow::anyhow!("demo origin: cannot listen on {addr}: {e}"))?;
    std::thread::spawn(move || {
        rt.block_on(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let provider = provider.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let provider = provider.clone();
                        async move { Ok::<_, Infallible>(origin_answer(req, &provider).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
    });
    Ok(())
}

fn page(status: u16, ctype: &str, body: String, revoke: bool) -> http::Response<Full<Bytes>> {
    let mut b = http::Response::builder().status(status).header("content-type", ctype).header("cache-control", "no-store");
    if revoke {
        b = b.header("wicket-revoke", "1");
    }
    b.body(Full::new(Bytes::from(body))).unwrap_or_default()
}

/// A page of the stand-in site in the fan's language (it varies with the language's sources).
fn site_page(body: String, set_lang: Option<String>, revoke: bool) -> http::Response<Full<Bytes>> {
    let mut r = page(200, "text/html; charset=utf-8", body, revoke);
    let h = r.headers_mut();
    h.insert(http::header::VARY, http::HeaderValue::from_static("Accept-Language, Cookie"));
    if let Some(c) = set_lang.and_then(|c| http::HeaderValue::from_str(&c).ok()) {
        h.insert(http::header::SET_COOKIE, c);
    }
    r
}

/// The done page, in `lang`.
fn done_page(lang: crate::i18n::Lang) -> String {
    use crate::i18n::html_escape;
    let t = |k: &str| html_escape(site_text(lang, k));
    format!(
        "<!doctype html><html lang=\"{tag}\" dir=\"{dir}\"><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
         <title>{title}</title><link rel=\"stylesheet\" href=\"/site.css\"><main class=\"buy\"><h1>{title}</h1><p>{text}</p>\
         <p><a href=\"/\">{back}</a></p></main>",
        tag = lang.tag(),
        dir = if lang.is_rtl() { "rtl" } else { "ltr" },
        title = t("done_title"),
        text = t("done_text"),
        back = t("done_back"),
    )
}

async fn origin_answer(req: http::Request<hyper::body::Incoming>, provider: &StandInProvider) -> http::Response<Full<Bytes>> {
    use http_body_util::BodyExt;
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let user = req.headers().get("wicket-user").and_then(|v| v.to_str().ok()).unwrap_or("-").to_owned();
    let (lang, set_lang) = site_lang(&req);
    match (req.method().clone(), path.as_str()) {
        (http::Method::GET, "" | "/index.html") => site_page(render_site(DETAIL_PAGE, lang), set_lang, false),
        (http::Method::GET, "/buy/ev-42") => site_page(render_site(BUY_PAGE, lang), set_lang, false),
        (http::Method::POST, "/buy/ev-42/pay") => {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let (status, answer) = stand_in_payment(&body, provider).await;
            page(status, "application/json", answer, false)
        }
        (http::Method::GET, "/buy/ev-42/done") => site_page(done_page(lang), set_lang, true),
        _ => page(
            200,
            "text/html; charset=utf-8",
            format!(
                "<!doctype html><title>Existing site</title><h1>The existing site</h1>\
                 <p>You asked for <code>{}</code>; the edge forwarded it here (Wicket-User: {}).</p>",
                html_escape(&path),
                html_escape(&user)
            ),
            false,
        ),
    }
}

/// The stand-in provider: "the fan paid" for `{"order_id","amount_cents"}`, told to the core as a
/// signed callback through the edge. Returns the core's status and answer.
async fn stand_in_payment(body: &[u8], provider: &StandInProvider) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (400, serde_json::json!({"error": "bad_request", "message": "body must be {\"order_id\",\"amount_cents\"}"}).to_string());
    };
    let (Some(order), Some(amount)) = (v["order_id"].as_str(), v["amount_cents"].as_u64()) else {
        return (400, serde_json::json!({"error": "bad_request", "message": "order_id and amount_cents are required"}).to_string());
    };
    let callback = serde_json::json!({"order_id": order, "txn_id": format!("demo-{}", random_hex(8)), "amount_cents": amount, "status": "SUCCESS"})
        .to_string();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let signature = wicket_core::payment::sign(callback.as_bytes(), provider.callback_secret.as_bytes(), now);
    let request = format!(
        "POST /v1/payments/callback HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nWicket-Signature: {signature}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{callback}",
        provider.callback_to,
        callback.len()
    );
    let unavailable = || (502, serde_json::json!({"error": "unavailable", "message": "the payment callback failed"}).to_string());
    let Ok(Ok(mut conn)) = tokio::time::timeout(std::time::Duration::from_secs(5), tokio::net::TcpStream::connect(provider.callback_to)).await
    else {
        return unavailable();
    };
    let mut answer = Vec::new();
    let done = async {
        conn.write_all(request.as_bytes()).await?;
        conn.read_to_end(&mut answer).await
    };
    if !matches!(tokio::time::timeout(std::time::Duration::from_secs(10), done).await, Ok(Ok(_))) {
        return unavailable();
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(502);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Runs the demo until SIGTERM/SIGINT, the sale opening `opens_in` seconds after the start; its
/// folder (and the secrets in it) is removed when it stops.
pub fn run(ports: DemoPorts, opens_in: u64) -> anyhow::Result<()> {
    let secrets = DemoSecrets::random();
    let dir = DemoDir::create()?;
    let path = write_files_opening(dir.path(), ports, &secrets, opens_in)?;
    let provider =
        StandInProvider { callback_to: SocketAddr::from(([127, 0, 0, 1], ports.edge)), callback_secret: secrets.callback_secret.clone() };
    start_origin(SocketAddr::from(([127, 0, 0, 1], ports.origin)), provider)?;
    let cfg = crate::config::WicketConfig::from_file(&path)?;
    println!(
        "Wicket demo (config: {path})\n\
         \n  detail page (from memory)   http://127.0.0.1:{edge}/\n\
         \x20 sale API via the edge       http://127.0.0.1:{edge}/v1/events/ev-42\n\
         \x20 waiting room                http://127.0.0.1:{edge}/queue/ev-42\n\
         \x20 buy page (stand-in site)    http://127.0.0.1:{edge}/buy/ev-42   (302 to the queue without a token)\n\
         \x20 existing site (stand-in)    http://127.0.0.1:{edge}/anything\n\
         \x20 admin API                   http://127.0.0.1:{admin}/admin/health\n\
         \n  admin token: {admin_token}\n\
         \x20 try:  curl -H 'Authorization: Bearer {admin_token}' http://127.0.0.1:{admin}/metrics\n\
         \x20       curl -i -H 'Accept: application/json' http://127.0.0.1:{edge}/queue/ev-42\n\
         \nThe sale opens in {opens_in} s: the detail page counts down, the waiting room opens with it, and an\n\
         admitted browser holds and pays (stand-in provider) on the buy page.\n\
         Ctrl-C stops it (and removes {dir}).",
        dir = dir.path().display(),
        path = path.display(),
        edge = ports.edge,
        admin = ports.admin,
        admin_token = secrets.admin_token,
    );
    let result = crate::server::run(cfg, Box::new(crate::server::SignalShutdown));
    drop(dir);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_config_is_valid_for_edge_and_core() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_files(dir.path(), DemoPorts::default(), &DemoSecrets::random()).unwrap();
        let cfg = crate::config::WicketConfig::from_file(&path).unwrap();
        assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
        wicket_core::config::CoreConfig::from_file(&path).unwrap();
    }

    #[test]
    fn secrets_are_private_and_gone_when_the_demo_folder_is_dropped() {
        use std::os::unix::fs::PermissionsExt;
        let dir = DemoDir::create().unwrap();
        let path = write_files(dir.path(), DemoPorts::default(), &DemoSecrets::random()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(dir.path()), 0o700);
        for f in [path.clone(), dir.path().join("ev-42.json"), dir.path().join("site/site.css")] {
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
        let kept = dir.path().to_owned();
        drop(dir);
        assert!(!kept.exists(), "{} is left behind", kept.display());
    }

    #[test]
    fn dates_are_rfc3339() {
        let t = time_plus(0);
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'));
    }
}
