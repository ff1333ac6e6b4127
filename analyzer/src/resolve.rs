//! Finding the file behind a dotted module name, the way the target interpreter would.
//!
//! Order follows `sys.path`: the local source roots first (a script's directory comes first),
//! then the stdlib by name, then site directories. Regular packages and modules win over PEP 420
//! namespace portions, and namespace packages are searched per submodule across all portions,
//! so `google.protobuf` and `google.api_core` land in different distributions.

use rustc_hash::FxHashMap as HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootKind {
    Local,
    Site,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Location {
    /// A builtin or stdlib module of the target interpreter.
    Stdlib,
    /// A file (module, package `__init__`, extension) or a namespace directory.
    File {
        path: PathBuf,
        is_package: bool,
        /// The sys.path entry it was found under (shared: every location holds one).
        root: Arc<Path>,
        root_kind: RootKind,
    },
}

impl Location {
    /// A namespace package: its path is a directory (a package's is its `__init__` file, a
    /// module's its file), told without asking the file system.
    pub fn is_namespace(&self) -> bool {
        match self {
            Location::File {
                path, is_package, ..
            } => {
                let file = path.file_name().map(|name| name.as_encoded_bytes());
                *is_package && !file.is_some_and(|name| name.starts_with(b"__init__."))
            }
            Location::Stdlib => false,
        }
    }
}

/// What a directory holds: entry name -> is a directory.
type Listing = Arc<HashMap<String, bool>>;

pub struct Resolver {
    roots: Vec<(PathBuf, RootKind)>,
    /// The same roots, shared by the locations found under them.
    root_paths: Vec<Arc<Path>>,
    stdlib: std::collections::HashSet<String>,
    stdlib_dirs: Vec<PathBuf>,
    builtins: std::collections::HashSet<String>,
    extension_suffixes: Vec<String>,
    /// By [`crate::paths::path_key`].
    listings: HashMap<std::ffi::OsString, Listing>,
    /// Every directory listed, in order, with its stamp taken before listing it.
    listed: Vec<(PathBuf, Option<crate::results::Stamp>)>,
    resolved: HashMap<String, Option<Location>>,
}

enum Step {
    Module(PathBuf, Arc<Path>, RootKind),
    Package(PathBuf, Arc<Path>, RootKind),
}

/// One dotted component looked up in a list of directories.
enum Found {
    Stdlib,
    Step(Step),
    /// Directories without `__init__`: portions of a namespace package, in path order.
    Portions(Vec<(PathBuf, RootKind)>),
    Nothing,
}

impl Resolver {
    pub fn new(
        local_roots: &[PathBuf],
        site_dirs: &[PathBuf],
        stdlib_dirs: &[PathBuf],
        stdlib: std::collections::HashSet<String>,
        builtins: std::collections::HashSet<String>,
        extension_suffixes: Vec<String>,
    ) -> Resolver {
        let mut roots: Vec<(PathBuf, RootKind)> = Vec::new();
        for root in local_roots {
            if !roots.iter().any(|(r, _)| r == root) {
                roots.push((root.clone(), RootKind::Local));
            }
        }
        for dir in site_dirs {
            if !roots.iter().any(|(r, _)| r == dir) {
                roots.push((dir.clone(), RootKind::Site));
            }
        }
        Resolver {
            root_paths: roots
                .iter()
                .map(|(root, _)| Arc::from(root.as_path()))
                .collect(),
            roots,
            stdlib,
            stdlib_dirs: stdlib_dirs.to_vec(),
            builtins,
            extension_suffixes,
            listings: HashMap::default(),
            listed: Vec::new(),
            resolved: HashMap::default(),
        }
    }

    /// Drop the directory listings and resolved names kept to speed up lookups (they are
    /// rebuilt on demand); what was listed is still reported by [`Resolver::listed_dirs`].
    pub fn forget_lookups(&mut self) {
        self.listings = HashMap::default();
        self.resolved = HashMap::default();
    }

    pub fn listed_dirs(&self) -> &[(PathBuf, Option<crate::results::Stamp>)] {
        &self.listed
    }

    /// What a stored result's resolving listed (still the same), for the next result to keep
    /// ([`crate::project::Project::restore`]).
    pub fn restore_listed(&mut self, listed: Vec<(PathBuf, Option<crate::results::Stamp>)>) {
        self.listed = listed;
    }

    pub fn is_stdlib_name(&self, top_level: &str) -> bool {
        self.stdlib.contains(top_level) || self.builtins.contains(top_level)
    }

    /// Where `name` (absolute, dotted) comes from; `None` when nothing provides it.
    pub fn resolve(&mut self, name: &str) -> Option<Location> {
        if let Some(found) = self.resolved.get(name) {
            return found.clone();
        }
        let found = self.resolve_uncached(name);
        self.resolved.insert(name.to_string(), found.clone());
        found
    }

    fn resolve_uncached(&mut self, name: &str) -> Option<Location> {
        let parts: Vec<&str> = name.split('.').collect();
        let top = parts[0];
        if top.is_empty() {
            return None;
        }
        if self.builtins.contains(top) && parts.len() == 1 {
            return Some(Location::Stdlib);
        }
        if self.stdlib.contains(top) && parts.len() > 1 && !self.local_shadows(top) {
            // `from typing import TYPE_CHECKING` names an attribute, `xml.etree` a submodule.
            return self
                .stdlib_submodule_exists(&parts)
                .then_some(Location::Stdlib);
        }
        let mut dirs: Vec<(PathBuf, RootKind)> = self.roots.clone();
        let mut last: Option<Location> = None;
        for (index, part) in parts.iter().enumerate() {
            let is_top = index == 0;
            let is_last = index + 1 == parts.len();
            match self.find_part(&dirs, part, is_top, &last) {
                Found::Stdlib => return Some(Location::Stdlib),
                Found::Step(Step::Package(init, root, kind)) => {
                    let package_dir = init.parent().map(Path::to_path_buf).unwrap_or_default();
                    last = Some(Location::File {
                        path: init,
                        is_package: true,
                        root,
                        root_kind: kind,
                    });
                    dirs = vec![(package_dir, kind)];
                }
                Found::Step(Step::Module(file, root, kind)) => {
                    last = Some(Location::File {
                        path: file,
                        is_package: false,
                        root,
                        root_kind: kind,
                    });
                    // `a.b` where `a` is a plain module: `b` is an attribute, `a` is what runs.
                    return if is_last { last } else { None };
                }
                Found::Portions(portions) => {
                    let (first, kind) = portions[0].clone();
                    let root = if is_top {
                        Arc::from(first.parent().unwrap_or(Path::new("")))
                    } else {
                        self.root_of(&last)
                    };
                    last = Some(Location::File {
                        path: first,
                        is_package: true,
                        root,
                        root_kind: kind,
                    });
                    dirs = portions;
                }
                Found::Nothing => return None,
            }
        }
        last
    }

    /// What dotted component `part` is in `dirs` (the roots in order at the top level, else
    /// the enclosing package's directories), as the import system searches them.
    fn find_part(
        &mut self,
        dirs: &[(PathBuf, RootKind)],
        part: &str,
        is_top: bool,
        last: &Option<Location>,
    ) -> Found {
        let mut portions: Vec<(PathBuf, RootKind)> = Vec::new();
        for (dir_index, (dir, kind)) in dirs.iter().enumerate() {
            // The stdlib sits between the local roots and the site directories on sys.path.
            if is_top && *kind == RootKind::Site && self.stdlib.contains(part) {
                return Found::Stdlib;
            }
            let listing = self.listing(dir);
            let root = if is_top {
                self.root_paths[dir_index].clone()
            } else {
                self.root_of(last)
            };
            if let Some(&true) = listing.get(part) {
                let package_dir = dir.join(part);
                let inner = self.listing(&package_dir);
                let init = ["__init__.py", "__init__.pyi"]
                    .into_iter()
                    .find(|init| inner.contains_key(*init));
                if let Some(init) = init {
                    return Found::Step(Step::Package(package_dir.join(init), root, *kind));
                }
            }
            if let Some(file) = self.module_file(&listing, part) {
                return Found::Step(Step::Module(dir.join(file), root, *kind));
            }
            if let Some(&true) = listing.get(part) {
                portions.push((dir.join(part), *kind));
            }
        }
        if is_top && self.stdlib.contains(part) {
            Found::Stdlib
        } else if portions.is_empty() {
            Found::Nothing
        } else {
            Found::Portions(portions)
        }
    }

    fn local_shadows(&mut self, top: &str) -> bool {
        let locals: Vec<PathBuf> = self
            .roots
            .iter()
            .filter(|(_, k)| *k == RootKind::Local)
            .map(|(r, _)| r.clone())
            .collect();
        locals.iter().any(|root| {
            let listing = self.listing(root);
            listing.get(&format!("{top}.py")) == Some(&false)
                || (listing.get(top) == Some(&true)
                    && self.listing(&root.join(top)).contains_key("__init__.py"))
        })
    }

    /// Stdlib packages are plain directories of the stdlib dir (extensions are top-level only).
    fn stdlib_submodule_exists(&mut self, parts: &[&str]) -> bool {
        let dirs = self.stdlib_dirs.clone();
        dirs.iter().any(|stdlib| {
            let mut dir = stdlib.clone();
            for (index, part) in parts.iter().enumerate() {
                let listing = self.listing(&dir);
                if listing.get(*part) == Some(&true) {
                    dir = dir.join(part);
                } else {
                    return index + 1 == parts.len() && self.module_file(&listing, part).is_some();
                }
            }
            true
        })
    }

    fn root_of(&self, location: &Option<Location>) -> Arc<Path> {
        match location {
            Some(Location::File { root, .. }) => root.clone(),
            _ => Arc::from(Path::new("")),
        }
    }

    fn module_file(&self, listing: &HashMap<String, bool>, part: &str) -> Option<String> {
        let source = format!("{part}.py");
        if listing.get(&source) == Some(&false) {
            return Some(source);
        }
        for suffix in &self.extension_suffixes {
            let name = format!("{part}{suffix}");
            if listing.get(&name) == Some(&false) {
                return Some(name);
            }
        }
        let stub = format!("{part}.pyi");
        (listing.get(&stub) == Some(&false)).then_some(stub)
    }

    fn listing(&mut self, dir: &Path) -> Listing {
        let key = crate::paths::path_key(dir);
        if let Some(listing) = self.listings.get(&*key) {
            return listing.clone();
        }
        let mut entries = HashMap::default();
        self.listed
            .push((dir.to_path_buf(), crate::results::Stamp::of(dir)));
        if let Ok(read) = std::fs::read_dir(dir) {
            for entry in read.flatten() {
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                let is_dir = match entry.file_type() {
                    Ok(t) if t.is_symlink() => entry.path().is_dir(),
                    Ok(t) => t.is_dir(),
                    Err(_) => false,
                };
                entries.insert(name, is_dir);
            }
        }
        let listing = Arc::new(entries);
        self.listings.insert(key.into_owned(), listing.clone());
        listing
    }
}

/// Dotted name of a file under `root` (`pkg/sub/__init__.py` -> `pkg.sub`).
pub fn module_name_for(root: &Path, path: &Path) -> Option<(String, bool)> {
    let relative = path.strip_prefix(root).ok()?;
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop()?;
    let stem = file.split('.').next().unwrap_or_default().to_string();
    let is_package = stem == "__init__";
    if !is_package {
        parts.push(stem);
    }
    if parts.is_empty() || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    Some((parts.join("."), is_package))
}
