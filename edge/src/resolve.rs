//! Upstream names followed while the edge runs (issue #41): `edge.core` and `edge.origin` are looked up
//! at start (a name that does not resolve then is a config error with its key), and again every
//! `edge.resolve-every-ms` and soon after a connection to the current address fails — a recreated
//! container, a moved Service or a rotated DNS name is followed without a restart.
//!
//! The system resolver (`getaddrinfo`: /etc/hosts, then DNS as nsswitch.conf says) gives no TTL, so the
//! interval stands in for it; a lookup runs on a blocking thread, never on a request. An answer that still
//! holds the address in use keeps it (several addresses behind one name do not make the edge hop between
//! them); else the edge moves to the answer's first address, and says so in the log. A failed lookup keeps
//! the last address. IP literals and the embedded core are never looked up again.
//!
//! Connections to an address no longer in use drain on their own: both connection pools (Pingora's and the
//! fast path's) are keyed by address, so no new request takes an old connection, requests in flight on one
//! finish, and the idle ones close within the pools' 5 s idle time.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;

/// Fewest milliseconds between two lookups of one name after connection failures.
pub const FAILED_LOOKUP_GAP: Duration = Duration::from_secs(1);

/// One upstream's name and the address requests go to now.
#[derive(Debug)]
pub struct Name {
    /// `host:port`, for logs.
    shown: String,
    host: String,
    port: u16,
    /// An IP literal or the embedded core: the address never changes.
    fixed: bool,
    current: ArcSwap<SocketAddr>,
    /// A connection to `current` failed since the last lookup.
    failed: AtomicBool,
    /// Milliseconds (of the edge's clock) of the last lookup.
    looked_ms: AtomicU64,
}

impl Name {
    /// `host:port` looked up now (start-up); `Err` says why it cannot be used.
    pub fn lookup(host: &str, port: u16) -> Result<Arc<Name>, String> {
        let fixed = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok();
        let addrs = lookup(host, port)?;
        Ok(Arc::new(Name {
            shown: format!("{host}:{port}"),
            host: host.to_string(),
            port,
            fixed,
            current: ArcSwap::from_pointee(addrs[0]),
            failed: AtomicBool::new(false),
            looked_ms: AtomicU64::new(0),
        }))
    }

    /// An address that is never looked up (the embedded core).
    pub fn fixed(addr: SocketAddr) -> Arc<Name> {
        Arc::new(Name {
            shown: addr.to_string(),
            host: addr.ip().to_string(),
            port: addr.port(),
            fixed: true,
            current: ArcSwap::from_pointee(addr),
            failed: AtomicBool::new(false),
            looked_ms: AtomicU64::new(0),
        })
    }

    /// Where requests go now.
    pub fn addr(&self) -> SocketAddr {
        **self.current.load()
    }

    /// A connection to [`addr`](Self::addr) failed: the name is looked up again soon (at most once per
    /// [`FAILED_LOOKUP_GAP`]).
    pub fn connect_failed(&self) {
        if !self.fixed {
            self.failed.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a lookup is due at `now_ms`: the interval has passed, or a connection failed and the last
    /// lookup is [`FAILED_LOOKUP_GAP`] old.
    pub fn due(&self, now_ms: u64, every: Duration) -> bool {
        if self.fixed {
            return false;
        }
        let since = now_ms.saturating_sub(self.looked_ms.load(Ordering::Relaxed));
        since >= every.as_millis() as u64
            || (self.failed.load(Ordering::Relaxed) && since >= FAILED_LOOKUP_GAP.as_millis() as u64)
    }

    /// Looks the name up again (blocking): keeps the address in use when the answer still has it, else
    /// moves to the answer's first one. Returns the move, if any.
    pub fn refresh(&self, now_ms: u64) -> Result<Option<(SocketAddr, SocketAddr)>, String> {
        self.looked_ms.store(now_ms, Ordering::Relaxed);
        self.failed.store(false, Ordering::Relaxed);
        let addrs = lookup(&self.host, self.port)?;
        let old = self.addr();
        if addrs.contains(&old) {
            return Ok(None);
        }
        self.current.store(Arc::new(addrs[0]));
        Ok(Some((old, addrs[0])))
    }

    /// `host:port` as configured.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

/// The addresses of `host:port`, in the resolver's order; `Err` when there is none.
fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> =
        (host.trim_start_matches('[').trim_end_matches(']'), port).to_socket_addrs().map_err(|e| format!("cannot resolve {host}:{port}: {e}"))?.collect();
    if addrs.is_empty() {
        return Err(format!("cannot resolve {host}:{port}: no address"));
    }
    Ok(addrs)
}

/// Looks up every name that is due (see [`Name::due`]), each on a blocking thread, and logs what moved.
/// `which` names each for the log (`edge.core`, `edge.origin`).
pub async fn refresh_due(names: &[(&'static str, Arc<Name>)], now_ms: u64, every: Duration) {
    for (which, name) in names {
        if !name.due(now_ms, every) {
            continue;
        }
        let n = name.clone();
        match tokio::task::spawn_blocking(move || n.refresh(now_ms)).await {
            Ok(Ok(Some((old, new)))) => {
                tracing::warn!(upstream = which, name = name.shown(), %old, %new, "the upstream's name moved: new requests go to the new address, connections to the old one drain")
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => tracing::warn!(upstream = which, "looking the upstream up again failed, keeping {}: {e}", name.addr()),
            Err(e) => tracing::warn!(upstream = which, "the lookup did not finish: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_fixed_and_never_due() {
        let n = Name::lookup("127.0.0.1", 80).unwrap();
        assert_eq!(n.addr(), "127.0.0.1:80".parse().unwrap());
        n.connect_failed();
        assert!(!n.due(u64::MAX, Duration::ZERO));
        let v6 = Name::lookup("[::1]", 81).unwrap();
        assert_eq!(v6.addr(), "[::1]:81".parse().unwrap());
        assert!(!Name::fixed("127.0.0.1:9".parse().unwrap()).due(u64::MAX, Duration::ZERO));
    }

    #[test]
    fn a_name_is_due_at_its_interval_and_soon_after_a_failure() {
        let n = Name::lookup("localhost", 80).unwrap();
        let every = Duration::from_secs(10);
        n.refresh(100_000).unwrap();
        assert!(!n.due(100_500, every));
        assert!(n.due(110_000, every));
        n.connect_failed();
        assert!(!n.due(100_900, every), "not before the gap");
        assert!(n.due(101_000, every));
        n.refresh(101_000).unwrap();
        assert!(!n.due(102_500, every), "the failure was answered");
    }

    #[test]
    fn the_address_in_use_is_kept_while_the_answer_has_it() {
        let n = Name::lookup("localhost", 80).unwrap();
        let first = n.addr();
        assert_eq!(n.refresh(1).unwrap(), None);
        assert_eq!(n.addr(), first);
        assert!(Name::lookup("no-such-host.invalid", 80).unwrap_err().contains("no-such-host.invalid:80"));
    }
}
