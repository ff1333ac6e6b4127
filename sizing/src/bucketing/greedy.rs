//! Greedy bucketing (cctools `bucketing_greedy.c`, `bucketing_det_greedy.c`): the sorted
//! points are split recursively, each range at the break whose expected cost of one more
//! allocation level is lowest, until the best break of every range is its top. There is no
//! limit on the number of buckets (cctools' `max_num_buckets` is not read by greedy).

use super::{Bucket, Point, Sums};

/// Greedy buckets of `sorted` points; `deterministic` selects det_greedy's cost.
pub fn greedy(sorted: &[Point], deterministic: bool) -> Vec<Bucket> {
    if sorted.is_empty() {
        return Vec::new();
    }
    let sums = Sums::new(sorted);
    let mut breaks = Vec::new();
    split(
        sorted,
        &sums,
        0,
        sorted.len() - 1,
        deterministic,
        &mut breaks,
    );
    breaks.push(sorted.len() - 1);
    breaks.sort_unstable();
    let values: Vec<f64> = breaks.iter().map(|&i| sorted[i].0).collect();
    by_value(sorted, &values)
}

/// Push the breaks of `lo..=hi` (not its top) into `breaks`. A work list rather than
/// recursion: a long tail of outliers can peel off one point per level.
fn split(
    sorted: &[Point],
    sums: &Sums,
    lo: usize,
    hi: usize,
    deterministic: bool,
    breaks: &mut Vec<usize>,
) {
    let mut ranges = vec![(lo, hi)];
    while let Some((lo, hi)) = ranges.pop() {
        let at = best_break(sorted, sums, lo, hi, deterministic);
        if at == hi {
            continue;
        }
        breaks.push(at);
        ranges.push((lo, at));
        ranges.push((at + 1, hi));
    }
}

fn best_break(sorted: &[Point], sums: &Sums, lo: usize, hi: usize, det: bool) -> usize {
    let mut best = (f64::INFINITY, hi);
    for i in lo..=hi {
        let c = cost(sorted, sums, lo, i, hi, det);
        // Ties go to the later break, as cctools compares with `<=`.
        if c <= best.0 {
            best = (c, i);
        }
    }
    best.1
}

/// The expected cost of breaking `lo..=hi` after `i`, with b the value at the break, M the top,
/// p₁/p₂ the significance shares and E₁/E₂ the means below and above:
/// probabilistic p₁²(b−E₁) + p₁p₂(M−E₁) + p₂p₁(b+M−E₂) + p₂²(M−E₂) (a task draws either
/// allocation); deterministic p₁(b−E₁) + p₂(b+M−E₂) (every task starts at b).
fn cost(sorted: &[Point], sums: &Sums, lo: usize, i: usize, hi: usize, det: bool) -> f64 {
    let p1 = sums.mass(lo, i) / sums.mass(lo, hi);
    let p2 = 1.0 - p1;
    let e1 = sums.mean(lo, i);
    let e2 = if i < hi { sums.mean(i + 1, hi) } else { 0.0 };
    let (b, top) = (sorted[i].0, sorted[hi].0);
    if det {
        p1 * (b - e1) + p2 * (b + top - e2)
    } else {
        p1 * p1 * (b - e1) + p1 * p2 * (top - e1) + p2 * p1 * (b + top - e2) + p2 * p2 * (top - e2)
    }
}

/// Buckets at `values` (ascending), each with the significance share of the points above the
/// previous value and not above its own (as cctools assigns points by value); a value repeated
/// gets no points and is left out.
pub(super) fn by_value(sorted: &[Point], values: &[f64]) -> Vec<Bucket> {
    let total: f64 = sorted.iter().map(|p| p.1).sum();
    let mut buckets: Vec<Bucket> = Vec::with_capacity(values.len());
    let mut start = 0;
    for &value in values {
        let end = start + sorted[start..].partition_point(|p| p.0 <= value);
        let mass: f64 = sorted[start..end].iter().map(|p| p.1).sum();
        if mass > 0.0 {
            buckets.push(Bucket {
                value,
                probability: mass / total,
            });
        }
        start = end;
    }
    buckets
}
