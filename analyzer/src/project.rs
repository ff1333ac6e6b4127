//! The set of local modules being analysed, loaded in parallel waves.
//!
//! A wave reads, hashes and summarises files on all cores (or takes the summary from the cache),
//! then resolves their imports; local modules found that way form the next wave. The located
//! files' summaries may be made ahead ([`crate::preparse`]): each is resolved as soon as it is.

use rustc_hash::FxHashMap as HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::{CacheKey, SummaryCache};
use crate::dists::{DistIndex, Owner};
use crate::extract::{summarize, ImportEdge, ModuleSummary};
use crate::installed_imports::{InstalledImports, Sources};
use crate::interpreter::Interpreter;
use crate::module_table::{imports_fingerprint, ModuleTable, Restored, RestoredModule};
use crate::paths::path_key;
use crate::preparse::Preparse;
use crate::resolve::{module_name_for, Location, Resolver, RootKind};
use crate::results::Stamp;
use crate::source::decode;
use crate::spec::Warning;

/// Files larger than this are generated data, not code worth parsing.
const MAX_SOURCE_BYTES: u64 = 64 * 1024 * 1024;

pub struct LoadedModule {
    pub name: String,
    pub path: PathBuf,
    /// `path` as shown to people: relative to the working directory when below it.
    pub display: String,
    pub is_package: bool,
    pub summary: Arc<ModuleSummary>,
    /// The file's stamp before it was read, for the results cache.
    pub stamp: Option<Stamp>,
    /// Its summary's key in the summary cache (where one was used): a later run that finds
    /// the same stamp takes the summary by it without reading the file.
    pub key: Option<CacheKey>,
    /// For each import edge of the summary, what it resolves to (shared between edges that
    /// name the same module).
    pub targets: Vec<Arc<[EdgeTarget]>>,
    /// For each import edge, the absolute name of the module its bound name denotes (`import
    /// a.b` binds `a`; `from a import b` binds module `a.b` when there is one), or `None` when
    /// the edge binds a member of a module, or nothing (`*`).
    pub bound: Vec<Option<Arc<str>>>,
    /// The nearest enclosing package with code of its own (`__init__.py`), which Python runs
    /// before this module.
    pub parent: Option<u32>,
    /// For a file an installed distribution provides (a target inside site-packages): its
    /// enclosing packages with code, outermost first, then itself, as installed modules.
    /// Importing it runs those `__init__`s, and what they import is their distributions'
    /// (whose Requires-Dist closure follows). Empty for local code.
    pub installed: Vec<Arc<ThirdPartyModule>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EdgeTarget {
    Local(u32),
    Stdlib(String),
    /// Resolved to a file of a site directory (or a distribution-owned file under a local root).
    /// One per module name, shared by every edge that reaches it.
    ThirdParty(Arc<ThirdPartyModule>),
    Missing(String),
}

#[derive(Debug, PartialEq)]
pub struct ThirdPartyModule {
    pub name: String,
    /// The file, as shown to people.
    pub display: String,
    /// Looked up once here rather than for every closure that reaches the module.
    pub owner: Owner,
}

pub struct Project {
    pub interpreter: Interpreter,
    pub dists: DistIndex,
    pub modules: Vec<LoadedModule>,
    pub warnings: Vec<Warning>,
    resolver: Resolver,
    /// By [`crate::paths::path_key`]: hashing a Path walks its components.
    by_path: HashMap<OsString, u32>,
    cache: Option<Arc<SummaryCache>>,
    cwd: PathBuf,
    /// Files parsed so far, for progress reports.
    parsed: usize,
    /// Summaries made before loading asked for them.
    preparsed: Preparsed,
    /// Absolute imports already resolved, keyed by the absolute module name, then NUL and the
    /// member for `from` imports (built in `edge_key`, a reused buffer).
    resolved_edges: HashMap<String, ResolvedEdge>,
    edge_key: String,
    third_party: HashMap<String, Arc<ThirdPartyModule>>,
    /// Loaded modules by dotted name, to follow `pkg.mod.f` from a bound name.
    by_name: HashMap<String, u32>,
    /// Set by [`Project::finish_loading`]; see [`crate::spec::TargetView::escape_free`].
    pub escape_free: bool,
    /// Whether setuptools' distutils shim is installed: a local `import distutils` then runs
    /// `setuptools._distutils`, as installed code's does ([`crate::installed_imports`]).
    distutils_shim: bool,
    /// What the installed modules any closure can reach import in turn: set by
    /// [`Project::follow_installed_imports`].
    pub installed_imports: InstalledImports,
    pub progress: Option<crate::ParseProgress>,
}

/// An absolute import resolved once, shared by every edge that names the same thing.
#[derive(Clone)]
struct ResolvedEdge {
    targets: Arc<[EdgeTarget]>,
    member_is_module: bool,
}

/// A local file to load, with the dotted name it is imported by.
#[derive(Debug, Clone)]
pub struct PendingModule {
    pub path: PathBuf,
    pub name: String,
    pub is_package: bool,
}

impl Project {
    pub fn new(
        interpreter: Interpreter,
        dists: DistIndex,
        local_roots: &[PathBuf],
        cache: Option<Arc<SummaryCache>>,
    ) -> Project {
        let site_dirs = interpreter.site_dirs();
        let distutils_shim = crate::installed_imports::distutils_shim_installed(&dists, &site_dirs);
        let resolver = Resolver::new(
            local_roots,
            &site_dirs,
            &interpreter.stdlib_dirs,
            interpreter.stdlib_module_names.clone(),
            interpreter.builtin_module_names.clone(),
            interpreter.extension_suffixes.clone(),
        );
        let mut warnings = Vec::new();
        for problem in &dists.problems {
            warnings.push(Warning {
                file: String::new(),
                line: 0,
                message: problem.clone(),
            });
        }
        Project {
            interpreter,
            dists,
            modules: Vec::new(),
            warnings,
            resolver,
            by_path: HashMap::default(),
            cache,
            cwd: std::env::current_dir().unwrap_or_default(),
            parsed: 0,
            preparsed: Preparsed::Made(HashMap::default()),
            resolved_edges: HashMap::default(),
            edge_key: String::new(),
            third_party: HashMap::default(),
            by_name: HashMap::default(),
            escape_free: false,
            distutils_shim,
            installed_imports: InstalledImports::default(),
            progress: None,
        }
    }

