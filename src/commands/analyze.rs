//! `lfm analyze`: run the analyzer and print the Spec in the chosen format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;

use lfm_analyzer::dists::normalize_name;
use lfm_analyzer::render;
use lfm_analyzer::results::{
    Outcome, RequestKey, ResultWriter, ResultsCache, SharedBytes, TargetOutcome,
};
use lfm_analyzer::spec::{
    DistributionNeed, ModuleKind, ModuleNeed, TargetSpec, TargetView, SPEC_FORMAT,
};
use lfm_analyzer::{prepare_or_reuse, Analysis, AnalyzeError, Environment, Options, Prepared};

use crate::cli::{AnalyzeArgs, Format};

pub const EXIT_FAILED: i32 = 1;
pub const EXIT_TARGET_NOT_FOUND: i32 = 3;
pub const EXIT_MISSING_REQUIRED: i32 = 4;

/// Targets computed and printed per chunk, so a whole site-packages never sits in memory.
/// 128 rather than 512: the same speed, 7 MiB less peak memory on the bench tree.
const CHUNK: usize = 128;

/// What a chunk of rendered JSON targets may hold before it is written, near enough: a
/// function's JSON in a large local package (sympy, scipy) can be over a megabyte, and 128
/// of those held at once made the peak memory of `--format json` 300-560 MiB.
const CHUNK_BYTES: usize = 16 << 20;

/// The length of the next chunk of JSON targets: up to [`CHUNK`], fewer where the last
/// chunk's targets were large, never fewer than two per thread; starting from the fewest and
/// at most doubling, as the first targets' size is not known.
struct ChunkSizer {
    next: std::cell::Cell<usize>,
    fewest: usize,
}

impl ChunkSizer {
    fn new() -> ChunkSizer {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let fewest = (2 * threads).min(CHUNK);
        ChunkSizer {
            next: std::cell::Cell::new(fewest),
            fewest,
        }
    }

    fn next(&self) -> usize {
        self.next.get()
    }

    /// A chunk of `targets` targets was `bytes` long.
    fn saw(&self, targets: usize, bytes: usize) {
        let average = bytes.div_ceil(targets.max(1)).max(1);
        let most = (2 * targets).min(CHUNK).max(self.fewest);
        self.next
            .set((CHUNK_BYTES / average).clamp(self.fewest, most));
    }
}

pub fn run(args: AnalyzeArgs) -> i32 {
    crate::purge_freed_pages_soon();
    let environment_given = args.python.is_some() || args.env.is_some();
    if !environment_given {
        hint_installed_targets(&args.targets);
    }
    let bar = progress_bar();
    let options = options_of(&args, &bar);
    // LFM_TIMINGS=1: phase times, memory and cache decisions on stderr (for bench/ work).
    let show_timings = std::env::var_os("LFM_TIMINGS").is_some();
    let stdout = std::io::stdout();
    let pretty = stdout.is_terminal();
    // Compact JSON (what programs read) of an unchanged request is stored and replayed.
    let results = match (&options.cache_dir, args.format) {
        (Some(dir), Format::Json) if !pretty => {
            let request = request_key(&args.targets, &options);
            Some((ResultsCache::new(dir), request))
        }
        _ => None,
    };
    let prepared = prepare_or_reuse(
        &args.targets,
        &options,
        results.as_ref().map(|(cache, request)| (cache, request)),
    );
    if let Some(bar) = &bar {
        bar.set_message("targets");
        bar.set_position(0);
    }
    let mut out = Output {
        out: BufWriter::with_capacity(1 << 20, output_handle(&stdout)),
        record: None,
    };
    let analysis = match prepared {
        Ok(Prepared::Fresh(analysis)) => analysis,
        Ok(Prepared::Reused(hit)) => {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            if show_timings {
                eprintln!("timing: the stored result of this request was reused");
            }
            return replay(&args, environment_given, &hit, &mut out);
        }
        Err(error) => return not_prepared(error),
    };
    let started = std::time::Instant::now();
    if show_timings {
        print_memory(&analysis);
    }
    if let Some((cache, request)) = &results {
        match cache.writer(request) {
            Ok(mut writer) => {
                if let Some(frames) = analysis.stored_frames() {
                    writer.copy_frames_from(frames);
                }
                out.record = Some(writer)
            }
            Err(error) => eprintln!("warning: the result will not be stored: {error:#}"),
        }
    }
    let mut totals = Totals::default();
    let written = write_format(&args, &analysis, &mut out, pretty, &mut totals, &bar);
    if show_timings {
        print_timings(&analysis, started);
    }
    if finish(&args, &analysis, &mut out, written, &mut totals).is_err() {
        return EXIT_FAILED; // a closed pipe (`| head`) is not worth a panic
    }
    if show_timings {
        print_checkpoint(
            "finished (output flushed, result stored)",
            &since_prepare(&analysis, started),
        );
    }
    // Freeing every summary one by one takes longer than the exit that follows frees them all.
    std::mem::forget(analysis);
    report_totals(&args, environment_given, &totals)
}

