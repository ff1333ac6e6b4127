//! Each strategy on small hand-checked cases, and on synthetic workloads (fixed seeds) whose
//! ordering of strategies is known.

use super::bucketing::{self, Random};
use super::histogram::Histogram;
use super::simulate::{best_ladder, oracle, simulate, TaskUse};
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

/// Bucketing points of `values` in arrival order: significance = sequence number, sorted.
fn sorted(values: &[f64]) -> Vec<bucketing::Point> {
    let mut points = Vec::new();
    for (i, &v) in values.iter().enumerate() {
        bucketing::insert(&mut points, (v, (i + 1) as f64));
    }
    points
}

fn values(buckets: &[bucketing::Bucket]) -> Vec<f64> {
    buckets.iter().map(|b| b.value).collect()
}

fn assert_close(actual: f64, expected: f64) {
    assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
}

#[test]
fn bucketing_samples_by_doubling_the_default() {
    assert_eq!(bucketing::grow(1000.0, 0.0), 1000.0);
    assert_eq!(bucketing::grow(1000.0, 1000.0), 2000.0);
    assert_eq!(bucketing::grow(1000.0, 1500.0), 2000.0);
    assert_eq!(bucketing::grow(1000.0, 2000.0), 4000.0);
    // Below the default (a failure at a small top bucket): 2^(floor(log2 0.4) + 1) = 1/2.
    assert_eq!(bucketing::grow(1000.0, 400.0), 500.0);
    assert_eq!(bucketing::grow(1000.0, 500.0), 1000.0);
}

#[test]
fn points_are_sorted_by_value_the_newest_first_among_equals() {
    assert_eq!(
        sorted(&[2.0, 1.0, 2.0]),
        vec![(1.0, 2.0), (2.0, 3.0), (2.0, 1.0)]
    );
}

#[test]
fn greedy_bucketing_splits_two_clusters_and_picks_above_the_last_allocation() {
    let mut arrivals = vec![100.0; 10];
    arrivals.extend([1000.0; 10]);
    arrivals.rotate_left(5);
    let buckets = bucketing::greedy(&sorted(&arrivals), true);
    assert_eq!(values(&buckets), vec![100.0, 1000.0]);
    assert_eq!(bucketing::smallest_above(&buckets, 0.0), Some(100.0));
    assert_eq!(bucketing::smallest_above(&buckets, 100.0), Some(1000.0));
    assert_eq!(bucketing::smallest_above(&buckets, 1000.0), None);
    // One cluster: one bucket.
    let one = bucketing::greedy(&sorted(&[300.0; 12]), true);
    assert_eq!(values(&one), vec![300.0]);
    let mut random = Random::new(7);
    let drawn = bucketing::draw_above(&buckets, 100.0, &mut random);
    assert_eq!(drawn, Some(1000.0));
}

#[test]
fn greedy_costs_differ_between_the_deterministic_and_probabilistic_variants() {
    // Arrivals 2, 1, 5: sorted (1, sig 2), (2, sig 1), (5, sig 3); total significance 6.
    // Deterministic cost p1(b-E1) + p2(b+M-E2) over all three (M = 5):
    //   break after 1: 2/6*0 + 4/6*(1+5-17/4) = 1.167; after 2: 3/6*(2-4/3) + 3/6*2 = 1.333;
    //   at 5 (no break): 5 - 19/6 = 1.833. Break after 1; then {2, 5}: after 2 costs
    //   1/4*0 + 3/4*2 = 1.5, no break 5 - 17/4 = 0.75: stop. Buckets 1 and 5.
    let points = sorted(&[2.0, 1.0, 5.0]);
    let det = bucketing::greedy(&points, true);
    assert_eq!(values(&det), vec![1.0, 5.0]);
    assert_close(det[0].probability, 2.0 / 6.0);
    assert_close(det[1].probability, 4.0 / 6.0);
    // Probabilistic p1^2(b-E1) + p1p2(M-E1) + p2p1(b+M-E2) + p2^2(M-E2): after 1 costs
    //   (2/9)*4 + (2/9)*1.75 + (4/9)*0.75 = 1.611; after 2: 0.25*(2/3 + 11/3 + 2) = 1.583;
    //   no break 1.833. Break after 2; then {1, 2}: after 1 costs (2/9)*1 + (2/9)*1 = 0.444,
    //   no break 2 - 4/3 = 0.667: break. Buckets 1, 2 and 5.
    let prob = bucketing::greedy(&points, false);
    assert_eq!(values(&prob), vec![1.0, 2.0, 5.0]);
    assert_close(prob[1].probability, 1.0 / 6.0);
    assert_close(prob[2].probability, 3.0 / 6.0);
}

