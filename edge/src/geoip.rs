//! `[edge.geoip]`: where a request comes from, and what the operator does about it.
//!
//! The operator supplies MaxMind-format databases (`.mmdb`: GeoLite2/GeoIP2 Country or City, and
//! optionally an ASN database). Each file is read whole into memory at start and again on SIGHUP
//! ([`GeoIp::reload`]): the new readers are checked, then swapped in at once (`ArcSwap`), and a bad
//! new file keeps the old readers with a log line that names it. A lookup is a walk of the file's
//! search tree and the decoding of two fields (the country's ISO code, the autonomous system
//! number), done once per decided request on the client address the edge already resolved
//! (the socket peer, or `X-Forwarded-For` only from `trusted-proxies`; IPv4-mapped IPv6 already
//! folded to IPv4). An address the databases do not place — private, loopback, not listed, or a
//! lookup error — is in the region [`UNKNOWN`], which rules may name like a country.
//!
//! Rules (`[[edge.geoip.rules]]`) match a country or an ASN and take the edge's own actions:
//! `block` (the blocklist's 403), `challenge` (the route bot check: proof of work or CAPTCHA) and
//! `limit` (the `limit_req` limiter, with one budget for the whole region or one per client).
//!
//! The regional anomaly rule (`[edge.geoip.anomaly]`) counts arrivals (decided requests, but
//! those a rule blocks) per region — the 676 two-letter codes and `unknown`, in a fixed table: no
//! memory grows with traffic — over windows of `window-seconds`. When a window closes, each region's share of it is compared
//! with its baseline (the mean share of the last `baseline-windows` windows, kept as an
//! exponential average): a region with at least `min-arrivals` and a share of at least `min-share`
//! that is above `threshold` times its baseline is abnormal, and the chosen action (`challenge`,
//! `slow`, `block`) applies to its clients for `hold-seconds` after the last abnormal window. An
//! abnormal region's baseline is not updated, so a flood does not become the new normal while it
//! lasts. The maths is [`RegionShares`], with the clock passed in.
//!
//! Metrics: `wicket_edge_geoip_arrivals{region}` (the last window's arrivals of the top
//! `metric-regions` regions, the rest summed as `other`: at most that many + 2 series),
//! `wicket_edge_geoip_abnormal_regions`, `wicket_edge_geoip_actions_total{action,source}` and
//! `wicket_edge_geoip_reloads_total{outcome}`; a trip counts in
//! `wicket_edge_anomalies_total{rule="region_share"}`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use maxminddb::Reader;
use parking_lot::Mutex;
use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use serde::{Deserialize, Serialize};

use crate::check::{ConfigIssue, check_prefix, issue};
use crate::limit::{LimitKey, LimitRule, RuleLimiter, Subject, Verdict};

/// The region of addresses no database places.
pub const UNKNOWN: &str = "unknown";

/// Largest database file the edge reads (the GeoIP2 City database is about 70 MB): a wrong path
/// to a disk image fails the check instead of filling the memory.
pub const MAX_DATABASE_BYTES: u64 = 512 << 20;

/// `[edge.geoip]`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GeoIpConfig {
    /// MaxMind-format database with countries (GeoLite2-Country, GeoIP2-City, ...), relative to
    /// the config file's folder. Required. Its `autonomous_system_number` is read too, when it has one.
    pub database: String,
    /// A second database with autonomous systems (GeoLite2-ASN). Default: none (ASNs only from
    /// `database`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asn_database: Option<String>,
    /// Regions with a series of their own in `wicket_edge_geoip_arrivals` (the largest of the last
    /// window; the rest are `other`). 1–50, default 10.
    #[serde(default = "default_metric_regions")]
    pub metric_regions: usize,
    /// Rules by country or ASN, all applied in order. Default: none.
    #[serde(default)]
    pub rules: Vec<GeoRule>,
    /// The regional anomaly rule. Default: off (arrivals are still counted for the metrics, in
    /// windows of 10 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anomaly: Option<RegionAnomalyConfig>,
}

fn default_metric_regions() -> usize {
    10
}

/// What a rule does to the requests it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GeoAction {
    /// 403, the blocklist's refusal.
    Block,
    /// The route bot check (`[edge.bot]`'s proof: PoW or CAPTCHA), as `check = "always"`.
    Challenge,
    /// The `limit_req` limiter with `rate`, `burst`, `nodelay` and `per`.
    Limit,
}

/// Who shares one budget of a `limit` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LimitPer {
    /// One budget for every client of the region together. Default.
    #[default]
    Region,
    /// One budget per client address (an IPv6 /64) in the region.
    Ip,
}

/// `[[edge.geoip.rules]]`: one rule, matching `country` or `asn`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GeoRule {
    /// ISO 3166-1 alpha-2 code (`"DE"`), or `"unknown"`: addresses the databases do not place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// Autonomous system number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asn: Option<u32>,
    /// `block`, `challenge` or `limit`.
    pub action: GeoAction,
    /// Path prefix the rule applies to. Default `/`. A `limit` rule under `/` skips the queue's
    /// paths as `[[edge.limits]]` do; `block` and `challenge` take the prefix as written.
    #[serde(default = "default_path")]
    pub path: String,
    /// `limit` only: `"<n>r/s"` or `"<n>r/m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// `limit` only: nginx `burst`. Default 0.
    #[serde(default)]
    pub burst: u32,
    /// `limit` only: nginx `nodelay`. Default false.
    #[serde(default)]
    pub nodelay: bool,
    /// `limit` only: `region` (one budget for all its clients, default) or `ip`.
    #[serde(default)]
    pub per: LimitPer,
}

fn default_path() -> String {
    "/".into()
}

/// What the anomaly rule does to an abnormal region's clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AnomalyAction {
    /// The route bot check, as a `challenge` rule.
    Challenge,
    /// `slow-rate`/`slow-burst` per client address, as a `limit` rule with `per = "ip"`.
    Slow,
    /// 403, as a `block` rule.
    Block,
}

impl AnomalyAction {
    fn label(self) -> &'static str {
        match self {
            AnomalyAction::Challenge => "challenge",
            AnomalyAction::Slow => "slow",
            AnomalyAction::Block => "block",
        }
    }
}

