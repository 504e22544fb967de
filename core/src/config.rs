//! The core's configuration: TOML, kebab-case, unknown keys refused, every default documented.
//!
//! One file may serve both the edge and the core (docs/src/api.md "Config"): the core reads its own keys and leaves
//! `[edge]` and `[[rooms]]` to the edge, which checks them just as strictly. `validate()` returns every
//! problem with its path, so an operator fixes a file in one pass.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::FieldError;
use crate::store::redis::{DEFAULT_WAIT_TIMEOUT_MS, WaitReplicas, WaitSettings};
/// `[tls]`'s settings live beside the listener that uses them ([`crate::tls`]).
pub use crate::tls::TlsConfig;

/// The whole file as the core sees it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CoreConfig {
    /// Where the core's HTTP API listens. Default `127.0.0.1:8081`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Bearer token of admin calls. Give this or `admin-token-env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<String>,
    /// Name of an environment variable that holds the admin token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token_env: Option<String>,
    /// `"embedded"` (default: durable, in `data-dir`), `"memory"` (in-process, lost at exit: tests and demos),
    /// `"redis://host:port/db"`, or `{ cluster = ["redis://...", ...] }`.
    #[serde(default)]
    pub store: StoreConfig,
    /// The Redis store's durability settings (`[redis]`): what every acknowledged change waits for.
    #[serde(default)]
    pub redis: RedisConfig,
    /// Where the embedded store keeps its journal and snapshots. Relative to the config file's folder; default
    /// `wicket-data` in the working directory. One process at a time (a lock file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Embedded store: below this many MB free on the data dir's file system, new holds and event changes are
    /// refused (503) while payments, cancels and expiries go on using the rest. Default 64.
    #[serde(default = "default_reserve_mb")]
    pub disk_reserve_mb: u64,
    /// Embedded store: a snapshot is written and the journal restarted each time the journal grows past this
    /// many MB. 1..=65536, default 64.
    #[serde(default = "default_snapshot_mb")]
    pub snapshot_every_mb: u64,
    #[serde(default)]
    pub payment: PaymentConfig,
    #[serde(default)]
    pub tokens: TokensConfig,
    #[serde(default)]
    pub core: CoreTuning,
    /// `[tls]`: the API over HTTPS (an edge and a core on different hosts). Default: none, plain HTTP (keep
    /// the core on a private network then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Event bodies (JSON files, docs/src/api.md "Event body") put at start-up, each under its file stem as the
    /// event id (`examples/ev-42.json` → `ev-42`). Paths are relative to the config file.
    #[serde(default)]
    pub event_files: Vec<PathBuf>,
    /// The edge's section: checked by the edge, ignored here.
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub edge: Option<toml::Value>,
    /// The edge's rooms: checked by the edge, ignored here.
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub rooms: Option<toml::Value>,
}

fn default_reserve_mb() -> u64 {
    64
}

fn default_snapshot_mb() -> u64 {
    64
}

/// The data dir when the config names none: `wicket-data` in the working directory.
pub const DEFAULT_DATA_DIR: &str = "wicket-data";

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8081))
}

/// Where sale state lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum StoreConfig {
    /// `"embedded"`, `"memory"` or a `redis://` URL.
    Url(String),
    /// A Redis Cluster seed list.
    Cluster {
        cluster: Vec<String>,
    },
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig::Url("embedded".into())
    }
}

/// `[redis]`: settings of the Redis store (`store = "redis://..."` or `{ cluster = [...] }`). A separate
/// table rather than keys inside `store`, so `store` keeps the two forms the edge reads from a shared file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RedisConfig {
    /// After every change the core acknowledges, wait until this many replicas have it (`WAIT`), on the
    /// connection (and so the master) that made it. 0..=16 (0: off, replication is asynchronous), or
    /// `"auto"` (default): 1 when the store has replicas when the core connects (or once one connects
    /// later), else 0 ([`WaitReplicas::Auto`]).
    #[serde(default)]
    pub wait_replicas: WaitReplicas,
    /// After every change the core acknowledges, wait until the master's AOF has it on disk (`WAITAOF`,
    /// Redis ≥ 7.2 with `appendonly yes`); with `wait-replicas`, until that many replicas have it in their
    /// AOF. Default false.
    #[serde(default)]
    pub wait_aof: bool,
    /// Longest one wait may take; a change not confirmed in time is answered 503 `durability_timeout` (it is
    /// applied on the master: a retry with the same idempotency key answers with its order). 1..=1000,
    /// default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_timeout_ms: Option<u64>,
}

