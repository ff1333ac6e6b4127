//! What a called function did, as the runner wrote it (outcome.json), folded into the Report.
//! `lfm call` and `lfm serve` read outcomes the same way.

use std::path::Path;

use crate::report::{ExceptionInfo, ExitKind, Report, ResultInfo};

pub enum Outcome {
    /// The function returned; `not_json` says why a JSON result had to be pickled instead.
    Returned {
        result: ResultInfo,
        not_json: Option<String>,
    },
    /// The function raised: `report.exit.exception` holds it.
    Raised,
    /// A limit, a signal or a monitor error ended the call: the Report's `exit` says which.
    Stopped,
    /// The process ended without writing an outcome (`os._exit`, a crash without a signal,
    /// an interpreter that could not start the runner).
    Missing,
}

pub fn read(path: &Path) -> Option<serde_json::Value> {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

/// Storage I/O the call's process counted itself (its own and its reaped children's).
pub fn io(outcome: Option<&serde_json::Value>) -> Option<(u64, u64)> {
    let io = outcome?.get("io")?.as_array()?;
    Some((io.first()?.as_u64()?, io.get(1)?.as_u64()?))
}

/// How far the call's process's resident size rose at its highest, as it measured itself
/// (its VmHWM, reset at the call's start, less its size then): catches what /proc sampling
/// misses in a forked call, whose own VmHWM starts at the zygote's size.
pub fn memory_growth(outcome: Option<&serde_json::Value>) -> Option<u64> {
    outcome?.get("memory_growth")?.as_u64()
}

/// Fold an outcome into the Report: `exit.type` becomes `exception` when the function raised,
/// `error` when there is no outcome; `result` is set when it returned.
pub fn apply(report: &mut Report, outcome: Option<&serde_json::Value>) -> Outcome {
    if matches!(
        report.exit.kind,
        ExitKind::Limits | ExitKind::Signal | ExitKind::Error
    ) {
        return Outcome::Stopped;
    }
    let Some(outcome) = outcome else {
        report.exit.kind = ExitKind::Error;
        report.exit.error = Some(format!(
            "the call ended without a result: the process exited with status {} before the function returned (os._exit, or the runner could not start)",
            report.exit.status.unwrap_or(-1)
        ));
        return Outcome::Missing;
    };
    if outcome["ok"] != true {
        let exception = &outcome["exception"];
        report.exit.kind = ExitKind::Exception;
        report.exit.exception = Some(ExceptionInfo {
            type_name: exception_name(exception),
            message: text(&exception["message"]),
            traceback: text(&exception["traceback"]),
            full_traceback: exception["full_traceback"].as_str().map(str::to_string),
        });
        return Outcome::Raised;
    }
    let result = &outcome["result"];
    let info = ResultInfo {
        type_name: text(&result["type"]),
        format: result["format"].as_str().unwrap_or("json").to_string(),
        bytes: result["bytes"].as_u64().unwrap_or(0),
    };
    report.result = Some(info.clone());
    Outcome::Returned {
        result: info,
        not_json: result["not_json"].as_str().map(str::to_string),
    }
}

fn text(value: &serde_json::Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn exception_name(exception: &serde_json::Value) -> String {
    let name = exception["type"].as_str().unwrap_or("Exception");
    match exception["module"].as_str() {
        Some("builtins") | None => name.to_string(),
        Some(module) => format!("{module}.{name}"),
    }
}
