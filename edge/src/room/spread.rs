//! A room spread across a Redis Cluster (`layout = "spread"`, DESIGN §7b): the state of one room
//! no longer sits on one node, so a room's joins are not bounded by one node's scripts a second.
//!
//! - **Positions in blocks.** An edge leases a block of `block` positions (`INCRBY` on the room's
//!   slot: the one command a block costs there) and numbers its joins in it as they arrive. It hands
//!   out nothing from a block older than `block-ms`: a fan who joined at another edge a moment
//!   earlier may get a later number, by at most `max(block-ms, the block's fill time)` — the FIFO
//!   error across edges. Within an edge the order is exact.
//! - **Real places only.** Each block is recorded on a shard (blocks go round the shards) before a
//!   place is handed out from it, and ends with how far it was used (lua/room_spread_block.lua).
//!   The leader reads every shard's records once a tick, walks them in position order and passes
//!   only places handed out, skipping unused ends ([`SpreadRoom::step`], [`walk`]); it waits at a
//!   block still in use (at most `block-ms`, plus a grace for an edge that died holding one, and the
//!   same grace at a gap no block holds: a lease not recorded yet). Its step is written with the
//!   lease checked (lua/room_spread_advance.lua).
//! - **Identities and sessions sharded.** The identity map (a rejoin keeps its place) and the
//!   sessions are split over `shards` slots chosen to spread evenly over the slot space
//!   ([`shard_tags`]). A join takes its place at arrival and waits for the edge's next batch
//!   (every `flush-ms`): one `HMGET` and one `HSET` per shard for the whole batch, so a join costs
//!   a fraction of a Redis command. An identity found holding a place keeps it (the place just
//!   taken is left a hole, counted by the release as a place: rejoins without their ticket only).
//! - **What it does not carry (yet).** Owed places of the room's bot check, the random pre-queue,
//!   passthrough and the invite lane's share keep per-place state in one slot; validation refuses
//!   them with this layout ([`super::config::RoomConfig::compile`]).
//!
//! Edge-local state: the current block, the batch not yet written, and the identities this edge
//! numbered (a rejoin at the same edge is answered without Redis; bounded by `max-tracked`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use redis::{Script, Value};
use tokio::sync::oneshot;

use super::config::SpreadConfig;
use super::redis::{CALL_TIMEOUT, LEAD, RESIGN, RedisRooms, SessionKeys, int, ints, who_hex};
use super::state::{Advanced, Counters, DONE, Joined, Proof, ProofState, RoomState, StateError, Who};

static BLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_spread_block.lua")));
static ADVANCE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_spread_advance.lua")));

/// What the leader adds to `block-ms` before it takes a block whose edge never said it was done
/// as done (the edge's last report on its way, clocks a little apart), and how long it waits at a
/// gap no block holds.
const GRACE_MS: u64 = 2000;
/// Most joins one batch takes (the rest wait for the next).
const MAX_BATCH: usize = 20_000;

