//! Room state behind one trait, with an embedded implementation (this file) and a Redis one
//! ([`super::redis`]) for several edges sharing one queue.
//!
//! The queue is two counters, not a list: `issued` (the last position handed out) and `serving`
//! (everyone at or before it may enter). Per person the state keeps only what a rejoin needs:
//! identity hash → position (bounded by `max-tracked`, pruned behind the front), and per admitted
//! person one session entry (bounded by the total-active cap). A queued visitor costs one map
//! entry; polling costs no lookup at all (the signed ticket carries the position).
//!
//! The invite lane's share of the release (`[rooms.invite] share`) is a second pair of counters:
//! an invitee joining gets, besides its place, a lane place (`lane_issued`, in join order), and is
//! admitted when its place is reached (`serving`) or its lane place is (`lane_serving`). Each
//! release step the leader moves `lane_serving` first by up to the lane's part, then `serving` by
//! the rest; lane places already admitted that `serving` passes cost no release slot. The state
//! keeps the place of each lane place not yet passed by `serving` (8 bytes each).

use std::collections::{BTreeMap, HashMap, VecDeque};
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
    /// Last lane place handed out (0: no invitee joined the lane).
    pub lane_issued: u64,
    /// Lane places up to here may enter (whatever their place in `serving`'s order).
    pub lane_serving: u64,
    /// Lane places whose place `serving` has passed (as of the last release step).
    pub lane_passed: u64,
}

impl Counters {
    /// People waiting: places after `serving`, less the lane places among them admitted already.
    pub fn waiting(&self) -> u64 {
        self.issued.saturating_sub(self.serving).saturating_sub(self.lane_serving.saturating_sub(self.lane_passed))
    }
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
    /// The joiner is an invitee of a room whose lane has a share of the release: a new place
    /// (given with the check given) also gets a lane place. A place with the check owed does not.
    pub lane: bool,
}

impl Proof {
    /// A join of someone who gave the check (or of a room without one).
    pub fn given(now_ms: u64) -> Self {
        Proof { proven: true, now_ms, grace_ms: 0, lane: false }
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
    /// The place's lane place (1-based, the lane's join order; 0: none).
    pub lane: u64,
}

/// What one release step did ([`RoomState::advance_lane`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Advanced {
    /// `serving` after it.
    pub serving: u64,
    /// `lane_serving` after it.
    pub lane_serving: u64,
    /// Places it released, each one a fan who may now be admitted ([`super::claims`]): the lane
    /// places it admitted, the places `serving` passed other than lane places admitted before and
    /// owed places (held back until their proof comes, most of them never: scripts'), and the
    /// owed places passed before whose proof came late (`late`, admitted now).
    pub released: u64,
    /// Of `released`, the places `serving` passed (not the lane's nor late proofs): those in the
    /// step's range of places, whose fans' admissions the sweep counts ([`PickupAsk`]).
    pub in_line: u64,
}

/// What a sweep of the sessions found ([`RoomState::sweep`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Swept {
    /// Sessions seen within the idle window (the room's occupancy).
    pub active: u64,
    /// Sessions ended since the last sweep (expired, revoked, used up).
    pub exits: u64,
    /// The places picked up (their fans admitted: a session opened) in each range of
    /// [`PickupAsk::ranges`], in order. `None`: not counted here (a spread room's follower
    /// sweeps nothing).
    pub picked: Option<Vec<u64>>,
}

