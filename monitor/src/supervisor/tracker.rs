//! Aggregates over a run's samples: peaks of the process tree and the CPU-use history.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::proctree::ProcessSample;

/// Window over which peak cores are computed, and the shortest one used to enforce cores.
pub const CORES_WINDOW: Duration = Duration::from_millis(250);
pub const CORES_ENFORCE_WINDOW: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct Tracker {
    /// (pid, start ticks) -> last counters, for every process ever seen.
    pub seen: HashMap<(i32, u64), ProcessSample>,
    pub max_concurrent: u64,
    pub peak_vmhwm_sum: u64,
    pub peak_rss_sum: u64,
    pub peak_vm_sum: u64,
    pub peak_swap_sum: u64,
    pub max_reaped_maxrss: u64,
    cpu_history: VecDeque<(Instant, f64)>,
    pub peak_cores: f64,
    /// Largest anon / file-cache charge seen in the cgroup (memory.stat is empty after exit).
    pub peak_anon: Option<u64>,
    pub peak_file: Option<u64>,
    /// Largest memory the run could not do without, as sampled (cgroup counters, plus the
    /// RSS of processes outside the cgroup); `None` until a sample had cgroup counters.
    pub peak_unreclaimable: Option<u64>,
    /// Largest sampled memory figure of any kind (the rlimit backend's only one for forks).
    pub peak_private: u64,
}

impl Tracker {
    pub fn observe(&mut self, processes: &[ProcessSample]) {
        self.max_concurrent = self.max_concurrent.max(processes.len() as u64);
        let sum = |field: fn(&ProcessSample) -> u64| processes.iter().map(field).sum::<u64>();
        self.peak_vmhwm_sum = self.peak_vmhwm_sum.max(sum(|p| p.hwm_bytes));
        self.peak_rss_sum = self.peak_rss_sum.max(sum(|p| p.rss_bytes));
        self.peak_vm_sum = self.peak_vm_sum.max(sum(|p| p.vm_bytes));
        self.peak_swap_sum = self.peak_swap_sum.max(sum(|p| p.swap_bytes));
        for process in processes {
            self.seen
                .insert((process.pid, process.start_ticks), process.clone());
        }
    }

    pub fn observe_cpu(&mut self, at: Instant, cpu_seconds: f64) {
        self.cpu_history.push_back((at, cpu_seconds));
        // Keep enough history for the enforcement window.
        while let Some(&(old, _)) = self.cpu_history.front() {
            if at.duration_since(old) > CORES_ENFORCE_WINDOW * 2 && self.cpu_history.len() > 2 {
                self.cpu_history.pop_front();
            } else {
                break;
            }
        }
        let window = self.cores_over(CORES_WINDOW);
        self.peak_cores = self.peak_cores.max(window);
    }

    /// CPU use over the most recent span of at least `window` (0 until that much history).
    pub fn cores_over(&self, window: Duration) -> f64 {
        let Some(&(now, cpu_now)) = self.cpu_history.back() else {
            return 0.0;
        };
        let start = self
            .cpu_history
            .iter()
            .rev()
            .find(|(t, _)| now.duration_since(*t) >= window);
        match start {
            Some(&(then, cpu_then)) => {
                (cpu_now - cpu_then).max(0.0) / now.duration_since(then).as_secs_f64()
            }
            None => 0.0,
        }
    }

    pub fn recent_cores(&self) -> f64 {
        self.cores_over(CORES_WINDOW)
    }

    /// Storage bytes read and written by every process seen (its last counters).
    pub fn io_of_seen(&self) -> (u64, u64) {
        self.seen
            .values()
            .fold((0, 0), |(r, w), p| (r + p.read_bytes, w + p.write_bytes))
    }

    /// The tree's VmHWM high-water mark: per-process peaks summed, or the largest reaped
    /// process's ru_maxrss.
    pub fn vmhwm_peak(&self) -> u64 {
        self.peak_vmhwm_sum.max(self.max_reaped_maxrss)
    }
}
