//! One interface over the ways a run can be contained and measured.
//!
//! `cgroup2` and `cgroup1` put the command in a fresh cgroup that lfm creates under its own
//! subtree and always removes; the kernel enforces limits and keeps peak counters. `rlimit` needs
//! no privilege: rlimits in the child, and the supervisor measures and enforces from /proc.
//!
//! A cgroup can also outlive its run and hold the next one (`lfm serve`'s pooled slot cgroups,
//! a reused call process): [`Backend::open_window`] begins each later run, after which
//! [`Backend::read`] gives that run's own figures only (counters as differences from the
//! window's start, the kernel's memory peak reset at it).

pub mod cgroup1;
pub mod cgroup2;
mod delegate;
pub mod files;
pub mod rlimit;

use std::os::fd::RawFd;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::limits::Limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    Cgroup2,
    Cgroup1,
    Rlimit,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cgroup2 => "cgroup2",
            BackendKind::Cgroup1 => "cgroup1",
            BackendKind::Rlimit => "rlimit",
        }
    }
}

/// Which limits the kernel enforces for this run; the supervisor enforces the rest itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Enforced {
    pub memory: bool,
    pub cores: bool,
    pub processes: bool,
}

/// Counters a cgroup keeps. `None` where the backend or kernel does not have them.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub memory_current: Option<u64>,
    /// The kernel's own high-water mark of the cgroup's charge, page cache included.
    pub memory_peak: Option<u64>,
    /// What the run could not do without: memory the kernel cannot reclaim without killing
    /// (anonymous and shared memory, kernel memory pinned by the run). Which counters make it
    /// up is backend-specific (docs/report.md).
    pub unreclaimable_bytes: Option<u64>,
    pub anon_bytes: Option<u64>,
    /// Page cache charged to the cgroup: reclaimable, so not part of what the run needs.
    pub file_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub cpu_user_us: Option<u64>,
    pub cpu_system_us: Option<u64>,
    pub cpu_total_us: Option<u64>,
    /// CFS bandwidth control counters: present where the kernel enforces --cores.
    pub throttling: Option<Throttling>,
    pub oom_kills: u64,
    /// Times a fork failed because the pids limit was reached (pids.events `max`).
    pub pids_limit_hits: u64,
}

/// How often the CPU limit held the run back (cpu.stat).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Throttling {
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_us: u64,
}

pub trait Backend: Send {
    fn kind(&self) -> BackendKind;
    /// Descriptors of `cgroup.procs` files the child writes "0" to before exec, so it is inside
    /// the cgroup before it can fork.
    fn join_fds(&self) -> Vec<RawFd>;
    fn enforced(&self) -> Enforced;
    fn read(&self) -> Reading;
    /// Processes in the run's cgroup; `None` when the backend has no cgroup.
    fn pids(&self) -> Option<Vec<i32>>;
    /// Kill every process of the run and return once none is left (or the attempt failed).
    fn kill_all(&self);
    /// Remove the cgroup (after `kill_all`).
    fn remove(&mut self) -> Result<()>;
    /// What the backend could not do as asked (e.g. no memory controller delegated).
    fn notes(&self) -> Vec<String>;
    /// Begin a new run in this live cgroup, which earlier runs used: write `limits` where they
    /// differ from the last run's, reset the kernel's memory peak (where it cannot be reset,
    /// [`Reading::memory_peak`] is `None` for the window and a note says why), and count CPU,
    /// OOM kills, pids events and throttling from now on. Fails where this cgroup cannot hold
    /// `limits` (a v1 hierarchy it did not join, a limit the kernel refused): the caller then
    /// creates a fresh backend, and this one is as it was or has no limits.
    fn open_window(&mut self, limits: &Limits) -> Result<()>;
}

/// Whether two runs' limits write the same cgroup files (the others are the supervisor's).
pub fn same_cgroup_limits(a: &Limits, b: &Limits) -> bool {
    (a.memory_bytes, a.cores, a.processes) == (b.memory_bytes, b.cores, b.processes)
}

impl Reading {
    /// This reading's counters less those of `start` (the window's start): what a run that
    /// began at `start` did. Gauges (memory now, its peak, page cache, swap) are kept as read.
    pub fn since(mut self, start: &Reading) -> Reading {
        let less = |now: Option<u64>, then: Option<u64>| match (now, then) {
            (Some(now), Some(then)) => Some(now.saturating_sub(then)),
            (now, _) => now,
        };
        self.cpu_user_us = less(self.cpu_user_us, start.cpu_user_us);
        self.cpu_system_us = less(self.cpu_system_us, start.cpu_system_us);
        self.cpu_total_us = less(self.cpu_total_us, start.cpu_total_us);
        self.oom_kills = self.oom_kills.saturating_sub(start.oom_kills);
        self.pids_limit_hits = self.pids_limit_hits.saturating_sub(start.pids_limit_hits);
        if let (Some(now), Some(then)) = (self.throttling.as_mut(), start.throttling) {
            now.periods = now.periods.saturating_sub(then.periods);
            now.throttled_periods = now.throttled_periods.saturating_sub(then.throttled_periods);
            now.throttled_us = now.throttled_us.saturating_sub(then.throttled_us);
        }
        self
    }
}

