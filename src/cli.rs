//! Every flag of every subcommand, defined once with its help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "lfm",
    version,
    about = "Lightweight Function Monitor: analyse, pack and run Python functions at scale",
    after_help = TOP_EXAMPLES
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
    /// Run a command under cgroup v2 / cgroup v1 / rlimit control and report what it used.
    #[command(after_help = RUN_EXAMPLES)]
    Run(Box<RunArgs>),
    /// Pack what a function needs (or a whole environment) into a deterministic tar.zst.
    #[command(after_help = PACK_EXAMPLES)]
    Pack(PackArgs),
    /// Unpack a pack (or any tar.zst / tar.gz) once into the cache and print its root.
    #[command(after_help = PACK_EXAMPLES)]
    Unpack(UnpackArgs),
    /// Prove a pack holds what its closure needs: import every module in isolation.
    #[command(after_help = PACK_EXAMPLES)]
    Verify(VerifyArgs),
    /// Call one Python function in a fresh interpreter, limited and measured like `lfm run`.
    #[command(after_help = CALL_EXAMPLES)]
    Call(Box<CallArgs>),
    /// Serve function calls from a warm fork-server: JSON lines on stdin or a Unix socket.
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(Box<ServeArgs>),
    /// Replay a trace of finished tasks through sizing strategies: waste, retries, throughput.
    #[command(after_help = SIMULATE_EXAMPLES)]
    Simulate(SimulateArgs),
    /// What was recorded: one row per finished run or call with a category.
    #[command(after_help = HISTORY_EXAMPLES)]
    History(HistoryArgs),
    /// The next allocation of a category, from its history, and why.
    #[command(after_help = SIZE_EXAMPLES)]
    Size(SizeArgs),
    /// Draw a run over time (its Report and --series), or a category's history, as SVG.
    #[command(after_help = PLOT_EXAMPLES)]
    Plot(PlotArgs),
    /// What the recorded calls really imported, against what their closures pack.
    #[command(after_help = USAGE_EXAMPLES)]
    Usage(UsageArgs),
    /// What lfm keeps on this node (unpacked packs, analyze caches), and cleaning it.
    #[command(after_help = CACHE_EXAMPLES)]
    Cache(CacheArgs),
    /// Print a shell completion script: `lfm completions bash > /etc/bash_completion.d/lfm`.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(CompletionsArgs),
}

/// The strategies `--strategy` takes (docs/sizing.md), listed in each flag's help.
fn strategies() -> clap::builder::PossibleValuesParser {
    let names = lfm_sizing::STRATEGIES.iter().map(|(name, _)| *name);
    clap::builder::PossibleValuesParser::new(names)
}

/// `lfm simulate --strategy`: a strategy, or every one.
fn strategies_or_all() -> clap::builder::PossibleValuesParser {
    let names = lfm_sizing::STRATEGIES.iter().map(|(name, _)| *name);
    clap::builder::PossibleValuesParser::new(names.chain(["all"]))
}

const HISTORY_EXAMPLES: &str = "\
Examples:
  lfm history                                  every recorded run and call
  lfm history --category train --format json   one category, each row with its ending
  lfm history --format csv > trace.csv && lfm simulate --trace trace.csv
  lfm history --import bioblast.csv            seed the history from a trace
  lfm history --prune --keep-whole 5           apply retention now

A row says how its run ended: normal, exit N, exception T, signal N, limits R or error
(docs/sizing.md says which of them sizing learns from).";

const SIZE_EXAMPLES: &str = "\
Examples:
  lfm size --category train                    each measured resource's next allocation
  lfm size --category train --strategy max-seen --format json
  lfm size --category train --input-size 2G    for an input of 2 GiB (input-aware strategies)

Each resource is printed with its allocation, the strategy and the reason on lines of their
own; a category without measured runs has no allocation (the first run gets what it asks for,
or the whole node).";

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  lfm completions bash > ~/.local/share/bash-completion/completions/lfm
  lfm completions zsh > ~/.zfunc/_lfm
  lfm completions fish > ~/.config/fish/completions/lfm.fish";
