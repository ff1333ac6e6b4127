//! A call's analysis kept between `lfm call`s: the slice's line ranges and the closure its
//! imports are compared with. With the interpreter's answer, the distribution index and the
//! summaries all cached, locating, reading them back and resolving still cost a cold `lfm call`
//! 5-9 ms before the function started; an entry is read back with one stat per input.
//!
//! An entry is named by the lfm executable, the interpreter (as the interpreter cache names
//! it: its path as started and its binary; never kept, as there, for a script that picks an
//! interpreter at each start), the target and the source roots. It holds the stamps of all
//! the analysis read ([`lfm_analyzer::Analysis::read_paths`]: source files, directories listed
//! while resolving imports, the `__init__.py` files that name the module, the inputs of the
//! interpreter's answer and of the distribution index), and any stamp that differs means:
//! analyse again. An entry is stored only when every input changed over two seconds before the
//! analysis started: a change made while it ran, or just after within one tick of a coarse
//! file-system clock, would otherwise hide behind a stamp taken after it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use lfm_analyzer::kept_files::{executable_hasher, read_stamped, settled, store_stamped, Stamp};
use lfm_analyzer::{Environment, Options};
use serde::{Deserialize, Serialize};

/// The directory under lfm's (analyze) cache directory, and how many analyses it keeps (an
/// entry is a few KB: its stamps).
pub const DIR: &str = "call-analyses";
pub const KEPT: usize = 64;

/// What a call needs of its function's analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeptAnalysis {
    /// The slice: (first line, last line) ranges in source order.
    pub statements: Vec<[u64; 2]>,
    /// The closure's local and third-party modules, with the distribution of each.
    pub modules: Vec<(String, Option<String>)>,
    /// Every distribution the closure needs (`name==version`).
    pub distributions: Vec<String>,
    /// Where the distributions of the modules a call imported are looked up.
    pub site_dirs: Vec<PathBuf>,
    pub prefix: PathBuf,
}

/// The entry's file name for analysing `target` with `options`; None where the interpreter
/// cannot be named for good (then nothing is kept).
pub fn key(target: &str, options: &Options) -> Option<String> {
    let python = match &options.environment {
        Environment::Python(python) => python.clone(),
        Environment::Prefix(prefix) => lfm_analyzer::interpreter::python_of_prefix(prefix)?,
    };
    let interpreter = lfm_analyzer::interpreter_cache::answer_key(&python)?;
    let mut hasher = executable_hasher()?;
    let fields = [interpreter.as_bytes(), target.as_bytes()].into_iter();
    let roots = (options.roots.iter().chain(&options.extra_site_dirs))
        .map(|r| r.as_os_str().as_encoded_bytes());
    for field in fields.chain(roots) {
        hasher.update(&(field.len() as u64).to_le_bytes());
        hasher.update(field);
    }
    Some(format!("{}.bin", &hasher.finalize().to_hex()[..32]))
}

/// The entry `key` in `dir`, when everything it was computed from is as it was.
pub fn lookup(dir: &Path, key: &str) -> Option<KeptAnalysis> {
    read_stamped(&dir.join(key))
}

