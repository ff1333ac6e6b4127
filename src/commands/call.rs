//! `lfm call`: one Python function in a fresh interpreter, under the monitor of `lfm run`.
//!
//! lfm-call prepares and runs the call (interpreter, target, slice, runner request, the sized
//! run, the outcome); this module turns the flags into its options and the outcome into
//! output and an exit code.

use std::io::Write;
use std::path::Path;

use lfm_call::call::{CallRun, CallRunError, Called};
use lfm_call::runner::EXIT_UNSUPPORTED_PYTHON;
use lfm_call::{CallError, ErrorKind, Prepared};
use lfm_monitor::outcome::Outcome;
use lfm_monitor::report::ExitKind;

use crate::cli::CallArgs;
use crate::monitoring::{self, Failure, EXIT_LIMITS, EXIT_MONITOR_FAILED, EXIT_USAGE};

pub const EXIT_EXCEPTION: i32 = 1;
pub const EXIT_TARGET_NOT_FOUND: i32 = 3;
pub const EXIT_RESULT_NOT_JSON: i32 = 4;
pub const EXIT_NO_OUTCOME: i32 = 71;

pub fn call(args: CallArgs) -> i32 {
    let phases = Phases::start();
    let code = match prepare_and_call(&args, &phases) {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("error: {message}");
            code
        }
    };
    phases.mark("done (what the call held freed)");
    code
}

/// `LFM_TIMINGS=1`: when each phase of the call ended, on stderr (for bench/ work).
struct Phases(Option<std::time::Instant>);

impl Phases {
    fn start() -> Phases {
        let shown = std::env::var_os("LFM_TIMINGS").is_some();
        Phases(shown.then(std::time::Instant::now))
    }

    fn mark(&self, phase: &str) {
        if let Some(started) = self.0 {
            eprintln!("timing: {:.4} s  {phase}", started.elapsed().as_secs_f64());
        }
    }

    /// The analysis' own phases, when it ran for this call.
    fn analysis(&self, prepared: &Prepared) {
        let (Some(_), Some(sliced)) = (self.0, &prepared.sliced) else {
            return;
        };
        match &sliced.analysis {
            Some(analysis) => {
                for (phase, at) in &analysis.timings {
                    eprintln!("timing:   analysis {:.4} s  {phase}", at.wall.as_secs_f64());
                }
            }
            None => eprintln!("timing:   analysis kept from an earlier call"),
        }
    }
}

type Exit = (i32, String);

fn exit_of(error: CallError) -> Exit {
    let code = match error.kind {
        ErrorKind::Usage => EXIT_USAGE,
        ErrorKind::NotFound => EXIT_TARGET_NOT_FOUND,
        ErrorKind::Failed => EXIT_MONITOR_FAILED,
    };
    (code, error.message)
}

fn prepare_and_call(args: &CallArgs, phases: &Phases) -> Result<i32, Exit> {
    let (limits, grace) =
        monitoring::parse_limits(&args.monitor).map_err(|e| (EXIT_USAGE, e.to_string()))?;
    let arguments = match &args.args_file {
        Some(file) => lfm_call::arguments_from_pickle_file(file),
        None => lfm_call::arguments_from_flags(args.args.as_deref(), args.kwargs.as_deref()),
    }
    .map_err(exit_of)?;
    // Measured before the call runs: what --auto sizes it from.
    let here = std::env::current_dir().unwrap_or_default();
    let input_bytes = lfm_call::input_bytes(&arguments, &here);
    let choice = args.interpreter.choice(args.cache_dir.as_deref());
    let interpreter = choice.interpreter().map_err(exit_of)?;
    phases.mark("interpreter chosen");
    let analysis_cache = args.cache_dir.as_deref();
    let mut prepared = lfm_call::prepare(
        &args.target,
        &interpreter,
        args.import_module,
        analysis_cache,
    )
    .map_err(exit_of)?;
    phases.mark("target located and sliced");
    phases.analysis(&prepared);
    if args.show_slice {
        return show_slice(&prepared);
    }
    monitoring::check_report_writable(&args.monitor).map_err(|code| (code, "report".into()))?;
    let sized = monitoring::sized_by(&args.monitor, true).map_err(usage_of)?;
    let mut monitor = monitoring::run_options(&args.monitor, Vec::new(), limits, grace);
    monitor.input_bytes = Some(input_bytes);
    let run = CallRun {
        monitor,
        arguments,
        cache: monitoring::cache_dir(args.cache_dir.as_ref()),
        result_file: args.result_file.clone(),
        import_log: !args.no_import_log,
        attempts: sized.attempts,
        gpus_sized: sized.gpus_sized,
        history: sized.history,
    };
    let mark = |phase: &str| phases.mark(phase);
    let mut called =
        lfm_call::call::run(&mut prepared, &interpreter, run, &mark).map_err(exit_of_run)?;
    let code = conclude(&mut called, args);
    if let Err(error) = monitoring::write_report(&args.monitor, &called.report) {
        return Err((EXIT_MONITOR_FAILED, format!("writing the report: {error}")));
    }
    if !args.monitor.quiet {
        eprintln!("{}", called.report.summary_line());
    }
    phases.mark("outcome read, report written");
    // The process ends next: freeing the analysis (the environment's distribution index,
    // tens of thousands of paths) would only cost milliseconds.
    std::mem::forget(prepared);
    Ok(code)
}

