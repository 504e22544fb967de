//! Anomaly rules: a device seen with more than N user ids, and a client with more than M rejects,
//! within a window. A tripped rule blocks the device or IP for a while and counts in metrics.
//!
//! State is one small entry per active device (with users) and per rejected client, in sharded
//! maps, capped at [`MAX_TRACKED`] entries each and pruned by the background task.
//!
//! A flash sale puts a million devices in front of this rule, nearly all with one user each, so a
//! device's *first* sighting costs no map entry: it goes into a fixed table of first sightings
//! (one `u64` slot per device hash: a 32-bit tag and a 32-bit user hash; 8 MiB, pages touched as
//! used). Only a device seen with a second user gets an entry in the map (its window start, its user
//! hashes). A slot another device overwrites loses that first sighting, so under a flood of new
//! devices the rule may need one user more to trip; tables are cleared once a window. Memory per
//! ordinary visitor: nothing beyond the fixed table.

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use crate::check::{ConfigIssue, issue};
use crate::identity::client_address;

/// `[edge.anomaly]`: rules that block for a while and are counted in metrics.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct AnomalyConfig {
    /// A device seen with more than this many user ids in a window is blocked. 0 = off. Default 5.
    pub device_max_users: usize,
    /// A client IP with more than this many rejects in a window is blocked. 0 = off. Default 200.
    pub client_max_rejects: u32,
    /// Window length, seconds. Default 60.
    pub window_seconds: u64,
    /// How long an anomaly block lasts, seconds. Default 300.
    pub block_seconds: u64,
}

impl Default for AnomalyConfig {
    fn default() -> Self {
        AnomalyConfig { device_max_users: 5, client_max_rejects: 200, window_seconds: 60, block_seconds: 300 }
    }
}

impl AnomalyConfig {
    /// Adds this section's problems, each at `path` (`edge.anomaly`) and its key.
    pub fn validate(&self, path: &str, out: &mut Vec<ConfigIssue>) {
        if self.window_seconds == 0 || self.window_seconds > 86_400 {
            out.push(issue(format!("{path}.window-seconds"), "must be between 1 and 86400"));
        }
        if self.block_seconds == 0 || self.block_seconds > 86_400 * 7 {
            out.push(issue(format!("{path}.block-seconds"), "must be between 1 and 604800"));
        }
        if self.device_max_users > 1000 {
            out.push(issue(format!("{path}.device-max-users"), "must be at most 1000"));
        }
    }
}

/// Most devices and most clients tracked at once; beyond this new ones are not tracked until
/// pruning frees room (the limits still apply to them).
pub const MAX_TRACKED: usize = 1_000_000;

/// Which rule tripped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tripped {
    /// A device with too many user ids.
    DeviceUsers,
    /// A client with too many rejects.
    ClientRejects,
}

impl Tripped {
    /// Metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Tripped::DeviceUsers => "device_users",
            Tripped::ClientRejects => "client_rejects",
        }
    }
}

/// Slots of the first-sightings table (8 MiB).
const FIRST_SLOTS: usize = 1 << 20;

/// The users a device with more than one was seen with in the current window (32-bit user hashes:
/// a collision can only under-count).
struct UsersSeen {
    /// Window start, in seconds since [`Anomaly::epoch`].
    since: u32,
    /// Distinct users' hashes, at most `device_max_users + 1` of them.
    users: Vec<u32>,
}

/// The anomaly detector.
pub struct Anomaly {
    cfg: AnomalyConfig,
    window: Duration,
    /// The same, in whole seconds (device entries keep their start in seconds).
    window_s: u32,
    epoch: Instant,
    /// Keys device ids into the device map (a per-process random key: no aimed collisions).
    hasher: std::collections::hash_map::RandomState,
    /// First sightings by device hash: `tag << 32 | user`, 0 when empty.
    first: Box<[AtomicU64]>,
    /// When `first` was last cleared, seconds since `epoch`.
    first_cleared: AtomicU32,
    /// Devices seen with two or more users.
    device_users: DashMap<u64, UsersSeen>,
    rejects: DashMap<IpAddr, (Instant, u32)>,
}

impl Anomaly {
    /// From validated config.
    pub fn new(cfg: &AnomalyConfig) -> Self {
        Anomaly {
            cfg: cfg.clone(),
            window: Duration::from_secs(cfg.window_seconds),
            window_s: u32::try_from(cfg.window_seconds).unwrap_or(u32::MAX),
            epoch: Instant::now(),
            hasher: std::collections::hash_map::RandomState::new(),
            first: (0..if cfg.device_max_users > 0 { FIRST_SLOTS } else { 0 }).map(|_| AtomicU64::new(0)).collect(),
            first_cleared: AtomicU32::new(0),
            device_users: DashMap::new(),
            rejects: DashMap::new(),
        }
    }

    /// How long a tripped rule blocks.
    pub fn block_for(&self) -> Duration {
        Duration::from_secs(self.cfg.block_seconds)
    }

    /// Whether the device-users rule is on.
    pub fn tracks_devices(&self) -> bool {
        self.cfg.device_max_users > 0
    }

