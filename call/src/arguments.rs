//! A call's arguments as callers give them: JSON text on the command line, JSON in a serve
//! request, or pickles; checked the same way wherever they come from.

use std::path::Path;

use lfm_monitor::runner::request::Arguments;

use crate::error::{CallError, Result};

/// `[positional...]` and `{keyword: value}`; either may be absent (`[]`, `{}`).
pub fn json(
    positional: Option<serde_json::Value>,
    keywords: Option<serde_json::Value>,
) -> std::result::Result<Arguments, String> {
    let positional = match positional.unwrap_or_else(|| serde_json::json!([])) {
        serde_json::Value::Array(values) => values,
        _ => return Err("\"args\" must be a list and \"kwargs\" an object".into()),
    };
    let keywords = match keywords.unwrap_or_else(|| serde_json::json!({})) {
        serde_json::Value::Object(map) => map,
        _ => return Err("\"args\" must be a list and \"kwargs\" an object".into()),
    };
    Ok(Arguments::Json(positional, keywords))
}

/// `--args '[3, "x"]' --kwargs '{"alpha": 0.1}'`.
pub fn from_flags(args: Option<&str>, kwargs: Option<&str>) -> Result<Arguments> {
    let positional = parse_json("--args", args.unwrap_or("[]"))?;
    let keywords = parse_json("--kwargs", kwargs.unwrap_or("{}"))?;
    if !positional.is_array() {
        return Err(CallError::usage(
            "--args must be a JSON list, e.g. '[3, \"x\"]'",
        ));
    }
    if !keywords.is_object() {
        return Err(CallError::usage(
            "--kwargs must be a JSON object, e.g. '{\"alpha\": 0.1}'",
        ));
    }
    json(Some(positional), Some(keywords)).map_err(CallError::usage)
}

/// `--args-file FILE`: a pickle of `(args, kwargs)`.
pub fn from_pickle_file(file: &Path) -> Result<Arguments> {
    let absolute = std::path::absolute(file).map_err(|e| CallError::usage(e.to_string()))?;
    if !absolute.is_file() {
        return Err(CallError::usage(format!(
            "--args-file {}: not a file",
            file.display()
        )));
    }
    Ok(Arguments::PickleFile(absolute))
}

/// A serve request's `args_file`: an absolute path to a file, whose pickle fits the call's
/// memory limit (unpickled, arguments take at least the pickle's size).
pub fn pickle_file_fitting(
    file: &Path,
    memory_limit: Option<u64>,
) -> std::result::Result<Arguments, String> {
    let shown = file.display();
    if !file.is_absolute() {
        return Err(format!("\"args_file\": {shown}: not an absolute path"));
    }
    let size = match std::fs::metadata(file) {
        Ok(meta) if meta.is_file() => meta.len(),
        Ok(_) => return Err(format!("\"args_file\": {shown}: not a file")),
        Err(error) => return Err(format!("\"args_file\": {shown}: {error}")),
    };
    if let Some(limit) = memory_limit.filter(|&limit| size > limit) {
        return Err(format!(
            "\"args_file\": the arguments' pickle is {:.1} MiB, over the call's memory limit of {:.1} MiB",
            size as f64 / MIB,
            limit as f64 / MIB
        ));
    }
    Ok(Arguments::PickleFile(file.to_path_buf()))
}

const MIB: f64 = (1 << 20) as f64;

fn parse_json(flag: &str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| CallError::usage(format!("{flag}: not JSON: {e}")))
}
