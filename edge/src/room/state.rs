//! Room state behind one trait, with an embedded implementation (this file) and a Redis one
//! ([`super::redis`]) for several edges sharing one queue.
//!
//! The queue is two counters, not a list: `issued` (the last position handed out) and `serving`
//! (everyone at or before it may enter). Per person the state keeps only what a rejoin needs:
//! identity hash → position (bounded by `max-tracked`, pruned behind the front), and per admitted
//! person one session entry (bounded by the total-active cap). A queued visitor costs one map
//! entry; polling costs no lookup at all (the signed ticket carries the position).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use dashmap::DashMap;
use parking_lot::Mutex;

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

/// What a join asks about the room's bot check (the proof gates admission, not the place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof {
    /// The joiner has given the room's check (a proof, a CAPTCHA, a valid pass, or the room has
    /// none): a new place is proven, and a place held with the check still owed becomes proven.
    pub proven: bool,
    /// Now, Unix ms.
    pub now_ms: u64,
    /// How long a place whose turn came without the check is kept, ms.
    pub grace_ms: u64,
}

impl Proof {
    /// A join of someone who gave the check (or of a room without one).
    pub fn given(now_ms: u64) -> Self {
        Proof { proven: true, now_ms, grace_ms: 0 }
    }
}

/// What a join found or made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    /// The place (1-based, join order).
    pub position: u64,
    /// A new place (not one the identity held).
    pub fresh: bool,
    /// The room's check is still owed for this place: it is not admitted until it is given.
    pub owed: bool,
}

/// Where a place that owed the room's check stands ([`RoomState::proof_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProofState {
    /// Given (or never owed): admit at its turn.
    Proven,
    /// Owed, its turn has not come yet.
    Owed,
    /// Owed, its turn came this many ms ago (within the grace): still admitted once given.
    Passed { ago_ms: u64 },
    /// Owed past the grace (or not known to the state): the place is lost, a join queues anew.
    Lost,
}

/// A room state backend failed (Redis down...).
#[derive(Debug, Clone, thiserror::Error)]
#[error("room state unavailable: {0}")]
pub struct StateError(pub String);

/// The shared state of one room.
#[async_trait]
pub trait RoomState: Send + Sync {
    /// The position `who` holds, or a new one at the back. When `open`, the pre-queue is frozen
    /// first (so everyone who joined after the open is FIFO after it).
    ///
    /// The room's bot check gates admission, not the place: a joiner that has not given it
    /// (`!proof.proven`) gets a place at once, marked owed; a later join with the check given marks
    /// the same place proven (if its turn came, within `proof.grace_ms` of it: then the next
    /// [`RoomState::advance`] lets in one fewer, so the late one does not add to the release).
    /// An owed place whose turn came longer ago than the grace is lost: the join gives a new one.
    /// `None`: a new owed place was refused (too many owed places remembered): the joiner must
    /// give the check first.
    async fn join(&self, who: Who, open: bool, proof: Proof) -> Result<Option<Joined>, StateError>;
    /// Where `who`'s owed place `position` stands at `now_ms` (a place past the grace is lost:
    /// the identity's place is spent, so its next join queues anew).
    async fn proof_state(&self, who: Who, position: u64, now_ms: u64, grace_ms: u64) -> Result<ProofState, StateError>;
    /// Spends the owed places whose turn came more than `grace_ms` before `now_ms` (the release
    /// tick); how many.
    async fn lapse(&self, now_ms: u64, grace_ms: u64) -> Result<u64, StateError>;
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
    /// Leader only: at `now_ms`, moves `serving` forward by up to `n` places whose check is given (or not
    /// asked), never past `issued`; the new value. Owed places it passes do not count (a release
    /// slot is never spent on a place that cannot be admitted): they are marked "turn came at
    /// `now_ms`" and keep the place for the grace ([`RoomState::proof_state`]). Late proofs given
    /// since the last advance are taken off `n` first.
    async fn advance_at(&self, node: &str, n: u64, now_ms: u64) -> Result<u64, StateError>;
    /// [`RoomState::advance_at`] now.
    async fn advance(&self, node: &str, n: u64) -> Result<u64, StateError> {
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        self.advance_at(node, n, now_ms).await
    }
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
    /// Places whose bot check is owed; owed joins and advances take it in turn.
    proofs: Mutex<ProofBook>,
}

/// The embedded state's owed places.
#[derive(Debug, Default)]
struct ProofBook {
    /// Owed places not reached yet: position → who.
    owed: BTreeMap<u64, Who>,
    /// Owed places whose turn came: who → (position, when its turn came, ms).
    passed: HashMap<Who, (u64, u64)>,
    /// Late proofs not yet taken off a release.
    late: u64,
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
            proofs: Mutex::new(ProofBook::default()),
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
        // Places whose turn came with the check owed stay: a proof within the grace finds them.
        let book = self.proofs.lock();
        self.positions.retain(|who, p| (*p & !DONE) > serving || book.passed.contains_key(who));
        self.positions.shrink_to_fit();
    }
}

