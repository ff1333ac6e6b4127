//! The run loop: start the command inside its backend, sample, enforce, reap, report.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::backend::{self, Backend, BackendChoice};
use crate::limits::Limits;
use crate::proctree::{self, ProcessSample};
use crate::report::{
    Cores, CpuTime, Disk, Exit, ExitKind, Memory, Report, Sampling, SeriesSample, REPORT_FORMAT,
};

/// Forgiven excess before the supervisor kills for cores, as cctools does (0.25 core).
const CORES_TOLERANCE: f64 = 0.25;
/// Window over which peak cores are computed, and the shortest one used to enforce cores.
const CORES_WINDOW: Duration = Duration::from_millis(250);
const CORES_ENFORCE_WINDOW: Duration = Duration::from_secs(1);

pub struct RunOptions {
    pub command: Vec<OsString>,
    pub limits: Limits,
    pub backend: BackendChoice,
    /// Working directory of the command (created if missing); its size is the disk measure.
    /// Without it, the working directory is measured when it is a fresh temporary directory
    /// (a workflow worker's task sandbox), and not otherwise.
    pub sandbox: Option<PathBuf>,
    /// One JSON line per sample.
    pub series: Option<PathBuf>,
    /// After forwarding SIGINT/SIGTERM, how long the tree gets before SIGKILL.
    pub grace: Duration,
    pub category: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("command not found: {0}")]
    NotFound(String),
    #[error("command is not executable: {0}")]
    NotExecutable(String),
    #[error("no command given")]
    Empty,
    #[error("monitor failed: {0:#}")]
    Monitor(anyhow::Error),
}

/// Sampling interval as a function of elapsed time: fast at first to catch short runs and
/// spikes, backing off for long runs so the supervisor's own cost stays negligible.
pub fn sampling_interval(elapsed: Duration) -> Duration {
    match elapsed.as_secs_f64() {
        t if t < 1.0 => Duration::from_millis(10),
        t if t < 10.0 => Duration::from_millis(50),
        t if t < 60.0 => Duration::from_millis(250),
        _ => Duration::from_secs(1),
    }
}

/// Check the command exists and is executable before anything runs.
pub fn resolve_command(program: &OsString) -> Result<PathBuf, RunError> {
    use std::os::unix::fs::PermissionsExt;
    let name = Path::new(program);
    let display = name.display().to_string();
    let candidates: Vec<PathBuf> = if name.components().count() > 1 {
        vec![name.to_path_buf()]
    } else {
        std::env::var_os("PATH")
            .map(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(name))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut found_not_executable = false;
    for candidate in candidates {
        if let Ok(meta) = std::fs::metadata(&candidate) {
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(candidate);
            }
            found_not_executable = true;
        }
    }
    if found_not_executable {
        Err(RunError::NotExecutable(display))
    } else {
        Err(RunError::NotFound(display))
    }
}

struct Tracker {
    /// (pid, start ticks) -> last counters, for every process ever seen.
    seen: HashMap<(i32, u64), ProcessSample>,
    max_concurrent: u64,
    peak_vmhwm_sum: u64,
    peak_rss_sum: u64,
    peak_vm_sum: u64,
    peak_swap_sum: u64,
    max_reaped_maxrss: u64,
    cpu_history: VecDeque<(Instant, f64)>,
    peak_cores: f64,
    /// Largest anon / file-cache charge seen in the cgroup (memory.stat is empty after exit).
    peak_anon: Option<u64>,
    peak_file: Option<u64>,
}