    /// The installed modules met while loading (what closures can list), by name.
    pub fn installed_modules_met(&self) -> Vec<Arc<ThirdPartyModule>> {
        let mut met: Vec<Arc<ThirdPartyModule>> = self.third_party.values().cloned().collect();
        met.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        met
    }

    /// Take a stored result's loaded modules ([`ModuleTable`]) instead of loading them: `files`
    /// are its files in module order, each with its summary now, `changed` says which changed
    /// since (each must still write the same imports), `dirs` what it listed. Nothing is
    /// taken when the table does not fit them.
    pub fn restore(
        &mut self,
        table: ModuleTable,
        files: &[(PathBuf, Summarized)],
        changed: &[bool],
        dirs: Vec<(PathBuf, Option<Stamp>)>,
    ) -> Restoration {
        let fits = table.len() == files.len()
            && changed.len() == files.len()
            && self.modules.is_empty()
            && (files.iter().zip(changed).enumerate()).all(|(id, ((_, summarized), &changed))| {
                !changed || table.same_imports(id, &imports_fingerprint(&summarized.0))
            });
        if !fits {
            return Restoration::Refused;
        }
        let module_of = |id: u32, restored: RestoredModule| {
            let (path, (summary, _, stamp, key)) = &files[id as usize];
            LoadedModule {
                name: restored.name,
                path: path.clone(),
                display: self.display_path(path),
                is_package: restored.is_package,
                summary: summary.clone(),
                stamp: *stamp,
                key: *key,
                targets: restored.targets,
                bound: restored.bound,
                parent: restored.parent,
                installed: restored.installed,
            }
        };
        let Some(Restored {
            modules,
            met,
            warnings: stored_warnings,
        }) = table.restore(module_of)
        else {
            return Restoration::Refused;
        };
        for (id, module) in modules.iter().enumerate() {
            self.by_path
                .insert(path_key(&module.path).into_owned(), id as u32);
            if !self.dists.owns(&module.path) {
                self.by_name.entry(module.name.clone()).or_insert(id as u32);
            }
        }
        self.modules = modules;
        self.third_party = (met.into_iter())
            .map(|module| (module.name.clone(), module))
            .collect();
        let (warnings, warnings_unchanged) = self.loading_warnings(stored_warnings, files, changed);
        self.warnings.extend(warnings);
        self.resolver.restore_listed(dirs);
        self.parsed = self.modules.len();
        Restoration::Restored {
            table_unchanged: warnings_unchanged,
        }
    }

