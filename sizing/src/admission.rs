//! Which queued call starts next. The node has a budget (memory and cores: the machine's, or
//! the cgroup the serve runs in, or what `--node-memory`/`--node-cores` say); every call holds
//! an allocation from it while it runs, and a queued call starts only when its allocation fits
//! beside those of the running calls. `--slots` bounds how many run at once, on top.
//!
//! The serve and its zygote live in the same budget (in a job's cgroup they are charged to the
//! same limit as the calls): what they hold resident, read at each decision, is taken off the
//! memory calls are admitted against, so that calls filling their allocations never push the
//! node over its memory.
//!
//! A call's memory allocation is its memory limit (given, or sized from history with `auto`),
//! else the whole node for an `auto` call its category has no history for (the first-allocation
//! rule of Tovar's and cctools' strategies), else the node divided by the slots; it becomes the
//! call's memory limit, so a call that outgrows it is stopped by its own cgroup, never by the
//! kernel acting on the node. Cores are reserved only by a `cores` limit the request gives:
//! oversubscribed memory kills calls, oversubscribed CPU only slows them, and a sized cores
//! limit is a call's peak, which an I/O-bound call holds for a moment of its run.
//!
//! Order: first come, first started, with backfill: when the first queued call does not fit,
//! later ones that fit may start before it, but only [`OVERTAKE_LIMIT`] of them; then nothing
//! overtakes it until it has started, so a large call waits for at most that many small ones.

use std::path::Path;

use lfm_monitor::limits::Limits;

/// How many calls may start before a first queued call that does not fit (docs/serve.md).
pub const OVERTAKE_LIMIT: u32 = 8;
/// How far down the queue a call that fits is looked for: each one looked at is sized, again
/// after every call that ends while it waits.
pub const BACKFILL_WINDOW: usize = 32;

/// What the node has for calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeBudget {
    pub memory_bytes: u64,
    pub cores: f64,
}

impl NodeBudget {
    /// The machine's memory and cores, less where the serve's own cgroup limits them; either
    /// can be given instead.
    pub fn detect(memory_bytes: Option<u64>, cores: Option<f64>) -> NodeBudget {
        NodeBudget {
            memory_bytes: memory_bytes.unwrap_or_else(detected_memory),
            cores: cores.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
            }),
        }
    }
}

/// The memory and cores a running call holds from the node's budget.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Allocation {
    pub memory_bytes: u64,
    pub cores: f64,
}

impl Allocation {
    /// The allocation of a call with these limits (`requested_cores`: the cores its request
    /// gave); `whole_node`: without a memory limit it gets the node's memory (an `auto` call
    /// without history), else the node's share per slot.
    pub fn of(
        limits: &Limits,
        requested_cores: Option<f64>,
        budget: &NodeBudget,
        slots: usize,
        whole_node: bool,
    ) -> Allocation {
        let share = slots.max(1) as u64;
        let default_memory = if whole_node {
            budget.memory_bytes
        } else {
            budget.memory_bytes / share
        };
        Allocation {
            memory_bytes: limits.memory_bytes.unwrap_or(default_memory),
            cores: requested_cores.unwrap_or(0.0),
        }
    }

    pub fn fits_beside(&self, held: Allocation, budget: &NodeBudget) -> bool {
        // A little slack for cores summed from fractions (0.1 + 0.2 + ...).
        held.memory_bytes.saturating_add(self.memory_bytes) <= budget.memory_bytes
            && held.cores + self.cores <= budget.cores + 1e-9
    }

    /// Why this allocation can never start on the node, where the serve itself holds
    /// `serve_bytes`; none when it can.
    pub fn larger_than(&self, budget: &NodeBudget, serve_bytes: u64) -> Option<String> {
        if self.memory_bytes > budget.memory_bytes.saturating_sub(serve_bytes) {
            return Some(format!(
                "the call's memory ({}) is more than the node's ({}, of which the serve and its zygote hold {}): it can never start here",
                mib(self.memory_bytes),
                mib(budget.memory_bytes),
                mib(serve_bytes)
            ));
        }
        if self.cores > budget.cores + 1e-9 {
            return Some(format!(
                "the call's cores ({}) are more than the node's ({}): it can never start here",
                self.cores, budget.cores
            ));
        }
        None
    }

