//! docs/spec.md carries a real Spec; this re-runs the command it names and compares.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{assert_succeeded, engine_venv, lfm};

/// A venv with nothing installed, made once and kept under target/.
fn empty_venv() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-venvs/empty");
    if !venv.join("bin/python").exists() {
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 -m venv");
        assert!(status.success());
    }
    venv
}

/// The `index`th JSON example of docs/spec.md.
fn example(index: usize) -> serde_json::Value {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/spec.md")).unwrap();
    let mut rest = doc.as_str();
    for _ in 0..index {
        rest = &rest[rest
            .find("```json\n")
            .expect("json example in docs/spec.md")
            + 1..];
    }
    let start = rest
        .find("```json\n")
        .expect("json example in docs/spec.md")
        + "```json\n".len();
    let end = start + rest[start..].find("```").unwrap();
    serde_json::from_str(&rest[start..end]).expect("example parses")
}

#[test]
fn engine_example_matches_real_output() {
    let documented = example(1);
    let parsed: lfm_analyzer::spec::TargetSpec =
        serde_json::from_value(documented.clone()).expect("example is a Spec target");
    assert!(!parsed.engine.distributions.is_empty());
    let Some(venv) = engine_venv() else { return };
    let python = venv.join("bin/python");
    let output = lfm(&[
        "analyze",
        "--no-cache",
        "--python",
        python.to_str().unwrap(),
        "--format",
        "json",
        "samples/parsl_app/wf.py:fit",
    ]);
    assert_succeeded(&output);
    let real: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(real["targets"][0], documented);
}

#[test]
fn spec_example_matches_real_output() {
    let mut documented = example(0);
    let parsed: lfm_analyzer::spec::Spec =
        serde_json::from_value(documented.clone()).expect("example is a Spec");
    assert_eq!(parsed.format, lfm_analyzer::spec::SPEC_FORMAT);

    let venv = empty_venv();
    let python = venv.join("bin/python");
    let output = lfm(&[
        "analyze",
        "--no-cache",
        "--python",
        python.to_str().unwrap(),
        "--format",
        "json",
        "samples/workflow/workflow.py:train",
    ]);
    assert_succeeded(&output);
    let mut real: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // The interpreter block names this machine's paths; everything else must match exactly.
    for spec in [&mut documented, &mut real] {
        spec["python"] = serde_json::Value::Null;
    }
    assert_eq!(real, documented);
}
