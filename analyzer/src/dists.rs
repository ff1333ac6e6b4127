//! Installed distributions: which files each one owns and what it requires.
//!
//! The index is built from installer metadata only (dist-info RECORD, egg-info
//! installed-files.txt, top_level.txt, conda-meta/*.json), so `yaml` maps to PyYAML and
//! `google.protobuf` to protobuf without importing anything.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use rustc_hash::FxHashMap;

use pep508_rs::{ExtraName, MarkerEnvironment, MarkerEnvironmentBuilder, Requirement};
use serde::{Deserialize, Serialize};

use crate::interpreter::Interpreter;
use crate::paths::path_key;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetadataKind {
    DistInfo,
    EggInfo,
    Conda,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Distribution {
    pub name: String,
    pub version: String,
    pub kind: MetadataKind,
    /// The dist-info / egg-info directory, or the conda-meta json file.
    pub metadata_path: PathBuf,
    pub requires: Vec<String>,
    /// Every installed file, absolute and lexically normalised.
    pub files: Vec<PathBuf>,
    /// The conda package that installed it, when the prefix is a conda env.
    pub conda_name: Option<String>,
    /// For an editable install, the project's importable names and where they are (their
    /// files are among `files`).
    #[serde(default)]
    pub editable: Vec<EditableRoot>,
    /// Installed files of an editable install that only point at the project (its `.pth`,
    /// setuptools' finder): what a copy of the project's files replaces.
    #[serde(default)]
    pub editable_launchers: Vec<PathBuf>,
}

/// Owners of files and directories in the environment.
#[derive(Default)]
pub struct DistIndex {
    pub dists: Vec<Distribution>,
    // Keyed by the paths' bytes (see crate::paths): hashing a Path walks its components, which
    // made indexing a site-packages' ~40k installed files cost more than reading their RECORDs.
    // Stored paths are normalised, hence plain; lookups go through `path_key`.
    by_file: FxHashMap<OsString, Vec<u32>>,
    by_dir: FxHashMap<OsString, BTreeSet<u32>>,
    by_top_level: HashMap<String, BTreeSet<u32>>,
    by_name: HashMap<String, u32>,
    /// PEP 503 name of each distribution, by id (what lists of them are sorted by).
    normalized_names: Vec<String>,
    pub problems: Vec<String>,
    /// The owners of files and of directories, when the index was read from the dists cache
    /// (`by_file` and `by_dir` are empty then, and so are the distributions' `files`).
    stored: Option<(stored::PathTable, stored::PathTable)>,
    /// Closures already computed, by their sorted roots: most functions share a few root sets.
    closures: std::sync::Mutex<HashMap<Vec<u32>, std::sync::Arc<RequirementClosure>>>,
    /// The closure of no roots, what most targets ask for: kept outside the lock.
    empty_closure: std::sync::OnceLock<std::sync::Arc<RequirementClosure>>,
}

pub mod editable;
mod stored;
pub use editable::EditableRoot;
pub use stored::StoredIndex;

/// Who owns a module file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Owner {
    One(u32),
    Ambiguous(Vec<u32>),
    Unknown,
}

pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut last_dash = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !last_dash {
                out.push('-');
            }
            last_dash = true;
        } else {
            out.push(c.to_ascii_lowercase());
            last_dash = false;
        }
    }
    out
}

impl DistIndex {
    pub fn build(site_dirs: &[PathBuf], prefix: Option<&Path>) -> DistIndex {
        let mut index = DistIndex::default();
        for site in site_dirs {
            let Ok(entries) = std::fs::read_dir(site) else {
                continue;
            };
            let mut names: Vec<PathBuf> =
                entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            names.sort();
            for path in names {
                let file_name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_string();
                let result = if file_name.ends_with(".dist-info") {
                    read_dist_info(site, &path)
                } else if file_name.ends_with(".egg-info") {
                    read_egg_info(site, &path)
                } else {
                    continue;
                };
                match result {
                    Ok(dist) => index.add(dist),
                    Err(message) => index
                        .problems
                        .push(format!("{}: {message}", path.display())),
                }
            }
        }
        if let Some(prefix) = prefix {
            index.add_conda_meta(prefix);
        }
        index
    }

