//! A room spread across a Redis Cluster (`layout = "spread"`, DESIGN §7b): the state of one room
//! no longer sits on one node, so a room's joins are not bounded by one node's scripts a second.
//!
//! - **Places ordered by arrival time.** A join's place is (the `block-ms` time bucket it arrived
//!   in, its edge's index, its order at that edge), written as one number ([`Numbering`]): across
//!   edges, joins are out of order by at most one bucket (5 ms by default) and the edges' clock
//!   skew; within an edge the order is exact. Numbering costs no Redis command: an edge claims an
//!   index once (lua/room_spread_edge.lua, renewed every 2 s; at most [`EDGES`] edges number at
//!   once) and its places of one bucket are its *block*. The time is the *room's clock*: the
//!   edge's own, set by the `TIME` of the node holding the claims, read every 2 s with the claim
//!   and by the leader (half the round trip is the error), so an edge whose clock is off gives
//!   its fans no earlier or later places ([`SpreadRoom::now_ms`]).
//! - **Real places only.** At each batch an edge records the blocks it left and how far it used
//!   them, with its *watermark* (every block of a bucket before it is recorded), on one shard
//!   (its records go round them; lua/room_spread_block.lua: one script). The leader reads the watermarks, then the
//!   front of every shard's blocks, walks them in position order and passes only places handed
//!   out ([`SpreadRoom::step`], [`walk`]). Positions no record holds are passed only when nobody can
//!   hold them ([`passable`]): their edge's watermark is past them, or no edge claims the index,
//!   or its edge was silent for the grace (2 s; an edge that died mid-bucket: its fans are let in,
//!   uncounted). The step is written with the lease checked (lua/room_spread_advance.lua), with
//!   the blocks at the front and how many places each second of joins holds, from which every
//!   edge tells a fan how many people are ahead ([`ahead_of`]: exact over the front, estimated
//!   beyond): places are not consecutive numbers on this layout.
//! - **Identities and sessions sharded.** The identity map (a rejoin keeps its place) and the
//!   sessions are split over `shards` slots chosen to spread evenly over the slot space
//!   ([`shard_tags`]). A join takes its place at arrival and waits for the edge's next batch
//!   (every `flush-ms`): one `HMGET` and one `HSET` per shard for the whole batch, so a join costs
//!   a fraction of a Redis command. An identity found holding a place keeps it (the place just
//!   taken is left a hole, counted by the release as a place: rejoins without their ticket only).
//!   A session found running is believed for 1 s on the edge that looked (an end at another edge
//!   reaches it within that second).
//! - **What it does not carry (yet).** Owed places of the room's bot check, the random pre-queue,
//!   passthrough and the invite lane's share keep per-place state in one slot; validation refuses
//!   them with this layout ([`super::config::RoomConfig::compile`]).
//!
//! Edge-local state: the open block, the blocks not recorded yet, the batch not yet written, the
//! identities this edge numbered (a rejoin at the same edge is answered without Redis; bounded by
//! `max-tracked`) and the sessions it saw running in the last second.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use redis::{Script, Value};
use tokio::sync::oneshot;

use super::config::SpreadConfig;
use super::redis::{CALL_TIMEOUT, LEAD, RESIGN, RedisRooms, SessionKeys, int, ints, spent_by, text, who_hex};
use super::state::{Advanced, Counters, DONE, Joined, Proof, ProofState, RoomState, PickupAsk, StateError, Swept, Who};

static RECORD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_spread_block.lua")));
static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_spread_edge.lua")));
static ADVANCE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_spread_advance.lua")));
/// The node's clock (`TIME`), asked of the node holding the room's edge claims.
static CLOCK: LazyLock<Script> = LazyLock::new(|| Script::new("return redis.call('TIME')"));

/// Edges that can number one room's joins at once (each holds an index below it).
pub const EDGES: u64 = 64;
/// 2026-01-01T00:00:00Z: buckets are counted from it on every edge (no shared key a failover
/// could lose).
pub const EPOCH_MS: u64 = 1_767_225_600_000;
/// An edge whose watermark is older than this is taken as gone: the leader passes its positions
/// of buckets older than this (its fans get in, uncounted).
const GRACE_MS: u64 = 2000;
/// Positions of an index no edge claims are passed once their bucket is this old (a claim made
/// since the leader read the claims numbers from the bucket it was made in; clocks a little apart).
const SKEW_MS: u64 = 250;
/// An index not renewed for this long is free for another edge.
const CLAIM_STALE_MS: u64 = 10_000;
/// How often an edge renews its index (and reads the room's clock).
const CLAIM_EVERY: Duration = Duration::from_secs(2);
/// A clock reading whose round trip took longer than this is not used (its error would be half).
const CLOCK_RTT_MAX_MS: u64 = 100;
/// Readings of the room's clock the offset is chosen from (the one with the shortest round trip):
/// the last 30 s.
const CLOCK_SAMPLES: usize = 15;
/// An edge with no block to record still writes its watermark this often (so the leader need not
/// wait for it at the front of the queue).
const MARK_EVERY: Duration = Duration::from_secs(1);
/// Blocks the leader reads from each shard in one step: the front of the queue.
const WINDOW: usize = 1000;
/// Blocks at the front the leader publishes, over which the people ahead are counted exactly.
const FRONT: usize = 256;
/// Most blocks one record carries (the rest go with the next batch).
const MAX_RECORD: usize = 500;
/// Seconds of joins behind `serving` whose counts the leader keeps.
const HIST_KEEP_S: u64 = 60;
/// Most joins one batch takes (the rest wait for the next).
const MAX_BATCH: usize = 20_000;
/// How long a session seen running is believed without asking its shard again.
const ALIVE_FOR: Duration = Duration::from_secs(1);
/// Most sessions remembered as running (the memory is cleared when it is full).
const MAX_ALIVE: usize = 100_000;

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

/// The hash tag of a room's edge claims: the first `room:<id>:n.<k>` away from the room's slot
/// ([`away_from_room`]), so the claims and the leader's writes fall on two masters.
pub fn counter_tag(id: &str) -> String {
    (0u32..).map(|k| format!("room:{id}:n.{k}")).find(|t| away_from_room(t, id)).unwrap_or_default()
}


/// How a spread room's places are numbered: position `p` is place `seq` of edge index `e`'s
/// block in time bucket `t` (`block-ms` wide, counted from [`EPOCH_MS`]):
/// `p = (t * EDGES + e) * block + seq + 1`. Ordered by bucket first, so by arrival time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Numbering {
    pub block: u64,
    pub block_ms: u64,
}

impl Numbering {
    pub fn new(cfg: &SpreadConfig) -> Self {
        Numbering { block: cfg.block.max(1), block_ms: cfg.block_ms.max(1) }
    }

    /// The bucket of a Unix time (ms).
    pub fn bucket(&self, unix_ms: u64) -> u64 {
        unix_ms.saturating_sub(EPOCH_MS) / self.block_ms
    }

    /// The first position of edge `e`'s block in bucket `t`.
    pub fn start(&self, t: u64, e: u64) -> u64 {
        (t * EDGES + e) * self.block + 1
    }

