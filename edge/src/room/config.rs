//! A room's configuration: `[[rooms]]` in the config file (kebab-case) and the body of
//! `PUT /admin/rooms/<room>` (docs/src/api.md, snake_case); both parse into [`RoomConfig`], which
//! [`RoomConfig::compile`] validates once (every problem with its path) into a [`RoomSpec`].
//!
//! Defaults (every field but `event`, `target` and `protected` has one):
//!
//! | field | default |
//! |---|---|
//! | `schedule` | no pre-queue, open now (but never before the core event's `opens_at`), never closes |
//! | `method` | `fifo` |
//! | `release` | `auto`, start 50/s, min 5/s, max 2000/s, P99 target 100 ms, weight 1 (its part of a core shared with other rooms) |
//! | `total-active-max` | no cap |
//! | `session-seconds` | 600 |
//! | `session-idle-seconds` | 120 (not seen this long: out of the session budget until seen again) |
//! | `token-seconds` | 120 (at most 300) |
//! | `bot-check` | `off` |
//! | `proof-grace-seconds` | 30 (a place whose turn came with the bot check still owed is kept this long, then lost) |
//! | `batches` | none |
//! | `max-qty` | 1 (the token's `max_qty`) |
//! | `max-tracked` | 10,000,000 identities remembered for rejoin (embedded state) |
//! | `queue` | `always`; `when-needed`: passthrough while the thresholds hold |
//! | `passthrough` | `active-max` 1000 sessions, `new-per-minute` 600 per edge |
//! | `reject-all` | `false`; `true`: nobody new is queued or admitted, every fan gets the closed page (admitted sessions keep running) |
//! | `queuing-status-code` | 200; 202 or 429 (with `Retry-After`): the status of the queue page and of the queue's join answers while the fan is queued |
//! | `event-name` | `[edge.queue-page] event-name`: the event's name on this room's page |
//! | `test-mode` | `false`; `true`: only fans with the operator's test cookie meet the room, everyone else passes as if it were off |
//! | `invite` | none: everyone may queue (`[rooms.invite]`: the presale lane, [`super::invite`]; `share`: its share of each release; `wrong-codes-per-minute`: 300) |
//! | `layout` | `single` (every key in one Redis Cluster slot); `spread`: across the cluster ([`super::spread`]) |
//! | `spread` | 6 shards, time buckets of 5 ms with up to 500 places per edge each, joins written every 300 ms |

use serde::{Deserialize, Serialize};

use crate::check::{ConfigIssue, is_room_id};

/// How queue positions turn into admission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum QueueMethod {
    /// First come, first served.
    #[default]
    Fifo,
    /// Everyone who joined before the sale opened is shuffled once at open; later arrivals are FIFO.
    Random,
}

/// Who decides the release rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseModeConfig {
    /// The release controller, within min/max.
    #[default]
    Auto,
    /// `rate` admissions per second.
    Fixed,
}

/// The bot check a visitor passes before getting a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RoomBotCheck {
    /// None.
    #[default]
    Off,
    /// The built-in proof-of-work.
    Pow,
    /// The CAPTCHA hook (`[edge.bot.captcha]`).
    Captcha,
}

impl RoomBotCheck {
    /// The name in configs and answers: `off`, `pow`, `captcha`.
    pub fn name(self) -> &'static str {
        match self {
            RoomBotCheck::Off => "off",
            RoomBotCheck::Pow => "pow",
            RoomBotCheck::Captcha => "captcha",
        }
    }
}

/// `schedule`: RFC 3339 times.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ScheduleConfig {
    /// The queue page accepts joins from here (the pre-queue); default: with `opens-at`.
    #[serde(default, alias = "prequeue_at")]
    pub prequeue_at: Option<String>,
    /// Releases start here; default: at once.
    #[serde(default, alias = "opens_at")]
    pub opens_at: Option<String>,
    /// The room closes here; default: never.
    #[serde(default, alias = "closes_at")]
    pub closes_at: Option<String>,
}

/// `release`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ReleaseConfig {
    /// `auto` or `fixed`. Default `auto`.
    pub mode: ReleaseModeConfig,
    /// Admissions per second in `fixed` mode (required there).
    pub rate: Option<f64>,
    /// First rate of the controller. Default 50.
    pub start: f64,
    /// Lowest rate of the controller. Default 5.
    pub min: f64,
    /// Highest rate of the controller. Default 2000.
    pub max: f64,
    /// Core P99 the controller keeps under, ms. Default 100.
    #[serde(alias = "p99_target_ms")]
    pub p99_target_ms: f64,
    /// The room's weight when rooms of this edge share one core ([`crate::controller::fair_shares`]):
    /// a room of weight 2 is entitled to twice the part of a room of weight 1 while both want
    /// more. In (0, 1000]. Default 1; serialised only when set otherwise (an older edge sharing
    /// the room refuses fields it does not know).
    #[serde(skip_serializing_if = "is_default_weight")]
    pub weight: f64,
}

/// The default room weight.
pub const DEFAULT_WEIGHT: f64 = 1.0;
/// The highest room weight: beyond it a room would starve the others down to rounding.
pub const MAX_WEIGHT: f64 = 1000.0;

fn is_default_weight(w: &f64) -> bool {
    *w == DEFAULT_WEIGHT
}

impl Default for ReleaseConfig {
    fn default() -> Self {
        ReleaseConfig {
            mode: ReleaseModeConfig::Auto,
            rate: None,
            start: 50.0,
            min: 5.0,
            max: 2000.0,
            p99_target_ms: 100.0,
            weight: DEFAULT_WEIGHT,
        }
    }
}

/// `batches[]`: release `count` more at `at` (timed batch release, 分时段放票).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BatchConfig {
    /// RFC 3339 time.
    pub at: String,
    /// How many positions are released at once.
    pub count: u64,
}

