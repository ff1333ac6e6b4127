//! The Python side's own tests (python/tests, pytest), run by `cargo test` so that one command
//! runs every test. pytest is installed from python/requirements-test.txt (pinned) into a venv
//! cached under target/, made again only when that file changes. The client's tests (lfm,
//! python/lfm) get the lfm binary built for this test run as LFM_BIN.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn test_venv() -> PathBuf {
    let requirements = root().join("python/requirements-test.txt");
    let wanted = std::fs::read_to_string(&requirements).unwrap();
    let venv = root().join("target/pytest-venv");
    let stamp = venv.join("lfm-requirements.txt");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return venv;
    }
    let _ = std::fs::remove_dir_all(&venv);
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(status.success(), "python3 -m venv failed");
    let status = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "installing the Python test dependencies failed"
    );
    std::fs::write(&stamp, wanted).unwrap();
    venv
}

#[test]
fn python_side_passes_its_pytest_suite() {
    let venv = test_venv();
    let output = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(root().join("python"))
        // The client's tests run the lfm this test was built with.
        .env("LFM_BIN", env!("CARGO_BIN_EXE_lfm"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "pytest failed:\n{stdout}");
    assert!(stdout.contains(" passed"), "pytest ran no test:\n{stdout}");
}
