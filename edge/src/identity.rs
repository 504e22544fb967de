//! Who is asking: client IP (trusting `X-Forwarded-For` only from configured proxies), the site's
//! user id (header or cookie), and the edge's own device id (signed `wicket_d` cookie, else a
//! fingerprint of stable request headers).

use std::net::IpAddr;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use ipnet::IpNet;
use pingora::http::RequestHeader;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Name of the device cookie.
pub const DEVICE_COOKIE: &str = "wicket_d";
/// Longest user id accepted from a header or cookie; longer ones count as absent.
pub const MAX_USER_LEN: usize = 128;

/// The address a client is counted, limited and blocked by: an IPv4 address as it is, also
/// when an IPv6 address carries it (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`,
/// NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::/48`, Teredo `2001:0::/32` with the client's
/// address inverted in its last 32 bits — so many IPv4 clients behind a translator are not one, and
/// one is not many); any other IPv6 address by the /64 it is in — one household or phone is given
/// a whole /64, so counting single IPv6 addresses would let anyone with one rotate past every
/// per-address rule. (A /48 or /56 delegation still gives its holder many /64s: a limit rule may
/// count by a wider prefix, [`crate::limit::LimitRule::network`].)
pub fn client_address(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    let bits = u128::from(v6);
    let low32 = bits as u32;
    let v4 = |n: u32| IpAddr::V4(std::net::Ipv4Addr::from(n));
    if let Some(mapped) = v6.to_ipv4_mapped() {
        return IpAddr::V4(mapped);
    }
    if bits >> 32 == 0x64_ff9b << 64 || (bits >> 32 == 0 && low32 > 1) {
        // NAT64's well-known prefix; IPv4-compatible (but not :: and ::1).
        return v4(low32);
    }
    if bits >> 112 == 0x2002 {
        return v4((bits >> 80) as u32);
    }
    if bits >> 96 == 0x2001_0000 {
        return v4(!low32);
    }
    IpAddr::V6(std::net::Ipv6Addr::from(bits & !u128::from(u64::MAX)))
}

/// HMAC-SHA256 under the edge secret, with a label per purpose so one MAC never verifies as
/// another (device id vs PoW challenge vs bot pass).
#[derive(Clone)]
pub struct Signer {
    /// HMAC keyed once: each MAC clones it instead of hashing the key pads again (status polls
    /// check two MACs each).
    keyed: Hmac<Sha256>,
}

impl Signer {
    /// Derives the signing key from the configured secret.
    pub fn new(secret: &[u8]) -> Self {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"wicket-edge-v1").expect("hmac takes any key length");
        mac.update(secret);
        Self::with_key(&mac.finalize().into_bytes())
    }

    /// A random key, for when no secret is configured.
    pub fn random() -> Self {
        Self::with_key(&rand::random::<[u8; 32]>())
    }

    fn with_key(key: &[u8]) -> Self {
        Signer { keyed: <Hmac<Sha256> as Mac>::new_from_slice(key).expect("hmac takes any key length") }
    }

    /// MAC of `label || 0 || data`.
    pub fn mac(&self, label: &[u8], data: &[u8]) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        mac.update(label);
        mac.update(&[0]);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// Checks a truncated MAC in constant time.
    pub fn verify(&self, label: &[u8], data: &[u8], tag: &[u8]) -> bool {
        let full = self.mac(label, data);
        tag.len() >= 16 && tag.len() <= 32 && bool::from(full[..tag.len()].ct_eq(tag))
    }
}

/// Resolves the client IP.
#[derive(Debug, Clone, Default)]
pub struct ClientIp {
    trusted: Vec<IpNet>,
}

impl ClientIp {
    /// Peers in `trusted` may speak for their clients through `X-Forwarded-For`.
    pub fn new(trusted: Vec<IpNet>) -> Self {
        ClientIp { trusted }
    }

    /// Whether no proxy is trusted, so the client is always the socket peer.
    pub fn is_plain(&self) -> bool {
        self.trusted.is_empty()
    }

    /// The client IP when no proxy is trusted: the peer, IPv4-mapped addresses unmapped.
    pub fn resolve_peer(&self, peer: IpAddr) -> IpAddr {
        canonical(peer)
    }

    /// True when `ip` is one of the trusted proxies.
    pub fn is_trusted(&self, ip: &IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(ip))
    }

    /// The socket peer, unless it is a trusted proxy: then the right-most `X-Forwarded-For`
    /// entry that is not itself a trusted proxy. A malformed entry stops the walk at the last
    /// address known to be good.
    pub fn resolve<H: HeadView + ?Sized>(&self, peer: IpAddr, req: &H) -> IpAddr {
        let peer = canonical(peer);
        if self.trusted.is_empty() || !self.is_trusted(&peer) {
            return peer;
        }
        let mut values: Vec<&[u8]> = Vec::new();
        req.each("x-forwarded-for", &mut |v| {
            values.push(v);
            false
        });
        let mut current = peer;
        for value in values.iter().rev() {
            // What `HeaderValue::to_str` takes: visible ASCII and tabs.
            let Some(s) = value.iter().all(|b| *b == b'\t' || (0x20..0x7f).contains(b)).then(|| std::str::from_utf8(value).ok()).flatten() else {
                return current;
            };
            for entry in s.rsplit(',') {
                let Some(ip) = parse_forwarded_ip(entry.trim()) else { return current };
                current = canonical(ip);
                if !self.is_trusted(&current) {
                    return current;
                }
            }
        }
        current
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn parse_forwarded_ip(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    // "1.2.3.4:5678" or "[::1]:5678"
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Some(sa.ip());
    }
    None
}

