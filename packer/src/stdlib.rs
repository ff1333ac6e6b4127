//! The part of the stdlib a self-contained pack needs.
//!
//! Seeds: what the interpreter imports while starting (asked once from the interpreter itself),
//! the stdlib modules of the Spec's closures, and every stdlib import found in the packed
//! distributions' and local modules' source. From the seeds the stdlib's own imports are followed
//! through its source files, so `json` brings `json.decoder`, `re`, `_json` and so on. Nothing is
//! imported to find out, apart from the interpreter's own start-up.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use lfm_analyzer::extract::summarize;
use lfm_analyzer::interpreter::Interpreter;
use lfm_analyzer::source::decode;
use rayon::prelude::*;

/// Packages included whole: their modules are imported by computed names (codec lookup).
const WHOLE_PACKAGES: &[&str] = &["encodings"];

/// Always included: `sysconfig` (numpy, pandas and build tools ask it at import time), which
/// imports its platform's data module by a computed name (`_sysconfigdata_<abi>_<platform>`),
/// a module `sys.stdlib_module_names` does not list; those files go in whole.
const ALWAYS: &[&str] = &["sysconfig"];
const SYSCONFIG_DATA_PREFIX: &str = "_sysconfigdata_";

/// Files of the stdlib directory (relative paths) and lib-dynload extensions needed.
pub struct StdlibSelection {
    pub files: BTreeSet<PathBuf>,
    pub modules: usize,
}

