//! One run's monitoring, whoever started it: its backend (cgroup or none), its samples, the
//! limits it is held to, and the Report it finishes into. `lfm run` drives one for a command;
//! `lfm call` and `lfm serve` drive one per function call.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::backend::{self, Backend, BackendChoice, Reading};
use crate::gpu::meter::{GpuMeter, GpuSample};
use crate::limits::Limits;
use crate::proctree::{self, ProcFiles, ProcessSample};
use crate::report::{
    Cores, CpuThrottling, CpuTime, Exit, ExitKind, Memory, Report, Sampling, SeriesSample,
    REPORT_FORMAT,
};

use super::disk::DiskMeter;
use super::tracker::{Tracker, CORES_ENFORCE_WINDOW, CORES_WINDOW};
use super::{now_seconds, sampling_interval, tree};

/// Forgiven excess before the supervisor kills for cores, as cctools does (0.25 core).
const CORES_TOLERANCE: f64 = 0.25;

/// What a run is and how it is held.
pub struct MonitorOptions {
    /// What ran, as the Report shows it (argv, or the function call).
    pub command: Vec<String>,
    pub category: Option<String>,
    pub limits: Limits,
    pub backend: BackendChoice,
    /// The directory whose size is the run's disk use (measured only when given).
    pub sandbox: Option<PathBuf>,
    /// One JSON line per sample.
    pub series: Option<PathBuf>,
    /// The run's process was forked from a parent it shares memory with (a zygote): its
    /// VmHWM and ru_maxrss start at the parent's RSS, so memory comes from the cgroup, or
    /// without one from the memory only the run's processes map.
    pub forked: bool,
}

/// How the run's process ended, as its driver saw it.
#[derive(Debug, Default, Clone)]
pub struct Ending {
    /// wait status of the run's main process; `None` when it could not be collected.
    pub status: Option<libc::c_int>,
    /// A signal lfm received and forwarded to the tree.
    pub forwarded_signal: Option<i32>,
    /// User and system CPU seconds of the processes the driver reaped.
    pub reaped_cpu: Option<(f64, f64)>,
    /// Storage bytes (read, written) as the run's process counted them itself.
    pub io: Option<(u64, u64)>,
    /// ru_maxrss of the run's main process.
    pub maxrss_bytes: Option<u64>,
    /// A forked call's rise in resident size at its highest, as its process measured itself
    /// ([`crate::outcome::memory_growth`]).
    pub memory_growth: Option<u64>,
}

/// What is left of a finished run that must not outlive it: its processes, its process group,
/// and whatever its cgroup still holds when they are killed.
pub struct Remains {
    pids: Vec<i32>,
    group: Option<i32>,
}

impl Remains {
    /// SIGKILL them all; `backend` is the run's (its cgroup's members are killed too).
    pub fn kill(&self, backend: &dyn Backend) {
        tree::signal_tree(backend, &self.pids, self.group, libc::SIGKILL);
    }
}

pub struct RunMonitor {
    backend: Box<dyn Backend>,
    options: MonitorOptions,
    /// The run's processes are this process's descendants (and the cgroup's members)...
    tree_root: i32,
    /// ...and the root itself, when it is the run's own first process.
    root_included: bool,
    group: Option<i32>,
    tracker: Tracker,
    exceeded: BTreeMap<String, f64>,
    disk: Option<DiskMeter>,
    series: Option<std::io::BufWriter<std::fs::File>>,
    start_time: f64,
    started: Instant,
    samples: u64,
    interval: Duration,
    notes: Vec<String>,
    /// I/O of processes reaped before the run began, when the driver reaps the run's tree.
    io_baseline: Option<(u64, u64)>,
    /// CPU of children this process reaped before the run (a pack's unpack and compile):
    /// not the run's.
    cpu_baseline: (f64, f64),
    outside_once: HashSet<(i32, u64)>,
    last_alive: HashSet<(i32, u64)>,
    escaped: BTreeMap<(i32, u64), String>,
    gpu: Option<GpuMeter>,
    proc_files: ProcFiles,
}

impl RunMonitor {
    /// Create the run's backend (its fresh cgroup, if any) and open its outputs. Nothing runs
    /// yet: the driver starts the process with [`RunMonitor::join_fds`] and calls
    /// [`RunMonitor::started`].
    pub fn create(options: MonitorOptions, tree_root: i32) -> anyhow::Result<RunMonitor> {
        let backend = backend::create(options.backend, &options.limits)?;
        RunMonitor::assemble(options, backend, tree_root).map_err(|(_, error)| error)
    }

