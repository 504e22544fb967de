//! A simulated core and a discrete-time harness for the release controller.
//!
//! The plant, as the room sees it:
//! - released users hold a token and reach the core only after a random **actuation delay**
//!   (poll, see "admitted", click: 2–6 s by default); then they are a **session** of 20–40 s issuing
//!   Poisson requests (0.5/s each);
//! - the **core** is a FIFO M/M/c queue: `servers` workers, exponential service of mean `service_ms`,
//!   so its capacity is `servers × 1000 / service_ms` req/s and its latency climbs steeply near it.
//!   It keeps its own concurrency limit (`servers × limit_per_server` in flight) and answers 503 at once
//!   beyond it; clients give up after `timeout_ms`. Capacity **steps** change the worker count at given
//!   times (half the nodes gone, or added).
//!
//! The harness advances in 10 ms steps, ticks the policy once a second with what the edge would measure
//! (P99 from a [`LatencyWindow`] fed at each request's *completion* time, error fraction, utilisation
//! = busy workers / workers over the same window, occupancy, exits), and scores every 1 s window (by
//! arrival time) with its exact P99, counting failed requests as infinitely slow.
//!
//! Policies: [`ControllerPolicy`] (the real [`ReleaseController`]), [`FixedPolicy`] (what an operator
//! would set for the nominal capacity) and [`OraclePolicy`] (knows the capacity curve and the plant,
//! looks ahead by the mean delay, same delay as everybody, holds the highest load that keeps ≤ 1% of
//! windows over target: [`oracle_load`]). [`compare`] runs all three on a scenario;
//! [`comparison_table`] and [`summary_table`] print the figures bench/ reports:
//! `cargo test --release -- --ignored --nocapture comparison_report` (or `summary_report`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::{
    Bounds, ControlEvent, ControllerConfig, Decision, LatencyWindow, ReleaseController,
    ReleaseMode, TickInput,
};

const US: u64 = 1_000_000;
/// Windows with fewer requests than this have no meaningful P99 and are not scored.
const MIN_WINDOW_REQUESTS: usize = 20;

/// SplitMix64: tiny, fast, good enough for a simulation, and it keeps the module free of dependencies.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x853c_49e6_748f_ea9b)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Poisson(mean): Knuth below 30, a rounded normal above (plenty for a 10 ms step).
    pub fn poisson(&mut self, mean: f64) -> u64 {
        if mean <= 0.0 {
            return 0;
        }
        if mean < 30.0 {
            let limit = (-mean).exp();
            let mut k = 0;
            let mut p = self.unit();
            while p > limit {
                k += 1;
                p *= self.unit();
            }
            k
        } else {
            // Box–Muller.
            let (u1, u2) = (1.0 - self.unit(), self.unit());
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            (mean + z * mean.sqrt()).round().max(0.0) as u64
        }
    }
}

/// The simulated core's capacity curve.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreModel {
    /// Workers at t = 0.
    pub servers: usize,
    /// Mean (exponential) service time of one request, ms.
    pub service_ms: f64,
    /// The core's own concurrency limit is `servers × limit_per_server` requests in flight; beyond it,
    /// an immediate 503.
    pub limit_per_server: usize,
    /// Clients (the edge) give up after this; counts as an error.
    pub timeout_ms: f64,
    /// (at second, workers from then on), in time order.
    pub steps: Vec<(f64, usize)>,
    /// Seconds [from, to) during which the core is down (killed, restarting): every request arriving
    /// then fails at once, as a refused connection does (a 502 at the edge, an error in the window).
    pub outages: Vec<(f64, f64)>,
}

impl Default for CoreModel {
    fn default() -> Self {
        Self {
            servers: 8,
            service_ms: 10.0,
            limit_per_server: 16,
            timeout_ms: 1000.0,
            steps: Vec::new(),
            outages: Vec::new(),
        }
    }
}

impl CoreModel {
    pub fn servers_at(&self, t_s: f64) -> usize {
        self.steps
            .iter()
            .filter(|(at, _)| *at <= t_s)
            .map(|(_, n)| *n)
            .next_back()
            .unwrap_or(self.servers)
    }

    /// Raw capacity (ρ = 1) at `t_s`, requests/s.
    pub fn capacity_at(&self, t_s: f64) -> f64 {
        self.servers_at(t_s) as f64 * 1000.0 / self.service_ms
    }

    /// Distinct worker counts over the curve.
    pub fn levels(&self) -> Vec<usize> {
        let mut v: Vec<usize> = std::iter::once(self.servers)
            .chain(self.steps.iter().map(|s| s.1))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

enum Outcome {
    Ok(u64),
    Failed,
}

/// FIFO M/M/c: with FIFO order a request's finish time is known when it arrives (earliest free worker),
/// so the core is a heap of worker free times, not an event queue.
struct Core {
    free_at: BinaryHeap<Reverse<u64>>,
    in_flight: BinaryHeap<Reverse<u64>>,
    /// Start times of requests still waiting for a worker.
    waiting: BinaryHeap<Reverse<u64>>,
    servers: usize,
    service_us: f64,
    limit_per_server: usize,
    timeout_us: u64,
    /// [from, to) in µs: the core is down.
    outages: Vec<(u64, u64)>,
}

impl Core {
    fn new(model: &CoreModel) -> Self {
        let mut core = Self {
            free_at: BinaryHeap::new(),
            in_flight: BinaryHeap::new(),
            waiting: BinaryHeap::new(),
            servers: 0,
            service_us: model.service_ms * 1000.0,
            limit_per_server: model.limit_per_server,
            timeout_us: (model.timeout_ms * 1000.0) as u64,
            outages: model
                .outages
                .iter()
                .map(|&(a, b)| ((a * US as f64) as u64, (b * US as f64) as u64))
                .collect(),
        };
        core.set_servers(model.servers, 0);
        core
    }

    /// Workers leaving finish what they hold (its latency is already fixed); new ones are free now.
    fn set_servers(&mut self, n: usize, now: u64) {
        while self.free_at.len() > n.max(1) {
            self.free_at.pop();
        }
        while self.free_at.len() < n.max(1) {
            self.free_at.push(Reverse(now));
        }
        self.servers = n.max(1);
    }

    fn in_flight(&mut self, now: u64) -> usize {
        while self.in_flight.peek().is_some_and(|Reverse(t)| *t <= now) {
            self.in_flight.pop();
        }
        self.in_flight.len()
    }

    /// Requests a worker is busy with: the core's utilisation is this over its worker count.
    fn in_service(&mut self, now: u64) -> usize {
        while self.waiting.peek().is_some_and(|Reverse(t)| *t <= now) {
            self.waiting.pop();
        }
        self.in_flight(now).saturating_sub(self.waiting.len())
    }

    fn limit(&self) -> usize {
        self.servers * self.limit_per_server
    }

    /// Serves a request arriving at `at` (arrivals in time order): its outcome and when the edge sees it.
    fn serve(&mut self, at: u64, rng: &mut Rng) -> (Outcome, u64) {
        if self.outages.iter().any(|&(a, b)| at >= a && at < b) {
            return (Outcome::Failed, at + 500);
        }
        if self.in_flight(at) >= self.limit() {
            return (Outcome::Failed, at + 500);
        }
        let Reverse(free) = self.free_at.pop().unwrap_or(Reverse(at));
        let start = free.max(at);
        let finish = start + rng.exp(self.service_us).round() as u64;
        if start > at {
            self.waiting.push(Reverse(start));
        }
        self.free_at.push(Reverse(finish));
        self.in_flight.push(Reverse(finish));
        let latency = finish - at;
        if latency > self.timeout_us {
            (Outcome::Failed, at + self.timeout_us)
        } else {
            (Outcome::Ok(latency), finish)
        }
    }
}

/// An operator action at a given second.
#[derive(Debug, Clone, PartialEq)]
pub enum OperatorAction {
    Mode(ReleaseMode),
    Bounds(Bounds),
}

/// One simulated sale.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: &'static str,
    pub duration_s: u64,
    pub core: CoreModel,
    pub p99_target_ms: f64,
    /// Release → first core request, uniform in (lo, hi) seconds.
    pub delay_s: (f64, f64),
    /// Session length, uniform in (lo, hi) seconds.
    pub session_s: (f64, f64),
    /// Core requests per second per active session (Poisson).
    pub requests_per_session_s: f64,
    /// Slots (1 s each) of the latency window the policy reads.
    pub window_s: usize,
    /// Seconds [from, to) during which the edge's metrics do not update (their age grows).
    pub stale: Option<(u64, u64)>,
    /// Second from which the core reports sold out.
    pub sold_out_at_s: Option<u64>,
    /// Operator actions, applied at the start of their second before the tick.
    pub operator: Vec<(u64, OperatorAction)>,
    /// Whether the core reports its utilisation (busy workers / workers). Without it the controller
    /// has the P99 and the error fraction only.
    pub report_utilisation: bool,
    pub seed: u64,
}

impl Scenario {
    /// Defaults: 8 workers × 10 ms (800 req/s), P99 target 100 ms, 2–6 s delay, 20–40 s sessions.
    pub fn base(name: &'static str, duration_s: u64, seed: u64) -> Self {
        Self {
            name,
            duration_s,
            core: CoreModel::default(),
            p99_target_ms: 100.0,
            delay_s: (2.0, 6.0),
            session_s: (20.0, 40.0),
            requests_per_session_s: 0.5,
            window_s: 3,
            stale: None,
            sold_out_at_s: None,
            operator: Vec::new(),
            report_utilisation: true,
            seed,
        }
    }

