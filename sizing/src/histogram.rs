//! Tovar et al. (TPDS 2018) as cctools `category.c` computes it: values rounded up to buckets,
//! each bucket's count and wall time; a₁ chosen among the bucket values.

use super::Resource;

pub struct Histogram {
    /// (bucket value, count, time), ascending by value.
    buckets: Vec<(f64, f64, f64)>,
    count: f64,
    time: f64,
    /// a_max: the largest value seen (rounded up), the allocation of a retry.
    top: f64,
}

impl Histogram {
    pub fn new(points: &[(f64, f64)], resource: &Resource) -> Histogram {
        let mut buckets: Vec<(f64, f64, f64)> = Vec::new();
        let mut values: Vec<(f64, f64)> = points
            .iter()
            .map(|&(v, t)| (resource.round_up(v), t))
            .collect();
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (value, time) in values {
            match buckets.last_mut() {
                Some(last) if last.0 == value => {
                    last.1 += 1.0;
                    last.2 += time;
                }
                _ => buckets.push((value, 1.0, time)),
            }
        }
        let count = buckets.iter().map(|b| b.1).sum();
        let time = buckets.iter().map(|b| b.2).sum();
        let top = buckets
            .last()
            .map_or(resource.node, |b| b.0)
            .min(resource.node);
        Histogram {
            buckets,
            count,
            time,
            top,
        }
    }

    /// τ̄: mean time of a task.
    fn mean_time(&self) -> f64 {
        self.time / self.count
    }

    /// T>(a): the time mass of tasks that would exceed `a`, over the number of tasks.
    fn time_above(&self, a: f64) -> f64 {
        self.buckets
            .iter()
            .filter(|b| b.0 > a)
            .map(|b| b.2)
            .sum::<f64>()
            / self.count
    }

    fn fraction_at_most(&self, a: f64) -> f64 {
        self.buckets
            .iter()
            .filter(|b| b.0 <= a)
            .map(|b| b.1)
            .sum::<f64>()
            / self.count
    }

    /// argmin over bucket values a of a·τ̄ + a_max·T>(a).
    pub fn min_waste(&self) -> f64 {
        let cost = |a: f64| a * self.mean_time() + self.top * self.time_above(a);
        self.best(|a| -cost(a))
    }

    /// argmax over bucket values a of [(a_max/a)·P(r≤a) + P(r>a)] / [τ̄ + T>(a)].
    pub fn max_throughput(&self) -> f64 {
        self.best(|a| {
            let fits = self.fraction_at_most(a);
            ((self.top / a) * fits + (1.0 - fits)) / (self.mean_time() + self.time_above(a))
        })
    }

    /// The bucket value with the highest score; the smallest one on ties.
    fn best(&self, score: impl Fn(f64) -> f64) -> f64 {
        let mut best = (f64::NEG_INFINITY, self.top);
        for &(value, _, _) in &self.buckets {
            let s = score(value);
            if s > best.0 {
                best = (s, value);
            }
        }
        best.1
    }
}
