//! Sizey (Bader, Skalski, Lehmann, Scheinert, Witzke, Leser & Thamsen, "Sizey:
//! Memory-Efficient Execution of Scientific Workflow Tasks", IEEE CLUSTER 2024; code:
//! dos-group/sizey): several regressors of peak memory on input size, trained online; each
//! task is sized by the one with the best Resource Allocation Quality (RAQ = α·efficiency +
//! (1 − α)·accuracy), raised by an offset learnt from that regressor's past relative errors;
//! after a failure, the largest use seen (or double the failed allocation where that cannot
//! be enough).
//!
//! From the paper's code, as there: accuracy is the negated mean relative error clipped at
//! 100% ("smoothed MAPE"); efficiency is −prediction / the largest prediction of the
//! regressors; the offset is chosen among the median of under-predictions, the median of all
//! errors, the standard deviation of errors (outliers dropped) and of under-predictions,
//! whichever has the least wastage (the "dynamic" offset; lfm adds the offset covering the
//! peak under-prediction and costs failures by the real retry: [`dynamic_offset`]); the retry
//! is `MAX_EVER_OBSERVED`. Cheaper here, so
//! training stays in milliseconds: the regressors are least squares, least squares on
//! log-log (a power law) and k nearest neighbours (k = 5) instead of linear, k-NN, random
//! forest and neural network with grid search; accuracy and offsets are measured on each
//! regressor's real online predictions over the last [`WINDOW`] tasks rather than by
//! cross-validation over all of them.

mod neighbours;

use super::regression::{kendall_tau, least_squares, quantile, Line, Sample};

/// Recent tasks whose errors weigh a regressor's accuracy and offset.
pub const WINDOW: usize = 32;
/// Tasks before the regressors answer (fewer: the caller's warm-up).
pub const MIN_SAMPLES: usize = 3;
/// Sizey's α: weight of efficiency against accuracy in the RAQ score.
pub const ALPHA: f64 = 0.0;
/// The offset before any error is known (Sizey's `default_offset`).
const DEFAULT_OFFSET: f64 = 0.05;
const NEIGHBOURS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Regressor {
    Linear,
    PowerLaw,
    Neighbours,
}

const REGRESSORS: [Regressor; 3] = [
    Regressor::Linear,
    Regressor::PowerLaw,
    Regressor::Neighbours,
];

/// One category's regressors and their recent errors: (relative error (use − prediction) /
/// use, use).
#[derive(Debug, Clone, Default)]
pub struct Sizey {
    samples: Vec<Sample>,
    /// The samples as the regressors read them, kept as they come rather than made again
    /// at each prediction (a history's replay predicts for each recent run).
    columns: Columns,
    errors: [Vec<(f64, f64)>; 3],
    /// Each regressor's prediction for the task being sized, kept for its error when it ends.
    pending: Option<(f64, [f64; 3])>,
}

impl Sizey {
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// A task ended: each regressor's error on it (if it was sized), then it joins the data.
    pub fn record(&mut self, sample: Sample) {
        let predictions = match self.pending.take() {
            Some((input, p)) if input == sample.input => Some(p),
            _ if self.samples.len() >= MIN_SAMPLES => Some(self.raw(sample.input)),
            _ => None,
        };
        if let Some(predictions) = predictions {
            for (errors, p) in self.errors.iter_mut().zip(predictions) {
                let relative = (sample.used - p) / sample.used.max(f64::MIN_POSITIVE);
                errors.push((relative, sample.used));
                if errors.len() > WINDOW {
                    errors.remove(0);
                }
            }
        }
        self.push(sample);
    }

    fn push(&mut self, sample: Sample) {
        self.columns.push(&sample);
        self.samples.push(sample);
    }

    /// A task ended whose errors are not wanted (an old one, when a history is read): it only
    /// joins the data.
    pub fn record_untracked(&mut self, sample: Sample) {
        self.pending = None;
        self.push(sample);
    }

    /// Each regressor's raw prediction for `input`.
    fn raw(&mut self, input: f64) -> [f64; 3] {
        REGRESSORS.map(|r| self.columns.predict(r, input))
    }

