//! `lfm size` and `lfm plot --history`: the allocation a category's next run gets of each
//! resource, and why, from the same policy `--auto` runs.

use std::path::Path;

use serde::Serialize;

use super::auto::{self, AutoLimit};
use super::history::Row;
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
}

/// The node a category is sized against when nothing says otherwise: this machine, with the
/// working directory's filesystem for disk.
fn this_node(resource: AutoLimit) -> f64 {
    auto::node(resource, Some(Path::new(".")))
}

/// The allocation the category's next run gets of `resource`.
pub fn next_allocation(rows: &[Row], strategy: Strategy, resource: AutoLimit) -> f64 {
    resource.allocation(rows, strategy, this_node(resource), None)
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

pub fn advice(rows: &[Row], strategy: Strategy, resource: AutoLimit) -> Advice {
    let node = this_node(resource);
    let sizer = resource.sizer(rows, strategy, node);
    let points = sizer.points();
    let allocation = next_allocation(rows, strategy, resource);
    let name = strategy.name();
    let why = match (sizer.warming_up(), allocation >= node) {
        (false, _) => format!("{name} over {points} normally ended runs"),
        (true, true) => {
            format!("{name} has not enough history yet ({points} points): the whole node")
        }
        (true, false) => format!("{name} is still sampling ({points} points): its default"),
    };
    Advice {
        allocation: (allocation * 1000.0).round() / 1000.0,
        unit: resource.unit(),
        node: node.floor(),
        points,
        why,
    }
}
