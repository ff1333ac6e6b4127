//! One Python function in a fresh interpreter, under the monitor: `lfm call` without its
//! command line. The prepared target (located, sliced) gets the runner and its request in a
//! private directory, runs under lfm-monitor sized by lfm-sizing's one policy, and comes back
//! as a Report that holds the function, its imports against its closure and its outcome.

use std::path::PathBuf;

use lfm_monitor::outcome::{self, Outcome};
use lfm_monitor::report::{FunctionCall, Report};
use lfm_monitor::{RunError, RunOptions};
use lfm_sizing::policy::{self, Attempts, SizedRunError};

use crate::error::CallError;
use crate::files::CallFiles;
use crate::interpreter::Interpreter;
use crate::runner::request::Arguments;
use crate::target::Prepared;

/// How a prepared call runs: what lfm-monitor is given (its `command` is filled here), and how
/// it is sized.
pub struct CallRun {
    /// Limits, backend, category (the function's name when none is given), GPUs...
    pub monitor: RunOptions,
    pub arguments: Arguments,
    /// lfm's cache: the runner, compiled slices and the call's own files.
    pub cache: PathBuf,
    /// The value as a pickle into this file instead of JSON.
    pub result_file: Option<PathBuf>,
    pub import_log: bool,
    /// `--auto`: the attempts sized from the category's history at `history`.
    pub attempts: Option<Attempts>,
    pub gpus_sized: bool,
    pub history: PathBuf,
}

/// A call that ran: its Report (outcome applied) and where its value was written.
pub struct Called {
    pub report: Report,
    pub outcome: Outcome,
    pub files: CallFiles,
}

/// Why a prepared call did not run to an outcome.
pub enum CallRunError {
    /// Setting the call up failed (the cache, the runner, the request).
    Setup(CallError),
    /// The history sizing needs could not be read.
    History(String),
    Run(RunError),
}

/// Run `prepared` under the monitor; `mark` hears when each phase ended (`LFM_TIMINGS`).
pub fn run(
    prepared: &mut Prepared,
    interpreter: &Interpreter,
    call: CallRun,
    mark: &dyn Fn(&str),
) -> Result<Called, CallRunError> {
    let setup = |error: anyhow::Error| CallRunError::Setup(CallError::failed_chain(&error));
    crate::compiled::keep_compiled(&mut prepared.target, &call.cache, interpreter);
    let runner = crate::runner::install(&call.cache).map_err(setup)?;
    let files = CallFiles::create(&call.cache).map_err(setup)?;
    let pickle_to = call.result_file.as_deref().map(std::path::absolute);
    let pickle_to = pickle_to.transpose().map_err(|e| setup(e.into()))?;
    files
        .write_request(
            prepared.target.clone(),
            call.arguments,
            pickle_to,
            call.import_log,
        )
        .map_err(setup)?;
    mark("runner and request written");
    let mut options = call.monitor;
    options.command = interpreter.argv.clone();
    options
        .command
        .extend([runner.into_os_string(), "call".into()]);
    options.command.push(files.request.clone().into_os_string());
    // A call's category is its function's name unless given: its history sizes the next.
    let qualname = &prepared.located.qualname;
    options.category.get_or_insert_with(|| qualname.clone());
    let mut ended = None;
    let mut annotate = annotation(prepared, interpreter, &files, &mut ended, mark);
    let attempts = call.attempts;
    let sized = policy::run_sized(
        options,
        attempts,
        call.gpus_sized,
        &call.history,
        &mut annotate,
    );
    drop(annotate);
    let report = sized.map_err(|error| match error {
        SizedRunError::History(message) => CallRunError::History(message),
        SizedRunError::Run(error) => CallRunError::Run(error),
    })?;
    mark("recorded (history)");
    // Every attempt that ran was annotated; a run that failed to start returned an error.
    let outcome = ended.unwrap_or(Outcome::Missing);
    Ok(Called {
        report,
        outcome,
        files,
    })
}

/// What each attempt's Report gains before the history records it: the function, how it
/// ended (its outcome, kept in `ended`), and the imports it logged against its closure (with
/// the distributions they belong to).
fn annotation<'a>(
    prepared: &'a Prepared,
    interpreter: &Interpreter,
    files: &'a CallFiles,
    ended: &'a mut Option<Outcome>,
    mark: &'a dyn Fn(&str),
) -> impl FnMut(&mut Report) + 'a {
    let function = FunctionCall {
        target: prepared.asked.clone(),
        mode: prepared.target.mode().into(),
        context: None,
        process: None,
    };
    let closure = prepared.closure(interpreter);
    move |report: &mut Report| {
        mark("the call ended");
        report.function = Some(function.clone());
        report.imports = lfm_monitor::imports::read(&files.imports, &[]).map(|imports| {
            match (&prepared.sliced, &closure) {
                (Some(sliced), Some(closure)) => {
                    crate::slice::with_distributions(imports, sliced, closure.clone())
                }
                _ => imports,
            }
        });
        *ended = Some(outcome::apply(
            report,
            outcome::read(&files.outcome).as_ref(),
        ));
        // A retry (--auto) logs and ends afresh.
        let _ = std::fs::remove_file(&files.imports);
        let _ = std::fs::remove_file(&files.outcome);
        mark("imports read and compared, outcome applied");
    }
}
