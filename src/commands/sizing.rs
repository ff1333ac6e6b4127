//! `lfm history`, `lfm size`, and what `run --auto` / `call --auto` ask of the history.

use std::io::Write;
use std::path::PathBuf;

use lfm_monitor::sizing::history::{default_path, History, Row};
use lfm_monitor::sizing::{node_memory_mb, sizer_from_history, Resource, Strategy};
use lfm_monitor::Report;

use crate::cli::{HistoryArgs, HistoryFormat, SimulateFormat, SizeArgs};

const EXIT_FAILED: i32 = 1;
const EXIT_USAGE: i32 = 2;

pub fn open(path: Option<&PathBuf>) -> Result<History, String> {
    History::open(&path.cloned().unwrap_or_else(default_path))
}

/// Append a finished run to the history (a warning, never a failure of the run).
pub fn record(path: Option<&PathBuf>, report: &Report) {
    if report.category.is_none() {
        return;
    }
    let sized = !report.limits_from_sizing.is_empty();
    if let Err(error) = open(path).and_then(|h| h.record(report, sized)) {
        eprintln!("lfm: warning: not recorded: {error}");
    }
}

/// The memory limit (bytes) sizing gives the next run of `category`: the first attempt, or
/// after an attempt at `failed` MiB ran out, the next one.
pub fn memory_allocation(rows: &[Row], strategy: Strategy, failed: Option<f64>) -> u64 {
    let resource = Resource::memory_mb(node_memory_mb());
    let mut sizer = sizer_from_history(rows, strategy, resource, "memory", |r| Some(r.memory_mb));
    let mib = match failed {
        None => sizer.first_allocation(),
        Some(failed) => sizer.retry_allocation(failed),
    };
    (mib * 1_048_576.0) as u64
}

pub fn history(args: HistoryArgs) -> i32 {
    let rows = match open(args.history.as_ref()).and_then(|h| h.rows(args.category.as_deref())) {
        Ok(rows) => rows,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        HistoryFormat::Json => {
            writeln!(out, "{}", serde_json::to_string(&rows).unwrap_or_default())
        }
        HistoryFormat::Csv => write_csv(&mut out, &rows),
        HistoryFormat::Table => write_table(&mut out, &rows),
    };
    if written.is_err() {
        return EXIT_FAILED;
    }
    0
}

/// bioblast's columns (category, cores, memory MB, disk MB, cpu_time, wall_time) plus the
/// exit: `lfm simulate --trace` replays it.
fn write_csv(out: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
    writeln!(out, "category,cores,memory,disk,cpu_time,wall_time,exit")?;
    for r in rows {
        writeln!(
            out,
            "{},{:.3},{:.1},{:.1},0,{:.3},{}",
            r.category,
            r.cores,
            r.memory_mb,
            r.disk_mb.unwrap_or(0.0),
            r.wall_time,
            r.exit
        )?;
    }
    Ok(())
}

fn write_table(out: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>6}  {:20} {:10} {:>11} {:>7} {:>9}  sized  exceeded",
        "id", "category", "exit", "memory MiB", "cores", "wall s"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:>6}  {:20} {:10} {:>11.1} {:>7.2} {:>9.2}  {:5}  {}",
            r.id, r.category, r.exit, r.memory_mb, r.cores, r.wall_time, r.sized, r.exceeded
        )?;
    }
    Ok(())
}

pub fn size(args: SizeArgs) -> i32 {
    let strategy = match Strategy::parse(&args.strategy) {
        Ok(strategy) => strategy,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_USAGE;
        }
    };
    let rows = match open(args.history.as_ref()).and_then(|h| h.rows(Some(&args.category))) {
        Ok(rows) => rows,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    let resource = Resource::memory_mb(node_memory_mb());
    let mut sizer = sizer_from_history(&rows, strategy, resource, "memory", |r| Some(r.memory_mb));
    let memory = sizer.first_allocation();
    let advice = serde_json::json!({
        "category": args.category,
        "strategy": strategy.name(),
        "runs": rows.len(),
        "points": sizer.points(),
        "memory_mb": memory,
        "node_memory_mb": resource.node,
        "why": if memory >= resource.node {
            "not enough history for this strategy yet: the whole node".to_string()
        } else {
            format!("{} over {} normally ended runs", strategy.name(), sizer.points())
        },
    });
    match args.format {
        SimulateFormat::Json => println!("{advice}"),
        SimulateFormat::Table => println!(
            "{}: memory {:.0} MiB ({}; node {:.0} MiB)",
            args.category,
            memory,
            advice["why"].as_str().unwrap_or_default(),
            resource.node
        ),
    }
    0
}
