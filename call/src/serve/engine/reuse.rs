//! Reused call processes: the request's `reuse` (docs/serve.md "Reused processes").
//!
//! A call of a reuse function whose child ran it to the end keeps that child: it waits on its
//! done socket (python/lfm_runner/reuse.py) and holds its slot. The next call of the same
//! function, context and limits runs in it: module globals, loaded models and a GPU driver's
//! context are there. Each call still has its own call directory, monitor and Report:
//! - the process stays in its cgroup, on which each call opens a new window
//!   ([`RunMonitor::reusing`]): the call's limits written, the kernel's memory peak reset, CPU
//!   and the other counters read as differences from the call's start. Memory that earlier
//!   calls left (a model in a global) stays charged: it counts towards each call's memory
//!   limit and peak, as it would in a long-lived worker;
//! - the child resets its VmHWM and counts its I/O from the call's start; its CPU totals are
//!   counted here as the rise over the previous call's (its exit's totals too, when it dies);
//! - a call that does not end as it should (a limit, a signal, a crash) takes the process with
//!   it: the next call forks a fresh one, and its Report says so (`reused: false`).
//!
//! An idle process is ended when a call of another function needs its slot, and when the
//! serve ends (or replaces its zygotes).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use lfm_monitor::backend::Backend;
use lfm_monitor::gpu::meter::GpuMeter;
use lfm_monitor::limits::Limits;
use lfm_monitor::report::{Allocated, ProcessUse, Report};
use lfm_monitor::supervisor::{MonitorOptions, RunMonitor};

use super::{prepare_call_dir, CallSpec, Running, Server};

/// What makes two calls share a process: the same function, context and limits but their
/// memory. The rlimits set at the process's fork come from the others (CPU time, file size,
/// processes, address space) and an unprivileged process cannot raise them again; memory
/// limits are the call window's (written for each call) or the sampler's. Admission gives a
/// call without a memory limit its share of the node, which moves as the zygote grows: that
/// must not cost a process.
#[derive(Clone, PartialEq, Debug)]
struct Key {
    target: String,
    context: Option<String>,
    limits: Limits,
}

impl Key {
    fn of(spec: &CallSpec) -> Key {
        let limits = Limits {
            memory_bytes: None,
            gpu_memory_bytes: None,
            ..spec.limits.clone()
        };
        Key {
            target: spec.function.target.clone(),
            context: spec.context.clone(),
            limits,
        }
    }
}

/// The process a running call of a reuse function is in.
#[derive(Debug, Clone)]
pub(super) struct InProcess {
    /// Calls it has run, this one included.
    calls: u64,
    /// Its CPU totals (user, system) when this call began: the call's is the rise over them.
    cpu_before: (f64, f64),
}

impl InProcess {
    /// A process forked for its first call.
    pub(super) fn fresh() -> InProcess {
        InProcess {
            calls: 1,
            cpu_before: (0.0, 0.0),
        }
    }
}

/// A kept process between two calls, waiting on its done socket.
struct Idle {
    key: Key,
    pid: i32,
    zygote: usize,
    done: OwnedFd,
    /// The cgroup its last call ran in (none of its figures are read again).
    cgroup: Box<dyn Backend>,
    calls: u64,
    cpu: (f64, f64),
    since: Instant,
}

#[derive(Default)]
pub(super) struct Reuse {
    idle: Vec<Idle>,
    /// Finished calls' directories, removed once their replies are out.
    dirs: Vec<PathBuf>,
}

