//! What the commands that run things share: monitor flags turned into the monitor's options,
//! the sized run, the Report written where asked, the history file, and the exit codes.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use lfm_monitor::gpu::{GpuError, GpuPolicy, ViolationPolicy};
use lfm_monitor::limits::{parse_duration, LimitError, LimitValues, Written};
use lfm_monitor::{BackendChoice, Limits, Report, RunError, RunOptions};
use lfm_sizing::history::{default_path, History};
use lfm_sizing::policy::{self, Attempts, SizedRunError};
use lfm_sizing::Strategy;

use crate::cli::{BackendArg, GpuViolationArg, MonitorArgs, SummaryFormat};

pub const EXIT_LIMITS: i32 = 125;
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
pub const EXIT_NOT_FOUND: i32 = 127;
pub const EXIT_MONITOR_FAILED: i32 = 70;
pub const EXIT_USAGE: i32 = 2;
/// EX_UNAVAILABLE: the node lacks the GPUs asked for.
pub const EXIT_NO_GPUS: i32 = 69;
/// EX_TEMPFAIL: the GPUs exist but others held them past --gpu-wait-timeout.
pub const EXIT_GPUS_BUSY: i32 = 75;

pub fn gpu_exit_code(error: &GpuError) -> i32 {
    match error {
        GpuError::NoDevices { .. } | GpuError::TooFew { .. } => EXIT_NO_GPUS,
        GpuError::Busy { .. } => EXIT_GPUS_BUSY,
        GpuError::BadList { .. } => EXIT_USAGE,
        GpuError::Ledger { .. } => EXIT_MONITOR_FAILED,
    }
}

pub enum Failure {
    Usage(String),
    Run(RunError),
}

/// How a run is sized: `--auto`'s attempts (none without it), whether `--gpus auto` sizes its
/// GPUs, and the history both read.
pub struct SizedBy {
    pub attempts: Option<Attempts>,
    pub gpus_sized: bool,
    pub history: PathBuf,
}

/// The sizing flags, once they agree; `has_category`: the run has a category to size from.
pub fn sized_by(args: &MonitorArgs, has_category: bool) -> Result<SizedBy, Failure> {
    Ok(SizedBy {
        attempts: attempts(args, has_category)?,
        gpus_sized: gpus_auto(args),
        history: args.history.clone().unwrap_or_else(default_path),
    })
}

/// Run under the monitor, sized from the history with `--auto` (the one policy of
/// lfm_sizing::policy); `annotate` adds what a call's function did to each Report.
pub fn run_sized(
    args: &MonitorArgs,
    options: RunOptions,
    annotate: &mut dyn FnMut(&mut Report),
) -> Result<Report, Failure> {
    let sized = sized_by(args, options.category.is_some())?;
    let SizedBy {
        attempts,
        gpus_sized,
        history,
    } = sized;
    policy::run_sized(options, attempts, gpus_sized, &history, annotate).map_err(
        |error| match error {
            SizedRunError::History(message) => Failure::Usage(message),
            SizedRunError::Run(error) => Failure::Run(error),
        },
    )
}

/// `--auto`'s policy, once its flags agree.
fn attempts(args: &MonitorArgs, has_category: bool) -> Result<Option<Attempts>, Failure> {
    let strategy = Strategy::parse(&args.strategy).map_err(Failure::Usage)?;
    if gpus_auto(args) && !args.auto {
        return Err(Failure::Usage(
            "--gpus auto sizes from the history: give --auto (and --category)".into(),
        ));
    }
    if !args.auto {
        return Ok(None);
    }
    if !has_category {
        return Err(Failure::Usage(
            "--auto sizes from a category's history: give --category".into(),
        ));
    }
    Ok(Some(Attempts::new(strategy, args.max_retries)))
}

/// `--input FILE...` (the files' total size) or `--input-size BYTES`; None without either.
/// A file that cannot be read is an error naming it.
pub fn input_bytes(args: &crate::cli::InputArgs) -> Result<Option<u64>, String> {
    if let Some(text) = &args.input_size {
        if text.trim() == "0" {
            return Ok(Some(0));
        }
        return lfm_monitor::limits::parse_size("--input-size", text)
            .map(Some)
            .map_err(|e| e.to_string());
    }
    if args.inputs.is_empty() {
        return Ok(None);
    }
    let mut total = 0;
    for file in &args.inputs {
        let meta =
            std::fs::metadata(file).map_err(|e| format!("--input {}: {e}", file.display()))?;
        if !meta.is_file() {
            return Err(format!("--input {}: not a file", file.display()));
        }
        total += meta.len();
    }
    Ok(Some(total))
}