/// `[edge.geoip.anomaly]`: a region whose share of arrivals jumps above its recent baseline.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct RegionAnomalyConfig {
    /// Length of a window, seconds (1–3600). Default 10.
    pub window_seconds: u64,
    /// Windows the baseline averages over (1–10000); the rule acts only once this many have
    /// passed. Default 30.
    pub baseline_windows: u32,
    /// A share above this many times the baseline is a jump (1.0–1000). Default 3.
    pub threshold: f64,
    /// Smallest share of a window that can be abnormal (0–1). Default 0.1.
    pub min_share: f64,
    /// Fewest arrivals of a region in a window that can be abnormal (≥ 1). Default 100.
    pub min_arrivals: u32,
    /// `challenge`, `slow` or `block`. Default `challenge`.
    pub action: AnomalyAction,
    /// The action lasts this long after the last abnormal window, seconds (1–86400). Default 300.
    pub hold_seconds: u64,
    /// `action = "slow"`: each client's rate. Default `"1r/s"`.
    pub slow_rate: String,
    /// `action = "slow"`: each client's burst (served at once). Default 5.
    pub slow_burst: u32,
}

impl Default for RegionAnomalyConfig {
    fn default() -> Self {
        RegionAnomalyConfig {
            window_seconds: 10,
            baseline_windows: 30,
            threshold: 3.0,
            min_share: 0.1,
            min_arrivals: 100,
            action: AnomalyAction::Challenge,
            hold_seconds: 300,
            slow_rate: "1r/s".into(),
            slow_burst: 5,
        }
    }
}

impl GeoIpConfig {
    /// Adds this section's problems, each at `path` (`edge.geoip`) and its key; reads the
    /// databases (`resolve` makes their paths absolute) so that a missing, huge or corrupt file is
    /// named here.
    pub fn validate(&self, path: &str, resolve: &dyn Fn(&str) -> PathBuf, out: &mut Vec<ConfigIssue>) {
        if let Err(m) = open_database(&resolve(&self.database)) {
            out.push(issue(format!("{path}.database"), m));
        }
        if let Some(a) = &self.asn_database
            && let Err(m) = open_database(&resolve(a))
        {
            out.push(issue(format!("{path}.asn-database"), m));
        }
        if !(1..=50).contains(&self.metric_regions) {
            out.push(issue(format!("{path}.metric-regions"), "must be between 1 and 50"));
        }
        for (i, r) in self.rules.iter().enumerate() {
            r.validate(&format!("{path}.rules[{i}]"), out);
        }
        if let Some(a) = &self.anomaly {
            a.validate(&format!("{path}.anomaly"), out);
        }
    }
}

impl GeoRule {
    fn validate(&self, path: &str, out: &mut Vec<ConfigIssue>) {
        match (&self.country, self.asn) {
            (Some(_), Some(_)) => out.push(issue(path, "a rule matches a country or an asn, not both")),
            (None, None) => out.push(issue(path, "a rule needs a country (ISO code or \"unknown\") or an asn")),
            (Some(c), None) if region_slot(c).is_none() => out.push(issue(
                format!("{path}.country"),
                format!("not an ISO 3166-1 alpha-2 code in capitals (\"DE\") or \"unknown\": {c:?}"),
            )),
            (None, Some(0)) => out.push(issue(format!("{path}.asn"), "must be at least 1")),
            _ => {}
        }
        check_prefix(out, &format!("{path}.path"), &self.path);
        match (self.action, &self.rate) {
            (GeoAction::Limit, None) => out.push(issue(format!("{path}.rate"), "action = \"limit\" needs a rate (\"10r/s\")")),
            (GeoAction::Limit, Some(_)) => {
                let mut own = Vec::new();
                self.limit_rule().validate(path, true, &mut own);
                // The path was checked above.
                out.extend(own.into_iter().filter(|i| !i.path.ends_with(".path")));
            }
            (_, Some(_)) => out.push(issue(format!("{path}.rate"), "only action = \"limit\" has a rate")),
            (_, None) if self.burst != 0 || self.nodelay || self.per != LimitPer::Region => {
                out.push(issue(path, "burst, nodelay and per belong to action = \"limit\""));
            }
            _ => {}
        }
    }

    /// The `[[edge.limits]]` rule a `limit` rule runs as.
    fn limit_rule(&self) -> LimitRule {
        LimitRule {
            path: self.path.clone(),
            key: LimitKey::Ip,
            rate: self.rate.clone().unwrap_or_default(),
            burst: self.burst,
            nodelay: self.nodelay,
            delay: None,
            ipv6_prefix: None,
            ipv4_prefix: None,
        }
    }
}

impl RegionAnomalyConfig {
    fn validate(&self, path: &str, out: &mut Vec<ConfigIssue>) {
        if !(1..=3600).contains(&self.window_seconds) {
            out.push(issue(format!("{path}.window-seconds"), "must be between 1 and 3600"));
        }
        if !(1..=10_000).contains(&self.baseline_windows) {
            out.push(issue(format!("{path}.baseline-windows"), "must be between 1 and 10000"));
        }
        if !(1.0..=1000.0).contains(&self.threshold) {
            out.push(issue(format!("{path}.threshold"), "must be between 1.0 and 1000"));
        }
        if !(0.0..=1.0).contains(&self.min_share) {
            out.push(issue(format!("{path}.min-share"), "must be between 0 and 1"));
        }
        if self.min_arrivals == 0 {
            out.push(issue(format!("{path}.min-arrivals"), "must be at least 1"));
        }
        if !(1..=86_400).contains(&self.hold_seconds) {
            out.push(issue(format!("{path}.hold-seconds"), "must be between 1 and 86400"));
        }
        if let Err(m) = crate::limit::NginxRate::parse(&self.slow_rate) {
            out.push(issue(format!("{path}.slow-rate"), m));
        }
        if self.slow_burst > 1_000_000 {
            out.push(issue(format!("{path}.slow-burst"), "must be at most 1000000"));
        }
    }
}

/// Slots of the region table: `AA`..`ZZ`, then [`UNKNOWN`].
const REGIONS: usize = 26 * 26 + 1;
const UNKNOWN_SLOT: u16 = 26 * 26;

/// A region: an index into the fixed table of two-letter codes and `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region(u16);

impl Region {
    /// The region no database places.
    pub const UNKNOWN: Region = Region(UNKNOWN_SLOT);

    /// `"DE"`, or `"unknown"`.
    pub fn code(self) -> String {
        if self.0 == UNKNOWN_SLOT {
            return UNKNOWN.to_owned();
        }
        let (a, b) = (self.0 / 26, self.0 % 26);
        [b'A' + a as u8, b'A' + b as u8].iter().map(|&c| c as char).collect()
    }
}

