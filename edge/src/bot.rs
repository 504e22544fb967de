//! Bot checks: a built-in proof-of-work, a CAPTCHA hook speaking siteverify, and the bot pass
//! a client gets after solving either.
//!
//! Proof-of-work: the edge hands out `challenge = b64(exp ‖ difficulty ‖ 16 random bytes) "."
//! b64(mac)`. The client finds a decimal `nonce` such that `sha256(challenge ‖ nonce)` starts
//! with `difficulty` zero bits (static/pow.js). Verifying is one MAC and one hash (O(1)); a solved
//! challenge is remembered until it expires so it cannot be used twice; that memory is bounded
//! and refuses new solutions when full rather than forgetting old ones (fail closed). Each
//! challenge is issued for a client address: one that gave many proofs lately gets harder ones
//! ([`PowConfig::address_free`]), and a challenge carries a tag of the address it was issued to,
//! so a busy address cannot solve cheaper challenges fetched elsewhere.
//!
//! CAPTCHA: the provider's server-side check ([`CaptchaProvider`]: Turnstile, hCaptcha and
//! reCAPTCHA speak siteverify — `POST` the form `secret`, `response`, `remoteip`, read
//! `{"success"}`, and for reCAPTCHA v3 the `score`; GeeTest v4 has its own signed form), over
//! HTTPS with the certificate checked (system roots or `ca-file`) or plain HTTP. A pass passes, a
//! refusal fails; a timeout, an error, an untrusted certificate or garbage is "unavailable", and
//! the fail-open switch decides.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::check::{ConfigIssue, HttpUrl, check_prefix, issue, parse_http_url};
use crate::identity::Signer;

/// When a route demands a bot check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BotCheckMode {
    /// Never.
    Off,
    /// Always, unless the client holds a bot pass.
    Always,
    /// Only for suspicious clients (no User-Agent or Accept-Language, no valid device cookie,
    /// or recent rejects), unless the client holds a bot pass.
    Suspicious,
}

/// Which proof a check asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BotProofKind {
    /// The built-in proof-of-work.
    Pow,
    /// The CAPTCHA hook.
    Captcha,
}

/// `[edge.bot]`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct BotConfig {
    /// Per path prefix check modes; longest prefix wins; paths matching none are `off`.
    pub routes: Vec<BotRoute>,
    /// What a check asks for. Default `pow`.
    pub proof: BotProofKind,
    /// Seconds a bot pass (`wicket_b` cookie) is valid after a solved check. Default 600.
    pub pass_seconds: u64,
    /// The proof-of-work.
    pub pow: PowConfig,
    /// The CAPTCHA hook; required when `proof = "captcha"`.
    pub captcha: Option<CaptchaConfig>,
}

impl Default for BotConfig {
    fn default() -> Self {
        BotConfig {
            routes: Vec::new(),
            proof: BotProofKind::Pow,
            pass_seconds: 600,
            pow: PowConfig::default(),
            captcha: None,
        }
    }
}

/// `[[edge.bot.routes]]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct BotRoute {
    /// Path prefix.
    pub path: String,
    /// `off`, `always` or `suspicious`.
    pub check: BotCheckMode,
}

/// `[edge.bot.pow]`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct PowConfig {
    /// Leading zero bits of sha256(challenge || nonce). Default 16 (about 65k hashes, well under
    /// a second in a browser). Changeable at run time.
    pub difficulty: u8,
    /// Seconds a challenge stays valid. Default 120.
    pub ttl_seconds: u64,
    /// Most solved-and-unexpired challenges remembered to refuse reuse; when full, solutions are
    /// refused (fail closed) until entries expire. Default 1,000,000 (about 50 MB at worst). Also
    /// the most addresses whose proofs are counted per half window (about 35 bytes each, two
    /// halves: about 70 MB more at worst).
    pub max_remembered: usize,
    /// Proofs one address (an IPv4 address, an IPv6 /64) gives at `difficulty` within
    /// `address-window-seconds`; from then on its challenges cost one more bit each time its count
    /// doubles (`free` proofs: +1, `2·free`: +2, ...), up to `address-max-extra-bits`. A script
    /// taking many places from one address pays for each; a fan pays the base. Default 32; 0 turns
    /// it off.
    pub address_free: u32,
    /// The window the proofs of an address are counted over, seconds. Default 600.
    pub address_window_seconds: u64,
    /// Most bits added for a busy address. Default 6 (64× the work); `difficulty` plus this is at
    /// most 32.
    pub address_max_extra_bits: u8,
}

impl Default for PowConfig {
    fn default() -> Self {
        PowConfig {
            difficulty: 16,
            ttl_seconds: 120,
            max_remembered: 1_000_000,
            address_free: 32,
            address_window_seconds: 600,
            address_max_extra_bits: 6,
        }
    }
}

/// `[edge.bot.captcha]`: a CAPTCHA provider's server-side verification.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CaptchaConfig {
    /// `turnstile`, `hcaptcha`, `recaptcha` (v2, or v3 with `score-threshold`), `geetest` (v4), or
    /// `siteverify` (any service speaking the siteverify form and `{"success"}` answer at
    /// `verify-url`). Default `siteverify`.
    #[serde(default)]
    pub provider: CaptchaProvider,
    /// Verification URL, `https://` or `http://`. Default: the provider's own (required for
    /// `siteverify`).
    #[serde(default)]
    pub verify_url: Option<String>,
    /// PEM file of the CAs an `https://` verify URL's certificate must chain to. Default: the
    /// system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// GeeTest: the `captcha_id` (public). Not used by the other providers.
    #[serde(default)]
    pub site_key: Option<String>,
    /// reCAPTCHA v3: the lowest score that passes (0.0–1.0). Default 0.5; an answer without a
    /// score (v2) passes on `success` alone.
    #[serde(default)]
    pub score_threshold: Option<f64>,
    /// Provider secret.
    #[serde(default)]
    pub secret: Option<String>,
    /// Environment variable holding the secret (wins over `secret`).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Timeout of one verification, milliseconds. Default 2000.
    #[serde(default = "default_captcha_timeout")]
    pub timeout_ms: u64,
    /// When the provider is slow, down or answers garbage: let the client through (`true`) or
    /// refuse it (`false`). Default false. Changeable at run time.
    #[serde(default)]
    pub fail_open: bool,
}

