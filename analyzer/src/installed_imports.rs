//! What installed code imports when it is imported, beyond what its distribution declares.
//!
//! A closure keeps installed modules as leaves and trusts Requires-Dist for what they need. But
//! installed code also imports what it finds installed (`try: import pandas` in scikit-learn,
//! numpy in joblib): Python runs those imports because the distribution is there, and a pack
//! without it behaves otherwise. This module follows the import-time edges of installed modules
//! (module level and class bodies, and the bodies of the functions the module level calls; not
//! `TYPE_CHECKING` but where a module `__getattr__` serves those names) through installed code,
//! and says for each installed module which distributions importing it reaches, and which of
//! them through imports that cannot fail over to doing without (not inside `try`, not under a
//! condition).
//!
//! A distribution's edges come from parsing its Python files once (or from the summaries the
//! run already made of them), and are kept between runs ([`DIR`], one file a distribution)
//! while none of its files changed.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};

use crate::dists::DistIndex;
use crate::extract::{is_identifier, join_relative, ModuleSummary};
use crate::kept_files::{
    executable_hasher, read_stamped_with_stamps, settled, store_stamped, Stamp, Stamped,
};

/// The cache's directory under lfm's cache directory, and how many distributions it keeps.
pub const DIR: &str = "analyze-installed-imports";
const KEPT: usize = 256;

/// One import-time import of an installed module, its target made absolute.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct RawEdge {
    module: String,
    member: Option<String>,
    line: u32,
    /// Inside `try` or under a condition: the module can import without it.
    optional: bool,
    /// A call, at import time, of function `member` of `module`: what its body imports runs
    /// too (see [`FUNCTION`]).
    #[serde(default)]
    call: bool,
}

/// Joins a module's name and one of its top-level functions in the name of the function's
/// node (`torch.utils._import_utils:import_dill`): its edges are the imports its body runs.
const FUNCTION: char = ':';
/// Joins a module's name and a name its PEP 562 `__getattr__` serves in the name of that
/// name's node (`huggingface_hub;HfApi`): its edges are the imports `TYPE_CHECKING` names
/// for it (see [`lazy_names`]).
const LAZY: char = ';';
/// Joins a function's node name and a positional parameter it imports
/// (`lightning_utilities.core.imports:compare_version#0`): that entry's one edge, its module
/// left empty, is the import call. A call passing a literal there gets a node of its own,
/// `...#0=torchmetrics`, whose edge imports the literal (see [`parameter_edges`]).
const PARAMETER: char = '#';

/// Whether node `name` is a function's or a lazily served name's (no module of its own).
fn is_member_node(name: &str) -> bool {
    name.contains([FUNCTION, LAZY])
}

/// A distribution's modules, each with its import-time edges.
type DistEdges = HashMap<String, Vec<RawEdge>>;

#[derive(Debug, Clone, Copy)]
struct Edge {
    to: u32,
    line: u32,
    optional: bool,
}

struct Node {
    name: String,
    dist: u32,
    path: PathBuf,
}

/// Where installed modules are and how to read them.
pub struct Sources<'a> {
    pub dists: &'a DistIndex,
    pub site_dirs: &'a [PathBuf],
    pub extension_suffixes: &'a [String],
    /// The summary this run already made of a file, if any.
    pub loaded: &'a (dyn Fn(&Path) -> Option<Arc<ModuleSummary>> + Sync),
    /// Where distributions' edges are kept between runs (None: not kept).
    pub cache_dir: Option<&'a Path>,
}

/// The installed modules reached from a set of roots, and what importing each reaches.
#[derive(Default)]
pub struct InstalledImports {
    nodes: Vec<Node>,
    by_name: HashMap<String, u32>,
    edges: Vec<Vec<Edge>>,
    /// u64 words per distribution set.
    words: usize,
    /// Per node, `words` words: every distribution importing it reaches (its own included).
    any: Vec<u64>,
    /// The same through edges that must succeed only.
    required: Vec<u64>,
    /// [`undeclared`]'s findings by its question ([`InstalledImports::question`]): the
    /// functions of one module ask the same one.
    found: std::sync::Mutex<HashMap<Vec<u64>, Arc<[Found]>>>,
    /// By (node, distribution): the first import of that distribution's modules met walking
    /// breadth first from the node alone ([`FirstImport`]). Questions rarely repeat (each
    /// target starts from its own nodes); their nodes do.
    first_imports: std::sync::Mutex<HashMap<(u32, u32), Option<FirstImport>>>,
    /// The Python files of every distribution whose edges were read, stamped before they were
    /// (where edges are kept between runs): what a stored result built on them must check.
    stamps: Vec<Stamped>,
}

/// Undeclared distributions of one kind (required or optional) for one question: the roots
/// and, for each, the import that brings it (its importing node and line).
struct Found {
    roots: Vec<u32>,
    optional: bool,
    by: Vec<(u32, (u32, u32))>,
}

/// An import of a distribution's module, found walking breadth first from one node: how many
/// imports from that node to the importing one, the importing node, and the line.
#[derive(Clone, Copy)]
struct FirstImport {
    distance: u32,
    node: u32,
    line: u32,
}

/// A set of distributions, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistSet(Vec<u64>);

impl DistSet {
    pub fn contains(&self, id: u32) -> bool {
        let word = id as usize / 64;
        self.0.get(word).is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(at, &word)| {
            (0..64u32)
                .filter(move |bit| word & (1 << bit) != 0)
                .map(move |bit| at as u32 * 64 + bit)
        })
    }

    fn union(&mut self, other: &[u64]) {
        self.0.iter_mut().zip(other).for_each(|(a, b)| *a |= b);
    }
}

impl InstalledImports {
    /// Follow the import-time imports of the installed modules `roots` (dotted names).
    pub fn build(sources: &Sources, roots: impl IntoIterator<Item = String>) -> InstalledImports {
        let mut builder = Builder {
            sources,
            per_dist: HashMap::default(),
            files: None,
            distutils_shim: has_distutils_shim(sources),
            graph: InstalledImports {
                words: sources.dists.dists.len().div_ceil(64),
                ..InstalledImports::default()
            },
            absent: Default::default(),
            functions: HashMap::default(),
        };
        let mut queue = VecDeque::new();
        for root in roots {
            builder.node(&root, &mut queue);
        }
        // On a pool thread, this one waiting for the pool's reads could leave it none.
        if sources.cache_dir.is_none() && rayon::current_thread_index().is_none() {
            builder.follow_reading_ahead(queue);
            queue = VecDeque::new();
        }
        while !queue.is_empty() {
            let wave: Vec<u32> = queue.drain(..).collect();
            let raw = builder.raw_edges(&wave);
            for (id, raw) in wave.into_iter().zip(raw) {
                let edges = builder.edges_of(id, raw, &mut queue);
                builder.graph.edges[id as usize] = edges;
            }
        }
        let mut graph = builder.graph;
        let dists: Vec<u32> = graph.nodes.iter().map(|n| n.dist).collect();
        graph.any = reach_sets(&dists, graph.words, &graph.edges, |_| true);
        graph.required = reach_sets(&dists, graph.words, &graph.edges, |e| !e.optional);
        graph
    }

    /// The nodes of `modules` (name, whether a required edge reached it) and the
    /// distributions importing them reaches: (nodes, all of them, those through imports that
    /// must succeed from a required module). Unknown names reach nothing.
    pub fn reached<'a>(
        &self,
        modules: impl IntoIterator<Item = (&'a str, bool)>,
    ) -> (Vec<(u32, bool)>, DistSet, DistSet) {
        let mut any = DistSet(vec![0; self.words]);
        let mut required = DistSet(vec![0; self.words]);
        let mut nodes = Vec::new();
        for (name, is_required) in modules {
            let Some(&node) = self.by_name.get(name) else {
                continue;
            };
            nodes.push((node, is_required));
            any.union(self.set(&self.any, node));
            if is_required {
                required.union(self.set(&self.required, node));
            }
        }
        (nodes, any, required)
    }

    /// For each of `dists`, the first import statement (breadth first from the nodes `start`)
    /// of a module of another distribution that brings it in: the importing node and the line.
    ///
    /// A walk from several nodes meets first what is fewest imports away from any of them,
    /// and among equals, what the earliest of them leads to: the answer is the nearest of
    /// the nodes' own answers, the earliest node's among equals.
    fn imported_by(&self, start: &[u32], dists: &[u32]) -> Vec<Option<(u32, u32)>> {
        (dists.iter())
            .map(|&dist| {
                let mut nearest: Option<FirstImport> = None;
                for &node in start {
                    let Some(found) = self.first_import(node, dist) else {
                        continue;
                    };
                    if nearest.is_none_or(|nearest| found.distance < nearest.distance) {
                        nearest = Some(found);
                    }
                }
                nearest.map(|found| (found.node, found.line))
            })
            .collect()
    }

