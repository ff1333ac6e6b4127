//! docs/report.md carries a real Report and resource_monitor summary; a fresh run must produce
//! documents with exactly the same fields.

mod common;

use common::{assert_succeeded, lfm};

fn json_blocks(doc: &str) -> Vec<serde_json::Value> {
    doc.split("```json\n")
        .skip(1)
        .map(|block| {
            serde_json::from_str(&block[..block.find("```").unwrap()]).expect("example parses")
        })
        .collect()
}

/// Every key path in a JSON value (`memory.peak_bytes`, ...).
#[test]
fn report_examples_match_real_output() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/report.md")).unwrap();
    let mut blocks = json_blocks(&doc);
    assert_eq!(blocks.len(), 3);
    // In document order: the GPU section's example, the Report, the resource_monitor summary.
    gpu_example_matches_a_scripted_run(&blocks.remove(0));
    let report: lfm_monitor::Report =
        serde_json::from_value(blocks[0].clone()).expect("example is a Report");
    assert_eq!(report.format, lfm_monitor::report::REPORT_FORMAT);

    let workload = common::workload();
    let workload = workload.to_str().unwrap();
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "run",
            "--quiet",
            "--backend",
            "cgroup1",
            "--memory",
            "100M",
            "--report",
            "-",
        ];
        args.extend_from_slice(extra);
        args.extend(["--", workload, "touch", "300", "2000"]);
        let output = common::lfm_in("/", &args);
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)))
    };
    if !lfm(&["run", "--quiet", "--backend", "cgroup1", "--", "true"])
        .status
        .success()
    {
        eprintln!("SKIPPED comparison with a fresh report: the example was made on cgroup v1, which this machine does not offer");
        return;
    }
    assert_eq!(
        common::key_paths(&run(&["--cores", "1.5", "--wall", "1m"])),
        common::key_paths(&blocks[0])
    );
    assert_eq!(
        common::key_paths(&run(&["--summary-format", "resource-monitor"])),
        common::key_paths(&blocks[1])
    );
}

/// The GPU example: a run on the scripted device model (docs/gpu.md) has the same fields.
fn gpu_example_matches_a_scripted_run(example: &serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.json");
    let text = r#"{"format": "lfm-gpu-model/1", "devices": [{"uuid": "GPU-0", "name": "Scripted GPU", "memory_total_bytes": 17179869184}]}"#;
    std::fs::write(&model, text).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gpu/use-gpu.sh");
    let report_path = dir.path().join("report.json");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args([
            "run",
            "--quiet",
            "--backend",
            "rlimit",
            "--gpus",
            "1",
            "--gpu-memory",
            "10G",
        ])
        .arg("--report")
        .arg(&report_path)
        .args(["--", "sh", script, "-", "2147483648", "85", "exit"])
        .env("LFM_GPU_MODEL", &model)
        .env("LFM_GPU_LEDGER", dir.path().join("ledger"))
        .env("LFM_TEST_USAGE", dir.path().join("usage"))
        .env_remove("LFM_GPUS")
        .current_dir("/")
        .output()
        .unwrap();
    assert_succeeded(&output);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).unwrap()).unwrap();
    for key in ["gpu", "limits"] {
        assert_eq!(
            common::key_paths(&report[key]),
            common::key_paths(&example[key]),
            "{key}"
        );
    }
}
