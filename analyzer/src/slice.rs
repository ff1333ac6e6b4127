//! A function's slice: the module-level statements of its own module it needs to run.
//!
//! [`crate::closure::slice_lines`] follows the function's module globals to their bindings
//! (the same walk as its closure); this maps those lines to whole top-level statements, so a
//! compound statement (`try/except ImportError`, `if`) is taken whole, in source order.

use std::path::PathBuf;

use ruff_python_parser::{parse_unchecked, Mode, ParseOptions};
use ruff_source_file::LineIndex;
use ruff_text_size::{Ranged, TextSize};

/// What `lfm call` executes of a function's module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSlice {
    /// Dotted module name.
    pub module: String,
    pub file: PathBuf,
    /// `module:qualname`.
    pub target: String,
    /// (first line, last line) of each top-level statement to execute, in source order.
    pub statements: Vec<(u32, u32)>,
}

/// The top-level statements of `source` that contain one of `lines` (1-based).
pub fn statements_holding(source: &str, lines: &[u32]) -> Vec<(u32, u32)> {
    let parsed = parse_unchecked(source, ParseOptions::from(Mode::Module));
    let Some(module) = parsed.syntax().as_module() else {
        return Vec::new();
    };
    let index = LineIndex::from_source_text(source);
    let line_of = |offset: TextSize| index.line_index(offset).get() as u32;
    module
        .body
        .iter()
        .map(|statement| {
            let range = statement.range();
            let last = range.end().max(range.start() + TextSize::from(1)) - TextSize::from(1);
            (line_of(range.start()), line_of(last))
        })
        .filter(|&(first, last)| lines.iter().any(|&line| first <= line && line <= last))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "import json\nimport heavy\ntry:\n    import yaml\nexcept ImportError:\n    yaml = None\n\n@decorate\ndef f():\n    return json.dumps(1)\n";

    #[test]
    fn a_line_takes_its_whole_top_level_statement() {
        assert_eq!(statements_holding(SOURCE, &[1]), vec![(1, 1)]);
        assert_eq!(statements_holding(SOURCE, &[4]), vec![(3, 6)]);
        assert_eq!(statements_holding(SOURCE, &[6, 4]), vec![(3, 6)]);
    }

    #[test]
    fn a_decorated_definition_starts_at_its_decorator() {
        assert_eq!(statements_holding(SOURCE, &[9]), vec![(8, 10)]);
    }

    #[test]
    fn statements_come_in_source_order_and_unlisted_ones_stay_out() {
        assert_eq!(statements_holding(SOURCE, &[9, 1]), vec![(1, 1), (8, 10)]);
        assert!(statements_holding(SOURCE, &[7]).is_empty());
    }
}
