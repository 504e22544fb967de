//! Everything the edge's services share, built once from a validated config.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::proxy::Session;
use pingora::upstreams::peer::PeerOptions;

use crate::admission::{AdmissionCheck, JwtAdmission};
use crate::anomaly::Anomaly;
use crate::blocklist::Blocklist;
use crate::bot::{BotChecks, POW_JS, POW_JS_PATH};
use crate::check::{ConfigErrors, ConfigIssue, parse_http_upstream, parse_net};
use crate::config::WicketConfig;
use crate::identity::{ClientIp, DEVICE_COOKIE, Device, DeviceIds, HeadView, Signer, UserSource};
use crate::limit::{Limits, Subject, Verdict};
use crate::metrics::Metrics;
use crate::reject::Reject;
use crate::statics::{StaticSite, prepare};

/// Prefix of the waiting room's paths (the room owns them): site-wide limits do not count them.
pub use crate::room::QUEUE_PREFIX;

/// An HTTP upstream (origin or core).
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Its name and the address requests go to now (looked up again while the edge runs).
    pub target: Arc<crate::resolve::Name>,
    /// `origin` or `core`, for metrics.
    pub name: &'static str,
    /// Timeouts, and for TLS the CAs to verify with.
    pub options: PeerOptions,
    /// `https://`: TLS with the certificate verified for `sni`.
    pub tls: bool,
    /// The host name sent as SNI and verified (TLS only).
    pub sni: String,
}

impl Upstream {
    /// Where requests go now.
    pub fn addr(&self) -> SocketAddr {
        self.target.addr()
    }
}

pub use crate::body::Timeouts;

/// The edge's shared state.
pub struct EdgeState {
    /// The config it was built from (served redacted by the admin API).
    pub config: WicketConfig,
    /// Static files by path.
    pub statics: StaticSite,
    /// The existing site.
    pub origin: Option<Upstream>,
    /// The sale core.
    pub core: Option<Upstream>,
    /// Paths sent to the core.
    pub core_prefixes: Vec<String>,
    /// The admission check.
    pub admission: Option<Arc<dyn AdmissionCheck>>,
    /// Rate limits.
    pub limits: Limits,
    /// Client IP resolution.
    pub client_ip: ClientIp,
    /// Where user ids are.
    pub users: UserSource,
    /// Device ids.
    pub devices: DeviceIds,
    /// Blocklist.
    pub blocklist: Blocklist,
    /// Anomaly rules.
    pub anomaly: Anomaly,
    /// GeoIP databases, rules and region shares (`[edge.geoip]`).
    pub geoip: Option<crate::geoip::GeoIp>,
    /// Bot checks.
    pub bot: BotChecks,
    /// Metrics.
    pub metrics: Metrics,
    /// Admin bearer token (none: the admin API refuses everything but `/healthz`).
    pub admin_token: Option<String>,
    /// `Secure` on cookies.
    pub secure_cookies: bool,
    /// `Vary` of an nginx auth pass the edge lets nginx cache (`auth-cache-seconds`): the request
    /// header the decision reads that the shipped cache key (`nginx-compat/wicket.conf`: method,
    /// original URI, client address, `X-Forwarded-For`, cookies, `Authorization`) cannot hold, the
    /// `user-header` (its name is the site's); `None` without one. nginx hashes every header a
    /// `Vary` names at every cache hit, so naming the cookies again cost a second hash of the
    /// longest header per request.
    pub auth_vary: Option<http::HeaderValue>,
    /// The HTTPS listener's certificates and acceptor, when `[edge.tls]` is set.
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// Cap on bodies the edge reads itself.
    pub max_body: usize,
    /// Idle keep-alive of client connections, seconds.
    pub keepalive: u64,
    /// Queue event streams open now, and how many may be (`max-event-streams[-per-ip]`).
    pub event_streams: Arc<crate::room::events::StreamBudget>,
    /// Client-side deadlines.
    pub timeouts: Timeouts,
    /// Retries of idempotent requests.
    pub retries: usize,
    /// Plain origin requests take the forwarded fast path ([`crate::front::forward`]).
    pub fast_forward: bool,
    /// The fast doors answer what they can (`fast-path`); else everything takes the proxy.
    pub fast_path: bool,
    /// Start time (for health).
    pub started: Instant,
    /// The waiting rooms.
    pub rooms: Arc<crate::room::Rooms>,
    /// The queue page (`[edge.queue-page]` or the built-in one).
    pub queue_page: crate::room::page::QueuePage,
}