    /// The warnings loading gave about files: the stored ones, but those about `changed`
    /// files made again from their summaries now; and whether that left them as stored.
    fn loading_warnings(
        &self,
        stored: Vec<Warning>,
        files: &[(PathBuf, Summarized)],
        changed: &[bool],
    ) -> (Vec<Warning>, bool) {
        let changed: Vec<usize> = (0..changed.len()).filter(|&id| changed[id]).collect();
        let remade: std::collections::HashSet<&str> = (changed.iter())
            .map(|&id| self.modules[id].display.as_str())
            .collect();
        let stored_count = stored.len();
        let mut warnings: Vec<Warning> = (stored.into_iter())
            .filter(|warning| !remade.contains(warning.file.as_str()))
            .collect();
        let none_dropped = warnings.len() == stored_count;
        for id in changed {
            let module = &self.modules[id];
            if let Some(message) = &files[id].1 .1 {
                warnings.push(Warning {
                    file: module.display.clone(),
                    line: 0,
                    message: message.clone(),
                });
            }
            for edge in module.summary.imports.iter().filter(|edge| edge.level > 0) {
                if relative_base(&module.name, module.is_package, edge.level).is_none() {
                    warnings.push(beyond_top_level(module, edge));
                }
            }
        }
        let unchanged = none_dropped && warnings.len() == stored_count;
        (warnings, unchanged)
    }

    /// Follow what the installed modules `roots` import when they are imported
    /// ([`crate::installed_imports`]), their distributions' edges kept in `cache_dir`.
    pub fn follow_installed_imports(&mut self, roots: Vec<String>, cache_dir: Option<PathBuf>) {
        let site_dirs = self.interpreter.site_dirs();
        let loaded = |path: &Path| {
            let id = self.module_id(path)?;
            Some(self.modules[id as usize].summary.clone())
        };
        let sources = Sources {
            dists: &self.dists,
            site_dirs: &site_dirs,
            extension_suffixes: &self.interpreter.extension_suffixes,
            loaded: &loaded,
            cache_dir: cache_dir.as_deref(),
        };
        self.installed_imports = InstalledImports::build(&sources, roots);
    }

    /// Free what only speeds up loading more modules (resolution caches): closures need the
    /// loaded modules and their edge targets only. Loading again still works, just from cold.
    pub fn finish_loading(&mut self) {
        self.escape_free = self.text_is_json_plain();
        self.resolver.forget_lookups();
        self.resolved_edges = HashMap::default();
        self.third_party = HashMap::default();
        if let Preparsed::Coming(preparse) = &self.preparsed {
            preparse.finish();
        }
        self.preparsed = Preparsed::Made(HashMap::default());
        // Grown by doubling while loading: up to half of it (~1.5 MiB) would be unused.
        self.modules.shrink_to_fit();
    }

    /// Whether every name, path and version a closure can borrow is written in JSON as it is:
    /// module names and display paths (local and third-party), the text of every summary (scope
    /// names, module-level names, imported names, from which stdlib and missing names come)
    /// and the distributions' names and versions. One pass here instead of a check per string
    /// written (a whole tree writes ~30 million of them).
    fn text_is_json_plain(&self) -> bool {
        use crate::spec::is_json_plain;
        // On the pool: the text of every summary is read (~10 ms on a site-packages).
        let modules = self.modules.par_iter().all(|module| {
            is_json_plain(&module.name)
                && is_json_plain(&module.display)
                && module.summary.text_is_json_plain()
        });
        let third_party = self
            .third_party
            .values()
            .all(|module| is_json_plain(&module.name) && is_json_plain(&module.display));
        let dists = self.dists.dists.iter().all(|dist| {
            is_json_plain(&dist.name)
                && is_json_plain(&dist.version)
                && dist.conda_name.as_deref().is_none_or(is_json_plain)
        });
        modules && third_party && dists
    }

    /// Directories listed while resolving imports, each with its stamp before listing.
    pub fn listed_dirs(&self) -> &[(PathBuf, Option<Stamp>)] {
        self.resolver.listed_dirs()
    }