impl Server {
    /// Run `spec` in a kept process of its function, if it is a reuse call and one is idle;
    /// else hand it back (a fresh process is forked for it).
    pub(super) fn run_in_kept(
        &mut self,
        spec: CallSpec,
        gpus: Option<GpuMeter>,
        allocated: &Allocated,
    ) -> Option<(CallSpec, Option<GpuMeter>)> {
        if !spec.reuse || gpus.is_some() {
            return Some((spec, gpus));
        }
        let key = Key::of(&spec);
        let Some(at) = self.reuse.idle.iter().position(|idle| idle.key == key) else {
            return Some((spec, gpus));
        };
        let idle = self.reuse.idle.swap_remove(at);
        let pid = idle.pid;
        match self.hand_over(&spec, idle, allocated) {
            Ok((id, running)) => {
                self.running.insert(id, running);
                None
            }
            Err(error) => {
                eprintln!(
                    "lfm serve: warning: the kept process {pid} could not take a call, a fresh one does: {error:#}"
                );
                Some((spec, gpus))
            }
        }
    }

    /// The call's directory and monitor (a new window on the process's cgroup: the call's
    /// limits, its peak and counters from now), then the call written on the process's done
    /// socket. On failure the process is ended.
    fn hand_over(
        &mut self,
        spec: &CallSpec,
        idle: Idle,
        allocated: &Allocated,
    ) -> Result<(u64, Running)> {
        self.next_id += 1;
        let id = self.next_id;
        let dir = self.options.zygote.work_dir.join(format!("call-{id}"));
        let request = match prepare_call_dir(&dir, spec, None, self.options.backend) {
            Ok(request) => request,
            Err(error) => {
                self.end_idle(idle);
                return Err(error);
            }
        };
        let options = self.window_options(spec, &dir);
        let mut monitor = match RunMonitor::reusing(options, idle.cgroup, idle.pid) {
            Ok(monitor) => monitor,
            Err((cgroup, error)) => {
                drop(idle.done);
                self.janitor.remove(Some(cgroup), dir);
                return Err(error);
            }
        };
        if let Err(error) = send_next_call(&idle.done, &dir, &request) {
            monitor.kill();
            let (_, cgroup) = monitor.finish_keeping_cgroup(Default::default());
            self.janitor.remove(Some(cgroup), dir);
            return Err(error);
        }
        super::label(&mut monitor, spec);
        monitor.set_process(idle.pid);
        monitor.started(Some(idle.pid));
        let running = Running {
            spec: spec.clone(),
            zygote: idle.zygote,
            next_sample: Instant::now() + monitor.interval(),
            monitor,
            dir,
            pid: Some(idle.pid),
            abandoned: false,
            done: Some(idle.done),
            delivered: None,
            import_log_read: 0,
            allocated: allocated.clone(),
            process: Some(InProcess {
                calls: idle.calls + 1,
                cpu_before: idle.cpu,
            }),
        };
        Ok((id, running))
    }

    /// What a call's monitor is, as [`Server::monitor_for`] makes it, for a window on a kept
    /// process's cgroup.
    fn window_options(&self, spec: &CallSpec, dir: &Path) -> MonitorOptions {
        MonitorOptions {
            command: Vec::new(),
            category: None,
            limits: spec.limits.clone(),
            backend: self.options.backend,
            sandbox: Some(dir.join("sandbox")),
            series: None,
            forked: true,
        }
    }

    /// Before a fresh process is forked: idle ones hold slots, the longest idle goes first
    /// until one is free.
    pub(super) fn make_room_for_fork(&mut self) {
        let slots = self.options.slots.max(1);
        while !self.reuse.idle.is_empty() && self.running.len() + self.reuse.idle.len() >= slots {
            let oldest = (0..self.reuse.idle.len())
                .min_by_key(|&at| self.reuse.idle[at].since)
                .expect("not empty");
            let idle = self.reuse.idle.swap_remove(oldest);
            self.end_idle(idle);
        }
    }

    /// Closing its done socket ends the process (it leaves its loop and exits); its cgroup
    /// goes to the janitor, which kills what may be left in it.
    fn end_idle(&mut self, idle: Idle) {
        drop(idle.done);
        self.janitor.remove(Some(idle.cgroup), PathBuf::new());
    }