/// Module names the interpreter has loaded once it has started (with `site`, without user code).
fn startup_modules(interpreter: &Interpreter) -> Result<Vec<String>> {
    let output = Command::new(&interpreter.base_executable)
        .args([
            "-I",
            "-c",
            "import sys, json; print(json.dumps(sorted(sys.modules)))",
        ])
        .output()
        .with_context(|| format!("starting {}", interpreter.base_executable.display()))?;
    if !output.status.success() {
        bail!(
            "{} could not list its start-up modules",
            interpreter.base_executable.display()
        );
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

include!(concat!(env!("OUT_DIR"), "/runner_sources.rs"));

/// Stdlib module names imported (at any depth, in any context) by the given source files.
pub fn stdlib_imports_of(files: &[PathBuf], interpreter: &Interpreter) -> BTreeSet<String> {
    files
        .par_iter()
        .map(|file| match std::fs::read(file) {
            Ok(bytes) => stdlib_imports_in(&decode(&bytes).text, interpreter),
            Err(_) => Vec::new(),
        })
        .flatten()
        .collect()
}

/// Stdlib module names the call runner imports: a self-contained pack runs it with its own
/// interpreter (the zygote needs `resource`, `selectors`, ... whatever the function uses).
pub fn runner_stdlib_imports(interpreter: &Interpreter) -> BTreeSet<String> {
    RUNNER_SOURCES
        .iter()
        .flat_map(|text| stdlib_imports_in(text, interpreter))
        .collect()
}

fn stdlib_imports_in(text: &str, interpreter: &Interpreter) -> Vec<String> {
    let stdlib = &interpreter.stdlib_module_names;
    let summary = summarize(text);
    summary
        .imports
        .iter()
        .filter(|edge| edge.level == 0 && !edge.context.type_checking)
        .filter(|edge| {
            let module = summary.edge_module(edge);
            stdlib.contains(module.split('.').next().unwrap_or(""))
        })
        .flat_map(|edge| {
            let module = summary.edge_module(edge);
            let mut names = vec![module.to_string()];
            if let Some(member) = summary.edge_member(edge).filter(|m| *m != "*") {
                names.push(format!("{module}.{member}"));
            }
            names
        })
        .collect()
}

pub fn select(interpreter: &Interpreter, seeds: BTreeSet<String>) -> Result<StdlibSelection> {
    let Some(stdlib) = interpreter.stdlib_dirs.first() else {
        bail!("the interpreter reported no stdlib directory")
    };
    let dynload = interpreter
        .stdlib_dirs
        .iter()
        .map(|d| d.join("lib-dynload"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| stdlib.join("lib-dynload"));
    let mut queue: VecDeque<String> = startup_modules(interpreter)?
        .into_iter()
        .chain(seeds)
        .collect();
    queue.extend(WHOLE_PACKAGES.iter().map(|p| p.to_string()));
    queue.extend(ALWAYS.iter().map(|p| p.to_string()));
    let mut seen: HashSet<String> = HashSet::new();
    let mut files = sysconfig_data_files(stdlib);
    let extension_files = file_names(&dynload);
    while let Some(name) = queue.pop_front() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let top = name.split('.').next().unwrap_or("");
        if !interpreter.stdlib_module_names.contains(top)
            || interpreter.builtin_module_names.contains(&name)
        {
            continue;
        }
        // Parent packages run first.
        if let Some((parent, _)) = name.rsplit_once('.') {
            queue.push_back(parent.to_string());
        }
        let found = source_files(stdlib, &name);
        if found.is_empty() && !name.contains('.') {
            let prefix = format!("{name}.");
            for extension in extension_files.iter().filter(|f| f.starts_with(&prefix)) {
                files.insert(Path::new("lib-dynload").join(extension));
            }
        }
        for file in found {
            let Ok(bytes) = std::fs::read(&file) else {
                continue;
            };
            queue_imports(&decode(&bytes).text, &name, &file, &mut queue);
            if let Ok(relative) = file.strip_prefix(stdlib) {
                files.insert(relative.to_path_buf());
            }
        }
    }
    Ok(StdlibSelection {
        modules: seen.len(),
        files,
    })
}

/// `_sysconfigdata_*.py`, which `sysconfig` imports by a computed name.
fn sysconfig_data_files(stdlib: &Path) -> BTreeSet<PathBuf> {
    file_names(stdlib)
        .into_iter()
        .filter(|name| name.starts_with(SYSCONFIG_DATA_PREFIX) && name.ends_with(".py"))
        .map(PathBuf::from)
        .collect()
}

fn file_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The source files of stdlib module `name`: a package's `__init__.py` (every file of the
/// packages kept whole), or the module's own file; empty for an extension or a missing module.
fn source_files(stdlib: &Path, name: &str) -> Vec<PathBuf> {
    let relative: PathBuf = name.split('.').collect();
    let package_dir = stdlib.join(&relative);
    if package_dir.join("__init__.py").is_file() {
        let mut found = vec![package_dir.join("__init__.py")];
        if WHOLE_PACKAGES.contains(&name) {
            found.extend(
                walkdir::WalkDir::new(&package_dir)
                    .into_iter()
                    .flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "py"))
                    .map(|e| e.into_path()),
            );
        }
        return found;
    }
    let module_file = package_dir.with_extension("py");
    if module_file.is_file() {
        return vec![module_file];
    }
    Vec::new()
}

/// Queue what `source` (file `file` of module `name`) imports, relative imports resolved
/// against its package.
fn queue_imports(source: &str, name: &str, file: &Path, queue: &mut VecDeque<String>) {
    let summary = summarize(source);
    let mut package: Vec<&str> = name.split('.').collect();
    if file.file_name().is_some_and(|f| f != "__init__.py") {
        package.pop();
    }
    for edge in summary.imports.iter().filter(|e| !e.context.type_checking) {
        let module = summary.edge_module(edge);
        let base = if edge.level == 0 {
            module.to_string()
        } else {
            let keep = package.len().saturating_sub(edge.level as usize - 1);
            let mut parts: Vec<&str> = package[..keep].to_vec();
            if !module.is_empty() {
                parts.push(module);
            }
            parts.join(".")
        };
        if base.is_empty() {
            continue;
        }
        if let Some(member) = summary.edge_member(edge).filter(|m| *m != "*") {
            queue.push_back(format!("{base}.{member}"));
        }
        queue.push_back(base);
    }
}
