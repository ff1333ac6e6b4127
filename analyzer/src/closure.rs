//! Function and module closures over loaded summaries, mapped to distributions.
//!
//! Two closures, as Python runs code ([`ClosureKind`]). A function's *slice* closure is what it
//! needs when shipped by value and called: the imports inside it (any depth), the module
//! globals it reads followed to their bindings, and for every local module those reach what
//! importing it runs (its top level and its parent packages' `__init__`) plus the functions
//! and classes actually read from it (`from m import f`, `m.f`); never the imports inside
//! functions nothing reads. A module's *import* closure is what `import module` runs; a
//! function's import closure adds it to the slice, which is what a by-reference pickle needs.

use std::borrow::Cow;
use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap as HashMap;

mod needs;

use crate::dists::Owner;
use crate::extract::{Binding, ImportEdge, ImportUse, ModuleSummary, NameId, ScopeKind, Use};
use crate::project::{EdgeTarget, Project};
use crate::spec::{
    ClosureKind, Contexts, EngineUseView, EngineView, ModuleKind, ReasonView, TargetKind,
    TargetView, WarningView,
};
use needs::{needs_views, RecentNeeds};

/// Python builtins: a free name among these is not a module global.
const BUILTINS: &[&str] = &[
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "__import__",
    "__name__",
    "__file__",
    "__doc__",
    "__spec__",
    "__loader__",
    "__package__",
    "__builtins__",
    "__debug__",
    "NotImplemented",
    "Ellipsis",
    "None",
    "True",
    "False",
];

/// The reason step saying a local module was taken whole because it was used as a value.
const WHOLE_MODULE_STEP: &str = "(used as a value: every function of it)";

/// The path from the target to where the walk is: functions, globals and local modules
/// followed, as its last link in the walk's [`Links`] and its length. Copying it copies two
/// integers: the walk makes and drops a chain for most items, and a reference-counted list
/// cost an allocation, a free and two counter writes each (~6% of a large local tree's run).
#[derive(Clone, Copy, Default)]
struct Chain {
    /// The last link's index in [`Links`] plus one; zero: the empty chain.
    at: u32,
    /// Steps in all: reasons compare chain lengths on every merge.
    len: u32,
}

impl Chain {
    fn len(&self) -> usize {
        self.len as usize
    }
}

/// The links of a walk's chains, kept until the walk ends (a chain's tail is shared by the
/// chains made from it).
#[derive(Default)]
struct Links<'p> {
    links: Vec<Link<'p>>,
}

struct Link<'p> {
    name: &'p str,
    parent: Chain,
}

impl<'p> Links<'p> {
    fn of(&mut self, name: &'p str) -> Chain {
        self.then(&Chain::default(), name)
    }

    fn then(&mut self, chain: &Chain, name: &'p str) -> Chain {
        self.links.push(Link {
            name,
            parent: *chain,
        });
        Chain {
            at: self.links.len() as u32,
            len: chain.len + 1,
        }
    }

    /// The last step of `chain`, if any.
    fn last(&self, chain: &Chain) -> Option<&'p str> {
        let at = (chain.at as usize).checked_sub(1)?;
        Some(self.links[at].name)
    }

    /// Extend unless `name` is already the last step (a def reached through its own name).
    fn then_new(&mut self, chain: &Chain, name: &'p str) -> Chain {
        match self.last(chain) {
            Some(last) if same_step(last, name) => *chain,
            _ => self.then(chain, name),
        }
    }

    /// The length of [`Links::then_new`] of `name`, without making it.
    fn len_then_new(&self, chain: &Chain, name: &str) -> usize {
        match self.last(chain) {
            Some(last) if same_step(last, name) => chain.len(),
            _ => chain.len() + 1,
        }
    }

    fn steps(&self, chain: &Chain) -> Vec<&'p str> {
        let mut out = vec![""; chain.len()];
        let mut cursor = *chain;
        for step in out.iter_mut().rev() {
            let link = &self.links[cursor.at as usize - 1];
            *step = link.name;
            cursor = link.parent;
        }
        out
    }

    /// The reason `spot` gives with `chain`.
    fn why(&self, spot: Spot<'p>, chain: &Chain) -> Why<'p> {
        Why {
            file: spot.file,
            line: spot.line,
            chain: self.steps(chain),
        }
    }

    /// The links emptied, their room kept for another walk (whose names borrow from another
    /// run's summaries, hence the new lifetime: an emptied vector of the same layout is
    /// collected in place, without allocating).
    fn emptied<'q>(mut self) -> Links<'q> {
        self.links.clear();
        Links {
            links: self.links.into_iter().map(|_| unreachable!()).collect(),
        }
    }
}

/// Whether two steps are the same text: usually the same name of the same summary, compared
/// without reading it.
#[inline]
fn same_step(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// Where a reason points: the file and line of the statement, the chain made when needed.
#[derive(Clone, Copy)]
struct Spot<'p> {
    file: &'p str,
    line: u32,
}

enum Work {
    /// A def/class body and everything nested in it.
    Scope {
        module: u32,
        scope: u32,
        chain: Chain,
        optional: bool,
    },
    /// What running the def/class statement needs (decorators, defaults, bases, class body).
    Definition {
        module: u32,
        scope: u32,
        chain: Chain,
        optional: bool,
    },
    /// A module-level name, followed to its bindings.
    Name {
        module: u32,
        name: NameId,
        chain: Chain,
        optional: bool,
    },
    /// What importing a local module runs: its parent package, its top level, the class
    /// bodies and decorators there, and what those read.
    Module {
        module: u32,
        chain: Chain,
        optional: bool,
    },
    /// A local module used as a value (passed, `getattr`-ed): its import and every function
    /// and class of it, as nothing says which are used.
    Whole {
        module: u32,
        chain: Chain,
        optional: bool,
    },
}

/// A reason while walking, borrowed from the summaries (most walks reach the same modules
/// many times over).
type Why<'p> = ReasonView<'p>;

struct Missed<'p> {
    optional: bool,
    /// Reached by an edge that is not only the engine's ([`crate::engine`]).
    own: bool,
    reason: Why<'p>,
}

struct Reached<'p> {
    kind: ModuleKind,
    file: Option<&'p str>,
    owner: Option<&'p Owner>,
    required: bool,
    /// Reached by an edge that is not only the engine's ([`crate::engine`]).
    own: bool,
    /// Union of the contexts of the edges that reached it.
    contexts: Contexts,
    reason: Why<'p>,
    /// The reason came from a merged module closure: a shorter chain found later replaces it
    /// (a walk finds shortest chains first; a merge takes a whole module's closure at once).
    merged: bool,
}

/// The whole-module closure of one local module (what importing it brings in), computed once
/// per run and merged into every closure that imports the module, instead of walking its
/// imports again for each of them. Chains are relative to the module.
struct ModuleMemo<'p> {
    reached: Vec<(u32, &'p str, Reached<'p>)>,
    missing: HashMap<&'p str, Missed<'p>>,
    local_modules: Vec<u32>,
    engine_uses: Vec<EngineUseView<'p>>,
}

/// What a local class's body (its methods, everything nested in it) needs, walked once per run
/// and merged into every walk that reaches the class, as a [`ModuleMemo`] is: in a large local
/// tree nearly every target's walk reaches the same classes (pandas/core: 5,200 walks of
/// ~9,400 items each, the same ones). Chains are relative to the class. `covered` is the bit
/// set of work items its walk queued: a walk that merges it does not queue them again.
struct ClassMemo<'p> {
    closure: ModuleMemo<'p>,
    /// (word, bits) of a [`Visited`] set.
    covered: Vec<(u32, u64)>,
}

/// Whole-module closures, filled on first use by whichever thread needs one first.
pub struct ModuleMemos<'p> {
    project: &'p Project,
    numbers: WorkNumbers,
    lookups: EdgeLookups,
    memos: Vec<std::sync::OnceLock<ModuleMemo<'p>>>,
    /// Per scope of local code (from [`ModuleMemos::class_base`]): a local class's
    /// [`ClassMemo`], or `None` where its walk meets engine decorators or wrappers (what a walk
    /// records for those depends on the rest of the walk). Boxed, and only local code's: a
    /// whole site-packages has ~240k scopes.
    class_memos: Vec<std::sync::OnceLock<Option<Box<ClassMemo<'p>>>>>,
    /// Per module, where its scopes start in `class_memos`; [`NOT_NUMBERED`] for installed code.
    class_base: Vec<u32>,
    /// Modules some local module imports: only their closures can be used more than once
    /// (others are only their own module target), so only theirs are kept.
    imported: Vec<bool>,
    recent_needs: RecentNeeds<'p>,
}

impl<'p> ModuleMemos<'p> {
    pub fn new(project: &'p Project) -> ModuleMemos<'p> {
        let imported = crate::reuse::imported_flags(project);
        let numbers = WorkNumbers::new(project);
        let mut local_scopes = 0;
        let class_base = (project.modules.iter())
            .map(|loaded| match loaded.installed.is_empty() {
                true => {
                    local_scopes += loaded.summary.scopes.len() as u32;
                    local_scopes - loaded.summary.scopes.len() as u32
                }
                false => NOT_NUMBERED,
            })
            .collect();
        let class_memos = (0..local_scopes)
            .map(|_| std::sync::OnceLock::new())
            .collect();
        ModuleMemos {
            project,
            numbers,
            class_memos,
            class_base,
            lookups: EdgeLookups::new(project),
            memos: (0..project.modules.len())
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            imported,
            recent_needs: RecentNeeds::new(),
        }
    }

    /// The whole-module closure of `module`, when it is worth keeping.
    fn get(&self, module: u32) -> Option<&ModuleMemo<'p>> {
        if !self.imported[module as usize] {
            return None;
        }
        Some(self.memos[module as usize].get_or_init(|| {
            // A plain walk (no memos inside: import cycles would make them wait on themselves).
            let mut walk = Walk::new(self.project, &self.numbers, &self.lookups, None);
            walk.enqueue(Work::Module {
                module,
                chain: Chain::default(),
                optional: false,
            });
            walk.run();
            ModuleMemo {
                reached: walk.reached.take(),
                missing: std::mem::take(&mut walk.missing),
                local_modules: walk.local_modules.list.clone(),
                engine_uses: std::mem::take(&mut walk.engine_uses),
            }
        }))
    }

    /// The [`ClassMemo`] of class `scope` of local `module`, walked on first use.
    fn class_memo(&self, module: u32, scope: u32) -> Option<&ClassMemo<'p>> {
        let base = self.class_base[module as usize];
        if base == NOT_NUMBERED {
            return None;
        }
        let memo = self.class_memos[base as usize + scope as usize].get_or_init(|| {
            // Module memos are merged inside, other classes' are not: two classes that read
            // each other would wait on each other.
            let mut walk = Walk::new(self.project, &self.numbers, &self.lookups, Some(self));
            walk.enqueue(Work::Scope {
                module,
                scope,
                chain: Chain::default(),
                optional: false,
            });
            walk.run();
            if !walk.engine_uses.is_empty() || !walk.engine_names.is_empty() {
                return None;
            }
            let seen = &walk.seen;
            let covered = (seen.touched.iter())
                .map(|&word| (word, seen.words[word as usize]))
                .collect();
            let closure = ModuleMemo {
                reached: walk.reached.take(),
                missing: std::mem::take(&mut walk.missing),
                local_modules: walk.local_modules.list.clone(),
                engine_uses: Vec::new(),
            };
            Some(Box::new(ClassMemo { closure, covered }))
        });
        memo.as_deref()
    }
}