/// One room, as written by the operator.
///
/// Rooms travel between edges sharing Redis as this struct's JSON, and an edge refuses a field it
/// does not know: every field added after the first release (`reject-all`, `queuing-status-code`,
/// `test-mode`, `event-name`, `invite`) is left out of the JSON while at its default, so a room
/// that uses none of them still reads on an edge of the release before (a rolling upgrade: docs/src/waiting-room.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RoomConfig {
    /// Room id (`[[rooms]]` only; the admin API takes it from the URL). Letters, digits, `-`, `_`.
    #[serde(default, alias = "name")]
    pub id: Option<String>,
    /// The core event the room guards (the token's `aud`).
    pub event: String,
    /// Where an admitted visitor is sent (a path on this site, or an absolute URL).
    pub target: String,
    /// Path prefixes only this room's token holders reach.
    pub protected: Vec<String>,
    /// Pre-queue, open and close times.
    #[serde(default)]
    pub schedule: ScheduleConfig,
    /// `fifo` or `random`.
    #[serde(default)]
    pub method: QueueMethod,
    /// Release bounds and mode.
    #[serde(default)]
    pub release: ReleaseConfig,
    /// Most admitted-and-unfinished sessions at once; default: no cap.
    #[serde(default, alias = "total_active_max")]
    pub total_active_max: Option<u64>,
    /// How long an admission session lasts, seconds. Default 600.
    #[serde(default = "default_session", alias = "session_seconds")]
    pub session_seconds: u64,
    /// An admitted visitor not seen for this long (no protected page, no core request) stops
    /// counting against the session budget until seen again, seconds. Default 120.
    #[serde(default = "default_idle", alias = "session_idle_seconds")]
    pub session_idle_seconds: u64,
    /// Admission token lifetime, seconds (≤ 300). Default 120.
    #[serde(default = "default_token", alias = "token_seconds")]
    pub token_seconds: u64,
    /// `off`, `pow` or `captcha`. Default `off`.
    #[serde(default, alias = "bot_check")]
    pub bot_check: RoomBotCheck,
    /// With a bot check: how long a place whose turn came while the check was still owed is kept
    /// (not admitted, not counted by the release; admitted if the check comes within it, the next
    /// release letting in one fewer) before it is lost, seconds. 1 to 3600. Default 30.
    #[serde(default = "default_proof_grace", alias = "proof_grace_seconds")]
    pub proof_grace_seconds: u64,
    /// Timed batch releases.
    #[serde(default)]
    pub batches: Vec<BatchConfig>,
    /// The token's `max_qty`. Default 1.
    #[serde(default = "default_max_qty", alias = "max_qty")]
    pub max_qty: u32,
    /// Identities (user or device) remembered so a rejoin keeps its place. Default 10,000,000.
    #[serde(default = "default_max_tracked", alias = "max_tracked")]
    pub max_tracked: usize,
    /// `always` (default): every visitor of a protected path meets the queue first.
    /// `when-needed`: a passthrough room, invisible while its thresholds hold.
    #[serde(default)]
    pub queue: QueueWhen,
    /// The thresholds of a passthrough room.
    #[serde(default)]
    pub passthrough: PassthroughConfig,
    /// Reject-all: nobody new is queued or admitted; every fan on the queue and the protected
    /// paths gets the closed page (JSON: `closed`). Sessions already admitted keep running.
    /// Default `false`. (The admin API's `POST .../reject-all` does the same at run time.)
    #[serde(default, alias = "reject_all", skip_serializing_if = "std::ops::Not::not")]
    pub reject_all: bool,
    /// The status of the queue page (and of the JSON answers of `GET /queue/<room>` and `POST
    /// .../join`) while the fan is queued: 200 (default), 202 or 429 (both with `Retry-After`).
    #[serde(default = "default_queuing_status", alias = "queuing_status_code", skip_serializing_if = "is_default_queuing_status")]
    pub queuing_status_code: u16,
    /// Test mode: only fans carrying a test cookie from the admin API (`POST
    /// /admin/rooms/<room>/test-cookie`) are queued and admitted; everyone else reaches the
    /// protected paths as if the room were off. Default `false`.
    #[serde(default, alias = "test_mode", skip_serializing_if = "std::ops::Not::not")]
    pub test_mode: bool,
    /// The event's name on this room's queue page (and its title), over `[edge.queue-page]
    /// event-name`. Default: that one.
    #[serde(default, alias = "event_name", skip_serializing_if = "Option::is_none")]
    pub event_name: Option<String>,
    /// The invite lane (`[rooms.invite]`): invite-only for a window (`only-until`, before the
    /// closing), or for good (`only`), not both, and/or a share of each release (`share`, FIFO rooms
    /// only); at least one of them. None: everyone may queue (and the room never reads its invites).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invite: Option<InviteConfig>,
    /// Where a room shared through Redis keeps its state: `single` (default), every key in one
    /// Cluster slot; `spread`, across the cluster ([`SpreadConfig`], [`super::spread`]). No
    /// effect on the embedded store. Fixed for the room's life (the admin API answers 409 to a
    /// change). A spread room takes no bot check, no `random` method, no passthrough and no invite
    /// `share`.
    #[serde(default, skip_serializing_if = "RoomLayout::is_single")]
    pub layout: RoomLayout,
    /// `[rooms.spread]`: the spread layout's blocks and shards.
    #[serde(default, skip_serializing_if = "SpreadConfig::is_default")]
    pub spread: SpreadConfig,
}

/// Where a room's shared state lives ([`RoomConfig::layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RoomLayout {
    /// Every key of the room in one Cluster slot: one node carries the room's joins.
    #[default]
    Single,
    /// Positions leased to each edge in blocks, identities and sessions sharded across slots.
    Spread,
}

impl RoomLayout {
    fn is_single(&self) -> bool {
        *self == RoomLayout::Single
    }
}

/// `[rooms.spread]`: a room spread across a Redis Cluster ([`super::spread`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct SpreadConfig {
    /// Shards of the identity map and the sessions, each on its own slot, spread evenly over the
    /// slot space. 1 to 1024. Default 6 (two on each of 3 masters, three on each of 2).
    pub shards: u32,
    /// Places one edge numbers in one time bucket (more joins in a bucket spill into the next).
    /// 1 to 100,000, and at most 100 per ms of `block-ms` (positions stay below 2^53). Default 500
    /// (100,000 joins a second at one edge).
    pub block: u64,
    /// The time bucket, ms: a join's place is (its arrival's bucket, its edge, its order there),
    /// so across edges joins are out of order by at most this (and the edges' clock skew).
    /// 1 to 1000. Default 5.
    #[serde(alias = "block_ms")]
    pub block_ms: u64,
    /// How often an edge writes the joins it took (one batch per shard), ms: a join is answered
    /// after its batch is written. 5 to 1000. Default 300.
    #[serde(alias = "flush_ms")]
    pub flush_ms: u64,
}

