//! Figures of a run: latency samples per endpoint and per 1-second window, FIFO fidelity, and
//! whether the seats went in join order.

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

/// FIFO Kendall τ over the pairs whose order is known. Each fan is (sent, answered, place), the first
/// two on one event counter: fan i came before fan j when i's join was answered before j's was sent.
/// Joins in flight at once have no order a server could be held to (either may reach it first), so
/// those pairs are left out; τ = 1 − 2·discordant / comparable, 1.0 when no pair is comparable.
/// Also returns the share of all pairs that were comparable (0 when fewer than 2 fans).
///
/// O(n log n): fans are taken in sending order; each first adds every fan answered before it was sent
/// to a Fenwick tree over place ranks, then counts those with a later place than its own.
pub fn ordered_tau(fans: &[(u64, u64, u64)]) -> (f64, f64) {
    let n = fans.len();
    let mut places: Vec<u64> = fans.iter().map(|f| f.2).collect();
    places.sort_unstable();
    places.dedup();
    let rank = |p: u64| places.partition_point(|&q| q < p) + 1;
    let mut by_sent: Vec<usize> = (0..n).collect();
    by_sent.sort_unstable_by_key(|&i| fans[i].0);
    let mut by_answered: Vec<usize> = (0..n).collect();
    by_answered.sort_unstable_by_key(|&i| fans[i].1);
    let mut tree = vec![0u64; places.len() + 1];
    let (mut added, mut next) = (0u64, 0usize);
    let (mut comparable, mut discordant) = (0u64, 0u64);
    for &j in &by_sent {
        while next < n && fans[by_answered[next]].1 < fans[j].0 {
            let mut r = rank(fans[by_answered[next]].2);
            while r < tree.len() {
                tree[r] += 1;
                r += r & r.wrapping_neg();
            }
            added += 1;
            next += 1;
        }
        // Fans before j with a place at or before j's.
        let (mut r, mut at_or_before) = (rank(fans[j].2), 0u64);
        while r > 0 {
            at_or_before += tree[r];
            r &= r - 1;
        }
        comparable += added;
        discordant += added - at_or_before;
    }
    let tau = if comparable == 0 { 1.0 } else { 1.0 - 2.0 * discordant as f64 / comparable as f64 };
    let all = n as f64 * (n as f64 - 1.0) / 2.0;
    (tau, if all > 0.0 { comparable as f64 / all } else { 0.0 })
}