/// What the bound name of each import edge of a local module is in local code ([`Found`]),
/// worked out on the first read through the edge and kept for the run: finding it searches
/// name tables and follows re-exports from module to module, and the walks of a large local
/// tree read through the same edges millions of times.
struct EdgeLookups {
    modules: Vec<std::sync::OnceLock<Box<[Resolved]>>>,
    /// Per local module, its attribute reads through imports ([`ModuleReads`]).
    reads: Vec<std::sync::OnceLock<ModuleReads>>,
    /// Per module, where its attribute numbers start project-wide (each module gets one more
    /// than half its use slots, at least its count of reads): [`NOT_NUMBERED`] for installed
    /// modules, whose reads go through [`EdgeLookups::way`].
    read_base: Vec<u32>,
    /// Attribute numbers in all, for the walk's [`Scratch::attributes_read`].
    read_numbers: usize,
    /// This run, among the runs of the process: the thread's [`WAYS`] belong to one.
    run: u64,
}

/// Runs of [`EdgeLookups`] so far in the process.
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The [`Way`]s this thread worked out, by (module, edge, path), for the run that filled them.
#[derive(Default)]
struct Ways {
    run: u64,
    ways: HashMap<(u32, u32, NameId), Way>,
}

/// The [`Way`]s this thread worked out for one installed module, by (edge, path).
#[derive(Default)]
struct InstalledWays {
    run: u64,
    module: u32,
    ways: HashMap<(u32, NameId), Way>,
}

thread_local! {
    static WAYS: std::cell::RefCell<Ways> = std::cell::RefCell::new(Ways::default());
    static INSTALLED_WAYS: std::cell::RefCell<InstalledWays> =
        std::cell::RefCell::new(InstalledWays::default());
}

/// An import edge's bound name, as [`Walk::follow_imported`] continues from it.
#[derive(Debug, Clone, Copy)]
enum Resolved {
    Found(Found),
    /// A namespace package (no module of its own): its submodules are found by full name.
    Namespace,
}

impl EdgeLookups {
    fn new(project: &Project) -> EdgeLookups {
        let mut read_base = Vec::with_capacity(project.modules.len());
        let mut read_numbers = 0usize;
        for loaded in &project.modules {
            if loaded.installed.is_empty() {
                read_base.push(read_numbers as u32);
                read_numbers += loaded.summary.use_slots() / 2 + 1;
            } else {
                read_base.push(NOT_NUMBERED);
            }
        }
        EdgeLookups {
            modules: per_module_once(project),
            reads: per_module_once(project),
            read_base,
            read_numbers,
            run: RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
        }
    }

    /// The attribute reads of `module` ([`ModuleReads`]), worked out on first use; `None` for
    /// an installed module.
    fn reads(&self, project: &Project, module: u32) -> Option<&ModuleReads> {
        if self.read_base[module as usize] == NOT_NUMBERED {
            return None;
        }
        Some(self.reads[module as usize].get_or_init(|| ModuleReads::new(project, self, module)))
    }

    /// The project-wide number of attribute `attribute` of `module`, read with `optional`,
    /// for [`Scratch::attributes_read`].
    fn attribute_number(&self, module: u32, attribute: u32, optional: bool) -> usize {
        2 * (self.read_base[module as usize] as usize + attribute as usize) + optional as usize
    }

    /// Where attribute `path` read through edge `edge` of `module` leads ([`Way`]).
    fn way(&self, project: &Project, module: u32, edge: u32, path: NameId) -> Way {
        let resolved = || self.get(project, module, edge);
        // Installed code reads through its imports once per target: kept for the module the
        // thread is on only (its functions come one after the other), not for the run.
        if !project.modules[module as usize].installed.is_empty() {
            return INSTALLED_WAYS.with_borrow_mut(|ways| {
                if (ways.run, ways.module) != (self.run, module) {
                    ways.run = self.run;
                    ways.module = module;
                    ways.ways.clear();
                }
                (ways.ways.entry((edge, path)))
                    .or_insert_with(|| way_of(project, module, edge, path, resolved()))
                    .clone()
            });
        }
        WAYS.with(|ways| {
            let mut ways = ways.borrow_mut();
            if ways.run != self.run {
                // Another run's: its numbers mean other modules.
                *ways = Ways {
                    run: self.run,
                    ways: HashMap::default(),
                };
            }
            ways.ways
                .entry((module, edge, path))
                .or_insert_with(|| way_of(project, module, edge, path, resolved()))
                .clone()
        })
    }

    fn get(&self, project: &Project, module: u32, edge: u32) -> Resolved {
        // Installed modules' edges lead to installed code, not followed: not worth the memory.
        // (Told by `read_base`, a dense array: the module's record missed the cache.)
        if self.read_base[module as usize] == NOT_NUMBERED {
            return resolve_edge(project, module, edge);
        }
        let edges = self.modules[module as usize].get_or_init(|| {
            let loaded = &project.modules[module as usize];
            (0..loaded.summary.imports.len() as u32)
                .map(|edge| resolve_edge(project, module, edge))
                .collect()
        });
        edges
            .get(edge as usize)
            .copied()
            .unwrap_or(Resolved::Found(Found::Nothing))
    }
}

/// The attribute reads through imports of one local module (`np.sum`, where only imports bind
/// `np`), numbered once per run with where each leads ([`Way`]): each read in a walk is then a
/// bit and an array lookup, not a hash probe for the read and another for each way (a large
/// local tree's walks make millions of them, and the hash tables missed the cache).
struct ModuleReads {
    /// Per use slot ([`ModuleSummary::use_slots`]) halved: one plus the number of the
    /// attribute read there, zero where the read is not of an attribute of a name only imports
    /// bind. A use takes two slots, so the halves of two uses' slots differ; halving keeps a
    /// large local tree's tables (a few MiB) half as large.
    attribute_at: Vec<u32>,
    /// Per attribute number, where its ways start in `ways` (plus one at the end).
    ways_start: Vec<u32>,
    /// For each attribute, the import edge of each binding of its name, in binding order, and
    /// where the attribute path leads through it.
    ways: Vec<(u32, Way)>,
    /// Per scope, where its [`NestedStep`]s start in `nested` (plus one at the end).
    nested_starts: Vec<u32>,
    /// What [`Walk::walk_scope`] takes from each scope and everything nested in it, in its
    /// order: a class's methods were a scope record read each, walk after walk.
    nested: Vec<NestedStep>,
    /// Per read through an in-function import, numbered after the attributes (so that one
    /// range of numbers per module holds both): its edge and where its path leads.
    import_uses: Vec<ImportUseWay>,
    /// The number of the first import use: the count of attributes.
    import_uses_from: u32,
}

/// One step of [`ModuleReads::nested`].
#[derive(Clone, Copy)]
enum NestedStep {
    /// An import edge held by the scope or a scope nested in it.
    Edge(u32),
    /// A read through such an import (not under `TYPE_CHECKING`): its number in
    /// [`ModuleReads::import_uses`] (after the attributes), and the name as read.
    Use(u32, NameId),
}

/// A read through an in-function import, by edge and attribute path.
struct ImportUseWay {
    edge: u32,
    /// Where the path leads; `None` for a read of the bound name itself.
    way: Option<Way>,
}

impl ModuleReads {
    fn new(project: &Project, lookups: &EdgeLookups, module: u32) -> ModuleReads {
        let summary = &project.modules[module as usize].summary;
        let mut reads = ModuleReads {
            attribute_at: vec![0; summary.use_slots() / 2 + 1],
            ways_start: vec![0],
            ways: Vec::new(),
            nested_starts: vec![0],
            nested: Vec::new(),
            import_uses: Vec::new(),
            import_uses_from: 0,
        };
        let mut numbers: HashMap<(NameId, NameId), u32> = HashMap::default();
        for scope in 0..summary.scopes.len() as u32 {
            let uses = summary.free_uses_at(scope);
            let uses = uses.chain(summary.definition_uses_at(scope));
            for (slot, read) in uses.chain(summary.engine_decorators_at(scope)) {
                reads.note(project, lookups, module, &mut numbers, slot, read);
            }
        }
        for binding in &summary.bindings {
            for (slot, read) in summary.value_uses_at(binding) {
                reads.note(project, lookups, module, &mut numbers, slot, read);
            }
        }
        reads.import_uses_from = reads.ways_start.len() as u32 - 1;
        reads.note_nested(project, lookups, module);
        reads
    }

    /// [`ModuleReads::nested`] of every scope, its import uses numbered by (edge, path).
    fn note_nested(&mut self, project: &Project, lookups: &EdgeLookups, module: u32) {
        let summary = &project.modules[module as usize].summary;
        let mut numbers: HashMap<(u32, Option<NameId>), u32> = HashMap::default();
        let mut stack = Vec::new();
        for scope in 0..summary.scopes.len() as u32 {
            stack.push(scope);
            while let Some(inner) = stack.pop() {
                let edges = summary.scope_imports(inner).iter();
                self.nested
                    .extend(edges.map(|&edge| NestedStep::Edge(edge)));
                for used in summary.import_uses(inner) {
                    if summary.imports[used.edge as usize].context.type_checking {
                        continue;
                    }
                    let next = self.import_uses_from + numbers.len() as u32;
                    let number = *numbers.entry((used.edge, used.path)).or_insert_with(|| {
                        let way = used.path.map(|path| {
                            let resolved = lookups.get(project, module, used.edge);
                            way_of(project, module, used.edge, path, resolved)
                        });
                        self.import_uses.push(ImportUseWay {
                            edge: used.edge,
                            way,
                        });
                        next
                    });
                    self.nested.push(NestedStep::Use(number, used.name));
                }
                stack.extend_from_slice(summary.children(inner));
            }
            self.nested_starts.push(self.nested.len() as u32);
        }
    }

    /// What [`Walk::walk_scope`] takes from `scope` and the scopes nested in it.
    fn nested_of(&self, scope: u32) -> &[NestedStep] {
        match (
            self.nested_starts.get(scope as usize),
            self.nested_starts.get(scope as usize + 1),
        ) {
            (Some(&start), Some(&end)) => &self.nested[start as usize..end as usize],
            _ => &[],
        }
    }

    fn import_use(&self, number: u32) -> &ImportUseWay {
        &self.import_uses[(number - self.import_uses_from) as usize]
    }

    /// Number the read in `slot` if it is of an attribute of a name only imports bind (as
    /// [`Walk::enqueue_use`] decides), working out its ways the first time.
    fn note(
        &mut self,
        project: &Project,
        lookups: &EdgeLookups,
        module: u32,
        numbers: &mut HashMap<(NameId, NameId), u32>,
        slot: u32,
        read: Use,
    ) {
        let summary = &project.modules[module as usize].summary;
        let (Some(path), Some(bindings)) = (read.path, summary.bindings_of(read.name)) else {
            return;
        };
        let edges: Vec<u32> = bindings
            .iter()
            .map_while(|binding| match *binding {
                Binding::Import { edge } => Some(edge),
                _ => None,
            })
            .collect();
        if edges.len() != bindings.len() {
            return;
        }
        let next = numbers.len() as u32;
        let number = *numbers.entry((read.name, path)).or_insert_with(|| {
            for edge in edges {
                let resolved = lookups.get(project, module, edge);
                self.ways
                    .push((edge, way_of(project, module, edge, path, resolved)));
            }
            self.ways_start.push(self.ways.len() as u32);
            next
        });
        if let Some(at) = self.attribute_at.get_mut(slot as usize / 2) {
            *at = number + 1;
        }
    }

    /// The number of the attribute read in use slot `slot`, if it is one.
    fn attribute_at(&self, slot: u32) -> Option<u32> {
        match self.attribute_at.get(slot as usize / 2) {
            Some(&at) if at > 0 => Some(at - 1),
            _ => None,
        }
    }

