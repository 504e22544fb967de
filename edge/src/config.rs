//! Configuration: the TOML the operator writes, and its validation.
//!
//! One file serves the edge and the core. The edge reads `[edge]` (strictly: unknown keys are
//! errors), `[tokens]` (leniently: the core owns some of its keys too) and `[[rooms]]` (leniently,
//! for the protected paths a room declares); every other top-level key belongs to the core and is
//! ignored here. [`WicketConfig::validate`] checks everything the edge needs at once and reports
//! every problem with its path, so `wicket check-config` and `wicket serve` say the same.
//!
//! Each part owns its section and its checks: `[[edge.limits]]` in [`crate::limit`],
//! `[edge.blocklist]` in [`crate::blocklist`], `[edge.anomaly]` in [`crate::anomaly`], `[edge.geoip]` in
//! [`crate::geoip`], `[edge.bot]` in
//! [`crate::bot`], `[[edge.protected]]` and `[tokens]` in [`crate::admission`], `[edge.tls]` in
//! [`crate::tls`], `[edge.queue-page]` in [`crate::room::page`], `[[rooms]]` in [`crate::room`] and the
//! rooms' `store` in [`crate::room::redis`]. This module composes them (the keys of `[edge]` itself,
//! the file, the paths of the problems) and is imported by none of them: what they share is in
//! [`crate::check`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wicket_core::problems::{self, Seg};

use crate::admission::{ProtectedRule, TokensConfig};
use crate::anomaly::AnomalyConfig;
use crate::blocklist::BlocklistConfig;
use crate::bot::BotConfig;
use crate::geoip::GeoIpConfig;
use crate::check::{ConfigErrors, ConfigIssue, check_prefix, issue, parse_http_upstream, parse_listen, parse_net, with_lines};
use crate::limit::LimitRule;
use crate::room::RoomsConfig;
use crate::room::page::QueuePageConfig;
use crate::room::redis::RoomStore;