/// The report must be writable before anything runs: it is the one thing a caller reads.
pub fn check_report_writable(args: &MonitorArgs) -> Result<(), i32> {
    let Some(path) = args.report.as_ref().filter(|p| p.as_os_str() != "-") else {
        return Ok(());
    };
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(error) => {
            eprintln!(
                "error: cannot write the report to {}: {error}",
                path.display()
            );
            Err(EXIT_USAGE)
        }
    }
}

pub fn run_options(
    args: &MonitorArgs,
    command: Vec<std::ffi::OsString>,
    limits: Limits,
    grace: Duration,
) -> RunOptions {
    RunOptions {
        command,
        limits,
        backend: backend_choice(args.backend),
        sandbox: args.sandbox.clone(),
        series: args.series.clone(),
        grace,
        category: args.category.clone(),
        gpu: gpu_policy(args),
        input_bytes: None,
    }
}

/// `--gpus auto`: the count comes from the history.
fn gpus_auto(args: &MonitorArgs) -> bool {
    args.gpus.as_deref() == Some("auto")
}

/// How the run's GPUs are had and kept; the wait was checked by [`parse_limits`].
fn gpu_policy(args: &MonitorArgs) -> GpuPolicy {
    GpuPolicy {
        wait: Duration::from_secs_f64(
            parse_duration_or_zero("--gpu-wait-timeout", &args.gpu_wait_timeout).unwrap_or(0.0),
        ),
        violation: violation_policy(args.gpu_violation),
    }
}

pub fn violation_policy(arg: GpuViolationArg) -> ViolationPolicy {
    match arg {
        GpuViolationArg::Note => ViolationPolicy::Note,
        GpuViolationArg::Kill => ViolationPolicy::Kill,
    }
}

/// A duration where zero means "not at all" (`--gpu-wait-timeout 0`).
fn parse_duration_or_zero(flag: &'static str, text: &str) -> Result<f64, LimitError> {
    match text.trim().trim_end_matches(['s', 'm', 'h']).parse::<f64>() {
        Ok(0.0) => Ok(0.0),
        _ => parse_duration(flag, text),
    }
}

pub fn backend_choice(arg: BackendArg) -> BackendChoice {
    match arg {
        BackendArg::Auto => BackendChoice::Auto,
        BackendArg::Cgroup2 => BackendChoice::Cgroup2,
        BackendArg::Cgroup1 => BackendChoice::Cgroup1,
        BackendArg::Rlimit => BackendChoice::Rlimit,
    }
}

/// The limit flags, through the parser a serve request's `limits` go through too.
pub fn parse_limits(args: &MonitorArgs) -> Result<(Limits, Duration), LimitError> {
    let text = |value: &Option<String>| value.as_deref().map(Into::into);
    let values = LimitValues {
        memory: text(&args.memory),
        cores: text(&args.cores),
        wall: text(&args.wall),
        disk: text(&args.disk),
        processes: text(&args.processes),
        address_space: text(&args.address_space),
        gpus: args
            .gpus
            .as_deref()
            .filter(|&g| g != "auto")
            .map(Into::into),
        gpu_memory: text(&args.gpu_memory),
    };
    let limits = values.parse(Written::Flags)?;
    parse_duration_or_zero("--gpu-wait-timeout", &args.gpu_wait_timeout)?;
    let grace = Duration::from_secs_f64(parse_duration("--grace", &args.grace)?);
    Ok((limits, grace))
}

pub fn write_report(args: &MonitorArgs, report: &Report) -> std::io::Result<()> {
    let Some(path) = &args.report else {
        return Ok(());
    };
    let value = match args.summary_format {
        SummaryFormat::Lfm => serde_json::to_value(report).map_err(std::io::Error::other)?,
        SummaryFormat::ResourceMonitor => report.resource_monitor_summary(),
    };
    let mut text = serde_json::to_string_pretty(&value).map_err(std::io::Error::other)?;
    text.push('\n');
    if path.as_os_str() == "-" {
        std::io::stdout().lock().write_all(text.as_bytes())
    } else {
        std::fs::write(path, text)
    }
}

/// `--cache-dir`, else lfm's cache.
pub fn cache_dir(given: Option<&PathBuf>) -> PathBuf {
    given
        .cloned()
        .unwrap_or_else(lfm_call::runner::default_cache)
}

/// The history at `path`, else the node's default one.
pub fn open_history(path: Option<&PathBuf>) -> Result<History, String> {
    History::open(&path.cloned().unwrap_or_else(default_path))
}
