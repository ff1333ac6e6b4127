//! The serve's queue of calls waiting for room: each call is sized as it comes up and holds
//! its allocation from the node's budget while it runs; which one starts next is lfm-sizing's
//! admission rule ([`lfm_sizing::admission`]), the same one `lfm simulate --schedule-*` models.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use lfm_monitor::limits::Limits;
use lfm_monitor::report::Allocated;
use lfm_sizing::admission::{Allocation, NodeBudget, Overtaking};

use super::{CallSpec, Server};
use crate::protocol::Reply;

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
        let zygotes: u64 = self
            .zygotes
            .pids()
            .into_iter()
            .filter_map(resident_bytes)
            .sum();
        let bytes = resident_bytes(std::process::id() as i32).unwrap_or(0) + zygotes;
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_resident_size_is_what_status_says() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let from_statm = super::resident_bytes(std::process::id() as i32).unwrap();
        // Read a moment apart in a test process whose other threads allocate: close, not equal.
        let (a, b) = (kib * 1024, from_statm);
        assert!(a.abs_diff(b) < 64 << 20, "status {a}, statm {b}");
        assert!(super::resident_bytes(i32::MAX).is_none(), "no such process");
    }
}
