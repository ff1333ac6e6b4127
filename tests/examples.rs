//! Every example `lfm --help`, each subcommand's `--help` and README.md print, run as a user
//! would on the bundled samples: each must exit 0. The examples are read from the help text
//! and README at run time, so an example added or changed there is checked as it is written.
//!
//! The examples name a user's files (`workflow.py`, `data.txt`, `~/envs/sci`, `bioblast.csv`,
//! `job.py`, a command `cmd`): the test makes them in a scratch directory, from
//! samples/workflow and small stand-ins, with HOME there and `~/envs/sci` a venv of numpy,
//! pandas and scikit-learn whose `bin` is first on PATH (the user's python3).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LFM: &str = env!("CARGO_BIN_EXE_lfm");
const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Examples not run here, by a piece of their text, and why.
const SKIPPED: &[(&str, &str)] = &[
    (
        "--gpus",
        "needs a GPU (tests/gpu.rs runs them on a simulated NVML)",
    ),
    (
        "/shared/lfm-usage",
        "an admin's installation and shared log directory (tests/site_usage_doc.rs runs docs/usage.md's example on a copied installation)",
    ),
    (
        "--socket",
        "serves on a socket until stopped (tests/serve.rs covers it)",
    ),
];

/// Examples that do not yet run as documented, by a piece of their text, and why: each is
/// still run, and must still fail (strict, as pytest's xfail): once fixed, its entry goes.
const KNOWN_BROKEN: &[(&str, &str)] = &[];

/// Examples documented to end otherwise than with 0, by a piece of their text: the exit code
/// and where it is documented.
const DOCUMENTED_EXITS: &[(&str, i32, &str)] = &[(
    "samples/plot/grow.py",
    125,
    "README: grow.py is \"a job that outgrows its memory limit\" (125: a limit was exceeded)",
)];

/// The most one example may take.
const EXAMPLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The subcommands, in the order `lfm --help` lists them.
fn subcommands() -> Vec<String> {
    let help = help(&[]);
    let commands = help.split("Commands:\n").nth(1).unwrap_or_default();
    commands
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn help(subcommand: &[&str]) -> String {
    let output = Command::new(LFM)
        .args(subcommand)
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success(), "lfm {subcommand:?} --help");
    String::from_utf8(output.stdout).unwrap()
}

/// The commands of a help text's `Examples:` section: a line indented two spaces, its
/// description (after two spaces) cut, a trailing `\` joined with the next line; a line
/// indented deeper that continues no command is a description.
fn help_examples(help: &str) -> Vec<String> {
    let Some(section) = help.split("Examples:\n").nth(1) else {
        return Vec::new();
    };
    let mut examples: Vec<String> = Vec::new();
    let mut continued = false;
    for line in section.lines().take_while(|line| !line.trim().is_empty()) {
        let text = line.trim();
        if continued {
            let last = examples.last_mut().unwrap();
            let (command, more) = without_backslash(text.split("  ").next().unwrap_or_default());
            last.push(' ');
            last.push_str(command);
            continued = more;
        } else if line.starts_with("  ") && !line.starts_with("   ") {
            let (command, more) = without_backslash(text.split("  ").next().unwrap_or_default());
            examples.push(command.to_string());
            continued = more;
        }
    }
    examples
}

fn without_backslash(command: &str) -> (&str, bool) {
    match command.trim_end().strip_suffix('\\') {
        Some(start) => (start.trim_end(), true),
        None => (command.trim_end(), false),
    }
}

/// The shell lines of README.md's code blocks (not those marked as another language) that run
/// lfm, `# comments` cut and `\` continuations joined.
fn readme_examples(readme: &str) -> Vec<String> {
    let mut examples: Vec<String> = Vec::new();
    let mut in_block = false;
    let mut shell = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if let Some(language) = line.trim_start().strip_prefix("```") {
            in_block = !in_block;
            shell = ["", "sh", "bash", "console", "shell"].contains(&language.trim());
            continue;
        }
        if !in_block || !shell {
            continue;
        }
        let text = line.trim().trim_start_matches("$ ");
        let text = text.split(" # ").next().unwrap_or_default().trim_end();
        let (text, more) = without_backslash(text);
        pending.push_str(text);
        if more {
            pending.push(' ');
            continue;
        }
        let command = std::mem::take(&mut pending);
        let runs_lfm = command.starts_with("lfm ")
            || command.contains("$(lfm ")
            || command.contains("| lfm ")
            || command.contains("&& lfm ");
        if runs_lfm {
            examples.push(command);
        }
    }
    examples
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A trace with bioblast's columns, categories `align` and `blast`.
fn trace() -> String {
    let mut csv = String::from("category,cores,memory,disk,wall_time\n");
    for i in 0..40 {
        let category = if i % 3 == 0 { "blast" } else { "align" };
        csv.push_str(&format!(
            "{category},1,{},{},{}\n",
            200 + i * 7,
            10 + i,
            5 + i
        ));
    }
    csv
}

/// nf-core's traces as Sizey has them.
fn sizey_trace() -> String {
    let mut csv = String::from("workflow,category,memory_mb,wall_seconds,sizey_eligible\n");
    for i in 0..40 {
        csv.push_str(&format!(
            "rnaseq,star,{},{},{}\n",
            900 + i * 11,
            30 + i,
            i % 4 != 0
        ));
    }
    csv.replace("true", "1").replace("false", "0")
}