    /// The controller configuration the edge would build from this room (start 50/s, min 1, max 2000).
    pub fn controller_config(&self) -> ControllerConfig {
        ControllerConfig::for_room(
            self.p99_target_ms,
            50.0,
            Bounds {
                min_rate: 1.0,
                max_rate: 2000.0,
                total_active_max: None,
            },
        )
    }
}

/// Something that sets the release rate once a second.
pub trait ReleasePolicy {
    fn name(&self) -> &'static str;
    /// Admissions per second until the next tick.
    fn tick(&mut self, input: &TickInput) -> f64;
    /// The decision record of the last tick, when the policy has one.
    fn last_decision(&self) -> Option<Decision> {
        None
    }
    fn operator(&mut self, _now_ms: u64, _action: &OperatorAction) {}
    fn drain_events(&mut self) -> Vec<ControlEvent> {
        Vec::new()
    }
}

/// The real controller.
pub struct ControllerPolicy {
    pub controller: ReleaseController,
    last: Option<Decision>,
}

impl ControllerPolicy {
    pub fn new(config: ControllerConfig) -> Self {
        Self {
            controller: ReleaseController::new(config),
            last: None,
        }
    }
}

impl ReleasePolicy for ControllerPolicy {
    fn name(&self) -> &'static str {
        "controller"
    }
    fn tick(&mut self, input: &TickInput) -> f64 {
        let d = self.controller.tick(input);
        self.last = Some(d);
        d.rate
    }
    fn last_decision(&self) -> Option<Decision> {
        self.last
    }
    fn operator(&mut self, now_ms: u64, action: &OperatorAction) {
        match action {
            OperatorAction::Mode(m) => self.controller.set_mode(now_ms, *m),
            OperatorAction::Bounds(b) => self.controller.set_bounds(now_ms, *b),
        }
    }
    fn drain_events(&mut self) -> Vec<ControlEvent> {
        self.controller.drain_events()
    }
}

/// A constant rate (stops only on sold out).
pub struct FixedPolicy {
    pub rate: f64,
}

impl ReleasePolicy for FixedPolicy {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn tick(&mut self, input: &TickInput) -> f64 {
        if input.sold_out { 0.0 } else { self.rate }
    }
}

/// Knows the capacity curve (and looks ahead by the mean delay) and the load each level can take
/// within the SLO; steers the occupancy straight to the right level, with the same delay as the rest.
pub struct OraclePolicy {
    core: CoreModel,
    /// (workers, active sessions to hold).
    targets: Vec<(usize, f64)>,
    lookahead_s: f64,
    mean_delay_s: f64,
    horizon_s: f64,
}

impl OraclePolicy {
    /// `slo_loads`: (workers, SLO load in req/s) as [`slo_load`] finds them.
    pub fn new(scn: &Scenario, slo_loads: &[(usize, f64)]) -> Self {
        let mean_delay = (scn.delay_s.0 + scn.delay_s.1) / 2.0;
        let targets = slo_loads
            .iter()
            .map(|&(n, load)| (n, load / scn.requests_per_session_s))
            .collect();
        Self {
            core: scn.core.clone(),
            targets,
            lookahead_s: mean_delay,
            mean_delay_s: mean_delay,
            horizon_s: 1.0,
        }
    }
}

impl ReleasePolicy for OraclePolicy {
    fn name(&self) -> &'static str {
        "oracle"
    }
    fn tick(&mut self, input: &TickInput) -> f64 {
        if input.sold_out {
            return 0.0;
        }
        let n = self
            .core
            .servers_at(input.now_ms as f64 / 1000.0 + self.lookahead_s);
        // Tokens on their way count in the occupancy; as many are needed as sessions end during the delay.
        let target = self.targets.iter().find(|t| t.0 == n).map_or(0.0, |t| t.1)
            + input.exits_per_s * self.mean_delay_s;
        ((target - input.occupancy) / self.horizon_s + input.exits_per_s).clamp(0.0, 5000.0)
    }
}

/// One scored second (requests by arrival time).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub t_s: u64,
    pub requests: usize,
    pub ok: usize,
    /// Exact P99 with failures as infinitely slow; `None` under 20 requests (not scored).
    pub p99_ms: Option<f64>,
}

/// One policy tick.
#[derive(Debug, Clone, PartialEq)]
pub struct TickRecord {
    pub t_s: u64,
    pub rate: f64,
    pub admitted: u64,
    pub input: TickInput,
    pub decision: Option<Decision>,
}

#[derive(Debug, Clone)]
pub struct SimResult {
    pub policy: &'static str,
    pub p99_target_ms: f64,
    pub windows: Vec<Window>,
    pub ticks: Vec<TickRecord>,
    pub events: Vec<ControlEvent>,
    pub admitted: u64,
}

impl SimResult {
    fn scored(&self, ranges: &[(u64, u64)]) -> impl Iterator<Item = &Window> {
        self.windows
            .iter()
            .filter(move |w| ranges.iter().any(|&(a, b)| w.t_s >= a && w.t_s < b))
    }

    /// (windows over target, windows scored) in the ranges [from, to).
    pub fn over(&self, ranges: &[(u64, u64)]) -> (usize, usize) {
        let mut over = 0;
        let mut scored = 0;
        for w in self.scored(ranges) {
            if let Some(p) = w.p99_ms {
                scored += 1;
                if p > self.p99_target_ms {
                    over += 1;
                }
            }
        }
        (over, scored)
    }

    pub fn over_fraction(&self, ranges: &[(u64, u64)]) -> f64 {
        let (o, n) = self.over(ranges);
        if n == 0 { 0.0 } else { o as f64 / n as f64 }
    }

    /// Successful requests per second over the ranges.
    pub fn goodput(&self, ranges: &[(u64, u64)]) -> f64 {
        let secs: u64 = ranges.iter().map(|(a, b)| b.saturating_sub(*a)).sum();
        let ok: usize = self.scored(ranges).map(|w| w.ok).sum();
        if secs == 0 {
            0.0
        } else {
            ok as f64 / secs as f64
        }
    }

    /// Settle time after a step at `step_s`: seconds until the end of the last window over target that
    /// comes before the first run of 10 clean windows (within `within_s`); 0 when no window is over.
    /// A stray window long after the core has settled is steady-state noise, not settling.
    pub fn settle_after(&self, step_s: u64, within_s: u64) -> u64 {
        let mut last_over: Option<u64> = None;
        let mut clean = 0;
        for w in self.scored(&[(step_s, step_s + within_s)]) {
            match w.p99_ms {
                Some(p) if p > self.p99_target_ms => {
                    last_over = Some(w.t_s);
                    clean = 0;
                }
                Some(_) => {
                    clean += 1;
                    if clean >= 10 {
                        break;
                    }
                }
                None => {}
            }
        }
        last_over.map_or(0, |t| t + 1 - step_s)
    }

    /// Coefficient of variation (std / mean) of the per-second admissions over the ranges: how jumpy
    /// the release is for the people in the queue.
    pub fn release_variation(&self, ranges: &[(u64, u64)]) -> f64 {
        let xs: Vec<f64> = self
            .ticks
            .iter()
            .filter(|t| ranges.iter().any(|&(a, b)| t.t_s >= a && t.t_s < b))
            .map(|t| t.admitted as f64)
            .collect();
        if xs.is_empty() {
            return 0.0;
        }
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        if mean > 0.0 { var.sqrt() / mean } else { 0.0 }
    }

    /// Seconds of a window over target in [from, to).
    pub fn violation_s(&self, from: u64, to: u64) -> usize {
        self.over(&[(from, to)]).0
    }
}

/// Runs `scn` with `policy` and scores it.
pub fn run(scn: &Scenario, policy: &mut dyn ReleasePolicy) -> SimResult {
    const DT: u64 = 10_000; // 10 ms
    let dt_s = DT as f64 / US as f64;
    let mut rng = Rng::new(scn.seed);
    let mut core = Core::new(&scn.core);
    let window = LatencyWindow::new(scn.window_s, 1000);
    let mut pending: BinaryHeap<Reverse<u64>> = BinaryHeap::new(); // token redeem times
    let mut sessions: BinaryHeap<Reverse<u64>> = BinaryHeap::new(); // session end times
    let mut observed: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new(); // (seen at, latency | MAX)
    let mut lat: Vec<Vec<f32>> = vec![Vec::new(); scn.duration_s as usize];
    let mut ok = vec![0usize; scn.duration_s as usize];
    let mut ticks = Vec::new();
    let mut events = Vec::new();
    let mut steps = scn.core.steps.clone();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut next_step = 0;
    let (mut rate, mut acc, mut admitted, mut tick_admitted) = (0.0f64, 0.0f64, 0u64, 0u64);
    let (mut exits, mut inflight_sum, mut inflight_n) = (0u64, 0f64, 0u64);
    let mut last_fresh: Option<(u64, TickInput)> = None;
    let mut arrivals: Vec<u64> = Vec::new();
    // Per-tick mean busy fraction of the last `window_s` ticks: utilisation over the same sliding window
    // as the P99.
    let mut util_ring: Vec<f64> = Vec::new();

    let end = scn.duration_s * US;
    let mut t = 0;
    while t < end {
        while next_step < steps.len() && (steps[next_step].0 * US as f64) as u64 <= t {
            core.set_servers(steps[next_step].1, t);
            next_step += 1;
        }
        while pending.peek().is_some_and(|Reverse(at)| *at <= t) {
            pending.pop();
            let len = rng.uniform(scn.session_s.0, scn.session_s.1);
            sessions.push(Reverse(t + (len * US as f64) as u64));
        }
        while sessions.peek().is_some_and(|Reverse(at)| *at <= t) {
            sessions.pop();
            exits += 1;
        }
        record_observed(&mut observed, &window, t);
        inflight_sum += core.in_service(t) as f64;
        inflight_n += 1;

        if t % US == 0 {
            let sec = t / US;
            let now_ms = t / 1000;
            for (_, a) in scn.operator.iter().filter(|(at, _)| *at == sec) {
                policy.operator(now_ms, a);
            }
            let stats = window.snapshot(now_ms);
            if inflight_n > 0 {
                util_ring.push(inflight_sum / inflight_n as f64 / core.servers as f64);
                if util_ring.len() > scn.window_s.max(1) {
                    util_ring.remove(0);
                }
            }
            let util = util_ring.iter().sum::<f64>() / util_ring.len().max(1) as f64;
            let fresh = TickInput {
                now_ms,
                p99_ms: stats.p99_ms,
                samples: stats.successes + stats.errors,
                error_fraction: stats.error_fraction(),
                // What the core would export: busy workers / workers, over the window.
                utilisation: scn.report_utilisation.then_some(util),
                occupancy: (pending.len() + sessions.len()) as f64,
                exits_per_s: exits as f64,
                metrics_age_ms: 0,
                sold_out: scn.sold_out_at_s.is_some_and(|s| sec >= s),
                fair_share: None,
            };
            let input = match (scn.stale, &last_fresh) {
                (Some((a, b)), Some((at, old))) if sec >= a && sec < b => TickInput {
                    now_ms,
                    occupancy: fresh.occupancy,
                    exits_per_s: fresh.exits_per_s,
                    sold_out: fresh.sold_out,
                    metrics_age_ms: now_ms - at,
                    ..*old
                },
                _ => {
                    last_fresh = Some((now_ms, fresh));
                    fresh
                }
            };
            rate = policy.tick(&input);
            if let Some(prev) = ticks.last_mut() {
                let prev: &mut TickRecord = prev;
                prev.admitted = tick_admitted;
            }
            tick_admitted = 0;
            ticks.push(TickRecord {
                t_s: sec,
                rate,
                admitted: 0,
                input,
                decision: policy.last_decision(),
            });
            events.extend(policy.drain_events());
            exits = 0;
            inflight_sum = 0.0;
            inflight_n = 0;
        }

        acc += rate * dt_s;
        while acc >= 1.0 {
            acc -= 1.0;
            admitted += 1;
            tick_admitted += 1;
            let d = rng.uniform(scn.delay_s.0, scn.delay_s.1);
            pending.push(Reverse(t + (d * US as f64) as u64));
        }

        let n = rng.poisson(sessions.len() as f64 * scn.requests_per_session_s * dt_s);
        arrivals.clear();
        arrivals.extend((0..n).map(|_| t + (rng.unit() * DT as f64) as u64));
        arrivals.sort_unstable();
        for &at in &arrivals {
            let sec = (at / US) as usize;
            let (outcome, seen) = core.serve(at, &mut rng);
            match outcome {
                Outcome::Ok(l) => {
                    lat[sec].push(l as f32 / 1000.0);
                    ok[sec] += 1;
                    observed.push(Reverse((seen, l)));
                }
                Outcome::Failed => {
                    lat[sec].push(f32::INFINITY);
                    observed.push(Reverse((seen, u64::MAX)));
                }
            }
        }
        t += DT;
    }
    if let Some(prev) = ticks.last_mut() {
        prev.admitted = tick_admitted;
    }

    let windows = lat
        .into_iter()
        .zip(ok)
        .enumerate()
        .map(|(i, (mut l, ok))| Window {
            t_s: i as u64,
            requests: l.len(),
            ok,
            p99_ms: p99_exact(&mut l),
        })
        .collect();
    SimResult {
        policy: policy.name(),
        p99_target_ms: scn.p99_target_ms,
        windows,
        ticks,
        events,
        admitted,
    }
}

