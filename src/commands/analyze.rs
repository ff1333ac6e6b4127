//! `lfm analyze`: run the analyzer and print the Spec in the chosen format.

use std::fmt::Write as _;
use std::io::Write as _;

use lfm_analyzer::spec::{ModuleKind, Spec, TargetSpec};
use lfm_analyzer::{analyze, AnalyzeError, Environment, Options};

use crate::cli::{AnalyzeArgs, Format};

pub const EXIT_FAILED: i32 = 1;
pub const EXIT_TARGET_NOT_FOUND: i32 = 3;
pub const EXIT_MISSING_REQUIRED: i32 = 4;

pub fn run(args: AnalyzeArgs) -> i32 {
    let mut options = Options::default();
    if let Some(python) = args.python {
        options.environment = Environment::Python(python);
    }
    if let Some(env) = args.env {
        options.environment = Environment::Prefix(env);
    }
    options.roots = args.roots;
    if args.no_cache {
        options.cache_dir = None;
    } else if let Some(dir) = args.cache_dir {
        options.cache_dir = Some(dir);
    }
    let spec = match analyze(&args.targets, &options) {
        Ok(spec) => spec,
        Err(AnalyzeError::TargetNotFound { target, reason }) => {
            eprintln!("error: target not found: {target}\n  {reason}");
            eprintln!("hint: targets are DIR, FILE.py, FILE.py:FUNC, FILE.py:Class.method or pkg.mod:FUNC");
            return EXIT_TARGET_NOT_FOUND;
        }
        Err(AnalyzeError::Other(error)) => {
            eprintln!("error: {error:#}");
            return EXIT_FAILED;
        }
    };
    let output = match args.format {
        Format::Table => table(&spec, args.quiet),
        Format::Json => serde_json::to_string_pretty(&spec).unwrap_or_default() + "\n",
        Format::Requirements => lfm_analyzer::render::requirements(&spec),
        Format::Conda => lfm_analyzer::render::conda_environment(&spec, "lfm-env"),
        Format::Poncho => {
            serde_json::to_string_pretty(&lfm_analyzer::render::poncho(&spec)).unwrap_or_default()
                + "\n"
        }
    };
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(output.as_bytes())
        .and_then(|_| stdout.flush())
        .is_err()
    {
        return EXIT_FAILED; // a closed pipe (`| head`) is not worth a panic
    }
    if args.format != Format::Table {
        print_warnings_to_stderr(&spec);
    }
    if args.strict && spec.targets.iter().any(TargetSpec::has_missing_required) {
        eprintln!(
            "error: required modules or distributions are not installed (see `missing` above)"
        );
        return EXIT_MISSING_REQUIRED;
    }
    0
}

fn print_warnings_to_stderr(spec: &Spec) {
    let count: usize =
        spec.targets.iter().map(|t| t.warnings.len()).sum::<usize>() + spec.warnings.len();
    if count > 0 {
        eprintln!("lfm: {count} warnings (see the table format or the `warnings` fields of --format json)");
    }
}

fn table(spec: &Spec, quiet: bool) -> String {
    let mut out = String::new();
    for target in &spec.targets {
        let dists = target.distributions.len();
        let direct = target.distributions.iter().filter(|d| d.direct).count();
        let _ = writeln!(
            out,
            "{}  ({} at {}:{})  {} distributions ({} imported directly), {} modules",
            target.target,
            match target.kind {
                lfm_analyzer::spec::TargetKind::Module => "module",
                lfm_analyzer::spec::TargetKind::Function => "function",
                lfm_analyzer::spec::TargetKind::Class => "class",
            },
            target.file,
            target.line,
            dists,
            direct,
            target.modules.len()
        );
        if quiet {
            continue;
        }
        if !target.distributions.is_empty() {
            let _ = writeln!(out, "  distributions:");
            let width = target
                .distributions
                .iter()
                .map(|d| d.name.len() + d.version.len() + 1)
                .max()
                .unwrap_or(0);
            for dist in &target.distributions {
                let label = format!("{} {}", dist.name, dist.version);
                let why = if dist.direct {
                    format!("imports {}", dist.reason.join(", "))
                } else {
                    format!("required by {}", dist.reason.join(" -> "))
                };
                let optional = if dist.optional { " (optional)" } else { "" };
                let _ = writeln!(out, "    {label:<width$}  {why}{optional}");
            }
        }
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
                let via = if module.reason.chain.len() > 1 {
                    format!(" via {}", module.reason.chain.join(" -> "))
                } else {
                    String::new()
                };
                let tags = module.contexts.join(",");
                let _ = writeln!(
                    out,
                    "    {:<28} {}:{} [{}]{}{}",
                    module.name,
                    module.reason.file,
                    module.reason.line,
                    tags,
                    via,
                    if module.optional { " (optional)" } else { "" }
                );
            }
        }
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
        for warning in &target.warnings {
            let _ = writeln!(
                out,
                "  warning: {}:{}: {}",
                warning.file, warning.line, warning.message
            );
        }
        out.push('\n');
    }
    for warning in &spec.warnings {
        let location = if warning.file.is_empty() {
            String::new()
        } else {
            format!("{}:{}: ", warning.file, warning.line)
        };
        let _ = writeln!(out, "warning: {location}{}", warning.message);
    }
    out
}