fn options_of(args: &AnalyzeArgs, bar: &Option<indicatif::ProgressBar>) -> Options {
    let mut options = Options::default();
    if let Some(python) = &args.python {
        options.environment = Environment::Python(python.clone());
    }
    if let Some(env) = &args.env {
        options.environment = Environment::Prefix(env.clone());
    }
    options.roots = args.roots.clone();
    options.closure = args.closure.into();
    options.exclude = args.exclude.clone();
    if let Some(dir) = &args.cache_dir {
        options.cache_dir = Some(dir.clone());
        options.environment_cache = Some(dir.clone());
    }
    if args.no_cache {
        options.cache_dir = None;
    }
    if let Some(bar) = bar {
        let bar = bar.clone();
        options.progress = Some(std::sync::Arc::new(move |done, known| {
            bar.set_length(known as u64);
            bar.set_position(done as u64);
        }));
    }
    options
}

/// The stored result of the same request, written again.
fn replay(
    args: &AnalyzeArgs,
    environment_given: bool,
    hit: &lfm_analyzer::results::Hit,
    out: &mut Output,
) -> i32 {
    let written = hit.write_to(&mut out.out).and_then(|_| out.flush());
    if written.is_err() {
        return EXIT_FAILED;
    }
    let totals = Totals {
        warnings: hit.outcome.warnings as usize,
        missing_required: hit.outcome.missing_required,
        ..Totals::default()
    };
    report_totals(args, environment_given, &totals)
}

fn not_prepared(error: AnalyzeError) -> i32 {
    match error {
        AnalyzeError::TargetNotFound { target, reason } => {
            eprintln!("error: target not found: {target}\n  {reason}");
            eprintln!("hint: targets are DIR, FILE.py, FILE.py:FUNC, FILE.py:Class.method or pkg.mod:FUNC");
            EXIT_TARGET_NOT_FOUND
        }
        AnalyzeError::Other(error) => {
            eprintln!("error: {error:#}");
            EXIT_FAILED
        }
    }
}

fn write_format(
    args: &AnalyzeArgs,
    analysis: &Analysis,
    out: &mut Output,
    pretty: bool,
    totals: &mut Totals,
    bar: &Option<indicatif::ProgressBar>,
) -> std::io::Result<()> {
    match args.format {
        Format::Json => write_json(analysis, out, pretty, totals, bar),
        Format::Table => write_table(args, analysis, out, totals, bar),
        Format::Requirements | Format::Conda | Format::Poncho => {
            write_environment(args.format, analysis, out, totals, bar)
        }
    }
}

/// Whole trees: a line per module unless --functions; each warning printed once.
fn write_table(
    args: &AnalyzeArgs,
    analysis: &Analysis,
    out: &mut Output,
    totals: &mut Totals,
    bar: &Option<indicatif::ProgressBar>,
) -> std::io::Result<()> {
    let per_module = analysis.module_targets() > 1 && !args.functions;
    let mut table = TableSink::new();
    let written = analysis.map_chunks(
        CHUNK,
        |target| {
            let target = target.to_spec();
            let text = (!per_module).then(|| table_entry(&target, args.quiet));
            (Totals::of(&target), text, target)
        },
        |rendered| {
            advance(bar, rendered.len(), analysis.len());
            for (counts, text, target) in rendered {
                totals.add(counts);
                table.write(out, text, &target, args.quiet)?;
            }
            Ok(())
        },
    );
    written.and_then(|_| table.finish(out))
}

/// requirements.txt, environment.yml or a poncho spec: the union of every target's
/// distributions.
fn write_environment(
    format: Format,
    analysis: &Analysis,
    out: &mut Output,
    totals: &mut Totals,
    bar: &Option<indicatif::ProgressBar>,
) -> std::io::Result<()> {
    let mut union: BTreeMap<String, DistributionNeed> = BTreeMap::new();
    let collected = analysis.for_each_chunk(CHUNK, |targets| {
        advance(bar, targets.len(), analysis.len());
        for target in targets {
            totals.count(&target);
            for dist in target.distributions {
                union.entry(normalize_name(&dist.name)).or_insert(dist);
            }
        }
        Ok::<(), std::io::Error>(())
    });
    let dists: Vec<&DistributionNeed> = union.values().collect();
    let python = analysis.python().version;
    let text = match format {
        Format::Requirements => render::requirements(&dists),
        Format::Conda => render::conda_environment(&python, &dists, "lfm-env"),
        _ => {
            serde_json::to_string_pretty(&render::poncho(&python, &dists)).unwrap_or_default()
                + "\n"
        }
    };
    collected.and_then(|_| out.write_all(text.as_bytes()))
}

