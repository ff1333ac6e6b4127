//! Persistent per-file cache of module summaries, keyed by content hash.
//!
//! Parsing dominates analysis time, and a summary depends only on the file's bytes (and on this
//! crate's extraction rules, hence the version in the key), so a second run re-parses only the
//! files whose content changed. One file holds the cache ([`file`]): reading thousands of small
//! files would cost more than the parse it saves. A run reads only the entries it looks up,
//! found through the file's index: its cost and memory follow what it analyses, not what the
//! cache holds (the whole file, 52 MB for a scientific site-packages, was once read by every
//! run).
//!
//! A run that adds a few summaries appends them to a journal beside it ([`journal`],
//! `analyze-summaries.journal`) instead of writing the whole file again. Once the journal
//! outgrows a quarter of the file or [`JOURNAL_RECORDS`] records, the next save writes the
//! whole cache (temp file + rename; entries are copied as they are stored, not decoded) and
//! removes the journal.
//!
//! Entries age by generations: each run that writes the whole cache is one generation, and an
//! entry not used in the last [`KEPT_GENERATIONS`] of them is dropped (a run marks the entries
//! it used in the file's index, in place). The whole cache also stays within a budget
//! ([`budget`]): past it, the least recently used entries leave first. Old versions of edited
//! files therefore leave the cache, while projects analysed now and then (sharing the default
//! cache directory) keep theirs.

mod file;
mod journal;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::{Context, Result};
use rustc_hash::FxHashMap as HashMap;

use crate::extract::ModuleSummary;
use file::{FileWriter, IndexRecord, SummaryFile};
use journal::Journal;

/// Bump when extraction rules change: old entries then simply stop matching (stored results
/// too, whose request keys hash it: a result made by other rules is another result).
pub(crate) const EXTRACTOR_VERSION: &[u8] = b"lfm-extract-19";

pub type CacheKey = [u8; 32];

/// How many cache-writing runs an unused entry survives.
pub const KEPT_GENERATIONS: u32 = 32;

/// Records the journal holds before it is folded into the file: opening it reads each one's
/// head.
pub const JOURNAL_RECORDS: usize = 1024;

/// The variable that sets the analyze caches' budget, and the budget when it is not set.
pub const BUDGET_VARIABLE: &str = "LFM_ANALYZE_CACHE_MAX";
pub const DEFAULT_BUDGET: u64 = 1 << 30;

/// Names the layout of the cache file; a file of another layout is ignored and replaced.
/// (3 was one whole-file bincode of every entry, read by every run.)
const FILE_LAYOUT: &str = "lfm-summary-cache/4";

/// Summaries read from cache files by this process (entries, bytes), for `LFM_TIMINGS`.
static READ_ENTRIES: AtomicU64 = AtomicU64::new(0);
static READ_BYTES: AtomicU64 = AtomicU64::new(0);

/// The summaries this process read from cache files: (entries, bytes).
pub fn entries_read() -> (u64, u64) {
    (READ_ENTRIES.load(Relaxed), READ_BYTES.load(Relaxed))
}

/// The budget of each analyze cache: `$LFM_ANALYZE_CACHE_MAX` (`512M`, `2G`, bytes), else
/// [`DEFAULT_BUDGET`]; an error names a value that is not a size.
pub fn budget() -> Result<u64, String> {
    match std::env::var(BUDGET_VARIABLE) {
        Ok(text) => parse_size(&text).ok_or_else(|| {
            format!("{BUDGET_VARIABLE}={text:?} is not a size (bytes, or with K, M, G or T)")
        }),
        Err(_) => Ok(DEFAULT_BUDGET),
    }
}

/// `1024`, `512K`, `512M`, `1.5G`, `2GiB`, `1T` (binary units).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    let bytes = number * (1u64 << shift) as f64;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes as u64)
}

