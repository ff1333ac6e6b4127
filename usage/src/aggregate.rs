//! Every log under a directory -> per module and per distribution: distinct users, processes,
//! hosts, versions, batch share, Python versions, last seen; the processes over time of the
//! most used distributions; and each installation's distributions no process imported.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
use serde::Serialize;

use crate::log::{self, Kind, Line};

/// Bad lines named one by one in the result; the rest are only counted.
const NAMED_BAD_LINES: usize = 20;
/// Distributions drawn over time.
const TIMELINE_TOP: usize = 8;
const DAY: f64 = 86_400.0;
/// Lines parsed together by one thread.
const CHUNK: usize = 16_384;

#[derive(Default)]
pub struct Filter {
    /// Only lines written at or after this Unix time.
    pub since: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct SiteUsage {
    pub directory: PathBuf,
    pub since: Option<f64>,
    pub files: usize,
    pub lines: usize,
    /// Lines that are not whole lfm-site lines (`file:line: why`), the first few.
    pub bad_lines: Vec<String>,
    pub bad_line_count: usize,
    pub processes: usize,
    pub users: usize,
    pub hosts: usize,
    pub batch_share: f64,
    /// Processes per Python version, most first.
    pub pythons: Vec<(String, usize)>,
    pub first_seen: Option<f64>,
    pub last_seen: Option<f64>,
    pub distributions: Vec<Used>,
    pub modules: Vec<Used>,
    pub never_imported: Vec<Unimported>,
    pub timeline: Vec<Series>,
}

/// A module or a distribution, and who used it.
#[derive(Debug, Serialize)]
pub struct Used {
    pub name: String,
    /// A module's distribution; none for the standard library's.
    pub distribution: Option<String>,
    pub users: usize,
    pub processes: usize,
    pub hosts: usize,
    pub versions: Vec<String>,
    pub batch_share: f64,
    pub pythons: Vec<String>,
    pub last_seen: f64,
}

/// An installation's distributions that no logged process of it imported (candidates to drop).
#[derive(Debug, Serialize)]
pub struct Unimported {
    pub installation: String,
    /// The installation is not readable from here: nothing could be listed.
    pub listed: bool,
    pub distributions: Vec<String>,
}

/// A distribution's distinct processes per UTC day.
#[derive(Debug, Serialize)]
pub struct Series {
    pub distribution: String,
    /// (day start as Unix time, processes)
    pub days: Vec<(f64, usize)>,
}

#[derive(Default)]
struct Tally {
    users: FxHashSet<u32>,
    processes: FxHashSet<u64>,
    batch: FxHashSet<u64>,
    hosts: FxHashSet<String>,
    versions: BTreeSet<String>,
    pythons: BTreeSet<String>,
    distribution: String,
    last: f64,
}

impl Tally {
    fn add(&mut self, line: &Line, process: u64) {
        self.users.insert(line.uid);
        self.processes.insert(process);
        if line.batch() {
            self.batch.insert(process);
        }
        insert_str(&mut self.hosts, line.host);
        if !line.version.is_empty() && !self.versions.contains(line.version) {
            self.versions.insert(line.version.to_string());
        }
        if !self.pythons.contains(line.python) {
            self.pythons.insert(line.python.to_string());
        }
        if line.time >= self.last {
            self.last = line.time;
            if !line.distribution.is_empty() {
                line.distribution.clone_into(&mut self.distribution);
            }
        }
    }

    fn merge(&mut self, other: Tally) {
        union(&mut self.users, other.users);
        union(&mut self.processes, other.processes);
        union(&mut self.batch, other.batch);
        union(&mut self.hosts, other.hosts);
        self.versions.extend(other.versions);
        self.pythons.extend(other.pythons);
        if other.last >= self.last {
            self.last = other.last;
            if !other.distribution.is_empty() {
                self.distribution = other.distribution;
            }
        }
    }

