//! The test cookie of a room (`test-mode = true`): `wicket_t_<room>`, issued by the admin API
//! (`POST /admin/rooms/<room>/test-cookie`) to an operator who wants to try the room before it
//! goes live. In test mode only a fan carrying a valid one meets the room (queue, admission,
//! protected paths); everyone else passes as if the room were off.
//!
//! Value: `<expires-at>.<nonce>.<tag>`: Unix seconds, 16 random bytes and a 16-byte MAC (base64url)
//! of the room, the expiry and the nonce under the edge secret (edges sharing a room share the
//! secret, so any of them takes a cookie another issued). A forged, expired or other room's cookie
//! is no cookie.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;

use crate::identity::Signer;

/// Longest life of a test cookie (a week), and its default (an hour).
pub const MAX_SECONDS: u64 = 7 * 86_400;
/// See [`MAX_SECONDS`].
pub const DEFAULT_SECONDS: u64 = 3600;

/// The cookie's name for `room`.
pub fn cookie_name(room: &str) -> String {
    format!("wicket_t_{room}")
}

fn tag(signer: &Signer, room: &str, expires_at: u64, nonce: &str) -> [u8; 32] {
    signer.mac(b"room-tester", format!("{room}|{expires_at}|{nonce}").as_bytes())
}

/// A new test cookie value for `room`, valid until `expires_at` (Unix s).
pub fn issue(signer: &Signer, room: &str, expires_at: u64) -> String {
    let nonce = B64.encode(rand::random::<[u8; 16]>());
    let t = tag(signer, room, expires_at, &nonce);
    format!("{expires_at}.{nonce}.{}", B64.encode(&t[..16]))
}

/// Whether `value` is a test cookie of `room`, unexpired at `now_s`, signed with this secret.
pub fn verify(signer: &Signer, room: &str, value: &str, now_s: u64) -> bool {
    let mut parts = value.split('.');
    let (Some(exp), Some(nonce), Some(t), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else { return false };
    let Ok(expires_at) = exp.parse::<u64>() else { return false };
    if expires_at <= now_s || nonce.len() != 22 || t.len() != 22 {
        return false;
    }
    let Ok(t) = B64.decode(t) else { return false };
    signer.verify(b"room-tester", format!("{room}|{expires_at}|{nonce}").as_bytes(), &t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_cookie_is_bound_to_its_room_its_secret_and_its_expiry() {
        let s = Signer::new(b"edge-secret-0123456789");
        let v = issue(&s, "r1", 2_000);
        assert!(verify(&s, "r1", &v, 1_999));
        assert!(!verify(&s, "r1", &v, 2_000), "expired");
        assert!(!verify(&s, "r2", &v, 1_000), "another room");
        assert!(!verify(&Signer::new(b"another-secret-0123456789"), "r1", &v, 1_000), "another secret");
        let later = v.replacen("2000", "9000", 1);
        assert!(!verify(&s, "r1", &later, 1_000), "a forged expiry");
        for junk in ["", "x", "1.2.3", "2000..", &format!("{v}.x")] {
            assert!(!verify(&s, "r1", junk, 1_000), "{junk}");
        }
    }
}