impl Default for SpreadConfig {
    fn default() -> Self {
        SpreadConfig { shards: 6, block: 500, block_ms: 5, flush_ms: 300 }
    }
}

impl SpreadConfig {
    fn is_default(&self) -> bool {
        *self == SpreadConfig::default()
    }
}

/// `[rooms.invite]`: who may take a place while the room is invite-only (see [`super::invite`]).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct InviteConfig {
    /// Invite-only until this RFC 3339 time (the presale); after it everyone may queue, behind
    /// the invitees who queued before.
    #[serde(default, alias = "only_until", skip_serializing_if = "Option::is_none")]
    pub only_until: Option<String>,
    /// Invite-only for the whole sale (an invite-only waiting room). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub only: bool,
    /// The lane's share of each release, in (0, 1]: while invitees and others both wait, up to
    /// this fraction of each release step admits invitees who joined as invitees, ahead of their
    /// FIFO turn (in their join order); the rest goes in FIFO order. None: no reserved share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// Wrong invite codes (no such code in the room) the room takes per minute on each edge, from
    /// every address together; once spent, no code is judged (right or wrong: 429 with
    /// `Retry-After`) until the minute ends. 1 to 1,000,000. Default 300
    /// ([`super::invite::WRONG_CODES_PER_MINUTE`]).
    #[serde(default, alias = "wrong_codes_per_minute", skip_serializing_if = "Option::is_none")]
    pub wrong_codes_per_minute: Option<u32>,
}

impl InviteConfig {
    /// [`InviteConfig::wrong_codes_per_minute`] or its default.
    pub fn wrong_codes_budget(&self) -> u32 {
        self.wrong_codes_per_minute.unwrap_or(super::invite::WRONG_CODES_PER_MINUTE)
    }
}

/// When a room queues its visitors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum QueueWhen {
    /// Every visitor of a protected path queues first.
    #[default]
    Always,
    /// Passthrough: a visitor of a protected path is admitted on their first request while the
    /// room is open, nobody waits, and its thresholds hold ([`PassthroughConfig`]); the queue
    /// forms (FIFO from then) when one is crossed and dissolves once it is empty again.
    WhenNeeded,
}

/// `[rooms.passthrough]`: the thresholds of a `queue = "when-needed"` room.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct PassthroughConfig {
    /// Admitted sessions active at once (the room's, across edges) below which visitors pass
    /// straight through. Default 1000.
    #[serde(alias = "active_max")]
    pub active_max: u64,
    /// New visitors let straight through per minute, per edge. Default 600.
    #[serde(alias = "new_per_minute")]
    pub new_per_minute: u64,
}

impl Default for PassthroughConfig {
    fn default() -> Self {
        PassthroughConfig { active_max: 1000, new_per_minute: 600 }
    }
}

fn default_queuing_status() -> u16 {
    200
}
fn is_default_queuing_status(code: &u16) -> bool {
    *code == default_queuing_status()
}
fn default_session() -> u64 {
    600
}
fn default_idle() -> u64 {
    120
}
fn default_proof_grace() -> u64 {
    30
}
fn default_token() -> u64 {
    120
}
fn default_max_qty() -> u32 {
    1
}
fn default_max_tracked() -> usize {
    10_000_000
}

/// A validated room: times as Unix seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomSpec {
    /// Room id.
    pub id: String,
    /// The config it came from (served back by the admin API).
    pub config: RoomConfig,
    /// Joins accepted from (Unix s).
    pub prequeue_at: Option<i64>,
    /// Releases start (Unix s).
    pub opens_at: Option<i64>,
    /// Closes (Unix s).
    pub closes_at: Option<i64>,
    /// Batches (Unix s, count), sorted by time.
    pub batches: Vec<(i64, u64)>,
    /// Invite-only until (Unix s; `i64::MAX`: for good); `None`: never invite-only.
    pub invite_until: Option<i64>,
    /// The invite lane's share of each release (`[rooms.invite] share`); `None`: no lane of its own.
    pub lane_share: Option<f64>,
}

impl RoomSpec {
    /// Whether only invitees may take a place at `now_s` (Unix s).
    pub fn invite_only(&self, now_s: i64) -> bool {
        self.invite_until.is_some_and(|u| now_s < u)
    }
}

/// RFC 3339 → Unix seconds.
pub fn parse_time(s: &str) -> Option<i64> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok().map(|t| t.unix_timestamp())
}

fn issue(path: String, message: impl Into<String>) -> ConfigIssue {
    ConfigIssue { path, message: message.into() }
}

impl RoomConfig {
    /// Parses one `[[rooms]]` table.
    pub fn from_toml(v: &toml::Value) -> Result<Self, String> {
        RoomConfig::deserialize(v.clone()).map_err(|e| e.to_string())
    }

    /// The spread layout's bounds, and the features it does not carry (each keeps state per place
    /// in one slot: owed places, the pre-queue's draw, passthrough's serve-my-place, the lane).
    fn check_spread(&self, path: &str, out: &mut Vec<ConfigIssue>) {
        let s = &self.spread;
        if s.shards == 0 || s.shards > 1024 {
            out.push(issue(format!("{path}.spread.shards"), "must be between 1 and 1024"));
        }
        if s.block == 0 || s.block > 100_000 {
            out.push(issue(format!("{path}.spread.block"), "must be between 1 and 100000"));
        } else if s.block_ms > 0 && s.block > 100 * s.block_ms {
            // Positions are (bucket, edge, place): 64 edges x 100 places a ms stay below 2^53
            // (exact in Redis scripts and in JavaScript) for 40 years from 2026.
            out.push(issue(format!("{path}.spread.block"), "must be at most 100 places per ms of block-ms (positions must stay below 2^53)"));
        }
        if s.block_ms == 0 || s.block_ms > 1000 {
            out.push(issue(format!("{path}.spread.block-ms"), "must be between 1 and 1000"));
        }
        if s.flush_ms < 5 || s.flush_ms > 1000 {
            out.push(issue(format!("{path}.spread.flush-ms"), "must be between 5 and 1000"));
        }
        let without = |what: &str| format!("the spread layout does not carry {what} yet: use layout = \"single\" for this room");
        if self.bot_check != RoomBotCheck::Off {
            out.push(issue(format!("{path}.bot-check"), without("the room's bot check (owed places); guard the paths with [[edge.bot.routes]]")));
        }
        if self.method == QueueMethod::Random {
            out.push(issue(format!("{path}.method"), without("the random pre-queue")));
        }
        if self.queue == QueueWhen::WhenNeeded {
            out.push(issue(format!("{path}.queue"), without("passthrough (\"when-needed\")")));
        }
        if self.invite.as_ref().is_some_and(|i| i.share.is_some()) {
            out.push(issue(format!("{path}.invite.share"), without("the invite lane's share of the release")));
        }
    }

