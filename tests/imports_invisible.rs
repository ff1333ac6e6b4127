//! Imports under lfm are imports as Python does them (issue 53): every form real packages use
//! (tests/fixtures/imports/forms.py) sees under `lfm call` and under `lfm serve`, first call and
//! warm call, what it sees under plain python, and the import log still names it. Tracebacks
//! of calls hide lfm's own frames and the Report keeps them (issue 56 item 8).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

use common::assert_succeeded_with;

/// `lfm call --python PYTHON` with its history and caches under `dir`; the target comes next.
fn lfm_call(python: &Path, dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lfm"));
    command
        .args(["call", "--quiet", "--python"])
        .arg(python)
        .arg("--history")
        .arg(dir.join("history.sqlite"))
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .stdin(Stdio::null());
    command
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/imports")
}

/// A venv (no pip) whose start-up adds the fixtures' site-packages as a site directory, so its
/// .pth files run at start-up as real ones do. Kept while the returned directory lives.
fn fixture_venv() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .output()
        .expect("run python3 -m venv");
    assert_succeeded_with(&made, "python3 -m venv");
    let python = venv.join("bin/python");
    let site = Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ])
        .output()
        .unwrap();
    let site = PathBuf::from(String::from_utf8(site.stdout).unwrap().trim());
    let fixture_site = fixtures().join("site-packages");
    let line = format!("import site; site.addsitedir({:?})\n", fixture_site);
    std::fs::write(site.join("lfm-fixtures.pth"), line).unwrap();
    (dir, python)
}