/// Read access to a request head: Pingora's parsed [`RequestHeader`], or the raw `httparse`
/// headers of the public listener's fast path ([`crate::front::http1`]), so both paths read identity the
/// same way.
pub trait HeadView {
    /// Calls `f` with every value of header `name` (lower case), in order, until it returns true.
    fn each<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a [u8]) -> bool);
}

impl HeadView for RequestHeader {
    fn each<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a [u8]) -> bool) {
        for v in self.headers.get_all(name) {
            if f(v.as_bytes()) {
                return;
            }
        }
    }
}

impl HeadView for http::HeaderMap {
    fn each<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a [u8]) -> bool) {
        for v in self.get_all(name) {
            if f(v.as_bytes()) {
                return;
            }
        }
    }
}

impl HeadView for [httparse::Header<'_>] {
    fn each<'a>(&'a self, name: &str, f: &mut dyn FnMut(&'a [u8]) -> bool) {
        for h in self.iter().filter(|h| h.name.eq_ignore_ascii_case(name)) {
            if f(h.value) {
                return;
            }
        }
    }
}

/// The value of cookie `name` in the request, if present (first match wins).
pub fn cookie<'a, H: HeadView + ?Sized>(req: &'a H, name: &str) -> Option<&'a str> {
    let mut found = None;
    req.each("cookie", &mut |value| {
        let Ok(s) = std::str::from_utf8(value) else { return false };
        found = s.split(';').filter_map(|pair| pair.trim().split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| v.trim_matches('"'));
        found.is_some()
    });
    found
}

/// The first value of header `name`, raw.
pub fn header_bytes<'a, H: HeadView + ?Sized>(req: &'a H, name: &str) -> Option<&'a [u8]> {
    let mut found = None;
    req.each(name, &mut |v| {
        found = Some(v);
        true
    });
    found
}

/// A header as UTF-8 text, if present and valid.
pub fn header<'a, H: HeadView + ?Sized>(req: &'a H, name: &str) -> Option<&'a str> {
    header_bytes(req, name).and_then(|v| std::str::from_utf8(v).ok())
}

/// Where the site's user id is found.
#[derive(Debug, Clone, Default)]
pub struct UserSource {
    /// Header name.
    pub header: Option<String>,
    /// Cookie name.
    pub cookie: Option<String>,
}

impl UserSource {
    /// The user id, if present, non-empty, printable and not over [`MAX_USER_LEN`].
    pub fn user<'a, H: HeadView + ?Sized>(&self, req: &'a H) -> Option<&'a str> {
        let raw = self
            .header
            .as_deref()
            .and_then(|h| header(req, h))
            .or_else(|| self.cookie.as_deref().and_then(|c| cookie(req, c)))?;
        let ok = !raw.is_empty() && raw.len() <= MAX_USER_LEN && raw.bytes().all(|b| b.is_ascii_graphic());
        ok.then_some(raw)
    }
}

/// Where a device id came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// A valid `wicket_d` cookie.
    Cookie(String),
    /// No valid cookie: a fingerprint of IP and stable headers; a new cookie is set.
    Fingerprint(String),
}

impl Device {
    /// The id (`fp-…` for fingerprints).
    pub fn id(&self) -> &str {
        match self {
            Device::Cookie(id) | Device::Fingerprint(id) => id,
        }
    }
}

/// Issues and checks device ids.
#[derive(Clone)]
pub struct DeviceIds {
    signer: Signer,
}

impl DeviceIds {
    /// Uses `signer` for the cookie MAC.
    pub fn new(signer: Signer) -> Self {
        DeviceIds { signer }
    }

    /// A new device id and its cookie value `<id>.<mac>`.
    pub fn issue(&self) -> (String, String) {
        let id = B64.encode(rand::random::<[u8; 16]>());
        let tag = self.signer.mac(b"device", id.as_bytes());
        let value = format!("{id}.{}", B64.encode(&tag[..16]));
        (id, value)
    }

