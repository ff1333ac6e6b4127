//! The pack manifest (docs/pack.md): the first entry of every lfm pack.

use serde::{Deserialize, Serialize};

pub const MANIFEST_FORMAT: &str = "lfm-pack/3";
pub const MANIFEST_NAME: &str = "lfm-manifest.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    /// blake3 of the Spec the pack was made from (absent for `--all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    pub python: PackPython,
    pub distributions: Vec<PackDistribution>,
    /// Local source files, as stored under `app/`.
    pub local_files: Vec<String>,
    /// Files of the closure's modules that no distribution lists, found in a directory on the
    /// interpreter's sys.path (a `PYTHONPATH` directory of plain modules), at their archive
    /// paths in the pack's site directory. Absent when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loose_files: Vec<String>,
    /// Distributions only the targets' engine (Parsl, Dask, lfm) brings, left out: the worker
    /// has them, and `run` sees its site-packages (docs/pack.md). Absent when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub engine_left_out: Vec<EngineLeftOut>,
    /// Per target of the Spec: the modules its closure imports (checked by `lfm verify`).
    pub targets: Vec<PackTarget>,
    pub totals: Totals,
    pub run: RunInfo,
    /// How compiled bytecode is handled.
    pub pyc: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PackPython {
    pub version: String,
    /// `sysconfig.get_config_var("SOABI")`, e.g. cpython-311-x86_64-linux-gnu.
    pub abi: String,
    pub platform: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PackDistribution {
    pub name: String,
    pub version: String,
    pub files: u64,
    /// Files of the distribution's `tests` directories a closure pack left out (no module of
    /// the closure lies in them; docs/pack.md "What a pack holds"). Absent when none was.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tests_left_out: u64,
    /// Where the packing interpreter found it, when not in the environment's own site
    /// directories (docs/pack.md, "Where files come from"); absent for those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// Where a distribution outside the environment's own site directories came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// A site directory outside the prefix: a base Python's site-packages under a venv made
    /// with `--system-site-packages`, the user site, a `.pth` or `PYTHONPATH` directory.
    OutsidePrefix,
    /// An editable install: the project's own files were copied in.
    Editable,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EngineLeftOut {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PackTarget {
    pub target: String,
    /// Which closure was packed: `import` packs hold the target's module, its parent
    /// packages and what importing them runs (what a by-reference pickle needs on a worker);
    /// `slice` packs what the function itself needs (what `lfm call` runs).
    #[serde(default)]
    pub closure: lfm_analyzer::spec::ClosureKind,
    pub modules: Vec<String>,
    /// Optional imports whose module is not installed: not packed, skipped by verify.
    #[serde(default)]
    pub optional_missing: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    pub files: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    /// Script at the pack root that puts the pack on the path and runs its arguments.
    pub script: String,
    /// Code run through `script` sees the pack and the stdlib only, not the node interpreter's
    /// site-packages (false for packs made with `--inherit-site-packages`).
    #[serde(default)]
    pub isolated: bool,
    /// Self-contained packs: the pack's own interpreter, relative to the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<String>,
    /// Directories (relative to the pack root) that go on PYTHONPATH, in order.
    pub pythonpath: Vec<String>,
    pub example: String,
}