impl RedisConfig {
    /// What the Redis store is asked to wait for; it resolves `"auto"` when it connects.
    pub fn wait_settings(&self) -> WaitSettings {
        WaitSettings {
            replicas: self.wait_replicas,
            aof: self.wait_aof,
            timeout: std::time::Duration::from_millis(self.wait_timeout_ms.unwrap_or(DEFAULT_WAIT_TIMEOUT_MS)),
        }
    }
}

/// Payment provider settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PaymentConfig {
    /// HMAC-SHA256 secret of `Wicket-Signature` on callbacks. Give this or `callback-secret-env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_secret: Option<String>,
    /// Environment variable holding the callback secret (instead of `callback-secret`, not with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_secret_env: Option<String>,
    /// The provider's status query (`GET <url>?order_id=...`); without it the sweeper closes expired holds
    /// without asking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_url: Option<String>,
    /// Timeout of one status query. Default 2000 ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_timeout_ms: Option<u64>,
    /// How long past its deadline a hold whose payment status is unknown is kept (and asked about again)
    /// before it is closed anyway. Default 600 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_grace_seconds: Option<u64>,
    /// Largest |now − t| of a callback signature. Default 300 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_tolerance_seconds: Option<u64>,
}

impl PaymentConfig {
    pub fn query_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.query_timeout_ms.unwrap_or(2000))
    }
    pub fn unknown_grace_ms(&self) -> i64 {
        self.unknown_grace_seconds.unwrap_or(600) as i64 * 1000
    }
    pub fn tolerance_seconds(&self) -> u64 {
        self.signature_tolerance_seconds.unwrap_or(300)
    }
}

/// Admission-token keys (docs/src/api.md "Admission token").
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TokensConfig {
    /// Expected `iss`. Default `wicket`.
    #[serde(default = "default_issuer")]
    pub issuer: String,
    /// The key new tokens are signed with (edge; and `wicket-core mint-token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_kid: Option<String>,
    /// Leeway on `nbf`/`exp`, seconds, at most 10. Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leeway_seconds: Option<u64>,
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
}

/// Adds the line and column of each error's key in `text`, where the text holds it.
fn located(text: &str, errs: Vec<FieldError>) -> Vec<FieldError> {
    let ps = errs.into_iter().map(|e| crate::problems::Problem { path: e.path, message: e.message }).collect();
    crate::problems::with_lines(text, ps).into_iter().map(|p| FieldError { path: p.path, message: p.message }).collect()
}

impl Default for TokensConfig {
    /// A file without `[tokens]` has the same defaults as one with an empty `[tokens]`.
    fn default() -> Self {
        TokensConfig { issuer: default_issuer(), signing_kid: None, leeway_seconds: None, keys: Vec::new() }
    }
}

/// `tokens.issuer` when the file gives none (the edge uses the same).
pub const DEFAULT_ISSUER: &str = "wicket";

fn default_issuer() -> String {
    DEFAULT_ISSUER.into()
}

/// One verification (and maybe signing) key, chosen by `kid`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct KeyConfig {
    /// The key's id: the `kid` of the tokens it signs or verifies.
    pub kid: String,
    /// `EdDSA` (Ed25519 PEM files) or `HS256` (a shared secret).
    pub alg: String,
    /// `EdDSA`: the Ed25519 private key (PEM) that signs; only the signer (the edge, `mint-token`) needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_file: Option<PathBuf>,
    /// `EdDSA`: the Ed25519 public key (PEM) that verifies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_file: Option<PathBuf>,
    /// `HS256`: the shared secret, at least 32 characters. Give this or `secret-env`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// `HS256`: the environment variable holding the secret (instead of `secret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
}

/// Run-time tuning of the core.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CoreTuning {
    /// How often the sweeper looks for expired holds. Default 1000 ms.
    #[serde(default = "default_sweeper_ms")]
    pub sweeper_period_ms: u64,
    /// How often every event is reconciled. Default 30 s.
    #[serde(default = "default_reconciler_s")]
    pub reconciler_period_seconds: u64,
    /// Pause an event whose reconciliation fails. Default true.
    #[serde(default = "default_true")]
    pub pause_on_mismatch: bool,
    /// Requests served at once; more get a quick 503 `unavailable`. Default 4096.
    #[serde(default = "default_inflight")]
    pub max_inflight: usize,
    /// The whole head of a request (request line and headers) must arrive within this many milliseconds, or
    /// the connection is closed: a head trickled a byte at a time cannot hold a connection open. The same
    /// deadline bounds how long a kept-alive connection may wait idle for its next request. 100..=600000.
    /// Default 10000.
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// Log format of `wicket-core serve` and `wicket core`: `"text"` or `"json"` (JSON lines). Default
    /// `"text"`. (`wicket serve` with an embedded core logs as `edge.log-format` says.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_format: Option<String>,
    /// Older spelling of `log-format = "json"`. Default false.
    #[serde(default)]
    pub json_logs: bool,
}

