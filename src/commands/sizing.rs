//! `lfm history`, `lfm size`, and what `run --auto` / `call --auto` ask of the history.

use std::io::Write;
use std::path::PathBuf;

use lfm_monitor::sizing::auto::{self, AutoLimit};
use lfm_monitor::sizing::history::{default_path, imports, History, Row};
use lfm_monitor::sizing::trace::Trace;
use lfm_monitor::sizing::Strategy;
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

pub fn history(args: HistoryArgs) -> i32 {
    if let Some(trace) = &args.import {
        return import(&args, trace);
    }
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

/// `lfm history --import TRACE`: all rows or none; a bad row is an error naming its line.
fn import(args: &HistoryArgs, path: &std::path::Path) -> i32 {
    let imported = Trace::read(path)
        .and_then(|trace| imports(&trace, path, args.category.as_deref()))
        .and_then(|rows| {
            let history = open(args.history.as_ref())?;
            history.import(&rows)?;
            Ok((rows, history.path().to_path_buf()))
        });
    let (rows, into) = match imported {
        Ok(done) => done,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for row in &rows {
        match counts.iter_mut().find(|(c, _)| *c == row.category) {
            Some((_, n)) => *n += 1,
            None => counts.push((&row.category, 1)),
        }
    }
    let counts: Vec<String> = counts.iter().map(|(c, n)| format!("{c} {n}")).collect();
    println!(
        "imported {} rows into {} ({})",
        rows.len(),
        into.display(),
        counts.join(", ")
    );
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
    let mut resources = serde_json::Map::new();
    for resource in [
        AutoLimit::Memory,
        AutoLimit::Cores,
        AutoLimit::Disk,
        AutoLimit::GpuMemory,
        AutoLimit::Gpus,
    ] {
        // Disk is measured only in a sandbox, GPUs only in runs given them: no such run,
        // nothing to size them from.
        let measured = |r: &Row| match resource {
            AutoLimit::Disk => r.disk_mb.is_some(),
            AutoLimit::GpuMemory | AutoLimit::Gpus => r.gpus.is_some(),
            _ => true,
        };
        if !rows.iter().any(measured) {
            continue;
        }
        resources.insert(resource.name().into(), advice(&rows, strategy, resource));
    }
    let memory = &resources["memory"];
    let advice = serde_json::json!({
        "category": args.category,
        "strategy": strategy.name(),
        "runs": rows.len(),
        "points": memory["points"],
        "memory_mb": memory["allocation"],
        "node_memory_mb": memory["node"],
        "why": memory["why"],
        "resources": resources,
    });
    match args.format {
        SimulateFormat::Json => println!("{advice}"),
        SimulateFormat::Table => {
            for (name, a) in &resources {
                println!(
                    "{}: {name} {} {} ({}; node {:.0})",
                    args.category,
                    a["allocation"],
                    a["unit"].as_str().unwrap_or_default(),
                    a["why"].as_str().unwrap_or_default(),
                    a["node"].as_f64().unwrap_or_default()
                );
            }
        }
    }
    0
}

/// The allocation the category's next run gets of `resource` (`lfm size`, `lfm plot --history`).
pub fn next_allocation(rows: &[Row], strategy: Strategy, resource: AutoLimit) -> f64 {
    let node = auto::node(resource, Some(std::path::Path::new(".")));
    resource.allocation(rows, strategy, node, None)
}

/// One resource's next allocation, and why.
fn advice(rows: &[Row], strategy: Strategy, resource: AutoLimit) -> serde_json::Value {
    let node = auto::node(resource, Some(std::path::Path::new(".")));
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
    serde_json::json!({
        "allocation": (allocation * 1000.0).round() / 1000.0,
        "unit": resource.unit(),
        "node": node.floor(),
        "points": points,
        "why": why,
    })
}
