//! What a person sees: targets found where users have them, whole trees that can be read,
//! warnings once, words that agree with their numbers, and hints that fit what was asked.

mod common;

use common::{analyze_json, assert_succeeded, assert_succeeded_with, lfm, real_venv, target};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_dotted_target_is_found_on_the_interpreters_sys_path_and_a_file_under_a_root() {
    let Some(venv) = real_venv() else { return };
    let env = venv.to_str().unwrap();
    // Not under the working directory nor any --root: where `import requests.api` finds it.
    let spec = analyze_json(&["--env", env, "requests.api:get"]);
    let get = target(&spec, "requests.api:get");
    assert!(get["file"].as_str().unwrap().ends_with("requests/api.py"));
    let dists: Vec<&str> = get["distributions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(dists.contains(&"requests"), "{dists:?}");
    // A file target relative to a --root.
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
        .join("site-packages");
    let by_file = analyze_json(&[
        "--env",
        env,
        "--root",
        site.to_str().unwrap(),
        "requests/api.py:get",
    ]);
    assert_eq!(
        target(&by_file, "requests.api:get")["distributions"],
        get["distributions"]
    );
    let missing = lfm(&["analyze", "--no-cache", "--env", env, "no_such_pkg.mod:f"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(
        stderr(&missing).contains("nor on the sys.path of"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn a_tree_reads_as_a_line_per_module_and_excluded_files_stay_out() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = dir.path().join("pkg");
    std::fs::create_dir_all(pkg.join("tests")).unwrap();
    std::fs::write(pkg.join("__init__.py"), "import json\n").unwrap();
    std::fs::write(
        pkg.join("a.py"),
        "import os\n\n\ndef one():\n    import csv\n\n\ndef two():\n    return os.sep\n",
    )
    .unwrap();
    std::fs::write(
        pkg.join("b.py"),
        "import importlib\n\n\ndef f(name):\n    return importlib.import_module(name)\n",
    )
    .unwrap();
    std::fs::write(pkg.join("tests/test_a.py"), "import pytest\n").unwrap();
    let tree = pkg.to_str().unwrap();
    let output = lfm(&["analyze", "--no-cache", tree, "--exclude", "tests/"]);
    assert_succeeded(&output);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("  ")).collect();
    assert_eq!(lines.len(), 3, "one line per module:\n{text}");
    assert!(
        lines[1].starts_with("pkg.a  ") && lines[1].contains("2 functions"),
        "{text}"
    );
    assert!(lines[2].contains("1 function:"), "{text}");
    assert!(
        !text.contains("pytest") && !text.contains("test_a"),
        "{text}"
    );
    // The computed import in b.py is one problem, reported once (not per target reaching it).
    assert_eq!(text.matches("computed module name").count(), 1, "{text}");
    let full = stdout(&lfm(&[
        "analyze",
        "--no-cache",
        tree,
        "--exclude",
        "tests/",
        "--functions",
    ]));
    assert!(full.contains("pkg.a:one  (function at"), "{full}");
    assert!(full.contains("csv"), "{full}");
}

#[test]
fn counts_agree_with_their_words_and_quiet_still_counts_warnings() {
    let output = lfm(&[
        "analyze",
        "--no-cache",
        "-q",
        "tests/fixtures/messy/broken.py",
    ]);
    let text = stdout(&output);
    assert!(
        text.contains(" 0 distributions (0 imported directly), 1 module,"),
        "{text}"
    );
    assert!(text.contains(", 2 warnings"), "{text}");
    assert!(
        !text.contains("1 modules") && !text.contains("1 distributions"),
        "{text}"
    );
    assert!(
        stderr(&output).contains("lfm: 2 warnings (see"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn strict_names_what_is_missing_and_the_hint_fits_the_environment_given() {
    let fixture = "tests/fixtures/contexts/mod.py:required_missing";
    let strict = lfm(&["analyze", "--no-cache", "--strict", fixture]);
    assert_eq!(strict.status.code(), Some(4));
    assert!(
        stderr(&strict).contains("not installed: not_installed_required_xyz"),
        "{}",
        stderr(&strict)
    );
    let plain = lfm(&["analyze", "--no-cache", fixture]);
    assert!(stderr(&plain).contains("pass the environment the code runs in"));
    let python = String::from_utf8(
        std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let given = lfm(&["analyze", "--no-cache", "--python", python.trim(), fixture]);
    let hint = stderr(&given);
    assert!(
        hint.contains("not installed in the environment analysed"),
        "{hint}"
    );
    assert!(!hint.contains("pass the environment"), "{hint}");
}

#[test]
fn completions_and_examples_in_help() {
    for shell in ["bash", "zsh", "fish"] {
        let output = lfm(&["completions", shell]);
        assert_succeeded_with(&output, shell);
        assert!(stdout(&output).contains("analyze"), "{shell}");
    }
    let help = stdout(&lfm(&["--help"]));
    assert!(
        help.contains("Examples:") && help.contains("lfm pack "),
        "{help}"
    );
}

#[test]
fn a_target_inside_another_environments_site_packages_gets_a_hint_to_name_it() {
    let root = tempfile::tempdir().unwrap();
    let prefix = root.path().join("venv");
    let site = prefix.join("lib/python3.11/site-packages");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::write(prefix.join("bin/python"), "").unwrap();
    std::fs::write(site.join("tool.py"), "import json\n").unwrap();
    let file = site.join("tool.py");
    let output = lfm(&["analyze", "--no-cache", file.to_str().unwrap()]);
    assert_succeeded(&output);
    let prefix = prefix.canonicalize().unwrap();
    let wanted = format!("--python {}", prefix.join("bin/python").display());
    assert!(stderr(&output).contains(&wanted), "{}", stderr(&output));
    // Named as the interpreter analysed: no hint; nor for a file of no environment.
    let python = "python3";
    let output = lfm(&[
        "analyze",
        "--no-cache",
        "--python",
        python,
        file.to_str().unwrap(),
    ]);
    assert!(
        !stderr(&output).contains("is installed code"),
        "{}",
        stderr(&output)
    );
    std::fs::remove_file(prefix.join("bin/python")).unwrap();
    let output = lfm(&["analyze", "--no-cache", file.to_str().unwrap()]);
    assert!(
        !stderr(&output).contains("is installed code"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn every_cache_of_analyze_lives_under_the_cache_dir_given() {
    let Some(venv) = real_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let given = dir.path().join("given");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        dir.path().join("work.py"),
        "import requests\n\n\ndef get(url):\n    return requests.get(url)\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["analyze", "--env", venv.to_str().unwrap(), "work.py:get"];
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_lfm"))
            .args(&args)
            .current_dir(dir.path())
            .env("HOME", &home)
            .env_remove("XDG_CACHE_HOME")
            .env_remove("LFM_CACHE_DIR")
            .output()
            .unwrap()
    };
    let output = run(&["--cache-dir", given.to_str().unwrap()]);
    assert_succeeded(&output);
    assert!(stdout(&output).contains("requests"), "{}", stdout(&output));
    // The interpreter's answer and the distribution index are caches too: kept under
    // `given` or nowhere (neither is kept while its stamps are under two seconds old, as for
    // a venv just made).
    assert!(given.join("analyze-summaries.bin").exists());
    let written: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .collect();
    assert!(
        written.is_empty(),
        "written outside --cache-dir: {written:?}"
    );
    // Without --cache-dir the default is used, and a second run still reads the same answer.
    let default = run(&[]);
    assert_succeeded(&default);
    assert_eq!(stdout(&default), stdout(&output));
    assert!(home.join(".cache/lfm/analyze-summaries.bin").exists());
}
