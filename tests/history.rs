//! The history of runs, and `--auto` sizing from it, end to end.

mod common;

use std::process::Command;

use common::{assert_succeeded, lfm_in, workload};

fn rows(history: &str, category: &str) -> Vec<serde_json::Value> {
    serde_json::from_value(common::history_json("history", history, category)).unwrap()
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
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["limits_from_sizing"],
        serde_json::json!(["memory", "cores"])
    );
    let all = rows(history, "grow");
    let attempts = &all[20..];
    assert!(
        attempts.len() >= 2,
        "20 runs, then two attempts or more: {attempts:?}"
    );
    let (last, failed) = attempts.split_last().unwrap();
    let first = &failed[0];
    let sized = first["memory_limit_mb"].as_f64().unwrap();
    assert!(
        (295.0..=320.0).contains(&sized),
        "first attempt sized at {sized} MiB from 300 MiB runs"
    );
    // Each attempt killed for memory at its sized limit, the next one larger; the last ends.
    let mut previous = 0.0;
    for attempt in failed {
        assert_eq!(attempt["exit"], "limits", "{attempt}");
        assert_eq!(attempt["exceeded"], "memory");
        assert_eq!(attempt["sized"], true);
        let limit = attempt["memory_limit_mb"].as_f64().unwrap();
        assert!(limit > previous, "{attempts:?}");
        previous = limit;
    }
    assert_eq!(last["exit"], "normal", "{last}");
    assert!(last["memory_limit_mb"].as_f64().unwrap() >= 600.0);
}

/// `lfm size --format json` for a category.
fn size(history: &str, category: &str) -> serde_json::Value {
    common::history_json("size", history, category)
}

#[test]
fn auto_sizes_the_sandbox_disk_and_retries_a_run_that_writes_more() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let w = workload();
    // Ten runs writing 4 MiB each in their own sandbox (at once: each holds a second): enough
    // points for bucketing to leave its sampling phase.
    let runs: Vec<_> = (0..10)
        .map(|i| {
            let sandbox = dir.path().join(format!("s{i}"));
            std::fs::create_dir(&sandbox).unwrap();
            Command::new(env!("CARGO_BIN_EXE_lfm"))
                .args(["run", "--quiet", "--category", "writer", "--history"])
                .arg(&history)
                .arg("--sandbox")
                .arg(&sandbox)
                .arg("--")
                .arg(&w)
                .args(["write", "out.bin", "4"])
                .current_dir("/")
                .spawn()
                .unwrap()
        })
        .collect();
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    let history = history.to_str().unwrap();
    let advice = size(history, "writer");
    let disk = &advice["resources"]["disk"];
    assert_eq!(disk["points"], 10, "{advice}");
    let first = disk["allocation"].as_f64().unwrap();
    assert!(
        (4.0..5.0).contains(&first),
        "sized from 4 MiB writes: {advice}"
    );

    // A run that writes 12 MiB: killed at the sized disk limit, retried larger until it fits.
    let sandbox = dir.path().join("big");
    std::fs::create_dir(&sandbox).unwrap();
    let (sandbox, w) = (sandbox.to_str().unwrap(), w.to_str().unwrap());
    let output = lfm_in(
        "/",
        &[
            "run",
            "--quiet",
            "--category",
            "writer",
            "--history",
            history,
            "--auto",
            "--memory",
            "512M",
            "--sandbox",
            sandbox,
            "--report",
            "-",
            "--",
            w,
            "write",
            "out.bin",
            "12",
        ],
    );
    assert_succeeded(&output);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // Memory was given: only cores and disk came from sizing.
    assert_eq!(
        report["limits_from_sizing"],
        serde_json::json!(["cores", "disk"])
    );
    assert!(report["limits"]["disk_bytes"].as_f64().unwrap() >= 12.0 * 1_048_576.0);
    let all = rows(history, "writer");
    let attempts = &all[10..];
    assert!(attempts.len() >= 2, "{attempts:?}");
    let (last, failed) = attempts.split_last().unwrap();
    for attempt in failed {
        assert_eq!(attempt["exit"], "limits", "{attempt}");
        assert_eq!(attempt["exceeded"], "disk", "{attempt}");
        assert_eq!(attempt["sized"], true);
    }
    assert_eq!(last["exit"], "normal", "{last}");
    // The first attempt's limit is what `lfm size` advised (the row holds what the sandbox
    // used when the limit refused a write: at most the limit).
    assert!(
        failed[0]["disk_mb"].as_f64().unwrap() <= first + 1e-6,
        "{}",
        failed[0]
    );
}