#[test]
fn exhaustive_candidates_are_powers_of_two_then_equal_steps_snapped_to_points() {
    // Arrivals: six at 6 (significance 1..6, mass 21), three at 30 (7..9, 24), one at 60 (10).
    let points = sorted(&[6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 30.0, 30.0, 30.0, 60.0]);
    // k = 1: floor(log2 60) = 5 powers 1, 2, 4, 8, 16, then 60. 1, 2, 4 and 16 hold nothing;
    // 8 holds the sixes (snapped down to 6).
    let (one, one_means) = bucketing::exhaustive_candidates(&points, 1);
    assert_eq!(values(&one), vec![6.0, 60.0]);
    assert_close(one[0].probability, 21.0 / 55.0);
    assert_close(one_means[1], (30.0 * 24.0 + 60.0 * 10.0) / 34.0);
    // k = 2: floor(log2 30) = 4 powers 1, 2, 4, 8, then 30 and 60.
    let (two, two_means) = bucketing::exhaustive_candidates(&points, 2);
    assert_eq!(values(&two), vec![6.0, 30.0, 60.0]);
    // Deterministic cost sum_i p_i (v_0 + ... + v_i - E_i):
    //   k = 1: 34/55 * (6 + 60 - 1320/34) = 16.8;  k = 2: 24/55 * 6 + 10/55 * 36 = 504/55.
    assert_close(
        bucketing::exhaustive_cost(&one, &one_means, true),
        924.0 / 55.0,
    );
    assert_close(
        bucketing::exhaustive_cost(&two, &two_means, true),
        504.0 / 55.0,
    );
    // k = 2 is the cheapest of 1..=10 here.
    let best = bucketing::exhaustive(&points, true);
    assert_eq!(values(&best), vec![6.0, 30.0, 60.0]);
}

#[test]
fn exhaustive_probabilistic_cost_retries_among_the_buckets_above() {
    // Arrivals 2, 2, 8, 2: buckets 2 (p = 7/10) and 8 (3/10), means 2 and 8.
    // c[small][small] = 0, c[small][large] = 8 - 2 = 6, c[large][large] = 0,
    // c[large][small] = 2 + c[large][large] = 2 (fails at 2, retried at the only bucket above).
    // Expected: 0.7*0.3*6 + 0.3*0.7*2 = 1.68. Deterministic: 0.3 * (2 + 8 - 8) = 0.6.
    let points = sorted(&[2.0, 2.0, 8.0, 2.0]);
    let (buckets, means) = bucketing::exhaustive_candidates(&points, 1);
    assert_eq!(values(&buckets), vec![2.0, 8.0]);
    assert_close(bucketing::exhaustive_cost(&buckets, &means, false), 1.68);
    assert_close(bucketing::exhaustive_cost(&buckets, &means, true), 0.6);
}

