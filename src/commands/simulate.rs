//! `lfm simulate`: a trace replayed through sizing strategies (lfm_sizing::compare),
//! printed as a table or JSON, and plotted.

use std::io::Write;

use lfm_sizing::compare::compare;
use lfm_sizing::simulate::Outcome;
use lfm_sizing::trace::{Trace, TraceOptions, INPUT_BYTES};
use lfm_sizing::{Strategy, STRATEGIES};

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
    let options = match trace_options(&args) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_USAGE;
        }
    };
    let trace = match Trace::read_with(&args.trace, &options) {
        Ok(trace) => trace,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    if let Some(memory) = args.schedule_memory {
        return schedule_trace(&args, &trace, &strategies, memory);
    }
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

/// The flags that say how to read the trace; only the columns the replay uses must be numbers.
fn trace_options(args: &SimulateArgs) -> Result<TraceOptions, String> {
    let pairs = |flag: &str, values: &[String]| -> Result<Vec<(String, String)>, String> {
        values
            .iter()
            .map(|v| match v.split_once('=') {
                Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.into(), b.into())),
                _ => Err(format!("--{flag} {v:?}: expected NAME=VALUE")),
            })
            .collect()
    };
    let mut numeric = args.resources.clone();
    numeric.extend(["wall_time".to_string(), INPUT_BYTES.to_string()]);
    if args.schedule_memory.is_some() {
        numeric.extend(["memory".to_string(), "cpu_time".to_string()]);
    }
    Ok(TraceOptions {
        category_columns: args.category_columns.clone(),
        renames: pairs("column", &args.columns)?,
        filters: pairs("where", &args.filters)?,
        numeric: Some(numeric),
    })
}

/// One resource's outcomes, and the plot's panel (use and first allocations in file order).
fn resource_outcomes(
    trace: &Trace,
    name: &str,
    strategies: &[Strategy],
) -> Result<(Vec<Outcome>, plot::Panel), String> {
    let comparison = compare(trace, name, strategies)?;
    let panel = plot::Panel {
        resource: name.to_string(),
        uses: comparison.uses,
        series: comparison.firsts,
        node: comparison.resource.node,
    };
    Ok((comparison.outcomes, panel))
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

/// `--schedule-memory`: the calls replayed in time on one node, a makespan per sizing.
fn schedule_trace(args: &SimulateArgs, trace: &Trace, strategies: &[Strategy], memory: f64) -> i32 {
    use lfm_sizing::schedule::{calls_of, schedule, NodeShape, Sizing};
    if !(memory > 0.0 && args.schedule_cores > 0.0 && args.schedule_slots > 0) {
        eprintln!(
            "error: --schedule-memory, --schedule-cores and --schedule-slots must be above 0"
        );
        return EXIT_USAGE;
    }
    let (calls, categories) = match calls_of(trace) {
        Ok(found) => found,
        Err(error) => {
            eprintln!("error: {}: {error}", args.trace.display());
            return EXIT_USAGE;
        }
    };
    let node = NodeShape {
        memory,
        cores: args.schedule_cores,
        slots: args.schedule_slots,
    };
    let largest = calls.iter().map(|c| c.used).fold(0.0, f64::max);
    let mut sizings = vec![Sizing::Fixed(memory), Sizing::Fixed(largest.min(memory))];
    sizings.extend(strategies.iter().map(|s| Sizing::Strategy(*s)));
    sizings.push(Sizing::Oracle);
    let timelines: Vec<_> = sizings
        .into_iter()
        .map(|sizing| schedule(&calls, categories, sizing, node))
        .collect();
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        SimulateFormat::Json => writeln!(out, "{}", serde_json::json!({ "schedule": timelines })),
        SimulateFormat::Table => {
            let _ = writeln!(
                out,
                "{} calls on a node of {memory} MB, {} cores, {} slots:",
                calls.len(),
                args.schedule_cores,
                args.schedule_slots
            );
            let _ = writeln!(
                out,
                "  {:36} {:>10} {:>8} {:>9} {:>9}",
                "sizing", "makespan", "retries", "mem used", "allocated"
            );
            timelines.iter().try_for_each(|t| {
                writeln!(
                    out,
                    "  {:36} {:>9.1}s {:>8} {:>8.1}% {:>8.1}%",
                    t.sizing,
                    t.makespan,
                    t.retries,
                    100.0 * t.memory_used,
                    100.0 * t.memory_allocated
                )
            })
        }
    };
    if written.is_err() {
        return EXIT_FAILED;
    }
    0
}
