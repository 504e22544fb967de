//! The Redis store (issue 3): Lua scripts from `lua/`, keys `wk:{ev:<id>}:...`.
//!
//! Every operation that changes state is one script (EVALSHA, reloaded transparently after NOSCRIPT by
//! [`redis::Script`]), so each is atomic on the server and does all its reads and checks before its first
//! write. Every key of an event carries the hash tag `{ev:<id>}`, so an event lives in one Cluster slot and
//! each script names its keys in KEYS (the standard list below; see `lua/README.md`).
//!
//! Failures map to [`StoreError`]: refused before sending (no server, OOM, loading, cluster down) →
//! `Unavailable`; sent but no answer (timeout, connection dropped) → `OutcomeUnknown`, which the core
//! retries only with the same idempotency key. Each buyer-path call is bounded by [`CALL_TIMEOUT`], so a
//! dead Redis makes calls fail fast, and the connection is re-established in the background when Redis is
//! back. Operator calls (`put_event`, `reconcile`) run on a second connection bounded by [`ADMIN_TIMEOUT`]:
//! a 100,000-seat event legitimately takes longer than a hold may.
//!
//! Constructors: [`RedisStore::connect`] (`redis://host:port/db`) and [`RedisStore::connect_cluster`]
//! (seed URLs of a Redis Cluster), both without waiting for replicas; `connect_with` /
//! `connect_cluster_with` take a fixed [`WaitPolicy`] or the config's [`WaitSettings`].
//!
//! # Waiting for replicas (`[redis]` wait settings)
//! Replication is asynchronous: a change a master acknowledged can be missing on the replica promoted after
//! the master dies. With a [`WaitPolicy`] every change the core acknowledges (hold, payment, cancel,
//! expiry, redemption, refund, event put, pause) is sent as one pipeline on one connection — so in a
//! Cluster to the master of the event's slot — `[EVALSHA, INCR <barrier>, WAIT n t]` (or `WAITAOF 1 n t`).
//! `WAIT` covers every write its connection made, so it covers the script's own write; the barrier (a write
//! to a key in the same slot, `wk:{ev:<id>}:sync`) makes it cover everything that master had when the
//! script ran too, so an answer built from earlier state (a replay, `already_paid`) is covered as well.
//! Fewer confirmations than asked within the timeout → [`StoreError::DurabilityTimeout`] (503; the change
//! stays applied on the master, and a retry with the same idempotency key answers from it). `WAIT` blocks
//! its connection until the replicas answer, so waited calls go over a pool of [`WAIT_CONNECTIONS`]
//! connections (Redis confirms all waiting clients with one replica round trip); reads keep the shared one.
//!
//! The config's default is `wait-replicas = "auto"` ([`WaitReplicas::Auto`]): when connecting, `INFO
//! replication` on every master (the one server, or each master of the Cluster) counts its connected
//! replicas; any master with one → changes wait for 1 replica; none (a lone Redis) → no wait, and the
//! masters are looked at again every [`AUTO_REDETECT`] until a replica shows up, when the wait turns on.
//! Once on, the wait follows what could still be promoted ([`super::replicas`], issue #41): a watcher looks
//! at the replicas every [`FOLLOW_PERIOD`] (and at once after a wait timed out), and a change on a master
//! with no replica left that could be promoted — its replica died for good, or it is the replica promoted
//! after its master died — is acknowledged without waiting (logged once per master, counted in
//! [`RedisStore::unreplicated_masters`]); as soon as a replica is back, changes there wait again. A number
//! (`wait-replicas = N`) keeps its strict meaning: exactly N, whatever the topology. The policy in force and
//! why are logged.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, Script, ServerErrorKind, Value};

use super::replicas::{FOLLOW_PERIOD, ReplicaView, Topology};
use super::{MAX_OUTBOX_PAGE, SaleStore, ServerId, StoreError};
use crate::model::{
    CloseReason, Dimension, EventRecord, EventSpec, FieldError, HoldOutcome, HoldRequest, Identity, Order,
    OrderState, OutboxEntry, PayOutcome, PaymentRequest, PoolStock, PutEventOutcome, ReconcileReport, SkuStock,
    SoldOut, StockView, TransitionOutcome, event_of_order, reconcile_from,
};

/// Longest a single store call may take before it fails (`OutcomeUnknown` once sent).
pub const CALL_TIMEOUT: Duration = Duration::from_millis(1500);
/// Longest wait for a reply on an open connection.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Longest wait for a TCP connect + handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Operator calls (create or update an event of 100,000 seats, reconcile a big sale) may run longer: they
/// get their own connection with this bound, so the buyer path keeps its short one.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections that carry waited changes (each `WAIT` blocks its connection until the replicas answer).
pub const WAIT_CONNECTIONS: usize = 16;

/// Default of `redis.wait-timeout-ms`: the longest one wait may take.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 = 100;

/// How often a store whose `wait-replicas = "auto"` found no replica at start looks again: a replica that
/// connects later turns the wait on within this long (and it stays on).
pub const AUTO_REDETECT: Duration = Duration::from_secs(5);

/// `redis.wait-replicas`: a number of replicas, or `"auto"` (the default): wait for one replica when the
/// store has replicas, for none when it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitReplicas {
    /// Look at the masters when connecting (`INFO replication`, `connected_slaves`, on every master): any
    /// master with a connected replica → wait for 1; none → no wait, looked at again every
    /// [`AUTO_REDETECT`] until a replica shows up (then the wait is on for good).
    #[default]
    Auto,
    /// Exactly this many (0: no wait).
    Count(u32),
}

impl std::fmt::Display for WaitReplicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReplicas::Auto => f.write_str("\"auto\""),
            WaitReplicas::Count(n) => write!(f, "{n}"),
        }
    }
}

/// For the generated config reference: a count (0..=16) or `"auto"`, as the deserializer below reads it.
impl schemars::JsonSchema for WaitReplicas {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WaitReplicas".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "anyOf": [{ "type": "integer", "minimum": 0, "maximum": 16 }, { "const": "auto" }] })
    }
}