    fn add(&mut self, dist: Distribution) {
        let key = normalize_name(&dist.name);
        if self.by_name.contains_key(&key) {
            // The first copy on sys.path is the one Python imports; later ones are shadowed.
            return;
        }
        let id = self.dists.len() as u32;
        for file in &dist.files {
            use std::os::unix::ffi::OsStrExt;
            let bytes = file.as_os_str().as_bytes();
            self.by_file
                .entry(file.as_os_str().to_owned())
                .or_default()
                .push(id);
            // Ancestors by cutting at slashes (the paths are normal): Path::parent walks
            // components, a cost paid for every installed file.
            let mut end = bytes.len();
            while let Some(slash) = memchr::memrchr(b'/', &bytes[..end]) {
                let dir = &bytes[..slash.max(1)];
                // Ancestors were filled when this dist first reached `dir`.
                if !self
                    .by_dir
                    .entry(std::ffi::OsStr::from_bytes(dir).to_owned())
                    .or_default()
                    .insert(id)
                {
                    break;
                }
                if slash == 0 {
                    break;
                }
                end = slash;
            }
        }
        let editable_names = dist.editable.iter().map(|root| root.name.clone());
        for top in top_level_names(&dist).into_iter().chain(editable_names) {
            self.by_top_level.entry(top).or_default().insert(id);
        }
        self.by_name.insert(key.clone(), id);
        self.normalized_names.push(key);
        self.dists.push(dist);
    }

    fn add_conda_meta(&mut self, prefix: &Path) {
        let Ok(entries) = std::fs::read_dir(prefix.join("conda-meta")) else {
            return;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for path in files {
            let parsed: Result<serde_json::Value, String> = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()));
            let meta = match parsed {
                Ok(meta) => meta,
                Err(message) => {
                    self.problems.push(format!("{}: {message}", path.display()));
                    continue;
                }
            };
            let (Some(name), Some(version)) = (meta["name"].as_str(), meta["version"].as_str())
            else {
                self.problems.push(format!(
                    "{}: missing \"name\" or \"version\"",
                    path.display()
                ));
                continue;
            };
            let files: Vec<PathBuf> = meta["files"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .map(|f| normalize_path(&prefix.join(f)))
                .collect();
            // A conda package that carries a dist-info is the same distribution pip would see.
            let owner = files.iter().find_map(|f| {
                f.file_name()
                    .is_some_and(|n| n == "METADATA")
                    .then(|| self.by_file.get(&*path_key(f)))
                    .flatten()
            });
            if let Some(owners) = owner {
                let id = owners[0] as usize;
                self.dists[id].conda_name = Some(name.to_string());
                continue;
            }
            let requires = meta["depends"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d.as_str())
                .filter_map(|d| d.split_whitespace().next().map(str::to_string))
                .collect();
            self.add(Distribution {
                name: name.to_string(),
                version: version.to_string(),
                kind: MetadataKind::Conda,
                metadata_path: path.clone(),
                requires,
                files,
                conda_name: Some(name.to_string()),
                editable: Vec::new(),
                editable_launchers: Vec::new(),
            });
        }
    }

    /// Owner of a module file, or of a namespace package directory.
    pub fn owner_of(&self, path: &Path, top_level: &str) -> Owner {
        let key = path_key(path);
        if let Some(owners) = self.file_owners(&key) {
            return owner_from(owners);
        }
        if path.is_dir() {
            if let Some(owners) = self.dir_owners(&key) {
                return owner_from(owners);
            }
        }
        match self.by_top_level.get(top_level) {
            Some(owners) => owner_from(owners.iter().copied().collect()),
            None => Owner::Unknown,
        }
    }

