//! `lfm simulate`: replay a trace through sizing strategies, per resource, next to the oracle
//! (each task given exactly its peak) and the whole node.

use std::io::Write;

use lfm_monitor::sizing::simulate::{best_ladder, combine, oracle, replay, Outcome};
use lfm_monitor::sizing::trace::Trace;
use lfm_monitor::sizing::{simulate, Resource, Strategy, TaskUse, STRATEGIES};

use crate::plots as plot;

use crate::cli::{SimulateArgs, SimulateFormat};

const EXIT_FAILED: i32 = 1;
const EXIT_USAGE: i32 = 2;

pub fn simulate_trace(args: SimulateArgs) -> i32 {
    let strategies: Vec<Strategy> = if args.strategy == "all" {
        STRATEGIES.iter().map(|(_, s)| *s).collect()
    } else {
        match Strategy::parse(&args.strategy) {
            Ok(strategy) => vec![strategy],
            Err(error) => {
                eprintln!("error: {error}");
                return EXIT_USAGE;
            }
        }
    };
    // The plot's file must be writable before the replay's seconds are spent.
    if let Some(path) = &args.plot {
        if let Err(error) = std::fs::File::create(path) {
            eprintln!(
                "error: cannot write the plot to {}: {error}",
                path.display()
            );
            return EXIT_USAGE;
        }
    }
    let trace = match Trace::read(&args.trace) {
        Ok(trace) => trace,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    let mut report = serde_json::Map::new();
    let mut panels = Vec::new();
    for name in &args.resources {
        match resource_outcomes(&trace, name, &strategies) {
            Ok((outcomes, panel)) => {
                report.insert(
                    name.clone(),
                    serde_json::to_value(&outcomes).unwrap_or_default(),
                );
                panels.push(panel);
            }
            Err(error) => {
                eprintln!("error: {}: {error}", args.trace.display());
                return EXIT_USAGE;
            }
        }
    }
    if let Some(path) = &args.plot {
        if let Err(error) = plot::draw(path, &panels) {
            eprintln!("error: plotting to {}: {error}", path.display());
            return EXIT_FAILED;
        }
    }
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        SimulateFormat::Json => writeln!(out, "{}", serde_json::Value::Object(report)),
        SimulateFormat::Table => write_table(&mut out, &report),
    };
    if written.is_err() {
        return EXIT_FAILED;
    }
    0
}

/// The whole node of a resource in a trace: its largest value, rounded up to a bucket.
fn node_of(name: &str, largest: f64) -> Resource {
    match name {
        "cores" | "gpus" => Resource::cores(largest.ceil().max(1.0)),
        "disk" => Resource::disk_mb(Resource::disk_mb(1.0).round_up(largest)),
        _ => Resource::memory_mb(Resource::memory_mb(1.0).round_up(largest)),
    }
}

/// Every strategy, then the oracle, the best ladder in hindsight and the whole node, each
/// category sized on its own; and the plot's panel (use and first allocations in file order).
fn resource_outcomes(
    trace: &Trace,
    name: &str,
    strategies: &[Strategy],
) -> Result<(Vec<Outcome>, plot::Panel), String> {
    let categories = trace.tasks(name)?;
    let largest = categories
        .iter()
        .flat_map(|(_, t)| t.iter().map(|t| t.used))
        .fold(0.0, f64::max);
    let resource = node_of(name, largest);
    let positions = positions(trace);
    let mut panel = plot::Panel::new(name, trace.rows.len(), resource.node);
    for ((_, tasks), at) in categories.iter().zip(&positions) {
        panel.uses(tasks.iter().map(|t| t.used), at);
    }
    let mut outcomes = Vec::new();
    for &strategy in strategies {
        let mut parts = Vec::new();
        let mut firsts = vec![0.0; trace.rows.len()];
        for ((_, tasks), at) in categories.iter().zip(&positions) {
            let (outcome, allocations) = replay(tasks, strategy, resource);
            parts.push(outcome);
            for (allocation, &i) in allocations.into_iter().zip(at) {
                firsts[i] = allocation;
            }
        }
        outcomes.push(combine(strategy.name(), &parts, resource.node));
        panel.series.push((strategy.name().to_string(), firsts));
    }
    outcomes.extend(references(&categories, resource, strategies));
    Ok((outcomes, panel))
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

fn write_table(
    out: &mut impl Write,
    report: &serde_json::Map<String, serde_json::Value>,
) -> std::io::Result<()> {
    for (resource, outcomes) in report {
        writeln!(out, "{resource}:")?;
        writeln!(
            out,
            "  {:36} {:>7} {:>8} {:>8} {:>11} {:>9}",
            "strategy", "tasks", "retries", "waste", "throughput", "/ oracle"
        )?;
        let outcomes: Vec<Outcome> = serde_json::from_value(outcomes.clone()).unwrap_or_default();
        let best = outcomes
            .iter()
            .find(|o| o.strategy == "oracle")
            .map_or(1.0, |o| o.throughput);
        for o in &outcomes {
            writeln!(
                out,
                "  {:36} {:>7} {:>7.1}% {:>7.1}% {:>11.3} {:>8.3}x",
                o.strategy,
                o.tasks,
                o.retry_percent,
                o.waste_percent,
                o.throughput,
                o.throughput / best
            )?;
        }
    }
    Ok(())
}
