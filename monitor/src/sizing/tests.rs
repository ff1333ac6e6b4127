//! Each strategy on small hand-checked cases, and on synthetic workloads (fixed seeds) whose
//! ordering of strategies is known.

use super::bucketing::{self, Random};
use super::histogram::Histogram;
use super::simulate::{oracle, simulate, TaskUse};
use super::*;

fn memory() -> Resource {
    Resource::memory_mb(2000.0)
}

fn points(values: &[(f64, usize)]) -> Vec<(f64, f64)> {
    values
        .iter()
        .flat_map(|&(v, n)| std::iter::repeat_n((v, 1.0), n))
        .collect()
}

#[test]
fn min_waste_and_max_throughput_follow_tovars_formulas() {
    // 9 tasks at 100 MB, one at 1000 MB: buckets 250 (x9) and 1000; tau = 1, a_max = 1000.
    // min-waste: a=250 costs 250 + 1000 * 0.1 = 350, a=1000 costs 1000.
    // max-throughput: a=250 scores (4 * 0.9 + 0.1) / 1.1 = 3.36, a=1000 scores 1.
    let h = Histogram::new(&points(&[(100.0, 9), (1000.0, 1)]), &memory());
    assert_eq!(h.min_waste(), 250.0);
    assert_eq!(h.max_throughput(), 250.0);
    // 2 small, 8 large: a=250 costs 250 + 1000 * 0.8 = 1050 > 1000: the top.
    let h = Histogram::new(&points(&[(100.0, 2), (1000.0, 8)]), &memory());
    assert_eq!(h.min_waste(), 1000.0);
}

#[test]
fn the_histogram_strategies_give_the_node_until_steady_then_recompute() {
    let mut sizer = Sizer::new(Strategy::MinWaste, memory());
    for _ in 0..STEADY_TASKS - 1 {
        assert_eq!(sizer.first_allocation(), 2000.0);
        sizer.record(100.0, 1.0, false);
    }
    sizer.record(100.0, 1.0, false);
    assert_eq!(sizer.first_allocation(), 250.0);
    // A task needing 900 fails at 250 and is retried at the largest seen... which is 100: the
    // node. Its exhaustion never lowers max-seen.
    assert_eq!(sizer.retry_allocation(250.0), 2000.0);
    sizer.record(900.0, 1.0, false);
    assert_eq!(sizer.retry_allocation(250.0), 1000.0);
}

#[test]
fn max_seen_adds_a_third_of_a_bucket_and_rounds_up() {
    let mut sizer = Sizer::new(Strategy::MaxSeen, memory());
    assert_eq!(sizer.first_allocation(), 2000.0);
    sizer.record(100.0, 1.0, false);
    sizer.record(300.0, 1.0, false);
    // 300 + floor(250 / 3) = 383, rounded up to 500.
    assert_eq!(sizer.first_allocation(), 500.0);
    // An exhausted run at 700 raises it.
    sizer.record(700.0, 1.0, true);
    assert_eq!(sizer.first_allocation(), 1000.0);
    assert_eq!(
        Sizer::new(Strategy::Fixed, memory()).first_allocation(),
        2000.0
    );
}

#[test]
fn bucketing_samples_by_doubling_the_default() {
    assert_eq!(bucketing::grow(1000.0, 0.0), 1000.0);
    assert_eq!(bucketing::grow(1000.0, 1000.0), 2000.0);
    assert_eq!(bucketing::grow(1000.0, 1500.0), 2000.0);
    assert_eq!(bucketing::grow(1000.0, 2000.0), 4000.0);
    assert_eq!(bucketing::grow(1000.0, 400.0), 1000.0);
}

#[test]
fn greedy_bucketing_splits_two_clusters_and_picks_above_the_last_allocation() {
    let mut values = points(&[(100.0, 10), (1000.0, 10)]);
    values.rotate_left(5);
    let buckets = bucketing::greedy(&values);
    let tops: Vec<f64> = buckets.iter().map(|b| b.value).collect();
    assert_eq!(tops, vec![100.0, 1000.0]);
    assert_eq!(bucketing::smallest_above(&buckets, 0.0), Some(100.0));
    assert_eq!(bucketing::smallest_above(&buckets, 100.0), Some(1000.0));
    assert_eq!(bucketing::smallest_above(&buckets, 1000.0), None);
    // One cluster: one bucket.
    let one = bucketing::greedy(&points(&[(300.0, 12)]));
    assert_eq!(one.len(), 1);
    let mut random = Random::new(7);
    let drawn = bucketing::draw_above(&buckets, 100.0, &mut random);
    assert_eq!(drawn, Some(1000.0));
}

