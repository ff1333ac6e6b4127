//! The serve protocol (`lfm-serve/1`, docs/serve.md), both halves: the request as a type and
//! its translation into the call the serve engine runs, and the reply ([`reply`]). Unknown fields are refused: a misspelt `"limit"` must
//! not run a call unlimited.

pub mod reply;

use serde::{Deserialize, Deserializer};

use lfm_monitor::limits::{LimitValues, Written};
use lfm_monitor::report::FunctionCall;
use lfm_sizing::policy::{Attempts, DEFAULT_MAX_RETRIES};
use lfm_sizing::{Strategy, DEFAULT_STRATEGY};

pub use reply::{ErrorBody, Message, Reply};

use crate::arguments;
use crate::runner::request::{Arguments, ResultFormat, Target};
use crate::serve::engine::{Auto, CallSpec};
use crate::target::Targets;

/// One request line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    #[serde(default)]
    pub id: serde_json::Value,
    pub function: Option<String>,
    pub function_pickle: Option<String>,
    /// Names a pickled function in the Report.
    pub name: Option<String>,
    /// Absent or null: false (null is accepted wherever a field may be absent).
    #[serde(default)]
    pub import_module: Option<bool>,
    pub args: Option<serde_json::Value>,
    pub kwargs: Option<serde_json::Value>,
    pub args_pickle: Option<String>,
    /// A file holding the pickle of `(args, kwargs)`: large arguments skip base64 and JSON.
    /// The client keeps it until the reply, and removes it.
    pub args_file: Option<std::path::PathBuf>,
    /// A value the child wrote to a file (over 60 KB) comes back as `result_file`, a path the
    /// client reads and removes, instead of inline.
    #[serde(default)]
    pub result_by_file: Option<bool>,
    #[serde(default)]
    pub limits: Option<LimitValues>,
    pub category: Option<String>,
    #[serde(default, deserialize_with = "auto_flag")]
    pub auto: bool,
    pub strategy: Option<String>,
    #[serde(default, deserialize_with = "retry_count")]
    pub max_retries: Option<u32>,
    #[serde(default, deserialize_with = "result_format")]
    pub result: ResultFormat,
    /// The call's input size in bytes, as the client measured it (python/lfm/inputs.py);
    /// absent: the arguments' bytes and the files their strings name, measured here.
    #[serde(default)]
    pub input_bytes: Option<u64>,
    /// Modules the call will import (`[[name, file or null], ...]`, parents first): the zygote
    /// imports those of the interpreter's and installed ones before it forks the call.
    #[serde(default)]
    pub warm: Option<Vec<(String, Option<String>)>>,
    /// A context's initialiser, `module:qualname`: the zygote runs it once and later calls
    /// fork with its state (docs/serve.md "Contexts").
    #[serde(default)]
    pub context: Option<String>,
    /// `true`: the call may run in a process an earlier call of the same function (same
    /// context, same limits but memory) ran in, and its process is kept for the next one (docs/serve.md
    /// "Reused processes"). Absent, null or false: a fresh process, as always.
    #[serde(default)]
    pub reuse: Option<bool>,
    /// `true`: no call; the reply says what the serve holds and runs (docs/serve.md "Status").
    #[serde(default)]
    pub status: Option<bool>,
}

/// What a request line asks.
pub enum Asked {
    Call(Box<CallSpec>),
    /// The serve's status, for this client and request id.
    Status(u64, serde_json::Value),
}

/// A request line into a call (or a status request), or the `malformed` reply naming what is
/// wrong.
pub fn parse(targets: &mut Targets, client: u64, line: &str) -> Result<Asked, Reply> {
    let request: Request = serde_json::from_str(line).map_err(|error| {
        // The id still goes back when only the rest is wrong.
        let id = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("id").cloned());
        let message = match &id {
            None if !line.trim_start().starts_with('{') => format!("not JSON: {error}"),
            _ => error.to_string(),
        };
        Reply::malformed(client, id.unwrap_or_default(), &message)
    })?;
    let id = request.id.clone();
    if request.status == Some(true) {
        return match request.only_status() {
            true => Ok(Asked::Status(client, id)),
            false => Err(Reply::malformed(
                client,
                id,
                "a status request has only \"id\" and \"status\"",
            )),
        };
    }
    request
        .into_call(targets, client)
        .map(|spec| Asked::Call(Box::new(spec)))
        .map_err(|message| Reply::malformed(client, id, &message))
}