    fn ways_of(&self, attribute: u32) -> &[(u32, Way)] {
        let start = self.ways_start[attribute as usize] as usize;
        let end = self.ways_start[attribute as usize + 1] as usize;
        &self.ways[start..end]
    }
}

/// One empty [`std::sync::OnceLock`] per module of `project`.
fn per_module_once<T>(project: &Project) -> Vec<std::sync::OnceLock<T>> {
    (0..project.modules.len())
        .map(|_| std::sync::OnceLock::new())
        .collect()
}

/// What the name bound by import edge `edge` of `module` is in local code.
fn resolve_edge(project: &Project, module: u32, edge: u32) -> Resolved {
    let loaded = &project.modules[module as usize];
    let summary = &loaded.summary;
    let Some(edge_ref) = summary.imports.get(edge as usize) else {
        return Resolved::Found(Found::Nothing);
    };
    let found = match loaded.bound.get(edge as usize) {
        Some(Some(bound)) => match project.module_named(bound) {
            Some(id) => Found::Module(id),
            None => return Resolved::Namespace,
        },
        _ => match (summary.edge_member(edge_ref), last_local(loaded, edge)) {
            (Some(member), Some(holder)) if member != "*" => {
                find_member(project, holder, member, &mut Vec::new())
            }
            _ => Found::Nothing,
        },
    };
    Resolved::Found(found)
}

/// Where an attribute path read through an import edge leads in local code: the local modules
/// it passes through, in order, then a name there ([`Found::Name`]), a module read as a value
/// ([`Found::Module`], the last one passed) or nothing. Only the summaries decide it, so it is
/// worked out once per thread and run ([`EdgeLookups::way`]), not at each of the millions of
/// reads of a large local tree (each searched name tables and built module names).
#[derive(Clone)]
struct Way {
    through: Through,
    end: Found,
}

/// The modules a [`Way`] passes through: up to four inline (a read then touches the way's
/// table entry only, not a vector too), more in a vector (a rare deep path).
#[derive(Clone, Default)]
struct Through {
    short: [u32; 4],
    len: u8,
    long: Vec<u32>,
}

impl Through {
    fn push(&mut self, id: u32) {
        if self.long.is_empty() && (self.len as usize) < self.short.len() {
            self.short[self.len as usize] = id;
            self.len += 1;
            return;
        }
        if self.long.is_empty() {
            self.long.extend_from_slice(&self.short);
        }
        self.long.push(id);
    }

    fn as_slice(&self) -> &[u32] {
        match self.long.is_empty() {
            true => &self.short[..self.len as usize],
            false => &self.long,
        }
    }
}

/// [`Way`] of attribute `path` (a name of `module`) read through its import edge `edge`.
fn way_of(project: &Project, module: u32, edge: u32, path: NameId, resolved: Resolved) -> Way {
    let loaded = &project.modules[module as usize];
    let path = loaded.summary.name(path);
    let mut way = Way {
        through: Through::default(),
        end: Found::Nothing,
    };
    let (mut found, rest) = match resolved {
        Resolved::Found(found) => (found, Some(path)),
        Resolved::Namespace => match loaded.bound.get(edge as usize) {
            Some(Some(bound)) => namespace_start(project, bound, path),
            _ => return way,
        },
    };
    let mut steps = rest.into_iter().flat_map(|path| path.split('.'));
    loop {
        match found {
            Found::Nothing => return way,
            Found::Name(..) => break,
            Found::Module(id) => {
                way.through.push(id);
                match steps.next() {
                    Some(step) => found = find_member(project, id, step, &mut Vec::new()),
                    None => break,
                }
            }
        }
    }
    way.end = found;
    way
}

/// `bound` is no loaded module (a namespace package): the first loaded module along
/// `bound.path` is where the path continues, with the rest of the path.
fn namespace_start<'a>(project: &Project, bound: &str, path: &'a str) -> (Found, Option<&'a str>) {
    DOTTED_NAME.with_borrow_mut(|name| {
        name.clear();
        name.push_str(bound);
        for (index, step) in path.split('.').enumerate() {
            name.push('.');
            name.push_str(step);
            if let Some(id) = project.module_named(name) {
                let rest = path.splitn(index + 2, '.').nth(index + 1);
                return (Found::Module(id), rest);
            }
        }
        (Found::Nothing, None)
    })
}

thread_local! {
    /// [`namespace_start`]'s dotted names, in one buffer: every read of installed code
    /// through a stdlib import (`os.path.join`) comes here, a million times on a whole
    /// site-packages, and a new string each cost an allocation and its growth.
    static DOTTED_NAME: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Where each work item's "already queued" bit is in a [`Visited`] set: module imports, whole
/// modules, then scope bodies, definitions and module-level names, each numbered
/// project-wide, times two (the optional flag is part of the item).
struct WorkNumbers {
    modules: u32,
    scopes: u32,
    scope_base: Vec<u32>,
    name_base: Vec<u32>,
    total: usize,
    /// The import edges of local code numbered project-wide, for [`EdgesApplied`] (installed
    /// modules' edges are applied once or twice per walk, and numbering them cost a large
    /// tree of installed code megabytes per walk's scratch): [`NOT_NUMBERED`] for installed
    /// modules.
    edge_base: Vec<u32>,
    /// Per numbered edge, [`EDGE_NEVER`] and [`EDGE_OPTIONAL`]: whether applying it may change
    /// anything is then decided without reading its summary record and its targets (two
    /// misses per read of an import in a large local tree).
    edge_flags: Vec<u8>,
    edges: usize,
    names: NameNumbers,
}

/// [`WorkNumbers::edge_flags`]: the edge is applied never (under `TYPE_CHECKING`, or without
/// targets), or always as optional (inside `try`/`except ImportError`).
const EDGE_NEVER: u8 = 1;
const EDGE_OPTIONAL: u8 = 2;
/// [`WorkNumbers::edge_flags`]: the edge binds a member (`from m import x`).
const EDGE_MEMBER: u8 = 4;

/// Every module name a walk can reach, numbered once per run, so that what a walk reached is
/// found by index ([`ReachedSet`]), not by hashing names: a large local tree's walks record
/// modules millions of times.
struct NameNumbers {
    /// Per module, where its import edges start in `target_base`; per import edge (plus one
    /// at the end), where its targets' numbers start in `of_targets`, in the order of its
    /// targets.
    edge_base: Vec<u32>,
    target_base: Vec<u32>,
    of_targets: Vec<u32>,
    /// Per module: its own name's number, and where its installed modules' numbers start in
    /// `of_installed` (plus one at the end).
    of_modules: Vec<u32>,
    installed_base: Vec<u32>,
    of_installed: Vec<u32>,
    count: usize,
}

impl NameNumbers {
    fn new(project: &Project) -> NameNumbers {
        let mut numbers: HashMap<&str, u32> = HashMap::default();
        let mut number = |name| {
            let next = numbers.len() as u32;
            *numbers.entry(name).or_insert(next)
        };
        let of_modules = project.modules.iter().map(|m| number(&m.name)).collect();
        let (mut target_base, mut of_targets) = (vec![0], Vec::new());
        let (mut installed_base, mut of_installed) = (vec![0], Vec::new());
        let mut edge_base = Vec::with_capacity(project.modules.len());
        for loaded in &project.modules {
            edge_base.push(target_base.len() as u32 - 1);
            for index in 0..loaded.summary.imports.len() {
                for target in loaded.targets.get(index).into_iter().flat_map(|t| t.iter()) {
                    of_targets.push(number(match target {
                        EdgeTarget::Local(id) => &project.modules[*id as usize].name,
                        EdgeTarget::Stdlib(name) | EdgeTarget::Missing(name) => name,
                        EdgeTarget::ThirdParty(module) => &module.name,
                    }));
                }
                target_base.push(of_targets.len() as u32);
            }
            of_installed.extend(loaded.installed.iter().map(|needed| number(&needed.name)));
            installed_base.push(of_installed.len() as u32);
        }
        NameNumbers {
            count: numbers.len(),
            edge_base,
            target_base,
            of_targets,
            of_modules,
            installed_base,
            of_installed,
        }
    }

    /// The numbers of the targets of import edge `index` of `module`.
    fn targets(&self, module: u32, index: usize) -> &[u32] {
        let edge = self.edge_base[module as usize] as usize + index;
        let (start, end) = (self.target_base[edge], self.target_base[edge + 1]);
        &self.of_targets[start as usize..end as usize]
    }

    fn installed(&self, module: u32) -> &[u32] {
        let (start, end) = (
            self.installed_base[module as usize],
            self.installed_base[module as usize + 1],
        );
        &self.of_installed[start as usize..end as usize]
    }
}

/// What a walk reached, by [`NameNumbers`] number: `slots` (as large as the project's names,
/// reused walk after walk) holds one plus each name's index in `entries`.
struct ReachedSet<'p> {
    slots: Vec<u32>,
    entries: Vec<(u32, &'p str, Reached<'p>)>,
    /// The room `entries` had when last taken ([`Scratch::reached_room`]).
    room: usize,
}

impl<'p> ReachedSet<'p> {
    fn entry(
        &mut self,
        number: u32,
        name: &'p str,
        make: impl FnOnce() -> Reached<'p>,
    ) -> &mut Reached<'p> {
        let slot = &mut self.slots[number as usize];
        if *slot == 0 {
            self.entries.push((number, name, make()));
            *slot = self.entries.len() as u32;
        }
        &mut self.entries[*slot as usize - 1].2
    }

    /// The entries, the slots cleared for the next walk.
    fn take(&mut self) -> Vec<(u32, &'p str, Reached<'p>)> {
        for (number, _, _) in &self.entries {
            self.slots[*number as usize] = 0;
        }
        self.room = self.room.max(self.entries.capacity());
        std::mem::take(&mut self.entries)
    }
}

/// [`WorkNumbers::edge_base`] of a module whose edges are not numbered.
const NOT_NUMBERED: u32 = u32::MAX;

impl WorkNumbers {
    fn new(project: &Project) -> WorkNumbers {
        let mut scope_base = Vec::with_capacity(project.modules.len());
        let mut name_base = Vec::with_capacity(project.modules.len());
        let mut edge_base = Vec::with_capacity(project.modules.len());
        let (mut scopes, mut names, mut edges) = (0u32, 0u32, 0u32);
        let mut edge_flags = Vec::new();
        for loaded in &project.modules {
            scope_base.push(scopes);
            name_base.push(names);
            scopes += loaded.summary.scopes.len() as u32;
            names += loaded.summary.names.len() as u32;
            if loaded.installed.is_empty() {
                edge_base.push(edges);
                edges += loaded.summary.imports.len() as u32;
                edge_flags.extend((0..loaded.summary.imports.len()).map(|index| {
                    let context = loaded.summary.imports[index].context;
                    let never = context.type_checking || loaded.targets.get(index).is_none();
                    let member = loaded.summary.imports[index].has_member();
                    (never as u8 * EDGE_NEVER)
                        | (context.optional as u8 * EDGE_OPTIONAL)
                        | (member as u8 * EDGE_MEMBER)
                }));
            } else {
                edge_base.push(NOT_NUMBERED);
            }
        }
        let modules = project.modules.len() as u32;
        WorkNumbers {
            modules,
            scopes,
            scope_base,
            name_base,
            total: 2 * (2 * modules as usize + 2 * scopes as usize + names as usize),
            edge_base,
            edge_flags,
            edges: edges as usize,
            names: NameNumbers::new(project),
        }
    }