/// A hint for the slips clap's own error leaves unexplained: `lfm run --memory 100M python3 x`
/// (the command without `--` before it) says only "unexpected argument 'python3'".
pub fn hint_for(error: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument || args.get(1).map(String::as_str) != Some("run")
    {
        return None;
    }
    let Some(ContextValue::String(unexpected)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    if unexpected.starts_with('-') || args.iter().any(|a| a == "--") {
        return None;
    }
    let at = args.iter().skip(2).position(|a| a == unexpected)? + 2;
    let quoted = |words: &[String]| -> String {
        let words = words.iter().map(|word| shell_quoted(word));
        words.collect::<Vec<_>>().join(" ")
    };
    Some(format!(
        "hint: the command to run goes after `--`: lfm {} -- {}",
        quoted(&args[1..at]),
        quoted(&args[at..])
    ))
}

/// `word` as a shell reads it back: in single quotes unless it is plain.
fn shell_quoted(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:=@%+,-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct HistoryArgs {
    /// Show this category; with --import, record every imported row under it.
    #[arg(long)]
    pub category: Option<String>,
    /// Seed the history from a trace (CSV with bioblast's columns: category, cores, memory
    /// MiB, disk MiB, wall_time s): each row a normally ended run.
    #[arg(long, value_name = "TRACE.csv")]
    pub import: Option<PathBuf>,
    /// Apply retention now (lfm also does as it records): per category, keep the most recent
    /// runs whole, older ones up to what sizing reads compact, fold their imports into totals
    /// that `lfm usage` still reports, and remove the rest (docs/sizing.md).
    #[arg(long, conflicts_with = "import")]
    pub prune: bool,
    /// With --prune: runs of each category kept whole (Report and import rows).
    #[arg(long, value_name = "N", requires = "prune", default_value_t = 20)]
    pub keep_whole: usize,
    /// With --prune: runs of each category kept at all (sizing reads the 1,000 most recent).
    #[arg(long, value_name = "N", requires = "prune", default_value_t = 1_000)]
    pub keep_runs: usize,
    /// Output format: `table` (for people), `json` (every field, docs/sizing.md), `csv`
    /// (bioblast's columns, which `lfm simulate --trace` replays).
    #[arg(long, value_enum, default_value_t = HistoryFormat::Table)]
    pub format: HistoryFormat,
    /// The history file (default: $LFM_HISTORY, else ~/.local/share/lfm/history-HOST.sqlite).
    #[arg(long, value_name = "PATH")]
    pub history: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum HistoryFormat {
    Table,
    Json,
    Csv,
}

#[derive(Args)]
pub struct SizeArgs {
    /// The category to size (as given to `run --category`; a call's is its function's name).
    #[arg(long)]
    pub category: String,
    #[command(flatten)]
    pub input: InputArgs,
    /// The sizing strategy (docs/sizing.md); `best-so-far` picks, per category, the one that
    /// would have wasted least on its finished runs.
    #[arg(long, value_name = "S", default_value = "best-so-far", value_parser = strategies())]
    pub strategy: String,
    /// Output format: `table` (for people) or `json` (every resource, with its points).
    #[arg(long, value_enum, default_value_t = SimulateFormat::Table)]
    pub format: SimulateFormat,
    /// The history file (default: $LFM_HISTORY, else ~/.local/share/lfm/history-HOST.sqlite).
    #[arg(long, value_name = "PATH")]
    pub history: Option<PathBuf>,
}

const SIMULATE_EXAMPLES: &str = "\
Examples:
  lfm simulate --trace bioblast.csv                          every strategy, memory
  lfm simulate --trace bioblast.csv --resource memory,cores,disk --format json
  lfm simulate --trace bioblast.csv --strategy min-waste
  lfm simulate --trace nfcore_sizey.csv --category-columns workflow,category \\
      --column memory=memory_mb,wall_time=wall_seconds --where sizey_eligible=1

The trace is CSV with a header: a `category` column (without one, every row is one category),
one column per resource (memory and disk in MB, cores), and optionally `wall_time` (seconds;
tasks weigh by it, else 1 each) and `input_bytes` (each task's input size, known before it
runs: the input-aware strategies size from it). Only these columns must hold numbers. Tasks are replayed in file order, each category sized on its
own, exactly as --auto decides online; the node is the largest value of the trace. Strategies:
fixed, max-seen, min-waste, max-throughput, greedy-bucketing, greedy-bucketing-probabilistic,
exhaustive-bucketing, exhaustive-bucketing-probabilistic, quantized-bucketing,
low-wastage-regression, sizey, best-so-far (docs/sizing.md). After them: the oracle (every task given its peak) and best-ladder (the
cheapest fixed sequence of allocations, chosen knowing the whole trace).";

#[derive(Args)]
pub struct SimulateArgs {
    /// The trace (CSV, see below).
    #[arg(long, value_name = "CSV")]
    pub trace: PathBuf,
    /// A strategy, or `all` (docs/sizing.md).
    #[arg(long, value_name = "S", default_value = "all", value_parser = strategies_or_all())]
    pub strategy: String,
    /// Resources to size (columns of the trace), comma-separated.
    #[arg(long = "resource", value_delimiter = ',', default_value = "memory")]
    pub resources: Vec<String>,
    /// Output format: `table` (for people) or `json` (every figure of every strategy).
    #[arg(long, value_enum, default_value_t = SimulateFormat::Table)]
    pub format: SimulateFormat,
    /// Also draw each task's use and every strategy's first allocation, one panel per
    /// resource, to this SVG file.
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// The columns whose values, joined by `:`, name a task's category (default: category).
    #[arg(long, value_delimiter = ',', value_name = "COLUMN,...")]
    pub category_columns: Vec<String>,
    /// Read a resource, wall_time or input_bytes from another column (memory=memory_mb).
    #[arg(long = "column", value_delimiter = ',', value_name = "NAME=COLUMN")]
    pub columns: Vec<String>,
    /// Replay only the rows whose COLUMN is exactly VALUE (repeatable: every one must hold).
    #[arg(long = "where", value_delimiter = ',', value_name = "COLUMN=VALUE")]
    pub filters: Vec<String>,
    /// Replay the calls in time on one node of this much memory (MB), as `lfm serve` admits
    /// them, and print each sizing's makespan: one call at a time, a fixed allocation of the
    /// largest peak, the strategies, the oracle. A call is `cpu_time` seconds of one core,
    /// then the rest of its `wall_time` waiting (docs/sizing.md "Makespan on a node").
    #[arg(long, value_name = "MB")]
    pub schedule_memory: Option<f64>,
    /// The node's cores, shared by the calls in their CPU time.
    #[arg(
        long,
        value_name = "N",
        requires = "schedule_memory",
        default_value_t = 1.0
    )]
    pub schedule_cores: f64,
    /// At most this many calls at once.
    #[arg(
        long,
        value_name = "N",
        requires = "schedule_memory",
        default_value_t = 64
    )]
    pub schedule_slots: usize,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum SimulateFormat {
    Table,
    Json,
}