    /// [`InstalledImports::first_imports`] of (`start`, `dist`), walked on first use.
    fn first_import(&self, start: u32, dist: u32) -> Option<FirstImport> {
        let known = self
            .first_imports
            .lock()
            .ok()
            .and_then(|known| known.get(&(start, dist)).copied());
        if let Some(known) = known {
            return known;
        }
        let found = self.walk_to_first_import(start, dist);
        if let Ok(mut known) = self.first_imports.lock() {
            known.insert((start, dist), found);
        }
        found
    }

    fn walk_to_first_import(&self, start: u32, dist: u32) -> Option<FirstImport> {
        let reaches =
            |node: u32| self.set(&self.any, node)[dist as usize / 64] & (1 << (dist % 64)) != 0;
        if !reaches(start) {
            return None;
        }
        let mut seen = vec![false; self.nodes.len()];
        seen[start as usize] = true;
        let mut queue: VecDeque<(u32, u32)> = VecDeque::from([(start, 0)]);
        while let Some((node, distance)) = queue.pop_front() {
            for edge in &self.edges[node as usize] {
                if self.nodes[edge.to as usize].dist == dist {
                    let line = edge.line;
                    return Some(FirstImport {
                        distance,
                        node,
                        line,
                    });
                }
                if reaches(edge.to) && !std::mem::replace(&mut seen[edge.to as usize], true) {
                    queue.push_back((edge.to, distance + 1));
                }
            }
        }
        None
    }

    /// The file of every installed module importing `modules` reaches: what
    /// [`InstalledImports::reached`] and [`InstalledImports::imported_by`] say of them was
    /// read from (each module's edges come from its own file).
    pub fn files_followed<'a>(&self, modules: impl IntoIterator<Item = &'a str>) -> Vec<PathBuf> {
        let mut seen = vec![false; self.nodes.len()];
        let mut queue: VecDeque<u32> = (modules.into_iter())
            .filter_map(|name| self.by_name.get(name).copied())
            .collect();
        let mut files = Vec::new();
        while let Some(node) = queue.pop_front() {
            if std::mem::replace(&mut seen[node as usize], true) {
                continue;
            }
            files.push(self.nodes[node as usize].path.clone());
            queue.extend(self.edges[node as usize].iter().map(|edge| edge.to));
        }
        files
    }

    fn set<'s>(&self, sets: &'s [u64], node: u32) -> &'s [u64] {
        &sets[node as usize * self.words..(node as usize + 1) * self.words]
    }

    /// See [`InstalledImports::stamps`] (the field).
    pub fn stamps(&self) -> &[Stamped] {
        &self.stamps
    }

    /// The names of the installed modules whose import reaches a module whose file is
    /// `changed`: what closures say of them may differ from a run before the change.
    pub fn reaching_changed(&self, changed: impl Fn(&Path) -> bool) -> Vec<&str> {
        let mut importers: Vec<Vec<u32>> = vec![Vec::new(); self.nodes.len()];
        for (from, edges) in self.edges.iter().enumerate() {
            edges
                .iter()
                .for_each(|edge| importers[edge.to as usize].push(from as u32));
        }
        let mut reaching: Vec<bool> = self.nodes.iter().map(|n| changed(&n.path)).collect();
        let mut queue: Vec<u32> = (0..self.nodes.len() as u32)
            .filter(|&node| reaching[node as usize])
            .collect();
        while let Some(node) = queue.pop() {
            for &importer in &importers[node as usize] {
                if !std::mem::replace(&mut reaching[importer as usize], true) {
                    queue.push(importer);
                }
            }
        }
        (self.nodes.iter().zip(reaching))
            .filter(|(_, reaching)| *reaching)
            .map(|(node, _)| node.name.as_str())
            .collect()
    }

    /// Installed modules followed.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

struct Builder<'s, 'a> {
    sources: &'s Sources<'a>,
    per_dist: HashMap<u32, DistEdges>,
    /// Each distribution's installed files, listed at the first distribution read.
    files: Option<Vec<Vec<&'s std::ffi::OsStr>>>,
    graph: InstalledImports,
    /// setuptools' `distutils-precedence.pth` is installed: see [`shim_distutils`].
    distutils_shim: bool,
    /// Names that are no installed module (stdlib, not installed, namespace directories).
    absent: rustc_hash::FxHashSet<String>,
    /// Without kept edges: the edges of the functions of the modules read so far that import
    /// anything, by function node name, taken when such a node is made's turn comes (its
    /// module's node is always older: the call's edge made it first).
    functions: HashMap<String, Vec<RawEdge>>,
}

impl Builder<'_, '_> {
    /// The node of installed module `name`, made (and queued) at its first mention.
    fn node(&mut self, name: &str, queue: &mut VecDeque<u32>) -> Option<u32> {
        if let Some(&id) = self.graph.by_name.get(name) {
            return Some(id);
        }
        if self.absent.contains(name) {
            return None;
        }
        let module = name
            .split_once([FUNCTION, LAZY])
            .map_or(name, |(module, _)| module);
        let Some((dist, path)) = self.locate(module) else {
            self.absent.insert(name.to_string());
            return None;
        };
        let id = self.graph.nodes.len() as u32;
        self.graph.nodes.push(Node {
            name: name.to_string(),
            dist,
            path,
        });
        self.graph.edges.push(Vec::new());
        self.graph.by_name.insert(name.to_string(), id);
        queue.push_back(id);
        Some(id)
    }

    /// The installed file of module `name` and its distribution, from the distributions'
    /// file lists alone (no file-system lookups).
    fn locate(&self, name: &str) -> Option<(u32, PathBuf)> {
        let relative = relative_path(name);
        // Most names are no installed module (the standard library's): a candidate is built
        // in one buffer, and made a path of its own only once it is found.
        let mut file = std::ffi::OsString::new();
        for site in self.sources.site_dirs {
            let base = site.join(&relative);
            if !self.sources.dists.may_install_under(&base) {
                continue;
            }
            // As `Path::join` puts it.
            let separator = match base.as_os_str().as_encoded_bytes().ends_with(b"/") {
                true => "",
                false => "/",
            };
            if let Some(found) =
                self.installer_of_joined(&mut file, &base, &[separator, "__init__.py"])
            {
                return Some(found);
            }
            let py = base.with_extension("py");
            if let Some(dist) = self.sources.dists.installer_of(&py) {
                return Some((dist, py));
            }
            for suffix in self.sources.extension_suffixes {
                if let Some(found) = self.installer_of_joined(&mut file, &base, &[suffix]) {
                    return Some(found);
                }
            }
        }
        None
    }

    /// The installer of the file `base` followed by `ending` (built in `file`), and the file.
    fn installer_of_joined(
        &self,
        file: &mut std::ffi::OsString,
        base: &Path,
        ending: &[&str],
    ) -> Option<(u32, PathBuf)> {
        file.clear();
        file.push(base);
        ending.iter().for_each(|part| file.push(part));
        let dist = self.sources.dists.installer_of(Path::new(file))?;
        Some((dist, PathBuf::from(file.clone())))
    }

    /// Node `id`'s edges: its parent package (importing `a.b` runs `a` first), then its own
    /// import-time imports, each to the longest prefix that is an installed module, and to
    /// `module.member` too where that is one.
    fn edges_of(&mut self, id: u32, raw: Vec<RawEdge>, queue: &mut VecDeque<u32>) -> Vec<Edge> {
        let name = self.graph.nodes[id as usize].name.clone();
        let mut edges = Vec::new();
        // A function's module is imported by whoever calls it: its node has no parent.
        let parent = (!is_member_node(&name))
            .then(|| name.rsplit_once('.'))
            .flatten();
        if let Some((parent, _)) = parent {
            if let Some(to) = self.longest_installed(parent, queue) {
                edges.push(Edge {
                    to,
                    line: 0,
                    optional: false,
                });
            }
        }
        let mut dotted = String::new();
        for mut edge in raw {
            if self.distutils_shim {
                shim_distutils(&mut edge);
            }
            let member = edge.member.as_ref().filter(|m| *m != "*");
            let whole = member.and_then(|m| {
                dotted.clear();
                dotted.extend([edge.module.as_str(), ".", m]);
                self.node(&dotted, queue)
            });
            let target = whole.or_else(|| self.longest_installed(&edge.module, queue));
            if let Some(to) = target {
                edges.push(Edge {
                    to,
                    line: edge.line,
                    optional: edge.optional,
                });
            }
            let joint = if edge.call { FUNCTION } else { LAZY };
            let called = match (&edge.member, whole.is_none()) {
                (Some(member), true) if member != "*" => {
                    self.member_node(target, &edge.module, joint, member, queue)
                }
                _ => None,
            };
            if let Some(to) = called {
                edges.push(Edge {
                    to,
                    line: edge.line,
                    optional: true,
                });
            }
        }
        edges
    }

