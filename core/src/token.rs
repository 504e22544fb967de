//! Admission tokens (docs/src/api.md "Admission token"): JWTs with `typ` `admission+jwt`, keys chosen by `kid` from
//! config only, one algorithm per key.
//!
//! The edge signs them when it admits a visitor; the core (and the edge's protected paths) verify them. The
//! one-time use of `jti` is not checked here: the hold consumes it atomically in the store, and remembers it
//! until [`AdmissionClaims::jti_expires_ms`].
//!
//! A valid signature proves who issued a token, not that its claims are sane: a signing bug or a leaked key
//! must not turn `exp = i64::MAX` into an overflow that wraps the jti's expiry into the past (and lets the
//! token hold twice). So every time claim is bounded to 1970..=9999 before any arithmetic, and all arithmetic
//! on claims is checked.

use std::collections::HashMap;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::config::TokensConfig;

/// The JWT `typ` of an admission token.
pub const TOKEN_TYPE: &str = "admission+jwt";
/// Longest lifetime (`exp − iat`) a token may claim.
pub const MAX_LIFETIME_SECONDS: i64 = 300;
/// Longest token accepted, bytes (a real one is ~400).
pub const MAX_TOKEN_LEN: usize = 4096;
/// Latest time a claim may name, unix seconds (9999-12-31T23:59:59Z). Times are also never negative.
pub const MAX_CLAIM_TIME: i64 = 253_402_300_799;
/// How long past `exp` a consumed jti is remembered: longer than any leeway, so it cannot be replayed while
/// some core still accepts the token.
pub const JTI_GRACE_SECONDS: i64 = 60;

/// The claims of an admission token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionClaims {
    pub iss: String,
    /// The event (room's linked event) the token admits to.
    pub aud: String,
    /// The user id, or the device id of an anonymous visitor.
    pub sub: String,
    /// ≥ 128 random bits, consumed by the hold.
    pub jti: String,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    pub room: String,
    pub pos: u64,
    pub max_qty: u32,
}

impl AdmissionClaims {
    /// When the store may forget this token's consumed jti (`exp` + [`JTI_GRACE_SECONDS`]), unix ms; `None`
    /// when that does not fit an `i64` (never for a token [`Keyring::verify`] accepted).
    pub fn jti_expires_ms(&self) -> Option<i64> {
        self.exp.checked_add(JTI_GRACE_SECONDS)?.checked_mul(1000)
    }
}

/// Why a token was refused. All of them are a 401 at the core.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("no admission token")]
    Missing,
    #[error("malformed token")]
    Malformed,
    #[error("token type must be admission+jwt")]
    WrongType,
    #[error("unknown key id")]
    UnknownKid,
    #[error("token algorithm does not match its key")]
    AlgMismatch,
    #[error("bad token signature")]
    BadSignature,
    #[error("token expired")]
    Expired,
    #[error("token not yet valid")]
    NotYetValid,
    #[error("token is for another event")]
    WrongAudience,
    #[error("token from an unknown issuer")]
    WrongIssuer,
    #[error("token lifetime must be 1..=300 s")]
    Lifetime,
    #[error("token header names critical extensions (crit), which this core does not implement")]
    CriticalHeader,
    #[error("token claims invalid: {0}")]
    Claims(String),
}

struct Key {
    alg: Algorithm,
    decoding: DecodingKey,
    encoding: Option<EncodingKey>,
}

/// The configured keys, by kid.
pub struct Keyring {
    keys: HashMap<String, Key>,
    issuer: String,
    signing_kid: Option<String>,
    leeway: u64,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring").field("kids", &self.keys.keys().collect::<Vec<_>>()).field("issuer", &self.issuer).finish()
    }
}

