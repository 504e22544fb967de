//! The post-sale report's counters and store ([`super::report`] reads and serves them): per
//! minute, joins, admissions, holds, places released, refusals by reason and a histogram of the
//! wait (join → admitted), plus the release leader's figures.
//!
//! # Recording (hot path: atomics only)
//! Every edge counts into a [`Tally`]: two slots of atomic counters, chosen by the parity of the
//! event's minute (Unix ms / 60 000). The release loop flushes both slots once a tick (a
//! second): the slot of the current minute's parity belongs to this minute, the other to the
//! one before (a tick late by more than a minute would put that minute's counts one minute late).
//! A count that belongs to another minute than the event's own (a cohort count, below) waits in a
//! small map under a lock instead, keyed by its minute.
//!
//! # Drop-offs, by cohort
//! A minute's drop-offs are counted against the fans of that minute, whenever they show up:
//! - `held_of_admitted`: sessions opened (admitted) in this minute that were used later (counted
//!   at the first use, in the minute of the session's admission). A minute's `unused` drop-offs
//!   are its `admissions − held_of_admitted`.
//! - `admitted_of_released`: places whose turn came (released) in this minute whose fan came and
//!   was admitted (counted at the admission, in the minute the place's turn came: [`ReleaseMarks`]).
//!   A minute's `abandoned` drop-offs are its `released − admitted_of_released`.
//!
//! Both grow after the minute is over (a fan admitted at 20:00 who buys at 20:07 moves 20:00's
//! `unused` down at 20:07). The minute of a session's admission is its end less the room's
//! `session-seconds` (Redis: the session's score; embedded: remembered at admission). The minute of
//! a place's turn is where this edge saw `serving` (or the lane's) pass it; an edge that does not
//! lead sees the leader's step up to a tick (a second) late, so at a minute's edge a place can
//! count one minute late, and a place released before this edge started watching the room counts
//! in the minute of its admission.
//!
//! # Storing ([`ReportStore`])
//! - Embedded room state: in this process (a map of minutes). It does **not** survive a restart.
//! - Redis room state: one hash per room and minute, `wk:{room:<id>}:report:m:<minute>`, merged
//!   with `HINCRBY` by every edge sharing the room (lua/room_report.lua: atomic per minute), the
//!   leader's figures set with `HSET`; a sorted set of the minutes with data; the first sold-out
//!   time; the sessions already counted as holds (one member per used session, kept
//!   [`USED_KEEP_SECONDS`]). The report's keys live [`KEEP_SECONDS`] (30 days) after an edge's
//!   first write of their minute (an edge sets the expiry once a minute, not with every flush).
//!   It survives edge restarts and is the same on every edge.
//! - The embedded store remembers each admitted session (16 bytes: when admitted, whether used) for the room's life in the process,
//!   as the embedded state remembers each joiner.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use parking_lot::Mutex;

use super::redis::{RedisRooms, text};
use super::state::{StateError, Who};

/// How long a room's report stays in Redis after its last write.
pub const KEEP_SECONDS: u64 = 30 * 86_400;
/// How long the set of sessions already counted as holds stays after its last write: a session
/// lasts at most a day (`session-seconds` ≤ 86 400), so one used later is a new session.
pub const USED_KEEP_SECONDS: u64 = 2 * 86_400;

/// Upper bounds (seconds, inclusive) of the wait histogram's buckets; one more bucket holds the
/// waits above the last.
pub const WAIT_BOUNDS: [u64; 14] = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200];
/// Buckets of the wait histogram (the bounds and the overflow).
pub const WAIT_BUCKETS: usize = WAIT_BOUNDS.len() + 1;

/// The refusal reasons a report counts: those of the checks before a room's paths (names of
/// [`crate::reject::Reject::reason`]), then those the room's own endpoints give ([`super::http`],
/// [`super::invite_http`]); any other reason counts as `other`. New reasons are only ever
/// appended (the CSV's columns keep their places).
pub const REASONS: [&str; 16] = [
    "rate_limited",
    "blocked",
    "bot_required",
    "bot_failed",
    "bot_unavailable",
    "not_admitted",
    "room_state_unavailable",
    "other",
    // The room's own answers (and `room_closed` from the protected paths of a closed room).
    "room_closed",
    "reject_all",
    "sold_out",
    "invite_only",
    "invite_invalid",
    "invite_taken",
    "bad_request",
    "no_ticket",
];