fn print_memory(analysis: &Analysis) {
    if let Some(why) = &analysis.results_miss {
        eprintln!("timing: no stored result reused: {why}");
    }
    eprintln!(
        "memory: summaries hold ~{} MiB",
        analysis.summary_heap_bytes() >> 20
    );
}

/// When each phase ended, in wall time since prepare() started, with the CPU time and memory
/// of the process so far: the preparation's phases, then the closures and output.
fn print_timings(analysis: &Analysis, started: std::time::Instant) {
    for (phase, at) in &analysis.timings {
        print_checkpoint(phase, at);
    }
    print_checkpoint("closures and output", &since_prepare(analysis, started));
    // A run reads the summaries of the files it analyses, not the whole cache (issue 57).
    let (entries, bytes) = lfm_analyzer::cache::entries_read();
    eprintln!("timing: summary cache: {entries} entries read ({bytes} bytes)");
}

/// A checkpoint timed from prepare()'s start like the preparation's own (`started` is when
/// the preparation ended). Timed from `started` alone, the closures' line once read as if
/// the process waited ~0.75 s after it.
fn since_prepare(analysis: &Analysis, started: std::time::Instant) -> lfm_analyzer::Checkpoint {
    let mut at = lfm_analyzer::Checkpoint::since(started);
    at.wall += analysis
        .timings
        .last()
        .map_or(Default::default(), |(_, at)| at.wall);
    at
}

fn print_checkpoint(phase: &str, at: &lfm_analyzer::Checkpoint) {
    let cpu = at.cpu.map_or(String::new(), |cpu| {
        format!("  (cpu {:.2} s)", cpu.as_secs_f64())
    });
    let cpu = match (at.rss_kib, at.peak_rss_kib) {
        (Some(rss), Some(peak)) => {
            format!("{cpu}  (rss {} MiB, peak {} MiB)", rss / 1024, peak / 1024)
        }
        _ => cpu,
    };
    eprintln!("timing: {:>8.3} s  {phase}{cpu}", at.wall.as_secs_f64());
}

/// The global warnings (tables print them last), the output flushed, and the result stored
/// for the next identical request.
fn finish(
    args: &AnalyzeArgs,
    analysis: &Analysis,
    out: &mut Output,
    written: std::io::Result<()>,
    totals: &mut Totals,
) -> std::io::Result<()> {
    let global_warnings = analysis.warnings();
    written?;
    if args.format == Format::Table {
        for warning in &global_warnings {
            let location = if warning.file.is_empty() {
                String::new()
            } else {
                format!("{}:{}: ", warning.file, warning.line)
            };
            writeln!(out, "warning: {location}{}", warning.message)?;
        }
    }
    out.flush()?;
    totals.warnings += global_warnings.len();
    if let (Some(record), Some(inputs)) = (out.record.take(), analysis.inputs()) {
        let outcome = Outcome {
            warnings: totals.count_warnings() as u64,
            missing_required: totals.missing_required,
        };
        let table = analysis.module_table();
        if let Err(error) = record.finish(inputs, analysis.index_keys(), table, outcome) {
            eprintln!("warning: the result was not stored: {error:#}");
        }
    }
    Ok(())
}

/// `n thing` or `n things`.
pub fn plural(count: usize, thing: &str) -> String {
    if count == 1 {
        format!("1 {thing}")
    } else {
        format!("{count} {thing}s")
    }
}

/// A target inside another environment's site-packages, analysed with python3 on PATH, is
/// local code to that interpreter: every function of it gets a closure of its own, which on a
/// whole site-packages takes minutes and gigabytes instead of seconds. Say so before starting.
fn hint_installed_targets(targets: &[String]) {
    for target in targets {
        if let Some(prefix) = environment_holding(target) {
            eprintln!(
                "hint: {target} is installed code of the environment {}, but the interpreter \
                 analysed is python3 on PATH, for which it is local code (each function analysed \
                 on its own: slow on a whole package); to analyse it as installed code pass \
                 --python {}",
                prefix.display(),
                prefix.join("bin/python").display()
            );
        }
    }
}

/// The environment (`P` of `P/lib/pythonX.Y/site-packages`, with an interpreter at
/// `P/bin/python`) whose site-packages holds the file or directory `target` names.
fn environment_holding(target: &str) -> Option<std::path::PathBuf> {
    let path = std::path::Path::new(target.split(':').next()?)
        .canonicalize()
        .ok()?;
    let site = path.ancestors().find(|dir| {
        dir.file_name()
            .is_some_and(|name| name == "site-packages" || name == "dist-packages")
    })?;
    let prefix = site.parent()?.parent()?.parent()?;
    prefix
        .join("bin/python")
        .exists()
        .then(|| prefix.to_path_buf())
}