/// The parts of the shared config file the edge reads.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WicketConfig {
    /// `[edge]`.
    pub edge: EdgeConfig,
    /// `[tokens]`: admission-token keys (verification only at the edge for now).
    pub tokens: Option<TokensConfig>,
    /// `[[rooms]]`, kept as raw TOML: the waiting room owns their schema. The edge only reads
    /// `id` (or `name`), `event` and `protected` to guard the room's paths.
    #[serde(skip)]
    pub rooms: Vec<toml::Value>,
    /// Top-level `admin-token`, used for the edge's admin port when `[edge]` names none.
    #[serde(skip)]
    pub shared_admin_token: Option<String>,
    /// Top-level `store` when it is a `redis://` URL or `{ cluster = [...] }`: the rooms keep
    /// their state there (edges sharing a Redis share one queue). Default (or `embedded`): in
    /// this process.
    #[serde(skip)]
    pub room_store: Option<RoomStore>,
    /// Top-level `admin-token-env`, same fallback.
    #[serde(skip)]
    pub shared_admin_token_env: Option<String>,
    /// Folder of the config file: relative paths in it are resolved against this.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The file it was read from (the embedded core reads its own keys from it).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// `[edge]`: the public proxy, its admin port, limits, bot checks and routing.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct EdgeConfig {
    /// Public listen address. Default `0.0.0.0:8080`.
    pub listen: String,
    /// Admin listen address; loopback so it is not reachable from outside unless asked.
    /// Default `127.0.0.1:9090`.
    pub admin_listen: String,
    /// Host names the admin port answers to, besides IP addresses and `localhost` (a request
    /// whose `Host` names another is refused with 421: a DNS-rebinding page cannot reach the
    /// console). Default: none.
    pub admin_hosts: Vec<String>,
    /// Bearer token of the admin port. Default: the top-level `admin-token`.
    pub admin_token: Option<String>,
    /// Environment variable holding the admin token (wins over `admin-token`).
    pub admin_token_env: Option<String>,
    /// Worker threads of the public service. Default: one per core.
    pub threads: Option<usize>,
    /// The existing site, `http://host:port`. Default: none (unrouted requests get 502).
    pub origin: Option<String>,
    /// The sale core, `http://host:port` or `embedded`. Default `http://127.0.0.1:8081`.
    pub core: String,
    /// Path prefixes sent to the core. Default `["/v1/"]`.
    pub core_prefixes: Vec<String>,
    /// Folder of Wicket's own static files (queue page, pow.js, dashboard), served from memory
    /// under `static-prefix`. Default: none.
    pub static_dir: Option<String>,
    /// URL prefix of `static-dir`. Default `/static/`.
    pub static_prefix: String,
    /// The sale's static pages, served from memory at their paths (`index.html` at `/`).
    /// Default: none.
    pub site_dir: Option<String>,
    /// `Cache-Control` of static files unless a `cache-control` rule matches.
    /// Default `public, max-age=5`: refreshes during a sale hit browser caches, not the edge.
    pub default_cache_control: String,
    /// Per path prefix `Cache-Control` of static files; the longest matching prefix wins.
    pub cache_control: Vec<CacheRule>,
    /// Upstream connect timeout in milliseconds. Default 1000.
    pub connect_timeout_ms: u64,
    /// Upstream read timeout (time to each read) in milliseconds. Default 10000.
    pub read_timeout_ms: u64,
    /// Upstream write timeout in milliseconds. Default 10000.
    pub write_timeout_ms: u64,
    /// How often the names of `core` and `origin` are looked up again, in milliseconds (100 to
    /// 3600000), and within a second after a failed connect: a recreated container, a moved Service or
    /// a rotated DNS name is followed without a restart. An answer that still has the address in use
    /// keeps it; connections to an old address drain (idle ones close within 5 s). A name must resolve
    /// at start (else a config error); IP literals are never looked up again. Default 10000.
    pub resolve_every_ms: u64,
    /// How many times an idempotent request is retried on another connection when the
    /// upstream fails before answering. Default 1.
    pub retries: usize,
    /// PEM file of the CAs that sign an `https://` origin's (or core's) certificate. Default:
    /// the system's roots.
    pub origin_ca_file: Option<String>,
    /// Forward plain `GET`/`HEAD` requests for the origin on the fast path (a pooled HTTP/1.1
    /// connection, the same checks; see docs/src/edge.md "Which requests take which path"). `false` sends
    /// every forwarded request through Pingora's proxy. Default true.
    pub fast_forward: bool,
    /// Answer files, queued visitors' status polls and refusals at the HTTP/1.1 and HTTP/2 doors
    /// themselves (the same decision, [`crate::decide`]). `false` sends every request through
    /// Pingora's proxy (slower; for comparing doors and troubleshooting). Default true.
    pub fast_path: bool,
    /// Idle keep-alive timeout of client connections, seconds. Default 60.
    pub keepalive_seconds: u64,
    /// Most queue event streams (`GET /queue/<room>/events`) open at once on this edge; another
    /// is refused (503 `unavailable`) and the queue page polls instead. Default 1000000.
    pub max_event_streams: usize,
    /// Most queue event streams open at once from one client address: a flood from one address
    /// takes no more, and fans beyond it behind one shared address (a carrier's NAT) poll their
    /// status instead. Default 1000.
    pub max_event_streams_per_ip: u32,
    /// Longest a queue event stream stays open, seconds; then it ends and the browser opens a
    /// new one (a client that never reads holds it no longer). Default 120.
    pub event_stream_seconds: u64,
    /// A request head must arrive whole within this many milliseconds of its first byte (slow
    /// heads get 408 and are closed). Default 10000.
    pub header_timeout_ms: u64,
    /// Longest pause while reading a request body, milliseconds. Default 10000.
    pub body_timeout_ms: u64,
    /// Slowest average rate a request body may arrive at, bytes per second, enforced once
    /// `body-timeout-ms` has passed since the head (0: off). Default 1024.
    pub body_min_rate: u64,
    /// Longest a write to a client may take, milliseconds (clients that stop reading are
    /// closed). Default 30000.
    pub client_write_timeout_ms: u64,
    /// Largest request body the edge itself reads (bot verification). Default 16384.
    pub max_body_bytes: usize,
    /// Request header carrying the site's signed-in user id. Default: none.
    pub user_header: Option<String>,
    /// Cookie carrying the site's signed-in user id. Default: none.
    pub user_cookie: Option<String>,
    /// Peers (IPs or CIDRs) whose `X-Forwarded-For` is believed. Default: none.
    pub trusted_proxies: Vec<String>,
    /// Seconds nginx may cache a pass of the `auth_request` endpoint (`/wicket/auth`, see
    /// nginx-compat/): a 204 that set no cookie, for a path no limit rule covers, whose admission
    /// token (if any) outlives it, carries `X-Accel-Expires` and a `Vary` naming every header the
    /// decision read. 0: never cached, every request is judged. Default 1: nginx's `auth_request`
    /// costs it more than Wicket's decision does, and an admitted fan's repeated requests would
    /// otherwise each pay it (bench/nginx-compat). A revocation, a new block or a pause reaches a
    /// cached pass within this many seconds (plus up to one: nginx counts whole seconds). At most 60.
    pub auth_cache_seconds: u64,
    /// Secret signing the `wicket_d` device cookie, the PoW challenges and bot passes.
    /// Default: random per process (devices are forgotten on restart).
    pub secret: Option<String>,
    /// Environment variable holding `secret` (wins over `secret`).
    pub secret_env: Option<String>,
    /// Mark the edge's cookies `Secure`. Default: true when `[edge.tls]` is set, else false
    /// (set it when another proxy terminates TLS in front).
    pub secure_cookies: Option<bool>,
    /// Seconds a graceful stop (SIGTERM, SIGINT) waits for in-flight requests. Default 5.
    pub shutdown_grace_seconds: u64,
    /// Seconds between prunes of limiter keys, anomaly windows and expired blocks. Default 10.
    pub prune_seconds: u64,
    /// Log format of `wicket serve` (an embedded core's lines included): `"text"` or `"json"` (JSON
    /// lines), on stderr, coloured only on a terminal. Default `"text"`.
    pub log_format: String,
    /// Rate limits, nginx `limit_req` semantics.
    pub limits: Vec<LimitRule>,
    /// Blocked IPs/CIDRs, users and devices at start.
    pub blocklist: BlocklistConfig,
    /// Anomaly rules.
    pub anomaly: AnomalyConfig,
    /// GeoIP: rules by country and network, the regional anomaly rule (`[edge.geoip]`,
    /// [`crate::geoip`]). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geoip: Option<GeoIpConfig>,
    /// Bot checks.
    pub bot: BotConfig,
    /// Paths only admission-token holders may reach (rooms add their own).
    pub protected: Vec<ProtectedRule>,
    /// HTTPS listener (`[edge.tls]`, [`crate::tls`]). Default: none.
    pub tls: Option<crate::tls::TlsConfig>,
    /// The queue page's look and words (`[edge.queue-page]`). Default: the built-in page.
    pub queue_page: QueuePageConfig,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig {
            listen: "0.0.0.0:8080".into(),
            admin_listen: "127.0.0.1:9090".into(),
            admin_hosts: Vec::new(),
            admin_token: None,
            admin_token_env: None,
            threads: None,
            origin: None,
            core: "http://127.0.0.1:8081".into(),
            core_prefixes: vec!["/v1/".into()],
            static_dir: None,
            static_prefix: "/static/".into(),
            site_dir: None,
            default_cache_control: "public, max-age=5".into(),
            cache_control: Vec::new(),
            connect_timeout_ms: 1000,
            read_timeout_ms: 10_000,
            write_timeout_ms: 10_000,
            resolve_every_ms: 10_000,
            retries: 1,
            origin_ca_file: None,
            fast_forward: true,
            fast_path: true,
            keepalive_seconds: 60,
            max_event_streams: 1_000_000,
            max_event_streams_per_ip: 1000,
            event_stream_seconds: 120,
            header_timeout_ms: 10_000,
            body_timeout_ms: 10_000,
            body_min_rate: 1024,
            client_write_timeout_ms: 30_000,
            max_body_bytes: 16 * 1024,
            user_header: None,
            user_cookie: None,
            trusted_proxies: Vec::new(),
            auth_cache_seconds: 1,
            secret: None,
            secret_env: None,
            secure_cookies: None,
            shutdown_grace_seconds: 5,
            prune_seconds: 10,
            log_format: "text".into(),
            limits: Vec::new(),
            blocklist: BlocklistConfig::default(),
            anomaly: AnomalyConfig::default(),
            geoip: None,
            bot: BotConfig::default(),
            protected: Vec::new(),
            tls: None,
            queue_page: QueuePageConfig::default(),
        }
    }
}