/// What the release leader asks a sweep to count of the places picked up ([`super::claims`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PickupAsk {
    /// Ranges of places `(from, to]`: a recent step's.
    pub ranges: Vec<(u64, u64)>,
    /// Pickups of places up to this one are no longer asked for: forgotten. `None`: keep them
    /// (a follower: the leader's steps need them).
    pub forget_to: Option<u64>,
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
    /// Leader only: keeps the release leader's book (`book`: the places its recent steps promised
    /// tickets to, [`super::claims`]) for `keep_ms` where an edge that takes the lease over finds it
    /// ([`RoomState::kept_book`]); an empty `book` drops it. Written only while `node` holds the
    /// lease: false when it does not (it lost the lease since its last renewal). Embedded: there
    /// is no other leader to hand it to.
    async fn keep_book(&self, _node: &str, _book: &str, _keep_ms: u64) -> Result<bool, StateError> {
        Ok(true)
    }
    /// The book the last leader kept ([`RoomState::keep_book`]), while it stands.
    async fn kept_book(&self) -> Result<Option<String>, StateError> {
        Ok(None)
    }
    /// Leader only: freezes the pre-queue (random method) at open.
    async fn freeze(&self) -> Result<(), StateError>;
    /// Leader only: at `now_ms`, moves `serving` forward by up to `n` places whose check is given (or not
    /// asked), never past `issued`; the new value. Owed places it passes do not count (a release
    /// slot is never spent on a place that cannot be admitted): they are marked "turn came at
    /// `now_ms`" and keep the place for the grace ([`RoomState::proof_state`]). Late proofs given
    /// since the last advance are taken off `n` first.
    async fn advance_at(&self, node: &str, n: u64, now_ms: u64) -> Result<u64, StateError> {
        Ok(self.advance_lane(node, n, 0, now_ms).await?.serving)
    }
    /// [`RoomState::advance_at`] with the invite lane's part: up to `lane` of the `n` admissions
    /// go to lane places first (`lane_serving`, in lane order, never past `lane_issued`), the rest
    /// move `serving` as [`RoomState::advance_at`] does, where lane places already admitted cost
    /// nothing. A lane place that `serving` reaches is admitted in order (`lane_serving` follows).
    /// Not the leader: nothing moves (the counters as known).
    async fn advance_lane(&self, node: &str, n: u64, lane: u64, now_ms: u64) -> Result<Advanced, StateError>;
    /// [`RoomState::advance_at`] now.
    async fn advance(&self, node: &str, n: u64) -> Result<u64, StateError> {
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        self.advance_at(node, n, now_ms).await
    }
    /// Passthrough (`queue = "when-needed"`): serves `position` at once when every place ahead of
    /// it is served (`serving` moves from `position - 1` to `position`); any instance may call
    /// it. True when the place is served.
    async fn pass(&self, position: u64) -> Result<bool, StateError>;
    /// Starts (or extends nothing of) `who`'s session for its place `position`, valid until
    /// `until_ms`; false when it was already running. A session opened picks its place up
    /// ([`Swept::picked`]).
    async fn open_session(&self, who: Who, until_ms: u64, position: u64) -> Result<bool, StateError>;
    /// True while `who`'s session runs.
    async fn session_alive(&self, who: Who, now_ms: u64) -> Result<bool, StateError>;
    /// When `who`'s session ends (ms), if this instance knows it without I/O (a state that
    /// remembers the sessions it opened or read). `None`: not known here.
    fn session_until(&self, _who: Who) -> Option<u64> {
        None
    }
    /// Ends `who`'s session (origin's `Wicket-Revoke: 1`); its place is spent.
    async fn end_session(&self, who: Who) -> Result<bool, StateError>;
    /// True when `position` is not `who`'s live place: its session ended (used, revoked,
    /// expired), its owed check lapsed, or the identity holds another place since (a rejoin at
    /// the back). A place has one life: a ticket of a spent place is never admitted again, however
    /// often it is shown. False when the state remembers nothing of `who` (an identity pruned
    /// behind the front, or never remembered past `max-tracked`).
    async fn spent(&self, who: Who, position: u64) -> Result<bool, StateError>;
    /// `who`'s session was seen at `now_ms` (a protected page, a core request).
    async fn touch(&self, who: Who, now_ms: u64) -> Result<(), StateError>;
    /// Drops expired sessions; active sessions (those seen within `idle_ms`) and sessions ended
    /// since the last call, and the places picked up in the ranges `ask` names.
    async fn sweep_picked(&self, now_ms: u64, idle_ms: u64, ask: &PickupAsk) -> Result<Swept, StateError>;
    /// [`RoomState::sweep_picked`], counting no pickups.
    async fn sweep(&self, now_ms: u64, idle_ms: u64) -> Result<Swept, StateError> {
        self.sweep_picked(now_ms, idle_ms, &PickupAsk::default()).await
    }
    /// How many places lie between `serving` and `position` (the people ahead of a fan).
    /// Consecutive numbers but on the spread layout, whose places are ordered by time.
    fn ahead(&self, position: u64, c: &Counters) -> u64 {
        position.saturating_sub(c.serving + 1)
    }
    /// [`RoomState::ahead`] when it is known never to be fewer than there are (issue #38: a fan's
    /// "people ahead" only ever falls); `None` while it is not (a spread room whose places just
    /// before `position` may not be recorded yet).
    fn ahead_known(&self, position: u64, c: &Counters) -> Option<u64> {
        Some(self.ahead(position, c))
    }
    /// Places `serving` has passed, as a count of people (the measured release rate is its
    /// change): `serving` itself but on the spread layout, whose places are not consecutive.
    fn passed(&self, c: &Counters) -> u64 {
        c.serving
    }
    /// True when places are numbered in line: `p - serving - 1` people are ahead of place `p`
    /// (false in a spread room, whose places are numbered by second and edge).
    fn numbered_in_line(&self) -> bool {
        true
    }
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
    /// place → sessions opened for it (picked up), forgotten below the leader's window.
    picked: Mutex<BTreeMap<u64, u64>>,
    frozen: AtomicBool,
    /// When this (process's) queue began, unix seconds.
    created_s: u64,
    /// Places whose bot check is owed; owed joins and advances take it in turn.
    proofs: Mutex<ProofBook>,
    lane_issued: AtomicU64,
    lane_serving: AtomicU64,
    /// [`LaneBook::passed`], for [`RoomState::counters`].
    lane_passed: AtomicU64,
    /// The lane places not yet passed by `serving` (lane joins and advances take it in turn,
    /// after `proofs`).
    lane: Mutex<LaneBook>,
}