    fn now_s(&self) -> u32 {
        u32::try_from(self.epoch.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    /// Records that `device` was seen with user `user_hash`; true when the rule trips now.
    pub fn observe_user(&self, device: &str, user_hash: u64) -> bool {
        let max = self.cfg.device_max_users;
        if max == 0 {
            return false;
        }
        let now = self.now_s();
        let window = self.window_s;
        let key = self.hasher.hash_one(device);
        let user = user_hash as u32;
        if let Some(mut seen) = self.device_users.get_mut(&key) {
            if now.saturating_sub(seen.since) > window {
                *seen = UsersSeen { since: now, users: vec![user] };
                return false;
            }
            // Past the trip the device is blocked; more users need not be remembered.
            if seen.users.contains(&user) || seen.users.len() > max {
                return false;
            }
            seen.users.push(user);
            return seen.users.len() == max + 1;
        }
        // Not in the map: the first-sightings table. The tag is never 0, so 0 is an empty slot.
        let slot = &self.first[(key as usize) % self.first.len()];
        let tag = (key >> 32) as u32 | 1;
        let mine = u64::from(tag) << 32 | u64::from(user);
        let old = slot.swap(mine, Ordering::Relaxed);
        if old == mine || (old >> 32) as u32 != tag {
            // The same user again, or this device's first sighting (maybe over another's).
            return false;
        }
        // A second user on a device seen before: it gets an entry with both.
        slot.store(0, Ordering::Relaxed);
        let users = vec![old as u32, user];
        let trips = users.len() == max + 1;
        if self.device_users.len() < MAX_TRACKED {
            self.device_users.insert(key, UsersSeen { since: now, users });
        }
        trips
    }

    /// Records a reject of `ip` (its [`client_address`]: an IPv6 address counts by its /64); true
    /// when the rule trips now.
    pub fn observe_reject(&self, ip: IpAddr) -> bool {
        let max = self.cfg.client_max_rejects;
        if max == 0 {
            return false;
        }
        let ip = client_address(ip);
        let now = Instant::now();
        if self.rejects.len() >= MAX_TRACKED && !self.rejects.contains_key(&ip) {
            return false;
        }
        let mut e = self.rejects.entry(ip).or_insert((now, 0));
        if now.duration_since(e.0) > self.window {
            *e = (now, 0);
        }
        e.1 += 1;
        e.1 == max + 1
    }

    /// Rejects of `ip` in the current window.
    pub fn recent_rejects(&self, ip: &IpAddr) -> u32 {
        self.rejects
            .get(&client_address(*ip))
            .filter(|e| Instant::now().duration_since(e.0) <= self.window)
            .map_or(0, |e| e.1)
    }

    /// Drops entries whose window has passed.
    pub fn prune(&self) {
        let now = Instant::now();
        let (now_s, window) = (self.now_s(), self.window_s);
        self.device_users.retain(|_, s| now_s.saturating_sub(s.since) <= window);
        if now_s.saturating_sub(self.first_cleared.load(Ordering::Relaxed)) >= window {
            self.first_cleared.store(now_s, Ordering::Relaxed);
            for slot in self.first.iter() {
                slot.store(0, Ordering::Relaxed);
            }
        }
        self.rejects.retain(|_, e| now.duration_since(e.0) <= self.window);
        self.device_users.shrink_to_fit();
        self.rejects.shrink_to_fit();
    }

    /// Tracked devices and clients.
    pub fn tracked(&self) -> (usize, usize) {
        (self.device_users.len(), self.rejects.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_with_too_many_users_trips_once() {
        let a = Anomaly::new(&AnomalyConfig { device_max_users: 2, ..Default::default() });
        assert!(!a.observe_user("d", 1));
        assert!(!a.observe_user("d", 2));
        assert!(!a.observe_user("d", 2));
        assert!(a.observe_user("d", 3));
        assert!(!a.observe_user("d", 4));
        assert!(!a.observe_user("e", 1));
        assert_eq!(a.tracked().0, 1, "only the device with several users has an entry");
    }

    #[test]
    fn one_user_devices_cost_no_map_entry() {
        let a = Anomaly::new(&AnomalyConfig { device_max_users: 1, ..Default::default() });
        for i in 0..10_000u64 {
            assert!(!a.observe_user(&format!("dev-{i}"), i));
            assert!(!a.observe_user(&format!("dev-{i}"), i), "the same user again");
        }
        assert_eq!(a.tracked().0, 0, "first sightings live in the fixed table");
        // With max 1, the second user on a device trips at once. (The last device seen: an earlier
        // one's first sighting may have been overwritten by a later device in the same slot, about
        // a 1% chance per device here, with a random hash key per run — the table forgets, never blocks.)
        assert!(a.observe_user("dev-9999", 99));
        assert_eq!(a.tracked().0, 1);
    }

    #[test]
    fn client_with_too_many_rejects_trips_once() {
        let a = Anomaly::new(&AnomalyConfig { client_max_rejects: 3, ..Default::default() });
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let trips: Vec<bool> = (0..6).map(|_| a.observe_reject(ip)).collect();
        assert_eq!(trips, [false, false, false, true, false, false]);
        assert_eq!(a.recent_rejects(&ip), 6);
    }

    #[test]
    fn rejects_of_one_ipv6_64_count_together() {
        let a = Anomaly::new(&AnomalyConfig { client_max_rejects: 3, ..Default::default() });
        let trips: Vec<bool> = (0..4).map(|i| a.observe_reject(format!("2001:db8:5:6::{i}").parse().unwrap())).collect();
        assert_eq!(trips, [false, false, false, true], "rotating the interface id is one client");
        assert_eq!(a.recent_rejects(&"2001:db8:5:6:abcd::1".parse().unwrap()), 4);
        assert_eq!(a.recent_rejects(&"2001:db8:5:7::1".parse().unwrap()), 0);
    }
}
