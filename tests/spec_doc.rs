//! docs/spec.md carries a real Spec; this re-runs the command it names and compares.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::lfm;

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

#[test]
fn spec_example_matches_real_output() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/spec.md")).unwrap();
    let start = doc.find("```json\n").expect("json example in docs/spec.md") + "```json\n".len();
    let end = start + doc[start..].find("```").unwrap();
    let mut documented: serde_json::Value =
        serde_json::from_str(&doc[start..end]).expect("example parses");
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
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut real: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // The interpreter block names this machine's paths; everything else must match exactly.
    for spec in [&mut documented, &mut real] {
        spec["python"] = serde_json::Value::Null;
    }
    assert_eq!(real, documented);
}
