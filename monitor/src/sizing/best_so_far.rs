//! `best-so-far`: per category, the strategy that would have wasted least on the category's
//! own finished tasks. Every candidate strategy sizes each finished task as if it had been in
//! charge from the start (its first allocation before knowing the task, then its own retries
//! until the task fits, each failed attempt counted in full, all weighted by wall time), and
//! the next task is sized by the candidate with the least allocation so far (for the same
//! tasks, least allocation is least waste). So a high-throughput category whose use does not
//! follow its input keeps bucketing, and one whose memory grows with its input is sized by a
//! regression, each decided online from nothing but its own history. This is online model
//! selection by replay, in the spirit of the per-category choice of Tovar et al.'s archive;
//! it is lfm's own, not from one paper.

use super::{Resource, Sizer, Strategy};

/// The strategies `best-so-far` chooses among, in order of preference on a tie (before any
/// task, every candidate has cost nothing: the first is used).
pub const CANDIDATES: [Strategy; 4] = [
    Strategy::GreedyBucketing,
    Strategy::MaxSeen,
    Strategy::LowWastageRegression,
    Strategy::Sizey,
];

struct Candidate {
    sizer: Sizer,
    /// Allocation × time this candidate would have spent on the tasks so far.
    allocated: f64,
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
}

pub struct BestSoFar {
    candidates: Vec<Candidate>,
    node: f64,
    /// Use × time of the tasks replayed (the same for every candidate).
    used: f64,
    tasks: usize,
}

impl BestSoFar {
    pub fn new(resource: Resource) -> BestSoFar {
        BestSoFar {
            candidates: CANDIDATES
                .iter()
                .map(|&s| Candidate {
                    sizer: Sizer::new(s, resource),
                    allocated: 0.0,
                })
                .collect(),
            node: resource.node,
            used: 0.0,
            tasks: 0,
        }
    }

    /// The candidate in charge: the least allocated so far, the earliest on a tie.
    fn chosen(&self) -> usize {
        let mut best = 0;
        for (i, c) in self.candidates.iter().enumerate() {
            if c.allocated < self.candidates[best].allocated {
                best = i;
            }
        }
        best
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

    /// A run ran out at `allocation`: every candidate learns the lower bound.
    pub fn exhausted(&mut self, allocation: f64, time: f64) {
        for c in &mut self.candidates {
            c.sizer.record_task(allocation, time, true, None);
        }
    }

    /// A task of `input` ended normally having used `used` for `time`: each candidate sizes
    /// it as it would have, retries included, then learns it.
    pub fn finished(&mut self, used: f64, time: f64, input: Option<f64>) {
        let node = self.node;
        for c in &mut self.candidates {
            let mut allocation = c.sizer.first_allocation_for(input);
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
                })
                .collect(),
        }
    }
}
