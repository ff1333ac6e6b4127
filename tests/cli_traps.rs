//! The command line as a newcomer meets it (issue 56): closed pipes, sizes without a unit,
//! the two pack routes, how a call ended, hints where a command line slips.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{assert_succeeded, lfm_in};

const LFM: &str = env!("CARGO_BIN_EXE_lfm");
const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/samples");

/// A history holding two categories of imported runs, in `dir`.
fn seeded_history(dir: &Path) -> String {
    let trace = dir.join("trace.csv");
    let mut csv = String::from("category,cores,memory,disk,cpu_time,wall_time\n");
    for i in 0..30 {
        let category = if i % 2 == 0 { "a" } else { "b" };
        csv.push_str(&format!("{category},1,{},20,0,{}\n", 100 + i, 1 + i));
    }
    std::fs::write(&trace, csv).unwrap();
    let history = dir.join("h.sqlite").display().to_string();
    let trace = trace.display().to_string();
    assert_succeeded(&lfm_in(
        "/",
        &["history", "--history", &history, "--import", &trace],
    ));
    history
}

/// Runs lfm with its stdout closed before it writes: what `| head -1` does to a long output.
fn into_closed_pipe(args: &[&str], history: &str) -> Output {
    let mut child = Command::new(LFM)
        .args(args)
        .env("LFM_HISTORY", history)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

#[test]
fn every_command_exits_quietly_when_its_output_closes_early() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let history = seeded_history(dir.path());
    let trace = dir.path().join("trace.csv").display().to_string();
    let cache = dir.path().join("packs").display().to_string();
    let workflow = format!("{SAMPLES}/workflow");
    let commands: Vec<Vec<&str>> = vec![
        vec!["size", "--category", "a"],
        vec!["cache", "--cache", &cache],
        vec!["history"],
        vec!["history", "--format", "csv"],
        vec!["analyze", &workflow, "--no-cache"],
        vec!["analyze", &workflow, "--format", "json", "--no-cache"],
        vec!["simulate", "--trace", &trace],
        vec!["usage"],
        vec!["completions", "bash"],
        vec!["--help"],
        vec!["size", "--help"],
    ];
    for args in commands {
        let output = into_closed_pipe(&args, &history);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let quiet = output.status.success() || output.status.signal() == Some(libc::SIGPIPE);
        assert!(
            quiet && !stderr.contains("panicked"),
            "lfm {args:?}: {} {stderr}",
            output.status
        );
    }
}

