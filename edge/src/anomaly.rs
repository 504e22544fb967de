//! Anomaly rules: a device seen with more than N user ids, and a client with more than M rejects,
//! within a window. A tripped rule blocks the device or IP for a while and counts in metrics.
//!
//! State is one small entry per active device (with users) and per rejected client, in sharded
//! maps, capped at [`MAX_TRACKED`] entries each and pruned by the background task.
//!
//! A flash sale puts a million devices in the device map, so its entry is kept small: the device
//! id as a 64-bit keyed hash, the window start in seconds, and the first user's hash inline (most
//! devices only ever see one user); the rare device with more users gets a small heap list. That is
//! 32 bytes of entry per device, against ~200 for a `String` key with a `Vec` of users.

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::config::AnomalyConfig;

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

/// The users one device was seen with in the current window.
struct UsersSeen {
    /// Window start, in seconds since [`Anomaly::epoch`].
    since: u32,
    /// The first user's hash.
    first: u64,
    /// Further distinct users' hashes, at most `device_max_users` of them. Boxed so the common
    /// entry (one user) pays one pointer for it, not a `Vec`'s three words.
    #[allow(clippy::box_collection)]
    more: Option<Box<Vec<u64>>>,
}

impl UsersSeen {
    fn new(since: u32, user: u64) -> Self {
        UsersSeen { since, first: user, more: None }
    }

    fn count(&self) -> usize {
        1 + self.more.as_ref().map_or(0, |m| m.len())
    }

    fn contains(&self, user: u64) -> bool {
        self.first == user || self.more.as_ref().is_some_and(|m| m.contains(&user))
    }
}

/// The anomaly detector.
pub struct Anomaly {
    cfg: AnomalyConfig,
    window: Duration,
    epoch: Instant,
    /// Keys device ids into the device map (a per-process random key: no aimed collisions).
    hasher: std::collections::hash_map::RandomState,
    device_users: DashMap<u64, UsersSeen>,
    rejects: DashMap<IpAddr, (Instant, u32)>,
}

impl Anomaly {
    /// From validated config.
    pub fn new(cfg: &AnomalyConfig) -> Self {
        Anomaly {
            cfg: cfg.clone(),
            window: Duration::from_secs(cfg.window_seconds),
            epoch: Instant::now(),
            hasher: std::collections::hash_map::RandomState::new(),
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
        let window = u32::try_from(self.cfg.window_seconds).unwrap_or(u32::MAX);
        let key = self.hasher.hash_one(device);
        if let Some(mut seen) = self.device_users.get_mut(&key) {
            if now.saturating_sub(seen.since) > window {
                *seen = UsersSeen::new(now, user_hash);
                return false;
            }
            // Past the trip the device is blocked; more users need not be remembered.
            if seen.contains(user_hash) || seen.count() > max {
                return false;
            }
            seen.more.get_or_insert_with(Default::default).push(user_hash);
            return seen.count() == max + 1;
        }
        if self.device_users.len() < MAX_TRACKED {
            self.device_users.insert(key, UsersSeen::new(now, user_hash));
        }
        false
    }

    /// Records a reject of `ip`; true when the rule trips now.
    pub fn observe_reject(&self, ip: IpAddr) -> bool {
        let max = self.cfg.client_max_rejects;
        if max == 0 {
            return false;
        }
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
            .get(ip)
            .filter(|e| Instant::now().duration_since(e.0) <= self.window)
            .map_or(0, |e| e.1)
    }

    /// Drops entries whose window has passed.
    pub fn prune(&self) {
        let now = Instant::now();
        let (now_s, window) = (self.now_s(), u32::try_from(self.cfg.window_seconds).unwrap_or(u32::MAX));
        self.device_users.retain(|_, s| now_s.saturating_sub(s.since) <= window);
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
        assert_eq!(a.tracked().0, 2);
    }

    #[test]
    fn a_device_entry_is_small() {
        // The device map holds one of these per device during a sale (a million of them).
        assert!(std::mem::size_of::<(u64, UsersSeen)>() <= 32);
    }

    #[test]
    fn client_with_too_many_rejects_trips_once() {
        let a = Anomaly::new(&AnomalyConfig { client_max_rejects: 3, ..Default::default() });
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let trips: Vec<bool> = (0..6).map(|_| a.observe_reject(ip)).collect();
        assert_eq!(trips, [false, false, false, true, false, false]);
        assert_eq!(a.recent_rejects(&ip), 6);
    }
}