pub struct SummaryCache {
    path: PathBuf,
    journal_path: PathBuf,
    stored: RwLock<Stored>,
    /// The generation this run writes, one past the file's.
    generation: u32,
    budget: u64,
    /// Summaries read or made by this run, by key.
    held: Mutex<HashMap<CacheKey, Arc<ModuleSummary>>>,
    /// Keys added by this run and not saved yet, and all it added.
    added: Mutex<Vec<CacheKey>>,
    inserted: Mutex<Vec<CacheKey>>,
    /// Entries and bytes this cache read from its files.
    read_entries: AtomicU64,
    read_bytes: AtomicU64,
}

/// The cache's files as this run opened them (or last wrote them).
struct Stored {
    file: Option<SummaryFile>,
    journal: Journal,
    /// Index positions of the file's entries this run used, last used before this generation.
    used: Mutex<Vec<u64>>,
}

impl Stored {
    fn open(path: &Path, journal_path: &Path) -> Stored {
        Stored {
            file: SummaryFile::open(path, FILE_LAYOUT),
            journal: Journal::open(journal_path),
            used: Mutex::default(),
        }
    }

    /// `key`'s payload from the file (its use noted where `generation` is not its last), else
    /// from the journal.
    fn payload(&self, key: &CacheKey, generation: u32) -> Option<Vec<u8>> {
        let from_file = self.file.as_ref().and_then(|file| {
            let (position, record) = file.find(key)?;
            let payload = file.payload(&record)?;
            if record.last_used != generation {
                self.used.lock().ok()?.push(position);
            }
            Some(payload)
        });
        from_file.or_else(|| self.journal.payload(key, FILE_LAYOUT))
    }
}

/// An entry of the cache as a whole save sees it: where its payload comes from.
enum Source {
    File(IndexRecord),
    Journal,
    Added(Arc<ModuleSummary>),
}

struct Candidate {
    key: CacheKey,
    last_used: u32,
    len: u64,
    source: Source,
}

fn poisoned() -> anyhow::Error {
    anyhow::anyhow!("cache lock poisoned")
}

impl SummaryCache {
    /// Open the cache in `dir` (its file's head and the journal's record heads); a missing or
    /// unreadable cache starts empty.
    pub fn open(dir: &Path) -> SummaryCache {
        SummaryCache::open_with_budget(dir, budget().unwrap_or(DEFAULT_BUDGET))
    }

    pub fn open_with_budget(dir: &Path, budget: u64) -> SummaryCache {
        let path = dir.join("analyze-summaries.bin");
        let journal_path = dir.join("analyze-summaries.journal");
        let stored = Stored::open(&path, &journal_path);
        let generation = stored.file.as_ref().map_or(0, |file| file.generation);
        SummaryCache {
            path,
            journal_path,
            stored: RwLock::new(stored),
            generation: generation.wrapping_add(1),
            budget,
            held: Mutex::default(),
            added: Mutex::default(),
            inserted: Mutex::default(),
            read_entries: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
        }
    }