#[test]
fn auto_sizes_cores_as_lfm_size_advises_in_whole_cores() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let w = workload();
    let w = w.to_str().unwrap();
    for _ in 0..10 {
        let output = lfm_in(
            "/",
            &[
                "run",
                "--quiet",
                "--category",
                "spin",
                "--history",
                history,
                "--",
                w,
                "busy",
                "2",
                "200",
            ],
        );
        assert!(output.status.success());
    }
    let advised = size(history, "spin")["resources"]["cores"]["allocation"]
        .as_f64()
        .unwrap();
    // The workload prints its own CPU seconds on stdout: the report goes to a file.
    let path = dir.path().join("report.json");
    let output = lfm_in(
        "/",
        &[
            "run",
            "--quiet",
            "--category",
            "spin",
            "--history",
            history,
            "--auto",
            "--memory",
            "512M",
            "--report",
            path.to_str().unwrap(),
            "--",
            w,
            "busy",
            "2",
            "200",
        ],
    );
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(report["limits_from_sizing"], serde_json::json!(["cores"]));
    let cores = report["limits"]["cores"].as_f64().unwrap();
    assert_eq!(cores, advised);
    assert!(cores >= 1.0 && cores.fract() == 0.0, "{cores}");
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

#[test]
fn a_trace_seeds_the_history_under_its_categories_or_one_given() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let trace = dir.path().join("t.csv");
    let mut csv = String::from("category,cores,memory,disk,cpu_time,wall_time\n");
    for i in 0..12 {
        csv.push_str(&format!(
            "{},1,{},20,0,{}\n",
            if i < 8 { "a" } else { "b" },
            100 + i,
            i
        ));
    }
    std::fs::write(&trace, &csv).unwrap();
    let import = |extra: &[&str]| {
        let mut args = vec!["history", "--history", history, "--import"];
        args.push(trace.to_str().unwrap());
        args.extend_from_slice(extra);
        lfm_in("/", &args)
    };
    let output = import(&[]);
    assert_succeeded(&output);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.contains("imported 12 rows") && said.contains("a 8, b 4"),
        "{said}"
    );
    let a = rows(history, "a");
    assert_eq!(a.len(), 8);
    assert_eq!(a[3]["memory_mb"], 103.0);
    assert_eq!(a[3]["disk_mb"], 20.0);
    assert_eq!(a[3]["wall_time"], 3.0);
    assert_eq!(a[3]["cores"], 1.0);
    assert_eq!(a[3]["exit"], "normal");
    assert_eq!(a[3]["sized"], false);

    // Under one category: twelve points, past bucketing's sampling, so greedy bucketing
    // answers from them: deterministic greedy keeps 100..=111 (evenly spread, the newest
    // largest) in one bucket, 111, rather than pay a failed attempt for the upper half.
    assert!(import(&["--category", "c"]).status.success());
    assert_eq!(rows(history, "c").len(), 12);
    let greedy = [
        "size",
        "--history",
        history,
        "--category",
        "c",
        "--strategy",
        "greedy-bucketing",
        "--format",
        "json",
    ];
    let output = lfm_in("/", &greedy);
    assert_succeeded(&output);
    let advice: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(advice["resources"]["memory"]["points"], 12, "{advice}");
    assert_eq!(advice["memory_mb"], 111.0, "{advice}");
    assert_eq!(advice["resources"]["disk"]["allocation"], 20.0, "{advice}");
    // The default, best-so-far, names the candidate in charge and why.
    let advice = size(history, "c");
    let memory = &advice["resources"]["memory"];
    let why = memory["why"].as_str().unwrap();
    assert!(
        why.starts_with(&format!(
            "best-so-far chose {} (",
            memory["strategy"].as_str().unwrap()
        )),
        "{advice}"
    );
    assert_eq!(
        memory["candidates"].as_array().unwrap().len(),
        5,
        "{advice}"
    );
}

#[test]
fn a_bad_trace_row_is_named_and_nothing_of_it_is_imported() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let trace = dir.path().join("t.csv");
    let import = |csv: &str| {
        std::fs::write(&trace, csv).unwrap();
        lfm_in(
            "/",
            &[
                "history",
                "--history",
                history,
                "--import",
                trace.to_str().unwrap(),
            ],
        )
    };
    let stderr = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let output = import("category,cores,memory\na,1,100\na,1,-5\n");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("t.csv:3: column 3 (memory): -5 is negative"),
        "{}",
        stderr(&output)
    );
    let output = import("category,cores,memory\na,1,100\na,one,100\n");
    assert!(
        stderr(&output).contains("t.csv:3: column 2 (cores): \"one\" is not a number"),
        "{}",
        stderr(&output)
    );
    let output = import("category,memory\na,100\n");
    assert!(
        stderr(&output).contains("no \"cores\" column"),
        "{}",
        stderr(&output)
    );
    // Nothing of the bad traces was recorded, not even their good first rows.
    assert!(rows(history, "a").is_empty());
}

