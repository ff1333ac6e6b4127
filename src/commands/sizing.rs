//! `lfm history` and `lfm size`.

use std::io::Write;

use lfm_sizing::advice;
use lfm_sizing::history::{imports, ExitDetails, Retention, Row};
use lfm_sizing::trace::Trace;
use lfm_sizing::Strategy;

use crate::cli::{HistoryArgs, HistoryFormat, SimulateFormat, SizeArgs};
use crate::monitoring::open_history;

const EXIT_FAILED: i32 = 1;
const EXIT_USAGE: i32 = 2;

pub fn history(args: HistoryArgs) -> i32 {
    if let Some(trace) = &args.import {
        return import(&args, trace);
    }
    if args.prune {
        return prune(&args);
    }
    let rows =
        match open_history(args.history.as_ref()).and_then(|h| h.rows(args.category.as_deref())) {
            Ok(rows) => rows,
            Err(error) => {
                eprintln!("error: {error}");
                return EXIT_FAILED;
            }
        };
    let exits =
        match open_history(args.history.as_ref()).and_then(|h| h.exits(args.category.as_deref())) {
            Ok(exits) => exits,
            Err(error) => {
                eprintln!("error: {error}");
                return EXIT_FAILED;
            }
        };
    let endings: Vec<String> = rows.iter().map(|r| ending(r, exits.get(&r.id))).collect();
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        HistoryFormat::Json => writeln!(out, "{}", rows_json(&rows, &endings)),
        HistoryFormat::Csv => write_csv(&mut out, &rows),
        HistoryFormat::Table => write_table(&mut out, &rows, &endings),
    };
    if written.is_err() {
        return EXIT_FAILED;
    }
    0
}

/// `lfm history --prune`: retention now, with the file's size before and after.
fn prune(args: &HistoryArgs) -> i32 {
    let retention = Retention {
        whole_runs: args.keep_whole,
        sized_runs: args.keep_runs,
    };
    let pruned = open_history(args.history.as_ref()).and_then(|history| {
        let before = history.file_bytes();
        let pruned = history.prune(&retention)?;
        Ok((
            before,
            pruned,
            history.file_bytes(),
            history.path().to_path_buf(),
        ))
    });
    match pruned {
        Ok((before, pruned, after, path)) => {
            println!(
                "{}: {} runs made compact, {} removed, in {} categories; {:.1} MB -> {:.1} MB",
                path.display(),
                pruned.compacted,
                pruned.removed,
                pruned.categories,
                before as f64 / 1e6,
                after as f64 / 1e6
            );
            0
        }
        Err(error) => {
            eprintln!("error: {error}");
            EXIT_FAILED
        }
    }
}