    /// `name==version` of the one distribution whose RECORD (or conda-meta) lists `file`.
    pub fn distribution_of(&self, file: &Path) -> Option<String> {
        match self.owner_of(&normalize_path(file), "") {
            Owner::One(id) => {
                let dist = &self.dists[id as usize];
                Some(format!("{}=={}", dist.name, dist.version))
            }
            _ => None,
        }
    }

    /// A file or directory some distribution installed.
    pub fn owns(&self, path: &Path) -> bool {
        let key = path_key(path);
        self.file_owners(&key).is_some() || (path.is_dir() && self.dir_owners(&key).is_some())
    }

    /// The first distribution that installed the file `path` (absolute and normal), without
    /// looking at the file system.
    pub fn installer_of(&self, path: &Path) -> Option<u32> {
        self.file_owners(&path_key(path))?.first().copied()
    }

    /// Whether [`DistIndex::installer_of`] may know a file whose path starts with `prefix`
    /// (absolute and normal): false only when no installed file's does (one search of a
    /// stored index answers for every file a module name may be in).
    pub fn may_install_under(&self, prefix: &Path) -> bool {
        match (&self.stored, path_key(prefix)) {
            (Some((files, _)), std::borrow::Cow::Borrowed(key)) => {
                files.has_prefix(key.as_encoded_bytes())
            }
            _ => true,
        }
    }

    /// The distributions that installed the file `key` ([`path_key`] of a normal path).
    fn file_owners(&self, key: &std::ffi::OsStr) -> Option<Vec<u32>> {
        match &self.stored {
            Some((files, _)) => files.lookup(key),
            None => self.by_file.get(key).cloned(),
        }
    }

    /// The distributions that installed something under the directory `key`.
    fn dir_owners(&self, key: &std::ffi::OsStr) -> Option<Vec<u32>> {
        match &self.stored {
            Some((_, dirs)) => dirs.lookup(key),
            None => Some(self.by_dir.get(key)?.iter().copied().collect()),
        }
    }

    /// Each distribution's installed files, sorted (what a stored index keeps of them).
    pub fn sorted_files(&self) -> Vec<Vec<&std::ffi::OsStr>> {
        let mut files: Vec<Vec<&std::ffi::OsStr>> = match &self.stored {
            Some((table, _)) => {
                let mut files = vec![Vec::new(); self.dists.len()];
                for (path, owner) in table.pairs() {
                    files[owner as usize].push(path);
                }
                files
            }
            None => (self.dists.iter())
                .map(|dist| dist.files.iter().map(|f| f.as_os_str()).collect())
                .collect(),
        };
        files.iter_mut().for_each(|list| list.sort_unstable());
        files
    }

    pub fn normalized_name(&self, id: u32) -> &str {
        &self.normalized_names[id as usize]
    }

    pub fn by_name(&self, name: &str) -> Option<u32> {
        self.by_name.get(&normalize_name(name)).copied()
    }

