//! Wicket's sale core: holds, orders, payments and stock, on an embedded or a Redis store.
//!
//! # Layout
//! - [`config`]: the TOML config (`CoreConfig`), strict, with `validate()` listing every problem by path;
//!   it composes the sections its parts own (`[tls]`: [`tls::TlsConfig`]) and imports no module that
//!   imports it (tests/structure.rs).
//! - [`problems`]: every shape problem of a TOML or JSON document at once, each with its path (and line):
//!   a stand-in for each wrong or missing value lets the rest read on to the semantic checks.
//! - [`model`]: events, pools, SKUs, limits, orders and the typed outcomes of every store operation.
//! - [`store`]: the [`store::SaleStore`] trait; [`store::embedded`] (in-process: durable through
//!   [`store::journal`], or memory only) and [`store::redis`] (Lua from lua/, `close` and `refund` with the
//!   one give-back of lua/lib/give_back.lua; each acknowledged change waits for a replica when the store
//!   has replicas — `[redis] wait-replicas = "auto"`, the default, resolved when it connects and then
//!   following [`store::replicas`], what each master could still lose a change to — or as
//!   `[redis]` says: a number of replicas, 0 for none, the AOF). Its tests start real Redis servers and Clusters through the
//!   `wicket-testkit` crate (testkit/), shared with the other crates' tests.
//! - [`token`]: admission tokens (JWT, EdDSA/HS256 by kid): verify here, sign at the edge.
//! - [`payment`]: signed callbacks and the provider's status query.
//! - [`serve`]: the HTTP/1 server: accepts connections, deadline on request heads (and idle keep-alive);
//!   with `[tls]`, a TLS handshake first ([`tls`]: OpenSSL, as the edge's client side; its own deadline).
//! - [`http`]: the axum router: guard (in-flight limit, latency) → handler → one store call → JSON.
//! - [`strict_json`]: how every JSON body is read: objects by field name only, errors with their path
//!   (every one at once through [`problems`]).
//! - [`sweeper`]: closes expired holds, asking the provider first; [`reconciler`]: counters vs orders.
//! - [`recheck`]: watches the Redis run ids; at start and after a restart, holds wait while every CREATED
//!   order is re-checked with the provider (the sweeper's query), then reopen. The durable embedded store
//!   gets the same pass once at start, after its state is rebuilt from disk. Like [`sweeper`] and
//!   [`reconciler`] it extends [`Core`]; what it remembers between checks (`StoreWatch`) is defined here,
//!   beside `Core`, so this root file imports none of the three.
//! - [`metrics`]: Prometheus text at `/metrics`. [`clock`]: time source, manual in tests.
//! - [`logging`]: `log-format` (text or JSON lines, colour only on a terminal), for this crate's binary and
//!   the edge's.
//!
//! A hold travels: `POST /v1/events/{event}/holds` → [`serve`] (the TLS handshake with `[tls]`, then the head
//! within the deadline) → [`http`] (body ≤ 64 KiB, strict JSON by [`strict_json`], token verified by
//! [`token`]; a replay is answered from its order before the sold-out flag is trusted) →
//! [`store::SaleStore::hold`] (one atomic step; on the durable embedded store, answered once its journal
//! record is on disk; on Redis with replicas (by default) or other `[redis]` wait settings, once the
//! replicas confirmed it) → 201 with the order.

pub mod clock;
pub mod config;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod payment;
pub mod problems;
pub mod recheck;
pub mod reconciler;
pub mod serve;
pub mod store;
pub mod strict_json;
pub mod sweeper;
pub mod tls;
pub mod token;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::{CoreConfig, CoreTuning, StoreConfig};
use crate::http::{AppState, Shared};
use crate::metrics::CoreMetrics;
use crate::model::{EventSpec, PutEventOutcome};
use crate::payment::PaymentQuery;
use crate::store::DynStore;
use crate::token::Keyring;

/// What `--version` prints after the binary's name, for `wicket` and `wicket-core` alike: the crate version, the
/// commit and the build date, e.g. `0.1.0 (3f2a9c1d0b7e 2026-05-02)` (build.rs says where each comes from; the
/// commit is `unknown` when the source had no git history and no `WICKET_COMMIT` was given).
pub const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (", env!("WICKET_COMMIT"), " ", env!("WICKET_BUILD_DATE"), ")");

/// A configured core: the shared state of its handlers and what its background tasks need.
pub struct Core {
    pub state: Shared,
    query: Option<PaymentQuery>,
    tuning: CoreTuning,
    grace_ms: i64,
    /// This instance's name in the sweeper lease.
    instance: String,
    /// The Redis run ids last seen, and whether a re-check is owed ([`recheck`]).
    watch: tokio::sync::Mutex<StoreWatch>,
}