impl Request {
    fn only_status(&self) -> bool {
        self.function.is_none()
            && self.function_pickle.is_none()
            && self.args.is_none()
            && self.args_pickle.is_none()
            && self.args_file.is_none()
            && self.limits.is_none()
            && self.input_bytes.is_none()
            && self.warm.is_none()
            && self.context.is_none()
            && self.reuse.is_none()
    }

    fn into_call(self, targets: &mut Targets, client: u64) -> Result<CallSpec, String> {
        let (target, function, closure) = self.function(targets)?;
        if let Some(name) = &self.context {
            crate::serve::engine::context::check_name(name)?;
        }
        let limits = self.limits.unwrap_or_default();
        let limits = limits.parse(Written::Json).map_err(|e| e.to_string())?;
        let args = match (self.args_pickle, self.args_file) {
            (Some(pickle), None) => Arguments::Pickle(pickle),
            (None, Some(file)) => arguments::pickle_file_fitting(&file, limits.memory_bytes)?,
            (None, None) => arguments::json(self.args, self.kwargs)?,
            (Some(_), Some(_)) => {
                return Err("give \"args_pickle\" or \"args_file\", not both".into())
            }
        };
        let input_bytes = self.input_bytes.unwrap_or_else(|| {
            arguments::input_bytes(&args, &std::env::current_dir().unwrap_or_default())
        });
        let mut auto = auto(self.auto, self.strategy.as_deref(), self.max_retries)?;
        if let Some(auto) = auto.as_mut() {
            auto.attempts.input_bytes = Some(input_bytes);
        }
        // A call's category is its function's name unless given: its history sizes the next.
        let category = self.category.or_else(|| {
            let name = function.target.rsplit(':').next().unwrap_or_default();
            Some(name.to_string())
        });
        Ok(CallSpec {
            client,
            id: self.id,
            target,
            category,
            function,
            args,
            result_format: self.result,
            result_by_file: self.result_by_file.unwrap_or(false),
            limits,
            auto,
            closure,
            input_bytes: Some(input_bytes),
            warm: self.warm.unwrap_or_default(),
            context: self.context,
            reuse: self.reuse.unwrap_or(false),
        })
    }

    #[allow(clippy::type_complexity)]
    fn function(
        &self,
        targets: &mut Targets,
    ) -> Result<
        (
            Target,
            FunctionCall,
            Option<std::sync::Arc<lfm_monitor::imports::StaticClosure>>,
        ),
        String,
    > {
        match (&self.function, &self.function_pickle) {
            (Some(name), None) => {
                let resolved = targets
                    .resolve(name, self.import_module.unwrap_or(false))
                    .map_err(|e| e.message)?;
                let call = FunctionCall {
                    target: name.clone(),
                    mode: resolved.target.mode().into(),
                    context: None,
                    process: None,
                };
                Ok((resolved.target, call, resolved.closure))
            }
            (None, Some(pickle)) => {
                let call = FunctionCall {
                    target: self
                        .name
                        .as_deref()
                        .map_or("pickle".into(), |n| format!("pickle:{n}")),
                    mode: "pickle".into(),
                    context: None,
                    process: None,
                };
                let target = Target::Pickle {
                    pickle: pickle.clone(),
                };
                Ok((target, call, None))
            }
            _ => Err("give \"function\" (a target) or \"function_pickle\" (base64)".into()),
        }
    }
}

