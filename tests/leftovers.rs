//! What a killed lfm leaves in its cache is removed by the next one (issue 34: nothing lfm
//! leaves per call outlives it, also after a crash).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn serve(cache: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_lfm"))
        .args([
            "serve",
            "--backend",
            "rlimit",
            "--no-history",
            "--cache-dir",
        ])
        .arg(cache)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_serve_killed_with_sigkill_leaves_a_directory_the_next_serve_removes() {
    let cache = tempfile::tempdir().unwrap();
    let mut first = serve(cache.path());
    let left = cache.path().join(format!("serve-{}", first.id()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !left.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(left.exists(), "the serve never made {}", left.display());
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(left.exists(), "SIGKILL leaves the directory behind");
    let mut second = serve(cache.path());
    drop(second.stdin.take()); // nothing to serve: it starts, then ends
    assert!(second.wait().unwrap().success());
    assert!(!left.exists(), "the next serve removed {}", left.display());
}
