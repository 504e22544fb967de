//! Blocked IPs/CIDRs, users and devices: from config, from the admin API, and for a while from
//! the anomaly rules.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::check::{ConfigIssue, issue, parse_net};
use crate::identity::client_address;

/// `[edge.blocklist]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct BlocklistConfig {
    /// IPs or CIDRs.
    pub ips: Vec<String>,
    /// User ids.
    pub users: Vec<String>,
    /// Device ids.
    pub devices: Vec<String>,
}

impl BlocklistConfig {
    /// Adds this section's problems, each at `path` (`edge.blocklist`) and its key.
    pub fn validate(&self, path: &str, out: &mut Vec<ConfigIssue>) {
        for (i, ip) in self.ips.iter().enumerate() {
            if parse_net(ip).is_none() {
                out.push(issue(format!("{path}.ips[{i}]"), format!("not an IP or CIDR: {ip:?}")));
            }
        }
    }
}

/// Most entries of each kind (admin input is bounded like any other).
pub const MAX_ENTRIES: usize = 100_000;

/// A set of entries to add or remove (`POST`/`DELETE /admin/blocklist`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockEntries {
    /// IPs or CIDRs.
    #[serde(default)]
    pub ips: Vec<String>,
    /// User ids.
    #[serde(default)]
    pub users: Vec<String>,
    /// Device ids.
    #[serde(default)]
    pub devices: Vec<String>,
}

#[derive(Default)]
struct Sets {
    nets: Vec<IpNet>,
    users: HashSet<String>,
    devices: HashSet<String>,
    /// Anomaly blocks: until when.
    temp_ips: HashMap<IpAddr, Instant>,
    temp_devices: HashMap<String, Instant>,
}

/// The blocklist. Reads take a shared lock only when something is listed.
#[derive(Default)]
pub struct Blocklist {
    sets: RwLock<Sets>,
    /// False while every set is empty, so unlisted traffic pays one atomic load.
    any: AtomicBool,
}

impl Blocklist {
    /// From config (validated).
    pub fn new(cfg: &BlocklistConfig) -> Self {
        let b = Blocklist::default();
        let _ = b.add(&BlockEntries { ips: cfg.ips.clone(), users: cfg.users.clone(), devices: cfg.devices.clone() });
        b
    }

    fn refresh_any(&self, s: &Sets) {
        let any = !(s.nets.is_empty()
            && s.users.is_empty()
            && s.devices.is_empty()
            && s.temp_ips.is_empty()
            && s.temp_devices.is_empty());
        self.any.store(any, Ordering::Relaxed);
    }

