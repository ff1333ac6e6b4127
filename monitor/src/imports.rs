//! The import log a call's runner streams (python/lfm_runner/imports.py): what the call loaded.

use std::path::Path;

use crate::report::{ImportedModule, Imports};

/// Parse `name<TAB>origin` lines, first occurrence of each name kept, in import order. A
/// half-written last line (the call was killed mid-write) is dropped.
pub fn read(path: &Path, preloaded: &[String]) -> Option<Imports> {
    let text = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&text);
    let mut seen = std::collections::HashSet::new();
    let mut modules = Vec::new();
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let Some((name, origin)) = line.trim_end_matches('\n').split_once('\t') else {
            continue;
        };
        if name.is_empty() || !seen.insert(name.to_string()) {
            continue;
        }
        modules.push(ImportedModule {
            name: name.to_string(),
            found: origin != "!",
            file: (!origin.is_empty() && origin != "!" && origin.starts_with('/'))
                .then(|| origin.to_string()),
            distribution: None,
        });
    }
    Some(Imports {
        modules,
        preloaded: preloaded.to_vec(),
        not_in_closure: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_modules_in_order_once_each_and_a_torn_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("imports.log");
        std::fs::write(
            &log,
            "json\t/usr/lib/python3.11/json/__init__.py\nposix\tbuilt-in\nmissing\t!\njson\t/x\nyam",
        )
        .unwrap();
        let imports = read(&log, &["pandas".into()]).unwrap();
        let names: Vec<&str> = imports.modules.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["json", "posix", "missing"]);
        assert_eq!(
            imports.modules[0].file.as_deref(),
            Some("/usr/lib/python3.11/json/__init__.py")
        );
        assert_eq!(imports.modules[1].file, None);
        assert!(!imports.modules[2].found);
        assert_eq!(imports.preloaded, ["pandas"]);
    }
}