/// Seat order: among pairs of fans who tried to buy where exactly one got tickets, the share in
/// which that one joined first. `fans` are (join order, got tickets); a pair whose join orders tie
/// is neither's to win and is left out. 1.0: the seats went strictly in join order; 0.5: a coin
/// toss; `None`: no such pair (everyone or no one got tickets).
///
/// O(n log n): after sorting by join order, each fan with tickets beats the fans without tickets
/// who joined after them, and loses to those who joined before them (the inversions of the
/// got-tickets column, counted in one sweep from the back, since that column is 0 or 1).
pub fn seat_order(fans: &mut [(u64, bool)]) -> Option<f64> {
    fans.sort_unstable_by_key(|f| f.0);
    // Fans strictly after the current group of equal join order, with and without tickets.
    let (mut later_with, mut later_without) = (0u64, 0u64);
    let (mut won, mut pairs) = (0u64, 0u64);
    let mut end = fans.len();
    while end > 0 {
        let key = fans[end - 1].0;
        let start = fans[..end].iter().rposition(|f| f.0 != key).map_or(0, |i| i + 1);
        let with = fans[start..end].iter().filter(|f| f.1).count() as u64;
        let without = (end - start) as u64 - with;
        won += with * later_without;
        pairs += with * later_without + without * later_with;
        later_with += with;
        later_without += without;
        end = start;
    }
    (pairs > 0).then(|| won as f64 / pairs as f64)
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

    /// Pairs in flight together are nobody's order; pairs one after the other are judged, fast and by
    /// the O(n²) definition alike.
    #[test]
    fn ordered_tau_judges_only_pairs_one_after_the_other() {
        // All four in flight at once: no pair has an order, whatever the places.
        assert_eq!(ordered_tau(&[(0, 10, 4), (1, 11, 3), (2, 12, 2), (3, 13, 1)]), (1.0, 0.0));
        // One after the other, places reversed: every pair discordant.
        assert_eq!(ordered_tau(&[(0, 1, 3), (2, 3, 2), (4, 5, 1)]), (-1.0, 1.0));
        // a then (b, c) overlapping each other: b and c swap places for free; a judged against both.
        assert_eq!(ordered_tau(&[(0, 1, 1), (2, 5, 3), (3, 4, 2)]), (1.0, 2.0 / 3.0));
        // a overlapping b, both before c, c given the first place: 2 of 2 comparable pairs discordant.
        assert_eq!(ordered_tau(&[(0, 3, 2), (1, 2, 3), (4, 5, 1)]), (-1.0, 2.0 / 3.0));
        let by_pairs = |f: &[(u64, u64, u64)]| {
            let (mut c, mut d) = (0u64, 0u64);
            for a in f {
                for b in f {
                    if a.1 < b.0 {
                        c += 1;
                        d += u64::from(a.2 > b.2);
                    }
                }
            }
            if c == 0 { 1.0 } else { 1.0 - 2.0 * d as f64 / c as f64 }
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..200 {
            let n = 1 + next(60) as usize;
            let fans: Vec<(u64, u64, u64)> = (0..n)
                .map(|_| {
                    let sent = next(200);
                    (sent, sent + 1 + next(30), next(40))
                })
                .collect();
            assert!((ordered_tau(&fans).0 - by_pairs(&fans)).abs() < 1e-12, "{fans:?}");
        }
    }

    /// The O(n²) definition, for the fast one to agree with.
    fn seat_order_by_pairs(fans: &[(u64, bool)]) -> Option<f64> {
        let (mut won, mut pairs) = (0u64, 0u64);
        for (i, a) in fans.iter().enumerate() {
            for b in &fans[i + 1..] {
                if a.1 != b.1 && a.0 != b.0 {
                    pairs += 1;
                    let (with, without) = if a.1 { (a, b) } else { (b, a) };
                    won += u64::from(with.0 < without.0);
                }
            }
        }
        (pairs > 0).then(|| won as f64 / pairs as f64)
    }

    #[test]
    fn seat_order_of_small_sales() {
        // The first two joiners got tickets, the last two not: every mixed pair went in join order.
        assert_eq!(seat_order(&mut [(3, false), (1, true), (4, false), (2, true)]), Some(1.0));
        // Exactly reversed: the latecomers got them.
        assert_eq!(seat_order(&mut [(1, false), (2, false), (3, true), (4, true)]), Some(0.0));
        // 1 got, 2 not, 3 got: pairs (1,2) won, (2,3) lost.
        assert_eq!(seat_order(&mut [(1, true), (2, false), (3, true)]), Some(0.5));
        // Ties: (5, got) and (5, not) joined together and are no pair; (5, not) vs (7, got) is lost,
        // (5, got) vs (9, not) won, (7, got) vs (9, not) won: 2 of 3.
        let mut tied = [(5, true), (5, false), (7, true), (9, false)];
        assert_eq!(seat_order(&mut tied), Some(2.0 / 3.0));
        // No mixed pair: none, or all of them, got tickets; or the only mixed pair is a tie.
        assert_eq!(seat_order(&mut []), None);
        assert_eq!(seat_order(&mut [(1, true)]), None);
        assert_eq!(seat_order(&mut [(1, true), (2, true)]), None);
        assert_eq!(seat_order(&mut [(1, false), (2, false)]), None);
        assert_eq!(seat_order(&mut [(4, true), (4, false)]), None);
        // Agrees with the pairwise definition on scrambled sales with many ties.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for n in [2usize, 3, 10, 57, 300] {
            let fans: Vec<(u64, bool)> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % (n as u64 / 2 + 1), x >> 40 & 3 != 0)
                })
                .collect();
            assert_eq!(seat_order(&mut fans.clone()), seat_order_by_pairs(&fans), "{n}");
        }
        // 100,000 fans (2.5·10⁹ mixed pairs, out of reach pair by pair): the first half got
        // tickets but its first joiner, who lost them to the very last one. Lost pairs: the first
        // joiner against the 50,000 with tickets after them, the last against the 50,000 without
        // before them, the two together counted once.
        let mut many: Vec<(u64, bool)> = (0..100_000u64).rev().map(|i| (i, (i < 50_000) != (i == 0 || i == 99_999))).collect();
        let (pairs, lost) = (50_000u64 * 50_000, 50_000 + 50_000 - 1);
        assert_eq!(seat_order(&mut many), Some((pairs - lost) as f64 / pairs as f64));
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
