//! One pass over one module's AST that keeps only what closures need.
//!
//! The result, a [`ModuleSummary`], is independent of every other file and of the environment,
//! so it is what the per-file cache stores and what the parallel phase produces. Resolution of
//! import names and closure computation happen later, on summaries only.

use std::borrow::Cow;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use ruff_python_ast::visitor::source_order::{self, SourceOrderVisitor};
use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_python_parser::{parse_unchecked, Mode, ParseOptions};
use ruff_text_size::{Ranged, TextSize};
use serde::{Deserialize, Serialize};

/// A name of one module, as an index into its [`ModuleSummary::names`]. Names are compared and
/// followed millions of times per tree; an index is what makes that cheap in time and memory.
pub type NameId = u32;

/// Everything the closure computation needs to know about one module.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ModuleSummary {
    pub imports: Vec<ImportEdge>,
    /// Module and member names of the import edges, end to end (one String per edge cost
    /// more than its text, and pinned memory).
    import_text: String,
    /// Scope 0 is the module; the others are defs, classes, lambdas and comprehensions.
    pub scopes: Vec<Scope>,
    /// The scopes' qualified names, end to end (see [`ModuleSummary::scope_name`]).
    scope_names: String,
    /// The scopes' id lists, end to end (see [`Scope`]'s accessors on the summary): a whole
    /// tree has ~240k scopes, and four boxed slices each cost more than their contents.
    scope_lists: Vec<u32>,
    /// Every name the module reads or binds at any level, sorted and unique, so that id order
    /// is name order.
    pub names: NameTable,
    /// Module-level binding statements grouped by the name they bind (in name order; a name's
    /// statements in source order): those of name `i` are
    /// `bindings[binding_offsets[i]..binding_offsets[i + 1]]`, found without a search.
    pub bindings: Vec<Binding>,
    pub binding_offsets: Vec<u32>,
    /// What each [`Binding::Value`] reads and imports, end to end.
    value_lists: Vec<u32>,
    /// Reads of names bound by an import from an engine package that the module reads only as
    /// something called (a decorator, bare or called, or a call's callee): (name, path or
    /// [`BARE`], line, decorated scope or [`BARE`]) quadruples; see [`crate::engine`].
    engine_callees: Vec<u32>,
    /// What module-level statements call, and the decorators of top-level defs and classes:
    /// (name, path or [`BARE`]) pairs, sorted and unique (see
    /// [`ModuleSummary::import_time_calls`]).
    import_time_calls: Vec<u32>,
    /// Calls with a string literal for a positional argument, at module level and in
    /// top-level functions (see [`LiteralCall`]): what a callee that imports (or looks up,
    /// `find_spec`) that parameter imports.
    #[serde(default)]
    pub literal_calls: Vec<LiteralCall>,
    /// Top-level functions that import one of their positional parameters (see
    /// [`ParameterImport`]): `compare_version(package, ...)`'s `import_module(package)`.
    #[serde(default)]
    pub parameter_imports: Vec<ParameterImport>,
    /// Problems found while reading this file: syntax errors, non-constant dynamic imports.
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImportEdge {
    /// Dotted module name as written, without the leading dots of a relative import: a span of
    /// the summary's import text, read with [`ModuleSummary::edge_module`].
    module: [u32; 2],
    /// Number of leading dots (0 = absolute).
    pub level: u32,
    /// For `from module import member`: the member (`*` for a star import), read with
    /// [`ModuleSummary::edge_member`].
    member: Option<[u32; 2]>,
    pub line: u32,
    /// Innermost scope that contains the import statement.
    pub scope: u32,
    pub context: EdgeContext,
    /// `import a.b as c`: the bound name is the last module, not the top-level package.
    pub aliased: bool,
}

impl ImportEdge {
    /// Whether this is a `from module import member` edge.
    pub fn has_member(&self) -> bool {
        self.member.is_some()
    }
}

/// Why and when an import runs. More than one can hold at once (an optional import inside a
/// function is both `in_function` and `optional`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EdgeContext {
    pub in_function: bool,
    pub conditional: bool,
    pub optional: bool,
    pub type_checking: bool,
    pub dynamic: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ScopeKind {
    Module,
    Function,
    Class,
    Lambda,
    Comprehension,
}

/// One scope. Its name and lists live in the summary, end to end: see
/// [`ModuleSummary::scope_name`], [`ModuleSummary::children`], [`ModuleSummary::free_names`],
/// [`ModuleSummary::definition_reads`] and [`ModuleSummary::scope_imports`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Scope {
    pub kind: ScopeKind,
    pub line: u32,
    pub parent: u32,
    /// Start and end of the qualified name (`Model.fit`; `outer.<locals>.inner` is kept as
    /// `outer.inner`; empty for the module scope) in the summary's scope names.
    name: [u32; 2],
    /// Where the lists start in the summary's scope lists, and the length of each: children,
    /// free names, definition reads, imports, import uses, engine decorators.
    lists: u32,
    lengths: [u32; 6],
}

const CHILDREN: usize = 0;
/// Uses (see [`Use`]) of names this scope (with everything nested in it, and its decorators,
/// defaults, bases and annotations) reads but does not bind itself: module globals.
const FREE_USES: usize = 1;
/// Uses when the `def`/`class` statement itself runs: decorators, defaults, annotations,
/// bases, and for a class its body's own statements (not its methods' bodies); for the module
/// scope, what its own statements read when the module is imported.
const DEFINITION_USES: usize = 2;
/// Import edges whose innermost scope is this one.
const IMPORTS: usize = 3;
/// Reads (in this scope or nested ones) of names an import of this scope binds: (edge, name,
/// path or [`BARE`]) triples (see [`ImportUse`]).
const IMPORT_USES: usize = 4;

/// Decorators of this def or class that may be an engine's ([`crate::engine`]): reads of a
/// name an import from an engine package binds, as [`Use`] pairs. They are in neither the
/// free nor the definition uses of the scope (the enclosing scope still reads them): the walk
/// follows them as the engine's when they name an engine API, as plain reads otherwise.
const ENGINE_DECORATORS: usize = 5;

/// The path of a use that reads a name itself, not an attribute of it.
const BARE: NameId = NameId::MAX;

/// A read of a module global: the name, and the dotted attribute path read from it (`m.f`
/// reads `f` of `m`; `a.b.c` reads `b.c` of `a`), or `None` when the name itself is used (as a
/// value, an argument, a call). Through an imported module the path says which of its
/// functions a reader needs; a bare use needs all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Use {
    pub name: NameId,
    pub path: Option<NameId>,
}

/// A read of a name that an import inside a def, class, lambda or comprehension bound: the
/// edge, the name as read, and the attribute path read from it (as in [`Use`]). Followed like
/// a read of a module-level import, so that `from pkg.helpers import plot` inside a function
/// brings what `plot` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportUse {
    pub edge: u32,
    pub name: NameId,
    pub path: Option<NameId>,
}

/// A call with string literal `text` for its positional argument `position`, at module level
/// (`compare_version("torchmetrics", operator.ge, "1.0.0")`) or directly in the body of a
/// top-level function (transformers' `is_torch_available()` calls
/// `_is_package_available("torch")`), `scope` the one it is in. `name` and `path` are the
/// callee's read, as in [`Use`] ([`BARE`] for no path); in a function, only callees a
/// module-level statement binds are kept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LiteralCall {
    pub name: NameId,
    pub path: NameId,
    pub position: u32,
    pub text: String,
    pub scope: u32,
}

impl LiteralCall {
    pub fn callee(&self) -> Use {
        Use {
            name: self.name,
            path: (self.path != BARE).then_some(self.path),
        }
    }
}

/// Top-level function `scope` passes its positional parameter `position` to an import call
/// (`importlib.import_module`, `__import__` or an import helper) on line `line`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct ParameterImport {
    pub scope: u32,
    pub position: u32,
    pub line: u32,
}

/// A read of an engine package's name as something called, anywhere in the module (see
/// [`ModuleSummary::engine_callees`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineCallee {
    pub read: Use,
    pub line: u32,
    /// The def or class it decorates; `None` for a call (`dask.delayed(fit)`).
    pub decorates: Option<u32>,
}

fn uses_of(pairs: &[u32]) -> impl Iterator<Item = Use> + '_ {
    pairs.chunks_exact(2).map(|pair| Use {
        name: pair[0],
        path: (pair[1] != BARE).then_some(pair[1]),
    })
}

/// [`uses_of`] with each use's slot: `start` is the slot of the first pair.
fn uses_at(start: u32, pairs: &[u32]) -> impl Iterator<Item = (u32, Use)> + '_ {
    (start..).step_by(2).zip(uses_of(pairs))
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub enum Binding {
    /// `import x` / `from x import y` bound the name.
    Import { edge: u32 },
    /// A `def` or `class` statement bound the name.
    Definition { scope: u32 },
    /// Any other statement bound it: what its value reads, and dynamic imports inside it
    /// ([`ModuleSummary::value_uses`], [`ModuleSummary::value_edges`]); `reads` counts uses.
    Value {
        line: u32,
        start: u32,
        reads: u32,
        edges: u32,
    },
}

/// Sorted, unique names stored end to end in one string: a whole site-packages has ~670k of
/// them, and a `String` each cost three times their text.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NameTable {
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<u32>,
}

impl NameTable {
    /// `names` must be sorted and unique.
    pub fn from_sorted<'a>(names: impl IntoIterator<Item = &'a str>) -> NameTable {
        let mut table = NameTable::default();
        for name in names {
            table.text.push_str(name);
            table.ends.push(table.text.len() as u32);
        }
        table.text.shrink_to_fit();
        table.ends.shrink_to_fit();
        table
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, id: NameId) -> &str {
        let end = self.ends[id as usize] as usize;
        let start = match id {
            0 => 0,
            _ => self.ends[id as usize - 1] as usize,
        };
        &self.text[start..end]
    }

    /// The id of `name`, by binary search (the names are sorted).
    pub fn find(&self, name: &str) -> Option<NameId> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = (low + high) / 2;
            match self.get(middle as NameId).cmp(name) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Some(middle as NameId),
            }
        }
        None
    }

    fn heap_bytes(&self) -> usize {
        self.text.capacity() + 4 * self.ends.capacity()
    }
}

impl ModuleSummary {
    /// Whether all of the summary's text (scope names, names, import names) is written in JSON
    /// as it is.
    pub fn text_is_json_plain(&self) -> bool {
        use crate::spec::is_json_plain;
        is_json_plain(&self.import_text)
            && is_json_plain(&self.scope_names)
            && is_json_plain(&self.names.text)
    }

    pub fn name(&self, id: NameId) -> &str {
        self.names.get(id)
    }

    pub fn name_id(&self, name: &str) -> Option<NameId> {
        self.names.find(name)
    }