    /// The first allocation of a task of `input` bytes: the best RAQ regressor's prediction
    /// plus its offset. None while fewer than [`MIN_SAMPLES`] tasks have finished.
    pub fn predict(&mut self, input: f64) -> Option<f64> {
        if self.samples.len() < MIN_SAMPLES {
            return None;
        }
        let raw = self.raw(input);
        self.pending = Some((input, raw));
        let largest = raw.iter().copied().fold(f64::MIN_POSITIVE, f64::max);
        let raq = |i: usize| {
            let accuracy = -mean(self.errors[i].iter().map(|e| e.0.abs().min(1.0)));
            ALPHA * (-raw[i] / largest) + (1.0 - ALPHA) * accuracy
        };
        let best = (0..3).fold(0, |b, i| if raq(i) > raq(b) { i } else { b });
        let offset = dynamic_offset(&self.errors[best], self.largest().0);
        let smallest = self.columns.smallest;
        let allocation = raw[best] * (1.0 + offset);
        Some(if allocation > 0.0 {
            allocation
        } else {
            smallest * (1.0 + DEFAULT_OFFSET)
        })
    }

    /// Sizey's `MAX_EVER_OBSERVED` retry after `failed` ran out on a task of `input` bytes:
    /// the largest use seen, unless that cannot be enough (not above the failed allocation,
    /// within 5% of it, or the input is beyond the largest seen while use follows input
    /// (Kendall τ > 0.25)): then double.
    pub fn retry(&self, failed: f64, input: f64) -> f64 {
        let (max_used, max_input) = self.largest();
        let recent: Vec<(f64, f64)> = self
            .samples
            .iter()
            .rev()
            .take(2 * WINDOW)
            .map(|s| (s.input, s.used))
            .collect();
        let follows_input = kendall_tau(&recent) > 0.25 && input > max_input;
        if follows_input {
            failed * 2.0
        } else {
            max_ever_observed(failed, max_used)
        }
    }

    /// The largest use seen and its input (the earliest of equal uses).
    fn largest(&self) -> (f64, f64) {
        self.columns.largest
    }
}