    /// Validates; `path` prefixes every problem (`rooms[0]`, or `room` for the admin API).
    pub fn compile(&self, id: &str, path: &str) -> Result<RoomSpec, Vec<ConfigIssue>> {
        let mut out = Vec::new();
        if !is_room_id(id) {
            out.push(issue(format!("{path}.id"), "letters, digits, '-' and '_' only (1-64)"));
        }
        if self.event.is_empty() || self.event.len() > 128 || !self.event.bytes().all(|b| b.is_ascii_graphic()) {
            out.push(issue(format!("{path}.event"), "1-128 visible ASCII characters"));
        }
        let t = &self.target;
        let target_ok = (t.starts_with('/') && !t.starts_with("//"))
            || t.starts_with("https://")
            || t.starts_with("http://");
        if !target_ok || t.len() > 2048 || t.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            out.push(issue(format!("{path}.target"), "a path starting with '/' or an http(s) URL"));
        }
        if self.protected.is_empty() {
            out.push(issue(format!("{path}.protected"), "at least one path prefix"));
        }
        for (i, p) in self.protected.iter().enumerate() {
            if let Some(problem) = crate::path::prefix_problem(p) {
                out.push(issue(format!("{path}.protected[{i}]"), problem));
            } else if p.starts_with("/queue/") || "/queue/".starts_with(p.as_str()) {
                out.push(issue(format!("{path}.protected[{i}]"), "must not cover the queue's own paths"));
            }
        }
        let mut time = |key: &str, v: &Option<String>| -> Option<i64> {
            let s = v.as_deref()?;
            let t = parse_time(s);
            if t.is_none() {
                out.push(issue(format!("{path}.schedule.{key}"), format!("not an RFC 3339 time: {s:?}")));
            }
            t
        };
        let prequeue_at = time("prequeue-at", &self.schedule.prequeue_at);
        let opens_at = time("opens-at", &self.schedule.opens_at);
        let closes_at = time("closes-at", &self.schedule.closes_at);
        if let (Some(p), Some(o)) = (prequeue_at, opens_at)
            && p > o
        {
            out.push(issue(format!("{path}.schedule.prequeue-at"), "must not be after opens-at"));
        }
        if let (Some(o), Some(c)) = (opens_at, closes_at)
            && o >= c
        {
            out.push(issue(format!("{path}.schedule.closes-at"), "must be after opens-at"));
        }
        if self.method == QueueMethod::Random && opens_at.is_none() {
            out.push(issue(format!("{path}.method"), "random needs schedule.opens-at (the pre-queue is shuffled at open)"));
        }
        let r = &self.release;
        let finite = |x: f64| x.is_finite() && x >= 0.0;
        if !finite(r.min) || !finite(r.max) || r.min > r.max || r.max > 1_000_000.0 {
            out.push(issue(format!("{path}.release.max"), "need 0 <= min <= max <= 1000000"));
        }
        if !finite(r.start) || r.start > 1_000_000.0 {
            out.push(issue(format!("{path}.release.start"), "must be between 0 and 1000000"));
        }
        if !r.p99_target_ms.is_finite() || r.p99_target_ms < 1.0 || r.p99_target_ms > 60_000.0 {
            out.push(issue(format!("{path}.release.p99-target-ms"), "must be between 1 and 60000"));
        }
        if !(r.weight.is_finite() && r.weight > 0.0 && r.weight <= MAX_WEIGHT) {
            out.push(issue(format!("{path}.release.weight"), "must be more than 0 and at most 1000 (the room's weight in sharing the core)"));
        }
        match (r.mode, r.rate) {
            (ReleaseModeConfig::Fixed, None) => out.push(issue(format!("{path}.release.rate"), "required when mode = \"fixed\"")),
            (_, Some(x)) if !finite(x) || x > 1_000_000.0 => {
                out.push(issue(format!("{path}.release.rate"), "must be between 0 and 1000000"))
            }
            _ => {}
        }
        if self.total_active_max == Some(0) {
            out.push(issue(format!("{path}.total-active-max"), "must be at least 1 (omit it for no cap)"));
        }
        if self.session_seconds == 0 || self.session_seconds > 86_400 {
            out.push(issue(format!("{path}.session-seconds"), "must be between 1 and 86400"));
        }
        if self.proof_grace_seconds < 1 || self.proof_grace_seconds > 3600 {
            out.push(issue(format!("{path}.proof-grace-seconds"), "must be between 1 and 3600"));
        }
        if self.session_idle_seconds < 5 || self.session_idle_seconds > 86_400 {
            out.push(issue(format!("{path}.session-idle-seconds"), "must be between 5 and 86400"));
        }
        if self.token_seconds == 0 || self.token_seconds > 300 {
            out.push(issue(format!("{path}.token-seconds"), "must be between 1 and 300"));
        }
        if self.max_qty == 0 || self.max_qty > 100 {
            out.push(issue(format!("{path}.max-qty"), "must be between 1 and 100"));
        }
        if self.max_tracked == 0 || self.max_tracked > 100_000_000 {
            out.push(issue(format!("{path}.max-tracked"), "must be between 1 and 100000000"));
        }
        if self.batches.len() > 1000 {
            out.push(issue(format!("{path}.batches"), "at most 1000 batches"));
        }
        if self.passthrough.active_max == 0 || self.passthrough.active_max > 100_000_000 {
            out.push(issue(format!("{path}.passthrough.active-max"), "must be between 1 and 100000000"));
        }
        if self.passthrough.new_per_minute == 0 || self.passthrough.new_per_minute > 100_000_000 {
            out.push(issue(format!("{path}.passthrough.new-per-minute"), "must be between 1 and 100000000"));
        }
        if self.queue == QueueWhen::WhenNeeded && self.bot_check != RoomBotCheck::Off {
            out.push(issue(
                format!("{path}.queue"),
                "\"when-needed\" lets visitors in without joining, so it cannot ask the room's bot check: guard the protected paths with [[edge.bot.routes]] instead",
            ));
        }
        if self.event_name.as_deref().is_some_and(|n| n.trim().is_empty() || n.chars().count() > 200 || n.chars().any(char::is_control)) {
            out.push(issue(format!("{path}.event-name"), "1-200 characters, no control characters"));
        }
        if ![200, 202, 429].contains(&self.queuing_status_code) {
            out.push(issue(format!("{path}.queuing-status-code"), "must be 200, 202 or 429"));
        }
        if self.layout == RoomLayout::Spread {
            self.check_spread(path, &mut out);
        }
        if self.queue == QueueWhen::WhenNeeded && self.method == QueueMethod::Random {
            out.push(issue(format!("{path}.queue"), "\"when-needed\" needs method = \"fifo\" (a random draw has nobody to let through)"));
        }
        let mut batches = Vec::new();
        for (i, b) in self.batches.iter().enumerate() {
            match parse_time(&b.at) {
                Some(t) => batches.push((t, b.count)),
                None => out.push(issue(format!("{path}.batches[{i}].at"), format!("not an RFC 3339 time: {:?}", b.at))),
            }
            if b.count == 0 || b.count > 100_000_000 {
                out.push(issue(format!("{path}.batches[{i}].count"), "must be between 1 and 100000000"));
            }
        }
        batches.sort();
        let invite_until = self.invite.as_ref().and_then(|inv| invite_until(inv, path, closes_at, &mut out));
        if self.invite.as_ref().is_some_and(|inv| inv.share.is_some()) && self.method == QueueMethod::Random {
            // The lane's places are in join order; a random draw admits the pre-queue in another.
            out.push(issue(format!("{path}.invite.share"), "needs method = \"fifo\" (a random draw has no join order to keep)"));
        }
        if !out.is_empty() {
            return Err(out);
        }
        let lane_share = self.invite.as_ref().and_then(|inv| inv.share);
        Ok(RoomSpec { id: id.to_owned(), config: self.clone(), prequeue_at, opens_at, closes_at, batches, invite_until, lane_share })
    }
}