    /// The dotted module an import edge names, as written (no leading dots).
    pub fn edge_module(&self, edge: &ImportEdge) -> &str {
        let [start, end] = edge.module;
        &self.import_text[start as usize..end as usize]
    }

    /// The member of a `from module import member` edge.
    pub fn edge_member(&self, edge: &ImportEdge) -> Option<&str> {
        let [start, end] = edge.member?;
        Some(&self.import_text[start as usize..end as usize])
    }

    pub fn scope_name(&self, scope: u32) -> &str {
        let [start, end] = self.scopes[scope as usize].name;
        &self.scope_names[start as usize..end as usize]
    }

    fn scope_list(&self, scope: u32, which: usize) -> &[u32] {
        let start = self.scope_list_start(scope, which);
        let length = self.scopes[scope as usize].lengths[which] as usize;
        &self.scope_lists[start..start + length]
    }

    fn scope_list_start(&self, scope: u32, which: usize) -> usize {
        let scope = &self.scopes[scope as usize];
        scope.lists as usize + scope.lengths[..which].iter().sum::<u32>() as usize
    }

    /// [`ModuleSummary::scope_list`] of uses, each with its [use slot](ModuleSummary::use_slots).
    fn scope_uses_at(&self, scope: u32, which: usize) -> impl Iterator<Item = (u32, Use)> + '_ {
        let start = self.scope_list_start(scope, which) as u32;
        uses_at(start, self.scope_list(scope, which))
    }

    /// How many use slots the module has: each use in its lists ([`ModuleSummary::free_uses_at`],
    /// [`ModuleSummary::definition_uses_at`], [`ModuleSummary::engine_decorators_at`],
    /// [`ModuleSummary::value_uses_at`]) comes with a number below this, its own, so that a
    /// caller can keep what it worked out about each read in an array rather than a hash map.
    pub fn use_slots(&self) -> usize {
        self.scope_lists.len() + self.value_lists.len()
    }

    /// [`ModuleSummary::free_uses`], each with its use slot.
    pub fn free_uses_at(&self, scope: u32) -> impl Iterator<Item = (u32, Use)> + '_ {
        self.scope_uses_at(scope, FREE_USES)
    }

    /// [`ModuleSummary::definition_uses`], each with its use slot.
    pub fn definition_uses_at(&self, scope: u32) -> impl Iterator<Item = (u32, Use)> + '_ {
        self.scope_uses_at(scope, DEFINITION_USES)
    }

    /// [`ModuleSummary::engine_decorators`], each with its use slot.
    pub fn engine_decorators_at(&self, scope: u32) -> impl Iterator<Item = (u32, Use)> + '_ {
        self.scope_uses_at(scope, ENGINE_DECORATORS)
    }

    /// [`ModuleSummary::value_uses`], each with its use slot (after the scope lists' slots).
    pub fn value_uses_at(&self, binding: &Binding) -> impl Iterator<Item = (u32, Use)> + '_ {
        let (start, pairs) = match *binding {
            Binding::Value { start, reads, .. } => (
                start,
                &self.value_lists[start as usize..(start + 2 * reads) as usize],
            ),
            _ => (0, &[][..]),
        };
        uses_at(self.scope_lists.len() as u32 + start, pairs)
    }

    pub fn children(&self, scope: u32) -> &[u32] {
        self.scope_list(scope, CHILDREN)
    }

    /// Module globals the scope (with everything nested in it, and its decorators, defaults,
    /// bases and annotations) reads, each with the attribute path read from it.
    pub fn free_uses(&self, scope: u32) -> impl Iterator<Item = Use> + '_ {
        uses_of(self.scope_list(scope, FREE_USES))
    }

    /// What the `def`/`class` statement reads when it runs: decorators, defaults, annotations,
    /// bases, and for a class its body's own statements (not its methods' bodies). For the
    /// module scope: what its own statements read when it is imported.
    pub fn definition_uses(&self, scope: u32) -> impl Iterator<Item = Use> + '_ {
        uses_of(self.scope_list(scope, DEFINITION_USES))
    }

    /// Import edges whose innermost scope is this one.
    pub fn scope_imports(&self, scope: u32) -> &[u32] {
        self.scope_list(scope, IMPORTS)
    }

    /// The def's or class's decorators that may be an engine's (see [`ENGINE_DECORATORS`]).
    pub fn engine_decorators(&self, scope: u32) -> impl Iterator<Item = Use> + '_ {
        uses_of(self.scope_list(scope, ENGINE_DECORATORS))
    }

    /// Every read, anywhere in the module, of a name that an import from an engine package
    /// binds and that the module never reads but as something called: what decides whether
    /// that import is the engine's ([`crate::engine`]).
    pub fn engine_callees(&self) -> impl Iterator<Item = EngineCallee> + '_ {
        self.engine_callees
            .chunks_exact(4)
            .map(|quad| EngineCallee {
                read: Use {
                    name: quad[0],
                    path: (quad[1] != BARE).then_some(quad[1]),
                },
                line: quad[2],
                decorates: (quad[3] != BARE).then_some(quad[3]),
            })
    }

    /// What the module's own statements call when it is imported (the callee of each call,
    /// as a [`Use`]; the decorators of its top-level defs and classes too): a def's body runs
    /// at import only through these.
    pub fn import_time_calls(&self) -> impl Iterator<Item = Use> + '_ {
        uses_of(&self.import_time_calls)
    }

    /// Reads of names that imports of this scope bind, from the scope or the scopes nested in
    /// it that do not bind the name themselves (for a class, from its own body only).
    pub fn import_uses(&self, scope: u32) -> impl Iterator<Item = ImportUse> + '_ {
        self.scope_list(scope, IMPORT_USES)
            .chunks_exact(3)
            .map(|triple| ImportUse {
                edge: triple[0],
                name: triple[1],
                path: (triple[2] != BARE).then_some(triple[2]),
            })
    }

    /// What a [`Binding::Value`] reads (nothing for other bindings).
    pub fn value_uses(&self, binding: &Binding) -> impl Iterator<Item = Use> + '_ {
        let pairs = match *binding {
            Binding::Value { start, reads, .. } => {
                &self.value_lists[start as usize..(start + 2 * reads) as usize]
            }
            _ => &[],
        };
        uses_of(pairs)
    }

    /// The dynamic imports inside a [`Binding::Value`]'s statement (empty for other bindings).
    pub fn value_edges(&self, binding: &Binding) -> &[u32] {
        match *binding {
            Binding::Value {
                start,
                reads,
                edges,
                ..
            } => {
                let from = (start + 2 * reads) as usize;
                &self.value_lists[from..from + edges as usize]
            }
            _ => &[],
        }
    }

    /// Roughly the heap bytes this summary holds (capacities, not allocator overhead), for
    /// `LFM_TIMINGS=1` memory accounting.
    pub fn approximate_heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.imports.capacity() * size_of::<ImportEdge>()
            + self.scopes.capacity() * size_of::<Scope>()
            + self.scope_names.capacity()
            + self.import_text.capacity()
            + 4 * self.scope_lists.capacity()
            + self.names.heap_bytes()
            + self.bindings.capacity() * size_of::<Binding>()
            + 4 * self.binding_offsets.capacity()
            + 4 * self.value_lists.capacity()
            + 4 * self.engine_callees.capacity()
            + 4 * self.import_time_calls.capacity()
            + (self.literal_calls.iter())
                .map(|call| call.text.capacity())
                .sum::<usize>()
            + self.literal_calls.capacity() * size_of::<LiteralCall>()
            + self.parameter_imports.capacity() * size_of::<ParameterImport>()
    }

    /// The module-level statements that bind `name`.
    pub fn bindings_of(&self, name: NameId) -> Option<&[Binding]> {
        let start = *self.binding_offsets.get(name as usize)? as usize;
        let end = *self.binding_offsets.get(name as usize + 1)? as usize;
        (start < end).then(|| &self.bindings[start..end])
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Problem {
    pub line: u32,
    pub message: String,
}

/// Parse `source` and summarise it. Never fails: syntax errors become [`Problem`]s and every
/// import the error-recovering parser still sees is kept.
pub fn summarize(source: &str) -> ModuleSummary {
    // SAFETY: only the copy made inside `outside` leaves the run; the tree, the extractor and
    // the first summary stay within it.
    unsafe {
        crate::scratch::run(|scratch| {
            let parsed = parse_unchecked(source, ParseOptions::from(Mode::Module));
            let mut extractor = Extractor::new(LineCounter::new(source));
            if let ast::Mod::Module(module) = parsed.syntax() {
                extractor.visit_body(&module.body);
            }
            let mut extractor_lines = extractor.lines.clone();
            let mut summary = extractor.finish();
            for error in parsed.errors().iter().take(MAX_SYNTAX_ERRORS_REPORTED) {
                summary.problems.push(Problem {
                    line: extractor_lines.line_at(error.location.start()),
                    message: format!("syntax error: {}", error.error),
                });
            }
            if parsed.errors().len() > MAX_SYNTAX_ERRORS_REPORTED {
                summary.problems.push(Problem {
                    line: 0,
                    message: format!(
                        "{} more syntax errors not shown (imports were still recovered)",
                        parsed.errors().len() - MAX_SYNTAX_ERRORS_REPORTED
                    ),
                });
            }
            scratch.discard(parsed);
            // Without an arena the summary's blocks sit among the tree's, freed just now: a
            // copy lands in the freed space and lets those pages go (~11 MiB of peak memory on
            // a whole site-packages). With one, the copy is what outlives the arena.
            let kept = scratch.outside(|| summary.clone());
            scratch.discard(summary);
            kept
        })
    }
}

const MAX_SYNTAX_ERRORS_REPORTED: usize = 3;

/// Line numbers of byte offsets, counted from the last offset asked for: the visit asks in
/// nearly source order, so this reads the text about once and, unlike a line index, allocates
/// nothing. Line ends are `\n`, `\r\n` and a lone `\r`, as for Python.
#[derive(Clone)]
struct LineCounter<'a> {
    text: &'a [u8],
    /// Whether the text holds a `\r` at all; without one, a line end is a `\n`.
    has_carriage_return: bool,
    offset: usize,
    line: u32,
}

impl<'a> LineCounter<'a> {
    fn new(source: &'a str) -> Self {
        LineCounter {
            text: source.as_bytes(),
            has_carriage_return: memchr::memchr(b'\r', source.as_bytes()).is_some(),
            offset: 0,
            line: 1,
        }
    }

    /// The 1-based line of `offset`, which must not fall between the `\r` and `\n` of a line end
    /// (token and node starts never do).
    fn line_at(&mut self, offset: TextSize) -> u32 {
        let offset = (offset.to_usize()).min(self.text.len());
        if offset >= self.offset {
            self.line += self.line_ends(self.offset, offset);
        } else {
            self.line -= self.line_ends(offset, self.offset);
        }
        self.offset = offset;
        self.line
    }