    /// Import edge `index` of a local `module`, numbered project-wide ([`WorkNumbers::edge_flags`]);
    /// `None` for an installed module's edge (not numbered).
    fn local_edge(&self, module: u32, index: usize) -> Option<usize> {
        let base = self.edge_base[module as usize];
        (base != NOT_NUMBERED).then_some(base as usize + index)
    }

    /// What [`Walk::add_edge_of`] checks first for local edge `at`: its number in
    /// [`EdgesApplied`] when applied with `inherited_optional` and, when `engine`, as the
    /// engine's only (the four ways an edge's effects differ), with the optional flag it is
    /// applied with; `None` when it is never applied.
    fn local_edge_number(
        &self,
        at: usize,
        inherited_optional: bool,
        engine: bool,
    ) -> Option<(usize, bool)> {
        let flags = self.edge_flags[at];
        if flags & EDGE_NEVER != 0 {
            return None;
        }
        let optional = inherited_optional || flags & EDGE_OPTIONAL != 0;
        Some((4 * at + 2 * engine as usize + optional as usize, optional))
    }

    fn of(&self, work: &Work) -> usize {
        match *work {
            Work::Module {
                module, optional, ..
            } => self.of_module(module, optional),
            Work::Whole {
                module, optional, ..
            } => self.of_whole(module, optional),
            Work::Scope {
                module,
                scope,
                optional,
                ..
            } => self.of_scope(module, scope, optional),
            Work::Definition {
                module,
                scope,
                optional,
                ..
            } => self.of_definition(module, scope, optional),
            Work::Name {
                module,
                name,
                optional,
                ..
            } => self.of_name(module, name, optional),
        }
    }

    fn of_scope(&self, module: u32, scope: u32, optional: bool) -> usize {
        2 * self.scope(module, scope) + optional as usize
    }

    fn of_definition(&self, module: u32, scope: u32, optional: bool) -> usize {
        2 * (self.scopes as usize + self.scope(module, scope)) + optional as usize
    }

    /// Scope `scope` of `module`, numbered after the module imports and whole modules.
    fn scope(&self, module: u32, scope: u32) -> usize {
        2 * self.modules as usize + self.scope_base[module as usize] as usize + scope as usize
    }

    fn of_whole(&self, module: u32, optional: bool) -> usize {
        2 * (self.modules as usize + module as usize) + optional as usize
    }

    fn of_module(&self, module: u32, optional: bool) -> usize {
        2 * module as usize + optional as usize
    }

    fn of_name(&self, module: u32, name: NameId, optional: bool) -> usize {
        let number = 2 * self.modules as usize
            + 2 * self.scopes as usize
            + self.name_base[module as usize] as usize
            + name as usize;
        2 * number + optional as usize
    }
}

/// A set of work items (by [`WorkNumbers`]) as bits, cleared word by word after a walk: a
/// walk inserts tens of items, and hashing them was most of a walk's time.
#[derive(Default)]
struct Visited {
    words: Vec<u64>,
    touched: Vec<u32>,
}

impl Visited {
    fn contains(&self, number: usize) -> bool {
        self.words[number / 64] & (1u64 << (number % 64)) != 0
    }

    fn insert(&mut self, number: usize) -> bool {
        let (word, bit) = (number / 64, 1u64 << (number % 64));
        let slot = &mut self.words[word];
        if *slot & bit != 0 {
            return false;
        }
        if *slot == 0 {
            self.touched.push(word as u32);
        }
        *slot |= bit;
        true
    }

    fn clear(&mut self) {
        for word in self.touched.drain(..) {
            self.words[word as usize] = 0;
        }
    }

    /// Every bit of `words`, (word, bits) pairs of another set.
    fn insert_words(&mut self, words: &[(u32, u64)]) {
        for &(word, bits) in words {
            let slot = &mut self.words[word as usize];
            if *slot == 0 {
                self.touched.push(word);
            }
            *slot |= bits;
        }
    }
}

/// The shortest chain each import edge was applied with in a walk (by
/// [`WorkNumbers::local_edge_number`]), stored plus one (zero: not applied). Applying an edge again with
/// a chain at least as long changes nothing: its flags are set already, and a reason it did not
/// replace then is no longer than that chain (merges only shorten reasons). Attribute reads
/// through one import (`np.a`, `np.b`, ...) apply its edge once per attribute: most
/// applications in a large local tree are such repeats.
#[derive(Default)]
struct EdgesApplied {
    shortest: Vec<u32>,
    touched: Vec<u32>,
}

impl EdgesApplied {
    /// Note an application with a chain of `len` steps; false when it changes nothing.
    fn apply(&mut self, number: usize, len: usize) -> bool {
        if !self.would_apply(number, len) {
            return false;
        }
        let slot = &mut self.shortest[number];
        if *slot == 0 {
            self.touched.push(number as u32);
        }
        *slot = len as u32 + 1;
        true
    }

    /// Whether [`EdgesApplied::apply`] would note an application (it changes something).
    fn would_apply(&self, number: usize, len: usize) -> bool {
        len < self.applies_below(number)
    }

    /// [`EdgesApplied::apply`] notes an application with a chain shorter than this.
    fn applies_below(&self, number: usize) -> usize {
        match self.shortest[number] as usize {
            0 => usize::MAX,
            slot => slot - 1,
        }
    }

    fn clear(&mut self) {
        for number in self.touched.drain(..) {
            self.shortest[number as usize] = 0;
        }
    }
}

/// A walk's sets, kept cleared between walks: the bit sets and slots are as large as the
/// project, and the hash sets grow to thousands of entries in a large local tree (growing
/// them again walk after walk showed in profiles).
#[derive(Default)]
struct Scratch {
    seen: Visited,
    applied: EdgesApplied,
    attributes_seen: AttributesSeen,
    /// Attribute reads of local code already followed, by [`EdgeLookups::attribute_number`].
    attributes_read: Visited,
    import_uses_seen: ImportUsesSeen,
    reached_slots: Vec<u32>,
    local_bits: Visited,
    /// The queue and the chains' links, emptied: a walk keeps the room the walks before it
    /// grew them to (growing them copied every item, walk after walk).
    queue: VecDeque<Work>,
    links: Links<'static>,
    /// The most modules reached of the walks so far: the next walk starts with room for as
    /// many.
    reached_room: usize,
}

/// The local modules a walk reached, as a set (by module id, reused walk after walk) and in the
/// order first reached.
struct LocalModules {
    bits: Visited,
    list: Vec<u32>,
}

impl LocalModules {
    fn insert(&mut self, id: u32) {
        if self.bits.insert(id as usize) {
            self.list.push(id);
        }
    }

    /// The set emptied for the next walk.
    fn take_bits(&mut self) -> Visited {
        let mut bits = std::mem::take(&mut self.bits);
        bits.clear();
        bits
    }
}

/// Attribute reads through imports already followed: (module, name, path, optional).
type AttributesSeen = rustc_hash::FxHashSet<(u32, NameId, NameId, bool)>;
/// Reads through in-function imports already followed: (module, edge, path, optional).
type ImportUsesSeen = rustc_hash::FxHashSet<(u32, u32, Option<NameId>, bool)>;

thread_local! {
    /// Cleared sets, reused walk after walk (a walk may start another: module memos).
    static SCRATCH_POOL: std::cell::RefCell<Vec<Scratch>> = const { std::cell::RefCell::new(Vec::new()) };
}

struct Walk<'p, 'm> {
    project: &'p Project,
    numbers: &'m WorkNumbers,
    lookups: &'m EdgeLookups,
    memos: Option<&'m ModuleMemos<'p>>,
    queue: VecDeque<Work>,
    links: Links<'p>,
    seen: Visited,
    applied: EdgesApplied,
    reached: ReachedSet<'p>,
    missing: HashMap<&'p str, Missed<'p>>,
    local_modules: LocalModules,
    /// The engine decorators and wrappers met ([`crate::engine`]).
    engine_uses: Vec<EngineUseView<'p>>,
    /// Per module whose import was walked: the names it reads only as engine APIs. What runs
    /// at its import (top-level statements, class bodies, comprehensions) reads them as the
    /// engine's, not as its own.
    engine_names: HashMap<u32, Vec<NameId>>,
    /// While computing a slice: the target's module, and the lines of its module-level
    /// bindings the walk followed there.
    slice_module: Option<u32>,
    slice_lines: Vec<u32>,
    attributes_seen: AttributesSeen,
    attributes_read: Visited,
    import_uses_seen: ImportUsesSeen,
    /// The scopes nested in the one being walked, kept from scope to scope (a walk of a large
    /// local tree walks thousands).
    scope_stack: Vec<u32>,
    /// Whether local classes' bodies are merged from their [`ClassMemo`]s: in a target's
    /// walk, not in the walks that make them.
    merges_classes: bool,
}

/// The closure of module `module` (its import closure), or the `kind` closure of the
/// def/class `scope` inside it.
pub fn target_closure<'p>(
    project: &'p Project,
    memos: &ModuleMemos<'p>,
    module: u32,
    scope: Option<u32>,
    kind: ClosureKind,
) -> TargetView<'p> {
    let loaded = &project.modules[module as usize];
    let mut walk = Walk::new(project, &memos.numbers, &memos.lookups, Some(memos));
    walk.merges_classes = true;
    let (target, kind_of_target, line) = match scope {
        None => {
            let chain = walk.links.of(&loaded.name);
            walk.enqueue(Work::Module {
                module,
                chain,
                optional: false,
            });
            (Cow::Borrowed(loaded.name.as_str()), TargetKind::Module, 1)
        }
        Some(scope_id) => {
            let summary = &loaded.summary;
            let scope = &summary.scopes[scope_id as usize];
            walk.enqueue_definition(module, scope_id);
            // A function of installed code is that distribution's, even shipped by value.
            let chain = walk.links.of(summary.scope_name(scope_id));
            walk.reach_installed(module, true, &chain, false);
            if kind == ClosureKind::Import {
                let chain = walk.links.of(&loaded.name);
                walk.enqueue(Work::Module {
                    module,
                    chain,
                    optional: false,
                });
            }
            let kind = if scope.kind == ScopeKind::Class {
                TargetKind::Class
            } else {
                TargetKind::Function
            };
            let target = Cow::Owned(format!("{}:{}", loaded.name, summary.scope_name(scope_id)));
            (target, kind, scope.line)
        }
    };
    walk.run();
    let closure = match scope {
        None => ClosureKind::Import,
        Some(_) => kind,
    };
    walk.into_view(target, kind_of_target, closure, module, line)
}

/// The lines of the module-level statements of `module` that the def/class `scope` needs to
/// run: its own definition (and its enclosing classes'), and every binding of a module global
/// the walk follows there, transitively (an import, a def/class, an assignment and what its
/// value reads). The same walk as [`target_closure`]: one source of truth for what a function
/// needs and for what `lfm call` executes of its module.
pub fn slice_lines(project: &Project, module: u32, scope: u32) -> Vec<u32> {
    let numbers = WorkNumbers::new(project);
    let lookups = EdgeLookups::new(project);
    let mut walk = Walk::new(project, &numbers, &lookups, None);
    walk.slice_module = Some(module);
    walk.enqueue_definition(module, scope);
    let summary = &project.modules[module as usize].summary;
    let mut lines = vec![summary.scopes[scope as usize].line];
    let mut parent = summary.scopes[scope as usize].parent;
    while parent != 0 {
        lines.push(summary.scopes[parent as usize].line);
        parent = summary.scopes[parent as usize].parent;
    }
    walk.run();
    lines.append(&mut walk.slice_lines);
    lines.sort_unstable();
    lines.dedup();
    lines
}

