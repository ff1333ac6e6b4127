//! cgroup v1: one directory per controller hierarchy (memory, cpu, cpuacct, pids, blkio).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use anyhow::{bail, Context, Result};

use super::files::{self, write, Counters};
use super::{Backend, BackendKind, Enforced, Reading, Throttling};
use crate::limits::Limits;

/// Hierarchies a run joins. Each join is a cgroup migration that costs the child a few hundred
/// microseconds (an RCU grace period on v1), so only what the limits need is joined: memory and
/// cpuacct always (peak memory, CPU time), cpu for --cores, pids and freezer for --processes.
fn controllers_for(limits: &Limits) -> Vec<&'static str> {
    let mut wanted = vec!["memory", "cpuacct"];
    if limits.cores.is_some() {
        wanted.push("cpu");
    }
    if limits.processes.is_some() {
        wanted.extend(["pids", "freezer"]);
    }
    wanted
}
const CFS_PERIOD_US: u64 = 100_000;

/// This process's `lfm` directory in the hierarchy of `controller` (under its own cgroup there),
/// created and cleaned of dead lfm processes' runs the first time: a serve creates a cgroup
/// per call, and finding the mount and its own cgroup again each time (parsing
/// /proc/self/mounts and /proc/self/cgroup) cost more than creating the cgroup.
fn lfm_parent(controller: &'static str) -> Option<PathBuf> {
    static PARENTS: OnceLock<Mutex<HashMap<&'static str, Option<PathBuf>>>> = OnceLock::new();
    let mut parents = PARENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(Some(parent)) = parents.get(controller) {
        if parent.is_dir() {
            return Some(parent.clone());
        }
    }
    let parent = hierarchy(controller).map(|mount| {
        let own = files::own_cgroup(Some(controller)).unwrap_or_else(|| "/".to_string());
        mount.join(own.trim_start_matches('/')).join("lfm")
    });
    let parent = parent.filter(|parent| fs::create_dir_all(parent).is_ok());
    if let Some(parent) = &parent {
        files::clean_stale_runs(parent, |dir| files::kill_listed(&dir.join("cgroup.procs")));
    }
    parents.insert(controller, parent.clone());
    parent
}

/// Where the hierarchy holding `controller` is mounted, found once per process.
fn hierarchy(controller: &'static str) -> Option<PathBuf> {
    static MOUNTS: OnceLock<Mutex<HashMap<&'static str, Option<PathBuf>>>> = OnceLock::new();
    let mut mounts = MOUNTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    mounts
        .entry(controller)
        .or_insert_with(|| files::mount_point("cgroup", Some(controller)))
        .clone()
}

/// Controllers whose files a run may read, found once per run (co-mounted ones share a
/// directory) rather than by a stat per file on every sample.
const READ_CONTROLLERS: [&str; 6] = ["memory", "cpuacct", "cpu", "pids", "freezer", "blkio"];