    /// The node of `member` of installed module `module` (a function called, `joint`
    /// [`FUNCTION`], or a name imported from it, [`LAZY`]), where `target` (the node the
    /// edge reached) is that module itself. Its edges are empty unless the function imports
    /// anything, or the module serves the name lazily.
    fn member_node(
        &mut self,
        target: Option<u32>,
        module: &str,
        joint: char,
        member: &str,
        queue: &mut VecDeque<u32>,
    ) -> Option<u32> {
        let target = target?;
        if self.graph.nodes[target as usize].name != module {
            return None;
        }
        self.node(&format!("{module}{joint}{member}"), queue)
    }

    fn longest_installed(&mut self, name: &str, queue: &mut VecDeque<u32>) -> Option<u32> {
        let mut name = name;
        loop {
            if let Some(id) = self.node(name, queue) {
                return Some(id);
            }
            name = name.rsplit_once('.')?.0;
        }
    }

    /// The import-time edges of the nodes `wave`. Where distributions' edges are kept, from
    /// their whole distribution's (read or made once); otherwise each node's file is read
    /// alone (in parallel): a distribution's tests and unreached modules are never parsed.
    fn raw_edges(&mut self, wave: &[u32]) -> Vec<Vec<RawEdge>> {
        if self.sources.cache_dir.is_some() {
            self.load_dists(wave);
            let (nodes, per_dist) = (&self.graph.nodes, &mut self.per_dist);
            // A node is in one wave only: its edges are taken, not copied.
            return (wave.iter())
                .map(|&id| {
                    let node = &nodes[id as usize];
                    if let Some(edges) = parameter_edges(&node.name, per_dist.get(&node.dist)) {
                        return edges;
                    }
                    let dist = per_dist.get_mut(&node.dist);
                    let edges = dist.and_then(|edges| edges.get_mut(&node.name));
                    edges.map(std::mem::take).unwrap_or_default()
                })
                .collect();
        }
        let (nodes, sources) = (&self.graph.nodes, self.sources);
        let read: Vec<Vec<(String, Vec<RawEdge>)>> = wave
            .par_iter()
            .map(|&id| node_edges(sources, &nodes[id as usize]))
            .collect();
        let mut own: Vec<Vec<RawEdge>> = read.into_iter().map(|e| self.keep_functions(e)).collect();
        // A function's module may be in this very wave: its entries are kept by now.
        for (&id, edges) in wave.iter().zip(own.iter_mut()) {
            let name = &self.graph.nodes[id as usize].name;
            if is_member_node(name) {
                *edges = parameter_edges(name, Some(&self.functions))
                    .or_else(|| self.functions.remove(name))
                    .unwrap_or_default();
            }
        }
        own
    }

    /// A module's entries ([`module_entries`]): its functions' kept, its own returned.
    fn keep_functions(&mut self, entries: Vec<(String, Vec<RawEdge>)>) -> Vec<RawEdge> {
        let mut entries = entries.into_iter();
        let own = entries.next().map(|(_, edges)| edges).unwrap_or_default();
        self.functions.extend(entries);
        own
    }

    /// What the waves of [`InstalledImports::build`] do without kept edges, without waiting
    /// at the end of each wave for its largest file: each node's file is read on the pool as
    /// soon as the node is made, while this thread takes the nodes' edges in the order they
    /// were made (the waves' order: the same graph). A wave of 197 modules took 176 ms of
    /// following pandas' imports, most of it on one thread.
    fn follow_reading_ahead(&mut self, mut queue: VecDeque<u32>) {
        let sources = self.sources;
        let (sender, receiver) = std::sync::mpsc::channel();
        rayon::in_place_scope(|scope| {
            let mut read: HashMap<u32, Vec<(String, Vec<RawEdge>)>> = HashMap::default();
            let mut next = 0u32;
            loop {
                while let Some(id) = queue.pop_front() {
                    let node = &self.graph.nodes[id as usize];
                    if is_member_node(&node.name) {
                        continue; // its edges come with its module's (see `functions`)
                    }
                    let (name, path) = (node.name.clone(), node.path.clone());
                    let sender = sender.clone();
                    scope.spawn(move |_| {
                        // A panic is handed to this thread, not left for it to wait on.
                        let edges = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            node_edges(
                                sources,
                                &Node {
                                    name,
                                    dist: 0,
                                    path,
                                },
                            )
                        }));
                        let _ = sender.send((id, edges));
                    });
                }
                if next as usize == self.graph.nodes.len() {
                    break;
                }
                let name = &self.graph.nodes[next as usize].name;
                let raw = loop {
                    if is_member_node(name) {
                        break parameter_edges(name, Some(&self.functions))
                            .or_else(|| self.functions.remove(name))
                            .unwrap_or_default();
                    }
                    if let Some(raw) = read.remove(&next) {
                        break self.keep_functions(raw);
                    }
                    // This thread holds a sender: a receive fails only if that is dropped.
                    let Ok((id, edges)) = receiver.recv() else {
                        break Vec::new();
                    };
                    match edges {
                        Ok(edges) => read.insert(id, edges),
                        Err(panic) => std::panic::resume_unwind(panic),
                    };
                };
                let edges = self.edges_of(next, raw, &mut queue);
                self.graph.edges[next as usize] = edges;
                next += 1;
            }
        });
    }

    /// The edges of the distributions of `wave`'s nodes not loaded yet, loaded in parallel
    /// (reading a kept entry stats every file of its distribution).
    fn load_dists(&mut self, wave: &[u32]) {
        let mut dists: Vec<u32> = (wave.iter())
            .map(|&id| self.graph.nodes[id as usize].dist)
            .filter(|dist| !self.per_dist.contains_key(dist))
            .collect();
        dists.sort_unstable();
        dists.dedup();
        if dists.is_empty() {
            return;
        }
        let sources = self.sources;
        let files = (self.files).get_or_insert_with(|| sources.dists.sorted_files());
        let loaded: Vec<(u32, (DistEdges, Vec<Stamped>))> = dists
            .par_iter()
            .map(|&dist| (dist, load_dist_edges(sources, dist, &files[dist as usize])))
            .collect();
        for (dist, (edges, stamps)) in loaded {
            self.graph.stamps.extend(stamps);
            self.per_dist.insert(dist, edges);
        }
    }
}

/// The edges of node `name` where it is a call passing a literal to a parameter
/// (`m:f#0=torchmetrics`, see [`PARAMETER`]): the literal imported, where function `m:f`
/// imports parameter 0 (its entry is among `entries`, those of its module's distribution);
/// no edges where it does not. None for any other node.
fn parameter_edges(name: &str, entries: Option<&DistEdges>) -> Option<Vec<RawEdge>> {
    let (parameter, literal) = name.split_once('=')?;
    if !parameter.contains(PARAMETER) {
        return None;
    }
    let imports = entries.and_then(|entries| entries.get(parameter));
    let edges = imports.into_iter().flatten().map(|edge| RawEdge {
        module: literal.to_string(),
        ..edge.clone()
    });
    Some(edges.collect())
}

/// The path of module `name` under a site directory, as its parts pushed one by one give it.
fn relative_path(name: &str) -> PathBuf {
    let plain = name
        .split('.')
        .all(|part| !part.is_empty() && !part.contains('/'));
    match plain {
        // The same path, without a push (and its checks) a part.
        true => PathBuf::from(name.replace('.', "/")),
        false => name.split('.').collect(),
    }
}

/// Whether a distribution installed setuptools' `distutils-precedence.pth` in a site
/// directory: Python runs it at start-up, and it adds a meta-path finder that answers
/// `import distutils` with `setuptools._distutils` (unless `SETUPTOOLS_USE_DISTUTILS` says
/// `stdlib` in the process that runs: the default is the shim).
fn has_distutils_shim(sources: &Sources) -> bool {
    distutils_shim_installed(sources.dists, sources.site_dirs)
}

/// [`has_distutils_shim`] for the distributions `dists` of site directories `site_dirs`.
pub(crate) fn distutils_shim_installed(dists: &DistIndex, site_dirs: &[PathBuf]) -> bool {
    (site_dirs.iter()).any(|site| {
        dists
            .installer_of(&site.join("distutils-precedence.pth"))
            .is_some()
    })
}

