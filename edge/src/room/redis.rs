//! Room state in Redis, so several edges share one queue (DESIGN §3, §6): one atomic position
//! counter, one `serving` counter that only the leader (a renewed lease: SET NX PX +
//! compare-and-renew, lua/room_lead.lua) advances, sessions in a sorted set. Every key of a room
//! is `wk:{room:<id>}:...`, one Cluster slot. Followers only read `serving` (once a tick into a
//! local snapshot, so status polls never wait for Redis).
//!
//! Edges sharing a queue must share `edge.secret`: tickets are signed, and identities hashed,
//! under it. Room configs made through the admin API and operator overrides (pause, resume,
//! queue-all, the release mode and bounds) are published in two hashes every edge reads once a
//! tick, so an operator may use any edge's admin port (or console) for a shared room; the
//! leader's mode is the one that moves `serving`.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};
use tokio::sync::OnceCell;
use wicket_core::store::redis::Conn;

use super::state::{Advanced, Counters, Joined, Proof, ProofState, RoomState, PickupAsk, StateError, Swept, Who};

/// Most owed places one advance passes (the rest the next tick).
const MAX_SKIP: u64 = 100_000;

/// Where rooms keep their state when it is shared (the config file's top-level `store`, read by
/// [`crate::config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomStore {
    /// One Redis: `redis://host:port/db`.
    Url(String),
    /// A Redis Cluster, by seed URLs (a room's keys share one slot).
    Cluster(Vec<String>),
}

static JOIN: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_join.lua")));
static FREEZE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_freeze.lua")));
pub(super) static LEAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_lead.lua")));
pub(super) static RESIGN: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_resign.lua")));
static PASS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_pass.lua")));
static ADVANCE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_advance.lua")));
static END_SESSION: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_end_session.lua")));
static PROOF: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_proof.lua")));
static MODE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_mode.lua")));
static LAPSE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_lapse.lua")));
static OPEN_SESSION: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_open_session.lua")));
static BOOK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_book.lua")));
static SWEEP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_sweep.lua")));

/// Bound of one Redis call.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(1000);

