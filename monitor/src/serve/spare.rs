//! Spare calls: a child forked and set up (in its cgroup, sandbox and stdio) before its request
//! exists, so that the next call skips the fork, the cgroup migration (on cgroup v1 an RCU
//! grace period, ~10 ms) and the setup. A spare is made between calls with the limits of the
//! last call, and only a call with exactly those limits takes it: the cgroup's limits and the
//! child's rlimits were set for them.

use std::path::PathBuf;
use std::time::Instant;

use crate::backend::BackendChoice;
use crate::gpu::meter::GpuMeter;
use crate::limits::Limits;
use crate::supervisor::{self, Ending, MonitorOptions, RunMonitor};

use super::{prepare_call_dir, CallSpec, Running, Server};

pub(super) struct Spare {
    id: u64,
    limits: Limits,
    monitor: RunMonitor,
    dir: PathBuf,
    /// Known once the zygote said it forked: only then is the spare taken.
    pid: Option<i32>,
}

impl Server {
    /// Make a spare for the next call when none is waiting and the limits to expect are
    /// known: the first queued call's, else the last started one's. With every slot busy it
    /// is set up while they run, ready when one frees. Failing is harmless: calls then fork
    /// as they come.
    pub fn prepare_spare(&mut self) {
        let ready = self.spare.is_none() && self.options.backend != BackendChoice::Auto;
        let expected = self
            .queue
            .front()
            .map(|next| &next.limits)
            .or(self.last_limits.as_ref());
        let (Some(limits), Some(zygote), true) = (expected, &self.zygote, ready) else {
            return;
        };
        self.next_id += 1;
        let id = self.next_id;
        let dir = self.options.zygote.work_dir.join(format!("call-{id}"));
        let options = MonitorOptions {
            command: Vec::new(),
            category: None,
            limits: limits.clone(),
            backend: self.options.backend,
            sandbox: Some(dir.join("sandbox")),
            series: None,
            forked: true,
        };
        let made = std::fs::create_dir_all(dir.join("sandbox"))
            .map_err(anyhow::Error::from)
            .and_then(|()| RunMonitor::create(options, 0));
        let monitor = match made {
            Ok(monitor) => monitor,
            Err(_) => {
                let _ = std::fs::remove_dir_all(&dir);
                return;
            }
        };
        let rlimits = supervisor::child_rlimits(limits, monitor.backend());
        if zygote
            .spare(id, &dir, &monitor.join_fds(), &rlimits)
            .is_err()
        {
            discard(monitor, None, &dir);
            return;
        }
        self.spare = Some(Spare {
            id,
            limits: limits.clone(),
            monitor,
            dir,
            pid: None,
        });
    }

    /// The zygote forked spare `id`: true when it was the spare.
    pub(super) fn spare_started(&mut self, id: u64, pid: i32) -> bool {
        match self.spare.as_mut().filter(|s| s.id == id) {
            Some(spare) => {
                spare.pid = Some(pid);
                spare.monitor.set_process(pid);
                true
            }
            None => false,
        }
    }

    /// The spare's child ended before it was given a call (killed from outside, or the
    /// zygote's end): it is dropped.
    pub(super) fn spare_exited(&mut self, id: u64) -> bool {
        if self.spare.as_ref().is_some_and(|s| s.id == id) {
            self.drop_spare();
            return true;
        }
        false
    }

    pub(super) fn drop_spare(&mut self) {
        if let Some(spare) = self.spare.take() {
            if let Some(zygote) = &self.zygote {
                zygote.drop_spare(spare.id);
            }
            discard(spare.monitor, spare.pid, &spare.dir);
        }
    }

    /// Start `spec` (with its devices) in the spare when it has the same limits; both back
    /// otherwise (and a spare made for other limits is dropped).
    pub(super) fn start_in_spare(
        &mut self,
        spec: CallSpec,
        gpus: Option<GpuMeter>,
    ) -> Option<(CallSpec, Option<GpuMeter>)> {
        let usable = self
            .spare
            .as_ref()
            .is_some_and(|s| s.pid.is_some() && s.limits == spec.limits);
        if !usable {
            if self.spare.as_ref().is_some_and(|s| s.pid.is_some()) {
                self.drop_spare();
            }
            return Some((spec, gpus));
        }
        let Some(mut spare) = self.spare.take() else {
            return Some((spec, gpus));
        };
        let zygote = self.zygote.as_ref().expect("a spare lives in a zygote");
        let visible = gpus.as_ref().map(GpuMeter::visible_devices);
        let request = match prepare_call_dir(&spare.dir, &spec, visible) {
            Ok(request) => request,
            Err(_) => {
                self.spare = Some(spare);
                self.drop_spare();
                return Some((spec, gpus));
            }
        };
        if zygote.go(spare.id, &request).is_err() {
            self.spare = Some(spare);
            self.drop_spare();
            return Some((spec, gpus));
        }
        let pid = spare.pid.expect("checked above");
        spare.monitor.relabel(
            vec!["serve".into(), spec.function.target.clone()],
            spec.category.clone(),
        );
        if let Some(meter) = gpus {
            spare.monitor.attach_gpus(meter);
        }
        spare.monitor.started(Some(pid));
        let next_sample = Instant::now() + spare.monitor.interval();
        self.running.insert(
            spare.id,
            Running {
                spec,
                monitor: spare.monitor,
                dir: spare.dir,
                pid: Some(pid),
                next_sample,
                abandoned: false,
            },
        );
        None
    }
}

/// Kill the spare (once its pid is known: before, the zygote's "drop" ends it) and remove its
/// cgroup and directory.
fn discard(monitor: RunMonitor, pid: Option<i32>, dir: &std::path::Path) {
    if pid.is_some() {
        monitor.kill();
    }
    let _ = monitor.finish(Ending::default());
    let _ = std::fs::remove_dir_all(dir);
}