    /// The default location: `$LFM_CACHE_DIR`, else `$XDG_CACHE_HOME/lfm`, else `~/.cache/lfm`.
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("LFM_CACHE_DIR") {
            return Some(PathBuf::from(dir));
        }
        if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
            return Some(PathBuf::from(dir).join("lfm"));
        }
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("lfm"))
    }

    pub fn key(bytes: &[u8]) -> CacheKey {
        let mut hasher = blake3::Hasher::new();
        hasher.update(EXTRACTOR_VERSION);
        hasher.update(bytes);
        *hasher.finalize().as_bytes()
    }

    /// The entries and bytes this cache read from its files.
    pub fn read_counts(&self) -> (u64, u64) {
        (
            self.read_entries.load(Relaxed),
            self.read_bytes.load(Relaxed),
        )
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<ModuleSummary>> {
        if let Some(held) = self.held.lock().ok()?.get(key) {
            return Some(held.clone());
        }
        let payload = self.stored.read().ok()?.payload(key, self.generation)?;
        self.count(payload.len() as u64);
        let summary = Arc::new(decode(&payload)?);
        let mut held = self.held.lock().ok()?;
        Some(held.entry(*key).or_insert(summary).clone())
    }

    fn count(&self, bytes: u64) {
        for (entries, total) in [
            (&self.read_entries, &self.read_bytes),
            (&READ_ENTRIES, &READ_BYTES),
        ] {
            entries.fetch_add(1, Relaxed);
            total.fetch_add(bytes, Relaxed);
        }
    }

    pub fn insert(&self, key: CacheKey, summary: Arc<ModuleSummary>) {
        if let (Ok(mut held), Ok(mut added), Ok(mut inserted)) =
            (self.held.lock(), self.added.lock(), self.inserted.lock())
        {
            held.insert(key, summary);
            added.push(key);
            inserted.push(key);
        }
    }

    /// Save what was added: appended to the journal while it stays small beside the file,
    /// else the whole cache ([`SummaryCache::save_whole`]); and mark the entries used.
    pub fn save(&self) -> Result<()> {
        let mut stored = self.stored.write().map_err(|_| poisoned())?;
        let added = std::mem::take(&mut *self.added.lock().map_err(|_| poisoned())?);
        if !added.is_empty() {
            match self.journal_records(&stored, &added)? {
                Some(records) => journal::append(&self.journal_path, &records)?,
                None => return self.save_whole(&mut stored),
            }
        }
        let used = std::mem::take(&mut *stored.used.lock().map_err(|_| poisoned())?);
        // A file this run cannot write (another user's) still serves; its entries just age.
        if let Some(file) = &stored.file {
            let _ = file.mark_used(&used, self.generation);
        }
        Ok(())
    }

    /// The journal records of `keys`' summaries; `None` as soon as the journal would outgrow
    /// a quarter of the file, [`JOURNAL_RECORDS`] or the budget (a first run adds every file:
    /// its records would be a second copy of the whole cache in memory).
    fn journal_records(&self, stored: &Stored, keys: &[CacheKey]) -> Result<Option<Vec<u8>>> {
        let file_bytes = stored.file.as_ref().map_or(0, SummaryFile::size);
        let room = (file_bytes / 4)
            .min(self.budget.saturating_sub(file_bytes))
            .saturating_sub(stored.journal.bytes);
        if stored.journal.records.len() + keys.len() > JOURNAL_RECORDS {
            return Ok(None);
        }
        let held = self.held.lock().map_err(|_| poisoned())?;
        let mut records = Vec::new();
        for key in keys {
            let Some(summary) = held.get(key) else {
                continue;
            };
            let payload = bincode::serialize(summary.as_ref())?;
            if (records.len() as u64 + journal::RECORD_HEAD + payload.len() as u64) > room {
                return Ok(None);
            }
            journal::add_record(&mut records, FILE_LAYOUT, key, &payload);
        }
        Ok(Some(records))
    }

    /// Write the whole cache atomically (temp file + rename): the file's entries, the
    /// journal's and this run's, without those no run of the last [`KEPT_GENERATIONS`] used
    /// and, past the budget, the least recently used; then remove the journal it now holds
    /// and read the new file's head (a later save of this run starts from it).
    fn save_whole(&self, stored: &mut Stored) -> Result<()> {
        let kept = self.kept(self.candidates(stored)?);
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        lfm_fs::write_atomically(&self.path, |out| {
            self.write_file(stored, out.try_clone()?, &kept)
        })
        .with_context(|| format!("writing {}", self.path.display()))?;
        // Records another run appended since this one opened the cache go too: a cache loses
        // nothing but time by that.
        let _ = std::fs::remove_file(&self.journal_path);
        *stored = Stored::open(&self.path, &self.journal_path);
        Ok(())
    }

    /// Every entry of the file, the journal and this run, once each (the file's, whose
    /// payload is copied as stored, first), with when it was last used.
    fn candidates(&self, stored: &Stored) -> Result<Vec<Candidate>> {
        let mut candidates = Vec::new();
        if let Some(file) = &stored.file {
            let mut records = file.all_records().unwrap_or_default();
            for &position in stored.used.lock().map_err(|_| poisoned())?.iter() {
                if let Some(record) = records.get_mut(position as usize) {
                    record.last_used = self.generation;
                }
            }
            candidates.extend(records.into_iter().map(|record| Candidate {
                key: record.key,
                last_used: record.last_used,
                len: u64::from(record.len),
                source: Source::File(record),
            }));
        }
        candidates.extend(
            stored
                .journal
                .records
                .iter()
                .map(|(key, record)| Candidate {
                    key: *key,
                    last_used: self.generation,
                    len: record.len,
                    source: Source::Journal,
                }),
        );
        let held = self.held.lock().map_err(|_| poisoned())?;
        let inserted = self.inserted.lock().map_err(|_| poisoned())?;
        for (key, summary) in inserted
            .iter()
            .filter_map(|key| Some((key, held.get(key)?)))
        {
            let len = bincode::serialized_size(summary.as_ref())?;
            let source = Source::Added(summary.clone());
            let last_used = self.generation;
            candidates.push(Candidate {
                key: *key,
                last_used,
                len,
                source,
            });
        }
        // Stable: for each key, the file's entry stays, then the journal's.
        candidates.sort_by_key(|candidate| candidate.key);
        candidates.dedup_by_key(|candidate| candidate.key);
        Ok(candidates)
    }

    /// The candidates kept: used in the last [`KEPT_GENERATIONS`], then the most recently
    /// used within the budget.
    fn kept(&self, mut candidates: Vec<Candidate>) -> Vec<Candidate> {
        let oldest_kept = self.generation.saturating_sub(KEPT_GENERATIONS);
        candidates.retain(|candidate| candidate.last_used >= oldest_kept);
        candidates.sort_by_key(|candidate| std::cmp::Reverse(candidate.last_used));
        let mut total = file::FIXED_BYTES;
        candidates.retain(|candidate| {
            total += candidate.len + file::RECORD_BYTES;
            total <= self.budget
        });
        candidates
    }

    /// The cache file of `kept`, each payload copied from where it is (one at a time in
    /// memory); an entry that cannot be read back is left out.
    fn write_file(&self, stored: &Stored, out: std::fs::File, kept: &[Candidate]) -> Result<()> {
        let mut writer = FileWriter::new(out);
        for candidate in kept {
            let payload = match &candidate.source {
                Source::File(record) => stored.file.as_ref().and_then(|file| file.payload(record)),
                Source::Journal => stored.journal.payload(&candidate.key, FILE_LAYOUT),
                Source::Added(summary) => Some(bincode::serialize(summary.as_ref())?),
            };
            if let Some(payload) = payload {
                writer.add(candidate.key, candidate.last_used, &payload)?;
            }
        }
        writer.finish(FILE_LAYOUT, self.generation)
    }
}

