//! `surge megasale` (issue #27 item 2): four edges share one room on a Redis Cluster of three masters
//! with a replica each (a short `cluster-node-timeout`, so a replica takes over in 1–2 s); the core
//! keeps the sale on its own embedded store, so the cluster's `INFO commandstats` count the room
//! alone. Fans go to the edges round-robin and keep their cookies; mid-sale the edge leading the room
//! and the master of the room's main slot (`wk:{room:<id>}`) are SIGKILLed and not started again.
//!
//! What is measured here beside the surge's own figures: Redis operations per node and per shard (the
//! master's until it died, its replica's from its promotion), places kept through the kills (the next
//! answer of every fan who waited with a place when a kill came), Kendall τ across edges, joins/s.
//!
//! # Layout
//!
//! - [`Mega`]: the cluster and what the kill plan and the fans record during the run.
//! - [`plan`]: the two kills.
//! - [`parse_commandstats`], [`NodeOps`], [`shard_ops`]: the operations accounting (pure).
//! - [`place_kept`], [`PlaceTally`]: the places-kept accounting (pure).
//! - [`tau_across_edges`]: τ over all edges and per edge (pure).
//! - [`figures`], [`publish`]: the report's figures, its section of bench/results/surge-megasale.md and summary.json.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use wicket_testkit::RedisCluster;

use crate::stats::kendall_tau;

/// The cluster's node timeout: a master unreachable this long is failed over.
pub const NODE_TIMEOUT_MS: u64 = 1000;
/// Masters of the cluster (each with one replica).
pub const MASTERS: usize = 3;

/// The room's main key: every key of the single layout, and the spread layout's counters, hash here.
pub fn main_key() -> String {
    format!("wk:{{room:{}}}", crate::procs::ROOM)
}

/// One node's counts of commands (`cmdstat_<name>` → calls) from `INFO commandstats`.
pub fn parse_commandstats(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else { continue };
        let Some((name, fields)) = rest.split_once(':') else { continue };
        let calls = fields.split(',').find_map(|f| f.strip_prefix("calls=")).and_then(|v| v.parse::<u64>().ok());
        if let Some(calls) = calls {
            out.insert(name.to_string(), calls);
        }
    }
    out
}

/// `b - a` per command (a counter that went back, a restarted node, counts from 0).
fn delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// One node's counts at the moments that matter: the start of the sale, its SIGKILL (a killed master:
/// the last read before the signal), its promotion (a replica that took over), the end.
#[derive(Debug, Clone, Default)]
pub struct NodeOps {
    pub port: u16,
    /// The shard: the index of its master among the masters at the start.
    pub shard: usize,
    pub master_at_start: bool,
    pub before: BTreeMap<String, u64>,
    pub at_kill: Option<BTreeMap<String, u64>>,
    pub at_promotion: Option<BTreeMap<String, u64>>,
    pub end: Option<BTreeMap<String, u64>>,
}

impl NodeOps {
    /// The operations this node carried for its shard: a master's from the start to its kill (or the
    /// end); a replica's only from its promotion (before it, it replays its master's writes).
    pub fn serving(&self) -> BTreeMap<String, u64> {
        let empty = BTreeMap::new();
        if self.master_at_start {
            delta(&self.before, self.at_kill.as_ref().or(self.end.as_ref()).unwrap_or(&self.before))
        } else {
            match (&self.at_promotion, &self.end) {
                (Some(p), Some(e)) => delta(p, e),
                _ => empty,
            }
        }
    }
}

/// Each shard's operations (the sum of its nodes' [`NodeOps::serving`]), shard by shard.
pub fn shard_ops(nodes: &[NodeOps], shards: usize) -> Vec<BTreeMap<String, u64>> {
    let mut out = vec![BTreeMap::new(); shards];
    for n in nodes {
        for (k, v) in n.serving() {
            *out[n.shard].entry(k).or_insert(0) += v;
        }
    }
    out
}

/// Whether a fan who waited at place `old` when a kill came kept it: its next answer admits it (or the
/// sale is over for everyone: sold out, closed), or names a place no further back than `old`.
pub fn place_kept(old: u64, state: &str, position: Option<u64>) -> bool {
    match state {
        "admitted" | "sold_out" | "closed" => true,
        _ => position.is_some_and(|p| p > 0 && p <= old),
    }
}

/// Places kept through each kill: fans who waited with a place (marked), those whose next answer was
/// judged, and those who lost their place.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PlaceTally {
    pub marked: u64,
    pub checked: u64,
    pub lost: u64,
    /// A few lost places: (old place, state, new place).
    pub lost_examples: Vec<(u64, String, Option<u64>)>,
}

impl PlaceTally {
    pub fn judge(&mut self, old: u64, state: &str, position: Option<u64>) {
        self.checked += 1;
        if !place_kept(old, state, position) {
            self.lost += 1;
            if self.lost_examples.len() < 5 {
                self.lost_examples.push((old, state.to_string(), position));
            }
        }
    }
}

