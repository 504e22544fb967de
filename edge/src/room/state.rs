//! Room state behind one trait, with an embedded implementation (this file) and a Redis one
//! ([`super::redis`]) for several edges sharing one queue.
//!
//! The queue is two counters, not a list: `issued` (the last position handed out) and `serving`
//! (everyone at or before it may enter). Per person the state keeps only what a rejoin needs:
//! identity hash → position (bounded by `max-tracked`, pruned behind the front), and per admitted
//! person one session entry (bounded by the total-active cap). A queued visitor costs one map
//! entry; polling costs no lookup at all (the signed ticket carries the position).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use dashmap::DashMap;

/// An identity (user id, else device id) hashed under the edge secret.
pub type Who = u64;

/// High bit of a remembered position: that person's session has ended; a rejoin queues anew.
pub const DONE: u64 = 1 << 63;

/// What a status poll needs, read without I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Last position handed out (0: nobody joined yet).
    pub issued: u64,
    /// Positions up to here (in admission order) may enter.
    pub serving: u64,
    /// Size of the pre-queue once frozen at open (random method).
    pub prequeue: Option<u64>,
    /// Key of the pre-queue shuffle.
    pub shuffle_key: u64,
}

/// A room state backend failed (Redis down...).
#[derive(Debug, Clone, thiserror::Error)]
#[error("room state unavailable: {0}")]
pub struct StateError(pub String);

/// The shared state of one room.
#[async_trait]
pub trait RoomState: Send + Sync {
    /// The position `who` holds, or a new one at the back (`true` = new). When `open`, the
    /// pre-queue is frozen first (so everyone who joins after the open is FIFO after it).
    async fn join(&self, who: Who, open: bool) -> Result<(u64, bool), StateError>;
    /// The last counters known, without I/O (the hot path of status polls).
    fn counters(&self) -> Counters;
    /// Re-reads shared counters into [`RoomState::counters`] (no-op when embedded).
    async fn refresh(&self) -> Result<Counters, StateError>;
    /// Takes or renews the lease of the instance allowed to advance `serving`; true when `node`
    /// holds it. Embedded: always true.
    async fn lead(&self, node: &str, lease_ms: u64) -> Result<bool, StateError>;
    /// Gives the lease up (graceful stop) so another edge takes over at once.
    async fn resign(&self, node: &str) -> Result<(), StateError>;
    /// Leader only: freezes the pre-queue (random method) at open.
    async fn freeze(&self) -> Result<(), StateError>;
    /// Leader only: moves `serving` forward by up to `n`, never past `issued`; the new value.
    async fn advance(&self, node: &str, n: u64) -> Result<u64, StateError>;
    /// Passthrough (`queue = "when-needed"`): serves `position` at once when every place ahead of
    /// it is served (`serving` moves from `position - 1` to `position`); any instance may call
    /// it. True when the place is served.
    async fn pass(&self, position: u64) -> Result<bool, StateError>;
    /// Starts (or extends nothing of) `who`'s session, valid until `until_ms`; false when it was
    /// already running.
    async fn open_session(&self, who: Who, until_ms: u64) -> Result<bool, StateError>;
    /// True while `who`'s session runs.
    async fn session_alive(&self, who: Who, now_ms: u64) -> Result<bool, StateError>;
    /// Ends `who`'s session (origin's `Wicket-Revoke: 1`); its place is spent.
    async fn end_session(&self, who: Who) -> Result<bool, StateError>;
    /// True when `who`'s place was spent by an ended session.
    async fn spent(&self, who: Who, position: u64) -> Result<bool, StateError>;
    /// `who`'s session was seen at `now_ms` (a protected page, a core request).
    async fn touch(&self, who: Who, now_ms: u64) -> Result<(), StateError>;
    /// Drops expired sessions; (active sessions — those seen within `idle_ms` — and sessions ended
    /// since the last call).
    async fn sweep(&self, now_ms: u64, idle_ms: u64) -> Result<(u64, u64), StateError>;
    /// Remembered identities (for stats).
    fn tracked(&self) -> usize;
    /// Unix seconds before which this state issued no place: tickets older than it are for a
    /// queue this state does not hold (an embedded room after a restart) and are refused. 0 for
    /// state that outlives the process (Redis).
    fn epoch_s(&self) -> u64 {
        0
    }
}

/// One process's room state: atomics and two bounded maps.
pub struct EmbeddedState {
    issued: AtomicU64,
    serving: AtomicU64,
    /// u64::MAX until frozen.
    prequeue: AtomicU64,
    shuffle_key: u64,
    /// who → position (| DONE once the session ended).
    positions: DashMap<Who, u64>,
    max_tracked: usize,
    /// who → session end, ms.
    sessions: DashMap<Who, u64>,
    /// who → when the session was last seen, ms.
    seen: DashMap<Who, u64>,
    ended: AtomicU64,
    frozen: AtomicBool,
    /// When this (process's) queue began, unix seconds.
    created_s: u64,
}

impl EmbeddedState {
    /// An empty room remembering at most `max_tracked` identities.
    pub fn new(max_tracked: usize) -> Self {
        EmbeddedState {
            issued: AtomicU64::new(0),
            serving: AtomicU64::new(0),
            prequeue: AtomicU64::new(u64::MAX),
            shuffle_key: rand::random(),
            positions: DashMap::new(),
            max_tracked,
            sessions: DashMap::new(),
            seen: DashMap::new(),
            ended: AtomicU64::new(0),
            frozen: AtomicBool::new(false),
            created_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        }
    }