/// MISSING modules that are files of a directory under a directory target: local code whose
/// directory is no source root (only a target's own directory is one), so `--root` is the
/// fix, not installing them. Prints the hint; returns the modules it named.
fn hint_source_roots(
    targets: &[String],
    missing: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let mut found: std::collections::BTreeMap<PathBuf, Vec<String>> = Default::default();
    let directories = targets.iter().map(PathBuf::from).filter(|t| t.is_dir());
    for directory in directories {
        let mut budget = 10_000;
        for name in missing {
            let top = name.split('.').next().unwrap_or(name);
            if let Some(holder) = directory_holding(&directory, top, &mut budget) {
                found.entry(holder).or_default().push(name.clone());
            }
        }
    }
    for (holder, names) in &found {
        eprintln!(
            "hint: MISSING {} {} local code in {}, which is no source root: pass --root {}",
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" },
            holder.display(),
            holder.display()
        );
    }
    found.into_values().flatten().collect()
}

/// A directory under `root` (not `root` itself, already a source root) holding module `top`
/// as `top.py` or a package `top/`; at most `budget` directories are looked into.
fn directory_holding(root: &std::path::Path, top: &str, budget: &mut usize) -> Option<PathBuf> {
    let mut pending: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let hidden = name.to_string_lossy().starts_with('.');
            if hidden || !path.is_dir() || *budget == 0 {
                continue;
            }
            *budget -= 1;
            let holds = path.join(format!("{top}.py")).is_file()
                || path.join(top).join("__init__.py").is_file();
            if holds {
                return Some(path);
            }
            pending.push(path);
        }
    }
    None
}

/// The closing lines on stderr, and the exit code.
fn report_totals(args: &AnalyzeArgs, environment_given: bool, totals: &Totals) -> i32 {
    let warning_count = totals.count_warnings();
    if (args.format != Format::Table || args.quiet) && warning_count > 0 {
        eprintln!(
            "lfm: {} (see the table format without -q, or the `warnings` fields of --format json)",
            plural(warning_count, "warning")
        );
    }
    let local = hint_source_roots(&args.targets, &totals.missing);
    if totals.missing_required && !args.strict && local.is_empty() {
        if environment_given {
            eprintln!(
                "hint: MISSING modules are imported but not installed in the environment analysed \
                 (--python/--env); install them there, or mark optional imports with try/except ImportError"
            );
        } else {
            eprintln!(
                "hint: MISSING modules are imported but not installed for the interpreter analysed \
                 (python3 on PATH); pass the environment the code runs in with --python PY or --env PREFIX"
            );
        }
    }
    if args.strict && totals.missing_required {
        let names: Vec<&str> = totals.missing.iter().map(String::as_str).collect();
        let listed = match names.len() {
            0 => "(see `missing`)".to_string(),
            n if n > 20 => format!("{} and {} more", names[..20].join(", "), n - 20),
            _ => names.join(", "),
        };
        eprintln!("error: required modules or distributions are not installed: {listed}");
        return EXIT_MISSING_REQUIRED;
    }
    0
}

/// What a stored result is keyed by: everything on the command line that shapes the output.
fn request_key(targets: &[String], options: &Options) -> RequestKey {
    let cwd = std::env::current_dir().unwrap_or_default();
    let environment = match &options.environment {
        Environment::Python(python) => format!("python={}", python.display()),
        Environment::Prefix(prefix) => format!("env={}", prefix.display()),
    };
    let mut parts: Vec<Vec<u8>> = vec![
        b"json".to_vec(),
        cwd.as_os_str().as_encoded_bytes().to_vec(),
        environment.into_bytes(),
    ];
    parts.push(format!("closure={}", options.closure.as_str()).into_bytes());
    parts.extend(
        options
            .exclude
            .iter()
            .map(|e| format!("exclude={e}").into_bytes()),
    );
    parts.extend(targets.iter().map(|t| format!("target={t}").into_bytes()));
    parts.extend(
        options
            .roots
            .iter()
            .map(|r| format!("root={}", r.display()).into_bytes()),
    );
    let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    RequestKey::new(&parts)
}

/// The output, and when the result is to be stored, a compressed copy of it.
struct Output {
    out: BufWriter<Box<dyn Write>>,
    record: Option<ResultWriter>,
}

