//! Spare calls: a child forked and set up (in its cgroup, sandbox and stdio) before its request
//! exists, so that the next call skips the fork, the cgroup migration (on cgroup v1 an RCU
//! grace period, ~10 ms) and the setup. Up to one spare per slot is made between calls with
//! the limits of the next queued call or of the last one, and only a call with exactly those
//! limits takes one: the cgroup's limits and the child's rlimits were set for them.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Instant;

use lfm_monitor::backend::BackendChoice;
use lfm_monitor::gpu::meter::GpuMeter;
use lfm_monitor::limits::Limits;
use lfm_monitor::supervisor::{self, Ending, RunMonitor};

use super::zygote;
use super::{call_request, label, CallSpec, Running, Server};

pub(super) struct Spare {
    id: u64,
    /// The place of the zygote that forks it.
    pub(super) zygote: usize,
    limits: Limits,
    monitor: RunMonitor,
    dir: PathBuf,
    /// Known once the zygote said it forked: only then is the spare taken.
    pid: Option<i32>,
    /// Where the child will say its call is over, and where its request goes: dropping `go`
    /// unwritten sends the spare away.
    done: Option<OwnedFd>,
    go: Option<OwnedFd>,
}

impl Server {
    /// Make one more spare when fewer than one per slot wait and the limits to expect are
    /// known: the first queued call's, else the last started one's. With every slot busy they
    /// are set up while the calls run, ready when a slot frees. Failing is harmless: calls then
    /// fork as they come.
    pub fn prepare_spare(&mut self) {
        self.send_learned_before_fork();
        let ready = self.spares.len() < self.options.slots.max(1)
            && self.options.backend != BackendChoice::Auto;
        // The first queued call's limits are known once it was sized for its allocation.
        let expected = self
            .admission
            .queue
            .front()
            .filter(|next| next.allocation.is_some())
            .map(|next| &next.spec.limits)
            .or(self.last_limits.as_ref())
            .cloned();
        let (Some(limits), true) = (expected, ready) else {
            return;
        };
        let Some(at) = self.zygotes.least_loaded(|at| self.load_of(at)) else {
            return;
        };
        self.next_id += 1;
        let id = self.next_id;
        let dir = self.options.zygote.work_dir.join(format!("call-{id}"));
        let made = super::make_call_dirs(&dir)
            .map_err(anyhow::Error::from)
            .and_then(|()| self.monitor_for(&limits, &dir));
        let monitor = match made {
            Ok(monitor) => monitor,
            Err(_) => {
                let _ = std::fs::remove_dir_all(&dir);
                return;
            }
        };
        let rlimits = supervisor::child_rlimits(&limits, monitor.backend());
        let zygote = self.zygotes.get(at).expect("a live zygote's place");
        if zygote
            .spare(id, &dir, &monitor.join_fds(), &rlimits)
            .is_err()
        {
            discard(monitor, None, &dir);
            return;
        }
        self.spares.push(Spare {
            id,
            zygote: at,
            limits,
            monitor,
            dir,
            pid: None,
            done: None,
            go: None,
        });
    }

    /// The zygote forked spare `id` (one sent away meanwhile leaves as its `go` is dropped).
    pub(super) fn spare_started(
        &mut self,
        id: u64,
        pid: i32,
        done: Option<OwnedFd>,
        go: Option<OwnedFd>,
    ) {
        if let Some(spare) = self.spares.iter_mut().find(|s| s.id == id) {
            spare.pid = Some(pid);
            spare.monitor.set_process(pid);
            spare.done = done;
            spare.go = go;
        } else if let Some(spare) = self.retired.iter_mut().find(|s| s.id == id) {
            spare.pid = Some(pid);
        }
    }

    /// The spare's child ended before it was given a call (killed from outside, or the
    /// zygote's end): it is dropped.
    pub(super) fn spare_exited(&mut self, id: u64) -> bool {
        for list in [&mut self.spares, &mut self.retired] {
            if let Some(at) = list.iter().position(|s| s.id == id) {
                let spare = list.swap_remove(at);
                discard(spare.monitor, None, &spare.dir);
                return true;
            }
        }
        false
    }

