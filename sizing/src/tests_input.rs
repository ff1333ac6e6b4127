//! The input-aware strategies on synthetic categories whose memory is a known function of the
//! input size plus noise (fixed seeds): the regressions must recover the function, and size
//! each task only from the tasks before it.

use super::best_so_far::{BestSoFar, Tally};
use super::bucketing::Random;
use super::low_wastage::LowWastage;
use super::regression::Sample;
use super::simulate::{replay, simulate, TaskUse};
use super::sizey::Sizey;
use super::{Resource, Strategy};

const MB: f64 = 1e6;

/// `n` tasks of input 100 MB..2 GB (drawn), using `f(input)` MB times 1 ± `noise` (uniform).
fn category(n: usize, noise: f64, f: impl Fn(f64) -> f64) -> Vec<TaskUse> {
    let mut random = Random::new(7);
    (0..n)
        .map(|_| {
            let input = (100.0 + 1900.0 * random.next_f64()) * MB;
            let jitter = 1.0 + noise * (2.0 * random.next_f64() - 1.0);
            TaskUse {
                used: f(input) * jitter,
                time: Some(1.0 + 9.0 * random.next_f64()),
                input: Some(input),
            }
        })
        .collect()
}

fn linear(input: f64) -> f64 {
    300.0 + 2.0 * input / MB
}

fn samples(tasks: &[TaskUse]) -> Vec<Sample> {
    tasks
        .iter()
        .map(|t| Sample {
            input: t.input.unwrap_or(0.0),
            used: t.used,
            time: t.time.unwrap_or(1.0),
        })
        .collect()
}

fn node() -> Resource {
    Resource::memory_mb(16_000.0)
}

#[test]
fn low_wastage_regression_recovers_a_linear_category_just_above_its_noise() {
    let mut model = LowWastage::default();
    for sample in samples(&category(300, 0.05, linear)) {
        model.record(sample);
    }
    // The least wastage under doubling sits at the top of the noise band (+5%): no task
    // fails, none is given much more.
    for input in [200.0 * MB, 1000.0 * MB, 1800.0 * MB] {
        let line = linear(input);
        let predicted = model.predict(input, 16_000.0, 1.0).unwrap();
        assert!(
            predicted >= line * 1.0 && predicted <= line * 1.1,
            "{input}: {predicted} for {line}"
        );
    }
}

#[test]
fn sizey_recovers_a_linear_and_a_power_law_category() {
    let power = |input: f64| 40.0 * (input / MB).sqrt();
    for (name, f) in [
        ("linear", &linear as &dyn Fn(f64) -> f64),
        ("power", &power),
    ] {
        let mut sizey = Sizey::default();
        for sample in samples(&category(300, 0.05, f)) {
            sizey.predict(sample.input);
            sizey.record(sample);
        }
        for input in [300.0 * MB, 1000.0 * MB, 1800.0 * MB] {
            let predicted = sizey.predict(input).unwrap();
            let truth = f(input);
            assert!(
                predicted >= truth * 0.97 && predicted <= truth * 1.15,
                "{name} {input}: {predicted} for {truth}"
            );
        }
    }
}

#[test]
fn on_an_input_driven_category_the_regressions_waste_far_less_than_the_input_blind() {
    let tasks = category(400, 0.05, linear);
    let waste = |s: Strategy| simulate(&tasks, s, node());
    let blind = [Strategy::MaxSeen, Strategy::GreedyBucketing].map(waste);
    for strategy in [Strategy::LowWastageRegression, Strategy::Sizey] {
        let outcome = waste(strategy);
        for other in &blind {
            assert!(
                outcome.waste_percent < other.waste_percent / 2.0,
                "{}: {:.1}% against {} {:.1}%",
                outcome.strategy,
                outcome.waste_percent,
                other.strategy,
                other.waste_percent
            );
        }
        assert!(outcome.retry_percent < 10.0, "{outcome:?}");
    }
}

#[test]
fn without_a_relation_to_input_low_wastage_is_a_flat_line() {
    // Use 500-600 MB whatever the input: the least wastage is a constant at about the top.
    let tasks = category(200, 0.1, |_| 550.0);
    let mut model = LowWastage::default();
    for sample in samples(&tasks) {
        model.record(sample);
    }
    let small = model.predict(100.0 * MB, 16_000.0, 1.0).unwrap();
    let large = model.predict(2000.0 * MB, 16_000.0, 1.0).unwrap();
    assert!((large - small).abs() < 0.05 * small, "{small} {large}");
    assert!((550.0 * 1.05..=550.0 * 1.2).contains(&small), "{small}");
}

#[test]
fn every_input_aware_strategy_sizes_a_task_only_from_the_tasks_before_it() {
    let tasks = category(120, 0.05, linear);
    let mut changed = tasks.clone();
    for task in &mut changed[60..] {
        task.used *= 3.0;
    }
    for strategy in [
        Strategy::LowWastageRegression,
        Strategy::Sizey,
        Strategy::BestSoFar,
    ] {
        let (_, before) = replay(&tasks, strategy, node());
        let (_, after) = replay(&changed, strategy, node());
        // Task 60's own use is not known when it is sized; what follows learns from it.
        assert_eq!(before[..=60], after[..=60], "{strategy:?}");
        assert_ne!(before[61..], after[61..], "{strategy:?}");
    }
}