    /// Line ends that finish within `start..end`.
    fn line_ends(&self, start: usize, end: usize) -> u32 {
        let text = self.text;
        if !self.has_carriage_return {
            // Ranges are short and many: a plain count beats a search per line. Counted in
            // byte-wide lanes (255 bytes at most per chunk, so a lane cannot overflow), which
            // compiles to 16 or 32 bytes per instruction; a usize count per byte did not.
            return text[start..end]
                .chunks(255)
                .map(|chunk| chunk.iter().fold(0u8, |n, &b| n + u8::from(b == b'\n')) as u32)
                .sum();
        }
        memchr::memchr2_iter(b'\n', b'\r', &text[start..end])
            .filter(|&at| text[start + at] == b'\n' || text.get(start + at + 1) != Some(&b'\n'))
            .count() as u32
    }
}

/// Source bytes per distinct name that the name table is first sized for: a whole
/// site-packages averages one per ~210 bytes, smaller files more. A table that grows moves
/// every key it holds; one sized too large costs a little arena space, freed with the tree.
const BYTES_PER_NAME: usize = 128;

/// Exception types whose handler makes the guarded import optional.
const IMPORT_GUARDS: &[&str] = &[
    "ImportError",
    "ModuleNotFoundError",
    "Exception",
    "BaseException",
];

/// Name lists use ids in first-seen order while the module is visited and may repeat (a push
/// is cheaper than a set insert, and most reads repeat); `finish` renumbers them in name order
/// and makes them unique.
#[derive(Default)]
struct ScopeBuild {
    children: Vec<u32>,
    /// (name, path or [`BARE`]) pairs, as [`Use`]s are stored.
    uses: Vec<[NameId; 2]>,
    binds: Vec<NameId>,
    globals: Vec<NameId>,
    header_uses: Vec<[NameId; 2]>,
    /// What its decorators call (see [`ENGINE_DECORATORS`]); `finish` keeps those of engine
    /// packages apart and puts the others with the header uses.
    decorators: Vec<[NameId; 2]>,
    /// Names an import statement of this (non-module) scope binds, with the edge.
    import_binds: Vec<(NameId, u32)>,
}

/// A module-level binding while the module is visited; `finish` flattens value lists.
enum BindingBuild {
    Import {
        edge: u32,
    },
    Definition {
        scope: u32,
    },
    Value {
        line: u32,
        uses: Vec<[NameId; 2]>,
        edges: Vec<u32>,
    },
}

/// A read as something called, while the module is visited (see [`EngineCallee`]).
struct CalleeBuild {
    pair: [NameId; 2],
    offset: TextSize,
    decorates: Option<u32>,
    /// The scope the call is in (a decorator: the decorated def's enclosing scope).
    scope: u32,
}

/// Collects what one module-level statement reads and imports, to attach to the names it binds.
#[derive(Default)]
struct StatementCapture {
    uses: Vec<[NameId; 2]>,
    edges: Vec<u32>,
}

struct Extractor<'a> {
    lines: LineCounter<'a>,
    imports: Vec<ImportEdge>,
    import_text: String,
    /// Final but for the lists, which `finish` fills in.
    scopes: Vec<Scope>,
    scope_names: String,
    builds: Vec<ScopeBuild>,
    /// Names borrowed from the AST, which outlives the extractor (attribute paths of more than
    /// one step are joined, hence owned).
    names: Vec<Cow<'a, str>>,
    name_ids: HashMap<Cow<'a, str>, NameId>,
    /// By name id: the scope (plus one) whose uses got a bare read of the name last, so that
    /// a repeated read (`self`, `np`) is not pushed again for `finish` to sort away.
    bare_read_by: Vec<u32>,
    /// Module-level bindings in source order, by first-seen name id.
    bindings: Vec<(NameId, BindingBuild)>,
    problems: Vec<Problem>,
    current: u32,
    function_depth: u32,
    conditional_depth: u32,
    optional_depth: u32,
    type_checking_depth: u32,
    /// Scopes whose decorators/defaults/bases are being visited: their reads count for them too.
    header_targets: Vec<u32>,
    capture: Option<StatementCapture>,
    /// Every read as something called, and the names read any other way: an engine's
    /// decorator or wrapper is only ever called ([`crate::engine`]).
    callees: Vec<CalleeBuild>,
    plain_reads: Vec<NameId>,
    /// Set while a callee is recorded: its read is not a plain one; with `Some(scope)`, it is
    /// that def's decorator, kept apart from the def's header uses.
    reading_callee: Option<Option<u32>>,
    /// Local names bound to `typing`/`typing_extensions`, and to `TYPE_CHECKING` itself.
    typing_aliases: HashSet<&'a str>,
    type_checking_aliases: HashSet<&'a str>,
    importlib_aliases: HashSet<&'a str>,
    import_module_aliases: HashSet<&'a str>,
    /// The positional parameters of the top-level def being visited (empty elsewhere).
    positional_parameters: Vec<&'a str>,
    literal_calls: Vec<LiteralCall>,
    parameter_imports: Vec<ParameterImport>,
}

impl<'a> Extractor<'a> {
    fn new(lines: LineCounter<'a>) -> Self {
        let expected_names = lines.text.len() / BYTES_PER_NAME;
        let mut extractor = Extractor {
            lines,
            imports: Vec::new(),
            import_text: String::new(),
            scopes: Vec::new(),
            scope_names: String::new(),
            builds: Vec::new(),
            names: Vec::with_capacity(expected_names),
            name_ids: HashMap::with_capacity_and_hasher(expected_names, Default::default()),
            bare_read_by: Vec::with_capacity(expected_names),
            bindings: Vec::new(),
            problems: Vec::new(),
            current: 0,
            function_depth: 0,
            conditional_depth: 0,
            optional_depth: 0,
            type_checking_depth: 0,
            header_targets: Vec::new(),
            capture: None,
            callees: Vec::new(),
            plain_reads: Vec::new(),
            reading_callee: None,
            typing_aliases: ["typing", "typing_extensions"].into_iter().collect(),
            type_checking_aliases: ["TYPE_CHECKING"].into_iter().collect(),
            importlib_aliases: ["importlib"].into_iter().collect(),
            import_module_aliases: HashSet::default(),
            positional_parameters: Vec::new(),
            literal_calls: Vec::new(),
            parameter_imports: Vec::new(),
        };
        extractor.new_scope(ScopeKind::Module, "", 0);
        extractor
    }

    fn line(&mut self, offset: TextSize) -> u32 {
        self.lines.line_at(offset)
    }

    /// A new scope named `name` inside the current one; its qualified name is the parent's
    /// (unless that is the module) and `name`, joined by a dot.
    fn new_scope(&mut self, kind: ScopeKind, name: &str, line: u32) -> u32 {
        let id = self.scopes.len() as u32;
        let parent = self.current;
        let start = self.scope_names.len() as u32;
        if id != 0 {
            self.builds[parent as usize].children.push(id);
            let [parent_start, parent_end] = self.scopes[parent as usize].name;
            if parent_start < parent_end {
                self.scope_names
                    .extend_from_within(parent_start as usize..parent_end as usize);
                self.scope_names.push('.');
            }
        }
        self.scope_names.push_str(name);
        self.scopes.push(Scope {
            kind,
            line,
            parent,
            name: [start, self.scope_names.len() as u32],
            lists: 0,
            lengths: [0; 6],
        });
        self.builds.push(ScopeBuild::default());
        id
    }

    fn context(&self) -> EdgeContext {
        EdgeContext {
            in_function: self.function_depth > 0,
            conditional: self.conditional_depth > 0,
            optional: self.optional_depth > 0,
            type_checking: self.type_checking_depth > 0,
            dynamic: false,
        }
    }

    fn intern(&mut self, name: impl Into<Cow<'a, str>>) -> NameId {
        let name = name.into();
        // Looked up by reference first: most names are seen before, and an owned (joined)
        // path would otherwise be copied just to be compared.
        if let Some(&id) = self.name_ids.get(&*name) {
            return id;
        }
        let id = self.names.len() as NameId;
        self.name_ids.insert(name.clone(), id);
        self.names.push(name);
        self.bare_read_by.push(0);
        id
    }

    fn record_load(&mut self, name: &'a str) -> [NameId; 2] {
        let id = self.intern(name);
        self.record_use([id, BARE]);
        [id, BARE]
    }

    /// `name.path` read: the name is loaded, and which of its attributes is kept with it.
    fn record_attribute_load(&mut self, name: &'a str, path: Cow<'a, str>) -> [NameId; 2] {
        let id = self.intern(name);
        let path = self.intern(path);
        self.record_use([id, path]);
        [id, path]
    }

    fn record_use(&mut self, pair: [NameId; 2]) {
        if pair[1] != BARE {
            self.builds[self.current as usize].uses.push(pair);
        } else if self.bare_read_by[pair[0] as usize] != self.current + 1 {
            self.bare_read_by[pair[0] as usize] = self.current + 1;
            self.builds[self.current as usize].uses.push(pair);
        }
        let decorated = self.reading_callee.flatten();
        for &target in &self.header_targets {
            let build = &mut self.builds[target as usize];
            if decorated == Some(target) {
                build.decorators.push(pair);
            } else {
                build.header_uses.push(pair);
            }
        }
        if let Some(capture) = &mut self.capture {
            capture.uses.push(pair);
        }
        if self.reading_callee.is_none() {
            self.plain_reads.push(pair[0]);
        }
    }

    /// `callee` as what a call (or, with `decorates`, a decorator of that def or class) calls:
    /// recorded as a read like any other, and kept as a callee. False when it is no name or
    /// attribute path of one (then the caller visits it as any expression).
    fn record_callee(&mut self, callee: &'a Expr, decorates: Option<u32>) -> bool {
        let (name, path) = match callee {
            Expr::Name(name) => (name.id.as_str(), None),
            Expr::Attribute(attribute) => match attribute_path(attribute) {
                Some((name, path)) => (name, Some(path)),
                None => return false,
            },
            _ => return false,
        };
        self.reading_callee = Some(decorates);
        let pair = match path {
            None => self.record_load(name),
            Some(path) => self.record_attribute_load(name, path),
        };
        self.reading_callee = None;
        self.callees.push(CalleeBuild {
            pair,
            offset: callee.start(),
            decorates,
            scope: self.current,
        });
        true
    }

    /// A decorator of the def or class `scope`: what it calls is kept apart (see
    /// [`ENGINE_DECORATORS`]); its arguments are read as the def's header.
    fn visit_decorator(&mut self, scope: u32, expression: &'a Expr) {
        let (callee, arguments) = match expression {
            Expr::Call(call) => (&*call.func, Some(&call.arguments)),
            other => (other, None),
        };
        if !self.record_callee(callee, Some(scope)) {
            return self.visit_expr(expression);
        }
        if let Some(arguments) = arguments {
            self.visit_arguments(arguments);
        }
    }