fn p99_exact(l: &mut [f32]) -> Option<f64> {
    if l.len() < MIN_WINDOW_REQUESTS {
        return None;
    }
    l.sort_unstable_by(|a, b| a.total_cmp(b));
    let rank = (0.99 * l.len() as f64).ceil() as usize;
    Some(f64::from(l[rank.max(1) - 1]))
}

/// Open-loop Poisson load on a fixed `workers` core: the fraction of scored 1 s windows over target.
fn open_loop_over(
    core: &CoreModel,
    workers: usize,
    load: f64,
    target_ms: f64,
    secs: u64,
    seed: u64,
) -> f64 {
    let model = CoreModel {
        servers: workers,
        steps: Vec::new(),
        outages: Vec::new(),
        ..core.clone()
    };
    let mut c = Core::new(&model);
    let mut rng = Rng::new(seed);
    let mut lat: Vec<Vec<f32>> = vec![Vec::new(); secs as usize];
    let mut at = 0u64;
    loop {
        at += rng.exp(US as f64 / load).round() as u64;
        if at >= secs * US {
            break;
        }
        let l = match c.serve(at, &mut rng).0 {
            Outcome::Ok(l) => l as f32 / 1000.0,
            Outcome::Failed => f32::INFINITY,
        };
        lat[(at / US) as usize].push(l);
    }
    // The first seconds start from an empty core: skip them.
    let scored: Vec<f64> = lat
        .iter_mut()
        .skip(5)
        .filter_map(|l| p99_exact(l))
        .collect();
    if scored.is_empty() {
        return 1.0;
    }
    scored.iter().filter(|p| **p > target_ms).count() as f64 / scored.len() as f64
}

/// The SLO load of a core with `workers`: the highest steady Poisson load (req/s) at which at most 1% of
/// 1 s windows have a P99 over target (bisection over 150 s open-loop runs). This is the "SLO
/// capacity" goodput is measured against, and the level the oracle holds.
pub fn slo_load(core: &CoreModel, workers: usize, target_ms: f64, seed: u64) -> f64 {
    let cap = workers as f64 * 1000.0 / core.service_ms;
    let (mut lo, mut hi) = (0.05 * cap, cap);
    for i in 0..12 {
        let mid = (lo + hi) / 2.0;
        if open_loop_over(core, workers, mid, target_ms, 150, seed.wrapping_add(i)) <= 0.01 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The level the oracle holds on a core with `workers`: the highest fraction (bisection) of the
/// open-loop [`slo_load`] that the oracle can hold *in closed loop* (sessions, delays, waves of exits)
/// with at most 1% of 1 s windows over target. Without this the "oracle" would sit at a load that breaks
/// the goal it is the yardstick for. Cached per (scenario shape, workers): tests share the work.
pub fn oracle_load(scn: &Scenario, workers: usize) -> f64 {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, f64>>> = OnceLock::new();
    let key = format!(
        "{workers}|{:?}|{}|{:?}|{:?}|{}|{}",
        scn.core.service_ms,
        scn.p99_target_ms,
        scn.delay_s,
        scn.session_s,
        scn.requests_per_session_s,
        scn.window_s
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(v) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return *v;
    }
    let open = slo_load(
        &scn.core,
        workers,
        scn.p99_target_ms,
        0x5eed ^ workers as u64,
    );
    let mut flat = Scenario::base("oracle_calibration", 160, 0xca1 ^ workers as u64);
    flat.core = CoreModel {
        servers: workers,
        steps: Vec::new(),
        outages: Vec::new(),
        ..scn.core.clone()
    };
    flat.p99_target_ms = scn.p99_target_ms;
    flat.delay_s = scn.delay_s;
    flat.session_s = scn.session_s;
    flat.requests_per_session_s = scn.requests_per_session_s;
    flat.window_s = scn.window_s;
    let (mut lo, mut hi) = (0.5, 1.0);
    for _ in 0..7 {
        let mid = (lo + hi) / 2.0;
        let r = run(
            &flat,
            &mut OraclePolicy::new(&flat, &[(workers, open * mid)]),
        );
        if r.over_fraction(&[(40, 160)]) <= 0.01 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let v = open * lo;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, v);
    v
}

/// The three policies on one scenario.
pub struct Comparison {
    pub controller: SimResult,
    pub fixed: SimResult,
    pub oracle: SimResult,
    /// (workers, open-loop SLO load req/s) for each capacity level: the "SLO capacity".
    pub slo_loads: Vec<(usize, f64)>,
    /// (workers, load the oracle holds, req/s) for each capacity level.
    pub oracle_loads: Vec<(usize, f64)>,
}

impl Comparison {
    /// Mean SLO capacity over the ranges of the scenario's capacity curve.
    pub fn slo_capacity(&self, scn: &Scenario, ranges: &[(u64, u64)]) -> f64 {
        let mut sum = 0.0;
        let mut n = 0;
        for &(a, b) in ranges {
            for s in a..b {
                let w = scn.core.servers_at(s as f64);
                sum += self
                    .slo_loads
                    .iter()
                    .find(|l| l.0 == w)
                    .map_or(0.0, |l| l.1);
                n += 1;
            }
        }
        if n == 0 { 0.0 } else { sum / n as f64 }
    }
}

/// Runs the controller, a fixed rate sized for the nominal capacity (what the oracle would release
/// there in steady state), and the oracle on `scn`.
pub fn compare(scn: &Scenario) -> Comparison {
    let levels = scn.core.levels();
    let slo_loads: Vec<(usize, f64)> = levels
        .iter()
        .map(|&w| {
            (
                w,
                slo_load(&scn.core, w, scn.p99_target_ms, 0x5eed ^ w as u64),
            )
        })
        .collect();
    let oracle_loads: Vec<(usize, f64)> =
        levels.iter().map(|&w| (w, oracle_load(scn, w))).collect();
    let nominal = oracle_loads
        .iter()
        .find(|l| l.0 == scn.core.servers)
        .map_or(0.0, |l| l.1);
    let mean_session = (scn.session_s.0 + scn.session_s.1) / 2.0;
    let fixed_rate = nominal / scn.requests_per_session_s / mean_session;
    let controller = run(scn, &mut ControllerPolicy::new(scn.controller_config()));
    let fixed = run(scn, &mut FixedPolicy { rate: fixed_rate });
    let oracle = run(scn, &mut OraclePolicy::new(scn, &oracle_loads));
    Comparison {
        controller,
        fixed,
        oracle,
        slo_loads,
        oracle_loads,
    }
}

/// A scenario with the seconds that count as steady state and the second of its capacity step.
pub type ScoredScenario = (Scenario, Vec<(u64, u64)>, Option<u64>);

/// The standard scenarios: cold start, −50% step, +50% step.
pub fn standard_scenarios(seed: u64) -> Vec<ScoredScenario> {
    let cold = Scenario::base("cold_start", 180, seed);
    let mut down = Scenario::base("step_down_50", 300, seed);
    down.core.steps = vec![(120.0, 4)];
    let mut up = Scenario::base("step_up_50", 300, seed);
    up.core.steps = vec![(120.0, 12)];
    vec![
        (cold, vec![(60, 180)], None),
        (down, vec![(60, 120), (200, 300)], Some(120)),
        (up, vec![(60, 300)], Some(120)),
    ]
}

/// The comparison table bench/ reports (text, one block per scenario).
pub fn comparison_table(seeds: &[u64]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for &seed in seeds {
        for (scn, steady, step) in standard_scenarios(seed) {
            let c = compare(&scn);
            let slo = c.slo_capacity(&scn, &steady);
            let _ = writeln!(
                out,
                "scenario {} seed {} (steady {:?}, (workers, SLO capacity) {:?}, oracle holds {:?}, target {} ms)",
                scn.name,
                seed,
                steady,
                c.slo_loads
                    .iter()
                    .map(|(w, l)| (*w, l.round()))
                    .collect::<Vec<_>>(),
                c.oracle_loads
                    .iter()
                    .map(|(w, l)| (*w, l.round()))
                    .collect::<Vec<_>>(),
                scn.p99_target_ms
            );
            let _ = writeln!(
                out,
                "  {:<10} {:>12} {:>10} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>9}",
                "policy",
                "over/steady",
                "over%",
                "all over",
                "goodput/s",
                "/SLO",
                "/oracle",
                "viol_s",
                "settle_s",
                "rate_cv"
            );
            let og = c.oracle.goodput(&steady);
            for r in [&c.controller, &c.fixed, &c.oracle] {
                let (o, n) = r.over(&steady);
                let (ao, an) = r.over(&[(0, scn.duration_s)]);
                let g = r.goodput(&steady);
                let settle = step.map_or("-".to_string(), |s| r.settle_after(s, 120).to_string());
                let viol = step.map_or("-".to_string(), |s| r.violation_s(s, s + 120).to_string());
                let _ = writeln!(
                    out,
                    "  {:<10} {:>12} {:>9.2}% {:>12} {:>12.1} {:>10.3} {:>10.3} {:>10} {:>10} {:>9.2}",
                    r.policy,
                    format!("{o}/{n}"),
                    100.0 * o as f64 / n.max(1) as f64,
                    format!("{ao}/{an}"),
                    g,
                    g / slo,
                    g / og,
                    viol,
                    settle,
                    r.release_variation(&steady)
                );
            }
        }
    }
    out
}

/// One line per scenario over many seeds: steady windows over target (all seeds together), goodput vs
/// the oracle (min and mean over seeds), and after a step the extra violation and settle time vs the
/// oracle (worst seed).
pub fn summary_table(seeds: &[u64]) -> String {
    summary_table_with(seeds, true)
}

/// [`summary_table`], with or without the core reporting its utilisation.
pub fn summary_table_with(seeds: &[u64], report_utilisation: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<13} {:<10} {:>14} {:>9} {:>9} {:>9} {:>16} {:>16}",
        "scenario",
        "policy",
        "steady over",
        "over%",
        "gp/orc min",
        "gp/orc avg",
        "extra viol max",
        "settle (orc) max"
    );
    for i in 0..3 {
        let runs: Vec<(ScoredScenario, Comparison)> = seeds
            .iter()
            .map(|&seed| {
                let mut sc = standard_scenarios(seed).swap_remove(i);
                sc.0.report_utilisation = report_utilisation;
                let c = compare(&sc.0);
                (sc, c)
            })
            .collect();
        for pick in 0..3 {
            let mut over = (0, 0);
            let mut ratios = Vec::new();
            let mut extra_max = i64::MIN;
            let mut settle_max = (0, 0);
            let mut name = "";
            for ((_, steady, step), c) in &runs {
                let r = [&c.controller, &c.fixed, &c.oracle][pick];
                name = r.policy;
                let (o, n) = r.over(steady);
                over = (over.0 + o, over.1 + n);
                ratios.push(r.goodput(steady) / c.oracle.goodput(steady));
                if let Some(st) = step {
                    let e = r.violation_s(*st, st + 120) as i64
                        - c.oracle.violation_s(*st, st + 120) as i64;
                    extra_max = extra_max.max(e);
                    let s = (r.settle_after(*st, 120), c.oracle.settle_after(*st, 120));
                    if s.0 >= settle_max.0 {
                        settle_max = s;
                    }
                }
            }
            let min = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
            let avg = ratios.iter().sum::<f64>() / ratios.len().max(1) as f64;
            let has_step = runs.first().is_some_and(|r| r.0.2.is_some());
            let _ = writeln!(
                out,
                "{:<13} {:<10} {:>14} {:>8.2}% {:>9.3} {:>9.3} {:>16} {:>16}",
                runs[0].0.0.name,
                name,
                format!("{}/{}", over.0, over.1),
                100.0 * over.0 as f64 / over.1.max(1) as f64,
                min,
                avg,
                if has_step {
                    format!("{extra_max} s")
                } else {
                    "-".into()
                },
                if has_step {
                    format!("{} s ({} s)", settle_max.0, settle_max.1)
                } else {
                    "-".into()
                },
            );
        }
    }
    out
}


