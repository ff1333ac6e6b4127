//! What one sizing decision costs in process, whatever the history's size (bench/state.sh):
//! `cargo run --release -p lfm-monitor --example sizing_decision -- HISTORY CATEGORY [ROUNDS [STRATEGY]]`.
//! Times, ROUNDS times each, the next allocation of every measured resource by STRATEGY (the
//! default, `best-so-far`, resuming from the tallies it keeps in the history): with the
//! history open already (a serve), and opening it first (`lfm run --auto`).
//! Prints p50 and p99 in milliseconds.

use std::time::Instant;

use lfm_monitor::sizing::advice;
use lfm_monitor::sizing::history::History;
use lfm_monitor::sizing::Strategy;

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

fn percentiles(mut times: Vec<f64>) -> String {
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    format!("p50 {:6.2} ms   p99 {:6.2} ms", at(0.5), at(0.99))
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
    let path = std::path::Path::new(path);
    let open = History::open(path).expect("opening the history");
    let mut warm = Vec::with_capacity(rounds);
    let mut cold = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        std::hint::black_box(decide(&open, category, strategy));
        warm.push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        let history = History::open(path).expect("opening the history");
        std::hint::black_box(decide(&history, category, strategy));
        cold.push(started.elapsed().as_secs_f64() * 1e3);
    }
    println!("decision, history open     {}", percentiles(warm));
    println!("decision, opening it first {}", percentiles(cold));
}
