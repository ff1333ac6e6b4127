//! Small pieces the input-aware strategies share: a task as (input, use, time), least squares
//! on input size, quantiles, rank correlation, and the cost of a first allocation under
//! doubling retries (Witt et al.'s exponential failure handling, which is also how `simulate`
//! counts a failed attempt: its whole allocation, for the task's whole time).

/// A finished task as the regressions see it: input size (bytes; 0 when unknown), peak use
/// of the resource, and its weight (wall time, or 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub input: f64,
    pub used: f64,
    pub time: f64,
}

/// y = intercept + slope·x.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Line {
    pub slope: f64,
    pub intercept: f64,
}

impl Line {
    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

/// Ordinary least squares of `ys` on `xs`; a flat line at the mean when the xs do not vary.
pub fn least_squares(xs: &[f64], ys: &[f64]) -> Line {
    let n = xs.len().max(1) as f64;
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = ys.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mean_x) * (y - mean_y);
        sxx += (x - mean_x) * (x - mean_x);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    Line {
        slope,
        intercept: mean_y - slope * mean_x,
    }
}

/// The q-quantile (0..=1) of `values`, linearly interpolated (numpy's default); 0 if empty.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    quantile_of_sorted(&sorted, q)
}

/// [`quantile`] of values sorted already: several quantiles of one vector cost one sort.
pub fn quantile_of_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (low, high) = (at.floor() as usize, at.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (at - low as f64)
}

/// Kendall's rank correlation τ-a of the pairs (0 with fewer than two): how surely a larger
/// input means a larger use, whatever the shape.
pub fn kendall_tau(pairs: &[(f64, f64)]) -> f64 {
    let n = pairs.len();
    if n < 2 {
        return 0.0;
    }
    let mut score = 0.0;
    for i in 0..n {
        for j in i + 1..n {
            let dx = pairs[i].0 - pairs[j].0;
            let dy = pairs[i].1 - pairs[j].1;
            score += (dx * dy).signum();
        }
    }
    score / (n * (n - 1) / 2) as f64
}

/// What a task of peak `used` costs when first given `first` and doubled after each
/// failure, capped at `node` (a task above the node gets the node): the sum of its attempts'
/// allocations, each for the task's whole time (relative time to failure 1, Witt et al.'s
/// setting). Over-allocation and failed attempts both count, as in `simulate`.
pub fn doubling_cost(first: f64, used: f64, node: f64, time: f64) -> f64 {
    let mut allocation = first.min(node).max(f64::MIN_POSITIVE);
    let mut total = 0.0;
    while allocation < used && allocation < node {
        total += allocation;
        allocation = (allocation * 2.0).min(node);
    }
    (total + allocation) * time
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_line_and_is_flat_without_spread() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        let ys = [5.0, 7.0, 9.0, 11.0];
        assert_eq!(
            least_squares(&xs, &ys),
            Line {
                slope: 2.0,
                intercept: 3.0
            }
        );
        let flat = least_squares(&[2.0, 2.0], &[1.0, 3.0]);
        assert_eq!((flat.slope, flat.intercept), (0.0, 2.0));
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let values = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&values, 0.0), 1.0);
        assert_eq!(quantile(&values, 1.0), 4.0);
        assert_eq!(quantile(&values, 0.5), 2.5);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn kendall_tau_is_one_for_any_increasing_relation() {
        let rising: Vec<(f64, f64)> = (1..6).map(|x| (x as f64, (x * x) as f64)).collect();
        assert_eq!(kendall_tau(&rising), 1.0);
        let falling: Vec<(f64, f64)> = rising.iter().map(|&(x, y)| (x, -y)).collect();
        assert_eq!(kendall_tau(&falling), -1.0);
        assert_eq!(kendall_tau(&[(1.0, 1.0)]), 0.0);
    }

    #[test]
    fn doubling_counts_every_failed_attempt_in_full() {
        // Fits at once: the allocation.
        assert_eq!(doubling_cost(100.0, 80.0, 1000.0, 1.0), 100.0);
        // 100 fails, 200 fails, 400 fits: 700, for 2 s.
        assert_eq!(doubling_cost(100.0, 300.0, 1000.0, 2.0), 1400.0);
        // 400 fails, then the node (not 800... 800 fails too, then the node: 1000).
        assert_eq!(
            doubling_cost(400.0, 900.0, 1000.0, 1.0),
            400.0 + 800.0 + 1000.0
        );
        // Above the node: the node is the last attempt.
        assert_eq!(doubling_cost(600.0, 5000.0, 1000.0, 1.0), 1600.0);
    }
}
