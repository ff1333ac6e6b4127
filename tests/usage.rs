//! The import log of `lfm call` and `lfm serve` calls in the history, and `lfm usage`.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use common::assert_succeeded;

const CALL_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/call");

fn usage(history: &str, extra: &[&str]) -> Value {
    let mut args = vec!["usage", "--history", history, "--format", "json"];
    args.extend_from_slice(extra);
    let output = common::lfm_in("/", &args);
    assert_succeeded(&output);
    serde_json::from_slice(&output.stdout).unwrap()
}

fn call(venv: &str, history: &str, function: &str, extra: &[&str]) -> std::process::Output {
    let target = format!("imports.py:{function}");
    let mut args = vec![
        "call",
        "--quiet",
        "--env",
        venv,
        "--history",
        history,
        &target,
    ];
    args.extend_from_slice(extra);
    common::lfm_in(CALL_FIXTURES, &args)
}

fn names(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|v| v[key].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn usage_names_what_calls_imported_what_the_analyzer_missed_and_what_was_never_imported() {
    let Some(venv) = common::real_venv() else {
        return;
    };
    let venv = venv.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    assert!(call(venv, history, "lazy_json", &[]).status.success());
    assert!(call(venv, history, "local_plugin_from_config", &[])
        .status
        .success());
    assert!(call(venv, history, "from_config", &[]).status.success());
    assert!(call(venv, history, "maybe_yaml", &[]).status.success());
    let killed = call(
        venv,
        history,
        "yaml_then_too_much_memory",
        &["--memory", "100M"],
    );
    assert_eq!(killed.status.code(), Some(125));

    let all = usage(history, &[]);
    assert_eq!(all["format"], "lfm-usage/1");
    assert_eq!(all["calls"], 5);
    let misses: Vec<(String, String)> = all["not_in_closure"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["module"].as_str().unwrap().into(),
                m["target"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(
        misses.contains(&(
            "plugin_csv".into(),
            "imports.py:local_plugin_from_config".into()
        )),
        "{misses:?}"
    );
    assert!(
        misses.contains(&("attr".into(), "imports.py:from_config".into())),
        "{misses:?}"
    );
    assert_eq!(misses.len(), 2, "{misses:?}");
    let modules = names(&all["modules"], "name");
    assert!(modules.contains(&"json".into()), "{modules:?}");
    assert!(
        modules.contains(&"yaml".into()),
        "the killed call's import is kept: {modules:?}"
    );
    let dists = names(&all["distributions"], "name");
    assert!(dists.contains(&"PyYAML==6.0.2".into()), "{dists:?}");

    let unused = all["never_imported"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["category"] == "maybe_yaml")
        .unwrap_or_else(|| panic!("{}", all["never_imported"]));
    assert_eq!(
        unused["distributions"],
        serde_json::json!(["PyYAML==6.0.2"])
    );
    let used = all["never_imported"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["category"] == "yaml_then_too_much_memory")
        .unwrap();
    assert_eq!(used["distributions"], serde_json::json!([]), "{used}");

    assert_eq!(
        fields(&all),
        fields(&documented()),
        "docs/usage.md is out of date"
    );

    let one = usage(history, &["--category", "lazy_json", "--since", "1h"]);
    assert_eq!(one["calls"], 1);
    assert_eq!(one["not_in_closure"], serde_json::json!([]));

    // Retention folds the calls' imports into totals, then removes the runs: the answers stay.
    let from_config = ["--category", "from_config"];
    let before = [usage(history, &[]), usage(history, &from_config)];
    for keep_runs in ["1", "0"] {
        let pruned = common::lfm_in(
            "/",
            &[
                "history",
                "--history",
                history,
                "--prune",
                "--keep-whole",
                "0",
                "--keep-runs",
                keep_runs,
            ],
        );
        assert_succeeded(&pruned);
        let after = [usage(history, &[]), usage(history, &from_config)];
        assert_eq!(
            after, before,
            "usage changed by --prune --keep-runs {keep_runs}"
        );
    }
    let left = common::lfm_in("/", &["history", "--history", history, "--format", "json"]);
    let left: Value = serde_json::from_slice(&left.stdout).unwrap();
    assert_eq!(
        left,
        serde_json::json!([]),
        "every run removed, the totals kept"
    );
    let table = common::lfm_in("/", &["usage", "--history", history]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("IMPORTED BUT NOT IN THE CLOSURE (2)"),
        "{table}"
    );
    assert!(table.contains("plugin_csv"), "{table}");
    let csv = common::lfm_in("/", &["usage", "--history", history, "--format", "csv"]);
    let csv = String::from_utf8_lossy(&csv.stdout);
    assert!(
        csv.starts_with("section,category,name,distribution,calls,last_used\n"),
        "{csv}"
    );
    assert!(
        csv.contains("\nnever_imported_distribution,maybe_yaml,PyYAML==6.0.2,"),
        "{csv}"
    );
}

/// Requests to a stdin `lfm serve` in the call fixtures; the replies, in id order.
fn serve(venv: &str, history: &str, requests: &[Value]) -> Vec<Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args([
            "serve",
            "--env",
            venv,
            "--history",
            history,
            "--backend",
            "rlimit",
        ])
        .current_dir(CALL_FIXTURES)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for request in requests {
        writeln!(stdin, "{request}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let mut replies: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    replies.sort_by_key(|r| r["id"].as_i64());
    replies
}

#[test]
fn serve_calls_keep_their_import_logs_through_limits_and_crashes_in_the_history() {
    let Some(venv) = common::real_venv() else {
        return;
    };
    let venv = venv.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.sqlite");
    let history = history.to_str().unwrap();
    let request = |id: i64, function: &str, limits: Value| serde_json::json!({"id": id, "function": format!("imports.py:{function}"), "limits": limits});
    let replies = serve(
        venv,
        history,
        &[
            request(1, "lazy_json", Value::Null),
            request(
                2,
                "yaml_then_too_much_memory",
                serde_json::json!({"memory": "100M"}),
            ),
            request(3, "yaml_then_segfault", Value::Null),
            request(4, "local_plugin_from_config", Value::Null),
        ],
    );
    assert_eq!(replies.len(), 4, "{replies:?}");
    let logged = |i: usize| names(&replies[i]["report"]["imports"]["modules"], "name");
    assert!(logged(0).contains(&"json".into()), "{:?}", logged(0));
    assert_eq!(replies[1]["error"]["reason"], "limits", "{}", replies[1]);
    assert!(
        logged(1).contains(&"yaml".into()),
        "killed: {:?}",
        logged(1)
    );
    assert!(
        logged(2).contains(&"yaml".into()),
        "segfault: {:?}",
        logged(2)
    );
    assert_eq!(
        replies[3]["report"]["imports"]["not_in_closure"],
        serde_json::json!(["plugin_csv"])
    );

    let all = usage(history, &[]);
    assert_eq!(all["calls"], 4);
    let yaml = all["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "yaml")
        .unwrap_or_else(|| panic!("{}", all["modules"]));
    assert_eq!(yaml["calls"], 2, "the killed and the segfaulted call");
    assert_eq!(
        yaml["distribution"], "PyYAML==6.0.2",
        "named from the closure"
    );
    assert_eq!(names(&all["not_in_closure"], "module"), ["plugin_csv"]);
}

/// docs/usage.md's JSON example.
fn documented() -> Value {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/usage.md")).unwrap();
    let block = doc.split("```json\n").nth(1).expect("a JSON example");
    serde_json::from_str(&block[..block.find("```").unwrap()]).expect("the example parses")
}

/// Every field path, list entries included (`modules[].distribution`), of a usage document.
fn fields(value: &Value) -> std::collections::BTreeSet<String> {
    fn walk(value: &Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    let path = format!("{prefix}.{key}");
                    out.insert(path.clone());
                    walk(inner, &path, out);
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(item, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(value, "", &mut out);
    out
}