#[async_trait]
impl RoomState for EmbeddedState {
    async fn join(&self, who: Who, open: bool, proof: Proof) -> Result<Option<Joined>, StateError> {
        if open {
            self.freeze_now();
        }
        if let Some(p) = self.positions.get(&who).map(|p| *p)
            && p & DONE == 0
        {
            let mut book = self.proofs.lock();
            if book.owed.get(&p) == Some(&who) {
                if proof.proven {
                    book.owed.remove(&p);
                }
                return Ok(Some(Joined { position: p, fresh: false, owed: !proof.proven }));
            }
            match book.passed.get(&who).copied() {
                Some((pp, since)) if pp == p && since + proof.grace_ms >= proof.now_ms => {
                    if proof.proven {
                        book.passed.remove(&who);
                        book.late += 1;
                    }
                    return Ok(Some(Joined { position: p, fresh: false, owed: !proof.proven }));
                }
                Some((pp, _)) if pp == p => {
                    // Its turn came longer ago than the grace: the place is lost.
                    book.passed.remove(&who);
                    if let Some(mut e) = self.positions.get_mut(&who) {
                        *e |= DONE;
                    }
                }
                _ => return Ok(Some(Joined { position: p, fresh: false, owed: false })),
            }
        }
        if !proof.proven {
            // An owed place: issued and marked under the lock the advance takes, so the release
            // never passes a place before it is marked.
            let mut book = self.proofs.lock();
            let known = self.positions.get(&who).map(|p| *p);
            if let Some(p) = known.filter(|p| p & DONE == 0) {
                // A concurrent join of the same identity got a place first: that one.
                return Ok(Some(Joined { position: p, fresh: false, owed: book.owed.get(&p) == Some(&who) }));
            }
            if book.owed.len() >= self.max_tracked || (known.is_none() && self.positions.len() >= self.max_tracked) {
                return Ok(None);
            }
            let p = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
            self.positions.insert(who, p);
            book.owed.insert(p, who);
            return Ok(Some(Joined { position: p, fresh: true, owed: true }));
        }
        let p = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        if self.positions.len() < self.max_tracked || self.positions.contains_key(&who) {
            // A concurrent join of the same identity: the first insert wins, both see one place.
            let mut e = self.positions.entry(who).or_insert(p);
            if *e & DONE != 0 {
                *e = p;
            }
            return Ok(Some(Joined { position: *e, fresh: *e == p, owed: false }));
        }
        Ok(Some(Joined { position: p, fresh: true, owed: false }))
    }

    async fn proof_state(&self, who: Who, position: u64, now_ms: u64, grace_ms: u64) -> Result<ProofState, StateError> {
        let mut book = self.proofs.lock();
        if book.owed.get(&position) == Some(&who) {
            return Ok(ProofState::Owed);
        }
        if let Some((p, since)) = book.passed.get(&who).copied()
            && p == position
        {
            if since + grace_ms >= now_ms {
                return Ok(ProofState::Passed { ago_ms: now_ms.saturating_sub(since) });
            }
            book.passed.remove(&who);
            if let Some(mut e) = self.positions.get_mut(&who)
                && *e == position
            {
                *e |= DONE;
            }
            return Ok(ProofState::Lost);
        }
        Ok(if self.positions.get(&who).is_some_and(|p| *p == position) { ProofState::Proven } else { ProofState::Lost })
    }

    async fn lapse(&self, now_ms: u64, grace_ms: u64) -> Result<u64, StateError> {
        let mut book = self.proofs.lock();
        let mut lost = 0;
        book.passed.retain(|who, (p, since)| {
            if *since + grace_ms >= now_ms {
                return true;
            }
            if let Some(mut e) = self.positions.get_mut(who)
                && *e == *p
            {
                *e |= DONE;
            }
            lost += 1;
            false
        });
        Ok(lost)
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

    async fn advance_at(&self, _node: &str, n: u64, now_ms: u64) -> Result<u64, StateError> {
        let mut book = self.proofs.lock();
        let late = book.late.min(n);
        book.late -= late;
        let n = n - late;
        let issued = self.issued.load(Ordering::SeqCst);
        let serving = self.serving.load(Ordering::SeqCst);
        let end = issued.max(serving);
        let mut target = serving.saturating_add(n).min(end);
        let mut from = serving;
        // Owed places passed do not count: the release reaches that many more places.
        while target > from && !book.owed.is_empty() {
            let hit: Vec<(u64, Who)> = book.owed.range(from + 1..=target).map(|(p, w)| (*p, *w)).collect();
            if hit.is_empty() {
                break;
            }
            from = target;
            for (p, who) in &hit {
                book.owed.remove(p);
                book.passed.insert(*who, (*p, now_ms));
            }
            target = target.saturating_add(hit.len() as u64).min(end);
        }
        self.serving.store(target, Ordering::SeqCst);
        Ok(target)
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
