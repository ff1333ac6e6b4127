//! `lfm pack`, `lfm unpack`, `lfm verify`.

use std::path::PathBuf;

use lfm_analyzer::cache::SummaryCache;
use lfm_analyzer::interpreter::Interpreter;
use lfm_analyzer::spec::Spec;
use lfm_analyzer::{analyze, AnalyzeError, Environment, Options};
use lfm_monitor::limits::parse_size;
use lfm_packer::{PackOptions, Selection, UnpackError, UnpackOptions};

use crate::cli::{PackArgs, UnpackArgs, VerifyArgs};

pub const EXIT_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_TARGET_NOT_FOUND: i32 = 3;
pub const EXIT_REFUSED: i32 = 5;
pub const EXIT_VERIFY_FAILED: i32 = 6;

pub fn pack(args: PackArgs) -> i32 {
    let interpreter = match Interpreter::for_prefix(
        &args.env,
        SummaryCache::default_dir().as_deref(),
    ) {
        Ok(interpreter) => interpreter,
        Err(error) => {
            eprintln!("error: {error:#}\nhint: --env takes a venv or conda prefix (the directory holding bin/python)");
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
                eprintln!(
                    "lfm: packed {} distributions and {} local files: {} files, {:.1} MiB -> {:.1} MiB",
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

/// A Spec file, or targets analysed against the same environment.
fn load_spec(args: &PackArgs) -> Result<Spec, i32> {
    if let [single] = args.inputs.as_slice() {
        if single.ends_with(".json") {
            let text = std::fs::read_to_string(single).map_err(|e| {
                eprintln!("error: reading {single}: {e}");
                EXIT_FAILED
            })?;
            return serde_json::from_str::<Spec>(&text).map_err(|e| {
                eprintln!("error: {single}: not an lfm Spec (docs/spec.md): {e}");
                EXIT_FAILED
            });
        }
    }
    let options = Options {
        environment: Environment::Prefix(args.env.clone()),
        roots: args.roots.clone(),
        closure: args.closure.into(),
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