impl<'p, 'm> Walk<'p, 'm> {
    fn new(
        project: &'p Project,
        numbers: &'m WorkNumbers,
        lookups: &'m EdgeLookups,
        memos: Option<&'m ModuleMemos<'p>>,
    ) -> Walk<'p, 'm> {
        let Scratch {
            mut seen,
            mut applied,
            attributes_seen,
            mut attributes_read,
            import_uses_seen,
            mut reached_slots,
            mut local_bits,
            queue,
            links,
            reached_room,
        } = SCRATCH_POOL
            .with(|pool| pool.borrow_mut().pop())
            .unwrap_or_default();
        if seen.words.len() < numbers.total.div_ceil(64) {
            seen.words.resize(numbers.total.div_ceil(64), 0);
        }
        if applied.shortest.len() < 4 * numbers.edges {
            applied.shortest.resize(4 * numbers.edges, 0);
        }
        if local_bits.words.len() < (numbers.modules as usize).div_ceil(64) {
            local_bits
                .words
                .resize((numbers.modules as usize).div_ceil(64), 0);
        }
        if attributes_read.words.len() < (2 * lookups.read_numbers).div_ceil(64) {
            attributes_read
                .words
                .resize((2 * lookups.read_numbers).div_ceil(64), 0);
        }
        if reached_slots.len() < numbers.names.count {
            reached_slots.resize(numbers.names.count, 0);
        }
        Walk {
            project,
            numbers,
            lookups,
            memos,
            queue,
            links: links.emptied(),
            seen,
            applied,
            reached: ReachedSet {
                slots: reached_slots,
                entries: Vec::with_capacity(reached_room),
                room: reached_room,
            },
            missing: HashMap::default(),
            local_modules: LocalModules {
                bits: local_bits,
                list: Vec::new(),
            },
            engine_uses: Vec::new(),
            engine_names: HashMap::default(),
            slice_module: None,
            slice_lines: Vec::new(),
            attributes_seen,
            attributes_read,
            import_uses_seen,
            scope_stack: Vec::new(),
            merges_classes: false,
        }
    }

