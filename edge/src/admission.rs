//! The protected-path hook: only holders of a valid admission token (docs/src/api.md "Admission token")
//! pass. The check is a trait so the waiting room can swap in its own (e.g. one that also
//! consults a revocation list); [`JwtAdmission`] verifies the JWT against the `[tokens]` keys.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};

use crate::check::{ConfigIssue, check_prefix, is_room_id, issue};

/// `[[edge.protected]]`: a path only admission-token holders reach.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProtectedRule {
    /// Path prefix.
    pub path: String,
    /// Room whose queue a refused visitor is sent to (`/queue/<room>`).
    pub room: String,
    /// Event id the token's `aud` must name. Default: the room.
    #[serde(default)]
    pub event: Option<String>,
}

impl ProtectedRule {
    /// Adds this rule's problems, each at `path` (`edge.protected[0]`) and its key.
    pub fn validate(&self, path: &str, out: &mut Vec<ConfigIssue>) {
        check_prefix(out, &format!("{path}.path"), &self.path);
        if !is_room_id(&self.room) {
            out.push(issue(format!("{path}.room"), "letters, digits, '-' and '_' only (1-64)"));
        }
    }
}

/// `[tokens]` (shared with the core: the same keys and defaults, unknown keys refused by both).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TokensConfig {
    /// Expected `iss`. Default `wicket`, as in the core.
    #[serde(default = "default_issuer")]
    pub issuer: String,
    /// Key new tokens are signed with.
    #[serde(default)]
    pub signing_kid: Option<String>,
    /// Allowed clock skew for `nbf`/`exp`, seconds (≤ 10). Default 5.
    #[serde(default = "default_leeway")]
    pub leeway_seconds: u64,
    /// Keys by `kid`.
    #[serde(default)]
    pub keys: Vec<TokenKey>,
}

fn default_leeway() -> u64 {
    5
}

fn default_issuer() -> String {
    wicket_core::config::DEFAULT_ISSUER.into()
}

impl TokensConfig {
    /// Adds this section's problems, each at `path` (`tokens`) and its key; `resolve` turns a key file
    /// named in the config into the path to read.
    pub fn validate(&self, path: &str, resolve: &dyn Fn(&str) -> PathBuf, out: &mut Vec<ConfigIssue>) {
        if self.issuer.is_empty() {
            out.push(issue(format!("{path}.issuer"), "must not be empty"));
        }
        if self.leeway_seconds > 10 {
            out.push(issue(format!("{path}.leeway-seconds"), "must be at most 10"));
        }
        if self.keys.is_empty() {
            out.push(issue(format!("{path}.keys"), "at least one key is required"));
        }
        for (i, k) in self.keys.iter().enumerate() {
            match k.alg.as_str() {
                "EdDSA" => match &k.public_key_file {
                    None => out.push(issue(format!("{path}.keys[{i}].public-key-file"), "required for EdDSA")),
                    Some(f) => {
                        let file = resolve(f);
                        match std::fs::read(&file) {
                            Err(e) => out.push(issue(
                                format!("{path}.keys[{i}].public-key-file"),
                                format!("cannot read {}: {e}", file.display()),
                            )),
                            Ok(pem) => {
                                if jsonwebtoken::DecodingKey::from_ed_pem(&pem).is_err() {
                                    out.push(issue(
                                        format!("{path}.keys[{i}].public-key-file"),
                                        "not an Ed25519 public key in PEM",
                                    ));
                                }
                            }
                        }
                    }
                },
                "HS256" => match (&k.secret, &k.secret_env) {
                    (_, Some(var)) if std::env::var(var).map(|v| v.is_empty()).unwrap_or(true) => out.push(issue(
                        format!("{path}.keys[{i}].secret-env"),
                        format!("environment variable {var} is not set"),
                    )),
                    (Some(s), None) if s.len() < 32 => {
                        out.push(issue(format!("{path}.keys[{i}].secret"), "must be at least 32 characters"))
                    }
                    (None, None) => out.push(issue(format!("{path}.keys[{i}]"), "secret or secret-env is required")),
                    _ => {}
                },
                other => out.push(issue(format!("{path}.keys[{i}].alg"), format!("EdDSA or HS256, not {other:?}"))),
            }
        }
    }
}