fn default_captcha_timeout() -> u64 {
    2000
}

impl BotConfig {
    /// Adds this section's problems, each at `path` (`edge.bot`) and its key; `resolve` turns a
    /// file name of the config into a path (relative to the config's folder).
    pub fn validate(&self, path: &str, resolve: &dyn Fn(&str) -> std::path::PathBuf, out: &mut Vec<ConfigIssue>) {
        for (i, r) in self.routes.iter().enumerate() {
            check_prefix(out, &format!("{path}.routes[{i}].path"), &r.path);
        }
        if self.pass_seconds == 0 || self.pass_seconds > 86_400 {
            out.push(issue(format!("{path}.pass-seconds"), "must be between 1 and 86400"));
        }
        if self.pow.difficulty == 0 || self.pow.difficulty > 32 {
            out.push(issue(format!("{path}.pow.difficulty"), "must be between 1 and 32"));
        }
        if self.pow.ttl_seconds == 0 || self.pow.ttl_seconds > 3600 {
            out.push(issue(format!("{path}.pow.ttl-seconds"), "must be between 1 and 3600"));
        }
        if self.pow.max_remembered == 0 || self.pow.max_remembered > 10_000_000 {
            out.push(issue(format!("{path}.pow.max-remembered"), "must be between 1 and 10000000"));
        }
        if self.pow.address_window_seconds < 10 || self.pow.address_window_seconds > 86_400 {
            out.push(issue(format!("{path}.pow.address-window-seconds"), "must be between 10 and 86400"));
        }
        if self.pow.address_max_extra_bits > 16 || u32::from(self.pow.difficulty) + u32::from(self.pow.address_max_extra_bits) > 32 {
            out.push(issue(format!("{path}.pow.address-max-extra-bits"), "must be at most 16, and difficulty plus it at most 32"));
        }
        match &self.captcha {
            None if self.proof == BotProofKind::Captcha => {
                out.push(issue(format!("{path}.captcha"), format!("required when {path}.proof = \"captcha\"")));
            }
            None => {}
            Some(c) => {
                let at = |key: &str| format!("{path}.captcha.{key}");
                match c.verify_url.as_deref().or(c.provider.default_url()) {
                    None => out.push(issue(at("verify-url"), "required when provider = \"siteverify\"")),
                    Some(u) => {
                        if let Err(m) = parse_http_url(u) {
                            out.push(issue(at("verify-url"), m));
                        }
                    }
                }
                if let Some(f) = &c.ca_file
                    && let Err(m) = crate::tls::load_cas(&resolve(f))
                {
                    out.push(issue(at("ca-file"), m));
                }
                match (c.provider, &c.site_key) {
                    (CaptchaProvider::Geetest, None) => out.push(issue(at("site-key"), "required for geetest (its captcha_id)")),
                    (CaptchaProvider::Geetest, Some(k))
                        if k.is_empty() || k.len() > 64 || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
                    {
                        out.push(issue(at("site-key"), "a geetest captcha_id is 1..=64 letters, digits, - or _"));
                    }
                    _ => {}
                }
                match (c.provider, c.score_threshold) {
                    (CaptchaProvider::Recaptcha, Some(t)) if !(0.0..=1.0).contains(&t) => {
                        out.push(issue(at("score-threshold"), "must be between 0.0 and 1.0"));
                    }
                    (CaptchaProvider::Recaptcha, _) | (_, None) => {}
                    (_, Some(_)) => out.push(issue(at("score-threshold"), "only reCAPTCHA v3 answers with a score")),
                }
                match (&c.secret, &c.secret_env) {
                    (_, Some(var)) if std::env::var(var).map(|v| v.is_empty()).unwrap_or(true) => {
                        out.push(issue(format!("{path}.captcha.secret-env"), format!("environment variable {var} is not set")));
                    }
                    (None, None) => out.push(issue(format!("{path}.captcha.secret"), "secret or secret-env is required")),
                    _ => {}
                }
                if c.timeout_ms == 0 || c.timeout_ms > 60_000 {
                    out.push(issue(format!("{path}.captcha.timeout-ms"), "must be between 1 and 60000"));
                }
            }
        }
    }
}


/// A bot-check proof in a request body (`POST /wicket/verify`, `POST /queue/<room>/join`):
/// `{"pow": {"challenge", "nonce"}}` or `{"captcha": "<provider response>"}`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofBody {
    /// A solved proof-of-work challenge.
    #[serde(default)]
    pub pow: Option<PowProof>,
    /// The CAPTCHA widget's response.
    #[serde(default)]
    pub captcha: Option<String>,
}

/// A proof-of-work answer.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowProof {
    /// The challenge the edge issued.
    pub challenge: String,
    /// The nonce that solves it.
    pub nonce: String,
}

/// Where clients fetch a PoW challenge.
pub const CHALLENGE_PATH: &str = "/wicket/challenge";
/// Where clients submit a proof for a bot pass.
pub const VERIFY_PATH: &str = "/wicket/verify";
/// The PoW solver script.
pub const POW_JS_PATH: &str = "/wicket/pow.js";
/// The bot pass cookie.
pub const PASS_COOKIE: &str = "wicket_b";
/// Header alternative to the pass cookie for apps.
pub const PASS_HEADER: &str = "wicket-bot-pass";
/// The solver, embedded so the edge can always serve it.
pub const POW_JS: &str = include_str!("../../static/pow.js");

/// Unix seconds now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Why a proof-of-work was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowError {
    /// Not a challenge this edge issued (bad format or MAC).
    Invalid,
    /// Past its expiry.
    Expired,
    /// The hash lacks the leading zero bits.
    WrongSolution,
    /// Already used.
    Reused,
    /// The memory of used challenges is full.
    Busy,
    /// Easier than this address's challenges are now (by more than a bit when it was issued to
    /// this address).
    TooEasy,
}

impl PowError {
    /// Short text for the client.
    pub fn text(self) -> &'static str {
        match self {
            PowError::Invalid => "invalid challenge",
            PowError::Expired => "challenge expired",
            PowError::WrongSolution => "wrong solution",
            PowError::Reused => "challenge already used",
            PowError::Busy => "too many outstanding challenges, retry",
            PowError::TooEasy => "challenge too easy for this address now (issued to another, or fetched ahead): ask for a new one",
        }
    }
}

