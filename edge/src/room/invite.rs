//! The invite lane of a room (presale, invite-only rooms): who may take a place while the room is
//! invite-only (`[rooms.invite]`: `only-until = <RFC 3339>` or `only = true`).
//!
//! An invitee is an identity — the one a room keys places by ([`super::Rooms::who`]: the site's user id
//! when it sends one, else the signed device) — that is on the room's allowlist of user ids or
//! redeemed one of its invite codes. While the room is invite-only, only invitees take a place
//! (`GET /queue/<room>`, `POST /queue/<room>/join`; a passthrough room queues everyone then);
//! anyone else gets the invite page in their language (403) with a form for a code, or
//! `{"error": "invite_only"}`. Places taken before stay. After `only-until` everyone joins, behind
//! the invitees who queued before: the presale lane goes first because it queued first.
//! With `share` (in (0, 1]) the lane also has that share of each release step while invitees and
//! others both wait: an invitee's new place gets a lane place ([`super::state`]), admitted ahead of
//! its FIFO turn when the lane's part of a step reaches it ([`super::release`]).
//!
//! Codes are stored as HMAC-SHA256 (the edge secret, the room id and the code: a leaked store
//! leaks no codes, and a code of room A is unknown on room B), one use each: the first identity
//! that redeems a code keeps it ([`Redeemed`]). Matching ignores case and `-`. An uploaded code
//! carries at least 40 bits ([`CODE_MIN_BITS`], [`code_bits`]); generated ones carry 80. Redeem
//! attempts are limited per client address (IPv6: its /64) and per identity on each edge, and
//! each room has a budget of wrong codes a minute on each edge (`[rooms.invite]
//! wrong-codes-per-minute`, default [`WRONG_CODES_PER_MINUTE`]): many addresses guessing together
//! spend it, and once it is spent no code of the room is judged, right or wrong, until the minute
//! ends — a budget that still judged codes would let the guessing go on ([`Attempts`]: 429 +
//! `Retry-After` for all).
//!
//! | method, path | does |
//! |---|---|
//! | `POST /queue/<room>/invite` | redeems `{"code": "..."}` (JSON answers) or the form field `code` (a 303 to the queue, or the invite page with the problem) |
//! | `GET /queue/<room>?invite=<code>` | redeems, then the queue as usual (a link in an invitation mail) |
//! | `GET`/`DELETE /admin/rooms/<room>/invites` | counts / every code and allowlisted user removed |
//! | `POST /admin/rooms/<room>/invites/codes` | `{"codes": [...]}` uploads codes, `{"generate": n}` makes `n` and returns them once |
//! | `POST /admin/rooms/<room>/invites/users` | `{"users": [...]}`: user ids on the allowlist |
//! | `POST /admin/rooms/<room>/invites/revoke` | `{"codes"?: [...], "users"?: [...]}`: taken back (a redeemed code uninvites its redeemer) |
//!
//! Here: the stores, codes and the attempt limit; [`super::Rooms::invites`] and
//! [`super::Rooms::may_join`] in the room module; the fan's side (the endpoint, the invite page)
//! is [`super::invite_http`], the operator's [`super::invite_admin`].
//!
//! State: embedded (this edge, lost on restart) or Redis (`wk:{room:<id>}:inv:{codes,bound,users}`,
//! lua/room_invite_*.lua), shared by every edge of the store. Rooms without `[rooms.invite]`
//! never read it.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::LazyLock;

use async_trait::async_trait;
use parking_lot::Mutex;
use redis::{Script, Value};

use super::redis::RedisRooms;
use super::state::{StateError, Who};
use crate::identity::Signer;

/// Most codes or user ids in one admin request (and codes generated at once).
pub const MAX_BATCH: usize = 10_000;
/// A code's length as given (letters, digits and `-`).
pub const CODE_MAX: usize = 64;
/// Fewest letters and digits of a code (without its `-`).
pub const CODE_MIN: usize = 6;
/// Longest allowlisted user id.
pub const USER_MAX: usize = 256;
/// Redeem attempts per client address per minute, on each edge.
pub const ATTEMPTS_PER_IP: u32 = 20;
/// Redeem attempts per identity (user, else device) per minute, on each edge.
pub const ATTEMPTS_PER_IDENTITY: u32 = 5;
/// Wrong codes (no such code in the room) a room takes per minute on each edge before it stops
/// judging codes for the rest of the minute (`[rooms.invite] wrong-codes-per-minute`).
pub const WRONG_CODES_PER_MINUTE: u32 = 300;
/// Fewest bits an uploaded code carries ([`code_bits`]): 300 guesses a minute on each of ten
/// edges take about 700 years to search 2^40 codes.
pub const CODE_MIN_BITS: f64 = 40.0;