/// `[[edge.cache-control]]`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CacheRule {
    /// URL path prefix.
    pub path: String,
    /// `Cache-Control` value.
    pub value: String,
}

/// Whether two listen addresses take the same port: the same address, or the same port with
/// either on all interfaces.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

impl WicketConfig {
    /// Reads and parses a file; relative paths in it are resolved against its folder.
    pub fn from_file(path: &Path) -> Result<Self, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors(vec![issue(path.display().to_string(), format!("cannot read: {e}"))]))?;
        let (mut cfg, issues) = Self::parse(&text)?;
        cfg.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        cfg.source = Some(path.to_path_buf());
        cfg.with_the_rest(issues, &text)
    }

    /// Every problem of a file, each with its path (and line where the file holds the key): what
    /// reading it finds and what `validate()` finds in the rest; with the config as read (wrong
    /// keys at their defaults) unless it is not TOML at all.
    pub fn check_file(path: &Path) -> (Option<Self>, Vec<ConfigIssue>) {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => return (None, vec![issue(path.display().to_string(), format!("cannot read: {e}"))]),
        };
        let (mut cfg, mut issues) = match Self::parse(&text) {
            Ok(x) => x,
            Err(e) => return (None, e.0),
        };
        cfg.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        cfg.source = Some(path.to_path_buf());
        let more = cfg.validate().into_iter().filter(|i| !issues.iter().any(|s| problems::within(&i.path, &s.path))).collect();
        issues.extend(with_lines(&text, more));
        (Some(cfg), issues)
    }

    /// Parses TOML text: the whole file as a table, then `[edge]` strictly.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigErrors> {
        let (cfg, issues) = Self::parse(text)?;
        cfg.with_the_rest(issues, text)
    }

    /// `Ok` when the file read cleanly; else its problems and, so that one answer lists every problem,
    /// what `validate()` finds in the rest (the file read with a stand-in for each wrong or missing value,
    /// [`wicket_core::problems`]).
    fn with_the_rest(self, mut issues: Vec<ConfigIssue>, text: &str) -> Result<Self, ConfigErrors> {
        if issues.is_empty() {
            return Ok(self);
        }
        // What a check says about a value that was itself wrong (a stand-in took its place) adds nothing.
        let more = self.validate().into_iter().filter(|i| !issues.iter().any(|s| problems::within(&i.path, &s.path))).collect();
        issues.extend(with_lines(text, more));
        Err(ConfigErrors(issues))
    }

    /// The file's config with every wrong key left at its default, and the problems found reading it; `Err`
    /// only when it is not TOML at all.
    fn parse(text: &str) -> Result<(Self, Vec<ConfigIssue>), ConfigErrors> {
        let root: toml::Value =
            toml::from_str(text).map_err(|e| ConfigErrors(vec![issue("(file)", e.to_string())]))?;
        let Some(table) = root.as_table() else {
            return Err(ConfigErrors(vec![issue("(file)", "not a TOML table")]));
        };
        let mut issues = Vec::new();
        let mut cfg = WicketConfig::default();
        // Every wrong type, unknown key and missing key of a section at once, each with its path
        // and line ([`wicket_core::problems`]).
        let mut shape = Vec::new();
        if let Some(edge) = table.get("edge") {
            let (e, ps) = problems::read_toml::<EdgeConfig>(edge, &[Seg::Key("edge".into())]);
            cfg.edge = e.unwrap_or_default();
            shape.extend(ps);
        }
        if let Some(tokens) = table.get("tokens") {
            let (t, ps) = problems::read_toml::<TokensConfig>(tokens, &[Seg::Key("tokens".into())]);
            cfg.tokens = t;
            shape.extend(ps);
        }
        issues.extend(with_lines(text, shape.into_iter().map(|p| issue(p.path, p.message)).collect()));
        match table.get("rooms") {
            None => {}
            Some(toml::Value::Array(rooms)) => cfg.rooms = rooms.clone(),
            Some(_) => issues.push(issue("rooms", "must be an array of tables ([[rooms]])")),
        }
        cfg.shared_admin_token = table.get("admin-token").and_then(|v| v.as_str()).map(str::to_owned);
        cfg.shared_admin_token_env = table.get("admin-token-env").and_then(|v| v.as_str()).map(str::to_owned);
        match table.get("store") {
            None => {}
            // The core's store in this process (durable or in memory); rooms keep their state here.
            Some(toml::Value::String(s)) if s == "embedded" || s == "memory" => {}
            Some(toml::Value::String(s)) if s.starts_with("redis://") || s.starts_with("rediss://") => {
                cfg.room_store = Some(RoomStore::Url(s.clone()));
            }
            Some(toml::Value::Table(t)) if t.len() == 1 && t.contains_key("cluster") => {
                match t.get("cluster").and_then(|c| c.as_array()) {
                    Some(seeds) if !seeds.is_empty() => {
                        let mut urls = Vec::new();
                        for (i, seed) in seeds.iter().enumerate() {
                            match seed.as_str() {
                                Some(u) if u.starts_with("redis://") && url::Url::parse(u).is_ok() => urls.push(u.to_owned()),
                                _ => issues.push(issue(format!("store.cluster[{i}]"), format!("not a redis:// URL: {seed}"))),
                            }
                        }
                        cfg.room_store = Some(RoomStore::Cluster(urls));
                    }
                    _ => issues.push(issue("store.cluster", "needs at least one seed URL (redis://host:port)")),
                }
            }
            Some(other) => issues.push(issue(
                "store",
                format!("must be \"embedded\", \"memory\", a redis:// URL or {{ cluster = [\"redis://...\"] }}: {other}"),
            )),
        }
        Ok((cfg, issues))
    }

    /// `edge.log-format` (text when it is not a valid one: `validate` names it).
    pub fn log_format(&self) -> wicket_core::logging::LogFormat {
        wicket_core::logging::LogFormat::parse(&self.edge.log_format).unwrap_or_default()
    }

    /// Resolves a path from the config against the config file's folder.
    pub fn resolve(&self, p: &str) -> PathBuf {
        crate::check::resolve(&self.base_dir, p)
    }

    /// What the waiting rooms read from this file ([`crate::room::Rooms::new`]).
    pub fn rooms_config(&self) -> RoomsConfig<'_> {
        RoomsConfig { rooms: &self.rooms, tokens: self.tokens.as_ref(), edge_rules: &self.edge.protected, base_dir: &self.base_dir }
    }

    /// Every problem, with its path; empty when the edge can start with this config.
    pub fn validate(&self) -> Vec<ConfigIssue> {
        let mut out = Vec::new();
        let e = &self.edge;
        if parse_listen(&e.listen).is_none() {
            out.push(issue("edge.listen", format!("not an address like 0.0.0.0:8080: {:?}", e.listen)));
        }
        if parse_listen(&e.admin_listen).is_none() {
            out.push(issue("edge.admin-listen", format!("not an address like 127.0.0.1:9090: {:?}", e.admin_listen)));
        }
        if e.threads == Some(0) {
            out.push(issue("edge.threads", "must be at least 1"));
        }
        if wicket_core::logging::LogFormat::parse(&e.log_format).is_none() {
            out.push(issue(
                "edge.log-format",
                format!("must be {}, not {:?}", wicket_core::logging::LogFormat::EXPECTED, e.log_format),
            ));
        }
        if let Some(ca) = &e.origin_ca_file
            && let Err(m) = crate::tls::load_cas(&self.resolve(ca))
        {
            out.push(issue("edge.origin-ca-file", m));
        }
        if let Err(issues) = crate::room::page::QueuePage::compile(&e.queue_page, &|p| self.resolve(p)) {
            out.extend(issues);
        }
        if let Some(tls) = &e.tls {
            out.extend(tls.validate(&|p| self.resolve(p)));
        }
        // Each listener its own port: a second bind of a port fails inside Pingora, and the
        // first listener (perhaps the admin API) then answers on the other's address.
        let tls_listen = e.tls.as_ref().map(|t| &t.listen);
        let listeners: Vec<(&str, SocketAddr)> =
            [("edge.listen", Some(&e.listen)), ("edge.admin-listen", Some(&e.admin_listen)), ("edge.tls.listen", tls_listen)]
                .into_iter()
                .filter_map(|(key, addr)| Some((key, parse_listen(addr?)?)))
                .collect();
        for (i, (key, addr)) in listeners.iter().enumerate() {
            if let Some((other, at)) = listeners[..i].iter().find(|(_, a)| overlaps(*a, *addr)) {
                out.push(issue(*key, format!("{addr} overlaps {other} ({at}): each listener needs a port of its own")));
            }
        }
        if let Some(origin) = &e.origin
            && let Err(m) = parse_http_upstream(origin)
        {
            out.push(issue("edge.origin", m));
        }
        if e.core != "embedded"
            && let Err(m) = parse_http_upstream(&e.core)
        {
            out.push(issue("edge.core", m));
        }
        for (i, p) in e.core_prefixes.iter().enumerate() {
            check_prefix(&mut out, &format!("edge.core-prefixes[{i}]"), p);
        }
        check_prefix(&mut out, "edge.static-prefix", &e.static_prefix);
        for (key, dir) in [("edge.static-dir", &e.static_dir), ("edge.site-dir", &e.site_dir)] {
            if let Some(d) = dir
                && !self.resolve(d).is_dir()
            {
                out.push(issue(key, format!("not a folder: {}", self.resolve(d).display())));
            }
        }
        if http::HeaderValue::from_str(&e.default_cache_control).is_err() {
            out.push(issue("edge.default-cache-control", "not a valid header value"));
        }
        for (i, r) in e.cache_control.iter().enumerate() {
            check_prefix(&mut out, &format!("edge.cache-control[{i}].path"), &r.path);
            if http::HeaderValue::from_str(&r.value).is_err() {
                out.push(issue(format!("edge.cache-control[{i}].value"), "not a valid header value"));
            }
        }
        for (key, v) in [
            ("edge.connect-timeout-ms", e.connect_timeout_ms),
            ("edge.read-timeout-ms", e.read_timeout_ms),
            ("edge.write-timeout-ms", e.write_timeout_ms),
            ("edge.header-timeout-ms", e.header_timeout_ms),
            ("edge.body-timeout-ms", e.body_timeout_ms),
            ("edge.client-write-timeout-ms", e.client_write_timeout_ms),
        ] {
            if v == 0 || v > 600_000 {
                out.push(issue(key, "must be between 1 and 600000"));
            }
        }
        if !(100..=3_600_000).contains(&e.resolve_every_ms) {
            out.push(issue("edge.resolve-every-ms", "must be between 100 and 3600000"));
        }
        if e.body_min_rate > 1 << 30 {
            out.push(issue("edge.body-min-rate", "must be at most 1073741824 (bytes per second; 0 turns it off)"));
        }
        if e.retries > 5 {
            out.push(issue("edge.retries", "must be at most 5"));
        }
        if e.keepalive_seconds == 0 || e.keepalive_seconds > 3600 {
            out.push(issue("edge.keepalive-seconds", "must be between 1 and 3600"));
        }
        if e.max_event_streams > 10_000_000 {
            out.push(issue("edge.max-event-streams", "must be at most 10000000 (0 refuses every event stream: fans poll)"));
        }
        if e.event_stream_seconds < 2 || e.event_stream_seconds > 3600 {
            out.push(issue("edge.event-stream-seconds", "must be between 2 and 3600"));
        }
        if e.max_event_streams_per_ip > 10_000_000 {
            out.push(issue("edge.max-event-streams-per-ip", "must be at most 10000000"));
        }
        if e.max_body_bytes == 0 || e.max_body_bytes > 1 << 20 {
            out.push(issue("edge.max-body-bytes", "must be between 1 and 1048576"));
        }
        if let Some(h) = &e.user_header
            && http::HeaderName::from_bytes(h.as_bytes()).is_err()
        {
            out.push(issue("edge.user-header", "not a valid header name"));
        }
        if let Some(c) = &e.user_cookie
            && (c.is_empty() || !c.bytes().all(is_cookie_name_byte))
        {
            out.push(issue("edge.user-cookie", "not a valid cookie name"));
        }
        for (i, p) in e.trusted_proxies.iter().enumerate() {
            if parse_net(p).is_none() {
                out.push(issue(format!("edge.trusted-proxies[{i}]"), format!("not an IP or CIDR: {p:?}")));
            }
        }
        for (i, h) in e.admin_hosts.iter().enumerate() {
            let ok = !h.is_empty() && h.len() <= 253 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
            if !ok {
                out.push(issue(format!("edge.admin-hosts[{i}]"), format!("not a host name (letters, digits, '.', '-'; no port): {h:?}")));
            }
        }
        if e.auth_cache_seconds > 60 {
            out.push(issue("edge.auth-cache-seconds", "must be between 0 and 60"));
        }
        if let Some(var) = &e.secret_env
            && std::env::var(var).map(|v| v.is_empty()).unwrap_or(true)
        {
            out.push(issue("edge.secret-env", format!("environment variable {var} is not set")));
        }
        if let Some(s) = &e.secret
            && s.len() < 16
        {
            out.push(issue("edge.secret", "must be at least 16 characters"));
        }
        if e.prune_seconds == 0 || e.prune_seconds > 3600 {
            out.push(issue("edge.prune-seconds", "must be between 1 and 3600"));
        }
        if e.shutdown_grace_seconds == 0 || e.shutdown_grace_seconds > 300 {
            out.push(issue("edge.shutdown-grace-seconds", "must be between 1 and 300"));
        }
        match (&e.admin_token, &e.admin_token_env, &self.shared_admin_token, &self.shared_admin_token_env) {
            (_, Some(var), _, _) if std::env::var(var).map(|v| v.is_empty()).unwrap_or(true) => {
                out.push(issue("edge.admin-token-env", format!("environment variable {var} is not set")));
            }
            (Some(t), None, _, _) if t.len() < 16 => {
                out.push(issue("edge.admin-token", "must be at least 16 characters"));
            }
            _ => {}
        }
        let user_known = e.user_header.is_some() || e.user_cookie.is_some();
        for (i, l) in e.limits.iter().enumerate() {
            l.validate(&format!("edge.limits[{i}]"), user_known, &mut out);
        }
        e.blocklist.validate("edge.blocklist", &mut out);
        e.anomaly.validate("edge.anomaly", &mut out);
        if let Some(g) = &e.geoip {
            g.validate("edge.geoip", &|f| self.resolve(f), &mut out);
        }
        e.bot.validate("edge.bot", &|f| self.resolve(f), &mut out);
        for (i, p) in e.protected.iter().enumerate() {
            p.validate(&format!("edge.protected[{i}]"), &mut out);
        }
        if !self.protected_rules().is_empty() && self.tokens.is_none() {
            out.push(issue("tokens", "protected paths need [tokens] to verify admission tokens"));
        }
        if let Some(t) = &self.tokens {
            t.validate("tokens", &|p| self.resolve(p), &mut out);
        }
        for (i, room) in self.rooms.iter().enumerate() {
            if !room.is_table() {
                out.push(issue(format!("rooms[{i}]"), "must be a table"));
            }
        }
        out.extend(crate::room::validate(&self.rooms, self.tokens.as_ref()));
        out
    }

    /// Protected paths from `[[edge.protected]]` and from rooms' `protected` lists.
    pub fn protected_rules(&self) -> Vec<ProtectedRule> {
        let mut rules = self.edge.protected.clone();
        for room in &self.rooms {
            let Some(t) = room.as_table() else { continue };
            let Some(id) = t.get("id").or_else(|| t.get("name")).and_then(|v| v.as_str()) else { continue };
            let event = t.get("event").and_then(|v| v.as_str()).map(str::to_owned);
            if let Some(paths) = t.get("protected").and_then(|v| v.as_array()) {
                for p in paths.iter().filter_map(|p| p.as_str()) {
                    rules.push(ProtectedRule { path: p.to_owned(), room: id.to_owned(), event: event.clone() });
                }
            }
        }
        rules
    }

    /// The admin bearer token, if one is configured.
    pub fn admin_token(&self) -> Option<String> {
        let e = &self.edge;
        if let Some(var) = &e.admin_token_env {
            return std::env::var(var).ok().filter(|v| !v.is_empty());
        }
        if let Some(t) = &e.admin_token {
            return Some(t.clone());
        }
        if let Some(var) = &self.shared_admin_token_env
            && let Ok(v) = std::env::var(var)
            && !v.is_empty()
        {
            return Some(v);
        }
        self.shared_admin_token.clone()
    }

    /// The config as JSON with every secret replaced by `"<redacted>"`.
    pub fn redacted_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        redact(&mut v);
        v
    }
}