/// `exp ‖ difficulty ‖ address tag ‖ id`.
const PAYLOAD_LEN: usize = 8 + 1 + 4 + 16;

/// The address a proof is counted for ([`crate::identity::client_address`]: an IPv4 address, an
/// IPv6 /64), as 16 bytes.
pub fn address_group(ip: IpAddr) -> [u8; 16] {
    match crate::identity::client_address(ip) {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Proofs given per address group over a sliding window, counted exactly in two generations of
/// half a window each (a count covers between half a window and a whole one). Keys are a keyed
/// hash of the group (per process, so nobody can aim collisions). At most `max_addresses` groups
/// are counted per generation (about 35 bytes each): past that, a new address counts as quiet
/// until the generation turns (fail open: a flood of addresses cannot raise every fan's
/// difficulty), while the addresses already counted keep their counts.
struct AddressLoad {
    free: u32,
    max_extra: u8,
    half_window: u64,
    max_addresses: usize,
    hasher: std::hash::RandomState,
    counts: Mutex<LoadCounts>,
}

struct LoadCounts {
    /// The half-window `current` counts (Unix seconds / half_window).
    generation: u64,
    current: HashMap<u64, u32>,
    previous: HashMap<u64, u32>,
}

impl AddressLoad {
    fn new(cfg: &PowConfig) -> Self {
        AddressLoad {
            free: cfg.address_free,
            max_extra: cfg.address_max_extra_bits,
            half_window: (cfg.address_window_seconds / 2).max(1),
            max_addresses: cfg.max_remembered,
            hasher: std::hash::RandomState::new(),
            counts: Mutex::new(LoadCounts { generation: 0, current: HashMap::new(), previous: HashMap::new() }),
        }
    }

    fn key(&self, group: &[u8; 16]) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(group)
    }

    /// The counts, moved on to `now`'s half window.
    fn at(&self, now: u64) -> parking_lot::MutexGuard<'_, LoadCounts> {
        let mut c = self.counts.lock();
        let generation = now / self.half_window;
        // (A caller that read the time before another moved the counts on counts in the newer
        // half: the counts never go back, nor are they wiped by a late reader.)
        if generation > c.generation {
            let next = generation == c.generation + 1;
            let LoadCounts { current, previous, .. } = &mut *c;
            *previous = if next { std::mem::take(current) } else { HashMap::new() };
            *current = HashMap::new();
            c.generation = generation;
        }
        c
    }

    /// Proofs `group` gave in the window.
    fn count(&self, group: &[u8; 16], now: u64) -> u32 {
        if self.free == 0 {
            return 0;
        }
        let k = self.key(group);
        let c = self.at(now);
        let get = |m: &HashMap<u64, u32>| m.get(&k).copied().unwrap_or(0);
        get(&c.current).saturating_add(get(&c.previous))
    }

    /// One more proof from `group`.
    fn note(&self, group: &[u8; 16], now: u64) {
        if self.free == 0 {
            return;
        }
        let k = self.key(group);
        let mut c = self.at(now);
        let full = c.current.len() >= self.max_addresses;
        match c.current.get_mut(&k) {
            Some(n) => *n = n.saturating_add(1),
            None if !full => {
                c.current.insert(k, 1);
            }
            None => {}
        }
    }

    /// Bits added for an address that gave `count` proofs.
    fn extra_bits(&self, count: u32) -> u8 {
        if self.free == 0 || count < self.free {
            return 0;
        }
        let doublings = (count / self.free).ilog2() + 1;
        doublings.min(u32::from(self.max_extra)) as u8
    }
}

/// The proof-of-work issuer and verifier.
pub struct ProofOfWork {
    signer: Signer,
    difficulty: AtomicU8,
    ttl: u64,
    max_remembered: usize,
    /// Solved challenge ids → expiry. A std HashMap behind a mutex: one insert per solution,
    /// which is rare next to page views.
    seen: Mutex<HashMap<[u8; 16], u64>>,
    load: AddressLoad,
}

impl ProofOfWork {
    /// A verifier with the given settings.
    pub fn new(signer: Signer, cfg: &PowConfig) -> Self {
        ProofOfWork {
            signer,
            difficulty: AtomicU8::new(cfg.difficulty),
            ttl: cfg.ttl_seconds,
            max_remembered: cfg.max_remembered,
            seen: Mutex::new(HashMap::new()),
            load: AddressLoad::new(cfg),
        }
    }

    /// Difficulty of new challenges (before any an address adds).
    pub fn difficulty(&self) -> u8 {
        self.difficulty.load(Ordering::Relaxed)
    }

    /// Changes the difficulty of new challenges (1..=32).
    pub fn set_difficulty(&self, d: u8) {
        self.difficulty.store(d.clamp(1, 32), Ordering::Relaxed);
    }

    /// Seconds a challenge lives.
    pub fn ttl(&self) -> u64 {
        self.ttl
    }

    /// The difficulty a challenge for `ip` gets now: the base, plus the bits its recent proofs add.
    pub fn difficulty_for(&self, ip: IpAddr, now: u64) -> u8 {
        let extra = self.load.extra_bits(self.load.count(&address_group(ip), now));
        self.difficulty().saturating_add(extra).min(32)
    }

    /// The settings of the per-address part, for the admin API.
    pub fn address_json(&self) -> serde_json::Value {
        serde_json::json!({
            "free": self.load.free,
            "window_seconds": self.load.half_window * 2,
            "max_extra_bits": self.load.max_extra,
        })
    }

    fn address_tag(&self, ip: IpAddr) -> [u8; 4] {
        let mac = self.signer.mac(b"pow-addr", &address_group(ip));
        [mac[0], mac[1], mac[2], mac[3]]
    }

    /// A fresh challenge for a client at `ip`, and its difficulty.
    pub fn issue(&self, now: u64, ip: IpAddr) -> (String, u8) {
        let d = self.difficulty_for(ip, now);
        let mut payload = [0u8; PAYLOAD_LEN];
        payload[..8].copy_from_slice(&(now + self.ttl).to_be_bytes());
        payload[8] = d;
        payload[9..13].copy_from_slice(&self.address_tag(ip));
        payload[13..].copy_from_slice(&rand::random::<[u8; 16]>());
        let tag = self.signer.mac(b"pow", &payload);
        (format!("{}.{}", B64.encode(payload), B64.encode(&tag[..16])), d)
    }