    /// Every idle process ends (the serve ends, or its zygotes are replaced).
    pub(super) fn end_all_idle(&mut self) {
        for idle in std::mem::take(&mut self.reuse.idle) {
            self.end_idle(idle);
        }
    }

    /// The running call an exit is of: the zygote names a process by the call it was forked
    /// for, and a reused process has run others since. An idle process that died is forgotten.
    pub(super) fn call_in_process(&mut self, id: u64, pid: i32) -> u64 {
        if let Some(at) = self.reuse.idle.iter().position(|idle| idle.pid == pid) {
            let idle = self.reuse.idle.swap_remove(at);
            self.janitor.remove(Some(idle.cgroup), PathBuf::new());
            return id;
        }
        if self.running.contains_key(&id) {
            return id;
        }
        let reused = self
            .running
            .iter()
            .find(|(_, r)| r.pid == Some(pid) && r.process.as_ref().is_some_and(|p| p.calls > 1));
        reused.map_or(id, |(&id, _)| id)
    }

    /// The call's CPU: the process's totals less what they were when the call began.
    pub(super) fn own_cpu(running: &Running, cpu: (f64, f64)) -> (f64, f64) {
        let Some(before) = running.process.as_ref().map(|p| p.cpu_before) else {
            return cpu;
        };
        ((cpu.0 - before.0).max(0.0), (cpu.1 - before.1).max(0.0))
    }

    /// The Report names the process of a reuse call.
    pub(super) fn name_process(process: Option<&InProcess>, pid: Option<i32>, report: &mut Report) {
        let (Some(process), Some(pid), Some(function)) = (process, pid, report.function.as_mut())
        else {
            return;
        };
        function.process = Some(ProcessUse {
            pid,
            calls: process.calls,
            reused: process.calls > 1,
        });
    }

    /// After a reuse call that ended as it should, its process is kept (and its cgroup, and
    /// its done socket) instead of being killed; its directory goes once the reply is out.
    /// Hands the leftover back when the process is not to be kept.
    pub(super) fn keep_process(
        &mut self,
        running: Kept<'_>,
        said_reuse: bool,
        status: i32,
        total_cpu: (f64, f64),
        report: &Report,
        leftover: super::Leftover,
    ) -> Option<super::Leftover> {
        let ended_well = status == 0 && report.limits_exceeded.is_empty();
        let (Some(process), Some(pid)) = (running.process, running.pid) else {
            return Some(leftover);
        };
        if !(said_reuse && ended_well && !running.abandoned && leftover.done.is_some()) {
            return Some(leftover);
        }
        self.reuse.dirs.push(leftover.dir);
        self.reuse.idle.push(Idle {
            key: Key::of(running.spec),
            pid,
            zygote: running.zygote,
            done: leftover.done.expect("checked above"),
            cgroup: leftover.cgroup,
            calls: process.calls,
            cpu: total_cpu,
            since: Instant::now(),
        });
        None
    }

    /// The directories of finished reuse calls, once their replies are out.
    pub(super) fn remove_reuse_dirs(&mut self) {
        for dir in std::mem::take(&mut self.reuse.dirs) {
            self.janitor.remove(None, dir);
        }
    }
}

/// What of a finished call [`Server::keep_process`] reads (its monitor is consumed by then).
pub(super) struct Kept<'a> {
    pub spec: &'a CallSpec,
    pub zygote: usize,
    pub pid: Option<i32>,
    pub abandoned: bool,
    pub process: Option<&'a InProcess>,
}

/// The next call, on the process's done socket (python/lfm_runner/reuse.py reads it).
fn send_next_call(done: &OwnedFd, dir: &Path, request: &Path) -> Result<()> {
    let message = serde_json::json!({"dir": dir, "request_path": request}).to_string();
    let mut socket = std::fs::File::from(done.try_clone()?);
    socket
        .write_all(message.as_bytes())
        .context("writing the next call to the kept process")
}