/// A code as stored: upper case, without `-`; `None` when it is not 6-64 letters, digits and `-`.
pub fn normalize(code: &str) -> Option<String> {
    let t = code.trim();
    if t.is_empty() || t.len() > CODE_MAX || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return None;
    }
    let n: String = t.chars().filter(|c| *c != '-').map(|c| c.to_ascii_uppercase()).collect();
    (n.len() >= CODE_MIN).then_some(n)
}

/// The bits a (normalized) code carries when its characters are drawn at random: its length
/// times log2 of its alphabet, judged from the characters it uses (digits only: 10, letters
/// only: 26, both: 36) — a code of digits alone is no stronger for the letters it could have had.
pub fn code_bits(normalized: &str) -> f64 {
    let digits = normalized.bytes().any(|b| b.is_ascii_digit());
    let letters = normalized.bytes().any(|b| b.is_ascii_alphabetic());
    let alphabet: f64 = match (digits, letters) {
        (true, true) => 36.0,
        (false, true) => 26.0,
        _ => 10.0,
    };
    normalized.len() as f64 * alphabet.log2()
}

/// The stored form of a (normalized) code of `room`: 128 bits of HMAC-SHA256 under the edge
/// secret, hex.
pub fn code_hash(signer: &Signer, room: &str, normalized: &str) -> String {
    hex::encode(&signer.mac(b"room-invite", format!("{room}|{normalized}").as_bytes())[..16])
}

/// A new code: 16 characters of Crockford's base32 (80 random bits) in groups of four.
pub fn generate() -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let bytes: [u8; 16] = rand::random();
    let mut out = String::with_capacity(19);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 && i % 4 == 0 {
            out.push('-');
        }
        out.push(ALPHABET[(*b & 31) as usize] as char);
    }
    out
}

/// What redeeming a code did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redeemed {
    /// No such code in this room (never uploaded, or revoked).
    Unknown,
    /// Bound to this identity now.
    Now,
    /// This identity redeemed it before: nothing changed.
    Again,
    /// Another identity redeemed it.
    Taken,
    /// The identity is an invitee already (allowlisted, or through another code): the code
    /// stays unused.
    AlreadyInvited,
}

/// The lane in figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Codes uploaded or generated, not revoked.
    pub codes: u64,
    /// Of them, redeemed.
    pub redeemed: u64,
    /// Allowlisted identities.
    pub users: u64,
}

/// Where a room's invites live (embedded or Redis, like the rest of its state).
#[async_trait]
pub trait InviteStore: Send + Sync {
    /// New unused codes (hashes); returns how many were new.
    async fn add_codes(&self, hashes: &[String]) -> Result<u64, StateError>;
    /// Codes taken back (a redeemed one uninvites its redeemer); returns how many existed.
    async fn revoke_codes(&self, hashes: &[String]) -> Result<u64, StateError>;
    /// Identities on the allowlist; returns how many were new.
    async fn add_users(&self, whos: &[Who]) -> Result<u64, StateError>;
    /// Identities off the allowlist; returns how many were on it.
    async fn remove_users(&self, whos: &[Who]) -> Result<u64, StateError>;
    /// `who` redeems a code, atomically (once, bound to the first identity).
    async fn redeem(&self, hash: &str, who: Who) -> Result<Redeemed, StateError>;
    /// Whether `who` is an invitee.
    async fn is_member(&self, who: Who) -> Result<bool, StateError>;
    /// The figures.
    async fn counts(&self) -> Result<Counts, StateError>;
    /// Every code and allowlisted identity removed.
    async fn clear(&self) -> Result<(), StateError>;
}

/// In this process.
#[derive(Default)]
pub struct EmbeddedInvites {
    inner: Mutex<Lane>,
}

#[derive(Default)]
struct Lane {
    /// Code hash → its redeemer.
    codes: HashMap<String, Option<Who>>,
    /// Redeemer → the code hash.
    bound: HashMap<Who, String>,
    users: HashSet<Who>,
}

