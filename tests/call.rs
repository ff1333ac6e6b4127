//! `lfm call`: one function, one fresh interpreter, the Report of `lfm run` plus the call.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_succeeded, assert_succeeded_with};

fn fixtures() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/serve")
}

fn call(args: &[&str]) -> (Output, serde_json::Value) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut full = vec![
        "call",
        "--quiet",
        "--report",
        report.path().to_str().unwrap(),
    ];
    full.extend_from_slice(args);
    let output = common::lfm_in(fixtures(), &full);
    let text = std::fs::read_to_string(report.path()).unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    (output, value)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[test]
fn a_returned_value_is_printed_as_json_and_the_report_names_the_call() {
    for backend in ["auto", "rlimit"] {
        let (output, report) = call(&[
            "faults.py:add",
            "--import-module",
            "--backend",
            backend,
            "--args",
            "[2]",
            "--kwargs",
            "{\"b\": 40}",
        ]);
        assert_succeeded_with(&output, backend);
        assert_eq!(stdout(&output), "42");
        assert_eq!(report["function"]["target"], "faults.py:add");
        assert_eq!(report["function"]["mode"], "import");
        assert_eq!(report["result"]["type"], "builtins.int");
        assert_eq!(report["exit"]["type"], "normal");
    }
}

#[test]
fn an_exception_is_exit_1_with_the_remote_traceback() {
    let (output, report) = call(&["faults.py:boom", "--import-module"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("raise ValueError(\"bad value\")"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("lfm_runner"),
        "runner frames shown: {stderr}"
    );
    assert_eq!(report["exit"]["type"], "exception");
    assert_eq!(report["exit"]["exception"]["type"], "ValueError");
    assert_eq!(report["exit"]["exception"]["message"], "bad value");
}

#[test]
fn values_that_are_not_json_need_a_result_file() {
    let (output, report) = call(&["faults.py:unpicklable", "--import-module"]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "a lock cannot even be pickled"
    );
    assert_eq!(report["exit"]["type"], "exception");

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("values.py");
    std::fs::write(&script, "def pair():\n    return {1, 2}\n").unwrap();
    let target = format!("{}:pair", script.display());
    let (output, _) = call(&[&target, "--import-module"]);
    assert_eq!(output.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--result-file"));
    let result = dir.path().join("out.pkl");
    let (output, report) = call(&[
        &target,
        "--import-module",
        "--result-file",
        result.to_str().unwrap(),
    ]);
    assert!(output.status.success());
    assert_eq!(report["result"]["format"], "pickle");
    let check = std::process::Command::new("python3")
        .args([
            "-c",
            "import pickle,sys; assert pickle.load(open(sys.argv[1],'rb')) == {1, 2}",
        ])
        .arg(&result)
        .status()
        .unwrap();
    assert!(check.success());
}

#[test]
fn arguments_from_a_pickle_file() {
    let dir = tempfile::tempdir().unwrap();
    let args = dir.path().join("args.pkl");
    let made = std::process::Command::new("python3")
        .args([
            "-c",
            "import pickle,sys; pickle.dump(([5], {'b': 6}), open(sys.argv[1],'wb'))",
        ])
        .arg(&args)
        .status()
        .unwrap();
    assert!(made.success());
    let (output, _) = call(&[
        "faults.py:add",
        "--import-module",
        "--args-file",
        args.to_str().unwrap(),
    ]);
    assert_eq!(stdout(&output), "11");
}

#[test]
fn limits_crashes_and_early_exits_have_their_own_exit_codes() {
    let (output, report) = call(&[
        "faults.py:alloc",
        "--import-module",
        "--args",
        "[300]",
        "--memory",
        "100M",
    ]);
    assert_eq!(output.status.code(), Some(125));
    assert_eq!(
        report["limits_exceeded"]["memory"].as_f64(),
        Some(104857600.0)
    );
    let (output, report) = call(&["faults.py:hard_exit", "--import-module"]);
    assert_eq!(output.status.code(), Some(71));
    assert_eq!(report["exit"]["type"], "error");
    let (output, _) = call(&["faults.py:segfault", "--import-module"]);
    assert_eq!(output.status.code(), Some(128 + 11));
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    for (args, code) in [
        (vec!["faults.py:add", "--args", "{\"a\": 1}"], 2),
        (vec!["faults.py:add", "--kwargs", "[1]"], 2),
        (vec!["faults.py:add", "--args", "not json"], 2),
        (vec!["faults.py", "--import-module"], 2),
        (vec!["missing.py:f"], 3),
    ] {
        let (output, _) = call(&args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!String::from_utf8_lossy(&output.stderr).is_empty());
    }
    assert!(Path::new(fixtures()).join("faults.py").exists());
}

fn call_in(dir: &str, args: &[&str]) -> Output {
    let mut full = vec!["call", "--quiet"];
    full.extend_from_slice(args);
    common::lfm_in(dir, &full)
}

const CALL_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/call");

#[test]
fn only_the_slice_runs_by_default() {
    let output = call_in(CALL_FIXTURES, &["heavy_top.py:summary", "--args", "[3]"]);
    assert_succeeded(&output);
    let value: String = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(value, r#"{"n": 9}"#);
    // A method: its class statement and what that reads.
    let output = call_in(
        CALL_FIXTURES,
        &["heavy_top.py:Model.fit", "--args", "[null, 2]"],
    );
    assert!(!output.status.success(), "an unbound method needs its self");
    // The whole module needs a module nobody has: a clear failure.
    let output = call_in(
        CALL_FIXTURES,
        &["heavy_top.py:summary", "--args", "[3]", "--import-module"],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("No module named 'a_module_nobody_has'"),
        "{stderr}"
    );
}

#[test]
fn the_slice_is_printable() {
    let output = call_in(CALL_FIXTURES, &["heavy_top.py:summary", "--show-slice"]);
    assert!(output.status.success());
    let text = stdout(&output);
    let lines: Vec<u32> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split('|').next()?.trim().parse().ok())
        .collect();
    // import json (2), SCALE (10), helper (14-15), summary (18-19); not the unused import (3),
    // the optional yaml (5-8) nor UNUSED (11).
    assert_eq!(lines, vec![2, 10, 14, 15, 18, 19], "{text}");
    let output = call_in(CALL_FIXTURES, &["heavy_top.py:Model.fit", "--show-slice"]);
    let text = stdout(&output);
    assert!(
        text.contains("   10 | SCALE = 3") && text.contains("   22 | class Model:"),
        "{text}"
    );
    assert!(!text.contains("a_module_nobody_has"), "{text}");
}

fn imported(report: &serde_json::Value) -> Vec<(String, Option<String>)> {
    report["imports"]["modules"]
        .as_array()
        .unwrap_or_else(|| panic!("no import log: {report}"))
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["distribution"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn the_import_log_survives_limits_and_crashes_and_names_the_analyzers_misses() {
    let Some(venv) = common::real_venv() else {
        return;
    };
    let venv = venv.to_str().unwrap();
    let run = |function: &str, extra: &[&str]| {
        let report = tempfile::NamedTempFile::new().unwrap();
        let target = format!("imports.py:{function}");
        let mut args = vec![
            "call",
            "--quiet",
            "--env",
            venv,
            "--report",
            report.path().to_str().unwrap(),
            &target,
        ];
        args.extend_from_slice(extra);
        let output = common::lfm_in(CALL_FIXTURES, &args);
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(report.path()).unwrap()).unwrap();
        (output, report)
    };
    let yaml = ("yaml".to_string(), Some("PyYAML==6.0.2".to_string()));
    let (output, report) = run("lazy_yaml", &[]);
    assert!(output.status.success());
    assert!(imported(&report).contains(&yaml), "{:?}", imported(&report));
    assert!(
        !imported(&report).iter().any(|(name, _)| name == "ast"),
        "the runner's own imports are not the call's"
    );
    assert_eq!(report["imports"]["not_in_closure"], serde_json::Value::Null);

    let (output, report) = run("yaml_then_too_much_memory", &["--memory", "100M"]);
    assert_eq!(output.status.code(), Some(125));
    assert!(
        imported(&report).contains(&yaml),
        "killed by the limit: {:?}",
        imported(&report)
    );

    let (output, report) = run("yaml_then_segfault", &[]);
    assert_eq!(output.status.code(), Some(128 + 11));
    assert!(
        imported(&report).contains(&yaml),
        "segfault: {:?}",
        imported(&report)
    );

    let (output, report) = run("lazy_json", &[]);
    assert!(output.status.success());
    assert_eq!(
        imported(&report).first().map(|(name, _)| name.as_str()),
        Some("json"),
        "loaded by the runner before the call, imported by it: {:?}",
        imported(&report)
    );

    let (output, report) = run("local_plugin_from_config", &[]);
    assert_eq!(stdout(&output), "[\"a\", \"b\"]");
    assert_eq!(
        report["imports"]["not_in_closure"],
        serde_json::json!(["plugin_csv"]),
        "{}",
        report["imports"]
    );

    let (output, report) = run("from_config", &[]);
    assert_eq!(stdout(&output), "\"attr\"");
    assert_eq!(
        report["imports"]["not_in_closure"],
        serde_json::json!(["attr"]),
        "{}",
        report["imports"]
    );
}

#[test]
fn numpy_results_come_back_as_json_and_what_has_none_points_at_a_result_file() {
    let Some(venv) = common::real_venv() else {
        return;
    };
    let venv = venv.to_str().unwrap();
    let call = |target: &str, extra: &[&str]| {
        let mut args = vec!["call", "--quiet", "--env", venv, target];
        args.extend_from_slice(extra);
        common::lfm_in(CALL_FIXTURES, &args)
    };
    let mean = call("scientific.py:mean", &["--args", "[5]"]);
    assert_succeeded(&mean);
    assert_eq!(String::from_utf8_lossy(&mean.stdout).trim(), "2.0");
    let table = call("scientific.py:table", &[]);
    assert_succeeded(&table);
    let table: serde_json::Value = serde_json::from_slice(&table.stdout).unwrap();
    assert_eq!(
        table,
        serde_json::json!({"counts": [1, 2, 0, 1], "total": 4})
    );

    let duration = call("scientific.py:duration", &[]);
    let stderr = String::from_utf8_lossy(&duration.stderr);
    assert_eq!(duration.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("numpy.timedelta64") && stderr.contains("--result-file"),
        "{stderr}"
    );
}

#[test]
fn an_interpreter_that_cannot_run_the_call_is_a_usage_error_naming_it() {
    let false_python = "/bin/false";
    for (python, says) in [
        (
            "/nonexistent/python3",
            "--python /nonexistent/python3: no such executable",
        ),
        ("no-such-python-here", "no such executable on PATH"),
        (
            false_python,
            "the interpreter /bin/false failed to describe itself",
        ),
    ] {
        // Sliced (the analyzer asks the interpreter first) and imported (it only runs it).
        for mode in [&[][..], &["--import-module"][..]] {
            if python == false_python && !mode.is_empty() {
                continue; // it starts, and ends before the runner does: exit 71, not usage
            }
            let mut args = vec!["faults.py:add", "--python", python, "--args", "[1, 2]"];
            args.extend_from_slice(mode);
            let (output, _) = call(&args);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{python} {mode:?}: {stderr}");
            assert!(stderr.contains(says), "{python} {mode:?}: {stderr}");
        }
    }
}

#[test]
fn a_compiled_slice_is_kept_and_an_edit_is_compiled_again() {
    let scratch = tempfile::tempdir().unwrap();
    let (dir, cache) = (scratch.path().join("work"), scratch.path().join("cache"));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("edited.py");
    std::fs::write(
        &source,
        "SCALE = 3\nUNUSED = 1\n\n\ndef f(n):\n    return n * SCALE\n",
    )
    .unwrap();
    let run = || {
        let cache = cache.to_str().unwrap();
        let output = call_in(
            dir.to_str().unwrap(),
            &["--cache-dir", cache, "edited.py:f", "--args", "[2]"],
        );
        assert_succeeded(&output);
        stdout(&output)
    };
    let entries = || -> Vec<std::path::PathBuf> {
        let listed = std::fs::read_dir(cache.join("call-slices")).unwrap();
        listed.map(|e| e.unwrap().path()).collect()
    };
    assert_eq!(run(), "6");
    let kept = entries();
    assert_eq!(kept.len(), 1);
    let written = kept[0].metadata().unwrap().modified().unwrap();
    assert_eq!(run(), "6");
    assert_eq!(entries(), kept);
    assert_eq!(
        kept[0].metadata().unwrap().modified().unwrap(),
        written,
        "reused, not rewritten"
    );
    // The same size and modification time: only the text differs.
    let before = source.metadata().unwrap().modified().unwrap();
    std::fs::write(
        &source,
        "SCALE = 4\nUNUSED = 1\n\n\ndef f(n):\n    return n * SCALE\n",
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&source)
        .unwrap()
        .set_modified(before)
        .unwrap();
    assert_eq!(run(), "8");
}

/// `lfm call --quiet task.py:f --args [2]` run in a fresh work directory whose task.py is
/// `source`, with an empty HOME, no XDG_CACHE_HOME nor LFM_CACHE_DIR, and its history in the
/// scratch directory; `cache_given` tells the call of the cache directory (not made
/// beforehand), an option before the target or the environment.
fn call_with_an_empty_home(
    source: &str,
    cache_given: impl FnOnce(&mut Command, &Path),
) -> HomeCall {
    let scratch = tempfile::tempdir().unwrap();
    let (dir, cache, home) = (
        scratch.path().join("work"),
        scratch.path().join("cache"),
        scratch.path().join("home"),
    );
    for made in [&dir, &home] {
        std::fs::create_dir_all(made).unwrap();
    }
    std::fs::write(dir.join("task.py"), source).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_lfm"));
    command
        .args(["call", "--quiet"])
        .current_dir(&dir)
        .env("HOME", &home)
        .env("LFM_HISTORY", scratch.path().join("history.sqlite"))
        .env_remove("XDG_CACHE_HOME")
        .env_remove("LFM_CACHE_DIR")
        .stdin(std::process::Stdio::null());
    cache_given(&mut command, &cache);
    let output = command
        .args(["task.py:f", "--args", "[2]"])
        .output()
        .unwrap();
    HomeCall {
        output,
        cache,
        home,
        _scratch: scratch,
    }
}

/// What [`call_with_an_empty_home`] ran: its output and its directories, kept while this lives.
struct HomeCall {
    output: Output,
    cache: PathBuf,
    home: PathBuf,
    _scratch: tempfile::TempDir,
}

#[test]
fn a_call_under_lfm_cache_dir_keeps_its_runner_there_and_writes_nothing_to_home() {
    let HomeCall {
        output,
        cache,
        home,
        _scratch,
    } = call_with_an_empty_home("def f(n):\n    return n + 1\n", |command, cache| {
        command.env("LFM_CACHE_DIR", cache);
    });
    assert_succeeded(&output);
    assert_eq!(stdout(&output), "3");
    let written: Vec<_> = (std::fs::read_dir(&home).unwrap())
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(
        written.is_empty(),
        "written outside $LFM_CACHE_DIR: {written:?}"
    );
    let kept: Vec<String> = (std::fs::read_dir(&cache).unwrap())
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        kept.iter().any(|name| name.starts_with("runner")),
        "no runner in $LFM_CACHE_DIR: {kept:?}"
    );
}

#[test]
fn a_call_with_a_cache_dir_keeps_its_analysis_there_and_writes_nothing_to_home() {
    let HomeCall {
        output,
        cache,
        home,
        _scratch,
    } = call_with_an_empty_home(
        "import json\n\n\ndef f(n):\n    return json.loads(json.dumps(n)) + 1\n",
        |command, cache| {
            command.arg("--cache-dir").arg(cache);
        },
    );
    assert_succeeded(&output);
    assert_eq!(stdout(&output), "3");
    // The slice's parse results; the distribution index, the kept analysis and the
    // interpreter's answer too, where kept at all (not for a shim, nor for stamps under two
    // seconds old), and never under HOME.
    assert!(cache.join("analyze-summaries.bin").exists());
    let written: Vec<_> = (std::fs::read_dir(&home).unwrap())
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(
        written.is_empty(),
        "written outside --cache-dir: {written:?}"
    );
}