/// One `[[tokens.keys]]`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TokenKey {
    /// Key id, matched against the JWT header's `kid`.
    pub kid: String,
    /// `EdDSA` or `HS256`.
    pub alg: String,
    /// PEM private key (signing; not read by the edge's verifier).
    #[serde(default)]
    pub private_key_file: Option<String>,
    /// PEM public key (EdDSA verification).
    #[serde(default)]
    pub public_key_file: Option<String>,
    /// HS256 secret.
    #[serde(default)]
    pub secret: Option<String>,
    /// Environment variable holding the HS256 secret.
    #[serde(default)]
    pub secret_env: Option<String>,
}

/// Longest token accepted (bounded input).
pub const MAX_TOKEN_LEN: usize = 4096;

/// The claims the edge uses from an admission token.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct AdmissionClaims {
    /// User id, or device id when anonymous.
    pub sub: String,
    /// Token id.
    pub jti: String,
    /// Room the token was issued by.
    pub room: String,
    /// Queue position.
    pub pos: u64,
    /// Issued at.
    pub iat: u64,
    /// Expiry.
    pub exp: u64,
}

/// Why a token was refused (for logs and metrics; the client only sees "not admitted").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// No token in cookie or header.
    #[error("no admission token")]
    Missing,
    /// Unknown `kid`, wrong `alg` or `typ`, bad signature, wrong claims, expired.
    #[error("invalid admission token: {0}")]
    Invalid(String),
}

/// Verifies admission tokens for a room's protected paths.
pub trait AdmissionCheck: Send + Sync {
    /// The token's claims when it admits to `rule` (its room and event).
    fn verify(&self, token: &str, rule: &ProtectedRule) -> Result<AdmissionClaims, AdmissionError>;

    /// Forgets what expired (called by the edge's upkeep). Default: nothing.
    fn prune(&self) {}
}

/// JWT verification against configured keys.
pub struct JwtAdmission {
    issuer: String,
    leeway: u64,
    keys: HashMap<String, (Algorithm, DecodingKey)>,
    verified: VerifiedTokens,
}

/// Tokens that passed the full check, by a keyed 128-bit hash of (token, room, event), until
/// their `exp`: an admitted fan sends the same token with every request, and the signature
/// check and claim parsing were most of a protected request's cost. A token is immutable, so
/// a hit needs only its expiry checked again; whether its session still runs is asked on every
/// request by the caller ([`crate::room::Rooms::session_ok`]).
struct VerifiedTokens {
    keys: (std::hash::RandomState, std::hash::RandomState),
    map: dashmap::DashMap<(u64, u64), AdmissionClaims>,
}

/// Most tokens remembered (about 150 bytes each); when full, the memory starts over.
const VERIFIED_MAX: usize = 200_000;

impl VerifiedTokens {
    fn new() -> Self {
        VerifiedTokens { keys: (std::hash::RandomState::new(), std::hash::RandomState::new()), map: dashmap::DashMap::new() }
    }

    fn key(&self, token: &str, rule: &ProtectedRule) -> (u64, u64) {
        use std::hash::BuildHasher;
        let parts = (token, rule.room.as_str(), rule.event.as_deref());
        (self.keys.0.hash_one(parts), self.keys.1.hash_one(parts))
    }
}

/// Longest lifetime of a token (docs/src/api.md: `exp` ≤ 300 s after `iat`).
pub const MAX_LIFETIME: u64 = 300;

impl JwtAdmission {
    /// Loads keys from validated config.
    pub fn new(tokens: &TokensConfig, resolve: &dyn Fn(&str) -> PathBuf) -> Result<Self, String> {
        let mut keys = HashMap::new();
        for k in &tokens.keys {
            let entry = match k.alg.as_str() {
                "EdDSA" => {
                    let file = k.public_key_file.as_deref().ok_or("EdDSA key without public-key-file")?;
                    let pem = std::fs::read(resolve(file)).map_err(|e| format!("{file}: {e}"))?;
                    (Algorithm::EdDSA, DecodingKey::from_ed_pem(&pem).map_err(|e| format!("{file}: {e}"))?)
                }
                "HS256" => {
                    let secret = match &k.secret_env {
                        Some(var) => std::env::var(var).map_err(|_| format!("{var} is not set"))?,
                        None => k.secret.clone().ok_or("HS256 key without secret")?,
                    };
                    (Algorithm::HS256, DecodingKey::from_secret(secret.as_bytes()))
                }
                other => return Err(format!("unsupported alg {other}")),
            };
            keys.insert(k.kid.clone(), entry);
        }
        Ok(JwtAdmission { issuer: tokens.issuer.clone(), leeway: tokens.leeway_seconds.min(10), keys, verified: VerifiedTokens::new() })
    }
}