/// Synthetic workloads, fixed seeds: (name, peaks in MB).
fn workloads() -> Vec<(&'static str, Vec<f64>)> {
    let mut random = Random::new(42);
    let mut uniform = |lo: f64, hi: f64| lo + (hi - lo) * random.next_f64();
    let draw = |n: usize, f: &mut dyn FnMut() -> f64| (0..n).map(|_| f()).collect::<Vec<f64>>();
    let normal = draw(2000, &mut || {
        // Irwin-Hall: twelve uniforms, a normal of mean 6 and deviation 1.
        let s: f64 = (0..12).map(|_| uniform(0.0, 1.0)).sum();
        (400.0 + 100.0 * (s - 6.0)).clamp(10.0, 1900.0)
    });
    let flat = draw(2000, &mut || uniform(50.0, 1500.0));
    let exponential = draw(2000, &mut || {
        (-200.0 * (1.0 - uniform(0.0, 1.0)).ln()).clamp(10.0, 1900.0)
    });
    let bimodal = draw(2000, &mut || {
        if uniform(0.0, 1.0) < 0.8 {
            uniform(100.0, 200.0)
        } else {
            uniform(1200.0, 1400.0)
        }
    });
    let trimodal = draw(2000, &mut || match uniform(0.0, 1.0) {
        p if p < 0.5 => uniform(100.0, 150.0),
        p if p < 0.85 => uniform(600.0, 700.0),
        _ => uniform(1500.0, 1600.0),
    });
    vec![
        ("normal", normal),
        ("uniform", flat),
        ("exponential", exponential),
        ("bimodal", bimodal),
        ("trimodal", trimodal),
    ]
}

#[test]
fn on_synthetic_workloads_adaptive_strategies_beat_the_whole_node_and_no_one_beats_the_oracle() {
    let resource = memory();
    for (name, peaks) in workloads() {
        let tasks: Vec<TaskUse> = peaks
            .iter()
            .map(|&used| TaskUse { used, time: None })
            .collect();
        let best = oracle(&tasks, resource);
        assert_eq!(best.waste_percent, 0.0);
        let whole = simulate(&tasks, Strategy::Fixed, resource);
        for &(strategy_name, strategy) in STRATEGIES.iter().filter(|(_, s)| *s != Strategy::Fixed) {
            let outcome = simulate(&tasks, strategy, resource);
            assert!(
                outcome.waste_percent < whole.waste_percent,
                "{name}/{strategy_name}: waste {:.1}% vs the whole node's {:.1}%",
                outcome.waste_percent,
                whole.waste_percent
            );
            assert!(
                outcome.throughput <= best.throughput + 1e-9,
                "{name}/{strategy_name}"
            );
            assert!(
                outcome.throughput > whole.throughput,
                "{name}/{strategy_name}"
            );
        }
        // Two clusters far apart: a first allocation sized for the small one wastes less than
        // giving every task the largest seen.
        if name == "bimodal" {
            let waste = |s| simulate(&tasks, s, resource).waste_percent;
            assert!(
                waste(Strategy::MinWaste) < waste(Strategy::MaxSeen),
                "{name}"
            );
            assert!(
                waste(Strategy::GreedyBucketing) < waste(Strategy::MaxSeen),
                "{name}"
            );
        }
    }
}

#[test]
fn strategies_are_parsed_by_name_and_an_unknown_one_lists_the_known() {
    assert_eq!(Strategy::parse("min-waste"), Ok(Strategy::MinWaste));
    let error = Strategy::parse("best").unwrap_err();
    assert!(
        error.contains("min-waste") && error.contains("greedy-bucketing"),
        "{error}"
    );
}
