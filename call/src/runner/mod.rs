//! The Python runner (python/lfm_runner, with python/lfm_shared), embedded in the binary and
//! written out on first use.
//!
//! The target interpreter needs nothing installed: lfm writes the runner's files into a
//! directory named by their content hash under its cache, once (atomically, so concurrent lfm
//! processes agree), and runs `python lfm_runner_main.py ...` from there.

use std::path::{Path, PathBuf};

pub mod request;

use anyhow::{Context, Result};

/// The status `lfm_runner_main.py` exits with, at once, on a Python older than the runner
/// supports (3.8), after one line on stderr naming the version.
pub const EXIT_UNSUPPORTED_PYTHON: i32 = 87;

/// (path relative to the runner directory, contents).
const FILES: &[(&str, &str)] = &[
    (
        "lfm_runner_main.py",
        include_str!("../../../python/lfm_runner_main.py"),
    ),
    (
        "lfm_runner/__init__.py",
        include_str!("../../../python/lfm_runner/__init__.py"),
    ),
    (
        "lfm_runner/main.py",
        include_str!("../../../python/lfm_runner/main.py"),
    ),
    (
        "lfm_runner/target.py",
        include_str!("../../../python/lfm_runner/target.py"),
    ),
    (
        "lfm_runner/compiled.py",
        include_str!("../../../python/lfm_runner/compiled.py"),
    ),
    (
        "lfm_runner/call.py",
        include_str!("../../../python/lfm_runner/call.py"),
    ),
    (
        "lfm_runner/results.py",
        include_str!("../../../python/lfm_runner/results.py"),
    ),
    (
        "lfm_runner/plainjson.py",
        include_str!("../../../python/lfm_runner/plainjson.py"),
    ),
    (
        "lfm_runner/headroom.py",
        include_str!("../../../python/lfm_runner/headroom.py"),
    ),
    (
        "lfm_runner/imports.py",
        include_str!("../../../python/lfm_runner/imports.py"),
    ),
    (
        "lfm_shared/__init__.py",
        include_str!("../../../python/lfm_shared/__init__.py"),
    ),
    (
        "lfm_shared/installed.py",
        include_str!("../../../python/lfm_shared/installed.py"),
    ),
    (
        "lfm_shared/opaque.py",
        include_str!("../../../python/lfm_shared/opaque.py"),
    ),
    (
        "lfm_runner/zygote.py",
        include_str!("../../../python/lfm_runner/zygote.py"),
    ),
    (
        "lfm_runner/contexts.py",
        include_str!("../../../python/lfm_runner/contexts.py"),
    ),
    (
        "lfm_runner/reuse.py",
        include_str!("../../../python/lfm_runner/reuse.py"),
    ),
];

/// The runner's entry script under `cache`, written there if it is not yet.
pub fn install(cache: &Path) -> Result<PathBuf> {
    let mut hasher = blake3::Hasher::new();
    for (name, text) in FILES {
        hasher.update(name.as_bytes());
        hasher.update(&[0]);
        hasher.update(text.as_bytes());
    }
    let hash = hasher.finalize().to_hex();
    let dir = cache.join(format!("runner-{}", &hash[..16]));
    let entry = dir.join("lfm_runner_main.py");
    if entry.exists() {
        return Ok(entry);
    }
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let temporary = tempfile::Builder::new()
        .prefix(".runner-")
        .tempdir_in(cache)
        .with_context(|| format!("creating a directory in {}", cache.display()))?;
    for (name, text) in FILES {
        let path = temporary.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let staged = temporary.keep();
    // Another lfm may have published the same runner meanwhile: then ours is not needed.
    if std::fs::rename(&staged, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&staged);
    }
    if !entry.exists() {
        anyhow::bail!("could not install the Python runner into {}", dir.display());
    }
    Ok(entry)
}

/// lfm's cache directory for the runner and call files: `$LFM_CACHE_DIR` (where the analysis
/// and pack caches also go), `$XDG_CACHE_HOME/lfm`, `~/.cache/lfm`, or, where none is writable
/// (a service user without a home), `/tmp/lfm-UID`.
pub fn default_cache() -> PathBuf {
    let given = std::env::var_os("LFM_CACHE_DIR")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from);
    let home_cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|dir| dir.join("lfm"));
    for dir in given.into_iter().chain(home_cache) {
        if std::fs::create_dir_all(&dir).is_ok() && writable(&dir) {
            return dir;
        }
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("lfm-{uid}"))
}

fn writable(dir: &Path) -> bool {
    tempfile::tempfile_in(dir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_once_and_reuses() {
        let cache = tempfile::tempdir().unwrap();
        let first = install(cache.path()).unwrap();
        let second = install(cache.path()).unwrap();
        assert_eq!(first, second);
        let target = first.parent().unwrap().join("lfm_runner/target.py");
        assert_eq!(
            std::fs::read_to_string(target).unwrap(),
            include_str!("../../../python/lfm_runner/target.py")
        );
    }
}