/// The −50% step on plants the defaults were not tuned on: (name, scenario). Steady seconds are
/// 80–160 and 280–400, the step at 160 s.
pub fn other_plants(seed: u64) -> Vec<(&'static str, Scenario)> {
    let mut long = Scenario::base("long_sessions", 400, seed);
    long.session_s = (60.0, 120.0);
    long.delay_s = (3.0, 10.0);
    let mut big = Scenario::base("big_core", 400, seed);
    big.core.servers = 32;
    big.core.service_ms = 20.0;
    big.p99_target_ms = 200.0;
    big.requests_per_session_s = 1.0;
    let mut short = Scenario::base("short_sessions", 400, seed);
    short.session_s = (5.0, 15.0);
    short.delay_s = (1.0, 3.0);
    let mut out = vec![
        ("60-120 s sessions, 3-10 s delay", long),
        ("32 workers x 20 ms, target 200 ms", big),
        ("5-15 s sessions, 1-3 s delay", short),
    ];
    for (_, s) in &mut out {
        s.core.steps = vec![(160.0, s.core.servers / 2)];
    }
    out
}

/// [`other_plants`] for each seed: one line per plant and seed, controller vs oracle.
pub fn other_plants_table(seeds: &[u64]) -> String {
    use std::fmt::Write;
    let steady = [(80u64, 160u64), (280, 400)];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<36} {:>4} {:>12} {:>12} {:>8} {:>14} {:>14}",
        "plant (-50% step at 160 s)",
        "seed",
        "ctl over",
        "oracle over",
        "gp/orc",
        "viol ctl/orc",
        "settle ctl/orc"
    );
    for &seed in seeds {
        for (name, scn) in other_plants(seed) {
            let c = compare(&scn);
            let (ctl, orc) = (&c.controller, &c.oracle);
            let (co, cn) = ctl.over(&steady);
            let (oo, on) = orc.over(&steady);
            let _ = writeln!(
                out,
                "{:<36} {:>4} {:>12} {:>12} {:>8.3} {:>14} {:>14}",
                name,
                seed,
                format!("{co}/{cn}"),
                format!("{oo}/{on}"),
                ctl.goodput(&steady) / orc.goodput(&steady),
                format!(
                    "{}/{} s",
                    ctl.violation_s(160, 280),
                    orc.violation_s(160, 280)
                ),
                format!(
                    "{}/{} s",
                    ctl.settle_after(160, 120),
                    orc.settle_after(160, 120)
                ),
            );
        }
    }
    out
}

/// The short outage of [`short_outage`]: the core is down over [from, to) seconds.
pub const OUTAGE_S: (f64, f64) = (100.0, 101.5);

/// The core killed and restarted at steady state: down (every request fails at once, a 502 at the edge)
/// for 1.5 s at 100 s, then as healthy as before. Steady seconds before it: 60–100.
pub fn short_outage(seed: u64) -> Scenario {
    let mut s = Scenario::base("short_outage", 220, seed);
    s.core.outages = vec![OUTAGE_S];
    s
}

/// How the release came back after [`short_outage`]'s outage.
#[derive(Debug, Clone, PartialEq)]
pub struct OutageRecovery {
    /// Mean admissions/s over the 40 s before the outage.
    pub before: f64,
    /// Seconds from the end of the outage to the start of the first 5 s whose mean admissions/s are
    /// back to 80% of `before`; `None` if never within the run.
    pub back_after_s: Option<u64>,
    /// Mean admissions/s over the 60 s after the outage.
    pub after_60s: f64,
    /// Mean occupancy (tokens + sessions) over the 40 s before the outage.
    pub occ_before: f64,
    /// Seconds from the end of the outage until the occupancy, past its lowest point in the 20 s
    /// after the outage, is back to 90% of `occ_before` (0: it never fell under); `None`: not within
    /// that minute.
    pub occ_back_after_s: Option<u64>,
    /// Lowest occupancy in the 20 s after the outage / `occ_before`.
    pub occ_dip: f64,
    /// Whether the controller undid an error-only cut (reason `errors_cleared`) after the outage.
    pub undone: bool,
    /// Goodput (successful requests/s) over 20–80 s after the outage / over the 40 s before it.
    pub goodput_ratio: f64,
    /// Scored windows over target from 2 s after the outage to the end of the run.
    pub over_after: (usize, usize),
}

/// [`OutageRecovery`] of a run of [`short_outage`].
pub fn outage_recovery(r: &SimResult) -> OutageRecovery {
    let end = OUTAGE_S.1.ceil() as u64;
    let from = OUTAGE_S.0 as u64;
    let admitted = |a: u64, b: u64| -> f64 {
        let n: u64 = r.ticks.iter().filter(|t| t.t_s >= a && t.t_s < b).map(|t| t.admitted).sum();
        n as f64 / b.saturating_sub(a).max(1) as f64
    };
    let before = admitted(from - 40, from);
    let last = r.ticks.last().map_or(0, |t| t.t_s);
    let back_after_s = (end..last.saturating_sub(5))
        .find(|&t| admitted(t, t + 5) >= 0.8 * before)
        .map(|t| t - end);
    let pre: Vec<f64> = r
        .ticks
        .iter()
        .filter(|t| t.t_s >= from - 40 && t.t_s < from)
        .map(|t| t.input.occupancy)
        .collect();
    let occ_before = pre.iter().sum::<f64>() / pre.len().max(1) as f64;
    let minute: Vec<&TickRecord> = r.ticks.iter().filter(|t| t.t_s >= end && t.t_s < end + 60).collect();
    let low = minute
        .iter()
        .take(20)
        .enumerate()
        .min_by(|a, b| a.1.input.occupancy.total_cmp(&b.1.input.occupancy))
        .map_or(0, |(i, _)| i);
    let occ_dip = minute.get(low).map_or(1.0, |t| t.input.occupancy / occ_before.max(1e-9));
    let occ_back_after_s = if occ_dip >= 0.9 {
        Some(0)
    } else {
        minute[low..]
            .iter()
            .find(|t| t.input.occupancy >= 0.9 * occ_before)
            .map(|t| t.t_s - end)
    };
    let undone = r.ticks.iter().any(|t| {
        t.t_s >= from && t.decision.is_some_and(|d| d.reason == crate::Reason::ErrorsCleared)
    });
    OutageRecovery {
        before,
        back_after_s,
        occ_before,
        occ_back_after_s,
        occ_dip,
        undone,
        after_60s: admitted(end, end + 60),
        goodput_ratio: r.goodput(&[(end + 20, end + 80)]) / r.goodput(&[(from - 40, from)]).max(1e-9),
        over_after: r.over(&[(end + 2, last + 1)]),
    }
}