fn default_sweeper_ms() -> u64 {
    1000
}
fn default_reconciler_s() -> u64 {
    30
}
fn default_true() -> bool {
    true
}
fn default_inflight() -> usize {
    4096
}
fn default_header_timeout_ms() -> u64 {
    10_000
}

impl Default for CoreTuning {
    fn default() -> Self {
        CoreTuning {
            sweeper_period_ms: default_sweeper_ms(),
            reconciler_period_seconds: default_reconciler_s(),
            pause_on_mismatch: true,
            max_inflight: default_inflight(),
            header_timeout_ms: default_header_timeout_ms(),
            log_format: None,
            json_logs: false,
        }
    }
}

impl CoreTuning {
    /// The log format (`log-format`, or `json-logs = true`); text when neither says otherwise.
    pub fn log_format(&self) -> crate::logging::LogFormat {
        match self.log_format.as_deref().and_then(crate::logging::LogFormat::parse) {
            Some(f) => f,
            None if self.json_logs => crate::logging::LogFormat::Json,
            None => crate::logging::LogFormat::Text,
        }
    }

    /// The deadline of a request head (and of an idle kept-alive connection).
    pub fn header_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.header_timeout_ms)
    }
}

/// A config that could not be read: a TOML error, or every validation problem.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Parse(String),
    #[error("invalid configuration:\n{}", .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<FieldError>),
}

impl CoreConfig {
    /// Parses and validates a TOML text.
    pub fn from_toml_str(text: &str) -> Result<CoreConfig, ConfigError> {
        let cfg = Self::parse(text, Path::new("."))?;
        let errs = cfg.validate();
        if errs.is_empty() { Ok(cfg) } else { Err(ConfigError::Invalid(errs)) }
    }