    fn used(self, name: String, with_distribution: bool) -> Used {
        let processes = self.processes.len();
        Used {
            name,
            distribution: (with_distribution && !self.distribution.is_empty())
                .then_some(self.distribution),
            users: self.users.len(),
            processes,
            hosts: self.hosts.len(),
            versions: self.versions.into_iter().collect(),
            batch_share: share(self.batch.len(), processes),
            pythons: self.pythons.into_iter().collect(),
            last_seen: self.last,
        }
    }
}

/// What one chunk of lines says; chunks merge into the whole.
#[derive(Default)]
struct Partial {
    lines: usize,
    bad: Vec<String>,
    bad_count: usize,
    all: Tally,
    first: Option<f64>,
    by_python: FxHashMap<String, FxHashSet<u64>>,
    modules: FxHashMap<String, Tally>,
    distributions: FxHashMap<String, Tally>,
    daily: FxHashMap<(String, i64), FxHashSet<u64>>,
    /// Installation -> the normalized names of the distributions its processes imported.
    installations: FxHashMap<String, FxHashSet<String>>,
}

impl Partial {
    fn add(&mut self, line: &Line) {
        let process = hash(line.process);
        self.lines += 1;
        self.all.add(line, process);
        self.first = Some(self.first.map_or(line.time, |f| f.min(line.time)));
        self.by_python
            .entry(line.python.to_string())
            .or_default()
            .insert(process);
        let imported = self
            .installations
            .entry(line.installation.to_string())
            .or_default();
        if line.kind == Kind::Process {
            return;
        }
        tally(&mut self.modules, line.module).add(line, process);
        if line.kind == Kind::Site && !line.distribution.is_empty() {
            insert_str(imported, &normalize(line.distribution));
            tally(&mut self.distributions, line.distribution).add(line, process);
            let day = (line.time / DAY).floor() as i64;
            self.daily
                .entry((line.distribution.to_string(), day))
                .or_default()
                .insert(process);
        }
    }

    fn bad_line(&mut self, file: &Path, number: usize, why: String) {
        self.bad_count += 1;
        if self.bad.len() < NAMED_BAD_LINES {
            self.bad.push(format!("{}:{number}: {why}", file.display()));
        }
    }

    fn merge(mut self, other: Partial) -> Partial {
        self.lines += other.lines;
        self.bad_count += other.bad_count;
        self.bad.extend(other.bad);
        self.bad.truncate(NAMED_BAD_LINES);
        self.all.merge(other.all);
        self.first = match (self.first, other.first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (python, processes) in other.by_python {
            union(self.by_python.entry(python).or_default(), processes);
        }
        merge_tallies(&mut self.modules, other.modules);
        merge_tallies(&mut self.distributions, other.distributions);
        for (key, processes) in other.daily {
            union(self.daily.entry(key).or_default(), processes);
        }
        for (installation, names) in other.installations {
            self.installations
                .entry(installation)
                .or_default()
                .extend(names);
        }
        self
    }
}

fn tally<'a>(tallies: &'a mut FxHashMap<String, Tally>, name: &str) -> &'a mut Tally {
    if !tallies.contains_key(name) {
        tallies.insert(name.to_string(), Tally::default());
    }
    tallies.get_mut(name).expect("inserted above")
}

fn merge_tallies(into: &mut FxHashMap<String, Tally>, from: FxHashMap<String, Tally>) {
    for (name, tally) in from {
        match into.get_mut(&name) {
            Some(existing) => existing.merge(tally),
            None => {
                into.insert(name, tally);
            }
        }
    }
}

/// `into` ∪ `other`, inserting the smaller set's elements into the larger: merging many
/// files' partial results would otherwise copy the big sets again at every level.
fn union<T: Eq + Hash>(into: &mut FxHashSet<T>, mut other: FxHashSet<T>) {
    if into.len() < other.len() {
        std::mem::swap(into, &mut other);
    }
    into.extend(other);
}

fn insert_str(set: &mut FxHashSet<String>, text: &str) {
    if !set.contains(text) {
        set.insert(text.to_string());
    }
}

