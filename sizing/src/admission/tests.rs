use super::*;

const GIB: u64 = 1 << 30;

fn node() -> NodeBudget {
    NodeBudget {
        memory_bytes: 6 * GIB,
        cores: 2.0,
    }
}

fn memory(bytes: u64) -> Allocation {
    Allocation {
        memory_bytes: bytes,
        cores: 0.0,
    }
}

/// A small deterministic generator, so a failing case can be replayed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

#[test]
fn many_calls_of_random_sizes_never_hold_more_than_the_node() {
    let budget = node();
    let mut rng = Lcg(7);
    let mut queue: Vec<Allocation> = (0..2000)
        .map(|_| Allocation {
            memory_bytes: 1 + rng.next(3 * GIB),
            cores: rng.next(5) as f64 * 0.25,
        })
        .collect();
    let mut running: Vec<Allocation> = Vec::new();
    let mut order = Overtaking::default();
    let (mut started, mut peak_held) = (0, 0);
    while !queue.is_empty() || !running.is_empty() {
        // Start what may start, checking the sum at every start.
        while let Some(at) = order.pick(
            queue.len(),
            Allocation::sum(running.iter().copied()),
            &budget,
            |i| queue[i],
        ) {
            running.push(queue.remove(at));
            started += 1;
            let held = Allocation::sum(running.iter().copied());
            assert!(held.memory_bytes <= budget.memory_bytes, "{held:?}");
            assert!(held.cores <= budget.cores + 1e-9, "{held:?}");
            peak_held = peak_held.max(held.memory_bytes);
        }
        // One running call ends (a random one).
        if !running.is_empty() {
            let at = rng.next(running.len() as u64) as usize;
            running.swap_remove(at);
        }
    }
    assert_eq!(started, 2000);
    assert!(peak_held > 4 * GIB, "the node was used: {peak_held}");
}

#[test]
fn the_first_call_starts_when_it_fits() {
    let mut order = Overtaking::default();
    let sizes = [memory(GIB), memory(GIB)];
    assert_eq!(order.pick(2, memory(0), &node(), |i| sizes[i]), Some(0));
}

#[test]
fn smaller_calls_backfill_until_the_limit_then_the_large_one_waits_for_room() {
    let budget = node();
    let mut order = Overtaking::default();
    // 5 GiB held; the first queued needs 4 GiB, behind it a stream of 512 MiB calls.
    let large = memory(4 * GIB);
    let small = memory(GIB / 2);
    let queue = |i: usize| if i == 0 { large } else { small };
    let held = memory(5 * GIB);
    for _ in 0..OVERTAKE_LIMIT {
        // Each small one starts and (for this test) ends at once: room is always there.
        assert_eq!(order.pick(100, held, &budget, queue), Some(1));
    }
    assert_eq!(
        order.pick(100, held, &budget, queue),
        None,
        "overtaken {OVERTAKE_LIMIT} times: nothing more goes before it"
    );
    // Room frees: the large one starts, and the count starts over for the next first call.
    assert_eq!(order.pick(100, memory(GIB), &budget, queue), Some(0));
    assert_eq!(order.pick(100, held, &budget, |_| small), Some(0));
    assert_eq!(order.pick(100, held, &budget, queue), Some(1));
}

#[test]
fn a_call_that_fits_nowhere_now_waits() {
    let mut order = Overtaking::default();
    let sizes = [memory(4 * GIB), memory(3 * GIB)];
    assert_eq!(
        order.pick(2, memory(3 * GIB + 1), &node(), |i| sizes[i]),
        None
    );
}

#[test]
fn cores_count_like_memory() {
    let mut order = Overtaking::default();
    let one_core = Allocation {
        memory_bytes: GIB,
        cores: 1.0,
    };
    let held = Allocation {
        memory_bytes: GIB,
        cores: 1.5,
    };
    assert_eq!(order.pick(1, held, &node(), |_| one_core), None);
    let half = Allocation {
        cores: 0.5,
        ..one_core
    };
    assert_eq!(order.pick(1, held, &node(), |_| half), Some(0));
}

#[test]
fn allocations_default_to_the_node_per_slot_or_the_whole_node() {
    let budget = node();
    let none = Limits::default();
    assert_eq!(
        Allocation::of(&none, None, &budget, 4, false),
        Allocation {
            memory_bytes: 6 * GIB / 4,
            cores: 0.0
        }
    );
    assert_eq!(
        Allocation::of(&none, None, &budget, 4, true).memory_bytes,
        6 * GIB
    );
    // Sized limits (cores among them) come in `limits`; only requested cores are reserved.
    let sized = Limits {
        memory_bytes: Some(300 << 20),
        cores: Some(1.0),
        ..Limits::default()
    };
    assert_eq!(
        Allocation::of(&sized, Some(0.25), &budget, 4, true),
        Allocation {
            memory_bytes: 300 << 20,
            cores: 0.25
        }
    );
    assert_eq!(Allocation::of(&sized, None, &budget, 4, true).cores, 0.0);
}

#[test]
fn a_call_larger_than_the_node_is_told_both_sizes() {
    let budget = node();
    let why = memory(8 * GIB).larger_than(&budget, 0).unwrap();
    assert!(
        why.contains("8192.0 MiB") && why.contains("6144.0 MiB"),
        "{why}"
    );
    let cores = Allocation {
        memory_bytes: GIB,
        cores: 3.0,
    };
    assert!(cores.larger_than(&budget, 0).unwrap().contains("cores (3)"));
    assert_eq!(memory(6 * GIB).larger_than(&budget, 0), None);
}

#[test]
fn what_the_serve_holds_is_not_the_calls() {
    let budget = node();
    let why = memory(6 * GIB).larger_than(&budget, GIB).unwrap();
    assert!(
        why.contains("the serve and its zygote hold 1024.0 MiB"),
        "{why}"
    );
    assert_eq!(memory(5 * GIB).larger_than(&budget, GIB), None);
}

#[test]
fn the_node_is_detected_from_the_machine_and_given_values_win() {
    let detected = NodeBudget::detect(None, None);
    assert!(
        detected.memory_bytes > 0 && detected.cores >= 1.0,
        "{detected:?}"
    );
    let given = NodeBudget::detect(Some(6 * GIB), Some(3.0));
    assert_eq!(
        given,
        NodeBudget {
            cores: 3.0,
            ..node()
        }
    );
}