/// The retry after `failed` when the largest use seen is `max_used`: that, unless it is not
/// 5% above the failed allocation (then it cannot be trusted to fit): double.
fn max_ever_observed(failed: f64, max_used: f64) -> f64 {
    if max_used <= failed * 1.05 {
        failed * 2.0
    } else {
        max_used
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Each sample's input and use, and their logarithms (the power law's axes), kept as they
/// come rather than made again at each prediction (a history's replay predicts for each
/// recent run); the largest and smallest use; and the inputs sorted, for the neighbours.
/// The least-squares fits stay two passes over the columns: running sums (Welford's) were
/// tried and differ in the last bits, enough to move Sizey's choices and best-so-far's waste
/// on nfcore_sizey's eager by 0.4 points (docs/benchmarks.md).
#[derive(Debug, Clone)]
struct Columns {
    input: Vec<f64>,
    used: Vec<f64>,
    ln_input: Vec<f64>,
    ln_used: Vec<f64>,
    /// The largest use and its input (the earliest of equal uses), and the smallest use.
    largest: (f64, f64),
    smallest: f64,
    by_input: neighbours::ByInput,
}

impl Default for Columns {
    fn default() -> Columns {
        Columns {
            input: Vec::new(),
            used: Vec::new(),
            ln_input: Vec::new(),
            ln_used: Vec::new(),
            largest: (0.0, 0.0),
            smallest: f64::INFINITY,
            by_input: Default::default(),
        }
    }
}

/// The power law's axis: log(v + 1), 0 and below at 0.
fn ln(v: f64) -> f64 {
    (v.max(0.0) + 1.0).ln()
}

impl Columns {
    fn push(&mut self, sample: &Sample) {
        self.input.push(sample.input);
        self.used.push(sample.used);
        self.ln_input.push(ln(sample.input));
        self.ln_used.push(ln(sample.used));
        if sample.used > self.largest.0 {
            self.largest = (sample.used, sample.input);
        }
        self.smallest = self.smallest.min(sample.used);
    }

    fn predict(&mut self, regressor: Regressor, input: f64) -> f64 {
        match regressor {
            Regressor::Linear => least_squares(&self.input, &self.used).at(input),
            // log(use) = a + b·log(input): memory that grows slower (or faster) than input.
            Regressor::PowerLaw => {
                let line: Line = least_squares(&self.ln_input, &self.ln_used);
                line.at(ln(input)).exp() - 1.0
            }
            Regressor::Neighbours => mean(self.nearest(input).iter().map(|&(_, used)| used)),
        }
    }

    /// The uses of the [`NEIGHBOURS`] samples of input nearest `input`, nearest first, the
    /// earlier first among equally near (what a stable sort by distance puts first).
    fn nearest(&mut self, input: f64) -> Vec<(f64, f64)> {
        let found = self.by_input.nearest(&self.input, input, NEIGHBOURS);
        found.into_iter().map(|(d, i)| (d, self.used[i])).collect()
    }
}

#[cfg(test)]
fn predict(regressor: Regressor, samples: &[Sample], input: f64) -> f64 {
    let mut columns = Columns::default();
    samples.iter().for_each(|s| columns.push(s));
    columns.predict(regressor, input)
}

/// Sizey's dynamic offset: of its offset rules, the one that would have wasted least on the
/// recent tasks (`errors`: relative error and use). The rules are the paper's four (median of
/// the under-predictions, median of the absolute errors, their deviation without outliers,
/// deviation of the under-predictions) and the offset covering the peak under-prediction (the
/// paper's code has peak offsets, left out of its dynamic choice). A failure is costed by the retry this strategy
/// makes (the largest use seen, `max_used`), where the paper's code assumes doubling: under
/// max-ever-observed a failed small task costs far more than a doubling, and an offset chosen
/// for doubling left a quarter of a noisy category failing.
fn dynamic_offset(errors: &[(f64, f64)], max_used: f64) -> f64 {
    if errors.is_empty() {
        return DEFAULT_OFFSET;
    }
    let relative: Vec<f64> = errors.iter().map(|e| e.0).collect();
    let under: Vec<f64> = relative.iter().copied().filter(|e| *e > 0.0).collect();
    let absolute: Vec<f64> = relative.iter().map(|e| e.abs()).collect();
    let or_default = |v: &[f64], f: &dyn Fn(&[f64]) -> f64| {
        if v.is_empty() {
            DEFAULT_OFFSET
        } else {
            f(v)
        }
    };
    let median = |v: &[f64]| quantile(v, 0.5);
    // The least offset under which every recent under-prediction would have fitted.
    let cover = |v: &[f64]| {
        let e = quantile(v, 1.0).min(0.99);
        e / (1.0 - e)
    };
    let candidates = [
        or_default(&under, &median),
        or_default(&absolute, &median),
        if errors.len() > 1 {
            cleaned_std_dev(&absolute)
        } else {
            DEFAULT_OFFSET
        },
        or_default(&under, &std_dev),
        or_default(&under, &cover),
    ];
    // A task of use u whose prediction erred by e was predicted u·(1 − e).
    let cost = |offset: f64| -> f64 {
        errors
            .iter()
            .map(|&(e, used)| {
                retried_cost(
                    (used * (1.0 - e) * (1.0 + offset)).max(1e-3),
                    used,
                    max_used,
                )
            })
            .sum()
    };
    candidates
        .into_iter()
        .fold((DEFAULT_OFFSET, f64::INFINITY), |best, o| {
            let c = cost(o);
            if c < best.1 {
                (o, c)
            } else {
                best
            }
        })
        .0
}

/// What a task of peak `used` costs when first given `first` and retried by
/// [`max_ever_observed`]: the sum of its attempts' allocations.
fn retried_cost(first: f64, used: f64, max_used: f64) -> f64 {
    let (mut allocation, mut total) = (first, 0.0);
    while allocation < used {
        total += allocation;
        allocation = max_ever_observed(allocation, max_used);
    }
    total + allocation
}

/// Sizey's `STD` offset: the deviation of the absolute errors once outliers are dropped, those
/// more than 1.5 times the 10-90 percentile range outside it (one wild prediction would
/// otherwise pad every later allocation).
fn cleaned_std_dev(absolute: &[f64]) -> f64 {
    let (low, high) = (quantile(absolute, 0.1), quantile(absolute, 0.9));
    let margin = 1.5 * (high - low);
    let kept: Vec<f64> = absolute
        .iter()
        .copied()
        .filter(|e| *e >= low - margin && *e <= high + margin)
        .collect();
    std_dev(&kept)
}

fn std_dev(values: &[f64]) -> f64 {
    let m = mean(values.iter().copied());
    mean(values.iter().map(|v| (v - m) * (v - m))).sqrt()
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
    fn the_regressors_fit_a_line_a_power_law_and_neighbours() {
        let line: Vec<Sample> = (1..=10)
            .map(|i| sample(i as f64, 10.0 * i as f64))
            .collect();
        assert!((predict(Regressor::Linear, &line, 20.0) - 200.0).abs() < 1e-9);
        // Neighbours of 2: inputs 1, 2, 3, 4, 5, their mean use 30.
        assert!((predict(Regressor::Neighbours, &line, 2.0) - 30.0).abs() < 1e-9);
        // use + 1 = (input + 1)²: exact on log-log.
        let square: Vec<Sample> = (1..=10)
            .map(|i| sample(i as f64, ((i + 1) * (i + 1) - 1) as f64))
            .collect();
        assert!((predict(Regressor::PowerLaw, &square, 19.0) - 399.0).abs() < 1e-6);
    }

    #[test]
    fn the_offset_is_the_rule_that_wasted_least() {
        let with_use = |errors: &[f64]| errors.iter().map(|&e| (e, 1.0)).collect::<Vec<_>>();
        // Every prediction 10% under (use 1, predicted 0.9), largest use 1. The medians give
        // 0.1: 0.99 fails, then 1 (the largest use): 1.99; the deviations 0: 0.9 fails, then
        // 1: 1.9; the cover 1/9 fits exactly: 1, the least.
        assert!((dynamic_offset(&with_use(&[0.1; 8]), 1.0) - 1.0 / 9.0).abs() < 1e-12);
        // Two predictions 4% under, one 50% over. Medians 0.04: the under ones fail at 0.9984
        // (1.9984 each), the over one gets 1.56: 5.56. Offset 0: 1.96 each and 1.5: 5.42. The
        // deviation of the absolute errors (0.2169) covers the under ones: 1.168 each and
        // 1.825: 4.16; the cover (0.0417) 1.0 each and 1.56: 3.56, the least.
        let errors = with_use(&[0.04, 0.04, -0.5]);
        assert!((dynamic_offset(&errors, 1.0) - 0.04 / 0.96).abs() < 1e-12);
        assert!((std_dev(&[0.04, 0.04, 0.5]) - 0.21685).abs() < 1e-4);
        // Three 2% under, one 20% under, largest use 4 (a failure is dear). Medians 0.02: all
        // fail, 19.8; the deviations (0.078): the three fit (3.17), the last fails (4.86):
        // 8.03; the cover 0.25: 3.675 + 1.0 = 4.675, the least.
        let errors = with_use(&[0.02, 0.02, 0.02, 0.2]);
        assert!((dynamic_offset(&errors, 4.0) - 0.25).abs() < 1e-12);
        // One prediction 900% over among twenty 10% under: dropped from the deviation.
        let mut absolute = vec![0.1; 20];
        absolute.push(9.0);
        assert!(cleaned_std_dev(&absolute) < 1e-12);
        // Without errors: the default.
        assert_eq!(dynamic_offset(&[], 1.0), DEFAULT_OFFSET);
    }

    #[test]
    fn it_waits_for_samples_then_learns_a_linear_category() {
        let mut sizey = Sizey::default();
        assert_eq!(sizey.predict(1.0), None);
        for i in 1..=40 {
            let input = (i % 10 + 1) as f64 * 100.0;
            if let Some(allocation) = sizey.predict(input) {
                if i > 20 {
                    // use = 3·input exactly: within a few percent above it.
                    let used = 3.0 * input;
                    assert!(
                        allocation >= used * (1.0 - 1e-9) && allocation < used * 1.1,
                        "{i}: {allocation}"
                    );
                }
            }
            sizey.record(sample(input, 3.0 * input));
        }
    }

    #[test]
    fn a_retry_gets_the_largest_use_unless_the_input_is_beyond_it() {
        let mut sizey = Sizey::default();
        for i in 1..=10 {
            sizey.record(sample(i as f64, 100.0 * i as f64));
        }
        // Failed at 300 with input 5: the largest seen, 1000.
        assert_eq!(sizey.retry(300.0, 5.0), 1000.0);
        // Failed at 980: 1000 is within 5%, double.
        assert_eq!(sizey.retry(980.0, 5.0), 1960.0);
        // Input 20, beyond the largest (10) of a category whose use follows input: double.
        assert_eq!(sizey.retry(300.0, 20.0), 600.0);
    }
}