/// Run the command to completion and report.
pub fn run(options: &RunOptions) -> Result<Report, RunError> {
    let program = options.command.first().ok_or(RunError::Empty)?;
    let executable = resolve_command(program)?;
    if let Some(sandbox) = &options.sandbox {
        std::fs::create_dir_all(sandbox).map_err(|e| {
            RunError::Monitor(anyhow::anyhow!(
                "creating sandbox {}: {e}",
                sandbox.display()
            ))
        })?;
    }
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) has no memory-safety preconditions.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    prefer_supervisor_over_workload();
    let received = Arc::new(AtomicUsize::new(0));
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register_usize(signal, received.clone(), signal as usize)
            .map_err(|e| RunError::Monitor(e.into()))?;
    }
    let mut backend =
        backend::create(options.backend, &options.limits).map_err(RunError::Monitor)?;
    let backend_name = backend.kind().name();
    let mut series = match &options.series {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| {
                RunError::Monitor(anyhow::anyhow!("creating {}: {e}", path.display()))
            })?,
        )),
        None => None,
    };

    let measured_dir = options.sandbox.clone().or_else(fresh_temporary_cwd);
    let start_time = now_seconds();
    let started = Instant::now();
    let child = spawn(&executable, options, backend.as_ref()).map_err(|e| {
        backend.kill_all();
        let _ = backend.remove();
        RunError::Monitor(anyhow::anyhow!("starting {}: {e}", executable.display()))
    })?;
    let child_pid = child.id() as i32;
    let group = own_process_group(backend.as_ref()).then_some(child_pid);
    let pidfd = pidfd_open(child_pid);
    let me = std::process::id() as i32;

    let mut tracker = Tracker {
        seen: HashMap::new(),
        max_concurrent: 0,
        peak_vmhwm_sum: 0,
        peak_rss_sum: 0,
        peak_vm_sum: 0,
        peak_swap_sum: 0,
        max_reaped_maxrss: 0,
        cpu_history: VecDeque::new(),
        peak_cores: 0.0,
        peak_anon: None,
        peak_file: None,
    };
    let mut exceeded: std::collections::BTreeMap<String, f64> = Default::default();
    let mut child_status: Option<libc::c_int> = None;
    let mut forwarded: Option<(i32, Instant)> = None;
    let mut samples = 0u64;
    let mut last_interval = sampling_interval(Duration::ZERO);
    let mut disk: Option<Disk> = None;
    let mut next_disk_walk = Instant::now();
    let mut notes = backend.notes();
    let ticks = proctree::clock_ticks_per_second() as f64;

    loop {
        // Wait first: a command that ends within the first interval needs no sampling at all
        // (its peaks come from the cgroup and from wait4's rusage).
        wait_for_exit(pidfd, last_interval);
        reap(&mut child_status, child_pid, &mut tracker);
        if child_status.is_some() {
            break;
        }
        let elapsed = started.elapsed();
        let processes = match backend.pids() {
            Some(pids) => proctree::samples_of(&pids),
            None => proctree::descendants(me),
        };
        let reading = backend.read();
        tracker.observe(&processes);
        tracker.peak_anon = tracker.peak_anon.max(reading.anon_bytes);
        tracker.peak_file = tracker.peak_file.max(reading.file_bytes);
        let live_cpu: f64 = processes.iter().map(|p| p.cpu_ticks as f64 / ticks).sum();
        let cpu_now = match reading.cpu_total_us {
            Some(us) => us as f64 / 1e6,
            None => reaped_cpu_seconds() + live_cpu,
        };
        tracker.observe_cpu(Instant::now(), cpu_now);
        let memory_now = reading
            .memory_current
            .unwrap_or_else(|| processes.iter().map(|p| p.rss_bytes).sum());
        samples += 1;

        if let Some(sandbox) = &measured_dir {
            if Instant::now() >= next_disk_walk {
                let walk_started = Instant::now();
                disk = Some(measure_disk(sandbox));
                // Walking a big sandbox is costly: walk at most 5% of the time.
                next_disk_walk = Instant::now() + (walk_started.elapsed() * 20).max(last_interval);
            }
        }

        if let Some(writer) = series.as_mut() {
            let sample = SeriesSample {
                t: elapsed.as_secs_f64(),
                cpu_time: cpu_now,
                cores: tracker.recent_cores(),
                memory_bytes: memory_now,
                processes: processes.len() as u64,
                bytes_read: tracker.io().0,
                bytes_written: tracker.io().1,
                disk_bytes: disk.as_ref().map(|d| d.bytes),
            };
            if let Ok(line) = serde_json::to_string(&sample) {
                let _ = writeln!(writer, "{line}");
            }
        }

        // Limits.
        let limits = &options.limits;
        let enforced = backend.enforced();
        if let Some(limit) = limits.memory_bytes {
            if reading.oom_kills > 0 || (!enforced.memory && memory_now > limit) {
                exceeded.insert("memory".into(), limit as f64);
            }
        }
        if let Some(limit) = limits.wall_seconds {
            if elapsed.as_secs_f64() > limit {
                exceeded.insert("wall_time".into(), limit);
            }
        }
        if let Some(limit) = limits.disk_bytes {
            if disk.as_ref().is_some_and(|d| d.bytes > limit) {
                exceeded.insert("disk".into(), limit as f64);
            }
        }
        if let Some(limit) = limits.processes {
            let hit_kernel_limit = reading.pids_limit_hits > 0;
            if hit_kernel_limit || (!enforced.processes && processes.len() as u64 > limit) {
                exceeded.insert("max_concurrent_processes".into(), limit as f64);
            }
        }
        if let Some(limit) = limits.cores {
            if !enforced.cores && tracker.cores_over(CORES_ENFORCE_WINDOW) > limit + CORES_TOLERANCE
            {
                exceeded.insert("cores".into(), limit);
            }
        }
        if !exceeded.is_empty() {
            kill_tree(backend.as_ref(), me, group);
            break;
        }

        // Signals sent to lfm go to the whole tree; after the grace period, SIGKILL.
        let signal = received.swap(0, Ordering::SeqCst) as i32;
        if signal != 0 && forwarded.is_none() {
            signal_tree(backend.as_ref(), me, group, signal);
            forwarded = Some((signal, Instant::now()));
        }
        if let Some((_, at)) = forwarded {
            if at.elapsed() > options.grace {
                kill_tree(backend.as_ref(), me, group);
            }
        }

        last_interval = sampling_interval(elapsed);
    }

    // The command is over: nothing it started may outlive it.
    kill_tree(backend.as_ref(), me, group);
    let deadline = Instant::now() + Duration::from_secs(5);
    while child_status.is_none() && Instant::now() < deadline {
        reap(&mut child_status, child_pid, &mut tracker);
        if child_status.is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    reap_all(&mut tracker);
    let end_time = now_seconds();
    let wall_time = started.elapsed().as_secs_f64();
    let reading = backend.read();
    if let Some(limit) = options.limits.memory_bytes {
        if reading.oom_kills > 0 {
            exceeded.insert("memory".into(), limit as f64);
        }
    }
    if let Some(sandbox) = &measured_dir {
        disk = Some(measure_disk(sandbox));
        if let Some(limit) = options.limits.disk_bytes {
            if disk.as_ref().is_some_and(|d| d.bytes > limit) {
                exceeded.insert("disk".into(), limit as f64);
            }
        }
    }
    if let Err(error) = backend.remove() {
        notes.push(format!("{error:#}"));
    }
    drop(backend);
    if let Some(fd) = pidfd {
        // SAFETY: we own this descriptor.
        unsafe { libc::close(fd) };
    }
    if let Some(mut writer) = series {
        let _ = writer.flush();
    }

    let children = rusage_children();
    let cpu_time = match (
        reading.cpu_user_us,
        reading.cpu_system_us,
        reading.cpu_total_us,
    ) {
        (Some(user), Some(system), total) => CpuTime {
            user: user as f64 / 1e6,
            system: system as f64 / 1e6,
            total: total
                .map(|t| t as f64 / 1e6)
                .unwrap_or((user + system) as f64 / 1e6),
        },
        _ => CpuTime {
            user: children.0,
            system: children.1,
            total: children.0 + children.1,
        },
    };
    tracker.observe_cpu(Instant::now(), cpu_time.total);
    let vmhwm_peak = tracker.peak_vmhwm_sum.max(tracker.max_reaped_maxrss);
    let memory = match reading.memory_peak {
        Some(peak) => Memory {
            peak_bytes: peak,
            peak_source: "cgroup-peak".into(),
            peak_rss_bytes: Some(vmhwm_peak),
            anon_bytes: tracker.peak_anon.max(reading.anon_bytes),
            file_bytes: tracker.peak_file.max(reading.file_bytes),
        },
        None => Memory {
            peak_bytes: vmhwm_peak.max(tracker.peak_rss_sum),
            peak_source: if vmhwm_peak > 0 {
                "vmhwm".into()
            } else {
                "sampled".into()
            },
            peak_rss_bytes: Some(vmhwm_peak),
            anon_bytes: None,
            file_bytes: None,
        },
    };
    let (bytes_read, bytes_written) = match (reading.io_read_bytes, reading.io_write_bytes) {
        (Some(r), Some(w)) if r + w > 0 => (r, w),
        _ => tracker.io(),
    };
    // Kernel rlimits end a run with a signal of their own: those are limits too.
    if let Some(status) = child_status.filter(|&s| libc::WIFSIGNALED(s)) {
        match libc::WTERMSIG(status) {
            libc::SIGXFSZ => {
                if let Some(limit) = options.limits.disk_bytes {
                    exceeded.insert("disk".into(), limit as f64);
                }
            }
            libc::SIGXCPU => {
                if let Some(cores) = options.limits.cores {
                    exceeded.insert("cores".into(), cores);
                }
            }
            _ => {}
        }
    }
    let exit = classify_exit(child_status, &exceeded, forwarded.map(|(s, _)| s));
    Ok(Report {
        format: REPORT_FORMAT.into(),
        command: options
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        category: options.category.clone(),
        backend: backend_name.to_string(),
        limits: options.limits.clone(),
        exit,
        limits_exceeded: exceeded,
        start: start_time,
        end: end_time,
        wall_time,
        cores: Cores {
            peak: tracker.peak_cores.max(
                if wall_time < CORES_WINDOW.as_secs_f64() && wall_time > 0.0 {
                    cpu_time.total / wall_time
                } else {
                    0.0
                },
            ),
            average: if wall_time > 0.0 {
                cpu_time.total / wall_time
            } else {
                0.0
            },
            window_seconds: CORES_WINDOW.as_secs_f64(),
        },
        cpu_time,
        memory,
        virtual_memory_bytes: tracker.peak_vm_sum,
        swap_bytes: reading.swap_bytes.unwrap_or(tracker.peak_swap_sum),
        disk,
        bytes_read,
        bytes_written,
        max_concurrent_processes: tracker.max_concurrent.max(1),
        total_processes: (tracker.seen.len() as u64).max(1),
        sampling: Sampling {
            samples,
            first_interval_ms: sampling_interval(Duration::ZERO).as_secs_f64() * 1000.0,
            last_interval_ms: last_interval.as_secs_f64() * 1000.0,
        },
        notes,
    })
}