    /// Take in a local module's whole-module closure, reached through `chain`: what was not
    /// reached yet keeps the module's reasons, prefixed by the chain.
    fn merge_module(&mut self, memo: &ModuleMemo<'p>, chain: &Chain, optional: bool) {
        let prefix = self.links.steps(chain);
        let prefixed = |reason: &Why<'p>| Why {
            file: reason.file,
            line: reason.line,
            chain: prefix.iter().chain(&reason.chain).copied().collect(),
        };
        for &(number, name, ref theirs) in &memo.reached {
            let ours = self.reached.entry(number, name, || Reached {
                kind: theirs.kind,
                file: theirs.file,
                owner: theirs.owner,
                required: false,
                own: false,
                contexts: Contexts::default(),
                reason: prefixed(&theirs.reason),
                merged: true,
            });
            if prefix.len() + theirs.reason.chain.len() < ours.reason.chain.len() {
                ours.reason = prefixed(&theirs.reason);
                ours.merged = true;
            }
            ours.required |= theirs.required && !optional;
            ours.own |= theirs.own;
            ours.contexts |= theirs.contexts;
        }
        for (&name, theirs) in &memo.missing {
            let ours = self.missing.entry(name).or_insert_with(|| Missed {
                optional: true,
                own: false,
                reason: prefixed(&theirs.reason),
            });
            ours.optional &= theirs.optional || optional;
            ours.own |= theirs.own;
        }
        self.engine_uses.extend(memo.engine_uses.iter().cloned());
        for &local in &memo.local_modules {
            self.local_modules.insert(local);
            // Covered now: a later import of it through this walk adds nothing.
            self.seen.insert(self.numbers.of_module(local, optional));
        }
    }

    fn summary(&self, module: u32) -> &'p ModuleSummary {
        let project: &'p Project = self.project;
        &project.modules[module as usize].summary
    }

    /// Queue work not queued before. Marking at enqueue rather than at dequeue gives the same
    /// first-found reasons (the queue is FIFO) without queueing duplicates.
    fn enqueue(&mut self, work: Work) {
        let new = self.seen.insert(self.numbers.of(&work));
        if new {
            self.queue.push_back(work);
        }
    }

    /// [`Walk::enqueue`] for a name, sharing `chain` only when the name is new (most are not).
    fn enqueue_name(&mut self, module: u32, name: NameId, chain: &Chain, optional: bool) {
        if self
            .seen
            .insert(self.numbers.of_name(module, name, optional))
        {
            self.queue.push_back(Work::Name {
                module,
                name,
                chain: *chain,
                optional,
            });
        }
    }

    /// A def/class target: its body and its definition, and for a method what its class
    /// statements need to run (bases, decorators, class body).
    fn enqueue_definition(&mut self, module: u32, scope_id: u32) {
        let summary = self.summary(module);
        let chain = self.links.of(summary.scope_name(scope_id));
        self.enqueue(Work::Scope {
            module,
            scope: scope_id,
            chain,
            optional: false,
        });
        self.enqueue(Work::Definition {
            module,
            scope: scope_id,
            chain,
            optional: false,
        });
        let mut parent = summary.scopes[scope_id as usize].parent;
        while parent != 0 {
            let enclosing = &summary.scopes[parent as usize];
            if enclosing.kind == ScopeKind::Class {
                let chain = self.links.then(&chain, summary.scope_name(parent));
                self.enqueue(Work::Definition {
                    module,
                    scope: parent,
                    chain,
                    optional: false,
                });
            }
            parent = enclosing.parent;
        }
    }

    fn run(&mut self) {
        while let Some(work) = self.queue.pop_front() {
            match work {
                Work::Module {
                    module,
                    chain,
                    optional,
                } => {
                    if let Some(memo) = self.memos.and_then(|memos| memos.get(module)) {
                        self.merge_module(memo, &chain, optional);
                        continue;
                    }
                    self.import_module(module, &chain, optional);
                }
                Work::Whole {
                    module,
                    chain,
                    optional,
                } => self.whole_module(module, &chain, optional),
                Work::Scope {
                    module,
                    scope,
                    chain,
                    optional,
                } => {
                    if !self.merged_class(module, scope, &chain, optional) {
                        self.walk_scope(module, scope, &chain, optional);
                    }
                }
                Work::Definition {
                    module,
                    scope,
                    chain,
                    optional,
                } => {
                    let summary = self.summary(module);
                    // A class body runs its own imports when the class statement runs.
                    if summary.scopes[scope as usize].kind == ScopeKind::Class {
                        for &index in summary.scope_imports(scope) {
                            let edge = &summary.imports[index as usize];
                            self.add_edge(module, index as usize, edge, &chain, optional);
                        }
                        for used in summary.import_uses(scope) {
                            self.follow_import_use(module, used, &chain, optional);
                        }
                    }
                    let uses = summary.definition_uses_at(scope);
                    self.enqueue_scope_uses(module, scope, uses, &chain, optional);
                    for decorator in summary.engine_decorators_at(scope) {
                        self.follow_decorator(module, scope, decorator, &chain, optional);
                    }
                }
                Work::Name {
                    module,
                    name,
                    chain,
                    optional,
                } => self.follow_name(module, name, chain, optional),
            }
        }
    }

    /// Take in the body of local class `scope` from its [`ClassMemo`] instead of walking it,
    /// when there is one (not for an optional reach: its items are others).
    fn merged_class(&mut self, module: u32, scope: u32, chain: &Chain, optional: bool) -> bool {
        if !self.merges_classes
            || optional
            || self.summary(module).scopes[scope as usize].kind != ScopeKind::Class
            || self.lookups.reads(self.project, module).is_none()
        {
            return false;
        }
        let Some(memo) = self.memos.and_then(|memos| memos.class_memo(module, scope)) else {
            return false;
        };
        self.merge_module(&memo.closure, chain, false);
        self.seen.insert_words(&memo.covered);
        true
    }

    /// A def/class body and everything nested in it: its imports, what is read through them,
    /// and the module globals it reads.
    fn walk_scope(&mut self, module: u32, scope: u32, chain: &Chain, optional: bool) {
        let summary = self.summary(module);
        let project: &'p Project = self.project;
        let lookups: &'m EdgeLookups = self.lookups;
        match lookups.reads(project, module) {
            Some(reads) => self.walk_nested(module, reads, scope, chain, optional),
            None => self.walk_nested_scopes(module, scope, chain, optional),
        }
        let uses = summary.free_uses_at(scope);
        self.enqueue_scope_uses(module, scope, uses, chain, optional);
    }

    /// The reads `uses` of scope `scope` of `module`, each queued as [`Walk::enqueue_use_at`]
    /// does (unless the engine's at import), the module's numbered reads looked up once.
    fn enqueue_scope_uses(
        &mut self,
        module: u32,
        scope: u32,
        uses: impl Iterator<Item = (u32, Use)>,
        chain: &Chain,
        optional: bool,
    ) {
        let lookups: &'m EdgeLookups = self.lookups;
        let reads = lookups.reads(self.project, module);
        for (slot, read) in uses {
            if self.read_by_engine_at_import(module, scope, read) {
                continue;
            }
            match reads {
                Some(reads) => self.enqueue_read(module, reads, slot, read, chain, optional),
                None => self.enqueue_use(module, read, chain, optional),
            }
        }
    }

    /// [`Walk::walk_nested_scopes`] by the steps worked out once per run for local code.
    fn walk_nested(
        &mut self,
        module: u32,
        reads: &'m ModuleReads,
        scope: u32,
        chain: &Chain,
        optional: bool,
    ) {
        let summary = self.summary(module);
        for &step in reads.nested_of(scope) {
            match step {
                NestedStep::Edge(index) => {
                    let edge = &summary.imports[index as usize];
                    self.add_edge(module, index as usize, edge, chain, optional);
                }
                NestedStep::Use(number, name) => {
                    let bit = self.lookups.attribute_number(module, number, optional);
                    // Following a read again changes nothing: each effect is guarded by `seen`.
                    if !self.attributes_read.insert(bit) {
                        continue;
                    }
                    let chain = self.links.then_new(chain, summary.name(name));
                    match &reads.import_use(number).way {
                        Some(way) => self.follow_way(way, &chain, optional),
                        None => {
                            let edge = reads.import_use(number).edge;
                            self.follow_imported(module, edge, None, &chain, optional);
                        }
                    }
                }
            }
        }
    }

    /// The imports of `scope` and of every scope nested in it, and what is read through them.
    fn walk_nested_scopes(&mut self, module: u32, scope: u32, chain: &Chain, optional: bool) {
        let summary = self.summary(module);
        let mut stack = std::mem::take(&mut self.scope_stack);
        stack.push(scope);
        while let Some(inner) = stack.pop() {
            for &index in summary.scope_imports(inner) {
                let edge = &summary.imports[index as usize];
                self.add_edge(module, index as usize, edge, chain, optional);
            }
            for used in summary.import_uses(inner) {
                self.follow_import_use(module, used, chain, optional);
            }
            stack.extend_from_slice(summary.children(inner));
        }
        self.scope_stack = stack;
    }

    /// Whether `read`, in a class body or comprehension of `module`, is of a name the module
    /// reads only as engine APIs, while that scope runs at the module's import.
    #[inline]
    fn read_by_engine_at_import(&self, module: u32, scope: u32, read: Use) -> bool {
        // Usually no module read has engine names: then no scope needs looking at (and this
        // runs for every read of a scope).
        !self.engine_names.is_empty() && self.engine_name_read_at_import(module, scope, read)
    }

    /// [`Walk::read_by_engine_at_import`] when some module has engine names.
    fn engine_name_read_at_import(&self, module: u32, scope: u32, read: Use) -> bool {
        let summary = self.summary(module);
        summary.scopes[scope as usize].kind != ScopeKind::Function
            && self
                .engine_names
                .get(&module)
                .is_some_and(|names| names.contains(&read.name))
            && runs_at_import(summary, scope)
    }

    /// A read of a name an import inside a def or class bound: followed into local code as a
    /// read of a module-level import is ([`Walk::enqueue_use`]). The import itself is already
    /// an edge of the scope that holds it.
    fn follow_import_use(&mut self, module: u32, used: ImportUse, chain: &Chain, optional: bool) {
        let summary = self.summary(module);
        if summary.imports[used.edge as usize].context.type_checking
            || !self
                .import_uses_seen
                .insert((module, used.edge, used.path, optional))
        {
            return;
        }
        let chain = self.links.then_new(chain, summary.name(used.name));
        self.follow_imported(module, used.edge, used.path, &chain, optional);
    }

    fn follow_name(&mut self, module: u32, name_id: NameId, chain: Chain, optional: bool) {
        let summary = self.summary(module);
        // The name's text is looked up only where a chain or a builtin check needs it: most
        // names read are definitions, and the lookup missed the cache.
        let name = || summary.name(name_id);
        let Some(bindings) = summary.bindings_of(name_id) else {
            // An unbound global may come from `from x import *`; a builtin only from local code
            // seen to define it (funcy's `all`), or every builtin read would take every star
            // import.
            let shadowing_only = BUILTINS.contains(&name());
            self.follow_star_imports(module, name(), &chain, optional, shadowing_only);
            return;
        };
        for binding in bindings {
            if self.slice_module == Some(module) {
                self.slice_lines.push(binding_line(summary, binding));
            }
            match binding {
                Binding::Import { edge } => {
                    // Most imports read lead only where the walk has been: no chain link then
                    // (and neither the edge's record nor the name's text is read).
                    let has_member = self.import_has_member(module, *edge);
                    let below = self.edge_applies_below(module, *edge, optional);
                    // The chain grows by a step or not: only in between does the name decide.
                    let may_apply = match chain.len() {
                        len if !has_member || len >= below => len < below,
                        len if len + 1 < below => true,
                        _ => self.links.len_then_new(&chain, name()) < below,
                    };
                    if !may_apply && !self.bound_is_new(module, *edge, optional) {
                        continue;
                    }
                    let edge_ref = &summary.imports[*edge as usize];
                    let chain = if has_member {
                        self.links.then_new(&chain, name())
                    } else {
                        chain
                    };
                    self.add_edge(module, *edge as usize, edge_ref, &chain, optional);
                    self.follow_imported(module, *edge, None, &chain, optional);
                }
                Binding::Definition { scope } => {
                    // Most definitions read are queued already: no chain link for them.
                    let numbers = self.numbers;
                    if self
                        .seen
                        .contains(numbers.of_scope(module, *scope, optional))
                        && self
                            .seen
                            .contains(numbers.of_definition(module, *scope, optional))
                    {
                        continue;
                    }
                    let chain = self.links.then_new(&chain, summary.scope_name(*scope));
                    self.enqueue(Work::Scope {
                        module,
                        scope: *scope,
                        chain,
                        optional,
                    });
                    self.enqueue(Work::Definition {
                        module,
                        scope: *scope,
                        chain,
                        optional,
                    });
                }
                Binding::Value { .. } => {
                    let chain = self.links.then(&chain, name());
                    for &edge in summary.value_edges(binding) {
                        let edge_ref = &summary.imports[edge as usize];
                        self.add_edge(module, edge as usize, edge_ref, &chain, optional);
                    }
                    for (slot, read) in summary.value_uses_at(binding) {
                        if read.name != name_id || read.path.is_some() {
                            self.enqueue_use_at(module, slot, read, &chain, optional);
                        }
                    }
                }
            }
        }
    }

    fn note_slice_line(&mut self, module: u32, line: u32) {
        if self.slice_module == Some(module) {
            self.slice_lines.push(line);
        }
    }

    fn add_edge(
        &mut self,
        module: u32,
        index: usize,
        edge: &ImportEdge,
        chain: &Chain,
        inherited_optional: bool,
    ) {
        self.add_edge_of(module, index, edge, chain, inherited_optional, false);
    }

    /// An import edge: its targets reached, as the engine's only ([`crate::engine`]) when
    /// `engine`. A local target is followed as the closure's own code either way.
    fn add_edge_of(
        &mut self,
        module: u32,
        index: usize,
        edge: &ImportEdge,
        chain: &Chain,
        inherited_optional: bool,
        engine: bool,
    ) {
        let numbers: &'m WorkNumbers = self.numbers;
        // Local code's edges by their flags (most applications change nothing).
        if let Some(at) = numbers.local_edge(module, index) {
            let Some((number, optional)) =
                numbers.local_edge_number(at, inherited_optional, engine)
            else {
                return;
            };
            if self.applied.apply(number, chain.len()) {
                self.reach_edge_targets(module, index, edge, chain, optional, engine);
            }
            return;
        }
        if edge.context.type_checking
            || self.project.modules[module as usize]
                .targets
                .get(index)
                .is_none()
        {
            return;
        }
        let optional = inherited_optional || edge.context.optional;
        self.reach_edge_targets(module, index, edge, chain, optional, engine);
    }

    /// The targets of an import edge applied with `optional`, reached.
    fn reach_edge_targets(
        &mut self,
        module: u32,
        index: usize,
        edge: &ImportEdge,
        chain: &Chain,
        optional: bool,
        engine: bool,
    ) {
        let project: &'p Project = self.project;
        let loaded = &project.modules[module as usize];
        let Some(targets) = loaded.targets.get(index) else {
            return;
        };
        let reason = Spot {
            file: loaded.display.as_str(),
            line: edge.line,
        };
        let numbers: &'m NameNumbers = &self.numbers.names;
        let numbers = numbers.targets(module, index);
        for (target, &number) in targets.iter().zip(numbers) {
            let (name, kind, file, owner): (&'p str, _, Option<&'p str>, Option<&'p Owner>) =
                match target {
                    EdgeTarget::Local(id) => {
                        self.reach_local(*id, reason, chain, optional, edge_contexts(edge));
                        continue;
                    }
                    EdgeTarget::Stdlib(name) => (name, ModuleKind::Stdlib, None, None),
                    EdgeTarget::ThirdParty(module) => (
                        &module.name,
                        ModuleKind::ThirdParty,
                        Some(module.display.as_str()),
                        Some(&module.owner),
                    ),
                    EdgeTarget::Missing(name) => {
                        let links = &self.links;
                        let entry = self.missing.entry(name).or_insert_with(|| Missed {
                            optional,
                            own: false,
                            reason: links.why(reason, chain),
                        });
                        entry.optional &= optional;
                        entry.own |= !engine;
                        continue;
                    }
                };
            let what = (kind, file, owner);
            let entry = self.record_reached(number, name, what, reason, chain, optional);
            entry.contexts |= edge_contexts(edge);
            entry.own |= !engine;
        }
    }

    /// Note `name` as reached (kind, file, distribution) for `reason`, keeping the shortest
    /// reason found, and return its entry.
    fn record_reached(
        &mut self,
        number: u32,
        name: &'p str,
        (kind, file, owner): (ModuleKind, Option<&'p str>, Option<&'p Owner>),
        reason: Spot<'p>,
        chain: &Chain,
        optional: bool,
    ) -> &mut Reached<'p> {
        let links = &self.links;
        let entry = self.reached.entry(number, name, || Reached {
            kind,
            file,
            owner,
            required: false,
            own: false,
            contexts: Contexts::default(),
            reason: links.why(reason, chain),
            merged: false,
        });
        if entry.merged && chain.len() < entry.reason.chain.len() {
            entry.reason = links.why(reason, chain);
            entry.merged = false;
        }
        entry.required |= !optional;
        entry
    }

    /// A decorator that may be an engine's: one naming an engine API brings its import as the
    /// engine's; any other is read as any name is.
    fn follow_decorator(
        &mut self,
        module: u32,
        scope: u32,
        (slot, decorator): (u32, Use),
        chain: &Chain,
        optional: bool,
    ) {
        let summary = self.summary(module);
        let Some(api) = engine_api_of(summary, decorator) else {
            return self.enqueue_use_at(module, slot, decorator, chain, optional);
        };
        let project: &'p Project = self.project;
        self.engine_uses.push(EngineUseView {
            file: &project.modules[module as usize].display,
            line: summary.scopes[scope as usize].line,
            what: Cow::Owned(format!("decorator {api} on {}", summary.scope_name(scope))),
        });
        let chain = self.links.then_new(chain, summary.name(decorator.name));
        self.add_engine_imports(module, decorator.name, &chain, optional);
    }

    /// The imports that bind `name` (an engine API's), reached as the engine's.
    fn add_engine_imports(&mut self, module: u32, name: NameId, chain: &Chain, optional: bool) {
        let summary = self.summary(module);
        for binding in summary.bindings_of(name).unwrap_or_default() {
            if let Binding::Import { edge } = *binding {
                let edge_ref = &summary.imports[edge as usize];
                // `lfm call` still runs the import: the worker has the engine.
                self.note_slice_line(module, edge_ref.line);
                self.add_edge_of(module, edge as usize, edge_ref, chain, optional, true);
            }
        }
    }

    /// A local module is needed: what importing it runs is walked, and it is listed.
    fn reach_local(
        &mut self,
        id: u32,
        reason: Spot<'p>,
        chain: &Chain,
        optional: bool,
        contexts: Contexts,
    ) {
        let project: &'p Project = self.project;
        let local = &project.modules[id as usize];
        self.local_modules.insert(id);
        // Its chain link is made only when the import is new: most are reached again and again.
        if self.seen.insert(self.numbers.of_module(id, optional)) {
            let chain = self.links.then(chain, &local.name);
            self.queue.push_back(Work::Module {
                module: id,
                chain,
                optional,
            });
        }
        let what = (ModuleKind::Local, Some(local.display.as_str()), None);
        let number = self.numbers.names.of_modules[id as usize];
        let entry = self.record_reached(number, &local.name, what, reason, chain, optional);
        entry.contexts |= contexts;
        entry.own = true;
    }

    /// What importing `module` runs: its parent package first, then its top level (imports
    /// outside functions, class bodies, decorators, and what its statements read).
    fn import_module(&mut self, module: u32, chain: &Chain, optional: bool) {
        let project: &'p Project = self.project;
        let loaded = &project.modules[module as usize];
        if let Some(parent) = loaded.parent {
            let reason = Spot {
                file: loaded.display.as_str(),
                line: 0,
            };
            self.reach_local(parent, reason, chain, optional, Contexts::TOP_LEVEL);
        }
        self.reach_installed(module, false, chain, optional);
        let summary = self.summary(module);
        let engine = self.engine_imports(module);
        for (index, edge) in summary.imports.iter().enumerate() {
            if !edge.context.in_function {
                let only_engine = engine.edges.contains(&(index as u32));
                self.add_edge_of(module, index, edge, chain, optional, only_engine);
            }
        }
        for scope in 1..summary.scopes.len() as u32 {
            let work = match summary.scopes[scope as usize].kind {
                ScopeKind::Class if runs_at_import(summary, scope) => Work::Definition {
                    module,
                    scope,
                    chain: *chain,
                    optional,
                },
                ScopeKind::Comprehension if runs_at_import(summary, scope) => Work::Scope {
                    module,
                    scope,
                    chain: *chain,
                    optional,
                },
                _ => continue,
            };
            self.enqueue(work);
        }
        for (slot, read) in summary.definition_uses_at(0) {
            if !engine.names.contains(&read.name) {
                self.enqueue_use_at(module, slot, read, chain, optional);
            }
        }
        if !engine.names.is_empty() {
            self.engine_names.insert(module, engine.names);
        }
    }

    /// The imports of `module` whose names it reads only as engine APIs (decorators, bare or
    /// called, and wrapper calls), noting each such use.
    fn engine_imports(&mut self, module: u32) -> EngineImports {
        let project: &'p Project = self.project;
        let loaded = &project.modules[module as usize];
        let summary = &loaded.summary;
        let mut engine = EngineImports::default();
        let mut not_engine: Vec<NameId> = Vec::new();
        let mut uses = Vec::new();
        for callee in summary.engine_callees() {
            match engine_api_of(summary, callee.read) {
                Some(api) => {
                    // A decorator is named at its def's line, as the def's own walk names it.
                    let (line, what) = match callee.decorates {
                        Some(scope) => (
                            summary.scopes[scope as usize].line,
                            format!("decorator {api} on {}", summary.scope_name(scope)),
                        ),
                        None => (callee.line, format!("wrapper {api}")),
                    };
                    engine.names.push(callee.read.name);
                    uses.push((callee.read.name, line, what));
                }
                None => not_engine.push(callee.read.name),
            }
        }
        engine.names.retain(|name| !not_engine.contains(name));
        engine.names.sort_unstable();
        engine.names.dedup();
        for (name, line, what) in uses {
            if engine.names.contains(&name) {
                self.engine_uses.push(EngineUseView {
                    file: &loaded.display,
                    line,
                    what: Cow::Owned(what),
                });
            }
        }
        for &name in &engine.names {
            for binding in summary.bindings_of(name).unwrap_or_default() {
                if let Binding::Import { edge } = *binding {
                    engine.edges.push(edge);
                }
            }
        }
        engine
    }

    /// Installed modules that running `module` needs (its own file and its packages, when a
    /// distribution provides it: [`crate::project::LoadedModule::installed`]), and so their
    /// distributions. With `own_file_only`, its own file only (the last of them).
    fn reach_installed(&mut self, module: u32, own_file_only: bool, chain: &Chain, optional: bool) {
        let project: &'p Project = self.project;
        let loaded = &project.modules[module as usize];
        let numbers: &'m NameNumbers = &self.numbers.names;
        let (mut installed, mut numbers) = (&loaded.installed[..], numbers.installed(module));
        if own_file_only {
            installed = &installed[installed.len().saturating_sub(1)..];
            numbers = &numbers[numbers.len().saturating_sub(1)..];
        }
        let reason = Spot {
            file: loaded.display.as_str(),
            line: 0,
        };
        for (needed, &number) in installed.iter().zip(numbers) {
            let what = (
                ModuleKind::ThirdParty,
                Some(needed.display.as_str()),
                Some(&needed.owner),
            );
            let entry = self.record_reached(number, &needed.name, what, reason, chain, optional);
            entry.contexts |= Contexts::TOP_LEVEL;
            entry.own = true;
        }
    }

    /// A module used as a value: its import, and every top-level function and class.
    fn whole_module(&mut self, module: u32, chain: &Chain, optional: bool) {
        let summary = self.summary(module);
        self.enqueue(Work::Module {
            module,
            chain: *chain,
            optional,
        });
        for scope in 1..summary.scopes.len() as u32 {
            let defined = &summary.scopes[scope as usize];
            if defined.parent == 0 && matches!(defined.kind, ScopeKind::Function | ScopeKind::Class)
            {
                let chain = self.links.then(chain, summary.scope_name(scope));
                self.enqueue(Work::Scope {
                    module,
                    scope,
                    chain,
                    optional,
                });
                self.enqueue(Work::Definition {
                    module,
                    scope,
                    chain,
                    optional,
                });
            }
        }
    }

    /// [`Walk::enqueue_use`] of the read in use slot `slot` of `module`: in local code, by the
    /// numbers of [`ModuleReads`] (the same decisions, worked out once per run).
    fn enqueue_use_at(&mut self, module: u32, slot: u32, read: Use, chain: &Chain, optional: bool) {
        let project: &'p Project = self.project;
        let lookups: &'m EdgeLookups = self.lookups;
        let Some(reads) = lookups.reads(project, module) else {
            return self.enqueue_use(module, read, chain, optional);
        };
        self.enqueue_read(module, reads, slot, read, chain, optional);
    }

    /// [`Walk::enqueue_use_at`] in local code, whose reads are numbered in `reads`.
    fn enqueue_read(
        &mut self,
        module: u32,
        reads: &'m ModuleReads,
        slot: u32,
        read: Use,
        chain: &Chain,
        optional: bool,
    ) {
        match reads.attribute_at(slot) {
            Some(attribute) => {
                self.read_attribute(module, reads, attribute, read.name, chain, optional)
            }
            None => self.enqueue_name(module, read.name, chain, optional),
        }
    }

    /// An attribute read through the imports that bind `name` in local code, numbered
    /// `attribute` in `reads`: as [`Walk::enqueue_use`] follows one.
    fn read_attribute(
        &mut self,
        module: u32,
        reads: &'m ModuleReads,
        attribute: u32,
        name: NameId,
        chain: &Chain,
        optional: bool,
    ) {
        let number = self.lookups.attribute_number(module, attribute, optional);
        if !self.attributes_read.insert(number) {
            return;
        }
        let summary = self.summary(module);
        // The name's text only decides whether the chain grows by a step: it is looked up when
        // that matters (the lookup missed the cache on most reads).
        let name = || summary.name(name);
        for (edge, way) in reads.ways_of(attribute) {
            let edge_ref = &summary.imports[*edge as usize];
            self.note_slice_line(module, edge_ref.line);
            // Most reads lead only where the walk has been: no chain link is made for them.
            let may_apply = |walk: &Self| {
                let below = walk.edge_applies_below(module, *edge, optional);
                // The chain grows by a step or not: only in between does the name decide.
                match chain.len() {
                    len if len + 1 < below => true,
                    len if len >= below => false,
                    _ => self.links.len_then_new(chain, name()) < below,
                }
            };
            if !self.way_is_new(way, optional) && !may_apply(self) {
                continue;
            }
            let chain = self.links.then_new(chain, name());
            self.add_edge(module, *edge as usize, edge_ref, &chain, optional);
            self.follow_way(way, &chain, optional);
        }
    }

    /// A read of a module global: the name itself, or an attribute path of it. Through an
    /// import of a local module, the path says what of that module is needed.
    fn enqueue_use(&mut self, module: u32, read: Use, chain: &Chain, optional: bool) {
        let summary = self.summary(module);
        let (Some(path), Some(bindings)) = (read.path, summary.bindings_of(read.name)) else {
            self.enqueue_name(module, read.name, chain, optional);
            return;
        };
        let imports_only = bindings
            .iter()
            .all(|binding| matches!(binding, Binding::Import { .. }));
        if !imports_only {
            self.enqueue_name(module, read.name, chain, optional);
            return;
        }
        if !self
            .attributes_seen
            .insert((module, read.name, path, optional))
        {
            return;
        }
        let name = summary.name(read.name);
        let project: &'p Project = self.project;
        for binding in bindings {
            let Binding::Import { edge } = *binding else {
                continue;
            };
            let edge_ref = &summary.imports[edge as usize];
            self.note_slice_line(module, edge_ref.line);
            let way = self.lookups.way(project, module, edge, path);
            // Most reads lead only where the walk has been: no chain link is made for them.
            let len = self.links.len_then_new(chain, name);
            if !self.edge_may_apply(module, edge, len, optional) && !self.way_is_new(&way, optional)
            {
                continue;
            }
            let chain = self.links.then_new(chain, name);
            self.add_edge(module, edge as usize, edge_ref, &chain, optional);
            self.follow_way(&way, &chain, optional);
        }
    }

    /// Whether import edge `edge` of `module` binds a member (`from m import x`): the name read
    /// through it is then a step of the chain.
    fn import_has_member(&self, module: u32, edge: u32) -> bool {
        match self.numbers.local_edge(module, edge as usize) {
            Some(at) => self.numbers.edge_flags[at] & EDGE_MEMBER != 0,
            None => self.summary(module).imports[edge as usize].has_member(),
        }
    }

    /// Whether applying import edge `edge` of `module` ([`Walk::add_edge`]) with a chain of
    /// `len` steps may change anything.
    fn edge_may_apply(&self, module: u32, edge: u32, len: usize, optional: bool) -> bool {
        len < self.edge_applies_below(module, edge, optional)
    }

    /// The chain lengths with which applying import edge `edge` of `module` may change
    /// anything are those below this ([`EdgesApplied`]; `usize::MAX`: all of them).
    fn edge_applies_below(&self, module: u32, edge: u32, optional: bool) -> usize {
        let numbers: &'m WorkNumbers = self.numbers;
        if let Some(at) = numbers.local_edge(module, edge as usize) {
            return match numbers.local_edge_number(at, optional, false) {
                Some((number, _)) => self.applied.applies_below(number),
                None => 0,
            };
        }
        let project: &'p Project = self.project;
        let loaded = &project.modules[module as usize];
        let context = loaded.summary.imports[edge as usize].context;
        if context.type_checking || loaded.targets.get(edge as usize).is_none() {
            return 0;
        }
        usize::MAX
    }

    /// Whether following `way` ([`Walk::follow_way`]) may queue or reach anything.
    fn way_is_new(&self, way: &Way, optional: bool) -> bool {
        let numbers = self.numbers;
        let new = |number| !self.seen.contains(number);
        way.through
            .as_slice()
            .iter()
            .any(|&id| new(numbers.of_module(id, optional)))
            || match way.end {
                Found::Nothing => false,
                Found::Name(holder, name) => new(numbers.of_name(holder, name, optional)),
                Found::Module(id) => new(numbers.of_whole(id, optional)),
            }
    }

    /// Whether following what import edge `edge` of `module` binds ([`Walk::follow_imported`]
    /// without a path) may queue or reach anything.
    fn bound_is_new(&self, module: u32, edge: u32, optional: bool) -> bool {
        let numbers = self.numbers;
        let new = |number| !self.seen.contains(number);
        match self.lookups.get(self.project, module, edge) {
            Resolved::Namespace | Resolved::Found(Found::Nothing) => false,
            Resolved::Found(Found::Name(holder, name)) => {
                new(numbers.of_name(holder, name, optional))
            }
            Resolved::Found(Found::Module(id)) => {
                new(numbers.of_module(id, optional)) || new(numbers.of_whole(id, optional))
            }
        }
    }

    /// After the import edge `edge` of `module` bound a name: follow into local code what is
    /// read of it, the attribute `path` (a name of `module`) or, with none, the name itself.
    fn follow_imported(
        &mut self,
        module: u32,
        edge: u32,
        path: Option<NameId>,
        chain: &Chain,
        optional: bool,
    ) {
        let project: &'p Project = self.project;
        match path {
            Some(path) => {
                let way = self.lookups.way(project, module, edge, path);
                self.follow_way(&way, chain, optional);
            }
            // A namespace package's name alone leads to no module.
            None => match self.lookups.get(project, module, edge) {
                Resolved::Found(found) => self.follow_found(found, chain, optional),
                Resolved::Namespace => {}
            },
        }
    }

    /// Continue from what a name turned out to be.
    fn follow_found(&mut self, found: Found, chain: &Chain, optional: bool) {
        match found {
            Found::Nothing => {}
            Found::Name(holder, name) => self.enqueue_name(holder, name, chain, optional),
            Found::Module(id) => {
                self.reach_on_the_way(id, chain, optional);
                self.enqueue_whole(id, chain, optional);
            }
        }
    }

    /// Replay where an attribute path leads ([`Way`]): each module on the way reached, then
    /// the name at its end followed, or the module there taken whole.
    fn follow_way(&mut self, way: &Way, chain: &Chain, optional: bool) {
        for &id in way.through.as_slice() {
            self.reach_on_the_way(id, chain, optional);
        }
        match way.end {
            Found::Nothing => {}
            Found::Name(holder, name) => self.enqueue_name(holder, name, chain, optional),
            Found::Module(id) => self.enqueue_whole(id, chain, optional),
        }
    }

    /// A local module a read passes through is imported (unless already reached this way:
    /// then only the path through it is new).
    fn reach_on_the_way(&mut self, id: u32, chain: &Chain, optional: bool) {
        if self.seen.contains(self.numbers.of_module(id, optional)) {
            return;
        }
        let project: &'p Project = self.project;
        let local = &project.modules[id as usize];
        let reason = Spot {
            file: local.display.as_str(),
            line: 0,
        };
        self.reach_local(id, reason, chain, optional, Contexts::TOP_LEVEL);
    }

    /// A local module read as a value: all of it.
    fn enqueue_whole(&mut self, id: u32, chain: &Chain, optional: bool) {
        let project: &'p Project = self.project;
        let local = &project.modules[id as usize];
        // Queued already (most are): no chain links for it.
        if self.seen.contains(self.numbers.of_whole(id, optional)) {
            return;
        }
        let chain = self.links.then(chain, &local.name);
        let chain = self.links.then(&chain, WHOLE_MODULE_STEP);
        self.enqueue(Work::Whole {
            module: id,
            chain,
            optional,
        });
    }

    /// A name no statement of `module` binds may come from its `from x import *`.
    /// The star imports of `module` that may bind `name`: all of them, or with
    /// `shadowing_only` those of local modules that do.
    fn follow_star_imports(
        &mut self,
        module: u32,
        name: &'p str,
        chain: &Chain,
        optional: bool,
        shadowing_only: bool,
    ) {
        let project: &'p Project = self.project;
        let loaded = &project.modules[module as usize];
        let summary = &loaded.summary;
        let Some(stars) = summary.name_id("*").and_then(|id| summary.bindings_of(id)) else {
            return;
        };
        for binding in stars {
            let Binding::Import { edge } = *binding else {
                continue;
            };
            let found = last_local(loaded, edge)
                .map(|holder| find_member(project, holder, name, &mut Vec::new()));
            if shadowing_only && matches!(found, None | Some(Found::Nothing)) {
                continue;
            }
            let edge_ref = &summary.imports[edge as usize];
            self.note_slice_line(module, edge_ref.line);
            self.add_edge(module, edge as usize, edge_ref, chain, optional);
            if let Some(found) = found {
                self.follow_found(found, chain, optional);
            }
        }
    }

    fn into_view(
        mut self,
        target: Cow<'p, str>,
        kind: TargetKind,
        closure: ClosureKind,
        module: u32,
        line: u32,
    ) -> TargetView<'p> {
        let project: &'p Project = self.project;
        let loaded = &project.modules[module as usize];
        let mut warnings: Vec<WarningView<'p>> = Vec::new();
        // Hash maps while walking (looked up far more often than listed); put in order here:
        // by kind, then name, the order of the Spec's list (and of each distribution's modules).
        let mut reached_in_order: Vec<(&'p str, Reached<'p>)> = self
            .reached
            .take()
            .into_iter()
            .map(|(_, name, reached)| (name, reached))
            .collect();
        reached_in_order.sort_unstable_by_key(|(name, reached)| (reached.kind, *name));
        let mut missing_in_order: Vec<(&'p str, Missed<'p>)> =
            std::mem::take(&mut self.missing).into_iter().collect();
        missing_in_order.sort_unstable_by_key(|(name, _)| *name);
        let (own_reached, engine_reached) = reached_in_order.into_iter().partition(|r| r.1.own);
        let (own_missing, engine_missing) = missing_in_order.into_iter().partition(|m| m.1.own);
        // The target's own needs first: what they list, the engine's lists leave out.
        let mut listed = BTreeSet::new();
        let own = needs_views(
            project,
            self.memos.map(|memos| &memos.recent_needs),
            own_reached,
            own_missing,
            &mut listed,
            &mut warnings,
        );
        let mut engine = needs_views(
            project,
            None,
            engine_reached,
            engine_missing,
            &mut listed,
            &mut warnings,
        );
        // The engine's missing distributions that the target needs itself are listed there.
        engine
            .missing_distributions
            .retain(|missing| !own.missing_distributions.contains(missing));
        let mut engine_uses = std::mem::take(&mut self.engine_uses);
        engine_uses.sort();
        engine_uses.dedup();
        // Problems of every local file in the closure (syntax errors, computed dynamic imports).
        let files_in_closure = std::iter::once(module).chain(
            self.local_modules
                .list
                .iter()
                .copied()
                .filter(|&id| id != module),
        );
        for id in files_in_closure {
            let other = &project.modules[id as usize];
            for problem in &other.summary.problems {
                warnings.push(WarningView {
                    file: Cow::Borrowed(&other.display),
                    line: problem.line,
                    message: Cow::Borrowed(&problem.message),
                });
            }
        }
        warnings.sort();
        warnings.dedup();

        TargetView {
            target,
            kind,
            closure,
            module: &loaded.name,
            file: &loaded.display,
            line,
            modules: own.modules,
            distributions: own.distributions,
            missing: own.missing,
            missing_distributions: own.missing_distributions,
            engine: EngineView {
                uses: engine_uses,
                modules: engine.modules,
                distributions: engine.distributions,
                missing: engine.missing,
                missing_distributions: engine.missing_distributions,
            },
            warnings,
            escape_free: project.escape_free,
        }
    }
}