    /// The loaded module imported as `name`.
    pub fn module_named(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// Every module findable by name ([`Project::module_named`]), in no order.
    pub fn named_modules(&self) -> impl Iterator<Item = (&str, u32)> {
        self.by_name.iter().map(|(name, &id)| (name.as_str(), id))
    }

    pub fn module_id(&self, path: &Path) -> Option<u32> {
        self.by_path.get(&*path_key(path)).copied()
    }

    pub fn display_path(&self, path: &Path) -> String {
        // A byte prefix test: Path::strip_prefix walks components, and this runs per reason.
        use std::os::unix::ffi::OsStrExt;
        let bytes = path.as_os_str().as_bytes();
        let cwd = self.cwd.as_os_str().as_bytes();
        let shown = match bytes.strip_prefix(cwd) {
            Some([b'/', rest @ ..]) if !cwd.is_empty() => rest,
            _ => bytes,
        };
        String::from_utf8_lossy(shown).into_owned()
    }

    /// Register a local file (once) and return its id; it is parsed by the next `load`.
    fn register(&mut self, module: PendingModule, wave: &mut Vec<u32>) -> u32 {
        let key = path_key(&module.path);
        if let Some(&id) = self.by_path.get(&*key) {
            return id;
        }
        let id = self.modules.len() as u32;
        self.by_path.insert(key.into_owned(), id);
        // Only local code is followed into by name; a target file that an installed
        // distribution owns stays a leaf when other code imports it, as before.
        if !self.dists.owns(&module.path) {
            self.by_name.entry(module.name.clone()).or_insert(id);
        }
        let display = self.display_path(&module.path);
        self.modules.push(LoadedModule {
            display,
            name: module.name,
            path: module.path,
            is_package: module.is_package,
            summary: Arc::default(),
            stamp: None,
            key: None,
            targets: Vec::new(),
            bound: Vec::new(),
            parent: None,
            installed: Vec::new(),
        });
        wave.push(id);
        id
    }

    /// Load `pending` and every local module they reach; returns their ids in order.
    pub fn load(&mut self, pending: Vec<PendingModule>) -> Vec<u32> {
        let mut wave = Vec::new();
        let ids: Vec<u32> = pending
            .into_iter()
            .map(|module| self.register(module, &mut wave))
            .collect();
        while !wave.is_empty() {
            let done = std::sync::atomic::AtomicUsize::new(self.parsed);
            let summarized_now = self.summarize_unmade(&wave, &done);
            self.parsed += wave.len();
            let mut next = Vec::new();
            for (&id, summarized) in wave.iter().zip(summarized_now) {
                let summarized = summarized.unwrap_or_else(|| self.take_preparsed(id, &done));
                self.set_summary(id, summarized);
                self.resolve_imports(id, &mut next);
            }
            wave = next;
        }
        if let Some(cache) = &self.cache {
            if let Err(error) = cache.save() {
                self.warnings.push(Warning {
                    file: String::new(),
                    line: 0,
                    message: format!("could not write the analysis cache: {error:#}"),
                });
            }
        }
        ids
    }

    /// Summarise, in parallel, the files of `wave` that were not given to be summarised ahead;
    /// `None` for the others, which [`Project::take_preparsed`] waits for one by one, so that
    /// resolving the first of them overlaps summarising the rest.
    fn summarize_unmade(
        &self,
        wave: &[u32],
        done: &std::sync::atomic::AtomicUsize,
    ) -> Vec<Option<Summarized>> {
        let path = |id: u32| self.modules[id as usize].path.as_path();
        let mut summarized: Vec<Option<Summarized>> = wave.iter().map(|_| None).collect();
        // Found here, not on the pool: its threads may still be summarising ahead, and a
        // parallel loop would wait for them to finish before it started.
        let unmade: Vec<usize> = (0..wave.len())
            .filter(|&at| !self.preparsed.has(path(wave[at])))
            .collect();
        if unmade.is_empty() {
            return summarized;
        }
        let cache = self.cache.as_deref();
        let known = self.modules.len();
        let progress = self.progress.as_ref();
        let made: Vec<Summarized> = unmade
            .par_iter()
            .map(|&at| {
                let made = read_and_summarize(path(wave[at]), cache);
                report_parsed(progress, done, known);
                made
            })
            .collect();
        for (at, made) in unmade.into_iter().zip(made) {
            summarized[at] = Some(made);
        }
        summarized
    }

    /// Module `id`'s summary made ahead of loading (waiting for it when it is being made).
    fn take_preparsed(&mut self, id: u32, done: &std::sync::atomic::AtomicUsize) -> Summarized {
        let path = &self.modules[id as usize].path;
        let summarized = self
            .preparsed
            .take(path)
            .unwrap_or_else(|| read_and_summarize(path, self.cache.as_deref()));
        report_parsed(self.progress.as_ref(), done, self.modules.len());
        summarized
    }

    fn set_summary(&mut self, id: u32, (summary, read_problem, stamp, key): Summarized) {
        if let Some(message) = read_problem {
            let file = self.display_path(&self.modules[id as usize].path);
            self.warnings.push(Warning {
                file,
                line: 0,
                message,
            });
        }
        let module = &mut self.modules[id as usize];
        module.summary = summary;
        module.stamp = stamp;
        module.key = key;
    }

    /// Resolve module `id`'s imports, its parent package and its installed context; local
    /// modules first met go to `next`.
    fn resolve_imports(&mut self, id: u32, next: &mut Vec<u32>) {
        let summary = self.modules[id as usize].summary.clone();
        let (targets, bound) = summary
            .imports
            .iter()
            .map(|edge| self.resolve_edge(id as usize, &summary, edge, next))
            .unzip();
        let parent = self.parent_package(id, next);
        let installed = self.installed_context(id);
        let module = &mut self.modules[id as usize];
        module.targets = targets;
        module.bound = bound;
        module.parent = parent;
        module.installed = installed;
    }

    /// The nearest enclosing package of `id` that has code (a namespace package has none),
    /// registered for loading when it is local.
    fn parent_package(&mut self, id: u32, next: &mut Vec<u32>) -> Option<u32> {
        let mut name = self.modules[id as usize].name.clone();
        while let Some((parent, _)) = name.rsplit_once('.') {
            let parent = parent.to_string();
            if let Some(location) = self.resolver.resolve(&parent) {
                let mut targets = Vec::new();
                self.push_location(&parent, location, &mut targets, next);
                if let Some(EdgeTarget::Local(found)) = targets.last() {
                    return (*found != id).then_some(*found);
                }
                if !targets.is_empty() {
                    return None; // a site-packages package: not local code
                }
            }
            name = parent;
        }
        None
    }

    /// See [`LoadedModule::installed`].
    fn installed_context(&mut self, id: u32) -> Vec<Arc<ThirdPartyModule>> {
        let module = &self.modules[id as usize];
        if !self.dists.owns(&module.path) {
            return Vec::new();
        }
        let (name, path) = (module.name.clone(), module.path.clone());
        let mut installed = Vec::new();
        let parts: Vec<&str> = name.split('.').collect();
        for end in 1..parts.len() {
            let ancestor = parts[..end].join(".");
            let Some(location) = self.resolver.resolve(&ancestor) else {
                continue;
            };
            let namespace = location.is_namespace();
            let Location::File {
                path, root_kind, ..
            } = location
            else {
                continue;
            };
            // A namespace package (a directory) has no code to run.
            let installed_code = root_kind == RootKind::Site || self.dists.owns(&path);
            if installed_code && !namespace {
                installed.push(self.third_party_module(&ancestor, path));
            }
        }
        installed.push(self.third_party_module(&name, path));
        installed
    }

    fn resolve_edge(
        &mut self,
        id: usize,
        summary: &ModuleSummary,
        edge: &ImportEdge,
        next: &mut Vec<u32>,
    ) -> (Arc<[EdgeTarget]>, Option<Arc<str>>) {
        let written = summary.edge_module(edge);
        let relative;
        let full = if edge.level == 0 {
            written
        } else {
            match self.absolute_name(id, written, edge) {
                Some(name) => {
                    relative = name;
                    relative.as_str()
                }
                None => {
                    let missing = format!("{}{written}", ".".repeat(edge.level as usize));
                    return (Arc::new([EdgeTarget::Missing(missing)]), None);
                }
            }
        };
        let member = summary.edge_member(edge);
        let shimmed = (self.distutils_shim && edge.level == 0)
            .then(|| crate::installed_imports::shimmed_distutils(full))
            .flatten();
        // What runs is what the shim serves, and what the bound name reads through.
        let served = shimmed.as_deref().unwrap_or(full);
        // Once absolute, an import resolves the same way from every module: resolve it once
        // (relative imports inside one package name the same few modules over and over). The
        // key is built in a reused buffer: most edges are hits and then allocate nothing.
        let mut key = std::mem::take(&mut self.edge_key);
        key.clear();
        key.push_str(served);
        if let Some(member) = member {
            key.push('\0');
            key.push_str(member);
        }
        let resolved = match self.resolved_edges.get(key.as_str()) {
            Some(found) => found.clone(),
            None => {
                let (targets, member_is_module) = self.resolve_absolute(served, member, next);
                let resolved = ResolvedEdge {
                    targets: targets.into(),
                    member_is_module,
                };
                self.resolved_edges.insert(key.clone(), resolved.clone());
                resolved
            }
        };
        self.edge_key = key;
        let bound: Option<Arc<str>> = match member {
            None if edge.aliased || !full.contains('.') => Some(full.into()),
            None => full.split('.').next().map(Arc::from),
            Some(member) if resolved.member_is_module => Some(join_dotted(full, member).into()),
            Some(_) => None,
        };
        let bound = match shimmed {
            Some(_) => bound.map(|name| {
                crate::installed_imports::shimmed_distutils(&name).map_or(name, Arc::from)
            }),
            None => bound,
        };
        (resolved.targets, bound)
    }

    /// The absolute name of a relative import (`edge.level` > 0) of module `id`; `None` (and a
    /// warning) when it climbs above the top-level package.
    fn absolute_name(&mut self, id: usize, written: &str, edge: &ImportEdge) -> Option<String> {
        let module = &self.modules[id];
        match relative_base(&module.name, module.is_package, edge.level) {
            Some(base) => Some(join_dotted(&base, written)),
            None => {
                let warning = beyond_top_level(module, edge);
                self.warnings.push(warning);
                None
            }
        }
    }

    /// What `full` (and its `member`) resolve to, and whether the member is a module.
    fn resolve_absolute(
        &mut self,
        full: &str,
        member: Option<&str>,
        next: &mut Vec<u32>,
    ) -> (Vec<EdgeTarget>, bool) {
        let mut targets = Vec::new();
        if let Some(member) = member.filter(|m| *m != "*") {
            let submodule = join_dotted(full, member);
            if let Some(location) = self.resolver.resolve(&submodule) {
                if !full.is_empty() {
                    self.push_located(full, &mut targets, next);
                }
                self.push_location(&submodule, location, &mut targets, next);
                return (targets, true);
            }
        }
        if full.is_empty() {
            return (targets, false);
        }
        self.push_located(full, &mut targets, next);
        (targets, false)
    }

    /// The longest importable prefix of `name`, with the local parent packages that run first.
    fn push_located(&mut self, name: &str, targets: &mut Vec<EdgeTarget>, next: &mut Vec<u32>) {
        let parts: Vec<&str> = name.split('.').collect();
        let mut found = None;
        for end in (1..=parts.len()).rev() {
            let prefix = parts[..end].join(".");
            if let Some(location) = self.resolver.resolve(&prefix) {
                found = Some((prefix, location));
                break;
            }
        }
        match found {
            Some((prefix, location)) => self.push_location(&prefix, location, targets, next),
            None => targets.push(EdgeTarget::Missing(name.to_string())),
        }
    }

    fn third_party(&mut self, name: &str, path: PathBuf) -> EdgeTarget {
        EdgeTarget::ThirdParty(self.third_party_module(name, path))
    }

    /// The installed module `name` (file `path`), made once per name.
    fn third_party_module(&mut self, name: &str, path: PathBuf) -> Arc<ThirdPartyModule> {
        if let Some(known) = self.third_party.get(name) {
            return known.clone();
        }
        let top = name.split('.').next().unwrap_or_default();
        let module = Arc::new(ThirdPartyModule {
            name: name.to_string(),
            display: self.display_path(&path),
            owner: self.dists.owner_of(&path, top),
        });
        self.third_party.insert(name.to_string(), module.clone());
        module
    }

    fn push_location(
        &mut self,
        name: &str,
        location: Location,
        targets: &mut Vec<EdgeTarget>,
        next: &mut Vec<u32>,
    ) {
        match location {
            Location::Stdlib => targets.push(EdgeTarget::Stdlib(name.to_string())),
            Location::File {
                path,
                is_package,
                root,
                root_kind,
            } => {
                let owned = self.dists.owns(&path);
                if root_kind == RootKind::Site || owned {
                    targets.push(self.third_party(name, path));
                    return;
                }
                // Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
                if let Some((parent, _)) = name.rsplit_once('.') {
                    if let Some(parent_location) = self.resolver.resolve(parent) {
                        self.push_location(parent, parent_location, targets, next);
                    }
                }
                if path.is_dir() {
                    return; // a local namespace package has no code of its own
                }
                if !is_python_source(&path) {
                    targets.push(self.third_party(name, path));
                    return;
                }
                let name = module_name_for(&root, &path)
                    .map(|(n, _)| n)
                    .unwrap_or_else(|| name.to_string());
                let id = self.register(
                    PendingModule {
                        path,
                        name,
                        is_package,
                    },
                    next,
                );
                targets.push(EdgeTarget::Local(id));
            }
        }
    }
}

/// What became of a stored result's [`ModuleTable`] ([`Project::restore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restoration {
    /// It did not fit: modules are loaded and every import resolved.
    Refused,
    /// Its modules were taken; `table_unchanged` when a table made of them now would be the
    /// same (no warning about a changed file came or went), so its bytes can be kept as they are.
    Restored { table_unchanged: bool },
}

/// The warning for a relative import of `module` that climbs above its top-level package.
fn beyond_top_level(module: &LoadedModule, edge: &ImportEdge) -> Warning {
    Warning {
        file: module.display.clone(),
        line: edge.line,
        message: format!(
            "relative import (level {}) reaches beyond the top-level package of {}",
            edge.level, module.name
        ),
    }
}

fn is_python_source(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "py" || e == "pyi" || e == "pyw")
}