#[test]
fn quantized_buckets_hold_equal_counts() {
    let points = sorted(&[8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]);
    // 8 points, 3 buckets: close at point floor(8/3) = 2, floor(2/3*8) = 5, then 8.
    let three = bucketing::quantized(&points, 3);
    assert_eq!(values(&three), vec![2.0, 5.0, 8.0]);
    assert_eq!(
        three.iter().map(|b| b.probability).collect::<Vec<_>>(),
        vec![2.0 / 8.0, 3.0 / 8.0, 3.0 / 8.0]
    );
    // cctools' default, one bucket: the largest value seen.
    assert_eq!(values(&bucketing::quantized(&points, 1)), vec![8.0]);
    // Fewer points than buckets: every point closes one.
    let few = bucketing::quantized(&sorted(&[3.0, 1.0, 2.0]), 10);
    assert_eq!(values(&few), vec![1.0, 2.0, 3.0]);
}

/// A resource whose bucketing default is 8: the sampling phase and the growth are visible.
fn small() -> Resource {
    Resource {
        bucket: 1.0,
        node: 128.0,
        default: 8.0,
    }
}

#[test]
fn exhaustive_bucketing_samples_then_climbs_its_buckets() {
    let mut sizer = Sizer::new(Strategy::ExhaustiveBucketing, small());
    let arrivals = [30.0, 6.0, 6.0, 60.0, 6.0, 6.0, 30.0, 6.0, 6.0, 30.0];
    for (i, &used) in arrivals.iter().enumerate() {
        // Sampling phase: the default, doubled past each failure.
        assert_eq!(sizer.first_allocation(), 8.0, "point {i}");
        assert_eq!(sizer.retry_allocation(8.0), 16.0);
        assert_eq!(sizer.retry_allocation(16.0), 32.0);
        sizer.record(used, 1.0, false);
    }
    // Ten points: buckets 6, 30, 60 (k = 2: powers 1, 2, 4, 8 and 30, 60).
    assert_eq!(sizer.first_allocation(), 6.0);
    assert_eq!(sizer.retry_allocation(6.0), 30.0);
    assert_eq!(sizer.retry_allocation(30.0), 60.0);
    // Above the top bucket: 8 * 2^(floor(log2(60/8)) + 1) = 64.
    assert_eq!(sizer.retry_allocation(60.0), 64.0);
    // The probabilistic variant draws among the same kind of buckets: always one of them.
    let mut drawn = Sizer::new(Strategy::ExhaustiveBucketingProbabilistic, small());
    for &used in &arrivals {
        drawn.record(used, 1.0, false);
    }
    for _ in 0..20 {
        assert!([6.0, 30.0, 60.0].contains(&drawn.first_allocation()));
        assert!([30.0, 60.0].contains(&drawn.retry_allocation(6.0)));
    }
}

#[test]
fn quantized_bucketing_gives_the_largest_seen_after_sampling() {
    let mut sizer = Sizer::new(Strategy::QuantizedBucketing, small());
    for used in [3.0, 12.0, 5.0, 7.0, 2.0, 9.0, 4.0, 6.0, 5.0] {
        sizer.record(used, 1.0, false);
        assert_eq!(sizer.first_allocation(), 8.0);
    }
    sizer.record(5.0, 1.0, false);
    assert_eq!(sizer.first_allocation(), 12.0);
    // Above it: 8 * 2^(floor(log2 1.5) + 1) = 16.
    assert_eq!(sizer.retry_allocation(12.0), 16.0);
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
            .map(|&used| TaskUse {
                used,
                time: None,
                input: None,
            })
            .collect();
        let best = oracle(&tasks, resource);
        assert_eq!(best.waste_percent, 0.0);
        let ladder = best_ladder(&tasks, resource).unwrap();
        assert!(ladder.throughput <= best.throughput + 1e-9, "{name}");
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
        if name == "bimodal" || name == "trimodal" {
            clusters_favour_the_deterministic_bucketing(name, &tasks, resource);
        }
    }
}

