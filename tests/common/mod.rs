//! Helpers shared by the CLI tests: run the real binary, read its JSON.
#![allow(dead_code)]

pub mod serve;

use std::path::PathBuf;
use std::process::{Command, Output};

/// Asserts that `output`'s command succeeded: one place for the failure message (exit status,
/// stderr and stdout).
#[track_caller]
pub fn assert_succeeded(output: &Output) {
    assert!(output.status.success(), "{}", failure(output));
}

/// [`assert_succeeded`], the failure message starting with `context` (a backend, a target, ...).
#[track_caller]
pub fn assert_succeeded_with(output: &Output, context: impl std::fmt::Display) {
    assert!(output.status.success(), "{context}: {}", failure(output));
}

fn failure(output: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}\n--- stdout ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    )
}

pub fn lfm(args: &[&str]) -> Output {
    lfm_in(env!("CARGO_MANIFEST_DIR"), args)
}

/// Run lfm from `dir`. Monitor tests run from "/": a checkout in a fresh temporary directory
/// (as CI makes) would otherwise be measured as the run's disk sandbox.
pub fn lfm_in(dir: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .current_dir(dir)
        .output()
        .expect("run lfm")
}

/// `lfm SUBCOMMAND --history HISTORY --category CATEGORY --format json` (history, size), run
/// from "/" and parsed; panics with stderr on failure.
pub fn history_json(subcommand: &str, history: &str, category: &str) -> serde_json::Value {
    let args = [
        subcommand,
        "--history",
        history,
        "--category",
        category,
        "--format",
        "json",
    ];
    let output = lfm_in("/", &args);
    assert_succeeded_with(&output, format_args!("lfm {args:?} failed"));
    serde_json::from_slice(&output.stdout).expect("lfm printed JSON")
}

/// `lfm analyze --format json --no-cache ARGS`, parsed; panics with stderr on failure.
pub fn analyze_json(args: &[&str]) -> serde_json::Value {
    let mut full = vec!["analyze", "--no-cache", "--format", "json"];
    full.extend_from_slice(args);
    let output = lfm(&full);
    assert_succeeded_with(&output, format_args!("lfm {full:?} failed"));
    serde_json::from_slice(&output.stdout).expect("valid JSON")
}

pub fn target<'a>(spec: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    spec["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == name)
        .unwrap_or_else(|| {
            panic!(
                "no target {name} in {:?}",
                spec["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| &t["target"])
                    .collect::<Vec<_>>()
            )
        })
}

/// Sorted names of every module in a target's closure, installed or not.
pub fn names(target: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = target["modules"]
        .as_array()
        .unwrap()
        .iter()
        .chain(target["missing"].as_array().unwrap())
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// tests/workloads/workload.c compiled with `cc` into target/test-workloads (once, rebuilt
/// when the source changes).
pub fn workload() -> PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-workloads");
    let binary = dir.join("workload");
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/workload.c");
    let stale = match (binary.metadata(), source.metadata()) {
        (Ok(b), Ok(s)) => b.modified().unwrap() < s.modified().unwrap(),
        _ => true,
    };
    if stale {
        std::fs::create_dir_all(&dir).unwrap();
        let tmp = dir.join(format!("workload.{}", std::process::id()));
        let status = Command::new("cc")
            .args(["-O1", "-pthread", "-o"])
            .arg(&tmp)
            .arg(&source)
            .status()
            .expect("cc");
        assert!(status.success(), "compiling the workload failed");
        std::fs::rename(&tmp, &binary).unwrap();
    }
    binary
}

/// Pinned so the expected Requires-Dist closures stay exact.
const PACKAGES: &[&str] = &[
    "PyYAML==6.0.2",
    "python-dateutil==2.9.0.post0",
    "beautifulsoup4==4.12.3",
    "attrs==24.2.0",
    "protobuf==5.28.3",
    "googleapis-common-protos==1.65.0",
    "requests==2.32.3",
    "numpy==2.1.3",
];

/// The venv, or `None` (with the reason printed) when PyPI is unreachable.
pub fn real_venv() -> Option<PathBuf> {
    venv_with("real", PACKAGES)
}

/// A scientific stack heavier than [`real_venv`]'s: what self-contained packs of pandas and
/// scikit-learn functions are tested with.
pub fn sci_venv() -> Option<PathBuf> {
    venv_with(
        "sci",
        &["numpy==2.1.3", "pandas==2.2.3", "scikit-learn==1.5.2"],
    )
}