/// What the forms see under plain python.
fn plain(python: &Path) -> Value {
    let output = Command::new(python)
        .arg("forms.py")
        .current_dir(fixtures())
        .output()
        .unwrap();
    assert_succeeded_with(&output, "plain python forms.py");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Each module's view, one by one, so a failure names the module.
#[track_caller]
fn assert_same_view(path: &str, under_lfm: &Value, plain: &Value) {
    assert_eq!(
        under_lfm["uses"], plain["uses"],
        "{path}: what the forms do"
    );
    let modules = plain["modules"].as_object().expect("modules observed");
    for (name, seen) in modules {
        assert_eq!(&under_lfm["modules"][name], seen, "{path}: module {name}");
    }
}

fn logged(report: &Value) -> Vec<String> {
    report["imports"]["modules"]
        .as_array()
        .unwrap_or_else(|| panic!("no import log: {report}"))
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_form_of_import_sees_under_lfm_call_what_it_sees_under_python() {
    let (dir, python) = fixture_venv();
    let plain = plain(&python);
    let report = dir.path().join("report.json");
    let output = lfm_call(&python, dir.path())
        .arg("--report")
        .arg(&report)
        .arg("forms.py:observe")
        .current_dir(fixtures())
        .output()
        .unwrap();
    assert_succeeded_with(&output, "lfm call forms.py:observe");
    let under_lfm: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_same_view("lfm call", &under_lfm, &plain);
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let logged = logged(&report);
    for name in [
        "ff_refusing",
        "ff_replacer",
        "ffns.b",
        "ffdistutils",
        "ffzipped.inner",
    ] {
        assert!(
            logged.contains(&name.to_string()),
            "{name} not logged: {logged:?}"
        );
    }
}

/// `lfm serve` on the fixtures, replies read as they come.
struct Serve {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Serve {
    fn start(python: &Path, cache: &Path) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lfm"))
            .args([
                "serve",
                "--backend",
                "rlimit",
                "--no-history",
                "--slots",
                "1",
            ])
            .arg("--python")
            .arg(python)
            .arg("--cache-dir")
            .arg(cache)
            .current_dir(fixtures())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lfm serve");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Serve { child, stdout }
    }

    fn ask(&mut self, request: Value) -> Value {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Ask for the status until the zygote has learned `package` from the calls (it learns
    /// between calls); false if it never does.
    fn learned(&mut self, package: &str) -> bool {
        for _ in 0..300 {
            let status = self.ask(json!({"id": "status", "status": true}));
            let learned = &status["status"]["zygote"]["learned"];
            if learned
                .as_array()
                .is_some_and(|l| l.iter().any(|p| p == package))
            {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        false
    }

    fn finish(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success(), "lfm serve failed");
    }
}

#[test]
fn every_form_of_import_sees_under_lfm_serve_what_it_sees_under_python_first_and_warm() {
    let (dir, python) = fixture_venv();
    let plain = plain(&python);
    let mut serve = Serve::start(&python, &dir.path().join("cache"));
    let first = serve.ask(json!({"id": "first", "function": "forms.py:observe"}));
    assert_eq!(first["ok"], true, "first call: {first}");
    assert_same_view("lfm serve, first call", &first["result"], &plain);
    assert!(
        logged(&first["report"]).contains(&"ff_refusing".to_string()),
        "the first call loads the forms under the import log: {}",
        first["report"]["imports"]
    );
    assert!(
        serve.learned("ff_refusing"),
        "the zygote never learned the forms: the warm call would test nothing new"
    );
    let warm = serve.ask(json!({"id": "warm", "function": "forms.py:observe"}));
    assert_eq!(warm["ok"], true, "warm call: {warm}");
    assert_same_view("lfm serve, warm call", &warm["result"], &plain);
    let failing = serve.ask(json!({"id": "failing", "function": "failing.py:import_broken"}));
    let traceback = failing["error"]["traceback"].as_str().unwrap_or_default();
    assert!(traceback.contains("broken_top.py"), "{failing}");
    assert!(
        !traceback.contains("lfm_runner"),
        "lfm's frames shown: {traceback}"
    );
    serve.finish();
}

#[test]
fn a_calls_traceback_hides_lfms_frames_and_the_report_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let output = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(["call", "--quiet", "--cache-dir"])
        .arg(dir.path().join("cache"))
        .arg("--history")
        .arg(dir.path().join("history.sqlite"))
        .arg("--report")
        .arg(&report)
        .arg("failing.py:import_broken")
        .current_dir(fixtures())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let user_frames: Vec<&str> = stderr
        .lines()
        .filter(|line| line.trim_start().starts_with("File "))
        .collect();
    assert_eq!(user_frames.len(), 2, "the user's two frames only: {stderr}");
    assert!(user_frames[0].contains("failing.py"), "{stderr}");
    assert!(user_frames[1].contains("broken_top.py"), "{stderr}");
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let exception = &report["exit"]["exception"];
    assert_eq!(exception["traceback"].as_str(), Some(stderr.as_ref()));
    let full = exception["full_traceback"].as_str().unwrap_or_default();
    assert!(full.contains("lfm_runner/imports.py"), "{exception}");
}

/// target/bench-venv-torch, made by bench/torch_import.sh; None (with the reason printed) when
/// it is absent.
fn torch_venv() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-venv-torch");
    if venv.join(".complete").exists() {
        return Some(venv);
    }
    eprintln!(
        "SKIPPED the real torch check: {} is absent (bash bench/torch_import.sh makes it)",
        venv.display()
    );
    None
}

#[test]
fn a_seeded_torch_training_step_returns_under_lfm_call_what_it_returns_under_python() {
    let Some(venv) = torch_venv() else {
        return;
    };
    let python = venv.join("bin/python");
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench");
    let plain = Command::new(&python)
        .args([
            "-c",
            "import json, torch_fns; print(json.dumps(torch_fns.train_step()))",
        ])
        .current_dir(&bench)
        .output()
        .unwrap();
    assert_succeeded_with(&plain, "plain python train_step");
    let dir = tempfile::tempdir().unwrap();
    let output = lfm_call(&python, dir.path())
        .arg("torch_fns.py:train_step")
        .current_dir(&bench)
        .output()
        .unwrap();
    assert_succeeded_with(&output, "lfm call torch_fns.py:train_step");
    let under_lfm: Value = serde_json::from_slice(&output.stdout).unwrap();
    let plain: Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert_eq!(under_lfm, plain);
}