/// A file's summary, the problem reading it (if any), its stamp taken before reading and its
/// key in the summary cache (where one is used).
pub type Summarized = (
    Arc<ModuleSummary>,
    Option<String>,
    Option<Stamp>,
    Option<CacheKey>,
);

impl Project {
    /// Summaries made ahead of loading, with the paths they were read from.
    pub fn set_preparsed(&mut self, preparsed: Vec<(PathBuf, Summarized)>) {
        self.preparsed = Preparsed::Made(
            preparsed
                .into_iter()
                .map(|(path, summarized)| (path_key(&path).into_owned(), summarized))
                .collect(),
        );
    }

    /// Summaries being made while loading goes on ([`Preparse`]).
    pub fn set_preparsing(&mut self, preparse: Arc<Preparse>) {
        self.preparsed = Preparsed::Coming(preparse);
    }
}

/// Summaries made, or being made, before loading asked for them; by
/// [`crate::paths::path_key`].
enum Preparsed {
    Made(HashMap<OsString, Summarized>),
    Coming(Arc<Preparse>),
}

impl Preparsed {
    fn has(&self, path: &Path) -> bool {
        match self {
            Preparsed::Made(made) => made.contains_key(&*path_key(path)),
            Preparsed::Coming(preparse) => preparse.has(path),
        }
    }