/// [`short_outage`] for each seed: one line per seed, the controller's recovery.
pub fn outage_table(seeds: &[u64]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6} {:>12} {:>12} {:>10} {:>8} {:>12} {:>16} {:>16} {:>12} {:>7}",
        "seed",
        "before adm/s",
        "adm back s",
        "occ before",
        "occ dip",
        "occ back s",
        "60 s after adm/s",
        "goodput 20-80 s",
        "over after",
        "undone"
    );
    for &seed in seeds {
        let scn = short_outage(seed);
        let r = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
        let o = outage_recovery(&r);
        let _ = writeln!(
            out,
            "{:<6} {:>12.1} {:>12} {:>10.0} {:>8.2} {:>12} {:>16.1} {:>16.3} {:>12} {:>7}",
            seed,
            o.before,
            o.back_after_s.map_or("never".to_string(), |s| s.to_string()),
            o.occ_before,
            o.occ_dip,
            o.occ_back_after_s.map_or("never".to_string(), |s| s.to_string()),
            o.after_60s,
            o.goodput_ratio,
            format!("{}/{}", o.over_after.0, o.over_after.1),
            o.undone,
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Several rooms on one core
// ---------------------------------------------------------------------------------------------

/// One room of a [`RoomsScenario`]: its own queue of fans, its own controller, its own sessions; the
/// core and the latency window the controllers read are shared, as on one edge.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomLoad {
    pub name: &'static str,
    /// The room's controller (start, bounds, target), made when the room opens.
    pub config: ControllerConfig,
    /// The room exists (its controller is made, its fans join) from this second.
    pub opens_at_s: u64,
    /// Fans joining, uniformly over `join_over_s` seconds from `opens_at_s`.
    pub fans: u64,
    pub join_over_s: f64,
    /// Session length, uniform in (lo, hi) seconds, and core requests per second per session.
    pub session_s: (f64, f64),
    pub requests_per_session_s: f64,
    /// The operator's weight in sharing the core ([`RoomDemand::weight`](crate::RoomDemand::weight)); 1: an equal part.
    pub weight: f64,
}

impl RoomLoad {
    /// A cautious small sale (start 2/s, min 1, max 2000, P99 target 100 ms: the room of issue 26)
    /// of `fans` joining within 2 s, whose fans stay on the site making few core requests.
    pub fn cautious(name: &'static str, opens_at_s: u64, fans: u64) -> Self {
        Self {
            name,
            config: ControllerConfig::for_room(100.0, 2.0, Bounds { min_rate: 1.0, max_rate: 2000.0, total_active_max: None }),
            opens_at_s,
            fans,
            join_over_s: 2.0,
            session_s: (120.0, 240.0),
            requests_per_session_s: 0.05,
            weight: 1.0,
        }
    }
}

/// Several rooms on one simulated core (see [`run_rooms`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RoomsScenario {
    pub name: &'static str,
    pub duration_s: u64,
    pub core: CoreModel,
    pub p99_target_ms: f64,
    /// Release → first core request, uniform in (lo, hi) seconds.
    pub delay_s: (f64, f64),
    pub window_s: usize,
    /// Seconds [from, to) in which every core request the edge forwards takes this many ms more
    /// (the edge itself busy: hundreds of fans joining at once on a small machine).
    pub slow: Option<(f64, f64, f64)>,
    pub rooms: Vec<RoomLoad>,
    pub seed: u64,
}

/// What became of one room of a [`RoomsScenario`].
#[derive(Debug, Clone, PartialEq)]
pub struct RoomOutcome {
    pub name: &'static str,
    pub fans: u64,
    pub admitted: u64,
    /// Longest wait from joining to admission (FIFO), seconds; `None` when someone was never admitted.
    pub max_wait_s: Option<f64>,
    /// Ticks with people queued at which the controller set a rate under the room's minimum.
    pub ticks_below_min: usize,
    /// Decisions, one per tick from the room's opening.
    pub decisions: Vec<Decision>,
    /// The room's occupancy (tokens out + sessions) at each tick from its opening.
    pub occupancy: Vec<f64>,
    /// Whether fans were queued (joined, not yet admitted) at each tick from its opening.
    pub waiting: Vec<bool>,
}

/// The core's windows (all rooms' requests) and each room's outcome.
#[derive(Debug, Clone)]
pub struct RoomsResult {
    pub p99_target_ms: f64,
    pub windows: Vec<Window>,
    pub rooms: Vec<RoomOutcome>,
}

impl RoomsResult {
    /// (windows over target, windows scored) in [from, to).
    pub fn over(&self, from: u64, to: u64) -> (usize, usize) {
        let scored: Vec<f64> = self.windows.iter().filter(|w| w.t_s >= from && w.t_s < to).filter_map(|w| w.p99_ms).collect();
        (scored.iter().filter(|p| **p > self.p99_target_ms).count(), scored.len())
    }

    /// Successful core requests per second in [from, to), all rooms together.
    pub fn goodput(&self, from: u64, to: u64) -> f64 {
        let ok: usize = self.windows.iter().filter(|w| w.t_s >= from && w.t_s < to).map(|w| w.ok).sum();
        ok as f64 / to.saturating_sub(from).max(1) as f64
    }
}

/// How the rooms of a [`RoomsScenario`] are told their share of the core ([`TickInput::fair_share`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// No share: every room reads the core as if it were alone.
    Alone,
    /// An equal part of the total occupancy for each room in play ([`fair_share`](crate::fair_share)).
    Equal,
    /// Max-min by demand, occupancy + queue ([`fair_shares`](crate::fair_shares)).
    ByDemand,
}

/// [`run_rooms_with`]: with `share`, shares by demand ([`Sharing::ByDemand`]); without, alone.
pub fn run_rooms(scn: &RoomsScenario, share: bool) -> RoomsResult {
    run_rooms_with(scn, if share { Sharing::ByDemand } else { Sharing::Alone })
}

/// Runs every room of `scn` on its shared core. Each room ticks its own [`ReleaseController`] once a
/// second with the shared core's figures, its own occupancy and exits, and its share of the core
/// among the rooms in play (people queued or sessions active) as `sharing` says.
pub fn run_rooms_with(scn: &RoomsScenario, sharing: Sharing) -> RoomsResult {
    const DT: u64 = 10_000;
    struct Live {
        controller: Option<ReleaseController>,
        joins: Vec<u64>,
        admitted: usize,
        rate: f64,
        acc: f64,
        pending: BinaryHeap<Reverse<u64>>,
        sessions: BinaryHeap<Reverse<u64>>,
        exits: u64,
        max_wait_us: u64,
        below_min: usize,
        decisions: Vec<Decision>,
        occupancy: Vec<f64>,
        waiting: Vec<bool>,
    }
    let dt_s = DT as f64 / US as f64;
    let mut rng = Rng::new(scn.seed);
    let mut core = Core::new(&scn.core);
    let window = LatencyWindow::new(scn.window_s, 1000);
    let mut observed: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut lat: Vec<Vec<f32>> = vec![Vec::new(); scn.duration_s as usize];
    let mut ok = vec![0usize; scn.duration_s as usize];
    let mut util_ring: Vec<f64> = Vec::new();
    let (mut inflight_sum, mut inflight_n) = (0f64, 0u64);
    let mut rooms: Vec<Live> = scn
        .rooms
        .iter()
        .map(|r| {
            let mut joins: Vec<u64> = (0..r.fans)
                .map(|_| ((r.opens_at_s as f64 + rng.unit() * r.join_over_s) * US as f64) as u64)
                .collect();
            joins.sort_unstable();
            Live {
                controller: None,
                joins,
                admitted: 0,
                rate: 0.0,
                acc: 0.0,
                pending: BinaryHeap::new(),
                sessions: BinaryHeap::new(),
                exits: 0,
                max_wait_us: 0,
                below_min: 0,
                decisions: Vec::new(),
                occupancy: Vec::new(),
                waiting: Vec::new(),
            }
        })
        .collect();
    let mut steps = scn.core.steps.clone();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut next_step = 0;
    let end = scn.duration_s * US;
    let mut t = 0;
    while t < end {
        while next_step < steps.len() && (steps[next_step].0 * US as f64) as u64 <= t {
            core.set_servers(steps[next_step].1, t);
            next_step += 1;
        }
        for (live, load) in rooms.iter_mut().zip(&scn.rooms) {
            while live.pending.peek().is_some_and(|Reverse(at)| *at <= t) {
                live.pending.pop();
                let len = rng.uniform(load.session_s.0, load.session_s.1);
                live.sessions.push(Reverse(t + (len * US as f64) as u64));
            }
            while live.sessions.peek().is_some_and(|Reverse(at)| *at <= t) {
                live.sessions.pop();
                live.exits += 1;
            }
        }
        record_observed(&mut observed, &window, t);
        inflight_sum += core.in_service(t) as f64;
        inflight_n += 1;
        if t % US == 0 {
            let sec = t / US;
            let now_ms = t / 1000;
            let stats = window.snapshot(now_ms);
            if inflight_n > 0 {
                util_ring.push(inflight_sum / inflight_n as f64 / core.servers as f64);
                if util_ring.len() > scn.window_s.max(1) {
                    util_ring.remove(0);
                }
            }
            let util = util_ring.iter().sum::<f64>() / util_ring.len().max(1) as f64;
            let joined = |live: &Live| live.joins.partition_point(|j| *j <= t);
            let occ = |live: &Live| (live.pending.len() + live.sessions.len()) as f64;
            // A room not open yet is not in play (no occupancy, no queue).
            let demands: Vec<crate::RoomDemand> = rooms
                .iter()
                .zip(&scn.rooms)
                .map(|(l, r)| {
                    let open = sec >= r.opens_at_s;
                    let queued = if open { joined(l).saturating_sub(l.admitted) as f64 } else { 0.0 };
                    crate::RoomDemand { weight: r.weight, ..crate::RoomDemand::new(if open { occ(l) } else { 0.0 }, queued) }
                })
                .collect();
            let shares = match sharing {
                Sharing::Alone => vec![None; demands.len()],
                Sharing::ByDemand => crate::fair_shares(&demands),
                Sharing::Equal => {
                    let in_play: Vec<f64> = demands.iter().filter(|d| d.occupancy + d.queued > 0.0).map(|d| d.occupancy).collect();
                    let fair = crate::fair_share(in_play.iter().sum(), in_play.len());
                    demands.iter().map(|d| fair.filter(|_| d.occupancy + d.queued > 0.0)).collect()
                }
            };
            for ((live, load), fair) in rooms.iter_mut().zip(&scn.rooms).zip(shares) {
                if sec < load.opens_at_s {
                    continue;
                }
                let (occupancy, queued) = (occ(live), joined(live) > live.admitted);
                let controller = live.controller.get_or_insert_with(|| ReleaseController::new(load.config.clone()));
                let input = TickInput {
                    now_ms,
                    p99_ms: stats.p99_ms,
                    samples: stats.successes + stats.errors,
                    error_fraction: stats.error_fraction(),
                    utilisation: Some(util),
                    occupancy,
                    exits_per_s: live.exits as f64,
                    metrics_age_ms: 0,
                    sold_out: false,
                    fair_share: fair,
                };
                let d = controller.tick(&input);
                if queued && d.rate < load.config.bounds.min_rate {
                    live.below_min += 1;
                }
                live.rate = d.rate;
                live.decisions.push(d);
                live.occupancy.push(occupancy);
                live.waiting.push(queued);
                live.exits = 0;
            }
            inflight_sum = 0.0;
            inflight_n = 0;
        }
        for live in rooms.iter_mut() {
            live.acc += live.rate * dt_s;
            let joined = live.joins.partition_point(|j| *j <= t);
            while live.acc >= 1.0 && live.admitted < joined {
                live.acc -= 1.0;
                live.max_wait_us = live.max_wait_us.max(t - live.joins[live.admitted]);
                live.admitted += 1;
                let d = rng.uniform(scn.delay_s.0, scn.delay_s.1);
                live.pending.push(Reverse(t + (d * US as f64) as u64));
            }
            // Nobody to let in: a rate does not bank admissions for later.
            live.acc = live.acc.min(1.0);
        }
        let mut arrivals: Vec<u64> = Vec::new();
        for (live, load) in rooms.iter().zip(&scn.rooms) {
            let n = rng.poisson(live.sessions.len() as f64 * load.requests_per_session_s * dt_s);
            arrivals.extend((0..n).map(|_| t + (rng.unit() * DT as f64) as u64));
        }
        arrivals.sort_unstable();
        for &at in &arrivals {
            let sec = (at / US) as usize;
            let extra = scn
                .slow
                .filter(|&(a, b, _)| at as f64 >= a * US as f64 && (at as f64) < b * US as f64)
                .map_or(0, |(_, _, ms)| (ms * 1000.0) as u64);
            match core.serve(at, &mut rng) {
                (Outcome::Ok(l), seen) => {
                    lat[sec].push((l + extra) as f32 / 1000.0);
                    ok[sec] += 1;
                    observed.push(Reverse((seen + extra, l + extra)));
                }
                (Outcome::Failed, seen) => {
                    lat[sec].push(f32::INFINITY);
                    observed.push(Reverse((seen, u64::MAX)));
                }
            }
        }
        t += DT;
    }
    let windows = lat
        .into_iter()
        .zip(ok)
        .enumerate()
        .map(|(i, (mut l, ok))| Window { t_s: i as u64, requests: l.len(), ok, p99_ms: p99_exact(&mut l) })
        .collect();
    let rooms = rooms
        .into_iter()
        .zip(&scn.rooms)
        .map(|(live, load)| RoomOutcome {
            name: load.name,
            fans: load.fans,
            admitted: live.admitted as u64,
            max_wait_s: (live.admitted == live.joins.len()).then_some(live.max_wait_us as f64 / US as f64),
            ticks_below_min: live.below_min,
            decisions: live.decisions,
            occupancy: live.occupancy,
            waiting: live.waiting,
        })
        .collect();
    RoomsResult { p99_target_ms: scn.p99_target_ms, windows, rooms }
}

