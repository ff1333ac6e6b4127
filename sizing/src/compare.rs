//! `lfm simulate`: one resource of a trace replayed through strategies, each category sized on
//! its own, next to the references: the oracle (each task given exactly its peak), the best
//! ladder in hindsight, and the whole node.

use super::simulate::{best_ladder, combine, oracle, replay, Outcome};
use super::trace::Trace;
use super::{simulate, Resource, Strategy, TaskUse};

/// What the replay of one resource found, in the trace's row order where per task.
pub struct Comparison {
    pub resource: Resource,
    /// Each row's use.
    pub uses: Vec<f64>,
    /// (strategy, its first allocation of every row).
    pub firsts: Vec<(String, Vec<f64>)>,
    /// Every strategy's outcome, then the references'.
    pub outcomes: Vec<Outcome>,
}

pub fn compare(trace: &Trace, name: &str, strategies: &[Strategy]) -> Result<Comparison, String> {
    let categories = trace.tasks(name)?;
    let largest = categories
        .iter()
        .flat_map(|(_, t)| t.iter().map(|t| t.used))
        .fold(0.0, f64::max);
    let resource = node_of(name, largest);
    let positions = positions(trace);
    let mut uses = vec![0.0; trace.rows.len()];
    for ((_, tasks), at) in categories.iter().zip(&positions) {
        for (task, &i) in tasks.iter().zip(at) {
            uses[i] = task.used;
        }
    }
    let mut outcomes = Vec::new();
    let mut firsts = Vec::new();
    for &strategy in strategies {
        let mut parts = Vec::new();
        let mut first = vec![0.0; trace.rows.len()];
        for ((_, tasks), at) in categories.iter().zip(&positions) {
            let (outcome, allocations) = replay(tasks, strategy, resource);
            parts.push(outcome);
            for (allocation, &i) in allocations.into_iter().zip(at) {
                first[i] = allocation;
            }
        }
        outcomes.push(combine(strategy.name(), &parts, resource.node));
        firsts.push((strategy.name().to_string(), first));
    }
    outcomes.extend(references(&categories, resource, strategies));
    Ok(Comparison {
        resource,
        uses,
        firsts,
        outcomes,
    })
}

/// The whole node of a resource in a trace: its largest value, rounded up to a bucket.
fn node_of(name: &str, largest: f64) -> Resource {
    match name {
        "cores" | "gpus" => Resource::cores(largest.ceil().max(1.0)),
        "disk" => Resource::disk_mb(Resource::disk_mb(1.0).round_up(largest)),
        _ => Resource::memory_mb(Resource::memory_mb(1.0).round_up(largest)),
    }
}

/// The oracle, the best ladder (when every category has one) and, unless `fixed` was asked
/// for, the whole node.
fn references(
    categories: &[(String, Vec<TaskUse>)],
    resource: Resource,
    strategies: &[Strategy],
) -> Vec<Outcome> {
    let per = |f: &dyn Fn(&[TaskUse]) -> Outcome, label: &str| {
        let parts: Vec<Outcome> = categories.iter().map(|(_, tasks)| f(tasks)).collect();
        combine(label, &parts, resource.node)
    };
    let mut out = vec![per(&|tasks| oracle(tasks, resource), "oracle")];
    let ladders: Option<Vec<Outcome>> = categories
        .iter()
        .map(|(_, tasks)| best_ladder(tasks, resource))
        .collect();
    if let Some(parts) = ladders {
        out.push(combine("best-ladder", &parts, resource.node));
    }
    if !strategies.contains(&Strategy::Fixed) {
        out.push(per(
            &|tasks| simulate(tasks, Strategy::Fixed, resource),
            "whole-node",
        ));
    }
    out
}

/// Each category's rows, as file positions, in the order [`Trace::tasks`] groups them.
fn positions(trace: &Trace) -> Vec<Vec<usize>> {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, (category, _)) in trace.rows.iter().enumerate() {
        match groups.iter_mut().find(|(c, _)| c == category) {
            Some((_, rows)) => rows.push(i),
            None => groups.push((category, vec![i])),
        }
    }
    groups.into_iter().map(|(_, rows)| rows).collect()
}
