//! What an interpreter said about itself, kept between lfm processes: asking it starts the
//! interpreter (~40 ms for a venv's python, ~100 ms through a pyenv shim), which `lfm call`
//! and `lfm analyze` paid on every run.
//!
//! An answer is reused only while nothing it depends on can have changed: the executable is
//! the same file (path, device, inode, size, mtime), it is a binary rather than a script that
//! picks an interpreter at each start (pyenv's shims, conda's wrappers: never cached), the
//! `pyvenv.cfg` next to it is as it was, and every directory of its `sys.path` (and its user
//! site directory, present or not) has the mtime it had: installing a distribution that adds a
//! `.pth` file changes its site directory's. Anything unreadable means: ask again. An answer is
//! kept only where all of those changed over [`SETTLED`] ago.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::interpreter::Interpreter;

/// The cache's directory under lfm's cache directory, and how many answers it keeps.
pub const DIR: &str = "analyze-interpreters";
const KEPT: usize = 32;

#[derive(Serialize, Deserialize)]
struct Entry {
    interpreter: Interpreter,
    /// Each path the answer depends on, and its mtime in nanoseconds (None: it did not exist).
    stamps: Vec<(PathBuf, Option<u128>)>,
}

/// The stored answer of `python` (as resolved on PATH), if it still holds.
pub fn lookup(dir: &Path, python: &Path, query: &str) -> Option<Interpreter> {
    let file = dir.join(key(python, query)?);
    let entry: Entry = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    let unchanged = entry.stamps.iter().all(|(path, at)| mtime(path) == *at);
    unchanged.then_some(entry.interpreter)
}

/// Keep `interpreter` as `python`'s answer (quietly not, where it cannot be written).
pub fn store(dir: &Path, python: &Path, query: &str, interpreter: &Interpreter) {
    let Some(name) = key(python, query) else {
        return;
    };
    let entry = Entry {
        stamps: stamps(python, interpreter),
        interpreter: interpreter.clone(),
    };
    if !settled(&entry.stamps) {
        return;
    }
    let Ok(text) = serde_json::to_vec(&entry) else {
        return;
    };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let _ = lfm_fs::write_bytes_atomically(&dir.join(&name), &text);
    crate::kept_files::keep_newest(dir, ".json", KEPT);
}

/// The environment variables that change an interpreter's sys.path or user site.
const PATH_VARIABLES: [&str; 6] = [
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "PYTHONPLATLIBDIR",
];

/// The file name of `python`'s answer: None where it must not be cached (not found, or not a
/// binary).
fn key(python: &Path, query: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let invoked = on_path(python)?;
    let binary = invoked.canonicalize().ok()?;
    if !is_binary(&binary) {
        return None;
    }
    let meta = binary.metadata().ok()?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(query.as_bytes());
    // The path it is started by decides sys.prefix (a venv's bin/python links to the base's).
    for path in [&invoked, &binary] {
        hasher.update(path.as_os_str().as_encoded_bytes());
        hasher.update(&[0]);
    }
    for number in [meta.dev(), meta.ino(), meta.size()] {
        hasher.update(&number.to_le_bytes());
    }
    hasher.update(&meta.mtime().to_le_bytes());
    hasher.update(&meta.mtime_nsec().to_le_bytes());
    // The interpreter is asked with the environment's variables, and these change its sys.path.
    for variable in PATH_VARIABLES {
        let value = std::env::var_os(variable);
        hasher.update(&[u8::from(value.is_some())]);
        hasher.update(value.unwrap_or_default().as_encoded_bytes());
        hasher.update(&[0]);
    }
    Some(format!("{}.json", &hasher.finalize().to_hex()[..32]))
}

/// `python` as the OS would start it: a path as given (made absolute), a bare name found on
/// PATH.
fn on_path(python: &Path) -> Option<PathBuf> {
    if python.components().count() > 1 {
        return std::path::absolute(python).ok();
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(python))
        .find(|candidate| candidate.is_file())
}

/// An ELF file: a script (`#!`) may start a different interpreter each time.
fn is_binary(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok_and(|()| magic == *b"\x7fELF")
}

/// The name `python`'s answer is kept under, which also tells the interpreter apart (its path
/// as started and the binary's identity): None where its answer is never kept.
pub fn answer_key(python: &Path) -> Option<String> {
    key(python, crate::interpreter::QUERY)
}

/// What the answer depends on: the pyvenv.cfg files Python looks for, the sys.path
/// directories and the user site directory.
pub fn inputs(python: &Path, interpreter: &Interpreter) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    if let Some(bin) = on_path(python).and_then(|p| p.parent().map(Path::to_path_buf)) {
        paths.push(bin.join("pyvenv.cfg"));
        if let Some(prefix) = bin.parent() {
            paths.push(prefix.join("pyvenv.cfg"));
        }
    }
    paths.extend(interpreter.path.iter().cloned());
    paths.extend(interpreter.user_site.iter().cloned());
    paths
}

