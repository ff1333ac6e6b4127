//! A node's calls replayed in time: what a trace's makespan would be when `lfm serve` admits
//! each call by its sized memory (docs/serve.md "Admission") and its calls share the node's
//! cores. [`super::simulate`] prices allocations as if they packed perfectly; a real node also
//! queues (first come, first started, with bounded backfill), retries take the head of the
//! queue, and the CPU a call needs stretches its wall time when more calls want CPU than the
//! node has cores.
//!
//! A call is a CPU phase (`cpu` seconds of one core, in which it allocates its peak) followed
//! by a wait of `hold` seconds that needs no CPU (I/O, sleeping). Calls in their CPU phase
//! share the cores equally. A call whose allocation is below its peak fails when it has
//! allocated its allocation (that share of its CPU phase) and goes back first at its next
//! allocation.

use std::collections::VecDeque;

use super::{Resource, Sizer, Strategy};
// The serve's own order, so that the model cannot drift from what it models.
use crate::admission::Overtaking;

/// One call of a trace, in arrival order (all submitted at once).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Call {
    pub category: usize,
    /// Peak memory, MB.
    pub used: f64,
    pub cpu: f64,
    pub hold: f64,
    pub input: Option<f64>,
}

/// The node the calls run on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeShape {
    pub memory: f64,
    pub cores: f64,
    pub slots: usize,
}

/// How each call's memory allocation is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sizing {
    /// Every call the same allocation (the whole node: one at a time).
    Fixed(f64),
    /// Each call its own peak, the first time.
    Oracle,
    /// Per category, online from the calls of that category finished before.
    Strategy(Strategy),
}

/// What a schedule gave.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Timeline {
    pub sizing: String,
    pub makespan: f64,
    pub retries: usize,
    /// Σ peak × time in memory / (node memory × makespan).
    pub memory_used: f64,
    /// Σ allocation × time in memory / (node memory × makespan).
    pub memory_allocated: f64,
}

struct Attempt {
    call: usize,
    /// Known once a retry set it; a first attempt is sized when it comes up.
    allocation: Option<f64>,
}

struct Running {
    call: usize,
    allocation: f64,
    started: f64,
    cpu_left: f64,
    hold_left: f64,
    fails: bool,
}

struct State<'a> {
    calls: &'a [Call],
    node: NodeShape,
    sizing: Sizing,
    sizers: Vec<Sizer>,
    queue: VecDeque<Attempt>,
    running: Vec<Running>,
    order: Overtaking,
    now: f64,
    retries: usize,
    used_time: f64,
    allocated_time: f64,
}

/// A trace's rows as calls in file order, with the number of categories: `memory` (MB) its
/// peak, `cpu_time` its CPU phase, `wall_time` less that its wait (both seconds, 0 without).
pub fn calls_of(trace: &super::trace::Trace) -> Result<(Vec<Call>, usize), String> {
    let memory = trace.column("memory")?;
    let at = |name: &str| trace.columns.iter().position(|c| c == name);
    let (cpu, wall) = (at("cpu_time"), at("wall_time"));
    let input = at(super::trace::INPUT_BYTES);
    let mut names: Vec<&str> = Vec::new();
    let mut calls = Vec::with_capacity(trace.rows.len());
    for (category, values) in &trace.rows {
        let index = match names.iter().position(|n| *n == category.as_str()) {
            Some(index) => index,
            None => {
                names.push(category);
                names.len() - 1
            }
        };
        let cpu = cpu.map_or(0.0, |c| values[c].max(0.0));
        let wall = wall.map_or(cpu, |w| values[w].max(0.0));
        calls.push(Call {
            category: index,
            used: values[memory],
            cpu,
            hold: (wall - cpu).max(0.0),
            input: input.map(|i| values[i]),
        });
    }
    Ok((calls, names.len()))
}

