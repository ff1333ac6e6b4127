//! The lfm-toolkit wheel (scripts/build_wheel.sh) installed into a fresh venv, used where
//! there is no cargo and no project directory on PATH: `python -m lfm`, `lfm analyze` on the
//! sample, an `lfm.Executor` call, and a Parsl HTEX app whose worker finds the binary beside
//! its interpreter, not on PATH (issue 28). The wheel and the venv are cached under target/,
//! keyed by what goes into them, so repeated runs take seconds.

mod common;

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::assert_succeeded_with;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// What the wheel is built from.
const INPUTS: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "pyproject.toml",
    "scripts/build_wheel.sh",
    "src",
    "analyzer",
    "packer",
    "monitor",
    "call",
    "python/lfm",
    "python/lfm_runner",
    "python/lfm_shared",
    "python/lfm_probes",
    "python/lfm_runner_main.py",
];

fn inputs_key() -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for input in INPUTS {
        let mut files: Vec<PathBuf> = walk(&Path::new(ROOT).join(input));
        files.sort();
        for file in files {
            file.strip_prefix(ROOT).unwrap().hash(&mut hasher);
            std::fs::read(&file).unwrap_or_default().hash(&mut hasher);
        }
    }
    format!("{:016x}", hasher.finish())
}

fn walk(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|p| !p.ends_with("__pycache__") && !p.ends_with("target"))
        .flat_map(|p| walk(&p))
        .collect()
}

fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap();
    assert_succeeded_with(&output, format_args!("{command:?}"));
    output
}

/// The wheel and a venv with it (and Parsl) installed, made once per inputs.
fn installed() -> PathBuf {
    let dir = Path::new(ROOT).join("target/wheel-test").join(inputs_key());
    let venv = dir.join("venv");
    if venv.join(".complete").exists() {
        return venv;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let built = run(Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/build_wheel.sh"))
        .arg(dir.join("wheels")));
    let wheel = String::from_utf8(built.stdout)
        .unwrap()
        .trim()
        .lines()
        .last()
        .unwrap()
        .to_string();
    assert_portable(&built.stderr, &wheel);
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    let pins = Path::new(ROOT).join("python/requirements-test.txt");
    run(Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &wheel,
            "-r",
        ])
        .arg(pins));
    std::fs::write(venv.join(".complete"), wheel).unwrap();
    venv
}

/// The wheel runs on glibc 2.17 and later (auditwheel agrees with its tag), and is small.
fn assert_portable(build_log: &[u8], wheel: &str) {
    let log = String::from_utf8_lossy(build_log);
    assert!(
        wheel.contains("-py3-none-manylinux_2_17_x86_64"),
        "the wheel's tag: {wheel}"
    );
    assert!(
        log.contains("consistent with the following platform tag:\n\"manylinux_2_17_x86_64\""),
        "auditwheel show:\n{log}"
    );
    let size = std::fs::metadata(wheel).unwrap().len();
    assert!(size < 10 << 20, "the wheel is {size} bytes");
}

/// `python` of the venv, with no cargo, no project directory and no venv `bin/` on PATH:
/// PATH holds the system directories and `extra` only.
fn python(venv: &Path, extra: Option<&Path>, args: &[&str]) -> Output {
    let mut path = String::from("/usr/bin:/bin");
    if let Some(extra) = extra {
        path = format!("{}:{path}", extra.display());
    }
    run(Command::new(venv.join("bin/python"))
        .args(args)
        .env_clear()
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .env("PATH", path)
        .env("XDG_RUNTIME_DIR", venv.join("runtime"))
        .env("LFM_HISTORY", venv.join("runtime/history.sqlite"))
        .current_dir(Path::new(ROOT).join("samples/workflow")))
}

#[test]
fn the_wheel_works_where_there_is_no_cargo_and_no_lfm_on_path() {
    let venv = installed();
    std::fs::create_dir_all(venv.join("runtime")).unwrap();
    let version = python(&venv, None, &["-m", "lfm", "--version"]);
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("lfm {}", env!("CARGO_PKG_VERSION"))
    );
    let analyzed = python(
        &venv,
        None,
        &["-m", "lfm", "analyze", "workflow.py", "--format", "json"],
    );
    let spec: serde_json::Value = serde_json::from_slice(&analyzed.stdout).unwrap();
    assert!(
        spec["targets"].as_array().is_some_and(|t| !t.is_empty()),
        "{spec}"
    );

    let called = python(
        &venv,
        None,
        &[
            "-c",
            "import lfm\nwith lfm.Executor() as ex:\n    print(ex.submit(pow, 2, 10).result())",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&called.stdout).trim(), "1024");

    // Parsl starts its interchange and worker pool by name: PATH offers those two scripts and
    // nothing else of the venv, so the worker can only find lfm beside its own interpreter.
    let scripts = venv.join("runtime/parsl-scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    for script in ["process_worker_pool.py", "interchange.py"] {
        let from = venv.join("bin").join(script);
        let to = scripts.join(script);
        if from.exists() && !to.exists() {
            std::os::unix::fs::symlink(&from, &to).unwrap();
        }
    }
    let app = "
import parsl, tempfile
from parsl.config import Config
from parsl.providers import LocalProvider
from lfm.parsl import LfmHighThroughputExecutor, report_of

executor = LfmHighThroughputExecutor(
    label='lfm', cores_per_worker=1, max_workers_per_node=1, encrypted=False,
    provider=LocalProvider(init_blocks=1, max_blocks=1))
with parsl.load(Config(executors=[executor], strategy='none',
                       run_dir=tempfile.mkdtemp())):
    @parsl.python_app
    def square(x):
        return x * x
    future = square(12)
    print(future.result(), report_of(future)['exit']['type'])
";
    let parsl = python(&venv, Some(&scripts), &["-c", app]);
    assert_eq!(String::from_utf8_lossy(&parsl.stdout).trim(), "144 normal");
}
