//! Prometheus metrics of the edge, served on the admin port at `/metrics`.
//!
//! Hot-path counters are resolved to plain handles at start, so counting a static page is one
//! atomic add, not a label lookup.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Where a request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Served from memory.
    Static,
    /// Answered by the edge itself (bot endpoints, rejects before routing).
    Edge,
    /// Forwarded to the core.
    Core,
    /// Forwarded to the origin.
    Origin,
    /// A protected path (forwarded to core or origin once admitted).
    Protected,
}

impl Route {
    const ALL: [Route; 5] = [Route::Static, Route::Edge, Route::Core, Route::Origin, Route::Protected];

    /// Label value.
    pub fn label(self) -> &'static str {
        match self {
            Route::Static => "static",
            Route::Edge => "edge",
            Route::Core => "core",
            Route::Origin => "origin",
            Route::Protected => "protected",
        }
    }
}

/// How it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx/3xx answered.
    Ok,
    /// 304 from memory.
    NotModified,
    /// Refused by the edge (limit, block, bot check, token).
    Rejected,
    /// Upstream failure or 5xx.
    Error,
}

impl Outcome {
    const ALL: [Outcome; 4] = [Outcome::Ok, Outcome::NotModified, Outcome::Rejected, Outcome::Error];

    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::NotModified => "not_modified",
            Outcome::Rejected => "rejected",
            Outcome::Error => "error",
        }
    }
}

/// One thread's request counts (a cache line pair of its own).
#[repr(align(128))]
#[derive(Default)]
struct RequestShard([[AtomicU64; 4]; 5]);

/// Shards of the request counters: more than the worker threads of a large machine.
const REQUEST_SHARDS: usize = 64;

/// This thread's shard index (threads take the next index the first time they count).
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

/// All edge metrics.
pub struct Metrics {
    /// The registry `/metrics` encodes.
    pub registry: Registry,
    requests: [[IntCounter; 4]; 5],
    /// Per-thread counts behind `requests`, summed into it when metrics are read: counting a
    /// request writes only memory of its own thread (no cache line every thread writes).
    request_shards: Box<[RequestShard]>,
    /// Serialises the flush of the shards into `requests`.
    flush: parking_lot::Mutex<()>,
    /// Rejects by reason.
    pub rejects: IntCounterVec,
    /// Upstream response-header latency by upstream.
    pub upstream_seconds: HistogramVec,
    /// `upstream_seconds{upstream="origin"}`, resolved once (the forwarded fast path's).
    pub origin_seconds: prometheus::Histogram,
    /// Anomaly rules tripped, by rule.
    pub anomalies: IntCounterVec,
    /// Live limiter keys by rule index and key kind.
    pub limiter_keys: IntGaugeVec,
    /// CAPTCHA verifications by outcome.
    pub captcha: IntCounterVec,
    /// PoW verifications by outcome.
    pub pow: IntCounterVec,
    /// HTTP/2 streams the client reset while the proxy served them.
    pub client_resets: prometheus::IntCounter,
    /// Visitors a passthrough room let straight in.
    pub passthrough: prometheus::IntCounter,
    /// Finished TLS handshakes on the HTTPS listener: `[full, resumed]`.
    pub tls_handshakes: [prometheus::IntCounter; 2],
    /// Queue event streams open now ([`crate::room::events::StreamBudget`] keeps it).
    pub event_streams: prometheus::IntGauge,
    /// Idle plain keep-alive connections parked now ([`crate::front`]: their socket alone).
    pub parked: prometheus::IntGauge,
    /// `process_resident_memory_bytes`, read at each scrape.
    resident_memory: prometheus::IntGauge,
}