fn errs(v: Vec<ConfigIssue>) -> ConfigErrors {
    ConfigErrors(v)
}

fn one(path: &str, message: impl Into<String>) -> ConfigErrors {
    errs(vec![ConfigIssue { path: path.into(), message: message.into() }])
}

impl EdgeState {
    /// Reads a request body the edge answers itself, within `max-body-bytes` and the body
    /// deadlines ([`crate::body::read`]).
    pub async fn read_body(&self, session: &mut Session) -> Result<Bytes, Reject> {
        crate::body::read(session, self.max_body, &self.timeouts).await
    }

    /// What the queue's endpoints use of the edge ([`crate::room::http`]).
    pub fn queue_edge(&self) -> crate::room::lent::QueueEdge<'_> {
        crate::room::lent::QueueEdge {
            rooms: &self.rooms,
            bot: &self.bot,
            queue_page: &self.queue_page,
            secure_cookies: self.secure_cookies,
            max_body: self.max_body,
            timeouts: self.timeouts,
            event_streams: &self.event_streams,
            rejects: &self.metrics.rejects,
        }
    }

    /// Validates the config and builds the state (loads static files, keys...).
    pub fn build(config: WicketConfig) -> Result<Self, ConfigErrors> {
        Self::build_with_core(config, None)
    }

    /// Like [`EdgeState::build`], with the address of a core started in this process (for
    /// `core = "embedded"`).
    pub fn build_with_core(config: WicketConfig, embedded_core: Option<SocketAddr>) -> Result<Self, ConfigErrors> {
        let issues = config.validate();
        if !issues.is_empty() {
            return Err(errs(issues));
        }
        let e = &config.edge;
        let tls = match &e.tls {
            Some(t) => Some(Arc::new(
                crate::tls::Tls::new(t.clone(), &|p| config.resolve(p)).map_err(|problems| errs(problems.into_iter().map(|m| ConfigIssue { path: "edge.tls".into(), message: m }).collect()))?,
            )),
            None => None,
        };
        let mut options = PeerOptions::new();
        options.connection_timeout = Some(Duration::from_millis(e.connect_timeout_ms));
        options.total_connection_timeout = Some(Duration::from_millis(e.connect_timeout_ms));
        options.read_timeout = Some(Duration::from_millis(e.read_timeout_ms));
        options.write_timeout = Some(Duration::from_millis(e.write_timeout_ms));
        // Below the core's default header-timeout-ms (10 s), which also closes its idle connections:
        // a pooled connection is dropped here before the core closes it under a request.
        options.idle_timeout = Some(Duration::from_secs(5));
        if let Some(ca) = &e.origin_ca_file {
            let cas = crate::tls::load_cas(&config.resolve(ca)).map_err(|m| one("edge.origin-ca-file", m))?;
            options.ca = Some(Arc::new(cas));
        }
        options.verify_cert = true;
        options.verify_hostname = true;
        let upstream = |s: &str, name: &'static str, path: &str| -> Result<Upstream, ConfigErrors> {
            let url = parse_http_upstream(s).map_err(|m| one(path, m))?;
            let target = crate::resolve::Name::lookup(&url.host, url.port).map_err(|m| one(path, m))?;
            Ok(Upstream { target, name, options: options.clone(), tls: url.tls, sni: url.host })
        };
        let origin = e.origin.as_deref().map(|o| upstream(o, "origin", "edge.origin")).transpose()?;
        let core = match embedded_core {
            Some(addr) => Some(Upstream {
                target: crate::resolve::Name::fixed(addr),
                name: "core",
                options: options.clone(),
                tls: false,
                sni: String::new(),
            }),
            None if e.core == "embedded" => None,
            None => Some(upstream(&e.core, "core", "edge.core")?),
        };

        let rules = crate::config::cache_rules(e);
        let default_cc = e.default_cache_control.clone();
        let cache_control = move |url: &str| -> String {
            rules
                .iter()
                .filter(|(p, _)| url.starts_with(p.as_str()))
                .max_by_key(|(p, _)| p.len())
                .map_or_else(|| default_cc.clone(), |(_, v)| v.clone())
        };
        let mut statics = StaticSite::new();
        if let Some(d) = &e.site_dir {
            statics.load_dir(&config.resolve(d), "/", &cache_control).map_err(|err| one("edge.site-dir", err.to_string()))?;
        }
        if let Some(d) = &e.static_dir {
            statics
                .load_dir(&config.resolve(d), &e.static_prefix, &cache_control)
                .map_err(|err| one("edge.static-dir", err.to_string()))?;
        }
        statics.insert(POW_JS_PATH, prepare("pow.js", POW_JS.as_bytes().to_vec(), "public, max-age=3600"));
        // The queue page's assets are compiled in and always served (unless `static-dir` has its
        // own): a room made later through the admin API needs them as much as one in the config.
        for (name, body) in [("queue.js", crate::room::page::QUEUE_JS), ("queue.css", crate::room::page::QUEUE_CSS)] {
            let path = format!("{}{name}", e.static_prefix);
            if statics.get(&path).is_none() {
                statics.insert(&path, prepare(name, body.as_bytes().to_vec(), "public, max-age=300"));
            }
        }

        let signer = match (&e.secret_env, &e.secret) {
            (Some(var), _) => Signer::new(std::env::var(var).unwrap_or_default().as_bytes()),
            (None, Some(s)) => Signer::new(s.as_bytes()),
            (None, None) => Signer::random(),
        };
        let admission: Option<Arc<dyn AdmissionCheck>> = match &config.tokens {
            Some(t) => Some(Arc::new(JwtAdmission::new(t, &|p| config.resolve(p)).map_err(|m| one("tokens", m))?)),
            None => None,
        };
        let limits = Limits::new(&e.limits).map_err(|m| one("edge.limits", m))?;
        let queue_page = crate::room::page::QueuePage::compile(&e.queue_page, &|p| config.resolve(p)).map_err(errs)?;
        let trusted = e.trusted_proxies.iter().filter_map(|p| parse_net(p)).collect();
        let bot = BotChecks::new(&e.bot, signer.clone(), &config.base_dir).map_err(|m| one("edge.bot", m))?;
        let backend = match &config.room_store {
            Some(store) => crate::room::state_backend::Backend::Redis(
                crate::room::redis::RedisRooms::for_store(store).map_err(|m| one("store", m))?,
            ),
            None => crate::room::state_backend::Backend::Embedded,
        };
        let metrics = Metrics::new();
        let event_streams = crate::room::events::StreamBudget::new(e.max_event_streams, e.max_event_streams_per_ip, Duration::from_secs(e.event_stream_seconds), metrics.event_streams.clone());
        let geoip = match &e.geoip {
            Some(g) => Some(crate::geoip::GeoIp::new(g, &|p| config.resolve(p), &metrics.registry, &metrics.anomalies).map_err(errs)?),
            None => None,
        };
        let rooms = Arc::new(crate::room::Rooms::new(config.rooms_config(), signer.clone(), backend).map_err(errs)?);
        Ok(EdgeState {
            statics,
            origin,
            core,
            core_prefixes: e.core_prefixes.clone(),
            admission,
            limits,
            client_ip: ClientIp::new(trusted),
            users: UserSource { header: e.user_header.clone(), cookie: e.user_cookie.clone() },
            devices: DeviceIds::new(signer),
            blocklist: Blocklist::new(&e.blocklist),
            anomaly: Anomaly::new(&e.anomaly),
            geoip,
            bot,
            metrics,
            admin_token: config.admin_token(),
            secure_cookies: e.secure_cookies.unwrap_or(e.tls.is_some()),
            auth_vary: e.user_header.as_ref().map(|h| http::HeaderValue::from_str(h).unwrap_or(http::HeaderValue::from_static("*"))),
            tls,
            max_body: e.max_body_bytes,
            keepalive: e.keepalive_seconds,
            event_streams,
            timeouts: Timeouts {
                header: Duration::from_millis(e.header_timeout_ms),
                body: Duration::from_millis(e.body_timeout_ms),
                body_min_rate: e.body_min_rate,
                client_write: Duration::from_millis(e.client_write_timeout_ms),
            },
            retries: e.retries,
            fast_forward: e.fast_forward,
            fast_path: e.fast_path,
            started: Instant::now(),
            rooms,
            queue_page,
            config,
        })
    }

    /// A `Set-Cookie` value with the edge's attributes.
    pub fn cookie(&self, name: &str, value: &str, max_age: u64) -> String {
        crate::identity::set_cookie(name, value, max_age, self.secure_cookies)
    }

    /// Who a request is: its user id, and its device (a signed cookie's id, else a fingerprint,
    /// with a fresh device cookie to set). The one rule of the proxy and the fast path.
    pub fn identify<'a, H: HeadView + ?Sized>(&self, req: &'a H, ip: IpAddr) -> Identity<'a> {
        let user = self.users.user(req);
        let device = self.devices.device(req, ip);
        let cookie = match device {
            Device::Fingerprint(_) => Some(self.cookie(DEVICE_COOKIE, &self.devices.issue().1, 400 * 86_400)),
            Device::Cookie(_) => None,
        };
        Identity { user, device, cookie }
    }

    /// Whether an identified request is refused: a blocked user or device, or the device-users
    /// rule tripping now. Only a signed device cookie is a device here: a fingerprint (IP and
    /// browser headers) is shared by everyone behind one NAT with the same browser, so it may
    /// be rate-limited but never blocked, nor counted by the device-users rule.
    pub fn identity_refused(&self, user: Option<&str>, device: &Device) -> bool {
        let device = match device {
            Device::Cookie(id) => Some(id.as_str()),
            Device::Fingerprint(_) => None,
        };
        if user.is_some_and(|u| self.blocklist.user(u)) || device.is_some_and(|d| self.blocklist.device(d)) {
            return true;
        }
        matches!((user, device), (Some(u), Some(d)) if self.device_user_trips(u, d))
    }

    /// Counts a request on `path` against every rule that applies; the pacing each needs, or
    /// the refusal (`Refuse` consumed nothing, so a second check refuses again). `user` and
    /// `device` are only read by rules keyed by them (a missing one skips the rule).
    pub fn check_limits(&self, path: &str, ip: IpAddr, user: Option<&str>, device: Option<&str>) -> Result<Vec<(usize, Subject)>, std::time::Duration> {
        let mut paced = Vec::new();
        for (i, r) in self.limits.rules.iter().enumerate() {
            if !r.applies(path, QUEUE_PREFIX) {
                continue;
            }
            let subject = match r.rule.key {
                crate::limit::LimitKey::Ip => Subject::Ip(r.rule.network(crate::identity::client_address(ip))),
                crate::limit::LimitKey::User => match user {
                    Some(u) => self.limits.hasher.subject(u),
                    None => continue,
                },
                crate::limit::LimitKey::Device => match device {
                    Some(d) => self.limits.hasher.subject(d),
                    None => continue,
                },
            };
            match r.check(&subject) {
                Verdict::Pass => {}
                Verdict::Paced => paced.push((i, subject)),
                Verdict::Refuse(retry_after) => return Err(retry_after),
            }
        }
        Ok(paced)
    }

    /// Whether any limit rule applies to `path` (an nginx auth pass for it is never cached:
    /// every request must be counted).
    pub fn limits_cover(&self, path: &str) -> bool {
        self.limits.rules.iter().any(|r| r.applies(path, QUEUE_PREFIX))
    }

    /// Whether a limit keyed by user or device applies to `path` (the identity is needed first).
    pub fn limits_need_identity(&self, path: &str) -> bool {
        self.limits.rules.iter().any(|r| r.rule.key != crate::limit::LimitKey::Ip && r.applies(path, QUEUE_PREFIX))
    }

    /// The device-users anomaly rule for one request of `user` on `device`: true when it trips
    /// now (the device is then blocked for a while and the trip counted).
    pub fn device_user_trips(&self, user: &str, device: &str) -> bool {
        if !self.anomaly.tracks_devices() {
            return false;
        }
        let crate::limit::Subject::Id(h) = self.limits.hasher.subject(user) else { return false };
        if !self.anomaly.observe_user(device, h) {
            return false;
        }
        self.blocklist.block_device_for(device, self.anomaly.block_for());
        self.metrics.anomalies.with_label_values(&[crate::anomaly::Tripped::DeviceUsers.label()]).inc();
        true
    }

    /// Periodic upkeep: prunes limiter keys, anomaly windows, expired blocks and PoW memory.
    pub fn prune(&self) {
        self.limits.prune();
        self.anomaly.prune();
        self.blocklist.prune();
        if let Some(g) = &self.geoip {
            g.prune();
        }
        self.bot.pow.prune(crate::bot::unix_now());
        if let Some(a) = &self.admission {
            a.prune();
        }
        for (i, r) in self.limits.rules.iter().enumerate() {
            let key = match r.rule.key {
                crate::limit::LimitKey::Ip => "ip",
                crate::limit::LimitKey::User => "user",
                crate::limit::LimitKey::Device => "device",
            };
            self.metrics.limiter_keys.with_label_values(&[&i.to_string(), key]).set(r.keys() as i64);
        }
    }
}

/// A request's identity ([`EdgeState::identify`]).
pub struct Identity<'a> {
    /// The site's user id, if the request carries one.
    pub user: Option<&'a str>,
    /// The device.
    pub device: Device,
    /// A fresh device cookie (`Set-Cookie` value) for a client that had none.
    pub cookie: Option<String>,
}