/// Where the rooms' Redis is.
#[derive(Clone)]
enum Target {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

/// A Redis (or Redis Cluster) connection shared by every room of an edge (connected on first use,
/// reconnecting by itself afterwards).
#[derive(Clone)]
pub struct RedisRooms {
    target: Arc<Target>,
    conn: Arc<OnceCell<Conn>>,
}

impl RedisRooms {
    /// For a `redis://` URL (checked now, connected on first use).
    pub fn new(url: &str) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| format!("bad Redis URL: {e}"))?;
        Ok(RedisRooms { target: Arc::new(Target::Single(client)), conn: Arc::new(OnceCell::new()) })
    }

    /// For a Redis Cluster by seed URLs (checked now, connected on first use). A room's keys
    /// share one hash slot, so every script runs on one node.
    pub fn cluster(seeds: &[String]) -> Result<Self, String> {
        let client = redis::cluster::ClusterClientBuilder::new(seeds.to_vec())
            .connection_timeout(CALL_TIMEOUT)
            .response_timeout(CALL_TIMEOUT)
            .retries(1)
            .build()
            .map_err(|e| format!("bad Redis Cluster seeds: {e}"))?;
        Ok(RedisRooms { target: Arc::new(Target::Cluster(client)), conn: Arc::new(OnceCell::new()) })
    }

    /// For the shared `store` setting.
    pub fn for_store(store: &RoomStore) -> Result<Self, String> {
        match store {
            RoomStore::Url(url) => Self::new(url),
            RoomStore::Cluster(seeds) => Self::cluster(seeds),
        }
    }

    /// The shared connection (the invite lane's store, [`super::invite`], uses it too).
    /// Runs a room script with its keys and arguments, within [`CALL_TIMEOUT`].
    pub(crate) async fn run(&self, script: &Script, keys: &[&str], args: &[String]) -> Result<Value, StateError> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(a.as_str());
        }
        self.invoke(&inv).await
    }

    /// Runs one command, within [`CALL_TIMEOUT`].
    pub(crate) async fn cmd(&self, cmd: redis::Cmd) -> Result<Value, StateError> {
        let mut conn = self.conn().await?;
        match tokio::time::timeout(CALL_TIMEOUT, cmd.query_async::<Value>(&mut conn)).await {
            Ok(r) => r.map_err(|e| StateError(e.to_string())),
            Err(_) => Err(StateError("Redis did not answer in time".into())),
        }
    }

    pub(crate) async fn conn(&self) -> Result<Conn, StateError> {
        let c = self
            .conn
            .get_or_try_init(|| async {
                let connect = async {
                    match &*self.target {
                        Target::Single(client) => {
                            let cfg = ConnectionManagerConfig::new()
                                .set_connection_timeout(Some(CALL_TIMEOUT))
                                .set_response_timeout(Some(CALL_TIMEOUT))
                                .set_number_of_retries(1);
                            ConnectionManager::new_with_config(client.clone(), cfg).await.map(Conn::Single)
                        }
                        Target::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
                    }
                };
                tokio::time::timeout(CALL_TIMEOUT * 2, connect)
                    .await
                    .map_err(|_| StateError("timed out connecting to Redis".into()))?
                    .map_err(|e| StateError(e.to_string()))
            })
            .await?;
        Ok(c.clone())
    }

    /// Publishes a room's config made or changed through the admin API (`None`: deleted), so the
    /// other edges sharing this Redis apply it ([`crate::room::Rooms::sync_specs`]).
    pub async fn put_spec(&self, id: &str, config_json: Option<&str>) -> Result<(), StateError> {
        self.hset(SPECS_KEY, id, config_json.unwrap_or("")).await
    }

    /// Every published room config by id (an empty value: the room was deleted).
    pub async fn specs(&self) -> Result<Vec<(String, String)>, StateError> {
        self.hgetall(SPECS_KEY).await
    }

    /// Publishes the operator's override of a room (JSON of [`crate::room::OperatorOverride`];
    /// empty when the room was deleted), for the other edges ([`crate::room::Rooms::sync_specs`]).
    pub async fn put_override(&self, id: &str, json: &str) -> Result<(), StateError> {
        self.hset(OVERRIDES_KEY, id, json).await
    }

    /// The published operator override of room `id` (`None`: none yet; empty: deleted).
    pub async fn get_override(&self, id: &str) -> Result<Option<String>, StateError> {
        let v = self.cmd(redis::cmd("HGET").arg(OVERRIDES_KEY).arg(id).clone()).await?;
        Ok(text(&v))
    }

    /// Writes `json` as room `id`'s override only if the published one is still `expected`
    /// (empty: none); false when it changed in between (lua/room_mode.lua).
    pub async fn cas_override(&self, id: &str, expected: &str, json: &str) -> Result<bool, StateError> {
        let v = self.run(&MODE, &[OVERRIDES_KEY], &[id.to_owned(), expected.to_owned(), json.to_owned()]).await?;
        Ok(int(&v) == Some(1))
    }

    /// Every published operator override by room id.
    pub async fn overrides(&self) -> Result<Vec<(String, String)>, StateError> {
        self.hgetall(OVERRIDES_KEY).await
    }

    async fn hset(&self, key: &str, field: &str, value: &str) -> Result<(), StateError> {
        self.cmd(redis::cmd("HSET").arg(key).arg(field).arg(value).clone()).await.map(|_| ())
    }

    async fn hgetall(&self, key: &str) -> Result<Vec<(String, String)>, StateError> {
        let mut conn = self.conn().await?;
        let cmd = redis::cmd("HGETALL").arg(key).clone();
        match tokio::time::timeout(CALL_TIMEOUT, cmd.query_async::<Vec<(String, String)>>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(StateError(format!("redis: {e}"))),
            Err(_) => Err(StateError("redis: timed out".into())),
        }
    }

    /// Runs a prepared script (the room report's, [`crate::room::report`]).
    pub async fn invoke(&self, inv: &redis::ScriptInvocation<'_>) -> Result<Value, StateError> {
        let mut conn = self.conn().await?;
        match tokio::time::timeout(CALL_TIMEOUT, inv.invoke_async::<Value>(&mut conn)).await {
            Ok(r) => r.map_err(|e| StateError(format!("redis: {e}"))),
            Err(_) => Err(StateError("redis: timed out".into())),
        }
    }

    /// Sends a pipeline (the room report's reads and marks); its answers (ignored ones left out).
    pub async fn pipe(&self, p: &redis::Pipeline) -> Result<Vec<Value>, StateError> {
        let mut conn = self.conn().await?;
        match tokio::time::timeout(CALL_TIMEOUT, p.query_async::<Vec<Value>>(&mut conn)).await {
            Ok(r) => r.map_err(|e| StateError(format!("redis: {e}"))),
            Err(_) => Err(StateError("redis: timed out".into())),
        }
    }

    /// The state of one room.
    pub fn room(&self, id: &str) -> RedisRoom {
        let k = |s: &str| format!("wk:{{room:{id}}}:{s}");
        RedisRoom {
            redis: self.clone(),
            issued: k("issued"),
            serving: k("serving"),
            prequeue: k("prequeue"),
            shuffle: k("shuffle"),
            s: SessionKeys::under(&format!("wk:{{room:{id}}}")),
            leader: k("leader"),
            book: k("book"),
            owed: k("owed"),
            passed: k("passed"),
            late: k("late"),
            lane_issued: k("lane_issued"),
            lane_serving: k("lane_serving"),
            lane: k("lane"),
            lane_passed: k("lane_passed"),
            lane_who: k("lanewho"),
            cache: Mutex::new(Counters::default()),
            tracked: Mutex::new(0),
            max_tracked: 10_000_000,
        }
    }
}