/// Where `other` is in [`REASONS`].
const OTHER: usize = 7;

/// The counted events of a minute (besides refusals and waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// A new place (not a rejoin of a place held).
    Joins = 0,
    /// A session opened (an admission token issued for a new session).
    Admissions = 1,
    /// A session reached a protected path or the core with its token, counted once a session.
    Holds = 2,
    /// Places the release leader served (`serving` moved by that many).
    Released = 3,
    /// Sessions admitted in the minute that were used, counted in the admission's minute.
    HeldOfAdmitted = 4,
    /// Places whose turn came in the minute whose fan was admitted, counted in the turn's minute.
    AdmittedOfReleased = 5,
}

const COUNTS: [&str; 6] = ["joins", "admissions", "holds", "released", "held_of_admitted", "admitted_of_released"];
const REFUSED_AT: usize = COUNTS.len();
const WAIT_AT: usize = REFUSED_AT + REASONS.len();
const SLOTS: usize = WAIT_AT + WAIT_BUCKETS;

/// The field name of counter `i` in a minute's record.
fn field(i: usize) -> String {
    match i {
        i if i < REFUSED_AT => COUNTS[i].to_owned(),
        i if i < WAIT_AT => format!("refused:{}", REASONS[i - REFUSED_AT]),
        i => format!("wait:{}", i - WAIT_AT),
    }
}

static FIELDS: LazyLock<Vec<String>> = LazyLock::new(|| (0..SLOTS).map(field).collect());

/// The leader's figures of a minute (the last tick of the minute that wrote them).
pub const GAUGES: [&str; 5] = ["rate_set_milli", "rate_measured_milli", "p99_us", "p99_target_us", "sold_out"];

/// One minute's atomic counters.
struct Slot([AtomicU64; SLOTS]);