    /// The transitive Requires-Dist closure of `roots`, markers evaluated for `interpreter`,
    /// extras followed only where a requirement asks for them.
    pub fn requirement_closure(
        &self,
        roots: &[u32],
        interpreter: &Interpreter,
    ) -> std::sync::Arc<RequirementClosure> {
        if roots.is_empty() {
            let empty = self.empty_closure.get_or_init(|| {
                std::sync::Arc::new(self.compute_requirement_closure(&[], interpreter))
            });
            return empty.clone();
        }
        let mut key = roots.to_vec();
        key.sort_unstable();
        if let Some(found) = self.closures.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return found;
        }
        let closure = std::sync::Arc::new(self.compute_requirement_closure(&key, interpreter));
        if let Ok(mut closures) = self.closures.lock() {
            closures.insert(key, closure.clone());
        }
        closure
    }

    fn compute_requirement_closure(
        &self,
        roots: &[u32],
        interpreter: &Interpreter,
    ) -> RequirementClosure {
        let mut closure = RequirementClosure::default();
        let Some(environment) = marker_environment(interpreter) else {
            closure.problems.push(format!(
                "the interpreter's version {:?} is not a PEP 440 version; requirements were not followed",
                interpreter.markers.python_full_version
            ));
            for &root in roots {
                closure.reached.insert(root, vec![root]);
            }
            return closure;
        };
        let mut seen: BTreeSet<(u32, Option<String>)> = BTreeSet::new();
        let mut queue: VecDeque<(u32, Option<String>, Vec<u32>)> = VecDeque::new();
        for &root in roots {
            queue.push_back((root, None, vec![root]));
        }
        while let Some((id, extra, chain)) = queue.pop_front() {
            if !seen.insert((id, extra.clone())) {
                continue;
            }
            closure.reached.entry(id).or_insert_with(|| chain.clone());
            let dist = &self.dists[id as usize];
            let extras: Vec<ExtraName> = extra
                .iter()
                .filter_map(|e| ExtraName::from_str(e).ok())
                .collect();
            for line in &dist.requires {
                if dist.kind == MetadataKind::Conda {
                    if let Some(dep) = self.by_conda_or_pip_name(line) {
                        let mut next = chain.clone();
                        next.push(dep);
                        queue.push_back((dep, None, next));
                    }
                    continue;
                }
                let requirement = match Requirement::<pep508_rs::VerbatimUrl>::from_str(line) {
                    Ok(requirement) => requirement,
                    Err(error) => {
                        closure.problems.push(format!(
                            "{}: unparsable Requires-Dist {line:?}: {error}",
                            dist.metadata_path.display()
                        ));
                        continue;
                    }
                };
                if !requirement.marker.evaluate(&environment, &extras) {
                    continue;
                }
                let name = requirement.name.to_string();
                match self.by_name(&name) {
                    Some(dep) => {
                        let mut next = chain.clone();
                        next.push(dep);
                        queue.push_back((dep, None, next.clone()));
                        for wanted in &requirement.extras {
                            queue.push_back((dep, Some(wanted.to_string()), next.clone()));
                        }
                    }
                    None => {
                        closure
                            .missing
                            .entry(normalize_name(&name))
                            .or_insert_with(|| {
                                let names =
                                    chain.iter().map(|&id| self.dists[id as usize].name.clone());
                                names.chain([line.clone()]).collect()
                            });
                    }
                }
            }
        }
        closure
    }

    fn by_conda_or_pip_name(&self, name: &str) -> Option<u32> {
        self.dists
            .iter()
            .position(|d| d.conda_name.as_deref() == Some(name))
            .map(|i| i as u32)
            .or_else(|| self.by_name(name))
    }
}

#[derive(Debug, Default, Clone)]
pub struct RequirementClosure {
    /// Each distribution reached, with the requirement chain that reached it first (ids of
    /// distributions, from a root to it): the chains are listed for every target that needs
    /// the closure, and names borrowed from the index cost no copy.
    pub reached: BTreeMap<u32, Vec<u32>>,
    /// Required (markers true) but not installed: normalized name -> chain.
    pub missing: BTreeMap<String, Vec<String>>,
    pub problems: Vec<String>,
}

fn owner_from(owners: Vec<u32>) -> Owner {
    match owners.as_slice() {
        [] => Owner::Unknown,
        [one] => Owner::One(*one),
        _ => Owner::Ambiguous(owners),
    }
}