    /// [`RunMonitor::create`] in a live cgroup that earlier runs used (a serve's pooled slot
    /// cgroup, a reused call process's): a new window is opened on it
    /// ([`Backend::open_window`]), so no figure of this run's Report is an earlier run's.
    /// On failure the backend comes back as it was, for the caller to keep or drop.
    pub fn reusing(
        options: MonitorOptions,
        mut backend: Box<dyn Backend>,
        tree_root: i32,
    ) -> Result<RunMonitor, (Box<dyn Backend>, anyhow::Error)> {
        if let Err(error) = backend.open_window(&options.limits) {
            return Err((backend, error));
        }
        RunMonitor::assemble(options, backend, tree_root)
    }

    fn assemble(
        options: MonitorOptions,
        backend: Box<dyn Backend>,
        tree_root: i32,
    ) -> Result<RunMonitor, (Box<dyn Backend>, anyhow::Error)> {
        let series = match &options.series {
            Some(path) => match std::fs::File::create(path) {
                Ok(file) => Some(std::io::BufWriter::new(file)),
                Err(e) => {
                    return Err((backend, anyhow::anyhow!("creating {}: {e}", path.display())))
                }
            },
            None => None,
        };
        let disk = options.sandbox.clone().map(DiskMeter::new);
        let notes = backend.notes();
        Ok(RunMonitor {
            backend,
            options,
            tree_root,
            root_included: false,
            group: None,
            tracker: Tracker::default(),
            exceeded: BTreeMap::new(),
            disk,
            series,
            start_time: now_seconds(),
            started: Instant::now(),
            samples: 0,
            interval: sampling_interval(Duration::ZERO),
            notes,
            io_baseline: None,
            cpu_baseline: (0.0, 0.0),
            outside_once: HashSet::new(),
            last_alive: HashSet::new(),
            escaped: BTreeMap::new(),
            gpu: None,
            proc_files: ProcFiles::new(),
        })
    }