impl Slot {
    fn new() -> Self {
        Slot(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// What one edge counted and has not flushed yet (atomics on the request path; a count for another
/// minute than the current one waits in `late`).
pub struct Tally {
    slots: [Slot; 2],
    /// (minute, counter) → count: cohort counts of past minutes, and counts a flush put back.
    late: Mutex<BTreeMap<(u64, usize), u64>>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally { slots: [Slot::new(), Slot::new()], late: Mutex::new(BTreeMap::new()) }
    }
}

/// The minute of a Unix ms time.
pub fn minute_of(ms: u64) -> u64 {
    ms / 60_000
}

impl Tally {
    fn add(&self, now_ms: u64, i: usize, n: u64) {
        if n > 0 {
            self.slots[(minute_of(now_ms) & 1) as usize].0[i].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts `n` events of `what` at `now_ms`.
    pub fn count(&self, now_ms: u64, what: Count, n: u64) {
        self.add(now_ms, what as usize, n);
    }

    /// Counts `n` events of `what` in `minute` (a cohort's), at `now_ms`.
    pub fn count_in(&self, now_ms: u64, minute: u64, what: Count, n: u64) {
        if minute == minute_of(now_ms) {
            self.add(now_ms, what as usize, n);
        } else if n > 0 {
            *self.late.lock().entry((minute, what as usize)).or_default() += n;
        }
    }

    /// Counts a refusal at `now_ms` (reason as [`crate::reject::Reject::reason`] names it).
    pub fn refused(&self, now_ms: u64, reason: &str) {
        let i = REASONS.iter().position(|r| *r == reason).unwrap_or(OTHER);
        self.add(now_ms, REFUSED_AT + i, 1);
    }

    /// Counts an admission at `now_ms` after waiting `wait_s` seconds since the join, of a place
    /// whose turn came in minute `turn` (its cohort of released places).
    pub fn admitted(&self, now_ms: u64, wait_s: u64, turn: u64) {
        self.add(now_ms, Count::Admissions as usize, 1);
        self.add(now_ms, WAIT_AT + wait_bucket(wait_s), 1);
        self.count_in(now_ms, turn, Count::AdmittedOfReleased, 1);
    }

    /// Takes what was counted: per minute (in order), the non-zero (field, count) pairs.
    pub fn take(&self, now_ms: u64) -> Vec<(u64, Vec<(&'static str, u64)>)> {
        let now = minute_of(now_ms);
        let mut by_minute: BTreeMap<u64, [u64; SLOTS]> = BTreeMap::new();
        for minute in [now.saturating_sub(1), now] {
            let slot = &self.slots[(minute & 1) as usize];
            for (i, c) in slot.0.iter().enumerate() {
                let n = c.swap(0, Ordering::Relaxed);
                if n > 0 {
                    by_minute.entry(minute).or_insert([0; SLOTS])[i] += n;
                }
            }
        }
        for ((minute, i), n) in std::mem::take(&mut *self.late.lock()) {
            by_minute.entry(minute).or_insert([0; SLOTS])[i] += n;
        }
        by_minute
            .into_iter()
            .map(|(m, counts)| (m, counts.iter().enumerate().filter(|(_, n)| **n > 0).map(|(i, n)| (FIELDS[i].as_str(), *n)).collect()))
            .collect()
    }

    /// Puts counts taken by [`Tally::take`] back (the store did not take them: they go with the
    /// next flush, in their own minute).
    pub fn put_back(&self, minute: u64, pairs: &[(&'static str, u64)]) {
        let mut late = self.late.lock();
        for (f, n) in pairs {
            if let Some(i) = FIELDS.iter().position(|x| x == f) {
                *late.entry((minute, i)).or_default() += n;
            }
        }
    }
}

/// Where `serving` and the lane's `lane_serving` stood at the end of each minute, as this edge
/// saw them (each tick): the minute a place's turn came, for the `admitted_of_released` cohort.
/// Minutes where neither moved have no mark; at most [`MARKS_KEPT`] marks are kept.
#[derive(Debug, Default)]
pub struct ReleaseMarks {
    /// The counters when this edge began watching (places up to here: turn before that, not known).
    base: Option<(u64, u64)>,
    /// (minute, serving, lane_serving), minutes rising, both counters never falling.
    marks: std::collections::VecDeque<(u64, u64, u64)>,
}

/// Most minutes [`ReleaseMarks`] keeps (a week of minutes that released someone).
pub const MARKS_KEPT: usize = 7 * 1440;

impl ReleaseMarks {
    /// The counters seen at `minute`.
    pub fn note(&mut self, minute: u64, serving: u64, lane_serving: u64) {
        let Some(base) = self.base else {
            self.base = Some((serving, lane_serving));
            return;
        };
        let last = self.marks.back().map_or(base, |m| (m.1, m.2));
        let (serving, lane_serving) = (serving.max(last.0), lane_serving.max(last.1));
        match self.marks.back_mut() {
            Some(m) if m.0 == minute => (m.1, m.2) = (serving, lane_serving),
            _ if (serving, lane_serving) == last => {}
            _ => {
                self.marks.push_back((minute, serving, lane_serving));
                if self.marks.len() > MARKS_KEPT {
                    self.marks.pop_front();
                }
            }
        }
    }

    /// The minute the turn of place `position` (admission order) — or of lane place `lane`
    /// (0: none) — came; `None` when this edge did not see it come (before it watched, or not yet).
    pub fn turn_minute(&self, position: u64, lane: u64) -> Option<u64> {
        let (base_s, base_l) = self.base?;
        if position <= base_s || (lane > 0 && lane <= base_l) {
            return None;
        }
        let first = |at: fn(&(u64, u64, u64)) -> u64, v: u64| {
            let i = self.marks.partition_point(|m| at(m) < v);
            self.marks.get(i).map(|m| m.0)
        };
        let by_serving = first(|m| m.1, position);
        let by_lane = if lane > 0 { first(|m| m.2, lane) } else { None };
        match (by_serving, by_lane) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The histogram bucket of a wait of `wait_s` seconds.
pub fn wait_bucket(wait_s: u64) -> usize {
    WAIT_BOUNDS.iter().position(|b| wait_s <= *b).unwrap_or(WAIT_BOUNDS.len())
}

/// The `q` quantile (0..1] of a wait histogram: the upper bound of its bucket in seconds; `None`
/// when empty, or when it falls in the overflow bucket (over [`WAIT_BOUNDS`]'s last).
pub fn wait_quantile(h: &[u64], q: f64) -> Option<u64> {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return None;
    }
    let want = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in h.iter().enumerate() {
        seen += n;
        if seen >= want {
            return WAIT_BOUNDS.get(i).copied();
        }
    }
    None
}

/// One minute as stored: field → value.
pub type MinuteRecord = BTreeMap<String, u64>;

/// Where a room's report is kept: with the room's state.
pub enum ReportStore {
    /// In this process (lost on restart).
    Embedded {
        minutes: Mutex<BTreeMap<u64, MinuteRecord>>,
        sold_out_at_ms: AtomicU64,
        /// who → when its session was admitted (ms), [`USED`] set once it was used.
        used: DashMap<Who, u64>,
    },
    /// In Redis, shared by every edge of the room. `sessions`: the key prefixes the room's
    /// sessions live under, by identity (one for a single room, one per shard for a spread one):
    /// a session's first use is marked next to it (`<prefix>:report:used`, one slot).
    /// `expired`: when this edge last set the expiry of each shard's marks (once a minute is
    /// enough: they are kept for days).
    /// `marked`: the last minute this edge wrote (its list entry and expiry set).
    Redis { redis: RedisRooms, prefix: String, sessions: Vec<String>, expired: Mutex<Vec<Option<std::time::Instant>>>, marked: AtomicU64 },
}

static REPORT_ADD: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(include_str!("../../../lua/room_report.lua")));

impl ReportStore {
    /// The store of room `id`'s report: in Redis with the room's state there (its sessions under
    /// `sessions`, by identity; none: the room's own slot), else in this process.
    pub fn new(redis: Option<&RedisRooms>, id: &str, sessions: Vec<String>) -> Self {
        match redis {
            None => ReportStore::Embedded { minutes: Mutex::new(BTreeMap::new()), sold_out_at_ms: AtomicU64::new(0), used: DashMap::new() },
            Some(r) => {
                let sessions = if sessions.is_empty() { vec![format!("wk:{{room:{id}}}")] } else { sessions };
                ReportStore::Redis {
                    redis: r.clone(),
                    prefix: format!("wk:{{room:{id}}}:report"),
                    expired: Mutex::new(vec![None; sessions.len()]),
                    sessions,
                    marked: AtomicU64::new(u64::MAX),
                }
            }
        }
    }

    /// `embedded` or `redis`.
    pub fn kind(&self) -> &'static str {
        match self {
            ReportStore::Embedded { .. } => "embedded",
            ReportStore::Redis { .. } => "redis",
        }
    }

    /// Adds counts to a minute and sets the leader's figures in it (one atomic step per minute).
    pub async fn add(&self, minute: u64, add: &[(&str, u64)], set: &[(&str, u64)]) -> Result<(), StateError> {
        match self {
            ReportStore::Embedded { minutes, .. } => {
                let mut m = minutes.lock();
                let rec = m.entry(minute).or_default();
                for (f, n) in add {
                    *rec.entry((*f).to_owned()).or_default() += n;
                }
                for (f, v) in set {
                    rec.insert((*f).to_owned(), *v);
                }
                Ok(())
            }
            ReportStore::Redis { redis, prefix, marked, .. } => {
                // The minute's list entry and expiry: with this edge's first write of the minute.
                let first = marked.load(Ordering::Relaxed) != minute;
                let mut inv = REPORT_ADD.prepare_invoke();
                inv.key(format!("{prefix}:m:{minute}")).key(format!("{prefix}:minutes"));
                inv.arg(minute).arg(if first { KEEP_SECONDS } else { 0 }).arg(add.len());
                for (f, n) in add.iter().chain(set) {
                    inv.arg(*f).arg(*n);
                }
                redis.invoke(&inv).await?;
                if first {
                    marked.store(minute, Ordering::Relaxed);
                }
                Ok(())
            }
        }
    }

    /// `who`'s session was opened at `now_ms` (embedded: remembered for the session's first use;
    /// Redis reads the session's own score then).
    pub fn admitted(&self, who: Who, now_ms: u64) {
        if let ReportStore::Embedded { used, .. } = self {
            // A session used before stays used (a hold is counted once per identity, as in Redis).
            used.entry(who).and_modify(|v| {
                if *v & USED == 0 {
                    *v = now_ms;
                }
            }).or_insert(now_ms & !USED);
        }
    }

    /// Marks `who`'s session used at `now_ms`; the first time (it counts as a hold then), when
    /// the session was admitted (ms; `now_ms` when not known). `session_ms`: the room's session
    /// length (a Redis session's score is its end).
    pub async fn first_use(&self, who: Who, now_ms: u64, session_ms: u64) -> Result<Option<u64>, StateError> {
        self.first_use_known(who, now_ms, session_ms, None).await
    }

    /// [`ReportStore::first_use`] when the session's end (ms) may be known already (this edge
    /// opened it or read it): Redis is not asked for it again.
    pub async fn first_use_known(&self, who: Who, now_ms: u64, session_ms: u64, until: Option<u64>) -> Result<Option<u64>, StateError> {
        match self {
            ReportStore::Embedded { used, .. } => {
                let mut e = used.entry(who).or_insert(now_ms);
                if *e & USED != 0 {
                    return Ok(None);
                }
                let at = (*e).min(now_ms);
                *e |= USED;
                Ok(Some(at))
            }
            ReportStore::Redis { redis, sessions, expired, .. } => {
                let i = (who % sessions.len() as u64) as usize;
                let at = &sessions[i];
                let key = format!("{at}:report:used");
                let sessions = format!("{at}:sessions");
                let who = format!("{who:016x}");
                let mut p = redis::pipe();
                p.cmd("SADD").arg(&key).arg(&who);
                // The marks' expiry, set by this edge once a minute, not with every mark.
                let expire = {
                    let mut e = expired.lock();
                    let due = e[i].is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60));
                    if due {
                        e[i] = Some(std::time::Instant::now());
                    }
                    due
                };
                if expire {
                    p.cmd("EXPIRE").arg(&key).arg(USED_KEEP_SECONDS).ignore();
                }
                if until.is_none() {
                    p.cmd("ZSCORE").arg(sessions).arg(&who);
                }
                let v = redis.pipe(&p).await?;
                if !matches!(v.first(), Some(redis::Value::Int(1))) {
                    return Ok(None);
                }
                let until = until.or_else(|| {
                    v.get(1).and_then(|s| match s {
                        redis::Value::Double(d) => Some(*d as u64),
                        other => text(other)?.parse::<f64>().ok().map(|f| f as u64),
                    })
                });
                Ok(Some(until.map_or(now_ms, |u| u.saturating_sub(session_ms).min(now_ms))))
            }
        }
    }

    /// Records the first time the room sold out (later ones keep the first).
    pub async fn sold_out(&self, at_ms: u64) -> Result<(), StateError> {
        match self {
            ReportStore::Embedded { sold_out_at_ms, .. } => {
                let _ = sold_out_at_ms.compare_exchange(0, at_ms, Ordering::Relaxed, Ordering::Relaxed);
                Ok(())
            }
            ReportStore::Redis { redis, prefix, .. } => {
                let key = format!("{prefix}:meta");
                let mut p = redis::pipe();
                p.cmd("HSETNX").arg(&key).arg("sold_out_at_ms").arg(at_ms).ignore().cmd("EXPIRE").arg(&key).arg(KEEP_SECONDS).ignore();
                redis.pipe(&p).await.map(|_| ())
            }
        }
    }

    /// The minutes with data in `[from, to]` (minute numbers), and the first sold-out time (ms).
    pub async fn read(&self, from: u64, to: u64) -> Result<(Vec<(u64, MinuteRecord)>, Option<u64>), StateError> {
        match self {
            ReportStore::Embedded { minutes, sold_out_at_ms, .. } => {
                let rows = minutes.lock().range(from..=to).map(|(m, r)| (*m, r.clone())).collect();
                Ok((rows, Some(sold_out_at_ms.load(Ordering::Relaxed)).filter(|t| *t != 0)))
            }
            ReportStore::Redis { redis, prefix, .. } => {
                let mut p = redis::pipe();
                p.cmd("ZRANGEBYSCORE").arg(format!("{prefix}:minutes")).arg(from).arg(to).arg("LIMIT").arg(0).arg(MAX_ROWS + 1);
                p.cmd("HGET").arg(format!("{prefix}:meta")).arg("sold_out_at_ms");
                let v = redis.pipe(&p).await?;
                let list: Vec<u64> = match v.first() {
                    Some(redis::Value::Array(items)) => items.iter().filter_map(|x| text(x)?.parse().ok()).collect(),
                    _ => Vec::new(),
                };
                let sold = v.get(1).and_then(text).and_then(|s| s.parse().ok());
                if list.len() > MAX_ROWS {
                    return Err(StateError(TOO_MANY.into()));
                }
                let mut p = redis::pipe();
                for m in &list {
                    p.cmd("HGETALL").arg(format!("{prefix}:m:{m}"));
                }
                let v = if list.is_empty() { Vec::new() } else { redis.pipe(&p).await? };
                let rows = list
                    .iter()
                    .zip(v)
                    .map(|(m, rec)| {
                        let mut out = MinuteRecord::new();
                        if let redis::Value::Array(items) | redis::Value::Set(items) = rec {
                            for kv in items.chunks(2) {
                                if let [k, val] = kv
                                    && let (Some(k), Some(val)) = (text(k), text(val).and_then(|s| s.parse::<u64>().ok()))
                                {
                                    out.insert(k, val);
                                }
                            }
                        } else if let redis::Value::Map(pairs) = rec {
                            for (k, val) in pairs {
                                if let (Some(k), Some(val)) = (text(&k), text(&val).and_then(|s| s.parse::<u64>().ok())) {
                                    out.insert(k, val);
                                }
                            }
                        }
                        (*m, out)
                    })
                    .collect();
                Ok((rows, sold))
            }
        }
    }
}

/// The bit of an embedded [`ReportStore`]'s `used` entry saying the session was used.
const USED: u64 = 1 << 63;

/// Most minutes one report answer holds (a week).
pub const MAX_ROWS: usize = 7 * 1440;
pub const TOO_MANY: &str = "more than 10080 minutes in the range: narrow it with from and to";

/// A room's report: this edge's tally and the store.
pub struct RoomReport {
    /// Counted here, not flushed yet.
    pub tally: Tally,
    /// Where it is kept.
    pub store: ReportStore,
    /// The minute each place's turn came, as this edge saw it.
    pub marks: Mutex<ReleaseMarks>,
    /// When this edge last flushed to a Redis store (Unix ms).
    flushed_ms: AtomicU64,
}

/// How often an edge flushes its counts to a Redis store within a minute (a minute's end flushes
/// at once): each flush is a script of a command per count on the room's slot.
pub const REDIS_FLUSH_MS: u64 = 2000;

impl RoomReport {
    /// The report of room `id`, kept in Redis with the room's state there, else in this process.
    pub fn new(redis: Option<&RedisRooms>, id: &str, sessions: Vec<String>) -> Self {
        RoomReport { tally: Tally::default(), store: ReportStore::new(redis, id, sessions), marks: Mutex::new(ReleaseMarks::default()), flushed_ms: AtomicU64::new(0) }
    }

    /// Flushes this edge's counts (and, from the leader, `set`: its figures of the current
    /// minute, written when `always` or when the minute has counts). Counts the store did not
    /// take are put back for the next flush.
    /// To a Redis store at most every [`REDIS_FLUSH_MS`] within a minute.
    pub async fn flush(&self, now_ms: u64, set: Option<&[(&str, u64)]>, always: bool) -> Result<(), StateError> {
        let now = minute_of(now_ms);
        if let ReportStore::Redis { .. } = self.store {
            let last = self.flushed_ms.load(Ordering::Relaxed);
            if minute_of(last) == now && now_ms < last + REDIS_FLUSH_MS {
                return Ok(());
            }
            self.flushed_ms.store(now_ms, Ordering::Relaxed);
        }
        let mut taken = self.tally.take(now_ms);
        if set.is_some() && always && !taken.iter().any(|(m, _)| *m == now) {
            taken.push((now, Vec::new()));
        }
        let mut failed = None;
        for (minute, pairs) in &taken {
            let gauges = if *minute == now { set.unwrap_or(&[]) } else { &[] };
            if let Err(e) = self.store.add(*minute, pairs, gauges).await {
                self.tally.put_back(*minute, pairs);
                failed = Some(e);
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_keeps_two_minutes_apart_and_empties_on_take() {
        let t = Tally::default();
        let m = 29_000_000u64; // a minute number
        t.count(m * 60_000 + 59_999, Count::Joins, 2);
        t.admitted(m * 60_000 + 59_999, 3, m);
        t.count((m + 1) * 60_000, Count::Joins, 1);
        t.refused((m + 1) * 60_000, "rate_limited");
        t.refused((m + 1) * 60_000, "something_new");
        let taken = t.take((m + 1) * 60_000 + 500);
        assert_eq!(
            taken,
            vec![
                (m, vec![("joins", 2), ("admissions", 1), ("admitted_of_released", 1), ("wait:2", 1)]),
                (m + 1, vec![("joins", 1), ("refused:rate_limited", 1), ("refused:other", 1)]),
            ]
        );
        assert!(t.take((m + 1) * 60_000 + 1500).is_empty());
    }

    #[test]
    fn cohort_counts_of_past_minutes_wait_in_their_own_minute() {
        let t = Tally::default();
        let m = 29_000_000u64;
        let now = (m + 5) * 60_000 + 10;
        // Admitted now, its place's turn came at m + 4; a session of minute m used now.
        t.admitted(now, 70, m + 4);
        t.count_in(now, m, Count::HeldOfAdmitted, 1);
        t.count_in(now, m + 5, Count::HeldOfAdmitted, 1);
        assert_eq!(
            t.take(now + 1000),
            vec![
                (m, vec![("held_of_admitted", 1)]),
                (m + 4, vec![("admitted_of_released", 1)]),
                (m + 5, vec![("admissions", 1), ("held_of_admitted", 1), ("wait:7", 1)]),
            ]
        );
        // What a failed flush puts back goes with the next one, in its own minute (not the slot
        // of the same parity).
        t.put_back(m + 3, &[("joins", 2)]);
        assert_eq!(t.take((m + 9) * 60_000), vec![(m + 3, vec![("joins", 2)])]);
        assert!(t.take((m + 9) * 60_000).is_empty());
    }

    #[test]
    fn release_marks_name_the_minute_a_place_was_passed() {
        let mut k = ReleaseMarks::default();
        assert_eq!(k.turn_minute(1, 0), None, "not watching yet");
        k.note(100, 10, 0); // watching from here: places 1-10 came before
        k.note(100, 10, 0);
        k.note(101, 14, 0);
        k.note(101, 20, 2);
        k.note(102, 20, 2); // nothing moved: no mark
        k.note(103, 25, 2);
        k.note(104, 24, 2); // (never backwards)
        assert_eq!(k.turn_minute(10, 0), None, "before this edge watched");
        assert_eq!(k.turn_minute(11, 0), Some(101));
        assert_eq!(k.turn_minute(20, 0), Some(101));
        assert_eq!(k.turn_minute(21, 0), Some(103));
        assert_eq!(k.turn_minute(25, 0), Some(103));
        assert_eq!(k.turn_minute(26, 0), None, "not come yet (a passthrough place): the caller's minute");
        // A lane place: the earlier of its lane turn and its place's turn.
        assert_eq!(k.turn_minute(40, 2), Some(101));
        assert_eq!(k.turn_minute(21, 3), Some(103));
        assert_eq!(k.turn_minute(40, 3), None);
    }

    #[test]
    fn wait_buckets_and_quantiles() {
        assert_eq!((wait_bucket(0), wait_bucket(1), wait_bucket(2), wait_bucket(3), wait_bucket(7200), wait_bucket(7201)), (0, 0, 1, 2, 13, 14));
        let mut h = vec![0u64; WAIT_BUCKETS];
        assert_eq!(wait_quantile(&h, 0.5), None);
        h[0] = 50;
        h[3] = 40;
        h[6] = 9;
        h[14] = 1;
        assert_eq!(wait_quantile(&h, 0.5), Some(1));
        assert_eq!(wait_quantile(&h, 0.9), Some(10));
        assert_eq!(wait_quantile(&h, 0.99), Some(60));
        assert_eq!(wait_quantile(&h, 1.0), None, "the overflow bucket has no bound");
    }

}
