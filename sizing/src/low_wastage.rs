//! Low-wastage regression (Witt, Wagner & Leser, "Feedback-Based Resource Allocation for
//! Batch Scheduling of Scientific Workflows", HPCS 2019; code: carlwitt/low-wastage-regression,
//! the "Witt-Wastage" baseline of Sizey): a first allocation linear in the input size,
//! a₁ = max(slope·input + intercept, minimum), whose slope and intercept minimise the wastage
//! of the tasks seen so far when each failure doubles the allocation (base 2, relative time
//! to failure 1). Over-allocation and failed attempts both count, weighted by run time.
//!
//! As in the paper's code, the search starts from quantile lines (quantiles 1 − a² for five a
//! in 0.01..0.7, i.e. 0.51 to 0.9999) and from the interquartile-range slope, and refines the
//! best. Two simplifications keep training in milliseconds: a quantile line is the
//! least-squares or IQR slope with its intercept at the residuals' quantile (rather than a
//! fitted quantile regression), and the refinement is a compass search rather than COBYLA;
//! one model on all points replaces the paper's mean of ten models on 70% subsamples. When the
//! input barely varies (spread below 5% of its mean, the paper's test) only flat lines are
//! tried: the strategy becomes the wastage-minimising constant.

use super::regression::{doubling_cost, least_squares, quantile_of_sorted, Line, Sample};

/// Witt et al.'s quantile candidates, 1 − a² for a in linspace(0.01, 0.7, 5).
const QUANTILES: [f64; 5] = [0.9999, 0.968_975, 0.877_9, 0.725_775, 0.51];
/// Evaluations the compass search may spend (COBYLA's maxiter in the paper is 200).
const SEARCH_EVALUATIONS: usize = 200;

/// The wastage-minimising line of one category, retrained as its tasks finish.
#[derive(Debug, Clone, Default)]
pub struct LowWastage {
    samples: Vec<Sample>,
    line: Option<Line>,
    /// Tasks recorded since the last training: the model is retrained once the category grew
    /// by a sixteenth (every task while small), so training stays O(n) amortised per task.
    /// Counted rather than read from the sample count, for a decision resumes the model
    /// ([`LowWastage::resume`]) over a window whose size no longer grows.
    since_training: usize,
}

impl LowWastage {
    /// A task that ended: it joins the samples and counts toward the next training.
    pub fn record(&mut self, sample: Sample) {
        self.samples.push(sample);
        self.since_training += 1;
    }

    /// A task the model has seen before (a decision reading the runs its tally holds): it
    /// joins the samples only; its count is in what [`LowWastage::resume`] was given.
    pub fn learn(&mut self, sample: Sample) {
        self.samples.push(sample);
    }

    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// The line in use and the tasks recorded since it was trained (None: not trained yet).
    pub fn state(&self) -> Option<(Line, usize)> {
        self.line.map(|line| (line, self.since_training))
    }

    /// Take up a line trained by an earlier decision over the same tasks, so that a decision
    /// retrains only when [`LowWastage::record`] says it is due, as one long replay would.
    pub fn resume(&mut self, line: Line, since_training: usize) {
        self.line = Some(line);
        self.since_training = since_training;
    }

    /// The first allocation of a task of `input` bytes (None before any task finished).
    /// `node` caps the allocations the training replays; `floor` is the least allocation.
    pub fn predict(&mut self, input: f64, node: f64, floor: f64) -> Option<f64> {
        let n = self.samples.len();
        if n == 0 {
            return None;
        }
        if self.line.is_none() || self.since_training >= (n / 16).max(1) {
            self.line = Some(train(&self.samples, node, floor));
            self.since_training = 0;
        }
        self.line.map(|line| line.at(input).max(floor))
    }
}

/// The wastage of `line` on `samples` (allocated minus nothing: the used part is the same for
/// every line, so it is left out).
fn wastage(line: Line, samples: &[Sample], node: f64, floor: f64) -> f64 {
    samples
        .iter()
        .map(|s| doubling_cost(line.at(s.input).max(floor), s.used, node, s.time))
        .sum()
}

/// The starting lines: for each candidate slope (none, least squares, interquartile), the
/// intercepts putting the line at each quantile of the residuals.
fn candidates(samples: &[Sample]) -> Vec<Line> {
    let xs = sorted(samples.iter().map(|s| s.input));
    let ys = sorted(samples.iter().map(|s| s.used));
    let q = quantile_of_sorted;
    // In the samples' order, as before the sort: the same sum to the last bit.
    let mean_x = samples.iter().map(|s| s.input).sum::<f64>() / xs.len() as f64;
    let spread = q(&xs, 1.0) - q(&xs, 0.0);
    let mut slopes = vec![0.0];
    if spread > 0.05 * mean_x {
        let (input, used): (Vec<f64>, Vec<f64>) = samples.iter().map(|s| (s.input, s.used)).unzip();
        slopes.push(least_squares(&input, &used).slope.max(0.0));
        let iqr_x = q(&xs, 0.75) - q(&xs, 0.25);
        if iqr_x > 0.0 {
            slopes.push((q(&ys, 0.75) - q(&ys, 0.25)) / iqr_x);
        }
    }
    let mut lines = Vec::new();
    for slope in slopes {
        let residuals = sorted(samples.iter().map(|s| s.used - slope * s.input));
        for quantile in QUANTILES {
            let intercept = q(&residuals, quantile);
            lines.push(Line { slope, intercept });
        }
    }
    lines
}