impl Output {
    /// Write `parts` in order to the output only (the caller hands each target to the
    /// record), in as few system calls as the OS takes, without copying them into the buffer
    /// first (a chunk of targets is ~350 KB, a whole tree ~480 MB; the copy was
    /// made on the main thread while the workers waited for the next chunk).
    fn write_parts(&mut self, parts: &[&[u8]]) -> std::io::Result<()> {
        use std::io::IoSlice;
        self.out.flush()?;
        let inner = self.out.get_mut();
        // At most 1024 slices a call (IOV_MAX on Linux).
        for group in parts.chunks(1024) {
            let mut slices: Vec<IoSlice> = group.iter().map(|part| IoSlice::new(part)).collect();
            let mut remaining = &mut slices[..];
            while !remaining.is_empty() {
                let written = inner.write_vectored(remaining)?;
                if written == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                IoSlice::advance_slices(&mut remaining, written);
            }
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.write_all(bytes)?;
        Ok(bytes.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        if let Some(record) = &mut self.record {
            record.write_all(bytes)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Where the output goes. Std's stdout is line buffered and searches every write for its last
/// newline; a whole tree's Spec is hundreds of MB, so write to the same fd through a File.
fn output_handle(stdout: &std::io::Stdout) -> Box<dyn Write> {
    use std::os::fd::AsFd;
    match stdout.as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(std::io::stdout()),
    }
}

/// Files parsed, then targets analysed, on stderr when it is a terminal and the output goes
/// elsewhere (when both are the terminal, the output itself shows progress).
fn progress_bar() -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || std::io::stdout().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} analysing [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message("files");
    Some(bar)
}

fn advance(bar: &Option<indicatif::ProgressBar>, done: usize, total: usize) {
    if let Some(bar) = bar {
        bar.set_length(total as u64);
        bar.inc(done as u64);
        if bar.position() >= total as u64 {
            bar.finish_and_clear();
        }
    }
}

/// Table output in order: targets as rendered, or (for whole trees) one line per module that
/// sums up its functions; either way each distinct warning once, under the first target
/// that has it.
struct TableSink {
    printed_warnings: std::collections::HashSet<(String, u32, String)>,
    /// Missing modules already named under an earlier module line (a package's modules all
    /// share what importing the package misses).
    printed_missing: std::collections::BTreeSet<String>,
    module: Option<ModuleLine>,
}

/// A module and its functions, summed up.
struct ModuleLine {
    header: String,
    functions: usize,
    fewest: usize,
    most: Option<(usize, String)>,
    missing: std::collections::BTreeSet<String>,
    warnings: Vec<lfm_analyzer::spec::Warning>,
}

impl TableSink {
    fn new() -> TableSink {
        TableSink {
            printed_warnings: Default::default(),
            printed_missing: Default::default(),
            module: None,
        }
    }

    fn write(
        &mut self,
        out: &mut impl Write,
        text: Option<String>,
        target: &TargetSpec,
        quiet: bool,
    ) -> std::io::Result<()> {
        if let Some(text) = text {
            out.write_all(text.as_bytes())?;
            if !quiet {
                self.write_warnings(out, &target.warnings)?;
                if !target.warnings.is_empty() || !text.is_empty() {
                    out.write_all(b"\n")?;
                }
            }
            return Ok(());
        }
        if target.kind == lfm_analyzer::spec::TargetKind::Module {
            self.finish(out)?;
            self.module = Some(ModuleLine::of(target));
            return Ok(());
        }
        if let Some(module) = &mut self.module {
            module.add_function(target);
        }
        Ok(())
    }

    fn write_warnings(
        &mut self,
        out: &mut impl Write,
        warnings: &[lfm_analyzer::spec::Warning],
    ) -> std::io::Result<()> {
        for warning in warnings {
            let key = (warning.file.clone(), warning.line, warning.message.clone());
            if self.printed_warnings.insert(key) {
                writeln!(
                    out,
                    "  warning: {}:{}: {}",
                    warning.file, warning.line, warning.message
                )?;
            }
        }
        Ok(())
    }

    /// The pending module line, if any.
    fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        let Some(module) = self.module.take() else {
            return Ok(());
        };
        write!(out, "{}", module.header)?;
        if module.functions > 0 {
            let most = module.most.as_ref().map_or(0, |(n, _)| *n);
            write!(out, "; {}", plural(module.functions, "function"))?;
            if most == module.fewest {
                write!(out, ": {} each", plural(most, "distribution"))?;
            } else if let Some((n, name)) = &module.most {
                write!(out, ": {}-{n} distributions (most: {name})", module.fewest)?;
            }
        }
        writeln!(out)?;
        let new: Vec<&str> = module
            .missing
            .difference(&self.printed_missing)
            .map(String::as_str)
            .collect();
        if !new.is_empty() {
            let also = module.missing.len() - new.len();
            let also = if also > 0 {
                format!(" (and {also} named above)")
            } else {
                String::new()
            };
            writeln!(out, "  MISSING: {}{also}", new.join(", "))?;
        }
        self.printed_missing.extend(module.missing.iter().cloned());
        let warnings = module.warnings;
        self.write_warnings(out, &warnings)
    }
}

impl ModuleLine {
    fn of(target: &TargetSpec) -> ModuleLine {
        let mut line = ModuleLine {
            header: format!(
                "{}  ({})  import: {}, {}",
                target.target,
                target.file,
                plural(target.distributions.len(), "distribution"),
                plural(target.modules.len(), "module")
            ),
            functions: 0,
            fewest: usize::MAX,
            most: None,
            missing: Default::default(),
            warnings: Vec::new(),
        };
        line.take_problems(target);
        line
    }

    fn add_function(&mut self, target: &TargetSpec) {
        let count = target.distributions.len();
        self.functions += 1;
        self.fewest = self.fewest.min(count);
        if self.most.as_ref().is_none_or(|(most, _)| count > *most) {
            let name = target.target.rsplit(':').next().unwrap_or_default();
            self.most = Some((count, name.to_string()));
        }
        self.take_problems(target);
    }

    fn take_problems(&mut self, target: &TargetSpec) {
        let required = target.missing.iter().filter(|m| !m.optional);
        self.missing.extend(required.map(|m| m.name.clone()));
        self.warnings.extend(target.warnings.iter().cloned());
    }
}

#[derive(Default, Clone)]
struct Totals {
    /// Warnings counted by a stored result (distinct ones are in `distinct_warnings`).
    warnings: usize,
    distinct_warnings: std::collections::HashSet<(String, u32, String)>,
    missing_required: bool,
    /// The required modules and distributions not installed, by name (for --strict).
    missing: std::collections::BTreeSet<String>,
}

impl Totals {
    fn of(target: &TargetSpec) -> Totals {
        let modules = target
            .missing
            .iter()
            .filter(|m| !m.optional)
            .map(|m| &m.name);
        let dists = target.missing_distributions.iter().map(|m| &m.name);
        Totals {
            warnings: 0,
            distinct_warnings: target
                .warnings
                .iter()
                .map(|w| (w.file.clone(), w.line, w.message.clone()))
                .collect(),
            missing_required: target.has_missing_required(),
            missing: modules.chain(dists).cloned().collect(),
        }
    }

    fn of_view(target: &TargetView) -> Totals {
        let modules = target
            .missing
            .iter()
            .filter(|m| !m.optional)
            .map(|m| m.name);
        let dists = target.missing_distributions.iter().map(|m| m.name.as_str());
        Totals {
            warnings: 0,
            distinct_warnings: target
                .warnings
                .iter()
                .map(|w| (w.file.to_string(), w.line, w.message.to_string()))
                .collect(),
            missing_required: target.has_missing_required(),
            missing: modules.chain(dists).map(str::to_string).collect(),
        }
    }

    /// A stored target's counts ([`Totals::to_outcome`] of when it was computed).
    fn of_outcome(outcome: &TargetOutcome) -> Totals {
        Totals {
            warnings: 0,
            distinct_warnings: outcome.warnings.iter().cloned().collect(),
            missing_required: outcome.missing_required,
            missing: outcome.missing.iter().cloned().collect(),
        }
    }

    /// One target's counts as a stored result keeps them, in a fixed order.
    fn to_outcome(&self) -> TargetOutcome {
        let mut warnings: Vec<(String, u32, String)> =
            self.distinct_warnings.iter().cloned().collect();
        warnings.sort();
        TargetOutcome {
            warnings,
            missing: self.missing.iter().cloned().collect(),
            missing_required: self.missing_required,
        }
    }

    fn add(&mut self, other: Totals) {
        self.warnings += other.warnings;
        self.distinct_warnings.extend(other.distinct_warnings);
        self.missing_required |= other.missing_required;
        self.missing.extend(other.missing);
    }

    fn count_warnings(&self) -> usize {
        self.warnings + self.distinct_warnings.len()
    }

    fn count(&mut self, target: &TargetSpec) {
        self.add(Totals::of(target));
    }
}

/// One target's JSON as written: its counts, its bytes, and (when it came from a stored
/// result) its old index and outcome, kept for the new result.
type RenderedTarget = (Totals, SharedBytes, Option<(u32, TargetOutcome)>);

/// The Spec as one JSON document, written target by target.
fn write_json(
    analysis: &Analysis,
    out: &mut Output,
    pretty: bool,
    totals: &mut Totals,
    bar: &Option<indicatif::ProgressBar>,
) -> std::io::Result<()> {
    write!(out, "{{\"format\":\"{SPEC_FORMAT}\",\"python\":")?;
    write_value(out, pretty, &analysis.python())?;
    write!(out, ",\"targets\":[")?;
    let mut first = true;
    let render = |target: TargetView| -> RenderedTarget {
        let bytes = if pretty {
            serde_json::to_vec_pretty(&target.to_spec()).unwrap_or_default()
        } else {
            let mut bytes = Vec::with_capacity(4096);
            target.write_json(&mut bytes);
            bytes
        };
        (Totals::of_view(&target), SharedBytes::from(bytes), None)
    };
    // A target a stored result holds comes back as its JSON and what it counted, kept as
    // stored for the new result.
    let stored = |bytes: SharedBytes, outcome: &TargetOutcome, old: u32| -> RenderedTarget {
        let counts = Totals::of_outcome(outcome);
        (counts, bytes, Some((old, outcome.clone())))
    };
    let sizer = ChunkSizer::new();
    analysis.map_chunks_reusing(
        || sizer.next(),
        render,
        stored,
        |rendered| {
            advance(bar, rendered.len(), analysis.len());
            let bytes = rendered.iter().map(|(_, bytes, _)| bytes.len()).sum();
            sizer.saw(rendered.len(), bytes);
            write_chunk(out, totals, rendered, &mut first)
        },
    )?;
    write!(out, "],\"warnings\":")?;
    write_value(out, pretty, &analysis.warnings())?;
    writeln!(out, "}}")
}

fn write_value(
    out: &mut impl Write,
    pretty: bool,
    value: &impl serde::Serialize,
) -> std::io::Result<()> {
    if pretty {
        serde_json::to_writer_pretty(out, value)?;
    } else {
        serde_json::to_writer(out, value)?;
    }
    Ok(())
}

/// A chunk of targets into the Spec, counted into `totals`, and into the stored result.
fn write_chunk(
    out: &mut Output,
    totals: &mut Totals,
    mut rendered: Vec<RenderedTarget>,
    first: &mut bool,
) -> std::io::Result<()> {
    let was_stored: Vec<bool> = rendered.iter().map(|(_, _, s)| s.is_some()).collect();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * rendered.len());
    let first_in_chunk = *first;
    for (counts, bytes, stored) in &mut rendered {
        // A computed target's counts are needed again below, for its outcome.
        totals.add(match stored {
            Some(_) => std::mem::take(counts),
            None => counts.clone(),
        });
        if !*first {
            parts.push(b",");
        }
        *first = false;
        parts.push(bytes);
    }
    out.write_parts(&parts)?;
    drop(parts);
    if let Some(record) = &mut out.record {
        for (number, (counts, bytes, stored)) in rendered.iter_mut().enumerate() {
            let comma = !(first_in_chunk && number == 0);
            let (outcome, old) = match stored.take() {
                Some((old, outcome)) => (outcome, Some(old)),
                None => (counts.to_outcome(), None),
            };
            record.write_target(comma, bytes, outcome, old)?;
        }
    }
    // Computed targets' buffers (~16 MiB a chunk, made on other threads) are freed on the pool
    // while it computes the next chunk: freeing them here held it up. Stored ones are spans of
    // the stored output's buffer, which is reused once they are gone.
    let computed: Vec<SharedBytes> = (rendered.into_iter().zip(was_stored))
        .filter_map(|((_, bytes, _), was_stored)| (!was_stored).then_some(bytes))
        .collect();
    rayon::spawn(move || drop(computed));
    Ok(())
}

fn table_entry(target: &TargetSpec, quiet: bool) -> String {
    let mut out = String::new();
    let dists = target.distributions.len();
    let direct = target.distributions.iter().filter(|d| d.direct).count();
    let _ = writeln!(
        out,
        "{}  ({} at {}:{})  {} ({} imported directly), {}{}{}",
        target.target,
        match target.kind {
            lfm_analyzer::spec::TargetKind::Module => "module",
            lfm_analyzer::spec::TargetKind::Function => "function",
            lfm_analyzer::spec::TargetKind::Class => "class",
        },
        target.file,
        target.line,
        plural(dists, "distribution"),
        direct,
        plural(target.modules.len(), "module"),
        match target.engine.distributions.len() {
            0 => String::new(),
            n => format!("; engine: {}", plural(n, "distribution")),
        },
        match (quiet, target.warnings.len()) {
            (true, n) if n > 0 => format!(", {}", plural(n, "warning")),
            _ => String::new(),
        }
    );
    if quiet {
        return out;
    }
    write_distributions(&mut out, "  ", &target.distributions);
    write_modules(&mut out, target);
    write_missing(&mut out, target);
    write_engine(&mut out, target);
    out
}

/// What only the engine's decorators and wrappers bring: the worker's, left out of packs.
fn write_engine(out: &mut String, target: &TargetSpec) {
    let engine = &target.engine;
    if engine.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  engine (the worker has it; lfm pack leaves it out unless --with-engine):"
    );
    for used in &engine.uses {
        let _ = writeln!(out, "    {}  {}:{}", used.what, used.file, used.line);
    }
    write_distributions(out, "    ", &engine.distributions);
    for missing in &engine.missing {
        let _ = writeln!(
            out,
            "    not installed here: {} imported at {}:{}",
            missing.name, missing.reason.file, missing.reason.line
        );
    }
}