/// The hash of room configs published by the admin API (id → JSON, empty when deleted).
const SPECS_KEY: &str = "wk:{rooms}:specs";
/// The hash of operator overrides published by the admin API (id → JSON, empty when deleted).
const OVERRIDES_KEY: &str = "wk:{rooms}:overrides";

/// One room's keys and its local snapshot of the counters.
pub struct RedisRoom {
    redis: RedisRooms,
    issued: String,
    serving: String,
    prequeue: String,
    shuffle: String,
    /// The identity map and the sessions.
    s: SessionKeys,
    leader: String,
    /// The leader's book of promises, kept for its successor (lua/room_book.lua).
    book: String,
    /// identity -> position: places whose bot check is owed, turn not come.
    owed: String,
    /// identity -> when its turn came (ms): owed places past their turn, within the grace.
    passed: String,
    /// Late proofs not yet taken off a release.
    late: String,
    /// The invite lane's share: last lane place, lane places admitted, lane place -> place (not yet
    /// passed by serving), lane places passed by serving, identity -> "place:lane place".
    lane_issued: String,
    lane_serving: String,
    lane: String,
    lane_passed: String,
    lane_who: String,
    cache: Mutex<Counters>,
    tracked: Mutex<usize>,
    max_tracked: usize,
}

/// The keys of admitted sessions and of the identity map behind them: a single room has one
/// set in its slot, a spread room ([`super::spread`]) one per shard, each in a slot of its own.
pub(super) struct SessionKeys {
    /// identity -> position, or "d<position>" once that session ended.
    pub(super) who: String,
    /// identity -> session end (ms).
    sessions: String,
    /// identity -> last seen (ms).
    seen: String,
    /// Exits not yet counted by a sweep.
    ended: String,
    /// identity -> place of its session: the places picked up (the leader's sweep counts them).
    picked: String,
}

impl SessionKeys {
    /// The keys under `prefix` (`wk:{room:<id>}`: the room's slot, or a shard's).
    pub(super) fn under(prefix: &str) -> Self {
        SessionKeys { who: format!("{prefix}:who"), sessions: format!("{prefix}:sessions"), seen: format!("{prefix}:seen"), ended: format!("{prefix}:ended"), picked: format!("{prefix}:picked") }
    }

    pub(super) async fn open(&self, r: &RedisRooms, who: Who, until_ms: u64, position: u64) -> Result<bool, StateError> {
        let v = r.run(&OPEN_SESSION, &[&self.sessions, &self.picked], &[until_ms.to_string(), who_hex(who), position.to_string()]).await?;
        Ok(int(&v) == Some(1))
    }