fn redact(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                let secret = matches!(k.as_str(), "secret" | "admin-token") && !val.is_null();
                if secret {
                    *val = serde_json::Value::String("<redacted>".into());
                } else {
                    redact(val);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// Problems of the core's part of a file (for `edge.core = "embedded"`), each with its path.
pub fn embedded_core_issues(path: &std::path::Path) -> Vec<ConfigIssue> {
    use wicket_core::config::{ConfigError, CoreConfig};
    match CoreConfig::from_file(path) {
        // The same refusal as at start (server::EmbeddedCore), so check-config says it first.
        Ok(c) if c.tls.is_some() => vec![ConfigIssue {
            path: "tls".into(),
            message: "an embedded core (edge.core = \"embedded\") is reached over loopback in plain HTTP: remove [tls], \
                      or run the core on its own and set edge.core = \"https://host:port\""
                .into(),
        }],
        Ok(_) => Vec::new(),
        Err(ConfigError::Invalid(errs)) => errs.into_iter().map(|e| ConfigIssue { path: e.path, message: e.message }).collect(),
        Err(e) => vec![ConfigIssue { path: "(core)".into(), message: e.to_string() }],
    }
}

fn is_cookie_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Cache rules as a map for quick longest-prefix lookup at load time.
pub fn cache_rules(e: &EdgeConfig) -> BTreeMap<String, String> {
    e.cache_control.iter().map(|r| (r.path.clone(), r.value.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let cfg = WicketConfig::from_toml_str(
            r#"
            listen = "127.0.0.1:8081"
            store = "embedded"
            [payment]
            callback-secret = "x"
            [edge]
            listen = "nope"
            origin = "https://example.invalid"
            auth-cache-seconds = 61
            [[edge.limits]]
            path = "/"
            key = "ip"
            rate = "10r/h"
            [[edge.limits]]
            path = "x"
            key = "user"
            rate = "1r/s"
            "#,
        )
        .unwrap();
        let paths: Vec<_> = cfg.validate().into_iter().map(|i| i.path).collect();
        for want in ["edge.listen", "edge.origin", "edge.auth-cache-seconds", "edge.limits[0].rate", "edge.limits[1].path", "edge.limits[1].key"]
        {
            assert!(paths.iter().any(|p| p == want), "missing {want} in {paths:?}");
        }
    }

    /// `resolve-every-ms` outside 100..=3600000, or a name that does not resolve at start: refused by key.
    #[test]
    fn upstream_names_and_their_lookup_interval_are_checked() {
        let issues = |edge: &str| -> Vec<String> {
            let cfg = WicketConfig::from_toml_str(&format!("[edge]\nsecret = \"sixteen-chars-at-least\"\n{edge}")).unwrap();
            cfg.validate().into_iter().map(|i| format!("{}: {}", i.path, i.message)).collect()
        };
        for bad in ["0", "99", "3600001"] {
            let found = issues(&format!("resolve-every-ms = {bad}\n"));
            assert!(found.contains(&"edge.resolve-every-ms: must be between 100 and 3600000".to_string()), "{bad}: {found:?}");
        }
        assert!(!issues("resolve-every-ms = 100\n").iter().any(|i| i.starts_with("edge.resolve-every-ms")));
        let found = issues("origin = \"http://no-such-host.invalid:80\"\n");
        assert!(found.iter().any(|i| i.starts_with("edge.origin: cannot resolve no-such-host.invalid:80")), "{found:?}");
    }

    /// Two listeners on one port: the second bind would fail inside Pingora and the first (the
    /// admin API, say) answer on the other's address. Refused by name, before anything starts.
    #[test]
    fn listeners_that_share_a_port_are_refused() {
        let check = |edge: &str| -> Vec<String> {
            let cfg = WicketConfig::from_toml_str(&format!("[edge]\nsecret = \"sixteen-chars-at-least\"\n{edge}")).unwrap();
            cfg.validate().into_iter().filter(|i| i.message.contains("overlaps")).map(|i| format!("{}: {}", i.path, i.message)).collect()
        };
        let tls = "[edge.tls]\nlisten = \"{}\"\n[[edge.tls.certs]]\ncert-file = \"c.pem\"\nkey-file = \"k.pem\"\n";
        let found = check("listen = \"0.0.0.0:8080\"\nadmin-listen = \"127.0.0.1:8080\"\n");
        assert_eq!(found, ["edge.admin-listen: 127.0.0.1:8080 overlaps edge.listen (0.0.0.0:8080): each listener needs a port of its own"]);
        let found = check(&format!("listen = \"127.0.0.1:8080\"\nadmin-listen = \"127.0.0.1:9090\"\n{}", tls.replace("{}", "[::]:9090")));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("edge.tls.listen: [::]:9090 overlaps edge.admin-listen"), "{found:?}");
        // The same port on two addresses, or other ports: fine.
        assert!(check("listen = \"127.0.0.1:8080\"\nadmin-listen = \"127.0.0.2:8080\"\n").is_empty());
        let found = check(&format!("listen = \"0.0.0.0:8080\"\nadmin-listen = \"127.0.0.1:9090\"\n{}", tls.replace("{}", "0.0.0.0:8443")));
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn admin_host_names_are_names_without_ports() {
        let paths = |hosts: &str| -> Vec<String> {
            let cfg = WicketConfig::from_toml_str(&format!("[edge]\nsecret = \"sixteen-chars-at-least\"\nadmin-hosts = {hosts}\n")).unwrap();
            cfg.validate().into_iter().filter(|i| i.path.starts_with("edge.admin-hosts")).map(|i| i.path).collect()
        };
        assert!(paths(r#"["wicket-admin.internal", "admin-1"]"#).is_empty());
        let long = "a".repeat(254);
        let bad = format!(r#"["ok.internal", "admin:9090", "", "a b", "x/y", "*.internal", "{long}"]"#);
        assert_eq!(paths(&bad), ["edge.admin-hosts[1]", "edge.admin-hosts[2]", "edge.admin-hosts[3]", "edge.admin-hosts[4]", "edge.admin-hosts[5]", "edge.admin-hosts[6]"]);
    }

    #[test]
    fn queue_page_problems_are_config_errors_with_their_paths() {
        let cfg = WicketConfig::from_toml_str(
            "[edge.queue-page]\ntemplate = \"no-such-template.html\"\n[edge.queue-page.colours]\naccent = \"blue\"\n\
             [edge.queue-page.text.en]\nrate_many = \"{x}\"\n",
        )
        .unwrap();
        let paths: Vec<_> = cfg.validate().into_iter().map(|i| i.path).collect();
        for want in ["edge.queue-page.template", "edge.queue-page.colours.accent", "edge.queue-page.text.en.rate_many"] {
            assert!(paths.iter().any(|p| p == want), "missing {want} in {paths:?}");
        }
        let err = WicketConfig::from_toml_str("[edge.queue-page.colours]\nacent = \"#fff\"\n").unwrap_err();
        assert!(err.to_string().contains("acent"), "{err}");
    }

    #[test]
    fn captcha_settings_are_checked_per_provider() {
        let problems = |captcha: &str| {
            let cfg = WicketConfig::from_toml_str(&format!("[edge.bot]\nproof = \"captcha\"\n[edge.bot.captcha]\nsecret = \"s\"\n{captcha}"))
                .unwrap();
            cfg.validate().into_iter().map(|i| (i.path, i.message)).collect::<Vec<_>>()
        };
        assert!(problems("provider = \"turnstile\"").is_empty(), "the provider's own URL by default");
        let p = problems("");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "edge.bot.captcha.verify-url");
        assert_eq!(problems("provider = \"geetest\"")[0].0, "edge.bot.captcha.site-key");
        assert_eq!(problems("provider = \"geetest\"\nsite-key = \"a b\"")[0].0, "edge.bot.captcha.site-key");
        assert!(problems("provider = \"geetest\"\nsite-key = \"0123abcd\"").is_empty());
        assert_eq!(problems("provider = \"recaptcha\"\nscore-threshold = 1.5")[0].0, "edge.bot.captcha.score-threshold");
        assert_eq!(problems("provider = \"hcaptcha\"\nscore-threshold = 0.5")[0].0, "edge.bot.captcha.score-threshold");
        assert_eq!(problems("provider = \"turnstile\"\nca-file = \"/no/such/ca.pem\"")[0].0, "edge.bot.captcha.ca-file");
        assert_eq!(problems("verify-url = \"ftp://x\"")[0].0, "edge.bot.captcha.verify-url");
        assert!(WicketConfig::from_toml_str("[edge.bot.captcha]\nprovider = \"recaptchaa\"\n").is_err());
    }

    /// Type, missing and rule problems in one pass (issue #25): the limit without `path` and with a
    /// wrong `key` still has its `rate` checked, and `listen` is checked beside them.
    #[test]
    fn type_missing_and_rule_problems_come_in_one_answer() {
        let err = WicketConfig::from_toml_str(
            "[edge]\nlisten = \"nowhere\"\n[[edge.limits]]\nkey = \"face\"\nrate = \"ten per second\"\n",
        )
        .unwrap_err();
        let mut got: Vec<(&str, &str)> = err.0.iter().map(|i| (i.path.as_str(), i.message.as_str())).collect();
        got.sort();
        assert_eq!(got.len(), 4, "{got:#?}");
        let want = [
            ("edge.limits[0].key", "unknown variant `face`, expected one of `ip`, `user`, `device`"),
            ("edge.limits[0].path", "missing field `path`"),
            ("edge.limits[0].rate", "rate must look like \"10r/s\" or \"30r/m\": \"ten per second\""),
            ("edge.listen", "not an address like 0.0.0.0:8080: \"nowhere\""),
        ];
        for ((path, message), (want_path, want_message)) in got.iter().zip(want) {
            assert_eq!(*path, want_path, "{got:#?}");
            assert!(message.starts_with(want_message), "{path}: {message:?} does not start with {want_message:?}");
        }
    }

    #[test]
    fn unknown_edge_keys_are_errors() {
        let err = WicketConfig::from_toml_str("[edge]\nlisten = \"0.0.0.0:1\"\nlissen = 1\n").unwrap_err();
        assert!(err.to_string().contains("lissen"), "{err}");
    }

    #[test]
    fn core_keys_are_ignored() {
        let cfg = WicketConfig::from_toml_str(
            "listen = \"x\"\nadmin-token = \"0123456789abcdef0\"\nstore = { cluster = [\"redis://127.0.0.1:7000\"] }\n[core]\nfoo = 1\n[payment]\nx = 1\n",
        )
        .unwrap();
        assert!(cfg.validate().is_empty(), "{:?}", cfg.validate());
        assert_eq!(cfg.admin_token().as_deref(), Some("0123456789abcdef0"));
        // The rooms follow the shared `store`, a Cluster included.
        assert_eq!(cfg.room_store, Some(RoomStore::Cluster(vec!["redis://127.0.0.1:7000".into()])));
    }

    #[test]
    fn a_store_the_rooms_cannot_use_is_an_error_with_its_path() {
        for (text, path) in [
            ("store = { cluster = [] }", "store.cluster"),
            ("store = { cluster = [\"127.0.0.1:7000\"] }", "store.cluster[0]"),
            ("store = { seeds = [\"redis://x:1\"] }", "store"),
            ("store = \"postgres://x\"", "store"),
        ] {
            let err = WicketConfig::from_toml_str(text).unwrap_err();
            assert!(err.0.iter().any(|i| i.path == path), "{text}: {err}");
        }
        let cfg = WicketConfig::from_toml_str("store = \"redis://127.0.0.1:6379/0\"").unwrap();
        assert_eq!(cfg.room_store, Some(RoomStore::Url("redis://127.0.0.1:6379/0".into())));
        assert_eq!(WicketConfig::from_toml_str("store = \"embedded\"").unwrap().room_store, None);
    }

    #[test]
    fn secrets_are_redacted() {
        let cfg =
            WicketConfig::from_toml_str("[edge]\nadmin-token = \"supersecretsupersecret\"\nsecret = \"abcdefghijklmnopq\"\n")
                .unwrap();
        let s = cfg.redacted_json().to_string();
        assert!(!s.contains("supersecret") && !s.contains("abcdefghijklmnopq"), "{s}");
    }
}
