//! The function's slice (the module-level statements it needs) and its static closure (what
//! its imports are compared with), both from one analysis.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use lfm_analyzer::dists::DistIndex;
use lfm_analyzer::spec::{ModuleKind, TargetKind};
use lfm_analyzer::{prepare, Analysis, Options};
use lfm_monitor::imports::{ClosureModule, StaticClosure};
use lfm_monitor::report::Imports;

use crate::error::{CallError, Result};
use crate::interpreter::Interpreter;
use crate::kept_analysis::{self, KeptAnalysis};
use crate::locate::Located;

/// The analyzer's slice of a located function: (first line, last line) ranges in source
/// order, computed by the same walk as the function's closure in `lfm analyze`, and that
/// closure; analysed now or kept from an earlier call (kept_analysis.rs).
pub struct Sliced {
    pub kept: KeptAnalysis,
    /// The analysis, when it ran in this process (its phase times are shown).
    pub analysis: Option<Analysis>,
    /// The distribution index of a kept analysis, read once a call imported a module.
    dists: OnceLock<DistIndex>,
    /// lfm's cache directory the analysis was kept in (and the index is).
    cache_root: Option<PathBuf>,
}

impl Sliced {
    pub fn statements(&self) -> &[[u64; 2]] {
        &self.kept.statements
    }

    /// `name==version` of the installed distribution that holds `file`.
    fn distribution_of(&self, file: &Path) -> Option<String> {
        if let Some(analysis) = &self.analysis {
            return analysis.distribution_of(file);
        }
        let kept = &self.kept;
        let dists = self.dists.get_or_init(|| {
            let cache_root = self.cache_root.as_deref();
            lfm_analyzer::installed_distributions(&kept.site_dirs, &kept.prefix, cache_root)
        });
        dists.distribution_of(file)
    }
}

/// Slice `located`, with the analysis kept between calls in lfm's cache directory
/// `cache_root` (`--cache-dir`; default: the analyzer's default cache directory).
pub fn slice(
    located: &Located,
    interpreter: &Interpreter,
    cache_root: Option<&Path>,
) -> Result<Sliced> {
    let cache_root = cache_root
        .map(Path::to_path_buf)
        .or_else(lfm_analyzer::cache::SummaryCache::default_dir);
    slice_kept(located, interpreter, cache_root)
}

/// [`slice`] with every cache of the analysis (the kept analyses, the parse results, the
/// interpreter's answers and the distribution index) under `cache_root`; none: analysed
/// afresh, nothing kept.
pub fn slice_kept(
    located: &Located,
    interpreter: &Interpreter,
    cache_root: Option<PathBuf>,
) -> Result<Sliced> {
    let Some(file) = &located.file else {
        return Err(CallError::not_found(format!("module {} not found on the source roots (add --root DIR, or pass --import-module to let Python find it)", located.module)));
    };
    let target = format!("{}:{}", file.display(), located.qualname);
    let mut roots: Vec<PathBuf> = located.root.iter().cloned().collect();
    roots.extend(interpreter.roots.iter().cloned());
    let options = Options {
        environment: interpreter.analysis_env.clone(),
        roots,
        cache_dir: cache_root.clone(),
        environment_cache: cache_root.clone(),
        extra_site_dirs: interpreter.site_dirs.clone(),
        ..Options::default()
    };
    let slot = (cache_root.as_ref()).and_then(|root| {
        let key = kept_analysis::key(&target, &options)?;
        Some((key, root.join(kept_analysis::DIR)))
    });
    if let Some(kept) = slot
        .as_ref()
        .and_then(|(key, dir)| kept_analysis::lookup(dir, key))
    {
        return Ok(Sliced {
            kept,
            analysis: None,
            dists: OnceLock::new(),
            cache_root,
        });
    }
    let started = std::time::SystemTime::now();
    let (analysis, statements) = analyse(&target, &options)?;
    let (kept, third_party) = kept(&analysis, statements);
    if let Some((key, dir)) = &slot {
        // The target file as named, too: a symbolic link the analysis saw through.
        let read = analysis.read_paths(third_party.iter().map(String::as_str));
        let read = read.map(|paths| paths.into_iter().chain([file.clone()]));
        kept_analysis::store(dir, key, started, read, &kept);
    }
    Ok(Sliced {
        kept,
        analysis: Some(analysis),
        dists: OnceLock::new(),
        cache_root,
    })
}

/// The analysis of `target` and its function's slice.
fn analyse(target: &str, options: &Options) -> Result<(Analysis, Vec<[u64; 2]>)> {
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
    let analysis = prepare(&[target.to_string()], options).map_err(not_found)?;
    let slice = analysis
        .function_slice()
        .ok_or_else(|| CallError::not_found(format!("{target}: no such function")))?
        .map_err(not_found)?;
    let statements = slice
        .statements
        .iter()
        .map(|&(first, last)| [u64::from(first), u64::from(last)])
        .collect();
    Ok((analysis, statements))
}

/// What a call keeps of `analysis`: the slice, and the function's closure as the import log
/// is compared with it (its local and third-party modules, every distribution it needs); and
/// the installed modules its closure and its engine's hold (what it read of installed code
/// depends on).
fn kept(analysis: &Analysis, statements: Vec<[u64; 2]>) -> (KeptAnalysis, Vec<String>) {
    let interpreter = analysis.interpreter();
    let mut kept = KeptAnalysis {
        statements,
        modules: Vec::new(),
        distributions: Vec::new(),
        site_dirs: interpreter.site_dirs(),
        prefix: interpreter.prefix.clone(),
    };
    let mut third_party = Vec::new();
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
            kept.modules.extend(packed.map(|m| {
                let distribution = m.distribution.as_deref().and_then(pinned);
                (m.name.clone(), distribution)
            }));
            kept.distributions.extend(
                target
                    .distributions
                    .iter()
                    .map(|d| format!("{}=={}", d.name, d.version)),
            );
            let installed = (target.modules.iter().chain(&target.engine.modules))
                .filter(|m| m.kind == ModuleKind::ThirdParty);
            third_party.extend(installed.map(|m| m.name.clone()));
        }
        Ok::<(), ()>(())
    });
    (kept, third_party)
}

/// The function's closure as the import log is compared with it: its module, its local and
/// third-party modules, every distribution it needs.
pub fn static_closure(
    sliced: &Sliced,
    located: &Located,
    interpreter: &Interpreter,
) -> StaticClosure {
    let modules = sliced.kept.modules.iter().cloned();
    let roots = located.root.iter().chain(&interpreter.roots);
    StaticClosure {
        module: located.module.clone(),
        modules: modules
            .map(|(name, distribution)| ClosureModule { name, distribution })
            .collect(),
        distributions: sliced.kept.distributions.clone(),
        roots: roots.map(|r| r.display().to_string()).collect(),
    }
}

/// Name the distribution of every imported module from the environment's file index, and
/// compare the imports with the function's static closure.
pub fn with_distributions(
    mut imports: Imports,
    sliced: &Sliced,
    closure: StaticClosure,
) -> Imports {
    for module in &mut imports.modules {
        module.distribution = module
            .file
            .as_deref()
            .and_then(|f| sliced.distribution_of(Path::new(f)));
    }
    lfm_monitor::imports::compare(&mut imports, Arc::new(closure));
    imports
}
