//! Editable installs: where the project files of a distribution installed with `pip install -e`
//! live, read from what the installer left in site-packages.
//!
//! Three forms are met: setuptools' meta-path finder (`__editable___NAME_finder.py`, whose
//! `MAPPING` names each top-level package's directory, started by an `__editable__.*.pth`),
//! a `.pth` of path lines (hatchling, pdm, setuptools' compat mode: the project's source
//! directory joins sys.path), and the old `setup.py develop` form (an `.egg-link` and an
//! `easy-install.pth` line; the egg-info lies in the project directory, itself on sys.path).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One importable top-level name of an editable project and the file or directory it is
/// imported from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditableRoot {
    /// `foo` for a package `foo/` or a module `foo.py`.
    pub name: String,
    pub path: PathBuf,
}

/// What a dist-info's RECORD tells of an editable install: its roots, and the installed files
/// that only point at the project (the finder and the `.pth`), which mean nothing elsewhere.
#[derive(Debug, Default)]
pub struct Editable {
    pub roots: Vec<EditableRoot>,
    pub launchers: Vec<PathBuf>,
}

/// The editable roots a RECORD's files (absolute) point at; empty for an ordinary install.
pub fn from_record(files: &[PathBuf]) -> Result<Editable, String> {
    let mut editable = Editable::default();
    for file in files {
        let Some(name) = file.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with("__editable___") && name.ends_with("_finder.py") {
            let text =
                std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
            let mapping = finder_mapping(&text)
                .ok_or_else(|| format!("{}: no MAPPING could be read", file.display()))?;
            editable.roots.extend(mapping);
            editable.launchers.push(file.clone());
        } else if name.ends_with(".pth") {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            if let Some(dirs) = path_lines(&text) {
                for dir in dirs {
                    editable.roots.extend(importable_entries(&dir));
                }
                editable.launchers.push(file.clone());
            } else if text.contains("__editable___") {
                editable.launchers.push(file.clone());
            }
        }
    }
    Ok(editable)
}

/// The roots of an old-style develop install, whose egg-info lies in the project directory
/// `project` (on sys.path through `easy-install.pth`): the names its top_level.txt lists.
pub fn from_develop_egg(project: &Path, egg_info: &Path) -> Vec<EditableRoot> {
    let Ok(text) = std::fs::read_to_string(egg_info.join("top_level.txt")) else {
        return importable_entries(project);
    };
    text.lines()
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .filter_map(|name| {
            let package = project.join(name);
            let module = project.join(format!("{name}.py"));
            let path = [package, module].into_iter().find(|p| p.exists())?;
            Some(EditableRoot {
                name: name.to_string(),
                path,
            })
        })
        .collect()
}

/// A `.pth` whose every line is an existing absolute directory (what editable installs write),
/// as those directories; None for a `.pth` with `import` lines or other paths.
fn path_lines(text: &str) -> Option<Vec<PathBuf>> {
    let lines: Vec<&str> = (text.lines().map(str::trim))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let all_dirs = !lines.is_empty()
        && lines
            .iter()
            .all(|l| l.starts_with('/') && Path::new(l).is_dir());
    all_dirs.then(|| lines.iter().map(PathBuf::from).collect())
}

/// What `import NAME` can find in `dir`: regular packages (with `__init__.py`, and not a
/// venv's directory) and modules, never hidden entries.
fn importable_entries(dir: &Path) -> Vec<EditableRoot> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut roots: Vec<EditableRoot> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|path| {
            let file_name = path.file_name()?.to_str()?;
            let name = if path.is_dir() {
                let package =
                    path.join("__init__.py").is_file() && !path.join("pyvenv.cfg").exists();
                package.then_some(file_name)?
            } else {
                module_stem(file_name)?
            };
            is_identifier(name).then(|| EditableRoot {
                name: name.to_string(),
                path: path.clone(),
            })
        })
        .collect();
    roots.sort_by(|a, b| a.path.cmp(&b.path));
    roots
}

/// `foo` of `foo.py` or `foo.cpython-311-x86_64-linux-gnu.so`.
fn module_stem(file_name: &str) -> Option<&str> {
    if let Some(stem) = file_name.strip_suffix(".py") {
        return Some(stem);
    }
    file_name
        .strip_suffix(".so")
        .map(|stem| stem.split('.').next().unwrap_or(stem))
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// setuptools writes `MAPPING: dict[str, str] = {'foo': '/src/foo'}` (older versions without
/// the annotation): the dict's string pairs.
fn finder_mapping(text: &str) -> Option<Vec<EditableRoot>> {
    let line = text.lines().find(|l| l.starts_with("MAPPING"))?;
    let literal = line[line.find('{')?..].trim();
    let strings = python_strings(literal)?;
    if strings.len() % 2 != 0 {
        return None;
    }
    Some(
        strings
            .chunks(2)
            .map(|pair| EditableRoot {
                name: pair[0].clone(),
                path: PathBuf::from(&pair[1]),
            })
            .collect(),
    )
}

/// The string literals of a repr'd dict of strings, in order (repr uses `'` or `"` quotes
/// and backslash escapes).
fn python_strings(literal: &str) -> Option<Vec<String>> {
    let mut strings = Vec::new();
    let mut chars = literal.chars();
    while let Some(c) = chars.next() {
        if c != '\'' && c != '"' {
            continue;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '\\' => value.push(chars.next()?),
                q if q == c => break,
                other => value.push(other),
            }
        }
        strings.push(value);
    }
    Some(strings)
}

/// Every file under an editable root (a package directory, or one module file), without
/// bytecode; the order is the file system's, sorted.
pub fn root_files(root: &EditableRoot) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![root.path.clone()];
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_dir() {
            files.push(path);
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name == "__pycache__" || name.starts_with('.') || name.ends_with(".pyc") {
                continue;
            }
            pending.push(entry.path());
        }
    }
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_setuptools_finder_mapping() {
        let text = "import sys\nMAPPING: dict[str, str] = {'foo': '/p/src/foo', 'b\\'x': \"/q/b\"}\nNAMESPACES: dict[str, list[str]] = {}\n";
        let roots = finder_mapping(text).unwrap();
        assert_eq!(roots.len(), 2);
        assert_eq!(roots[0].name, "foo");
        assert_eq!(roots[0].path, PathBuf::from("/p/src/foo"));
        assert_eq!(roots[1].name, "b'x");
    }

    #[test]
    fn a_pth_with_imports_is_not_a_path_pth() {
        assert!(path_lines("import _virtualenv\n").is_none());
        assert!(path_lines("/definitely/not/here\n").is_none());
        assert_eq!(
            path_lines("# c\n/tmp\n").unwrap(),
            vec![PathBuf::from("/tmp")]
        );
    }
}