#[async_trait]
impl InviteStore for EmbeddedInvites {
    async fn add_codes(&self, hashes: &[String]) -> Result<u64, StateError> {
        let mut l = self.inner.lock();
        let mut added = 0;
        for h in hashes {
            if !l.codes.contains_key(h) {
                l.codes.insert(h.clone(), None);
                added += 1;
            }
        }
        Ok(added)
    }

    async fn revoke_codes(&self, hashes: &[String]) -> Result<u64, StateError> {
        let mut l = self.inner.lock();
        let mut removed = 0;
        for h in hashes {
            if let Some(owner) = l.codes.remove(h) {
                removed += 1;
                if let Some(w) = owner {
                    l.bound.remove(&w);
                }
            }
        }
        Ok(removed)
    }

    async fn add_users(&self, whos: &[Who]) -> Result<u64, StateError> {
        let mut l = self.inner.lock();
        Ok(whos.iter().filter(|w| l.users.insert(**w)).count() as u64)
    }

    async fn remove_users(&self, whos: &[Who]) -> Result<u64, StateError> {
        let mut l = self.inner.lock();
        Ok(whos.iter().filter(|w| l.users.remove(*w)).count() as u64)
    }

    async fn redeem(&self, hash: &str, who: Who) -> Result<Redeemed, StateError> {
        let mut l = self.inner.lock();
        let invited = l.bound.contains_key(&who) || l.users.contains(&who);
        match l.codes.get_mut(hash) {
            None => Ok(Redeemed::Unknown),
            Some(Some(w)) if *w == who => Ok(Redeemed::Again),
            Some(Some(_)) => Ok(Redeemed::Taken),
            Some(None) if invited => Ok(Redeemed::AlreadyInvited),
            Some(owner @ None) => {
                *owner = Some(who);
                l.bound.insert(who, hash.to_owned());
                Ok(Redeemed::Now)
            }
        }
    }

    async fn is_member(&self, who: Who) -> Result<bool, StateError> {
        let l = self.inner.lock();
        Ok(l.bound.contains_key(&who) || l.users.contains(&who))
    }

    async fn counts(&self) -> Result<Counts, StateError> {
        let l = self.inner.lock();
        Ok(Counts { codes: l.codes.len() as u64, redeemed: l.bound.len() as u64, users: l.users.len() as u64 })
    }

    async fn clear(&self) -> Result<(), StateError> {
        *self.inner.lock() = Lane::default();
        Ok(())
    }
}

static REDEEM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_invite_redeem.lua")));
static ADD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_invite_add.lua")));
static REVOKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_invite_revoke.lua")));
static MEMBER: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_invite_member.lua")));
static COUNTS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/room_invite_counts.lua")));

/// In Redis: one room's three keys (one Cluster slot with the rest of the room).
pub struct RedisInvites {
    redis: RedisRooms,
    codes: String,
    bound: String,
    users: String,
}

impl RedisInvites {
    /// The invites of room `id` in the shared store.
    pub fn new(redis: RedisRooms, id: &str) -> Self {
        let k = |s: &str| format!("wk:{{room:{id}}}:inv:{s}");
        RedisInvites { redis, codes: k("codes"), bound: k("bound"), users: k("users") }
    }
}

fn who_hex(w: Who) -> String {
    format!("{w:016x}")
}

fn int(v: &Value) -> Result<u64, StateError> {
    match v {
        Value::Int(i) => Ok((*i).max(0) as u64),
        _ => Err(StateError(format!("unexpected Redis answer {v:?}"))),
    }
}

#[async_trait]
impl InviteStore for RedisInvites {
    async fn add_codes(&self, hashes: &[String]) -> Result<u64, StateError> {
        if hashes.is_empty() {
            return Ok(0);
        }
        int(&self.redis.run(&ADD, &[&self.codes], hashes).await?)
    }

    async fn revoke_codes(&self, hashes: &[String]) -> Result<u64, StateError> {
        if hashes.is_empty() {
            return Ok(0);
        }
        int(&self.redis.run(&REVOKE, &[&self.codes, &self.bound], hashes).await?)
    }

    async fn add_users(&self, whos: &[Who]) -> Result<u64, StateError> {
        if whos.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("SADD");
        cmd.arg(&self.users);
        for w in whos {
            cmd.arg(who_hex(*w));
        }
        int(&self.redis.cmd(cmd).await?)
    }

