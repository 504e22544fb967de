//! Rate limits in nginx's words (`rate = "10r/s"`, `burst`, `nodelay`), enforced with `governor`.
//!
//! nginx's `limit_req` is a leaky bucket: each key has an `excess` that drains at `rate` and
//! grows by one per request; a request is refused when the new excess would exceed `burst`.
//! So `burst = b` admits `b + 1` requests at once, then one per `1/rate`. That is exactly GCRA
//! with a period of `1/rate` and a burst size of `b + 1`, which is what governor implements
//! (one `AtomicU64` per key, no approximation, no false positives between keys).
//!
//! Without `nodelay`, nginx holds the requests it admits into the burst until the bucket has
//! drained to them, so they leave at `rate`. Here a second governor limiter with burst 1 paces
//! them: an admitted request waits until its pacing slot comes. The first limiter bounds how many
//! can wait (`burst`), the second when each goes.
//!
//! nginx parses the rate as an integer count of milli-requests per second (`n * 1000 / 60` for
//! `r/m`, truncated), and so does [`NginxRate::parse`].

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use serde::{Deserialize, Serialize};

use crate::check::{ConfigIssue, check_prefix, issue};

/// What a limit counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LimitKey {
    /// Client IP (after trusted proxies).
    Ip,
    /// The site's user id; requests without one are not counted by this rule.
    User,
    /// The edge's device id (signed cookie, else a header fingerprint).
    Device,
}

/// `[[edge.limits]]`: one nginx `limit_req`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LimitRule {
    /// Path prefix the rule applies to. A rule applies to the queue's own paths (`/queue/`)
    /// only when its path is under `/queue/`, so a site-wide limit never starves queue polls.
    pub path: String,
    /// `ip`, `user` or `device`.
    pub key: LimitKey,
    /// `"<n>r/s"` or `"<n>r/m"`, as nginx parses it.
    pub rate: String,
    /// Requests allowed beyond the rate (nginx `burst`). Default 0.
    #[serde(default)]
    pub burst: u32,
    /// Serve burst requests at once instead of pacing them at the rate (nginx `nodelay`).
    /// Default false.
    #[serde(default)]
    pub nodelay: bool,
    /// Serve this many burst requests at once and pace the rest (nginx `delay=`). Default: none
    /// (all paced, unless `nodelay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<u32>,
    /// `key = "ip"` only: IPv6 clients are counted by this prefix (32..=64). Default 64: one
    /// household or phone is given a /64; a rule at 48 or 56, with a larger rate, bounds what one
    /// holder of a whole /48 or /56 delegation (many /64s) can do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix: Option<u8>,
    /// `key = "ip"` only: IPv4 clients are counted by this prefix (16..=32). Default 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_prefix: Option<u8>,
}

impl LimitRule {
    /// Adds this rule's problems, each at `path` (`edge.limits[2]`) and its key. `user_known`: the edge
    /// is told who the user is (`edge.user-header` or `edge.user-cookie`), which `key = "user"` needs.
    pub fn validate(&self, path: &str, user_known: bool, out: &mut Vec<ConfigIssue>) {
        check_prefix(out, &format!("{path}.path"), &self.path);
        if let Err(m) = NginxRate::parse(&self.rate) {
            out.push(issue(format!("{path}.rate"), m));
        }
        if self.burst > 1_000_000 {
            out.push(issue(format!("{path}.burst"), "must be at most 1000000"));
        }
        if let Some(d) = self.delay {
            if self.nodelay {
                out.push(issue(format!("{path}.delay"), "delay and nodelay exclude each other (nginx: nodelay is delay = burst)"));
            } else if d > self.burst {
                out.push(issue(format!("{path}.delay"), "must be at most burst"));
            }
        }
        if self.key == LimitKey::User && !user_known {
            out.push(issue(format!("{path}.key"), "key = \"user\" needs edge.user-header or edge.user-cookie"));
        }
        for (field, value, range) in [("ipv6-prefix", self.ipv6_prefix, 32..=64u8), ("ipv4-prefix", self.ipv4_prefix, 16..=32u8)] {
            let Some(v) = value else { continue };
            if self.key != LimitKey::Ip {
                out.push(issue(format!("{path}.{field}"), "only a rule with key = \"ip\" counts by address"));
            } else if !range.contains(&v) {
                out.push(issue(format!("{path}.{field}"), format!("must be between {} and {}", range.start(), range.end())));
            }
        }
    }