/// Kendall τ of place vs join order over every admitted fan of every edge (edge, join order, place),
/// and over each edge's fans alone (`None` for an edge with fewer than 2).
pub fn tau_across_edges(fans: &[(usize, u64, u64)], edges: usize) -> (f64, Vec<Option<f64>>) {
    let mut all: Vec<(u64, u64)> = fans.iter().map(|f| (f.1, f.2)).collect();
    let per = (0..edges)
        .map(|e| {
            let mut mine: Vec<(u64, u64)> = fans.iter().filter(|f| f.0 == e).map(|f| (f.1, f.2)).collect();
            (mine.len() >= 2).then(|| kendall_tau(&mut mine))
        })
        .collect();
    (if all.len() < 2 { f64::NAN } else { kendall_tau(&mut all) }, per)
}

/// One kill of the plan.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MegaKill {
    pub what: String,
    pub at_ms: u64,
    /// A master: when its replica was master of the room's slot (seen in `CLUSTER NODES`), ms.
    pub promoted_ms: Option<u64>,
    pub sold: u64,
    pub held: u64,
    pub capacity: u64,
}

/// The cluster and what the run records.
pub struct Mega {
    pub cluster: Mutex<RedisCluster>,
    pub nodes: Mutex<Vec<NodeOps>>,
    pub kills: Mutex<Vec<MegaKill>>,
    pub places: Mutex<Vec<PlaceTally>>,
    pub error: Mutex<Option<String>>,
}

fn commandstats(port: u16) -> Option<BTreeMap<String, u64>> {
    let text = wicket_testkit::cli(port, &["info", "commandstats"]);
    text.contains("cmdstat_").then(|| parse_commandstats(&text))
}

