//! Input size end to end: a category whose memory grows with its input file is sized from the
//! input by `lfm size --input` and `lfm run --auto --input`, with no retry after warm-up.

mod common;

use common::{assert_succeeded, lfm_in, workload};

/// The workload's MiB for an input of `mb` MB: memory that follows the input.
fn touched(mb: u64) -> u64 {
    20 + 4 * mb
}

#[test]
fn a_category_whose_memory_grows_with_its_input_is_sized_from_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let w = workload();
    let w = w.to_str().unwrap();
    let input = |mb: u64| {
        let path = dir.path().join(format!("in-{mb}.bin"));
        std::fs::write(&path, vec![0u8; (mb * 1_000_000) as usize]).unwrap();
        path.to_str().unwrap().to_string()
    };
    let strategy = "low-wastage-regression";
    // Warm-up: eight runs, inputs of 1..=8 MB using 24..=52 MiB, in shuffled order.
    for mb in [3, 7, 1, 5, 8, 2, 6, 4] {
        let (file, mib) = (input(mb), touched(mb).to_string());
        let args = ["run", "--quiet", "--category", "grow", "--history", history];
        let output = lfm_in(
            "/",
            &[&args[..], &["--input", &file, "--", w, "touch", &mib, "50"]].concat(),
        );
        assert_succeeded(&output);
    }
    // The Report's input_bytes reaches the history.
    let rows = common::history_json("history", history, "grow");
    assert_eq!(rows[0]["input_bytes"], 3_000_000.0, "{rows}");

    // `lfm size` follows the input: a 16 MB input gets more than anything seen (52 MiB + the
    // run's own few), enough for 84 MiB; a 2 MB one far less.
    let size = |mb: u64| -> f64 {
        let file = input(mb);
        let args = [
            "size",
            "--history",
            history,
            "--category",
            "grow",
            "--strategy",
            strategy,
        ];
        let output = lfm_in(
            "/",
            &[&args[..], &["--input", &file, "--format", "json"]].concat(),
        );
        assert_succeeded(&output);
        let advice: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        advice["memory_mb"].as_f64().unwrap()
    };
    let (small, large) = (size(2), size(16));
    assert!(small < 60.0, "2 MB input: {small} MiB");
    assert!(
        large >= touched(16) as f64 && large < 2.0 * touched(16) as f64,
        "16 MB input: {large} MiB"
    );

    // `--auto` sizes a 16 MB run the same way: it fits at once, nothing is retried.
    let file = input(16);
    let mib = touched(16).to_string();
    let args = [
        "run",
        "--quiet",
        "--category",
        "grow",
        "--history",
        history,
        "--auto",
    ];
    let rest = [
        "--strategy",
        strategy,
        "--input",
        &file,
        "--report",
        "-",
        "--",
        w,
        "touch",
        &mib,
        "50",
    ];
    let output = lfm_in("/", &[&args[..], &rest].concat());
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["input_bytes"], 16_000_000, "{report}");
    let limit = report["limits"]["memory_bytes"].as_f64().unwrap() / 1_048_576.0;
    assert!(
        (limit - large).abs() < 1.0,
        "--auto gave {limit} MiB, lfm size said {large}"
    );
    let rows = common::history_json("history", history, "grow");
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 9, "one attempt, no retry: {rows:?}");
    assert_eq!(rows[8]["exit"], "normal");
    assert_eq!(rows[8]["sized"], true);

    // An input that is not there is an error naming it.
    let output = lfm_in(
        "/",
        &[
            "run",
            "--input",
            "/no/such/input",
            "--",
            w,
            "touch",
            "1",
            "0",
        ],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--input /no/such/input: No such file"),
        "{stderr}"
    );
}
