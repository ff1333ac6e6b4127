//! Phung & Thain (IPDPS 2024) greedy bucketing, as cctools `bucketing_greedy.c` and
//! `bucketing_manager.c` do it: points weighted by recency (the task's sequence number), split
//! recursively where the expected cost of two allocations is lowest.

/// Fewer points than this: the sampling phase (the default value, doubled after failures).
pub const SAMPLING_POINTS: usize = 10;
const MAX_BUCKETS: usize = 10;

/// A bucket: its upper value and the significance mass of its points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub value: f64,
    pub weight: f64,
}

/// The default, or after a failure at `previous` the default times the next power of two.
pub fn grow(default: f64, previous: f64) -> f64 {
    if previous <= 0.0 {
        return default;
    }
    let steps = (previous / default).log2().floor().max(-1.0) as i32 + 1;
    default * 2f64.powi(steps)
}

/// Greedy buckets of `points` ((value, _) in arrival order; the i-th has significance i+1).
pub fn greedy(points: &[(f64, f64)]) -> Vec<Bucket> {
    let mut sorted: Vec<(f64, f64)> = points
        .iter()
        .enumerate()
        .map(|(i, &(value, _))| (value, (i + 1) as f64))
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let sums = Sums::new(&sorted);
    let mut buckets = Vec::new();
    split(&sorted, &sums, 0, sorted.len() - 1, &mut buckets);
    buckets.sort_by(|a, b| a.value.total_cmp(&b.value));
    buckets
}

/// Prefix sums of significance and of value x significance: any range's mass and mean in O(1).
struct Sums {
    mass: Vec<f64>,
    weighted: Vec<f64>,
}

impl Sums {
    fn new(points: &[(f64, f64)]) -> Sums {
        let mut mass = vec![0.0];
        let mut weighted = vec![0.0];
        for &(value, significance) in points {
            mass.push(mass.last().unwrap_or(&0.0) + significance);
            weighted.push(weighted.last().unwrap_or(&0.0) + value * significance);
        }
        Sums { mass, weighted }
    }

    fn mass(&self, from: usize, to: usize) -> f64 {
        self.mass[to + 1] - self.mass[from]
    }

    fn mean(&self, from: usize, to: usize) -> f64 {
        (self.weighted[to + 1] - self.weighted[from]) / self.mass(from, to)
    }
}

fn split(points: &[(f64, f64)], sums: &Sums, lo: usize, hi: usize, out: &mut Vec<Bucket>) {
    let total = sums.mass(lo, hi);
    let top = points[hi].0;
    let mut best = (f64::INFINITY, hi);
    for (i, point) in points.iter().enumerate().take(hi + 1).skip(lo) {
        let p1 = sums.mass(lo, i) / total;
        let p2 = 1.0 - p1;
        let e1 = sums.mean(lo, i);
        let e2 = if i < hi { sums.mean(i + 1, hi) } else { 0.0 };
        let b = point.0;
        let cost = p1 * p1 * (b - e1)
            + p1 * p2 * (top - e1)
            + p2 * p1 * (b + top - e2)
            + p2 * p2 * (top - e2);
        if cost <= best.0 {
            best = (cost, i);
        }
    }
    if best.1 == hi || out.len() + 2 > MAX_BUCKETS {
        out.push(Bucket {
            value: top,
            weight: total,
        });
        return;
    }
    split(points, sums, lo, best.1, out);
    split(points, sums, best.1 + 1, hi, out);
}

pub fn top(buckets: &[Bucket]) -> f64 {
    buckets.last().map_or(0.0, |b| b.value)
}

/// Deterministic: the smallest bucket above the previous allocation.
pub fn smallest_above(buckets: &[Bucket], previous: f64) -> Option<f64> {
    buckets.iter().find(|b| b.value > previous).map(|b| b.value)
}

/// Probabilistic: a bucket above the previous allocation, drawn by its weight.
pub fn draw_above(buckets: &[Bucket], previous: f64, random: &mut Random) -> Option<f64> {
    let above: Vec<&Bucket> = buckets.iter().filter(|b| b.value > previous).collect();
    let total: f64 = above.iter().map(|b| b.weight).sum();
    let mut pick = random.next_f64() * total;
    for bucket in &above {
        if pick < bucket.weight {
            return Some(bucket.value);
        }
        pick -= bucket.weight;
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
