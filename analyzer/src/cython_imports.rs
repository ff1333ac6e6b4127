//! The Python-level imports of a Cython source shipped beside its extension module
//! (`pyarrow/lib.pyx` beside `pyarrow/lib.*.so`, and the `.pxi` files it includes): what the
//! extension imports when it is imported, which no Python file of its distribution says
//! (pyarrow's `compat.pxi` runs `try: import cloudpickle`).
//!
//! Cython is not Python, so this is a tolerant, line-based reading: `import a, b as c` and
//! `from m import x, (y, z)` statements outside any function body, `include "file.pxi"`
//! followed (relative to the including file); `cimport` (compile-time only) is ignored.

use std::path::{Path, PathBuf};

/// Includes deeper than this are not followed (a cycle, or something that is no source tree).
const MAX_INCLUDE_DEPTH: u32 = 8;

/// One Python-level import: the module as written (leading dots kept for a relative one), a
/// name imported from it, and the line of the top file it is on (for an included file's
/// import, the line of the `include` that brought it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CythonImport {
    pub module: String,
    pub member: Option<String>,
    pub line: u32,
}

/// The imports that run when the extension built from `pyx` is imported; an unreadable
/// file (or include) gives none.
pub fn python_imports(pyx: &Path) -> Vec<CythonImport> {
    let mut found = Vec::new();
    read_file(pyx, None, 0, &mut found);
    found
}

fn read_file(path: &Path, at_line: Option<u32>, depth: u32, found: &mut Vec<CythonImport>) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let mut blocks = BlockStack::default();
    let mut statement = String::new();
    let mut statement_line = 0;
    for (index, raw) in text.lines().enumerate() {
        let line = strip_comment(raw);
        if statement.is_empty() {
            if line.trim().is_empty() {
                continue;
            }
            blocks.enter(line);
            statement_line = index as u32 + 1;
        }
        statement.push_str(line.trim_end().trim_end_matches('\\'));
        statement.push(' ');
        if still_open(&statement, line) {
            continue;
        }
        let reported = at_line.unwrap_or(statement_line);
        let text = std::mem::take(&mut statement);
        if let Some(included) = include_of(&text) {
            if depth < MAX_INCLUDE_DEPTH {
                let base = path.parent().unwrap_or(Path::new("")).join(included);
                read_file(&base, Some(reported), depth + 1, found);
            }
        } else if !blocks.in_function() {
            found.extend(imports_of(text.trim(), reported));
        }
    }
}

/// `line` without a trailing `# comment` (a `#` inside quotes is kept).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return &line[..at],
            (None, '"' | '\'') => quote = Some(c),
            (Some(open), c) if c == open => quote = None,
            _ => {}
        }
    }
    line
}

/// Whether the statement read so far goes on: an open parenthesis or a trailing backslash.
fn still_open(statement: &str, line: &str) -> bool {
    let depth = statement.matches('(').count() as i64 - statement.matches(')').count() as i64;
    depth > 0 || line.trim_end().ends_with('\\')
}

/// The file an `include "file.pxi"` statement names.
fn include_of(statement: &str) -> Option<PathBuf> {
    let rest = statement.trim().strip_prefix("include")?.trim();
    let name = rest.strip_prefix(['"', '\''])?.strip_suffix(['"', '\''])?;
    Some(PathBuf::from(name))
}

/// The imports of one statement: `import a.b, c as d` or `from m import x, y as z`.
fn imports_of(statement: &str, line: u32) -> Vec<CythonImport> {
    let import = |module: &str, member: Option<&str>| CythonImport {
        module: module.to_string(),
        member: member.map(str::to_string),
        line,
    };
    if let Some(names) = statement.strip_prefix("import ") {
        return (names.split(','))
            .filter_map(|part| part.split_whitespace().next())
            .filter(|module| is_dotted(module, false))
            .map(|module| import(module, None))
            .collect();
    }
    let Some(rest) = statement.strip_prefix("from ") else {
        return Vec::new();
    };
    let Some((module, names)) = rest.split_once(" import ") else {
        return Vec::new(); // `from m cimport x` among them
    };
    let module = module.trim();
    if !is_dotted(module, true) {
        return Vec::new();
    }
    let names = names.replace(['(', ')'], " ");
    let members: Vec<&str> = (names.split(','))
        .filter_map(|part| part.split_whitespace().next())
        .filter(|name| *name == "*" || is_dotted(name, false))
        .collect();
    members
        .into_iter()
        .map(|member| import(module, Some(member)))
        .collect()
}

