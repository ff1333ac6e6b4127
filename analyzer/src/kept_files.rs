//! Caches kept as one file an entry in a directory of their own, capped by count: past the
//! cap, the least recently written entries go.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Remove the files of `dir` whose names end with `suffix` ("" for all), beyond the `kept`
/// most recently written.
pub fn keep_newest(dir: &Path, suffix: &str, kept: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= kept {
        return;
    }
    files.sort();
    for (_, path) in &files[..files.len() - kept] {
        let _ = std::fs::remove_file(path);
    }
}
