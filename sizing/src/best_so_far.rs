//! `best-so-far`: per category, the strategy that would have served the category's own
//! finished tasks best. Every candidate strategy sizes each finished task as if it had been in
//! charge from the start (its first allocation before knowing the task, then its own retries
//! until the task fits, each failed attempt counted in full, all weighted by wall time), and
//! the next task is sized by the candidate with the least allocation so far (for the same
//! tasks, least allocation is least waste), unless that one retried more than one task in
//! twenty and another that did not costs little more ([`RETRIED_SHARE`], [`RETRY_AVOIDANCE`]).
//! So a high-throughput category whose use does not follow its input keeps bucketing, and one
//! whose memory grows with its input is sized by a regression, each decided online from
//! nothing but its own history. The tallies are kept as tasks finish (each finished task
//! is sized once by every candidate), so choosing costs one comparison per candidate. This is online model selection
//! by replay, in the spirit of the per-category choice of Tovar et al.'s archive; it is lfm's
//! own, not from one paper.

use super::regression::Line;
use super::{Resource, Sizer, Strategy};

/// The strategies `best-so-far` chooses among, in order of preference on a tie (before any
/// task, every candidate has cost nothing: the first is used). Quantized bucketing (after
/// sampling, the largest value seen, unpadded) is the one that seldom retries without
/// max-seen's rounding to 250 MB: categories of tiny tasks (a few MB, thousands of them on
/// nfcore_sizey) were otherwise left to bucketing's one retry in five.
pub const CANDIDATES: [Strategy; 5] = [
    Strategy::GreedyBucketing,
    Strategy::MaxSeen,
    Strategy::QuantizedBucketing,
    Strategy::LowWastageRegression,
    Strategy::Sizey,
];

struct Candidate {
    sizer: Sizer,
    /// Allocation × time this candidate would have spent on the tasks so far.
    allocated: f64,
    /// Tasks it would have retried.
    retried: usize,
}

/// Why a category is sized as it is: the candidate in charge and each candidate's replayed
/// cost (allocation × time, and the same as waste in percent of it).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Choice {
    pub strategy: &'static str,
    pub tasks: usize,
    pub candidates: Vec<CandidateCost>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CandidateCost {
    pub strategy: &'static str,
    pub allocated: f64,
    pub waste_percent: f64,
    /// Of the tasks replayed, the share it would have retried.
    pub retried_percent: f64,
}

/// The share of its tasks a candidate may have retried and still be chosen.
pub const RETRIED_SHARE: f64 = 0.05;
/// How much more allocation a candidate within [`RETRIED_SHARE`] may cost and be preferred to
/// the cheapest.
pub const RETRY_AVOIDANCE: f64 = 1.25;

/// Runs a decision replays through the candidates at most (each is sized by all five, over a
/// window of up to 1,000 runs). A category's first decision, or one after its tally was lost,
/// replays its window's oldest runs this many at a time, one batch per decision, the others
/// only learnt: its cost stays that of a few runs, and the tally catches up with the window
/// over the next decisions (in the steady state a decision has one run to replay).
pub const REPLAY_PER_DECISION: usize = 16;

/// What `best-so-far` has replayed of a category, kept between decisions (in the history's
/// `sizing_tallies` table) so that a decision replays only the runs since the last one.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tally {
    /// The node the replay allocated against: a tally of a node over twice as large or small is
    /// not resumed.
    pub node: f64,
    /// The id of the last history row replayed.
    pub last_id: i64,
    pub tasks: usize,
    /// Use × time of the tasks replayed.
    pub used: f64,
    /// Each candidate's name, allocation × time and tasks retried.
    pub candidates: Vec<(String, f64, usize)>,
    /// Low-wastage regression's line and the tasks replayed since it was trained: resumed, a
    /// decision retrains it only when one replay of every run would (a training searches
    /// lines over the whole window, the costliest part of sizing a run). Absent in tallies
    /// saved before it: the line is then trained afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_wastage: Option<(Line, usize)>,
}

pub struct BestSoFar {
    candidates: Vec<Candidate>,
    node: f64,
    /// Use × time of the tasks replayed (the same for every candidate).
    used: f64,
    tasks: usize,
    /// Runs learnt ([`BestSoFar::learn`]) by the candidate in charge only, and which one that
    /// is: the others learn them when they are next asked to size a task. A decision whose
    /// tallies hold every run then trains one strategy, not five.
    backlog: Vec<Learnt>,
    learnt_by: Option<usize>,
}