impl serde::Serialize for WaitReplicas {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            WaitReplicas::Auto => s.serialize_str("auto"),
            WaitReplicas::Count(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> serde::Deserialize<'de> for WaitReplicas {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const WANT: &str = "must be a number of replicas (0..=16) or \"auto\"";
        impl serde::de::Visitor<'_> for V {
            type Value = WaitReplicas;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of replicas (0..=16) or \"auto\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<WaitReplicas, E> {
                u32::try_from(v).map(WaitReplicas::Count).map_err(|_| E::custom(format!("{WANT}, got {v}")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<WaitReplicas, E> {
                u32::try_from(v).map(WaitReplicas::Count).map_err(|_| E::custom(format!("{WANT}, got {v}")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<WaitReplicas, E> {
                if v == "auto" { Ok(WaitReplicas::Auto) } else { Err(E::custom(format!("{WANT}, got {v:?}"))) }
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<WaitReplicas, E> {
                Err(E::custom(format!("{WANT}, got {v}")))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<WaitReplicas, E> {
                Err(E::custom(format!("{WANT}, got {v}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// What the config asks every acknowledged change to wait for (`[redis]`); a store resolves it into the
/// [`WaitPolicy`] in force when it connects (`"auto"`: from the replicas it finds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitSettings {
    pub replicas: WaitReplicas,
    pub aof: bool,
    pub timeout: Duration,
}

impl Default for WaitSettings {
    /// The config's defaults: `wait-replicas = "auto"`, no AOF wait, 100 ms.
    fn default() -> Self {
        WaitSettings { replicas: WaitReplicas::Auto, aof: false, timeout: Duration::from_millis(DEFAULT_WAIT_TIMEOUT_MS) }
    }
}

impl From<WaitPolicy> for WaitSettings {
    /// A fixed policy: nothing is detected.
    fn from(p: WaitPolicy) -> Self {
        WaitSettings { replicas: WaitReplicas::Count(p.replicas), aof: p.aof, timeout: p.timeout }
    }
}

/// What every acknowledged change waits for before its answer: the policy in force. [`Default`]: no wait
/// (what [`RedisStore::connect`] uses; the config's default is [`WaitSettings::default`], `"auto"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Replicas that must have the change (`WAIT`), or, with `aof`, have it in their AOF (`WAITAOF`).
    pub replicas: u32,
    /// The master's own AOF must have the change on disk (`WAITAOF 1 ...`, Redis ≥ 7.2, `appendonly yes`).
    pub aof: bool,
    /// Longest one wait may take (the `WAIT` timeout).
    pub timeout: Duration,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy { replicas: 0, aof: false, timeout: Duration::from_millis(DEFAULT_WAIT_TIMEOUT_MS) }
    }
}

impl WaitPolicy {
    /// Whether changes wait at all.
    pub fn is_on(&self) -> bool {
        self.replicas > 0 || self.aof
    }

    /// `WAIT numreplicas timeout` or `WAITAOF numlocal numreplicas timeout`.
    fn command(&self) -> Cmd {
        let ms = self.timeout.as_millis().max(1) as u64;
        if self.aof {
            let mut c = redis::cmd("WAITAOF");
            c.arg(1).arg(self.replicas).arg(ms);
            c
        } else {
            let mut c = redis::cmd("WAIT");
            c.arg(self.replicas).arg(ms);
            c
        }
    }

    /// Whether a `WAIT` / `WAITAOF` reply met the policy; `Err` says what was missing.
    fn check(&self, reply: &Value) -> Result<(), String> {
        let int = |v: &Value| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        };
        if self.aof {
            let parts = items(reply);
            let (Some(local), Some(replicas)) = (parts.first().and_then(int), parts.get(1).and_then(int)) else {
                return Err(format!("unexpected WAITAOF reply {reply:?}"));
            };
            if local < 1 {
                return Err(format!("the master's AOF did not confirm within {} ms", self.timeout.as_millis()));
            }
            if replicas < self.replicas as i64 {
                return Err(format!(
                    "{replicas} of {} replicas confirmed their AOF within {} ms",
                    self.replicas,
                    self.timeout.as_millis()
                ));
            }
            Ok(())
        } else {
            match int(reply) {
                Some(n) if n >= self.replicas as i64 => Ok(()),
                Some(n) => Err(format!("{n} of {} replicas confirmed within {} ms", self.replicas, self.timeout.as_millis())),
                None => Err(format!("unexpected WAIT reply {reply:?}")),
            }
        }
    }
}

/// The waited path of a store: the policy and the connections that carry it.
struct Waiter {
    /// Replicas waited for: fixed, except that `"auto"` with `wait-aof` may raise it from 0 to 1 once.
    replicas: AtomicU32,
    aof: bool,
    timeout: Duration,
    pool: Box<[Conn]>,
    next: AtomicUsize,
}

impl Waiter {
    fn new(policy: WaitPolicy, pool: Vec<Conn>) -> Waiter {
        Waiter {
            replicas: AtomicU32::new(policy.replicas),
            aof: policy.aof,
            timeout: policy.timeout,
            pool: pool.into(),
            next: AtomicUsize::new(0),
        }
    }

    fn policy(&self) -> WaitPolicy {
        WaitPolicy { replicas: self.replicas.load(Ordering::Relaxed), aof: self.aof, timeout: self.timeout }
    }

    fn conn(&self) -> Conn {
        self.pool[self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len()].clone()
    }
}

/// Where a store's connections go: what opens one more (the waited pool, opened when the wait turns on).
#[derive(Clone)]
enum Target {
    Single(redis::Client),
    Cluster(Vec<String>),
}

impl Target {
    /// A new connection whose replies may take `response`.
    async fn open(&self, response: Duration) -> Result<Conn, StoreError> {
        match self {
            Target::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(response))
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(200));
                let m = tokio::time::timeout(CALL_TIMEOUT * 2, ConnectionManager::new_with_config(client.clone(), config))
                    .await
                    .map_err(|_| StoreError::Unavailable("timed out connecting to Redis".into()))?
                    .map_err(map_err)?;
                Ok(Conn::Single(m))
            }
            Target::Cluster(seeds) => {
                let client = redis::cluster::ClusterClientBuilder::new(seeds.clone())
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(response)
                    .retries(2)
                    .min_retry_wait(20)
                    .max_retry_wait(200)
                    .build()
                    .map_err(|e| StoreError::Internal(format!("bad Redis Cluster seeds: {e}")))?;
                let c = tokio::time::timeout(CALL_TIMEOUT * 2, client.get_async_connection())
                    .await
                    .map_err(|_| StoreError::Unavailable("timed out connecting to Redis Cluster".into()))?
                    .map_err(map_err)?;
                Ok(Conn::Cluster(c))
            }
        }
    }

    /// The waited pool of `policy`.
    async fn waiter(&self, policy: WaitPolicy) -> Result<Waiter, StoreError> {
        let mut pool = Vec::with_capacity(WAIT_CONNECTIONS);
        for _ in 0..WAIT_CONNECTIONS {
            pool.push(self.open(RESPONSE_TIMEOUT + policy.timeout).await?);
        }
        Ok(Waiter::new(policy, pool))
    }
}

/// What a waited pipeline runs before its barrier.
enum Step<'a> {
    /// A script: EVALSHA, loaded again after NOSCRIPT.
    Script(&'a Script, &'a [String], &'a [&'a str]),
    /// A plain keyed command.
    Cmd(Cmd),
}

/// The scripts, compiled into the binary so the core and Redis can never disagree on a version.
pub mod scripts {
    use super::{LazyLock, Script};

    pub static HOLD_SRC: &str = include_str!("../../../lua/hold.lua");
    pub static HOLD: LazyLock<Script> = LazyLock::new(|| Script::new(HOLD_SRC));
    pub static PAY: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/pay.lua")));
    pub static CLOSE: LazyLock<Script> =
        LazyLock::new(|| Script::new(&with_give_back(include_str!("../../../lua/close.lua"))));
    pub static REDEEM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/redeem.lua")));
    pub static REFUND: LazyLock<Script> =
        LazyLock::new(|| Script::new(&with_give_back(include_str!("../../../lua/refund.lua"))));
    pub static PUT_EVENT: LazyLock<Script> =
        LazyLock::new(|| Script::new(include_str!("../../../lua/put_event.lua")));
    pub static STOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/stock.lua")));
    pub static PAUSE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/pause.lua")));
    pub static DUE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/due.lua")));
    pub static RECONCILE: LazyLock<Script> =
        LazyLock::new(|| Script::new(include_str!("../../../lua/reconcile.lua")));
    pub static LEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/lease.lua")));

    /// The one copy of "an order's tickets, seats and usage go back" (`give_back`, used by close and refund).
    pub static GIVE_BACK_SRC: &str = include_str!("../../../lua/lib/give_back.lua");

    /// `script` with `lua/lib/give_back.lua` put after its first line: the `#!lua` shebang must open the
    /// script (Redis reads its flags there), and a Lua local function must come before its callers. One
    /// body, so still one EVALSHA whose keys stay in the event's slot.
    pub fn with_give_back(script: &str) -> String {
        let (shebang, body) = script.split_once('\n').unwrap_or((script, ""));
        debug_assert!(shebang.starts_with("#!lua"), "a sale script opens with its shebang");
        format!("{shebang}\n{GIVE_BACK_SRC}{body}")
    }
}

/// The key of the set of every event id (outside any event's slot).
const EVENTS_KEY: &str = "wk:events";

/// The standard KEYS list every event script takes (lua/README.md): `order` 13th, then the waitlist.
pub fn event_keys(event: &str, order_id: Option<&str>) -> Vec<String> {
    let p = format!("wk:{{ev:{event}}}:");
    let mut keys: Vec<String> = [
        "ev", "pools", "seatfree", "seatidx", "seatown", "usage", "idem", "jtis", "deadlines", "txns", "outbox",
        "live",
    ]
    .iter()
    .map(|k| format!("{p}{k}"))
    .collect();
    keys.push(format!("{p}o:{}", order_id.unwrap_or("")));
    keys.push(format!("{p}wait"));
    keys
}

/// A connection to one Redis or to a Cluster; both multiplexed, cheap to clone. The edge's room
/// state uses it too, so one `store` setting means the same thing on both sides.
#[derive(Clone)]
pub enum Conn {
    /// One Redis, reconnecting by itself.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// [`SaleStore`] on Redis or Redis Cluster.
#[derive(Clone)]
pub struct RedisStore {
    /// The buyer path: short timeouts, so a dead Redis fails fast.
    conn: Conn,
    /// Operator calls (`put_event`, `reconcile`): the same server, a long timeout.
    admin: Conn,
    /// With a [`WaitPolicy`] in force: the connections acknowledged changes go over, each followed by its
    /// wait. Set when connecting, or later (once) when `"auto"` finds a replica that was not there at start.
    waiter: Arc<OnceLock<Waiter>>,
    /// `"auto"`: the replicas that could be promoted, per slot; a waited call waits for no more than its
    /// master has. `None` for a fixed number.
    follow: Option<Arc<Follow>>,
}

/// What `"auto"` follows: the last look at the replicas, and the watcher's wake-up.
struct Follow {
    view: ReplicaView,
    /// Wakes the watcher before its period: a wait just timed out (a replica may be gone).
    wake: tokio::sync::Notify,
}

/// The key of the barrier write of a waited call on `event`'s slot.
fn barrier_key(event: &str) -> String {
    format!("wk:{{ev:{event}}}:sync")
}

/// The barrier key in the slot of [`EVENTS_KEY`] (its hash tag is that key's whole name).
const EVENTS_BARRIER_KEY: &str = "{wk:events}:sync";

/// Maps a client error to the store's: may the request have been applied?
fn map_err(e: RedisError) -> StoreError {
    if e.is_connection_refusal() {
        return StoreError::Unavailable(e.to_string());
    }
    // Errors the server answers before running anything.
    let refused_codes =
        ["OOM", "BUSY", "LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "NOSCRIPT", "NOREPLICAS"];
    if e.code().is_some_and(|c| refused_codes.contains(&c))
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            ) | ErrorKind::ClusterConnectionNotFound
        )
    {
        return StoreError::Unavailable(e.to_string());
    }
    if e.is_timeout() || e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() {
        return StoreError::OutcomeUnknown(e.to_string());
    }
    StoreError::Internal(e.to_string())
}

fn bad(what: &str) -> StoreError {
    StoreError::Internal(format!("unexpected reply from Redis: {what}"))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Okay => Some("OK".into()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        _ => &[],
    }
}

fn texts(v: &Value) -> Vec<String> {
    items(v).iter().filter_map(text).collect()
}

/// A flat `field, value, ...` reply as a map.
fn pairs(v: &Value) -> HashMap<String, String> {
    match v {
        Value::Map(m) => m.iter().filter_map(|(k, v)| Some((text(k)?, text(v)?))).collect(),
        _ => {
            let t = texts(v);
            t.chunks_exact(2).map(|c| (c[0].clone(), c[1].clone())).collect()
        }
    }
}

fn csv(s: Option<&String>) -> Vec<String> {
    s.map(|s| s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect()).unwrap_or_default()
}

/// An order from its hash (as the scripts return it).
fn order_from(event: &str, v: &Value) -> Result<Order, StoreError> {
    let m = pairs(v);
    let get = |k: &str| m.get(k).ok_or_else(|| bad(&format!("order without {k}")));
    let num = |k: &str| -> Result<i64, StoreError> { get(k)?.parse::<i64>().map_err(|_| bad(k)) };
    Ok(Order {
        order_id: get("id")?.clone(),
        event: event.to_string(),
        sku: get("sku")?.clone(),
        qty: num("qty")? as u32,
        seats: csv(m.get("seats")),
        user: get("user")?.clone(),
        state: OrderState::parse(get("state")?).ok_or_else(|| bad("order state"))?,
        version: num("ver")? as u64,
        amount_cents: num("amt")? as u64,
        expires_at_ms: num("exp")?,
        created_at_ms: num("created")?,
        redeemed_pools: csv(m.get("redeemed")),
        txn_id: m.get("txn").cloned(),
        identity: Identity {
            phone: m.get("phone").cloned(),
            id_number: m.get("id_number").cloned(),
            device: m.get("device").cloned(),
        },
        pools: csv(m.get("pools")),
    })
}

/// Counters and SKU availability from the `stock`/`reconcile` replies.
/// `SOLD_OUT`'s detail (lua/hold.lua): `<left>|<returning>|<ahead>|<listed>`.
fn sold_out_of(detail: &str) -> Option<SoldOut> {
    let mut f = detail.split('|').map(|x| x.parse::<u64>().ok());
    Some(SoldOut { left: f.next()??, returning: f.next()??, ahead: f.next()??, listed: f.next()?? == 1 })
}

fn stock_from(pool_ids: &str, counters: &Value, skus: &Value) -> StockView {
    let c = pairs(counters);
    let n = |k: String| c.get(&k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0).max(0) as u64;
    let mut view = StockView { holds: n("#holds".into()), hold_units: n("#units".into()), ..StockView::default() };
    for pid in pool_ids.split(',').filter(|p| !p.is_empty()) {
        view.pools.insert(
            pid.to_string(),
            PoolStock {
                capacity: n(format!("{pid}:cap")),
                available: n(format!("{pid}:avail")),
                held: n(format!("{pid}:held")),
                sold: n(format!("{pid}:sold")),
            },
        );
    }
    for pair in texts(skus).chunks_exact(2) {
        let pools = pair[1].rsplit('|').next().unwrap_or("");
        let available =
            pools.split(',').filter_map(|p| view.pools.get(p)).map(|p| p.available).min().unwrap_or(0);
        view.skus.insert(pair[0].clone(), SkuStock { available, sold_out: available == 0 });
    }
    view
}

/// The event body compiled for `put_event.lua` (its ARGV[2]).
fn compiled_spec(spec: &EventSpec) -> String {
    let pools: Vec<serde_json::Value> = spec
        .pools
        .iter()
        .map(|p| match &p.seats {
            Some(seats) => serde_json::json!({"id": p.id, "seats": seats}),
            None => serde_json::json!({"id": p.id, "cap": p.capacity()}),
        })
        .collect();
    let skus: Vec<serde_json::Value> = spec
        .skus
        .iter()
        .map(|s| serde_json::json!({"id": s.id, "price": s.price_cents.to_string(), "max": s.max_qty(), "pools": s.pools}))
        .collect();
    let limits: Vec<String> = spec.limits.iter().map(|l| format!("{}:{}", l.dimension.as_str(), l.max)).collect();
    serde_json::json!({
        "opens": spec.opens_at_ms(),
        "closes": spec.closes_at_ms(),
        "hold": spec.hold_seconds as i64 * 1000,
        "pools": pools,
        "skus": skus,
        "limits": limits.join(","),
    })
    .to_string()
}

fn dimension(s: &str) -> Option<Dimension> {
    Dimension::ALL.into_iter().find(|d| d.as_str() == s)
}

impl RedisStore {
    /// Connects to one Redis, e.g. `redis://127.0.0.1:6379/0`, acknowledging changes without waiting for
    /// replicas (`wait-replicas = 0`; the config's default is `"auto"`, [`WaitSettings::default`]). Fails when
    /// the URL is bad or Redis does not answer now; afterwards the connection is re-established by itself
    /// whenever it drops.
    pub async fn connect(url: &str) -> Result<RedisStore, StoreError> {
        Self::connect_with(url, WaitPolicy::default()).await
    }

    /// [`connect`](Self::connect), and every acknowledged change waits as `wait` says: a fixed
    /// [`WaitPolicy`], or [`WaitSettings`] from the config, whose `"auto"` is resolved here from the replicas
    /// the master has (the policy in force and why are logged).
    pub async fn connect_with(url: &str, wait: impl Into<WaitSettings>) -> Result<RedisStore, StoreError> {
        let wait = wait.into();
        let client = redis::Client::open(url).map_err(|e| StoreError::Internal(format!("bad Redis URL: {e}")))?;
        let store = Self::open(Target::Single(client), wait).await?;
        if !wait.aof {
            store.warn_unless_durable().await;
        }
        Ok(store)
    }

    /// A hold or payment acknowledged by a Redis without `appendfsync always` can be lost in a crash
    /// (DESIGN §6): say so at start-up. Managed Redis may refuse CONFIG; then nothing is said.
    async fn warn_unless_durable(&self) {
        let Ok(v) = self.cmd(redis::cmd("CONFIG").arg("GET").arg("append*")).await else { return };
        let cfg = pairs(&v);
        let (aof, fsync) = (cfg.get("appendonly").map(String::as_str), cfg.get("appendfsync").map(String::as_str));
        if aof.is_some() && (aof != Some("yes") || fsync != Some("always")) {
            tracing::warn!(
                appendonly = aof.unwrap_or("?"),
                appendfsync = fsync.unwrap_or("?"),
                "the sale's Redis does not fsync every write (appendonly yes + appendfsync always): \
                 acknowledged holds and payments can be lost if it crashes"
            );
        }
    }

    /// Connects to a Redis Cluster through any of its nodes (`redis://host:port` each), acknowledging changes
    /// without waiting for replicas (`wait-replicas = 0`).
    pub async fn connect_cluster(seeds: &[String]) -> Result<RedisStore, StoreError> {
        Self::connect_cluster_with(seeds, WaitPolicy::default()).await
    }

    /// [`connect_cluster`](Self::connect_cluster), and every acknowledged change waits as `wait` says, on the
    /// master of the event's slot (`"auto"`: resolved from the replicas of every master).
    pub async fn connect_cluster_with(seeds: &[String], wait: impl Into<WaitSettings>) -> Result<RedisStore, StoreError> {
        Self::open(Target::Cluster(seeds.to_vec()), wait.into()).await
    }

    /// The buyer's and the operator's connections, the policy in force and, when it waits, its pool.
    async fn open(target: Target, wait: WaitSettings) -> Result<RedisStore, StoreError> {
        let conn = target.open(RESPONSE_TIMEOUT).await?;
        let admin = target.open(ADMIN_TIMEOUT).await?;
        let auto = wait.replicas == WaitReplicas::Auto;
        let cluster = matches!(target, Target::Cluster(_));
        let follow = auto.then(|| Arc::new(Follow { view: ReplicaView::new(cluster), wake: tokio::sync::Notify::new() }));
        let store = RedisStore { conn, admin, waiter: Arc::new(OnceLock::new()), follow };
        store.now_ms().await?;
        let policy = store.resolve(wait).await?;
        if policy.is_on() {
            let _ = store.waiter.set(target.waiter(policy).await?);
            store.check_wait_policy().await?;
        }
        if let Some(follow) = &store.follow {
            // The first look before the first change; where it fails, changes wait as resolved until the
            // watcher's next look succeeds.
            match look(&store.conn).await {
                Ok(t) => store.note(follow, t),
                Err(e) => tracing::warn!(error = %e, "redis.wait-replicas = \"auto\": cannot read the replicas yet; looking again"),
            }
            store.spawn_follow(target, policy);
        }
        Ok(store)
    }

    /// The policy in force for `wait` (`"auto"`: 1 replica when any master has a connected replica, else 0),
    /// logged with why.
    async fn resolve(&self, wait: WaitSettings) -> Result<WaitPolicy, StoreError> {
        let with = |replicas| WaitPolicy { replicas, aof: wait.aof, timeout: wait.timeout };
        let ms = wait.timeout.as_millis();
        match wait.replicas {
            WaitReplicas::Count(0) => {
                // A fixed 0 works without knowing the replicas: a failed look only leaves the warning out.
                match replicas_per_master(&self.conn).await {
                    Ok(found) if found.iter().any(|(_, n)| *n > 0) => tracing::warn!(
                        masters = %describe_replicas(&found),
                        "redis.wait-replicas = 0 although the store has replicas: a change acknowledged just before \
                         its master fails can be missing on the replica promoted (asynchronous replication); leave \
                         the setting out (\"auto\") to have every change wait for one replica"
                    ),
                    _ => tracing::info!("redis.wait-replicas = 0: changes are acknowledged without waiting for a replica"),
                }
                Ok(with(0))
            }
            WaitReplicas::Count(n) => {
                tracing::info!("redis.wait-replicas = {n}: every acknowledged change waits for {n} replica(s) ({ms} ms at most)");
                Ok(with(n))
            }
            WaitReplicas::Auto => {
                let found = replicas_per_master(&self.conn).await.map_err(|e| {
                    StoreError::Unavailable(format!(
                        "redis.wait-replicas = \"auto\" (the default) finds the replicas with INFO replication on \
                         every master, which failed: {e} (set redis.wait-replicas to a number to skip it)"
                    ))
                })?;
                let masters = describe_replicas(&found);
                let with_replicas = found.iter().filter(|(_, n)| *n > 0).count();
                if with_replicas > 0 {
                    tracing::info!(
                        masters = %masters,
                        "redis.wait-replicas = \"auto\": {with_replicas} of {} master(s) have a connected replica, so \
                         every acknowledged change waits for 1 replica ({ms} ms at most) before its answer",
                        found.len()
                    );
                    Ok(with(1))
                } else {
                    tracing::info!(
                        masters = %masters,
                        "redis.wait-replicas = \"auto\": no master has a connected replica, so changes are \
                         acknowledged without waiting; looked at again every {} s, and once a replica connects every \
                         change waits for 1",
                        AUTO_REDETECT.as_secs()
                    );
                    Ok(with(0))
                }
            }
        }
    }

    /// `"auto"`: looks at the replicas every [`FOLLOW_PERIOD`] (at once when a wait timed out) while the store
    /// is in use. Without a wait yet (no replica at start) it turns the wait on the first time a master has a
    /// replica (looked for every [`AUTO_REDETECT`]); with one, each look updates what waited calls wait for.
    fn spawn_follow(&self, target: Target, policy: WaitPolicy) {
        let slot = Arc::downgrade(&self.waiter);
        let follow = Arc::downgrade(self.follow.as_ref().expect("auto follows"));
        let store = RedisStore { follow: None, ..self.clone() };
        tokio::spawn(async move {
            let mut since_redetect = Duration::ZERO;
            loop {
                {
                    // Every clone of the store is gone: nothing to follow.
                    let Some(f) = follow.upgrade() else { return };
                    tokio::select! {
                        _ = tokio::time::sleep(FOLLOW_PERIOD) => since_redetect += FOLLOW_PERIOD,
                        _ = f.wake.notified() => {}
                    }
                }
                let (Some(slot), Some(f)) = (slot.upgrade(), follow.upgrade()) else { return };
                if slot.get().is_none() || policy.aof && slot.get().is_some_and(|w| w.policy().replicas == 0) {
                    if since_redetect < AUTO_REDETECT {
                        continue;
                    }
                    since_redetect = Duration::ZERO;
                    if !store.turn_on(&target, &slot, policy).await {
                        continue;
                    }
                }
                match look(&store.conn).await {
                    Ok(t) => store.note(&f, t),
                    Err(e) => tracing::debug!(error = %e, "redis.wait-replicas = \"auto\": looking at the replicas failed; trying again"),
                }
            }
        });
    }

    /// `"auto"` without a wait so far: turns it on when a master now has a connected replica. `true` when on.
    async fn turn_on(&self, target: &Target, slot: &OnceLock<Waiter>, policy: WaitPolicy) -> bool {
        let found = match replicas_per_master(&self.conn).await {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(error = %e, "redis.wait-replicas = \"auto\": looking for replicas failed; trying again");
                return false;
            }
        };
        if !found.iter().any(|(_, n)| *n > 0) {
            return false;
        }
        let on = WaitPolicy { replicas: 1, ..policy };
        match slot.get() {
            // wait-aof: its pool is there already; it now waits for a replica's AOF too.
            Some(w) => w.replicas.store(1, Ordering::Relaxed),
            None => match target.waiter(on).await {
                Ok(w) => {
                    let _ = slot.set(w);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "redis.wait-replicas = \"auto\": a replica connected, but the \
                         waiting connections could not be opened; trying again");
                    return false;
                }
            },
        }
        tracing::info!(
            masters = %describe_replicas(&found),
            "redis.wait-replicas = \"auto\": a replica connected, so from now on every acknowledged change \
             waits for 1 replica ({} ms at most) before its answer, on every master that has one",
            on.timeout.as_millis()
        );
        true
    }

    /// Takes a look at the replicas into `follow`, and logs each master that lost its last replica that could
    /// be promoted, or has one again, once (only while changes wait at all).
    fn note(&self, follow: &Follow, now: Topology) {
        let before = follow.view.update(now.clone());
        if self.waiter.get().is_none_or(|w| w.policy().replicas == 0) {
            return;
        }
        let was_bare: Vec<String> = before.as_ref().map(|t| t.bare().into_iter().map(str::to_string).collect()).unwrap_or_default();
        let is_bare = now.bare();
        for node in is_bare.iter().filter(|n| !was_bare.iter().any(|w| w == *n)) {
            tracing::warn!(
                node = %node,
                masters = %now.describe(),
                "this Redis master has no replica left that could be promoted in its place: changes on it are \
                 acknowledged without waiting (redis.wait-replicas = \"auto\"; a wait would protect nothing and stop \
                 its share of the sale) until a replica is back — a loss of this master now loses what it acknowledged \
                 since"
            );
        }
        for node in was_bare.iter().filter(|w| now.masters.iter().any(|m| &m.node == *w && m.promotable > 0)) {
            tracing::info!(node = %node, "this Redis master has a replica again: changes on it wait for 1 replica again");
        }
    }

    /// Masters whose changes are acknowledged without waiting because no replica is left that could be
    /// promoted (`wait-replicas = "auto"` while changes wait at all); 0 otherwise. The metric
    /// `wicket_core_redis_masters_unreplicated`.
    pub fn unreplicated_masters(&self) -> usize {
        let Some(f) = &self.follow else { return 0 };
        if self.waiter.get().is_none_or(|w| w.policy().replicas == 0) {
            return 0;
        }
        f.view.last().map_or(0, |t| t.bare().len())
    }

    /// The wait policy in force (`None` when changes are acknowledged without waiting). With `"auto"` it may
    /// turn on after start ([`AUTO_REDETECT`]), never off.
    pub fn wait_policy(&self) -> Option<WaitPolicy> {
        self.waiter.get().map(Waiter::policy)
    }

    /// At start, with a wait policy: `WAITAOF` must work on every master (`redis.wait-aof`: Redis ≥ 7.2 with
    /// `appendonly yes`), else the core refuses to start; a master with fewer connected replicas than
    /// `redis.wait-replicas` is logged (every change on it will answer 503 until they are back).
    async fn check_wait_policy(&self) -> Result<(), StoreError> {
        let Some(policy) = self.wait_policy() else { return Ok(()) };
        if policy.aof {
            // numlocal 1 with nothing written on this connection answers at once, or fails when unsupported.
            let mut probe = redis::cmd("WAITAOF");
            probe.arg(1).arg(0).arg(1);
            let refused = |why: String| {
                StoreError::Internal(format!(
                    "redis.wait-aof needs WAITAOF (Redis 7.2 or later) and appendonly yes on every master: {why}"
                ))
            };
            for (node, reply) in on_every_master(&self.conn, probe).await.map_err(|e| refused(e.to_string()))? {
                if let Value::ServerError(e) = reply {
                    return Err(refused(format!("{node} answered {e:?}")));
                }
            }
        }
        // "auto" does not wait where no replica is left (logged by the first look, `note`).
        if policy.replicas > 0 && self.follow.is_none() {
            for (node, connected) in replicas_per_master(&self.conn).await? {
                if connected < policy.replicas {
                    tracing::warn!(
                        node = %node,
                        connected_replicas = connected,
                        wait_replicas = policy.replicas,
                        "this master has fewer connected replicas than every change waits for: every change on it \
                         will answer 503 durability_timeout until enough replicas are connected"
                    );
                }
            }
        }
        Ok(())
    }

    /// Runs a script on the buyer path, bounded by [`CALL_TIMEOUT`].
    async fn run(&self, script: &Script, keys: &[String], args: &[&str]) -> Result<Value, StoreError> {
        Self::run_on(self.conn.clone(), CALL_TIMEOUT, script, keys, args).await
    }

    /// Runs an operator's script, bounded by [`ADMIN_TIMEOUT`].
    async fn run_admin(&self, script: &Script, keys: &[String], args: &[&str]) -> Result<Value, StoreError> {
        self.ping_admin().await?;
        Self::run_on(self.admin.clone(), ADMIN_TIMEOUT, script, keys, args).await
    }

    /// The operator's connection is idle most of the time, so a Redis restart is usually found by the next
    /// operator call. A PING finds it first (and starts the reconnect) without risking a write.
    async fn ping_admin(&self) -> Result<(), StoreError> {
        for _ in 0..3 {
            let mut conn = self.admin.clone();
            match tokio::time::timeout(CALL_TIMEOUT, redis::cmd("PING").query_async::<Value>(&mut conn)).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) if e.is_unrecoverable_error() || e.is_io_error() => continue,
                Ok(Err(e)) => return Err(map_err(e)),
                Err(_) => return Err(StoreError::Unavailable("Redis did not answer a PING in time".into())),
            }
        }
        Ok(())
    }