    fn take(&mut self, path: &Path) -> Option<Summarized> {
        match self {
            Preparsed::Made(made) => made.remove(&*path_key(path)),
            Preparsed::Coming(preparse) => preparse.take(path),
        }
    }
}

impl Drop for Preparsed {
    fn drop(&mut self) {
        // Dropped unfinished when loading ends early: the pool need not go on with the rest.
        if let Preparsed::Coming(preparse) = self {
            preparse.stop();
        }
    }
}

fn report_parsed(
    progress: Option<&crate::ParseProgress>,
    done: &std::sync::atomic::AtomicUsize,
    known: usize,
) {
    if let Some(progress) = progress {
        progress(
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
            known,
        );
    }
}

pub fn read_and_summarize(path: &Path, cache: Option<&SummaryCache>) -> Summarized {
    let (bytes, stamp) = match read_source(path) {
        Ok(read) => read,
        Err((problem, stamp)) => return (Arc::default(), Some(problem), stamp, None),
    };
    let key = cache.map(|_| SummaryCache::key(&bytes));
    if let (Some(cache), Some(key)) = (cache, key.as_ref()) {
        if let Some(summary) = cache.get(key) {
            return (summary, None, stamp, Some(*key));
        }
    }
    let decoded = decode(&bytes);
    let summary = Arc::new(summarize(&decoded.text));
    if let (Some(cache), Some(key)) = (cache, key) {
        cache.insert(key, summary.clone());
    }
    (summary, decoded.lossy, stamp, key)
}