const SERVE_EXAMPLES: &str = "\
Examples:
  lfm serve --env ~/envs/sci --function workflow.py:train --function workflow.py:report
  lfm serve --pack train.tar.zst --preload pandas,sklearn --slots 2 --socket /run/user/1000/lfm/serve.sock
  echo '{\"id\": 1, \"function\": \"workflow.py:train\", \"args\": [\"data.txt\"], \"limits\": {\"memory\": \"2G\"}}' | lfm serve

One zygote interpreter imports the registered functions and --preload modules once; every call
is a fork of it, in a fresh cgroup of its own (rlimit and /proc where no cgroup is writable),
limited and measured per call. Requests and replies are JSON lines (docs/serve.md). The server
ends at stdin EOF (stdin mode) or on SIGTERM/SIGINT: running calls get --grace, then are killed.";

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub interpreter: InterpreterArgs,
    /// A function to load in the zygote once (repeatable); requests name it as given.
    #[arg(long = "function", value_name = "TARGET")]
    pub functions: Vec<String>,
    /// Modules the zygote imports before forking (comma-separated).
    #[arg(long, value_name = "MOD,...", value_delimiter = ',')]
    pub preload: Vec<String>,
    /// The most calls running at once; fewer run when their allocations (memory, cores) do
    /// not fit the node's together, and the others wait in the queue (docs/serve.md
    /// "Admission"). A call without a memory limit is allocated the node's memory / slots.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub slots: u32,
    /// How many zygotes fork the calls, each started alike, so that forks run on several
    /// cores (default: one per 4 slots, at most one per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub zygotes: Option<u32>,
    /// The node's memory calls are admitted against (default: the machine's, or the limit of
    /// the cgroup lfm runs in when lower).
    #[arg(long, value_name = "SIZE")]
    pub node_memory: Option<String>,
    /// The node's cores calls are admitted against (default: those lfm may run on).
    #[arg(long, value_name = "N")]
    pub node_cores: Option<String>,
    /// Cores a slot's math libraries use (OPENBLAS/OMP/MKL threads, set before imports).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub cores_per_slot: u32,
    /// GPUs each call holds alone while it runs (exported to it as CUDA_VISIBLE_DEVICES); a
    /// request's `limits.gpus` overrides it. Calls wait in the queue while too few are free.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub gpus_per_slot: u64,
    /// A call's process on a GPU it was not given: `note` it in the report, or `kill` it.
    #[arg(long, value_enum, default_value_t = GpuViolationArg::Note)]
    pub gpu_violation: GpuViolationArg,
    /// Listen on this Unix socket (mode 0600 in a 0700 directory) instead of stdin/stdout.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// How calls are contained.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// At shutdown, how long running calls get before they are killed.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub grace: String,
    /// lfm's cache: the runner, per-call directories and the functions' analyses (default
    /// $LFM_CACHE_DIR, else ~/.cache/lfm).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// With --socket: exit after this long with no client connected and no call running.
    #[arg(long, value_name = "DURATION", requires = "socket")]
    pub idle_timeout: Option<String>,
    /// The history every call is recorded in (default: $LFM_HISTORY, else
    /// ~/.local/share/lfm/history-HOST.sqlite).
    #[arg(long, value_name = "PATH", conflicts_with = "no_history")]
    pub history: Option<PathBuf>,
    /// Record nothing (requests cannot ask for "auto" then).
    #[arg(long)]
    pub no_history: bool,
    /// The zygote imports what calls imported from the standard library and installed
    /// distributions, so later calls start warm, until it is this large (then it is replaced
    /// by a fresh one once no call runs, and learns no more).
    #[arg(long, value_name = "SIZE", default_value = "2G")]
    pub learn_max: String,
    /// The zygote imports only the --preload modules and --function targets.
    #[arg(long, conflicts_with = "learn_max")]
    pub no_learn: bool,
}