/// A run already in the tallies, as [`BestSoFar::learn`] is given it.
#[derive(Clone, Copy)]
struct Learnt {
    used: f64,
    time: f64,
    exhausted: bool,
    input: Option<f64>,
    recent: bool,
}

impl Learnt {
    fn teach(&self, sizer: &mut Sizer) {
        sizer.learn(
            self.used,
            self.time,
            self.exhausted,
            self.input,
            self.recent,
        );
    }
}

impl BestSoFar {
    pub fn new(resource: Resource) -> BestSoFar {
        BestSoFar {
            candidates: CANDIDATES
                .iter()
                .map(|&s| Candidate {
                    sizer: Sizer::new(s, resource),
                    allocated: 0.0,
                    retried: 0,
                })
                .collect(),
            node: resource.node,
            used: 0.0,
            tasks: 0,
            backlog: Vec::new(),
            learnt_by: None,
        }
    }

    /// The candidate in charge: the least allocated so far (the earliest on a tie), unless it
    /// would have retried more than [`RETRIED_SHARE`] of the tasks and one that would not
    /// costs at most [`RETRY_AVOIDANCE`] times as much: then the least allocated of those.
    /// Least waste alone picked regressions that retried one task in seven on nfcore_sizey
    /// (a retry runs a task twice, which waste weighs no more than its failed allocation);
    /// avoiding retries at any price gave bioblast's Split tasks, whose retries at small
    /// allocations cost nearly nothing, 44% waste instead of 1%.
    fn chosen(&self) -> usize {
        let allowed = (RETRIED_SHARE * self.tasks as f64).max(1.0);
        let least = |pick: &dyn Fn(&Candidate) -> bool| {
            let mut best: Option<usize> = None;
            for (i, c) in self.candidates.iter().enumerate() {
                let better = best.is_none_or(|b| c.allocated < self.candidates[b].allocated);
                if pick(c) && better {
                    best = Some(i);
                }
            }
            best
        };
        let cheapest = least(&|_| true).unwrap_or(0);
        let limit = self.candidates[cheapest].allocated * RETRY_AVOIDANCE;
        if self.candidates[cheapest].retried as f64 <= allowed {
            return cheapest;
        }
        least(&|c| c.retried as f64 <= allowed && c.allocated <= limit).unwrap_or(cheapest)
    }

    pub fn sizer(&mut self) -> &mut Sizer {
        let i = self.chosen();
        &mut self.candidates[i].sizer
    }

    /// The candidate in charge, to read.
    pub fn chosen_sizer(&self) -> &Sizer {
        &self.candidates[self.chosen()].sizer
    }

    /// Tasks replayed so far.
    pub fn points(&self) -> usize {
        self.tasks
    }

    pub fn strategy(&self) -> Strategy {
        self.candidates[self.chosen()].sizer.strategy
    }

    /// The tallies so far, the last replayed row being `last_id`.
    pub fn tally(&self, last_id: i64) -> Tally {
        Tally {
            node: self.node,
            last_id,
            tasks: self.tasks,
            used: self.used,
            candidates: self
                .candidates
                .iter()
                .map(|c| (c.sizer.strategy.name().to_string(), c.allocated, c.retried))
                .collect(),
            low_wastage: self.candidates.iter().find_map(|c| c.sizer.line_state()),
        }
    }

    /// Take up `tally`'s counts, if it was made by these candidates against about this node:
    /// within a factor of two, for a disk's node is the space left on its filesystem, which
    /// moves between any two decisions, while a serve's `--node-memory` far below the
    /// machine's changes what every candidate's first allocation costs.
    pub fn resume(&mut self, tally: &Tally) -> bool {
        let ratio = tally.node / self.node;
        let same = (0.5..=2.0).contains(&ratio)
            && tally.candidates.len() == self.candidates.len()
            && (tally.candidates.iter())
                .zip(&self.candidates)
                .all(|(t, c)| t.0 == c.sizer.strategy.name());
        if same {
            for (c, t) in self.candidates.iter_mut().zip(&tally.candidates) {
                (c.allocated, c.retried) = (t.1, t.2);
            }
            (self.tasks, self.used) = (tally.tasks, tally.used);
            if let Some((line, since)) = tally.low_wastage {
                self.candidates
                    .iter_mut()
                    .for_each(|c| c.sizer.resume_line(line, since));
            }
        }
        same
    }