#[test]
fn the_retry_rules_double_or_take_the_largest_seen() {
    // Witt et al.: a failure doubles the allocation.
    let mut sizer = super::Sizer::new(Strategy::LowWastageRegression, node());
    sizer.record_task(500.0, 1.0, false, Some(MB));
    assert_eq!(sizer.retry_allocation(400.0), 800.0);
    // Doubling past the node stops at the node.
    assert_eq!(sizer.retry_allocation(9_000.0), 16_000.0);
    // Sizey: the largest use seen when it is above the failed allocation.
    let mut sizer = super::Sizer::new(Strategy::Sizey, node());
    for (input, used) in [(1.0, 900.0), (2.0, 300.0), (3.0, 2500.0), (4.0, 400.0)] {
        sizer.record_task(used, 1.0, false, Some(input * MB));
    }
    sizer.first_allocation_for(Some(2.0 * MB));
    assert_eq!(sizer.retry_allocation(1000.0), 2500.0);
}

/// History rows of `tasks`, ids 1.., all ended normally.
fn rows(tasks: &[TaskUse]) -> Vec<super::history::Row> {
    tasks
        .iter()
        .enumerate()
        .map(|(i, t)| super::history::Row {
            id: i as i64 + 1,
            category: "c".into(),
            time: 0.0,
            exit: "normal".into(),
            exceeded: String::new(),
            memory_mb: t.used,
            cores: 1.0,
            disk_mb: None,
            wall_time: t.time.unwrap_or(1.0),
            memory_limit_mb: None,
            sized: false,
            cores_limit: None,
            throttled: None,
            gpu_memory_mb: None,
            gpus: None,
            allocation_mb: None,
            queue_wait_seconds: None,
            input_bytes: t.input,
        })
        .collect()
}

#[test]
fn best_so_far_resumed_from_its_tally_after_each_run_agrees_with_one_replay_of_them_all() {
    let tasks = category(150, 0.05, linear);
    let rows = rows(&tasks);
    fn memory(r: &super::history::Row) -> Option<f64> {
        Some(r.memory_mb)
    }
    fn sizer(rows: &[super::history::Row], tally: Option<&Tally>) -> super::Sizer {
        super::sizer_from_history(
            rows,
            Strategy::BestSoFar,
            node(),
            "memory",
            memory,
            tally,
            usize::MAX,
        )
    }
    let whole = sizer(&rows, None).tally(150).unwrap();
    // One decision after each run, each resuming from the tally the one before saved: only
    // the newest run is sized by the candidates.
    let mut kept = None;
    for end in 1..=rows.len() {
        kept = sizer(&rows[..end], kept.as_ref()).tally(end as i64);
    }
    let kept = kept.unwrap();
    // The same charges to the last bit: low-wastage's line is resumed from the tally and
    // retrained when one replay would retrain it, Sizey weighs the same recent errors.
    assert_eq!(kept, whole);
    // A regression is in charge either way.
    let chosen = |t: &Tally| {
        let mut best = BestSoFar::new(node());
        best.resume(t);
        best.strategy()
    };
    assert_eq!(chosen(&kept), chosen(&whole));
    assert!(matches!(
        chosen(&kept),
        Strategy::LowWastageRegression | Strategy::Sizey
    ));
    // A tally made against another node is not resumed: the window is replayed afresh.
    let other = Resource::memory_mb(8_000.0);
    let fresh = super::sizer_from_history(
        &rows,
        Strategy::BestSoFar,
        other,
        "memory",
        memory,
        Some(&kept),
        usize::MAX,
    );
    assert_eq!(fresh.tally(150).unwrap().node, 8_000.0);
    assert_eq!(fresh.tally(150).unwrap().tasks, 150);
}

#[test]
fn best_so_far_replaying_a_few_runs_per_decision_catches_up_with_one_replay_of_them_all() {
    use super::best_so_far::REPLAY_PER_DECISION;
    let rows = rows(&category(150, 0.05, linear));
    let memory = |r: &super::history::Row| Some(r.memory_mb);
    let sizer = |tally: Option<&Tally>, at_most: usize| {
        super::sizer_from_history(
            &rows,
            Strategy::BestSoFar,
            node(),
            "memory",
            memory,
            tally,
            at_most,
        )
    };
    let whole = sizer(None, usize::MAX).tally(150).unwrap();
    // Decisions over the same 150 runs with no tally at first: each replays the next few.
    let mut kept: Option<Tally> = None;
    let mut decisions = 0;
    while kept.as_ref().is_none_or(|k| k.last_id < 150) {
        let decision = sizer(kept.as_ref(), REPLAY_PER_DECISION);
        let last_id = decision.tallied_to().unwrap();
        kept = decision.tally(last_id);
        decisions += 1;
        assert_eq!(
            kept.as_ref().unwrap().tasks,
            (decisions * REPLAY_PER_DECISION).min(150)
        );
    }
    assert_eq!(decisions, 150_usize.div_ceil(REPLAY_PER_DECISION));
    // The same charges to the last bit: each run was sized from the runs before it, Sizey
    // weighing the same errors and low-wastage resuming the line the replay would have.
    assert_eq!(kept.unwrap(), whole);
}