/// The Redis Cluster hash slot of a key's hash tag (CRC16/XMODEM mod 16384, as Redis computes it).
pub fn slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for b in tag.bytes() {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

/// The hash tags of a room's `shards` shards: shard `k`'s tag is the first `room:<id>:<k>.<n>`
/// whose slot falls in the middle half of the `k`-th of `shards` equal parts of the slot space.
/// A cluster made with equal slot ranges per master (what `redis-cli --cluster create` does,
/// whatever its rounding at the edges of a range) then gives each master `shards / masters`
/// shards, whatever the room's name; every edge computes the same tags.
pub fn shard_tags(id: &str, shards: u32) -> Vec<String> {
    let shards = shards.max(1) as u64;
    (0..shards)
        .map(|k| {
            (0u32..)
                .map(|n| format!("room:{id}:{k}.{n}"))
                .find(|tag| {
                    // In quarters of the part: the 2nd and 3rd.
                    let q = slot(tag) as u64 * shards * 4 / 16384;
                    q == 4 * k + 1 || q == 4 * k + 2
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The key prefixes of a room's shards (`wk:{<tag>}`): its identity map and sessions live under
/// them (and the report's marks of a session's first use, [`super::tally`]).
pub fn shard_prefixes(id: &str, shards: u32) -> Vec<String> {
    shard_tags(id, shards).iter().map(|t| format!("wk:{{{t}}}")).collect()
}

/// Whether `tag`'s slot is at least a third of the slot space away from `room`'s own slot (so,
/// on a cluster of 2 or 3 masters with equal ranges, on another master than the room's).
fn away_from_room(tag: &str, room: &str) -> bool {
    let (a, b) = (slot(tag) as i32, slot(&format!("room:{room}")) as i32);
    let d = (a - b).rem_euclid(16384);
    d.min(16384 - d) >= 16384 / 3
}

/// The hash tag of a room's block counter: the first `room:<id>:n.<k>` away from the room's slot
/// ([`away_from_room`]), so the leases and the leader's work fall on two masters.
pub fn counter_tag(id: &str) -> String {
    (0u32..).map(|k| format!("room:{id}:n.{k}")).find(|t| away_from_room(t, id)).unwrap_or_default()
}

/// The room's keys in its own slot (`wk:{room:<id>}:...`, shared with the single layout's names),
/// but for the block counter ([`counter_tag`]).
struct MainKeys {
    /// Last position leased (`wk:{room:<id>:n.<k>}:issued`).
    issued: String,
    serving: String,
    leader: String,
    /// Real places serving passed.
    passed: String,
    /// Places handed out and not passed, as the leader's last step counted.
    waiting: String,
    /// Active sessions, as the leader's last sweep counted.
    active: String,
}

/// A block as the leader reads it from its edge's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRecord {
    pub start: u64,
    pub end: u64,
    pub lease_ms: u64,
    /// Last position handed out (`start - 1`: none).
    pub used: u64,
    /// Its edge hands out no more from it.
    pub done: bool,
}

impl BlockRecord {
    fn parse(start: &str, v: &str) -> Option<BlockRecord> {
        let mut f = v.split(':');
        let (end, lease_ms, used, done) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next()?);
        Some(BlockRecord { start: start.parse().ok()?, end, lease_ms, used, done: done == "1" })
    }
}

/// One step of the leader over every edge's blocks ([`walk`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Walk {
    /// `serving` after it.
    pub serving: u64,
    /// Real places it passed.
    pub released: u64,
    /// Places of blocks wholly behind `serving` when the step began, never counted as passed (an
    /// end reported after the leader took the block as done).
    pub late: u64,
    /// Blocks done and passed: their records can go.
    pub drop: Vec<u64>,
    /// The start of a gap (positions no record holds) the walk stopped at.
    pub gap: Option<u64>,
}

/// Moves `serving` over `blocks` (sorted by start) by up to `n` real places at `now_ms`: through
/// each block's used places; over a block's unused end once it is done (said, or leased longer
/// than `done_after_ms` ago); over a gap no block holds only when `gap_ok(start)` (the leader has
/// seen it for the grace).
pub fn walk(serving: u64, mut n: u64, blocks: &[BlockRecord], now_ms: u64, done_after_ms: u64, gap_ok: impl Fn(u64) -> bool) -> Walk {
    let mut w = Walk { serving, ..Walk::default() };
    for b in blocks {
        if b.end <= serving {
            w.late += b.used.saturating_sub(b.start - 1);
            w.drop.push(b.start);
            continue;
        }
        if w.serving + 1 < b.start {
            if !gap_ok(w.serving + 1) {
                w.gap = Some(w.serving + 1);
                break;
            }
            w.serving = b.start - 1;
        }
        if b.used > w.serving && n > 0 {
            let k = n.min(b.used - w.serving);
            w.serving += k;
            n -= k;
            w.released += k;
        }
        if w.serving < b.used || !(b.done || now_ms > b.lease_ms + done_after_ms) {
            break;
        }
        w.serving = w.serving.max(b.end);
        w.drop.push(b.start);
    }
    w
}

/// One shard's keys: identities and sessions ([`SessionKeys`]), and the records of the blocks
/// whose number falls on it (`blk`: block start -> "end:lease ms:used:final"; `placed`: places
/// handed out from its blocks, counted when a block ends).
struct Shard {
    s: SessionKeys,
    blk: String,
    placed: String,
}

/// The block this edge numbers its joins in.
#[derive(Debug, Clone, Copy)]
struct Block {
    start: u64,
    end: u64,
    /// Next position to hand out.
    next: u64,
    leased: Instant,
    /// When it was leased (ms, this edge's clock).
    lease_ms: u64,
}

impl Block {
    /// The arguments that end it: start, end, lease time, last position handed out, places.
    fn end_args(&self) -> [String; 5] {
        [self.start.to_string(), self.end.to_string(), self.lease_ms.to_string(), (self.next - 1).to_string(), (self.next - self.start).to_string()]
    }
}

/// The arguments of no block (lua/room_spread_block.lua).
fn no_block() -> [String; 5] {
    ["0".into(), "0".into(), "0".into(), "0".into(), "0".into()]
}

/// A join waiting for its batch.
type Waiter = oneshot::Sender<Result<(u64, bool), StateError>>;

#[derive(Default)]
struct Local {
    /// Joins waiting for their batch: identity, the place taken at arrival.
    pending: Vec<(Who, u64, Waiter)>,
    /// The identities this edge numbered (or found), for a rejoin here.
    known: HashMap<Who, u64>,
    block: Option<Block>,
    /// The highest position this edge ever leased.
    floor: u64,
}

/// One spread room's state on one edge.
pub struct SpreadRoom {
    redis: RedisRooms,
    cfg: SpreadConfig,
    main: MainKeys,
    shards: Vec<Shard>,
    /// The node id that holds the leader's lease here (set by `lead`): its `refresh` steps too.
    leading: Mutex<Option<String>>,
    /// A gap the leader's walk stopped at, and since when.
    gap: Mutex<Option<(u64, Instant)>>,
    /// When this edge last stepped as the leader.
    stepped: Mutex<Option<Instant>>,
    /// Active sessions as last known (the leader's sweep, published for the other edges).
    active: std::sync::atomic::AtomicU64,
    cache: Mutex<Counters>,
    local: Mutex<Local>,
    /// One batch at a time.
    batching: tokio::sync::Mutex<()>,
    /// One lease (or end of a block) at a time.
    leasing: tokio::sync::Mutex<()>,
    flusher: AtomicBool,
    me: Weak<SpreadRoom>,
    max_tracked: usize,
}

impl SpreadRoom {
    /// Room `id` on `redis`, remembering at most `max_tracked` identities on this edge.
    pub fn new(redis: RedisRooms, id: &str, cfg: SpreadConfig, max_tracked: usize) -> Arc<Self> {
        let k = |s: &str| format!("wk:{{room:{id}}}:{s}");
        let shards = shard_prefixes(id, cfg.shards)
            .iter()
            .map(|p| Shard { s: SessionKeys::under(p), blk: format!("{p}:blk"), placed: format!("{p}:placed") })
            .collect();
        Arc::new_cyclic(|me| SpreadRoom {
            redis,
            cfg,
            main: MainKeys { issued: format!("wk:{{{}}}:issued", counter_tag(id)), serving: k("serving"), leader: k("leader"), passed: k("passed"), waiting: k("waiting"), active: k("active") },
            shards,
            leading: Mutex::new(None),
            gap: Mutex::new(None),
            stepped: Mutex::new(None),
            active: std::sync::atomic::AtomicU64::new(0),
            cache: Mutex::new(Counters::default()),
            local: Mutex::new(Local::default()),
            batching: tokio::sync::Mutex::new(()),
            leasing: tokio::sync::Mutex::new(()),
            flusher: AtomicBool::new(false),
            me: me.clone(),
            max_tracked,
        })
    }

    fn shard(&self, who: Who) -> &SessionKeys {
        &self.shards[(who % self.shards.len() as u64) as usize].s
    }

    /// Starts the batch task on the first join (it ends with the room).
    fn start_flusher(&self) {
        if self.flusher.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.me.clone();
        let every = Duration::from_millis(self.cfg.flush_ms);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(room) = me.upgrade() else { return };
                room.flush().await;
            }
        });
    }

    /// Writes one batch: the identities' places (one already holding a place keeps it), one `HMGET`
    /// and one `HSET` per shard; then answers each join. A block that aged is ended.
    pub async fn flush(&self) {
        let _one = self.batching.lock().await;
        let batch: Vec<(Who, u64, Waiter)> = {
            let mut l = self.local.lock();
            let n = l.pending.len().min(MAX_BATCH);
            l.pending.drain(..n).collect()
        };
        if !batch.is_empty() {
            self.place(batch).await;
        }
        let aged = self.local.lock().block.is_some_and(|b| b.leased.elapsed() >= Duration::from_millis(self.cfg.block_ms));
        if aged && let Err(e) = self.end_aged_block().await {
            tracing::debug!("spread room: ending a block: {e}");
        }
    }

    async fn place(&self, batch: Vec<(Who, u64, Waiter)>) {
        // The identities once each, with the place the first of their joins took.
        let mut order: Vec<(Who, u64)> = Vec::new();
        let mut waiters: HashMap<Who, Vec<Waiter>> = HashMap::new();
        for (who, p, tx) in batch {
            let e = waiters.entry(who).or_default();
            if e.is_empty() {
                order.push((who, p));
            }
            e.push(tx);
        }
        let mut by_shard: HashMap<usize, Vec<(Who, u64)>> = HashMap::new();
        for (who, p) in &order {
            by_shard.entry((who % self.shards.len() as u64) as usize).or_default().push((*who, *p));
        }
        // Places held already (a rejoin at another edge, or after this edge forgot): those keep
        // theirs, and the place just taken is a hole.
        let reads = by_shard.iter().map(|(k, whos)| async move {
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(&self.shards[*k].s.who);
            for (w, _) in whos {
                cmd.arg(who_hex(*w));
            }
            (*k, self.redis.cmd(cmd).await)
        });
        let mut held: HashMap<Who, u64> = HashMap::new();
        let mut failed: HashMap<Who, StateError> = HashMap::new();
        for (k, r) in futures::future::join_all(reads).await {
            let whos = &by_shard[&k];
            match r {
                Ok(Value::Array(items)) if items.len() == whos.len() => {
                    for ((w, _), v) in whos.iter().zip(items) {
                        if let Some(p) = live_position(&v) {
                            held.insert(*w, p);
                        }
                    }
                }
                Ok(v) => {
                    for (w, _) in whos {
                        failed.insert(*w, StateError(format!("HMGET answered {v:?}")));
                    }
                }
                Err(e) => {
                    for (w, _) in whos {
                        failed.insert(*w, e.clone());
                    }
                }
            }
        }
        let writes = by_shard.iter().filter_map(|(k, whos)| {
            let new: Vec<(Who, u64)> = whos.iter().filter(|(w, _)| !held.contains_key(w) && !failed.contains_key(w)).copied().collect();
            (!new.is_empty()).then_some(async move {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(&self.shards[*k].s.who);
                for (w, p) in &new {
                    cmd.arg(who_hex(*w)).arg(*p);
                }
                (new, self.redis.cmd(cmd).await)
            })
        });
        for (new, r) in futures::future::join_all(writes).await {
            if let Err(e) = r {
                // Not remembered: the join fails (the fan tries again); the place is a hole the
                // release counts as a place.
                for (w, _) in new {
                    failed.insert(w, e.clone());
                }
            }
        }
        let mut l = self.local.lock();
        for (who, p) in order {
            let answer = if let Some(e) = failed.remove(&who) {
                Err(e)
            } else if let Some(q) = held.get(&who) {
                Ok((*q, false))
            } else {
                Ok((p, true))
            };
            if let Ok((p, _)) = answer
                && (l.known.len() < self.max_tracked || l.known.contains_key(&who))
            {
                l.known.insert(who, p);
            }
            for (i, tx) in waiters.remove(&who).unwrap_or_default().into_iter().enumerate() {
                // A second join of the same identity in one batch finds the first one's place.
                let _ = tx.send(answer.clone().map(|(p, fresh)| (p, fresh && i == 0)));
            }
        }
    }

    /// The next place of this edge's block, taken at the join's arrival (so joins are in arrival
    /// order at this edge whatever the batch); a new block is leased when it is used up or aged.
    async fn take(&self) -> Result<u64, StateError> {
        let try_take = || {
            let mut l = self.local.lock();
            let b = l.block.as_mut().filter(|b| b.next <= b.end && b.leased.elapsed() < Duration::from_millis(self.cfg.block_ms))?;
            b.next += 1;
            Some(b.next - 1)
        };
        if let Some(p) = try_take() {
            return Ok(p);
        }
        let _one = self.leasing.lock().await;
        if let Some(p) = try_take() {
            return Ok(p);
        }
        // (The block used up or aged is ended by the lease of the next.)
        self.lease(self.cfg.block).await?;
        try_take().ok_or_else(|| StateError("a fresh block gave no place".into()))
    }

    /// The shard a block's record lives on: the shard the block's number falls on (blocks go
    /// round the shards, so their records and the leader's reads spread evenly).
    fn block_shard(&self, start: u64) -> usize {
        ((start.saturating_sub(1) / self.cfg.block.max(1)) % self.shards.len() as u64) as usize
    }

    /// Writes block records (lua/room_spread_block.lua): `prev` ended, `new` started; one call
    /// when both are on one shard.
    async fn record(&self, prev: Option<Block>, new: Option<Block>) -> Result<(), StateError> {
        let none = || ["0".to_string(), "0".into(), "0".into()];
        let new_args = |b: Option<Block>| b.map_or_else(none, |b| [b.start.to_string(), b.end.to_string(), b.lease_ms.to_string()]);
        let call = |k: usize, prev: Option<Block>, new: Option<Block>| {
            let mut args: Vec<String> = prev.map_or_else(no_block, |p| p.end_args()).into();
            args.extend(new_args(new));
            async move {
                let sh = &self.shards[k];
                self.redis.run(&BLOCK, &[&sh.blk, &sh.placed], &args).await
            }
        };
        match (prev, new) {
            (Some(p), Some(n)) if self.block_shard(p.start) != self.block_shard(n.start) => {
                let (a, b) = futures::future::join(call(self.block_shard(p.start), Some(p), None), call(self.block_shard(n.start), None, Some(n))).await;
                a.and(b).map(|_| ())
            }
            (Some(p), _) => call(self.block_shard(p.start), Some(p), new).await.map(|_| ()),
            (None, Some(n)) => call(self.block_shard(n.start), None, Some(n)).await.map(|_| ()),
            (None, None) => Ok(()),
        }
    }

    /// Leases the next block (`INCRBY` on the block counter's slot), then records it (and the end
    /// of the current one) on the shards before any place is handed out from it.
    async fn lease(&self, size: u64) -> Result<Block, StateError> {
        let (floor, prev) = {
            let l = self.local.lock();
            (l.floor, l.block)
        };
        let mut cmd = redis::cmd("INCRBY");
        cmd.arg(&self.main.issued).arg(size);
        let mut end = int(&self.redis.cmd(cmd).await?).ok_or_else(|| StateError("INCRBY answered no number".into()))?.max(0) as u64;
        if end.saturating_sub(size) < floor {
            // The counter went back (a failover lost its last writes): jump past what this edge
            // leased, taking the top of the jump (the rest is a gap the leader passes).
            let mut cmd = redis::cmd("INCRBY");
            cmd.arg(&self.main.issued).arg(floor + 1 - (end + 1 - size) + size);
            end = int(&self.redis.cmd(cmd).await?).ok_or_else(|| StateError("INCRBY answered no number".into()))?.max(0) as u64;
        }
        let b = Block { start: end + 1 - size, end, next: end + 1 - size, leased: Instant::now(), lease_ms: now_ms() };
        self.record(prev, Some(b)).await?;
        let mut l = self.local.lock();
        l.floor = l.floor.max(b.end);
        l.block = Some(b);
        Ok(b)
    }

    /// Ends this edge's block if it aged with no join to start the next: how far it was used, so
    /// the leader passes its unused end at once.
    async fn end_aged_block(&self) -> Result<(), StateError> {
        let _one = self.leasing.lock().await;
        let Some(b) = self.local.lock().block.filter(|b| b.leased.elapsed() >= Duration::from_millis(self.cfg.block_ms)) else { return Ok(()) };
        self.end(b).await
    }

    /// Ends block `b` (the caller holds `leasing`).
    async fn end(&self, b: Block) -> Result<(), StateError> {
        self.record(Some(b), None).await?;
        let mut l = self.local.lock();
        if l.block.is_some_and(|cur| cur.start == b.start) {
            l.block = None;
        }
        Ok(())
    }

    /// The leader's step: reads the blocks of every edge (on every shard), walks them from
    /// `serving` by up to `n` real places ([`walk`]) and writes the result with the lease checked;
    /// drops the blocks passed. `None`: not the leader (nothing written).
    pub async fn step(&self, node: &str, n: u64) -> Result<Option<Advanced>, StateError> {
        let m = &self.main;
        let mut get = redis::cmd("GET");
        get.arg(&m.serving);
        let serving = int(&self.redis.cmd(get).await?).unwrap_or(0).max(0) as u64;
        let reads = self.shards.iter().map(|sh| async move {
            let mut p = redis::pipe();
            p.cmd("HGETALL").arg(&sh.blk).cmd("GET").arg(&sh.placed);
            self.redis.pipe(&p).await
        });
        let mut blocks = Vec::new();
        let mut placed = 0u64;
        let mut owner: HashMap<u64, usize> = HashMap::new();
        for (i, r) in futures::future::join_all(reads).await.into_iter().enumerate() {
            let v = r?;
            let fields: Vec<String> = match v.first() {
                Some(Value::Array(items)) => items.iter().filter_map(text).collect(),
                Some(Value::Map(items)) => items.iter().flat_map(|(k, v)| [text(k), text(v)]).flatten().collect(),
                _ => Vec::new(),
            };
            for pair in fields.chunks(2) {
                if let [start, rec] = pair
                    && let Some(b) = BlockRecord::parse(start, rec)
                {
                    owner.insert(b.start, i);
                    blocks.push(b);
                }
            }
            placed += v.get(1).and_then(int).unwrap_or(0).max(0) as u64;
        }
        blocks.sort_by_key(|b| b.start);
        let now = now_ms();
        let grace = Duration::from_millis(GRACE_MS);
        let w = {
            let gap = *self.gap.lock();
            walk(serving, n, &blocks, now, self.cfg.block_ms + GRACE_MS, |at| gap.is_some_and(|(g, since)| g == at && since.elapsed() >= grace))
        };
        {
            let mut gap = self.gap.lock();
            match w.gap {
                Some(at) if gap.is_none_or(|(g, _)| g != at) => *gap = Some((at, Instant::now())),
                Some(_) => {}
                None => *gap = None,
            }
        }
        let args = [node.to_owned(), w.serving.to_string(), (w.released + w.late).to_string(), placed.to_string()];
        let v = self.redis.run(&ADVANCE, &[&m.leader, &m.serving, &m.passed, &m.waiting], &args).await?;
        let (serving, waiting) = match ints(&v).as_slice() {
            [Some(s), Some(q)] => ((*s).max(0) as u64, (*q).max(0) as u64),
            _ if int(&v) == Some(-1) => return Ok(None),
            _ => return Err(StateError(format!("room_spread_advance answered {v:?}"))),
        };
        // The blocks passed go, shard by shard.
        let mut drops: HashMap<usize, Vec<u64>> = HashMap::new();
        for start in &w.drop {
            drops.entry(owner[start]).or_default().push(*start);
        }
        let cleanups = drops.iter().map(|(i, starts)| {
            let mut cmd = redis::cmd("HDEL");
            cmd.arg(&self.shards[*i].blk);
            for s in starts {
                cmd.arg(*s);
            }
            self.redis.cmd(cmd)
        });
        for r in futures::future::join_all(cleanups).await {
            r?;
        }
        *self.stepped.lock() = Some(Instant::now());
        let mut c = self.cache.lock();
        *c = Counters { issued: serving + waiting, serving, ..Counters::default() };
        Ok(Some(Advanced { serving, lane_serving: 0, released: w.released }))
    }

    /// Forgets identities behind the front once over the bound (their tickets carry their places).
    fn prune(&self, serving: u64) {
        let mut l = self.local.lock();
        if l.known.len() > self.max_tracked {
            l.known.retain(|_, p| *p > serving);
            l.known.shrink_to_fit();
        }
    }
}