    /// Send every spare away (the server stops, or the zygote died) and clean up after them.
    pub(super) fn drop_spares(&mut self) {
        let spares = std::mem::take(&mut self.spares);
        let retired = std::mem::take(&mut self.retired);
        for spare in spares.into_iter().chain(retired) {
            discard(spare.monitor, spare.pid, &spare.dir);
        }
    }

    /// Send a spare away without waiting: closing its go pipe, it reads end-of-file and exits,
    /// and its cgroup and directory go when the zygote reports it reaped
    /// ([`Server::spare_exited`]), off the path of the call that found it unfit.
    pub(super) fn drop_spare(&mut self, mut spare: Spare) {
        spare.go = None;
        spare.done = None;
        match self.zygotes.get(spare.zygote) {
            Some(_) => self.retired.push(spare),
            None => discard(spare.monitor, spare.pid, &spare.dir),
        }
    }

    /// Start `spec` (with its devices) in the spare when it has the same limits; both back
    /// otherwise (and a spare made for other limits is dropped).
    pub(super) fn start_in_spare(
        &mut self,
        spec: CallSpec,
        gpus: Option<GpuMeter>,
        allocated: &lfm_monitor::report::Allocated,
    ) -> Option<(CallSpec, Option<GpuMeter>)> {
        let ready = |s: &Spare| s.pid.is_some() && s.go.is_some();
        // Of the fitting spares, one of the zygote running the fewest calls: the calls'
        // exits (and the next forks) are then spread over the zygotes.
        let running_on =
            |zygote: usize| self.running.values().filter(|r| r.zygote == zygote).count();
        let Some(at) = (0..self.spares.len())
            .filter(|&at| ready(&self.spares[at]) && self.spares[at].limits == spec.limits)
            .min_by_key(|&at| running_on(self.spares[at].zygote))
        else {
            // Ready spares made for other limits would wait for calls like the last one: the
            // calls have changed, make them again.
            let (stale, keep) = std::mem::take(&mut self.spares)
                .into_iter()
                .partition(|s| ready(s));
            self.spares = keep;
            for spare in stale {
                self.drop_spare(spare);
            }
            return Some((spec, gpus));
        };
        let mut spare = self.spares.swap_remove(at);
        let visible = gpus.as_ref().map(GpuMeter::visible_devices);
        let request = call_request(&spare.dir, &spec, visible, self.options.backend);
        let go = spare.go.take().expect("checked above");
        if zygote::go(go, &request, &spare.dir.join("request.json")).is_err() {
            self.drop_spare(spare);
            return Some((spec, gpus));
        }
        if let Some(zygote) = self.zygotes.get(spare.zygote) {
            zygote.remember(&spec.target);
        }
        let pid = spare.pid.expect("checked above");
        label(&mut spare.monitor, &spec);
        if let Some(meter) = gpus {
            spare.monitor.attach_gpus(meter);
        }
        spare.monitor.started(Some(pid));
        let next_sample = Instant::now() + spare.monitor.interval();
        let spec_reuse = spec.reuse;
        self.running.insert(
            spare.id,
            Running {
                spec,
                zygote: spare.zygote,
                monitor: spare.monitor,
                dir: spare.dir,
                pid: Some(pid),
                next_sample,
                abandoned: false,
                done: spare.done,
                delivered: None,
                import_log_read: 0,
                allocated: allocated.clone(),
                process: spec_reuse.then(super::reuse::InProcess::fresh),
            },
        );
        None
    }
}

/// Kill the spare if it may still run (once its pid is known: before, dropping its go pipe,
/// or the end of the zygote's socket with the pipe in it, ends it) and remove its cgroup and
/// directory.
fn discard(monitor: RunMonitor, pid: Option<i32>, dir: &std::path::Path) {
    if pid.is_some() {
        monitor.kill();
    }
    let _ = monitor.finish(Ending::default());
    let _ = std::fs::remove_dir_all(dir);
}