/// The scratch directory the examples run in: the files and commands they name.
fn scratch(sci: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name);
    for file in ["workflow.py", "helpers.py"] {
        std::fs::copy(
            Path::new(REPO).join("samples/workflow").join(file),
            at(file),
        )
        .unwrap();
    }
    write(&at("data.txt"), "1\n2\n3\n");
    write(&at("job.py"), "print('job done')\n");
    write(&at("src/mypkg/__init__.py"), "");
    write(
        &at("src/mypkg/stages.py"),
        "import json\n\n\ndef train(path):\n    return json.dumps(open(path).read().split())\n",
    );
    write(&at("bioblast.csv"), &trace());
    write(&at("nfcore_sizey.csv"), &sizey_trace());
    for command in ["bin/cmd", "bin/blastall", "simulate"] {
        executable(&at(command), "#!/bin/sh\nexit 0\n");
    }
    std::os::unix::fs::symlink(Path::new(REPO).join("samples"), at("samples")).unwrap();
    for directory in [
        "target",
        "home/envs",
        "home/.zfunc",
        "home/.config/fish/completions",
        "home/.local/share/bash-completion/completions",
    ] {
        std::fs::create_dir_all(at(directory)).unwrap();
    }
    std::os::unix::fs::symlink(sci, at("home/envs/sci")).unwrap();
    // The README plots the committed sample run: a copy, so that examples never write into
    // the repository.
    copy_dir(&Path::new(REPO).join("docs/img"), &at("docs/img"));
    let pickled = Command::new(sci.join("bin/python"))
        .args([
            "-c",
            "import pickle; open('args.pkl', 'wb').write(pickle.dumps((['data.txt'], {})))",
        ])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(pickled.success());
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Runs `example` with bash in `dir`; None when it exited with `expected`, else what went wrong.
fn run(example: &str, expected: i32, dir: &Path, sci: &Path) -> Option<String> {
    let lfm_dir = PathBuf::from(LFM).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        [lfm_dir, dir.join("bin"), sci.join("bin")]
            .into_iter()
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )
    .unwrap();
    let mut child = Command::new("bash")
        .args(["-o", "pipefail", "-c", example])
        .current_dir(dir)
        .env("PATH", path)
        .env("HOME", dir.join("home"))
        .env("LFM_HISTORY", dir.join("history.sqlite"))
        .env("LFM_CACHE_DIR", dir.join("cache"))
        .env_remove("XDG_CACHE_HOME")
        .env_remove("VIRTUAL_ENV")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > EXAMPLE_TIMEOUT {
            let _ = child.kill();
            return Some(format!("still running after {EXAMPLE_TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    (output.status.code() != Some(expected)).then(|| {
        format!(
            "{}\n--- stderr ---\n{}\n--- stdout ---\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Every documented example, where it is printed, in the order a reader meets them.
fn documented_examples() -> Vec<(String, String)> {
    let mut examples: Vec<(String, String)> = help_examples(&help(&[]))
        .into_iter()
        .map(|e| ("lfm --help".to_string(), e))
        .collect();
    for subcommand in subcommands() {
        for example in help_examples(&help(&[&subcommand])) {
            if !examples.iter().any(|(_, known)| *known == example) {
                examples.push((format!("lfm {subcommand} --help"), example));
            }
        }
    }
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    for example in readme_examples(&readme) {
        examples.push(("README.md".to_string(), example));
    }
    examples
}

#[test]
fn the_help_and_readme_examples_are_found() {
    let examples = documented_examples();
    let from = |source: &str| examples.iter().filter(|(s, _)| s == source).count();
    assert!(from("lfm --help") >= 4, "{examples:?}");
    assert!(from("lfm size --help") >= 2, "{examples:?}");
    assert!(
        examples.iter().any(
            |(_, e)| e.starts_with("lfm simulate --trace nfcore_sizey.csv")
                && e.ends_with("--where sizey_eligible=1")
        ),
        "a continued example is joined: {examples:?}"
    );
}

#[test]
fn every_documented_example_exits_as_documented() {
    let Some(sci) = common::sci_venv() else {
        return;
    };
    let dir = scratch(&sci);
    let mut failed = Vec::new();
    for (source, example) in documented_examples() {
        if let Some((_, why)) = SKIPPED.iter().find(|(piece, _)| example.contains(piece)) {
            eprintln!("SKIPPED ({source}): {example}\n  {why}");
            continue;
        }
        let expected = DOCUMENTED_EXITS
            .iter()
            .find(|(piece, _, _)| example.contains(piece));
        let code = expected.map_or(0, |(_, code, why)| {
            eprintln!("expecting exit {code}: {why}");
            *code
        });
        eprintln!("running ({source}): {example}");
        let failure = run(&example, code, dir.path(), &sci);
        let broken = KNOWN_BROKEN
            .iter()
            .find(|(piece, _)| example.contains(piece));
        match (failure, broken) {
            (Some(failure), None) => failed.push(format!(
                "{source}: {example} (expected exit {code})\n{failure}"
            )),
            (None, Some((_, why))) => failed.push(format!(
                "{source}: {example} now runs as documented: remove it from KNOWN_BROKEN ({why})"
            )),
            (Some(_), Some((_, why))) => eprintln!("  still broken, as known: {why}"),
            (None, None) => {}
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