impl Mega {
    /// Starts the cluster (3 masters with a replica each) and reads its shape.
    pub async fn start() -> anyhow::Result<Mega> {
        let cluster = tokio::task::spawn_blocking(|| RedisCluster::start_with_replicas(MASTERS, NODE_TIMEOUT_MS)).await?;
        let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port()).collect();
        let text = wicket_testkit::cli(ports[0], &["cluster", "nodes"]);
        let shape = parse_cluster_nodes(&text);
        let masters: Vec<&ClusterNode> = shape.iter().filter(|n| n.master).collect();
        anyhow::ensure!(masters.len() == MASTERS, "cluster has {} masters: {text}", masters.len());
        let mut nodes = Vec::new();
        for port in ports {
            let me = shape.iter().find(|n| n.port == port).ok_or_else(|| anyhow::anyhow!("node {port} not in CLUSTER NODES"))?;
            let master_id = if me.master { &me.id } else { &me.master_id };
            let shard = masters.iter().position(|m| &m.id == master_id).ok_or_else(|| anyhow::anyhow!("node {port} has no master"))?;
            nodes.push(NodeOps { port, shard, master_at_start: me.master, ..Default::default() });
        }
        Ok(Mega {
            cluster: Mutex::new(cluster),
            nodes: Mutex::new(nodes),
            kills: Mutex::new(Vec::new()),
            places: Mutex::new(Vec::new()),
            error: Mutex::new(None),
        })
    }

    pub fn seeds(&self) -> Vec<String> {
        self.cluster.lock().seeds()
    }

    /// The start of the sale: every node's counts.
    pub fn read_before(&self) {
        tokio::task::block_in_place(|| {
            for n in self.nodes.lock().iter_mut() {
                n.before = commandstats(n.port).unwrap_or_default();
            }
        })
    }

    /// The end: every live node's counts.
    pub fn read_end(&self) {
        tokio::task::block_in_place(|| {
            let live: Vec<u16> = self.cluster.lock().nodes.iter().filter(|n| n.is_running()).map(|n| n.port()).collect();
            for n in self.nodes.lock().iter_mut() {
                if live.contains(&n.port) {
                    n.end = commandstats(n.port);
                }
            }
        })
    }

    /// SIGKILL of the master of the room's main slot (its counts read just before), then waits (≤ 30 s)
    /// until another node is master of that slot, and reads that node's counts. (killed port,
    /// promoted after, ms from the kill).
    fn kill_room_master(&self, start: Instant) -> anyhow::Result<(u16, u64, Option<u64>)> {
        tokio::task::block_in_place(|| {
            let key = main_key();
            let m = self.cluster.lock().master_of(&key).ok_or_else(|| anyhow::anyhow!("no master for {key}"))?;
            let port = self.cluster.lock().nodes[m].port();
            let counts = commandstats(port);
            let at_ms = start.elapsed().as_millis() as u64;
            self.cluster.lock().nodes[m].kill9();
            if let Some(n) = self.nodes.lock().iter_mut().find(|n| n.port == port) {
                n.at_kill = counts;
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let now = self.cluster.lock().master_of(&key);
                if let Some(r) = now.filter(|r| *r != m) {
                    let promoted = start.elapsed().as_millis() as u64;
                    let rport = self.cluster.lock().nodes[r].port();
                    let counts = commandstats(rport);
                    if let Some(n) = self.nodes.lock().iter_mut().find(|n| n.port == rport) {
                        n.at_promotion = counts;
                    }
                    return Ok((port, at_ms, Some(promoted)));
                }
                if Instant::now() > deadline {
                    return Ok((port, at_ms, None));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// A replica's master (`-` for a master).
    pub master_id: String,
}

/// The nodes of `CLUSTER NODES` text (`<id> <ip:port@bus> <flags> <master> ...`), failed ones included.
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
            Some(ClusterNode { id: f[0].to_string(), port, master: f[2].split(',').any(|x| x == "master"), master_id: f[3].to_string() })
        })
        .collect()
}

/// What the kill plan needs from the running sale (the surge's shared state).
pub trait Sale {
    fn stopped(&self) -> bool;
    /// The main pool at the last stock sample: (sold, held, capacity).
    fn stock_now(&self) -> (u64, u64, u64);
    /// The run is a short one (`--quick`).
    fn short(&self) -> bool;
    fn stack(&self) -> &crate::procs::Stack;
    fn http(&self) -> &reqwest::Client;
    /// Since the start of the run, ms.
    fn now(&self) -> u64;
    fn started(&self) -> Instant;
    /// Marks every fan who waits with a place now (for kill `kill`); returns how many.
    fn mark_places(&self, kill: usize) -> u64;
}

/// The plan: SIGKILL the edge that leads the room when a quarter of the seats are taken (sold + held),
/// then the master of the room's main slot when half are, at least `spacing` later; neither comes back.
/// Every fan waiting with a place at a kill is marked: its next answer tells whether it kept it.
pub async fn plan(sh: &impl Sale, mega: &Mega) {
    let spacing = Duration::from_secs(if sh.short() { 5 } else { 10 });
    let mut ready_at = Instant::now();
    for (k, share) in [0.25, 0.5].into_iter().enumerate() {
        loop {
            if sh.stopped() {
                return;
            }
            let (sold, held, cap) = sh.stock_now();
            if cap > 0 && (sold + held) as f64 >= share * cap as f64 && ready_at.elapsed() >= spacing {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (sold, held, capacity) = sh.stock_now();
        mega.places.lock().push(PlaceTally::default());
        let (what, at_ms, promoted_ms) = if k == 0 {
            let mut leader = None;
            for _ in 0..50 {
                leader = sh.stack().leader_edge(sh.http()).await;
                if leader.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let e = leader.unwrap_or(0);
            let marked = sh.mark_places(k);
            mega.places.lock()[k].marked = marked;
            let at = sh.now();
            sh.stack().kill(crate::procs::Proc::Edge(e));
            (format!("edge {e} (the room's leader)"), at, None)
        } else {
            let marked = sh.mark_places(k);
            mega.places.lock()[k].marked = marked;
            match mega.kill_room_master(sh.started()) {
                Ok((port, at, promoted)) => (format!("Redis master of {} (port {port})", main_key()), at, promoted),
                Err(e) => {
                    *mega.error.lock() = Some(format!("{e:#}"));
                    return;
                }
            }
        };
        if std::env::var_os("WICKET_BENCH_VERBOSE").is_some() {
            eprintln!("\n[{:.1}s] SIGKILL {what} (sold {sold} held {held} of {capacity}); promoted at {promoted_ms:?}", at_ms as f64 / 1000.0);
        }
        mega.kills.lock().push(MegaKill { what, at_ms, promoted_ms, sold, held, capacity });
        ready_at = Instant::now();
    }
}

/// The surge's own figures of the sale that the megasale reports.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SaleFigures {
    pub fans: usize,
    pub seats: u64,
    pub seconds: f64,
    pub admitted: u64,
    pub sold: u64,
    pub oversold: u64,
    /// Seats given twice (named seats; none in this sale).
    pub seats_double_sold: u64,
    pub still_waiting: u64,
    pub sellout_seconds: Option<f64>,
    pub paid_out_seconds: Option<f64>,
    pub requests_per_second: f64,
}

/// What the megasale measured beside the surge's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MegaFigures {
    pub sale: SaleFigures,
    pub layout: String,
    /// The layout the room's stats name at the end (`None`: the edge's stats carry no layout, as before
    /// the spread layout).
    pub layout_in_stats: Option<String>,
    /// `[rooms.spread]` with the spread layout: shards, block, block-ms, flush-ms.
    pub spread: Option<(u32, u32, u32, u32)>,
    pub edges: usize,
    pub masters: usize,
    pub replicas_per_master: usize,
    pub node_timeout_ms: u64,
    pub core_store: &'static str,
    /// Join answers that gave a place, and how many joins per second (first to last of them).
    pub joins: u64,
    pub join_seconds: f64,
    pub joins_per_second: f64,
    /// Users with more than one live (held or paid) order, or more tickets than the limit.
    pub double_sold: u64,
    /// τ over the admitted fans of every edge, by the order the bench sent the joins, and per edge.
    pub tau_across_edges: f64,
    pub tau_per_edge: Vec<Option<f64>>,
    /// The same fans' τ judged over the pairs whose joins did not overlap (what `--check` holds),
    /// and the share of their pairs it judged.
    pub tau_across_edges_judged: f64,
    pub tau_across_edges_pairs_judged: f64,
    /// τ over every fan given a place (admitted or not): the order the queue would admit them in,
    /// judged over the pairs whose joins did not overlap (one answered before the other was sent:
    /// [`crate::stats::ordered_tau`]), the share of pairs it judged, and τ by the order the bench sent
    /// the joins (every pair, overlapping ones too: reported, not held).
    pub tau_all_placed: f64,
    pub tau_all_placed_pairs_judged: f64,
    pub tau_all_placed_send_order: f64,
    pub kills: Vec<Value>,
    pub kills_while_selling: bool,
    pub places_marked: u64,
    pub places_checked: u64,
    pub places_lost: u64,
    /// Marked fans whose next answer never came before the run ended.
    pub places_unchecked: u64,
    pub ops_per_shard: Vec<u64>,
    pub share_per_shard: Vec<f64>,
    pub busiest_shard: usize,
    pub ops_per_join_busiest: f64,
    pub ops_per_join_all: f64,
    pub top_commands_busiest: Vec<(String, u64)>,
    pub nodes: Vec<Value>,
    pub error: Option<String>,
}

/// τ over the admitted: (across edges by send order, per edge) and (across edges judged, the
/// share of pairs judged).
type AdmittedTau = ((f64, Vec<Option<f64>>), (f64, f64));

/// The figures from what the run recorded.
#[allow(clippy::too_many_arguments)] // each argument is one of the run's figures
pub fn figures(
    sale: SaleFigures,
    mega: &Mega,
    (layout, layout_in_stats, spread): (&str, Option<String>, (u32, u32, u32, u32)),
    edges: usize,
    (joins, join_seconds): (u64, f64),
    double_sold: u64,
    (tau, (tau_across_edges_judged, tau_across_edges_pairs_judged)): AdmittedTau,
    (tau_all_placed, tau_all_placed_pairs_judged, tau_all_placed_send_order): (f64, f64, f64),
) -> MegaFigures {
    let paid_out_ms = sale.paid_out_seconds.map(|t| (t * 1000.0) as u64);
    let nodes = mega.nodes.lock().clone();
    let shards = shard_ops(&nodes, MASTERS);
    let totals: Vec<u64> = shards.iter().map(|m| m.values().sum()).collect();
    let all: u64 = totals.iter().sum();
    let busiest = totals.iter().enumerate().max_by_key(|(_, v)| **v).map_or(0, |(i, _)| i);
    let mut top: Vec<(String, u64)> = shards.get(busiest).map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect()).unwrap_or_default();
    top.sort_by_key(|t| std::cmp::Reverse(t.1));
    top.truncate(8);
    let kills = mega.kills.lock().clone();
    let places = mega.places.lock().clone();
    let per_join = |ops: u64| if joins == 0 { 0.0 } else { ops as f64 / joins as f64 };
    let kill_rows = kills
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let p = places.get(i).cloned().unwrap_or_default();
            json!({
                "what": k.what, "at_s": k.at_ms as f64 / 1000.0,
                "promoted_after_s": k.promoted_ms.map(|p| (p - k.at_ms) as f64 / 1000.0),
                "sold_at_kill": k.sold, "held_at_kill": k.held, "capacity": k.capacity,
                "places_marked": p.marked, "places_checked": p.checked, "places_lost": p.lost, "lost_examples": p.lost_examples,
            })
        })
        .collect();
    let node_rows = nodes
        .iter()
        .map(|n| {
            let ops: u64 = n.serving().values().sum();
            json!({
                "port": n.port, "shard": n.shard, "role_at_start": if n.master_at_start { "master" } else { "replica" },
                "killed": n.at_kill.is_some(), "promoted": n.at_promotion.is_some(), "ops": ops,
            })
        })
        .collect();
    let (marked, checked, lost) = places.iter().fold((0, 0, 0), |a, p| (a.0 + p.marked, a.1 + p.checked, a.2 + p.lost));
    MegaFigures {
        sale,
        layout: layout.to_string(),
        layout_in_stats,
        spread: (layout == "spread").then_some(spread),
        edges,
        masters: MASTERS,
        replicas_per_master: 1,
        node_timeout_ms: NODE_TIMEOUT_MS,
        core_store: "embedded (its own data dir; the cluster holds the room alone)",
        joins,
        join_seconds,
        joins_per_second: if join_seconds > 0.0 { joins as f64 / join_seconds } else { 0.0 },
        double_sold,
        tau_across_edges: tau.0,
        tau_per_edge: tau.1,
        tau_across_edges_judged,
        tau_across_edges_pairs_judged,
        tau_all_placed,
        tau_all_placed_pairs_judged,
        tau_all_placed_send_order,
        kills_while_selling: kills.len() == 2 && kills.iter().all(|k| k.sold < k.capacity && paid_out_ms.is_none_or(|p| p > k.at_ms)),
        kills: kill_rows,
        places_marked: marked,
        places_checked: checked,
        places_lost: lost,
        places_unchecked: marked.saturating_sub(checked),
        share_per_shard: totals.iter().map(|t| if all == 0 { 0.0 } else { *t as f64 / all as f64 }).collect(),
        ops_per_join_busiest: per_join(totals.get(busiest).copied().unwrap_or(0)),
        ops_per_join_all: per_join(all),
        ops_per_shard: totals,
        busiest_shard: busiest,
        top_commands_busiest: top,
        nodes: node_rows,
        error: mega.error.lock().clone(),
    }
}