impl Drop for Walk<'_, '_> {
    fn drop(&mut self) {
        let mut scratch = Scratch {
            seen: std::mem::take(&mut self.seen),
            applied: std::mem::take(&mut self.applied),
            attributes_seen: std::mem::take(&mut self.attributes_seen),
            attributes_read: std::mem::take(&mut self.attributes_read),
            import_uses_seen: std::mem::take(&mut self.import_uses_seen),
            reached_slots: {
                self.reached.take();
                std::mem::take(&mut self.reached.slots)
            },
            local_bits: self.local_modules.take_bits(),
            queue: std::mem::take(&mut self.queue),
            links: std::mem::take(&mut self.links).emptied(),
            reached_room: self.reached.room,
        };
        scratch.seen.clear();
        scratch.applied.clear();
        scratch.attributes_seen.clear();
        scratch.attributes_read.clear();
        scratch.import_uses_seen.clear();
        scratch.queue.clear();
        SCRATCH_POOL.with(|pool| pool.borrow_mut().push(scratch));
    }
}

/// A module's imports that only engine APIs are read through ([`Walk::engine_imports`]).
#[derive(Default)]
struct EngineImports {
    names: Vec<NameId>,
    edges: Vec<u32>,
}

/// The engine API ([`crate::engine::ENGINE_APIS`]) that `read` names in a module, when every
/// import that binds its name makes it that one.
fn engine_api_of(summary: &ModuleSummary, read: Use) -> Option<&'static str> {
    let bindings = summary.bindings_of(read.name)?;
    let mut found = None;
    for binding in bindings {
        let Binding::Import { edge } = *binding else {
            return None;
        };
        let edge = &summary.imports[edge as usize];
        if edge.level != 0 {
            return None;
        }
        let module = summary.edge_module(edge);
        // What the bound name is: `from a import b` binds a.b, `import a.b as c` a.b, and
        // `import a.b` binds a.
        let mut qualified = match summary.edge_member(edge) {
            Some(member) => format!("{module}.{member}"),
            None if edge.aliased => module.to_string(),
            None => module.split('.').next().unwrap_or_default().to_string(),
        };
        if let Some(path) = read.path {
            qualified.push('.');
            qualified.push_str(summary.name(path));
        }
        let api = crate::engine::engine_api(&qualified)?;
        if found.is_some_and(|other| other != api) {
            return None;
        }
        found = Some(api);
    }
    found
}