#[test]
fn bioblast_imports_with_its_three_categories() {
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/traces/bioblast.csv"
    );
    if !std::path::Path::new(trace).exists() {
        eprintln!("SKIPPED: {trace} is not here (it ships in shared/data/traces)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let output = lfm_in("/", &["history", "--history", history, "--import", trace]);
    assert_succeeded(&output);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("imported 7754 rows"), "{said}");
    assert!(
        said.contains("Analysis 7504, Split 124, Join 126"),
        "{said}"
    );
    assert_eq!(rows(history, "Split").len(), 124);
}

/// A history as lfm wrote it before the import tables (schema lfm-history/1 only), with one
/// call whose Report holds its import log; `extra` SQL runs after.
fn old_history(path: &std::path::Path, extra: &str) {
    let report = serde_json::json!({
        "function": {"target": "flow.py:train", "mode": "slice"},
        "imports": {"modules": [
            {"name": "yaml", "found": true, "distribution": "PyYAML==6.0.2"},
            {"name": "plugin", "found": true}],
            "not_in_closure": ["plugin"]},
    });
    let script = format!(
        "import sqlite3, sys\n\
         c = sqlite3.connect(sys.argv[1])\n\
         c.executescript('''\n\
         CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n\
         INSERT INTO meta VALUES ('schema', 'lfm-history/1');\n\
         CREATE TABLE runs (id INTEGER PRIMARY KEY, category TEXT NOT NULL, time REAL NOT NULL,\n\
             exit TEXT NOT NULL, exceeded TEXT NOT NULL, memory_mb REAL NOT NULL,\n\
             cores REAL NOT NULL, disk_mb REAL, wall_time REAL NOT NULL,\n\
             memory_limit_mb REAL, sized INTEGER NOT NULL, report TEXT NOT NULL);\n\
         INSERT INTO runs VALUES (1, 'train', 1795000000, 'normal', '', 10, 1, NULL, 1, NULL, 0,\n\
             '{report}');\n\
         {extra}''')\n\
         c.commit()\n"
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_history_older_than_the_import_tables_gets_them_filled_from_its_reports() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("old.sqlite");
    // A damaged Report must not keep the rest from being read.
    old_history(
        &history,
        "INSERT INTO runs VALUES (2, 'x', 1795000001, 'normal', '', 1, 1, NULL, 1, NULL, 0, '{{oops');",
    );
    let history = history.to_str().unwrap();
    let output = lfm_in("/", &["usage", "--history", history, "--format", "json"]);
    assert_succeeded(&output);
    let usage: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(usage["calls"], 1);
    assert_eq!(usage["distributions"][0]["name"], "PyYAML==6.0.2");
    assert_eq!(usage["not_in_closure"][0]["module"], "plugin");
    assert_eq!(usage["not_in_closure"][0]["target"], "flow.py:train");
    assert_eq!(usage["no_closure"], serde_json::json!(["train"]));
    assert_eq!(rows(history, "train").len(), 1, "the run itself is kept");
}

#[test]
fn import_tables_of_a_newer_lfm_are_an_error_naming_the_file_and_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("new.sqlite");
    old_history(
        &history,
        "INSERT INTO meta VALUES ('imports_schema', 'lfm-imports/9');",
    );
    let history = history.to_str().unwrap();
    for args in [vec!["usage"], vec!["history"]] {
        let mut args = args.clone();
        args.extend(["--history", history]);
        let output = lfm_in("/", &args);
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(history) && stderr.contains("lfm-imports/9"),
            "{stderr}"
        );
    }
    let check = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             print(c.execute('select count(*) from runs').fetchone()[0])",
            history,
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "1");
}

#[test]
fn sizing_a_category_without_runs_says_so_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let table = lfm_in("/", &["size", "--category", "new", "--history", history]);
    assert_eq!(table.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&table.stdout);
    assert!(stdout.contains("new: no measured runs"), "{stdout}");
    let json = size(history, "new");
    assert_eq!(json["runs"], 0);
    assert!(json["memory_mb"].is_null(), "{json}");
}