    fn record_bind(&mut self, name: &'a str) -> NameId {
        let id = self.intern(name);
        self.builds[self.current as usize].binds.push(id);
        id
    }

    fn bind(&mut self, name: &'a str, binding: impl FnOnce() -> BindingBuild) {
        let id = self.record_bind(name);
        if self.current == 0 {
            self.bindings.push((id, binding()));
        }
    }

    /// A name bound by import `edge`: a module global at the top level; inside a def, class,
    /// lambda or comprehension, a local whose reads are followed through the edge as a
    /// global's are (see [`ModuleSummary::import_uses`]).
    fn bind_import(&mut self, name: &'a str, edge: u32) {
        let id = self.record_bind(name);
        if self.current == 0 {
            self.bindings.push((id, BindingBuild::Import { edge }));
        } else {
            self.builds[self.current as usize]
                .import_binds
                .push((id, edge));
        }
    }

    /// `text` appended to the import text, as a span of it.
    fn import_span(&mut self, text: &str) -> [u32; 2] {
        let start = self.import_text.len() as u32;
        self.import_text.push_str(text);
        [start, self.import_text.len() as u32]
    }

    fn add_edge(&mut self, edge: ImportEdge) -> u32 {
        let id = self.imports.len() as u32;
        self.imports.push(edge);
        if let Some(capture) = &mut self.capture {
            capture.edges.push(id);
        }
        id
    }

    fn visit_import(&mut self, import: &'a ast::StmtImport) {
        let line = self.line(import.start());
        for alias in &import.names {
            let module = alias.name.id.as_str();
            let module_span = self.import_span(module);
            let edge = self.add_edge(ImportEdge {
                module: module_span,
                level: 0,
                member: None,
                line,
                scope: self.current,
                context: self.context(),
                aliased: alias.asname.is_some(),
            });
            // `import a.b` binds `a`; `import a.b as c` binds `c`.
            let bound = match &alias.asname {
                Some(asname) => asname.id.as_str(),
                None => module.split('.').next().unwrap_or_default(),
            };
            if module == "typing" || module == "typing_extensions" {
                self.typing_aliases.insert(bound);
            }
            if module == "importlib" {
                self.importlib_aliases.insert(bound);
            }
            self.bind_import(bound, edge);
        }
    }

    fn visit_import_from(&mut self, import: &'a ast::StmtImportFrom) {
        let line = self.line(import.start());
        let module = import.module.as_ref().map_or("", |m| m.id.as_str());
        let module_span = self.import_span(module);
        for alias in &import.names {
            let member = alias.name.id.as_str();
            let member_span = self.import_span(member);
            let edge = self.add_edge(ImportEdge {
                module: module_span,
                level: import.level,
                member: Some(member_span),
                line,
                scope: self.current,
                context: self.context(),
                aliased: alias.asname.is_some(),
            });
            if member == "*" {
                self.bind("*", || BindingBuild::Import { edge });
                continue;
            }
            let bound = alias.asname.as_ref().map_or(member, |a| a.id.as_str());
            if import.level == 0 {
                if (module == "typing" || module == "typing_extensions")
                    && member == "TYPE_CHECKING"
                {
                    self.type_checking_aliases.insert(bound);
                }
                if module == "importlib" && member == "import_module" {
                    self.import_module_aliases.insert(bound);
                }
            }
            self.bind_import(bound, edge);
        }
    }

    fn is_type_checking_test(&self, test: &Expr) -> bool {
        match test {
            Expr::Name(name) => self.type_checking_aliases.contains(name.id.as_str()),
            Expr::Attribute(attribute) => {
                attribute.attr.id.as_str() == "TYPE_CHECKING"
                    && matches!(&*attribute.value, Expr::Name(n) if self.typing_aliases.contains(n.id.as_str()))
            }
            _ => false,
        }
    }

    fn visit_if(&mut self, stmt: &'a ast::StmtIf) {
        self.visit_expr(&stmt.test);
        let negated = match &*stmt.test {
            Expr::UnaryOp(unary) if unary.op == ast::UnaryOp::Not => Some(&*unary.operand),
            _ => None,
        };
        let body_is_type_checking = self.is_type_checking_test(&stmt.test);
        let else_is_type_checking =
            negated.is_some_and(|operand| self.is_type_checking_test(operand));
        self.with_branch(body_is_type_checking, |this| this.visit_body(&stmt.body));
        for (index, clause) in stmt.elif_else_clauses.iter().enumerate() {
            if let Some(test) = &clause.test {
                self.visit_expr(test);
            }
            // `elif TYPE_CHECKING:` is as type-only as `if TYPE_CHECKING:` (packaging's
            // version.py imports typing_extensions so).
            let type_checking = match &clause.test {
                Some(test) => self.is_type_checking_test(test),
                None => else_is_type_checking && index == 0,
            };
            self.with_branch(type_checking, |this| this.visit_body(&clause.body));
        }
    }

    fn with_branch(&mut self, type_checking: bool, visit: impl FnOnce(&mut Self)) {
        if type_checking {
            self.type_checking_depth += 1;
        } else {
            self.conditional_depth += 1;
        }
        visit(self);
        if type_checking {
            self.type_checking_depth -= 1;
        } else {
            self.conditional_depth -= 1;
        }
    }

    fn visit_try(&mut self, stmt: &'a ast::StmtTry) {
        let guards_imports = stmt.handlers.iter().any(|handler| {
            let ast::ExceptHandler::ExceptHandler(handler) = handler;
            match handler.type_.as_deref() {
                None => true,
                Some(expr) => catches_import_error(expr),
            }
        });
        if guards_imports {
            self.optional_depth += 1;
        }
        self.visit_body(&stmt.body);
        if guards_imports {
            self.optional_depth -= 1;
        }
        self.conditional_depth += 1;
        for handler in &stmt.handlers {
            let ast::ExceptHandler::ExceptHandler(handler) = handler;
            if let Some(type_) = &handler.type_ {
                self.visit_expr(type_);
            }
            if let Some(name) = &handler.name {
                self.bind(name.id.as_str(), || BindingBuild::Value {
                    line: 0,
                    uses: vec![],
                    edges: vec![],
                });
            }
            self.visit_body(&handler.body);
        }
        self.visit_body(&stmt.orelse);
        self.conditional_depth -= 1;
        self.visit_body(&stmt.finalbody);
    }

    fn visit_function_def(&mut self, def: &'a ast::StmtFunctionDef) {
        let line = self.line(def.name.start());
        let scope = self.new_scope(ScopeKind::Function, def.name.id.as_str(), line);
        self.header_targets.push(scope);
        for decorator in &def.decorator_list {
            self.visit_decorator(scope, &decorator.expression);
        }
        self.visit_parameter_headers(&def.parameters);
        if let Some(returns) = &def.returns {
            self.visit_expr(returns);
        }
        self.header_targets.pop();
        self.bind(def.name.id.as_str(), || BindingBuild::Definition { scope });
        let top_level = self.current == 0;
        self.enter_scope(scope, true, |this| {
            this.bind_parameters(&def.parameters);
            let positional = match top_level {
                true => (def.parameters.posonlyargs.iter())
                    .chain(&def.parameters.args)
                    .map(|parameter| parameter.parameter.name.id.as_str())
                    .collect(),
                false => Vec::new(),
            };
            let saved = std::mem::replace(&mut this.positional_parameters, positional);
            this.visit_body(&def.body);
            this.positional_parameters = saved;
        });
    }

    fn visit_class_def(&mut self, class: &'a ast::StmtClassDef) {
        let line = self.line(class.name.start());
        let scope = self.new_scope(ScopeKind::Class, class.name.id.as_str(), line);
        self.header_targets.push(scope);
        for decorator in &class.decorator_list {
            self.visit_decorator(scope, &decorator.expression);
        }
        if let Some(arguments) = &class.arguments {
            self.visit_arguments(arguments);
        }
        self.header_targets.pop();
        self.bind(class.name.id.as_str(), || BindingBuild::Definition {
            scope,
        });
        self.enter_scope(scope, false, |this| this.visit_body(&class.body));
    }

    /// Defaults and annotations are evaluated when the `def` runs, in the enclosing scope.
    fn visit_parameter_headers(&mut self, parameters: &'a ast::Parameters) {
        for parameter in parameters.iter_non_variadic_params() {
            if let Some(default) = &parameter.default {
                self.visit_expr(default);
            }
            if let Some(annotation) = &parameter.parameter.annotation {
                self.visit_expr(annotation);
            }
        }
        for variadic in [&parameters.vararg, &parameters.kwarg]
            .into_iter()
            .flatten()
        {
            if let Some(annotation) = &variadic.annotation {
                self.visit_expr(annotation);
            }
        }
    }

    fn bind_parameters(&mut self, parameters: &'a ast::Parameters) {
        for parameter in parameters.iter() {
            self.record_bind(parameter.name().id.as_str());
        }
    }

    fn enter_scope(&mut self, scope: u32, is_function: bool, visit: impl FnOnce(&mut Self)) {
        let saved_scope = std::mem::replace(&mut self.current, scope);
        // A def/class body is not part of the module-level statement that defines it. A
        // comprehension runs with the statement, and a lambda is part of the value bound: what
        // they read of the module is what the statement's names need (`T = {k: np.zeros(k) for
        // k in KEYS}` needs np and KEYS), less the names they bind themselves.
        let inline = matches!(
            self.scopes[scope as usize].kind,
            ScopeKind::Comprehension | ScopeKind::Lambda
        );
        let captured = self.capture.as_ref().map(|capture| capture.uses.len());
        let saved_capture = if inline { None } else { self.capture.take() };
        if is_function {
            self.function_depth += 1;
        }
        visit(self);
        if is_function {
            self.function_depth -= 1;
        }
        if inline {
            self.drop_captured_locals(scope, captured.unwrap_or(0));
        } else {
            self.capture = saved_capture;
        }
        self.current = saved_scope;
    }

    /// Drop from the statement's capture, from `from` on, the reads of names the inline scope
    /// `scope` binds (a comprehension's loop variables, a lambda's parameters).
    fn drop_captured_locals(&mut self, scope: u32, from: usize) {
        let binds = &self.builds[scope as usize].binds;
        if let Some(capture) = &mut self.capture {
            let mut index = 0;
            capture.uses.retain(|pair| {
                index += 1;
                index <= from || !binds.contains(&pair[0])
            });
        }
    }

