//! Facts about the target interpreter, asked once.
//!
//! The analyzer never imports user or third-party code; the only process it starts is the
//! target interpreter running a fixed snippet that prints its version, `sys.path`, stdlib module
//! names and the PEP 508 marker values. Everything else is read from disk.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::interpreter_cache;

/// Printed by the interpreter asked (python/lfm_probes/interpreter.py, run with `-c`).
pub(crate) const QUERY: &str = include_str!("../../python/lfm_probes/interpreter.py");

/// What the analyzer knows about the interpreter the code will run under.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Interpreter {
    pub executable: PathBuf,
    pub prefix: PathBuf,
    pub base_prefix: PathBuf,
    pub version: String,
    pub path: Vec<PathBuf>,
    /// The stdlib directory (where os.py is) first, then lib-dynload's parent when it differs;
    /// always the base install's, also for a venv.
    pub stdlib_dirs: Vec<PathBuf>,
    pub stdlib_module_names: HashSet<String>,
    pub builtin_module_names: HashSet<String>,
    pub extension_suffixes: Vec<String>,
    pub soabi: String,
    /// The real interpreter binary (for a venv, the base installation's).
    #[serde(default)]
    pub base_executable: PathBuf,
    /// libpython, when the interpreter links it dynamically.
    #[serde(default)]
    pub shared_library: String,
    pub platform_tag: String,
    /// The user site directory where Python would add it to `sys.path` once it exists.
    #[serde(default)]
    pub user_site: Option<PathBuf>,
    pub markers: Markers,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Markers {
    pub implementation_name: String,
    pub implementation_version: String,
    pub os_name: String,
    pub platform_machine: String,
    pub platform_python_implementation: String,
    pub platform_release: String,
    pub platform_system: String,
    pub platform_version: String,
    pub python_full_version: String,
    pub python_version: String,
    pub sys_platform: String,
}

impl Interpreter {
    /// Ask `python` (a path or a name on PATH) about itself, or take its answer from lfm's
    /// cache directory `cache_root` while that still holds (interpreter_cache.rs).
    pub fn query(python: &Path, cache_root: Option<&Path>) -> Result<Interpreter> {
        let cache = cache_root.map(|dir| dir.join(interpreter_cache::DIR));
        Interpreter::query_cached(python, cache.as_deref())
    }

    /// [`Interpreter::query`] with the answers kept in `cache` (none: always ask).
    pub fn query_cached(python: &Path, cache: Option<&Path>) -> Result<Interpreter> {
        if let Some(known) = cache.and_then(|dir| interpreter_cache::lookup(dir, python, QUERY)) {
            return Ok(known);
        }
        let interpreter = Interpreter::ask(python)?;
        if let Some(dir) = cache {
            interpreter_cache::store(dir, python, QUERY, &interpreter);
        }
        Ok(interpreter)
    }

    fn ask(python: &Path) -> Result<Interpreter> {
        // Not `-E`: PYTHONPATH and PYTHONUSERBASE decide where the code's imports come from
        // when it runs, so they decide what is analysed and packed too.
        let output = Command::new(python)
            .arg("-c")
            .arg(QUERY)
            .output()
            .with_context(|| format!("could not start the interpreter {}", python.display()))?;
        if !output.status.success() {
            bail!(
                "the interpreter {} failed to describe itself ({}): {}",
                python.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let mut interpreter: Interpreter = serde_json::from_slice(&output.stdout)
            .with_context(|| format!("unexpected answer from {}", python.display()))?;
        // Canonical paths make RECORD entries and resolved module files comparable.
        interpreter.path = interpreter
            .path
            .iter()
            .filter(|p| p.is_dir())
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
            .collect();
        interpreter.stdlib_dirs = interpreter
            .stdlib_dirs
            .iter()
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
            .collect();
        Ok(interpreter)
    }

    /// The interpreter of an environment prefix (a venv or a conda env).
    pub fn for_prefix(prefix: &Path, cache_root: Option<&Path>) -> Result<Interpreter> {
        if let Some(python) = python_of_prefix(prefix) {
            return Interpreter::query(&python, cache_root);
        }
        bail!(
            "{} holds no interpreter (looked for bin/python, bin/python3)",
            prefix.display()
        )
    }

    /// sys.path entries that hold third-party code: everything outside the stdlib directories.
    pub fn site_dirs(&self) -> Vec<PathBuf> {
        self.path
            .iter()
            .filter(|p| {
                !self.stdlib_dirs.iter().any(|s| p.starts_with(s))
                    || p.ends_with("site-packages")
                    || p.ends_with("dist-packages")
            })
            .cloned()
            .collect()
    }

    pub fn major_minor(&self) -> &str {
        &self.markers.python_version
    }
}

/// The interpreter of an environment prefix (a venv or a conda env): the first of
/// `bin/python`, `bin/python3`, `python.exe` there.
pub fn python_of_prefix(prefix: &Path) -> Option<PathBuf> {
    ["bin/python", "bin/python3", "python.exe"]
        .into_iter()
        .map(|candidate| prefix.join(candidate))
        .find(|python| python.exists())
}