impl Core {
    /// Builds a core over `store` from a validated config, and puts the config's event files.
    pub async fn new(config: &CoreConfig, store: DynStore) -> anyhow::Result<Core> {
        let keys = Keyring::from_config(&config.tokens)?;
        let metrics = CoreMetrics::new();
        metrics.concurrency_limit.set(config.core.max_inflight as i64);
        let mut state = AppState::new(store, keys, config.admin_token(), config.callback_secret(), metrics);
        state.max_inflight = config.core.max_inflight;
        state.signature_tolerance = config.payment.tolerance_seconds();
        let query = match &config.payment.query_url {
            Some(u) => Some(PaymentQuery::new(u, config.payment.query_timeout())?),
            None => None,
        };
        let core = Core {
            state: Arc::new(state),
            query,
            tuning: config.core.clone(),
            grace_ms: config.payment.unknown_grace_ms(),
            instance: format!("{}-{}", std::process::id(), ulid::Ulid::new()),
            watch: tokio::sync::Mutex::new(StoreWatch::default()),
        };
        for file in &config.event_files {
            core.put_event_file(file).await?;
        }
        Ok(core)
    }

    async fn put_event_file(&self, file: &std::path::Path) -> anyhow::Result<()> {
        let id = file.file_stem().and_then(|s| s.to_str()).context("event file without a name")?;
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let spec: EventSpec =
            strict_json::object_from_slice(text.as_bytes()).with_context(|| format!("parsing {}", file.display()))?;
        let errs = spec.validate();
        if !errs.is_empty() {
            let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
            anyhow::bail!("{}: {}", file.display(), list.join("; "));
        }
        match self.state.store.put_event(id, &spec, false).await? {
            PutEventOutcome::Created | PutEventOutcome::Updated => Ok(()),
            PutEventOutcome::NeedsForce(m) => {
                tracing::warn!(event = id, "{m}; keeping the stored event");
                Ok(())
            }
            PutEventOutcome::Rejected(errs) => {
                let list: Vec<String> = errs.iter().map(ToString::to_string).collect();
                anyhow::bail!("{}: {}", file.display(), list.join("; "))
            }
        }
    }

    pub fn router(&self) -> axum::Router {
        http::router(self.state.clone())
    }

    /// Runs the sweeper, the reconciler and (on Redis) the restart watcher until `shutdown` fires. On
    /// Redis, holds are refused from here until the watcher's first re-check is done ([`recheck`]); on the
    /// durable embedded store, until the start-up re-check is done.
    pub fn spawn_background(self: &Arc<Self>, shutdown: tokio::sync::watch::Receiver<bool>) {
        if !self.state.store.is_external() && self.state.store.recheck_at_start() {
            self.state.set_rechecking(true);
            let core = self.clone();
            let mut stop = shutdown.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = core.recheck_at_start() => {}
                    _ = stop.changed() => {}
                }
            });
        }
        if self.state.store.is_external() {
            self.spawn_restart_watcher(shutdown.clone());
        }
        let core = self.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(core.tuning.sweeper_period_ms));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => { core.sweep_once().await; }
                    _ = stop.changed() => break,
                }
            }
        });
        let core = self.clone();
        let mut stop = shutdown;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(core.tuning.reconciler_period_seconds));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => { core.reconcile_once().await; }
                    _ = stop.changed() => break,
                }
            }
        });
    }
}

/// What the restart watcher ([`recheck`]) remembers between checks of the store's servers. It lives
/// here, beside the [`Core`] that holds it, so that the crate root does not import a module that
/// extends [`Core`] (which would make the two import each other).
#[derive(Debug, Default)]
pub(crate) struct StoreWatch {
    /// The servers of the last successful check; `None` before the first one since start.
    pub(crate) seen: Option<Vec<store::ServerId>>,
    /// Why a pass is owed and not yet complete (`startup` or `restart`).
    pub(crate) pending: Option<&'static str>,
}

/// Environment variable of a test hook: the durable embedded store pretends its disk has this many bytes
/// free (and runs out of them as it writes), so tests can fill a "disk" without root.
pub const TEST_DISK_FREE_ENV: &str = "WICKET_TEST_DISK_FREE_BYTES";

