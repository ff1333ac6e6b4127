//! cgroup v2: one directory in the unified hierarchy, under lfm's own cgroup or beside it
//! (delegate.rs chooses where, and in a delegated cgroup makes the controllers reachable).
//!
//! Limits need the memory/cpu/pids controllers delegated to lfm's subtree. Where they are not
//! (the controller-free cgroup2 mount of hybrid machines, or a subtree without delegation), the
//! cgroup still tracks every process (cgroup.procs), kills them all at once (cgroup.kill) and
//! counts CPU (cpu.stat); the supervisor then enforces memory and cores from /proc.

use std::fs::{self, File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::delegate;
use super::files::{self, read_keyed, write, Counters};
use super::{Backend, BackendKind, Enforced, Reading, Throttling};
use crate::limits::Limits;

const CPU_PERIOD_US: u64 = 100_000;

pub struct Cgroup2 {
    dir: PathBuf,
    join: Option<File>,
    counters: Counters,
    controllers: Vec<String>,
    enforced: Enforced,
    notes: Vec<String>,
    removed: bool,
    /// Notes of the cgroup's placement, which every run in it keeps.
    placement_notes: Vec<String>,
    /// The limits written to the cgroup now.
    limits: Limits,
    /// The counters when the current run's window opened ([`Backend::open_window`]).
    start: Reading,
    /// The kernel did not take a reset of memory.peak (before 6.12): the window has no peak.
    peak_not_reset: bool,
}

impl Cgroup2 {
    pub fn create(limits: &Limits) -> Result<Cgroup2> {
        let mount =
            files::mount_point("cgroup2", None).context("no cgroup2 filesystem is mounted")?;
        let own = files::own_cgroup(None).unwrap_or_else(|| "/".to_string());
        let base = mount.join(own.trim_start_matches('/'));
        let placement = delegate::place(&mount, &base)?;
        let parent = placement.runs_parent;
        fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
        files::clean_stale_runs(&parent, |dir| {
            if fs::write(dir.join("cgroup.kill"), "1").is_err() {
                files::kill_listed(&dir.join("cgroup.procs"));
            }
        });
        // Delegate what the parent offers to the run directories (the `lfm` directory holds no
        // process, so the no-internal-process rule allows it).
        let offered = fs::read_to_string(parent.join("cgroup.controllers")).unwrap_or_default();
        for controller in delegate::WANTED {
            if offered.split_whitespace().any(|c| c == controller) {
                let _ = fs::write(
                    parent.join("cgroup.subtree_control"),
                    format!("+{controller}"),
                );
            }
        }
        let dir = parent.join(files::run_name());
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let controllers: Vec<String> = fs::read_to_string(dir.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let mut cgroup = Cgroup2 {
            dir,
            join: None,
            counters: Counters::default(),
            controllers,
            enforced: Enforced::default(),
            notes: placement.note.clone().into_iter().collect(),
            removed: false,
            placement_notes: placement.note.into_iter().collect(),
            limits: Limits::default(),
            start: Reading::default(),
            peak_not_reset: false,
        };
        if let Err(error) = cgroup.apply(limits) {
            let _ = cgroup.remove();
            return Err(error);
        }
        let procs = cgroup.dir.join("cgroup.procs");
        cgroup.join = Some(
            OpenOptions::new()
                .write(true)
                .open(&procs)
                .with_context(|| format!("opening {}", procs.display()))?,
        );
        Ok(cgroup)
    }

    pub fn has_memory_controller(&self) -> bool {
        self.has("memory")
    }

    fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    fn apply(&mut self, limits: &Limits) -> Result<()> {
        self.limits = limits.clone();
        if let Some(bytes) = limits.memory_bytes {
            if self.has("memory") {
                write(&self.dir.join("memory.max"), &bytes.to_string())?;
                let _ = fs::write(self.dir.join("memory.swap.max"), "0");
                self.enforced.memory = true;
            } else {
                self.notes.push("cgroup2 has no memory controller here: --memory is enforced by the supervisor from /proc".into());
            }
        }
        if let Some(cores) = limits.cores {
            if self.has("cpu") {
                let quota = ((cores * CPU_PERIOD_US as f64).round() as u64).max(1000);
                write(
                    &self.dir.join("cpu.max"),
                    &format!("{quota} {CPU_PERIOD_US}"),
                )?;
                self.enforced.cores = true;
            } else {
                self.notes.push(
                    "cgroup2 has no cpu controller here: --cores is enforced by the supervisor"
                        .into(),
                );
            }
        }
        if let Some(processes) = limits.processes {
            if self.has("pids") {
                write(&self.dir.join("pids.max"), &processes.to_string())?;
                self.enforced.processes = true;
            } else {
                self.notes.push("cgroup2 has no pids controller here: --processes is enforced by the supervisor".into());
            }
        }
        Ok(())
    }

    /// Back to no limits, and the notes of this cgroup's placement only.
    fn clear_limits(&mut self) -> Result<()> {
        let previous = std::mem::take(&mut self.limits);
        let dir = self.dir.clone();
        if previous.memory_bytes.is_some() && self.enforced.memory {
            write(&dir.join("memory.max"), "max")?;
        }
        if previous.cores.is_some() && self.enforced.cores {
            write(&dir.join("cpu.max"), &format!("max {CPU_PERIOD_US}"))?;
        }
        if previous.processes.is_some() && self.enforced.processes {
            write(&dir.join("pids.max"), "max")?;
        }
        self.enforced = Enforced::default();
        self.notes = self.placement_notes.clone();
        Ok(())
    }

    /// Every counter as the kernel has it, since the cgroup was made (memory.peak since the
    /// last reset through the kept descriptor).
    fn read_since_made(&self) -> Reading {
        let dir = &self.dir;
        let counters = &self.counters;
        let cpu = counters.keyed(&dir.join("cpu.stat"));
        let cpu_key = |key: &str| cpu.as_ref().and_then(|s| s.get(key));
        let mut reading = Reading {
            cpu_total_us: cpu_key("usage_usec"),
            cpu_user_us: cpu_key("user_usec"),
            cpu_system_us: cpu_key("system_usec"),
            ..Reading::default()
        };
        if self.enforced.cores {
            reading.throttling = Some(Throttling {
                periods: cpu_key("nr_periods").unwrap_or(0),
                throttled_periods: cpu_key("nr_throttled").unwrap_or(0),
                throttled_us: cpu_key("throttled_usec").unwrap_or(0),
            });
        }
        if self.has("memory") {
            reading.memory_current = counters.u64(&dir.join("memory.current"));
            reading.memory_peak = counters.u64(&dir.join("memory.peak"));
            if let Some(stat) = counters.keyed(&dir.join("memory.stat")) {
                reading.anon_bytes = stat.get("anon");
                reading.file_bytes = stat.get("file");
                // file includes shmem, which cannot be dropped; slab_reclaimable (dentries,
                // inodes) can, the rest of the kernel's charge cannot.
                reading.unreclaimable_bytes = stat.sum(&[
                    "anon",
                    "shmem",
                    "kernel_stack",
                    "pagetables",
                    "percpu",
                    "sock",
                    "slab_unreclaimable",
                ]);
            }
            reading.swap_bytes = counters.u64(&dir.join("memory.swap.current"));
            reading.oom_kills = counters
                .keyed_value(&dir.join("memory.events"), "oom_kill")
                .unwrap_or(0);
        }
        if self.has("pids") {
            reading.pids_limit_hits = counters
                .keyed_value(&dir.join("pids.events"), "max")
                .unwrap_or(0);
        }
        reading
    }

    /// `populated` from cgroup.events: whether any process is left in the run.
    pub fn populated(&self) -> Option<bool> {
        read_keyed(&self.dir.join("cgroup.events"), "populated").map(|v| v == 1)
    }
}

impl Backend for Cgroup2 {
    fn kind(&self) -> BackendKind {
        BackendKind::Cgroup2
    }

    fn join_fds(&self) -> Vec<RawFd> {
        self.join.iter().map(|f| f.as_raw_fd()).collect()
    }

    fn enforced(&self) -> Enforced {
        self.enforced
    }

    fn read(&self) -> Reading {
        let mut reading = self.read_since_made().since(&self.start);
        if self.peak_not_reset {
            reading.memory_peak = None;
        }
        reading
    }

    fn open_window(&mut self, limits: &Limits) -> Result<()> {
        if !super::same_cgroup_limits(limits, &self.limits) {
            self.clear_limits()?;
            self.apply(limits)?;
        }
        if self.has("memory") {
            let peak = self.dir.join("memory.peak");
            self.peak_not_reset = self.counters.write_and_keep(&peak, "reset\n").is_err();
            if self.peak_not_reset {
                self.notes.push("memory.peak could not be reset (Linux before 6.12): this run's cgroup held earlier runs, so its peak comes from samples and its own growth".into());
            }
        }
        self.start = self.read_since_made();
        Ok(())
    }

    fn pids(&self) -> Option<Vec<i32>> {
        Some(self.counters.pids(&self.dir.join("cgroup.procs")))
    }

    fn kill_all(&self) {
        // cgroup.kill (5.14+) kills every process atomically, forks included; else loop.
        if fs::write(self.dir.join("cgroup.kill"), "1").is_err() {
            let _ = fs::write(self.dir.join("cgroup.freeze"), "1");
            files::kill_listed(&self.dir.join("cgroup.procs"));
            let _ = fs::write(self.dir.join("cgroup.freeze"), "0");
        }
        for _ in 0..400 {
            if self.populated() != Some(true) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn remove(&mut self) -> Result<()> {
        if self.removed {
            return Ok(());
        }
        self.join = None;
        self.counters.close_all();
        files::remove_cgroup_dir(&self.dir)?;
        self.removed = true;
        Ok(())
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
}

impl Drop for Cgroup2 {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // Empty by now, mostly (a served call's remains were killed first): an rmdir says so
        // at once; only a cgroup still busy is killed and waited for.
        self.join = None;
        self.counters.close_all();
        if std::fs::remove_dir(&self.dir).is_ok() {
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

    /// A run directory written by hand: the counters of a kernel without memory.peak (< 5.19).
    fn scripted(dir: &std::path::Path) -> Cgroup2 {
        let write = |name: &str, text: &str| fs::write(dir.join(name), text).unwrap();
        write("memory.current", "734003200\n");
        write(
            "memory.stat",
            "anon 104857600\nfile 629145600\nkernel_stack 65536\npagetables 262144\npercpu 0\nsock 0\nshmem 1048576\nslab_reclaimable 4194304\nslab_unreclaimable 131072\n",
        );
        write("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
        write(
            "cpu.stat",
            "usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\nnr_periods 20\nnr_throttled 15\nthrottled_usec 750000\n",
        );
        Cgroup2 {
            dir: dir.to_path_buf(),
            join: None,
            counters: Counters::default(),
            controllers: vec!["memory".into(), "cpu".into()],
            enforced: Enforced {
                cores: true,
                ..Enforced::default()
            },
            notes: Vec::new(),
            removed: true,
            placement_notes: Vec::new(),
            limits: Limits::default(),
            start: Reading::default(),
            peak_not_reset: false,
        }
    }

    #[test]
    fn a_window_counts_cpu_from_its_start_and_without_a_peak_reset_has_no_peak() {
        let dir = tempfile::tempdir().unwrap();
        let mut cgroup = scripted(dir.path());
        fs::write(dir.path().join("memory.peak"), "").unwrap();
        // A directory where the peak file is: the kernel's refusal of the write, as before 6.12.
        fs::remove_file(dir.path().join("memory.peak")).unwrap();
        fs::create_dir(dir.path().join("memory.peak")).unwrap();
        cgroup.open_window(&Limits::default()).unwrap();
        assert_eq!(cgroup.read().memory_peak, None);
        assert!(cgroup.notes().iter().any(|n| n.contains("memory.peak")));
        fs::write(
            dir.path().join("cpu.stat"),
            "usage_usec 2030000\nuser_usec 1520000\nsystem_usec 510000\nnr_periods 21\nnr_throttled 15\nthrottled_usec 750000\n",
        )
        .unwrap();
        let reading = cgroup.read();
        assert_eq!(reading.cpu_total_us, Some(30000));
        assert_eq!(reading.cpu_user_us, Some(20000));
        assert_eq!(reading.throttling.unwrap().periods, 1);
    }

    #[test]
    fn a_window_of_other_limits_rewrites_them_and_of_the_same_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut cgroup = scripted(dir.path());
        fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        let limits = Limits {
            memory_bytes: Some(1 << 30),
            wall_seconds: Some(5.0),
            ..Limits::default()
        };
        cgroup.open_window(&limits).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("memory.max")).unwrap(),
            "1073741824"
        );
        assert!(cgroup.enforced().memory);
        fs::write(dir.path().join("memory.max"), "untouched").unwrap();
        let other_wall = Limits {
            wall_seconds: Some(9.0),
            ..limits.clone()
        };
        cgroup.open_window(&other_wall).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("memory.max")).unwrap(),
            "untouched"
        );
        cgroup.open_window(&Limits::default()).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("memory.max")).unwrap(),
            "max"
        );
        assert!(!cgroup.enforced().memory);
    }

    #[test]
    fn without_memory_peak_the_reading_has_no_kernel_peak_and_the_samples_decide() {
        let dir = tempfile::tempdir().unwrap();
        let reading = scripted(dir.path()).read();
        assert_eq!(reading.memory_peak, None);
        assert_eq!(reading.memory_current, Some(734003200));
        // anon + shmem + kernel_stack + pagetables + percpu + sock + slab_unreclaimable: the
        // 600 MiB of page cache and the reclaimable slab are not counted.
        assert_eq!(
            reading.unreclaimable_bytes,
            Some(104857600 + 1048576 + 65536 + 262144 + 131072)
        );
        assert_eq!(reading.file_bytes, Some(629145600));
    }

    #[test]
    fn cpu_stat_gives_time_and_throttling() {
        let dir = tempfile::tempdir().unwrap();
        let reading = scripted(dir.path()).read();
        assert_eq!(reading.cpu_total_us, Some(2000000));
        assert_eq!(
            reading.throttling,
            Some(Throttling {
                periods: 20,
                throttled_periods: 15,
                throttled_us: 750000
            })
        );
    }
}