fn usage_of(failure: Failure) -> Exit {
    match failure {
        Failure::Usage(message) => (EXIT_USAGE, message),
        Failure::Run(error) => (EXIT_MONITOR_FAILED, error.to_string()),
    }
}

fn exit_of_run(error: CallRunError) -> Exit {
    match error {
        CallRunError::Setup(error) => exit_of(error),
        CallRunError::History(message) => (EXIT_USAGE, message),
        CallRunError::Run(lfm_monitor::RunError::Gpu(error)) => {
            (monitoring::gpu_exit_code(&error), error.to_string())
        }
        CallRunError::Run(error) => (EXIT_MONITOR_FAILED, error.to_string()),
    }
}

fn show_slice(prepared: &Prepared) -> Result<i32, Exit> {
    let located = &prepared.located;
    let Some(file) = &located.file else {
        return Err((
            EXIT_TARGET_NOT_FOUND,
            format!("{}: no source file", located.module),
        ));
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| (EXIT_TARGET_NOT_FOUND, format!("{}: {e}", file.display())))?;
    let lines: Vec<&str> = text.lines().collect();
    let ranges = prepared
        .sliced
        .as_ref()
        .map(|s| s.statements())
        .unwrap_or_default();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "# {} (module {}), {} statements",
        file.display(),
        located.module,
        ranges.len()
    );
    for &[start, end] in ranges {
        for number in start..=end {
            let line = lines.get(number as usize - 1).copied().unwrap_or_default();
            let _ = writeln!(out, "{number:5} | {line}");
        }
    }
    Ok(0)
}

/// Print the value or the traceback of a call that ran, and return the exit code.
fn conclude(called: &mut Called, args: &CallArgs) -> i32 {
    let report = &called.report;
    match &called.outcome {
        Outcome::Stopped => match report.exit.kind {
            ExitKind::Limits => EXIT_LIMITS,
            ExitKind::Signal => 128 + report.exit.signal.unwrap_or(0),
            _ => EXIT_MONITOR_FAILED,
        },
        Outcome::Missing if report.exit.status == Some(EXIT_UNSUPPORTED_PYTHON) => {
            eprintln!("error: this Python is older than lfm supports (3.8): see above");
            EXIT_USAGE
        }
        Outcome::Missing => {
            eprintln!(
                "error: {}",
                report.exit.error.as_deref().unwrap_or_default()
            );
            EXIT_NO_OUTCOME
        }
        Outcome::Raised => {
            if let Some(exception) = &report.exit.exception {
                eprint!("{}", exception.traceback);
            }
            EXIT_EXCEPTION
        }
        Outcome::Returned { result, not_json } => {
            if args.result_file.is_some() {
                return 0;
            }
            if let Some(reason) = not_json {
                eprintln!("error: the function returned a {} that is not JSON ({reason})\nhint: pass --result-file FILE to get it as a pickle", result.type_name);
                return EXIT_RESULT_NOT_JSON;
            }
            print_result(&called.files.result)
        }
    }
}

fn print_result(path: &Path) -> i32 {
    match std::fs::read(path) {
        Ok(bytes) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&bytes);
            let _ = out.write_all(b"\n");
            0
        }
        Err(error) => {
            eprintln!("error: reading the result: {error}");
            EXIT_MONITOR_FAILED
        }
    }
}