    /// The network this rule counts a client address by (`client` as
    /// [`crate::identity::client_address`] gives it: an IPv6 address already cut to its /64).
    pub fn network(&self, client: IpAddr) -> IpAddr {
        match client {
            IpAddr::V4(v4) => match self.ipv4_prefix {
                Some(p) if p < 32 => IpAddr::V4((u32::from(v4) & (u32::MAX << (32 - p))).into()),
                _ => client,
            },
            IpAddr::V6(v6) => match self.ipv6_prefix {
                Some(p) if p < 64 => IpAddr::V6((u128::from(v6) & (u128::MAX << (128 - p))).into()),
                _ => client,
            },
        }
    }
}

/// A rate as nginx stores it: requests per second × 1000, integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NginxRate {
    /// Milli-requests per second.
    pub milli_per_second: u64,
}

impl NginxRate {
    /// Parses `"<n>r/s"` or `"<n>r/m"` (n ≥ 1).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (num, scale) = if let Some(n) = s.strip_suffix("r/s") {
            (n, 1)
        } else if let Some(n) = s.strip_suffix("r/m") {
            (n, 60)
        } else {
            return Err(format!("rate must look like \"10r/s\" or \"30r/m\": {s:?}"));
        };
        let n: u64 = num.parse().map_err(|_| format!("rate must look like \"10r/s\" or \"30r/m\": {s:?}"))?;
        if n == 0 || n > 1_000_000 {
            return Err(format!("rate must be between 1 and 1000000: {s:?}"));
        }
        Ok(NginxRate { milli_per_second: n * 1000 / scale })
    }

    /// Time between two requests at this rate (nginx's drain of 1000 units).
    pub fn period(self) -> Duration {
        Duration::from_nanos(1_000_000_000_000 / self.milli_per_second.max(1))
    }
}

/// What a request is counted by in one rule: an IP, or a keyed hash of a user or device id.
///
/// User and device ids are hashed with a per-process random SipHash key, so the limiter never
/// allocates on the request path and an attacker cannot aim collisions (2^-64 per pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    /// Client IP.
    Ip(IpAddr),
    /// Hashed user or device id.
    Id(u64),
}

/// The keyed hasher for [`Subject::Id`].
#[derive(Clone)]
pub struct IdHasher(std::collections::hash_map::RandomState);

impl IdHasher {
    /// A fresh random key.
    pub fn new() -> Self {
        IdHasher(std::collections::hash_map::RandomState::new())
    }

    /// The subject for an id.
    pub fn subject(&self, id: &str) -> Subject {
        Subject::Id(self.0.hash_one(id))
    }
}

impl Default for IdHasher {
    fn default() -> Self {
        Self::new()
    }
}

/// The outcome of one rule for one request.
/// A keyed GCRA limiter on the millisecond clock.
type KeyedLimiter = RateLimiter<Subject, DefaultKeyedStateStore<Subject>, MilliClock, NoOpMiddleware<MilliInstant>>;

/// The limiters' clock: monotonic time truncated to whole milliseconds, as nginx's
/// `ngx_current_msec` is. nginx computes `limit_req` in milliseconds, so two requests exactly one
/// period apart pass even when the second is handled a fraction of a millisecond early (about
/// nine times in ten at 10r/s without burst); a nanosecond clock refused them about half the time,
/// and an imported nginx config behaved differently at its exact rate (issue #17).
#[derive(Debug, Clone, Copy)]
pub struct MilliClock {
    origin: std::time::Instant,
}

/// Process-wide origin, so every limiter's instants compare.
static CLOCK_ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

impl Default for MilliClock {
    fn default() -> Self {
        MilliClock { origin: *CLOCK_ORIGIN.get_or_init(std::time::Instant::now) }
    }
}

impl Clock for MilliClock {
    type Instant = MilliInstant;

    fn now(&self) -> MilliInstant {
        MilliInstant::floor(self.origin.elapsed().as_nanos() as u64)
    }
}

/// Nanoseconds since the clock's origin, a whole number of milliseconds when read from the clock
/// (limiters add periods in nanoseconds to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MilliInstant(u64);

impl MilliInstant {
    /// The instant `nanos` after the origin, truncated to the millisecond.
    pub fn floor(nanos: u64) -> Self {
        MilliInstant(nanos / 1_000_000 * 1_000_000)
    }
}