    pub(super) async fn alive(&self, r: &RedisRooms, who: Who, now_ms: u64) -> Result<bool, StateError> {
        Ok(self.until(r, who).await?.is_some_and(|u| u > now_ms))
    }

    /// When `who`'s session ends (ms), if it was opened and not ended or swept.
    pub(super) async fn until(&self, r: &RedisRooms, who: Who) -> Result<Option<u64>, StateError> {
        let mut cmd = redis::cmd("ZSCORE");
        cmd.arg(&self.sessions).arg(who_hex(who));
        let v = r.cmd(cmd).await?;
        let until = match &v {
            Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse::<f64>().ok()),
            Value::Double(d) => Some(*d),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        };
        Ok(until.map(|u| u.max(0.0) as u64))
    }

    pub(super) async fn touch(&self, r: &RedisRooms, who: Who, now_ms: u64) -> Result<(), StateError> {
        // XX-free ZADD: the sweep drops entries idle past the window and those of ended sessions.
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(&self.seen).arg(now_ms).arg(who_hex(who));
        r.cmd(cmd).await.map(|_| ())
    }

    pub(super) async fn end(&self, r: &RedisRooms, who: Who) -> Result<bool, StateError> {
        let v = r.run(&END_SESSION, &[&self.sessions, &self.who, &self.ended, &self.seen], &[who_hex(who)]).await?;
        Ok(int(&v) == Some(1))
    }

    pub(super) async fn spent(&self, r: &RedisRooms, who: Who, position: u64) -> Result<bool, StateError> {
        Ok(spent_by(&self.entry(r, who).await?, position))
    }

    /// The identity map's entry of `who`: its live place, `d<place>` once that session ended,
    /// `Nil` when it never held one.
    pub(super) async fn entry(&self, r: &RedisRooms, who: Who) -> Result<Value, StateError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&self.who).arg(who_hex(who));
        r.cmd(cmd).await
    }

    pub(super) async fn sweep(&self, r: &RedisRooms, now_ms: u64, idle_ms: u64, ask: &PickupAsk) -> Result<Swept, StateError> {
        let mut args = vec![now_ms.to_string(), "1000".into(), idle_ms.to_string(), ask.forget_to.map_or("-1".into(), |t| t.to_string())];
        for (from, to) in &ask.ranges {
            args.extend([from.to_string(), to.to_string()]);
        }
        let v = r.run(&SWEEP, &[&self.sessions, &self.who, &self.ended, &self.seen, &self.picked], &args).await?;
        let all = ints(&v);
        let n = |i: &i64| (*i).max(0) as u64;
        match all.as_slice() {
            [Some(a), Some(e), rest @ ..] if rest.len() == ask.ranges.len() && rest.iter().all(Option::is_some) => {
                Ok(Swept { active: n(a), exits: n(e), picked: Some(rest.iter().flatten().map(n).collect()) })
            }
            _ => Err(StateError(format!("room_sweep answered {v:?}"))),
        }
    }
}

/// Whether a ticket for `position` is spent by the identity map's `entry`: live, it is the place
/// itself; `d<place>` (its session ended) or another place: spent; no entry: not spent.
pub(super) fn spent_by(entry: &Value, position: u64) -> bool {
    match entry {
        Value::Nil => false,
        v => text(v).is_none_or(|t| t != position.to_string()),
    }
}