/// What `--check` holds a megasale to: the invariants always; the spread layout's operation goals
/// (≤ 0.1 per join on the busiest node, no master over 40%) in a full run with `layout = "spread"`.
pub fn check(m: &MegaFigures, quick: bool) -> Vec<String> {
    let r = &m.sale;
    let mut bad = Vec::new();
    if r.oversold > 0 || m.double_sold > 0 || r.seats_double_sold > 0 {
        bad.push(format!("oversold {} double-sold {} (seats {})", r.oversold, m.double_sold, r.seats_double_sold));
    }
    if r.sold == 0 {
        bad.push("nothing was sold".into());
    }
    // The single layout numbers every join on one counter; the spread layout by arrival time bucket
    // (`block-ms`) and edge: fans who joined at two edges less than a bucket apart may be out of
    // order. Both are held to τ ≥ 0.99 over the admitted fans, and the spread layout over every fan
    // given a place too, each judged only over pairs of joins that did not overlap (one answered
    // before the other was sent): a thousand joins in flight at once reach the edges in an order
    // the bench's scheduler picks, and by the order the bench *sent* them a quick spread run's τ
    // read 0.9848–0.9918 on a loaded box (a CI failure of 2026-12-04) while the judged τ read 1.0.
    // The send-order figures are reported beside them.
    if m.layout == "spread" && (m.tau_all_placed.is_nan() || m.tau_all_placed < 0.99) {
        bad.push(format!("τ over every fan given a place {:.4} < 0.99 (judged over {:.1}% of pairs)", m.tau_all_placed, m.tau_all_placed_pairs_judged * 100.0));
    }
    if m.layout == "spread" && (m.tau_all_placed_pairs_judged.is_nan() || m.tau_all_placed_pairs_judged < 0.5) {
        bad.push(format!("τ judged only {:.1}% of the placed fans' pairs (under half: the joins overlapped)", m.tau_all_placed_pairs_judged * 100.0));
    }
    // (A τ that judged no pair reads 1.0: it says nothing.)
    if m.tau_across_edges_judged.is_nan() || m.tau_across_edges_judged < 0.99
        || m.tau_across_edges_pairs_judged.is_nan()
        || m.tau_across_edges_pairs_judged <= 0.0
    {
        bad.push(format!("τ across edges {:.4} < 0.99 (judged over {:.1}% of pairs)", m.tau_across_edges_judged, m.tau_across_edges_pairs_judged * 100.0));
    }
    if m.places_lost > 0 {
        bad.push(format!("{} of {} fans lost their place through the kills", m.places_lost, m.places_checked));
    }
    if m.places_checked == 0 {
        bad.push("no fan waited with a place at the kills: nothing was tested".into());
    }
    if !m.kills_while_selling {
        bad.push(format!("not both kills happened mid-sale: {:?}", m.kills.iter().map(|k| (&k["what"], &k["at_s"])).collect::<Vec<_>>()));
    }
    if m.kills.iter().any(|k| k["what"].as_str().is_some_and(|w| w.contains("master")) && k["promoted_after_s"].is_null()) {
        bad.push("the room's master was not replaced by its replica".into());
    }
    if let Some(e) = &m.error {
        bad.push(e.clone());
    }
    if m.layout == "spread" && m.layout_in_stats.as_deref() != Some("spread") {
        bad.push(format!("asked for the spread layout, the room's stats say {:?}", m.layout_in_stats));
    }
    if m.layout == "spread" && !quick {
        if m.ops_per_join_busiest > 0.1 {
            bad.push(format!("{:.3} Redis operations per join on the busiest node > 0.1", m.ops_per_join_busiest));
        }
        if m.share_per_shard.iter().any(|s| *s > 0.4) {
            bad.push(format!("a master carries more than 40% of the room's operations: {:?}", m.share_per_shard));
        }
    }
    bad
}