/// The embedded state's lane places.
#[derive(Debug, Default)]
struct LaneBook {
    /// Lane places passed by `serving` (their places are at or before it).
    passed: u64,
    /// The places of the lane places after `passed`, in lane order (increasing).
    places: VecDeque<u64>,
    /// who → (place, lane place), for a rejoin.
    who: HashMap<Who, (u64, u64)>,
}

impl LaneBook {
    /// Passes the lane places whose place is at or before `limit`; how many of them were admitted
    /// through the lane already (at or before `lane_serving`).
    fn pass_to(&mut self, limit: u64, lane_serving: u64) -> u64 {
        let mut admitted = 0;
        while self.places.front().is_some_and(|p| *p <= limit) {
            self.places.pop_front();
            self.passed += 1;
            if self.passed <= lane_serving {
                admitted += 1;
            }
        }
        admitted
    }
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
            picked: Mutex::new(BTreeMap::new()),
            frozen: AtomicBool::new(false),
            created_s: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            proofs: Mutex::new(ProofBook::default()),
            lane_issued: AtomicU64::new(0),
            lane_serving: AtomicU64::new(0),
            lane_passed: AtomicU64::new(0),
            lane: Mutex::new(LaneBook::default()),
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
        let mut lane = self.lane.lock();
        lane.who.retain(|who, (p, _)| *p > serving && self.positions.contains_key(who));
        lane.who.shrink_to_fit();
    }

    /// The lane place of `who`'s place `p` (0: none).
    fn lane_of(&self, who: Who, p: u64) -> u64 {
        if self.lane_issued.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.lane.lock().who.get(&who).filter(|(lp, _)| *lp == p).map_or(0, |(_, l)| *l)
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
                return Ok(Some(Joined { position: p, fresh: false, owed: !proof.proven, lane: 0 }));
            }
            match book.passed.get(&who).copied() {
                Some((pp, since)) if pp == p && since + proof.grace_ms >= proof.now_ms => {
                    if proof.proven {
                        book.passed.remove(&who);
                        book.late += 1;
                    }
                    return Ok(Some(Joined { position: p, fresh: false, owed: !proof.proven, lane: 0 }));
                }
                Some((pp, _)) if pp == p => {
                    // Its turn came longer ago than the grace: the place is lost.
                    book.passed.remove(&who);
                    if let Some(mut e) = self.positions.get_mut(&who) {
                        *e |= DONE;
                    }
                }
                _ => return Ok(Some(Joined { position: p, fresh: false, owed: false, lane: self.lane_of(who, p) })),
            }
        }
        if !proof.proven {
            // An owed place: issued and marked under the lock the advance takes, so the release
            // never passes a place before it is marked.
            let mut book = self.proofs.lock();
            let known = self.positions.get(&who).map(|p| *p);
            if let Some(p) = known.filter(|p| p & DONE == 0) {
                // A concurrent join of the same identity got a place first: that one.
                return Ok(Some(Joined { position: p, fresh: false, owed: book.owed.get(&p) == Some(&who), lane: 0 }));
            }
            if book.owed.len() >= self.max_tracked || (known.is_none() && self.positions.len() >= self.max_tracked) {
                return Ok(None);
            }
            let p = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
            self.positions.insert(who, p);
            book.owed.insert(p, who);
            return Ok(Some(Joined { position: p, fresh: true, owed: true, lane: 0 }));
        }
        if proof.lane {
            // A lane place: its place and lane place issued under the lane's lock, so lane order
            // is join order and the advance never sees one without the other.
            let mut lane = self.lane.lock();
            if let Some(p) = self.positions.get(&who).map(|p| *p).filter(|p| p & DONE == 0) {
                // A concurrent join of the same identity got a place first: that one.
                let l = lane.who.get(&who).filter(|(lp, _)| *lp == p).map_or(0, |(_, l)| *l);
                return Ok(Some(Joined { position: p, fresh: false, owed: false, lane: l }));
            }
            let p = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
            let l = self.lane_issued.load(Ordering::SeqCst) + 1;
            lane.places.push_back(p);
            if self.positions.len() < self.max_tracked || self.positions.contains_key(&who) {
                self.positions.insert(who, p);
                lane.who.insert(who, (p, l));
            }
            self.lane_issued.store(l, Ordering::SeqCst);
            return Ok(Some(Joined { position: p, fresh: true, owed: false, lane: l }));
        }
        let p = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        if self.positions.len() < self.max_tracked || self.positions.contains_key(&who) {
            // A concurrent join of the same identity: the first insert wins, both see one place.
            let mut e = self.positions.entry(who).or_insert(p);
            if *e & DONE != 0 {
                *e = p;
            }
            let lane = if *e == p { 0 } else { self.lane_of(who, *e) };
            return Ok(Some(Joined { position: *e, fresh: *e == p, owed: false, lane }));
        }
        Ok(Some(Joined { position: p, fresh: true, owed: false, lane: 0 }))
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
            lane_issued: self.lane_issued.load(Ordering::Acquire),
            lane_serving: self.lane_serving.load(Ordering::Acquire),
            lane_passed: self.lane_passed.load(Ordering::Acquire),
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

    async fn advance_lane(&self, _node: &str, n: u64, lane_part: u64, now_ms: u64) -> Result<Advanced, StateError> {
        let mut book = self.proofs.lock();
        let late = book.late.min(n);
        book.late -= late;
        let n = n - late;
        let mut lane = self.lane.lock();
        let issued = self.issued.load(Ordering::SeqCst);
        let serving = self.serving.load(Ordering::SeqCst);
        let lane_issued = self.lane_issued.load(Ordering::SeqCst);
        // Lane places passed since the last step (a passthrough) are admitted.
        let mut lane_serving = self.lane_serving.load(Ordering::SeqCst);
        lane.pass_to(serving, lane_serving);
        lane_serving = lane_serving.max(lane.passed);
        // The lane's part first, in lane order.
        let k = lane_part.min(n).min(lane_issued.saturating_sub(lane_serving));
        lane_serving += k;
        let n = n - k;
        let end = issued.max(serving);
        let mut target = serving.saturating_add(n).min(end);
        let mut from = serving;
        let mut lane_skipped = 0;
        let mut owed_skipped = 0;
        // Owed places and lane places admitted already do not count: the release reaches that
        // many more places.
        while target > from {
            let hit: Vec<(u64, Who)> = book.owed.range(from + 1..=target).map(|(p, w)| (*p, *w)).collect();
            for (p, who) in &hit {
                book.owed.remove(p);
                book.passed.insert(*who, (*p, now_ms));
            }
            owed_skipped += hit.len() as u64;
            let admitted = lane.pass_to(target, lane_serving);
            lane_skipped += admitted;
            let extra = hit.len() as u64 + admitted;
            from = target;
            if extra == 0 {
                break;
            }
            target = target.saturating_add(extra).min(end);
        }
        let lane_serving = lane_serving.max(lane.passed);
        self.serving.store(target, Ordering::SeqCst);
        self.lane_serving.store(lane_serving, Ordering::SeqCst);
        self.lane_passed.store(lane.passed, Ordering::SeqCst);
        let passed = (target - serving).saturating_sub(lane_skipped + owed_skipped);
        Ok(Advanced { serving: target, lane_serving, released: late + k + passed, in_line: passed })
    }

    async fn open_session(&self, who: Who, until_ms: u64, position: u64) -> Result<bool, StateError> {
        let mut fresh = false;
        self.sessions.entry(who).or_insert_with(|| {
            fresh = true;
            until_ms
        });
        if fresh {
            *self.picked.lock().entry(position).or_default() += 1;
        }
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
        Ok(self.positions.get(&who).is_some_and(|p| *p != position))
    }

    async fn sweep_picked(&self, now_ms: u64, idle_ms: u64, ask: &PickupAsk) -> Result<Swept, StateError> {
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
        let mut picked = self.picked.lock();
        if let Some(to) = ask.forget_to {
            *picked = picked.split_off(&to.saturating_add(1));
        }
        let counts = ask.ranges.iter().map(|&(from, to)| if to > from { picked.range(from + 1..=to).map(|(_, n)| n).sum() } else { 0 }).collect();
        Ok(Swept { active, exits: ended, picked: Some(counts) })
    }

    fn tracked(&self) -> usize {
        self.positions.len()
    }

    fn epoch_s(&self) -> u64 {
        self.created_s
    }
}