pub(super) fn who_hex(w: Who) -> String {
    format!("{w:016x}")
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A bulk or simple string reply (or a number) as text.
pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

/// Keeps the leader's book under `keys` = [leader lease, book] (both layouts); false when `node`
/// does not hold the lease.
pub(super) async fn keep_book(redis: &RedisRooms, keys: [&str; 2], node: &str, book: &str, keep_ms: u64) -> Result<bool, StateError> {
    let v = redis.run(&BOOK, &keys, &[node.to_owned(), book.to_owned(), keep_ms.max(1).to_string()]).await?;
    Ok(int(&v) == Some(1))
}

/// The book kept under `key`, if any.
pub(super) async fn kept_book(redis: &RedisRooms, key: &str) -> Result<Option<String>, StateError> {
    let mut cmd = redis::cmd("GET");
    cmd.arg(key);
    Ok(text(&redis.cmd(cmd).await?).filter(|t| !t.is_empty()))
}

pub(super) fn ints(v: &Value) -> Vec<Option<i64>> {
    match v {
        Value::Array(items) => items.iter().map(int).collect(),
        _ => Vec::new(),
    }
}

#[async_trait]
impl RoomState for RedisRoom {
    async fn join(&self, who: Who, open: bool, proof: Proof) -> Result<Option<Joined>, StateError> {
        let v = self
            .redis
            .run(
                &JOIN,
                &[
                    &self.issued,
                    &self.s.who,
                    &self.prequeue,
                    &self.shuffle,
                    &self.owed,
                    &self.passed,
                    &self.late,
                    &self.lane_issued,
                    &self.lane,
                    &self.lane_who,
                ],
                &[
                    who_hex(who),
                    if open { "1" } else { "0" }.into(),
                    rand::random::<u64>().to_string(),
                    self.max_tracked.to_string(),
                    if proof.proven { "1" } else { "0" }.into(),
                    proof.now_ms.to_string(),
                    proof.grace_ms.to_string(),
                    if proof.lane { "1" } else { "0" }.into(),
                ],
            )
            .await?;
        match ints(&v).as_slice() {
            [Some(0), Some(_), Some(_), Some(_)] => Ok(None),
            [Some(p), Some(new), Some(owed), Some(lane)] if *p > 0 && *lane >= 0 => {
                let mut c = self.cache.lock();
                c.issued = c.issued.max(*p as u64);
                c.lane_issued = c.lane_issued.max(*lane as u64);
                Ok(Some(Joined { position: *p as u64, fresh: *new == 1, owed: *owed == 1, lane: *lane as u64 }))
            }
            _ => Err(StateError(format!("room_join answered {v:?}"))),
        }
    }

    async fn proof_state(&self, who: Who, position: u64, now_ms: u64, grace_ms: u64) -> Result<ProofState, StateError> {
        let args = [who_hex(who), position.to_string(), now_ms.to_string(), grace_ms.to_string()];
        let v = self.redis.run(&PROOF, &[&self.s.who, &self.owed, &self.passed], &args).await?;
        match ints(&v).as_slice() {
            [Some(0)] => Ok(ProofState::Proven),
            [Some(1)] => Ok(ProofState::Owed),
            [Some(2), Some(ago)] => Ok(ProofState::Passed { ago_ms: (*ago).max(0) as u64 }),
            [Some(3)] => Ok(ProofState::Lost),
            _ => Err(StateError(format!("room_proof answered {v:?}"))),
        }
    }

    async fn lapse(&self, now_ms: u64, grace_ms: u64) -> Result<u64, StateError> {
        let args = [now_ms.saturating_sub(grace_ms).to_string(), "1000".into()];
        let v = self.redis.run(&LAPSE, &[&self.s.who, &self.passed], &args).await?;
        Ok(int(&v).unwrap_or(0).max(0) as u64)
    }

    fn counters(&self) -> Counters {
        *self.cache.lock()
    }

    async fn refresh(&self) -> Result<Counters, StateError> {
        let mut cmd = redis::cmd("MGET");
        cmd.arg(&self.issued).arg(&self.serving).arg(&self.prequeue).arg(&self.shuffle).arg(&self.lane_issued).arg(&self.lane_serving).arg(&self.lane_passed);
        let v = self.redis.cmd(cmd).await?;
        let n = ints(&v);
        let get = |i: usize| n.get(i).copied().flatten();
        let c = Counters {
            issued: get(0).unwrap_or(0).max(0) as u64,
            serving: get(1).unwrap_or(0).max(0) as u64,
            prequeue: get(2).map(|p| p.max(0) as u64),
            shuffle_key: match &v {
                Value::Array(items) => items.get(3).and_then(|x| match x {
                    Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
                    _ => None,
                }),
                _ => None,
            }
            .unwrap_or(0),
            lane_issued: get(4).unwrap_or(0).max(0) as u64,
            lane_serving: get(5).unwrap_or(0).max(0) as u64,
            lane_passed: get(6).unwrap_or(0).max(0) as u64,
        };
        let mut hlen = redis::cmd("HLEN");
        hlen.arg(&self.s.who);
        if let Ok(v) = self.redis.cmd(hlen).await {
            *self.tracked.lock() = int(&v).unwrap_or(0).max(0) as usize;
        }
        *self.cache.lock() = c;
        Ok(c)
    }

    async fn lead(&self, node: &str, lease_ms: u64) -> Result<bool, StateError> {
        let v = self.redis.run(&LEAD, &[&self.leader], &[node.to_owned(), lease_ms.to_string()]).await?;
        Ok(int(&v) == Some(1))
    }

    async fn resign(&self, node: &str) -> Result<(), StateError> {
        self.redis.run(&RESIGN, &[&self.leader], &[node.to_owned()]).await.map(|_| ())
    }

    async fn keep_book(&self, node: &str, book: &str, keep_ms: u64) -> Result<bool, StateError> {
        keep_book(&self.redis, [&self.leader, &self.book], node, book, keep_ms).await
    }

    async fn kept_book(&self) -> Result<Option<String>, StateError> {
        kept_book(&self.redis, &self.book).await
    }

    async fn freeze(&self) -> Result<(), StateError> {
        self.redis.run(&FREEZE, &[&self.issued, &self.prequeue, &self.shuffle], &[rand::random::<u64>().to_string()]).await.map(|_| ())
    }

    async fn pass(&self, position: u64) -> Result<bool, StateError> {
        let v = self.redis.run(&PASS, &[&self.serving], &[position.to_string()]).await?;
        let served = int(&v) == Some(1);
        if served {
            let mut c = self.cache.lock();
            c.serving = c.serving.max(position);
            c.issued = c.issued.max(position);
        }
        Ok(served)
    }

    async fn advance_lane(&self, node: &str, n: u64, lane: u64, now_ms: u64) -> Result<Advanced, StateError> {
        let keys = [
            &self.leader,
            &self.issued,
            &self.serving,
            &self.owed,
            &self.passed,
            &self.late,
            &self.lane_issued,
            &self.lane_serving,
            &self.lane,
            &self.lane_passed,
        ];
        let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        let args = [node.to_owned(), n.to_string(), now_ms.to_string(), MAX_SKIP.to_string(), lane.to_string()];
        let v = self.redis.run(&ADVANCE, &keys, &args).await?;
        match (int(&v), ints(&v).as_slice()) {
            (Some(_), _) => {
                // Not the leader: nothing moved.
                let c = self.cache.lock();
                Ok(Advanced { serving: c.serving, lane_serving: c.lane_serving, released: 0, in_line: 0 })
            }
            (None, [Some(s), Some(l), Some(r), Some(p)]) if *s >= 0 && *l >= 0 && *r >= 0 && *p >= 0 => {
                let mut c = self.cache.lock();
                c.serving = *s as u64;
                c.lane_serving = *l as u64;
                Ok(Advanced { serving: *s as u64, lane_serving: *l as u64, released: *r as u64, in_line: (*p).min(*r) as u64 })
            }
            _ => Err(StateError(format!("room_advance answered {v:?}"))),
        }
    }

    async fn open_session(&self, who: Who, until_ms: u64, position: u64) -> Result<bool, StateError> {
        self.s.open(&self.redis, who, until_ms, position).await
    }

    async fn session_alive(&self, who: Who, now_ms: u64) -> Result<bool, StateError> {
        self.s.alive(&self.redis, who, now_ms).await
    }

    async fn touch(&self, who: Who, now_ms: u64) -> Result<(), StateError> {
        self.s.touch(&self.redis, who, now_ms).await
    }

    async fn end_session(&self, who: Who) -> Result<bool, StateError> {
        self.s.end(&self.redis, who).await
    }

    async fn spent(&self, who: Who, position: u64) -> Result<bool, StateError> {
        self.s.spent(&self.redis, who, position).await
    }

    async fn sweep_picked(&self, now_ms: u64, idle_ms: u64, ask: &PickupAsk) -> Result<Swept, StateError> {
        self.s.sweep(&self.redis, now_ms, idle_ms, ask).await
    }

    fn tracked(&self) -> usize {
        *self.tracked.lock()
    }
}
