//! `lfm call`: one Python function in a fresh interpreter, under the monitor of `lfm run`.
//!
//! The function's slice (the module-level statements it needs, from the analyzer) is run by
//! the embedded Python runner; the outcome comes back in files the runner writes, and the
//! Report gains `function`, `result` and, when the function raised, `exit.exception`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use lfm_analyzer::spec::{ModuleKind, TargetKind};
use lfm_analyzer::{prepare, Analysis, Environment, Options};
use lfm_monitor::imports::{ClosureModule, StaticClosure};
use lfm_monitor::outcome::{self, Outcome};
use lfm_monitor::report::{ExitKind, FunctionCall, Imports, Report};

use crate::cli::{CallArgs, InterpreterArgs};
use crate::commands::run::{self, EXIT_LIMITS, EXIT_MONITOR_FAILED, EXIT_USAGE};

pub const EXIT_EXCEPTION: i32 = 1;
pub const EXIT_TARGET_NOT_FOUND: i32 = 3;
pub const EXIT_RESULT_NOT_JSON: i32 = 4;
pub const EXIT_NO_OUTCOME: i32 = 71;

/// Where the function lives, found as Python would import it.
#[derive(Debug)]
pub struct Located {
    /// Dotted module name (`proj.sub.tasks`).
    pub module: String,
    /// The directory that goes on sys.path for `module` to import.
    pub root: Option<PathBuf>,
    /// The module's source file, when found.
    pub file: Option<PathBuf>,
    pub qualname: String,
}

/// How the interpreter is started: a pack's `run` script, an env's python, or a python.
pub struct Interpreter {
    pub argv: Vec<OsString>,
    /// Where local modules are looked up: a pack's `app/`, else the working directory.
    pub source_roots: Vec<PathBuf>,
    pub analysis_env: Environment,
    /// `--root` directories.
    pub roots: Vec<PathBuf>,
}

pub fn call(args: CallArgs) -> i32 {
    match prepare_and_call(&args) {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("error: {message}");
            code
        }
    }
}

pub type Failure = (i32, String);

fn prepare_and_call(args: &CallArgs) -> Result<i32, Failure> {
    let (limits, grace) =
        run::parse_limits(&args.monitor).map_err(|e| (EXIT_USAGE, e.to_string()))?;
    let arguments = Arguments::from_args(args)?;
    let interpreter = interpreter(&args.interpreter)?;
    let located = locate(&args.target, &interpreter.source_roots, &interpreter.roots)?;
    let (slice, analysis) = if args.import_module {
        (None, None)
    } else {
        let (ranges, analysis) = sliced(&located, &interpreter)?;
        (Some(ranges), Some(analysis))
    };
    if args.show_slice {
        return show_slice(&located, slice.as_deref().unwrap_or_default());
    }
    run::check_report_writable(&args.monitor).map_err(|code| (code, "report".into()))?;
    let cache = args
        .cache_dir
        .clone()
        .unwrap_or_else(lfm_monitor::runner::default_cache);
    let runner = lfm_monitor::runner::install(&cache).map_err(failed)?;
    let files = CallFiles::create(&cache).map_err(failed)?;
    let request = request_json(&located, slice.as_deref(), &arguments, &files, args)?;
    std::fs::write(&files.request, request.to_string()).map_err(|e| failed(e.into()))?;
    let mut command = interpreter.argv.clone();
    command.extend([runner.into_os_string(), "call".into()]);
    command.push(files.request.clone().into_os_string());
    let mut options = run::run_options(&args.monitor, command, limits, grace);
    // A call's category is its function's name unless given: its history sizes the next.
    options
        .category
        .get_or_insert_with(|| located.qualname.clone());
    let function = FunctionCall {
        target: args.target.clone(),
        mode: if args.import_module {
            "import"
        } else {
            "slice"
        }
        .into(),
    };
    let mut annotate = |report: &mut Report| {
        report.function = Some(function.clone());
        report.imports = lfm_monitor::imports::read(&files.imports, &[])
            .map(|imports| with_distributions(imports, analysis.as_ref(), &located, &interpreter));
        // A retry (--auto) logs afresh.
        let _ = std::fs::remove_file(&files.imports);
    };
    let mut report =
        run::run_sized(&args.monitor, options, &mut annotate).map_err(|failure| match failure {
            run::Failure::Usage(message) => (EXIT_USAGE, message),
            run::Failure::Run(lfm_monitor::RunError::Gpu(error)) => {
                (run::gpu_exit_code(&error), error.to_string())
            }
            run::Failure::Run(error) => (EXIT_MONITOR_FAILED, error.to_string()),
        })?;
    let code = conclude(&mut report, &files, args);
    if let Err(error) = run::write_report(&args.monitor, &report) {
        return Err((EXIT_MONITOR_FAILED, format!("writing the report: {error}")));
    }
    if !args.monitor.quiet {
        eprintln!("{}", report.summary_line());
    }
    Ok(code)
}

