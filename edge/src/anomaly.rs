//! Anomaly rules: a device seen with more than N user ids, and a client with more than M rejects,
//! within a window. A tripped rule blocks the device or IP for a while and counts in metrics.
//!
//! State is one small entry per active device (with users) and per rejected client, in sharded
//! maps, capped at [`MAX_TRACKED`] entries each and pruned by the background task.

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

struct UsersSeen {
    since: Instant,
    /// Hashes of user ids, at most `device_max_users + 1`.
    users: Vec<u64>,
}

/// The anomaly detector.
pub struct Anomaly {
    cfg: AnomalyConfig,
    window: Duration,
    device_users: DashMap<String, UsersSeen>,
    rejects: DashMap<IpAddr, (Instant, u32)>,
}

impl Anomaly {
    /// From validated config.
    pub fn new(cfg: &AnomalyConfig) -> Self {
        Anomaly {
            cfg: cfg.clone(),
            window: Duration::from_secs(cfg.window_seconds),
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

    /// Records that `device` was seen with user `user_hash`; true when the rule trips now.
    pub fn observe_user(&self, device: &str, user_hash: u64) -> bool {
        let max = self.cfg.device_max_users;
        if max == 0 {
            return false;
        }
        let now = Instant::now();
        if let Some(mut seen) = self.device_users.get_mut(device) {
            if now.duration_since(seen.since) > self.window {
                seen.since = now;
                seen.users.clear();
            }
            if seen.users.contains(&user_hash) {
                return false;
            }
            seen.users.push(user_hash);
            return seen.users.len() == max + 1;
        }
        if self.device_users.len() < MAX_TRACKED {
            self.device_users.insert(device.to_owned(), UsersSeen { since: now, users: vec![user_hash] });
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
        self.device_users.retain(|_, s| now.duration_since(s.since) <= self.window);
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
