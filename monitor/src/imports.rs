//! The import log a call's runner streams (python/lfm_runner/imports.py): what the call loaded.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::report::{ImportedModule, Imports};

/// The analyzer's closure of a call's function, as the import log is compared with it: what a
/// pack of the function holds. Stdlib modules are left out: they are never packed, and the
/// runner has loaded many of them before any call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StaticClosure {
    /// The function's module (the runner loads it, and its parent packages).
    pub module: String,
    /// The closure's local and third-party modules.
    pub modules: Vec<ClosureModule>,
    /// Every distribution it needs, the Requires-Dist closure included (`name==version`).
    pub distributions: Vec<String>,
    /// The source roots its local modules were found under.
    pub roots: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosureModule {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
}

/// Parse `name<TAB>origin` lines, first occurrence of each name kept, in import order. A
/// half-written last line (the call was killed mid-write) is dropped.
pub fn read(path: &Path, preloaded: &[String]) -> Option<Imports> {
    let text = std::fs::read(path).ok()?;
    let mut seen = std::collections::HashSet::new();
    let mut modules = parse(&text);
    modules.retain(|module| seen.insert(module.name.clone()));
    Some(Imports {
        modules,
        preloaded: preloaded.to_vec(),
        not_in_closure: Vec::new(),
        closure: None,
    })
}

/// The complete lines written since `offset` (a running call's log, read as it grows);
/// `offset` moves past them.
pub fn read_new(path: &Path, offset: &mut u64) -> Vec<ImportedModule> {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = Vec::new();
    let read = std::fs::File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(*offset))?;
        file.read_to_end(&mut text)
    });
    if read.is_err() {
        return Vec::new();
    }
    let complete = text
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1);
    *offset += complete as u64;
    parse(&text[..complete])
}

/// Every complete line as a module (repeats kept).
fn parse(text: &[u8]) -> Vec<ImportedModule> {
    let text = String::from_utf8_lossy(text);
    let mut modules = Vec::new();
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let Some((name, origin)) = line.trim_end_matches('\n').split_once('\t') else {
            continue;
        };
        let (origin, loaded) = match origin.split_once('\t') {
            Some((origin, flag)) => (origin, flag == "loaded"),
            None => (origin, false),
        };
        if name.is_empty() {
            continue;
        }
        modules.push(ImportedModule {
            name: name.to_string(),
            found: origin != "!",
            file: (!origin.is_empty() && origin != "!" && origin.starts_with('/'))
                .then(|| origin.to_string()),
            distribution: None,
            loaded,
        });
    }
    modules
}

/// Compare a call's imports with its function's static closure. A module with no known
/// distribution gets the one the closure gives its top-level package (`lfm serve`, which has no
/// file index at hand). Flagged as not in the closure, once per distribution (the rest of a
/// missed distribution is its own doing) or per local module: a module of a distribution the
/// closure does not need, a site-packages module of a package the closure does not list, and a
/// local module (under the closure's roots) the closure does not list.
pub fn compare(imports: &mut Imports, closure: Arc<StaticClosure>) {
    let mut listed: HashSet<&str> = closure.modules.iter().map(|m| m.name.as_str()).collect();
    listed.extend(ancestry(&closure.module));
    let tops: HashSet<&str> = listed.iter().map(|name| top(name)).collect();
    let owners: HashMap<&str, &str> = closure
        .modules
        .iter()
        .filter_map(|m| Some((top(&m.name), m.distribution.as_deref()?)))
        .collect();
    let needed: HashSet<&str> = closure.distributions.iter().map(String::as_str).collect();
    let mut flagged = HashSet::new();
    let mut missed = Vec::new();
    for module in imports.modules.iter_mut().filter(|m| m.found) {
        if module.distribution.is_none() {
            module.distribution = owners.get(top(&module.name)).map(|d| d.to_string());
        }
        let key = match (&module.distribution, module.file.as_deref()) {
            (Some(dist), _) => (!needed.contains(dist.as_str())).then(|| dist.clone()),
            (None, Some(file)) if installed(file) => {
                (!tops.contains(top(&module.name))).then(|| top(&module.name).to_string())
            }
            (None, Some(file)) if local(file, &closure.roots) => {
                (!listed.contains(module.name.as_str())).then(|| module.name.clone())
            }
            _ => None,
        };
        if key.is_some_and(|key| flagged.insert(key)) {
            missed.push(module.name.clone());
        }
    }
    imports.not_in_closure = missed;
    imports.closure = Some(closure);
}

/// `a.b.c`, `a.b` and `a`.
pub fn ancestry(module: &str) -> impl Iterator<Item = &str> {
    let ends = module.match_indices('.').map(|(i, _)| i);
    ends.chain([module.len()]).map(|end| &module[..end])
}

pub fn top(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

fn installed(file: &str) -> bool {
    file.contains("/site-packages/") || file.contains("/dist-packages/")
}

fn local(file: &str, roots: &[String]) -> bool {
    roots
        .iter()
        .any(|root| Path::new(file).starts_with(root) && !installed(file))
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
            "json\t/usr/lib/python3.11/json/__init__.py\nposix\tbuilt-in\tloaded\nmissing\t!\njson\t/x\nyam",
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
        assert!(imports.modules[1].loaded && !imports.modules[0].loaded);
        assert!(!imports.modules[2].found);
        assert_eq!(imports.preloaded, ["pandas"]);
    }

    fn module(name: &str, file: &str, distribution: Option<&str>) -> ImportedModule {
        ImportedModule {
            name: name.into(),
            file: Some(file.into()),
            found: true,
            distribution: distribution.map(str::to_string),
            loaded: false,
        }
    }

    #[test]
    fn misses_are_flagged_once_per_distribution_or_local_module_and_never_for_the_stdlib() {
        let site = "/venv/lib/python3.11/site-packages";
        let mut imports = Imports {
            modules: vec![
                module("plugin", "/proj/plugin.py", None),
                module("flow", "/proj/flow.py", None),
                module("stages", "/proj/stages.py", None),
                module("yaml", &format!("{site}/yaml/__init__.py"), None),
                module(
                    "attr",
                    &format!("{site}/attr/__init__.py"),
                    Some("attrs==24.2.0"),
                ),
                module(
                    "attr._make",
                    &format!("{site}/attr/_make.py"),
                    Some("attrs==24.2.0"),
                ),
                module("bs4", &format!("{site}/bs4/__init__.py"), None),
                module("csv", "/usr/lib/python3.11/csv.py", None),
            ],
            preloaded: vec![],
            not_in_closure: vec![],
            closure: None,
        };
        let closure = StaticClosure {
            module: "flow".into(),
            modules: vec![
                ClosureModule {
                    name: "stages".into(),
                    distribution: None,
                },
                ClosureModule {
                    name: "yaml".into(),
                    distribution: Some("PyYAML==6.0.2".into()),
                },
            ],
            distributions: vec!["PyYAML==6.0.2".into()],
            roots: vec!["/proj".into()],
        };
        compare(&mut imports, Arc::new(closure));
        assert_eq!(imports.not_in_closure, ["plugin", "attr", "bs4"]);
        let yaml = imports.modules.iter().find(|m| m.name == "yaml").unwrap();
        assert_eq!(
            yaml.distribution.as_deref(),
            Some("PyYAML==6.0.2"),
            "a serve call's module gets its distribution from the closure"
        );
        assert!(imports.closure.is_some());
    }
}