    fn record_dynamic_import(&mut self, call: &'a ast::ExprCall) {
        let is_import_call = match &*call.func {
            Expr::Name(name) => {
                name.id.as_str() == "__import__"
                    || self.import_module_aliases.contains(name.id.as_str())
            }
            Expr::Attribute(attribute) => {
                attribute.attr.id.as_str() == "import_module"
                    && matches!(&*attribute.value, Expr::Name(n) if self.importlib_aliases.contains(n.id.as_str()))
            }
            _ => false,
        };
        if is_import_call {
            self.record_import_call(call, false);
        } else if self.is_import_helper(&call.func) || is_module_lookup(&call.func) {
            self.record_import_call(call, true);
        }
    }

    /// A package's own import helper, known by its name: a function called `import_module`
    /// that is not importlib's (sympy's `sympy.external.import_module('matplotlib')`, which
    /// returns None when the module is not installed), or pandas'
    /// `import_optional_dependency('bottleneck', errors='warn')`. Its module name is read as
    /// importlib's; the import is optional, since such helpers exist to do without the module.
    /// (Helpers are known by name: the call and the helper's body are in different files,
    /// and each file is summarised alone.)
    fn is_import_helper(&self, callee: &Expr) -> bool {
        called_name(callee).is_some_and(|name| IMPORT_HELPERS.contains(&name))
    }

    /// The import edge of an import call with a literal module name (and of its literal
    /// `import_kwargs={'fromlist': [...]}`, a helper's way to ask `__import__` for submodules),
    /// or a problem for a computed name (not for a helper's: it may take anything).
    fn record_import_call(&mut self, call: &'a ast::ExprCall, helper: bool) {
        let line = self.line(call.start());
        let argument = call.arguments.args.first().or_else(|| {
            call.arguments
                .find_keyword("name")
                .or_else(|| call.arguments.find_keyword("module"))
                .map(|keyword| &keyword.value)
        });
        self.record_parameter_import(argument, line);
        match call.arguments.args.first().or_else(|| {
            call.arguments
                .find_keyword("name")
                .or_else(|| call.arguments.find_keyword("module"))
                .map(|keyword| &keyword.value)
        }) {
            Some(Expr::StringLiteral(literal)) => {
                let written = literal.value.to_str();
                let level = written.chars().take_while(|&c| c == '.').count() as u32;
                let mut module = written[level as usize..].to_string();
                if level > 0 {
                    // importlib.import_module(".sub", "pkg") is absolute once the package is known.
                    if let Some(Expr::StringLiteral(package)) = call
                        .arguments
                        .args
                        .get(1)
                        .or_else(|| call.arguments.find_keyword("package").map(|k| &k.value))
                    {
                        module = join_relative(package.value.to_str(), level, &module);
                    }
                }
                let level = if module.contains('.') || level == 0 {
                    0
                } else {
                    level
                };
                let mut context = self.context();
                context.dynamic = true;
                context.optional |= helper;
                let submodules = helper_fromlist(call).map(|sub| format!("{module}.{sub}"));
                for module in std::iter::once(module.clone()).chain(submodules) {
                    let module = self.import_span(&module);
                    self.add_edge(ImportEdge {
                        module,
                        level,
                        member: None,
                        line,
                        scope: self.current,
                        context,
                        aliased: false,
                    });
                }
            }
            Some(_) if helper => {}
            Some(_) => self.problems.push(Problem {
                line,
                message: "dynamic import with a computed module name; its target is unknown".into(),
            }),
            None => {}
        }
    }

    /// An import call whose module is a positional parameter of the top-level def it is in
    /// (directly, not in a nested scope).
    fn record_parameter_import(&mut self, argument: Option<&Expr>, line: u32) {
        let Some(Expr::Name(name)) = argument else {
            return;
        };
        let scope = self.current;
        let in_def = self.scopes[scope as usize].kind == ScopeKind::Function;
        let position = (self.positional_parameters.iter()).position(|p| *p == name.id.as_str());
        if let (true, Some(position)) = (in_def, position) {
            self.parameter_imports.push(ParameterImport {
                scope,
                position: position as u32,
                line,
            });
        }
    }

    /// Whether the current scope is a top-level def's own body.
    fn in_top_level_function(&self) -> bool {
        let scope = &self.scopes[self.current as usize];
        scope.kind == ScopeKind::Function && scope.parent == 0
    }

    /// The string literal positional arguments that may name a module of a call at module
    /// level or in a top-level def, with the callee just recorded.
    fn record_literal_arguments(&mut self, call: &'a ast::ExprCall) {
        let Some(callee) = self.callees.last() else {
            return;
        };
        let [name, path] = callee.pair;
        for (position, argument) in call.arguments.args.iter().enumerate() {
            let Expr::StringLiteral(literal) = argument else {
                continue;
            };
            let text = literal.value.to_str();
            if text.split('.').all(is_identifier) {
                self.literal_calls.push(LiteralCall {
                    name,
                    path,
                    position: position as u32,
                    text: text.to_string(),
                    scope: self.current,
                });
            }
        }
    }

    fn visit_scoped_expr(&mut self, kind: ScopeKind, expr: &'a Expr) {
        let line = self.line(expr.start());
        let name = match kind {
            ScopeKind::Lambda => "<lambda>",
            _ => "<comprehension>",
        };
        let scope = self.new_scope(kind, name, line);
        match expr {
            Expr::Lambda(lambda) => {
                if let Some(parameters) = &lambda.parameters {
                    self.header_targets.push(scope);
                    self.visit_parameter_headers(parameters);
                    self.header_targets.pop();
                }
                self.enter_scope(scope, true, |this| {
                    if let Some(parameters) = &lambda.parameters {
                        this.bind_parameters(parameters);
                    }
                    this.visit_expr(&lambda.body);
                });
            }
            _ => self.enter_scope(scope, false, |this| source_order::walk_expr(this, expr)),
        }
    }

    fn finish(mut self) -> ModuleSummary {
        let scope_imports = self.imports_by_scope();
        // Renumber names in name order: sorted id lists are then sorted name lists, and the
        // closure walk visits names in the same order whatever order the source used them in.
        let (order, renumbered) = name_order(&self.names);
        let engine_names = self.engine_import_names();
        let uses = self.scope_uses(&renumbered, &engine_names);
        let engine_callees = self.engine_callees(&renumbered, &engine_names);
        let import_time_calls = self.import_time_calls(&renumbered);
        let renumber = |id: NameId| match id {
            BARE => BARE,
            id => renumbered[id as usize],
        };
        let mut literal_calls = std::mem::take(&mut self.literal_calls);
        for call in &mut literal_calls {
            (call.name, call.path) = (renumber(call.name), renumber(call.path));
        }
        let bindings = std::mem::take(&mut self.bindings);
        let (bindings, binding_offsets) = group_bindings(bindings, &renumbered, order.len());
        // A read of a name no module-level statement binds (a builtin, a typo) leads nowhere,
        // unless a star import may provide it: drop those reads now rather than follow them
        // in every closure that passes here.
        let star = order.binary_search_by(|&old| (*self.names[old as usize]).cmp("*"));
        let star_bound = star.is_ok_and(|new| binding_offsets[new] < binding_offsets[new + 1]);
        let bound = |pair: &&[NameId; 2]| {
            let name = pair[0] as usize;
            star_bound || binding_offsets[name] < binding_offsets[name + 1]
        };
        // In a function, a call of a builtin or a local (`getattr(x, "name")`) leads nowhere.
        literal_calls.retain(|call| call.scope == 0 || bound(&&[call.name, call.path]));
        let (bindings, mut value_lists) = flatten_bindings(bindings, &bound);
        let mut scope_lists = Vec::new();
        for (id, scope) in self.scopes.iter_mut().enumerate() {
            scope.lists = scope_lists.len() as u32;
            let children = &self.builds[id].children;
            scope_lists.extend_from_slice(children);
            let before = scope_lists.len();
            scope_lists.extend(uses.free[id].iter().filter(&bound).flatten());
            let free = scope_lists.len() - before;
            let before = scope_lists.len();
            scope_lists.extend(uses.definition[id].iter().filter(&bound).flatten());
            let definition = scope_lists.len() - before;
            scope_lists.extend_from_slice(&scope_imports[id]);
            scope_lists.extend(uses.imports[id].iter().flatten());
            scope_lists.extend(uses.engine_decorators[id].iter().flatten());
            scope.lengths = [
                children.len() as u32,
                free as u32,
                definition as u32,
                scope_imports[id].len() as u32,
                3 * uses.imports[id].len() as u32,
                2 * uses.engine_decorators[id].len() as u32,
            ];
        }
        value_lists.shrink_to_fit();
        scope_lists.shrink_to_fit();
        self.scope_names.shrink_to_fit();
        self.imports.shrink_to_fit();
        self.import_text.shrink_to_fit();
        self.scopes.shrink_to_fit();
        let names = &self.names;
        let sorted_names = NameTable::from_sorted(order.iter().map(|&old| &*names[old as usize]));
        ModuleSummary {
            imports: self.imports,
            import_text: self.import_text,
            scopes: self.scopes,
            scope_names: self.scope_names,
            scope_lists,
            names: sorted_names,
            bindings,
            binding_offsets,
            value_lists,
            engine_callees,
            import_time_calls,
            literal_calls,
            parameter_imports: self.parameter_imports,
            problems: self.problems,
        }
    }

    /// By first-seen id: whether a name is bound at module level by imports from an engine
    /// package only (`from parsl import python_app`, `import dask`), so that it may name an
    /// engine's decorator or wrapper.
    fn engine_import_names(&self) -> Vec<bool> {
        let mut engine = vec![false; self.names.len()];
        let mut other = vec![false; self.names.len()];
        for (name, binding) in &self.bindings {
            let from_engine = match binding {
                BindingBuild::Import { edge } => {
                    let edge = &self.imports[*edge as usize];
                    let [start, end] = edge.module;
                    edge.level == 0
                        && crate::engine::is_engine_package(
                            &self.import_text[start as usize..end as usize],
                        )
                }
                _ => false,
            };
            let flag = if from_engine { &mut engine } else { &mut other };
            flag[*name as usize] = true;
        }
        for (engine, other) in engine.iter_mut().zip(other) {
            *engine &= !other;
        }
        engine
    }

    /// The callees (see [`EngineCallee`]) of names in `engine_names` that the module reads
    /// nowhere but as something called, renumbered, as the summary stores them.
    fn engine_callees(&mut self, renumbered: &[NameId], engine_names: &[bool]) -> Vec<u32> {
        let mut read_plainly = vec![false; self.names.len()];
        for &name in &self.plain_reads {
            read_plainly[name as usize] = true;
        }
        let renumber = |id: NameId| {
            if id == BARE {
                BARE
            } else {
                renumbered[id as usize]
            }
        };
        let mut out = Vec::new();
        for callee in &self.callees {
            let [name, path] = callee.pair;
            if !engine_names[name as usize] || read_plainly[name as usize] {
                continue;
            }
            out.extend([
                renumbered[name as usize],
                renumber(path),
                self.lines.line_at(callee.offset),
                callee.decorates.unwrap_or(BARE),
            ]);
        }
        out.shrink_to_fit();
        out
    }