fn write_distributions(out: &mut String, indent: &str, distributions: &[DistributionNeed]) {
    if distributions.is_empty() {
        return;
    }
    let _ = writeln!(out, "{indent}distributions:");
    let width = distributions
        .iter()
        .map(|d| d.name.len() + d.version.len() + 1)
        .max()
        .unwrap_or(0);
    for dist in distributions {
        let label = format!("{} {}", dist.name, dist.version);
        let why = if dist.direct {
            format!("imports {}", dist.reason.join(", "))
        } else if let (true, [importer, place, chain @ ..]) = (dist.undeclared, &dist.reason[..]) {
            let chain = chain.join(" -> ");
            format!("imported by {importer} when installed ({place}) -> {chain}")
        } else {
            format!("required by {}", dist.reason.join(" -> "))
        };
        let optional = if dist.optional { " (optional)" } else { "" };
        let _ = writeln!(out, "{indent}  {label:<width$}  {why}{optional}");
    }
}

fn write_modules(out: &mut String, target: &TargetSpec) {
    for (kind, title) in [
        (ModuleKind::Local, "local"),
        (ModuleKind::ThirdParty, "third-party"),
        (ModuleKind::Stdlib, "stdlib"),
    ] {
        let modules: Vec<_> = target.modules.iter().filter(|m| m.kind == kind).collect();
        if modules.is_empty() {
            continue;
        }
        let _ = writeln!(out, "  {title} modules:");
        for module in modules {
            let _ = writeln!(out, "    {}", module_line(module));
        }
    }
}

