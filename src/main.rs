//! The `lfm` command: argument parsing and dispatch. Each subcommand lives in src/commands/.

mod cli;
mod commands;
mod monitoring;
mod plots;

use clap::Parser;

// The analyzer allocates many small short-lived values per closure; glibc malloc spent
// a third of the run in malloc/free on the pandas benchmark. Built without transparent huge
// pages (feature no_thp): each purge and re-fault zeroed a whole 2 MiB page, which cost
// ~0.5 s of system time and 30-40 MiB of peak memory on the whole-site-packages bench.
// Wrapped so that parsing allocates each file's syntax tree in a per-thread arena, freed at
// once (lfm_analyzer::scratch).
#[cfg(not(any(feature = "bench-system-alloc", feature = "bench-mimalloc-only")))]
#[global_allocator]
static ALLOCATOR: lfm_analyzer::scratch::ScratchAlloc<mimalloc::MiMalloc> =
    lfm_analyzer::scratch::ScratchAlloc(mimalloc::MiMalloc);

// The allocators the default is weighed against (bench/alloc_json.sh, docs/benchmarks.md).
#[cfg(feature = "bench-mimalloc-only")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Make the allocator give freed pages back to the kernel 10 ms after they are freed, not a
/// second later (mimalloc 3's default; its arenas wait ten times that). `lfm analyze` frees
/// its parse and resolve phases' tables and then allocates the closures' on other threads,
/// which cannot reuse the freed pages in time: on the bench site-packages tree the wait kept
/// ~14 MiB more resident at the peak (~131 against ~117 MiB with a 10 ms delay). The
/// `MIMALLOC_PURGE_DELAY` variable, when set, still decides.
#[cfg(not(feature = "bench-system-alloc"))]
pub(crate) fn purge_freed_pages_soon() {
    // `mi_option_purge_delay` in mimalloc 3's `mi_option_t` (libmimalloc-sys binds it only
    // with its `extended` feature).
    const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
    extern "C" {
        fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options, which it reads atomically at each purge.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 10) }
    }
}

#[cfg(feature = "bench-system-alloc")]
pub(crate) fn purge_freed_pages_soon() {}

/// Die of SIGPIPE, as `cat` and `ls` do, when what reads the output stops reading
/// (`lfm size ... | head -1`): Rust ignores SIGPIPE, so each print to a closed pipe would
/// panic or fail. Not for the commands that run code (`run`, `call`, `serve`): they write to
/// their children's and clients' pipes, where a closed one is an error to report and handle,
/// never a reason to leave a run half-done.
fn die_quietly_when_output_closes(command: &cli::Command) {
    use cli::Command::{Call, Run, Serve};
    if !matches!(command, Run(_) | Call(_) | Serve(_)) {
        // SAFETY: restores the default disposition before any thread or child exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
}

/// The command line, or clap's error with a hint where the usual slip is plain.
fn parse_command_line() -> cli::Cli {
    let error = match cli::Cli::try_parse() {
        Ok(cli) => return cli,
        Err(error) => error,
    };
    let args: Vec<String> = std::env::args().collect();
    let hint = cli::hint_for(&error, &args);
    let code = error.exit_code();
    let _ = error.print();
    if let Some(hint) = hint {
        eprintln!("{hint}");
    }
    std::process::exit(code);
}

fn main() {
    let cli = parse_command_line();
    die_quietly_when_output_closes(&cli.command);
    let code = match cli.command {
        cli::Command::Analyze(args) => commands::analyze::run(args),
        cli::Command::Run(args) => commands::run::run(*args),
        cli::Command::Pack(args) => commands::pack::pack(args),
        cli::Command::Unpack(args) => commands::pack::unpack(args),
        cli::Command::Verify(args) => commands::pack::verify(args),
        cli::Command::Call(args) => commands::call::call(*args),
        cli::Command::Serve(args) => commands::serve::serve(*args),
        cli::Command::Simulate(args) => commands::simulate::simulate_trace(args),
        cli::Command::History(args) => commands::sizing::history(args),
        cli::Command::Size(args) => commands::sizing::size(args),
        cli::Command::Usage(args) => commands::usage::usage(args),
        cli::Command::Cache(args) => commands::cache::cache(args),
        cli::Command::Plot(args) => commands::plot::plot(args),
        cli::Command::Completions(args) => {
            use clap::CommandFactory;
            let mut command = cli::Cli::command();
            clap_complete::generate(args.shell, &mut command, "lfm", &mut std::io::stdout());
            0
        }
    };
    std::process::exit(code);
}
