//! The Report (docs/report.md): what a run used, how it ended, and under which control.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limits::Limits;

pub const REPORT_FORMAT: &str = "lfm-report/2";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub format: String,
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Set by `lfm call` and `lfm serve`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCall>,
    /// Set when a called function returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultInfo>,
    /// What a call (`lfm call`, `lfm serve`) really imported, logged as it happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imports: Option<Imports>,
    pub backend: String,
    pub limits: Limits,
    /// The limits that came from sizing (`--auto`), not from the user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits_from_sizing: Vec<String>,
    /// The size of the run's input in bytes, known before it ran (`lfm run --input` or
    /// `--input-size`; a call's arguments and the files they name): what the input-aware
    /// sizing strategies size from. Absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_bytes: Option<u64>,
    /// `lfm serve`: what the call held of the node's budget while it ran, and how long it
    /// waited in the queue for that (docs/serve.md "Admission").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocated>,
    pub exit: Exit,
    /// Each exceeded resource with its limit (bytes, cores, seconds, processes).
    pub limits_exceeded: BTreeMap<String, f64>,
    pub start: f64,
    pub end: f64,
    pub wall_time: f64,
    pub cpu_time: CpuTime,
    pub cores: Cores,
    /// Set where the kernel enforced --cores: how much the limit held the run back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_throttling: Option<CpuThrottling>,
    pub memory: Memory,
    pub virtual_memory_bytes: u64,
    pub swap_bytes: u64,
    /// Only with a sandbox directory (`--sandbox`): null otherwise.
    pub disk: Option<Disk>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub max_concurrent_processes: u64,
    pub total_processes: u64,
    /// Only for runs given GPUs (`--gpus`): which, and what the run did on them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
    pub sampling: Sampling,
    /// What the backend could not do as asked, and problems that did not stop the run.
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Allocated {
    /// The call's memory allocation, which is also its memory limit.
    pub memory_bytes: u64,
    /// Its cores allocation (counted; enforced only as a `cores` limit).
    pub cores: f64,
    pub queue_wait_seconds: f64,
    /// The node's budget the serve admitted calls against.
    pub node_memory_bytes: u64,
    pub node_cores: f64,
    /// What the serve and its zygote held resident when the call was admitted, which calls
    /// were not admitted against (none in Reports of lfm before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve_memory_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exit {
    /// `normal`, `signal`, `limits` or `error`.
    #[serde(rename = "type")]
    pub kind: ExitKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<ExceptionInfo>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ExitKind {
    Normal,
    Signal,
    Limits,
    Error,
    /// A called function raised: `exit.exception` says what.
    Exception,
}

/// An exception a called function raised, as its interpreter described it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExceptionInfo {
    /// The exception class (`ValueError`), with its module when not builtins.
    #[serde(rename = "type")]
    pub type_name: String,
    pub message: String,
    /// What the caller is shown: lfm's own frames left out.
    pub traceback: String,
    /// The traceback with every frame, lfm's own included; absent when none was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_traceback: Option<String>,
}

/// The function a call ran (`lfm call`, `lfm serve`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FunctionCall {
    /// `file.py:qualname`, `pkg.mod:qualname`, or `pickle:<qualname>`.
    pub target: String,
    /// How it was loaded: `slice`, `import` or `pickle`.
    pub mode: String,
    /// `lfm serve`: the context the call ran with (docs/serve.md "Contexts").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextUse>,
    /// `lfm serve`, calls of a function with `reuse`: the process the call ran in (docs/serve.md
    /// "Reused processes").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessUse>,
}

/// The process a call of a reused function ran in.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessUse {
    pub pid: i32,
    /// How many calls the process has run, this one included (1: its first).
    pub calls: u64,
    /// True: an earlier call ran in it (warm; its state is there); false: forked for this call.
    pub reused: bool,
}

/// A context a call ran with: where its initialiser ran for this call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContextUse {
    /// The initialiser, `module:qualname`.
    pub name: String,
    /// `zygote`: the call was forked with it loaded, and pays nothing for it; `call`: the
    /// call ran the initialiser itself (its figures include the load).
    pub loaded: String,
    /// With `call`: the seconds the initialiser took in the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// With `call`, when the zygote will never hold it: why (it initialised a GPU driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// docs/report.md's example Report (its second JSON block): what the crates above the monitor
