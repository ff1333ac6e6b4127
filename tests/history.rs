//! The history of runs, and `--auto` sizing from it, end to end.

mod common;

use std::process::Command;

use common::{lfm_in, workload};

fn rows(history: &str, category: &str) -> Vec<serde_json::Value> {
    let output = lfm_in(
        "/",
        &[
            "history",
            "--history",
            history,
            "--category",
            category,
            "--format",
            "json",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn eight_concurrent_runs_all_land_in_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let runs: Vec<_> = (0..8)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_lfm"))
                .args(["run", "--quiet", "--category", "c", "--history"])
                .arg(&history)
                .args(["--", "true"])
                .current_dir("/")
                .spawn()
                .unwrap()
        })
        .collect();
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    assert_eq!(rows(history.to_str().unwrap(), "c").len(), 8);
}

#[test]
fn auto_retries_a_run_that_outgrows_its_history_at_a_larger_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let w = workload();
    let w = w.to_str().unwrap();
    let run = |extra: &[&str], mib: &str| {
        let mut args = vec!["run", "--quiet", "--category", "grow", "--history", history];
        args.extend_from_slice(extra);
        args.extend(["--report", "-", "--", w, "touch", mib, "100"]);
        lfm_in("/", &args)
    };
    for _ in 0..20 {
        assert!(run(&[], "300").status.success());
    }
    let output = run(&["--auto"], "600");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["limits_from_sizing"], serde_json::json!(["memory"]));
    let all = rows(history, "grow");
    assert_eq!(all.len(), 22, "20 runs and two attempts");
    let (first, second) = (&all[20], &all[21]);
    assert_eq!(first["exit"], "limits", "{first}");
    assert_eq!(first["exceeded"], "memory");
    assert_eq!(first["sized"], true);
    let sized = first["memory_limit_mb"].as_f64().unwrap();
    assert!(
        (295.0..=320.0).contains(&sized),
        "first attempt sized at {sized} MiB from 300 MiB runs"
    );
    assert_eq!(second["exit"], "normal", "{second}");
    assert!(second["memory_limit_mb"].as_f64().unwrap() >= 600.0);
}

#[test]
fn a_foreign_or_damaged_history_is_an_error_naming_it_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    std::fs::write(&history, b"this is not a database, and it is the user's").unwrap();
    let output = lfm_in("/", &["history", "--history", history.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(history.to_str().unwrap()), "{stderr}");
    assert_eq!(
        std::fs::read(&history).unwrap(),
        b"this is not a database, and it is the user's"
    );
    let output = lfm_in(
        "/",
        &[
            "size",
            "--category",
            "x",
            "--strategy",
            "best",
            "--history",
            history.to_str().unwrap(),
        ],
    );
    assert_eq!(output.status.code(), Some(2));
}
