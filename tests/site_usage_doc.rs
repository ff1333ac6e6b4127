//! docs/usage.md "Site-wide import usage" carries a log and the table `lfm usage --site` prints
//! for it: running that command on that log must print that table. The same log gives CSV (the
//! csv crate's quoting), JSON and a plot.

mod common;

use common::{assert_succeeded, lfm};

const DOCUMENTED_DIR: &str = "/shared/lfm-usage";

fn section() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/usage.md"));
    let doc = doc.unwrap();
    let start = doc.find("## Site-wide import usage").expect("the section");
    doc[start..].to_string()
}

/// The fenced block that follows `marker`.
fn block_after<'a>(text: &'a str, marker: &str) -> &'a str {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in the section"));
    let start = at + text[at..].find("```").unwrap();
    let start = start + text[start..].find('\n').unwrap() + 1;
    let end = start + text[start..].find("```").unwrap();
    &text[start..end]
}

fn documented_log() -> (tempfile::TempDir, String) {
    let section = section();
    let dir = tempfile::tempdir().unwrap();
    let log = block_after(&section, "The log of three processes");
    std::fs::write(dir.path().join("node.1001.log"), log).unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    (dir, path)
}

#[test]
fn the_documented_table_is_what_lfm_prints_for_the_documented_log() {
    let (_dir, path) = documented_log();
    let section = section();
    let expected = block_after(&section, "`lfm usage --site /shared/lfm-usage`");
    let output = lfm(&["usage", "--site", &path]);
    assert_succeeded(&output);
    let printed = String::from_utf8(output.stdout).unwrap();
    assert_eq!(printed.replace(&path, DOCUMENTED_DIR), expected);
}

#[test]
fn the_documented_log_gives_csv_json_and_a_plot() {
    let (dir, path) = documented_log();
    let output = lfm(&["usage", "--site", &path, "--format", "csv"]);
    assert_succeeded(&output);
    let csv = String::from_utf8(output.stdout).unwrap();
    assert!(csv.contains("\ndistribution,numpy,,2,3,3,0.6667,2.3.0;2.4.6,3.11.7;3.12.1,"));
    let svg = dir.path().join("top.svg");
    let svg_arg = svg.to_str().unwrap();
    let output = lfm(&[
        "usage", "--site", &path, "--format", "json", "--plot", svg_arg,
    ]);
    assert_succeeded(&output);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["processes"], 3);
    assert_eq!(json["timeline"][0]["distribution"], "numpy");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg") && drawn.contains("python_dateutil"));
    let since = lfm(&[
        "usage",
        "--site",
        &path,
        "--since",
        "2026-11-22",
        "--format",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&since.stdout).unwrap();
    assert_eq!(json["processes"], 1);
}

#[test]
fn a_venv_given_as_the_installation_is_refused_with_its_base_named() {
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let logs = dir.path().join("logs");
    let venv_arg = venv.to_str().unwrap();
    let output = lfm(&[
        "usage",
        "--install-hook",
        venv_arg,
        "--site",
        logs.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is a venv (") && stderr.contains("hook the installation it was made from"),
        "{stderr}"
    );
}
