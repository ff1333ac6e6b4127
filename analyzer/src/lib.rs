//! lfm-analyzer: what a Python function needs to run, and why.
//!
//! Given source files and a target interpreter, this crate computes for each function (and each
//! module) the closure of modules it needs: local files, stdlib modules and third-party modules,
//! each with the import statement and call chain that reached it. Third-party modules are mapped
//! to installed distributions through installer metadata, and the distributions' Requires-Dist
//! closure is evaluated for the target interpreter. The result is a versioned [`spec::Spec`].
//!
//! It owns parsing (ruff's error-recovering parser), resolution, closures and the Spec, and the
//! global-allocator wrapper ([`scratch::ScratchAlloc`]) that lets a program parse in per-thread
//! arenas. It does not pack, run or print anything, and it never imports or executes the code it
//! analyses: the only process started is the target interpreter describing itself (its script
//! is python/lfm_probes/interpreter.py, embedded at build time).
// The hand-written JSON writer is unused in the serde variant bench/alloc_json.sh builds.
#![cfg_attr(feature = "bench-serde-writer", allow(dead_code))]

pub mod cache;
pub mod closure;
pub mod cython_imports;
pub mod dists;
pub mod dists_cache;
pub mod engine;
pub mod extract;
pub mod frames;
pub mod installed_imports;
pub mod interpreter;
pub mod interpreter_cache;
pub mod kept_files;
pub mod module_table;
pub mod paths;
pub mod preparse;
pub mod project;
pub mod render;
pub mod resolve;
pub mod results;
pub mod reuse;
pub mod scratch;
pub mod slice;
pub mod source;
pub mod spec;
#[cfg(test)]
mod test_site;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::SummaryCache;
use crate::dists::DistIndex;
use crate::extract::ScopeKind;
use crate::interpreter::Interpreter;
use crate::preparse::Preparse;
use crate::project::{PendingModule, Project, Restoration};
use crate::resolve::{module_name_for, Location, Resolver};
use crate::spec::{PythonInfo, Spec, SPEC_FORMAT};

/// Directory names never descended into when a directory is analysed.
const SKIPPED_DIRS: &[&str] = &[
    "__pycache__",
    "node_modules",
    ".git",
    ".hg",
    ".tox",
    ".nox",
    ".venv",
];

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("target not found: {target}: {reason}")]
    TargetNotFound { target: String, reason: String },
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Which interpreter the code is meant for.
#[derive(Debug, Clone)]
pub enum Environment {
    /// An interpreter path or a name on PATH.
    Python(PathBuf),
    /// A venv or conda prefix.
    Prefix(PathBuf),
}

/// Called from the worker threads with (files parsed so far, files known so far).
pub type ParseProgress = std::sync::Arc<dyn Fn(usize, usize) + Send + Sync>;

#[derive(Clone)]
pub struct Options {
    pub environment: Environment,
    /// Extra source roots (`--root`), searched after the targets' own directories.
    pub roots: Vec<PathBuf>,
    /// Where the per-file summary cache lives; `None` disables it.
    pub cache_dir: Option<PathBuf>,
    /// Where the interpreter's answers and the installed-distribution index are kept (both
    /// checked against stamps before use); `None`: asked and indexed on every run.
    pub environment_cache: Option<PathBuf>,
    pub progress: Option<ParseProgress>,
    /// Which closure of function targets to compute (module targets have only one).
    pub closure: spec::ClosureKind,
    /// Globs of files and directories left out when a directory is analysed (`tests/`,
    /// `*_test.py`, `docs/conf.py`), matched against paths relative to that directory.
    pub exclude: Vec<String>,
    /// Site directories the code runs with beyond the interpreter's own, first on its path
    /// (a pack's `env/.../site-packages`, which its `run` script adds): their modules resolve
    /// and their distributions are indexed as the interpreter's.
    pub extra_site_dirs: Vec<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            environment: Environment::Python(PathBuf::from("python3")),
            roots: Vec::new(),
            cache_dir: SummaryCache::default_dir(),
            environment_cache: SummaryCache::default_dir(),
            progress: None,
            closure: spec::ClosureKind::default(),
            exclude: Vec::new(),
            extra_site_dirs: Vec::new(),
        }
    }
}

/// One thing the user asked about, located on disk.
struct Located {
    files: Vec<PendingModule>,
    /// `Some(qualname)` for `file.py:func`.
    qualname: Option<String>,
    roots: Vec<PathBuf>,
    text: String,
}

