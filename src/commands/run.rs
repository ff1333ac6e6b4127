//! `lfm run`: parse limits, run the command under the monitor, write the report.

use std::io::Write;
use std::time::Duration;

use lfm_monitor::gpu::{GpuError, GpuPolicy, ViolationPolicy};
use lfm_monitor::limits::{parse_duration, parse_positive, parse_size, LimitError};
use lfm_monitor::report::ExitKind;
use lfm_monitor::{BackendChoice, Limits, Report, RunError, RunOptions};

use lfm_monitor::sizing::auto::{self, AutoLimit};
use lfm_monitor::sizing::Strategy;

use crate::cli::{BackendArg, GpuViolationArg, MonitorArgs, RunArgs, SummaryFormat};
use crate::commands::sizing;

pub const EXIT_LIMITS: i32 = 125;
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
pub const EXIT_NOT_FOUND: i32 = 127;
pub const EXIT_MONITOR_FAILED: i32 = 70;
pub const EXIT_USAGE: i32 = 2;
/// EX_UNAVAILABLE: the node lacks the GPUs asked for.
pub const EXIT_NO_GPUS: i32 = 69;
/// EX_TEMPFAIL: the GPUs exist but others held them past --gpu-wait-timeout.
pub const EXIT_GPUS_BUSY: i32 = 75;

pub fn run(args: RunArgs) -> i32 {
    let command = args.command;
    let args = args.monitor;
    let (limits, grace) = match parse_limits(&args) {
        Ok(parsed) => parsed,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_USAGE;
        }
    };
    if let Err(code) = check_report_writable(&args) {
        return code;
    }
    let options = run_options(&args, command, limits, grace);
    let report = match run_sized(&args, options, &mut |_| ()) {
        Ok(report) => report,
        Err(Failure::Usage(message)) => {
            eprintln!("error: {message}");
            return EXIT_USAGE;
        }
        Err(Failure::Run(error)) => {
            eprintln!("error: {error}");
            return match error {
                RunError::NotFound(_) => EXIT_NOT_FOUND,
                RunError::NotExecutable(_) => EXIT_NOT_EXECUTABLE,
                RunError::Empty => EXIT_USAGE,
                RunError::Monitor(_) => {
                    eprintln!("hint: try --backend rlimit, which needs no cgroup access");
                    EXIT_MONITOR_FAILED
                }
                RunError::Gpu(error) => gpu_exit_code(&error),
            };
        }
    };
    if let Err(error) = write_report(&args, &report) {
        eprintln!("error: writing the report: {error}");
        return EXIT_MONITOR_FAILED;
    }
    if !args.quiet {
        eprintln!("{}", report.summary_line());
    }
    match report.exit.kind {
        ExitKind::Limits => EXIT_LIMITS,
        ExitKind::Error => EXIT_MONITOR_FAILED,
        ExitKind::Signal => 128 + report.exit.signal.unwrap_or(0),
        ExitKind::Normal | ExitKind::Exception => report.exit.status.unwrap_or(0),
    }
}

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

/// Run once, or with --auto: the memory, cores and (with a sandbox) disk limits not given come
/// from the category's history; after a run that ran out of a sized limit, again with that
/// limit at the strategy's next allocation (at most --max-retries more). Every attempt of a
/// category is recorded in the history, after `annotate` (a call adds what its function did).
pub fn run_sized(
    args: &MonitorArgs,
    mut options: RunOptions,
    annotate: &mut dyn FnMut(&mut Report),
) -> Result<Report, Failure> {
    let strategy = Strategy::parse(&args.strategy).map_err(Failure::Usage)?;
    if gpus_auto(args) && !args.auto {
        return Err(Failure::Usage(
            "--gpus auto sizes from the history: give --auto (and --category)".into(),
        ));
    }
    if args.auto && options.category.is_none() {
        return Err(Failure::Usage(
            "--auto sizes from a category's history: give --category".into(),
        ));
    }
    let sandbox = options.sandbox.clone();
    let sized = if args.auto {
        auto::to_size(&options.limits, sandbox.as_deref(), gpus_auto(args))
    } else {
        Vec::new()
    };
    let history = args.history.as_ref();
    let category = options.category.clone();
    let allocation = |resource: AutoLimit, failed: Option<f64>| -> Result<f64, Failure> {
        let rows = sizing::open(history)
            .and_then(|h| h.rows(category.as_deref()))
            .map_err(Failure::Usage)?;
        let node = auto::node(resource, sandbox.as_deref());
        Ok(resource.allocation(&rows, strategy, node, failed))
    };
    for &resource in &sized {
        resource.set(&mut options.limits, allocation(resource, None)?);
    }
    let mut attempt = 0;
    loop {
        let mut report = lfm_monitor::run(&options).map_err(Failure::Run)?;
        report.limits_from_sizing = sized.iter().map(|r| r.name().to_string()).collect();
        annotate(&mut report);
        sizing::record(history, &report);
        let ran_out = auto::exhausted(&report.limits_exceeded, &sized);
        if ran_out.is_empty() || attempt >= args.max_retries {
            return Ok(report);
        }
        attempt += 1;
        for resource in ran_out {
            let failed = resource.limit(&options.limits).unwrap_or(0.0);
            let next = allocation(resource, Some(failed))?;
            eprintln!(
                "lfm: ran out of its sized {} limit of {failed:.1} {unit}; retry {attempt} at {next:.1} {unit}",
                resource.name(),
                unit = resource.unit()
            );
            resource.set(&mut options.limits, next);
        }
    }
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
        violation: match args.gpu_violation {
            GpuViolationArg::Note => ViolationPolicy::Note,
            GpuViolationArg::Kill => ViolationPolicy::Kill,
        },
    }
}

/// A whole number of at least one (`--gpus 2`).
fn parse_count(flag: &'static str, text: &str) -> Result<u64, LimitError> {
    let value = parse_positive(flag, text)?;
    if value.fract() != 0.0 {
        return Err(LimitError::BadNumber {
            flag,
            value: text.to_string(),
        });
    }
    Ok(value as u64)
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

pub fn parse_limits(args: &MonitorArgs) -> Result<(Limits, Duration), LimitError> {
    let limits = Limits {
        memory_bytes: args
            .memory
            .as_deref()
            .map(|v| parse_size("--memory", v))
            .transpose()?,
        cores: args
            .cores
            .as_deref()
            .map(|v| parse_positive("--cores", v))
            .transpose()?,
        wall_seconds: args
            .wall
            .as_deref()
            .map(|v| parse_duration("--wall", v))
            .transpose()?,
        disk_bytes: args
            .disk
            .as_deref()
            .map(|v| parse_size("--disk", v))
            .transpose()?,
        processes: args
            .processes
            .as_deref()
            .map(|v| parse_positive("--processes", v).map(|n| n.ceil() as u64))
            .transpose()?,
        address_space_bytes: args
            .address_space
            .as_deref()
            .map(|v| parse_size("--address-space", v))
            .transpose()?,
        gpus: args
            .gpus
            .as_deref()
            .filter(|&g| g != "auto")
            .map(|v| parse_count("--gpus", v))
            .transpose()?,
        gpu_memory_bytes: args
            .gpu_memory
            .as_deref()
            .map(|v| parse_size("--gpu-memory", v))
            .transpose()?,
    };
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
