//! Figures of a run: latency samples per endpoint and per 1-second window, and FIFO fidelity.

use std::collections::BTreeMap;

use parking_lot::Mutex;

/// Latency samples (µs) by endpoint, and by endpoint and second of the run.
#[derive(Default)]
pub struct Recorder {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_endpoint: BTreeMap<&'static str, Vec<u32>>,
    by_second: BTreeMap<(&'static str, u32), Vec<u32>>,
    statuses: BTreeMap<(&'static str, u16), u64>,
    examples: BTreeMap<(&'static str, u16), String>,
}

/// P50/P99 and rate of one endpoint.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EndpointFigures {
    pub endpoint: String,
    pub requests: u64,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Recorder {
    pub fn record(&self, endpoint: &'static str, second: u32, status: u16, micros: u32) {
        let mut g = self.inner.lock();
        g.by_endpoint.entry(endpoint).or_default().push(micros);
        if endpoint == "hold" {
            g.by_second.entry((endpoint, second)).or_default().push(micros);
        }
        *g.statuses.entry((endpoint, status)).or_default() += 1;
    }

    pub fn endpoints(&self, seconds: f64) -> Vec<EndpointFigures> {
        let mut g = self.inner.lock();
        g.by_endpoint
            .iter_mut()
            .map(|(name, v)| {
                v.sort_unstable();
                EndpointFigures {
                    endpoint: name.to_string(),
                    requests: v.len() as u64,
                    per_second: v.len() as f64 / seconds.max(0.001),
                    p50_ms: crate::report::percentile_ms(v, 0.5),
                    p99_ms: crate::report::percentile_ms(v, 0.99),
                }
            })
            .collect()
    }

    /// P99 (ms) of `endpoint` per second that saw at least `min_samples` requests.
    pub fn p99_per_second(&self, endpoint: &'static str, min_samples: usize) -> Vec<(u32, f64, usize)> {
        let mut g = self.inner.lock();
        g.by_second
            .iter_mut()
            .filter(|((e, _), v)| *e == endpoint && v.len() >= min_samples)
            .map(|((_, s), v)| {
                v.sort_unstable();
                (*s, crate::report::percentile_ms(v, 0.99), v.len())
            })
            .collect()
    }

    /// Keeps the first body seen for a refused (endpoint, status).
    pub fn example(&self, endpoint: &'static str, status: u16, body: &serde_json::Value) {
        if status >= 400 {
            let mut g = self.inner.lock();
            g.examples.entry((endpoint, status)).or_insert_with(|| body.to_string().chars().take(300).collect());
        }
    }

    pub fn examples(&self) -> BTreeMap<String, String> {
        self.inner.lock().examples.iter().map(|((e, s), b)| (format!("{e} {s}"), b.clone())).collect()
    }

    pub fn statuses(&self) -> BTreeMap<String, u64> {
        self.inner.lock().statuses.iter().map(|((e, s), n)| (format!("{e} {s}"), *n)).collect()
    }
}

/// Kendall's τ-a between two rankings given as pairs (a, b): 1 when ordering by `a` orders by `b` too.
/// O(n log n): counts inversions of `b` after sorting by `a`, with a merge sort.
pub fn kendall_tau(pairs: &mut [(u64, u64)]) -> f64 {
    let n = pairs.len();
    if n < 2 {
        return 1.0;
    }
    pairs.sort_unstable();
    let mut b: Vec<u64> = pairs.iter().map(|p| p.1).collect();
    let mut buf = vec![0u64; n];
    let inversions = merge_count(&mut b, &mut buf);
    let total = n as f64 * (n as f64 - 1.0) / 2.0;
    1.0 - 2.0 * inversions as f64 / total
}

fn merge_count(v: &mut [u64], buf: &mut [u64]) -> u64 {
    let n = v.len();
    if n < 2 {
        return 0;
    }
    let mid = n / 2;
    let mut inv = merge_count(&mut v[..mid], &mut buf[..mid]) + merge_count(&mut v[mid..], &mut buf[mid..]);
    let (mut i, mut j, mut k) = (0, mid, 0);
    while i < mid && j < n {
        if v[i] <= v[j] {
            buf[k] = v[i];
            i += 1;
        } else {
            buf[k] = v[j];
            inv += (mid - i) as u64;
            j += 1;
        }
        k += 1;
    }
    buf[k..k + mid - i].copy_from_slice(&v[i..mid]);
    k += mid - i;
    buf[k..k + n - j].copy_from_slice(&v[j..n]);
    v.copy_from_slice(&buf[..n]);
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tau_of_orders() {
        let mut same: Vec<(u64, u64)> = (0..100).map(|i| (i, i * 3)).collect();
        assert_eq!(kendall_tau(&mut same), 1.0);
        let mut reversed: Vec<(u64, u64)> = (0..100).map(|i| (i, 100 - i)).collect();
        assert_eq!(kendall_tau(&mut reversed), -1.0);
        // One adjacent swap among 4: 1 inversion of 6 pairs.
        let mut one = vec![(0, 0), (1, 2), (2, 1), (3, 3)];
        assert!((kendall_tau(&mut one) - (1.0 - 2.0 / 6.0)).abs() < 1e-9);
    }

    #[test]
    fn p99_windows() {
        let r = Recorder::default();
        for i in 0..100 {
            r.record("hold", 0, 201, 1000 + i);
            r.record("hold", 1, 201, 200_000);
        }
        let w = r.p99_per_second("hold", 10);
        assert_eq!(w.len(), 2);
        assert!(w[0].1 < 2.0 && w[1].1 == 200.0);
    }
}
