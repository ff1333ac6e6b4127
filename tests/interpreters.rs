//! `lfm call` and `lfm serve` on every Python found here (pyenv's, and python3 on PATH): 3.8 and
//! newer run functions, older ones are refused at start with one line naming the version.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const OLDEST: (u32, u32) = (3, 8);

/// (version, interpreter) of each distinct Python on this machine.
fn interpreters() -> Vec<((u32, u32, u32), PathBuf)> {
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pyenv")))
        .map(|root| root.join("versions"));
    let mut candidates: Vec<PathBuf> = pyenv
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin/python"))
        .filter(|python| python.exists())
        .collect();
    candidates.push(PathBuf::from("python3"));
    let mut found: Vec<((u32, u32, u32), PathBuf)> = candidates
        .into_iter()
        .filter_map(|python| Some((version(&python)?, python)))
        .collect();
    found.sort();
    found.dedup_by_key(|(version, _)| *version);
    found
}

fn version(python: &Path) -> Option<(u32, u32, u32)> {
    let output = Command::new(python)
        .args([
            "-c",
            "import sys; print('%d %d %d' % tuple(sys.version_info[:3]))",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let parts: Vec<u32> = text
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    Some((*parts.first()?, *parts.get(1)?, *parts.get(2)?))
}

fn module_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.py"),
        "def add(a, b):\n    return a + b\n",
    )
    .unwrap();
    dir
}

fn call(dir: &Path, python: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(["call", "--quiet", "--python"])
        .arg(python)
        .args(["--cache-dir"])
        .arg(dir.join("cache"))
        .args(["m.py:add", "--args", "[2, 3]"])
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Two calls through one serve (the second forks from the warm zygote).
fn serve(dir: &Path, python: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args(["serve", "--backend", "rlimit", "--no-history", "--python"])
        .arg(python)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for id in 1..=2 {
        let request = format!(r#"{{"id": {id}, "function": "m.py:add", "args": [{id}, 3]}}"#);
        // A refused interpreter ends the serve before it reads: the pipe may be closed.
        let _ = writeln!(stdin, "{request}");
    }
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn every_python_from_3_8_runs_calls_and_older_ones_are_refused_at_start() {
    let found = interpreters();
    let names: Vec<String> = found
        .iter()
        .map(|((major, minor, micro), _)| format!("{major}.{minor}.{micro}"))
        .collect();
    println!("interpreters found: {}", names.join(", "));
    if found.len() < 2 {
        println!("only python3 on PATH: install more with pyenv to test the range");
    }
    let dir = module_dir();
    let mut wrong = Vec::new();
    for ((major, minor, micro), python) in &found {
        let name = format!("{major}.{minor}.{micro}");
        let call = call(dir.path(), python);
        let serve = serve(dir.path(), python);
        let replies: Vec<serde_json::Value> = String::from_utf8_lossy(&serve.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        if (*major, *minor) >= OLDEST {
            let answered = String::from_utf8_lossy(&call.stdout).trim() == "5";
            if !call.status.success() || !answered {
                wrong.push(format!("{name}: call {call:?}"));
            }
            let results: Vec<&serde_json::Value> = replies.iter().map(|r| &r["result"]).collect();
            if results != [&serde_json::json!(4), &serde_json::json!(5)] {
                wrong.push(format!("{name}: serve replied {replies:?}, {serve:?}"));
            }
            continue;
        }
        let refusal = format!("Python {name} is not supported");
        for (command, output) in [("call", &call), ("serve", &serve)] {
            let stderr = String::from_utf8_lossy(&output.stderr);
            // `lfm call` refuses with a usage error (exit 2), Python 2 through the probe too.
            let refused_as_usage = command != "call" || output.status.code() == Some(2);
            if output.status.success()
                || !refused_as_usage
                || !stderr.contains(&refusal)
                || stderr.matches(&refusal).count() != 1
            {
                wrong.push(format!("{name}: {command} did not refuse once: {stderr}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
