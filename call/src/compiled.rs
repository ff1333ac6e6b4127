//! Where `lfm call` lets the runner keep a slice's compiled code between calls: a cold
//! interpreter that compiles a slice imports `ast` first (~10 ms, the most of what slicing
//! cost a call over importing the module).
//!
//! One file per (interpreter command, source file, line ranges) under `DIR` in the cache
//! directory. The runner decides whether an entry holds (python/lfm_runner/compiled.py: same
//! bytecode magic, same source text, same ranges) and rewrites it when not; this side names the
//! slot and bounds the directory.

use std::path::Path;

use crate::runner::request::Target;

use crate::interpreter::Interpreter;

/// The directory under lfm's cache directory, and how many compiled slices it keeps.
pub const DIR: &str = "call-slices";
pub const KEPT: usize = 256;

/// Name the file the runner keeps `target`'s compiled slice in (a slice target only), and
/// make room for it when it is not there yet.
pub fn keep_compiled(target: &mut Target, cache: &Path, interpreter: &Interpreter) {
    let Target::Slice {
        file: Some(file),
        statements,
        compiled,
        ..
    } = target
    else {
        return;
    };
    let dir = cache.join(DIR);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let slot = dir.join(slot_name(interpreter, file, statements));
    if !slot.exists() {
        // The runner is about to add one.
        // A runner's leftover temporary file counts too, and goes first once it is old.
        lfm_analyzer::kept_files::keep_newest(&dir, "", KEPT - 1);
    }
    *compiled = Some(slot);
}

fn slot_name(interpreter: &Interpreter, file: &Path, statements: &[[u64; 2]]) -> String {
    let mut hasher = blake3::Hasher::new();
    for arg in &interpreter.argv {
        hasher.update(arg.as_encoded_bytes());
        hasher.update(&[0]);
    }
    hasher.update(file.as_os_str().as_encoded_bytes());
    hasher.update(&[0]);
    for [first, last] in statements {
        hasher.update(&first.to_le_bytes());
        hasher.update(&last.to_le_bytes());
    }
    let hex = hasher.finalize().to_hex();
    format!("{}.bin", &hex[..32])
}

#[cfg(test)]
mod tests {
    use super::*;
    use lfm_analyzer::Environment;

    fn interpreter(python: &str) -> Interpreter {
        Interpreter {
            argv: vec![python.into()],
            source_roots: Vec::new(),
            analysis_env: Environment::Python(python.into()),
            site_dirs: Vec::new(),
            roots: Vec::new(),
            pack_lease: None,
        }
    }

    fn slice(file: &str, statements: Vec<[u64; 2]>) -> Target {
        Target::Slice {
            module: "m".into(),
            root: None,
            file: Some(file.into()),
            qualname: "f".into(),
            statements,
            compiled: None,
        }
    }

    fn slot(target: &Target) -> std::path::PathBuf {
        match target {
            Target::Slice {
                compiled: Some(path),
                ..
            } => path.clone(),
            _ => panic!("no slot named"),
        }
    }

    #[test]
    fn each_interpreter_file_and_ranges_get_their_own_slot() {
        let cache = tempfile::tempdir().unwrap();
        let named = |python, file, statements| {
            let mut target = slice(file, statements);
            keep_compiled(&mut target, cache.path(), &interpreter(python));
            slot(&target)
        };
        let first = named("python3", "/p/m.py", vec![[1, 2]]);
        assert_eq!(first, named("python3", "/p/m.py", vec![[1, 2]]));
        assert!(first.starts_with(cache.path().join(DIR)));
        assert_ne!(first, named("python3.12", "/p/m.py", vec![[1, 2]]));
        assert_ne!(first, named("python3", "/q/m.py", vec![[1, 2]]));
        assert_ne!(first, named("python3", "/p/m.py", vec![[1, 3]]));
    }

    #[test]
    fn other_targets_are_left_alone() {
        let cache = tempfile::tempdir().unwrap();
        let mut target = Target::Import {
            module: "m".into(),
            root: None,
            qualname: "f".into(),
        };
        keep_compiled(&mut target, cache.path(), &interpreter("python3"));
        assert!(matches!(target, Target::Import { .. }));
    }
}
