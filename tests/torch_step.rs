//! A seeded PyTorch training step gives python's numbers on every path lfm runs a function by
//! (python/tests/test_torch_step.py: `lfm call`, `lfm serve`, `lfm.Executor`, Parsl, Dask).
//! It needs real torch, parsl and dask: it runs with the ecosystem corpus venv that
//! bench/ecosystem_venv.sh builds under target/ (9.6 GB, so no test builds it), and says why it
//! skips where that venv is absent.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The corpus venv's interpreter, or why this test cannot use one here.
fn corpus_python() -> Result<std::path::PathBuf, String> {
    let python = root().join("target/bench-venv-ecosystem/bin/python");
    if !python.exists() {
        return Err(format!(
            "{} is absent (bash bench/ecosystem_venv.sh builds it)",
            python.display()
        ));
    }
    let probe = Command::new(&python)
        .args([
            "-c",
            "import torch, parsl, distributed, pytest, cloudpickle",
        ])
        .output()
        .map_err(|error| format!("{} does not run: {error}", python.display()))?;
    if !probe.status.success() {
        return Err(format!(
            "{} lacks torch, parsl, dask or pytest: {}",
            python.display(),
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    Ok(python)
}

#[test]
fn a_seeded_torch_training_step_returns_pythons_numbers_on_every_lfm_path() {
    let python = match corpus_python() {
        Ok(python) => python,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let output = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg("tests/test_torch_step.py")
        .current_dir(root().join("python"))
        .env("LFM_BIN", env!("CARGO_BIN_EXE_lfm"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(output.status.success(), "pytest failed:\n{stdout}");
    assert!(stdout.contains("5 passed"), "not every path ran:\n{stdout}");
}