/// `[rooms.invite]` checked: when the room stops being invite-only (Unix s, `i64::MAX`: never).
fn invite_until(inv: &InviteConfig, path: &str, closes_at: Option<i64>, out: &mut Vec<ConfigIssue>) -> Option<i64> {
    if let Some(share) = inv.share
        && !(share.is_finite() && share > 0.0 && share <= 1.0)
    {
        out.push(issue(format!("{path}.invite.share"), "must be more than 0 and at most 1 (the lane's fraction of each release)"));
    }
    if inv.wrong_codes_per_minute.is_some_and(|n| n == 0 || n > 1_000_000) {
        out.push(issue(format!("{path}.invite.wrong-codes-per-minute"), "must be between 1 and 1000000"));
    }
    match (&inv.only_until, inv.only) {
        (Some(_), true) => {
            out.push(issue(format!("{path}.invite.only"), "set either only = true (for good) or only-until (a window), not both"));
            None
        }
        (None, false) if inv.share.is_some() => None,
        (None, false) => {
            out.push(issue(format!("{path}.invite"), "set only-until (invite-only until then), only = true or share"));
            None
        }
        (None, true) => Some(i64::MAX),
        (Some(s), false) => match parse_time(s) {
            None => {
                out.push(issue(format!("{path}.invite.only-until"), format!("not an RFC 3339 time: {s:?}")));
                None
            }
            Some(t) if closes_at.is_some_and(|c| t >= c) => {
                out.push(issue(format!("{path}.invite.only-until"), "must be before schedule.closes-at (or use only = true)"));
                None
            }
            Some(t) => Some(t),
        },
    }
}

/// Parses and validates every `[[rooms]]` table; all problems with their paths.
/// Every problem of a room table that does not deserialise (serde stops at the first): each key is
/// tried alone on a minimal valid room (its type problems, named by key), required keys that are
/// missing are named, and the keys that are fine are compiled together for their semantic
/// problems (those of stand-ins for missing or broken keys left out). `whole` is serde's own
/// message, kept when nothing more precise is found.
fn every_problem(v: &toml::Value, path: &str, whole: String) -> Vec<ConfigIssue> {
    let Some(table) = v.as_table() else { return vec![issue(path.to_owned(), whole)] };
    let mut base = toml::Table::new();
    base.insert("event".into(), "stand-in".into());
    base.insert("target".into(), "/stand-in".into());
    base.insert("protected".into(), toml::Value::Array(vec!["/stand-in".into()]));
    let mut out = Vec::new();
    let mut good = base.clone();
    let mut given = Vec::new();
    for (k, val) in table {
        let mut probe = base.clone();
        probe.insert(k.clone(), val.clone());
        match RoomConfig::deserialize(toml::Value::Table(probe)) {
            Ok(_) => {
                good.insert(k.clone(), val.clone());
                given.push(k.clone());
            }
            Err(e) => out.push(issue(format!("{path}.{k}"), e.to_string().trim_end().to_owned())),
        }
    }
    for required in ["event", "target", "protected"] {
        if !table.contains_key(required) {
            out.push(issue(format!("{path}.{required}"), "required"));
        }
    }
    if let Ok(c) = RoomConfig::deserialize(toml::Value::Table(good)) {
        let id = c.id.clone().unwrap_or_else(|| "stand-in".into());
        if let Err(e) = c.compile(&id, path) {
            let named = |p: &str| given.iter().any(|k| p == format!("{path}.{k}") || p.starts_with(&format!("{path}.{k}.")) || p.starts_with(&format!("{path}.{k}[")));
            out.extend(e.into_iter().filter(|i| named(&i.path)));
        }
    }
    if out.is_empty() {
        out.push(issue(path.to_owned(), whole));
    }
    out
}

