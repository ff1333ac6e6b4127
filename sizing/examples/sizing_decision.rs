//! What one sizing decision costs in process, whatever the history's size (bench/state.sh):
//! `cargo run --release -p lfm-sizing --example sizing_decision -- HISTORY CATEGORY [ROUNDS [STRATEGY]]`.
//! Times, ROUNDS times each, the next allocation of every measured resource by STRATEGY (the
//! default, `best-so-far`, resuming from the tallies it keeps in the history):
//! - with the history open already and no run since the last decision (a serve's queued calls);
//! - opening it first (`lfm run --auto`, `lfm size`);
//! - after a run of the category is recorded (the steady state: each decision has one new run
//!   to size through every candidate);
//! - the first decision of the category: its tallies removed first (a category recorded
//!   without sizing; recording keeps the window cache current), ROUNDS / 10 times;
//! - the same with its window cache removed too (a history made by an lfm that kept neither:
//!   its decisions read `runs` until a run of it is recorded), ROUNDS / 10 times;
//! - the decisions after a first one, while its tally catches up with the window (each replays
//!   up to `REPLAY_PER_DECISION` runs through every candidate): every one of them, untimed by
//!   the other cases, which start from a tally that has caught up.
//!
//! - last, the first open of the history as an lfm before the window cache left it (the cache
//!   and its note dropped): the open fills every category's cache, once, 3 times.
//!
//! It WRITES to HISTORY (a run per round, tallies, the window cache): give it a copy.
//! Prints p50 and p99 in milliseconds.

use std::path::Path;
use std::time::Instant;

use lfm_sizing::advice;
use lfm_sizing::best_so_far::REPLAY_PER_DECISION;
use lfm_sizing::history::{History, Imported, SIZING_WINDOW};
use lfm_sizing::Strategy;

fn decide(history: &History, category: &str, strategy: Strategy) -> f64 {
    let rows = history
        .sizing_rows(Some(category))
        .expect("reading the history");
    advice::RESOURCES
        .into_iter()
        .filter(|&resource| advice::measured(&rows, resource))
        .map(|resource| advice::next_allocation(&rows, strategy, resource, None, Some(history)))
        .sum()
}

/// The decisions a tally with nothing of the window needs to catch up with it, each timed.
fn catch_up(history: &History, category: &str, strategy: Strategy) -> Vec<f64> {
    (0..SIZING_WINDOW.div_ceil(REPLAY_PER_DECISION))
        .map(|_| {
            timed(|| {
                std::hint::black_box(decide(history, category, strategy));
            })
        })
        .collect()
}

fn percentiles(mut times: Vec<f64>) -> String {
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    format!("p50 {:6.2} ms   p99 {:6.2} ms", at(0.5), at(0.99))
}

/// Milliseconds `work` takes.
fn timed(work: impl FnOnce()) -> f64 {
    let started = Instant::now();
    work();
    started.elapsed().as_secs_f64() * 1e3
}

/// One more run of `category`, as its newest.
fn record_one(history: &History, category: &str) {
    let rows = history.sizing_rows(Some(category)).expect("reading");
    let last = rows.last().expect("the category has runs");
    let run = Imported {
        category: category.to_string(),
        memory_mb: last.memory_mb,
        cores: last.cores,
        disk_mb: last.disk_mb,
        wall_time: last.wall_time,
        input_bytes: last.input_bytes,
        source: "sizing_decision".into(),
    };
    history.import(&[run]).expect("recording a run");
}

/// Remove what sizing keeps of `category` in `tables` beside its runs.
fn forget(path: &Path, category: &str, tables: &[&str]) {
    let c = rusqlite::Connection::open(path).expect("opening the history");
    for table in tables {
        // A table an older lfm does not make is not there to empty.
        let _ = c.execute(
            &format!("DELETE FROM {table} WHERE category = ?1"),
            [category],
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, category, rest @ ..] = args.as_slice() else {
        eprintln!("usage: sizing_decision HISTORY CATEGORY [ROUNDS [STRATEGY]]");
        std::process::exit(2);
    };
    let rounds: usize = rest.first().and_then(|r| r.parse().ok()).unwrap_or(200);
    let strategy = rest
        .get(1)
        .map_or(Ok(Strategy::BestSoFar), |s| Strategy::parse(s));
    let strategy = strategy.unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    let path = Path::new(path);
    let open = History::open(path).expect("opening the history");
    decide(&open, category, strategy);
    catch_up(&open, category, strategy);
    let (mut warm, mut cold, mut recorded, mut first) = (vec![], vec![], vec![], vec![]);
    let (mut catching, mut uncached) = (vec![], vec![]);
    for round in 0..rounds {
        warm.push(timed(|| {
            std::hint::black_box(decide(&open, category, strategy));
        }));
        cold.push(timed(|| {
            let history = History::open(path).expect("opening the history");
            std::hint::black_box(decide(&history, category, strategy));
        }));
        record_one(&open, category);
        recorded.push(timed(|| {
            std::hint::black_box(decide(&open, category, strategy));
        }));
        if round % 10 == 0 {
            forget(path, category, &["sizing_tallies"]);
            first.push(timed(|| {
                std::hint::black_box(decide(&open, category, strategy));
            }));
            catching.extend(catch_up(&open, category, strategy));
            forget(path, category, &["sizing_tallies", "sizing_window"]);
            uncached.push(timed(|| {
                std::hint::black_box(decide(&open, category, strategy));
            }));
            catch_up(&open, category, strategy);
        }
    }
    println!("decision, history open            {}", percentiles(warm));
    println!("decision, opening it first        {}", percentiles(cold));
    println!(
        "decision after a run is recorded  {}",
        percentiles(recorded)
    );
    println!("first decision (no tallies)       {}", percentiles(first));
    println!(
        "decisions catching up after it    {}",
        percentiles(catching)
    );
    println!(
        "first decision, no window cache   {}",
        percentiles(uncached)
    );
    drop(open);
    let migrations: Vec<String> = (0..3)
        .map(|_| {
            forget_the_cache(path);
            let opened = timed(|| {
                History::open(path).expect("opening the history");
            });
            format!("{opened:.1} ms")
        })
        .collect();
    println!(
        "first open, history made before the cache (fills it): {}",
        migrations.join(", ")
    );
}

/// Leave `path` as an lfm that kept no window cache left it.
fn forget_the_cache(path: &Path) {
    let c = rusqlite::Connection::open(path).expect("opening the history");
    c.execute_batch(
        "DROP TABLE IF EXISTS sizing_window;
         DELETE FROM meta WHERE key = 'sizing_window_schema';",
    )
    .expect("dropping the window cache");
}