/// Name the distribution of every imported module from the environment's file index, and
/// compare the imports with the function's static closure.
fn with_distributions(
    mut imports: Imports,
    analysis: Option<&Analysis>,
    located: &Located,
    interpreter: &Interpreter,
) -> Imports {
    let Some(analysis) = analysis else {
        return imports;
    };
    for module in &mut imports.modules {
        module.distribution = module
            .file
            .as_deref()
            .and_then(|f| analysis.distribution_of(Path::new(f)));
    }
    let closure = static_closure(analysis, located, interpreter);
    lfm_monitor::imports::compare(&mut imports, Arc::new(closure));
    imports
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

pub fn failed(error: anyhow::Error) -> Failure {
    (EXIT_MONITOR_FAILED, format!("{error:#}"))
}

/// The arguments, as the runner reads them.
enum Arguments {
    Json(serde_json::Value),
    PickleFile(PathBuf),
}

impl Arguments {
    fn from_args(args: &CallArgs) -> Result<Arguments, Failure> {
        if let Some(file) = &args.args_file {
            let absolute = std::path::absolute(file).map_err(|e| (EXIT_USAGE, e.to_string()))?;
            if !absolute.is_file() {
                return Err((
                    EXIT_USAGE,
                    format!("--args-file {}: not a file", file.display()),
                ));
            }
            return Ok(Arguments::PickleFile(absolute));
        }
        let positional = parse_json("--args", args.args.as_deref().unwrap_or("[]"))?;
        let keywords = parse_json("--kwargs", args.kwargs.as_deref().unwrap_or("{}"))?;
        if !positional.is_array() {
            return Err((
                EXIT_USAGE,
                "--args must be a JSON list, e.g. '[3, \"x\"]'".into(),
            ));
        }
        if !keywords.is_object() {
            return Err((
                EXIT_USAGE,
                "--kwargs must be a JSON object, e.g. '{\"alpha\": 0.1}'".into(),
            ));
        }
        Ok(Arguments::Json(serde_json::json!([positional, keywords])))
    }

    fn to_json(&self) -> serde_json::Value {
        match self {
            Arguments::Json(value) => serde_json::json!({ "json": value }),
            Arguments::PickleFile(path) => serde_json::json!({ "pickle_file": path }),
        }
    }
}

fn parse_json(flag: &str, text: &str) -> Result<serde_json::Value, Failure> {
    serde_json::from_str(text).map_err(|e| (EXIT_USAGE, format!("{flag}: not JSON: {e}")))
}

pub fn interpreter(args: &InterpreterArgs) -> Result<Interpreter, Failure> {
    if let Some(pack) = &args.pack {
        let options = lfm_packer::UnpackOptions::new(lfm_packer::UnpackOptions::default_cache());
        let root = lfm_packer::unpack(pack, &options).map_err(|e| {
            (
                EXIT_MONITOR_FAILED,
                format!("unpacking {}: {e}", pack.display()),
            )
        })?;
        return Ok(Interpreter {
            argv: vec![root.join("run").into_os_string(), "python3".into()],
            source_roots: vec![root.join("app")],
            analysis_env: Environment::Python("python3".into()),
            roots: args.roots.clone(),
        });
    }
    let cwd = std::env::current_dir().map_err(|e| failed(e.into()))?;
    if let Some(prefix) = &args.env {
        return Ok(Interpreter {
            argv: vec![prefix.join("bin/python").into_os_string()],
            source_roots: vec![cwd],
            analysis_env: Environment::Prefix(prefix.clone()),
            roots: args.roots.clone(),
        });
    }
    let python = args.python.clone().unwrap_or_else(|| "python3".into());
    Ok(Interpreter {
        argv: vec![python.clone().into_os_string()],
        source_roots: vec![cwd],
        analysis_env: Environment::Python(python),
        roots: args.roots.clone(),
    })
}

/// `file.py:qualname` or `pkg.mod:qualname`, found on the source roots as Python would.
pub fn locate(
    target: &str,
    source_roots: &[PathBuf],
    roots: &[PathBuf],
) -> Result<Located, Failure> {
    let Some((module_part, qualname)) = target.rsplit_once(':') else {
        return Err((
            EXIT_USAGE,
            format!("{target}: a call target is file.py:function or pkg.mod:function"),
        ));
    };
    if qualname.is_empty() || qualname.split('.').any(|p| p.is_empty()) {
        return Err((EXIT_USAGE, format!("{target}: empty function name")));
    }
    let qualname = qualname.to_string();
    if module_part.ends_with(".py") {
        let file = std::path::absolute(module_part).map_err(|e| failed(e.into()))?;
        if !file.is_file() {
            return Err((
                EXIT_TARGET_NOT_FOUND,
                format!("{module_part}: no such file"),
            ));
        }
        let (module, root) = module_of_file(&file);
        // In a pack the module is the pack's copy.
        let packed = source_roots
            .iter()
            .find_map(|r| module_file(r, &module).map(|f| (r, f)));
        return Ok(match packed.filter(|(r, _)| r.ends_with("app")) {
            Some((root, file)) => Located {
                module,
                root: Some(root.clone()),
                file: Some(file),
                qualname,
            },
            None => Located {
                module,
                root: Some(root),
                file: Some(file),
                qualname,
            },
        });
    }
    let module = module_part.to_string();
    let found = source_roots
        .iter()
        .chain(roots)
        .find_map(|root| module_file(root, &module).map(|file| (root.clone(), file)));
    Ok(match found {
        Some((root, file)) => Located {
            module,
            root: Some(root),
            file: Some(file),
            qualname,
        },
        None => Located {
            module,
            root: None,
            file: None,
            qualname,
        },
    })
}

/// `a.b` under `root`: `a/b.py` or `a/b/__init__.py`.
fn module_file(root: &Path, module: &str) -> Option<PathBuf> {
    let relative: PathBuf = module.split('.').collect();
    let plain = root.join(&relative).with_extension("py");
    if plain.is_file() {
        return Some(plain);
    }
    let package = root.join(&relative).join("__init__.py");
    package.is_file().then_some(package)
}

/// The dotted name of a file and the directory above its outermost package.
fn module_of_file(file: &Path) -> (String, PathBuf) {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = if stem == "__init__" {
        vec![]
    } else {
        vec![stem]
    };
    let mut dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    while dir.join("__init__.py").is_file() {
        match (dir.file_name(), dir.parent()) {
            (Some(name), Some(parent)) => {
                parts.push(name.to_string_lossy().into_owned());
                dir = parent.to_path_buf();
            }
            _ => break,
        }
    }
    parts.reverse();
    (parts.join("."), dir)
}

/// The module-level statements the function needs, as (first line, last line) ranges: the
/// analyzer's slice, computed by the same walk as the function's closure in `lfm analyze`;
/// and the analysis it came from (it knows the environment's distributions).
pub fn sliced(
    located: &Located,
    interpreter: &Interpreter,
) -> Result<(Vec<(u64, u64)>, Analysis), Failure> {
    let Some(file) = &located.file else {
        return Err((
            EXIT_TARGET_NOT_FOUND,
            format!("module {} not found on the source roots (add --root DIR, or pass --import-module to let Python find it)", located.module),
        ));
    };
    let target = format!("{}:{}", file.display(), located.qualname);
    let mut roots: Vec<PathBuf> = located.root.iter().cloned().collect();
    roots.extend(interpreter.roots.iter().cloned());
    let options = Options {
        environment: interpreter.analysis_env.clone(),
        roots,
        ..Options::default()
    };
    let not_found = |e: lfm_analyzer::AnalyzeError| (EXIT_TARGET_NOT_FOUND, e.to_string());
    let analysis = prepare(std::slice::from_ref(&target), &options).map_err(not_found)?;
    let slice = analysis
        .function_slice()
        .ok_or_else(|| (EXIT_TARGET_NOT_FOUND, format!("{target}: no such function")))?
        .map_err(not_found)?;
    let ranges = slice
        .statements
        .iter()
        .map(|&(first, last)| (u64::from(first), u64::from(last)))
        .collect();
    Ok((ranges, analysis))
}

fn show_slice(located: &Located, ranges: &[(u64, u64)]) -> Result<i32, Failure> {
    let Some(file) = &located.file else {
        return Err((
            EXIT_TARGET_NOT_FOUND,
            format!("{}: no source file", located.module),
        ));
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| (EXIT_TARGET_NOT_FOUND, format!("{}: {e}", file.display())))?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "# {} (module {}), {} statements",
        file.display(),
        located.module,
        ranges.len()
    );
    for &(start, end) in ranges {
        for number in start..=end {
            let line = lines.get(number as usize - 1).copied().unwrap_or_default();
            let _ = writeln!(out, "{number:5} | {line}");
        }
    }
    Ok(0)
}