/// The name of a run's figures: the layout, and a spread layout's block, block-ms and flush-ms when they
/// are not the defaults (`spread`, `spread_b1000_25ms`, `spread_b1000_25ms_f25ms`).
pub fn variant(layout: &str, spread: Option<(u32, u32, u32, u32)>) -> String {
    match spread {
        Some((_, block, ms, 300)) if (block, ms) != (500, 5) => format!("{layout}_b{block}_{ms}ms"),
        Some((_, block, ms, flush)) if flush != 300 => format!("{layout}_b{block}_{ms}ms_f{flush}ms"),
        _ => layout.to_string(),
    }
}

/// summary.json (`megasale_<variant>`, `megasale_quick_<variant>`) and the section of bench/results/surge-megasale.md
/// (`surge-megasale-<variant>`, `surge-megasale-quick-<variant>`): each layout and spread setting keeps its
/// own figures.
pub fn publish(m: &MegaFigures, command: &str) -> anyhow::Result<()> {
    let r = &m.sale;
    let quick = command.contains("--quick");
    // A full run with another number of fans than the preset's million keeps its own figures too.
    let name = match r.fans {
        n if quick || n == 1_000_000 => variant(&m.layout, m.spread),
        n => format!("{}_{n}_fans", variant(&m.layout, m.spread)),
    };
    let key = format!("megasale{}_{name}", if quick { "_quick" } else { "" });
    let round = |x: f64, d: i32| (x * 10f64.powi(d)).round() / 10f64.powi(d);
    let nan = |x: f64, d: i32| if x.is_nan() { Value::Null } else { json!(round(x, d)) };
    crate::report::merge_summary(
        &key,
        json!({
            "command": command, "layout": m.layout, "layout_in_stats": m.layout_in_stats,
            "spread": m.spread.map(|(shards, block, block_ms, flush_ms)| json!({"shards": shards, "block": block, "block_ms": block_ms, "flush_ms": flush_ms})), "edges": m.edges, "masters": m.masters, "replicas_per_master": m.replicas_per_master,
            "core_store": m.core_store, "fans": r.fans, "seats": r.seats, "seconds": round(r.seconds, 1),
            "sold": r.sold, "oversold": r.oversold, "double_sold": m.double_sold + r.seats_double_sold, "admitted": r.admitted,
            "still_waiting": r.still_waiting, "sellout_seconds": r.sellout_seconds.map(|s| round(s, 1)), "paid_out_seconds": r.paid_out_seconds.map(|s| round(s, 1)),
            "tau_across_edges": nan(m.tau_across_edges, 4), "tau_across_edges_judged": nan(m.tau_across_edges_judged, 4), "tau_across_edges_pairs_judged": nan(m.tau_across_edges_pairs_judged, 4), "tau_per_edge": m.tau_per_edge.iter().map(|t| t.map(|t| round(t, 4))).collect::<Vec<_>>(),
            "tau_all_placed": nan(m.tau_all_placed, 4), "tau_all_placed_pairs_judged": nan(m.tau_all_placed_pairs_judged, 4),
            "tau_all_placed_send_order": nan(m.tau_all_placed_send_order, 4),
            "places_marked": m.places_marked, "places_checked": m.places_checked, "places_lost": m.places_lost, "places_unchecked": m.places_unchecked,
            "joins": m.joins, "joins_per_second": round(m.joins_per_second, 0),
            "ops_per_join_busiest": round(m.ops_per_join_busiest, 4), "ops_per_join_all": round(m.ops_per_join_all, 4),
            "ops_per_shard": m.ops_per_shard, "share_per_shard": m.share_per_shard.iter().map(|s| round(*s, 3)).collect::<Vec<_>>(),
            "kills": m.kills, "kills_while_selling": m.kills_while_selling, "top_commands_busiest": m.top_commands_busiest, "nodes": m.nodes,
            "requests_per_second": round(r.requests_per_second, 0), "error": m.error,
        }),
    )?;
    let mut kills = String::new();
    for k in &m.kills {
        kills.push_str(&format!(
            "| {} | {:.1} s | {} / {} of {} | {} | {} | {} | {} |\n",
            k["what"].as_str().unwrap_or(""),
            k["at_s"].as_f64().unwrap_or(0.0),
            k["sold_at_kill"],
            k["held_at_kill"],
            k["capacity"],
            k["promoted_after_s"].as_f64().map(|s| format!("replica promoted after {s:.1} s")).unwrap_or_else(|| "—".into()),
            k["places_marked"],
            k["places_checked"],
            k["places_lost"],
        ));
    }
    let mut shards = String::new();
    for (i, (ops, share)) in m.ops_per_shard.iter().zip(&m.share_per_shard).enumerate() {
        let ports: Vec<String> = m
            .nodes
            .iter()
            .filter(|n| n["shard"] == i)
            .map(|n| {
                format!(
                    "{} {}{}{}",
                    n["port"],
                    n["role_at_start"].as_str().unwrap_or(""),
                    if n["killed"] == true { " (killed)" } else { "" },
                    if n["promoted"] == true { " (promoted)" } else { "" }
                )
            })
            .collect();
        shards.push_str(&format!(
            "| {i}{} | {} | {ops} | {:.1}% | {:.4} |\n",
            if i == m.busiest_shard { " (busiest)" } else { "" },
            ports.join(", "),
            share * 100.0,
            if m.joins == 0 { 0.0 } else { *ops as f64 / m.joins as f64 }
        ));
    }
    let top: Vec<String> = m.top_commands_busiest.iter().map(|(k, v)| format!("`{k}` {v}")).collect();
    let per_edge: Vec<String> = m.tau_per_edge.iter().enumerate().map(|(i, t)| format!("edge {i} {}", t.map_or("n/a".into(), |t| format!("{t:.4}")))).collect();
    let body = format!(
        "## Surge: megasale, {layout} layout{block_title}{quick_title}\n\nCommand: `{command}`\n\nMachine: {machine}; 2 shared cores: the bench, {edges} edges, the core and \
         {nodes} redis-servers all run on them.\n\n\
         {edges} `wicket` edges share one room (`layout = \"{layout}\"`{spread}, one `edge.secret`) on a Redis Cluster of {masters} masters with \
         a replica each (`cluster-node-timeout {nt}`, as the testkit starts it: no persistence); the core (`wicket-core`) keeps the sale \
         on its own embedded store, so the cluster's `INFO commandstats` count the room alone. Fans go to the edges round-robin \
         (fan i to edge i mod {edges}) and keep their cookies; far-back fans poll as `poll_after_ms` tells them; a failed connection \
         sends the next try to the next edge. Mid-sale, once a quarter of the seats are taken (sold + held), the edge leading the \
         room is SIGKILLed; once half are, the master of the room's main slot (`{key}`, found with `CLUSTER KEYSLOT` / `CLUSTER \
         NODES`); neither comes back. Every fan waiting with a place at a kill is marked, and its next answer judged: kept if it \
         admits the fan (or says sold out) or names a place no further back.\n\n\
         | figure | value |\n|---|---|\n\
         | layout (asked / in the room's stats) | {layout} / {in_stats} |\n\
         | fans / seats | {users} / {seats} |\n| run time | {secs:.1} s |\n| joins given a place | {joins} |\n\
         | **joins/s** (first to last join given a place) | **{jps:.0}** |\n| admitted | {admitted} |\n\
         | **sold** (paid) | **{sold}** |\n| **oversold** | **{oversold}** |\n\
         | **double-sold** (users with more than one live order or over the limit; seats given twice) | **{double}** |\n\
         | time to sell out (first / every ticket paid) | {sellout} / {paid_out} |\n\
         | still queued when the run ended (it ends once every ticket is paid and no fan finished for 10 s; they learn it at their next poll) | {waiting} |\n\
         | **τ across edges** (Kendall, place vs join order, admitted fans of all edges, judged over joins that did not overlap); by the order the bench sent the joins (per edge) | **{tau_judged}**; {tau} ({per_edge}) |\n\
         | τ over every fan given a place (the order the queue would admit them in), judged over the pairs whose joins did not overlap (share of pairs judged); by the order the bench sent the joins | {tau_all} ({judged}); {tau_all_sent} |\n\
         | **places kept after the kills**: fans waiting with a place / judged / **lost** / not heard from again | {marked} / {checked} / **{lost}** / {unchecked} |\n\
         | both kills while the sale was selling | {selling} |\n\
         | **Redis operations per join on the busiest node** (shard {busiest}) | **{opj:.4}** |\n\
         | Redis operations per join, whole cluster | {opj_all:.4} |\n| real requests/s (all endpoints) | {rps:.0} |\n{error}\n\
         The kills:\n\n| kill | at | sold / held then | after | fans waiting with a place | judged | lost |\n|---|---|---|---|---|---|---|\n{kills}\n\
         Operations per shard (sum of `cmdstat_*` calls, deltas from the start of the sale to the end: a master's until its \
         SIGKILL, read just before it; its replica's from its promotion; commands a script calls count beside the `evalsha`):\n\n\
         | shard | nodes | operations | share | per join |\n|---|---|---|---|---|\n{shards}\n\
         Busiest shard's commands: {top}.\n",
        quick_title = if quick { " (quick)" } else { "" },
        block_title = match m.spread {
            Some((_, b, ms, f)) if (b, ms, f) != (500, 5, 300) => format!(", block {b}, block-ms {ms}, flush-ms {f}"),
            _ => String::new(),
        },
        machine = crate::report::machine(),
        edges = m.edges,
        nodes = m.masters * (1 + m.replicas_per_master),
        layout = m.layout,
        in_stats = m.layout_in_stats.as_deref().unwrap_or("not given"),
        spread = m
            .spread
            .map(|(sh, b, ms, f)| format!(" with `[rooms.spread] shards = {sh}`, `block = {b}`, `block-ms = {ms}`, `flush-ms = {f}`"))
            .unwrap_or_default(),
        masters = m.masters,
        nt = m.node_timeout_ms,
        key = main_key(),
        users = r.fans,
        seats = r.seats,
        secs = r.seconds,
        joins = m.joins,
        jps = m.joins_per_second,
        admitted = r.admitted,
        sold = r.sold,
        oversold = r.oversold,
        double = m.double_sold + r.seats_double_sold,
        sellout = r.sellout_seconds.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "not sold out".into()),
        paid_out = r.paid_out_seconds.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "not paid out".into()),
        waiting = r.still_waiting,
        tau = if m.tau_across_edges.is_nan() { "n/a".into() } else { format!("{:.4}", m.tau_across_edges) },
        per_edge = per_edge.join(", "),
        tau_judged = if m.tau_across_edges_judged.is_nan() { "n/a".into() } else { format!("{:.4} (over {:.1}% of pairs)", m.tau_across_edges_judged, m.tau_across_edges_pairs_judged * 100.0) },
        tau_all = if m.tau_all_placed.is_nan() { "n/a".into() } else { format!("{:.4}", m.tau_all_placed) },
        judged = if m.tau_all_placed.is_nan() { "n/a".into() } else { format!("{:.1}%", m.tau_all_placed_pairs_judged * 100.0) },
        tau_all_sent = if m.tau_all_placed_send_order.is_nan() { "n/a".into() } else { format!("{:.4}", m.tau_all_placed_send_order) },
        marked = m.places_marked,
        checked = m.places_checked,
        lost = m.places_lost,
        unchecked = m.places_unchecked,
        selling = m.kills_while_selling,
        busiest = m.busiest_shard,
        opj = m.ops_per_join_busiest,
        opj_all = m.ops_per_join_all,
        rps = r.requests_per_second,
        error = m.error.as_ref().map(|e| format!("| error | {e} |\n")).unwrap_or_default(),
        top = if top.is_empty() { "none".into() } else { top.join(", ") },
    );
    crate::report::write_section(&format!("surge-megasale{}-{}", if quick { "-quick" } else { "" }, name.replace('_', "-")), &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=2\r\n\
        cmdstat_incr:calls=100,usec=50,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_cluster|slots:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn commandstats_are_read_per_command_with_subcommands() {
        let m = parse_commandstats(INFO);
        assert_eq!(m.len(), 4);
        assert_eq!(m["evalsha"], 120);
        assert_eq!(m["cluster|slots"], 7);
        assert_eq!(m.values().sum::<u64>(), 230);
        assert!(parse_commandstats("# Commandstats\r\n").is_empty());
        assert!(parse_commandstats("cmdstat_get:usec=1").is_empty(), "no calls field, no count");
    }

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// A shard's operations: its master's until the SIGKILL, then its replica's from the promotion; a
    /// replica that never took over replays writes that are not the room's own.
    #[test]
    fn shard_operations_follow_the_master_through_a_failover() {
        let nodes = vec![
            // Shard 0: master killed at 1,000 calls, replica promoted at 400 (replayed writes) and at 700 at the end.
            NodeOps { port: 1, shard: 0, master_at_start: true, before: counts(&[("evalsha", 100)]), at_kill: Some(counts(&[("evalsha", 1000)])), ..Default::default() },
            NodeOps {
                port: 2,
                shard: 0,
                master_at_start: false,
                before: counts(&[("incr", 50)]),
                at_promotion: Some(counts(&[("incr", 400)])),
                end: Some(counts(&[("incr", 600), ("evalsha", 100)])),
                ..Default::default()
            },
            // Shard 1: master alive throughout, its replica never promoted.
            NodeOps { port: 3, shard: 1, master_at_start: true, before: counts(&[("get", 10)]), end: Some(counts(&[("get", 60), ("set", 40)])), ..Default::default() },
            NodeOps { port: 4, shard: 1, master_at_start: false, before: counts(&[]), end: Some(counts(&[("set", 40)])), ..Default::default() },
        ];
        let shards = shard_ops(&nodes, 3);
        // 900 on the master; 200 incr and 100 evalsha on the replica after its promotion.
        assert_eq!(shards[0], counts(&[("evalsha", 1000), ("incr", 200)]));
        assert_eq!(shards[1], counts(&[("get", 50), ("set", 40)]));
        assert!(shards[2].is_empty());
    }

    #[test]
    fn a_place_is_kept_when_the_next_answer_admits_or_keeps_it() {
        assert!(place_kept(500, "waiting", Some(500)));
        assert!(place_kept(500, "waiting", Some(499)), "further ahead is fine");
        assert!(place_kept(500, "admitted", None));
        assert!(place_kept(500, "sold_out", None));
        assert!(!place_kept(500, "waiting", Some(501)), "pushed back");
        assert!(!place_kept(500, "waiting", None));
        assert!(!place_kept(500, "waiting", Some(0)));
        let mut t = PlaceTally::default();
        t.judge(10, "waiting", Some(10));
        t.judge(10, "waiting", Some(9000));
        t.judge(10, "admitted", None);
        assert_eq!((t.checked, t.lost), (3, 1));
        assert_eq!(t.lost_examples, vec![(10, "waiting".to_string(), Some(9000))]);
    }

    #[test]
    fn tau_is_taken_over_every_edge_and_each_alone() {
        // Two edges, each in order on its own, interleaved in order: τ 1 everywhere.
        let fans: Vec<(usize, u64, u64)> = (0..100).map(|i| ((i % 2) as usize, i, i + 1)).collect();
        let (all, per) = tau_across_edges(&fans, 3);
        assert_eq!(all, 1.0);
        assert_eq!(per, vec![Some(1.0), Some(1.0), None]);
        // Edge 1 hands out places from a block far ahead: in order on each edge, not across them.
        let fans: Vec<(usize, u64, u64)> = (0..100).map(|i| ((i % 2) as usize, i, if i % 2 == 0 { i } else { 1000 + i })).collect();
        let (all, per) = tau_across_edges(&fans, 2);
        assert_eq!(per, vec![Some(1.0), Some(1.0)]);
        assert!(all < 0.6, "{all}");
        assert!(tau_across_edges(&[], 2).0.is_nan());
    }

    #[test]
    fn each_spread_setting_has_its_own_name() {
        assert_eq!(variant("single", None), "single");
        assert_eq!(variant("spread", Some((6, 500, 5, 300))), "spread");
        assert_eq!(variant("spread", Some((12, 1000, 25, 300))), "spread_b1000_25ms");
        assert_eq!(variant("spread", Some((6, 500, 5, 200))), "spread_b500_5ms_f200ms");
        assert_eq!(variant("spread", Some((12, 1000, 25, 25))), "spread_b1000_25ms_f25ms");
    }

    #[test]
    fn cluster_nodes_give_each_replica_its_master() {
        let text = "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                    b2 127.0.0.1:7001@17001 slave a1 0 1700 1 connected\n\
                    c3 127.0.0.1:7002@17002 master,fail - 1699 1690 2 disconnected\n";
        let n = parse_cluster_nodes(text);
        assert_eq!(n.len(), 3);
        assert_eq!(n[0], ClusterNode { id: "a1".into(), port: 7000, master: true, master_id: "-".into() });
        assert_eq!((n[1].port, n[1].master, n[1].master_id.as_str()), (7001, false, "a1"));
        assert!(n[2].master);
    }
}
