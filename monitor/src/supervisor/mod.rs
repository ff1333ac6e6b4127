//! The supervisor: runs a command under a [`RunMonitor`], forwards signals, reaps, reports.
//!
//! `run` drives one command; the per-run state (backend, samples, limits, Report) lives in
//! [`run_monitor`], so that `lfm call` and `lfm serve` drive the same monitoring for calls.

mod disk;
pub mod run_monitor;
mod tracker;
pub mod tree;

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::backend::{Backend, BackendChoice};
use crate::gpu::{self, GpuError, GpuPolicy};
use crate::limits::Limits;
use crate::report::Report;

pub use run_monitor::{Ending, MonitorOptions, Remains, RunMonitor};

pub struct RunOptions {
    pub command: Vec<OsString>,
    pub limits: Limits,
    pub backend: BackendChoice,
    /// Working directory of the command (created if missing); its size is the disk measure.
    /// Without it, disk is not measured.
    pub sandbox: Option<PathBuf>,
    /// One JSON line per sample.
    pub series: Option<PathBuf>,
    /// After forwarding SIGINT/SIGTERM, how long the tree gets before SIGKILL.
    pub grace: Duration,
    pub category: Option<String>,
    /// How the run gets and keeps the GPUs of `limits.gpus`.
    pub gpu: GpuPolicy,
    /// The input's size in bytes, when known before the run: recorded in the Report, and
    /// what the input-aware sizing strategies size from.
    pub input_bytes: Option<u64>,
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
    #[error("{0}")]
    Gpu(#[from] GpuError),
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
pub fn resolve_command(program: &std::ffi::OsStr) -> Result<PathBuf, RunError> {
    use std::os::unix::fs::PermissionsExt;
    let name = Path::new(program);
    let display = name.display().to_string();
    let candidates: Vec<PathBuf> = if name.components().count() > 1 {
        // Absolute, so that it names the same file from a sandbox's working directory.
        vec![std::path::absolute(name).unwrap_or_else(|_| name.to_path_buf())]
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
    // Devices first: a run that cannot have them fails before anything starts.
    let gpus = match options.limits.gpus {
        Some(count) => Some(gpu::meter::assign(
            count,
            &options.gpu,
            &gpu::Ledger::of_node(),
        )?),
        None => None,
    };
    become_subreaper();
    prefer_supervisor_over_workload();
    let received = forward_signals().map_err(RunError::Monitor)?;
    let me = std::process::id() as i32;
    let mut monitor =
        RunMonitor::create(monitor_options(options), me).map_err(RunError::Monitor)?;
    monitor.count_io_of_reaped();
    let env = gpus
        .as_ref()
        .map(|meter| vec![("CUDA_VISIBLE_DEVICES".to_string(), meter.visible_devices())])
        .unwrap_or_default();
    if let Some(meter) = gpus {
        monitor.attach_gpus(meter);
    }
    let rlimits = child_rlimits(&options.limits, monitor.backend());
    let child = spawn(
        &executable,
        options,
        &monitor.join_fds(),
        rlimits,
        monitor.backend(),
        env,
    )
    .map_err(|e| {
        monitor.kill();
        RunError::Monitor(anyhow::anyhow!("starting {}: {e}", executable.display()))
    })?;
    let child_pid = child.id() as i32;
    monitor.started(own_process_group(monitor.backend()).then_some(child_pid));
    let ending = supervise(&mut monitor, child_pid, &received, options.grace);
    let mut report = monitor.finish(ending);
    report.input_bytes = options.input_bytes;
    Ok(report)
}

fn monitor_options(options: &RunOptions) -> MonitorOptions {
    MonitorOptions {
        command: options
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        category: options.category.clone(),
        limits: options.limits.clone(),
        backend: options.backend,
        sandbox: options.sandbox.clone(),
        series: options.series.clone(),
        forked: false,
    }
}

/// Sample until the command exits or a limit is exceeded; then kill what is left and reap
/// everything, so that the kernel's accounting of reaped processes is complete.
fn supervise(
    monitor: &mut RunMonitor,
    child_pid: i32,
    received: &AtomicUsize,
    grace: Duration,
) -> Ending {
    let pidfd = pidfd_open(child_pid);
    let mut status = None;
    let mut forwarded: Option<(i32, Instant)> = None;
    loop {
        // Wait first: a command that ends within the first interval needs no sampling at all
        // (its peaks come from the cgroup and from wait4's rusage).
        wait_for_exit(pidfd, monitor.interval());
        reap_into(monitor, child_pid, &mut status);
        if status.is_some() || monitor.sample() {
            break;
        }
        // Signals sent to lfm go to the whole tree; after the grace period, SIGKILL.
        let signal = received.swap(0, Ordering::SeqCst) as i32;
        if signal != 0 && forwarded.is_none() {
            monitor.signal(signal);
            forwarded = Some((signal, Instant::now()));
        }
        if forwarded.is_some_and(|(_, at)| at.elapsed() > grace) {
            monitor.kill();
        }
    }
    // The command is over: nothing it started may outlive it.
    monitor.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    while status.is_none() && Instant::now() < deadline {
        reap_into(monitor, child_pid, &mut status);
        if status.is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    tree::reap_all(|reaped| monitor.observe_reaped(reaped));
    if let Some(fd) = pidfd {
        // SAFETY: we own this descriptor.
        unsafe { libc::close(fd) };
    }
    Ending {
        status,
        forwarded_signal: forwarded.map(|(s, _)| s),
        reaped_cpu: Some(monitor.reaped_cpu()),
        io: None,
        maxrss_bytes: None,
        memory_growth: None,
    }
}

fn reap_into(monitor: &mut RunMonitor, child_pid: i32, status: &mut Option<libc::c_int>) {
    for reaped in tree::reap_exited() {
        monitor.observe_reaped(&reaped);
        if reaped.pid == child_pid {
            *status = Some(reaped.status);
        }
    }
}

/// Orphans of the run (double-forked daemons) are reparented to lfm, not to init, so they
/// stay descendants: found, measured, killed and reaped.
pub fn become_subreaper() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) has no memory-safety preconditions.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

fn forward_signals() -> anyhow::Result<Arc<AtomicUsize>> {
    let received = Arc::new(AtomicUsize::new(0));
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register_usize(signal, received.clone(), signal as usize)?;
    }
    Ok(received)
}

fn spawn(
    executable: &Path,
    options: &RunOptions,
    join_fds: &[RawFd],
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    backend: &dyn Backend,
    env: Vec<(String, String)>,
) -> std::io::Result<std::process::Child> {
    let mut command = std::process::Command::new(executable);
    command
        .arg0(&options.command[0])
        .args(&options.command[1..])
        .envs(env);
    if let Some(sandbox) = &options.sandbox {
        command.current_dir(sandbox);
    }
    if own_process_group(backend) {
        command.process_group(0);
    }
    let join_fds = join_fds.to_vec();
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

pub fn child_rlimits(
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
        // RLIMIT_NPROC counts every task of the user (threads too), and root ignores it: only
        // useful for an unprivileged user without a pids controller.
        if !root && !backend.enforced().processes {
            // One above the limit: the kernel stops the growth, and the supervisor sees the
            // count pass the limit and reports it.
            let current = count_user_tasks();
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

/// What RLIMIT_NPROC counts against: every task (thread) whose real uid is ours, not only
/// processes. A user's threaded processes (a Python with a thread pool, a Dask worker) would
/// otherwise eat the headroom, and a `--processes 10` run could not fork at all.
fn count_user_tasks() -> u64 {
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
        // A stat first (the owner is the effective uid): a serve counts for each call, and
        // reading every process's status costs tens of microseconds each on a busy node. A
        // setuid program the user runs (sudo, passwd) is missed; it holds a task or two.
        .filter(|e| {
            use std::os::unix::fs::MetadataExt;
            e.metadata().is_ok_and(|m| m.uid() == uid)
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|status| tasks_of_real_uid(&status, uid))
        .sum()
}

/// The thread count in a /proc/PID/status text when its real uid is `uid`.
fn tasks_of_real_uid(status: &str, uid: libc::uid_t) -> Option<u64> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
    };
    let real_uid: libc::uid_t = field("Uid:")?.parse().ok()?;
    (real_uid == uid).then(|| field("Threads:")?.parse().ok())?
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

pub(crate) fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_counts_its_threads_for_its_real_uid_only() {
        let status =
            "Name:\tpython3\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\nThreads:\t61\n";
        assert_eq!(tasks_of_real_uid(status, 1000), Some(61));
        assert_eq!(
            tasks_of_real_uid(status, 0),
            None,
            "0 is only its effective uid"
        );
        assert_eq!(tasks_of_real_uid("Name:\tx\nUid:\t1000\n", 1000), None);
    }
}