    /// Checks a solution given from `ip`; on success the challenge is spent and counted for `ip`'s
    /// address. A challenge issued to another address passes only when it is at least as hard as
    /// one for this address would be now (a busy address cannot borrow a quiet one's challenges).
    pub fn verify(&self, challenge: &str, nonce: &str, now: u64, ip: IpAddr) -> Result<(), PowError> {
        if challenge.len() > 128 || nonce.is_empty() || nonce.len() > 64 || !nonce.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(PowError::Invalid);
        }
        let (p, t) = challenge.split_once('.').ok_or(PowError::Invalid)?;
        let payload = B64.decode(p).map_err(|_| PowError::Invalid)?;
        let tag = B64.decode(t).map_err(|_| PowError::Invalid)?;
        if payload.len() != PAYLOAD_LEN || !self.signer.verify(b"pow", &payload, &tag) {
            return Err(PowError::Invalid);
        }
        let exp = u64::from_be_bytes(payload[..8].try_into().map_err(|_| PowError::Invalid)?);
        if exp < now {
            return Err(PowError::Expired);
        }
        let difficulty = payload[8];
        let mut h = Sha256::new();
        h.update(challenge.as_bytes());
        h.update(nonce.as_bytes());
        if leading_zero_bits(&h.finalize()) < u32::from(difficulty) {
            return Err(PowError::WrongSolution);
        }
        // A challenge of this address may be one bit easier than the address's challenges are
        // now (it got busier while this one was solved); one of another address may not. So
        // challenges fetched ahead while the address was quiet buy at most `2 · address-free`
        // proofs at the base.
        let required = self.difficulty_for(ip, now);
        let slack = u8::from(payload[9..13] == self.address_tag(ip));
        if difficulty.saturating_add(slack) < required {
            return Err(PowError::TooEasy);
        }
        let id: [u8; 16] = payload[13..].try_into().map_err(|_| PowError::Invalid)?;
        {
            let mut seen = self.seen.lock();
            if seen.contains_key(&id) {
                return Err(PowError::Reused);
            }
            if seen.len() >= self.max_remembered {
                seen.retain(|_, e| *e >= now);
                if seen.len() >= self.max_remembered {
                    return Err(PowError::Busy);
                }
            }
            seen.insert(id, exp);
        }
        self.load.note(&address_group(ip), now);
        Ok(())
    }

    /// Forgets expired challenges (their reuse is refused as expired anyway).
    pub fn prune(&self, now: u64) {
        let mut seen = self.seen.lock();
        seen.retain(|_, e| *e >= now);
        seen.shrink_to_fit();
    }

    /// Remembered solutions.
    pub fn remembered(&self) -> usize {
        self.seen.lock().len()
    }
}

/// Leading zero bits of a hash.
pub fn leading_zero_bits(h: &[u8]) -> u32 {
    let mut n = 0;
    for &b in h {
        if b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

/// A siteverify answer, as the edge reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptchaOutcome {
    /// The provider says the widget was solved (and, for reCAPTCHA v3, scored high enough).
    Pass,
    /// The provider says it was not (or the client's answer cannot even be sent).
    Fail,
    /// Timeout, connection or certificate error, non-200 or unreadable answer.
    Unavailable,
}

/// Whose verification dialect `[edge.bot.captcha]` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CaptchaProvider {
    /// `POST verify-url` with the form `secret`, `response`, `remoteip`; `{"success": bool}`.
    #[default]
    Siteverify,
    /// Cloudflare Turnstile (siteverify).
    Turnstile,
    /// hCaptcha (siteverify).
    Hcaptcha,
    /// Google reCAPTCHA v2 (siteverify) or v3 (siteverify plus `score` ≥ `score-threshold`).
    Recaptcha,
    /// GeeTest v4: the client's answer is its JSON (`lot_number`, `captcha_output`, `pass_token`,
    /// `gen_time`); the edge signs `lot_number` with the secret (HMAC-SHA256) as `sign_token` and
    /// posts them to `validate?captcha_id=<site-key>`; `{"result": "success"}` passes.
    Geetest,
}

impl CaptchaProvider {
    /// The provider's own verification URL (`siteverify` has none: `verify-url` is required).
    pub fn default_url(self) -> Option<&'static str> {
        match self {
            CaptchaProvider::Siteverify => None,
            CaptchaProvider::Turnstile => Some("https://challenges.cloudflare.com/turnstile/v0/siteverify"),
            CaptchaProvider::Hcaptcha => Some("https://api.hcaptcha.com/siteverify"),
            CaptchaProvider::Recaptcha => Some("https://www.google.com/recaptcha/api/siteverify"),
            CaptchaProvider::Geetest => Some("https://gcaptcha4.geetest.com/validate"),
        }
    }
}

#[derive(Deserialize)]
struct SiteVerify {
    success: bool,
    #[serde(default)]
    score: Option<f64>,
}

#[derive(Deserialize)]
struct GeetestAnswer {
    result: String,
}

/// What a GeeTest v4 widget hands the page (its `getValidate()`), sent on as `captcha`.
#[derive(Deserialize)]
struct GeetestResponse {
    lot_number: String,
    captcha_output: String,
    pass_token: String,
    gen_time: String,
}

/// The CAPTCHA hook.
pub struct Captcha {
    provider: CaptchaProvider,
    url: HttpUrl,
    addr: SocketAddr,
    secret: String,
    site_key: String,
    score_threshold: f64,
    /// Set for an `https://` verify URL: the system roots or `ca-file`, hostname checked.
    tls: Option<openssl::ssl::SslConnector>,
    timeout: Duration,
    fail_open: AtomicBool,
}