/// The module the shim of [`has_distutils_shim`] serves for an import of `module`:
/// `setuptools._distutils` and below for `distutils` and below, `None` for any other.
pub(crate) fn shimmed_distutils(module: &str) -> Option<String> {
    match module.strip_prefix("distutils") {
        Some(rest) if rest.is_empty() || rest.starts_with('.') => {
            Some(format!("setuptools._distutils{rest}"))
        }
        _ => None,
    }
}

/// An import of `distutils` (or below) as the shim of [`has_distutils_shim`] serves it:
/// from `setuptools._distutils`, which runs `setuptools/__init__.py` first. Optional: where
/// setuptools cannot be imported, the shim falls back to the standard library's.
fn shim_distutils(edge: &mut RawEdge) {
    if let Some(served) = shimmed_distutils(&edge.module) {
        edge.module = served;
        edge.optional = true;
    }
}

/// Distribution `dist`'s edges (its installed files `files`), from the cache while none of
/// its Python files changed.
/// A distribution's edges, with the stamps of its Python files taken before they were read
/// (none where nothing is kept between runs).
fn load_dist_edges(
    sources: &Sources,
    dist: u32,
    dist_files: &[&std::ffi::OsStr],
) -> (DistEdges, Vec<Stamped>) {
    let files: Vec<(String, &Path, bool)> = (dist_files.iter().map(Path::new))
        .filter(|path| path.extension().is_some_and(|e| e == "py"))
        .filter_map(|path| {
            let (name, is_package) = module_name_of(path, sources.site_dirs)?;
            Some((name, path, is_package))
        })
        .collect();
    let paths = || files.iter().map(|(_, path, _)| *path);
    let entry = (sources.cache_dir).zip(cache_name(sources.dists, dist, paths()));
    if let Some((dir, name)) = &entry {
        if let Some((stamps, edges)) = read_stamped_with_stamps::<DistEdges>(&dir.join(name)) {
            return (edges, stamps);
        }
    }
    let stamped_at = std::time::SystemTime::now();
    // Cython sources are read for the extension modules beside them (see [`extension_entry`]).
    let cython = (dist_files.iter().map(Path::new))
        .filter(|path| path.extension().is_some_and(|e| e == "pyx" || e == "pxi"));
    let stamps: Vec<Stamped> = match sources.cache_dir {
        Some(_) => (paths().chain(cython))
            .map(|path| (path.to_path_buf(), Stamp::of(path)))
            .collect(),
        None => Vec::new(),
    };
    let mut edges: DistEdges = files
        .par_iter()
        .flat_map_iter(|(name, path, is_package)| {
            module_entries(&summary_of(sources, path), name, *is_package)
        })
        .collect();
    let extensions = dist_files.iter().map(Path::new);
    edges.extend(extensions.filter_map(|path| extension_entry(sources, path)));
    if let Some((dir, name)) = entry.filter(|_| settled(&stamps, stamped_at)) {
        store_stamped(dir, &name, ".bin", KEPT, &stamps, &edges);
    }
    (edges, stamps)
}

/// The entries ([`module_entries`]) of module node `node`'s file: none for an extension
/// module, nor for a function's node (its module's entries hold its edges).
fn node_edges(sources: &Sources, node: &Node) -> Vec<(String, Vec<RawEdge>)> {
    let is_package = node.path.ends_with("__init__.py");
    if is_member_node(&node.name) {
        return Vec::new();
    }
    if node.path.extension().is_none_or(|e| e != "py") {
        return extension_entry(sources, &node.path).into_iter().collect();
    }
    module_entries(&summary_of(sources, &node.path), &node.name, is_package)
}

/// The entry of extension module file `path` built from a Cython source shipped beside it
/// (`pyarrow/lib.*.so` and `pyarrow/lib.pyx`): the Python-level imports of that source and
/// of the `.pxi` files it includes, optional (a line-based reading, see
/// [`crate::cython_imports`]). None for any other file, or one without its `.pyx`.
fn extension_entry(sources: &Sources, path: &Path) -> Option<(String, Vec<RawEdge>)> {
    let text = path.to_str()?;
    let base = (sources.extension_suffixes.iter())
        .find_map(|suffix| text.strip_suffix(suffix.as_str()))?;
    let pyx = PathBuf::from(format!("{base}.pyx"));
    if !pyx.is_file() || Path::new(&format!("{base}.py")).exists() {
        return None;
    }
    let (name, _) = module_name_of(Path::new(&format!("{base}.py")), sources.site_dirs)?;
    let package = package_of(&name, false);
    let edges = (crate::cython_imports::python_imports(&pyx).into_iter())
        .map(|import| {
            let level = import.module.chars().take_while(|&c| c == '.').count();
            let module = match level {
                0 => import.module,
                level => join_relative(package, level as u32, &import.module[level..]),
            };
            RawEdge {
                module,
                member: import.member,
                line: import.line,
                optional: true,
                call: false,
            }
        })
        .filter(|edge| !edge.module.is_empty())
        .collect();
    Some((name, edges))
}

/// The summary of installed file `path`: the one this run made of it, if any.
fn summary_of(sources: &Sources, path: &Path) -> Arc<ModuleSummary> {
    (sources.loaded)(path).unwrap_or_else(|| crate::project::read_and_summarize(path, None).0)
}

/// The entry's file name: the lfm executable, the extractor's version and the distribution's
/// metadata and files (their stamps are checked when it is read).
fn cache_name<'a>(
    dists: &DistIndex,
    dist: u32,
    files: impl Iterator<Item = &'a Path>,
) -> Option<String> {
    let mut hasher = executable_hasher()?;
    hasher.update(crate::cache::EXTRACTOR_VERSION);
    let metadata = &dists.dists[dist as usize].metadata_path;
    hasher.update(metadata.as_os_str().as_encoded_bytes());
    for path in files {
        hasher.update(&[0]);
        hasher.update(path.as_os_str().as_encoded_bytes());
    }
    Some(format!("{}.bin", &hasher.finalize().to_hex()[..32]))
}

/// The dotted name of installed file `path` under the site directory that holds it, and
/// whether it is a package's `__init__`. None for a file outside them or not importable.
fn module_name_of(path: &Path, site_dirs: &[PathBuf]) -> Option<(String, bool)> {
    let relative = site_dirs
        .iter()
        .find_map(|site| path.strip_prefix(site).ok())?;
    let mut parts: Vec<&str> = (relative.iter())
        .map(|part| part.to_str())
        .collect::<Option<_>>()?;
    let file = parts.pop()?.strip_suffix(".py")?;
    let is_package = file == "__init__";
    if !is_package {
        parts.push(file);
    }
    let importable = !parts.is_empty() && parts.iter().all(|p| is_identifier(p));
    importable.then(|| (parts.join("."), is_package))
}

/// The imports module `name` runs when it is imported, absolute: its module level and class
/// bodies (not `TYPE_CHECKING`), and the functions it calls there (see [`calls_at_import`]).
fn import_time_edges(summary: &ModuleSummary, name: &str, is_package: bool) -> Vec<RawEdge> {
    let package = package_of(name, is_package);
    let mut edges: Vec<RawEdge> = (summary.imports.iter())
        .filter(|edge| !edge.context.in_function && !edge.context.type_checking)
        .map(|edge| raw_edge(summary, edge, package))
        .filter(|edge| !edge.module.is_empty())
        .collect();
    edges.extend(calls_at_import(summary, name, package));
    edges
}

/// The package relative imports of module `name` start from.
fn package_of(name: &str, is_package: bool) -> &str {
    match (is_package, name.rsplit_once('.')) {
        (true, _) => name,
        (false, Some((parent, _))) => parent,
        (false, None) => "",
    }
}

/// Import `edge` of a module of package `package`, made absolute.
fn raw_edge(summary: &ModuleSummary, edge: &crate::extract::ImportEdge, package: &str) -> RawEdge {
    let written = summary.edge_module(edge);
    let module = match edge.level {
        0 => written.to_string(),
        level => join_relative(package, level, written),
    };
    let context = edge.context;
    RawEdge {
        module,
        member: summary.edge_member(edge).map(str::to_string),
        line: edge.line,
        optional: context.optional || context.conditional || context.type_checking,
        call: false,
    }
}