    fn freeze_now(&self) {
        if !self.frozen.load(Ordering::Acquire) {
            // Joins racing the freeze land on either side of it; both are consistent (a position
            // ≤ the frozen size is shuffled, one above it is not).
            let n = self.issued.load(Ordering::SeqCst);
            if self.prequeue.compare_exchange(u64::MAX, n, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                self.frozen.store(true, Ordering::Release);
            }
        }
    }

    /// Forgets identities behind the front once the map is over its bound: they were released
    /// already, and their tickets still carry their positions.
    fn prune(&self) {
        if self.positions.len() <= self.max_tracked {
            return;
        }
        let serving = self.serving.load(Ordering::Relaxed);
        self.positions.retain(|_, p| (*p & !DONE) > serving);
        self.positions.shrink_to_fit();
    }
}

#[async_trait]
impl RoomState for EmbeddedState {
    async fn join(&self, who: Who, open: bool) -> Result<(u64, bool), StateError> {
        if open {
            self.freeze_now();
        }
        if let Some(p) = self.positions.get(&who).map(|p| *p)
            && p & DONE == 0
        {
            return Ok((p, false));
        }
        let p = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        if self.positions.len() < self.max_tracked || self.positions.contains_key(&who) {
            // A concurrent join of the same identity: the first insert wins, both see one place.
            let mut e = self.positions.entry(who).or_insert(p);
            if *e & DONE != 0 {
                *e = p;
            }
            return Ok((*e, *e == p));
        }
        Ok((p, true))
    }

    fn counters(&self) -> Counters {
        let pq = self.prequeue.load(Ordering::Acquire);
        Counters {
            issued: self.issued.load(Ordering::Acquire),
            serving: self.serving.load(Ordering::Acquire),
            prequeue: (pq != u64::MAX).then_some(pq),
            shuffle_key: self.shuffle_key,
        }
    }

    async fn refresh(&self) -> Result<Counters, StateError> {
        self.prune();
        Ok(self.counters())
    }

    async fn lead(&self, _node: &str, _lease_ms: u64) -> Result<bool, StateError> {
        Ok(true)
    }

    async fn resign(&self, _node: &str) -> Result<(), StateError> {
        Ok(())
    }

    async fn freeze(&self) -> Result<(), StateError> {
        self.freeze_now();
        Ok(())
    }

    async fn pass(&self, position: u64) -> Result<bool, StateError> {
        if position == 0 {
            return Ok(false);
        }
        let r = self.serving.compare_exchange(position - 1, position, Ordering::SeqCst, Ordering::SeqCst);
        Ok(r.is_ok() || self.serving.load(Ordering::SeqCst) >= position)
    }

    async fn advance(&self, _node: &str, n: u64) -> Result<u64, StateError> {
        let issued = self.issued.load(Ordering::SeqCst);
        let r = self.serving.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| Some(s.saturating_add(n).min(issued.max(s))));
        let prev = r.unwrap_or_else(|v| v);
        Ok(prev.saturating_add(n).min(issued.max(prev)))
    }

    async fn open_session(&self, who: Who, until_ms: u64) -> Result<bool, StateError> {
        let mut fresh = false;
        self.sessions.entry(who).or_insert_with(|| {
            fresh = true;
            until_ms
        });
        Ok(fresh)
    }

    async fn session_alive(&self, who: Who, now_ms: u64) -> Result<bool, StateError> {
        Ok(self.sessions.get(&who).is_some_and(|u| *u > now_ms))
    }

    async fn touch(&self, who: Who, now_ms: u64) -> Result<(), StateError> {
        if self.sessions.contains_key(&who) {
            self.seen.insert(who, now_ms);
        }
        Ok(())
    }

    async fn end_session(&self, who: Who) -> Result<bool, StateError> {
        self.seen.remove(&who);
        let ended = self.sessions.remove(&who).is_some();
        if ended {
            self.ended.fetch_add(1, Ordering::Relaxed);
            if let Some(mut p) = self.positions.get_mut(&who) {
                *p |= DONE;
            }
        }
        Ok(ended)
    }

    async fn spent(&self, who: Who, position: u64) -> Result<bool, StateError> {
        Ok(self.positions.get(&who).is_some_and(|p| *p == position | DONE))
    }

    async fn sweep(&self, now_ms: u64, idle_ms: u64) -> Result<(u64, u64), StateError> {
        let mut expired = Vec::new();
        self.sessions.retain(|who, until| {
            let keep = *until > now_ms;
            if !keep {
                expired.push(*who);
            }
            keep
        });
        for who in &expired {
            self.seen.remove(who);
            if let Some(mut p) = self.positions.get_mut(who) {
                *p |= DONE;
            }
        }
        let since = now_ms.saturating_sub(idle_ms);
        let active = self.seen.iter().filter(|e| *e.value() >= since).count() as u64;
        let ended = self.ended.swap(0, Ordering::Relaxed) + expired.len() as u64;
        Ok((active, ended))
    }

    fn tracked(&self) -> usize {
        self.positions.len()
    }

    fn epoch_s(&self) -> u64 {
        self.created_s
    }
}
