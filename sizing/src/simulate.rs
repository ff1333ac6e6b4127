//! Replaying a trace through a strategy, in arrival order, as `--auto` would decide online.

use super::{Resource, Sizer, Strategy};

/// One task of a trace: the peak it used of the resource, its wall time and its input size
/// (bytes), if known. The input is known before the task runs: strategies may size from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskUse {
    pub used: f64,
    pub time: Option<f64>,
    pub input: Option<f64>,
}

/// What a strategy cost on a trace. Allocation and use are weighted by each attempt's wall
/// time (by 1 per attempt when the trace has no times); a failed attempt's whole allocation
/// counts as allocated, its use as nothing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    pub strategy: String,
    pub tasks: usize,
    pub retries: usize,
    pub retried_tasks: usize,
    pub allocated: f64,
    pub used: f64,
    /// (allocated − used) / allocated, in percent.
    pub waste_percent: f64,
    /// Retried tasks over tasks, in percent.
    pub retry_percent: f64,
    /// Tasks per node-time unit, if each node ran allocations packed side by side.
    pub throughput: f64,
}

pub fn simulate(tasks: &[TaskUse], strategy: Strategy, resource: Resource) -> Outcome {
    replay(tasks, strategy, resource).0
}

/// [`simulate`], and each task's first allocation (what the strategy decided before knowing
/// the task; a retry followed where it is below the task's use).
pub fn replay(tasks: &[TaskUse], strategy: Strategy, resource: Resource) -> (Outcome, Vec<f64>) {
    let mut sizer = Sizer::new(strategy, resource);
    let mut totals = Totals::default();
    let mut firsts = Vec::with_capacity(tasks.len());
    for task in tasks {
        let weight = task.time.filter(|t| *t > 0.0).unwrap_or(1.0);
        let mut allocation = sizer.first_allocation_for(task.input);
        firsts.push(allocation);
        let mut retried = false;
        // A task larger than the node is given the node: it cannot be given more.
        while task.used > allocation && allocation < resource.node {
            totals.allocated += allocation * weight;
            totals.retries += 1;
            retried = true;
            sizer.record_task(allocation, weight, true, task.input);
            allocation = sizer.retry_allocation(allocation);
        }
        totals.allocated += allocation * weight;
        totals.used += task.used.min(allocation) * weight;
        totals.retried_tasks += usize::from(retried);
        sizer.record_task(task.used, weight, false, task.input);
    }
    (
        totals.outcome(strategy.name(), tasks.len(), resource.node),
        firsts,
    )
}

/// Every task given exactly its peak, the first time: the lower bound of any strategy.
pub fn oracle(tasks: &[TaskUse], resource: Resource) -> Outcome {
    let mut totals = Totals::default();
    for task in tasks {
        let weight = task.time.filter(|t| *t > 0.0).unwrap_or(1.0);
        totals.allocated += task.used.min(resource.node) * weight;
        totals.used += task.used.min(resource.node) * weight;
    }
    totals.outcome("oracle", tasks.len(), resource.node)
}

/// Distinct values beyond which [`best_ladder`] (quadratic in them) is not computed.
pub const LADDER_VALUES: usize = 5000;

/// The cheapest fixed ladder of allocations l₁ < l₂ < … < the largest use (each task tried at
/// l₁, then l₂, … until one fits), chosen knowing the whole trace: what the best static
/// bucketing could reach. Adaptive strategies may beat it only where use drifts over time.
/// None when the trace has more than [`LADDER_VALUES`] distinct values.
pub fn best_ladder(tasks: &[TaskUse], resource: Resource) -> Option<Outcome> {
    let ladder = ladder_levels(tasks, resource.node)?;
    let mut totals = Totals::default();
    for task in tasks {
        let weight = task.time.filter(|t| *t > 0.0).unwrap_or(1.0);
        let used = task.used.min(resource.node);
        let fails = ladder.iter().take_while(|&&level| level < used).count();
        totals.allocated += ladder[..=fails].iter().sum::<f64>() * weight;
        totals.used += used * weight;
        totals.retries += fails;
        totals.retried_tasks += usize::from(fails > 0);
    }
    Some(totals.outcome("best-ladder", tasks.len(), resource.node))
}

/// The levels of [`best_ladder`]. A ladder's cost is Σᵢ lᵢ·W(> lᵢ₋₁), W the weight of the
/// tasks above a value, so the cheapest ladder ending at each distinct value follows from
/// those ending below it (dynamic programming over the sorted distinct values).
fn ladder_levels(tasks: &[TaskUse], node: f64) -> Option<Vec<f64>> {
    let mut weighted: Vec<(f64, f64)> = tasks
        .iter()
        .map(|t| (t.used.min(node), t.time.filter(|t| *t > 0.0).unwrap_or(1.0)))
        .collect();
    weighted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut values: Vec<(f64, f64)> = Vec::new(); // (value, weight of tasks above it)
    let total: f64 = weighted.iter().map(|w| w.1).sum();
    let mut at_most = 0.0;
    for (value, weight) in weighted {
        at_most += weight;
        match values.last_mut() {
            Some(last) if last.0 == value => last.1 = total - at_most,
            _ => values.push((value, total - at_most)),
        }
    }
    if values.is_empty() || values.len() > LADDER_VALUES {
        return None;
    }
    // best[i]: (cost of the cheapest ladder whose top is values[i], the level below it).
    let mut best: Vec<(f64, Option<usize>)> = Vec::with_capacity(values.len());
    for i in 0..values.len() {
        let mut cell = (values[i].0 * total, None);
        for (p, &(cost, _)) in best.iter().enumerate() {
            let c = cost + values[i].0 * values[p].1;
            if c < cell.0 {
                cell = (c, Some(p));
            }
        }
        best.push(cell);
    }
    let mut levels = vec![];
    let mut at = Some(values.len() - 1);
    while let Some(i) = at {
        levels.push(values[i].0);
        at = best[i].1;
    }
    levels.reverse();
    Some(levels)
}

#[derive(Default)]
struct Totals {
    allocated: f64,
    used: f64,
    retries: usize,
    retried_tasks: usize,
}

impl Totals {
    fn outcome(self, name: &str, tasks: usize, node: f64) -> Outcome {
        let percent = |part: f64, whole: f64| {
            if whole > 0.0 {
                100.0 * part / whole
            } else {
                0.0
            }
        };
        Outcome {
            strategy: name.to_string(),
            tasks,
            retries: self.retries,
            retried_tasks: self.retried_tasks,
            waste_percent: percent(self.allocated - self.used, self.allocated),
            retry_percent: percent(self.retried_tasks as f64, tasks as f64),
            throughput: if self.allocated > 0.0 {
                tasks as f64 * node / self.allocated
            } else {
                0.0
            },
            allocated: self.allocated,
            used: self.used,
        }
    }
}

/// Outcomes of separate categories (each sized on its own), added up.
pub fn combine(name: &str, parts: &[Outcome], node: f64) -> Outcome {
    let totals = Totals {
        allocated: parts.iter().map(|o| o.allocated).sum(),
        used: parts.iter().map(|o| o.used).sum(),
        retries: parts.iter().map(|o| o.retries).sum(),
        retried_tasks: parts.iter().map(|o| o.retried_tasks).sum(),
    };
    totals.outcome(name, parts.iter().map(|o| o.tasks).sum(), node)
}
