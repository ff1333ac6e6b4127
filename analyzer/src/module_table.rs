//! The loaded modules of a stored result, kept so that the next run need not resolve every
//! import again when only a few files changed.
//!
//! Resolving imports depends on the environment, the search roots, the directories listed
//! and, per module, on the names its import edges write (module, member, level, alias). A
//! stored result is only handed back ([`crate::results::Previous`]) when the first three are
//! unchanged; when besides that every changed file still writes the same imports (compared by
//! a fingerprint of them), loading would number the same modules in the same order and
//! resolve every edge to the same targets. The table holds what loading made: each module's
//! name, edge targets, bound names, parent package and installed context, the installed
//! modules met, and the warnings loading gave. Summaries are not in it: they come from the
//! summary cache, read again for changed files. What it does not own: deciding which targets
//! to compute again ([`crate::reuse`]).

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};

use crate::dists::Owner;
use crate::extract::ModuleSummary;
use crate::project::{EdgeTarget, LoadedModule, ThirdPartyModule};
use crate::spec::Warning;

/// What loading made of a stored result's modules, in their numbering.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModuleTable {
    modules: Vec<TableModule>,
    /// Every installed module met while loading (what closures can list), by name.
    installed: Vec<TableInstalled>,
    /// The distinct edge target lists ([`LoadedModule::targets`] shares them between edges).
    target_lists: Vec<Vec<TableTarget>>,
    /// The distinct bound names of edges.
    bound_names: Vec<String>,
    /// The warnings loading gave about a file (unreadable, undecodable, a relative import
    /// beyond the top-level package).
    warnings: Vec<Warning>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct TableModule {
    name: String,
    is_package: bool,
    parent: Option<u32>,
    /// Indices into [`ModuleTable::installed`].
    installed: Vec<u32>,
    /// Per import edge: its target list, and its bound name plus one (0: none).
    edges: Vec<(u32, u32)>,
    /// [`imports_fingerprint`] of the summary it was loaded with.
    imports: [u8; 16],
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct TableInstalled {
    name: String,
    display: String,
    owner: Owner,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum TableTarget {
    Local(u32),
    Stdlib(String),
    /// An index into [`ModuleTable::installed`].
    ThirdParty(u32),
    Missing(String),
}

/// What decides how a module's imports resolve: each edge's module and member as written,
/// its level and whether it is aliased (not its line or scope).
pub fn imports_fingerprint(summary: &ModuleSummary) -> [u8; 16] {
    let mut hasher = blake3::Hasher::new();
    for edge in &summary.imports {
        hasher.update(summary.edge_module(edge).as_bytes());
        match summary.edge_member(edge) {
            Some(member) => hasher.update(b"\0m").update(member.as_bytes()),
            None => hasher.update(b"\0n"),
        };
        hasher.update(&edge.level.to_le_bytes());
        hasher.update(&[edge.aliased as u8, b'\n']);
    }
    let mut fingerprint = [0; 16];
    fingerprint.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    fingerprint
}

impl ModuleTable {
    /// The table of `modules` as loaded, with the installed modules `met` (every one loading
    /// made) and the loading `warnings` (those about a file are kept). `None` when a module's
    /// edge names an installed module not among `met` (loading makes none such).
    pub fn of(
        modules: &[LoadedModule],
        met: &[Arc<ThirdPartyModule>],
        warnings: &[Warning],
    ) -> Option<ModuleTable> {
        let mut writer = TableWriter::new(met);
        let modules = modules
            .iter()
            .map(|module| writer.module(module))
            .collect::<Option<Vec<_>>>()?;
        let warnings = warnings
            .iter()
            .filter(|warning| !warning.file.is_empty())
            .cloned()
            .collect();
        Some(ModuleTable {
            modules,
            installed: met.iter().map(|module| table_installed(module)).collect(),
            target_lists: writer.target_lists,
            bound_names: writer.bound_names,
            warnings,
        })
    }

    /// The table as a stored result keeps it (bincode); empty when it cannot be written.
    pub fn to_bytes(&self) -> Vec<u8> {
        bincode::serialize(self).unwrap_or_default()
    }

    /// A table read back; `None` when the bytes are not one (a damaged entry).
    pub fn from_bytes(bytes: &[u8]) -> Option<ModuleTable> {
        bincode::deserialize(bytes).ok()
    }

    pub fn len(&self) -> usize {
        self.modules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.modules.is_empty()
    }

    /// Whether module `id` was loaded with imports of this fingerprint.
    pub fn same_imports(&self, id: usize, fingerprint: &[u8; 16]) -> bool {
        self.modules
            .get(id)
            .is_some_and(|module| module.imports == *fingerprint)
    }

    /// The table back as loaded modules (each with `summary_of` its number) and the installed
    /// modules met; `None` when it does not hold together (a damaged entry).
    pub fn restore(
        self,
        mut module_of: impl FnMut(u32, RestoredModule) -> LoadedModule,
    ) -> Option<Restored> {
        let installed: Vec<Arc<ThirdPartyModule>> = (self.installed.into_iter())
            .map(|module| {
                Arc::new(ThirdPartyModule {
                    name: module.name,
                    display: module.display,
                    owner: module.owner,
                })
            })
            .collect();
        let count = self.modules.len() as u32;
        let local_in_range = |target: &TableTarget| match target {
            TableTarget::Local(id) => *id < count,
            TableTarget::ThirdParty(index) => (*index as usize) < installed.len(),
            _ => true,
        };
        if !self.target_lists.iter().flatten().all(local_in_range) {
            return None;
        }
        let target_lists: Vec<Arc<[EdgeTarget]>> = (self.target_lists.into_iter())
            .map(|list| list.into_iter().map(|t| t.restore(&installed)).collect())
            .collect();
        let bound_names: Vec<Arc<str>> = self.bound_names.into_iter().map(Arc::from).collect();
        let mut loaded = Vec::with_capacity(self.modules.len());
        for (id, module) in self.modules.into_iter().enumerate() {
            let restored = RestoredModule::of(module, &target_lists, &bound_names, &installed)?;
            if restored.parent.is_some_and(|parent| parent >= count) {
                return None;
            }
            loaded.push(module_of(id as u32, restored));
        }
        Some(Restored {
            modules: loaded,
            met: installed,
            warnings: self.warnings,
        })
    }
}

/// A [`ModuleTable`] restored.
pub struct Restored {
    pub modules: Vec<LoadedModule>,
    /// Every installed module loading met.
    pub met: Vec<Arc<ThirdPartyModule>>,
    /// The warnings loading gave about files.
    pub warnings: Vec<Warning>,
}

/// A module of the table, resolved: what [`LoadedModule`] holds besides its file's own facts
/// (path, display, summary, stamp, key).
pub struct RestoredModule {
    pub name: String,
    pub is_package: bool,
    pub parent: Option<u32>,
    pub installed: Vec<Arc<ThirdPartyModule>>,
    pub targets: Vec<Arc<[EdgeTarget]>>,
    pub bound: Vec<Option<Arc<str>>>,
}

impl RestoredModule {
    fn of(
        module: TableModule,
        target_lists: &[Arc<[EdgeTarget]>],
        bound_names: &[Arc<str>],
        installed: &[Arc<ThirdPartyModule>],
    ) -> Option<RestoredModule> {
        let mut targets = Vec::with_capacity(module.edges.len());
        let mut bound = Vec::with_capacity(module.edges.len());
        for (list, name) in module.edges {
            targets.push(target_lists.get(list as usize)?.clone());
            bound.push(match name {
                0 => None,
                name => Some(bound_names.get(name as usize - 1)?.clone()),
            });
        }
        let installed = (module.installed.iter())
            .map(|&index| installed.get(index as usize).cloned())
            .collect::<Option<Vec<_>>>()?;
        Some(RestoredModule {
            name: module.name,
            is_package: module.is_package,
            parent: module.parent,
            installed,
            targets,
            bound,
        })
    }
}

/// Numbers target lists, bound names and installed modules as the table is made.
struct TableWriter {
    installed_index: HashMap<*const ThirdPartyModule, u32>,
    lists: HashMap<*const [EdgeTarget], u32>,
    target_lists: Vec<Vec<TableTarget>>,
    names: HashMap<Arc<str>, u32>,
    bound_names: Vec<String>,
}

impl TableWriter {
    fn new(met: &[Arc<ThirdPartyModule>]) -> TableWriter {
        let installed_index = (met.iter().enumerate())
            .map(|(index, module)| (Arc::as_ptr(module), index as u32))
            .collect();
        TableWriter {
            installed_index,
            lists: HashMap::default(),
            target_lists: Vec::new(),
            names: HashMap::default(),
            bound_names: Vec::new(),
        }
    }

    fn module(&mut self, module: &LoadedModule) -> Option<TableModule> {
        let mut edges = Vec::with_capacity(module.targets.len());
        for (targets, bound) in module.targets.iter().zip(&module.bound) {
            edges.push((self.list(targets)?, self.bound_name(bound.as_ref())));
        }
        Some(TableModule {
            name: module.name.clone(),
            is_package: module.is_package,
            parent: module.parent,
            installed: (module.installed.iter())
                .map(|installed| self.installed(installed))
                .collect::<Option<Vec<_>>>()?,
            edges,
            imports: imports_fingerprint(&module.summary),
        })
    }

    fn list(&mut self, targets: &Arc<[EdgeTarget]>) -> Option<u32> {
        if let Some(&index) = self.lists.get(&Arc::as_ptr(targets)) {
            return Some(index);
        }
        let list = (targets.iter())
            .map(|target| self.target(target))
            .collect::<Option<Vec<_>>>()?;
        let index = self.target_lists.len() as u32;
        self.target_lists.push(list);
        self.lists.insert(Arc::as_ptr(targets), index);
        Some(index)
    }

    fn target(&self, target: &EdgeTarget) -> Option<TableTarget> {
        Some(match target {
            EdgeTarget::Local(id) => TableTarget::Local(*id),
            EdgeTarget::Stdlib(name) => TableTarget::Stdlib(name.clone()),
            EdgeTarget::ThirdParty(module) => TableTarget::ThirdParty(self.installed(module)?),
            EdgeTarget::Missing(name) => TableTarget::Missing(name.clone()),
        })
    }

    fn installed(&self, module: &Arc<ThirdPartyModule>) -> Option<u32> {
        self.installed_index.get(&Arc::as_ptr(module)).copied()
    }

    fn bound_name(&mut self, bound: Option<&Arc<str>>) -> u32 {
        let Some(name) = bound else { return 0 };
        if let Some(&index) = self.names.get(name) {
            return index + 1;
        }
        let index = self.bound_names.len() as u32;
        self.bound_names.push(name.to_string());
        self.names.insert(name.clone(), index);
        index + 1
    }
}

fn table_installed(module: &ThirdPartyModule) -> TableInstalled {
    TableInstalled {
        name: module.name.clone(),
        display: module.display.clone(),
        owner: module.owner.clone(),
    }
}

impl TableTarget {
    fn restore(self, installed: &[Arc<ThirdPartyModule>]) -> EdgeTarget {
        match self {
            TableTarget::Local(id) => EdgeTarget::Local(id),
            TableTarget::Stdlib(name) => EdgeTarget::Stdlib(name),
            TableTarget::ThirdParty(index) => {
                EdgeTarget::ThirdParty(installed[index as usize].clone())
            }
            TableTarget::Missing(name) => EdgeTarget::Missing(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::summarize;

    fn module(name: &str, source: &str, targets: Vec<Arc<[EdgeTarget]>>) -> LoadedModule {
        let summary = Arc::new(summarize(source));
        let bound = summary
            .imports
            .iter()
            .map(|_| Some(Arc::from(name)))
            .collect();
        LoadedModule {
            name: name.to_string(),
            path: format!("/p/{name}.py").into(),
            display: format!("{name}.py"),
            is_package: false,
            summary,
            stamp: None,
            key: None,
            targets,
            bound,
            parent: None,
            installed: Vec::new(),
        }
    }

    #[test]
    fn a_table_comes_back_as_it_was_stored() {
        let numpy = Arc::new(ThirdPartyModule {
            name: "numpy".into(),
            display: "site/numpy/__init__.py".into(),
            owner: Owner::One(3),
        });
        let shared: Arc<[EdgeTarget]> = Arc::new([EdgeTarget::ThirdParty(numpy.clone())]);
        let modules = vec![
            module(
                "a",
                "import numpy\nimport b\n",
                vec![shared.clone(), Arc::new([EdgeTarget::Local(1)])],
            ),
            module(
                "b",
                "import numpy\nimport gone\n",
                vec![shared, Arc::new([EdgeTarget::Missing("gone".into())])],
            ),
        ];
        let warning = Warning {
            file: "b.py".into(),
            line: 2,
            message: "m".into(),
        };
        let no_file = Warning {
            file: String::new(),
            ..warning.clone()
        };
        let table = ModuleTable::of(&modules, &[numpy], &[warning.clone(), no_file]).unwrap();
        assert_eq!(table.target_lists.len(), 3, "a shared list is stored once");
        let table = ModuleTable::from_bytes(&table.to_bytes()).unwrap();
        assert!(table.same_imports(1, &imports_fingerprint(&modules[1].summary)));
        assert!(!table.same_imports(1, &imports_fingerprint(&modules[0].summary)));
        let Restored {
            modules: restored,
            met,
            warnings,
        } = table
            .restore(|_, restored| LoadedModule {
                targets: restored.targets,
                bound: restored.bound,
                ..module(&restored.name, "", Vec::new())
            })
            .unwrap();
        assert_eq!(warnings, [warning]);
        assert_eq!(met.len(), 1);
        for (restored, stored) in restored.iter().zip(&modules) {
            assert_eq!(restored.targets, stored.targets);
            assert_eq!(restored.bound, stored.bound);
        }
        let EdgeTarget::ThirdParty(first) = &restored[0].targets[0][0] else {
            panic!("not installed");
        };
        let EdgeTarget::ThirdParty(second) = &restored[1].targets[0][0] else {
            panic!("not installed");
        };
        assert!(Arc::ptr_eq(first, second) && Arc::ptr_eq(first, &met[0]));
    }

    #[test]
    fn a_damaged_table_is_not_restored() {
        let modules = vec![module(
            "a",
            "import b\n",
            vec![Arc::new([EdgeTarget::Local(0)])],
        )];
        let mut table = ModuleTable::of(&modules, &[], &[]).unwrap();
        table.target_lists[0][0] = TableTarget::Local(7);
        assert!(table.restore(|_, _| unreachable!()).is_none());
        let mut table = ModuleTable::of(&modules, &[], &[]).unwrap();
        table.modules[0].edges[0].0 = 9;
        let restored = table.restore(|_, restored| module(&restored.name, "", Vec::new()));
        assert!(restored.is_none());
    }
}