/// The scenarios of issue 26, with their goals (asserted by the tests, reported by bench/):
/// - `rooms_one_after_another`: sale A (300 fans, cautious start) at 0 s, sale B (the same) in a
///   new room at 60 s while A's fans stay on the site; the first seconds of B's joins are slow at
///   the edge (+150 ms on every forwarded core request for 2 s). Goal: every fan of each room
///   admitted within 30 s of joining; no room's rate under its minimum while people queue.
/// - `rooms_at_once_one_surging`: a big sale A (20,000 fans in 10 s, the standard plant and room)
///   fills the core from 0 s; a cautious sale B of 300 buying fans (0.5 req/s each) opens at 60 s
///   on the same core. Goals: every fan of B admitted within 30 s; no room under its minimum; the
///   core's goodput over 90–180 s ≥ 0.85 of the oracle's level and ≤ 2% of those windows over target.
/// - `light_load`: one cautious sale of 300 fans at an idle core. Goal: all admitted within 30 s.
/// - `light_load_core_stopped` (issue 39): the same sale, the core stopped for a second 8 s in
///   (every request arriving in 8–9 s answers 1 s late: the P99 of the few is a second for a
///   window, one far cut). The fans stay on the site for minutes, so the occupancy never drains to
///   the cut budget. Goals: all admitted within 30 s, and no more than 5 ticks in a row of
///   cool-down with the core under target ([`longest_idle_cool_down`]).
///
/// Status (seeds 1–10, rooms told their shares by demand, [`fair_shares`](crate::fair_shares)):
/// every scenario meets its goals (`rooms_scenarios_meet_their_goals`).
/// - `rooms_one_after_another`: longest wait 13.1 s (A) and 14.9 s (B); `light_load` 13.1 s.
///   Light load doubles the budget once 95% of it is in use and fills each doubling in one
///   horizon (issue 39): a doubling every 2–3 s. Before, the release slowed as the occupancy neared
///   the budget, a doubling every 4–5 s: 22.5, 23.0 and 22.5 s.
/// - `rooms_at_once_one_surging`: all 300 buyers admitted, longest wait 25.7–26.4 s; goodput over
///   90–180 s 0.874–0.948 of the oracle (mean 0.926); 0 of 90 windows over target in every seed;
///   no tick under a minimum. The surge gives way while the buyers wait ([`Reason::YieldShare`](crate::Reason::YieldShare)),
///   the buyers grow into the core at its setpoint ([`Reason::GrowToShare`](crate::Reason::GrowToShare)).
///   Before (a room under its share only held while the surge kept the core at the hold
///   pressure): 148–300 buyers admitted in 120 s, goodput 0.842–1.010. With the equal split of
///   [`fair_share`](crate::fair_share) ([`Sharing::Equal`]) the buyers are in within 23.2 s but
///   the surge yields to them for nothing once their queue is empty: goodput 0.800–0.861.
/// - `light_load_core_stopped`: longest wait 18.4 s (24.7 s before the linear fill), at most 2 ticks of cool-down under target
///   while fans waited. Before the cool-down could end by pressure (issue 39) it held the release at
///   1/s for 28 ticks, the whole `max_cooldown_ms`, and the last fan waited 49.6 s.
pub fn rooms_scenarios(seed: u64) -> Vec<RoomsScenario> {
    let base = |name, duration_s, rooms| RoomsScenario {
        name,
        duration_s,
        core: CoreModel::default(),
        p99_target_ms: 100.0,
        delay_s: (2.0, 6.0),
        window_s: 3,
        slow: None,
        rooms,
        seed,
    };
    let mut after = base("rooms_one_after_another", 120, vec![RoomLoad::cautious("a", 0, 300), RoomLoad::cautious("b", 60, 300)]);
    after.slow = Some((60.0, 62.0, 150.0));
    let surge = RoomLoad {
        name: "a",
        config: Scenario::base("", 0, 0).controller_config(),
        opens_at_s: 0,
        fans: 20_000,
        join_over_s: 10.0,
        session_s: (20.0, 40.0),
        requests_per_session_s: 0.5,
        weight: 1.0,
    };
    let buyers = RoomLoad { session_s: (20.0, 40.0), requests_per_session_s: 0.5, ..RoomLoad::cautious("b", 60, 300) };
    vec![
        after,
        base("rooms_at_once_one_surging", 180, vec![surge, buyers]),
        base("light_load", 60, vec![RoomLoad::cautious("a", 0, 300)]),
        RoomsScenario { slow: Some((8.0, 9.0, 1000.0)), ..base("light_load_core_stopped", 60, vec![RoomLoad::cautious("a", 0, 300)]) },
    ]
}