#[test]
fn a_bare_number_of_a_few_bytes_is_refused_with_the_units() {
    let output = lfm_in("/", &["run", "--memory", "2", "--", "true"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--memory: 2 is less than 4 MiB and has no unit")
            && stderr.contains("512M, 2G"),
        "{stderr}"
    );
    let enough = lfm_in("/", &["run", "-q", "--memory", "4194304", "--", "true"]);
    assert_succeeded(&enough);
}

#[test]
fn a_command_without_its_double_dash_gets_a_hint() {
    let output = lfm_in(
        "/",
        &["run", "--memory", "100M", "python3", "-c", "print(1)"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "hint: the command to run goes after `--`: lfm run --memory 100M -- python3 -c 'print(1)'"
        ),
        "{stderr}"
    );
}

#[test]
fn a_missing_sibling_module_suggests_root_not_installing() {
    let output = lfm_in("/", &["analyze", SAMPLES, "--no-cache", "-q"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let workflow = format!("{SAMPLES}/workflow");
    assert!(
        stderr.contains(&format!(
            "hint: MISSING helpers is local code in {workflow}, which is no source root: pass --root {workflow}"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("install them"), "{stderr}");
}

/// `job.py` in `dir`: a module whose top level needs what its function does not.
fn job(dir: &Path) -> String {
    let file = dir.join("job.py");
    std::fs::write(
        &file,
        "import json\nimport csv\n\nTABLE = csv.excel\n\n\ndef f(x):\n    return json.dumps(x)\n",
    )
    .unwrap();
    file.display().to_string()
}

fn in_dir(dir: &Path, args: &[&str]) -> Output {
    lfm_in(dir.to_str().unwrap(), args)
}

#[test]
fn both_pack_routes_pack_the_import_closure_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let target = format!("{}:f", job(dir.path()));
    // --python is taken, as by analyze and call.
    let direct = in_dir(
        dir.path(),
        &[
            "pack",
            &target,
            "--python",
            "python3",
            "-o",
            "direct.tar.zst",
        ],
    );
    assert_succeeded(&direct);
    let said = String::from_utf8_lossy(&direct.stderr);
    assert!(
        said.contains("packed the import closure of job:f"),
        "{said}"
    );

    // analyze's default is the slice: packing that Spec needs saying so.
    let slice = in_dir(dir.path(), &["analyze", &target, "--format", "json"]);
    assert_succeeded(&slice);
    std::fs::write(dir.path().join("slice.json"), &slice.stdout).unwrap();
    let refused = in_dir(dir.path(), &["pack", "slice.json", "--python", "python3"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("slice.json holds the slice closure of job:f")
            && stderr.contains("--closure import --format json"),
        "{stderr}"
    );
    let as_slice = in_dir(
        dir.path(),
        &[
            "pack",
            "slice.json",
            "--python",
            "python3",
            "--closure",
            "slice",
            "-o",
            "s.tar.zst",
        ],
    );
    assert_succeeded(&as_slice);
    let said = String::from_utf8_lossy(&as_slice.stderr);
    assert!(said.contains("packed the slice closure of job:f"), "{said}");
    let verified = in_dir(dir.path(), &["verify", "s.tar.zst"]);
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(said.contains("job:f: slice closure"), "{said}");

    let import = in_dir(
        dir.path(),
        &[
            "analyze",
            &target,
            "--closure",
            "import",
            "--format",
            "json",
        ],
    );
    std::fs::write(dir.path().join("import.json"), &import.stdout).unwrap();
    let from_spec = in_dir(
        dir.path(),
        &[
            "pack",
            "import.json",
            "--python",
            "python3",
            "-o",
            "spec.tar.zst",
        ],
    );
    assert_succeeded(&from_spec);
    let verified = in_dir(dir.path(), &["verify", "spec.tar.zst"]);
    assert_succeeded(&verified);
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(said.contains("job:f: import closure"), "{said}");
}

fn history_table(history: &str) -> String {
    let output = lfm_in("/", &["history", "--history", history]);
    assert_succeeded(&output);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn history_shows_how_each_run_ended() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite").display().to_string();
    let run = |category: &str, script: &str| {
        lfm_in(
            "/",
            &[
                "run",
                "-q",
                "--history",
                &history,
                "--category",
                category,
                "--",
                "sh",
                "-c",
                script,
            ],
        )
    };
    assert_eq!(run("failed", "exit 3").status.code(), Some(3));
    assert_eq!(run("killed", "kill -9 $$").status.code(), Some(128 + 9));
    run("fine", "true");
    let table = history_table(&history);
    let ending = |category: &str| -> String {
        let line = table.lines().find(|l| l.contains(category)).unwrap();
        let after = line.split_once(category).unwrap().1.trim_start();
        after.split("  ").next().unwrap().trim().to_string()
    };
    assert_eq!(ending("failed"), "exit 3", "{table}");
    assert_eq!(ending("killed"), "signal 9", "{table}");
    assert_eq!(ending("fine"), "normal", "{table}");
}

#[test]
fn history_shows_the_exception_a_served_call_raised() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite").display().to_string();
    let functions = dir.path().join("fns.py");
    std::fs::write(&functions, "def boom():\n    raise ValueError('no')\n").unwrap();
    let target = format!("{}:boom", functions.display());
    let mut serve = Command::new(LFM)
        .args(["serve", "--function", &target])
        .env("LFM_HISTORY", &history)
        .env("LFM_CACHE_DIR", dir.path().join("cache"))
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let request = serde_json::json!({"id": 1, "function": target, "category": "boom"});
    let mut stdin = serve.stdin.take().unwrap();
    writeln!(stdin, "{request}").unwrap();
    drop(stdin);
    let output = serve.wait_with_output().unwrap();
    let reply = String::from_utf8_lossy(&output.stdout);
    assert!(reply.contains("ValueError"), "{reply}");
    let table = history_table(&history);
    assert!(table.contains("exception ValueError"), "{table}");
}

#[test]
fn size_prints_allocation_strategy_and_reason_on_lines_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let history = seeded_history(dir.path());
    let output = lfm_in("/", &["size", "--category", "a", "--history", &history]);
    assert_succeeded(&output);
    let said = String::from_utf8_lossy(&output.stdout);
    for field in [
        "a: memory",
        "  allocation  ",
        "  strategy    best-so-far",
        "  reason      ",
    ] {
        assert!(
            said.lines().any(|line| line.starts_with(field)),
            "{field:?}: {said}"
        );
    }
}

#[test]
fn history_shows_the_exception_a_called_function_raised() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite").display().to_string();
    let functions = dir.path().join("fns.py");
    std::fs::write(&functions, "def boom():\n    raise ValueError('no')\n").unwrap();
    let target = format!("{}:boom", functions.display());
    let cache = dir.path().join("cache").display().to_string();
    let called = lfm_in(
        "/",
        &[
            "call",
            "-q",
            "--history",
            &history,
            "--cache-dir",
            &cache,
            &target,
        ],
    );
    assert_eq!(called.status.code(), Some(1), "{called:?}");
    let table = history_table(&history);
    assert!(table.contains("exception ValueError"), "{table}");
}
