//! The random method's shuffle: a keyed permutation of the pre-queue positions `1..=n`, computed
//! per position in O(1) memory (a balanced Feistel network on the next even power of two, with
//! cycle walking back into `1..=n`). The pre-queue is "shuffled once at open" by fixing `n` and a
//! random key at open; nobody's order is stored.

/// A permutation of `1..=n` chosen by `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shuffle {
    n: u64,
    key: u64,
    half_bits: u32,
}

const ROUNDS: u64 = 6;

fn mix(mut z: u64) -> u64 {
    // splitmix64's finaliser: any bijective-enough mixing will do, a Feistel network is a
    // permutation whatever its round function.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Shuffle {
    /// The permutation of `1..=n` for `key`.
    pub fn new(n: u64, key: u64) -> Self {
        let bits = 64 - n.max(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        Shuffle { n, key, half_bits }
    }

    /// Size of the permuted range.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True for an empty pre-queue.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn round_trip(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for round in 0..ROUNDS {
            let f = mix(self.key ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ r) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    /// Where position `p` (1-based, `p ≤ n`) goes; positions beyond `n` are unchanged.
    pub fn apply(&self, p: u64) -> u64 {
        if p == 0 || p > self.n {
            return p;
        }
        let mut x = p - 1;
        loop {
            x = self.round_trip(x);
            if x < self.n {
                return x + 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_a_permutation_for_many_sizes() {
        for n in [1u64, 2, 3, 7, 64, 1000, 4097] {
            let s = Shuffle::new(n, 42 + n);
            let mut seen = vec![false; n as usize + 1];
            for p in 1..=n {
                let q = s.apply(p);
                assert!((1..=n).contains(&q), "{p} -> {q} outside 1..={n}");
                assert!(!seen[q as usize], "{q} twice");
                seen[q as usize] = true;
            }
            assert_eq!(s.apply(n + 1), n + 1);
        }
    }

    #[test]
    fn really_shuffles_and_depends_on_the_key() {
        let a = Shuffle::new(1000, 1);
        let b = Shuffle::new(1000, 2);
        let fixed = (1..=1000).filter(|&p| a.apply(p) == p).count();
        assert!(fixed < 20, "{fixed} fixed points");
        assert!((1..=1000).filter(|&p| a.apply(p) != b.apply(p)).count() > 900);
    }
}