    async fn run_on(
        mut conn: Conn,
        bound: Duration,
        script: &Script,
        keys: &[String],
        args: &[&str],
    ) -> Result<Value, StoreError> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        for a in args {
            inv.arg(*a);
        }
        let attempt = async {
            // `invoke_async` reloads the script once after NOSCRIPT; a flush racing that reload (or a
            // failover to a node without it) answers NOSCRIPT again, and nothing ran: try again.
            let mut tries = 0;
            loop {
                match inv.invoke_async::<Value>(&mut conn).await {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) && tries < 5 => tries += 1,
                    r => return r,
                }
            }
        };
        match tokio::time::timeout(bound, attempt).await {
            Ok(r) => r.map_err(map_err),
            Err(_) => Err(StoreError::OutcomeUnknown("Redis did not answer in time".into())),
        }
    }

    /// Runs a script that makes a change the core acknowledges: with a wait policy, waited
    /// ([`waited`](Self::waited)) on `event`'s slot; else as [`run`](Self::run) / [`run_admin`](Self::run_admin).
    async fn run_ack(
        &self,
        script: &Script,
        keys: &[String],
        args: &[&str],
        event: &str,
        admin: bool,
    ) -> Result<Value, StoreError> {
        match self.waiter.get() {
            Some(w) => self.waited(w, Step::Script(script, keys, args), &barrier_key(event), admin).await,
            None if admin => self.run_admin(script, keys, args).await,
            None => self.run(script, keys, args).await,
        }
    }

    /// One waited call: `[step, INCR barrier, WAIT]` (or `WAITAOF`) as one pipeline on one connection, so
    /// all three run on the master of the barrier's slot (which must be `step`'s slot), in that order. The
    /// wait covers `step`'s own write and, through the barrier, everything that master had when `step`
    /// ran. Returns `step`'s reply once the wait met the policy; [`StoreError::DurabilityTimeout`] when it
    /// did not (`step` ran: its change stays on the master).
    async fn waited(&self, w: &Waiter, step: Step<'_>, barrier: &str, admin: bool) -> Result<Value, StoreError> {
        let first = match &step {
            Step::Script(script, keys, args) => {
                let mut c = redis::cmd("EVALSHA");
                c.arg(script.get_hash()).arg(keys.len()).arg(*keys).arg(*args);
                c
            }
            Step::Cmd(c) => c.clone(),
        };
        let strict = w.policy();
        // "auto": the slot's master as the last look saw it, waiting for no more replicas than it has that
        // could be promoted — sent to that very master, so the count and the node that runs the change
        // come from one view (super::replicas). Without a look, or after a redirect: the client's own
        // routing and the strict wait.
        let mut route = self.follow.as_ref().and_then(|f| f.view.route(barrier));
        let (mut conn, bound) = if admin {
            self.ping_admin().await?;
            (self.admin.clone(), ADMIN_TIMEOUT + strict.timeout)
        } else {
            (w.conn(), CALL_TIMEOUT + strict.timeout)
        };
        let mut policy = strict;
        let attempt = async {
            // NOSCRIPT (a flush, a failover to a node without the script) and MOVED/ASK (a slot map older
            // than a failover) mean the step did not run: fix and send again, a few times.
            let mut tries = 0;
            loop {
                policy = strict;
                if let Some(r) = &route {
                    policy.replicas = policy.replicas.min(r.promotable);
                }
                let mut pipe = redis::pipe();
                pipe.ignore_errors().add_command(first.clone()).cmd("INCR").arg(barrier).add_command(policy.command());
                let sent = match (&route, &mut conn) {
                    (Some(r), Conn::Cluster(c)) => match r.node.rsplit_once(':').and_then(|(h, p)| Some((h.to_string(), p.parse().ok()?))) {
                        Some((host, port)) => {
                            use redis::cluster_routing::SingleNodeRoutingInfo;
                            c.route_pipeline(pipe, 0, 3, SingleNodeRoutingInfo::ByAddress { host, port }).await
                        }
                        None => pipe.query_async::<Vec<Value>>(&mut conn).await,
                    },
                    _ => pipe.query_async::<Vec<Value>>(&mut conn).await,
                };
                let replies = sent.map_err(map_err)?;
                let [reply, barrier_reply, wait_reply] = <[Value; 3]>::try_from(replies)
                    .map_err(|r| bad(&format!("{} replies to a waited pipeline of 3", r.len())))?;
                if let Value::ServerError(e) = reply {
                    let e = RedisError::from(e);
                    tries += 1;
                    match e.kind() {
                        ErrorKind::Server(ServerErrorKind::NoScript) if tries < 5 => {
                            if let Step::Script(script, ..) = &step {
                                script.prepare_invoke().load_async(&mut conn).await.map_err(map_err)?;
                            }
                            continue;
                        }
                        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) if tries < 5 => {
                            if route.take().is_some() {
                                // The look is older than the slot's move: the client's routing and the
                                // strict wait for this call, and a new look now.
                                if let Some(f) = &self.follow {
                                    f.wake.notify_one();
                                }
                                continue;
                            }
                            // A keyed command follows the redirect and has the client rebuild its slot map.
                            let _ = redis::cmd("EXISTS").arg(barrier).query_async::<Value>(&mut conn).await;
                            continue;
                        }
                        _ => return Err(map_err(e)),
                    }
                }
                // The step ran; from here on an error means its change may not be confirmed.
                if let Value::ServerError(e) = barrier_reply {
                    return Err(StoreError::DurabilityTimeout(format!("the barrier write was refused: {e:?}")));
                }
                if let Value::ServerError(e) = &wait_reply {
                    return Err(StoreError::DurabilityTimeout(format!("the wait was refused: {e:?}")));
                }
                return policy.check(&wait_reply).map(|()| reply).map_err(StoreError::DurabilityTimeout);
            }
        };
        let result = match tokio::time::timeout(bound, attempt).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::OutcomeUnknown("Redis did not answer in time".into())),
        };
        if let (Err(StoreError::DurabilityTimeout(_) | StoreError::Unavailable(_) | StoreError::OutcomeUnknown(_)), Some(f)) =
            (&result, &self.follow)
        {
            // A replica or the master may be gone: look now rather than at the next period.
            f.wake.notify_one();
        }
        result
    }

    /// Runs a plain command, bounded by [`CALL_TIMEOUT`].
    async fn cmd(&self, cmd: &Cmd) -> Result<Value, StoreError> {
        cmd_on(&self.conn, cmd).await
    }

    /// Runs a transition script on an order: `(code, detail, order)`.
    async fn transition(
        &self,
        script: &Script,
        order_id: &str,
        args: &[&str],
    ) -> Result<Option<(String, String, Option<Order>)>, StoreError> {
        let Some(event) = event_of_order(order_id) else { return Ok(None) };
        let reply = self.run_ack(script, &event_keys(event, Some(order_id)), args, event, false).await?;
        let parts = items(&reply);
        let code = parts.first().and_then(text).ok_or_else(|| bad("no code"))?;
        let detail = parts.get(1).and_then(text).unwrap_or_default();
        let order = match parts.get(2) {
            Some(v) => Some(order_from(event, v)?),
            None => None,
        };
        Ok(Some((code, detail, order)))
    }
}

