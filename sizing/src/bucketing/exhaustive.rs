//! Exhaustive bucketing (cctools `bucketing_exhaust.c`, `bucketing_det_exhaust.c`): for each
//! number of buckets k = 1..=10, cut the sorted points at fixed candidate values and keep the
//! k whose expected cost is lowest.

use super::{Bucket, Point, Sums, MAX_BUCKETS};

/// The buckets of the lowest-cost k; `deterministic` selects det_exhaust's cost. On equal
/// costs the smaller k stays (cctools replaces only on a strictly lower cost).
pub fn exhaustive(sorted: &[Point], deterministic: bool) -> Vec<Bucket> {
    if sorted.is_empty() {
        return Vec::new();
    }
    let sums = Sums::new(sorted);
    let mut best: Option<(f64, Vec<Bucket>)> = None;
    for k in 1..=MAX_BUCKETS {
        let (buckets, means) = candidates(sorted, &sums, k);
        let cost = exhaustive_cost(&buckets, &means, deterministic);
        if best.as_ref().is_none_or(|(lowest, _)| cost < *lowest) {
            best = Some((cost, buckets));
        }
    }
    best.map(|(_, buckets)| buckets).unwrap_or_default()
}

/// k's buckets and each bucket's mean value.
#[cfg(test)]
pub fn exhaustive_candidates(sorted: &[Point], k: usize) -> (Vec<Bucket>, Vec<f64>) {
    candidates(sorted, &Sums::new(sorted), k)
}

/// The candidate delimiters are the powers of two 1, 2, 4, … below max/k (⌊log₂(max/k)⌋ of
/// them) and max·j/k for j = 1..=k; each bucket holds the points above the previous delimiter
/// and not above its own, and takes the value of its largest point. Empty buckets are dropped.
fn candidates(sorted: &[Point], sums: &Sums, k: usize) -> (Vec<Bucket>, Vec<f64>) {
    let max = sorted[sorted.len() - 1].0;
    let steps = if max > 0.0 {
        (max / k as f64).log2().floor().max(0.0) as i32
    } else {
        0
    };
    let powers = (0..steps).map(|i| 2f64.powi(i));
    let linear = (1..=k).map(|j| {
        if j == k {
            max
        } else {
            max * j as f64 / k as f64
        }
    });
    let total = sums.mass(0, sorted.len() - 1);
    let (mut buckets, mut means) = (Vec::new(), Vec::new());
    let mut start = 0;
    for delimiter in powers.chain(linear) {
        let end = start + sorted[start..].partition_point(|p| p.0 <= delimiter);
        if end > start {
            buckets.push(Bucket {
                value: sorted[end - 1].0,
                probability: sums.mass(start, end - 1) / total,
            });
            means.push(sums.mean(start, end - 1));
        }
        start = end;
    }
    (buckets, means)
}

/// Expected waste of a bucket list, with p the bucket probabilities, v their values and E
/// the mean of each bucket's points.
///
/// Deterministic: a task of bucket i is tried at every bucket up to i, so
/// Σᵢ pᵢ (Σ_{m≤i} v_m − Eᵢ).
///
/// Probabilistic: a task of bucket i drawn bucket j costs v_j − Eᵢ when j ≥ i; when j < i
/// it fails, wasting v_j, and draws again among the buckets above j:
/// c[i][j] = v_j + Σ_{m>j} p_m/P(>j) · c[i][m]. The expected cost is Σᵢⱼ pᵢ pⱼ c[i][j].
pub fn exhaustive_cost(buckets: &[Bucket], means: &[f64], deterministic: bool) -> f64 {
    if deterministic {
        let mut climbed = 0.0;
        return buckets
            .iter()
            .zip(means)
            .map(|(b, mean)| {
                climbed += b.value;
                b.probability * (climbed - mean)
            })
            .sum();
    }
    let n = buckets.len();
    let mut cost = vec![vec![0.0; n]; n];
    for i in (0..n).rev() {
        for j in i..n {
            cost[i][j] = buckets[j].value - means[i];
        }
        for j in (0..i).rev() {
            let above: f64 = buckets[j + 1..].iter().map(|b| b.probability).sum();
            let retry: f64 = (j + 1..n)
                .map(|m| buckets[m].probability / above * cost[i][m])
                .sum();
            cost[i][j] = buckets[j].value + retry;
        }
    }
    (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .map(|(i, j)| buckets[i].probability * buckets[j].probability * cost[i][j])
        .sum()
}
