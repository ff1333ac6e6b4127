//! `lfm simulate`: replay a trace through sizing strategies, per resource, next to the oracle
//! (each task given exactly its peak) and the whole node.

use std::io::Write;

use lfm_monitor::sizing::simulate::{best_ladder, combine, oracle, Outcome};
use lfm_monitor::sizing::trace::Trace;
use lfm_monitor::sizing::{simulate, Resource, Strategy, STRATEGIES};

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
    let trace = match Trace::read(&args.trace) {
        Ok(trace) => trace,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    let mut report = serde_json::Map::new();
    for name in &args.resources {
        match resource_outcomes(&trace, name, &strategies) {
            Ok(outcomes) => {
                report.insert(
                    name.clone(),
                    serde_json::to_value(&outcomes).unwrap_or_default(),
                );
            }
            Err(error) => {
                eprintln!("error: {}: {error}", args.trace.display());
                return EXIT_USAGE;
            }
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

/// Every strategy, then the oracle, the best ladder in hindsight and the whole node, each
/// category sized on its own.
fn resource_outcomes(
    trace: &Trace,
    name: &str,
    strategies: &[Strategy],
) -> Result<Vec<Outcome>, String> {
    let categories = trace.tasks(name)?;
    let largest = categories
        .iter()
        .flat_map(|(_, t)| t.iter().map(|t| t.used))
        .fold(0.0, f64::max);
    let resource = match name {
        "cores" | "gpus" => Resource::cores(largest.ceil().max(1.0)),
        "disk" => Resource::disk_mb(Resource::disk_mb(1.0).round_up(largest)),
        _ => Resource::memory_mb(Resource::memory_mb(1.0).round_up(largest)),
    };
    let per = |f: &dyn Fn(&[lfm_monitor::sizing::TaskUse]) -> Outcome, label: &str| {
        let parts: Vec<Outcome> = categories.iter().map(|(_, tasks)| f(tasks)).collect();
        combine(label, &parts, resource.node)
    };
    let mut outcomes: Vec<Outcome> = strategies
        .iter()
        .map(|&s| per(&|tasks| simulate(tasks, s, resource), s.name()))
        .collect();
    outcomes.push(per(&|tasks| oracle(tasks, resource), "oracle"));
    // The best static ladder in hindsight, when every category has one.
    let ladders: Option<Vec<Outcome>> = categories
        .iter()
        .map(|(_, tasks)| best_ladder(tasks, resource))
        .collect();
    if let Some(parts) = ladders {
        outcomes.push(combine("best-ladder", &parts, resource.node));
    }
    if !strategies.contains(&Strategy::Fixed) {
        outcomes.push(per(
            &|tasks| simulate(tasks, Strategy::Fixed, resource),
            "whole-node",
        ));
    }
    Ok(outcomes)
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