/// Replay `calls` (`categories` distinct) on `node`, each sized by `sizing`.
pub fn schedule(calls: &[Call], categories: usize, sizing: Sizing, node: NodeShape) -> Timeline {
    let resource = Resource::memory_mb(node.memory);
    let sizers = match sizing {
        Sizing::Strategy(strategy) => (0..categories)
            .map(|_| Sizer::new(strategy, resource))
            .collect(),
        _ => Vec::new(),
    };
    let mut state = State {
        calls,
        node,
        sizing,
        sizers,
        queue: (0..calls.len())
            .map(|call| Attempt {
                call,
                allocation: None,
            })
            .collect(),
        running: Vec::new(),
        order: Overtaking::default(),
        now: 0.0,
        retries: 0,
        used_time: 0.0,
        allocated_time: 0.0,
    };
    loop {
        state.admit();
        if state.running.is_empty() {
            break;
        }
        state.advance();
    }
    let whole = node.memory * state.now;
    Timeline {
        sizing: name(sizing),
        makespan: state.now,
        retries: state.retries,
        memory_used: if whole > 0.0 {
            state.used_time / whole
        } else {
            0.0
        },
        memory_allocated: if whole > 0.0 {
            state.allocated_time / whole
        } else {
            0.0
        },
    }
}

fn name(sizing: Sizing) -> String {
    match sizing {
        Sizing::Fixed(value) => format!("fixed {value:.0} MB"),
        Sizing::Oracle => "oracle".into(),
        Sizing::Strategy(strategy) => strategy.name().into(),
    }
}