    /// The id in a cookie value, if the MAC holds.
    pub fn verify<'a>(&self, value: &'a str) -> Option<&'a str> {
        let (id, tag) = value.split_once('.')?;
        if id.len() != 22 || tag.len() != 22 {
            return None;
        }
        let tag = B64.decode(tag).ok()?;
        self.signer.verify(b"device", id.as_bytes(), &tag).then_some(id)
    }

    /// The request's device: the cookie's id, or a fingerprint of IP + User-Agent +
    /// Accept-Language + Accept-Encoding for clients that keep no cookies.
    pub fn device<H: HeadView + ?Sized>(&self, req: &H, ip: IpAddr) -> Device {
        if let Some(id) = cookie(req, DEVICE_COOKIE).and_then(|v| self.verify(v)) {
            return Device::Cookie(id.to_owned());
        }
        let mut data = Vec::with_capacity(256);
        data.extend_from_slice(ip.to_string().as_bytes());
        for h in ["user-agent", "accept-language", "accept-encoding"] {
            data.push(0);
            data.extend_from_slice(header_bytes(req, h).unwrap_or_default());
        }
        let tag = self.signer.mac(b"fingerprint", &data);
        Device::Fingerprint(format!("fp-{}", hex::encode(&tag[..10])))
    }
}

/// A `Set-Cookie` value with the edge's attributes (`Path=/`, `HttpOnly`, `SameSite=Lax`, and
/// `Secure` when the edge says so).
pub fn set_cookie(name: &str, value: &str, max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> RequestHeader {
        let mut r = RequestHeader::build("GET", b"/", None).unwrap();
        for (k, v) in headers {
            r.append_header(k.to_string(), *v).unwrap();
        }
        r
    }

    #[test]
    fn xff_is_ignored_from_untrusted_peers_and_walked_from_trusted_ones() {
        let c = ClientIp::new(vec!["10.0.0.0/8".parse().unwrap()]);
        let r = req(&[("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.0.0.9")]);
        assert_eq!(c.resolve("203.0.113.5".parse().unwrap(), &r), "203.0.113.5".parse::<IpAddr>().unwrap());
        assert_eq!(c.resolve("10.1.1.1".parse().unwrap(), &r), "1.2.3.4".parse::<IpAddr>().unwrap());
        let bad = req(&[("x-forwarded-for", "garbage, 10.0.0.9")]);
        assert_eq!(c.resolve("10.1.1.1".parse().unwrap(), &bad), "10.0.0.9".parse::<IpAddr>().unwrap());
        let none = req(&[]);
        assert_eq!(c.resolve("10.1.1.1".parse().unwrap(), &none), "10.1.1.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn device_cookies_verify_and_forgeries_fall_back_to_fingerprints() {
        let d = DeviceIds::new(Signer::new(b"0123456789abcdef"));
        let (id, value) = d.issue();
        assert_eq!(d.verify(&value), Some(id.as_str()));
        let forged = format!("{}.{}", "A".repeat(22), &value[23..]);
        assert_eq!(d.verify(&forged), None);
        assert_eq!(d.verify("x"), None);
        assert_eq!(d.verify(&format!("{value}x")), None);
        let other = DeviceIds::new(Signer::new(b"another secret!!"));
        assert_eq!(other.verify(&value), None);
        let r = req(&[("cookie", &format!("a=b; wicket_d={value}"))]);
        assert_eq!(d.device(&r, "1.1.1.1".parse().unwrap()), Device::Cookie(id));
        let r = req(&[("cookie", "wicket_d=junk"), ("user-agent", "x")]);
        assert!(matches!(d.device(&r, "1.1.1.1".parse().unwrap()), Device::Fingerprint(_)));
    }

    #[test]
    fn user_ids_come_from_header_or_cookie_and_are_bounded() {
        let u = UserSource { header: Some("x-user-id".into()), cookie: Some("uid".into()) };
        assert_eq!(u.user(&req(&[("x-user-id", "alice")])), Some("alice"));
        assert_eq!(u.user(&req(&[("cookie", "uid=bob")])), Some("bob"));
        assert_eq!(u.user(&req(&[("x-user-id", &"a".repeat(200))])), None);
        assert_eq!(u.user(&req(&[])), None);
    }

    #[test]
    fn a_client_address_is_an_ipv4_address_or_an_ipv6_64() {
        let at = |s: &str| client_address(s.parse().unwrap()).to_string();
        assert_eq!(at("192.0.2.7"), "192.0.2.7");
        assert_eq!(at("::ffff:192.0.2.7"), "192.0.2.7", "IPv4-mapped");
        assert_eq!(at("::192.0.2.7"), "192.0.2.7", "IPv4-compatible");
        assert_eq!(at("64:ff9b::c000:207"), "192.0.2.7", "NAT64");
        assert_eq!(at("2002:c000:207:1:2:3:4:5"), "192.0.2.7", "6to4");
        assert_eq!(at("2001:0:4136:e378:8000:63bf:3fff:fdf8"), "192.0.2.7", "Teredo: the client's address inverted");
        assert_eq!(at("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::", "any other IPv6: its /64");
        assert_eq!(at("::1"), "::", "loopback is IPv6 (its /64)");
        assert_eq!(at("::"), "::");
        // Two NAT64-translated clients are two clients.
        assert_ne!(at("64:ff9b::c000:207"), at("64:ff9b::c000:208"));
    }
}