    pub fn sum(allocations: impl Iterator<Item = Allocation>) -> Allocation {
        allocations.fold(
            Allocation {
                memory_bytes: 0,
                cores: 0.0,
            },
            |sum, a| Allocation {
                memory_bytes: sum.memory_bytes + a.memory_bytes,
                cores: sum.cores + a.cores,
            },
        )
    }
}

/// The order calls start in: first come first started, with at most [`OVERTAKE_LIMIT`] calls
/// started before a first queued call that does not fit.
#[derive(Default)]
pub struct Overtaking {
    /// How many calls started before the present first queued call since it first did not fit.
    overtaken: u32,
}

impl Overtaking {
    /// Which of `waiting` queued calls (in queue order) starts now, given what running calls
    /// hold: the first when it fits, else the first later one that fits, while the first has
    /// been overtaken fewer than [`OVERTAKE_LIMIT`] times. `allocation(i)` is call i's.
    pub fn pick(
        &mut self,
        waiting: usize,
        held: Allocation,
        budget: &NodeBudget,
        mut allocation: impl FnMut(usize) -> Allocation,
    ) -> Option<usize> {
        self.pick_where(waiting, |at| allocation(at).fits_beside(held, budget))
    }

    /// [`Overtaking::pick`] for any rule of what fits: `fits(i)`, whether queued call i fits
    /// beside what runs now (`lfm simulate` models memory alone).
    pub fn pick_where(
        &mut self,
        waiting: usize,
        mut fits: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        for at in 0..waiting.min(BACKFILL_WINDOW) {
            if at > 0 && self.overtaken >= OVERTAKE_LIMIT {
                return None;
            }
            if fits(at) {
                self.overtaken = if at == 0 { 0 } else { self.overtaken + 1 };
                return Some(at);
            }
        }
        None
    }

    /// The first queued call changed without starting (dropped, or a retry went before it).
    pub fn head_left(&mut self) {
        self.overtaken = 0;
    }
}

fn detected_memory() -> u64 {
    let total = procfs_memtotal().unwrap_or(u64::MAX);
    total.min(own_cgroup_memory_limit().unwrap_or(u64::MAX))
}

fn procfs_memtotal() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The tightest memory limit on the way from the serve's cgroup up to its hierarchy's root, in
/// the v2 hierarchy (memory.max) and in v1's memory one (memory.limit_in_bytes): a serve in a
/// Slurm job's cgroup has the job's memory.
fn own_cgroup_memory_limit() -> Option<u64> {
    use lfm_monitor::backend::files::{mount_point, own_cgroup};
    let v2 = mount_point("cgroup2", None)
        .zip(own_cgroup(None))
        .and_then(|(root, path)| tightest_upwards(&root, &path, "memory.max"));
    let v1 = mount_point("cgroup", Some("memory"))
        .zip(own_cgroup(Some("memory")))
        .and_then(|(root, path)| tightest_upwards(&root, &path, "memory.limit_in_bytes"));
    v2.into_iter().chain(v1).min()
}

fn tightest_upwards(root: &Path, path: &str, file: &str) -> Option<u64> {
    let mut dir = root.join(path.trim_start_matches('/'));
    let mut tightest: Option<u64> = None;
    while dir.starts_with(root) {
        // "max" (v2) and v1's huge "unlimited" number parse as no limit or as more than the
        // machine has: either way MemTotal wins.
        let limit = std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
        if let Some(limit) = limit {
            tightest = Some(tightest.map_or(limit, |t| t.min(limit)));
        }
        if !dir.pop() {
            break;
        }
    }
    tightest
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests;