    /// The last position of edge `e`'s block in bucket `t`.
    pub fn end(&self, t: u64, e: u64) -> u64 {
        self.start(t, e) + self.block - 1
    }

    /// The (bucket, edge index) of a position.
    pub fn decode(&self, p: u64) -> (u64, u64) {
        let q = p.saturating_sub(1) / self.block;
        (q / EDGES, q % EDGES)
    }

    /// The second (from [`EPOCH_MS`]) bucket `t` falls in.
    pub fn second(&self, t: u64) -> u64 {
        t * self.block_ms / 1000
    }

    /// The first position of second `s`.
    fn second_start(&self, s: u64) -> u64 {
        self.start((s * 1000).div_ceil(self.block_ms), 0)
    }
}

/// What the leader knows of an edge index when it meets positions no record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Its edge recorded every block of a bucket before this one, within the grace.
    Live(u64),
    /// Claimed (or once recorded), its edge silent for longer than the grace.
    Silent,
    /// No edge claims it.
    Free,
}

/// Whether the positions `from..=to`, which no record holds, can be passed at `now_rel_ms` (ms
/// since [`EPOCH_MS`]): every edge index's positions among them are of a bucket before its
/// edge's watermark, or of a bucket older than the grace (a silent edge) or than the clock skew
/// (an index nobody claims).
pub fn passable(num: &Numbering, from: u64, to: u64, marks: &[Mark], now_rel_ms: u64) -> bool {
    let (t2, e2) = num.decode(to);
    (0..EDGES).all(|e| {
        // The last bucket of index e with positions in the range.
        let te = if e <= e2 {
            t2
        } else if t2 > 0 {
            t2 - 1
        } else {
            return true;
        };
        if num.end(te, e) < from {
            return true;
        }
        let ends_ms = (te + 1) * num.block_ms;
        match marks.get(e as usize).copied().unwrap_or(Mark::Free) {
            Mark::Live(w) => w > te,
            Mark::Silent => ends_ms + GRACE_MS < now_rel_ms,
            Mark::Free => ends_ms + SKEW_MS < now_rel_ms,
        }
    })
}

/// A block as its edge recorded it: how far it was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRecord {
    pub start: u64,
    pub end: u64,
    /// Last position handed out (`start - 1`: none).
    pub used: u64,
}

impl BlockRecord {
    /// From its member in the shard's set, `start:end:used`.
    fn parse(member: &str) -> Option<BlockRecord> {
        let mut f = member.split(':');
        let (start, end, used) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next()?.parse().ok()?);
        (f.next().is_none() && start >= 1 && start <= end && used + 1 >= start && used <= end).then_some(BlockRecord { start, end, used })
    }

    fn member(&self) -> String {
        format!("{}:{}:{}", self.start, self.end, self.used)
    }

    fn places(&self) -> u64 {
        self.used + 1 - self.start
    }
}

/// One step of the leader over every edge's blocks ([`walk`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Walk {
    /// `serving` after it.
    pub serving: u64,
    /// Real places it passed.
    pub released: u64,
    /// Places of blocks wholly behind `serving` when the step began, never counted as passed (a
    /// block recorded after the leader passed its positions: its edge was silent past the grace).
    pub late: u64,
    /// The start of a gap (positions no record holds) the walk stopped at.
    pub gap: Option<u64>,
}