/// `lfm history --import TRACE`: all rows or none; a bad row is an error naming its line.
fn import(args: &HistoryArgs, path: &std::path::Path) -> i32 {
    let imported = Trace::read(path)
        .and_then(|trace| imports(&trace, path, args.category.as_deref()))
        .and_then(|rows| {
            let history = open_history(args.history.as_ref())?;
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
    let mut csv = csv::Writer::from_writer(out);
    csv.write_record([
        "category",
        "cores",
        "memory",
        "disk",
        "cpu_time",
        "wall_time",
        "exit",
    ])?;
    for r in rows {
        csv.write_record([
            r.category.clone(),
            format!("{:.3}", r.cores),
            format!("{:.1}", r.memory_mb),
            format!("{:.1}", r.disk_mb.unwrap_or(0.0)),
            "0".into(),
            format!("{:.3}", r.wall_time),
            r.exit.to_string(),
        ])?;
    }
    csv.flush()
}

/// How a run ended, in words: `normal`, `exit 1`, `exception ValueError`, `signal 9`,
/// `limits memory`, `error`. Rows recorded before lfm kept the details show their exit type.
fn ending(row: &Row, exit: Option<&ExitDetails>) -> String {
    let exit = exit.cloned().unwrap_or_default();
    match row.exit.as_str() {
        "exception" => match exit.exception {
            Some(exception) => format!("exception {}", exception.name),
            None => "exception".into(),
        },
        "signal" => exit
            .signal
            .map_or("signal".into(), |signal| format!("signal {signal}")),
        "limits" if !row.exceeded.is_empty() => format!("limits {}", row.exceeded),
        "normal" => match exit.status {
            Some(status) if status != 0 => format!("exit {status}"),
            _ => "normal".into(),
        },
        other => other.into(),
    }
}

/// The rows as JSON, each with its `ending` beside its exit type.
fn rows_json(rows: &[Row], endings: &[String]) -> serde_json::Value {
    let rows = rows.iter().zip(endings).map(|(row, ending)| {
        let mut value = serde_json::to_value(row).unwrap_or_default();
        value["ending"] = ending.as_str().into();
        value
    });
    serde_json::Value::Array(rows.collect())
}

fn write_table(out: &mut impl Write, rows: &[Row], endings: &[String]) -> std::io::Result<()> {
    let width = endings.iter().map(String::len).max().unwrap_or(0).max(6);
    writeln!(
        out,
        "{:>6}  {:20} {:width$} {:>11} {:>7} {:>9}  sized",
        "id", "category", "ended", "memory MiB", "cores", "wall s"
    )?;
    for (r, ending) in rows.iter().zip(endings) {
        writeln!(
            out,
            "{:>6}  {:20} {:width$} {:>11.1} {:>7.2} {:>9.2}  {}",
            r.id, r.category, ending, r.memory_mb, r.cores, r.wall_time, r.sized
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
    let input = match crate::monitoring::input_bytes(&args.input) {
        Ok(bytes) => bytes.map(|b| b as f64),
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_USAGE;
        }
    };
    let opened = open_history(args.history.as_ref());
    let rows = match opened
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|h| h.sizing_rows(Some(&args.category)))
    {
        Ok(rows) => rows,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    let history = opened.ok();
    let mut resources = serde_json::Map::new();
    for resource in advice::RESOURCES {
        if advice::measured(&rows, resource) {
            let advised = advice::advice(&rows, strategy, resource, input, history.as_ref());
            let value = serde_json::to_value(advised).unwrap_or_default();
            resources.insert(resource.name().into(), value);
        }
    }
    match args.format {
        SimulateFormat::Json => println!(
            "{}",
            size_json(&args.category, strategy, rows.len(), resources)
        ),
        SimulateFormat::Table => {
            if resources.is_empty() {
                println!(
                    "{}: no measured runs in the history: nothing to size from (the first run \
                     gets what it asks for, or the whole node)",
                    args.category
                );
            }
            for (name, advised) in &resources {
                print_advice(&args.category, name, strategy, advised);
            }
        }
    }
    0
}

/// One resource's advice, a field a line:
/// ```text
/// train: memory
///   allocation  512 MiB
///   strategy    best-so-far
///   reason      ...
///   node        15842 MiB
/// ```
fn print_advice(category: &str, name: &str, strategy: Strategy, advised: &serde_json::Value) {
    let unit = advised["unit"].as_str().unwrap_or_default();
    println!("{category}: {name}");
    println!("  allocation  {} {unit}", advised["allocation"]);
    println!("  strategy    {}", strategy.name());
    println!(
        "  reason      {}",
        advised["why"].as_str().unwrap_or_default()
    );
    println!(
        "  node        {:.0} {unit}",
        advised["node"].as_f64().unwrap_or_default()
    );
}

/// `lfm size --format json`: memory's advice at the top (as before resources were added).
fn size_json(
    category: &str,
    strategy: Strategy,
    runs: usize,
    resources: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    // A category without measured runs has no advice: its fields are null.
    let memory = resources.get("memory").cloned().unwrap_or_default();
    serde_json::json!({
        "category": category,
        "strategy": strategy.name(),
        "runs": runs,
        "points": memory["points"],
        "memory_mb": memory["allocation"],
        "node_memory_mb": memory["node"],
        "why": memory["why"],
        "resources": resources,
    })
}