fn marker_environment(interpreter: &Interpreter) -> Option<MarkerEnvironment> {
    let m = &interpreter.markers;
    let build = |full_version: &str| {
        MarkerEnvironment::try_from(MarkerEnvironmentBuilder {
            implementation_name: &m.implementation_name,
            implementation_version: full_version,
            os_name: &m.os_name,
            platform_machine: &m.platform_machine,
            platform_python_implementation: &m.platform_python_implementation,
            platform_release: &m.platform_release,
            platform_system: &m.platform_system,
            platform_version: &m.platform_version,
            python_full_version: full_version,
            python_version: &m.python_version,
            sys_platform: &m.sys_platform,
        })
    };
    // A version suffix PEP 440 cannot read ("3.14.0+"): fall back to the plain X.Y version.
    build(&m.python_full_version)
        .or_else(|_| build(&m.python_version))
        .ok()
}

/// Lexically resolve `.` and `..` without touching the filesystem (RECORD holds `../../bin/x`).
pub fn normalize_path(path: &Path) -> PathBuf {
    // Nearly every RECORD row is already normal: check the bytes before walking components.
    if crate::paths::is_normal(path) {
        return path.to_path_buf();
    }
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn read_headers(text: &str) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(last) = headers.last_mut() {
                last.1.push(' ');
                last.1.push_str(line.trim());
            }
            continue;
        }
        if let Some((key, value)) = line.split_once(':') {
            headers.push((key.trim().to_string(), value.trim().to_string()));
        }
    }
    headers
}

fn dist_from_metadata(
    text: &str,
    kind: MetadataKind,
    metadata_path: &Path,
) -> Result<Distribution, String> {
    let headers = read_headers(text);
    let get = |key: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.clone())
    };
    let name = get("Name").ok_or("metadata has no Name field")?;
    let version = get("Version").ok_or("metadata has no Version field")?;
    let requires = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("Requires-Dist"))
        .map(|(_, v)| v.clone())
        .collect();
    Ok(Distribution {
        name,
        version,
        kind,
        metadata_path: metadata_path.to_path_buf(),
        requires,
        files: Vec::new(),
        conda_name: None,
        editable: Vec::new(),
        editable_launchers: Vec::new(),
    })
}

/// Metadata files are UTF-8 nearly always: validate (fast) before the lossy path.
fn utf8_text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

fn read_dist_info(site: &Path, dir: &Path) -> Result<Distribution, String> {
    let metadata = std::fs::read(dir.join("METADATA")).map_err(|e| format!("METADATA: {e}"))?;
    let mut dist = dist_from_metadata(&utf8_text(&metadata), MetadataKind::DistInfo, dir)?;
    if let Ok(record) = std::fs::read(dir.join("RECORD")) {
        for path in record_paths(&utf8_text(&record)) {
            dist.files.push(normalize_path(&site.join(path)));
        }
    }
    let editable = editable::from_record(&dist.files)?;
    add_editable_files(&mut dist, editable.roots);
    dist.editable_launchers = editable.launchers;
    Ok(dist)
}

/// Make an editable install own its project's files (where the analyzer finds its modules).
fn add_editable_files(dist: &mut Distribution, roots: Vec<EditableRoot>) {
    for root in &roots {
        let files = editable::root_files(root);
        dist.files.extend(files.iter().map(|f| normalize_path(f)));
    }
    dist.editable = roots;
}

/// An egg-info outside any site-packages without installed-files.txt: `setup.py develop`
/// (or `pip install -e` of old) left it in the project directory, which is on sys.path.
fn is_develop_egg(site: &Path, egg_info: &Path) -> bool {
    let in_site_packages = site
        .file_name()
        .is_some_and(|n| n == "site-packages" || n == "dist-packages");
    egg_info.is_dir() && !in_site_packages && !egg_info.join("installed-files.txt").exists()
}

/// The first field of each row of a RECORD (CSV: a path with a comma, a quote or a newline
/// is quoted). A row that cannot be read ends the list there.
fn record_paths(record: &str) -> Vec<String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(record.as_bytes());
    let mut row = csv::StringRecord::new();
    let mut paths = Vec::new();
    while let Ok(true) = reader.read_record(&mut row) {
        match row.get(0) {
            Some(path) if !path.is_empty() => paths.push(path.to_string()),
            _ => {}
        }
    }
    paths
}

