//! Phung & Thain's bucketing (IPDPS 2024; quantized: WORKS 2021) as cctools `bucketing.c`,
//! `bucketing_{greedy,det_greedy,exhaust,det_exhaust,quantized}.c` and `bucketing_manager.c`
//! do it: each successful task adds a point whose significance is its sequence number
//! (recency), the points are cut into buckets (an upper value and a probability), and a
//! prediction is a bucket above the previous allocation.
//!
//! Every function here takes the points sorted by value; among equal values the newest first,
//! as cctools inserts a point before the first one that is not smaller.

mod exhaustive;
mod greedy;

pub use exhaustive::exhaustive;
#[cfg(test)]
pub use exhaustive::{exhaustive_candidates, exhaustive_cost};
pub use greedy::greedy;

/// Fewer points than this: the sampling phase (the default value, doubled after failures).
pub const SAMPLING_POINTS: usize = 10;
/// Exhaustive bucketing tries 1..=10 buckets (cctools `default_max_num_buckets`).
pub const MAX_BUCKETS: usize = 10;
/// Quantized bucketing's number of buckets in cctools' manager: 1, "blind info".
pub const QUANTIZED_BUCKETS: usize = 1;

/// A point: (value, significance).
pub type Point = (f64, f64);

/// A bucket: its upper value and its probability (its points' share of the significance;
/// quantized bucketing counts points instead).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub value: f64,
    pub probability: f64,
}

/// How the points are cut into buckets and how a bucket is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Greedy,
    DeterministicGreedy,
    Exhaustive,
    DeterministicExhaustive,
    Quantized,
}

impl Method {
    /// The deterministic variants take the smallest bucket above the previous allocation; the
    /// others draw one by probability (cctools' quantized mode draws too).
    pub fn deterministic(self) -> bool {
        matches!(
            self,
            Method::DeterministicGreedy | Method::DeterministicExhaustive
        )
    }

    pub fn buckets(self, sorted: &[Point]) -> Vec<Bucket> {
        match self {
            Method::Greedy => greedy(sorted, false),
            Method::DeterministicGreedy => greedy(sorted, true),
            Method::Exhaustive => exhaustive(sorted, false),
            Method::DeterministicExhaustive => exhaustive(sorted, true),
            Method::Quantized => quantized(sorted, QUANTIZED_BUCKETS),
        }
    }
}

/// Insert `point` into `sorted`, before the first point whose value is not smaller.
pub fn insert(sorted: &mut Vec<Point>, point: Point) {
    let at = sorted.partition_point(|p| p.0 < point.0);
    sorted.insert(at, point);
}

/// The sampling phase, and above the top bucket: the default, or after a failure at
/// `previous` the default times 2^(⌊log₂(previous/default)⌋+1) (cctools `bucketing_predict`,
/// increase rate 2) — the first power-of-two multiple of the default (or fraction of it)
/// above `previous`.
pub fn grow(default: f64, previous: f64) -> f64 {
    if previous <= 0.0 {
        return default;
    }
    let steps = (previous / default).log2().floor() as i32 + 1;
    default * 2f64.powi(steps)
}

/// Equal-count buckets: with l points and n buckets, the j-th bucket closes at the
/// ⌊(j/n)·l⌋-th point, its probability its share of the points (cctools
/// `bucketing_quantized.c`). With fewer points than buckets every point closes one.
pub fn quantized(sorted: &[Point], n: usize) -> Vec<Bucket> {
    let l = sorted.len() as f64;
    let mut buckets = Vec::new();
    let mut next = (l / n as f64).floor();
    let mut count = 0.0;
    for (i, point) in sorted.iter().enumerate() {
        count += 1.0;
        if (i + 1) as f64 >= next {
            buckets.push(Bucket {
                value: point.0,
                probability: count / l,
            });
            count = 0.0;
            next = ((1.0 + buckets.len() as f64) / n as f64 * l).floor();
        }
    }
    buckets
}

pub fn top(buckets: &[Bucket]) -> f64 {
    buckets.last().map_or(0.0, |b| b.value)
}

/// Deterministic: the smallest bucket above the previous allocation.
pub fn smallest_above(buckets: &[Bucket], previous: f64) -> Option<f64> {
    buckets.iter().find(|b| b.value > previous).map(|b| b.value)
}

/// Probabilistic: a bucket above the previous allocation, drawn by its probability
/// renormalised over those buckets.
pub fn draw_above(buckets: &[Bucket], previous: f64, random: &mut Random) -> Option<f64> {
    let above: Vec<&Bucket> = buckets.iter().filter(|b| b.value > previous).collect();
    let total: f64 = above.iter().map(|b| b.probability).sum();
    let mut pick = random.next_f64() * total;
    for bucket in &above {
        if pick < bucket.probability {
            return Some(bucket.value);
        }
        pick -= bucket.probability;
    }
    above.last().map(|b| b.value)
}

/// A small seeded generator (xorshift64*): simulations replay exactly.
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed.max(1))
    }

    pub fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Prefix sums of significance and of value × significance: any range's mass and mean in O(1).
pub struct Sums {
    mass: Vec<f64>,
    weighted: Vec<f64>,
}

impl Sums {
    pub fn new(points: &[Point]) -> Sums {
        let mut mass = Vec::with_capacity(points.len() + 1);
        let mut weighted = Vec::with_capacity(points.len() + 1);
        let (mut m, mut w) = (0.0, 0.0);
        mass.push(m);
        weighted.push(w);
        for &(value, significance) in points {
            m += significance;
            w += value * significance;
            mass.push(m);
            weighted.push(w);
        }
        Sums { mass, weighted }
    }

    /// Significance of points `from..=to`.
    pub fn mass(&self, from: usize, to: usize) -> f64 {
        self.mass[to + 1] - self.mass[from]
    }

    /// Significance-weighted mean of points `from..=to`.
    pub fn mean(&self, from: usize, to: usize) -> f64 {
        (self.weighted[to + 1] - self.weighted[from]) / self.mass(from, to)
    }
}