fn need(order: Option<Order>) -> Result<Order, StoreError> {
    order.ok_or_else(|| bad("missing order"))
}

#[async_trait]
impl SaleStore for RedisStore {
    async fn now_ms(&self) -> Result<i64, StoreError> {
        let v = self.cmd(&redis::cmd("TIME")).await?;
        let t = texts(&v);
        let secs: i64 = t.first().and_then(|s| s.parse().ok()).ok_or_else(|| bad("TIME"))?;
        let micros: i64 = t.get(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad("TIME"))?;
        Ok(secs * 1000 + micros / 1000)
    }

    async fn put_event(&self, id: &str, spec: &EventSpec, force: bool) -> Result<PutEventOutcome, StoreError> {
        let body = serde_json::to_string(spec).map_err(|e| StoreError::Internal(e.to_string()))?;
        let compiled = compiled_spec(spec);
        let reply = self
            .run_ack(&scripts::PUT_EVENT, &event_keys(id, None), &[&body, &compiled, if force { "1" } else { "0" }], id, true)
            .await?;
        let t = texts(&reply);
        let outcome = match t.first().map(String::as_str) {
            Some("CREATED") => PutEventOutcome::Created,
            Some("UPDATED") => PutEventOutcome::Updated,
            Some("NEEDS_FORCE") => {
                PutEventOutcome::NeedsForce("the sale is open: a change that moves stock needs ?force=true".into())
            }
            Some("REJECTED") => PutEventOutcome::Rejected(
                t[1..].chunks_exact(2).map(|c| FieldError { path: c[0].clone(), message: c[1].clone() }).collect(),
            ),
            _ => return Err(bad("put_event")),
        };
        if matches!(outcome, PutEventOutcome::Created | PutEventOutcome::Updated) {
            // Outside the event's slot, so not in the script; idempotent, and redone by any retried PUT.
            let mut sadd = redis::cmd("SADD");
            sadd.arg(EVENTS_KEY).arg(id);
            match self.waiter.get() {
                Some(w) => {
                    self.waited(w, Step::Cmd(sadd), EVENTS_BARRIER_KEY, false).await?;
                }
                None => {
                    self.cmd(&sadd).await?;
                }
            }
        }
        Ok(outcome)
    }