/// What a name read from a local module is.
#[derive(Debug, Clone, Copy)]
enum Found {
    Module(u32),
    Name(u32, NameId),
    Nothing,
}

/// The module an import edge's bound name lives in: its last local target.
fn last_local(loaded: &crate::project::LoadedModule, edge: u32) -> Option<u32> {
    loaded
        .targets
        .get(edge as usize)?
        .iter()
        .rev()
        .find_map(|target| match target {
            EdgeTarget::Local(id) => Some(*id),
            _ => None,
        })
}

/// What `name` is in local module `holder`, as an attribute read from it: what the module binds
/// it to (followed through its imports and `*` imports), else its submodule of that name.
fn find_member(project: &Project, holder: u32, name: &str, visited: &mut Vec<u32>) -> Found {
    if visited.contains(&holder) || visited.len() > 32 {
        return Found::Nothing;
    }
    visited.push(holder);
    let loaded = &project.modules[holder as usize];
    let summary = &loaded.summary;
    let id = summary.name_id(name);
    // The last binding decides: an import is followed, anything else is a plain name here.
    if let Some((id, last)) = id.and_then(|id| Some((id, summary.bindings_of(id)?.last()?))) {
        let Binding::Import { edge } = *last else {
            return Found::Name(holder, id);
        };
        if let Some(Some(bound)) = loaded.bound.get(edge as usize) {
            return project
                .module_named(bound)
                .map_or(Found::Nothing, Found::Module);
        }
        let edge_ref = &summary.imports[edge as usize];
        return match (summary.edge_member(edge_ref), last_local(loaded, edge)) {
            (Some(member), Some(next)) => find_member(project, next, member, visited),
            _ => Found::Nothing,
        };
    }
    if let Some(module) = project.module_named(&format!("{}.{name}", loaded.name)) {
        return Found::Module(module);
    }
    let Some(stars) = summary.name_id("*").and_then(|id| summary.bindings_of(id)) else {
        return Found::Nothing;
    };
    for binding in stars {
        if let Binding::Import { edge } = *binding {
            if let Some(next) = last_local(loaded, edge) {
                let found = find_member(project, next, name, visited);
                if !matches!(found, Found::Nothing) {
                    return found;
                }
            }
        }
    }
    Found::Nothing
}

/// Whether a class body or comprehension runs when its module is imported (it is not inside
/// a function or lambda).
fn runs_at_import(summary: &ModuleSummary, scope: u32) -> bool {
    let mut parent = summary.scopes[scope as usize].parent;
    while parent != 0 {
        let kind = summary.scopes[parent as usize].kind;
        if matches!(kind, ScopeKind::Function | ScopeKind::Lambda) {
            return false;
        }
        parent = summary.scopes[parent as usize].parent;
    }
    true
}

/// The line of the statement that made a binding.
fn binding_line(summary: &ModuleSummary, binding: &Binding) -> u32 {
    match binding {
        Binding::Import { edge } => summary.imports[*edge as usize].line,
        Binding::Definition { scope } => summary.scopes[*scope as usize].line,
        Binding::Value { line, .. } => *line,
    }
}

fn edge_contexts(edge: &ImportEdge) -> Contexts {
    let c = edge.context;
    let mut contexts = if c.in_function {
        Contexts::IN_FUNCTION
    } else {
        Contexts::TOP_LEVEL
    };
    if c.conditional {
        contexts |= Contexts::CONDITIONAL;
    }
    if c.optional {
        contexts |= Contexts::OPTIONAL;
    }
    if c.dynamic {
        contexts |= Contexts::DYNAMIC;
    }
    contexts
}