fn read_egg_info(site: &Path, path: &Path) -> Result<Distribution, String> {
    // An egg-info is a directory with PKG-INFO, or (old distutils) a single PKG-INFO file.
    let pkg_info = if path.is_dir() {
        path.join("PKG-INFO")
    } else {
        path.to_path_buf()
    };
    let metadata = std::fs::read(&pkg_info).map_err(|e| format!("PKG-INFO: {e}"))?;
    let mut dist = dist_from_metadata(&utf8_text(&metadata), MetadataKind::EggInfo, path)?;
    if path.is_dir() {
        if let Ok(requires) = std::fs::read_to_string(path.join("requires.txt")) {
            dist.requires.extend(egg_requires(&requires));
        }
        if let Ok(files) = std::fs::read_to_string(path.join("installed-files.txt")) {
            for line in files.lines().filter(|l| !l.trim().is_empty()) {
                dist.files.push(normalize_path(&path.join(line.trim())));
            }
        }
    }
    if is_develop_egg(site, path) {
        let metadata = EditableRoot {
            name: String::new(),
            path: path.to_path_buf(),
        };
        dist.files.extend(editable::root_files(&metadata));
        add_editable_files(&mut dist, editable::from_develop_egg(site, path));
        return Ok(dist);
    }
    dist.files.push(normalize_path(
        &site.join(path.file_name().unwrap_or_default()),
    ));
    Ok(dist)
}

/// egg-info requires.txt: plain lines, then `[extra:marker]` sections.
fn egg_requires(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut section: Option<(String, String)> = None;
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let (extra, marker) = header.split_once(':').unwrap_or((header, ""));
            section = Some((extra.trim().to_string(), marker.trim().to_string()));
            continue;
        }
        let requirement = match &section {
            None => line.to_string(),
            Some((extra, marker)) => {
                let mut conditions = Vec::new();
                if !extra.is_empty() {
                    conditions.push(format!("extra == \"{extra}\""));
                }
                if !marker.is_empty() {
                    conditions.push(format!("({marker})"));
                }
                if conditions.is_empty() {
                    line.to_string()
                } else {
                    format!("{line} ; {}", conditions.join(" and "))
                }
            }
        };
        out.push(requirement);
    }
    out
}

fn top_level_names(dist: &Distribution) -> Vec<String> {
    if dist.kind == MetadataKind::Conda {
        return Vec::new();
    }
    let path = dist.metadata_path.join("top_level.txt");
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .map(|l| l.trim().replace('/', "."))
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalize_like_pep503() {
        assert_eq!(normalize_name("Python_Dateutil"), "python-dateutil");
        assert_eq!(normalize_name("zope.interface"), "zope-interface");
        assert_eq!(normalize_name("a--b"), "a-b");
    }

    #[test]
    fn record_paths_with_quotes_and_parents() {
        let record =
            "yaml/__init__.py,sha256=x,12\r\n\n\"a,b.py\",sha256=x,1\n\"say \"\"hi\"\".py\",,\n";
        assert_eq!(
            record_paths(record),
            ["yaml/__init__.py", "a,b.py", "say \"hi\".py"]
        );
        assert_eq!(
            normalize_path(Path::new("/e/lib/site-packages/../../bin/x")),
            PathBuf::from("/e/bin/x")
        );
    }

    #[test]
    fn egg_requires_sections_become_markers() {
        let reqs = egg_requires("six\n[security]\npyopenssl\n[:python_version < \"3\"]\nfutures\n");
        assert_eq!(reqs[0], "six");
        assert_eq!(reqs[1], "pyopenssl ; extra == \"security\"");
        assert_eq!(reqs[2], "futures ; (python_version < \"3\")");
    }
}