    /// See [`ModuleSummary::import_time_calls`] (renumbered, as pairs end to end).
    fn import_time_calls(&self, renumbered: &[NameId]) -> Vec<u32> {
        let pairs: Vec<[NameId; 2]> = (self.callees.iter())
            .filter(|callee| callee.scope == 0)
            .map(|callee| callee.pair)
            .collect();
        sorted_uses(&pairs, renumbered).concat()
    }

    /// Each scope's import edges, by index.
    fn imports_by_scope(&self) -> Vec<Vec<u32>> {
        let mut scope_imports: Vec<Vec<u32>> = vec![Vec::new(); self.scopes.len()];
        for (index, edge) in self.imports.iter().enumerate() {
            scope_imports[edge.scope as usize].push(index as u32);
        }
        scope_imports
    }

    /// Each scope's free uses, definition uses and import uses (see [`FREE_USES`],
    /// [`DEFINITION_USES`], [`IMPORT_USES`]), renumbered, sorted and unique.
    fn scope_uses(&self, renumbered: &[NameId], engine_names: &[bool]) -> ScopeUses {
        let scope_count = self.scopes.len();
        // Children were created after their parents, so a reverse sweep sees every child first.
        let mut free_uses: Vec<Vec<[NameId; 2]>> = vec![Vec::new(); scope_count];
        let mut definition_uses: Vec<Vec<[NameId; 2]>> = vec![Vec::new(); scope_count];
        let mut import_uses: Vec<Vec<[u32; 3]>> = vec![Vec::new(); scope_count];
        let mut engine_decorators: Vec<Vec<[NameId; 2]>> = vec![Vec::new(); scope_count];
        for id in (0..scope_count).rev() {
            let build = &self.builds[id];
            let (engine, others): (Vec<[NameId; 2]>, Vec<[NameId; 2]>) = build
                .decorators
                .iter()
                .partition(|pair| engine_names[pair[0] as usize]);
            engine_decorators[id] = sorted_uses(&engine, renumbered);
            let globals = sorted_ids(&build.globals, renumbered);
            let mut binds = sorted_ids(&build.binds, renumbered);
            binds.retain(|name| globals.binary_search(name).is_err());
            let unbound = |pair: &[NameId; 2]| binds.binary_search(&pair[0]).is_err();
            let uses = sorted_uses(&build.uses, renumbered);
            let mut header_uses = sorted_uses(&build.header_uses, renumbered);
            header_uses.extend(sorted_uses(&others, renumbered));
            merge_unique_uses(&mut header_uses);
            let mut free = uses.clone();
            // A class body's names are not visible in its methods: only its own reads count.
            if self.scopes[id].kind == ScopeKind::Class {
                import_uses[id] = reads_through_imports(&build.import_binds, &free, renumbered);
            }
            for &child in &build.children {
                free.extend_from_slice(&free_uses[child as usize]);
            }
            let function_like =
                !matches!(self.scopes[id].kind, ScopeKind::Class | ScopeKind::Module);
            if function_like && !build.import_binds.is_empty() {
                merge_unique_uses(&mut free);
                import_uses[id] = reads_through_imports(&build.import_binds, &free, renumbered);
            }
            free.retain(unbound);
            free.extend_from_slice(&header_uses);
            merge_unique_uses(&mut free);
            free_uses[id] = free;
            let mut definition = header_uses;
            match self.scopes[id].kind {
                ScopeKind::Class => definition.extend(uses.iter().filter(|p| unbound(p))),
                // Module-level statements read globals whether or not they also bind them.
                ScopeKind::Module => definition.extend_from_slice(&uses),
                _ => {}
            }
            merge_unique_uses(&mut definition);
            definition_uses[id] = definition;
        }
        ScopeUses {
            free: free_uses,
            definition: definition_uses,
            imports: import_uses,
            engine_decorators,
        }
    }

    /// Names a module-level simple statement binds, so its reads can be attached to them.
    fn bind_statement_targets(&mut self, stmt: &'a Stmt, line: u32, capture: StatementCapture) {
        let mut targets = Vec::new();
        match stmt {
            Stmt::Assign(assign) => assign
                .targets
                .iter()
                .for_each(|t| collect_target_names(t, &mut targets)),
            Stmt::AnnAssign(assign) => collect_target_names(&assign.target, &mut targets),
            Stmt::AugAssign(assign) => collect_target_names(&assign.target, &mut targets),
            Stmt::TypeAlias(alias) => collect_target_names(&alias.name, &mut targets),
            Stmt::For(for_stmt) => collect_target_names(&for_stmt.target, &mut targets),
            Stmt::With(with) => {
                for item in &with.items {
                    if let Some(vars) = &item.optional_vars {
                        collect_target_names(vars, &mut targets);
                    }
                }
            }
            _ => {}
        }
        // Walrus targets anywhere in the statement bind module globals too.
        targets.extend(capture_named_targets(stmt));
        let uses = capture.uses;
        for target in targets {
            let uses = uses.clone();
            let edges = capture.edges.clone();
            self.bind(target, || BindingBuild::Value { line, uses, edges });
        }
    }
}

impl<'a> SourceOrderVisitor<'a> for Extractor<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(import) => self.visit_import(import),
            Stmt::ImportFrom(import) => self.visit_import_from(import),
            Stmt::FunctionDef(def) => self.visit_function_def(def),
            Stmt::ClassDef(class) => self.visit_class_def(class),
            Stmt::If(if_stmt) => self.visit_if(if_stmt),
            Stmt::Try(try_stmt) => self.visit_try(try_stmt),
            Stmt::Global(global) => {
                for name in &global.names {
                    let id = self.intern(name.id.as_str());
                    self.builds[self.current as usize].globals.push(id);
                }
            }
            Stmt::While(while_stmt) => {
                self.visit_expr(&while_stmt.test);
                self.with_branch(false, |this| {
                    this.visit_body(&while_stmt.body);
                    this.visit_body(&while_stmt.orelse);
                });
            }
            Stmt::Match(match_stmt) => {
                self.visit_expr(&match_stmt.subject);
                self.with_branch(false, |this| {
                    for case in &match_stmt.cases {
                        this.visit_match_case(case);
                    }
                });
            }
            Stmt::For(for_stmt) if self.current == 0 && self.capture.is_none() => {
                let line = self.line(for_stmt.start());
                self.capture = Some(StatementCapture::default());
                self.visit_expr(&for_stmt.iter);
                self.visit_expr(&for_stmt.target);
                let capture = self.capture.take().unwrap_or_default();
                self.bind_statement_targets(stmt, line, capture);
                self.with_branch(false, |this| {
                    this.visit_body(&for_stmt.body);
                    this.visit_body(&for_stmt.orelse);
                });
            }
            Stmt::With(with) if self.current == 0 && self.capture.is_none() => {
                let line = self.line(with.start());
                self.capture = Some(StatementCapture::default());
                for item in &with.items {
                    self.visit_with_item(item);
                }
                let capture = self.capture.take().unwrap_or_default();
                self.bind_statement_targets(stmt, line, capture);
                self.visit_body(&with.body);
            }
            Stmt::Assign(_)
            | Stmt::AnnAssign(_)
            | Stmt::AugAssign(_)
            | Stmt::TypeAlias(_)
            | Stmt::Expr(_)
                if self.current == 0 && self.capture.is_none() =>
            {
                let line = self.line(stmt.start());
                self.capture = Some(StatementCapture::default());
                source_order::walk_stmt(self, stmt);
                let capture = self.capture.take().unwrap_or_default();
                self.bind_statement_targets(stmt, line, capture);
            }
            _ => source_order::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(name) => match name.ctx {
                ast::ExprContext::Load => {
                    self.record_load(name.id.as_str());
                }
                ast::ExprContext::Store => {
                    self.record_bind(name.id.as_str());
                }
                _ => {}
            },
            Expr::Attribute(attribute) => match attribute_path(attribute) {
                Some((name, path)) => {
                    self.record_attribute_load(name, path);
                }
                None => source_order::walk_expr(self, expr),
            },
            Expr::Call(call) => {
                self.record_dynamic_import(call);
                if !self.record_callee(&call.func, None) {
                    self.visit_expr(&call.func);
                } else if self.current == 0 || self.in_top_level_function() {
                    self.record_literal_arguments(call);
                }
                self.visit_arguments(&call.arguments);
            }
            Expr::Lambda(_) => self.visit_scoped_expr(ScopeKind::Lambda, expr),
            Expr::ListComp(_) | Expr::SetComp(_) | Expr::DictComp(_) | Expr::Generator(_) => {
                self.visit_scoped_expr(ScopeKind::Comprehension, expr)
            }
            _ => source_order::walk_expr(self, expr),
        }
    }
}

fn sort_unique<T: Ord>(ids: &mut Vec<T>) {
    ids.sort_unstable();
    ids.dedup();
}

/// A use pair as one number that sorts as the pair does (by name, then path): one comparison
/// where the pair takes two.
fn use_key(&[name, path]: &[NameId; 2]) -> u64 {
    (u64::from(name) << 32) | u64::from(path)
}

/// Use pairs in no particular order, sorted and made unique.
fn sort_unique_uses(uses: &mut Vec<[NameId; 2]>) {
    uses.sort_unstable_by_key(use_key);
    uses.dedup();
}

/// Use pairs that are sorted runs end to end (a scope's reads and its children's), sorted and
/// made unique: the stable sort merges the runs it finds instead of sorting from scratch, and
/// equal keys being equal pairs, its order is the unstable sort's.
fn merge_unique_uses(uses: &mut Vec<[NameId; 2]>) {
    uses.sort_by_key(use_key);
    uses.dedup();
}

/// What [`Extractor::scope_uses`] finds, per scope.
struct ScopeUses {
    free: Vec<Vec<[NameId; 2]>>,
    definition: Vec<Vec<[NameId; 2]>>,
    /// (edge, name, path or [`BARE`]) triples.
    imports: Vec<Vec<[u32; 3]>>,
    engine_decorators: Vec<Vec<[NameId; 2]>>,
}

/// The `uses` (renumbered, sorted) that read a name one of `import_binds` (first-seen ids)
/// binds, once per binding edge: a name imported in two branches may come from either.
fn reads_through_imports(
    import_binds: &[(NameId, u32)],
    uses: &[[NameId; 2]],
    renumbered: &[NameId],
) -> Vec<[u32; 3]> {
    let mut out = Vec::new();
    for &(name, edge) in import_binds {
        let name = renumbered[name as usize];
        let first = uses.partition_point(|pair| pair[0] < name);
        for pair in uses[first..].iter().take_while(|pair| pair[0] == name) {
            out.push([edge, name, pair[1]]);
        }
    }
    sort_unique(&mut out);
    out
}