/// One module of a target: where it is first imported, its contexts, the chain that reached it.
/// The contexts are every import edge's together, so "optional" there means some edge was; a
/// module that an unguarded import also reaches says so, since leaving it out would break that.
fn module_line(module: &ModuleNeed) -> String {
    let via = if module.reason.chain.len() > 1 {
        format!(" via {}", module.reason.chain.join(" -> "))
    } else {
        String::new()
    };
    let some_edge_optional = module.contexts.iter().any(|c| c == "optional");
    let required_too = if some_edge_optional && !module.optional {
        " (also imported unguarded)"
    } else {
        ""
    };
    format!(
        "{:<28} {}:{} [{}]{via}{required_too}",
        module.name,
        module.reason.file,
        module.reason.line,
        module.contexts.join(","),
    )
}

fn write_missing(out: &mut String, target: &TargetSpec) {
    for missing in &target.missing {
        let _ = writeln!(
            out,
            "  {} {} imported at {}:{}",
            if missing.optional {
                "note: optional module not installed:"
            } else {
                "MISSING:"
            },
            missing.name,
            missing.reason.file,
            missing.reason.line
        );
    }
    for missing in &target.missing_distributions {
        let _ = writeln!(
            out,
            "  MISSING distribution: {} (required by {})",
            missing.name,
            missing.required_by.join(" -> ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_large_targets_are_kept_near_their_byte_budget() {
        let sizer = ChunkSizer::new();
        let fewest = sizer.next();
        assert!((2..=CHUNK).contains(&fewest));
        // Small targets: the chunk doubles up to its cap.
        let mut lengths = Vec::new();
        for _ in 0..10 {
            let len = sizer.next();
            lengths.push(len);
            sizer.saw(len, len * 3_000);
        }
        assert_eq!(lengths[1], (2 * fewest).min(CHUNK));
        assert_eq!(sizer.next(), CHUNK);
        // Targets of 2 MB each: 8 of them fill the budget, but never fewer than the fewest.
        sizer.saw(CHUNK, CHUNK * (2 << 20));
        assert_eq!(sizer.next(), (CHUNK_BYTES / (2 << 20)).max(fewest));
        sizer.saw(4, 4 * (64 << 20));
        assert_eq!(sizer.next(), fewest);
    }

    fn module(optional: bool, contexts: &[&'static str]) -> ModuleNeed {
        ModuleNeed {
            name: "yaml".into(),
            kind: ModuleKind::ThirdParty,
            file: None,
            distribution: None,
            optional,
            contexts: contexts.iter().map(|c| (*c).into()).collect(),
            reason: lfm_analyzer::spec::Reason {
                file: "w.py".into(),
                line: 14,
                chain: vec!["w".into(), "load".into()],
            },
        }
    }

    #[test]
    fn a_module_line_says_optional_once_and_flags_an_unguarded_import_beside_a_guarded_one() {
        let only_guarded = module_line(&module(true, &["optional", "top-level"]));
        assert_eq!(
            only_guarded.matches("optional").count(),
            1,
            "{only_guarded}"
        );
        assert!(
            only_guarded.ends_with("w.py:14 [optional,top-level] via w -> load"),
            "{only_guarded}"
        );
        let both = module_line(&module(false, &["optional", "top-level"]));
        assert!(both.ends_with("(also imported unguarded)"), "{both}");
        let required = module_line(&module(false, &["top-level"]));
        assert!(
            required.ends_with("[top-level] via w -> load"),
            "{required}"
        );
    }
}