/// The values sorted, for several quantiles of one sort.
fn sorted(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// The best candidate, refined by a compass search. The line is moved by its heights at two
/// anchors (the 10th and 90th percentiles of the input), not by slope and intercept: where
/// noise grows with the input the best line is lower at small inputs and higher at large
/// ones, a move no single step of slope or intercept makes without failing tasks at one end,
/// so a search on those axes stalled far above the small tasks.
fn train(samples: &[Sample], node: f64, floor: f64) -> Line {
    let cost = |line: Line| wastage(line, samples, node, floor);
    let mut best = (
        Line {
            slope: 0.0,
            intercept: node,
        },
        f64::INFINITY,
    );
    for line in candidates(samples) {
        let c = cost(line);
        if c < best.1 {
            best = (line, c);
        }
    }
    let xs = sorted(samples.iter().map(|s| s.input));
    let (low, high) = (quantile_of_sorted(&xs, 0.1), quantile_of_sorted(&xs, 0.9));
    let sloped = best.0.slope != 0.0 && high > low;
    let through = |a: f64, b: f64| {
        let slope = if sloped {
            ((b - a) / (high - low)).max(0.0)
        } else {
            0.0
        };
        Line {
            slope,
            intercept: a - slope * low,
        }
    };
    let scale = samples.iter().map(|s| s.used).fold(floor, f64::max);
    let mut step = scale / 4.0;
    let mut evaluations = 0;
    while evaluations < SEARCH_EVALUATIONS && step > scale * 1e-4 {
        let (a, b) = (best.0.at(low), best.0.at(high));
        let mut moves = vec![through(a + step, b + step), through(a - step, b - step)];
        if sloped {
            moves.extend([
                through(a + step, b),
                through(a - step, b),
                through(a, b + step),
                through(a, b - step),
            ]);
        }
        let mut improved = false;
        for candidate in moves {
            evaluations += 1;
            let c = cost(candidate);
            if c < best.1 {
                best = (candidate, c);
                improved = true;
            }
        }
        if !improved {
            step /= 2.0;
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(input: f64, used: f64) -> Sample {
        Sample {
            input,
            used,
            time: 1.0,
        }
    }

    #[test]
    fn without_input_the_line_is_the_wastage_minimising_constant() {
        // Nine tasks at 100, one at 1000, node 2000. A constant a costs 10a if a >= 1000; at
        // a in [100, 1000): 9a for the small ones, and for the large one a, 2a, ... until 1000
        // is reached. At a = 100: 900 + (100+200+400+800+1600) = 4000; at a = 125:
        // 1125 + (125+250+500+1000) = 3000; a = 1000 costs 10000. So about 125 (the doubling
        // from 125 lands exactly on 1000).
        let mut samples: Vec<Sample> = (0..9).map(|_| sample(0.0, 100.0)).collect();
        samples.push(sample(0.0, 1000.0));
        let line = train(&samples, 2000.0, 1.0);
        assert_eq!(line.slope, 0.0);
        assert!(
            (line.intercept - 125.0).abs() < 1.0,
            "intercept {}",
            line.intercept
        );
    }

    #[test]
    fn an_exact_line_is_recovered_and_followed() {
        // use = 50 + 2·input: the least wastage is the line itself (no failure, no slack).
        let samples: Vec<Sample> = (1..=40)
            .map(|i| sample(i as f64 * 10.0, 50.0 + 20.0 * i as f64))
            .collect();
        let line = train(&samples, 10_000.0, 1.0);
        for x in [10.0, 200.0, 400.0] {
            let expected = 50.0 + 2.0 * x;
            assert!(
                line.at(x) >= expected - 1e-6 && line.at(x) < expected * 1.02,
                "{x}: {} vs {expected}",
                line.at(x)
            );
        }
    }

    #[test]
    fn it_predicts_nothing_before_the_first_task() {
        let mut model = LowWastage::default();
        assert_eq!(model.predict(5.0, 1000.0, 1.0), None);
        model.record(sample(5.0, 300.0));
        // One task: the flat line through it.
        let first = model.predict(5.0, 1000.0, 1.0).unwrap();
        assert!((first - 300.0).abs() < 1.0, "{first}");
    }
}