/// The per-call files the runner reads and writes, in a private temporary directory.
struct CallFiles {
    _dir: tempfile::TempDir,
    request: PathBuf,
    result: PathBuf,
    outcome: PathBuf,
    imports: PathBuf,
}

impl CallFiles {
    fn create(cache: &Path) -> anyhow::Result<CallFiles> {
        let calls = cache.join("calls");
        std::fs::create_dir_all(&calls)?;
        let dir = tempfile::Builder::new()
            .prefix("call-")
            .tempdir_in(&calls)?;
        Ok(CallFiles {
            request: dir.path().join("request.json"),
            result: dir.path().join("result"),
            outcome: dir.path().join("outcome.json"),
            imports: dir.path().join("imports.log"),
            _dir: dir,
        })
    }
}

/// The runner's description of the target (python/lfm_runner/target.py).
pub fn runner_target(located: &Located, slice: Option<&[(u64, u64)]>) -> serde_json::Value {
    match slice {
        Some(ranges) => serde_json::json!({
            "mode": "slice",
            "module": located.module,
            "root": located.root,
            "file": located.file,
            "qualname": located.qualname,
            "statements": ranges.iter().map(|(s, e)| [s, e]).collect::<Vec<_>>(),
        }),
        None => serde_json::json!({
            "mode": "import",
            "module": located.module,
            "root": located.root,
            "qualname": located.qualname,
        }),
    }
}