/// Keep `kept`, computed from `read` by an analysis started at `started`, as entry `key`.
/// Quietly not where an input changed too recently, or `read` is unknown (None: the
/// interpreter cannot be named).
pub fn store(
    dir: &Path,
    key: &str,
    started: SystemTime,
    read: Option<impl Iterator<Item = PathBuf>>,
    kept: &KeptAnalysis,
) {
    let Some(read) = read else {
        return;
    };
    let mut paths: Vec<PathBuf> = read.collect();
    paths.sort_unstable();
    paths.dedup();
    let stamps: Vec<_> = paths
        .into_iter()
        .map(|path| {
            let at = Stamp::of(&path);
            (path, at)
        })
        .collect();
    if settled(&stamps, started) {
        store_stamped(dir, key, ".bin", KEPT, &stamps, kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpreter::Interpreter;
    use crate::slice::{slice_kept, Sliced};
    use std::process::Command;
    use std::time::{Duration, UNIX_EPOCH};

    /// A venv without pip (its python is a binary, whose answer is kept, unlike a pyenv
    /// shim's), a project `proj` in it whose `m.f` uses a local module and the installed
    /// distribution `alpha`, all modified long ago.
    struct Scratch {
        _dir: tempfile::TempDir,
        python: PathBuf,
        site: PathBuf,
        project: PathBuf,
        cache: PathBuf,
    }

    fn scratch() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join("env");
        let made = Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&env)
            .status()
            .expect("python3 runs");
        assert!(made.success());
        let site = std::fs::read_dir(env.join("lib"))
            .unwrap()
            .map(|e| e.unwrap().path().join("site-packages"))
            .next()
            .unwrap();
        install(&site, "alpha", "1.0");
        install(&site, "beta", "1.0");
        let project = dir.path().join("proj");
        std::fs::create_dir(&project).unwrap();
        write(&project.join("m.py"), "import alpha\nimport helper\nX = 1\n\ndef f():\n    return helper.g() + X + len(alpha.__name__)\n\ndef other():\n    return 2\n");
        write(&project.join("helper.py"), "def g():\n    return 1\n");
        settle(dir.path());
        Scratch {
            python: env.join("bin/python"),
            cache: dir.path().join("cache"),
            _dir: dir,
            site,
            project,
        }
    }

    /// Distribution `name` (one package) at `version` in `site`, in place of any other version.
    fn install(site: &Path, name: &str, version: &str) {
        for entry in std::fs::read_dir(site).unwrap() {
            let path = entry.unwrap().path();
            let file_name = path.file_name().unwrap().to_string_lossy().into_owned();
            if file_name.starts_with(&format!("{name}-")) {
                std::fs::remove_dir_all(path).unwrap();
            }
        }
        let info = site.join(format!("{name}-{version}.dist-info"));
        std::fs::create_dir_all(&info).unwrap();
        let metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
        write(&info.join("METADATA"), &metadata);
        write(&info.join("RECORD"), &format!("{name}/__init__.py,,\n"));
        write(&site.join(name).join("__init__.py"), "");
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Every file and directory under `dir` modified long ago (links left alone: the venv's
    /// python links to the real interpreter).
    fn settle(dir: &Path) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                settle(&entry.path());
            } else if entry.file_type().unwrap().is_file() {
                set_long_ago(&entry.path());
            }
        }
        set_long_ago(dir);
    }

    fn set_long_ago(path: &Path) {
        let at = UNIX_EPOCH + Duration::from_secs(1_000_000);
        std::fs::File::open(path).unwrap().set_modified(at).unwrap();
    }

    fn sliced(scratch: &Scratch, target: &str) -> Sliced {
        let interpreter = Interpreter {
            argv: vec![scratch.python.clone().into()],
            source_roots: vec![scratch.project.clone()],
            analysis_env: Environment::Python(scratch.python.clone()),
            site_dirs: Vec::new(),
            roots: Vec::new(),
            pack_lease: None,
        };
        let located = crate::locate::locate(target, &interpreter).unwrap();
        slice_kept(&located, &interpreter, Some(scratch.cache.clone())).unwrap()
    }

    fn f(scratch: &Scratch) -> Sliced {
        sliced(
            scratch,
            &format!("{}:f", scratch.project.join("m.py").display()),
        )
    }

    fn entries(scratch: &Scratch) -> usize {
        std::fs::read_dir(scratch.cache.join(DIR)).map_or(0, |d| d.count())
    }

    fn module_names(sliced: &Sliced) -> Vec<&str> {
        let modules = sliced.kept.modules.iter();
        let mut names: Vec<&str> = modules.map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        names
    }

    /// Analysed afresh, and not served from the cache on the next call either (what changed
    /// is too recent to keep).
    fn analysed_again(scratch: &Scratch) -> Sliced {
        let fresh = f(scratch);
        assert!(
            fresh.analysis.is_some(),
            "a kept analysis used after a change"
        );
        assert!(f(scratch).analysis.is_some(), "kept just after a change");
        fresh
    }

    #[test]
    fn an_analysis_is_kept_and_answers_as_the_first_one() {
        let scratch = scratch();
        let first = f(&scratch);
        assert!(first.analysis.is_some());
        assert_eq!(entries(&scratch), 1);
        let kept = f(&scratch);
        assert!(
            kept.analysis.is_none(),
            "analysed again though nothing changed"
        );
        assert_eq!(kept.kept, first.kept);
        assert_eq!(first.statements(), [[1, 1], [2, 2], [3, 3], [5, 6]]);
        assert_eq!(module_names(&kept), ["alpha", "helper"]);
        assert_eq!(kept.kept.distributions, ["alpha==1.0"]);
        // Another function of the same file is its own entry.
        let other = sliced(
            &scratch,
            &format!("{}:other", scratch.project.join("m.py").display()),
        );
        assert_eq!(other.statements(), [[8, 9]]);
        assert_eq!(entries(&scratch), 2);
    }

    #[test]
    fn editing_the_functions_file_analyses_it_again() {
        let scratch = scratch();
        f(&scratch);
        let edited = "import alpha\nimport helper\nX = 1\nY = 2\n\ndef f():\n    return helper.g() + X + Y + len(alpha.__name__)\n";
        write(&scratch.project.join("m.py"), edited);
        let again = analysed_again(&scratch);
        assert_eq!(again.statements(), [[1, 1], [2, 2], [3, 3], [4, 4], [6, 7]]);
    }

    #[test]
    fn editing_a_local_module_it_imports_analyses_it_again() {
        let scratch = scratch();
        f(&scratch);
        write(&scratch.project.join("extra.py"), "");
        write(
            &scratch.project.join("helper.py"),
            "import extra\n\ndef g():\n    return 1\n",
        );
        let again = analysed_again(&scratch);
        assert_eq!(module_names(&again), ["alpha", "extra", "helper"]);
    }

    #[test]
    fn a_local_module_added_where_imports_were_looked_up_analyses_it_again() {
        let scratch = scratch();
        f(&scratch);
        // Found before the installed distribution now: the project's directory changed.
        write(&scratch.project.join("alpha.py"), "");
        let again = analysed_again(&scratch);
        assert!(again.kept.distributions.is_empty());
    }

    #[test]
    fn a_package_marker_that_renames_the_module_analyses_it_again() {
        let scratch = scratch();
        let package = scratch.project.join("pkg");
        write(
            &package.join("rel.py"),
            "from . import helper\n\ndef h():\n    return helper.g()\n",
        );
        write(&package.join("helper.py"), "def g():\n    return 1\n");
        settle(&scratch.project);
        // Found as `pkg.rel` in a namespace package, then in a regular one: the same file
        // under the same root, but `rel` is no longer a top-level module.
        let h = || sliced(&scratch, "pkg.rel:h");
        assert!(
            module_names(&h()).is_empty(),
            "no package yet: nothing to import from"
        );
        assert!(h().analysis.is_none());
        write(&package.join("__init__.py"), "");
        settle(&scratch.project);
        // Directories' mtimes are set back: only the marker's own stamp (absent, now
        // present) tells.
        let again = h();
        assert!(
            again.analysis.is_some(),
            "a kept analysis used after a change"
        );
        assert_eq!(module_names(&again), ["pkg", "pkg.helper"]);
    }

    #[test]
    fn an_upgraded_distribution_analyses_it_again() {
        let scratch = scratch();
        f(&scratch);
        install(&scratch.site, "alpha", "2.0");
        let again = analysed_again(&scratch);
        assert_eq!(again.kept.distributions, ["alpha==2.0"]);
    }

    #[test]
    fn installed_code_edited_in_place_analyses_it_again() {
        let scratch = scratch();
        f(&scratch);
        // alpha now imports beta, which it does not declare; no directory changes.
        write(&scratch.site.join("alpha/__init__.py"), "import beta\n");
        settle(&scratch.site);
        let again = f(&scratch);
        assert!(
            again.analysis.is_some(),
            "a kept analysis used after a change"
        );
        assert_eq!(again.kept.distributions, ["alpha==1.0", "beta==1.0"]);
    }

    #[test]
    fn inputs_changed_too_recently_are_not_kept() {
        let scratch = scratch();
        write(
            &scratch.project.join("helper.py"),
            "def g():\n    return 3\n",
        );
        assert!(f(&scratch).analysis.is_some());
        assert_eq!(entries(&scratch), 0);
    }

    #[test]
    fn a_damaged_entry_is_analysed_again() {
        let scratch = scratch();
        let first = f(&scratch);
        let entry = std::fs::read_dir(scratch.cache.join(DIR))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let bytes = std::fs::read(&entry).unwrap();
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 3] {
            std::fs::write(&entry, &bytes[..cut]).unwrap();
            let again = f(&scratch);
            assert!(again.analysis.is_some(), "cut at {cut}");
            assert_eq!(again.kept, first.kept);
        }
    }
}