impl Captcha {
    /// Builds the hook from validated config (`base` resolves a relative `ca-file`).
    pub fn new(cfg: &CaptchaConfig, base: &std::path::Path) -> Result<Self, String> {
        let raw = cfg.verify_url.as_deref().or(cfg.provider.default_url()).ok_or("no verify-url")?;
        let url = parse_http_url(raw)?;
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(url.host.as_str(), url.port))
            .map_err(|e| format!("cannot resolve {raw}: {e}"))?
            .next()
            .ok_or_else(|| format!("cannot resolve {raw}"))?;
        let secret = match &cfg.secret_env {
            Some(var) => std::env::var(var).map_err(|_| format!("{var} is not set"))?,
            None => cfg.secret.clone().unwrap_or_default(),
        };
        let tls = if url.tls {
            let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls_client()).map_err(|e| e.to_string())?;
            b.set_min_proto_version(Some(openssl::ssl::SslVersion::TLS1_2)).map_err(|e| e.to_string())?;
            if let Some(f) = &cfg.ca_file {
                let p = if std::path::Path::new(f).is_absolute() { f.into() } else { base.join(f) };
                let mut store = openssl::x509::store::X509StoreBuilder::new().map_err(|e| e.to_string())?;
                for ca in crate::tls::load_cas(&p)?.iter() {
                    store.add_cert(ca.clone()).map_err(|e| e.to_string())?;
                }
                b.set_verify_cert_store(store.build()).map_err(|e| e.to_string())?;
            }
            Some(b.build())
        } else {
            None
        };
        Ok(Captcha {
            provider: cfg.provider,
            url,
            addr,
            secret,
            site_key: cfg.site_key.clone().unwrap_or_default(),
            score_threshold: cfg.score_threshold.unwrap_or(0.5),
            tls,
            timeout: Duration::from_millis(cfg.timeout_ms),
            fail_open: AtomicBool::new(cfg.fail_open),
        })
    }

    /// Whether an unavailable provider lets clients through.
    pub fn fail_open(&self) -> bool {
        self.fail_open.load(Ordering::Relaxed)
    }

    /// Flips the degrade switch.
    pub fn set_fail_open(&self, v: bool) {
        self.fail_open.store(v, Ordering::Relaxed);
    }

    /// Asks the provider about the widget's `response`, within the timeout.
    pub async fn siteverify(&self, response: &str, remote_ip: IpAddr) -> CaptchaOutcome {
        let (target, form) = match self.provider {
            CaptchaProvider::Geetest => {
                let Ok(r) = serde_json::from_str::<GeetestResponse>(response) else { return CaptchaOutcome::Fail };
                let sign = {
                    use hmac::Mac;
                    let Ok(mut mac) = hmac::Hmac::<Sha256>::new_from_slice(self.secret.as_bytes()) else {
                        return CaptchaOutcome::Unavailable;
                    };
                    mac.update(r.lot_number.as_bytes());
                    hex::encode(mac.finalize().into_bytes())
                };
                let sep = if self.url.path.contains('?') { '&' } else { '?' };
                let target = format!("{}{sep}captcha_id={}", self.url.path, form_encode(&self.site_key));
                let form = format!(
                    "lot_number={}&captcha_output={}&pass_token={}&gen_time={}&sign_token={sign}",
                    form_encode(&r.lot_number),
                    form_encode(&r.captcha_output),
                    form_encode(&r.pass_token),
                    form_encode(&r.gen_time)
                );
                (target, form)
            }
            _ => {
                let form = format!("secret={}&response={}&remoteip={}", form_encode(&self.secret), form_encode(response), remote_ip);
                (self.url.path.clone(), form)
            }
        };
        let Ok(body) = tokio::time::timeout(self.timeout, self.post(&target, form)).await else {
            tracing::debug!(provider = ?self.provider, "CAPTCHA verification timed out");
            return CaptchaOutcome::Unavailable;
        };
        let body = match body {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(provider = ?self.provider, url = %self.url.authority, error = %e, "CAPTCHA verification failed");
                return CaptchaOutcome::Unavailable;
            }
        };
        match self.provider {
            CaptchaProvider::Geetest => match serde_json::from_slice::<GeetestAnswer>(&body) {
                Ok(a) if a.result == "success" => CaptchaOutcome::Pass,
                Ok(a) if a.result == "fail" => CaptchaOutcome::Fail,
                _ => CaptchaOutcome::Unavailable,
            },
            provider => match serde_json::from_slice::<SiteVerify>(&body) {
                Ok(SiteVerify { success: true, score: Some(score) }) if provider == CaptchaProvider::Recaptcha => {
                    if score >= self.score_threshold { CaptchaOutcome::Pass } else { CaptchaOutcome::Fail }
                }
                Ok(SiteVerify { success: true, .. }) => CaptchaOutcome::Pass,
                Ok(SiteVerify { success: false, .. }) => CaptchaOutcome::Fail,
                Err(_) => CaptchaOutcome::Unavailable,
            },
        }
    }

    /// One `POST` of a form on a connection of its own (TLS when the URL is `https://`, the
    /// certificate checked against the roots and the host name); the 200 answer's body (≤ 64 KiB).
    async fn post(&self, target: &str, form: String) -> Result<Bytes, String> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let req = http::Request::post(target)
            .header(http::header::HOST, self.url.authority.as_str())
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(http::header::USER_AGENT, "wicket-edge")
            .body(Full::new(Bytes::from(form)))
            .map_err(|e| e.to_string())?;
        match &self.tls {
            None => send_once(tcp, req).await,
            Some(connector) => {
                let ssl = connector
                    .configure()
                    .and_then(|c| c.into_ssl(&self.url.host))
                    .map_err(|e| format!("TLS setup: {e}"))?;
                let mut stream = tokio_openssl::SslStream::new(ssl, tcp).map_err(|e| format!("TLS setup: {e}"))?;
                std::pin::Pin::new(&mut stream).connect().await.map_err(|e| {
                    let verify = stream.ssl().verify_result();
                    if verify == openssl::x509::X509VerifyResult::OK {
                        format!("TLS handshake: {e}")
                    } else {
                        format!("TLS handshake: certificate not trusted: {verify}")
                    }
                })?;
                send_once(stream, req).await
            }
        }
    }
}

/// Sends one request over `io` (HTTP/1.1) and reads a 200 answer's body.
async fn send_once<I>(io: I, req: http::Request<Full<Bytes>>) -> Result<Bytes, String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let resp = sender.send_request(req).await.map_err(|e| e.to_string());
    let out = match resp {
        Ok(r) if r.status() == http::StatusCode::OK => {
            Limited::new(r.into_body(), 64 * 1024).collect().await.map(|b| b.to_bytes()).map_err(|e| e.to_string())
        }
        Ok(r) => Err(format!("answered {}", r.status())),
        Err(e) => Err(e),
    };
    driver.abort();
    out
}

fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The bot policy, changeable at run time through the admin API.
pub struct BotChecks {
    /// Check mode per path prefix.
    routes: RwLock<Vec<BotRoute>>,
    /// Whether any route checks anything: read by every request without touching the lock
    /// (a lock's reader count is a write to memory every thread shares).
    checks_any: std::sync::atomic::AtomicBool,
    /// Which proof is asked for.
    proof: RwLock<BotProofKind>,
    /// The proof-of-work.
    pub pow: ProofOfWork,
    /// The CAPTCHA hook, when configured.
    pub captcha: Option<Captcha>,
    signer: Signer,
    pass_seconds: u64,
}

/// `PUT /admin/bot-policy` body; absent fields stay as they are.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BotPolicyUpdate {
    /// New route list (replaces the old one).
    #[serde(default)]
    pub routes: Option<Vec<BotRoute>>,
    /// `pow` or `captcha`.
    #[serde(default)]
    pub proof: Option<BotProofKind>,
    /// New PoW difficulty (1..=32).
    #[serde(default)]
    pub pow_difficulty: Option<u8>,
    /// New CAPTCHA degrade switch.
    #[serde(default)]
    pub captcha_fail_open: Option<bool>,
}

impl BotChecks {
    /// Builds from validated config.
    pub fn new(cfg: &BotConfig, signer: Signer, base: &std::path::Path) -> Result<Self, String> {
        Ok(BotChecks {
            routes: RwLock::new(cfg.routes.clone()),
            checks_any: std::sync::atomic::AtomicBool::new(cfg.routes.iter().any(|r| r.check != BotCheckMode::Off)),
            proof: RwLock::new(cfg.proof),
            pow: ProofOfWork::new(signer.clone(), &cfg.pow),
            captcha: cfg.captcha.as_ref().map(|c| Captcha::new(c, base)).transpose()?,
            signer,
            pass_seconds: cfg.pass_seconds,
        })
    }

    /// The mode for a path (longest matching prefix; none → off).
    pub fn mode(&self, path: &str) -> BotCheckMode {
        let routes = self.routes.read();
        routes
            .iter()
            .filter(|r| path.starts_with(r.path.as_str()))
            .max_by_key(|r| r.path.len())
            .map_or(BotCheckMode::Off, |r| r.check)
    }

    /// The prefixes of the routes that check anything (nginx's Lua path leaves requests under
    /// them to the edge).
    pub fn checked_prefixes(&self) -> Vec<String> {
        self.routes.read().iter().filter(|r| r.check != BotCheckMode::Off).map(|r| r.path.clone()).collect()
    }