/// The order of `names` sorted, and for each first-seen id its id in that order.
fn name_order(names: &[Cow<'_, str>]) -> (Vec<NameId>, Vec<NameId>) {
    // Most names differ in their first eight bytes: compared as one number first, the text
    // itself is compared only on a tie.
    let mut keyed: Vec<(u64, &str, NameId)> = (0..names.len() as NameId)
        .map(|id| {
            let name = &*names[id as usize];
            (sort_prefix(name), name, id)
        })
        .collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    let order: Vec<NameId> = keyed.iter().map(|&(_, _, id)| id).collect();
    let mut renumbered = vec![0 as NameId; order.len()];
    for (new, &old) in order.iter().enumerate() {
        renumbered[old as usize] = new as NameId;
    }
    (order, renumbered)
}

/// The first eight bytes of `name`, big-endian and padded with zeros: names whose prefixes
/// differ sort as their prefixes do (a name shorter than eight bytes sorts before every longer
/// one it begins).
fn sort_prefix(name: &str) -> u64 {
    let mut prefix = [0u8; 8];
    let length = name.len().min(8);
    prefix[..length].copy_from_slice(&name.as_bytes()[..length]);
    u64::from_be_bytes(prefix)
}

fn sorted_ids(ids: &[NameId], renumbered: &[NameId]) -> Vec<NameId> {
    let mut sorted: Vec<NameId> = ids.iter().map(|&old| renumbered[old as usize]).collect();
    sort_unique(&mut sorted);
    sorted
}

/// Use pairs renumbered (a path may be [`BARE`]), sorted and unique.
fn sorted_uses(uses: &[[NameId; 2]], renumbered: &[NameId]) -> Vec<[NameId; 2]> {
    let renumber = |id: NameId| {
        if id == BARE {
            BARE
        } else {
            renumbered[id as usize]
        }
    };
    let mut sorted: Vec<[NameId; 2]> = uses
        .iter()
        .map(|&[name, path]| [renumbered[name as usize], renumber(path)])
        .collect();
    sort_unique_uses(&mut sorted);
    sorted
}

/// Module-level bindings renumbered and grouped by name (a name's statements keep their
/// source order), with the offset where each of the `names` names' group starts (and one past
/// the end).
fn group_bindings(
    mut bindings: Vec<(NameId, BindingBuild)>,
    renumbered: &[NameId],
    names: usize,
) -> (Vec<(NameId, BindingBuild)>, Vec<u32>) {
    for (name, binding) in &mut bindings {
        *name = renumbered[*name as usize];
        if let BindingBuild::Value { uses, .. } = binding {
            *uses = sorted_uses(uses, renumbered);
        }
    }
    // Stable: a name's bindings keep their source order.
    bindings.sort_by_key(|(id, _)| *id);
    let mut binding_offsets = Vec::with_capacity(names + 1);
    let mut next = 0;
    for name in 0..=names as NameId {
        while next < bindings.len() && bindings[next].0 < name {
            next += 1;
        }
        binding_offsets.push(next as u32);
    }
    (bindings, binding_offsets)
}

/// Bindings as stored, with their value lists end to end (reads `bound` keeps, then edges).
/// Flat and exactly sized: summaries of a whole site-packages stay in memory at once, and a
/// Vec per scope list or binding would cost more than its contents.
fn flatten_bindings(
    bindings: Vec<(NameId, BindingBuild)>,
    bound: &impl Fn(&&[NameId; 2]) -> bool,
) -> (Vec<Binding>, Vec<u32>) {
    let mut value_lists = Vec::new();
    let bindings: Vec<Binding> = bindings
        .into_iter()
        .map(|(_, binding)| match binding {
            BindingBuild::Import { edge } => Binding::Import { edge },
            BindingBuild::Definition { scope } => Binding::Definition { scope },
            BindingBuild::Value { line, uses, edges } => {
                let start = value_lists.len() as u32;
                value_lists.extend(uses.iter().filter(bound).flatten());
                let reads = (value_lists.len() as u32 - start) / 2;
                value_lists.extend_from_slice(&edges);
                Binding::Value {
                    line,
                    start,
                    reads,
                    edges: edges.len() as u32,
                }
            }
        })
        .collect();
    (bindings, value_lists)
}

/// `a.b.c` (read from a plain name) as `("a", "b.c")`; `None` when the chain starts at
/// anything else (a call, a subscript), whose parts are visited as usual.
fn attribute_path(attribute: &ast::ExprAttribute) -> Option<(&str, Cow<'_, str>)> {
    let step = attribute.attr.id.as_str();
    match &*attribute.value {
        // Most paths are one step (`np.zeros`): borrowed, nothing allocated.
        Expr::Name(name) => Some((name.id.as_str(), Cow::Borrowed(step))),
        Expr::Attribute(inner) => {
            let (name, inner_path) = attribute_path(inner)?;
            let mut path = inner_path.into_owned();
            path.push('.');
            path.push_str(step);
            Some((name, Cow::Owned(path)))
        }
        _ => None,
    }
}

fn catches_import_error(expr: &Expr) -> bool {
    match expr {
        Expr::Name(name) => IMPORT_GUARDS.contains(&name.id.as_str()),
        Expr::Attribute(attribute) => IMPORT_GUARDS.contains(&attribute.attr.id.as_str()),
        Expr::Tuple(tuple) => tuple.elts.iter().any(catches_import_error),
        _ => false,
    }
}

fn collect_target_names<'a>(target: &'a Expr, out: &mut Vec<&'a str>) {
    match target {
        Expr::Name(name) => out.push(name.id.as_str()),
        Expr::Tuple(tuple) => tuple.elts.iter().for_each(|e| collect_target_names(e, out)),
        Expr::List(list) => list.elts.iter().for_each(|e| collect_target_names(e, out)),
        Expr::Starred(starred) => collect_target_names(&starred.value, out),
        _ => {}
    }
}

fn capture_named_targets(stmt: &Stmt) -> Vec<&str> {
    struct Walrus<'b>(Vec<&'b str>);
    impl<'b> SourceOrderVisitor<'b> for Walrus<'b> {
        fn visit_expr(&mut self, expr: &'b Expr) {
            if let Expr::Named(named) = expr {
                collect_target_names(&named.target, &mut self.0);
            }
            source_order::walk_expr(self, expr);
        }
    }
    let mut walrus = Walrus(Vec::new());
    walrus.visit_stmt(stmt);
    walrus.0
}

/// Names of packages' own import helpers ([`Extractor::is_import_helper`]).
const IMPORT_HELPERS: [&str; 2] = ["import_module", "import_optional_dependency"];

/// A call that asks whether a module is installed without importing it
/// (`importlib.util.find_spec("torch")`, `pkgutil.find_loader("numba")`): the code then behaves
/// as the answer says (transformers exports its torch classes, blosc2 its numba kernels), so
/// what it looks up is read as an optional import (a dotted name's parents are imported).
/// Known by its name, as helpers are.
fn is_module_lookup(callee: &Expr) -> bool {
    matches!(called_name(callee), Some("find_spec" | "find_loader"))
}

/// The name a call reads last: `f` of `f(...)` and of `a.b.f(...)`.
fn called_name(callee: &Expr) -> Option<&str> {
    match callee {
        Expr::Name(name) => Some(name.id.as_str()),
        Expr::Attribute(attribute) => Some(attribute.attr.id.as_str()),
        _ => None,
    }
}

pub(crate) fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// The literal names of an import helper's `import_kwargs={'fromlist': [...]}` (what it passes
/// on to `__import__`, which imports each as a submodule when there is one).
fn helper_fromlist(call: &ast::ExprCall) -> impl Iterator<Item = &str> {
    let kwargs = call
        .arguments
        .find_keyword("import_kwargs")
        .map(|k| &k.value);
    let fromlist = match kwargs {
        Some(Expr::Dict(dict)) => dict.items.iter().find_map(|item| match &item.key {
            Some(Expr::StringLiteral(key)) if key.value.to_str() == "fromlist" => Some(&item.value),
            _ => None,
        }),
        _ => None,
    };
    let names: &[Expr] = match fromlist {
        Some(Expr::List(list)) => &list.elts,
        Some(Expr::Tuple(tuple)) => &tuple.elts,
        _ => &[],
    };
    names.iter().filter_map(|name| match name {
        Expr::StringLiteral(literal) => Some(literal.value.to_str()),
        _ => None,
    })
}