/// Like [`read_and_summarize`], but a file whose stamp is still `known` (stamp and summary
/// key from a stored result) is not read: its summary comes from the cache by that key.
pub fn recall_or_summarize(
    path: &Path,
    cache: Option<&SummaryCache>,
    known: Option<&(Stamp, CacheKey)>,
) -> Summarized {
    if let (Some(cache), Some((stamp, key))) = (cache, known) {
        let now = Stamp::of(path);
        if now.as_ref() == Some(stamp) {
            if let Some(summary) = cache.get(key) {
                return (summary, None, now, Some(*key));
            }
        }
    }
    read_and_summarize(path, cache)
}

/// The file's bytes and its stamp, taken from the open file before reading it (one path lookup,
/// and a change after the stamp shows up on the next run rather than going unnoticed).
/// Why a source file was not read, and its stamp when it has one.
type Unread = (String, Option<Stamp>);

fn read_source(path: &Path) -> Result<(Vec<u8>, Option<Stamp>), Unread> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|error| {
        // An unreadable file still has a stamp: a chmod that makes it readable changes it.
        let stamp = std::fs::metadata(path)
            .ok()
            .map(|meta| Stamp::from_metadata(&meta));
        (format!("could not read: {error}"), stamp)
    })?;
    let metadata = file
        .metadata()
        .map_err(|error| (format!("could not read: {error}"), None))?;
    let stamp = Some(Stamp::from_metadata(&metadata));
    if metadata.len() > MAX_SOURCE_BYTES {
        let problem = format!(
            "skipped: {} bytes is over the {} MiB limit for source files",
            metadata.len(),
            MAX_SOURCE_BYTES >> 20
        );
        return Err((problem, stamp));
    }
    // One more byte than the size, so that reading to the end needs no second allocation.
    let mut bytes = Vec::with_capacity(metadata.len() as usize + 1);
    match file.read_to_end(&mut bytes) {
        Ok(_) => Ok((bytes, stamp)),
        Err(error) => Err((format!("could not read: {error}"), stamp)),
    }
}

/// The package a relative import of `level` dots is taken from.
pub fn relative_base(module: &str, is_package: bool, level: u32) -> Option<String> {
    let mut parts: Vec<&str> = module.split('.').collect();
    if !is_package {
        parts.pop();
    }
    for _ in 1..level {
        parts.pop()?;
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.join("."))
}