    /// Reads, parses and validates a file; relative paths inside it become relative to its folder.
    pub fn from_file(path: &Path) -> Result<CoreConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Io { path: path.display().to_string(), source })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut cfg = Self::parse(&text, base).map_err(|e| match e {
            ConfigError::Parse(m) => ConfigError::Parse(format!("{}: {m}", path.display())),
            other => other,
        })?;
        cfg.rebase(base);
        let errs = located(&text, cfg.validate());
        if errs.is_empty() { Ok(cfg) } else { Err(ConfigError::Invalid(errs)) }
    }

    /// TOML text → config: a syntax error as TOML reports it (with its line), then every wrong type, unknown
    /// key and missing key at once, each with its path, line and (for an unknown key) the nearest valid one.
    /// When a key is wrong, the rest is still checked (`validate()` on the file without the wrong keys, relative
    /// paths against `base`), so every problem comes in one answer.
    fn parse(text: &str, base: &Path) -> Result<CoreConfig, ConfigError> {
        let value: toml::Value = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let (cfg, ps) = crate::problems::read_toml::<CoreConfig>(&value, &[]);
        match cfg {
            Some(cfg) if ps.is_empty() => Ok(cfg),
            cfg => {
                let mut errs: Vec<FieldError> = crate::problems::with_lines(text, ps)
                    .into_iter()
                    .map(|p| FieldError { path: if p.path.is_empty() { "(file)".into() } else { p.path }, message: p.message })
                    .collect();
                if let Some(mut cfg) = cfg {
                    cfg.rebase(base);
                    // What a rule says about a value that was itself wrong adds nothing.
                    let more: Vec<FieldError> = cfg
                        .validate()
                        .into_iter()
                        .filter(|e| !errs.iter().any(|s| crate::problems::within(&e.path, &s.path)))
                        .collect();
                    errs.extend(located(text, more));
                }
                Err(ConfigError::Invalid(errs))
            }
        }
    }

    /// Makes relative file paths relative to `base`.
    pub fn rebase(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        self.event_files.iter_mut().for_each(fix);
        self.data_dir.as_mut().map(fix);
        if let Some(tls) = &mut self.tls {
            fix(&mut tls.cert_file);
            fix(&mut tls.key_file);
        }
        for k in &mut self.tokens.keys {
            k.private_key_file.as_mut().map(fix);
            k.public_key_file.as_mut().map(fix);
        }
    }

    /// Every problem, each with its path.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut err = |path: &str, message: String| errs.push(FieldError { path: path.to_string(), message });
        match (&self.admin_token, &self.admin_token_env) {
            (Some(_), Some(_)) => err("admin-token", "give admin-token or admin-token-env, not both".into()),
            (None, None) => err("admin-token", "required (or admin-token-env)".into()),
            (Some(t), None) if t.len() < 16 => err("admin-token", "must be at least 16 characters".into()),
            (None, Some(var)) if std::env::var(var).map(|v| v.len() < 16).unwrap_or(true) => {
                err("admin-token-env", format!("environment variable {var} is unset or shorter than 16 characters"))
            }
            _ => {}
        }
        match &self.store {
            StoreConfig::Url(u) if u == "embedded" => {
                let dir = self.data_dir();
                if let Some(problem) = data_dir_problem(&dir) {
                    err(if self.data_dir.is_some() { "data-dir" } else { "data-dir (default)" }, problem);
                }
            }
            StoreConfig::Url(u) if u == "memory" => {}
            StoreConfig::Url(u) if u.starts_with("redis://") || u.starts_with("rediss://") => {
                if url::Url::parse(u).is_err() {
                    err("store", format!("not a valid URL: {u}"));
                }
            }
            StoreConfig::Url(u) => {
                err("store", format!("must be \"embedded\", \"memory\", a redis:// URL or {{ cluster = [...] }}, got {u:?}"))
            }
            StoreConfig::Cluster { cluster } => {
                if cluster.is_empty() {
                    err("store.cluster", "needs at least one seed URL".into());
                }
                for (i, u) in cluster.iter().enumerate() {
                    if !u.starts_with("redis://") || url::Url::parse(u).is_err() {
                        err(&format!("store.cluster[{i}]"), format!("not a redis:// URL: {u}"));
                    }
                }
            }
        }
        let r = &self.redis;
        // `wait-replicas = 0` says what a store without replicas does anyway: accepted everywhere, as before
        // "auto" was the default.
        let asks = r.wait_aof || r.wait_timeout_ms.is_some() || matches!(r.wait_replicas, WaitReplicas::Count(1..));
        if asks && !self.is_redis() {
            let key = if matches!(r.wait_replicas, WaitReplicas::Count(1..)) {
                "redis.wait-replicas"
            } else if r.wait_aof {
                "redis.wait-aof"
            } else {
                "redis.wait-timeout-ms"
            };
            err(key, "only the Redis store (store = \"redis://...\" or { cluster = [...] }) has these settings".into());
        }
        if let WaitReplicas::Count(n @ 17..) = r.wait_replicas {
            err("redis.wait-replicas", format!("must be a number of replicas (0..=16) or \"auto\", got {n}"));
        }
        if let Some(t) = r.wait_timeout_ms {
            if !(1..=1000).contains(&t) {
                err("redis.wait-timeout-ms", format!("must be 1..=1000, got {t}"));
            } else if r.wait_replicas == WaitReplicas::Count(0) && !r.wait_aof {
                err("redis.wait-timeout-ms", "has no effect with redis.wait-replicas = 0 and without redis.wait-aof".into());
            }
        }
        if self.data_dir.is_some() && !self.is_durable_embedded() {
            err("data-dir", "only the embedded store (store = \"embedded\") has a data dir".into());
        }
        if !(1..=65_536).contains(&self.snapshot_every_mb) {
            err("snapshot-every-mb", "must be 1..=65536".into());
        }
        let p = &self.payment;
        match (&p.callback_secret, &p.callback_secret_env) {
            (Some(_), Some(_)) => err("payment.callback-secret", "give callback-secret or callback-secret-env, not both".into()),
            (None, None) => err("payment.callback-secret", "required (or payment.callback-secret-env)".into()),
            (Some(s), None) if s.len() < 16 => err("payment.callback-secret", "must be at least 16 characters".into()),
            (None, Some(var)) if std::env::var(var).is_err() => {
                err("payment.callback-secret-env", format!("environment variable {var} is unset"))
            }
            _ => {}
        }
        if let Some(u) = &p.query_url {
            match url::Url::parse(u) {
                Ok(parsed) if parsed.scheme() == "http" => {}
                Ok(_) => err("payment.query-url", "only http:// is supported (terminate TLS in a local proxy)".into()),
                Err(e) => err("payment.query-url", format!("not a URL: {e}")),
            }
        }
        if p.query_timeout_ms == Some(0) {
            err("payment.query-timeout-ms", "must be ≥ 1".into());
        }
        if self.tokens.leeway_seconds.is_some_and(|l| l > 10) {
            err("tokens.leeway-seconds", "must be ≤ 10".into());
        }
        if self.tokens.issuer.is_empty() {
            err("tokens.issuer", "must not be empty".into());
        }
        if self.tokens.keys.is_empty() {
            err("tokens.keys", "needs at least one key".into());
        }
        let mut kids = std::collections::HashSet::new();
        for (i, k) in self.tokens.keys.iter().enumerate() {
            let at = |f: &str| format!("tokens.keys[{i}].{f}");
            if k.kid.is_empty() || k.kid.len() > 64 {
                err(&at("kid"), "must be 1..=64 characters".into());
            } else if !kids.insert(k.kid.as_str()) {
                err(&at("kid"), format!("duplicate kid {}", k.kid));
            }
            match k.alg.as_str() {
                "EdDSA" => {
                    if k.secret.is_some() || k.secret_env.is_some() {
                        err(&at("secret"), "an EdDSA key has no secret".into());
                    }
                    match &k.public_key_file {
                        None => err(&at("public-key-file"), "required for EdDSA".into()),
                        Some(f) if !f.is_file() => err(&at("public-key-file"), format!("no such file: {}", f.display())),
                        _ => {}
                    }
                    if let Some(f) = &k.private_key_file
                        && !f.is_file()
                    {
                        err(&at("private-key-file"), format!("no such file: {}", f.display()));
                    }
                }
                "HS256" => {
                    if k.public_key_file.is_some() || k.private_key_file.is_some() {
                        err(&at("public-key-file"), "an HS256 key has a secret, not key files".into());
                    }
                    match (&k.secret, &k.secret_env) {
                        (Some(s), None) if s.len() < 32 => err(&at("secret"), "must be at least 32 characters".into()),
                        (None, Some(var)) if std::env::var(var).is_err() => {
                            err(&at("secret-env"), format!("environment variable {var} is unset"))
                        }
                        (None, None) => err(&at("secret"), "required for HS256 (or secret-env)".into()),
                        (Some(_), Some(_)) => err(&at("secret"), "give secret or secret-env, not both".into()),
                        _ => {}
                    }
                }
                other => err(&at("alg"), format!("must be EdDSA or HS256, got {other:?}")),
            }
        }
        if let Some(kid) = &self.tokens.signing_kid
            && !self.tokens.keys.iter().any(|k| &k.kid == kid)
        {
            err("tokens.signing-kid", format!("names no configured key: {kid}"));
        }
        if self.core.sweeper_period_ms == 0 {
            err("core.sweeper-period-ms", "must be ≥ 1".into());
        }
        if self.core.reconciler_period_seconds == 0 {
            err("core.reconciler-period-seconds", "must be ≥ 1".into());
        }
        if self.core.max_inflight == 0 {
            err("core.max-inflight", "must be ≥ 1".into());
        }
        if !(100..=600_000).contains(&self.core.header_timeout_ms) {
            err("core.header-timeout-ms", "must be 100..=600000".into());
        }
        match self.core.log_format.as_deref().map(|f| (f, crate::logging::LogFormat::parse(f))) {
            Some((f, None)) => err("core.log-format", format!("must be {}, not {f:?}", crate::logging::LogFormat::EXPECTED)),
            Some((_, Some(crate::logging::LogFormat::Text))) if self.core.json_logs => {
                err("core.json-logs", "says JSON but core.log-format says text: keep only log-format".into())
            }
            _ => {}
        }
        if let Some(tls) = &self.tls {
            if !(100..=120_000).contains(&tls.handshake_timeout_ms) {
                err("tls.handshake-timeout-ms", "must be 100..=120000".into());
            }
            // The files as start-up loads them: unreadable, not PEM, expired, or a key of another certificate.
            if let Err((key, message)) = crate::tls::TlsAcceptor::new(tls) {
                err(key, message);
            }
        }
        for (i, f) in self.event_files.iter().enumerate() {
            let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if !crate::model::valid_event_id(stem) {
                err(&format!("event-files[{i}]"), format!("file stem {stem:?} is not a valid event id"));
            } else if !f.is_file() {
                err(&format!("event-files[{i}]"), format!("no such file: {}", f.display()));
            } else {
                // The event itself, as start-up would put it: every problem with its path.
                let key = format!("event-files[{i}]");
                match std::fs::read(f) {
                    Err(e) => err(&key, format!("{}: {e}", f.display())),
                    Ok(bytes) => {
                        for e in crate::model::EventSpec::read_checked(&bytes).err().unwrap_or_default() {
                            match e.path.as_str() {
                                "" => err(&key, format!("{}: {}", f.display(), e.message)),
                                path => err(&key, format!("{}: {path}: {}", f.display(), e.message)),
                            }
                        }
                    }
                }
            }
        }
        errs
    }

    /// Whether the state lives in the durable embedded store.
    pub fn is_durable_embedded(&self) -> bool {
        self.store == StoreConfig::Url("embedded".into())
    }

    /// Whether the state lives in Redis (one server or a Cluster).
    pub fn is_redis(&self) -> bool {
        match &self.store {
            StoreConfig::Url(u) => u.starts_with("redis://") || u.starts_with("rediss://"),
            StoreConfig::Cluster { .. } => true,
        }
    }

    /// The embedded store's data dir: `data-dir`, or `wicket-data` in the working directory.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
    }

    /// The admin token (from the file or the environment).
    pub fn admin_token(&self) -> String {
        self.admin_token
            .clone()
            .or_else(|| self.admin_token_env.as_ref().and_then(|v| std::env::var(v).ok()))
            .unwrap_or_default()
    }

    /// The payment callback secret (from the file or the environment).
    pub fn callback_secret(&self) -> String {
        self.payment
            .callback_secret
            .clone()
            .or_else(|| self.payment.callback_secret_env.as_ref().and_then(|v| std::env::var(v).ok()))
            .unwrap_or_default()
    }
}

