//! A function target turned into what the runner loads: located, sliced (or imported whole),
//! with the closure its imports are compared with. `lfm serve` keeps each one it resolved.

use std::collections::HashMap;
use std::sync::Arc;

use lfm_monitor::imports::StaticClosure;

use crate::runner::request::Target;

use crate::error::Result;
use crate::interpreter::Interpreter;
use crate::locate::{locate, Located};
use crate::slice::{slice, static_closure, Sliced};

/// One call target, ready for the runner.
pub struct Prepared {
    /// The target as the caller wrote it (the Report's `function.target`).
    pub asked: String,
    pub located: Located,
    pub target: Target,
    /// Empty with `import_module`: the whole module runs, nothing was analysed.
    pub sliced: Option<Sliced>,
}

/// Locate `target` and, unless `import_module`, slice it (the analysis kept under lfm's cache
/// directory `cache_root`, default when `None`).
pub fn prepare(
    target: &str,
    interpreter: &Interpreter,
    import_module: bool,
    cache_root: Option<&std::path::Path>,
) -> Result<Prepared> {
    let asked = target.to_string();
    let located = locate(target, interpreter)?;
    let sliced = if import_module {
        None
    } else {
        Some(slice(&located, interpreter, cache_root)?)
    };
    let target = runner_target(&located, sliced.as_ref());
    Ok(Prepared {
        asked,
        located,
        target,
        sliced,
    })
}

impl Prepared {
    pub fn closure(&self, interpreter: &Interpreter) -> Option<StaticClosure> {
        let sliced = self.sliced.as_ref()?;
        Some(static_closure(sliced, &self.located, interpreter))
    }
}

/// The runner's description of a located function (python/lfm_runner/target.py).
pub fn runner_target(located: &Located, sliced: Option<&Sliced>) -> Target {
    match sliced {
        Some(sliced) => Target::Slice {
            module: located.module.clone(),
            root: located.root.clone(),
            file: located.file.clone(),
            qualname: located.qualname.clone(),
            statements: sliced.statements().to_vec(),
            compiled: None,
        },
        None => Target::Import {
            module: located.module.clone(),
            root: located.root.clone(),
            qualname: located.qualname.clone(),
        },
    }
}

/// A target as a serve runs it, and for a sliced one the closure its imports are compared with.
#[derive(Clone)]
pub struct Resolved {
    pub target: Target,
    pub closure: Option<Arc<StaticClosure>>,
}

/// The serve's targets: registered ones by name, others located and sliced once.
pub struct Targets {
    interpreter: Interpreter,
    /// lfm's cache directory the analyses are kept in (none: the analyzer's default).
    cache_root: Option<std::path::PathBuf>,
    registered: Vec<String>,
    resolved: HashMap<(String, bool), Resolved>,
}

impl Targets {
    pub fn new(interpreter: Interpreter, cache_root: Option<std::path::PathBuf>) -> Targets {
        Targets {
            interpreter,
            cache_root,
            registered: Vec::new(),
            resolved: HashMap::new(),
        }
    }

    pub fn interpreter(&self) -> &Interpreter {
        &self.interpreter
    }

    /// A `--function` the zygote loads at start: what it loads, kept under its name.
    pub fn register(&mut self, function: &str) -> Result<Target> {
        let resolved = self.resolve(function, false)?;
        self.registered.push(function.to_string());
        Ok(resolved.target)
    }

    pub fn resolve(&mut self, function: &str, import_module: bool) -> Result<Resolved> {
        let key = (function.to_string(), import_module);
        if !import_module && self.registered.iter().any(|r| r == function) {
            // Resolved when it was registered: its closure is kept.
            let closure = self.resolved.get(&key).and_then(|r| r.closure.clone());
            let target = Target::Registered {
                name: function.to_string(),
            };
            return Ok(Resolved { target, closure });
        }
        if let Some(resolved) = self.resolved.get(&key) {
            return Ok(resolved.clone());
        }
        let cache_root = self.cache_root.as_deref();
        let prepared = prepare(function, &self.interpreter, import_module, cache_root)?;
        let resolved = Resolved {
            closure: prepared.closure(&self.interpreter).map(Arc::new),
            target: prepared.target,
        };
        self.resolved.insert(key, resolved.clone());
        Ok(resolved)
    }
}
