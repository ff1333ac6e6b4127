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

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::limits::Limits;
use crate::report::Allocated;

use super::{CallSpec, Reply, Server};

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

/// A call waiting for room, and since when.
pub(super) struct Queued {
    pub spec: CallSpec,
    pub since: Instant,
    /// Known once the call was sized (when it first came up for a start; its limits then hold
    /// its memory allocation): kept until a call ends (the history then has one more row).
    pub allocation: Option<Allocation>,
    /// The limits the request gave, which sizing starts from again.
    requested: Limits,
    /// The server's history_changes when it was sized.
    sized_after: u64,
    /// Why it may not run (its sizing failed, or it is larger than the node): it is refused
    /// when it comes up.
    refusal: Option<String>,
}

impl Queued {
    pub fn new(spec: CallSpec) -> Queued {
        Queued {
            requested: spec.limits.clone(),
            spec,
            since: Instant::now(),
            allocation: None,
            refusal: None,
            sized_after: 0,
        }
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
        for at in 0..waiting.min(BACKFILL_WINDOW) {
            if at > 0 && self.overtaken >= OVERTAKE_LIMIT {
                return None;
            }
            if allocation(at).fits_beside(held, budget) {
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

/// The queue of calls waiting for room.
#[derive(Default)]
pub(super) struct Admission {
    pub queue: VecDeque<Queued>,
    order: Overtaking,
}

impl Admission {
    pub fn head_left(&mut self) {
        self.order.head_left();
    }

    /// A call admitted but not started (its GPUs are busy) goes back first, as it was.
    pub fn put_back(&mut self, spec: CallSpec, allocated: &Allocated) {
        let waited = Duration::from_secs_f64(allocated.queue_wait_seconds);
        let mut queued = Queued::new(spec);
        queued.since = Instant::now()
            .checked_sub(waited)
            .unwrap_or_else(Instant::now);
        queued.allocation = Some(allocation(allocated));
        self.queue.push_front(queued);
    }

    /// A call's next attempt goes first, to wait for room at its new allocation.
    pub fn retry(&mut self, spec: CallSpec) {
        self.queue.push_front(Queued::new(spec));
        self.head_left();
    }
}

impl Server {
    /// The next queued call to start and what it holds of the node; the calls refused on the
    /// way (sizing failed, larger than the node) are replied to.
    pub(super) fn admit(&mut self) -> Option<(CallSpec, Allocated)> {
        loop {
            let serve_bytes = self.serve_resident_bytes();
            let mut held = Allocation::sum(self.running.values().map(|r| allocation(&r.allocated)));
            held.memory_bytes += serve_bytes;
            let mut admission = std::mem::take(&mut self.admission);
            let node = self.options.node;
            let queue = &mut admission.queue;
            let at = admission.order.pick(queue.len(), held, &node, |at| {
                self.allocate(&mut queue[at], serve_bytes)
            });
            self.admission = admission;
            let queued = self.admission.queue.remove(at?)?;
            if let Some(reason) = &queued.refusal {
                self.replies.push(Reply::refused(&queued.spec, reason));
                continue;
            }
            let allocation = queued.allocation?;
            let allocated = Allocated {
                memory_bytes: allocation.memory_bytes,
                cores: allocation.cores,
                queue_wait_seconds: queued.since.elapsed().as_secs_f64(),
                node_memory_bytes: node.memory_bytes,
                node_cores: node.cores,
                serve_memory_bytes: Some(serve_bytes),
            };
            return Some((queued.spec, allocated));
        }
    }

    /// Size a queued call and fix its allocation: as it first comes up, and again after calls
    /// ended (an `auto` call from every call recorded until then, so that calls queued before
    /// their category had a history do not keep the whole node). A refused call takes
    /// nothing, so that it comes up at once. `serve_bytes`: what the serve and its zygote hold,
    /// which no call can have.
    fn allocate(&self, queued: &mut Queued, serve_bytes: u64) -> Allocation {
        const NOTHING: Allocation = Allocation {
            memory_bytes: 0,
            cores: 0.0,
        };
        if queued.refusal.is_some() {
            return NOTHING;
        }
        let first_attempt = queued
            .spec
            .auto
            .as_ref()
            .is_some_and(|a| a.attempts.retried == 0);
        let stale = first_attempt && queued.sized_after != self.history_changes;
        match queued.allocation {
            // What the serve holds may have grown since (its zygote learns): a call that can no
            // longer fit beside it is refused rather than left waiting for ever.
            Some(allocation) if !stale => {
                let node = &self.options.node;
                if let Some(reason) = allocation.larger_than(node, serve_bytes) {
                    queued.refusal = Some(reason);
                    return NOTHING;
                }
                return allocation;
            }
            Some(_) => queued.spec.limits = queued.requested.clone(),
            None => {}
        }
        queued.sized_after = self.history_changes;
        if let Err(message) = self.size(&mut queued.spec, serve_bytes) {
            queued.refusal = Some(message);
            return NOTHING;
        }
        let limits = &mut queued.spec.limits;
        let whole_node = queued.spec.auto.is_some() && limits.memory_bytes.is_none();
        let node = &self.options.node;
        let for_calls = NodeBudget {
            memory_bytes: node.memory_bytes.saturating_sub(serve_bytes),
            cores: node.cores,
        };
        if queued.spec.auto.is_some() && queued.requested.memory_bytes.is_none() {
            // Sized against the whole node when the serve held less (its zygote grows as it
            // learns): a strategy's whole node is what calls can have now.
            if let Some(memory) = limits.memory_bytes.as_mut() {
                *memory = (*memory).min(for_calls.memory_bytes);
            }
        }
        let cores = queued.requested.cores;
        let allocation = Allocation::of(limits, cores, &for_calls, self.options.slots, whole_node);
        if let Some(reason) = allocation.larger_than(node, serve_bytes) {
            queued.refusal = Some(reason);
            return NOTHING;
        }
        limits.memory_bytes.get_or_insert(allocation.memory_bytes);
        queued.allocation = Some(allocation);
        allocation
    }
}

impl Server {
    /// What the serve and its zygote hold resident now, rounded up to 16 MiB (so that what
    /// calls get, and sizing's "whole node", do not move with every page): taken off the memory
    /// calls get.
    pub(super) fn serve_resident_bytes(&self) -> u64 {
        const STEP: u64 = 16 << 20;
        let zygote = self.zygote.as_ref().and_then(|z| resident_bytes(z.pid));
        let bytes = resident_bytes(std::process::id() as i32).unwrap_or(0) + zygote.unwrap_or(0);
        bytes.div_ceil(STEP) * STEP
    }
}

/// A process's resident size (VmRSS, from `statm`: a few counters, where `status` formats
/// some thirty lines at every admission pass); none when /proc no longer has it.
pub(super) fn resident_bytes(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    // SAFETY: sysconf(3) with a valid name.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// The allocation a running call holds, from its Report's record.
pub(super) fn allocation(allocated: &Allocated) -> Allocation {
    Allocation {
        memory_bytes: allocated.memory_bytes,
        cores: allocated.cores,
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
    use crate::backend::files::{mount_point, own_cgroup};
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
