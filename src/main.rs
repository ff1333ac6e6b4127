//! The `lfm` command: argument parsing and dispatch. Each subcommand lives in src/commands/.

mod cli;
mod commands;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let code = match cli.command {
        cli::Command::Analyze(args) => commands::analyze::run(args),
    };
    std::process::exit(code);
}