pub fn compile_rooms(rooms: &[toml::Value]) -> Result<Vec<RoomSpec>, Vec<ConfigIssue>> {
    let mut out = Vec::new();
    let mut specs: Vec<RoomSpec> = Vec::new();
    for (i, v) in rooms.iter().enumerate() {
        let path = format!("rooms[{i}]");
        match RoomConfig::from_toml(v) {
            Err(m) => out.extend(every_problem(v, &path, m)),
            Ok(c) => {
                let Some(id) = c.id.clone() else {
                    out.push(issue(format!("{path}.id"), "required"));
                    continue;
                };
                if specs.iter().any(|s| s.id == id) {
                    out.push(issue(format!("{path}.id"), format!("duplicate room id {id:?}")));
                }
                match c.compile(&id, &path) {
                    Ok(s) => specs.push(s),
                    Err(mut e) => out.append(&mut e),
                }
            }
        }
    }
    if out.is_empty() { Ok(specs) } else { Err(out) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The room as the release before this wave's fields read it (`git show
    /// 24615a3:edge/src/room/config.rs`, its nested tables unchanged since): unknown fields denied.
    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    struct PreviousRoomConfig {
        id: Option<String>,
        event: String,
        target: String,
        protected: Vec<String>,
        schedule: ScheduleConfig,
        method: QueueMethod,
        release: ReleaseConfig,
        total_active_max: Option<u64>,
        session_seconds: u64,
        session_idle_seconds: u64,
        token_seconds: u64,
        bot_check: RoomBotCheck,
        proof_grace_seconds: u64,
        batches: Vec<BatchConfig>,
        max_qty: u32,
        max_tracked: usize,
        queue: QueueWhen,
        passthrough: PassthroughConfig,
    }

    fn keys(v: &serde_json::Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    /// A room that uses none of this wave's fields is published as the release before wrote it,
    /// so an edge not upgraded yet reads it (a rolling upgrade); one that uses a new field names
    /// it, and only such a room is refused there.
    #[test]
    fn a_room_at_its_defaults_serialises_to_the_previous_releases_fields() {
        let text = r#"{"event": "ev-1", "target": "/buy", "protected": ["/buy"]}"#;
        let c: RoomConfig = serde_json::from_str(text).unwrap();
        let v = serde_json::to_value(&c).unwrap();
        let mut previous = vec![
            "id", "event", "target", "protected", "schedule", "method", "release", "total-active-max", "session-seconds",
            "session-idle-seconds", "token-seconds", "bot-check", "proof-grace-seconds", "batches", "max-qty", "max-tracked",
            "queue", "passthrough",
        ];
        previous.sort_unstable();
        assert_eq!(keys(&v), previous, "{v}");
        assert_eq!(keys(&v["schedule"]), ["closes-at", "opens-at", "prequeue-at"]);
        assert_eq!(keys(&v["release"]), ["max", "min", "mode", "p99-target-ms", "rate", "start"]);
        assert_eq!(keys(&v["passthrough"]), ["active-max", "new-per-minute"]);
        serde_json::from_value::<PreviousRoomConfig>(v.clone()).expect("the previous release reads it");
        // It reads back as the same room on this release.
        assert_eq!(serde_json::from_value::<RoomConfig>(v).unwrap(), c);
        // Each new field, once used, is written (and an old edge refuses the room by that name).
        let uses = [
            ("reject-all", serde_json::json!(true)),
            ("queuing-status-code", serde_json::json!(429)),
            ("test-mode", serde_json::json!(true)),
            ("event-name", serde_json::json!("Spring sale")),
            ("invite", serde_json::json!({"share": 0.25})),
        ];
        for (field, value) in uses {
            let mut used = serde_json::to_value(&c).unwrap();
            used[field] = value.clone();
            let back: RoomConfig = serde_json::from_value(used).unwrap();
            let v = serde_json::to_value(&back).unwrap();
            assert_eq!(v[field], value, "{field}");
            let e = serde_json::from_value::<PreviousRoomConfig>(v).unwrap_err().to_string();
            assert!(e.contains(&format!("unknown field `{field}`")), "{field}: {e}");
        }
        // At their defaults written out (as an edge of this wave before the fix wrote them), they
        // still read here.
        let explicit = serde_json::json!({"event": "ev-1", "target": "/buy", "protected": ["/buy"], "reject-all": false,
            "queuing-status-code": 200, "test-mode": false, "event-name": null});
        assert_eq!(serde_json::from_value::<RoomConfig>(explicit).unwrap(), c);
    }

    /// Type, missing and semantic problems of one room, all in one pass, each with its path.
    #[test]
    fn every_problem_of_a_room_is_named_at_once() {
        let v: toml::Value = toml::from_str(
            "id = \"r1\"\ntarget = \"no-slash\"\nprotected = [\"/buy\"]\nrelease = { mode = \"fixed\", rate = \"ten per second\" }\n\
             session-seconds = 0\nmax-qty = \"two\"\nqueue = \"sometimes\"\n",
        )
        .unwrap();
        let issues = compile_rooms(&[v]).unwrap_err();
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        for want in ["rooms[0].release", "rooms[0].max-qty", "rooms[0].queue", "rooms[0].event", "rooms[0].target", "rooms[0].session-seconds"] {
            assert!(paths.contains(&want), "{want} missing from {issues:?}");
        }
        assert!(!paths.iter().any(|p| p.contains("stand-in")), "{issues:?}");
    }

    #[test]
    fn the_spread_layout_names_its_bad_settings_and_what_it_does_not_carry() {
        let room = |extra: &str| {
            let t: toml::Value = toml::from_str(&format!("id = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n{extra}")).unwrap();
            RoomConfig::from_toml(&t).unwrap().compile("r1", "rooms[0]")
        };
        let s = room("layout = \"spread\"\n").unwrap();
        assert_eq!((s.config.layout, s.config.spread.clone()), (RoomLayout::Spread, SpreadConfig::default()));
        let s = room("layout = \"spread\"\n[spread]\nshards = 12\nblock = 500\nblock-ms = 100\nflush-ms = 50\n").unwrap();
        assert_eq!(s.config.spread, SpreadConfig { shards: 12, block: 500, block_ms: 100, flush_ms: 50 });
        let paths = |extra: &str| room(extra).unwrap_err().into_iter().map(|i| i.path).collect::<Vec<_>>();
        assert_eq!(
            paths("layout = \"spread\"\nbot-check = \"pow\"\nqueue = \"when-needed\"\n[spread]\nshards = 0\nblock = 0\nblock-ms = 2000\nflush-ms = 2000\n"),
            // (The first: "when-needed" never asks a room's bot check, whatever the layout.)
            ["rooms[0].queue", "rooms[0].spread.shards", "rooms[0].spread.block", "rooms[0].spread.block-ms", "rooms[0].spread.flush-ms", "rooms[0].bot-check", "rooms[0].queue"]
        );
        // More places per bucket than 100 a ms would take positions past 2^53 within decades.
        let issues = room("layout = \"spread\"\n[spread]\nblock = 2000\nblock-ms = 10\n").unwrap_err();
        assert_eq!(issues.iter().map(|i| i.path.as_str()).collect::<Vec<_>>(), ["rooms[0].spread.block"]);
        assert!(issues[0].message.contains("2^53"), "{issues:?}");
        assert!(room("layout = \"spread\"\n[spread]\nblock = 1000\nblock-ms = 10\n").is_ok());
        let issues = room("layout = \"spread\"\nmethod = \"random\"\nschedule = { opens-at = \"2026-12-01T10:00:00Z\" }\ninvite = { share = 0.2 }\n").unwrap_err();
        for path in ["rooms[0].method", "rooms[0].invite.share"] {
            assert!(issues.iter().any(|i| i.path == path && i.message.contains("spread layout")), "{path}: {issues:?}");
        }
        // The single layout ignores [spread]'s defaults and keeps its features; an unknown layout is refused.
        assert!(room("bot-check = \"pow\"\n").is_ok());
        assert!(RoomConfig::from_toml(&toml::from_str("event = \"e\"\ntarget = \"/b\"\nprotected = [\"/b\"]\nlayout = \"sharded\"\n").unwrap()).is_err());
        // A room at the default layout is written as before (no new field for older edges).
        let v = serde_json::to_value(&room("").unwrap().config).unwrap();
        assert!(v.get("layout").is_none() && v.get("spread").is_none(), "{v}");
    }

    #[test]
    fn defaults_and_both_spellings() {
        let t: toml::Value = toml::from_str(
            "id = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\ntotal-active-max = 10\n",
        )
        .unwrap();
        let s = RoomConfig::from_toml(&t).unwrap().compile("r1", "rooms[0]").unwrap();
        assert_eq!(s.config.session_seconds, 600);
        assert_eq!(s.config.token_seconds, 120);
        assert_eq!(s.config.release.start, 50.0);
        assert_eq!(s.config.total_active_max, Some(10));
        let j: RoomConfig = serde_json::from_value(serde_json::json!({
            "event": "ev-42", "target": "/buy/ev-42", "protected": ["/buy/ev-42", "/api/sale/"],
            "schedule": {"prequeue_at": "2026-12-01T01:30:00Z", "opens_at": "2026-12-01T02:00:00Z",
                         "closes_at": "2026-12-01T14:00:00Z"},
            "method": "fifo",
            "release": {"mode": "auto", "start": 50, "min": 5, "max": 2000, "p99_target_ms": 100},
            "total_active_max": 5000, "session_seconds": 600, "token_seconds": 120, "bot_check": "off",
            "batches": [{"at": "2026-12-01T02:10:00Z", "count": 1000}]
        }))
        .unwrap();
        let s = j.compile("ev-42", "room").unwrap();
        assert_eq!(s.opens_at, parse_time("2026-12-01T02:00:00Z"));
        assert_eq!(s.batches.len(), 1);
    }

    /// `[rooms.invite]`: a window or for good, never both nor neither; a time that parses and
    /// comes before the close; unknown keys refused — each with its path, with the room's other
    /// problems.
    #[test]
    fn the_invite_lane_is_checked_with_paths() {
        let room = |invite: &str| -> Result<RoomSpec, Vec<ConfigIssue>> {
            let v: toml::Value = toml::from_str(&format!(
                "id = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
                 schedule = {{ closes-at = \"2026-12-02T00:00:00Z\" }}\n{invite}\n"
            ))
            .unwrap();
            compile_rooms(&[v]).map(|mut s| s.remove(0))
        };
        let s = room("invite = { only-until = \"2026-12-01T10:00:00Z\" }").unwrap();
        assert_eq!(s.invite_until, parse_time("2026-12-01T10:00:00Z"));
        assert!(s.invite_only(s.invite_until.unwrap() - 1) && !s.invite_only(s.invite_until.unwrap()));
        assert_eq!(room("[invite]\nonly = true").unwrap().invite_until, Some(i64::MAX));
        assert_eq!(room("").unwrap().invite_until, None);
        let problem = |invite: &str| {
            let e = room(invite).unwrap_err();
            e.into_iter().map(|i| (i.path, i.message)).collect::<Vec<_>>()
        };
        assert_eq!(
            problem("invite = { only = true, only-until = \"2026-12-01T10:00:00Z\" }"),
            [("rooms[0].invite.only".to_owned(), "set either only = true (for good) or only-until (a window), not both".to_owned())]
        );
        assert_eq!(
            problem("invite = {}"),
            [("rooms[0].invite".to_owned(), "set only-until (invite-only until then), only = true or share".to_owned())]
        );
        assert_eq!(
            problem("invite = { only-until = \"soon\" }"),
            [("rooms[0].invite.only-until".to_owned(), "not an RFC 3339 time: \"soon\"".to_owned())]
        );
        assert_eq!(
            problem("invite = { only-until = \"2026-12-03T00:00:00Z\" }"),
            [("rooms[0].invite.only-until".to_owned(), "must be before schedule.closes-at (or use only = true)".to_owned())]
        );
        let e = problem("invite = { only = true, bogus = 0.3 }\nmax-qty = 0");
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["rooms[0].invite", "rooms[0].max-qty"], "{e:?}");
        // The lane's share of the release: alone (no invite-only window), or beside one; in (0, 1].
        let s = room("invite = { share = 0.3 }").unwrap();
        assert_eq!((s.lane_share, s.invite_until), (Some(0.3), None));
        assert_eq!(room("invite = { only = true, share = 1 }").unwrap().lane_share, Some(1.0));
        // The room's budget of wrong codes a minute: its default, its bounds, with its path.
        let budget = |invite: &str| room(invite).unwrap().config.invite.unwrap().wrong_codes_budget();
        assert_eq!(budget("invite = { only = true }"), 300);
        assert_eq!(budget("invite = { only = true, wrong-codes-per-minute = 20 }"), 20);
        for bad in ["0", "1000001"] {
            assert_eq!(
                problem(&format!("invite = {{ only = true, wrong-codes-per-minute = {bad} }}")),
                [("rooms[0].invite.wrong-codes-per-minute".to_owned(), "must be between 1 and 1000000".to_owned())]
            );
        }
        assert_eq!(room("").unwrap().lane_share, None);
        for bad in ["0", "-0.1", "1.5", "nan", "inf"] {
            assert_eq!(
                problem(&format!("invite = {{ share = {bad} }}")),
                [("rooms[0].invite.share".to_owned(), "must be more than 0 and at most 1 (the lane's fraction of each release)".to_owned())],
                "{bad}"
            );
        }
        assert_eq!(
            problem("invite = { share = 0.5 }\nmethod = \"random\""),
            [
                ("rooms[0].method".to_owned(), "random needs schedule.opens-at (the pre-queue is shuffled at open)".to_owned()),
                ("rooms[0].invite.share".to_owned(), "needs method = \"fifo\" (a random draw has no join order to keep)".to_owned())
            ]
        );
        // Every problem at once, each with its path.
        let mut e = problem("invite = { only-until = \"soon\", share = 0 }\nmax-qty = 0");
        e.sort();
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["rooms[0].invite.only-until", "rooms[0].invite.share", "rooms[0].max-qty"], "{e:?}");
        // The admin API's spelling.
        let j: RoomConfig = serde_json::from_value(serde_json::json!({
            "event": "e", "target": "/", "protected": ["/a"], "invite": {"only_until": "2026-12-01T10:00:00Z"}
        }))
        .unwrap();
        assert_eq!(j.compile("r1", "room").unwrap().invite_until, parse_time("2026-12-01T10:00:00Z"));
        // A room without a lane serialises as before (no `invite` key).
        let plain = room("").unwrap();
        assert!(serde_json::to_value(&plain.config).unwrap().get("invite").is_none());
    }

    /// `release.weight`: more than 0, at most 1000, finite; a wrong type named by its key; written
    /// back only when not the default (an older edge sharing the room refuses unknown fields).
    #[test]
    fn the_room_weight_is_checked_with_its_path() {
        let room = |release: &str| -> Result<RoomSpec, Vec<ConfigIssue>> {
            let v: toml::Value = toml::from_str(&format!(
                "id = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n[release]\n{release}\n"
            ))
            .unwrap();
            compile_rooms(&[v]).map(|mut s| s.remove(0))
        };
        assert_eq!(room("").unwrap().config.release.weight, 1.0);
        assert_eq!(room("weight = 2.5").unwrap().config.release.weight, 2.5);
        assert_eq!(room("weight = 1000").unwrap().config.release.weight, 1000.0);
        assert_eq!(room("weight = 3").unwrap().config.release.weight, 3.0, "an integer is a number");
        for bad in ["0", "-1", "-0.0", "nan", "inf", "-inf", "1000.5", "1e300"] {
            let e = room(&format!("weight = {bad}")).unwrap_err();
            assert_eq!(e.len(), 1, "{bad}: {e:?}");
            assert_eq!(e[0].path, "rooms[0].release.weight", "{bad}");
            assert!(e[0].message.contains("more than 0 and at most 1000"), "{bad}: {e:?}");
        }
        // The wrong type: named by its key, with the room's other problems.
        for bad in ["\"NaN\"", "\"inf\"", "\"2\"", "true", "[2]", "{ x = 1 }"] {
            let e = room(&format!("weight = {bad}\nmin = -1")).unwrap_err();
            assert!(e.iter().any(|i| i.path == "rooms[0].release" && i.message.contains("weight")), "{bad}: {e:?}");
        }
        // The admin API's body: the same checks.
        let body = |w: serde_json::Value| serde_json::from_value::<RoomConfig>(serde_json::json!({
            "event": "e", "target": "/", "protected": ["/a"], "release": {"mode": "auto", "weight": w}
        }));
        assert_eq!(body(serde_json::json!(2)).unwrap().compile("r1", "room").unwrap().config.release.weight, 2.0);
        let e = body(serde_json::json!(0)).unwrap().compile("r1", "room").unwrap_err();
        assert_eq!(e.iter().map(|i| i.path.as_str()).collect::<Vec<_>>(), ["room.release.weight"]);
        assert!(body(serde_json::json!(-3.5)).unwrap().compile("r1", "room").is_err());
        assert!(body(serde_json::json!(1e9)).unwrap().compile("r1", "room").is_err());
        for bad in [serde_json::json!("NaN"), serde_json::json!("2"), serde_json::json!(null), serde_json::json!([1])] {
            assert!(body(bad.clone()).is_err(), "{bad}");
        }
        // Serialised only when set: the default leaves `release` as older edges know it.
        let plain = serde_json::to_value(&room("").unwrap().config).unwrap();
        assert!(plain["release"].get("weight").is_none(), "{plain}");
        let weighted = serde_json::to_value(&room("weight = 2").unwrap().config).unwrap();
        assert_eq!(weighted["release"]["weight"], 2.0);
        let back: RoomConfig = serde_json::from_value(weighted).unwrap();
        assert_eq!(back.release.weight, 2.0);
    }

    #[test]
    fn every_problem_has_its_path() {
        let j: RoomConfig = serde_json::from_value(serde_json::json!({
            "event": "", "target": "//evil", "protected": ["nope", "/queue/x"],
            "schedule": {"opens_at": "tomorrow", "closes_at": "2020-01-01T00:00:00Z"},
            "release": {"mode": "fixed", "min": 10, "max": 1},
            "token_seconds": 900, "batches": [{"at": "x", "count": 0}]
        }))
        .unwrap();
        let paths: Vec<String> = j.compile("bad room", "room").unwrap_err().into_iter().map(|i| i.path).collect();
        for want in [
            "room.id", "room.event", "room.target", "room.protected[0]", "room.protected[1]",
            "room.schedule.opens-at", "room.release.max", "room.release.rate", "room.token-seconds",
            "room.batches[0].at", "room.batches[0].count",
        ] {
            assert!(paths.iter().any(|p| p == want), "missing {want} in {paths:?}");
        }
        assert!(serde_json::from_value::<RoomConfig>(serde_json::json!({"event":"e","target":"/","protected":["/a"],"bogus":1})).is_err());
    }
}