/// Analyse `targets` (`dir`, `file.py`, `file.py:func`, `file.py:Class.method`, `pkg.mod:func`)
/// and return the whole Spec. For trees with many functions, [`prepare`] and
/// [`Analysis::for_each_chunk`] keep memory to one chunk of targets at a time.
pub fn analyze(targets: &[String], options: &Options) -> Result<Spec, AnalyzeError> {
    let analysis = prepare(targets, options)?;
    let mut specs = Vec::with_capacity(analysis.len());
    analysis
        .for_each_chunk(usize::MAX, |chunk| {
            specs.extend(chunk);
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap_or_else(|never| match never {});
    Ok(Spec {
        format: SPEC_FORMAT.to_string(),
        python: analysis.python(),
        targets: specs,
        warnings: analysis.warnings(),
    })
}

/// Every file parsed and every import resolved; closures are computed on demand.
pub struct Analysis {
    project: Project,
    /// When each preparation phase ended, for `LFM_TIMINGS=1`.
    pub timings: Vec<(&'static str, Checkpoint)>,
    /// Set when a results cache was given ([`prepare_or_reuse`]): the result may be stored.
    env_key: Option<[u8; 32]>,
    located: Vec<PathBuf>,
    /// Why a stored result was not reused, when one was looked for.
    pub results_miss: Option<String>,
    /// (module, scope) pairs in output order; `None` is the module itself.
    jobs: Vec<(u32, Option<u32>)>,
    closure: spec::ClosureKind,
    /// The stored output of targets no changed file can reach, when a stored result was found
    /// whose only changed inputs are source files.
    reused: Option<Reused>,
    environment: Environment,
    /// The installed modules loading met, and how many of the project's warnings loading
    /// gave: what a stored result's [`module_table::ModuleTable`] keeps.
    met: Vec<std::sync::Arc<project::ThirdPartyModule>>,
    loading_warnings: usize,
    /// The stored result's table, when it was restored and would be made the same again.
    stored_table: Option<Vec<u8>>,
}

/// Targets whose output is copied from a stored result ([`reuse`]).
struct Reused {
    /// Per job, its target's number in `index`, when its output is reused.
    stored: Vec<Option<u32>>,
    /// The installed files whose imports the stored result followed (and it checked
    /// unchanged): reused outputs depend on them, though this run may not follow them.
    installed: Vec<(PathBuf, Option<results::Stamp>)>,
    index: results::TargetIndex,
    /// `None` once reading it failed (the remaining targets are computed).
    output: std::sync::Mutex<Option<results::StoredOutput>>,
    /// Its compressed frames, until the writer of the new result takes them.
    frames: std::sync::Mutex<Option<frames::FrameSource>>,
}

impl Analysis {
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// How many modules are targets (a file gives one, a directory one per file).
    pub fn module_targets(&self) -> usize {
        self.jobs
            .iter()
            .filter(|(_, scope)| scope.is_none())
            .count()
    }

    /// What this analysis was computed from, for storing its result ([`results`]); `None`
    /// when it was prepared without a results cache.
    pub fn inputs(&self) -> Option<results::Inputs> {
        let modules = &self.project.modules;
        let loaded: std::collections::HashSet<&Path> =
            modules.iter().map(|m| m.path.as_path()).collect();
        let carried = self.reused.iter().flat_map(|reused| &reused.installed);
        let mut installed: Vec<(PathBuf, Option<results::Stamp>)> = (self
            .project
            .installed_imports
            .stamps()
            .iter()
            .chain(carried))
        .filter(|(path, _)| !loaded.contains(path.as_path()))
        .cloned()
        .collect();
        installed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        installed.dedup_by(|a, b| a.0 == b.0);
        Some(results::Inputs {
            env_key: self.env_key?,
            located: self.located.clone(),
            files: modules.iter().map(|m| (m.path.clone(), m.stamp)).collect(),
            keys: modules.iter().map(|m| m.key).collect(),
            dirs: self.project.listed_dirs().to_vec(),
            installed,
        })
    }

    /// The loaded modules, for a stored result: the next run restores them instead of
    /// resolving every import again when the files that changed still write the same imports.
    /// ([`module_table::ModuleTable::to_bytes`]; empty when none can be made).
    pub fn module_table(&self) -> Vec<u8> {
        if let Some(stored) = &self.stored_table {
            return stored.clone();
        }
        let warnings = &self.project.warnings[..self.loading_warnings];
        module_table::ModuleTable::of(&self.project.modules, &self.met, warnings)
            .map(|table| table.to_bytes())
            .unwrap_or_default()
    }

    /// What the target index of a stored result needs besides each target's span: the jobs as
    /// (module, scope or [`results::NO_SCOPE`]) and the modules whose closures are shared.
    pub fn index_keys(&self) -> (Vec<(u32, u32)>, Vec<bool>) {
        let jobs = self
            .jobs
            .iter()
            .map(|&(module, scope)| (module, scope.unwrap_or(results::NO_SCOPE)))
            .collect();
        (jobs, reuse::imported_flags(&self.project))
    }

    /// The compressed frames of the stored result whose output is reused, for the writer of
    /// the new result to copy ([`results::ResultWriter::copy_frames_from`]); taken once.
    pub fn stored_frames(&self) -> Option<frames::FrameSource> {
        self.reused.as_ref()?.frames.lock().ok()?.take()
    }

    /// Roughly the heap bytes held by the summaries of every loaded module.
    pub fn summary_heap_bytes(&self) -> usize {
        self.project
            .modules
            .iter()
            .map(|m| m.summary.approximate_heap_bytes())
            .sum()
    }

    pub fn python(&self) -> PythonInfo {
        let interpreter = &self.project.interpreter;
        PythonInfo {
            version: interpreter.version.clone(),
            executable: interpreter.executable.display().to_string(),
            prefix: interpreter.prefix.display().to_string(),
            platform: interpreter.platform_tag.clone(),
            soabi: interpreter.soabi.clone(),
        }
    }

    /// Problems not tied to one target.
    pub fn warnings(&self) -> Vec<spec::Warning> {
        let mut warnings = self.project.warnings.clone();
        warnings.sort();
        warnings.dedup();
        warnings
    }

    /// `name==version` of the installed distribution whose RECORD (or conda-meta) lists `file`.
    pub fn distribution_of(&self, file: &Path) -> Option<String> {
        self.project.dists.distribution_of(file)
    }

    /// The interpreter's answer the analysis used.
    pub fn interpreter(&self) -> &Interpreter {
        &self.project.interpreter
    }

    /// Every path the answer for targets whose closures hold the installed modules
    /// `third_party` depends on, to be stamped by a cache of it: the source files read, the
    /// directories listed while resolving imports, the `__init__.py` files that decide each
    /// target module's name (present or not), what the interpreter's answer and the
    /// distribution index were read from, and the file of every installed module whose
    /// import-time imports were followed from those modules. None when the environment's
    /// interpreter cannot be named (its answer is not kept either).
    pub fn read_paths<'a>(
        &self,
        third_party: impl IntoIterator<Item = &'a str>,
    ) -> Option<Vec<PathBuf>> {
        let python = match &self.environment {
            Environment::Python(python) => python.clone(),
            Environment::Prefix(prefix) => interpreter::python_of_prefix(prefix)?,
        };
        let interpreter = &self.project.interpreter;
        let modules = &self.project.modules;
        let mut paths: Vec<PathBuf> = modules.iter().map(|m| m.path.clone()).collect();
        paths.extend(
            self.project
                .listed_dirs()
                .iter()
                .map(|(dir, _)| dir.clone()),
        );
        for &(module, _) in &self.jobs {
            paths.extend(package_markers(&modules[module as usize].path));
        }
        paths.extend(interpreter_cache::inputs(&python, interpreter));
        let site_dirs = interpreter.site_dirs();
        paths.extend(dists_cache::inputs(&site_dirs, Some(&interpreter.prefix)));
        paths.extend((self.project.installed_imports).files_followed(third_party));
        Some(paths)
    }

    /// The slice of the first function (or method, or class) target: the statements of its
    /// module it needs to run, computed by the same walk as its closure.
    pub fn function_slice(&self) -> Option<Result<slice::FunctionSlice, AnalyzeError>> {
        let &(module, scope) = self.jobs.iter().find(|(_, scope)| scope.is_some())?;
        let loaded = &self.project.modules[module as usize];
        let scope = scope?;
        let lines = closure::slice_lines(&self.project, module, scope);
        let source = match std::fs::read_to_string(&loaded.path) {
            Ok(source) => source,
            Err(error) => {
                return Some(Err(AnalyzeError::Other(anyhow::anyhow!(
                    "reading {}: {error}",
                    loaded.path.display()
                ))))
            }
        };
        Some(Ok(slice::FunctionSlice {
            module: loaded.name.clone(),
            file: loaded.path.clone(),
            target: format!("{}:{}", loaded.name, loaded.summary.scope_name(scope)),
            statements: slice::statements_holding(&source, &lines),
        }))
    }

    /// Compute target closures in order, `chunk` at a time (in parallel within a chunk), and
    /// hand each chunk to `sink` before computing the next.
    pub fn for_each_chunk<E>(
        &self,
        chunk: usize,
        sink: impl FnMut(Vec<spec::TargetSpec>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.map_chunks(chunk, |view| view.to_spec(), sink)
    }

    /// Like [`Analysis::for_each_chunk`], with `map` applied to each target on the worker
    /// threads too (rendering a target is as parallel as computing it). `map` gets the target
    /// borrowed from the analysis: writing JSON from it copies no string twice.
    pub fn map_chunks<T: Send, E>(
        &self,
        chunk: usize,
        map: impl Fn(spec::TargetView<'_>) -> T + Sync,
        sink: impl FnMut(Vec<T>) -> Result<(), E>,
    ) -> Result<(), E> {
        let never = |_: results::SharedBytes, _: &results::TargetOutcome, _: u32| {
            unreachable!("not reused")
        };
        self.map_chunks_inner(|| chunk, map, never, false, sink)
    }

    /// Like [`Analysis::map_chunks`], but a target whose output a stored result holds
    /// ([`prepare_or_reuse`]) is given to `stored` as that JSON, its outcome and its number
    /// there instead; and each chunk is `chunk()` targets long (asked before it is made), so
    /// that the caller can keep a chunk's rendered output to a size.
    pub fn map_chunks_reusing<T: Send, E>(
        &self,
        chunk: impl FnMut() -> usize,
        map: impl Fn(spec::TargetView<'_>) -> T + Sync,
        stored: impl Fn(results::SharedBytes, &results::TargetOutcome, u32) -> T,
        sink: impl FnMut(Vec<T>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.map_chunks_inner(chunk, map, stored, true, sink)
    }

    fn map_chunks_inner<T: Send, E>(
        &self,
        mut chunk: impl FnMut() -> usize,
        map: impl Fn(spec::TargetView<'_>) -> T + Sync,
        stored: impl Fn(results::SharedBytes, &results::TargetOutcome, u32) -> T,
        reuse: bool,
        mut sink: impl FnMut(Vec<T>) -> Result<(), E>,
    ) -> Result<(), E> {
        // Not made until a target is computed: none is when every target's output is reused.
        let memos = std::sync::OnceLock::new();
        let memos = || memos.get_or_init(|| closure::ModuleMemos::new(&self.project));
        let reused = self.reused.as_ref().filter(|_| reuse);
        let mut next = 0;
        while next < self.jobs.len() {
            let first = next;
            next += chunk().clamp(1, self.jobs.len() - first);
            let jobs = &self.jobs[first..next];
            // Read in order here: the stored output is one compressed stream.
            let mut copied: Vec<Option<T>> = (first..first + jobs.len())
                .map(|job| reused.and_then(|r| r.read(job)))
                .map(|read| read.map(|(bytes, outcome, old)| stored(bytes, outcome, old)))
                .collect();
            if copied.iter().all(Option::is_some) {
                // Nothing to compute: the pool's threads are not woken for nothing.
                sink(copied.into_iter().flatten().collect())?;
                continue;
            }
            let is_copied: Vec<bool> = copied.iter().map(Option::is_some).collect();
            let computed: Vec<Option<T>> = jobs
                .par_iter()
                .zip(is_copied)
                .map(|(&(id, scope), is_copied)| {
                    (!is_copied).then(|| {
                        map(closure::target_closure(
                            &self.project,
                            memos(),
                            id,
                            scope,
                            self.closure,
                        ))
                    })
                })
                .collect();
            let mapped = computed
                .into_iter()
                .zip(copied.iter_mut())
                .filter_map(|(computed, copy)| computed.or_else(|| copy.take()))
                .collect();
            sink(mapped)?;
        }
        Ok(())
    }
}

impl Reused {
    /// Job `job`'s stored output, outcome and target number, when it is reused and can be read.
    fn read(&self, job: usize) -> Option<(results::SharedBytes, &results::TargetOutcome, u32)> {
        let target = self.stored[job]? as usize;
        let (start, len) = self.index.spans[target];
        let mut output = self.output.lock().ok()?;
        let bytes = match output.as_mut()?.read_span(start, len) {
            Ok(bytes) => bytes,
            Err(_) => {
                *output = None; // computed from here on
                return None;
            }
        };
        let outcome = &self.index.outcomes[self.index.outcome_of[target] as usize];
        Some((bytes, outcome, target as u32))
    }
}

/// Locate the targets, parse every file they reach and resolve every import.
pub fn prepare(targets: &[String], options: &Options) -> Result<Analysis, AnalyzeError> {
    match prepare_or_reuse(targets, options, None)? {
        Prepared::Fresh(analysis) => Ok(*analysis),
        Prepared::Reused(_) => unreachable!("no results cache was given"),
    }
}

/// What [`prepare_or_reuse`] found.
pub enum Prepared {
    /// Nothing reusable: the analysis, ready to compute closures.
    Fresh(Box<Analysis>),
    /// The stored result of this same request, every input of which is unchanged.
    Reused(results::Hit),
}

/// Wall time since a start and the process's CPU time so far (user + system, all threads):
/// their ratio over a phase says how well it used the cores.
#[derive(Debug, Clone, Copy)]
pub struct Checkpoint {
    pub wall: std::time::Duration,
    pub cpu: Option<std::time::Duration>,
    /// Resident memory now, and its peak so far, in KiB (VmRSS, VmHWM).
    pub rss_kib: Option<u64>,
    pub peak_rss_kib: Option<u64>,
}

impl Checkpoint {
    pub fn since(started: std::time::Instant) -> Checkpoint {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |field: &str| -> Option<u64> {
            let line = status.lines().find(|line| line.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse().ok()
        };
        Checkpoint {
            wall: started.elapsed(),
            cpu: process_cpu_time(),
            rss_kib: kib("VmRSS:"),
            peak_rss_kib: kib("VmHWM:"),
        }
    }
}

/// utime + stime of /proc/self/stat (clock ticks, 100 per second on Linux); None elsewhere.
fn process_cpu_time() -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name, which may itself hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(std::time::Duration::from_millis(ticks * 10))
}

/// Like [`prepare`], but first look for a stored result of `reuse`'s request whose inputs
/// (environment, files, directories listed) are all unchanged; see [`results`].
pub fn prepare_or_reuse(
    targets: &[String],
    options: &Options,
    reuse: Option<(&results::ResultsCache, &results::RequestKey)>,
) -> Result<Prepared, AnalyzeError> {
    let started = std::time::Instant::now();
    // The environment does not depend on the targets: asked (and its distributions indexed,
    // ~50 ms on a scientific venv) while they are located, on the core that would wait.
    std::thread::scope(|scope| {
        let asking = scope.spawn(|| ask_environment(options));
        let environment = move || {
            asking.join().unwrap_or_else(|_| {
                Err(anyhow::anyhow!(
                    "asking the interpreter failed unexpectedly"
                ))
            })
        };
        prepare_located(targets, options, reuse, environment, started)
    })
}

fn prepare_located(
    targets: &[String],
    options: &Options,
    reuse: Option<(&results::ResultsCache, &results::RequestKey)>,
    environment: impl FnOnce() -> Environ,
    started: std::time::Instant,
) -> Result<Prepared, AnalyzeError> {
    let mut timings = Vec::new();
    let (extra_roots, located) = locate_all(targets, options)?;
    timings.push(("locate targets", Checkpoint::since(started)));
    let located_description = describe_located(&located);
    let located_paths: Vec<PathBuf> = located
        .iter()
        .flat_map(|target| target.files.iter().map(|file| file.path.clone()))
        .collect();
    let first = match reuse {
        Some((results, request)) => {
            let stored = (results, request, located_description.as_slice());
            match look_up(options, environment, stored, &mut timings, started)? {
                LookedUp::Hit(hit) => return Ok(Prepared::Reused(hit)),
                LookedUp::Miss(pending) => pending.parse(located_paths),
            }
        }
        None => {
            let cache = options.cache_dir.as_deref().map(SummaryCache::open);
            let cache = cache.map(Arc::new);
            timings.push(("open cache", Checkpoint::since(started)));
            let preparse = Preparse::start(located_paths, cache.clone());
            FirstParse {
                environment: environment(),
                // Nothing will be stored: the environment needs no key.
                env_key: None,
                cache,
                preparsed: FirstSummaries::Coming(preparse),
                miss: None,
            }
        }
    };
    timings.push(match &first.preparsed {
        FirstSummaries::Made(_) => {
            // Parsing is over (but for files first found while resolving): its arenas'
            // pages go back.
            scratch::release_all();
            (
                "parse (and ask the interpreter)",
                Checkpoint::since(started),
            )
        }
        FirstSummaries::Coming(_) => (
            "the interpreter's answer (files parsed meanwhile)",
            Checkpoint::since(started),
        ),
    });
    let roots = search_roots(&located, &extra_roots);
    load(
        first,
        located,
        &roots,
        located_description,
        options,
        timings,
        started,
    )
}

/// What preparing has once the files it parses first are parsed: the environment, those
/// summaries, and what a stored result that could not be reused still offers.
struct FirstParse {
    environment: Environ,
    env_key: Option<[u8; 32]>,
    cache: Option<Arc<SummaryCache>>,
    preparsed: FirstSummaries,
    miss: Option<Miss>,
}

/// The summaries of the files parsed first: all made (to restore a stored result's loaded
/// modules, which needs them all), or being made while loading takes them ([`Preparse`]).
enum FirstSummaries {
    Made(Vec<(PathBuf, project::Summarized)>),
    Coming(Arc<Preparse>),
}

/// A stored result that could not be reused: why, and what of it can be ([`Analysis::reused`],
/// its module table).
struct Miss {
    why: String,
    previous: Option<results::Previous>,
    table: Option<Vec<u8>>,
}

enum LookedUp {
    Hit(results::Hit),
    /// The parse still to do ([`PendingParse::parse`]).
    Miss(Box<PendingParse>),
}

/// A miss's environment and summary cache, before its files are parsed.
struct PendingParse {
    environment: (Interpreter, DistIndex),
    env_key: [u8; 32],
    cache: Option<Arc<SummaryCache>>,
    miss: Miss,
}

/// Ask the environment and look for a stored result of `request` (it needs only the
/// environment to be checked, so that comes first; the summary cache is opened only when the
/// result cannot be reused).
fn look_up(
    options: &Options,
    environment: impl FnOnce() -> Environ,
    (results, request, located_description): (
        &results::ResultsCache,
        &results::RequestKey,
        &[PathBuf],
    ),
    timings: &mut Vec<(&'static str, Checkpoint)>,
    started: std::time::Instant,
) -> Result<LookedUp, AnalyzeError> {
    let (interpreter, dists) = environment()?;
    let env_key = environment_key(&interpreter, &dists);
    let miss = match results.lookup(request, &env_key, located_description) {
        Ok(hit) => return Ok(LookedUp::Hit(hit)),
        Err(miss) => miss,
    };
    timings.push(("look for a stored result", Checkpoint::since(started)));
    let cache = options.cache_dir.as_deref().map(SummaryCache::open);
    let cache = cache.map(Arc::new);
    timings.push(("open cache", Checkpoint::since(started)));
    let previous = miss.previous.map(|previous| *previous);
    let table = previous.as_ref().and_then(results::Previous::module_table);
    let pending = PendingParse {
        environment: (interpreter, dists),
        env_key,
        cache,
        miss: Miss {
            why: miss.why,
            previous,
            table,
        },
    };
    Ok(LookedUp::Miss(Box::new(pending)))
}

impl PendingParse {
    /// Parse what a miss needs first: the located files, or every file of the stored result
    /// when its loaded modules may be restored (their summaries found by stamp and key). With
    /// no stored result, loading starts while the located files are parsed.
    fn parse(self, located_paths: Vec<PathBuf>) -> FirstParse {
        let previous = self.miss.previous.as_ref();
        let preparsed = match previous {
            None => FirstSummaries::Coming(Preparse::start(located_paths, self.cache.clone())),
            Some(_) => {
                let known = known_summaries(previous);
                let restoring = previous.filter(|_| self.miss.table.is_some());
                let paths = files_to_parse(&located_paths, restoring);
                FirstSummaries::Made(parse_files(&paths, self.cache.as_deref(), Some(&known)))
            }
        };
        FirstParse {
            environment: Ok(self.environment),
            env_key: Some(self.env_key),
            cache: self.cache,
            preparsed,
            miss: Some(self.miss),
        }
    }
}

/// Load every module the targets reach (or restore a stored result's loaded modules), list
/// the closures to compute, and follow installed code's imports.
fn load(
    first: FirstParse,
    located: Vec<Located>,
    roots: &[PathBuf],
    located_description: Vec<PathBuf>,
    options: &Options,
    mut timings: Vec<(&'static str, Checkpoint)>,
    started: std::time::Instant,
) -> Result<Prepared, AnalyzeError> {
    let FirstParse {
        environment,
        env_key,
        cache,
        preparsed,
        miss,
    } = first;
    let (mut results_miss, previous, table) = match miss {
        Some(miss) => (Some(miss.why), miss.previous, miss.table),
        None => (None, None, None),
    };
    let (interpreter, dists) = environment?;
    let mut project = Project::new(interpreter, dists, roots, cache);
    let restoration = match (&table, &previous, &preparsed) {
        (Some(table), Some(previous), FirstSummaries::Made(files)) => {
            restore_loaded(&mut project, table, files, previous)
        }
        _ => Restoration::Refused,
    };
    let restored = restoration != Restoration::Refused;
    if !restored {
        match preparsed {
            FirstSummaries::Made(made) => project.set_preparsed(made),
            FirstSummaries::Coming(preparse) => project.set_preparsing(preparse),
        }
    }
    // A table restored as it was is stored again as it was, not made and written anew.
    let stored_table = table.filter(|_| {
        restoration
            == Restoration::Restored {
                table_unchanged: true,
            }
    });
    project.progress = options.progress.clone();

    // (module, scope) pairs to compute; the closures themselves run in parallel below.
    let mut jobs: Vec<(u32, Option<u32>)> = Vec::new();
    for target in located {
        jobs.extend(target_jobs(&mut project, target)?);
    }
    let met = project.installed_modules_met();
    let loading_warnings = project.warnings.len();
    project.finish_loading();
    scratch::release_all();
    timings.push(match restored {
        true => ("restore the loaded modules", Checkpoint::since(started)),
        false => ("resolve imports", Checkpoint::since(started)),
    });
    // After the resolver's tables are freed: the peak stays where loading put it.
    let met_names = met.iter().map(|module| module.name.clone()).collect();
    let reused =
        follow_installed_imports_and_reuse(&mut project, &jobs, previous, met_names, options);
    timings.push((
        "follow installed code's imports",
        Checkpoint::since(started),
    ));
    // Only a result to store needs the located files' description (~2 MiB on a whole
    // site-packages, held while every closure is computed otherwise).
    let located_description = match env_key {
        Some(_) => located_description,
        None => Vec::new(),
    };
    if let (Some(why), Some(reused)) = (&mut results_miss, &reused) {
        let count = reused.stored.iter().flatten().count();
        *why = format!(
            "{why}; the stored output of {count} of {} targets reused",
            jobs.len()
        );
        if restored {
            why.push_str(", its loaded modules restored");
        }
    }
    Ok(Prepared::Fresh(Box::new(Analysis {
        project,
        jobs,
        timings,
        env_key,
        located: located_description,
        results_miss,
        closure: options.closure,
        reused,
        environment: options.environment.clone(),
        met,
        loading_warnings,
        stored_table,
    })))
}

/// The files whose summaries preparing needs first: the located ones, or, to restore the
/// loaded modules of `restoring`, every file it read.
fn files_to_parse<'a>(
    located: &'a [PathBuf],
    restoring: Option<&results::Previous>,
) -> std::borrow::Cow<'a, [PathBuf]> {
    match restoring {
        Some(previous) => previous
            .files
            .iter()
            .map(|(path, _)| path.clone())
            .collect(),
        None => std::borrow::Cow::Borrowed(located),
    }
}

/// Each of `paths` with its summary (from the cache, or by the stamp and key `known` from a
/// stored result, or parsed), in parallel.
fn parse_files(
    paths: &[PathBuf],
    cache: Option<&SummaryCache>,
    known: Option<&HashMap<&Path, (results::Stamp, cache::CacheKey)>>,
) -> Vec<(PathBuf, project::Summarized)> {
    paths
        .par_iter()
        .map(|path| {
            let known = known.and_then(|known| known.get(path.as_path()));
            let summarized = project::recall_or_summarize(path, cache, known);
            (path.clone(), summarized)
        })
        .collect()
}

/// Take the stored result's loaded modules (its [`module_table::ModuleTable`], as stored)
/// when every file changed since still writes the same imports; `files` are its files with
/// their summaries now. When refused, loading resolves every import.
fn restore_loaded(
    project: &mut Project,
    table: &[u8],
    files: &[(PathBuf, project::Summarized)],
    previous: &results::Previous,
) -> Restoration {
    let Some(table) = module_table::ModuleTable::from_bytes(table) else {
        return Restoration::Refused;
    };
    if files.len() != previous.files.len() {
        return Restoration::Refused;
    }
    let changed: Vec<bool> = (files.iter().zip(&previous.files))
        .map(|((_, (_, _, now, _)), (_, then))| now.is_none() || now != then)
        .collect();
    project.restore(table, files, &changed, previous.dirs.clone())
}

/// The files of a stored result with their stamps and summary keys then: the unchanged ones
/// need not be read again ([`project::recall_or_summarize`]).
fn known_summaries(
    previous: Option<&results::Previous>,
) -> HashMap<&Path, (results::Stamp, cache::CacheKey)> {
    let Some(previous) = previous else {
        return HashMap::new();
    };
    (previous.files.iter().zip(&previous.keys))
        .filter_map(|((path, stamp), key)| Some((path.as_path(), ((*stamp)?, (*key)?))))
        .collect()
}

/// Up to this many targets, installed code's imports are followed only from the installed
/// modules their closures list ([`installed_roots`]).
const FOLLOW_FROM_CLOSURES_UP_TO: usize = 16;

/// The installed modules whose imports to follow: those a closure can list. For a few targets
/// these are found by computing their closures once without the followed imports (which add
/// distributions to a closure, never modules): a function whose file imports pandas and
/// scikit-learn for other functions then pays nothing for their import graphs (tens of ms with
/// their edges kept, seconds the first time in an environment). For more, every installed
/// module the loaded files import (`met`).
fn installed_roots(
    project: &Project,
    jobs: &[(u32, Option<u32>)],
    kind: spec::ClosureKind,
    met: Vec<String>,
) -> Vec<String> {
    if jobs.len() > FOLLOW_FROM_CLOSURES_UP_TO || met.is_empty() {
        return met;
    }
    let memos = closure::ModuleMemos::new(project);
    let mut listed = std::collections::BTreeSet::new();
    for &(module, scope) in jobs {
        let view = closure::target_closure(project, &memos, module, scope, kind);
        let modules = view.modules.iter().chain(&view.engine.modules);
        listed.extend(
            modules
                .filter(|m| m.kind == spec::ModuleKind::ThirdParty)
                .map(|m| m.name.to_string()),
        );
    }
    listed.into_iter().collect()
}

/// Mark as changed, beside the `changed` modules, every module that can list an installed
/// module whose import reaches a changed file: its closures' undeclared distributions
/// ([`installed_imports`]) may differ, though no module it reads changed.
fn mark_installed_importers(project: &Project, changed: &mut [bool]) {
    let modules = &project.modules;
    let changed_paths: std::collections::HashSet<&Path> = (modules.iter().zip(changed.iter()))
        .filter(|(_, changed)| **changed)
        .map(|(m, _)| m.path.as_path())
        .collect();
    if changed_paths.is_empty() {
        return;
    }
    let graph = &project.installed_imports;
    let reaching: std::collections::HashSet<&str> = graph
        .reaching_changed(|path| changed_paths.contains(path))
        .into_iter()
        .collect();
    if reaching.is_empty() {
        return;
    }
    for (module, changed) in modules.iter().zip(changed.iter_mut()) {
        let imported = (module.targets.iter().flat_map(|targets| targets.iter()))
            .filter_map(|target| match target {
                project::EdgeTarget::ThirdParty(installed) => Some(installed),
                _ => None,
            })
            .chain(&module.installed);
        *changed |= imported
            .into_iter()
            .any(|installed| reaching.contains(installed.name.as_str()));
    }
}

/// Follow installed code's imports ([`installed_imports`]), and find the targets whose stored
/// output (of `previous`, a result whose only changed inputs are source files) still holds.
/// Where no changed file is installed code, the targets to compute are known first, and for
/// a few of them only what their closures list is followed ([`installed_roots`]): one file
/// edited in a site-packages tree then follows nothing for an edit that imports nothing
/// installed.
fn follow_installed_imports_and_reuse(
    project: &mut Project,
    jobs: &[(u32, Option<u32>)],
    previous: Option<results::Previous>,
    met: Vec<String>,
    options: &Options,
) -> Option<Reused> {
    let imports_cache = options.cache_dir.as_deref();
    let imports_cache = imports_cache.map(|dir| dir.join(installed_imports::DIR));
    let plan = previous.and_then(|previous| ReusePlan::new(project, previous));
    let installed_changed = plan.as_ref().is_some_and(|p| p.installed_changed(project));
    let stored_before = (plan.as_ref())
        .filter(|_| !installed_changed)
        .map(|plan| plan.stored(project, jobs));
    let roots = match &stored_before {
        // Marking what reaches the changed installed files needs every one's imports.
        _ if installed_changed => met,
        Some(stored) => {
            let to_compute: Vec<(u32, Option<u32>)> = (jobs.iter().zip(stored))
                .filter(|(_, stored)| stored.is_none())
                .map(|(&job, _)| job)
                .collect();
            installed_roots(project, &to_compute, options.closure, met)
        }
        None => installed_roots(project, jobs, options.closure, met),
    };
    project.follow_installed_imports(roots, imports_cache);
    let (plan, stored) = match (plan?, stored_before) {
        (plan, Some(stored)) => (plan, stored),
        (plan, None) => {
            let plan = plan.marked(project);
            let stored = plan.stored(project, jobs);
            (plan, stored)
        }
    };
    plan.into_reused(stored)
}

/// A stored result that loaded the same files in the same order, and which of them changed
/// since (or whose closure is now shared where it was not, or the reverse).
struct ReusePlan {
    previous: results::Previous,
    index: results::TargetIndex,
    changed: Vec<bool>,
}

impl ReusePlan {
    fn new(project: &Project, previous: results::Previous) -> Option<ReusePlan> {
        let modules = &project.modules;
        let same_files = previous.files.len() == modules.len()
            && (previous.files.iter().zip(modules)).all(|((path, _), m)| *path == m.path);
        if !same_files {
            return None;
        }
        let index = previous.index()?;
        let imported = reuse::imported_flags(project);
        if index.imported.len() != modules.len() {
            return None;
        }
        let changed: Vec<bool> = (previous.files.iter().zip(modules))
            .zip(index.imported.iter().zip(&imported))
            .map(|(((_, stamp), m), (then, now))| {
                stamp.is_none() || *stamp != m.stamp || then != now
            })
            .collect();
        Some(ReusePlan {
            previous,
            index,
            changed,
        })
    }

    /// Whether a changed file belongs to an installed distribution: what installed code
    /// imports may then differ too.
    fn installed_changed(&self, project: &Project) -> bool {
        (project.modules.iter().zip(&self.changed))
            .any(|(module, &changed)| changed && project.dists.owns(&module.path))
    }

    /// With the modules that list installed code reaching a changed file marked changed too.
    fn marked(mut self, project: &Project) -> ReusePlan {
        mark_installed_importers(project, &mut self.changed);
        self
    }

    /// Per job, its target's number in the stored index when its output still holds: its
    /// module reaches no changed module ([`reuse::affected`]).
    fn stored(&self, project: &Project, jobs: &[(u32, Option<u32>)]) -> Vec<Option<u32>> {
        let affected = reuse::affected(project, &self.changed);
        let by_job: std::collections::HashMap<(u32, u32), u32> =
            (self.index.jobs.iter().copied()).zip(0..).collect();
        (jobs.iter())
            .map(|&(module, scope)| {
                let key = (module, scope.unwrap_or(results::NO_SCOPE));
                (!affected[module as usize]).then(|| by_job.get(&key).copied())?
            })
            .collect()
    }

    fn into_reused(self, stored: Vec<Option<u32>>) -> Option<Reused> {
        let output = self.previous.output(&self.index).ok()?;
        let frames = self.previous.frames(&self.index).ok();
        Some(Reused {
            stored,
            installed: self.previous.installed,
            index: self.index,
            output: std::sync::Mutex::new(Some(output)),
            frames: std::sync::Mutex::new(frames),
        })
    }
}

/// Every target located, and the `--root` directories as found on disk.
fn locate_all(
    targets: &[String],
    options: &Options,
) -> Result<(Vec<PathBuf>, Vec<Located>), AnalyzeError> {
    let extra_roots: Vec<PathBuf> = options
        .roots
        .iter()
        .map(|r| r.canonicalize().unwrap_or_else(|_| r.clone()))
        .collect();
    let exclude = exclusions(&options.exclude)?;
    let located = targets
        .iter()
        .map(|target| locate(target, &extra_roots, &exclude, options))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((extra_roots, located))
}

/// The target interpreter's answer and its installed distributions.
fn ask_environment(options: &Options) -> anyhow::Result<(Interpreter, DistIndex)> {
    let cache_root = options.environment_cache.as_deref();
    let interpreter = ask_interpreter(options, cache_root)?;
    let dists = installed_distributions(&interpreter.site_dirs(), &interpreter.prefix, cache_root);
    Ok((interpreter, dists))
}

fn ask_interpreter(options: &Options, cache_root: Option<&Path>) -> anyhow::Result<Interpreter> {
    let mut interpreter = match &options.environment {
        Environment::Python(python) => Interpreter::query(python, cache_root)?,
        Environment::Prefix(prefix) => Interpreter::for_prefix(prefix, cache_root)?,
    };
    let extra = options.extra_site_dirs.iter();
    let extra = extra.map(|dir| dir.canonicalize().unwrap_or_else(|_| dir.clone()));
    // A `--root` holds the user's own source, even where PYTHONPATH also names it (as a
    // test suite run from a checkout does): not installed distributions (an sdist's egg-info).
    // A root that is one of the interpreter's own site directories stays one.
    let canonical = |dir: &Path| dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let on_pythonpath: Vec<PathBuf> = std::env::var_os("PYTHONPATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|d| canonical(&d))
                .collect()
        })
        .unwrap_or_default();
    let roots: Vec<PathBuf> = (options.roots.iter())
        .map(|root| canonical(root))
        .filter(|root| on_pythonpath.contains(root))
        .collect();
    let own = std::mem::take(&mut interpreter.path);
    let own = own.into_iter().filter(|dir| !roots.contains(dir));
    interpreter.path = extra.chain(own).collect();
    Ok(interpreter)
}

/// The distributions installed in `site_dirs` and `prefix`, from lfm's cache directory
/// `cache_root` while it holds.
pub fn installed_distributions(
    site_dirs: &[PathBuf],
    prefix: &Path,
    cache_root: Option<&Path>,
) -> DistIndex {
    let cache = cache_root.map(|dir| dir.join(dists_cache::DIR));
    dists_cache::build_cached(site_dirs, Some(prefix), cache.as_deref())
}

type Environ = anyhow::Result<(Interpreter, DistIndex)>;

/// Where local modules are found: each target's roots, then `--root`s, each once.
fn search_roots(located: &[Located], extra_roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    let all = located
        .iter()
        .flat_map(|t| t.roots.iter())
        .chain(extra_roots);
    for root in all {
        if !roots.contains(root) {
            roots.push(root.clone());
        }
    }
    roots
}

/// A located target's (module, scope) pairs: the named function or class, or a whole module
/// and each of its functions and methods.
fn target_jobs(
    project: &mut Project,
    target: Located,
) -> Result<Vec<(u32, Option<u32>)>, AnalyzeError> {
    let mut jobs = Vec::new();
    for id in project.load(target.files) {
        let summary = project.modules[id as usize].summary.clone();
        let Some(qualname) = &target.qualname else {
            jobs.push((id, None));
            for (scope_id, scope) in summary.scopes.iter().enumerate() {
                let parent_kind = summary.scopes[scope.parent as usize].kind;
                if scope.kind == ScopeKind::Function
                    && scope_id != 0
                    && matches!(parent_kind, ScopeKind::Module | ScopeKind::Class)
                {
                    jobs.push((id, Some(scope_id as u32)));
                }
            }
            continue;
        };
        let definitions = || {
            (0..summary.scopes.len() as u32).filter(|&id| {
                matches!(
                    summary.scopes[id as usize].kind,
                    ScopeKind::Function | ScopeKind::Class
                )
            })
        };
        let Some(scope) = definitions().find(|&id| summary.scope_name(id) == qualname) else {
            let mut available: Vec<&str> = definitions()
                .map(|id| summary.scope_name(id))
                .take(20)
                .collect();
            available.sort();
            let defined = if available.is_empty() {
                "nothing".to_string()
            } else {
                available.join(", ")
            };
            let file = project.display_path(&project.modules[id as usize].path);
            return Err(not_found(
                &target.text,
                &format!(
                    "no function or class named {qualname:?} in {file} (defined there: {defined})"
                ),
            ));
        };
        jobs.push((id, Some(scope)));
    }
    Ok(jobs)
}

/// Find a target's files. Needs no interpreter: a dotted target must name a source file, so
/// extension suffixes never matter here.
fn locate(
    text: &str,
    extra_roots: &[PathBuf],
    exclude: &globset::GlobSet,
    options: &Options,
) -> Result<Located, AnalyzeError> {
    let (location, qualname) = split_target(text);
    // A relative file or directory is looked for in the working directory, then the roots.
    let found_under_root = (!Path::new(location).is_absolute() && !Path::new(location).exists())
        .then(|| {
            extra_roots
                .iter()
                .map(|root| root.join(location))
                .find(|candidate| candidate.exists())
        })
        .flatten();
    let path = found_under_root.as_deref().unwrap_or(Path::new(location));
    if path.is_file() {
        return locate_file(text, path, qualname);
    }
    if path.is_dir() {
        return locate_dir(text, path, qualname, exclude);
    }
    let looks_dotted = !location.is_empty()
        && location
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'));
    if looks_dotted {
        return locate_dotted(text, location, qualname, extra_roots, options);
    }
    Err(not_found(text, "no such file or directory"))
}

fn locate_file(text: &str, path: &Path, qualname: Option<&str>) -> Result<Located, AnalyzeError> {
    let file = path
        .canonicalize()
        .map_err(|e| not_found(text, &e.to_string()))?;
    let package_root = package_root(&file);
    let (name, is_package) = module_name_for(&package_root, &file)
        .ok_or_else(|| not_found(text, "not a Python module file name"))?;
    let own_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut roots = vec![own_dir];
    if !roots.contains(&package_root) {
        roots.push(package_root);
    }
    Ok(Located {
        files: vec![PendingModule {
            path: file,
            name,
            is_package,
        }],
        qualname: qualname.map(str::to_string),
        roots,
        text: text.to_string(),
    })
}

fn locate_dir(
    text: &str,
    path: &Path,
    qualname: Option<&str>,
    exclude: &globset::GlobSet,
) -> Result<Located, AnalyzeError> {
    if qualname.is_some() {
        return Err(not_found(
            text,
            "a directory target cannot name a function; name a file or module",
        ));
    }
    let dir = path
        .canonicalize()
        .map_err(|e| not_found(text, &e.to_string()))?;
    let root = if dir.join("__init__.py").exists() {
        package_root(&dir.join("__init__.py"))
    } else {
        dir.clone()
    };
    let files = python_files(&dir, &root, exclude);
    Ok(Located {
        files,
        qualname: None,
        roots: vec![root],
        text: text.to_string(),
    })
}

/// `pkg.mod`: local source first, else where the target interpreter would import it from.
fn locate_dotted(
    text: &str,
    location: &str,
    qualname: Option<&str>,
    extra_roots: &[PathBuf],
    options: &Options,
) -> Result<Located, AnalyzeError> {
    let mut roots: Vec<PathBuf> = extra_roots.to_vec();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    if let Some(found) = locate_module(location, &roots, &[]) {
        return Ok(found.into_located(qualname, text));
    }
    // Not local: where the target interpreter would import it from (its sys.path).
    let cache_root = options.environment_cache.as_deref();
    let interpreter = ask_interpreter(options, cache_root).map_err(AnalyzeError::Other)?;
    let mut search = interpreter.site_dirs();
    search.extend(interpreter.stdlib_dirs.iter().cloned());
    if let Some(found) = locate_module(location, &[], &search) {
        return Ok(found.into_located(qualname, text));
    }
    let reason = format!("no file or directory {location:?}, and no module {location:?} under the source roots (the current directory and --root) nor on the sys.path of {}", interpreter.executable.display());
    Err(not_found(text, &reason))
}

/// A dotted module's source file, found on `roots` (local source) or `site` (sys.path).
struct FoundModule {
    path: PathBuf,
    name: String,
    is_package: bool,
    root: PathBuf,
}

impl FoundModule {
    fn into_located(self, qualname: Option<&str>, text: &str) -> Located {
        Located {
            files: vec![PendingModule {
                path: self.path,
                name: self.name,
                is_package: self.is_package,
            }],
            qualname: qualname.map(str::to_string),
            roots: vec![self.root],
            text: text.to_string(),
        }
    }
}

fn locate_module(name: &str, roots: &[PathBuf], site: &[PathBuf]) -> Option<FoundModule> {
    let mut resolver = Resolver::new(
        roots,
        site,
        &[],
        Default::default(),
        Default::default(),
        Vec::new(),
    );
    match resolver.resolve(name)? {
        Location::File {
            path,
            is_package,
            root,
            ..
        } if path.is_file() => Some(FoundModule {
            path,
            name: name.to_string(),
            is_package,
            root: root.to_path_buf(),
        }),
        _ => None,
    }
}

/// The located targets as compared by the results cache: files, the names they are imported
/// by (an `__init__.py` added above a file renames it) and the source roots.
fn describe_located(located: &[Located]) -> Vec<PathBuf> {
    let mut description = Vec::new();
    for target in located {
        for file in &target.files {
            description.push(file.path.clone());
            description.push(PathBuf::from(format!("{}:{}", file.name, file.is_package)));
        }
        description.extend(target.roots.iter().cloned());
    }
    description
}

/// A hash of everything the environment contributes: the interpreter's answer and every
/// installed distribution's metadata and files. Independent of hash-set and directory order.
fn environment_key(interpreter: &Interpreter, dists: &DistIndex) -> [u8; 32] {
    fn field(hasher: &mut blake3::Hasher, bytes: &[u8]) {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    let mut hasher = blake3::Hasher::new();
    let mut answer = serde_json::to_value(interpreter).unwrap_or_default();
    for set in ["stdlib_module_names", "builtin_module_names"] {
        if let Some(serde_json::Value::Array(names)) = answer.get_mut(set) {
            names.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
    }
    field(&mut hasher, answer.to_string().as_bytes());
    // Each distribution's files sorted: a stored index keeps them in path order, not RECORD's.
    let files = dists.sorted_files();
    let mut per_dist: Vec<[u8; 32]> = (dists.dists.iter().zip(&files))
        .map(|(dist, files)| {
            let mut hasher = blake3::Hasher::new();
            field(&mut hasher, dist.name.as_bytes());
            field(&mut hasher, dist.version.as_bytes());
            field(
                &mut hasher,
                dist.metadata_path.as_os_str().as_encoded_bytes(),
            );
            field(
                &mut hasher,
                dist.conda_name.as_deref().unwrap_or("").as_bytes(),
            );
            for requirement in &dist.requires {
                field(&mut hasher, requirement.as_bytes());
            }
            for file in files {
                field(&mut hasher, file.as_encoded_bytes());
            }
            *hasher.finalize().as_bytes()
        })
        .collect();
    per_dist.sort_unstable();
    for dist in &per_dist {
        hasher.update(dist);
    }
    let mut problems: Vec<&String> = dists.problems.iter().collect();
    problems.sort();
    for problem in problems {
        field(&mut hasher, problem.as_bytes());
    }
    *hasher.finalize().as_bytes()
}

fn not_found(target: &str, reason: &str) -> AnalyzeError {
    AnalyzeError::TargetNotFound {
        target: target.to_string(),
        reason: reason.to_string(),
    }
}

/// `file.py:Class.method` -> (`file.py`, `Class.method`); a plain path or module has no qualname.
fn split_target(text: &str) -> (&str, Option<&str>) {
    match text.rsplit_once(':') {
        Some((location, qualname))
            if !qualname.is_empty() && !qualname.contains('/') && !location.is_empty() =>
        {
            (location, Some(qualname))
        }
        _ => (text, None),
    }
}

/// The directory a file's dotted name starts from: above the outermost package holding it.
fn package_root(file: &Path) -> PathBuf {
    let mut dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    while dir.join("__init__.py").exists() {
        match dir.parent() {
            Some(parent) => dir = parent.to_path_buf(),
            None => break,
        }
    }
    dir
}

/// The `__init__.py` files [`package_root`] looks for above `file`, the first missing one
/// included: adding or removing one renames the module.
fn package_markers(file: &Path) -> Vec<PathBuf> {
    let mut markers = Vec::new();
    for dir in file.ancestors().skip(1) {
        let marker = dir.join("__init__.py");
        let present = marker.exists();
        markers.push(marker);
        if !present {
            break;
        }
    }
    markers
}

/// `--exclude` globs, gitignore-like: a pattern without `/` matches a name at any depth, a
/// trailing `/` is allowed on directories, and a directory matched excludes what is under it.
fn exclusions(patterns: &[String]) -> Result<globset::GlobSet, AnalyzeError> {
    let mut set = globset::GlobSetBuilder::new();
    for pattern in patterns {
        let trimmed = pattern.trim_end_matches('/');
        let anchored = if trimmed.contains('/') {
            trimmed.trim_start_matches('/').to_string()
        } else {
            format!("**/{trimmed}")
        };
        for glob in [anchored.clone(), format!("{anchored}/**")] {
            let glob = globset::Glob::new(&glob).map_err(|error| {
                AnalyzeError::Other(anyhow::anyhow!("--exclude {pattern:?}: {error}"))
            })?;
            set.add(glob);
        }
    }
    set.build()
        .map_err(|error| AnalyzeError::Other(anyhow::anyhow!("--exclude: {error}")))
}

fn python_files(dir: &Path, root: &Path, exclude: &globset::GlobSet) -> Vec<PendingModule> {
    let excluded = |path: &Path| {
        !exclude.is_empty()
            && path
                .strip_prefix(dir)
                .is_ok_and(|rel| exclude.is_match(rel))
    };
    let walker = walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|entry| {
            if entry.depth() == 0 {
                return true;
            }
            if excluded(entry.path()) {
                return false;
            }
            if !entry.file_type().is_dir() {
                return true;
            }
            let name = entry.file_name().to_string_lossy();
            !SKIPPED_DIRS.contains(&name.as_ref()) && !entry.path().join("pyvenv.cfg").exists()
        });
    walker
        .filter_map(Result::ok)
        .filter(|entry| {
            entry.file_type().is_file() && entry.path().extension().is_some_and(|e| e == "py")
        })
        .filter_map(|entry| {
            let path = entry.into_path();
            let (name, is_package) = module_name_for(root, &path)?;
            Some(PendingModule {
                path,
                name,
                is_package,
            })
        })
        .collect()
}

/// The dotted name of a module file and the directory it imports from (above its outermost
/// package): how `lfm analyze` names a file target, for `lfm call` and `lfm serve` to agree.
pub fn module_of_file(file: &Path) -> Option<(String, PathBuf)> {
    let root = package_root(file);
    let (name, _) = module_name_for(&root, file)?;
    Some((name, root))
}

/// A dotted module's source file on the first of `roots` that has it, found as `lfm analyze`
/// finds local code: (the root, the `.py` file).
pub fn find_source_module(name: &str, roots: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    let found = locate_module(name, roots, &[])?;
    let source = found.path.extension().is_some_and(|e| e == "py");
    source.then_some((found.root, found.path))
}
