//! Sizey's nearest neighbours without a pass over every sample: the samples' inputs kept
//! sorted (then by arrival), so the k nearest of an input are found from where it would sort,
//! outwards. The answer is the one a pass over all samples in arrival order gives, to the
//! last bit: the k of least (distance, arrival), in that order.

use std::ops::Range;

/// The samples' inputs sorted, each with its arrival index: brought up to date when asked,
/// the few new ones inserted, many sorted at once (a decision reads a whole window first).
#[derive(Debug, Clone, Default)]
pub(super) struct ByInput {
    sorted: Vec<(f64, usize)>,
}

/// An input as a sort key: -0 as 0, so that equal inputs are one group.
fn key(input: f64) -> f64 {
    input + 0.0
}

impl ByInput {
    /// The `k` samples of `inputs` nearest `query` as (distance, index), nearest first and
    /// the earlier first among equally near.
    pub(super) fn nearest(&mut self, inputs: &[f64], query: f64, k: usize) -> Vec<(f64, usize)> {
        self.bring_up_to_date(inputs);
        let sorted = &self.sorted;
        let at = sorted.partition_point(|e| e.0.total_cmp(&key(query)).is_lt());
        let mut found = closest(inputs, sorted, below(sorted, at), query, k);
        found.extend(closest(inputs, sorted, above(sorted, at), query, k));
        found.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        found.truncate(k);
        found
    }

    fn bring_up_to_date(&mut self, inputs: &[f64]) {
        let known = self.sorted.len().min(inputs.len());
        let new = inputs.len() - known;
        if new * 8 <= known {
            for (index, &input) in inputs.iter().enumerate().skip(known) {
                let at = (self.sorted).partition_point(|e| e.0.total_cmp(&key(input)).is_le());
                self.sorted.insert(at, (key(input), index));
            }
            return;
        }
        self.sorted = inputs.iter().map(|&x| key(x)).zip(0..).collect();
        (self.sorted).sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    }
}

/// Runs of equal inputs from `at` upwards, nearest `query` first.
fn above(sorted: &[(f64, usize)], mut at: usize) -> impl Iterator<Item = Range<usize>> + '_ {
    std::iter::from_fn(move || {
        let value = sorted.get(at)?.0;
        let end = at + sorted[at..].partition_point(|e| e.0.total_cmp(&value).is_le());
        let run = at..end;
        at = end;
        Some(run)
    })
}

/// Runs of equal inputs below `at`, downwards: nearest `query` first.
fn below(sorted: &[(f64, usize)], mut at: usize) -> impl Iterator<Item = Range<usize>> + '_ {
    std::iter::from_fn(move || {
        let value = sorted[..at].last()?.0;
        let start = sorted[..at].partition_point(|e| e.0.total_cmp(&value).is_lt());
        let run = start..at;
        at = start;
        Some(run)
    })
}

/// From `runs` (equally near within one, no nearer in a later one), the candidates for the
/// `k` nearest: a run's first `k` by arrival (its later ones cannot be among them), until
/// `k` are found and the next run is farther (one as near may hold earlier arrivals).
fn closest(
    inputs: &[f64],
    sorted: &[(f64, usize)],
    runs: impl Iterator<Item = Range<usize>>,
    query: f64,
    k: usize,
) -> Vec<(f64, usize)> {
    let mut found: Vec<(f64, usize)> = Vec::new();
    for run in runs {
        let distance = (inputs[sorted[run.start].1] - query).abs();
        if found.len() >= k && found.last().is_none_or(|last| last.0 != distance) {
            break;
        }
        let first = &sorted[run.start..run.end.min(run.start + k)];
        found.extend(first.iter().map(|&(_, index)| (distance, index)));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucketing::Random;

    /// A pass over every sample in arrival order: what Sizey did before the index.
    fn every_sample(inputs: &[f64], query: f64, k: usize) -> Vec<(f64, usize)> {
        let mut nearest: Vec<(f64, usize)> = Vec::new();
        for (index, &x) in inputs.iter().enumerate() {
            let distance = (x - query).abs();
            let at = nearest.partition_point(|n| n.0.total_cmp(&distance).is_le());
            if at < k {
                nearest.insert(at, (distance, index));
                nearest.truncate(k);
            }
        }
        nearest
    }

    #[test]
    fn the_nearest_are_those_of_a_pass_over_every_sample() {
        let mut random = Random::new(5);
        let mut draw = |few: bool| {
            let r = random.next_f64();
            // Repeated values (a category whose input is unknown: all 0) and distinct ones.
            if few {
                [0.0, -0.0, 1e6, 2e6, 3e6][(r * 5.0) as usize % 5]
            } else {
                r * 4e9
            }
        };
        for few in [true, false] {
            let mut by_input = ByInput::default();
            let mut inputs = Vec::new();
            for n in 0..400 {
                inputs.push(draw(few && n % 7 != 0));
                for query in [draw(few), draw(false), 0.0, inputs[n / 2], 1e12, -5.0] {
                    let expected = every_sample(&inputs, query, 5);
                    assert_eq!(by_input.nearest(&inputs, query, 5), expected, "{n} {query}");
                }
            }
        }
        // Nothing yet, and more asked than there are.
        assert!(ByInput::default().nearest(&[], 3.0, 5).is_empty());
        assert_eq!(ByInput::default().nearest(&[2.0, 1.0], 3.0, 5).len(), 2);
    }
}
