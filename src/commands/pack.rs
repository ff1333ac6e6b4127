//! `lfm pack`, `lfm unpack`, `lfm verify`.

use std::path::PathBuf;

use lfm_analyzer::cache::SummaryCache;
use lfm_analyzer::interpreter::Interpreter;
use lfm_analyzer::spec::{ClosureKind, Spec};
use lfm_analyzer::{analyze, AnalyzeError, Environment, Options};
use lfm_monitor::limits::parse_size;
use lfm_packer::{PackOptions, Selection, UnpackError, UnpackOptions};

use crate::cli::{Closure, PackArgs, UnpackArgs, VerifyArgs};

pub const EXIT_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_TARGET_NOT_FOUND: i32 = 3;
pub const EXIT_REFUSED: i32 = 5;
pub const EXIT_VERIFY_FAILED: i32 = 6;

pub fn pack(args: PackArgs) -> i32 {
    let cache = SummaryCache::default_dir();
    let interpreter = match environment(&args) {
        Environment::Python(python) => Interpreter::query(&python, cache.as_deref()),
        Environment::Prefix(prefix) => Interpreter::for_prefix(&prefix, cache.as_deref()),
    };
    let interpreter = match interpreter {
        Ok(interpreter) => interpreter,
        Err(error) => {
            eprintln!("error: {error:#}\nhint: --env takes a venv or conda prefix (the directory holding bin/python), --python its interpreter");
            return EXIT_FAILED;
        }
    };
    let spec = if args.all {
        None
    } else {
        match load_spec(&args) {
            Ok(spec) => Some(spec),
            Err(code) => return code,
        }
    };
    let options = PackOptions {
        level: args.level,
        threads: args.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1)
        }),
        output: args.output.clone(),
        output_dir: args.parts.clone().unwrap_or_else(|| PathBuf::from(".")),
        self_contained: args.self_contained,
        inherit_site_packages: args.inherit_site_packages,
        with_engine: args.with_engine,
        parts: args.parts.is_some(),
        progress: progress_bar(args.quiet),
    };
    let selection = match &spec {
        Some(spec) => Selection::Spec(spec),
        None => Selection::All,
    };
    match lfm_packer::pack(selection, &interpreter, &options) {
        Ok(packed) => {
            println!("{}", packed.path.display());
            if !args.quiet {
                let m = &packed.manifest;
                let what = spec
                    .as_ref()
                    .map_or_else(|| "the whole environment".to_string(), closure_words);
                eprintln!(
                    "lfm: packed {what}: {} distributions and {} local files: {} files, {:.1} MiB -> {:.1} MiB",
                    m.distributions.len(),
                    m.local_files.len(),
                    m.totals.files,
                    m.totals.bytes as f64 / 1_048_576.0,
                    packed.compressed_bytes as f64 / 1_048_576.0
                );
                print_engine_left_out(&m.engine_left_out);
                for warning in &packed.warnings {
                    eprintln!("lfm: warning: {warning}");
                }
            }
            0
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            EXIT_FAILED
        }
    }
}

/// What the pack leaves to the worker, and how it finds it.
fn print_engine_left_out(left_out: &[lfm_packer::manifest::EngineLeftOut]) {
    let Some(first) = left_out.first() else {
        return;
    };
    let more = match left_out.len() - 1 {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    eprintln!(
        "lfm: left out the engine ({} {}{more}): the worker has it, and `run` sees the node's site-packages to find it\nhint: --with-engine packs it too",
        first.name, first.version
    );
}

/// Files and bytes on a terminal; nothing when piped or quiet.
fn progress_bar(quiet: bool) -> Option<lfm_packer::pack::Progress> {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} packing [{bar:30}] {bytes}/{total_bytes} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    Some(Box::new(move |files, total_files, bytes, total_bytes| {
        bar.set_length(total_bytes);
        bar.set_position(bytes);
        bar.set_message(format!("{files}/{total_files} files"));
        if files == total_files {
            bar.finish_and_clear();
        }
    }))
}

/// The environment to pack from: `--python PY` or `--env PREFIX` (clap requires one).
fn environment(args: &PackArgs) -> Environment {
    match (&args.python, &args.env) {
        (Some(python), _) => Environment::Python(python.clone()),
        (None, Some(prefix)) => Environment::Prefix(prefix.clone()),
        (None, None) => Environment::Python(PathBuf::from("python3")),
    }
}

/// A Spec whose closures are the ones asked for (`import` unless `--closure` says otherwise):
/// `lfm pack spec.json` and `lfm pack workflow.py:train` then pack the same by default.
fn closure_as_asked(file: &str, spec: Spec, asked: Option<Closure>) -> Result<Spec, i32> {
    let wanted: ClosureKind = asked.unwrap_or(Closure::Import).into();
    let other = spec.targets.iter().find(|t| t.closure != wanted);
    let Some(other) = other else {
        return Ok(spec);
    };
    let held = other.closure.as_str();
    let rerun = match wanted {
        ClosureKind::Import => "lfm analyze ... --closure import --format json",
        ClosureKind::Slice => "lfm analyze ... --format json",
    };
    eprintln!(
        "error: {file} holds the {held} closure of {}, and this pack is of {} closures\n\
         hint: `{rerun}` writes a Spec of those; or pack this one as it is with --closure {held}{}",
        other.target,
        wanted.as_str(),
        match other.closure {
            ClosureKind::Slice => " (enough for `lfm call --pack`; a worker that imports the function's module, as Parsl and Dask do, needs the import closure)",
            ClosureKind::Import => "",
        }
    );
    Err(EXIT_USAGE)
}