pub struct Cgroup1 {
    /// controller -> this run's directory in that controller's hierarchy (deduplicated when
    /// controllers are co-mounted, as cpu,cpuacct usually are).
    dirs: Vec<(&'static str, PathBuf)>,
    /// Every one of [`READ_CONTROLLERS`] -> the run's directory holding its files, if any.
    resolved: Vec<(&'static str, Option<PathBuf>)>,
    join: Vec<File>,
    counters: Counters,
    enforced: Enforced,
    notes: Vec<String>,
    removed: bool,
    /// The limits written to the cgroup now.
    limits: Limits,
    /// The counters when the current run's window opened ([`Backend::open_window`]).
    start: Reading,
}

impl Cgroup1 {
    pub fn create(limits: &Limits) -> Result<Cgroup1> {
        let mut dirs: Vec<(&'static str, PathBuf)> = Vec::new();
        for controller in controllers_for(limits) {
            let Some(parent) = lfm_parent(controller) else {
                continue;
            };
            if dirs
                .iter()
                .any(|(_, d)| d.parent() == Some(parent.as_path()))
            {
                continue; // co-mounted with a controller already set up
            }
            let dir = parent.join(files::run_name());
            if fs::create_dir(&dir).is_err() {
                continue;
            }
            dirs.push((controller, dir));
        }
        if !dirs.iter().any(|(c, _)| *c == "memory") {
            for (_, dir) in &dirs {
                let _ = fs::remove_dir(dir);
            }
            bail!("no writable cgroup v1 memory hierarchy (need root or a delegated v1 subtree)");
        }
        let mut cgroup = Cgroup1 {
            dirs,
            resolved: Vec::new(),
            join: Vec::new(),
            counters: Counters::default(),
            enforced: Enforced::default(),
            notes: Vec::new(),
            removed: false,
            limits: Limits::default(),
            start: Reading::default(),
        };
        cgroup.resolved = READ_CONTROLLERS
            .iter()
            .map(|&c| (c, cgroup.find_dir(c).map(Path::to_path_buf)))
            .collect();
        if let Err(error) = cgroup.apply(limits) {
            let _ = cgroup.remove();
            return Err(error);
        }
        for (_, dir) in &cgroup.dirs {
            let procs = dir.join("cgroup.procs");
            let file = OpenOptions::new()
                .write(true)
                .open(&procs)
                .with_context(|| format!("opening {}", procs.display()))?;
            cgroup.join.push(file);
        }
        Ok(cgroup)
    }

    fn dir(&self, controller: &'static str) -> Option<&Path> {
        match self.resolved.iter().find(|(c, _)| *c == controller) {
            Some((_, dir)) => dir.as_deref(),
            None => self.find_dir(controller),
        }
    }

    fn find_dir(&self, controller: &'static str) -> Option<&Path> {
        // Co-mounted controllers share one directory: the run's directory in the hierarchy
        // mounted with this controller, whichever controller it was created for.
        let mount = hierarchy(controller)?;
        self.dirs
            .iter()
            .map(|(_, d)| d.as_path())
            .find(|d| d.starts_with(&mount))
    }

    fn apply(&mut self, limits: &Limits) -> Result<()> {
        self.limits = limits.clone();
        if let Some(bytes) = limits.memory_bytes {
            let dir = self
                .dir("memory")
                .context("memory hierarchy")?
                .to_path_buf();
            write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
            // Without this the run could swap past its limit instead of being OOM-killed.
            let memsw = dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &bytes.to_string())?;
            } else {
                self.notes.push("memory.memsw.limit_in_bytes missing (swap accounting off): the run may swap past --memory".into());
            }
            self.enforced.memory = true;
        }
        if let Some(cores) = limits.cores {
            match self.dir("cpu").map(Path::to_path_buf) {
                Some(dir) if dir.join("cpu.cfs_quota_us").exists() => {
                    write(&dir.join("cpu.cfs_period_us"), &CFS_PERIOD_US.to_string())?;
                    let quota = ((cores * CFS_PERIOD_US as f64).round() as u64).max(1000);
                    write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                    self.enforced.cores = true;
                }
                _ => self.notes.push(
                    "no cgroup v1 cpu controller: --cores is enforced by the supervisor".into(),
                ),
            }
        }
        if let Some(processes) = limits.processes {
            match self.dir("pids").map(Path::to_path_buf) {
                Some(dir) => {
                    write(&dir.join("pids.max"), &processes.to_string())?;
                    self.enforced.processes = true;
                }
                None => self.notes.push(
                    "no cgroup v1 pids controller: --processes is enforced by the supervisor"
                        .into(),
                ),
            }
        }
        Ok(())
    }

    /// Whether every hierarchy `limits` need (and this host has) was joined.
    fn can_hold(&self, limits: &Limits) -> bool {
        controllers_for(limits)
            .into_iter()
            .all(|c| hierarchy(c).is_none() || self.dir(c).is_some())
    }

    /// Back to no limits: memsw first, as the kernel keeps it at or above the memory limit.
    fn clear_limits(&mut self) -> Result<()> {
        let previous = std::mem::take(&mut self.limits);
        if previous.memory_bytes.is_some() {
            let dir = self.dir("memory").context("memory hierarchy")?;
            let memsw = dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, "-1")?;
            }
            write(&dir.join("memory.limit_in_bytes"), "-1")?;
        }
        if previous.cores.is_some() && self.enforced.cores {
            if let Some(dir) = self.dir("cpu") {
                write(&dir.join("cpu.cfs_quota_us"), "-1")?;
            }
        }
        if previous.processes.is_some() && self.enforced.processes {
            if let Some(dir) = self.dir("pids") {
                write(&dir.join("pids.max"), "max")?;
            }
        }
        self.enforced = Enforced::default();
        self.notes.clear();
        Ok(())
    }

    /// Every counter as the kernel has it, since the cgroup was made.
    fn read_since_made(&self) -> Reading {
        let counters = &self.counters;
        let mut reading = Reading::default();
        if let Some(dir) = self.dir("memory") {
            reading.memory_current = counters.u64(&dir.join("memory.usage_in_bytes"));
            reading.memory_peak = counters.u64(&dir.join("memory.max_usage_in_bytes"));
            if let Some(stat) = counters.keyed(&dir.join("memory.stat")) {
                // total_* include descendant cgroups (a workload may create its own).
                let total = |key: &str| stat.get(&format!("total_{key}")).or(stat.get(key));
                reading.anon_bytes = total("rss");
                reading.file_bytes = total("cache");
                reading.swap_bytes = total("swap");
                // rss is anonymous memory (and swap cache); shmem sits in cache but cannot
                // be dropped, only swapped.
                reading.unreclaimable_bytes =
                    Some(total("rss").unwrap_or(0) + total("shmem").unwrap_or(0));
            }
            reading.oom_kills = counters
                .keyed_value(&dir.join("memory.oom_control"), "oom_kill")
                .unwrap_or(0);
        }
        if let Some(dir) = self.dir("cpuacct") {
            reading.cpu_total_us = counters.u64(&dir.join("cpuacct.usage")).map(|ns| ns / 1000);
            if let Some(stat) = counters.keyed(&dir.join("cpuacct.stat")) {
                let ticks = crate::proctree::clock_ticks_per_second();
                reading.cpu_user_us = stat.get("user").map(|t| t * 1_000_000 / ticks);
                reading.cpu_system_us = stat.get("system").map(|t| t * 1_000_000 / ticks);
            }
        }
        if self.enforced.cores {
            if let Some(stat) = self
                .dir("cpu")
                .and_then(|d| counters.keyed(&d.join("cpu.stat")))
            {
                reading.throttling = Some(Throttling {
                    periods: stat.get("nr_periods").unwrap_or(0),
                    throttled_periods: stat.get("nr_throttled").unwrap_or(0),
                    throttled_us: stat.get("throttled_time").unwrap_or(0) / 1000,
                });
            }
        }
        if let Some(dir) = self.dir("pids") {
            reading.pids_limit_hits = counters
                .keyed_value(&dir.join("pids.events"), "max")
                .unwrap_or(0);
        }
        reading
    }
}