/// test with, so that their tests follow the documented format.
#[doc(hidden)]
pub fn documented_example() -> Report {
    let doc = include_str!("../../docs/report.md");
    let block = doc
        .split("```json\n")
        .nth(2)
        .expect("docs/report.md has a Report example");
    let json = &block[..block.find("```").expect("a closed JSON block")];
    serde_json::from_str(json).expect("docs/report.md's example is a Report")
}

/// The modules a call loaded, in the order it loaded them (docs/report.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Imports {
    pub modules: Vec<ImportedModule>,
    /// `lfm serve`: the modules the zygote preloaded; a call that uses them imports nothing,
    /// so whether it touched them is not known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preloaded: Vec<String>,
    /// Imported modules of installed distributions that the function's static closure does not
    /// list (`lfm call` in slice mode): what the analyzer missed, e.g. a module imported by a
    /// name computed at run time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_closure: Vec<String>,
    /// What the imports were compared with: kept with the call in the history (`lfm usage`),
    /// never written in the Report (a pandas closure is thousands of names).
    #[serde(skip)]
    pub closure: Option<std::sync::Arc<crate::imports::StaticClosure>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImportedModule {
    pub name: String,
    /// The file it was loaded from (none for built-in and frozen modules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// False when no finder found it (the import raised).
    pub found: bool,
    /// `name==version` of the installed distribution that owns the file, where lfm knows the
    /// environment's distributions (`lfm call` in slice mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    /// Loaded before the call (the interpreter's, the runner's, the zygote's): the call used
    /// it without loading it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub loaded: bool,
}

/// What a call returned: its type and size, never the value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResultInfo {
    #[serde(rename = "type")]
    pub type_name: String,
    /// `json` or `pickle`.
    pub format: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuTime {
    pub user: f64,
    pub system: f64,
    pub total: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Cores {
    /// Highest CPU use over any window of `window_seconds`.
    pub peak: f64,
    /// cpu_time.total / wall_time.
    pub average: f64,
    pub window_seconds: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuThrottling {
    /// CPU-limit enforcement periods (100 ms each) in which the run was runnable.
    pub periods: u64,
    /// Periods in which the run used its whole quota and was held back.
    pub throttled_periods: u64,
    pub throttled_seconds: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Memory {
    /// The headline: the most memory the run could not do without at any moment (anonymous,
    /// shared and pinned kernel memory; never reclaimable page cache). A limit of this size,
    /// plus headroom, is what the run needs.
    pub peak_bytes: u64,
    /// Where the headline came from: `cgroup-stat` (sampled unreclaimable counters of the
    /// run's cgroup), `vmhwm` (the tree's per-process VmHWM high-water marks and reaped
    /// children's ru_maxrss, which catch spikes between samples), `sampled-rss`.
    pub peak_source: String,
    /// The kernel's own peak of the cgroup's charge, page cache included (v2 memory.peak,
    /// v1 memory.max_usage_in_bytes). It overstates the need by whatever files the run read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_peak_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// Largest anonymous-memory charge seen in the cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anon_bytes: Option<u64>,
    /// Largest page-cache charge seen in the cgroup: the reclaimable part of the raw peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Disk {
    pub path: String,
    /// Allocated bytes of the files under `path` (a sparse file counts what it occupies).
    pub bytes: u64,
    pub files: u64,
    /// Apparent size of the largest file: reaching `--disk` means RLIMIT_FSIZE refused a write.
    pub largest_file_bytes: u64,
}

/// A run's GPUs (docs/report.md, "GPUs"). Figures the driver could not give are null.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Gpu {
    /// Where the figures come from: `nvml`, `scripted`, or `none` (no driver: null figures).
    pub source: String,
    /// The devices the run held, no other lfm run on the node holding them at the same time.
    pub devices: Vec<crate::gpu::Device>,
    /// CUDA_VISIBLE_DEVICES as the run got it.
    pub visible_devices: String,
    /// How long the run waited for free devices.
    pub wait_seconds: f64,
    /// Largest sampled sum of the GPU memory of the run's processes, on any device.
    pub memory_peak_bytes: Option<u64>,
    /// Utilisation of the run's devices (mean over them), time-weighted over the run.
    pub utilization_average_percent: Option<f64>,
    pub utilization_peak_percent: Option<f64>,
    /// Devices on which a process of the run was seen.
    pub devices_used: Option<u64>,
    pub violations: Vec<GpuViolation>,
}

impl Gpu {
    /// `GPU-... memory 2048.0 MiB peak, util 85% avg`, or that it was not measured.
    fn words(&self) -> String {
        match (self.memory_peak_bytes, self.utilization_average_percent) {
            (Some(bytes), utilization) => format!(
                "{} memory {:.1} MiB peak{}",
                self.visible_devices,
                bytes as f64 / MB,
                utilization
                    .map(|u| format!(", util {u:.0}% avg"))
                    .unwrap_or_default()
            ),
            (None, _) => format!("{} (not measured)", self.visible_devices),
        }
    }
}

/// A process where it should not be: the run's on a device it was not given
/// (`other-device`), or another's on the run's device (`foreign-process`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuViolation {
    pub kind: String,
    pub pid: i32,
    pub process: String,
    pub device: String,
    /// `noted`, or `killed` (`--gpu-violation kill`, the run's own processes only).
    pub action: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Sampling {
    pub samples: u64,
    pub first_interval_ms: f64,
    pub last_interval_ms: f64,
}

/// One line of `--series`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SeriesSample {
    pub t: f64,
    pub cpu_time: f64,
    pub cores: f64,
    pub memory_bytes: u64,
    pub processes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_percent: Option<f64>,
}

/// A `--series` file, sample by sample; a line that is not a sample is an error naming it.
pub fn read_series(path: &std::path::Path) -> Result<Vec<SeriesSample>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    lines
        .map(|(number, line)| {
            serde_json::from_str(line).map_err(|e| {
                format!(
                    "{}:{}: not a series sample: {e}",
                    path.display(),
                    number + 1
                )
            })
        })
        .collect()
}