fn hash(text: &str) -> u64 {
    let mut hasher = FxHasher::default();
    text.hash(&mut hasher);
    hasher.finish()
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A distribution's name as pip compares them (PEP 503).
pub fn normalize(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

/// Every `*.log` file under `directory` (the hook's files, rotated ones included), read and
/// summed up. A line that is not whole is counted and named, never fatal.
pub fn aggregate(directory: &Path, filter: &Filter) -> Result<SiteUsage, String> {
    let files = log_files(directory)?;
    let partial = files
        .par_iter()
        .map(|file| read_file(file, filter))
        .try_reduce(Partial::default, |a, b| Ok(a.merge(b)))?;
    Ok(finish(directory, filter, files.len(), partial))
}

fn log_files(directory: &Path) -> Result<Vec<PathBuf>, String> {
    if !directory.is_dir() {
        return Err(format!("{}: not a directory", directory.display()));
    }
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(directory).follow_links(true) {
        let entry = entry.map_err(|e| format!("{}: {e}", directory.display()))?;
        let is_log = entry.path().extension().is_some_and(|e| e == "log");
        if entry.file_type().is_file() && is_log {
            files.push(entry.into_path());
        }
    }
    files.sort();
    Ok(files)
}

fn read_file(file: &Path, filter: &Filter) -> Result<Partial, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let partial = lines
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(chunk, lines)| {
            let mut partial = Partial::default();
            for (offset, text) in lines.iter().enumerate() {
                match log::parse(text) {
                    Ok(line) if filter.since.is_some_and(|s| line.time < s) => {}
                    Ok(line) => partial.add(&line),
                    Err(why) => partial.bad_line(file, chunk * CHUNK + offset + 1, why),
                }
            }
            partial
        })
        .reduce(Partial::default, Partial::merge);
    Ok(partial)
}

fn finish(directory: &Path, filter: &Filter, files: usize, partial: Partial) -> SiteUsage {
    let processes = partial.all.processes.len();
    let mut pythons: Vec<(String, usize)> = partial
        .by_python
        .into_iter()
        .map(|(python, set)| (python, set.len()))
        .collect();
    pythons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let distributions = ranked(partial.distributions, false);
    let timeline = timeline(&distributions, partial.daily);
    SiteUsage {
        directory: directory.to_path_buf(),
        since: filter.since,
        files,
        lines: partial.lines,
        bad_lines: partial.bad,
        bad_line_count: partial.bad_count,
        processes,
        users: partial.all.users.len(),
        hosts: partial.all.hosts.len(),
        batch_share: share(partial.all.batch.len(), processes),
        pythons,
        first_seen: partial.first,
        last_seen: (partial.lines > 0).then_some(partial.all.last),
        distributions,
        modules: ranked(partial.modules, true),
        never_imported: never_imported(partial.installations),
        timeline,
    }
}

/// Most processes first, then by name.
fn ranked(tallies: FxHashMap<String, Tally>, with_distribution: bool) -> Vec<Used> {
    let mut used: Vec<Used> = tallies
        .into_iter()
        .map(|(name, tally)| tally.used(name, with_distribution))
        .collect();
    used.sort_by(|a, b| {
        b.processes
            .cmp(&a.processes)
            .then_with(|| a.name.cmp(&b.name))
    });
    used
}

fn timeline(
    distributions: &[Used],
    mut daily: FxHashMap<(String, i64), FxHashSet<u64>>,
) -> Vec<Series> {
    let mut days: Vec<i64> = daily.keys().map(|(_, day)| *day).collect();
    days.sort_unstable();
    days.dedup();
    distributions
        .iter()
        .take(TIMELINE_TOP)
        .map(|used| Series {
            distribution: used.name.clone(),
            days: days
                .iter()
                .map(|&day| {
                    let key = (used.name.clone(), day);
                    let count = daily.remove(&key).map_or(0, |set| set.len());
                    (day as f64 * DAY, count)
                })
                .collect(),
        })
        .collect()
}