    /// A run already in the tallies: the candidate in charge learns it without sizing it
    /// again, the others when they next size a task ([`BestSoFar::catch_up`]).
    /// `recent`: it is among the last few, whose errors Sizey weighs.
    pub fn learn(
        &mut self,
        used: f64,
        time: f64,
        exhausted: bool,
        input: Option<f64>,
        recent: bool,
    ) {
        let chosen = self.chosen();
        if self.learnt_by.is_some_and(|by| by != chosen) {
            self.catch_up();
        }
        let run = Learnt {
            used,
            time,
            exhausted,
            input,
            recent,
        };
        run.teach(&mut self.candidates[chosen].sizer);
        self.backlog.push(run);
        self.learnt_by = Some(chosen);
    }

    /// Every candidate learns the runs only the one in charge has learnt, in their order.
    fn catch_up(&mut self) {
        let Some(by) = self.learnt_by.take() else {
            return;
        };
        for (i, c) in self.candidates.iter_mut().enumerate() {
            if i != by {
                self.backlog.iter().for_each(|run| run.teach(&mut c.sizer));
            }
        }
        self.backlog.clear();
    }

    /// A run ran out at `allocation`: every candidate learns the lower bound.
    pub fn exhausted(&mut self, allocation: f64, time: f64) {
        self.catch_up();
        for c in &mut self.candidates {
            c.sizer.record_task(allocation, time, true, None);
        }
    }

    /// A task of `input` ended normally having used `used` for `time`: each candidate sizes
    /// it as it would have, retries included, then learns it.
    pub fn finished(&mut self, used: f64, time: f64, input: Option<f64>) {
        self.catch_up();
        let node = self.node;
        for c in &mut self.candidates {
            let mut allocation = c.sizer.first_allocation_for(input);
            c.retried += usize::from(used > allocation && allocation < node);
            while used > allocation && allocation < node {
                c.allocated += allocation * time;
                c.sizer.record_task(allocation, time, true, input);
                allocation = c.sizer.retry_allocation(allocation);
            }
            c.allocated += allocation * time;
            c.sizer.record_task(used, time, false, input);
        }
        self.used += used.min(node) * time;
        self.tasks += 1;
    }