const MB: f64 = 1_048_576.0;

/// A limit as people write it: MiB for bytes, s for time.
fn limit_text(resource: &str, limit: f64) -> String {
    match resource {
        "memory" | "disk" | "gpu_memory" => format!("{:.1} MiB", limit / MB),
        "wall_time" => format!("{limit}s"),
        _ => format!("{limit}"),
    }
}

impl Report {
    /// One line for people: how it ended (and which limit was hit), time, cores (and whether a
    /// CPU limit held it back), headline memory, processes, disk; then the notes.
    pub fn summary_line(&self) -> String {
        let mib = |bytes: u64| bytes as f64 / MB;
        let mut line = format!(
            "lfm: {} | wall {:.2}s cpu {:.2}s cores {:.2} peak/{:.2} avg{} | memory {:.1} MiB ({}){} | procs {} max, {} total | backend {}",
            self.ending(),
            self.wall_time,
            self.cpu_time.total,
            self.cores.peak,
            self.cores.average,
            self.throttling_words(),
            mib(self.memory.peak_bytes),
            self.memory.peak_source,
            self.memory
                .file_bytes
                .filter(|&file| file >= 1 << 20)
                .map(|file| format!(", page cache {:.1} MiB not counted", mib(file)))
                .unwrap_or_default(),
            self.max_concurrent_processes,
            self.total_processes,
            self.backend
        );
        if let Some(disk) = &self.disk {
            line.push_str(&format!(
                " | disk {:.1} MiB in {} files",
                mib(disk.bytes),
                disk.files
            ));
        }
        if let Some(gpu) = &self.gpu {
            line.push_str(&format!(" | gpu {}", gpu.words()));
        }
        for note in &self.notes {
            line.push_str(&format!("\nlfm: note: {note}"));
        }
        line
    }

