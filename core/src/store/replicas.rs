//! What an acknowledged change could still be lost to: the replicas each master has that could be promoted
//! in its place (issue #41). `[redis] wait-replicas = "auto"` waits for one of them, and for none where a
//! master has none left — a master whose replica died and stays dead, or the replica just promoted after
//! its master died for good. Waiting there protects nothing (no replica exists that could be promoted
//! without the change) and would stop that master's share of the sale until an operator acts.
//!
//! "Could be promoted": on one server, a connected replica (`INFO replication`, `connected_slaves`: Redis
//! drops a replica from it when the replica's connection closes, or after `repl-timeout` without an
//! answer); in a Cluster, a replica the cluster lists under that master (`CLUSTER NODES`) and does not
//! consider failed (`fail`: the majority of masters agreed; `fail?`, one node's suspicion, still counts) nor
//! barred from failover (`nofailover`). A replica that is alive but slow or cut off still counts, so changes
//! on its master answer 503 `durability_timeout` until it answers or the cluster marks it failed
//! (`cluster-node-timeout`) — as Redis's own `WAIT` would.
//!
//! [`Topology`] is one look; [`ReplicaView`] is what waited calls read, per hash slot, updated by the
//! store's watcher every [`FOLLOW_PERIOD`] and at once after a wait timed out.

use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How often the watcher looks at the replicas (`"auto"`), besides right after a wait timed out.
pub const FOLLOW_PERIOD: Duration = Duration::from_secs(1);

/// Hash slots of a Redis Cluster.
pub const SLOTS: usize = 16384;

/// One master as last looked at: where it answers, its slots, and the replicas that could be promoted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Master {
    /// `host:port`, for logs.
    pub node: String,
    /// Inclusive slot ranges it serves (one server: empty, it serves every key).
    pub slots: Vec<(u16, u16)>,
    /// Replicas that could be promoted in its place.
    pub promotable: u32,
}

/// Every master that serves slots, as one look saw them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub masters: Vec<Master>,
}

impl Topology {
    /// One server with `connected` replicas.
    pub fn single(node: &str, connected: u32) -> Topology {
        Topology { masters: vec![Master { node: node.to_string(), slots: Vec::new(), promotable: connected }] }
    }

    /// From a `CLUSTER NODES` reply: the masters that serve slots, each with the replicas listed under it
    /// that are neither failed nor barred from failover.
    pub fn from_cluster_nodes(text: &str) -> Result<Topology, String> {
        struct Line<'a> {
            id: &'a str,
            addr: &'a str,
            flags: Vec<&'a str>,
            master: &'a str,
            slots: Vec<&'a str>,
        }
        let mut lines = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = raw.split_whitespace().collect();
            if f.len() < 8 {
                return Err(format!("CLUSTER NODES line {} has {} fields, want at least 8: {raw:?}", n + 1, f.len()));
            }
            // `ip:port@cport[,hostname]`.
            let addr = f[1].split(['@', ',']).next().unwrap_or(f[1]);
            lines.push(Line { id: f[0], addr, flags: f[2].split(',').collect(), master: f[3], slots: f[8..].to_vec() });
        }
        let mut masters = Vec::new();
        for m in lines.iter().filter(|l| l.flags.contains(&"master")) {
            let mut slots = Vec::new();
            for s in &m.slots {
                // `[slot->-node]` / `[slot-<-node]`: a slot being migrated, still served by its owner's range.
                if s.starts_with('[') {
                    continue;
                }
                let (a, b) = s.split_once('-').unwrap_or((s, s));
                match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) if a <= b && (b as usize) < SLOTS => slots.push((a, b)),
                    _ => return Err(format!("CLUSTER NODES: bad slot range {s:?} of {}", m.addr)),
                }
            }
            if slots.is_empty() {
                continue;
            }
            let promotable = lines
                .iter()
                .filter(|r| {
                    r.master == m.id
                        && (r.flags.contains(&"slave") || r.flags.contains(&"replica"))
                        && !r.flags.iter().any(|f| matches!(*f, "fail" | "nofailover" | "handshake" | "noaddr"))
                })
                .count() as u32;
            masters.push(Master { node: m.addr.to_string(), slots, promotable });
        }
        if masters.is_empty() {
            return Err("CLUSTER NODES lists no master that serves slots".into());
        }
        masters.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(Topology { masters })
    }

    /// The masters with no replica that could be promoted.
    pub fn bare(&self) -> Vec<&str> {
        self.masters.iter().filter(|m| m.promotable == 0).map(|m| m.node.as_str()).collect()
    }

    /// `node: n, ...` for the log.
    pub fn describe(&self) -> String {
        self.masters.iter().map(|m| format!("{}: {}", m.node, m.promotable)).collect::<Vec<_>>().join(", ")
    }
}