/// The longest run of ticks of `room` held in cool-down ([`Reason::CoolDown`](crate::Reason::CoolDown))
/// with the pressure under target while fans waited: the release kept back while the core had room.
pub fn longest_idle_cool_down(room: &RoomOutcome) -> usize {
    let (mut run, mut longest) = (0, 0);
    for (d, waiting) in room.decisions.iter().zip(&room.waiting) {
        run = if *waiting && d.reason == crate::Reason::CoolDown && d.pressure.is_some_and(|x| x <= 1.0) { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// Two surges on one core from 0 s (20,000 fans each in 10 s, the standard plant and room), the
/// first of weight `weights.0`, the second of `weights.1`: the rooms' occupancy should split in
/// that proportion while both queues are long (`weighted_surges_split_the_core_by_weight`).
pub fn weighted_surges(seed: u64, weights: (f64, f64)) -> RoomsScenario {
    let surge = |name, weight| RoomLoad {
        name,
        config: Scenario::base("", 0, 0).controller_config(),
        opens_at_s: 0,
        fans: 20_000,
        join_over_s: 10.0,
        session_s: (20.0, 40.0),
        requests_per_session_s: 0.5,
        weight,
    };
    let mut scn = rooms_scenarios(seed).swap_remove(1);
    scn.name = "weighted_surges";
    scn.duration_s = 150;
    scn.rooms = vec![surge("a", weights.0), surge("b", weights.1)];
    scn
}

/// The level the oracle holds on the rooms' core (req/s): the single-room oracle of the same plant.
pub fn rooms_oracle_load(scn: &RoomsScenario) -> f64 {
    let mut flat = Scenario::base("rooms_oracle", 160, scn.seed);
    flat.core = scn.core.clone();
    flat.p99_target_ms = scn.p99_target_ms;
    flat.delay_s = scn.delay_s;
    flat.window_s = scn.window_s;
    oracle_load(&flat, scn.core.servers)
}

/// The multi-room and light-load scenarios over `seeds`: one line per scenario and room (worst seed).
pub fn rooms_table(seeds: &[u64]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "{:<26} {:<5} {:>6} {:>14} {:>14} {:>10} {:>12} {:>14}", "scenario", "room", "fans", "admitted min", "max wait (s)", "<min ticks", "gp/orc min", "idle cool max");
    for i in 0..rooms_scenarios(0).len() {
        let runs: Vec<(RoomsScenario, RoomsResult)> = seeds
            .iter()
            .map(|&s| {
                let scn = rooms_scenarios(s).swap_remove(i);
                let r = run_rooms(&scn, true);
                (scn, r)
            })
            .collect();
        let gp = (i == 1).then(|| {
            runs.iter().map(|(scn, r)| r.goodput(90, 180) / rooms_oracle_load(scn)).fold(f64::INFINITY, f64::min)
        });
        for k in 0..runs[0].0.rooms.len() {
            let outs: Vec<&RoomOutcome> = runs.iter().map(|(_, r)| &r.rooms[k]).collect();
            let admitted = outs.iter().map(|o| o.admitted).min().unwrap_or(0);
            let wait = outs.iter().map(|o| o.max_wait_s.unwrap_or(f64::INFINITY)).fold(0.0, f64::max);
            let below: usize = outs.iter().map(|o| o.ticks_below_min).sum();
            let idle_cool = outs.iter().map(|o| longest_idle_cool_down(o)).max().unwrap_or(0);
            let _ = writeln!(
                out,
                "{:<26} {:<5} {:>6} {:>14} {:>14.1} {:>10} {:>12} {:>14}",
                runs[0].0.name,
                outs[0].name,
                outs[0].fans,
                admitted,
                wait,
                below,
                gp.filter(|_| k == 0).map_or("-".into(), |g| format!("{g:.3}")),
                idle_cool
            );
        }
    }
    out
}

/// Hands the window the latencies (or errors, `u64::MAX`) the policy has seen by `t` (µs):
/// `observed` holds (seen at, latency) pairs.
fn record_observed(observed: &mut BinaryHeap<Reverse<(u64, u64)>>, window: &LatencyWindow, t: u64) {
    while let Some(&Reverse((at, l))) = observed.peek() {
        if at > t {
            break;
        }
        observed.pop();
        if l == u64::MAX {
            window.record_error(at / 1000);
        } else {
            window.record_success(at / 1000, l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reason;

    const SEED: u64 = 42;
    /// Seeds of the comparison tests: one seed can be lucky; three runs score 480–720 steady windows.
    const SEEDS: [u64; 3] = [42, 7, 1234];

    #[test]
    fn core_latency_rises_at_the_knee() {
        let core = CoreModel::default();
        let low = open_loop_over(&core, 8, 400.0, 100.0, 60, 1);
        let high = open_loop_over(&core, 8, 790.0, 100.0, 60, 1);
        assert_eq!(low, 0.0, "half load is comfortably within target");
        assert!(
            high > 0.25,
            "at 99% of capacity many windows are over: {high}"
        );
        let slo = slo_load(&core, 8, 100.0, 7);
        assert!((500.0..790.0).contains(&slo), "SLO load {slo}");
    }

    /// The standard scenario `i` compared on each of `SEEDS`.
    fn compare_seeds(i: usize) -> Vec<(ScoredScenario, Comparison)> {
        SEEDS
            .iter()
            .map(|&seed| {
                let sc = standard_scenarios(seed).swap_remove(i);
                let c = compare(&sc.0);
                (sc, c)
            })
            .collect()
    }

    /// Steady windows over target, summed over the seeds: (over, scored).
    fn steady_over(runs: &[(ScoredScenario, Comparison)]) -> (usize, usize) {
        runs.iter().fold((0, 0), |(o, n), ((_, steady, _), c)| {
            let (a, b) = c.controller.over(steady);
            (o + a, n + b)
        })
    }

    #[test]
    fn cold_start() {
        let runs = compare_seeds(0);
        let (over, scored) = steady_over(&runs);
        assert!(
            over * 100 <= scored,
            "steady windows over target: {over}/{scored}"
        );
        for ((scn, steady, _), c) in &runs {
            let ctl = &c.controller;
            let ratio = ctl.goodput(steady) / c.oracle.goodput(steady);
            assert!(
                ratio >= 0.85,
                "seed {}: goodput vs oracle {ratio:.3}",
                scn.seed
            );
            // The ramp itself: no more than a few bad seconds while finding the level...
            let (ramp_over, _) = ctl.over(&[(0, 60)]);
            assert!(
                ramp_over <= 3,
                "seed {}: {ramp_over} windows over target during the ramp",
                scn.seed
            );
            // ...and it gets there: goodput in 30..60 s at least 60% of the oracle's.
            let early = ctl.goodput(&[(30, 60)]) / c.oracle.goodput(&[(30, 60)]);
            assert!(early >= 0.6, "seed {}: ramp too slow: {early:.3}", scn.seed);
        }
    }

    #[test]
    fn step_down_50() {
        let runs = compare_seeds(1);
        let (over, scored) = steady_over(&runs);
        assert!(
            over * 100 <= scored,
            "steady windows over target: {over}/{scored}"
        );
        for ((scn, steady, step), c) in &runs {
            let (ctl, seed, step) = (&c.controller, scn.seed, step.unwrap());
            let ratio = ctl.goodput(steady) / c.oracle.goodput(steady);
            assert!(ratio >= 0.85, "seed {seed}: goodput vs oracle {ratio:.3}");
            let oracle_violation = c.oracle.violation_s(step, step + 120) as i64;
            let extra = ctl.violation_s(step, step + 120) as i64 - oracle_violation;
            assert!(
                extra <= 10,
                "seed {seed}: {extra} s more violation than the oracle after the step"
            );
            let settle = ctl.settle_after(step, 120);
            assert!(
                settle <= c.oracle.settle_after(step, 120) + 15,
                "seed {seed}: settle {settle} s"
            );
            // The fixed rate sized for the old capacity never recovers: the test tells them apart.
            let fixed_extra = c.fixed.violation_s(step, step + 120) as i64 - oracle_violation;
            assert!(
                fixed_extra > 30,
                "seed {seed}: fixed rate only {fixed_extra} s worse than the oracle?"
            );
            // No second cut piles up within the cool-down (windup).
            let cuts: Vec<u64> = ctl
                .ticks
                .iter()
                .filter(|t| t.t_s >= step)
                .filter_map(|t| t.decision)
                .filter(|d| matches!(d.reason, Reason::CutFar | Reason::CutMild))
                .map(|d| d.at_ms)
                .collect();
            assert!(!cuts.is_empty());
            assert!(
                cuts.windows(2)
                    .all(|w| w[1] - w[0] >= scn.controller_config().cooldown_ms)
            );
        }
    }

    #[test]
    fn step_up_50() {
        let runs = compare_seeds(2);
        let (over, scored) = steady_over(&runs);
        assert!(
            over * 100 <= scored,
            "steady windows over target: {over}/{scored}"
        );
        for ((scn, steady, step), c) in &runs {
            let (ctl, seed, step) = (&c.controller, scn.seed, step.unwrap());
            let end = scn.duration_s;
            let ratio = ctl.goodput(steady) / c.oracle.goodput(steady);
            assert!(ratio >= 0.85, "seed {seed}: goodput vs oracle {ratio:.3}");
            // It finds the new capacity: from 60 s after the step, goodput at least 80% of the oracle's.
            let after = ctl.goodput(&[(step + 60, end)]) / c.oracle.goodput(&[(step + 60, end)]);
            assert!(after >= 0.8, "seed {seed}: after the step {after:.3}");
            let fixed =
                c.fixed.goodput(&[(step + 60, end)]) / c.oracle.goodput(&[(step + 60, end)]);
            assert!(
                fixed < 0.75,
                "seed {seed}: the fixed rate should leave the new capacity unused: {fixed:.3}"
            );
        }
    }

    /// A 1.5 s outage at steady state (a core killed and restarted): every request fails, the loop
    /// cuts for the errors, and once the core has answered well for a few ticks the cut is undone. The
    /// release and the sessions get back to their level before the outage within 15 s of healthy
    /// ticks (the window holds errors for 3 s after the outage), with no window over target.
    #[test]
    fn short_outage_recovers() {
        const OUTAGE_SEEDS: [u64; 3] = [2, 7, 1234];
        let end = OUTAGE_S.1.ceil() as u64;
        for seed in OUTAGE_SEEDS {
            let scn = short_outage(seed);
            let r = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
            let reasons: Vec<(u64, Reason)> = r
                .ticks
                .iter()
                .filter_map(|t| t.decision.map(|d| (t.t_s, d.reason)))
                .filter(|(t, _)| *t >= OUTAGE_S.0 as u64)
                .collect();
            // The outage is seen and cut for (errors), not ignored...
            let cut = reasons
                .iter()
                .find(|(_, r)| matches!(r, Reason::CutFar | Reason::CutMild))
                .map(|(t, _)| *t);
            assert!(
                cut.is_some_and(|t| t <= end + 1),
                "seed {seed}: no cut for the outage: {cut:?}"
            );
            // ...and undone within 15 healthy ticks (the first starts when the 3 s window is clean).
            let undone = reasons
                .iter()
                .find(|(_, r)| *r == Reason::ErrorsCleared)
                .map(|(t, _)| *t);
            assert!(
                undone.is_some_and(|t| t <= end + scn.window_s as u64 + 15),
                "seed {seed}: the error cut was not undone in time: {undone:?}"
            );
            assert!(r.events.iter().any(|e| matches!(
                e.kind,
                crate::ControlEventKind::ErrorCutUndone { .. }
            )));
            let o = outage_recovery(&r);
            // The release: a 5 s mean back to 80% of the rate before the outage within 15 s...
            assert!(
                o.back_after_s.is_some_and(|s| s <= 15),
                "seed {seed}: release back after {:?} s ({o:?})",
                o.back_after_s
            );
            // ...the sessions it feeds back to 90% of their level within 3 s (the window) + 15 s...
            assert!(
                o.occ_back_after_s.is_some_and(|s| s <= 3 + 15),
                "seed {seed}: occupancy back after {:?} s ({o:?})",
                o.occ_back_after_s
            );
            // ...the core as busy as before over the next minute, and never over target for it.
            assert!(o.goodput_ratio >= 0.9, "seed {seed}: {o:?}");
            assert_eq!(o.over_after.0, 0, "seed {seed}: {o:?}");
            // Nothing above the level before the outage: the undo does not overshoot.
            let budget_before = r
                .ticks
                .iter()
                .filter(|t| t.t_s < OUTAGE_S.0 as u64)
                .filter_map(|t| t.decision)
                .map(|d| d.budget)
                .next_back()
                .unwrap();
            let at_undo = r
                .ticks
                .iter()
                .filter(|t| Some(t.t_s) == undone)
                .find_map(|t| t.decision)
                .unwrap();
            assert!(
                at_undo.budget <= budget_before * 1.001,
                "seed {seed}: {at_undo:?} vs {budget_before}"
            );
        }
    }

    /// A genuine loss of capacity is not an outage: the cuts after the −50% step are driven by
    /// latency and utilisation and stand, with and without the core reporting its utilisation.
    #[test]
    fn step_down_cuts_are_not_undone() {
        for report_utilisation in [true, false] {
            for seed in SEEDS {
                let (mut scn, _, step) = standard_scenarios(seed).swap_remove(1);
                scn.report_utilisation = report_utilisation;
                let step = step.unwrap();
                let r = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
                let undone: Vec<u64> = r
                    .ticks
                    .iter()
                    .filter(|t| t.t_s >= step)
                    .filter(|t| t.decision.is_some_and(|d| d.reason == Reason::ErrorsCleared))
                    .map(|t| t.t_s)
                    .collect();
                assert!(
                    undone.is_empty(),
                    "seed {seed} (utilisation {report_utilisation}): undone at {undone:?}"
                );
                // The budget after the step stays well under its level before it.
                let budget_at = |a: u64, b: u64| {
                    r.ticks
                        .iter()
                        .filter(|t| (a..b).contains(&t.t_s))
                        .filter_map(|t| t.decision)
                        .map(|d| d.budget)
                        .fold(0.0f64, f64::max)
                };
                let (before, after) = (budget_at(100, step), budget_at(step + 30, scn.duration_s));
                assert!(
                    after < 0.8 * before,
                    "seed {seed} (utilisation {report_utilisation}): budget {before:.0} before the step, up to {after:.0} after"
                );
            }
        }
    }

    #[test]
    fn stale_metrics_never_grow() {
        // Metrics freeze at 60 s; they count as stale once older than 3 s.
        let mut scn = Scenario::base("stale", 150, SEED);
        scn.stale = Some((60, 120));
        let r = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
        let during: Vec<Decision> = r
            .ticks
            .iter()
            .filter(|t| (64..120).contains(&t.t_s))
            .filter_map(|t| t.decision)
            .collect();
        assert!(
            during.iter().all(|d| d.reason == Reason::StaleMetrics),
            "{:?}",
            during[0]
        );
        assert!(during.windows(2).all(|w| w[1].budget <= w[0].budget));
        // Once fresh again the loop works as before.
        assert!(
            r.over_fraction(&[(60, 150)]) <= 0.02,
            "{:?}",
            r.over(&[(60, 150)])
        );
        assert!(r.events.iter().any(|e| matches!(
            e.kind,
            crate::ControlEventKind::MetricsStale { stale: true, .. }
        )));
    }

    #[test]
    fn operator_pause_and_fixed_rate_win() {
        let mut scn = Scenario::base("operator", 200, SEED);
        scn.operator = vec![
            (80, OperatorAction::Mode(ReleaseMode::Paused)),
            (100, OperatorAction::Mode(ReleaseMode::Fixed(7.0))),
            (120, OperatorAction::Mode(ReleaseMode::Auto)),
        ];
        let r = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
        for t in &r.ticks {
            match t.t_s {
                80..=99 => assert_eq!((t.rate, t.admitted), (0.0, 0), "paused at {}", t.t_s),
                100..=119 => assert_eq!(t.rate, 7.0, "fixed at {}", t.t_s),
                _ => {}
            }
        }
        let fixed_admitted: u64 = r
            .ticks
            .iter()
            .filter(|t| (100..120).contains(&t.t_s))
            .map(|t| t.admitted)
            .sum();
        assert!((135..=141).contains(&fixed_admitted), "{fixed_admitted}");
        // Back in auto it refills without overshooting.
        assert!(
            r.over_fraction(&[(120, 200)]) <= 0.02,
            "{:?}",
            r.over(&[(120, 200)])
        );
        let (after, before) = (r.goodput(&[(160, 200)]), r.goodput(&[(40, 80)]));
        assert!(
            after > 0.8 * before,
            "after resume {after:.0}/s, before the pause {before:.0}/s"
        );
        assert_eq!(
            r.events
                .iter()
                .filter(|e| matches!(
                    e.kind,
                    crate::ControlEventKind::ModeChanged { .. }
                ))
                .count(),
            3
        );
    }

    #[test]
    fn sold_out_stops_releases() {
        let mut scn = Scenario::base("sold_out", 120, SEED);
        scn.sold_out_at_s = Some(70);
        let r = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
        assert!(
            r.ticks
                .iter()
                .filter(|t| t.t_s < 70)
                .map(|t| t.admitted)
                .sum::<u64>()
                > 100
        );
        for t in r.ticks.iter().filter(|t| t.t_s >= 70) {
            assert_eq!(t.admitted, 0, "released at {}", t.t_s);
            assert_eq!(t.decision.map(|d| d.reason), Some(Reason::SoldOut));
        }
    }

    /// Issue 26: the goals of [`rooms_scenarios`], seeds 1–10. Two cautious sales one after
    /// another on one core (the second starting with a slow edge), and one alone at an idle core
    /// (and once more with the core stopped for a second, issue 39: no more than 5 ticks of
    /// cool-down under target): every fan admitted within 30 s of joining. A surge filling the core with a cautious sale of
    /// buyers opening beside it: every buyer admitted within 30 s, the core's goodput over 90–180 s
    /// at least 0.85 of the oracle's level with at most 2% of those windows over target. In every
    /// one, no room's rate under its minimum while people queue.
    #[test]
    fn rooms_scenarios_meet_their_goals() {
        for seed in 1..=10 {
            for scn in rooms_scenarios(seed) {
                let r = run_rooms(&scn, true);
                let surging = scn.name == "rooms_at_once_one_surging";
                for room in &r.rooms {
                    assert_eq!(room.ticks_below_min, 0, "{} seed {seed} room {}", scn.name, room.name);
                    // The surge's 20,000 fans are not meant to be in within 30 s.
                    if surging && room.name == "a" {
                        continue;
                    }
                    let wait = room.max_wait_s.unwrap_or(f64::INFINITY);
                    assert!(
                        wait <= 30.0,
                        "{} seed {seed} room {}: {} of {} admitted, longest wait {wait:.1} s",
                        scn.name,
                        room.name,
                        room.admitted,
                        room.fans
                    );
                    // Issue 39: a cut never holds the release at its minimum for long with the core
                    // under target.
                    let idle_cool = longest_idle_cool_down(room);
                    assert!(idle_cool <= 5, "{} seed {seed} room {}: {idle_cool} ticks of cool-down under target", scn.name, room.name);
                }
                if surging {
                    let ratio = r.goodput(90, 180) / rooms_oracle_load(&scn);
                    assert!(ratio >= 0.85, "seed {seed}: goodput vs oracle {ratio:.3}");
                    let (over, scored) = r.over(90, 180);
                    assert!(over * 50 <= scored, "seed {seed}: {over}/{scored} windows over target");
                    // The surge gave way while the buyers waited, and the buyers grew into it.
                    let reasons = |k: usize, why: Reason| r.rooms[k].decisions.iter().any(|d| d.reason == why);
                    assert!(reasons(0, Reason::YieldShare) && reasons(1, Reason::GrowToShare), "seed {seed}");
                }
            }
        }
    }

    /// Without shares each room reads the core as if alone: the buyers beside the surge are held
    /// at the core's setpoint and most of them wait far longer than 30 s (what issue 26 reported).
    #[test]
    fn without_shares_the_buyers_beside_a_surge_wait() {
        let scn = rooms_scenarios(1).swap_remove(1);
        assert_eq!(scn.name, "rooms_at_once_one_surging");
        let r = run_rooms(&scn, false);
        assert!(r.rooms[1].admitted < 200, "{} of 300 admitted", r.rooms[1].admitted);
    }

    /// Two surges of weights 2 and 1 on one core: while both queues are long their sessions split
    /// the core 2:1 (the mean occupancy over 60–150 s: 2.00–2.01 in seeds 1–3), the core stays within
    /// target and busy (goodput 0.846–0.934 of the oracle; 0.80 asserted), and
    /// neither room is held under its minimum. Weights 1:1 split it evenly (the control).
    #[test]
    fn weighted_surges_split_the_core_by_weight() {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        for seed in 1..=3 {
            let scn = weighted_surges(seed, (2.0, 1.0));
            let r = run_rooms(&scn, true);
            let (a, b) = (mean(&r.rooms[0].occupancy[60..150]), mean(&r.rooms[1].occupancy[60..150]));
            let ratio = a / b;
            assert!((1.8..=2.2).contains(&ratio), "seed {seed}: occupancy {a:.0} vs {b:.0}, ratio {ratio:.2}");
            let (over, scored) = r.over(60, 150);
            assert!(over * 50 <= scored, "seed {seed}: {over}/{scored} windows over target");
            let gp = r.goodput(60, 150) / rooms_oracle_load(&scn);
            assert!(gp >= 0.80, "seed {seed}: goodput vs oracle {gp:.3}");
            assert!(r.rooms.iter().all(|room| room.ticks_below_min == 0), "seed {seed}");
            let even = run_rooms(&weighted_surges(seed, (1.0, 1.0)), true);
            let ratio = mean(&even.rooms[0].occupancy[60..150]) / mean(&even.rooms[1].occupancy[60..150]);
            assert!((0.9..=1.1).contains(&ratio), "seed {seed}: 1:1 gave {ratio:.2}");
        }
    }

    #[test]
    fn same_seed_same_run() {
        let scn = Scenario::base("det", 40, 9);
        let a = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
        let b = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
        assert_eq!(a.windows, b.windows);
        assert_eq!(a.admitted, b.admitted);
    }
}