/// The slot of a rule's `country` (`"DE"`, `"unknown"`); `None` when it is neither.
fn region_slot(code: &str) -> Option<Region> {
    if code == UNKNOWN {
        return Some(Region::UNKNOWN);
    }
    match code.as_bytes() {
        [a, b] if a.is_ascii_uppercase() && b.is_ascii_uppercase() => Some(Region(u16::from(a - b'A') * 26 + u16::from(b - b'A'))),
        _ => None,
    }
}

/// Where a client address is, as the databases say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Its country, or [`Region::UNKNOWN`].
    pub region: Region,
    /// Its autonomous system, when a database knows it.
    pub asn: Option<u32>,
}

impl Place {
    /// Nowhere known.
    pub const UNKNOWN: Place = Place { region: Region::UNKNOWN, asn: None };
}

/// The fields the edge reads of a record (borrowed from the file: no allocation per lookup).
#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    country: Option<Country<'a>>,
    #[serde(borrow)]
    registered_country: Option<Country<'a>>,
    autonomous_system_number: Option<u32>,
}

#[derive(Deserialize)]
struct Country<'a> {
    iso_code: Option<&'a str>,
}

/// The databases in use (swapped whole by a reload).
struct Databases {
    country: Reader<Vec<u8>>,
    asn: Option<Reader<Vec<u8>>>,
}

impl Databases {
    fn locate(&self, ip: IpAddr) -> Place {
        let mut place = Place::UNKNOWN;
        if let Ok(Some(r)) = self.country.lookup::<Record>(ip) {
            let iso = r.country.and_then(|c| c.iso_code).or(r.registered_country.and_then(|c| c.iso_code));
            if let Some(region) = iso.and_then(region_slot).filter(|r| *r != Region::UNKNOWN) {
                place.region = region;
            }
            place.asn = r.autonomous_system_number;
        }
        if let Some(asn) = &self.asn
            && let Ok(Some(r)) = asn.lookup::<Record>(ip)
            && r.autonomous_system_number.is_some()
        {
            place.asn = r.autonomous_system_number;
        }
        place
    }
}

/// Reads and checks one database file: its size, its metadata, a search tree that fits in the
/// file (the reader indexes the tree without bounds checks), and lookups that decode.
fn open_database(path: &Path) -> Result<Reader<Vec<u8>>, String> {
    let shown = path.display();
    let len = std::fs::metadata(path).map_err(|e| format!("cannot read {shown}: {e}"))?.len();
    if len > MAX_DATABASE_BYTES {
        return Err(format!("{shown} is {len} bytes, more than the {MAX_DATABASE_BYTES} a GeoIP database may have"));
    }
    let buf = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let shape = tree_shape(&buf).map_err(|m| format!("{shown} is not a MaxMind DB file: {m}"))?;
    let reader = Reader::from_source(buf).map_err(|e| format!("{shown} is not a MaxMind DB file: {e}"))?;
    // (An IPv4-only database answers IPv6 clients with an error: they are `unknown`.)
    let probes: &[&str] = if shape.ip_version == 4 { &["1.1.1.1", "8.8.8.8", "127.0.0.1"] } else { &["1.1.1.1", "8.8.8.8", "2001:4860::8888", "127.0.0.1"] };
    for probe in probes {
        if let Err(e) = reader.lookup::<Record>(probe.parse().expect("a literal address")) {
            return Err(format!("{shown} is corrupt: looking up {probe}: {e}"));
        }
    }
    Ok(reader)
}

/// What the metadata says of the search tree.
#[derive(Debug)]
struct TreeShape {
    ip_version: u64,
}

/// Checks the search tree the metadata describes fits before the data section (read with a small
/// decoder of our own: the reader's would index a short file out of bounds).
fn tree_shape(buf: &[u8]) -> Result<TreeShape, String> {
    const MARKER: &[u8] = b"\xab\xcd\xefMaxMind.com";
    let at = buf.windows(MARKER.len()).rposition(|w| w == MARKER).ok_or("no metadata marker")?;
    let mut d = MetaDecoder { buf: &buf[at + MARKER.len()..], pos: 0 };
    let (kind, size) = d.control()?;
    if kind != 7 {
        return Err("the metadata is not a map".into());
    }
    let (mut nodes, mut record_size, mut ip_version) = (None, None, None);
    for _ in 0..size {
        let (kind, len) = d.control()?;
        if kind != 2 {
            return Err("a metadata key is not a string".into());
        }
        let key = d.take(len)?.to_vec();
        let (kind, len) = d.control()?;
        let value = if matches!(kind, 5 | 6 | 9 | 10) { Some(d.uint(len)?) } else { d.skip(kind, len).map(|()| None)? };
        match key.as_slice() {
            b"node_count" => nodes = value,
            b"record_size" => record_size = value,
            b"ip_version" => ip_version = value,
            _ => {}
        }
    }
    let nodes = nodes.ok_or("no node_count in the metadata")?;
    let record_size = record_size.ok_or("no record_size in the metadata")?;
    let ip_version = ip_version.ok_or("no ip_version in the metadata")?;
    if !matches!(record_size, 24 | 28 | 32) {
        return Err(format!("record_size {record_size} (24, 28 or 32)"));
    }
    if !matches!(ip_version, 4 | 6) {
        return Err(format!("ip_version {ip_version} (4 or 6)"));
    }
    let tree = nodes.checked_mul(record_size).map(|b| b / 4).ok_or("node_count too large")?;
    if tree.saturating_add(16) > at as u64 {
        return Err(format!("its search tree ({nodes} nodes) is longer than the file: truncated or corrupt"));
    }
    Ok(TreeShape { ip_version })
}

/// Just enough of the MaxMind DB data format to read the metadata map.
struct MetaDecoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> MetaDecoder<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or("the metadata is cut short")?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, String> {
        if n > 8 {
            return Err("an integer longer than 8 bytes in the metadata".into());
        }
        Ok(self.take(n)?.iter().fold(0u64, |v, b| v << 8 | u64::from(*b)))
    }

    /// A field's type and size.
    fn control(&mut self) -> Result<(u8, usize), String> {
        let c = self.take(1)?[0];
        let mut kind = c >> 5;
        if kind == 0 {
            kind = self.take(1)?[0].checked_add(7).ok_or("a bad type in the metadata")?;
        }
        if kind == 1 {
            return Err("a pointer in the metadata".into());
        }
        let size = match c & 0x1f {
            s @ 0..29 => s as usize,
            29 => 29 + self.uint(1)? as usize,
            30 => 285 + self.uint(2)? as usize,
            _ => 65_821 + self.uint(3)? as usize,
        };
        Ok((kind, size))
    }

    fn skip(&mut self, kind: u8, size: usize) -> Result<(), String> {
        match kind {
            7 => {
                for _ in 0..size.saturating_mul(2) {
                    let (k, s) = self.control()?;
                    self.skip(k, s)?;
                }
            }
            11 => {
                for _ in 0..size {
                    let (k, s) = self.control()?;
                    self.skip(k, s)?;
                }
            }
            14 => {} // a boolean's value is its size
            _ => {
                self.take(size)?;
            }
        }
        Ok(())
    }
}