    async fn get_event(&self, id: &str) -> Result<Option<EventRecord>, StoreError> {
        let keys = event_keys(id, None);
        let v = self.cmd(redis::cmd("HMGET").arg(&keys[0]).arg("spec").arg("paused")).await?;
        let parts = items(&v);
        let Some(spec) = parts.first().and_then(text) else { return Ok(None) };
        let spec: EventSpec = serde_json::from_str(&spec).map_err(|e| bad(&format!("event spec: {e}")))?;
        let paused = parts.get(1).and_then(text).is_some_and(|p| p == "1");
        Ok(Some(EventRecord { id: id.to_string(), spec, paused }))
    }

    async fn list_events(&self) -> Result<Vec<String>, StoreError> {
        let v = self.cmd(redis::cmd("SMEMBERS").arg(EVENTS_KEY)).await?;
        let mut ids = texts(&v);
        ids.sort();
        Ok(ids)
    }

    async fn set_paused(&self, id: &str, paused: bool) -> Result<bool, StoreError> {
        let v = self.run_ack(&scripts::PAUSE, &event_keys(id, None), &[if paused { "1" } else { "0" }], id, false).await?;
        Ok(matches!(v, Value::Int(1)))
    }

    async fn stock(&self, id: &str) -> Result<Option<StockView>, StoreError> {
        let v = self.run(&scripts::STOCK, &event_keys(id, None), &[]).await?;
        let parts = items(&v);
        if parts.is_empty() {
            return Ok(None);
        }
        let pool_ids = text(&parts[0]).unwrap_or_default();
        let mut view = stock_from(&pool_ids, parts.get(1).unwrap_or(&Value::Nil), parts.get(2).unwrap_or(&Value::Nil));
        view.waiting = parts.get(3).and_then(text).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        Ok(Some(view))
    }