    pub fn choice(&self) -> Choice {
        let percent = |allocated: f64| {
            if allocated > 0.0 {
                100.0 * (allocated - self.used) / allocated
            } else {
                0.0
            }
        };
        Choice {
            strategy: self.strategy().name(),
            tasks: self.tasks,
            candidates: self
                .candidates
                .iter()
                .map(|c| CandidateCost {
                    strategy: c.sizer.strategy.name(),
                    allocated: c.allocated,
                    waste_percent: percent(c.allocated),
                    retried_percent: 100.0 * c.retried as f64 / self.tasks.max(1) as f64,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BestSoFar over `tasks` tasks whose candidates (in [`CANDIDATES`] order) allocated and
    /// retried as given.
    fn tallies(tasks: usize, costs: &[(f64, usize)]) -> BestSoFar {
        let mut best = BestSoFar::new(Resource::memory_mb(16_000.0));
        best.tasks = tasks;
        for (c, &(allocated, retried)) in best.candidates.iter_mut().zip(costs) {
            c.allocated = allocated;
            c.retried = retried;
        }
        best
    }

    #[test]
    fn the_least_allocated_is_chosen_unless_it_retried_often_and_another_costs_little_more() {
        let name = |b: &BestSoFar| b.strategy().name();
        // 100 tasks: 5 retries are allowed. The cheapest (max-seen, 900) retried 5: chosen.
        let costs = [(1000.0, 0), (900.0, 5), (950.0, 0), (980.0, 1), (990.0, 2)];
        assert_eq!(name(&tallies(100, &costs)), "max-seen");
        // It retried 6: the cheapest of those within 5 and 1.25 × 900 = 1125, quantized.
        let costs = [(1000.0, 0), (900.0, 6), (950.0, 0), (980.0, 1), (990.0, 2)];
        assert_eq!(name(&tallies(100, &costs)), "quantized-bucketing");
        // Those that retried little all cost more than 1125: the cheapest stays.
        let costs = [
            (1200.0, 0),
            (900.0, 30),
            (1130.0, 0),
            (980.0, 9),
            (990.0, 20),
        ];
        assert_eq!(name(&tallies(100, &costs)), "max-seen");
        // On a tie the earlier candidate; before any task, greedy bucketing.
        let costs = [(900.0, 0), (900.0, 0), (950.0, 0), (980.0, 0), (990.0, 0)];
        assert_eq!(name(&tallies(100, &costs)), "greedy-bucketing");
        assert_eq!(name(&tallies(0, &[])), "greedy-bucketing");
        // With few tasks one retry is always allowed (5% of 10 is half a task).
        let costs = [
            (1000.0, 1),
            (1100.0, 0),
            (1100.0, 0),
            (1100.0, 0),
            (1100.0, 0),
        ];
        assert_eq!(name(&tallies(10, &costs)), "greedy-bucketing");
    }

    #[test]
    fn a_finished_task_is_sized_by_every_candidate_as_if_it_had_been_in_charge() {
        let mut best = BestSoFar::new(Resource::memory_mb(16_000.0));
        // The first task: greedy gives its sampling default 1000 (fits 600), max-seen and
        // the regressions the node (no history), quantized its default 1000.
        best.finished(600.0, 2.0, Some(1e6));
        let allocated: Vec<f64> = best.candidates.iter().map(|c| c.allocated).collect();
        assert_eq!(allocated, [2000.0, 32_000.0, 2000.0, 32_000.0, 32_000.0]);
        // The second, 1500: greedy and quantized fail at 1000 (2000 lost) and retry at 2000
        // (4000); max-seen gives 600 + 83 rounded up to 750, fails, retries at the largest
        // seen rounded up (750 is not above 750: the node).
        best.finished(1500.0, 2.0, Some(1e6));
        let retried: Vec<usize> = best.candidates.iter().map(|c| c.retried).collect();
        assert_eq!(retried[..3], [1, 1, 1]);
        assert_eq!(best.candidates[0].allocated, 2000.0 + 2000.0 + 4000.0);
        assert_eq!(best.candidates[1].allocated, 32_000.0 + 1500.0 + 32_000.0);
        assert_eq!(best.used, (600.0 + 1500.0) * 2.0);
    }

    #[test]
    fn runs_only_the_candidate_in_charge_learnt_are_caught_up_before_a_task_is_sized() {
        let node = Resource::memory_mb(16_000.0);
        let tasks: Vec<(f64, Option<f64>)> = (0..260)
            .map(|i| {
                (
                    200.0 + (i * 37 % 101) as f64 * 10.0,
                    Some((i % 13) as f64 * 1e6),
                )
            })
            .collect();
        let mut replay = BestSoFar::new(node);
        tasks[..200]
            .iter()
            .for_each(|&(used, input)| replay.finished(used, 1.0, input));
        let tally = replay.tally(200);
        // A decision resuming from the tally of the first 200 tasks, learning them lazily or
        // every candidate at once, then sizing the 60 since.
        let resumed = |eager: bool| {
            let mut best = BestSoFar::new(node);
            assert!(best.resume(&tally));
            for (i, &(used, input)) in tasks[..200].iter().enumerate() {
                best.learn(used, 1.0, false, input, i >= 200 - crate::sizey::WINDOW);
                if eager {
                    best.catch_up();
                }
            }
            let first = best.sizer().first_allocation_for(Some(3e6));
            tasks[200..]
                .iter()
                .for_each(|&(used, input)| best.finished(used, 1.0, input));
            (first, best)
        };
        let ((lazy_first, mut lazy), (eager_first, mut eager)) = (resumed(false), resumed(true));
        assert_eq!(lazy_first, eager_first);
        assert_eq!(lazy.tally(260), eager.tally(260));
        assert_eq!(
            lazy.sizer().first_allocation_for(Some(3e6)),
            eager.sizer().first_allocation_for(Some(3e6))
        );
        // And both are what one replay of all 260 gives.
        tasks[200..]
            .iter()
            .for_each(|&(used, input)| replay.finished(used, 1.0, input));
        assert_eq!(lazy.tally(260), replay.tally(260));
    }
}