    async fn remove_users(&self, whos: &[Who]) -> Result<u64, StateError> {
        if whos.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("SREM");
        cmd.arg(&self.users);
        for w in whos {
            cmd.arg(who_hex(*w));
        }
        int(&self.redis.cmd(cmd).await?)
    }

    async fn redeem(&self, hash: &str, who: Who) -> Result<Redeemed, StateError> {
        let v = self.redis.run(&REDEEM, &[&self.codes, &self.bound, &self.users], &[hash.to_owned(), who_hex(who)]).await?;
        match int(&v)? {
            0 => Ok(Redeemed::Unknown),
            1 => Ok(Redeemed::Now),
            2 => Ok(Redeemed::Again),
            3 => Ok(Redeemed::Taken),
            4 => Ok(Redeemed::AlreadyInvited),
            n => Err(StateError(format!("room_invite_redeem answered {n}"))),
        }
    }

    async fn is_member(&self, who: Who) -> Result<bool, StateError> {
        Ok(int(&self.redis.run(&MEMBER, &[&self.bound, &self.users], &[who_hex(who)]).await?)? == 1)
    }

    async fn counts(&self) -> Result<Counts, StateError> {
        let v = self.redis.run(&COUNTS, &[&self.codes, &self.bound, &self.users], &[]).await?;
        match &v {
            Value::Array(items) if items.len() == 3 => {
                Ok(Counts { codes: int(&items[0])?, redeemed: int(&items[1])?, users: int(&items[2])? })
            }
            _ => Err(StateError(format!("room_invite_counts answered {v:?}"))),
        }
    }

    async fn clear(&self) -> Result<(), StateError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&self.codes).arg(&self.bound).arg(&self.users);
        self.redis.cmd(cmd).await.map(|_| ())
    }
}

/// Most (address or identity) entries [`Attempts`] keeps in a minute: past it, attempts from keys
/// it does not hold yet wait for the next minute (a flood of addresses cannot grow it further;
/// the first attempt of a minute drops the entries of the minutes before).
pub const ATTEMPT_KEYS_MAX: usize = 200_000;

/// Redeem attempts per client address (IPv6 by its /64) and per identity in the current minute,
/// and each room's wrong codes in it (this edge's).
#[derive(Default)]
pub struct Attempts {
    seen: dashmap::DashMap<String, (u64, u32)>,
    /// Room id → (minute, codes judged wrong or being judged): a code takes its place in the
    /// budget before it is looked up (so concurrent guesses cannot overshoot it) and gives it
    /// back when it was right ([`Attempts::judged`]). One entry per room.
    wrong: dashmap::DashMap<String, (u64, u32)>,
    /// The minute whose first attempt dropped the entries of the minutes before.
    swept: std::sync::atomic::AtomicU64,
}

impl Attempts {
    /// Counts an attempt of `sub` from `ip` at `now_ms`; `Err(seconds)` when either is over its
    /// limit this minute (nothing counted then).
    pub fn attempt(&self, ip: IpAddr, sub: &str, now_ms: u64) -> Result<(), u64> {
        let minute = now_ms / 60_000;
        let retry = (60 - (now_ms / 1000) % 60).max(1);
        if self.swept.swap(minute, std::sync::atomic::Ordering::Relaxed) != minute {
            // Once a minute: the entries of the minutes before go.
            self.seen.retain(|_, (m, _)| *m == minute);
            self.wrong.retain(|_, (m, _)| *m == minute);
        }
        let addr = format!("i{:x}", u128::from_be_bytes(crate::bot::address_group(ip)));
        let keys = [(addr, ATTEMPTS_PER_IP), (format!("s{sub}"), ATTEMPTS_PER_IDENTITY)];
        let used = |k: &str| self.seen.get(k).filter(|e| e.0 == minute).map(|e| e.1);
        let full = self.seen.len() >= ATTEMPT_KEYS_MAX;
        if keys.iter().any(|(k, max)| match used(k) {
            Some(n) => n >= *max,
            None => full,
        }) {
            return Err(retry);
        }
        for (k, _) in keys {
            let mut e = self.seen.entry(k).or_insert((minute, 0));
            if e.0 != minute {
                *e = (minute, 0);
            }
            e.1 += 1;
        }
        Ok(())
    }