impl Keyring {
    /// Loads every key of a validated config.
    pub fn from_config(cfg: &TokensConfig) -> anyhow::Result<Keyring> {
        let mut keys = HashMap::new();
        for k in &cfg.keys {
            let key = match k.alg.as_str() {
                "EdDSA" => {
                    let public = k.public_key_file.as_ref().ok_or_else(|| anyhow::anyhow!("{}: no public key", k.kid))?;
                    let pem = std::fs::read(public).map_err(|e| anyhow::anyhow!("{}: {e}", public.display()))?;
                    let decoding = DecodingKey::from_ed_pem(&pem).map_err(|e| anyhow::anyhow!("{}: {e}", public.display()))?;
                    let encoding = match &k.private_key_file {
                        Some(p) => {
                            let pem = std::fs::read(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
                            Some(EncodingKey::from_ed_pem(&pem).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?)
                        }
                        None => None,
                    };
                    Key { alg: Algorithm::EdDSA, decoding, encoding }
                }
                "HS256" => {
                    let secret = k
                        .secret
                        .clone()
                        .or_else(|| k.secret_env.as_ref().and_then(|v| std::env::var(v).ok()))
                        .ok_or_else(|| anyhow::anyhow!("{}: no secret", k.kid))?;
                    Key {
                        alg: Algorithm::HS256,
                        decoding: DecodingKey::from_secret(secret.as_bytes()),
                        encoding: Some(EncodingKey::from_secret(secret.as_bytes())),
                    }
                }
                other => anyhow::bail!("{}: unsupported alg {other}", k.kid),
            };
            keys.insert(k.kid.clone(), key);
        }
        Ok(Keyring {
            keys,
            issuer: cfg.issuer.clone(),
            signing_kid: cfg.signing_kid.clone(),
            leeway: cfg.leeway_seconds.unwrap_or(5).min(10),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Verifies signature, type, kid/alg, issuer, audience = `event`, nbf/exp with the leeway, lifetime.
    pub fn verify(&self, token: &str, event: &str) -> Result<AdmissionClaims, TokenError> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(TokenError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        if header.typ.as_deref() != Some(TOKEN_TYPE) {
            return Err(TokenError::WrongType);
        }
        let kid = header.kid.as_deref().ok_or(TokenError::UnknownKid)?;
        let key = self.keys.get(kid).ok_or(TokenError::UnknownKid)?;
        if header.alg != key.alg {
            return Err(TokenError::AlgMismatch);
        }
        // RFC 7515 §4.1.11: a recipient that does not understand every listed extension must refuse the token.
        if header.crit.is_some() {
            return Err(TokenError::CriticalHeader);
        }
        let mut v = Validation::new(key.alg);
        v.leeway = self.leeway;
        v.validate_nbf = true;
        v.validate_exp = true;
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[event]);
        v.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub", "jti", "iat"]);
        let data = jsonwebtoken::decode::<AdmissionClaims>(token, &key.decoding, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            match e.kind() {
                ErrorKind::InvalidSignature => TokenError::BadSignature,
                ErrorKind::ExpiredSignature => TokenError::Expired,
                ErrorKind::ImmatureSignature => TokenError::NotYetValid,
                ErrorKind::InvalidAudience => TokenError::WrongAudience,
                ErrorKind::InvalidIssuer => TokenError::WrongIssuer,
                ErrorKind::InvalidAlgorithm => TokenError::AlgMismatch,
                ErrorKind::Json(_) | ErrorKind::MissingRequiredClaim(_) => TokenError::Claims(e.to_string()),
                _ => TokenError::Malformed,
            }
        })?;
        let c = data.claims;
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        check_times(&c, now, self.leeway as i64)?;
        if c.jti.len() < 16 || c.jti.len() > 128 {
            return Err(TokenError::Claims("jti must be 16..=128 characters".into()));
        }
        if c.sub.is_empty() || c.sub.len() > 128 {
            return Err(TokenError::Claims("sub must be 1..=128 characters".into()));
        }
        Ok(c)
    }

    /// Signs `claims` with the configured signing key (or `kid`).
    pub fn sign(&self, claims: &AdmissionClaims, kid: Option<&str>) -> anyhow::Result<String> {
        let kid = kid.or(self.signing_kid.as_deref()).ok_or_else(|| anyhow::anyhow!("no signing kid configured"))?;
        let key = self.keys.get(kid).ok_or_else(|| anyhow::anyhow!("unknown kid {kid}"))?;
        let enc = key.encoding.as_ref().ok_or_else(|| anyhow::anyhow!("key {kid} has no private key"))?;
        let mut header = Header::new(key.alg);
        header.typ = Some(TOKEN_TYPE.into());
        header.kid = Some(kid.into());
        Ok(jsonwebtoken::encode(&header, claims, enc)?)
    }

    /// Claims for a new token: 128-bit jti, valid from now for `lifetime` seconds (capped at 300).
    pub fn new_claims(&self, event: &str, sub: &str, room: &str, pos: u64, max_qty: u32, lifetime: i64) -> AdmissionClaims {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        AdmissionClaims {
            iss: self.issuer.clone(),
            aud: event.into(),
            sub: sub.into(),
            jti: hex::encode(rand::random::<[u8; 16]>()),
            iat: now,
            nbf: now,
            exp: now + lifetime.clamp(1, MAX_LIFETIME_SECONDS),
            room: room.into(),
            pos,
            max_qty,
        }
    }
}

/// The time claims of a signed token, beyond what the JWT library checks (`exp`, `nbf` against now): each
/// within 1970..=9999; `iat` not in the future; `exp` after both `iat` and `nbf`, by at most
/// [`MAX_LIFETIME_SECONDS`] (so an early `nbf` or a future `iat` cannot stretch a token's life either).
fn check_times(c: &AdmissionClaims, now: i64, leeway: i64) -> Result<(), TokenError> {
    for (name, t) in [("iat", c.iat), ("nbf", c.nbf), ("exp", c.exp)] {
        if !(0..=MAX_CLAIM_TIME).contains(&t) {
            return Err(TokenError::Claims(format!("{name} must be a unix time within 1970..=9999")));
        }
    }
    let sane = |from: i64| c.exp.checked_sub(from).is_some_and(|life| (1..=MAX_LIFETIME_SECONDS).contains(&life));
    if !sane(c.iat) || !sane(c.nbf) {
        return Err(TokenError::Lifetime);
    }
    if now.checked_add(leeway).is_none_or(|latest| c.iat > latest) {
        return Err(TokenError::NotYetValid);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KeyConfig;

    fn ring() -> Keyring {
        let cfg = TokensConfig {
            issuer: "wicket".into(),
            signing_kid: Some("hs-1".into()),
            leeway_seconds: Some(5),
            keys: vec![KeyConfig {
                kid: "hs-1".into(),
                alg: "HS256".into(),
                private_key_file: None,
                public_key_file: None,
                secret: Some("0123456789abcdef0123456789abcdef".into()),
                secret_env: None,
            }],
        };
        Keyring::from_config(&cfg).unwrap()
    }

    #[test]
    fn round_trip_and_refusals() {
        let r = ring();
        let c = r.new_claims("ev-1", "alice", "room", 3, 2, 120);
        let t = r.sign(&c, None).unwrap();
        assert_eq!(r.verify(&t, "ev-1").unwrap(), c);
        assert_eq!(r.verify(&t, "ev-2"), Err(TokenError::WrongAudience));
        // Flip one bit of the signature itself (editing a base64 character can make it undecodable instead).
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (signed, sig) = t.rsplit_once('.').unwrap();
        let mut raw = b64.decode(sig).unwrap();
        raw[0] ^= 1;
        let tampered = format!("{signed}.{}", b64.encode(raw));
        assert_eq!(r.verify(&tampered, "ev-1"), Err(TokenError::BadSignature));
        let mut old = c.clone();
        old.iat -= 1000;
        old.nbf -= 1000;
        old.exp = old.iat + 100;
        assert_eq!(r.verify(&r.sign(&old, None).unwrap(), "ev-1"), Err(TokenError::Expired));
        let mut long = c.clone();
        long.exp = long.iat + 3600;
        assert_eq!(r.verify(&r.sign(&long, None).unwrap(), "ev-1"), Err(TokenError::Lifetime));
        assert_eq!(r.verify("not.a.jwt", "ev-1"), Err(TokenError::Malformed));
    }

    /// Claims signed with the right key but absurd in time never reach the arithmetic that could overflow.
    #[test]
    fn absurd_times_are_refused_before_any_arithmetic() {
        let r = ring();
        let good = r.new_claims("ev-1", "alice", "room", 3, 2, 120);
        let now = good.iat;
        let cases: [(&str, i64, i64, i64); 9] = [
            ("exp near i64::MAX", now, now, i64::MAX - 1),
            ("exp and iat near i64::MAX", i64::MAX - 100, now, i64::MAX - 1),
            ("iat = i64::MIN", i64::MIN, now, now + 60),
            ("iat negative", -1, now, now + 60),
            ("beyond year 9999", MAX_CLAIM_TIME + 1, now, MAX_CLAIM_TIME + 100),
            ("exp = iat", now, now, now),
            ("exp before iat", now, now, now - 1),
            ("nbf long before exp", now, now - 1000, now + 60),
            ("iat in the future", now + 1000, now, now + 1200),
        ];
        for (name, iat, nbf, exp) in cases {
            let c = AdmissionClaims { iat, nbf, exp, ..good.clone() };
            let got = r.verify(&r.sign(&c, None).unwrap(), "ev-1");
            assert!(got.is_err(), "{name}: accepted");
        }
        assert_eq!(AdmissionClaims { exp: i64::MAX - 1, ..good.clone() }.jti_expires_ms(), None);
        let verified = r.verify(&r.sign(&good, None).unwrap(), "ev-1");
        assert_eq!(verified.map(|c| c.jti_expires_ms()), Ok(Some((good.exp + 60) * 1000)));
        let empty_sub = AdmissionClaims { sub: String::new(), ..good.clone() };
        assert!(matches!(r.verify(&r.sign(&empty_sub, None).unwrap(), "ev-1"), Err(TokenError::Claims(_))));
    }

    #[test]
    fn a_critical_header_is_refused() {
        let r = ring();
        let c = r.new_claims("ev-1", "alice", "room", 3, 2, 120);
        let mut header = Header::new(Algorithm::HS256);
        header.typ = Some(TOKEN_TYPE.into());
        header.kid = Some("hs-1".into());
        header.crit = Some(vec!["exp".into()]);
        let key = EncodingKey::from_secret(b"0123456789abcdef0123456789abcdef");
        let t = jsonwebtoken::encode(&header, &c, &key).unwrap();
        assert_eq!(r.verify(&t, "ev-1"), Err(TokenError::CriticalHeader));
    }
}