    /// Whether any route checks anything (fast path skip).
    pub fn any(&self) -> bool {
        self.checks_any.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The proof asked for.
    pub fn proof(&self) -> BotProofKind {
        *self.proof.read()
    }

    /// Applies an admin update; returns the problems instead when it is invalid.
    pub fn update(&self, u: &BotPolicyUpdate) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if let Some(d) = u.pow_difficulty
            && !(1..=32).contains(&d)
        {
            problems.push("pow_difficulty: must be between 1 and 32".to_owned());
        }
        if (u.captcha_fail_open.is_some() || u.proof == Some(BotProofKind::Captcha)) && self.captcha.is_none() {
            problems.push("captcha: no [edge.bot.captcha] configured".to_owned());
        }
        if let Some(routes) = &u.routes {
            for (i, r) in routes.iter().enumerate() {
                if !r.path.starts_with('/') {
                    problems.push(format!("routes[{i}].path: must start with '/'"));
                }
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        if let Some(d) = u.pow_difficulty {
            self.pow.set_difficulty(d);
        }
        if let (Some(v), Some(c)) = (u.captcha_fail_open, &self.captcha) {
            c.set_fail_open(v);
        }
        if let Some(p) = u.proof {
            *self.proof.write() = p;
        }
        if let Some(routes) = &u.routes {
            let mut current = self.routes.write();
            *current = routes.clone();
            self.checks_any.store(routes.iter().any(|r| r.check != BotCheckMode::Off), std::sync::atomic::Ordering::Release);
        }
        Ok(())
    }

    /// The policy as JSON.
    pub fn policy_json(&self) -> serde_json::Value {
        serde_json::json!({
            "routes": *self.routes.read(),
            "proof": self.proof(),
            "pow_difficulty": self.pow.difficulty(),
            "pow_ttl_seconds": self.pow.ttl(),
            "pow_per_address": self.pow.address_json(),
            "captcha_configured": self.captcha.is_some(),
            "captcha_fail_open": self.captcha.as_ref().map(Captcha::fail_open),
            "pass_seconds": self.pass_seconds,
        })
    }

    /// Seconds a pass lives.
    pub fn pass_seconds(&self) -> u64 {
        self.pass_seconds
    }

    /// A pass bound to `binding` (the device id): `<exp>.<mac>`.
    pub fn issue_pass(&self, binding: &str, now: u64) -> String {
        let exp = now + self.pass_seconds;
        let tag = self.signer.mac(b"pass", format!("{exp}|{binding}").as_bytes());
        format!("{exp}.{}", B64.encode(&tag[..16]))
    }

    /// Whether a pass is valid for `binding` now.
    pub fn check_pass(&self, value: &str, binding: &str, now: u64) -> bool {
        let Some((exp, tag)) = value.split_once('.') else { return false };
        let (Ok(exp_n), Ok(tag)) = (exp.parse::<u64>(), B64.decode(tag)) else { return false };
        exp_n >= now && self.signer.verify(b"pass", format!("{exp}|{binding}").as_bytes(), &tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn solve(challenge: &str, difficulty: u8) -> String {
        (0u64..)
            .map(|n| n.to_string())
            .find(|n| {
                let mut h = Sha256::new();
                h.update(challenge.as_bytes());
                h.update(n.as_bytes());
                leading_zero_bits(&h.finalize()) >= u32::from(difficulty)
            })
            .unwrap()
    }

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));

    fn cfg(difficulty: u8, max_remembered: usize) -> PowConfig {
        PowConfig { difficulty, ttl_seconds: 60, max_remembered, ..PowConfig::default() }
    }

    fn pow() -> ProofOfWork {
        ProofOfWork::new(Signer::new(b"0123456789abcdef"), &cfg(8, 3))
    }

    /// A verifier whose addresses pay one more bit from their 4th proof in 100 s, at most 3 more.
    fn busy_pow() -> ProofOfWork {
        let c = PowConfig { address_free: 4, address_window_seconds: 100, address_max_extra_bits: 3, ..cfg(4, 10_000) };
        ProofOfWork::new(Signer::new(b"0123456789abcdef"), &c)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// `n` proofs from `from` at `now`.
    fn prove_times(p: &ProofOfWork, from: IpAddr, n: usize, now: u64) {
        for _ in 0..n {
            prove(p, from, now);
        }
    }

    /// Issues a challenge to `from`, solves it, gives it from `from`; the difficulty it had.
    fn prove(p: &ProofOfWork, from: IpAddr, now: u64) -> u8 {
        let (c, d) = p.issue(now, from);
        assert_eq!(p.verify(&c, &solve(&c, d), now, from), Ok(()));
        d
    }

    #[test]
    fn pow_accepts_a_solution_once() {
        let p = pow();
        let (c, d) = p.issue(1000, IP);
        let n = solve(&c, d);
        assert_eq!(p.verify(&c, &n, 1001, IP), Ok(()));
        assert_eq!(p.verify(&c, &n, 1001, IP), Err(PowError::Reused));
    }

    #[test]
    fn pow_rejects_wrong_expired_and_forged() {
        let p = pow();
        let (c, d) = p.issue(1000, IP);
        let n = solve(&c, d);
        let wrong = (0u64..)
            .map(|n| n.to_string())
            .find(|n| {
                let mut h = Sha256::new();
                h.update(c.as_bytes());
                h.update(n.as_bytes());
                leading_zero_bits(&h.finalize()) < 8
            })
            .unwrap();
        assert_eq!(p.verify(&c, &wrong, 1001, IP), Err(PowError::WrongSolution));
        assert_eq!(p.verify(&c, &n, 1061, IP), Err(PowError::Expired));
        let other = ProofOfWork::new(Signer::new(b"another secret!!"), &cfg(8, 3));
        let (c2, _) = other.issue(1000, IP);
        assert_eq!(p.verify(&c2, &solve(&c2, 8), 1001, IP), Err(PowError::Invalid));
        assert_eq!(p.verify("garbage", "1", 1001, IP), Err(PowError::Invalid));
        assert_eq!(p.verify(&c, "", 1001, IP), Err(PowError::Invalid));
        // A wrong solution does not spend the challenge.
        assert_eq!(p.verify(&c, &n, 1001, IP), Ok(()));
    }

    #[test]
    fn pow_memory_is_bounded_and_fails_closed() {
        let p = pow();
        for _ in 0..3 {
            let (c, d) = p.issue(1000, IP);
            assert_eq!(p.verify(&c, &solve(&c, d), 1000, IP), Ok(()));
        }
        let (c, d) = p.issue(1000, IP);
        assert_eq!(p.verify(&c, &solve(&c, d), 1000, IP), Err(PowError::Busy));
        // Once the remembered ones expire there is room again.
        let (c, d) = p.issue(1100, IP);
        assert_eq!(p.verify(&c, &solve(&c, d), 1100, IP), Ok(()));
    }

    #[test]
    fn difficulty_changes_at_run_time() {
        let p = pow();
        p.set_difficulty(12);
        let (_, d) = p.issue(0, IP);
        assert_eq!(d, 12);
    }

    #[test]
    fn a_busy_address_pays_more_and_others_do_not() {
        let p = busy_pow();
        let bot = ip("198.51.100.7");
        // 4 free, then one more bit per doubling of its count (4: +1, 8: +2, 16: +3), at most 3.
        let paid: Vec<u8> = (0..20).map(|_| prove(&p, bot, 1000)).collect();
        assert_eq!(paid, [4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7]);
        assert_eq!(p.issue(1000, bot).1, 7, "capped at difficulty + max extra");
        // Another address, a neighbour in the same /24 included, pays the base.
        assert_eq!(p.issue(1000, ip("198.51.100.8")).1, 4);
        assert_eq!(p.issue(1000, ip("203.0.113.9")).1, 4);
        // The same address written IPv4-mapped is the same address.
        assert_eq!(p.issue(1000, ip("::ffff:198.51.100.7")).1, 7);
    }

    #[test]
    fn ipv6_addresses_count_per_64() {
        let p = busy_pow();
        for i in 0..8 {
            // Rotating the interface id inside one /64 does not make a new address.
            prove(&p, ip(&format!("2001:db8:1:2::{i:x}")), 1000);
        }
        assert_eq!(p.issue(1000, ip("2001:db8:1:2:ffff::1")).1, 6);
        assert_eq!(p.issue(1000, ip("2001:db8:1:3::1")).1, 4, "the next /64 is someone else");
    }

    #[test]
    fn the_count_ages_out_over_the_window() {
        let p = busy_pow();
        let bot = ip("198.51.100.7");
        prove_times(&p, bot, 8, 1000);
        assert_eq!(p.issue(1000, bot).1, 6);
        // Counted in halves of 50 s: still counted in the next half, gone after it.
        assert_eq!(p.issue(1049, bot).1, 6);
        assert_eq!(p.issue(1050, bot).1, 6);
        assert_eq!(p.issue(1100, bot).1, 4);
        // A long silence forgets everything too.
        prove_times(&p, bot, 8, 2000);
        assert_eq!(p.issue(9000, bot).1, 4);
    }

    #[test]
    fn a_busy_address_cannot_borrow_a_quiet_ones_challenge() {
        let p = busy_pow();
        let bot = ip("198.51.100.7");
        prove_times(&p, bot, 8, 1000);
        // A challenge fetched from a clean address (base difficulty) and given from the busy one:
        // refused, and not spent (the quiet address may still give it).
        let quiet = ip("203.0.113.9");
        let (c, d) = p.issue(1000, quiet);
        assert_eq!(d, 4);
        let n = solve(&c, d);
        assert_eq!(p.verify(&c, &n, 1000, bot), Err(PowError::TooEasy));
        assert_eq!(p.verify(&c, &n, 1000, quiet), Ok(()));
        // A hard enough challenge from elsewhere passes (a phone that moved from Wi-Fi to mobile).
        let (c, d) = p.issue(1000, bot);
        assert_eq!(p.verify(&c, &solve(&c, d), 1000, quiet), Ok(()));
        // A challenge issued to the busy address keeps its difficulty even if the address got
        // busier while it was solved.
        let (c, d) = p.issue(1000, bot);
        prove_times(&p, bot, 40, 1000);
        assert_eq!(p.verify(&c, &solve(&c, d), 1000, bot), Ok(()));
        // Forging the difficulty byte breaks the MAC.
        let (c, _) = p.issue(1000, quiet);
        let (payload, mac) = c.split_once('.').unwrap();
        let mut raw = B64.decode(payload).unwrap();
        raw[8] = 1;
        let forged = format!("{}.{mac}", B64.encode(&raw));
        assert_eq!(p.verify(&forged, &solve(&forged, 1), 1000, quiet), Err(PowError::Invalid));
    }

    #[test]
    fn challenges_fetched_ahead_while_quiet_buy_few_cheap_proofs() {
        let p = busy_pow();
        let bot = ip("198.51.100.7");
        // 20 challenges fetched at once while the address is quiet (base 4), then given one by one:
        // while the address's challenges are at most one bit harder (fewer than 8 proofs), they
        // pass; then they are too easy, and not spent.
        let hoard: Vec<(String, u8)> = (0..20).map(|_| p.issue(1000, bot)).collect();
        assert!(hoard.iter().all(|(_, d)| *d == 4));
        let verdicts: Vec<bool> = hoard.iter().map(|(c, d)| p.verify(c, &solve(c, *d), 1000, bot).is_ok()).collect();
        assert_eq!(verdicts.iter().filter(|ok| **ok).count(), 8, "{verdicts:?}");
        assert!(verdicts[..8].iter().all(|ok| *ok) && verdicts[8..].iter().all(|ok| !ok));
        let (c, d) = &hoard[19];
        assert_eq!(p.verify(c, &solve(c, *d), 1000, bot), Err(PowError::TooEasy));
    }

    #[test]
    fn a_late_reader_neither_turns_the_counts_back_nor_wipes_them() {
        let p = busy_pow();
        let bot = ip("198.51.100.7");
        prove_times(&p, bot, 8, 1000);
        // The counts move on to the next half (50 s halves), then a caller with a time read
        // before that comes: it counts in the newer half, and the counts stay.
        assert_eq!(p.difficulty_for(bot, 1050), 6);
        assert_eq!(p.difficulty_for(bot, 1049), 6);
        p.load.note(&address_group(bot), 1049);
        assert_eq!(p.load.count(&address_group(bot), 1050), 9);
    }

    #[test]
    fn failed_proofs_do_not_count_and_zero_turns_it_off() {
        let p = busy_pow();
        let bot = ip("198.51.100.7");
        for _ in 0..50 {
            let (c, d) = p.issue(1000, bot);
            let wrong = (0u64..)
                .map(|n| n.to_string())
                .find(|n| leading_zero_bits(&Sha256::new().chain_update(c.as_bytes()).chain_update(n.as_bytes()).finalize()) < u32::from(d))
                .unwrap();
            assert_eq!(p.verify(&c, &wrong, 1000, bot), Err(PowError::WrongSolution));
        }
        assert_eq!(p.issue(1000, bot).1, 4, "only given proofs count");
        let off = ProofOfWork::new(Signer::new(b"0123456789abcdef"), &PowConfig { address_free: 0, ..cfg(4, 10_000) });
        prove_times(&off, bot, 50, 1000);
        assert_eq!(off.issue(1000, bot).1, 4);
    }

    #[test]
    fn a_flood_of_addresses_neither_raises_the_others_nor_grows_without_bound() {
        let p = busy_pow();
        let v4 = |n: u32| IpAddr::V4(std::net::Ipv4Addr::from(n));
        let bot = ip("198.51.100.7");
        prove_times(&p, bot, 8, 1000);
        // 100,000 addresses with three proofs each (the counts only; solving them all is not the
        // point): none of them is a busy address, nor is a fresh one, and the farm still is.
        for i in 0..100_000u32 {
            for _ in 0..3 {
                p.load.note(&address_group(v4(0x0A00_0000 + i)), 1000);
            }
        }
        assert!((0..100_000u32).step_by(97).all(|i| p.difficulty_for(v4(0x0A00_0000 + i), 1000) == 4));
        assert!((0..1000u32).all(|i| p.difficulty_for(v4(0xC000_0000 + i), 1000) == 4));
        assert_eq!(p.difficulty_for(bot, 1000), 6);
        // Past `max-remembered` addresses (10,000 here) a new one is not counted: it stays quiet.
        assert_eq!(p.load.counts.lock().current.len(), 10_000);
        let late = v4(0xC100_0000);
        for _ in 0..8 {
            p.load.note(&address_group(late), 1000);
        }
        assert_eq!(p.difficulty_for(late, 1000), 4);
    }

    #[test]
    fn per_address_settings_are_checked_with_their_paths() {
        let mut out = Vec::new();
        let mut c = BotConfig::default();
        c.pow.address_window_seconds = 5;
        c.pow.difficulty = 28;
        c.pow.address_max_extra_bits = 6;
        c.validate("edge.bot", &|f: &str| std::path::PathBuf::from(f), &mut out);
        let paths: Vec<String> = out.iter().map(|i| i.path.clone()).collect();
        assert_eq!(paths, ["edge.bot.pow.address-window-seconds", "edge.bot.pow.address-max-extra-bits"]);
    }

    #[test]
    fn passes_are_bound_and_expire() {
        let cfg = BotConfig::default();
        let b = BotChecks::new(&cfg, Signer::new(b"0123456789abcdef"), std::path::Path::new(".")).unwrap();
        let pass = b.issue_pass("dev1", 100);
        assert!(b.check_pass(&pass, "dev1", 101));
        assert!(!b.check_pass(&pass, "dev2", 101));
        assert!(!b.check_pass(&pass, "dev1", 100 + cfg.pass_seconds + 1));
        assert!(!b.check_pass("1.x", "dev1", 0));
    }
}