/// `bytes` decoded, bounded by their length (a damaged length must not ask for exabytes).
fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    use bincode::Options as _;
    bincode::options()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(bytes.len() as u64)
        .deserialize(bytes)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_named(name: &str) -> Arc<ModuleSummary> {
        // A module that reads `name` and binds it: one name in the summary's table.
        Arc::new(crate::extract::summarize(&format!("{name} = {name}\n")))
    }

    /// Whether the cache holds `key`, without reading or marking it.
    fn holds(cache: &SummaryCache, key: &CacheKey) -> bool {
        let stored = cache.stored.read().unwrap();
        let in_file = (stored.file.as_ref()).is_some_and(|file| file.find(key).is_some());
        in_file || stored.journal.records.contains_key(key)
    }

    /// Save `cache` as a whole file, whatever the journal's room.
    fn save_whole_now(cache: &SummaryCache) {
        cache.added.lock().unwrap().clear();
        cache
            .save_whole(&mut cache.stored.write().unwrap())
            .unwrap();
    }

    /// One run that uses `used` and writes a generation (the whole cache).
    fn run_using(dir: &Path, used: &CacheKey, run: u32) {
        let cache = SummaryCache::open(dir);
        assert_eq!(cache.get(used).unwrap().name(0), "used");
        let fresh = SummaryCache::key(format!("fresh {run}").as_bytes());
        cache.insert(fresh, summary_named("fresh"));
        save_whole_now(&cache);
    }

    /// One run that adds nothing and uses `used`: its use is marked in the file in place.
    fn run_only_using(dir: &Path, used: &CacheKey) {
        let cache = SummaryCache::open(dir);
        assert!(cache.get(used).is_some());
        cache.save().unwrap();
    }

    #[test]
    fn unused_entries_leave_after_the_kept_generations_and_used_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let (stale, used) = (SummaryCache::key(b"stale"), SummaryCache::key(b"used"));
        let (marked, marked_key) = (summary_named("used"), SummaryCache::key(b"marked"));
        let cache = SummaryCache::open(dir.path());
        cache.insert(stale, summary_named("stale"));
        cache.insert(used, summary_named("used"));
        cache.insert(marked_key, marked);
        cache.save().unwrap();
        for run in 0..KEPT_GENERATIONS {
            run_only_using(dir.path(), &marked_key);
            run_using(dir.path(), &used, run);
        }
        assert!(holds(&SummaryCache::open(dir.path()), &stale));
        run_only_using(dir.path(), &marked_key);
        run_using(dir.path(), &used, KEPT_GENERATIONS);
        let cache = SummaryCache::open(dir.path());
        assert!(
            !holds(&cache, &stale),
            "unused for more than the kept generations"
        );
        assert!(holds(&cache, &used));
        assert!(
            holds(&cache, &marked_key),
            "used by runs that wrote no generation"
        );
    }

    /// A cache with `count` entries keyed `"{prefix}{n}"`, saved as one file.
    fn saved_with(dir: &Path, prefix: &str, count: usize) -> Vec<CacheKey> {
        let cache = SummaryCache::open(dir);
        let keys: Vec<CacheKey> = (0..count)
            .map(|n| SummaryCache::key(format!("{prefix}{n}").as_bytes()))
            .collect();
        for key in &keys {
            cache.insert(*key, summary_named("used"));
        }
        cache.save().unwrap();
        keys
    }

    #[test]
    fn a_lookup_reads_only_the_entry_it_uses() {
        let dir = tempfile::tempdir().unwrap();
        let keys = saved_with(dir.path(), "module", 600);
        let journaled = SummaryCache::key(b"journaled");
        let cache = SummaryCache::open(dir.path());
        cache.insert(journaled, summary_named("journaled"));
        cache.save().unwrap();
        assert!(dir.path().join("analyze-summaries.journal").exists());

        let cache = SummaryCache::open(dir.path());
        assert_eq!(cache.read_counts(), (0, 0), "opening reads no entry");
        let one = cache.get(&keys[300]).unwrap();
        assert_eq!(one.name(0), "used");
        let entry_bytes = bincode::serialized_size(one.as_ref()).unwrap();
        assert!(cache.get(&keys[300]).is_some(), "held once read");
        assert!(cache.get(&SummaryCache::key(b"absent")).is_none());
        assert_eq!(cache.read_counts(), (1, entry_bytes));
        assert_eq!(cache.get(&journaled).unwrap().name(0), "journaled");
        assert_eq!(cache.read_counts().0, 2);
    }

    #[test]
    fn past_the_budget_the_least_recently_used_entries_leave() {
        let dir = tempfile::tempdir().unwrap();
        let keys = saved_with(dir.path(), "module", 40);
        let size = std::fs::metadata(dir.path().join("analyze-summaries.bin"))
            .unwrap()
            .len();
        // A budget for about half the entries; the run uses the first ten and adds one.
        let cache = SummaryCache::open_with_budget(dir.path(), size / 2);
        for key in &keys[..10] {
            assert!(cache.get(key).is_some());
        }
        let added = SummaryCache::key(b"added");
        cache.insert(added, summary_named("added"));
        save_whole_now(&cache);
        let size_after = std::fs::metadata(dir.path().join("analyze-summaries.bin"))
            .unwrap()
            .len();
        assert!(size_after <= size / 2, "{size_after} within {}", size / 2);
        let cache = SummaryCache::open(dir.path());
        assert!(keys[..10]
            .iter()
            .chain([&added])
            .all(|key| holds(&cache, key)));
        assert!(keys[10..].iter().any(|key| !holds(&cache, key)));
        // What stayed reads back as it was stored.
        assert_eq!(cache.get(&keys[3]).unwrap(), summary_named("used"));
    }

    #[test]
    fn a_damaged_entry_is_missing_and_the_others_still_serve() {
        let dir = tempfile::tempdir().unwrap();
        let keys = saved_with(dir.path(), "module", 20);
        let path = dir.path().join("analyze-summaries.bin");
        let mut bytes = std::fs::read(&path).unwrap();
        let cache = SummaryCache::open(dir.path());
        let stored = cache.stored.read().unwrap();
        let (_, record) = stored.file.as_ref().unwrap().find(&keys[5]).unwrap();
        bytes[record.offset as usize + 1] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let cache = SummaryCache::open(dir.path());
        assert!(cache.get(&keys[5]).is_none(), "never misread");
        assert!(keys[6..].iter().all(|key| cache.get(key).is_some()));
    }

    #[test]
    fn a_few_additions_go_to_the_journal_and_a_cut_record_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let old = saved_with(dir.path(), "old", 64);
        let file = dir.path().join("analyze-summaries.bin");
        let journal = dir.path().join("analyze-summaries.journal");
        let before = std::fs::read(&file).unwrap();
        let (first, second) = (SummaryCache::key(b"first"), SummaryCache::key(b"second"));
        for key in [first, second] {
            let cache = SummaryCache::open(dir.path());
            cache.insert(key, summary_named("used"));
            cache.save().unwrap();
        }
        assert_eq!(
            std::fs::read(&file).unwrap().len(),
            before.len(),
            "the file is not rewritten"
        );
        let cache = SummaryCache::open(dir.path());
        assert!(old
            .iter()
            .chain([&first, &second])
            .all(|key| holds(&cache, key)));

        // A run that stopped while appending: the records before the cut still count.
        let length = std::fs::metadata(&journal).unwrap().len();
        let cut = std::fs::OpenOptions::new()
            .write(true)
            .open(&journal)
            .unwrap();
        cut.set_len(length - 3).unwrap();
        let cache = SummaryCache::open(dir.path());
        assert!(cache.get(&first).is_some());
        assert!(!holds(&cache, &second));
        assert!(old.iter().all(|key| holds(&cache, key)));
    }

    #[test]
    fn a_journal_that_outgrows_the_file_is_folded_into_it() {
        let dir = tempfile::tempdir().unwrap();
        let old = saved_with(dir.path(), "old", 8);
        let size = |name: &str| std::fs::metadata(dir.path().join(name)).map_or(0, |m| m.len());
        let first_size = size("analyze-summaries.bin");
        let mut added = Vec::new();
        for run in 0..8 {
            let key = SummaryCache::key(format!("new {run}").as_bytes());
            let cache = SummaryCache::open(dir.path());
            cache.insert(key, summary_named("used"));
            cache.save().unwrap();
            added.push(key);
            let (file, journal) = (
                size("analyze-summaries.bin"),
                size("analyze-summaries.journal"),
            );
            assert!(
                journal <= file / 4,
                "run {run}: journal {journal} beside {file}"
            );
        }
        assert!(
            size("analyze-summaries.bin") > first_size,
            "folded into the file"
        );
        let cache = SummaryCache::open(dir.path());
        assert!(old.iter().chain(&added).all(|key| cache.get(key).is_some()));
    }

    #[test]
    fn many_entries_come_back_and_a_cut_file_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let keys = saved_with(dir.path(), "module", 1500);
        let cache = SummaryCache::open(dir.path());
        assert!(keys.iter().all(|key| cache.get(key).is_some()));
        let path = dir.path().join("analyze-summaries.bin");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let cache = SummaryCache::open(dir.path());
        assert!(keys.iter().all(|key| cache.get(key).is_none()));
    }

    #[test]
    fn a_cache_file_of_another_layout_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("analyze-summaries.bin"),
            b"not a cache at all",
        )
        .unwrap();
        let cache = SummaryCache::open(dir.path());
        assert!(cache.get(&SummaryCache::key(b"x")).is_none());
        cache.insert(SummaryCache::key(b"x"), summary_named("x"));
        cache.save().unwrap();
        assert!(SummaryCache::open(dir.path())
            .get(&SummaryCache::key(b"x"))
            .is_some());
    }

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("5X"), None);
    }
}