impl AdmissionCheck for JwtAdmission {
    fn verify(&self, token: &str, rule: &ProtectedRule) -> Result<AdmissionClaims, AdmissionError> {
        let invalid = |m: &str| AdmissionError::Invalid(m.to_owned());
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return Err(invalid("bad length"));
        }
        let key = self.verified.key(token, rule);
        if let Some(c) = self.verified.map.get(&key) {
            if c.exp.saturating_add(self.leeway) > crate::bot::unix_now() {
                return Ok(c.clone());
            }
            drop(c);
            self.verified.map.remove(&key);
            return Err(invalid("expired"));
        }
        let c = self.verify_full(token, rule)?;
        if self.verified.map.len() >= VERIFIED_MAX {
            self.verified.map.clear();
        }
        self.verified.map.insert(key, c.clone());
        Ok(c)
    }

    fn prune(&self) {
        let now = crate::bot::unix_now();
        self.verified.map.retain(|_, c| c.exp.saturating_add(self.leeway) > now);
    }
}

impl JwtAdmission {
    /// Tokens remembered as verified (for tests and metrics).
    pub fn remembered(&self) -> usize {
        self.verified.map.len()
    }

    /// The whole check: header, signature, every claim.
    fn verify_full(&self, token: &str, rule: &ProtectedRule) -> Result<AdmissionClaims, AdmissionError> {
        let invalid = |m: &str| AdmissionError::Invalid(m.to_owned());
        if has_crit(token) {
            // RFC 7515 §4.1.11: extensions the verifier does not understand make the token invalid.
            return Err(invalid("crit header parameters are not supported"));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| invalid(&e.to_string()))?;
        if header.typ.as_deref() != Some("admission+jwt") {
            return Err(invalid("typ is not admission+jwt"));
        }
        let kid = header.kid.as_deref().ok_or_else(|| invalid("no kid"))?;
        let (alg, key) = self.keys.get(kid).ok_or_else(|| invalid("unknown kid"))?;
        if header.alg != *alg {
            return Err(invalid("alg does not match the key"));
        }
        let mut v = Validation::new(*alg);
        v.leeway = self.leeway;
        v.validate_nbf = true;
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[rule.event.as_deref().unwrap_or(&rule.room)]);
        v.set_required_spec_claims(&["exp", "nbf", "iat", "iss", "aud", "sub", "jti"]);
        let data = jsonwebtoken::decode::<AdmissionClaims>(token, key, &v).map_err(|e| invalid(&e.to_string()))?;
        let c = data.claims;
        if c.room != rule.room {
            return Err(invalid("token is for another room"));
        }
        if c.sub.is_empty() || c.sub.len() > 256 {
            return Err(invalid("sub must be 1-256 bytes"));
        }
        // Checked times: issued no later than now (plus leeway), expiring after it was issued,
        // and for at most MAX_LIFETIME.
        let now = crate::bot::unix_now();
        if c.iat > now.saturating_add(self.leeway) || c.exp <= c.iat || c.exp - c.iat > MAX_LIFETIME {
            return Err(invalid("iat/exp out of range (issued in the future, or lifetime not within 300 s)"));
        }
        if c.jti.len() < 16 {
            return Err(invalid("jti too short"));
        }
        Ok(c)
    }
}

/// The one protection table: every protected prefix, from `[[edge.protected]]` and from each
/// room (config file and admin API alike), matched against the canonical path
/// ([`crate::path`]); the longest prefix wins. The waiting room owns it
/// ([`crate::room::Rooms::protection`]) and swaps in a new table whenever a room is added,
/// changed or deleted, so a rule takes effect on the next request.
#[derive(Debug, Default)]
pub struct ProtectionTable {
    /// Longest prefix first.
    paths: Vec<Arc<ProtectedPath>>,
}

impl ProtectionTable {
    /// A table of these rules.
    pub fn new(rules: impl IntoIterator<Item = ProtectedRule>) -> Self {
        let mut paths: Vec<Arc<ProtectedPath>> = rules.into_iter().map(|r| Arc::new(ProtectedPath::new(r))).collect();
        paths.sort_by(|a, b| b.rule.path.len().cmp(&a.rule.path.len()).then_with(|| a.rule.path.cmp(&b.rule.path)));
        ProtectionTable { paths }
    }