/// Now, Unix ms (this edge's clock: block lease times, compared by the leader with its own).
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A bulk or simple string reply as text.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

/// A position from the identity map (`None`: none, or its session ended — `d<position>`).
fn live_position(v: &Value) -> Option<u64> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}

#[async_trait]
impl RoomState for SpreadRoom {
    async fn join(&self, who: Who, _open: bool, proof: Proof) -> Result<Option<Joined>, StateError> {
        if !proof.proven || proof.lane {
            // Refused by validation; never an owed place or a lane place on this layout.
            return Err(StateError("the spread layout has no owed places and no invite lane".into()));
        }
        if let Some(p) = self.local.lock().known.get(&who).copied()
            && p & DONE == 0
        {
            return Ok(Some(Joined { position: p, fresh: false, owed: false, lane: 0 }));
        }
        self.start_flusher();
        let place = self.take().await?;
        let (tx, rx) = oneshot::channel();
        self.local.lock().pending.push((who, place, tx));
        let wait = Duration::from_millis(self.cfg.flush_ms) + CALL_TIMEOUT * 3;
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(Ok((position, fresh)))) => {
                let mut c = self.cache.lock();
                c.issued = c.issued.max(position);
                Ok(Some(Joined { position, fresh, owed: false, lane: 0 }))
            }
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(StateError("the join's batch was dropped".into())),
            Err(_) => Err(StateError("the join's batch was not written in time".into())),
        }
    }

    async fn proof_state(&self, who: Who, position: u64, _now_ms: u64, _grace_ms: u64) -> Result<ProofState, StateError> {
        // Never owed on this layout: the place stands unless its session ended.
        Ok(if self.spent(who, position).await? { ProofState::Lost } else { ProofState::Proven })
    }

    async fn lapse(&self, _now_ms: u64, _grace_ms: u64) -> Result<u64, StateError> {
        Ok(0)
    }

    fn counters(&self) -> Counters {
        *self.cache.lock()
    }

    async fn refresh(&self) -> Result<Counters, StateError> {
        // The leader steps (by nothing) when it has not stepped for a tick, so the queue's length
        // and the blocks done are kept up while nobody is released (a paused room).
        let leading = self.leading.lock().clone().filter(|_| self.stepped.lock().is_none_or(|t| t.elapsed() >= Duration::from_millis(1500)));
        if let Some(node) = leading
            && self.step(&node, 0).await?.is_some()
        {
            let c = self.counters();
            self.prune(c.serving);
            return Ok(c);
        }
        let mut cmd = redis::cmd("MGET");
        cmd.arg(&self.main.serving).arg(&self.main.waiting).arg(&self.main.active);
        let n = ints(&self.redis.cmd(cmd).await?);
        let get = |i: usize| n.get(i).copied().flatten().unwrap_or(0).max(0) as u64;
        self.active.store(get(2), Ordering::Relaxed);
        let c = Counters { issued: get(0) + get(1), serving: get(0), ..Counters::default() };
        *self.cache.lock() = c;
        self.prune(c.serving);
        Ok(c)
    }

    async fn lead(&self, node: &str, lease_ms: u64) -> Result<bool, StateError> {
        let v = self.redis.run(&LEAD, &[&self.main.leader], &[node.to_owned(), lease_ms.to_string()]).await?;
        let held = int(&v) == Some(1);
        *self.leading.lock() = held.then(|| node.to_owned());
        Ok(held)
    }

    async fn resign(&self, node: &str) -> Result<(), StateError> {
        // Leaving: the block is done (the leader need not wait out its lease).
        {
            let _one = self.leasing.lock().await;
            let b = self.local.lock().block;
            if let Some(b) = b {
                let _ = self.end(b).await;
            }
        }
        self.redis.run(&RESIGN, &[&self.main.leader], &[node.to_owned()]).await.map(|_| ())
    }

    async fn freeze(&self) -> Result<(), StateError> {
        // No pre-queue draw on this layout (validation refuses `random`).
        Ok(())
    }

    async fn advance_lane(&self, node: &str, n: u64, _lane: u64, _now_ms: u64) -> Result<Advanced, StateError> {
        match self.step(node, n).await? {
            Some(a) => Ok(a),
            None => {
                // Not the leader: nothing moved.
                let c = self.counters();
                Ok(Advanced { serving: c.serving, lane_serving: 0, released: 0 })
            }
        }
    }

    async fn pass(&self, _position: u64) -> Result<bool, StateError> {
        // No passthrough on this layout (validation refuses `when-needed`).
        Ok(false)
    }

    async fn open_session(&self, who: Who, until_ms: u64) -> Result<bool, StateError> {
        self.shard(who).open(&self.redis, who, until_ms).await
    }

    async fn session_alive(&self, who: Who, now_ms: u64) -> Result<bool, StateError> {
        self.shard(who).alive(&self.redis, who, now_ms).await
    }

    async fn end_session(&self, who: Who) -> Result<bool, StateError> {
        let ended = self.shard(who).end(&self.redis, who).await?;
        if ended && let Some(p) = self.local.lock().known.get_mut(&who) {
            *p |= DONE;
        }
        Ok(ended)
    }

    async fn spent(&self, who: Who, position: u64) -> Result<bool, StateError> {
        self.shard(who).spent(&self.redis, who, position).await
    }

    async fn touch(&self, who: Who, now_ms: u64) -> Result<(), StateError> {
        self.shard(who).touch(&self.redis, who, now_ms).await
    }

    /// Only the leader sweeps the shards (one sweep a tick for the room, not one per edge) and
    /// publishes the active count; the other edges answer the count they last read (`refresh`)
    /// and no exits (the leader's controller is the one that moves `serving`).
    async fn sweep(&self, now_ms: u64, idle_ms: u64) -> Result<(u64, u64), StateError> {
        if self.leading.lock().is_none() {
            return Ok((self.active.load(Ordering::Relaxed), 0));
        }
        let all = futures::future::join_all(self.shards.iter().map(|s| s.s.sweep(&self.redis, now_ms, idle_ms))).await;
        let mut sum = (0, 0);
        for r in all {
            let (a, e) = r?;
            sum = (sum.0 + a, sum.1 + e);
        }
        self.active.store(sum.0, Ordering::Relaxed);
        let mut cmd = redis::cmd("SET");
        cmd.arg(&self.main.active).arg(sum.0);
        self.redis.cmd(cmd).await?;
        Ok(sum)
    }

    fn tracked(&self) -> usize {
        self.local.lock().known.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_ones_redis_computes() {
        // Values from `CLUSTER KEYSLOT` (Redis documentation: "123456789" has CRC16 0x31C3).
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot(""), 0);
    }

    #[test]
    fn shards_fall_evenly_on_equal_slot_ranges() {
        for (id, shards) in [("mega", 6u32), ("r1", 12), ("stadium-tour", 3), ("x", 1)] {
            let tags = shard_tags(id, shards);
            assert_eq!(tags.len(), shards as usize);
            for (k, t) in tags.iter().enumerate() {
                assert_eq!(slot(t) as u64 * shards as u64 / 16384, k as u64, "{t}");
                assert!(t.starts_with(&format!("room:{id}:{k}.")), "{t}");
            }
            // 3 masters as `redis-cli --cluster create` splits the slots (0-5460, 5461-10922,
            // 10923-16383): 6 shards, 2 each.
            if shards == 6 {
                let mut per = [0; 3];
                for t in &tags {
                    per[match slot(t) { 0..=5460 => 0, 5461..=10922 => 1, _ => 2 }] += 1;
                }
                assert_eq!(per, [2, 2, 2], "{tags:?}");
            }
        }
        // The same on every edge.
        assert_eq!(shard_tags("mega", 6), shard_tags("mega", 6));
        // The block counter sits a third of the slot space or more away from the room's slot.
        for id in ["mega", "r1", "stadium-tour", "x"] {
            let (c, r) = (slot(&counter_tag(id)) as i32, slot(&format!("room:{id}")) as i32);
            let d = (c - r).rem_euclid(16384);
            assert!(d.min(16384 - d) >= 5461, "{id}: {c} vs {r}");
        }
    }

    fn b(start: u64, end: u64, used: u64, done: bool) -> BlockRecord {
        BlockRecord { start, end, lease_ms: 1000, used, done }
    }

    #[test]
    fn the_walk_counts_real_places_and_skips_the_holes_of_done_blocks() {
        let blocks = [b(1, 10, 5, true), b(11, 20, 13, false), b(21, 30, 20, false)];
        // 4 of a's 5, then its last, the hole 6-10, then 3 of b's (b still in use: it waits there).
        let w = walk(0, 4, &blocks, 1100, 250, |_| false);
        assert_eq!((w.serving, w.released, w.drop.clone()), (4, 4, vec![]));
        let w = walk(4, 100, &blocks, 1100, 250, |_| false);
        assert_eq!((w.serving, w.released, w.drop.clone()), (13, 4, vec![1]));
        // Once b's lease is older than the grace it is done: its end is passed, and c (leased
        // later, nothing used) waits.
        let c = BlockRecord { lease_ms: 1200, ..blocks[2] };
        let w = walk(13, 100, &[blocks[1], c], 1251, 250, |_| false);
        assert_eq!((w.serving, w.released, w.late, w.drop.clone()), (20, 0, 0, vec![11]));
        // Nothing to release: done blocks with nothing left are still passed.
        let w = walk(5, 0, &blocks, 1100, 250, |_| false);
        assert_eq!((w.serving, w.released), (10, 0));
    }

    #[test]
    fn a_gap_waits_for_the_grace_and_late_blocks_count_as_passed() {
        // Positions 11-20 are in no block (a lease not recorded yet, or lost).
        let blocks = [b(1, 10, 10, true), b(21, 30, 25, true)];
        let w = walk(0, 100, &blocks, 5000, 250, |_| false);
        assert_eq!((w.serving, w.released, w.gap), (10, 10, Some(11)));
        let w = walk(10, 100, &blocks, 5000, 250, |at| at == 11);
        assert_eq!((w.serving, w.released, w.gap), (30, 5, None));
        // A block wholly behind serving (its end reported after the leader passed it): its places
        // count as passed, once, and it goes.
        let w = walk(30, 100, &[b(1, 10, 7, true)], 5000, 250, |_| false);
        assert_eq!((w.serving, w.released, w.late, w.drop), (30, 0, 7, vec![1]));
    }

    #[test]
    fn records_parse_and_bad_ones_are_skipped() {
        assert_eq!(BlockRecord::parse("11", "20:1700:13:1"), Some(BlockRecord { start: 11, end: 20, lease_ms: 1700, used: 13, done: true }));
        assert_eq!(BlockRecord::parse("11", "20:1700:10:0").map(|r| r.done), Some(false));
        assert_eq!(BlockRecord::parse("x", "20:1700:13:1"), None);
        assert_eq!(BlockRecord::parse("11", "20:1700"), None);
    }
}
