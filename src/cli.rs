//! Every flag of every subcommand, defined once with its help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "lfm",
    version,
    about = "Lightweight Function Monitor: analyse, pack and run Python functions at scale"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Show the modules and installed distributions each function needs, and why.
    #[command(after_help = ANALYZE_EXAMPLES)]
    Analyze(AnalyzeArgs),
}

const ANALYZE_EXAMPLES: &str = "\
Examples:
  lfm analyze workflow.py                    every function in the file, and the module
  lfm analyze workflow.py:train              one function (also Class.method)
  lfm analyze mypkg.stages:train --root src  a dotted module, found on the source roots
  lfm analyze src/                           every module and function of a tree
  lfm analyze workflow.py:train --python ~/envs/sci/bin/python --format requirements

Exit codes:
  0  analysed (warnings allowed)
  1  lfm itself failed (interpreter could not be queried, I/O error)
  2  bad command line
  3  a target was not found
  4  --strict and a required module or distribution is not installed";

#[derive(Args)]
pub struct AnalyzeArgs {
    /// What to analyse: DIR, FILE.py, FILE.py:FUNC, FILE.py:Class.method or pkg.mod:FUNC.
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<String>,

    /// Interpreter whose installed distributions are used (default: python3 on PATH).
    #[arg(long, value_name = "PY", conflicts_with = "env")]
    pub python: Option<PathBuf>,

    /// Environment prefix (venv or conda env) whose distributions are used.
    #[arg(long, value_name = "PREFIX")]
    pub env: Option<PathBuf>,

    /// Extra source root for local modules (repeatable); a target file's directory always is one.
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<PathBuf>,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Exit with code 4 when a required module or distribution is not installed.
    #[arg(long)]
    pub strict: bool,

    /// Parse every file again instead of using the per-file summary cache.
    #[arg(long)]
    pub no_cache: bool,

    /// Where the summary cache lives (default: $LFM_CACHE_DIR, $XDG_CACHE_HOME/lfm or ~/.cache/lfm).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Only the summary line per target in the table format.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Format {
    /// Per target: distributions with versions, modules by kind, warnings (for people).
    Table,
    /// The Spec (docs/spec.md), one entry per target.
    Json,
    /// `name==version` lines: the transitive closure, union over targets.
    Requirements,
    /// A conda environment.yml.
    Conda,
    /// The cctools poncho spec JSON.
    Poncho,
}