    /// The rule guarding a canonical path, if any.
    pub fn find(&self, path: &str) -> Option<&Arc<ProtectedPath>> {
        self.paths.iter().find(|p| path.starts_with(p.rule.path.as_str()))
    }

    /// True when nothing is protected.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Every rule, longest prefix first.
    pub fn rules(&self) -> impl Iterator<Item = &ProtectedRule> {
        self.paths.iter().map(|p| &p.rule)
    }
}

/// True when `token` is shaped like an admission token (a JWT whose header says
/// `typ: admission+jwt`); says nothing about its validity.
pub fn is_admission_jwt(token: &str) -> bool {
    token.len() <= MAX_TOKEN_LEN && jsonwebtoken::decode_header(token).is_ok_and(|h| h.typ.as_deref() == Some("admission+jwt"))
}

/// True when the token's JOSE header carries `crit` (or cannot be read: the decoder refuses it then).
fn has_crit(token: &str) -> bool {
    use base64::Engine;
    let Some(head) = token.split('.').next() else { return false };
    let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(head) else { return false };
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes).is_ok_and(|m| m.contains_key("crit"))
}

/// A protected path prefix with what the hot path needs precomputed.
#[derive(Debug, Clone)]
pub struct ProtectedPath {
    /// The rule.
    pub rule: ProtectedRule,
    /// `wicket_a_<room>`.
    pub cookie: String,
}

impl ProtectedPath {
    /// Precomputes the cookie name.
    pub fn new(rule: ProtectedRule) -> Self {
        let cookie = format!("wicket_a_{}", rule.room);
        ProtectedPath { rule, cookie }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checker() -> JwtAdmission {
        let text = "issuer = \"wicket\"\n[[keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"hs-secret-for-admission-tests-0123456789\"\n";
        let tokens: TokensConfig = toml::from_str(text).unwrap();
        JwtAdmission::new(&tokens, &|p| PathBuf::from(p)).unwrap()
    }

    fn token(room: &str, exp_in: i64, secret: &str) -> String {
        let now = crate::bot::unix_now() as i64;
        let mut h = jsonwebtoken::Header::new(Algorithm::HS256);
        h.typ = Some("admission+jwt".into());
        h.kid = Some("hs-1".into());
        let claims = serde_json::json!({"iss": "wicket", "aud": room, "sub": "fan", "jti": "0123456789abcdef01", "iat": now - 1,
            "nbf": now - 1, "exp": now + exp_in, "room": room, "pos": 3});
        jsonwebtoken::encode(&h, &claims, &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes())).unwrap()
    }

    fn rule(room: &str) -> ProtectedRule {
        ProtectedRule { path: "/buy".into(), room: room.into(), event: None }
    }

    #[test]
    fn remembered_tokens_still_meet_their_room_expiry_and_signature() {
        let a = checker();
        let t = token("r1", 60, "hs-secret-for-admission-tests-0123456789");
        assert_eq!(a.verify(&t, &rule("r1")).unwrap().pos, 3);
        assert_eq!(a.remembered(), 1);
        assert_eq!(a.verify(&t, &rule("r1")).unwrap().sub, "fan", "a hit");
        assert!(a.verify(&t, &rule("r2")).is_err(), "the same token for another room is checked in full, and refused");
        let forged = token("r1", 60, "another-secret-entirely-0123456789abcdef");
        assert!(a.verify(&forged, &rule("r1")).is_err());
        let mut tampered = t.clone();
        tampered.push('x');
        assert!(a.verify(&tampered, &rule("r1")).is_err());
        // An entry past its expiry (leeway included) is refused and forgotten.
        let key = a.verified.key(&t, &rule("r1"));
        a.verified.map.get_mut(&key).unwrap().exp = crate::bot::unix_now() - 11;
        assert!(a.verify(&t, &rule("r1")).is_err());
        assert!(a.verified.map.get(&key).is_none());
        a.verify(&token("r1", 60, "hs-secret-for-admission-tests-0123456789"), &rule("r1")).unwrap();
        for mut c in a.verified.map.iter_mut() {
            c.exp = 0;
        }
        a.prune();
        assert_eq!(a.remembered(), 0);
    }
}