    fn ending(&self) -> String {
        match self.exit.kind {
            ExitKind::Normal => format!("exit {}", self.exit.status.unwrap_or(0)),
            ExitKind::Signal => format!("signal {}", self.exit.signal.unwrap_or(0)),
            ExitKind::Limits => format!(
                "killed: limit exceeded ({})",
                self.limits_exceeded
                    .iter()
                    .map(|(resource, limit)| format!("{resource} {}", limit_text(resource, *limit)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ExitKind::Error => format!("error: {}", self.exit.error.clone().unwrap_or_default()),
            ExitKind::Exception => match &self.exit.exception {
                Some(e) => format!("exception {}: {}", e.type_name, e.message),
                None => "exception".into(),
            },
        }
    }

    fn throttling_words(&self) -> String {
        match &self.cpu_throttling {
            Some(t) if t.throttled_periods > 0 => format!(
                " (THROTTLED {:.2}s in {} of {} periods: the --cores limit was binding)",
                t.throttled_seconds, t.throttled_periods, t.periods
            ),
            _ => String::new(),
        }
    }

    /// cctools resource_monitor's summary: its names, units and `[value, "unit"]` pairs.
    pub fn resource_monitor_summary(&self) -> serde_json::Value {
        use serde_json::json;
        let mb = |bytes: u64| ((bytes as f64 / MB) * 1000.0).round() / 1000.0;
        let round3 = |v: f64| (v * 1000.0).round() / 1000.0;
        let mut summary = json!({
            "command": self.command.join(" "),
            "exit_type": match self.exit.kind {
                ExitKind::Normal => "normal",
                ExitKind::Signal => "signal",
                ExitKind::Limits => "limits",
                ExitKind::Error => "error",
                // resource_monitor knows no exceptions: the process exited, with a status.
                ExitKind::Exception => "normal",
            },
            "start": [round3(self.start), "s"],
            "end": [round3(self.end), "s"],
            "wall_time": [round3(self.wall_time), "s"],
            "cpu_time": [round3(self.cpu_time.total), "s"],
            "cores": [round3(self.cores.peak), "cores"],
            "cores_avg": [round3(self.cores.average), "cores"],
            "memory": [mb(self.memory.peak_bytes), "MB"],
            "virtual_memory": [mb(self.virtual_memory_bytes), "MB"],
            "swap_memory": [mb(self.swap_bytes), "MB"],
            "bytes_read": [mb(self.bytes_read), "MB"],
            "bytes_written": [mb(self.bytes_written), "MB"],
            "max_concurrent_processes": [self.max_concurrent_processes, "procs"],
            "total_processes": [self.total_processes, "procs"],
        });
        if let Some(status) = self.exit.status {
            summary["exit_status"] = json!(status);
        }
        if let Some(signal) = self.exit.signal {
            summary["signal"] = json!(signal);
        }
        if let Some(disk) = &self.disk {
            summary["disk"] = json!([mb(disk.bytes), "MB"]);
            summary["total_files"] = json!([disk.files, "files"]);
        }
        if let Some(category) = &self.category {
            summary["category"] = json!(category);
        }
        // resource_monitor copies the GPU limit here; lfm gives what was measured: the
        // devices the run's processes used (and their memory), absent when unmeasured.
        if let Some(gpu) = &self.gpu {
            if let Some(used) = gpu.devices_used {
                summary["gpus"] = json!([used, "gpus"]);
            }
            if let Some(bytes) = gpu.memory_peak_bytes {
                summary["gpu_memory"] = json!([mb(bytes), "MB"]);
            }
        }
        if !self.limits_exceeded.is_empty() {
            let mut exceeded = serde_json::Map::new();
            for (resource, limit) in &self.limits_exceeded {
                let value = match resource.as_str() {
                    "memory" | "disk" | "gpu_memory" => json!([mb(*limit as u64), "MB"]),
                    "cores" => json!([limit, "cores"]),
                    "wall_time" => json!([limit, "s"]),
                    "max_concurrent_processes" => json!([limit, "procs"]),
                    _ => json!(limit),
                };
                exceeded.insert(resource.clone(), value);
            }
            summary["limits_exceeded"] = serde_json::Value::Object(exceeded);
        }
        summary
    }
}