/// Functions module `name` calls when it is imported, as call edges: the callees of its
/// module-level calls and of its top-level decorators that a top-level `def` of its own binds, or a module-level `from m import f`
/// (`f`), `from m import sub` read as `sub.f`, or `import m` read as `m.f`. What such a function's body imports runs at import
/// (torch's `dill = import_dill()`, flatbuffers' `np = import_numpy()`); optional, since what
/// a body runs depends on what it is given and finds.
fn calls_at_import(summary: &ModuleSummary, name: &str, package: &str) -> Vec<RawEdge> {
    let mut calls = Vec::new();
    for read in summary.import_time_calls() {
        for (module, function, line) in called_functions(summary, read, name, package) {
            calls.push(RawEdge {
                module,
                member: Some(function),
                line,
                optional: true,
                call: true,
            });
        }
    }
    calls.extend(literal_parameter_calls(summary, 0, name, package));
    calls
}

/// The calls of scope `scope` (the module's, or a top-level function's) that pass a string
/// literal positionally, as call edges to a node naming the parameter and the literal
/// (`f#0=torchmetrics`): where the callee imports or looks up that parameter (lightning_fabric's
/// `compare_version("torchmetrics", ...)`, transformers' `_is_package_available("torch")` in
/// the `is_torch_available()` its module level calls), the literal is imported when the scope
/// runs (optional: the callee decides what it does with it).
fn literal_parameter_calls(
    summary: &ModuleSummary,
    scope: u32,
    name: &str,
    package: &str,
) -> Vec<RawEdge> {
    let mut calls = Vec::new();
    for call in summary
        .literal_calls
        .iter()
        .filter(|call| call.scope == scope)
    {
        for (module, function, line) in called_functions(summary, call.callee(), name, package) {
            let member = format!("{function}{PARAMETER}{}={}", call.position, call.text);
            calls.push(RawEdge {
                module,
                member: Some(member),
                line,
                optional: true,
                call: true,
            });
        }
    }
    calls
}

/// The (module, function, line) each function a module-level read `read` may call, through
/// a top-level `def` of module `name` or an import that bound the name read.
fn called_functions(
    summary: &ModuleSummary,
    read: crate::extract::Use,
    name: &str,
    package: &str,
) -> Vec<(String, String, u32)> {
    use crate::extract::{Binding, ScopeKind};
    let Some(bindings) = summary.bindings_of(read.name) else {
        return Vec::new();
    };
    let path = read.path.map(|path| summary.name(path));
    let mut called = Vec::new();
    for binding in bindings {
        match *binding {
            Binding::Definition { scope } if path.is_none() => {
                let defined = &summary.scopes[scope as usize];
                if defined.kind == ScopeKind::Function {
                    let function = summary.name(read.name).to_string();
                    called.push((name.to_string(), function, defined.line));
                }
            }
            Binding::Import { edge } => {
                let edge = &summary.imports[edge as usize];
                if let Some((module, function)) =
                    called_through_import(summary, edge, path, package)
                {
                    called.push((module, function, edge.line));
                }
            }
            _ => {}
        }
    }
    called
}

/// The module and function a module-level read calls through import `edge` (that bound the
/// name read, `path` the attributes read from it): `from m import f` read as `f`, or `import
/// m.sub` read as `m.sub.f`, or `from m import sub` read as `sub.f`. None for anything else.
fn called_through_import(
    summary: &ModuleSummary,
    edge: &crate::extract::ImportEdge,
    path: Option<&str>,
    package: &str,
) -> Option<(String, String)> {
    if edge.context.in_function || edge.context.type_checking {
        return None;
    }
    let imported = raw_edge(summary, edge, package);
    match (imported.member, path) {
        (Some(member), None) if member != "*" => Some((imported.module, member)),
        // `from m import sub` read as `sub.f`: a function of submodule `m.sub`, if it is one.
        (Some(member), Some(path)) if member != "*" => {
            let dotted = format!("{}.{member}.{path}", imported.module);
            let (module, function) = dotted.rsplit_once('.')?;
            Some((module.to_string(), function.to_string()))
        }
        (None, Some(path)) => {
            // `import a.b` binds `a` (read as `a.b.f`); `import a.b as c` binds `a.b`.
            let bound = match edge.aliased {
                true => imported.module.as_str(),
                false => imported.module.split('.').next().unwrap_or_default(),
            };
            let dotted = format!("{bound}.{path}");
            let (module, function) = dotted.rsplit_once('.')?;
            Some((module.to_string(), function.to_string()))
        }
        _ => None,
    }
}

fn top_level_functions(summary: &ModuleSummary) -> impl Iterator<Item = u32> + '_ {
    (1..summary.scopes.len() as u32).filter(|&scope| {
        let scope = &summary.scopes[scope as usize];
        scope.parent == 0 && scope.kind == crate::extract::ScopeKind::Function
    })
}

fn scope_edges(summary: &ModuleSummary, scope: u32, package: &str) -> Vec<RawEdge> {
    (summary.scope_imports(scope).iter())
        .map(|&edge| &summary.imports[edge as usize])
        .filter(|edge| !edge.context.type_checking)
        .map(|edge| RawEdge {
            optional: true,
            ..raw_edge(summary, edge, package)
        })
        .filter(|edge| !edge.module.is_empty())
        .collect()
}

/// Module `name`'s import-time edges, and those of each of its top-level functions that
/// imports anything (by its function node's name): a distribution's entries.
fn module_entries(
    summary: &ModuleSummary,
    name: &str,
    is_package: bool,
) -> Vec<(String, Vec<RawEdge>)> {
    let package = package_of(name, is_package);
    let functions = top_level_functions(summary).filter_map(|scope| {
        let mut edges = scope_edges(summary, scope, package);
        edges.extend(literal_parameter_calls(summary, scope, name, package));
        let function = summary.scope_name(scope);
        (!edges.is_empty()).then(|| (format!("{name}{FUNCTION}{function}"), edges))
    });
    let parameters = summary.parameter_imports.iter().map(|imported| {
        let function = summary.scope_name(imported.scope);
        let edge = RawEdge {
            module: String::new(),
            member: None,
            line: imported.line,
            optional: true,
            call: false,
        };
        let node = format!("{name}{FUNCTION}{function}{PARAMETER}{}", imported.position);
        (node, vec![edge])
    });
    let reexported = match is_package {
        true => reexported_names(summary, name, package),
        false => Vec::new(),
    };
    std::iter::once((
        name.to_string(),
        import_time_edges(summary, name, is_package),
    ))
    .chain(reexported)
    .chain(functions)
    .chain(parameters)
    .chain(lazy_names(summary, name, package))
    .collect()
}

/// A package's `__init__` re-exports what its submodules define (transformers.utils runs `from
/// .import_utils import is_torchvision_available`, and `transformers/__init__.py` calls
/// `is_torchvision_available()` imported from `transformers.utils`): each name a module-level
/// `from m import f` binds there, by its function node's name, with one call edge to `m`'s
/// `f`, so a call through the package reaches the body that runs. Only packages: a re-export
/// is what they are for, and every other module's from-imports would double the entries.
/// (A top-level `def` of the same name comes later among the entries, and replaces it.)
fn reexported_names(
    summary: &ModuleSummary,
    name: &str,
    package: &str,
) -> Vec<(String, Vec<RawEdge>)> {
    use crate::extract::Binding;
    let names = summary.binding_offsets.len().saturating_sub(1) as u32;
    let mut entries = Vec::new();
    for id in 0..names {
        for binding in summary.bindings_of(id).unwrap_or_default() {
            let Binding::Import { edge } = *binding else {
                continue;
            };
            let edge = &summary.imports[edge as usize];
            if edge.context.in_function || edge.context.type_checking {
                continue;
            }
            let imported = raw_edge(summary, edge, package);
            if imported.module.is_empty() || imported.member.as_deref().is_none_or(|m| m == "*") {
                continue;
            }
            let call = RawEdge {
                optional: true,
                call: true,
                ..imported
            };
            entries.push((format!("{name}{FUNCTION}{}", summary.name(id)), vec![call]));
        }
    }
    entries
}

/// A module that answers attribute reads itself (PEP 562's module `__getattr__`, as
/// huggingface_hub's lazy `_attach` or scientific Python's lazy_loader make one) imports on
/// demand what its `TYPE_CHECKING` block names for type checkers: `from huggingface_hub import
/// HfApi` runs `huggingface_hub.hf_api`. Each name a `TYPE_CHECKING` `from m import name` binds
/// there, by its node's name ([`LAZY`]), with that import (optional).
fn lazy_names(summary: &ModuleSummary, name: &str, package: &str) -> Vec<(String, Vec<RawEdge>)> {
    let serves = (summary.name_id("__getattr__"))
        .and_then(|id| summary.bindings_of(id))
        .is_some();
    if !serves {
        return Vec::new();
    }
    (summary.imports.iter())
        .filter(|edge| edge.context.type_checking && !edge.context.in_function)
        .filter_map(|edge| {
            let member = summary.edge_member(edge).filter(|m| *m != "*")?;
            let imported = raw_edge(summary, edge, package);
            Some((format!("{name}{LAZY}{member}"), vec![imported]))
        })
        .collect()
}

