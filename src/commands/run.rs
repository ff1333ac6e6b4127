//! `lfm run`: parse limits, run the command under the monitor, write the report.

use lfm_monitor::report::ExitKind;
use lfm_monitor::RunError;

use crate::cli::RunArgs;
use crate::monitoring::{
    self, Failure, EXIT_LIMITS, EXIT_MONITOR_FAILED, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND,
    EXIT_USAGE,
};

pub fn run(args: RunArgs) -> i32 {
    let command = args.command;
    let input_bytes = match monitoring::input_bytes(&args.input) {
        Ok(bytes) => bytes,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_USAGE;
        }
    };
    let args = args.monitor;
    let (limits, grace) = match monitoring::parse_limits(&args) {
        Ok(parsed) => parsed,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_USAGE;
        }
    };
    if let Err(code) = monitoring::check_report_writable(&args) {
        return code;
    }
    let mut options = monitoring::run_options(&args, command, limits, grace);
    options.input_bytes = input_bytes;
    let report = match monitoring::run_sized(&args, options, &mut |_| ()) {
        Ok(report) => report,
        Err(Failure::Usage(message)) => {
            eprintln!("error: {message}");
            return EXIT_USAGE;
        }
        Err(Failure::Run(error)) => {
            eprintln!("error: {error}");
            return exit_code_of(error);
        }
    };
    if let Err(error) = monitoring::write_report(&args, &report) {
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

fn exit_code_of(error: RunError) -> i32 {
    match error {
        RunError::NotFound(_) => EXIT_NOT_FOUND,
        RunError::NotExecutable(_) => EXIT_NOT_EXECUTABLE,
        RunError::Empty => EXIT_USAGE,
        RunError::Monitor(_) => {
            eprintln!("hint: try --backend rlimit, which needs no cgroup access");
            EXIT_MONITOR_FAILED
        }
        RunError::Gpu(error) => monitoring::gpu_exit_code(&error),
    }
}