/// `import closure of workflow:train`, `slice closures of 2 targets`: what a pack holds.
fn closure_words(spec: &Spec) -> String {
    let kinds: std::collections::BTreeSet<&str> =
        spec.targets.iter().map(|t| t.closure.as_str()).collect();
    let kinds: Vec<&str> = kinds.into_iter().collect();
    match spec.targets.as_slice() {
        [single] => format!(
            "the {} closure of {}",
            single.closure.as_str(),
            single.target
        ),
        targets => format!(
            "the {} closures of {} targets",
            kinds.join(" and "),
            targets.len()
        ),
    }
}

/// A Spec file, or targets analysed against the same environment.
fn load_spec(args: &PackArgs) -> Result<Spec, i32> {
    if let [single] = args.inputs.as_slice() {
        if single.ends_with(".json") {
            let text = std::fs::read_to_string(single).map_err(|e| {
                eprintln!("error: reading {single}: {e}");
                EXIT_FAILED
            })?;
            let spec = serde_json::from_str::<Spec>(&text).map_err(|e| {
                eprintln!("error: {single}: not an lfm Spec (docs/spec.md): {e}");
                EXIT_FAILED
            })?;
            return closure_as_asked(single, spec, args.closure);
        }
    }
    let options = Options {
        environment: environment(args),
        roots: args.roots.clone(),
        closure: args.closure.unwrap_or(Closure::Import).into(),
        ..Options::default()
    };
    match analyze(&args.inputs, &options) {
        Ok(spec) => Ok(spec),
        Err(AnalyzeError::TargetNotFound { target, reason }) => {
            eprintln!("error: target not found: {target}\n  {reason}");
            Err(EXIT_TARGET_NOT_FOUND)
        }
        Err(AnalyzeError::Other(error)) => {
            eprintln!("error: {error:#}");
            Err(EXIT_FAILED)
        }
    }
}

/// Which closure each target's pack holds, and so what was checked: an import closure is
/// checked as Parsl and Dask workers use it (its module imported); a slice only runs through
/// `lfm call --pack` / `lfm serve --pack`, which never import the module's top level.
fn print_closures(root: &std::path::Path, only: Option<&str>) {
    let Ok(manifest) = lfm_packer::verify::read_manifest(root) else {
        return;
    };
    let targets = manifest.targets.iter();
    for packed in targets.filter(|t| only.is_none_or(|only| only == t.target)) {
        let module = packed.target.split(':').next().unwrap_or_default();
        match packed.closure {
            ClosureKind::Import => println!(
                "{}: import closure, checked as a worker imports it (`import {module}` and its closure)",
                packed.target
            ),
            ClosureKind::Slice => println!(
                "{}: slice closure: runs under `lfm call --pack` and `lfm serve --pack` only; a worker that imports {module} (Parsl, Dask) needs a pack of the import closure (lfm pack --closure import)",
                packed.target
            ),
        }
    }
}

fn unpack_options(cache: Option<PathBuf>) -> UnpackOptions {
    UnpackOptions::new(cache.unwrap_or_else(UnpackOptions::default_cache))
}

pub fn unpack(args: UnpackArgs) -> i32 {
    let mut options = unpack_options(args.cache);
    options.compile_with = args.compile;
    match parse_size("--max-bytes", &args.max_bytes) {
        Ok(bytes) => options.max_bytes = bytes,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_USAGE;
        }
    }
    let from_environment = std::env::var(lfm_call::PACK_CACHE_MAX_VARIABLE).ok();
    if let Some(max) = args.cache_max.as_ref().or(from_environment.as_ref()) {
        match parse_size("--cache-max", max) {
            Ok(bytes) => options.cache_max = Some(bytes),
            Err(error) => {
                eprintln!("error: {error}");
                return EXIT_USAGE;
            }
        }
    }
    match lfm_packer::unpack(&args.archive, &options) {
        Ok(root) => {
            println!("{}", root.display());
            0
        }
        Err(UnpackError::Refused { entry, rule }) => {
            eprintln!(
                "error: {}: refused entry {entry:?}: {rule}; nothing was extracted",
                args.archive.display()
            );
            EXIT_REFUSED
        }
        Err(error) => {
            eprintln!("error: {error}");
            EXIT_FAILED
        }
    }
}

pub fn verify(args: VerifyArgs) -> i32 {
    let options = unpack_options(args.cache);
    // Held while verify imports from the pack: no eviction takes it meanwhile.
    let lease = match lfm_packer::unpack_leased(&args.pack, &options) {
        Ok(lease) => lease,
        Err(error) => {
            eprintln!("error: {error}");
            return EXIT_FAILED;
        }
    };
    match lfm_packer::verify::verify(lease.root(), &args.python, args.target.as_deref()) {
        Ok(result) => {
            print_closures(lease.root(), args.target.as_deref());
            for module in &result.skipped {
                println!("skipped  {module} (optional, not installed when packed)");
            }
            for (module, error) in &result.failed {
                println!("FAILED   {module}: {error}");
            }
            println!(
                "{} modules imported, {} failed, {} skipped",
                result.imported.len(),
                result.failed.len(),
                result.skipped.len()
            );
            if result.ok() {
                0
            } else {
                if !result.engine_left_out.is_empty() {
                    eprintln!(
                        "hint: the pack leaves its engine ({}) to the worker: verify with the worker's interpreter (--python), or pack with --with-engine",
                        result.engine_left_out.join(", ")
                    );
                }
                EXIT_VERIFY_FAILED
            }
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            EXIT_FAILED
        }
    }
}