/// `--backend` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Auto,
    Cgroup2,
    Cgroup1,
    Rlimit,
}

/// Create the backend for one run. `Auto` prefers a cgroup v2 hierarchy with the controllers
/// the limits need, then cgroup v1, then a controller-free cgroup v2 (tracking and kill only),
/// then rlimit.
pub fn create(choice: BackendChoice, limits: &Limits) -> Result<Box<dyn Backend>> {
    match choice {
        BackendChoice::Cgroup2 => Ok(Box::new(cgroup2::Cgroup2::create(limits)?)),
        BackendChoice::Cgroup1 => Ok(Box::new(cgroup1::Cgroup1::create(limits)?)),
        BackendChoice::Rlimit => Ok(Box::new(rlimit::Rlimit::new(limits))),
        BackendChoice::Auto => {
            let v2_error = match cgroup2::Cgroup2::create(limits) {
                Ok(v2) if v2.has_memory_controller() => return Ok(Box::new(v2)),
                Ok(mut v2) => match cgroup1::Cgroup1::create(limits) {
                    Ok(v1) => {
                        let _ = v2.remove();
                        return Ok(Box::new(v1));
                    }
                    Err(_) => return Ok(Box::new(v2)),
                },
                Err(error) => error,
            };
            // Say why cgroup v2 was not used where a v2 hierarchy exists (not on pure v1 hosts).
            let note = files::mount_point("cgroup2", None)
                .map(|_| format!("cgroup2 not used: {v2_error:#}"));
            let fallback: Box<dyn Backend> = match cgroup1::Cgroup1::create(limits) {
                Ok(v1) => Box::new(v1),
                Err(_) => Box::new(rlimit::Rlimit::new(limits)),
            };
            Ok(match note {
                Some(note) => Box::new(Noted {
                    inner: fallback,
                    note,
                }),
                None => fallback,
            })
        }
    }
}

/// A backend chosen because another could not be used, with the reason first in its notes.
struct Noted {
    inner: Box<dyn Backend>,
    note: String,
}

impl Backend for Noted {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn join_fds(&self) -> Vec<RawFd> {
        self.inner.join_fds()
    }
    fn enforced(&self) -> Enforced {
        self.inner.enforced()
    }
    fn read(&self) -> Reading {
        self.inner.read()
    }
    fn pids(&self) -> Option<Vec<i32>> {
        self.inner.pids()
    }
    fn kill_all(&self) {
        self.inner.kill_all()
    }
    fn remove(&mut self) -> Result<()> {
        self.inner.remove()
    }
    fn notes(&self) -> Vec<String> {
        let mut notes = vec![self.note.clone()];
        notes.extend(self.inner.notes());
        notes
    }
    fn open_window(&mut self, limits: &Limits) -> Result<()> {
        self.inner.open_window(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_windows_counters_are_differences_and_its_gauges_are_as_read() {
        let start = Reading {
            cpu_total_us: Some(5_000_000),
            cpu_user_us: Some(4_000_000),
            cpu_system_us: None,
            oom_kills: 2,
            pids_limit_hits: 1,
            memory_peak: Some(300 << 20),
            throttling: Some(Throttling {
                periods: 10,
                throttled_periods: 4,
                throttled_us: 1000,
            }),
            ..Reading::default()
        };
        let now = Reading {
            cpu_total_us: Some(5_020_000),
            cpu_user_us: Some(4_010_000),
            cpu_system_us: Some(7_000),
            oom_kills: 2,
            pids_limit_hits: 3,
            memory_peak: Some(10 << 20),
            file_bytes: Some(1 << 20),
            throttling: Some(Throttling {
                periods: 12,
                throttled_periods: 5,
                throttled_us: 1500,
            }),
            ..Reading::default()
        };
        let window = now.since(&start);
        assert_eq!(window.cpu_total_us, Some(20_000));
        assert_eq!(window.cpu_user_us, Some(10_000));
        assert_eq!(window.cpu_system_us, Some(7_000));
        assert_eq!((window.oom_kills, window.pids_limit_hits), (0, 2));
        assert_eq!(window.memory_peak, Some(10 << 20));
        assert_eq!(window.file_bytes, Some(1 << 20));
        assert_eq!(
            window.throttling,
            Some(Throttling {
                periods: 2,
                throttled_periods: 1,
                throttled_us: 500
            })
        );
        // A counter that went backwards (a cgroup recreated under the same name) is 0, never
        // a wrapped figure.
        let behind = Reading::default().since(&start);
        assert_eq!((behind.oom_kills, behind.cpu_total_us), (0, None));
    }
}