fn never_imported(installations: FxHashMap<String, FxHashSet<String>>) -> Vec<Unimported> {
    let mut result: Vec<Unimported> = installations
        .into_iter()
        .map(|(installation, imported)| {
            let installed = installed_distributions(Path::new(&installation));
            Unimported {
                listed: installed.is_some(),
                distributions: installed
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|name| !imported.contains(&normalize(name)))
                    .collect(),
                installation,
            }
        })
        .collect();
    result.sort_by(|a, b| a.installation.cmp(&b.installation));
    result
}

/// The distributions in `prefix/lib/python*/site-packages`, by name; None when there is no
/// such directory here (an installation of another node).
pub fn installed_distributions(prefix: &Path) -> Option<BTreeSet<String>> {
    let lib = std::fs::read_dir(prefix.join("lib")).ok()?;
    let mut names = BTreeSet::new();
    let mut found = false;
    for entry in lib.flatten() {
        let is_python = entry.file_name().to_string_lossy().starts_with("python");
        let Ok(packages) = std::fs::read_dir(entry.path().join("site-packages")) else {
            continue;
        };
        found |= is_python;
        for package in packages.flatten() {
            let file = package.file_name().to_string_lossy().into_owned();
            if let Some(stem) = file.strip_suffix(".dist-info") {
                names.insert(stem.split('-').next().unwrap_or(stem).to_string());
            }
        }
    }
    found.then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(uid: u32, process: &str, time: f64, module: &str, dist: &str, job: &str) -> String {
        let kind = if dist.is_empty() { "stdlib" } else { "site" };
        format!(
            "lfm-site/1\t{uid}\tn{uid}\t3.11.7\t/nowhere\t0\t{job}\t{process}\t{time}\t{module}\t{kind}\t{dist}\t1.0\n"
        )
    }

    #[test]
    fn users_processes_and_batch_share_are_counted_per_distribution() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        text += &line(1, "a", 100.0, "numpy", "numpy", "slurm:1");
        text += &line(1, "a", 101.0, "json", "", "slurm:1");
        text += &line(2, "b", 200.0, "numpy", "numpy", "");
        text += "lfm-site/1\t2\tn2\ttorn\n";
        std::fs::write(dir.path().join("n1.1.log"), &text).unwrap();
        std::fs::write(dir.path().join("other.txt"), "not a log").unwrap();
        let usage = aggregate(dir.path(), &Filter::default()).unwrap();
        assert_eq!((usage.files, usage.lines, usage.bad_line_count), (1, 3, 1));
        assert!(usage.bad_lines[0].ends_with("n1.1.log:4: 4 fields, 13 expected"));
        let numpy = &usage.distributions[0];
        assert_eq!((numpy.users, numpy.processes, numpy.hosts), (2, 2, 2));
        assert_eq!(numpy.batch_share, 0.5);
        assert_eq!(numpy.last_seen, 200.0);
        let json = usage.modules.iter().find(|m| m.name == "json").unwrap();
        assert_eq!(json.distribution, None);
        assert_eq!(usage.timeline[0].days, vec![(0.0, 2)]);
        let since = aggregate(dir.path(), &Filter { since: Some(150.0) }).unwrap();
        assert_eq!(since.processes, 1);
        assert_eq!(since.distributions[0].batch_share, 0.0);
    }

    #[test]
    fn an_installation_s_distributions_no_process_imported_are_listed() {
        let prefix = tempfile::tempdir().unwrap();
        let packages = prefix.path().join("lib/python3.11/site-packages");
        for dist in ["numpy-2.4.6.dist-info", "Old_Thing-0.1.dist-info", "numpy"] {
            std::fs::create_dir_all(packages.join(dist)).unwrap();
        }
        let mut imported = FxHashMap::default();
        let names = FxHashSet::from_iter(["numpy".to_string()]);
        imported.insert(prefix.path().display().to_string(), names);
        imported.insert("/not/here".to_string(), FxHashSet::default());
        let unused = never_imported(imported);
        assert_eq!(unused[0].installation, "/not/here");
        assert!(!unused[0].listed);
        assert_eq!(unused[1].distributions, vec!["Old_Thing".to_string()]);
    }
}
