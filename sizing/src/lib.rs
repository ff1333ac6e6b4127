//! lfm-sizing: how much the next run of a category gets, from what its past runs used, and
//! which queued run starts next on a node.
//!
//! It owns the history (SQLite, one row per Report: [`history`]), the strategies and their
//! replay (`best-so-far`), the one retry policy `lfm run`, `lfm call` and `lfm serve` share
//! ([`policy`], which runs through lfm-monitor), admission of calls by allocation within a
//! node's budget ([`admission`]: written once, used by the serve and modelled by
//! `lfm simulate --schedule-*` in [`schedule`]), `lfm size`'s advice and `lfm simulate`'s
//! comparison. It does not run or measure anything itself (lfm-monitor does), and knows
//! nothing of Python calls or the command line.
//!
//! Sizing: the next allocation of one resource of a category, from what its past runs used.
//!
//! Each [`Strategy`] is implemented from its source: `fixed` and `max-seen` and the two
//! histogram strategies `min-waste` and `max-throughput` of Tovar et al. (TPDS 2018, cctools
//! `category.c`), greedy and exhaustive bucketing (deterministic and probabilistic) of Phung &
//! Thain (IPDPS 2024) and quantized bucketing (Phung et al., WORKS 2021), as cctools
//! `bucketing*.c` do them; two that size from the task's input: Witt et al.'s low-wastage
//! regression (HPCS 2019) and Sizey (Bader et al., CLUSTER 2024); and `best-so-far`, which
//! picks among them per category by replaying its history. A [`Sizer`] is fed finished runs
//! (with their input size, when known) in order and
//! answers with a first allocation and, after an exhaustion, a larger one, exactly as an online
//! scheduler would; [`simulate`] replays a trace through one. It knows nothing of where the
//! history is stored.

pub mod admission;
pub mod advice;
pub mod auto;
pub mod best_so_far;
mod bucketing;
pub mod compare;
mod histogram;
pub mod history;
mod low_wastage;
pub mod policy;
mod regression;
pub mod schedule;
pub mod simulate;
mod sizey;
pub mod trace;

use regression::Sample;

pub use simulate::{simulate, Outcome, TaskUse};

/// One resource's sizing parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resource {
    /// Histogram bucket (cctools: 1 core, 250 MB of memory or disk).
    pub bucket: f64,
    /// The whole node: the allocation before history says more, and the last retry.
    pub node: f64,
    /// The bucketing strategies' first value before they have enough points (cctools: cores
    /// 1, memory and disk 1000 MB).
    pub default: f64,
}

impl Resource {
    pub fn memory_mb(node: f64) -> Resource {
        Resource {
            bucket: 250.0,
            node,
            default: 1000.0,
        }
    }

    pub fn disk_mb(node: f64) -> Resource {
        Resource {
            bucket: 250.0,
            node,
            default: 1000.0,
        }
    }

    pub fn cores(node: f64) -> Resource {
        Resource {
            bucket: 1.0,
            node,
            default: 1.0,
        }
    }