fn stamps(python: &Path, interpreter: &Interpreter) -> Vec<(PathBuf, Option<u128>)> {
    inputs(python, interpreter)
        .into_iter()
        .map(|path| {
            let at = mtime(&path);
            (path, at)
        })
        .collect()
}

/// How long ago every stamped path must have changed for an answer to be kept: a change made
/// while the interpreter was asked (a `pip install` alongside), or later within the same tick
/// of a coarse file-system clock, would leave the stamp as it is and the answer stale.
const SETTLED: Duration = Duration::from_secs(2);

fn settled(stamps: &[(PathBuf, Option<u128>)]) -> bool {
    let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
        return false;
    };
    let now = now.as_nanos();
    stamps
        .iter()
        .all(|(_, at)| at.is_none_or(|at| now.saturating_sub(at) >= SETTLED.as_nanos()))
}

fn mtime(path: &Path) -> Option<u128> {
    let modified = path.metadata().ok()?.modified().ok()?;
    Some(modified.duration_since(UNIX_EPOCH).ok()?.as_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpreter::Interpreter;
    use std::process::Command;

    /// A venv without pip (made in ~0.1 s), its python and its site directory, whose mtime
    /// is set back so that a change made next shows even on a coarse clock.
    fn venv(root: &Path) -> (PathBuf, PathBuf) {
        let made = Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(root)
            .status()
            .expect("python3 runs");
        assert!(made.success());
        let python = root.join("bin/python");
        let asked = Interpreter::query_cached(&python, None).unwrap();
        let site = asked.site_dirs()[0].clone();
        // Everything the answer depends on that the venv just made, as if made long ago.
        let long_ago = UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        for (path, _) in stamps(&python, &asked) {
            if path.starts_with(root) && path.exists() {
                std::fs::File::open(&path)
                    .unwrap()
                    .set_modified(long_ago)
                    .unwrap();
            }
        }
        (python, site)
    }

    fn answers(cache: &Path) -> usize {
        std::fs::read_dir(cache).map_or(0, |d| d.count())
    }

    #[test]
    fn an_answer_is_reused_until_a_pth_file_changes_sys_path() {
        let scratch = tempfile::tempdir().unwrap();
        let cache = scratch.path().join("cache");
        let (python, site) = venv(&scratch.path().join("env"));
        let asked = Interpreter::query_cached(&python, Some(&cache)).unwrap();
        assert_eq!(answers(&cache), 1);
        let kept = lookup(&cache, &python, crate::interpreter::QUERY).expect("kept");
        assert_eq!(
            (&kept.executable, &kept.prefix, &kept.path, &kept.version),
            (
                &asked.executable,
                &asked.prefix,
                &asked.path,
                &asked.version
            )
        );
        assert_eq!(kept.stdlib_module_names, asked.stdlib_module_names);
        // An installed distribution's .pth adds a directory to sys.path.
        let extra = scratch.path().join("extra");
        std::fs::create_dir(&extra).unwrap();
        std::fs::write(site.join("extra.pth"), format!("{}\n", extra.display())).unwrap();
        assert!(lookup(&cache, &python, crate::interpreter::QUERY).is_none());
        let again = Interpreter::query_cached(&python, Some(&cache)).unwrap();
        assert!(again.path.contains(&extra.canonicalize().unwrap()));
        assert!(!asked.path.contains(&extra.canonicalize().unwrap()));
    }

    #[test]
    fn an_answer_whose_environment_just_changed_is_not_kept() {
        let scratch = tempfile::tempdir().unwrap();
        let cache = scratch.path().join("cache");
        let (python, site) = venv(&scratch.path().join("env"));
        std::fs::write(site.join("fresh.pth"), "\n").unwrap();
        Interpreter::query_cached(&python, Some(&cache)).unwrap();
        assert_eq!(
            answers(&cache),
            0,
            "kept though its site directory changed just now"
        );
    }

    #[test]
    fn a_script_that_picks_its_interpreter_is_asked_every_time() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = tempfile::tempdir().unwrap();
        let cache = scratch.path().join("cache");
        let shim = scratch.path().join("python");
        std::fs::write(&shim, "#!/bin/sh\nexec python3 \"$@\"\n").unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        let asked = Interpreter::query_cached(&shim, Some(&cache)).unwrap();
        assert!(!asked.version.is_empty());
        assert_eq!(answers(&cache), 0);
    }
}