const CALL_EXAMPLES: &str = "\
Examples:
  lfm call workflow.py:train --kwargs '{\"path\": \"data.txt\"}' --memory 2G --report r.json
  lfm call workflow:train --pack train.tar.zst --args-file args.pkl --result-file out.pkl
  lfm call workflow.py:train --args '[\"data.txt\"]' --env ~/envs/sci --import-module
  lfm call train.py:fit --gpus 1 --auto      a GPU of its own, GPU memory sized from history
  lfm call workflow.py:train --show-slice       print the statements a call executes

By default only the function's slice runs: the module-level statements that bind the names it
needs (from the analyzer), not the whole module, so unused top-level imports cost nothing and a
per-function pack is enough. --import-module imports the module normally instead.
The return value is printed as JSON on stdout; the function's own output goes to stderr.

Exit codes:
  0      the function returned (its value is on stdout, or in --result-file)
  1      the function raised (traceback on stderr; the report's exit.exception)
  2      bad command line or arguments, or an interpreter that cannot run it (missing,
         older than 3.8, or failing to describe itself)
  3      the target was not found
  4      the value is not JSON: pass --result-file to get a pickle
  69     --gpus: the node has fewer GPUs than asked (or none)
  75     --gpus: too few GPUs were free within --gpu-wait-timeout
  125    a limit was exceeded
  128+N  the interpreter died of signal N
  70     lfm failed
  71     the call ended without a result (os._exit, or the interpreter failed to start)";

/// Which interpreter runs functions, and where their code is found: shared by call and serve.
#[derive(Args)]
pub struct InterpreterArgs {
    /// Interpreter to call functions with (default: python3 on PATH).
    #[arg(long, value_name = "PY", conflicts_with_all = ["env", "pack"])]
    pub python: Option<PathBuf>,
    /// A venv or conda prefix whose interpreter runs the calls.
    #[arg(long, value_name = "PREFIX", conflicts_with = "pack")]
    pub env: Option<PathBuf>,
    /// A pack (lfm pack): unpacked once into the cache (`--cache-dir`'s packs/, else the
    /// default pack cache), calls run from it.
    #[arg(long, value_name = "PACK")]
    pub pack: Option<PathBuf>,
    /// Extra source roots where local modules are found.
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<PathBuf>,
}

impl InterpreterArgs {
    /// The interpreter asked for, a pack unpacked under `cache_dir` (`--cache-dir`) if given.
    pub fn choice(&self, cache_dir: Option<&std::path::Path>) -> lfm_call::InterpreterChoice {
        lfm_call::InterpreterChoice {
            python: self.python.clone(),
            env: self.env.clone(),
            pack: self.pack.clone(),
            roots: self.roots.clone(),
            packs_cache: cache_dir.map(|dir| dir.join("packs")),
        }
    }
}

#[derive(Args)]
pub struct CallArgs {
    /// The function: file.py:func, file.py:Class.method or pkg.mod:func.
    #[arg(value_name = "TARGET")]
    pub target: String,
    /// Positional arguments as a JSON list.
    #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
    pub args: Option<String>,
    /// Keyword arguments as a JSON object.
    #[arg(long, value_name = "JSON")]
    pub kwargs: Option<String>,
    /// Arguments as a pickle of (args, kwargs) (instead of --args/--kwargs).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["args", "kwargs"])]
    pub args_file: Option<PathBuf>,
    /// Write the return value here as a pickle instead of printing it as JSON.
    #[arg(long, value_name = "FILE")]
    pub result_file: Option<PathBuf>,
    #[command(flatten)]
    pub interpreter: InterpreterArgs,
    /// Import the function's module normally (its whole top level) instead of its slice.
    #[arg(long)]
    pub import_module: bool,
    /// Do not log the modules the call imports: for bench/imports.sh, which measures what the
    /// log costs (hidden: a call's imports belong in its Report and the history).
    #[arg(long, hide = true)]
    pub no_import_log: bool,
    /// Print the statements the call would execute, and exit.
    #[arg(long, conflicts_with = "import_module")]
    pub show_slice: bool,
    /// lfm's cache: the runner, per-call files and the function's analysis (default
    /// $LFM_CACHE_DIR, else ~/.cache/lfm).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub monitor: MonitorArgs,
}

const PACK_EXAMPLES: &str = "\
Examples:
  lfm pack workflow.py:train --env ~/envs/sci -o train.tar.zst   analyse + pack in one step
  lfm analyze workflow.py:train --closure import --format json > spec.json && lfm pack spec.json --env ~/envs/sci
  lfm pack --env ~/envs/sci --all -o sci.tar.zst                 the whole environment
  lfm unpack train.tar.zst                                       prints the unpacked root
  $(lfm unpack train.tar.zst)/run python3 -c 'import workflow; print(workflow.train(\"data.txt\"))'

Both routes pack the import closure unless --closure slice says otherwise (a Spec of slices,
`lfm analyze`'s default, is refused without it); `lfm pack` says which it packed, and
`lfm verify` checks the pack as its worker uses it.

Without -o the pack is named by its content hash: lfm-<hash>.tar.zst in the current directory.

Exit codes (pack, unpack, verify):
  0  done
  1  lfm failed (environment not found, I/O error, a spec distribution not installed)
  2  bad command line
  3  an analysis target was not found
  5  unpack refused the archive (the message names the entry and the rule)
  6  verify: some module failed to import from the pack";

#[derive(Args)]
pub struct PackArgs {
    /// A Spec (JSON from `lfm analyze --format json`) or analysis targets (as for analyze).
    #[arg(value_name = "SPEC.json|TARGET", required_unless_present = "all")]
    pub inputs: Vec<String>,
    /// The environment to pack from: a venv or conda prefix.
    #[arg(long, value_name = "PREFIX", required_unless_present = "python")]
    pub env: Option<PathBuf>,
    /// The environment to pack from, named by its interpreter (as for analyze and call).
    #[arg(long, value_name = "PY", conflicts_with = "env")]
    pub python: Option<PathBuf>,
    /// Pack every distribution of the environment.
    #[arg(long, conflicts_with = "inputs")]
    pub all: bool,
    /// Output file (default: lfm-<hash>.tar.zst in the current directory).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// zstd level.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=22))]
    pub level: i32,
    /// zstd threads (default: all cores); the output is identical for any count.
    #[arg(long)]
    pub threads: Option<u32>,
    /// Extra source roots for the analysis (as for analyze).
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<PathBuf>,
    /// Add the interpreter and stdlib so the pack runs where no Python is installed.
    #[arg(long)]
    pub self_contained: bool,
    /// Which closure of function targets to pack: `import` (default: the module, its parent
    /// packages and what importing them runs, plus the function's own needs; what Parsl and
    /// Dask need, as they pickle functions by reference) or `slice` (what the function itself
    /// needs; enough for `lfm call --pack`). A Spec is packed as it was analysed: one of
    /// slices (`lfm analyze`'s default) is refused unless `--closure slice` says so, so both
    /// routes pack the same closure by default.
    #[arg(long, value_enum)]
    pub closure: Option<Closure>,
    /// Let code run through the pack also see the site-packages of the node's python3 (by
    /// default `run` gives it a venv of that interpreter holding nothing, so a distribution
    /// missing from the pack fails on every node alike).
    #[arg(long, conflicts_with = "self_contained")]
    pub inherit_site_packages: bool,
    /// Also pack what only the engine's decorators and wrappers bring (`@python_app`,
    /// `dask.delayed`, `@lfm.task`: the analysis lists it as `engine`). Without, the pack
    /// leaves it to the worker, which is that engine, and `run` sees the node's
    /// site-packages to find it; a --self-contained pack always holds it.
    #[arg(long)]
    pub with_engine: bool,
    /// Write the pack as parts into DIR: one content-addressed tar.zst per distribution, one
    /// for the function's own files (and one for the interpreter), and `<sha256>.parts.json`
    /// naming them, printed. Packs of functions that share numpy share its part; `lfm unpack`,
    /// `call --pack` and `serve --pack` take the parts manifest and compose the environment
    /// from links to parts unpacked once per node (docs/pack.md, "Parts").
    #[arg(long, value_name = "DIR", conflicts_with = "output")]
    pub parts: Option<PathBuf>,
    /// No summary on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Args)]
pub struct UnpackArgs {
    /// The archive: an lfm pack, or any tar.zst / tar.gz / tar (e.g. conda-pack output).
    pub archive: PathBuf,
    /// Cache directory (default: $LFM_CACHE_DIR/packs, $XDG_CACHE_HOME/lfm/packs, ~/.cache/lfm/packs).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Evict least recently used packs until the cache is at most this big (e.g. 20G).
    #[arg(long, value_name = "SIZE")]
    pub cache_max: Option<String>,
    /// Refuse archives that expand past this many bytes.
    #[arg(long, value_name = "SIZE", default_value = "64G")]
    pub max_bytes: String,
    /// Byte-compile the pack once on extraction (unchecked-hash .pyc, PEP 552) with this
    /// interpreter: packs carry no .pyc, and without this each import compiles in memory.
    #[arg(long, value_name = "PYTHON", num_args = 0..=1, default_missing_value = "python3")]
    pub compile: Option<PathBuf>,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The pack.
    pub pack: PathBuf,
    /// Only this target of the pack (as listed in its manifest, e.g. workflow:train).
    pub target: Option<String>,
    /// Interpreter to import with (default: python3 on PATH).
    #[arg(long, default_value = "python3")]
    pub python: PathBuf,
    /// Cache directory to unpack into (as for unpack).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
}

const RUN_EXAMPLES: &str = "\
Examples:
  lfm run --memory 2G --cores 1.5 --wall 10m --report r.json -- python job.py
  lfm run --sandbox ./work --series ts.jsonl -- ./simulate --steps 100
  lfm run --summary-format resource-monitor --report r.json -- cmd
  lfm run --gpus 1 --gpu-memory 10G -- python train.py   one GPU of its own, limited
  lfm run --backend rlimit -- cmd        force a backend (default: auto)
  lfm run -- cmd                         measure only, no limits

Backends (auto picks the first that works): cgroup2 with delegated controllers, cgroup1
(root or a delegated v1 hierarchy), cgroup2 without controllers (tracking and kill only),
rlimit + /proc polling (any user). The report names the one used.

Exit codes:
  the command's own exit code when it ended normally
  128+N  the command died of signal N
  125    a limit was exceeded (the report's limits_exceeded says which)
  69     --gpus: the node has fewer GPUs than asked (or none)
  75     --gpus: too few GPUs were free within --gpu-wait-timeout
  126    the command is not executable
  127    the command was not found
  70     the monitor itself failed
  2      bad command line (unknown unit, zero or negative limit)";

/// Limits, outputs and control of one monitored run: shared by `run` and `call`.
#[derive(Args)]
pub struct MonitorArgs {
    /// Memory limit for the whole tree (e.g. 512M, 2G).
    #[arg(long, value_name = "SIZE", allow_negative_numbers = true)]
    pub memory: Option<String>,
    /// CPU limit in cores (e.g. 1.5).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub cores: Option<String>,
    /// Wall-time limit (e.g. 90s, 10m, 2h).
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub wall: Option<String>,
    /// Disk limit for the sandbox directory (e.g. 1G); needs --sandbox.
    #[arg(
        long,
        value_name = "SIZE",
        requires = "sandbox",
        allow_negative_numbers = true
    )]
    pub disk: Option<String>,
    /// Most processes alive at once; a fork bomb beyond it is contained and killed.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub processes: Option<String>,
    /// RLIMIT_AS address-space cap. Off unless asked: numpy/OpenBLAS and the JVM reserve far
    /// more address space than they use and fail under it; prefer --memory.
    #[arg(long, value_name = "SIZE")]
    pub address_space: Option<String>,
    /// GPUs the run holds alone on the node (no other lfm run gets them meanwhile), exported
    /// as CUDA_VISIBLE_DEVICES and measured with NVML (docs/gpu.md). Devices come from NVML,
    /// or from LFM_GPUS (indices or UUIDs) where set. `auto` (with --auto): as many as the
    /// category's history says.
    #[arg(long, value_name = "N|auto")]
    pub gpus: Option<String>,
    /// GPU memory limit of the run's processes (e.g. 10G), enforced by sampling: the run is
    /// killed at the first sample over it.
    #[arg(
        long,
        value_name = "SIZE",
        requires = "gpus",
        allow_negative_numbers = true
    )]
    pub gpu_memory: Option<String>,
    /// How long to wait for enough free GPUs before failing (default: fail at once).
    #[arg(long, value_name = "DURATION", requires = "gpus", default_value = "0s")]
    pub gpu_wait_timeout: String,
    /// A process of the run on a GPU it was not given: `note` it in the report, or `kill` it.
    #[arg(long, value_enum, requires = "gpus", default_value_t = GpuViolationArg::Note)]
    pub gpu_violation: GpuViolationArg,
    /// Working directory of the command (created if missing); its size is the disk measure.
    /// `--sandbox .` measures the current directory. Without it, disk is not measured.
    #[arg(long, value_name = "DIR")]
    pub sandbox: Option<PathBuf>,
    /// Write the report here (`-` for stdout). Always written, also on limits and signals.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Write one JSON sample per line here (time, cpu, cores, memory, processes, I/O, disk).
    #[arg(long, value_name = "FILE")]
    pub series: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = SummaryFormat::Lfm)]
    pub summary_format: SummaryFormat,
    /// How the run is contained.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// After SIGINT/SIGTERM to lfm is forwarded, how long the tree gets before SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    pub grace: String,
    /// Category name recorded in the report; the run is then recorded in the history.
    #[arg(long)]
    pub category: Option<String>,
    /// Memory, cores and (with --sandbox) disk limits the user did not give come from the
    /// category's history; a run that ran out of one is retried at the strategy's next
    /// allocation. Needs --category (call: the function's name by default).
    #[arg(long)]
    pub auto: bool,
    /// With --auto: how many larger attempts after the first.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub max_retries: u32,
    /// With --auto: the sizing strategy (docs/sizing.md).
    #[arg(long, default_value = "best-so-far", value_name = "S", value_parser = strategies())]
    pub strategy: String,
    /// The history file (default: $LFM_HISTORY, else ~/.local/share/lfm/history-HOST.sqlite).
    #[arg(long, value_name = "PATH")]
    pub history: Option<PathBuf>,
    /// No human summary on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The input size of a run, known before it runs (docs/sizing.md "Input size").
