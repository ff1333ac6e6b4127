//! The function's slice (the module-level statements it needs) and its static closure (what
//! its imports are compared with), both from one analysis.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lfm_analyzer::spec::{ModuleKind, TargetKind};
use lfm_analyzer::{prepare, Analysis, Options};
use lfm_monitor::imports::{ClosureModule, StaticClosure};
use lfm_monitor::report::Imports;

use crate::error::{CallError, Result};
use crate::interpreter::Interpreter;
use crate::locate::Located;

/// The analyzer's slice of a located function: (first line, last line) ranges in source
/// order, computed by the same walk as the function's closure in `lfm analyze`.
pub struct Sliced {
    pub statements: Vec<[u64; 2]>,
    pub analysis: Analysis,
}

pub fn slice(located: &Located, interpreter: &Interpreter) -> Result<Sliced> {
    let Some(file) = &located.file else {
        return Err(CallError::not_found(format!("module {} not found on the source roots (add --root DIR, or pass --import-module to let Python find it)", located.module)));
    };
    let target = format!("{}:{}", file.display(), located.qualname);
    let mut roots: Vec<PathBuf> = located.root.iter().cloned().collect();
    roots.extend(interpreter.roots.iter().cloned());
    let options = Options {
        environment: interpreter.analysis_env.clone(),
        roots,
        ..Options::default()
    };
    // Only a missing target is "not found". An interpreter that cannot start or describe
    // itself (Python 2 refuses: lfm_probes/interpreter.py) is the caller's choice (usage);
    // anything else is lfm's failure.
    let not_found = |e: lfm_analyzer::AnalyzeError| match e {
        lfm_analyzer::AnalyzeError::TargetNotFound { .. } => CallError::not_found(e.to_string()),
        other => {
            let message = format!("{other:#}");
            if message.contains("the interpreter ") {
                CallError::usage(message)
            } else {
                CallError::failed(message)
            }
        }
    };
    let analysis = prepare(std::slice::from_ref(&target), &options).map_err(not_found)?;
    let slice = analysis
        .function_slice()
        .ok_or_else(|| CallError::not_found(format!("{target}: no such function")))?
        .map_err(not_found)?;
    let statements = slice
        .statements
        .iter()
        .map(|&(first, last)| [u64::from(first), u64::from(last)])
        .collect();
    Ok(Sliced {
        statements,
        analysis,
    })
}

/// The function's closure as the import log is compared with it: its module, its local and
/// third-party modules, every distribution it needs.
pub fn static_closure(
    analysis: &Analysis,
    located: &Located,
    interpreter: &Interpreter,
) -> StaticClosure {
    let mut closure = StaticClosure {
        module: located.module.clone(),
        ..StaticClosure::default()
    };
    let _ = analysis.for_each_chunk(1, |targets| {
        for target in targets.iter().filter(|t| t.kind != TargetKind::Module) {
            let pinned = |name: &str| {
                let dist = target.distributions.iter().find(|d| d.name == name);
                dist.map(|d| format!("{}=={}", d.name, d.version))
            };
            let packed = target
                .modules
                .iter()
                .filter(|m| m.kind != ModuleKind::Stdlib);
            closure.modules.extend(packed.map(|m| ClosureModule {
                name: m.name.clone(),
                distribution: m.distribution.as_deref().and_then(pinned),
            }));
            closure.distributions.extend(
                target
                    .distributions
                    .iter()
                    .map(|d| format!("{}=={}", d.name, d.version)),
            );
        }
        Ok::<(), ()>(())
    });
    let roots = located.root.iter().chain(&interpreter.roots);
    closure.roots = roots.map(|r| r.display().to_string()).collect();
    closure
}

/// Name the distribution of every imported module from the environment's file index, and
/// compare the imports with the function's static closure.
pub fn with_distributions(
    mut imports: Imports,
    analysis: &Analysis,
    closure: StaticClosure,
) -> Imports {
    for module in &mut imports.modules {
        module.distribution = module
            .file
            .as_deref()
            .and_then(|f| analysis.distribution_of(Path::new(f)));
    }
    lfm_monitor::imports::compare(&mut imports, Arc::new(closure));
    imports
}