/// Whether what is charged to the memory cgroup in `dir` now may stay.
fn charge_may_stay(counters: &Counters, dir: &Path) -> bool {
    counters
        .u64(&dir.join("memory.usage_in_bytes"))
        .is_some_and(|charged| charged <= super::RECLAIM_ABOVE)
}

impl Backend for Cgroup1 {
    fn kind(&self) -> BackendKind {
        BackendKind::Cgroup1
    }

    fn join_fds(&self) -> Vec<RawFd> {
        self.join.iter().map(|f| f.as_raw_fd()).collect()
    }

    fn enforced(&self) -> Enforced {
        self.enforced
    }

    fn read(&self) -> Reading {
        self.read_since_made().since(&self.start)
    }

    fn open_window(&mut self, limits: &Limits) -> Result<()> {
        if !self.can_hold(limits) {
            bail!("this cgroup did not join every cgroup v1 hierarchy the new limits need");
        }
        if !super::same_cgroup_limits(limits, &self.limits) {
            self.clear_limits()?;
            self.apply(limits)?;
        }
        if let Some(dir) = self.dir("memory") {
            // The kernel sets the high-water mark to the charge now.
            write(&dir.join("memory.max_usage_in_bytes"), "0")?;
        }
        self.start = self.read_since_made();
        Ok(())
    }

    fn reclaim(&self) -> Result<()> {
        let dir = self.dir("memory").context("memory hierarchy")?;
        if charge_may_stay(&self.counters, dir) {
            return Ok(());
        }
        write(&dir.join("memory.force_empty"), "0")
    }

    fn pids(&self) -> Option<Vec<i32>> {
        let dir = self.dir("memory")?;
        // Read by path: v1 keeps the pid list of an open descriptor for a second after its
        // first read, so a kept one would miss the run's newest processes.
        Some(files::read_pids(&dir.join("cgroup.procs")))
    }