/// One rule, compiled.
struct CompiledRule {
    country: Option<Region>,
    asn: Option<u32>,
    path: String,
    action: Action,
}

enum Action {
    Block,
    Challenge,
    /// (Boxed: a limiter is large, the other actions are nothing.)
    Limit { limiter: Box<RuleLimiter>, per: LimitPer },
}

impl CompiledRule {
    fn matches(&self, p: Place) -> bool {
        self.country.is_some_and(|c| c == p.region) || self.asn.is_some_and(|a| p.asn == Some(a))
    }
}

/// Which GeoIP rule acted: a rule of `[[edge.geoip.rules]]`, or the regional anomaly rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A rule of `[[edge.geoip.rules]]`.
    Rule,
    /// The regional anomaly rule.
    Anomaly,
}

impl Source {
    /// The `source` label of `wicket_edge_geoip_actions_total`.
    pub fn label(self) -> &'static str {
        match self {
            Source::Rule => "rule",
            Source::Anomaly => "anomaly",
        }
    }
}

/// What the rules and the anomaly rule say of one request (before limits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GeoVerdict {
    /// Refuse with 403, for this rule.
    pub block: Option<Source>,
    /// The route bot check applies, for this rule.
    pub challenge: Option<Source>,
}

/// The GeoIP state of the edge: databases, rules, the region shares and their metrics.
pub struct GeoIp {
    dbs: ArcSwap<Databases>,
    paths: (PathBuf, Option<PathBuf>),
    rules: Vec<CompiledRule>,
    anomaly: Option<RegionAnomalyConfig>,
    /// `action = "slow"`'s per-client limiter.
    slow: Option<RuleLimiter>,
    shares: RegionShares,
    epoch: Instant,
    metric_regions: usize,
    metrics: GeoMetrics,
}

/// The metrics of [`GeoIp`].
struct GeoMetrics {
    arrivals: IntGaugeVec,
    abnormal: IntGauge,
    actions: IntCounterVec,
    reloads: IntCounterVec,
    /// `wicket_edge_anomalies_total{rule="region_share"}`.
    trips: prometheus::IntCounter,
}