/// `importlib.import_module(".b", "pkg.a")` with level 1 -> `pkg.a.b`.
pub(crate) fn join_relative(package: &str, level: u32, module: &str) -> String {
    let mut parts: Vec<&str> = package.split('.').filter(|p| !p.is_empty()).collect();
    for _ in 1..level {
        parts.pop();
    }
    if !module.is_empty() {
        parts.push(module);
    }
    parts.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_table_finds_every_name_and_nothing_else() {
        let names = ["*", "Model", "_x", "a", "ab", "b", "ébé"];
        let table = NameTable::from_sorted(names);
        assert_eq!(table.len(), names.len());
        for (id, name) in names.iter().enumerate() {
            assert_eq!(table.get(id as NameId), *name);
            assert_eq!(table.find(name), Some(id as NameId));
        }
        for absent in ["", "A", "aa", "c", "é"] {
            assert_eq!(table.find(absent), None, "{absent:?}");
        }
        assert_eq!(NameTable::default().find("a"), None);
    }

    #[test]
    fn lines_are_counted_as_a_line_index_does_in_any_order() {
        // With every kind of line end, and with `\n` only (the counter's fast path).
        // And one whose ranges span many 255-byte counting chunks, all line ends or none.
        let long = format!(
            "{}{}{}",
            "\n".repeat(700),
            "x".repeat(600),
            "y\n".repeat(400)
        );
        for source in [
            "a\nb\r\nc\rd\n\n\r\n\re\r\nlast",
            "a\nbc\n\n\nd\ne\n",
            long.as_str(),
        ] {
            let index = ruff_source_file::LineIndex::from_source_text(source);
            let end = TextSize::try_from(source.len()).unwrap();
            assert_eq!(
                LineCounter::new(source).line_at(end),
                index.line_index(end).get() as u32,
                "one jump to the end of {} bytes",
                source.len()
            );
            let mut counter = LineCounter::new(source);
            // Every offset not between a \r and its \n: forwards, backwards and jumping.
            let offsets: Vec<usize> = (0..=source.len())
                .filter(|&at| {
                    !(at > 0 && &source[at - 1..at] == "\r" && source[at..].starts_with('\n'))
                })
                .collect();
            let jumping: Vec<usize> = offsets
                .iter()
                .step_by(3)
                .chain(offsets.iter().rev().step_by(2))
                .copied()
                .collect();
            for &at in offsets.iter().chain(offsets.iter().rev()).chain(&jumping) {
                let offset = TextSize::try_from(at).unwrap();
                assert_eq!(
                    counter.line_at(offset),
                    index.line_index(offset).get() as u32,
                    "offset {at} of {source:?}"
                );
            }
        }
    }

    /// Issue 53: sympy imports matplotlib, numpy and scipy through its own
    /// `sympy.external.import_module`, which returns None where they are not installed, and
    /// pandas bottleneck and pytz through `import_optional_dependency`.
    #[test]
    fn a_package_s_own_import_module_helper_imports_optionally() {
        let summary = summarize(
            "from sympy.external import import_module\nfrom sympy import external\nimport importlib\nfrom pandas.compat._optional import import_optional_dependency\n\nmpl = import_module('matplotlib', import_kwargs={'fromlist': ['pyplot']}, catch=(RuntimeError,))\nnp = external.import_module(module='numpy')\nx = import_module(name_of_it)\ny = importlib.import_module('json')\nbn = import_optional_dependency('bottleneck', errors='warn')\n",
        );
        let edges: Vec<(String, bool, bool)> = (summary.imports.iter())
            .filter(|edge| edge.context.dynamic)
            .map(|edge| {
                let module = summary.edge_module(edge).to_string();
                (module, edge.context.optional, edge.level == 0)
            })
            .collect();
        assert_eq!(
            edges,
            [
                ("matplotlib".to_string(), true, true),
                ("matplotlib.pyplot".to_string(), true, true),
                ("numpy".to_string(), true, true),
                ("json".to_string(), false, true),
                ("bottleneck".to_string(), true, true),
            ]
        );
        // A helper may be given anything: a computed name is no problem of the module's.
        assert!(summary.problems.is_empty(), "{:?}", summary.problems);
    }

    /// Issue 53: transformers decides what it exports by asking `importlib.util.find_spec`
    /// whether torch is installed; blosc2 asks for numba the same way.
    #[test]
    fn a_module_lookup_is_an_optional_import() {
        let summary = summarize(
            "import importlib.util\nimport pkgutil\nfrom importlib.util import find_spec\n\nHAS_NUMBA = importlib.util.find_spec('numba') is not None\nHAS_TORCH = find_spec('torch.cuda')\nOLD = pkgutil.find_loader('cupy')\n\ndef available(name):\n    return find_spec(name) is not None\n",
        );
        let edges: Vec<(String, bool)> = (summary.imports.iter())
            .filter(|edge| edge.context.dynamic)
            .map(|edge| (summary.edge_module(edge).to_string(), edge.context.optional))
            .collect();
        assert_eq!(
            edges,
            [
                ("numba".to_string(), true),
                ("torch.cuda".to_string(), true),
                ("cupy".to_string(), true),
            ]
        );
        assert!(summary.problems.is_empty(), "{:?}", summary.problems);
        // `available` looks up its parameter: a literal passed to it is looked up.
        assert_eq!(summary.parameter_imports.len(), 1);
        assert_eq!(summary.parameter_imports[0].position, 0);
    }

    /// Calls with literals are kept at module level and in a top-level def's own body, where
    /// the callee is bound at module level (not a builtin, not a method's or nested def's).
    #[test]
    fn literal_calls_are_kept_at_module_level_and_in_top_level_defs() {
        let summary = summarize(
            "from checks import probe\nA = probe('alpha')\ndef f():\n    getattr(f, 'name')\n    return probe('beta')\nclass C:\n    def m(self):\n        return probe('gamma')\ndef g():\n    def inner():\n        return probe('delta')\n",
        );
        let kept: Vec<(&str, String)> = (summary.literal_calls.iter())
            .map(|call| {
                (
                    call.text.as_str(),
                    summary.scope_name(call.scope).to_string(),
                )
            })
            .collect();
        assert_eq!(kept, [("alpha", String::new()), ("beta", "f".to_string())]);
    }

    #[test]
    fn reads_through_an_in_function_import_are_kept_where_the_import_binds() {
        let summary = summarize(
            "def f():\n    import pkg.helpers as h\n    from pkg import plot\n    def inner(plot):\n        return h.plot(1), plot\n    return [h.x for _ in ()]\nclass C:\n    from pkg import slug\n    S = slug\n    def m(self):\n        return slug\n",
        );
        let described = |scope: u32| -> Vec<String> {
            summary
                .import_uses(scope)
                .map(|used| {
                    let edge = &summary.imports[used.edge as usize];
                    let path = used.path.map_or("", |p| summary.name(p));
                    format!(
                        "{}:{}.{path}",
                        summary.edge_module(edge),
                        summary.name(used.name)
                    )
                })
                .collect()
        };
        let scope = |name: &str| {
            (0..summary.scopes.len() as u32)
                .find(|&id| summary.scope_name(id) == name)
                .unwrap()
        };
        // f's imports bind `h` and `plot`: read in inner (plot is inner's own parameter there)
        // and in the comprehension, and kept on f, where the imports are.
        assert_eq!(
            described(scope("f")),
            ["pkg.helpers:h.plot", "pkg.helpers:h.x"]
        );
        assert!(described(scope("f.inner")).is_empty());
        // A class body's import is read by the body itself, not by its methods.
        assert_eq!(described(scope("C")), ["pkg:slug."]);
        assert!(described(0).is_empty());
    }

    #[test]
    fn scope_names_and_lists_are_read_back_per_scope() {
        let summary = summarize(
            "import os\nSEP = os.sep\nclass Model(Base):\n    def fit(self):\n        import numpy\n        return [SEP for _ in range(3)]\n",
        );
        let names: Vec<&str> = (0..summary.scopes.len() as u32)
            .map(|id| summary.scope_name(id))
            .collect();
        assert_eq!(
            names,
            ["", "Model", "Model.fit", "Model.fit.<comprehension>"]
        );
        let named = |uses: Vec<Use>| -> Vec<String> {
            uses.iter()
                .map(|u| match u.path {
                    Some(path) => format!("{}.{}", summary.name(u.name), summary.name(path)),
                    None => summary.name(u.name).to_string(),
                })
                .collect()
        };
        assert_eq!(summary.children(0), [1]);
        assert_eq!(summary.children(1), [2]);
        assert_eq!(summary.children(2), [3]);
        // `range` and `Base` are bound nowhere in the module: dropped; `self` is fit's own.
        assert_eq!(named(summary.free_uses(2).collect()), ["SEP"]);
        assert_eq!(named(summary.free_uses(3).collect()), ["SEP"]);
        assert!(summary.definition_uses(1).next().is_none());
        // The module's own statements read `os.sep` (an attribute path of `os`).
        assert_eq!(named(summary.definition_uses(0).collect()), ["os.sep"]);
        let numpy = summary.scope_imports(2);
        assert_eq!(numpy.len(), 1);
        let edge = &summary.imports[numpy[0] as usize];
        assert_eq!(summary.edge_module(edge), "numpy");
        assert_eq!(summary.edge_member(edge), None);
        assert_eq!(summary.scope_imports(0).len(), 1);
        let sep = summary
            .bindings_of(summary.name_id("SEP").unwrap())
            .unwrap();
        assert_eq!(named(summary.value_uses(&sep[0]).collect()), ["os.sep"]);
        assert!(summary.value_edges(&sep[0]).is_empty());
    }

    #[test]
    fn each_use_has_a_slot_of_its_own_and_the_same_reads_as_without_slots() {
        let source = "import os, parsl\nSEP = os.sep + os.name\nX = SEP\n\
            @parsl.python_app\n@deco(os.sep)\ndef fit(n):\n    return os.path.join(SEP, X)\n\
            class Model(Base):\n    sep = os.sep\n    def f(self):\n        return [os.sep for _ in X]\n";
        let summary = summarize(source);
        let mut slots = Vec::new();
        for scope in 0..summary.scopes.len() as u32 {
            let pairs = [
                (
                    summary.free_uses_at(scope).collect::<Vec<_>>(),
                    summary.free_uses(scope).collect::<Vec<_>>(),
                ),
                (
                    summary.definition_uses_at(scope).collect(),
                    summary.definition_uses(scope).collect(),
                ),
                (
                    summary.engine_decorators_at(scope).collect(),
                    summary.engine_decorators(scope).collect(),
                ),
            ];
            for (with_slots, plain) in pairs {
                assert_eq!(
                    with_slots.iter().map(|(_, read)| *read).collect::<Vec<_>>(),
                    plain
                );
                slots.extend(with_slots.iter().map(|(slot, _)| *slot));
            }
        }
        for binding in &summary.bindings {
            let with_slots: Vec<_> = summary.value_uses_at(binding).collect();
            let plain: Vec<_> = summary.value_uses(binding).collect();
            assert_eq!(
                with_slots.iter().map(|(_, read)| *read).collect::<Vec<_>>(),
                plain
            );
            slots.extend(with_slots.iter().map(|(slot, _)| *slot));
        }
        assert!(slots.len() > 8);
        // Distinct, below the count, and distinct when halved (callers index by half a slot).
        assert!(slots
            .iter()
            .all(|&slot| (slot as usize) < summary.use_slots()));
        let mut halves: Vec<u32> = slots.iter().map(|slot| slot / 2).collect();
        halves.sort_unstable();
        halves.dedup();
        assert_eq!(halves.len(), slots.len());
    }

    #[test]
    fn an_engine_decorator_is_kept_apart_from_its_defs_reads_and_other_decorators_are_not() {
        let source = "import parsl\nimport functools\nfrom dask import delayed\n\n\
            @parsl.python_app(executors=EXECUTORS)\n@functools.cache\ndef fit(n):\n    return n\n\n\
            parsl.load(None)\nEXECUTORS = ['htex']\nwrapped = delayed(fit)\nalso = delayed\n";
        let summary = summarize(source);
        let named = |uses: Vec<Use>| -> Vec<String> {
            uses.iter()
                .map(|u| match u.path {
                    Some(path) => format!("{}.{}", summary.name(u.name), summary.name(path)),
                    None => summary.name(u.name).to_string(),
                })
                .collect()
        };
        let fit = 1;
        assert_eq!(
            named(summary.engine_decorators(fit).collect()),
            ["parsl.python_app"]
        );
        // A decorator of no engine package, and the engine decorator's arguments, are the
        // def's own header reads; the module still reads every decorator when the def runs.
        assert_eq!(
            named(summary.definition_uses(fit).collect()),
            ["EXECUTORS", "functools.cache"]
        );
        assert!(named(summary.definition_uses(0).collect()).contains(&"parsl.python_app".into()));
        // `parsl` is read only as something called; `delayed` is also read as a value.
        let callees: Vec<(String, Option<u32>)> = summary
            .engine_callees()
            .map(|callee| (named(vec![callee.read]).remove(0), callee.decorates))
            .collect();
        assert_eq!(
            callees,
            [
                ("parsl.python_app".to_string(), Some(fit)),
                ("parsl.load".to_string(), None)
            ]
        );
    }
}