    /// Takes a place in `room`'s budget of `max` wrong codes this minute for a code about to be
    /// judged; `Err(seconds)` when the budget is spent (no code of the room is judged then).
    pub fn reserve_wrong(&self, room: &str, max: u32, now_ms: u64) -> Result<(), u64> {
        let minute = now_ms / 60_000;
        let retry = (60 - (now_ms / 1000) % 60).max(1);
        let mut e = self.wrong.entry(room.to_owned()).or_insert((minute, 0));
        if e.0 != minute {
            *e = (minute, 0);
        }
        if e.1 >= max {
            return Err(retry);
        }
        e.1 += 1;
        if e.1 == max {
            tracing::warn!(room, max, "invite codes: the room's budget of wrong codes is spent until the minute ends");
        }
        Ok(())
    }

    /// The code whose place [`Attempts::reserve_wrong`] took was not wrong (it exists, or it
    /// could not be judged): the place goes back.
    pub fn judged(&self, room: &str, now_ms: u64) {
        if let Some(mut e) = self.wrong.get_mut(room)
            && e.0 == now_ms / 60_000
        {
            e.1 = e.1.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_in_any_case_and_without_dashes_and_hash_per_room() {
        assert_eq!(normalize(" abcd-efgh ").as_deref(), Some("ABCDEFGH"));
        assert_eq!(normalize("ABCDEFGH"), normalize("a-b-c-d-e-f-g-h"));
        for bad in ["", "abc-de", "abcdefg$", "ab cd ef gh", "ÄBCDEFGH", &"A".repeat(65), "------"] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
        assert!(normalize(&"A".repeat(64)).is_some());
        let s = Signer::new(b"secret-0123456789");
        let h = code_hash(&s, "r1", "ABCDEFGH");
        assert_eq!(h.len(), 32);
        assert_ne!(h, code_hash(&s, "r2", "ABCDEFGH"), "a code of one room is unknown in another");
        assert_ne!(h, code_hash(&Signer::new(b"another-secret-0123"), "r1", "ABCDEFGH"), "keyed by the edge secret");
        assert!(!h.contains("ABCDEFGH"));
        let g = generate();
        assert_eq!((g.len(), g.matches('-').count()), (19, 3), "{g}");
        assert_eq!(normalize(&g).map(|n| n.len()), Some(16));
        assert_ne!(generate(), generate());
    }

    #[test]
    fn attempts_are_limited_per_address_and_per_identity_each_minute() {
        let a = Attempts::default();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let t = 120_000 * 1000 + 15_000;
        for _ in 0..ATTEMPTS_PER_IDENTITY {
            assert_eq!(a.attempt(ip, "u1", t), Ok(()));
        }
        assert_eq!(a.attempt(ip, "u1", t), Err(45), "until the minute ends");
        assert_eq!(a.attempt(ip, "u1", t + 45_000), Ok(()), "a new minute");
        let b = Attempts::default();
        for i in 0..ATTEMPTS_PER_IP {
            assert_eq!(b.attempt(ip, &format!("u{i}"), t), Ok(()));
        }
        assert_eq!(b.attempt(ip, "fresh", t), Err(45));
        assert_eq!(b.attempt("192.0.2.2".parse().unwrap(), "fresh", t), Ok(()), "another address");
        // IPv6: one /64 is one address.
        let c = Attempts::default();
        for i in 0..ATTEMPTS_PER_IP {
            assert_eq!(c.attempt(format!("2001:db8::{i:x}").parse().unwrap(), &format!("u{i}"), t), Ok(()));
        }
        assert_eq!(c.attempt("2001:db8::ffff:1".parse().unwrap(), "fresh", t), Err(45));
        assert_eq!(c.attempt("2001:db8:0:1::1".parse().unwrap(), "fresh", t), Ok(()), "another /64");
    }

    #[test]
    fn a_rooms_wrong_codes_are_budgeted_across_addresses_and_right_ones_give_their_place_back() {
        let a = Attempts::default();
        let t = 120_000 * 1000 + 15_000;
        for _ in 0..3 {
            assert_eq!(a.reserve_wrong("r1", 3, t), Ok(()));
        }
        assert_eq!(a.reserve_wrong("r1", 3, t), Err(45), "spent: nothing is judged until the minute ends");
        assert_eq!(a.reserve_wrong("r2", 3, t), Ok(()), "another room has its own budget");
        a.judged("r1", t);
        assert_eq!(a.reserve_wrong("r1", 3, t), Ok(()), "a right code gave its place back");
        assert_eq!(a.reserve_wrong("r1", 3, t), Err(45));
        a.judged("r1", t - 60_000);
        assert_eq!(a.reserve_wrong("r1", 3, t), Err(45), "a place of another minute is not given back");
        assert_eq!(a.reserve_wrong("r1", 3, t + 45_000), Ok(()), "a new minute");
        // The per-address sweep drops the old minutes' budgets too.
        assert_eq!(a.attempt("192.0.2.1".parse().unwrap(), "u", t + 120_000), Ok(()));
        assert_eq!(a.wrong.len(), 0);
    }

    #[test]
    fn codes_carry_bits_by_length_and_the_alphabet_they_use() {
        let bits = |c: &str| code_bits(&normalize(c).unwrap());
        assert!(bits("ABCD1234") >= CODE_MIN_BITS, "8 letters and digits: {}", bits("ABCD1234"));
        assert!(bits("ABCD123") < CODE_MIN_BITS, "7 letters and digits");
        assert!(bits("ABCDEFGHJ") >= CODE_MIN_BITS && bits("ABCDEFGH") < CODE_MIN_BITS, "9 letters, not 8");
        assert!(bits("1234567890123") >= CODE_MIN_BITS && bits("123456789012") < CODE_MIN_BITS, "13 digits, not 12");
        for _ in 0..100 {
            let g = generate();
            assert!(bits(&g) >= CODE_MIN_BITS, "a generated code (80 random bits): {g}");
        }
    }

    #[test]
    fn a_flood_of_new_keys_cannot_grow_the_attempts_without_bound() {
        let a = Attempts::default();
        let t = 60_000 * 1000;
        let mut refused = 0;
        for i in 0..(ATTEMPT_KEYS_MAX / 2 + 10) as u32 {
            if a.attempt(IpAddr::from(i.to_be_bytes()), &format!("u{i}"), t).is_err() {
                refused += 1;
            }
        }
        assert!(a.seen.len() <= ATTEMPT_KEYS_MAX + 2, "{}", a.seen.len());
        assert!(refused > 0, "new keys wait once the table is full");
        // The next minute: the old entries go, attempts are taken again.
        assert_eq!(a.attempt("198.51.100.1".parse().unwrap(), "late", t + 60_000), Ok(()));
        assert!(a.seen.len() < 10, "{}", a.seen.len());
    }

    #[tokio::test]
    async fn the_embedded_store_redeems_once_per_code_and_identity() {
        let s = EmbeddedInvites::default();
        let (c1, c2) = ("c1".to_owned(), "c2".to_owned());
        assert_eq!(s.add_codes(&[c1.clone(), c2.clone()]).await.unwrap(), 2);
        assert_eq!(s.add_codes(std::slice::from_ref(&c1)).await.unwrap(), 0, "already there");
        assert_eq!(s.redeem("nope", 1).await.unwrap(), Redeemed::Unknown);
        assert_eq!(s.redeem("c1", 1).await.unwrap(), Redeemed::Now);
        assert_eq!(s.redeem("c1", 1).await.unwrap(), Redeemed::Again);
        assert_eq!(s.redeem("c1", 2).await.unwrap(), Redeemed::Taken);
        assert_eq!(s.redeem("c2", 1).await.unwrap(), Redeemed::AlreadyInvited);
        assert!(s.is_member(1).await.unwrap() && !s.is_member(2).await.unwrap());
        assert_eq!(s.add_users(&[3, 3]).await.unwrap(), 1);
        assert_eq!(s.redeem("c2", 3).await.unwrap(), Redeemed::AlreadyInvited);
        assert_eq!(s.counts().await.unwrap(), Counts { codes: 2, redeemed: 1, users: 1 });
        assert_eq!(s.revoke_codes(&[c1.clone(), "nope".into()]).await.unwrap(), 1);
        assert!(!s.is_member(1).await.unwrap(), "a revoked code uninvites its redeemer");
        assert_eq!(s.remove_users(&[3]).await.unwrap(), 1);
        assert!(!s.is_member(3).await.unwrap());
        s.clear().await.unwrap();
        assert_eq!(s.counts().await.unwrap(), Counts::default());
    }
}
