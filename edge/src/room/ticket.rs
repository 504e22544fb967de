//! Queue tickets: the `wicket_q_<room>` cookie, HMAC-signed under the edge secret, holding the
//! room, the position, when it was issued, the device it was issued to and its owner (a keyed tag
//! of the identity that joined: the user id, else the device id). Forged, tampered, other-room,
//! other-device and other-owner tickets do not verify, so one place admits one person. A ticket given
//! while the room's bot check is still owed says so (its position field ends in `o`): it keeps the
//! place, but is admitted only once the room state has the check as given (the visitor joins again: the same place when
//! the edge still knows its user or device, else a new one at the back). A place in the invite
//! lane (`[rooms.invite] share`) carries its lane place too (`<position>+<lane place>`).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;

use crate::identity::Signer;

/// Longest ticket cookie value accepted.
pub const MAX_TICKET_LEN: usize = 512;
const LABEL: &[u8] = b"queue-ticket-v2";

/// A verified (or freshly issued) queue ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTicket {
    /// Room id.
    pub room: String,
    /// Position in the room's queue (1-based, in join order).
    pub position: u64,
    /// Unix seconds.
    pub issued_at: u64,
    /// Device id it was issued to.
    pub device: String,
    /// Tag of the identity that joined ([`crate::room::Rooms::owner`]).
    pub owner: String,
    /// Made while the room's bot check was owed: at its turn the room state is asked whether it
    /// was given since ([`crate::room::Rooms::status`]).
    pub owed: bool,
    /// The lane place (1-based; 0: not in the invite lane): admitted once the lane's release
    /// reaches it, or `position` is reached, whichever comes first.
    pub lane: u64,
}

/// Cookie name of a room's ticket.
pub fn cookie_name(room: &str) -> String {
    format!("wicket_q_{room}")
}

impl QueueTicket {
    /// The cookie value `b64(payload).b64(mac)`.
    pub fn encode(&self, signer: &Signer) -> String {
        let owed = if self.owed { "o" } else { "" };
        let lane = if self.lane > 0 { format!("+{}", self.lane) } else { String::new() };
        let payload = format!("{}|{}{lane}{owed}|{}|{}|{}", self.room, self.position, self.issued_at, self.owner, self.device);
        let tag = signer.mac(LABEL, payload.as_bytes());
        format!("{}.{}", B64.encode(payload.as_bytes()), B64.encode(&tag[..16]))
    }

    /// Checks MAC, room, device and owner; `None` for anything else.
    pub fn decode(value: &str, signer: &Signer, room: &str, device: &str, owner: &str) -> Option<QueueTicket> {
        if value.len() > MAX_TICKET_LEN {
            return None;
        }
        let (payload, tag) = value.split_once('.')?;
        let payload = B64.decode(payload).ok()?;
        let tag = B64.decode(tag).ok()?;
        if tag.len() != 16 || !signer.verify(LABEL, &payload, &tag) {
            return None;
        }
        let text = std::str::from_utf8(&payload).ok()?;
        let mut parts = text.splitn(5, '|');
        let (r, pos, iat, own, dev) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if r != room || dev != device || own != owner {
            return None;
        }
        let (pos, owed) = match pos.strip_suffix('o') {
            Some(p) => (p, true),
            None => (pos, false),
        };
        let (pos, lane) = match pos.split_once('+') {
            Some((p, l)) => (p, l.parse().ok().filter(|l| *l > 0)?),
            None => (pos, 0),
        };
        let position = pos.parse().ok().filter(|p| *p > 0)?;
        Some(QueueTicket { room: r.to_owned(), position, issued_at: iat.parse().ok()?, device: dev.to_owned(), owner: own.to_owned(), owed, lane })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let s = Signer::new(b"secret-secret-secret");
        let t = QueueTicket { room: "r1".into(), position: 7, issued_at: 100, device: "dev".into(), owner: "ownerA".into(), owed: false, lane: 0 };
        let v = t.encode(&s);
        assert_eq!(QueueTicket::decode(&v, &s, "r1", "dev", "ownerA"), Some(t.clone()));
        assert_eq!(QueueTicket::decode(&v, &s, "r2", "dev", "ownerA"), None, "other room");
        assert_eq!(QueueTicket::decode(&v, &s, "r1", "other", "ownerA"), None, "other device");
        assert_eq!(QueueTicket::decode(&v, &s, "r1", "dev", "ownerB"), None, "another person's ticket");
        assert_eq!(QueueTicket::decode(&v, &Signer::new(b"another-secret-xx"), "r1", "dev", "ownerA"), None, "forged");
        let (p, tag) = v.split_once('.').unwrap();
        let edited = B64.encode(b"r1|1|100|ownerA|dev");
        assert_eq!(QueueTicket::decode(&format!("{edited}.{tag}"), &s, "r1", "dev", "ownerA"), None, "edited position");
        let edited = B64.encode(b"r1|7|100|ownerB|dev");
        assert_eq!(QueueTicket::decode(&format!("{edited}.{tag}"), &s, "r1", "dev", "ownerB"), None, "edited owner");
        assert_eq!(QueueTicket::decode(&format!("{p}.AAAA{tag}"), &s, "r1", "dev", "ownerA"), None, "tampered tag");
        assert_eq!(QueueTicket::decode("garbage", &s, "r1", "dev", "ownerA"), None);
        // A ticket with the check owed: the flag is signed, it cannot be dropped.
        let owed = QueueTicket { owed: true, ..t.clone() };
        let v = owed.encode(&s);
        assert_eq!(QueueTicket::decode(&v, &s, "r1", "dev", "ownerA"), Some(owed));
        let (_, tag) = v.split_once('.').unwrap();
        let proven = B64.encode(b"r1|7|100|ownerA|dev");
        assert_eq!(QueueTicket::decode(&format!("{proven}.{tag}"), &s, "r1", "dev", "ownerA"), None, "owed flag dropped");
        // A lane place: signed with the place, it cannot be added or changed.
        let lane = QueueTicket { lane: 3, ..t.clone() };
        let v = lane.encode(&s);
        assert_eq!(QueueTicket::decode(&v, &s, "r1", "dev", "ownerA"), Some(lane));
        let (_, tag) = v.split_once('.').unwrap();
        let moved = B64.encode(b"r1|7+1|100|ownerA|dev");
        assert_eq!(QueueTicket::decode(&format!("{moved}.{tag}"), &s, "r1", "dev", "ownerA"), None, "lane place edited");
        let plain = t.encode(&s);
        let (_, tag) = plain.split_once('.').unwrap();
        let added = B64.encode(b"r1|7+1|100|ownerA|dev");
        assert_eq!(QueueTicket::decode(&format!("{added}.{tag}"), &s, "r1", "dev", "ownerA"), None, "lane place added");
    }
}
