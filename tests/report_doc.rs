//! docs/report.md carries a real Report and resource_monitor summary; a fresh run must produce
//! documents with exactly the same fields.

mod common;

use common::lfm;

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
    let blocks = json_blocks(&doc);
    assert_eq!(blocks.len(), 2);
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