    async fn hold(&self, req: &HoldRequest) -> Result<HoldOutcome, StoreError> {
        if event_of_order(&req.order_id) != Some(req.event.as_str()) {
            return Err(StoreError::Internal(format!("order id {} is not of event {}", req.order_id, req.event)));
        }
        let present = |v: &Option<String>| v.as_ref().map(|x| format!("={x}")).unwrap_or_default();
        let qty = req.qty.to_string();
        let jti_exp = req.jti_expires_ms.to_string();
        let (phone, idn, device) =
            (present(&req.identity.phone), present(&req.identity.id_number), present(&req.identity.device));
        let mut args: Vec<&str> = vec![
            &req.order_id,
            &req.sku,
            &qty,
            &req.user,
            &phone,
            &idn,
            &device,
            &req.idempotency_key,
            &req.fingerprint,
            &req.jti,
            &jti_exp,
            if req.wait { "1" } else { "0" },
        ];
        args.extend(req.seats.iter().map(String::as_str));
        let reply =
            self.run_ack(&scripts::HOLD, &event_keys(&req.event, Some(&req.order_id)), &args, &req.event, false).await?;
        let parts = items(&reply);
        let code = parts.first().and_then(text).ok_or_else(|| bad("hold: no code"))?;
        let detail = parts.get(1).and_then(text).unwrap_or_default();
        Ok(match code.as_str() {
            "CREATED" => HoldOutcome::Created(order_from(&req.event, parts.get(2).ok_or_else(|| bad("hold"))?)?),
            "REPLAY" => match self.get_order(&detail).await? {
                Some(o) => HoldOutcome::Replay(o),
                None => HoldOutcome::IdemConflict,
            },
            "IDEM_CONFLICT" => HoldOutcome::IdemConflict,
            "NOT_FOUND" => HoldOutcome::NotFound,
            "NOT_OPEN" => HoldOutcome::NotOpen,
            "PAUSED" => HoldOutcome::Paused,
            "TOKEN_REPLAY" => HoldOutcome::TokenReplay,
            "SOLD_OUT" => HoldOutcome::SoldOut(sold_out_of(&detail).ok_or_else(|| bad("hold: sold out"))?),
            "LIMIT" => HoldOutcome::LimitExceeded(dimension(&detail).ok_or_else(|| bad("hold: dimension"))?),
            "SEAT_TAKEN" => HoldOutcome::SeatTaken(detail),
            "REJECTED" => HoldOutcome::Rejected(detail),
            other => return Err(bad(&format!("hold code {other}"))),
        })
    }