fn request_json(
    located: &Located,
    slice: Option<&[(u64, u64)]>,
    arguments: &Arguments,
    files: &CallFiles,
    args: &CallArgs,
) -> Result<serde_json::Value, Failure> {
    let target = runner_target(located, slice);
    let result_file = match &args.result_file {
        Some(path) => std::path::absolute(path).map_err(|e| failed(e.into()))?,
        None => files.result.clone(),
    };
    Ok(serde_json::json!({
        "format": "lfm-call-request/1",
        "target": target,
        "args": arguments.to_json(),
        "result": {"format": if args.result_file.is_some() { "pickle" } else { "json" }},
        "result_file": result_file,
        "outcome_file": files.outcome,
        "import_log": (!args.no_import_log).then_some(&files.imports),
    }))
}

/// Read the runner's outcome into the Report, print the value or the traceback, and return
/// the exit code.
fn conclude(report: &mut Report, files: &CallFiles, args: &CallArgs) -> i32 {
    let outcome = outcome::read(&files.outcome);
    match outcome::apply(report, outcome.as_ref()) {
        Outcome::Stopped => match report.exit.kind {
            ExitKind::Limits => EXIT_LIMITS,
            ExitKind::Signal => 128 + report.exit.signal.unwrap_or(0),
            _ => EXIT_MONITOR_FAILED,
        },
        Outcome::Missing => {
            eprintln!(
                "error: {}",
                report.exit.error.as_deref().unwrap_or_default()
            );
            EXIT_NO_OUTCOME
        }
        Outcome::Raised => {
            if let Some(exception) = &report.exit.exception {
                eprint!("{}", exception.traceback);
            }
            EXIT_EXCEPTION
        }
        Outcome::Returned { result, not_json } => {
            if args.result_file.is_some() {
                return 0;
            }
            if let Some(reason) = not_json {
                eprintln!("error: the function returned a {} that is not JSON ({reason})\nhint: pass --result-file FILE to get it as a pickle", result.type_name);
                return EXIT_RESULT_NOT_JSON;
            }
            print_result(&files.result)
        }
    }
}

fn print_result(path: &Path) -> i32 {
    match std::fs::read(path) {
        Ok(bytes) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&bytes);
            let _ = out.write_all(b"\n");
            0
        }
        Err(error) => {
            eprintln!("error: reading the result: {error}");
            EXIT_MONITOR_FAILED
        }
    }
}