impl GeoIp {
    /// Reads the databases and compiles the rules of a validated section; its metrics go into
    /// `registry`, a trip also into `anomalies` (`wicket_edge_anomalies_total`).
    pub fn new(cfg: &GeoIpConfig, resolve: &dyn Fn(&str) -> PathBuf, registry: &Registry, anomalies: &IntCounterVec) -> Result<Self, Vec<ConfigIssue>> {
        let paths = (resolve(&cfg.database), cfg.asn_database.as_deref().map(resolve));
        let dbs = load(&paths).map_err(|(key, m)| vec![issue(format!("edge.geoip.{key}"), m)])?;
        let mut rules = Vec::new();
        for (i, r) in cfg.rules.iter().enumerate() {
            let action = match r.action {
                GeoAction::Block => Action::Block,
                GeoAction::Challenge => Action::Challenge,
                GeoAction::Limit => Action::Limit {
                    limiter: RuleLimiter::new(r.limit_rule()).map(Box::new).map_err(|m| vec![issue(format!("edge.geoip.rules[{i}].rate"), m)])?,
                    per: r.per,
                },
            };
            rules.push(CompiledRule { country: r.country.as_deref().and_then(region_slot), asn: r.asn, path: r.path.clone(), action });
        }
        let slow = match &cfg.anomaly {
            Some(a) if a.action == AnomalyAction::Slow => Some(
                RuleLimiter::new(LimitRule {
                    path: "/".into(),
                    key: LimitKey::Ip,
                    rate: a.slow_rate.clone(),
                    burst: a.slow_burst,
                    nodelay: true,
                    delay: None,
                    ipv6_prefix: None,
                    ipv4_prefix: None,
                })
                .map_err(|m| vec![issue("edge.geoip.anomaly.slow-rate", m)])?,
            ),
            _ => None,
        };
        let a = cfg.anomaly.clone().unwrap_or_default();
        let shares = RegionShares::new(ShareRule {
            window_ms: a.window_seconds * 1000,
            baseline_windows: a.baseline_windows,
            threshold: a.threshold,
            min_share: a.min_share,
            min_arrivals: a.min_arrivals,
            hold_ms: a.hold_seconds * 1000,
            on: cfg.anomaly.is_some(),
        });
        let metrics = GeoMetrics {
            arrivals: IntGaugeVec::new(
                Opts::new("wicket_edge_geoip_arrivals", "Arrivals of the last GeoIP window by region (the largest regions, the rest as other)"),
                &["region"],
            )
            .expect("valid metric"),
            abnormal: IntGauge::new("wicket_edge_geoip_abnormal_regions", "Regions the regional anomaly rule acts on now").expect("valid metric"),
            actions: IntCounterVec::new(
                Opts::new("wicket_edge_geoip_actions_total", "Requests a GeoIP rule or the regional anomaly rule acted on, by action and source"),
                &["action", "source"],
            )
            .expect("valid metric"),
            reloads: IntCounterVec::new(Opts::new("wicket_edge_geoip_reloads_total", "GeoIP database reloads by outcome"), &["outcome"])
                .expect("valid metric"),
            trips: anomalies.with_label_values(&["region_share"]),
        };
        for c in [Box::new(metrics.arrivals.clone()) as Box<dyn prometheus::core::Collector>, Box::new(metrics.abnormal.clone()), Box::new(metrics.actions.clone()), Box::new(metrics.reloads.clone())] {
            // A second registration (a test building two states on one registry) changes nothing.
            let _ = registry.register(c);
        }
        Ok(GeoIp {
            dbs: ArcSwap::from_pointee(dbs),
            paths,
            rules,
            anomaly: cfg.anomaly.clone(),
            slow,
            shares,
            epoch: Instant::now(),
            metric_regions: cfg.metric_regions,
            metrics,
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Where `ip` (a resolved, canonical client address) is.
    pub fn locate(&self, ip: IpAddr) -> Place {
        self.dbs.load().locate(ip)
    }

    /// Counts an arrival from `place` (closing the window when its time has come).
    pub fn arrive(&self, place: Place) {
        if let Some(closed) = self.shares.arrive(place.region, self.now_ms()) {
            self.publish(&closed);
        }
    }

    /// Closes the window when its time has come without arrivals (the upkeep task).
    pub fn tick(&self) {
        if let Some(closed) = self.shares.roll(self.now_ms()) {
            self.publish(&closed);
        }
    }

    fn publish(&self, closed: &ClosedWindow) {
        let mut by_count: Vec<(Region, u32)> = closed.counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, c)| (Region(i as u16), *c)).collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.0.cmp(&b.0.0)));
        self.metrics.arrivals.reset();
        let other: u64 = by_count.iter().skip(self.metric_regions).map(|(_, c)| u64::from(*c)).sum();
        for (r, c) in by_count.iter().take(self.metric_regions) {
            self.metrics.arrivals.with_label_values(&[&r.code()]).set(i64::from(*c));
        }
        if other > 0 {
            self.metrics.arrivals.with_label_values(&["other"]).set(other as i64);
        }
        self.metrics.abnormal.set(closed.abnormal as i64);
        for r in &closed.tripped {
            self.metrics.trips.inc();
            tracing::warn!(region = %r.code(), action = self.anomaly.as_ref().map_or("", |a| a.action.label()), "GeoIP: a region's share of arrivals jumped above its baseline");
        }
    }

    /// The anomaly rule's action on `place` now, if its region is abnormal.
    fn anomaly_action(&self, place: Place) -> Option<AnomalyAction> {
        let a = self.anomaly.as_ref()?;
        self.shares.abnormal(place.region, self.now_ms()).then_some(a.action)
    }

    /// Whether `place` is blocked or challenged on `path`.
    pub fn verdict(&self, place: Place, path: &str) -> GeoVerdict {
        let mut v = GeoVerdict::default();
        for r in self.rules.iter().filter(|r| r.matches(place) && path.starts_with(r.path.as_str())) {
            match r.action {
                Action::Block => v.block = Some(Source::Rule),
                Action::Challenge => v.challenge = v.challenge.or(Some(Source::Rule)),
                Action::Limit { .. } => {}
            }
        }
        match self.anomaly_action(place) {
            Some(AnomalyAction::Block) => v.block = v.block.or(Some(Source::Anomaly)),
            Some(AnomalyAction::Challenge) => v.challenge = v.challenge.or(Some(Source::Anomaly)),
            _ => {}
        }
        v
    }

    /// Whether requests are counted (a `limit` rule, the anomaly rule): an nginx auth pass must not
    /// be cached then.
    pub fn counts_requests(&self) -> bool {
        self.anomaly.is_some() || self.rules.iter().any(|r| matches!(r.action, Action::Limit { .. }))
    }

    /// Whether any `limit` rule or the slow action could count a request of `place` on `path`.
    pub fn limits_apply(&self, place: Place, path: &str) -> bool {
        self.rules.iter().any(|r| matches!(&r.action, Action::Limit { limiter, .. } if r.matches(place) && limiter.applies(path, crate::room::QUEUE_PREFIX)))
            || (self.slow.is_some() && self.anomaly_action(place) == Some(AnomalyAction::Slow))
    }

    /// Counts a request of `client` (at `place`) on `path` against the `limit` rules that match
    /// and, for an abnormal region under `slow`, its per-client limit: the pacing each needs, or
    /// the refusal's `Retry-After` (and the action counted).
    pub fn check_limits(&self, place: Place, client: IpAddr, path: &str) -> Result<Vec<(&RuleLimiter, Subject)>, Duration> {
        let client = Subject::Ip(crate::identity::client_address(client));
        let mut counted: Vec<(&RuleLimiter, Subject, &'static str, Source)> = Vec::new();
        for r in &self.rules {
            if let Action::Limit { limiter, per } = &r.action
                && r.matches(place)
                && limiter.applies(path, crate::room::QUEUE_PREFIX)
            {
                let subject = match per {
                    LimitPer::Region => Subject::Id(0),
                    LimitPer::Ip => client,
                };
                counted.push((limiter, subject, "limit", Source::Rule));
            }
        }
        if let Some(slow) = &self.slow
            && slow.applies(path, crate::room::QUEUE_PREFIX)
            && self.anomaly_action(place) == Some(AnomalyAction::Slow)
        {
            counted.push((slow, client, "slow", Source::Anomaly));
        }
        let mut paced = Vec::new();
        for (limiter, subject, action, source) in counted {
            match limiter.check(&subject) {
                Verdict::Pass => {}
                Verdict::Paced => paced.push((limiter, subject)),
                Verdict::Refuse(d) => {
                    self.count(action, source);
                    return Err(d);
                }
            }
        }
        Ok(paced)
    }

    /// Counts an action taken (`wicket_edge_geoip_actions_total`).
    pub fn count(&self, action: &str, source: Source) {
        self.metrics.actions.with_label_values(&[action, source.label()]).inc();
    }

    /// Reads the databases again; on any problem the old ones stay and the problem (naming the
    /// file) is returned.
    pub fn reload(&self) -> Result<String, String> {
        match load(&self.paths) {
            Ok(dbs) => {
                let summary = describe(&dbs);
                self.dbs.store(Arc::new(dbs));
                self.metrics.reloads.with_label_values(&["ok"]).inc();
                Ok(summary)
            }
            Err((key, m)) => {
                self.metrics.reloads.with_label_values(&["failed"]).inc();
                Err(format!("edge.geoip.{key}: {m}"))
            }
        }
    }

    /// Forgets idle limiter keys.
    pub fn prune(&self) {
        for r in &self.rules {
            if let Action::Limit { limiter, .. } = &r.action {
                limiter.prune();
            }
        }
        if let Some(s) = &self.slow {
            s.prune();
        }
        self.tick();
    }

    /// The console's view (`GET /admin/geoip`): the databases, the last window by region, the
    /// abnormal regions.
    pub fn snapshot(&self) -> serde_json::Value {
        let now = self.now_ms();
        let dbs = self.dbs.load();
        let view = self.shares.view(now);
        let mut regions: Vec<serde_json::Value> = view
            .iter()
            .filter(|r| r.arrivals > 0 || r.abnormal_for_ms > 0)
            .map(|r| {
                serde_json::json!({
                    "region": r.region.code(),
                    "arrivals": r.arrivals,
                    "share": r.share,
                    "baseline": r.baseline,
                    "abnormal_seconds": r.abnormal_for_ms.div_ceil(1000),
                })
            })
            .collect();
        regions.sort_by(|a, b| b["arrivals"].as_u64().cmp(&a["arrivals"].as_u64()));
        regions.truncate(50);
        serde_json::json!({
            "databases": describe(&dbs),
            "window_seconds": self.shares.rule.window_ms / 1000,
            "windows_seen": self.shares.windows_seen(),
            "anomaly": self.anomaly,
            "rules": self.rules.len(),
            "regions": regions,
        })
    }
}