    async fn find_replay(
        &self,
        event: &str,
        user: &str,
        idempotency_key: &str,
        fingerprint: &str,
    ) -> Result<Option<HoldOutcome>, StoreError> {
        // The hold script's idempotency record (lua/hold.lua): `<user>\n<key>` → `<fingerprint>\n<order id>`.
        let keys = event_keys(event, None);
        let v = self.cmd(redis::cmd("HGET").arg(&keys[6]).arg(format!("{user}\n{idempotency_key}"))).await?;
        let Some(seen) = text(&v) else { return Ok(None) };
        let Some((fp, order_id)) = seen.split_once('\n') else { return Err(bad("idempotency record")) };
        if fp != fingerprint {
            return Ok(Some(HoldOutcome::IdemConflict));
        }
        // A replay acknowledges the hold again: with a wait policy, the order is read in a waited call, so
        // the answer is confirmed on the replicas even when the hold's own answer was a durability timeout.
        if let Some(w) = self.waiter.get() {
            let Some(ev) = event_of_order(order_id) else { return Err(bad("idempotency record")) };
            let mut read = redis::cmd("HGETALL");
            read.arg(&event_keys(ev, Some(order_id))[12]);
            let v = self.waited(w, Step::Cmd(read), &barrier_key(ev), false).await?;
            return Ok(Some(if pairs(&v).is_empty() { HoldOutcome::IdemConflict } else { HoldOutcome::Replay(order_from(ev, &v)?) }));
        }
        Ok(Some(match self.get_order(order_id).await? {
            Some(o) => HoldOutcome::Replay(o),
            None => HoldOutcome::IdemConflict,
        }))
    }

    async fn get_order(&self, order_id: &str) -> Result<Option<Order>, StoreError> {
        let Some(event) = event_of_order(order_id) else { return Ok(None) };
        let keys = event_keys(event, Some(order_id));
        let v = self.cmd(redis::cmd("HGETALL").arg(&keys[12])).await?;
        if pairs(&v).is_empty() {
            return Ok(None);
        }
        Ok(Some(order_from(event, &v)?))
    }

    async fn pay(&self, req: &PaymentRequest) -> Result<PayOutcome, StoreError> {
        let amount = req.amount_cents.to_string();
        let Some((code, detail, order)) = self.transition(&scripts::PAY, &req.order_id, &[&req.txn_id, &amount]).await?
        else {
            return Ok(PayOutcome::NotFound);
        };
        Ok(match code.as_str() {
            "PAID" => PayOutcome::Paid(need(order)?),
            "ALREADY_PAID" => PayOutcome::AlreadyPaid(need(order)?),
            "REFUND_REQUIRED" => PayOutcome::RefundRequired(need(order)?),
            "AMOUNT_MISMATCH" => PayOutcome::AmountMismatch { expected: detail.parse().map_err(|_| bad("amount"))? },
            "NOT_FOUND" => PayOutcome::NotFound,
            other => return Err(bad(&format!("pay code {other}"))),
        })
    }

    async fn close(&self, order_id: &str, reason: CloseReason) -> Result<TransitionOutcome, StoreError> {
        let r = self.transition(&scripts::CLOSE, order_id, &[reason.as_str()]).await?;
        transition_outcome(r)
    }

    async fn redeem(&self, order_id: &str, pool: Option<&str>) -> Result<TransitionOutcome, StoreError> {
        let r = self.transition(&scripts::REDEEM, order_id, &[pool.unwrap_or("")]).await?;
        transition_outcome(r)
    }

    async fn refund(&self, order_id: &str) -> Result<TransitionOutcome, StoreError> {
        let r = self.transition(&scripts::REFUND, order_id, &[]).await?;
        transition_outcome(r)
    }

    async fn due_holds(&self, event: &str, limit: usize) -> Result<Vec<(String, i64)>, StoreError> {
        let v = self.run(&scripts::DUE, &event_keys(event, None), &[&limit.to_string()]).await?;
        texts(&v)
            .chunks_exact(2)
            .map(|c| Ok((c[0].clone(), c[1].parse::<f64>().map_err(|_| bad("deadline"))? as i64)))
            .collect()
    }

