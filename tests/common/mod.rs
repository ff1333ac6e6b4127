//! Helpers shared by the CLI tests: run the real binary, read its JSON.
#![allow(dead_code)]

use std::process::{Command, Output};

pub fn lfm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run lfm")
}

/// `lfm analyze --format json --no-cache ARGS`, parsed; panics with stderr on failure.
pub fn analyze_json(args: &[&str]) -> serde_json::Value {
    let mut full = vec!["analyze", "--no-cache", "--format", "json"];
    full.extend_from_slice(args);
    let output = lfm(&full);
    assert!(
        output.status.success(),
        "lfm {full:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
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
pub fn workload() -> std::path::PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-workloads");
    let binary = dir.join("workload");
    let source =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/workload.c");
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