    /// `value` rounded up to a whole bucket.
    pub fn round_up(&self, value: f64) -> f64 {
        ((value / self.bucket).ceil() * self.bucket).max(self.bucket)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Always the whole node (or the user's value).
    Fixed,
    /// The largest value seen, plus a third of a bucket, rounded up (cctools MAX).
    MaxSeen,
    /// Tovar et al.: a₁ = argmin a·τ̄ + a_max·T>(a).
    MinWaste,
    /// Tovar et al.: a₁ = argmax [(a_max/a)·P(r≤a) + P(r>a)] / [τ̄ + T>(a)].
    MaxThroughput,
    /// Phung & Thain, greedy bucket splits (det_greedy's cost); the smallest bucket above the
    /// last allocation.
    GreedyBucketing,
    /// Greedy splits with the probabilistic cost, a bucket drawn by its probability (a fixed
    /// seed: replays are exact).
    GreedyBucketingProbabilistic,
    /// Phung & Thain, the best of 1..=10 buckets at fixed delimiters (det_exhaust's cost); the
    /// smallest bucket above the last allocation.
    ExhaustiveBucketing,
    /// The same with the probabilistic cost, a bucket drawn by its probability.
    ExhaustiveBucketingProbabilistic,
    /// Equal-count buckets (cctools' default: one, i.e. the largest value seen), drawn.
    QuantizedBucketing,
    /// Witt et al. (HPCS 2019): a first allocation linear in the input size, fitted to
    /// waste least under doubling retries; a failure doubles the allocation.
    LowWastageRegression,
    /// Bader et al. (CLUSTER 2024): regressors on input size, the most accurate recently
    /// chosen, plus an offset from its errors; a failure gets the largest use seen.
    Sizey,
    /// Per category, the strategy of [`best_so_far::CANDIDATES`] that would have wasted least
    /// on the category's finished tasks.
    BestSoFar,
}

pub const STRATEGIES: &[(&str, Strategy)] = &[
    ("fixed", Strategy::Fixed),
    ("max-seen", Strategy::MaxSeen),
    ("min-waste", Strategy::MinWaste),
    ("max-throughput", Strategy::MaxThroughput),
    ("greedy-bucketing", Strategy::GreedyBucketing),
    (
        "greedy-bucketing-probabilistic",
        Strategy::GreedyBucketingProbabilistic,
    ),
    ("exhaustive-bucketing", Strategy::ExhaustiveBucketing),
    (
        "exhaustive-bucketing-probabilistic",
        Strategy::ExhaustiveBucketingProbabilistic,
    ),
    ("quantized-bucketing", Strategy::QuantizedBucketing),
    ("low-wastage-regression", Strategy::LowWastageRegression),
    ("sizey", Strategy::Sizey),
    ("best-so-far", Strategy::BestSoFar),
];

impl Strategy {
    pub fn parse(name: &str) -> Result<Strategy, String> {
        STRATEGIES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .ok_or_else(|| {
                let known: Vec<&str> = STRATEGIES.iter().map(|(n, _)| *n).collect();
                format!("unknown strategy {name:?} (known: {})", known.join(", "))
            })
    }

    /// The bucketing method of a bucketing strategy.
    fn bucketing(self) -> Option<bucketing::Method> {
        use bucketing::Method;
        Some(match self {
            Strategy::GreedyBucketing => Method::DeterministicGreedy,
            Strategy::GreedyBucketingProbabilistic => Method::Greedy,
            Strategy::ExhaustiveBucketing => Method::DeterministicExhaustive,
            Strategy::ExhaustiveBucketingProbabilistic => Method::Exhaustive,
            Strategy::QuantizedBucketing => Method::Quantized,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        STRATEGIES
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("?", |(n, _)| n)
    }
}

/// Tovar et al. recompute a₁ every 25 completions (cctools `category-steady-n-tasks`).
pub const STEADY_TASKS: usize = 25;

/// What a strategy learns beyond the points every strategy keeps.
enum Model {
    None,
    LowWastage(low_wastage::LowWastage),
    Sizey(Box<sizey::Sizey>),
    BestSoFar(Box<best_so_far::BestSoFar>),
}

/// Online sizing of one resource of one category.
pub struct Sizer {
    strategy: Strategy,
    resource: Resource,
    /// Normally ended runs: (peak used, wall time or 1).
    points: Vec<(f64, f64)>,
    /// The same runs as bucketing points (value, sequence number), sorted by value: the first
    /// `sorted.len()` of `points`, brought up to date when buckets are made ([`Sizer::sort`]).
    sorted: Vec<bucketing::Point>,
    /// Largest value seen, exhausted runs included (it never goes down).
    max_seen: f64,
    first: Option<f64>,
    completions_since_update: usize,
    random: bucketing::Random,
    /// The buckets of the current points (made again after each new point, cctools'
    /// update epoch 1).
    buckets: Option<Vec<bucketing::Bucket>>,
    model: Model,
    /// The input size of the task being sized (its retries need it).
    input: Option<f64>,
    /// For `best-so-far` read from a history: the id of the last row its tally holds.
    tallied_to: Option<i64>,
}

impl Sizer {
    pub fn new(strategy: Strategy, resource: Resource) -> Sizer {
        let model = match strategy {
            Strategy::LowWastageRegression => Model::LowWastage(Default::default()),
            Strategy::Sizey => Model::Sizey(Default::default()),
            Strategy::BestSoFar => {
                Model::BestSoFar(Box::new(best_so_far::BestSoFar::new(resource)))
            }
            _ => Model::None,
        };
        Sizer {
            strategy,
            resource,
            points: Vec::new(),
            sorted: Vec::new(),
            max_seen: 0.0,
            first: None,
            completions_since_update: 0,
            random: bucketing::Random::new(0x5eed),
            buckets: None,
            model,
            input: None,
            tallied_to: None,
        }
    }

    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The allocation of the next run's first attempt, its input size unknown.
    pub fn first_allocation(&mut self) -> f64 {
        self.first_allocation_for(None)
    }

    /// The allocation of the first attempt of a run whose input is `input` bytes (None:
    /// unknown; the input-aware strategies then read it as 0, i.e. as every other unknown).
    pub fn first_allocation_for(&mut self, input: Option<f64>) -> f64 {
        self.input = input;
        let node = self.resource.node;
        let x = input.unwrap_or(0.0);
        // The least a regression may give: a two-hundred-and-fiftieth of a bucket (1 MB).
        let floor = self.resource.bucket / 250.0;
        let value = match (&mut self.model, self.strategy) {
            (Model::LowWastage(m), _) => m.predict(x, node, floor).unwrap_or(node),
            (Model::Sizey(m), _) => match m.predict(x) {
                Some(value) => value.max(floor),
                None => self.max_seen_allocation(),
            },
            (Model::BestSoFar(m), _) => m.sizer().first_allocation_for(input),
            (_, Strategy::Fixed) => node,
            (_, Strategy::MaxSeen) => self.max_seen_allocation(),
            (_, Strategy::MinWaste | Strategy::MaxThroughput) => self.first.unwrap_or(node),
            _ => self.bucketing_allocation(0.0),
        };
        value.min(node)
    }

    /// cctools MAX: the largest value seen plus a third of a bucket, rounded up; the node
    /// before any.
    fn max_seen_allocation(&self) -> f64 {
        if self.points.is_empty() {
            return self.resource.node;
        }
        self.resource
            .round_up(self.max_seen + (self.resource.bucket / 3.0).floor())
    }

    /// The next allocation asked will be a retry of a run of `input` bytes (a Sizer made
    /// afresh for it was not asked the first).
    pub fn retrying(&mut self, input: Option<f64>) {
        self.input = input;
        if let Model::BestSoFar(m) = &mut self.model {
            m.sizer().retrying(input);
        }
    }

    /// The allocation after an attempt at `failed` ran out: always larger, capped by the node.
    pub fn retry_allocation(&mut self, failed: f64) -> f64 {
        let node = self.resource.node;
        let next = match (&mut self.model, self.strategy) {
            // Witt et al.'s exponential failure handling, base 2.
            (Model::LowWastage(_), _) => failed * 2.0,
            (Model::Sizey(m), _) => m.retry(failed, self.input.unwrap_or(0.0)),
            (Model::BestSoFar(m), _) => m.sizer().retry_allocation(failed),
            (_, Strategy::Fixed) => node,
            (_, Strategy::MaxSeen | Strategy::MinWaste | Strategy::MaxThroughput) => {
                // cctools retries at the largest value seen; when that is not above the failed
                // allocation, the whole node.
                let seen = self.resource.round_up(self.max_seen);
                if seen > failed {
                    seen
                } else {
                    node
                }
            }
            _ => self.bucketing_allocation(failed),
        };
        if next > failed {
            next.min(node)
        } else {
            node
        }
    }

    /// A run ended: `used` is its peak, `time` its wall time (1 without times). Runs that ran
    /// out of their allocation (`exhausted`) only raise max-seen.
    pub fn record(&mut self, used: f64, time: f64, exhausted: bool) {
        self.record_task(used, time, exhausted, None);
    }

    /// [`Sizer::record`] of a run whose input was `input` bytes (None: unknown).
    pub fn record_task(&mut self, used: f64, time: f64, exhausted: bool, input: Option<f64>) {
        match &mut self.model {
            Model::BestSoFar(m) if exhausted => m.exhausted(used, time),
            Model::BestSoFar(m) => m.finished(used, time, input),
            Model::Sizey(m) if !exhausted => m.record(sample(used, time, input)),
            Model::LowWastage(m) if !exhausted => m.record(sample(used, time, input)),
            _ => {}
        }
        self.record_points(used, time, exhausted);
    }

    /// [`Sizer::record_task`] of a run whose sizing is known already: `best-so-far` does not
    /// replay it through its candidates (its tallies hold it), and Sizey measures its
    /// regressors' errors only on `recent` runs (its last [`sizey::WINDOW`]; the others' errors
    /// would be dropped, and each costs a prediction over every run before it).
    pub fn learn(
        &mut self,
        used: f64,
        time: f64,
        exhausted: bool,
        input: Option<f64>,
        recent: bool,
    ) {
        match &mut self.model {
            Model::BestSoFar(m) => m.learn(used, time, exhausted, input, recent),
            Model::Sizey(m) if !exhausted && recent => m.record(sample(used, time, input)),
            Model::Sizey(m) if !exhausted => m.record_untracked(sample(used, time, input)),
            Model::LowWastage(m) if !exhausted => m.learn(sample(used, time, input)),
            _ => {}
        }
        self.record_points(used, time, exhausted);
    }

    /// What every strategy keeps of a run: max-seen, and the points of normally ended ones.
    fn record_points(&mut self, used: f64, time: f64, exhausted: bool) {
        self.max_seen = self.max_seen.max(used);
        if exhausted {
            return;
        }
        self.points.push((used, time));
        self.buckets = None;
        self.completions_since_update += 1;
        let histogram = matches!(self.strategy, Strategy::MinWaste | Strategy::MaxThroughput);
        if histogram && self.completions_since_update >= STEADY_TASKS {
            self.completions_since_update = 0;
            let h = histogram::Histogram::new(&self.points, &self.resource);
            self.first = Some(match self.strategy {
                Strategy::MinWaste => h.min_waste(),
                _ => h.max_throughput(),
            });
        }
    }

    /// Points recorded so far (normally ended runs).
    pub fn points(&self) -> usize {
        self.points.len()
    }

    /// For `best-so-far`: its tallies, the last row replayed being `last_id`.
    pub fn tally(&self, last_id: i64) -> Option<best_so_far::Tally> {
        match &self.model {
            Model::BestSoFar(m) => Some(m.tally(last_id)),
            _ => None,
        }
    }

    /// For `best-so-far` read from a history ([`sizer_from_history`]): the id of the last row
    /// its tally holds (None: it holds none).
    pub fn tallied_to(&self) -> Option<i64> {
        self.tallied_to
    }

    /// For `best-so-far`: the strategy in charge of the category and why.
    pub fn choice(&self) -> Option<best_so_far::Choice> {
        match &self.model {
            Model::BestSoFar(m) => Some(m.choice()),
            _ => None,
        }
    }

    /// For low-wastage regression: its line and the tasks recorded since it was trained.
    fn line_state(&self) -> Option<(regression::Line, usize)> {
        match &self.model {
            Model::LowWastage(m) => m.state(),
            _ => None,
        }
    }

    /// For low-wastage regression: take up a line an earlier decision trained.
    fn resume_line(&mut self, line: regression::Line, since_training: usize) {
        if let Model::LowWastage(m) = &mut self.model {
            m.resume(line, since_training);
        }
    }

    /// Whether the strategy is still in its warm-up (the node, or bucketing's sampling
    /// default), rather than answering from the history.
    pub fn warming_up(&self) -> bool {
        match (&self.model, self.strategy) {
            (Model::LowWastage(m), _) => m.samples() == 0,
            (Model::Sizey(m), _) => m.samples() < sizey::MIN_SAMPLES,
            (Model::BestSoFar(m), _) => m.chosen_sizer().warming_up(),
            (_, Strategy::Fixed) => true,
            (_, Strategy::MaxSeen) => self.points.is_empty(),
            (_, Strategy::MinWaste | Strategy::MaxThroughput) => self.first.is_none(),
            _ => self.points.len() < bucketing::SAMPLING_POINTS,
        }
    }

    /// Bring `sorted` up to date: a few new points are inserted (a simulation asks after each
    /// task), many are sorted at once (sizing from a history replays thousands, and inserting
    /// each moved the whole vector: quadratic).
    fn sort(&mut self) {
        let known = self.sorted.len();
        let new = self.points.len() - known;
        if new == 0 {
            return;
        }
        let point = |(index, &(used, _)): (usize, &(f64, f64))| (used, (index + 1) as f64);
        if new * 8 <= known {
            for (index, used) in self.points.iter().enumerate().skip(known) {
                bucketing::insert(&mut self.sorted, point((index, used)));
            }
            return;
        }
        self.sorted = self.points.iter().enumerate().map(point).collect();
        // By value; among equal values the newest first, as `bucketing::insert` puts them.
        self.sorted
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    }

    fn bucketing_allocation(&mut self, previous: f64) -> f64 {
        let default = self.resource.default;
        if self.points.len() < bucketing::SAMPLING_POINTS {
            return bucketing::grow(default, previous);
        }
        let Some(method) = self.strategy.bucketing() else {
            return self.resource.node;
        };
        self.sort();
        let sorted = &self.sorted;
        let buckets = self.buckets.get_or_insert_with(|| method.buckets(sorted));
        if method.deterministic() {
            bucketing::smallest_above(buckets, previous)
        } else {
            bucketing::draw_above(buckets, previous, &mut self.random)
        }
        // Above the top bucket: grow as in the sampling phase.
        .unwrap_or_else(|| bucketing::grow(default, previous.max(bucketing::top(buckets))))
    }
}

fn sample(used: f64, time: f64, input: Option<f64>) -> Sample {
    Sample {
        input: input.unwrap_or(0.0),
        used,
        time,
    }
}

/// A Sizer that has seen `rows` (in order, with their input sizes): normally ended runs as
/// points, runs killed for this resource as exhausted (raising max-seen only). `value` reads
/// the resource of a row. For `best-so-far`, `tally` holds the replay of the rows up to its
/// `last_id` (made against the same node): only the rows after it are replayed, at most
/// `replay_at_most` of them; the others are learnt without being replayed, and
/// [`Sizer::tallied_to`] says where the replay stopped, for the next decision to go on from.
pub fn sizer_from_history(
    rows: &[history::Row],
    strategy: Strategy,
    resource: Resource,
    name: &str,
    value: impl Fn(&history::Row) -> Option<f64>,
    tally: Option<&best_so_far::Tally>,
    replay_at_most: usize,
) -> Sizer {
    let mut sizer = Sizer::new(strategy, resource);
    let best_so_far = matches!(sizer.model, Model::BestSoFar(_));
    let tallied = match (&mut sizer.model, tally) {
        (Model::BestSoFar(m), Some(tally)) => match m.resume(tally) {
            true => Some(tally.last_id),
            false => None,
        },
        _ => None,
    };
    sizer.tallied_to = tallied;
    let mut replayed = 0;
    // Sizey weighs the errors of the last runs before each it sizes: those before the first
    // run replayed, and the window's last (before the next decision).
    let first_new = (rows.iter())
        .position(|r| tallied.is_none_or(|last| r.id > last))
        .unwrap_or(rows.len());
    let last_few = |index: usize| index < first_new && index + sizey::WINDOW >= first_new;
    let recent = rows.len().saturating_sub(sizey::WINDOW);
    for (index, row) in rows.iter().enumerate() {
        let Some((used, time, exhausted)) = row_use(row, name, &value) else {
            continue;
        };
        let known = if best_so_far {
            tallied.is_some_and(|last| row.id <= last) || replayed >= replay_at_most
        } else {
            index < recent
        };
        if known {
            let weighed = index >= recent || (best_so_far && last_few(index));
            sizer.learn(used, time, exhausted, row.input_bytes, weighed);
        } else {
            sizer.record_task(used, time, exhausted, row.input_bytes);
            replayed += 1;
            sizer.tallied_to = Some(row.id).filter(|_| best_so_far);
        }
    }
    sizer
}

/// What `row` says of the resource `value` reads: its use, its weight (wall time, or 1 without,
/// as in `simulate`) and whether it ran out of it (`name`); None for a run that ended otherwise
/// (it says nothing of its need) or did not measure the resource.
fn row_use(
    row: &history::Row,
    name: &str,
    value: impl Fn(&history::Row) -> Option<f64>,
) -> Option<(f64, f64, bool)> {
    let used = value(row)?;
    let time = if row.wall_time > 0.0 {
        row.wall_time
    } else {
        1.0
    };
    let exhausted = if history::ended_normally(row) {
        false
    } else if row.exceeded.split(',').any(|r| r == name) {
        true
    } else {
        return None;
    };
    Some((used, time, exhausted))
}

/// The strategy `--auto` and `lfm size` use unless told otherwise (docs/sizing.md).
pub const DEFAULT_STRATEGY: Strategy = Strategy::BestSoFar;

/// This machine's memory in MiB (the whole node of a memory allocation).
pub fn node_memory_mb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(1024.0, |kib| kib / 1024.0)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_input;