/// What stops `dir` from being a data dir, checked before start: it is not a directory, or it (or, when it
/// does not exist yet, its nearest existing parent) cannot be written. The lock is taken at start.
fn data_dir_problem(dir: &Path) -> Option<String> {
    let shown = dir.display();
    if dir.exists() {
        if !dir.is_dir() {
            return Some(format!("{shown} is not a directory"));
        }
        return writable(dir).err().map(|e| format!("{shown} is not writable: {e}"));
    }
    let mut parent = dir.parent();
    while let Some(p) = parent {
        let p = if p.as_os_str().is_empty() { Path::new(".") } else { p };
        if p.exists() {
            if !p.is_dir() {
                return Some(format!("{shown} cannot be created: {} is not a directory", p.display()));
            }
            return writable(p).err().map(|e| format!("{shown} cannot be created in {}: {e}", p.display()));
        }
        parent = p.parent();
    }
    None
}

/// Whether a file can be created in `dir` (a probe file, removed at once).
fn writable(dir: &Path) -> std::io::Result<()> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!(".wicket-probe-{}-{n}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The least a valid file holds (the tests add the keys they are about after it).
    const MINIMAL: &str = r#"
            admin-token = "0123456789abcdef"
            [payment]
            callback-secret = "0123456789abcdef"
            [[tokens.keys]]
            kid = "k"
            alg = "HS256"
            secret = "0123456789abcdef0123456789abcdef"
        "#;

    #[test]
    fn every_problem_has_its_path() {
        let text = r#"
            store = "mysql://nope"
            [payment]
            callback-secret = "short"
            query-url = "ftp://x"
            [tokens]
            leeway-seconds = 30
            signing-kid = "missing"
            [[tokens.keys]]
            kid = "k1"
            alg = "RS256"
            [[tokens.keys]]
            kid = "k1"
            alg = "HS256"
            secret = "tiny"
            [core]
            sweeper-period-ms = 0
            header-timeout-ms = 0
        "#;
        let Err(ConfigError::Invalid(errs)) = CoreConfig::from_toml_str(text) else { panic!("should be invalid") };
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        for want in [
            "admin-token",
            "store",
            "payment.callback-secret",
            "payment.query-url",
            "tokens.leeway-seconds",
            "tokens.keys[0].alg",
            "tokens.keys[1].kid",
            "tokens.keys[1].secret",
            "tokens.signing-kid",
            "core.sweeper-period-ms",
            "core.header-timeout-ms",
        ] {
            assert!(paths.contains(&want), "missing {want} in {paths:?}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = CoreConfig::from_toml_str("listen = \"127.0.0.1:1\"\nlisten-port = 3\n").unwrap_err();
        assert!(err.to_string().contains("listen-port"), "{err}");
        let err = CoreConfig::from_toml_str("[payment]\nsecret = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn header_timeout_defaults_and_bounds() {
        let base = MINIMAL;
        let cfg = CoreConfig::from_toml_str(base).expect("valid");
        assert_eq!(cfg.core.header_timeout(), std::time::Duration::from_secs(10));
        let cfg = CoreConfig::from_toml_str(&format!("{base}[core]\nheader-timeout-ms = 1000\n")).expect("valid");
        assert_eq!(cfg.core.header_timeout_ms, 1000);
        for bad in [0, 99, 600_001] {
            let text = format!("{base}[core]\nheader-timeout-ms = {bad}\n");
            let Err(ConfigError::Invalid(errs)) = CoreConfig::from_toml_str(&text) else { panic!("{bad} should be invalid") };
            assert_eq!(errs.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), ["core.header-timeout-ms"], "{bad}");
        }
    }

    #[test]
    fn log_format_is_text_or_json_and_json_logs_still_means_json() {
        use crate::logging::LogFormat;
        let base = MINIMAL;
        let format = |core: &str| CoreConfig::from_toml_str(&format!("{base}[core]\n{core}\n")).map(|c| c.core.log_format());
        assert_eq!(format("").unwrap(), LogFormat::Text);
        assert_eq!(format("log-format = \"json\"").unwrap(), LogFormat::Json);
        assert_eq!(format("log-format = \"text\"").unwrap(), LogFormat::Text);
        assert_eq!(format("json-logs = true").unwrap(), LogFormat::Json);
        for (bad, path) in [("log-format = \"xml\"", "core.log-format"), ("log-format = \"text\"\njson-logs = true", "core.json-logs")] {
            let Err(ConfigError::Invalid(errs)) = format(bad) else { panic!("{bad} should be invalid") };
            assert_eq!(errs.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), [path], "{bad}");
        }
    }

    #[test]
    fn data_dir_problems_have_their_path() {
        let base = MINIMAL;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let paths = |text: String| match CoreConfig::from_toml_str(&text) {
            Err(ConfigError::Invalid(errs)) => errs.iter().map(|e| format!("{}: {}", e.path, e.message)).collect::<Vec<_>>(),
            Err(e) => vec![e.to_string()],
            Ok(_) => vec![],
        };
        let errs = paths(format!("data-dir = {:?}\n{base}", file.display().to_string()));
        assert!(errs.len() == 1 && errs[0].starts_with("data-dir: ") && errs[0].contains("not a directory"), "{errs:?}");
        let errs = paths(format!("data-dir = {:?}\n{base}", file.join("sub").display().to_string()));
        assert!(errs.len() == 1 && errs[0].starts_with("data-dir: "), "{errs:?}");
        let errs = paths(format!("store = \"memory\"\ndata-dir = \"x\"\n{base}"));
        assert!(errs.len() == 1 && errs[0].contains("only the embedded store"), "{errs:?}");
        let errs = paths(format!("snapshot-every-mb = 0\n{base}"));
        assert!(errs.len() == 1 && errs[0].starts_with("snapshot-every-mb: "), "{errs:?}");
        let ok = CoreConfig::from_toml_str(&format!("data-dir = {:?}\n{base}", dir.path().join("new/data").display().to_string()));
        assert!(ok.is_ok(), "a dir that can be created is fine: {ok:?}");
        let mem = CoreConfig::from_toml_str(&format!("store = \"memory\"\n{base}")).unwrap();
        assert!(!mem.is_durable_embedded());
    }

    #[test]
    fn redis_wait_settings_are_checked_with_their_path() {
        let base = MINIMAL;
        let errs = |text: String| match CoreConfig::from_toml_str(&text) {
            Err(ConfigError::Invalid(errs)) => errs.iter().map(|e| format!("{}: {}", e.path, e.message)).collect::<Vec<_>>(),
            Err(e) => vec![e.to_string()],
            Ok(_) => vec![],
        };
        let redis = "store = \"redis://127.0.0.1:6379/0\"\n";
        // No [redis] table: "auto" (wait for one replica when the store has replicas), 100 ms.
        let cfg = CoreConfig::from_toml_str(&format!("{redis}{base}")).unwrap();
        assert_eq!(cfg.redis.wait_settings(), WaitSettings::default());
        let p = cfg.redis.wait_settings();
        assert_eq!((p.replicas, p.aof, p.timeout.as_millis()), (WaitReplicas::Auto, false, 100));
        let p = CoreConfig::from_toml_str(&format!("{redis}{base}\n[redis]\nwait-replicas = \"auto\"\nwait-timeout-ms = 250\n"))
            .unwrap()
            .redis
            .wait_settings();
        assert_eq!((p.replicas, p.timeout.as_millis()), (WaitReplicas::Auto, 250));
        // 0 turns it off.
        let p = CoreConfig::from_toml_str(&format!("{redis}{base}\n[redis]\nwait-replicas = 0\n")).unwrap().redis.wait_settings();
        assert_eq!(p.replicas, WaitReplicas::Count(0));
        // Both store forms take it.
        let text = format!("{redis}{base}\n[redis]\nwait-replicas = 1\nwait-timeout-ms = 50\n");
        let p = CoreConfig::from_toml_str(&text).unwrap().redis.wait_settings();
        assert_eq!((p.replicas, p.aof, p.timeout.as_millis()), (WaitReplicas::Count(1), false, 50));
        let text = format!("store = {{ cluster = [\"redis://127.0.0.1:7000\"] }}\n{base}\n[redis]\nwait-aof = true\n");
        let p = CoreConfig::from_toml_str(&text).unwrap().redis.wait_settings();
        assert_eq!((p.replicas, p.aof, p.timeout.as_millis()), (WaitReplicas::Auto, true, 100));
        // The embedded store: a wait is refused, 0 and "auto" (what it does anyway) are not.
        let e = errs(format!("{base}\n[redis]\nwait-replicas = 1\n"));
        assert!(e.len() == 1 && e[0].starts_with("redis.wait-replicas: only the Redis store"), "{e:?}");
        for fine in ["0", "\"auto\""] {
            assert!(CoreConfig::from_toml_str(&format!("{base}\n[redis]\nwait-replicas = {fine}\n")).is_ok(), "{fine}");
        }
        // Problems, each with its path.
        let e = errs(format!("{redis}{base}\n[redis]\nwait-replicas = 17\n"));
        assert_eq!(e, ["redis.wait-replicas: must be a number of replicas (0..=16) or \"auto\", got 17"]);
        for (bad, shown) in [
            ("\"two\"", "\"two\""),
            ("-1", "-1"),
            ("\"Auto\"", "\"Auto\""),
            ("\"\"", "\"\""),
            ("1.5", "1.5"),
            ("true", "true"),
            ("4294967296", "4294967296"),
        ] {
            let e = errs(format!("{redis}{base}\n[redis]\nwait-replicas = {bad}\n"));
            let want = format!("redis.wait-replicas: must be a number of replicas (0..=16) or \"auto\", got {shown} (line ");
            assert!(e.len() == 1 && e[0].starts_with(&want), "{bad}: {e:?}");
        }
        let e = errs(format!("{redis}{base}\n[redis]\nwait-replicas = [1]\n"));
        assert!(e.len() == 1 && e[0].starts_with("redis.wait-replicas: "), "{e:?}");
        for bad in [0, 1001] {
            let e = errs(format!("{redis}{base}\n[redis]\nwait-replicas = 1\nwait-timeout-ms = {bad}\n"));
            assert!(e.len() == 1 && e[0].starts_with("redis.wait-timeout-ms: must be 1..=1000"), "{e:?}");
        }
        let e = errs(format!("{redis}{base}\n[redis]\nwait-replicas = 0\nwait-timeout-ms = 50\n"));
        assert!(e.len() == 1 && e[0].starts_with("redis.wait-timeout-ms: has no effect"), "{e:?}");
        // From a file: the line too.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("core.toml");
        std::fs::write(&file, format!("{redis}{base}\n[redis]\nwait-replicas = \"two\"\n")).unwrap();
        match CoreConfig::from_file(&file) {
            Err(ConfigError::Invalid(e)) => {
                assert!(e.len() == 1 && e[0].path.starts_with("redis.wait-replicas") && e[0].message.contains("got \"two\""), "{e:?}")
            }
            other => panic!("{other:?}"),
        }
        let e = errs(format!("{redis}{base}\n[redis]\nwait-replica = 1\n"));
        assert!(e.len() == 1 && e[0].contains("wait-replica"), "{e:?}");
    }

    #[test]
    fn cluster_store_parses() {
        let cfg: CoreConfig = toml::from_str("store = { cluster = [\"redis://127.0.0.1:7000\"] }").unwrap();
        assert_eq!(cfg.store, StoreConfig::Cluster { cluster: vec!["redis://127.0.0.1:7000".into()] });
    }
}