fn load(paths: &(PathBuf, Option<PathBuf>)) -> Result<Databases, (&'static str, String)> {
    let country = open_database(&paths.0).map_err(|m| ("database", m))?;
    let asn = paths.1.as_deref().map(open_database).transpose().map_err(|m| ("asn-database", m))?;
    Ok(Databases { country, asn })
}

fn describe(dbs: &Databases) -> String {
    let one = |r: &Reader<Vec<u8>>| format!("{} (built {}, {} nodes)", r.metadata.database_type, r.metadata.build_epoch, r.metadata.node_count);
    match &dbs.asn {
        Some(a) => format!("{}; {}", one(&dbs.country), one(a)),
        None => one(&dbs.country),
    }
}

/// The parameters of [`RegionShares`] (from `[edge.geoip.anomaly]`, in milliseconds).
#[derive(Debug, Clone)]
pub struct ShareRule {
    /// `window-seconds`.
    pub window_ms: u64,
    /// `baseline-windows`.
    pub baseline_windows: u32,
    /// `threshold`.
    pub threshold: f64,
    /// `min-share`.
    pub min_share: f64,
    /// `min-arrivals`.
    pub min_arrivals: u32,
    /// `hold-seconds`.
    pub hold_ms: u64,
    /// The rule acts (else arrivals are only counted).
    pub on: bool,
}

/// A closed window, for the metrics.
pub struct ClosedWindow {
    /// Arrivals by region slot.
    pub counts: Vec<u32>,
    /// Regions that became abnormal as it closed.
    pub tripped: Vec<Region>,
    /// Regions abnormal after it.
    pub abnormal: usize,
}

/// One region in the console's view.
pub struct RegionView {
    /// The region.
    pub region: Region,
    /// Its arrivals in the last closed window.
    pub arrivals: u32,
    /// Their share of that window.
    pub share: f64,
    /// Its baseline share.
    pub baseline: f64,
    /// How much longer it is abnormal (0: it is not).
    pub abnormal_for_ms: u64,
}

/// What the window roll keeps.
struct Baselines {
    /// Start of the current window, ms on the caller's clock.
    start: u64,
    /// Non-empty windows closed so far.
    seen: u64,
    /// Mean share by region.
    baseline: Vec<f64>,
    /// The last closed window's arrivals by region.
    last: Vec<u32>,
}

/// Shards of the arrival counters (threads beyond share them).
const COUNT_SHARDS: usize = 16;

/// This thread's shard of the arrival counters (threads take the next one the first time they count).
fn count_shard() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % COUNT_SHARDS;
    }
    SHARD.with(|s| *s)
}

/// Arrivals by region in windows, each region's baseline share, and which regions are abnormal:
/// the regional anomaly rule's maths, on a clock the caller passes (milliseconds).
pub struct RegionShares {
    rule: ShareRule,
    /// The current window's arrivals by region, one table per [`COUNT_SHARDS`] shard of threads:
    /// a sale's traffic mostly comes from one country, and one counter every worker thread adds
    /// to would be one cache line they all fight over (the request counters shard the same way).
    counts: Box<[AtomicU32]>,
    /// When the current window ends (the hot path's only check).
    ends: AtomicU64,
    /// Until when each region is abnormal (0: not).
    until: Box<[AtomicU64]>,
    state: Mutex<Baselines>,
}

impl RegionShares {
    /// Windows from time 0.
    pub fn new(rule: ShareRule) -> Self {
        RegionShares {
            counts: (0..REGIONS * COUNT_SHARDS).map(|_| AtomicU32::new(0)).collect(),
            ends: AtomicU64::new(rule.window_ms),
            until: (0..REGIONS).map(|_| AtomicU64::new(0)).collect(),
            state: Mutex::new(Baselines { start: 0, seen: 0, baseline: vec![0.0; REGIONS], last: vec![0; REGIONS] }),
            rule,
        }
    }

    /// Counts one arrival at `now`; the window it closed first, if any.
    pub fn arrive(&self, region: Region, now: u64) -> Option<ClosedWindow> {
        let closed = self.roll(now);
        self.counts[count_shard() * REGIONS + usize::from(region.0)].fetch_add(1, Ordering::Relaxed);
        closed
    }

    /// Whether `region` is abnormal at `now`.
    pub fn abnormal(&self, region: Region, now: u64) -> bool {
        self.until[usize::from(region.0)].load(Ordering::Relaxed) > now
    }

    /// Non-empty windows closed so far.
    pub fn windows_seen(&self) -> u64 {
        self.state.lock().seen
    }

    /// Closes the current window if `now` is past it (one caller does; the others count on).
    pub fn roll(&self, now: u64) -> Option<ClosedWindow> {
        if now < self.ends.load(Ordering::Relaxed) {
            return None;
        }
        let mut st = self.state.try_lock()?;
        let w = self.rule.window_ms;
        if now < st.start + w {
            return None; // another caller closed it meanwhile
        }
        // Arrivals counted after `now` passed the end belong to the closed window: a few
        // requests' worth, and never lost.
        let mut counts = vec![0u32; REGIONS];
        for shard in self.counts.chunks(REGIONS) {
            for (sum, c) in counts.iter_mut().zip(shard) {
                *sum = sum.saturating_add(c.swap(0, Ordering::Relaxed));
            }
        }
        // Windows without arrivals (traffic stopped) carry no shares: skipped.
        st.start = now - (now - st.start) % w;
        self.ends.store(st.start + w, Ordering::Relaxed);
        let total: u64 = counts.iter().map(|c| u64::from(*c)).sum();
        let mut tripped = Vec::new();
        if total > 0 {
            st.seen += 1;
            // The first windows' mean exactly, then an exponential average over the last N.
            let alpha = 1.0 / st.seen.min(u64::from(self.rule.baseline_windows)) as f64;
            let learned = st.seen > u64::from(self.rule.baseline_windows);
            for (i, c) in counts.iter().enumerate() {
                let share = f64::from(*c) / total as f64;
                let base = st.baseline[i];
                let jump = self.rule.on
                    && learned
                    && *c >= self.rule.min_arrivals
                    && share >= self.rule.min_share
                    && share > self.rule.threshold * base;
                let until = &self.until[i];
                if jump {
                    if until.load(Ordering::Relaxed) <= now {
                        tripped.push(Region(i as u16));
                    }
                    until.store(now + self.rule.hold_ms, Ordering::Relaxed);
                } else if until.load(Ordering::Relaxed) <= now {
                    // A flood does not teach the baseline while it is acted on.
                    st.baseline[i] = base + alpha * (share - base);
                }
            }
        }
        st.last = counts.clone();
        let abnormal = self.until.iter().filter(|u| u.load(Ordering::Relaxed) > now).count();
        Some(ClosedWindow { counts, tripped, abnormal })
    }