/// A dotted name of identifiers (with leading dots where `relative` allows them).
fn is_dotted(text: &str, relative: bool) -> bool {
    let name = match relative {
        true => text.trim_start_matches('.'),
        false => text,
    };
    (name.is_empty() && text.starts_with('.')) || name.split('.').all(crate::extract::is_identifier)
}

/// The blocks the current line is in, by indentation: whether any is a function body
/// (`def`, `cpdef`, a `cdef` function), whose imports run only when it is called.
#[derive(Default)]
struct BlockStack {
    /// Indentation and whether the block is a function's, innermost last.
    open: Vec<(usize, bool)>,
    /// The current line's enclosing blocks include a function.
    in_function: bool,
}

impl BlockStack {
    /// Line `line` starts a statement: close the blocks it is not indented into, then see
    /// whether it is in a function body, and open its own block if it starts one.
    fn enter(&mut self, line: &str) {
        let indent = line.len() - line.trim_start().len();
        while self.open.last().is_some_and(|(at, _)| *at >= indent) {
            self.open.pop();
        }
        self.in_function = self.open.iter().any(|(_, function)| *function);
        let code = line.trim();
        if code.ends_with(':') || code.contains(':') && starts_function(code) {
            self.open.push((indent, starts_function(code)));
        }
    }

    fn in_function(&self) -> bool {
        self.in_function
    }
}

fn starts_function(code: &str) -> bool {
    let function = ["def ", "async def ", "cpdef "]
        .iter()
        .any(|keyword| code.starts_with(keyword));
    let cdef_function = code.starts_with("cdef ")
        && code.contains('(')
        && !code.starts_with("cdef class ")
        && !code.starts_with("cdef extern ");
    function || cdef_function
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(found: &[CythonImport]) -> Vec<(String, Option<String>, u32)> {
        (found.iter())
            .map(|i| (i.module.clone(), i.member.clone(), i.line))
            .collect()
    }

    #[test]
    fn module_level_python_imports_of_a_pyx_and_its_includes() {
        let dir = tempfile::tempdir().unwrap();
        let lib = "\
# cython: language_level = 3
import datetime, decimal as _pydecimal
from cython.operator cimport dereference as deref
from pyarrow.includes.libarrow cimport *
cimport numpy
from . import _compute  # relative
from pyarrow.vendored import (version,
    docscrape)
cdef class Table:
    def to_pandas(self):
        import pandas
cdef object helper(int x):
    import secret
include \"compat.pxi\"
import os
";
        let compat = "\
try:
    import cloudpickle as pickle
except ImportError:
    import pickle
def later():
    import never
";
        std::fs::write(dir.path().join("lib.pyx"), lib).unwrap();
        std::fs::write(dir.path().join("compat.pxi"), compat).unwrap();
        let found = python_imports(&dir.path().join("lib.pyx"));
        let expected = [
            ("datetime", None, 2),
            ("decimal", None, 2),
            (".", Some("_compute"), 6),
            ("pyarrow.vendored", Some("version"), 7),
            ("pyarrow.vendored", Some("docscrape"), 7),
            ("cloudpickle", None, 14),
            ("pickle", None, 14),
            ("os", None, 15),
        ];
        let expected: Vec<(String, Option<String>, u32)> = (expected.iter())
            .map(|(m, n, l)| (m.to_string(), n.map(str::to_string), *l))
            .collect();
        assert_eq!(names(&found), expected);
    }

    #[test]
    fn a_missing_include_or_file_gives_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(python_imports(&dir.path().join("absent.pyx")).is_empty());
        std::fs::write(
            dir.path().join("a.pyx"),
            "include \"gone.pxi\"\nimport json\n",
        )
        .unwrap();
        let found = python_imports(&dir.path().join("a.pyx"));
        assert_eq!(names(&found), [("json".to_string(), None, 2)]);
    }
}
