//! Slot cgroups made once and reused (issue 54): making, joining and removing a cgroup per call
//! cost the serve ~3.4 ms of CPU a call on cgroup v1. A finished call's cgroup goes back to the
//! pool once its processes are gone and its directory removed (the janitor does both, off the
//! serve's loop); the next call of the same limits takes it, one of other limits takes any
//! (its limits are rewritten), and the call's monitor opens a new window on it
//! ([`RunMonitor::reusing`]) so that no figure of its Report is an earlier call's.

use std::sync::{Arc, Mutex};

use lfm_monitor::backend::{self, Backend, BackendKind};
use lfm_monitor::limits::Limits;
use lfm_monitor::supervisor::{MonitorOptions, RunMonitor};

/// A cgroup no call holds, and the limits last written to it.
pub(super) struct Pooled {
    pub limits: Limits,
    pub cgroup: Box<dyn Backend>,
}

/// Where the janitor hands released cgroups back to the serve's loop.
pub(super) type Returns = Arc<Mutex<Vec<Pooled>>>;

#[derive(Default)]
pub(super) struct Pool {
    idle: Vec<Pooled>,
    returns: Returns,
}

impl Pool {
    pub fn returns(&self) -> Returns {
        Arc::clone(&self.returns)
    }

    /// A monitor for `options` in a pooled cgroup, else in a fresh one. `keep` is how many idle
    /// cgroups are worth keeping (the slots and their spares); the rest go to `discard`.
    pub fn monitor(
        &mut self,
        options: MonitorOptions,
        keep: usize,
        discard: impl FnMut(Box<dyn Backend>),
    ) -> anyhow::Result<RunMonitor> {
        self.collect_returns(keep, discard);
        while let Some(pooled) = self.take(&options.limits) {
            // One that cannot hold these limits is dropped, which removes it (it is empty).
            if let Ok(monitor) = RunMonitor::reusing(options.clone(), pooled.cgroup, 0) {
                return Ok(monitor);
            }
        }
        RunMonitor::create(options, 0)
    }

    /// The longest idle cgroup whose limits are `limits`, else the longest idle one.
    fn take(&mut self, limits: &Limits) -> Option<Pooled> {
        let at = self
            .idle
            .iter()
            .position(|p| backend::same_cgroup_limits(&p.limits, limits))
            .or_else(|| (!self.idle.is_empty()).then_some(0))?;
        Some(self.idle.remove(at))
    }

    fn collect_returns(&mut self, keep: usize, mut discard: impl FnMut(Box<dyn Backend>)) {
        let returned = std::mem::take(&mut *self.returns.lock().unwrap_or_else(|p| p.into_inner()));
        self.idle.extend(returned);
        while self.idle.len() > keep {
            discard(self.idle.pop().expect("more than kept").cgroup);
        }
    }

    /// Every idle cgroup, for removal (the serve ends).
    pub fn drain(&mut self) -> Vec<Box<dyn Backend>> {
        self.collect_returns(usize::MAX, |_| {});
        self.idle.drain(..).map(|p| p.cgroup).collect()
    }
}

/// Whether a cgroup of this kind is worth pooling: rlimit has none to make.
pub(super) fn poolable(kind: BackendKind) -> bool {
    kind != BackendKind::Rlimit
}

#[cfg(test)]
mod tests {
    use super::*;
    use lfm_monitor::backend::rlimit::Rlimit;

    fn pooled(memory: Option<u64>) -> Pooled {
        let limits = Limits {
            memory_bytes: memory,
            ..Limits::default()
        };
        Pooled {
            cgroup: Box::new(Rlimit::new(&limits)),
            limits,
        }
    }

    fn returned(pool: &Pool, memories: &[Option<u64>]) {
        let mut returns = pool.returns.lock().unwrap();
        returns.extend(memories.iter().map(|&m| pooled(m)));
    }

    #[test]
    fn a_call_takes_a_cgroup_of_its_limits_else_the_longest_idle_one() {
        let mut pool = Pool::default();
        returned(&pool, &[Some(1), Some(2), Some(3)]);
        pool.collect_returns(8, |_| panic!("nothing over the cap"));
        let two = Limits {
            memory_bytes: Some(2),
            // Not a cgroup's limit: any wall time shares the cgroup.
            wall_seconds: Some(9.0),
            ..Limits::default()
        };
        assert_eq!(pool.take(&two).unwrap().limits.memory_bytes, Some(2));
        assert_eq!(pool.take(&two).unwrap().limits.memory_bytes, Some(1));
        assert_eq!(pool.take(&two).unwrap().limits.memory_bytes, Some(3));
        assert!(pool.take(&two).is_none());
    }

    #[test]
    fn cgroups_over_what_the_slots_need_are_discarded_and_the_rest_go_at_the_end() {
        let mut pool = Pool::default();
        returned(&pool, &[None, None, None]);
        let mut discarded = 0;
        pool.collect_returns(2, |_| discarded += 1);
        assert_eq!((discarded, pool.idle.len()), (1, 2));
        returned(&pool, &[None]);
        assert_eq!(pool.drain().len(), 3);
        assert!(pool.take(&Limits::default()).is_none());
    }
}
