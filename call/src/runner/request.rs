//! The request the runner reads (`lfm-call-request/1`, python/lfm_runner/call.py): one type
//! for `lfm call`, which writes it to a file, and `lfm serve`, which hands it to a forked child.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "lfm-call-request/1";

/// How the runner loads the function (python/lfm_runner/target.py).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Target {
    /// Run only the module-level statements the function needs: `statements` are the
    /// analyzer's (first line, last line) ranges, in source order.
    Slice {
        module: String,
        root: Option<PathBuf>,
        file: Option<PathBuf>,
        qualname: String,
        statements: Vec<[u64; 2]>,
        /// Where the runner keeps the slice's compiled code between calls (`lfm call`:
        /// python/lfm_runner/compiled.py); none: compiled each time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compiled: Option<PathBuf>,
    },
    /// Import the module normally (its whole top level runs).
    Import {
        module: String,
        root: Option<PathBuf>,
        qualname: String,
    },
    /// A function the serve's zygote loaded at start (`lfm serve --function`).
    Registered { name: String },
    /// A pickled function, base64 (cloudpickle for `__main__` functions and closures).
    Pickle { pickle: String },
}

impl Target {
    pub fn mode(&self) -> &'static str {
        match self {
            Target::Slice { .. } => "slice",
            Target::Import { .. } => "import",
            Target::Registered { .. } => "registered",
            Target::Pickle { .. } => "pickle",
        }
    }
}

/// The call's arguments, as the runner reads them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arguments {
    /// Positional and keyword arguments as JSON.
    Json(
        Vec<serde_json::Value>,
        serde_json::Map<String, serde_json::Value>,
    ),
    /// `(args, kwargs)` pickled, base64.
    Pickle(String),
    /// `(args, kwargs)` pickled in a file.
    PickleFile(PathBuf),
}

impl Default for Arguments {
    fn default() -> Arguments {
        Arguments::Json(Vec::new(), serde_json::Map::new())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultFormat {
    #[default]
    Json,
    Pickle,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultSpec {
    pub format: ResultFormat,
}

/// One call, as the runner reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub format: String,
    pub target: Target,
    pub args: Arguments,
    pub result: ResultSpec,
    pub result_file: PathBuf,
    pub outcome_file: PathBuf,
    /// Where the call's imports are logged; none: not logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import_log: Option<PathBuf>,
    /// Where a raised exception is pickled, for a caller that re-raises it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception_file: Option<PathBuf>,
    /// Set by the child before user code runs (a call's CUDA_VISIBLE_DEVICES).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// A context's initialiser (`module:qualname`) the call runs itself unless the zygote
    /// forked it with the context loaded (python/lfm_runner/contexts.py).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// `false`: a forked call does not measure its own rise in resident size (its cgroup keeps
    /// the kernel's peak, which the Report takes instead); absent: it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_growth: Option<bool>,
    /// The call's process is kept for the next calls of its function (lfm serve's `reuse`,
    /// python/lfm_runner/reuse.py).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reuse: bool,
}

/// Where a call's runner writes what it produced.
pub struct Outputs {
    pub result_file: PathBuf,
    pub outcome_file: PathBuf,
    pub import_log: Option<PathBuf>,
}

impl Request {
    pub fn new(target: Target, args: Arguments, result: ResultFormat, outputs: Outputs) -> Request {
        Request {
            format: FORMAT.into(),
            target,
            args,
            result: ResultSpec { format: result },
            result_file: outputs.result_file,
            outcome_file: outputs.outcome_file,
            import_log: outputs.import_log,
            exception_file: None,
            env: None,
            memory_growth: None,
            context: None,
            reuse: false,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a request is plain data")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_reads_the_shapes_it_always_read() {
        let request = Request::new(
            Target::Slice {
                module: "m".into(),
                root: None,
                file: Some("/p/m.py".into()),
                qualname: "f".into(),
                statements: vec![[1, 2]],
                compiled: None,
            },
            Arguments::Json(vec![serde_json::json!(3)], serde_json::Map::new()),
            ResultFormat::Json,
            Outputs {
                result_file: "/d/result".into(),
                outcome_file: "/d/outcome.json".into(),
                import_log: None,
            },
        );
        let value: serde_json::Value = serde_json::from_str(&request.to_json()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "format": "lfm-call-request/1",
                "target": {"mode": "slice", "module": "m", "root": null, "file": "/p/m.py",
                           "qualname": "f", "statements": [[1, 2]]},
                "args": {"json": [[3], {}]},
                "result": {"format": "json"},
                "result_file": "/d/result",
                "outcome_file": "/d/outcome.json",
            })
        );
        let pickled = serde_json::to_value(Arguments::PickleFile("/a".into())).unwrap();
        assert_eq!(pickled, serde_json::json!({"pickle_file": "/a"}));
        let registered = serde_json::to_value(Target::Registered { name: "n".into() }).unwrap();
        assert_eq!(
            registered,
            serde_json::json!({"mode": "registered", "name": "n"})
        );
    }
}