fn join_dotted(base: &str, name: &str) -> String {
    match (base.is_empty(), name.is_empty()) {
        (true, _) => name.to_string(),
        (_, true) => base.to_string(),
        _ => format!("{base}.{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_whose_stamp_is_known_is_taken_from_the_cache_unread() {
        let dir = tempfile::tempdir().unwrap();
        let cache = SummaryCache::open(dir.path());
        let path = dir.path().join("module.py");
        std::fs::write(&path, "import json\n").unwrap();
        let (read, _, stamp, key) = read_and_summarize(&path, Some(&cache));
        assert_eq!(read.imports.len(), 1);
        let known = (stamp.unwrap(), key.unwrap());
        // What the key holds stands for the file: had it been read, its import would show.
        cache.insert(known.1, Arc::new(summarize("x = 1\n")));
        let recalled = recall_or_summarize(&path, Some(&cache), Some(&known));
        assert!(recalled.0.imports.is_empty());
        assert_eq!((recalled.2, recalled.3), (Some(known.0), Some(known.1)));
        // Once the stamp differs, the file is read again.
        std::fs::write(&path, "import csv\n").unwrap();
        let read_again = recall_or_summarize(&path, Some(&cache), Some(&known));
        assert_eq!(read_again.0.imports.len(), 1);
        assert_ne!(read_again.3, Some(known.1));
    }

    /// An interpreter with nothing in its standard library or site directories.
    fn bare_interpreter() -> Interpreter {
        let markers: std::collections::HashMap<&str, &str> = [
            "implementation_name",
            "implementation_version",
            "os_name",
            "platform_machine",
            "platform_python_implementation",
            "platform_release",
            "platform_system",
            "platform_version",
            "python_full_version",
            "python_version",
            "sys_platform",
        ]
        .into_iter()
        .map(|field| (field, ""))
        .collect();
        serde_json::from_value(serde_json::json!({
            "executable": "/none/python3", "prefix": "/none", "base_prefix": "/none",
            "version": "3.11.0", "path": [], "stdlib_dirs": [], "stdlib_module_names": [],
            "builtin_module_names": [], "extension_suffixes": [], "soabi": "",
            "platform_tag": "", "markers": markers,
        }))
        .unwrap()
    }

    #[test]
    fn loading_resolves_the_first_files_while_the_last_are_still_being_summarised() {
        // The files after the first ten are summarised only once loading has taken those
        // ten; there is one more of them than the pool has threads, so that every pool thread
        // is held until then.
        const FIRST: usize = 10;
        let files = FIRST + rayon::current_num_threads() + 1;
        let dir = tempfile::tempdir().unwrap();
        let pending: Vec<PendingModule> = (0..files)
            .map(|n| {
                let path = dir.path().join(format!("m{n}.py"));
                std::fs::write(&path, format!("import m{}\n", (n + 1) % files)).unwrap();
                let name = format!("m{n}");
                PendingModule {
                    path,
                    name,
                    is_package: false,
                }
            })
            .collect();
        let paths: Vec<PathBuf> = pending.iter().map(|m| m.path.clone()).collect();
        let held: std::collections::HashSet<PathBuf> = paths[FIRST..].iter().cloned().collect();
        let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let (opened, waited) = (gate.clone(), gate);
        let root = dir.path().to_path_buf();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let preparse = Preparse::start_with(paths, move |path| {
                if held.contains(path) {
                    let (open, turned) = &*waited;
                    let guard = open.lock().unwrap();
                    drop(turned.wait_while(guard, |open| !*open).unwrap());
                }
                read_and_summarize(path, None)
            });
            let mut project = Project::new(bare_interpreter(), DistIndex::default(), &[root], None);
            project.set_preparsing(preparse);
            project.progress = Some(Arc::new(move |done, _| {
                if done == FIRST {
                    *opened.0.lock().unwrap() = true;
                    opened.1.notify_all();
                }
            }));
            let ids = project.load(pending);
            project.finish_loading();
            let targets: Vec<String> = (ids.iter())
                .map(|&id| format!("{:?}", project.modules[id as usize].targets))
                .collect();
            sender.send(targets).unwrap();
        });
        let targets = receiver
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("loading waited for every summary before resolving the first");
        let expected: Vec<String> = (0..files)
            .map(|n| format!("[[Local({})]]", (n + 1) % files))
            .collect();
        assert_eq!(targets, expected);
    }

    #[test]
    fn relative_bases() {
        assert_eq!(
            relative_base("pkg.sub.mod", false, 1).as_deref(),
            Some("pkg.sub")
        );
        assert_eq!(
            relative_base("pkg.sub", true, 1).as_deref(),
            Some("pkg.sub")
        );
        assert_eq!(
            relative_base("pkg.sub.mod", false, 2).as_deref(),
            Some("pkg")
        );
        assert_eq!(relative_base("mod", false, 1), None);
    }
}