fn classify_exit(
    status: Option<libc::c_int>,
    exceeded: &std::collections::BTreeMap<String, f64>,
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
    }
}

fn spawn(
    executable: &Path,
    options: &RunOptions,
    backend: &dyn Backend,
) -> std::io::Result<std::process::Child> {
    let mut command = std::process::Command::new(executable);
    command
        .arg0(&options.command[0])
        .args(&options.command[1..]);
    if let Some(sandbox) = &options.sandbox {
        command.current_dir(sandbox);
    }
    if own_process_group(backend) {
        command.process_group(0);
    }
    let join_fds = backend.join_fds();
    let rlimits = child_rlimits(&options.limits, backend);
    // SAFETY: the closure runs between fork and exec; it only calls async-signal-safe
    // functions (write, setrlimit) on data prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            // If lfm is SIGKILLed the command dies with it; the rest of a cgroup run is killed
            // by the next lfm, which cleans stale run cgroups.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            for &fd in &join_fds {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for &(resource, value) in &rlimits {
                let limit = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                if libc::setrlimit(resource, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Without a cgroup, a process group is the one handle the kernel kills atomically (a fork
/// bomb cannot escape a group kill). It is skipped when stdin is a terminal: a background
/// group would be stopped as soon as it read from it.
fn own_process_group(backend: &dyn Backend) -> bool {
    use std::io::IsTerminal;
    backend.pids().is_none() && !std::io::stdin().is_terminal()
}

fn child_rlimits(
    limits: &Limits,
    backend: &dyn Backend,
) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
    let mut out = Vec::new();
    if let (Some(cores), Some(wall)) = (limits.cores, limits.wall_seconds) {
        // CPU seconds the run could use at most: a backstop if the supervisor dies.
        out.push((libc::RLIMIT_CPU, (cores * wall).ceil() as libc::rlim_t + 1));
    }
    if let Some(disk) = limits.disk_bytes {
        out.push((libc::RLIMIT_FSIZE, disk as libc::rlim_t));
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if let Some(processes) = limits.processes {
        // RLIMIT_NPROC counts every process of the user, and root ignores it: only useful for
        // an unprivileged user without a pids controller.
        if !root && !backend.enforced().processes {
            // One above the limit: the kernel stops the growth, and the supervisor sees the
            // count pass the limit and reports it.
            let current = count_user_processes();
            out.push((
                libc::RLIMIT_NPROC,
                (current + processes + 1) as libc::rlim_t,
            ));
        }
    }
    if let Some(address_space) = limits.address_space_bytes {
        out.push((libc::RLIMIT_AS, address_space as libc::rlim_t));
    }
    out
}

/// A workload with thousands of runnable processes (a fork bomb) starves an ordinary
/// supervisor of CPU, so it samples and kills too late. Where allowed (root or CAP_SYS_NICE),
/// lfm runs at the lowest real-time priority; SCHED_RESET_ON_FORK puts the command back on the
/// normal scheduler. The supervisor sleeps between samples, so it takes almost no CPU.
fn prefer_supervisor_over_workload() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sched_setscheduler on this process with a valid parameter; failure is harmless.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) };
}