impl std::ops::Add<Nanos> for MilliInstant {
    type Output = MilliInstant;

    fn add(self, d: Nanos) -> MilliInstant {
        MilliInstant(self.0.saturating_add(d.as_u64()))
    }
}

impl Reference for MilliInstant {
    fn duration_since(&self, earlier: Self) -> Nanos {
        Nanos::new(self.0.saturating_sub(earlier.0))
    }

    fn saturating_sub(&self, duration: Nanos) -> Self {
        MilliInstant(self.0.saturating_sub(duration.as_u64()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go now.
    Pass,
    /// Go after pacing (no `nodelay`): wait for [`RuleLimiter::pace`].
    Paced,
    /// Over the limit; try again after this long.
    Refuse(Duration),
}

/// One configured rule and its limiters.
pub struct RuleLimiter {
    /// The rule as configured.
    pub rule: LimitRule,
    /// Parsed rate.
    pub rate: NginxRate,
    /// Admits `burst + 1` at once, then one per period.
    admit: KeyedLimiter,
    /// Paces admitted requests at the rate (rules without `nodelay` and with a burst).
    pacer: Option<KeyedLimiter>,
    clock: MilliClock,
}

impl RuleLimiter {
    /// Builds the limiters of a validated rule.
    pub fn new(rule: LimitRule) -> Result<Self, String> {
        let rate = NginxRate::parse(&rule.rate)?;
        let burst = NonZeroU32::new(rule.burst.saturating_add(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(rate.period()).ok_or("rate too high")?.allow_burst(burst);
        // nginx `delay = d`: the first d requests of a burst go at once, the rest are paced
        // (no delay = 0; nodelay = burst).
        let delay = if rule.nodelay { rule.burst } else { rule.delay.unwrap_or(0) };
        let pacer = if delay < rule.burst {
            let free = NonZeroU32::new(delay.saturating_add(1)).unwrap_or(NonZeroU32::MIN);
            let q = Quota::with_period(rate.period()).ok_or("rate too high")?.allow_burst(free);
            Some(RateLimiter::dashmap_with_clock(q, MilliClock::default()))
        } else {
            None
        };
        Ok(RuleLimiter { rule, rate, admit: RateLimiter::dashmap_with_clock(quota, MilliClock::default()), pacer, clock: MilliClock::default() })
    }

    /// Whether the rule covers this path. Rules under `/` skip `queue_prefix` unless they name it.
    pub fn applies(&self, path: &str, queue_prefix: &str) -> bool {
        path.starts_with(self.rule.path.as_str())
            && (!path.starts_with(queue_prefix) || self.rule.path.starts_with(queue_prefix))
    }

    /// Counts one request of `subject`.
    pub fn check(&self, subject: &Subject) -> Verdict {
        match self.admit.check_key(subject) {
            Ok(()) if self.pacer.is_some() => Verdict::Paced,
            Ok(()) => Verdict::Pass,
            Err(not_until) => Verdict::Refuse(not_until.wait_time_from(self.clock.now())),
        }
    }

    /// Waits for the pacing slot of an admitted request (no-op for `nodelay` rules).
    /// Bounded: at most `burst` requests per key can be waiting, each at most `burst` periods.
    pub async fn pace(&self, subject: &Subject) {
        let Some(pacer) = &self.pacer else { return };
        loop {
            match pacer.check_key(subject) {
                Ok(()) => return,
                Err(not_until) => tokio::time::sleep(not_until.wait_time_from(self.clock.now())).await,
            }
        }
    }

    /// Live keys (for the admin API and metrics).
    pub fn keys(&self) -> usize {
        self.admit.len() + self.pacer.as_ref().map_or(0, |p| p.len())
    }

    /// Forgets keys whose state is back to "fresh" and returns memory to the allocator.
    pub fn prune(&self) {
        self.admit.retain_recent();
        self.admit.shrink_to_fit();
        if let Some(p) = &self.pacer {
            p.retain_recent();
            p.shrink_to_fit();
        }
    }
}

/// All configured rules.
pub struct Limits {
    /// In config order.
    pub rules: Vec<RuleLimiter>,
    /// Hashes user and device ids into subjects.
    pub hasher: IdHasher,
    /// Whether any rule counts by user or device (so identity must be computed).
    pub needs_identity: bool,
}

impl Limits {
    /// Builds every rule.
    pub fn new(rules: &[LimitRule]) -> Result<Self, String> {
        let rules = rules.iter().cloned().map(RuleLimiter::new).collect::<Result<Vec<_>, _>>()?;
        let needs_identity = rules.iter().any(|r| r.rule.key != LimitKey::Ip);
        Ok(Limits { rules, hasher: IdHasher::new(), needs_identity })
    }

    /// Prunes every rule.
    pub fn prune(&self) {
        self.rules.iter().for_each(RuleLimiter::prune);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(rate: &str, burst: u32, nodelay: bool) -> RuleLimiter {
        RuleLimiter::new(LimitRule { path: "/".into(), key: LimitKey::Ip, rate: rate.into(), burst, nodelay, delay: None, ipv6_prefix: None, ipv4_prefix: None })
            .unwrap()
    }

    /// A clock the test sets, read through the limiters' millisecond truncation.
    #[derive(Clone)]
    struct SetClock(std::sync::Arc<std::sync::atomic::AtomicU64>, bool);

    impl Clock for SetClock {
        type Instant = MilliInstant;
        fn now(&self) -> MilliInstant {
            let ns = self.0.load(std::sync::atomic::Ordering::SeqCst);
            if self.1 { MilliInstant::floor(ns) } else { MilliInstant(ns) }
        }
    }

    #[test]
    fn a_request_one_period_later_passes_when_handled_a_fraction_of_a_millisecond_early() {
        // 10r/s, no burst. The first request is handled at 1000.9 ms, the next 99.7 ms later
        // (1100.6 ms): nginx sees 1000 and 1100 ms, a whole period, and lets it through.
        let quota = Quota::with_period(NginxRate::parse("10r/s").unwrap().period()).unwrap();
        for (millis, passes) in [(true, true), (false, false)] {
            let t = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1_000_900_000));
            let limiter = RateLimiter::dashmap_with_clock(quota, SetClock(t.clone(), millis));
            let who = Subject::Id(7);
            assert!(limiter.check_key(&who).is_ok());
            t.store(1_050_900_000, std::sync::atomic::Ordering::SeqCst);
            assert!(limiter.check_key(&who).is_err(), "half a period later");
            t.store(1_100_600_000, std::sync::atomic::Ordering::SeqCst);
            assert_eq!(limiter.check_key(&who).is_ok(), passes, "millisecond clock: {millis}");
        }
    }

    #[test]
    fn rates_parse_like_nginx() {
        assert_eq!(NginxRate::parse("10r/s").unwrap().milli_per_second, 10_000);
        assert_eq!(NginxRate::parse("30r/m").unwrap().milli_per_second, 500);
        // nginx truncates: 1r/m is 16 milli-requests per second, one request per 62.5 s.
        assert_eq!(NginxRate::parse("1r/m").unwrap().period(), Duration::from_millis(62_500));
        assert_eq!(NginxRate::parse("10r/s").unwrap().period(), Duration::from_millis(100));
        for bad in ["10", "r/s", "0r/s", "-1r/s", "10r/h", "1.5r/s", " 10r/s"] {
            assert!(NginxRate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn burst_admits_burst_plus_one_then_refuses_with_retry_after() {
        let r = rule("1r/s", 3, true);
        let ip = Subject::Ip("192.0.2.1".parse().unwrap());
        for _ in 0..4 {
            assert_eq!(r.check(&ip), Verdict::Pass);
        }
        match r.check(&ip) {
            Verdict::Refuse(d) => assert!(d > Duration::from_millis(500) && d <= Duration::from_secs(1), "{d:?}"),
            v => panic!("{v:?}"),
        }
        // Other keys are untouched.
        assert_eq!(r.check(&Subject::Ip("192.0.2.2".parse().unwrap())), Verdict::Pass);
    }

    #[test]
    fn without_nodelay_the_burst_is_paced() {
        let r = rule("10r/s", 2, false);
        let ip = Subject::Ip("192.0.2.1".parse().unwrap());
        assert_eq!(r.check(&ip), Verdict::Paced);
        assert_eq!(r.check(&ip), Verdict::Paced);
        assert_eq!(r.check(&ip), Verdict::Paced);
        assert!(matches!(r.check(&ip), Verdict::Refuse(_)));
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let start = std::time::Instant::now();
        rt.block_on(async {
            r.pace(&ip).await;
            r.pace(&ip).await;
            r.pace(&ip).await;
        });
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(180) && took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn queue_paths_have_their_own_budget() {
        let site = rule("1r/s", 0, true);
        assert!(site.applies("/buy", "/queue/"));
        assert!(!site.applies("/queue/ev/status", "/queue/"));
        let q = RuleLimiter::new(LimitRule {
            path: "/queue/".into(),
            key: LimitKey::Ip,
            rate: "1r/s".into(),
            burst: 0,
            nodelay: true,
            delay: None,
            ipv6_prefix: None,
            ipv4_prefix: None,
        })
        .unwrap();
        assert!(q.applies("/queue/ev/status", "/queue/"));
    }

    #[test]
    fn a_rule_counts_by_its_prefixes_and_refuses_bad_ones_with_their_path() {
        let ip = |s: &str| crate::identity::client_address(s.parse().unwrap());
        let mut r = LimitRule { path: "/".into(), key: LimitKey::Ip, rate: "1r/s".into(), burst: 0, nodelay: true, delay: None, ipv6_prefix: None, ipv4_prefix: None };
        assert_eq!(r.network(ip("2001:db8:aa:1:2:3:4:5")), ip("2001:db8:aa:1::"), "the default: the /64");
        assert_eq!(r.network(ip("198.51.100.7")), ip("198.51.100.7"));
        r.ipv6_prefix = Some(48);
        r.ipv4_prefix = Some(24);
        assert_eq!(r.network(ip("2001:db8:aa:ff01::9")), ip("2001:db8:aa::"));
        assert_eq!(r.network(ip("198.51.100.7")), ip("198.51.100.0"));
        assert_eq!(r.network(ip("::ffff:198.51.100.200")), ip("198.51.100.0"), "IPv4-mapped is IPv4");
        r.ipv6_prefix = Some(56);
        r.ipv4_prefix = Some(16);
        assert_eq!(r.network(ip("2001:db8:aa:12ff::1")), ip("2001:db8:aa:1200::"));
        assert_eq!(r.network(ip("198.51.100.7")), ip("198.51.0.0"));
        r.ipv6_prefix = Some(64);
        r.ipv4_prefix = Some(32);
        assert_eq!(r.network(ip("2001:db8:aa:1:2:3:4:5")), ip("2001:db8:aa:1::"));
        assert_eq!(r.network(ip("198.51.100.7")), ip("198.51.100.7"));
        let problems = |r: &LimitRule| {
            let mut out = Vec::new();
            r.validate("edge.limits[1]", true, &mut out);
            out.into_iter().map(|i| format!("{}: {}", i.path, i.message)).collect::<Vec<_>>()
        };
        assert!(problems(&r).is_empty(), "{:?}", problems(&r));
        r.ipv6_prefix = Some(65);
        r.ipv4_prefix = Some(8);
        assert_eq!(problems(&r), ["edge.limits[1].ipv6-prefix: must be between 32 and 64", "edge.limits[1].ipv4-prefix: must be between 16 and 32"]);
        r.key = LimitKey::User;
        r.ipv6_prefix = Some(48);
        r.ipv4_prefix = None;
        assert_eq!(problems(&r), ["edge.limits[1].ipv6-prefix: only a rule with key = \"ip\" counts by address"]);
    }

    /// 100,000 distinct clients, each within its limit (burst + 1 requests at once): none is
    /// refused, and the state shrinks back once they go quiet.
    #[test]
    fn hundred_thousand_distinct_ips_within_limit_are_never_refused() {
        let r = rule("2r/s", 4, true);
        for i in 0..100_000u32 {
            let ip = Subject::Ip(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i)));
            for _ in 0..5 {
                assert_eq!(r.check(&ip), Verdict::Pass, "client {i} refused");
            }
        }
        assert_eq!(r.keys(), 100_000);
    }

    #[test]
    fn pruning_forgets_idle_keys() {
        let r = rule("1000r/s", 0, true);
        for i in 0..1000u32 {
            r.check(&Subject::Ip(IpAddr::from(std::net::Ipv4Addr::from(i))));
        }
        std::thread::sleep(Duration::from_millis(5));
        r.prune();
        assert_eq!(r.keys(), 0);
    }
}