    /// The run holds GPUs: they are sampled with everything else, and `--gpu-memory` is
    /// enforced on them.
    pub fn attach_gpus(&mut self, meter: GpuMeter) {
        if self.options.limits.gpu_memory_bytes.is_some() && !meter.measures() {
            self.notes
                .push("--gpu-memory was not enforced: no GPU driver to measure it with".into());
        }
        self.gpu = Some(meter);
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// `cgroup.procs` descriptors the run's first process writes "0" to before user code.
    pub fn join_fds(&self) -> Vec<RawFd> {
        self.backend.join_fds()
    }

    /// The run is `pid` and its descendants (a call forked by a zygote).
    pub fn set_process(&mut self, pid: i32) {
        self.tree_root = pid;
        self.root_included = true;
    }

    /// The run is another one than it was created for (a spare call taken by a request).
    pub fn relabel(&mut self, command: Vec<String>, category: Option<String>) {
        self.options.command = command;
        self.options.category = category;
    }

    /// The clock starts now; `group` is the run's own process group, if it has one.
    pub fn started(&mut self, group: Option<i32>) {
        self.group = group;
        self.start_time = now_seconds();
        self.started = Instant::now();
        self.cpu_baseline = tree::rusage_children();
        if let Some(meter) = self.gpu.as_mut() {
            meter.started();
        }
    }

    /// (user, system) CPU seconds of the children reaped since the run started.
    pub fn reaped_cpu(&self) -> (f64, f64) {
        let (user, system) = tree::rusage_children();
        (
            (user - self.cpu_baseline.0).max(0.0),
            (system - self.cpu_baseline.1).max(0.0),
        )
    }

    /// The driver reaps the run's processes itself: their I/O is then exact (see
    /// [`tree::reaped_io`]), counted from here on.
    pub fn count_io_of_reaped(&mut self) {
        self.io_baseline = Some(tree::reaped_io());
    }

    pub fn observe_reaped(&mut self, reaped: &tree::Reaped) {
        self.tracker.max_reaped_maxrss = self.tracker.max_reaped_maxrss.max(reaped.maxrss_bytes);
    }

    /// How long to wait before the next sample.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Take one sample, record it, and check the limits. Returns true when a limit is
    /// exceeded: the driver then kills the tree and finishes.
    pub fn sample(&mut self) -> bool {
        let elapsed = self.started.elapsed();
        let (processes, outside) = self.processes();
        let reading = self.backend.read();
        self.tracker.observe(&processes);
        self.last_alive = processes.iter().map(|p| (p.pid, p.start_ticks)).collect();
        self.tracker.peak_anon = self.tracker.peak_anon.max(reading.anon_bytes);
        self.tracker.peak_file = self.tracker.peak_file.max(reading.file_bytes);
        let cpu_now = self.cpu_now(&reading, &processes);
        self.tracker.observe_cpu(Instant::now(), cpu_now);
        // A forked process's RSS counts the pages it shares with its parent. One seen outside
        // the cgroup once is most likely a call's child that has not joined it yet, with
        // nothing of its own so far: its smaps are not walked (a walk of the zygote's whole
        // address space, ~1% of a busy serve's CPU) until it is seen outside twice.
        let outside_rss: u64 = if self.options.forked {
            outside
                .iter()
                .filter(|p| self.escaped.contains_key(&(p.pid, p.start_ticks)))
                .map(|p| proctree::private_bytes(p.pid))
                .sum()
        } else {
            outside.iter().map(|p| p.rss_bytes).sum()
        };
        let memory_now = match reading.unreclaimable_bytes {
            Some(unreclaimable) => {
                let now = unreclaimable + outside_rss;
                self.tracker.peak_unreclaimable = self.tracker.peak_unreclaimable.max(Some(now));
                now
            }
            None if self.options.forked => processes
                .iter()
                .map(|p| proctree::private_bytes(p.pid))
                .sum(),
            None => processes.iter().map(|p| p.rss_bytes).sum(),
        };
        self.tracker.peak_private = self.tracker.peak_private.max(memory_now);
        self.samples += 1;
        if let Some(meter) = self.disk.as_mut() {
            meter.maybe_measure(self.interval);
        }
        let gpu = self.sample_gpus(&processes);
        self.write_series(elapsed, cpu_now, memory_now, processes.len(), &gpu);
        self.check_limits(elapsed, &reading, memory_now, processes.len() as u64);
        self.check_gpu_memory(&gpu);
        self.interval = sampling_interval(elapsed);
        !self.exceeded.is_empty()
    }

    /// Every live process of the run, and those of them outside its cgroup. A process that
    /// leaves the cgroup (as root can) stays the run's: lfm is its subreaper, so it is still a
    /// descendant; it is measured from /proc, counted, killed with the tree and named.
    fn processes(&mut self) -> (Vec<ProcessSample>, Vec<ProcessSample>) {
        let mut tree = self.proc_files.tree(self.tree_root, self.root_included);
        let Some(members) = self.backend.pids() else {
            self.forget_gone(&tree);
            return (tree.clone(), tree);
        };
        let members: HashSet<i32> = members.into_iter().collect();
        let listed: HashSet<i32> = tree.iter().map(|p| p.pid).collect();
        let strays: Vec<i32> = members.difference(&listed).copied().collect();
        let outside: Vec<ProcessSample> = tree
            .iter()
            .filter(|p| !members.contains(&p.pid) && !p.zombie && !p.exiting)
            .cloned()
            .collect();
        self.note_escapes(&outside);
        tree.extend(self.proc_files.samples_of(&strays));
        self.forget_gone(&tree);
        (tree, outside)
    }

    fn forget_gone(&mut self, alive: &[ProcessSample]) {
        let mut alive: HashSet<i32> = alive.iter().map(|p| p.pid).collect();
        alive.insert(self.tree_root);
        self.proc_files.retain(&alive);
    }

    /// A process seen outside the cgroup in two samples in a row has left it (one sample
    /// could catch a just-forked child before it joins).
    fn note_escapes(&mut self, outside: &[ProcessSample]) {
        let now: HashSet<(i32, u64)> = outside.iter().map(|p| (p.pid, p.start_ticks)).collect();
        for key in now.intersection(&self.outside_once) {
            self.escaped
                .entry(*key)
                .or_insert_with(|| tree::process_name(key.0));
        }
        self.outside_once = now;
    }

    fn tree_pids(&self) -> Vec<i32> {
        proctree::tree(self.tree_root, self.root_included)
            .iter()
            .map(|p| p.pid)
            .collect()
    }

    fn cpu_now(&self, reading: &Reading, processes: &[ProcessSample]) -> f64 {
        let ticks = proctree::clock_ticks_per_second() as f64;
        let live: f64 = processes.iter().map(|p| p.cpu_ticks as f64 / ticks).sum();
        match reading.cpu_total_us {
            Some(us) => us as f64 / 1e6,
            None => {
                let (user, system) = self.reaped_cpu();
                user + system + live
            }
        }
    }

    fn io_now(&self) -> (u64, u64) {
        match self.io_baseline {
            Some(base) => {
                let reaped = tree::reaped_io();
                let live = self.live_io();
                (
                    reaped.0.saturating_sub(base.0) + live.0,
                    reaped.1.saturating_sub(base.1) + live.1,
                )
            }
            None => self.tracker.io_of_seen(),
        }
    }

    /// I/O of the processes alive at the last sample.
    fn live_io(&self) -> (u64, u64) {
        self.last_alive
            .iter()
            .filter_map(|key| self.tracker.seen.get(key))
            .fold((0, 0), |(r, w), p| (r + p.read_bytes, w + p.write_bytes))
    }

    /// GPU use of the run's processes; a process of the run on a device it was not given is
    /// killed here when `--gpu-violation kill` asked for it.
    fn sample_gpus(&mut self, processes: &[ProcessSample]) -> GpuSample {
        let Some(meter) = self.gpu.as_mut() else {
            return GpuSample::default();
        };
        let pids: HashSet<i32> = processes.iter().map(|p| p.pid).collect();
        let sample = meter.sample(&pids);
        for &pid in &sample.kill {
            // SAFETY: kill(2) on a process of the run, seen alive in this sample.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        sample
    }

    /// No kernel control of GPU memory exists: the limit is the supervisor's, by sampling.
    fn check_gpu_memory(&mut self, gpu: &GpuSample) {
        if let (Some(limit), Some(now)) = (self.options.limits.gpu_memory_bytes, gpu.memory_bytes) {
            if now > limit {
                self.exceeded.insert("gpu_memory".into(), limit as f64);
            }
        }
    }

    fn write_series(
        &mut self,
        elapsed: Duration,
        cpu_now: f64,
        memory_now: u64,
        count: usize,
        gpu: &GpuSample,
    ) {
        if self.series.is_none() {
            return;
        }
        let (bytes_read, bytes_written) = self.io_now();
        let sample = SeriesSample {
            t: elapsed.as_secs_f64(),
            cpu_time: cpu_now,
            cores: self.tracker.recent_cores(),
            memory_bytes: memory_now,
            processes: count as u64,
            bytes_read,
            bytes_written,
            disk_bytes: self.disk.as_ref().and_then(|m| m.last()).map(|d| d.bytes),
            gpu_memory_bytes: gpu.memory_bytes,
            gpu_utilization_percent: gpu.utilization_percent,
        };
        if let (Some(writer), Ok(line)) = (self.series.as_mut(), serde_json::to_string(&sample)) {
            let _ = writeln!(writer, "{line}");
        }
    }

    fn check_limits(&mut self, elapsed: Duration, reading: &Reading, memory_now: u64, procs: u64) {
        let limits = self.options.limits.clone();
        let enforced = self.backend.enforced();
        if let Some(limit) = limits.memory_bytes {
            // Under a kernel limit memory_now only passes it through processes that left the
            // cgroup: then the supervisor enforces it.
            if own_oom_kill(reading, limit) || memory_now > limit {
                self.exceeded.insert("memory".into(), limit as f64);
            }
        }
        if let Some(limit) = limits.wall_seconds {
            if elapsed.as_secs_f64() > limit {
                self.exceeded.insert("wall_time".into(), limit);
            }
        }
        self.check_disk();
        if let Some(limit) = limits.processes {
            if reading.pids_limit_hits > 0 || (!enforced.processes && procs > limit) {
                self.exceeded
                    .insert("max_concurrent_processes".into(), limit as f64);
            }
        }
        if let Some(limit) = limits.cores {
            let over = self.tracker.cores_over(CORES_ENFORCE_WINDOW) > limit + CORES_TOLERANCE;
            if !enforced.cores && over {
                self.exceeded.insert("cores".into(), limit);
            }
        }
    }

    /// The sandbox passed the limit, or a file in it reached the limit: RLIMIT_FSIZE refused
    /// a write there, whether or not the writer died of SIGXFSZ (Python ignores it).
    fn check_disk(&mut self) {
        let (Some(limit), Some(disk)) = (
            self.options.limits.disk_bytes,
            self.disk.as_ref().and_then(|m| m.last()),
        ) else {
            return;
        };
        if disk.bytes > limit || disk.largest_file_bytes >= limit {
            self.exceeded.insert("disk".into(), limit as f64);
        }
    }

    /// The run's processes as they are now, to be killed later ([`Remains::kill`]). Where the
    /// cgroup and the process group hold every process ever seen, they are what kills them
    /// (as [`RunMonitor::kill`] does), without a walk of /proc at every served call's end.
    pub fn remains(&self) -> Remains {
        let pids = if self.cgroup_holds_everything() {
            Vec::new()
        } else {
            self.tree_pids()
        };
        Remains {
            pids,
            group: self.group,
        }
    }

    /// Send `signal` to every process of the run.
    pub fn signal(&self, signal: i32) {
        tree::signal_tree(self.backend.as_ref(), &self.tree_pids(), self.group, signal);
    }

    /// SIGKILL every process of the run, in or out of its cgroup.
    pub fn kill(&self) {
        if self.cgroup_holds_everything() {
            // The cgroup (and the process group) hold every process ever seen: kill through
            // them without walking /proc, which costs a serve call more than the call itself.
            self.backend.kill_all();
            if let Some(group) = self.group {
                // SAFETY: kill(2) on the run's own process group.
                unsafe { libc::kill(-group, libc::SIGKILL) };
            }
            return;
        }
        tree::kill_tree(self.backend.as_ref(), self.group, || self.tree_pids());
    }

    pub fn holds_gpus(&self) -> bool {
        self.gpu.is_some()
    }

    /// Whether nothing of the run was ever seen outside its cgroup.
    fn cgroup_holds_everything(&self) -> bool {
        self.backend.pids().is_some() && self.outside_once.is_empty() && self.escaped.is_empty()
    }

    /// The run is over and its processes are reaped: read the final counters, release the
    /// cgroup, and write the Report.
    pub fn finish(mut self, ending: Ending) -> Report {
        self.conclude(ending, true)
    }

    /// [`RunMonitor::finish`], leaving the cgroup to the caller: dropping the backend kills
    /// anything left in it and removes it (`lfm serve` does so once the reply is out).
    pub fn finish_keeping_cgroup(mut self, ending: Ending) -> (Report, Box<dyn Backend>) {
        let report = self.conclude(ending, false);
        (report, self.backend)
    }

    /// The kernel counts an OOM kill in the victim's cgroup whichever limit ran out: the run's
    /// own memory limit, or one above it (a node's or a batch job's cgroup, or the machine).
    fn attribute_oom_kills(&mut self, reading: &Reading) {
        if reading.oom_kills == 0 {
            return;
        }
        match self.options.limits.memory_bytes {
            Some(limit) if own_oom_kill(reading, limit) => {
                self.exceeded.insert("memory".into(), limit as f64);
            }
            limit => self.notes.push(format!(
                "the kernel's OOM killer killed a process of the run at a peak of {:.1} MiB{}: memory ran out above the run (its node's or job's cgroup, or the machine), not under its own limit",
                reading.memory_peak.unwrap_or(0) as f64 / (1u64 << 20) as f64,
                limit.map_or(String::new(), |l| format!(
                    " of its {:.1} MiB limit",
                    l as f64 / (1u64 << 20) as f64
                ))
            )),
        }
    }

    fn conclude(&mut self, ending: Ending, release: bool) -> Report {
        let end_time = now_seconds();
        let wall_time = self.started.elapsed().as_secs_f64();
        let reading = self.backend.read();
        self.attribute_oom_kills(&reading);
        if let Some(meter) = self.disk.as_mut() {
            meter.measure();
        }
        self.check_disk();
        if release {
            if let Err(error) = self.backend.remove() {
                self.notes.push(format!("{error:#}"));
            }
        }
        if let Some(writer) = self.series.as_mut() {
            let _ = writer.flush();
        }
        self.exceeded_by_rlimit_signal(ending.status);
        self.exceeded_by_memory_growth(ending.memory_growth);
        let cpu_time = cpu_time(&reading, ending.reaped_cpu);
        self.tracker.observe_cpu(Instant::now(), cpu_time.total);
        if let Some(maxrss) = ending.maxrss_bytes {
            self.tracker.max_reaped_maxrss = self.tracker.max_reaped_maxrss.max(maxrss);
        }
        let memory = self.memory(&reading, ending.memory_growth);
        // Everything is reaped now: the live processes of the last sample are in the reaped sum.
        self.last_alive.clear();
        let (bytes_read, bytes_written) = ending.io.unwrap_or_else(|| self.io_now());
        self.note_escaped();
        let gpu = self.gpu.take().map(|meter| {
            let (gpu, notes) = meter.finish();
            self.notes.extend(notes);
            gpu
        });
        let exit = classify_exit(ending.status, &self.exceeded, ending.forwarded_signal);
        Report {
            format: REPORT_FORMAT.into(),
            command: self.options.command.clone(),
            category: self.options.category.clone(),
            function: None,
            result: None,
            imports: None,
            backend: self.backend.kind().name().to_string(),
            limits: self.options.limits.clone(),
            limits_from_sizing: Vec::new(),
            input_bytes: None,
            allocation: None,
            exit,
            limits_exceeded: std::mem::take(&mut self.exceeded),
            start: self.start_time,
            end: end_time,
            wall_time,
            cores: cores(&self.tracker, &cpu_time, wall_time),
            cpu_throttling: reading.throttling.map(|t| CpuThrottling {
                periods: t.periods,
                throttled_periods: t.throttled_periods,
                throttled_seconds: t.throttled_us as f64 / 1e6,
            }),
            cpu_time,
            memory,
            virtual_memory_bytes: self.tracker.peak_vm_sum,
            swap_bytes: reading.swap_bytes.unwrap_or(self.tracker.peak_swap_sum),
            disk: self.disk.as_ref().and_then(|m| m.last()).cloned(),
            bytes_read,
            bytes_written,
            max_concurrent_processes: self.tracker.max_concurrent.max(1),
            total_processes: (self.tracker.seen.len() as u64).max(1),
            gpu,
            sampling: Sampling {
                samples: self.samples,
                first_interval_ms: sampling_interval(Duration::ZERO).as_secs_f64() * 1000.0,
                last_interval_ms: self.interval.as_secs_f64() * 1000.0,
            },
            notes: std::mem::take(&mut self.notes),
        }
    }

    /// Kernel rlimits end a run with a signal of their own: those are limits too.
    fn exceeded_by_rlimit_signal(&mut self, status: Option<libc::c_int>) {
        let Some(status) = status.filter(|&s| libc::WIFSIGNALED(s)) else {
            return;
        };
        let limits = &self.options.limits;
        match libc::WTERMSIG(status) {
            libc::SIGXFSZ => {
                if let Some(limit) = limits.disk_bytes {
                    self.exceeded.insert("disk".into(), limit as f64);
                }
            }
            libc::SIGXCPU => {
                if let Some(cores) = limits.cores {
                    self.exceeded.insert("cores".into(), cores);
                }
            }
            _ => {}
        }
    }

    /// Without a kernel memory limit the supervisor enforces one by sampling /proc, which a
    /// short spike slips between; a forked call's own high-water mark does not.
    fn exceeded_by_memory_growth(&mut self, growth: Option<u64>) {
        let (Some(limit), Some(growth)) = (self.options.limits.memory_bytes, growth) else {
            return;
        };
        if self.options.forked && !self.backend.enforced().memory && growth > limit {
            self.exceeded.insert("memory".into(), limit as f64);
        }
    }

    /// The headline is the larger of what the cgroup's counters say the run could not do
    /// without and the tree's VmHWM: the counters miss what happens between samples, VmHWM
    /// catches a spike of any process (it never counts page cache read through read(2)).
    /// A forked run's VmHWM starts at its parent's RSS: there the kernel's peak less the page
    /// cache still charged at the end catches what sampling missed.
    fn memory(&self, reading: &Reading, memory_growth: Option<u64>) -> Memory {
        let vmhwm = self.tracker.vmhwm_peak();
        let figures = MemoryFigures {
            sampled_unreclaimable: self.tracker.peak_unreclaimable,
            kernel_peak_less_cache: reading
                .memory_peak
                .map(|peak| peak.saturating_sub(reading.file_bytes.unwrap_or(0))),
            vmhwm,
            sampled_rss: self.tracker.peak_rss_sum,
            sampled_private: self.tracker.peak_private,
            memory_growth,
        };
        let (peak_bytes, peak_source) = figures.headline(self.options.forked);
        Memory {
            peak_bytes,
            peak_source: peak_source.into(),
            cgroup_peak_bytes: reading.memory_peak,
            peak_rss_bytes: (!self.options.forked).then_some(vmhwm),
            anon_bytes: self.tracker.peak_anon.max(reading.anon_bytes),
            file_bytes: self.tracker.peak_file.max(reading.file_bytes),
        }
    }

    fn note_escaped(&mut self) {
        for ((pid, _), name) in &self.escaped {
            self.notes.push(format!(
                "process {pid} ({name}) left the run's cgroup: it was measured from /proc, counted and killed with the tree"
            ));
        }
    }
}

/// Every memory figure a run has, for choosing its headline.
struct MemoryFigures {
    /// Largest sampled unreclaimable charge of the cgroup (plus processes outside it).
    sampled_unreclaimable: Option<u64>,
    /// The kernel's peak less the page cache still charged at the end (v2 memory.peak needs
    /// Linux 5.19; v1 always has max_usage_in_bytes).
    kernel_peak_less_cache: Option<u64>,
    vmhwm: u64,
    sampled_rss: u64,
    sampled_private: u64,
    /// A forked call's own rise in resident size ([`Ending::memory_growth`]).
    memory_growth: Option<u64>,
}

impl MemoryFigures {
    /// The headline and its source (docs/report.md). A forked run's VmHWM starts at its
    /// parent's RSS, so it never counts; where the kernel keeps no peak (v2 before 5.19),
    /// the samples alone decide.
    fn headline(&self, forked: bool) -> (u64, &'static str) {
        if forked {
            return match (self.sampled_unreclaimable, self.kernel_peak_less_cache) {
                (sampled, Some(unsampled)) => (sampled.unwrap_or(0).max(unsampled), "cgroup-stat"),
                (Some(sampled), None) => (sampled, "cgroup-stat"),
                (None, None) => match self.memory_growth {
                    Some(growth) if growth > self.sampled_private => (growth, "vmhwm-growth"),
                    _ => (self.sampled_private, "sampled-private"),
                },
            };
        }
        match self.sampled_unreclaimable {
            Some(sampled) if sampled >= self.vmhwm => (sampled, "cgroup-stat"),
            _ if self.vmhwm > 0 || self.sampled_rss == 0 => (self.vmhwm, "vmhwm"),
            _ => (self.sampled_rss, "sampled-rss"),
        }
    }
}

fn cpu_time(reading: &Reading, reaped: Option<(f64, f64)>) -> CpuTime {
    let from_cgroup = match (reading.cpu_user_us, reading.cpu_system_us) {
        (Some(user), Some(system)) => Some(CpuTime {
            user: user as f64 / 1e6,
            system: system as f64 / 1e6,
            total: reading
                .cpu_total_us
                .map(|t| t as f64 / 1e6)
                .unwrap_or((user + system) as f64 / 1e6),
        }),
        _ => None,
    };
    let from_rusage = reaped.map(|(user, system)| CpuTime {
        user,
        system,
        total: user + system,
    });
    // The cgroup misses processes that left it; rusage misses processes nobody reaped.
    match (from_cgroup, from_rusage) {
        (Some(c), Some(r)) if r.total > c.total => r,
        (Some(c), _) => c,
        (None, Some(r)) => r,
        (None, None) => CpuTime::default(),
    }
}

fn cores(tracker: &Tracker, cpu_time: &CpuTime, wall_time: f64) -> Cores {
    let average = if wall_time > 0.0 {
        cpu_time.total / wall_time
    } else {
        0.0
    };
    // A run shorter than one window has only its average. The CPU time of a run of a few
    // milliseconds includes its start, counted before its wall time began: over so short a
    // time it gave `cores 54` on a machine of 2; no run uses more cores than it may run on.
    let short = wall_time < CORES_WINDOW.as_secs_f64();
    let average = average.min(usable_cores());
    Cores {
        peak: tracker.peak_cores.max(if short { average } else { 0.0 }),
        average,
        window_seconds: CORES_WINDOW.as_secs_f64(),
    }
}

/// The CPUs this process (and so the run it starts) may run on.
fn usable_cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

pub fn classify_exit(
    status: Option<libc::c_int>,
    exceeded: &BTreeMap<String, f64>,
    forwarded: Option<i32>,
) -> Exit {
    let (code, signal) = match status {
        Some(status) if libc::WIFEXITED(status) => (Some(libc::WEXITSTATUS(status)), None),
        Some(status) if libc::WIFSIGNALED(status) => (None, Some(libc::WTERMSIG(status))),
        _ => (None, None),
    };
    let kind = if !exceeded.is_empty() {
        ExitKind::Limits
    } else if status.is_none() {
        ExitKind::Error
    } else if signal.is_some() || forwarded.is_some() {
        ExitKind::Signal
    } else {
        ExitKind::Normal
    };
    Exit {
        kind,
        status: code,
        signal: signal.or(if kind == ExitKind::Signal {
            forwarded
        } else {
            None
        }),
        error: status
            .is_none()
            .then(|| "the command's exit status could not be collected".to_string()),
        exception: None,
    }
}

/// Was the run's OOM kill its own limit's? Its memory reached the limit then (within the
/// kernel's per-CPU charge batches); a peak well under it means a limit above the run ran out.
/// Without a peak to tell, it is taken as its own.
/// The kernel keeps memory.max in whole pages, rounded down: a limit of a few bytes is 0
/// pages, and the run is killed at a peak of 0, which is then still its own limit's doing.
fn own_oom_kill(reading: &Reading, limit: u64) -> bool {
    let enforced = limit - limit % PAGE;
    reading.oom_kills > 0
        && reading
            .memory_peak
            .is_none_or(|peak| peak.saturating_add(enforced / 16) >= enforced)
}

const PAGE: u64 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn figures() -> MemoryFigures {
        MemoryFigures {
            sampled_unreclaimable: None,
            kernel_peak_less_cache: None,
            vmhwm: 0,
            sampled_rss: 0,
            sampled_private: 0,
            memory_growth: None,
        }
    }

    #[test]
    fn a_run_takes_the_larger_of_the_cgroup_samples_and_vmhwm() {
        let run = MemoryFigures {
            sampled_unreclaimable: Some(90 * MIB),
            vmhwm: 101 * MIB,
            ..figures()
        };
        assert_eq!(run.headline(false), (101 * MIB, "vmhwm"));
        let run = MemoryFigures {
            sampled_unreclaimable: Some(120 * MIB),
            vmhwm: 101 * MIB,
            ..figures()
        };
        assert_eq!(run.headline(false), (120 * MIB, "cgroup-stat"));
        let rlimit = MemoryFigures {
            sampled_rss: 7 * MIB,
            ..figures()
        };
        assert_eq!(rlimit.headline(false), (7 * MIB, "sampled-rss"));
    }

    #[test]
    fn a_fork_never_counts_vmhwm_and_falls_back_to_samples_without_a_kernel_peak() {
        let shared_zygote = 300 * MIB;
        let call = MemoryFigures {
            sampled_unreclaimable: Some(60 * MIB),
            kernel_peak_less_cache: Some(100 * MIB),
            vmhwm: shared_zygote,
            ..figures()
        };
        assert_eq!(call.headline(true), (100 * MIB, "cgroup-stat"));
        // Linux < 5.19 on cgroup v2: no memory.peak, the samples alone.
        let old_kernel = MemoryFigures {
            kernel_peak_less_cache: None,
            ..call
        };
        assert_eq!(old_kernel.headline(true), (60 * MIB, "cgroup-stat"));
        let rlimit = MemoryFigures {
            sampled_private: 40 * MIB,
            vmhwm: shared_zygote,
            ..figures()
        };
        assert_eq!(rlimit.headline(true), (40 * MIB, "sampled-private"));
        // A spike between two samples: the call's own high-water mark says it.
        let spiked = MemoryFigures {
            memory_growth: Some(200 * MIB),
            ..rlimit
        };
        assert_eq!(spiked.headline(true), (200 * MIB, "vmhwm-growth"));
        let smaller = MemoryFigures {
            memory_growth: Some(30 * MIB),
            ..rlimit
        };
        assert_eq!(smaller.headline(true), (40 * MIB, "sampled-private"));
    }

    #[test]
    fn a_run_shorter_than_one_sample_uses_no_more_cores_than_there_are() {
        // A start's CPU time over a wall time of 0.1 ms: 10,000 cores, were it divided.
        let cpu_time = CpuTime {
            user: 0.6,
            system: 0.4,
            total: 1.0,
        };
        let measured = cores(&Tracker::default(), &cpu_time, 0.0001);
        assert!(measured.peak <= usable_cores(), "peak {}", measured.peak);
        assert!(measured.average <= usable_cores());
        let long = cores(&Tracker::default(), &cpu_time, 2.0);
        assert_eq!(long.average, 0.5);
    }

    #[test]
    fn an_oom_kill_is_the_runs_own_only_when_its_memory_reached_its_limit() {
        let killed_at = |peak: Option<u64>| Reading {
            oom_kills: 1,
            memory_peak: peak,
            ..Reading::default()
        };
        assert!(own_oom_kill(&killed_at(Some(250 * MIB)), 250 * MIB));
        assert!(own_oom_kill(&killed_at(Some(249 * MIB)), 250 * MIB));
        assert!(!own_oom_kill(&killed_at(Some(200 * MIB)), 250 * MIB));
        assert!(own_oom_kill(&killed_at(None), 250 * MIB));
        // `--memory 2`: memory.max is 0 pages, and the run is killed before anything counts.
        assert!(own_oom_kill(&killed_at(Some(0)), 2));
        assert!(own_oom_kill(&killed_at(Some(0)), 4095));
        let not_killed = Reading {
            memory_peak: Some(250 * MIB),
            ..Reading::default()
        };
        assert!(!own_oom_kill(&not_killed, 250 * MIB));
    }
}