    async fn created_orders(
        &self,
        event: &str,
        cursor: Option<&str>,
        count: usize,
    ) -> Result<(Vec<(String, i64)>, Option<String>), StoreError> {
        // ZSCAN over the deadlines set: bounded work per call, and every member present for the whole scan is
        // returned at least once, however the set changes meanwhile (SCAN's guarantee).
        let cursor = cursor.unwrap_or("0");
        if cursor.is_empty() || !cursor.bytes().all(|b| b.is_ascii_digit()) {
            return Err(StoreError::Internal(format!("bad cursor {cursor}")));
        }
        let keys = event_keys(event, None);
        let v = self.cmd(redis::cmd("ZSCAN").arg(&keys[8]).arg(cursor).arg("COUNT").arg(count.max(1))).await?;
        let parts = items(&v);
        let next = parts.first().and_then(text).ok_or_else(|| bad("ZSCAN cursor"))?;
        let page = texts(parts.get(1).unwrap_or(&Value::Nil))
            .chunks_exact(2)
            .map(|c| Ok((c[0].clone(), c[1].parse::<f64>().map_err(|_| bad("deadline"))? as i64)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((page, (next != "0").then_some(next)))
    }

    fn is_external(&self) -> bool {
        true
    }

    fn unreplicated_masters(&self) -> usize {
        RedisStore::unreplicated_masters(self)
    }

    async fn server_ids(&self) -> Result<Vec<ServerId>, StoreError> {
        let mut ids = match &self.conn {
            Conn::Single(_) => {
                let v = self.cmd(redis::cmd("INFO").arg("server")).await?;
                let info = text(&v).ok_or_else(|| bad("INFO"))?;
                let node = info_field(&info, "tcp_port").map(|p| format!("port {p}")).unwrap_or_default();
                vec![ServerId { node, run_id: info_field(&info, "run_id").ok_or_else(|| bad("INFO without run_id"))? }]
            }
            Conn::Cluster(c) => {
                // Every master answers; a failover or a restarted master shows as a run id we have not seen.
                use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                let mut conn = c.clone();
                let mut info = redis::cmd("INFO");
                info.arg("server");
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let v = match tokio::time::timeout(CALL_TIMEOUT, conn.route_command(info, routing)).await {
                    Ok(r) => r.map_err(map_err)?,
                    Err(_) => return Err(StoreError::OutcomeUnknown("Redis did not answer in time".into())),
                };
                let Value::Map(nodes) = v else { return Err(bad("INFO from the masters")) };
                let mut ids = Vec::with_capacity(nodes.len());
                for (node, reply) in &nodes {
                    if let Value::ServerError(e) = reply {
                        return Err(StoreError::Unavailable(format!("INFO on a master: {e:?}")));
                    }
                    let info = text(reply).ok_or_else(|| bad("INFO"))?;
                    let run_id = info_field(&info, "run_id").ok_or_else(|| bad("INFO without run_id"))?;
                    ids.push(ServerId { node: text(node).unwrap_or_default(), run_id });
                }
                if ids.is_empty() {
                    return Err(StoreError::Unavailable("no Redis Cluster master answered".into()));
                }
                ids
            }
        };
        ids.sort();
        Ok(ids)
    }

    async fn outbox(&self, event: &str, after: Option<&str>, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        let start = match after {
            None => "-".to_string(),
            Some(c) => {
                if super::embedded::parse_cursor(c).is_none() {
                    return Err(StoreError::Internal(format!("bad cursor {c}")));
                }
                format!("({c}")
            }
        };
        let keys = event_keys(event, None);
        let count = limit.min(MAX_OUTBOX_PAGE);
        if count == 0 {
            return Ok(Vec::new());
        }
        let v = self.cmd(redis::cmd("XRANGE").arg(&keys[10]).arg(start).arg("+").arg("COUNT").arg(count)).await?;
        let mut out = Vec::new();
        for entry in items(&v) {
            let e = items(entry);
            let id = e.first().and_then(text).ok_or_else(|| bad("stream id"))?;
            let f = pairs(e.get(1).unwrap_or(&Value::Nil));
            let get = |k: &str| f.get(k).cloned().ok_or_else(|| bad(&format!("outbox entry without {k}")));
            out.push(OutboxEntry {
                cursor: id,
                order_id: get("o")?,
                state: OrderState::parse(&get("s")?).ok_or_else(|| bad("outbox state"))?,
                version: get("v")?.parse().map_err(|_| bad("outbox version"))?,
                at: get("at")?.parse().map_err(|_| bad("outbox at"))?,
                kind: get("k")?,
                txn_id: f.get("txn").cloned(),
                amount_cents: f.get("amt").and_then(|a| a.parse().ok()),
                pool: f.get("pool").cloned(),
            });
        }
        Ok(out)
    }

    async fn reconcile(&self, event: &str) -> Result<Option<ReconcileReport>, StoreError> {
        let prefix = format!("wk:{{ev:{event}}}:o:");
        let v = self.run_admin(&scripts::RECONCILE, &event_keys(event, None), &[&prefix]).await?;
        let parts = items(&v);
        if parts.is_empty() {
            return Ok(None);
        }
        let pool_ids = text(&parts[0]).unwrap_or_default();
        let stock = stock_from(&pool_ids, parts.get(1).unwrap_or(&Value::Nil), parts.get(2).unwrap_or(&Value::Nil));
        let mut held = BTreeMap::new();
        let mut sold = BTreeMap::new();
        for c in texts(parts.get(3).unwrap_or(&Value::Nil)).chunks_exact(3) {
            held.insert(c[0].clone(), c[1].parse().unwrap_or(0));
            sold.insert(c[0].clone(), c[2].parse().unwrap_or(0));
        }
        Ok(Some(reconcile_from(&stock, &held, &sold)))
    }

    async fn try_lease(&self, name: &str, holder: &str, ttl_ms: u64) -> Result<bool, StoreError> {
        let key = format!("wk:lease:{name}");
        let v = self.run(&scripts::LEASE, &[key], &[holder, &ttl_ms.max(1).to_string()]).await?;
        Ok(matches!(v, Value::Int(1)))
    }
}

/// Runs a plain command on `conn`, bounded by [`CALL_TIMEOUT`].
async fn cmd_on(conn: &Conn, cmd: &Cmd) -> Result<Value, StoreError> {
    let mut conn = conn.clone();
    match tokio::time::timeout(CALL_TIMEOUT, cmd.query_async::<Value>(&mut conn)).await {
        Ok(r) => r.map_err(map_err),
        Err(_) => Err(StoreError::OutcomeUnknown("Redis did not answer in time".into())),
    }
}

/// The same command on every master (one server: that server): `(node, reply)` each.
async fn on_every_master(conn: &Conn, cmd: Cmd) -> Result<Vec<(String, Value)>, StoreError> {
    match conn {
        Conn::Single(_) => Ok(vec![("the server".to_string(), cmd_on(conn, &cmd).await?)]),
        Conn::Cluster(c) => {
            use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
            let mut conn = c.clone();
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let v = match tokio::time::timeout(CALL_TIMEOUT, conn.route_command(cmd, routing)).await {
                Ok(r) => r.map_err(map_err)?,
                Err(_) => return Err(StoreError::OutcomeUnknown("Redis did not answer in time".into())),
            };
            let Value::Map(nodes) = v else { return Err(bad("a reply of every master")) };
            Ok(nodes.into_iter().map(|(node, reply)| (text(&node).unwrap_or_default(), reply)).collect())
        }
    }
}

/// `(node, connected replicas)` of every master (`INFO replication`, `connected_slaves`).
async fn replicas_per_master(conn: &Conn) -> Result<Vec<(String, u32)>, StoreError> {
    let mut out = Vec::new();
    for (node, reply) in on_every_master(conn, redis::cmd("INFO").arg("replication").clone()).await? {
        if let Value::ServerError(e) = &reply {
            return Err(StoreError::Unavailable(format!("INFO replication on {node}: {e:?}")));
        }
        let connected = text(&reply)
            .and_then(|i| info_field(&i, "connected_slaves"))
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| bad(&format!("INFO replication of {node} without connected_slaves")))?;
        out.push((node, connected));
    }
    if out.is_empty() {
        return Err(StoreError::Unavailable("no Redis master answered INFO replication".into()));
    }
    out.sort();
    Ok(out)
}

/// One look at the replicas that could be promoted ([`super::replicas`]): one server's connected replicas, or
/// a Cluster's `CLUSTER NODES` as one of its nodes sees it (failure flags are agreed cluster-wide).
async fn look(conn: &Conn) -> Result<Topology, StoreError> {
    match conn {
        Conn::Single(_) => {
            let found = replicas_per_master(conn).await?;
            Ok(Topology::single(&found[0].0, found[0].1))
        }
        Conn::Cluster(c) => {
            use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
            // A random node answers; the one picked may be the node that just died: a few tries.
            let mut last = StoreError::Unavailable("no Cluster node answered CLUSTER NODES".into());
            for _ in 0..3 {
                let mut conn = c.clone();
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
                let mut nodes = redis::cmd("CLUSTER");
                nodes.arg("NODES");
                let v = match tokio::time::timeout(CALL_TIMEOUT, conn.route_command(nodes, routing)).await {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        last = map_err(e);
                        continue;
                    }
                    Err(_) => {
                        last = StoreError::OutcomeUnknown("Redis did not answer in time".into());
                        continue;
                    }
                };
                let nodes = text(&v).ok_or_else(|| bad("CLUSTER NODES without text"))?;
                return Topology::from_cluster_nodes(&nodes).map_err(|e| bad(&e));
            }
            Err(last)
        }
    }
}

/// `node: replicas, ...` for the log.
fn describe_replicas(found: &[(String, u32)]) -> String {
    found.iter().map(|(node, n)| format!("{node}: {n}")).collect::<Vec<_>>().join(", ")
}

/// One `name:value` line of an INFO reply.
fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(|v| v.trim().to_string())
}

fn transition_outcome(r: Option<(String, String, Option<Order>)>) -> Result<TransitionOutcome, StoreError> {
    let Some((code, _, order)) = r else { return Ok(TransitionOutcome::NotFound) };
    Ok(match code.as_str() {
        "DONE" => TransitionOutcome::Done(need(order)?),
        "INVALID" => TransitionOutcome::Invalid(need(order)?),
        "NOT_DUE" => TransitionOutcome::NotDue(need(order)?),
        "UNKNOWN_POOL" => TransitionOutcome::UnknownPool,
        "NOT_FOUND" => TransitionOutcome::NotFound,
        other => return Err(bad(&format!("transition code {other}"))),
    })
}