#[derive(Args)]
pub struct InputArgs {
    /// The run's input files: their total size is its input size, recorded in the Report and
    /// the history (`input_bytes`), which the input-aware sizing strategies size from.
    #[arg(long = "input", value_name = "FILE", num_args = 1.., conflicts_with = "input_size")]
    pub inputs: Vec<PathBuf>,
    /// The run's input size instead of files (bytes, or 512M, 2G).
    #[arg(long, value_name = "BYTES")]
    pub input_size: Option<String>,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub monitor: MonitorArgs,
    #[command(flatten)]
    pub input: InputArgs,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum SummaryFormat {
    /// The lfm Report (docs/report.md).
    Lfm,
    /// cctools resource_monitor's summary: its field names, units and [value, "unit"] pairs.
    ResourceMonitor,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum GpuViolationArg {
    Note,
    Kill,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum BackendArg {
    Auto,
    Cgroup2,
    Cgroup1,
    Rlimit,
}

const TOP_EXAMPLES: &str = "\
Examples:
  lfm analyze workflow.py:train                what train needs, and why
  lfm pack workflow.py:train --env ~/envs/sci  a tar.zst of just that, for the workers
  lfm call workflow.py:train --args '[\"data.txt\"]' --memory 2G
                                               one call, limited and measured
  lfm serve --socket /tmp/lfm.sock --slots 4   warm calls for a workflow system
  lfm history && lfm size --category train     what ran, and the next allocation
  lfm completions bash > ~/.local/share/bash-completion/completions/lfm

Each command has its own --help with examples.";

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

    /// Use no cache: parse every file and compute every closure again.
    ///
    /// By default, per-file parse results are cached by content hash, and compact JSON output
    /// is stored per request and replayed while nothing it depends on has changed. The
    /// interpreter's answers and the installed-distribution index, checked against their
    /// stamps, are still kept.
    #[arg(long)]
    pub no_cache: bool,

    /// Where the caches live (default: $LFM_CACHE_DIR, $XDG_CACHE_HOME/lfm or ~/.cache/lfm):
    /// parse results, stored outputs, the interpreter's answers and the distribution index.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Only the summary line per target in the table format.
    #[arg(long, short)]
    pub quiet: bool,

    /// Which closure of function targets: `slice` (what the function itself needs, what
    /// `lfm call` runs) or `import` (also what importing its module runs, parent packages
    /// included: what a function pickled by reference needs). Module targets always get the
    /// import closure.
    #[arg(long, value_enum, default_value_t = Closure::Slice)]
    pub closure: Closure,

    /// Leave out files and directories of a directory target (repeatable), gitignore-like:
    /// `tests/`, `*_test.py`, `docs/conf.py` (relative to the directory).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Every function's closure in full in the table format, also for directory targets
    /// (which otherwise get one line per module).
    #[arg(long)]
    pub functions: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Closure {
    Slice,
    Import,
}

impl From<Closure> for lfm_analyzer::spec::ClosureKind {
    fn from(closure: Closure) -> Self {
        match closure {
            Closure::Slice => lfm_analyzer::spec::ClosureKind::Slice,
            Closure::Import => lfm_analyzer::spec::ClosureKind::Import,
        }
    }
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

const USAGE_EXAMPLES: &str = "\
Examples:
  lfm usage                                   every recorded call
  lfm usage --category train --since 7d       one category, the last week
  lfm usage --since 2026-11-01 --format json  (docs/usage.md)
  lfm usage --install-hook /opt/python3.11 --site /shared/lfm-usage
                                              log every process of that installation
  lfm usage --site /shared/lfm-usage --since 30d --plot top.svg
                                              who imported what, across nodes

From the history: the modules and distributions the calls of `lfm call` and `lfm serve`
imported (calls, categories, last used); modules imported that the function's static closure
does not list (an analyzer miss: the module and the call); and per category what its closure
packs that no call imported (candidates to slim).";

#[derive(Args)]
pub struct CacheArgs {
    /// Remove every unpacked pack no process uses, and the analyze caches.
    #[arg(long, conflicts_with = "prune")]
    pub clean: bool,
    /// Evict least recently used packs (never one in use) down to the budget, or to SIZE.
    #[arg(long, value_name = "SIZE", num_args = 0..=1, default_missing_value = "")]
    pub prune: Option<String>,
    /// The pack cache (default: $LFM_CACHE_DIR/packs, $XDG_CACHE_HOME/lfm/packs, ~/.cache/lfm/packs).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// The Python client's shipped packs (its node cache's shipped/) instead of the pack cache:
    /// under the same budget, evicted by the same rule.
    #[arg(long, value_name = "DIR", conflicts_with = "cache")]
    pub shipped: Option<PathBuf>,
}

const CACHE_EXAMPLES: &str = "\
Examples:
  lfm cache                 what each cache holds, its budget, which packs are in use
  lfm cache --prune         evict least recently used packs down to the budget
  lfm cache --prune 5G      ... down to 5 GiB
  lfm cache --clean         remove every pack no process uses, and the analyze caches
  lfm cache --shipped /tmp/lfm-1000/shipped --prune
                            evict the Python client's shipped packs down to the budget

The pack cache's budget is $LFM_PACK_CACHE_MAX when set, else 25% of the free space of its
filesystem (counting what it holds) and at most 20 GiB; a new extraction evicts down to it.
The analyze caches' budget is $LFM_ANALYZE_CACHE_MAX when set, else 1 GiB, for the parse
summaries and the stored results each: a run that writes one evicts its least recently used
entries down to it. A run reads only the entries of the files it analyses.";

#[derive(Args)]
pub struct UsageArgs {
    /// Only the calls of this category.
    #[arg(long)]
    pub category: Option<String>,
    /// Only calls recorded since: a duration ago (`12h`, `7d`), a date (`2026-11-01`, UTC) or
    /// a Unix time.
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Output format: `table` (for people), `json` or `csv` (docs/usage.md).
    #[arg(long, value_enum, default_value_t = HistoryFormat::Table)]
    pub format: HistoryFormat,
    /// The history file (default: $LFM_HISTORY, else ~/.local/share/lfm/history-HOST.sqlite).
    #[arg(long, value_name = "PATH")]
    pub history: Option<PathBuf>,
    #[command(flatten)]
    pub site: SiteUsageArgs,
}

/// `lfm usage`'s site-wide half: every Python process of a hooked installation (docs/usage.md).
#[derive(Args)]
pub struct SiteUsageArgs {
    /// Summarize every site usage log under DIR (not the history); with --install-hook, the
    /// directory the hook logs to.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["history", "category"])]
    pub site: Option<PathBuf>,
    /// Log the imports of every Python process of the installation under PREFIX (and of its
    /// venvs) into --site DIR.
    #[arg(long, value_name = "PREFIX", requires = "site")]
    pub install_hook: Option<PathBuf>,
    /// Remove the hook from the installation under PREFIX.
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["site", "install_hook"])]
    pub remove_hook: Option<PathBuf>,
    /// With --site: an SVG of the most used distributions' processes per day.
    #[arg(long, value_name = "FILE.svg", requires = "site")]
    pub plot: Option<PathBuf>,
}

const PLOT_EXAMPLES: &str = "\
Examples:
  lfm run --memory 2G --report r.json --series ts.jsonl -- python job.py
  lfm plot r.json ts.jsonl -o run.svg            memory, cores, disk over time; limits; the kill
  lfm plot --history --category train -o train.svg
                                                 peaks per resource, retries, next allocation
  lfm plot --history --node -o node.svg          memory lfm serve's calls held vs used over time

A run's plot takes its Report, its series, or both (each file is told by its content): the
series gives the lines over time, the Report the limits and how the run ended.";

#[derive(Args)]
pub struct PlotArgs {
    /// A Report (`--report`) and/or the series of the same run (`--series`).
    #[arg(value_name = "REPORT.json|SERIES.jsonl", conflicts_with = "history", num_args = 0..=2)]
    pub inputs: Vec<PathBuf>,
    /// The SVG to write.
    #[arg(short, long, value_name = "OUT.svg")]
    pub output: PathBuf,
    /// Plot a category's history instead (optionally this history file; default:
    /// $LFM_HISTORY, else ~/.local/share/lfm/history-HOST.sqlite).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub history: Option<String>,
    /// With --history: the category.
    #[arg(long)]
    pub category: Option<String>,
    /// With --history: the memory served calls held (allocations) and used (peaks) on the node
    /// over time (of --category's calls, or all), instead of one category's peaks.
    #[arg(long, requires = "history")]
    pub node: bool,
    /// With --history: the strategy whose next allocation is drawn.
    #[arg(long, default_value = "best-so-far", value_name = "S", value_parser = strategies())]
    pub strategy: String,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every flag and argument of every subcommand says what it is for, and every subcommand
    /// shows examples, as `lfm --help` does.
    #[test]
    fn every_subcommand_describes_every_flag_and_shows_examples() {
        let mut lfm = Cli::command();
        lfm.build();
        let mut holes = Vec::new();
        for subcommand in lfm.get_subcommands().filter(|s| s.get_name() != "help") {
            let name = subcommand.get_name();
            let after = subcommand.get_after_help().map(|h| h.to_string());
            if !after.is_some_and(|help| help.contains("Examples:\n  lfm ")) {
                holes.push(format!("lfm {name}: no examples"));
            }
            let described = |arg: &clap::Arg| arg.get_help().is_some() || arg.is_hide_set();
            for arg in subcommand.get_arguments().filter(|arg| !described(arg)) {
                holes.push(format!("lfm {name} {}: no description", arg.get_id()));
            }
        }
        assert!(holes.is_empty(), "{}", holes.join("\n"));
    }

    /// A flag that takes one of a fixed set of words lists them in its help.
    #[test]
    fn a_strategy_flag_lists_the_strategies() {
        let mut lfm = Cli::command();
        let help = lfm
            .find_subcommand_mut("size")
            .unwrap()
            .render_long_help()
            .to_string();
        for strategy in ["best-so-far", "max-seen", "greedy-bucketing", "sizey"] {
            assert!(help.contains(strategy), "{strategy}: {help}");
        }
    }
}