/// `"auto": true`, with optional `"strategy"` and `"max_retries"` (docs/serve.md).
fn auto(
    asked: bool,
    strategy: Option<&str>,
    max_retries: Option<u32>,
) -> Result<Option<Auto>, String> {
    if !asked {
        return Ok(None);
    }
    let strategy = match strategy {
        None => DEFAULT_STRATEGY,
        Some(name) => Strategy::parse(name).map_err(|e| format!("\"strategy\": {e}"))?,
    };
    let retries = max_retries.unwrap_or(DEFAULT_MAX_RETRIES);
    Ok(Some(Auto::new(Attempts::new(strategy, retries))))
}

fn auto_flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::Null => Ok(false),
        serde_json::Value::Bool(flag) => Ok(flag),
        other => Err(serde::de::Error::custom(format!(
            "\"auto\" is true or false, not {other}"
        ))),
    }
}

fn retry_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    if value.is_null() {
        return Ok(None);
    }
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("\"max_retries\" is a count, not {value}")))
}

fn result_format<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ResultFormat, D::Error> {
    match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::Null => Ok(ResultFormat::Json),
        serde_json::Value::String(text) if text == "json" => Ok(ResultFormat::Json),
        serde_json::Value::String(text) if text == "pickle" => Ok(ResultFormat::Pickle),
        other => Err(serde::de::Error::custom(format!(
            "\"result\" is json or pickle, not {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Result<Request, String> {
        serde_json::from_str(line).map_err(|e| e.to_string())
    }

    #[test]
    fn a_request_parses_into_its_fields() {
        let request = parsed(
            r#"{"id": 7, "function_pickle": "AA==", "name": "f", "args_pickle": "AA==",
                "limits": {"memory": "1G", "cores": 2}, "auto": true, "max_retries": 2,
                "result": "pickle", "category": "c"}"#,
        )
        .unwrap();
        assert_eq!(request.id, 7);
        assert!(request.auto);
        assert_eq!(request.max_retries, Some(2));
        assert_eq!(request.result, ResultFormat::Pickle);
        let limits = request.limits.unwrap().parse(Written::Json).unwrap();
        assert_eq!(limits.memory_bytes, Some(1 << 30));
        assert_eq!(limits.cores, Some(2.0));
    }

    #[test]
    fn warm_names_modules_with_their_files_or_null() {
        let request = parsed(
            r#"{"function_pickle": "AA==", "warm": [["xml", "/usr/lib/python3/xml/__init__.py"],
                ["xml.dom", null]]}"#,
        )
        .unwrap();
        let warm = request.warm.unwrap();
        assert_eq!(warm[1], ("xml.dom".to_string(), None));
        assert!(parsed(r#"{"function": "f.py:g", "warm": ["xml"]}"#)
            .unwrap_err()
            .contains("invalid type"));
    }

    #[test]
    fn null_is_absent() {
        let request = parsed(
            r#"{"id": null, "function": "f.py:g", "limits": null, "import_module": null,
                "args": null, "auto": null, "result": null}"#,
        )
        .unwrap();
        assert!(request.limits.is_none() && !request.auto);
        assert_eq!(request.result, ResultFormat::Json);
    }

    #[test]
    fn misspelt_and_mistyped_fields_are_named() {
        assert!(parsed(r#"{"function": "f.py:g", "limit": {}}"#)
            .unwrap_err()
            .contains("unknown field `limit`"));
        assert!(parsed(r#"{"function": "f.py:g", "limits": {"mem": 1}}"#)
            .unwrap_err()
            .contains("unknown field `mem`"));
        assert!(parsed(r#"{"auto": "yes"}"#)
            .unwrap_err()
            .contains("\"auto\" is true or false"));
        assert!(parsed(r#"{"max_retries": -1}"#)
            .unwrap_err()
            .contains("\"max_retries\" is a count"));
        assert!(parsed(r#"{"result": "xml"}"#)
            .unwrap_err()
            .contains("\"result\" is json or pickle"));
    }
}