impl Metrics {
    /// Registers everything.
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests_vec = IntCounterVec::new(
            Opts::new("wicket_edge_requests_total", "Requests by route and outcome"),
            &["route", "outcome"],
        )
        .expect("valid metric");
        let requests = Route::ALL.map(|r| Outcome::ALL.map(|o| requests_vec.with_label_values(&[r.label(), o.label()])));
        let rejects =
            IntCounterVec::new(Opts::new("wicket_edge_rejects_total", "Requests refused by the edge, by reason"), &[
                "reason",
            ])
            .expect("valid metric");
        let upstream_seconds = HistogramVec::new(
            HistogramOpts::new("wicket_edge_upstream_seconds", "Time to the upstream's response header")
                .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["upstream"],
        )
        .expect("valid metric");
        let anomalies =
            IntCounterVec::new(Opts::new("wicket_edge_anomalies_total", "Anomaly rules tripped, by rule"), &["rule"])
                .expect("valid metric");
        // Every rule's series from the start, at 0: an alert on a rule's increase sees its first trip.
        for rule in ["device_users", "client_rejects", "region_share"] {
            anomalies.with_label_values(&[rule]);
        }
        let limiter_keys = IntGaugeVec::new(
            Opts::new("wicket_edge_limiter_keys", "Live keys per limit rule (after the last prune)"),
            &["rule", "key"],
        )
        .expect("valid metric");
        let captcha = IntCounterVec::new(
            Opts::new("wicket_edge_captcha_total", "CAPTCHA siteverify calls by outcome"),
            &["outcome"],
        )
        .expect("valid metric");
        let pow = IntCounterVec::new(Opts::new("wicket_edge_pow_total", "Proof-of-work checks by outcome"), &[
            "outcome",
        ])
        .expect("valid metric");
        let client_resets = prometheus::IntCounter::new(
            "wicket_edge_client_resets_total",
            "HTTP/2 streams the client reset (RST_STREAM) while the edge was serving them",
        )
        .expect("valid metric");
        let passthrough = prometheus::IntCounter::new(
            "wicket_edge_passthrough_total",
            "Visitors a passthrough room (queue = \"when-needed\") let straight in",
        )
        .expect("valid metric");
        let tls_handshakes_vec = IntCounterVec::new(
            Opts::new("wicket_edge_tls_handshakes_total", "Finished TLS handshakes on the HTTPS listener, full or resumed (a session ticket)"),
            &["kind"],
        )
        .expect("valid metric");
        let tls_handshakes = ["full", "resumed"].map(|k| tls_handshakes_vec.with_label_values(&[k]));
        let event_streams = prometheus::IntGauge::new("wicket_edge_event_streams", "Queue event streams open now")
            .expect("valid metric");
        let parked = prometheus::IntGauge::new(
            "wicket_edge_parked_connections",
            "Idle plain keep-alive connections parked now (their socket alone, after a second without a byte)",
        )
        .expect("valid metric");
        let resident_memory = wicket_core::metrics::resident_memory_gauge();
        for c in [
            Box::new(resident_memory.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(requests_vec) as Box<dyn prometheus::core::Collector>,
            Box::new(rejects.clone()),
            Box::new(upstream_seconds.clone()),
            Box::new(anomalies.clone()),
            Box::new(limiter_keys.clone()),
            Box::new(captcha.clone()),
            Box::new(pow.clone()),
            Box::new(client_resets.clone()),
            Box::new(passthrough.clone()),
            Box::new(tls_handshakes_vec),
            Box::new(event_streams.clone()),
            Box::new(parked.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        let origin_seconds = upstream_seconds.with_label_values(&["origin"]);
        let request_shards = (0..REQUEST_SHARDS).map(|_| RequestShard::default()).collect();
        Metrics {
            registry,
            requests,
            request_shards,
            flush: parking_lot::Mutex::new(()),
            rejects,
            upstream_seconds,
            origin_seconds,
            anomalies,
            limiter_keys,
            captcha,
            pow,
            client_resets,
            passthrough,
            tls_handshakes,
            event_streams,
            parked,
            resident_memory,
        }
    }

    /// Counts one request.
    pub fn request(&self, route: Route, outcome: Outcome) {
        let shard = &self.request_shards[shard_index() % self.request_shards.len()];
        shard.0[route as usize][outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds what the shards counted since the last flush to the registered counters.
    fn flush_requests(&self) {
        let _one_at_a_time = self.flush.lock();
        for (r, row) in self.requests.iter().enumerate() {
            for (o, counter) in row.iter().enumerate() {
                let total: u64 = self.request_shards.iter().map(|s| s.0[r][o].load(Ordering::Relaxed)).sum();
                let shown = counter.get();
                if total > shown {
                    counter.inc_by(total - shown);
                }
            }
        }
    }

    /// Requests counted so far for a route and outcome (flushed first).
    pub fn requests_seen(&self, route: Route, outcome: Outcome) -> u64 {
        self.flush_requests();
        self.requests[route as usize][outcome as usize].get()
    }

    /// Prometheus text format.
    pub fn encode(&self) -> Vec<u8> {
        self.flush_requests();
        if let Some(bytes) = wicket_core::metrics::resident_memory_bytes() {
            self.resident_memory.set(bytes);
        }
        let mut buf = Vec::new();
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        buf
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn requests_counted_on_many_threads_add_up_in_the_exposition() {
        let m = Arc::new(Metrics::new());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for i in 0..10_000 {
                        m.request(Route::Origin, if i % 10 == 0 { Outcome::Error } else { Outcome::Ok });
                    }
                })
            })
            .collect();
        // Reads while counting never go backwards.
        let mut last = 0;
        for _ in 0..50 {
            let now = m.requests_seen(Route::Origin, Outcome::Ok);
            assert!(now >= last);
            last = now;
        }
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(m.requests_seen(Route::Origin, Outcome::Ok), 72_000);
        assert_eq!(m.requests_seen(Route::Origin, Outcome::Error), 8_000);
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(text.contains("wicket_edge_requests_total{outcome=\"ok\",route=\"origin\"} 72000"), "{text}");
        assert!(text.contains("wicket_edge_requests_total{outcome=\"error\",route=\"origin\"} 8000"), "{text}");
    }
}