/// Per node, the distributions reachable from it over the edges `follow` keeps (its own
/// included), `words` words each: Tarjan's strongly connected components, each component's
/// set the union of its members' own and of the components it leads to (finished first).
fn reach_sets(
    dists: &[u32],
    words: usize,
    edges: &[Vec<Edge>],
    follow: impl Fn(&Edge) -> bool,
) -> Vec<u64> {
    const UNSEEN: u32 = u32::MAX;
    let count = dists.len();
    let mut sets = vec![0u64; count * words];
    let (mut index, mut low) = (vec![UNSEEN; count], vec![0u32; count]);
    let mut component = vec![UNSEEN; count];
    let (mut stack, mut on_stack) = (Vec::new(), vec![false; count]);
    let (mut next, mut components) = (0u32, 0u32);
    let successors = |node: usize| {
        edges[node]
            .iter()
            .filter(|e| follow(e))
            .map(|e| e.to as usize)
    };
    for start in 0..count {
        if index[start] != UNSEEN {
            continue;
        }
        let mut calls: Vec<(usize, usize)> = vec![(start, 0)];
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&mut (node, ref mut at)) = calls.last_mut() {
            if let Some(to) = successors(node).nth(*at) {
                *at += 1;
                if index[to] == UNSEEN {
                    (index[to], low[to]) = (next, next);
                    next += 1;
                    stack.push(to);
                    on_stack[to] = true;
                    calls.push((to, 0));
                } else if on_stack[to] {
                    low[node] = low[node].min(index[to]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(caller, _)) = calls.last() {
                low[caller] = low[caller].min(low[node]);
            }
            if low[node] != index[node] {
                continue;
            }
            let split = stack.iter().rposition(|&n| n == node).unwrap_or(0);
            let members: Vec<usize> = stack.drain(split..).collect();
            let mut set = vec![0u64; words];
            for &member in &members {
                on_stack[member] = false;
                component[member] = components;
                set[dists[member] as usize / 64] |= 1 << (dists[member] % 64);
            }
            for &member in &members {
                for to in successors(member).filter(|&to| component[to] != components) {
                    let theirs = &sets[to * words..(to + 1) * words];
                    set.iter_mut().zip(theirs).for_each(|(a, b)| *a |= b);
                }
            }
            for &member in &members {
                sets[member * words..(member + 1) * words].copy_from_slice(&set);
            }
            components += 1;
        }
    }
    sets
}

/// Distributions installed code imports without declaring them, as a closure lists them:
/// their Requires-Dist closure, required or optional, and the reason each root's chain starts
/// with (the importing distribution, then the import's file and line).
pub struct Undeclared<'p> {
    pub closure: Arc<crate::dists::RequirementClosure>,
    pub optional: bool,
    /// By the root distribution's id (what its closure's chains start with): the importing
    /// distribution's name, then `file:line`.
    pub reasons: HashMap<u32, (&'p str, String)>,
}

/// `roots` less those another root requires (they are listed through its chain).
fn outermost(project: &crate::project::Project, roots: Vec<u32>) -> Vec<u32> {
    let requires = |of: u32, other: u32| {
        let closure = (project.dists).requirement_closure(&[of], &project.interpreter);
        closure.reached.contains_key(&other)
    };
    (roots.iter().copied())
        .filter(|&root| {
            !roots
                .iter()
                .any(|&other| other != root && requires(other, root) && !requires(root, other))
        })
        .collect()
}

/// What importing the installed modules `installed` (name, whether a required edge reached
/// it) brings in beyond the `declared` closures: one [`Undeclared`] for the distributions
/// reached through imports that must succeed, one for the rest. Empty when there are none.
pub fn undeclared<'p>(
    project: &'p crate::project::Project,
    installed: &[(&str, bool)],
    declared: [&crate::dists::RequirementClosure; 2],
) -> Vec<Undeclared<'p>> {
    let graph = &project.installed_imports;
    if installed.is_empty() || graph.is_empty() {
        return Vec::new();
    }
    let is_declared = |id: &u32| declared.iter().any(|c| c.reached.contains_key(id));
    let (start, any, required) = graph.reached(installed.iter().copied());
    let undeclared: Vec<u32> = any.ids().filter(|id| !is_declared(id)).collect();
    if undeclared.is_empty() {
        return Vec::new();
    }
    let question: Vec<u64> = (start
        .iter()
        .map(|&(node, req)| 2 * node as u64 + req as u64))
    .chain([u64::MAX])
    .chain(undeclared.iter().map(|&id| id as u64))
    .collect();
    let known = graph
        .found
        .lock()
        .ok()
        .and_then(|f| f.get(&question).cloned());
    let found = known.unwrap_or_else(|| {
        let nodes: Vec<u32> = start.iter().map(|&(node, _)| node).collect();
        let found = graph.find(project, &nodes, &undeclared, &required);
        if let Ok(mut memo) = graph.found.lock() {
            memo.insert(question, found.clone());
        }
        found
    });
    (found.iter())
        .map(|found| Undeclared {
            closure: (project.dists).requirement_closure(&found.roots, &project.interpreter),
            optional: found.optional,
            reasons: (found.by.iter())
                .map(|&(root, (node, line))| {
                    let importer = &project.dists.dists[graph.nodes[node as usize].dist as usize];
                    let file = project.display_path(&graph.nodes[node as usize].path);
                    (root, (importer.name.as_str(), format!("{file}:{line}")))
                })
                .collect(),
        })
        .collect()
}

