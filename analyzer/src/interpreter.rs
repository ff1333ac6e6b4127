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

const QUERY: &str = r#"
import sys, os, json, platform, sysconfig, importlib.machinery
paths = sysconfig.get_paths()
# In a venv, sysconfig's platstdlib is the venv's own lib/pythonX.Y (site-packages lives there);
# the real stdlib and lib-dynload belong to the base install. os.py marks the stdlib itself.
stdlib_dirs = [os.path.dirname(os.__file__),
               sysconfig.get_paths(vars={"platbase": sys.base_exec_prefix,
                                         "base": sys.base_prefix})["platstdlib"]]
names = getattr(sys, "stdlib_module_names", None)
if names is None:
    names = set(sys.builtin_module_names)
    for entry in os.listdir(stdlib_dirs[0]):
        base = entry.split(".")[0]
        if base.isidentifier() and base != "site-packages":
            names.add(base)
print(json.dumps({
    "executable": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "version": platform.python_version(),
    "path": [p for p in sys.path if p],
    "stdlib_dirs": [d for d in dict.fromkeys(stdlib_dirs) if os.path.isdir(d)],
    "stdlib_module_names": sorted(names),
    "builtin_module_names": sorted(sys.builtin_module_names),
    "extension_suffixes": importlib.machinery.EXTENSION_SUFFIXES,
    "soabi": sysconfig.get_config_var("SOABI") or "",
    "base_executable": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
    "shared_library": os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
        if sysconfig.get_config_var("Py_ENABLE_SHARED") else "",
    "platform_tag": sysconfig.get_platform(),
    "markers": {
        "implementation_name": sys.implementation.name,
        "implementation_version": platform.python_version(),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_python_implementation": platform.python_implementation(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    },
}))
"#;

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
    /// Ask `python` (a path or a name on PATH) about itself.
    pub fn query(python: &Path) -> Result<Interpreter> {
        let output = Command::new(python)
            .arg("-E")
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
    pub fn for_prefix(prefix: &Path) -> Result<Interpreter> {
        for candidate in ["bin/python", "bin/python3", "python.exe"] {
            let python = prefix.join(candidate);
            if python.exists() {
                return Interpreter::query(&python);
            }
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