    /// Each region's last window, baseline and time left abnormal.
    pub fn view(&self, now: u64) -> Vec<RegionView> {
        let st = self.state.lock();
        let total: u64 = st.last.iter().map(|c| u64::from(*c)).sum::<u64>().max(1);
        (0..REGIONS)
            .map(|i| RegionView {
                region: Region(i as u16),
                arrivals: st.last[i],
                share: f64::from(st.last[i]) / total as f64,
                baseline: st.baseline[i],
                abnormal_for_ms: self.until[i].load(Ordering::Relaxed).saturating_sub(now),
            })
            .collect()
    }

    /// The baseline share of `region`.
    pub fn baseline(&self, region: Region) -> f64 {
        self.state.lock().baseline[usize::from(region.0)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> ShareRule {
        ShareRule { window_ms: 1000, baseline_windows: 4, threshold: 2.0, min_share: 0.2, min_arrivals: 10, hold_ms: 3000, on: true }
    }

    fn de() -> Region {
        region_slot("DE").unwrap()
    }
    fn fr() -> Region {
        region_slot("FR").unwrap()
    }

    /// One window at `start` with these arrivals per region, then closes it at the next window.
    fn window(s: &RegionShares, start: u64, arrivals: &[(Region, u32)]) -> ClosedWindow {
        for (r, n) in arrivals {
            for _ in 0..*n {
                assert!(s.arrive(*r, start).is_none(), "a window closes only once its time is up");
            }
        }
        s.roll(start + 1000).expect("the window closes")
    }

    #[test]
    fn regions_and_codes() {
        assert_eq!(region_slot("DE").unwrap().code(), "DE");
        assert_eq!(region_slot("unknown"), Some(Region::UNKNOWN));
        assert_eq!(Region::UNKNOWN.code(), "unknown");
        for bad in ["de", "D", "DEU", "", "D1", "UNKNOWN"] {
            assert!(region_slot(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_baseline_is_the_mean_of_the_first_windows_then_an_exponential_average() {
        let s = RegionShares::new(rule());
        // DE: 50%, 25%, 50%, 75% of four windows → mean 0.5.
        for (i, de_n) in [50u32, 25, 50, 75].into_iter().enumerate() {
            window(&s, i as u64 * 1000, &[(de(), de_n), (fr(), 100 - de_n)]);
        }
        assert!((s.baseline(de()) - 0.5).abs() < 1e-9, "{}", s.baseline(de()));
        assert!((s.baseline(fr()) - 0.5).abs() < 1e-9);
        // A fifth window at 30%: b += (0.3 - 0.5) / 4.
        window(&s, 4000, &[(de(), 30), (fr(), 70)]);
        assert!((s.baseline(de()) - 0.45).abs() < 1e-9, "{}", s.baseline(de()));
        assert_eq!(s.windows_seen(), 5);
    }

    #[test]
    fn a_jump_above_threshold_times_baseline_trips_holds_and_clears() {
        let s = RegionShares::new(rule());
        let other = region_slot("US").unwrap();
        // Learning: DE is 10% of arrivals for four windows; the rule does not act yet, even on a jump.
        for i in 0..4 {
            let c = window(&s, i * 1000, &[(de(), 10), (other, 90)]);
            assert!(c.tripped.is_empty());
        }
        // DE at 19% (< 2 × 10% + rounding): normal. Then DE at 60%: it trips.
        assert!(window(&s, 4000, &[(de(), 19), (other, 81)]).tripped.is_empty());
        let c = window(&s, 5000, &[(de(), 150), (other, 100)]);
        assert_eq!(c.tripped, vec![de()]);
        assert_eq!(c.abnormal, 1);
        assert!(s.abnormal(de(), 6000) && !s.abnormal(other, 6000));
        let frozen = s.baseline(de());
        // Still abnormal next window: held on, not tripped again, baseline not taught.
        let c = window(&s, 6000, &[(de(), 150), (other, 100)]);
        assert!(c.tripped.is_empty() && c.abnormal == 1);
        assert_eq!(s.baseline(de()), frozen);
        // Back to normal at 7000: abnormal until the hold (3 s after the last abnormal window at 7000) ends.
        window(&s, 7000, &[(de(), 10), (other, 90)]);
        assert!(s.abnormal(de(), 9999));
        assert!(!s.abnormal(de(), 10_000));
    }

    #[test]
    fn small_regions_and_few_arrivals_never_trip() {
        let s = RegionShares::new(rule());
        let us = region_slot("US").unwrap();
        for i in 0..4 {
            window(&s, i * 1000, &[(de(), 1), (fr(), 1), (us, 98)]);
        }
        // DE goes from 1% to 15%: 15× its baseline but under min-share 20%.
        assert!(window(&s, 4000, &[(de(), 15), (us, 85)]).tripped.is_empty());
        // FR is 100% of a quiet window, but with 5 arrivals (< min-arrivals 10).
        assert!(window(&s, 5000, &[(fr(), 5)]).tripped.is_empty());
        // A region never seen before, with enough arrivals and share: its baseline is 0.
        let cn = region_slot("CN").unwrap();
        assert_eq!(window(&s, 6000, &[(cn, 50), (us, 50)]).tripped, vec![cn]);
    }

    #[test]
    fn empty_windows_are_skipped_and_off_only_counts() {
        let s = RegionShares::new(ShareRule { on: false, ..rule() });
        window(&s, 0, &[(de(), 100)]);
        // Nothing for ten seconds: one roll, no window learned.
        let c = s.roll(12_000).unwrap();
        assert_eq!(c.counts.iter().sum::<u32>(), 0);
        assert_eq!(s.windows_seen(), 1);
        for i in 0..10 {
            assert!(window(&s, 12_000 + i * 1000, &[(de(), 1), (fr(), 1000)]).tripped.is_empty(), "the rule is off");
        }
    }

    #[test]
    fn metadata_problems_are_named_not_panicked_on() {
        let good = wicket_testkit::mmdb::Mmdb::new("Test").network("127.1.0.0/16", Some("DE"), Some(64500)).bytes();
        assert!(tree_shape(&good).is_ok());
        assert!(tree_shape(b"hello").unwrap_err().contains("marker"));
        // The tree cut off: the metadata says more nodes than the file has.
        let marker = good.windows(14).rposition(|w| w == b"\xab\xcd\xefMaxMind.com").unwrap();
        let cut = [&good[..10], &good[marker..]].concat();
        assert!(tree_shape(&cut).unwrap_err().contains("longer than the file"), "{:?}", tree_shape(&cut).err());
        // The metadata cut off.
        assert!(tree_shape(&good[..good.len() - 5]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.mmdb");
        std::fs::write(&path, &cut).unwrap();
        assert!(open_database(&path).unwrap_err().contains("cut.mmdb"));
        assert!(open_database(&dir.path().join("none.mmdb")).unwrap_err().contains("none.mmdb"));
    }

    #[test]
    fn lookups_of_v4_v6_and_unlisted_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("geo.mmdb");
        wicket_testkit::mmdb::Mmdb::new("Test")
            .network("127.1.0.0/16", Some("DE"), Some(64500))
            .network("127.1.2.0/24", Some("FR"), None)
            .network("2001:db8::/32", Some("JP"), Some(64501))
            .write(&path);
        let dbs = Databases { country: open_database(&path).unwrap(), asn: None };
        let at = |s: &str| dbs.locate(s.parse().unwrap());
        assert_eq!(at("127.1.0.9"), Place { region: de(), asn: Some(64500) });
        assert_eq!(at("127.1.2.9"), Place { region: fr(), asn: None }, "the narrower network wins");
        assert_eq!(at("2001:db8:1::5").region.code(), "JP");
        assert_eq!(at("127.0.0.1"), Place::UNKNOWN);
        assert_eq!(at("10.0.0.1"), Place::UNKNOWN);
        assert_eq!(at("::1"), Place::UNKNOWN);
    }

    /// A [`GeoIp`] over the test world of tests/geoip.rs, with `rules` (TOML of `[[edge.geoip.rules]]`).
    fn geoip(dir: &Path, rules: &str) -> GeoIp {
        wicket_testkit::mmdb::Mmdb::new("Test")
            .network("127.1.0.0/16", Some("DE"), Some(64500))
            .network("127.2.0.0/16", Some("FR"), Some(64501))
            .write(&dir.join("geo.mmdb"));
        let cfg: GeoIpConfig = toml::from_str(&format!("database = \"geo.mmdb\"\n{rules}")).unwrap();
        let mut problems = Vec::new();
        cfg.validate("edge.geoip", &|p| dir.join(p), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let anomalies = IntCounterVec::new(Opts::new("a", "a"), &["rule"]).unwrap();
        GeoIp::new(&cfg, &|p| dir.join(p), &Registry::new(), &anomalies).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn rules_match_by_country_or_asn_under_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let g = geoip(
            dir.path(),
            "[[rules]]\ncountry = \"FR\"\naction = \"challenge\"\npath = \"/buy\"\n\
             [[rules]]\nasn = 64500\naction = \"block\"\n\
             [[rules]]\ncountry = \"unknown\"\naction = \"block\"\npath = \"/admin-ish/\"\n",
        );
        let fr = g.locate("127.2.0.1".parse().unwrap());
        assert_eq!(g.verdict(fr, "/buy/1"), GeoVerdict { block: None, challenge: Some(Source::Rule) });
        assert_eq!(g.verdict(fr, "/"), GeoVerdict::default());
        let de = g.locate("127.1.0.1".parse().unwrap());
        assert_eq!(g.verdict(de, "/").block, Some(Source::Rule));
        let nowhere = g.locate("10.1.2.3".parse().unwrap());
        assert_eq!(nowhere, Place::UNKNOWN);
        assert_eq!(g.verdict(nowhere, "/admin-ish/x").block, Some(Source::Rule));
        assert_eq!(g.verdict(nowhere, "/"), GeoVerdict::default());
        assert!(!g.counts_requests());
    }

    #[test]
    fn a_limit_per_region_is_shared_and_per_ip_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let g = geoip(
            dir.path(),
            "[[rules]]\ncountry = \"DE\"\naction = \"limit\"\nrate = \"1r/m\"\nburst = 1\nnodelay = true\n\
             [[rules]]\ncountry = \"FR\"\naction = \"limit\"\nrate = \"1r/m\"\nnodelay = true\nper = \"ip\"\n",
        );
        assert!(g.counts_requests());
        let ask = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap();
            g.check_limits(g.locate(ip), ip, "/x").map(|p| p.len())
        };
        assert_eq!(ask("127.1.0.1"), Ok(0));
        assert_eq!(ask("127.1.0.2"), Ok(0), "DE's burst of 1: two at once, whoever asks");
        assert!(ask("127.1.0.3").is_err(), "the third of DE is refused");
        assert_eq!(ask("127.2.0.1"), Ok(0));
        assert_eq!(ask("127.2.0.2"), Ok(0), "FR counts each address apart");
        assert!(ask("127.2.0.1").is_err());
        // A rule under / leaves the queue's paths alone, as [[edge.limits]] do.
        let ip: IpAddr = "127.1.0.4".parse().unwrap();
        assert!(!g.limits_apply(g.locate(ip), "/queue/r1/status"));
    }

    #[test]
    fn a_lookup_costs_microseconds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("geo.mmdb");
        let mut db = wicket_testkit::mmdb::Mmdb::new("Test");
        for i in 0..2000u32 {
            db = db.network(&format!("{}.{}.{}.0/24", 1 + i / 65536, (i / 256) % 256, i % 256), Some("DE"), Some(64500 + i));
        }
        db.write(&path);
        let dbs = Databases { country: open_database(&path).unwrap(), asn: None };
        let n = 200_000u32;
        let t = Instant::now();
        let mut found = 0;
        for i in 0..n {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0100_0000 + (i % 2000) * 256 + 7));
            found += usize::from(dbs.locate(ip).asn.is_some());
        }
        let per = t.elapsed() / n;
        assert_eq!(found, n as usize);
        eprintln!("GeoIP lookup: {per:?} each (debug build: release is about ten times faster)");
        assert!(per < Duration::from_micros(50), "{per:?}");
    }
}