impl InstalledImports {
    /// [`undeclared`]'s work for the nodes `start` and the undeclared distributions they
    /// reach, of which `required` those reached through imports that must succeed.
    fn find(
        &self,
        project: &crate::project::Project,
        start: &[u32],
        undeclared: &[u32],
        required: &DistSet,
    ) -> Arc<[Found]> {
        let (must, may): (Vec<u32>, Vec<u32>) =
            undeclared.iter().partition(|&&id| required.contains(id));
        let mut found = Vec::new();
        for (roots, optional) in [(must, false), (may, true)] {
            let roots = outermost(project, roots);
            if roots.is_empty() {
                continue;
            }
            let by = (roots.iter().zip(self.imported_by(start, &roots)))
                .filter_map(|(&root, by)| Some((root, by?)))
                .collect();
            found.push(Found {
                roots,
                optional,
                by,
            });
        }
        found.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(to: u32, optional: bool) -> Edge {
        Edge {
            to,
            line: 1,
            optional,
        }
    }

    /// The first import of `dist` met walking breadth first from all of `start` at once:
    /// what [`InstalledImports::imported_by`] must answer, by its definition.
    fn first_import_walking_from_all(
        graph: &InstalledImports,
        start: &[u32],
        dist: u32,
    ) -> Option<(u32, u32)> {
        let reaches =
            |node: u32| graph.set(&graph.any, node)[dist as usize / 64] & (1 << (dist % 64)) != 0;
        let mut seen = std::collections::HashSet::new();
        let mut queue: VecDeque<u32> = (start.iter().copied())
            .filter(|&node| reaches(node) && seen.insert(node))
            .collect();
        while let Some(node) = queue.pop_front() {
            for edge in &graph.edges[node as usize] {
                if graph.nodes[edge.to as usize].dist == dist {
                    return Some((node, edge.line));
                }
                if reaches(edge.to) && seen.insert(edge.to) {
                    queue.push_back(edge.to);
                }
            }
        }
        None
    }

    #[test]
    fn the_first_import_from_several_modules_is_the_nearest_of_each_ones() {
        let mut state = 0x2545_f491_u64;
        let mut next = |below: u32| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % below as u64) as u32
        };
        let mut compared = 0;
        for _ in 0..200 {
            let (count, dists) = (4 + next(20), 2 + next(6));
            let node_dists: Vec<u32> = (0..count).map(|_| next(dists)).collect();
            let edges: Vec<Vec<Edge>> = (0..count)
                .map(|_| {
                    (0..next(4))
                        .map(|_| Edge {
                            to: next(count),
                            line: next(1000),
                            optional: false,
                        })
                        .collect()
                })
                .collect();
            let words = (dists as usize).div_ceil(64);
            let graph = InstalledImports {
                nodes: (node_dists.iter())
                    .map(|&dist| Node {
                        name: String::new(),
                        dist,
                        path: PathBuf::new(),
                    })
                    .collect(),
                any: reach_sets(&node_dists, words, &edges, |_| true),
                edges,
                words,
                ..InstalledImports::default()
            };
            for _ in 0..10 {
                let start: Vec<u32> = (0..1 + next(5)).map(|_| next(count)).collect();
                let wanted: Vec<u32> = (0..dists).filter(|_| next(2) == 0).collect();
                let expected: Vec<Option<(u32, u32)>> = (wanted.iter())
                    .map(|&dist| first_import_walking_from_all(&graph, &start, dist))
                    .collect();
                compared += expected.iter().flatten().count();
                assert_eq!(
                    graph.imported_by(&start, &wanted),
                    expected,
                    "from {start:?}"
                );
            }
        }
        assert!(
            compared > 500,
            "only {compared} imports found: the graphs are too sparse"
        );
    }

    #[test]
    fn reach_sets_cross_cycles_and_stop_at_optional_edges() {
        // 0 -> 1 <-> 2 -> 3 (optional) -> 4; dists: 0,0,1,2,3
        let dists = [0, 0, 1, 2, 3];
        let edges = vec![
            vec![edge(1, false)],
            vec![edge(2, false)],
            vec![edge(1, false), edge(3, true)],
            vec![edge(4, false)],
            vec![],
        ];
        let any = reach_sets(&dists, 1, &edges, |_| true);
        let required = reach_sets(&dists, 1, &edges, |e| !e.optional);
        assert_eq!(any[0], 0b1111);
        assert_eq!(any[1], 0b1111);
        assert_eq!(any[3], 0b1100);
        assert_eq!(required[0], 0b0011);
        assert_eq!(required[2], 0b0011);
        assert_eq!(required[3], 0b1100);
    }

    #[test]
    fn relative_paths_are_those_the_parts_pushed_give() {
        for name in ["a", "a.b.c", "_x.y2", "a..b", ".a", "a.", "a/b.c", ""] {
            let pushed: PathBuf = name.split('.').collect();
            assert_eq!(relative_path(name), pushed, "{name}");
        }
    }

    #[test]
    fn module_names_of_installed_files() {
        let sites = [PathBuf::from("/s")];
        let name = |p: &str| module_name_of(Path::new(p), &sites);
        assert_eq!(name("/s/a/b/c.py"), Some(("a.b.c".into(), false)));
        assert_eq!(name("/s/a/__init__.py"), Some(("a".into(), true)));
        assert_eq!(name("/s/a-1.0.dist-info/x.py"), None);
        assert_eq!(name("/elsewhere/a.py"), None);
        assert_eq!(name("/s/a/data.txt"), None);
    }

    #[test]
    fn edges_that_run_at_import_made_absolute() {
        let source = "\
import os
from . import sibling
from .sub import thing
try:
    import pandas
except ImportError:
    pandas = None
if X:
    import cond
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import typed
if sys.version_info >= (3, 13):
    import new_enough
elif TYPE_CHECKING:
    import typed_too
def f():
    import inside
class C:
    import in_class
";
        let summary = crate::extract::summarize(source);
        let edges = import_time_edges(&summary, "pkg.mod", false);
        // Calls of functions (none here reach one that imports) are another test's.
        let shown: Vec<(String, Option<String>, bool)> = edges
            .into_iter()
            .filter(|e| !e.call)
            .map(|e| (e.module, e.member, e.optional))
            .collect();
        let expected = [
            ("os", None, false),
            ("pkg", Some("sibling"), false),
            ("pkg.sub", Some("thing"), false),
            ("pandas", None, true),
            ("cond", None, true),
            ("typing", Some("TYPE_CHECKING"), false),
            ("new_enough", None, true),
            ("in_class", None, false),
        ];
        let expected: Vec<(String, Option<String>, bool)> = expected
            .iter()
            .map(|(m, member, o)| (m.to_string(), member.map(str::to_string), *o))
            .collect();
        assert_eq!(shown, expected);
    }

    /// alpha tries beta and imports gamma through its submodule; delta only inside a function.
    fn site(root: &Path) -> PathBuf {
        let site = root.join("site-packages");
        let alpha_init =
            "try:\n    import beta\nexcept ImportError:\n    beta = None\nfrom . import core\n";
        let alpha_core = "import gamma\ndef f():\n    import delta\n";
        crate::test_site::dist(
            &site,
            "alpha",
            "1.0",
            &[
                ("alpha/__init__.py", alpha_init),
                ("alpha/core.py", alpha_core),
            ],
        );
        for name in ["beta", "gamma", "delta"] {
            let file = format!("{name}.py");
            crate::test_site::dist(&site, name, "1.0", &[(&file, "import os\n")]);
        }
        site
    }

    #[test]
    fn the_graph_read_ahead_is_the_graph_the_waves_make() {
        let root = tempfile::tempdir().unwrap();
        let (site, cache) = (site(root.path()), root.path().join("cache"));
        let dists = DistIndex::build(&[site.to_path_buf()], None);
        let loaded = |_: &Path| None;
        let built = |cache_dir: Option<&Path>| {
            let sources = Sources {
                dists: &dists,
                site_dirs: &[site.to_path_buf()],
                extension_suffixes: &[],
                loaded: &loaded,
                cache_dir,
            };
            InstalledImports::build(&sources, ["alpha".to_string()])
        };
        // Without kept edges each file is read as its node is made; with them, wave by wave.
        let (ahead, waves) = (built(None), built(Some(&cache)));
        let shape = |graph: &InstalledImports| {
            let nodes: Vec<(String, u32)> = (graph.nodes.iter())
                .map(|node| (node.name.clone(), node.dist))
                .collect();
            let edges: Vec<Vec<(u32, u32, bool)>> = (graph.edges.iter())
                .map(|edges| edges.iter().map(|e| (e.to, e.line, e.optional)).collect())
                .collect();
            (nodes, edges, graph.any.clone(), graph.required.clone())
        };
        assert_eq!(shape(&ahead), shape(&waves));
        let names: Vec<&str> = ahead.nodes.iter().map(|node| node.name.as_str()).collect();
        assert_eq!(names, ["alpha", "beta", "alpha.core", "gamma"]);
    }

    fn reached(site: &Path, cache: &Path) -> (Vec<String>, Vec<String>) {
        let dists = DistIndex::build(&[site.to_path_buf()], None);
        let loaded = |_: &Path| None;
        let sources = Sources {
            dists: &dists,
            site_dirs: &[site.to_path_buf()],
            extension_suffixes: &[],
            loaded: &loaded,
            cache_dir: Some(cache),
        };
        let graph = InstalledImports::build(&sources, ["alpha".to_string()]);
        let (_, any, required) = graph.reached([("alpha", true)]);
        let names = |set: DistSet| -> Vec<String> {
            let mut names: Vec<String> = (set.ids())
                .map(|id| dists.dists[id as usize].name.clone())
                .collect();
            names.sort();
            names
        };
        (names(any), names(required))
    }

    #[test]
    fn what_installed_code_imports_is_kept_until_a_file_of_it_changes() {
        let root = tempfile::tempdir().unwrap();
        let (site, cache) = (site(root.path()), root.path().join("cache"));
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        crate::test_site::settle(&site, long_ago);
        let expected = (
            vec!["alpha".to_string(), "beta".into(), "gamma".into()],
            vec!["alpha".to_string(), "gamma".into()],
        );
        assert_eq!(reached(&site, &cache), expected);
        // One entry per distribution read (delta is never reached).
        assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 3);
        assert_eq!(reached(&site, &cache), expected);
        // Same size, so only the stamp's mtime tells the edit apart.
        std::fs::write(
            site.join("alpha/core.py"),
            "import delta\ndef f():\n    import gamma\n",
        )
        .unwrap();
        let edited = (
            vec!["alpha".to_string(), "beta".into(), "delta".into()],
            vec!["alpha".to_string(), "delta".into()],
        );
        assert_eq!(reached(&site, &cache), edited);
    }

    /// The distributions importing `root` reaches (all, then through required imports only),
    /// by a graph read ahead without kept edges and by one made in waves from kept edges:
    /// both must say the same.
    fn reached_from(site: &Path, root: &str) -> (Vec<String>, Vec<String>) {
        let dists = DistIndex::build(&[site.to_path_buf()], None);
        let loaded = |_: &Path| None;
        let cache = tempfile::tempdir().unwrap();
        let answers: Vec<(Vec<String>, Vec<String>)> = [None, Some(cache.path())]
            .into_iter()
            .map(|cache_dir| {
                let sources = Sources {
                    dists: &dists,
                    site_dirs: &[site.to_path_buf()],
                    extension_suffixes: &[".so".to_string()],
                    loaded: &loaded,
                    cache_dir,
                };
                let graph = InstalledImports::build(&sources, [root.to_string()]);
                let (_, any, required) = graph.reached([(root, true)]);
                let names = |set: DistSet| -> Vec<String> {
                    let mut names: Vec<String> = (set.ids())
                        .map(|id| dists.dists[id as usize].name.clone())
                        .collect();
                    names.sort();
                    names
                };
                (names(any), names(required))
            })
            .collect();
        assert_eq!(answers[0], answers[1], "read ahead, then in waves");
        answers[0].clone()
    }

    fn leaf_dists(site: &Path, names: &[&str]) {
        for name in names {
            let file = format!("{name}.py");
            crate::test_site::dist(site, name, "1.0", &[(&file, "import os\n")]);
        }
    }

    #[test]
    fn a_function_called_at_import_time_brings_what_its_body_imports() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("site-packages");
        let init = "\
from alpha.util import import_extra
from alpha import util
import alpha.util as aliased
extra = import_extra()
def load():
    import eta
    def later():
        import theta