    fn kill_all(&self) {
        // Freeze first so a fork bomb cannot outrun the kill loop, then kill, then thaw.
        let freezer = self.dir("freezer").map(|d| d.join("freezer.state"));
        if let Some(state) = &freezer {
            let _ = fs::write(state, "FROZEN");
        }
        if let Some(dir) = self.dir("memory") {
            for pid in files::read_pids(&dir.join("cgroup.procs")) {
                // SAFETY: kill(2) on a pid the cgroup lists.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if let Some(state) = &freezer {
            let _ = fs::write(state, "THAWED");
        }
        if let Some(dir) = self.dir("memory") {
            files::kill_listed(&dir.join("cgroup.procs"));
        }
    }

    fn remove(&mut self) -> Result<()> {
        if self.removed {
            return Ok(());
        }
        self.join.clear();
        self.counters.close_all();
        let mut errors = Vec::new();
        for (_, dir) in &self.dirs {
            if let Err(error) = files::remove_cgroup_dir(dir) {
                errors.push(format!("{error:#}"));
            }
        }
        self.removed = true;
        if errors.is_empty() {
            Ok(())
        } else {
            bail!("could not remove cgroups: {}", errors.join("; "))
        }
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
}

impl Drop for Cgroup1 {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // Empty by now, mostly (a served call's remains were killed first): an rmdir in each
        // hierarchy says so at once, without reading `cgroup.procs` twice; only cgroups still
        // busy are killed and waited for (`remove` passes over those already gone).
        self.join.clear();
        self.counters.close_all();
        // In order, stopping at the first busy one: a process is in every hierarchy, so the
        // others are busy too and `kill_all` still finds it listed in the first.
        let empty = self
            .dirs
            .iter()
            .all(|(_, dir)| std::fs::remove_dir(dir).is_ok());
        if empty {
            self.removed = true;
            return;
        }
        self.kill_all();
        let _ = self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    const MIB: u64 = 1 << 20;

    /// Run `script` in Python inside `cgroup`, as a call in it would; returns the CPU time the
    /// process itself used (wait4's rusage), in microseconds.
    #[allow(
        clippy::zombie_processes,
        reason = "wait4 reaps the child, for its rusage"
    )]
    fn run_inside(cgroup: &Cgroup1, script: &str) -> u64 {
        let fds = cgroup.join_fds();
        let mut command = std::process::Command::new("python3");
        command.args(["-c", script]);
        // SAFETY: only write(2) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                for &fd in &fds {
                    libc::write(fd, b"0".as_ptr().cast(), 1);
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let mut status = 0;
        // SAFETY: rusage is plain data the kernel fills; the pid is this test's own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let pid = child.id() as libc::pid_t;
        assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        micros(usage.ru_utime) + micros(usage.ru_stime)
    }

    /// Root on a cgroup v1 host (this project's CI VM); elsewhere there is nothing to test.
    fn cgroup() -> Option<Cgroup1> {
        match Cgroup1::create(&Limits::default()) {
            Ok(cgroup) => Some(cgroup),
            Err(error) => {
                eprintln!("skipped: {error:#}");
                None
            }
        }
    }

    #[test]
    fn a_window_after_a_large_run_has_its_own_peak_and_cpu() {
        let Some(mut cgroup) = cgroup() else { return };
        let large_cpu = run_inside(
            &cgroup,
            "import time\nb = bytearray(300 << 20)\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass",
        );
        let first = cgroup.read();
        assert!(first.memory_peak.unwrap() > 290 * MIB, "{first:?}");
        assert!(
            first.cpu_total_us.unwrap() >= large_cpu * 9 / 10,
            "{first:?}"
        );
        cgroup.open_window(&Limits::default()).unwrap();
        let small_cpu = run_inside(&cgroup, "b = bytearray(10 << 20)");
        let second = cgroup.read();
        assert!(second.memory_peak.unwrap() < 100 * MIB, "{second:?}");
        // Compared with the small run's own CPU, not a fixed figure: a loaded host stretches
        // Python's start-up, and what matters is that none of the large run is counted.
        let window_cpu = second.cpu_total_us.unwrap();
        let slack = 50_000 + small_cpu / 5;
        assert!(
            window_cpu.abs_diff(small_cpu) < slack,
            "window {window_cpu} us, the run's own {small_cpu} us: {second:?}"
        );
        assert!(
            large_cpu > small_cpu + slack,
            "the large run must be told apart"
        );
        cgroup.remove().unwrap();
    }

    #[test]
    fn a_window_writes_new_limits_and_lifts_those_no_longer_asked() {
        let Some(mut cgroup) = cgroup() else { return };
        let memory = cgroup.dir("memory").unwrap().join("memory.limit_in_bytes");
        let unlimited = fs::read_to_string(&memory).unwrap();
        cgroup
            .open_window(&Limits {
                memory_bytes: Some(64 * MIB),
                ..Limits::default()
            })
            .unwrap();
        assert_eq!(
            fs::read_to_string(&memory).unwrap().trim(),
            (64 * MIB).to_string()
        );
        cgroup
            .open_window(&Limits {
                memory_bytes: Some(128 * MIB),
                ..Limits::default()
            })
            .unwrap();
        assert_eq!(
            fs::read_to_string(&memory).unwrap().trim(),
            (128 * MIB).to_string()
        );
        cgroup.open_window(&Limits::default()).unwrap();
        assert_eq!(fs::read_to_string(&memory).unwrap(), unlimited);
        assert!(!cgroup.enforced().memory);
        // --processes needs the pids hierarchy, which a cgroup made without it did not join.
        let processes = Limits {
            processes: Some(4),
            ..Limits::default()
        };
        assert!(hierarchy("pids").is_none() || cgroup.open_window(&processes).is_err());
        cgroup.remove().unwrap();
    }
}