/// Opens the configured store (for the durable embedded store: locks and recovers its data dir).
pub async fn open_store(config: &CoreConfig) -> anyhow::Result<DynStore> {
    match &config.store {
        StoreConfig::Url(u) if u == "embedded" => {
            let dir = config.data_dir();
            let opts = store::embedded::DiskOptions {
                reserve_bytes: config.disk_reserve_mb.saturating_mul(1 << 20),
                snapshot_bytes: config.snapshot_every_mb.saturating_mul(1 << 20),
                test_free_bytes: std::env::var(TEST_DISK_FREE_ENV).ok().and_then(|v| v.parse().ok()),
            };
            // Opening reads every file of the dir: off the async workers.
            let store = tokio::task::spawn_blocking(move || store::embedded::EmbeddedStore::open(&dir, opts))
                .await
                .context("opening the embedded store")?
                .map_err(|e| anyhow::anyhow!("store = \"embedded\": {e}"))?;
            Ok(Arc::new(store))
        }
        StoreConfig::Url(u) if u == "memory" => Ok(Arc::new(store::embedded::EmbeddedStore::new())),
        StoreConfig::Url(_) | StoreConfig::Cluster { .. } => Ok(Arc::new(open_redis_store(config).await?)),
    }
}

/// Opens the configured Redis store (`store = "redis://..."` or `{ cluster = [...] }`) with the `[redis]`
/// wait settings, as [`open_store`] does; `"auto"` is resolved here, and the policy in force logged.
pub async fn open_redis_store(config: &CoreConfig) -> anyhow::Result<store::redis::RedisStore> {
    let wait = config.redis.wait_settings();
    let store = match &config.store {
        StoreConfig::Url(u) if u.starts_with("redis://") || u.starts_with("rediss://") => {
            store::redis::RedisStore::connect_with(u, wait).await
        }
        StoreConfig::Cluster { cluster } => store::redis::RedisStore::connect_cluster_with(cluster, wait).await,
        StoreConfig::Url(u) => anyhow::bail!("store = {u:?} is not a Redis store"),
    };
    Ok(store?)
}

/// How the configured store is named in the start-up log line.
pub fn describe_store(config: &CoreConfig) -> String {
    use store::redis::WaitReplicas;
    let wait = config.redis.wait_settings();
    let ms = wait.timeout.as_millis();
    let wait = match (wait.replicas, wait.aof) {
        _ if !config.is_redis() => String::new(),
        (WaitReplicas::Count(0), false) => ", changes not waited for (wait-replicas = 0)".into(),
        (WaitReplicas::Count(n), false) => format!(", each change waits for {n} replica(s) (WAIT, {ms} ms)"),
        (WaitReplicas::Auto, false) => {
            format!(", each change waits for 1 replica if the store has replicas (wait-replicas \"auto\", WAIT, {ms} ms)")
        }
        (WaitReplicas::Count(n), true) => format!(", each change waits for the AOF and {n} replica AOF(s) (WAITAOF, {ms} ms)"),
        (WaitReplicas::Auto, true) => format!(
            ", each change waits for the AOF and, if the store has replicas, 1 replica AOF (wait-replicas \"auto\", WAITAOF, {ms} ms)"
        ),
    };
    let what = match &config.store {
        StoreConfig::Url(u) if u == "embedded" => {
            let dir = config.data_dir();
            let shown = std::path::absolute(&dir).unwrap_or(dir);
            format!("embedded (durable, data-dir {})", shown.display())
        }
        StoreConfig::Url(u) if u == "memory" => "memory (not durable)".into(),
        StoreConfig::Url(u) => match url::Url::parse(u) {
            Ok(mut parsed) => {
                let _ = parsed.set_password(None);
                format!("redis {parsed}")
            }
            Err(_) => "redis".into(),
        },
        StoreConfig::Cluster { cluster } => format!("redis cluster ({} seeds)", cluster.len()),
    };
    format!("{what}{wait}")
}

/// Serves the core on `listener` until `shutdown` completes, then finishes in-flight requests.
pub async fn run(
    config: CoreConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let tls = config.tls.as_ref().map(tls::TlsAcceptor::new).transpose().map_err(|(key, m)| anyhow::anyhow!("{key}: {m}"))?;
    let store = open_store(&config).await?;
    let core = Arc::new(Core::new(&config, store).await?);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    core.spawn_background(stop_rx);
    let what = if tls.is_some() { "core API and /metrics, TLS" } else { "core API and /metrics" };
    tracing::info!(store = %describe_store(&config), "listening on {} ({what})", listener.local_addr()?);
    let result = serve::serve(listener, core.router(), config.core.header_timeout(), tls, shutdown).await;
    let _ = stop_tx.send(true);
    result.context("serving the core")
}
