//! A call's arguments as callers give them: JSON text on the command line, JSON in a serve
//! request, or pickles; checked the same way wherever they come from.

use std::path::Path;

use crate::runner::request::Arguments;

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

/// The size of a call's input, known before it runs (docs/sizing.md "Input size"): the bytes
/// of its arguments as given (the JSON text, or the pickle) plus the size of every file an
/// argument names, i.e. every JSON string, at any depth, that is the path of an existing
/// regular file (relative to `base`). Directories count nothing: walking one a string happens
/// to name (`/`) could take long. A pickle is not looked into: a client counts the paths in
/// its arguments, `os.PathLike` ones included, before pickling (python/lfm/inputs.py) and
/// sends the sum as the request's `input_bytes`.
pub fn input_bytes(arguments: &Arguments, base: &Path) -> u64 {
    match arguments {
        Arguments::Json(positional, keywords) => {
            let text = serde_json::to_string(positional).map_or(0, |t| t.len())
                + serde_json::to_string(keywords).map_or(0, |t| t.len());
            let mut files = 0;
            for value in positional.iter().chain(keywords.values()) {
                files += named_files(value, base);
            }
            text as u64 + files
        }
        // Four base64 characters carry three bytes, less the padding.
        Arguments::Pickle(text) => {
            let padding = text.bytes().rev().take_while(|&b| b == b'=').count();
            (text.len() / 4 * 3).saturating_sub(padding) as u64
        }
        Arguments::PickleFile(file) => std::fs::metadata(file).map_or(0, |m| m.len()),
    }
}

/// The sizes of the existing regular files that the strings in `value` name.
fn named_files(value: &serde_json::Value, base: &Path) -> u64 {
    match value {
        serde_json::Value::String(text) if !text.is_empty() && text.len() < 4096 => {
            match std::fs::metadata(base.join(text)) {
                Ok(meta) if meta.is_file() => meta.len(),
                _ => 0,
            }
        }
        serde_json::Value::Array(values) => values.iter().map(|v| named_files(v, base)).sum(),
        serde_json::Value::Object(map) => map.values().map(|v| named_files(v, base)).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod input_tests {
    use super::*;

    #[test]
    fn input_bytes_are_the_arguments_and_the_files_they_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("reads.fastq"), vec![b'A'; 5000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.bam"), vec![0; 300]).unwrap();
        let args = json(
            Some(serde_json::json!([
                "reads.fastq",
                3,
                ["sub/b.bam", "no-such-file"]
            ])),
            Some(serde_json::json!({"out": "sub", "ref": "sub/b.bam"})),
        )
        .unwrap();
        // JSON text: ["reads.fastq",3,["sub/b.bam","no-such-file"]] is 46 bytes and
        // {"out":"sub","ref":"sub/b.bam"} 31; the files 5000 + 300 twice; "sub" is a directory.
        assert_eq!(input_bytes(&args, dir.path()), 46 + 31 + 5000 + 600);
        // A pickle counts its decoded bytes: "gAQu" (3 bytes), "gAQ=" (2).
        assert_eq!(
            input_bytes(&Arguments::Pickle("gAQu".into()), dir.path()),
            3
        );
        assert_eq!(
            input_bytes(&Arguments::Pickle("gAQ=".into()), dir.path()),
            2
        );
        let file = dir.path().join("sub/b.bam");
        assert_eq!(input_bytes(&Arguments::PickleFile(file), dir.path()), 300);
    }
}