/// The engines lfm runs under (Parsl, Dask) beside numpy, every distribution pinned: what
/// engine-aware closures and packs are tested with (tests/engine.rs).
pub fn engine_venv() -> Option<PathBuf> {
    venv_with(
        "engines",
        &[
            "numpy==2.4.6",
            "parsl==2026.10.26",
            "dask==2026.8.0",
            "certifi==2026.10.19.post1",
            "charset-normalizer==3.5.2",
            "click==8.5.1",
            "cloudpickle==3.1.3",
            "dill==0.4.1",
            "filelock==4.2.12",
            "fsspec==2026.9.0",
            "idna==3.20",
            "importlib_metadata==10.2.0",
            "lazy-importer==0.1.0",
            "locket==1.0.0",
            "packaging==26.3",
            "partd==1.4.2",
            "psutil==7.2.2",
            "PyYAML==6.0.4",
            "pyzmq==27.3.0",
            "requests==2.34.2",
            "setproctitle==1.3.8",
            "sortedcontainers==2.4.0",
            "tblib==3.2.2",
            "toolz==1.2.0",
            "typeguard==4.6.1",
            "typing_extensions==4.16.0",
            "urllib3==2.8.0",
            "zipp==4.1.2",
        ],
    )
}

/// The function-level closure oracle's venv (bench/closure_truth_calls.py): what the real test
/// suites it calls import (pytest, funcy's `whatever`, python-dateutil's `six`), pinned with
/// their requirements.
pub fn calls_oracle_venv() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/closure-oracle/venv");
    venv_at(dir, CALLS_ORACLE_PACKAGES)
}

/// Pinned as in bench/closure_truth.sh.
const CALLS_ORACLE_PACKAGES: &[&str] = &[
    "pytest==8.3.3",
    "iniconfig==2.3.1",
    "packaging==26.3",
    "pluggy==1.7.0",
    "whatever==0.7",
    "six==1.16.0",
];

/// A venv under target/test-venvs/NAME with exactly `packages`, made once and kept.
fn venv_with(name: &str, packages: &[&str]) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-venvs");
    venv_at(dir.join(name), packages)
}

/// A venv at `venv` with exactly `packages`, made once and kept, or `None` (with the reason
/// printed) when PyPI is unreachable.
fn venv_at(venv: PathBuf, packages: &[&str]) -> Option<PathBuf> {
    // Tests in one binary run in parallel threads; one builds a venv, the others wait.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = BUILD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let marker = venv.join(".lfm-complete");
    if std::fs::read_to_string(&marker).is_ok_and(|text| text == packages.join("\n")) {
        return Some(venv);
    }
    let status = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .expect("python3 -m venv");
    assert!(status.success(), "python3 -m venv failed");
    let output = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .output()
        .expect("run pip");
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let offline = [
            "Could not find a version",
            "NewConnectionError",
            "Temporary failure in name resolution",
            "Network is unreachable",
            "ConnectTimeout",
        ];
        if offline.iter().any(|needle| stderr.contains(needle)) {
            eprintln!(
                "SKIPPED: the package registry is unreachable: {}",
                stderr.lines().last().unwrap_or_default()
            );
            return None;
        }
        panic!("pip install failed: {stderr}");
    }
    std::fs::write(&marker, packages.join("\n")).unwrap();
    Some(venv)
}

/// Every key path of a JSON value (`memory.peak_bytes`, ...): what a documented example and a
/// fresh output must share.
pub fn key_paths(value: &serde_json::Value) -> std::collections::BTreeSet<String> {
    fn walk(value: &serde_json::Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
        if let serde_json::Value::Object(map) = value {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.insert(path.clone());
                walk(inner, &path, out);
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(value, "", &mut out);
    out
}

/// The pid a workload writes to `path`, once the whole number is there: a file can exist
/// between its creation and its write, so existing is not enough. None after `timeout`.
#[allow(dead_code)]
pub fn pid_written_to(path: &std::path::Path, timeout: std::time::Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Ok(pid) = text.trim().parse() {
            return Some(pid);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Held while a test copies lfm or starts a process that must exec a copy: a copy's descriptor,
/// inherited by another thread's fork until its exec, makes exec of the copy fail (ETXTBSY).
pub static SPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A directory under /tmp that anyone may enter and write, holding a copy of lfm: a test that
/// runs lfm as nobody (setpriv) cannot reach root's target/. Returns the directory and the copy.
pub fn shared_dir_with_lfm(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let lfm = dir.path().join("lfm");
    let _copying = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    std::fs::copy(env!("CARGO_BIN_EXE_lfm"), &lfm).unwrap();
    (dir, lfm)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `lfm run --backend cgroup1` works here (root on a host with cgroup v1 mounted).
pub fn cgroup1_available() -> bool {
    lfm_in(
        "/",
        &["run", "--quiet", "--backend", "cgroup1", "--", "true"],
    )
    .status
    .success()
}