fn count_user_processes() -> u64 {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|e| {
            use std::os::unix::fs::MetadataExt;
            e.metadata().is_ok_and(|m| m.uid() == uid)
        })
        .count() as u64
}

impl Tracker {
    fn observe(&mut self, processes: &[ProcessSample]) {
        self.max_concurrent = self.max_concurrent.max(processes.len() as u64);
        self.peak_vmhwm_sum = self
            .peak_vmhwm_sum
            .max(processes.iter().map(|p| p.hwm_bytes).sum());
        self.peak_rss_sum = self
            .peak_rss_sum
            .max(processes.iter().map(|p| p.rss_bytes).sum());
        self.peak_vm_sum = self
            .peak_vm_sum
            .max(processes.iter().map(|p| p.vm_bytes).sum());
        self.peak_swap_sum = self
            .peak_swap_sum
            .max(processes.iter().map(|p| p.swap_bytes).sum());
        for process in processes {
            self.seen
                .insert((process.pid, process.start_ticks), process.clone());
        }
    }

    fn observe_cpu(&mut self, at: Instant, cpu_seconds: f64) {
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
    fn cores_over(&self, window: Duration) -> f64 {
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

    fn recent_cores(&self) -> f64 {
        self.cores_over(CORES_WINDOW)
    }

    /// Storage bytes read and written by every process seen (its last counters).
    fn io(&self) -> (u64, u64) {
        self.seen
            .values()
            .fold((0, 0), |(r, w), p| (r + p.read_bytes, w + p.write_bytes))
    }
}

/// Reap every exited child without blocking; remember the main command's status.
fn reap(child_status: &mut Option<libc::c_int>, child_pid: i32, tracker: &mut Tracker) {
    loop {
        let mut status: libc::c_int = 0;
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 with valid pointers to locals.
        let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
        if pid <= 0 {
            return;
        }
        tracker.max_reaped_maxrss = tracker.max_reaped_maxrss.max(usage.ru_maxrss as u64 * 1024);
        if pid == child_pid {
            *child_status = Some(status);
        }
    }
}

/// After the kill: collect every remaining zombie (bounded).
fn reap_all(tracker: &mut Tracker) {
    let mut ignored = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        reap(&mut ignored, -2, tracker);
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG on any child, pointer to a local.
        let pending = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pending < 0 {
            return; // ECHILD: none left
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn reaped_cpu_seconds() -> f64 {
    let (user, system) = rusage_children();
    user + system
}

fn rusage_children() -> (f64, f64) {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

fn signal_tree(backend: &dyn Backend, me: i32, group: Option<i32>, signal: i32) {
    if let Some(group) = group {
        // SAFETY: kill(2) on the run's own process group.
        unsafe { libc::kill(-group, signal) };
    }
    let pids = backend
        .pids()
        .unwrap_or_else(|| proctree::descendants(me).iter().map(|p| p.pid).collect());
    for pid in pids {
        // SAFETY: kill(2) on a process of the run.
        unsafe { libc::kill(pid, signal) };
    }
}

/// SIGKILL everything the run started: via the cgroup, and via /proc for any descendant that
/// is not in it (the rlimit backend has no cgroup at all).
fn kill_tree(backend: &dyn Backend, me: i32, group: Option<i32>) {
    backend.kill_all();
    if !has_children() {
        // lfm is a subreaper: any live descendant would be, or descend from, a child of lfm.
        return;
    }
    if let Some(group) = group {
        // SAFETY: kill(2) on the run's own process group (negative pid).
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    for _ in 0..100 {
        let left = proctree::descendants(me);
        let alive: Vec<i32> = left
            .iter()
            .map(|p| p.pid)
            .filter(|&pid| !is_zombie(pid))
            .collect();
        if alive.is_empty() {
            return;
        }
        for pid in alive {
            // SAFETY: kill(2) on a descendant of lfm.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn has_children() -> bool {
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid with WNOWAIT only inspects; a valid pointer to a local.
    let result = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    result == 0
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rfind(')').map(|i| stat[i + 2..].starts_with('Z')))
        .unwrap_or(true)
}

fn measure_disk(path: &Path) -> Disk {
    let mut bytes = 0u64;
    let mut files = 0u64;
    for entry in walkdir::WalkDir::new(path)
        .follow_links(false)
        .into_iter()
        .flatten()
    {
        if let Ok(meta) = entry.metadata() {
            if meta.is_file() {
                use std::os::unix::fs::MetadataExt;
                // Allocated blocks, not apparent size: a sparse file does not fill a disk.
                bytes += meta.blocks() * 512;
                files += 1;
            }
        }
    }
    Disk {
        path: path.display().to_string(),
        bytes,
        files,
    }
}

/// The working directory, when it is a task sandbox: inside the temp dir, created in the last
/// hour, and small (at most 10,000 entries), so measuring it stays cheap.
fn fresh_temporary_cwd() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    let temp = std::env::temp_dir().canonicalize().ok()?;
    let cwd = cwd.canonicalize().ok()?;
    if cwd == temp || !cwd.starts_with(&temp) {
        return None;
    }
    let created = std::fs::metadata(&cwd).ok()?.created().ok()?;
    if created.elapsed().ok()? > Duration::from_secs(3600) {
        return None;
    }
    let small = walkdir::WalkDir::new(&cwd)
        .follow_links(false)
        .into_iter()
        .take(10_001)
        .count()
        <= 10_000;
    small.then_some(cwd)
}

fn pidfd_open(pid: i32) -> Option<i32> {
    // SAFETY: pidfd_open(2) takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then_some(fd as i32)
}

/// Sleep until the command exits or `timeout` passes, whichever is first.
fn wait_for_exit(pidfd: Option<i32>, timeout: Duration) {
    match pidfd {
        Some(fd) => {
            let mut poll = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut poll, 1, timeout.as_millis() as libc::c_int) };
        }
        None => std::thread::sleep(timeout),
    }
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
