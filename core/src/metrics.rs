//! Prometheus metrics of the core (DESIGN §8). The edge reads `wicket_core_request_duration_seconds` (P99 of
//! holds) and `wicket_core_inflight` / `wicket_core_concurrency_limit` (utilisation) as a second source for
//! its release controller.

use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// Every metric the core exports, registered in its own registry (tests run several cores in one process).
#[derive(Clone)]
pub struct CoreMetrics {
    registry: Registry,
    pub holds: IntCounterVec,
    pub transitions: IntCounterVec,
    pub payments: IntCounterVec,
    pub sweeper: IntCounterVec,
    pub reconcile_ok: IntGaugeVec,
    pub reconcile_failures: IntCounterVec,
    /// 1 while the event is paused (by an operator, or by the reconciler after a mismatch), as the
    /// reconciler last saw it.
    pub event_paused: IntGaugeVec,
    pub latency: HistogramVec,
    pub responses: IntCounterVec,
    pub inflight: IntGauge,
    pub concurrency_limit: IntGauge,
    pub store_errors: IntCounterVec,
    pub durability_timeouts: IntCounterVec,
    pub redis_restarts: IntCounter,
    /// Redis masters acknowledging changes without a replica wait: none is left that could be promoted.
    pub redis_unreplicated: IntGauge,
    pub recheck_orders: IntCounterVec,
    pub recheck_runs: IntCounterVec,
    pub rechecking: IntGauge,
    /// This process's resident memory, read from /proc at each scrape (`process_resident_memory_bytes`,
    /// the name Prometheus' own client libraries use; an edge with an embedded core reports the same
    /// process on both ports).
    resident_memory: IntGauge,
}

/// Latency buckets, seconds: fine below 100 ms, where P99 targets live.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.030, 0.040, 0.050, 0.075, 0.100, 0.150, 0.200,
    0.300, 0.500, 1.0, 2.0, 5.0,
];

impl CoreMetrics {
    pub fn new() -> CoreMetrics {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry.register(Box::new(c.clone())).expect("unique metric");
            c
        };
        let holds = counter("wicket_core_holds_total", "Hold attempts by outcome", &["outcome"]);
        let transitions = counter("wicket_core_orders_total", "Orders entering a state", &["state"]);
        let payments = counter("wicket_core_payments_total", "Payment callbacks and queries by result", &["result"]);
        let sweeper = counter("wicket_core_sweeper_total", "Expired holds handled by the sweeper", &["action"]);
        let reconcile_failures =
            counter("wicket_core_reconcile_failures_total", "Reconciliations that found a mismatch", &["event"]);
        let responses = counter("wicket_core_responses_total", "Responses by route and status class", &["route", "class"]);
        let store_errors = counter("wicket_core_store_errors_total", "Store calls that failed", &["kind"]);
        let durability_timeouts = counter(
            "wicket_core_durability_timeouts_total",
            "Answers 503 durability_timeout: a change made on the Redis master that its replicas (or AOF) did not \
             confirm within redis.wait-timeout-ms",
            &["route"],
        );
        let recheck_orders = counter(
            "wicket_core_recheck_orders_total",
            "CREATED orders re-checked with the payment provider after a start or a Redis restart, by result",
            &["result"],
        );
        let recheck_runs = counter(
            "wicket_core_recheck_runs_total",
            "Completed re-checks of CREATED orders, by reason (startup, restart)",
            &["reason"],
        );
        let redis_restarts =
            IntCounter::new("wicket_core_redis_restarts_total", "Restarts of the sale's Redis (a master's run_id changed)")
                .expect("valid metric");
        registry.register(Box::new(redis_restarts.clone())).expect("unique metric");
        let redis_unreplicated = IntGauge::new(
            "wicket_core_redis_masters_unreplicated",
            "Redis masters whose changes are acknowledged without waiting for a replica, because none is left that \
             could be promoted (redis.wait-replicas = \"auto\"): losing such a master loses what it acknowledged",
        )
        .expect("valid metric");
        registry.register(Box::new(redis_unreplicated.clone())).expect("unique metric");
        let rechecking = IntGauge::new(
            "wicket_core_rechecking",
            "1 while holds are refused because CREATED orders are being re-checked with the payment provider",
        )
        .expect("valid metric");
        registry.register(Box::new(rechecking.clone())).expect("unique metric");
        let reconcile_ok = IntGaugeVec::new(
            Opts::new("wicket_core_reconcile_ok", "1 when the last reconciliation of the event passed"),
            &["event"],
        )
        .expect("valid metric");
        registry.register(Box::new(reconcile_ok.clone())).expect("unique metric");
        let event_paused = IntGaugeVec::new(
            Opts::new(
                "wicket_core_event_paused",
                "1 while the event is paused (no holds): by an operator or after a failed reconciliation",
            ),
            &["event"],
        )
        .expect("valid metric");
        registry.register(Box::new(event_paused.clone())).expect("unique metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("wicket_core_request_duration_seconds", "Request latency by route").buckets(BUCKETS.to_vec()),
            &["route"],
        )
        .expect("valid metric");
        registry.register(Box::new(latency.clone())).expect("unique metric");
        let inflight = IntGauge::new("wicket_core_inflight", "Requests being served").expect("valid metric");
        registry.register(Box::new(inflight.clone())).expect("unique metric");
        let concurrency_limit =
            IntGauge::new("wicket_core_concurrency_limit", "Requests served at once before quick 503s").expect("valid metric");
        registry.register(Box::new(concurrency_limit.clone())).expect("unique metric");
        let resident_memory = resident_memory_gauge();
        registry.register(Box::new(resident_memory.clone())).expect("unique metric");
        CoreMetrics {
            registry,
            holds,
            transitions,
            payments,
            sweeper,
            reconcile_ok,
            reconcile_failures,
            event_paused,
            latency,
            responses,
            inflight,
            concurrency_limit,
            store_errors,
            durability_timeouts,
            redis_restarts,
            redis_unreplicated,
            recheck_orders,
            recheck_runs,
            rechecking,
            resident_memory,
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        if let Some(bytes) = resident_memory_bytes() {
            self.resident_memory.set(bytes);
        }
        let mut buf = Vec::new();
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The `process_resident_memory_bytes` gauge (the edge registers one too).
pub fn resident_memory_gauge() -> IntGauge {
    IntGauge::new("process_resident_memory_bytes", "Resident memory size in bytes").expect("valid metric")
}

/// This process's resident set size (`VmRSS` of /proc/self/status); `None` off Linux.
pub fn resident_memory_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: i64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kb * 1024)
}

impl Default for CoreMetrics {
    fn default() -> Self {
        Self::new()
    }
}
