//! Where a call's function lives, found by the analyzer's own rules, so that `lfm call` runs
//! the module `lfm analyze` analysed.

use std::path::PathBuf;

use crate::error::{CallError, Result};
use crate::interpreter::Interpreter;

/// Where the function lives, found as Python would import it.
#[derive(Debug, Clone)]
pub struct Located {
    /// Dotted module name (`proj.sub.tasks`).
    pub module: String,
    /// The directory that goes on sys.path for `module` to import.
    pub root: Option<PathBuf>,
    /// The module's source file, when found.
    pub file: Option<PathBuf>,
    pub qualname: String,
}

/// `file.py:qualname` or `pkg.mod:qualname`, on the interpreter's source roots and `--root`s.
/// A dotted module not found there is left for Python to find (`file` and `root` empty).
pub fn locate(target: &str, interpreter: &Interpreter) -> Result<Located> {
    let Some((module_part, qualname)) = target.rsplit_once(':') else {
        return Err(CallError::usage(format!(
            "{target}: a call target is file.py:function or pkg.mod:function"
        )));
    };
    if qualname.is_empty() || qualname.split('.').any(|p| p.is_empty()) {
        return Err(CallError::usage(format!("{target}: empty function name")));
    }
    let qualname = qualname.to_string();
    if module_part.ends_with(".py") {
        return locate_file(module_part, qualname, interpreter);
    }
    let module = module_part.to_string();
    let found = lfm_analyzer::find_source_module(&module, &interpreter.search_path());
    Ok(Located {
        root: found.as_ref().map(|(root, _)| root.clone()),
        file: found.map(|(_, file)| file),
        module,
        qualname,
    })
}

fn locate_file(path: &str, qualname: String, interpreter: &Interpreter) -> Result<Located> {
    let file = std::path::absolute(path).map_err(CallError::failed)?;
    if !file.is_file() {
        return Err(CallError::not_found(format!("{path}: no such file")));
    }
    let (module, root) = lfm_analyzer::module_of_file(&file)
        .ok_or_else(|| CallError::not_found(format!("{path}: not a Python module file name")))?;
    // In a pack the module is the pack's copy.
    let packed = interpreter
        .source_roots
        .iter()
        .filter(|r| r.ends_with("app"))
        .find_map(|r| lfm_analyzer::find_source_module(&module, std::slice::from_ref(r)));
    let (root, file) = packed.unwrap_or((root, file));
    Ok(Located {
        module,
        root: Some(root),
        file: Some(file),
        qualname,
    })
}