load()
util.by_attribute()
aliased.by_alias()
registry = [util.never_called]
";
        let util = "\
def import_extra():
    if not wanted():
        return None
    import epsilon
    return epsilon
def by_attribute():
    from iota import x
def by_alias():
    import kappa
def never_called():
    import zeta
";
        crate::test_site::dist(
            &site,
            "alpha",
            "1.0",
            &[("alpha/__init__.py", init), ("alpha/util.py", util)],
        );
        leaf_dists(&site, &["epsilon", "eta", "theta", "iota", "kappa", "zeta"]);
        let (any, required) = reached_from(&site, "alpha");
        assert_eq!(any, ["alpha", "epsilon", "eta", "iota", "kappa"]);
        assert_eq!(required, ["alpha"]);
    }

    #[test]
    fn a_literal_passed_at_import_time_to_a_parameter_the_callee_imports_is_imported() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("site-packages");
        // lightning_fabric's `compare_version("torchmetrics", ...)` and lightning_utilities'
        // `importlib.import_module(package)`.
        let fabric = "\
from helpers.imports import compare_version, describe
import helpers.imports as imports
import operator
NEW = compare_version(\"epsilon\", operator.ge, \"1.0\")
AS_ATTRIBUTE = imports.compare_version(\"eta.sub\", operator.ge, \"1.0\")
SECOND = imports.second_parameter(\"zeta\", \"theta\")
TEXT = describe(\"iota\")
def later():
    compare_version(\"kappa\", operator.ge, \"1.0\")
";
        let imports = "\
import importlib
def compare_version(package, op, version):
    try:
        pkg = importlib.import_module(package)
    except ImportError:
        return False
    return op(pkg.__version__, version)
def second_parameter(first, second):
    return __import__(second)
def describe(text):
    return text.upper()
";
        crate::test_site::dist(&site, "fabric", "1.0", &[("fabric.py", fabric)]);
        let files = [("helpers/__init__.py", ""), ("helpers/imports.py", imports)];
        crate::test_site::dist(&site, "helpers", "1.0", &files);
        leaf_dists(&site, &["epsilon", "zeta", "theta", "iota", "kappa"]);
        crate::test_site::dist(
            &site,
            "eta",
            "1.0",
            &[("eta/__init__.py", ""), ("eta/sub.py", "")],
        );
        let (any, required) = reached_from(&site, "fabric");
        assert_eq!(any, ["epsilon", "eta", "fabric", "helpers", "theta"]);
        assert_eq!(required, ["fabric", "helpers"]);
    }

    #[test]
    fn a_module_looked_up_at_import_time_is_imported() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("site-packages");
        // transformers: `generic.py` runs `is_torch_available()`, whose body passes "torch" to
        // `_is_package_available`, which asks `importlib.util.find_spec(pkg_name)`; blosc2 asks
        // `find_spec("numba")` at its module level.
        let generic = "\
from helpers.checks import is_epsilon_available, is_never_asked
from helpers import is_kappa_available
import importlib.util
from pkgutil import find_loader
if is_epsilon_available():
    READY = True
if not is_kappa_available():
    raise ImportError
HAS_ETA = importlib.util.find_spec(\"eta\") is not None
HAS_ZETA = find_loader(\"zeta\") is not None
";
        let checks = "\
import importlib.util
def _is_package_available(pkg_name):
    return importlib.util.find_spec(pkg_name) is not None
def is_epsilon_available():
    return _is_package_available(\"epsilon\")
def is_never_asked():
    return _is_package_available(\"theta\")
def looks_up_a_name(getattr_name):
    return getattr(object, \"iota\")
def is_kappa_available():
    return _is_package_available(\"kappa\")
";
        // transformers.utils re-exports import_utils' checks; the caller imports them from it.
        let reexports = "from .checks import is_kappa_available, is_never_asked as renamed\n";
        crate::test_site::dist(&site, "generic", "1.0", &[("generic.py", generic)]);
        let files = [
            ("helpers/__init__.py", reexports),
            ("helpers/checks.py", checks),
        ];
        crate::test_site::dist(&site, "helpers", "1.0", &files);
        leaf_dists(&site, &["epsilon", "eta", "zeta", "theta", "iota", "kappa"]);
        let (any, required) = reached_from(&site, "generic");
        assert_eq!(
            any,
            ["epsilon", "eta", "generic", "helpers", "kappa", "zeta"]
        );
        assert_eq!(required, ["generic", "helpers"]);
    }

    #[test]
    fn an_extension_module_imports_what_the_cython_source_beside_it_imports() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("site-packages");
        // pyarrow.lib: lib.pyx includes compat.pxi, which tries `import cloudpickle`.
        let lib = "\
from cython.operator cimport dereference as deref
cimport numpy
import epsilon
from . import _helpers
include \"compat.pxi\"
";
        let compat = "\
try:
    import eta
except ImportError:
    pass
cdef object later(int x):
    import zeta
";
        let files = [
            ("arrow/__init__.py", "from arrow.lib import Table\n"),
            ("arrow/lib.so", "\x7fELF"),
            ("arrow/lib.pyx", lib),
            ("arrow/compat.pxi", compat),
            ("arrow/_helpers.py", "import theta\n"),
            // A .pyx beside a Python module of the same name is no extension's source.
            ("arrow/pure.py", ""),
            ("arrow/pure.pyx", "import iota\n"),
        ];
        crate::test_site::dist(&site, "arrow", "1.0", &files);
        leaf_dists(&site, &["epsilon", "eta", "zeta", "theta", "iota", "numpy"]);
        let (any, required) = reached_from(&site, "arrow");
        assert_eq!(any, ["arrow", "epsilon", "eta", "theta"]);
        assert_eq!(required, ["arrow"]);
    }

    #[test]
    fn a_module_with_getattr_imports_its_type_checking_names_on_demand() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("site-packages");
        let lazy = "\
from typing import TYPE_CHECKING
import importlib
def __getattr__(name):
    return getattr(importlib.import_module('.api', __name__), name)
if TYPE_CHECKING:
    from .api import Api
";
        let eager = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import mu\n";
        crate::test_site::dist(
            &site,
            "omega",
            "1.0",
            &[
                ("omega/__init__.py", lazy),
                ("omega/api.py", "import lambda_\nclass Api: pass\n"),
                ("typed.py", eager),
                ("user.py", "from omega import Api\n"),
                ("other.py", "import omega\nfrom typed import mu\n"),
            ],
        );
        leaf_dists(&site, &["lambda_", "mu"]);
        let (any, required) = reached_from(&site, "user");
        assert_eq!(any, ["lambda_", "omega"]);
        assert_eq!(required, ["omega"]);
        // Importing the module alone asks it for nothing; and without a module __getattr__,
        // TYPE_CHECKING imports stay for type checkers alone.
        assert_eq!(reached_from(&site, "other").0, ["omega"]);
    }

    #[test]
    fn the_distutils_shim_serves_distutils_from_setuptools() {
        let edge = |module: &str| RawEdge {
            module: module.to_string(),
            member: None,
            line: 1,
            optional: false,
            call: false,
        };
        for (written, served) in [
            ("distutils", "setuptools._distutils"),
            (
                "distutils.command.build",
                "setuptools._distutils.command.build",
            ),
            ("distutils_extra", "distutils_extra"),
        ] {
            let mut shimmed = edge(written);
            shim_distutils(&mut shimmed);
            assert_eq!(shimmed.module, served);
            assert_eq!(shimmed.optional, written != served);
        }
    }
}