/// Moves `serving` over `blocks` (sorted by start, disjoint) by up to `n` real places: through
/// each block's used places, then over its unused end; over positions no block holds only when
/// `passable(from, to)`.
pub fn walk(serving: u64, mut n: u64, blocks: &[BlockRecord], passable: impl Fn(u64, u64) -> bool) -> Walk {
    let mut w = Walk { serving, ..Walk::default() };
    for b in blocks {
        if b.end <= serving {
            w.late += b.places();
            continue;
        }
        if w.serving + 1 < b.start {
            if !passable(w.serving + 1, b.start - 1) {
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
        if w.serving < b.used {
            break;
        }
        w.serving = w.serving.max(b.end);
    }
    w
}

/// How many places lie between `serving` and `position` (both excluded), never fewer than there
/// are (issue #38: a fan's "people ahead" only ever falls): exact over the blocks at the front,
/// beyond them the places each second of joins holds ([`upper_between`]), the seconds at the two
/// ends counted whole rather than shared out.
pub fn ahead_of(num: &Numbering, hist: &[(u64, u64)], front: &[BlockRecord], serving: u64, position: u64) -> u64 {
    if position <= serving + 1 {
        return 0;
    }
    // Used places of the front blocks in lo..=hi.
    let count = |lo: u64, hi: u64| -> u64 {
        front
            .iter()
            .map(|b| {
                let (a, z) = (b.start.max(lo), b.used.min(hi));
                if z >= a { z - a + 1 } else { 0 }
            })
            .sum()
    };
    match front.last().map(|b| b.end).filter(|end| *end > serving) {
        Some(end) if position <= end + 1 => count(serving + 1, position - 1),
        Some(end) => count(serving + 1, end) + upper_between(num, hist, front, end, position),
        None => upper_between(num, hist, &[], serving, position),
    }
}

/// At most how many places lie between `after` and `position` (both excluded), every place at
/// or before `after` being either passed or in `front`: the places of each second between, whole —
/// less, for the second `after` falls in, the front's places in it (all at or before `after`).
pub fn upper_between(num: &Numbering, hist: &[(u64, u64)], front: &[BlockRecord], after: u64, position: u64) -> u64 {
    if position <= after + 1 {
        return 0;
    }
    let count = |s: u64| hist.binary_search_by_key(&s, |h| h.0).map_or(0, |i| hist[i].1);
    let (sf, sp) = (num.second(num.decode(after + 1).0), num.second(num.decode(position).0));
    let in_front: u64 = front.iter().filter(|b| num.second(num.decode(b.start).0) == sf).map(BlockRecord::places).sum();
    let first = count(sf).saturating_sub(in_front);
    if sf >= sp {
        return first;
    }
    let between: u64 = hist.iter().filter(|h| h.0 > sf && h.0 < sp).map(|h| h.1).sum();
    first + between + count(sp)
}

/// About how many places lie between `serving` and `position` (both excluded), from the places
/// each second of joins holds (`hist`, sorted by second): whole seconds between them, and the
/// share of the two seconds at the ends that falls between (places spread evenly in a second).
pub fn estimate_between(num: &Numbering, hist: &[(u64, u64)], serving: u64, position: u64) -> u64 {
    if position <= serving + 1 {
        return 0;
    }
    let from = serving + 1;
    let frac = |p: u64, s: u64| {
        let (a, b) = (num.second_start(s), num.second_start(s + 1));
        (p.saturating_sub(a) as f64 / b.saturating_sub(a).max(1) as f64).clamp(0.0, 1.0)
    };
    let count = |s: u64| hist.binary_search_by_key(&s, |h| h.0).map_or(0, |i| hist[i].1) as f64;
    let (sf, sp) = (num.second(num.decode(from).0), num.second(num.decode(position).0));
    let v = if sf == sp {
        count(sp) * (frac(position, sp) - frac(from, sf))
    } else {
        let between: u64 = hist.iter().filter(|h| h.0 > sf && h.0 < sp).map(|h| h.1).sum();
        count(sf) * (1.0 - frac(from, sf)) + between as f64 + count(sp) * frac(position, sp)
    };
    v.max(0.0).round() as u64
}

/// What the leader publishes for every edge to count the people ahead: places per second of
/// joins ahead of `serving`, and the blocks at the front (`"second:places,...;start:end:used,..."`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    pub hist: Vec<(u64, u64)>,
    pub front: Vec<BlockRecord>,
    /// Every place of a bucket up to this one is in `hist` and `front` (every live edge recorded
    /// it); `None`: not known (a leader before this field) — nothing is counted then.
    pub covered: Option<u64>,
}

impl Shown {
    fn text(&self) -> String {
        let h = self.hist.iter().map(|(s, c)| format!("{s}:{c}")).collect::<Vec<_>>().join(",");
        let f = self.front.iter().map(BlockRecord::member).collect::<Vec<_>>().join(",");
        match self.covered {
            Some(c) => format!("{h};{f};{c}"),
            None => format!("{h};{f}"),
        }
    }

    /// From [`Shown::text`]; bad items are skipped.
    fn parse(text: &str) -> Shown {
        let mut parts = text.splitn(3, ';');
        let (h, f) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let covered = parts.next().and_then(|c| c.parse().ok());
        let mut front: Vec<BlockRecord> = f.split(',').filter_map(BlockRecord::parse).collect();
        front.sort_by_key(|b| b.start);
        Shown { hist: parse_hist(h), front, covered }
    }

    /// The people ahead of `position` ([`ahead_of`], at most `waiting - 1`), or `None` while
    /// places before it may not be recorded yet: a fan who just joined is told nothing rather
    /// than too few.
    pub fn ahead(&self, num: &Numbering, serving: u64, position: u64, waiting: u64) -> Option<u64> {
        if position <= serving + 1 {
            return Some(0);
        }
        if self.covered.is_none_or(|c| num.decode(position).0 > c) {
            return None;
        }
        Some(ahead_of(num, &self.hist, &self.front, serving, position).min(waiting.saturating_sub(1)))
    }
}

/// `"second:places,..."` (the leader's publication) as sorted pairs; bad items are skipped.
fn parse_hist(text: &str) -> Vec<(u64, u64)> {
    let mut h: Vec<(u64, u64)> = text
        .split(',')
        .filter_map(|i| {
            let (s, c) = i.split_once(':')?;
            Some((s.parse().ok()?, c.parse().ok()?))
        })
        .collect();
    h.sort_unstable();
    h
}

/// The room's keys in its own slot (`wk:{room:<id>}:...`, shared with the single layout's names),
/// but for the edge claims ([`counter_tag`]).
struct MainKeys {
    /// Edge index -> "node:ms of its last renewal" (`wk:{room:<id>:n.<k>}:edges`).
    edges: String,
    serving: String,
    leader: String,
    /// The leader's book of promises, kept for its successor (lua/room_book.lua).
    book: String,
    /// Real places serving passed.
    passed: String,
    /// Places handed out and not passed, as the leader's last step counted.
    waiting: String,
    /// Active sessions, as the leader's last sweep counted.
    active: String,
    /// The places of each second of joins ahead of `serving`, as the leader's last step counted.
    hist: String,
}

/// One shard's keys: identities and sessions ([`SessionKeys`]), and the records of the edges
/// whose index falls on it (lua/room_spread_block.lua): their blocks, watermarks, and places per
/// second of joins.
struct Shard {
    s: SessionKeys,
    blocks: String,
    wm: String,
    hist: String,
}

/// The block this edge numbers its joins in.
#[derive(Debug, Clone, Copy)]
struct Open {
    t: u64,
    start: u64,
    end: u64,
    /// Next position to hand out.
    next: u64,
}

impl Open {
    fn record(&self) -> (u64, BlockRecord) {
        (self.t, BlockRecord { start: self.start, end: self.end, used: self.next - 1 })
    }
}

/// A join waiting for its batch.
type Waiter = oneshot::Sender<Result<(u64, bool), StateError>>;

#[derive(Default)]
struct Local {
    /// Joins waiting for their batch: identity, the place taken at arrival.
    pending: Vec<(Who, u64, Waiter)>,
    /// The identities this edge numbered (or found), for a rejoin here.
    known: HashMap<Who, u64>,
    /// This edge's index in the room, and when it was last claimed or renewed.
    index: Option<(u64, Instant)>,
    open: Option<Open>,
    /// Blocks left and not recorded yet, with their buckets.
    left: Vec<(u64, BlockRecord)>,
    /// No block of an earlier bucket is opened (what the watermark written promised).
    floor: u64,
    /// When the watermark was last written.
    marked: Option<Instant>,
    /// Records written (they go round the shards).
    records: u64,
}

impl Local {
    /// Leaves the open block (recorded with the next batch).
    fn leave(&mut self) {
        if let Some(o) = self.open.take() {
            self.floor = self.floor.max(o.t + 1);
            if o.next > o.start {
                self.left.push(o.record());
            }
        }
    }
}

/// One spread room's state on one edge.
pub struct SpreadRoom {
    redis: RedisRooms,
    cfg: SpreadConfig,
    num: Numbering,
    /// This process's token in the room's edge claims.
    token: String,
    main: MainKeys,
    shards: Vec<Shard>,
    /// The node id that holds the leader's lease here (set by `lead`): its `refresh` steps too.
    leading: Mutex<Option<String>>,
    /// When this edge last stepped as the leader.
    stepped: Mutex<Option<Instant>>,
    /// Active sessions as last known (the leader's sweep, published for the other edges).
    active: std::sync::atomic::AtomicU64,
    /// Real places `serving` passed, as last known.
    passed: std::sync::atomic::AtomicU64,
    cache: Mutex<Counters>,
    /// What the leader last published to count the people ahead ([`Shown`]).
    shown: Mutex<Shown>,
    local: Mutex<Local>,
    /// Sessions seen running: until when (ms), and when that was read.
    alive: Mutex<HashMap<Who, (u64, Instant)>>,
    /// One batch at a time.
    batching: tokio::sync::Mutex<()>,
    /// One claim at a time.
    claiming: tokio::sync::Mutex<()>,
    /// The room's clock minus this edge's, ms (see [`SpreadRoom::now_ms`]), and when it was read.
    clock_offset: std::sync::atomic::AtomicI64,
    clock_read: Mutex<Option<Instant>>,
    /// The last readings of the room's clock: (round trip, offset in µs).
    clock_samples: Mutex<std::collections::VecDeque<(u64, i64)>>,
    /// Tests only: how far this edge's own clock is off ([`SpreadRoom::skew_own_clock`]).
    own_skew: std::sync::atomic::AtomicI64,
    /// The last claim refused for other settings: why, and when (asked again after [`CLAIM_EVERY`]).
    refused: Mutex<Option<(String, Instant)>>,
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
            .map(|p| Shard { s: SessionKeys::under(p), blocks: format!("{p}:blocks"), wm: format!("{p}:wm"), hist: format!("{p}:hist") })
            .collect();
        Arc::new_cyclic(|me| SpreadRoom {
            redis,
            num: Numbering::new(&cfg),
            cfg,
            token: format!("{:016x}", rand::random::<u64>()),
            main: MainKeys {
                edges: format!("wk:{{{}}}:edges", counter_tag(id)),
                serving: k("serving"),
                leader: k("leader"),
                book: k("book"),
                passed: k("passed"),
                waiting: k("waiting"),
                active: k("active"),
                hist: k("hist"),
            },
            shards,
            leading: Mutex::new(None),
            stepped: Mutex::new(None),
            active: std::sync::atomic::AtomicU64::new(0),
            passed: std::sync::atomic::AtomicU64::new(0),
            cache: Mutex::new(Counters::default()),
            shown: Mutex::new(Shown::default()),
            local: Mutex::new(Local::default()),
            alive: Mutex::new(HashMap::new()),
            batching: tokio::sync::Mutex::new(()),
            claiming: tokio::sync::Mutex::new(()),
            clock_offset: std::sync::atomic::AtomicI64::new(0),
            clock_read: Mutex::new(None),
            clock_samples: Mutex::new(std::collections::VecDeque::new()),
            own_skew: std::sync::atomic::AtomicI64::new(0),
            refused: Mutex::new(None),
            flusher: AtomicBool::new(false),
            me: me.clone(),
            max_tracked,
        })
    }

    /// What every edge numbering the room must share: `shards:block:block-ms`.
    fn numbering_settings(&self) -> String {
        format!("{}:{}:{}", self.cfg.shards, self.cfg.block, self.cfg.block_ms)
    }

    /// This edge's own clock, Unix ms.
    fn own_ms(&self) -> u64 {
        let sys = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        sys.saturating_add_signed(self.own_skew.load(Ordering::Relaxed))
    }

    /// Now on the room's clock, Unix ms: this edge's clock moved by the offset to the `TIME` of
    /// the node holding the claims ([`SpreadRoom::read_clock`]). Every edge numbers, marks and
    /// judges buckets with it, so a clock seconds off moves nobody's place.
    pub fn now_ms(&self) -> u64 {
        self.own_ms().saturating_add_signed(self.clock_offset.load(Ordering::Relaxed))
    }

    /// Tests only: makes this edge's own clock `ms` off (as a host whose clock drifted).
    #[doc(hidden)]
    pub fn skew_own_clock(&self, ms: i64) {
        self.own_skew.store(ms, Ordering::Relaxed);
    }

    /// Reads the room's clock (`TIME` on the node of the claims), every [`CLAIM_EVERY`] (with the
    /// claim, and by the leader), and sets the offset to this edge's from the reading with the
    /// shortest round trip of the last [`CLOCK_SAMPLES`] (a busy moment's reading errs by up to
    /// half its round trip): measured at the middle of the round trip, and 0 while the clocks agree
    /// within that error (clocks kept by NTP number exactly as this edge's own). A reading slower
    /// than [`CLOCK_RTT_MAX_MS`] is not used.
    async fn read_clock(&self) -> Result<(), StateError> {
        if self.clock_read.lock().is_some_and(|at| at.elapsed() < CLAIM_EVERY) {
            return Ok(());
        }
        let before = self.own_ms();
        let v = self.redis.run(&CLOCK, &[&self.main.edges], &[] as &[String]).await?;
        let after = self.own_ms();
        let time = ints(&v);
        let (Some(Some(s)), Some(Some(us))) = (time.first().copied(), time.get(1).copied()) else {
            return Err(StateError(format!("TIME answered {v:?}")));
        };
        *self.clock_read.lock() = Some(Instant::now());
        let rtt = after.saturating_sub(before);
        if rtt > CLOCK_RTT_MAX_MS {
            // Kept: the last offset (none yet: this edge's own clock), and said.
            tracing::warn!(rtt_ms = rtt, "spread room: the room's clock answered too slowly to set this edge's by it");
            return Ok(());
        }
        let room_us = s * 1_000_000 + us;
        let offset_us = room_us - (before + after) as i64 * 500;
        let best = {
            let mut samples = self.clock_samples.lock();
            if samples.len() == CLOCK_SAMPLES {
                samples.pop_front();
            }
            samples.push_back((rtt, offset_us));
            samples.iter().min_by_key(|(rtt, _)| *rtt).copied().unwrap_or((rtt, offset_us))
        };
        let (rtt, offset_us) = best;
        // Within half the round trip (and the millisecond of this clock) the clocks agree.
        let error_us = rtt as i64 * 500 + 1000;
        let offset_ms = if offset_us.abs() <= error_us { 0 } else { offset_us / 1000 };
        self.clock_offset.store(offset_ms, Ordering::Relaxed);
        Ok(())
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
    /// and one `HSET` per shard; then answers each join; then records the blocks this edge left
    /// (and its watermark), and renews its index every [`CLAIM_EVERY`].
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
        if self.local.lock().index.is_some_and(|(_, at)| at.elapsed() >= CLAIM_EVERY)
            && let Err(e) = self.claim().await
        {
            tracing::debug!("spread room: renewing the edge index: {e}");
        }
        if let Err(e) = self.record().await {
            tracing::debug!("spread room: recording blocks: {e}");
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

    /// The next place of this edge's block for the current bucket, taken at the join's arrival
    /// (so joins are in arrival order at this edge whatever the batch). A block used up spills
    /// into the next bucket; the first join claims the edge's index.
    async fn take(&self) -> Result<u64, StateError> {
        if self.local.lock().index.is_none() {
            self.claim().await?;
        }
        let now_t = self.num.bucket(self.now_ms());
        let mut l = self.local.lock();
        let Some((e, _)) = l.index else { return Err(StateError("no edge index".into())) };
        if let Some(o) = l.open.as_mut()
            && o.t >= now_t
            && o.next <= o.end
        {
            o.next += 1;
            return Ok(o.next - 1);
        }
        l.leave();
        let t = now_t.max(l.floor);
        let (start, end) = (self.num.start(t, e), self.num.end(t, e));
        l.open = Some(Open { t, start, end, next: start + 1 });
        Ok(start)
    }

    /// Claims (or renews) this edge's index in the room (lua/room_spread_edge.lua). A new index
    /// leaves the open block (numbered with the old one).
    async fn claim(&self) -> Result<u64, StateError> {
        let _one = self.claiming.lock().await;
        let held = self.local.lock().index;
        if let Some((e, at)) = held
            && at.elapsed() < CLAIM_EVERY
        {
            return Ok(e);
        }
        if let Some((why, at)) = &*self.refused.lock()
            && at.elapsed() < CLAIM_EVERY
        {
            return Err(StateError(why.clone()));
        }
        self.read_clock().await?;
        let held = held.map_or(-1, |(e, _)| e as i64);
        let mine = self.numbering_settings();
        let args = [self.token.clone(), self.now_ms().to_string(), CLAIM_STALE_MS.to_string(), EDGES.to_string(), held.to_string(), mine.clone()];
        let v = self.redis.run(&CLAIM, &[&self.main.edges], &args).await?;
        // Refused: this edge stops numbering with the index it had (after a failover lost the
        // claims, another edge may hold it now); its places of the open block are left (let in
        // uncounted once passable, as an edge gone mid-bucket).
        let drop_index = || {
            let mut l = self.local.lock();
            l.leave();
            l.index = None;
        };
        let e = match int(&v) {
            Some(e) if (0..EDGES as i64).contains(&e) => e as u64,
            Some(_) => {
                drop_index();
                return Err(StateError(format!("every one of the room's {EDGES} edge indexes is held by another edge")));
            }
            None => {
                // {-2, their settings}: the edges numbering now do it otherwise. This edge takes no
                // place in the room (asking again every CLAIM_EVERY) rather than hand out places the
                // others would misread.
                let theirs = match &v {
                    Value::Array(items) if items.first().and_then(int) == Some(-2) => items.get(1).and_then(text).unwrap_or_default(),
                    _ => return Err(StateError(format!("the edge claim answered {v:?}"))),
                };
                let why = format!(
                    "this edge's [rooms.spread] settings (shards:block:block-ms = {mine}) differ from those the room's other \
                     edges number with ({theirs}): every edge of a spread room needs the same shards, block and block-ms"
                );
                tracing::error!("{why}");
                drop_index();
                *self.refused.lock() = Some((why.clone(), Instant::now()));
                return Err(StateError(why));
            }
        };
        *self.refused.lock() = None;
        let mut l = self.local.lock();
        if l.index.is_some_and(|(old, _)| old != e) {
            l.leave();
        }
        l.index = Some((e, Instant::now()));
        Ok(e)
    }

    /// Records the blocks this edge left (an open block of a bucket gone by is left first) and
    /// its watermark, on the next shard in turn (lua/room_spread_block.lua); with none to record, the
    /// watermark alone every [`MARK_EVERY`]. Blocks not written stay for the next batch.
    async fn record(&self) -> Result<(), StateError> {
        let now_t = self.num.bucket(self.now_ms());
        let (e, blocks, wm, k) = {
            let mut l = self.local.lock();
            let Some((e, _)) = l.index else { return Ok(()) };
            if l.open.is_some_and(|o| o.t < now_t) {
                l.leave();
            }
            let wm = match l.open {
                Some(o) => o.t,
                None => now_t.max(l.floor),
            };
            l.floor = l.floor.max(wm);
            if l.left.is_empty() && l.marked.is_some_and(|m| m.elapsed() < MARK_EVERY) {
                return Ok(());
            }
            let n = l.left.len().min(MAX_RECORD);
            let blocks: Vec<(u64, BlockRecord)> = l.left.drain(..n).collect();
            // A watermark never passes a block still to record.
            let wm = l.left.first().map_or(wm, |(t, _)| wm.min(*t));
            (e, blocks, wm, l.records)
        };
        let mut args = vec![e.to_string(), wm.to_string(), blocks.len().to_string()];
        let mut per_second: BTreeMap<u64, u64> = BTreeMap::new();
        for (t, b) in &blocks {
            args.push(b.end.to_string());
            args.push(b.member());
            *per_second.entry(self.num.second(*t)).or_default() += b.places();
        }
        for (s, c) in per_second {
            args.push(s.to_string());
            args.push(c.to_string());
        }
        // Round the shards (from the index's own), so the records spread over the masters.
        let sh = &self.shards[((e + k) % self.shards.len() as u64) as usize];
        let r = self.redis.run(&RECORD, &[&sh.blocks, &sh.wm, &sh.hist], &args).await;
        let mut l = self.local.lock();
        match r {
            Ok(_) => {
                l.marked = Some(Instant::now());
                l.records += 1;
                Ok(())
            }
            Err(err) => {
                l.left.splice(0..0, blocks);
                Err(err)
            }
        }
    }

    /// The leader's step: reads the edge claims, then every shard's watermarks, then every
    /// shard's blocks (the front [`WINDOW`] of each) and places per second, walks from `serving` by up to `n` real
    /// places ([`walk`], [`passable`]) and writes the result with the lease checked; drops the
    /// blocks passed. `None`: not the leader (nothing written).
    pub async fn step(&self, node: &str, n: u64) -> Result<Option<Advanced>, StateError> {
        self.read_clock().await?;
        let m = &self.main;
        let mut get = redis::cmd("GET");
        get.arg(&m.serving);
        let mut claims = redis::cmd("HGETALL");
        claims.arg(&m.edges);
        // The claims before the watermarks, the watermarks before the blocks: what a watermark
        // promises is in the blocks read after it.
        let (serving, claims) = futures::future::join(self.redis.cmd(get), self.redis.cmd(claims)).await;
        let serving = int(&serving?).unwrap_or(0).max(0) as u64;
        let now = self.now_ms();
        let mut marks = [Mark::Free; EDGES as usize];
        for (i, v) in pairs(&claims?) {
            if let (Ok(i), Some((_, at))) = (i.parse::<usize>(), v.rsplit_once(':'))
                && i < marks.len()
                && at.parse::<u64>().is_ok_and(|at| at + CLAIM_STALE_MS >= now)
            {
                marks[i] = Mark::Silent;
            }
        }
        // Every shard's watermarks before any shard's blocks: an edge's records go round the
        // shards, and a watermark read promises blocks recorded on any of them.
        let now_rel = now.saturating_sub(EPOCH_MS);
        let wms = self.shards.iter().map(|sh| {
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(&sh.wm);
            self.redis.cmd(cmd)
        });
        for r in futures::future::join_all(wms).await {
            for (e, w) in pairs(&r?) {
                if let (Ok(e), Ok(w)) = (e.parse::<usize>(), w.parse::<u64>())
                    && e < marks.len()
                {
                    // The index's latest watermark counts.
                    let w = match marks[e] {
                        Mark::Live(v) => w.max(v),
                        _ => w,
                    };
                    let fresh = (w + 1) * self.num.block_ms + GRACE_MS >= now_rel;
                    marks[e] = if fresh { Mark::Live(w) } else { Mark::Silent };
                }
            }
        }
        let reads = self.shards.iter().map(|sh| async move {
            let mut p = redis::pipe();
            p.cmd("ZRANGE").arg(&sh.blocks).arg(0).arg(WINDOW - 1).cmd("HGETALL").arg(&sh.hist);
            self.redis.pipe(&p).await
        });
        let mut blocks: Vec<(BlockRecord, usize)> = Vec::new();
        let mut horizon = u64::MAX;
        let mut placed = 0u64;
        let mut seconds: BTreeMap<u64, u64> = BTreeMap::new();
        let mut old_seconds: Vec<Vec<String>> = vec![Vec::new(); self.shards.len()];
        let keep_from = self.num.second(self.num.decode(serving + 1).0).saturating_sub(HIST_KEEP_S);
        for (i, r) in futures::future::join_all(reads).await.into_iter().enumerate() {
            let v = r?;
            let members: Vec<String> = match v.first() {
                Some(Value::Array(items)) => items.iter().filter_map(text).collect(),
                _ => Vec::new(),
            };
            let mut last_end = 0;
            for b in members.iter().filter_map(|m| BlockRecord::parse(m)) {
                last_end = last_end.max(b.end);
                blocks.push((b, i));
            }
            if members.len() >= WINDOW {
                // Blocks beyond this shard's window all start after its last one read.
                horizon = horizon.min(last_end);
            }
            for (s, c) in pairs(v.get(1).unwrap_or(&Value::Nil)) {
                let Ok(c) = c.parse::<u64>() else { continue };
                if s == "total" {
                    placed += c;
                } else if let Ok(s) = s.parse::<u64>() {
                    *seconds.entry(s).or_default() += c;
                    if s < keep_from {
                        old_seconds[i].push(s.to_string());
                    }
                }
            }
        }
        blocks.sort_by_key(|(b, _)| b.start);
        blocks.retain(|(b, _)| b.start <= horizon);
        let records: Vec<BlockRecord> = blocks.iter().map(|(b, _)| *b).collect();
        let w = walk(serving, n, &records, |from, to| to <= horizon && passable(&self.num, from, to, &marks, now_rel));
        if let Some(at) = w.gap {
            tracing::debug!("spread room: the leader waits at position {at}");
        }
        let from = self.num.second(self.num.decode(w.serving + 1).0);
        // Every bucket before each live edge's watermark is recorded (read before the blocks):
        // those are counted; nobody else hands out places (a silent edge's are passed by time).
        let now_bucket = now_rel / self.num.block_ms;
        let covered = marks.iter().filter_map(|m| if let Mark::Live(w) = m { Some(*w) } else { None }).min().unwrap_or(now_bucket).saturating_sub(1);
        let shown = Shown {
            hist: seconds.range(from..).map(|(s, c)| (*s, *c)).collect(),
            front: records.iter().filter(|b| b.end > w.serving).take(FRONT).copied().collect(),
            covered: Some(covered),
        };
        let args = [node.to_owned(), w.serving.to_string(), (w.released + w.late).to_string(), placed.to_string(), shown.text()];
        let v = self.redis.run(&ADVANCE, &[&m.leader, &m.serving, &m.passed, &m.waiting, &m.hist], &args).await?;
        let (serving, waiting) = match ints(&v).as_slice() {
            [Some(s), Some(q)] => ((*s).max(0) as u64, (*q).max(0) as u64),
            _ if int(&v) == Some(-1) => return Ok(None),
            _ => return Err(StateError(format!("room_spread_advance answered {v:?}"))),
        };
        // The blocks passed go, and the counts of seconds long passed, shard by shard.
        let mut drops: Vec<Vec<String>> = vec![Vec::new(); self.shards.len()];
        for (b, i) in &blocks {
            if b.end <= serving {
                drops[*i].push(b.member());
            }
        }
        let cleanups = self.shards.iter().zip(drops.iter().zip(&old_seconds)).filter(|(_, (d, o))| !d.is_empty() || !o.is_empty()).map(|(sh, (d, o))| {
            let mut p = redis::pipe();
            if !d.is_empty() {
                p.cmd("ZREM").arg(&sh.blocks).arg(d).ignore();
            }
            if !o.is_empty() {
                p.cmd("HDEL").arg(&sh.hist).arg(o).ignore();
            }
            async move { self.redis.pipe(&p).await }
        });
        for r in futures::future::join_all(cleanups).await {
            r?;
        }
        *self.stepped.lock() = Some(Instant::now());
        self.passed.store(placed.saturating_sub(waiting), Ordering::Relaxed);
        *self.shown.lock() = shown;
        *self.cache.lock() = Counters { issued: serving + waiting, serving, ..Counters::default() };
        Ok(Some(Advanced { serving, lane_serving: 0, released: w.released, in_line: w.released }))
    }

    /// Remembers that `who`'s session runs until `until_ms` ([`ALIVE_FOR`]).
    fn remember_alive(&self, who: Who, until_ms: u64) {
        let mut a = self.alive.lock();
        if a.len() >= MAX_ALIVE {
            a.clear();
        }
        a.insert(who, (until_ms, Instant::now()));
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

/// A hash's fields and values (`HGETALL`, as RESP2 or RESP3 answers it).
fn pairs(v: &Value) -> Vec<(String, String)> {
    match v {
        Value::Array(items) => items.chunks(2).filter_map(|p| Some((text(p.first()?)?, text(p.get(1)?)?))).collect(),
        Value::Map(items) => items.iter().filter_map(|(k, v)| Some((text(k)?, text(v)?))).collect(),
        _ => Vec::new(),
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
            Ok(Ok(Ok((position, fresh)))) => Ok(Some(Joined { position, fresh, owed: false, lane: 0 })),
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
        cmd.arg(&self.main.serving).arg(&self.main.waiting).arg(&self.main.active).arg(&self.main.hist).arg(&self.main.passed);
        let v = self.redis.cmd(cmd).await?;
        let n = ints(&v);
        let get = |i: usize| n.get(i).copied().flatten().unwrap_or(0).max(0) as u64;
        self.active.store(get(2), Ordering::Relaxed);
        self.passed.store(get(4), Ordering::Relaxed);
        if let Value::Array(items) = &v {
            *self.shown.lock() = items.get(3).and_then(text).map(|t| Shown::parse(&t)).unwrap_or_default();
        }
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
        // Leaving: the open block is recorded (the leader need not wait out the grace).
        {
            let _one = self.batching.lock().await;
            self.local.lock().leave();
            let _ = self.record().await;
        }
        self.redis.run(&RESIGN, &[&self.main.leader], &[node.to_owned()]).await.map(|_| ())
    }

    async fn keep_book(&self, node: &str, book: &str, keep_ms: u64) -> Result<bool, StateError> {
        super::redis::keep_book(&self.redis, [&self.main.leader, &self.main.book], node, book, keep_ms).await
    }

    async fn kept_book(&self) -> Result<Option<String>, StateError> {
        super::redis::kept_book(&self.redis, &self.main.book).await
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
                Ok(Advanced { serving: c.serving, lane_serving: 0, released: 0, in_line: 0 })
            }
        }
    }

    async fn pass(&self, _position: u64) -> Result<bool, StateError> {
        // No passthrough on this layout (validation refuses `when-needed`).
        Ok(false)
    }

    async fn open_session(&self, who: Who, until_ms: u64, position: u64) -> Result<bool, StateError> {
        let opened = self.shard(who).open(&self.redis, who, until_ms, position).await?;
        if opened {
            // Opened here: its end is known (the next check on this edge need not ask).
            self.remember_alive(who, until_ms);
        }
        Ok(opened)
    }

    /// A session seen running is believed for [`ALIVE_FOR`] on this edge (its end time is
    /// fixed once open; an end at another edge reaches this one within that time).
    async fn session_alive(&self, who: Who, now_ms: u64) -> Result<bool, StateError> {
        if let Some((until, _)) = self.alive.lock().get(&who).filter(|(_, at)| at.elapsed() < ALIVE_FOR) {
            return Ok(*until > now_ms);
        }
        let until = self.shard(who).until(&self.redis, who).await?;
        if let Some(u) = until.filter(|u| *u > now_ms) {
            self.remember_alive(who, u);
        }
        Ok(until.is_some_and(|u| u > now_ms))
    }

    fn session_until(&self, who: Who) -> Option<u64> {
        self.alive.lock().get(&who).map(|(u, _)| *u)
    }

    async fn end_session(&self, who: Who) -> Result<bool, StateError> {
        self.alive.lock().remove(&who);
        let ended = self.shard(who).end(&self.redis, who).await?;
        if ended && let Some(p) = self.local.lock().known.get_mut(&who) {
            *p |= DONE;
        }
        Ok(ended)
    }

    async fn spent(&self, who: Who, position: u64) -> Result<bool, StateError> {
        let entry = self.shard(who).entry(&self.redis, who).await?;
        let spent = spent_by(&entry, position);
        if spent {
            // Ended through another edge (a revoke, an expiry the leader swept): this edge forgets
            // the place it remembers too unless it is the identity's live place, so the fan's next
            // join takes a new one (or finds the live one) rather than a spent one — the ticket
            // asked about, or a newer place whose session ended as well (an older ticket shown
            // after every session ran out; the door's status of a remembered spent place would
            // find it spent twice: a 503).
            self.alive.lock().remove(&who);
            let live = live_position(&entry);
            if let Some(p) = self.local.lock().known.get_mut(&who)
                && Some(*p) != live
            {
                *p |= DONE;
            }
        }
        Ok(spent)
    }

    async fn touch(&self, who: Who, now_ms: u64) -> Result<(), StateError> {
        self.shard(who).touch(&self.redis, who, now_ms).await
    }

    /// Only the leader sweeps the shards (one sweep a tick for the room, not one per edge) and
    /// publishes the active count; the other edges answer the count they last read (`refresh`)
    /// and no exits (the leader's controller is the one that moves `serving`).
    async fn sweep_picked(&self, now_ms: u64, idle_ms: u64, ask: &PickupAsk) -> Result<Swept, StateError> {
        if self.leading.lock().is_none() {
            return Ok(Swept { active: self.active.load(Ordering::Relaxed), exits: 0, picked: None });
        }
        let all = futures::future::join_all(self.shards.iter().map(|s| s.s.sweep(&self.redis, now_ms, idle_ms, ask))).await;
        let mut sum = Swept { picked: Some(vec![0; ask.ranges.len()]), ..Swept::default() };
        for r in all {
            let one = r?;
            sum.active += one.active;
            sum.exits += one.exits;
            // Each shard holds the sessions of its identities: the places picked up add up.
            sum.picked = sum.picked.zip(one.picked).map(|(a, b)| a.iter().zip(&b).map(|(x, y)| x + y).collect());
        }
        self.active.store(sum.active, Ordering::Relaxed);
        let mut cmd = redis::cmd("SET");
        cmd.arg(&self.main.active).arg(sum.active);
        self.redis.cmd(cmd).await?;
        Ok(sum)
    }

    /// Places are not consecutive numbers on this layout: how many lie between, from the
    /// places each second of joins holds ([`ahead_of`]), never more than are waiting.
    fn ahead(&self, position: u64, c: &Counters) -> u64 {
        self.ahead_known(position, c).unwrap_or_else(|| c.waiting().saturating_sub(1))
    }

    fn ahead_known(&self, position: u64, c: &Counters) -> Option<u64> {
        self.shown.lock().ahead(&self.num, c.serving, position, c.waiting())
    }

    fn numbered_in_line(&self) -> bool {
        false
    }

    fn passed(&self, _c: &Counters) -> u64 {
        self.passed.load(Ordering::Relaxed)
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
        // The edge claims sit a third of the slot space or more away from the room's slot.
        for id in ["mega", "r1", "stadium-tour", "x"] {
            let (c, r) = (slot(&counter_tag(id)) as i32, slot(&format!("room:{id}")) as i32);
            let d = (c - r).rem_euclid(16384);
            assert!(d.min(16384 - d) >= 5461, "{id}: {c} vs {r}");
        }
    }

    fn b(start: u64, end: u64, used: u64) -> BlockRecord {
        BlockRecord { start, end, used }
    }

    #[test]
    fn the_walk_counts_real_places_and_skips_the_unused_ends() {
        let blocks = [b(1, 10, 5), b(11, 20, 13), b(21, 30, 20)];
        // 4 of the first block's 5.
        let w = walk(0, 4, &blocks, |_, _| false);
        assert_eq!((w.serving, w.released), (4, 4));
        // Its last, its unused end 6-10, 3 of the second's, its end, nothing of the third (which
        // handed out nothing), so on to its end.
        let w = walk(4, 100, &blocks, |_, _| false);
        assert_eq!((w.serving, w.released, w.late, w.gap), (30, 4, 0, None));
        // Nothing to release: blocks with nothing left are still passed; a block used further is not.
        let w = walk(5, 0, &blocks, |_, _| false);
        assert_eq!((w.serving, w.released), (10, 0));
    }

    #[test]
    fn a_gap_is_passed_only_when_passable_and_late_blocks_count_once() {
        // Positions 11-20 are in no record.
        let blocks = [b(1, 10, 10), b(21, 30, 25)];
        let w = walk(0, 100, &blocks, |_, _| false);
        assert_eq!((w.serving, w.released, w.gap), (10, 10, Some(11)));
        let w = walk(10, 100, &blocks, |from, to| (from, to) == (11, 20));
        assert_eq!((w.serving, w.released, w.gap), (30, 5, None));
        // A block wholly behind serving (recorded after the leader passed its positions): its
        // places count as passed, and the caller drops it.
        let w = walk(30, 100, &[b(11, 20, 17), b(31, 40, 33)], |_, _| false);
        assert_eq!((w.serving, w.released, w.late), (40, 3, 7));
        // A block serving is inside of (the release stopped in it) is no late block.
        let w = walk(15, 2, &[b(11, 20, 18)], |_, _| false);
        assert_eq!((w.serving, w.released, w.late), (17, 2, 0));
    }

    #[test]
    fn places_are_ordered_by_bucket_then_edge_and_decode_back() {
        let num = Numbering { block: 1000, block_ms: 10 };
        let t = num.bucket(EPOCH_MS + 123_456);
        assert_eq!(t, 12_345);
        assert_eq!(num.start(t, 0), (12_345 * 64) * 1000 + 1);
        assert!(num.end(t, 63) < num.start(t + 1, 0), "a bucket's blocks come before the next bucket's");
        assert_eq!(num.end(t, 3) + 1, num.start(t, 4));
        for p in [num.start(t, 5), num.start(t, 5) + 999, num.end(t, 63)] {
            assert_eq!(num.decode(p).0, t);
        }
        assert_eq!(num.decode(num.start(t, 5) + 999), (t, 5));
        assert_eq!(num.second(t), 123);
        // Forty years of the largest setting allowed (100 places a ms per edge) stay below 2^53.
        let big = Numbering { block: 100_000, block_ms: 1000 };
        assert!(big.end(big.bucket(EPOCH_MS + 40 * 365 * 86_400_000), 63) < 1 << 53);
    }

    #[test]
    fn gaps_pass_behind_every_watermark_and_wait_for_edges_that_may_still_number() {
        let num = Numbering { block: 10, block_ms: 10 };
        let t = 1000;
        // Index 0 recorded up to bucket t (watermark t+1), index 1 up to t-1 (watermark t: its
        // block of t may be open), the rest claimed by nobody.
        let mut marks = [Mark::Free; EDGES as usize];
        marks[0] = Mark::Live(t + 1);
        marks[1] = Mark::Live(t);
        let now = (t + 1) * 10 + 10;
        // Index 0's block of t and the indexes after 1 (nobody's) of bucket t-1: index 1 has
        // recorded bucket t-1.
        assert!(passable(&num, num.start(t - 1, 2), num.end(t, 0), &marks, now + SKEW_MS));
        // Index 1's block of t is not passed: its watermark says it may still number there.
        assert!(!passable(&num, num.start(t, 1), num.end(t, 1), &marks, now + SKEW_MS));
        assert!(!passable(&num, num.start(t, 0), num.end(t, 2), &marks, now + SKEW_MS));
        // Nobody's indexes of a bucket newer than the skew wait; older ones pass.
        assert!(!passable(&num, num.start(t, 2), num.end(t, 63), &marks, now));
        assert!(passable(&num, num.start(t, 2), num.end(t, 63), &marks, now + SKEW_MS));
        // A silent edge's positions pass once the grace has gone by since their bucket.
        marks[1] = Mark::Silent;
        assert!(!passable(&num, num.start(t, 1), num.end(t, 1), &marks, (t + 1) * 10 + GRACE_MS));
        assert!(passable(&num, num.start(t, 1), num.end(t, 1), &marks, (t + 1) * 10 + GRACE_MS + 1));
    }

    #[test]
    fn people_ahead_come_from_the_places_per_second() {
        let num = Numbering { block: 1000, block_ms: 10 };
        // 100 places in second 50, 300 in second 51, 200 in second 52.
        let hist = [(50, 100), (51, 300), (52, 200)];
        let at = |s: u64, share: f64| num.start((s * 100) + (share * 100.0) as u64, 0);
        // From the start of second 50 to the middle of 52: 100 + 300, and second 52 whole (how
        // its places fall before or after the fan is not known: never fewer than there are).
        assert_eq!(ahead_of(&num, &hist, &[], at(50, 0.0) - 1, at(52, 0.5)), 600);
        // Within one second: the second whole.
        assert_eq!(ahead_of(&num, &hist, &[], at(51, 0.25) - 1, at(51, 0.75)), 300);
        // (The even share, for comparison.)
        assert_eq!(estimate_between(&num, &hist, at(51, 0.25) - 1, at(51, 0.75)), 150);
        // At or before serving: nobody.
        assert_eq!(ahead_of(&num, &hist, &[], at(51, 0.5), at(51, 0.5)), 0);
        assert_eq!(ahead_of(&num, &hist, &[], 0, at(49, 0.0)), 0);
        assert_eq!(parse_hist("52:200,50:100,x:1,51:300"), hist.to_vec());
        // Over the front blocks the count is exact: serving inside the first, the unused ends
        // and the positions no block holds count nobody.
        let front = [b(at(50, 0.0), at(50, 0.0) + 999, at(50, 0.0) + 9), b(at(50, 0.0) + 1000, at(50, 0.0) + 1999, at(50, 0.0) + 1002)];
        let s0 = at(50, 0.0) + 4;
        assert_eq!(ahead_of(&num, &hist, &front, s0, at(50, 0.0) + 9), 4, "5-8 of the first block");
        assert_eq!(ahead_of(&num, &hist, &front, s0, at(50, 0.0) + 1002), 7, "5-9 of the first, 2 of the second");
        assert_eq!(ahead_of(&num, &hist, &front, s0, at(50, 0.0) + 2000), 8, "right after the front: all 8");
        // Beyond the front: its 8, second 50 less the front's 13 places in it, then 51 whole.
        assert_eq!(ahead_of(&num, &hist, &front, s0, at(52, 0.0)), 8 + (100 - 13) + 300 + 200);
        // The published text reads back; until a bucket is covered nothing is told of it.
        let shown = Shown { hist: hist.to_vec(), front: front.to_vec(), covered: Some(52 * 100 + 10) };
        assert_eq!(Shown::parse(&shown.text()), shown);
        assert_eq!(Shown::parse("50:1"), Shown { hist: vec![(50, 1)], front: vec![], covered: None });
        assert_eq!(shown.ahead(&num, s0, at(52, 0.0), 10_000), Some(8 + 87 + 300 + 200));
        assert_eq!(shown.ahead(&num, s0, at(52, 0.5), 10_000), None, "bucket 5250 is not covered yet");
        assert_eq!(Shown { covered: None, ..shown.clone() }.ahead(&num, s0, at(51, 0.0), 10_000), None);
        assert_eq!(shown.ahead(&num, s0, at(52, 0.0), 50), Some(49), "never more than are waiting");
    }

    /// Places handed out at random over a few seconds by a few edges, a front of the blocks
    /// recorded: at every `serving` as it moves, every place is told at least the people truly
    /// ahead of it (issue #38), and never more than a block's places above what it was told before.
    #[test]
    fn people_ahead_are_never_too_few_and_only_fall() {
        use rand::{Rng, SeedableRng};
        let num = Numbering { block: 50, block_ms: 100 };
        for seed in 0..30u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            // (bucket, edge) -> places used in its block.
            let mut blocks = Vec::new();
            let mut places = Vec::new();
            for t in 500..540u64 {
                for e in 0..3u64 {
                    let used = rng.random_range(0..20u64);
                    let start = num.start(t, e);
                    if used > 0 {
                        blocks.push(b(start, start + num.block - 1, start + used - 1));
                        places.extend(start..start + used);
                    }
                }
            }
            let mut per_second = std::collections::BTreeMap::new();
            for p in &places {
                *per_second.entry(num.second(num.decode(*p).0)).or_insert(0u64) += 1;
            }
            let mut told: Vec<u64> = vec![u64::MAX; places.len()];
            for k in (0..places.len()).step_by(7) {
                let serving = if k == 0 { 0 } else { places[k - 1] };
                let hist: Vec<(u64, u64)> = per_second.iter().map(|(s, c)| (*s, *c)).collect();
                let front: Vec<BlockRecord> = blocks.iter().filter(|x| x.end > serving).take(5).copied().collect();
                let shown = Shown { hist, front, covered: Some(540) };
                let waiting = (places.len() - k) as u64;
                for (i, p) in places.iter().enumerate().skip(k) {
                    let truth = (i - k) as u64;
                    let a = shown.ahead(&num, serving, *p, waiting).unwrap();
                    assert!(a >= truth, "seed {seed}: place {p} told {a}, {truth} are ahead (serving {serving})");
                    // (It may rise by the places of a block the leader passed within a second:
                    // the passed blocks of the second at the front are no longer published.)
                    assert!(a <= told[i].saturating_add(20), "seed {seed}: place {p} told {a} after {} (serving {serving})", told[i]);
                    told[i] = a;
                }
            }
        }
    }

    #[test]
    fn records_parse_and_bad_ones_are_skipped() {
        assert_eq!(BlockRecord::parse("11:20:13"), Some(b(11, 20, 13)));
        assert_eq!(BlockRecord::parse("11:20:10").map(|r| r.places()), Some(0));
        assert_eq!(b(11, 20, 13).member(), "11:20:13");
        for bad in ["x:20:13", "11:20", "11:20:13:1", "20:11:13", "11:20:21", "0:5:3", "11:20:9"] {
            assert_eq!(BlockRecord::parse(bad), None, "{bad}");
        }
    }
}