    /// Whether anything at all is listed (the static fast path needs nothing listed).
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Whether the IP is blocked.
    pub fn ip(&self, ip: &IpAddr) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let s = self.sets.read();
        s.nets.iter().any(|n| n.contains(ip)) || s.temp_ips.get(&client_address(*ip)).is_some_and(|t| *t > Instant::now())
    }

    /// Whether the user is blocked.
    pub fn user(&self, user: &str) -> bool {
        self.any.load(Ordering::Relaxed) && self.sets.read().users.contains(user)
    }

    /// Whether the device is blocked.
    pub fn device(&self, device: &str) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let s = self.sets.read();
        s.devices.contains(device) || s.temp_devices.get(device).is_some_and(|t| *t > Instant::now())
    }

    /// Adds entries; nothing is added when any entry is invalid (every problem is returned).
    pub fn add(&self, e: &BlockEntries) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        let mut nets = Vec::new();
        for (i, ip) in e.ips.iter().enumerate() {
            match parse_net(ip) {
                Some(n) => nets.push(n.trunc()),
                None => problems.push(format!("ips[{i}]: not an IP or CIDR: {ip:?}")),
            }
        }
        for (kind, list) in [("users", &e.users), ("devices", &e.devices)] {
            for (i, v) in list.iter().enumerate() {
                if v.is_empty() || v.len() > 128 {
                    problems.push(format!("{kind}[{i}]: must be 1 to 128 characters"));
                }
            }
        }
        let mut s = self.sets.write();
        if s.nets.len() + nets.len() > MAX_ENTRIES
            || s.users.len() + e.users.len() > MAX_ENTRIES
            || s.devices.len() + e.devices.len() > MAX_ENTRIES
        {
            problems.push(format!("at most {MAX_ENTRIES} entries of each kind"));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        for n in nets {
            if !s.nets.contains(&n) {
                s.nets.push(n);
            }
        }
        s.users.extend(e.users.iter().cloned());
        s.devices.extend(e.devices.iter().cloned());
        self.refresh_any(&s);
        Ok(())
    }

    /// Removes entries (also lifts anomaly blocks on the same IPs and devices).
    pub fn remove(&self, e: &BlockEntries) -> Result<(), Vec<String>> {
        let mut nets = Vec::new();
        let mut problems = Vec::new();
        for (i, ip) in e.ips.iter().enumerate() {
            match parse_net(ip) {
                Some(n) => nets.push(n.trunc()),
                None => problems.push(format!("ips[{i}]: not an IP or CIDR: {ip:?}")),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let mut s = self.sets.write();
        s.nets.retain(|n| !nets.contains(n));
        for n in &nets {
            // A temporary block holds an IPv6 /64: naming any address in it lifts it.
            s.temp_ips.retain(|ip, _| !n.contains(ip) && client_address(n.network()) != *ip);
        }
        for u in &e.users {
            s.users.remove(u);
        }
        for d in &e.devices {
            s.devices.remove(d);
            s.temp_devices.remove(d);
        }
        self.refresh_any(&s);
        Ok(())
    }

    /// Blocks a client address for a while (anomaly rule): an IPv4 address, or the IPv6 /64 `ip`
    /// is in ([`client_address`]).
    pub fn block_ip_for(&self, ip: IpAddr, d: Duration) {
        let mut s = self.sets.write();
        if s.temp_ips.len() < MAX_ENTRIES {
            s.temp_ips.insert(client_address(ip), Instant::now() + d);
        }
        self.refresh_any(&s);
    }

    /// Blocks a device for a while (anomaly rule).
    pub fn block_device_for(&self, device: &str, d: Duration) {
        let mut s = self.sets.write();
        if s.temp_devices.len() < MAX_ENTRIES {
            s.temp_devices.insert(device.to_owned(), Instant::now() + d);
        }
        self.refresh_any(&s);
    }

    /// Drops expired anomaly blocks.
    pub fn prune(&self) {
        let now = Instant::now();
        let mut s = self.sets.write();
        s.temp_ips.retain(|_, t| *t > now);
        s.temp_devices.retain(|_, t| *t > now);
        self.refresh_any(&s);
    }

    /// Everything listed, as JSON (`GET /admin/blocklist`).
    pub fn to_json(&self) -> serde_json::Value {
        let now = Instant::now();
        let s = self.sets.read();
        let mut users: Vec<_> = s.users.iter().cloned().collect();
        users.sort();
        let mut devices: Vec<_> = s.devices.iter().cloned().collect();
        devices.sort();
        let temp_ips: Vec<_> = s
            .temp_ips
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(ip, t)| {
                let ip = if ip.is_ipv6() { format!("{ip}/64") } else { ip.to_string() };
                serde_json::json!({"ip": ip, "seconds_left": (*t - now).as_secs()})
            })
            .collect();
        let temp_devices: Vec<_> = s
            .temp_devices
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(d, t)| serde_json::json!({"device": d, "seconds_left": (*t - now).as_secs()}))
            .collect();
        serde_json::json!({
            "ips": s.nets.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            "users": users,
            "devices": devices,
            "temporary": {"ips": temp_ips, "devices": temp_devices},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_users_devices_and_temporary_blocks() {
        let b = Blocklist::new(&BlocklistConfig {
            ips: vec!["10.0.0.0/8".into(), "192.0.2.7".into()],
            users: vec!["mallory".into()],
            devices: vec![],
        });
        assert!(b.ip(&"10.2.3.4".parse().unwrap()));
        assert!(b.ip(&"192.0.2.7".parse().unwrap()));
        assert!(!b.ip(&"192.0.2.8".parse().unwrap()));
        assert!(b.user("mallory") && !b.user("alice"));
        assert!(b.add(&BlockEntries { ips: vec!["nope".into()], users: vec!["x".into()], ..Default::default() }).is_err());
        assert!(!b.user("x"), "nothing is added when an entry is invalid");
        b.block_device_for("d1", Duration::from_secs(60));
        assert!(b.device("d1"));
        b.remove(&BlockEntries { ips: vec!["10.0.0.0/8".into()], devices: vec!["d1".into()], ..Default::default() })
            .unwrap();
        assert!(!b.ip(&"10.2.3.4".parse().unwrap()));
        assert!(!b.device("d1"));
    }

    #[test]
    fn a_temporary_block_of_an_ipv6_client_holds_its_whole_64() {
        let b = Blocklist::new(&BlocklistConfig::default());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        b.block_ip_for(ip("2001:db8:1:2::5"), Duration::from_secs(60));
        assert!(b.ip(&ip("2001:db8:1:2::5")) && b.ip(&ip("2001:db8:1:2:ffff:ffff:ffff:ffff")), "the same /64");
        assert!(!b.ip(&ip("2001:db8:1:3::5")), "the next /64");
        assert_eq!(b.to_json()["temporary"]["ips"][0]["ip"], "2001:db8:1:2::/64");
        // An IPv4 client is blocked as written, IPv4-mapped too.
        b.block_ip_for(ip("::ffff:192.0.2.9"), Duration::from_secs(60));
        assert!(b.ip(&ip("192.0.2.9")) && !b.ip(&ip("192.0.2.10")));
        // Naming any address of the /64 lifts its block.
        b.remove(&BlockEntries { ips: vec!["2001:db8:1:2::77".into()], ..Default::default() }).unwrap();
        assert!(!b.ip(&ip("2001:db8:1:2::5")));
        b.remove(&BlockEntries { ips: vec!["192.0.2.9".into()], ..Default::default() }).unwrap();
        assert!(!b.ip(&ip("192.0.2.9")));
    }
}