impl State<'_> {
    /// The allocation the call of queue position `at` would start with now.
    fn allocation(&mut self, at: usize) -> f64 {
        let attempt = &self.queue[at];
        let call = self.calls[attempt.call];
        let value = match (attempt.allocation, self.sizing) {
            (Some(value), _) => value,
            (None, Sizing::Fixed(value)) => value,
            (None, Sizing::Oracle) => call.used,
            (None, Sizing::Strategy(_)) => {
                self.sizers[call.category].first_allocation_for(call.input)
            }
        };
        value.min(self.node.memory)
    }

    /// Start queued calls while they fit, in the serve's order (lfm_sizing::admission).
    fn admit(&mut self) {
        while self.running.len() < self.node.slots && !self.queue.is_empty() {
            let held: f64 = self.running.iter().map(|r| r.allocation).sum();
            let room = self.node.memory + 1e-9;
            let mut order = std::mem::take(&mut self.order);
            let picked =
                order.pick_where(self.queue.len(), |at| held + self.allocation(at) <= room);
            self.order = order;
            let Some(at) = picked else {
                return;
            };
            let allocation = self.allocation(at);
            let attempt = self.queue.remove(at).expect("a queued call");
            self.start(attempt.call, allocation);
        }
    }

    fn start(&mut self, call: usize, allocation: f64) {
        let spec = self.calls[call];
        let fails = spec.used > allocation && allocation < self.node.memory;
        // A call allocates its peak over its CPU phase: one that cannot fails at its limit.
        let cpu = if fails {
            spec.cpu * allocation / spec.used
        } else {
            spec.cpu
        };
        self.running.push(Running {
            call,
            allocation,
            started: self.now,
            cpu_left: cpu,
            hold_left: if fails { 0.0 } else { spec.hold },
            fails,
        });
    }

    /// Move time to the next end of a phase, and end the calls whose phases ended.
    fn advance(&mut self) {
        let in_cpu = self.running.iter().filter(|r| r.cpu_left > 0.0).count();
        let rate = if in_cpu == 0 {
            1.0
        } else {
            (self.node.cores / in_cpu as f64).min(1.0)
        };
        let step = self
            .running
            .iter()
            .map(|r| {
                if r.cpu_left > 0.0 {
                    r.cpu_left / rate
                } else {
                    r.hold_left
                }
            })
            .fold(f64::INFINITY, f64::min)
            .max(0.0);
        self.now += step;
        for running in &mut self.running {
            if running.cpu_left > 0.0 {
                running.cpu_left = (running.cpu_left - step * rate).max(0.0);
                if running.cpu_left < 1e-12 {
                    running.cpu_left = 0.0;
                }
            } else {
                running.hold_left = (running.hold_left - step).max(0.0);
                if running.hold_left < 1e-12 {
                    running.hold_left = 0.0;
                }
            }
        }
        let (done, still): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| r.cpu_left == 0.0 && r.hold_left == 0.0);
        self.running = still;
        for ended in done {
            self.end(ended);
        }
    }

    fn end(&mut self, ended: Running) {
        let call = self.calls[ended.call];
        let time = self.now - ended.started;
        self.allocated_time += ended.allocation * time;
        let weight = (call.cpu + call.hold).max(f64::MIN_POSITIVE);
        if ended.fails {
            self.retries += 1;
            let next = match self.sizing {
                Sizing::Strategy(_) => {
                    let sizer = &mut self.sizers[call.category];
                    sizer.record_task(ended.allocation, weight, true, call.input);
                    sizer.retry_allocation(ended.allocation)
                }
                _ => self.node.memory,
            };
            self.queue.push_front(Attempt {
                call: ended.call,
                allocation: Some(next.max(ended.allocation).min(self.node.memory)),
            });
            self.order.head_left();
            return;
        }
        self.used_time += call.used.min(ended.allocation) * time;
        if let Sizing::Strategy(_) = self.sizing {
            self.sizers[call.category].record_task(call.used, weight, false, call.input);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(category: usize, used: f64, cpu: f64, hold: f64) -> Call {
        Call {
            category,
            used,
            cpu,
            hold,
            input: None,
        }
    }

    fn node(memory: f64, cores: f64) -> NodeShape {
        NodeShape {
            memory,
            cores,
            slots: 64,
        }
    }

    #[test]
    fn calls_that_only_wait_pack_by_memory() {
        // Four calls of 300 MB holding 2 s on a 1000 MB node: three at once, then one.
        let calls = vec![call(0, 300.0, 0.0, 2.0); 4];
        let timeline = schedule(&calls, 1, Sizing::Oracle, node(1000.0, 2.0));
        assert!((timeline.makespan - 4.0).abs() < 1e-9, "{timeline:?}");
        let fixed = schedule(&calls, 1, Sizing::Fixed(1000.0), node(1000.0, 2.0));
        assert!((fixed.makespan - 8.0).abs() < 1e-9, "{fixed:?}");
    }

    #[test]
    fn calls_that_want_more_cpu_than_the_node_has_share_it() {
        // Four calls of 1 s of CPU on 2 cores, all fitting: each runs at half speed, 2 s.
        let calls = vec![call(0, 100.0, 1.0, 0.0); 4];
        let timeline = schedule(&calls, 1, Sizing::Oracle, node(1000.0, 2.0));
        assert!((timeline.makespan - 2.0).abs() < 1e-9, "{timeline:?}");
        // Then a wait: the CPU phases overlap, the waits do not need the cores.
        let calls = vec![call(0, 100.0, 1.0, 3.0); 4];
        let timeline = schedule(&calls, 1, Sizing::Oracle, node(1000.0, 2.0));
        assert!((timeline.makespan - 5.0).abs() < 1e-9, "{timeline:?}");
    }

    #[test]
    fn a_call_over_its_allocation_fails_at_its_limit_and_goes_back_first() {
        // 500 MB needed, 250 given: fails after half its 1 s of CPU, then the node's 1000 MB.
        let calls = [call(0, 500.0, 1.0, 1.0)];
        let timeline = schedule(&calls, 1, Sizing::Fixed(250.0), node(1000.0, 2.0));
        assert_eq!(timeline.retries, 1);
        assert!((timeline.makespan - 2.5).abs() < 1e-9, "{timeline:?}");
    }

    #[test]
    fn a_strategy_sizes_each_call_from_the_calls_finished_before_it() {
        // max-seen gives the node to the first call of a category, then the largest seen
        // plus a third of a bucket: 20 small calls after one run one at a time, then packed.
        let calls = vec![call(0, 100.0, 0.0, 1.0); 21];
        let timeline = schedule(
            &calls,
            1,
            Sizing::Strategy(Strategy::MaxSeen),
            node(1000.0, 2.0),
        );
        assert_eq!(timeline.retries, 0);
        // 100 MB + a third of a 250 MB bucket, rounded up: 250 MB, four at a time.
        assert!((timeline.makespan - 6.0).abs() < 1e-9, "{timeline:?}");
        assert!(timeline.memory_allocated <= 1.0 + 1e-9);
    }
}