/// Clusters far apart: a first allocation sized for the smallest cluster (the deterministic
/// bucketings start at their smallest bucket, a failed attempt there costs little) wastes
/// less than giving every task the largest seen (max-seen, quantized's single bucket), than
/// cctools' 250 MB histogram, and than drawing the larger clusters' buckets at random.
fn clusters_favour_the_deterministic_bucketing(name: &str, tasks: &[TaskUse], resource: Resource) {
    let waste = |s| simulate(tasks, s, resource).waste_percent;
    let largest_seen = waste(Strategy::MaxSeen).min(waste(Strategy::QuantizedBucketing));
    for (deterministic, probabilistic) in [
        (
            Strategy::GreedyBucketing,
            Strategy::GreedyBucketingProbabilistic,
        ),
        (
            Strategy::ExhaustiveBucketing,
            Strategy::ExhaustiveBucketingProbabilistic,
        ),
    ] {
        let det = waste(deterministic);
        assert!(det < waste(Strategy::MinWaste), "{name}/{deterministic:?}");
        assert!(det < waste(probabilistic), "{name}/{deterministic:?}");
        assert!(det < largest_seen, "{name}/{deterministic:?}");
    }
    assert!(
        waste(Strategy::MinWaste) < waste(Strategy::MaxSeen),
        "{name}"
    );
    // Quantized's one bucket is the largest value itself, max-seen pads it to a bucket.
    assert!(
        waste(Strategy::QuantizedBucketing) < waste(Strategy::MaxSeen),
        "{name}"
    );
}

#[test]
fn the_best_ladder_is_the_cheapest_fixed_sequence_of_allocations() {
    let tasks: Vec<TaskUse> = [10.0, 10.0, 10.0, 12.0, 40.0]
        .iter()
        .map(|&used| TaskUse {
            used,
            time: None,
            input: None,
        })
        .collect();
    // Ladders ending at 40: {40} costs 5*40 = 200; {10, 40}: 5*10 + 2*40 = 130;
    // {12, 40}: 5*12 + 1*40 = 100; {10, 12, 40}: 50 + 2*12 + 40 = 114. Best: 12 then 40.
    let ladder = best_ladder(&tasks, memory()).unwrap();
    assert_eq!(ladder.allocated, 100.0);
    assert_eq!(ladder.used, 82.0);
    assert_eq!((ladder.retries, ladder.retried_tasks), (1, 1));
    // With wall times the 40 task weighs 10 (the others 1): W = 14, W(>10) = 11, W(>12) = 10; {40}: 560; {10, 40}: 140 + 440 = 580;
    // {12, 40}: 168 + 400 = 568; {10, 12, 40}: 140 + 132 + 400 = 672. Best: 40 alone.
    let timed: Vec<TaskUse> = tasks
        .iter()
        .map(|t| TaskUse {
            used: t.used,
            time: Some(if t.used == 40.0 { 10.0 } else { 1.0 }),
            input: None,
        })
        .collect();
    let ladder = best_ladder(&timed, memory()).unwrap();
    assert_eq!(ladder.allocated, 560.0);
    assert_eq!(ladder.retries, 0);
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

#[test]
fn bucketing_answers_the_same_whether_a_history_is_replayed_at_once_or_asked_after_each_run() {
    let used: Vec<f64> = (0..600).map(|i| ((i * 7919) % 97) as f64 + 1.0).collect();
    for strategy in [Strategy::GreedyBucketing, Strategy::ExhaustiveBucketing] {
        let mut replayed = Sizer::new(strategy, memory());
        let mut asked = Sizer::new(strategy, memory());
        for &value in &used {
            replayed.record(value, 1.0, false);
            asked.record(value, 1.0, false);
            // Few points between questions: inserted one by one.
            asked.first_allocation();
        }
        // All points at once: sorted in one go (equal values newest first, as inserted).
        assert_eq!(replayed.first_allocation(), asked.first_allocation());
        assert_eq!(replayed.sorted, asked.sorted);
    }
}