/// The Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, or of the whole key).
pub fn slot_of(key: &str) -> usize {
    let k = key.as_bytes();
    let tagged = k.iter().position(|&c| c == b'{').and_then(|open| {
        let close = k[open + 1..].iter().position(|&c| c == b'}')?;
        (close > 0).then(|| &k[open + 1..open + 1 + close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(k)) as usize % SLOTS
}

/// Not looked at yet (or a slot no master served at the last look): wait as configured.
const UNKNOWN: u16 = u16::MAX;

/// One look, indexed by slot.
struct Known {
    topology: Topology,
    /// Per slot (one server: one entry), the index of its master in `topology`, or [`UNKNOWN`].
    by_slot: Box<[u16]>,
}

/// What waited calls read: per slot, its master and the replicas that could be promoted in its place,
/// from one look — a waited call goes to that master and waits for no more than that (so the count and
/// the node that runs the change always come from the same view: a minority master that another view
/// calls failed is never sent a change unwaited).
pub struct ReplicaView {
    cluster: bool,
    known: RwLock<Option<Arc<Known>>>,
}

/// The master a waited call goes to, and what it waits for there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `host:port` of the master (one server: not needed to route).
    pub node: String,
    pub promotable: u32,
}

impl ReplicaView {
    pub fn new(cluster: bool) -> ReplicaView {
        ReplicaView { cluster, known: RwLock::new(None) }
    }

    /// The master of `key`'s slot and its replicas that could be promoted, as the last look saw them;
    /// `None` before the first look, or for a slot nobody served then.
    pub fn route(&self, key: &str) -> Option<Route> {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner()).clone()?;
        let i = if self.cluster { slot_of(key) } else { 0 };
        let m = known.topology.masters.get(usize::from(*known.by_slot.get(i)?))?;
        Some(Route { node: m.node.clone(), promotable: m.promotable })
    }

    /// Replicas that could be promoted in place of the master of `key`'s slot ([`route`](Self::route)).
    pub fn promotable(&self, key: &str) -> Option<u32> {
        self.route(key).map(|r| r.promotable)
    }

    /// Takes a new look; returns the one before it.
    pub fn update(&self, topology: Topology) -> Option<Topology> {
        let mut by_slot = vec![UNKNOWN; if self.cluster { SLOTS } else { 1 }];
        for (i, m) in topology.masters.iter().enumerate() {
            if !self.cluster {
                by_slot[0] = i as u16;
                break;
            }
            for &(a, b) in &m.slots {
                by_slot[a as usize..=b as usize].fill(i as u16);
            }
        }
        let new = Arc::new(Known { topology, by_slot: by_slot.into() });
        self.known.write().unwrap_or_else(|e| e.into_inner()).replace(new).map(|k| k.topology.clone())
    }

    /// The last look.
    pub fn last(&self) -> Option<Topology> {
        self.known.read().unwrap_or_else(|e| e.into_inner()).as_ref().map(|k| k.topology.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three masters with a replica each, as `redis-cli --cluster create ... --cluster-replicas 1` leaves them.
    const HEALTHY: &str = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922
a3 127.0.0.1:7003@17003 master - 0 1 3 connected 10923-16383
b1 127.0.0.1:7004@17004 slave a1 0 1 1 connected
b2 127.0.0.1:7005@17005 slave a2 0 1 2 connected
b3 127.0.0.1:7006@17006 slave a3 0 1 3 connected
";

    #[test]
    fn a_healthy_cluster_has_one_promotable_replica_per_master() {
        let t = Topology::from_cluster_nodes(HEALTHY).unwrap();
        assert_eq!(t.masters.len(), 3);
        assert!(t.masters.iter().all(|m| m.promotable == 1), "{t:?}");
        assert!(t.bare().is_empty());
        assert_eq!(t.masters[1].slots, vec![(5461, 10922)]);
    }

    /// 7002 died for good and 7005 was promoted: the dead master is `master,fail` without slots, the new
    /// master has nobody under it. A failed or suspected replica, a replica barred from failover.
    #[test]
    fn failed_replicas_and_dead_masters_do_not_count() {
        let after = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7002@17002 master,fail - 0 1 2 disconnected
a3 127.0.0.1:7003@17003 master - 0 1 3 connected 10923-16383
b1 127.0.0.1:7004@17004,host-b1 slave,fail? a1 0 1 1 connected
b2 127.0.0.1:7005@17005 master - 0 1 4 connected 5461-10922 [5500->-a1]
b3 127.0.0.1:7006@17006 slave,nofailover a3 0 1 3 connected
";
        let t = Topology::from_cluster_nodes(after).unwrap();
        let got: Vec<(&str, u32)> = t.masters.iter().map(|m| (m.node.as_str(), m.promotable)).collect();
        // fail? is one node's suspicion: still a replica that may be promoted.
        assert_eq!(got, vec![("127.0.0.1:7001", 1), ("127.0.0.1:7003", 0), ("127.0.0.1:7005", 0)]);
        assert_eq!(t.bare(), vec!["127.0.0.1:7003", "127.0.0.1:7005"]);

        // The dead node comes back as a replica of the new master: the wait is on again.
        let back = after.replace("a2 127.0.0.1:7002@17002 master,fail - 0 1 2 disconnected", "a2 127.0.0.1:7002@17002 slave b2 0 1 4 connected");
        let t = Topology::from_cluster_nodes(&back).unwrap();
        assert_eq!(t.masters.iter().find(|m| m.node == "127.0.0.1:7005").unwrap().promotable, 1);
    }

    #[test]
    fn bad_replies_are_errors_not_guesses() {
        assert!(Topology::from_cluster_nodes("").unwrap_err().contains("no master"));
        assert!(Topology::from_cluster_nodes("a1 127.0.0.1:1@2 master").unwrap_err().contains("fields"));
        let bad = "a1 127.0.0.1:7001@17001 master - 0 0 1 connected 9-3\n";
        assert!(Topology::from_cluster_nodes(bad).unwrap_err().contains("9-3"));
        let big = "a1 127.0.0.1:7001@17001 master - 0 0 1 connected 0-16384\n";
        assert!(Topology::from_cluster_nodes(big).is_err());
    }

    #[test]
    fn slots_follow_the_hash_tag() {
        // Values from `redis-cli cluster keyslot`.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_eq!(slot_of("wk:{ev:a}:sync"), slot_of("ev:a"));
        // An empty tag hashes the whole key.
        assert_eq!(slot_of("{}x"), crc16::State::<crc16::XMODEM>::calculate(b"{}x") as usize % SLOTS);
    }

    #[test]
    fn the_view_answers_per_slot_and_unknown_until_looked_at() {
        let v = ReplicaView::new(true);
        assert_eq!(v.promotable("wk:{ev:a}:sync"), None);
        let mut t = Topology::from_cluster_nodes(HEALTHY).unwrap();
        t.masters[2].promotable = 0;
        assert_eq!(v.update(t.clone()), None);
        let key_in = |lo: usize, hi: usize| (0..).map(|i| format!("wk:{{ev:{i}}}:sync")).find(|k| (lo..=hi).contains(&slot_of(k))).unwrap();
        assert_eq!(v.promotable(&key_in(0, 5460)), Some(1));
        assert_eq!(v.promotable(&key_in(10923, 16383)), Some(0));
        assert_eq!(v.route(&key_in(5461, 10922)), Some(Route { node: "127.0.0.1:7002".into(), promotable: 1 }));
        assert_eq!(v.update(t.clone()), Some(t));

        let one = ReplicaView::new(false);
        assert_eq!(one.promotable("anything"), None);
        one.update(Topology::single("the server", 2));
        assert_eq!(one.promotable("anything"), Some(2));
    }
}
