//! `lfm size` and `lfm plot --history`: the allocation a category's next run gets of each
//! resource, and why, from the same policy `--auto` runs.

use std::path::Path;

use serde::Serialize;

use super::auto::{self, Ask, AutoLimit};
use super::best_so_far::{CandidateCost, Choice, RETRIED_SHARE};
use super::history::{History, Row};
use super::Strategy;

/// Every resource `lfm size` reports, in its order.
pub const RESOURCES: [AutoLimit; 5] = [
    AutoLimit::Memory,
    AutoLimit::Cores,
    AutoLimit::Disk,
    AutoLimit::GpuMemory,
    AutoLimit::Gpus,
];

/// One resource's next allocation, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    pub allocation: f64,
    pub unit: &'static str,
    pub node: f64,
    pub points: usize,
    pub why: String,
    /// The strategy that sized it: the one asked, or the candidate `best-so-far` chose.
    pub strategy: &'static str,
    /// `best-so-far`: each candidate's replayed allocation and waste.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Vec<CandidateCost>>,
}

/// The node a category is sized against when nothing says otherwise: this machine, with the
/// working directory's filesystem for disk.
fn this_node(resource: AutoLimit) -> f64 {
    auto::node(resource, Some(Path::new(".")))
}

/// The allocation the category's next run gets of `resource`, its input `input` bytes (None:
/// unknown); `history`: where `rows` came from (`best-so-far` keeps its tallies there).
pub fn next_allocation(
    rows: &[Row],
    strategy: Strategy,
    resource: AutoLimit,
    input: Option<f64>,
    history: Option<&History>,
) -> f64 {
    let ask = Ask {
        input,
        ..Ask::first(strategy, this_node(resource))
    };
    resource.allocation(rows, &ask, history)
}

/// Whether any of `rows` measured `resource`: disk is measured only in a sandbox, GPUs only in
/// runs given them; without such a run there is nothing to size them from.
pub fn measured(rows: &[Row], resource: AutoLimit) -> bool {
    rows.iter().any(|r| match resource {
        AutoLimit::Disk => r.disk_mb.is_some(),
        AutoLimit::GpuMemory | AutoLimit::Gpus => r.gpus.is_some(),
        _ => true,
    })
}

pub fn advice(
    rows: &[Row],
    strategy: Strategy,
    resource: AutoLimit,
    input: Option<f64>,
    history: Option<&History>,
) -> Advice {
    let node = this_node(resource);
    let mut sizer = resource.sizer(rows, strategy, node, history);
    let points = sizer.points();
    let allocation = match resource {
        // Whole cores and devices, as `--auto` gives them.
        AutoLimit::Cores | AutoLimit::Gpus => sizer
            .first_allocation_for(input)
            .ceil()
            .clamp(1.0, node.max(1.0)),
        _ => sizer.first_allocation_for(input),
    };
    let choice = sizer.choice();
    let name = choice.as_ref().map_or(strategy.name(), |c| c.strategy);
    let mut why = match (sizer.warming_up(), allocation >= node) {
        (false, _) => format!("{name} over {points} normally ended runs"),
        (true, true) => {
            format!("{name} has not enough history yet ({points} points): the whole node")
        }
        (true, false) => format!("{name} is still sampling ({points} points): its default"),
    };
    if let Some(choice) = &choice {
        why = format!("{}: {why}", chosen_because(choice));
    }
    Advice {
        allocation: (allocation * 1000.0).round() / 1000.0,
        unit: resource.unit(),
        node: node.floor(),
        points,
        why,
        strategy: name,
        candidates: choice.map(|c| c.candidates),
    }
}

/// Why `best-so-far` hands a category to its candidate: each candidate's waste on the runs
/// replayed, and the rule that picked it.
fn chosen_because(choice: &Choice) -> String {
    if choice.tasks == 0 {
        return format!(
            "best-so-far: no run replayed yet, {} first",
            choice.strategy
        );
    }
    let costs: Vec<String> = (choice.candidates.iter())
        .map(|c| format!("{} {:.1}%", c.strategy, c.waste_percent))
        .collect();
    let least = (choice.candidates.iter())
        .min_by(|a, b| a.allocated.total_cmp(&b.allocated))
        .map_or("", |c| c.strategy);
    let rule = if least == choice.strategy {
        "least waste".to_string()
    } else {
        format!(
            "{least} wasted less but retried over {:.0}% of them",
            RETRIED_SHARE * 100.0
        )
    };
    format!(
        "best-so-far chose {} ({rule} over {} runs replayed: waste {})",
        choice.strategy,
        choice.tasks,
        costs.join(", ")
    )
}
